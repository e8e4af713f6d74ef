#include "pm/spare_blocks.hpp"

#include <algorithm>
#include <bit>

#include "pm/allocator.hpp"

namespace pmhash::pm {

Reservation SpareBlocks::take(uint64_t bytes) {
  if (bytes > kMaxBlock) return {};
  uint64_t block = std::bit_ceil(std::max(bytes, kMinBlock));
  std::lock_guard<std::mutex> g(mu_);
  std::vector<Reservation>& stock = stock_[std::countr_zero(block / kMinBlock)];
  if (stock.empty()) refill(block, &stock);
  if (stock.empty()) return {};
  Reservation r = stock.back();
  stock.pop_back();
  return r;
}

// Under mu_. What the pool has, up to a batch; one fence makes every bit durable.
void SpareBlocks::refill(uint64_t block, std::vector<Reservation>* stock) {
  for (uint64_t n = 0; n < batch_blocks_; ++n) {
    Reservation r = alloc_.reserve(block);
    if (!r) break;
    stock->push_back(r);
  }
  if (stock->empty()) return;
  alloc_.mark(*stock);
  alloc_.pool().persister().fence();
  ++refills_;
}

void SpareBlocks::give_back() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& stock : stock_) {
    for (const Reservation& r : stock) alloc_.unmark(r.off);
    stock.clear();
  }
}

void SpareBlocks::for_each(const std::function<void(uint64_t off)>& fn) const {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& stock : stock_)
    for (const Reservation& r : stock) fn(r.off);
}

uint64_t SpareBlocks::refills() const {
  std::lock_guard<std::mutex> g(mu_);
  return refills_;
}

}  // namespace pmhash::pm
