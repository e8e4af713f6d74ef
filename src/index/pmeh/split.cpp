// PMEH's multisplit with gradual splitting (§III-E, Figs. 8-10): a full segment splits out
// one child at a time (the splitting bitmap), or the directory expands first; the split
// record makes each step redoable after a crash (§III-F case 2).
#include <bit>
#include <cstddef>
#include <cstring>

#include "index/pmeh/pmeh.hpp"

namespace pmhash::pmeh {

using common::load_word;
using common::Slot;
using common::store_word;

// Inside zone z. A directory expansion is left to the caller (*expand: the directory to
// expand from), which does it after leaving the zone.
Status Pmeh::split_or_expand(uint64_t seg_off, uint64_t h, uint32_t z, ZoneMode m,
                             uint64_t* expand) {
  uint64_t kd;
  uint32_t child = 0;
  {
    ZoneLock zl(zones_.lock(z), m == ZoneMode::kShared);
    kd = latest_.load(std::memory_order_acquire);
    Directory* d = dir(kd);  // not freed while this thread is in the zone (zone_segment)
    if (d == nullptr) return Status::Ok();  // retry
    if (load_word(d->entries[entry_of(h, d->depth)]) == 0) update_zone_entries(z, kd);
    if (load_word(d->entries[entry_of(h, d->depth)]) != seg_off) return Status::Ok();  // retry
    uint64_t meta = load_word(segment(seg_off)->meta);
    uint32_t l = seg::depth(meta);
    if (d->depth >= l + shift_) {
      // Gradual splitting: the child the key belongs to if it is still inside, else the
      // first child not split out yet.
      child = static_cast<uint32_t>((h << l) >> (64 - shift_));
      uint32_t bits = seg::bitmap(meta);
      if (child == 0 || (bits & (1u << child)))
        for (child = 1; bits & (1u << child); ++child) {
        }
      return split_out(seg_off, kd, child, z, m);
    }
  }
  *expand = kd;
  return Status::Ok();
}

// One gradual split step: child `child` of the segment becomes a segment of its own.
// The new segment is built and persisted off to the side, then published with the split
// record in one commit; finish_split() points the entries at it, records the child in the
// splitting bitmap (or, with the last child, deepens the segment) and removes the moved
// records from the old segment — and recovery redoes exactly that (§III-F case 2).
Status Pmeh::split_out(uint64_t seg_off, uint64_t k, uint32_t child, uint32_t z, ZoneMode m) {
  SegmentHeader* s = segment(seg_off);
  Bucket* bs = buckets(s);
  uint64_t total = nbuckets_ + kStash;
  if (m == ZoneMode::kShared)
    for (uint64_t i = 0; i < total; ++i) lock_bucket(bs[i], m);
  auto unlock_all = [&] {
    if (m == ZoneMode::kShared)
      for (uint64_t i = total; i-- > 0;) unlock_bucket(bs[i]);
  };
  uint64_t meta = load_word(s->meta);
  note_split_fill(bs, total);
  pm::Reservation r = alloc_.reserve(seg_bytes_);
  if (!r) {
    unlock_all();
    return {Code::kPoolFull, "no space for a pmeh segment"};
  }
  uint64_t moved = 0;
  if (!build_child(s, meta, child, pool_.ptr<SegmentHeader>(r.off), &moved)) {
    // Cannot happen with a good hash: the child holds ~1/x of a full segment.
    alloc_.cancel(r);
    unlock_all();
    return {Code::kPoolFull, "pmeh: a split could not place the records of a child"};
  }
  publish_split(z, k, seg_off, r, child, meta);
  finish_split(z);
  unlock_all();
  splits_.fetch_add(1, std::memory_order_relaxed);
  moved_.fetch_add(moved, std::memory_order_relaxed);
  return Status::Ok();
}

// The fullest a segment was when it split, in per mille of its slots, kept as the lowest over
// the run (counter split_fill_min): a gradual split moves 1/x of the records out, so a
// segment that split again right away (buckets still full) would show here (Fig. 15).
void Pmeh::note_split_fill(const Bucket* bs, uint64_t total) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < total; ++i) n += std::popcount(word::alloc(load_word(bs[i].word0)));
  uint64_t permille = n * 1000 / (total * kBucketSlots);
  uint64_t cur = split_fill_min_.load(std::memory_order_relaxed);
  while (permille < cur &&
         !split_fill_min_.compare_exchange_weak(cur, permille, std::memory_order_relaxed)) {
  }
}

