// SmartHT (Xiao et al., "Accelerating Persistent Hash Indexes via Reducing Negative
// Searches"): persistent chained hashing in PM (the Persistent Data Layer) screened by a DRAM
// Bloom filter (the Volatile Filter Layer). docs/schemes/smartht.md maps the paper to code.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "common/bloom_filter.hpp"
#include "common/worker.hpp"
#include "index/scheme.hpp"
#include "index/smartht/bucket.hpp"

namespace pmhash::smartht {

// PM root (64 B).
struct Root {
  uint64_t magic;
  uint64_t nheads;        // N head buckets
  uint64_t heads;         // offset of the head bucket array
  uint64_t stripe;        // head buckets per lock stripe (256)
  uint64_t saved_filter;  // offset of the VFL saved at the last clean shutdown, or 0
  // §III-D's nonCrashed flag: 1 only while `saved_filter` holds the complete VFL of the last
  // clean shutdown; set back to 0 (persisted) at every open, before any write.
  uint64_t non_crashed;
  uint64_t reserved[2];
};
inline constexpr uint64_t kRootMagic = 0x5448'5452'414D'53ull;  // "SMARTHT"

// The VFL saved at a clean shutdown: | nbits | capacity | adds | nstripes | reserved |
// {live items, chained buckets}[nstripes] | filter words[nbits/64] |
inline constexpr uint64_t kSavedHeaderWords = 5;

class SmartHT final : public Scheme {
 public:
  enum class Start { kFresh, kCleanReopen, kAfterCrash };
  SmartHT(SchemeContext& ctx, uint64_t root_off, Start start);
  ~SmartHT() override;
  static Status layout(const Options& o, const common::Params& given, common::Params* layout);
  struct Runtime {
    bool filter = true;             // `filter`: the DRAM filter (off: every lookup reads PM)
    uint64_t recovery_threads = 1;  // `recovery_threads`: filter rebuild threads (default: cores)
  };
  static Status parse_runtime(const common::Params& params, Runtime* out);
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
  void close() override;
  void stop() override;

  // Waits for a background filter rebuild (recovery or resize) to finish.
  void wait_for_filter() const;
  void wait_idle() override { wait_for_filter(); }

