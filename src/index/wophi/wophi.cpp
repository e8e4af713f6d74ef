#include "index/wophi/wophi.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_set>

namespace pmhash::wophi {

using common::Slot;

namespace {
uint64_t pow2_at_least(uint64_t x) {
  uint64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}
}  // namespace

Status Wophi::parse_runtime(const common::Params& params, Runtime* out) {
  std::string grow;
  Status s = params.get_bool("wophi", "pab", true, &out->pab);
  if (s.ok()) s = params.get_enum("wophi", "pab_grow", {"background", "inline"}, &grow);
  out->grow_in_background = grow == "background";
  return s;
}

Wophi::Wophi(SchemeContext& ctx, uint64_t root_off, bool after_crash)
    : pool_(ctx.pool),
      alloc_(ctx.alloc),
      epochs_(ctx.epochs),
      items_(ctx.items),
      root_off_(root_off),
      root_(ctx.pool.ptr<Root>(root_off)),
      nstripes_((root_->nbuckets + root_->stripe - 1) / root_->stripe),
      stripes_(new Stripe[nstripes_]),
      use_pab_(runtime_config<Runtime, &parse_runtime>(ctx).pab),
      grow_in_background_(runtime_config<Runtime, &parse_runtime>(ctx).grow_in_background) {
  pab_cap_ = pab_capacity(root_->nareas);
  nareas_ = root_->nareas;
  // Buckets past the capacity do not exist (an older version could persist such a count).
  pab_next_ = std::min(root_->expand_bucket_num, pab_cap_.load());
  (void)after_crash;  // deletes leave holes too: the free list is rebuilt at every open
  recover_pab();
}

Wophi::~Wophi() {
  stop();
}

void Wophi::stop() {
  std::lock_guard<std::mutex> g(worker_mu_);
  stopped_ = true;
  if (worker_) worker_->stop();
}

common::Worker* Wophi::start_grower() {
  if (common::Worker* w = grower_.load(std::memory_order_acquire)) return w;
  std::lock_guard<std::mutex> g(worker_mu_);
  if (stopped_) return nullptr;
  if (!worker_) {
    worker_ = std::make_unique<common::Worker>([this] { grow_in_background(); });
    grower_.store(worker_.get(), std::memory_order_release);
  }
  return worker_.get();
}

Status Wophi::layout(const Options& o, const common::Params& p, common::Params* layout) {
  // Main buckets: about 2 keys per bucket at the expected count (load factor 0.5 of the main
  // buckets), else 2^16. PAB: a quarter of the main buckets, grown as needed.
  // A hint past the largest table gets the largest (the pool size decides).
  constexpr uint64_t kMaxBuckets = uint64_t{1} << 32;
  uint64_t expected = o.capacity_hint ? o.capacity_hint : 1u << 17;
  uint64_t def = pow2_at_least(std::clamp<uint64_t>(expected / 2, 16, kMaxBuckets));
  uint64_t n, stripe, pab;
  Status s = p.get_u64("wophi", "buckets", def, 1, kMaxBuckets, &n);
  if (s.ok()) s = p.get_u64("wophi", "stripe", 256, 1, uint64_t{1} << 32, &stripe);
  if (s.ok())
    s = p.get_u64("wophi", "pab_buckets", std::max<uint64_t>(16, n / 4), 1, uint64_t{1} << 32,
                  &pab);
  if (!s.ok()) return s;
  layout->set("buckets", std::to_string(n));
  layout->set("stripe", std::to_string(stripe));
  layout->set("pab_buckets", std::to_string(pab));
  return Status::Ok();
}

Status Wophi::create(SchemeContext& ctx, std::unique_ptr<Scheme>* out) {
  uint64_t n = 0, stripe = 0, pab = 0;
  if (!ctx.layout.get_u64("buckets", 0, &n) || !ctx.layout.get_u64("stripe", 0, &stripe) ||
      !ctx.layout.get_u64("pab_buckets", 0, &pab) || n == 0 || stripe == 0 || pab == 0)
    return {Code::kCorrupted, "wophi: pool header lacks layout parameters"};
  pm::Reservation root = ctx.alloc.reserve(sizeof(Root));
  pm::Reservation main = ctx.alloc.reserve(n * sizeof(Bucket));
  pm::Reservation area = ctx.alloc.reserve(pab * sizeof(Bucket));
  if (!root || !main || !area) {
    for (auto& r : {root, main, area}) ctx.alloc.cancel(r);
    return {Code::kPoolFull, "pool too small for " + std::to_string(n) + " main buckets"};
  }
  const pm::Persister& p = ctx.pool.persister();
  for (auto& r : {main, area}) {
    std::memset(ctx.pool.ptr<char>(r.off), 0, r.size);
    p.flush(ctx.pool.ptr<char>(r.off), r.size);
  }
  Root* rt = ctx.pool.ptr<Root>(root.off);
  std::memset(static_cast<void*>(rt), 0, sizeof(Root));
  *rt = Root{kRootMagic, n, main.off, stripe, 0, pab, 1, 0, {area.off}};
  p.flush(rt, sizeof(Root));
  publish_new_root(ctx, {root, main, area}, root.off);
  *out = std::make_unique<Wophi>(ctx, root.off, false);
  return Status::Ok();
}

Status Wophi::open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out) {
  const Root* root = existing_root<Root>(ctx, kRootMagic);
  if (root == nullptr) return {Code::kCorrupted, "wophi: root object missing or damaged"};
  const Root& r = *root;
  uint64_t root_off = ctx.pool.root();
  if (r.nbuckets == 0 || r.stripe == 0 || r.pab_initial == 0 || r.nareas == 0 ||
      r.nareas > kMaxAreas || ctx.alloc.block_size(r.buckets) < r.nbuckets * sizeof(Bucket))
    return {Code::kCorrupted, "wophi: main buckets missing or damaged"};
  for (uint64_t a = 0; a < r.nareas; ++a)
    if (ctx.alloc.block_size(r.areas[a]) < (r.pab_initial << a) * sizeof(Bucket))
      return {Code::kCorrupted, "wophi: PAB area " + std::to_string(a) + " missing"};
  *out = std::make_unique<Wophi>(ctx, root_off, !clean);
  // Inserts and deletes allocate and free without a log (pm::Allocator::mark/unmark).
  if (!clean) sweep_after_crash(ctx, **out);
  return Status::Ok();
}

