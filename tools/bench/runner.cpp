#include "runner.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "index_impl.hpp"
#include "limit.hpp"

#ifdef PMHASH_HAVE_ABSL
#include <absl/container/flat_hash_map.h>
#endif
#ifdef PMHASH_HAVE_LIBCUCKOO
#include <libcuckoo/cuckoohash_map.hh>
#endif

namespace pmhash::bench {
namespace {

using Clock = std::chrono::steady_clock;

// What a phase drives: a pmhash index or the DRAM reference.
class Target {
 public:
  virtual ~Target() = default;
  virtual Code insert(const std::string& k, const std::string& v) = 0;
  virtual Code update(const std::string& k, const std::string& v) = 0;
  virtual Code get(const std::string& k, std::string* v) = 0;
  virtual Code remove(const std::string& k) = 0;
  // A batch of lookups (the read-batch rows); a target without a batch call looks the keys
  // up one by one.
  virtual void get_many(const std::vector<std::string>& keys, std::vector<std::string>* values,
                        std::vector<Code>* codes) {
    for (size_t i = 0; i < keys.size(); ++i) (*codes)[i] = get(keys[i], &(*values)[i]);
  }
};

class IndexTarget : public Target {
 public:
  explicit IndexTarget(Index* i) : i_(i) {}
  Code insert(const std::string& k, const std::string& v) override {
    return i_->insert(k, v).code();
  }
  Code update(const std::string& k, const std::string& v) override {
    return i_->update(k, v).code();
  }
  Code get(const std::string& k, std::string* v) override { return i_->get(k, v).code(); }
  Code remove(const std::string& k) override { return i_->remove(k).code(); }
  void get_many(const std::vector<std::string>& keys, std::vector<std::string>* values,
                std::vector<Code>* codes) override {
    thread_local std::vector<std::string_view> views;
    thread_local std::vector<Status> statuses;
    views.assign(keys.begin(), keys.end());
    statuses.resize(keys.size());
    (void)i_->get_many(views, *values, statuses);  // a refusal is in every status too
    for (size_t i = 0; i < keys.size(); ++i) (*codes)[i] = statuses[i].code();
  }

 private:
  Index* i_;
};

// The DRAM ceiling: abseil's flat_hash_map (std::unordered_map without abseil) behind 1024
// striped reader-writer locks.
class DramTarget : public Target {
 public:
  Code insert(const std::string& k, const std::string& v) override {
    Stripe& s = stripe(k);
    std::unique_lock g(s.mu);
    return s.map.emplace(k, v).second ? Code::kOk : Code::kAlreadyExists;
  }
  Code update(const std::string& k, const std::string& v) override {
    Stripe& s = stripe(k);
    std::unique_lock g(s.mu);
    auto it = s.map.find(k);
    if (it == s.map.end()) return Code::kNotFound;
    it->second = v;
    return Code::kOk;
  }
  Code get(const std::string& k, std::string* v) override {
    Stripe& s = stripe(k);
    std::shared_lock g(s.mu);
    auto it = s.map.find(k);
    if (it == s.map.end()) return Code::kNotFound;
    *v = it->second;
    return Code::kOk;
  }
  Code remove(const std::string& k) override {
    Stripe& s = stripe(k);
    std::unique_lock g(s.mu);
    return s.map.erase(k) ? Code::kOk : Code::kNotFound;
  }

 private:
  struct alignas(64) Stripe {
    std::shared_mutex mu;
#ifdef PMHASH_HAVE_ABSL
    absl::flat_hash_map<std::string, std::string> map;
#else
    std::unordered_map<std::string, std::string> map;
#endif
  };
  Stripe& stripe(const std::string& k) {
    return stripes_[std::hash<std::string>{}(k) % 1024];
  }
  Stripe stripes_[1024];
};

#ifdef PMHASH_HAVE_LIBCUCKOO
// A fair DRAM reference: libcuckoo (Debian libcuckoo-dev), a concurrent hash table made for
// the job. Fixed format: 8-byte keys and values as integers, no heap per key; the variable
// format keeps strings.
class CuckooTarget : public Target {
 public:
  explicit CuckooTarget(bool fixed) : fixed_(fixed) {}
  Code insert(const std::string& k, const std::string& v) override {
    bool ok = fixed_ ? ints_.insert(word(k), word(v)) : strings_.insert(k, v);
    return ok ? Code::kOk : Code::kAlreadyExists;
  }
  Code update(const std::string& k, const std::string& v) override {
    bool ok = fixed_ ? ints_.update(word(k), word(v)) : strings_.update(k, v);
    return ok ? Code::kOk : Code::kNotFound;
  }
  Code get(const std::string& k, std::string* v) override {
    if (!fixed_) return strings_.find(k, *v) ? Code::kOk : Code::kNotFound;
    uint64_t x;
    if (!ints_.find(word(k), x)) return Code::kNotFound;
    v->assign(reinterpret_cast<const char*>(&x), sizeof x);
    return Code::kOk;
  }
  Code remove(const std::string& k) override {
    bool ok = fixed_ ? ints_.erase(word(k)) : strings_.erase(k);
    return ok ? Code::kOk : Code::kNotFound;
  }

