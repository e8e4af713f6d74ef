// DRAM arrays that cost nothing until used: anonymous mappings, zero until written, each
// page faulted in by whichever thread first writes it (reads of untouched pages see the
// shared zero page). For arrays sized by the whole table (HDNH's OCF and hot table, LineHT's
// per-shard words and filter), so that nobody zero-fills them up front.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>

namespace pmhash::common {

// `huge`: transparent huge pages where the kernel allows them (a 2 MB fault instead of 512,
// fewer TLB misses for an array read at random). `sparse`: not reserved against the
// commit limit (MAP_NORESERVE), for a reservation mostly left untouched (LineHT's filter
// spans the pool). Throws std::bad_alloc when the kernel refuses; 0 bytes map nothing.
inline void* map_zeroed(size_t bytes, bool huge, bool sparse = false) {
  if (bytes == 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | (sparse ? MAP_NORESERVE : 0), -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  if (huge) (void)madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}
inline void unmap_zeroed(void* p, size_t bytes) {
  if (p != nullptr) munmap(p, bytes);
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
