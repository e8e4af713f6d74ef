// The hot table's bucket (§3.3, Fig. 5): slot metadata, key words and items of one bucket
// together, so that a probe touches one cache line on a miss and two on a hit.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/zeroed_map.hpp"

namespace pmhash::hdnh {

namespace hot {

// Slot metadata (§3.3, §3.6): bit 0 valid (the bitmap), bit 1 opmap, bit 2 hotmap, 3.. version.
inline constexpr uint16_t kValid = 1, kBusy = 2, kHot = 4, kVersionOne = 8;

// A hot bucket of S slots (S = hot_slots, 1..8), 64-byte aligned:
//
//   head (one line for fixed S <= 6, variable S <= 4; else two)
//     bytes  0 .. 15        meta[8]   u16 per slot (above); slots past S unused
//     bytes 16 .. 16+8S-1   key word  per slot: fixed, the key's 8 bytes; variable, its hash
//     variable: 16+8S .. 16+10S-1  lens  u16 per slot: 0x8000 | key length << 6 | value
//                                  length for an inline item; 0: out of line
//   payload (from the next 64-byte boundary), P bytes per slot
//     fixed     P = 8:  the value's 8 bytes                    (S = 4: 32 B, one line)
//     variable  P = 32: inline, key bytes then value bytes (key + value <= 32 bytes); out
//               of line, word 0 = HotItem* (S = 4: 128 B, two lines, two slots each)
//
// A miss reads line 0 (meta and key words); a hit reads line 0 and the slot's payload line.
// Fixed, S = 4: 128 bytes per bucket. Variable, S = 4: 192 bytes.
inline constexpr uint32_t kHeadMeta = 16;
inline constexpr int kMaxPayloadWords = 4;
inline constexpr uint32_t kInlineBytes = 32;
inline constexpr uint16_t kInline = 0x8000;

inline constexpr uint32_t round64(uint32_t n) {
  return (n + 63) & ~63u;
}

struct Shape {
  uint32_t slots = 0, head = 0, payload_words = 0, stride = 0;
};
inline Shape shape(int slots, bool variable) {
  Shape s;
  s.slots = uint32_t(slots);
  s.head = round64(kHeadMeta + (variable ? 10 : 8) * s.slots);
  s.payload_words = variable ? 4 : 1;
  s.stride = s.head + round64(s.slots * s.payload_words * 8);
  return s;
}

// HDNH's DRAM arrays are common::map_zeroed pages on transparent huge pages, faulted in by
// whichever thread first writes them: recovery threads split the first touch (each faults
// a window in just before its fill, common::prefault_pages) instead of one thread
// zero-filling every array before the traversal.

// One level's hot buckets (one mapping).
struct Table {
  char* base = nullptr;
  uint64_t bytes = 0;
  Shape s;
  explicit operator bool() const { return base != nullptr; }
  std::atomic<uint16_t>& meta(uint64_t b, int e) const {
    return reinterpret_cast<std::atomic<uint16_t>*>(base + b * s.stride)[e];
  }
  std::atomic<uint64_t>& key(uint64_t b, int e) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(base + b * s.stride + kHeadMeta)[e];
  }
  std::atomic<uint16_t>& lens(uint64_t b, int e) const {  // variable only
    return reinterpret_cast<std::atomic<uint16_t>*>(base + b * s.stride + kHeadMeta +
                                                    8 * s.slots)[e];
  }
  std::atomic<uint64_t>* payload(uint64_t b, int e) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(base + b * s.stride + s.head) +
           e * s.payload_words;
  }
  const char* line0(uint64_t b) const { return base + b * s.stride; }
};

// A payload read into registers (with its lens word, variable format).
struct Payload {
  uint64_t w[kMaxPayloadWords] = {0, 0, 0, 0};
  uint16_t lens = 0;
  bool is_inline() const { return lens & kInline; }
  // Variable inline item: key and value bytes.
  std::string_view inline_key() const {
    return {reinterpret_cast<const char*>(w), size_t((lens >> 6) & 63)};
  }
  std::string_view inline_value() const {
    return {reinterpret_cast<const char*>(w) + ((lens >> 6) & 63), size_t(lens & 63)};
  }
  static bool make_inline(std::string_view key, std::string_view value, Payload* p) {
    if (key.size() + value.size() > kInlineBytes) return false;
    char* b = reinterpret_cast<char*>(p->w);
    std::memset(b, 0, sizeof p->w);
    std::memcpy(b, key.data(), key.size());
    std::memcpy(b + key.size(), value.data(), value.size());
    p->lens = static_cast<uint16_t>(kInline | key.size() << 6 | value.size());
    return true;
  }
};

}  // namespace hot

}  // namespace pmhash::hdnh
