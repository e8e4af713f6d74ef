// PMEH (Hu et al., "PMEH: A Parallel and Write-Optimized Extendible Hashing for Persistent
// Memory", IEEE TCAD 2023): extendible hashing with a directory array (lock-free directory
// expansion), zones bound to threads (opportunistic lock-free writes), multisplit with
// gradual splitting, and Dash's buckets. docs/schemes/pmeh.md maps the paper to this code.
//
// One file per mechanism of the paper:
//   directory.hpp/.cpp  the directory array and directories (§III-B2, Algorithms 2, 3, 5)
//   zones.hpp           zones and their exclusive / request / shared states (§III-B1, §III-D)
//   segment.hpp/.cpp    segments and Dash buckets (§III-A, §III-C, Algorithm 1)
//   split.hpp/.cpp      multisplit with gradual splitting (§III-E)
//   recovery.cpp        instant recovery (§III-F); validate.cpp checks a pool before open
//   pmeh.cpp            get / put / remove (Algorithms 4-7), creation, introspection
#pragma once

#include <atomic>
#include <bit>
#include <memory>
#include <mutex>
#include <vector>

#include "index/pmeh/directory.hpp"
#include "index/pmeh/segment.hpp"
#include "index/pmeh/split.hpp"
#include "index/pmeh/zones.hpp"
#include "index/scheme.hpp"

namespace pmhash::pmeh {

class Pmeh final : public Scheme {
 public:
  Pmeh(SchemeContext& ctx, uint64_t root_off);
  ~Pmeh() override;
  static Status layout(const Options& o, const common::Params& given, common::Params* layout);
  // `concurrency` (§III-D, Fig. 14): opportunistic (the paper's scheme: a zone's own thread
  // writes lock-free, other threads help under locks), partition (partition-only, the
  // paper's Fig. 14 baseline: a write from a thread that does not own the key's zone is
  // refused, so no thread helps another), locked (every write takes bucket locks; the old
  // `opportunistic=off`).
  enum class Concurrency { kOpportunistic, kPartition, kLocked };
  struct Runtime {
    uint64_t zone_threads = 1;  // `zone_threads`: threads bound to zones (default: cores)
    Concurrency concurrency = Concurrency::kOpportunistic;
    uint64_t test_sweep_pause_us = 0;  // `test_sweep_pause_us` (BackgroundSweep), tests only
  };
  static Status parse_runtime(const common::Params& params, Runtime* out);
  static Status create(SchemeContext& ctx, std::unique_ptr<Scheme>* out);
  static Status open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out);

  Status put(std::string_view key, std::string_view value, PutMode mode) override;
  Status get(std::string_view key, std::string* value) override;
  Status remove(std::string_view key) override;
  uint64_t size() const override;
  uint32_t partitions() const override { return zone_threads_; }
  uint32_t owner(std::string_view key) const override {
    return zone_of(common::Items::hash(key)) % zone_threads_;
  }
  uint32_t partition_of_thread(unsigned tid) const override {
    return tid < zone_threads_ ? tid : kNoPartition;
  }
  uint64_t capacity_slots() const override;
  uint64_t dram_bytes() const override;
  void counters(std::map<std::string, double>* out) const override;
  bool check(std::string* report) const override;
  void for_each_reachable(const std::function<void(uint64_t off)>& fn) const override;
  void wait_idle() override;
  void stop() override;
  void for_each(const std::function<void(const common::Slot&)>& fn) const override;
  bool for_each_in_pieces(const std::function<void(const common::Slot&)>& fn,
                          const std::function<void()>& piece_done) const override;

  // Overflow metadata that points at no stashed record, over every segment (tests; check()
  // reports it as a problem in segments the lazy crash recovery has already visited).
  uint64_t stale_overflow_entries() const;

 private:
  struct Hashed {
    uint64_t h, kw;
    uint8_t fp;
  };
  struct Loc {
    Bucket* b = nullptr;
    int slot = -1;
    bool stash = false;
    int home_ofp = -1;  // the overflow fingerprint that points at it (-1: counted)
    Bucket* ofp_bucket = nullptr;
  };
  struct alignas(64) ThreadStats {
    std::atomic<uint64_t> lock_free{0}, locked{0}, retries{0};
    std::atomic<uint64_t> bucket_locks{0};  // taken by shared-mode writes (splits not counted)
  };
  // One piece of overflow metadata that points at no stashed record: fingerprint `entry` of
  // bucket b, or (entry -1) b's overflow count, which should be `count`.
  struct StaleOverflow {
    Bucket* b;
    int entry;
    uint8_t count;
  };

  static constexpr uint64_t kNoExpansion = ~uint64_t{0};

  Hashed hashed(std::string_view key) const;
  uint32_t zone_of(uint64_t h) const {
    return zone_bits_ ? static_cast<uint32_t>(h >> (64 - zone_bits_)) : 0;
  }
  Directory* dir(uint64_t n) const;  // directory number n, or null (freed, or its entry reused)
  static uint64_t oldest_possible(uint64_t k) { return k >= kMaxDirs - 1 ? k - (kMaxDirs - 1) : 0; }
  SegmentHeader* segment(uint64_t off) const { return pool_.ptr<SegmentHeader>(off); }
  Bucket* buckets(SegmentHeader* s) const { return reinterpret_cast<Bucket*>(s + 1); }
  uint64_t bucket_of(uint64_t h) const {
    return common::fast_range(static_cast<uint32_t>(h), nbuckets_);
  }
  bool covers(uint64_t meta, uint64_t h) const;
  uint64_t find_segment(uint64_t h, bool* from_latest) const;
  uint64_t zone_segment(uint32_t z, uint64_t h);

