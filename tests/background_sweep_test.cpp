// The recovery sweep of the instant-recovery schemes runs in the background
// (BackgroundSweep, src/index/scheme.hpp): writes that start right after a crash's open run
// beside it. Blocks they free must never be swept again (double free), blocks they allocate
// must never be swept (their items would vanish), and the crash's garbage must be freed.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

struct SweepCase {
  const char* scheme;
  std::map<std::string, std::string> params;  // small shards/segments: a walk with many parts
  const char* pause_param;                    // the walk sleeps this long per part
};

void PrintTo(const SweepCase& c, std::ostream* os) {
  *os << c.scheme;
}

class BackgroundSweepTest : public ::testing::TestWithParam<SweepCase> {};

std::string key_of(int t, int i) {
  return "t" + std::to_string(t) + "-key-" + std::to_string(i);
}

TEST_P(BackgroundSweepTest, WritesDuringTheSweepLoseNothingAndTheCrashsGarbageIsFreed) {
  const SweepCase& c = GetParam();
  constexpr int kThreads = 4, kKeys = 300, kGarbage = 100;  // more threads than cores
  Options o = small_options(c.scheme, Format::kVariable);
  o.params = c.params;
  TempPool p, crashed("crashed");
  std::vector<std::map<std::string, std::string>> model(kThreads);
  {
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    for (int t = 0; t < kThreads; ++t)
      for (int i = 0; i < kKeys; ++i) {
        std::string k = key_of(t, i), v = "v0-" + k;
        ASSERT_TRUE(idx->insert(k, v).ok());
        model[t][k] = v;
      }
    // Garbage a crash leaves: blocks marked allocated that nothing references (as spares
    // taken for writes that never published them).
    for (int i = 0; i < kGarbage; ++i) ASSERT_TRUE(idx->impl()->alloc->spares().take(64));
    write_bytes(crashed.path, read_file(p.path));  // the crash: the file as it is now
  }
  o.create = false;
  o.params[c.pause_param] = "300";
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(crashed.path, o, &idx).ok());
  pm::Allocator& alloc = *idx->impl()->alloc;
  std::atomic<uint64_t> during{0};  // writes that finished before the sweep did
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(t + 1);
      for (int n = 0; n < 3000; ++n) {
        std::string k = key_of(t, int(rng() % kKeys)), v = "v" + std::to_string(n) + "-" + k;
        switch (rng() % 3) {
          case 0:  // update or insert
            ASSERT_TRUE(idx->upsert(k, v).ok());
            model[t][k] = v;
            break;
          case 1:
            ASSERT_EQ(idx->remove(k).ok(), model[t].erase(k) == 1);
            break;
          default: {
            std::string got;
            bool present = model[t].count(k) != 0;
            ASSERT_EQ(idx->get(k, &got).ok(), present);
            if (present) {
              ASSERT_EQ(got, model[t][k]);
            }
          }
        }
        if (alloc.swept() == 0) during.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  idx->impl()->scheme->wait_idle();
  EXPECT_GT(during.load(), 1000u) << "the writes must overlap the sweep";
  EXPECT_GE(alloc.swept(), uint64_t(kGarbage));  // the crash's garbage (and spares) freed
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;  // allocated == reachable, no double use
  size_t n = 0;
  for (int t = 0; t < kThreads; ++t)
    for (auto& [k, v] : model[t]) {
      std::string got;
      ASSERT_TRUE(idx->get(k, &got).ok()) << k;
      EXPECT_EQ(got, v);
      ++n;
    }
  EXPECT_EQ(idx->size(), n);
  Status closed = idx->close();
  ASSERT_TRUE(closed.ok()) << closed.to_string();
  idx.reset();
  // A clean reopen: nothing left to sweep, nothing lost.
  Status s = Index::open(crashed.path, o, &idx);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(idx->size(), n);
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

INSTANTIATE_TEST_SUITE_P(Schemes, BackgroundSweepTest,
                         ::testing::Values(SweepCase{
                             "turbohash", {{"shards", "64"}}, "test_sweep_pause_us"}),
                         [](const auto& info) { return std::string(info.param.scheme); });

}  // namespace
}  // namespace pmhash::testing
