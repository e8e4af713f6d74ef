#include "index/smartht/smartht.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <vector>

namespace pmhash::smartht {

using common::BloomFilter;
using common::Slot;

namespace {
constexpr double kTargetFpr = 1e-4;  // §III-B1
constexpr int kHashes = 3;           // §III-B1: three hash functions
// A filter rebuilt because deleted keys filled it is sized for the live keys plus
// 1/kChurnHeadroom of them (resized_capacity).
constexpr uint64_t kChurnHeadroom = 4;

uint64_t pow2_at_least(uint64_t x) {
  uint64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}
}  // namespace

Status SmartHT::parse_runtime(const common::Params& params, Runtime* out) {
  Status s = params.get_bool("smartht", "filter", true, &out->filter);
  if (s.ok())  // Table I rebuilds with one thread; by default we use every core
    s = params.get_u64("smartht", "recovery_threads",
                       std::max(1u, std::thread::hardware_concurrency()), 1, 256,
                       &out->recovery_threads);
  return s;
}

SmartHT::SmartHT(SchemeContext& ctx, uint64_t root_off, Start start)
    : pool_(ctx.pool),
      alloc_(ctx.alloc),
      epochs_(ctx.epochs),
      threads_(ctx.threads),
      items_(ctx.items),
      root_off_(root_off),
      root_(ctx.pool.ptr<Root>(root_off)),
      nstripes_((root_->nheads + root_->stripe - 1) / root_->stripe),
      stripes_(new Stripe[nstripes_]),
      use_filter_(runtime_config<Runtime, &parse_runtime>(ctx).filter),
      recovery_threads_(runtime_config<Runtime, &parse_runtime>(ctx).recovery_threads),
      tstats_(new ThreadStats[pm::ThreadRegistry::kMaxThreads]) {
  uint64_t cap = 0;
  ctx.layout.get_u64("filter_keys", 1u << 20, &cap);
  initial_capacity_ = std::max<uint64_t>(cap, 1024);
  sized_for_.store(initial_capacity_, std::memory_order_relaxed);  // the expected keys
  if (start == Start::kFresh) {
    if (use_filter_) filter_.store(make_filter(initial_capacity_));
    counts_valid_ = true;
    return;
  }
  bool loaded = start == Start::kCleanReopen && load_saved_filter();
  // §III-D: "changes the nonCrashed flag to 0 upon successful recovery". From here on the
  // saved copy can go stale; only a complete save at close() marks it valid again.
  invalidate_saved_filter();
  // After a crash, or a close that saved no current filter, the VFL is rebuilt from the
  // PDL in the background; searches bypass it until it is ready (lazy recovery).
  if (!loaded) start_rebuilder()->wake();
}

SmartHT::~SmartHT() {
  stop();
  free_filter(*filters_, filter_.load());
  free_filter(*filters_, building_.load());
}

// Null when the kernel has no memory for it (counted in `filter_no_memory`): the table then
// does without the filter, as while one is rebuilt, so lookups read PM (never a false
// negative) — a filter only saves reads; the data does not depend on it.
BloomFilter* SmartHT::make_filter(uint64_t capacity) {
  return adopt_filter(
      BloomFilter::create(BloomFilter::bits_for(capacity, kTargetFpr, kHashes), capacity, kHashes));
}

BloomFilter* SmartHT::adopt_filter(std::unique_ptr<BloomFilter> f) {
  if (f == nullptr) {
    filter_no_memory_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  filters_->alive.fetch_add(1, std::memory_order_relaxed);
  filters_->bytes.fetch_add(f->bytes(), std::memory_order_relaxed);
  return f.release();
}

void SmartHT::free_filter(FilterAccounting& acc, BloomFilter* f) {
  if (f == nullptr) return;
  acc.bytes.fetch_sub(f->bytes(), std::memory_order_relaxed);
  acc.alive.fetch_sub(1, std::memory_order_relaxed);
  delete f;
}

Status SmartHT::layout(const Options& o, const common::Params& p, common::Params* layout) {
  // Paper: N = 2^24 head buckets for 200M keys. Default: about 4 keys per head bucket at the
  // expected count (short chains), else 2^18 head buckets.
  // A hint past the largest table gets the largest (the pool size decides).
  constexpr uint64_t kMaxHeads = uint64_t{1} << 32, kMaxFilterKeys = uint64_t{1} << 40;
  uint64_t expected = o.capacity_hint ? o.capacity_hint : 1u << 20;
  uint64_t def_heads = pow2_at_least(std::clamp<uint64_t>(expected / 4, 1024, kMaxHeads));
  uint64_t heads, stripe, filter_keys;
  Status s = p.get_u64("smartht", "buckets", def_heads, 1, kMaxHeads, &heads);
  if (s.ok()) s = p.get_u64("smartht", "stripe", 256, 1, uint64_t{1} << 32, &stripe);
  if (s.ok())
    s = p.get_u64("smartht", "filter_keys", std::min(expected, kMaxFilterKeys), 1, kMaxFilterKeys,
                  &filter_keys);
  if (!s.ok()) return s;
  layout->set("buckets", std::to_string(heads));
  layout->set("stripe", std::to_string(stripe));
  layout->set("filter_keys", std::to_string(filter_keys));
  return Status::Ok();
}

Status SmartHT::create(SchemeContext& ctx, std::unique_ptr<Scheme>* out) {
  uint64_t heads = 0, stripe = 0;
  if (!ctx.layout.get_u64("buckets", 0, &heads) || !ctx.layout.get_u64("stripe", 0, &stripe) ||
      heads == 0 || stripe == 0)
    return {Code::kCorrupted, "smartht: pool header lacks layout parameters"};
  pm::Reservation root = ctx.alloc.reserve(sizeof(Root));
  pm::Reservation array = ctx.alloc.reserve(heads * sizeof(Bucket));
  if (!root || !array) {
    ctx.alloc.cancel(root);
    ctx.alloc.cancel(array);
    return {Code::kPoolFull, "pool too small for " + std::to_string(heads) + " head buckets"};
  }
  const pm::Persister& p = ctx.pool.persister();
  std::memset(ctx.pool.ptr<char>(array.off), 0, heads * sizeof(Bucket));
  p.flush(ctx.pool.ptr<char>(array.off), heads * sizeof(Bucket));
  *ctx.pool.ptr<Root>(root.off) = Root{kRootMagic, heads, array.off, stripe, 0, 0, {0, 0}};
  p.flush(ctx.pool.ptr<char>(root.off), sizeof(Root));
  publish_new_root(ctx, {root, array}, root.off);
  auto t = std::make_unique<SmartHT>(ctx, root.off, Start::kFresh);
  if (t->use_filter_ && t->filter_.load() == nullptr)  // Index::open removes the new pool
    return {
        Code::kInvalidArgument,
        "smartht: no memory for the Bloom filter of filter_keys=" +
            std::to_string(t->initial_capacity_) + " (" +
            std::to_string(BloomFilter::bits_for(t->initial_capacity_, kTargetFpr, kHashes) / 8) +
            " bytes of DRAM): pass a smaller filter_keys or capacity_hint"};
  *out = std::move(t);
  return Status::Ok();
}

Status SmartHT::open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out) {
  const Root* root = existing_root<Root>(ctx, kRootMagic);
  if (root == nullptr) return {Code::kCorrupted, "smartht: root object missing or damaged"};
  const Root& r = *root;
  uint64_t root_off = ctx.pool.root();
  if (r.nheads == 0 || r.stripe == 0 || ctx.alloc.block_size(r.heads) < r.nheads * sizeof(Bucket))
    return {Code::kCorrupted, "smartht: head bucket array missing or damaged"};
  *out = std::make_unique<SmartHT>(ctx, root_off, clean ? Start::kCleanReopen : Start::kAfterCrash);
  // Inserts and deletes allocate and free without a log (pm::Allocator::mark/unmark).
  if (!clean) sweep_after_crash(ctx, **out);
  return Status::Ok();
}

SmartHT::Hashed SmartHT::hashed(std::string_view key) const {
  uint64_t h = common::Items::hash(key);
  return {h, items_.key_word(key, h),
          static_cast<uint64_t>((static_cast<unsigned __int128>(h) * root_->nheads) >> 64)};
}

bool SmartHT::find(const Hashed& k, std::string_view key, Bucket** out, int* slot, bool* damaged,
                   Bucket** prev) const {
  uint64_t steps = 0;
  for (Bucket *b = head(k.head), *p = nullptr;;) {
    for (int i = 0; i < kSlots; ++i) {
      if (b->live(i) && items_.matches(b->slots[i].key, b->slots[i].value, key, k.kw)) {
        *out = b;
        *slot = i;
        if (prev != nullptr) *prev = p;
        return true;
      }
    }
    if (b->next == 0) return false;
    p = b;
    b = const_cast<Bucket*>(next_checked(b, steps++));
    if (b == nullptr) {
      *damaged = true;
      return false;
    }
  }
}

Status SmartHT::damaged_chain(uint64_t head_bucket) const {
  return {Code::kCorrupted, "smartht: the chain of head bucket " + std::to_string(head_bucket) +
                                " links a block that is not a bucket (damaged pool)"};
}

// Algorithm 2: the VFL answers negatives from DRAM; positives search the chain under the
// stripe's shared lock.
Status SmartHT::get(std::string_view key, std::string* value) {
  Hashed k = hashed(key);
  unsigned tid = threads_.id();
  ThreadStats& ts = tstats_[tid];
  bool screened = false;
  if (use_filter_) {
    pm::Epochs::Guard g(epochs_, tid);
    BloomFilter* f = filter_.load(std::memory_order_acquire);
    if (f != nullptr) {
      if (!f->may_contain(k.h)) {
        bump(ts.filter_negatives);
        return Status::KeyNotFound();
      }
      screened = true;
    }
  }
  bump(ts.pm_searches);
  std::shared_lock<std::shared_mutex> lock(stripe_of(k.head).lock);
  Bucket* b;
  int i;
  bool damaged = false;
  if (!find(k, key, &b, &i, &damaged)) {
    if (damaged) return damaged_chain(k.head);
    if (screened) bump(ts.filter_false_positives);
    return Status::KeyNotFound();
  }
  if (!items_.read_value(b->slots[i].value, value))
    return {Code::kCorrupted, "smartht: slot points to no item"};
  return Status::Ok();
}

// Algorithm 1 line 7: a free slot in the head bucket or the first chained bucket. Beyond the
// paper: when both are full, the rest of the chain too, before a new bucket is allocated
// (slots that deletes freed deeper in the chain come back; docs/schemes/smartht.md).
Bucket* SmartHT::free_slot_bucket(Bucket* h, bool* damaged) const {
  uint64_t steps = 0;
  for (Bucket* b = h;; b = const_cast<Bucket*>(next_checked(b, steps++))) {
    if (b->free_slot() >= 0) return b;
    if (b->next == 0) return nullptr;
    if (next_checked(b, steps) == nullptr) {
      *damaged = true;
      return nullptr;
    }
  }
}

// Algorithm 1: existence check (screened by the VFL), then head insertion into a free slot
// of the head bucket or the first chained bucket (merged flush) — else one further down the
// chain — else a new bucket linked right after the head; then the key enters the VFL.
Status SmartHT::put(std::string_view key, std::string_view value, PutMode mode) {
  Hashed k = hashed(key);
  const pm::Persister& p = pool_.persister();
  Stripe& st = stripe_of(k.head);
  {
    std::unique_lock<std::shared_mutex> lock(st.lock);
    Bucket* b = nullptr;
    int i = -1;
    bool may_exist = true;  // the lock excludes racing inserts of the key
    if (use_filter_) {
      pm::Epochs::Guard g(epochs_);  // a rebuild may replace and retire the filter
      BloomFilter* f = filter_.load(std::memory_order_acquire);
      may_exist = f == nullptr || f->may_contain(k.h);
    }
    bool damaged = false;
    bool found = may_exist && find(k, key, &b, &i, &damaged);
    Bucket* h = head(k.head);
    Bucket* target = found || damaged ? nullptr : free_slot_bucket(h, &damaged);
    if (damaged) return damaged_chain(k.head);
    if (found) {
      if (mode == PutMode::kInsert) return {Code::kAlreadyExists, "key already exists"};
      // Update: one 8-byte store of the value word (fixed), or a new item (and its
      // allocation bit) persisted, swapped in, and the old one retired (variable).
      common::Items::New item;
      Status s = items_.write(key, value, k.kw, &item);
      if (!s.ok()) return s;
      items_.swap_value(b->slots[i].value, item);
      return Status::Ok();
    }
    if (mode == PutMode::kUpdate) return Status::KeyNotFound();
    common::Items::New item;
    Status s = items_.write(key, value, k.kw, &item);
    if (!s.ok()) return s;
    if (target != nullptr) {
      // Merged flush: value and key, then the token, in one line; one flush. The item and
      // its allocation bit (variable) were flushed by write(); this fence orders them too.
      int slot = target->free_slot();
      common::store_word(target->slots[slot].value, item.value_word);
      common::store_word(target->slots[slot].key, item.key_word);
      p.line_order(target);
      if (items_.variable()) p.fence();
      common::store_word(target->tokens, Bucket::with_token(target->tokens, slot, true));
      p.persist(target, sizeof(Bucket));
    } else {
      // A new bucket (a spare: its allocation bit was persisted by an earlier batch,
      // pm::SpareBlocks),
      // filled and persisted; then linked right after the head bucket by one 8-byte store
      // (Alg. 1: two flushes, two fences). A crash in between leaves it allocated and
      // unreachable: the recovery sweep frees it.
      pm::Reservation r = alloc_.spares().take(sizeof(Bucket));
      if (!r) {
        items_.discard(item);
        return {Code::kPoolFull, "no space for a chained bucket"};
      }
      Bucket* nb = pool_.ptr<Bucket>(r.off);
      std::memset(static_cast<void*>(nb), 0, sizeof(Bucket));
      nb->slots[0] = Slot{item.key_word, item.value_word};
      nb->tokens = Bucket::with_token(0, 0, true);
      nb->next = h->next;
      p.flush(nb, sizeof(Bucket));
      p.fence();
      common::store_word(h->next, r.off);
      p.persist(&h->next, 8);
      st.chains.fetch_add(1, std::memory_order_relaxed);
    }
    st.live.fetch_add(1, std::memory_order_relaxed);
    add_to_filters(k.h);
  }
  maybe_resize_filter();
  return Status::Ok();
}

// Lazy deletion (§III-C3): the token goes to 0 and is persisted; the VFL screens deletes of
// absent keys. The key's filter bits stay set until the next rebuild.
Status SmartHT::remove(std::string_view key) {
  Hashed k = hashed(key);
  if (use_filter_) {
    pm::Epochs::Guard g(epochs_, threads_.id());
    BloomFilter* f = filter_.load(std::memory_order_acquire);
    if (f != nullptr && !f->may_contain(k.h)) return Status::KeyNotFound();
  }
  Stripe& st = stripe_of(k.head);
  std::unique_lock<std::shared_mutex> lock(st.lock);
  Bucket* b;
  int i;
  Bucket* prev = nullptr;
  bool damaged = false;
  if (!find(k, key, &b, &i, &damaged, &prev))
    return damaged ? damaged_chain(k.head) : Status::KeyNotFound();
  uint64_t tokens = Bucket::with_token(b->tokens, i, false);
  if (prev != nullptr && tokens == 0) {
    reclaim(prev, b, items_.variable() ? b->slots[i].value : 0);
    st.chains.fetch_sub(1, std::memory_order_relaxed);
  } else {
    uint64_t item = b->slots[i].value;
    common::store_word(b->tokens, tokens);
    pool_.persister().persist(&b->tokens, 8);
    if (items_.variable()) items_.retire(item);  // once unreachable in PM
  }
  st.live.fetch_sub(1, std::memory_order_relaxed);
  return Status::Ok();
}

// Beyond the paper (lazy deletion never gives a bucket back): a chained bucket whose last
// item is deleted is unlinked by one persisted 8-byte store, then it and its item are freed
// (a crash in between: the recovery sweep frees them), so the key is gone exactly when the
// bucket is (its token need not be cleared). The block's reuse waits an epoch grace period
// (Allocator::on_free); readers and for_each hold the stripe lock.
void SmartHT::reclaim(Bucket* prev, Bucket* b, uint64_t item) {
  common::store_word(prev->next, b->next);
  pool_.persister().persist(&prev->next, 8);
  alloc_.unmark(pool_.offset(b));
  if (item != 0) items_.retire(item);
  reclaimed_.fetch_add(1, std::memory_order_relaxed);
}

// ---- the Volatile Filter Layer: building, resizing, saving ----

// `building_` is read before `filter_`: a rebuild swaps `filter_` to the new filter before
// clearing `building_`, so one of the two loads always returns the new filter.
void SmartHT::add_to_filters(uint64_t h) {
  if (!use_filter_) return;
  pm::Epochs::Guard g(epochs_);
  BloomFilter* b = building_.load(std::memory_order_seq_cst);
  BloomFilter* f = filter_.load(std::memory_order_seq_cst);
  if (b != nullptr) b->add(h);
  if (f != nullptr && f != b) f->add(h);
  adds_.fetch_add(1, std::memory_order_relaxed);
}

uint64_t SmartHT::live_items() const {
  uint64_t n = 0;
  for (uint64_t s = 0; s < nstripes_; ++s) n += stripes_[s].live.load(std::memory_order_relaxed);
  return n;
}

uint64_t SmartHT::chain_buckets() const {
  uint64_t n = 0;
  for (uint64_t s = 0; s < nstripes_; ++s) n += stripes_[s].chains.load(std::memory_order_relaxed);
  return n;
}

common::Worker* SmartHT::start_rebuilder() {
  if (common::Worker* w = rebuilder_.load(std::memory_order_acquire)) return w;
  std::lock_guard<std::mutex> g(worker_mu_);
  if (stopped_) return nullptr;
  if (!worker_) {
    worker_ = std::make_unique<common::Worker>([this] { rebuild_filter(); });
    rebuilder_.store(worker_.get(), std::memory_order_release);
  }
  return worker_.get();
}

void SmartHT::wait_for_filter() const {
  if (common::Worker* w = rebuilder_.load(std::memory_order_acquire)) w->wait_idle();
}

// Policy (the paper is silent on deletes and growth; docs/schemes/smartht.md, "Filter size
// under growth and churn"): a filter is too small when the keys whose bits it holds exceed
// its capacity. Deleted keys keep their bits set (a Bloom filter cannot unset them), so
// `adds_` counts them too: live keys plus the keys deleted since the filter was built.
bool SmartHT::filter_too_small() const {
  if (!use_filter_) return false;
  pm::Epochs::Guard g(epochs_);
  BloomFilter* f = filter_.load(std::memory_order_acquire);
  return f != nullptr && adds_.load(std::memory_order_relaxed) > f->capacity();
}

// §III-B1 sizes the filter for the entries stored, so the new filter is sized from the live
// count, with headroom for the inserts until the next rebuild:
// - the live set grew past the headroom since the last sizing (growth): twice the live keys,
//   so rebuilds stay about one scan per inserted key, as a doubling table's do;
// - else (churn: the filter filled up with deleted keys' bits; it is stale, not small):
//   the live keys plus a quarter. DRAM stays within 1.25x of the paper's sizing, and a
//   rebuild comes once per quarter of the live set in inserts (four keys scanned per insert).
uint64_t SmartHT::resized_capacity(uint64_t live) const {
  const uint64_t sized_for = sized_for_.load(std::memory_order_relaxed);
  const bool grew = live > sized_for + sized_for / kChurnHeadroom;
  return std::max(initial_capacity_, live + (grew ? live : live / kChurnHeadroom));
}

void SmartHT::maybe_resize_filter() {
  common::Worker* w = rebuilder_.load(std::memory_order_acquire);
  if ((w == nullptr || !w->busy()) && filter_too_small()) {
    if ((w = start_rebuilder()) != nullptr) w->wake();  // wakes coalesce
  }
}

// The worker's task. A crash recovery (no filter, or stripe counts unknown) always builds;
// a resize builds while the filter is too small (keys inserted during a build may already
// exceed the new sizing). The new filter is published before inserts stop adding to it,
// then the old one is retired: lookups hold an epoch guard.
void SmartHT::rebuild_filter() {
  for (;;) {
    const bool counted = counts_valid_.load(std::memory_order_acquire);
    bool recovering = !counted || (use_filter_ && filter_.load() == nullptr);
    if (!recovering && !filter_too_small()) return;
    // No rebuild storm: a resize starts no sooner after the last build ended than that
    // build took, so the worker scans at most half the time even when writers fill the
    // headroom faster than a scan ends (the filter is then over its sizing for a while:
    // more false positives, never a false negative). Normally the gap is far longer.
    if (!recovering && !rebuilder_.load()->pause_until(last_build_end_ + last_build_time_)) return;
    const uint64_t live = counted ? live_items() : 0;
    const uint64_t capacity = counted ? resized_capacity(live) : initial_capacity_;
    BloomFilter* b = use_filter_ ? make_filter(capacity) : nullptr;
    const bool no_memory = use_filter_ && b == nullptr;
    if (no_memory && !recovering) {  // the filter stays (more false positives); later again
      last_build_end_ = std::chrono::steady_clock::now();
      last_build_time_ =
          std::max<std::chrono::steady_clock::duration>(last_build_time_, kRetryAfterNoMemory);
      return;
    }
    // Every insert from here on counts toward the new filter: one that lands before its
    // stripe's scan is counted twice (conservative: a rebuild comes a little early).
    const uint64_t adds_before = adds_.load(std::memory_order_seq_cst);
    // Published before the scan, so inserts add to it from now on.
    building_.store(b, std::memory_order_seq_cst);
    auto t0 = std::chrono::steady_clock::now();
    uint64_t scanned = 0;
    if (!build_filter(b, &scanned)) return;  // stopped: the destructor frees `building_`
    last_build_end_ = std::chrono::steady_clock::now();
    last_build_time_ = last_build_end_ - t0;
    last_build_ms_.store(std::chrono::duration<double, std::milli>(last_build_time_).count());
    if (b != nullptr) {
      BloomFilter* old = filter_.exchange(b, std::memory_order_seq_cst);
      building_.store(nullptr, std::memory_order_seq_cst);
      if (old != nullptr) epochs_.retire([acc = filters_, old] { free_filter(*acc, old); });
    }
    // The new filter holds the keys scanned (including those deleted after their stripe's
    // scan: their bits stay) and those inserted since `adds_before`. One atomic add keeps
    // the inserts that count concurrently: adds_ = scanned + (adds_ - adds_before).
    adds_.fetch_add(scanned - adds_before, std::memory_order_relaxed);
    sized_for_.store(counted ? live : initial_capacity_, std::memory_order_relaxed);
    counts_valid_.store(true, std::memory_order_release);
    rebuilds_.fetch_add(1, std::memory_order_relaxed);
    if (no_memory) return;  // recovered the counts; no filter until the next open
  }
}

// Scans every chain (token == 1) with `recovery_threads` threads (default: every core; the
// paper's Table I rebuilds with one).
// Each stripe is scanned under its shared lock, so an insert either lands before the scan
// of its stripe or after `building_` was published, and the new filter misses nothing.
// f == nullptr (filter off): only the stripe counts are recomputed.
bool SmartHT::build_filter(BloomFilter* f, uint64_t* scanned) {
  auto n = static_cast<unsigned>(recovery_threads_);
  std::atomic<uint64_t> total{0};
  auto scan = [&](unsigned t) {  // stripes t, t + n, ...
    std::vector<uint64_t> hashes;
    for (uint64_t s = t; s < nstripes_ && !rebuilder_.load()->stopping(); s += n) {
      Stripe& st = stripes_[s];
      std::shared_lock<std::shared_mutex> lock(st.lock);
      uint64_t my_chains = 0;
      hashes.clear();
      uint64_t end = std::min(root_->nheads, (s + 1) * root_->stripe);
      for (uint64_t hb = s * root_->stripe; hb < end; ++hb) {
        if (hb + 4 < end && head(hb + 4)->next != 0)  // chained buckets are scattered
          __builtin_prefetch(bucket_at(head(hb + 4)->next));
        uint64_t steps = 0;
        for (const Bucket* b = head(hb); b != nullptr; b = next_checked(b, steps++)) {
          for (int i = 0; i < kSlots; ++i)
            if (b->live(i)) hashes.push_back(items_.slot_hash(b->slots[i].key));
          if (steps > 0) ++my_chains;
        }
      }
      if (f != nullptr) f->add_batch(hashes.data(), hashes.size());
      total.fetch_add(hashes.size(), std::memory_order_relaxed);
      // Inserts change the counts only under the exclusive lock: exact here.
      st.live.store(hashes.size(), std::memory_order_relaxed);
      st.chains.store(my_chains, std::memory_order_relaxed);
    }
  };
  // The worker scans share 0 and any share whose helper the system would not start (no
  // memory or threads left: that must not end the process).
  std::vector<std::thread> ts;  // helpers, joined below
  std::vector<unsigned> not_started;
  for (unsigned t = 1; t < n; ++t) {
    try {
      ts.emplace_back(scan, t);
    } catch (const std::system_error&) {
      not_started.push_back(t);
    }
  }
  scan(0);
  for (unsigned t : not_started) scan(t);
  for (auto& t : ts) t.join();
  *scanned = total.load(std::memory_order_relaxed);
  return !rebuilder_.load()->stopping();
}

// The stripe counts always; the filter too unless it is off (then it would go stale).
bool SmartHT::load_saved_filter() {
  uint64_t off = root_->saved_filter;
  if (off == 0 || root_->non_crashed != 1) return false;
  uint64_t avail = alloc_.block_size(off);
  const uint64_t* w = pool_.ptr<uint64_t>(off);
  if (avail < kSavedHeaderWords * 8) return false;
  uint64_t nbits = w[0], capacity = w[1], adds = w[2], nstripes = w[3];
  if (nbits == 0 || nbits % 64 != 0 || nstripes != nstripes_ ||
      (kSavedHeaderWords + 2 * nstripes + nbits / 64) * 8 > avail)
    return false;
  const uint64_t* counts = w + kSavedHeaderWords;
  for (uint64_t s = 0; s < nstripes_; ++s) {
    stripes_[s].live.store(counts[2 * s]);
    stripes_[s].chains.store(counts[2 * s + 1]);
  }
  if (use_filter_) {
    BloomFilter* f = adopt_filter(BloomFilter::create(nbits, capacity, kHashes));
    if (f == nullptr) return false;  // no memory for it: rebuilt (or done without) instead
    const uint64_t* words = counts + 2 * nstripes;
    for (uint64_t i = 0; i < nbits / 64; ++i)  // zero words stay zero pages
      if (words[i] != 0) f->set_word(i, words[i]);
    filter_.store(f, std::memory_order_release);
    adds_.store(adds);
  }
  sized_for_.store(live_items(), std::memory_order_relaxed);
  counts_valid_.store(true);
  return true;
}

void SmartHT::invalidate_saved_filter() {
  if (root_->non_crashed == 0) return;
  std::atomic_ref<uint64_t>(root_->non_crashed).store(0);
  pool_.persister().persist(&root_->non_crashed, 8);
}

// Clean shutdown (§III-D): the VFL goes to a reserved PM area, then the nonCrashed flag is
// set. A rebuild in progress is waited for, so the saved filter is complete. With the filter
// off, or no room for it, nothing is saved and the flag stays 0: the next open rebuilds.
void SmartHT::close() {
  wait_for_filter();
  if (!use_filter_ || !counts_valid_.load()) return;
  BloomFilter* f = filter_.load();
  if (f != nullptr && building_.load() == nullptr) save_filter(*f);
}

void SmartHT::save_filter(const BloomFilter& f) {
  uint64_t bytes = (kSavedHeaderWords + 2 * nstripes_ + f.nbits() / 64) * 8;
  uint64_t off = root_->saved_filter;
  pm::Reservation fresh;
  if (off == 0 || alloc_.block_size(off) < bytes) {
    fresh = alloc_.reserve(bytes);
    if (!fresh) return;  // no room: the flag stays 0, the next open rebuilds the filter
    off = fresh.off;
  }
  uint64_t* w = pool_.ptr<uint64_t>(off);
  w[0] = f.nbits();
  w[1] = f.capacity();
  w[2] = adds_.load();
  w[3] = nstripes_;
  w[4] = 0;
  for (uint64_t s = 0; s < nstripes_; ++s) {
    w[kSavedHeaderWords + 2 * s] = stripes_[s].live.load();
    w[kSavedHeaderWords + 2 * s + 1] = stripes_[s].chains.load();
  }
  uint64_t* words = w + kSavedHeaderWords + 2 * nstripes_;
  for (uint64_t i = 0; i < f.nbits() / 64; ++i) words[i] = f.word(i);
  const pm::Persister& p = pool_.persister();
  p.flush(w, bytes);
  p.fence();
  if (fresh) {
    pm::Tx tx(alloc_);
    tx.publish(fresh);
    tx.store(&root_->saved_filter, fresh.off);
    if (root_->saved_filter != 0) tx.free(root_->saved_filter);
    tx.commit();
  }
  // The copy is complete and persisted, and reachable from the root: now it may be trusted.
  std::atomic_ref<uint64_t>(root_->non_crashed).store(1);
  p.persist(&root_->non_crashed, 8);
}

void SmartHT::stop() {
  std::lock_guard<std::mutex> g(worker_mu_);
  stopped_ = true;
  if (worker_) worker_->stop();
}

// ---- introspection ----

uint64_t SmartHT::size() const {
  if (!counts_valid_.load(std::memory_order_acquire)) wait_for_filter();
  uint64_t n = 0;
  for (uint64_t s = 0; s < nstripes_; ++s) n += stripes_[s].live.load(std::memory_order_relaxed);
  return n;
}

uint64_t SmartHT::capacity_slots() const {
  return (root_->nheads + chain_buckets()) * kSlots;
}

// Every filter still in DRAM: current, being built, and retired but not yet freed.
uint64_t SmartHT::dram_bytes() const {
  return nstripes_ * sizeof(Stripe) + filters_->bytes.load(std::memory_order_relaxed);
}

void SmartHT::counters(std::map<std::string, double>* out) const {
  uint64_t neg = 0, fp = 0, pm = 0;
  for (unsigned t = 0; t < threads_.high_water(); ++t) {
    neg += tstats_[t].filter_negatives.load(std::memory_order_relaxed);
    fp += tstats_[t].filter_false_positives.load(std::memory_order_relaxed);
    pm += tstats_[t].pm_searches.load(std::memory_order_relaxed);
  }
  pm::Epochs::Guard g(epochs_);
  BloomFilter* f = filter_.load();
  (*out)["filter_negatives"] = double(neg);
  (*out)["filter_false_positives"] = double(fp);
  (*out)["pm_searches"] = double(pm);
  (*out)["chain_buckets"] = double(chain_buckets());
  (*out)["chain_buckets_reclaimed"] = double(reclaimed_.load(std::memory_order_relaxed));
  (*out)["filter_bits"] = f ? double(f->nbits()) : 0;
  (*out)["filter_capacity"] = f ? double(f->capacity()) : 0;
  // Keys whose bits the filter holds: live ones and those deleted since its build.
  (*out)["filter_adds"] = f ? double(adds_.load(std::memory_order_relaxed)) : 0;
  (*out)["filter_rebuilds"] = double(rebuilds_.load());
  (*out)["filter_no_memory"] = double(filter_no_memory_.load(std::memory_order_relaxed));
  (*out)["filter_ready"] = f != nullptr ? 1 : 0;
  (*out)["filter_build_ms"] = last_build_ms_.load();
  (*out)["filters_alive"] = double(filters_->alive.load(std::memory_order_relaxed));
  (*out)["filter_dram_bytes"] = double(filters_->bytes.load(std::memory_order_relaxed));
}

bool SmartHT::check(std::string* report) const {
  wait_for_filter();
  bool ok = true;
  auto bad = [&](const std::string& what) {
    ok = false;
    *report += "smartht: " + what + "\n";
  };
  pm::Epochs::Guard g(epochs_);
  BloomFilter* f = filter_.load();
  uint64_t live_total = 0, chains = 0;
  for (uint64_t hb = 0; hb < root_->nheads && ok; ++hb) {
    std::unordered_set<std::string> keys;
    uint64_t steps = 0;
    for (const Bucket* b = head(hb);; ++steps) {
      std::string where = "head " + std::to_string(hb) + " bucket " + std::to_string(steps);
      if (b->tokens & ~uint64_t{0x010101}) bad(where + ": token or padding holds garbage");
      for (int i = 0; i < kSlots; ++i) {
        if (!b->live(i)) continue;
        ++live_total;
        const Slot& s = b->slots[i];
        uint64_t h = items_.slot_hash(s.key);
        if ((static_cast<unsigned __int128>(h) * root_->nheads) >> 64 != hb)
          bad(where + ": key in the wrong chain");
        if (items_.variable()) {
          std::string_view k;
          if (!items_.item_key(s.value, &k) || alloc_.block_size(s.value) == 0) {
            bad(where + ": slot points to no item");
            continue;
          }
          if (common::Items::hash(k) != s.key) bad(where + ": item key does not hash to slot");
        }
        if (!keys.insert(items_.slot_key_bytes(s)).second) bad(where + ": key stored twice");
        if (use_filter_ && f != nullptr && !f->may_contain(h))
          bad(where + ": key missing from the Bloom filter (false negative)");
      }
      if (b->next == 0) break;
      const Bucket* n = next_checked(b, steps);
      if (n == nullptr) {  // never followed: it could point anywhere
        bad(where + ": links a bucket that is not an allocated 64-byte block, or a cycle");
        break;
      }
      b = n;
      ++chains;
    }
  }
  if (ok && live_total != size()) bad("live count disagrees with the tokens");
  if (ok && chains != chain_buckets()) bad("chained bucket count disagrees");
  return ok;
}

void SmartHT::for_each_reachable(const std::function<void(uint64_t off)>& fn) const {
  fn(root_off_);
  fn(root_->heads);
  if (root_->saved_filter != 0) fn(root_->saved_filter);
  for (uint64_t hb = 0, steps = 0; hb < root_->nheads; ++hb, steps = 0)
    for (const Bucket *b = head(hb), *n = nullptr; b != nullptr; b = n) {
      if (items_.variable())
        for (int i = 0; i < kSlots; ++i)
          if (b->live(i)) fn(b->slots[i].value);
      if ((n = next_checked(b, steps++)) != nullptr) fn(b->next);
    }
}

void SmartHT::for_each(const std::function<void(const Slot&)>& fn) const {
  for_each_in_pieces(fn, [] {});
}

// A piece is a chain: copied under its stripe's shared lock, as get() reads it, then fn
// runs outside the lock, so it may call into the index (get() from a callback), inside an
// epoch guard: an item a concurrent write frees is not reused before fn has read it.
bool SmartHT::for_each_in_pieces(const std::function<void(const Slot&)>& fn,
                                 const std::function<void()>& piece_done) const {
  std::vector<Slot> chain;
  for (uint64_t hb = 0; hb < root_->nheads; ++hb) {
    chain.clear();
    {
      pm::Epochs::Guard g(epochs_);
      {
        std::shared_lock<std::shared_mutex> lock(stripe_of(hb).lock);
        uint64_t steps = 0;
        for (const Bucket* b = head(hb); b != nullptr; b = next_checked(b, steps++))
          for (int i = 0; i < kSlots; ++i)
            if (b->live(i)) chain.push_back(b->slots[i]);
      }
      for (const Slot& s : chain) fn(s);
    }
    if (!chain.empty()) piece_done();
  }
  return true;
}

}  // namespace pmhash::smartht

namespace pmhash {
namespace smartht {
Status validate(const SchemeContext& ctx);  // validate.cpp
uint64_t items_found(const SchemeContext& ctx, uint64_t enough);
}  // namespace smartht
extern const SchemeFactory kSmartHTFactory;
const SchemeFactory kSmartHTFactory = {
    "smartht",
    &smartht::SmartHT::layout,
    &smartht::SmartHT::create,
    &smartht::SmartHT::open,
    &smartht::validate,
    &check_runtime<smartht::SmartHT::Runtime, &smartht::SmartHT::parse_runtime>,
    &smartht::items_found,
    false};
}  // namespace pmhash
