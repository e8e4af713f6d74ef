#include "index/pmeh/pmeh.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <thread>
#include <unordered_set>

#include "pm/publish.hpp"

namespace pmhash::pmeh {

using common::load_word;
using common::Slot;
using common::store_word;

// ---- construction, layout ----

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
      rt_(runtime_config<Runtime, &parse_runtime>(ctx)),
      zone_threads_(static_cast<unsigned>(rt_.zone_threads)),
      opportunistic_(rt_.concurrency != Concurrency::kLocked),
      partition_only_(rt_.concurrency == Concurrency::kPartition),
      zones_(1u << zone_bits_, opportunistic_),
      tstats_(new ThreadStats[pm::ThreadRegistry::kMaxThreads]) {
  latest_.store(root_->latest_dir);
  recover();  // recovery.cpp
  open_segments_read_ = open_segment_reads();
}

Pmeh::~Pmeh() = default;

Status Pmeh::parse_runtime(const common::Params& params, Runtime* out) {
  Status s =
      params.get_u64("pmeh", "zone_threads", std::max(1u, std::thread::hardware_concurrency()), 1,
                     pm::ThreadRegistry::kMaxThreads, &out->zone_threads);
  bool opp = true;
  if (s.ok()) s = params.get_bool("pmeh", "opportunistic", true, &opp);
  std::string c = opp ? "opportunistic" : "locked";
  if (s.ok() && params.has("concurrency"))
    s = params.get_enum("pmeh", "concurrency", {"opportunistic", "partition", "locked"}, &c);
  if (!s.ok()) return s;
  if (!opp && c != "locked")  // the old spelling of locked, contradicted
    return {Code::kInvalidArgument,
            "pmeh: parameter concurrency='" + c + "' contradicts opportunistic=off (locked)"};
  out->concurrency = c == "partition" ? Concurrency::kPartition
                     : c == "locked"  ? Concurrency::kLocked
                                      : Concurrency::kOpportunistic;
#ifdef PMHASH_CRASH_HOOKS
  s = params.get_u64("pmeh", "test_sweep_pause_us", 0, 0, 1'000'000, &out->test_sweep_pause_us);
#endif
  return s;
}

Status Pmeh::layout(const Options& o, const common::Params& p, common::Params* layout) {
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
  open_segment_reads() = 0;  // a new pool: nothing was validated
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

Pmeh::Hashed Pmeh::hashed(std::string_view key) const {
  uint64_t h = common::Items::hash(key);
  return {h, items_.key_word(key, h), static_cast<uint8_t>(h >> 32)};
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
    if (Status bad = ensure_recovered(s, k.h); !bad.ok()) return bad;
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
    if (!found) return Status::KeyNotFound();
    if (!items_.read_value(vw, value)) return {Code::kCorrupted, "pmeh: slot points to no item"};
    return Status::Ok();
  }
}

// Partition-only (concurrency=partition): only the zone's own thread writes it.
Status Pmeh::refuse_foreign(uint32_t z) const {
  return {Code::kInvalidArgument, "pmeh: concurrency=partition: the key belongs to partition " +
                                      std::to_string(z % zone_threads_) +
                                      ", not this thread's (route it with Index::owner)"};
}

// Algorithm 7 (with Algorithms 4 and 6): the zone decides lock-free or locked; a missing
// entry in the latest directory is filled for the zone first (Algorithm 3); a full segment
// splits out one more segment, or the directory expands, and the insert retries.
Status Pmeh::put(std::string_view key, std::string_view value, PutMode mode) {
  Hashed k = hashed(key);
  uint32_t z = zone_of(k.h);
  bool local = is_local(z);
  if (partition_only_ && !local) return refuse_foreign(z);
  ThreadStats& ts = tstats_[threads_.id()];
  for (int empty = 0;;) {
    ZoneMode zm = enter(z, local);
    pm::Epochs::Guard guard(epochs_, threads_.id());
    uint64_t so;
    {  // the directory is read inside the zone (see zone_segment); segments are never freed
      ZoneLock zl(zones_.lock(z), zm == ZoneMode::kShared);
      so = zone_segment(z, k.h);
    }
    if (so == 0) {  // only a damaged pool: the zone's fill found no older entry
      exit(z, zm);
      if (++empty > 100000) return {Code::kCorrupted, "pmeh: no segment for a key"};
      continue;
    }
    SegmentHeader* s = segment(so);
    if (Status bad = ensure_recovered(s, k.h); !bad.ok()) {
      exit(z, zm);
      return bad;
    }
    uint64_t b = bucket_of(k.h);
    lock_buckets(s, b, zm, ts);
    if (!covers(load_word(s->meta), k.h)) {  // split meanwhile (shared mode): retry
      unlock_buckets(s, b);
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
        st = items_.write(key, value, k.kw, &item);  // log-free (write_record)
        if (st.ok()) {
          if (loc.stash) lock_stash(*loc.b, zm, ts);
          items_.swap_value(loc.b->slots[loc.slot].value, item);
          if (loc.stash) unlock_bucket(*loc.b);
          (zm == ZoneMode::kExclusive ? ts.lock_free : ts.locked)
              .fetch_add(1, std::memory_order_relaxed);
        }
      }
      unlock_buckets(s, b);
      exit(z, zm);
      return st;
    }
    if (mode == PutMode::kUpdate) {
      unlock_buckets(s, b);
      exit(z, zm);
      return Status::KeyNotFound();
    }
    common::Items::New item;
    st = items_.write(key, value, k.kw, &item);
    bool full = false;
    if (st.ok()) st = seg_insert(s, b, k, item, zm, ts, &full);
    unlock_buckets(s, b);
    if (!st.ok() || !full) {
      if (st.ok()) {
        (zm == ZoneMode::kExclusive ? ts.lock_free : ts.locked)
            .fetch_add(1, std::memory_order_relaxed);
      }
      exit(z, zm);
      return st;
    }
    items_.discard(item);  // written again after the split
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
  if (partition_only_ && !local) return refuse_foreign(z);
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
    if (Status bad = ensure_recovered(s, k.h); !bad.ok()) {
      exit(z, zm);
      return bad;
    }
    uint64_t b = bucket_of(k.h);
    lock_buckets(s, b, zm, ts);
    if (!covers(load_word(s->meta), k.h)) {
      unlock_buckets(s, b);
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
      if (loc.stash) lock_stash(*loc.b, zm, ts);
      clear_record(*loc.b, loc.slot, items_.owned_block(vw));
      if (loc.stash) {  // its overflow fingerprint, or one from the home bucket's count
        unlock_bucket(*loc.b);
        Bucket& ob = *loc.ofp_bucket;  // b or b+1: held
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
    unlock_buckets(s, b);
    exit(z, zm);
    return found ? Status::Ok() : Status::KeyNotFound();
  }
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
    for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) {
      for (uint32_t a = live[i]; a; a &= a - 1)
        n += covers(meta, items_.slot_hash(load_word(bs[i].slots[std::countr_zero(a)].key)));
      // The count rests on the allocation bits; a counted slot's key was persisted before
      // its bit was set, and an in-place update changes only a value.
      flush_if_written(bs[i], 0);
    }
  }
  return n;
}

