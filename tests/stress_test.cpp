// Oversubscribed stress: more threads than cores — writers, deleters, readers and stats()/size()
// callers at once — for every scheme with its default options and a matrix of others, with
// random yields and sleeps injected at the persistence primitives (pm::chaos_level).
//
// Every key has one owner thread (a writer or a deleter), which knows the key's exact state.
// Values encode (key, owner, sequence) with a checksum. Each read is checked against the
// key's history:
//   - the value is one written for that key by its owner (checksum, owner, never torn) and
//     by an operation that had started before the read ended;
//   - it is never older than a write or delete acknowledged before the read began;
//   - it is never older than what a read completed before this one began saw (a key a
//     completed read saw stays visible, at that version or later, until a delete starts).
// At the end the contents are compared with the owners' models (get, size, for_each) and
// check() must pass.
//
// PMHASH_STRESS_SOAK=<seconds>: each case runs that long. PMHASH_CRASH_LIGHT=1 (sanitizer
// builds): a shorter run.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "index_impl.hpp"
#include "pm/persist.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

using P = std::map<std::string, std::string>;

// The option matrix: every scheme with its defaults (no params), small tables that resize
// every few hundred inserts, and every run-time knob that changes concurrency behaviour.
struct StressCase {
  const char* scheme;
  const char* name;
  P params;
};
const std::vector<StressCase>& stress_cases() {
  static const P th = {{"shards", "2"}, {"buckets", "1"}, {"scope", "4"}};
  // SmartHT and WOPHI never resize their main buckets (chains, PAB): 64 of them keep scans
  // short while chained buckets and PAB growth happen every few hundred inserts.
  static const P sm = {{"buckets", "64"}, {"stripe", "4"}, {"filter_keys", "16"}};
  static const P wo = {{"buckets", "64"}, {"stripe", "4"}, {"pab_buckets", "2"}};
  static const P hd = {{"segment_bytes", "256"}, {"segments", "1"}};
  static const P lh = {{"shards", "2"}, {"buckets", "2"}, {"probe", "2"}};
  static const P pe = {{"segment_bytes", "2048"}, {"zones", "4"}, {"depth", "2"}};
  auto with = [](P base, const P& more) {
    for (auto& [k, v] : more) base[k] = v;
    return base;
  };
  static const std::vector<StressCase> v = {
      // scheme       name                        params
      {"turbohash", "defaults", {}},
      {"turbohash", "small", th},
      {"turbohash", "small_scalar", with(th, {{"simd", "false"}})},
      {"smartht", "defaults", {}},
      {"smartht", "small_filter", sm},
      {"smartht", "small_nofilter", with(sm, {{"filter", "false"}})},
      {"wophi", "defaults", {}},
      {"wophi", "small_pab_inline", with(wo, {{"pab_grow", "inline"}})},
      {"wophi", "small_pab_background", with(wo, {{"pab_grow", "background"}})},
      {"wophi", "small_nopab", with(wo, {{"pab", "false"}})},
      {"hdnh", "defaults", {}},
      {"hdnh", "small_inline_rafl", with(hd, {{"sync_write", "inline"}, {"hot_table", "rafl"}})},
      {"hdnh", "small_inline_lru", with(hd, {{"sync_write", "inline"}, {"hot_table", "lru"}})},
      {"hdnh", "small_inline_off", with(hd, {{"sync_write", "inline"}, {"hot_table", "off"}})},
      {"hdnh", "small_background_rafl",
       with(hd, {{"sync_write", "background"}, {"hot_table", "rafl"}})},
      {"hdnh", "small_background_lru",
       with(hd, {{"sync_write", "background"}, {"hot_table", "lru"}})},
      {"hdnh", "small_background_off",
       with(hd, {{"sync_write", "background"}, {"hot_table", "off"}})},
      {"hdnh", "small_noocf_hot1", with(hd, {{"ocf", "false"}, {"hot_slots", "1"}})},
      {"lineht", "defaults", {}},
      {"lineht", "small", lh},
      {"lineht", "small_probe8", with(lh, {{"buckets", "1"}, {"probe", "8"}})},
      {"lineht", "small_nofilter", with(lh, {{"filter", "off"}})},
      {"pmeh", "defaults", {}},
      {"pmeh", "zones4_split2", with(pe, {{"split", "2"}})},
      {"pmeh", "zones4_split4", with(pe, {{"split", "4"}})},
      {"pmeh", "zones16_split16", with(pe, {{"split", "16"}, {"zones", "16"}, {"depth", "4"}})},
      {"pmeh", "zones1_split4", with(pe, {{"split", "4"}, {"zones", "1"}, {"depth", "0"}})},
      {"pmeh", "zones4_no_opportunistic",
       with(pe, {{"split", "4"}, {"opportunistic", "false"}, {"zone_threads", "1"}})},
  };
  return v;
}

