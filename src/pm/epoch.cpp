#include "pm/epoch.hpp"

#include <pthread.h>
#include <urcu/urcu-memb.h>

#include <mutex>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
// liburcu is not instrumented: tell ThreadSanitizer that a reader's section ends before a
// callback that a grace period ordered after it, and that retire() precedes its callback.
#define PMHASH_TSAN_RELEASE(p) __tsan_release(p)
#define PMHASH_TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define PMHASH_TSAN_RELEASE(p) (void)(p)
#define PMHASH_TSAN_ACQUIRE(p) (void)(p)
#endif

namespace pmhash::pm {
namespace {

// liburcu needs every reader thread registered; threads need no registration in pmhash's
// API, so a thread registers on its first read-side section and unregisters when it exits.
// liburcu's call_rcu thread registers itself: a retired function that retires again (or
// takes a Guard) must not register it a second time (liburcu asserts), nor unregister it.
struct ReaderRegistration {
  bool registered = false;
  bool owned = false;  // registered by us: unregister at thread exit
  ~ReaderRegistration() {
    if (owned) urcu_memb_unregister_thread();
  }
  void ensure() {
    if (registered) return;
    urcu_memb_register_thread();
    registered = owned = true;
  }
  void registered_by_liburcu() { registered = true; }
};
thread_local ReaderRegistration registration;

// A forked child has no call_rcu thread until liburcu is told (tests fork writers).
std::once_flag atfork_once;
void install_atfork() {
  std::call_once(atfork_once, [] {
    pthread_atfork(urcu_memb_call_rcu_before_fork, urcu_memb_call_rcu_after_fork_parent,
                   urcu_memb_call_rcu_after_fork_child);
  });
}

char tsan_sync;  // the address ThreadSanitizer's annotations synchronize on

}  // namespace

struct Retired {
  rcu_head head;  // first member: the callback gets &head
  std::shared_ptr<Epochs::Shared> owner;
  std::function<void()> fn;  // emptied by drain()
  size_t index = 0;          // position in owner->retired
};

struct Epochs::Shared {
  std::mutex mu;
  std::vector<Retired*> retired;  // not yet run, in no order

  // Takes r out of the list; returns its function (empty if drain() ran it).
  std::function<void()> take(Retired* r) {
    std::lock_guard<std::mutex> g(mu);
    if (!r->fn) return {};
    Retired* last = retired.back();
    retired[r->index] = last;
    last->index = r->index;
    retired.pop_back();
    return std::move(r->fn);
  }
};

namespace {
void run_retired(rcu_head* head) {
  Retired* r = reinterpret_cast<Retired*>(head);
  registration.registered_by_liburcu();  // we run on liburcu's call_rcu thread
  PMHASH_TSAN_ACQUIRE(&tsan_sync);
  std::function<void()> fn = r->owner->take(r);
  if (fn) fn();
  delete r;
}
}  // namespace

Epochs::Epochs(std::shared_ptr<ThreadRegistry> threads) : shared_(std::make_shared<Shared>()) {
  (void)threads;
  install_atfork();
}

Epochs::~Epochs() {
  drain();
}

Epochs::Guard::Guard(Epochs& e) : e_(e) {
  registration.ensure();
  urcu_memb_read_lock();
}

Epochs::Guard::~Guard() {
  PMHASH_TSAN_RELEASE(&tsan_sync);
  urcu_memb_read_unlock();
  (void)e_;
}

void Epochs::retire(std::function<void()> fn) {
  auto* r = new Retired{};
  r->owner = shared_;
  r->fn = std::move(fn);
  {
    std::lock_guard<std::mutex> g(shared_->mu);
    r->index = shared_->retired.size();
    shared_->retired.push_back(r);
  }
  registration.ensure();  // call_rcu wants a registered caller
  PMHASH_TSAN_RELEASE(&tsan_sync);
  urcu_memb_call_rcu(&r->head, run_retired);
}

void Epochs::drain() {
  for (;;) {  // a function may retire more
    std::vector<std::function<void()>> fns;
    {
      std::lock_guard<std::mutex> g(shared_->mu);
      for (Retired* r : shared_->retired) {
        fns.push_back(std::move(r->fn));
        r->fn = nullptr;  // its callback, still queued in liburcu, will find nothing
      }
      shared_->retired.clear();
    }
    if (fns.empty()) return;
    for (auto& f : fns) f();
  }
}

uint64_t Epochs::pending() const {
  std::lock_guard<std::mutex> g(shared_->mu);
  return shared_->retired.size();
}

}  // namespace pmhash::pm
