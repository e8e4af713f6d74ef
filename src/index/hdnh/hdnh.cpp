// HDNH: configuration, construction, the operations (§3.5 read; §3.6 insert, update,
// delete) and introspection. Each mechanism of the paper has its own file (hdnh.hpp).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include "index/hdnh/detail.hpp"
#include "pm/publish.hpp"

namespace pmhash::hdnh {

using common::load_word;
using common::Slot;
using common::store_word;
using namespace detail;

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
    hot_free_level(*set->lv[i]);
    delete set->lv[i];
  }
  delete set;
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
    return Status::KeyNotFound();
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
      Status s = items_.write(key, value, k.kw, &item);  // log-free: swept if a crash strands it
      if (!s.ok()) return s;
      if (!lock_slot(&loc)) {
        items_.discard(item);
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
        p.persist(&ns, sizeof ns);  // the fence also orders the item and its allocation bit
        commit_bitmap(b, bit(nl.slot), bit(loc.slot));
        items_.retire(vw);  // unreachable in PM now (variable: allocation bit cleared)
      } else {  // a full bucket: the value word in place (variable: a new item swapped in)
        items_.swap_value(b.slots[loc.slot].value, item);
        ts.in_place_updates.fetch_add(1, std::memory_order_relaxed);
      }
      // Committed. The hot copy is published before the OCF releases the old slot: until
      // then a reader that misses the hot table waits for that slot, so no reader sees the
      // new value and then the old one.
      hot_finish(&hj);
      if (out_of_place) {
        unlock_slot(nl, true, k.fp);  // new valid before old invalid (and find() checks
                                      // that the bucket did not change under its scan)
        unlock_slot(loc, false, 0);
      } else {
        unlock_slot(loc, true, k.fp);
      }
      return Status::Ok();
    }
    if (mode == PutMode::kUpdate) return Status::KeyNotFound();
    Loc nl;
    if (!claim_free(*set, k, &nl)) {
      uint64_t seen = resize_seq_.load();
      rl.unlock();
      Status s = resize(seen);
      if (!s.ok()) return s;
      continue;
    }
    common::Items::New item;
    Status s = items_.write(key, value, k.kw, &item);
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
    p.persist(&ns, sizeof ns);  // the fence also orders the item and its allocation bit
    commit_bitmap(b, bit(nl.slot), 0);
    // Committed. The OCF shows the record before the hot table does: a reader that finds
    // the hot copy and a later one that misses it (evicted) both find the key.
    unlock_slot(nl, true, k.fp);
    ts.items.fetch_add(1, std::memory_order_relaxed);
    hot_finish(&hj);
    return Status::Ok();
  }
}

// Delete: the bitmap bit goes to 0 (one persisted store); the hot-table copy is dropped. The
// variable format's item is then unmarked (no flush: a crash before the bit reaches PM leaves
// it allocated and unreachable, and the recovery sweep frees it).
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
    if (!found) return Status::KeyNotFound();
    if (!lock_slot(&loc)) continue;
    // Dropping the hot copies may overlap the PM write (background): a reader that misses
    // them waits for the locked slot. They are gone before the OCF shows the delete.
    HotJob hj;
    hot_begin(&hj, kHotRemove, *set, k, key, {});
    commit_bitmap(loc.level->buckets[loc.bucket], 0, bit(loc.slot));
    items_.retire(vw);  // unreachable in PM now (variable: allocation bit cleared)
    hot_finish(&hj);
    unlock_slot(loc, false, 0);
    ts.items.fetch_sub(1, std::memory_order_relaxed);
    return Status::Ok();
  }
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
  uint64_t n = kStripes * sizeof(std::atomic<uint32_t>);
  for (int i = 0; i < set->n; ++i) {
    const Level& l = *set->lv[i];
    n += l.nbuckets * (kSlots * sizeof(uint16_t) + sizeof(uint32_t));  // OCF, change counts
    if (!l.hot) continue;
    n += l.hot.bytes;  // the hot buckets (hot_table.hpp)
    if (l.hot_stamp) n += l.nbuckets * cfg_.hot_slots * 8;
    if (!items_.variable()) continue;
    for (uint64_t b = 0; b < l.nbuckets; ++b)  // hot items too long to be inline
      for (int e = 0; e < cfg_.hot_slots; ++e) {
        hot::Payload p;
        uint16_t m;
        do {  // writers run beside this: a consistent payload or none
          m = l.hot.meta(b, e).load(std::memory_order_acquire);
        } while ((m & hot::kValid) && !(m & hot::kBusy) && !hot_snapshot(l.hot, b, e, m, &p));
        if (!(m & hot::kValid) || (m & hot::kBusy) || p.is_inline()) continue;
        n += reinterpret_cast<const HotItem*>(p.w[0])->dram_bytes();
      }
  }
  return n;
}

