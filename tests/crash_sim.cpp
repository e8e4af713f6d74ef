#include "crash_sim.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "index_impl.hpp"
#include "model.hpp"
#include "pm/threads.hpp"

namespace pmhash::testing {

// A file already at the path was left by a killed earlier process with the same pid (a
// test that finds it would open someone else's pool): removed.
std::string temp_pool_path(const std::string& tag) {
  static std::atomic<int> n{0};
  std::string path = "/dev/shm/pmhash-test-" + std::to_string(getpid()) + "-" + tag + "-" +
                     std::to_string(n.fetch_add(1)) + ".pool";
  unlink(path.c_str());
  return path;
}

// ---- CrashSim ----

// The simulator reads the working pool as the hardware would see it at a crash: while a
// background thread of the index (WOPHI's bucket pre-allocation, HDNH's partners) may be
// storing to it between two of its hook calls. Those reads are meant to race (whatever
// they see is a state a crash could leave), so ThreadSanitizer ignores this thread's
// accesses inside these scopes: the pool reads and the simulator's own bookkeeping (under
// mu_), never library code.
#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
struct LikeTheHardware {
  LikeTheHardware() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); }
  ~LikeTheHardware() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
};
#else
struct LikeTheHardware {
  ~LikeTheHardware() {}  // user-provided: a scope guard, not an unused variable
};
#endif

void CrashSim::on_map(char* base, size_t size) {
  main_thread_ = std::this_thread::get_id();
  base_ = base;
  size_ = size;
  image_.assign(base, base + size);  // what is in the file is persisted
  pending_.clear();
  unfenced_.clear();
  durable_seq_.assign(size / 64, 0);
}

// In multi-threaded mode every hook call takes mu_: while one thread is at a crash point,
// the others park at their next flush or fence.
// Hook calls always serialize (an index may flush from a background thread too).
namespace {
// This thread is inside a writer's operation (counted in busy_). Readers and the index's
// background threads are not: the crashing thread does not wait for them to park.
thread_local bool tls_busy = false;
}  // namespace

std::unique_lock<std::mutex> CrashSim::park() {
  std::unique_lock<std::mutex> lk(mu_, std::defer_lock);
  bool count = multi_threaded && tls_busy;
  if (count) parked_++;
  lk.lock();
  if (count) parked_--;
  return lk;
}

void CrashSim::op_begin(bool reader) {
  if (!multi_threaded) return;
  for (;;) {  // no operation starts while the world is stopped
    if (!reader) busy_++;
    tls_busy = !reader;
    if (!stop_.load()) return;
    op_end(reader);
    while (stop_.load()) std::this_thread::yield();
  }
}

void CrashSim::op_end(bool reader) {
  if (multi_threaded && !reader) busy_--;
  tls_busy = false;
}

void CrashSim::snapshot_ordered(uint64_t line, bool flushed) {
  Snapshot sn;
  LikeTheHardware reading_the_pool;
  std::memcpy(sn.bytes.data(), base_ + line * 64, 64);
  sn.flushed = flushed;
  sn.by = pm::thread_token();
  ordered_[line].push_back(sn);
}

void CrashSim::on_line_order(const void* addr) {
  if (base_ == nullptr) return;
  auto lk = park();
  snapshot_ordered(static_cast<uint64_t>(static_cast<const char*>(addr) - base_) / 64, false);
}

void CrashSim::on_flush(const void* addr, size_t len) {
  if (base_ == nullptr) return;
  auto lk = park();
  uint64_t start = static_cast<uint64_t>(static_cast<const char*>(addr) - base_);
  LikeTheHardware reading_the_pool;
  for (uint64_t line = start / 64; line * 64 < start + len; ++line) {
    Flushed f{{}, ++flush_seq_};
    std::memcpy(f.bytes.data(), base_ + line * 64, 64);
    pending_[line] = f;
    unfenced_[pm::thread_token()][line] = f;
    if (ordered_.count(line)) snapshot_ordered(line, true);
  }
}

