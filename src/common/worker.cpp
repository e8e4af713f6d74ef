#include "common/worker.hpp"

#include <algorithm>

#include "common/spin_lock.hpp"

namespace pmhash::common {

namespace {
// A wrapping counter `a` has reached `b` (they never drift 2^31 apart).
inline bool reached(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) >= 0;
}
}  // namespace

Worker::Worker(std::function<void()> task, uint32_t spins)
    : task_(std::move(task)), spins_(spins), thread_([this] { loop(); }) {}

Worker::~Worker() {
  stop();
}

void Worker::wake() {
  if (stopping()) return;
  requested_.fetch_add(1, std::memory_order_acq_rel);
  requested_.notify_one();
}

void Worker::wait_idle() {
  uint32_t target = requested_.load(std::memory_order_acquire);
  for (uint32_t spins = 0;; ++spins) {
    uint32_t d = done_.load(std::memory_order_acquire);
    if (reached(d, target) || exited_.load(std::memory_order_acquire)) return;
    if (spins < spins_)
      cpu_relax();
    else
      done_.wait(d, std::memory_order_acquire);
  }
}

void Worker::loop() {
  uint32_t served = 0;
  for (;;) {
    uint32_t r;
    for (uint32_t spins = 0; (r = requested_.load(std::memory_order_acquire)) == served; ++spins) {
      if (spins < spins_)
        cpu_relax();
      else
        requested_.wait(served, std::memory_order_acquire);
    }
    if (stopping()) break;
    task_();
    served = r;
    done_.store(r, std::memory_order_release);
    done_.notify_all();
  }
  // Release every waiter: nothing more will run.
  exited_.store(true, std::memory_order_release);
  done_.fetch_add(1, std::memory_order_acq_rel);
  done_.notify_all();
}

bool Worker::pause_until(std::chrono::steady_clock::time_point t) const {
  for (auto now = std::chrono::steady_clock::now(); now < t;
       now = std::chrono::steady_clock::now()) {
    if (stopping()) return false;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(t - now, std::chrono::milliseconds(1)));
  }
  return !stopping();
}

void Worker::stop() {
  if (!stop_.exchange(true, std::memory_order_acq_rel)) {
    requested_.fetch_add(1, std::memory_order_acq_rel);  // wake the sleeping loop
    requested_.notify_one();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

}  // namespace pmhash::common
