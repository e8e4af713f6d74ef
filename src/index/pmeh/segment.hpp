// PMEH segments and Dash buckets (§III-A, Figs. 3 and 5): the on-media layout.
//
// A segment (segment_bytes, 2 KB to 128 KB; 32 KB by default):
//
//   bytes    0..255   SegmentHeader (metadata word, crash version)
//   bytes  256..      normal buckets 0 .. n-1, 256 bytes each (n = segment_bytes/256 - 3)
//   last 512 bytes    the two stash buckets
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "common/items.hpp"

namespace pmhash::pmeh {

inline constexpr int kBucketSlots = 14;  // normal records per bucket (Dash)
inline constexpr int kOverflow = 4;      // overflow fingerprints per bucket
inline constexpr int kStash = 2;         // stash buckets per segment

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
// The low 32 bits (version and lock) kept, allocation and membership replaced.
inline uint64_t with_bits(uint64_t w, uint32_t alloc, uint32_t member) {
  return (w & 0xFFFF'FFFFull) | (make(0, alloc, member) & ~0xFFFF'FFFFull);
}
}  // namespace word

// Metadata bytes are read by lock-free readers while a writer stores them.
inline uint8_t load_byte(const uint8_t& b) {
  return std::atomic_ref<uint8_t>(const_cast<uint8_t&>(b)).load(std::memory_order_relaxed);
}
inline void store_byte(uint8_t& b, uint8_t v) {
  std::atomic_ref<uint8_t>(b).store(v, std::memory_order_relaxed);
}

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

}  // namespace pmhash::pmeh
