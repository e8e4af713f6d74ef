#include "index/pmeh/pmeh.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <thread>
#include <unordered_set>

namespace pmhash::pmeh {

using common::load_word;
using common::Slot;
using common::store_word;

namespace {

inline void cpu_relax() {
  asm volatile("pause" ::: "memory");
}

inline uint8_t load_byte(const uint8_t& b) {
  return std::atomic_ref<uint8_t>(const_cast<uint8_t&>(b)).load(std::memory_order_relaxed);
}
inline void store_byte(uint8_t& b, uint8_t v) {
  std::atomic_ref<uint8_t>(b).store(v, std::memory_order_relaxed);
}

// Zone word: state in bits 0..1, thread counter above.
constexpr uint32_t kExclusive = 0, kRequest = 1, kShared = 2;
inline uint32_t zstate(uint32_t w) {
  return w & 3;
}
inline uint32_t zcount(uint32_t w) {
  return w >> 2;
}

constexpr uint64_t kRecovering = uint64_t{1} << 63;
constexpr uint64_t kNoExpansion = ~uint64_t{0};

void spin_lock(std::atomic<uint32_t>& l) {
  for (int spins = 0;; ++spins) {
    uint32_t z = 0;
    if (l.load(std::memory_order_relaxed) == 0 &&
        l.compare_exchange_weak(z, 1, std::memory_order_acquire))
      return;
    if (spins > 64) std::this_thread::yield();
    cpu_relax();
  }
}

// The low 32 bits (version and lock) kept, allocation and membership replaced.
inline uint64_t with_bits(uint64_t w, uint32_t alloc, uint32_t member) {
  return (w & 0xFFFF'FFFFull) | (word::make(0, alloc, member) & ~0xFFFF'FFFFull);
}

}  // namespace

// ---- construction, layout, recovery ----

Pmeh::Pmeh(SchemeContext& ctx, uint64_t root_off)
    : pool_(ctx.pool),
      alloc_(ctx.alloc),
      epochs_(ctx.epochs),
      threads_(ctx.threads),
      items_(ctx.items),
      root_off_(root_off),
      root_(ctx.pool.ptr<Root>(root_off)),
      shift_(static_cast<uint32_t>(root_->split_shift)),
      zone_bits_(static_cast<uint32_t>(root_->zone_bits)),
      nbuckets_(root_->segment_bytes / sizeof(Bucket) - 1 - kStash),
      seg_bytes_(root_->segment_bytes),
      gen_(root_->open_gen),
      tstats_(new ThreadStats[pm::ThreadRegistry::kMaxThreads]) {
  Runtime rt = runtime_config<Runtime, &parse_runtime>(ctx);
  zone_threads_ = static_cast<unsigned>(rt.zone_threads);
  opportunistic_ = rt.opportunistic;
  zones_.reset(new Zone[uint64_t{1} << zone_bits_]);
  latest_.store(root_->latest_dir);
  // §III-F: instant recovery — only the split records are looked at (cases 2 and 4); the
  // directory array is published atomically with its allocation (case 3); bucket locks are
  // reset lazily per segment through the crash version (case 5).
  for (uint32_t z = 0; z < (1u << zone_bits_); ++z) finish_split(z);
}

Pmeh::~Pmeh() = default;

Status Pmeh::parse_runtime(const common::Params& params, Runtime* out) {
  Status s =
      params.get_u64("pmeh", "zone_threads", std::max(1u, std::thread::hardware_concurrency()), 1,
                     pm::ThreadRegistry::kMaxThreads, &out->zone_threads);
  if (s.ok()) s = params.get_bool("pmeh", "opportunistic", true, &out->opportunistic);
  return s;
}

Status Pmeh::layout(const Options& o, common::Params* layout) {
  common::Params p(o.params);
  uint64_t seg, split, zones, depth;
  if (!p.get_u64("segment_bytes", 32768, &seg) || seg < 2048 || seg > 131072 ||
      !std::has_single_bit(seg))
    return {Code::kInvalidArgument,
            "pmeh: 'segment_bytes' must be a power of two from 2048 to 131072"};
  if (!p.get_u64("split", 16, &split) || (split != 2 && split != 4 && split != 8 && split != 16))
    return {Code::kInvalidArgument, "pmeh: 'split' (split multiple) must be 2, 4, 8 or 16"};
  if (!p.get_u64("zones", 64, &zones) || zones == 0 || zones > 4096 || !std::has_single_bit(zones))
    return {Code::kInvalidArgument, "pmeh: 'zones' must be a power of two from 1 to 4096"};
  uint64_t zone_bits = std::countr_zero(zones);
  // Initial directory: 64 entries (§IV-A), more when the capacity hint asks for it.
  uint64_t per_seg = (seg / sizeof(Bucket) - 1) * kBucketSlots;
  uint64_t def = std::max<uint64_t>(6, zone_bits);
  while (o.capacity_hint && (uint64_t{1} << def) * per_seg / 2 < o.capacity_hint && def < 24) ++def;
  if (!p.get_u64("depth", def, &depth) || depth < zone_bits || depth > 24)
    return {Code::kInvalidArgument,
            "pmeh: 'depth' (initial global depth) must be from log2(zones) to 24"};
  layout->set("segment_bytes", std::to_string(seg));
  layout->set("split", std::to_string(split));
  layout->set("zones", std::to_string(zones));
  layout->set("depth", std::to_string(depth));
  return Status::Ok();
}

Status Pmeh::create(SchemeContext& ctx, std::unique_ptr<Scheme>* out) {
  uint64_t seg = 0, split = 0, zones = 0, depth = 0;
  if (!ctx.layout.get_u64("segment_bytes", 0, &seg) || !ctx.layout.get_u64("split", 0, &split) ||
      !ctx.layout.get_u64("zones", 0, &zones) || !ctx.layout.get_u64("depth", 0, &depth) ||
      seg < 2048 || split < 2 || zones == 0)
    return {Code::kCorrupted, "pmeh: pool header lacks layout parameters"};
  uint64_t nseg = uint64_t{1} << depth;
  std::vector<pm::Reservation> rs;
  auto take = [&](uint64_t size) {
    pm::Reservation r = ctx.alloc.reserve(size);
    rs.push_back(r);
    return r;
  };
  pm::Reservation root = take(sizeof(Root));
  pm::Reservation log = take(zones * sizeof(SplitRecord));
  pm::Reservation d0 = take(sizeof(Directory) + nseg * 8);
  std::vector<pm::Reservation> segs;
  for (uint64_t i = 0; i < nseg && rs.back(); ++i) segs.push_back(take(seg));
  for (auto& r : rs)
    if (!r) {
      for (auto& x : rs) ctx.alloc.cancel(x);
      return {Code::kPoolFull, "pool too small for " + std::to_string(nseg) + " segments"};
    }
  const pm::Persister& p = ctx.pool.persister();
  for (auto& r : rs) std::memset(ctx.pool.ptr<char>(r.off), 0, r.size);
  auto* d = ctx.pool.ptr<Directory>(d0.off);
  d->depth = depth;
  d->zones_updated = zones;
  d->number = 0;
  for (uint64_t i = 0; i < nseg; ++i) {
    auto* sh = ctx.pool.ptr<SegmentHeader>(segs[i].off);
    sh->meta = seg::make(static_cast<uint32_t>(depth), i, 0);
    sh->lock_gen = 1;
    d->entries[i] = segs[i].off;
  }
  Root* rt = ctx.pool.ptr<Root>(root.off);
  rt->magic = kRootMagic;
  rt->segment_bytes = seg;
  rt->split_shift = std::countr_zero(split);
  rt->zone_bits = std::countr_zero(zones);
  rt->latest_dir = 0;
  rt->open_gen = 1;
  rt->split_log = log.off;
  rt->dirs[0] = d0.off;
  for (auto& r : rs) p.flush(ctx.pool.ptr<char>(r.off), r.size);
  publish_new_root(ctx, rs, root.off);
  *out = std::make_unique<Pmeh>(ctx, root.off);
  return Status::Ok();
}

Status Pmeh::open(SchemeContext& ctx, bool /*clean*/, std::unique_ptr<Scheme>* out) {
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
  *out = std::make_unique<Pmeh>(ctx, ctx.pool.root());
  return Status::Ok();
}

// ---- hashing, directories ----

Pmeh::Hashed Pmeh::hashed(std::string_view key) const {
  uint64_t h = common::Items::hash(key);
  return {h, items_.key_word(key, h), static_cast<uint8_t>(h >> 32)};
}

namespace {
inline uint64_t entry_of(uint64_t h, uint64_t depth) {
  return depth == 0 ? 0 : h >> (64 - depth);
}
}  // namespace

// Directory number n lives in array entry n % kMaxDirs until it is freed and the entry
// reused; its number tells which one is there. Pools written before the ring left number 0
// in every directory, each at the index of its number (all below kMaxDirs).
Directory* Pmeh::dir(uint64_t n) const {
  uint64_t off = load_word(root_->dirs[n % kMaxDirs]);
  if (off == 0) return nullptr;
  auto* d = pool_.ptr<Directory>(off);
  uint64_t num = load_word(d->number);
  return num == n || (num == 0 && n < kMaxDirs) ? d : nullptr;
}

// A segment of local depth L covers the keys with its L-bit prefix whose child (the next
// split_shift bits) has not been split out yet.
bool Pmeh::covers(uint64_t meta, uint64_t h) const {
  uint32_t l = seg::depth(meta);
  if (l != 0 && (h >> (64 - l)) != seg::pattern(meta)) return false;
  uint32_t c = static_cast<uint32_t>((h << l) >> (64 - shift_));
  return (seg::bitmap(meta) & (1u << c)) == 0;
}

// Algorithm 5's walk: the latest directory's entry, else the newest older one that has it.
// Lock-free callers hold a Guard: a directory freed meanwhile stays readable, and one whose
// array entry was reused is skipped (its number differs).
uint64_t Pmeh::find_segment(uint64_t h, bool* from_latest) const {
  uint64_t k = latest_.load(std::memory_order_acquire);
  for (uint64_t j = k + 1; j-- > oldest_possible(k);) {
    const Directory* d = dir(j);
    if (d == nullptr) continue;
    uint64_t e = load_word(d->entries[entry_of(h, d->depth)]);
    if (e != 0) {
      if (from_latest) *from_latest = j == k;
      return e;
    }
  }
  return 0;
}

// The latest directory's segment for h, the zone's entries filled first if empty
// (Algorithms 4 and 6). The caller is inside zone z — alone (exclusive) or holding the zone
// lock (shared) — and holds a Guard. Then the directory read here cannot be freed before
// the caller leaves the zone: freeing it needs a newer directory with every zone filled,
// zone z included, and only a thread in zone z fills zone z.
uint64_t Pmeh::zone_segment(uint32_t z, uint64_t h) {
  uint64_t kd = latest_.load(std::memory_order_acquire);
  Directory* d = dir(kd);
  if (d == nullptr) return 0;  // not reachable (see above); the caller retries
  uint64_t e = entry_of(h, d->depth);
  if (load_word(d->entries[e]) == 0) update_zone_entries(z, kd);
  return load_word(d->entries[e]);
}

// ---- zones (§III-B1, §III-D) ----

bool Pmeh::is_local(uint32_t z) const {
  unsigned tid = threads_.id();
  return opportunistic_ && tid < zone_threads_ && z % zone_threads_ == tid;
}

// Algorithm 7's state switch. The local thread writes lock-free while the zone is
// exclusive; it marks itself active first, so a requester switches the zone to shared only
// when the local thread is outside its lock-free section (the paper lets the local thread
// flip it on its next access, which never comes if that thread is idle).
Pmeh::ZoneMode Pmeh::enter(uint32_t z, bool local) {
  if (!opportunistic_) return ZoneMode::kShared;  // the all-locking baseline
  Zone& zn = zones_[z];
  if (local) {
    zn.owner_active.store(1, std::memory_order_seq_cst);
    if (zstate(zn.word.load(std::memory_order_seq_cst)) == kExclusive) return ZoneMode::kExclusive;
    zn.owner_active.store(0, std::memory_order_release);
  }
  for (;;) {
    uint32_t w = zn.word.load(std::memory_order_acquire);
    switch (zstate(w)) {
      case kExclusive:  // request access (Fig. 7)
        zn.word.compare_exchange_weak(w, kRequest, std::memory_order_seq_cst);
        break;
      case kRequest:
        if (local || zn.owner_active.load(std::memory_order_seq_cst) == 0)
          zn.word.compare_exchange_weak(w, kShared, std::memory_order_seq_cst);
        else
          cpu_relax();
        break;
      default:  // shared: count this thread in
        if (zn.word.compare_exchange_weak(w, w + 4, std::memory_order_acq_rel))
          return ZoneMode::kShared;
        break;
    }
  }
}

void Pmeh::exit(uint32_t z, ZoneMode m) {
  if (!opportunistic_) return;
  Zone& zn = zones_[z];
  if (m == ZoneMode::kExclusive) {
    zn.owner_active.store(0, std::memory_order_release);
    return;
  }
  // The last thread out returns the zone to exclusive (atomically with the count).
  uint32_t w = zn.word.load(std::memory_order_relaxed);
  for (;;) {
    uint32_t nw = zcount(w) == 1 ? kExclusive : w - 4;
    if (zn.word.compare_exchange_weak(w, nw, std::memory_order_acq_rel)) return;
  }
}

namespace {
// The zone lock, taken only in shared mode (the local thread in exclusive mode is alone).
struct ZoneLock {
  std::atomic<uint32_t>* l = nullptr;
  ZoneLock(std::atomic<uint32_t>& lock, bool take) {
    if (take) {
      l = &lock;
      spin_lock(lock);
    }
  }
  ~ZoneLock() {
    if (l) l->store(0, std::memory_order_release);
  }
};
}  // namespace

// ---- buckets ----

void Pmeh::lock_bucket(Bucket& b, ZoneMode m) {
  std::atomic_ref<uint64_t> w(b.word0);
  if (m == ZoneMode::kExclusive) {  // alone: the lock bit only tells readers to retry
    // Relaxed: the record stores that follow are releases, so a reader that sees them
    // sees the lock bit at its second version load.
    w.store(w.load(std::memory_order_relaxed) | word::kLock, std::memory_order_relaxed);
    return;
  }
  for (int spins = 0;; ++spins) {
    uint64_t v = w.load(std::memory_order_relaxed);
    if (!(v & word::kLock) &&
        w.compare_exchange_weak(v, v | word::kLock, std::memory_order_acquire))
      return;
    if (spins > 64) std::this_thread::yield();
    cpu_relax();
  }
}

bool Pmeh::try_lock_bucket(Bucket& b, ZoneMode m) {
  std::atomic_ref<uint64_t> w(b.word0);
  uint64_t v = w.load(std::memory_order_relaxed);
  if (v & word::kLock) return false;
  if (m == ZoneMode::kExclusive) {
    w.store(v | word::kLock, std::memory_order_relaxed);
    return true;
  }
  return w.compare_exchange_strong(v, v | word::kLock, std::memory_order_acquire);
}

void Pmeh::unlock_bucket(Bucket& b) {
  std::atomic_ref<uint64_t> w(b.word0);
  uint64_t v = w.load(std::memory_order_relaxed);
  w.store((v & ~0xFFFF'FFFFull) | ((word::version(v) + 1) & 0x7FFF'FFFFu),
          std::memory_order_release);
}

// A writer holds the key's bucket, its neighbour and the stash buckets (ascending order).
bool Pmeh::lock_buckets(SegmentHeader* s, uint64_t b, ZoneMode m) {
  Bucket* bs = buckets(s);
  uint64_t b1 = (b + 1) % nbuckets_;
  lock_bucket(bs[std::min(b, b1)], m);
  lock_bucket(bs[std::max(b, b1)], m);
  for (int i = 0; i < kStash; ++i) lock_bucket(bs[nbuckets_ + i], m);
  return true;
}

void Pmeh::unlock_buckets(SegmentHeader* s, uint64_t b, ZoneMode m) {
  (void)m;
  Bucket* bs = buckets(s);
  for (int i = kStash; i-- > 0;) unlock_bucket(bs[nbuckets_ + i]);
  unlock_bucket(bs[(b + 1) % nbuckets_]);
  unlock_bucket(bs[b]);
}

// §III-F case 5: the first access to a segment after an open resets its bucket locks,
// removes a record a crash during displacement left in two buckets, and clears overflow
// metadata a crash left pointing at nothing. Until then, size(), for_each() and check()
// apply the same rules without writing (live_alloc, stale_overflow).
void Pmeh::ensure_recovered(SegmentHeader* s) {
  std::atomic_ref<uint64_t> g(s->lock_gen);
  uint64_t v = g.load(std::memory_order_acquire);
  if (v == gen_) return;
  if (v != (gen_ | kRecovering) && g.compare_exchange_strong(v, gen_ | kRecovering)) {
    Bucket* bs = buckets(s);
    const pm::Persister& p = pool_.persister();
    std::vector<uint32_t> keep = kept_alloc(s);
    for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) {
      uint64_t w = load_word(bs[i].word0);
      uint64_t nw = with_bits(w & ~word::kLock, keep[i], word::member(w) & keep[i]);
      if (nw != w) {
        store_word(bs[i].word0, nw);
        p.flush(&bs[i].word0, 8);
      }
    }
    p.fence();
    trim_overflow(s);
    g.store(gen_, std::memory_order_release);
    return;
  }
  while (g.load(std::memory_order_acquire) != gen_) cpu_relax();
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

// Overflow metadata (Dash) that points at no stashed record. Per home bucket b, the overflow
// fingerprints (b's own, and b+1's with the membership bit) are matched with b's stashed
// records by (fingerprint, stash bucket); a fingerprint left over is stale, and so is an
// overflow count above the records left without one. Records moved out by a split, a crash
// between a fingerprint and its record, or between a delete and its fingerprint, leave them.
std::vector<Pmeh::StaleOverflow> Pmeh::stale_overflow(SegmentHeader* s) const {
  Bucket* bs = buckets(s);
  struct Rec {
    uint64_t home;
    uint8_t fp, st;
    bool matched;
  };
  std::vector<Rec> recs;
  std::vector<uint8_t> homed(nbuckets_);
  for (int st = 0; st < kStash; ++st) {
    Bucket& sb = bs[nbuckets_ + st];
    for (uint32_t a = word::alloc(load_word(sb.word0)); a; a &= a - 1) {
      uint64_t h = items_.slot_hash(load_word(sb.slots[std::countr_zero(a)].key));
      recs.push_back(
          {bucket_of(h), static_cast<uint8_t>(h >> 32), static_cast<uint8_t>(st), false});
      homed[recs.back().home] = 1;
    }
  }
  std::vector<StaleOverflow> out;
  for (uint64_t b = 0; b < nbuckets_; ++b) {
    Bucket& b1 = bs[(b + 1) % nbuckets_];
    if (!homed[b] && (load_byte(bs[b].obits) & 0xF) == 0 && load_byte(bs[b].ocount) == 0 &&
        (load_byte(b1.obits) & 0xF) == 0)
      continue;
    for (int side = 0; side < 2; ++side) {
      Bucket& ob = side == 0 ? bs[b] : b1;
      uint8_t bits = load_byte(ob.obits), sts = load_byte(ob.ostash);
      for (int i = 0; i < kOverflow; ++i) {
        if (!((bits >> i) & 1) || ((bits >> (4 + i)) & 1) != side) continue;
        uint8_t fp = load_byte(ob.ofp[i]), st = ((sts >> (2 * i)) & 3) % kStash;
        auto r = std::find_if(recs.begin(), recs.end(), [&](const Rec& x) {
          return !x.matched && x.home == b && x.fp == fp && x.st == st;
        });
        if (r != recs.end())
          r->matched = true;
        else
          out.push_back({&ob, i, 0});
      }
    }
    auto unmatched = static_cast<uint8_t>(std::count_if(
        recs.begin(), recs.end(), [&](const Rec& x) { return !x.matched && x.home == b; }));
    if (load_byte(bs[b].ocount) > unmatched) out.push_back({&bs[b], -1, unmatched});
  }
  return out;
}

// Clears stale overflow metadata (buckets locked, or the segment private to this thread).
// Only what is left over goes, so every stashed record keeps a fingerprint (or the count)
// that leads a search to it at every step, and a redo after a crash clears the rest.
void Pmeh::trim_overflow(SegmentHeader* s) {
  std::vector<StaleOverflow> stale = stale_overflow(s);
  if (stale.empty()) return;
  const pm::Persister& p = pool_.persister();
  for (const StaleOverflow& x : stale) {
    if (x.entry >= 0)
      store_byte(x.b->obits, static_cast<uint8_t>(load_byte(x.b->obits) & ~(1u << x.entry)));
    else
      store_byte(x.b->ocount, x.count);
    p.flush(x.b, pm::kCacheLine);
  }
  p.fence();
}

// Records of bucket `b` with this membership whose fingerprint and key match.
bool Pmeh::slot_in(Bucket& b, bool membership, const Hashed& k, std::string_view key, int* slot,
                   uint64_t* vw) const {
  uint64_t w = load_word(b.word0);
  uint32_t cand = word::alloc(w) & (membership ? word::member(w) : ~word::member(w));
  for (; cand; cand &= cand - 1) {
    int i = std::countr_zero(cand);
    if (load_byte(b.fp[i]) != k.fp) continue;
    uint64_t sk = load_word(b.slots[i].key), sv = load_word(b.slots[i].value);
    if (items_.matches(sk, sv, key, k.kw)) {
      *slot = i;
      *vw = sv;
      return true;
    }
  }
  return false;
}

// Dash's search: the home bucket (records homed here), its neighbour (records with the
// membership bit), then the stash buckets the overflow fingerprints point at, and every
// stash bucket if the home bucket counts stashed records without a fingerprint. A reader
// (retry != null) checks each bucket's version before and after; a writer holds the locks.
bool Pmeh::seg_find(SegmentHeader* s, const Hashed& k, std::string_view key, Loc* loc,
                    uint64_t* value_word, bool* retry) const {
  Bucket* bs = buckets(s);
  uint64_t b = bucket_of(k.h), b1 = (b + 1) % nbuckets_;
  auto stable = [&](Bucket& bk, auto&& body) {
    uint64_t w1 = load_word(bk.word0);
    if (retry && (w1 & word::kLock)) {
      *retry = true;
      return false;
    }
    bool r = body();
    if (retry && load_word(bk.word0) != w1) {
      *retry = true;
      return false;
    }
    return r;
  };
  int slot;
  if (stable(bs[b], [&] { return slot_in(bs[b], false, k, key, &slot, value_word); })) {
    *loc = Loc{&bs[b], slot, false, -1, nullptr};
    return true;
  }
  if (retry && *retry) return false;
  if (stable(bs[b1], [&] { return slot_in(bs[b1], true, k, key, &slot, value_word); })) {
    *loc = Loc{&bs[b1], slot, false, -1, nullptr};
    return true;
  }
  if (retry && *retry) return false;
  // Overflow fingerprints in the home bucket (membership 0) and the neighbour (1).
  bool scan_all = false;
  for (int side = 0; side < 2; ++side) {
    Bucket& ob = side == 0 ? bs[b] : bs[b1];
    bool found = stable(ob, [&] {
      uint8_t bits = load_byte(ob.obits), st = load_byte(ob.ostash);
      if (side == 0 && load_byte(ob.ocount) != 0) scan_all = true;
      for (int i = 0; i < kOverflow; ++i) {
        if (!((bits >> i) & 1) || ((bits >> (4 + i)) & 1) != side || load_byte(ob.ofp[i]) != k.fp)
          continue;
        Bucket& sb = bs[nbuckets_ + ((st >> (2 * i)) & 3) % kStash];
        uint64_t w1 = load_word(sb.word0);
        if (retry && (w1 & word::kLock)) return *retry = true, false;
        bool hit = slot_in(sb, false, k, key, &slot, value_word);
        if (retry && load_word(sb.word0) != w1) return *retry = true, false;
        if (hit) {
          *loc = Loc{&sb, slot, true, i, &ob};
          return true;
        }
      }
      return false;
    });
    if (found) return true;
    if (retry && *retry) return false;
  }
  if (!scan_all) return false;
  for (int i = 0; i < kStash; ++i) {
    Bucket& sb = bs[nbuckets_ + i];
    if (stable(sb, [&] { return slot_in(sb, false, k, key, &slot, value_word); })) {
      *loc = Loc{&sb, slot, true, -1, &bs[b]};
      return true;
    }
    if (retry && *retry) return false;
  }
  return false;
}

// Algorithm 1's record write: slot and fingerprint persisted before the store that sets the
// allocation bit (the fingerprint shares line 0 with it and is stored first: x86 persists
// it no later). The variable format commits the bit with the item through the redo log,
// whose replay ignores line order: line 0 is persisted first then.
void Pmeh::write_record(Bucket& b, int slot, bool membership, uint8_t fp, uint64_t kw, uint64_t vw,
                        const pm::Reservation* publish) {
  const pm::Persister& p = pool_.persister();
  Slot& sl = b.slots[slot];
  store_word(sl.key, kw);
  store_word(sl.value, vw);
  store_byte(b.fp[slot], fp);
  p.flush(&sl, sizeof sl);
  if (publish != nullptr && (offsetof(Bucket, slots) + slot * sizeof(Slot)) >= pm::kCacheLine)
    p.flush(&b, pm::kCacheLine);
  p.fence();
  uint64_t w = load_word(b.word0);
  uint32_t a = word::alloc(w) | (1u << slot);
  uint32_t mb = membership ? word::member(w) | (1u << slot) : word::member(w) & ~(1u << slot);
  if (publish != nullptr) {
    pm::Tx tx(alloc_);
    tx.publish(*publish);
    tx.store(&b.word0, with_bits(w, a, mb));
    tx.commit();
    return;
  }
  p.line_order(&b);
  store_word(b.word0, with_bits(w, a, mb));
  p.persist(&b.word0, 8);
}

void Pmeh::clear_record(Bucket& b, int slot, uint64_t free_off) {
  uint64_t w = load_word(b.word0);
  uint64_t nw = with_bits(w, word::alloc(w) & ~(1u << slot), word::member(w) & ~(1u << slot));
  if (free_off != 0) {
    pm::Tx tx(alloc_);
    tx.store(&b.word0, nw);
    tx.free(free_off);
    tx.commit();
    return;
  }
  store_word(b.word0, nw);
  pool_.persister().persist(&b.word0, 8);
}

// An overflow fingerprint for a stashed record whose home is bucket b: in b, else in b+1
// (with the overflow membership bit), else the home bucket's overflow count. Written before
// the stashed record: a crash leaves at most a fingerprint that points at nothing.
bool Pmeh::register_overflow(Bucket* bs, uint64_t b, uint8_t fp, int stash_idx) {
  const pm::Persister& p = pool_.persister();
  for (int side = 0; side < 2; ++side) {
    Bucket& ob = bs[side == 0 ? b : (b + 1) % nbuckets_];
    uint8_t bits = ob.obits;
    for (int i = 0; i < kOverflow; ++i) {
      if ((bits >> i) & 1) continue;
      store_byte(ob.ofp[i], fp);
      store_byte(ob.ostash, static_cast<uint8_t>((ob.ostash & ~(3u << (2 * i))) |
                                                 (unsigned(stash_idx) << (2 * i))));
      p.line_order(&ob);
      store_byte(ob.obits, static_cast<uint8_t>((bits | (1u << i)) & ~(1u << (4 + i))) |
                               static_cast<uint8_t>(side << (4 + i)));
      p.persist(&ob, pm::kCacheLine);
      return true;
    }
  }
  Bucket& hb = bs[b];
  if (hb.ocount == 255) return false;
  store_byte(hb.ocount, static_cast<uint8_t>(hb.ocount + 1));
  p.persist(&hb.ocount, 1);
  return true;
}

// Dash's insert into a segment (buckets locked): balanced insert into the less full of the
// home bucket and its neighbour; else displacement (a neighbour's own record to the next
// bucket, or a home bucket's borrowed record back to the previous); else a stash bucket;
// else *full (the segment must split).
Status Pmeh::seg_insert(SegmentHeader* s, uint64_t b, const Hashed& k,
                        const common::Items::New& item, ZoneMode m, bool* full) {
  Bucket* bs = buckets(s);
  uint64_t b1 = (b + 1) % nbuckets_;
  const pm::Reservation* pub = items_.variable() ? &item.item : nullptr;
  auto free_slot = [](const Bucket& bk) {
    uint32_t a = word::alloc(load_word(bk.word0));
    return a == (1u << kBucketSlots) - 1 ? -1 : std::countr_one(a);
  };
  auto count = [](const Bucket& bk) { return std::popcount(word::alloc(load_word(bk.word0))); };
  int c0 = count(bs[b]), c1 = count(bs[b1]);
  if (c0 < kBucketSlots && c0 <= c1) {
    write_record(bs[b], free_slot(bs[b]), false, k.fp, item.key_word, item.value_word, pub);
    return Status::Ok();
  }
  if (c1 < kBucketSlots) {
    write_record(bs[b1], free_slot(bs[b1]), true, k.fp, item.key_word, item.value_word, pub);
    return Status::Ok();
  }
  // Displacement: move one record, then take its slot.
  auto move = [&](Bucket& from, int slot, Bucket& to, bool to_member) {
    int t = free_slot(to);
    write_record(to, t, to_member, from.fp[slot], from.slots[slot].key, from.slots[slot].value,
                 nullptr);
    clear_record(from, slot, 0);
    displaced_.fetch_add(1, std::memory_order_relaxed);
  };
  uint64_t b2 = (b1 + 1) % nbuckets_, bp = (b + nbuckets_ - 1) % nbuckets_;
  if (b2 != b && try_lock_bucket(bs[b2], m)) {
    uint64_t w = load_word(bs[b1].word0);
    uint32_t own = word::alloc(w) & ~word::member(w);
    if (own != 0 && free_slot(bs[b2]) >= 0) {
      int j = std::countr_zero(own);
      move(bs[b1], j, bs[b2], true);
      unlock_bucket(bs[b2]);
      write_record(bs[b1], j, true, k.fp, item.key_word, item.value_word, pub);
      return Status::Ok();
    }
    unlock_bucket(bs[b2]);
  }
  if (bp != b1 && try_lock_bucket(bs[bp], m)) {
    uint64_t w = load_word(bs[b].word0);
    uint32_t borrowed = word::alloc(w) & word::member(w);
    if (borrowed != 0 && free_slot(bs[bp]) >= 0) {
      int j = std::countr_zero(borrowed);
      move(bs[b], j, bs[bp], false);
      unlock_bucket(bs[bp]);
      write_record(bs[b], j, false, k.fp, item.key_word, item.value_word, pub);
      return Status::Ok();
    }
    unlock_bucket(bs[bp]);
  }
  // Stashing.
  for (int i = 0; i < kStash; ++i) {
    Bucket& sb = bs[nbuckets_ + i];
    int t = free_slot(sb);
    if (t < 0) continue;
    if (!register_overflow(bs, b, k.fp, i)) break;
    write_record(sb, t, false, k.fp, item.key_word, item.value_word, pub);
    stashed_.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  *full = true;
  return Status::Ok();
}

// ---- operations ----

// Algorithm 5: lock-free. A segment found through the directories is searched only if it
// still covers the key, and the search is valid only if its metadata did not change: a
// split changes it after updating the entries and before removing the moved records.
Status Pmeh::get(std::string_view key, std::string* value) {
  Hashed k = hashed(key);
  unsigned tid = threads_.id();
  pm::Epochs::Guard guard(epochs_, tid);
  // `empty` counts consecutive walks that found no segment (only a corrupted pool keeps
  // doing that); retries after a change under the reader are unbounded, and yield now and
  // then so that a descheduled writer (more threads than cores) can finish.
  for (int empty = 0, spins = 0;;) {
    uint64_t so = find_segment(k.h, nullptr);
    if (so == 0) {
      // The zone's entries were filled in the latest directory, and the older ones freed,
      // between this reader's two loads: look again.
      if (++empty > 100000) return {Code::kCorrupted, "pmeh: no segment for a key"};
      std::this_thread::yield();
      continue;
    }
    SegmentHeader* s = segment(so);
    ensure_recovered(s);
    uint64_t m1 = load_word(s->meta);
    if (!covers(m1, k.h)) {
      // A split moved the key's range and the directory is about to say where; a walk
      // that never reaches a covering segment (a damaged pool) counts as empty.
      if (++empty > 100000) return {Code::kCorrupted, "pmeh: no segment covers a key"};
      tstats_[tid].retries.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::yield();
      continue;
    }
    empty = 0;
    Loc loc;
    uint64_t vw = 0;
    bool retry = false;
    bool found = seg_find(s, k, key, &loc, &vw, &retry);
    if (retry || load_word(s->meta) != m1) {
      tstats_[tid].retries.fetch_add(1, std::memory_order_relaxed);
      if (++spins % 64 == 0) std::this_thread::yield();
      continue;
    }
    if (!found) return {Code::kNotFound, "key not found"};
    if (!items_.read_value(vw, value)) return {Code::kCorrupted, "pmeh: slot points to no item"};
    return Status::Ok();
  }
}

// Algorithm 7 (with Algorithms 4 and 6): the zone decides lock-free or locked; a missing
// entry in the latest directory is filled for the zone first (Algorithm 3); a full segment
// splits out one more segment, or the directory expands, and the insert retries.
Status Pmeh::put(std::string_view key, std::string_view value, PutMode mode) {
  Hashed k = hashed(key);
  uint32_t z = zone_of(k.h);
  bool local = is_local(z);
  ThreadStats& ts = tstats_[threads_.id()];
  for (int empty = 0;;) {
    ZoneMode zm = enter(z, local);
    pm::Epochs::Guard guard(epochs_, threads_.id());
    uint64_t so;
    {  // the directory is read inside the zone (see zone_segment); segments are never freed
      ZoneLock zl(zones_[z].lock, zm == ZoneMode::kShared);
      so = zone_segment(z, k.h);
    }
    if (so == 0) {  // only a damaged pool: the zone's fill found no older entry
      exit(z, zm);
      if (++empty > 100000) return {Code::kCorrupted, "pmeh: no segment for a key"};
      continue;
    }
    SegmentHeader* s = segment(so);
    ensure_recovered(s);
    uint64_t b = bucket_of(k.h);
    lock_buckets(s, b, zm);
    if (!covers(load_word(s->meta), k.h)) {  // split meanwhile (shared mode): retry
      unlock_buckets(s, b, zm);
      exit(z, zm);
      if (++empty > 100000) return {Code::kCorrupted, "pmeh: no segment covers a key"};
      continue;
    }
    empty = 0;
    Loc loc;
    uint64_t vw = 0;
    Status st;
    if (seg_find(s, k, key, &loc, &vw, nullptr)) {
      if (mode == PutMode::kInsert) {
        st = {Code::kAlreadyExists, "key already exists"};
      } else {
        common::Items::New item;
        st = items_.make(key, value, k.kw, &item);
        if (st.ok()) {
          items_.replace_value(loc.b->slots[loc.slot].value, item);
          (zm == ZoneMode::kExclusive ? ts.lock_free : ts.locked)
              .fetch_add(1, std::memory_order_relaxed);
        }
      }
      unlock_buckets(s, b, zm);
      exit(z, zm);
      return st;
    }
    if (mode == PutMode::kUpdate) {
      unlock_buckets(s, b, zm);
      exit(z, zm);
      return {Code::kNotFound, "key not found"};
    }
    common::Items::New item;
    st = items_.make(key, value, k.kw, &item);
    bool full = false;
    if (st.ok()) st = seg_insert(s, b, k, item, zm, &full);
    unlock_buckets(s, b, zm);
    if (!st.ok() || !full) {
      if (st.ok()) {
        (zm == ZoneMode::kExclusive ? ts.lock_free : ts.locked)
            .fetch_add(1, std::memory_order_relaxed);
      }
      exit(z, zm);
      return st;
    }
    items_.cancel(item);
    uint64_t expand = kNoExpansion;
    st = split_or_expand(so, k.h, z, zm, &expand);
    exit(z, zm);
    // Outside the zone: an expansion may have to enter every zone (fill_every_zone).
    if (st.ok() && expand != kNoExpansion) st = expand_directory(expand);
    if (!st.ok()) return st;
  }
}

Status Pmeh::remove(std::string_view key) {
  Hashed k = hashed(key);
  uint32_t z = zone_of(k.h);
  bool local = is_local(z);
  ThreadStats& ts = tstats_[threads_.id()];
  for (int empty = 0;;) {
    ZoneMode zm = enter(z, local);
    pm::Epochs::Guard guard(epochs_, threads_.id());
    uint64_t so = find_segment(k.h, nullptr);
    if (so == 0) {  // as in get(): a fill and a directory free raced with the walk
      exit(z, zm);
      if (++empty > 100000) return {Code::kCorrupted, "pmeh: no segment for a key"};
      std::this_thread::yield();
      continue;
    }
    SegmentHeader* s = segment(so);
    ensure_recovered(s);
    uint64_t b = bucket_of(k.h);
    lock_buckets(s, b, zm);
    if (!covers(load_word(s->meta), k.h)) {
      unlock_buckets(s, b, zm);
      exit(z, zm);
      if (++empty > 100000) return {Code::kCorrupted, "pmeh: no segment covers a key"};
      std::this_thread::yield();
      continue;
    }
    empty = 0;
    Loc loc;
    uint64_t vw = 0;
    bool found = seg_find(s, k, key, &loc, &vw, nullptr);
    if (found) {
      clear_record(*loc.b, loc.slot, items_.owned_block(vw));
      if (loc.stash) {  // its overflow fingerprint, or one from the home bucket's count
        Bucket& ob = *loc.ofp_bucket;
        if (loc.home_ofp >= 0) {
          store_byte(ob.obits, static_cast<uint8_t>(ob.obits & ~(1u << loc.home_ofp)));
          pool_.persister().persist(&ob.obits, 1);
        } else if (ob.ocount > 0) {
          store_byte(ob.ocount, static_cast<uint8_t>(ob.ocount - 1));
          pool_.persister().persist(&ob.ocount, 1);
        }
      }
      (zm == ZoneMode::kExclusive ? ts.lock_free : ts.locked)
          .fetch_add(1, std::memory_order_relaxed);
    }
    unlock_buckets(s, b, zm);
    exit(z, zm);
    return found ? Status::Ok() : Status{Code::kNotFound, "key not found"};
  }
}

// ---- expansion: directories (§III-B2) and multisplit with gradual splitting (§III-E) ----

// Inside zone z. A directory expansion is left to the caller (*expand: the directory to
// expand from), which does it after leaving the zone.
Status Pmeh::split_or_expand(uint64_t seg_off, uint64_t h, uint32_t z, ZoneMode m,
                             uint64_t* expand) {
  uint64_t kd;
  uint32_t child = 0;
  {
    ZoneLock zl(zones_[z].lock, m == ZoneMode::kShared);
    kd = latest_.load(std::memory_order_acquire);
    Directory* d = dir(kd);  // not freed while this thread is in the zone (zone_segment)
    if (d == nullptr) return Status::Ok();  // retry
    if (load_word(d->entries[entry_of(h, d->depth)]) == 0) update_zone_entries(z, kd);
    if (load_word(d->entries[entry_of(h, d->depth)]) != seg_off) return Status::Ok();  // retry
    uint64_t meta = load_word(segment(seg_off)->meta);
    uint32_t l = seg::depth(meta);
    if (d->depth >= l + shift_) {
      // Gradual splitting: the child the key belongs to if it is still inside, else the
      // first child not split out yet.
      child = static_cast<uint32_t>((h << l) >> (64 - shift_));
      uint32_t bits = seg::bitmap(meta);
      if (child == 0 || (bits & (1u << child)))
        for (child = 1; bits & (1u << child); ++child) {
        }
      return split_out(seg_off, kd, child, z, m);
    }
  }
  *expand = kd;
  return Status::Ok();
}

// Algorithm 2. The new directory (depth + split_shift, entries empty) is published with its
// allocation in one commit; one thread wins (a DRAM lock instead of the paper's CAS: the
// losers never allocated, so there is nothing to free). Its array entry is the one of
// directory from + 1 - kMaxDirs; if that one still lives (some zone never filled a newer
// directory), every zone of the latest directory is filled first, which frees it.
Status Pmeh::expand_directory(uint64_t from) {
  for (int attempt = 0;; ++attempt) {
    {
      std::lock_guard<std::mutex> g(dir_mu_);
      if (latest_.load() != from) return Status::Ok();
      if (load_word(root_->dirs[(from + 1) % kMaxDirs]) == 0) return publish_directory(from);
    }
    if (attempt > 0)
      return {Code::kCorrupted, "pmeh: filling every zone freed no directory array entry"};
    fill_every_zone(from);
  }
}

// Fills every zone's entries of directory k (the latest), entering each zone as a writer
// would, then frees the older directories (the last fill normally does; this also covers a
// crash between a fill and its count, or between the count and the free).
void Pmeh::fill_every_zone(uint64_t k) {
  uint32_t nz = 1u << zone_bits_;
  forced_fills_.fetch_add(1, std::memory_order_relaxed);
  for (uint32_t z = 0; z < nz; ++z) {
    ZoneMode zm = enter(z, is_local(z));
    {
      ZoneLock zl(zones_[z].lock, zm == ZoneMode::kShared);
      if (latest_.load(std::memory_order_acquire) == k) update_zone_entries(z, k);
    }
    exit(z, zm);
    if (latest_.load(std::memory_order_acquire) != k) return;  // expanded meanwhile
  }
  {
    std::lock_guard<std::mutex> g(dir_mu_);  // directories are freed under it
    Directory* d = dir(k);
    if (d == nullptr) return;
    store_word(d->zones_updated, nz);  // every zone is filled: count them all (idempotent)
    pool_.persister().persist(&d->zones_updated, 8);
  }
  free_old_directories(k);
}

// The expansion proper (dir_mu_ held, the array entry free).
Status Pmeh::publish_directory(uint64_t from) {
  Directory* d = dir(from);
  uint64_t depth = d->depth + shift_;
  uint64_t bytes = sizeof(Directory) + (8ull << depth);
  pm::Reservation r = alloc_.reserve(bytes);
  if (!r)
    return {Code::kPoolFull,
            "pool full: no space for a directory of depth " + std::to_string(depth)};
  auto* nd = pool_.ptr<Directory>(r.off);
  std::memset(static_cast<void*>(nd), 0, bytes);
  nd->depth = depth;
  nd->number = from + 1;
  const pm::Persister& p = pool_.persister();
  p.flush(nd, bytes);
  p.fence();
  pm::Tx tx(alloc_);
  tx.publish(r);
  tx.store(&root_->dirs[(from + 1) % kMaxDirs], r.off);
  tx.store(&root_->latest_dir, from + 1);
  tx.commit();
  latest_.store(from + 1, std::memory_order_release);
  expansions_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

// Algorithm 3: the zone's empty entries in directory k point where the newest older
// directory's entries do. When every zone is done, the older directories are freed. The
// caller is inside zone z, and directory k is not older than the latest it read there.
void Pmeh::update_zone_entries(uint32_t z, uint64_t k) {
  Directory* d = dir(k);
  uint64_t per = uint64_t{1} << (d->depth - zone_bits_);
  uint64_t first = uint64_t{z} * per;
  bool filled = false;
  const pm::Persister& p = pool_.persister();
  for (uint64_t t = first; t < first + per; ++t) {
    if (d->entries[t] != 0) continue;
    for (uint64_t j = k; j-- > oldest_possible(k);) {
      const Directory* od = dir(j);
      if (od == nullptr) continue;
      uint64_t e = od->entries[t >> (d->depth - od->depth)];
      if (e != 0) {
        store_word(d->entries[t], e);
        filled = true;
        break;
      }
    }
  }
  if (!filled) return;
  p.flush(&d->entries[first], per * 8);
  p.fence();
  uint64_t n = std::atomic_ref<uint64_t>(d->zones_updated).fetch_add(1) + 1;
  p.persist(&d->zones_updated, 8);
  if (n >= (uint64_t{1} << zone_bits_)) free_old_directories(k);
}

// Oldest first, so the live directories are always a run of consecutive numbers ending at
// the latest. Directory k (every zone filled) is already published, so each freed one goes
// through the allocator's on_free, i.e. Epochs::retire: readers holding a Guard keep it.
void Pmeh::free_old_directories(uint64_t k) {
  std::lock_guard<std::mutex> g(dir_mu_);
  for (uint64_t j = oldest_possible(k); j < k; ++j) {
    if (dir(j) == nullptr) continue;
    uint64_t* slot = &root_->dirs[j % kMaxDirs];
    uint64_t off = *slot;
    pm::Tx tx(alloc_);
    tx.store(slot, 0);
    tx.free(off);
    tx.commit();
  }
}

// One gradual split step: child `child` of the segment becomes a segment of its own.
// The new segment is built and persisted off to the side, then published with the split
// record in one commit; finish_split() points the entries at it, records the child in the
// splitting bitmap (or, with the last child, deepens the segment) and removes the moved
// records from the old segment — and recovery redoes exactly that (§III-F case 2).
Status Pmeh::split_out(uint64_t seg_off, uint64_t k, uint32_t child, uint32_t z, ZoneMode m) {
  SegmentHeader* s = segment(seg_off);
  Bucket* bs = buckets(s);
  uint64_t total = nbuckets_ + kStash;
  if (m == ZoneMode::kShared)
    for (uint64_t i = 0; i < total; ++i) lock_bucket(bs[i], m);
  auto unlock_all = [&] {
    if (m == ZoneMode::kShared)
      for (uint64_t i = total; i-- > 0;) unlock_bucket(bs[i]);
  };
  uint64_t meta = load_word(s->meta);
  uint32_t l = seg::depth(meta);
  pm::Reservation r = alloc_.reserve(seg_bytes_);
  if (!r) {
    unlock_all();
    return {Code::kPoolFull, "pool full: no space for a pmeh segment"};
  }
  auto* n = pool_.ptr<SegmentHeader>(r.off);
  std::memset(static_cast<void*>(n), 0, seg_bytes_);
  n->meta = seg::make(l + shift_, (seg::pattern(meta) << shift_) | child, 0);
  n->lock_gen = gen_;
  Bucket* nb = buckets(n);
  uint64_t moved = 0;
  bool ok = true;
  for (uint64_t i = 0; i < total && ok; ++i) {
    uint64_t w = load_word(bs[i].word0);
    for (uint32_t a = word::alloc(w); a && ok; a &= a - 1) {
      const Slot& sl = bs[i].slots[std::countr_zero(a)];
      uint64_t h = items_.slot_hash(sl.key);
      if (!covers(meta, h) || ((h << l) >> (64 - shift_)) != child) continue;
      // Placed as an insert would, without persisting each record (the segment is private).
      uint64_t b = bucket_of(h), b1 = (b + 1) % nbuckets_;
      uint8_t fp = static_cast<uint8_t>(h >> 32);
      auto put_in = [&](Bucket& bk, bool mem) {
        uint64_t bw = bk.word0;
        uint32_t ba = word::alloc(bw);
        if (ba == (1u << kBucketSlots) - 1) return false;
        int t = std::countr_one(ba);
        bk.slots[t] = sl;
        bk.fp[t] = fp;
        bk.word0 =
            with_bits(bw, ba | (1u << t), mem ? word::member(bw) | (1u << t) : word::member(bw));
        return true;
      };
      int c0 = std::popcount(word::alloc(nb[b].word0)),
          c1 = std::popcount(word::alloc(nb[b1].word0));
      bool placed =
          (c0 <= c1 && put_in(nb[b], false)) || put_in(nb[b1], true) || put_in(nb[b], false);
      for (int st = 0; st < kStash && !placed; ++st) {
        Bucket& sb = nb[nbuckets_ + st];
        if (word::alloc(sb.word0) == (1u << kBucketSlots) - 1) continue;
        Bucket& hb = nb[b];
        int free_ofp = std::countr_one(static_cast<unsigned>(hb.obits & 0xF));
        if (free_ofp < kOverflow) {
          hb.ofp[free_ofp] = fp;
          hb.ostash = static_cast<uint8_t>(hb.ostash | (st << (2 * free_ofp)));
          hb.obits = static_cast<uint8_t>(hb.obits | (1u << free_ofp));
        } else {
          hb.ocount++;
        }
        placed = put_in(sb, false);
      }
      ok = placed;
      ++moved;
    }
  }
  if (!ok) {  // cannot happen with a good hash: the child holds ~1/x of a full segment
    alloc_.cancel(r);
    unlock_all();
    return {Code::kPoolFull, "pmeh: a split could not place the records of a child"};
  }
  const pm::Persister& p = pool_.persister();
  if (!PMHASH_MUTATION(pool_, kMutationSplitUnpersisted)) {
    p.flush(n, seg_bytes_);
    p.fence();
  }
  SplitRecord& rec = pool_.ptr<SplitRecord>(root_->split_log)[z];
  pm::Tx tx(alloc_);
  tx.publish(r);
  tx.store(&rec.dir, k);
  tx.store(&rec.old_seg, seg_off);
  tx.store(&rec.new_seg, r.off);
  tx.store(&rec.child, child);
  tx.store(&rec.old_meta, meta);
  tx.store(&rec.flag, 1);
  tx.commit();
  finish_split(z);
  unlock_all();
  splits_.fetch_add(1, std::memory_order_relaxed);
  moved_.fetch_add(moved, std::memory_order_relaxed);
  return Status::Ok();
}

void Pmeh::finish_split(uint32_t z) {
  SplitRecord& rec = pool_.ptr<SplitRecord>(root_->split_log)[z];
  if (rec.flag == 0) return;
  const pm::Persister& p = pool_.persister();
  uint64_t old_meta = rec.old_meta;
  uint32_t child = static_cast<uint32_t>(rec.child);
  uint32_t l = seg::depth(old_meta);
  uint64_t pat = seg::pattern(old_meta);
  Directory* d = dir(rec.dir);  // not freed: that needs a fill of this zone, after this
  if (d == nullptr) return;
  // 1. The child's entries point at the new segment.
  uint64_t span = d->depth - l - shift_;
  uint64_t first = ((pat << shift_) | child) << span;
  for (uint64_t t = first; t < first + (uint64_t{1} << span); ++t)
    store_word(d->entries[t], rec.new_seg);
  p.flush(&d->entries[first], 8ull << span);
  p.fence();
  // 2. The splitting bitmap records the child; with the last one the local depth grows.
  SegmentHeader* s = segment(rec.old_seg);
  uint32_t bits = seg::bitmap(old_meta) | (1u << child);
  uint32_t all = ((1u << (1u << shift_)) - 1) & ~1u;
  uint64_t nm =
      (bits & all) == all ? seg::make(l + shift_, pat << shift_, 0) : seg::make(l, pat, bits);
  store_word(s->meta, nm);
  p.persist(&s->meta, 8);
  // 3. The moved records leave the old segment.
  Bucket* bs = buckets(s);
  for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) {
    uint64_t w = load_word(bs[i].word0);
    uint32_t a = word::alloc(w), mb = word::member(w), keep = a;
    for (uint32_t x = a; x; x &= x - 1) {
      int j = std::countr_zero(x);
      uint64_t h = items_.slot_hash(bs[i].slots[j].key);
      if (((h << l) >> (64 - shift_)) == child) keep &= ~(1u << j);
    }
    if (keep == a) continue;
    store_word(bs[i].word0, with_bits(w, keep, mb & keep));
    p.flush(&bs[i].word0, 8);
  }
  p.fence();
  // 4. The moved stashed records' overflow fingerprints (or counts) leave too (Dash).
  trim_overflow(s);
  store_word(rec.flag, 0);
  p.persist(&rec.flag, 8);
}

// ---- introspection ----

// Every segment some live directory points at (segments are never freed; directories are,
// hence the Guard).
std::vector<uint64_t> Pmeh::distinct_segments() const {
  pm::Epochs::Guard guard(epochs_);
  std::set<uint64_t> segs;
  for (uint64_t j = 0; j < kMaxDirs; ++j) {
    uint64_t off = load_word(root_->dirs[j]);
    if (off == 0) continue;
    const auto* d = pool_.ptr<Directory>(off);
    for (uint64_t t = 0; t < (uint64_t{1} << d->depth); ++t)
      if (uint64_t e = load_word(d->entries[t])) segs.insert(e);
  }
  return {segs.begin(), segs.end()};
}

// Exact right after a crash too: a segment the lazy recovery has not visited yet is read with
// its rule applied (live_alloc), nothing written.
uint64_t Pmeh::size() const {
  uint64_t n = 0;
  for (uint64_t so : distinct_segments()) {
    SegmentHeader* s = segment(so);
    uint64_t meta = load_word(s->meta);
    Bucket* bs = buckets(s);
    std::vector<uint32_t> live = live_alloc(s);
    for (uint64_t i = 0; i < nbuckets_ + kStash; ++i)
      for (uint32_t a = live[i]; a; a &= a - 1)
        n += covers(meta, items_.slot_hash(load_word(bs[i].slots[std::countr_zero(a)].key)));
  }
  return n;
}

uint64_t Pmeh::stale_overflow_entries() const {
  uint64_t n = 0;
  for (uint64_t so : distinct_segments())
    for (const StaleOverflow& x : stale_overflow(segment(so)))
      n += x.entry >= 0 ? 1 : load_byte(x.b->ocount) - x.count;
  return n;
}

uint64_t Pmeh::capacity_slots() const {
  return distinct_segments().size() * (nbuckets_ + kStash) * kBucketSlots;
}

uint64_t Pmeh::dram_bytes() const {
  return (uint64_t{1} << zone_bits_) * sizeof(Zone);
}

void Pmeh::counters(std::map<std::string, double>* out) const {
  uint64_t lf = 0, lk = 0, rt = 0;
  for (unsigned t = 0; t < pm::ThreadRegistry::kMaxThreads; ++t) {
    lf += tstats_[t].lock_free.load();
    lk += tstats_[t].locked.load();
    rt += tstats_[t].retries.load();
  }
  (*out)["segment_splits"] = double(splits_.load());
  (*out)["records_moved"] = double(moved_.load());
  (*out)["dir_expansions"] = double(expansions_.load());
  (*out)["displacements"] = double(displaced_.load());
  (*out)["stashed"] = double(stashed_.load());
  (*out)["dir_array_full_fills"] = double(forced_fills_.load());
  (*out)["lock_free_writes"] = double(lf);
  (*out)["locked_writes"] = double(lk);
  (*out)["lock_free_share"] = lf + lk ? double(lf) / double(lf + lk) : 0.0;
  (*out)["read_retries"] = double(rt);
  (*out)["segments"] = double(distinct_segments().size());
  pm::Epochs::Guard guard(epochs_);
  const Directory* d = dir(latest_.load());
  (*out)["global_depth"] = d ? double(d->depth) : 0.0;
}

bool Pmeh::check(std::string* report) const {
  bool ok = true;
  auto bad = [&](const std::string& what) {
    ok = false;
    *report += "pmeh: " + what + "\n";
  };
  // It changes nothing: a segment the lazy crash recovery (ensure_recovered) has not visited
  // yet is judged by that recovery's rules — stale lock bits, a displaced record's second
  // copy and stale overflow metadata are expected there — without running it.
  std::vector<uint64_t> segs = distinct_segments();
  for (uint32_t z = 0; z < (1u << zone_bits_); ++z)
    if (pool_.ptr<SplitRecord>(root_->split_log)[z].flag != 0) bad("a split left unfinished");
  // Every hash prefix of the latest directory leads (through older directories where the
  // zone's entries are not filled yet) to a segment that covers it. Older directories'
  // entries of filled zones are stale by design and never consulted.
  uint64_t latest = latest_.load();
  for (uint64_t j = 0; j < kMaxDirs; ++j) {  // the ring: latest_dir and the ones before it
    if (root_->dirs[j] == 0) continue;
    uint64_t n = pool_.ptr<Directory>(root_->dirs[j])->number;
    if (n == 0 && latest < kMaxDirs) n = j;
    if (n % kMaxDirs != j || n > latest || n < oldest_possible(latest))
      bad("directory array entry " + std::to_string(j) + " holds directory " + std::to_string(n) +
          ", not one of the " + std::to_string(kMaxDirs) + " up to the latest (" +
          std::to_string(latest) + ")");
  }
  const Directory* ld = dir(latest);
  if (ld == nullptr) {
    bad("the latest directory is missing");
    return false;
  }
  for (uint64_t t = 0; t < (uint64_t{1} << ld->depth) && ok; ++t) {
    uint64_t h = ld->depth ? t << (64 - ld->depth) : 0;
    uint64_t so = find_segment(h, nullptr);
    if (so == 0 || !seg::covers_entry(segment(so)->meta, t, ld->depth, shift_))
      bad("hash prefix " + std::to_string(t) + " leads to no segment that covers all of it");
  }
  std::unordered_set<std::string> keys;
  for (uint64_t so : segs) {
    if (!ok) break;
    SegmentHeader* s = segment(so);
    uint64_t meta = s->meta;
    Bucket* bs = buckets(s);
    bool rec = recovered(s);
    std::vector<uint32_t> live = live_alloc(s);
    if (rec) {
      uint64_t stale = stale_overflow(s).size();
      if (stale != 0)
        bad("segment " + std::to_string(so) + ": " + std::to_string(stale) +
            " overflow fingerprints or counts point at no stashed record");
    }
    for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) {
      uint64_t w = bs[i].word0;
      if (rec && (w & word::kLock)) bad("a bucket is still locked");
      if ((w >> 60) != uint64_t(std::popcount(word::alloc(w)))) bad("bucket counter is wrong");
      for (uint32_t a = live[i]; a; a &= a - 1) {
        int j = std::countr_zero(a);
        const Slot& sl = bs[i].slots[j];
        Hashed k{items_.slot_hash(sl.key), sl.key, 0};
        k.fp = static_cast<uint8_t>(k.h >> 32);
        std::string where = "segment " + std::to_string(so) + " bucket " + std::to_string(i);
        if (!covers(meta, k.h)) {
          bad(where + ": a record the segment does not cover");
          continue;
        }
        if (bs[i].fp[j] != k.fp) bad(where + ": wrong fingerprint");
        std::string key = items_.slot_key_bytes(sl);
        if (items_.variable()) {
          std::string_view ik;
          if (!items_.item_key(sl.value, &ik) || alloc_.block_size(sl.value) == 0) {
            bad(where + ": slot points to no item");
            continue;
          }
        }
        // Findable by the search, at this very slot (in an unrecovered segment, possibly at
        // the copy the recovery will drop: the same record).
        Loc loc;
        uint64_t vw;
        bool there = seg_find(s, k, key, &loc, &vw, nullptr) &&
                     (rec ? loc.b == &bs[i] && loc.slot == j
                          : loc.b->slots[loc.slot].key == sl.key && vw == sl.value);
        if (!there) bad(where + ": a record the search does not find there");
        if (!keys.insert(key).second) bad(where + ": key stored twice");
      }
    }
  }
  return ok;
}

void Pmeh::for_each_reachable(const std::function<void(uint64_t off)>& fn) const {
  fn(root_off_);
  fn(root_->split_log);
  for (uint64_t j = 0; j < kMaxDirs; ++j)
    if (uint64_t off = load_word(root_->dirs[j])) fn(off);
  for (uint64_t so : distinct_segments()) fn(so);
  if (items_.variable()) for_each([&](const Slot& s) { fn(s.value); });
}

void Pmeh::for_each(const std::function<void(const Slot&)>& fn) const {
  for (uint64_t so : distinct_segments()) {
    SegmentHeader* s = segment(so);
    uint64_t meta = s->meta;
    Bucket* bs = buckets(s);
    std::vector<uint32_t> live = live_alloc(s);  // as in size()
    for (uint64_t i = 0; i < nbuckets_ + kStash; ++i)
      for (uint32_t a = live[i]; a; a &= a - 1) {
        const Slot& sl = bs[i].slots[std::countr_zero(a)];
        if (covers(meta, items_.slot_hash(sl.key))) fn(sl);
      }
  }
}

}  // namespace pmhash::pmeh

namespace pmhash {
namespace pmeh {
Status validate(const SchemeContext& ctx);  // validate.cpp
uint64_t items_found(const SchemeContext& ctx, uint64_t enough);
}  // namespace pmeh
extern const SchemeFactory kPmehFactory;
const SchemeFactory kPmehFactory = {"pmeh",
                                    &pmeh::Pmeh::layout,
                                    &pmeh::Pmeh::create,
                                    &pmeh::Pmeh::open,
                                    &pmeh::validate,
                                    &check_runtime<pmeh::Pmeh::Runtime, &pmeh::Pmeh::parse_runtime>,
                                    &pmeh::items_found,
                                    false};
}  // namespace pmhash
