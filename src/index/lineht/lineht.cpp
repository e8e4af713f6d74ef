#include "index/lineht/lineht.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <optional>
#include <unordered_set>
#include <vector>

#include "pm/publish.hpp"

namespace pmhash::lineht {

using common::load_word;
using common::Slot;
using common::store_word;

// Instant recovery (TurboHash §3.7): every write commits by one 8-byte store (or one
// allocator commit), so there is nothing to redo; the DRAM side is built per shard on first
// use. Opening costs O(shards) for validate()'s check of the directory, nothing per key; a
// capacity hint gives at most kHintMaxShards shards up to ~290M keys, so that cost stops
// growing with the keys.
LineHT::LineHT(SchemeContext& ctx, uint64_t root_off)
    : pool_(ctx.pool),
      alloc_(ctx.alloc),
      epochs_(ctx.epochs),
      threads_(ctx.threads),
      items_(ctx.items),
      root_off_(root_off),
      root_(ctx.pool.ptr<Root>(root_off)),
      dir_(ctx.pool.ptr<uint64_t>(root_->directory)),
      nshards_(root_->nshards),
      probe_(root_->probe),
      use_filter_(runtime_config<Runtime, &parse_runtime>(ctx).filter),
      prefetch_(runtime_config<Runtime, &parse_runtime>(ctx).prefetch),
      words_map_(nshards_ * sizeof(uint64_t)),
      locks_map_(nshards_ * sizeof(uint32_t)),
      words_(words_map_.as<std::atomic<uint64_t>>()),
      locks_(locks_map_.as<std::atomic<uint32_t>>()),
      preparing_map_(nshards_),
      preparing_(preparing_map_.as<std::atomic<uint8_t>>()),
      // Huge pages where the kernel allows: a lookup's filter line then rarely costs a TLB
      // miss too.
      filter_map_(pool_.size() / 64 * sizeof(uint64_t), /*huge=*/true),
      filter_(filter_map_.as<std::atomic<uint64_t>>()),
      tstats_(new ThreadStats[pm::ThreadRegistry::kMaxThreads]) {}

Status LineHT::parse_runtime(const common::Params& params, Runtime* out) {
  Status s = params.get_bool("lineht", "filter", true, &out->filter);
  if (s.ok()) s = params.get_bool("lineht", "prefetch", true, &out->prefetch);
  return s;
}

Status LineHT::layout(const Options& o, const common::Params& p, common::Params* layout) {
  uint64_t buckets, probe, shards;
  Status s = p.get_u64("lineht", "buckets", 64, 1, kMaxShardBuckets / 2, &buckets);
  if (s.ok()) s = p.get_u64("lineht", "probe", kDefaultProbe, 1, kMaxProbe, &probe);
  if (!s.ok()) return s;
  // Sized from the capacity hint for a load factor of kHintLoad percent, else 256 shards;
  // longer shards past kHintMaxShards unless the shape is given (a short probe fails early
  // in a long shard).
  auto shards_for = [&](uint64_t b) -> uint64_t {
    if (o.capacity_hint == 0) return 256;
    uint64_t per_shard = std::max<uint64_t>(1, b * kSlots * kHintLoad / 100);
    // (Rounded up without hint + per_shard - 1, which wraps for a hint near 2^64.)
    return o.capacity_hint / per_shard + (o.capacity_hint % per_shard != 0);
  };
  uint64_t def = shards_for(buckets);
  if (!p.has("buckets") && !p.has("shards") && !p.has("probe"))
    while (def > kHintMaxShards && buckets * 2 <= kHintMaxShardBuckets) {
      buckets *= 2;
      def = shards_for(buckets);
    }
  def = std::clamp<uint64_t>(def, 1, kMaxShards);
  s = p.get_u64("lineht", "shards", def, 1, kMaxShards, &shards);
  if (!s.ok()) return s;
  layout->set("shards", std::to_string(shards));
  layout->set("buckets", std::to_string(buckets));
  layout->set("probe", std::to_string(probe));
  return Status::Ok();
}

Status LineHT::create(SchemeContext& ctx, std::unique_ptr<Scheme>* out) {
  uint64_t nshards = 0, nbuckets = 0, probe = 0;
  if (!ctx.layout.get_u64("shards", 0, &nshards) || !ctx.layout.get_u64("buckets", 0, &nbuckets) ||
      !ctx.layout.get_u64("probe", 0, &probe) || nshards == 0 || nbuckets == 0 || probe == 0)
    return {Code::kCorrupted, "lineht: pool header lacks layout parameters"};
  pm::Allocator& a = ctx.alloc;
  const pm::Persister& p = ctx.pool.persister();
  std::vector<pm::Reservation> all;
  auto fail = [&] {
    for (auto& r : all) a.cancel(r);
    return Status(Code::kPoolFull, "pool too small for " + std::to_string(nshards) + " shards of " +
                                       std::to_string(nbuckets) + " buckets");
  };
  // A hint far beyond the pool is refused before any shard is cleared.
  if (nshards * nbuckets * sizeof(Bucket) > ctx.pool.size()) return fail();
  pm::Reservation root = a.reserve(sizeof(Root));
  if (!root) return fail();
  all.push_back(root);
  pm::Reservation dir = a.reserve(nshards * 8);
  if (!dir) return fail();
  all.push_back(dir);
  auto* d = ctx.pool.ptr<uint64_t>(dir.off);
  for (uint64_t s = 0; s < nshards; ++s) {
    pm::Reservation sh = a.reserve(nbuckets * sizeof(Bucket));
    if (!sh) return fail();
    all.push_back(sh);
    std::memset(ctx.pool.ptr<char>(sh.off), 0, nbuckets * sizeof(Bucket));
    p.flush(ctx.pool.ptr<char>(sh.off), nbuckets * sizeof(Bucket));
    d[s] = pack(nbuckets, sh.off);
  }
  p.flush(d, nshards * 8);
  auto* r = ctx.pool.ptr<Root>(root.off);
  *r = Root{kRootMagic, nshards, probe, dir.off, {0, 0, 0, 0}};
  p.flush(r, sizeof(Root));
  publish_new_root(ctx, all, root.off);
  auto t = std::make_unique<LineHT>(ctx, root.off);
  t->fresh_ = true;  // empty: its live count is the inserts minus the removes
  *out = std::move(t);
  return Status::Ok();
}

Status LineHT::open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  if (r == nullptr) return {Code::kCorrupted, "lineht: root object missing or damaged"};
  if (r->nshards == 0 || r->nshards > kMaxShards || r->probe == 0 || r->probe > kMaxProbe ||
      ctx.alloc.block_size(r->directory) < r->nshards * 8)
    return {Code::kCorrupted, "lineht: shard directory missing or damaged"};
  // Every shard word was checked by validate(), which runs before every open.
  *out = std::make_unique<LineHT>(ctx, ctx.pool.root());
  // Variable format: items are allocated and freed without a log (pm::Allocator::mark /
  // unmark), so after a crash the blocks no slot reaches are freed — a walk of every slot,
  // the price of log-free variable writes. The fixed format allocates only in resizes
  // (logged): its open stays O(shards).
  if (!clean && ctx.items.variable()) sweep_after_crash(ctx, **out);
  return Status::Ok();
}

