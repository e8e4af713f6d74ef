// check() on a live index: it holds every other call out at the gate and waits for the
// scheme's background work, so it reports no problem while writers and workers run (a
// check that ran beside them read half-linked blocks as leaks and raced with the workers:
// TSan, WOPHI with background bucket pre-allocation). More threads than cores.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace pmhash::testing {
namespace {

class CheckTest : public ::testing::TestWithParam<SchemeConfig> {
 protected:
  bool fixed() const { return GetParam().format == Format::kFixed; }
  std::unique_ptr<Index> open(const TempPool& p) const {
    Options o = small_options(GetParam().scheme, GetParam().format);
    o.params = GetParam().params();
    std::unique_ptr<Index> idx;
    Status s = Index::open(p.path, o, &idx);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return idx;
  }
};

constexpr int kWriters = 3;
constexpr uint64_t kKeysPerWriter = 3000;

TEST_P(CheckTest, CheckBesideWritersFindsNoProblemAndLosesNothing) {
  TempPool p("check-live");
  std::unique_ptr<Index> idx = open(p);
  ASSERT_TRUE(idx);
  std::atomic<int> running{kWriters};
  std::atomic<uint64_t> done_ops{0};
  std::atomic<int> checks{0};
  constexpr int kChecks = 8;
  std::vector<Model> models(kWriters);
  std::vector<std::string> errors(kWriters);
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; ++t)
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      for (int op = 0; (op < 6000 || checks.load() < kChecks) && errors[t].empty(); ++op) {
        std::string k = make_key((rng() % kKeysPerWriter) * kWriters + t, fixed());
        std::string v = make_value(k, uint32_t(op), fixed());
        bool del = rng() % 4 == 0;
        Code c = del ? idx->remove(k).code() : idx->upsert(k, v).code();
        Code e = del ? models[t].remove(k) : models[t].upsert(k, v);
        if (c != e)
          errors[t] = std::string("op returned ") + code_name(c) + ", model " + code_name(e);
        done_ops.fetch_add(1);
      }
      running.fetch_sub(1);
    });
  // kChecks checks, each after 500 more writes (a check holds the writers off while it
  // runs, so back-to-back checks would starve them); the writers go on until the last.
  std::string first_report;
  for (uint64_t next = 500; checks.load() < kChecks; next += 500) {
    while (done_ops.load() < next && running.load() > 0) std::this_thread::yield();
    std::string report;
    Status s = idx->check(&report);
    if (!s.ok() && first_report.empty()) first_report = report;
    checks.fetch_add(1);
  }
  for (auto& w : writers) w.join();
  for (int t = 0; t < kWriters; ++t) EXPECT_EQ(errors[t], "") << "writer " << t;
  EXPECT_EQ(first_report, "") << "check() beside writers";
  uint64_t expected = 0, wrong = 0;
  std::string got;
  for (auto& m : models) {
    expected += m.size();
    for (auto& [k, v] : m.items())
      if (!idx->get(k, &got).ok() || got != v) ++wrong;
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(idx->size(), expected);
  EXPECT_TRUE(idx->check().ok());
}

// A get() from a for_each callback passes; a check() from the callback is refused instead
// of waiting for its own caller forever, also of another index (two threads doing so
// crosswise would wait for each other).
TEST_P(CheckTest, CheckFromAForEachCallbackIsRefused) {
  TempPool p("check-nested"), p2("check-other");
  std::unique_ptr<Index> idx = open(p), other = open(p2);
  ASSERT_TRUE(idx && other);
  for (uint64_t i = 0; i < 50; ++i) {
    std::string k = make_key(i, fixed());
    ASSERT_TRUE(idx->insert(k, make_value(k, 1, fixed())).ok());
  }
  struct Ctx {
    Index* idx;
    Index* other;
    uint64_t visited = 0, found = 0;
    Code nested_check = Code::kOk, other_check = Code::kOk;
  } ctx{idx.get(), other.get()};
  idx->for_each(
      [](void* c, std::string_view k, std::string_view) {
        auto* x = static_cast<Ctx*>(c);
        std::string v;
        ++x->visited;
        if (x->idx->get(k, &v).ok()) ++x->found;
        if (x->visited == 1) x->nested_check = x->idx->check().code();
        if (x->visited == 2) x->other_check = x->other->check().code();
      },
      &ctx);
  EXPECT_EQ(ctx.visited, 50u);
  EXPECT_EQ(ctx.found, 50u);
  EXPECT_EQ(ctx.nested_check, Code::kInvalidArgument);
  EXPECT_EQ(ctx.other_check, Code::kInvalidArgument);
  EXPECT_TRUE(other->check().ok());
  EXPECT_TRUE(idx->check().ok());
}

INSTANTIATE_TEST_SUITE_P(All, CheckTest, ::testing::ValuesIn(all_scheme_configs()),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace pmhash::testing
