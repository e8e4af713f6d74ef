// The machine's limit for a hash index on this memory: a dependent pointer chase over a
// buffer of the pool's size, in a file beside the pool (same file system, so the same kind
// of memory and the same page size). Its time per step is the cost of one cache miss; a read
// row divides its time per operation by it ("miss-equivalents per operation"), a figure that
// does not depend on how fast this machine's memory happens to be.
#pragma once

#include <cstdint>
#include <string>

namespace pmhash::bench {

struct MissLatency {
  double ns_per_miss = 0;   // per dependent step, each thread chasing its own chain
  uint64_t bytes = 0;       // buffer size
  uint64_t page_bytes = 0;  // page size the buffer was mapped with (4 KiB or 2 MiB)
};

// Measures with `threads` threads chasing at once (the run's threads, so that they share
// the memory system as the run's threads do). Cached per (dir, bytes, threads) for the
// process: every row of one pmhash-bench run uses the same measurement.
bool miss_latency(const std::string& dir, uint64_t bytes, int threads, MissLatency* out,
                  std::string* error);

// The page size the kernel maps [addr, addr + len) of a file mapping with: 2 MiB when most of
// its resident part is mapped with huge pages (a huge=always tmpfs, DAX), else the base page.
uint64_t mapped_page_bytes(const void* addr, uint64_t len);

// Links the first word of each of `lines` 64-byte lines into one random cycle through all
// of them (exposed for tests).
void link_cycle(uint64_t* base, uint64_t lines, uint64_t seed);

}  // namespace pmhash::bench