LineHT::Hashed LineHT::hashed(std::string_view key) const {
  uint64_t h = common::Items::hash(key);
  return {h, items_.key_word(key, h), shard_of_hash(h), tag_of(h)};
}

// The filter of a shard from its PM buckets (its first use since open): each live slot's
// tag, and for each home bucket the longest distance one of its keys lies from it. No reader
// reads these words before the shard's DRAM word is set.
void LineHT::build_filter(const Shard& v) const {
  uint64_t n = v.n;
  for (uint64_t i = 0; i < n; ++i) v.f[i].store(0, std::memory_order_relaxed);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t m = v.b0[i].load_meta();
    for (uint32_t mask = Bucket::valid(m); mask; mask &= mask - 1) {
      int pos = std::countr_zero(mask);
      uint64_t h = items_.slot_hash(load_word(v.b0[i].slots[pos].key));
      v.f[i].store(Filter::with_slot(v.word(i), pos, tag_of(h)), std::memory_order_relaxed);
      uint64_t hm = home(h, n), dist = (i + n - hm) % n, hw = v.word(hm);
      if (dist > Filter::reach(hw))
        v.f[hm].store(Filter::with_reach(hw, uint32_t(dist)), std::memory_order_relaxed);
    }
  }
}

LineHT::Shard LineHT::locked_view(uint32_t shard) {
  uint64_t w = words_[shard].load(std::memory_order_acquire);
  if (w == 0) {
    w = load_word(dir_[shard]);
    build_filter(shard_of(w));
    words_[shard].store(w, std::memory_order_release);  // the filter first, then the word
  }
  return shard_of(w);
}

LineHT::Shard LineHT::view(uint32_t shard) {
  uint64_t w = words_[shard].load(std::memory_order_acquire);
  if (w != 0) return shard_of(w);
  Locked lock(locks_[shard]);  // once per shard and open
  return locked_view(shard);
}

