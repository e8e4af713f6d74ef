// A one-word DRAM spin lock, for critical sections of a few hundred nanoseconds (HDNH's
// stripe locks and hot-table writers, PMEH's zone locks), and the CPU's spin-wait hint.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace pmhash::common {

// Tells the CPU this is a spin-wait loop (x86 `pause`); nothing elsewhere.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("pause" ::: "memory");
#endif
}

// The wait of every spin loop here: spins briefly, then yields (more threads than cores).
inline void spin_backoff(int spins) {
  if (spins < 64)
    cpu_relax();
  else
    std::this_thread::yield();
}

// Word 0: free; 1: held.
inline void lock_word(std::atomic<uint32_t>& w) {
  for (int spins = 0;; ++spins) {
    uint32_t expect = 0;
    if (w.load(std::memory_order_relaxed) == 0 &&
        w.compare_exchange_weak(expect, 1, std::memory_order_acquire))
      return;
    spin_backoff(spins);
  }
}

// Waits until a flag another thread holds is let go (acquire: what it wrote before is seen).
template <class T>
inline void wait_while_set(const std::atomic<T>& flag) {
  for (int spins = 0; flag.load(std::memory_order_acquire) != 0; ++spins) spin_backoff(spins);
}
inline bool try_lock_word(std::atomic<uint32_t>& w) {
  uint32_t expect = 0;
  return w.compare_exchange_strong(expect, 1, std::memory_order_acquire);
}
inline void unlock_word(std::atomic<uint32_t>& w) {
  w.store(0, std::memory_order_release);
}

}  // namespace pmhash::common
