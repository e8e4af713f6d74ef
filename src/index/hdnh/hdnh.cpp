#include "index/hdnh/hdnh.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <random>
#include <unordered_map>
#include <unordered_set>

namespace pmhash::hdnh {

using common::load_word;
using common::Slot;
using common::store_word;

namespace {

inline void cpu_relax() {
  asm volatile("pause" ::: "memory");
}

// The second hash function (§3.1: two hash functions, 2-choice for segments and buckets).
inline uint64_t mix(uint64_t x) {
  x ^= 0x9E37'79B9'7F4A'7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58'476D'1CE4'E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D0'49BB'1331'11EBull;
  return x ^ (x >> 31);
}

// A spin lock word (DRAM); writers of one key hold it for a few hundred nanoseconds.
void lock_word(std::atomic<uint32_t>& w) {
  for (int spins = 0;; ++spins) {
    uint32_t expect = 0;
    if (w.load(std::memory_order_relaxed) == 0 &&
        w.compare_exchange_weak(expect, 1, std::memory_order_acquire))
      return;
    if (spins < 64)
      cpu_relax();
    else
      std::this_thread::yield();
  }
}
bool try_lock_word(std::atomic<uint32_t>& w) {
  uint32_t expect = 0;
  return w.compare_exchange_strong(expect, 1, std::memory_order_acquire);
}
void unlock_word(std::atomic<uint32_t>& w) {
  w.store(0, std::memory_order_release);
}

uint64_t bit(int slot) {
  return uint64_t{1} << slot;
}

thread_local uint64_t tl_random = 0x2545'F491'4F6C'DD1Dull;
uint64_t next_random() {
  tl_random ^= tl_random << 13;
  tl_random ^= tl_random >> 7;
  tl_random ^= tl_random << 17;
  return tl_random;
}

// A hot item of the variable format: an immutable DRAM copy, freed after an epoch.
struct HotItem {
  std::string key, value;
};

enum HotOp { kHotPut = 1, kHotRemove = 2 };

}  // namespace

class Hdnh::StripeLock {
 public:
  explicit StripeLock(std::atomic<uint32_t>& w) : w_(w) { lock_word(w_); }
  ~StripeLock() { unlock_word(w_); }
  StripeLock(const StripeLock&) = delete;
  StripeLock& operator=(const StripeLock&) = delete;

