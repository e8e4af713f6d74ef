// HDNH: the OCF, the hot table (RAFL, LRU, off), synchronous writes, Level-style resizing
// and the recovery of an interrupted resize.
#include "index/hdnh/hdnh.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <random>
#include <thread>
#include <tuple>

#include "common/items.hpp"
#include "crash_sim.hpp"
#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

TEST(HdnhBucket, Layout256Bytes) {
  EXPECT_EQ(sizeof(hdnh::Bucket), 256u);
  EXPECT_EQ(offsetof(hdnh::Bucket, slots), 16u);
}

TEST(HdnhOcf, EntryEncoding) {
  uint16_t e = hdnh::ocf::next(0, true, 0xAB);
  EXPECT_TRUE(hdnh::ocf::valid(e));
  EXPECT_FALSE(hdnh::ocf::busy(e));
  EXPECT_EQ(hdnh::ocf::fp(e), 0xAB);
  uint16_t e2 = hdnh::ocf::next(e | hdnh::ocf::kBusy, false, 0);
  EXPECT_FALSE(hdnh::ocf::valid(e2));
  EXPECT_FALSE(hdnh::ocf::busy(e2));
  EXPECT_NE(e2 & 0xFC00, e & 0xFC00);  // the version moved
  // The 6-bit version wraps after 64 changes.
  uint16_t w = 0;
  for (int i = 0; i < 64; ++i) w = hdnh::ocf::next(w | hdnh::ocf::kBusy, false, 0);
  EXPECT_EQ(w, 0);
}

// Recovery's lists (recovery_lists.hpp): sized for `records` records in `parts` lists, they
// hold that many in any split among the lists — round robin, all in one list, and the worst
// case, every list ending in a chunk with one record — and give each list back in push
// order. The worst case needs exactly the arena's room: checked before the pushes, so a
// bound one chunk short fails here instead of writing past the arena.
TEST(HdnhRecoveryLists, HoldTheirBoundInAnySplitAndKeepPushOrder) {
  using hdnh::HotRecord;
  using hdnh::RecordLists;
  constexpr unsigned kParts = 7;
  constexpr uint64_t kChunk = RecordLists::Chunk::kRecords;
  constexpr uint64_t kRecords = 5 * kChunk + kParts;
  // Worst: five full chunks and one record in list 0, one record in each other list.
  constexpr uint64_t kWorstChunks = 6 + (kParts - 1);
  for (int split : {0, 1, 2}) {
    RecordLists lists(kParts, kRecords);
    ASSERT_EQ(lists.chunks_room(), kWorstChunks);
    std::vector<std::vector<uint64_t>> want(kParts);
    for (uint64_t i = 0; i < kRecords; ++i) {
      unsigned q = split == 0   ? unsigned(i % kParts)
                   : split == 1 ? 3u
                                : unsigned(i <= 5 * kChunk ? 0 : i - 5 * kChunk);
      lists.push(q, HotRecord{i, ~i, i * 3});
      want[q].push_back(i);
    }
    for (unsigned q = 0; q < kParts; ++q) {
      std::vector<uint64_t> got;
      lists.for_each(q, [&](const HotRecord& r) {
        EXPECT_EQ(r.kw, ~r.h1);
        EXPECT_EQ(r.vw, r.h1 * 3);
        got.push_back(r.h1);
      });
      EXPECT_EQ(got, want[q]) << "split " << split << " list " << q;
    }
    if (split == 2) {
      EXPECT_EQ(lists.chunks_used(), kWorstChunks);
    }
  }
}

// §3.3, Fig. 5: a hot bucket keeps every slot's metadata and key word in its first cache
// line and each slot's payload within one further line, so a probe reads one line on a miss
// and two on a hit (the parallel arrays before: meta, keys, values, three on a hit).
TEST(HdnhHotBucket, OneLineOnAMissTwoOnAHit) {
  alignas(64) static char buf[4 * 256];
  for (bool variable : {false, true})
    for (int slots = 1; slots <= 8; ++slots) {
      hdnh::hot::Table t;
      t.base = buf;
      t.s = hdnh::hot::shape(slots, variable);
      SCOPED_TRACE(std::to_string(slots) + (variable ? " slots, variable" : " slots, fixed"));
      EXPECT_EQ(t.s.stride % 64, 0u);
      const uint64_t b = 2;
      auto line = [&](const void* p) { return (static_cast<const char*>(p) - buf) / 64; };
      const uint64_t first = line(t.line0(b));
      for (int e = 0; e < slots; ++e) {
        if (slots <= (variable ? 4 : 6)) {  // meta, key words (and lens) in one line
          EXPECT_EQ(t.s.head, 64u);
          EXPECT_EQ(line(&t.meta(b, e)), first);
          EXPECT_EQ(line(&t.key(b, e)), first);
        }
        const auto* pay = t.payload(b, e);
        EXPECT_GT(line(pay), first);  // not in the head
        EXPECT_EQ(line(pay), line(reinterpret_cast<const char*>(pay) + 8 * t.s.payload_words - 1))
            << "payload " << e << " straddles two lines";
        EXPECT_LT(static_cast<uint64_t>(reinterpret_cast<const char*>(pay) - t.line0(b)),
                  t.s.stride);
      }
    }
  EXPECT_EQ(hdnh::hot::shape(4, false).stride, 128u);  // the default: two lines
  EXPECT_EQ(hdnh::hot::shape(4, true).stride, 192u);   // three, a probe reads two of them
}

