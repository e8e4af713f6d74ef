// Crash-consistent, leak-free allocator inside the pool.
//
// Heap: nchunks chunks. Each chunk's 8-byte word in the chunk table says what it is:
//
//   bits  63 ........ 8 | 7 .. 0
//         value         | type     type 0 free; 1 large run (value = chunks in the run,
//                                  on its first chunk only); 2 slab (value = size class)
//
// Objects up to chunk_size/2 live in slabs of power-of-two blocks (64 B .. chunk/2); each
// slab has a persistent bitmap (one bit per block). Larger objects take whole chunks.
//
// Protocol (as PMDK's reserve/publish): reserve() changes only DRAM state, so a crash before
// publishing leaks nothing. The caller fills and flushes the object, then a Tx makes the
// allocation persistent *together with* the 8-byte store that publishes it (and any frees),
// through a per-lane redo log: write log + checksum, fence, apply, fence, clear, fence.
// Recovery replays a valid log (idempotently) and discards a torn one. A freed block is
// persistently free at once; its DRAM reuse waits for an epoch grace period (release()).
//
// Log-free protocol (mark/unmark/sweep; docs/crash-testing.md "Allocation without a log"),
// for a scheme whose recovery after a crash walks everything it references: mark() sets the
// allocation bit and flushes its line beside the object's lines, unfenced — the fence that
// orders the object before the store publishing it orders the bit too. unmark() clears the
// bit of a block whose unpublishing store is already persisted, without a flush. A crash
// can then leave only allocated, unreachable blocks (never a reachable, free one): sweep(),
// run by the scheme's recovery, frees them, and write_back() at a clean close persists the
// bits unmark() left in the cache.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pm/pool.hpp"
#include "pm/spare_blocks.hpp"

namespace pmhash::pm {

struct Reservation {
  uint64_t off = 0;
  uint64_t size = 0;  // bytes actually reserved (block or run size)
  explicit operator bool() const { return off != 0; }
};

inline constexpr uint64_t kChunkFree = 0, kChunkLarge = 1, kChunkSlab = 2;
inline constexpr uint64_t kMinBlock = 64;

class Allocator {
 public:
  explicit Allocator(Pool& pool);
  ~Allocator();

  // Opening: finish or discard unfinished lane logs, then build DRAM state from the chunk
  // table; each slab's record (from its bitmap) is built at its first use, so the open's
  // time does not grow with the slabs the keys fill. With `format`, first make every chunk
  // free (used when a crash interrupted pool creation: nothing was reachable yet).
  void recover(bool format);
  // Read-only: do the lanes, chunk table and slab bitmaps describe a possible state? Appends
  // one line per problem to *report (all of them); returns kCorrupted naming the first.
  // `deep` also reads the bitmap bits no open reads: a free chunk's, and those past a slab's
  // blocks (check(); costs a full scan). Both are cleared before a chunk becomes a slab.
  Status validate(bool deep, std::string* report) const;
  // A lane holds a committed redo log (valid checksum, every entry a possible op).
  bool has_committed_log() const;
  // Finishes committed logs and discards torn ones (the first step of recover()).
  void replay_committed() { replay_lanes(); }

  Reservation reserve(uint64_t size);  // empty Reservation when the pool is full
  // Whether reserve(size) would find room now, changing nothing in the pool (no slab is
  // made; it may build the DRAM records of slabs from before the open). Not whether a
  // sparse pool's file system could back a fresh chunk's pages.
  bool has_room_for(uint64_t size);
  void cancel(const Reservation& r);  // give back an unpublished reservation
  // Marks r allocated without a log. Only for objects nothing reachable points to yet and
  // whose loss a crash may not care about (pool creation); the caller fences.
  void publish_unlogged(const Reservation& r);
  // DRAM reuse of a block a committed Tx freed; call after the epoch grace period.
  void release(uint64_t off);

