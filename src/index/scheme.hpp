// What a scheme implements. A scheme folder depends on pm/ and common/ only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/items.hpp"
#include "common/params.hpp"
#include "common/worker.hpp"
#include "pm/allocator.hpp"
#include "pm/epoch.hpp"
#include "pm/pool.hpp"
#include "pm/threads.hpp"
#include "pmhash/index.hpp"

namespace pmhash {

enum class PutMode { kInsert, kUpsert, kUpdate };

struct SchemeContext {
  pm::Pool& pool;
  pm::Allocator& alloc;
  pm::Epochs& epochs;
  pm::ThreadRegistry& threads;
  const common::Items& items;
  const Options& options;
  common::Params layout;   // recorded in the pool at creation
  common::Params runtime;  // Options::params of this open
};

// Buckets per piece of for_each_in_pieces where a piece is a range of buckets (HDNH, LineHT,
// TurboHash): Index::for_each copies a piece's pairs, so a piece stays a few hundred items.
inline constexpr uint64_t kPieceBuckets = 64;

// One shard or level walked kPieceBuckets buckets at a time: piece(first) walks its buckets
// [first, first + kPieceBuckets) inside a read-side section of its own (the array is read
// again each time: it may have been replaced) and returns the bucket count it saw;
// piece_done() follows each piece.
template <class Piece>
void walk_in_bucket_pieces(Piece piece, const std::function<void()>& piece_done) {
  for (uint64_t first = 0, n = 1; first < n; first += kPieceBuckets) {
    n = piece(first);
    piece_done();
  }
}

class Scheme {
 public:
  virtual ~Scheme() = default;
  virtual Status put(std::string_view key, std::string_view value, PutMode mode) = 0;
  virtual Status get(std::string_view key, std::string* value) = 0;
  virtual Status remove(std::string_view key) = 0;
  // Called first by every keyed call of the public API (get and the writes), before the
  // gate, with a key of a length the pool takes (IndexImpl::hint_key), also after close: the
  // scheme may load its DRAM words and prefetch the lines the call will need — no store, no
  // lock (the object outlives every call). First, because a prefetch behind the call's
  // stores waits for them, and behind the previous write's fence (docs/schemes/lineht.md
  // "Why updates were slower than deletes").
  virtual void prefetch_key(std::string_view key) const { (void)key; }
  virtual uint64_t size() const = 0;
  virtual uint64_t capacity_slots() const = 0;
  virtual uint64_t dram_bytes() const = 0;
  virtual void counters(std::map<std::string, double>* out) const { (void)out; }
  // Partitioned writes (Index::partitions/owner/partition): schemes without partitions have
  // one, which owns every key and every thread.
  static constexpr uint32_t kNoPartition = UINT32_MAX;
  virtual uint32_t partitions() const { return 1; }
  virtual uint32_t owner(std::string_view key) const {
    (void)key;
    return 0;
  }
  // The partition the thread with per-index id tid owns, or kNoPartition.
  virtual uint32_t partition_of_thread(unsigned tid) const {
    (void)tid;
    return 0;
  }
  // Structural self-check; appends one line per problem to *report.
  virtual bool check(std::string* report) const = 0;
  // Every pool block the index references (root, tables, out-of-line items).
  virtual void for_each_reachable(const std::function<void(uint64_t off)>& fn) const = 0;
  // Every live item (meant for a quiet index; index.hpp says what holds beside writers).
  // fn gets a copy of the slot, read as the scheme's get() reads it: under the stripe lock
  // (SmartHT, WOPHI) or with common::load_slot; every other shared word of the walk (bucket
  // bitmaps, metadata) by common::load_word.
  virtual void for_each(const std::function<void(const common::Slot&)>& fn) const = 0;
  // for_each in pieces (SmartHT and WOPHI a chain, PMEH a segment, HDNH, LineHT and
  // TurboHash up to kPieceBuckets buckets of a level or shard): fn for one piece's items
  // inside a read-side section of its own (fn may read the items), then piece_done() once
  // that section, and any lock, has ended. False, having done nothing, where the walk holds
  // one section throughout.
  virtual bool for_each_in_pieces(const std::function<void(const common::Slot&)>& fn,
                                  const std::function<void()>& piece_done) const {
    (void)fn;
    (void)piece_done;
    return false;
  }
  // Clean shutdown: persist whatever the paper saves for a fast reopen.
  virtual void close() {}
  // Waits for background work in progress (SmartHT's filter rebuild, WOPHI's bucket
  // pre-allocation) to finish; check() calls it once no call is inside.
  virtual void wait_idle() {}
  // Stops background workers (close(), after the last call has left); nothing may be
  // retired or freed by the scheme after this returns, until it is destroyed.
  virtual void stop() {}
};

struct SchemeFactory {
  const char* name;
  // Layout parameters to record in a new pool (from Options and its params, `given`;
  // validated).
  Status (*layout)(const Options& options, const common::Params& given, common::Params* layout);
  // A new pool: build the structure and publish its root (Pool::mutable_header().root).
  Status (*create)(SchemeContext& ctx, std::unique_ptr<Scheme>* out);
  // An existing pool: fast path after a clean close, recovery after a crash.
  Status (*open)(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out);
  // Read-only, before open() and before anything in the file changes: the root and what open
  // and recovery dereference first (directories, tables) exist with plausible sizes.
  // kCorrupted saying what and where, else Ok. Null: the generic root check only.
  Status (*validate)(const SchemeContext& ctx) = nullptr;
  // Run-time parameters (Options::params), before the pool file is opened or created: each
  // in its range, else kInvalidArgument naming it and what is allowed. Null: none.
  Status (*runtime)(const common::Params& params) = nullptr;
  // Read-only, after validate() and before anything in the file changes: the live items in
  // the pool's buckets (never a DRAM or saved counter), the walk stopping once `enough` are
  // found. Open compares it with the count the last clean close recorded (docs/pool-format.md,
  // "The live count"): in full where the scheme walks every bucket at open anyway
  // (`full_count_at_open`), else only "recorded non-empty finds an item" (instant and lazy
  // recovery stay instant on a healthy pool: the walk stops at the first item).
  uint64_t (*items_found)(const SchemeContext& ctx, uint64_t enough) = nullptr;
  bool full_count_at_open = false;
};

// SchemeFactory::runtime from a scheme's parser: `Parse` fills the scheme's run-time
// configuration (the constructor uses the same parser, so defaults live in one place).
template <class Config, Status (*Parse)(const common::Params&, Config*)>
Status check_runtime(const common::Params& params) {
  Config c;
  return Parse(params, &c);
}

// After a crash, for a scheme on pm::Allocator's log-free protocol (mark/unmark), before
// any operation or background allocation: frees the blocks the crash left allocated but
// unreachable (an allocation not yet published, a free not yet persisted). Returns how many.
inline uint64_t sweep_after_crash(SchemeContext& ctx, const Scheme& s) {
  return ctx.alloc.sweep(
      [&](const std::function<void(uint64_t)>& fn) { s.for_each_reachable(fn); });
}

// After a crash, for an instant-recovery scheme on the log-free protocol (TurboHash, PMEH):
// the same sweep, on a background thread, so that opening stays independent of the number
// of items (pm::Allocator::begin_sweep says why it is sound). `walk` must report every block
// that stays reachable while it runs (TurboHash walks each shard under its lock; PMEH's
// moves of records note their items). Construct it when the scheme is ready, before any
// operation; the scheme's wait_idle() waits for it (check() then sees allocated ==
// reachable) and its stop() lets it finish: a sweep abandoned at a clean close would leave
// its garbage allocated for good.
class BackgroundSweep {
 public:
  // `test_pause_us` (tests, the schemes' `test_sweep_pause_us`): the walk sleeps that long
  // after every 16 blocks it reports, so that writes run beside it.
  BackgroundSweep(pm::Allocator& alloc, pm::Epochs& epochs, pm::Allocator::Walk walk,
                  uint64_t test_pause_us = 0)
      : alloc_((alloc.begin_sweep(), alloc)),
        epochs_(epochs),
        walk_(std::move(walk)),
        test_pause_us_(test_pause_us),
        worker_([this] { run(); }) {
    worker_.wake();
  }
  void wait_idle() { worker_.wait_idle(); }
  void stop() {  // a stop() before the worker started its run would skip it
    worker_.wait_idle();
    worker_.stop();
  }
#ifdef PMHASH_CRASH_HOOKS
  // Tests: runs on the sweep's thread after begin_sweep() and before the walk, holding no
  // lock and no read-side section, so a test may block in it until its writes have run
  // (BackgroundSweepTest). Set it before the open, clear it after wait_idle().
  static inline std::function<void()> test_before_walk;
#endif

