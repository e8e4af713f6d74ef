// The synchronous write mechanism (§3.4, Fig. 7): a background partner thread does the
// hot-table half of a write while the foreground thread writes the non-volatile table.
#include "index/hdnh/detail.hpp"

namespace pmhash::hdnh {

using common::load_word;
using common::Slot;
using common::store_word;
using namespace detail;

Hdnh::Partner* Hdnh::partner() {
  unsigned tid = threads_.id();
  if (Partner* p = partners_[tid].get()) return p;  // only this thread sets its slot
  std::lock_guard<std::mutex> g(partners_mu_);      // stop() reads every slot
  partners_[tid] = std::make_unique<Partner>(this);
  return partners_[tid].get();
}

void Hdnh::run_partner(Partner* p) {
  if (!p->unpinned) {
    // A thread inherits its creator's CPU affinity; a partner pinned to its foreground
    // thread's core could only run when that thread waits. Let it run anywhere.
    cpu_set_t all;
    CPU_ZERO(&all);
    for (unsigned c = 0; c < std::thread::hardware_concurrency() && c < CPU_SETSIZE; ++c)
      CPU_SET(c, &all);
    pthread_setaffinity_np(pthread_self(), sizeof all, &all);
    p->unpinned = true;
  }
  pm::Epochs::Guard guard(epochs_);  // no thread id: partners must not use up the 256
  run_hot_job(p->job);
}

void Hdnh::run_hot_job(HotJob* j) {
  if (j->op == kHotPut)
    hot_prepare(*j->set, j->k, j->key, j->value, &j->w);
  else
    hot_remove(*j->set, j->k, j->key);
  j->ran = true;
}

// The caller holds the key's writer lock and the resize lock (shared) until hot_finish().
void Hdnh::hot_begin(HotJob* j, int op, const LevelSet& set, const Hashed& k, std::string_view key,
                     std::string_view value) {
  if (cfg_.replacement == Replacement::kOff) return;
  j->op = op;
  j->set = &set;
  j->k = k;
  j->key = key;
  j->value = value;
  if (!cfg_.background_write) return;  // inline: all of it in hot_finish()
  j->partner = partner();
  j->partner->job = j;
  j->partner->worker.wake();  // sync_write_signal: incomplete
}

void Hdnh::hot_finish(HotJob* j) {
  if (j->op == 0) return;
  if (j->partner != nullptr) j->partner->worker.wait_idle();
  if (!j->ran) run_hot_job(j);  // inline, or the partner was stopped
  if (j->op == kHotPut) hot_publish(j->k, j->w);
}

void Hdnh::stop() {
  std::lock_guard<std::mutex> g(partners_mu_);
  for (unsigned t = 0; t < pm::ThreadRegistry::kMaxThreads; ++t)
    if (partners_[t]) partners_[t]->worker.stop();
}

}  // namespace pmhash::hdnh