class HdnhTest : public ::testing::TestWithParam<Format> {
 protected:
  bool fixed() const { return GetParam() == Format::kFixed; }
  std::string key(uint64_t i) const { return make_key(i, fixed()); }
  std::string value(uint64_t i, uint32_t v = 1) const { return make_value(key(i), v, fixed()); }
  Options options(std::map<std::string, std::string> params) const {
    Options o = small_options("hdnh", GetParam());
    o.params = std::move(params);
    return o;
  }
  static std::map<std::string, double> counters(Index& i) {
    std::map<std::string, double> c;
    i.impl()->scheme->counters(&c);
    return c;
  }
  static hdnh::Root& root(Index& i) {
    return *i.impl()->pool->ptr<hdnh::Root>(i.impl()->pool->root());
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
  // Drops the index without a clean close (the pool looks crashed at the next open).
  static void crash(std::unique_ptr<Index>& idx) {
    idx->impl()->closed = true;
    idx.reset();
  }
};

// §3.6: an insert into a free slot writes the slot (flush, fence) and then the bitmap
// (flush, fence); an update writes a new slot in the bucket and flips both bits in one
// store: also two; a delete clears the bit: one.
TEST_P(HdnhTest, FlushesPerOperation) {
  if (!fixed()) GTEST_SKIP() << "the variable format adds the allocator's commit";
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, options({{"segments", "256"}}), &idx).ok());
  const int n = 2000;
  PersistCounters a = thread_persist_counters();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
  PersistCounters b = thread_persist_counters();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->update(key(i), value(i, 2)).ok());
  PersistCounters c = thread_persist_counters();
  for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->remove(key(i)).ok());
  PersistCounters d = thread_persist_counters();
  EXPECT_EQ(counters(*idx)["level_resizes"], 0);
  EXPECT_EQ(b.flushes - a.flushes, 2u * n);
  EXPECT_EQ(b.fences - a.fences, 2u * n);
  // Updates: out of place (2) unless the bucket is full (in place: 1).
  EXPECT_LE(c.flushes - b.flushes, 2u * n);
  EXPECT_GE(c.flushes - b.flushes, 2u * n - n / 10);
  EXPECT_EQ(d.flushes - c.flushes, uint64_t(n));
  EXPECT_EQ(d.fences - c.fences, uint64_t(n));
}

// Level-hashing resizes (§2.2): many, with the model agreeing throughout and after reopening
// cleanly and after a crash.
TEST_P(HdnhTest, DifferentialThroughResizesAndReopen) {
  TempPool p;
  std::unique_ptr<Index> idx;
  Options o = options({{"segment_bytes", "512"}, {"segments", "1"}});
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  Model m;
  std::mt19937_64 rng(7);
  std::string got, want;
  uint64_t cap0 = idx->impl()->scheme->capacity_slots();
  for (int i = 0; i < 30000; ++i) {
    uint64_t k = rng() % 4000;
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
  EXPECT_GE(cn["level_resizes"], 4);
  EXPECT_GT(cn["rehashed_records"], 0);
  EXPECT_GT(idx->impl()->scheme->capacity_slots(), 8 * cap0);
  EXPECT_EQ(root(*idx).top.segments, 2 * root(*idx).bottom.segments);
  expect_contents(*idx, m);
  ASSERT_TRUE(idx->close().ok());
  idx.reset();
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  expect_contents(*idx, m);
  crash(idx);
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  expect_contents(*idx, m);
}

// §3.2: PM is read only where a fingerprint matches. With the hot table off so every read
// reaches the OCF: about one PM slot per positive read; a tiny fraction per negative read;
// without the OCF, every valid candidate slot.
TEST_P(HdnhTest, OcfFiltersPmReads) {
  std::map<std::string, double> with, without;
  for (bool use_ocf : {true, false}) {
    TempPool p;
    std::unique_ptr<Index> idx;
    Options o = options({{"segment_bytes", "4096"},
                         {"segments", "16"},
                         {"hot_table", "off"},
                         {"ocf", use_ocf ? "on" : "off"}});
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    const int n = 4000;  // load factor ~0.4 of 3 x 16 x 16 x 8 slots
    for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
    std::string v;
    for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->get(key(i), &v).ok());
    for (int i = n; i < 2 * n; ++i) ASSERT_EQ(idx->get(key(i), &v).code(), Code::kNotFound);
    (use_ocf ? with : without) = counters(*idx);
  }
  EXPECT_LE(with["pm_slots_per_pos_read"], 1.1);
  EXPECT_GE(with["pm_slots_per_pos_read"], 1.0);
  EXPECT_LT(with["pm_slots_per_neg_read"], 0.2);
  EXPECT_GT(without["pm_slots_per_neg_read"], 10 * with["pm_slots_per_neg_read"]);
  EXPECT_GT(without["pm_slots_per_pos_read"], 2 * with["pm_slots_per_pos_read"]);
}

// §3.3: skewed reads hit the hot table; updates and deletes never leave a stale copy;
// check() verifies every hot copy against the table. For RAFL, LRU and no hot table.
TEST_P(HdnhTest, HotTableServesSkewedReadsAndStaysConsistent) {
  for (std::string repl : {"rafl", "lru", "off"}) {
    for (std::string sync : {"inline", "background"}) {
      if (repl == "off" && sync == "background") continue;
      SCOPED_TRACE(repl + " " + sync);
      TempPool p;
      std::unique_ptr<Index> idx;
      Options o = options({{"segment_bytes", "1024"},
                           {"segments", "2"},
                           {"hot_table", repl},
                           {"hot_slots", "2"},
                           {"sync_write", sync}});
      ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
      Model m;
      const int n = 3000;  // more than the hot table holds: replacement happens
      for (int i = 0; i < n; ++i) {
        ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
        m.insert(key(i), value(i));
      }
      std::mt19937_64 rng(3);
      std::string got;
      for (int i = 0; i < 20000; ++i) {
        uint64_t k = (rng() % 8 == 0) ? rng() % n : rng() % 16;  // 7/8 of reads on 16 keys
        int r = static_cast<int>(rng() % 20);
        if (r == 0) {
          ASSERT_TRUE(idx->upsert(key(k), value(k, i)).ok());
          m.upsert(key(k), value(k, i));
        } else if (r == 1) {
          Code c = idx->remove(key(k)).code();
          ASSERT_EQ(c, m.remove(key(k)));
        } else {
          std::string want;
          Code e = m.get(key(k), &want);
          ASSERT_EQ(idx->get(key(k), &got).code(), e) << i;
          if (e == Code::kOk) {
            ASSERT_EQ(got, want) << i;
          }
        }
      }
      auto c = counters(*idx);
      if (repl == "off") {
        EXPECT_EQ(c["hot_hits"], 0);
        EXPECT_EQ(c["hot_capacity"], 0);
      } else {
        EXPECT_GT(c["hot_hit_ratio"], 0.5);
        EXPECT_GT(c["hot_evictions"], 0);
        EXPECT_LT(c["hot_items"], double(n));
      }
      expect_contents(*idx, m);
    }
  }
}

