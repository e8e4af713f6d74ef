// The benchmark driver on tiny sizes: its counts must add up.
#ifdef PMHASH_HAVE_BENCH
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_set>

#include "limit.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

std::map<std::string, bench::Row> by_workload(const std::vector<bench::Row>& rows) {
  std::map<std::string, bench::Row> m;
  for (auto& r : rows) m[r.tags.at("workload")] = r;
  return m;
}

TEST(Bench, CountsAddUpForEveryWorkload) {
  for (std::string scheme : schemes()) {
    for (Format f : {Format::kFixed, Format::kVariable}) {
      bench::RunConfig c;
      c.scheme = scheme;
      c.format = f;
      c.key_size = 16;
      c.value_size = 15;
      c.threads = 2;
      c.keys = 3000;
      c.ops = 2000;
      c.pool_size = 256u << 20;
      c.progress = false;
      c.workloads = {"read",  "negread", "read-batch", "negread-batch", "update", "insert",
                     "mixed", "ycsb-a",  "ycsb-b",     "ycsb-c",        "ycsb-f", "delete"};
      std::vector<bench::Row> rows;
      std::string err;
      ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
      EXPECT_TRUE(bench::count_violations(rows).empty());
      auto w = by_workload(rows);
      EXPECT_EQ(w["load"].values["succeeded"], 3000);  // loaded keys all inserted
      EXPECT_EQ(w["read"].values["succeeded"], 2000);  // and all found
      EXPECT_EQ(w["negread"].values["succeeded"], 0);  // negative reads never succeed
      EXPECT_EQ(w["negread"].values["failed"], 2000);
      EXPECT_EQ(w["read-batch"].values["succeeded"], 2000);  // Index::get_many, 16 at a time
      EXPECT_EQ(w["negread-batch"].values["failed"], 2000);
      EXPECT_EQ(w["read-batch"].values["batch"], 16);
      EXPECT_FALSE(w["read-batch"].values.count("p50_ns")) << "a batch row has no latencies";
      EXPECT_EQ(w["delete"].values["succeeded"], 2000);
      for (auto& [name, r] : w)
        if (r.values.count("ops")) {
          EXPECT_EQ(r.values["ops"], r.values["succeeded"] + r.values["failed"]) << name;
        }
      EXPECT_GT(w["load"].values["flushes_per_op"], 0);
      EXPECT_EQ(w["recover-crash"].values["keys_intact"], 1);
      EXPECT_EQ(w["recover-clean"].values["keys_intact"], 1);
      // TurboHash rows give the paper's load factor too: 13 of 14 slots per bucket count.
      auto& load = w["load"].values;
      if (scheme == "turbohash") {
        EXPECT_NEAR(load["load_factor_paper"], load["load_factor"] * 14 / 13, 1e-9);
      } else {
        EXPECT_FALSE(load.count("load_factor_paper")) << scheme;
      }
    }
  }
}

// The churn workload: 11 rows (after the load, then 10 steps of N operations), every
// operation succeeds (deletes hit live keys, inserts new ones), the live set stays within
// 1% of N, and each row carries the space figures.
TEST(Bench, ChurnKeepsTheLiveSetAndReportsSpaceOverTime) {
  bench::RunConfig c;
  c.scheme = "smartht";
  c.threads = 2;
  c.keys = 2000;
  c.capacity_hint = 2000;
  c.pool_size = 64u << 20;
  c.progress = false;
  c.recovery = false;
  c.workloads = {"churn"};
  std::vector<bench::Row> rows;
  std::string err;
  ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
  EXPECT_TRUE(bench::count_violations(rows).empty());
  auto w = by_workload(rows);
  for (int step = 0; step <= 10; ++step) {
    std::string name = "churn-" + std::to_string(step);
    ASSERT_TRUE(w.count(name)) << name;
    bench::Row& r = w[name];
    EXPECT_EQ(r.values["churn_ops"], 2000.0 * step) << name;
    EXPECT_NEAR(r.values["size"], 2000, 2 * 20) << name;  // each thread within 1%
    EXPECT_GT(r.values["pm_bytes_per_key"], 0) << name;
    EXPECT_GT(r.values["dram_bytes_per_key"], 0) << name;
    EXPECT_GT(r.values["load_factor"], 0) << name;
    if (step > 0) {
      EXPECT_EQ(r.values["failed"], 0) << name;
      EXPECT_GT(r.values["pm_vs_load"], 0) << name;
    }
  }
}

