// Reclamation (pm::Epochs on liburcu) and the shared lifecycle pieces (common::Worker,
// common::OpGate), each tested on its own. Deadlines below are liveness bounds (a hang
// becomes a failure instead of a ctest timeout), never speed thresholds.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/op_gate.hpp"
#include "common/worker.hpp"
#include "pm/epoch.hpp"

namespace pmhash::testing {
namespace {

using namespace std::chrono_literals;
constexpr auto kLiveness = 30s;

// Polls pred until it holds or the liveness deadline passes; returns pred's last value.
bool eventually(const std::function<bool()>& pred) {
  auto deadline = std::chrono::steady_clock::now() + kLiveness;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Gives the reclaimer every chance to (wrongly) run something: many grace periods' worth.
void let_others_run() {
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(1ms);
    std::this_thread::yield();
  }
}

// Waits until every callback queued so far has run: liburcu's call_rcu thread runs its
// queue in order, so a sentinel retired now runs after them. (Not liburcu's barrier: the
// library is not instrumented, and ThreadSanitizer reports the barrier's own bookkeeping.)
bool queued_callbacks_ran(pm::Epochs& e) {
  auto ran = std::make_shared<std::atomic<bool>>(false);
  e.retire([ran] { ran->store(true); });
  return eventually([&] { return ran->load(); });
}

// A reader that holds a Guard until told to leave.
class GuardHolder {
 public:
  explicit GuardHolder(pm::Epochs& e)
      : t_([this, &e] {
          pm::Epochs::Guard g(e);
          inside_.store(true);
          while (!leave_.load()) std::this_thread::sleep_for(100us);
        }) {
    while (!inside_.load()) std::this_thread::yield();
  }
  ~GuardHolder() { release(); }
  void release() {
    leave_.store(true);
    if (t_.joinable()) t_.join();
  }

