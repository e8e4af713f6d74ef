// Space under churn (issue 18): a steady live set under random inserts of new keys and
// deletes of live keys, 10x its size. PM and DRAM bytes per live key must end within 1.5x
// of what they were after the initial load: slots deletes free are reused, emptied chain
// buckets are given back, and DRAM structures are sized by the live keys, not by the keys
// ever inserted (SmartHT's filter). Contents match a model and check() passes at the end.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

struct ChurnCase {
  std::string scheme;
  Format format;
};

// Tables smaller than the live set needs, so that most items live in chains: the space that
// churn must give back is chain buckets (with tables sized for the keys, chains are rare and
// the PM bytes would hide a leak of them). PMHASH_CHURN_BUCKETS overrides (experiments).
std::map<std::string, std::string> churn_params(const std::string& scheme) {
  const char* b = std::getenv("PMHASH_CHURN_BUCKETS");
  if (scheme == "smartht") return {{"buckets", b ? b : "512"}};  // ~10 keys per head bucket
  if (scheme == "wophi") return {{"buckets", b ? b : "2048"}};   // ~2.5 keys per main bucket
  if (scheme == "turbohash") return {{"shards", b ? b : "4"}};
  if (scheme == "pmeh") return {{"segment_bytes", "2048"}, {"zones", "1"}};  // splits under load
  return {};  // HDNH: levels sized by the capacity hint
}

class SpaceUnderChurn : public ::testing::TestWithParam<ChurnCase> {};

double pm_bytes_per_key(const Index& idx) {
  Stats s = idx.stats();
  return s.size ? double(s.pm_bytes) / double(s.size) : 0;
}
double load_factor(const Index& idx) {
  return idx.stats().load_factor;
}
// DRAM bytes per live key once background work has finished and what it retired is freed:
// a snapshot taken during a rebuild would count the old and the new SmartHT filter (both
// are held then: dram_bytes() is honest), and the old one is freed one grace period after
// the rebuild. The settled state is the one that says whether DRAM grows with churn.
double settled_dram_bytes_per_key(Index& idx) {
  idx.impl()->quiesce();
  Stats s = idx.stats();
  return s.size ? double(s.dram_bytes) / double(s.size) : 0;
}

TEST_P(SpaceUnderChurn, PmAndDramBytesPerKeyStayWithinOneAndAHalfTimesTheLoad) {
  const uint64_t kLive = 5000, kOps = 50000;
  const bool fixed = GetParam().format == Format::kFixed;
  TempPool p;
  Options o = small_options(GetParam().scheme, GetParam().format);
  o.capacity_hint = kLive;
  o.params = churn_params(GetParam().scheme);
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  Model m;
  std::vector<uint64_t> live;
  uint64_t next = 0;
  auto insert = [&] {
    uint64_t id = next++;
    std::string k = make_key(id, fixed), v = make_value(k, uint32_t(id), fixed);
    ASSERT_TRUE(idx->insert(k, v).ok());
    m.insert(k, v);
    live.push_back(id);
  };
  for (uint64_t i = 0; i < kLive; ++i) insert();
  const double after_load = pm_bytes_per_key(*idx), lf_after_load = load_factor(*idx);
  const double dram_after_load = settled_dram_bytes_per_key(*idx);
  std::mt19937_64 rng(7);
  for (uint64_t i = 0; i < kOps; ++i) {
    // Random inserts and deletes; the live set stays within 1% of kLive.
    bool ins = live.size() <= kLive - kLive / 100   ? true
               : live.size() >= kLive + kLive / 100 ? false
                                                    : (rng() & 1) != 0;
    if (ins) {
      insert();
    } else {
      size_t j = rng() % live.size();
      std::string k = make_key(live[j], fixed);
      ASSERT_TRUE(idx->remove(k).ok()) << "live key " << live[j] << " missing";
      m.remove(k);
      live[j] = live.back();
      live.pop_back();
    }
  }
  const double at_end = pm_bytes_per_key(*idx), lf_at_end = load_factor(*idx);
  const double dram_at_end = settled_dram_bytes_per_key(*idx);
  std::map<std::string, double> c = idx->stats().counters;
  std::printf(
      "[%s %s] PM bytes per live key: %.1f after the load, %.1f after %llu churn ops "
      "(%.2fx); DRAM bytes per live key: %.2f -> %.2f (%.2fx); load factor %.2f -> %.2f; "
      "chain buckets reclaimed: %.0f\n",
      GetParam().scheme.c_str(), format_name(GetParam().format), after_load, at_end,
      static_cast<unsigned long long>(kOps), at_end / after_load, dram_after_load, dram_at_end,
      dram_after_load > 0 ? dram_at_end / dram_after_load : 0.0, lf_after_load, lf_at_end,
      c.count("chain_buckets_reclaimed") ? c["chain_buckets_reclaimed"] : 0.0);
  for (const char* k : {"chain_buckets", "pab_used", "pab_capacity", "pab_free", "filter_rebuilds",
                        "filter_capacity"})
    if (c.count(k)) std::printf("  %s %.0f\n", k, c[k]);
  EXPECT_LE(at_end, 1.5 * after_load);
  // DRAM too, for every scheme (SmartHT's filter was sized for twice the live keys at each
  // churn rebuild before issue 18's fix: 1.97x here; the others hold per-key DRAM that
  // follows the live set, or a fixed amount).
  EXPECT_LE(dram_at_end, 1.5 * dram_after_load);
  // Slots per live key too (format-independent: item blocks do not dilute it).
  EXPECT_GE(lf_at_end * 1.5, lf_after_load);
  EXPECT_EQ(idx->size(), m.size());
  std::string v;
  for (auto& [k, val] : m.items()) {
    ASSERT_TRUE(idx->get(k, &v).ok());
    ASSERT_EQ(v, val);
  }
  std::string report;
  EXPECT_TRUE(idx->check(&report).ok()) << report;
}

