#include "common/tag_match.hpp"

#include <immintrin.h>

namespace pmhash::common {

uint32_t tag_match_sse2(const uint8_t* tags16, uint8_t tag) {
  __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tags16));
  return static_cast<uint32_t>(
      _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(static_cast<char>(tag)))));
}

__attribute__((target("avx512bw,avx512vl"))) uint32_t tag_match_avx512(const uint8_t* tags16,
                                                                       uint8_t tag) {
  __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tags16));
  return _mm_cmpeq_epi8_mask(v, _mm_set1_epi8(static_cast<char>(tag)));
}

uint32_t tag_match_scalar(const uint8_t* tags16, uint8_t tag) {
  uint32_t m = 0;
  for (int i = 0; i < 16; ++i) m |= static_cast<uint32_t>(tags16[i] == tag) << i;
  return m;
}

TagMatchFn best_tag_match() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return tag_match_avx512;
  return tag_match_sse2;
}

const char* tag_match_name(TagMatchFn f) {
  if (f == tag_match_avx512) return "avx512bw";
  if (f == tag_match_sse2) return "sse2";
  return "scalar";
}

}  // namespace pmhash::common
