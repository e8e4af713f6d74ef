// The crash simulator and the crash/recovery oracle (docs/crash-testing.md).
//
// CrashSim plugs into the persistence primitives' hook and keeps a shadow *persisted image*
// of the pool: flush() records the flushed lines' content as pending, fence() commits the
// pending lines into the image. At a crash point (every fence) the words that differ
// between the working pool and the image were written but are not known to be persisted;
// a crash image takes, per dirty word (or per line), the old, the new, or the flushed-but-
// not-fenced content.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pm/persist.hpp"
#include "pmhash/index.hpp"

namespace pmhash::testing {

class CrashSim : public pm::PersistHook {
 public:
  enum class Mix { kAllOld, kAllNew, kPerLine, kPerWord };

  void on_map(char* base, size_t size) override;
  void on_flush(const void* addr, size_t len) override;
  void on_fence() override;
  void on_line_order(const void* addr) override;

  // Called at every fence, before the fence commits (the crash point).
  std::function<void()> at_crash_point;
  // Builds a crash image of the current crash point.
  void make_image(Mix mix, uint64_t seed, std::vector<char>* out);
  // Multi-threaded mode: the harness brackets each operation, so no operation starts while
  // a crash point is being explored; hook calls serialize, so other threads park at their
  // next primitive call (stop the world).
  bool multi_threaded = false;
  // Single-threaded mode, while the workload thread only waits: crash on any thread (the
  // recovery's background sweep).
  std::atomic<bool> any_thread{false};
  // Single-threaded mode: while held, a fence of any other thread waits (before it is a
  // crash point or not) until released. Only while the workload thread waits for nothing
  // that such a thread must do (a scheme whose open starts a background sweep and returns).
  void hold_other_threads(bool hold);
  uint64_t crash_every = 1;  // crash at every n-th fence
  double sample_rate = 1.0;  // sampled mode: crash at a seeded random fraction of the fences
  uint64_t sample_seed = 1;
  // Reader threads (reader = true) do not count as busy: they never hold a PM write in
  // progress, so the crashing thread does not wait for them to park.
  void op_begin(bool reader = false);
  void op_end(bool reader = false);
  bool stopped() const { return stop_.load(); }  // a crash point is being explored
  size_t dirty_words() { return dirty().size(); }

 private:
  struct Dirty {
    uint64_t word;  // word index
    uint64_t old_value, new_value, flushed_value;
    bool has_flushed;
  };
  const std::vector<Dirty>& dirty();

  char* base_ = nullptr;
  size_t size_ = 0;
  std::vector<char> image_;
  // A flush is made durable by a fence of the thread that issued it (x86: sfence orders
  // only its own thread's clwb), so flushed content is kept per thread until that thread
  // fences. pending_ holds each line's newest flushed, not yet durable content (any thread):
  // what a crash may have written back.
  struct Flushed {
    std::array<char, 64> bytes;
    uint64_t seq;  // flush order: an older flush never overwrites a newer durable one
  };
  std::unordered_map<uint64_t, Flushed> pending_;
  // By pm::thread_token (never reused, unlike a std::thread::id: an exited thread's
  // unfenced flushes must not become durable by a new thread's fence).
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, Flushed>> unfenced_;
  std::vector<uint64_t> durable_seq_;  // per line: the seq of the content in image_
  uint64_t flush_seq_ = 0;
  void commit_own_flushes();
  // Lines with a program order recorded since the last fence (line_order() and flushes, in
  // call order): such a line persists as a prefix of its writes, never out of order.
  struct Snapshot {
    std::array<char, 64> bytes;
    bool flushed;  // taken by a flush (else by line_order)
    uint64_t by;   // pm::thread_token of the thread that took it
  };
  std::unordered_map<uint64_t, std::vector<Snapshot>> ordered_;
  void snapshot_ordered(uint64_t line, bool flushed);
  uint64_t fences_ = 0;
  bool in_callback_ = false;
  std::vector<Dirty> dirty_;
  uint64_t dirty_at_ = ~uint64_t{0};  // fence count dirty_ was computed at
  std::unique_lock<std::mutex> park();
  std::mutex mu_;
  std::atomic<int> parked_{0}, busy_{0};
  std::atomic<bool> stop_{false};
  std::thread::id main_thread_;
  std::mutex hold_mu_;
  std::condition_variable hold_cv_;
  bool hold_ = false;
};

struct CrashConfig {
  std::string scheme;
  Format format = Format::kFixed;
  std::map<std::string, std::string> params;  // small tables, so resizes happen
  int ops = 200;
  int keys = 48;  // key space (small: many updates and deletes)
  uint64_t seed = 1;
  int random_images = 2;         // per-line and per-word random mixes per crash point
  int followup_every = 16;       // run the follow-up workload at every n-th state
  int recovery_crash_every = 8;  // crash inside recovery at every n-th crash point
  uint64_t mutations = 0;        // fault injection (the harness must then fail)
  uint64_t pool_size = 2u << 20;
  uint64_t chunk_size = 64u << 10;
  int threads = 1;           // > 1: concurrent workers on disjoint keys, stop-the-world crashes
  int readers = 0;           // with threads > 1: reader threads over every worker's keys
  uint64_t crash_every = 1;  // crash at every n-th fence
  double sample_rate = 1.0;  // < 1: sampled mode, a seeded random subset of the fences
  // The first calls on a recovered index are size() and for_each() (before check(), which
  // could otherwise repair or mask what they would report).
  bool introspect_first = false;
  // > 0: the workers' ops are inserts and removes only, this percent removes (churn: chain
  // buckets empty and are reclaimed). 0: the default mix.
  int churn_removes = 0;
  // Test of the harness: with threads > 1, a worker entering an operation waits (at most
  // 50 ms) until another thread's crash point has taken its snapshot before it records the
  // operation in flight, so the operation starts while that crash point is explored.
  bool start_inside_crash_points = false;
  // Every thread takes spare blocks from one stripe (pm::SpareBlocks::share_one_stripe), so
  // writers take blocks another writer refilled.
  bool one_spare_stripe = false;
};

struct CrashResult {
  uint64_t states = 0;           // crash images recovered and checked
  uint64_t recovery_states = 0;  // of which crashed inside recovery
  uint64_t crash_points = 0;
  uint64_t failures = 0;
  // Recovered states whose recovery sweep freed blocks (pm::Allocator::sweep): crashes
  // inside a log-free allocation or free. And how many blocks those sweeps freed.
  uint64_t swept_states = 0, swept_blocks = 0;
  // Of those, states whose sweep freed an in-flight operation's item (its new one, or the one
  // it replaced or deleted): crashes inside a log-free write's window, not only untaken
  // spare blocks (which a sweep frees too).
  uint64_t write_window_states = 0;
  uint64_t sweep_crash_points = 0;    // crash points inside a background sweep (nested)
  uint64_t reads = 0;                 // completed reads by reader threads
  uint64_t read_constraints = 0;      // reads checked at a crash point (value seen, must survive)
  std::vector<std::string> messages;  // first few failures
  std::map<std::string, double> counters;  // the workload index's counters at the end
};

CrashResult run_crash_test(const CrashConfig& cfg);
std::string temp_pool_path(const std::string& tag);

}  // namespace pmhash::testing