// The reload workload (TurboHash Figs. 11/12): every delete and reinsert succeeds, the
// size is back to N, and with the same-size rehash off the deleted slots stay and negative
// reads probe further after the reload than before; with it on, shards were rehashed.
TEST(Bench, ReloadReportsProbeDistancesWithAndWithoutGarbageCollection) {
  std::map<bool, std::map<std::string, bench::Row>> by_gc;
  for (bool gc : {true, false}) {
    bench::RunConfig c;
    c.scheme = "turbohash";
    c.threads = 2;
    c.keys = 6000;
    c.ops = 4000;
    c.pool_size = 64u << 20;
    c.progress = false;
    c.recovery = false;
    c.params = {{"shards", "16"}, {"buckets", "32"}, {"gc", gc ? "on" : "off"}};
    c.workloads = {"reload"};
    std::vector<bench::Row> rows;
    std::string err;
    ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
    EXPECT_TRUE(bench::count_violations(rows).empty());
    by_gc[gc] = by_workload(rows);
    for (const char* name : {"reload-read", "reload-negread", "reload-delete", "reload-insert",
                             "reload-read-after", "reload-negread-after"})
      ASSERT_TRUE(by_gc[gc].count(name)) << name;
    EXPECT_EQ(by_gc[gc]["reload-delete"].values["failed"], 0);
    EXPECT_EQ(by_gc[gc]["reload-insert"].values["failed"], 0);
    EXPECT_EQ(by_gc[gc]["reload-negread-after"].values["size"], 6000);
  }
  auto& off = by_gc[false];
  EXPECT_GT(off["reload-negread-after"].values["deleted_slots"], 0);
  EXPECT_GT(off["reload-negread-after"].values["neg_probe_distance"],
            off["reload-negread"].values["neg_probe_distance"]);
  EXPECT_EQ(off["reload-negread-after"].values["c.shard_gc_rehashes"], 0);
  EXPECT_GT(by_gc[true]["reload-negread-after"].values["c.shard_gc_rehashes"], 0);
}

TEST(Bench, PersistenceOffFlushesNothingAndDramReferenceWorks) {
  bench::RunConfig c;
  c.threads = 1;
  c.keys = 2000;
  c.ops = 1000;
  c.pool_size = 128u << 20;
  c.progress = false;
  c.workloads = {"read", "negread", "update", "ycsb-d", "delete"};
  std::vector<bench::Row> rows;
  std::string err;
  c.variant = "off";
  ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
  c.variant = "dram";
  ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
  c.variant = "pm";
  ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
  bench::add_ratios(&rows);
  EXPECT_TRUE(bench::count_violations(rows).empty());
  int ratios = 0;
  for (auto& r : rows) {
    if (r.tags["variant"] == "off" && r.tags["workload"] == "load") {
      EXPECT_EQ(r.tags["mode"], "none");
    }
    if (r.values.count("vs_off") && r.values.count("vs_dram")) ++ratios;
  }
  EXPECT_GE(ratios, 4);
}

TEST(Bench, LibcuckooReferenceServesBothFormats) {
  for (Format f : {Format::kFixed, Format::kVariable}) {
    bench::RunConfig c;
    c.variant = "cuckoo";
    c.format = f;
    if (f == Format::kVariable) c.key_size = c.value_size = 16;
    c.threads = 3;  // more threads than cores
    c.keys = 3000;
    c.ops = 2000;
    c.progress = false;
    c.workloads = {"read", "negread", "update", "delete"};
    std::vector<bench::Row> rows;
    std::string err;
    ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
    EXPECT_TRUE(bench::count_violations(rows).empty());
    auto m = by_workload(rows);
    ASSERT_EQ(m.size(), 5u);
    EXPECT_EQ(m["read"].tags["scheme"], "cuckoo");
    EXPECT_EQ(m["read"].values["succeeded"], 2000);
    EXPECT_EQ(m["negread"].values["succeeded"], 0);
    EXPECT_EQ(m["update"].values["succeeded"], 2000);
  }
}

