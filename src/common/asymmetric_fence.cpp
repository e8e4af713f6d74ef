#include "common/asymmetric_fence.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace pmhash::common {

namespace {
long membarrier(int cmd) {
  return syscall(__NR_membarrier, cmd, 0, 0);
}
}  // namespace

bool detail::asymmetric_fences() {
  static const bool ok = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
                         membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
  return ok;
}

// Asks the function, not kAsymmetric: a light_fence() that read kAsymmetric before its
// initialization used the full fence, which pairs with either kind.
void heavy_fence() {
  if (!detail::asymmetric_fences()) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return;
  }
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // The registration is the process's; should it be lost (it is kept across fork), the
  // global command needs none: slower (it waits for every CPU to schedule), as strong.
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
      membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    return;
  membarrier(MEMBARRIER_CMD_GLOBAL);
}

}  // namespace pmhash::common
