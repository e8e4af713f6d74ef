#include "pm/allocator.hpp"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace pmhash::pm {

struct Allocator::Slab {
  uint32_t cls = 0;
  uint64_t nblocks = 0;
  uint64_t nfree = 0;
  std::vector<uint64_t> used;  // DRAM: allocated, reserved, or freed but not yet released
  bool backed = true;          // its pages allocated in the file this open (back_chunks)
};

// The bits of bitmap word i that stand for blocks of a slab of nblocks (none past its last
// block: bits there are damage, or were left by an earlier use of the chunk).
uint64_t Allocator::block_bits(uint64_t nblocks, uint64_t i) {
  if (i * 64 >= nblocks) return 0;
  return (i + 1) * 64 <= nblocks ? ~uint64_t{0} : (uint64_t{1} << (nblocks % 64)) - 1;
}

struct Allocator::SizeClass {
  std::mutex mu;
  std::vector<uint64_t> partial;  // chunks of slabs that may have a free block
  std::vector<uint64_t> unread;   // slabs from before this open, records not built (read_slab)
};

namespace {

// Lane redo log: word 0 = count (low 8 bits) | checksum (high 56 bits); then count entries
// of two words: (offset | op) and value.
uint64_t lane_header(const uint64_t* entries, int n) {
  uint64_t sum = XXH3_64bits_withSeed(entries, static_cast<size_t>(n) * 16, n);
  return (sum & ~uint64_t{0xFF}) | static_cast<uint64_t>(n);
}

void apply_op(const Pool& pool, uint64_t off, uint64_t op, uint64_t value) {
  std::atomic_ref<uint64_t> w(*pool.ptr<uint64_t>(off));
  switch (op) {
    case 1:
      w.store(value, std::memory_order_release);
      break;
    case 2:
      w.fetch_or(value, std::memory_order_acq_rel);
      break;
    case 3:
      w.fetch_and(~value, std::memory_order_acq_rel);
      break;
    default:
      break;
  }
}

}  // namespace

Allocator::Allocator(Pool& pool) : pool_(pool) {
  const PoolHeader& h = pool.header();
  chunk_ = h.chunk_size;
  nchunks_ = h.nchunks;
  heap_off_ = h.heap_offset;
  table_off_ = h.chunk_table_offset;
  bitmap_off_ = h.bitmap_offset;
  lanes_off_ = h.lanes_offset;
  nclasses_ = std::countr_zero(chunk_ / 2 / kMinBlock) + 1;
  classes_ = std::make_unique<SizeClass[]>(nclasses_);
  slabs_.resize(nchunks_);
  chunk_busy_.assign(nchunks_, 0);
  chunk_backed_.assign(nchunks_, 0);
  unflushed_chunks_ = std::make_unique<std::atomic<uint8_t>[]>(nchunks_);
  unread_ = std::make_unique<std::atomic<uint8_t>[]>(nchunks_);
  run_len_.assign(nchunks_, 0);
  spares_ = std::make_unique<SpareBlocks>(*this);
  lane_busy_ = std::make_unique<std::atomic<bool>[]>(kLanes);
}

Allocator::~Allocator() = default;

int Allocator::size_class(uint64_t size) const {
  if (size <= kMinBlock) return 0;
  int c = 64 - std::countl_zero((size - 1) / kMinBlock);  // ceil(log2(size/64))
  return c < nclasses_ ? c : -1;
}

void Allocator::recover(bool format) {
  replay_lanes();
  if (format) format_chunks();
  build_dram_state();
}

// Every chunk made free. The slabs' bitmaps are persisted clear before any chunk word says
// free: a crash in between leaves empty slabs (free space the next format frees), never a
// free chunk whose bitmap still has bits (which check() reports as damage; helper-44).
void Allocator::format_chunks() {
  const Persister& p = pool_.persister();
  for (uint64_t c = 0; c < nchunks_; ++c) {
    if ((*chunk_word(c) & 0xFF) != kChunkSlab) continue;
    char* bm = pool_.ptr<char>(bitmap_off_ + c * (chunk_ / 512));
    std::memset(bm, 0, chunk_ / 512);
    p.flush(bm, chunk_ / 512);
  }
  p.fence();
  for (uint64_t c = 0; c < nchunks_; ++c) {
    uint64_t* w = chunk_word(c);
    if (*w == kChunkFree) continue;
    *w = kChunkFree;
    p.flush(w, 8);
  }
  p.fence();
}

// Read-only (DRAM state only; nothing is reserved, no slab made): a slab of the size's class
// with a free block, or enough free chunks in a row for a new slab or run.
bool Allocator::has_room_for(uint64_t size) {
  int cls = size_class(size);
  if (cls >= 0) {
    SizeClass& sc = classes_[cls];
    std::lock_guard<std::mutex> g(sc.mu);
    for (uint64_t c : sc.partial)
      if (slabs_[c] && slabs_[c]->nfree > 0) return true;
    while (read_next_slab(sc))  // DRAM only: read_slab puts a slab with room last
      if (!sc.partial.empty() && slabs_[sc.partial.back()]->nfree > 0) return true;
  }
  uint64_t n = cls < 0 ? (size + chunk_ - 1) / chunk_ : 1, run = 0;
  std::lock_guard<std::mutex> g(chunk_mu_);
  for (uint64_t c = lowest_free_; c < nchunks_ && run < n; ++c) run = chunk_busy_[c] ? 0 : run + 1;
  return run >= n;
}

