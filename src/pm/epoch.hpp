// Epoch-based reclamation (DRAM) for everything a lock-free reader may still hold: an old
// shard after a resize, the block of a replaced or deleted variable-size item.
//
// A reader enters the current global epoch; a retired object is tagged with the epoch at
// retirement and freed once every active reader is in a later epoch.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "pm/threads.hpp"

namespace pmhash::pm {

class Epochs {
 public:
  explicit Epochs(std::shared_ptr<ThreadRegistry> threads);
  ~Epochs();

  class Guard {
   public:
    Guard(Epochs& e, unsigned tid) : e_(e), tid_(tid) { e_.enter(tid_); }
    ~Guard() { e_.exit(tid_); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    Epochs& e_;
    unsigned tid_;
  };

  Guard guard() { return Guard(*this, threads_->id()); }
  void retire(std::function<void()> fn);
  // Runs everything retired; only when no reader can be active (close, tests).
  void drain();

 private:
  void enter(unsigned tid);
  void exit(unsigned tid);
  void collect(unsigned tid);

  struct alignas(64) Local {
    std::atomic<uint64_t> epoch{0};  // 0: not in a critical section
    uint32_t depth = 0;
    std::mutex mu;
    std::vector<std::pair<uint64_t, std::function<void()>>> retired;
  };
  std::shared_ptr<ThreadRegistry> threads_;
  std::atomic<uint64_t> global_{1};
  std::unique_ptr<Local[]> locals_;
};

}  // namespace pmhash::pm
