// The persistence primitives: the only place that flushes or fences. Every index uses these.
//
// flush(addr, len)  write back every cache line of [addr, addr+len): clwb, else clflushopt,
//                   else clflush (chosen from CPUID); msync in msync mode; nothing in kNone.
// fence()           sfence: orders the flushes before it against later stores.
// persist()         flush + fence.
// nt_copy()         non-temporal copy (counts as flushed when issued; a fence orders it).
//
// Per-thread counters are always on (the papers' "flushes per insert" come from here). In
// builds with PMHASH_CRASH_HOOKS a PersistHook sees every call: the crash simulator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "pmhash/index.hpp"

namespace pmhash::pm {

inline constexpr size_t kCacheLine = 64;

inline thread_local PersistCounters tls_counters;

#ifdef PMHASH_CRASH_HOOKS
// Test builds only: race-window widening for stress tests. At level n > 0, about n in 256
// calls of flush(), fence() and nt_copy() yield the CPU or sleep a few microseconds (a
// thread-local PRNG decides), so other threads run between a store and its persist. Off (0)
// it costs one relaxed load; release builds (no PMHASH_CRASH_HOOKS) compile it out.
inline std::atomic<uint32_t> chaos_level{0};
void chaos_point(uint32_t level);
#define PMHASH_CHAOS()                                                           \
  do {                                                                           \
    uint32_t chaos_ = ::pmhash::pm::chaos_level.load(std::memory_order_relaxed); \
    if (chaos_ != 0) ::pmhash::pm::chaos_point(chaos_);                          \
  } while (0)
#else
#define PMHASH_CHAOS() \
  do {                 \
  } while (0)
#endif

class PersistHook {
 public:
  virtual ~PersistHook() = default;
  // The pool was mapped; its content now is the persisted state.
  virtual void on_map(char* base, size_t size) = 0;
  virtual void on_flush(const void* addr, size_t len) = 0;
  virtual void on_fence() = 0;
  virtual void on_line_order(const void* addr) { (void)addr; }
};

enum class FlushInstr : uint8_t { kClwb, kClflushOpt, kClflush, kMsync, kNothing };

FlushInstr best_flush_instruction();  // from CPUID
const char* flush_instr_name(FlushInstr f);

class Persister {
 public:
  FlushInstr instr = FlushInstr::kClwb;
  bool fence_enabled = true;                           // false in Mode::kNone
  uint32_t delay_ns = 0;                               // injected per flushed line
  void (*msync_flush)(const void*, size_t) = nullptr;  // libpmem2's flush in msync mode
  void (*msync_drain)() = nullptr;
  PersistHook* hook = nullptr;  // crash simulator (test builds only)

  void flush(const void* addr, size_t len) const {
    uintptr_t line = reinterpret_cast<uintptr_t>(addr) & ~uintptr_t{kCacheLine - 1};
    uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
    uint64_t lines = (end - line + kCacheLine - 1) / kCacheLine;
    tls_counters.flushes += lines;
    tls_counters.bytes_flushed += lines * kCacheLine;
    switch (instr) {
      case FlushInstr::kClwb:
        for (; line < end; line += kCacheLine)
          asm volatile("clwb %0" : "+m"(*reinterpret_cast<volatile char*>(line)));
        break;
      case FlushInstr::kClflushOpt:
        for (; line < end; line += kCacheLine)
          asm volatile("clflushopt %0" : "+m"(*reinterpret_cast<volatile char*>(line)));
        break;
      case FlushInstr::kClflush:
        for (; line < end; line += kCacheLine)
          asm volatile("clflush %0" : "+m"(*reinterpret_cast<volatile char*>(line)));
        break;
      case FlushInstr::kMsync:
        msync_flush(addr, len);
        break;
      case FlushInstr::kNothing:
        break;
    }
    if (delay_ns != 0) spin_delay(lines * delay_ns);
#ifdef PMHASH_CRASH_HOOKS
    if (hook != nullptr) hook->on_flush(addr, len);
#endif
    PMHASH_CHAOS();
  }

  void fence() const {
    tls_counters.fences++;
    if (fence_enabled) {
      if (instr == FlushInstr::kMsync)
        msync_drain();
      else
        asm volatile("sfence" ::: "memory");
    }
#ifdef PMHASH_CRASH_HOOKS
    if (hook != nullptr) hook->on_fence();
#endif
    PMHASH_CHAOS();
  }

  void persist(const void* addr, size_t len) const {
    flush(addr, len);
    fence();
  }

  // x86 persists the stores to one cache line in program order (Px86): every store to the
  // line of `addr` made before this call persists no later than any store made after it.
  // SmartHT's merged flush (key, value, then token in one line, one flush) relies on it.
  // A compiler barrier here; the crash simulator records the order.
  void line_order(const void* addr) const {
    asm volatile("" ::: "memory");
#ifdef PMHASH_CRASH_HOOKS
    if (hook != nullptr) hook->on_line_order(addr);
#else
    (void)addr;
#endif
  }

  // Copies with non-temporal stores (bypassing the cache); needs a fence() to be ordered.
  void nt_copy(void* dst, const void* src, size_t len) const;

 private:
  static void spin_delay(uint64_t ns);
};

}  // namespace pmhash::pm
