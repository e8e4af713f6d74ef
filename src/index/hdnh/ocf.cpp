// The Optimistic Compression Filter (§3.2, Figs. 3-4) and the slot-level optimistic
// concurrency on its entries (§3.6): lookup, claiming, locking and releasing a slot.
#include "index/hdnh/detail.hpp"

namespace pmhash::hdnh {

using common::load_word;
using common::Slot;
using common::store_word;
using namespace detail;

// A miss in a bucket counts only if no entry of the bucket was released while it was
// scanned (ocf::release_entry): an update moves its record to another slot of the bucket
// (Fig. 10: new slot valid, then old slot released), so a scan that read the new slot before
// it was valid and the old one after its release saw the key in neither. An unchanged change
// count means the scan saw one instant of the bucket, but for releases in flight (counted
// before the scan, stored during it; ocf.hpp says why those cannot hide a key), and at
// every instant the key's record is in a valid slot (or a locked one, which the scan waits
// for).
bool Hdnh::find(const LevelSet& set, const Hashed& k, std::string_view key, Loc* loc,
                uint64_t* value_word, bool* retry, uint64_t* pm_slots) const {
  for (int i = 0; i < set.n; ++i) {
    Level& l = *set.lv[i];
    Candidates c = candidates(l, k);
    for (int j = 0; j < c.n; ++j) {
      uint64_t b = c.b[j];
      const uint32_t changes = ocf::scan_start(l.changes[b]);
      for (int s = 0; s < kSlots; ++s) {
        std::atomic<uint16_t>& e = l.ocf[b * kSlots + s];
        uint16_t w = e.load(std::memory_order_acquire);
#ifdef PMHASH_CRASH_HOOKS
        if (test_after_entry) test_after_entry(i, b, s);
#endif
        if (!ocf::valid(w) || (cfg_.use_ocf && ocf::fp(w) != k.fp)) continue;
        if (ocf::busy(w)) {  // a writer holds the slot: wait for it, then start over
          // (yielding: the holder may be waiting for its partner on an oversubscribed core)
          for (int spins = 0; e.load(std::memory_order_acquire) == w; ++spins) {
            if (spins < 64)
              cpu_relax();
            else
              std::this_thread::yield();
          }
          *retry = true;
          return false;
        }
        const Slot& sl = l.buckets[b].slots[s];
        uint64_t sk = load_word(sl.key), sv = load_word(sl.value);
        ++*pm_slots;
        bool match = items_.matches(sk, sv, key, k.kw);
        // The version moved, or (6-bit versions wrap) the bucket had a release meanwhile:
        // the PM words may be a torn refill of the slot.
        if (e.load(std::memory_order_acquire) != w || ocf::changed_since(l.changes[b], changes)) {
          *retry = true;
          return false;
        }
        if (match) {
          *loc = Loc{&l, b, s, w};
          *value_word = sv;
          return true;
        }
      }
      if (ocf::changed_since(l.changes[b], changes)) {
        *retry = true;  // the bucket changed during the scan: the miss proves nothing
        return false;
      }
    }
  }
  return false;
}

bool Hdnh::claim_in(Level& l, uint64_t b, Loc* loc) {
  for (int s = 0; s < kSlots; ++s) {
    std::atomic<uint16_t>& e = l.ocf[b * kSlots + s];
    uint16_t w = e.load(std::memory_order_relaxed);
    if ((w & (ocf::kValid | ocf::kBusy)) != 0) continue;
    if (e.compare_exchange_strong(w, w | ocf::kBusy, std::memory_order_acquire)) {
      *loc = Loc{&l, b, s, static_cast<uint16_t>(w | ocf::kBusy)};
      return true;
    }
  }
  return false;
}

// An empty slot for a new record: the least-loaded of the four candidates in the top level,
// then in the bottom level (while resizing: the new top level, then the old top).
bool Hdnh::claim_free(const LevelSet& set, const Hashed& k, Loc* loc) {
  Level* order[2] = {set.lv[0], set.lv[1]};
  if (set.n == 3) order[0] = set.lv[2], order[1] = set.lv[0];
  for (Level* l : order) {
    Candidates c = candidates(*l, k);
    int load[4];
    for (int j = 0; j < c.n; ++j) {
      load[j] = 0;
      for (int s = 0; s < kSlots; ++s)
        load[j] += (l->ocf[c.b[j] * kSlots + s].load(std::memory_order_relaxed) &
                    (ocf::kValid | ocf::kBusy)) != 0;
    }
    for (int tries = 0; tries < c.n; ++tries) {
      int best = -1;
      for (int j = 0; j < c.n; ++j)
        if (load[j] < kSlots && (best < 0 || load[j] < load[best])) best = j;
      if (best < 0) break;
      if (claim_in(*l, c.b[best], loc)) return true;
      load[best] = kSlots;
    }
  }
  return false;
}

bool Hdnh::lock_slot(Loc* loc) {
  uint16_t w = loc->entry;
  if (!loc->level->ocf[loc->bucket * kSlots + loc->slot].compare_exchange_strong(
          w, w | ocf::kBusy, std::memory_order_acquire))
    return false;
  loc->entry = w | ocf::kBusy;
  return true;
}

void Hdnh::unlock_slot(const Loc& loc, bool is_valid, uint8_t fp) {
  ocf::release_entry(loc.level->ocf[loc.bucket * kSlots + loc.slot], loc.level->changes[loc.bucket],
                     ocf::next(loc.entry, is_valid, fp));
}

#ifdef PMHASH_CRASH_HOOKS
bool Hdnh::test_get_ocf(std::string_view key, std::string* value) {
  Hashed k = hashed(key);
  pm::Epochs::Guard guard(epochs_, threads_.id());
  for (;;) {
    Loc loc;
    uint64_t vw = 0, pm_slots = 0;
    bool retry = false;
    bool found =
        find(*levels_.load(std::memory_order_acquire), k, key, &loc, &vw, &retry, &pm_slots);
    if (!retry) return found && items_.read_value(vw, value);
  }
}
#endif

}  // namespace pmhash::hdnh