Wophi::Hashed Wophi::hashed(std::string_view key) const {
  uint64_t h = common::Items::hash(key);
  return {h, items_.key_word(key, h),
          static_cast<uint64_t>((static_cast<unsigned __int128>(h) * root_->nbuckets) >> 64)};
}

uint64_t Wophi::pab_offset(uint64_t g) const {
  uint64_t a = 0;
  while (area_start(a + 1) <= g) ++a;
  return root_->areas[a] + (g - area_start(a)) * sizeof(Bucket);
}

bool Wophi::pab_index(uint64_t off, uint64_t* g) const {
  // nareas_, not the root's word: the grower may be committing the next area (reclaim
  // calls this beside it); areas below nareas_ were published before it.
  for (uint64_t a = 0, na = nareas_.load(std::memory_order_acquire); a < na; ++a) {
    uint64_t base = root_->areas[a], n = root_->pab_initial << a;
    if (off >= base && off < base + n * sizeof(Bucket)) {
      *g = area_start(a) + (off - base) / sizeof(Bucket);
      return true;
    }
  }
  return false;
}

bool Wophi::find(const Hashed& k, std::string_view key, Bucket** out, int* slot,
                 Bucket** prev) const {
  for (Bucket *b = main(k.index), *p = nullptr;; p = b, b = at(b->next)) {
    for (int i = 0; i < kSlots; ++i)
      if (b->live(i) && items_.matches(b->slots[i].key, b->slots[i].value, key, k.kw)) {
        *out = b;
        *slot = i;
        if (prev != nullptr) *prev = p;
        return true;
      }
    if (b->next == 0) return false;
  }
}

Status Wophi::get(std::string_view key, std::string* value) {
  Hashed k = hashed(key);
  std::shared_lock<std::shared_mutex> lock(stripes_[k.index / root_->stripe].lock);
  Bucket* b;
  int i;
  if (!find(k, key, &b, &i)) return Status::KeyNotFound();
  if (!items_.read_value(b->slots[i].value, value))
    return {Code::kCorrupted, "wophi: slot points to no item"};
  return Status::Ok();
}

