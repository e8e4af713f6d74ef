// PMEH (Hu et al., "PMEH: A Parallel and Write-Optimized Extendible Hashing for Persistent
// Memory", IEEE TCAD 2023): extendible hashing with a directory array (lock-free directory
// expansion), zones bound to threads (opportunistic lock-free writes), multisplit with
// gradual splitting, and Dash's buckets. docs/schemes/pmeh.md maps the paper to this code.
#pragma once

#include <atomic>
#include <bit>
#include <memory>
#include <mutex>
#include <vector>

#include "index/pmeh/zones.hpp"
#include "index/scheme.hpp"

namespace pmhash::pmeh {

inline constexpr int kBucketSlots = 14;  // normal records per bucket (Dash)
inline constexpr int kOverflow = 4;      // overflow fingerprints per bucket
inline constexpr int kStash = 2;         // stash buckets per segment
// The directory array (§III-B2): 12 entries, used as a ring. Directory number n (numbers
// grow forever) lives in entry n % kMaxDirs, which is free again once n - kMaxDirs is freed.
inline constexpr int kMaxDirs = 12;

// Test-only fault (pm::Pool::mutations): a split publishes its new segment without
// persisting it first (the crash harness must notice).
inline constexpr uint64_t kMutationSplitUnpersisted = 8;

// A bucket (§III-A, Dash's layout): 32 bytes of metadata and 14 records of 16 bytes.
//
//   bytes  0.. 3  version lock: bit 31 locked, bits 0..30 version
//   bytes  4.. 7  bits 0..13 allocation bitmap | 14..27 membership | 28..31 counter
//   bytes  8..21  fingerprints of the 14 records
//   bytes 22..25  overflow fingerprints (records of this bucket stored in a stash bucket)
//   byte  26      bits 0..3 overflow bitmap | bits 4..7 overflow membership
//   byte  27      stash index of each overflow fingerprint (2 bits each)
//   byte  28      overflow count (stashed records without an overflow fingerprint)
//   bytes 29..31  padding
//   bytes 32..255 14 slots (common/items.hpp)
//
// Bytes 0..7 are one 8-byte word (`word0`): a record is committed by the store that sets its
// allocation bit. Membership bit i: the record's home is the previous bucket (balanced
// insert / displacement put it here).
struct alignas(256) Bucket {
  uint64_t word0;
  uint8_t fp[kBucketSlots];
  uint8_t ofp[kOverflow];
  uint8_t obits;
  uint8_t ostash;
  uint8_t ocount;
  uint8_t pad[3];
  common::Slot slots[kBucketSlots];
};
static_assert(sizeof(Bucket) == 256 && offsetof(Bucket, slots) == 32 &&
              offsetof(Bucket, obits) == 26);

namespace word {
inline constexpr uint64_t kLock = uint64_t{1} << 31;
inline uint32_t version(uint64_t w) {
  return static_cast<uint32_t>(w) & 0x7FFF'FFFFu;
}
inline uint32_t alloc(uint64_t w) {
  return static_cast<uint32_t>(w >> 32) & 0x3FFF;
}
inline uint32_t member(uint64_t w) {
  return static_cast<uint32_t>(w >> 46) & 0x3FFF;
}
inline uint64_t make(uint32_t version, uint32_t alloc, uint32_t member) {
  return (uint64_t{version} & 0x7FFF'FFFFu) | (uint64_t{alloc} << 32) | (uint64_t{member} << 46) |
         (uint64_t(std::popcount(alloc)) << 60);
}
}  // namespace word

// Segment header (one 256-byte block before the buckets). Metadata word (§III-A, Fig. 5):
//   bits 0..5 local depth L | bits 6..47 pattern (the L-bit hash prefix) |
//   bits 48..63 splitting bitmap (bit c: child c has been split out)
struct alignas(256) SegmentHeader {
  uint64_t meta;
  uint64_t lock_gen;  // crash version: locks reset lazily when it differs from the open's
  uint64_t pad[30];
};
namespace seg {
inline uint32_t depth(uint64_t m) {
  return static_cast<uint32_t>(m & 63);
}
inline uint64_t pattern(uint64_t m) {
  return (m >> 6) & ((uint64_t{1} << 42) - 1);
}
inline uint32_t bitmap(uint64_t m) {
  return static_cast<uint32_t>(m >> 48);
}
inline uint64_t make(uint32_t depth, uint64_t pattern, uint32_t bitmap) {
  return depth | (pattern << 6) | (uint64_t{bitmap} << 48);
}
// Whether a segment with metadata m covers every hash whose `gdepth`-bit prefix is entry t
// of a directory of that depth (x-split: 2^shift children): local depth at most gdepth, the
// pattern t's prefix, and none of the children under t split out. What validation (open)
// and check() require of each entry of the latest directory, so that the lock-free walk of
// get/put/remove always ends at a covering segment and needs no check of its own.
inline bool covers_entry(uint64_t m, uint64_t t, uint64_t gdepth, uint32_t shift) {
  uint32_t l = depth(m);
  if (l > gdepth || (l != 0 && (t >> (gdepth - l)) != pattern(m))) return false;
  uint64_t below = gdepth - l;  // bits of t under the segment's prefix
  uint32_t first, n;            // the children under entry t
  if (below >= shift) {
    first = static_cast<uint32_t>((t >> (below - shift)) & ((1u << shift) - 1));
    n = 1;
  } else {
    first = static_cast<uint32_t>((t & ((uint64_t{1} << below) - 1)) << (shift - below));
    n = 1u << (shift - below);
  }
  return ((bitmap(m) >> first) & ((uint64_t{1} << n) - 1)) == 0;
}
}  // namespace seg

// A directory: depth G, zones whose entries are filled (region_update_num), its number (the
// ring position it was published at; 0 in pools written before the ring, whose numbers are
// their array indexes), 2^G entries (segment offsets; 0 = not filled yet: look in an older
// directory).
struct Directory {
  uint64_t depth;
  uint64_t zones_updated;
  uint64_t number;
  uint64_t pad[5];
  uint64_t entries[];
};

// Split metadata (§III-F case 2), one per zone: a split in progress is redone at recovery.
struct SplitRecord {
  uint64_t flag;  // 1: in progress
  uint64_t dir;   // directory whose entries change
  uint64_t old_seg, new_seg;
  uint64_t child;
  uint64_t old_meta;  // the old segment's metadata before the split
  uint64_t pad[2];
};

struct Root {
  uint64_t magic;
  uint64_t segment_bytes;
  uint64_t split_shift;  // x-split: x = 2^split_shift
  uint64_t zone_bits;    // 2^zone_bits zones
  uint64_t latest_dir;   // the latest directory's number (array entry latest_dir % kMaxDirs)
  uint64_t open_gen;     // incremented at every open (the crash version of the locks)
  uint64_t split_log;    // offset of the SplitRecord array (one per zone)
  uint64_t reserved;
  uint64_t dirs[kMaxDirs];
};
inline constexpr uint64_t kRootMagic = 0x4845'4D50ull;  // "PMEH"

class Pmeh final : public Scheme {
 public:
  Pmeh(SchemeContext& ctx, uint64_t root_off);
  ~Pmeh() override;
  static Status layout(const Options& o, common::Params* layout);
  struct Runtime {
    uint64_t zone_threads = 1;  // `zone_threads`: threads bound to zones (default: cores)
    bool opportunistic = true;  // `opportunistic`: lock-free local writes (off: the baseline)
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
  };
  // One piece of overflow metadata that points at no stashed record: fingerprint `entry` of
  // bucket b, or (entry -1) b's overflow count, which should be `count`.
  struct StaleOverflow {
    Bucket* b;
    int entry;
    uint8_t count;
  };

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

