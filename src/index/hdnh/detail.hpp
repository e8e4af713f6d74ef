// Helpers shared by the HDNH files: the stripe lock, the second hash function, the hot items of
// the variable format, and the classes nested in Hdnh that more than one file uses.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <thread>

#include "common/spin_lock.hpp"
#include "index/hdnh/hdnh.hpp"

namespace pmhash::hdnh {

namespace detail {

using common::cpu_relax;

// The second hash function (§3.1: two hash functions, 2-choice for segments and buckets).
inline uint64_t mix(uint64_t x) {
  x ^= 0x9E37'79B9'7F4A'7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58'476D'1CE4'E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D0'49BB'1331'11EBull;
  return x ^ (x >> 31);
}

// Stripe and hot-table writer locks: common/spin_lock.hpp.
using common::lock_word;
using common::try_lock_word;
using common::unlock_word;

inline uint64_t bit(int slot) {
  return uint64_t{1} << slot;
}

inline thread_local uint64_t tl_random = 0x2545'F491'4F6C'DD1Dull;
inline uint64_t next_random() {
  tl_random ^= tl_random << 13;
  tl_random ^= tl_random >> 7;
  tl_random ^= tl_random << 17;
  return tl_random;
}

// A hot item of the variable format too long to be inline: an immutable DRAM copy, freed
// after an epoch. One allocation (was a struct of two std::strings: three for long ones):
//
//   bytes 0..3 key length, 4..7 value length, then the key's bytes, then the value's
class HotItem {
 public:
  static HotItem* make(std::string_view key, std::string_view value) {
    void* mem = ::operator new(sizeof(HotItem) + key.size() + value.size());
    auto* item = new (mem) HotItem(uint32_t(key.size()), uint32_t(value.size()));
    std::memcpy(item->bytes(), key.data(), key.size());
    std::memcpy(item->bytes() + key.size(), value.data(), value.size());
    return item;
  }
  static void destroy(const HotItem* item) { ::operator delete(const_cast<HotItem*>(item)); }
  std::string_view key() const { return {bytes(), key_len_}; }
  std::string_view value() const { return {bytes() + key_len_, value_len_}; }
  uint64_t dram_bytes() const { return sizeof(HotItem) + key_len_ + value_len_; }

 private:
  HotItem(uint32_t k, uint32_t v) : key_len_(k), value_len_(v) {}
  char* bytes() { return reinterpret_cast<char*>(this + 1); }
  const char* bytes() const { return reinterpret_cast<const char*>(this + 1); }
  uint32_t key_len_, value_len_;
};

enum HotOp { kHotPut = 1, kHotRemove = 2 };

}  // namespace detail

using detail::lock_word;
using detail::unlock_word;

class Hdnh::StripeLock {
 public:
  explicit StripeLock(std::atomic<uint32_t>& w) : w_(w) { lock_word(w_); }
  ~StripeLock() { unlock_word(w_); }
  StripeLock(const StripeLock&) = delete;
  StripeLock& operator=(const StripeLock&) = delete;

 private:
  std::atomic<uint32_t>& w_;
};

// §3.4: each foreground thread has a background partner that does the hot-table half of a
// write while the foreground writes the non-volatile table; the Worker's request/done
// counters are the sync_write_signal.
struct Hdnh::Partner {
  // Spins before sleeping (partner) or waiting (foreground): a write stream hands a job over
  // every microsecond or so.
  static constexpr uint32_t kSpins = 1u << 10;
  HotJob* job = nullptr;  // set by the foreground before wake()
  bool unpinned = false;  // touched by the partner thread only
  common::Worker worker;  // last: its thread starts once the fields above exist
  explicit Partner(Hdnh* h) : worker([this, h] { h->run_partner(this); }, kSpins) {}
};

}  // namespace pmhash::hdnh
