// The non-volatile table (§3.1, Fig. 2): its creation, the levels, the candidate buckets,
// and the failure-atomic bitmap commit.
#include <algorithm>
#include <bit>
#include <cstring>

#include "index/hdnh/detail.hpp"

namespace pmhash::hdnh {

using common::load_word;
using common::Slot;
using common::store_word;
using namespace detail;

Status Hdnh::layout(const Options& o, const common::Params& p, common::Params* layout) {
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

Level* Hdnh::make_level(uint64_t off, uint64_t segments) {
  auto* l = new Level;
  l->off = off;
  l->buckets = pool_.ptr<Bucket>(off);
  l->segments = segments;
  l->nbuckets = segments * m_;
  // Zeroed pages (all-zero atomics), first touched by whoever writes them.
  l->ocf = static_cast<std::atomic<uint16_t>*>(
      common::map_zeroed(l->nbuckets * kSlots * sizeof(uint16_t), /*huge=*/true));
  l->changes = static_cast<std::atomic<uint32_t>*>(
      common::map_zeroed(l->nbuckets * sizeof(uint32_t), /*huge=*/true));
  if (cfg_.replacement != Replacement::kOff) {
    l->hot.s = hot::shape(cfg_.hot_slots, items_.variable());
    l->hot.bytes = l->nbuckets * l->hot.s.stride;
    l->hot.base = static_cast<char*>(common::map_zeroed(l->hot.bytes, /*huge=*/true));
    if (cfg_.replacement == Replacement::kLru)
      l->hot_stamp.reset(new std::atomic<uint64_t>[l->nbuckets * uint64_t(cfg_.hot_slots)]());
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
  // not cleared: the whole level is freed when the resize ends). for_each asks beside a
  // resize: the root's words by load_word.
  return !(load_word(root_->level_number) == 3 && l.off == load_word(root_->bottom.off) &&
           b < load_word(root_->rehash_progress));
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

// Slot writers of one bucket change disjoint bits: one atomic RMW, persisted (both formats:
// a variable item's allocation is not logged, see Hdnh::open's sweep).
void Hdnh::commit_bitmap(Bucket& b, uint64_t set, uint64_t clear) {
  std::atomic_ref<uint64_t> w(b.bitmap);
  if (set != 0 && clear != 0)
    w.fetch_xor(set | clear);  // update: old and new bits flip in one store (§3.6)
  else if (set != 0)
    w.fetch_or(set);
  else
    w.fetch_and(~clear);
  pool_.persister().persist(&b.bitmap, 8);
}

}  // namespace pmhash::hdnh