// A redo-log entry may target the mutable part of the header page or allocator/heap words,
// nothing else (never the immutable header or the lanes themselves).
bool Allocator::op_target_ok(uint64_t off, uint64_t op) const {
  if (op < 1 || op > 3 || off % 8 != 0) return false;
  if (off >= kMutableHeaderOffset && off < kHeaderRegion) return true;
  return off >= table_off_ && pool_.contains(off, 8);
}

bool Allocator::log_committed(const uint64_t* lane) const {
  uint64_t hdr = lane[0];
  int n = static_cast<int>(hdr & 0xFF);
  if (n < 1 || n > Tx::kMaxOps || lane_header(lane + 1, n) != hdr) return false;
  for (int i = 0; i < n; ++i)
    if (!op_target_ok(lane[1 + 2 * i] & ~uint64_t{7}, lane[1 + 2 * i] & 7)) return false;
  return true;
}

bool Allocator::has_committed_log() const {
  for (uint64_t l = 0; l < kLanes; ++l)
    if (lane(l)[0] != 0 && log_committed(lane(l))) return true;
  return false;
}

void Allocator::replay_lanes() {
  for (uint64_t l = 0; l < kLanes; ++l) {
    auto* ln = pool_.ptr<uint64_t>(lanes_off_ + l * kLaneBytes);
    if (ln[0] == 0) continue;
    if (log_committed(ln)) {
      int n = static_cast<int>(ln[0] & 0xFF);
      for (int i = 0; i < n; ++i) {
        uint64_t off = ln[1 + 2 * i] & ~uint64_t{7};
        apply_op(pool_, off, ln[1 + 2 * i] & 7, ln[2 + 2 * i]);
        pool_.persister().flush(pool_.ptr<char>(off), 8);
      }
      pool_.persister().fence();
    }
    ln[0] = 0;  // a torn log never started applying: discard it
    pool_.persister().persist(ln, 8);
  }
}

Status Allocator::validate(bool deep, std::string* report) const {
  std::string first;
  uint64_t problems = 0;
  auto problem = [&](const std::string& what) {
    if (problems++ == 0) first = what;
    if (report) *report += what + "\n";
  };
  auto hex = [](uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return std::string(b);
  };
  // A torn log (no valid checksum) is normal after a crash and is discarded; a log whose
  // checksum holds but whose entries are impossible is damage.
  for (uint64_t l = 0; l < kLanes; ++l) {
    const uint64_t* ln = lane(l);
    int n = static_cast<int>(ln[0] & 0xFF);
    if (ln[0] != 0 && n >= 1 && n <= Tx::kMaxOps && lane_header(ln + 1, n) == ln[0] &&
        !log_committed(ln))
      problem("allocator: lane " + std::to_string(l) + " (offset " +
              std::to_string(lanes_off_ + l * kLaneBytes) +
              ") holds a log with impossible entries");
  }
  // Only check()'s deep pass reads bitmaps (an open reads none: bits past a slab's blocks
  // are never read as blocks, and a chunk's bitmap is cleared when it becomes a slab). It
  // copies them without backing their pages: a free chunk's is often a hole of a sparse pool
  // (nothing wrote it), and reading a hole of a full tmpfs raises SIGBUS.
  std::vector<uint64_t> copy(deep ? chunk_ / 512 / 8 : 0);
  auto bitmap = [&](uint64_t c) -> const uint64_t* {
    pool_.read_without_backing(bitmap_off_ + c * (chunk_ / 512), chunk_ / 512, copy.data());
    return copy.data();
  };
  for (uint64_t c = 0; c < nchunks_; ++c) {
    uint64_t w = chunk_word_now(c), type = w & 0xFF, value = w >> 8;
    // Named only when there is a problem: built for each of the table's chunks (8,192 in an
    // 8 GiB pool), the text was a large part of every open.
    auto where = [&] {
      return "allocator: chunk " + std::to_string(c) + " (table word at offset " +
             std::to_string(table_off_ + c * 8) + ", " + hex(w) + ")";
    };
    if (type == kChunkLarge && value >= 1 && value <= nchunks_ - c) {
      for (uint64_t i = 1; i < value; ++i)
        if (chunk_word_now(c + i) != kChunkFree)
          problem(where() + ": chunk " + std::to_string(c + i) + " inside the run is not free");
      c += value - 1;
    } else if (type == kChunkSlab && value < static_cast<uint64_t>(nclasses_)) {
      if (!deep) continue;  // no open reads bits past a slab's blocks (see clear_bitmap)
      uint64_t nblocks = chunk_ / (kMinBlock << value);
      const uint64_t* bm = bitmap(c);
      for (uint64_t i = nblocks / 64; i < chunk_ / 512 / 8; ++i) {
        if ((bm[i] & ~block_bits(nblocks, i)) != 0) {
          problem(where() + ": slab bitmap word " + std::to_string(i) +
                  " marks blocks past the slab");
          break;
        }
      }
    } else if (w != kChunkFree) {
      problem(where() + ": neither free, a run of chunks in the heap, nor a slab");
    } else if (deep) {
      const uint64_t* bm = bitmap(c);
      for (uint64_t i = 0; i < chunk_ / 512 / 8; ++i)
        if (bm[i] != 0) {
          problem(where() + ": a free chunk with allocation bits set");
          break;
        }
    }
  }
  if (problems == 0) return Status::Ok();
  return {Code::kCorrupted,
          first + (problems > 1 ? " (and " + std::to_string(problems - 1) + " more)" : "")};
}

