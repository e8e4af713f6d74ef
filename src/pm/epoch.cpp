#include "pm/epoch.hpp"

#include <pthread.h>
#include <urcu/urcu-memb.h>

#include <condition_variable>
#include <mutex>
#include <vector>

#include "pm/threads.hpp"

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
// Unregistered after the application's thread_local destructors, which may still call in.
ReaderRegistration& registration() {
  return LateThreadLocal<ReaderRegistration>::get();
}

// A forked child has no call_rcu thread until liburcu is told (tests fork writers).
std::once_flag atfork_once;
void install_atfork() {
  std::call_once(atfork_once, [] {
    pthread_atfork(urcu_memb_call_rcu_before_fork, urcu_memb_call_rcu_after_fork_parent,
                   urcu_memb_call_rcu_after_fork_child);
  });
}

char tsan_sync;  // the address ThreadSanitizer's annotations synchronize on

// The index whose backlog this thread should reclaim when its read-side section ends.
thread_local const void* reclaim_owed = nullptr;

}  // namespace

struct Retired {
  rcu_head head;  // first member: the callback gets &head
  std::shared_ptr<Epochs::Shared> owner;
  std::function<void()> fn;  // emptied by drain()
  size_t index = 0;          // position in owner->retired
};

struct Epochs::Shared {
  std::mutex mu;
  std::condition_variable idle;
  std::vector<Retired*> retired;  // not yet run, in no order
  uint64_t running = 0;           // functions liburcu's thread has taken and not finished

  // Takes r out of the list; returns its function (empty if drain() ran it).
  std::function<void()> take(Retired* r) {
    std::lock_guard<std::mutex> g(mu);
    if (!r->fn) return {};
    Retired* last = retired.back();
    retired[r->index] = last;
    last->index = r->index;
    retired.pop_back();
    running++;
    return std::move(r->fn);
  }
  void finished() {
    std::lock_guard<std::mutex> g(mu);
    if (--running == 0) idle.notify_all();
  }
  // Empties the list: the functions to run now (their queued callbacks will find nothing).
  std::vector<std::function<void()>> take_all() {
    std::vector<std::function<void()>> fns;
    std::lock_guard<std::mutex> g(mu);
    for (Retired* r : retired) {
      fns.push_back(std::move(r->fn));
      r->fn = nullptr;
    }
    retired.clear();
    return fns;
  }
};

namespace {
void run_retired(rcu_head* head) {
  Retired* r = reinterpret_cast<Retired*>(head);
  registration().registered_by_liburcu();  // we run on liburcu's call_rcu thread
  PMHASH_TSAN_ACQUIRE(&tsan_sync);
  if (std::function<void()> fn = r->owner->take(r)) {
    fn();
    r->owner->finished();
  }
  delete r;
}
}  // namespace

Epochs::Epochs() : shared_(std::make_shared<Shared>()) {
  install_atfork();
}

Epochs::~Epochs() {
  drain();
}

Epochs::Guard::Guard(Epochs& e) : e_(e) {
  registration().ensure();
  urcu_memb_read_lock();
}

Epochs::Guard::~Guard() {
  PMHASH_TSAN_RELEASE(&tsan_sync);
  urcu_memb_read_unlock();
  (void)e_;
}

void Epochs::retire(std::function<void()> fn) {
  if (!fn) return;
  auto* r = new Retired{};
  r->owner = shared_;
  r->fn = std::move(fn);
  size_t backlog;
  {
    std::lock_guard<std::mutex> g(shared_->mu);
    r->index = shared_->retired.size();
    shared_->retired.push_back(r);
    backlog = shared_->retired.size();
  }
  registration().ensure();  // call_rcu wants a registered caller
  PMHASH_TSAN_RELEASE(&tsan_sync);
  urcu_memb_call_rcu(&r->head, run_retired);
  // Bounded: a writer that retires faster than liburcu's one thread frees (updates of
  // variable items on 2 busy cores) frees the backlog itself when its call has returned
  // (settle()): here it may hold locks that readers wait for inside a read-side section.
  if (backlog >= kBacklog) reclaim_owed = shared_.get();
}

bool Epochs::reclaim_now() {
  // Inside a read-side section a grace period would wait for this very thread.
  if (registration().registered && urcu_memb_read_ongoing()) return false;
  std::vector<std::function<void()>> fns = shared_->take_all();
  if (fns.empty()) return false;
  urcu_memb_synchronize_rcu();  // everything taken was retired before this grace period
  PMHASH_TSAN_ACQUIRE(&tsan_sync);
  for (auto& f : fns) f();
  return true;
}

void Epochs::settle() {
  if (reclaim_owed != shared_.get()) return;
  // Inside a read-side section the debt stays for the next settle() outside it (dropping it
  // here left a backlog that liburcu had shrunk below the bound unreclaimed: the test
  // SettleFreesABacklogPastTheBound failed under ASan with 857 pending).
  if (registration().registered && urcu_memb_read_ongoing()) return;
  reclaim_owed = nullptr;
  reclaim_now();
}

void Epochs::drain() {
  for (;;) {  // a function may retire more
    std::vector<std::function<void()>> fns = shared_->take_all();
    if (fns.empty()) break;
    for (auto& f : fns) f();
  }
  // A function liburcu's thread took before we emptied the list may still be running.
  std::unique_lock<std::mutex> g(shared_->mu);
  shared_->idle.wait(g, [&] { return shared_->running == 0; });
}

uint64_t Epochs::pending() const {
  std::lock_guard<std::mutex> g(shared_->mu);
  return shared_->retired.size();
}

}  // namespace pmhash::pm
