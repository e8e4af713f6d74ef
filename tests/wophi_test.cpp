// WOPHI's log-free writes and its Pre-Allocation Buckets.
#include "index/wophi/wophi.hpp"

#include <gtest/gtest.h>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

TEST(WophiBucket, LayoutTwoCacheLines) {
  EXPECT_EQ(sizeof(wophi::Bucket), 128u);
  EXPECT_EQ(offsetof(wophi::Bucket, slots), 16u);
  EXPECT_EQ(offsetof(wophi::Bucket, owner), 80u);
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

INSTANTIATE_TEST_SUITE_P(Formats, WophiTest, ::testing::Values(Format::kFixed, Format::kVariable),
                         [](const auto& info) { return std::string(format_name(info.param)); });

}  // namespace
}  // namespace pmhash::testing
