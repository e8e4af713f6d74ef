// An index's life across opens: reopening with other run-time options (after a clean close,
// a dropped index and a SIGKILLed process), check() leaving the pool untouched, and size()
// and for_each() exact as the first calls after a crash.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

using P = std::map<std::string, std::string>;

// Every run-time option a user can change at open (each scheme's parse of ctx.runtime), in
// an order where each step changes something; the sequence returns to the first set.
std::vector<P> runtime_sets(const std::string& scheme) {
  if (scheme == "turbohash") return {{{"simd", "true"}}, {{"simd", "false"}}};
  if (scheme == "smartht") return {{{"filter", "true"}}, {{"filter", "false"}}};
  if (scheme == "lineht")
    return {{{"filter", "on"}, {"prefetch", "on"}}, {{"filter", "off"}, {"prefetch", "off"}}};
  if (scheme == "wophi")
    return {{{"pab_grow", "background"}},
            {{"pab_grow", "inline"}},
            {{"pab", "false"}},
            {{"pab", "true"}, {"pab_grow", "inline"}}};
  if (scheme == "hdnh")
    return {{{"hot_table", "rafl"}, {"sync_write", "inline"}},
            {{"hot_table", "lru"}, {"sync_write", "background"}, {"hot_slots", "8"}},
            {{"hot_table", "off"}, {"ocf", "false"}, {"recovery_threads", "1"}},
            {{"hot_table", "rafl"}, {"sync_write", "background"}, {"hot_slots", "1"}},
            {{"hot_table", "lru"}, {"ocf", "true"}, {"recovery_threads", "4"}}};
  if (scheme == "pmeh")
    return {{{"zone_threads", "4"}, {"opportunistic", "true"}},
            {{"zone_threads", "1"}, {"opportunistic", "false"}},
            {{"zone_threads", "2"}, {"opportunistic", "true"}}};
  return {{}};
}

std::string show(const P& p) {
  std::string s;
  for (auto& [k, v] : p) s += (s.empty() ? "" : ";") + k + "=" + v;
  return s.empty() ? "(defaults)" : s;
}

class LifecycleTest : public ::testing::TestWithParam<SchemeFormat> {
 protected:
  bool fixed() const { return GetParam().format == Format::kFixed; }
  std::string key(uint64_t i) const { return make_key(i, fixed()); }
  // Creation: small tables (resizes) plus the first run-time set. Reopens pass only the
  // run-time options, as a user would; the layout is the one recorded in the pool.
  Options options(const P& runtime, bool create) const {
    Options o = small_options(GetParam().scheme, GetParam().format);
    o.params = create ? small_params(GetParam().scheme) : P{};
    for (auto& [k, v] : runtime) o.params[k] = v;
    return o;
  }

  // Every key of the model with its value, nothing else, size() and check().
  void expect_contents(Index& idx, const Model& m, const std::string& where) {
    EXPECT_EQ(idx.size(), m.size()) << where;
    std::string got;
    uint64_t wrong = 0;
    for (auto& [k, v] : m.items())
      if (!idx.get(k, &got).ok() || got != v) wrong++;
    EXPECT_EQ(wrong, 0u) << where << ": keys missing or with a wrong value";
    std::string report;
    EXPECT_TRUE(idx.impl()->check(&report)) << where << ": " << report;
  }

  void workload(Index& idx, Model& m, uint64_t seed, int ops) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < ops; ++i) {
      uint64_t k = rng() % 800;
      std::string v = make_value(key(k), static_cast<uint32_t>(rng()), fixed());
      int r = static_cast<int>(rng() % 10);
      Code c = r < 6   ? idx.upsert(key(k), v).code()
               : r < 8 ? idx.insert(key(k), v).code()
                       : idx.remove(key(k)).code();
      Code e = r < 6 ? m.upsert(key(k), v) : r < 8 ? m.insert(key(k), v) : m.remove(key(k));
      ASSERT_EQ(c, e) << "op " << i;
    }
  }
};