  // Log-free protocol (see the top): no fence, no log.
  void mark(const Reservation& r);  // allocation bit set and flushed (caller fences)
  // The same for several reservations: every bit set, each meta-data line flushed once.
  void mark(const std::vector<Reservation>& rs);
  // The line of a marked block's bit flushed again (caller fences): a thread that did not
  // mark it orders the bit by its own fence (SpareBlocks::take).
  void flush_mark(const Reservation& r);
  void unmark(uint64_t off);  // bit cleared, not flushed; DRAM reuse via on_free
  // After a crash, before any operation: frees every allocated block `walk` does not
  // report reachable (persisted, fenced); returns how many. begin_sweep(), the walk into
  // note_reachable(), end_sweep().
  using Walk = std::function<void(const std::function<void(uint64_t)>&)>;
  uint64_t sweep(const Walk& walk);
  // The same in steps, for a scheme whose recovery is instant: the walk runs in the
  // background while operations run (docs/crash-testing.md "Sweeping in the background").
  // begin_sweep(), before any operation, notes every allocated block as a suspect (a copy
  // of the allocation bitmaps); a free (unmark, a committed Tx) forgets its suspect; the
  // walk, and every write that moves an item while it runs, note_reachable() it;
  // end_sweep() frees the suspects not reached. Sound when a block that stays reachable
  // from begin_sweep() to end_sweep() is reached: a suspect not reached was unreachable at
  // some moment after the crash, so it is garbage the crash left (nothing publishes an old
  // block again) or a write unpublished it and frees it itself — the allocation bit decides
  // which of the two frees it (clear_allocated). Logged commits are not arbitrated: the walk
  // must reach a block before a logged commit can free it (TurboHash frees shards, PMEH
  // directories, under a lock its walk takes). `background`: the caller runs end_sweep()
  // inside an epoch read-side section while operations run (a block a write frees during
  // the scan is not reused before the scan has looked at it), and the swept blocks' reuse
  // is epoch-deferred (a write still on its way to unmark() meets a clear bit).
  void begin_sweep();
  void note_reachable(uint64_t off);
  uint64_t end_sweep(bool background);
  uint64_t swept() const { return swept_.load(std::memory_order_relaxed); }  // since open
  // The blocks the last sweep freed (their bytes are left as they were): the crash tests
  // look for an interrupted write's item among them.
  std::vector<uint64_t> last_swept() const;
  // Clean close: persists what unmark() left unflushed (the chunks' table words, bitmaps).
  void write_back();

  // Small blocks marked ahead in batches (pm::SpareBlocks): the log-free write paths take
  // theirs here, so a block's allocation bit is not one more line per write.
  SpareBlocks& spares() { return *spares_; }
  const SpareBlocks& spares() const { return *spares_; }

  // Where the DRAM reuse of freed blocks is deferred to (epoch-based reclamation).
  std::function<void(uint64_t off)> on_free;

  // The size of the live object starting at off; 0 if off is not one (any value is safe to
  // pass: this is how an offset read from the pool is validated as an object).
  uint64_t block_size(uint64_t off) const;
  void for_each_allocated(const std::function<void(uint64_t off, uint64_t size)>& fn) const;
  // This thread's last allocation that needed new pages found no room in the file system
  // (Index clears it before a write and adds it to the write's kPoolFull status).
  static bool file_system_was_full();
  static void forget_file_system_full();
  // Builds every slab record not yet built since the open first (read_slab).
  uint64_t allocated_bytes();
  // Reserved and neither published nor given back (cancel): zero whenever no operation is
  // in flight and no scheme holds blocks back (SpareBlocks' stock is marked, so published).
  // A leak detector for tests.
  uint64_t reserved_bytes() const { return reserved_bytes_.load(std::memory_order_relaxed); }
  Pool& pool() const { return pool_; }

 private:
  friend class Tx;
  struct Slab;
  struct SizeClass;

  int size_class(uint64_t size) const;       // -1: needs whole chunks
  Reservation reserve_block(uint64_t size);  // reserve() without the accounting
  uint64_t* chunk_word(uint64_t c) const { return pool_.ptr<uint64_t>(table_off_ + c * 8); }
  // A chunk's table word, read atomically: the epoch thread's release() can free an empty
  // slab (a store to its word) while check() or a sweep reads the table.
  uint64_t chunk_word_now(uint64_t c) const {
    return std::atomic_ref<uint64_t>(*chunk_word(c)).load(std::memory_order_acquire);
  }
  uint64_t bitmap_word_off(uint64_t c, uint64_t block) const {
    return bitmap_off_ + c * (chunk_ / 512) + (block / 64) * 8;
  }
  uint64_t chunk_of(uint64_t off) const { return (off - heap_off_) / chunk_; }
  uint64_t chunk_off(uint64_t c) const { return heap_off_ + c * chunk_; }
  bool take_chunks(uint64_t n, uint64_t* first);             // DRAM, under chunk_mu_
  bool back_chunks(uint64_t c, uint64_t n);                  // not under chunk_mu_
  bool take_backed_chunks(uint64_t n, uint64_t* first);      // not under chunk_mu_
  void give_back_chunks(uint64_t c, uint64_t n);             // DRAM, under chunk_mu_
  void free_empty_slab(uint64_t c);                          // under its class lock
  void clear_bitmap(uint64_t c);                             // before the chunk becomes a slab
  void format_chunks();                                      // recover(format=true)
  static uint64_t block_bits(uint64_t nblocks, uint64_t i);  // word i's bits of blocks
  void release_block(uint64_t off, bool published);          // cancel: published = false
  void replay_lanes();
  const uint64_t* lane(uint64_t l) const {
    return pool_.ptr<uint64_t>(lanes_off_ + l * kLaneBytes);
  }
  bool log_committed(const uint64_t* lane) const;
  bool op_target_ok(uint64_t off, uint64_t op) const;
  uint64_t* meta_word(uint64_t off, uint64_t size, uint64_t* bit) const;
  uint64_t* set_allocated(const Reservation& r);  // the bit (or chunk word) set; its word
  void build_dram_state();
  void read_slab(uint64_t c);          // under its class lock
  void read_slab_of(uint64_t c);       // no allocator lock held
  bool read_next_slab(SizeClass& sc);  // under sc's lock

