// PMEH's split records (§III-F case 2): the on-media layout.
#pragma once

#include <cstdint>

namespace pmhash::pmeh {

// Test-only fault (pm::Pool::mutations): a split publishes its new segment without
// persisting it first (the crash harness must notice).
inline constexpr uint64_t kMutationSplitUnpersisted = 8;

// One per zone (64 bytes), written by the zone's one splitting thread at a time:
//
//   bytes  0.. 7  flag: 1 while a split is in progress
//   bytes  8..15  dir: the directory whose entries change
//   bytes 16..31  old_seg, new_seg (offsets)
//   bytes 32..39  child: which of the 2^split_shift children is split out
//   bytes 40..47  old_meta: the old segment's metadata before the split
//   bytes 48..63  padding
// Split metadata (§III-F case 2), one per zone: a split in progress is redone at recovery.
struct SplitRecord {
  uint64_t flag;  // 1: in progress
  uint64_t dir;   // directory whose entries change
  uint64_t old_seg, new_seg;
  uint64_t child;
  uint64_t old_meta;  // the old segment's metadata before the split
  uint64_t pad[2];
};

}  // namespace pmhash::pmeh
