// LineHT's two per-bucket words: the PM bucket (one 64-byte line) and its DRAM filter word.
//
// PM bucket, 64 bytes, one cache line (SmartHT's bucket, §III-B, with TurboHash's metadata):
//
//   byte 0          8              24             40             56       64
//        | meta     | slot[0] 16 B | slot[1] 16 B | slot[2] 16 B | spare  |
//
//   meta (one 8-byte atomic word, the commit word of every write in the bucket):
//        bits 0-2   valid bitmap   — slot i holds a live item
//        bit  7     unpersisted    — a fixed-format write stored this word (or, for an
//                                    in-place update, the slot) and has not yet persisted it
//                                    (pm/publish.hpp); readers that see it persist the line
//        bits 32-63 sequence       — +1 on every write (optimistic readers validate)
//
// Insert (fixed): slot words, then meta, in one line: one flush, one fence (merged flush).
//
// DRAM filter word, 8 bytes per bucket (HDNH's OCF / SmartHT's VFL, one word per line):
//
//   bits 0-47  tag[3]  16-bit fingerprint of the key in slot i
//   bits 48-50 valid   mirror of the PM valid bitmap (updated after the PM commit)
//   bits 56-61 reach   the largest probe distance of a key whose home is this bucket
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

#include "common/items.hpp"

namespace pmhash::lineht {

inline constexpr int kSlots = 3;
inline constexpr uint64_t kValidMask = (1u << kSlots) - 1;
inline constexpr uint64_t kUnpersisted = uint64_t{1} << 7;

struct alignas(64) Bucket {
  uint64_t meta;
  common::Slot slots[kSlots];
  uint64_t spare;

  static uint32_t valid(uint64_t m) { return static_cast<uint32_t>(m & kValidMask); }
  static uint32_t seq(uint64_t m) { return static_cast<uint32_t>(m >> 32); }
  static uint64_t make(uint32_t valid, uint32_t seq) {
    return uint64_t{valid} | (uint64_t{seq} << 32);
  }
  // The next commit word: valid bitmap `v`, sequence number advanced.
  static uint64_t next(uint64_t m, uint32_t v) { return make(v, seq(m) + 1); }
  static int free_slot(uint64_t m) {
    uint32_t f = ~valid(m) & kValidMask;
    return f ? std::countr_zero(f) : -1;
  }
  uint64_t load_meta() const { return common::load_word(meta); }
};
static_assert(sizeof(Bucket) == 64);
static_assert(offsetof(Bucket, slots) == 8);

// The DRAM filter word of one bucket.
struct Filter {
  static constexpr int kValidShift = 48, kReachShift = 56;
  static uint16_t tag(uint64_t w, int i) { return static_cast<uint16_t>(w >> (16 * i)); }
  static uint32_t valid(uint64_t w) {
    return static_cast<uint32_t>((w >> kValidShift) & kValidMask);
  }
  static uint32_t reach(uint64_t w) { return static_cast<uint32_t>((w >> kReachShift) & 63); }
  // Slots whose valid bit is set and whose tag is `t`.
  static uint32_t match(uint64_t w, uint16_t t) {
    uint32_t m = 0;
    for (int i = 0; i < kSlots; ++i) m |= uint32_t{tag(w, i) == t} << i;
    return m & valid(w);
  }
  static uint64_t with_slot(uint64_t w, int i, uint16_t t) {
    w &= ~(uint64_t{0xFFFF} << (16 * i));
    return w | (uint64_t{t} << (16 * i)) | (uint64_t{1} << (kValidShift + i));
  }
  static uint64_t without_slot(uint64_t w, int i) {
    return w & ~(uint64_t{1} << (kValidShift + i));
  }
  static uint64_t with_reach(uint64_t w, uint32_t r) {
    return (w & ~(uint64_t{63} << kReachShift)) | (uint64_t{r} << kReachShift);
  }
};

}  // namespace pmhash::lineht