  ZoneMode enter(uint32_t z, bool local) { return zones_.enter(z, local); }
  void exit(uint32_t z, ZoneMode m) { zones_.exit(z, m); }
  bool is_local(uint32_t z) const;
  Status refuse_foreign(uint32_t z) const;

  // Buckets (Dash: balanced insert, displacement, stash).
  // The first access after an open checks and recovers the segment (recovery.cpp);
  // kCorrupted, writing nothing, if it is damaged.
  Status ensure_recovered(SegmentHeader* s, uint64_t h);
  Status check_first_access(const SegmentHeader* s, uint64_t lock_gen, uint64_t h) const;
  bool crash_version_used(uint64_t lock_gen) const;
  bool recovered(const SegmentHeader* s) const;
  std::vector<uint32_t> kept_alloc(SegmentHeader* s) const;
  std::vector<uint32_t> live_alloc(SegmentHeader* s) const;
  std::vector<StaleOverflow> stale_overflow(SegmentHeader* s) const;
  void trim_overflow(SegmentHeader* s);
  void lock_buckets(SegmentHeader* s, uint64_t b, ZoneMode m, ThreadStats& ts);  // b, b+1
  void unlock_buckets(SegmentHeader* s, uint64_t b);
  void lock_stash(Bucket& sb, ZoneMode m, ThreadStats& ts);  // only to store into it
  static void count_locks(ThreadStats& ts, ZoneMode m, uint64_t n) {
    if (m == ZoneMode::kShared) ts.bucket_locks.fetch_add(n, std::memory_order_relaxed);
  }
  static void lock_bucket(Bucket& b, ZoneMode m);
  static bool try_lock_bucket(Bucket& b, ZoneMode m);
  static void unlock_bucket(Bucket& b);
  bool seg_find(SegmentHeader* s, const Hashed& k, std::string_view key, Loc* loc,
                uint64_t* value_word, bool* retry) const;
  bool slot_in(Bucket& b, bool membership, const Hashed& k, std::string_view key, int* slot,
               uint64_t* vw) const;
  Status seg_insert(SegmentHeader* s, uint64_t b, const Hashed& k, const common::Items::New& item,
                    ZoneMode m, ThreadStats& ts, bool* full);
  void write_record(Bucket& b, int slot, bool membership, uint8_t fp, uint64_t kw, uint64_t vw);
  void clear_record(Bucket& b, int slot, uint64_t free_off);
  bool register_overflow(Bucket* bs, uint64_t b, uint8_t fp, int stash_idx);

  // Expansion (§III-B2, §III-E).
  Status split_or_expand(uint64_t seg_off, uint64_t h, uint32_t z, ZoneMode m, uint64_t* expand);
  Status expand_directory(uint64_t from);
  Status publish_directory(uint64_t from);
  void fill_every_zone(uint64_t k);
  void update_zone_entries(uint32_t z, uint64_t k);
  Status split_out(uint64_t seg_off, uint64_t k, uint32_t child, uint32_t z, ZoneMode m);
  bool build_child(SegmentHeader* s, uint64_t meta, uint32_t child, SegmentHeader* n,
                   uint64_t* moved);
  void persist_child(SegmentHeader* n);
  void note_split_fill(const Bucket* bs, uint64_t total);
  bool place_moved(Bucket* nb, const common::Slot& sl, uint64_t h);
  void publish_split(uint32_t z, uint64_t k, uint64_t seg_off, const pm::Reservation& r,
                     uint32_t child, uint64_t meta);
  void finish_split(uint32_t z);  // steps after the commit; redone by recovery
  void recover();                 // §III-F at construction: every zone's split record
  void free_old_directories(uint64_t k);
  std::vector<uint64_t> distinct_segments() const;
  void flush_if_written(const Bucket& b, uint32_t reported) const;  // for size(), for_each()
  void sweep_walk(const std::function<void(uint64_t off)>& fn);     // recovery.cpp

  pm::Pool& pool_;
  pm::Allocator& alloc_;
  pm::Epochs& epochs_;
  pm::ThreadRegistry& threads_;
  const common::Items& items_;
  uint64_t root_off_;
  Root* root_;
  uint32_t shift_, zone_bits_;
  uint64_t nbuckets_;  // normal buckets per segment
  uint64_t seg_bytes_;
  uint64_t gen_;
  Runtime rt_;
  unsigned zone_threads_;
  bool opportunistic_;  // zones have lock-free owners (concurrency opportunistic or partition)
  bool partition_only_;
  std::atomic<uint64_t> latest_{0};
  Zones zones_;
  std::mutex dir_mu_;
  std::unique_ptr<ThreadStats[]> tstats_;
  std::atomic<uint64_t> splits_{0}, moved_{0}, expansions_{0}, displaced_{0}, stashed_{0};
  std::atomic<uint64_t> forced_fills_{0};
  uint64_t open_segments_read_ = 0;  // segments open (validation, recovery) read: counter
  std::atomic<uint64_t> split_fill_min_{1000};  // per mille; 1000 until the first split  //
                                                // expansions that found the directory array full
  std::unique_ptr<BackgroundSweep> sweep_;      // after a crash (variable format); last member
};

// Segments read at open (header or buckets) by validation (validate.cpp) and recovery, counted
// in the opening thread from validate() on and taken by the constructor as the counter
// open_segments_read: the work of an open, which instant recovery keeps independent of the
// number of keys (tests/pmeh_test.cpp).
uint64_t& open_segment_reads();

}  // namespace pmhash::pmeh
