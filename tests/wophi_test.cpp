// WOPHI's log-free writes and its Pre-Allocation Buckets.
#include "index/wophi/wophi.hpp"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "index_impl.hpp"
#include "mixed_workload.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

TEST(WophiBucket, LayoutTwoCacheLines) {
  EXPECT_EQ(sizeof(wophi::Bucket), 128u);
  EXPECT_EQ(offsetof(wophi::Bucket, slots), 16u);
  EXPECT_EQ(offsetof(wophi::Bucket, unused), 80u);
}

class WophiTest : public ::testing::TestWithParam<Format> {
 protected:
  bool fixed() const { return GetParam() == Format::kFixed; }
  std::string key(uint64_t i) const { return make_key(i, fixed()); }
  std::string value(uint64_t i) const { return make_value(key(i), 1, fixed()); }
  std::map<std::string, double> counters(Index& i) {
    std::map<std::string, double> c;
    i.impl()->scheme->counters(&c);
    return c;
  }
};

// Algorithms 1 and 2: a free-slot insert is data, flush, fence; token, flush, fence (two
// flushes); a delete is one flush and one fence.
TEST_P(WophiTest, FlushesPerOperation) {
  if (!fixed()) GTEST_SKIP() << "the variable format adds the allocator's commit";
  TempPool p;
  std::unique_ptr<Index> idx;
  Options o = small_options("wophi", GetParam());
  o.params = {{"buckets", "65536"}};
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  const int n = 2000;
  PersistCounters a = thread_persist_counters();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
  PersistCounters b = thread_persist_counters();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->remove(key(i)).ok());
  PersistCounters c = thread_persist_counters();
  EXPECT_EQ(b.flushes - a.flushes, 2u * n);
  EXPECT_EQ(b.fences - a.fences, 2u * n);
  EXPECT_EQ(c.flushes - b.flushes, uint64_t(n));
  EXPECT_EQ(c.fences - b.fences, uint64_t(n));
}

// Chains come from the PAB, which grows (off the critical path) instead of failing.
TEST_P(WophiTest, PreAllocatedBucketsGrow) {
  TempPool p;
  std::unique_ptr<Index> idx;
  Options o = small_options("wophi", GetParam());
  o.params = {{"buckets", "64"}, {"pab_buckets", "8"}};
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  Model m;
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(idx->insert(key(i), value(i)).ok()) << i;
    m.insert(key(i), value(i));
  }
  auto c = counters(*idx);
  EXPECT_GE(c["pab_areas"], 5);
  EXPECT_GE(c["pab_used"], 5000 / 4 - 64);
  EXPECT_EQ(c["chain_allocs_on_write"], 0);
  std::string v;
  for (auto& [k, val] : m.items()) ASSERT_TRUE(idx->get(k, &v).ok() && v == val);
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
  // Reopen after a crash: the chains are walked and the PAB counter is rebuilt.
  idx->impl()->closed = true;
  idx.reset();
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  EXPECT_EQ(counters(*idx)["pab_used"], c["pab_used"]);
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
  EXPECT_EQ(idx->size(), m.size());
}

// The baseline the PAB replaces: every chain bucket allocated on the write path, leak-free.
TEST_P(WophiTest, AllocateOnWriteVariant) {
  TempPool p;
  std::unique_ptr<Index> idx;
  Options o = small_options("wophi", GetParam());
  o.params = {{"buckets", "64"}, {"pab_buckets", "8"}, {"pab", "off"}};
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
  auto c = counters(*idx);
  EXPECT_GT(c["chain_allocs_on_write"], 2000 / 4 - 64 - 1);
  EXPECT_EQ(c["pab_used"], 0);
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;  // includes allocated == reachable
}

void expect_holds(Index& idx, const Model& m, const std::string& when) {
  std::string v;
  uint64_t missing = 0, wrong = 0;
  for (auto& [k, val] : m.items()) {
    Status s = idx.get(k, &v);
    missing += !s.ok();
    wrong += s.ok() && v != val;
  }
  EXPECT_EQ(missing, 0u) << when;
  EXPECT_EQ(wrong, 0u) << when;
  EXPECT_EQ(idx.size(), m.size()) << when;
  std::string report;
  EXPECT_TRUE(idx.impl()->check(&report)) << when << ": " << report;
}

// Bug 12: background PAB growth (the default) with two writers must never reassign a
// joinable std::thread (std::terminate). Several small pools, each filled to the brim.
TEST_P(WophiTest, BackgroundGrowthWithTwoWriters) {
  for (int round = 0; round < 6; ++round) {
    TempPool p;
    Options o = small_options("wophi", GetParam());
    o.pool_size = 8u << 20;
    o.params = {{"buckets", "4096"}, {"pab_buckets", "64"}};
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    std::atomic<uint64_t> stored{0};
    std::atomic<int> other_errors{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 2; ++t)
      ts.emplace_back([&, t] {
        int full = 0;
        for (uint64_t i = t; full < 200; i += 2) {
          Status s = idx->insert(key(i), value(i));
          if (s.ok())
            stored++;
          else if (s.code() == Code::kPoolFull)
            full++;
          else
            other_errors++;
        }
      });
    for (auto& t : ts) t.join();
    EXPECT_EQ(other_errors.load(), 0);
    auto c = counters(*idx);
    EXPECT_GE(c["pab_grows"], 3) << "round " << round;
    EXPECT_LE(c["pab_used"], c["pab_capacity"]);
    EXPECT_EQ(idx->size(), stored.load());
    std::string report;
    EXPECT_TRUE(idx->impl()->check(&report)) << report;
    ASSERT_TRUE(idx->close().ok());
  }
}