void Hdnh::counters(std::map<std::string, double>* out) const {
  uint64_t pos = 0, neg = 0, pms_pos = 0, pms_neg = 0, hits = 0, retries = 0, in_place = 0;
  for (unsigned t = 0; t < pm::ThreadRegistry::kMaxThreads; ++t) {
    const ThreadStats& s = tstats_[t];
    pos += s.pos_reads.load();
    neg += s.neg_reads.load();
    pms_pos += s.pm_slots_pos.load();
    pms_neg += s.pm_slots_neg.load();
    hits += s.hot_hits.load();
    retries += s.retries.load();
    in_place += s.in_place_updates.load();
  }
  pm::Epochs::Guard guard(epochs_);
  const LevelSet* set = levels_.load();
  uint64_t hot_used = 0, hot_cap = 0;
  for (int i = 0; i < set->n; ++i) {
    const Level& l = *set->lv[i];
    if (!l.hot) continue;
    hot_cap += l.nbuckets * cfg_.hot_slots;
    for (uint64_t b = 0; b < l.nbuckets; ++b)
      for (int e = 0; e < cfg_.hot_slots; ++e)
        hot_used += (l.hot.meta(b, e).load(std::memory_order_relaxed) & hot::kValid) != 0;
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
  (*out)["in_place_updates"] = double(in_place);  // a full bucket: the value word replaced
  (*out)["recovery_ms"] = recovery_ms_;
  (*out)["recovery_hot_ms"] = recovery_hot_ms_;
  (*out)["recovery_ocf_ms"] = recovery_ms_ - recovery_hot_ms_;
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
    if (!l.hot) continue;
    for (uint64_t b = 0; b < l.nbuckets && ok; ++b)
      for (int e = 0; e < cfg_.hot_slots && ok; ++e) {
        uint16_t m = l.hot.meta(b, e).load();
        if (m & hot::kBusy) bad("hot slot still locked");
        if (!(m & hot::kValid)) continue;
        hot::Payload p = hot_load(l.hot, b, e);
        uint64_t kw = l.hot.key(b, e).load();
        std::string key, hv, nv;
        if (items_.variable())
          key = hot_key_bytes(p);
        else
          key.assign(reinterpret_cast<const char*>(&kw), 8);
        hot_value(p, &hv);
        if (hashed(key).kw != kw || hot_bucket(l, hashed(key)) != b)
          bad("hot copy in a wrong slot");
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

// The caller holds a read-side section: a resize may free the level. A reader never sees
// what a crash can take back: where a write is in flight in the bucket, the bitmap and the
// reported slots are flushed, and Index fences once before it answers (pm::flush_reported).
void Hdnh::walk_buckets(const Level& l, uint64_t first, uint64_t end,
                        const std::function<void(const Slot&)>& fn) const {
  for (uint64_t b = first; b < end; ++b) {
    if (!bucket_live(l, b)) continue;
    const Bucket& bk = l.buckets[b];
    auto bits = static_cast<uint32_t>(load_word(bk.bitmap) & 0xFF);
    for (uint32_t m = bits; m; m &= m - 1) fn(common::load_slot(bk.slots[std::countr_zero(m)]));
    if (write_in_flight(l, b)) pm::flush_reported(pool_.persister(), &bk.bitmap, bk.slots, bits);
  }
}

// Whether a writer holds a slot of bucket b, read after the bucket's PM words: a slot's
// opmap bit (§3.6) is set before its writer's first PM store (slot, bitmap, or the value
// word of an update in a full bucket; a resize's claimed new-top slots) and cleared after
// that write is persisted, so a PM word the walk read from a write not yet persisted shows
// its writer's bit here (acquire loads of release stores and RMWs). get() never meets such
// a write: it reads the OCF, released only after the persist, and waits for a held slot.
bool Hdnh::write_in_flight(const Level& l, uint64_t b) const {
  for (int s = 0; s < kSlots; ++s)
    if (ocf::busy(l.ocf[b * kSlots + s].load(std::memory_order_acquire))) return true;
  return false;
}

// One section for the whole walk, over one level set.
void Hdnh::for_each(const std::function<void(const Slot&)>& fn) const {
  pm::Epochs::Guard guard(epochs_);
  const LevelSet* set = levels_.load();
  for (int i = 0; i < set->n; ++i) walk_buckets(*set->lv[i], 0, set->lv[i]->nbuckets, fn);
}

// A piece is up to kPieceBuckets buckets of one level, the level set loaded again for each
// (a resize meanwhile replaces it and frees the bottom level). Levels are addressed by their
// place in the current set: across a resize the walk may repeat or miss items, as index.hpp
// allows for HDNH's rehash, but it reads only levels its own section holds.
bool Hdnh::for_each_in_pieces(const std::function<void(const Slot&)>& fn,
                              const std::function<void()>& piece_done) const {
  bool level_left = true;
  for (int i = 0; level_left; ++i)
    walk_in_bucket_pieces(
        [&](uint64_t first) -> uint64_t {
          pm::Epochs::Guard guard(epochs_);
          const LevelSet* set = levels_.load();
          level_left = i < set->n;
          if (!level_left) return 0;  // past the last level: an empty piece
          const Level& l = *set->lv[i];
          walk_buckets(l, first, std::min(first + kPieceBuckets, l.nbuckets), fn);
          return l.nbuckets;
        },
        piece_done);
  return true;
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
