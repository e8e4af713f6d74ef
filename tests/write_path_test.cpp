// The exact persist cost of each write path (issue 18), counted with the persist counters
// of src/pm/persist.hpp: flushes (cache lines written back) and fences per operation.
//
// Items are one cache line here (short keys and values), so "item lines" is 1. With the
// allocator's log-free protocol (pm::Allocator::mark/unmark, swept at recovery) and spare
// blocks (pm::SpareBlocks: allocation bits persisted ahead, a batch per fence) a variable
// write costs the fixed format's flushes plus the item's line, and at most two fences; a
// delete costs what the fixed format's does. With the redo log every variable write and
// delete cost 2 more fences and 2–3 more flushes, and the chain-bucket inserts 3–4 flushes
// and 4 fences; with the allocation bit on the write path, one more line each. PMEH's row
// counts bucket locks per write instead (the persist cost is in pmeh_test.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

struct Cost {
  uint64_t flushes = 0, fences = 0;
  bool operator==(const Cost&) const = default;
};
void PrintTo(const Cost& c, std::ostream* os) {
  *os << c.flushes << " flushes / " << c.fences << " fences";
}

template <class F>
Cost cost_of(F&& op) {
  PersistCounters a = thread_persist_counters();
  op();
  PersistCounters b = thread_persist_counters();
  return {b.flushes - a.flushes, b.fences - a.fences};
}

class WritePathTest : public ::testing::TestWithParam<Format> {
 protected:
  bool variable() const { return GetParam() == Format::kVariable; }
  // Fixed: 8-byte keys and values. Variable: item = 8 + 5 + 16 bytes, one line.
  std::string key(int i) const {
    char b[16];
    if (!variable()) {
      uint64_t k = uint64_t(i) * 0x9E3779B97F4A7C15ull + 1;
      return std::string(reinterpret_cast<const char*>(&k), 8);
    }
    std::snprintf(b, sizeof b, "k%04d", i);
    return b;
  }
  std::string value(int i, int version) const {
    std::string v = std::to_string(i * 10 + version);
    v.resize(variable() ? 16 : 8, '.');
    return v;
  }
  double counter(Index& idx, const char* name) {
    std::map<std::string, double> c;
    idx.impl()->scheme->counters(&c);
    return c[name];
  }
  // One shard of 64 buckets (LineHT, TurboHash), 48 keys — a quarter of LineHT's 192 slots,
  // no key beyond its probe bound, no resize: every insert and update costs `write`, every
  // delete `remove`.
  void run_one_shard(Options o, Cost write, Cost remove) {
    o.params = {{"shards", "1"}, {"buckets", "64"}};
    TempPool p;
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    idx->impl()->alloc->spares().set_batch_blocks(256);  // one refill: the warm-up's
    const int n = 48;
    ASSERT_TRUE(idx->insert(key(n), value(n, 1)).ok());  // the item slab's chunk word, once
    ASSERT_TRUE(idx->remove(key(n)).ok());
    for (int i = 0; i < n; ++i) {
      Cost c = cost_of([&] { ASSERT_TRUE(idx->insert(key(i), value(i, 1)).ok()); });
      EXPECT_EQ(c, write) << "insert " << i;
    }
    for (int i = 0; i < n; ++i) {
      Cost c = cost_of([&] { ASSERT_TRUE(idx->update(key(i), value(i, 2)).ok()); });
      EXPECT_EQ(c, write) << "update " << i;
    }
    for (int i = 0; i < n; ++i) {
      Cost c = cost_of([&] { ASSERT_TRUE(idx->remove(key(i)).ok()); });
      EXPECT_EQ(c, remove) << "delete " << i;
    }
    EXPECT_EQ(counter(*idx, "shard_resizes"), 0);
    std::string report;
    EXPECT_TRUE(idx->impl()->check(&report)) << report;  // includes allocated == reachable
  }
  // One head bucket of `slots` slots: insert i is a chain-bucket insert iff i >= slots and
  // i % slots == 0 (a new bucket gets the item in its first slot; the next ones fill it).
  // Every insert, update and delete is checked against `slot`/`chain`/`update`/`remove`.
  // `first_chain` (if set): the first chain-bucket insert, which may also allocate a batch.
  void run(const Options& o, int slots, Cost slot, Cost chain, Cost update, Cost remove,
           std::optional<Cost> first_chain = std::nullopt) {
    TempPool p;
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    // Spare blocks (pm::SpareBlocks) in batches large enough that the warm-up's refill is
    // the only one in this run: every write below is counted without a batch.
    idx->impl()->alloc->spares().set_batch_blocks(256);
    const int n = 8 * slots;
    // The first item of a size class also persists its new slab's chunk word (once per
    // slab, not per write) and refills the spares: not counted here.
    ASSERT_TRUE(idx->insert(key(n), value(n, 1)).ok());
    ASSERT_TRUE(idx->remove(key(n)).ok());
    for (int i = 0; i < n; ++i) {
      bool new_bucket = i >= slots && i % slots == 0;
      Cost c = cost_of([&] { ASSERT_TRUE(idx->insert(key(i), value(i, 1)).ok()); });
      Cost want = !new_bucket ? slot : i == slots && first_chain ? *first_chain : chain;
      EXPECT_EQ(c, want) << "insert " << i;
    }
    EXPECT_EQ(counter(*idx, "chain_buckets"), 7);
    for (int i = 0; i < n; ++i) {
      Cost c = cost_of([&] { ASSERT_TRUE(idx->update(key(i), value(i, 2)).ok()); });
      EXPECT_EQ(c, update) << "update " << i;
    }
    for (int i = n - 1; i >= 0; --i) {  // the last of each chain bucket unlinks it
      Cost c = cost_of([&] { ASSERT_TRUE(idx->remove(key(i)).ok()); });
      EXPECT_EQ(c, remove) << "delete " << i;
    }
    EXPECT_EQ(counter(*idx, "chain_buckets_reclaimed"), 7);
    std::string report;
    EXPECT_TRUE(idx->impl()->check(&report)) << report;  // includes allocated == reachable
  }
};

