// The hot table's bucket (§3.3, Fig. 5): slot metadata, key words and items of one bucket
// together, so that a probe touches one cache line on a miss and two on a hit.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>
#include <string_view>

namespace pmhash::hdnh {

namespace hot {

// Slot metadata (§3.3, §3.6): bit 0 valid (the bitmap), bit 1 opmap, bit 2 hotmap, 3.. version.
inline constexpr uint16_t kValid = 1, kBusy = 2, kHot = 4, kVersionOne = 8;

// A hot bucket of S slots (S = hot_slots, 1..8):
//
//   head (one line for fixed S <= 6, variable S <= 4; else two)
//     bytes  0 .. 15        meta[8]   u16 per slot (above); slots past S unused
//     bytes 16 .. 16+8S-1   key word  per slot: fixed, the key's 8 bytes; variable, its hash
//     variable: 16+8S .. 16+10S-1  lens  u16 per slot: 0x8000 | key length << 6 | value
//                                  length for an inline item; 0: out of line
//   payload, P bytes per slot
//     fixed     P = 8:  the value's 8 bytes
//     variable  P = 32: inline, key bytes then value bytes (key + value <= 32 bytes); out
//               of line, word 0 = HotItem*
//
// Buckets are laid out in groups: the heads of the group's buckets, then their payloads
// from the next 64-byte boundary. A bucket's payloads (S P bytes) of at most 32 bytes share
// a line with its neighbour's, in groups of two; larger ones get their own lines, in groups
// of one. Fixed, S = 4 (the default), a pair of buckets in three lines:
//
//   line 0: head of bucket 2i | line 1: head of bucket 2i+1 | line 2: payloads of 2i, 2i+1
//
// A miss reads the head (one line); a hit the head and the slot's payload line (two), as
// with a line of payload per bucket, in 96 bytes per bucket instead of 128: the rebuild at
// recovery faults in and writes a quarter fewer lines. Variable, S = 4: 192 bytes, groups
// of one (head, then two payload lines with two slots each).
inline constexpr uint32_t kHeadMeta = 16;
inline constexpr int kMaxPayloadWords = 4;
inline constexpr uint32_t kInlineBytes = 32;
inline constexpr uint16_t kInline = 0x8000;
inline constexpr uint32_t kSharedPayloadBytes = 32;  // at most this: two buckets per line

inline constexpr uint32_t round64(uint32_t n) {
  return (n + 63) & ~63u;
}

struct Shape {
  uint32_t slots = 0, head = 0, payload_words = 0;
  uint32_t payload_bytes = 0;               // one bucket's: slots x payload_words x 8
  uint32_t group_shift = 0;                 // 2^group_shift buckets per group
  uint32_t group_bytes = 0;                 // heads, then payloads from a line boundary
  uint64_t bytes(uint64_t buckets) const {  // of buckets [0, buckets)
    return ((buckets + (1u << group_shift) - 1) >> group_shift) * group_bytes;
  }
  uint64_t offset(uint64_t b) const {  // of the group that holds bucket b
    return (b >> group_shift) * group_bytes;
  }
};
inline Shape shape(int slots, bool variable) {
  Shape s;
  s.slots = uint32_t(slots);
  s.head = round64(kHeadMeta + (variable ? 10 : 8) * s.slots);
  s.payload_words = variable ? 4 : 1;
  s.payload_bytes = s.slots * s.payload_words * 8;
  s.group_shift = s.payload_bytes <= kSharedPayloadBytes ? 1 : 0;
  const uint32_t group = 1u << s.group_shift;
  s.group_bytes = group * s.head + round64(group * s.payload_bytes);
  return s;
}

// Zeroed pages, faulted in by whichever thread first writes them (recovery threads split
// the first touch, instead of one thread zero-filling every array before the traversal).
// Transparent huge pages where the kernel allows them (recovery faults the whole table in:
// a 2 MB fault instead of 512 4 KiB ones; reads then miss the TLB less).
inline void* zeroed_pages(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}
// Faults in bytes [from, to) of them writable, in one call (recovery: a window just before
// its fill). A page first read maps the shared zero page, and the write after it takes a
// second fault and a TLB shootdown; the fill reads a slot before writing it. Best effort:
// a kernel without MADV_POPULATE_WRITE (< 5.14) faults the pages in as they are written.
inline void prefault_pages(void* base, uint64_t from, uint64_t to) {
  constexpr uint64_t kPage = 4096;
  from &= ~(kPage - 1);
  to = (to + kPage - 1) & ~(kPage - 1);
  if (to > from) (void)madvise(static_cast<char*>(base) + from, to - from, MADV_POPULATE_WRITE);
}
inline void free_pages(void* p, uint64_t bytes) {
  if (p != nullptr) munmap(p, bytes);
}

// One level's hot buckets (one mapping).
struct Table {
  char* base = nullptr;
  uint64_t bytes = 0;
  Shape s;
  explicit operator bool() const { return base != nullptr; }
  std::atomic<uint16_t>& meta(uint64_t b, int e) const {
    return reinterpret_cast<std::atomic<uint16_t>*>(head_of(b))[e];
  }
  std::atomic<uint64_t>& key(uint64_t b, int e) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(head_of(b) + kHeadMeta)[e];
  }
  std::atomic<uint16_t>& lens(uint64_t b, int e) const {  // variable only
    return reinterpret_cast<std::atomic<uint16_t>*>(head_of(b) + kHeadMeta + 8 * s.slots)[e];
  }
  std::atomic<uint64_t>* payload(uint64_t b, int e) const {
    const uint64_t in_group = b & ((1u << s.group_shift) - 1);
    char* p =
        base + s.offset(b) + (uint64_t{1} << s.group_shift) * s.head + in_group * s.payload_bytes;
    return reinterpret_cast<std::atomic<uint64_t>*>(p) + e * s.payload_words;
  }
  const char* line0(uint64_t b) const { return head_of(b); }

 private:
  char* head_of(uint64_t b) const {
    return base + s.offset(b) + (b & ((1u << s.group_shift) - 1)) * s.head;
  }
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
