// The 8-thread mixed workload of the SmartHT and WOPHI tests, checked against per-key models.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {

// 8 threads (more than the cores; SmartHT and WOPHI tests): writers and deleters on keys of their
// own (so a per-key model is exact), readers checking every value they see, and stats() callers.
inline void mixed_workload(Index& idx, bool fixed, int ops_per_mutator,
                           const std::function<bool(Stats&)>& stats_ok) {
  const int mutators = 5, readers = 2, statters = 1, keys_per = 1500;
  const uint64_t nkeys = uint64_t(mutators) * keys_per;
  std::vector<Model> models(mutators);
  std::atomic<int> running{mutators}, mismatches{0}, bad_reads{0}, bad_stats{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < mutators; ++t)
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      Model& m = models[t];
      bool deleter = t >= 3;  // threads 3 and 4 mostly delete
      for (int op = 0; op < ops_per_mutator; ++op) {
        std::string k = make_key(uint64_t(rng() % keys_per) * mutators + t, fixed);
        std::string v = make_value(k, uint32_t(op), fixed);
        unsigned r = rng() % 100;
        Code got, want;
        if (r < (deleter ? 40u : 45u)) {
          got = idx.insert(k, v).code(), want = m.insert(k, v);
        } else if (r < (deleter ? 45u : 65u)) {
          got = idx.upsert(k, v).code(), want = m.upsert(k, v);
        } else if (r < (deleter ? 50u : 85u)) {
          got = idx.update(k, v).code(), want = m.update(k, v);
        } else {
          got = idx.remove(k).code(), want = m.remove(k);
        }
        if (got != want) mismatches++;
      }
      running--;
    });
  for (int t = 0; t < readers; ++t)
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::string v;
      while (running.load() > 0) {
        std::string k = make_key(rng() % nkeys, fixed);
        Status s = idx.get(k, &v);
        if (s.ok() ? !value_ok(k, v, fixed) : s.code() != Code::kNotFound) bad_reads++;
      }
    });
  for (int t = 0; t < statters; ++t)
    ts.emplace_back([&] {
      while (running.load() > 0) {
        Stats st = idx.stats();
        if (st.size > nkeys || !stats_ok(st)) bad_stats++;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(mismatches.load(), 0) << "a result differed from the per-key model";
  EXPECT_EQ(bad_reads.load(), 0);
  EXPECT_EQ(bad_stats.load(), 0);
  uint64_t total = 0;
  std::string v;
  for (auto& m : models) {
    total += m.size();
    for (auto& [k, val] : m.items()) {
      ASSERT_TRUE(idx.get(k, &v).ok());
      ASSERT_EQ(v, val);
    }
  }
  for (uint64_t i = 0; i < nkeys; ++i) {
    std::string k = make_key(i, fixed);
    if (!models[i % mutators].items().count(k)) {
      ASSERT_FALSE(idx.get(k, &v).ok());
    }
  }
  EXPECT_EQ(idx.size(), total);
  std::string report;
  EXPECT_TRUE(idx.impl()->check(&report)) << report;
}

struct MixCase {
  const char* name;
  std::map<std::string, std::string> params;
};
inline void PrintTo(const MixCase& c, std::ostream* os) {  // readable names in ctest -N
  *os << c.name;
}

}  // namespace pmhash::testing
