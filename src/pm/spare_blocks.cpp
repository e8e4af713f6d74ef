#include "pm/spare_blocks.hpp"

#include <algorithm>
#include <bit>
#include <thread>

#include "pm/allocator.hpp"
#include "pm/pool.hpp"
#include "pm/threads.hpp"

namespace pmhash::pm {

Reservation SpareBlocks::take(uint64_t bytes) {
  if (bytes > kMaxBlock) return {};
  uint64_t block = std::bit_ceil(std::max(bytes, kMinBlock));
  size_t size_class = std::countr_zero(block / kMinBlock);
  Stripe& s = mine();
  std::lock_guard<std::mutex> g(s.mu);
  std::vector<Reservation>& stock = s.stock[size_class];
  if (stock.empty() && refill(block, &stock)) s.refilled_by[size_class] = thread_token();
  if (stock.empty()) return {};
  Reservation r = stock.back();
  stock.pop_back();
  bool refilled_here = s.refilled_by[size_class] == thread_token();
  if (!refilled_here && !PMHASH_MUTATION(alloc_.pool(), kMutationSpareBitNotReflushed))
    alloc_.flush_mark(r);  // this thread's fence must order the bit (see the header)
  return r;
}

SpareBlocks::Stripe& SpareBlocks::mine() {
  if (one_stripe_) return stripes_[0];
  return stripes_[std::hash<std::thread::id>{}(std::this_thread::get_id()) % kStripes];
}

// Under the stripe's lock. What the pool has, up to a batch; the bits flushed, not fenced.
bool SpareBlocks::refill(uint64_t block, std::vector<Reservation>* stock) {
  for (uint64_t n = 0; n < batch_blocks_; ++n) {
    Reservation r = alloc_.reserve(block);
    if (!r) break;
    stock->push_back(r);
  }
  if (stock->empty()) return false;
  alloc_.mark(*stock);
  refills_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void SpareBlocks::give_back() {
  for (Stripe& s : stripes_) {
    std::lock_guard<std::mutex> g(s.mu);
    for (auto& stock : s.stock) {
      for (const Reservation& r : stock) alloc_.unmark(r.off);
      stock.clear();
    }
  }
}

void SpareBlocks::for_each(const std::function<void(uint64_t off)>& fn) const {
  for (const Stripe& s : stripes_) {
    std::lock_guard<std::mutex> g(s.mu);
    for (auto& stock : s.stock)
      for (const Reservation& r : stock) fn(r.off);
  }
}

uint64_t SpareBlocks::refills() const {
  return refills_.load(std::memory_order_relaxed);
}

}  // namespace pmhash::pm