 private:
  std::atomic<uint32_t>& w_;
};

// §3.4: each foreground thread has a background partner that does the hot-table half of a
// write while the foreground writes the non-volatile table; the Worker's request/done
// counters are the sync_write_signal.
struct Hdnh::Partner {
  // Spins before sleeping (partner) or waiting (foreground): a write stream hands a job over
  // every microsecond or so.
  static constexpr uint32_t kSpins = 1u << 10;
  HotJob* job = nullptr;  // set by the foreground before wake()
  bool unpinned = false;  // touched by the partner thread only
  common::Worker worker;  // last: its thread starts once the fields above exist
  explicit Partner(Hdnh* h) : worker([this, h] { h->run_partner(this); }, kSpins) {}
};

// ---- construction, layout, recovery ----

Status Hdnh::parse_config(const common::Params& rt, Config* cfg) {
  std::string repl, sw;
  uint64_t hs = 0, threads = 0;
  Status s = rt.get_enum("hdnh", "hot_table", {"rafl", "lru", "off"}, &repl);
  if (s.ok()) s = rt.get_u64("hdnh", "hot_slots", 4, 1, 8, &hs);  // slots per hot bucket
  if (s.ok()) s = rt.get_bool("hdnh", "ocf", true, &cfg->use_ocf);
  if (s.ok()) s = rt.get_enum("hdnh", "sync_write", {"inline", "background"}, &sw);
  if (s.ok())
    s = rt.get_u64("hdnh", "recovery_threads", std::max(1u, std::thread::hardware_concurrency()), 1,
                   256, &threads);
  if (!s.ok()) return s;
  cfg->replacement = repl == "rafl"  ? Replacement::kRafl
                     : repl == "lru" ? Replacement::kLru
                                     : Replacement::kOff;
  cfg->hot_slots = static_cast<int>(hs);
  cfg->background_write = sw == "background";
  cfg->recovery_threads = static_cast<unsigned>(threads);
  return Status::Ok();
}

Hdnh::Hdnh(SchemeContext& ctx, uint64_t root_off, const Config& cfg)
    : pool_(ctx.pool),
      alloc_(ctx.alloc),
      epochs_(ctx.epochs),
      threads_(ctx.threads),
      items_(ctx.items),
      root_off_(root_off),
      root_(ctx.pool.ptr<Root>(root_off)),
      m_(root_->segment_buckets),
      cfg_(cfg),
      stripes_(new std::atomic<uint32_t>[kStripes]()),
      bucket_locks_(new std::atomic<uint32_t>[kStripes]()),
      tstats_(new ThreadStats[pm::ThreadRegistry::kMaxThreads]),
      partners_(new std::unique_ptr<Partner>[pm::ThreadRegistry::kMaxThreads]) {
  auto t0 = std::chrono::steady_clock::now();
  Level* top = make_level(root_->top.off, root_->top.segments);
  Level* bottom = make_level(root_->bottom.off, root_->bottom.segments);
  if (root_->resizing_flag != 0 && root_->level_number == 3) {
    publish_levels({top, bottom, make_level(root_->new_top.off, root_->new_top.segments)});
    resize_seq_.store(1);
    fix_partial_bucket();
  } else {
    publish_levels({top, bottom});
  }
  rebuild_dram();
  recovery_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Hdnh::~Hdnh() {
  stop();
  epochs_.drain();
  LevelSet* set = levels_.load();
  for (int i = 0; i < set->n; ++i) {
    Level* l = set->lv[i];
    if (items_.variable() && l->hot_meta)
      for (uint64_t j = 0; j < l->nbuckets * uint64_t(cfg_.hot_slots); ++j)
        if (l->hot_meta[j].load() & hot::kValid)
          delete reinterpret_cast<HotItem*>(l->hot_value[j].load());
    delete l;
  }
  delete set;
}

Status Hdnh::layout(const Options& o, common::Params* layout) {
  common::Params p(o.params);
  uint64_t seg_bytes, segments;
  if (!p.get_u64("segment_bytes", 16384, &seg_bytes) || seg_bytes < sizeof(Bucket) ||
      seg_bytes > (uint64_t{1} << 20) || !std::has_single_bit(seg_bytes))
    return {Code::kInvalidArgument,
            "hdnh: 'segment_bytes' must be a power of two from 256 to 1048576"};
  uint64_t m = seg_bytes / sizeof(Bucket);
  // Bottom-level segments M (the top has 2M): sized from the capacity hint for a load
  // factor near 0.5 before the first resize, else 1.
  uint64_t per_m = 3 * m * kSlots;  // slots per unit of M
  // A hint past the largest table gets the largest (the table grows from there; the pool
  // size decides), as every scheme sizes from the hint.
  constexpr uint64_t kMaxSegments = uint64_t{1} << 30;
  uint64_t def =
      o.capacity_hint ? std::clamp<uint64_t>(o.capacity_hint / per_m * 2, 1, kMaxSegments) : 1;
  Status s = p.get_u64("hdnh", "segments", def, 1, kMaxSegments, &segments);
  if (!s.ok()) return s;
  layout->set("segment_bytes", std::to_string(seg_bytes));
  layout->set("segments", std::to_string(segments));
  return Status::Ok();
}

Status Hdnh::create(SchemeContext& ctx, std::unique_ptr<Scheme>* out) {
  Config cfg;
  Status s = parse_config(ctx.runtime, &cfg);
  if (!s.ok()) return s;
  uint64_t seg_bytes = 0, segs = 0;
  if (!ctx.layout.get_u64("segment_bytes", 0, &seg_bytes) ||
      !ctx.layout.get_u64("segments", 0, &segs) || seg_bytes < sizeof(Bucket) || segs == 0)
    return {Code::kCorrupted, "hdnh: pool header lacks layout parameters"};
  pm::Reservation root = ctx.alloc.reserve(sizeof(Root));
  pm::Reservation top = ctx.alloc.reserve(2 * segs * seg_bytes);
  pm::Reservation bottom = ctx.alloc.reserve(segs * seg_bytes);
  if (!root || !top || !bottom) {
    for (auto& r : {root, top, bottom}) ctx.alloc.cancel(r);
    return {Code::kPoolFull, "pool too small for " + std::to_string(3 * segs) + " segments"};
  }
  const pm::Persister& p = ctx.pool.persister();
  for (auto& r : {top, bottom}) {
    std::memset(ctx.pool.ptr<char>(r.off), 0, r.size);
    p.flush(ctx.pool.ptr<char>(r.off), r.size);
  }
  Root* rt = ctx.pool.ptr<Root>(root.off);
  std::memset(static_cast<void*>(rt), 0, sizeof(Root));
  rt->magic = kRootMagic;
  rt->segment_buckets = seg_bytes / sizeof(Bucket);
  rt->top = {top.off, 2 * segs};
  rt->bottom = {bottom.off, segs};
  rt->level_number = 2;
  p.flush(rt, sizeof(Root));
  publish_new_root(ctx, {root, top, bottom}, root.off);
  *out = std::make_unique<Hdnh>(ctx, root.off, cfg);
  return Status::Ok();
}

Status Hdnh::open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out) {
  (void)clean;  // §3.7: both cases rebuild the DRAM structures; a crash may add resize work
  Config cfg;
  Status s = parse_config(ctx.runtime, &cfg);
  if (!s.ok()) return s;
  const Root* root = existing_root<Root>(ctx, kRootMagic);
  if (root == nullptr) return {Code::kCorrupted, "hdnh: root object missing or damaged"};
  const Root& r = *root;
  uint64_t m = r.segment_buckets;
  auto level_ok = [&](const LevelDesc& l) {
    return l.segments != 0 && l.segments < (uint64_t{1} << 40) &&
           ctx.alloc.block_size(l.off) >= l.segments * m * sizeof(Bucket);
  };
  if (m == 0 || !std::has_single_bit(m) || !level_ok(r.top) || !level_ok(r.bottom) ||
      r.top.segments != 2 * r.bottom.segments || r.resizing_flag > 1 ||
      (r.level_number != 2 && r.level_number != 3) ||
      (r.level_number == 3 &&
       (r.resizing_flag != 1 || !level_ok(r.new_top) || r.new_top.segments != 2 * r.top.segments ||
        r.rehash_progress > r.bottom.segments * m)))
    return {Code::kCorrupted, "hdnh: levels missing or damaged"};
  auto h = std::make_unique<Hdnh>(ctx, ctx.pool.root(), cfg);
  if (r.resizing_flag) {
    // §3.7: an interrupted resize is finished first (level_number 2: attach the new level
    // again; 3: continue rehashing at the recorded bucket).
    std::unique_lock<std::shared_mutex> xl(h->resize_mu_);
    if (r.level_number == 2) {
      s = h->attach_new_top();
      if (!s.ok()) {  // no room for the new level: back to the two levels
        store_word(h->root_->resizing_flag, 0);
        ctx.pool.persister().persist(&h->root_->resizing_flag, 8);
      }
    }
    if (h->root_->resizing_flag) (void)h->rehash();  // a failure leaves three levels, usable
  }
  *out = std::move(h);
  return Status::Ok();
}

Level* Hdnh::make_level(uint64_t off, uint64_t segments) {
  auto* l = new Level;
  l->off = off;
  l->buckets = pool_.ptr<Bucket>(off);
  l->segments = segments;
  l->nbuckets = segments * m_;
  l->ocf.reset(new std::atomic<uint16_t>[l->nbuckets * kSlots]());
  if (cfg_.replacement != Replacement::kOff) {
    uint64_t n = l->nbuckets * uint64_t(cfg_.hot_slots);
    l->hot_meta.reset(new std::atomic<uint16_t>[n]());
    l->hot_key.reset(new std::atomic<uint64_t>[n]());
    l->hot_value.reset(new std::atomic<uint64_t>[n]());
    if (cfg_.replacement == Replacement::kLru) l->hot_stamp.reset(new std::atomic<uint64_t>[n]());
  }
  return l;
}

// Publishes a new level set; the old set object is freed after an epoch.
void Hdnh::publish_levels(std::initializer_list<Level*> lv) {
  auto* set = new LevelSet;
  for (Level* l : lv) set->lv[set->n++] = l;
  LevelSet* old = levels_.exchange(set, std::memory_order_acq_rel);
  if (old != nullptr) epochs_.retire([old] { delete old; });
}

bool Hdnh::bucket_live(const Level& l, uint64_t b) const {
  // Bottom buckets already rehashed into the new top level are dead (their PM bitmap is
  // not cleared: the whole level is freed when the resize ends).
  return !(root_->level_number == 3 && l.off == root_->bottom.off && b < root_->rehash_progress);
}

// §3.7: one traversal of the table rebuilds the OCF (bitmaps and fingerprints) and the hot
// table, the buckets split into batches across recovery threads.
void Hdnh::rebuild_dram() {
  LevelSet* set = levels_.load();
  std::atomic<int64_t> items{0};
  auto work = [&](unsigned t, unsigned nt) {
    unsigned tid = threads_.id();
    pm::Epochs::Guard guard(epochs_, tid);
    int64_t local = 0;
    std::string value;
    for (int i = 0; i < set->n; ++i) {
      Level& l = *set->lv[i];
      uint64_t per = (l.nbuckets + nt - 1) / nt;
      uint64_t end = std::min(l.nbuckets, (t + 1) * per);
      for (uint64_t b = t * per; b < end; ++b) {
        if (!bucket_live(l, b)) continue;
        const Bucket& bk = l.buckets[b];
        for (uint64_t bits = bk.bitmap & 0xFF; bits; bits &= bits - 1) {
          int s = std::countr_zero(bits);
          Hashed k = hashed_slot(bk.slots[s].key);
          l.ocf[b * kSlots + s].store(ocf::kValid | k.fp, std::memory_order_relaxed);
          ++local;
          if (cfg_.replacement == Replacement::kOff) continue;
          // Warm the hot table: fill empty hot slots only (eviction would be churn here).
          std::string_view key;
          std::string keybuf = items_.slot_key_bytes(bk.slots[s]);
          key = keybuf;
          if (!items_.read_value(bk.slots[s].value, &value)) continue;
          for (int j = 0; j < set->n; ++j) {
            Level& hl = *set->lv[j];
            uint64_t hb = hot_bucket(hl, k);
            bool placed = false;
            for (int e = 0; e < cfg_.hot_slots && !placed; ++e) {
              uint64_t idx = hb * cfg_.hot_slots + e;
              uint16_t mw = hl.hot_meta[idx].load(std::memory_order_relaxed);
              if ((mw & (hot::kValid | hot::kBusy)) != 0) continue;
              if (!hl.hot_meta[idx].compare_exchange_strong(mw, mw | hot::kBusy)) continue;
              hl.hot_key[idx].store(k.kw, std::memory_order_relaxed);
              uint64_t vw = 0;
              if (items_.variable())
                vw = reinterpret_cast<uint64_t>(new HotItem{std::string(key), value});
              else
                std::memcpy(&vw, value.data(), 8);
              hl.hot_value[idx].store(vw, std::memory_order_relaxed);
              hl.hot_meta[idx].store(
                  static_cast<uint16_t>(((mw + hot::kVersionOne) & ~7u) | hot::kValid),
                  std::memory_order_release);
              placed = true;
            }
            if (placed) break;
          }
        }
      }
    }
    items.fetch_add(local);
  };
  unsigned nt = cfg_.recovery_threads;
  if (nt <= 1) {
    work(0, 1);
  } else {
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < nt; ++t) ts.emplace_back(work, t, nt);
    for (auto& t : ts) t.join();
  }
  base_items_ = items.load();
}