// size() and for_each() report only what a crash keeps. Every write into a bucket holds its
// lock bit from before its first store to after its persist — the zone owner's lock-free
// writes too (lock_bucket) — so a bucket word or slot the walk read from a write not yet
// persisted shows the bit here, read after them (acquire loads of release stores). Then the
// bucket's word and the reported slots (bit i: slot i) are flushed, and Index fences once
// before it answers (pm::flush_reported). get() instead retries while a bucket is locked.
void Pmeh::flush_if_written(const Bucket& b, uint32_t reported) const {
  if (load_word(b.word0) & word::kLock)
    pm::flush_reported(pool_.persister(), &b.word0, b.slots, reported);
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
  return (uint64_t{1} << zone_bits_) * Zones::kBytesPerZone;
}

void Pmeh::counters(std::map<std::string, double>* out) const {
  uint64_t lf = 0, lk = 0, rt = 0, bl = 0;
  for (unsigned t = 0; t < pm::ThreadRegistry::kMaxThreads; ++t) {
    lf += tstats_[t].lock_free.load();
    lk += tstats_[t].locked.load();
    rt += tstats_[t].retries.load();
    bl += tstats_[t].bucket_locks.load();
  }
  (*out)["segment_splits"] = double(splits_.load());
  (*out)["records_moved"] = double(moved_.load());
  (*out)["split_fill_min"] = splits_.load() ? double(split_fill_min_.load()) / 1000.0 : 0.0;
  (*out)["dir_expansions"] = double(expansions_.load());
  (*out)["displacements"] = double(displaced_.load());
  (*out)["stashed"] = double(stashed_.load());
  (*out)["dir_array_full_fills"] = double(forced_fills_.load());
  (*out)["open_segments_read"] = double(open_segments_read_);
  (*out)["lock_free_writes"] = double(lf);
  (*out)["locked_writes"] = double(lk);
  (*out)["lock_free_share"] = lf + lk ? double(lf) / double(lf + lk) : 0.0;
  (*out)["bucket_locks"] = double(bl);
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
    if (!crash_version_used(s->lock_gen))  // what a first access refuses (check_first_access)
      bad("segment " + std::to_string(so) + ": crash version " + std::to_string(s->lock_gen) +
          ", which no open used (latest " + std::to_string(gen_) + ")");
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

void Pmeh::wait_idle() {
  if (sweep_) sweep_->wait_idle();
}

void Pmeh::stop() {
  if (sweep_) sweep_->stop();
}

void Pmeh::for_each(const std::function<void(const Slot&)>& fn) const {
  for_each_in_pieces(fn, [] {});
}

// A piece is a segment.
bool Pmeh::for_each_in_pieces(const std::function<void(const Slot&)>& fn,
                              const std::function<void()>& piece_done) const {
  for (uint64_t so : distinct_segments()) {
    {
      // Held while fn reads the items too: one a concurrent write frees is not reused before.
      pm::Epochs::Guard guard(epochs_);
      SegmentHeader* s = segment(so);
      uint64_t meta = load_word(s->meta);
      Bucket* bs = buckets(s);
      std::vector<uint32_t> live = live_alloc(s);  // as in size()
      for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) {
        for (uint32_t a = live[i]; a; a &= a - 1) {
          Slot sl = common::load_slot(bs[i].slots[std::countr_zero(a)]);
          if (covers(meta, items_.slot_hash(sl.key))) fn(sl);
        }
        flush_if_written(bs[i], live[i]);  // as in size(), the values too
      }
    }
    piece_done();
  }
  return true;
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