// The chunk table only: a slab from before this open is noted as unread, and its record
// (which blocks are free, its bytes) is built at its first use (read_slab). An open then
// reads one word per chunk and no bitmap, so it does not grow with the slabs a table's keys
// fill (issue 19: recovery independent of the number of keys).
void Allocator::build_dram_state() {
  uint64_t bytes = 0;
  for (uint64_t c = 0; c < nchunks_; ++c) {
    uint64_t w = chunk_word_now(c);
    uint64_t type = w & 0xFF, value = w >> 8;
    if (type == kChunkLarge && value >= 1 && value <= nchunks_ - c) {
      for (uint64_t i = 0; i < value; ++i) chunk_busy_[c + i] = 1;
      run_len_[c] = value;
      bytes += value * chunk_;
      c += value - 1;
    } else if (type == kChunkSlab && value < static_cast<uint64_t>(nclasses_)) {
      chunk_busy_[c] = 1;
      unread_[c].store(static_cast<uint8_t>(value + 1), std::memory_order_relaxed);
      classes_[value].unread.push_back(c);
    } else if (w != kChunkFree) {
      chunk_busy_[c] = 1;  // unknown word: never hand it out (check() reports it)
    }
  }
  allocated_bytes_.store(bytes);
}

// Builds an unread slab's record from its bitmap; the caller holds its class's lock. Every
// path that clears a bit of a block from before this open reads the slab first
// (read_slab_of: unmark and the sweep's frees through clear_allocated, a logged Tx::free),
// so the bitmap read here is the one the open would have read, plus the blocks reserved
// since (none: reserve_block reads a slab before it reserves from it).
void Allocator::read_slab(uint64_t c) {
  uint8_t tag = unread_[c].load(std::memory_order_relaxed);
  if (tag == 0) return;
  uint32_t cls = tag - 1u;
  auto s = std::make_unique<Slab>();
  s->cls = cls;
  s->nblocks = chunk_ / (kMinBlock << cls);
  s->used.assign((s->nblocks + 63) / 64, 0);
  uint64_t* bm = pool_.ptr<uint64_t>(bitmap_off_ + c * (chunk_ / 512));
  uint64_t used = 0;
  for (size_t i = 0; i < s->used.size(); ++i) {
    s->used[i] = std::atomic_ref<uint64_t>(bm[i]).load(std::memory_order_acquire) &
                 block_bits(s->nblocks, i);
    used += std::popcount(s->used[i]);
  }
  s->nfree = s->nblocks - used;
  s->backed = false;
  allocated_bytes_.fetch_add(used * (kMinBlock << cls), std::memory_order_relaxed);
  if (s->nfree > 0) classes_[cls].partial.push_back(c);
  slabs_[c] = std::move(s);
  unread_[c].store(0, std::memory_order_release);  // after the record: read_slab_of's acquire
}

// Before a block's bit or record changes: its slab's record built, if it is an unread one.
void Allocator::read_slab_of(uint64_t c) {
  uint8_t tag = unread_[c].load(std::memory_order_acquire);
  if (tag == 0) return;
  std::lock_guard<std::mutex> g(classes_[tag - 1].mu);
  read_slab(c);
}

// Under sc's lock: reads the next unread slab of the class; false when none is left.
bool Allocator::read_next_slab(SizeClass& sc) {
  while (!sc.unread.empty()) {
    uint64_t c = sc.unread.back();
    sc.unread.pop_back();
    if (unread_[c].load(std::memory_order_relaxed) == 0) continue;  // a free read it first
    read_slab(c);
    return true;
  }
  return false;
}

uint64_t Allocator::allocated_bytes() {
  for (int cls = 0; cls < nclasses_; ++cls) {
    std::lock_guard<std::mutex> g(classes_[cls].mu);
    while (read_next_slab(classes_[cls])) {
    }
  }
  return allocated_bytes_.load(std::memory_order_relaxed);
}

// First fit from the lowest free chunk: chunks given back are used again before fresh ones,
// so the pool's pages are touched (on a sparse file: backed) no further than it needs. A
// growing table's doubled arrays took fresh chunks past its freed ones under next fit and
// backed twice its live bytes.
bool Allocator::take_chunks(uint64_t n, uint64_t* first) {
  if (n == 0 || n > nchunks_) return false;
  uint64_t run = 0;
  bool found_free = false;
  for (uint64_t c = lowest_free_; c < nchunks_; ++c) {
    if (chunk_busy_[c]) {
      run = 0;
      continue;
    }
    if (!found_free) lowest_free_ = c;
    found_free = true;
    if (++run < n) continue;
    *first = c + 1 - n;
    for (uint64_t i = 0; i < n; ++i) chunk_busy_[*first + i] = 1;
    run_len_[*first] = n;
    if (*first == lowest_free_) lowest_free_ = c + 1;
    return true;
  }
  if (!found_free) lowest_free_ = nchunks_;
  return false;
}

