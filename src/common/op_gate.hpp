// What close() does to concurrent callers: every public call passes the gate; close()
// shuts it, so later calls fail with Code::kClosed, and waits for the calls already
// inside to finish before the index shuts down. Counters are striped by thread id so that
// passing the gate costs one uncontended atomic increment and decrement.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "pm/threads.hpp"

namespace pmhash::common {

class OpGate {
 public:
  OpGate();
  // Enters the gate; false once it is shut (the caller returns kClosed).
  bool enter(unsigned tid);
  void exit(unsigned tid);
  // Shuts the gate and waits until no call is inside. Idempotent; false if it was shut.
  bool shut();
  bool is_shut() const { return shut_.load(std::memory_order_acquire); }

  class Pass {
   public:
    Pass(OpGate& g, unsigned tid) : g_(g), tid_(tid), ok_(g.enter(tid)) {}
    ~Pass() {
      if (ok_) g_.exit(tid_);
    }
    explicit operator bool() const { return ok_; }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;

   private:
    OpGate& g_;
    unsigned tid_;
    bool ok_;
  };

 private:
  struct alignas(64) Stripe {
    std::atomic<int64_t> inside{0};
  };
  static constexpr unsigned kStripes = 64;
  std::unique_ptr<Stripe[]> stripes_;
  std::atomic<bool> shut_{false};
};

}  // namespace pmhash::common
