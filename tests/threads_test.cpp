// More threads than an index has thread ids: the calls past the limit get a clear error,
// never an abort (96fb47b aborted the process).
#include "pm/threads.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace pmhash::testing {
namespace {

TEST(ThreadLimit, CallsPastTheLimitAreRefusedNotAborted) {
  TempPool p("threads");
  std::unique_ptr<Index> t;
  ASSERT_TRUE(Index::open(p.path, small_options("turbohash", Format::kFixed), &t).ok());
  const unsigned n = pm::ThreadRegistry::kMaxThreads + 20;
  std::atomic<unsigned> served{0}, refused{0}, other{0};
  std::latch all_called(n);
  std::vector<std::thread> ts;
  for (unsigned i = 0; i < n; ++i) {
    ts.emplace_back([&] {
      std::string v;
      Status s = t->get("12345678", &v);  // a thread keeps its id until it exits
      if (s.code() == Code::kNotFound)
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
  EXPECT_EQ(t->get("12345678", &v).code(), Code::kNotFound);
  EXPECT_TRUE(t->check().ok());
}

}  // namespace
}  // namespace pmhash::testing
