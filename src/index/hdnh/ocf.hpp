// The OCF entry encoding (§3.2, Fig. 4).
#pragma once

#include <cstdint>

namespace pmhash::hdnh {

// OCF entry (§3.2, Fig. 4), 2 bytes per non-volatile slot, changed only by CAS:
//   bits 0..7 fingerprint (low byte of the key's hash) | bit 8 bitmap | bit 9 opmap |
//   bits 10..15 version
namespace ocf {
inline constexpr uint16_t kValid = 1u << 8, kBusy = 1u << 9, kVersionOne = 1u << 10;
inline uint8_t fp(uint16_t e) {
  return static_cast<uint8_t>(e);
}
inline bool valid(uint16_t e) {
  return (e & kValid) != 0;
}
inline bool busy(uint16_t e) {
  return (e & kBusy) != 0;
}
// The entry after a writer's change: new fingerprint and bitmap bit, unlocked, version + 1.
inline uint16_t next(uint16_t e, bool is_valid, uint8_t f) {
  return static_cast<uint16_t>(((e & 0xFC00u) + kVersionOne) | (is_valid ? kValid : 0) | f);
}
}  // namespace ocf

}  // namespace pmhash::hdnh