TEST(Bench, LimitRowAndMissEquivalents) {
  bench::RunConfig c;
  c.threads = 2;
  c.keys = 2000;
  c.ops = 1000;
  c.pool_size = 16u << 20;
  c.progress = false;
  c.limit = true;
  c.workloads = {"read", "negread"};
  std::vector<bench::Row> rows;
  std::string err;
  ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
  auto m = by_workload(rows);
  ASSERT_TRUE(m.count("limit"));
  double ns = m["limit"].values["ns_per_miss"];
  EXPECT_GT(ns, 0);
  EXPECT_EQ(m["limit"].values["limit_bytes"], 16u << 20);
  EXPECT_GE(m["limit"].values["page_bytes"], 4096);
  EXPECT_GE(m["read"].values["page_bytes"], 4096);  // the pool mapping's page size
  for (const char* w : {"read", "negread"}) {
    auto& r = m[w].values;
    ASSERT_TRUE(r.count("miss_equiv")) << w;
    EXPECT_DOUBLE_EQ(r["miss_equiv"], 2 * r["seconds"] * 1e9 / r["ops"] / ns) << w;
  }
}

TEST(Bench, LoadFactorSweepTimesDeletesAtEachStep) {
  bench::RunConfig c;
  c.scheme = "wophi";
  c.threads = 2;
  c.keys = 0;
  c.ops = 20 * 300;  // 300 keys per step: every key of a step deleted and inserted again
  c.progress = false;
  c.recovery = false;
  c.sweep_deletes = true;
  c.workloads = {"lfsweep"};
  std::vector<bench::Row> rows;
  std::string err;
  ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
  EXPECT_TRUE(bench::count_violations(rows).empty());
  int deletes = 0, reinserts = 0;
  for (auto& r : rows) {
    if (r.tags["workload"] == "lfsweep-delete") {
      ++deletes;
      EXPECT_EQ(r.values["succeeded"], 300);  // each victim existed: deleted exactly once
    }
    if (r.tags["workload"] == "lfsweep-reinsert") {
      ++reinserts;
      EXPECT_EQ(r.values["succeeded"], 300);
      EXPECT_EQ(r.values["size"], 300.0 * reinserts);  // the load factor goes on growing
    }
  }
  EXPECT_EQ(deletes, 20);
  EXPECT_EQ(reinserts, 20);
}

TEST(Bench, PointerChaseIsOneCycleThroughEveryLine) {
  for (uint64_t lines : {2ull, 3ull, 1000ull}) {
    std::vector<uint64_t> buf(lines * 8);
    bench::link_cycle(buf.data(), lines, 7);
    std::set<uint64_t> seen;
    uint64_t at = 0;
    for (uint64_t i = 0; i < lines; ++i) {
      seen.insert(at);
      at = buf[at * 8];
    }
    EXPECT_EQ(at, 0u) << lines;  // back at the start after exactly `lines` steps
    EXPECT_EQ(seen.size(), lines);
  }
}

TEST(Bench, MediansAndDistributions) {
  std::vector<std::vector<bench::Row>> reps(3);
  for (int i = 0; i < 3; ++i) {
    bench::Row r;
    r.values["mops"] = i == 1 ? 10 : i;  // 0, 10, 2 -> median 2
    reps[i].push_back(r);
  }
  auto m = bench::median_rows(reps);
  EXPECT_EQ(m[0].values["mops"], 2);
  EXPECT_EQ(m[0].values["mops_min"], 0);
  EXPECT_EQ(m[0].values["mops_max"], 10);
  // Zipfian is skewed: the hottest id takes far more than a uniform share.
  bench::DistSpec z;
  ASSERT_TRUE(bench::DistSpec::parse("zipfian:0.99", &z));
  bench::KeyChooser ch(z, 10000, 1);
  std::map<uint64_t, int> hits;
  for (int i = 0; i < 100000; ++i) hits[ch.next(10000)]++;
  int top = 0;
  for (auto& [k, n] : hits) top = std::max(top, n);
  EXPECT_GT(top, 100000 / 10000 * 50);
  bench::DistSpec bad;
  EXPECT_FALSE(bench::DistSpec::parse("selfsimilar:1.5", &bad));
  EXPECT_FALSE(bench::DistSpec::parse("gaussian", &bad));
}

