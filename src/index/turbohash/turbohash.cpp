#include "index/turbohash/turbohash.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <unordered_set>
#include <vector>

#include "pm/publish.hpp"

namespace pmhash::turbohash {

using common::load_word;
using common::Slot;
using common::store_word;

TurboHash::TurboHash(SchemeContext& ctx, uint64_t root_off)
    : pool_(ctx.pool),
      alloc_(ctx.alloc),
      epochs_(ctx.epochs),
      threads_(ctx.threads),
      items_(ctx.items),
      root_off_(root_off),
      root_(ctx.pool.ptr<Root>(root_off)),
      dir_(ctx.pool.ptr<Descriptor>(root_->directory)),
      nshards_(root_->nshards),
      scope_(root_->scope),
      match_(runtime_config<Runtime, &parse_runtime>(ctx).simd ? common::best_tag_match()
                                                               : common::tag_match_scalar),
      shards_(new ShardMirror[root_->nshards]),
      tstats_(new ThreadStats[pm::ThreadRegistry::kMaxThreads]),
      gc_(runtime_config<Runtime, &parse_runtime>(ctx).gc),
      test_pause_us_(runtime_config<Runtime, &parse_runtime>(ctx).test_pause_us),
      test_sweep_pause_us_(runtime_config<Runtime, &parse_runtime>(ctx).test_sweep_pause_us) {
  // Recovery (§3.7): the only work is to rebuild the DRAM directory from the PM one.
  for (uint64_t s = 0; s < nshards_; ++s) {
    const Descriptor& d = dir_[s];
    shards_[s].packed.store(d.set[d.version & 1], std::memory_order_relaxed);
  }
}

Status TurboHash::parse_runtime(const common::Params& params, Runtime* out) {
  Status s = params.get_bool("turbohash", "simd", true, &out->simd);
  if (s.ok()) s = params.get_bool("turbohash", "gc", true, &out->gc);
#ifdef PMHASH_CRASH_HOOKS
  if (s.ok())
    s = params.get_u64("turbohash", "test_pause_after_retire_us", 0, 0, 10'000'000,
                       &out->test_pause_us);
  if (s.ok())
    s = params.get_u64("turbohash", "test_sweep_pause_us", 0, 0, 1'000'000,
                       &out->test_sweep_pause_us);
#endif
  return s;
}

// Test-only (builds with PMHASH_CRASH_HOOKS): right after a resize has retired the old
// shard, waits until reclamation has run (liburcu frees in batches some milliseconds
// apart), then `test_pause_after_retire_us` more, so other threads can reuse the block
// while this one holds the shard: a reader still reaching the old shard would see it.
void TurboHash::test_pause_after_retire() const {
  if (test_pause_us_ == 0) return;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (epochs_.pending() != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  std::this_thread::sleep_for(std::chrono::microseconds(test_pause_us_));
}

Status TurboHash::layout(const Options& o, const common::Params& p, common::Params* layout) {
  // Paper: 64K shards x 16 buckets for 12M slots. Default: sized from the capacity hint
  // for a load factor near 0.5 before the first resizes, else 1024 shards.
  uint64_t want_buckets = o.capacity_hint ? o.capacity_hint / 7 : 16 * 1024;
  uint64_t def_shards = 1;
  while (def_shards * 16 < want_buckets && def_shards < (1u << 20)) def_shards <<= 1;
  uint64_t shards, buckets, scope;
  Status s = p.get_u64("turbohash", "shards", def_shards, 1, 1u << 24, &shards);
  if (s.ok()) s = p.get_u64("turbohash", "buckets", 16, 1, kMaxShardBuckets / 2, &buckets);
  if (s.ok()) s = p.get_u64("turbohash", "scope", 16, 1, 1024, &scope);
  if (!s.ok()) return s;
  layout->set("shards", std::to_string(shards));
  layout->set("buckets", std::to_string(buckets));
  layout->set("scope", std::to_string(scope));
  return Status::Ok();
}

Status TurboHash::create(SchemeContext& ctx, std::unique_ptr<Scheme>* out) {
  uint64_t nshards = 0, nbuckets = 0, scope = 0;
  if (!ctx.layout.get_u64("shards", 0, &nshards) || !ctx.layout.get_u64("buckets", 0, &nbuckets) ||
      !ctx.layout.get_u64("scope", 0, &scope) || nshards == 0 || nbuckets == 0 || scope == 0)
    return {Code::kCorrupted, "turbohash: pool header lacks layout parameters"};
  pm::Allocator& a = ctx.alloc;
  const pm::Persister& p = ctx.pool.persister();
  std::vector<pm::Reservation> all;
  auto fail = [&] {
    for (auto& r : all) a.cancel(r);
    return Status(Code::kPoolFull, "pool too small for " + std::to_string(nshards) + " shards of " +
                                       std::to_string(nbuckets) + " buckets");
  };
  pm::Reservation root = a.reserve(sizeof(Root));
  if (!root) return fail();
  all.push_back(root);
  pm::Reservation dir = a.reserve(nshards * sizeof(Descriptor));
  if (!dir) return fail();
  all.push_back(dir);
  auto* d = ctx.pool.ptr<Descriptor>(dir.off);
  for (uint64_t s = 0; s < nshards; ++s) {
    pm::Reservation sh = a.reserve(nbuckets * sizeof(Bucket));
    if (!sh) return fail();
    all.push_back(sh);
    std::memset(ctx.pool.ptr<char>(sh.off), 0, nbuckets * sizeof(Bucket));
    p.flush(ctx.pool.ptr<char>(sh.off), nbuckets * sizeof(Bucket));
    d[s] = Descriptor{{pack(nbuckets, sh.off), 0}, 0, 0};
  }
  p.flush(d, nshards * sizeof(Descriptor));
  auto* r = ctx.pool.ptr<Root>(root.off);
  *r = Root{kRootMagic, nshards, scope, dir.off, {0, 0, 0, 0}};
  p.flush(r, sizeof(Root));
  publish_new_root(ctx, all, root.off);
  *out = std::make_unique<TurboHash>(ctx, root.off);
  return Status::Ok();
}

Status TurboHash::open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out) {
  const Root* root = existing_root<Root>(ctx, kRootMagic);
  if (root == nullptr) return {Code::kCorrupted, "turbohash: root object missing or damaged"};
  const Root& r = *root;
  uint64_t root_off = ctx.pool.root();
  if (r.nshards == 0 || r.scope == 0 ||
      ctx.alloc.block_size(r.directory) < r.nshards * sizeof(Descriptor))
    return {Code::kCorrupted, "turbohash: shard directory missing or damaged"};
  const Descriptor* d = ctx.pool.ptr<Descriptor>(r.directory);
  for (uint64_t s = 0; s < r.nshards; ++s) {
    uint64_t live = d[s].set[d[s].version & 1];
    uint64_t n = packed_count(live);
    if (n == 0 || ctx.alloc.block_size(packed_offset(live)) < n * sizeof(Bucket))
      return {Code::kCorrupted, "turbohash: shard " + std::to_string(s) + " points nowhere"};
  }
  auto t = std::make_unique<TurboHash>(ctx, root_off);
  // §3.7 rebuilds only the directory; the variable format's log-free writes may have left
  // allocated, unreachable items, which a background sweep frees (BackgroundSweep).
  if (!clean && ctx.items.variable())
    t->sweep_ = std::make_unique<BackgroundSweep>(
        ctx.alloc, ctx.epochs,
        [tp = t.get()](const std::function<void(uint64_t)>& fn) { tp->walk_locked(fn); },
        t->test_sweep_pause_us_);
  *out = std::move(t);
  return Status::Ok();
}

// for_each_reachable one shard at a time under its WriteLock, while operations run: a write
// that unpublishes an item also frees it under that lock, and a resize moves items only
// within their shard, so an item reachable throughout the walk is reported.
void TurboHash::walk_locked(const std::function<void(uint64_t off)>& fn) const {
  fn(root_off_);
  fn(root_->directory);
  for (uint64_t s = 0; s < nshards_; ++s) {
    std::lock_guard<std::mutex> lock(shards_[s].write_lock);
    walk_shard(shards_[s].packed.load(std::memory_order_relaxed), fn);
  }
}

void TurboHash::walk_shard(uint64_t packed, const std::function<void(uint64_t off)>& fn) const {
  fn(packed_offset(packed));
  if (!items_.variable()) return;
  const Bucket* b0 = shard_buckets(packed);
  for (uint64_t i = 0; i < packed_count(packed); ++i)
    for (uint32_t mask = Bucket::live(b0[i].load_meta()); mask; mask &= mask - 1)
      fn(b0[i].slots[std::countr_zero(mask)].value);
}

void TurboHash::wait_idle() {
  if (sweep_) sweep_->wait_idle();
}

void TurboHash::stop() {
  if (sweep_) sweep_->stop();
}

TurboHash::Hashed TurboHash::hashed(std::string_view key) const {
  uint64_t h = common::Items::hash(key);
  return {h, items_.key_word(key, h), static_cast<uint32_t>(common::fast_range(h >> 32, nshards_)),
          static_cast<uint8_t>(h >> 32)};
}

// Algorithm 1 (lock-free search). Each bucket is read between two loads of its metadata;
// a changed sequence number means a writer completed in between: retry the bucket. Unlike
// Algorithm 1 we validate misses too: a stale snapshot can otherwise miss a key that an
// update moved within the bucket while a later insert reused its old slot.
Status TurboHash::get(std::string_view key, std::string* value) {
  Hashed k = hashed(key);
  unsigned tid = threads_.id();
  ThreadStats& ts = tstats_[tid];
  pm::Epochs::Guard guard(epochs_, tid);
  uint64_t packed = shards_[k.shard].packed.load(std::memory_order_acquire);
  Bucket* b0 = shard_buckets(packed);
  uint64_t n = packed_count(packed);
  uint64_t idx = home(k.h, n), scope = std::min(scope_, n);
  for (uint64_t d = 0; d < scope; ++d, idx = idx + 1 == n ? 0 : idx + 1) {
    Bucket& b = b0[idx];
    for (;;) {
      // A write in flight is persisted before this reader acts on it (durable reads).
      uint64_t m1 = pm::load_persisted(pool_.persister(), &b.meta, kUnpersisted);
      uint8_t tags[16];
      b.load_tags(tags);
      uint32_t mask = match_(tags, k.tag) & Bucket::live(m1);
      bool found = false, readable = true;
      for (; mask != 0; mask &= mask - 1) {
        int pos = std::countr_zero(mask);
        uint64_t sk = load_word(b.slots[pos].key), sv = load_word(b.slots[pos].value);
        if (items_.matches(sk, sv, key, k.kw)) {
          found = true;
          readable = items_.read_value(sv, value);
          break;
        }
      }
      // Slot words are acquire loads, so this second metadata load cannot pass them.
      if (Bucket::seq(b.load_meta()) != Bucket::seq(m1)) {  // NeedRetry
        bump(ts.retries);
        continue;
      }
      if (found) {
        if (!readable) return {Code::kCorrupted, "turbohash: slot points to no item"};
        bump(ts.pos_reads);
        bump(ts.pos_probes, d + 1);
        return Status::Ok();
      }
      if (Bucket::path_end(m1)) {
        bump(ts.neg_reads);
        bump(ts.neg_probes, d + 1);
        return Status::KeyNotFound();
      }
      break;
    }
  }
  bump(ts.neg_reads);
  bump(ts.neg_probes, scope);
  return Status::KeyNotFound();
}

// Algorithms 2 and 4: insert, update (near-place) and upsert, under the shard's WriteLock.
Status TurboHash::put(std::string_view key, std::string_view value, PutMode mode) {
  Hashed k = hashed(key);
  ShardMirror& sm = shards_[k.shard];
  std::lock_guard<std::mutex> lock(sm.write_lock);
  const pm::Persister& p = pool_.persister();
  for (;;) {
    uint64_t packed = sm.packed.load(std::memory_order_relaxed);
    Bucket* b0 = shard_buckets(packed);
    uint64_t n = packed_count(packed);
    uint64_t idx = home(k.h, n), scope = std::min(scope_, n);
    Bucket* key_b = nullptr;  // FindSlotForInsert
    int key_pos = -1;
    Bucket* del_b = nullptr;
    Bucket* end_b = nullptr;
    for (uint64_t d = 0; d < scope && key_b == nullptr; ++d, idx = idx + 1 == n ? 0 : idx + 1) {
      Bucket& b = b0[idx];
      uint64_t m = b.load_meta();
      uint8_t tags[16];
      b.load_tags(tags);
      for (uint32_t mask = match_(tags, k.tag) & Bucket::live(m); mask; mask &= mask - 1) {
        int pos = std::countr_zero(mask);
        if (items_.matches(b.slots[pos].key, b.slots[pos].value, key, k.kw)) {
          key_b = &b;
          key_pos = pos;
          break;
        }
      }
      if (key_b) break;
      if (del_b == nullptr && (Bucket::deleted(m) & Bucket::valid(m) & kSlotMask)) del_b = &b;
      if (Bucket::path_end(m)) {
        end_b = &b;
        break;
      }
    }
    Bucket* b;
    int pos;
    if (key_b != nullptr) {
      if (mode == PutMode::kInsert) return {Code::kAlreadyExists, "key already exists"};
      b = key_b;
      pos = Bucket::empty_slot(b->load_meta());  // the reserved slot: always there
      if (pos < 0) return {Code::kCorrupted, "turbohash: bucket lost its reserved slot"};
    } else {
      if (mode == PutMode::kUpdate) return Status::KeyNotFound();
      if (del_b != nullptr) {  // the first deleted slot on the path (PickDeleteSlot)
        b = del_b;
        pos = std::countr_zero(Bucket::deleted(b->load_meta()) & Bucket::valid(b->load_meta()) &
                               kSlotMask);
      } else if (end_b != nullptr) {  // an empty slot of the path-end bucket
        b = end_b;
        pos = Bucket::empty_slot(b->load_meta());
      } else {  // no room within the probing scope: rehash the shard (§3.5), retry; at the
                // same size (§4.6) when dropping its deleted slots frees enough room
        Status s = resize(k.shard, gc_due(sm, kGcOnOverflow));
        if (!s.ok()) return s;
        continue;
      }
    }
    // Log-free (docs/crash-testing.md): the item is a spare block whose allocation bit is
    // already persisted; a crash before the metadata store leaves it to the recovery sweep.
    common::Items::New item;
    Status s = items_.write(key, value, k.kw, &item);
    if (!s.ok()) return s;
    // Bucket::Insert: slot and tag first, persisted; then one 8-byte metadata store.
    Slot& slot = b->slots[pos];
    store_word(slot.key, item.key_word);
    store_word(slot.value, item.value_word);
    b->set_tag(pos, k.tag);
    if (!PMHASH_MUTATION(pool_, kMutationSkipSlotFlush)) p.flush(&slot, sizeof slot);
    // The tag shares line 0 with the metadata word and is stored before it, so x86 persists
    // it no later than the metadata: line 0 is flushed once, with the metadata (2 flushes
    // per insert, as the paper counts; the item's lines besides in the variable format).
    p.fence();
    p.line_order(b);
    uint64_t m = b->load_meta();
    uint32_t valid = Bucket::valid(m) | (1u << pos), del = Bucket::deleted(m) & ~(1u << pos);
    uint64_t old_item = 0;
    if (key_b != nullptr) {
      valid ^= 1u << key_pos;  // old and new valid bits flip in the same store
      old_item = items_.owned_block(b->slots[key_pos].value);
    }
    uint64_t nm = Bucket::make(valid, del, Bucket::seq(m) + 1);
    // Readers that see it before it is persisted persist it themselves.
    pm::publish_persisted(p, &b->meta, nm, kUnpersisted);
    if (old_item) items_.retire(old_item);  // unpublished and persisted: its bit may go
    if (key_b == nullptr && b == del_b && sm.deleted_known) --sm.deleted;  // a deleted slot reused
    return Status::Ok();
  }
}

// Algorithm 3: the delete bit is set and the sequence number bumped in one 8-byte store;
// the valid bit stays, so no search path breaks.
Status TurboHash::remove(std::string_view key) {
  Hashed k = hashed(key);
  ShardMirror& sm = shards_[k.shard];
  std::lock_guard<std::mutex> lock(sm.write_lock);
  uint64_t packed = sm.packed.load(std::memory_order_relaxed);
  Bucket* b0 = shard_buckets(packed);
  uint64_t n = packed_count(packed);
  uint64_t idx = home(k.h, n), scope = std::min(scope_, n);
  for (uint64_t d = 0; d < scope; ++d, idx = idx + 1 == n ? 0 : idx + 1) {
    Bucket& b = b0[idx];
    uint64_t m = b.load_meta();
    uint8_t tags[16];
    b.load_tags(tags);
    for (uint32_t mask = match_(tags, k.tag) & Bucket::live(m); mask; mask &= mask - 1) {
      int pos = std::countr_zero(mask);
      if (!items_.matches(b.slots[pos].key, b.slots[pos].value, key, k.kw)) continue;
      uint64_t nm =
          Bucket::make(Bucket::valid(m), Bucket::deleted(m) | (1u << pos), Bucket::seq(m) + 1);
      pm::publish_persisted(pool_.persister(), &b.meta, nm, kUnpersisted);
      items_.retire(b.slots[pos].value);  // variable: the bit is cleared, epoch-deferred reuse
      if (sm.deleted_known) ++sm.deleted;
      // §4.6: too many deleted slots lengthen search paths; rehash at the same size. The
      // delete is committed already: a failed rehash (pool full) only leaves them in place.
      if (gc_due(sm, kGcOnDelete)) resize(k.shard, true).ok();
      return Status::Ok();
    }
    if (Bucket::path_end(m)) break;
  }
  return Status::KeyNotFound();
}

// Deleted slots of a shard (valid and deleted); counted by a scan of the metadata words the
// first time it is needed after an open. Caller holds the shard's write lock.
uint64_t& TurboHash::deleted_slots(ShardMirror& sm) const {
  if (!sm.deleted_known) {
    uint64_t packed = sm.packed.load(std::memory_order_relaxed), n = 0;
    const Bucket* b0 = shard_buckets(packed);
    for (uint64_t i = 0; i < packed_count(packed); ++i) {
      uint64_t m = b0[i].load_meta();
      n += std::popcount(Bucket::deleted(m) & Bucket::valid(m));
    }
    sm.deleted = n;
    sm.deleted_known = true;
  }
  return sm.deleted;
}

// §4.6's "too many deleted keys in a shard" (the paper gives no number): at least
// 1/divisor of the shard's slots.
bool TurboHash::gc_due(ShardMirror& sm, uint64_t divisor) const {
  if (!gc_) return false;
  uint64_t n = packed_count(sm.packed.load(std::memory_order_relaxed));
  uint64_t d = deleted_slots(sm);
  return d > 0 && d * divisor >= n * kSlots;
}

bool TurboHash::place(Bucket* b0, uint64_t n, const Slot& s) const {
  uint64_t h = items_.slot_hash(s.key);
  uint64_t idx = home(h, n), scope = std::min(scope_, n);
  for (uint64_t d = 0; d < scope; ++d, idx = idx + 1 == n ? 0 : idx + 1) {
    Bucket& b = b0[idx];
    if (!Bucket::path_end(b.meta)) continue;
    int pos = Bucket::empty_slot(b.meta);
    b.slots[pos] = s;
    b.set_tag(pos, static_cast<uint8_t>(h >> 32));
    b.meta = Bucket::make(Bucket::valid(b.meta) | (1u << pos), 0, 0);
    return true;
  }
  return false;
}

// §3.5: read the shard into DRAM, build a larger shard there, write it to PM sequentially,
// persist, point the DRAM mirror at it, then publish through the descriptor (inactive set,
// then the version flip, in the same commit as the allocation and the old shard's free).
// Readers already on the old shard keep using it until they leave their read section.
// §4.6's garbage collection is the same operation with `same_size`: only live slots are
// copied, so the new shard has no deleted slots (it doubles if the items do not fit).
Status TurboHash::resize(uint32_t shard, bool same_size) {
  ShardMirror& sm = shards_[shard];
  const uint64_t fences0 = pm::tls_counters.fences;
  uint64_t old = sm.packed.load(std::memory_order_relaxed);
  Bucket* ob = shard_buckets(old);
  uint64_t on = packed_count(old);
  std::vector<Slot> live;
  for (uint64_t i = 0; i < on; ++i) {
    uint64_t m = ob[i].meta;
    for (uint32_t mask = Bucket::live(m); mask; mask &= mask - 1) {
      int pos = std::countr_zero(mask);
      live.push_back({ob[i].slots[pos].key, ob[i].slots[pos].value});
    }
  }
  std::vector<Bucket> nb;
  uint64_t nn = same_size ? on : on * 2;
  for (;; nn *= 2) {
    if (nn > kMaxShardBuckets)
      return {Code::kPoolFull,
              "turbohash: shard " + std::to_string(shard) + " cannot grow further"};
    nb.assign(nn, Bucket{});
    bool ok = true;
    for (const Slot& s : live)
      if (!(ok = place(nb.data(), nn, s))) break;
    if (ok) break;
  }
  pm::Reservation r = alloc_.reserve(nn * sizeof(Bucket));
  if (!r) return {Code::kPoolFull, "cannot resize a shard to " + std::to_string(nn) + " buckets"};
  const pm::Persister& p = pool_.persister();
  bool reorder = PMHASH_MUTATION(pool_, kMutationPublishBeforeWrite);
  if (!reorder) {
    p.nt_copy(pool_.ptr<char>(r.off), nb.data(), nn * sizeof(Bucket));
    p.fence();
  }
  Descriptor& d = dir_[shard];
  uint64_t version = d.version;
  store_word(d.set[(version & 1) ^ 1], pack(nn, r.off));
  p.persist(&d.set[(version & 1) ^ 1], 8);
  // Readers move to the new shard before the commit retires the old one (its free goes to
  // the epochs): a grace period waits only for readers already inside, so a reader that
  // loaded the old mirror after the retire could read a reused block. The new shard is
  // persisted and holds exactly the old one's live items (we hold the WriteLock), so a
  // crash before the version flip takes back nothing a reader has seen.
  if (!reorder) sm.packed.store(pack(nn, r.off), std::memory_order_release);
  pm::Tx tx(alloc_);
  tx.publish(r);
  tx.store(&d.version, version + 1);
  tx.free(packed_offset(old));
  tx.commit();
  test_pause_after_retire();
  if (reorder) {
    p.nt_copy(pool_.ptr<char>(r.off), nb.data(), nn * sizeof(Bucket));
    p.fence();
    sm.packed.store(pack(nn, r.off), std::memory_order_release);
  }
  ThreadStats& ts = tstats_[threads_.id()];
  if (nn == on) {  // §4.6
    bump(ts.gc_rehashes);
    bump(ts.gc_dropped, sm.deleted_known ? sm.deleted : 0);
    bump(ts.gc_fences, pm::tls_counters.fences - fences0);
  } else {
    bump(ts.resizes);
  }
  bump(ts.moved, live.size());
  sm.deleted = 0;  // place() writes no deleted slots
  sm.deleted_known = true;
  return Status::Ok();
}

// Sums f(metadata word) over every bucket of every shard (under an epoch guard: shards may
// be resized and freed meanwhile).
template <class F>
uint64_t TurboHash::sum_over_buckets(F f) const {
  pm::Epochs::Guard guard(epochs_, threads_.id());
  uint64_t total = 0;
  for (uint64_t s = 0; s < nshards_; ++s) {
    uint64_t packed = shards_[s].packed.load(std::memory_order_acquire);
    const Bucket* b0 = shard_buckets(packed);
    for (uint64_t i = 0; i < packed_count(packed); ++i) total += f(reported_meta(b0[i]));
  }
  return total;
}

uint64_t TurboHash::size() const {
  return sum_over_buckets([](uint64_t m) { return std::popcount(Bucket::live(m)); });
}

// Deleted slots in the whole table now (a walk of the metadata words, as size()).
uint64_t TurboHash::deleted_slots_now() const {
  return sum_over_buckets(
      [](uint64_t m) { return std::popcount(Bucket::deleted(m) & Bucket::valid(m)); });
}

uint64_t TurboHash::capacity_slots() const {
  uint64_t total = 0;
  for (uint64_t s = 0; s < nshards_; ++s)
    total += packed_count(shards_[s].packed.load(std::memory_order_relaxed)) * kSlots;
  return total;
}

uint64_t TurboHash::dram_bytes() const {
  return nshards_ * sizeof(ShardMirror) + pm::ThreadRegistry::kMaxThreads * sizeof(ThreadStats);
}

void TurboHash::counters(std::map<std::string, double>* out) const {
  uint64_t pr = 0, pp = 0, nr = 0, np = 0, rs = 0, mv = 0, rt = 0, gr = 0, gd = 0, gf = 0;
  for (unsigned t = 0; t < threads_.high_water(); ++t) {
    pr += tstats_[t].pos_reads.load(std::memory_order_relaxed);
    pp += tstats_[t].pos_probes.load(std::memory_order_relaxed);
    nr += tstats_[t].neg_reads.load(std::memory_order_relaxed);
    np += tstats_[t].neg_probes.load(std::memory_order_relaxed);
    rs += tstats_[t].resizes.load(std::memory_order_relaxed);
    mv += tstats_[t].moved.load(std::memory_order_relaxed);
    rt += tstats_[t].retries.load(std::memory_order_relaxed);
    gr += tstats_[t].gc_rehashes.load(std::memory_order_relaxed);
    gd += tstats_[t].gc_dropped.load(std::memory_order_relaxed);
    gf += tstats_[t].gc_fences.load(std::memory_order_relaxed);
  }
  (*out)["positive_reads"] = double(pr);  // raw sums: the bench takes per-phase deltas
  (*out)["positive_probes"] = double(pp);
  (*out)["negative_reads"] = double(nr);
  (*out)["negative_probes"] = double(np);
  (*out)["probe_distance_positive"] = pr ? double(pp) / double(pr) : 0;
  (*out)["probe_distance_negative"] = nr ? double(np) / double(nr) : 0;
  (*out)["shard_resizes"] = double(rs);
  (*out)["records_moved"] = double(mv);
  (*out)["read_retries"] = double(rt);
  (*out)["shard_gc_rehashes"] = double(gr);  // §4.6 same-size rehashes
  (*out)["gc_deleted_slots_dropped"] = double(gd);
  (*out)["gc_rehash_fences"] = double(gf);  // crash points inside them (the crash tests)
  (*out)["deleted_slots"] = double(deleted_slots_now());
  (*out)["gc"] = gc_ ? 1 : 0;
  (*out)["shards"] = double(nshards_);
  // The paper's (and its public code's) load factor divides by 13 slots per bucket: one is
  // kept for the near-place update. Stats::load_factor divides by all 14.
  (*out)["capacity_slots_paper"] = double(capacity_slots() / kSlots * (kSlots - 1));
  (*out)["simd_avx512"] = match_ == common::tag_match_avx512 ? 1 : 0;
}

bool TurboHash::check(std::string* report) const {
  pm::Epochs::Guard guard(epochs_, threads_.id());
  bool ok = true;
  auto bad = [&](const std::string& what) {
    ok = false;
    *report += "turbohash: " + what + "\n";
  };
  for (uint64_t s = 0; s < nshards_ && ok; ++s) {
    uint64_t packed = shards_[s].packed.load(std::memory_order_acquire);
    const Descriptor& d = dir_[s];
    if (d.set[d.version & 1] != packed)
      bad("shard " + std::to_string(s) + ": DRAM mirror differs from PM");
    const Bucket* b0 = shard_buckets(packed);
    uint64_t n = packed_count(packed);
    std::unordered_set<uint64_t> seen;  // key words (fixed) or item offsets' keys (variable)
    std::unordered_set<std::string> seen_keys;
    for (uint64_t i = 0; i < n; ++i) {
      const Bucket& b = b0[i];
      uint64_t m = b.meta;
      std::string where = "shard " + std::to_string(s) + " bucket " + std::to_string(i);
      if ((Bucket::valid(m) | Bucket::deleted(m)) & ~kSlotMask)
        bad(where + ": bits beyond slot 13");
      if (Bucket::deleted(m) & ~Bucket::valid(m)) bad(where + ": deleted slot that is not valid");
      if (std::popcount(Bucket::valid(m)) > kPathEndValid) bad(where + ": reserved slot used");
      for (uint32_t mask = Bucket::live(m); mask; mask &= mask - 1) {
        int pos = std::countr_zero(mask);
        const Slot& sl = b.slots[pos];
        uint64_t h = items_.slot_hash(sl.key);
        std::string key = items_.slot_key_bytes(sl);
        if (items_.variable()) {
          std::string_view k;
          if (!items_.item_key(sl.value, &k) || alloc_.block_size(sl.value) == 0) {
            bad(where + ": slot " + std::to_string(pos) + " points to no item");
            continue;
          }
          if (common::Items::hash(k) != sl.key) bad(where + ": item key does not hash to slot");
        }
        if (b.tag(pos) != static_cast<uint8_t>(h >> 32)) bad(where + ": tag mismatch");
        if (common::fast_range(h >> 32, nshards_) != s) bad(where + ": key in the wrong shard");
        if (!seen_keys.insert(key).second) bad(where + ": key stored twice");
        // Search-path invariant: every bucket between home and here is full (no path end).
        uint64_t idx = home(h, n), scope = std::min(scope_, n), dist = 0;
        for (; idx != i && dist < scope; ++dist, idx = idx + 1 == n ? 0 : idx + 1)
          if (Bucket::path_end(b0[idx].meta)) break;
        if (idx != i) bad(where + ": item beyond its search path");
      }
    }
  }
  return ok;
}

void TurboHash::for_each_reachable(const std::function<void(uint64_t off)>& fn) const {
  pm::Epochs::Guard guard(epochs_, threads_.id());  // shards may be resized and freed
  fn(root_off_);
  fn(root_->directory);
  for (uint64_t s = 0; s < nshards_; ++s)
    walk_shard(shards_[s].packed.load(std::memory_order_acquire), fn);
}

// Buckets [first, end) of the shard `packed` names; the caller holds a read-side section
// (a rehash may free them).
void TurboHash::walk_buckets(uint64_t packed, uint64_t first, uint64_t end,
                             const std::function<void(const Slot&)>& fn) const {
  const Bucket* b0 = shard_buckets(packed);
  for (uint64_t i = first; i < end; ++i)
    for (uint32_t mask = Bucket::live(reported_meta(b0[i])); mask; mask &= mask - 1)
      fn(common::load_slot(b0[i].slots[std::countr_zero(mask)]));
}

// A bucket's commit word as size() and for_each report it: a write still in flight is
// flushed (Index::size and Index::for_each fence before they answer), so they report only
// what a crash keeps (pm/publish.hpp), as get() does.
uint64_t TurboHash::reported_meta(const Bucket& b) const {
  return pm::load_flushed(pool_.persister(), &b.meta, kUnpersisted);
}

void TurboHash::for_each(const std::function<void(const Slot&)>& fn) const {
  pm::Epochs::Guard guard(epochs_, threads_.id());
  for (uint64_t s = 0; s < nshards_; ++s) {
    uint64_t packed = shards_[s].packed.load(std::memory_order_acquire);
    walk_buckets(packed, 0, packed_count(packed), fn);
  }
}

// A piece is up to kPieceBuckets buckets of a shard, its descriptor read again for each:
// what Index::for_each copies per piece stays small whatever a shard's size (a small
// capacity hint makes one shard of the whole table). Across a rehash of the shard the walk
// may miss or repeat items.
bool TurboHash::for_each_in_pieces(const std::function<void(const Slot&)>& fn,
                                   const std::function<void()>& piece_done) const {
  for (uint64_t s = 0; s < nshards_; ++s)
    walk_in_bucket_pieces(
        [&](uint64_t first) {
          pm::Epochs::Guard guard(epochs_, threads_.id());
          uint64_t packed = shards_[s].packed.load(std::memory_order_acquire);
          uint64_t n = packed_count(packed);
          walk_buckets(packed, first, std::min(first + kPieceBuckets, n), fn);
          return n;
        },
        piece_done);
  return true;
}

}  // namespace pmhash::turbohash

namespace pmhash {
namespace turbohash {
Status validate(const SchemeContext& ctx);  // validate.cpp
uint64_t items_found(const SchemeContext& ctx, uint64_t enough);
}  // namespace turbohash
extern const SchemeFactory kTurboHashFactory;
const SchemeFactory kTurboHashFactory = {
    "turbohash",
    &turbohash::TurboHash::layout,
    &turbohash::TurboHash::create,
    &turbohash::TurboHash::open,
    &turbohash::validate,
    &check_runtime<turbohash::TurboHash::Runtime, &turbohash::TurboHash::parse_runtime>,
    &turbohash::items_found,
    false};
}  // namespace pmhash
