// LineHT: pmhash's own scheme, composed from the five papers for memory read in 64-byte
// lines (CXL, DRAM-backed pools, PM without Optane's 256-byte blocks). One-line buckets
// written with one flush and one fence (SmartHT's merged flush, WOPHI's log-free 8-byte
// commit), a DRAM filter word per bucket so a lookup reads PM only where a 16-bit tag
// matches (HDNH's OCF, SmartHT's VFL), shards resized one at a time by copy-on-write
// (TurboHash §3.5) and instant recovery with the DRAM filter rebuilt lazily per shard
// (TurboHash §3.7). docs/schemes/lineht.md maps each part to its paper.
#pragma once

#include <atomic>
#include <memory>

#include "common/shard_word.hpp"
#include "common/spin_lock.hpp"
#include "common/zeroed_map.hpp"
#include "index/lineht/bucket.hpp"
#include "index/scheme.hpp"

namespace pmhash::lineht {

// PM root object (64 B).
struct Root {
  uint64_t magic;  // kRootMagic
  uint64_t nshards;
  uint64_t probe;      // the longest probe sequence, in buckets
  uint64_t directory;  // offset of nshards shard words
  uint64_t reserved[4];
};
inline constexpr uint64_t kRootMagic = 0x5448'454e'494c'4850ull;  // "PHLINEHT"

// A shard word of the directory (common/shard_word.hpp). A resize publishes a new shard by
// one 8-byte store of this word (in the allocator's commit).
using common::kMaxShardBuckets;
using common::pack;
using common::packed_count;
using common::packed_offset;
inline constexpr uint64_t kMaxProbe = 64;  // distances up to 63: the filter word's 6-bit reach
// 64, not 32: a bounded linear probe fails at a lower load factor the longer the shard (its
// longest run grows with the log of its length), and a shard grown from empty to 20M / 256
// keys resized at a mean of 0.82 with 32 (0.89 with 64). Placement does not depend on the
// bound until a shard fails, so reads at a given load factor cost the same with either.
inline constexpr uint64_t kDefaultProbe = 64;
// The capacity hint sizes the table for this load factor (percent) when the hinted number
// of keys is in (docs/schemes/lineht.md "Load factor at a resize").
inline constexpr uint64_t kHintLoad = 72;
// The most shards a capacity hint gives by default: an open checks every shard word, so past
// ~9M keys the default 64 buckets per shard are doubled instead, up to kHintMaxShardBuckets
// (docs/schemes/lineht.md "A bounded directory"). Then more shards again: longer shards
// resize at a lower load factor once the table outgrows its hint (mean 0.866 at 2,048
// buckets, 0.848 at 4,096, 0.819 at 16,384; issue 19 asks for 0.85).
inline constexpr uint64_t kHintMaxShards = uint64_t{1} << 16;
inline constexpr uint64_t kHintMaxShardBuckets = uint64_t{1} << 11;
inline constexpr uint64_t kMaxShards = uint64_t{1} << 24;

// Test-only fault injection (pm::Pool::mutations), proving the crash harness has teeth.
inline constexpr uint64_t kMutationCommitBeforeSlot = 16;  // insert: commit, then write the slot

class LineHT final : public Scheme {
 public:
  LineHT(SchemeContext& ctx, uint64_t root_off);
  static Status layout(const Options& o, const common::Params& given, common::Params* layout);
  struct Runtime {
    bool filter = true;    // `filter`: readers consult the DRAM filter (off: PM buckets only)
    bool prefetch = true;  // `prefetch`: the home PM line fetched beside its filter word
  };
  static Status parse_runtime(const common::Params& params, Runtime* out);
  static Status create(SchemeContext& ctx, std::unique_ptr<Scheme>* out);
  static Status open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out);

  Status put(std::string_view key, std::string_view value, PutMode mode) override;
  Status get(std::string_view key, std::string* value) override;
  Status remove(std::string_view key) override;
  void prefetch_key(std::string_view key) const override;
  uint64_t size() const override;
  uint64_t capacity_slots() const override;
  uint64_t dram_bytes() const override;
  void counters(std::map<std::string, double>* out) const override;
  bool check(std::string* report) const override;
  void for_each_reachable(const std::function<void(uint64_t off)>& fn) const override;
  void for_each(const std::function<void(const common::Slot&)>& fn) const override;
  bool for_each_in_pieces(const std::function<void(const common::Slot&)>& fn,
                          const std::function<void()>& piece_done) const override;

 private:
  uint64_t reported_meta(const Bucket& b) const;
  void walk_buckets(uint64_t packed, uint64_t first, uint64_t end,
                    const std::function<void(const common::Slot&)>& fn) const;
  // A shard as a lookup sees it, computed from its 8-byte shard word alone: the PM bucket
  // array and its filter words, which sit at the PM array's line index in the filter array
  // (one word per 64-byte line of the pool). Nothing to load between the word and both.
  struct Shard {
    uint64_t packed, n;
    Bucket* b0;
    std::atomic<uint64_t>* f;
    uint64_t word(uint64_t i) const { return f[i].load(std::memory_order_acquire); }
    void set(uint64_t i, uint64_t w) const { f[i].store(w, std::memory_order_release); }
  };
  class Locked {  // holds a shard's write lock
   public:
    explicit Locked(std::atomic<uint32_t>& w) : w_(w) { common::lock_word(w_); }
    ~Locked() { common::unlock_word(w_); }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    std::atomic<uint32_t>& w_;
  };
  struct alignas(64) ThreadStats {
    std::atomic<uint64_t> pm_reads{0}, reads{0}, resizes{0}, moved{0}, retries{0};
    std::atomic<uint64_t> spares{0}, spares_used{0};  // LineHT::prepare_spare, resize
    // What a filtered lookup read (exact): filter words, the DRAM lines holding them, PM
    // lines other than the (prefetched) home line; hits and their distance from home.
    std::atomic<uint64_t> filter_words{0}, filter_lines{0}, off_home{0}, hits{0}, hit_distance{0};
    std::atomic<uint64_t> inserts{0}, removes{0};  // the live count of a table created here
    // A shard's load factor when it resized: sum and minimum over this thread's resizes.
    std::atomic<double> resize_lf_sum{0}, resize_lf_min{1};
  };
  struct Hashed {
    uint64_t h, kw;
    uint32_t shard;
    uint16_t tag;
  };
  struct Place {  // a slot: bucket index and slot number
    uint64_t j = 0;
    int pos = -1;
    bool found() const { return pos >= 0; }
  };