void CrashSim::hold_other_threads(bool hold) {
  {
    std::lock_guard<std::mutex> g(hold_mu_);
    hold_ = hold;
  }
  hold_cv_.notify_all();
}

void CrashSim::on_fence() {
  if (base_ == nullptr) return;
  if (!multi_threaded && std::this_thread::get_id() != main_thread_) {
    std::unique_lock<std::mutex> g(hold_mu_);
    hold_cv_.wait(g, [&] { return !hold_; });
  }
  auto lk = park();
  ++fences_;
  // Single-threaded mode: only the workload thread crashes (a background thread of the
  // index, e.g. a grower, only records; its writes are covered when the workload crashes).
  bool crash_here = multi_threaded || any_thread || std::this_thread::get_id() == main_thread_;
  if (crash_here && sample_rate < 1.0) {
    uint64_t x = (fences_ + sample_seed) * 0x9E3779B97F4A7C15ull;  // seeded, reproducible
    x ^= x >> 31;
    crash_here = double(x % 1000000) < sample_rate * 1e6;
  }
  if (at_crash_point && !in_callback_ && crash_here && fences_ % crash_every == 0) {
    in_callback_ = true;
    if (multi_threaded) {
      // Stop the world: every other thread inside an operation parks at its next primitive
      // call (or is blocked on a lock this thread holds: bounded wait).
      stop_ = true;
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      int self = tls_busy ? 1 : 0;  // a reader or a background thread may crash too
      while (parked_.load() + self < busy_.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    }
    // The exploration's own flushes and fences (recoveries of crash images) are not the
    // workload's: keep them out of this thread's counters (schemes count fences per path).
    const PersistCounters saved = pm::tls_counters;
    at_crash_point();
    pm::tls_counters = saved;
    stop_ = false;
    in_callback_ = false;
  }
  commit_own_flushes();
}

// The fence makes this thread's flushes durable (not another thread's: sfence orders only
// the calling thread's write-backs).
void CrashSim::commit_own_flushes() {
  const uint64_t me = pm::thread_token();
  auto mine = unfenced_.find(me);
  if (mine == unfenced_.end()) return;
  for (auto& [line, f] : mine->second) {
    if (f.seq > durable_seq_[line]) {
      std::memcpy(image_.data() + line * 64, f.bytes.data(), 64);
      durable_seq_[line] = f.seq;
    }
    auto p = pending_.find(line);
    if (p != pending_.end() && p->second.seq <= durable_seq_[line]) pending_.erase(p);
  }
  unfenced_.erase(mine);
  // A line's recorded order stays until its content is committed: drop the snapshots up to
  // the last one this thread flushed (now the persisted image), keep the later ones.
  for (auto it = ordered_.begin(); it != ordered_.end();) {
    auto& v = it->second;
    size_t last = v.size();
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i].flushed && v[i].by == me) last = i;
    if (last != v.size()) v.erase(v.begin(), v.begin() + static_cast<long>(last) + 1);
    it = v.empty() ? ordered_.erase(it) : std::next(it);
  }
}

const std::vector<CrashSim::Dirty>& CrashSim::dirty() {
  if (dirty_at_ == fences_) return dirty_;
  dirty_.clear();
  LikeTheHardware reading_the_pool;
  for (uint64_t line = 0; line < size_ / 64; ++line) {
    auto p = pending_.find(line);
    const char* work = base_ + line * 64;
    const char* img = image_.data() + line * 64;
    if (p == pending_.end() && std::memcmp(work, img, 64) == 0) continue;
    for (int w = 0; w < 8; ++w) {
      Dirty d{};
      d.word = line * 8 + w;
      std::memcpy(&d.old_value, img + w * 8, 8);
      std::memcpy(&d.new_value, work + w * 8, 8);
      if (p != pending_.end()) {
        std::memcpy(&d.flushed_value, p->second.bytes.data() + w * 8, 8);
        d.has_flushed = d.flushed_value != d.old_value && d.flushed_value != d.new_value;
      }
      if (d.old_value != d.new_value || d.has_flushed) dirty_.push_back(d);
    }
  }
  dirty_at_ = fences_;
  return dirty_;
}