// ---- hashing ----

Hdnh::Hashed Hdnh::hashed(std::string_view key) const {
  uint64_t h = common::Items::hash(key);
  return {h, mix(h), items_.key_word(key, h), static_cast<uint8_t>(h)};
}

Hdnh::Hashed Hdnh::hashed_slot(uint64_t key_word) const {
  uint64_t h = items_.slot_hash(key_word);
  return {h, mix(h), key_word, static_cast<uint8_t>(h)};
}

// Two segments (one per hash function), and in each two buckets: four candidates.
Hdnh::Candidates Hdnh::candidates(const Level& l, const Hashed& k) const {
  uint64_t sa = common::fast_range(static_cast<uint32_t>(k.h1 >> 32), l.segments);
  uint64_t sb = common::fast_range(static_cast<uint32_t>(k.h2 >> 32), l.segments);
  uint64_t ba = (k.h1 >> 8) & (m_ - 1), bb = (k.h2 >> 8) & (m_ - 1);
  Candidates c{{sa * m_ + ba, sa * m_ + bb, sb * m_ + ba, sb * m_ + bb}, 4};
  if (ba == bb) {  // drop duplicates
    c.b[1] = c.b[2];
    c.n = sa == sb ? 1 : 2;
  } else if (sa == sb) {
    c.n = 2;
  }
  return c;
}

// The hot table has one candidate bucket per level (§3.3).
uint64_t Hdnh::hot_bucket(const Level& l, const Hashed& k) const {
  uint64_t sa = common::fast_range(static_cast<uint32_t>(k.h1 >> 32), l.segments);
  return sa * m_ + ((k.h1 >> 8) & (m_ - 1));
}

// ---- the OCF and slot-level concurrency (§3.2, §3.6) ----

bool Hdnh::find(const LevelSet& set, const Hashed& k, std::string_view key, Loc* loc,
                uint64_t* value_word, bool* retry, uint64_t* pm_slots) const {
  for (int i = 0; i < set.n; ++i) {
    Level& l = *set.lv[i];
    Candidates c = candidates(l, k);
    for (int j = 0; j < c.n; ++j) {
      uint64_t b = c.b[j];
      for (int s = 0; s < kSlots; ++s) {
        std::atomic<uint16_t>& e = l.ocf[b * kSlots + s];
        uint16_t w = e.load(std::memory_order_acquire);
        if (!ocf::valid(w) || (cfg_.use_ocf && ocf::fp(w) != k.fp)) continue;
        if (ocf::busy(w)) {  // a writer holds the slot: wait for it, then start over
          // (yielding: the holder may be waiting for its partner on an oversubscribed core)
          for (int spins = 0; e.load(std::memory_order_acquire) == w; ++spins) {
            if (spins < 64)
              cpu_relax();
            else
              std::this_thread::yield();
          }
          *retry = true;
          return false;
        }
        const Slot& sl = l.buckets[b].slots[s];
        uint64_t sk = load_word(sl.key), sv = load_word(sl.value);
        ++*pm_slots;
        bool match = items_.matches(sk, sv, key, k.kw);
        if (e.load(std::memory_order_acquire) != w) {  // the version moved: retry
          *retry = true;
          return false;
        }
        if (match) {
          *loc = Loc{&l, b, s, w};
          *value_word = sv;
          return true;
        }
      }
    }
  }
  return false;
}

bool Hdnh::claim_in(Level& l, uint64_t b, Loc* loc) {
  for (int s = 0; s < kSlots; ++s) {
    std::atomic<uint16_t>& e = l.ocf[b * kSlots + s];
    uint16_t w = e.load(std::memory_order_relaxed);
    if ((w & (ocf::kValid | ocf::kBusy)) != 0) continue;
    if (e.compare_exchange_strong(w, w | ocf::kBusy, std::memory_order_acquire)) {
      *loc = Loc{&l, b, s, static_cast<uint16_t>(w | ocf::kBusy)};
      return true;
    }
  }
  return false;
}

// An empty slot for a new record: the least-loaded of the four candidates in the top level,
// then in the bottom level (while resizing: the new top level, then the old top).
bool Hdnh::claim_free(const LevelSet& set, const Hashed& k, Loc* loc) {
  Level* order[2] = {set.lv[0], set.lv[1]};
  if (set.n == 3) order[0] = set.lv[2], order[1] = set.lv[0];
  for (Level* l : order) {
    Candidates c = candidates(*l, k);
    int load[4];
    for (int j = 0; j < c.n; ++j) {
      load[j] = 0;
      for (int s = 0; s < kSlots; ++s)
        load[j] += (l->ocf[c.b[j] * kSlots + s].load(std::memory_order_relaxed) &
                    (ocf::kValid | ocf::kBusy)) != 0;
    }
    for (int tries = 0; tries < c.n; ++tries) {
      int best = -1;
      for (int j = 0; j < c.n; ++j)
        if (load[j] < kSlots && (best < 0 || load[j] < load[best])) best = j;
      if (best < 0) break;
      if (claim_in(*l, c.b[best], loc)) return true;
      load[best] = kSlots;
    }
  }
  return false;
}

bool Hdnh::lock_slot(Loc* loc) {
  uint16_t w = loc->entry;
  if (!loc->level->ocf[loc->bucket * kSlots + loc->slot].compare_exchange_strong(
          w, w | ocf::kBusy, std::memory_order_acquire))
    return false;
  loc->entry = w | ocf::kBusy;
  return true;
}

void Hdnh::unlock_slot(const Loc& loc, bool is_valid, uint8_t fp) {
  loc.level->ocf[loc.bucket * kSlots + loc.slot].store(ocf::next(loc.entry, is_valid, fp),
                                                       std::memory_order_release);
}

void Hdnh::commit_bitmap(Bucket& b, uint64_t set, uint64_t clear, const pm::Reservation* publish,
                         uint64_t free_off) {
  const pm::Persister& p = pool_.persister();
  if (!items_.variable()) {
    // Slot writers of one bucket change disjoint bits: an atomic RMW, persisted.
    std::atomic_ref<uint64_t> w(b.bitmap);
    if (set != 0 && clear != 0)
      w.fetch_xor(set | clear);  // update: old and new bits flip in one store (§3.6)
    else if (set != 0)
      w.fetch_or(set);
    else
      w.fetch_and(~clear);
    p.persist(&b.bitmap, 8);
    return;
  }
  // The variable format commits the bitmap with the item's allocation or free in one redo
  // log; the log applies a plain store, so writers of one bucket serialize here.
  std::atomic<uint32_t>& bl = bucket_locks_[(pool_.offset(&b) / sizeof(Bucket)) & (kStripes - 1)];
  StripeLock g(bl);
  pm::Tx tx(alloc_);
  if (publish != nullptr) tx.publish(*publish);
  tx.store(&b.bitmap, (load_word(b.bitmap) | set) & ~clear);
  if (free_off != 0) tx.free(free_off);
  tx.commit();
}

