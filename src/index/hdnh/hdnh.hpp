// HDNH (Zhu et al., "HDNH: a read-efficient and write-optimized hashing scheme for hybrid
// DRAM-NVM memory", ICPP '21): a two-level non-volatile table in PM in the style of Level
// hashing, mirrored slot for slot in DRAM by the Optimistic Compression Filter (OCF), plus a
// DRAM hot table with RAFL replacement. docs/schemes/hdnh.md maps the paper to this code.
//
// One file per mechanism of the paper:
//   nv_table.hpp/.cpp   §3.1 the non-volatile table: buckets, levels, candidates, bitmap commit
//   ocf.hpp/.cpp        §3.2, §3.6 the Optimistic Compression Filter and slot concurrency
//   hot_table.hpp/.cpp  §3.3 the hot table and RAFL
//   sync_write.cpp      §3.4 the synchronous write mechanism (partner threads)
//   hdnh.cpp            §3.5, §3.6 read, insert, update, delete; introspection
//   resize.cpp          §2.2, §3.7 Level-hashing resize and its crash recovery
//   recovery.cpp        §3.7 open and the rebuild of the DRAM structures
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "common/worker.hpp"
#include "index/hdnh/hot_table.hpp"
#include "index/hdnh/nv_table.hpp"
#include "index/hdnh/ocf.hpp"
#include "index/hdnh/recovery_lists.hpp"
#include "index/scheme.hpp"

namespace pmhash::hdnh {

enum class Replacement { kRafl, kLru, kOff };

// The DRAM side of one level: its OCF and its hot-table level (same buckets, fewer slots).
// Both are zeroed pages, first touched by the recovery threads.
struct Level {
  Bucket* buckets = nullptr;  // PM
  uint64_t off = 0;
  uint64_t segments = 0;
  uint64_t nbuckets = 0;
  std::atomic<uint16_t>* ocf = nullptr;                // nbuckets * kSlots
  std::atomic<uint32_t>* changes = nullptr;            // nbuckets: ocf::release_entry
  hot::Table hot;                                      // empty when the hot table is off
  std::unique_ptr<std::atomic<uint64_t>[]> hot_stamp;  // LRU: nbuckets * hot_slots
  Level() = default;
  Level(const Level&) = delete;
  Level& operator=(const Level&) = delete;
  ~Level() {
    common::unmap_zeroed(ocf, nbuckets * kSlots * sizeof(uint16_t));
    common::unmap_zeroed(changes, nbuckets * sizeof(uint32_t));
    common::unmap_zeroed(hot.base, hot.bytes);
  }
};

// The levels in search order: {top, bottom}, or {top, bottom, new top} while resizing
// (old before new, so a reader never misses a record being moved bottom -> new top).
struct LevelSet {
  Level* lv[3] = {nullptr, nullptr, nullptr};
  int n = 0;
};

class Hdnh final : public Scheme {
 public:
  struct Config {
    Replacement replacement = Replacement::kRafl;
    int hot_slots = 4;
    bool use_ocf = true;
    bool background_write = false;
    unsigned recovery_threads = 0;
  };
  // The run-time parameters (Options::params), each checked against its range.
  static Status parse_config(const common::Params& runtime, Config* cfg);
  Hdnh(SchemeContext& ctx, uint64_t root_off, const Config& cfg);
  ~Hdnh() override;
  static Status layout(const Options& o, const common::Params& given, common::Params* layout);
  static Status create(SchemeContext& ctx, std::unique_ptr<Scheme>* out);
  static Status open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out);

  Status put(std::string_view key, std::string_view value, PutMode mode) override;
  Status get(std::string_view key, std::string* value) override;
  Status remove(std::string_view key) override;
  uint64_t size() const override;
  uint64_t capacity_slots() const override;
  uint64_t dram_bytes() const override;
  void counters(std::map<std::string, double>* out) const override;
  bool check(std::string* report) const override;
  void for_each_reachable(const std::function<void(uint64_t off)>& fn) const override;
  void for_each(const std::function<void(const common::Slot&)>& fn) const override;
  bool for_each_in_pieces(const std::function<void(const common::Slot&)>& fn,
                          const std::function<void()>& piece_done) const override;
  void stop() override;  // stops the partner writers

#ifdef PMHASH_CRASH_HOOKS
  // Test seams. Runs in get() between the lock-free read and the hot-table fill.
  std::function<void()> test_before_fill;
  // Runs in find() after each OCF entry is read: (level in the set, bucket, slot).
  std::function<void(int, uint64_t, int)> test_after_entry;
  // Drops the key's hot-table copies (so the next get() reads PM and fills).
  void test_drop_hot(std::string_view key);
  // The key's hot bucket in level i of the published set, its recovery partition of
  // `parts`, and the partitions a rebuild with nt threads uses.
  uint64_t test_hot_bucket(std::string_view key, int level) const;
  unsigned test_hot_partition(std::string_view key, unsigned parts) const;
  unsigned test_recovery_parts(unsigned nt) const;
  // Bytes of hot buckets per recovery partition (0: the default, kWindowBytes).
  static inline uint64_t test_window_bytes = 0;
  // A key's value through one path only, no fill: its hot-table copy, or the OCF and PM.
  bool test_get_hot(std::string_view key, std::string* value);
  bool test_get_ocf(std::string_view key, std::string* value);
  int test_levels() const {
    return levels_.load()->n;
  }
#endif