// Percentiles only where the point has enough samples (100 past the percentile): p99.99 from
// 10^6 samples (every 16th operation is timed); medians carry every measured value's spread.
TEST(Bench, PercentilesNeedEnoughSamplesAndRepeatsReportSpread) {
  bench::RunConfig c;
  c.variant = "dram";
  c.threads = 1;
  c.keys = 1000;
  c.ops = 16'000'000;  // exactly 10^6 samples
  c.progress = false;
  c.recovery = false;
  c.workloads = {"read"};
  std::vector<bench::Row> rows;
  std::string err;
  ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
  auto w = by_workload(rows);
  EXPECT_EQ(w["read"].values["latency_samples"], 1e6);
  EXPECT_TRUE(w["read"].values.count("p9999_ns"));
  EXPECT_EQ(w["load"].values["latency_samples"], 1000 / 16 + 1);
  EXPECT_FALSE(w["load"].values.count("p9999_ns"));  // 63 samples: no p99.99, no p99.9
  EXPECT_FALSE(w["load"].values.count("p999_ns"));
  EXPECT_TRUE(w["load"].values.count("p50_ns"));
  std::vector<std::vector<bench::Row>> reps(3);
  for (int i = 0; i < 3; ++i) {
    bench::Row r;
    r.values["p99_ns"] = 100 + i;
    r.values["threads"] = 2;
    reps[i].push_back(r);
  }
  auto m = bench::median_rows(reps);
  EXPECT_EQ(m[0].values["p99_ns_min"], 100);
  EXPECT_EQ(m[0].values["p99_ns_max"], 102);
  EXPECT_FALSE(m[0].values.count("threads_min"));  // a setting, not a measurement
}

// Repeats (seeds 1, 2, ...) measure different key sets; seed 1 keeps the historical keys.
TEST(Bench, SeedsPickDifferentKeySets) {
  bench::KeySpace s1(true, 8, 8, false, 0), s2(true, 8, 8, false, 12345), seq(true, 8, 8, true, 7);
  std::string a, b, q;
  s1.key(5, &a);
  s2.key(5, &b);
  seq.key(5, &q);
  uint64_t ka, kq;
  std::memcpy(&ka, a.data(), 8);
  std::memcpy(&kq, q.data(), 8);
  EXPECT_EQ(ka, bench::scramble(5));
  EXPECT_NE(a, b);
  EXPECT_EQ(kq, 5u);  // sequential keys are the ids, whatever the seed
}

// Variable keys of every allowed size (8 bytes and more) are distinct for every id, loaded
// and absent, scrambled or sequential. Keys shorter than 16 bytes were that many hex digits:
// 8 of them collided ~20 times over these ids, and 15 sequential ones 16 ids at a time.
TEST(Bench, VariableKeysAreDistinctFromEightBytesOn) {
  for (bool sequential : {false, true})
    for (size_t size : {8, 12, 15, 16, 17}) {
      SCOPED_TRACE("key size " + std::to_string(size) + (sequential ? " sequential" : ""));
      bench::KeySpace ks(false, size, 15, sequential, 99);
      std::unordered_set<std::string> seen;
      std::string k;
      const uint64_t n = 200'000;
      seen.reserve(2 * n);
      for (uint64_t i = 0; i < n; ++i) {
        ks.key(i, &k);
        ASSERT_EQ(k.size(), size);
        seen.insert(k);
        ks.key(bench::kAbsent + i, &k);
        seen.insert(k);
      }
      EXPECT_EQ(seen.size(), 2 * n);
    }
}

// --- Every workload draws its keys from the distribution it is labelled with ---------------
// A traced run on the DRAM reference (1 thread, keys = ids): the ids each operation touched.
struct Op {
  char op;
  uint64_t id;
};
std::vector<Op> traced(const std::string& dist, std::vector<std::string> workloads, uint64_t keys,
                       uint64_t ops, std::string* err = nullptr) {
  bench::RunConfig c;
  c.variant = "dram";
  c.threads = 1;
  c.keys = keys;
  c.ops = ops;
  c.sequential_keys = true;  // key bytes are the id
  c.progress = false;
  c.pin = false;
  c.recovery = false;
  c.workloads = std::move(workloads);
  EXPECT_TRUE(bench::DistSpec::parse(dist, &c.dist)) << dist;
  std::vector<Op> out;
  c.on_op = [&](char op, const std::string& k) {
    uint64_t id;
    std::memcpy(&id, k.data(), 8);
    out.push_back({op, id});
  };
  std::vector<bench::Row> rows;
  std::string e;
  bool ok = bench::run(c, &rows, &e);
  if (err) {
    *err = ok ? "" : e;
  } else {
    EXPECT_TRUE(ok) << e;
  }
  return out;
}

