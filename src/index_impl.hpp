// The object behind pmhash::Index: one pool, its allocator, epochs and one scheme instance.
// Everything an index needs lives here (no global singletons), so a process can hold many.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "common/items.hpp"
#include "common/op_gate.hpp"
#include "index/scheme.hpp"
#include "pm/allocator.hpp"
#include "pm/epoch.hpp"
#include "pm/pool.hpp"
#include "pm/threads.hpp"
#include "pmhash/index.hpp"

namespace pmhash {

// Test-only knobs for opening (the crash simulator's hook, fault injection).
struct OpenHooks {
  pm::PersistHook* persist_hook = nullptr;
  uint64_t mutations = 0;
  uint64_t chunk_size = 0;        // 0: default; small pools for crash tests use smaller chunks
  bool read_only = false;         // tools: inspect without changing the file (pm::PoolArgs)
  bool any_scheme = false;        // tools: accept the pool's scheme and format, whatever they are
  std::string* report = nullptr;  // tools: every problem validation finds, one per line
};

Status open_index(const std::string& path, const Options& options, const OpenHooks& hooks,
                  std::unique_ptr<Index>* out);
// The checks open() makes of options.scheme and options.params (names and values), without
// a pool: tools validate every run of a batch before the first one starts.
Status check_scheme_options(const Options& options);

class IndexImpl {
 public:
  // Member order is destruction order reversed: the scheme goes first, then pending epoch
  // callbacks (which release blocks to the allocator), then the allocator, then the pool.
  std::unique_ptr<pm::Pool> pool;
  std::shared_ptr<pm::ThreadRegistry> threads;
  std::unique_ptr<pm::Allocator> alloc;
  std::unique_ptr<common::Items> items;
  std::unique_ptr<pm::Epochs> epochs;
  std::unique_ptr<Scheme> scheme;
  Options options;
  // Tools and tests: background work finished and what it retired freed (the caller holds
  // no lock and no read-side section), so space readings are the index's settled state.
  void quiesce() {
    scheme->wait_idle();
    epochs->reclaim_now();
  }
  common::OpGate gate;  // close() shuts it; see common/op_gate.hpp
  static_assert(pm::ThreadRegistry::kMaxThreads <= common::OpGate::kThreads,
                "every thread id has its gate counter");
  std::mutex close_mu;
  bool closed = false;
  bool recovered = false;
  double open_ms = 0;
  // The live count the last clean close recorded (pm::Pool::recorded_count), and whether any
  // write has been tried since this open (check() compares the count only until then).
  uint64_t recorded_count = 0;
  bool recorded_known = false;
  // Its own line, read-mostly: each flag below is stored once per open, then only read.
  alignas(64) std::atomic<bool> written{false};
  // The pool holds a valid recorded count (a lower bound until a remove): the first remove
  // drops it (drop_record), later ones only read this flag.
  std::atomic<bool> holds_record{false};
  std::mutex record_mu;
  void drop_record();

  // kPoolFull that the pool's file system caused, said so.
  Status full_status(const Status& s) const;
  // A write, outside every scheme lock: a full pool is retried once after the blocks
  // retired and not yet reclaimed are freed (they are free space a grace period away), and
  // a thread that filled the reclamation backlog frees it (pm/epoch.hpp).
  template <class F>
  Status write(F&& f) {
    // Read-mostly: stored once, so the line stays shared across the writers' caches.
    if (!written.load(std::memory_order_relaxed)) written.store(true, std::memory_order_relaxed);
    pm::Allocator::forget_file_system_full();
    Status s = f();
    if (s.code() == Code::kPoolFull && epochs->reclaim_now()) s = f();
    epochs->settle();
    return s.code() == Code::kPoolFull ? full_status(s) : s;
  }
  // A key of a length the pool takes: what check_key accepts, as a compare.
  bool key_size_ok(std::string_view key) const {
    return items->variable() ? !key.empty() && key.size() <= kMaxKeySize : key.size() == 8;
  }
  Status check_key(std::string_view key) const;
  // A keyed call's first step (get, insert, upsert, update, remove), before its checks and
  // the gate: the scheme's prefetch hint (Scheme::prefetch_key) — no store; a key check_key
  // will refuse is not read at all.
  void hint_key(std::string_view key) const {
    if (key_size_ok(key)) scheme->prefetch_key(key);
  }
  Status check_value(std::string_view value) const;
  // Scheme check + allocated == reachable.
  bool check(std::string* report) const;
  bool check_recorded_count(std::string* report) const;
  void close();
};

}  // namespace pmhash
