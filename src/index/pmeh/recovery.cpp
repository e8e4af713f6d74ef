// PMEH's instant recovery (§III-F): open bumps the crash version, the constructor redoes
// the split records (cases 2 and 4), and each segment's locks and displacement leftovers
// are repaired lazily at its first access (case 5). validate.cpp checks a pool before this.
#include <set>
#include <thread>

#include "index/pmeh/pmeh.hpp"

namespace pmhash::pmeh {

using common::load_word;
using common::Slot;
using common::store_word;

namespace {
// lock_gen while one thread recovers the segment (the others wait for it).
constexpr uint64_t kRecovering = uint64_t{1} << 63;
}  // namespace

Status Pmeh::open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out) {
  Root* r = existing_root<Root>(ctx, kRootMagic);
  if (r == nullptr) return {Code::kCorrupted, "pmeh: root object missing or damaged"};
  uint64_t zones = uint64_t{1} << std::min<uint64_t>(r->zone_bits, 12);
  if (r->segment_bytes < 2048 || !std::has_single_bit(r->segment_bytes) || r->split_shift == 0 ||
      r->split_shift > 4 || r->zone_bits > 12 ||
      ctx.alloc.block_size(r->split_log) < zones * sizeof(SplitRecord) ||
      ctx.alloc.block_size(r->dirs[r->latest_dir % kMaxDirs]) < sizeof(Directory))
    return {Code::kCorrupted, "pmeh: directories or metadata missing or damaged"};
  // Recovery finds the latest directory through its number (the ring position).
  uint64_t num = ctx.pool.ptr<Directory>(r->dirs[r->latest_dir % kMaxDirs])->number;
  if (num != r->latest_dir && !(num == 0 && r->latest_dir < kMaxDirs))
    return {Code::kCorrupted, "pmeh: the latest directory's number does not match"};
  for (uint64_t j = 0; j < kMaxDirs; ++j) {
    if (r->dirs[j] == 0) continue;
    const auto* d = ctx.pool.ptr<Directory>(r->dirs[j]);
    if (d->depth > 40 || ctx.alloc.block_size(r->dirs[j]) < sizeof(Directory) + (8ull << d->depth))
      return {Code::kCorrupted, "pmeh: directory " + std::to_string(j) + " damaged"};
  }
  // Every open is a new crash version: a bucket lock bit in PM is never meaningful across
  // opens (a clean close leaves none, but a damaged pool may hold one and would hang readers),
  // so each segment's locks are reset, and the segment checked, at its first access.
  store_word(r->open_gen, r->open_gen + 1);
  ctx.pool.persister().persist(&r->open_gen, 8);
  auto p = std::make_unique<Pmeh>(ctx, ctx.pool.root());
  // The variable format's log-free writes may have left allocated, unreachable items: a
  // background sweep frees them (BackgroundSweep), so the open stays instant. Records that
  // move while it walks (displacement, split) note their items (write_record, build_child).
  if (!clean && ctx.items.variable()) {
    Pmeh* pp = p.get();
    p->sweep_ = std::make_unique<BackgroundSweep>(
        ctx.alloc, ctx.epochs, [pp](const auto& fn) { pp->sweep_walk(fn); },
        pp->rt_.test_sweep_pause_us);
  }
  *out = std::move(p);
  return Status::Ok();
}

// The background sweep's walk, beside operations. Directories and the segment list are read
// under dir_mu_, the lock directories are published and freed under (a free is a logged
// commit: the walk must reach them first; and reading the ring while a directory wraps
// around it could miss segments); segments are never freed; a record's item is seen in
// place, or noted by the write that moves it (write_record, build_child) before its old
// copy goes. Every slot with its
// allocation bit set is reported, read atomically (writers run): a copy a split or a
// displacement leaves behind names an item that is live elsewhere or freed meanwhile, and
// reporting a block too many only keeps it for the next sweep.
void Pmeh::sweep_walk(const std::function<void(uint64_t off)>& fn) {
  std::vector<uint64_t> segs;
  {  // no directory is published or freed meanwhile: the ring is read whole, consistently
    std::lock_guard<std::mutex> g(dir_mu_);
    fn(root_off_);
    fn(root_->split_log);
    for (uint64_t j = 0; j < kMaxDirs; ++j)
      if (uint64_t off = load_word(root_->dirs[j])) fn(off);
    segs = distinct_segments();
  }
  for (uint64_t so : segs) fn(so);
  // A segment split off later holds copies noted by build_child, or new items.
  for (uint64_t so : segs) {
    Bucket* bs = buckets(segment(so));
    for (uint64_t i = 0; i < nbuckets_ + kStash; ++i)
      for (uint32_t a = word::alloc(load_word(bs[i].word0)); a; a &= a - 1)
        fn(load_word(bs[i].slots[std::countr_zero(a)].value));
  }
}

// §III-F: instant recovery — only the split records are looked at (cases 2 and 4); the
// directory array is published atomically with its allocation (case 3); bucket locks are
// reset lazily per segment through the crash version (case 5).
void Pmeh::recover() {
  const SplitRecord* log = pool_.ptr<SplitRecord>(root_->split_log);
  for (uint32_t z = 0; z < (1u << zone_bits_); ++z) {
    open_segment_reads() += log[z].flag != 0;  // the split's old segment
    finish_split(z);
  }
}

