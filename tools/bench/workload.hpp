// Workload generation for pmhash-bench: key ids, key/value bytes, distributions.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

namespace pmhash::bench {

// A bijection on 64-bit ids, so loaded keys (ids 0..N-1) and absent keys (ids >= N) never
// collide and consecutive ids do not hash alike.
inline uint64_t scramble(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class KeySpace {
 public:
  KeySpace(bool fixed, size_t key_size, size_t value_size, bool sequential = false)
      : fixed_(fixed),
        sequential_(sequential),
        key_size_(fixed ? 8 : key_size),
        value_size_(fixed ? 8 : value_size) {}
  // Writes key `id` into *out (reuses its capacity).
  void key(uint64_t id, std::string* out) const;
  void value(uint64_t id, uint64_t version, std::string* out) const;
  size_t key_size() const { return key_size_; }
  size_t value_size() const { return value_size_; }

 private:
  bool fixed_;
  bool sequential_;  // keys are the ids themselves (WOPHI's SequenceNum), not scrambled
  size_t key_size_, value_size_;
};

enum class Dist { kUniform, kZipfian, kSelfSimilar, kLatest };

struct DistSpec {
  Dist dist = Dist::kUniform;
  double param = 0;  // zipfian theta, self-similar h
  std::string name() const;
  static bool parse(const std::string& s, DistSpec* out);  // uniform | zipfian:0.99 | ...
};

// Draws ids in [0, n). Zipfian is YCSB's (Gray et al.) with scrambled ranks; self-similar is
// PiBench's; latest favours the largest ids (YCSB-D: read the latest inserts).
class KeyChooser {
 public:
  KeyChooser(const DistSpec& d, uint64_t n, uint64_t seed);
  uint64_t next(uint64_t n_now);  // n_now: current id space (grows under YCSB-D)

 private:
  uint64_t zipf_rank(uint64_t n);
  DistSpec d_;
  uint64_t n_;
  std::mt19937_64 rng_;
  double zetan_ = 0, alpha_ = 0, eta_ = 0, zeta2_ = 0;
};

double zeta(uint64_t n, double theta);

}  // namespace pmhash::bench
