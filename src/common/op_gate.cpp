#include "common/op_gate.hpp"

namespace pmhash::common {

namespace {
// The gates the calling thread is inside, innermost last (a for_each callback calling get();
// the crash simulator checking a crash image from inside a write). Deeper nesting than
// kNesting is not recorded: such a call waits for an Exclusive like any other.
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

void OpGate::note_entered() {
  if (tls_depth < kNesting) tls_inside[tls_depth] = this;
  ++tls_depth;
}

// enter() against shut() and against Exclusive form Dekker pairs (all sequentially
// consistent): either they see the caller's increment and wait for it, or the caller sees
// the gate shut or held.
bool OpGate::enter(unsigned tid) {
  std::atomic<int64_t>& c = stripes_[tid % kStripes].inside;
  for (;;) {
    c.fetch_add(1, std::memory_order_seq_cst);
    if (shut_.load(std::memory_order_seq_cst)) break;
    if (!held_.load(std::memory_order_seq_cst) || inside_a_call()) {
      note_entered();
      return true;
    }
    c.fetch_sub(1, std::memory_order_seq_cst);
    c.notify_all();
    held_.wait(true, std::memory_order_seq_cst);
  }
  c.fetch_sub(1, std::memory_order_seq_cst);
  c.notify_all();
  return false;
}

void OpGate::exit(unsigned tid) {
  --tls_depth;
  std::atomic<int64_t>& c = stripes_[tid % kStripes].inside;
  // An Exclusive waits for its own stripe to fall to 1, shut() for every stripe to fall to 0.
  if (c.fetch_sub(1, std::memory_order_seq_cst) <= 2) c.notify_all();
}

bool OpGate::shut() {
  bool was = shut_.exchange(true, std::memory_order_seq_cst);
  for (unsigned i = 0; i < kStripes; ++i) {
    std::atomic<int64_t>& c = stripes_[i].inside;
    for (int64_t v; (v = c.load(std::memory_order_seq_cst)) != 0;) c.wait(v);
  }
  return !was;
}

// Every stripe empty but the caller's own entry.
void OpGate::wait_until_alone(unsigned tid) {
  for (unsigned i = 0; i < kStripes; ++i) {
    std::atomic<int64_t>& c = stripes_[i].inside;
    const int64_t mine = i == tid % kStripes ? 1 : 0;
    for (int64_t v; (v = c.load(std::memory_order_seq_cst)) != mine;) c.wait(v);
  }
}

OpGate::Exclusive::Exclusive(OpGate& g, unsigned tid)
    : g_(g), tid_(tid), one_at_a_time_(g.exclusive_mu_), ok_(g.enter(tid)) {
  if (!ok_) return;
  g_.held_.store(true, std::memory_order_seq_cst);
  g_.wait_until_alone(tid);
}

OpGate::Exclusive::~Exclusive() {
  if (!ok_) return;
  g_.held_.store(false, std::memory_order_seq_cst);
  g_.held_.notify_all();
  g_.exit(tid_);
}

}  // namespace pmhash::common
