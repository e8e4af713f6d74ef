// LineHT's DRAM side (docs/schemes/lineht.md "DRAM layout"): a dense directory of shard
// words and locks (12 bytes per shard) and one filter word per bucket, built per shard on
// first use after open.
#include <gtest/gtest.h>

#include <cstring>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

std::string fixed_key(uint64_t i) {
  uint64_t k = i * 0x9E3779B97F4A7C15ull + 1;
  return std::string(reinterpret_cast<const char*>(&k), 8);
}

Options hinted(uint64_t keys) {
  Options o = small_options("lineht", Format::kFixed);
  o.capacity_hint = keys;
  return o;
}

// Issue 19's target: at most 4 DRAM bytes per key with the table sized from the capacity
// hint (main before this change: 64-byte shard mirrors and a view object per shard, 4.5).
TEST(LineHT, DramPerKeyAtTheCapacityHintIsAtMostFourBytes) {
  const uint64_t n = 200000;
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, hinted(n), &idx).ok());
  for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(idx->insert(fixed_key(i), fixed_key(i)).ok());
  const Scheme& s = *idx->impl()->scheme;
  ASSERT_EQ(s.size(), n);
  double per_key = double(s.dram_bytes()) / double(n);
  std::printf("[lineht] DRAM %.2f bytes per key at load factor %.2f\n", per_key,
              double(n) / double(s.capacity_slots()));
  EXPECT_LE(per_key, 4.0);
}

// Instant recovery: opening after a crash builds no filter (no DRAM per key) until a shard is
// used; then the shard is built from PM and serves every key it holds.
TEST(LineHT, OpenAfterACrashBuildsNoFilterUntilAShardIsUsed) {
  const uint64_t n = 20000;
  TempPool p;
  {
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, hinted(n), &idx).ok());
    for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(idx->insert(fixed_key(i), fixed_key(i)).ok());
    idx->impl()->closed = true;  // no clean shutdown: the next open recovers
  }
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, hinted(n), &idx).ok());
  const Scheme& s = *idx->impl()->scheme;
  std::map<std::string, double> c;
  s.counters(&c);
  uint64_t directory = uint64_t(c["shards"]) * 12;
  EXPECT_EQ(s.dram_bytes(), directory);  // words and locks only
  std::string v;
  ASSERT_TRUE(idx->get(fixed_key(7), &v).ok());
  EXPECT_EQ(v, fixed_key(7));
  EXPECT_GT(s.dram_bytes(), directory);  // one shard's filter now
  for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(idx->get(fixed_key(i), &v).ok()) << i;
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

}  // namespace
}  // namespace pmhash::testing