namespace {
thread_local bool no_room_in_file_system = false;  // this thread's last back_chunks
}  // namespace

bool Allocator::file_system_was_full() {
  return no_room_in_file_system;
}
void Allocator::forget_file_system_full() {
  no_room_in_file_system = false;
}

// The chunks' pages allocated in the file with their table words and bitmap bytes, the
// first time this open hands them out: on a sparse pool whose file system has run out of
// room the allocation fails (the scheme reports kPoolFull) where the first store into a page
// would raise SIGBUS. The fallocate runs outside chunk_mu_ (a large run's takes a while).
bool Allocator::back_chunks(uint64_t c, uint64_t n) {
  {
    std::lock_guard<std::mutex> g(chunk_mu_);
    bool backed = true;
    for (uint64_t i = 0; i < n; ++i) backed = backed && chunk_backed_[c + i];
    if (backed) return true;
  }
  bool room = pool_.back(table_off_ + c * 8, n * 8) &&
              pool_.back(bitmap_off_ + c * (chunk_ / 512), n * (chunk_ / 512)) &&
              pool_.back(chunk_off(c), n * chunk_);
  no_room_in_file_system = !room;
  if (!room) return false;
  std::lock_guard<std::mutex> g(chunk_mu_);
  for (uint64_t i = 0; i < n; ++i) chunk_backed_[c + i] = 1;
  return true;
}

// A chunk becoming a slab starts with every bit of its bitmap clear, past its blocks too:
// the bits a smaller class would read there are then never stale ones (a larger class's
// slab clears only its own words when it is freed), so the open needs no check that none is
// set past a slab's blocks (a read of each slab's whole bitmap; check() still looks). Only
// words found set are written; the fence orders them before the chunk word says slab.
void Allocator::clear_bitmap(uint64_t c) {
  auto* bm = pool_.ptr<uint64_t>(bitmap_off_ + c * (chunk_ / 512));
  bool cleared = false;
  for (uint64_t i = 0; i < chunk_ / 512 / 8; ++i) {
    if (bm[i] == 0) continue;
    bm[i] = 0;
    pool_.persister().flush(&bm[i], 8);
    cleared = true;
  }
  if (cleared) pool_.persister().fence();
}

bool Allocator::take_backed_chunks(uint64_t n, uint64_t* first) {
  {
    std::lock_guard<std::mutex> g(chunk_mu_);
    if (!take_chunks(n, first)) return false;
  }
  if (back_chunks(*first, n)) return true;
  std::lock_guard<std::mutex> g(chunk_mu_);
  give_back_chunks(*first, n);
  return false;
}

void Allocator::give_back_chunks(uint64_t c, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) chunk_busy_[c + i] = 0;
  run_len_[c] = 0;
  lowest_free_ = std::min(lowest_free_, c);
}

Reservation Allocator::reserve(uint64_t size) {
  Reservation r = reserve_block(size);
  reserved_bytes_.fetch_add(r.size, std::memory_order_relaxed);
  return r;
}

Reservation Allocator::reserve_block(uint64_t size) {
  int cls = size_class(size);
  if (cls < 0) {
    uint64_t n = (size + chunk_ - 1) / chunk_, first = 0;
    if (!take_backed_chunks(n, &first)) return {};
    return {chunk_off(first), n * chunk_};
  }
  SizeClass& sc = classes_[cls];
  uint64_t bsize = kMinBlock << cls;
  std::lock_guard<std::mutex> g(sc.mu);
  while (true) {
    if (sc.partial.empty() && read_next_slab(sc)) continue;  // slabs from before the open first
    if (sc.partial.empty()) {
      uint64_t c = 0;
      if (!take_backed_chunks(1, &c)) return {};
      {
        std::lock_guard<std::mutex> cg(chunk_mu_);
        run_len_[c] = 0;  // a slab, not a run
      }
      clear_bitmap(c);
      // The slab's type is persisted eagerly: an empty slab is not a leak, just free space.
      std::atomic_ref<uint64_t>(*chunk_word(c)).store(kChunkSlab | (uint64_t(cls) << 8));
      pool_.persister().persist(chunk_word(c), 8);
      auto s = std::make_unique<Slab>();
      s->cls = static_cast<uint32_t>(cls);
      s->nblocks = chunk_ / bsize;
      s->nfree = s->nblocks;
      s->used.assign((s->nblocks + 63) / 64, 0);
      slabs_[c] = std::move(s);
      sc.partial.push_back(c);
    }
    uint64_t c = sc.partial.back();
    Slab& s = *slabs_[c];
    if (s.nfree == 0) {
      sc.partial.pop_back();
      continue;
    }
    if (!s.backed) {  // a slab from before this open: its free blocks may be holes
      if (!back_chunks(c, 1)) return {};
      s.backed = true;
    }
    for (size_t i = 0; i < s.used.size(); ++i) {
      uint64_t free_bits = ~s.used[i] & block_bits(s.nblocks, i);
      if (free_bits == 0) continue;
      uint64_t b = i * 64 + std::countr_zero(free_bits);
      s.used[i] |= uint64_t{1} << (b % 64);
      s.nfree--;
      return {chunk_off(c) + b * bsize, bsize};
    }
    s.nfree = 0;  // unreachable if counts are right; keeps the loop finite
  }
}