// The new segment n for child `child` of s (metadata meta): the child's records placed as
// an insert would place them, with plain stores (n is private until published), persisted
// once at the end. Only bytes that carry information are written and flushed: the header
// line, each bucket's metadata (bytes 0..31: allocation bitmap, fingerprints, overflow
// metadata — zero for an empty bucket) and the slots that hold records (filled from slot 0
// up). A slot without its allocation bit is never read, so the stale bytes of the
// reservation need neither zeroing nor a flush (before: the whole segment, 32 KB, for a
// child that holds ~1/x of a full one).
bool Pmeh::build_child(SegmentHeader* s, uint64_t meta, uint32_t child, SegmentHeader* n,
                       uint64_t* moved) {
  uint32_t l = seg::depth(meta);
  std::memset(static_cast<void*>(n), 0, sizeof(SegmentHeader));
  for (uint64_t i = 0; i < nbuckets_ + kStash; ++i)
    std::memset(static_cast<void*>(&buckets(n)[i]), 0, offsetof(Bucket, slots));
  n->meta = seg::make(l + shift_, (seg::pattern(meta) << shift_) | child, 0);
  n->lock_gen = gen_;
  Bucket* bs = buckets(s);
  for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) {
    for (uint32_t a = word::alloc(load_word(bs[i].word0)); a; a &= a - 1) {
      const Slot& sl = bs[i].slots[std::countr_zero(a)];
      uint64_t h = items_.slot_hash(sl.key);
      if (!covers(meta, h) || ((h << l) >> (64 - shift_)) != child) continue;
      if (items_.variable()) alloc_.note_reachable(sl.value);  // the sweep after a crash
      if (!place_moved(buckets(n), sl, h)) return false;
      ++*moved;
    }
  }
  if (!PMHASH_MUTATION(pool_, kMutationSplitUnpersisted)) persist_child(n);
  return true;
}

// Header line, then per bucket its metadata and used slots (contiguous from slot 0).
void Pmeh::persist_child(SegmentHeader* n) {
  const pm::Persister& p = pool_.persister();
  p.flush(n, pm::kCacheLine);
  Bucket* nb = buckets(n);
  for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) {
    int used = std::popcount(word::alloc(nb[i].word0));
    p.flush(&nb[i], offsetof(Bucket, slots) + used * sizeof(common::Slot));
  }
  p.fence();
}

// Dash's placement in a private segment: balanced insert into the home bucket or its
// neighbour, else a stash bucket with an overflow fingerprint (or count) in the home bucket.
bool Pmeh::place_moved(Bucket* nb, const Slot& sl, uint64_t h) {
  uint64_t b = bucket_of(h), b1 = (b + 1) % nbuckets_;
  uint8_t fp = static_cast<uint8_t>(h >> 32);
  auto put_in = [&](Bucket& bk, bool mem) {
    uint64_t bw = bk.word0;
    uint32_t ba = word::alloc(bw);
    if (ba == (1u << kBucketSlots) - 1) return false;
    int t = std::countr_one(ba);
    bk.slots[t] = sl;
    bk.fp[t] = fp;
    bk.word0 =
        word::with_bits(bw, ba | (1u << t), mem ? word::member(bw) | (1u << t) : word::member(bw));
    return true;
  };
  int c0 = std::popcount(word::alloc(nb[b].word0)), c1 = std::popcount(word::alloc(nb[b1].word0));
  if ((c0 <= c1 && put_in(nb[b], false)) || put_in(nb[b1], true) || put_in(nb[b], false))
    return true;
  for (int st = 0; st < kStash; ++st) {
    Bucket& sb = nb[nbuckets_ + st];
    if (word::alloc(sb.word0) == (1u << kBucketSlots) - 1) continue;
    Bucket& hb = nb[b];
    int free_ofp = std::countr_one(static_cast<unsigned>(hb.obits & 0xF));
    if (free_ofp < kOverflow) {
      hb.ofp[free_ofp] = fp;
      hb.ostash = static_cast<uint8_t>(hb.ostash | (st << (2 * free_ofp)));
      hb.obits = static_cast<uint8_t>(hb.obits | (1u << free_ofp));
    } else {
      hb.ocount++;
    }
    return put_in(sb, false);
  }
  return false;
}