void CrashSim::make_image(Mix mix, uint64_t seed, std::vector<char>* out) {
  const auto& ds = dirty();
  out->assign(image_.begin(), image_.end());
  std::mt19937_64 rng(seed);
  uint64_t line = ~uint64_t{0};
  int line_choice = 0;
  for (const Dirty& d : ds) {
    int choice;  // 0 old, 1 new, 2 flushed
    switch (mix) {
      case Mix::kAllOld:
        choice = 0;
        break;
      case Mix::kAllNew:
        choice = 1;
        break;
      case Mix::kPerLine:
        if (d.word / 8 != line) {
          line = d.word / 8;
          line_choice = static_cast<int>(rng() % 3);
        }
        choice = line_choice;
        break;
      default:
        choice = static_cast<int>(rng() % 3);
        break;
    }
    if (choice == 2 && !d.has_flushed) choice = 1;
    uint64_t v = choice == 0 ? d.old_value : choice == 1 ? d.new_value : d.flushed_value;
    std::memcpy(out->data() + d.word * 8, &v, 8);
  }
  // A line whose write order is known persists as a prefix of its writes: pick a segment
  // [s_i, s_i+1] of its sequence (persisted image, recorded points, working content) and
  // mix words only within it.
  for (auto& [line, snaps] : ordered_) {
    std::vector<const char*> seq;
    seq.push_back(image_.data() + line * 64);
    for (auto& sn : snaps) seq.push_back(sn.bytes.data());
    seq.push_back(base_ + line * 64);
    char* dst = out->data() + line * 64;
    if (mix == Mix::kAllOld) {
      std::memcpy(dst, seq.front(), 64);
      continue;
    }
    if (mix == Mix::kAllNew) {
      std::memcpy(dst, seq.back(), 64);
      continue;
    }
    size_t i = rng() % (seq.size() - 1);
    for (int w = 0; w < 8; ++w)
      std::memcpy(dst + w * 8, (mix == Mix::kPerLine || rng() % 2 ? seq[i + 1] : seq[i]) + w * 8,
                  8);
  }
}

// ---- the harness ----

namespace {

enum class OpKind { kInsert, kUpsert, kUpdate, kRemove, kGet };

// A key for a failure message: its bytes in hex (fixed-format keys are binary).
std::string printable(const std::string& key) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : key) out += {digits[c >> 4], digits[c & 15]};
  return out;
}

struct Op {
  OpKind kind;
  std::string key, value;
};

Code apply(Model& m, const Op& op) {
  std::string v;
  switch (op.kind) {
    case OpKind::kInsert:
      return m.insert(op.key, op.value);
    case OpKind::kUpsert:
      return m.upsert(op.key, op.value);
    case OpKind::kUpdate:
      return m.update(op.key, op.value);
    case OpKind::kRemove:
      return m.remove(op.key);
    case OpKind::kGet:
      return m.get(op.key, &v);
  }
  return Code::kOk;
}

Code apply(Index& idx, const Op& op, std::string* got) {
  switch (op.kind) {
    case OpKind::kInsert:
      return idx.insert(op.key, op.value).code();
    case OpKind::kUpsert:
      return idx.upsert(op.key, op.value).code();
    case OpKind::kUpdate:
      return idx.update(op.key, op.value).code();
    case OpKind::kRemove:
      return idx.remove(op.key).code();
    case OpKind::kGet:
      return idx.get(op.key, got).code();
  }
  return Code::kOk;
}