void Allocator::release(uint64_t off) {
  release_block(off, true);
}

void Allocator::release_block(uint64_t off, bool published) {
  uint64_t c = chunk_of(off);
  read_slab_of(c);
  if (Slab* s = slabs_[c].get()) {
    std::lock_guard<std::mutex> g(classes_[s->cls].mu);
    uint64_t b = (off - chunk_off(c)) / (kMinBlock << s->cls);
    uint64_t mask = uint64_t{1} << (b % 64);
    if (s->used[b / 64] & mask) {
      s->used[b / 64] &= ~mask;
      if (s->nfree++ == 0) classes_[s->cls].partial.push_back(c);
      if (s->nfree == s->nblocks) free_empty_slab(c);
    }
    return;
  }
  // A freed run's word was cleared without a flush (unmark): persisted before the chunks can
  // be taken again, or a crash could keep it beside a new run's word that overlaps it (first
  // fit reuses them at once; validate() would refuse the pool). DRAM kept the length.
  if (published) pool_.persister().persist(chunk_word(c), 8);
  std::lock_guard<std::mutex> g(chunk_mu_);
  give_back_chunks(c, run_len_[c]);
}

// An empty slab goes back to the chunks, so that space freed in one size class serves
// another (a growing table's outgrown arrays, a churn's emptied slabs) — unless it is the
// only slab of its class with room, so that inserting and deleting one item does not create
// and free a slab each time. Its bitmap is persisted clear before its chunk word says free:
// a crash in between leaves an empty slab, which is free space too, and a chunk reused as a
// slab later starts with a clear bitmap.
void Allocator::free_empty_slab(uint64_t c) {
  Slab& s = *slabs_[c];
  SizeClass& sc = classes_[s.cls];
  bool other_room = std::any_of(sc.partial.begin(), sc.partial.end(), [&](uint64_t x) {
    return x != c && slabs_[x] && slabs_[x]->nfree > 0;
  });
  if (!other_room) return;
  uint64_t* bm = pool_.ptr<uint64_t>(bitmap_off_ + c * (chunk_ / 512));
  uint64_t words = (s.nblocks + 63) / 64;
  for (uint64_t i = 0; i < words; ++i)  // a block's bit still set: keep the slab (check() says)
    if ((std::atomic_ref<uint64_t>(bm[i]).load(std::memory_order_acquire) &
         block_bits(s.nblocks, i)) != 0)
      return;
  const Persister& p = pool_.persister();
  p.persist(bm, words * 8);
  std::atomic_ref<uint64_t>(*chunk_word(c)).store(kChunkFree);
  p.persist(chunk_word(c), 8);
  sc.partial.erase(std::remove(sc.partial.begin(), sc.partial.end(), c), sc.partial.end());
  slabs_[c].reset();
  std::lock_guard<std::mutex> g(chunk_mu_);
  give_back_chunks(c, 1);
}

void Allocator::cancel(const Reservation& r) {
  if (!r) return;
  reserved_bytes_.fetch_sub(r.size, std::memory_order_relaxed);
  release_block(r.off, /*published=*/false);
}

void Allocator::publish_unlogged(const Reservation& r) {
  uint64_t c = chunk_of(r.off);
  if (r.size >= chunk_) {
    std::atomic_ref<uint64_t>(*chunk_word(c)).store(kChunkLarge | ((r.size / chunk_) << 8));
    pool_.persister().flush(chunk_word(c), 8);
  } else {
    uint64_t b = (r.off - chunk_off(c)) / r.size;
    uint64_t woff = bitmap_word_off(c, b);
    apply_op(pool_, woff, 2, uint64_t{1} << (b % 64));
    pool_.persister().flush(pool_.ptr<char>(woff), 8);
  }
  allocated_bytes_.fetch_add(r.size, std::memory_order_relaxed);
  reserved_bytes_.fetch_sub(r.size, std::memory_order_relaxed);
}

uint64_t Allocator::block_size(uint64_t off) const {
  if (off < heap_off_ || off >= heap_off_ + nchunks_ * chunk_) return 0;
  uint64_t c = chunk_of(off);
  uint64_t w = chunk_word_now(c);
  if ((w & 0xFF) == kChunkLarge)
    return off == chunk_off(c) && (w >> 8) >= 1 && (w >> 8) <= nchunks_ - c ? (w >> 8) * chunk_ : 0;
  if ((w & 0xFF) != kChunkSlab || (w >> 8) >= static_cast<uint64_t>(nclasses_)) return 0;
  uint64_t bsize = kMinBlock << (w >> 8);
  if ((off - chunk_off(c)) % bsize != 0) return 0;
  uint64_t b = (off - chunk_off(c)) / bsize;
  uint64_t bits = std::atomic_ref<uint64_t>(*pool_.ptr<uint64_t>(bitmap_word_off(c, b))).load();
  return (bits >> (b % 64)) & 1 ? bsize : 0;
}