// The commit point of a split: the new segment's allocation and zone z's split record.
void Pmeh::publish_split(uint32_t z, uint64_t k, uint64_t seg_off, const pm::Reservation& r,
                         uint32_t child, uint64_t meta) {
  SplitRecord& rec = pool_.ptr<SplitRecord>(root_->split_log)[z];
  pm::Tx tx(alloc_);
  tx.publish(r);
  tx.store(&rec.dir, k);
  tx.store(&rec.old_seg, seg_off);
  tx.store(&rec.new_seg, r.off);
  tx.store(&rec.child, child);
  tx.store(&rec.old_meta, meta);
  tx.store(&rec.flag, 1);
  tx.commit();
}

void Pmeh::finish_split(uint32_t z) {
  SplitRecord& rec = pool_.ptr<SplitRecord>(root_->split_log)[z];
  if (rec.flag == 0) return;
  const pm::Persister& p = pool_.persister();
  uint64_t old_meta = rec.old_meta;
  uint32_t child = static_cast<uint32_t>(rec.child);
  uint32_t l = seg::depth(old_meta);
  uint64_t pat = seg::pattern(old_meta);
  Directory* d = dir(rec.dir);  // not freed: that needs a fill of this zone, after this
  if (d == nullptr) return;
  // 1. The child's entries point at the new segment.
  uint64_t span = d->depth - l - shift_;
  uint64_t first = ((pat << shift_) | child) << span;
  for (uint64_t t = first; t < first + (uint64_t{1} << span); ++t)
    store_word(d->entries[t], rec.new_seg);
  p.flush(&d->entries[first], 8ull << span);
  p.fence();
  // 2. The splitting bitmap records the child; with the last one the local depth grows.
  SegmentHeader* s = segment(rec.old_seg);
  uint32_t bits = seg::bitmap(old_meta) | (1u << child);
  uint32_t all = ((1u << (1u << shift_)) - 1) & ~1u;
  uint64_t nm =
      (bits & all) == all ? seg::make(l + shift_, pat << shift_, 0) : seg::make(l, pat, bits);
  store_word(s->meta, nm);
  p.persist(&s->meta, 8);
  // 3. The moved records leave the old segment.
  Bucket* bs = buckets(s);
  for (uint64_t i = 0; i < nbuckets_ + kStash; ++i) {
    uint64_t w = load_word(bs[i].word0);
    uint32_t a = word::alloc(w), mb = word::member(w), keep = a;
    for (uint32_t x = a; x; x &= x - 1) {
      int j = std::countr_zero(x);
      uint64_t h = items_.slot_hash(bs[i].slots[j].key);
      if (((h << l) >> (64 - shift_)) == child) keep &= ~(1u << j);
    }
    if (keep == a) continue;
    store_word(bs[i].word0, word::with_bits(w, keep, mb & keep));
    p.flush(&bs[i].word0, 8);
  }
  p.fence();
  // 4. The moved stashed records' overflow fingerprints (or counts) leave too (Dash).
  trim_overflow(s);
  store_word(rec.flag, 0);
  p.persist(&rec.flag, 8);
}

}  // namespace pmhash::pmeh
