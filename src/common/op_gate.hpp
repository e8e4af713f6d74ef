// What close() and check() do to concurrent callers: every public call passes the gate.
//   shut()     (close) later calls fail with Code::kClosed; returns once no call is inside
//              the gate or waiting at it (waiting calls wake up to kClosed).
//   Exclusive  (check) later calls wait at the gate until it ends; it starts once the calls
//              inside have left, so it sees a quiescent index. One at a time.
// Counters are striped by thread id so that passing the gate costs one uncontended atomic
// increment and decrement. A thread already inside the gate (a call made from a for_each
// callback) passes a pending Exclusive, which would otherwise wait for it forever; the first
// kNesting gates a thread is inside are remembered for that.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace pmhash::common {

class OpGate {
 public:
  OpGate();
  // Enters the gate; false once it is shut (the caller returns kClosed).
  bool enter(unsigned tid) { return enter(tid, false); }
  void exit(unsigned tid);
  // Shuts the gate and waits until no call is inside or waiting. Idempotent; false if it
  // was shut.
  bool shut();
  bool is_shut() const { return (state_.load(std::memory_order_acquire) & kShut) != 0; }
  // True while the calling thread is inside this gate (a for_each callback).
  bool inside_a_call() const;
  // True while the calling thread is inside any gate.
  static bool inside_any_call();
  // Calls waiting at the gate now (tests).
  int64_t waiting() const { return waiting_.load(std::memory_order_seq_cst); }

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

  // Holds every other call out of the gate while it lives (false if the gate is shut).
  // Not from inside a call: it would wait for that call forever (see inside_any_call()).
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
    bool ok_;
  };

 private:
  // state_: the gate's two conditions in one word, so that a waiting call wakes for either.
  static constexpr uint32_t kHeld = 1;  // an Exclusive holds the gate
  static constexpr uint32_t kShut = 2;  // close() has shut it
  struct alignas(64) Stripe {
    std::atomic<int64_t> inside{0};
  };
  static constexpr unsigned kStripes = 64;

  bool enter(unsigned tid, bool exclusive);
  void leave_stripe(std::atomic<int64_t>& c);
  void wait_until_alone(unsigned tid);
  void wait_until_empty();
  void note_entered();

  std::unique_ptr<Stripe[]> stripes_;
  std::atomic<uint32_t> state_{0};
  // Calls waiting at the gate. A call is always counted in its stripe or here (it joins one
  // count before it leaves the other), so shut() can wait for every one of them.
  std::atomic<int64_t> waiting_{0};
};

}  // namespace pmhash::common
