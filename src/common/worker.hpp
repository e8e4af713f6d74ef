// One lifecycle for background work (SmartHT's filter rebuild, WOPHI's bucket
// pre-allocation, HDNH's partner writers): a long-lived thread, started in the constructor
// and stopped in stop() or the destructor, that runs its task each time it is woken.
//
//   wake()       asks for a run; wakes that arrive while the task runs coalesce into one
//                more run, so a burst of requests never starts a burst of threads.
//   wait_idle()  returns once every run asked for before the call has finished.
//   stop()       lets the current run finish (the task may poll stopping() to end early),
//                then joins; idempotent; later wake()s do nothing.
//
// `spins` trades CPU for latency: the worker spins that many times for the next request
// before it sleeps, and wait_idle() spins as long before it sleeps (HDNH's partner hands a
// job over per write; the others leave it 0).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

namespace pmhash::common {

class Worker {
 public:
  explicit Worker(std::function<void()> task, uint32_t spins = 0);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void wake();
  void wait_idle();
  void stop();
  bool stopping() const { return stop_.load(std::memory_order_acquire); }
  // For the task: sleeps until `t` (polling every millisecond); false, at once, when stop()
  // has been asked.
  bool pause_until(std::chrono::steady_clock::time_point t) const;
  // A run was asked for and has not finished.
  bool busy() const {
    return done_.load(std::memory_order_acquire) != requested_.load(std::memory_order_acquire);
  }

 private:
  void loop();

  std::function<void()> task_;
  uint32_t spins_;
  std::atomic<uint32_t> requested_{0};  // runs asked for (wraps)
  std::atomic<uint32_t> done_{0};       // the `requested_` value the last finished run served
  std::atomic<bool> stop_{false};
  std::atomic<bool> exited_{false};  // the loop has ended
  std::thread thread_;               // last: starts once everything above is initialised
};

}  // namespace pmhash::common
