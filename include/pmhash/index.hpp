// pmhash — the C++ API. One index per pool file.
//
//   pmhash::Options o;  o.scheme = "turbohash";  o.format = pmhash::Format::kVariable;
//   std::unique_ptr<pmhash::Index> t;
//   pmhash::Status s = pmhash::Index::open("/dev/shm/t.pool", o, &t);
//   s = t->insert("k", "v");          // kAlreadyExists if present
//   s = t->upsert("k", "v2");         // insert or replace
//   std::string v;  s = t->get("k", &v);
//   t->get_many(keys, values, statuses);  // many gets, their misses overlapped
//   s = t->remove("k");
//   s = t->close();                   // clean shutdown: next open takes the fast path
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/options.hpp"
#include "pmhash/status.hpp"

namespace pmhash {

// Flush accounting of the calling thread, across all indexes (cheap, always on).
struct PersistCounters {
  uint64_t flushes = 0;        // cache lines flushed (clwb/clflushopt/clflush)
  uint64_t fences = 0;         // sfence
  uint64_t bytes_flushed = 0;  // flushes * 64, plus non-temporal bytes
};
PersistCounters thread_persist_counters();

struct Stats {
  std::string scheme;
  Format format = Format::kFixed;
  Mode mode = Mode::kAuto;                 // the mode in use (never kAuto)
  bool recovered_from_crash = false;       // last open found no clean-shutdown flag
  double open_ms = 0;                      // time the last open took (recovery included)
  uint64_t size = 0;                       // live keys
  uint64_t capacity_slots = 0;             // slots the table has now
  double load_factor = 0;                  // size / capacity_slots
  uint64_t dram_bytes = 0;                 // DRAM the index holds (filters, mirrors, locks)
  uint64_t pm_bytes = 0;                   // pool bytes allocated
  uint64_t pool_bytes = 0;                 // pool file size
  std::map<std::string, double> counters;  // scheme-specific (probe distance, splits, ...)
  // The layout parameters recorded in the pool at creation ("k=v;..."): the table's shape.
  // Layout parameters passed to a later open are validated, then ignored.
  std::string layout;
};

// Limits for the variable format (fixed pools take exactly 8-byte keys and values).
inline constexpr size_t kMaxKeySize = 4096;
inline constexpr size_t kMaxValueSize = 65536;

class IndexImpl;
struct OpenHooks;

class Index {
 public:
  // Opens `path`, creating it when missing (if options.create). After a crash, runs the
  // scheme's recovery. A file that is not a valid pool of this scheme and format gets a
  // specific error and is left unchanged.
  static Status open(const std::string& path, const Options& options, std::unique_ptr<Index>* out);

  ~Index();  // closes cleanly if close() was not called
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  Status insert(std::string_view key, std::string_view value);  // kAlreadyExists if present
  Status upsert(std::string_view key, std::string_view value);  // insert or replace
  Status update(std::string_view key, std::string_view value);  // kNotFound if absent
  Status get(std::string_view key, std::string* value) const;   // kNotFound if absent
  Status remove(std::string_view key);                          // kNotFound if absent
  // Many lookups in one call: statuses[i] and values[i] as get(keys[i], &values[i]) would
  // give them, each lookup linearizable on its own (the batch is no snapshot). A key's lines
  // are prefetched a few keys ahead (Scheme::prefetch_key), so the lookups' cache misses
  // overlap. Returns kInvalidArgument (and touches nothing) if the spans' sizes differ; a
  // refused call (a closed index, too many threads) returns that status, also in every
  // statuses[i].
  Status get_many(std::span<const std::string_view> keys, std::span<std::string> values,
                  std::span<Status> statuses) const;
  uint64_t size() const;
  // size() with a status: kClosed on a closed index, kInvalidArgument for a thread past the
  // limit (size() answers 0 for both).
  Status count(uint64_t* n) const;
  Stats stats() const;

  // Routing keys to threads. An index may split its keys into partitions, each owned by one
  // thread, whose writes to it take no locks (PMEH: its zones, bound to `zone_threads`
  // threads). A caller that hands each key to the thread owning it (owner(key) ==
  // partition() on that thread) gets only such writes. The calling thread's partition is its
  // per-index thread slot: slots are handed out densely (0, 1, ...) on a thread's first
  // call on this index (this one included) and returned when the thread exits; slot p owns
  // partition p if p < partitions(), else none (kNoPartition). Any thread may read any key;
  // writes of another partition's keys take the locked path (PMEH's default) or are refused
  // with kInvalidArgument (PMEH's concurrency=partition). An index without partitions
  // answers partitions() == 1, owner() == 0 and partition() == 0 on every thread.
  // partitions() and owner() take no thread slot (a dispatcher thread may call them) and
  // answer the same after close(); partition() on a closed index is kNoPartition.
  static constexpr uint32_t kNoPartition = UINT32_MAX;
  uint32_t partitions() const;
  uint32_t owner(std::string_view key) const;  // in [0, partitions())
  uint32_t partition() const;                  // the calling thread's, or kNoPartition
  // Structural self-check (fsck) of the scheme plus the pool allocator's leak check. It
  // waits for the calls in progress and holds new ones until it ends (they wait, they do
  // not fail), so a for_each callback must not wait for another thread's call on this index
  // while a check() may start. kInvalidArgument from inside any for_each callback.
  Status check(std::string* report = nullptr) const;
  // Visits every live item. Meant for a quiet index: beside concurrent writers it is no
  // snapshot — it may miss or repeat items, untouched ones too when a write moves records
  // (HDNH's level rehash, PMEH's split, a LineHT or TurboHash shard resize), and in the
  // fixed format a slot rewritten under it can pair one write's key with another's value —
  // but it never reads freed memory, and in the variable format each pair is one item,
  // whole. The pairs are copied a piece at a time (a chain, a segment, or 64 buckets)
  // inside a reclamation read-side section and passed to fn after it, so fn may wait for
  // other threads' writes.
  void for_each(void (*fn)(void* ctx, std::string_view key, std::string_view value),
                void* ctx) const;
  Status close();
  // True once close() has begun. size(), stats() and for_each() cannot return a status:
  // on a closed index they return 0, an empty Stats and nothing; check this after them.
  bool is_closed() const;

  IndexImpl* impl() const { return impl_.get(); }  // for tests and tools

 private:
  friend Status open_index(const std::string&, const Options&, const OpenHooks&,
                           std::unique_ptr<Index>*);
  explicit Index(std::unique_ptr<IndexImpl> impl);
  std::unique_ptr<IndexImpl> impl_;
};

// Names of the registered schemes.
std::vector<std::string> schemes();

}  // namespace pmhash