// Optimistic read of one bucket (TurboHash Algorithm 1 on one line): the candidate slots
// between two loads of the commit word. Returns the slot holding the key, or -1.
int LineHT::read_bucket(const Bucket& b, uint32_t candidates, const Hashed& k, std::string_view key,
                        std::string* value) const {
  ThreadStats& ts = tstats_[threads_.id()];
  for (;;) {
    uint64_t m1 = b.load_meta();
    int hit = -1;
    bool readable = true;
    for (uint32_t mask = candidates & Bucket::valid(m1); mask && hit < 0; mask &= mask - 1) {
      int pos = std::countr_zero(mask);
      uint64_t kw = load_word(b.slots[pos].key), vw = load_word(b.slots[pos].value);
      if (!items_.matches(kw, vw, key, k.kw)) continue;
      hit = pos;
      readable = items_.read_value(vw, value);
    }
    if (b.load_meta() != m1) {
      bump(ts.retries);
      continue;
    }
    // A consistent snapshot names an item that cannot be parsed: a damaged pool. Report the
    // key absent rather than retry forever (check() names the slot).
    if (!readable) hit = -1;
    // A write in flight: persist what we act on, a hit or a miss (a delete's cleared bit)
    // alike (link-and-persist, pm/publish.hpp).
    if (m1 & kUnpersisted) pool_.persister().persist(&b, sizeof b);
    return hit;
  }
}

// Lock-free: the filter words of the probe sequence, then only the PM lines whose tags
// match (one line for a hit, none for a miss but for a 16-bit tag collision).
Status LineHT::get(std::string_view key, std::string* value) {
  Hashed k = hashed(key);
  ThreadStats& ts = tstats_[threads_.id()];
  pm::Epochs::Guard guard(epochs_);
  Shard v = view(k.shard);  // the dense directory: a cache hit in the common case
  bump(ts.reads);
  if (!use_filter_) return get_unfiltered(v, k, key, value);
  uint64_t hm = home(k.h, v.n);
  // (Index::get prefetched the home PM line and filter word: LineHT::prefetch_key.)
  uint64_t reach = Filter::reach(v.word(hm));
  for (uint64_t d = 0, j = hm; d <= reach; ++d, j = j + 1 == v.n ? 0 : j + 1) {
    uint32_t candidates = Filter::match(v.word(j), k.tag);
    if (candidates == 0) continue;
    bump(ts.pm_reads);
    if (j != hm) bump(ts.off_home);
    if (read_bucket(v.b0[j], candidates, k, key, value) >= 0) {
      count_lookup(ts, v, hm, d, true);
      return Status::Ok();
    }
  }
  count_lookup(ts, v, hm, reach, false);
  return Status::KeyNotFound();
}

// A lookup read the filter words of buckets hm .. hm + last (wrapping at the shard's end):
// count them and the DRAM lines they lie in (8 words per line: the filter array is
// page-aligned), the exact read cost docs/schemes/lineht.md reports.
void LineHT::count_lookup(ThreadStats& ts, const Shard& v, uint64_t hm, uint64_t last,
                          bool hit) const {
  auto lines = [](uint64_t a, uint64_t b) { return b / 8 - a / 8 + 1; };  // words a..b
  uint64_t base = uint64_t(v.f - filter_), n;
  if (hm + last < v.n) {
    n = lines(base + hm, base + hm + last);
  } else {  // words hm .. v.n-1 and 0 .. e, disjoint (last < v.n); one line may hold both
    uint64_t e = hm + last - v.n;
    n = lines(base + hm, base + v.n - 1) + lines(base, base + e) -
        uint64_t((base + e) / 8 == (base + hm) / 8);
  }
  bump(ts.filter_words, last + 1);
  bump(ts.filter_lines, n);
  if (!hit) return;
  bump(ts.hits);
  bump(ts.hit_distance, last);
}

// Without the filter (run-time `filter=off`, to measure what it buys): every bucket of the
// probe sequence is read from PM.
Status LineHT::get_unfiltered(const Shard& v, const Hashed& k, std::string_view key,
                              std::string* value) {
  ThreadStats& ts = tstats_[threads_.id()];
  for (uint64_t d = 0, j = home(k.h, v.n); d < probe(v.n); ++d, j = j + 1 == v.n ? 0 : j + 1) {
    bump(ts.pm_reads);
    if (read_bucket(v.b0[j], kValidMask, k, key, value) >= 0) return Status::Ok();
  }
  return Status::KeyNotFound();
}

// Writers hold the shard's lock: PM and the filter agree, no validation needed.
LineHT::Place LineHT::find_locked(const Shard& v, const Hashed& k, std::string_view key) const {
  uint64_t hm = home(k.h, v.n), reach = Filter::reach(v.word(hm));
  for (uint64_t d = 0, j = hm; d <= reach; ++d, j = j + 1 == v.n ? 0 : j + 1)
    for (uint32_t mask = Filter::match(v.word(j), k.tag); mask; mask &= mask - 1) {
      int pos = std::countr_zero(mask);
      const Slot& s = v.b0[j].slots[pos];
      if (items_.matches(s.key, s.value, key, k.kw)) return {j, pos};
    }
  return {};
}