struct StressParam {
  StressCase c;
  Format format;
};
void PrintTo(const StressParam& p, std::ostream* os) {
  *os << p.c.scheme << " " << p.c.name << " " << format_name(p.format);
}
std::vector<StressParam> stress_params() {
  std::vector<StressParam> v;
  for (auto& c : stress_cases())
    for (Format f : {Format::kFixed, Format::kVariable}) v.push_back({c, f});
  return v;
}

int env_int(const char* name) {
  const char* s = std::getenv(name);
  return s ? std::atoi(s) : 0;
}

// Turns the chaos injection on for a scope.
struct Chaos {
  explicit Chaos(uint32_t level) {
#ifdef PMHASH_CRASH_HOOKS
    pm::chaos_level.store(level);
#else
    (void)level;
#endif
  }
  ~Chaos() {
#ifdef PMHASH_CRASH_HOOKS
    pm::chaos_level.store(0);
#endif
  }
};

// A key's published history, written only by its owner. Sequence numbers are per key and
// grow with every operation the owner starts (writes and deletes).
struct KeyState {
  std::atomic<uint64_t> acked{0};        // (seq << 1) | present, of the last acknowledged op
  std::atomic<uint32_t> started{0};      // seq of the last op started
  std::atomic<uint32_t> del_started{0};  // seq of the last delete started
  std::atomic<uint32_t> seen{0};         // highest seq a completed read returned
  std::atomic<uint32_t> absent_seen{0};  // seq of an unacknowledged delete a read observed
};

constexpr uint32_t kSeqBits = 24;  // value version = owner << 24 | seq

class StressTest : public ::testing::TestWithParam<StressParam> {
 protected:
  bool fixed() const { return GetParam().format == Format::kFixed; }
  std::string key(uint64_t i) const { return make_key(i, fixed()); }
};