// Draws after the load (the first `keys` operations), of the given kinds.
std::vector<uint64_t> draws(const std::vector<Op>& ops, uint64_t keys, const std::string& kinds) {
  std::vector<uint64_t> v;
  for (size_t i = keys; i < ops.size(); ++i)
    if (kinds.find(ops[i].op) != std::string::npos) v.push_back(ops[i].id);
  return v;
}

struct Shape {
  double top = 0;          // share of draws on the most drawn id
  double top20 = 0;        // share of draws on the most drawn 20% of the `space` ids
  double max_vs_mean = 0;  // most drawn id's count / the mean count over `space`
};
Shape shape(const std::vector<uint64_t>& ids, uint64_t space) {
  std::map<uint64_t, uint64_t> n;
  for (uint64_t id : ids) n[id]++;
  std::vector<uint64_t> c;
  for (auto& [id, k] : n) c.push_back(k);
  std::sort(c.rbegin(), c.rend());
  Shape s;
  double total = double(ids.size());
  s.top = c.empty() ? 0 : double(c[0]) / total;
  uint64_t sum = 0;
  for (size_t i = 0; i < c.size() && i < space / 5; ++i) sum += c[i];
  s.top20 = double(sum) / total;
  s.max_vs_mean = c.empty() ? 0 : double(c[0]) / (total / double(space));
  return s;
}

constexpr uint64_t kKeys = 2000, kOps = 200000;  // 100 draws per key on average

// Uniform is flat, zipfian 0.99 puts ~1/zeta(n) of the draws on its top id, self-similar 0.2
// puts ~80% on 20% of the ids. Fixed seeds: the bounds are this seed's results with margin.
void expect_shapes(const std::string& what, const Shape& uni, const Shape& zipf,
                   const Shape& self) {
  EXPECT_LT(uni.max_vs_mean, 1.5) << what;  // 100 expected per id
  EXPECT_LT(uni.top20, 0.25) << what;
  EXPECT_GT(zipf.top, 0.05) << what;  // 1 / zeta(2000, 0.99) = 0.12
  EXPECT_GT(zipf.top, 50 * uni.top) << what;
  EXPECT_NEAR(self.top20, 0.80, 0.05) << what;
}

TEST(BenchDist, ReadsUpdatesAndYcsbMixesDrawFromTheirDistribution) {
  for (std::string w :
       {"read", "read-batch", "update", "mixed", "ycsb-a", "ycsb-b", "ycsb-c", "ycsb-f"}) {
    auto sh = [&](const std::string& d) {
      // Loaded ids only: mixed also inserts new keys ('i'), which are not drawn.
      return shape(draws(traced(d, {w}, kKeys, kOps), kKeys, "gu"), kKeys);
    };
    expect_shapes(w, sh("uniform"), sh("zipfian:0.99"), sh("selfsimilar:0.2"));
  }
}

TEST(BenchDist, NegativeReadsDrawTheDistributionOverAbsentKeys) {
  for (std::string w : {"negread", "negread-batch"}) {
    std::map<std::string, Shape> s;
    for (std::string d : {"uniform", "zipfian:0.99", "selfsimilar:0.2"}) {
      auto ids = draws(traced(d, {w}, kKeys, kOps), kKeys, "g");
      ASSERT_EQ(ids.size(), kOps) << w;  // (kOps is a multiple of the threads' batches)
      for (uint64_t id : ids) ASSERT_GE(id, kKeys) << d;  // never a loaded key
      s[d] = shape(ids, kKeys);                           // the absent space is as large
    }
    expect_shapes(w, s["uniform"], s["zipfian:0.99"], s["selfsimilar:0.2"]);
  }
}

// Load and delete touch every key once; the distribution is their order: the ids a read of
// the same run draws most often come first (successive sampling without replacement).
struct OrderShape {
  double top_pos = 0;    // position of the most read id in the order, as a fraction
  double hot_first = 0;  // share of the most read 20% of ids among the first 20% of the order
};
OrderShape order_shape(const std::vector<uint64_t>& order, const std::vector<uint64_t>& reads,
                       uint64_t n) {
  std::map<uint64_t, uint64_t> cnt;
  for (uint64_t id : reads) cnt[id]++;
  std::vector<std::pair<uint64_t, uint64_t>> by;  // (count, id)
  for (auto& [id, k] : cnt) by.push_back({k, id});
  std::sort(by.rbegin(), by.rend());
  std::set<uint64_t> hot;
  for (size_t i = 0; i < by.size() && i < n / 5; ++i) hot.insert(by[i].second);
  OrderShape s;
  size_t pos = std::find(order.begin(), order.end(), by[0].second) - order.begin();
  s.top_pos = double(pos) / double(n);
  size_t h = 0;
  for (size_t i = 0; i < n / 5 && i < order.size(); ++i) h += hot.count(order[i]);
  s.hot_first = double(h) / double(n / 5);
  return s;
}

