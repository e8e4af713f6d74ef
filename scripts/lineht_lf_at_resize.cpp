// The mean load factor at which LineHT's shards of a given length resize (docs/schemes/
// lineht.md "A bounded directory"): SHARDS shards of BUCKETS buckets (probe 64), loaded by one
// thread with as many random 8-byte keys as they have slots, so every shard grows once
// past its first table; prints the counters `shard_resizes`, `resize_lf_mean`, `resize_lf_min`.
//
//   cmake --build build/release --target pmhash
//   g++ -O2 -std=c++20 -Iinclude -o /tmp/lf_at_resize scripts/lineht_lf_at_resize.cpp \
//     build/release/libpmhash.a $(pkg-config --libs libpmem2 liburcu libxxhash) -lpthread
//   for b in 64 512 1024 2048 4096 16384; do
//     rm -f /dev/shm/lf.pool; /tmp/lf_at_resize /dev/shm/lf.pool $((2097152 / b)) $b; done
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <pmhash/index.hpp>
#include <random>
#include <string>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s POOL SHARDS BUCKETS [SEED]\n", argv[0]);
    return 2;
  }
  const uint64_t shards = std::strtoull(argv[2], nullptr, 10);
  const uint64_t buckets = std::strtoull(argv[3], nullptr, 10);
  std::mt19937_64 rng(argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 1);
  pmhash::Options o;
  o.scheme = "lineht";
  o.create = true;
  o.pool_size = 4ull << 30;
  o.params = {{"shards", std::to_string(shards)}, {"buckets", std::to_string(buckets)}};
  std::unique_ptr<pmhash::Index> idx;
  pmhash::Status s = pmhash::Index::open(argv[1], o, &idx);
  if (!s.ok()) {
    std::fprintf(stderr, "open: %s\n", s.to_string().c_str());
    return 1;
  }
  for (uint64_t i = 0; i < shards * buckets * 3; ++i) {
    uint64_t k = rng();
    std::string_view kv(reinterpret_cast<const char*>(&k), 8);
    if (!(s = idx->insert(kv, kv)).ok() && s.code() != pmhash::Code::kAlreadyExists) {
      std::fprintf(stderr, "insert: %s\n", s.to_string().c_str());
      return 1;
    }
  }
  auto c = idx->stats().counters;
  std::printf(
      "buckets %llu: %.0f resizes of %llu shards, load factor at a resize mean %.4f min %.4f\n",
      static_cast<unsigned long long>(buckets), c["shard_resizes"],
      static_cast<unsigned long long>(shards), c["resize_lf_mean"], c["resize_lf_min"]);
  return idx->close().ok() ? 0 : 1;
}
