// SmartHT bucket (§III-B, Fig. 3): 64 bytes, one cache line, for head and chained buckets.
//
//   byte 0         3            8                                        56        64
//        | token[3] | padding[5] | slot[0] 16 B | slot[1] 16 B | slot[2] 16 B | next 8 B |
//
// token[i] == 1: slot i holds a live item. The tokens share the first 8-byte word, so
// publishing or deleting a slot is one 8-byte failure-atomic store; key and value are written
// first in the same line (persisted in program order on x86), then the one line is flushed
// once — the merged flush.
#pragma once

#include <cstdint>

#include "common/items.hpp"

namespace pmhash::smartht {

inline constexpr int kSlots = 3;

struct alignas(64) Bucket {
  uint64_t tokens;  // byte i = token of slot i; bytes 3..7 padding
  common::Slot slots[kSlots];
  uint64_t next;  // offset of the next chained bucket, 0 at the end

  bool live(int i) const { return ((tokens >> (8 * i)) & 0xFF) == 1; }
  static uint64_t with_token(uint64_t tokens, int i, bool on) {
    return (tokens & ~(uint64_t{0xFF} << (8 * i))) | (uint64_t{on} << (8 * i));
  }
  int free_slot() const {
    for (int i = 0; i < kSlots; ++i)
      if (!live(i)) return i;
    return -1;
  }
};
static_assert(sizeof(Bucket) == 64);
static_assert(offsetof(Bucket, slots) == 8 && offsetof(Bucket, next) == 56);

}  // namespace pmhash::smartht