 private:
  static uint64_t word(const std::string& s) {
    uint64_t x = 0;
    std::memcpy(&x, s.data(), std::min(s.size(), sizeof x));
    return x;
  }
  bool fixed_;
  libcuckoo::cuckoohash_map<uint64_t, uint64_t> ints_;
  libcuckoo::cuckoohash_map<std::string, std::string> strings_;
};
#endif

// Reports every operation's key to RunConfig::on_op, then passes it on.
class TraceTarget : public Target {
 public:
  TraceTarget(std::unique_ptr<Target> t, const std::function<void(char, const std::string&)>& f)
      : t_(std::move(t)), f_(f) {}
  Code insert(const std::string& k, const std::string& v) override {
    f_('i', k);
    return t_->insert(k, v);
  }
  Code update(const std::string& k, const std::string& v) override {
    f_('u', k);
    return t_->update(k, v);
  }
  Code get(const std::string& k, std::string* v) override {
    f_('g', k);
    return t_->get(k, v);
  }
  Code remove(const std::string& k) override {
    f_('r', k);
    return t_->remove(k);
  }
  void get_many(const std::vector<std::string>& keys, std::vector<std::string>* values,
                std::vector<Code>* codes) override {
    for (const std::string& k : keys) f_('g', k);
    t_->get_many(keys, values, codes);
  }