// ---- operations ----

// §3.5 time-efficient read: hot table, then OCF, then PM only where a fingerprint matches.
// Reads take no lock: slot versions (and the resize sequence for misses) are validated.
Status Hdnh::get(std::string_view key, std::string* value) {
  Hashed k = hashed(key);
  unsigned tid = threads_.id();
  ThreadStats& ts = tstats_[tid];
  pm::Epochs::Guard guard(epochs_, tid);
  for (;;) {
    uint64_t seq = resize_seq_.load(std::memory_order_acquire);
    const LevelSet* set = levels_.load(std::memory_order_acquire);
    if (cfg_.replacement != Replacement::kOff && hot_get(*set, k, key, value)) {
      if (resize_seq_.load(std::memory_order_acquire) != seq) continue;
      ts.hot_hits.fetch_add(1, std::memory_order_relaxed);
      ts.pos_reads.fetch_add(1, std::memory_order_relaxed);
      return Status::Ok();
    }
    Loc loc;
    uint64_t vw = 0, pm_slots = 0;
    bool retry = false;
    bool found = find(*set, k, key, &loc, &vw, &retry, &pm_slots);
    if (retry) {
      ts.retries.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (found) {
      if (!items_.read_value(vw, value)) return {Code::kCorrupted, "hdnh: slot points to no item"};
      ts.pos_reads.fetch_add(1, std::memory_order_relaxed);
      ts.pm_slots_pos.fetch_add(pm_slots, std::memory_order_relaxed);
      if (cfg_.replacement != Replacement::kOff) hot_fill(*set, k, key);
      return Status::Ok();
    }
    if (resize_seq_.load(std::memory_order_acquire) != seq) continue;  // a resize moved records
    ts.neg_reads.fetch_add(1, std::memory_order_relaxed);
    ts.pm_slots_neg.fetch_add(pm_slots, std::memory_order_relaxed);
    return {Code::kNotFound, "key not found"};
  }
}

// Insert (Fig. 9), update (Fig. 10: out of place in the bucket, one bitmap store flips old
// and new) and upsert. Writers of one key serialize on a striped lock (the paper is silent
// on two inserts of one key; see docs); the resizer excludes all writers.
Status Hdnh::put(std::string_view key, std::string_view value, PutMode mode) {
  Hashed k = hashed(key);
  unsigned tid = threads_.id();
  ThreadStats& ts = tstats_[tid];
  const pm::Persister& p = pool_.persister();
  StripeLock key_lock(stripe(k.h1));
  for (;;) {
    std::shared_lock<std::shared_mutex> rl(resize_mu_);
    pm::Epochs::Guard guard(epochs_, tid);
    const LevelSet* set = levels_.load(std::memory_order_acquire);
    Loc loc;
    uint64_t vw = 0, pm_slots = 0;
    bool retry = false;
    bool found = find(*set, k, key, &loc, &vw, &retry, &pm_slots);
    if (retry) continue;
    if (found) {
      if (mode == PutMode::kInsert) return {Code::kAlreadyExists, "key already exists"};
      common::Items::New item;
      Status s = items_.make(key, value, k.kw, &item);
      if (!s.ok()) return s;
      if (!lock_slot(&loc)) {
        items_.cancel(item);
        continue;
      }
      HotJob hj;
      hot_begin(&hj, kHotPut, *set, k, key, value);
      Bucket& b = loc.level->buckets[loc.bucket];
      Loc nl;
      bool out_of_place = claim_in(*loc.level, loc.bucket, &nl);
      if (out_of_place) {  // inside the bucket
        Slot& ns = b.slots[nl.slot];
        store_word(ns.key, item.key_word);
        store_word(ns.value, item.value_word);
        p.persist(&ns, sizeof ns);
        commit_bitmap(b, bit(nl.slot), bit(loc.slot), items_.variable() ? &item.item : nullptr,
                      items_.owned_block(vw));
      } else {  // a full bucket: the value word in place (variable: a new item, one commit)
        items_.replace_value(b.slots[loc.slot].value, item);
      }
      // Committed. The hot copy is published before the OCF releases the old slot: until
      // then a reader that misses the hot table waits for that slot, so no reader sees the
      // new value and then the old one.
      hot_finish(&hj);
      if (out_of_place) {
        unlock_slot(nl, true, k.fp);  // new valid before old invalid: readers never miss
        unlock_slot(loc, false, 0);
      } else {
        unlock_slot(loc, true, k.fp);
      }
      return Status::Ok();
    }
    if (mode == PutMode::kUpdate) return {Code::kNotFound, "key not found"};
    Loc nl;
    if (!claim_free(*set, k, &nl)) {
      uint64_t seen = resize_seq_.load();
      rl.unlock();
      Status s = resize(seen);
      if (!s.ok()) return s;
      continue;
    }
    common::Items::New item;
    Status s = items_.make(key, value, k.kw, &item);
    if (!s.ok()) {
      unlock_slot(nl, false, 0);
      return s;
    }
    HotJob hj;
    hot_begin(&hj, kHotPut, *set, k, key, value);
    Bucket& b = nl.level->buckets[nl.bucket];
    Slot& ns = b.slots[nl.slot];
    store_word(ns.key, item.key_word);
    store_word(ns.value, item.value_word);
    p.persist(&ns, sizeof ns);
    commit_bitmap(b, bit(nl.slot), 0, items_.variable() ? &item.item : nullptr, 0);
    // Committed. The OCF shows the record before the hot table does: a reader that finds
    // the hot copy and a later one that misses it (evicted) both find the key.
    unlock_slot(nl, true, k.fp);
    ts.items.fetch_add(1, std::memory_order_relaxed);
    hot_finish(&hj);
    return Status::Ok();
  }
}

// Delete: the bitmap bit goes to 0 (one persisted store); the hot-table copy is dropped.
Status Hdnh::remove(std::string_view key) {
  Hashed k = hashed(key);
  unsigned tid = threads_.id();
  ThreadStats& ts = tstats_[tid];
  StripeLock key_lock(stripe(k.h1));
  for (;;) {
    std::shared_lock<std::shared_mutex> rl(resize_mu_);
    pm::Epochs::Guard guard(epochs_, tid);
    const LevelSet* set = levels_.load(std::memory_order_acquire);
    Loc loc;
    uint64_t vw = 0, pm_slots = 0;
    bool retry = false;
    bool found = find(*set, k, key, &loc, &vw, &retry, &pm_slots);
    if (retry) continue;
    if (!found) return {Code::kNotFound, "key not found"};
    if (!lock_slot(&loc)) continue;
    // Dropping the hot copies may overlap the PM write (background): a reader that misses
    // them waits for the locked slot. They are gone before the OCF shows the delete.
    HotJob hj;
    hot_begin(&hj, kHotRemove, *set, k, key, {});
    commit_bitmap(loc.level->buckets[loc.bucket], 0, bit(loc.slot), nullptr,
                  items_.owned_block(vw));
    hot_finish(&hj);
    unlock_slot(loc, false, 0);
    ts.items.fetch_sub(1, std::memory_order_relaxed);
    return Status::Ok();
  }
}

// ---- hot table (§3.3) and the synchronous write mechanism (§3.4) ----

bool Hdnh::hot_matches(uint64_t kw, uint64_t vw, const Hashed& k, std::string_view key) const {
  if (kw != k.kw) return false;
  return !items_.variable() || reinterpret_cast<const HotItem*>(vw)->key == key;
}

void Hdnh::hot_release(uint64_t vw) {
  if (items_.variable()) epochs_.retire([vw] { delete reinterpret_cast<HotItem*>(vw); });
}

// A busy (opmap) hot slot is being written: it is skipped, not waited for. Its holder is
// the key's writer (which publishes only after the PM commit; a reader that goes on to the
// OCF finds the record's slot locked and waits there) or a write evicting it.
bool Hdnh::hot_get(const LevelSet& set, const Hashed& k, std::string_view key, std::string* value) {
  for (int i = 0; i < set.n; ++i) {
    Level& l = *set.lv[i];
    uint64_t base = hot_bucket(l, k) * cfg_.hot_slots;
    for (int e = 0; e < cfg_.hot_slots; ++e) {
      std::atomic<uint16_t>& meta = l.hot_meta[base + e];
      for (;;) {
        uint16_t m1 = meta.load(std::memory_order_acquire);
        if (!(m1 & hot::kValid) || (m1 & hot::kBusy)) break;
        uint64_t kw = l.hot_key[base + e].load(std::memory_order_acquire);
        uint64_t vw = l.hot_value[base + e].load(std::memory_order_acquire);
        if (kw != k.kw) {
          if ((meta.load(std::memory_order_acquire) | hot::kHot) != (m1 | hot::kHot)) continue;
          break;
        }
        bool match = hot_matches(kw, vw, k, key);
        if (match) {
          if (items_.variable())
            value->assign(reinterpret_cast<const HotItem*>(vw)->value);
          else
            value->assign(reinterpret_cast<const char*>(&vw), 8);
        }
        if ((meta.load(std::memory_order_acquire) | hot::kHot) != (m1 | hot::kHot)) continue;
        if (!match) break;
        // RAFL: a searched item becomes hot. LRU: its stamp moves to now.
        if (cfg_.replacement == Replacement::kRafl) {
          if (!(m1 & hot::kHot)) meta.compare_exchange_strong(m1, m1 | hot::kHot);
        } else {
          l.hot_stamp[base + e].store(clock_.fetch_add(1, std::memory_order_relaxed),
                                      std::memory_order_relaxed);
        }
        return true;
      }
    }
  }
  return false;
}

// Prepares a put of key -> value (caller holds the key's writer lock): the DRAM copy is
// made and the target slots locked, nothing becomes visible. Targets: every copy of the key
// (updated in place); with none, an empty slot of the key's bucket in the newest level, then
// the older; with none, a replacement in the newest level's bucket (RAFL or LRU).
void Hdnh::hot_prepare(const LevelSet& set, const Hashed& k, std::string_view key,
                       std::string_view value, HotWrite* w) {
  const int hs = cfg_.hot_slots;
  w->n = 0;
  w->evicts = false;
  if (items_.variable())
    w->vw = reinterpret_cast<uint64_t>(new HotItem{std::string(key), std::string(value)});
  else
    std::memcpy(&w->vw, value.data(), 8);
  auto lock = [&](Level& l, uint64_t idx, uint16_t m, bool same_key) {
    if ((m & hot::kBusy) ||
        !l.hot_meta[idx].compare_exchange_strong(m, m | hot::kBusy, std::memory_order_acquire))
      return false;
    w->t[w->n++] = {&l, idx, m, same_key};
    return true;
  };
  // The key's copies. A busy slot is skipped: its holder is not a writer of this key (we
  // hold the key's lock), so it is a write that replaces the copy anyway.
  for (int i = 0; i < set.n; ++i) {
    Level& l = *set.lv[i];
    uint64_t base = hot_bucket(l, k) * hs;
    for (int e = 0; e < hs; ++e) {
      for (;;) {
        uint16_t m = l.hot_meta[base + e].load(std::memory_order_acquire);
        if (!(m & hot::kValid) || (m & hot::kBusy)) break;
        if (!hot_matches(l.hot_key[base + e].load(std::memory_order_acquire),
                         l.hot_value[base + e].load(std::memory_order_acquire), k, key))
          break;
        if (lock(l, base + e, m, true)) break;  // else it changed: look again
      }
    }
  }
  if (w->n > 0) return;
  // Newest level first: {top, bottom}, or {new top, top, bottom} while resizing.
  Level* order[3] = {set.lv[0], set.lv[1], set.lv[1]};
  int n = 2;
  if (set.n == 3) order[0] = set.lv[2], order[1] = set.lv[0], order[2] = set.lv[1], n = 3;
  for (int i = 0; i < n; ++i) {
    Level& l = *order[i];
    uint64_t base = hot_bucket(l, k) * hs;
    for (int e = 0; e < hs; ++e) {
      uint16_t m = l.hot_meta[base + e].load(std::memory_order_acquire);
      if (!(m & (hot::kValid | hot::kBusy)) && lock(l, base + e, m, false)) return;
    }
  }
  // Replacement in the first level's bucket.
  Level& l = *order[0];
  uint64_t base = hot_bucket(l, k) * hs;
  for (int attempt = 0; attempt < 8; ++attempt) {
    int victim = -1;
    if (cfg_.replacement == Replacement::kLru) {
      uint64_t oldest = ~uint64_t{0};
      for (int e = 0; e < hs; ++e) {
        uint64_t st = l.hot_stamp[base + e].load(std::memory_order_relaxed);
        if (st < oldest) oldest = st, victim = e;
      }
    } else {
      // RAFL (Fig. 6): a cold item if there is one; else a random one, and every hotmap bit
      // of the bucket is cleared.
      for (int e = 0; e < hs && victim < 0; ++e)
        if (!(l.hot_meta[base + e].load(std::memory_order_relaxed) & hot::kHot)) victim = e;
      if (victim < 0) {
        victim = static_cast<int>(next_random() % hs);
        for (int e = 0; e < hs; ++e) l.hot_meta[base + e].fetch_and(uint16_t(~hot::kHot));
      }
    }
    uint16_t m = l.hot_meta[base + victim].load(std::memory_order_acquire);
    if (lock(l, base + victim, m, false)) {
      w->evicts = (m & hot::kValid) != 0;
      return;
    }
  }
}

// Publishes a prepared put (after the PM commit): the first target gets the copy, further
// copies are dropped; every slot is unlocked with its version moved.
void Hdnh::hot_publish(const Hashed& k, HotWrite& w) {
  if (w.n == 0) {  // no slot: the copy was never visible
    if (items_.variable()) delete reinterpret_cast<HotItem*>(w.vw);
    return;
  }
  for (int i = 0; i < w.n; ++i) {
    const HotTarget& t = w.t[i];
    Level& l = *t.level;
    uint64_t old = l.hot_value[t.idx].load(std::memory_order_relaxed);
    auto next = static_cast<uint16_t>((t.meta + hot::kVersionOne) & ~7u);
    if (i == 0) {
      // Release: a reader that loads the new value word also sees the hot item it points to.
      l.hot_key[t.idx].store(k.kw, std::memory_order_release);
      l.hot_value[t.idx].store(w.vw, std::memory_order_release);
      if (l.hot_stamp) l.hot_stamp[t.idx].store(clock_.fetch_add(1), std::memory_order_relaxed);
      next |= hot::kValid | (t.same_key ? (t.meta & hot::kHot) : 0);
    }
    l.hot_meta[t.idx].store(next, std::memory_order_release);
    if (t.meta & hot::kValid) hot_release(old);  // unpublished above, freed after an epoch
  }
  if (w.evicts) hot_evictions_.fetch_add(1, std::memory_order_relaxed);
}

// Drops the key's copies (caller holds the key's writer lock; a busy slot is skipped, as in
// hot_prepare).
void Hdnh::hot_remove(const LevelSet& set, const Hashed& k, std::string_view key) {
  for (int i = 0; i < set.n; ++i) {
    Level& l = *set.lv[i];
    uint64_t base = hot_bucket(l, k) * cfg_.hot_slots;
    for (int e = 0; e < cfg_.hot_slots; ++e) {
      std::atomic<uint16_t>& meta = l.hot_meta[base + e];
      for (;;) {
        uint16_t m = meta.load(std::memory_order_acquire);
        if (!(m & hot::kValid) || (m & hot::kBusy)) break;
        uint64_t vw = l.hot_value[base + e].load(std::memory_order_acquire);
        if (!hot_matches(l.hot_key[base + e].load(std::memory_order_acquire), vw, k, key)) break;
        if (!meta.compare_exchange_strong(m, static_cast<uint16_t>((m + hot::kVersionOne) & ~7u)))
          continue;
        hot_release(vw);
        break;
      }
    }
  }
}

// A searched item enters the hot table (§3.3), under the key's writer lock if it is free.
// The value is read again under that lock: no writer of the key can change it meanwhile, so
// the copy is the table's current value. (The OCF entry seen by the lock-free read proves
// nothing: its 6-bit version comes back after 32 delete/insert pairs into one slot.)
void Hdnh::hot_fill(const LevelSet& set, const Hashed& k, std::string_view key) {
#ifdef PMHASH_CRASH_HOOKS
  if (test_before_fill) test_before_fill();
#endif
  std::atomic<uint32_t>& sw = stripe(k.h1);
  if (!try_lock_word(sw)) return;  // a writer of the key is active: it publishes its value
  Loc loc;
  uint64_t vw = 0, pm_slots = 0;
  bool retry = false;
  std::string value;
  if (find(set, k, key, &loc, &vw, &retry, &pm_slots) && items_.read_value(vw, &value)) {
    HotWrite w;
    hot_prepare(set, k, key, value, &w);
    hot_publish(k, w);
  }
  unlock_word(sw);
}

Hdnh::Partner* Hdnh::partner() {
  unsigned tid = threads_.id();
  if (Partner* p = partners_[tid].get()) return p;  // only this thread sets its slot
  std::lock_guard<std::mutex> g(partners_mu_);      // stop() reads every slot
  partners_[tid] = std::make_unique<Partner>(this);
  return partners_[tid].get();
}

void Hdnh::run_partner(Partner* p) {
  if (!p->unpinned) {
    // A thread inherits its creator's CPU affinity; a partner pinned to its foreground
    // thread's core could only run when that thread waits. Let it run anywhere.
    cpu_set_t all;
    CPU_ZERO(&all);
    for (unsigned c = 0; c < std::thread::hardware_concurrency() && c < CPU_SETSIZE; ++c)
      CPU_SET(c, &all);
    pthread_setaffinity_np(pthread_self(), sizeof all, &all);
    p->unpinned = true;
  }
  pm::Epochs::Guard guard(epochs_);  // no thread id: partners must not use up the 256
  run_hot_job(p->job);
}

void Hdnh::run_hot_job(HotJob* j) {
  if (j->op == kHotPut)
    hot_prepare(*j->set, j->k, j->key, j->value, &j->w);
  else
    hot_remove(*j->set, j->k, j->key);
  j->ran = true;
}

// The caller holds the key's writer lock and the resize lock (shared) until hot_finish().
void Hdnh::hot_begin(HotJob* j, int op, const LevelSet& set, const Hashed& k, std::string_view key,
                     std::string_view value) {
  if (cfg_.replacement == Replacement::kOff) return;
  j->op = op;
  j->set = &set;
  j->k = k;
  j->key = key;
  j->value = value;
  if (!cfg_.background_write) return;  // inline: all of it in hot_finish()
  j->partner = partner();
  j->partner->job = j;
  j->partner->worker.wake();  // sync_write_signal: incomplete
}

void Hdnh::hot_finish(HotJob* j) {
  if (j->op == 0) return;
  if (j->partner != nullptr) j->partner->worker.wait_idle();
  if (!j->ran) run_hot_job(j);  // inline, or the partner was stopped
  if (j->op == kHotPut) hot_publish(j->k, j->w);
}

void Hdnh::stop() {
  std::lock_guard<std::mutex> g(partners_mu_);
  for (unsigned t = 0; t < pm::ThreadRegistry::kMaxThreads; ++t)
    if (partners_[t]) partners_[t]->worker.stop();
}

#ifdef PMHASH_CRASH_HOOKS
void Hdnh::test_drop_hot(std::string_view key) {
  if (cfg_.replacement == Replacement::kOff) return;
  Hashed k = hashed(key);
  StripeLock key_lock(stripe(k.h1));
  pm::Epochs::Guard guard(epochs_, threads_.id());
  hot_remove(*levels_.load(std::memory_order_acquire), k, key);
}
#endif

// ---- resizing (§2.2 Level hashing, §3.7) ----

// Level-hashing resize: a new top level twice the old top is attached, the bottom level is
// rehashed into it bucket by bucket, then the old top becomes the bottom. Writers wait
// (exclusive lock); readers continue (they search old levels before the new one).
Status Hdnh::resize(uint64_t seen_seq) {
  std::unique_lock<std::shared_mutex> xl(resize_mu_);
  if (resize_seq_.load() != seen_seq) return Status::Ok();  // another writer resized
  if (root_->resizing_flag == 0) {
    store_word(root_->resizing_flag, 1);  // level_number stays 2: starting
    pool_.persister().persist(&root_->resizing_flag, 8);
    Status s = attach_new_top();
    if (!s.ok()) {
      store_word(root_->resizing_flag, 0);
      pool_.persister().persist(&root_->resizing_flag, 8);
      return s;
    }
  }
  return rehash();
}

Status Hdnh::attach_new_top() {
  uint64_t segs = root_->top.segments * 2;
  uint64_t bytes = segs * m_ * sizeof(Bucket);
  pm::Reservation r = alloc_.reserve(bytes);
  if (!r)
    return {Code::kPoolFull,
            "pool full: no space for a " + std::to_string(bytes) + "-byte hdnh level"};
  const pm::Persister& p = pool_.persister();
  std::memset(pool_.ptr<char>(r.off), 0, bytes);
  p.flush(pool_.ptr<char>(r.off), bytes);
  p.fence();
  pm::Tx tx(alloc_);
  tx.publish(r);
  tx.store(&root_->new_top.off, r.off);
  tx.store(&root_->new_top.segments, segs);
  tx.store(&root_->rehash_progress, 0);
  tx.store(&root_->level_number, 3);
  tx.commit();
  const LevelSet* set = levels_.load();
  publish_levels({set->lv[0], set->lv[1], make_level(r.off, segs)});
  resize_seq_.fetch_add(1);  // odd: three levels
  return Status::Ok();
}

Status Hdnh::rehash() {
  const LevelSet* set = levels_.load();
  Level* top = set->lv[0];
  Level* bottom = set->lv[1];
  Level* nt = set->lv[2];
  for (uint64_t b = root_->rehash_progress; b < bottom->nbuckets; ++b)
    if (!rehash_bucket(b))
      return {Code::kPoolFull, "hdnh: a resize could not place a record in the new level"};
  // Readers stop searching the old bottom first: every record is in the two remaining
  // levels (all bottom buckets rehashed, persisted), so the DRAM level set may change before
  // the PM root; a crash now recovers the same records (rehash_progress is at the end).
  publish_levels({nt, top});
  resize_seq_.fetch_add(1);  // even: two levels
  // Then the old top becomes the bottom, the new level the top, and the old bottom is freed,
  // in one commit (its reuse waits for the readers that may still hold the old level set).
  pm::Tx tx(alloc_);
  tx.free(bottom->off);
  tx.store(&root_->bottom.off, root_->top.off);
  tx.store(&root_->bottom.segments, root_->top.segments);
  tx.store(&root_->top.off, root_->new_top.off);
  tx.store(&root_->top.segments, root_->new_top.segments);
  tx.store(&root_->new_top.off, 0);
  tx.store(&root_->new_top.segments, 0);
  tx.store(&root_->rehash_progress, 0);
  tx.store(&root_->level_number, 2);
  tx.store(&root_->resizing_flag, 0);
  tx.commit();
  bool variable = items_.variable();
  int hs = cfg_.hot_slots;
  epochs_.retire([bottom, variable, hs] {
    if (variable && bottom->hot_meta)
      for (uint64_t j = 0; j < bottom->nbuckets * uint64_t(hs); ++j)
        if (bottom->hot_meta[j].load() & hot::kValid)
          delete reinterpret_cast<HotItem*>(bottom->hot_value[j].load());
    delete bottom;
  });
  resizes_.fetch_add(1);
  return Status::Ok();
}

// Moves one bottom bucket's records into the new top level: slots claimed first (all or
// none), written and persisted, new bitmaps persisted, then the progress record. A crash
// before the progress record leaves copies in both levels: fix_partial_bucket().
bool Hdnh::rehash_bucket(uint64_t b) {
  const LevelSet* set = levels_.load();
  Level& bottom = *set->lv[1];
  Level& nt = *set->lv[2];
  const pm::Persister& p = pool_.persister();
  const Bucket& src = bottom.buckets[b];
  struct Move {
    int s;
    Loc dst;
    uint8_t fp;
  };
  Move moves[kSlots];
  int n = 0;
  for (uint64_t bits = src.bitmap & 0xFF; bits; bits &= bits - 1) {
    int s = std::countr_zero(bits);
    Hashed k = hashed_slot(src.slots[s].key);
    LevelSet only_new;
    only_new.lv[0] = only_new.lv[1] = &nt;
    only_new.n = 2;
    Loc dst;
    if (!claim_free(only_new, k, &dst)) {
      for (int i = 0; i < n; ++i) unlock_slot(moves[i].dst, false, 0);
      return false;
    }
    moves[n++] = {s, dst, k.fp};
  }
  for (int i = 0; i < n; ++i) {
    Slot& d = moves[i].dst.level->buckets[moves[i].dst.bucket].slots[moves[i].dst.slot];
    store_word(d.key, src.slots[moves[i].s].key);
    store_word(d.value, src.slots[moves[i].s].value);
    p.flush(&d, sizeof d);
  }
  p.fence();
  for (int i = 0; i < n; ++i) {
    Bucket& db = nt.buckets[moves[i].dst.bucket];
    std::atomic_ref<uint64_t>(db.bitmap).fetch_or(bit(moves[i].dst.slot));
    p.flush(&db.bitmap, 8);
  }
  if (!PMHASH_MUTATION(pool_, kMutationProgressBeforeBitmaps)) p.fence();
  store_word(root_->rehash_progress, b + 1);
  p.persist(&root_->rehash_progress, 8);
  // DRAM: the new copies become visible before the old ones disappear.
  for (int i = 0; i < n; ++i) unlock_slot(moves[i].dst, true, moves[i].fp);
  for (int s = 0; s < kSlots; ++s) {
    std::atomic<uint16_t>& e = bottom.ocf[b * kSlots + s];
    uint16_t w = e.load();
    if (ocf::valid(w)) e.store(ocf::next(w, false, 0), std::memory_order_release);
  }
  rehashed_.fetch_add(n, std::memory_order_relaxed);
  return true;
}

// Recovery of a crash inside rehash_bucket(): records of the bucket in progress that
// already reached the new level are cleared in the bottom (PM only; before the OCF exists).
void Hdnh::fix_partial_bucket() {
  const LevelSet* set = levels_.load();
  Level& bottom = *set->lv[1];
  Level& nt = *set->lv[2];
  uint64_t b = root_->rehash_progress;
  if (b >= bottom.nbuckets) return;
  Bucket& src = bottom.buckets[b];
  uint64_t clear = 0;
  for (uint64_t bits = src.bitmap & 0xFF; bits; bits &= bits - 1) {
    int s = std::countr_zero(bits);
    const Slot& sl = src.slots[s];
    Candidates c = candidates(nt, hashed_slot(sl.key));
    for (int j = 0; j < c.n; ++j) {
      const Bucket& d = nt.buckets[c.b[j]];
      for (uint64_t db = d.bitmap & 0xFF; db; db &= db - 1) {
        const Slot& ds = d.slots[std::countr_zero(db)];
        if (ds.key == sl.key && ds.value == sl.value) clear |= bit(s);
      }
    }
  }
  if (clear == 0) return;
  store_word(src.bitmap, src.bitmap & ~clear);
  pool_.persister().persist(&src.bitmap, 8);
}

// ---- introspection ----

uint64_t Hdnh::size() const {
  int64_t n = base_items_;
  for (unsigned t = 0; t < pm::ThreadRegistry::kMaxThreads; ++t)
    n += tstats_[t].items.load(std::memory_order_relaxed);
  return static_cast<uint64_t>(std::max<int64_t>(n, 0));
}

// The introspection calls run concurrently with operations: they hold an epoch guard for the
// level set, its levels and the hot items they read.
uint64_t Hdnh::capacity_slots() const {
  pm::Epochs::Guard guard(epochs_);
  const LevelSet* set = levels_.load();
  uint64_t n = 0;
  for (int i = 0; i < set->n; ++i) n += set->lv[i]->nbuckets * kSlots;
  return n;
}

uint64_t Hdnh::dram_bytes() const {
  pm::Epochs::Guard guard(epochs_);
  const LevelSet* set = levels_.load();
  uint64_t n = 2 * kStripes * sizeof(std::atomic<uint32_t>);
  uint64_t per_hot = 2 + 8 + 8 + (cfg_.replacement == Replacement::kLru ? 8 : 0);
  for (int i = 0; i < set->n; ++i) {
    const Level& l = *set->lv[i];
    n += l.nbuckets * kSlots * 2;
    if (l.hot_meta) n += l.nbuckets * cfg_.hot_slots * per_hot;
  }
  if (items_.variable()) {  // the hot items' DRAM copies
    for (int i = 0; i < set->n; ++i) {
      const Level& l = *set->lv[i];
      if (!l.hot_meta) continue;
      for (uint64_t j = 0; j < l.nbuckets * cfg_.hot_slots; ++j)
        if (l.hot_meta[j].load() & hot::kValid) {
          auto* hi = reinterpret_cast<const HotItem*>(l.hot_value[j].load());
          n += sizeof(HotItem) + hi->key.capacity() + hi->value.capacity();
        }
    }
  }
  return n;
}

void Hdnh::counters(std::map<std::string, double>* out) const {
  uint64_t pos = 0, neg = 0, pms_pos = 0, pms_neg = 0, hits = 0, retries = 0;
  for (unsigned t = 0; t < pm::ThreadRegistry::kMaxThreads; ++t) {
    const ThreadStats& s = tstats_[t];
    pos += s.pos_reads.load();
    neg += s.neg_reads.load();
    pms_pos += s.pm_slots_pos.load();
    pms_neg += s.pm_slots_neg.load();
    hits += s.hot_hits.load();
    retries += s.retries.load();
  }
  pm::Epochs::Guard guard(epochs_);
  const LevelSet* set = levels_.load();
  uint64_t hot_used = 0, hot_cap = 0;
  for (int i = 0; i < set->n; ++i) {
    const Level& l = *set->lv[i];
    if (!l.hot_meta) continue;
    hot_cap += l.nbuckets * cfg_.hot_slots;
    for (uint64_t j = 0; j < l.nbuckets * cfg_.hot_slots; ++j)
      hot_used += (l.hot_meta[j].load(std::memory_order_relaxed) & hot::kValid) != 0;
  }
  (*out)["level_resizes"] = double(resizes_.load());
  (*out)["rehashed_records"] = double(rehashed_.load());
  (*out)["levels"] = double(set->n);
  (*out)["hot_hits"] = double(hits);
  (*out)["hot_hit_ratio"] = pos ? double(hits) / double(pos) : 0.0;
  (*out)["hot_items"] = double(hot_used);
  (*out)["hot_capacity"] = double(hot_cap);
  (*out)["hot_evictions"] = double(hot_evictions_.load());
  (*out)["pm_slots_per_pos_read"] = pos ? double(pms_pos) / double(pos) : 0.0;
  (*out)["pm_slots_per_neg_read"] = neg ? double(pms_neg) / double(neg) : 0.0;
  (*out)["pm_slots_per_pos_read_miss"] = pos > hits ? double(pms_pos) / double(pos - hits) : 0.0;
  (*out)["read_retries"] = double(retries);
  (*out)["recovery_ms"] = recovery_ms_;
}

bool Hdnh::check(std::string* report) const {
  bool ok = true;
  auto bad = [&](const std::string& what) {
    ok = false;
    *report += "hdnh: " + what + "\n";
  };
  pm::Epochs::Guard guard(epochs_);
  const LevelSet* set = levels_.load();
  std::unordered_map<std::string, uint64_t> values;  // key bytes -> value word
  uint64_t count = 0;
  for (int i = 0; i < set->n && ok; ++i) {
    const Level& l = *set->lv[i];
    for (uint64_t b = 0; b < l.nbuckets && ok; ++b) {
      if (!bucket_live(l, b)) continue;
      std::string where = "level " + std::to_string(i) + " bucket " + std::to_string(b);
      const Bucket& bk = l.buckets[b];
      if (bk.bitmap & ~uint64_t{0xFF}) bad(where + ": bitmap holds garbage");
      for (int s = 0; s < kSlots; ++s) {
        uint16_t e = l.ocf[b * kSlots + s].load();
        bool v = (bk.bitmap >> s) & 1;
        if (ocf::busy(e)) bad(where + ": slot still locked");
        if (ocf::valid(e) != v) bad(where + ": OCF bitmap differs from PM");
        if (!v) continue;
        ++count;
        const Slot& sl = bk.slots[s];
        Hashed k = hashed_slot(sl.key);
        if (ocf::fp(e) != k.fp) bad(where + ": OCF fingerprint differs from the key's");
        Candidates c = candidates(l, k);
        if (std::find(c.b, c.b + c.n, b) == c.b + c.n) bad(where + ": key in a wrong bucket");
        if (items_.variable()) {
          std::string_view key;
          if (!items_.item_key(sl.value, &key) || alloc_.block_size(sl.value) == 0) {
            bad(where + ": slot points to no item");
            continue;
          }
          if (common::Items::hash(key) != sl.key) bad(where + ": item key does not hash to slot");
        }
        if (!values.emplace(items_.slot_key_bytes(sl), sl.value).second)
          bad(where + ": key stored twice");
      }
    }
  }
  if (ok && count != size())
    bad("item count " + std::to_string(size()) + " but " + std::to_string(count) + " records");
  // Every hot-table copy equals the non-volatile table's value.
  for (int i = 0; i < set->n && ok; ++i) {
    const Level& l = *set->lv[i];
    if (!l.hot_meta) continue;
    for (uint64_t j = 0; j < l.nbuckets * cfg_.hot_slots && ok; ++j) {
      uint16_t m = l.hot_meta[j].load();
      if (m & hot::kBusy) bad("hot slot still locked");
      if (!(m & hot::kValid)) continue;
      uint64_t vw = l.hot_value[j].load();
      std::string key, hv, nv;
      if (items_.variable()) {
        auto* hi = reinterpret_cast<const HotItem*>(vw);
        key = hi->key;
        hv = hi->value;
      } else {
        uint64_t kw = l.hot_key[j].load();
        key.assign(reinterpret_cast<const char*>(&kw), 8);
        hv.assign(reinterpret_cast<const char*>(&vw), 8);
      }
      auto it = values.find(key);
      if (it == values.end()) {
        bad("hot table holds a key the table does not");
        continue;
      }
      if (!items_.read_value(it->second, &nv) || nv != hv)
        bad("hot table value differs from the table's");
    }
  }
  return ok;
}

void Hdnh::for_each_reachable(const std::function<void(uint64_t off)>& fn) const {
  fn(root_off_);
  pm::Epochs::Guard guard(epochs_);
  const LevelSet* set = levels_.load();
  for (int i = 0; i < set->n; ++i) fn(set->lv[i]->off);
  if (!items_.variable()) return;
  for_each([&](const Slot& s) { fn(s.value); });
}

void Hdnh::for_each(const std::function<void(const Slot&)>& fn) const {
  pm::Epochs::Guard guard(epochs_);
  const LevelSet* set = levels_.load();
  for (int i = 0; i < set->n; ++i) {
    const Level& l = *set->lv[i];
    for (uint64_t b = 0; b < l.nbuckets; ++b) {
      if (!bucket_live(l, b)) continue;
      for (uint64_t bits = l.buckets[b].bitmap & 0xFF; bits; bits &= bits - 1)
        fn(l.buckets[b].slots[std::countr_zero(bits)]);
    }
  }
}

}  // namespace pmhash::hdnh

namespace pmhash {
namespace hdnh {
Status validate(const SchemeContext& ctx);  // validate.cpp
uint64_t items_found(const SchemeContext& ctx, uint64_t enough);
}  // namespace hdnh
extern const SchemeFactory kHdnhFactory;
const SchemeFactory kHdnhFactory = {"hdnh",
                                    &hdnh::Hdnh::layout,
                                    &hdnh::Hdnh::create,
                                    &hdnh::Hdnh::open,
                                    &hdnh::validate,
                                    &check_runtime<hdnh::Hdnh::Config, &hdnh::Hdnh::parse_config>,
                                    &hdnh::items_found,
                                    true};
}  // namespace pmhash
