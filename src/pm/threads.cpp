#include "pm/threads.hpp"

#include <cstdio>
#include <cstdlib>

namespace pmhash::pm {
namespace {

std::atomic<uint64_t> next_uid{1};

struct Entry {
  uint64_t uid;
  unsigned id;
  std::weak_ptr<ThreadRegistry> registry;
};

// The calling thread's registrations; returns its ids when the thread exits, after the
// application's thread_local destructors (LateThreadLocal): an id is never handed to a new
// thread while its old thread can still make a call with it (the OpGate's counter and
// HDNH's partner slot of an id have one writer).
struct ThreadCache {
  std::vector<Entry> entries;
  uint64_t last_uid = 0;
  unsigned last_id = 0;
  ~ThreadCache() {
    for (auto& e : entries)
      if (auto r = e.registry.lock()) r->release(e.id);
  }
};

}  // namespace

ThreadRegistry::ThreadRegistry() : uid_(next_uid.fetch_add(1)) {}

unsigned ThreadRegistry::id() {
  unsigned id = try_id();
  if (id == kNoId) {
    std::fprintf(stderr, "pmhash: more than %u threads used one index at once\n", kMaxThreads);
    std::abort();  // unreachable through Index, which refuses the call first
  }
  return id;
}

unsigned ThreadRegistry::try_id() {
  ThreadCache& cache = LateThreadLocal<ThreadCache>::get();
  if (cache.last_uid == uid_) return cache.last_id;
  for (auto& e : cache.entries) {
    if (e.uid == uid_) {
      cache.last_uid = uid_;
      cache.last_id = e.id;
      return e.id;
    }
  }
  // Drop entries of registries that no longer exist, then register.
  std::erase_if(cache.entries, [](const Entry& e) { return e.registry.expired(); });
  unsigned id = acquire();
  if (id == kNoId) return kNoId;
  cache.entries.push_back({uid_, id, weak_from_this()});
  cache.last_uid = uid_;
  cache.last_id = id;
  return id;
}

unsigned ThreadRegistry::acquire() {
  std::lock_guard<std::mutex> g(mu_);
  if (!free_.empty()) {
    unsigned id = free_.back();
    free_.pop_back();
    return id;
  }
  unsigned id = high_water_.load(std::memory_order_relaxed);
  if (id >= kMaxThreads) return kNoId;
  high_water_.store(id + 1, std::memory_order_release);
  return id;
}

void ThreadRegistry::release(unsigned id) {
  std::lock_guard<std::mutex> g(mu_);
  free_.push_back(id);
}

}  // namespace pmhash::pm
