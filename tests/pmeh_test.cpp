// PMEH: Dash buckets, multisplit with gradual splitting, directory expansion, zones.
#include "index/pmeh/pmeh.hpp"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

TEST(PmehBucket, DashLayout) {
  EXPECT_EQ(sizeof(pmeh::Bucket), 256u);
  EXPECT_EQ(offsetof(pmeh::Bucket, fp), 8u);
  EXPECT_EQ(offsetof(pmeh::Bucket, ofp), 22u);
  EXPECT_EQ(offsetof(pmeh::Bucket, obits), 26u);
  EXPECT_EQ(offsetof(pmeh::Bucket, slots), 32u);
  EXPECT_EQ(sizeof(pmeh::SegmentHeader), 256u);
  uint64_t w = pmeh::word::make(5, 0b101, 0b100);
  EXPECT_EQ(pmeh::word::version(w), 5u);
  EXPECT_EQ(pmeh::word::alloc(w), 0b101u);
  EXPECT_EQ(pmeh::word::member(w), 0b100u);
  EXPECT_EQ(w >> 60, 2u);  // the 4-bit counter
  uint64_t m = pmeh::seg::make(7, 0x55, 0x8002);
  EXPECT_EQ(pmeh::seg::depth(m), 7u);
  EXPECT_EQ(pmeh::seg::pattern(m), 0x55u);
  EXPECT_EQ(pmeh::seg::bitmap(m), 0x8002u);
}

class PmehTest : public ::testing::TestWithParam<Format> {
 protected:
  bool fixed() const { return GetParam() == Format::kFixed; }
  std::string key(uint64_t i) const { return make_key(i, fixed()); }
  std::string value(uint64_t i, uint32_t v = 1) const { return make_value(key(i), v, fixed()); }
  Options options(std::map<std::string, std::string> params) const {
    Options o = small_options("pmeh", GetParam());
    o.params = std::move(params);
    return o;
  }
  static std::map<std::string, double> counters(Index& i) {
    std::map<std::string, double> c;
    i.impl()->scheme->counters(&c);
    return c;
  }
  void expect_contents(Index& idx, const Model& m) {
    EXPECT_EQ(idx.size(), m.size());
    std::string got;
    for (auto& [k, v] : m.items()) {
      ASSERT_TRUE(idx.get(k, &got).ok()) << k;
      ASSERT_EQ(got, v);
    }
    std::string report;
    EXPECT_TRUE(idx.impl()->check(&report)) << report;
  }
};

// Algorithm 1 into a free slot of the home bucket: the record (flush, fence), then the
// fingerprint and allocation bit (flush, fence).
TEST_P(PmehTest, TwoFlushesPerInsertOneFlushPerDelete) {
  if (!fixed()) GTEST_SKIP() << "the variable format adds the allocator's commit";
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, options({{"depth", "10"}}), &idx).ok());
  const int n = 2000;
  PersistCounters a = thread_persist_counters();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
  PersistCounters b = thread_persist_counters();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->remove(key(i)).ok());
  PersistCounters c = thread_persist_counters();
  auto cn = counters(*idx);
  EXPECT_EQ(cn["segment_splits"], 0);
  EXPECT_EQ(cn["stashed"], 0);
  EXPECT_EQ(b.flushes - a.flushes, 2u * n);
  EXPECT_EQ(b.fences - a.fences, 2u * n);
  EXPECT_EQ(c.flushes - b.flushes, uint64_t(n));
  EXPECT_EQ(c.fences - b.fences, uint64_t(n));
}

// Many gradual splits and directory expansions, with the model agreeing throughout, after a
// clean reopen and after a crash (instant recovery + lazy per-segment lock reset).
TEST_P(PmehTest, DifferentialThroughSplitsAndDirectoryExpansions) {
  for (std::string split : {"2", "16"}) {
    SCOPED_TRACE("split " + split);
    TempPool p;
    std::unique_ptr<Index> idx;
    Options o =
        options({{"segment_bytes", "2048"}, {"split", split}, {"zones", "4"}, {"depth", "2"}});
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    Model m;
    std::mt19937_64 rng(11);
    std::string got, want;
    for (int i = 0; i < 40000; ++i) {
      uint64_t k = rng() % 12000;
      uint32_t ver = static_cast<uint32_t>(rng());
      int r = static_cast<int>(rng() % 10);
      Code c, e;
      if (r < 5) {
        c = idx->upsert(key(k), value(k, ver)).code();
        e = m.upsert(key(k), value(k, ver));
      } else if (r < 6) {
        c = idx->insert(key(k), value(k, ver)).code();
        e = m.insert(key(k), value(k, ver));
      } else if (r < 7) {
        c = idx->remove(key(k)).code();
        e = m.remove(key(k));
      } else {
        c = idx->get(key(k), &got).code();
        e = m.get(key(k), &want);
        if (c == Code::kOk && e == Code::kOk) {
          ASSERT_EQ(got, want) << i;
        }
      }
      ASSERT_EQ(c, e) << "op " << i;
    }
    auto cn = counters(*idx);
    EXPECT_GT(cn["segment_splits"], 20);
    EXPECT_GE(cn["dir_expansions"], 2);
    EXPECT_GT(cn["displacements"] + cn["stashed"], 0);
    expect_contents(*idx, m);
    ASSERT_TRUE(idx->close().ok());
    idx.reset();
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    expect_contents(*idx, m);
    idx->impl()->closed = true;  // drop without a clean close
    idx.reset();
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    expect_contents(*idx, m);
  }
}

