// The non-volatile table's on-media layout (§3.1): buckets, levels and the root.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/items.hpp"

namespace pmhash::hdnh {

inline constexpr int kSlots = 8;  // slots per non-volatile bucket (§4.1)

// Test-only fault (pm::Pool::mutations): the rehash progress record is not ordered after
// the moved records' bitmaps (the crash harness must notice).
inline constexpr uint64_t kMutationProgressBeforeBitmaps = 4;

// A non-volatile bucket (§3.1): 256 bytes, the Optane media access granularity.
//
//   bytes   0 ..   7  bitmap  (bit i: slot i holds a valid record)
//   bytes   8 ..  15  reserved (0)
//   bytes  16 .. 143  slot 0 .. slot 7, 16 B each (common/items.hpp: key word | value word)
//   bytes 144 .. 255  padding (the paper's 16-byte keys and 15-byte values fill it; ours are
//                     8 + 8 bytes inline or out of line, so half the bucket is unused)
struct alignas(256) Bucket {
  uint64_t bitmap;
  uint64_t reserved;
  common::Slot slots[kSlots];
  uint8_t pad[112];
};
static_assert(sizeof(Bucket) == 256 && offsetof(Bucket, slots) == 16);

// A level in PM: `segments` segments of `segment_buckets` buckets, one contiguous block.
struct LevelDesc {
  uint64_t off;
  uint64_t segments;
};

// PM root. Top level: 2M segments, bottom level: M (§3.1). While resizing (§3.7):
// resizing_flag = 1; level_number = 2 until the new top level is attached, 3 while the
// bottom level is rehashed into it; rehash_progress = the next bottom bucket to rehash
// (segment * segment_buckets + bucket).
struct Root {
  uint64_t magic;
  uint64_t segment_buckets;
  LevelDesc top;
  LevelDesc bottom;
  LevelDesc new_top;
  uint64_t resizing_flag;
  uint64_t level_number;
  uint64_t rehash_progress;
  uint64_t reserved[6];
};
inline constexpr uint64_t kRootMagic = 0x484E'4448ull;  // "HDNH"

}  // namespace pmhash::hdnh