 private:
  void walk_buckets(const Level& l, uint64_t first, uint64_t end,
                    const std::function<void(const common::Slot&)>& fn) const;
  bool write_in_flight(const Level& l, uint64_t b) const;
  struct Hashed {
    uint64_t h1, h2, kw;
    uint8_t fp;
  };
  struct Loc {
    Level* level = nullptr;
    uint64_t bucket = 0;
    int slot = -1;
    uint16_t entry = 0;  // the OCF entry seen
  };
  struct Candidates {
    uint64_t b[4];
    int n;
  };
  struct alignas(64) ThreadStats {
    std::atomic<uint64_t> pos_reads{0}, neg_reads{0}, pm_slots_pos{0}, pm_slots_neg{0};
    std::atomic<uint64_t> hot_hits{0}, retries{0}, in_place_updates{0};
    std::atomic<int64_t> items{0};
  };
  struct Partner;  // the background thread of the synchronous write mechanism (§3.4)
  // A hot-table slot locked (opmap) for a write: its metadata when locked, and whether it
  // held the key being written (an in-place update keeps its hotmap bit).
  struct HotTarget {
    Level* level;
    uint64_t bucket;
    int e;
    uint16_t meta;
    bool same_key;
  };
  // A prepared hot-table put: the new copy (payload) and the locked target slots. The
  // first target receives the copy; the others (further copies of the key) are dropped.
  struct HotWrite {
    hot::Payload pay;
    HotTarget t[3 * kSlots];
    int n = 0;
    bool evicts = false;
  };
  // The hot-table half of one write (§3.4), on the writer's stack.
  struct HotJob {
    int op = 0;  // 0 none, kHotPut, kHotRemove
    const LevelSet* set = nullptr;
    Hashed k{};
    std::string_view key, value;
    HotWrite w;
    bool ran = false;  // prepared (put) or done (remove)
    Partner* partner = nullptr;
  };
  class StripeLock;

  Hashed hashed(std::string_view key) const;
  Hashed hashed_slot(uint64_t key_word) const;
  Candidates candidates(const Level& l, const Hashed& k) const;
  // The hot table has one candidate bucket per level (§3.3). Inline: the recovery computes
  // it a few times per record.
  uint64_t hot_bucket(const Level& l, const Hashed& k) const {
    uint64_t sa = common::fast_range(static_cast<uint32_t>(k.h1 >> 32), l.segments);
    return sa * m_ + ((k.h1 >> 8) & (m_ - 1));
  }
  Level* make_level(uint64_t off, uint64_t segments);
  void publish_levels(std::initializer_list<Level*> lv);
  std::atomic<uint32_t>& stripe(uint64_t h) const {
    return stripes_[h & (kStripes - 1)];
  }
  ThreadStats& stats() const {
    return tstats_[threads_.id()];
  }

  // Lookup through the OCF (§3.5 steps 2-3): false if absent. Takes no lock.
  bool find(const LevelSet& set, const Hashed& k, std::string_view key, Loc* loc,
            uint64_t* value_word, bool* retry, uint64_t* pm_slots) const;
  // Claims (opmap) a free slot among the insert candidates; false if all are full.
  bool claim_free(const LevelSet& set, const Hashed& k, Loc* loc);
  bool claim_in(Level& l, uint64_t bucket, Loc* loc);
  bool lock_slot(Loc* loc);  // opmap on a valid slot, if it still holds what was seen
  void unlock_slot(const Loc& loc, bool is_valid, uint8_t fp);
  // Changes a PM bitmap failure-atomically: one atomic RMW, persisted.
  void commit_bitmap(Bucket& b, uint64_t set, uint64_t clear);

