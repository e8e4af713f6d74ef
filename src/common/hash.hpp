// Key hashing: XXH3-64 (libxxhash). Schemes draw independent bit fields from one hash.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <string_view>

namespace pmhash::common {

inline uint64_t hash_key(std::string_view key, uint64_t seed = 0) {
  return XXH3_64bits_withSeed(key.data(), key.size(), seed);
}
inline uint64_t hash_word(uint64_t word, uint64_t seed = 0) {
  return XXH3_64bits_withSeed(&word, 8, seed);
}
// Maps a 32-bit hash uniformly onto [0, n) without division (Lemire's fast range).
inline uint64_t fast_range(uint32_t h, uint64_t n) {
  return (uint64_t{h} * n) >> 32;
}

}  // namespace pmhash::common