 private:
  void run() {
#ifdef PMHASH_CRASH_HOOKS
    if (test_before_walk) test_before_walk();
#endif
    uint64_t n = 0;
    walk_([&](uint64_t off) {
      alloc_.note_reachable(off);
      if (test_pause_us_ && ++n % 16 == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(test_pause_us_));
    });
    pm::Epochs::Guard guard(epochs_);  // see pm::Allocator::end_sweep
    alloc_.end_sweep(true);
  }

  pm::Allocator& alloc_;
  pm::Epochs& epochs_;
  pm::Allocator::Walk walk_;
  uint64_t test_pause_us_;
  common::Worker worker_;  // last: its thread starts once the rest is ready
};

// The same parser in a scheme's constructor: this open's run-time configuration
// (SchemeFactory::runtime refused bad values before the pool was touched).
template <class Config, Status (*Parse)(const common::Params&, Config*)>
Config runtime_config(const SchemeContext& ctx) {
  Config c;
  (void)Parse(ctx.runtime, &c);
  return c;
}

// Pool creation (docs/pool-format.md): a new scheme's objects are allocated without a log —
// nothing reaches them until the root is published, and a creation that did not finish is
// formatted away at the next open — then the root is published by one 8-byte store.
// The objects must be written and flushed; this fences before publishing.
inline void publish_new_root(SchemeContext& ctx, const std::vector<pm::Reservation>& objects,
                             uint64_t root_off) {
  for (const pm::Reservation& r : objects) ctx.alloc.publish_unlogged(r);
  ctx.pool.persister().fence();
  // Root and published word in one logged commit: a root of 0 then means "unfinished".
  pm::Tx tx(ctx.alloc);
  tx.store(&ctx.pool.mutable_header().root, root_off);
  tx.store(&ctx.pool.mutable_header().published, pm::kPublished);
  tx.commit();
}

// The root of an existing pool if it is an allocated block of the right size with the
// scheme's magic (its first word), else null.
template <class Root>
Root* existing_root(const SchemeContext& ctx, uint64_t magic) {
  uint64_t off = ctx.pool.root();
  if (ctx.alloc.block_size(off) < sizeof(Root)) return nullptr;
  Root* r = ctx.pool.checked<Root>(off);
  return r != nullptr && r->magic == magic ? r : nullptr;
}

// For validate(): the problem, located.
inline Status damaged(const SchemeContext& ctx, const char* scheme, const std::string& what) {
  return {Code::kCorrupted, std::string(scheme) + ": " + what + " (root at offset " +
                                std::to_string(ctx.pool.root()) + ")"};
}
// `count` objects of T at off, inside one allocated block (validate(), check(), recovery).
template <class T>
const T* block_array(const SchemeContext& ctx, uint64_t off, uint64_t count) {
  if (count == 0 || count > ctx.pool.size() / sizeof(T)) return nullptr;
  if (ctx.alloc.block_size(off) < count * sizeof(T)) return nullptr;
  return ctx.pool.checked<T>(off, count);
}

const SchemeFactory* find_scheme(const std::string& name);
const std::vector<const SchemeFactory*>& all_schemes();

}  // namespace pmhash
