// Per-index thread ids, assigned implicitly on a thread's first call (callers that own
// their threads, like PiBench's OpenMP workers, just call the methods). Ids are dense and
// reused after a thread exits. Each index instance has its own registry: no global state
// beyond the calling thread's small cache.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace pmhash::pm {

class ThreadRegistry : public std::enable_shared_from_this<ThreadRegistry> {
 public:
  static constexpr unsigned kMaxThreads = 256;
  static std::shared_ptr<ThreadRegistry> make() {
    return std::shared_ptr<ThreadRegistry>(new ThreadRegistry());
  }
  // The calling thread's id in [0, kMaxThreads). Callers enter through Index, which
  // calls try_id() first, so id() of a thread inside a call never runs out.
  unsigned id();
  // The calling thread's id, or kNoId when kMaxThreads threads already hold one.
  static constexpr unsigned kNoId = ~0u;
  unsigned try_id();
  unsigned high_water() const { return high_water_.load(std::memory_order_acquire); }
  void release(unsigned id);

 private:
  ThreadRegistry();
  unsigned acquire();  // kNoId when all are taken
  uint64_t uid_;
  std::mutex mu_;
  std::vector<unsigned> free_;
  std::atomic<unsigned> high_water_{0};
};

}  // namespace pmhash::pm