// Linear probing over buckets: the first bucket with a free slot within the probe bound.
LineHT::Place LineHT::free_slot(const Shard& v, uint64_t hm) const {
  for (uint64_t d = 0, j = hm; d < probe(v.n); ++d, j = j + 1 == v.n ? 0 : j + 1) {
    uint32_t f = ~Filter::valid(v.word(j)) & kValidMask;
    if (f) return {j, std::countr_zero(f)};
  }
  return {};
}

// Slot words, then the commit word in the same line: one flush, one fence (SmartHT's
// merged flush; the commit is WOPHI's single 8-byte store). The filter follows the commit.
Status LineHT::insert_at(const Shard& v, const Hashed& k, Place at, std::string_view key,
                         std::string_view value) {
  common::Items::New item;
  Status s = items_.write(key, value, k.kw, &item);  // variable: item and its bit flushed
  if (!s.ok()) return s;
  const pm::Persister& p = pool_.persister();
  Bucket& b = v.b0[at.j];
  bool reorder = PMHASH_MUTATION(pool_, kMutationCommitBeforeSlot);
  if (!reorder) {
    store_word(b.slots[at.pos].key, item.key_word);
    store_word(b.slots[at.pos].value, item.value_word);
  }
  uint64_t m = b.load_meta();
  uint64_t nm = Bucket::next(m, Bucket::valid(m) | (1u << at.pos));
  // Log-free allocation (pm::Allocator::mark): the item and its allocation bit persist
  // before the commit word can; a crash before the commit leaves a block the sweep frees.
  if (items_.variable()) p.fence();
  p.line_order(&b);
  pm::publish_persisted(p, &b.meta, nm, kUnpersisted);
  if (reorder) {
    store_word(b.slots[at.pos].key, item.key_word);
    store_word(b.slots[at.pos].value, item.value_word);
    p.persist(&b, sizeof b);
  }
  v.set(at.j, Filter::with_slot(v.word(at.j), at.pos, k.tag));
  uint64_t hm = home(k.h, v.n), dist = (at.j + v.n - hm) % v.n, hw = v.word(hm);
  if (dist > Filter::reach(hw)) v.set(hm, Filter::with_reach(hw, uint32_t(dist)));
  bump(tstats_[threads_.id()].inserts);
  return Status::Ok();
}

// The value word in place, inside a marked commit word (a reader that meets the mark
// persists the line before it returns): one flush, one fence. Variable: the new item and
// its allocation bit are fenced first, and the old item is unmarked once the line is
// persisted (the recovery sweep frees whichever of the two a crash left unreachable).
Status LineHT::update_at(const Shard& v, const Hashed& k, Place at, std::string_view key,
                         std::string_view value) {
  common::Items::New item;
  Status s = items_.write(key, value, k.kw, &item);
  if (!s.ok()) return s;
  Bucket& b = v.b0[at.j];
  uint64_t old = b.slots[at.pos].value;
  if (items_.variable()) pool_.persister().fence();
  uint64_t m = b.load_meta(), nm = Bucket::next(m, Bucket::valid(m));
  std::atomic_ref<uint64_t> meta(b.meta);
  meta.store(nm | kUnpersisted, std::memory_order_release);
  store_word(b.slots[at.pos].value, item.value_word);
  pool_.persister().persist(&b, sizeof b);
  meta.store(nm, std::memory_order_release);
  items_.retire(old);
  return Status::Ok();
}

// Before a get or a write (Index calls it first): the key's home PM line and its filter
// word, so that their misses overlap the previous call's fence, the API's checks and the
// shard lock instead of following them (a hit in the home bucket then costs one miss). The shard
// word may be stale (a resize, or not yet built): then the prefetch is wasted, never wrong; a
// prefetch never faults.
void LineHT::prefetch_key(std::string_view key) const {
  if (!prefetch_) return;
  uint64_t h = common::Items::hash(key);
  uint64_t w = words_[shard_of_hash(h)].load(std::memory_order_relaxed);
  if (w == 0) return;
  Shard v = shard_of(w);
  uint64_t hm = home(h, v.n);
  __builtin_prefetch(&v.b0[hm], 1);
  __builtin_prefetch(&v.f[hm], 1);
}

// Under the shard's lock, but for a resize's preparation: a shard without a free slot in the
// key's probe sequence resizes into a spare bucket array that one writer reserved and faulted
// in while the lock was released (a resize into fresh pool pages otherwise spent most of its
// time in page faults with the lock held, while the shard's other writers waited;
// docs/schemes/lineht.md "Growing from empty (session 15)").
Status LineHT::put(std::string_view key, std::string_view value, PutMode mode) {
  Hashed k = hashed(key);
  Spare spare(alloc_);
  for (;;) {
    uint64_t full;  // the bucket count of the shard found full
    {
      Locked lock(locks_[k.shard]);
      Shard v = locked_view(k.shard);
      Place at = find_locked(v, k, key);
      if (at.found()) {
        if (mode == PutMode::kInsert) return {Code::kAlreadyExists, "key already exists"};
        return update_at(v, k, at, key, value);
      }
      if (mode == PutMode::kUpdate) return Status::KeyNotFound();
      at = free_slot(v, home(k.h, v.n));
      if (at.found()) return insert_at(v, k, at, key, value);
      if (spare.tried) {  // look again, all under the lock: the shard may have changed
        Status s = resize(k.shard, &spare.r);
        if (!s.ok()) return s;
        continue;
      }
      full = v.n;
    }
    if (claim_spare(spare, k.shard)) {
      Status s = prepare_spare(spare, 2 * full);
      if (!s.ok()) return s;
    }
  }
}

