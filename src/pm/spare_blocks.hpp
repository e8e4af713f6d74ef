// Spare blocks: allocated ahead of need, in batches, on the log-free protocol.
//
// A scheme that links a fresh block into its structure on the write path (SmartHT's chained
// bucket) pays, with Allocator::mark(), one more flushed line per link: the block's
// allocation bit. Taking the block from a small stock that was marked earlier moves that
// line off the write path: a refill reserves `batch` blocks, sets their bits, flushes each
// bitmap line once (neighbouring blocks share one) and fences once. The write path then
// persists only the block and the link.
//
// A crash leaves the unused spares allocated and unreachable: only for schemes whose
// recovery sweeps (Allocator::sweep). At a clean close, give_back() unmarks them and the
// allocator's write_back() persists that; until then for_each() reports them as owned, so
// check()'s allocated == reachable still holds.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "pm/allocator.hpp"

namespace pmhash::pm {

class SpareBlocks {
 public:
  SpareBlocks(Allocator& alloc, uint64_t block_bytes, uint32_t batch)
      : alloc_(alloc), bytes_(block_bytes), batch_(batch) {}

  // A block whose allocation bit is persisted; empty when the pool is full.
  Reservation take() {
    std::lock_guard<std::mutex> g(mu_);
    if (spares_.empty()) refill();
    if (spares_.empty()) return {};
    Reservation r = spares_.back();
    spares_.pop_back();
    return r;
  }

  // Clean close (nothing reachable points to a spare): every spare freed.
  void give_back() {
    std::lock_guard<std::mutex> g(mu_);
    for (const Reservation& r : spares_) alloc_.unmark(r.off);
    spares_.clear();
  }

  void for_each(const std::function<void(uint64_t off)>& fn) const {
    std::lock_guard<std::mutex> g(mu_);
    for (const Reservation& r : spares_) fn(r.off);
  }

 private:
  void refill() {
    for (uint32_t i = 0; i < batch_; ++i) {
      Reservation r = alloc_.reserve(bytes_);
      if (!r) break;
      spares_.push_back(r);
    }
    if (spares_.empty()) return;
    alloc_.mark(spares_);
    alloc_.pool().persister().fence();
  }

  Allocator& alloc_;
  const uint64_t bytes_;
  const uint32_t batch_;
  mutable std::mutex mu_;
  std::vector<Reservation> spares_;
};

}  // namespace pmhash::pm
