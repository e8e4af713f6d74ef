// PMEH's directory array and zones (§III-B, Algorithms 2 and 3): directories published in
// the array's ring, the zone's entries of a new directory filled lazily by writers inside the
// zone, older directories freed when every zone is filled; the walk of Algorithm 5.
#include <mutex>

#include "index/pmeh/pmeh.hpp"

namespace pmhash::pmeh {

using common::load_word;
using common::Slot;
using common::store_word;

// Directory number n lives in array entry n % kMaxDirs until it is freed and the entry
// reused; its number tells which one is there. Pools written before the ring left number 0
// in every directory, each at the index of its number (all below kMaxDirs).
Directory* Pmeh::dir(uint64_t n) const {
  uint64_t off = load_word(root_->dirs[n % kMaxDirs]);
  if (off == 0) return nullptr;
  auto* d = pool_.ptr<Directory>(off);
  uint64_t num = load_word(d->number);
  return num == n || (num == 0 && n < kMaxDirs) ? d : nullptr;
}

// Algorithm 5's walk: the latest directory's entry, else the newest older one that has it.
// Lock-free callers hold a Guard: a directory freed meanwhile stays readable, and one whose
// array entry was reused is skipped (its number differs).
uint64_t Pmeh::find_segment(uint64_t h, bool* from_latest) const {
  uint64_t k = latest_.load(std::memory_order_acquire);
  for (uint64_t j = k + 1; j-- > oldest_possible(k);) {
    const Directory* d = dir(j);
    if (d == nullptr) continue;
    uint64_t e = load_word(d->entries[entry_of(h, d->depth)]);
    if (e != 0) {
      if (from_latest) *from_latest = j == k;
      return e;
    }
  }
  return 0;
}

// The latest directory's segment for h, the zone's entries filled first if empty
// (Algorithms 4 and 6). The caller is inside zone z — alone (exclusive) or holding the zone
// lock (shared) — and holds a Guard. Then the directory read here cannot be freed before
// the caller leaves the zone: freeing it needs a newer directory with every zone filled,
// zone z included, and only a thread in zone z fills zone z.
uint64_t Pmeh::zone_segment(uint32_t z, uint64_t h) {
  uint64_t kd = latest_.load(std::memory_order_acquire);
  Directory* d = dir(kd);
  if (d == nullptr) return 0;  // not reachable (see above); the caller retries
  uint64_t e = entry_of(h, d->depth);
  if (load_word(d->entries[e]) == 0) update_zone_entries(z, kd);
  return load_word(d->entries[e]);
}

bool Pmeh::is_local(uint32_t z) const {
  unsigned tid = threads_.id();
  return opportunistic_ && tid < zone_threads_ && z % zone_threads_ == tid;
}

// Algorithm 2. The new directory (depth + split_shift, entries empty) is published with its
// allocation in one commit; one thread wins (a DRAM lock instead of the paper's CAS: the
// losers never allocated, so there is nothing to free). Its array entry is the one of
// directory from + 1 - kMaxDirs; if that one still lives (some zone never filled a newer
// directory), every zone of the latest directory is filled first, which frees it.
Status Pmeh::expand_directory(uint64_t from) {
  for (int attempt = 0;; ++attempt) {
    {
      std::lock_guard<std::mutex> g(dir_mu_);
      if (latest_.load() != from) return Status::Ok();
      if (load_word(root_->dirs[(from + 1) % kMaxDirs]) == 0) return publish_directory(from);
    }
    if (attempt > 0)
      return {Code::kCorrupted, "pmeh: filling every zone freed no directory array entry"};
    fill_every_zone(from);
  }
}

// Fills every zone's entries of directory k (the latest), entering each zone as a writer
// would, then frees the older directories (the last fill normally does; this also covers a
// crash between a fill and its count, or between the count and the free).
void Pmeh::fill_every_zone(uint64_t k) {
  uint32_t nz = 1u << zone_bits_;
  forced_fills_.fetch_add(1, std::memory_order_relaxed);
  for (uint32_t z = 0; z < nz; ++z) {
    ZoneMode zm = enter(z, is_local(z));
    {
      ZoneLock zl(zones_.lock(z), zm == ZoneMode::kShared);
      if (latest_.load(std::memory_order_acquire) == k) update_zone_entries(z, k);
    }
    exit(z, zm);
    if (latest_.load(std::memory_order_acquire) != k) return;  // expanded meanwhile
  }
  {
    std::lock_guard<std::mutex> g(dir_mu_);  // directories are freed under it
    Directory* d = dir(k);
    if (d == nullptr) return;
    store_word(d->zones_updated, nz);  // every zone is filled: count them all (idempotent)
    pool_.persister().persist(&d->zones_updated, 8);
  }
  free_old_directories(k);
}

// The expansion proper (dir_mu_ held, the array entry free).
Status Pmeh::publish_directory(uint64_t from) {
  Directory* d = dir(from);
  uint64_t depth = d->depth + shift_;
  uint64_t bytes = sizeof(Directory) + (8ull << depth);
  pm::Reservation r = alloc_.reserve(bytes);
  if (!r) return {Code::kPoolFull, "no space for a directory of depth " + std::to_string(depth)};
  auto* nd = pool_.ptr<Directory>(r.off);
  std::memset(static_cast<void*>(nd), 0, bytes);
  nd->depth = depth;
  nd->number = from + 1;
  const pm::Persister& p = pool_.persister();
  p.flush(nd, bytes);
  p.fence();
  pm::Tx tx(alloc_);
  tx.publish(r);
  tx.store(&root_->dirs[(from + 1) % kMaxDirs], r.off);
  tx.store(&root_->latest_dir, from + 1);
  tx.commit();
  latest_.store(from + 1, std::memory_order_release);
  expansions_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

// Algorithm 3: the zone's empty entries in directory k point where the newest older
// directory's entries do. When every zone is done, the older directories are freed. The
// caller is inside zone z, and directory k is not older than the latest it read there.
void Pmeh::update_zone_entries(uint32_t z, uint64_t k) {
  Directory* d = dir(k);
  uint64_t per = uint64_t{1} << (d->depth - zone_bits_);
  uint64_t first = uint64_t{z} * per;
  bool filled = false;
  const pm::Persister& p = pool_.persister();
  for (uint64_t t = first; t < first + per; ++t) {
    if (d->entries[t] != 0) continue;
    for (uint64_t j = k; j-- > oldest_possible(k);) {
      const Directory* od = dir(j);
      if (od == nullptr) continue;
      uint64_t e = od->entries[t >> (d->depth - od->depth)];
      if (e != 0) {
        store_word(d->entries[t], e);
        filled = true;
        break;
      }
    }
  }
  if (!filled) return;
  p.flush(&d->entries[first], per * 8);
  p.fence();
  uint64_t n = std::atomic_ref<uint64_t>(d->zones_updated).fetch_add(1) + 1;
  p.persist(&d->zones_updated, 8);
  if (n >= (uint64_t{1} << zone_bits_)) free_old_directories(k);
}

// Oldest first, so the live directories are always a run of consecutive numbers ending at
// the latest. Directory k (every zone filled) is already published, so each freed one goes
// through the allocator's on_free, i.e. Epochs::retire: readers holding a Guard keep it.
void Pmeh::free_old_directories(uint64_t k) {
  std::lock_guard<std::mutex> g(dir_mu_);
  for (uint64_t j = oldest_possible(k); j < k; ++j) {
    if (dir(j) == nullptr) continue;
    uint64_t* slot = &root_->dirs[j % kMaxDirs];
    uint64_t off = *slot;
    pm::Tx tx(alloc_);
    tx.store(slot, 0);
    tx.free(off);
    tx.commit();
  }
}

}  // namespace pmhash::pmeh