// Algorithm 1: a free slot (token 0) along the chain gets the item with a log-free
// failure-atomic write (key and value, flush, fence; token, flush, fence); with none, a PAB
// bucket is filled and persisted, then linked at the chain's end with one 8-byte store.
Status Wophi::put(std::string_view key, std::string_view value, PutMode mode) {
  Hashed k = hashed(key);
  const pm::Persister& p = pool_.persister();
  {
    std::unique_lock<std::shared_mutex> lock(stripes_[k.index / root_->stripe].lock);
    Bucket* b;
    int i;
    if (find(k, key, &b, &i)) {
      if (mode == PutMode::kInsert) return {Code::kAlreadyExists, "key already exists"};
      // Update: the value word is one 8-byte store (fixed); a new item (and its allocation
      // bit) persisted, swapped in, and the old one retired (variable).
      common::Items::New item;
      Status s = items_.write(key, value, k.kw, &item);
      if (!s.ok()) return s;
      items_.swap_value(b->slots[i].value, item);
      return Status::Ok();
    }
    if (mode == PutMode::kUpdate) return Status::KeyNotFound();
    common::Items::New item;  // variable: item and allocation bit flushed, fenced below
    Status s = items_.write(key, value, k.kw, &item);
    if (!s.ok()) return s;
    Bucket* tail = main(k.index);
    for (Bucket* tb = tail;; tb = at(tb->next)) {
      tail = tb;
      int free = -1;
      for (int j = 0; j < kSlots && free < 0; ++j)
        if (!tb->live(j)) free = j;
      if (free >= 0) {
        Slot& slot = tb->slots[free];
        common::store_word(slot.key, item.key_word);
        common::store_word(slot.value, item.value_word);
        p.persist(&slot, sizeof slot);
        common::store_word(tb->tokens, Bucket::with_token(tb->tokens, free, true));
        p.persist(&tb->tokens, 8);
        return Status::Ok();
      }
      if (tb->next == 0) break;
    }
    pm::Reservation r;
    Bucket* nb = nullptr;
    s = take_chain_bucket(&r, &nb);
    if (!s.ok()) {
      items_.discard(item);
      return s;
    }
    // Log-free failure-atomic write of the new bucket's line 0 (slot 0 and its token), then
    // the link: two flushes, two fences. A bucket allocated on the write path (pab=off) is
    // marked allocated beside it; a crash before the link leaves it to the recovery sweep.
    std::memset(static_cast<void*>(nb), 0, offsetof(Bucket, slots) + 3 * sizeof(Slot));
    nb->slots[0] = Slot{item.key_word, item.value_word};
    nb->tokens = Bucket::with_token(0, 0, true);
    p.flush(nb, pm::kCacheLine);
    if (r) alloc_.mark(r);
    p.fence();
    common::store_word(tail->next, pool_.offset(nb));
    p.persist(&tail->next, 8);
    chain_buckets_.fetch_add(1, std::memory_order_relaxed);
  }
  if (use_pab_) maybe_grow_in_background();
  return Status::Ok();
}

// Algorithm 2: the token goes to 0, flushed and fenced.
Status Wophi::remove(std::string_view key) {
  Hashed k = hashed(key);
  std::unique_lock<std::shared_mutex> lock(stripes_[k.index / root_->stripe].lock);
  Bucket* b;
  int i;
  Bucket* prev = nullptr;
  if (!find(k, key, &b, &i, &prev)) return Status::KeyNotFound();
  uint64_t tokens = Bucket::with_token(b->tokens, i, false);
  if (prev != nullptr && tokens == 0) {
    reclaim(prev, b, items_.variable() ? b->slots[i].value : 0);
  } else {
    uint64_t item = b->slots[i].value;
    common::store_word(b->tokens, tokens);
    pool_.persister().persist(&b->tokens, 8);
    if (items_.variable()) items_.retire(item);  // once unreachable in PM
  }
  return Status::Ok();
}

