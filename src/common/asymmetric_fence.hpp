// An asymmetric Dekker fence: the frequent side pays a compiler barrier, the rare side a
// membarrier(2) system call that makes every running thread of the process execute a full
// memory barrier (what liburcu's urcu-memb flavour does for its readers; liburcu has no
// public call for it, hence this file).
//
//   frequent side:  store A; light_fence(); load B
//   rare side:      store B; heavy_fence(); load A
//
// At least one of the two loads sees the other side's store. A locked instruction or an
// mfence on the frequent side would do the same, but it waits for the thread's earlier
// loads, so a reader's cache miss could no longer overlap the next operation's (issue 19:
// 1.4x read throughput for the OpGate). Where membarrier is refused (an old kernel, a
// seccomp filter), both sides fall back to a sequentially consistent fence.
#pragma once

#include <atomic>

namespace pmhash::common {

namespace detail {
bool asymmetric_fences();  // membarrier registered for this process (decided once)
inline const bool kAsymmetric = asymmetric_fences();
}  // namespace detail

inline void light_fence() {
  if (detail::kAsymmetric)
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

void heavy_fence();

}  // namespace pmhash::common
