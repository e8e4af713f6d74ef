// An asymmetric Dekker fence: the frequent side pays a compiler barrier, the rare side a
// membarrier(2) system call that makes every running thread of the process execute a full
// memory barrier (what liburcu's urcu-memb flavour does for its readers; liburcu has no
// public call for it, hence this file).
//
//   frequent side:  store A; light_fence(); load B
//   rare side:      store B; heavy_fence(); load A
//
// At least one of the two loads sees the other side's store. A locked instruction or an
// mfence on the frequent side would do the same at a price on every call (it waits for
// the thread's earlier stores, flushes included, and loads; its cost alone was not
// separable in session 13's measurement, docs/schemes/lineht.md). Where membarrier is
// refused (an old kernel, a seccomp filter), both sides use a sequentially consistent fence.
#pragma once

#include <atomic>

namespace pmhash::common {

namespace detail {
// Set by enable_asymmetric_fences() once membarrier is registered. A light_fence() that
// reads false uses the full fence, which pairs with either kind of heavy_fence().
inline std::atomic<bool> asymmetric{false};
}  // namespace detail

// Registers this process for membarrier (once; later calls return the first answer). Call
// before the frequent side runs (OpGate's constructor); nothing happens at library load.
bool enable_asymmetric_fences();

// A full fence. ThreadSanitizer does not model fences (GCC refuses to build them with it):
// there, a sequentially consistent read-modify-write, a `lock`ed instruction and so a full
// barrier on x86, stands in.
inline void full_fence() {
#if defined(__SANITIZE_THREAD__)
  static std::atomic<int> word{0};
  word.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

inline void light_fence() {
  if (detail::asymmetric.load(std::memory_order_relaxed))
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    full_fence();
}

void heavy_fence();

}  // namespace pmhash::common
