// Items: what a 16-byte slot holds in each pool format, and the out-of-line item store of
// the variable format (TurboHash §3.6, used by every scheme).
//
//   fixed     slot = | key (8 B, the key's bytes) | value (8 B, the value's bytes) |
//   variable  slot = | hashed key (8 B, XXH3)     | offset of the item (8 B)       |
//
//   out-of-line item (a pool block, 64-byte granularity, written once, never changed):
//   | key_len u32 | value_len u32 | key bytes | value bytes | pad |
//
// A variable item is updated out of place: a new item is written and flushed, then the
// scheme's publishing 8-byte store, then the old item is freed — without a log
// (write/swap_value/retire: pm::Allocator's log-free protocol; every scheme sweeps what a
// crash leaves unreachable). Freed items are reused only after an epoch grace period
// (lock-free readers).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/hash.hpp"
#include "pm/allocator.hpp"
#include "pmhash/options.hpp"
#include "pmhash/status.hpp"

namespace pmhash::common {

struct Slot {
  uint64_t key;
  uint64_t value;
};
static_assert(sizeof(Slot) == 16);

// PM words that lock-free readers may read while a writer changes them. Release/acquire so
// a reader that sees an item's offset also sees the item's bytes.
inline uint64_t load_word(const uint64_t& w) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(w)).load(std::memory_order_acquire);
}
inline void store_word(uint64_t& w, uint64_t v) {
  std::atomic_ref<uint64_t>(w).store(v, std::memory_order_release);
}
// A slot a writer may change meanwhile, each word loaded once: the caller keeps one pair
// (in the variable format its key and value are then read from the one item it names).
inline Slot load_slot(const Slot& s) {
  return {load_word(s.key), load_word(s.value)};
}

class Items {
 public:
  Items(Format f, pm::Allocator& alloc) : variable_(f == Format::kVariable), alloc_(alloc) {}

  bool variable() const { return variable_; }

  // The 64-bit hash every scheme places keys by.
  static uint64_t hash(std::string_view key) { return hash_key(key); }

  // What the slot's key word holds for this key.
  uint64_t key_word(std::string_view key, uint64_t h) const {
    if (variable_) return h;
    uint64_t w;
    std::memcpy(&w, key.data(), 8);
    return w;
  }

  // The hash of the key a slot holds (for rehashing without the original key).
  uint64_t slot_hash(uint64_t key_word) const { return variable_ ? key_word : hash_word(key_word); }

  // Safe on words read racily (a lock-free reader validates afterwards).
  bool matches(uint64_t slot_key, uint64_t slot_value, std::string_view key, uint64_t kw) const {
    if (slot_key != kw) return false;
    if (!variable_) return true;
    std::string_view k;
    return item_key(slot_value, &k) && k == key;
  }

  struct New {
    uint64_t key_word = 0;
    uint64_t value_word = 0;
    pm::Reservation item;  // variable format: the item the slot will own
  };
  // Prepares the slot content. In the variable format writes and flushes the item (the
  // caller's next fence orders it before the publishing store), and the item's allocation
  // bit is persisted — by an earlier batch for a small item
  // (pm::SpareBlocks), else set and flushed with it. The caller's next fence orders the
  // item (and the bit) before the store that publishes the item.
  Status write(std::string_view key, std::string_view value, uint64_t kw, New* out) const;
  // An item write() made that is not published after all.
  void discard(const New& n) const {
    if (n.item) alloc_.unmark(n.item.off);
  }
  // The item a slot held, once the store that unpublished it is persisted (variable).
  void retire(uint64_t value_word) const {
    if (variable_) alloc_.unmark(value_word);
  }
  // Replaces a live slot's value (caller holds the slot's write lock) with one from write():
  // fence, one 8-byte store persisted, old item retired. Fixed format: the store persisted.
  void swap_value(uint64_t& value_word, const New& n) const;

  // Reads a value; false if a racy read saw an impossible item (the reader retries).
  bool read_value(uint64_t value_word, std::string* out) const;
  // The item's key (variable) — false if the offset does not hold a plausible item.
  bool item_key(uint64_t value_word, std::string_view* key) const;
  // Key bytes for a slot (export, check).
  std::string slot_key_bytes(const Slot& s) const;

  // The out-of-line item a slot owns (0 in the fixed format).
  uint64_t owned_block(uint64_t value_word) const { return variable_ ? value_word : 0; }

 private:
  // Reserves, writes and flushes the item (variable format; write() marks it).
  Status make(std::string_view key, std::string_view value, uint64_t kw, New* out) const;
  // Writes and flushes the item into r (variable format).
  void fill(const pm::Reservation& r, std::string_view key, std::string_view value, New* out) const;
  static Status pool_full(uint64_t size);
  // An item's key and value, if `value_word` holds a plausible item.
  bool parse(uint64_t value_word, std::string_view* key, std::string_view* value) const;
  bool variable_;
  pm::Allocator& alloc_;
};

}  // namespace pmhash::common
