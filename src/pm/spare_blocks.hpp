// Spare blocks: small blocks allocated ahead of need, in batches, on the log-free protocol.
//
// A write path that publishes a fresh block (SmartHT's chained bucket, a variable-format
// item) pays, with Allocator::mark(), one more flushed line per write: the block's
// allocation bit. Taking the block from a stock marked earlier moves that line off the write
// path: a refill reserves a batch of 16 blocks of one size, sets their bits, flushes each
// bitmap line once (neighbouring blocks share one). The write path then persists only the
// block and the store that publishes it.
//
// The refill's fence is the write's own: a refill flushes the bits and does not fence, since
// the thread that refilled fences before it publishes any block it takes (the item or
// bucket is persisted first). That fence orders only its own thread's flushes, though
// (sfence), and threads that hash alike share a stripe: a thread taking a block another
// thread refilled flushes the block's bitmap line again, so its own fence orders the bit
// (one more flush, on the rare shared take). A refill: 1 flush per bitmap line, no fence.
//
// Stocks are striped by thread (a hash of the thread id picks one of kStripes): two writers
// do not wait on one lock, nor on each other's refill (with one shared stock, variable-format
// writes in the log-free schemes did not scale from 1 to 2 threads).
//
// A crash leaves the untaken spares allocated and unreachable: only for schemes whose
// recovery sweeps (Allocator::sweep; docs/crash-testing.md "Allocation without a log"). At a
// clean close give_back() unmarks them before Allocator::write_back(); until then for_each()
// reports them as owned, so check()'s allocated == reachable holds.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace pmhash::pm {

struct Reservation;
class Allocator;

// Test-only fault (Pool::mutations): a block taken from another thread's refill is not
// flushed again, so nothing this thread fences orders its allocation bit.
inline constexpr uint64_t kMutationSpareBitNotReflushed = 32;

class SpareBlocks {
 public:
  static constexpr uint64_t kMaxBlock = 1024;  // larger blocks are marked on the write path

  explicit SpareBlocks(Allocator& alloc) : alloc_(alloc) {}

  // A block of at least `bytes` whose allocation bit is persisted. Empty when the pool is
  // full, or when `bytes` > kMaxBlock (the caller reserves and marks it itself).
  Reservation take(uint64_t bytes);
  // Clean close (nothing reachable points to a spare): every spare unmarked.
  void give_back();
  void for_each(const std::function<void(uint64_t off)>& fn) const;
  // Blocks per refill (tests make it larger to see no refill in a run).
  void set_batch_blocks(uint64_t n) { batch_blocks_ = n; }
  // Tests: every thread shares stripe 0, so blocks are taken by threads that did not
  // refill them (the cross-thread flush above).
  void share_one_stripe(bool on) { one_stripe_ = on; }
  uint64_t refills() const;

 private:
  // One thread's stocks (threads that hash alike share one). By block size: stock[i] holds
  // blocks of 64 << i bytes (64 .. kMaxBlock).
  struct alignas(64) Stripe {
    mutable std::mutex mu;
    std::array<std::vector<Reservation>, 5> stock;
    // Who refilled stock[i] (pm::thread_token: never reused, and an exited refiller's
    // flushes were not necessarily fenced).
    std::array<uint64_t, 5> refilled_by{};
  };
  static constexpr size_t kStripes = 16;
  static_assert(uint64_t{64} << 4 == kMaxBlock);
  Stripe& mine();
  bool refill(uint64_t block, std::vector<Reservation>* stock);

  Allocator& alloc_;
  uint64_t batch_blocks_ = 16;
  bool one_stripe_ = false;
  std::array<Stripe, kStripes> stripes_;
  std::atomic<uint64_t> refills_{0};
};

}  // namespace pmhash::pm
