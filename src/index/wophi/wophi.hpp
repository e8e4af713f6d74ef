// WOPHI (Xiao et al., "Write-Optimized Persistent Hash Index for Non-Volatile Memory"):
// chained hashing whose chain buckets come from Pre-Allocation Buckets (PAB) instead of
// being allocated on the write path, written with log-free failure-atomic writes.
// docs/schemes/wophi.md maps the paper to this code.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "common/worker.hpp"
#include "index/scheme.hpp"

namespace pmhash::wophi {

inline constexpr int kSlots = 4;  // ASSOC_NUM

// A bucket (§III-A, Fig. 1: four tokens, four key-value slots, a next pointer), laid out on
// two cache lines after Level hashing's bucket:
//
//   line 0 | tokens 4 x 1 B, pad 4 B | next 8 B | slot 0 16 B | slot 1 16 B | slot 2 16 B |
//   line 1 | slot 3 16 B | unused 8 B | pad 40 B |
//
// A new chain bucket holds one item, in slot 0: only line 0 is written and flushed (line 1
// holds slot 3, dead while its token is 0). The word after slot 3 once held a debug-only
// back pointer whose flush cost the chain insert a third line; it is no longer written.
struct alignas(128) Bucket {
  uint64_t tokens;
  uint64_t next;
  common::Slot slots[kSlots];
  uint64_t unused;
  uint64_t pad[5];

  bool live(int i) const { return ((tokens >> (8 * i)) & 0xFF) == 1; }
  static uint64_t with_token(uint64_t tokens, int i, bool on) {
    return (tokens & ~(uint64_t{0xFF} << (8 * i))) | (uint64_t{on} << (8 * i));
  }
};
static_assert(sizeof(Bucket) == 128);
static_assert(offsetof(Bucket, slots) == 16 && offsetof(Bucket, unused) == 80);

inline constexpr int kMaxAreas = 32;

// PM root. PAB area i holds pab_initial << i buckets.
struct Root {
  uint64_t magic;
  uint64_t nbuckets;           // main buckets
  uint64_t buckets;            // offset of the main bucket array
  uint64_t stripe;             // main buckets per lock stripe
  uint64_t expand_bucket_num;  // PAB buckets handed out: exact after a clean close (open
                               // recomputes it from the chains, so inserts do not persist it)
  uint64_t pab_initial;        // buckets in PAB area 0
  uint64_t nareas;             // PAB areas allocated
  uint64_t reserved;
  uint64_t areas[kMaxAreas];  // offsets of the PAB areas
};
inline constexpr uint64_t kRootMagic = 0x4948'504F'57ull;  // "WOPHI"

class Wophi final : public Scheme {
 public:
  Wophi(SchemeContext& ctx, uint64_t root_off, bool after_crash);
  ~Wophi() override;
  static Status layout(const Options& o, const common::Params& given, common::Params* layout);
  struct Runtime {
    bool pab = true;                 // `pab`: pre-allocated buckets (off: the baseline)
    bool grow_in_background = true;  // `pab_grow`: background | inline
  };
  static Status parse_runtime(const common::Params& params, Runtime* out);
  static Status create(SchemeContext& ctx, std::unique_ptr<Scheme>* out);
  static Status open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out);

  Status put(std::string_view key, std::string_view value, PutMode mode) override;
  Status get(std::string_view key, std::string* value) override;
  Status remove(std::string_view key) override;
  uint64_t size() const override;
  uint64_t capacity_slots() const override;
  uint64_t dram_bytes() const override;
  void counters(std::map<std::string, double>* out) const override;
  bool check(std::string* report) const override;
  void for_each_reachable(const std::function<void(uint64_t off)>& fn) const override;
  void for_each(const std::function<void(const common::Slot&)>& fn) const override;
  bool for_each_in_pieces(const std::function<void(const common::Slot&)>& fn,
                          const std::function<void()>& piece_done) const override;
  void close() override;
  void wait_idle() override;
  void stop() override;

 private:
  struct alignas(64) Stripe {
    mutable std::shared_mutex lock;
  };
  struct Hashed {
    uint64_t h, kw, index;
  };
  Hashed hashed(std::string_view key) const;
  Bucket* main(uint64_t i) const { return pool_.ptr<Bucket>(root_->buckets) + i; }
  Bucket* at(uint64_t off) const { return pool_.ptr<Bucket>(off); }
  // `prev` (optional): the bucket before *b, null when *b is the main bucket.
  bool find(const Hashed& k, std::string_view key, Bucket** b, int* slot,
            Bucket** prev = nullptr) const;
  // Unlinks the emptied chain bucket b (after prev), freeing `item` if non-zero.
  void reclaim(Bucket* prev, Bucket* b, uint64_t item);
  // PAB: global bucket index <-> offset.
  uint64_t area_start(uint64_t a) const { return root_->pab_initial * ((uint64_t{1} << a) - 1); }
  uint64_t pab_capacity(uint64_t nareas) const { return area_start(nareas); }
  uint64_t pab_offset(uint64_t g) const;
  bool pab_index(uint64_t off, uint64_t* g) const;
  Status take_chain_bucket(pm::Reservation* r, Bucket** out);
  Status grow_pab();  // one more PAB area (under grow_mu_)
  bool pab_nearly_full() const;
  void maybe_grow_in_background();
  void grow_in_background();  // the worker's task
  void recover_pab();         // at open: taken-but-unlinked PAB buckets are reused

  pm::Pool& pool_;
  pm::Allocator& alloc_;
  pm::Epochs& epochs_;  // for_each: freed items are reused only after its callbacks
  const common::Items& items_;
  uint64_t root_off_;
  Root* root_;
  uint64_t nstripes_;
  std::unique_ptr<Stripe[]> stripes_;
  bool use_pab_;             // false: allocate every chain bucket on the write path (the baseline)
  bool grow_in_background_;  // false: grow only when a take finds the PAB exhausted
  // Next PAB bucket to hand out (DRAM); never beyond pab_cap_: a take that finds the PAB
  // exhausted grows it first or fails without taking.
  std::atomic<uint64_t> pab_next_{0};
  std::atomic<uint64_t> pab_cap_{0};  // PAB buckets in the published areas
  std::atomic<uint64_t> nareas_{0};   // PAB areas published (DRAM copy of Root::nareas)
  // PAB buckets to hand out again: holes found at open and buckets deletes unlinked.
  struct FreeList {
    std::mutex mu;
    std::vector<uint64_t> buckets;
  };
  mutable FreeList pab_free_;
  std::atomic<uint64_t> reclaimed_{0};      // chain buckets unlinked by deletes
  std::atomic<uint64_t> chain_buckets_{0};  // chain buckets linked (counted at open)
  std::mutex grow_mu_;
  // The last growth failed (pool full): no background retries until an inline one succeeds.
  std::atomic<bool> grow_failed_{false};
  std::atomic<uint64_t> grows_{0}, grow_failures_{0}, allocs_on_write_{0};
  // Background PAB growth (pab_grow=background) runs on one worker, started by the first
  // request (a process that forks keeps no idle thread per index) and stopped by stop() or
  // the destructor; `grower_` is null until then.
  common::Worker* start_grower();  // null once stopped
  std::mutex worker_mu_;
  bool stopped_ = false;                    // under worker_mu_
  std::unique_ptr<common::Worker> worker_;  // under worker_mu_
  std::atomic<common::Worker*> grower_{nullptr};
};

}  // namespace pmhash::wophi
