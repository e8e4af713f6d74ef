// A thread's id (pm::ThreadRegistry) stays its own until the thread has run every
// thread_local destructor: an application's per-thread object built before the thread's
// first index call is destroyed after pmhash's thread state (reverse order of
// construction) and may still call the index, e.g. a per-thread buffer flushed at thread
// exit. Were the id handed back first, a new thread could get it while the old one still
// calls with it, and two threads would write one OpGate counter (one writer per id):
// close() then never returned. The review of the OpGate without locked instructions found
// it (both tests fail before pm::LateThreadLocal).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "pm/threads.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

// A thread_local constructed before the thread's first index call is destroyed after the
// registry's thread cache (reverse order of construction): a per-thread buffer that
// flushes into the index on thread exit.
struct Late {
  std::function<void()> at_exit;
  ~Late() {
    if (at_exit) at_exit();
  }
};
thread_local Late late;

TEST(ThreadIdReuse, ALateThreadLocalDestructorSharesItsIdWithANewThread) {
  auto reg = pm::ThreadRegistry::make();
  std::atomic<unsigned> stale{pm::ThreadRegistry::kNoId}, other{pm::ThreadRegistry::kNoId};
  std::atomic<bool> released{false};
  std::thread a([&] {
    late.at_exit = [&] {  // runs after ~ThreadCache released the id
      stale = reg->try_id();
      released = true;
      while (other.load() == pm::ThreadRegistry::kNoId) std::this_thread::yield();
    };
    (void)reg->try_id();
  });
  std::thread b([&] {
    while (!released.load()) std::this_thread::yield();
    other = reg->try_id();
  });
  a.join();
  b.join();
  EXPECT_NE(stale.load(), other.load()) << "two live threads hold thread id " << other.load();
}

TEST(ThreadIdReuse, CloseReturnsAfterCallsFromALateThreadLocalDestructor) {
  TempPool p("tid-reuse");
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, small_options("lineht", Format::kFixed), &idx).ok());
  Index* ix = idx.get();
  constexpr int kCalls = 3'000'000;
  std::atomic<bool> released{false}, b_ready{false};
  std::thread a([&] {
    late.at_exit = [&] {
      released = true;
      while (!b_ready.load()) std::this_thread::yield();
      std::string v;
      for (int i = 0; i < kCalls; ++i) (void)ix->get("x", &v);  // passes the gate, refused
    };
    std::string v;
    (void)ix->get("x", &v);  // takes thread id 0
  });
  std::thread b([&] {
    while (!released.load()) std::this_thread::yield();
    std::string v;
    (void)ix->get("x", &v);  // takes the id a gave back
    b_ready = true;
    for (int i = 0; i < kCalls; ++i) (void)ix->get("x", &v);
  });
  a.join();
  b.join();
  // No call is in flight: close() must return at once.
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread closer([ix, done] {
    (void)ix->close();
    *done = true;
  });
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!*done && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!*done) {
    closer.detach();
    (void)idx.release();  // the closer still uses it; ~Index would wait forever too
    FAIL() << "close() did not return within 10 s with no call in flight";
  }
  closer.join();
}

}  // namespace
}  // namespace pmhash::testing
