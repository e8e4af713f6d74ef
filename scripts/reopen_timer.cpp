// Recovery in a fresh process (docs/schemes/hdnh.md "Recovery lists"): pmhash-bench reopens
// its pool in the process that loaded it, where the allocator hands recovery memory that is
// already faulted in; a restart after a crash starts with none. `load` creates POOL with
// KEYS 8-byte keys (2 threads) and exits without close() (a crash); each later run opens
// it, prints the open's milliseconds and the HDNH hot-table fill's (recovery_hot_ms), and
// exits without close() again, so every open is a crash recovery. Arguments `k=v` after
// KEYS set scheme parameters (e.g. hot_table=off).
//
//   cmake --build build/release --target pmhash
//   g++ -O2 -std=c++20 -Iinclude -o /tmp/reopen_timer scripts/reopen_timer.cpp \
//     build/release/libpmhash.a $(pkg-config --libs libpmem2 liburcu libxxhash) -lpthread
//   /tmp/reopen_timer /dev/shm/r.pool hdnh 10000000 load
//   for i in 1 2 3 4 5; do /tmp/reopen_timer /dev/shm/r.pool hdnh 10000000; done
//   for i in 1 2 3 4 5; do /tmp/reopen_timer /dev/shm/r.pool hdnh 10000000 hot_table=off; done
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <pmhash/index.hpp>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s POOL SCHEME KEYS [load] [param=value ...]\n", argv[0]);
    return 2;
  }
  const uint64_t keys = std::strtoull(argv[3], nullptr, 10);
  bool load = false;
  pmhash::Options o;
  for (int i = 4; i < argc; ++i) {  // `load`, or a scheme parameter (Options::params)
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    if (arg == "load")
      load = true;
    else if (eq != std::string::npos)
      o.params[arg.substr(0, eq)] = arg.substr(eq + 1);
  }
  o.scheme = argv[2];
  o.capacity_hint = keys;
  o.pool_size = 8ull << 30;
  o.create = load;
  std::unique_ptr<pmhash::Index> index;
  auto t0 = std::chrono::steady_clock::now();
  pmhash::Status s = pmhash::Index::open(argv[1], o, &index);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok()) {
    std::fprintf(stderr, "open: %s\n", s.to_string().c_str());
    return 1;
  }
  if (load) {
    std::vector<std::thread> threads;
    for (uint64_t t = 0; t < 2; ++t)
      threads.emplace_back([&, t] {
        for (uint64_t i = t; i < keys; i += 2) {
          uint64_t k = i * 0x9E3779B97F4A7C15ull + 1;
          if (!index->insert({reinterpret_cast<char*>(&k), 8}, {reinterpret_cast<char*>(&i), 8})
                   .ok())
            std::abort();
        }
      });
    for (auto& t : threads) t.join();
  }
  pmhash::Stats st = index->stats();
  std::printf("open_ms %.2f hot_ms %.1f size %llu\n", ms, st.counters["recovery_hot_ms"],
              static_cast<unsigned long long>(st.size));
  std::fflush(stdout);
  _exit(0);  // no close(): the next open recovers from a crash
}