// Beyond the paper (its chains never shrink): a chain bucket whose last item is deleted is
// unlinked by one persisted 8-byte store; the unlink deletes the key too (the bucket's token
// need not be cleared). Then the item, and a bucket allocated on the write path, are freed
// (a crash in between: the recovery sweep frees them). A PAB bucket returns to the PAB free
// list at once (a crash before then: recover_pab finds it unlinked): every walk of a chain
// (get, put, remove, size, for_each) holds its stripe lock, so once the unlink is done under
// the exclusive lock no reader can reach the bucket, and no grace period is needed before
// another chain reuses it. A freed block's DRAM reuse goes through the allocator's epochs.
void Wophi::reclaim(Bucket* prev, Bucket* b, uint64_t item) {
  uint64_t off = pool_.offset(b), g = 0;
  bool in_pab = pab_index(off, &g);
  common::store_word(prev->next, b->next);
  pool_.persister().persist(&prev->next, 8);
  if (!in_pab) alloc_.unmark(off);
  if (item != 0) items_.retire(item);
  reclaimed_.fetch_add(1, std::memory_order_relaxed);
  chain_buckets_.fetch_sub(1, std::memory_order_relaxed);
  if (in_pab) {
    std::lock_guard<std::mutex> fl(pab_free_.mu);
    pab_free_.buckets.push_back(g);
  }
}

// ---- Pre-Allocation Buckets ----

Status Wophi::take_chain_bucket(pm::Reservation* r, Bucket** out) {
  if (!use_pab_) {  // the mechanism PAB replaces: allocation on the write path
    *r = alloc_.reserve(sizeof(Bucket));
    if (!*r) return {Code::kPoolFull, "no space for a chain bucket"};
    allocs_on_write_.fetch_add(1, std::memory_order_relaxed);
    *out = pool_.ptr<Bucket>(r->off);
    return Status::Ok();
  }
  uint64_t g = ~uint64_t{0};
  {
    std::lock_guard<std::mutex> fl(pab_free_.mu);
    if (!pab_free_.buckets.empty()) {
      g = pab_free_.buckets.back();
      pab_free_.buckets.pop_back();
    }
  }
  if (g == ~uint64_t{0}) {
    // Claim bucket g only if it exists; when the PAB is exhausted, grow it first (inline)
    // and fail without claiming anything if it cannot grow.
    g = pab_next_.load();
    for (;;) {
      if (g >= pab_cap_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> gl(grow_mu_);
        if (g >= pab_cap_.load()) {
          Status s = grow_pab();
          if (!s.ok()) return s;
        }
        g = pab_next_.load();
        continue;
      }
      if (pab_next_.compare_exchange_weak(g, g + 1)) break;
    }
    // expand_bucket_num += 1 (Alg. 1 line 33) in DRAM only: open recomputes it from the
    // chains (recover_pab), so the root line is not flushed on the write path.
  }
  *out = at(pab_offset(g));
  return Status::Ok();
}

// A further PAB area, twice the last one (the paper stops with an error instead).
Status Wophi::grow_pab() {
  uint64_t n = root_->nareas;
  pm::Reservation r;
  if (n < kMaxAreas) r = alloc_.reserve((root_->pab_initial << n) * sizeof(Bucket));
  if (!r) {
    grow_failed_.store(true);
    grow_failures_.fetch_add(1, std::memory_order_relaxed);
    return {Code::kPoolFull,
            n < kMaxAreas ? "no space for a PAB area" : "wophi: PAB cannot grow further"};
  }
  const pm::Persister& p = pool_.persister();
  std::memset(pool_.ptr<char>(r.off), 0, r.size);
  p.flush(pool_.ptr<char>(r.off), r.size);
  p.fence();
  pm::Tx tx(alloc_);
  tx.publish(r);
  tx.store(&root_->areas[n], r.off);
  tx.store(&root_->nareas, n + 1);
  tx.commit();
  nareas_.store(n + 1);
  pab_cap_.store(pab_capacity(n + 1), std::memory_order_release);
  grows_.fetch_add(1, std::memory_order_relaxed);
  grow_failed_.store(false);
  return Status::Ok();
}

// Off the critical path: at 75% use, the worker adds the next area. "Use" counts the PAB
// buckets linked in chains, not the high-water mark: buckets deletes gave back (or that
// wait for their grace period) are handed out again first. After a failed growth only an
// inline growth (a take finding the PAB exhausted) tries again.
bool Wophi::pab_nearly_full() const {
  return chain_buckets_.load(std::memory_order_relaxed) * 4 >=
         pab_cap_.load(std::memory_order_relaxed) * 3;
}

void Wophi::maybe_grow_in_background() {
  if (!grow_in_background_ || grow_failed_.load(std::memory_order_relaxed)) return;
  if (!pab_nearly_full()) return;
  common::Worker* w = grower_.load(std::memory_order_acquire);
  if (w != nullptr && w->busy()) return;  // wakes coalesce
  if ((w = start_grower()) != nullptr) w->wake();
}