  static uint16_t tag_of(uint64_t h) {
    return static_cast<uint16_t>((h * 0x9E3779B97F4A7C15ull) >> 48);
  }
  static uint64_t home(uint64_t h, uint64_t n) { return common::fast_range(uint32_t(h), n); }
  uint32_t shard_of_hash(uint64_t h) const {
    return static_cast<uint32_t>(common::fast_range(h >> 32, nshards_));
  }
  uint64_t probe(uint64_t n) const { return std::min<uint64_t>(probe_, n); }
  Hashed hashed(std::string_view key) const;
  Bucket* buckets(uint64_t packed) const { return pool_.ptr<Bucket>(packed_offset(packed)); }

  Shard shard_of(uint64_t packed) const {
    return {packed, packed_count(packed), buckets(packed), filter_ + packed_offset(packed) / 64};
  }
  // A bucket array reserved, and its pages faulted in, for a shard's next resize before the
  // shard's lock is taken; given back unless the resize takes it (LineHT::put). `claim`: the
  // shard's preparing flag this writer holds, let go after the spare.
  class Spare {
   public:
    explicit Spare(pm::Allocator& a) : a_(a) {}
    ~Spare() {
      if (r) a_.cancel(r);
      if (held != nullptr) held->fetch_sub(1, std::memory_order_relaxed);
      if (claim != nullptr) claim->store(0, std::memory_order_release);
    }
    Spare(const Spare&) = delete;
    Spare& operator=(const Spare&) = delete;
    pm::Reservation r;
    std::atomic<uint8_t>* claim = nullptr;
    std::atomic<int>* held = nullptr;  // LineHT::spares_held_, which counts it while it lives
    bool tried = false;  // one per call: a second full shard resizes with the lock held

   private:
    pm::Allocator& a_;
  };

  Shard view(uint32_t shard);         // the shard, its filter built on first use
  Shard locked_view(uint32_t shard);  // the same, caller holds the shard's write lock
  uint64_t current(uint64_t shard) const;
  void build_filter(const Shard& v) const;
  Status get_unfiltered(const Shard& v, const Hashed& k, std::string_view key, std::string* value);
  Place find_locked(const Shard& v, const Hashed& k, std::string_view key) const;
  Place free_slot(const Shard& v, uint64_t home) const;
  int read_bucket(const Bucket& b, uint32_t candidates, const Hashed& k, std::string_view key,
                  std::string* value) const;
  Status insert_at(const Shard& v, const Hashed& k, Place at, std::string_view key,
                   std::string_view value);
  Status update_at(const Shard& v, const Hashed& k, Place at, std::string_view key,
                   std::string_view value);
  bool claim_spare(Spare& spare, uint32_t shard);
  Status prepare_spare(Spare& spare, uint64_t buckets);
  Status resize(uint32_t shard, pm::Reservation* spare);  // caller holds the shard's lock
  void count_resize(ThreadStats& ts, double shard_lf, double table_lf, uint64_t moved);
  double table_load_factor() const;  // of a table created by this instance (else -1)
  void count_lookup(ThreadStats& ts, const Shard& v, uint64_t hm, uint64_t last, bool hit) const;
  bool place(Bucket* b0, uint64_t* fw, uint64_t n, const common::Slot& s) const;
  bool check_shard(uint64_t s, std::string* report) const;
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
  uint64_t* dir_;
  uint64_t nshards_, probe_;
  bool use_filter_, prefetch_;
  // Per shard, dense (13 bytes with the flag below, so the directory stays in cache): the
  // shard word the DRAM side was built for (0: not yet since open; lazy rebuild) and the
  // shard's write lock.
  // Zero pages until used: opening zeroes nothing per shard.
  common::ZeroedMap words_map_, locks_map_;
  std::atomic<uint64_t>* words_;
  std::atomic<uint32_t>* locks_;
  // Per shard: 1 while a writer prepares a spare for its resize (LineHT::claim_spare).
  common::ZeroedMap preparing_map_;
  std::atomic<uint8_t>* preparing_;
  // The filter words, one per 64-byte line of the pool (touched only where bucket arrays
  // lie): a shard's filter is addressed from its shard word.
  common::ZeroedMap filter_map_;
  std::atomic<uint64_t>* filter_;
  std::unique_ptr<ThreadStats[]> tstats_;
  // Created empty by this instance (create(), not open()): the live count is known from the
  // inserts and removes, so the table's load factor at its first resize can be reported.
  bool fresh_ = false;
  std::atomic<double> first_resize_table_lf_{-1};
  // Spares prepared and not yet used or given back, and the most at once (at most one per
  // shard: claim_spare; `resize_spares_max_held`).
  std::atomic<int> spares_held_{0}, spares_held_max_{0};
};

}  // namespace pmhash::lineht