// LineHT (probe bound 32, hint sized for LF 0.72): 1.00x fixed, 1.04x variable here; with
// the bound 16 and the hint sized for 0.75 (before 4c5ae5c) its fixed format ended at 1.56x,
// with probe=16 alone at 1.30x (docs/schemes/lineht.md, "Space under churn").
INSTANTIATE_TEST_SUITE_P(
    Schemes, SpaceUnderChurn,
    ::testing::Values(ChurnCase{"smartht", Format::kFixed}, ChurnCase{"smartht", Format::kVariable},
                      ChurnCase{"wophi", Format::kFixed}, ChurnCase{"wophi", Format::kVariable},
                      ChurnCase{"turbohash", Format::kFixed},
                      ChurnCase{"turbohash", Format::kVariable}, ChurnCase{"hdnh", Format::kFixed},
                      ChurnCase{"hdnh", Format::kVariable}, ChurnCase{"pmeh", Format::kFixed},
                      ChurnCase{"pmeh", Format::kVariable}, ChurnCase{"lineht", Format::kFixed},
                      ChurnCase{"lineht", Format::kVariable}),
    [](const auto& info) { return info.param.scheme + "_" + format_name(info.param.format); });

}  // namespace
}  // namespace pmhash::testing

namespace pmhash::testing {
namespace {

// A variable-format index of `scheme` with small tables holding keys 0 .. n-1 (version 0).
void open_with_keys(const TempPool& p, const std::string& scheme, uint64_t n,
                    std::unique_ptr<Index>* idx) {
  Options o = small_options(scheme, Format::kVariable);
  o.params = small_params(scheme);
  ASSERT_TRUE(Index::open(p.path, o, idx).ok());
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_TRUE((*idx)->upsert(make_key(i, false), make_value(make_key(i, false), 0, false)).ok());
}

// for_each beside writers that update and delete (variable format: every write retires an
// item): each pair it visits is read while the item cannot be reused, so it is a stored,
// whole pair (a torn one fails value_ok). SmartHT, WOPHI and PMEH called the callback
// outside any epoch guard: an item freed meanwhile could be reused and read half-written
// (raw pool bytes, seen from Python's items()).
class ForEachBesideWriters : public ::testing::TestWithParam<std::string> {};

TEST_P(ForEachBesideWriters, VisitsOnlyWholeStoredPairs) {
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_NO_FATAL_FAILURE(open_with_keys(p, GetParam(), 64, &idx));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t)
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (uint32_t version = 1; !stop.load(); ++version) {
        std::string k = make_key(rng() % 64, false);
        if (rng() % 4 == 0) {
          (void)idx->remove(k);
        } else {
          (void)idx->upsert(k, make_value(k, version, false));
        }
        writes.fetch_add(1, std::memory_order_relaxed);
      }
    });
  struct Seen {
    uint64_t pairs = 0, bad = 0;
  } seen;
  // Until the writers have replaced the items many times over (a count, not a time).
  for (int round = 0; round < 300 || writes.load() < 200000; ++round)
    idx->for_each(
        [](void* c, std::string_view k, std::string_view v) {
          auto* s = static_cast<Seen*>(c);
          s->pairs++;
          if (!value_ok(k, v, false)) s->bad++;
        },
        &seen);
  stop = true;
  for (auto& w : writers) w.join();
  EXPECT_GT(seen.pairs, 0u);
  EXPECT_EQ(seen.bad, 0u) << "of " << seen.pairs << " pairs visited";
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, ForEachBesideWriters, ::testing::ValuesIn(schemes()),
                         [](const auto& info) { return info.param; });

