// Recovery (§3.7): open checks the root and finishes an interrupted resize; one traversal
// of the table rebuilds the OCF and the hot table.
#include <bit>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "index/hdnh/detail.hpp"

namespace pmhash::hdnh {

using common::load_word;
using common::Slot;
using common::store_word;
using namespace detail;

Status Hdnh::open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out) {
  // §3.7: both cases rebuild the DRAM structures; a crash may add resize work, and a sweep.
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
  // Variable items are allocated and freed without a log (pm::Allocator::mark/unmark): after
  // a crash, the items no live slot references (written but not published, or unpublished
  // but not yet unmarked) are freed before any operation (docs/crash-testing.md).
  if (!clean && ctx.items.variable()) sweep_after_crash(ctx, *h);
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

namespace {

// Runs fn(0) .. fn(n - 1) on n threads (inline when n is 1).
template <class Fn>
void on_threads(unsigned n, Fn fn) {
  if (n <= 1) return fn(0u);
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < n; ++t) ts.emplace_back(fn, t);
  for (auto& t : ts) t.join();
}

// Records between the two recovery passes: found[t][q] holds what thread t found for
// hot-bucket partition q.
using Found = std::vector<std::vector<std::vector<Hdnh::HotRecord>>>;

// Bytes of hot buckets (all levels) per partition: the fill of one partition writes a
// window of the hot table this small, so its lines and page translations stay in the
// core's L2 while the records land in it.
constexpr uint64_t kWindowBytes = 512 << 10;

}  // namespace

// §3.7: one traversal of the table rebuilds the OCF; the hot table is then filled from what
// it found. The paper merges the two; here they are two passes so that each recovery thread
// fills only the hot buckets it owns, with plain stores (a CAS per record into random
// buckets shared by all threads was three quarters of the rebuild), and one window of them
// at a time: the traversal sorts the records into small partitions of the hot table (a
// bucket sort on the way), so the fill writes each window of hot buckets from the cache
// instead of missing in DRAM and the TLB on every record.
void Hdnh::rebuild_dram() {
  const LevelSet& set = *levels_.load();
  const unsigned nt = cfg_.recovery_threads;
  const bool hot = cfg_.replacement != Replacement::kOff;
  const unsigned parts = hot ? recovery_parts(set, nt) : 0;
  Found found(nt, std::vector<std::vector<HotRecord>>(parts));
  std::vector<int64_t> items(nt);
  on_threads(nt, [&](unsigned t) {
    items[t] = rebuild_ocf(set, t, nt, parts, hot ? &found[t] : nullptr);
  });
  auto t0 = std::chrono::steady_clock::now();
  if (hot) on_threads(nt, [&](unsigned p) { fill_hot_partition(set, found, p, parts / nt); });
  recovery_hot_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  base_items_ = std::accumulate(items.begin(), items.end(), int64_t{0});
}

// Partitions of the hot table for the fill: nt times k, each about kWindowBytes of hot
// buckets and at least one bottom-level bucket; thread p fills partitions [p k, (p+1) k).
unsigned Hdnh::recovery_parts(const LevelSet& set, unsigned nt) const {
  uint64_t bytes = 0;
  for (int i = 0; i < set.n; ++i) bytes += set.lv[i]->hot.bytes;
  uint64_t window = kWindowBytes;
#ifdef PMHASH_CRASH_HOOKS
  if (test_window_bytes != 0) window = test_window_bytes;
#endif
  uint64_t k = std::max<uint64_t>(1, bytes / (uint64_t{nt} * window));
  k = std::min<uint64_t>({k, std::max<uint64_t>(1, set.lv[1]->nbuckets / nt), 4096});
  return static_cast<unsigned>(nt * k);
}

// Hot-bucket partitions. A key's hot bucket in a level is (segment, bucket in segment), the
// segment fast_range(h1 >> 32, segments): the levels have M, 2M (and 4M) segments, so the
// key's segment in a bigger level divided by 2 (4) is its segment in the bottom level, and
// two keys that share a hot bucket in any level share it in the bottom level. Partitioning
// the bottom level's hot buckets into ranges therefore gives each partition its own hot
// buckets in every level (and a range of partitions, one thread's, its own too).
unsigned Hdnh::hot_partition(const LevelSet& set, const Hashed& k, unsigned parts) const {
  const Level& smallest = *set.lv[1];
  return static_cast<unsigned>(hot_bucket(smallest, k) * parts / smallest.nbuckets);
}

#ifdef PMHASH_CRASH_HOOKS
uint64_t Hdnh::test_hot_bucket(std::string_view key, int level) const {
  return hot_bucket(*levels_.load()->lv[level], hashed(key));
}
unsigned Hdnh::test_hot_partition(std::string_view key, unsigned parts) const {
  return hot_partition(*levels_.load(), hashed(key), parts);
}
unsigned Hdnh::test_recovery_parts(unsigned nt) const {
  return recovery_parts(*levels_.load(), nt);
}
#endif

