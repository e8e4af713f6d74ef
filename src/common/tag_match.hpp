// One-byte tags compared 16 at a time (TurboHash §3.3, Dash-style fingerprints).
// AVX-512BW compare-to-mask where the CPU has it, SSE2 otherwise, chosen at start-up;
// a scalar loop for the "SIMD off" benchmark baseline.
#pragma once

#include <cstdint>

namespace pmhash::common {

using TagMatchFn = uint32_t (*)(const uint8_t* tags16, uint8_t tag);

uint32_t tag_match_sse2(const uint8_t* tags16, uint8_t tag);
uint32_t tag_match_avx512(const uint8_t* tags16, uint8_t tag);
uint32_t tag_match_scalar(const uint8_t* tags16, uint8_t tag);

// Bit i of the result is set when tags16[i] == tag (16 bytes are read).
TagMatchFn best_tag_match();
const char* tag_match_name(TagMatchFn f);

}  // namespace pmhash::common