  // Hot table (§3.3).
  bool hot_get(const LevelSet& set, const Hashed& k, std::string_view key, std::string* value);
  // A put in two steps: prepare (make the copy, lock the target slots; nothing visible),
  // publish (after the PM commit).
  void hot_prepare(const LevelSet& set, const Hashed& k, std::string_view key,
                   std::string_view value, HotWrite* w);
  void hot_publish(const Hashed& k, HotWrite& w);
  void hot_remove(const LevelSet& set, const Hashed& k, std::string_view key);
  void hot_fill(const LevelSet& set, const Hashed& k, std::string_view key);
  // The copy of key -> value a hot slot holds (variable: inline if small, else a HotItem).
  hot::Payload hot_payload(std::string_view key, std::string_view value) const;
  hot::Payload hot_load(const hot::Table& t, uint64_t b, int e) const;
  bool hot_snapshot(const hot::Table& t, uint64_t b, int e, uint16_t m, hot::Payload* p) const;
  void hot_store(const hot::Table& t, uint64_t b, int e, uint64_t kw, const hot::Payload& p);
  void hot_release(const hot::Payload& p);                      // unpublished: freed after an epoch
  void hot_free_now(const hot::Payload& p) const;               // never published, or at teardown
  void hot_free_level(const Level& l) const;                    // every copy of a level (teardown)
  std::string_view hot_key_bytes(const hot::Payload& p) const;  // variable
  void hot_value(const hot::Payload& p, std::string* value) const;
  bool hot_matches(uint64_t kw, const hot::Payload& p, const Hashed& k, std::string_view key) const;
  // Synchronous write (§3.4): begin hands the job to the partner (background) while this
  // thread writes PM; finish, after the PM commit, waits for it (or runs it, inline) and
  // publishes a put.
  void hot_begin(HotJob* j, int op, const LevelSet& set, const Hashed& k, std::string_view key,
                 std::string_view value);
  void hot_finish(HotJob* j);
  void run_hot_job(HotJob* j);
  void run_partner(Partner* p);  // the partner thread's task
  Partner* partner();

  // Resizing (§2.2, §3.7).
  Status resize(uint64_t seen_seq);
  Status attach_new_top();
  Status rehash();
  bool rehash_bucket(uint64_t b);
  void fix_partial_bucket();  // after a crash inside rehash_bucket
  bool bucket_live(const Level& l, uint64_t b) const;

  // Recovery (§3.7): one traversal per hot-bucket partition rebuilds the OCF and fills the
  // partition's hot buckets; the records it could not place are filled in a second pass.
  // A partition of the traversal: bottom hot buckets [lo, hi) of `parts`, the lists of the
  // records for other partitions, and the last kAhead records for [lo, hi), placed kAhead
  // records after their hot buckets were prefetched.
  struct Window {
    static constexpr uint64_t kAhead = 16;
    uint64_t lo, hi;
    unsigned parts;
    RecordLists* found;
    uint64_t seen = 0;  // records for [lo, hi) so far
    HotRecord ahead[kAhead];
  };
  void rebuild_dram();
  unsigned recovery_parts(const LevelSet& set, unsigned nt) const;
  unsigned hot_partition(const LevelSet& set, const Hashed& k, unsigned parts) const;
  uint64_t thread_slots(const LevelSet& set, unsigned t, unsigned k, unsigned parts) const;
  int64_t rebuild_partition(const LevelSet& set, unsigned q, unsigned parts, RecordLists* found);
  int rebuild_bucket(const LevelSet& set, Level& l, uint64_t b, Window& w);
  void place_ahead(const LevelSet& set, Window& w, const HotRecord& r);
  void place_rest(const LevelSet& set, Window& w);
  void prefetch_hot(const LevelSet& set, uint64_t h1) const;
  void fill_hot_partition(const LevelSet& set,
                          const std::vector<std::unique_ptr<RecordLists>>& found, unsigned p,
                          unsigned k);
  void prefault_window(const LevelSet& set, unsigned q, unsigned parts) const;
  void hot_place(const LevelSet& set, const HotRecord& r);

  pm::Pool& pool_;
  pm::Allocator& alloc_;
  pm::Epochs& epochs_;
  pm::ThreadRegistry& threads_;
  const common::Items& items_;
  uint64_t root_off_;
  Root* root_;
  uint64_t m_;  // buckets per segment
  Config cfg_;
  std::atomic<LevelSet*> levels_{nullptr};
  std::atomic<uint64_t> resize_seq_{0};  // odd while the level set has three levels
  mutable std::shared_mutex resize_mu_;  // writers shared, the resizer exclusive
  static constexpr uint64_t kStripes = 4096;
  std::unique_ptr<std::atomic<uint32_t>[]> stripes_;  // writers of one key (see docs)
  std::unique_ptr<ThreadStats[]> tstats_;
  std::atomic<uint64_t> clock_{0};  // LRU stamps
  std::atomic<uint64_t> resizes_{0}, rehashed_{0}, hot_evictions_{0};
  std::atomic<bool> resize_blocked_{false};
  std::mutex partners_mu_;  // creation and stop()
  std::unique_ptr<std::unique_ptr<Partner>[]> partners_;
  int64_t base_items_ = 0;  // records found by rebuild_dram()
  double recovery_ms_ = 0;
  double recovery_hot_ms_ = 0;  // of which the hot table (Table 1 splits them)
};

}  // namespace pmhash::hdnh
