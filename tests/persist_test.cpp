// The persistence primitives count what they do, and the hook sees every call.
#include "pm/persist.hpp"

#include <gtest/gtest.h>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

struct CountingHook : pm::PersistHook {
  int maps = 0, flushes = 0, fences = 0;
  void on_map(char*, size_t) override { ++maps; }
  void on_flush(const void*, size_t) override { ++flushes; }
  void on_fence() override { ++fences; }
};

TEST(Persist, CountsLinesFencesAndBytes) {
  alignas(64) static char buf[256];
  pm::Persister p;
  p.instr = pm::best_flush_instruction();
  PersistCounters before = thread_persist_counters();
  p.persist(buf, 8);     // one line
  p.flush(buf + 60, 8);  // straddles two lines
  p.flush(buf, 256);     // four lines
  p.fence();
  PersistCounters after = thread_persist_counters();
  EXPECT_EQ(after.flushes - before.flushes, 1u + 2u + 4u);
  EXPECT_EQ(after.fences - before.fences, 2u);
  EXPECT_EQ(after.bytes_flushed - before.bytes_flushed, 7u * 64u);
}

TEST(Persist, CountersArePerThread) {
  alignas(64) static char buf[64];
  pm::Persister p;
  PersistCounters before = thread_persist_counters();
  std::thread t([&] {
    for (int i = 0; i < 100; ++i) p.persist(buf, 8);
  });
  t.join();
  EXPECT_EQ(thread_persist_counters().flushes, before.flushes);
}

TEST(Persist, HookSeesEveryFlushAndFence) {
  alignas(64) static char buf[128];
  CountingHook hook;
  pm::Persister p;
  p.hook = &hook;
  p.persist(buf, 8);
  p.flush(buf, 128);
  p.fence();
#ifdef PMHASH_CRASH_HOOKS
  EXPECT_EQ(hook.flushes, 2);
  EXPECT_EQ(hook.fences, 2);
#else
  GTEST_SKIP() << "built without PMHASH_CRASH_HOOKS";
#endif
}

TEST(Persist, NoneModeCountsButDoesNotFence) {
  TempPool p;
  Options o = small_options("turbohash", Format::kFixed);
  o.mode = Mode::kNone;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  EXPECT_EQ(idx->stats().mode, Mode::kNone);
  EXPECT_FALSE(idx->impl()->pool->persister().fence_enabled);
  PersistCounters before = thread_persist_counters();
  ASSERT_TRUE(idx->insert("12345678", "abcdefgh").ok());
  EXPECT_GT(thread_persist_counters().flushes, before.flushes);  // still accounted
}

TEST(Persist, InjectedDelayIsApplied) {
  TempPool p;
  Options o = small_options("turbohash", Format::kFixed);
  o.pm_write_delay_ns = 600;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  EXPECT_EQ(idx->impl()->pool->persister().delay_ns, 600u);
}

}  // namespace
}  // namespace pmhash::testing
