// More threads than an index has thread ids: the calls past the limit get a clear error,
// never an abort (96fb47b aborted the process).
#include "pm/threads.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

void calls_past_the_limit(const std::string& scheme, std::map<std::string, std::string> params) {
  TempPool p("threads");
  std::unique_ptr<Index> t;
  Options o = small_options(scheme, Format::kFixed);
  o.params = std::move(params);
  ASSERT_TRUE(Index::open(p.path, o, &t).ok());
  const unsigned n = pm::ThreadRegistry::kMaxThreads + 20;
  std::atomic<unsigned> served{0}, refused{0}, other{0};
  std::latch all_called(n);
  std::vector<std::thread> ts;
  for (unsigned i = 0; i < n; ++i) {
    ts.emplace_back([&] {
      std::string v;
      // A write (HDNH's background mode starts a partner per writer), then a read.
      Status s = t->upsert("12345678", "abcdefgh");
      if (s.ok()) s = t->get("12345678", &v);  // a thread keeps its id until it exits
      if (s.ok())
        served++;
      else if (s.code() == Code::kInvalidArgument)
        refused++;
      else
        other++;
      all_called.arrive_and_wait();  // every thread is alive when the others call
    });
  }
  for (auto& th : ts) th.join();
  EXPECT_EQ(served.load(), pm::ThreadRegistry::kMaxThreads);
  EXPECT_EQ(refused.load(), 20u);
  EXPECT_EQ(other.load(), 0u);
  // The ids came back when the threads exited.
  std::string v;
  EXPECT_TRUE(t->get("12345678", &v).ok());
  EXPECT_TRUE(t->check().ok());
}

TEST(ThreadLimit, CallsPastTheLimitAreRefusedNotAborted) {
  calls_past_the_limit("turbohash", {});
}

// HDNH's background partners used to take thread ids too: 129 writers aborted the process.
TEST(ThreadLimit, HdnhBackgroundPartnersTakeNoThreadIds) {
  calls_past_the_limit("hdnh", {{"sync_write", "background"}});
}

}  // namespace
}  // namespace pmhash::testing

namespace pmhash::testing {
namespace {

// Updates of variable items retire a block each: reclamation must keep up, so a small pool
// holding 100 keys never fills however long the updates go on (with liburcu alone, WOPHI
// filled a 16 MiB pool after 5,710 updates of 1 KB values).
class ChurnTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChurnTest, UpdatesOfAFewKeysNeverFillTheFreedSpace) {
  TempPool p("churn");
  Options o = small_options(GetParam(), Format::kVariable);
  o.pool_size = 32u << 20;
  std::unique_ptr<Index> t;
  ASSERT_TRUE(Index::open(p.path, o, &t).ok());
  std::string value(2000, 'v');
  for (int i = 0; i < 40000; ++i) {  // 80 MB of values through a 32 MiB pool
    value[i % value.size()] = static_cast<char>('a' + i % 26);
    Status s = t->upsert("key" + std::to_string(i % 100), value);
    ASSERT_TRUE(s.ok()) << "update " << i << ": " << s.to_string();
    // Bounded: what waits for reclamation never exceeds the backlog bound (+1 per call).
    ASSERT_LE(t->impl()->epochs->pending(), pm::Epochs::kBacklog + 1) << "update " << i;
  }
  EXPECT_EQ(t->size(), 100u);
  EXPECT_TRUE(t->check().ok());
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, ChurnTest, ::testing::ValuesIn(schemes()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pmhash::testing