// SmartHT Alg. 1: a free slot takes the merged flush (one line, one fence); a new chained
// bucket is persisted, then linked (2 flushes, 2 fences). Buckets and small items are spares
// whose allocation bits a batch persisted earlier (the variable format's warm-up insert
// refilled the 64-byte stock; in the fixed format the first chain-bucket insert does: one
// bitmap line more, no fence — the insert's own fence orders it). A variable write adds
// only the item's line.
TEST_P(WritePathTest, SmartHT) {
  Options o = small_options("smartht", GetParam());
  o.params = {{"buckets", "1"}, {"filter_keys", "1000"}};
  if (variable())
    run(o, 3, {2, 2}, {3, 2}, {2, 2}, {1, 1});
  else
    run(o, 3, {1, 1}, {2, 2}, {1, 1}, {1, 1}, Cost{3, 2});
}

// WOPHI Alg. 1: slot, flush, fence; token, flush, fence. A PAB bucket: its first line
// (slot 0 and token), flush, fence; the link, flush, fence — no counter on the root line.
TEST_P(WritePathTest, Wophi) {
  Options o = small_options("wophi", GetParam());
  o.params = {{"buckets", "1"}, {"pab_buckets", "64"}};
  if (variable())
    run(o, 4, {3, 2}, {3, 2}, {2, 2}, {1, 1});
  else
    run(o, 4, {2, 2}, {2, 2}, {1, 1}, {1, 1});
}

// WOPHI without the PAB (the baseline): a chain bucket allocated on the write path adds
// its allocation bit's line, and no fence.
TEST_P(WritePathTest, WophiWithoutPab) {
  Options o = small_options("wophi", GetParam());
  o.params = {{"buckets", "1"}, {"pab", "off"}};
  if (variable())
    run(o, 4, {3, 2}, {4, 2}, {2, 2}, {1, 1});
  else
    run(o, 4, {2, 2}, {3, 2}, {1, 1}, {1, 1});
}

// LineHT (one-line buckets, one shard big enough for every key: no resize): slot words and
// the commit word in one line, one flush, one fence; an update the same; a delete the commit
// word alone. Variable: the item's line (a spare block: its allocation bit persisted by a
// batch, pm::SpareBlocks) and one fence before the commit; a delete unmarks the item without
// a flush. With the redo log a variable insert cost 6 flushes / 4 fences; with the item's
// allocation bit on the write path 3 / 2.
TEST_P(WritePathTest, LineHT) {
  Options o = small_options("lineht", GetParam());
  run_one_shard(o, variable() ? Cost{2, 2} : Cost{1, 1}, Cost{1, 1});
}

// TurboHash Alg. 2/4 (one shard of 64 buckets, 48 keys: no resize): the slot's line, then
// the metadata word with one flush and fence each — 2 flushes, 2 fences per insert and per
// update (a near-place update writes the new slot and flips both valid bits in one store);
// a delete sets its delete bit (1 / 1). Variable: the item's line besides (a spare block),
// no fence more; the replaced or deleted item is unmarked without a flush, and a crash in
// between is swept in the background after recovery. With the redo log: 6 / 4 and 4 / 3.
TEST_P(WritePathTest, TurboHash) {
  Options o = small_options("turbohash", GetParam());
  run_one_shard(o, variable() ? Cost{3, 2} : Cost{2, 2}, Cost{1, 1});
}