// One writer per shard prepares a spare: a spare per waiting writer held pool space that the
// resize then lacked (kPoolFull with room in the pool; helper-19's review). The others wait
// until it has resized or given up, then look again.
bool LineHT::claim_spare(Spare& spare, uint32_t shard) {
  std::atomic<uint8_t>& flag = preparing_[shard];
  uint8_t free = 0;
  if (flag.compare_exchange_strong(free, 1, std::memory_order_acquire)) {
    spare.claim = &flag;
    return true;
  }
  common::wait_while_set(flag);
  return false;
}

// Without the shard's lock: the array for `buckets` buckets reserved (nothing is published;
// a crash leaves the block free) and its pool pages faulted in. A sparse pool whose file
// system cannot back those pages is full: refused here, instead of the resize's copy into
// them raising SIGBUS.
Status LineHT::prepare_spare(Spare& spare, uint64_t buckets) {
  spare.tried = true;
  if (buckets > kMaxShardBuckets) return Status::Ok();  // resize() reports it
  spare.r = alloc_.reserve(buckets * sizeof(Bucket));
  if (!spare.r) return Status::Ok();  // resize() tries again, and reports kPoolFull
  spare.held = &spares_held_;
  int held = spares_held_.fetch_add(1, std::memory_order_relaxed) + 1;
  for (int m = spares_held_max_.load(std::memory_order_relaxed); held > m;)
    if (spares_held_max_.compare_exchange_weak(m, held, std::memory_order_relaxed)) break;
  PMHASH_CHAOS();  // tests: a wider window in which other writers find the shard full too
  if (!common::prefault_pages(pool_.ptr<char>(spare.r.off), spare.r.size)) {
    int err = errno;
    alloc_.cancel(spare.r);
    spare.r = {};
    return {Code::kPoolFull, std::string("the pool's file system cannot back its pages (") +
                                 std::strerror(err) +
                                 "); the file is sparse: Options::prefault reserves every page "
                                 "at open"};
  }
  bump(tstats_[threads_.id()].spares);
  return Status::Ok();
}

// The valid bit cleared and the sequence advanced in one 8-byte store, persisted before the
// filter forgets the slot (the reach stays: it only shrinks when the shard is rebuilt).
Status LineHT::remove(std::string_view key) {
  Hashed k = hashed(key);
  Locked lock(locks_[k.shard]);
  Shard v = locked_view(k.shard);
  Place at = find_locked(v, k, key);
  if (!at.found()) return Status::KeyNotFound();
  Bucket& b = v.b0[at.j];
  uint64_t m = b.load_meta(), nm = Bucket::next(m, Bucket::valid(m) & ~(1u << at.pos));
  pm::publish_persisted(pool_.persister(), &b.meta, nm, kUnpersisted);
  items_.retire(b.slots[at.pos].value);  // unpublished and persisted; reuse epoch-deferred
  v.set(at.j, Filter::without_slot(v.word(at.j), at.pos));
  bump(tstats_[threads_.id()].removes);
  return Status::Ok();
}

// A resize's placement of one slot into a DRAM bucket array `b0` of n buckets and its filter
// words `fw` (its tag, and its home's reach), the hash computed once for both.
bool LineHT::place(Bucket* b0, uint64_t* fw, uint64_t n, const Slot& s) const {
  uint64_t h = items_.slot_hash(s.key), hm = home(h, n);
  for (uint64_t d = 0, j = hm; d < probe(n); ++d, j = j + 1 == n ? 0 : j + 1) {
    int pos = Bucket::free_slot(b0[j].meta);
    if (pos < 0) continue;
    b0[j].slots[pos] = s;
    b0[j].meta = Bucket::make(Bucket::valid(b0[j].meta) | (1u << pos), 0);
    fw[j] = Filter::with_slot(fw[j], pos, tag_of(h));
    if (d > Filter::reach(fw[hm])) fw[hm] = Filter::with_reach(fw[hm], uint32_t(d));
    return true;
  }
  return false;
}

