// Workload generation for pmhash-bench: key ids, key/value bytes, distributions.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

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
  // `salt` (< 2^62, so loaded and absent ids stay apart) picks another key set for the same
  // ids: repeats of a run (--repeat, seeds 1, 2, ...) measure different keys.
  KeySpace(bool fixed, size_t key_size, size_t value_size, bool sequential = false,
           uint64_t salt = 0)
      : fixed_(fixed),
        sequential_(sequential),
        salt_(salt & ((uint64_t{1} << 62) - 1)),
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
  uint64_t salt_;
  size_t key_size_, value_size_;
};

enum class Dist { kUniform, kZipfian, kSelfSimilar, kLatest };

struct DistSpec {
  Dist dist = Dist::kUniform;
  double param = 0;  // zipfian theta, self-similar h
  std::string name() const;
  static bool parse(const std::string& s, DistSpec* out);  // uniform | zipfian:0.99 | ...
};

// What each distribution means for each workload (docs/bench.md, "Key distributions"):
// - reads, updates, YCSB A/B/C/F, mixed's reads: each operation draws a loaded id (with
//   replacement) from the distribution.
// - negread: draws an absent id the same way over an absent space as large as the loaded
//   one (kAbsent + draw), so a skewed run repeats its hot absent keys.
// - load, insert, delete: every id once; the distribution is the *order* (successive
//   sampling without replacement: hot ids tend to come first, WOPHI's "zipfian order").
//   Uniform keeps id order, which under the default key scramble is unrelated to the keys;
//   so does latest for load and insert (id order is insertion order: what latest reads).
// - YCSB-D always draws `latest` (its definition); its rows say so. Inserts of new keys
//   inside mixed and YCSB-D are in id order (YCSB's insert order).
// - lfsweep is uniform only; latest means nothing for absent keys or a deletion order.
// Whether `workload` honours `d`; if not, *why says so.
bool honours(const std::string& workload, const DistSpec& d, std::string* why);

constexpr uint64_t kAbsent = uint64_t{1} << 62;  // ids >= kAbsent are never inserted

// The rank -> id bijection on [0, n) every skewed distribution uses, so rank 0 is the same id
// in every workload of a run (the hottest read key is among the first loaded), and no two
// ranks share an id. Affine: a * r + b mod n, with a coprime to n.
class RankMap {
 public:
  explicit RankMap(uint64_t n);
  uint64_t id(uint64_t rank) const {
    return static_cast<uint64_t>((unsigned __int128)a_ * (rank % n_) % n_ + b_) % n_;
  }

 private:
  uint64_t n_, a_, b_;
};

// Draws ids in [0, n). Zipfian is YCSB's (Gray et al.); self-similar is PiBench's (a fraction
// h of the ranks takes 1-h of the draws); both map ranks to ids with RankMap. Latest favours
// the largest ids (YCSB-D: read the latest inserts).
class KeyChooser {
 public:
  KeyChooser(const DistSpec& d, uint64_t n, uint64_t seed);
  uint64_t next(uint64_t n_now);  // n_now: current id space (grows under YCSB-D)

 private:
  uint64_t zipf_rank(uint64_t n);
  DistSpec d_;
  uint64_t n_;
  RankMap map_;
  std::mt19937_64 rng_;
  double zetan_ = 0, alpha_ = 0, eta_ = 0, zeta2_ = 0;
};

// The order in which load, insert and delete touch ids [0, n): position -> id. Uniform: id
// order; zipfian and self-similar: successive sampling without replacement with the
// distribution's weights (each rank r gets an exponential clock Exp(1) / weight(r); ranks in
// clock order), so the first positions hold the hot ranks.
class IdOrder {
 public:
  IdOrder(const DistSpec& d, uint64_t n, uint64_t seed);
  uint64_t at(uint64_t pos) const { return order_.empty() ? pos : order_[pos]; }

 private:
  std::vector<uint64_t> order_;  // empty: identity
};

double zeta(uint64_t n, double theta);

}  // namespace pmhash::bench
