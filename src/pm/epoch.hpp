// Reclamation (DRAM) for everything a lock-free reader may still hold: an old shard after a
// resize, an old level set, a replaced filter, the block of a replaced or deleted
// variable-size item.
//
// Built on liburcu's memb flavour (read-side sections cost a compiler barrier; grace
// periods use the membarrier syscall; its call_rcu thread frees retired objects one grace
// period after retirement, so reclamation is prompt and bounded, with no quiescent-state
// calls from the application). The class keeps the name the schemes use: a Guard is an RCU
// read-side section, retire() is call_rcu.
//
// The order is always: publish the replacement, then retire the old object.
//
// liburcu's grace periods are process-wide. drain() must not wait for them: another index
// (or a thread the crash simulator parked inside a read-side section) may hold one open
// for a long time. So each Epochs keeps its own list of what it has retired and drain(),
// called only when no reader of *this* index can be active (close), runs what is left of it
// directly; the call_rcu callbacks of drained objects then find nothing to do.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace pmhash::pm {

class Epochs {
 public:
  Epochs();
  ~Epochs();

  class Guard {
   public:
    explicit Guard(Epochs& e);
    Guard(Epochs& e, unsigned tid) : Guard(e) { (void)tid; }  // the schemes' old form
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    Epochs& e_;
  };

  Guard guard() { return Guard(*this); }
  // Runs fn once every read-side section that was active at this call has ended.
  void retire(std::function<void()> fn);
  // Runs everything retired and not yet run; only when no reader of this index can be
  // active (close, destruction, tests).
  void drain();
  // Objects retired and not yet run (tests, stats).
  uint64_t pending() const;
  // Waits for a grace period and runs everything this index retired before it; false when
  // nothing was pending or the caller is inside a read-side section. Only where the caller
  // holds no lock a reader may wait for: Index calls it between operations, and before it
  // reports a full pool it retries the write once after it.
  bool reclaim_now();
  // Once this many objects wait, the thread that retired the last one reclaims them itself
  // in settle(), which Index calls when the operation has returned: the backlog is bounded.
  static constexpr size_t kBacklog = 1024;
  void settle();

  struct Shared;  // the per-index list, shared with the pending callbacks

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace pmhash::pm