// TurboHash §3.5, one shard at a time: its live items placed into a shard of twice the
// buckets in DRAM, written to PM sequentially and persisted; the new view is published to
// readers, then the directory word, the allocation and the old shard's free commit at once.
// Readers still on the old shard keep reading it and its filter (both unchanged) until their
// grace period ends: only then can the allocator hand its block, and so its filter words, out.
Status LineHT::resize(uint32_t shard, pm::Reservation* spare) {
  Shard old = shard_of(words_[shard].load(std::memory_order_relaxed));
  std::vector<Slot> live;
  live.reserve(old.n * kSlots);
  for (uint64_t i = 0; i < old.n; ++i) {
    const Bucket& b = old.b0[i];
    for (uint32_t mask = Bucket::valid(b.meta); mask; mask &= mask - 1)
      live.push_back(b.slots[std::countr_zero(mask)]);
  }
  double shard_lf = double(live.size()) / double(old.n * kSlots);
  double table_lf = first_resize_table_lf_.load(std::memory_order_relaxed) < 0
                        ? table_load_factor()  // before this resize changes the capacity
                        : -1;
  std::vector<Bucket> nb;
  std::vector<uint64_t> fw;  // its filter words
  uint64_t nn = old.n * 2;
  for (;; nn *= 2) {
    if (nn > kMaxShardBuckets)
      return {Code::kPoolFull, "lineht: shard " + std::to_string(shard) + " cannot grow further"};
    nb.assign(nn, Bucket{});
    fw.assign(nn, 0);
    bool ok = true;
    for (const Slot& s : live)
      if (!(ok = place(nb.data(), fw.data(), nn, s))) break;
    if (ok) break;
  }
  pm::Reservation r;
  if (*spare && spare->size >= nn * sizeof(Bucket)) {
    std::swap(r, *spare);
    bump(tstats_[threads_.id()].spares_used);
  }
  if (!r) r = alloc_.reserve(nn * sizeof(Bucket));
  if (!r) return {Code::kPoolFull, "cannot resize a shard to " + std::to_string(nn) + " buckets"};
  const pm::Persister& p = pool_.persister();
  p.nt_copy(pool_.ptr<char>(r.off), nb.data(), nn * sizeof(Bucket));
  p.fence();
  // The new array's filter words (no reader can be reading them: the array's block was free
  // for a grace period).
  Shard v = shard_of(pack(nn, r.off));
  for (uint64_t i = 0; i < nn; ++i) v.f[i].store(fw[i], std::memory_order_relaxed);
  words_[shard].store(pack(nn, r.off), std::memory_order_release);  // the filter first
  pm::Tx tx(alloc_);
  tx.publish(r);
  tx.store(&dir_[shard], pack(nn, r.off));
  tx.free(packed_offset(old.packed));  // reused one grace period later (Allocator::on_free)
  tx.commit();
  count_resize(tstats_[threads_.id()], shard_lf, table_lf, live.size());
  return Status::Ok();
}

void LineHT::count_resize(ThreadStats& ts, double shard_lf, double table_lf, uint64_t moved) {
  bump(ts.resizes);
  bump(ts.moved, moved);
  ts.resize_lf_sum.store(ts.resize_lf_sum.load(std::memory_order_relaxed) + shard_lf,
                         std::memory_order_relaxed);
  if (shard_lf < ts.resize_lf_min.load(std::memory_order_relaxed))
    ts.resize_lf_min.store(shard_lf, std::memory_order_relaxed);
  double none = -1;  // the first resize of the table records it, once
  if (table_lf >= 0) first_resize_table_lf_.compare_exchange_strong(none, table_lf);
}

// The table's live slots over its slots, from the inserts and removes counted since it was
// created (exact with one thread; other threads' counts may lag by their operations in
// flight). No PM walk: only the shard words are read.
double LineHT::table_load_factor() const {
  if (!fresh_) return -1;
  uint64_t live = 0, buckets = 0;
  for (unsigned t = 0; t < threads_.high_water(); ++t)
    live += tstats_[t].inserts.load(std::memory_order_relaxed) -
            tstats_[t].removes.load(std::memory_order_relaxed);
  for (uint64_t s = 0; s < nshards_; ++s) buckets += packed_count(current(s));
  return double(live) / double(buckets * kSlots);
}

// The shard's current bucket array (the DRAM word, or the directory's before first use).
uint64_t LineHT::current(uint64_t s) const {
  uint64_t w = words_[s].load(std::memory_order_acquire);
  return w != 0 ? w : load_word(dir_[s]);
}

uint64_t LineHT::size() const {
  pm::Epochs::Guard guard(epochs_);  // shards may be resized and freed
  uint64_t total = 0;
  for (uint64_t s = 0; s < nshards_; ++s) {
    uint64_t packed = current(s);
    const Bucket* b0 = buckets(packed);
    for (uint64_t i = 0; i < packed_count(packed); ++i)
      total += std::popcount(Bucket::valid(reported_meta(b0[i])));
  }
  return total;
}

