// What close() and check() do to concurrent callers: every public call passes the gate.
//   shut()   (close) later calls fail with Code::kClosed; waits for the calls inside.
//   Exclusive (check) later calls wait at the gate until it ends; it starts once the calls
//            inside have left, so it sees a quiescent index. close() waits for it.
// Counters are striped by thread id so that passing the gate costs one uncontended atomic
// increment and decrement. A thread already inside the gate (a call made from a for_each
// callback) passes a pending Exclusive, which would otherwise wait for it forever.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

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

  // True while the calling thread is inside this gate (a for_each callback).
  bool inside_a_call() const;

  // Holds every other call out of the gate while it lives (false if the gate is shut).
  // Not from inside a call: it would wait for that call forever (see inside_a_call()).
  class Exclusive {
   public:
    Exclusive(OpGate& g, unsigned tid);
    ~Exclusive();
    explicit operator bool() const { return ok_; }
    Exclusive(const Exclusive&) = delete;
    Exclusive& operator=(const Exclusive&) = delete;

   private:
    OpGate& g_;
    unsigned tid_;
    std::unique_lock<std::mutex> one_at_a_time_;
    bool ok_;
  };

 private:
  struct alignas(64) Stripe {
    std::atomic<int64_t> inside{0};
  };
  static constexpr unsigned kStripes = 64;
  void wait_until_alone(unsigned tid);
  void note_entered();

  std::unique_ptr<Stripe[]> stripes_;
  std::atomic<bool> shut_{false};
  std::atomic<bool> held_{false};  // an Exclusive holds the gate
  std::mutex exclusive_mu_;
};

}  // namespace pmhash::common