void Wophi::grow_in_background() {
  std::lock_guard<std::mutex> gl(grow_mu_);
  if (!grow_failed_.load() && pab_nearly_full()) (void)grow_pab();
}

// At every open: PAB buckets handed out but not linked — after a crash between take and
// link, or unlinked by a delete (reclaim) — are found by walking every chain, and handed out
// again; nothing leaks, and a clean reopen keeps the space deletes gave back.
void Wophi::recover_pab() {
  std::vector<bool> linked(pab_capacity(root_->nareas), false);
  uint64_t high = 0, chains = 0;
  for (uint64_t i = 0; i < root_->nbuckets; ++i)
    for (const Bucket* b = main(i); b->next != 0; b = at(b->next), ++chains) {
      uint64_t g;
      if (pab_index(b->next, &g)) {
        linked[g] = true;
        high = std::max(high, g + 1);
      }
    }
  for (uint64_t g = 0; g < high; ++g)
    if (!linked[g]) pab_free_.buckets.push_back(g);
  pab_next_ = high;
  chain_buckets_ = chains;
}

void Wophi::wait_idle() {
  if (common::Worker* w = grower_.load(std::memory_order_acquire)) w->wait_idle();
}

void Wophi::close() {
  wait_idle();  // a growth in progress commits first
  // Clean shutdown: the counter is exact again (holes left by a crash are lost space).
  std::atomic_ref<uint64_t>(root_->expand_bucket_num).store(pab_next_.load());
  pool_.persister().persist(&root_->expand_bucket_num, 8);
}

// ---- introspection ----

uint64_t Wophi::size() const {
  uint64_t n = 0;
  for (uint64_t s = 0; s < nstripes_; ++s) {
    std::shared_lock<std::shared_mutex> lock(stripes_[s].lock);
    uint64_t end = std::min(root_->nbuckets, (s + 1) * root_->stripe);
    for (uint64_t i = s * root_->stripe; i < end; ++i)
      for (const Bucket* b = main(i);; b = at(b->next)) {
        for (int j = 0; j < kSlots; ++j) n += b->live(j);
        if (b->next == 0) break;
      }
  }
  return n;
}

uint64_t Wophi::capacity_slots() const {
  return (root_->nbuckets + chain_buckets_.load(std::memory_order_relaxed)) * kSlots;
}

uint64_t Wophi::dram_bytes() const {
  return nstripes_ * sizeof(Stripe);
}

void Wophi::counters(std::map<std::string, double>* out) const {
  (*out)["pab_used"] = double(pab_next_.load());
  (*out)["pab_capacity"] = double(pab_cap_.load());
  (*out)["pab_areas"] = double(nareas_.load());
  (*out)["pab_grows"] = double(grows_.load());
  (*out)["pab_grow_failures"] = double(grow_failures_.load());
  (*out)["chain_allocs_on_write"] = double(allocs_on_write_.load());
  (*out)["chain_buckets"] = double(chain_buckets_.load(std::memory_order_relaxed));
  (*out)["chain_buckets_reclaimed"] = double(reclaimed_.load(std::memory_order_relaxed));
  {
    std::lock_guard<std::mutex> fl(pab_free_.mu);
    (*out)["pab_free"] = double(pab_free_.buckets.size());
  }
  // The paper's load factor: items over the main buckets' slots.
  (*out)["main_load_factor"] = double(size()) / double(root_->nbuckets * kSlots);
}

