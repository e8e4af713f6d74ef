// Resizing (§2.2 Level hashing, §3.7): a new top level, the bottom level rehashed into it
// bucket by bucket with a persisted progress record.
#include <cstring>

#include "index/hdnh/detail.hpp"

namespace pmhash::hdnh {

using common::load_word;
using common::Slot;
using common::store_word;
using namespace detail;

// Level-hashing resize: a new top level twice the old top is attached, the bottom level is
// rehashed into it bucket by bucket, then the old top becomes the bottom. Writers wait
// (exclusive lock); readers continue (they search old levels before the new one).
Status Hdnh::resize(uint64_t seen_seq) {
  std::unique_lock<std::shared_mutex> xl(resize_mu_);
  if (resize_seq_.load() != seen_seq) return Status::Ok();  // another writer resized
  if (root_->resizing_flag == 0) {
    store_word(root_->resizing_flag, 1);  // level_number stays 2: starting
    pool_.persister().persist(&root_->resizing_flag, 8);
    Status s = attach_new_top();
    if (!s.ok()) {
      store_word(root_->resizing_flag, 0);
      pool_.persister().persist(&root_->resizing_flag, 8);
      return s;
    }
  }
  return rehash();
}

Status Hdnh::attach_new_top() {
  uint64_t segs = root_->top.segments * 2;
  uint64_t bytes = segs * m_ * sizeof(Bucket);
  pm::Reservation r = alloc_.reserve(bytes);
  if (!r) return {Code::kPoolFull, "no space for a " + std::to_string(bytes) + "-byte hdnh level"};
  const pm::Persister& p = pool_.persister();
  std::memset(pool_.ptr<char>(r.off), 0, bytes);
  p.flush(pool_.ptr<char>(r.off), bytes);
  p.fence();
  pm::Tx tx(alloc_);
  tx.publish(r);
  tx.store(&root_->new_top.off, r.off);
  tx.store(&root_->new_top.segments, segs);
  tx.store(&root_->rehash_progress, 0);
  tx.store(&root_->level_number, 3);
  tx.commit();
  const LevelSet* set = levels_.load();
  publish_levels({set->lv[0], set->lv[1], make_level(r.off, segs)});
  resize_seq_.fetch_add(1);  // odd: three levels
  return Status::Ok();
}

Status Hdnh::rehash() {
  const LevelSet* set = levels_.load();
  Level* top = set->lv[0];
  Level* bottom = set->lv[1];
  Level* nt = set->lv[2];
  for (uint64_t b = root_->rehash_progress; b < bottom->nbuckets; ++b)
    if (!rehash_bucket(b))
      return {Code::kPoolFull, "hdnh: a resize could not place a record in the new level"};
  // Readers stop searching the old bottom first: every record is in the two remaining
  // levels (all bottom buckets rehashed, persisted), so the DRAM level set may change before
  // the PM root; a crash now recovers the same records (rehash_progress is at the end).
  publish_levels({nt, top});
  resize_seq_.fetch_add(1);  // even: two levels
  // Then the old top becomes the bottom, the new level the top, and the old bottom is freed,
  // in one commit (its reuse waits for the readers that may still hold the old level set).
  pm::Tx tx(alloc_);
  tx.free(bottom->off);
  tx.store(&root_->bottom.off, root_->top.off);
  tx.store(&root_->bottom.segments, root_->top.segments);
  tx.store(&root_->top.off, root_->new_top.off);
  tx.store(&root_->top.segments, root_->new_top.segments);
  tx.store(&root_->new_top.off, 0);
  tx.store(&root_->new_top.segments, 0);
  tx.store(&root_->rehash_progress, 0);
  tx.store(&root_->level_number, 2);
  tx.store(&root_->resizing_flag, 0);
  tx.commit();
  epochs_.retire([this, bottom] {
    hot_free_level(*bottom);
    delete bottom;
  });
  resizes_.fetch_add(1);
  return Status::Ok();
}

// Moves one bottom bucket's records into the new top level: slots claimed first (all or
// none), written and persisted, new bitmaps persisted, then the progress record. A crash
// before the progress record leaves copies in both levels: fix_partial_bucket().
bool Hdnh::rehash_bucket(uint64_t b) {
  const LevelSet* set = levels_.load();
  Level& bottom = *set->lv[1];
  Level& nt = *set->lv[2];
  const pm::Persister& p = pool_.persister();
  const Bucket& src = bottom.buckets[b];
  struct Move {
    int s;
    Loc dst;
    uint8_t fp;
  };
  Move moves[kSlots];
  int n = 0;
  for (uint64_t bits = src.bitmap & 0xFF; bits; bits &= bits - 1) {
    int s = std::countr_zero(bits);
    Hashed k = hashed_slot(src.slots[s].key);
    LevelSet only_new;
    only_new.lv[0] = only_new.lv[1] = &nt;
    only_new.n = 2;
    Loc dst;
    if (!claim_free(only_new, k, &dst)) {
      for (int i = 0; i < n; ++i) unlock_slot(moves[i].dst, false, 0);
      return false;
    }
    moves[n++] = {s, dst, k.fp};
  }
  for (int i = 0; i < n; ++i) {
    Slot& d = moves[i].dst.level->buckets[moves[i].dst.bucket].slots[moves[i].dst.slot];
    store_word(d.key, src.slots[moves[i].s].key);
    store_word(d.value, src.slots[moves[i].s].value);
    p.flush(&d, sizeof d);
  }
  p.fence();
  for (int i = 0; i < n; ++i) {
    Bucket& db = nt.buckets[moves[i].dst.bucket];
    std::atomic_ref<uint64_t>(db.bitmap).fetch_or(bit(moves[i].dst.slot));
    p.flush(&db.bitmap, 8);
  }
  if (!PMHASH_MUTATION(pool_, kMutationProgressBeforeBitmaps)) p.fence();
  store_word(root_->rehash_progress, b + 1);
  p.persist(&root_->rehash_progress, 8);
  // DRAM: the new copies become visible before the old ones disappear.
  for (int i = 0; i < n; ++i) unlock_slot(moves[i].dst, true, moves[i].fp);
  for (int s = 0; s < kSlots; ++s) {
    std::atomic<uint16_t>& e = bottom.ocf[b * kSlots + s];
    uint16_t w = e.load();
    if (ocf::valid(w)) ocf::release_entry(e, bottom.changes[b], ocf::next(w, false, 0));
  }
  rehashed_.fetch_add(n, std::memory_order_relaxed);
  return true;
}

// Recovery of a crash inside rehash_bucket(): records of the bucket in progress that
// already reached the new level are cleared in the bottom (PM only; before the OCF exists).
void Hdnh::fix_partial_bucket() {
  const LevelSet* set = levels_.load();
  Level& bottom = *set->lv[1];
  Level& nt = *set->lv[2];
  uint64_t b = root_->rehash_progress;
  if (b >= bottom.nbuckets) return;
  Bucket& src = bottom.buckets[b];
  uint64_t clear = 0;
  for (uint64_t bits = src.bitmap & 0xFF; bits; bits &= bits - 1) {
    int s = std::countr_zero(bits);
    const Slot& sl = src.slots[s];
    Candidates c = candidates(nt, hashed_slot(sl.key));
    for (int j = 0; j < c.n; ++j) {
      const Bucket& d = nt.buckets[c.b[j]];
      for (uint64_t db = d.bitmap & 0xFF; db; db &= db - 1) {
        const Slot& ds = d.slots[std::countr_zero(db)];
        if (ds.key == sl.key && ds.value == sl.value) clear |= bit(s);
      }
    }
  }
  if (clear == 0) return;
  store_word(src.bitmap, src.bitmap & ~clear);
  pool_.persister().persist(&src.bitmap, 8);
}

}  // namespace pmhash::hdnh