 private:
  std::atomic<bool> inside_{false}, leave_{false};
  std::thread t_;
};

// drain() (close) must not return while liburcu's thread still runs a function it took:
// the allocator it releases into is destroyed next.
TEST(EpochReclamation, DrainWaitsForAFunctionAlreadyRunning) {
  auto e = std::make_unique<pm::Epochs>();
  std::atomic<bool> started{false}, finished{false};
  e->retire([&] {
    started = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    finished = true;
  });
  for (int i = 0; i < 60000 && !started; ++i)  // liveness bound: a minute
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(started.load());
  e->drain();
  EXPECT_TRUE(finished.load()) << "drain() returned while a retired function was running";
  e.reset();
}

// The backlog is bounded: past Epochs::kBacklog objects, settle() frees them at once.
TEST(EpochReclamation, SettleFreesABacklogPastTheBound) {
  pm::Epochs e;
  std::atomic<uint64_t> ran{0};
  {
    auto g = e.guard();  // no callback can run while this reader is inside
    for (size_t i = 0; i < pm::Epochs::kBacklog + 10; ++i) e.retire([&] { ran++; });
    EXPECT_EQ(ran.load(), 0u);
    e.settle();  // inside a read-side section: must not wait for itself
    EXPECT_EQ(ran.load(), 0u);
  }
  e.retire([&] { ran++; });  // the thread owes a reclamation now
  e.settle();
  EXPECT_EQ(e.pending(), 0u);
  // liburcu's thread (free to run once the guard ended) may have taken a function before
  // settle() emptied the list and not have run it yet: drain() waits for it (nothing is
  // left for drain() itself to run).
  e.drain();
  EXPECT_GE(ran.load(), pm::Epochs::kBacklog + 11 - 0u);
}

TEST(EpochReclamation, RetiredObjectWaitsForAReaderThatHoldsAGuard) {
  pm::Epochs e;
  std::atomic<int> runs{0};
  GuardHolder reader(e);
  std::thread retirer([&] { e.retire([&] { runs.fetch_add(1); }); });
  retirer.join();
  let_others_run();
  EXPECT_EQ(runs.load(), 0) << "freed while a reader that was inside at retire() still is";
  EXPECT_EQ(e.pending(), 1u);
  reader.release();
  // Prompt and bounded: no drain(), no further retire() needed to push it out.
  EXPECT_TRUE(eventually([&] { return runs.load() == 1; }));
  EXPECT_EQ(e.pending(), 0u);
}

TEST(EpochReclamation, RetiredObjectIsFreedWithoutDrainWhenNoReaderIsInside) {
  pm::Epochs e;
  std::atomic<int> runs{0};
  e.retire([&] { runs.fetch_add(1); });
  EXPECT_TRUE(eventually([&] { return runs.load() == 1; }));
  let_others_run();
  EXPECT_EQ(runs.load(), 1);
}

// The RCU pattern the schemes use: readers follow a published pointer under a Guard;
// writers publish a replacement, then retire the old object (poisoned, then deleted). A
// reader never sees a poisoned object; every object is freed exactly once.
TEST(EpochReclamation, ConcurrentRetiresFromManyThreadsWithReadersRunEachOnce) {
  constexpr int kThreads = 8, kSwapsPerThread = 300;
  constexpr uint64_t kLive = 0x11FE11FE11FE11FEull, kDead = 0xDEADDEADDEADDEADull;
  struct Object {
    std::atomic<uint64_t> magic{kLive};
  };
  pm::Epochs e;
  std::atomic<Object*> current{new Object};
  std::vector<std::atomic<int>> runs(kThreads * kSwapsPerThread);
  std::atomic<int> bad_reads{0}, writers_left{kThreads / 2};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    if (t % 2 == 0) {  // reader
      threads.emplace_back([&] {
        while (writers_left.load() > 0) {
          pm::Epochs::Guard g(e);
          Object* o = current.load(std::memory_order_acquire);
          for (int i = 0; i < 20; ++i)
            if (o->magic.load(std::memory_order_relaxed) != kLive) bad_reads.fetch_add(1);
        }
      });
    } else {  // writer: each retire also counts its own run
      threads.emplace_back([&, w = t / 2] {
        for (int i = 0; i < kSwapsPerThread * 2; ++i) {
          int id = (w * 2 + i % 2) * kSwapsPerThread + i / 2;
          Object* old = current.exchange(new Object, std::memory_order_acq_rel);
          e.retire([old, &runs, id] {
            old->magic.store(kDead, std::memory_order_relaxed);
            delete old;
            runs[id].fetch_add(1);
          });
        }
        writers_left.fetch_sub(1);
      });
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad_reads.load(), 0);
  ASSERT_TRUE(eventually([&] { return e.pending() == 0; })) << e.pending() << " never ran";
  e.drain();  // nothing left: must run nothing again
  ASSERT_TRUE(queued_callbacks_ran(e));
  for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1) << "object " << i;
  delete current.load();
}

TEST(EpochReclamation, DrainRunsWhatIsLeftOnceAndTheLaterCallbackDoesNotRunItAgain) {
  constexpr int kObjects = 100;
  pm::Epochs e;
  std::vector<std::atomic<int>> runs(kObjects);
  GuardHolder reader(e);  // keeps liburcu's callbacks from running before drain()
  for (int i = 0; i < kObjects; ++i) e.retire([&runs, i] { runs[i].fetch_add(1); });
  EXPECT_EQ(e.pending(), uint64_t(kObjects));
  e.drain();
  EXPECT_EQ(e.pending(), 0u);
  for (int i = 0; i < kObjects; ++i) EXPECT_EQ(runs[i].load(), 1) << i;
  reader.release();
  ASSERT_TRUE(queued_callbacks_ran(e));  // every queued liburcu callback has now run
  for (int i = 0; i < kObjects; ++i) EXPECT_EQ(runs[i].load(), 1) << i;
}

TEST(EpochReclamation, RetireFromInsideARetiredFunction) {
  pm::Epochs e;
  std::atomic<int> outer{0}, inner{0};
  e.retire([&] {
    outer.fetch_add(1);
    e.retire([&] { inner.fetch_add(1); });
  });
  EXPECT_TRUE(eventually([&] { return inner.load() == 1; }));
  EXPECT_EQ(outer.load(), 1);
  // The same through drain(): what a drained function retires is drained too.
  {
    GuardHolder reader(e);
    e.retire([&] {
      outer.fetch_add(1);
      e.retire([&] { inner.fetch_add(1); });
    });
    e.drain();
    EXPECT_EQ(outer.load(), 2);
    EXPECT_EQ(inner.load(), 2);
    EXPECT_EQ(e.pending(), 0u);
  }
  ASSERT_TRUE(queued_callbacks_ran(e));
  EXPECT_EQ(outer.load(), 2);
  EXPECT_EQ(inner.load(), 2);
}

// liburcu's call_rcu thread does not survive fork(); the atfork handlers make a new one.
TEST(EpochReclamation, RetireAndWaitWorkInAForkedChild) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot start threads after a multi-threaded fork";
#endif
  pm::Epochs parent;  // installs the atfork handlers
  std::atomic<int> runs{0};
  parent.retire([&] { runs.fetch_add(1); });
  ASSERT_TRUE(eventually([&] { return runs.load() == 1; }));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    pm::Epochs e;
    std::atomic<int> child_runs{0};
    { pm::Epochs::Guard g(e); }
    e.retire([&] { child_runs.fetch_add(1); });
    bool ok = eventually([&] { return child_runs.load() == 1; });
    _exit(ok ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died: status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a retire in the child never ran";
}

// --- common::Worker -------------------------------------------------------------------

// A task that can be held inside its run.
struct HeldTask {
  std::atomic<int> started{0}, finished{0};
  std::atomic<bool> hold{false};
  void operator()() {
    started.fetch_add(1);
    while (hold.load()) std::this_thread::sleep_for(100us);
    finished.fetch_add(1);
  }
};

TEST(Worker, WakesDuringARunCoalesceIntoOneMoreRun) {
  HeldTask task;
  task.hold = true;
  common::Worker w([&] { task(); });
  w.wake();
  ASSERT_TRUE(eventually([&] { return task.started.load() == 1; }));
  for (int i = 0; i < 10; ++i) w.wake();
  EXPECT_TRUE(w.busy());
  task.hold = false;
  w.wait_idle();
  EXPECT_EQ(task.finished.load(), 2);  // the first run, then one for the ten wakes
  let_others_run();
  EXPECT_EQ(task.started.load(), 2);
  EXPECT_FALSE(w.busy());
}

TEST(Worker, WaitIdleAfterWakeReturnsOnceTheRunHasFinished) {
  HeldTask task;
  common::Worker w([&] { task(); });
  for (int i = 0; i < 20; ++i) {
    w.wake();
    w.wait_idle();
    EXPECT_EQ(task.finished.load(), task.started.load());
    EXPECT_GE(task.finished.load(), 1);
  }
  w.wait_idle();  // nothing asked for: returns at once
}

TEST(Worker, StopWhileRunningLetsTheRunFinishThenJoins) {
  std::atomic<common::Worker*> self{nullptr};
  std::atomic<bool> started{false}, saw_stopping{false}, finished{false};
  common::Worker w([&] {
    started = true;
    while (!self.load()->stopping()) std::this_thread::sleep_for(100us);
    saw_stopping = true;
    finished = true;
  });
  self = &w;
  w.wake();
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  w.stop();
  EXPECT_TRUE(saw_stopping.load());
  EXPECT_TRUE(finished.load());  // stop() joined: the run is over
  EXPECT_TRUE(w.stopping());
}

TEST(Worker, StopIsIdempotent) {
  HeldTask task;
  common::Worker w([&] { task(); });
  w.wake();
  w.wait_idle();
  w.stop();
  w.stop();
  EXPECT_TRUE(w.stopping());
  EXPECT_EQ(task.finished.load(), 1);
}

TEST(Worker, DestructorJoinsARunningTask) {
  HeldTask task;
  task.hold = true;
  std::thread releaser;
  {
    common::Worker w([&] { task(); });
    w.wake();
    ASSERT_TRUE(eventually([&] { return task.started.load() == 1; }));
    releaser = std::thread([&] {
      std::this_thread::sleep_for(20ms);
      task.hold = false;
    });
  }  // ~Worker: must wait for the run
  EXPECT_EQ(task.finished.load(), 1);
  releaser.join();
}

TEST(Worker, WakeAfterStopIsIgnored) {
  HeldTask task;
  common::Worker w([&] { task(); });
  w.stop();
  w.wake();
  w.wake();
  w.wait_idle();  // returns: nothing will ever run
  let_others_run();
  EXPECT_EQ(task.started.load(), 0);
}

// A waiter whose request will never be served (stop() came first) is released.
TEST(Worker, WaitIdleReturnsWhenStopDropsAPendingRun) {
  HeldTask task;
  task.hold = true;
  common::Worker w([&] { task(); });
  w.wake();
  ASSERT_TRUE(eventually([&] { return task.started.load() == 1; }));
  w.wake();  // pending behind the held run
  std::atomic<bool> waited{false};
  std::thread waiter([&] {
    w.wait_idle();
    waited = true;
  });
  std::thread stopper([&] { w.stop(); });
  ASSERT_TRUE(eventually([&] { return w.stopping(); }));  // stop() has begun
  task.hold = false;
  stopper.join();
  EXPECT_TRUE(eventually([&] { return waited.load(); }));
  waiter.join();
  EXPECT_EQ(task.started.load(), 1);  // the pending run was dropped by stop()
  w.wait_idle();                      // and later waits return too
}

// --- common::OpGate -------------------------------------------------------------------

TEST(OpGate, EntersUntilShutThenRefuses) {
  common::OpGate g;
  EXPECT_FALSE(g.is_shut());
  {
    common::OpGate::Pass p(g, 3);
    EXPECT_TRUE(bool(p));
  }
  EXPECT_TRUE(g.shut());
  EXPECT_FALSE(g.shut());  // idempotent: reports it was already shut
  EXPECT_TRUE(g.is_shut());
  common::OpGate::Pass p(g, 3);
  EXPECT_FALSE(bool(p));
  EXPECT_FALSE(g.enter(70));
}

TEST(OpGate, ShutWaitsForEachCallInside) {
  common::OpGate g;
  // Thread ids 1 and 65 (once sharing a stripe of counters): shut() waits for both.
  ASSERT_TRUE(g.enter(1));
  ASSERT_TRUE(g.enter(65));
  std::atomic<bool> shut_done{false};
  std::thread closer([&] {
    g.shut();
    shut_done = true;
  });
  EXPECT_TRUE(eventually([&] { return g.is_shut(); }));
  let_others_run();
  EXPECT_FALSE(shut_done.load());
  g.exit(1);
  let_others_run();
  EXPECT_FALSE(shut_done.load());
  g.exit(65);
  EXPECT_TRUE(eventually([&] { return shut_done.load(); }));
  closer.join();
}

// No call is inside once shut() has returned, and none gets in later.
TEST(OpGate, NoCallIsInsideAfterShutReturns) {
  constexpr int kThreads = 8;
  common::OpGate g;
  std::atomic<bool> shut_returned{false};
  std::atomic<int> violations{0}, passes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (;;) {
        common::OpGate::Pass p(g, unsigned(t));
        if (!p) break;
        passes.fetch_add(1);
        if (shut_returned.load()) violations.fetch_add(1);
        std::this_thread::yield();
        if (shut_returned.load()) violations.fetch_add(1);
      }
      if (!shut_returned.load() && !g.is_shut()) violations.fetch_add(1);
    });
  ASSERT_TRUE(eventually([&] { return passes.load() > 1000; }));
  g.shut();
  shut_returned = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
}

}  // namespace
}  // namespace pmhash::testing
