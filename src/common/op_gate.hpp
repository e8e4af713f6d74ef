// What close() and check() do to concurrent callers: every public call passes the gate.
//   shut()     (close) later calls fail with Code::kClosed; returns once no call is inside
//              the gate or waiting at it (waiting calls wake up to kClosed).
//   Exclusive  (check) later calls wait at the gate until it ends; it starts once the calls
//              inside have left, so it sees a quiescent index. One at a time.
// One counter per thread id, written only by its thread: passing the gate costs two plain
// stores and a compiler barrier (common/asymmetric_fence.hpp), no locked instruction, so a
// caller's cache misses overlap from one call to the next; shut() and Exclusive pay the
// heavy fence and poll the counters. A thread already inside the gate (a call made from a
// for_each callback) passes a pending Exclusive, which would otherwise wait for it forever;
// the first kNesting gates a thread is inside are remembered for that.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace pmhash::common {

class OpGate {
 public:
  static constexpr unsigned kThreads = 256;  // thread ids: [0, kThreads)
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
  // Calls of thread `tid` inside the gate (more than one when nested); only that thread
  // writes it, the rare side reads it.
  struct alignas(64) Counter {
    std::atomic<int64_t> inside{0};
  };

  bool enter(unsigned tid, bool exclusive);
  Counter& counter(unsigned tid) const;
  template <std::memory_order kOrder>
  static void add(Counter& c, int64_t d);
  void wait_until_inside(unsigned tid, int64_t mine) const;
  void wait_until_alone(unsigned tid) const;
  void wait_until_empty() const;
  void note_entered();

  std::unique_ptr<Counter[]> counters_;
  std::atomic<uint32_t> state_{0};
  // Calls waiting at the gate. A call is always counted in its counter or here (it joins one
  // count before it leaves the other), so shut() can wait for every one of them.
  std::atomic<int64_t> waiting_{0};
};

}  // namespace pmhash::common