  Pool& pool_;
  uint64_t chunk_, nchunks_, heap_off_, table_off_, bitmap_off_, lanes_off_;
  int nclasses_;
  std::mutex chunk_mu_;
  std::vector<uint8_t> chunk_busy_;    // DRAM: chunk in use (run, slab, or reserved)
  std::vector<uint8_t> chunk_backed_;  // DRAM: its pages allocated in the file since open
  std::vector<uint64_t> run_len_;      // DRAM: chunks in the run starting here (0: none)
  uint64_t lowest_free_ = 0;           // DRAM: no chunk below it is free (first fit starts here)
  std::unique_ptr<SizeClass[]> classes_;
  std::vector<std::unique_ptr<Slab>> slabs_;  // by chunk; set under the class lock
  std::atomic<uint64_t> allocated_bytes_{0};
  std::atomic<uint64_t> reserved_bytes_{0};
  std::unique_ptr<std::atomic<bool>[]> lane_busy_;
  std::atomic<bool> unflushed_{false};
  std::unique_ptr<std::atomic<uint8_t>[]> unflushed_chunks_;  // unmark() cleared a bit there
  // Per chunk: 1 + the size class of a slab from before this open whose record is not built
  // yet (build_dram_state, read_slab); 0 otherwise.
  std::unique_ptr<std::atomic<uint8_t>[]> unread_;
  std::atomic<uint64_t> swept_{0};
  mutable std::mutex last_swept_mu_;
  std::vector<uint64_t> last_swept_;
  // While a sweep runs: one bit per 64-byte heap unit at each block's start (suspects:
  // allocated at begin_sweep(); reached: reported since).
  bool clear_allocated(uint64_t off, uint64_t size);
  void forget_suspect(uint64_t off);
  void clear_unit(uint64_t* map, uint64_t off) const;
  template <class F>
  void with_maps(F f);
  uint64_t map_words() const { return (nchunks_ * chunk_ / kMinBlock + 63) / 64; }
  std::atomic<bool> sweeping_{false};
  std::atomic<uint64_t> map_users_{0};
  struct FreeMap {
    void operator()(uint64_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint64_t[], FreeMap> suspects_, reached_;  // words used through atomic_ref
  std::unique_ptr<SpareBlocks> spares_;
};

// One failure-atomic group of 8-byte stores, allocations and frees (at most kMaxOps).
// Contract: everything the commit publishes (a reserved object's bytes, a slot it makes
// visible) must be persisted — flushed AND fenced — before commit(): otherwise the log can
// reach PM first and its replay would publish unwritten data. The crash harness checks it.
class Tx {
 public:
  static constexpr int kMaxOps = 15;
  explicit Tx(Allocator& a) : a_(a) {}
  void store(uint64_t* word, uint64_t value);
  void publish(const Reservation& r);
  void free(uint64_t off);  // the DRAM reuse goes through Allocator::on_free after commit
  void commit();

 private:
  enum Op : uint64_t { kStore = 1, kSetBits = 2, kClearBits = 3 };
  void add(uint64_t off, Op op, uint64_t value);
  void apply_one(uint64_t off, Op op, uint64_t value) const;

  Allocator& a_;
  uint64_t ops_[kMaxOps][2];
  int n_ = 0;
  uint64_t freed_[4];
  int nfreed_ = 0;
  int64_t bytes_delta_ = 0;
  uint64_t published_ = 0;  // bytes of the reservations this Tx publishes
};

}  // namespace pmhash::pm
