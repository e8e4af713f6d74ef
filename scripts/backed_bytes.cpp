// How many bytes of a sparse pool file a LineHT load backs (docs/design.md "Chunks are taken
// first fit"): creates POOL (8 GiB, sparse), loads KEYS 8-byte keys with 2 threads, with a
// capacity hint of HINT (0: growing from empty), and prints the file's backed bytes (its
// st_blocks) beside the allocator's live bytes.
//
//   cmake --build build/release --target pmhash
//   g++ -O2 -std=c++20 -Iinclude -o /tmp/backed_bytes scripts/backed_bytes.cpp \
//     build/release/libpmhash.a $(pkg-config --libs libpmem2 liburcu libxxhash) -lpthread
//   rm -f /dev/shm/b.pool; /tmp/backed_bytes /dev/shm/b.pool 20000000 0
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <pmhash/index.hpp>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s POOL KEYS HINT\n", argv[0]);
    return 2;
  }
  const uint64_t keys = std::strtoull(argv[2], nullptr, 10);
  pmhash::Options o;
  o.scheme = "lineht";
  o.capacity_hint = std::strtoull(argv[3], nullptr, 10);
  o.pool_size = 8ull << 30;
  std::unique_ptr<pmhash::Index> index;
  pmhash::Status s = pmhash::Index::open(argv[1], o, &index);
  if (!s.ok()) {
    std::fprintf(stderr, "open: %s\n", s.to_string().c_str());
    return 1;
  }
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (uint64_t i = t; i < keys; i += 2) {
        uint64_t k = i * 0x9E3779B97F4A7C15ull + 1;
        if (!index->insert({reinterpret_cast<char*>(&k), 8}, {reinterpret_cast<char*>(&i), 8}).ok())
          std::abort();
      }
    });
  for (auto& t : threads) t.join();
  struct stat st {};
  stat(argv[1], &st);
  std::printf("backed_mb %.0f live_pm_mb %.0f\n", double(st.st_blocks) * 512 / 1e6,
              double(index->stats().pm_bytes) / 1e6);
  return index->close().ok() ? 0 : 1;
}
