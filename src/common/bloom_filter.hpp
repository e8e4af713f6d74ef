// A DRAM Bloom filter with k hash functions derived from one 64-bit key hash
// (Kirsch-Mitzenmacher double hashing). Adds are thread-safe (atomic OR); lookups are
// lock-free.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>

#include "common/hash.hpp"
#include "common/zeroed_map.hpp"

namespace pmhash::common {

class BloomFilter {
 public:
  // Bits for `keys` keys at false-positive rate `fpr` with exactly `k` hash functions:
  // p = (1 - e^{-kn/m})^k  =>  m = -k n / ln(1 - p^{1/k}).
  static uint64_t bits_for(uint64_t keys, double fpr, int k) {
    double m = -double(k) * double(keys) / std::log(1.0 - std::pow(fpr, 1.0 / k));
    uint64_t bits = static_cast<uint64_t>(std::ceil(m));
    return std::max<uint64_t>(512, (bits + 511) / 512 * 512);  // whole cache lines
  }

  // nullptr when the kernel has no memory for its `nbits` bits (a caller does without it:
  // a filter only saves reads). Its words are zero pages until set, so a large filter is
  // not written whole up front.
  static std::unique_ptr<BloomFilter> create(uint64_t nbits, uint64_t capacity, int k = 3) {
    void* words = try_map_zeroed(nbits / 8, /*huge=*/false);
    if (words == nullptr) return nullptr;
    auto* f = new (std::nothrow)
        BloomFilter(nbits, capacity, k, static_cast<std::atomic<uint64_t>*>(words));
    if (f == nullptr) unmap_zeroed(words, nbits / 8);
    return std::unique_ptr<BloomFilter>(f);
  }
  ~BloomFilter() { unmap_zeroed(words_, bytes()); }
  BloomFilter(const BloomFilter&) = delete;
  BloomFilter& operator=(const BloomFilter&) = delete;

  void add(uint64_t key_hash) {
    uint64_t h2 = hash_word(key_hash, 0xB100F11E) | 1;
    for (int i = 0; i < k_; ++i) {
      uint64_t b = index(key_hash + uint64_t(i) * h2);
      words_[b / 64].fetch_or(uint64_t{1} << (b % 64), std::memory_order_relaxed);
    }
  }
  // Adds many keys, prefetching the words of later keys while setting earlier ones: the
  // bit positions are random, so a rebuild is bound by memory latency, not work.
  void add_batch(const uint64_t* hashes, size_t n) {
    constexpr size_t kAhead = 8;
    for (size_t i = 0; i < n; ++i) {
      if (i + kAhead < n) {
        uint64_t h = hashes[i + kAhead], h2 = hash_word(h, 0xB100F11E) | 1;
        for (int j = 0; j < k_; ++j)
          __builtin_prefetch(&words_[index(h + uint64_t(j) * h2) / 64], 1);
      }
      add(hashes[i]);
    }
  }

  bool may_contain(uint64_t key_hash) const {
    uint64_t h2 = hash_word(key_hash, 0xB100F11E) | 1;
    for (int i = 0; i < k_; ++i) {
      uint64_t b = index(key_hash + uint64_t(i) * h2);
      if (!((words_[b / 64].load(std::memory_order_relaxed) >> (b % 64)) & 1)) return false;
    }
    return true;
  }

  uint64_t nbits() const { return nbits_; }
  uint64_t bytes() const { return nbits_ / 8; }
  uint64_t capacity() const { return capacity_; }  // keys it was sized for
  int hashes() const { return k_; }
  uint64_t word(uint64_t i) const { return words_[i].load(std::memory_order_relaxed); }
  void set_word(uint64_t i, uint64_t v) { words_[i].store(v, std::memory_order_relaxed); }

 private:
  uint64_t index(uint64_t h) const {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * nbits_) >> 64);
  }
  BloomFilter(uint64_t nbits, uint64_t capacity, int k, std::atomic<uint64_t>* words)
      : nbits_(nbits), capacity_(capacity), k_(k), words_(words) {}
  uint64_t nbits_, capacity_;
  int k_;
  std::atomic<uint64_t>* words_;  // nbits / 64 words in a zeroed mapping
};

}  // namespace pmhash::common
