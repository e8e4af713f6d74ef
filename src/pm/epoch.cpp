#include "pm/epoch.hpp"

namespace pmhash::pm {

Epochs::Epochs(std::shared_ptr<ThreadRegistry> threads)
    : threads_(std::move(threads)), locals_(new Local[ThreadRegistry::kMaxThreads]) {}

Epochs::~Epochs() {
  drain();
}

void Epochs::enter(unsigned tid) {
  Local& l = locals_[tid];
  if (l.depth++ == 0) {
    // An RMW (a full barrier) so the reader's later loads cannot pass the announcement.
    l.epoch.exchange(global_.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
  }
}

void Epochs::exit(unsigned tid) {
  Local& l = locals_[tid];
  if (--l.depth == 0) l.epoch.store(0, std::memory_order_release);
}

void Epochs::retire(std::function<void()> fn) {
  unsigned tid = threads_->id();
  Local& l = locals_[tid];
  size_t n;
  {
    std::lock_guard<std::mutex> g(l.mu);
    l.retired.emplace_back(global_.load(std::memory_order_seq_cst), std::move(fn));
    n = l.retired.size();
  }
  if (n % 32 == 0) collect(tid);
}

void Epochs::collect(unsigned tid) {
  uint64_t g = global_.load(std::memory_order_seq_cst);
  uint64_t min_active = UINT64_MAX;
  unsigned n = threads_->high_water();
  for (unsigned i = 0; i < n; ++i) {
    uint64_t e = locals_[i].epoch.load(std::memory_order_seq_cst);
    if (e != 0 && e < min_active) min_active = e;
  }
  if (min_active >= g) global_.compare_exchange_strong(g, g + 1);
  // An object retired in epoch e is unreachable for readers that entered after e.
  std::vector<std::function<void()>> ready;
  {
    Local& l = locals_[tid];
    std::lock_guard<std::mutex> lg(l.mu);
    size_t kept = 0;
    for (auto& r : l.retired) {
      if (r.first < min_active)
        ready.push_back(std::move(r.second));
      else
        l.retired[kept++] = std::move(r);
    }
    l.retired.resize(kept);
  }
  for (auto& f : ready) f();
}

void Epochs::drain() {
  for (unsigned i = 0; i < ThreadRegistry::kMaxThreads; ++i) {
    std::vector<std::pair<uint64_t, std::function<void()>>> items;
    {
      std::lock_guard<std::mutex> g(locals_[i].mu);
      items.swap(locals_[i].retired);
    }
    for (auto& r : items) r.second();
  }
}

}  // namespace pmhash::pm