// Readers and writers on a few hot keys: no stale or torn value after an acknowledgement,
// no stale hot-table copy at the end (check()), with background hot-table writes.
TEST_P(HdnhTest, ConcurrentHotKeysWithBackgroundWrites) {
  TempPool p;
  std::unique_ptr<Index> idx;
  Options o = options({{"segment_bytes", "512"}, {"segments", "1"}, {"sync_write", "background"}});
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  const int keys = 64;
  std::vector<std::atomic<uint32_t>> acked(keys);
  std::atomic<bool> done{false};
  std::atomic<int> errors{0};
  std::thread writer([&] {
    std::mt19937_64 rng(1);
    for (uint32_t i = 1; i <= 20000; ++i) {
      uint64_t k = rng() % keys;
      if (rng() % 8 == 0) {
        if (idx->remove(key(k)).code() == Code::kOk) {
          if (!idx->insert(key(k), value(k, i)).ok()) errors++;
        } else if (!idx->insert(key(k), value(k, i)).ok()) {
          errors++;
        }
      } else if (!idx->upsert(key(k), value(k, i)).ok()) {
        errors++;
      }
      acked[k].store(i);
      if (i % 2000 == 0)  // new keys force level resizes under the readers
        for (int j = 0; j < 50; ++j) (void)idx->insert(key(1000 + i + j), value(1000 + i + j));
    }
    done = true;
  });
  std::thread reader([&] {
    std::mt19937_64 rng(2);
    std::string got;
    while (!done.load()) {
      uint64_t k = rng() % keys;
      uint32_t floor = acked[k].load();
      Status s = idx->get(key(k), &got);
      if (!s.ok()) {
        if (s.code() != Code::kNotFound) errors++;
        continue;
      }
      if (!value_ok(key(k), got, fixed())) {
        errors++;
        continue;
      }
      uint32_t ver = value_version(got, fixed());
      if (ver < floor) errors++;
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(counters(*idx)["level_resizes"], 0);
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

// §3.7 level_number 2: the resizing flag persisted, the new level not attached. Recovery
// attaches it again and finishes the resize.
TEST_P(HdnhTest, RecoveryFinishesAResizeThatHadNotAttachedItsLevel) {
  TempPool p;
  std::unique_ptr<Index> idx;
  Options o = options({{"segment_bytes", "512"}, {"segments", "2"}});
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  Model m;
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
    m.insert(key(i), value(i));
  }
  uint64_t top = root(*idx).top.segments;
  root(*idx).resizing_flag = 1;  // as if the crash came right after the flag was persisted
  crash(idx);
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  EXPECT_EQ(root(*idx).resizing_flag, 0u);
  EXPECT_EQ(root(*idx).level_number, 2u);
  EXPECT_EQ(root(*idx).top.segments, 2 * top);
  EXPECT_EQ(counters(*idx)["level_resizes"], 1);
  expect_contents(*idx, m);
}

// §3.7: the recovery threads fill the hot table per partition of hot buckets. Whatever the
// number of threads (1, 2, 3 — not a divisor of the bucket count — and more threads than
// buckets per level), every record is back, every hot copy equals the table, and the hot
// table holds as many items (with two levels the count does not depend on the order).
// (It does not catch a wrong partition: the hot buckets are atomics, invisible to TSan, and
// two threads rarely meet in one bucket of so small a table; the next test checks the
// partition directly.)
TEST_P(HdnhTest, RecoveryThreadsFillTheHotTableByPartition) {
  TempPool p;
  std::unique_ptr<Index> idx;
  Options o = options({{"segment_bytes", "512"}, {"segments", "1"}});
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  Model m;
  for (int i = 0; i < 3000; ++i) {
    ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
    m.insert(key(i), value(i));
  }
  ASSERT_GE(counters(*idx)["level_resizes"], 3);
  double hot_items = -1;
  for (const char* threads : {"1", "2", "3", "64"}) {
    crash(idx);
    o.params["recovery_threads"] = threads;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    auto c = counters(*idx);
    ASSERT_EQ(c["levels"], 2);
    if (hot_items < 0) hot_items = c["hot_items"];
    EXPECT_GT(c["hot_items"], 0) << threads;
    EXPECT_EQ(c["hot_items"], hot_items) << threads << " recovery threads";
    expect_contents(*idx, m);
  }
}

// The hot table's DRAM is its buckets (hot_table.hpp): small variable items sit inline in
// them, no DRAM copy is allocated (3 allocations per hot insert and 74 B per key before),
// and only an item too long to be inline adds a HotItem, in one allocation.
TEST_P(HdnhTest, HotBucketsHoldSmallItemsInlineAndDramIsTheBuckets) {
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, options({{"segments", "4"}}), &idx).ok());
  Scheme& sc = *idx->impl()->scheme;
  const uint64_t nb = sc.capacity_slots() / hdnh::kSlots;
  const uint64_t stride = hdnh::hot::shape(4, !fixed()).stride;
  auto k = [&](int i) {
    if (fixed()) return key(i);
    char b[16];
    std::snprintf(b, sizeof b, "k%04d", i);
    return std::string(b);
  };
  auto v = [&](int i) { return fixed() ? value(i) : std::string(27, char('a' + i % 26)); };
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(idx->insert(k(i), v(i)).ok());  // 32 B: inline
  std::string got;
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(idx->get(k(i), &got).ok() && got == v(i));
  EXPECT_EQ(counters(*idx)["hot_items"], 200);
  EXPECT_EQ(counters(*idx)["hot_hit_ratio"], 1);
  const uint64_t buckets_only = 4096 * 4 + nb * (hdnh::kSlots * 2 + 4) + nb * stride;
  EXPECT_EQ(sc.dram_bytes(), buckets_only);  // stripes, OCF and change counts, hot buckets
  if (fixed()) return;
  const std::string long_key(16, 'L'), long_value(17, 'V');  // 33 B: out of line
  ASSERT_TRUE(idx->insert(long_key, long_value).ok());
  ASSERT_TRUE(idx->get(long_key, &got).ok() && got == long_value);
  // One allocation per out-of-line item: its two lengths, key and value bytes (a HotItem of
  // two std::strings was three allocations and 64 + capacities).
  EXPECT_EQ(sc.dram_bytes(), buckets_only + 8 + 33);
  const std::string longer_value(300, 'W');  // update in place of the hot copy
  ASSERT_TRUE(idx->update(long_key, longer_value).ok());
  ASSERT_TRUE(idx->get(long_key, &got).ok() && got == longer_value);
  idx->impl()->quiesce();  // the replaced copy freed
  EXPECT_EQ(sc.dram_bytes(), buckets_only + 8 + 16 + 300);
  ASSERT_TRUE(idx->remove(long_key).ok());
  EXPECT_EQ(idx->get(long_key, &got).code(), Code::kNotFound);
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

#ifdef PMHASH_CRASH_HOOKS
// The recovery partition of a key's hot buckets (§3.7 rebuild): two keys that share a hot
// bucket in any level must fall in one partition, or two recovery threads write one bucket
// with plain stores. Checked directly on every pair of keys sharing a bucket, for several
// thread counts (the fill test above cannot see a wrong partition). A partition computed
// from the top level instead of the bottom splits bottom buckets: this fails.
TEST_P(HdnhTest, KeysSharingAHotBucketInAnyLevelShareTheRecoveryPartition) {
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(
      Index::open(p.path, options({{"segment_bytes", "1024"}, {"segments", "3"}}), &idx).ok());
  auto* h = static_cast<hdnh::Hdnh*>(idx->impl()->scheme.get());
  ASSERT_EQ(h->test_levels(), 2);
  for (unsigned nt : {2u, 3u, 5u, 8u}) {
    std::vector<std::map<uint64_t, unsigned>> owner(2);  // hot bucket -> partition, per level
    std::vector<int> used(nt);
    for (uint64_t i = 0; i < 4000; ++i) {
      std::string k = key(i);
      unsigned part = h->test_hot_partition(k, nt);
      ASSERT_LT(part, nt);
      ++used[part];
      for (int l = 0; l < 2; ++l) {
        auto [it, fresh] = owner[l].emplace(h->test_hot_bucket(k, l), part);
        ASSERT_EQ(it->second, part) << "level " << l << " hot bucket " << it->first << " in "
                                    << "two partitions of " << nt;
      }
    }
    for (unsigned t = 0; t < nt; ++t) EXPECT_GT(used[t], 0) << "partition " << t << " empty";
  }
}
#endif

#ifdef PMHASH_CRASH_HOOKS
// §3.7 rebuild, one window of hot buckets at a time: after a crash at a fence in the middle
// of a load, a recovery with more threads than cores, each filling many partitions, gives
// every acknowledged key back through both paths — its copy in the hot table and its OCF
// entry (get() without the hot table). The table is sparse (8 hot slots per bucket), so
// every record has a free hot slot: a partition the fill skipped, a window it filled only
// partly or a record the traversal dropped is a key without a hot copy here.
TEST_P(HdnhTest, CrashRecoveryInManyWindowsRestoresEveryAckedKeyInBothPaths) {
  TempPool p;
  const int n = 4000;
  Options o = options({{"hot_slots", "8"}});
  o.capacity_hint = 4 * n;
  std::vector<char> image;
  int acked = 0, acked_at_crash = -1;
  {
    CrashSim sim;
    OpenHooks hooks;
    hooks.persist_hook = &sim;
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(open_index(p.path, o, hooks, &idx).ok());
    uint64_t fences = 0;
    sim.at_crash_point = [&] {  // inside an insert about 3/4 through the load
      if (++fences != uint64_t(3 * n / 2 + 1)) return;
      sim.make_image(CrashSim::Mix::kPerWord, 7, &image);
      acked_at_crash = acked;
    };
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
      acked = i + 1;
    }
    sim.at_crash_point = nullptr;
    idx->impl()->closed = true;  // leave the file to the image
  }
  ASSERT_GT(acked_at_crash, n / 2);
  write_bytes(p.path, image);
  const unsigned threads = 3 * std::max(1u, std::thread::hardware_concurrency());
  o.params["recovery_threads"] = std::to_string(threads);
  o.create = false;
  hdnh::Hdnh::test_window_bytes = 4096;
  std::unique_ptr<Index> idx;
  Status s = Index::open(p.path, o, &idx);
  hdnh::Hdnh::test_window_bytes = 0;
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(idx->stats().recovered_from_crash);
  auto* h = static_cast<hdnh::Hdnh*>(idx->impl()->scheme.get());
  hdnh::Hdnh::test_window_bytes = 4096;
  unsigned parts = h->test_recovery_parts(threads);
  hdnh::Hdnh::test_window_bytes = 0;
  ASSERT_GE(parts, 4 * threads) << "every thread fills several windows";
  std::string got;
  for (int i = 0; i < acked_at_crash; ++i) {
    ASSERT_TRUE(h->test_get_hot(key(i), &got)) << "key " << i << " has no hot copy";
    ASSERT_EQ(got, value(i));
    ASSERT_TRUE(h->test_get_ocf(key(i), &got)) << "key " << i << " not found through the OCF";
    ASSERT_EQ(got, value(i));
  }
  uint64_t size = idx->size();
  EXPECT_TRUE(size == uint64_t(acked_at_crash) || size == uint64_t(acked_at_crash) + 1) << size;
  EXPECT_EQ(counters(*idx)["hot_items"], double(size));
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}
#endif

// Bad run-time options are refused with a clear error, before anything is changed.
TEST_P(HdnhTest, RejectsBadOptions) {
  TempPool p;
  std::unique_ptr<Index> idx;
  for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{{"hot_table", "fifo"},
                                                                      {"hot_slots", "9"},
                                                                      {"sync_write", "maybe"},
                                                                      {"segment_bytes", "300"},
                                                                      {"segments", "0"}}) {
    Status s = Index::open(p.path, options({{k, v}}), &idx);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << k;
    EXPECT_NE(s.message().find(k), std::string::npos) << s.message();
  }
}