// A batch row looks up exactly the keys it counts: a thread's last batch is what is left of
// its share (a batch larger than the share looked up 4x the counted keys: helper-48).
TEST(Bench, ABatchRowLooksUpExactlyTheOperationsItCounts) {
  for (uint32_t batch : {1u, 16u, 4096u}) {
    bench::RunConfig c;
    c.variant = "dram";
    c.threads = 2;
    c.keys = 1000;
    c.ops = 5001;
    c.batch = batch;
    c.progress = false;
    c.pin = false;
    c.recovery = false;
    c.workloads = {"read-batch", "negread-batch"};
    std::atomic<uint64_t> gets{0};
    c.on_op = [&](char op, const std::string&) { gets += op == 'g'; };
    std::vector<bench::Row> rows;
    std::string err;
    ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
    EXPECT_EQ(gets.load(), 2 * 5001u) << "batch " << batch;
    auto w = by_workload(rows);
    EXPECT_EQ(w["read-batch"].values["succeeded"], 5001) << "batch " << batch;
    EXPECT_EQ(w["negread-batch"].values["failed"], 5001) << "batch " << batch;
  }
}

TEST(BenchDist, LoadAndDeleteOrderFollowTheDistribution) {
  std::map<std::string, OrderShape> load, del;
  for (std::string d : {"uniform", "zipfian:0.99", "selfsimilar:0.2"}) {
    auto ops = traced(d, {"read", "delete"}, kKeys, kOps);
    std::vector<uint64_t> loaded, reads, deleted;
    for (auto& o : ops) (o.op == 'i' ? loaded : o.op == 'g' ? reads : deleted).push_back(o.id);
    ASSERT_EQ(loaded.size(), kKeys) << d;
    ASSERT_EQ(deleted.size(), kKeys) << d;  // each key once: ops > keys deletes them all
    ASSERT_EQ(std::set<uint64_t>(loaded.begin(), loaded.end()).size(), kKeys) << d;
    ASSERT_EQ(std::set<uint64_t>(deleted.begin(), deleted.end()).size(), kKeys) << d;
    load[d] = order_shape(loaded, reads, kKeys);
    del[d] = order_shape(deleted, reads, kKeys);
  }
  for (auto* m : {&load, &del}) {
    const char* what = m == &load ? "load" : "delete";
    EXPECT_NEAR((*m)["uniform"].hot_first, 0.2, 0.06) << what;  // order unrelated to heat
    EXPECT_GT((*m)["uniform"].top_pos, 0.05) << what;
    EXPECT_LT((*m)["zipfian:0.99"].top_pos, 0.05) << what;  // the hottest id comes early
    EXPECT_GT((*m)["selfsimilar:0.2"].hot_first, 0.4) << what;
  }
}

// Insert (new ids after the loaded ones) is an order too: each new id once, the hot ranks of
// the distribution over the inserted ids first (WOPHI Fig. 7's YCSB INSERT dataset).
TEST(BenchDist, InsertOrderFollowsTheDistribution) {
  constexpr uint64_t kNew = 2000;
  std::map<std::string, OrderShape> s;
  for (std::string d : {"uniform", "zipfian:0.99", "selfsimilar:0.2"}) {
    auto ops = traced(d, {"insert"}, kKeys, kNew);
    std::vector<uint64_t> order;  // the inserted ids, as offsets from the first new id
    for (size_t i = kKeys; i < ops.size(); ++i) {
      ASSERT_EQ(ops[i].op, 'i') << d;
      ASSERT_GE(ops[i].id, kKeys) << d;  // never a loaded id
      order.push_back(ops[i].id - kKeys);
    }
    ASSERT_EQ(order.size(), kNew) << d;
    ASSERT_EQ(std::set<uint64_t>(order.begin(), order.end()).size(), kNew) << d;  // each once
    // The distribution's own heat over the new ids: rank r is id RankMap(kNew).id(r).
    bench::RankMap map(kNew);
    std::vector<uint64_t> heat;  // "reads", hottest rank drawn most
    for (uint64_t r = 0; r < kNew / 5; ++r)
      for (uint64_t k = 0; k < kNew / 5 - r; ++k) heat.push_back(map.id(r));
    s[d] = order_shape(order, heat, kNew);
  }
  EXPECT_NEAR(s["uniform"].hot_first, 0.2, 0.06);  // id order: unrelated to the ranks
  EXPECT_GT(s["uniform"].top_pos, 0.05);
  EXPECT_LT(s["zipfian:0.99"].top_pos, 0.05);  // the hottest rank is inserted early
  EXPECT_GT(s["zipfian:0.99"].hot_first, 0.4);
  EXPECT_GT(s["selfsimilar:0.2"].hot_first, 0.4);
}

