// The crash harness against every registered scheme, in both formats.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "index_impl.hpp"
#include "pm/spare_blocks.hpp"
#include "pm/threads.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

// PMHASH_CRASH_SOAK=N multiplies the workload (and so the crash states explored).
int soak() {
  const char* s = std::getenv("PMHASH_CRASH_SOAK");
  return s ? std::max(1, std::atoi(s)) : 1;
}
// Sanitizer builds run a lighter exploration (they are 5-20x slower).
int light() {
  const char* s = std::getenv("PMHASH_CRASH_LIGHT");
  return s && std::atoi(s) > 0;
}

// Every scheme and format, with small tables (resizes under crash) and with the scheme's
// default options (what a user gets; larger pools, so a sample of the fences).
class CrashTest : public ::testing::TestWithParam<SchemeConfig> {};

// The structural changes the crashed workload made: the harness crashes at every fence
// (or a sampled quarter of them, in soak runs), so each one was crashed inside.
void print_paths_crashed_inside(const CrashConfig& cfg, const CrashResult& r) {
  std::string structural;
  for (const char* c : {"shard_resizes", "chain_buckets", "pab_grows", "pab_used", "segment_splits",
                        "dir_expansions", "stashed", "displacements", "level_resizes",
                        "rehashed_records", "shard_gc_rehashes", "chain_buckets_reclaimed"})
    if (auto it = r.counters.find(c); it != r.counters.end())
      structural += std::string(structural.empty() ? "" : ", ") + c + " " +
                    std::to_string(static_cast<uint64_t>(it->second));
  if (!structural.empty())
    std::printf("[%s %s] paths crashed inside (operations in the workload): %s\n",
                cfg.scheme.c_str(), format_name(cfg.format), structural.c_str());
}