// §3.7 resize: the old bottom level's block is freed only after the level set that still
// names it has been replaced, so a reader holding a level set never reads a freed level.
// Every free is checked against what the published structure still reaches.
TEST_P(HdnhTest, ResizeFreesTheOldBottomOnlyAfterPublishingTheNewLevels) {
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(
      Index::open(p.path, options({{"segment_bytes", "256"}, {"segments", "1"}}), &idx).ok());
  Scheme& sc = *idx->impl()->scheme;
  pm::Allocator& a = *idx->impl()->alloc;
  std::function<void(uint64_t)> orig = a.on_free;
  int frees = 0, reachable = 0;
  a.on_free = [&](uint64_t off) {
    ++frees;
    bool reach = false;
    sc.for_each_reachable([&](uint64_t o) { reach = reach || o == off; });
    reachable += reach;
    orig(off);
  };
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
  a.on_free = orig;
  EXPECT_GE(counters(*idx)["level_resizes"], 3);
  EXPECT_GE(frees, 3);  // one old bottom level per resize
  EXPECT_EQ(reachable, 0) << "a level was freed while the published level set still held it";
}

// Calls `at_fence` at every fence the test thread issues (after the fence: everything
// flushed before it is persisted).
struct FenceHook : pm::PersistHook {
  std::function<void()> at_fence;
  std::thread::id owner = std::this_thread::get_id();
  bool inside = false;
  void on_map(char*, size_t) override {}
  void on_flush(const void*, size_t) override {}
  void on_fence() override {
    if (!at_fence || inside || std::this_thread::get_id() != owner) return;
    inside = true;
    at_fence();
    inside = false;
  }
};