void Allocator::for_each_allocated(
    const std::function<void(uint64_t off, uint64_t size)>& fn) const {
  for (uint64_t c = 0; c < nchunks_; ++c) {
    uint64_t w = chunk_word_now(c);
    uint64_t type = w & 0xFF, value = w >> 8;
    if (type == kChunkLarge && value >= 1 && value <= nchunks_ - c) {
      fn(chunk_off(c), value * chunk_);
      c += value - 1;
    } else if (type == kChunkSlab && value < static_cast<uint64_t>(nclasses_)) {
      uint64_t bsize = kMinBlock << value, nblocks = chunk_ / bsize;
      const uint64_t* bm = pool_.ptr<uint64_t>(bitmap_off_ + c * (chunk_ / 512));
      for (uint64_t b = 0; b < nblocks; ++b)
        if ((bm[b / 64] >> (b % 64)) & 1) fn(chunk_off(c) + b * bsize, bsize);
    } else if (w != kChunkFree) {
      fn(chunk_off(c), ~uint64_t{0});  // garbage word: reported as an odd allocation
    }
  }
}

// ---- the log-free protocol ----

// The persistent word that says whether the block [off, off+size) is allocated: its chunk's
// table word for a run of chunks (*bit = 0), else its slab bitmap word (*bit = its mask).
uint64_t* Allocator::meta_word(uint64_t off, uint64_t size, uint64_t* bit) const {
  uint64_t c = chunk_of(off);
  if (size >= chunk_) {
    *bit = 0;
    return chunk_word(c);
  }
  uint64_t b = (off - chunk_off(c)) / size;
  *bit = uint64_t{1} << (b % 64);
  return pool_.ptr<uint64_t>(bitmap_word_off(c, b));
}

uint64_t* Allocator::set_allocated(const Reservation& r) {
  uint64_t bit;
  uint64_t* w = meta_word(r.off, r.size, &bit);
  if (bit == 0)
    std::atomic_ref<uint64_t>(*w).store(kChunkLarge | ((r.size / chunk_) << 8));
  else
    std::atomic_ref<uint64_t>(*w).fetch_or(bit, std::memory_order_acq_rel);
  allocated_bytes_.fetch_add(r.size, std::memory_order_relaxed);
  reserved_bytes_.fetch_sub(r.size, std::memory_order_relaxed);
  return w;
}

void Allocator::mark(const Reservation& r) {
  pool_.persister().flush(set_allocated(r), 8);
}

void Allocator::mark(const std::vector<Reservation>& rs) {
  std::vector<uintptr_t> lines;
  for (const Reservation& r : rs)
    lines.push_back(reinterpret_cast<uintptr_t>(set_allocated(r)) & ~uintptr_t{63});
  std::sort(lines.begin(), lines.end());
  lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
  for (uintptr_t l : lines) pool_.persister().flush(reinterpret_cast<const void*>(l), 64);
}

void Allocator::flush_mark(const Reservation& r) {
  uint64_t bit;
  pool_.persister().flush(meta_word(r.off, r.size, &bit), 8);
}

// Clears the block's allocation bit (its chunk word, for a run) unless it is clear already;
// true if this call cleared it. Atomic: a runtime free and the background sweep may race
// for one block (begin_sweep), and only the winner accounts for it and lets it be reused.
bool Allocator::clear_allocated(uint64_t off, uint64_t size) {
  uint64_t bit;
  uint64_t* w = meta_word(off, size, &bit);
  if (bit != 0) {
    read_slab_of(chunk_of(off));
    return std::atomic_ref<uint64_t>(*w).fetch_and(~bit, std::memory_order_acq_rel) & bit;
  }
  uint64_t run = std::atomic_ref<uint64_t>(*w).load(std::memory_order_acquire);
  return (run & 0xFF) == kChunkLarge && std::atomic_ref<uint64_t>(*w).compare_exchange_strong(
                                            run, kChunkFree, std::memory_order_acq_rel);
}

void Allocator::unmark(uint64_t off) {
  uint64_t size = block_size(off);
  if (size == 0) return;  // not allocated: nothing to do (check() would report the caller)
  forget_suspect(off);
  if (!clear_allocated(off, size)) return;  // the background sweep took it first
  std::atomic<uint8_t>& chunk_unflushed = unflushed_chunks_[chunk_of(off)];
  if (!chunk_unflushed.load(std::memory_order_relaxed))  // a shared line: stored once
    chunk_unflushed.store(1, std::memory_order_relaxed);
  unflushed_.store(true, std::memory_order_relaxed);
  allocated_bytes_.fetch_sub(size, std::memory_order_relaxed);
  if (on_free)
    on_free(off);
  else
    release(off);
}

uint64_t Allocator::sweep(const Walk& walk) {
  begin_sweep();
  walk([this](uint64_t off) { note_reachable(off); });
  return end_sweep(false);
}

