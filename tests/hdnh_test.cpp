// HDNH: the OCF, the hot table (RAFL, LRU, off), synchronous writes, Level-style resizing
// and the recovery of an interrupted resize.
#include "index/hdnh/hdnh.hpp"

#include <gtest/gtest.h>

#include <random>
#include <thread>

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
      uint32_t ver = 0;
      if (fixed())
        std::memcpy(&ver, got.data(), 4);
      else
        ver = static_cast<uint32_t>(std::stoul(got.substr(1)));
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

INSTANTIATE_TEST_SUITE_P(Formats, HdnhTest, ::testing::Values(Format::kFixed, Format::kVariable),
                         [](const auto& info) { return std::string(format_name(info.param)); });

}  // namespace
}  // namespace pmhash::testing