// --routed (PMEH Fig. 14): every operation is issued by the worker owning its key's
// partition (the owner from a second index with the same partitioning; concurrency=partition
// also refuses a foreign write, so every op must succeed), the two workers own different
// partitions, and together they issue the draws of the labelled distribution. With =help
// the same draws are issued (by either worker); a partition without a worker is an error.
struct RoutedOp {
  std::thread::id thread;
  char op;
  uint64_t id;
  std::string key;
};
std::vector<RoutedOp> routed_trace(const std::string& dist, bench::RunConfig::Routing how,
                                   int zone_threads, std::vector<bench::Row>* rows,
                                   std::string* err) {
  bench::RunConfig c;
  c.scheme = "pmeh";
  c.threads = 2;
  c.keys = kKeys;
  c.ops = kOps;
  c.sequential_keys = true;
  c.progress = false;
  c.pin = false;
  c.recovery = false;
  c.routed = how;
  c.params = {{"zone_threads", std::to_string(zone_threads)}, {"concurrency", "partition"}};
  if (how == bench::RunConfig::Routing::kHelp) c.params["concurrency"] = "opportunistic";
  c.workloads = {"read", "update"};
  EXPECT_TRUE(bench::DistSpec::parse(dist, &c.dist));
  std::mutex mu;
  std::vector<RoutedOp> out;
  c.on_op = [&](char op, const std::string& k) {
    uint64_t id;
    std::memcpy(&id, k.data(), 8);
    std::lock_guard<std::mutex> g(mu);
    out.push_back({std::this_thread::get_id(), op, id, k});
  };
  if (!bench::run(c, rows, err)) out.clear();
  return out;
}

TEST(BenchDist, RoutedRunsIssueOnlyOwnedKeysAndHonourTheDistribution) {
  TempPool p;  // the owner oracle: a PMEH index partitioned as the bench's (64 zones, 2)
  std::unique_ptr<Index> oracle;
  Options o = small_options("pmeh", Format::kFixed);
  o.params = {{"zone_threads", "2"}};
  ASSERT_TRUE(Index::open(p.path, o, &oracle).ok());
  std::map<std::string, Shape> s;
  for (std::string d : {"uniform", "zipfian:0.99", "selfsimilar:0.2"}) {
    std::vector<bench::Row> rows;
    std::string err;
    auto ops = routed_trace(d, bench::RunConfig::Routing::kOwn, 2, &rows, &err);
    ASSERT_FALSE(ops.empty()) << d << ": " << err;
    // Per issuing thread and phase (a phase's threads may reuse an earlier one's thread id).
    std::map<std::pair<std::thread::id, char>, std::set<uint32_t>> owners;
    std::vector<uint64_t> reads;
    for (auto& op : ops) {
      owners[{op.thread, op.op}].insert(oracle->owner(op.key));
      if (op.op == 'g') reads.push_back(op.id);
    }
    std::set<uint32_t> all;
    for (auto& [t, os] : owners) {
      EXPECT_EQ(os.size(), 1u) << d << ": a worker issued keys of two partitions";
      all.insert(os.begin(), os.end());
    }
    EXPECT_EQ(all, (std::set<uint32_t>{0, 1})) << d;
    for (auto& r : rows) EXPECT_EQ(r.values["failed"], 0) << d << " " << r.tags["workload"];
    ASSERT_EQ(reads.size(), kOps) << d;
    s[d] = shape(reads, kKeys);
    // Help: the same number of draws, same shape (checked below for zipfian).
    if (d == "zipfian:0.99") {
      auto h = routed_trace(d, bench::RunConfig::Routing::kHelp, 2, &rows, &err);
      std::vector<uint64_t> hr;
      for (auto& op : h)
        if (op.op == 'g') hr.push_back(op.id);
      ASSERT_EQ(hr.size(), kOps) << err;
      std::sort(hr.begin(), hr.end());
      std::sort(reads.begin(), reads.end());
      EXPECT_EQ(hr, reads);  // the same draws (one generator, one seed), whoever issued them
    }
  }
  expect_shapes("routed read", s["uniform"], s["zipfian:0.99"], s["selfsimilar:0.2"]);
  std::vector<bench::Row> rows;
  std::string err;
  EXPECT_TRUE(routed_trace("uniform", bench::RunConfig::Routing::kOwn, 3, &rows, &err).empty());
  EXPECT_NE(err.find("no worker thread owns partition"), std::string::npos) << err;
}