// O(heap / 512), not O(blocks): a 64-byte slab's bitmap words are the suspect words as they
// are; larger blocks spread their bits (one per block start). No operation runs yet.
void Allocator::begin_sweep() {
  // calloc: the pages of regions with nothing allocated are never touched.
  suspects_.reset(static_cast<uint64_t*>(std::calloc(map_words(), 8)));
  reached_.reset(static_cast<uint64_t*>(std::calloc(map_words(), 8)));
  const uint64_t units_per_chunk = chunk_ / kMinBlock;
  for (uint64_t c = 0; c < nchunks_; ++c) {
    uint64_t w = chunk_word_now(c), type = w & 0xFF, value = w >> 8;
    uint64_t first = c * units_per_chunk;  // a multiple of 64: chunks are >= 4 KiB
    if (type == kChunkLarge && value >= 1 && value <= nchunks_ - c) {
      suspects_[first / 64] = 1;
      c += value - 1;
    } else if (type == kChunkSlab && value < static_cast<uint64_t>(nclasses_)) {
      const uint64_t* bm = pool_.ptr<uint64_t>(bitmap_off_ + c * (chunk_ / 512));
      uint64_t stride = uint64_t{1} << value, nblocks = chunk_ / (kMinBlock << value);
      for (uint64_t bw = 0; bw < (nblocks + 63) / 64; ++bw) {
        uint64_t bits = bm[bw] & block_bits(nblocks, bw);  // none past the blocks: damage
        if (stride == 1) {
          if (bits != 0) suspects_[first / 64 + bw] = bits;
          continue;
        }
        for (; bits; bits &= bits - 1) {
          uint64_t u = first + (bw * 64 + std::countr_zero(bits)) * stride;
          suspects_[u / 64] |= uint64_t{1} << (u % 64);
        }
      }
    }
  }
  sweeping_.store(true, std::memory_order_seq_cst);
}

void Allocator::clear_unit(uint64_t* map, uint64_t off) const {
  if (off < heap_off_ || off >= heap_off_ + nchunks_ * chunk_) return;
  uint64_t u = (off - heap_off_) / kMinBlock;
  std::atomic_ref<uint64_t>(map[u / 64]).fetch_and(~(uint64_t{1} << (u % 64)));
}

// The two maps exist only while a sweep runs: a free or a move that saw sweeping_ holds
// them (map_users_) until it is done, and end_sweep() deletes them once none does.
template <class F>
void Allocator::with_maps(F f) {
  if (!sweeping_.load(std::memory_order_seq_cst)) return;
  map_users_.fetch_add(1, std::memory_order_seq_cst);
  if (sweeping_.load(std::memory_order_seq_cst)) f();
  map_users_.fetch_sub(1, std::memory_order_seq_cst);
}

void Allocator::forget_suspect(uint64_t off) {
  with_maps([&] { clear_unit(suspects_.get(), off); });
}

void Allocator::note_reachable(uint64_t off) {
  with_maps([&] {
    if (off < heap_off_ || off >= heap_off_ + nchunks_ * chunk_) return;
    uint64_t u = (off - heap_off_) / kMinBlock;
    std::atomic_ref<uint64_t>(reached_[u / 64]).fetch_or(uint64_t{1} << (u % 64));
  });
}