// Persist, then make visible (§3.4 hot-table writes included): at every fence of an insert
// (and, inline, of an update) a get() of the key must not return the new value while no
// persisted PM record holds it, and once it has returned it must not say not-found. With
// background writes the partner runs meanwhile, so the check polls.
TEST_P(HdnhTest, ReaderNeverSeesAValueBeforeItsPmCommit) {
  for (std::string sync : {"inline", "background"}) {
    for (std::string repl : {"rafl", "lru"}) {
      SCOPED_TRACE(sync + " " + repl);
      TempPool p;
      std::unique_ptr<Index> idx;
      ASSERT_TRUE(
          Index::open(p.path,
                      options({{"hot_table", repl}, {"sync_write", sync}, {"hot_slots", "8"}}),
                      &idx)
              .ok());
      IndexImpl& im = *idx->impl();
      std::string armed_key, armed_value;
      int fences = 0, early = 0, lost = 0;
      bool seen = false;
      auto persisted = [&] {  // a valid PM record holds the new value (the fence is done)
        bool found = false;
        im.scheme->for_each([&](const common::Slot& s) {
          std::string v;
          if (im.items->slot_key_bytes(s) == armed_key && im.items->read_value(s.value, &v) &&
              v == armed_value)
            found = true;
        });
        return found;
      };
      FenceHook hook;
      hook.at_fence = [&] {
        if (armed_key.empty()) return;
        ++fences;
        bool durable = persisted();
        int polls = (sync == "background" && !durable) ? 300 : 1;
        for (int i = 0; i < polls; ++i) {
          std::string got;
          Status s = idx->get(armed_key, &got);
          if (s.ok() && got == armed_value) {
            early += !durable;
            seen = true;
            break;
          }
          if (seen && s.code() == Code::kNotFound) ++lost;
          std::this_thread::yield();
        }
      };
      im.pool->persister().hook = &hook;
      const int n = 12;
      for (int i = 0; i < n; ++i) {
        armed_key = key(i), armed_value = value(i), seen = false;
        ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
        armed_key.clear();
      }
      if (sync == "inline") {  // background: the in-fence get would wait for our own lock
        for (int i = 0; i < n; ++i) {
          // The old value must be a hot hit, or the in-fence get would wait for the slot
          // this thread holds.
          std::string got;
          double hits = counters(*idx)["hot_hits"];
          ASSERT_TRUE(idx->get(key(i), &got).ok());
          ASSERT_EQ(counters(*idx)["hot_hits"], hits + 1);
          armed_key = key(i), armed_value = value(i, 2), seen = false;
          ASSERT_TRUE(idx->update(key(i), value(i, 2)).ok());
          armed_key.clear();
        }
      }
      im.pool->persister().hook = nullptr;
      EXPECT_GE(fences, 2 * n);
      EXPECT_EQ(early, 0) << "a reader saw a value no persisted record holds";
      EXPECT_EQ(lost, 0) << "a reader saw the value, a later one did not find the key";
      std::string report;
      EXPECT_TRUE(im.check(&report)) << report;
    }
  }
}