 private:
  std::unique_ptr<Target> t_;
  const std::function<void(char, const std::string&)>& f_;
};

void pin_thread(int t) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(t % std::max(1, static_cast<int>(std::thread::hardware_concurrency())), &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

struct ThreadOut {
  uint64_t ok = 0, failed = 0;
  PersistCounters persist;
  std::vector<uint32_t> lat_ns;  // every 16th op
};

double percentile(std::vector<uint32_t>& v, double p) {  // v not empty
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * double(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(i), v.end());
  return v[i];
}

// --routed: each partition's queue of operation ids (in draw order) and its cursor.
struct Routes {
  std::vector<std::vector<uint64_t>> q;
  std::unique_ptr<std::atomic<uint64_t>[]> next;
  bool help = false;
  // The next id for a worker of partition `own`: its queue first, then (help) the others'.
  bool take(uint32_t own, uint64_t* id) {
    size_t n = q.size();
    for (size_t k = 0; k < n; ++k) {
      size_t p = own < n ? (own + k) % n : k;
      if (p != own && !help) return false;
      if (next[p].load(std::memory_order_relaxed) >= q[p].size()) continue;
      uint64_t i = next[p].fetch_add(1, std::memory_order_relaxed);
      if (i < q[p].size()) {
        *id = q[p][i];
        return true;
      }
    }
    return false;
  }
};

class Runner {
 public:
  Runner(const RunConfig& c, std::vector<Row>* rows)
      : c_(c),
        ks_(c.format == Format::kFixed, c.key_size, c.value_size, c.sequential_keys,
            scramble(c.seed) ^ scramble(1)),  // seed 1: the historical key set
        rows_(rows) {}
  // Every way out of go(), an error after the open included, leaves no pool file behind.
  ~Runner() {
    target_.reset();
    index_.reset();
    if (!path_.empty()) unlink(path_.c_str());
  }

  bool go(std::string* error);

 private:
  // One timed phase: `op(thread, i, bufs...)` returns whether the op succeeded.
  template <class Op>
  void phase(const std::string& name, uint64_t total, Op op, bool expect_all_ok,
             bool expect_none_ok);
  Row base_row(const std::string& workload) const;
  void add_index_state(Row& r);
  bool run_workload(const std::string& w);
  void lfsweep();
  void sweep_deletes(uint64_t first, uint64_t step);
  void churn();
  void reload();
  bool recovery(std::string* error);
  bool routed() const { return c_.routed != RunConfig::Routing::kNone && index_ != nullptr; }
  // Hands ids[0..n) (n ids from id_at) to the queues of their keys' owners (--routed).
  template <class IdAt>
  void route(uint64_t n, IdAt id_at);
  Stats index_stats() const;

  bool reference() const { return c_.variant == "dram" || c_.variant == "cuckoo"; }
  uint64_t pool_bytes() const;
  bool measure_limit(std::string* error);

  const RunConfig& c_;
  KeySpace ks_;
  std::vector<Row>* rows_;
  std::string path_;
  Options opts_;
  std::unique_ptr<Index> index_;
  std::unique_ptr<Target> target_;
  std::atomic<uint64_t> next_id_{0};  // ids inserted so far (load + inserts)
  std::map<std::string, double> counters_before_;
  uint64_t version_ = 1;
  const DistSpec* phase_dist_ = nullptr;  // a workload's own distribution (YCSB-D: latest)
  double ns_per_miss_ = 0;                // the limit row's, when measured
  uint64_t page_bytes_ = 0;               // the pool mapping's page size
  std::unique_ptr<Routes> routes_;        // the phase about to run is routed
  std::string route_error_;               // a routed phase found a partition without a worker
};

// On a short-lived thread: the bench's main thread takes no per-index thread slot, so the
// T workers of a phase get slots 0..T-1 and, with PMEH's zone_threads = T, own a partition
// each (slots are handed out on a thread's first call and returned when it exits).
Stats Runner::index_stats() const {
  Stats s;
  std::thread([&] { s = index_->stats(); }).join();
  return s;
}

template <class IdAt>
void Runner::route(uint64_t n, IdAt id_at) {
  routes_ = std::make_unique<Routes>();
  uint32_t parts = index_->partitions();  // owner() and partitions() take no thread slot
  routes_->q.resize(parts);
  routes_->next.reset(new std::atomic<uint64_t>[parts]);
  for (uint32_t p = 0; p < parts; ++p) routes_->next[p] = 0;
  routes_->help = c_.routed == RunConfig::Routing::kHelp;
  std::string k;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t id = id_at(i);
    ks_.key(id, &k);
    routes_->q[index_->owner(k)].push_back(id);
  }
}

Row Runner::base_row(const std::string& workload) const {
  Row r;
  r.tags["scheme"] = reference() ? c_.variant : c_.scheme;
  r.tags["variant"] = c_.variant;
  r.tags["format"] = format_name(c_.format);
  r.tags["workload"] = workload;
  r.tags["dist"] = c_.dist.name();  // the run's --dist
  // What this row's keys were drawn from (YCSB-D defines its own: latest).
  r.tags["key_dist"] = (phase_dist_ ? *phase_dist_ : c_.dist).name();
  if (!c_.label.empty()) r.tags["label"] = c_.label;
  if (c_.sequential_keys) r.tags["keys"] = "sequential";
  r.values["threads"] = c_.threads;
  r.values["keys"] = double(c_.keys);
  r.values["key_size"] = double(ks_.key_size());
  r.values["value_size"] = double(ks_.value_size());
  r.values["delay_ns"] = c_.delay_ns;
  if (c_.prefault) r.tags["prefault"] = "on";
  if (index_) r.tags["mode"] = mode_name(index_stats().mode);
  if (routed()) r.tags["routed"] = c_.routed == RunConfig::Routing::kHelp ? "help" : "own";
  if (page_bytes_) r.values["page_bytes"] = double(page_bytes_);
  return r;
}

void Runner::add_index_state(Row& r) {
  if (!index_) return;
  Stats s = index_stats();
  r.values["size"] = double(s.size);
  r.values["load_factor"] = s.load_factor;
  // A scheme whose paper counts capacity differently reports its capacity that way (TurboHash:
  // 13 of 14 slots per bucket); the row gives both load factors.
  auto paper = s.counters.find("capacity_slots_paper");
  if (paper != s.counters.end() && paper->second > 0)
    r.values["load_factor_paper"] = double(s.size) / paper->second;
  r.values["dram_bytes_per_key"] = s.size ? double(s.dram_bytes) / double(s.size) : 0;
  r.values["pm_bytes_per_key"] = s.size ? double(s.pm_bytes) / double(s.size) : 0;
  for (auto& [k, v] : s.counters) {
    r.values["c." + k] = v;
    auto it = counters_before_.find(k);
    r.values["d." + k] = v - (it == counters_before_.end() ? 0 : it->second);
  }
  counters_before_ = s.counters;
}

template <class Op>
void Runner::phase(const std::string& name, uint64_t total, Op op, bool expect_all_ok,
                   bool expect_none_ok) {
  int T = c_.threads;
  std::vector<ThreadOut> outs(T);
  std::atomic<uint64_t> progress{0};
  std::atomic<bool> done{false};
  std::atomic<int> ready{0};
  std::atomic<bool> start{false};
  std::vector<std::thread> ts;
  if (index_) counters_before_ = index_stats().counters;
  // Routed (routes_ set by route()): a worker's ops are the ids of its partition's queue
  // (and, helping, of the others'), passed to op as its `i`.
  std::unique_ptr<Routes> routes = std::move(routes_);
  std::vector<uint32_t> parts(T, Index::kNoPartition);
  for (int t = 0; t < T; ++t) {
    ts.emplace_back([&, t] {
      if (c_.pin) pin_thread(t);
      std::string k, v, out;
      std::mt19937_64 rng(c_.seed * 1000 + t * 7 + std::hash<std::string>{}(name));
      KeyChooser chooser(phase_dist_ ? *phase_dist_ : c_.dist, std::max<uint64_t>(1, c_.keys),
                         rng());
      uint64_t share = total / T + (uint64_t(t) < total % T ? 1 : 0);
      uint64_t n = routes ? UINT64_MAX : share;
      if (routes) parts[t] = index_->partition();  // takes this thread's slot
      ThreadOut& o = outs[t];
      o.lat_ns.reserve(share / 16 + 1);
      ready++;
      while (!start.load()) std::this_thread::yield();
      PersistCounters p0 = thread_persist_counters();
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t id = i;
        if (routes && !routes->take(parts[t], &id)) break;
        bool sample = (i & 15) == 0;
        Clock::time_point t0;
        if (sample) t0 = Clock::now();
        bool ok = op(t, id, rng, chooser, k, v, out);
        if (sample)
          o.lat_ns.push_back(static_cast<uint32_t>(std::min<int64_t>(
              UINT32_MAX,
              std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count())));
        ok ? o.ok++ : o.failed++;
        if ((i & 1023) == 1023) progress.fetch_add(1024, std::memory_order_relaxed);
      }
      PersistCounters p1 = thread_persist_counters();
      o.persist = {p1.flushes - p0.flushes, p1.fences - p0.fences,
                   p1.bytes_flushed - p0.bytes_flushed};
    });
  }
  while (ready.load() < T) std::this_thread::yield();
  if (routes && !routes->help)
    for (uint32_t p = 0; p < routes->q.size(); ++p)
      if (!routes->q[p].empty() && std::find(parts.begin(), parts.end(), p) == parts.end())
        route_error_ = "--routed: no worker thread owns partition " + std::to_string(p) + " of " +
                       std::to_string(routes->q.size()) + " in phase " + name +
                       " (give the index as many partitions as threads, e.g. PMEH zone_threads)";
  auto t0 = Clock::now();
  start = true;
  std::thread bar;
  if (c_.progress && isatty(2)) {
    bar = std::thread([&] {
      auto begin = Clock::now();
      while (!done.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (Clock::now() - begin < std::chrono::seconds(1)) continue;
        std::fprintf(stderr, "\r  %-10s %-8s %-10s %3d%%", base_row("").tags["scheme"].c_str(),
                     c_.variant.c_str(), name.c_str(),
                     int(100.0 * double(progress.load()) / double(std::max<uint64_t>(total, 1))));
      }
      std::fprintf(stderr, "\r%60s\r", "");
    });
  }
  for (auto& t : ts) t.join();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  done = true;
  if (bar.joinable()) bar.join();

