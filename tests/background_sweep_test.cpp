// The recovery sweep of the instant-recovery schemes runs in the background
// (BackgroundSweep, src/index/scheme.hpp) while writes that start right after a crash's open
// run beside it — growing the table (TurboHash resizes and §4.6 rehashes shards, PMEH splits
// segments and displaces records), updating and deleting. Blocks they free must never be
// swept again (double free), items they move or allocate must never be swept (their keys
// would vanish), and the crash's garbage must be freed.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

struct SweepCase {
  const char* scheme;
  std::map<std::string, std::string> params;  // small shards/segments: they grow meanwhile
  const char* grows;                          // the counter of structural changes
};

void PrintTo(const SweepCase& c, std::ostream* os) {
  *os << c.scheme;
}

class BackgroundSweepTest : public ::testing::TestWithParam<SweepCase> {};

std::string key_of(int t, int i) {
  return "t" + std::to_string(t) + "-key-" + std::to_string(i);
}
// Values of 64..448-byte items: several size classes of spare blocks.
std::string value_of(int n, const std::string& k) {
  return "v" + std::to_string(n) + "-" + k + std::string(size_t(n % 4) * 100, 'x');
}
// Where the background sweep waits before its walk (BackgroundSweep::test_before_walk).
struct SweepGate {
  std::atomic<bool> is_open{false};
  void open() {
    is_open = true;
    is_open.notify_all();
  }
  void wait() { is_open.wait(false); }
};
// Opens the gate on every way out of the test (~Index waits for the sweep).
struct OpenAtExit {
  std::shared_ptr<SweepGate> gate;
  ~OpenAtExit() { gate->open(); }
};

double counter(Index& idx, const char* name) {
  std::map<std::string, double> c;
  idx.impl()->scheme->counters(&c);
  return c[name];
}

TEST_P(BackgroundSweepTest, WritesDuringTheSweepLoseNothingAndTheCrashsGarbageIsFreed) {
  const SweepCase& c = GetParam();
  constexpr int kThreads = 4, kFirst = 40, kKeys = 1500, kGarbage = 100;  // > cores
  Options o = small_options(c.scheme, Format::kVariable);
  o.params = c.params;
  TempPool p, crashed("crashed");
  std::vector<std::map<std::string, std::string>> model(kThreads);
  {
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    for (int t = 0; t < kThreads; ++t)
      for (int i = 0; i < kFirst; ++i) {
        std::string k = key_of(t, i), v = value_of(i, k);
        ASSERT_TRUE(idx->insert(k, v).ok());
        model[t][k] = v;
      }
    // Garbage a crash leaves: blocks marked allocated that nothing references (as spares
    // taken for writes that never published them).
    for (int i = 0; i < kGarbage; ++i) ASSERT_TRUE(idx->impl()->alloc->spares().take(64 << i % 3));
    write_bytes(crashed.path, read_file(p.path));  // the crash: the file as it is now
  }
  o.create = false;
  o.params["test_sweep_pause_us"] = "20000";  // per 16 blocks the sweep reports
  // The sweep begins at the open (its maps live: frees and moves report to it) but starts
  // its walk only once the writers have finished kOverlap writes: how many writes fit into
  // the sweep no longer depends on the scheduler (under TSan on a loaded machine, 1,423 of
  // the required 2,000 did). The writers go on beside the walk until it has freed.
  constexpr uint64_t kOverlap = 2500;
  auto gate = std::make_shared<SweepGate>();
  BackgroundSweep::test_before_walk = [gate] { gate->wait(); };
  std::unique_ptr<Index> idx;
  OpenAtExit opener{gate};  // destroyed before idx
  ASSERT_TRUE(Index::open(crashed.path, o, &idx).ok());
  pm::Allocator& alloc = *idx->impl()->alloc;
  const double grown_before = counter(*idx, c.grows);
  std::atomic<uint64_t> during{0};  // writes that finished before the sweep did
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(t + 1);
      for (int n = 0; n < 6000 && alloc.swept() == 0; ++n) {
        // The key set grows; the first keys (items the sweep must find, wherever splits and
        // resizes move them) are only read.
        int keys = std::min(kKeys, kFirst + 1 + n / 2);
        std::string k = key_of(t, int(rng() % keys)), v = value_of(n, k);
        bool first = std::stoi(k.substr(k.rfind('-') + 1)) < kFirst;
        switch (first ? 3 : rng() % 4) {
          case 0:
          case 1:  // insert or update
            ASSERT_TRUE(idx->upsert(k, v).ok());
            model[t][k] = v;
            break;
          case 2:
            ASSERT_EQ(idx->remove(k).ok(), model[t].erase(k) == 1);
            break;
          default: {
            std::string got;
            bool present = model[t].count(k) != 0;
            ASSERT_EQ(idx->get(k, &got).ok(), present) << k;
            if (present) {
              ASSERT_EQ(got, model[t][k]);
            }
          }
        }
        if (during.fetch_add(1) + 1 == kOverlap) gate->open();
        idx->impl()->epochs->reclaim_now();  // freed blocks reused soon: reuse races the sweep
      }
    });
  for (auto& th : threads) th.join();
  gate->open();  // writers that stopped at a failed ASSERT
  idx->impl()->scheme->wait_idle();
  BackgroundSweep::test_before_walk = nullptr;  // the sweep has run
  EXPECT_GE(during.load(), kOverlap) << "the writes must overlap the sweep";
  EXPECT_GT(counter(*idx, c.grows), grown_before) << "the table must grow during the sweep";
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

INSTANTIATE_TEST_SUITE_P(
    Schemes, BackgroundSweepTest,
    ::testing::Values(SweepCase{"turbohash", {{"shards", "64"}, {"buckets", "1"}}, "shard_resizes"},
                      SweepCase{"pmeh",
                                {{"segment_bytes", "2048"}, {"zones", "2"}, {"depth", "1"}},
                                "segment_splits"}),
    [](const auto& info) { return std::string(info.param.scheme); });

}  // namespace
}  // namespace pmhash::testing
