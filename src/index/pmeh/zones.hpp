// PMEH zones (§III-B1, §III-D, Fig. 7, Alg. 7): each zone is bound to one local thread,
// which writes lock-free while the zone is exclusive; other threads request the zone, it
// becomes shared, and every writer (the local one too) then takes locks. The last thread
// out returns it to exclusive.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "common/spin_lock.hpp"

namespace pmhash::pmeh {

using common::cpu_relax;

enum class ZoneMode { kExclusive, kShared };

class Zones {
 public:
  // Zone word (DRAM):
  //   bits  0.. 1  state: exclusive 0, request 1, shared 2
  //   bits  2..31  thread counter (threads inside in shared mode)
  //   bits 32..63  generation: +1 each time the zone returns to exclusive
  // The generation makes "request" of one exclusive period a different word from "request"
  // of the next, so a requester that saw the local thread idle during one period cannot
  // switch the zone to shared in a later one, while the local thread writes lock-free.
  static constexpr uint64_t kExclusive = 0, kRequest = 1, kShared = 2;
  static uint64_t state(uint64_t w) { return w & 3; }
  static uint64_t count(uint64_t w) { return (w >> 2) & 0x3FFF'FFFF; }
  static uint64_t generation(uint64_t w) { return w >> 32; }

  Zones(uint32_t n, bool opportunistic) : zones_(new Zone[n]), opportunistic_(opportunistic) {}

  // Algorithm 7's state switch. The local thread writes lock-free while the zone is
  // exclusive; it marks itself active first, so a requester switches the zone to shared
  // only when the local thread is outside its lock-free section (the paper lets the local
  // thread flip it on its next access, which never comes if that thread is idle).
  ZoneMode enter(uint32_t z, bool local) {
    if (!opportunistic_) return ZoneMode::kShared;  // the all-locking baseline
    Zone& zn = zones_[z];
    if (local) {
      zn.owner_active.store(1, std::memory_order_seq_cst);
      if (state(zn.word.load(std::memory_order_seq_cst)) == kExclusive) return ZoneMode::kExclusive;
      zn.owner_active.store(0, std::memory_order_release);
    }
    for (;;) {
      uint64_t w = zn.word.load(std::memory_order_acquire);
      switch (state(w)) {
        case kExclusive:  // request access (Fig. 7)
          zn.word.compare_exchange_weak(w, w | kRequest, std::memory_order_seq_cst);
          break;
        case kRequest:
          // Dekker with the local thread's entry: it sets owner_active, then reads the word.
          if (local || zn.owner_active.load(std::memory_order_seq_cst) == 0) {
            if (before_switch) before_switch(z);
            // Fails if the zone went back to exclusive since w was read (new generation).
            zn.word.compare_exchange_strong(w, (w & ~uint64_t{3}) | kShared,
                                            std::memory_order_seq_cst);
            if (after_switch) after_switch(z);
          } else {
            cpu_relax();
          }
          break;
        default:  // shared: count this thread in
          if (zn.word.compare_exchange_weak(w, w + 4, std::memory_order_acq_rel))
            return ZoneMode::kShared;
          break;
      }
    }
  }

  void exit(uint32_t z, ZoneMode m) {
    if (!opportunistic_) return;
    Zone& zn = zones_[z];
    if (m == ZoneMode::kExclusive) {
      zn.owner_active.store(0, std::memory_order_release);
      return;
    }
    // The last thread out returns the zone to exclusive (atomically with the count), in a
    // new generation.
    uint64_t w = zn.word.load(std::memory_order_relaxed);
    for (;;) {
      uint64_t nw = count(w) == 1 ? (generation(w) + 1) << 32 | kExclusive : w - 4;
      if (zn.word.compare_exchange_weak(w, nw, std::memory_order_acq_rel)) return;
    }
  }

  // The zone lock: splits and entry updates in shared mode.
  std::atomic<uint32_t>& lock(uint32_t z) { return zones_[z].lock; }
  uint64_t word(uint32_t z) const { return zones_[z].word.load(std::memory_order_acquire); }
  bool opportunistic() const { return opportunistic_; }
  static constexpr uint64_t kBytesPerZone = 64;

  // Test seams around a requester's switch request -> shared (null in production).
  std::function<void(uint32_t z)> before_switch, after_switch;

 private:
  struct alignas(64) Zone {
    std::atomic<uint64_t> word{0};
    std::atomic<uint32_t> owner_active{0};  // the local thread is inside a lock-free write
    std::atomic<uint32_t> lock{0};
  };
  static_assert(sizeof(Zone) == kBytesPerZone);
  std::unique_ptr<Zone[]> zones_;
  bool opportunistic_;
};

// The zone lock, taken only in shared mode (the local thread in exclusive mode is alone).
struct ZoneLock {
  std::atomic<uint32_t>* l = nullptr;
  ZoneLock(std::atomic<uint32_t>& lock, bool take) {
    if (take) {
      l = &lock;
      common::lock_word(lock);
    }
  }
  ~ZoneLock() {
    if (l) common::unlock_word(*l);
  }
  ZoneLock(const ZoneLock&) = delete;
  ZoneLock& operator=(const ZoneLock&) = delete;
};

}  // namespace pmhash::pmeh