uint64_t LineHT::capacity_slots() const {
  pm::Epochs::Guard guard(epochs_);
  uint64_t total = 0;
  for (uint64_t s = 0; s < nshards_; ++s) total += packed_count(current(s)) * kSlots;
  return total;
}

uint64_t LineHT::dram_bytes() const {
  pm::Epochs::Guard guard(epochs_);
  uint64_t total = nshards_ * (sizeof(uint64_t) + sizeof(uint32_t) + sizeof(uint8_t));
  for (uint64_t s = 0; s < nshards_; ++s) {
    uint64_t w = words_[s].load(std::memory_order_acquire);
    if (w != 0) total += packed_count(w) * sizeof(uint64_t);  // the filter words in use
  }
  return total;
}

void LineHT::counters(std::map<std::string, double>* out) const {
  uint64_t rd = 0, pr = 0, rs = 0, mv = 0, rt = 0, fw = 0, fl = 0, oh = 0, hits = 0, hd = 0;
  uint64_t sp = 0, spu = 0;
  double lf_sum = 0, lf_min = 1;
  for (unsigned t = 0; t < threads_.high_water(); ++t) {
    const ThreadStats& ts = tstats_[t];
    rd += ts.reads.load(std::memory_order_relaxed);
    pr += ts.pm_reads.load(std::memory_order_relaxed);
    rs += ts.resizes.load(std::memory_order_relaxed);
    mv += ts.moved.load(std::memory_order_relaxed);
    rt += ts.retries.load(std::memory_order_relaxed);
    sp += ts.spares.load(std::memory_order_relaxed);
    spu += ts.spares_used.load(std::memory_order_relaxed);
    fw += ts.filter_words.load(std::memory_order_relaxed);
    fl += ts.filter_lines.load(std::memory_order_relaxed);
    oh += ts.off_home.load(std::memory_order_relaxed);
    hits += ts.hits.load(std::memory_order_relaxed);
    hd += ts.hit_distance.load(std::memory_order_relaxed);
    lf_sum += ts.resize_lf_sum.load(std::memory_order_relaxed);
    lf_min = std::min(lf_min, ts.resize_lf_min.load(std::memory_order_relaxed));
  }
  (*out)["reads"] = double(rd);  // raw sums: the bench takes per-phase deltas
  (*out)["pm_lines_read"] = double(pr);
  (*out)["pm_lines_per_read"] = rd ? double(pr) / double(rd) : 0;
  (*out)["filter_words_read"] = double(fw);  // filtered lookups only (filter=on)
  (*out)["filter_lines_read"] = double(fl);
  (*out)["pm_lines_off_home"] = double(oh);
  (*out)["read_hits"] = double(hits);
  (*out)["hit_distance"] = double(hd);  // buckets from home, summed over hits
  (*out)["shard_resizes"] = double(rs);
  (*out)["records_moved"] = double(mv);
  (*out)["resize_spares"] = double(sp);        // arrays reserved before taking the lock
  (*out)["resize_spares_used"] = double(spu);  // the rest were given back
  (*out)["resize_spares_max_held"] = double(spares_held_max_.load(std::memory_order_relaxed));
  (*out)["resize_lf_sum"] = lf_sum;  // a phase's mean: d.resize_lf_sum / d.shard_resizes
  (*out)["resize_lf_mean"] = rs ? lf_sum / double(rs) : 0;
  (*out)["resize_lf_min"] = rs ? lf_min : 0;
  double first = first_resize_table_lf_.load(std::memory_order_relaxed);
  if (first >= 0) (*out)["table_lf_first_resize"] = first;
  (*out)["read_retries"] = double(rt);
  (*out)["shards"] = double(nshards_);
}