  // Buckets (Dash: balanced insert, displacement, stash).
  void ensure_recovered(SegmentHeader* s);
  bool recovered(const SegmentHeader* s) const;
  std::vector<uint32_t> kept_alloc(SegmentHeader* s) const;
  std::vector<uint32_t> live_alloc(SegmentHeader* s) const;
  std::vector<StaleOverflow> stale_overflow(SegmentHeader* s) const;
  void trim_overflow(SegmentHeader* s);
  bool lock_buckets(SegmentHeader* s, uint64_t b, ZoneMode m);  // b, b+1 and the stash
  void unlock_buckets(SegmentHeader* s, uint64_t b, ZoneMode m);
  static void lock_bucket(Bucket& b, ZoneMode m);
  static bool try_lock_bucket(Bucket& b, ZoneMode m);
  static void unlock_bucket(Bucket& b);
  bool seg_find(SegmentHeader* s, const Hashed& k, std::string_view key, Loc* loc,
                uint64_t* value_word, bool* retry) const;
  bool slot_in(Bucket& b, bool membership, const Hashed& k, std::string_view key, int* slot,
               uint64_t* vw) const;
  Status seg_insert(SegmentHeader* s, uint64_t b, const Hashed& k, const common::Items::New& item,
                    ZoneMode m, bool* full);
  void write_record(Bucket& b, int slot, bool membership, uint8_t fp, uint64_t kw, uint64_t vw,
                    const pm::Reservation* publish);
  void clear_record(Bucket& b, int slot, uint64_t free_off);
  bool register_overflow(Bucket* bs, uint64_t b, uint8_t fp, int stash_idx);

  // Expansion (§III-B2, §III-E).
  Status split_or_expand(uint64_t seg_off, uint64_t h, uint32_t z, ZoneMode m, uint64_t* expand);
  Status expand_directory(uint64_t from);
  Status publish_directory(uint64_t from);
  void fill_every_zone(uint64_t k);
  void update_zone_entries(uint32_t z, uint64_t k);
  Status split_out(uint64_t seg_off, uint64_t k, uint32_t child, uint32_t z, ZoneMode m);
  void finish_split(uint32_t z);  // steps after the commit; redone by recovery
  void free_old_directories(uint64_t k);
  std::vector<uint64_t> distinct_segments() const;

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
  bool opportunistic_;
  std::atomic<uint64_t> latest_{0};
  Zones zones_;
  std::mutex dir_mu_;
  std::unique_ptr<ThreadStats[]> tstats_;
  std::atomic<uint64_t> splits_{0}, moved_{0}, expansions_{0}, displaced_{0}, stashed_{0};
  std::atomic<uint64_t> forced_fills_{0};  // expansions that found the directory array full
};

}  // namespace pmhash::pmeh
