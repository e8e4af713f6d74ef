// DRAM arrays that cost nothing until used: anonymous mappings, zero until written, each
// page faulted in by whichever thread first writes it (reads of untouched pages see the
// shared zero page). For arrays sized by the whole table (HDNH's OCF and hot table, LineHT's
// per-shard words and filter), so that nobody zero-fills them up front.
#pragma once

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <new>

namespace pmhash::common {

// `huge`: transparent huge pages where the kernel allows them (a 2 MB fault instead of 512,
// fewer TLB misses for an array read at random). `sparse`: not reserved against the
// commit limit (MAP_NORESERVE), for a reservation mostly left untouched (LineHT's filter
// spans the pool). nullptr when the kernel refuses (no memory or address space left), for a
// structure that can do without (SmartHT's Bloom filter); 0 bytes map nothing.
inline void* try_map_zeroed(size_t bytes, bool huge, bool sparse = false) noexcept {
  if (bytes == 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | (sparse ? MAP_NORESERVE : 0), -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (huge) (void)madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}
// The same, throwing std::bad_alloc when the kernel refuses.
inline void* map_zeroed(size_t bytes, bool huge, bool sparse = false) {
  void* p = try_map_zeroed(bytes, huge, sparse);
  if (p == nullptr && bytes != 0) throw std::bad_alloc();
  return p;
}
inline void unmap_zeroed(void* p, size_t bytes) {
  if (p != nullptr) munmap(p, bytes);
}

// Faults bytes [p, p + bytes) of a mapping in writable, in one call, without changing what
// they hold (pages rounded outward): for memory about to be written by a thread that should
// not take the faults then (HDNH's recovery, a window before its fill; LineHT's resize,
// before it takes the shard's lock). A page first read maps the shared zero page, and the
// write after it takes a second fault. Best effort: a kernel without MADV_POPULATE_WRITE
// (< 5.14) faults the pages in as they are written. False when the kernel could not back
// them: out of memory, or a file mapping whose file system is full (a write there would
// raise SIGBUS).
inline bool prefault_pages(void* p, size_t bytes) {
  constexpr uintptr_t kPage = 4096;
  uintptr_t from = reinterpret_cast<uintptr_t>(p) & ~(kPage - 1);
  uintptr_t to = (reinterpret_cast<uintptr_t>(p) + bytes + kPage - 1) & ~(kPage - 1);
  return bytes == 0 ||
         madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) == 0 ||
         errno == EINVAL;
}

// One such mapping, owned, as an array of T (valid as zero bytes: integers, std::atomic of
// them); sparse.
class ZeroedMap {
 public:
  explicit ZeroedMap(size_t bytes, bool huge = false)
      : p_(map_zeroed(bytes, huge, /*sparse=*/true)), bytes_(bytes) {}
  ~ZeroedMap() { unmap_zeroed(p_, bytes_); }
  ZeroedMap(const ZeroedMap&) = delete;
  ZeroedMap& operator=(const ZeroedMap&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_;
  size_t bytes_;
};

}  // namespace pmhash::common
