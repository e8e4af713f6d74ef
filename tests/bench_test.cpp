// The benchmark driver on tiny sizes: its counts must add up.
#ifdef PMHASH_HAVE_BENCH
#include <gtest/gtest.h>

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
      c.workloads = {"read",   "negread", "update", "insert", "mixed",
                     "ycsb-a", "ycsb-b",  "ycsb-c", "ycsb-f", "delete"};
      std::vector<bench::Row> rows;
      std::string err;
      ASSERT_TRUE(bench::run(c, &rows, &err)) << err;
      EXPECT_TRUE(bench::count_violations(rows).empty());
      auto w = by_workload(rows);
      EXPECT_EQ(w["load"].values["succeeded"], 3000);  // loaded keys all inserted
      EXPECT_EQ(w["read"].values["succeeded"], 2000);  // and all found
      EXPECT_EQ(w["negread"].values["succeeded"], 0);  // negative reads never succeed
      EXPECT_EQ(w["negread"].values["failed"], 2000);
      EXPECT_EQ(w["delete"].values["succeeded"], 2000);
      for (auto& [name, r] : w)
        if (r.values.count("ops")) {
          EXPECT_EQ(r.values["ops"], r.values["succeeded"] + r.values["failed"]) << name;
        }
      EXPECT_GT(w["load"].values["flushes_per_op"], 0);
      EXPECT_EQ(w["recover-crash"].values["keys_intact"], 1);
      EXPECT_EQ(w["recover-clean"].values["keys_intact"], 1);
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

}  // namespace
}  // namespace pmhash::testing
#endif