uint64_t Allocator::end_sweep(bool background) {
  std::vector<std::pair<uint64_t, uint64_t>> lost;
  for (uint64_t w = 0; w < map_words(); ++w) {
    std::atomic_ref<uint64_t> suspect(suspects_[w]);
    uint64_t left = suspect.load();
    if (left != 0) left &= ~std::atomic_ref<uint64_t>(reached_[w]).load();
    for (; left; left &= left - 1) {
      uint64_t off = heap_off_ + (w * 64 + std::countr_zero(left)) * kMinBlock;
      uint64_t size = block_size(off);
      // A write may have freed it meanwhile (forget_suspect): then the bit decides.
      bool still = suspect.load() & (left & -left);
      if (size != 0 && still && clear_allocated(off, size)) lost.emplace_back(off, size);
    }
  }
  sweeping_.store(false, std::memory_order_seq_cst);
  while (map_users_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  suspects_.reset();
  reached_.reset();
  {
    std::lock_guard<std::mutex> g(last_swept_mu_);
    last_swept_.clear();
    for (auto [off, size] : lost) last_swept_.push_back(off);
  }
  const Persister& p = pool_.persister();
  for (auto [off, size] : lost) {
    uint64_t bit;
    p.flush(meta_word(off, size, &bit), 8);
  }
  if (lost.empty()) return 0;
  p.fence();
  swept_.fetch_add(lost.size(), std::memory_order_relaxed);
  for (auto [off, size] : lost) {
    allocated_bytes_.fetch_sub(size, std::memory_order_relaxed);
    // In the background, epoch-deferred: a write that unpublished the block may still be on
    // its way to unmark() (it meets a clear bit and does nothing).
    if (background && on_free)
      on_free(off);
    else
      release(off);
  }
  return lost.size();
}

std::vector<uint64_t> Allocator::last_swept() const {
  std::lock_guard<std::mutex> g(last_swept_mu_);
  return last_swept_;
}

// The table word and bitmap of each chunk unmark() cleared something in, not the whole
// table and bitmaps: a flush faults a page in like a load, and on a full file system a
// never-written page of a sparse pool raises SIGBUS. A chunk this open backed has no holes;
// one from before may (pools written before session 19): its pages are checked.
void Allocator::write_back() {
  if (!unflushed_.exchange(false)) return;
  const Persister& p = pool_.persister();
  std::lock_guard<std::mutex> g(chunk_mu_);
  for (uint64_t c = 0; c < nchunks_; ++c) {
    if (!unflushed_chunks_[c].exchange(0, std::memory_order_relaxed)) continue;
    p.flush(chunk_word(c), 8);  // it named a run or a slab: written
    uint64_t bits = bitmap_off_ + c * (chunk_ / 512);
    if (chunk_backed_[c])
      p.flush(pool_.ptr<char>(bits), chunk_ / 512);
    else
      pool_.flush_written(bits, chunk_ / 512);
  }
  p.fence();
}

// ---- Tx ----

void Tx::add(uint64_t off, Op op, uint64_t value) {
  assert(n_ < kMaxOps);
  ops_[n_][0] = off | op;
  ops_[n_][1] = value;
  ++n_;
}

void Tx::store(uint64_t* word, uint64_t value) {
  add(a_.pool_.offset(word), kStore, value);
}

void Tx::publish(const Reservation& r) {
  uint64_t c = a_.chunk_of(r.off);
  if (r.size >= a_.chunk_) {
    add(a_.table_off_ + c * 8, kStore, kChunkLarge | ((r.size / a_.chunk_) << 8));
  } else {
    uint64_t b = (r.off - a_.chunk_off(c)) / r.size;
    add(a_.bitmap_word_off(c, b), kSetBits, uint64_t{1} << (b % 64));
  }
  bytes_delta_ += static_cast<int64_t>(r.size);
  published_ += r.size;
}

void Tx::free(uint64_t off) {
  uint64_t size = a_.block_size(off);
  if (size == 0) return;  // not allocated: nothing to do (check() would report the caller)
  uint64_t c = a_.chunk_of(off);
  if (size >= a_.chunk_) {
    add(a_.table_off_ + c * 8, kStore, kChunkFree);
  } else {
    a_.read_slab_of(c);  // its record counts the block before the commit clears its bit
    uint64_t b = (off - a_.chunk_off(c)) / size;
    add(a_.bitmap_word_off(c, b), kClearBits, uint64_t{1} << (b % 64));
  }
  assert(nfreed_ < 4);
  freed_[nfreed_++] = off;
  bytes_delta_ -= static_cast<int64_t>(size);
}

void Tx::apply_one(uint64_t off, Op op, uint64_t value) const {
  apply_op(a_.pool_, off, op, value);
}

void Tx::commit() {
  const Persister& p = a_.pool_.persister();
  if (n_ == 0) return;
  if (n_ == 1 && (ops_[0][0] & 7) == kStore && bytes_delta_ == 0) {
    // A single 8-byte store is failure-atomic by itself: no log needed.
    uint64_t off = ops_[0][0] & ~uint64_t{7};
    apply_one(off, kStore, ops_[0][1]);
    p.persist(a_.pool_.ptr<char>(off), 8);
    return;
  }
  thread_local uint64_t lane_hint = std::hash<const void*>{}(&lane_hint) / 64;
  uint64_t l = lane_hint % kLanes;
  for (bool expected = false;
       !a_.lane_busy_[l].compare_exchange_weak(expected, true, std::memory_order_acquire);
       expected = false)
    l = (l + 1) % kLanes;
  lane_hint = l;
  auto* lane = a_.pool_.ptr<uint64_t>(a_.lanes_off_ + l * kLaneBytes);
  std::memcpy(lane + 1, ops_, static_cast<size_t>(n_) * 16);
  std::atomic_ref<uint64_t>(lane[0]).store(lane_header(lane + 1, n_), std::memory_order_release);
  p.persist(lane, 8 + static_cast<size_t>(n_) * 16);
  // Apply everything, then flush each distinct line once: a line flushed before a later
  // op changes it again would persist only the earlier content.
  for (int i = 0; i < n_; ++i)
    apply_one(ops_[i][0] & ~uint64_t{7}, static_cast<Op>(ops_[i][0] & 7), ops_[i][1]);
  uint64_t flushed[kMaxOps];
  int nflushed = 0;
  for (int i = 0; i < n_; ++i) {
    uint64_t line = ops_[i][0] & ~uint64_t{kCacheLine - 1};
    bool dup = false;
    for (int j = 0; j < nflushed; ++j) dup |= flushed[j] == line;
    if (dup) continue;
    flushed[nflushed++] = line;
    p.flush(a_.pool_.ptr<char>(line), kCacheLine);
  }
  p.fence();
  // Cleared and fenced before the lane (and the caller's lock) is let go: a stale log
  // replayed after another thread changed the same words would undo that change.
  std::atomic_ref<uint64_t>(lane[0]).store(0, std::memory_order_release);
  p.persist(lane, 8);
  a_.lane_busy_[l].store(false, std::memory_order_release);
  a_.allocated_bytes_.fetch_add(static_cast<uint64_t>(bytes_delta_), std::memory_order_relaxed);
  a_.reserved_bytes_.fetch_sub(published_, std::memory_order_relaxed);
  for (int i = 0; i < nfreed_; ++i) {
    a_.forget_suspect(freed_[i]);
    if (a_.on_free)
      a_.on_free(freed_[i]);
    else
      a_.release(freed_[i]);
  }
  n_ = 0;
  nfreed_ = 0;
  bytes_delta_ = 0;
  published_ = 0;
}

}  // namespace pmhash::pm