TEST_P(StressTest, OversubscribedHistoryCheck) {
  const StressCase& sc = GetParam().c;
  const bool light = env_int("PMHASH_CRASH_LIGHT") > 0;
  const int soak_s = env_int("PMHASH_STRESS_SOAK");
  const int writers = 3, deleters = 2, readers = 3, introspectors = 1;  // 9 threads
  const int owners = writers + deleters;
  const uint64_t per_owner = light ? 200 : 500;
  const int ops = light ? 1500 : 4000;  // per owner (ignored in soak mode)
  const uint64_t nkeys = per_owner * owners;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(soak_s);

  TempPool p("stress");
  Options o = small_options(sc.scheme, GetParam().format);
  o.pool_size = 512u << 20;  // sparse; the defaults need a few MB of tables
  o.params = sc.params;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());

  std::vector<KeyState> ks(nkeys);
  std::vector<Model> models(owners);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> errors{0}, reads{0}, hits{0};
  std::mutex msg_mu;
  std::vector<std::string> msgs;
  auto fail = [&](const std::string& m) {
    errors++;
    std::lock_guard<std::mutex> g(msg_mu);
    if (msgs.size() < 10) msgs.push_back(m);
  };

  // One owner: its own keys, its own model, every result checked. Writers mostly write;
  // deleters churn insert/delete.
  auto owner = [&](int w) {
    Model& m = models[w];
    std::mt19937_64 rng(1000 + w);
    bool deleter = w >= writers;
    std::string got, want;
    for (int i = 0; soak_s > 0 ? std::chrono::steady_clock::now() < deadline : i < ops; ++i) {
      uint64_t k = uint64_t(w) * per_owner + rng() % per_owner;
      KeyState& st = ks[k];
      std::string kk = key(k);
      bool present = m.get(kk, &want) == Code::kOk;
      uint32_t seq = st.started.load() + 1;
      if (seq >= (1u << kSeqBits)) continue;
      int r = static_cast<int>(rng() % 100);
      bool del = present && (deleter ? r < 50 : r < 15);
      Code c, e;
      if (!del && r % 10 == 9) {  // a get by the owner: exactly its model
        c = idx->get(kk, &got).code();
        e = m.get(kk, &want);
        if (c == Code::kOk && e == Code::kOk && got != want)
          fail("owner get returned a wrong value for key " + std::to_string(k));
        if (c != e) fail("owner get: " + std::string(code_name(c)) + ", model " + code_name(e));
        continue;
      }
      st.started.store(seq);
      if (del) {
        st.del_started.store(seq);
        c = idx->remove(kk).code();
        e = m.remove(kk);
        st.acked.store(uint64_t{seq} << 1);
      } else {
        std::string v = make_value(kk, (uint32_t(w) << kSeqBits) | seq, fixed());
        if (!present) {
          c = idx->insert(kk, v).code();
          e = m.insert(kk, v);
        } else if (r % 2) {
          c = idx->update(kk, v).code();
          e = m.update(kk, v);
        } else {
          c = idx->upsert(kk, v).code();
          e = m.upsert(kk, v);
        }
        st.acked.store((uint64_t{seq} << 1) | 1);
      }
      if (c != e)
        fail("owner " + std::to_string(w) + " op " + std::to_string(i) + " on key " +
             std::to_string(k) + ": " + code_name(c) + ", model " + code_name(e));
    }
  };

  // A reader: random keys of every owner, each result checked against the key's history.
  // Reader 0 looks its keys up kBatch at a time through get_many (prefetching ahead), the
  // others one get at a time; the floor of every key of a batch is read before the call.
  struct Before {
    uint32_t floor, absent;
    bool floor_present;
  };
  auto check_read = [&](uint64_t k, const std::string& kk, Before b, const Status& s,
                        const std::string& got) {
    uint32_t started = ks[k].started.load();
    uint32_t del_started = ks[k].del_started.load();
    KeyState& st = ks[k];
    reads++;
    std::string where =
        "key " + std::to_string(k) + " (owner " + std::to_string(k / per_owner) + "): ";
    if (s.code() == Code::kNotFound) {
      if (b.floor_present && del_started <= b.floor)
        fail(where + "not found, but seq " + std::to_string(b.floor) +
             " was acknowledged or seen before the read and no delete started since");
      // Absent past the floor: the read saw a delete after seq `floor` take effect; no
      // later read may return seq `floor` (or older) again.
      if (b.floor_present) {
        uint32_t cur = st.absent_seen.load();
        while (cur < b.floor + 1 && !st.absent_seen.compare_exchange_weak(cur, b.floor + 1)) {
        }
      }
      return;
    }
    if (!s.ok()) return fail(where + "get returned " + s.to_string());
    hits++;
    if (!value_ok(kk, got, fixed())) return fail(where + "torn or foreign value");
    uint32_t ver = 0;
    if (fixed())
      std::memcpy(&ver, got.data(), 4);
    else
      ver = static_cast<uint32_t>(std::strtoul(got.c_str() + 1, nullptr, 10));
    uint32_t who = ver >> kSeqBits, seq = ver & ((1u << kSeqBits) - 1);
    if (who != k / per_owner) fail(where + "value written by another thread");
    if (seq > started) fail(where + "value of a write not yet started");
    if (seq < b.absent)
      fail(where + "seq " + std::to_string(seq) + " came back after a read saw its delete " +
           std::to_string(b.absent));
    if (seq < b.floor)
      fail(where + "stale: seq " + std::to_string(seq) + " < " + std::to_string(b.floor) +
           " acknowledged or seen before the read began");
    uint32_t cur = st.seen.load();
    while (cur < seq && !st.seen.compare_exchange_weak(cur, seq)) {
    }
  };
  auto reader = [&](int r) {
    constexpr size_t kBatch = 12;
    const size_t n = r == 0 ? kBatch : 1;
    std::mt19937_64 rng(2000 + r);
    std::vector<uint64_t> keys(n);
    std::vector<std::string> kks(n), got(n);
    std::vector<std::string_view> views(n);
    std::vector<Status> statuses(n);
    std::vector<Before> before(n);
    while (!done.load()) {
      for (size_t j = 0; j < n; ++j) {
        keys[j] = rng() % nkeys;
        kks[j] = key(keys[j]);
        views[j] = kks[j];
        KeyState& st = ks[keys[j]];
        uint64_t acked = st.acked.load();
        uint32_t seen = st.seen.load();
        // The floor: the last acknowledged op, or a later version a completed read saw.
        before[j] = {static_cast<uint32_t>(acked >> 1), 0, (acked & 1) != 0};
        if (seen > before[j].floor) before[j].floor = seen, before[j].floor_present = true;
        before[j].absent = st.absent_seen.load();
      }
      if (n == 1) {
        statuses[0] = idx->get(views[0], &got[0]);
      } else {
        Status s = idx->get_many(views, got, statuses);
        if (!s.ok()) fail("get_many returned " + s.to_string());
      }
      for (size_t j = 0; j < n; ++j) check_read(keys[j], kks[j], before[j], statuses[j], got[j]);
      if (reads % 4 < n) std::this_thread::yield();  // oversubscribed: let the owners run
    }
  };

  // stats()/size() while everything else runs: never more keys than exist.
  auto introspector = [&] {
    while (!done.load()) {
      uint64_t n = idx->size();
      Stats s = idx->stats();
      if (n > nkeys || s.size > nkeys)
        fail("size() " + std::to_string(n) + " / stats().size " + std::to_string(s.size) +
             " exceeds the " + std::to_string(nkeys) + " keys that exist");
      if (s.capacity_slots == 0) fail("stats().capacity_slots is 0");
      std::this_thread::yield();
    }
  };

  {
    Chaos chaos(8);  // about 1 in 32 primitive calls yields or sleeps
    std::vector<std::thread> ts;
    for (int w = 0; w < owners; ++w) ts.emplace_back(owner, w);
    for (int r = 0; r < readers; ++r) ts.emplace_back(reader, r);
    for (int i = 0; i < introspectors; ++i) ts.emplace_back(introspector);
    for (int w = 0; w < owners; ++w) ts[w].join();
    // The readers may not have run yet on a loaded machine: let them find some keys before
    // they stop (a count, not a time), so that the run always checks reads.
    while (hits.load() < 100 && errors.load() == 0) std::this_thread::yield();
    done = true;
    for (size_t i = owners; i < ts.size(); ++i) ts[i].join();
  }
  for (auto& m : msgs) ADD_FAILURE() << m;
  EXPECT_EQ(errors.load(), 0u);
  EXPECT_GT(hits.load(), 0u);

  // The end state equals the owners' models.
  Model all;
  for (auto& m : models)
    for (auto& [k, v] : m.items()) all.upsert(k, v);
  EXPECT_EQ(idx->size(), all.size());
  std::string got;
  uint64_t wrong = 0;
  for (auto& [k, v] : all.items())
    if (!idx->get(k, &got).ok() || got != v) wrong++;
  EXPECT_EQ(wrong, 0u) << "keys missing or with a wrong value at the end";
  std::map<std::string, std::string> seen;
  uint64_t dups = 0;
  std::pair<std::map<std::string, std::string>*, uint64_t*> ctx{&seen, &dups};
  idx->for_each(
      [](void* c, std::string_view k, std::string_view v) {
        auto* p = static_cast<std::pair<std::map<std::string, std::string>*, uint64_t*>*>(c);
        if (!p->first->emplace(std::string(k), std::string(v)).second) ++*p->second;
      },
      &ctx);
  EXPECT_EQ(dups, 0u) << "for_each visited a key twice";
  EXPECT_TRUE(seen == all.items()) << "for_each: " << seen.size() << " items, model " << all.size();
  std::string report;
  EXPECT_TRUE(idx->impl()->check(&report)) << report;
  // Every reservation was published or given back (LineHT reserves a resize's array before
  // it takes the shard's lock, and gives it back when another thread resized first).
  EXPECT_EQ(idx->impl()->alloc->reserved_bytes(), 0u)
      << "pool blocks reserved and never given back";
  // Small tables must have changed structure while the threads ran.
  std::map<std::string, double> c = idx->stats().counters;
  // (The light sanitizer run holds too few records for a 16-split to split a segment.)
  bool too_small = light && std::string(sc.name).find("split16") != std::string::npos;
  if (std::string(sc.name) != "defaults" && !too_small) {
    for (const char* name :
         {"shard_resizes", "chain_buckets", "pab_grows", "level_resizes", "segment_splits"}) {
      if (c.count(name) && !(std::string(name) == "pab_grows" && sc.params.count("pab"))) {
        EXPECT_GT(c[name], 0) << name << ": the tables never changed structure";
      }
    }
  }
  std::printf("[stress %s %s %s] reads %llu (hits %llu)\n", sc.scheme, sc.name,
              format_name(GetParam().format), static_cast<unsigned long long>(reads.load()),
              static_cast<unsigned long long>(hits.load()));
  EXPECT_TRUE(idx->close().ok());
}

INSTANTIATE_TEST_SUITE_P(Matrix, StressTest, ::testing::ValuesIn(stress_params()),
                         [](const auto& info) {
                           return std::string(info.param.c.scheme) + "_" + info.param.c.name + "_" +
                                  format_name(info.param.format);
                         });

}  // namespace
}  // namespace pmhash::testing
