// DRAM arrays that cost nothing until used: an anonymous mapping, reserved at once and
// committed page by page as it is first written (reads of untouched pages see the shared
// zero page). For per-shard or per-line arrays sized by the whole table, so that opening a
// table costs what the first operations touch, not what the table could hold.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>
#include <utility>

namespace pmhash::common {

class ZeroedMap {
 public:
  ZeroedMap() = default;
  // `huge`: transparent huge pages where the kernel allows them (fewer TLB misses for an
  // array read at random, e.g. a filter).
  explicit ZeroedMap(size_t bytes, bool huge = false) : bytes_((bytes + 4095) & ~size_t{4095}) {
    if (bytes_ == 0) return;
    void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    if (huge) (void)madvise(m, bytes_, MADV_HUGEPAGE);
    p_ = m;
  }
  ~ZeroedMap() {
    if (p_ != nullptr) munmap(p_, bytes_);
  }
  ZeroedMap(ZeroedMap&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  ZeroedMap& operator=(ZeroedMap&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  // The mapping as an array of T, all zero bytes until written. T must be valid as zero
  // bytes (integers, std::atomic of them).
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace pmhash::common