// HDNH (§3.6, Figs. 9-10): insert — slot, flush, fence; bitmap bit, flush, fence. Update —
// the same into a free slot of the bucket (one bitmap store flips old and new), or in a full
// bucket the value word in place (variable: fence for the new item, the word, flush, fence).
// Delete — the bitmap bit, flush, fence. The variable format adds the item's line, and no
// fence (log-free allocation, swept at recovery; the item is a spare block whose allocation
// bit a batch persisted, pm::SpareBlocks); with the redo log insert/update cost 6 / 4.
TEST_P(WritePathTest, Hdnh) {
  Options o = small_options("hdnh", GetParam());
  o.params = {{"segment_bytes", "256"}, {"segments", "2"}};  // 6 buckets: some fill up
  const Cost slot = variable() ? Cost{3, 2} : Cost{2, 2};
  const Cost in_place = variable() ? Cost{2, 2} : Cost{1, 1};
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  idx->impl()->alloc->spares().set_batch_blocks(256);  // one refill: the warm-up's
  const int n = 40;                                    // of 48 slots
  ASSERT_TRUE(idx->insert(key(n), value(n, 1)).ok());  // the item slab's chunk word: once
  ASSERT_TRUE(idx->remove(key(n)).ok());
  int inserts = 0;
  for (int i = 0; i < n; ++i) {
    double resizes = counter(*idx, "level_resizes");
    Cost c = cost_of([&] { ASSERT_TRUE(idx->insert(key(i), value(i, 1)).ok()); });
    if (counter(*idx, "level_resizes") != resizes) continue;  // a resize: not this row
    EXPECT_EQ(c, slot) << "insert " << i;
    ++inserts;
  }
  EXPECT_GT(inserts, n / 2);
  int free_slot = 0, full = 0;
  for (int i = 0; i < n; ++i) {
    double before = counter(*idx, "in_place_updates");
    Cost c = cost_of([&] { ASSERT_TRUE(idx->update(key(i), value(i, 2)).ok()); });
    bool was_full = counter(*idx, "in_place_updates") != before;
    EXPECT_EQ(c, was_full ? in_place : slot) << "update " << i << (was_full ? " (full)" : "");
    ++(was_full ? full : free_slot);
  }
  EXPECT_GT(free_slot, 0);  // both update paths ran
  EXPECT_GT(full, 0);
  for (int i = 0; i < n; ++i) {
    Cost c = cost_of([&] { ASSERT_TRUE(idx->remove(key(i)).ok()); });
    EXPECT_EQ(c, (Cost{1, 1})) << "delete " << i;
  }
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;  // includes allocated == reachable
}