// Bug 13: when the pool is full, inserts fail with kPoolFull and take nothing: the PAB
// counter stays within the PAB (also after close and reopen), growth is not retried in the
// background on every insert, and every stored key survives.
TEST_P(WophiTest, PoolFullIsCleanAndTheReopenedPoolConsistent) {
  for (const char* grow : {"background", "inline"}) {
    TempPool p;
    Options o = small_options("wophi", GetParam());
    o.pool_size = 8u << 20;
    o.params = {{"buckets", "4096"}, {"pab_buckets", "64"}, {"pab_grow", grow}};
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    Model m;
    uint64_t i = 0, full = 0;
    for (; full < 3000; ++i) {
      Status s = idx->insert(key(i), value(i));
      if (s.ok()) {
        m.insert(key(i), value(i));
      } else {
        ASSERT_EQ(s.code(), Code::kPoolFull) << s.message();
        ++full;
      }
    }
    auto c = counters(*idx);
    EXPECT_LE(c["pab_used"], c["pab_capacity"]) << grow;
    // Inline attempts: at most one per failed insert (no background grower per insert).
    EXPECT_LE(c["pab_grow_failures"], double(full) + 1) << grow;
    EXPECT_GE(c["pab_grow_failures"], 1) << grow;
    expect_holds(*idx, m, std::string(grow) + ": full");
    ASSERT_TRUE(idx->close().ok());
    for (const char* reopen : {"inline", "background"}) {
      idx.reset();
      o.params["pab_grow"] = reopen;
      ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
      EXPECT_FALSE(idx->stats().recovered_from_crash);
      c = counters(*idx);
      EXPECT_LE(c["pab_used"], c["pab_capacity"]) << grow << " then " << reopen;
      expect_holds(*idx, m, std::string(grow) + " reopened " + reopen);
      // Still full: an insert lands in a free slot or fails cleanly.
      for (int j = 0; j < 200; ++j, ++i) {
        Status s = idx->insert(key(i), value(i));
        if (s.ok()) {
          m.insert(key(i), value(i));
        } else {
          EXPECT_EQ(s.code(), Code::kPoolFull) << s.message();
        }
      }
      expect_holds(*idx, m, std::string(grow) + " reopened " + reopen + ", inserted");
      ASSERT_TRUE(idx->close().ok());
    }
  }
}

const MixCase kMixCases[] = {
    {"Defaults", {}},
    {"TinyPabGrowInline",
     {{"buckets", "16"}, {"stripe", "2"}, {"pab_buckets", "2"}, {"pab_grow", "inline"}}},
    {"TinyPabGrowBackground",
     {{"buckets", "16"}, {"stripe", "2"}, {"pab_buckets", "2"}, {"pab_grow", "background"}}},
};

class WophiMixed : public ::testing::TestWithParam<std::tuple<MixCase, Format>> {};

TEST_P(WophiMixed, EightThreadsAgainstAPerKeyModel) {
  auto [mc, format] = GetParam();
  TempPool p;
  Options o = small_options("wophi", format);
  o.params = mc.params;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  mixed_workload(*idx, format == Format::kFixed, 6000,
                 [](Stats& st) { return st.counters["pab_used"] <= st.counters["pab_capacity"]; });
  ASSERT_TRUE(idx->close().ok());
}

INSTANTIATE_TEST_SUITE_P(Matrix, WophiMixed,
                         ::testing::Combine(::testing::ValuesIn(kMixCases),
                                            ::testing::Values(Format::kFixed, Format::kVariable)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  format_name(std::get<1>(info.param));
                         });

// Reopen with other run-time options (PAB growth inline, background; allocate-on-write)
// with writes in every session: every key is found and check() passes each time.
TEST_P(WophiTest, ReopenWithOtherOptionsKeepsEveryKey) {
  TempPool p;
  Model m;
  const std::map<std::string, std::string> layout = {
      {"buckets", "16"}, {"stripe", "2"}, {"pab_buckets", "2"}};
  const std::map<std::string, std::string> runtime[] = {
      {{"pab_grow", "inline"}}, {{"pab_grow", "background"}}, {{"pab_grow", "background"}},
      {{"pab", "off"}},         {{"pab_grow", "inline"}},     {{"pab_grow", "background"}},
      {{"pab_grow", "inline"}}};
  uint64_t next = 0;
  for (int session = 0; session < 7; ++session) {
    auto params = layout;
    for (auto& [k, v] : runtime[session]) params[k] = v;
    Options o = small_options("wophi", GetParam());
    o.params = params;
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    EXPECT_FALSE(idx->stats().recovered_from_crash);
    std::string when = "session " + std::to_string(session);
    expect_holds(*idx, m, when);
    for (int i = 0; i < 800; ++i, ++next) {
      ASSERT_TRUE(idx->insert(key(next), value(next)).ok());
      m.insert(key(next), value(next));
      if (i % 5 == 0) {
        ASSERT_EQ(idx->remove(key(next / 2)).code(), m.remove(key(next / 2)));
      }
    }
    ASSERT_TRUE(idx->close().ok());
  }
  Options o = small_options("wophi", GetParam());
  o.params = layout;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  expect_holds(*idx, m, "final");
}

INSTANTIATE_TEST_SUITE_P(Formats, WophiTest, ::testing::Values(Format::kFixed, Format::kVariable),
                         [](const auto& info) { return std::string(format_name(info.param)); });

}  // namespace
}  // namespace pmhash::testing
