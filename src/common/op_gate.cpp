#include "common/op_gate.hpp"

namespace pmhash::common {

namespace {
// The gates the calling thread is inside, innermost last (a for_each callback calling get();
// the crash simulator checking a crash image from inside a write). Deeper nesting than
// kNesting is counted but not remembered: such a call waits for an Exclusive like any other.
constexpr int kNesting = 8;
thread_local const OpGate* tls_inside[kNesting];
thread_local int tls_depth = 0;
}  // namespace

OpGate::OpGate() : stripes_(new Stripe[kStripes]) {}

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

// An Exclusive waits for its own stripe to fall to 1, shut() for every stripe to fall to 0.
void OpGate::leave_stripe(std::atomic<int64_t>& c) {
  if (c.fetch_sub(1, std::memory_order_seq_cst) <= 2) c.notify_all();
}

// The caller's increment and the gate's state form Dekker pairs with shut() and Exclusive
// (all sequentially consistent): either they see the increment and wait for it, or the
// caller sees the gate shut or held.
bool OpGate::enter(unsigned tid, bool exclusive) {
  std::atomic<int64_t>& c = stripes_[tid % kStripes].inside;
  c.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    uint32_t st = state_.load(std::memory_order_seq_cst);
    if (st & kShut) break;
    if (!(st & kHeld) && exclusive &&
        !state_.compare_exchange_strong(st, st | kHeld, std::memory_order_seq_cst))
      continue;
    if (!(st & kHeld) || (!exclusive && inside_a_call())) {
      note_entered();
      return true;
    }
    waiting_.fetch_add(1, std::memory_order_seq_cst);  // counted here before leaving c
    leave_stripe(c);
    state_.wait(st, std::memory_order_seq_cst);
    c.fetch_add(1, std::memory_order_seq_cst);  // counted in c before leaving waiting_
    if (waiting_.fetch_sub(1, std::memory_order_seq_cst) == 1) waiting_.notify_all();
  }
  leave_stripe(c);
  return false;
}

void OpGate::exit(unsigned tid) {
  --tls_depth;
  leave_stripe(stripes_[tid % kStripes].inside);
}

void OpGate::wait_until_empty() {
  for (unsigned i = 0; i < kStripes; ++i) {
    std::atomic<int64_t>& c = stripes_[i].inside;
    for (int64_t v; (v = c.load(std::memory_order_seq_cst)) != 0;) c.wait(v);
  }
}

bool OpGate::shut() {
  uint32_t was = state_.fetch_or(kShut, std::memory_order_seq_cst);
  state_.notify_all();  // waiting calls wake up to kClosed
  // A waiting call moves into its stripe before it leaves waiting_, and no call starts to
  // wait once it has seen the gate shut: empty stripes after an empty waiting_ means gone.
  for (int64_t w;;) {
    while ((w = waiting_.load(std::memory_order_seq_cst)) != 0) waiting_.wait(w);
    wait_until_empty();
    if (waiting_.load(std::memory_order_seq_cst) == 0) break;
  }
  return (was & kShut) == 0;
}

// Every stripe empty but the caller's own entry.
void OpGate::wait_until_alone(unsigned tid) {
  for (unsigned i = 0; i < kStripes; ++i) {
    std::atomic<int64_t>& c = stripes_[i].inside;
    const int64_t mine = i == tid % kStripes ? 1 : 0;
    for (int64_t v; (v = c.load(std::memory_order_seq_cst)) != mine;) c.wait(v);
  }
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
