#include "common/op_gate.hpp"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <thread>

#include "common/asymmetric_fence.hpp"
#include "common/spin_lock.hpp"

namespace pmhash::common {

namespace {
// The gates the calling thread is inside, innermost last (a for_each callback calling get();
// the crash simulator checking a crash image from inside a write). Deeper nesting than
// kNesting is counted but not remembered: such a call waits for an Exclusive like any other.
constexpr int kNesting = 8;
thread_local const OpGate* tls_inside[kNesting];
thread_local int tls_depth = 0;
}  // namespace

OpGate::OpGate() : counters_(new Counter[kThreads]) {
  enable_asymmetric_fences();
}

bool OpGate::inside_a_call() const {
  for (int i = 0; i < tls_depth && i < kNesting; ++i)
    if (tls_inside[i] == this) return true;
  return false;
}

bool OpGate::inside_any_call() {
  return tls_depth > 0;
}

void OpGate::note_entered() {
  if (tls_depth < kNesting) tls_inside[tls_depth] = this;
  ++tls_depth;
}

OpGate::Counter& OpGate::counter(unsigned tid) const {
  assert(tid < kThreads);
  return counters_[tid];
}

// Only the counter's own thread writes it: a load and a store, no locked instruction. The
// order is a template argument: given one at run time, GCC stores with seq_cst (an `xchg`,
// locked), which made every call wait for its stores, flushes included, to drain.
template <std::memory_order kOrder>
void OpGate::add(Counter& c, int64_t d) {
  c.inside.store(c.inside.load(std::memory_order_relaxed) + d, kOrder);
}

// The caller's increment and the gate's state form a Dekker pair with shut() and Exclusive:
// the caller stores, light_fence(), loads state_; they store state_, heavy_fence(), load
// the counters. Either they see the increment and wait for it, or the caller sees the gate
// shut or held. A call leaves with a release store, so what it did happens before the
// shut() or Exclusive that sees it gone.
bool OpGate::enter(unsigned tid, bool exclusive) {
  Counter& c = counter(tid);
  add<std::memory_order_relaxed>(c, 1);
  light_fence();
  for (;;) {
    uint32_t st = state_.load(std::memory_order_acquire);
    if (st & kShut) break;
    if (!(st & kHeld) && exclusive &&
        !state_.compare_exchange_strong(st, st | kHeld, std::memory_order_seq_cst))
      continue;
    if (!(st & kHeld) || (!exclusive && inside_a_call())) {
      note_entered();
      return true;
    }
    waiting_.fetch_add(1, std::memory_order_seq_cst);  // counted here before leaving c
    add<std::memory_order_release>(c, -1);
    state_.wait(st, std::memory_order_seq_cst);
    add<std::memory_order_relaxed>(c, 1);  // counted in c before leaving waiting_
    full_fence();
    if (waiting_.fetch_sub(1, std::memory_order_seq_cst) == 1) waiting_.notify_all();
  }
  add<std::memory_order_release>(c, -1);
  return false;
}

void OpGate::exit(unsigned tid) {
  --tls_depth;
  add<std::memory_order_release>(counter(tid), -1);
}

// The rare side polls: calls leave without telling anyone (a notify would cost the fast
// path a check). Spins briefly, then yields, then sleeps up to a millisecond at a time.
void OpGate::wait_until_inside(unsigned tid, int64_t mine) const {
  const std::atomic<int64_t>& c = counter(tid).inside;
  for (int round = 0; c.load(std::memory_order_acquire) != mine; ++round) {
    if (round < 64)
      cpu_relax();
    else if (round < 1024)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(round - 1000, 1000)));
  }
}

void OpGate::wait_until_empty() const {
  for (unsigned i = 0; i < kThreads; ++i) wait_until_inside(i, 0);
}

bool OpGate::shut() {
  uint32_t was = state_.fetch_or(kShut, std::memory_order_seq_cst);
  state_.notify_all();  // waiting calls wake up to kClosed
  heavy_fence();        // a call entering from now on sees kShut, or is seen inside
  // A waiting call moves into its counter before it leaves waiting_, and no call starts to
  // wait once it has seen the gate shut: empty counters after an empty waiting_ means gone.
  for (int64_t w;;) {
    while ((w = waiting_.load(std::memory_order_seq_cst)) != 0) waiting_.wait(w);
    wait_until_empty();
    if (waiting_.load(std::memory_order_seq_cst) == 0) break;
  }
  return (was & kShut) == 0;
}

// Every counter empty but the caller's own entry (after the CAS that set kHeld).
void OpGate::wait_until_alone(unsigned tid) const {
  heavy_fence();
  for (unsigned i = 0; i < kThreads; ++i) wait_until_inside(i, i == tid ? 1 : 0);
}

OpGate::Exclusive::Exclusive(OpGate& g, unsigned tid) : g_(g), tid_(tid), ok_(g.enter(tid, true)) {
  if (ok_) g_.wait_until_alone(tid);
}

OpGate::Exclusive::~Exclusive() {
  if (!ok_) return;
  g_.state_.fetch_and(~kHeld, std::memory_order_seq_cst);
  g_.state_.notify_all();
  g_.exit(tid_);  // last: close() may free the gate once this has left
}

}  // namespace pmhash::common
