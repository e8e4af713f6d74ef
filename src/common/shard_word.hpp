// A shard word: a bucket array's size and place in one 8-byte PM word, so that a resize
// publishes a new shard with one atomic store (TurboHash's descriptor sets, LineHT's
// directory).
//
//   bits 63..44  bucket count   bits 43..0  offset of the bucket array in the pool
#pragma once

#include <cstdint>

namespace pmhash::common {

inline constexpr int kCountShift = 44;
inline uint64_t pack(uint64_t buckets, uint64_t off) {
  return (buckets << kCountShift) | off;
}
inline uint64_t packed_count(uint64_t p) {
  return p >> kCountShift;
}
inline uint64_t packed_offset(uint64_t p) {
  return p & ((uint64_t{1} << kCountShift) - 1);
}
inline constexpr uint64_t kMaxShardBuckets = (uint64_t{1} << (64 - kCountShift)) - 1;

}  // namespace pmhash::common
