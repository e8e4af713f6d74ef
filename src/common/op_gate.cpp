#include "common/op_gate.hpp"

#include <thread>

namespace pmhash::common {

OpGate::OpGate() : stripes_(new Stripe[kStripes]) {}

// enter() and shut() form a Dekker pair (both sequentially consistent): either shut()
// sees the caller's increment and waits for it, or the caller sees the gate shut.
bool OpGate::enter(unsigned tid) {
  std::atomic<int64_t>& c = stripes_[tid % kStripes].inside;
  c.fetch_add(1, std::memory_order_seq_cst);
  if (!shut_.load(std::memory_order_seq_cst)) return true;
  exit(tid);
  return false;
}

void OpGate::exit(unsigned tid) {
  std::atomic<int64_t>& c = stripes_[tid % kStripes].inside;
  if (c.fetch_sub(1, std::memory_order_seq_cst) == 1) c.notify_all();
}

bool OpGate::shut() {
  bool was = shut_.exchange(true, std::memory_order_seq_cst);
  for (unsigned i = 0; i < kStripes; ++i) {
    std::atomic<int64_t>& c = stripes_[i].inside;
    for (int64_t v; (v = c.load(std::memory_order_seq_cst)) != 0;) c.wait(v);
  }
  return !was;
}

}  // namespace pmhash::common