// A read-miss fill must not cache a value replaced since the lock-free read: 1..40
// delete/re-insert pairs of the key (into the same slot) run between the read and the fill;
// 32 of them bring the slot's 6-bit OCF version back to what the reader saw.
TEST_P(HdnhTest, ReadFillNeverCachesAValueReplacedSinceTheRead) {
  for (std::string repl : {"rafl", "lru"}) {
    SCOPED_TRACE(repl);
    TempPool p;
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, options({{"hot_table", repl}}), &idx).ok());
    auto* h = static_cast<hdnh::Hdnh*>(idx->impl()->scheme.get());
    const std::string k = key(1);
    uint32_t ver = 0;
    ASSERT_TRUE(idx->insert(k, value(1, ver)).ok());
    for (int pairs = 1; pairs <= 40; ++pairs) {
      h->test_drop_hot(k);  // the next get() reads PM and fills
      bool armed = true;
      int ran = 0;
      h->test_before_fill = [&] {
        if (!armed) return;
        armed = false;
        ++ran;
        for (int j = 0; j < pairs; ++j) {
          ASSERT_TRUE(idx->remove(k).ok());
          ASSERT_TRUE(idx->insert(k, value(1, ++ver)).ok());
        }
      };
      std::string got;
      ASSERT_TRUE(idx->get(k, &got).ok());
      h->test_before_fill = nullptr;
      ASSERT_EQ(ran, 1) << "the get did not reach the fill";
      std::string report;
      ASSERT_TRUE(idx->impl()->check(&report)) << pairs << " pairs: " << report;
      ASSERT_TRUE(idx->get(k, &got).ok());
      ASSERT_EQ(got, value(1, ver)) << pairs << " pairs";
    }
  }
}

// The setups the find() seam tests run: the filter's rescan alone (hot table off), the
// defaults (a retried get may be answered by the hot table), and the OCF off.
using FindSetup = std::map<std::string, std::string>;
const FindSetup kFindSetups[] = {{{"hot_table", "off"}}, {}, {{"ocf", "off"}}};
std::string setup_name(const FindSetup& p) {
  return p.empty() ? "defaults" : p.begin()->first + "=" + p.begin()->second;
}

// An update moves its record to another slot of its bucket (Fig. 10: the new slot valid,
// then the old one released). A get() whose scan of the bucket has read the new slot while
// it was free, and reads the old slot after the update released it, saw the key in neither:
// it must notice that the bucket changed and look again, not answer not-found (YCSB-F at
// two threads found this). Here the update runs at that point of the scan (a test seam):
// the record is in slot 1, slot 0 free; the scan reads slot 0, then the update moves the
// record to slot 0.
TEST_P(HdnhTest, GetFindsAKeyThatAnUpdateMovedBehindItsScan) {
  for (const FindSetup& params : kFindSetups) {
    SCOPED_TRACE(setup_name(params));
    TempPool p;
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, options(params), &idx).ok());
    auto* h = static_cast<hdnh::Hdnh*>(idx->impl()->scheme.get());
    const std::string k = key(7);
    ASSERT_TRUE(idx->insert(k, value(7, 0)).ok());  // slot 0 of its bucket
    ASSERT_TRUE(idx->update(k, value(7, 1)).ok());  // slot 1 (slot 0 is locked meanwhile)
    enum { kOff, kRecord, kArmed } mode = kOff;
    int level = -1, slot = -1, fired = 0;
    uint64_t bucket = 0;
    h->test_after_entry = [&](int i, uint64_t b, int s) {
      if (mode == kRecord) {
        level = i, bucket = b, slot = s;  // a successful lookup's last entry: the record's
      } else if (mode == kArmed && i == level && b == bucket && s == 0) {
        mode = kOff;
        ++fired;
        EXPECT_TRUE(idx->update(k, value(7, 2)).ok());
      }
    };
    auto locate = [&] {
      h->test_drop_hot(k);  // the next get() reads the table
      mode = kRecord;
      std::string v;
      EXPECT_TRUE(idx->get(k, &v).ok());
      mode = kOff;
      return slot;
    };
    const int before = locate();
    ASSERT_EQ(before, 1);
    h->test_drop_hot(k);
    mode = kArmed;
    std::string got;
    Status s = idx->get(k, &got);
    ASSERT_EQ(fired, 1) << "the get did not scan the record's bucket";
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(got, value(7, 2));
    EXPECT_EQ(locate(), 0) << "the update did not move the record behind the scan";
    h->test_after_entry = nullptr;
    std::string report;
    EXPECT_TRUE(idx->impl()->check(&report)) << report;
  }
}