TEST(BenchDist, RefusesWhatItDoesNotHonour) {
  // (dist, workloads, keys): each combination must fail with an error naming the workload.
  struct Case {
    std::string dist, workload;
    uint64_t keys;
  };
  for (const Case& c :
       {Case{"zipfian:0.99", "lfsweep", 0}, Case{"selfsimilar:0.2", "lfsweep", 0},
        Case{"latest", "negread", 100}, Case{"latest", "negread-batch", 100},
        Case{"latest", "delete", 100}, Case{"zipfian:0.99", "reload", 100},
        Case{"zipfian:0.99", "churn", 100}, Case{"selfsimilar:0.2", "churn", 100}}) {
    std::string err;
    auto ops = traced(c.dist, {c.workload}, c.keys, 100, &err);
    EXPECT_NE(err.find("'" + c.workload + "'"), std::string::npos)
        << c.dist << " " << c.workload << ": " << err;
    EXPECT_TRUE(ops.empty()) << "refused before any operation: " << c.dist << " " << c.workload;
  }
  // Latest reads favour the last loaded ids (the load is in id order).
  auto reads = draws(traced("latest", {"read"}, kKeys, kOps), kKeys, "g");
  uint64_t recent = 0;
  for (uint64_t id : reads) recent += id >= kKeys - kKeys / 5;
  EXPECT_GT(double(recent) / double(reads.size()), 0.5);
  // YCSB-D reads draw from latest too, whatever the run's --dist (its inserts add new ids).
  auto dreads = draws(traced("zipfian:0.99", {"ycsb-d"}, kKeys, kOps), kKeys, "g");
  ASSERT_GT(dreads.size(), kOps / 2);
  uint64_t drecent = 0;
  for (uint64_t id : dreads) drecent += id >= kKeys - kKeys / 5;
  EXPECT_GT(double(drecent) / double(dreads.size()), 0.5);
  // YCSB-D names its own distribution (latest) and its row says so in key_dist.
  bench::RunConfig c;
  c.variant = "dram";
  c.keys = 1000;
  c.ops = 1000;
  c.progress = false;
  c.recovery = false;
  c.workloads = {"ycsb-d"};
  ASSERT_TRUE(bench::DistSpec::parse("zipfian:0.99", &c.dist));
  std::vector<bench::Row> rows;
  std::string err;
  ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
  EXPECT_EQ(by_workload(rows)["ycsb-d"].tags["key_dist"], "latest");
  EXPECT_EQ(by_workload(rows)["ycsb-d"].tags["dist"], "zipfian:0.99");  // the run's --dist
  EXPECT_EQ(by_workload(rows)["load"].tags["key_dist"], "zipfian:0.99");
}

// A run that fails after its index is open (here: an unknown workload) removes its pool file.
TEST(Bench, AFailedRunLeavesNoPoolFile) {
  std::string dir = "/dev/shm/pmhash-bench-test-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directory(dir);
  bench::RunConfig c;
  c.pool_dir = dir;
  c.keys = 100;
  c.ops = 100;
  c.pool_size = 64u << 20;
  c.progress = false;
  c.recovery = false;
  c.workloads = {"no-such-workload"};
  std::vector<bench::Row> rows;
  std::string err;
  EXPECT_FALSE(bench::run(c, &rows, &err));
  EXPECT_NE(err.find("no-such-workload"), std::string::npos) << err;
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a pool file was left in " << dir;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pmhash::testing
#endif
