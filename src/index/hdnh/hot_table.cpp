// The hot table (§3.3, Figs. 5-6): lookup, RAFL (or LRU) replacement, the two-step put
// (prepare, then publish after the PM commit), removal and the read-miss fill.
#include <cstring>

#include "index/hdnh/detail.hpp"

namespace pmhash::hdnh {

using common::load_word;
using common::Slot;
using common::store_word;
using namespace detail;

// ---- payloads (hot_table.hpp) ----

hot::Payload Hdnh::hot_payload(std::string_view key, std::string_view value) const {
  hot::Payload p;
  if (!items_.variable())
    std::memcpy(&p.w[0], value.data(), 8);
  else if (!hot::Payload::make_inline(key, value, &p))
    p.w[0] = reinterpret_cast<uint64_t>(HotItem::make(key, value));
  return p;
}

// Acquire loads: a reader that sees a payload word also sees the HotItem it points to.
hot::Payload Hdnh::hot_load(const hot::Table& t, uint64_t b, int e) const {
  hot::Payload p;
  const std::atomic<uint64_t>* w = t.payload(b, e);
  for (uint32_t i = 0; i < t.s.payload_words; ++i) p.w[i] = w[i].load(std::memory_order_acquire);
  if (items_.variable()) p.lens = t.lens(b, e).load(std::memory_order_acquire);
  return p;
}

// A slot's payload as of metadata m (seqlock): false if the slot changed meanwhile. Only a
// payload read this way may be followed to its HotItem: a torn read could pair an inline
// payload's bytes with an out-of-line lens word.
bool Hdnh::hot_snapshot(const hot::Table& t, uint64_t b, int e, uint16_t m, hot::Payload* p) const {
  *p = hot_load(t, b, e);
  return (t.meta(b, e).load(std::memory_order_acquire) | hot::kHot) == (m | hot::kHot);
}

void Hdnh::hot_store(const hot::Table& t, uint64_t b, int e, uint64_t kw, const hot::Payload& p) {
  t.key(b, e).store(kw, std::memory_order_release);
  std::atomic<uint64_t>* w = t.payload(b, e);
  for (uint32_t i = 0; i < t.s.payload_words; ++i) w[i].store(p.w[i], std::memory_order_release);
  if (items_.variable()) t.lens(b, e).store(p.lens, std::memory_order_release);
}

void Hdnh::hot_release(const hot::Payload& p) {
  if (!items_.variable() || p.is_inline() || p.w[0] == 0) return;
  uint64_t ptr = p.w[0];
  epochs_.retire([ptr] { HotItem::destroy(reinterpret_cast<const HotItem*>(ptr)); });
}

void Hdnh::hot_free_now(const hot::Payload& p) const {
  if (items_.variable() && !p.is_inline()) HotItem::destroy(reinterpret_cast<HotItem*>(p.w[0]));
}

void Hdnh::hot_free_level(const Level& l) const {
  if (!items_.variable() || !l.hot) return;
  for (uint64_t b = 0; b < l.nbuckets; ++b)
    for (int e = 0; e < cfg_.hot_slots; ++e)
      if (l.hot.meta(b, e).load() & hot::kValid) hot_free_now(hot_load(l.hot, b, e));
}

std::string_view Hdnh::hot_key_bytes(const hot::Payload& p) const {
  if (p.is_inline()) return p.inline_key();
  if (p.w[0] == 0) return {};
  return reinterpret_cast<const HotItem*>(p.w[0])->key();
}

void Hdnh::hot_value(const hot::Payload& p, std::string* value) const {
  if (!items_.variable())
    value->assign(reinterpret_cast<const char*>(&p.w[0]), 8);
  else if (p.is_inline())
    value->assign(p.inline_value());
  else
    value->assign(reinterpret_cast<const HotItem*>(p.w[0])->value());
}

bool Hdnh::hot_matches(uint64_t kw, const hot::Payload& p, const Hashed& k,
                       std::string_view key) const {
  if (kw != k.kw) return false;
  return !items_.variable() || hot_key_bytes(p) == key;
}

// A busy (opmap) hot slot is being written: it is skipped, not waited for. Its holder is
// the key's writer (which publishes only after the PM commit; a reader that goes on to the
// OCF finds the record's slot locked and waits there) or a write evicting it. A miss reads
// the bucket's first line only (meta and key words).
bool Hdnh::hot_get(const LevelSet& set, const Hashed& k, std::string_view key, std::string* value) {
  for (int i = 0; i < set.n; ++i) {
    Level& l = *set.lv[i];
    uint64_t b = hot_bucket(l, k);
    for (int e = 0; e < cfg_.hot_slots; ++e) {
      std::atomic<uint16_t>& meta = l.hot.meta(b, e);
      for (;;) {
        uint16_t m1 = meta.load(std::memory_order_acquire);
        if (!(m1 & hot::kValid) || (m1 & hot::kBusy)) break;
        uint64_t kw = l.hot.key(b, e).load(std::memory_order_acquire);
        if (kw != k.kw) {
          if ((meta.load(std::memory_order_acquire) | hot::kHot) != (m1 | hot::kHot)) continue;
          break;
        }
        hot::Payload p;
        if (!hot_snapshot(l.hot, b, e, m1, &p)) continue;
        bool match = hot_matches(kw, p, k, key);
        if (match) hot_value(p, value);
        if ((meta.load(std::memory_order_acquire) | hot::kHot) != (m1 | hot::kHot)) continue;
        if (!match) break;
        // RAFL: a searched item becomes hot. LRU: its stamp moves to now.
        if (cfg_.replacement == Replacement::kRafl) {
          if (!(m1 & hot::kHot)) meta.compare_exchange_strong(m1, m1 | hot::kHot);
        } else {
          l.hot_stamp[b * cfg_.hot_slots + e].store(clock_.fetch_add(1, std::memory_order_relaxed),
                                                    std::memory_order_relaxed);
        }
        return true;
      }
    }
  }
  return false;
}

// Prepares a put of key -> value (caller holds the key's writer lock): the DRAM copy is
// made and the target slots locked, nothing becomes visible. Targets: every copy of the key
// (updated in place); with none, an empty slot of the key's bucket in the newest level, then
// the older; with none, a replacement in the newest level's bucket (RAFL or LRU).
void Hdnh::hot_prepare(const LevelSet& set, const Hashed& k, std::string_view key,
                       std::string_view value, HotWrite* w) {
  const int hs = cfg_.hot_slots;
  w->n = 0;
  w->evicts = false;
  w->pay = hot_payload(key, value);
  auto lock = [&](Level& l, uint64_t b, int e, uint16_t m, bool same_key) {
    if ((m & hot::kBusy) ||
        !l.hot.meta(b, e).compare_exchange_strong(m, m | hot::kBusy, std::memory_order_acquire))
      return false;
    w->t[w->n++] = {&l, b, e, m, same_key};
    return true;
  };
  // The key's copies. A busy slot is skipped: its holder is not a writer of this key (we
  // hold the key's lock), so it is a write that replaces the copy anyway.
  for (int i = 0; i < set.n; ++i) {
    Level& l = *set.lv[i];
    uint64_t b = hot_bucket(l, k);
    for (int e = 0; e < hs; ++e) {
      for (;;) {
        uint16_t m = l.hot.meta(b, e).load(std::memory_order_acquire);
        if (!(m & hot::kValid) || (m & hot::kBusy)) break;
        uint64_t kw = l.hot.key(b, e).load(std::memory_order_acquire);
        if (kw != k.kw) break;
        hot::Payload p;
        if (!hot_snapshot(l.hot, b, e, m, &p)) continue;
        if (!hot_matches(kw, p, k, key)) break;
        if (lock(l, b, e, m, true)) break;  // else it changed: look again
      }
    }
  }
  if (w->n > 0) return;
  // Newest level first: {top, bottom}, or {new top, top, bottom} while resizing.
  Level* order[3] = {set.lv[0], set.lv[1], set.lv[1]};
  int n = 2;
  if (set.n == 3) order[0] = set.lv[2], order[1] = set.lv[0], order[2] = set.lv[1], n = 3;
  for (int i = 0; i < n; ++i) {
    Level& l = *order[i];
    uint64_t b = hot_bucket(l, k);
    for (int e = 0; e < hs; ++e) {
      uint16_t m = l.hot.meta(b, e).load(std::memory_order_acquire);
      if (!(m & (hot::kValid | hot::kBusy)) && lock(l, b, e, m, false)) return;
    }
  }
  // Replacement in the first level's bucket.
  Level& l = *order[0];
  uint64_t b = hot_bucket(l, k);
  for (int attempt = 0; attempt < 8; ++attempt) {
    int victim = -1;
    if (cfg_.replacement == Replacement::kLru) {
      uint64_t oldest = ~uint64_t{0};
      for (int e = 0; e < hs; ++e) {
        uint64_t st = l.hot_stamp[b * hs + e].load(std::memory_order_relaxed);
        if (st < oldest) oldest = st, victim = e;
      }
    } else {
      // RAFL (Fig. 6): a cold item if there is one; else a random one, and every hotmap bit
      // of the bucket is cleared.
      for (int e = 0; e < hs && victim < 0; ++e)
        if (!(l.hot.meta(b, e).load(std::memory_order_relaxed) & hot::kHot)) victim = e;
      if (victim < 0) {
        victim = static_cast<int>(next_random() % hs);
        for (int e = 0; e < hs; ++e) l.hot.meta(b, e).fetch_and(uint16_t(~hot::kHot));
      }
    }
    uint16_t m = l.hot.meta(b, victim).load(std::memory_order_acquire);
    if (lock(l, b, victim, m, false)) {
      w->evicts = (m & hot::kValid) != 0;
      return;
    }
  }
}

// Publishes a prepared put (after the PM commit): the first target gets the copy, further
// copies are dropped; every slot is unlocked with its version moved.
void Hdnh::hot_publish(const Hashed& k, HotWrite& w) {
  if (w.n == 0) {  // no slot: the copy was never visible
    hot_free_now(w.pay);
    return;
  }
  for (int i = 0; i < w.n; ++i) {
    const HotTarget& t = w.t[i];
    Level& l = *t.level;
    hot::Payload old = hot_load(l.hot, t.bucket, t.e);
    auto next = static_cast<uint16_t>((t.meta + hot::kVersionOne) & ~7u);
    if (i == 0) {
      // Release: a reader that loads the new payload also sees the hot item it points to.
      hot_store(l.hot, t.bucket, t.e, k.kw, w.pay);
      if (l.hot_stamp)
        l.hot_stamp[t.bucket * cfg_.hot_slots + t.e].store(clock_.fetch_add(1),
                                                           std::memory_order_relaxed);
      next |= hot::kValid | (t.same_key ? (t.meta & hot::kHot) : 0);
    }
    l.hot.meta(t.bucket, t.e).store(next, std::memory_order_release);
    if (t.meta & hot::kValid) hot_release(old);  // unpublished above, freed after an epoch
  }
  if (w.evicts) hot_evictions_.fetch_add(1, std::memory_order_relaxed);
}

// Drops the key's copies (caller holds the key's writer lock; a busy slot is skipped, as in
// hot_prepare).
void Hdnh::hot_remove(const LevelSet& set, const Hashed& k, std::string_view key) {
  for (int i = 0; i < set.n; ++i) {
    Level& l = *set.lv[i];
    uint64_t b = hot_bucket(l, k);
    for (int e = 0; e < cfg_.hot_slots; ++e) {
      std::atomic<uint16_t>& meta = l.hot.meta(b, e);
      for (;;) {
        uint16_t m = meta.load(std::memory_order_acquire);
        if (!(m & hot::kValid) || (m & hot::kBusy)) break;
        uint64_t kw = l.hot.key(b, e).load(std::memory_order_acquire);
        if (kw != k.kw) break;
        hot::Payload p;
        if (!hot_snapshot(l.hot, b, e, m, &p)) continue;
        if (!hot_matches(kw, p, k, key)) break;
        if (!meta.compare_exchange_strong(m, static_cast<uint16_t>((m + hot::kVersionOne) & ~7u)))
          continue;
        hot_release(p);
        break;
      }
    }
  }
}

// A searched item enters the hot table (§3.3), under the key's writer lock if it is free.
// The value is read again under that lock: no writer of the key can change it meanwhile, so
// the copy is the table's current value. (The OCF entry seen by the lock-free read proves
// nothing: its 6-bit version comes back after 32 delete/insert pairs into one slot.)
void Hdnh::hot_fill(const LevelSet& set, const Hashed& k, std::string_view key) {
#ifdef PMHASH_CRASH_HOOKS
  if (test_before_fill) test_before_fill();
#endif
  std::atomic<uint32_t>& sw = stripe(k.h1);
  if (!try_lock_word(sw)) return;  // a writer of the key is active: it publishes its value
  Loc loc;
  uint64_t vw = 0, pm_slots = 0;
  bool retry = false;
  std::string value;
  if (find(set, k, key, &loc, &vw, &retry, &pm_slots) && items_.read_value(vw, &value)) {
    HotWrite w;
    hot_prepare(set, k, key, value, &w);
    hot_publish(k, w);
  }
  unlock_word(sw);
}

#ifdef PMHASH_CRASH_HOOKS
bool Hdnh::test_get_hot(std::string_view key, std::string* value) {
  if (cfg_.replacement == Replacement::kOff) return false;
  pm::Epochs::Guard guard(epochs_, threads_.id());
  return hot_get(*levels_.load(std::memory_order_acquire), hashed(key), key, value);
}

void Hdnh::test_drop_hot(std::string_view key) {
  if (cfg_.replacement == Replacement::kOff) return;
  Hashed k = hashed(key);
  StripeLock key_lock(stripe(k.h1));
  pm::Epochs::Guard guard(epochs_, threads_.id());
  hot_remove(*levels_.load(std::memory_order_acquire), k, key);
}
#endif

}  // namespace pmhash::hdnh