 private:
  struct alignas(64) Stripe {
    mutable std::shared_mutex lock;   // Fig. 4: one shared/exclusive lock per 256 head buckets
    std::atomic<uint64_t> live{0};    // live items in the stripe (changed under the lock)
    std::atomic<uint64_t> chains{0};  // chained buckets in the stripe (changed under the lock)
  };
  struct alignas(64) ThreadStats {
    std::atomic<uint64_t> filter_negatives{0}, filter_false_positives{0}, pm_searches{0};
  };
  struct Hashed {
    uint64_t h, kw;
    uint64_t head;
  };
  Hashed hashed(std::string_view key) const;
  Bucket* head(uint64_t i) const { return pool_.ptr<Bucket>(root_->heads) + i; }
  Bucket* bucket_at(uint64_t off) const { return pool_.ptr<Bucket>(off); }
  // The chained bucket after b for the walks that must survive a damaged pool (check, size,
  // for_each, the filter rebuild): null at the chain's end, when b->next is not an allocated
  // 64-byte block, or after more links than the pool has 64-byte blocks (a cycle).
  const Bucket* next_checked(const Bucket* b, uint64_t steps) const {
    if (b->next == 0 || steps > pool_.size() / sizeof(Bucket) ||
        alloc_.block_size(b->next) != sizeof(Bucket))
      return nullptr;
    return bucket_at(b->next);
  }
  Stripe& stripe_of(uint64_t head) const { return stripes_[head / root_->stripe]; }
  // Chain search under the stripe lock: the bucket and slot holding the key, if any.
  // `prev` (optional): the bucket before *b, null when *b is the head bucket.
  // A link that is not a bucket sets *damaged (kCorrupted: damaged_chain) instead of being
  // followed: get/put/remove trust no chain link, as a clean open does not walk the chains.
  bool find(const Hashed& k, std::string_view key, Bucket** b, int* slot, bool* damaged,
            Bucket** prev = nullptr) const;
  Status damaged_chain(uint64_t head_bucket) const;
  // Under the stripe lock; null: the chain is full (or *damaged).
  Bucket* free_slot_bucket(Bucket* h, bool* damaged) const;
  // Unlinks the emptied chained bucket b (after prev) and frees it, with `item` if non-zero.
  void reclaim(Bucket* prev, Bucket* b, uint64_t item);
  // DRAM filters alive (current, being built, retired and not yet freed). Shared with the
  // epoch callbacks that free retired filters, which may run after the scheme is gone.
  struct FilterAccounting {
    std::atomic<uint64_t> alive{0}, bytes{0};
  };
  common::BloomFilter* make_filter(uint64_t capacity);  // null: no memory
  common::BloomFilter* adopt_filter(std::unique_ptr<common::BloomFilter> f);
  static void free_filter(FilterAccounting& acc, common::BloomFilter* f);
  bool load_saved_filter();
  void invalidate_saved_filter();
  void save_filter(const common::BloomFilter& f);
  uint64_t chain_buckets() const;
  uint64_t live_items() const;
  void add_to_filters(uint64_t h);  // under the stripe's exclusive lock
  bool filter_too_small() const;
  uint64_t resized_capacity(uint64_t live) const;  // keys a rebuilt filter is sized for
  void rebuild_filter();                           // the worker's task: recovery or resize
  // Scans the PDL with `recovery_threads_` threads into f (null: counts only); *scanned: the
  // live keys found. False if stopped.
  bool build_filter(common::BloomFilter* f, uint64_t* scanned);
  void maybe_resize_filter();
  static void bump(std::atomic<uint64_t>& c) {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  pm::Pool& pool_;
  pm::Allocator& alloc_;
  pm::Epochs& epochs_;
  pm::ThreadRegistry& threads_;
  const common::Items& items_;
  uint64_t root_off_;
  Root* root_;
  uint64_t nstripes_;
  std::unique_ptr<Stripe[]> stripes_;
  bool use_filter_;
  uint64_t recovery_threads_;  // filter rebuild threads
  uint64_t initial_capacity_;
  // The VFL: lookups use `filter_` (null while a crash recovery rebuilds it: bypassed);
  // inserts also add to `building_` while a rebuild scans, so it misses nothing.
  std::atomic<common::BloomFilter*> filter_{nullptr};
  std::atomic<common::BloomFilter*> building_{nullptr};
  // Keys whose bits the current filter holds: live ones and those deleted since its build
  // (their bits stay set). Compared with its capacity to decide a rebuild.
  std::atomic<uint64_t> adds_{0};
  std::atomic<uint64_t> sized_for_{0};  // the live keys the current filter was sized from
  std::atomic<uint64_t> rebuilds_{0};
  // Filters the kernel had no memory for (make_filter); a resize tries again after a pause.
  std::atomic<uint64_t> filter_no_memory_{0};
  static constexpr std::chrono::seconds kRetryAfterNoMemory{1};
  std::atomic<uint64_t> reclaimed_{0};  // chained buckets unlinked and freed by deletes
  std::atomic<double> last_build_ms_{0};
  // The last build's end and duration (the worker's own: rebuild_filter paces resizes).
  std::chrono::steady_clock::time_point last_build_end_{};
  std::chrono::steady_clock::duration last_build_time_{};
  std::atomic<bool> counts_valid_{false};  // stripe counts known (after the first scan)
  std::shared_ptr<FilterAccounting> filters_{std::make_shared<FilterAccounting>()};
  std::unique_ptr<ThreadStats[]> tstats_;
  // Filter builds (crash recovery, resizing) run on one worker, started by the first
  // request (a process that forks keeps no idle thread per index) and stopped by stop() or
  // the destructor; `rebuilder_` is null until then.
  common::Worker* start_rebuilder();  // null once stopped
  std::mutex worker_mu_;
  bool stopped_ = false;                    // under worker_mu_
  std::unique_ptr<common::Worker> worker_;  // under worker_mu_
  std::atomic<common::Worker*> rebuilder_{nullptr};
};

}  // namespace pmhash::smartht