class OpGen {
 public:
  OpGen(uint64_t seed, int keys, bool fixed, uint64_t key_base = 0, int churn_removes = 0,
        uint32_t first_version = 0)
      : rng_(seed),
        keys_(keys),
        fixed_(fixed),
        base_(key_base),
        churn_removes_(churn_removes),
        version_(first_version) {}
  Op next(int ramp_until, int i) {
    Op op;
    uint64_t k = base_ + rng_() % keys_;
    int r = static_cast<int>(rng_() % 100);
    if (i < ramp_until) r = 0;  // fill first, so tables grow (and resize)
    if (churn_removes_ > 0)     // churn: inserts and removes only
      op.kind = r < 100 - churn_removes_ ? OpKind::kInsert : OpKind::kRemove;
    else
      op.kind = r < 40   ? OpKind::kInsert
                : r < 60 ? OpKind::kUpsert
                : r < 70 ? OpKind::kUpdate
                : r < 88 ? OpKind::kRemove
                         : OpKind::kGet;
    op.key = make_key(k, fixed_);
    op.value = make_value(op.key, ++version_, fixed_);
    return op;
  }

 private:
  std::mt19937_64 rng_;
  uint64_t keys_;
  bool fixed_;
  uint64_t base_;
  int churn_removes_;
  uint32_t version_ = 0;
};