TEST_P(CrashTest, EveryFenceOfASmallWorkload) {
  CrashConfig cfg;
  cfg.scheme = GetParam().scheme;
  cfg.format = GetParam().format;
  cfg.params = GetParam().params();
  cfg.ops = (light() ? 60 : 220) * soak();
  cfg.seed = 1;
  if (cfg.scheme == "pmeh") cfg.keys = 200;  // a 2 KB segment holds 98 records: split it
  // SmartHT's fixed-format writes take one fence each (chain inserts two): a longer
  // workload reaches as many crash points as the others.
  if (cfg.scheme == "smartht" && cfg.format == Format::kFixed) cfg.ops = cfg.ops * 5 / 4;
  if (!GetParam().small()) use_default_tables(&cfg);
  // Soak runs (PMHASH_CRASH_SOAK=N) use a larger key space and sample the fences.
  if (soak() > 1) {
    cfg.keys = 48 * soak();
    cfg.pool_size = std::max<uint64_t>(cfg.pool_size, 8u << 20);
    cfg.sample_rate = 0.25;
  }
  CrashResult r = run_crash_test(cfg);
  std::printf(
      "[%s %s] crash states explored: %llu, failures: %llu "
      "(crash points %llu, states crashed inside recovery %llu)\n",
      cfg.scheme.c_str(), format_name(cfg.format), static_cast<unsigned long long>(r.states),
      static_cast<unsigned long long>(r.failures), static_cast<unsigned long long>(r.crash_points),
      static_cast<unsigned long long>(r.recovery_states));
  std::printf(
      "[%s %s] states whose recovery swept allocated, unreachable blocks: %llu (of which an "
      "in-flight write's item, i.e. crashed inside a log-free write or free: %llu; the others "
      "freed untaken spare blocks or chain buckets), blocks swept: %llu, crash points inside a "
      "background sweep: "
      "%llu\n",
      cfg.scheme.c_str(), format_name(cfg.format), static_cast<unsigned long long>(r.swept_states),
      static_cast<unsigned long long>(r.write_window_states),
      static_cast<unsigned long long>(r.swept_blocks),
      static_cast<unsigned long long>(r.sweep_crash_points));
  if (r.counters.count("chain_buckets_reclaimed"))
    std::printf("[%s %s] chain buckets reclaimed by deletes in the crashed workload: %.0f\n",
                cfg.scheme.c_str(), format_name(cfg.format), r.counters["chain_buckets_reclaimed"]);
  print_paths_crashed_inside(cfg, r);
  for (auto& m : r.messages) ADD_FAILURE() << m;
  EXPECT_EQ(r.failures, 0u);
  if (!light()) {  // soak runs sample a quarter of the fences of a longer workload
    EXPECT_GE(r.states, soak() > 1 ? 250u * soak() : GetParam().small() ? 1000u : 30u);
  }
  EXPECT_GT(r.recovery_states, 0u);
  // Every variable format allocates and frees items without a log: crashes inside both
  // windows, the interrupted write's item found and freed by the recovery sweep (TurboHash's
  // and PMEH's in the background). Counted by the item, not by "some block was swept",
  // which untaken spare blocks satisfy too.
  if (cfg.format == Format::kVariable) {
    EXPECT_GT(r.write_window_states, 0u);
  }
  // TurboHash's and PMEH's sweeps run in the background: crashes inside them too.
  if ((cfg.scheme == "turbohash" || cfg.scheme == "pmeh") && cfg.format == Format::kVariable) {
    EXPECT_GT(r.sweep_crash_points, 0u);
  }
  if (!GetParam().resizes_expected()) return;  // sized for the small_params tables
  // The workload must have crashed inside structural changes too.
  if (r.counters.count("shard_resizes")) {
    EXPECT_GT(r.counters["shard_resizes"], 0);  // TurboHash: crashes inside resizes
  }
  if (r.counters.count("chain_buckets")) {
    EXPECT_GT(r.counters["chain_buckets"], 0);  // SmartHT: crashes inside bucket linking
  }
  if (r.counters.count("pab_grows")) {
    EXPECT_GT(r.counters["pab_grows"], 0);  // WOPHI: crashes between PAB take and link,
    EXPECT_GT(r.counters["pab_used"], 0);   // and inside PAB growth
  }
  if (r.counters.count("segment_splits") && !light()) {  // the light run is too short
    EXPECT_GT(r.counters["segment_splits"], 0);          // PMEH: crashes inside gradual splits
    EXPECT_GT(r.counters["dir_expansions"], 0);          // and directory expansions
  }
  if (r.counters.count("level_resizes")) {
    EXPECT_GT(r.counters["level_resizes"], 0);     // HDNH: crashes inside level resizes,
    EXPECT_GT(r.counters["rehashed_records"], 0);  // while records move between levels,
    if (cfg.format == Format::kVariable) {         // and inside log-free item writes/frees
      EXPECT_GT(r.write_window_states, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, CrashTest, ::testing::ValuesIn(all_scheme_configs()),
                         [](const auto& info) { return param_name(info.param); });

// Space under churn, crashed: on one head (main) bucket, inserts and removes of 10 keys
// keep emptying chain buckets, which SmartHT and WOPHI unlink and free (reclaim). Every
// fence is a crash point, so crashes land inside each reclaim: between the bucket's last
// delete and its unlink/free commit, inside the commit's log, and in WOPHI's one-store
// unlink at a chain's end. After recovery the usual oracle (allocated == reachable
// included) must hold. The other option set: SmartHT without its filter (other_params);
// WOPHI without its PAB (pab=off: chain buckets allocated on the write path, so a reclaim
// frees the bucket without a log, as it frees an item, and the recovery sweep finds a bucket
// a crash left unlinked but allocated). other_params' pab_grow=background changed nothing
// here: the at most two chain buckets of 10 keys never use up small_params' PAB.
class ReclaimCrashTest : public ::testing::TestWithParam<SchemeConfig> {};

TEST_P(ReclaimCrashTest, EveryFenceWhileDeletesEmptyChainBuckets) {
  CrashConfig cfg;
  cfg.scheme = GetParam().scheme;
  cfg.format = GetParam().format;
  cfg.params = GetParam().params();
  cfg.params["buckets"] = "1";
  const bool wophi_nopab = cfg.scheme == "wophi" && GetParam().set == OptionSet::kOther;
  if (wophi_nopab) cfg.params["pab"] = "off";
  cfg.keys = 10;  // a head bucket's 3 (SmartHT) or 4 (WOPHI) slots, and chain buckets
  cfg.churn_removes = 50;
  cfg.ops = light() ? 80 : 220;
  CrashResult r = run_crash_test(cfg);
  double reclaimed = r.counters["chain_buckets_reclaimed"];
  std::printf(
      "[%s %s] crash states explored: %llu, failures: %llu; chain buckets reclaimed "
      "by the crashed workload: %.0f; states whose recovery swept blocks: %llu\n",
      cfg.scheme.c_str(), format_name(cfg.format), static_cast<unsigned long long>(r.states),
      static_cast<unsigned long long>(r.failures), reclaimed,
      static_cast<unsigned long long>(r.swept_states));
  print_paths_crashed_inside(cfg, r);
  for (auto& m : r.messages) ADD_FAILURE() << m;
  EXPECT_EQ(r.failures, 0u);
  EXPECT_GE(reclaimed, light() ? 1 : 3);  // the reclaim path ran, crash points inside it
  if (wophi_nopab) {
    EXPECT_GT(r.counters["chain_allocs_on_write"], 0);  // chain buckets from the allocator
  }
  // Crashes inside the log-free allocations (SmartHT's chained buckets, WOPHI's without the
  // PAB; items) and frees, found and freed by the recovery sweep. WOPHI's fixed format with
  // the PAB allocates nothing per write.
  if (cfg.scheme == "smartht" || wophi_nopab || cfg.format == Format::kVariable) {
    EXPECT_GT(r.swept_states, 0u);
  }
}

std::vector<SchemeConfig> reclaiming_configs() {
  std::vector<SchemeConfig> v;
  for (std::string s : {"smartht", "wophi"})
    for (Format f : {Format::kFixed, Format::kVariable})
      for (OptionSet o : {OptionSet::kSmall, OptionSet::kOther}) v.push_back({s, f, o});
  return v;
}
INSTANTIATE_TEST_SUITE_P(ChainSchemes, ReclaimCrashTest, ::testing::ValuesIn(reclaiming_configs()),
                         [](const auto& info) { return param_name(info.param); });

// TurboHash §4.6, crashed: in a shard of two buckets, inserts and removes of 24 keys keep
// leaving a quarter of its slots deleted, so deletes rehash it at the same size over and
// over (garbage collection). Every fence is a crash point: the counter of fences inside
// those rehashes is the number of crash points inside them. After recovery the oracle
// (nothing lost, nothing duplicated, allocated == reachable) must hold.
class GcCrashTest : public ::testing::TestWithParam<Format> {};

TEST_P(GcCrashTest, EveryFenceInsideSameSizeRehashes) {
  CrashConfig cfg;
  cfg.scheme = "turbohash";
  cfg.format = GetParam();
  cfg.params = {{"shards", "1"}, {"buckets", "2"}, {"scope", "2"}};
  cfg.keys = 24;
  cfg.churn_removes = 60;  // more removes than inserts: the live set shrinks and refills
  cfg.ops = light() ? 120 : 400;
  CrashResult r = run_crash_test(cfg);
  std::printf(
      "[turbohash %s] crash states explored: %llu, failures: %llu; same-size rehashes (§4.6) "
      "in the crashed workload: %.0f, crash points inside them: %.0f; growing resizes: %.0f\n",
      format_name(cfg.format), static_cast<unsigned long long>(r.states),
      static_cast<unsigned long long>(r.failures), r.counters["shard_gc_rehashes"],
      r.counters["gc_rehash_fences"], r.counters["shard_resizes"]);
  print_paths_crashed_inside(cfg, r);
  for (auto& m : r.messages) ADD_FAILURE() << m;
  EXPECT_EQ(r.failures, 0u);
  EXPECT_GE(r.counters["shard_gc_rehashes"], light() ? 1 : 3);
  EXPECT_GE(r.counters["gc_rehash_fences"], 2 * r.counters["shard_gc_rehashes"]);
  EXPECT_EQ(r.counters["shard_resizes"], 0);  // so every rehash checked above is a §4.6 one
  // Teeth: the same workload with the rehash publishing the new shard before writing it
  // (kMutationPublishBeforeWrite) must fail: the crash points inside the rehashes are checked.
  if (GetParam() == Format::kFixed) {
    cfg.mutations = 2;
    CrashResult bad = run_crash_test(cfg);
    std::printf(
        "[turbohash fixed] with the rehash's publish moved before its write: failures %llu\n",
        static_cast<unsigned long long>(bad.failures));
    EXPECT_GT(bad.failures, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(TurboHash, GcCrashTest,
                         ::testing::Values(Format::kFixed, Format::kVariable),
                         [](const auto& info) { return std::string(format_name(info.param)); });

// (Not under TSan: one thread runs each workload, and it took 166 s of the TSan run.)
#if defined(PMHASH_CRASH_HOOKS) && !defined(__SANITIZE_THREAD__)
// The harness has teeth: with one flush removed from TurboHash's insert, one publish moved
// before the write it publishes (TurboHash resize, PMEH split, LineHT insert), or a progress record
// not ordered after what it records (HDNH rehash), the same workload reports failures.
TEST(CrashHarness, CatchesAMissingFlushAndAReorderedPublish) {
  struct Case {
    const char* scheme;
    uint64_t mutation;
    const char* what;
  };
  for (Case c : {Case{"turbohash", 1, "slot flush removed"},
                 Case{"turbohash", 2, "resize publishes before writing"},
                 Case{"hdnh", 4, "rehash progress not ordered after the bitmaps"},
                 Case{"pmeh", 8, "split publishes an unpersisted segment"},
                 Case{"lineht", 16, "insert commits before writing the slot"}}) {
    for (Format f : {Format::kFixed, Format::kVariable}) {
      CrashConfig cfg;
      cfg.scheme = c.scheme;
      cfg.format = f;
      cfg.params = small_params(c.scheme);
      cfg.ops = c.scheme == std::string("turbohash") ? 120 : 220;
      if (c.scheme == std::string("pmeh")) cfg.keys = 200;  // as in the full crash test
      cfg.mutations = c.mutation;
      CrashResult r = run_crash_test(cfg);
      EXPECT_GT(r.failures, 0u) << c.what << " went unnoticed (" << format_name(f) << ")";
      std::printf("[mutation: %s %s, %s] failures found: %llu, first: %s\n", c.scheme, c.what,
                  format_name(f), static_cast<unsigned long long>(r.failures),
                  r.messages.empty() ? "-" : r.messages[0].c_str());
    }
  }
}
#endif

}  // namespace
}  // namespace pmhash::testing

namespace pmhash::testing {
namespace {

// Stop-the-world crash points in a concurrent workload: two writers on disjoint keys and two
// readers over all keys; at a crash point the other writer parks at its next flush or fence.
// Durable linearizability: every value (or absence) a completed read returned before the
// crash point survives recovery unless a later operation replaced it; a read that saw an
// in-flight operation's effect requires that operation to be persisted. (Not under TSan:
// taking a crash image reads the pool while a thread blocked on a lock may still run.)
#if !defined(__SANITIZE_THREAD__)
TEST_P(CrashTest, ConcurrentWorkloadStopTheWorld) {
  CrashConfig cfg;
  cfg.scheme = GetParam().scheme;
  cfg.format = GetParam().format;
  cfg.params = GetParam().params();
  cfg.threads = 2;
  cfg.readers = 2;
  cfg.ops = light() ? 40 : 120;
  cfg.crash_every = 3;
  cfg.seed = 5;
  if (!GetParam().small()) {
    use_default_tables(&cfg);
    cfg.crash_every = 1;  // the sampling already thins the fences
  }
  CrashResult r = run_crash_test(cfg);
  std::printf(
      "[%s %s %s, 2 writers, 2 readers] crash states explored: %llu, failures: %llu, reads "
      "%llu, reads checked at crash points %llu\n",
      cfg.scheme.c_str(), format_name(cfg.format), GetParam().small() ? "small" : "defaults",
      static_cast<unsigned long long>(r.states), static_cast<unsigned long long>(r.failures),
      static_cast<unsigned long long>(r.reads),
      static_cast<unsigned long long>(r.read_constraints));
  print_paths_crashed_inside(cfg, r);
  for (auto& m : r.messages) ADD_FAILURE() << m;
  EXPECT_EQ(r.failures, 0u);
  EXPECT_GT(r.states, light() || !GetParam().small() ? 10u : 50u);
  EXPECT_GT(r.reads, 0u);
  // Whether a completed read precedes a crash point depends on scheduling: with the default
  // tables the sampled crash points are few (39 in one ASan run of wophi, none after a read),
  // so only the small tables' many crash points are required to check some reads.
  if (GetParam().small()) {
    EXPECT_GT(r.read_constraints, 0u);
  }
}

// A persistence hook for readers beside a crash point: unlike CrashSim (which holds every
// other thread's flush while a crash point is explored), a flush is recorded and returns, and
// becomes durable at a fence of the thread that made it (sfence orders only its own
// thread's write-backs). image() is the all-old crash state: what the fences made durable.
class ReaderFriendlyImage : public pm::PersistHook {
 public:
  std::function<void()> at_writer_fence;  // the writer's fences, while armed
  std::atomic<bool> armed{false};
  void on_map(char* base, size_t size) override {
    base_ = base;
    image_.assign(base, base + size);
    writer_ = pm::thread_token();
  }
  void on_flush(const void* addr, size_t len) override {
    std::lock_guard<std::mutex> g(mu_);
    uint64_t start = static_cast<uint64_t>(static_cast<const char*>(addr) - base_);
    for (uint64_t line = start / 64; line * 64 < start + len; ++line) {
      Line& l = unfenced_[pm::thread_token()][line];
      std::memcpy(l.bytes.data(), base_ + line * 64, 64);
      l.seq = ++seq_;
    }
  }
  void on_fence() override {
    if (armed && pm::thread_token() == writer_ && !in_callback_ && at_writer_fence) {
      in_callback_ = true;  // the crash point: before this fence takes effect
      at_writer_fence();
      in_callback_ = false;
    }
    std::lock_guard<std::mutex> g(mu_);
    auto mine = unfenced_.find(pm::thread_token());
    if (mine == unfenced_.end()) return;
    for (auto& [line, l] : mine->second)
      if (l.seq > durable_seq_[line]) {
        std::memcpy(image_.data() + line * 64, l.bytes.data(), 64);
        durable_seq_[line] = l.seq;
      }
    unfenced_.erase(mine);
  }
  std::vector<char> image() {
    std::lock_guard<std::mutex> g(mu_);
    return image_;
  }

 private:
  struct Line {
    std::array<char, 64> bytes;
    uint64_t seq;
  };
  char* base_ = nullptr;
  std::vector<char> image_;
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, Line>> unfenced_;
  std::unordered_map<uint64_t, uint64_t> durable_seq_;
  uint64_t seq_ = 0, writer_ = 0;
  bool in_callback_ = false;
  std::mutex mu_;
};

// size() and for_each() are readers too: at every fence of a writer's armed operations
// another thread calls them; what they report must survive a crash there (the all-old
// image). The writer waits for the reader's answer, however long it takes (no deadline: a
// slow machine or a sanitizer only makes it slower); a walk that waited for the writer
// would hang the test, and ctest's timeout fail it.
class WalkBesideWriter {
 public:
  WalkBesideWriter(const SchemeConfig& c, const std::map<std::string, std::string>& extra)
      : fixed_(c.format == Format::kFixed), o_(small_options(c.scheme, c.format)) {
    o_.params = c.params();
    for (auto& [k, v] : extra) o_.params[k] = v;
    o_.pool_size = c.small() ? 4u << 20 : 64u << 20;
    OpenHooks hooks;
    hooks.persist_hook = &sim_;
    hooks.chunk_size = 64u << 10;
    EXPECT_TRUE(open_index(p_.path, o_, hooks, &idx_).ok());
    sim_.at_writer_fence = [this] { look(); };
  }
  ~WalkBesideWriter() { EXPECT_TRUE(!idx_ || idx_->close().ok()); }
  bool opened() const { return idx_ != nullptr; }
  Index& index() { return *idx_; }
  bool fixed() const { return fixed_; }
  double counter(const char* name) { return idx_->stats().counters[name]; }

  // op on keys [0, n), each one armed: a walk at each of its fences.
  template <class Op>
  void each_key(const char* what, int n, Op op) {
    step_ = what;
    for (int i = 0; i < n; ++i) {
      std::string k = make_key(i, fixed_);
      sim_.armed = true;
      ASSERT_TRUE(op(k).ok()) << what << " " << i;
      sim_.armed = false;
    }
  }
  int points = 0, checked = 0;

 private:
  // Each answer is checked against the image when it was given: for_each may flush (and so
  // make durable) a write in flight that the size() before it did not count.
  struct Look {
    uint64_t n = 0;
    std::map<std::string, std::string> seen;
    std::vector<char> after_size;
    std::thread t;
  };
  static void collect(void* c, std::string_view k, std::string_view v) {
    (*static_cast<std::map<std::string, std::string>*>(c))[std::string(k)] = v;
  }
  void look() {
    ++points;
    auto look = std::make_unique<Look>();
    Look* l = look.get();
    l->t = std::thread([l, this] {
      l->n = idx_->size();
      l->after_size = sim_.image();
      idx_->for_each(collect, &l->seen);
    });
    l->t.join();
    ++checked;
    std::vector<char> after_for_each = sim_.image();  // nothing changes while the writer waits
    std::map<std::string, std::string> kept = kept_by(after_for_each);
    EXPECT_TRUE(l->seen == kept) << step_ << ", crash point " << points << ": for_each reported "
                                 << l->seen.size() << " items, the crash keeps " << kept.size()
                                 << " (or other values)";
    if (l->after_size != after_for_each) kept = kept_by(l->after_size);
    EXPECT_EQ(l->n, kept.size()) << step_ << ", crash point " << points << ": size()";
  }
  // What a crash that leaves `image` keeps: the image opened (recovered) and walked.
  std::map<std::string, std::string> kept_by(const std::vector<char>& image) {
    std::map<std::string, std::string> kept;
    write_bytes(img_.path, image);
    std::unique_ptr<Index> r;
    Options o2 = o_;
    o2.create = false;
    Status s = Index::open(img_.path, o2, &r);
    if (!s.ok()) {
      ADD_FAILURE() << step_ << ": the image does not open: " << s.to_string();
      return kept;
    }
    r->for_each(collect, &kept);
    EXPECT_TRUE(r->close().ok());
    return kept;
  }

  bool fixed_;
  Options o_;
  TempPool p_{"fe"}, img_{"fe-img"};
  ReaderFriendlyImage sim_;
  std::unique_ptr<Index> idx_;
  std::string step_;
};

// Inserts, updates (in place where the scheme updates so) and removes of 16 keys. LineHT's
// and TurboHash's walks take no lock, HDNH's and PMEH's wait for none: they must answer at
// every point.
TEST_P(CrashTest, SizeAndForEachBesideAWriteReportOnlyWhatACrashKeeps) {
  const std::string& scheme = GetParam().scheme;
  if (scheme == "smartht" || scheme == "wophi")
    GTEST_SKIP() << "their walks read under the writers' stripe locks: a reader waits";
  WalkBesideWriter w(GetParam(), {});
  ASSERT_TRUE(w.opened());
  bool fixed = w.fixed();
  Index& idx = w.index();
  w.each_key("insert", 16,
             [&](const std::string& k) { return idx.insert(k, make_value(k, 1, fixed)); });
  w.each_key("update", 16,
             [&](const std::string& k) { return idx.update(k, make_value(k, 2, fixed)); });
  w.each_key("remove", 16, [&](const std::string& k) { return idx.remove(k); });
  std::printf("[%s %s] crash points %d, answered and checked %d\n", scheme.c_str(),
              format_name(GetParam().format), w.points, w.checked);
  EXPECT_GT(w.points, 40);
  EXPECT_EQ(w.checked, w.points) << "their walks never wait for a writer";
}

// The update paths that commit through a slot's value word (Items::swap_value), beside the
// walks, in HDNH's and PMEH's small tables filled first (unarmed): HDNH's update in a full
// bucket; PMEH's every update (a normal bucket or a stash bucket; the zone owner's lock-free
// write in the small option set, the locked one in the other).
TEST_P(CrashTest, InPlaceUpdatesBesideAWalkReportOnlyWhatACrashKeeps) {
  const std::string& scheme = GetParam().scheme;
  if ((scheme != "hdnh" && scheme != "pmeh") || !GetParam().small())
    GTEST_SKIP() << "HDNH's and PMEH's small tables only (the paths are counted there)";
  // PMEH: lock-free in the small option set (one zone, its owner writing), locked in the
  // other (concurrency=locked: every write takes the bucket locks, as in a shared zone).
  std::map<std::string, std::string> extra;
  if (scheme == "pmeh")
    extra["concurrency"] = GetParam().set == OptionSet::kOther ? "locked" : "opportunistic";
  WalkBesideWriter w(GetParam(), extra);
  ASSERT_TRUE(w.opened());
  bool fixed = w.fixed();
  Index& idx = w.index();
  // Filled until HDNH's three buckets hold 20 of their 24 records, or PMEH has stashed 6.
  auto filled = [&] { return scheme == "hdnh" ? idx.size() >= 20 : w.counter("stashed") >= 6; };
  int n = 0;
  for (; n < 400 && !filled(); ++n) {
    std::string k = make_key(n, fixed);
    ASSERT_TRUE(idx.insert(k, make_value(k, 1, fixed)).ok());
  }
  double locked0 = w.counter("locked_writes"), locks0 = w.counter("bucket_locks");
  w.each_key("update", n,
             [&](const std::string& k) { return idx.update(k, make_value(k, 2, fixed)); });
  std::printf(
      "[%s %s] %d keys updated; crash points %d, answered and checked %d; counters: "
      "in_place_updates %.0f, stashed %.0f, lock_free_writes %.0f, locked_writes %.0f, "
      "bucket_locks %.0f, splits %.0f, resizes %.0f\n",
      scheme.c_str(), format_name(GetParam().format), n, w.points, w.checked,
      w.counter("in_place_updates"), w.counter("stashed"), w.counter("lock_free_writes"),
      w.counter("locked_writes"), w.counter("bucket_locks"), w.counter("segment_splits"),
      w.counter("level_resizes"));
  EXPECT_EQ(w.checked, w.points) << "their walks never wait for a writer";
  if (scheme == "hdnh") {
    EXPECT_GT(w.counter("in_place_updates"), 0);
    return;
  }
  EXPECT_GT(w.counter("stashed"), 0);  // every key updated: the stashed ones in place too
  double locked = w.counter("locked_writes") - locked0;
  if (GetParam().set == OptionSet::kSmall) {
    EXPECT_EQ(locked, 0) << "the zone's owner writes lock-free";
    return;
  }
  EXPECT_EQ(locked, n);
  // A locked update takes b and b+1, and the stash bucket of a stashed record.
  EXPECT_GT(w.counter("bucket_locks") - locks0 - 2 * locked, 0) << "no locked stash update";
}

// The harness's own race: an operation that starts while a crash point is explored must be
// either in the crash point's snapshot (in flight) or wait until the exploration is over.
// A worker entering an operation waits until a crash point has taken its snapshot
// (CrashConfig::start_inside_crash_points); before the fix the operation then ran
// unrecorded while images were taken ("acknowledged key lost" or "acknowledged value lost"
// with 0 ops in flight).
TEST(CrashHarness, AnOperationStartedDuringACrashPointIsInFlightOrWaits) {
  CrashConfig cfg;
  cfg.scheme = "lineht";
  cfg.params = other_params("lineht");
  cfg.threads = 2;
  cfg.readers = 2;
  cfg.ops = 60;
  cfg.keys = 12;  // few inserts first: most operations change what is acknowledged
  cfg.crash_every = 3;
  cfg.seed = 5;
  cfg.start_inside_crash_points = true;
  CrashResult r = run_crash_test(cfg);
  std::printf(
      "[harness, operations starting inside crash points] crash states: %llu, "
      "failures: %llu\n",
      static_cast<unsigned long long>(r.states), static_cast<unsigned long long>(r.failures));
  for (auto& m : r.messages) ADD_FAILURE() << m;
  EXPECT_EQ(r.failures, 0u);
  EXPECT_GT(r.crash_points, 10u);
}

// Spare blocks are refilled without a fence (pm::SpareBlocks): writers sharing one stripe
// take blocks another writer refilled, and their own fence must order the bits. Whether a
// take falls inside the refiller's unfenced window depends on scheduling, so this run
// rarely catches a missing re-flush (helper-36: 2 of 10 seeds in SmartHT, none in LineHT);
// the regression guard is SpareBlocks.ABlockTakenFromAnotherThreadsRefill..., which
// places a take inside that window deterministically. This one checks the whole workload.
TEST(CrashHarness, WritersTakingEachOthersSpareBlocksLoseNothing) {
  for (const char* scheme : {"lineht", "smartht"}) {
    CrashConfig cfg;
    cfg.scheme = scheme;
    cfg.format = Format::kVariable;
    cfg.params = small_params(scheme);
    cfg.threads = 2;
    cfg.readers = 1;
    cfg.ops = light() ? 40 : 120;
    cfg.crash_every = 2;
    cfg.seed = 9;
    cfg.one_spare_stripe = true;
    CrashResult r = run_crash_test(cfg);
    std::printf("[%s variable, 2 writers on one spare stripe] crash states: %llu, failures: %llu\n",
                scheme, static_cast<unsigned long long>(r.states),
                static_cast<unsigned long long>(r.failures));
    for (auto& m : r.messages) ADD_FAILURE() << m;
    EXPECT_EQ(r.failures, 0u);
    EXPECT_GT(r.states, 10u);
  }
}
#endif

#ifdef PMHASH_CRASH_HOOKS  // the hooks and the fault injection
// The simulator makes a flush durable at a fence of the thread that issued it only (x86:
// sfence orders its own thread's write-backs).
TEST(CrashSimulator, AFenceMakesOnlyItsOwnThreadsFlushesDurable) {
  alignas(64) static char buf[128];
  std::memset(buf, 0, sizeof buf);
  CrashSim sim;
  pm::Persister p;
  p.instr = pm::FlushInstr::kNothing;
  p.hook = &sim;
  sim.on_map(buf, sizeof buf);
  buf[0] = 1;
  p.flush(buf, 8);
  std::thread([&] { p.fence(); }).join();
  EXPECT_EQ(sim.dirty_words(), 1u) << "another thread's fence made this thread's flush durable";
  p.fence();
  EXPECT_EQ(sim.dirty_words(), 0u);
  // A thread that exits with a flush unfenced: a later thread (glibc may give it the same
  // std::thread::id) does not make that flush durable by its own fence.
  std::thread([&] {
    buf[8] = 1;
    p.flush(buf + 8, 8);
  }).join();
  std::thread([&] { p.fence(); }).join();
  EXPECT_EQ(sim.dirty_words(), 1u) << "an exited thread's flush became durable";
  p.persist(buf + 8, 8);  // this thread's own flush of the line
  EXPECT_EQ(sim.dirty_words(), 0u);
  // A newer flush made durable first is not overwritten by an older one fenced later.
  buf[64] = 1;
  p.flush(buf + 64, 8);  // content 1, this thread
  std::thread([&] {
    buf[64] = 2;
    p.persist(buf + 64, 8);  // content 2, durable
  }).join();
  p.fence();
  std::vector<char> image;
  sim.make_image(CrashSim::Mix::kAllOld, 1, &image);
  EXPECT_EQ(image[64], 2);
}

// A spare block taken by a thread that did not refill its stock: the taker flushes the
// bit's line again, so the taker's fence makes the bit durable (the refiller has not fenced
// yet). With that flush removed (kMutationSpareBitNotReflushed) the bit stays volatile.
TEST(SpareBlocks, ABlockTakenFromAnotherThreadsRefillHasItsBitDurableAtTheTakersFence) {
  for (uint64_t mutation : {uint64_t{0}, pm::kMutationSpareBitNotReflushed}) {
    TempPool pool;
    Options o;
    o.scheme = "lineht";
    o.format = Format::kVariable;
    o.mode = Mode::kEmulated;
    o.pool_size = 8u << 20;
    CrashSim sim;
    OpenHooks hooks;
    hooks.persist_hook = &sim;
    hooks.mutations = mutation;
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(open_index(pool.path, o, hooks, &idx).ok());
    pm::Allocator& alloc = *idx->impl()->alloc;
    alloc.spares().share_one_stripe(true);
    ASSERT_EQ(sim.dirty_words(), 0u);
    pm::Reservation mine = alloc.spares().take(40);  // refills: bits flushed, not fenced
    pm::Reservation theirs;
    std::thread([&] {
      theirs = alloc.spares().take(40);
      alloc.pool().persister().fence();  // the taker's fence, before it would publish
    }).join();
    ASSERT_TRUE(mine && theirs);
    if (mutation == 0)
      EXPECT_EQ(sim.dirty_words(), 0u) << "the taken block's bit is not durable";
    else
      EXPECT_GT(sim.dirty_words(), 0u) << "the test cannot see a missing flush";
    alloc.unmark(mine.off);
    alloc.unmark(theirs.off);
  }
}
#endif

}  // namespace
}  // namespace pmhash::testing
