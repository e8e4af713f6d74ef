// PMEH's segments and Dash buckets (§III-A, §III-C): bucket version locks, Dash's search,
// and its insert (balanced insert, displacement, stash) with Algorithm 1's record write.
#include <algorithm>
#include <bit>
#include <thread>

#include "index/pmeh/pmeh.hpp"

namespace pmhash::pmeh {

using common::load_word;
using common::Slot;
using common::store_word;

// A segment of local depth L covers the keys with its L-bit prefix whose child (the next
// split_shift bits) has not been split out yet.
bool Pmeh::covers(uint64_t meta, uint64_t h) const {
  uint32_t l = seg::depth(meta);
  if (l != 0 && (h >> (64 - l)) != seg::pattern(meta)) return false;
  uint32_t c = static_cast<uint32_t>((h << l) >> (64 - shift_));
  return (seg::bitmap(meta) & (1u << c)) == 0;
}

void Pmeh::lock_bucket(Bucket& b, ZoneMode m) {
  std::atomic_ref<uint64_t> w(b.word0);
  if (m == ZoneMode::kExclusive) {  // alone: the lock bit only tells readers to retry
    // Relaxed: the record stores that follow are releases, so a reader that sees them
    // sees the lock bit at its second version load.
    w.store(w.load(std::memory_order_relaxed) | word::kLock, std::memory_order_relaxed);
    return;
  }
  for (int spins = 0;; ++spins) {
    uint64_t v = w.load(std::memory_order_relaxed);
    if (!(v & word::kLock) &&
        w.compare_exchange_weak(v, v | word::kLock, std::memory_order_acquire))
      return;
    if (spins > 64) std::this_thread::yield();
    cpu_relax();
  }
}

bool Pmeh::try_lock_bucket(Bucket& b, ZoneMode m) {
  std::atomic_ref<uint64_t> w(b.word0);
  uint64_t v = w.load(std::memory_order_relaxed);
  if (v & word::kLock) return false;
  if (m == ZoneMode::kExclusive) {
    w.store(v | word::kLock, std::memory_order_relaxed);
    return true;
  }
  return w.compare_exchange_strong(v, v | word::kLock, std::memory_order_acquire);
}

void Pmeh::unlock_bucket(Bucket& b) {
  std::atomic_ref<uint64_t> w(b.word0);
  uint64_t v = w.load(std::memory_order_relaxed);
  w.store((v & ~0xFFFF'FFFFull) | ((word::version(v) + 1) & 0x7FFF'FFFFu),
          std::memory_order_release);
}

// The locks of a write (§III-C, as Dash): the key's home bucket b and its probing bucket b+1
// for the whole write; a stash bucket only while the write stores into it (lock_stash: a
// record stashed, or a stashed record updated or deleted); b+2 or b-1 only to displace.
//
// Same-key writers serialize on b. A key's records live in b, in b+1 (membership bit) or in
// a stash bucket (with an overflow fingerprint in b or b+1, or counted in b), and only a
// holder of b's lock creates, moves or removes them: the key's own writers; a displacement,
// which moves a record homed at the bucket it takes it from (b+1's own record to b+2: b+1
// held) or at the bucket it takes it to (b's borrowed record to b-1: b-1 held); and splits,
// which hold every lock. Overflow metadata in a bucket changes only under that bucket's lock.
// So the search under b and b+1 sees every record of the key without the stash locks; other
// keys' records in a stash bucket may change meanwhile (their writers hold that bucket), which
// the search skips by key. Every store into a bucket is made under its lock, so lock-free
// readers, which check each bucket's version (stash buckets too), see every change.
//
// Lock order (deadlock-free): normal buckets by index (b and b+1 as min, max), then at most one
// stash bucket, always after them; splits take every bucket of the segment in index order
// (normal buckets first: stash buckets sit after them); displacement only try-locks, so no
// one waits for a bucket while holding one later in the order.
void Pmeh::lock_buckets(SegmentHeader* s, uint64_t b, ZoneMode m, ThreadStats& ts) {
  Bucket* bs = buckets(s);
  uint64_t b1 = (b + 1) % nbuckets_;
  lock_bucket(bs[std::min(b, b1)], m);
  lock_bucket(bs[std::max(b, b1)], m);
  count_locks(ts, m, 2);
}

void Pmeh::unlock_buckets(SegmentHeader* s, uint64_t b) {
  Bucket* bs = buckets(s);
  unlock_bucket(bs[(b + 1) % nbuckets_]);
  unlock_bucket(bs[b]);
}

// A stash bucket, taken after b and b+1 (the write holds them).
void Pmeh::lock_stash(Bucket& sb, ZoneMode m, ThreadStats& ts) {
  lock_bucket(sb, m);
  count_locks(ts, m, 1);
}

// Records of bucket `b` with this membership whose fingerprint and key match.
bool Pmeh::slot_in(Bucket& b, bool membership, const Hashed& k, std::string_view key, int* slot,
                   uint64_t* vw) const {
  uint64_t w = load_word(b.word0);
  uint32_t cand = word::alloc(w) & (membership ? word::member(w) : ~word::member(w));
  for (; cand; cand &= cand - 1) {
    int i = std::countr_zero(cand);
    if (load_byte(b.fp[i]) != k.fp) continue;
    uint64_t sk = load_word(b.slots[i].key), sv = load_word(b.slots[i].value);
    if (items_.matches(sk, sv, key, k.kw)) {
      *slot = i;
      *vw = sv;
      return true;
    }
  }
  return false;
}

// Dash's search: the home bucket (records homed here), its neighbour (records with the
// membership bit), then the stash buckets the overflow fingerprints point at, and every
// stash bucket if the home bucket counts stashed records without a fingerprint. A reader
// (retry != null) checks each bucket's version before and after; a writer holds b and b+1,
// which keep the key's records still (see lock_buckets), not the stash buckets.
bool Pmeh::seg_find(SegmentHeader* s, const Hashed& k, std::string_view key, Loc* loc,
                    uint64_t* value_word, bool* retry) const {
  Bucket* bs = buckets(s);
  uint64_t b = bucket_of(k.h), b1 = (b + 1) % nbuckets_;
  auto stable = [&](Bucket& bk, auto&& body) {
    uint64_t w1 = load_word(bk.word0);
    if (retry && (w1 & word::kLock)) {
      *retry = true;
      return false;
    }
    bool r = body();
    if (retry && load_word(bk.word0) != w1) {
      *retry = true;
      return false;
    }
    return r;
  };
  int slot;
  if (stable(bs[b], [&] { return slot_in(bs[b], false, k, key, &slot, value_word); })) {
    *loc = Loc{&bs[b], slot, false, -1, nullptr};
    return true;
  }
  if (retry && *retry) return false;
  if (stable(bs[b1], [&] { return slot_in(bs[b1], true, k, key, &slot, value_word); })) {
    *loc = Loc{&bs[b1], slot, false, -1, nullptr};
    return true;
  }
  if (retry && *retry) return false;
  // Overflow fingerprints in the home bucket (membership 0) and the neighbour (1).
  bool scan_all = false;
  for (int side = 0; side < 2; ++side) {
    Bucket& ob = side == 0 ? bs[b] : bs[b1];
    bool found = stable(ob, [&] {
      uint8_t bits = load_byte(ob.obits), st = load_byte(ob.ostash);
      if (side == 0 && load_byte(ob.ocount) != 0) scan_all = true;
      for (int i = 0; i < kOverflow; ++i) {
        if (!((bits >> i) & 1) || ((bits >> (4 + i)) & 1) != side || load_byte(ob.ofp[i]) != k.fp)
          continue;
        Bucket& sb = bs[nbuckets_ + ((st >> (2 * i)) & 3) % kStash];
        uint64_t w1 = load_word(sb.word0);
        if (retry && (w1 & word::kLock)) return *retry = true, false;
        bool hit = slot_in(sb, false, k, key, &slot, value_word);
        if (retry && load_word(sb.word0) != w1) return *retry = true, false;
        if (hit) {
          *loc = Loc{&sb, slot, true, i, &ob};
          return true;
        }
      }
      return false;
    });
    if (found) return true;
    if (retry && *retry) return false;
  }
  if (!scan_all) return false;
  for (int i = 0; i < kStash; ++i) {
    Bucket& sb = bs[nbuckets_ + i];
    if (stable(sb, [&] { return slot_in(sb, false, k, key, &slot, value_word); })) {
      *loc = Loc{&sb, slot, true, -1, &bs[b]};
      return true;
    }
    if (retry && *retry) return false;
  }
  return false;
}

// Algorithm 1's record write: slot and fingerprint persisted before the store that sets the
// allocation bit (the fingerprint shares line 0 with it and is stored first: x86 persists
// it no later). A variable item is a spare block whose allocation bit is already persisted
// (log-free: a crash before the bit store leaves it to the recovery sweep). A record that
// moves (displacement) keeps its item: the sweep after a crash is told it is reachable.
void Pmeh::write_record(Bucket& b, int slot, bool membership, uint8_t fp, uint64_t kw,
                        uint64_t vw) {
  const pm::Persister& p = pool_.persister();
  if (items_.variable()) alloc_.note_reachable(vw);
  Slot& sl = b.slots[slot];
  store_word(sl.key, kw);
  store_word(sl.value, vw);
  store_byte(b.fp[slot], fp);
  p.flush(&sl, sizeof sl);
  p.fence();
  uint64_t w = load_word(b.word0);
  uint32_t a = word::alloc(w) | (1u << slot);
  uint32_t mb = membership ? word::member(w) | (1u << slot) : word::member(w) & ~(1u << slot);
  p.line_order(&b);
  store_word(b.word0, word::with_bits(w, a, mb));
  p.persist(&b.word0, 8);
}

// The record's allocation bit cleared and persisted; then its item (`free_off`, variable
// format) is unmarked, without a flush (a crash in between: the recovery sweep frees it).
void Pmeh::clear_record(Bucket& b, int slot, uint64_t free_off) {
  uint64_t w = load_word(b.word0);
  uint64_t nw = word::with_bits(w, word::alloc(w) & ~(1u << slot), word::member(w) & ~(1u << slot));
  store_word(b.word0, nw);
  pool_.persister().persist(&b.word0, 8);
  if (free_off != 0) items_.retire(free_off);
}

// An overflow fingerprint for a stashed record whose home is bucket b: in b, else in b+1
// (with the overflow membership bit), else the home bucket's overflow count. Written before
// the stashed record: a crash leaves at most a fingerprint that points at nothing.
bool Pmeh::register_overflow(Bucket* bs, uint64_t b, uint8_t fp, int stash_idx) {
  const pm::Persister& p = pool_.persister();
  for (int side = 0; side < 2; ++side) {
    Bucket& ob = bs[side == 0 ? b : (b + 1) % nbuckets_];
    uint8_t bits = ob.obits;
    for (int i = 0; i < kOverflow; ++i) {
      if ((bits >> i) & 1) continue;
      store_byte(ob.ofp[i], fp);
      store_byte(ob.ostash, static_cast<uint8_t>((ob.ostash & ~(3u << (2 * i))) |
                                                 (unsigned(stash_idx) << (2 * i))));
      p.line_order(&ob);
      store_byte(ob.obits, static_cast<uint8_t>((bits | (1u << i)) & ~(1u << (4 + i))) |
                               static_cast<uint8_t>(side << (4 + i)));
      p.persist(&ob, pm::kCacheLine);
      return true;
    }
  }
  Bucket& hb = bs[b];
  if (hb.ocount == 255) return false;
  store_byte(hb.ocount, static_cast<uint8_t>(hb.ocount + 1));
  p.persist(&hb.ocount, 1);
  return true;
}

// Dash's insert into a segment (b and b+1 locked): balanced insert into the less full of the
// home bucket and its neighbour; else displacement (a neighbour's own record to the next
// bucket, or a home bucket's borrowed record back to the previous); else a stash bucket;
// else *full (the segment must split).
Status Pmeh::seg_insert(SegmentHeader* s, uint64_t b, const Hashed& k,
                        const common::Items::New& item, ZoneMode m, ThreadStats& ts, bool* full) {
  Bucket* bs = buckets(s);
  uint64_t b1 = (b + 1) % nbuckets_;
  auto free_slot = [](const Bucket& bk) {
    uint32_t a = word::alloc(load_word(bk.word0));
    return a == (1u << kBucketSlots) - 1 ? -1 : std::countr_one(a);
  };
  auto count = [](const Bucket& bk) { return std::popcount(word::alloc(load_word(bk.word0))); };
  int c0 = count(bs[b]), c1 = count(bs[b1]);
  if (c0 < kBucketSlots && c0 <= c1) {
    write_record(bs[b], free_slot(bs[b]), false, k.fp, item.key_word, item.value_word);
    return Status::Ok();
  }
  if (c1 < kBucketSlots) {
    write_record(bs[b1], free_slot(bs[b1]), true, k.fp, item.key_word, item.value_word);
    return Status::Ok();
  }
  // Displacement: move one record, then take its slot.
  auto move = [&](Bucket& from, int slot, Bucket& to, bool to_member) {
    int t = free_slot(to);
    write_record(to, t, to_member, from.fp[slot], from.slots[slot].key, from.slots[slot].value);
    clear_record(from, slot, 0);
    displaced_.fetch_add(1, std::memory_order_relaxed);
  };
  // Try-locked only where the move can be made (b+1 has a record of its own / b a borrowed
  // one: stable, both held; the other bucket has room: read unlocked, checked again).
  uint64_t b2 = (b1 + 1) % nbuckets_, bp = (b + nbuckets_ - 1) % nbuckets_;
  uint64_t w1 = load_word(bs[b1].word0);
  uint32_t own = word::alloc(w1) & ~word::member(w1);
  if (b2 != b && own != 0 && free_slot(bs[b2]) >= 0 && try_lock_bucket(bs[b2], m)) {
    count_locks(ts, m, 1);
    if (free_slot(bs[b2]) >= 0) {
      int j = std::countr_zero(own);
      move(bs[b1], j, bs[b2], true);
      unlock_bucket(bs[b2]);
      write_record(bs[b1], j, true, k.fp, item.key_word, item.value_word);
      return Status::Ok();
    }
    unlock_bucket(bs[b2]);
  }
  uint64_t w0 = load_word(bs[b].word0);
  uint32_t borrowed = word::alloc(w0) & word::member(w0);
  if (bp != b1 && borrowed != 0 && free_slot(bs[bp]) >= 0 && try_lock_bucket(bs[bp], m)) {
    count_locks(ts, m, 1);
    if (free_slot(bs[bp]) >= 0) {
      int j = std::countr_zero(borrowed);
      move(bs[b], j, bs[bp], false);
      unlock_bucket(bs[bp]);
      write_record(bs[b], j, false, k.fp, item.key_word, item.value_word);
      return Status::Ok();
    }
    unlock_bucket(bs[bp]);
  }
  // Stashing: the first stash bucket with room (read unlocked, checked again under its lock).
  for (int i = 0; i < kStash; ++i) {
    Bucket& sb = bs[nbuckets_ + i];
    if (free_slot(sb) < 0) continue;
    lock_stash(sb, m, ts);
    int t = free_slot(sb);
    if (t < 0) {
      unlock_bucket(sb);
      continue;
    }
    bool registered = register_overflow(bs, b, k.fp, i);
    if (registered) write_record(sb, t, false, k.fp, item.key_word, item.value_word);
    unlock_bucket(sb);
    if (!registered) break;
    stashed_.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  *full = true;
  return Status::Ok();
}

// Overflow metadata (Dash) that points at no stashed record. Per home bucket b, the overflow
// fingerprints (b's own, and b+1's with the membership bit) are matched with b's stashed
// records by (fingerprint, stash bucket); a fingerprint left over is stale, and so is an
// overflow count above the records left without one. Records moved out by a split, a crash
// between a fingerprint and its record, or between a delete and its fingerprint, leave them.
std::vector<Pmeh::StaleOverflow> Pmeh::stale_overflow(SegmentHeader* s) const {
  Bucket* bs = buckets(s);
  struct Rec {
    uint64_t home;
    uint8_t fp, st;
    bool matched;
  };
  std::vector<Rec> recs;
  std::vector<uint8_t> homed(nbuckets_);
  for (int st = 0; st < kStash; ++st) {
    Bucket& sb = bs[nbuckets_ + st];
    for (uint32_t a = word::alloc(load_word(sb.word0)); a; a &= a - 1) {
      uint64_t h = items_.slot_hash(load_word(sb.slots[std::countr_zero(a)].key));
      recs.push_back(
          {bucket_of(h), static_cast<uint8_t>(h >> 32), static_cast<uint8_t>(st), false});
      homed[recs.back().home] = 1;
    }
  }
  std::vector<StaleOverflow> out;
  for (uint64_t b = 0; b < nbuckets_; ++b) {
    Bucket& b1 = bs[(b + 1) % nbuckets_];
    if (!homed[b] && (load_byte(bs[b].obits) & 0xF) == 0 && load_byte(bs[b].ocount) == 0 &&
        (load_byte(b1.obits) & 0xF) == 0)
      continue;
    for (int side = 0; side < 2; ++side) {
      Bucket& ob = side == 0 ? bs[b] : b1;
      uint8_t bits = load_byte(ob.obits), sts = load_byte(ob.ostash);
      for (int i = 0; i < kOverflow; ++i) {
        if (!((bits >> i) & 1) || ((bits >> (4 + i)) & 1) != side) continue;
        uint8_t fp = load_byte(ob.ofp[i]), st = ((sts >> (2 * i)) & 3) % kStash;
        auto r = std::find_if(recs.begin(), recs.end(), [&](const Rec& x) {
          return !x.matched && x.home == b && x.fp == fp && x.st == st;
        });
        if (r != recs.end())
          r->matched = true;
        else
          out.push_back({&ob, i, 0});
      }
    }
    auto unmatched = static_cast<uint8_t>(std::count_if(
        recs.begin(), recs.end(), [&](const Rec& x) { return !x.matched && x.home == b; }));
    if (load_byte(bs[b].ocount) > unmatched) out.push_back({&bs[b], -1, unmatched});
  }
  return out;
}

// Clears stale overflow metadata (buckets locked, or the segment private to this thread).
// Only what is left over goes, so every stashed record keeps a fingerprint (or the count)
// that leads a search to it at every step, and a redo after a crash clears the rest.
void Pmeh::trim_overflow(SegmentHeader* s) {
  std::vector<StaleOverflow> stale = stale_overflow(s);
  if (stale.empty()) return;
  const pm::Persister& p = pool_.persister();
  for (const StaleOverflow& x : stale) {
    if (x.entry >= 0)
      store_byte(x.b->obits, static_cast<uint8_t>(load_byte(x.b->obits) & ~(1u << x.entry)));
    else
      store_byte(x.b->ocount, x.count);
    p.flush(x.b, pm::kCacheLine);
  }
  p.fence();
}

}  // namespace pmhash::pmeh