// Thread t's share of the traversal: the OCF entries of its buckets (every level's buckets
// split in nt ranges), and the records, sorted by hot partition, for the hot table.
int64_t Hdnh::rebuild_ocf(const LevelSet& set, unsigned t, unsigned nt, unsigned parts,
                          std::vector<std::vector<HotRecord>>* found) const {
  int64_t n = 0;
  if (found != nullptr) {  // room for a full share: only the pages written are touched
    uint64_t slots = 0;
    for (int i = 0; i < set.n; ++i) slots += set.lv[i]->nbuckets * kSlots / nt;
    for (auto& f : *found) f.reserve(slots / parts + 16);
  }
  for (int i = 0; i < set.n; ++i) {
    Level& l = *set.lv[i];
    uint64_t per = (l.nbuckets + nt - 1) / nt;
    uint64_t end = std::min(l.nbuckets, (t + 1) * per);
    for (uint64_t b = t * per; b < end; ++b) {
      if (!bucket_live(l, b)) continue;
      const Bucket& bk = l.buckets[b];
      for (uint64_t bits = bk.bitmap & 0xFF; bits; bits &= bits - 1) {
        int s = std::countr_zero(bits);
        Hashed k = hashed_slot(bk.slots[s].key);
        // No reader yet (open() returns the index after the rebuild): no change to count.
        l.ocf[b * kSlots + s].store(ocf::kValid | k.fp, std::memory_order_relaxed);
        ++n;
        if (found != nullptr)
          (*found)[hot_partition(set, k, parts)].push_back(
              {k.h1, bk.slots[s].key, bk.slots[s].value});
      }
    }
  }
  return n;
}

// Thread p's partitions of the hot table, one window at a time: the records every thread
// found for it, each into the first empty slot of its hot bucket in the first level that
// has one (a rebuild does not evict: that would only churn). No other thread writes these
// buckets, and none reads them yet.
void Hdnh::fill_hot_partition(const LevelSet& set, const Found& found, unsigned p, unsigned k) {
  constexpr size_t kAhead = 8;  // records whose top-level hot buckets are prefetched
  pm::Epochs::Guard guard(epochs_, threads_.id());
  const hot::Table& first = set.lv[0]->hot;
  const unsigned parts = k * unsigned(found.size());
  for (unsigned q = p * k; q < (p + 1) * k; ++q) {
    prefault_window(set, q, parts);
    for (const auto& per_thread : found) {
      const std::vector<HotRecord>& recs = per_thread[q];
      for (size_t i = 0; i < recs.size(); ++i) {
        if (i + kAhead < recs.size()) {
          uint64_t b = hot_bucket(*set.lv[0], Hashed{recs[i + kAhead].h1, 0, 0, 0});
          __builtin_prefetch(first.line0(b), 1);
          __builtin_prefetch(first.payload(b, 0), 1);
        }
        hot_place(set, recs[i]);
      }
    }
  }
}

// Faults in partition q's hot buckets in every level, writable, just before they are
// filled: the kernel's zeroing leaves the window in this core's cache, and no page is first
// read as the shared zero page (the fill reads a slot before writing it: that would cost a
// second fault and a TLB shootdown). Partition q is the bottom level's buckets [lo, hi); in
// a level with f times its segments they are in segments f (lo / m) .. f ((hi - 1) / m + 1).
void Hdnh::prefault_window(const LevelSet& set, unsigned q, unsigned parts) const {
  const Level& bottom = *set.lv[1];
  uint64_t lo = (bottom.nbuckets * q + parts - 1) / parts;  // first b with b parts / N >= q
  uint64_t hi = (bottom.nbuckets * (q + 1) + parts - 1) / parts;
  if (lo >= hi) return;
  for (int i = 0; i < set.n; ++i) {
    const Level& l = *set.lv[i];
    uint64_t f = l.segments / bottom.segments;
    uint64_t from = f * (lo / m_) * m_, to = std::min(l.nbuckets, f * ((hi - 1) / m_ + 1) * m_);
    hot::prefault_pages(l.hot.base, from * l.hot.s.stride, to * l.hot.s.stride);
  }
}

// One record into the first empty slot of its hot buckets, top level first.
void Hdnh::hot_place(const LevelSet& set, const HotRecord& r) {
  for (int j = 0; j < set.n; ++j) {
    Level& l = *set.lv[j];
    uint64_t b = hot_bucket(l, Hashed{r.h1, 0, 0, 0});
    for (int e = 0; e < cfg_.hot_slots; ++e) {
      if (l.hot.meta(b, e).load(std::memory_order_relaxed) != 0) continue;
      hot::Payload p;
      p.w[0] = r.vw;  // fixed: the value itself
      if (items_.variable()) {
        std::string_view key;
        std::string value;
        if (!items_.item_key(r.vw, &key) || !items_.read_value(r.vw, &value)) return;
        p = hot_payload(key, value);
      }
      hot_store(l.hot, b, e, r.kw, p);
      l.hot.meta(b, e).store(hot::kVersionOne | hot::kValid, std::memory_order_relaxed);
      return;
    }
  }
}

}  // namespace pmhash::hdnh
