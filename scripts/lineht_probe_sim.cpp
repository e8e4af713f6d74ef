// LineHT's bounded linear probe, simulated (docs/schemes/lineht.md "The bound 64"): shards
// of 3-slot buckets grown from 64 buckets by doubling, uniform homes; prints the mean and
// minimum load factor at which a shard had to resize, for probe bounds 32 and 64. Like
// LineHT::resize, a doubling re-places every key and doubles again while one finds no slot.
//
//   g++ -O2 -std=c++20 -o /tmp/lineht_probe_sim scripts/lineht_probe_sim.cpp
//   /tmp/lineht_probe_sim KEYS_PER_SHARD SHARDS     (20M keys in 256 shards: 78125 16)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

struct Shard {
  uint64_t n = 64;
  std::vector<uint8_t> used = std::vector<uint8_t>(64);
  bool put(uint32_t h, uint64_t bound) {
    uint64_t home = (uint64_t{h} * n) >> 32;
    for (uint64_t d = 0; d < bound && d < n; ++d)
      if (uint8_t& u = used[(home + d) % n]; u < 3) return ++u, true;
    return false;
  }
};

void run(uint64_t per_shard, int shards, uint64_t bound) {
  std::mt19937_64 rng(7);
  double sum = 0, lowest = 1;
  long resizes = 0;
  for (int s = 0; s < shards; ++s) {
    Shard sh;
    std::vector<uint32_t> keys;
    for (uint64_t i = 0; i < per_shard; ++i) {
      uint32_t h = static_cast<uint32_t>(rng());
      while (!sh.put(h, bound)) {
        double lf = double(keys.size()) / double(3 * sh.n);
        sum += lf, lowest = std::min(lowest, lf), ++resizes;
        for (bool placed = false; !placed;) {
          sh.n *= 2;
          sh.used.assign(sh.n, 0);
          placed = true;
          for (uint32_t k : keys) placed = placed && sh.put(k, bound);
        }
      }
      keys.push_back(h);
    }
  }
  std::printf("probe %3lu: %.1f resizes per shard, load factor at a resize mean %.3f, min %.3f\n",
              static_cast<unsigned long>(bound), double(resizes) / shards, sum / resizes, lowest);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t per_shard = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 78125;
  int shards = argc > 2 ? std::atoi(argv[2]) : 16;
  for (uint64_t bound : {32, 64}) run(per_shard, shards, bound);
}
