// A floor for HDNH's recovery (§3.7) at 10M keys, 2 threads (docs/schemes/hdnh.md "Session
// 15"): the work §3.7's rebuild cannot avoid, without the index around it (no pool,
// allocator, root checks, levels, epochs, variable format), timed in a fresh process like
// scripts/reopen_timer.cpp. `make` writes FILE: a table with the geometry of HDNH's at 10M
// keys and capacity hint 10M (16 KiB segments of 64 buckets of 256 B, bottom M = 13020
// segments, top 2M; buckets laid out as nv_table.hpp's Bucket), the same keys as
// reopen_timer's load (k_i = i * 0x9E3779B97F4A7C15 + 1, value i), each in the least-loaded
// of its four candidate buckets of the top level, else of the bottom (HDNH's insert rule).
// Every later run maps FILE and, with 2 threads:
//
//   read   reads every bucket's bitmap and every valid slot once (sums the words)
//   ocf    read + hashes each key (XXH3, as the rebuild) + writes its OCF entry (2 B per
//          slot, fresh anonymous THP memory, 40 MB)
//   fault  only maps and faults in (MADV_POPULATE_WRITE, THP) the OCF and the hot table's
//          fresh DRAM: 40 MB + 320 MB (two levels of 128-byte 4-slot buckets, hot_table.hpp)
//   part   everything §3.7 asks, placed the cheapest way we know (recovery.cpp's: hot-table
//          partitions of ~512 KiB, the records whose hot bucket is in the partition being
//          scanned placed at once, the others through per-partition lists; run_part below)
//   full   ocf + fault + each record straight into its random hot bucket in table order,
//          both levels' lines prefetched 16 records ahead, threads not coordinated (relaxed
//          stores; a lost race only makes it cheaper)
//   full-nopf  full without MADV_POPULATE_WRITE (pages faulted by the stores)
//   warm   touches and frees 2 GiB (run before a timed process: see the doc)
//
// and prints the milliseconds from before the first mmap to the last join.
//
//   g++ -O3 -std=c++20 -o /tmp/hdnh_floor scripts/hdnh_recovery_floor.cpp -lpthread
//   /tmp/hdnh_floor /mnt/pmhuge/floor.tbl make
//   for m in read ocf fault part full; do /tmp/hdnh_floor /mnt/pmhuge/floor.tbl $m; done
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace {

constexpr uint64_t kM = 13020;        // bottom segments at capacity hint 10M
constexpr uint64_t kSegBuckets = 64;  // 16 KiB segments
constexpr uint64_t kBottom = kM * kSegBuckets, kTop = 2 * kBottom, kBuckets = kTop + kBottom;
constexpr uint64_t kKeys = 10000000;
constexpr uint64_t kHotStride = 128;  // fixed format, 4 slots: head line + payload line
constexpr int kHotSlots = 4;

struct alignas(256) Bucket {
  uint64_t bitmap, reserved;
  struct {
    uint64_t key, value;
  } slots[8];
  uint8_t pad[112];
};
static_assert(sizeof(Bucket) == 256);

uint64_t fast_range(uint32_t h, uint64_t n) {
  return (uint64_t{h} * n) >> 32;
}
uint64_t hash(uint64_t kw) {
  return XXH3_64bits_withSeed(&kw, 8, 0);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void* anon(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

int make(const char* path) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ftruncate(fd, kBuckets * sizeof(Bucket)) != 0) return 1;
  auto* t = static_cast<Bucket*>(
      mmap(nullptr, kBuckets * sizeof(Bucket), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (t == MAP_FAILED) return 1;
  uint64_t in_bottom = 0;
  for (uint64_t i = 0; i < kKeys; ++i) {
    uint64_t k = i * 0x9E3779B97F4A7C15ull + 1, h1 = hash(k), h2 = XXH3_64bits_withSeed(&k, 8, 1);
    bool placed = false;
    for (int lv = 0; lv < 2 && !placed; ++lv) {
      Bucket* base = lv == 0 ? t : t + kTop;
      uint64_t segs = lv == 0 ? 2 * kM : kM;
      uint64_t sa = fast_range(uint32_t(h1 >> 32), segs), sb = fast_range(uint32_t(h2 >> 32), segs);
      uint64_t ba = (h1 >> 8) & 63, bb = (h2 >> 8) & 63;
      uint64_t c[4] = {sa * 64 + ba, sa * 64 + bb, sb * 64 + ba, sb * 64 + bb};
      int best = -1, bestn = 8;
      for (int j = 0; j < 4; ++j) {
        int n = std::popcount(base[c[j]].bitmap);
        if (n < bestn) best = j, bestn = n;
      }
      if (best < 0) continue;
      Bucket& b = base[c[best]];
      int s = std::countr_one(b.bitmap);
      b.slots[s].key = k;
      b.slots[s].value = i;
      b.bitmap |= uint64_t{1} << s;
      placed = true;
      in_bottom += lv;
    }
    if (!placed) return std::fprintf(stderr, "table full at %llu\n", (unsigned long long)i), 1;
  }
  munmap(t, kBuckets * sizeof(Bucket));
  close(fd);
  std::printf("made %llu keys, %llu in the bottom level\n", (unsigned long long)kKeys,
              (unsigned long long)in_bottom);
  return 0;
}

struct Hot {
  char* base[2];
  uint64_t segs[2];
  uint64_t bucket(int lv, uint64_t h) const {
    return fast_range(uint32_t(h >> 32), segs[lv]) * kSegBuckets + ((h >> 8) & (kSegBuckets - 1));
  }
  void prefetch(uint64_t h) const {
    for (int lv = 0; lv < 2; ++lv) {
      const char* p = base[lv] + bucket(lv, h) * kHotStride;
      __builtin_prefetch(p, 1);
      __builtin_prefetch(p + 64, 1);
    }
  }
  void place(uint64_t h, uint64_t kw, uint64_t vw) const {
    for (int lv = 0; lv < 2; ++lv) {
      char* p = base[lv] + bucket(lv, h) * kHotStride;
      auto* meta = reinterpret_cast<std::atomic<uint16_t>*>(p);
      for (int e = 0; e < kHotSlots; ++e) {
        if (meta[e].load(std::memory_order_relaxed) != 0) continue;
        reinterpret_cast<std::atomic<uint64_t>*>(p + 16)[e].store(kw, std::memory_order_relaxed);
        reinterpret_cast<std::atomic<uint64_t>*>(p + 64)[e].store(vw, std::memory_order_relaxed);
        meta[e].store(9, std::memory_order_relaxed);  // valid, version 1
        return;
      }
    }
  }
};

// "part": the cheapest placement we know (recovery.cpp's, without the index around it).
// The hot table is cut into partitions of whole bottom segments (about 512 KiB of hot
// buckets in both levels); thread t owns partitions [t k, (t+1) k). For each partition it
// faults the partition's hot buckets in (MADV_POPULATE_WRITE), scans the table segments
// lined up with it (bottom s0..s1, top 2 s0..2 s1), writes OCF entries, places the records
// whose hot bucket is in the partition (prefetched, 16 records later) and appends the
// others (24 B) to a list per partition in a per-thread arena of 4 KiB chunks (THP).
// After a join each thread fills its partitions from both threads' lists.
struct Rec {
  uint64_t h, kw, vw;
};
struct Chunk {
  static constexpr uint32_t kRecs = (4096 - 16) / sizeof(Rec);
  Chunk* next;
  uint64_t unused;
  Rec r[kRecs];
};
struct Lists {
  struct Tail {
    Chunk *head = nullptr, *chunk = nullptr;
    uint32_t n = 0;
  };
  std::vector<Tail> tails;
  char* arena;
  uint64_t used = 0;
  Lists(unsigned parts, uint64_t records)
      : tails(parts), arena(static_cast<char*>(anon((records / Chunk::kRecs + parts) * 4096))) {}
  void push(unsigned q, const Rec& r) {
    Tail& t = tails[q];
    if (t.chunk == nullptr || t.n == Chunk::kRecs) {
      auto* c = reinterpret_cast<Chunk*>(arena + used);
      used += sizeof(Chunk);
      c->next = nullptr;
      (t.chunk ? t.chunk->next : t.head) = c;
      t.chunk = c;
      t.n = 0;
    }
    t.chunk->r[t.n++] = r;
    __builtin_prefetch(reinterpret_cast<const char*>(t.chunk->r + t.n) + 2 * sizeof(Rec), 1);
  }
};
struct Ahead {  // place 16 records after their prefetch
  static constexpr unsigned kAhead = 16;
  Rec ring[kAhead];
  uint64_t seen = 0;
  void add(const Hot& ht, const Rec& r) {
    Rec& slot = ring[seen++ % kAhead];
    if (seen > kAhead) ht.place(slot.h, slot.kw, slot.vw);
    ht.prefetch(r.h);
    slot = r;
  }
  void drain(const Hot& ht) {
    for (uint64_t i = seen > kAhead ? seen - kAhead : 0; i < seen; ++i)
      ht.place(ring[i % kAhead].h, ring[i % kAhead].kw, ring[i % kAhead].vw);
    seen = 0;
  }
};

uint64_t part_start(uint64_t n, uint64_t q, uint64_t parts) {
  return (n * q + parts - 1) / parts;
}

uint64_t run_part(const Bucket* table, uint16_t* ocf, const Hot& ht, unsigned nt) {
  const uint64_t k = kBottom * kHotStride * 3 / (uint64_t{nt} * (512 << 10)), parts = nt * k;
  std::vector<Lists*> lists(nt);
  std::vector<uint64_t> found(nt);
  auto on_threads = [&](auto fn) {
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < nt; ++t) ts.emplace_back(fn, t);
    for (auto& th : ts) th.join();
  };
  on_threads([&](unsigned t) {
    lists[t] = new Lists(unsigned(parts), kKeys);  // address space; only written pages are faulted
    Lists& mine = *lists[t];
    Ahead ahead;
    uint64_t n = 0;
    for (uint64_t q = t * k; q < (t + 1) * k; ++q) {
      const uint64_t s0 = part_start(kM, q, parts), s1 = part_start(kM, q + 1, parts);
      for (int lv = 0; lv < 2; ++lv) {  // the partition's hot buckets, faulted in writable
        const uint64_t f = lv == 0 ? 2 : 1;
        madvise(ht.base[lv] + f * s0 * kSegBuckets * kHotStride,
                f * (s1 - s0) * kSegBuckets * kHotStride, MADV_POPULATE_WRITE);
      }
      for (int lv = 0; lv < 2; ++lv) {
        const uint64_t f = lv == 0 ? 2 : 1, base = lv == 0 ? 0 : kTop;
        const uint64_t end = base + f * s1 * kSegBuckets;
        for (uint64_t b = base + f * s0 * kSegBuckets; b < end; ++b) {
          if (b + 8 < end)
            for (int line = 0; line < 3; ++line)
              __builtin_prefetch(reinterpret_cast<const char*>(&table[b + 8]) + 64 * line);
          const Bucket& bk = table[b];
          for (uint64_t bits = bk.bitmap & 0xFF; bits; bits &= bits - 1) {
            int s = std::countr_zero(bits);
            Rec r{0, bk.slots[s].key, bk.slots[s].value};
            r.h = hash(r.kw);
            ocf[b * 8 + s] = uint16_t(0x80 | (r.h & 0xFF));
            ++n;
            const uint64_t hs = fast_range(uint32_t(r.h >> 32), kM);  // bottom hot segment
            if (hs >= s0 && hs < s1)
              ahead.add(ht, r);
            else
              mine.push(unsigned(hs * parts / kM), r);  // hs in [part_start(q), part_start(q+1))
          }
        }
      }
      ahead.drain(ht);
    }
    found[t] = n;
  });
  on_threads([&](unsigned t) {
    Ahead ahead;
    for (uint64_t q = t * k; q < (t + 1) * k; ++q) {
      for (Lists* l : lists)
        for (const Chunk* c = l->tails[q].head; c != nullptr; c = c->next) {
          const uint32_t n = c == l->tails[q].chunk ? l->tails[q].n : Chunk::kRecs;
          for (uint32_t i = 0; i < n; ++i) ahead.add(ht, c->r[i]);
        }
      ahead.drain(ht);
    }
  });
  return found[0] + found[1];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FILE make|read|ocf|fault|full|full-nopf\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[2];
  if (mode == "make") return make(argv[1]);
  if (mode == "warm") {  // touch and free 2 GiB: the next process gets memory the host backs
    const uint64_t bytes = uint64_t{2} << 30;
    madvise(anon(bytes), bytes, MADV_POPULATE_WRITE);
    return 0;
  }
  const bool read = mode != "fault",
             ocf = mode == "ocf" || mode.starts_with("full") || mode == "part",
             hot = mode.starts_with("full") || mode == "fault" || mode == "part",
             populate = mode != "full-nopf";
  if (!read && !hot) return 2;
  constexpr unsigned kThreads = 2;
  auto t0 = std::chrono::steady_clock::now();
  int fd = open(argv[1], O_RDWR);
  if (fd < 0) return 1;
  auto* table = static_cast<const Bucket*>(
      mmap(nullptr, kBuckets * sizeof(Bucket), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (table == MAP_FAILED) return 1;
  const uint64_t ocf_bytes = kBuckets * 8 * 2;
  auto* ocf_entries = ocf || mode == "fault" ? static_cast<uint16_t*>(anon(ocf_bytes)) : nullptr;
  Hot ht{};
  const uint64_t hot_bytes[2] = {kTop * kHotStride, kBottom * kHotStride};
  if (hot)
    for (int lv = 0; lv < 2; ++lv) {
      ht.base[lv] = static_cast<char*>(anon(hot_bytes[lv]));
      ht.segs[lv] = lv == 0 ? 2 * kM : kM;
    }
  if (mode == "part") {
    uint64_t n = run_part(table, ocf_entries, ht, kThreads);
    double ms = ms_since(t0);
    uint64_t placed = 0;
    for (int lv = 0; lv < 2; ++lv)
      for (uint64_t b = 0; b < hot_bytes[lv] / kHotStride; ++b)
        for (int e = 0; e < kHotSlots; ++e)
          placed += *reinterpret_cast<const uint16_t*>(ht.base[lv] + b * kHotStride + 2 * e) != 0;
    std::printf("part_ms %.1f records %llu hot %llu\n", ms, (unsigned long long)n,
                (unsigned long long)placed);
    std::fflush(stdout);
    _exit(0);
  }
  std::vector<uint64_t> sums(kThreads), found(kThreads);
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      if (populate) {  // this thread's half of the fresh DRAM
        auto half = [&](void* p, uint64_t bytes) {
          uint64_t lo = bytes / kThreads * t & ~uint64_t{4095},
                   hi = t + 1 == kThreads ? bytes : bytes / kThreads * (t + 1) & ~uint64_t{4095};
          madvise(static_cast<char*>(p) + lo, hi - lo, MADV_POPULATE_WRITE);
        };
        if (ocf_entries != nullptr) half(ocf_entries, ocf_bytes);
        if (hot)
          for (int lv = 0; lv < 2; ++lv) half(ht.base[lv], hot_bytes[lv]);
      }
      if (!read) return;
      constexpr unsigned kAhead = 16;
      struct Rec {
        uint64_t h, kw, vw;
      } ring[kAhead];
      uint64_t seen = 0, sum = 0, n = 0;
      const uint64_t b0 = kBuckets / kThreads * t,
                     b1 = t + 1 == kThreads ? kBuckets : kBuckets / kThreads * (t + 1);
      for (uint64_t b = b0; b < b1; ++b) {
        if (b + 8 < b1)
          for (int line = 0; line < 3; ++line)
            __builtin_prefetch(reinterpret_cast<const char*>(&table[b + 8]) + 64 * line);
        const Bucket& bk = table[b];
        const uint64_t bitmap = bk.bitmap & 0xFF;
        for (uint64_t bits = bitmap; bits; bits &= bits - 1) {
          int s = std::countr_zero(bits);
          uint64_t kw = bk.slots[s].key, vw = bk.slots[s].value;
          ++n;
          if (!ocf) {
            sum += kw ^ vw;
            continue;
          }
          uint64_t h = hash(kw);
          ocf_entries[b * 8 + s] = uint16_t(0x80 | (h & 0xFF));
          if (!hot) continue;
          Rec& r = ring[seen++ % kAhead];
          if (seen > kAhead) ht.place(r.h, r.kw, r.vw);
          ht.prefetch(h);
          r = {h, kw, vw};
        }
      }
      if (hot)
        for (uint64_t i = seen > kAhead ? seen - kAhead : 0; i < seen; ++i)
          ht.place(ring[i % kAhead].h, ring[i % kAhead].kw, ring[i % kAhead].vw);
      sums[t] = sum;
      found[t] = n;
    });
  for (auto& t : ts) t.join();
  double ms = ms_since(t0);
  uint64_t n = found[0] + found[1], placed = 0;
  if (hot && read)  // outside the timed part: how many records the hot table holds
    for (int lv = 0; lv < 2; ++lv)
      for (uint64_t b = 0; b < hot_bytes[lv] / kHotStride; ++b)
        for (int e = 0; e < kHotSlots; ++e)
          placed += *reinterpret_cast<const uint16_t*>(ht.base[lv] + b * kHotStride + 2 * e) != 0;
  std::printf("%s_ms %.1f records %llu hot %llu (sum %llx)\n", mode.c_str(), ms,
              (unsigned long long)n, (unsigned long long)placed,
              (unsigned long long)(sums[0] ^ sums[1]));
  std::fflush(stdout);
  _exit(0);
}