bool Wophi::check(std::string* report) const {
  bool ok = true;
  auto bad = [&](const std::string& what) {
    ok = false;
    *report += "wophi: " + what + "\n";
  };
  uint64_t cap = pab_capacity(root_->nareas);
  if (pab_next_.load() > cap || root_->expand_bucket_num > cap)
    bad("PAB buckets handed out (" + std::to_string(pab_next_.load()) + ", persisted " +
        std::to_string(root_->expand_bucket_num) + ") exceed its capacity " + std::to_string(cap));
  std::unordered_set<uint64_t> seen_chain;
  for (uint64_t i = 0; i < root_->nbuckets && ok; ++i) {
    std::unordered_set<std::string> keys;
    uint64_t steps = 0;
    for (const Bucket* b = main(i);; ++steps) {
      std::string where = "bucket " + std::to_string(i) + " chain " + std::to_string(steps);
      if (b->tokens & ~uint64_t{0x01010101}) bad(where + ": token holds garbage");
      for (int j = 0; j < kSlots; ++j) {
        if (!b->live(j)) continue;
        const Slot& s = b->slots[j];
        uint64_t h = items_.slot_hash(s.key);
        if ((static_cast<unsigned __int128>(h) * root_->nbuckets) >> 64 != i)
          bad(where + ": key in the wrong chain");
        if (items_.variable()) {
          std::string_view key;
          if (!items_.item_key(s.value, &key) || alloc_.block_size(s.value) == 0) {
            bad(where + ": slot points to no item");
            continue;
          }
          if (common::Items::hash(key) != s.key) bad(where + ": item key does not hash to slot");
        }
        if (!keys.insert(items_.slot_key_bytes(s)).second) bad(where + ": key stored twice");
      }
      if (b->next == 0) break;
      uint64_t g;
      if (pab_index(b->next, &g)) {
        if (g >= pab_next_.load()) bad(where + ": links a PAB bucket never handed out");
      } else if (alloc_.block_size(b->next) != sizeof(Bucket)) {
        bad(where + ": links a bucket that is neither in the PAB nor allocated");
      }
      if (!ok) break;  // never follow a link found bad
      if (!seen_chain.insert(b->next).second) bad(where + ": bucket linked twice");
      if (!ok) break;
      b = at(b->next);
    }
  }
  if (ok && seen_chain.size() != chain_buckets_.load())
    bad("chain bucket count " + std::to_string(chain_buckets_.load()) + " disagrees with " +
        std::to_string(seen_chain.size()) + " linked");
  std::lock_guard<std::mutex> fl(pab_free_.mu);
  for (uint64_t g : pab_free_.buckets)
    if (g >= pab_next_.load() || seen_chain.count(pab_offset(g)))
      bad("PAB bucket " + std::to_string(g) + " is on the free list but linked or never taken");
  return ok;
}

void Wophi::for_each_reachable(const std::function<void(uint64_t off)>& fn) const {
  fn(root_off_);
  fn(root_->buckets);
  for (uint64_t a = 0; a < root_->nareas; ++a) fn(root_->areas[a]);
  uint64_t g;
  for (uint64_t i = 0; i < root_->nbuckets; ++i)
    for (const Bucket* b = main(i);; b = at(b->next)) {
      if (items_.variable())
        for (int j = 0; j < kSlots; ++j)
          if (b->live(j)) fn(b->slots[j].value);
      if (b->next == 0) break;
      if (!pab_index(b->next, &g)) fn(b->next);  // allocated on the write path
    }
}

void Wophi::for_each(const std::function<void(const Slot&)>& fn) const {
  for_each_in_pieces(fn, [] {});
}

// A piece is a chain: copied under its stripe's shared lock, then fn runs outside it, so it
// may call into the index (get() from a callback), inside an epoch guard: an item a
// concurrent delete frees is not reused before fn has read it.
bool Wophi::for_each_in_pieces(const std::function<void(const Slot&)>& fn,
                               const std::function<void()>& piece_done) const {
  std::vector<Slot> chain;
  for (uint64_t i = 0; i < root_->nbuckets; ++i) {
    chain.clear();
    {
      pm::Epochs::Guard guard(epochs_);
      {
        std::shared_lock<std::shared_mutex> lock(stripes_[i / root_->stripe].lock);
        for (const Bucket* b = main(i);; b = at(b->next)) {
          for (int j = 0; j < kSlots; ++j)
            if (b->live(j)) chain.push_back(b->slots[j]);
          if (b->next == 0) break;
        }
      }
      for (const Slot& s : chain) fn(s);
    }
    if (!chain.empty()) piece_done();
  }
  return true;
}

}  // namespace pmhash::wophi

namespace pmhash {
namespace wophi {
Status validate(const SchemeContext& ctx);  // validate.cpp
uint64_t items_found(const SchemeContext& ctx, uint64_t enough);
}  // namespace wophi
extern const SchemeFactory kWophiFactory;
const SchemeFactory kWophiFactory = {
    "wophi",
    &wophi::Wophi::layout,
    &wophi::Wophi::create,
    &wophi::Wophi::open,
    &wophi::validate,
    &check_runtime<wophi::Wophi::Runtime, &wophi::Wophi::parse_runtime>,
    &wophi::items_found,
    true};
}  // namespace pmhash