// Cycles through the run-time sets twice: open with set i, verify, write; the first cycle
// ends every open with a clean close (state saved for a fast reopen, e.g. SmartHT's
// filter), the second drops the index without a clean shutdown (a process crash, so the
// next open recovers). Finally back to the first set.
TEST_P(LifecycleTest, ReopenWithOtherRuntimeOptions) {
  std::vector<P> sets = runtime_sets(GetParam().scheme);
  TempPool p("life");
  Model m;
  const size_t steps = 2 * sets.size();
  for (size_t i = 0; i <= steps; ++i) {
    const P& rt = sets[i % sets.size()];
    bool clean = i < sets.size();
    std::string where = "open " + std::to_string(i) + " with " + show(rt) + " (previous open " +
                        (i == 0             ? "none"
                         : i <= sets.size() ? "closed cleanly"
                                            : "crashed") +
                        ")";
    std::unique_ptr<Index> idx;
    Status s = Index::open(p.path, options(rt, i == 0), &idx);
    ASSERT_TRUE(s.ok()) << where << ": " << s.to_string();
    idx->impl()->scheme->wait_idle();
    expect_contents(*idx, m, where);
    if (i == steps) break;
    ASSERT_NO_FATAL_FAILURE(workload(*idx, m, 100 + i, 3000));
    expect_contents(*idx, m, where + ", after writing");
    if (clean) {
      ASSERT_TRUE(idx->close().ok());
    } else {
      idx->impl()->closed = true;  // no clean shutdown: the next open recovers
    }
  }
}

// A child opens with set i and runs random operations, reporting each acknowledged one
// through a pipe, until SIGKILL; the parent reopens with set i+1 and checks every key.
TEST_P(LifecycleTest, SigkillThenReopenWithOtherRuntimeOptions) {
  std::vector<P> sets = runtime_sets(GetParam().scheme);
  for (size_t round = 0; round < sets.size(); ++round) {
    const P& a = sets[round];
    const P& b = sets[(round + 1) % sets.size()];
    TempPool p("life-kill");
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const uint64_t seed = 500 + round;
    pid_t child = fork();
    if (child == 0) {
      close(fds[0]);
      std::unique_ptr<Index> idx;
      if (!Index::open(p.path, options(a, true), &idx).ok()) _exit(2);
      std::mt19937_64 rng(seed);
      for (uint32_t i = 0;; ++i) {
        uint64_t k = rng() % 1500;
        bool del = rng() % 4 == 0;
        Status s =
            del ? idx->remove(key(k)) : idx->upsert(key(k), make_value(key(k), i + 1, fixed()));
        (void)s;
        if (write(fds[1], &i, sizeof i) != sizeof i) _exit(3);
      }
    }
    close(fds[1]);
    uint32_t i = 0, n = 0;
    while (n < 3000 && read(fds[0], &i, sizeof i) == sizeof i) ++n;
    kill(child, SIGKILL);
    int status;
    waitpid(child, &status, 0);
    while (read(fds[0], &i, sizeof i) == sizeof i) ++n;
    close(fds[0]);
    ASSERT_GT(n, 0u);
    Model m;  // the acknowledged operations; op n was in flight
    std::mt19937_64 rng(seed);
    std::string inflight;
    for (uint32_t j = 0; j <= n; ++j) {
      uint64_t k = rng() % 1500;
      bool del = rng() % 4 == 0;
      if (j == n) {
        inflight = key(k);
        break;
      }
      if (del)
        m.remove(key(k));
      else
        m.upsert(key(k), make_value(key(k), j + 1, fixed()));
    }
    std::string where = "killed with " + show(a) + ", reopened with " + show(b);
    std::unique_ptr<Index> idx;
    Status s = Index::open(p.path, options(b, false), &idx);
    ASSERT_TRUE(s.ok()) << where << ": " << s.to_string();
    EXPECT_TRUE(idx->stats().recovered_from_crash);
    std::string report;
    EXPECT_TRUE(idx->impl()->check(&report)) << where << ": " << report;
    std::string got;
    uint64_t wrong = 0;
    for (auto& [k, v] : m.items())
      if (k != inflight && (!idx->get(k, &got).ok() || got != v)) wrong++;
    EXPECT_EQ(wrong, 0u) << where << ": acknowledged keys lost or wrong";
    uint64_t size = idx->size(), expect = m.size();
    EXPECT_TRUE(size == expect || size + 1 == expect || size == expect + 1)
        << where << ": size " << size << ", model " << expect;
    Model more = m;  // and it keeps working with the new options
    std::string v;
    if (m.get(inflight, &v) == Code::kOk || idx->get(inflight, &got).ok()) {
      ASSERT_TRUE(idx->upsert(inflight, make_value(inflight, 1, fixed())).ok());
      more.upsert(inflight, make_value(inflight, 1, fixed()));
    }
    ASSERT_NO_FATAL_FAILURE(workload(*idx, more, 900 + round, 2000));
    expect_contents(*idx, more, where + ", after writing");
  }
}