  Row r = base_row(name);
  uint64_t ok = 0, failed = 0;
  PersistCounters pc;
  std::vector<uint32_t> lat;
  for (auto& o : outs) {
    ok += o.ok;
    failed += o.failed;
    pc.flushes += o.persist.flushes;
    pc.fences += o.persist.fences;
    pc.bytes_flushed += o.persist.bytes_flushed;
    lat.insert(lat.end(), o.lat_ns.begin(), o.lat_ns.end());
  }
  double n = double(std::max<uint64_t>(total, 1));
  r.values["ops"] = double(total);
  r.values["succeeded"] = double(ok);
  r.values["failed"] = double(failed);
  r.values["seconds"] = secs;
  r.values["mops"] = double(total) / secs / 1e6;
  r.values["flushes_per_op"] = double(pc.flushes) / n;
  r.values["fences_per_op"] = double(pc.fences) / n;
  r.values["bytes_flushed_per_op"] = double(pc.bytes_flushed) / n;
  // A percentile needs enough samples past it: p99.99 only from 10^6 samples up (every 16th
  // operation is timed: 16M operations), p99.9 from 10^5; otherwise the row has none.
  r.values["latency_samples"] = double(lat.size());
  for (auto [p, key, min_samples] : {std::tuple{0.5, "p50_ns", 1.0},
                                     {0.9, "p90_ns", 1.0},
                                     {0.99, "p99_ns", 1e4},
                                     {0.999, "p999_ns", 1e5},
                                     {0.9999, "p9999_ns", kMinSamplesP9999}})
    if (double(lat.size()) >= min_samples) r.values[key] = percentile(lat, p);
  // Time per operation (each thread's share) in units of one dependent miss.
  if (ns_per_miss_ > 0 && secs > 0)
    r.values["miss_equiv"] = (double(T) * secs * 1e9 / n) / ns_per_miss_;
  r.values["expect_all_ok"] = expect_all_ok;
  r.values["expect_none_ok"] = expect_none_ok;
  add_index_state(r);
  rows_->push_back(std::move(r));
}

bool Runner::run_workload(const std::string& w) {
  Target& tg = *target_;
  uint64_t N = std::max<uint64_t>(1, c_.keys);
  auto& ks = ks_;
  auto& next = next_id_;
  uint64_t ver = ++version_;
  auto read = [&](uint64_t id, std::string& k, std::string& out) {
    ks.key(id, &k);
    return tg.get(k, &out) == Code::kOk;
  };
  auto update = [&](uint64_t id, std::string& k, std::string& v) {
    ks.key(id, &k);
    ks.value(id, ver, &v);
    return tg.update(k, v) == Code::kOk;
  };
  auto insert_new = [&](std::string& k, std::string& v) {
    uint64_t id = next.fetch_add(1);
    ks.key(id, &k);
    ks.value(id, 0, &v);
    return tg.insert(k, v) == Code::kOk;
  };
  // Routed: the ids are drawn here, by one chooser, and handed to their owners' queues; the
  // op gets its id as `i`.
  bool r = routed();
  auto draw_routes = [&](uint64_t base) {
    if (!r) return;
    KeyChooser one(c_.dist, N, c_.seed * 1000 + std::hash<std::string>{}(w));
    route(c_.ops, [&](uint64_t) { return base + one.next(N); });
  };
  if (w == "read") {
    draw_routes(0);
    phase(
        w, c_.ops,
        [&, r](int, uint64_t i, auto&, KeyChooser& ch, std::string& k, std::string&,
               std::string& o) { return read(r ? i : ch.next(N), k, o); },
        true, false);
  } else if (w == "negread") {
    draw_routes(kAbsent);
    phase(
        w, c_.ops,
        [&, r](int, uint64_t i, auto&, KeyChooser& ch, std::string& k, std::string&,
               std::string& o) {
          return read(r ? i : kAbsent + ch.next(N), k, o);  // the distribution over absent ids
        },
        false, true);
  } else if (w == "read-batch" || w == "negread-batch") {
    // Index::get_many over batches of c_.batch keys (a thread's last batch: what is left of
    // its share), each key drawn as in read / negread; an op hands out one key's result.
    // Latencies would be of calls, not lookups: the row has none.
    bool neg = w == "negread-batch";
    struct Batch {
      std::vector<std::string> keys, values;
      std::vector<Code> codes;
      size_t next = 0;
    };
    std::vector<Batch> batches(c_.threads);
    for (Batch& b : batches) {
      b.keys.resize(c_.batch);
      b.values.resize(c_.batch);
      b.codes.resize(c_.batch);
      b.next = c_.batch;
    }
    int T = c_.threads;
    uint64_t ops = c_.ops;
    phase(
        w, c_.ops,
        [&, neg, T, ops](int t, uint64_t i, auto&, KeyChooser& ch, std::string&, std::string&,
                         std::string&) {
          Batch& b = batches[t];
          if (b.next == b.keys.size()) {
            uint64_t share = ops / T + (uint64_t(t) < ops % T ? 1 : 0);
            size_t n = size_t(std::min<uint64_t>(b.keys.size(), share - i));
            b.keys.resize(n);  // shorter only for the last batch
            b.values.resize(n);
            b.codes.resize(n);
            for (std::string& k : b.keys) ks.key((neg ? kAbsent : 0) + ch.next(N), &k);
            tg.get_many(b.keys, &b.values, &b.codes);
            b.next = 0;
          }
          return b.codes[b.next++] == Code::kOk;
        },
        !neg, neg);
    for (const char* p : {"p50_ns", "p90_ns", "p99_ns", "p999_ns", "p9999_ns"})
      rows_->back().values.erase(p);
    rows_->back().values["latency_samples"] = 0;
    rows_->back().values["batch"] = double(c_.batch);
  } else if (w == "update") {
    draw_routes(0);
    phase(
        w, c_.ops,
        [&, r](int, uint64_t i, auto&, KeyChooser& ch, std::string& k, std::string& v,
               std::string&) { return update(r ? i : ch.next(N), k, v); },
        true, false);
  } else if (w == "insert") {  // new ids N0 .. N0+ops-1, in the distribution's order
    uint64_t n0 = next.load();
    IdOrder order(c_.dist, c_.ops, c_.seed * 31 + 2);
    phase(
        w, c_.ops,
        [&, n0](int, uint64_t, auto&, KeyChooser&, std::string& k, std::string& v, std::string&) {
          uint64_t id = n0 + order.at(next.fetch_add(1) - n0);
          ks.key(id, &k);
          ks.value(id, 0, &v);
          return tg.insert(k, v) == Code::kOk;
        },
        true, false);
  } else if (w == "delete") {  // loaded ids, each once, in the distribution's order
    uint64_t total = std::min(c_.ops, N);
    int T = c_.threads;
    IdOrder order(c_.dist, N, c_.seed * 31 + 3);
    phase(
        w, total,
        [&, T](int t, uint64_t i, auto&, KeyChooser&, std::string& k, std::string&, std::string&) {
          ks.key(order.at(i * T + t), &k);
          return tg.remove(k) == Code::kOk;
        },
        true, false);
  } else if (w == "mixed") {  // 50% inserts of new keys, 50% positive reads (PMEH, HDNH)
    phase(
        w, c_.ops,
        [&](int, uint64_t, auto& rng, KeyChooser& ch, std::string& k, std::string& v,
            std::string& o) { return rng() & 1 ? insert_new(k, v) : read(ch.next(N), k, o); },
        true, false);
  } else if (w.rfind("ycsb-", 0) == 0) {
    char y = w.size() == 6 ? w[5] : '?';
    int read_pct = y == 'a'   ? 50
                   : y == 'b' ? 95
                   : y == 'c' ? 100
                   : y == 'd' ? 95
                   : y == 'f' ? 50
                              : -1;
    if (read_pct < 0) return false;
    DistSpec latest{Dist::kLatest, 0.99};
    if (y == 'd') phase_dist_ = &latest;
    phase(
        w, c_.ops,
        [&, y, read_pct](int, uint64_t, auto& rng, KeyChooser& ch, std::string& k, std::string& v,
                         std::string& o) {
          bool is_read = int(rng() % 100) < read_pct;
          if (y == 'd') {  // read the latest inserts, insert new keys
            if (!is_read) return insert_new(k, v);
            return read(ch.next(next.load(std::memory_order_relaxed)), k, o);
          }
          uint64_t id = ch.next(N);
          if (is_read) return read(id, k, o);
          if (y == 'f') {  // read-modify-write
            if (!read(id, k, o)) return false;
            return update(id, k, v);
          }
          return update(id, k, v);
        },
        true, false);
    phase_dist_ = nullptr;
  } else if (w == "lfsweep") {
    lfsweep();
  } else if (w == "churn") {
    churn();
  } else if (w == "reload") {
    reload();
  } else {
    return false;
  }
  return true;
}

// Load factor and probe distance over inserts (TurboHash Fig. 1/10, SmartHT's load factor):
// insert in 20 steps; after each, 50K positive and 50K negative reads.
void Runner::lfsweep() {
  uint64_t step = std::max<uint64_t>(1, c_.ops / 20);
  for (int s = 0; s < 20; ++s) {
    phase(
        "lfsweep-insert", step,
        [&](int, uint64_t, auto&, KeyChooser&, std::string& k, std::string& v, std::string&) {
          uint64_t id = next_id_.fetch_add(1);
          ks_.key(id, &k);
          ks_.value(id, 0, &v);
          return target_->insert(k, v) == Code::kOk;
        },
        true, false);
    uint64_t n = next_id_.load();
    if (c_.sweep_deletes) sweep_deletes(n - step, step);
    phase(
        "lfsweep-read", 50000,
        [&, n](int, uint64_t, auto& rng, KeyChooser&, std::string& k, std::string&,
               std::string& o) {
          ks_.key(rng() % n, &k);
          return target_->get(k, &o) == Code::kOk;
        },
        true, false);
    phase(
        "lfsweep-negread", 50000,
        [&](int, uint64_t, auto& rng, KeyChooser&, std::string& k, std::string&, std::string& o) {
          ks_.key(kAbsent + rng() % (1ull << 40), &k);
          return target_->get(k, &o) == Code::kOk;
        },
        false, true);
  }
}

// WOPHI Fig. 5: deletion latency at this load factor. Deletes d = min(1000, step) keys
// spread over the last step's ids, then inserts them again (not counted as a step).
void Runner::sweep_deletes(uint64_t first, uint64_t step) {
  const uint64_t d = std::min<uint64_t>(1000, step), stride = step / d;
  const int T = c_.threads;
  auto victim = [=](int t, uint64_t i) { return first + (i * T + t) * stride; };
  phase(
      "lfsweep-delete", d,
      [&](int t, uint64_t i, auto&, KeyChooser&, std::string& k, std::string&, std::string&) {
        ks_.key(victim(t, i), &k);
        return target_->remove(k) == Code::kOk;
      },
      true, false);
  phase(
      "lfsweep-reinsert", d,
      [&](int t, uint64_t i, auto&, KeyChooser&, std::string& k, std::string& v, std::string&) {
        ks_.key(victim(t, i), &k);
        ks_.value(victim(t, i), 0, &v);
        return target_->insert(k, v) == Code::kOk;
      },
      true, false);
}

// Space under churn: the loaded live set of N keys under random inserts of new keys and
// deletes of live keys, 10 x N operations in 10 steps; the live set stays within 1% of N.
// Row churn-0 is the state after the load; each later row, after one more step. Thread t
// owns the live ids it loaded (id % T == t) and the ones it inserts.
void Runner::churn() {
  const uint64_t N = std::max<uint64_t>(1, c_.keys);
  const int T = c_.threads;
  std::vector<std::vector<uint64_t>> live(T);
  for (uint64_t id = 0; id < N; ++id) live[id % T].push_back(id);
  Row r0 = base_row("churn-0");
  r0.values["churn_ops"] = 0;
  add_index_state(r0);
  const double pm0 = r0.values["pm_bytes_per_key"], lf0 = r0.values["load_factor"];
  const double dram0 = r0.values["dram_bytes_per_key"];
  r0.values["pm_vs_load"] = 1;
  if (dram0 > 0) r0.values["dram_vs_load"] = 1;
  rows_->push_back(r0);
  for (int step = 1; step <= 10; ++step) {
    phase(
        "churn-" + std::to_string(step), N,
        [&](int t, uint64_t, auto& rng, KeyChooser&, std::string& k, std::string& v, std::string&) {
          std::vector<uint64_t>& mine = live[t];
          uint64_t target = N / T, slack = std::max<uint64_t>(1, target / 100);
          bool ins = mine.empty() || mine.size() + slack <= target ? true
                     : mine.size() >= target + slack               ? false
                                                                   : (rng() & 1) != 0;
          if (ins) {
            uint64_t id = next_id_.fetch_add(1);
            ks_.key(id, &k);
            ks_.value(id, 0, &v);
            mine.push_back(id);
            return target_->insert(k, v) == Code::kOk;
          }
          size_t j = rng() % mine.size();
          ks_.key(mine[j], &k);
          mine[j] = mine.back();
          mine.pop_back();
          return target_->remove(k) == Code::kOk;
        },
        true, false);
    Row& r = rows_->back();
    r.values["churn_ops"] = double(N) * step;
    if (pm0 > 0) r.values["pm_vs_load"] = r.values["pm_bytes_per_key"] / pm0;
    // DRAM at rest, once background work (SmartHT's filter rebuild, which holds the old
    // and the new filter while it runs) has finished and retired memory is freed: what the
    // index keeps. dram_bytes_per_key is the reading as the step ended.
    if (dram0 > 0 && index_) {
      index_->impl()->quiesce();
      Stats s = index_stats();
      double rest = s.size ? double(s.dram_bytes) / double(s.size) : 0;
      r.values["dram_bytes_per_key_at_rest"] = rest;
      r.values["dram_vs_load"] = rest / dram0;
    }
    if (lf0 > 0) r.values["lf_vs_load"] = r.values["load_factor"] / lf0;
  }
}

// TurboHash Figs. 11/12 (§4.6): reads of the loaded table, then delete every loaded key and
// insert as many new ones (the same load factor), then the same reads again. Rows
// reload-read / reload-negread (fresh, Figs. 11a/12a), reload-delete, reload-insert,
// reload-read-after / reload-negread-after (Figs. 11b/12b; with the same-size rehash on,
// 12c). Each read row has `neg_probe_distance` / `pos_probe_distance` (buckets read per
// read in that phase) and `deleted_slots` (slots deleted and not yet reused or dropped).
void Runner::reload() {
  const uint64_t N = std::max<uint64_t>(1, c_.keys);
  const int T = c_.threads;
  uint64_t first = 0;  // the live ids: first .. first + N - 1
  auto add_probes = [&] {
    Row& r = rows_->back();
    for (auto [kind, key] : {std::pair{"negative", "neg_probe_distance"},
                             std::pair{"positive", "pos_probe_distance"}}) {
      double reads = r.values["d." + std::string(kind) + "_reads"];
      if (reads > 0) r.values[key] = r.values["d." + std::string(kind) + "_probes"] / reads;
    }
    r.values["deleted_slots"] = r.values["c.deleted_slots"];
  };
  auto reads = [&](const std::string& suffix) {
    phase(
        "reload-read" + suffix, c_.ops,
        [&](int, uint64_t, auto& rng, KeyChooser&, std::string& k, std::string&, std::string& o) {
          ks_.key(first + rng() % N, &k);
          return target_->get(k, &o) == Code::kOk;
        },
        true, false);
    add_probes();
    phase(
        "reload-negread" + suffix, c_.ops,
        [&](int, uint64_t, auto& rng, KeyChooser&, std::string& k, std::string&, std::string& o) {
          ks_.key(kAbsent + rng() % (1ull << 40), &k);
          return target_->get(k, &o) == Code::kOk;
        },
        false, true);
    add_probes();
  };
  reads("");
  phase(
      "reload-delete", N,
      [&](int t, uint64_t i, auto&, KeyChooser&, std::string& k, std::string&, std::string&) {
        ks_.key(first + i * uint64_t(T) + uint64_t(t), &k);
        return target_->remove(k) == Code::kOk;
      },
      true, false);
  add_probes();
  first = next_id_.fetch_add(N);
  phase(
      "reload-insert", N,
      [&](int t, uint64_t i, auto&, KeyChooser&, std::string& k, std::string& v, std::string&) {
        uint64_t id = first + i * uint64_t(T) + uint64_t(t);
        ks_.key(id, &k);
        ks_.value(id, 0, &v);
        return target_->insert(k, v) == Code::kOk;
      },
      true, false);
  add_probes();
  reads("-after");
}

bool Runner::recovery(std::string* error) {
  uint64_t size = index_->size();
  Options o = opts_;
  o.create = false;
  for (bool clean : {true, false}) {
    if (clean) {
      index_->close().ok();
    } else {
      index_->impl()->closed = true;  // dropped without a clean shutdown: a process crash
    }
    index_.reset();
    Status s = Index::open(path_, o, &index_);
    if (!s.ok()) {
      *error = "reopen failed: " + s.to_string();
      return false;
    }
    auto t0 = Clock::now();
    index_->impl()->scheme->wait_idle();  // background recovery work (lazy rebuilds)
    double wait_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    Row r = base_row(clean ? "recover-clean" : "recover-crash");  // (stats() may wait too)
    Stats st = index_->stats();
    r.values["recovery_ms"] = st.open_ms;
    r.values["ready_ms"] = st.open_ms + wait_ms;  // until background recovery finished
    for (auto& [k, v] : st.counters) r.values["c." + k] = v;
    r.values["size"] = double(st.size);
    r.values["keys_intact"] = st.size == size ? 1 : 0;
    rows_->push_back(std::move(r));
  }
  return true;
}

uint64_t Runner::pool_bytes() const {
  if (c_.pool_size) return c_.pool_size;
  uint64_t item = c_.format == Format::kFixed ? 16 : 64 + c_.key_size + c_.value_size;
  uint64_t keys_total = c_.keys + c_.ops * 2;
  for (auto& w : c_.workloads)
    if (w == "churn") keys_total += c_.keys * 10;  // room for a scheme that keeps nothing
  return std::max<uint64_t>(1ull << 30, keys_total * item * 8);
}

// The "limit" row: ns per dependent miss over a buffer of the pool's size in the pool's
// directory, with the run's threads (measured once per process and configuration).
bool Runner::measure_limit(std::string* error) {
  MissLatency m;
  if (!miss_latency(c_.pool_dir, pool_bytes(), c_.threads, &m, error)) return false;
  ns_per_miss_ = m.ns_per_miss;
  Row r = base_row("limit");
  r.values["ns_per_miss"] = m.ns_per_miss;
  r.values["mops"] = double(c_.threads) * 1e3 / m.ns_per_miss;  // misses per µs, all threads
  r.values["miss_equiv"] = 1;
  r.values["limit_bytes"] = double(m.bytes);
  r.values["page_bytes"] = double(m.page_bytes);
  rows_->push_back(std::move(r));
  return true;
}

bool Runner::go(std::string* error) {
  // Refuse a --dist a workload would not honour, before anything runs.
  std::vector<std::string> ws = c_.workloads;
  if (c_.keys > 0) ws.insert(ws.begin(), "load");
  for (auto& w : ws)
    if (w != "ycsb-d" && !honours(w, c_.dist, error)) return false;
  if (c_.routed != RunConfig::Routing::kNone) {
    if (reference()) {
      *error = "--routed routes keys with Index::owner: it needs a pmhash index, not " + c_.variant;
      return false;
    }
    for (auto& w : ws)
      if (w != "load" && w != "read" && w != "negread" && w != "update") {
        *error = "--routed applies to the load and the read, negread and update workloads, not '" +
                 w + "'";
        return false;
      }
  }
  if (c_.limit && !measure_limit(error)) return false;
  if (c_.variant == "dram") {
    target_ = std::make_unique<DramTarget>();
  } else if (c_.variant == "cuckoo") {
#ifdef PMHASH_HAVE_LIBCUCKOO
    target_ = std::make_unique<CuckooTarget>(c_.format == Format::kFixed);
#else
    *error = "variant cuckoo: built without libcuckoo (apt-get install libcuckoo-dev)";
    return false;
#endif
  } else {
    static std::atomic<int> n{0};
    path_ = c_.pool_dir + "/pmhash-bench-" + std::to_string(getpid()) + "-" + std::to_string(n++) +
            ".pool";
    unlink(path_.c_str());
    opts_.scheme = c_.scheme;
    opts_.format = c_.format;
    opts_.mode = c_.variant == "off" ? Mode::kNone : c_.mode;
    opts_.pm_write_delay_ns = c_.delay_ns;
    opts_.prefault = c_.prefault;
    opts_.capacity_hint = c_.capacity_hint;
    opts_.params = c_.params;
    opts_.pool_size = pool_bytes();
    Status s = Index::open(path_, opts_, &index_);
    opts_.prefault = false;  // at creation only: the recovery rows time reopening itself
    if (!s.ok()) {
      *error = "cannot open " + path_ + ": " + s.to_string();
      return false;
    }
    pm::Pool& pool = *index_->impl()->pool;
    page_bytes_ = mapped_page_bytes(pool.base(), pool.size());
    target_ = std::make_unique<IndexTarget>(index_.get());
  }
  if (c_.on_op) target_ = std::make_unique<TraceTarget>(std::move(target_), c_.on_op);
  if (c_.keys > 0) {  // every id once, in the distribution's order
    uint64_t N = c_.keys;
    int T = c_.threads;
    next_id_ = N;
    IdOrder order(c_.dist, N, c_.seed * 31 + 1);
    bool r = routed();  // then `i` is the id (each id once, queued in the same order)
    if (r) route(N, [&](uint64_t pos) { return order.at(pos); });
    phase(
        "load", N,
        [&, T, N, r](int t, uint64_t i, auto&, KeyChooser&, std::string& k, std::string& v,
                     std::string&) {
          uint64_t pos = i * T + t;
          if (!r && pos >= N) return false;
          uint64_t id = r ? i : order.at(pos);
          ks_.key(id, &k);
          ks_.value(id, 0, &v);
          return target_->insert(k, v) == Code::kOk;
        },
        true, false);
  }
  for (auto& w : c_.workloads) {
    if (!route_error_.empty()) break;
    if (!run_workload(w)) {
      *error = "unknown workload '" + w + "'";
      return false;
    }
  }
  if (!route_error_.empty()) {
    *error = route_error_;
    return false;
  }
  bool ok = true;
  if (index_ && c_.recovery && c_.variant == "pm") ok = recovery(error);
  return ok;
}

}  // namespace

bool run(const RunConfig& cfg, std::vector<Row>* rows, std::string* error) {
  Runner r(cfg, rows);
  return r.go(error);
}

}  // namespace pmhash::bench
