// Recovery (§3.7): open checks the root and finishes an interrupted resize; one traversal
// of the table rebuilds the OCF and the hot table.
#include <bit>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "index/hdnh/detail.hpp"

// XXH3 inlined here (XXH_INLINE_ALL: static functions under their own names) for the
// traversal's hash of every record: the same function common::hash_word calls in libxxhash,
// without a call through the PLT per record.
#define XXH_INLINE_ALL
#include <xxhash.h>

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

// The first of n items (segments or buckets, in order) that falls in partition q of parts:
// item i is in partition i parts / n, so this is ceil(n q / parts).
uint64_t partition_start(uint64_t n, unsigned q, unsigned parts) {
  return (n * q + parts - 1) / parts;
}

// Records between the two recovery passes: found[t]'s list q holds what thread t found for
// hot-bucket partition q and could not place during its traversal.
using Found = std::vector<std::unique_ptr<RecordLists>>;

// Bytes of hot buckets (all levels) per partition: the fill of one partition writes a
// window of the hot table this small, so its lines and page translations stay in the
// core's L2 while the records land in it.
constexpr uint64_t kWindowBytes = 512 << 10;

}  // namespace

// §3.7: one traversal of the table rebuilds the OCF and the hot table. Each recovery thread
// owns a range of hot-bucket partitions and writes their hot buckets with plain stores (a
// CAS per record into buckets shared by all threads was three quarters of the rebuild), one
// window at a time: it scans the table segments that line up with a partition, so about
// half of the records (those in their first hash's segment) have their hot bucket in the
// window just faulted in and go straight into it. The others are sorted into lists per
// partition (a bucket sort on the way) and filled in a second pass, again window by window,
// so no record costs a cache and TLB miss in a random hot bucket.
void Hdnh::rebuild_dram() {
  const LevelSet& set = *levels_.load();
  const unsigned nt = cfg_.recovery_threads;
  const bool hot = cfg_.replacement != Replacement::kOff;
  const unsigned parts = recovery_parts(set, nt), k = parts / nt;
  Found found(nt);
  std::vector<int64_t> items(nt);
  on_threads(nt, [&](unsigned t) {
    pm::Epochs::Guard guard(epochs_, threads_.id());
    if (hot) found[t] = std::make_unique<RecordLists>(parts, thread_slots(set, t, k, parts));
    for (unsigned q = t * k; q < (t + 1) * k; ++q)
      items[t] += rebuild_partition(set, q, parts, found[t].get());
  });
  auto t0 = std::chrono::steady_clock::now();
  if (hot) on_threads(nt, [&](unsigned p) { fill_hot_partition(set, found, p, k); });
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

// The slots thread t's traversal reads (partitions [t k, (t+1) k), rebuild_partition): a
// bound on the records it lists.
uint64_t Hdnh::thread_slots(const LevelSet& set, unsigned t, unsigned k, unsigned parts) const {
  const uint64_t segs = set.lv[1]->segments;
  const uint64_t s0 = partition_start(segs, t * k, parts);
  const uint64_t s1 = partition_start(segs, (t + 1) * k, parts);
  uint64_t slots = 0;
  for (int i = 0; i < set.n; ++i) slots += set.lv[i]->segments / segs * (s1 - s0) * m_ * kSlots;
  return slots;
}

// Partition q's share of the traversal: the bottom level's segments whose first bucket is in
// q (a segment s is scanned by partition s parts / M), and the segments of the bigger levels
// over them (f s .. f s + f - 1 with f times the segments). Writes their OCF entries; with
// the hot table on, q's window is faulted in first and each record goes into it now if its
// hot bucket is in q, else into the list of its partition.
int64_t Hdnh::rebuild_partition(const LevelSet& set, unsigned q, unsigned parts,
                                RecordLists* found) {
  constexpr uint64_t kBucketsAhead = 8;  // table buckets prefetched ahead of the scan
  const Level& bottom = *set.lv[1];
  const uint64_t segs = bottom.segments;
  const uint64_t s0 = partition_start(segs, q, parts), s1 = partition_start(segs, q + 1, parts);
  Window w;
  w.lo = partition_start(bottom.nbuckets, q, parts);
  w.hi = partition_start(bottom.nbuckets, q + 1, parts);
  w.parts = parts;
  w.found = found;
  if (found != nullptr) prefault_window(set, q, parts);
  int64_t n = 0;
  for (int i = 0; i < set.n; ++i) {
    Level& l = *set.lv[i];
    const uint64_t f = l.segments / segs, end = f * s1 * m_;
    for (uint64_t b = f * s0 * m_; b < end; ++b) {
      if (b + kBucketsAhead < end) {  // the bitmap and slot lines (0 .. 143) of a later bucket
        const char* next = reinterpret_cast<const char*>(&l.buckets[b + kBucketsAhead]);
        for (int line = 0; line < 3; ++line) __builtin_prefetch(next + 64 * line);
      }
      if (bucket_live(l, b)) n += rebuild_bucket(set, l, b, w);
    }
  }
  if (found != nullptr) place_rest(set, w);
  return n;
}

// One table bucket: its OCF entries, and its records for the hot table (window w or later).
int Hdnh::rebuild_bucket(const LevelSet& set, Level& l, uint64_t b, Window& w) {
  const Bucket& bk = l.buckets[b];
  const uint64_t bitmap = bk.bitmap & 0xFF;
  for (uint64_t bits = bitmap; bits; bits &= bits - 1) {
    int s = std::countr_zero(bits);
    const uint64_t kw = bk.slots[s].key;
    // Items::slot_hash, inlined (h2 is not needed here).
    const Hashed k{items_.variable() ? kw : XXH3_64bits_withSeed(&kw, 8, 0), 0, kw, 0};
    // No reader yet (open() returns the index after the rebuild): no change to count.
    l.ocf[b * kSlots + s].store(ocf::kValid | uint8_t(k.h1), std::memory_order_relaxed);
    if (w.found == nullptr) continue;
    HotRecord r{k.h1, kw, bk.slots[s].value};
    uint64_t hb = hot_bucket(*set.lv[1], k);
    if (hb >= w.lo && hb < w.hi) {  // its partition (hot_partition) is q
      place_ahead(set, w, r);
    } else {
      w.found->push(static_cast<unsigned>(hb * w.parts / set.lv[1]->nbuckets), r);
    }
  }
  return std::popcount(bitmap);
}

// A record for window w: its hot buckets are prefetched now, and it is placed kAhead
// records later (the window's pages were just zeroed, by stores that leave them out of the
// cache), in place of the record kAhead before it.
void Hdnh::place_ahead(const LevelSet& set, Window& w, const HotRecord& r) {
  HotRecord& slot = w.ahead[w.seen++ % Window::kAhead];
  if (w.seen > Window::kAhead) hot_place(set, slot);
  prefetch_hot(set, r.h1);
  slot = r;
}

// The window's records still waiting in place_ahead, oldest first.
void Hdnh::place_rest(const LevelSet& set, Window& w) {
  uint64_t from = w.seen > Window::kAhead ? w.seen - Window::kAhead : 0;
  for (uint64_t i = from; i < w.seen; ++i) hot_place(set, w.ahead[i % Window::kAhead]);
  w.seen = 0;
}

// The lines hot_place reads and writes first: the key's hot bucket (head and payload) in
// the levels tried first.
void Hdnh::prefetch_hot(const LevelSet& set, uint64_t h1) const {
  for (int j = 0; j < 2; ++j) {
    const hot::Table& t = set.lv[j]->hot;
    uint64_t b = hot_bucket(*set.lv[j], Hashed{h1, 0, 0, 0});
    __builtin_prefetch(t.line0(b), 1);
    __builtin_prefetch(t.payload(b, 0), 1);
  }
}

// Thread p's partitions of the hot table, one window at a time: the records the traversal
// (every thread's) listed for them, each placed kAhead records after its hot buckets were
// prefetched. No other thread writes these buckets, and none reads them yet.
void Hdnh::fill_hot_partition(const LevelSet& set, const Found& found, unsigned p, unsigned k) {
  pm::Epochs::Guard guard(epochs_, threads_.id());
  Window w{};
  for (unsigned q = p * k; q < (p + 1) * k; ++q) {
    for (const auto& lists : found)
      lists->for_each(q, [&](const HotRecord& r) { place_ahead(set, w, r); });
    place_rest(set, w);
  }
}

// Faults in partition q's hot buckets in every level, writable, in one call before its
// traversal: no page is first read as the shared zero page (hot_place reads a slot before
// writing it: that would cost a second fault and a TLB shootdown). Partition q is the bottom
// level's buckets [lo, hi); in a level with f times its segments they are in segments f (lo / m) ..
// f ((hi - 1) / m + 1).
void Hdnh::prefault_window(const LevelSet& set, unsigned q, unsigned parts) const {
  const Level& bottom = *set.lv[1];
  uint64_t lo = partition_start(bottom.nbuckets, q, parts);
  uint64_t hi = partition_start(bottom.nbuckets, q + 1, parts);
  if (lo >= hi) return;
  for (int i = 0; i < set.n; ++i) {
    const Level& l = *set.lv[i];
    uint64_t f = l.segments / bottom.segments;
    uint64_t from = f * (lo / m_) * m_, to = std::min(l.nbuckets, f * ((hi - 1) / m_ + 1) * m_);
    if (to > from)
      (void)common::prefault_pages(l.hot.base + from * l.hot.s.stride,
                                   (to - from) * l.hot.s.stride);
  }
}

// One record into the first empty slot of its hot buckets, top level first (a rebuild does
// not evict: that would only churn).
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
