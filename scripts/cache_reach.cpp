// The reach of this machine's caches (docs/schemes/lineht.md "A home sketch for negative
// reads"): a dependent chase over anonymous memory (huge pages asked for) of each size given
// in MB, one random cycle through every 64-byte line as tools/bench/limit.cpp links it;
// prints the median [min-max] of 3 timings of 4M steps, ns per step, one thread.
//
//   g++ -O2 -o /tmp/cache_reach scripts/cache_reach.cpp
//   /tmp/cache_reach 1 2 4 8 16 32 64 2048
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
int main(int argc, char** argv) {
  for (int ai = 1; ai < argc; ++ai) {
    uint64_t mb = atoll(argv[ai]), bytes = mb << 20, lines = bytes / 64;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(p, bytes, MADV_HUGEPAGE);
    auto* base = (uint64_t*)p;
    std::vector<uint64_t> order(lines);
    for (uint64_t i = 0; i < lines; ++i) order[i] = i;
    std::mt19937_64 rng(42);
    for (uint64_t i = lines - 1; i > 0; --i) std::swap(order[i], order[rng() % i]);
    for (uint64_t i = 0; i < lines; ++i) base[order[i] * 8] = order[(i + 1) % lines];
    std::vector<double> r;
    uint64_t at = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const uint64_t steps = 1 << 22;
      for (uint64_t i = 0; i < steps / 4; ++i) at = base[at * 8];
      auto t0 = std::chrono::steady_clock::now();
      for (uint64_t i = 0; i < steps; ++i) at = base[at * 8];
      r.push_back(
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
          steps);
    }
    std::sort(r.begin(), r.end());
    printf("%4lu MB: %.1f [%.1f-%.1f] ns (sink %lu)\n", mb, r[1], r[0], r[2], at & 1);
    munmap(p, bytes);
  }
}
