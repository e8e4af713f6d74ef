#include "pm/persist.hpp"

#include <cpuid.h>
#include <emmintrin.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace pmhash::pm {

FlushInstr best_flush_instruction() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    if (b & (1u << 24)) return FlushInstr::kClwb;
    if (b & (1u << 23)) return FlushInstr::kClflushOpt;
  }
  return FlushInstr::kClflush;
}

const char* flush_instr_name(FlushInstr f) {
  switch (f) {
    case FlushInstr::kClwb:
      return "clwb";
    case FlushInstr::kClflushOpt:
      return "clflushopt";
    case FlushInstr::kClflush:
      return "clflush";
    case FlushInstr::kMsync:
      return "msync";
    case FlushInstr::kNothing:
      return "none";
  }
  return "?";
}

void Persister::spin_delay(uint64_t ns) {
  auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) _mm_pause();
}

void Persister::nt_copy(void* dst, const void* src, size_t len) const {
  auto* d = static_cast<char*>(dst);
  auto* s = static_cast<const char*>(src);
  bool aligned = (reinterpret_cast<uintptr_t>(d) % 16 == 0) && (len % 16 == 0) &&
                 (instr != FlushInstr::kMsync) && (instr != FlushInstr::kNothing);
  if (!aligned) {  // fall back to copy + flush; same ordering contract
    std::memcpy(d, s, len);
    flush(d, len);
    return;
  }
  for (size_t i = 0; i < len; i += 16) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), v);
  }
  tls_counters.bytes_flushed += len;
  if (delay_ns != 0) spin_delay((len + kCacheLine - 1) / kCacheLine * delay_ns);
#ifdef PMHASH_CRASH_HOOKS
  if (hook != nullptr) hook->on_flush(d, len);  // counts as flushed when issued
#endif
  PMHASH_CHAOS();
}

#ifdef PMHASH_CRASH_HOOKS
void chaos_point(uint32_t level) {
  static thread_local uint64_t x = 0;
  if (x == 0) x = reinterpret_cast<uintptr_t>(&x) | 1;  // per-thread seed
  x ^= x << 13;                                         // xorshift64
  x ^= x >> 7;
  x ^= x << 17;
  if ((x & 255) >= level) return;
  if (x & 256)
    sched_yield();
  else
    usleep(static_cast<useconds_t>(1 + (x >> 9) % 8));
}
#endif

}  // namespace pmhash::pm