// The hole the buckets' change counts close: an OCF entry's 6-bit version comes back after
// 64 changes. A reader of key Y reads slot 0 of Y's bucket (key D, Y's fingerprint: a PM read,
// no match) and slot 1, and stops there; D is deleted and Y, in a later slot, updated 63
// times. Each update moves Y to the bucket's first free slot, so it bounces between slot 0
// and a slot past 1: slot 0 changes 64 times and ends bit-identical, holding Y, and the
// reader then finds Y's old slot free. With only the entries to compare, the miss counted.
TEST_P(HdnhTest, GetFindsAKeyWhoseSlotEntryWrappedItsVersionDuringTheScan) {
  for (const FindSetup& params : kFindSetups) {
    SCOPED_TRACE(setup_name(params));
    TempPool p;
    std::unique_ptr<Index> idx;
    FindSetup with = params;
    with["segments"] = "4";  // 512 top buckets, 256 bottom
    ASSERT_TRUE(Index::open(p.path, options(with), &idx).ok());
    auto* h = static_cast<hdnh::Hdnh*>(idx->impl()->scheme.get());
    struct Where {
      int level = -1;
      uint64_t bucket = 0;
      int slot = -1;
      bool operator<(const Where& o) const {
        return std::tie(level, bucket) < std::tie(o.level, o.bucket);
      }
    };
    enum { kOff, kRecord, kArmed } mode = kOff;
    Where last, at;
    int fired = 0;
    std::string d, y;
    uint64_t yi = 0;
    h->test_after_entry = [&](int i, uint64_t b, int s) {
      if (mode == kRecord) {
        last = {i, b, s};  // a successful lookup's last entry: the record's
      } else if (mode == kArmed && i == at.level && b == at.bucket && s == 1) {
        mode = kOff;
        ++fired;
        EXPECT_TRUE(idx->remove(d).ok());
        for (uint32_t v = 2; v <= 64; ++v) EXPECT_TRUE(idx->update(y, value(yi, v)).ok());
      }
    };
    auto locate = [&](const std::string& k) {
      h->test_drop_hot(k);  // the next get() reads the table
      mode = kRecord;
      std::string v;
      EXPECT_TRUE(idx->get(k, &v).ok()) << k;
      mode = kOff;
      return last;
    };
    const int n = 3000;
    for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
    ASSERT_EQ(h->test_levels(), 2) << "a resize started";
    std::map<Where, std::array<int, hdnh::kSlots>> buckets;  // slot -> key number, or -1
    for (int i = 0; i < n; ++i) {
      Where w = locate(key(i));
      auto [it, fresh] = buckets.try_emplace(w);
      if (fresh) it->second.fill(-1);
      it->second[w.slot] = i;
    }
    auto fp = [&](int i) { return static_cast<uint8_t>(common::Items::hash(key(i))); };
    for (auto& [w, slots] : buckets) {
      if (slots[0] < 0 || slots[1] < 0) continue;
      for (int s = 2; s < hdnh::kSlots && d.empty(); ++s)
        if (slots[s] >= 0 && fp(slots[s]) == fp(slots[0]))
          at = w, d = key(slots[0]), yi = slots[s], y = key(yi);
      if (!d.empty()) break;
    }
    ASSERT_FALSE(d.empty()) << "no bucket with slots 0 and 1 full and two keys of one "
                               "fingerprint in slot 0 and a later slot";
    h->test_drop_hot(y);
    mode = kArmed;
    std::string got;
    const double retries_before = counters(*idx)["read_retries"];
    Status s = idx->get(y, &got);
    ASSERT_EQ(fired, 1) << "the get did not scan the record's bucket";
    EXPECT_GT(counters(*idx)["read_retries"], retries_before)
        << "the miss in the churned bucket did not restart the lookup";
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(got, value(yi, 64));
    Where now = locate(y);
    EXPECT_EQ(now.level, at.level);
    EXPECT_EQ(now.bucket, at.bucket);
    EXPECT_EQ(now.slot, 0) << "the updates did not end with the record in slot 0";
    h->test_after_entry = nullptr;
    std::string report;
    EXPECT_TRUE(idx->impl()->check(&report)) << report;
  }
}

// The same race without choosing the instant: updaters of four hot keys and readers of
// them, more threads than cores, the readers yielding the core after every OCF entry they
// read (the seam widens the window between two entries of a scan to a scheduling slice;
// unwidened, YCSB-F met it once in millions of operations). Every get finds its key, with a
// value some updater wrote.
TEST_P(HdnhTest, HotKeysUpdatedWhileReadersArePreemptedMidScanAreNeverMissing) {
  for (std::string hot : {"off", "rafl"}) {
    SCOPED_TRACE("hot_table=" + hot);
    TempPool p;
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, options({{"hot_table", hot}}), &idx).ok());
    auto* h = static_cast<hdnh::Hdnh*>(idx->impl()->scheme.get());
    const int keys = 4, updaters = 2, readers = 4, ops = 12000;
    std::vector<std::atomic<uint32_t>> issued(keys);  // the highest version any updater began
    for (int k = 0; k < keys; ++k) ASSERT_TRUE(idx->insert(key(k), value(k, 0)).ok());
    static thread_local bool is_reader = false;
    h->test_after_entry = [](int, uint64_t, int) {
      if (is_reader) std::this_thread::yield();
    };
    std::atomic<int> update_errors{0}, misses{0}, bad_values{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < updaters; ++t)
      ts.emplace_back([&, t] {
        std::mt19937_64 rng(10 + t);
        for (int i = 0; i < ops; ++i) {
          uint64_t k = rng() % keys;
          uint32_t v = issued[k].fetch_add(1) + 1;
          if (!idx->update(key(k), value(k, v)).ok()) update_errors++;
        }
      });
    for (int t = 0; t < readers; ++t)
      ts.emplace_back([&, t] {
        is_reader = true;
        std::mt19937_64 rng(20 + t);
        std::string got;
        for (int i = 0; i < ops; ++i) {
          uint64_t k = rng() % keys;
          Status s = idx->get(key(k), &got);
          if (!s.ok()) {
            misses++;
            continue;
          }
          uint32_t ver = value_version(got, fixed());
          if (!value_ok(key(k), got, fixed()) || ver > issued[k].load()) bad_values++;
        }
        is_reader = false;
      });
    for (auto& t : ts) t.join();
    h->test_after_entry = nullptr;
    EXPECT_EQ(update_errors.load(), 0);
    EXPECT_EQ(misses.load(), 0) << "gets answered not-found for a key that was never deleted";
    EXPECT_EQ(bad_values.load(), 0);
    std::string report;
    EXPECT_TRUE(idx->impl()->check(&report)) << report;
  }
}

// stats() (capacity, DRAM bytes, counters: levels and hot items) runs while a writer's
// inserts resize the table every few hundred keys: no freed level or hot item is read
// (ASan), and every snapshot is sane.
TEST_P(HdnhTest, StatsWhileAWriterResizes) {
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(
      Index::open(p.path, options({{"segment_bytes", "256"}, {"segments", "1"}}), &idx).ok());
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::atomic<uint64_t> calls{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&] {
      do {
        Stats st = idx->stats();
        double levels = st.counters["levels"];
        if (st.capacity_slots < 24 || (levels != 2 && levels != 3) ||
            st.counters["hot_items"] > st.counters["hot_capacity"] || st.dram_bytes == 0)
          bad++;
        calls++;
      } while (!done.load());
    });
  const int n = 5000;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(idx->insert(key(i), value(i)).ok());
    if (i % 3 == 0) {
      ASSERT_TRUE(idx->upsert(key(i / 2), value(i / 2, 2)).ok());
    }
  }
  done = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GE(calls.load(), 3u);
  EXPECT_GE(counters(*idx)["level_resizes"], 6);
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