// Index::for_each copies a piece's pairs before calling back. A piece of HDNH, LineHT or
// TurboHash is at most kPieceBuckets buckets, not a shard: one shard may hold the whole table
// (helper-37 measured +313 MB of copies for 10K 32 KiB values under TurboHash with 1 shard).
// The pieces still cover every item once in a quiet index.
class ForEachPieces : public ::testing::TestWithParam<std::string> {};

TEST_P(ForEachPieces, AreAFewBucketsAndCoverEveryItemOnce) {
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_NO_FATAL_FAILURE(open_with_keys(p, GetParam(), 20000, &idx));
  uint64_t in_piece = 0, largest = 0, visits = 0;
  std::set<uint64_t> seen;
  bool in_pieces = idx->impl()->scheme->for_each_in_pieces(
      [&](const common::Slot& s) {
        ++in_piece;
        ++visits;
        seen.insert(s.value);  // the item's offset: one per key
      },
      [&] {
        largest = std::max(largest, in_piece);
        in_piece = 0;
      });
  ASSERT_TRUE(in_pieces);
  EXPECT_EQ(seen.size(), 20000u);
  EXPECT_EQ(visits, 20000u);
  EXPECT_LE(largest, kPieceBuckets * 16) << "items in one piece (16: the most slots a bucket has)";
}

INSTANTIATE_TEST_SUITE_P(BucketPieces, ForEachPieces,
                         ::testing::Values("hdnh", "lineht", "turbohash"),
                         [](const auto& info) { return info.param; });

// A for_each callback that waits for another thread's writes. In the variable format every
// update retires an item; once pm::Epochs::kBacklog of them wait, the writing thread frees
// them itself after a grace period (settle), which waits for every read-side section. A
// callback running inside one waited for that write forever (index.hpp's former caveat);
// every scheme now copies a piece's pairs inside it and calls back outside.
class ForEachCallbackWaitingForWrites : public ::testing::TestWithParam<std::string> {};

TEST_P(ForEachCallbackWaitingForWrites, DoesNotDeadlock) {
  TempPool p;
  std::unique_ptr<Index> idx;
  ASSERT_NO_FATAL_FAILURE(open_with_keys(p, GetParam(), 8, &idx));
  struct Ctx {
    Index* idx = nullptr;
    std::thread writer;
    std::atomic<bool> done{false};
    bool timed_out = false;
    uint64_t pairs = 0;
  } c;
  c.idx = idx.get();
  idx->for_each(
      [](void* ctx, std::string_view, std::string_view) {
        auto* c = static_cast<Ctx*>(ctx);
        if (c->pairs++ > 0) return;
        c->writer = std::thread([c] {  // updates of one key: each retires an item
          std::string k = make_key(0, false);
          for (uint32_t v = 1; v <= 2 * pm::Epochs::kBacklog; ++v)
            EXPECT_TRUE(c->idx->upsert(k, make_value(k, v, false)).ok());
          c->done = true;
        });
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!c->done && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        c->timed_out = !c->done;  // returning ends the section: the writer goes on
      },
      &c);
  if (c.writer.joinable()) c.writer.join();
  EXPECT_EQ(c.pairs, 8u);
  EXPECT_FALSE(c.timed_out) << "the writes waited for the for_each callback's read-side section";
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, ForEachCallbackWaitingForWrites,
                         ::testing::ValuesIn(schemes()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pmhash::testing
