// PMEH's directory array and directories (§III-A, Fig. 4; §III-B2): the on-media layout.
#pragma once

#include <cstdint>

namespace pmhash::pmeh {

// The directory array (§III-B2): 12 entries, used as a ring. Directory number n (numbers
// grow forever) lives in entry n % kMaxDirs, which is free again once n - kMaxDirs is freed.
inline constexpr int kMaxDirs = 12;

// The root object (one per pool):
//
//   bytes  0..  7  magic "PMEH"
//   bytes  8.. 15  segment_bytes
//   bytes 16.. 23  split_shift: x-split, x = 2^split_shift
//   bytes 24.. 31  zone_bits: 2^zone_bits zones
//   bytes 32.. 39  latest_dir: the latest directory's number
//   bytes 40.. 47  open_gen: the crash version of the bucket locks
//   bytes 48.. 55  split_log: offset of the split records (split.hpp), one per zone
//   bytes 56.. 63  reserved
//   bytes 64..159  dirs: the directory array, 12 directory offsets (0: free)
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

// A directory (64-byte header, then the entries):
//
//   bytes  0.. 7  depth G
//   bytes  8..15  zones_updated (the paper's region_update_num)
//   bytes 16..23  number
//   bytes 24..63  padding
//   bytes 64..    2^G entries of 8 bytes: segment offsets, 0 = not filled yet
//
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

// The entry of hash h in a directory of depth `depth` (MSBs pick the segment).
inline uint64_t entry_of(uint64_t h, uint64_t depth) {
  return depth == 0 ? 0 : h >> (64 - depth);
}

}  // namespace pmhash::pmeh
