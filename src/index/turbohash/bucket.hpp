// TurboHash bucket (§3.3, Fig. 3): 256 bytes, Optane's internal access unit.
//
//   byte 0        8                    22    24      32                               256
//        | meta   | tags[14]           | pad | pad   | slots[14] x 16 B               |
//
//   meta (one 8-byte atomic word):
//        bits 0-13  valid bitmap   — slot holds a meaningful key (never cleared by delete)
//        bit  15    unpersisted    — a fixed-format write stored this word and has not yet
//                                    persisted it (pm/publish.hpp); ignored by recovery
//        bits 16-31 delete bitmap  — slot's item is deleted (slot reusable, not "empty")
//        bits 32-63 sequence number — +1 on every write in the bucket (lock-free reads)
//
// A slot is empty iff its valid bit is 0. A bucket with fewer than 13 valid slots (at least
// two empty: one is reserved for near-place update) ends a search path.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

#include "common/items.hpp"

namespace pmhash::turbohash {

inline constexpr int kSlots = 14;
inline constexpr uint32_t kSlotMask = (1u << kSlots) - 1;
inline constexpr int kPathEndValid = 13;                     // ReachSearchEnd: popcount(valid) < 13
inline constexpr uint64_t kUnpersisted = uint64_t{1} << 15;  // a spare valid bit

struct alignas(256) Bucket {
  uint64_t meta;
  uint64_t tags[2];  // 14 one-byte tags + 2 spare bytes, read and written as words
  uint64_t pad;
  common::Slot slots[kSlots];

  static uint32_t valid(uint64_t m) { return static_cast<uint32_t>(m & kSlotMask); }
  static uint32_t deleted(uint64_t m) { return static_cast<uint32_t>((m >> 16) & 0xFFFF); }
  static uint32_t seq(uint64_t m) { return static_cast<uint32_t>(m >> 32); }
  static uint64_t make(uint32_t valid, uint32_t del, uint32_t seq) {
    return uint64_t{valid} | (uint64_t{del} << 16) | (uint64_t{seq} << 32);
  }
  // ReachSearchEnd (Algorithm 4).
  static bool path_end(uint64_t m) { return std::popcount(valid(m)) < kPathEndValid; }
  // PickEmptySlot: the first slot whose valid bit is 0 (-1 when none).
  static int empty_slot(uint64_t m) {
    uint32_t e = ~valid(m) & kSlotMask;
    return e ? std::countr_zero(e) : -1;
  }
  // Live slots: valid and not deleted.
  static uint32_t live(uint64_t m) { return valid(m) & ~deleted(m) & kSlotMask; }

  uint64_t load_meta() const {
    return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(meta)).load(std::memory_order_acquire);
  }
  void store_meta(uint64_t m) {
    std::atomic_ref<uint64_t>(meta).store(m, std::memory_order_release);
  }

  void load_tags(uint8_t out[16]) const {
    uint64_t w[2] = {common::load_word(tags[0]), common::load_word(tags[1])};
    __builtin_memcpy(out, w, 16);
  }
  uint8_t tag(int i) const {
    return static_cast<uint8_t>(common::load_word(tags[i / 8]) >> (8 * (i % 8)));
  }
  void set_tag(int i, uint8_t t) {  // writers hold the shard lock
    uint64_t& w = tags[i / 8];
    uint64_t v = common::load_word(w);
    v = (v & ~(uint64_t{0xFF} << (8 * (i % 8)))) | (uint64_t{t} << (8 * (i % 8)));
    common::store_word(w, v);
  }
};
static_assert(sizeof(Bucket) == 256);
static_assert(offsetof(Bucket, slots) == 32);

}  // namespace pmhash::turbohash