// §III-F case 5: the first access to a segment after an open resets its bucket locks,
// removes a record a crash during displacement left in two buckets, and clears overflow
// metadata a crash left pointing at nothing. Until then, size(), for_each() and check()
// apply the same rules without writing (live_alloc, stale_overflow). First it checks what
// open does not read (check_first_access): a damaged segment is kCorrupted, left unwritten.
Status Pmeh::ensure_recovered(SegmentHeader* s, uint64_t h) {
  std::atomic_ref<uint64_t> g(s->lock_gen);
  for (int spins = 0;; ++spins) {
    uint64_t v = g.load(std::memory_order_acquire);
    if (v == gen_) return Status::Ok();
    if (v == (gen_ | kRecovering) || !g.compare_exchange_strong(v, gen_ | kRecovering)) {
      if (spins > 64) std::this_thread::yield();  // another thread checks or recovers it
      cpu_relax();
      continue;
    }
    // This thread alone has the segment now: no other access, and so no split, reads or
    // changes it until lock_gen is gen_ (checked here, not before the CAS: a winner could
    // have recovered and split it under a check made outside).
    Status bad = check_first_access(s, v, h);
    if (!bad.ok()) {
      g.store(v, std::memory_order_release);  // as found: the damaged segment is not written
      return bad;
    }
    Bucket* bs = buckets(s);
    const pm::Persister& p = pool_.persister();
    std::vector<uint32_t> keep = kept_alloc(s);
    for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) {
      uint64_t w = load_word(bs[i].word0);
      uint64_t nw = word::with_bits(w & ~word::kLock, keep[i], word::member(w) & keep[i]);
      if (nw != w) {
        store_word(bs[i].word0, nw);
        p.flush(&bs[i].word0, 8);
      }
    }
    p.fence();
    trim_overflow(s);
    g.store(gen_, std::memory_order_release);
    return Status::Ok();
  }
}

// A crash version an earlier open of this pool used (1 at creation), possibly with the
// recovering bit of an open that crashed while recovering the segment: 0 (a zeroed header,
// which would read as an empty depth-0 segment covering every key) or a later one is damage.
bool Pmeh::crash_version_used(uint64_t lock_gen) const {
  uint64_t g = lock_gen & ~kRecovering;
  return g != 0 && g <= gen_;
}

// What open no longer reads of each segment (validate.cpp: the directories only, so that
// recovery stays instant), checked at its first access, before anything is written: the
// crash version, and that its metadata covers the whole entry of the latest directory the
// key's hash falls in (seg::covers_entry, as check() requires of every entry). The caller
// holds the segment (the recovering bit), and no split or other access has changed it since
// open (they all come through ensure_recovered first); every state a crash leaves satisfies
// both, so a failure is damage. Without this check the hot paths' walks would retry 100,000
// times before giving up.
Status Pmeh::check_first_access(const SegmentHeader* s, uint64_t lock_gen, uint64_t h) const {
  uint64_t so = pool_.offset(s);
  if (!crash_version_used(lock_gen))
    return {Code::kCorrupted, "pmeh: segment " + std::to_string(so) + " has crash version " +
                                  std::to_string(lock_gen) +
                                  ", which no earlier open used (this open's is " +
                                  std::to_string(gen_) + "): its header is damaged"};
  uint64_t k = latest_.load(std::memory_order_acquire);
  const Directory* d = dir(k);  // the latest directory is never freed
  uint64_t m = load_word(s->meta);
  if (d != nullptr && !seg::covers_entry(m, entry_of(h, d->depth), d->depth, shift_))
    return {Code::kCorrupted, "pmeh: segment " + std::to_string(so) + " (local depth " +
                                  std::to_string(seg::depth(m)) + ", pattern " +
                                  std::to_string(seg::pattern(m)) + ", splitting bitmap " +
                                  std::to_string(seg::bitmap(m)) + ") does not cover hash prefix " +
                                  std::to_string(entry_of(h, d->depth)) +
                                  " of the latest directory (" + std::to_string(k) + ", depth " +
                                  std::to_string(d->depth) +
                                  ") that leads to it: the directory or the segment "
                                  "header is damaged"};
  return Status::Ok();
}

bool Pmeh::recovered(const SegmentHeader* s) const {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(s->lock_gen))
             .load(std::memory_order_acquire) == gen_;
}

// The allocation bits of every bucket without the later copy of a record a crash inside a
// displacement (copy, then delete) left in two buckets: the first copy in bucket order is
// kept. Only an unrecovered segment can hold such a copy (identical key and value words:
// keys are unique, so nothing else can).
std::vector<uint32_t> Pmeh::kept_alloc(SegmentHeader* s) const {
  Bucket* bs = buckets(s);
  std::vector<uint32_t> keep(nbuckets_ + kStash);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) {
    uint32_t a = word::alloc(load_word(bs[i].word0));
    for (uint32_t bits = a; bits; bits &= bits - 1) {
      const Slot& sl = bs[i].slots[std::countr_zero(bits)];
      if (!seen.insert({load_word(sl.key), load_word(sl.value)}).second)
        a &= ~(1u << std::countr_zero(bits));
    }
    keep[i] = a;
  }
  return keep;
}

// The records of a segment as users see them: with the displacement rule applied if the
// lazy recovery has not visited the segment yet.
std::vector<uint32_t> Pmeh::live_alloc(SegmentHeader* s) const {
  if (!recovered(s)) return kept_alloc(s);
  std::vector<uint32_t> a(nbuckets_ + kStash);
  Bucket* bs = buckets(s);
  for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) a[i] = word::alloc(load_word(bs[i].word0));
  return a;
}

}  // namespace pmhash::pmeh
