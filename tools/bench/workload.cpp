#include "workload.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>

namespace pmhash::bench {

void KeySpace::key(uint64_t id, std::string* out) const {
  uint64_t k = sequential_ ? id : scramble(id ^ salt_);
  if (fixed_) {
    out->assign(reinterpret_cast<const char*>(&k), 8);
    return;
  }
  // Distinct for every id, fixed length: 16 bytes and more, the 16 hex digits of k (printable),
  // padded, the id appended past 16; 8 to 15 bytes, k's 8 bytes then that many of its hex
  // digits (fewer than 16 hex digits would collide). Shorter keys are refused (main.cpp).
  char hex[16];
  for (int i = 0; i < 16; ++i) hex[i] = "0123456789abcdef"[(k >> (60 - 4 * i)) & 15];
  out->assign(key_size_, 'k');
  if (key_size_ >= 16) {
    std::memcpy(out->data(), hex, 16);
    if (key_size_ > 16) std::memcpy(out->data() + key_size_ - 8, &id, 8);
  } else {
    std::memcpy(out->data(), &k, 8);
    std::memcpy(out->data() + 8, hex, key_size_ - 8);
  }
}

void KeySpace::value(uint64_t id, uint64_t version, std::string* out) const {
  uint64_t v = id ^ (version << 40);
  out->assign(value_size_, 'v');
  std::memcpy(out->data(), &v, std::min<size_t>(8, value_size_));
}

std::string DistSpec::name() const {
  char b[64];
  switch (dist) {
    case Dist::kUniform:
      return "uniform";
    case Dist::kZipfian:
      std::snprintf(b, sizeof b, "zipfian:%g", param);
      return b;
    case Dist::kSelfSimilar:
      std::snprintf(b, sizeof b, "selfsimilar:%g", param);
      return b;
    case Dist::kLatest:
      return "latest";
  }
  return "?";
}

bool DistSpec::parse(const std::string& s, DistSpec* out) {
  std::string name = s.substr(0, s.find(':'));
  double p = s.find(':') == std::string::npos ? -1 : std::atof(s.c_str() + s.find(':') + 1);
  if (name == "uniform")
    *out = {Dist::kUniform, 0};
  else if (name == "zipfian")
    *out = {Dist::kZipfian, p < 0 ? 0.99 : p};
  else if (name == "selfsimilar")
    *out = {Dist::kSelfSimilar, p < 0 ? 0.2 : p};
  else if (name == "latest")
    *out = {Dist::kLatest, 0.99};
  else
    return false;
  if (out->dist == Dist::kSelfSimilar && (out->param <= 0 || out->param >= 1)) return false;
  if (out->dist == Dist::kZipfian && (out->param <= 0 || out->param >= 2 || out->param == 1))
    return false;
  return true;
}

double zeta(uint64_t n, double theta) {
  // Cached: every thread of a run needs the same value, and it costs O(n).
  static std::mutex mu;
  static std::map<std::pair<uint64_t, double>, double> cache;
  std::lock_guard<std::mutex> g(mu);
  auto it = cache.find({n, theta});
  if (it != cache.end()) return it->second;
  double s = 0;
  for (uint64_t i = 1; i <= n; ++i) s += 1.0 / std::pow(double(i), theta);
  cache[{n, theta}] = s;
  return s;
}

bool honours(const std::string& w, const DistSpec& d, std::string* why) {
  bool uniform = d.dist == Dist::kUniform, latest = d.dist == Dist::kLatest;
  std::string bad;
  if (w == "reload" && !uniform)
    bad = "reload deletes every loaded key and reads uniformly (TurboHash Figs. 11/12)";
  else if (w == "lfsweep" && !uniform)
    bad = "lfsweep inserts in id order and reads uniformly (the papers' load-factor sweeps)";
  else if (w == "churn" && !uniform)
    bad = "churn inserts and deletes uniformly random keys (space under churn, issue 18)";
  else if (w == "delete" && latest)
    bad = "delete touches every key once in an order; 'latest' defines none";
  else if ((w == "negread" || w == "negread-batch") && latest)
    bad = "negread draws absent keys; 'latest' (recent inserts) has no absent counterpart";
  if (bad.empty()) return true;
  *why = "--dist " + d.name() + " is not honoured by workload '" + w + "': " + bad;
  return false;
}

RankMap::RankMap(uint64_t n) : n_(std::max<uint64_t>(1, n)) {
  a_ = (0x9E3779B97F4A7C15ull % n_) | 1;
  while (std::gcd(a_, n_) != 1) ++a_;
  b_ = (0xD1B54A32D192ED03ull % n_);
}

IdOrder::IdOrder(const DistSpec& d, uint64_t n, uint64_t seed) {
  if (d.dist == Dist::kUniform || d.dist == Dist::kLatest || n == 0) return;  // id order
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> exp1(1.0);
  // Self-similar: P(rank < x n) = x^(1/e), e = log h / log(1-h).
  double inv_e = std::log(1 - d.param) / std::log(d.param);
  auto weight = [&](uint64_t r) {
    if (d.dist == Dist::kZipfian) return 1.0 / std::pow(double(r + 1), d.param);
    return std::pow(double(r + 1) / double(n), inv_e) - std::pow(double(r) / double(n), inv_e);
  };
  std::vector<std::pair<double, uint64_t>> clock(n);
  for (uint64_t r = 0; r < n; ++r) clock[r] = {exp1(rng) / weight(r), r};
  std::sort(clock.begin(), clock.end());
  RankMap map(n);
  order_.resize(n);
  for (uint64_t p = 0; p < n; ++p) order_[p] = map.id(clock[p].second);
}

KeyChooser::KeyChooser(const DistSpec& d, uint64_t n, uint64_t seed)
    : d_(d), n_(n), map_(n), rng_(seed) {
  if (d_.dist == Dist::kZipfian || d_.dist == Dist::kLatest) {
    double theta = d_.param;
    zetan_ = zeta(n, theta);
    zeta2_ = zeta(2, theta);
    alpha_ = 1.0 / (1.0 - theta);
    eta_ = (1 - std::pow(2.0 / double(n), 1 - theta)) / (1 - zeta2_ / zetan_);
  }
}

uint64_t KeyChooser::zipf_rank(uint64_t n) {
  double u = std::uniform_real_distribution<double>(0, 1)(rng_);
  double uz = u * zetan_;
  if (uz < 1.0) return 0;
  if (uz < 1.0 + std::pow(0.5, d_.param)) return 1;
  uint64_t r = static_cast<uint64_t>(double(n) * std::pow(eta_ * u - eta_ + 1, alpha_));
  return r >= n ? n - 1 : r;
}

uint64_t KeyChooser::next(uint64_t n_now) {
  switch (d_.dist) {
    case Dist::kUniform:
      return rng_() % n_now;
    case Dist::kZipfian:
      return map_.id(zipf_rank(n_)) % n_now;  // hot keys spread out
    case Dist::kSelfSimilar: {
      double u = std::uniform_real_distribution<double>(0, 1)(rng_);
      uint64_t r = static_cast<uint64_t>(double(n_now) *
                                         std::pow(u, std::log(d_.param) / std::log(1 - d_.param)));
      if (r >= n_now) r = n_now - 1;
      return (n_now == n_ ? map_.id(r) : RankMap(n_now).id(r)) % n_now;
    }
    case Dist::kLatest: {
      uint64_t r = zipf_rank(n_) % n_now;
      return n_now - 1 - r;
    }
  }
  return 0;
}

}  // namespace pmhash::bench
