#include "limit.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

namespace pmhash::bench {
namespace {

constexpr uint64_t kLine = 64;
constexpr uint64_t kStepsPerThread = 1 << 21;

// Follows the chain from `start` for `steps` steps; returns where it ended (so the loads
// cannot be optimised away).
uint64_t chase(const uint64_t* base, uint64_t start, uint64_t steps) {
  uint64_t at = start;
  for (uint64_t i = 0; i < steps; ++i) at = base[at * (kLine / 8)];
  return at;
}

bool measure(const std::string& dir, uint64_t bytes, int threads, MissLatency* out,
             std::string* error) {
  std::string path = dir + "/pmhash-bench-limit-" + std::to_string(getpid());
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *error = "limit: cannot create " + path;
    if (fd >= 0) close(fd);
    unlink(path.c_str());
    return false;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  unlink(path.c_str());  // the mapping keeps it until munmap
  if (p == MAP_FAILED) {
    *error = "limit: cannot map " + std::to_string(bytes) + " bytes in " + dir;
    return false;
  }
  auto* base = static_cast<uint64_t*>(p);
  uint64_t lines = bytes / kLine;
  link_cycle(base, lines, 42);
  std::vector<std::thread> ts;
  std::vector<double> ns(threads);
  std::atomic<int> ready{0};
  std::atomic<uint64_t> sink{0};
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      uint64_t at = chase(base, lines / threads * t, 1 << 16);  // warm the TLB path
      ready++;
      while (ready.load() < threads) std::this_thread::yield();
      auto t0 = std::chrono::steady_clock::now();
      at = chase(base, at, kStepsPerThread);
      auto t1 = std::chrono::steady_clock::now();
      ns[t] = std::chrono::duration<double, std::nano>(t1 - t0).count() / kStepsPerThread;
      sink += at;
    });
  for (auto& t : ts) t.join();
  out->page_bytes = mapped_page_bytes(p, bytes);
  munmap(p, bytes);
  double sum = 0;
  for (double x : ns) sum += x;
  out->ns_per_miss = sum / threads;
  out->bytes = bytes;
  return sink.load() != ~uint64_t{0};  // (always true)
}

}  // namespace

// One random cycle through every line of the buffer (Sattolo's algorithm): each line's
// first word holds the index of the next line, so every step is a miss the prefetcher
// cannot guess.
void link_cycle(uint64_t* base, uint64_t lines, uint64_t seed) {
  std::vector<uint64_t> order(lines);
  for (uint64_t i = 0; i < lines; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (uint64_t i = lines - 1; i > 0; --i) {
    uint64_t j = rng() % i;  // j < i: one cycle, not several
    std::swap(order[i], order[j]);
  }
  for (uint64_t i = 0; i < lines; ++i) base[order[i] * (kLine / 8)] = order[(i + 1) % lines];
}

bool miss_latency(const std::string& dir, uint64_t bytes, int threads, MissLatency* out,
                  std::string* error) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, uint64_t, int>, MissLatency> cache;
  std::lock_guard g(mu);
  auto key = std::make_tuple(dir, bytes, threads);
  auto it = cache.find(key);
  if (it == cache.end()) {
    MissLatency m;
    if (!measure(dir, bytes, threads, &m, error)) return false;
    it = cache.emplace(key, m).first;
  }
  *out = it->second;
  return true;
}

uint64_t mapped_page_bytes(const void* addr, uint64_t len) {
  // /proc/self/smaps: the mapping's "Rss" and its huge-page share ("FilePmdMapped" for DAX
  // and file systems, "ShmemPmdMapped" for tmpfs), in kB.
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  auto lo = reinterpret_cast<uintptr_t>(addr);
  bool in = false;
  uint64_t rss = 0, pmd = 0, kernel_page = 4096;
  while (std::getline(smaps, line)) {
    uintptr_t a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') != 5 &&
        line.find('-') < 17) {
      in = a <= lo && lo < b;
      continue;
    }
    if (!in) continue;
    std::istringstream s(line);
    std::string field;
    uint64_t kb = 0;
    s >> field >> kb;
    if (field == "Rss:") rss += kb;
    if (field == "FilePmdMapped:" || field == "ShmemPmdMapped:") pmd += kb;
    if (field == "KernelPageSize:") kernel_page = kb * 1024;
  }
  (void)len;
  return rss > 0 && pmd * 2 >= rss ? uint64_t{2} << 20 : kernel_page;
}

}  // namespace pmhash::bench
