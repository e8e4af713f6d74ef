// SmartHT's bucket, its Volatile Filter Layer, and its recovery paths.
#include "index/smartht/smartht.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "common/bloom_filter.hpp"
#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

using smartht::Bucket;

TEST(SmartHTBucket, LayoutIsOneCacheLine) {
  EXPECT_EQ(sizeof(Bucket), 64u);
  EXPECT_EQ(offsetof(Bucket, slots), 8u);
  EXPECT_EQ(offsetof(Bucket, next), 56u);
  Bucket b{};
  EXPECT_EQ(b.free_slot(), 0);
  b.tokens = Bucket::with_token(b.tokens, 0, true);
  b.tokens = Bucket::with_token(b.tokens, 2, true);
  EXPECT_TRUE(b.live(0));
  EXPECT_FALSE(b.live(1));
  EXPECT_EQ(b.free_slot(), 1);
  b.tokens = Bucket::with_token(b.tokens, 0, false);
  EXPECT_EQ(b.tokens, uint64_t{1} << 16);
}

// The paper's formula (m = -n ln p / ln^2 2) assumes the optimal number of hash functions;
// with its three, that m gives about 3e-3. bits_for() sizes for k = 3 exactly.
TEST(SmartHTFilter, FalsePositiveRateWithinTwiceTheTarget) {
  const uint64_t n = 200000;
  common::BloomFilter f(common::BloomFilter::bits_for(n, 1e-4, 3), n, 3);
  for (uint64_t i = 0; i < n; ++i) f.add(common::hash_word(i));
  for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(f.may_contain(common::hash_word(i)));
  uint64_t fp = 0;
  const uint64_t absent = 1000000;
  for (uint64_t i = 0; i < absent; ++i) fp += f.may_contain(common::hash_word(n + 1 + i));
  double rate = double(fp) / double(absent);
  std::printf("[smartht filter] %.2f bits/key, measured false-positive rate %.2e (target 1e-4)\n",
              double(f.nbits()) / double(n), rate);
  EXPECT_LE(rate, 2e-4);
  // The paper's size (19.2 bits/key) with 3 hashes misses the target by far.
  common::BloomFilter paper(
      uint64_t(-double(n) * std::log(1e-4) / (std::log(2) * std::log(2))) / 64 * 64, n, 3);
  for (uint64_t i = 0; i < n; ++i) paper.add(common::hash_word(i));
  uint64_t fp2 = 0;
  for (uint64_t i = 0; i < absent; ++i) fp2 += paper.may_contain(common::hash_word(n + 1 + i));
  EXPECT_GT(double(fp2) / double(absent), 1e-3);
}

class SmartHTTest : public ::testing::TestWithParam<Format> {
 protected:
  bool fixed() const { return GetParam() == Format::kFixed; }
  std::string key(uint64_t i) const { return make_key(i, fixed()); }
  std::string value(uint64_t i, uint32_t v = 1) const { return make_value(key(i), v, fixed()); }
  Options opts(std::map<std::string, std::string> p) const {
    Options o = small_options("smartht", GetParam());
    o.params = std::move(p);
    return o;
  }
  smartht::SmartHT& scheme(Index& i) { return static_cast<smartht::SmartHT&>(*i.impl()->scheme); }
  std::map<std::string, double> counters(Index& i) {
    std::map<std::string, double> c;
    i.impl()->scheme->counters(&c);
    return c;
  }
};

// Merged flush: an insert into a free slot flushes one line once; delete flushes once.
TEST_P(SmartHTTest, FlushesPerOperation) {
  if (!fixed()) GTEST_SKIP() << "the variable format adds the allocator's commit";
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, opts({{"buckets", "65536"}}), &idx).ok());
  const int n = 2000;  // far fewer keys than slots: every insert finds a free head slot
  PersistCounters a = thread_persist_counters();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
  PersistCounters b = thread_persist_counters();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->remove(key(i)).ok());
  PersistCounters c = thread_persist_counters();
  EXPECT_EQ(b.flushes - a.flushes, uint64_t(n));
  EXPECT_EQ(b.fences - a.fences, uint64_t(n));
  EXPECT_EQ(c.flushes - b.flushes, uint64_t(n));
  EXPECT_EQ(c.fences - b.fences, uint64_t(n));
}

