// TurboHash's bucket rules (§3.3, Algorithm 4) and probing behaviour.
#include "index/turbohash/turbohash.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

using turbohash::Bucket;

TEST(TurboHashBucket, LayoutIs256BytesWithMetaTagsAndSlots) {
  EXPECT_EQ(sizeof(Bucket), 256u);
  EXPECT_EQ(offsetof(Bucket, tags), 8u);
  EXPECT_EQ(offsetof(Bucket, slots), 32u);
}

TEST(TurboHashBucket, MetaWordFields) {
  uint64_t m = Bucket::make(0x0005, 0x0004, 7);
  EXPECT_EQ(Bucket::valid(m), 5u);
  EXPECT_EQ(Bucket::deleted(m), 4u);
  EXPECT_EQ(Bucket::seq(m), 7u);
  EXPECT_EQ(Bucket::live(m), 1u);  // slot 2 is deleted: valid but not live
}

TEST(TurboHashBucket, PathEndNeedsTwoEmptySlots) {
  // 12 valid slots: two empty, so the bucket ends a search path.
  EXPECT_TRUE(Bucket::path_end(Bucket::make(0x0FFF, 0, 0)));
  // 13 valid: only the reserved slot is empty: full for inserts, not a path end.
  EXPECT_FALSE(Bucket::path_end(Bucket::make(0x1FFF, 0, 0)));
  // Deleted slots keep their valid bit, so they never end a path.
  EXPECT_FALSE(Bucket::path_end(Bucket::make(0x1FFF, 0x1FFF, 0)));
  EXPECT_EQ(Bucket::empty_slot(Bucket::make(0x1FFF, 0, 0)), 13);
  EXPECT_EQ(Bucket::empty_slot(Bucket::make(0x3FFF, 0, 0)), -1);
  EXPECT_EQ(Bucket::empty_slot(Bucket::make(0x0001, 0, 0)), 1);
}

TEST(TurboHashBucket, TagsAreWordAtomicBytes) {
  Bucket b{};
  b.set_tag(0, 0xAA);
  b.set_tag(13, 0x55);
  b.set_tag(7, 0x11);
  b.set_tag(8, 0x22);
  EXPECT_EQ(b.tag(0), 0xAA);
  EXPECT_EQ(b.tag(13), 0x55);
  EXPECT_EQ(b.tag(7), 0x11);
  EXPECT_EQ(b.tag(8), 0x22);
  uint8_t t[16];
  b.load_tags(t);
  EXPECT_EQ(common::best_tag_match()(t, 0x55), 1u << 13);
  EXPECT_EQ(common::tag_match_scalar(t, 0x22), 1u << 8);
}

class TurboHashTest : public ::testing::TestWithParam<Format> {};

// Every bucket keeps an empty slot for near-place updates, and an update costs exactly one
// extra metadata flush: data flush(es) + metadata flush, two fences.
TEST_P(TurboHashTest, FlushesPerOperation) {
  TempPool p;
  Options o = small_options("turbohash", GetParam());
  o.params = {{"shards", "64"}, {"buckets", "64"}};
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  bool fixed = GetParam() == Format::kFixed;
  const int n = 2000;
  PersistCounters a = thread_persist_counters();
  for (int i = 0; i < n; ++i)
    ASSERT_TRUE(idx->insert(make_key(i, fixed), make_value(make_key(i, fixed), 1, fixed)).ok());
  PersistCounters b = thread_persist_counters();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->remove(make_key(i, fixed)).ok());
  PersistCounters c = thread_persist_counters();
  double ins_fences = double(b.fences - a.fences) / n, del_fences = double(c.fences - b.fences) / n;
  double del_flushes = double(c.flushes - b.flushes) / n;
  if (fixed) {
    EXPECT_EQ(ins_fences, 2.0);  // slot+tag, then the metadata word
    EXPECT_EQ(del_fences, 1.0);  // one 8-byte metadata store
    EXPECT_EQ(del_flushes, 1.0);
    EXPECT_EQ(double(b.flushes - a.flushes) / n, 2.0);  // paper: slot, then metadata
  } else {
    EXPECT_GT(ins_fences, 2.0);  // plus the allocator's redo log
  }
}

// Readers never block and never see a torn value while shards resize under them.
TEST_P(TurboHashTest, ReadsDuringResizes) {
  TempPool p;
  Options o = small_options("turbohash", GetParam());
  o.params = {{"shards", "1"}, {"buckets", "1"}};
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  bool fixed = GetParam() == Format::kFixed;
  const int n = 20000;
  std::atomic<int> inserted{0};
  std::atomic<int> errors{0};
  std::thread writer([&] {
    for (int i = 0; i < n; ++i) {
      if (!idx->insert(make_key(i, fixed), make_value(make_key(i, fixed), i, fixed)).ok()) errors++;
      inserted.store(i + 1);
    }
  });
  std::thread reader([&] {
    std::string v;
    while (inserted.load() < n) {
      int upto = inserted.load();
      if (upto == 0) continue;
      int i = upto - 1 - (upto * 7919 % std::max(1, upto / 2 + 1)) % upto;
      if (!idx->get(make_key(i, fixed), &v).ok() || v != make_value(make_key(i, fixed), i, fixed))
        errors++;
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(errors.load(), 0);
  std::map<std::string, double> c;
  idx->impl()->scheme->counters(&c);
  EXPECT_GE(c["shard_resizes"], 8);
  EXPECT_TRUE(idx->check().ok());
}

// Probe distance stays short thanks to the path-end rule (paper Fig. 1 / §4.6).
TEST_P(TurboHashTest, NegativeReadsStopAtThePathEnd) {
  TempPool p;
  Options o = small_options("turbohash", GetParam());
  o.params = {{"shards", "16"}, {"buckets", "64"}};
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  bool fixed = GetParam() == Format::kFixed;
  for (int i = 0; i < 5000; ++i)
    ASSERT_TRUE(idx->insert(make_key(i, fixed), make_value(make_key(i, fixed), 1, fixed)).ok());
  std::string v;
  for (int i = 5000; i < 10000; ++i) ASSERT_FALSE(idx->get(make_key(i, fixed), &v).ok());
  std::map<std::string, double> c;
  idx->impl()->scheme->counters(&c);
  EXPECT_LT(c["probe_distance_negative"], 4.0);  // a scan of the whole scope would be 16
  EXPECT_GE(c["probe_distance_negative"], 1.0);
}

TEST(TurboHashLayout, RejectsBadParameters) {
  TempPool p;
  Options o = small_options("turbohash", Format::kFixed);
  std::unique_ptr<Index> idx;
  for (auto bad : std::vector<std::map<std::string, std::string>>{
           {{"shards", "0"}}, {{"buckets", "x"}}, {{"scope", "0"}}, {{"shards", "-4"}}}) {
    o.params = bad;
    EXPECT_EQ(Index::open(p.path, o, &idx).code(), Code::kInvalidArgument);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, TurboHashTest,
                         ::testing::Values(Format::kFixed, Format::kVariable),
                         [](const auto& info) { return std::string(format_name(info.param)); });

}  // namespace
}  // namespace pmhash::testing