void write_file(const std::string& path, const std::vector<char>& buf) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  size_t done = 0;
  while (fd >= 0 && done < buf.size()) {
    ssize_t n = pwrite(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (fd >= 0) close(fd);
}

struct Harness {
  Harness(const CrashConfig& c, CrashResult& r)
      : cfg(c),
        res(r),
        fixed(c.format == Format::kFixed),
        img_path(temp_pool_path("crash-img")),
        img2_path(temp_pool_path("crash-img2")) {}
  const CrashConfig& cfg;
  CrashResult& res;
  bool fixed;
  Options opts;
  std::string img_path, img2_path;
  bool creating = true;  // the crash interrupts pool creation
  uint64_t point = 0;

  // Acknowledged state and the operations in flight (one per worker thread; workers own
  // disjoint keys). Workers update it at operation boundaries; a crash point snapshots it.
  std::mutex state_mu;
  Model acked;
  std::vector<std::optional<Op>> inflight;
  // Durable linearizability: per key, the number of acknowledged operations (its
  // generation) and the result of the last completed read made while the generation did
  // not change (so it saw the acknowledged state or the operation in flight on that key).
  std::map<std::string, uint64_t> key_gen;
  std::map<std::string, std::optional<std::string>> observed;  // valid at key_gen
  std::map<std::string, uint64_t> observed_gen;
  std::atomic<bool> workers_done{false};
  std::atomic<uint64_t> reads_done{0};  // completed reads, for the workers' pacing
  std::atomic<bool> exploring{false};   // a crash point has its snapshot, makes its images
  // The snapshot the current crash point is checked against.
  Model snap_acked;
  std::vector<Op> snap_inflight;
  std::map<std::string, std::optional<std::string>> snap_observed;

  void fail(const std::string& what) {
    res.failures++;
    if (res.messages.size() < 8)
      res.messages.push_back("crash point " + std::to_string(res.crash_points) + ": " + what);
  }

  // The oracle, on a recovered index: every key not touched by an in-flight operation has
  // its acknowledged value; each in-flight key has its value from before or after its
  // operation. Returns the model of what it found (for the follow-up).
  bool verify(Index& idx, Model* matched, const std::string& where) {
    std::string report;
    uint64_t size_first = cfg.introspect_first ? idx.size() : 0;
    if (!cfg.introspect_first && !idx.impl()->check(&report)) {
      fail(where + ": check failed: " + report.substr(0, 300));
      return false;
    }
    std::map<std::string, std::string> got;
    bool dup = false;
    std::pair<std::map<std::string, std::string>*, bool*> ctx{&got, &dup};
    idx.for_each(
        [](void* c, std::string_view k, std::string_view v) {
          auto* p = static_cast<std::pair<std::map<std::string, std::string>*, bool*>*>(c);
          if (!p->first->emplace(std::string(k), std::string(v)).second) *p->second = true;
        },
        &ctx);
    if (dup) fail(where + ": a key appears twice");
    if (cfg.introspect_first) {
      if (size_first != got.size())
        fail(where + ": size() as the first call after recovery is " + std::to_string(size_first) +
             ", for_each visits " + std::to_string(got.size()));
      if (!idx.impl()->check(&report)) {
        fail(where + ": check failed: " + report.substr(0, 300));
        return false;
      }
    }
    for (auto& [k, v] : got)
      if (!value_ok(k, v, fixed)) {
        fail(where + ": torn value");
        return false;
      }
    const auto& a = snap_acked.items();
    std::map<std::string, std::pair<std::optional<std::string>, std::optional<std::string>>> alt;
    for (const Op& op : snap_inflight) {
      Model one;
      std::string v;
      if (snap_acked.get(op.key, &v) == Code::kOk) one.upsert(op.key, v);
      std::optional<std::string> before, after;
      if (one.get(op.key, &v) == Code::kOk) before = v;
      apply(one, op);
      if (one.get(op.key, &v) == Code::kOk) after = v;
      alt[op.key] = {before, after};
    }
    std::string detail, bad_key;
    auto value_at = [](const std::map<std::string, std::string>& m, const std::string& k) {
      auto it = m.find(k);
      return it == m.end() ? std::optional<std::string>() : std::optional<std::string>(it->second);
    };
    std::set<std::string> keys;
    for (auto& [k, v] : got) keys.insert(k);
    for (auto& [k, v] : a) keys.insert(k);
    for (auto& [k, v] : alt) keys.insert(k);
    for (const std::string& k : keys) {
      std::optional<std::string> g = value_at(got, k), want = value_at(a, k);
      auto it = alt.find(k);
      auto ob = snap_observed.find(k);
      if (ob != snap_observed.end()) {
        // A completed read saw ob->second: the crash must not take it back.
        const auto& seen = ob->second;
        if (it == alt.end() ? seen != want
                            : seen != it->second.first && seen != it->second.second) {
          detail = "a read returned a value that was neither acknowledged nor in flight";
        } else if (it != alt.end() && seen != it->second.first && g != seen) {
          detail = std::string("a completed read saw the in-flight operation's ") +
                   (seen ? "value" : "delete") + ", the crash took it back";
        }
      }
      if (!detail.empty()) {
        bad_key = k;
        break;
      }
      if (it != alt.end()) {
        if (g != it->second.first && g != it->second.second)
          detail = "an in-flight operation was partially applied";
      } else if (g != want) {
        detail = !g      ? "acknowledged key lost"
                 : !want ? "key that was never written"
                         : "acknowledged value lost";
      }
      if (!detail.empty()) {
        bad_key = k;
        break;
      }
    }
    if (!detail.empty()) {
      fail(where + ": " + detail + " (key " + printable(bad_key) + ")");
      return false;
    }
    if (idx.size() != got.size()) fail(where + ": size() disagrees with the contents");
    Model m;
    for (auto& [k, v] : got) m.upsert(k, v);
    *matched = m;
    return true;
  }

  void followup(Index& idx, Model m) {
    // Versions of their own: no follow-up value equals a workload operation's.
    OpGen gen(cfg.seed * 7919 + point, cfg.keys * 2, fixed, 0, 0, uint32_t{1} << 30);
    std::string got, want;
    for (int i = 0; i < 60; ++i) {
      Op op = gen.next(20, i);
      Code c = apply(idx, op, &got);
      Code e = apply(m, op);
      if (c != e) {
        fail("follow-up: op returned " + std::string(code_name(c)) + ", model " + code_name(e));
        return;
      }
      if (op.kind == OpKind::kGet && c == Code::kOk && (m.get(op.key, &want), want != got)) {
        fail("follow-up: get returned a wrong value");
        return;
      }
    }
    std::string report;
    // IndexImpl's check: Index::check() refuses to run inside a call (this is inside the
    // crashing write of the simulated index).
    if (!idx.impl()->check(&report)) fail("follow-up: check failed: " + report.substr(0, 300));
  }

  // Opens a crash image; with `nested`, also crashes inside its recovery.
  std::string mix_name;
  bool sweep_thread = false;  // recover_and_verify waits for a background sweep
  void recover_and_verify(const std::string& path, bool nested, bool do_followup) {
    Options o = opts;
    o.create = false;
    OpenHooks h;
    h.chunk_size = cfg.chunk_size;
    CrashSim sim2;
    int nested_points = 0;
    std::vector<char> buf2;
    if (nested) {
      sim2.at_crash_point = [&] {
        if (nested_points++ >= 6) return;
        if (sweep_thread) res.sweep_crash_points++;
        sim2.make_image(CrashSim::Mix::kPerWord, cfg.seed + point * 31 + nested_points, &buf2);
        write_file(img2_path, buf2);
        res.recovery_states++;
        recover_and_verify(img2_path, false, false);
      };
      h.persist_hook = &sim2;
      // Their open starts the background sweep and returns: its fence waits until any_thread
      // is set below (else it may come first, and is no crash point).
      sim2.hold_other_threads(cfg.scheme == "turbohash" || cfg.scheme == "pmeh");
    }
    std::unique_ptr<Index> idx;
    Status s = open_index(path, o, h, &idx);
    // A background sweep (TurboHash, PMEH) is recovery too: crash inside it (its thread's
    // fences are crash points while this one waits).
    if (s.ok() && nested) {
      sweep_thread = true;
      sim2.any_thread = true;
      sim2.hold_other_threads(false);
      idx->impl()->scheme->wait_idle();
      sim2.any_thread = false;
      sweep_thread = false;
    }
    sim2.hold_other_threads(false);
    sim2.at_crash_point = nullptr;
    res.states++;
    if (!s.ok()) {
      // Before its magic is written a pool is not a pool; creation was never acknowledged.
      if (!(creating && s.code() == Code::kNotAPool)) fail("recovery failed: " + s.to_string());
      return;
    }
    std::string where =
        std::string(nested ? "after recovery (crashed once inside it)" : "after recovery") + " [" +
        mix_name + ", " + std::to_string(snap_inflight.size()) + " op(s) in flight]";
    Model m;
    bool ok = verify(*idx, &m, where);  // (reads only)
    // The swept blocks are read before the follow-up writes could reuse them.
    idx->impl()->scheme->wait_idle();        // a background sweep has finished
    if (idx->impl()->alloc->swept() != 0) {  // a crash between mark and publish, or between
      res.swept_states++;                    // unpublish and unmark, or untaken spare blocks
      res.swept_blocks += idx->impl()->alloc->swept();
      if (swept_an_inflight_item(*idx)) res.write_window_states++;
    }
    if (ok && do_followup) followup(*idx, m);
  }

  // Of the blocks the recovery's sweep freed, one that holds an in-flight operation's new
  // item (the crash fell between the item's write and its publication) or the item it was
  // replacing or deleting (between the unpublish and the unmark). Values are unique per
  // operation, and spare blocks never taken hold neither.
  bool swept_an_inflight_item(Index& idx) {
    const common::Items& items = *idx.impl()->items;
    if (!items.variable()) return false;
    for (uint64_t off : idx.impl()->alloc->last_swept()) {
      std::string_view k;
      std::string v;
      if (!items.item_key(off, &k) || !items.read_value(off, &v)) continue;
      for (const Op& op : snap_inflight) {
        std::string before;
        bool had = snap_acked.get(op.key, &before) == Code::kOk;
        if (k == op.key && (v == op.value || (had && v == before))) return true;
      }
    }
    return false;
  }

  void at_crash_point(CrashSim& sim) {
    res.crash_points++;
    ++point;
    {
      std::lock_guard<std::mutex> g(state_mu);
      snap_acked = acked;
      snap_inflight.clear();
      for (auto& op : inflight)
        if (op) snap_inflight.push_back(*op);
      snap_observed.clear();
      for (auto& [k, obs] : observed)
        if (observed_gen[k] == key_gen[k]) snap_observed[k] = obs;
      res.read_constraints += snap_observed.size();
    }
    exploring = true;
    // (The harness's test: give an operation that starts now the time to store before the
    // images are taken.)
    if (cfg.start_inside_crash_points) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::vector<char> buf;
    std::vector<std::pair<CrashSim::Mix, uint64_t>> mixes = {{CrashSim::Mix::kAllOld, 0},
                                                             {CrashSim::Mix::kAllNew, 0}};
    for (int i = 0; i < cfg.random_images; ++i) {
      mixes.push_back({CrashSim::Mix::kPerLine, cfg.seed * 1000003 + point * 17 + i});
      mixes.push_back({CrashSim::Mix::kPerWord, cfg.seed * 1000033 + point * 19 + i});
    }
    if (sim.dirty_words() == 0) mixes.resize(1);  // every image would be the same
    static const char* names[] = {"all old", "all new", "per line", "per word"};
    for (size_t i = 0; i < mixes.size(); ++i) {
      sim.make_image(mixes[i].first, mixes[i].second, &buf);
      mix_name = names[static_cast<int>(mixes[i].first)];
      write_file(img_path, buf);
      bool nested = cfg.recovery_crash_every > 0 && point % cfg.recovery_crash_every == 0 &&
                    i + 1 == mixes.size();
      bool fu = cfg.followup_every > 0 && (res.states % cfg.followup_every) == 0;
      recover_and_verify(img_path, nested, fu);
    }
    exploring = false;
  }

  // The harness's test (CrashConfig::start_inside_crash_points): wait (at most 50 ms) until
  // a crash point has taken its snapshot and is making its images, so that this operation
  // starts inside it.
  void wait_inside_crash_point() {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (!exploring.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }

  // An operation is in flight from here: recorded while the world runs. A crash point sets
  // stop_ before it snapshots the state (under state_mu), so an operation it finds neither
  // acknowledged nor in flight has not started, and waits until the crash point is over.
  // (Recorded after op_begin alone, an operation could start between the two and change the
  // pool unseen: "acknowledged key lost" in the all-new image of a stop-the-world test.)
  void start(CrashSim& sim, int t, const Op& op) {
    for (;;) {
      sim.op_begin();
      if (cfg.start_inside_crash_points) wait_inside_crash_point();
      std::lock_guard<std::mutex> g(state_mu);
      if (!sim.stopped()) {
        inflight[t] = op;
        return;
      }
      sim.op_end();
    }
  }

  // One worker: its own keys (offset by thread), its own op sequence.
  void worker(Index& idx, CrashSim& sim, int t) {
    OpGen gen(cfg.seed + 1000 * t, cfg.keys, fixed, uint64_t(t) * 1000000, cfg.churn_removes);
    std::string got, want;
    for (int i = 0; i < cfg.ops && res.failures == 0; ++i) {
      Op op = gen.next(cfg.keys / 2, i);
      wait_for_readers(i);
      start(sim, t, op);
      Code c = apply(idx, op, &got);
      Code e;
      bool wrong_value = false;
      {
        std::lock_guard<std::mutex> g(state_mu);
        inflight[t].reset();
        e = apply(acked, op);
        key_gen[op.key]++;
        wrong_value =
            op.kind == OpKind::kGet && c == Code::kOk && (acked.get(op.key, &want), want != got);
      }
      sim.op_end();
      if (c != e || wrong_value) {
        std::lock_guard<std::mutex> g(state_mu);
        fail("workload op " + std::to_string(i) + " of thread " + std::to_string(t) + " returned " +
             code_name(c) + ", model " + code_name(e) + (wrong_value ? " (wrong value)" : ""));
      }
    }
  }

  // Readers between crash points are what the read checks need, and a stopped world starves
  // them (they wait while a crash point explores; the workers run first when it ends): under
  // ASan one run completed 2 reads in 240 operations. So a worker starts its i-th operation
  // only once the readers have completed i reads.
  void wait_for_readers(int i) {
    if (cfg.readers == 0 || cfg.threads == 1) return;  // readers run only beside workers
    while (reads_done.load() < uint64_t(i) && res.failures == 0) std::this_thread::yield();
  }

  // A reader: random keys of every worker; each completed read is recorded (see observed).
  void reader(Index& idx, CrashSim& sim, int r) {
    std::mt19937_64 rng(cfg.seed * 31 + 7 * r);
    std::string got;
    while (!workers_done.load() && res.failures == 0) {
      std::string key = make_key(uint64_t(rng() % cfg.threads) * 1000000 + rng() % cfg.keys, fixed);
      sim.op_begin(true);
      uint64_t gen;
      {
        std::lock_guard<std::mutex> g(state_mu);
        gen = key_gen[key];
      }
      Status s = idx.get(key, &got);
      std::optional<std::string> obs;
      if (s.ok()) obs = got;
      std::lock_guard<std::mutex> g(state_mu);
      res.reads++;
      if (!s.ok() && s.code() != Code::kNotFound) {
        fail("reader: get returned " + s.to_string());
      } else if (obs && !value_ok(key, *obs, fixed)) {
        fail("reader: torn value");
      } else if (key_gen[key] == gen) {
        observed[key] = obs;
        observed_gen[key] = gen;
      }
      sim.op_end(true);
      reads_done++;
    }
  }
};

}  // namespace

CrashResult run_crash_test(const CrashConfig& cfg) {
  CrashResult res;
  Harness h(cfg, res);
  h.opts.scheme = cfg.scheme;
  h.opts.format = cfg.format;
  h.opts.mode = Mode::kEmulated;
  h.opts.pool_size = cfg.pool_size;
  h.opts.params = cfg.params;
  h.inflight.resize(cfg.threads);
  std::string path = temp_pool_path("crash-main");
  CrashSim sim;
  sim.multi_threaded = cfg.threads > 1;
  sim.crash_every = cfg.crash_every;
  sim.sample_rate = cfg.sample_rate;
  sim.sample_seed = cfg.seed;
  sim.at_crash_point = [&] { h.at_crash_point(sim); };
  OpenHooks hooks;
  hooks.persist_hook = &sim;
  hooks.mutations = cfg.mutations;
  hooks.chunk_size = cfg.chunk_size;
  {
    std::unique_ptr<Index> idx;
    Status s = open_index(path, h.opts, hooks, &idx);
    h.creating = false;
    if (!s.ok()) {
      h.fail("create failed: " + s.to_string());
    } else {
      idx->impl()->alloc->spares().share_one_stripe(cfg.one_spare_stripe);
      if (cfg.threads == 1) {
        h.worker(*idx, sim, 0);  // on the thread that opened the pool: it takes the crashes
      } else {
        // Yields and short sleeps at the persistence primitives widen the window between a
        // store and its persist, so readers run inside it.
        pm::chaos_level.store(32);
        std::vector<std::thread> ts, rs;
        for (int t = 0; t < cfg.threads; ++t) ts.emplace_back([&, t] { h.worker(*idx, sim, t); });
        for (int r = 0; r < cfg.readers; ++r) rs.emplace_back([&, r] { h.reader(*idx, sim, r); });
        for (auto& t : ts) t.join();
        h.workers_done = true;
        for (auto& t : rs) t.join();
        pm::chaos_level.store(0);
      }
      idx->impl()->scheme->counters(&res.counters);
      sim.at_crash_point = nullptr;
    }
  }
  unlink(path.c_str());
  unlink(h.img_path.c_str());
  unlink(h.img2_path.c_str());
  return res;
}

}  // namespace pmhash::testing
