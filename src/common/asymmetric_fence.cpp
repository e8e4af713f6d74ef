#include "common/asymmetric_fence.hpp"

#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

namespace pmhash::common {

namespace {
long membarrier(int cmd) {
  return syscall(__NR_membarrier, cmd, 0, 0);
}

// The last resort, should membarrier be refused after it was registered (a seccomp filter
// installed later): taking write access away from a page this thread has written makes
// the kernel interrupt every CPU that may cache its mapping (a TLB shootdown), which
// executes a full barrier there — the fallback folly's asymmetric barrier uses. x86 with
// interrupt-based TLB flushes only (not arm64's or INVLPGB's broadcast flushes).
void shootdown_fence() {
  static std::mutex mu;
  static char* page = [] {
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }();
  std::lock_guard<std::mutex> g(mu);
  if (page == nullptr || mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0) std::abort();
  *static_cast<volatile char*>(page) = 1;  // the mapping is now cached where this runs
  if (mprotect(page, 4096, PROT_READ) != 0) std::abort();
}
}  // namespace

bool enable_asymmetric_fences() {
  static const bool ok = [] {
    bool yes = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
               membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
    if (yes) detail::asymmetric.store(true, std::memory_order_seq_cst);
    return yes;
  }();
  return ok;
}

void heavy_fence() {
  full_fence();                             // this thread's own side
  if (!enable_asymmetric_fences()) return;  // every light_fence() is a full fence
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // The registration is the process's and survives fork; should it be lost, register
  // again; the global command needs none (slower: it waits for every CPU to schedule).
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
      membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    return;
  if (membarrier(MEMBARRIER_CMD_GLOBAL) == 0) return;
  shootdown_fence();
}

}  // namespace pmhash::common
