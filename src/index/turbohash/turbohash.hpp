// TurboHash (Zhao, Zhong, Jiang, SYSTOR '23): sharded linear probing with lock-free reads,
// near-place updates and per-shard resizing. docs/schemes/turbohash.md maps the paper to
// this code.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "common/shard_word.hpp"
#include "common/tag_match.hpp"
#include "index/scheme.hpp"
#include "index/turbohash/bucket.hpp"

namespace pmhash::turbohash {

// PM root object (64 B).
struct Root {
  uint64_t magic;  // kRootMagic
  uint64_t nshards;
  uint64_t scope;      // probing scope in buckets (MAX_DISTANCE)
  uint64_t directory;  // offset of nshards Descriptors
  uint64_t reserved[4];
};
inline constexpr uint64_t kRootMagic = 0x4853'4842'5254'5554ull;  // "TURBHSH"

// Shard descriptor in PM (§3.1): two {bucket count, shard offset} sets, each packed into one
// word (count << 44 | offset), and a version whose low bit names the live set. A resize
// writes the inactive set, persists it, then flips the version with one 8-byte store.
struct Descriptor {
  uint64_t set[2];
  uint64_t version;
  uint64_t reserved;
};
static_assert(sizeof(Descriptor) == 32);

// Test-only fault injection (pm::Pool::mutations), proving the crash harness has teeth.
inline constexpr uint64_t kMutationSkipSlotFlush = 1;       // publish a slot never flushed
inline constexpr uint64_t kMutationPublishBeforeWrite = 2;  // resize: publish, then write

// §4.6 triggers (the paper gives no number): a delete that leaves at least a quarter of the
// shard's slots deleted rehashes it at the same size; so does an insert that finds no room
// in its probing scope while at least an eighth are deleted (else the shard doubles).
inline constexpr uint64_t kGcOnDelete = 4;
inline constexpr uint64_t kGcOnOverflow = 8;

using common::kMaxShardBuckets;
using common::pack;
using common::packed_count;
using common::packed_offset;

class TurboHash final : public Scheme {
 public:
  TurboHash(SchemeContext& ctx, uint64_t root_off);
  static Status layout(const Options& o, const common::Params& given, common::Params* layout);
  struct Runtime {
    bool simd = true;                  // `simd`: SIMD tag matching (off: the scalar loop)
    bool gc = true;                    // `gc`: §4.6 same-size rehash of shards with many deletes
    uint64_t test_pause_us = 0;        // `test_pause_after_retire_us`, PMHASH_CRASH_HOOKS only
    uint64_t test_sweep_pause_us = 0;  // `test_sweep_pause_us`: per shard the sweep walks
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
  void wait_idle() override;
  void stop() override;

 private:
  uint64_t reported_meta(const Bucket& b) const;
  void walk_buckets(uint64_t packed, uint64_t first, uint64_t end,
                    const std::function<void(const common::Slot&)>& fn) const;
  // The DRAM mirror of a descriptor, with the shard's WriteLock (§3.1), and the shard's
  // count of deleted slots for §4.6 (writers only, under the lock; counted on first need
  // after an open, so recovery stays a directory read).
  struct alignas(64) ShardMirror {
    std::atomic<uint64_t> packed{0};
    std::mutex write_lock;
    uint64_t deleted = 0;
    bool deleted_known = false;
  };
  struct alignas(64) ThreadStats {
    std::atomic<uint64_t> pos_reads{0}, pos_probes{0}, neg_reads{0}, neg_probes{0};
    std::atomic<uint64_t> resizes{0}, moved{0}, retries{0};
    std::atomic<uint64_t> gc_rehashes{0}, gc_dropped{0}, gc_fences{0};
  };
  struct Hashed {
    uint64_t h, kw;
    uint32_t shard;
    uint8_t tag;
  };
  Hashed hashed(std::string_view key) const;
  Bucket* shard_buckets(uint64_t packed) const { return pool_.ptr<Bucket>(packed_offset(packed)); }
  uint64_t home(uint64_t h, uint64_t n) const { return common::fast_range(uint32_t(h), n); }
  // §3.5 (grow) and §4.6 (same size, drops deleted slots); caller holds the write lock.
  Status resize(uint32_t shard, bool same_size);
  uint64_t& deleted_slots(ShardMirror& sm) const;
  bool gc_due(ShardMirror& sm, uint64_t divisor) const;
  uint64_t deleted_slots_now() const;
  template <class F>
  uint64_t sum_over_buckets(F f) const;
  bool place(Bucket* b0, uint64_t n, const common::Slot& s) const;
  void test_pause_after_retire() const;
  void walk_locked(const std::function<void(uint64_t off)>& fn) const;
  void walk_shard(uint64_t packed, const std::function<void(uint64_t off)>& fn) const;
  static void bump(std::atomic<uint64_t>& c, uint64_t d = 1) {
    c.store(c.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }

  pm::Pool& pool_;
  pm::Allocator& alloc_;
  pm::Epochs& epochs_;
  pm::ThreadRegistry& threads_;
  const common::Items& items_;
  uint64_t root_off_;
  Root* root_;
  Descriptor* dir_;
  uint64_t nshards_, scope_;
  common::TagMatchFn match_;
  std::unique_ptr<ShardMirror[]> shards_;
  std::unique_ptr<ThreadStats[]> tstats_;
  bool gc_;                       // run-time `gc`
  uint64_t test_pause_us_;        // run-time `test_pause_after_retire_us`, PMHASH_CRASH_HOOKS only
  uint64_t test_sweep_pause_us_;  // run-time `test_sweep_pause_us`, PMHASH_CRASH_HOOKS only
  std::unique_ptr<BackgroundSweep> sweep_;  // after a crash (variable format); last member
};

}  // namespace pmhash::turbohash