// §III-E: a 16-split moves fewer records than a 2-split while loading the same keys; gradual
// splitting keeps the load factor from collapsing (each step adds one segment).
TEST_P(PmehTest, MultisplitMovesFewerRecords) {
  std::map<std::string, std::map<std::string, double>> c;
  for (std::string split : {"2", "16"}) {
    TempPool p;
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(
        Index::open(
            p.path,
            options({{"segment_bytes", "4096"}, {"split", split}, {"zones", "1"}, {"depth", "0"}}),
            &idx)
            .ok());
    for (int i = 0; i < 30000; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
    c[split] = counters(*idx);
    c[split]["lf"] = idx->stats().load_factor;
  }
  EXPECT_LT(c["16"]["records_moved"], c["2"]["records_moved"]);
  EXPECT_GT(c["16"]["lf"], 0.3);
  EXPECT_GT(c["2"]["lf"], 0.3);
}

// §III-D: the thread bound to a zone writes lock-free; with the opportunistic scheme off,
// every write locks.
TEST_P(PmehTest, LocalThreadWritesLockFree) {
  for (bool opp : {true, false}) {
    TempPool p;
    std::unique_ptr<Index> idx;
    Options o = options({{"zones", "4"},
                         {"depth", "4"},
                         {"zone_threads", "1"},
                         {"opportunistic", opp ? "on" : "off"}});
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    for (int i = 0; i < 3000; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
    auto cn = counters(*idx);
    // One zone thread: this thread (id 0) owns every zone.
    EXPECT_EQ(cn["lock_free_share"], opp ? 1.0 : 0.0);
  }
}

// Skewed writers: every thread writes into one zone (keys filtered by the hash's top bits),
// so non-local threads switch it to shared and back; readers check they never see a value
// older than acknowledged.
TEST_P(PmehTest, SkewedWritersShareAZone) {
  TempPool p;
  std::unique_ptr<Index> idx;
  Options o = options({{"segment_bytes", "2048"},
                       {"split", "4"},
                       {"zones", "4"},
                       {"depth", "2"},
                       {"zone_threads", "2"}});
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  std::vector<uint64_t> ids;  // keys of zone 0
  for (uint64_t i = 0; ids.size() < 3000; ++i)
    if ((common::Items::hash(key(i)) >> 62) == 0) ids.push_back(i);
  std::vector<std::atomic<uint32_t>> acked(ids.size());
  std::atomic<int> errors{0};
  std::atomic<bool> done{false};
  // Both writers take a thread id and overlap (ids are reused once a thread exits, so a
  // writer that finished early would hand its id, and its zone, to the other).
  std::atomic<int> ready{0}, finished{0};
  auto writer = [&](int w) {
    std::string unused;
    (void)idx->get(key(ids[0]), &unused);
    ready++;
    while (ready.load() < 2) std::this_thread::yield();
    std::mt19937_64 rng(w);
    for (uint32_t v = 1; v < 6000; ++v) {
      size_t j = (rng() % (ids.size() / 2)) * 2 + w;  // disjoint keys per writer
      if (!idx->upsert(key(ids[j]), value(ids[j], v)).ok()) errors++;
      acked[j].store(v);
    }
    finished++;
    while (finished.load() < 2) std::this_thread::yield();
  };
  std::thread r([&] {
    std::mt19937_64 rng(9);
    std::string got;
    while (!done.load()) {
      size_t j = rng() % ids.size();
      uint32_t floor = acked[j].load();
      Status s = idx->get(key(ids[j]), &got);
      if (!s.ok()) {
        if (floor != 0 || s.code() != Code::kNotFound) errors++;
        continue;
      }
      uint32_t ver = 0;
      if (fixed())
        std::memcpy(&ver, got.data(), 4);
      else
        ver = static_cast<uint32_t>(std::stoul(got.substr(1)));
      if (!value_ok(key(ids[j]), got, fixed()) || ver < floor) errors++;
    }
  });
  std::thread w0(writer, 0), w1(writer, 1);
  w0.join();
  w1.join();
  done = true;
  r.join();
  EXPECT_EQ(errors.load(), 0);
  auto cn = counters(*idx);
  EXPECT_GT(cn["locked_writes"], 0);
  EXPECT_GT(cn["segment_splits"], 0);
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

TEST_P(PmehTest, RejectsBadOptions) {
  TempPool p;
  std::unique_ptr<Index> idx;
  for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"split", "3"}, {"segment_bytes", "1000"}, {"zones", "6"}, {"depth", "40"}}) {
    Status s = Index::open(p.path, options({{k, v}}), &idx);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << k;
    EXPECT_NE(s.message().find(k), std::string::npos) << s.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, PmehTest, ::testing::Values(Format::kFixed, Format::kVariable),
                         [](const auto& info) { return std::string(format_name(info.param)); });

}  // namespace
}  // namespace pmhash::testing
