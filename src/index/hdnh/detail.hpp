// Helpers shared by the HDNH files: spin locks, the second hash function, the hot items of
// the variable format, and the classes nested in Hdnh that more than one file uses.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <string>
#include <thread>

#include "index/hdnh/hdnh.hpp"

namespace pmhash::hdnh {

namespace detail {

inline void cpu_relax() {
  asm volatile("pause" ::: "memory");
}

// The second hash function (§3.1: two hash functions, 2-choice for segments and buckets).
inline uint64_t mix(uint64_t x) {
  x ^= 0x9E37'79B9'7F4A'7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58'476D'1CE4'E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D0'49BB'1331'11EBull;
  return x ^ (x >> 31);
}

// A spin lock word (DRAM); writers of one key hold it for a few hundred nanoseconds.
inline void lock_word(std::atomic<uint32_t>& w) {
  for (int spins = 0;; ++spins) {
    uint32_t expect = 0;
    if (w.load(std::memory_order_relaxed) == 0 &&
        w.compare_exchange_weak(expect, 1, std::memory_order_acquire))
      return;
    if (spins < 64)
      cpu_relax();
    else
      std::this_thread::yield();
  }
}
inline bool try_lock_word(std::atomic<uint32_t>& w) {
  uint32_t expect = 0;
  return w.compare_exchange_strong(expect, 1, std::memory_order_acquire);
}
inline void unlock_word(std::atomic<uint32_t>& w) {
  w.store(0, std::memory_order_release);
}

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

// A hot item of the variable format: an immutable DRAM copy, freed after an epoch.
struct HotItem {
  std::string key, value;
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