// check() is read-only: the pool file's bytes are identical before and after it, on an
// idle index and on one that just recovered from a crash.
TEST_P(LifecycleTest, CheckChangesNothing) {
  for (bool crashed : {false, true}) {
    TempPool p("life-check");
    Model m;
    {
      std::unique_ptr<Index> idx;
      ASSERT_TRUE(Index::open(p.path, options({}, true), &idx).ok());
      ASSERT_NO_FATAL_FAILURE(workload(*idx, m, 7, 4000));
      if (crashed) idx->impl()->closed = true;  // a process crash
    }
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, options({}, false), &idx).ok());
    EXPECT_EQ(idx->stats().recovered_from_crash, crashed);
    idx->impl()->scheme->wait_idle();
    std::vector<char> before = read_file(p.path);
    std::string report;
    EXPECT_TRUE(idx->impl()->check(&report)) << report;
    EXPECT_TRUE(idx->check().ok());
    std::vector<char> after = read_file(p.path);
    ASSERT_EQ(before.size(), after.size());
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < before.size(); ++i)
      if (before[i] != after[i] && diff++ == 0) first = i;
    EXPECT_EQ(diff, 0u) << (crashed ? "after a crash" : "idle") << ": check() changed " << diff
                        << " bytes of the pool, the first at offset " << first;
    expect_contents(*idx, m, crashed ? "after a crash" : "idle");
  }
}

INSTANTIATE_TEST_SUITE_P(All, LifecycleTest, ::testing::ValuesIn(all_scheme_formats()),
                         [](const auto& info) { return param_name(info.param); });

// size() and for_each() as the first calls on a recovered crash image (before check() or
// any operation) equal the acknowledged contents (the in-flight operation either way).
class CrashIntrospectionTest : public ::testing::TestWithParam<SchemeConfig> {};

TEST_P(CrashIntrospectionTest, SizeAndIterationExactRightAfterACrash) {
  CrashConfig cfg;
  cfg.scheme = GetParam().scheme;
  cfg.format = GetParam().format;
  cfg.params = GetParam().params();
  cfg.introspect_first = true;
  cfg.ops = std::getenv("PMHASH_CRASH_LIGHT") ? 80 : 220;
  cfg.seed = 11;
  if (cfg.scheme == "pmeh") cfg.keys = 200;
  cfg.sample_rate = 0.3;  // a seeded third of the fences; the full test visits them all
  cfg.random_images = 1;
  cfg.followup_every = 0;
  cfg.recovery_crash_every = 0;
  if (!GetParam().small()) use_default_tables(&cfg);
  CrashResult r = run_crash_test(cfg);
  std::printf("[%s] crash states opened with size()/for_each() first: %llu, failures: %llu\n",
              param_name(GetParam()).c_str(), static_cast<unsigned long long>(r.states),
              static_cast<unsigned long long>(r.failures));
  for (auto& msg : r.messages) ADD_FAILURE() << msg;
  EXPECT_EQ(r.failures, 0u);
  EXPECT_GT(r.states, 10u);
}

INSTANTIATE_TEST_SUITE_P(All, CrashIntrospectionTest, ::testing::ValuesIn(all_scheme_configs()),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace pmhash::testing
