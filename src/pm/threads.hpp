// Per-index thread ids, assigned implicitly on a thread's first call (callers that own
// their threads, like PiBench's OpenMP workers, just call the methods). Ids are dense and
// reused after a thread exits. Each index instance has its own registry: no global state
// beyond the calling thread's small cache.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace pmhash::pm {

// The calling thread's identity for the whole process, never given to another thread
// (a std::thread::id and this registry's ids are reused after a thread exits): who refilled
// a spare stock (SpareBlocks), whose flushes a fence commits (the crash simulator).
inline uint64_t thread_token() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t token = next.fetch_add(1, std::memory_order_relaxed);
  return token;
}

// Per-thread state that must outlive the application's own thread_local objects, so that a
// call made from one of their destructors (a per-thread buffer flushed into the index at
// thread exit) still finds its thread id and its liburcu registration. A C++ thread_local
// may be destroyed before them (destruction runs in reverse order of construction); a
// pthread key's destructor runs after every C++ thread_local destructor of the thread
// (glibc), and a use after that builds the state again, destroyed in the key's next round.
// The main thread's is never destroyed (exit() runs no key destructors). glibc only; and a
// call made in the key destructors' last round (PTHREAD_DESTRUCTOR_ITERATIONS) rebuilds state
// that is then never destroyed: its id leaks and its liburcu registration outlives the thread.
template <class T>
class LateThreadLocal {
 public:
  static T& get() {
    if (ptr_ == nullptr) [[unlikely]]
      make();
    return *ptr_;
  }

 private:
  static void make() {
    static const pthread_key_t key = [] {
      pthread_key_t k;
      if (pthread_key_create(&k, &destroy) != 0) std::abort();
      return k;
    }();
    ptr_ = new T();
    pthread_setspecific(key, ptr_);
  }
  static void destroy(void* p) {
    ptr_ = nullptr;
    delete static_cast<T*>(p);
  }
  static inline thread_local T* ptr_ = nullptr;
};

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