INSTANTIATE_TEST_SUITE_P(Formats, HdnhTest, ::testing::Values(Format::kFixed, Format::kVariable),
                         [](const auto& info) { return std::string(format_name(info.param)); });

// Concurrency with DEFAULT options and with the matrix sync_write × hot_table × ocf on tiny
// segments (a resize every few hundred inserts): 8 threads (more than the cores) — three
// key owners writing (inserts, upserts; one of them mostly deleting), three readers, two
// stats() callers. Each key has one owner, which announces an operation (intent) before it
// and acknowledges it after; a reader's result must be the key's acknowledged state or the
// announced operation's. At the end every key matches its owner's model, and check() passes.
struct ConcCase {
  std::string name;
  Format format;
  std::map<std::string, std::string> params;
};

class HdnhConcurrency : public ::testing::TestWithParam<ConcCase> {};

std::vector<ConcCase> conc_cases() {
  std::vector<ConcCase> v;
  for (Format f : {Format::kFixed, Format::kVariable}) {
    v.push_back({std::string(format_name(f)) + "_defaults", f, {}});
    for (std::string sync : {"inline", "background"})
      for (std::string hot : {"rafl", "lru", "off"})
        for (std::string ocf : {"on", "off"})
          v.push_back({std::string(format_name(f)) + "_" + sync + "_hot_" + hot + "_ocf_" + ocf,
                       f,
                       {{"segment_bytes", "256"},
                        {"segments", "1"},
                        {"sync_write", sync},
                        {"hot_table", hot},
                        {"ocf", ocf}}});
  }
  return v;
}

TEST_P(HdnhConcurrency, OwnersReadersDeletersAndStatsAgreeWithThePerKeyModel) {
  const ConcCase& c = GetParam();
  const bool fixed = c.format == Format::kFixed;
  TempPool p;
  std::unique_ptr<Index> idx;
  Options o = small_options("hdnh", c.format);
  o.params = c.params;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  const int owners = 3, keys = 900, ops = 1500;
  // Per key: ack = seq << 1 | present (after operation seq), intent = seq << 1 | is_put
  // (before it). A put of operation seq writes version seq.
  std::vector<std::atomic<uint64_t>> ack(keys), intent(keys);
  std::atomic<int> owners_left{owners};
  std::atomic<int> errors{0};
  std::atomic<uint64_t> checked{0};
  auto version_of = [&](const std::string& v) -> uint64_t { return value_version(v, fixed); };
  std::vector<std::thread> ts;
  for (int t = 0; t < owners; ++t)
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      int delete_pct = t == owners - 1 ? 50 : 15;  // the last owner is mostly a deleter
      for (int i = 0; i < ops; ++i) {
        uint64_t k = (rng() % (keys / owners)) * owners + t;
        uint64_t a = ack[k].load();
        uint64_t seq = (a >> 1) + 1;
        bool present = a & 1;
        bool del = present && int(rng() % 100) < delete_pct;
        intent[k].store(seq << 1 | (del ? 0 : 1));
        std::string kk = make_key(k, fixed), vv = make_value(kk, uint32_t(seq), fixed);
        Status s = del ? idx->remove(kk) : (present ? idx->upsert(kk, vv) : idx->insert(kk, vv));
        if (!s.ok()) errors++;
        ack[k].store(seq << 1 | (del ? 0 : 1));
      }
      owners_left--;
    });
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(200 + t);
      std::string got;
      int reads = 0;  // at least 1000 each, so every run checks something however it is scheduled
      do {
        ++reads;
        uint64_t k = rng() % keys;
        std::string kk = make_key(k, fixed);
        uint64_t a1 = ack[k].load();
        Status s = idx->get(kk, &got);
        uint64_t i2 = intent[k].load(), a2 = ack[k].load();
        if (a2 != a1) continue;  // an operation completed meanwhile: either state is fine
        bool found = s.ok();
        if (!found && s.code() != Code::kNotFound) {
          errors++;
          continue;
        }
        if (found && !value_ok(kk, got, fixed)) {
          errors++;
          continue;
        }
        uint64_t seq = a1 >> 1;
        auto is_state = [&](bool present, uint64_t ver) {
          return found == present && (!found || version_of(got) == ver);
        };
        bool ok = is_state(a1 & 1, seq) || ((i2 >> 1) == seq + 1 && is_state(i2 & 1, seq + 1));
        if (!ok) errors++;
        checked++;
      } while (owners_left.load() > 0 || reads < 1000);
    });
  for (int t = 0; t < 2; ++t)
    ts.emplace_back([&] {
      do {
        Stats st = idx->stats();
        if (st.capacity_slots == 0 || st.size > st.capacity_slots) errors++;
      } while (owners_left.load() > 0);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(checked.load(), 0u);
  uint64_t present = 0;
  std::string got;
  for (int k = 0; k < keys; ++k) {
    std::string kk = make_key(k, fixed);
    uint64_t a = ack[k].load();
    if (a & 1) {
      ++present;
      ASSERT_TRUE(idx->get(kk, &got).ok()) << k;
      ASSERT_EQ(got, make_value(kk, uint32_t(a >> 1), fixed)) << k;
    } else {
      ASSERT_EQ(idx->get(kk, &got).code(), Code::kNotFound) << k;
    }
  }
  EXPECT_EQ(idx->size(), present);
  if (!c.params.empty()) {
    std::map<std::string, double> cn;
    idx->impl()->scheme->counters(&cn);
    EXPECT_GE(cn["level_resizes"], 3);
  }
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
}

INSTANTIATE_TEST_SUITE_P(Matrix, HdnhConcurrency, ::testing::ValuesIn(conc_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace pmhash::testing