// PMEH's bucket locks (§III-C, as Dash; issue 18): a locked (shared-mode) write takes the
// key's home and probing buckets' locks, and a stash bucket's only to store into it — 2 per
// insert, update and delete of a record in the normal buckets (and per write that finds
// nothing to do), 3 when the record goes to or lives in the stash, 3 with a displacement
// (the bucket the moved record goes to). Before: both stash buckets on every write (4;
// 5-6 for a stash insert, the displacement try-locks tried in vain). One 2 KB segment (5
// normal buckets, 2 stash buckets), filled until 4 records are stashed, before any split.
TEST_P(WritePathTest, PmehLockedWriteTakesTwoBucketLocksAndAStashOneOnlyToStash) {
  Options o = small_options("pmeh", GetParam());
  o.params = {{"segment_bytes", "2048"},
              {"split", "2"},
              {"zones", "1"},
              {"depth", "0"},
              {"concurrency", "locked"}};
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  std::map<std::string, std::set<double>> locks;  // write path -> lock counts seen
  auto count = [&](const std::string& path, auto&& op) {
    double before = counter(*idx, "bucket_locks");
    op();
    locks[path].insert(counter(*idx, "bucket_locks") - before);
  };
  std::vector<int> normal, stashed;
  int displaced = 0;
  for (int i = 0; stashed.size() < 4; ++i) {
    ASSERT_LT(i, 98) << "no stash insert in a full segment";
    double st = counter(*idx, "stashed"), dp = counter(*idx, "displacements");
    double l0 = counter(*idx, "bucket_locks");
    ASSERT_TRUE(idx->insert(key(i), value(i, 1)).ok());
    double n = counter(*idx, "bucket_locks") - l0;
    ASSERT_EQ(counter(*idx, "segment_splits"), 0) << "insert " << i;
    if (counter(*idx, "stashed") != st) {
      locks["insert into the stash"].insert(n);
      stashed.push_back(i);
    } else {
      bool moved = counter(*idx, "displacements") != dp;
      locks[moved ? "insert with a displacement" : "insert"].insert(n);
      displaced += moved;
      normal.push_back(i);
    }
  }
  EXPECT_GT(normal.size(), 20u);
  for (int i : normal) {
    count("update", [&] { ASSERT_TRUE(idx->update(key(i), value(i, 2)).ok()); });
    count("insert of a present key",
          [&] { ASSERT_EQ(idx->insert(key(i), value(i, 3)).code(), Code::kAlreadyExists); });
  }
  for (int i : stashed)
    count("update in the stash", [&] { ASSERT_TRUE(idx->upsert(key(i), value(i, 2)).ok()); });
  count("update of a missing key",
        [&] { ASSERT_EQ(idx->update(key(1000), value(1000, 1)).code(), Code::kNotFound); });
  count("delete of a missing key",
        [&] { ASSERT_EQ(idx->remove(key(1000)).code(), Code::kNotFound); });
  for (int i : stashed)
    count("delete in the stash", [&] { ASSERT_TRUE(idx->remove(key(i)).ok()); });
  for (int i : normal) count("delete", [&] { ASSERT_TRUE(idx->remove(key(i)).ok()); });
  const std::set<double> two{2}, three{3};
  for (const char* path : {"insert", "update", "insert of a present key", "update of a missing key",
                           "delete of a missing key", "delete"})
    EXPECT_EQ(locks[path], two) << path;
  for (const char* path : {"insert into the stash", "update in the stash", "delete in the stash"})
    EXPECT_EQ(locks[path], three) << path;
  if (displaced > 0) {
    EXPECT_EQ(locks["insert with a displacement"], three);
  }
  EXPECT_EQ(idx->size(), 0u);
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

// Spare blocks come 16 to a refill whatever their size (a batch counted in bytes once gave
// 1 KiB blocks one per refill), and a refill adds no fence: the writer's own fence before
// it publishes orders the bits (pm::SpareBlocks). A 600-byte item (a 1 KiB block) insert
// costs the free-slot insert's 2 fences (2 + 1/16 while refills fenced).
TEST(SpareBlocks, LargeItemsComeSixteenToARefillThatAddsNoFence) {
  TempPool p;
  Options o = small_options("smartht", Format::kVariable);
  o.params = {{"buckets", "1024"}, {"filter_keys", "1000"}};
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  const std::string big(600, 'v');
  ASSERT_TRUE(idx->insert("warm-up", big).ok());  // the slab's chunk word and first refill
  const int n = 64;
  Cost c = cost_of([&] {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->insert("key" + std::to_string(i), big).ok());
  });
  EXPECT_LE(c.fences, uint64_t{2 * n + 1});  // + one new slab's chunk word (64 blocks a slab)
  EXPECT_EQ(idx->impl()->alloc->spares().refills(), uint64_t{1 + n / 16});
}

// Each thread takes from its own stock (striped by thread id): eight writers alive at once
// refill more than once, where one shared stock of 16 would have served all eight blocks
// with one refill (and one lock every writer waits on). Every spare stays accounted for:
// check() after the writes, and a clean close gives them all back.
TEST(SpareBlocks, ThreadsTakeFromTheirOwnStock) {
  TempPool p;
  Options o = small_options("smartht", Format::kVariable);
  o.params = {{"buckets", "1024"}, {"filter_keys", "1000"}};
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  const uint64_t before = idx->impl()->alloc->spares().refills();
  constexpr int kThreads = 8;
  std::atomic<int> arrived{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      arrived++;
      while (arrived.load() < kThreads) std::this_thread::yield();  // all alive: distinct ids
      EXPECT_TRUE(idx->insert("thread" + std::to_string(t), "value").ok());
      arrived++;
      while (arrived.load() < 2 * kThreads) std::this_thread::yield();
    });
  for (auto& t : ts) t.join();
  // 8 thread ids over 16 stripes: all in one stripe has probability 16^-7.
  EXPECT_GE(idx->impl()->alloc->spares().refills() - before, uint64_t{2});
  std::string report;
  EXPECT_TRUE(idx->check(&report).ok()) << report;
  ASSERT_TRUE(idx->close().ok());
  idx.reset();
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  EXPECT_TRUE(idx->check(&report).ok()) << report;
  EXPECT_EQ(idx->size(), uint64_t{kThreads});
}

INSTANTIATE_TEST_SUITE_P(Formats, WritePathTest,
                         ::testing::Values(Format::kFixed, Format::kVariable),
                         [](const auto& info) {
                           return info.param == Format::kFixed ? "fixed" : "variable";
                         });

}  // namespace
}  // namespace pmhash::testing