TEST_P(SmartHTTest, LongChainsHeadInsertion) {
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, opts({{"buckets", "1"}, {"filter_keys", "100"}}), &idx).ok());
  Model m;
  for (int i = 0; i < 600; ++i) {
    ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
    m.insert(key(i), value(i));
    if (i % 3 == 0) {
      ASSERT_EQ(idx->remove(key(i / 2)).code(), m.remove(key(i / 2)));
    }
  }
  EXPECT_EQ(idx->size(), m.size());
  std::string v;
  for (auto& [k, val] : m.items()) {
    ASSERT_TRUE(idx->get(k, &v).ok());
    ASSERT_EQ(v, val);
  }
  // One head bucket: every item beyond 3 lives in a chain (head insertion reuses only the
  // head bucket and the first chained bucket, as Algorithm 1 does).
  EXPECT_GE(counters(*idx)["chain_buckets"], 150);
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

// Inserting far past the filter's sizing triggers background rebuilds; no key is ever
// missed meanwhile (a false negative would make get() fail).
TEST_P(SmartHTTest, FilterGrowsInTheBackgroundWithoutFalseNegatives) {
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, opts({{"filter_keys", "1000"}}), &idx).ok());
  std::atomic<int> done{0}, errors{0};
  std::thread reader([&] {
    std::string v;
    while (done.load() < 20000) {
      int upto = done.load();
      if (upto == 0) continue;
      if (!idx->get(key(upto - 1), &v).ok()) errors++;
    }
  });
  for (int i = 0; i < 20000; ++i) {
    ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
    done.store(i + 1);
  }
  reader.join();
  scheme(*idx).wait_for_filter();
  EXPECT_EQ(errors.load(), 0);
  auto c = counters(*idx);
  EXPECT_GE(c["filter_rebuilds"], 1);  // how many depends on timing; the sizing does not
  EXPECT_GE(c["filter_capacity"], 20000);
  std::string v;
  uint64_t before = c["filter_negatives"];
  for (int i = 100000; i < 110000; ++i) EXPECT_FALSE(idx->get(key(i), &v).ok());
  EXPECT_GE(counters(*idx)["filter_negatives"] - before, 9990);
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

// After a crash the index serves reads and writes while the filter is rebuilt (lazy
// recovery); after a clean close the saved filter is loaded instead.
TEST_P(SmartHTTest, LazyRecoveryAndSavedFilter) {
  TempPool p;
  const int n = 30000;
  {
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, opts({}), &idx).ok());
    for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
    idx->impl()->closed = true;  // crash
  }
  {
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, opts({}), &idx).ok());
    EXPECT_TRUE(idx->stats().recovered_from_crash);
    std::string v;
    for (int i = 0; i < n; i += 7) ASSERT_TRUE(idx->get(key(i), &v).ok());  // maybe bypassing
    ASSERT_TRUE(idx->insert(key(n), value(n)).ok());
    scheme(*idx).wait_for_filter();
    auto c = counters(*idx);
    EXPECT_EQ(c["filter_ready"], 1);
    EXPECT_EQ(idx->size(), uint64_t(n + 1));
    std::string report;
    EXPECT_TRUE(idx->impl()->check(&report)) << report;  // includes: no false negatives
    ASSERT_TRUE(idx->close().ok());
  }
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, opts({}), &idx).ok());
  EXPECT_FALSE(idx->stats().recovered_from_crash);
  auto c = counters(*idx);
  EXPECT_EQ(c["filter_ready"], 1) << "a clean reopen loads the saved filter at once";
  EXPECT_EQ(c["filter_rebuilds"], 0);
  EXPECT_EQ(idx->size(), uint64_t(n + 1));
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

TEST_P(SmartHTTest, FilterOffSearchesPm) {
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, opts({{"filter", "off"}}), &idx).ok());
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
  std::string v;
  for (int i = 1000; i < 2000; ++i) EXPECT_FALSE(idx->get(key(i), &v).ok());
  auto c = counters(*idx);
  EXPECT_EQ(c["filter_negatives"], 0);
  EXPECT_GE(c["pm_searches"], 1000);
}

INSTANTIATE_TEST_SUITE_P(Formats, SmartHTTest, ::testing::Values(Format::kFixed, Format::kVariable),
                         [](const auto& info) { return std::string(format_name(info.param)); });

}  // namespace
}  // namespace pmhash::testing