bool LineHT::check_shard(uint64_t s, std::string* report) const {
  bool ok = true;
  auto bad = [&](const std::string& what) {
    ok = false;
    *report += "lineht: shard " + std::to_string(s) + ": " + what + "\n";
  };
  uint64_t w = words_[s].load(std::memory_order_acquire);
  uint64_t packed = load_word(dir_[s]);
  if (w != 0 && w != packed) bad("DRAM shard word differs from the directory");
  std::optional<Shard> v;
  if (w != 0) v = shard_of(w);
  const Bucket* b0 = buckets(packed);
  uint64_t n = packed_count(packed);
  std::unordered_set<std::string> seen;
  for (uint64_t i = 0; i < n && ok; ++i) {
    uint64_t m = b0[i].load_meta();
    std::string where = "bucket " + std::to_string(i);
    if (m & 0xFFFF'FFFFull & ~(kValidMask | kUnpersisted)) bad(where + ": stray metadata bits");
    if (v && Filter::valid(v->word(i)) != Bucket::valid(m))
      bad(where + ": filter valid bits differ from PM");
    for (uint32_t mask = Bucket::valid(m); mask; mask &= mask - 1) {
      int pos = std::countr_zero(mask);
      const Slot& sl = b0[i].slots[pos];
      std::string at = where + " slot " + std::to_string(pos);
      if (items_.variable()) {
        std::string_view k;
        if (!items_.item_key(sl.value, &k) || alloc_.block_size(sl.value) == 0) {
          bad(at + ": points to no item");
          continue;
        }
        if (common::Items::hash(k) != sl.key) bad(at + ": item key does not hash to slot");
      }
      uint64_t h = items_.slot_hash(sl.key), hm = home(h, n), dist = (i + n - hm) % n;
      if (shard_of_hash(h) != s) bad(at + ": key in the wrong shard");
      if (dist >= probe(n)) bad(at + ": key beyond its probe sequence");
      if (!seen.insert(items_.slot_key_bytes(sl)).second) bad(at + ": key stored twice");
      if (!v) continue;
      if (Filter::tag(v->word(i), pos) != tag_of(h)) bad(at + ": filter tag mismatch");
      if (Filter::reach(v->word(hm)) < dist) bad(at + ": beyond its home bucket's reach");
    }
  }
  return ok;
}

bool LineHT::check(std::string* report) const {
  pm::Epochs::Guard guard(epochs_);
  bool ok = true;
  for (uint64_t s = 0; s < nshards_; ++s) ok = check_shard(s, report) && ok;
  return ok;
}

void LineHT::for_each_reachable(const std::function<void(uint64_t off)>& fn) const {
  pm::Epochs::Guard guard(epochs_);  // shards may be resized and freed
  fn(root_off_);
  fn(root_->directory);
  for (uint64_t s = 0; s < nshards_; ++s) {
    uint64_t packed = current(s);
    fn(packed_offset(packed));
    if (!items_.variable()) continue;
    const Bucket* b0 = buckets(packed);
    for (uint64_t i = 0; i < packed_count(packed); ++i)
      for (uint32_t mask = Bucket::valid(b0[i].load_meta()); mask; mask &= mask - 1)
        fn(load_word(b0[i].slots[std::countr_zero(mask)].value));
  }
}

// Buckets [first, end) of the shard array `packed` names; the caller holds a read-side
// section (a resize may free the array).
void LineHT::walk_buckets(uint64_t packed, uint64_t first, uint64_t end,
                          const std::function<void(const Slot&)>& fn) const {
  const Bucket* b0 = buckets(packed);
  for (uint64_t i = first; i < end; ++i)
    for (uint32_t mask = Bucket::valid(reported_meta(b0[i])); mask; mask &= mask - 1)
      fn(common::load_slot(b0[i].slots[std::countr_zero(mask)]));
}

// A bucket's commit word as size() and for_each report it: a write still in flight is
// flushed (Index::size and Index::for_each fence before they answer), so they report only
// what a crash keeps (pm/publish.hpp), as get() does.
uint64_t LineHT::reported_meta(const Bucket& b) const {
  return pm::load_flushed(pool_.persister(), &b.meta, kUnpersisted);
}

void LineHT::for_each(const std::function<void(const Slot&)>& fn) const {
  pm::Epochs::Guard guard(epochs_);
  for (uint64_t s = 0; s < nshards_; ++s) {
    uint64_t packed = current(s);
    walk_buckets(packed, 0, packed_count(packed), fn);
  }
}

// A piece is up to kPieceBuckets buckets of a shard, its word read again for each: what
// Index::for_each copies per piece stays small whatever a shard's size (one shard may hold
// the whole table). Across a resize of the shard the walk may miss or repeat items.
bool LineHT::for_each_in_pieces(const std::function<void(const Slot&)>& fn,
                                const std::function<void()>& piece_done) const {
  for (uint64_t s = 0; s < nshards_; ++s)
    walk_in_bucket_pieces(
        [&](uint64_t first) {
          pm::Epochs::Guard guard(epochs_);
          uint64_t packed = current(s), n = packed_count(packed);
          walk_buckets(packed, first, std::min(first + kPieceBuckets, n), fn);
          return n;
        },
        piece_done);
  return true;
}

}  // namespace pmhash::lineht

namespace pmhash {
namespace lineht {
Status validate(const SchemeContext& ctx);  // validate.cpp
uint64_t items_found(const SchemeContext& ctx, uint64_t enough);
}  // namespace lineht
extern const SchemeFactory kLineHTFactory;
const SchemeFactory kLineHTFactory = {
    "lineht",
    &lineht::LineHT::layout,
    &lineht::LineHT::create,
    &lineht::LineHT::open,
    &lineht::validate,
    &check_runtime<lineht::LineHT::Runtime, &lineht::LineHT::parse_runtime>,
    &lineht::items_found,
    false};  // open stays instant: at least one item when the record says non-empty
}  // namespace pmhash
