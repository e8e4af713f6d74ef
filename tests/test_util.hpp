#pragma once

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "crash_sim.hpp"
#include "model.hpp"
#include "pmhash/index.hpp"

namespace pmhash::testing {

// A pool path under /dev/shm removed when the test ends.
struct TempPool {
  std::string path;
  explicit TempPool(const std::string& tag = "t") : path(temp_pool_path(tag)) {}
  ~TempPool() { unlink(path.c_str()); }
};

inline std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}
inline void write_bytes(const std::string& path, const std::vector<char>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

inline Options small_options(const std::string& scheme, Format f) {
  Options o;
  o.scheme = scheme;
  o.format = f;
  o.pool_size = 64u << 20;
  o.mode = Mode::kEmulated;
  return o;
}

}  // namespace pmhash::testing

namespace pmhash::testing {

// Per-scheme parameters that make tables small, so tests exercise resizing/splitting.
inline std::map<std::string, std::string> small_params(const std::string& scheme) {
  if (scheme == "turbohash") return {{"shards", "2"}, {"buckets", "1"}, {"scope", "4"}};
  if (scheme == "smartht") return {{"buckets", "4"}, {"stripe", "2"}, {"filter_keys", "16"}};
  if (scheme == "wophi")
    return {{"buckets", "4"}, {"stripe", "2"}, {"pab_buckets", "2"}, {"pab_grow", "inline"}};
  if (scheme == "hdnh") return {{"segment_bytes", "256"}, {"segments", "1"}};
  if (scheme == "pmeh")
    return {{"segment_bytes", "2048"}, {"split", "4"}, {"zones", "1"}, {"depth", "0"}};
  return {};
}

struct SchemeFormat {
  std::string scheme;
  Format format;
};
inline std::vector<SchemeFormat> all_scheme_formats() {
  std::vector<SchemeFormat> v;
  for (auto& s : schemes())
    for (Format f : {Format::kFixed, Format::kVariable}) v.push_back({s, f});
  return v;
}
inline std::string param_name(const SchemeFormat& p) {
  return p.scheme + "_" + format_name(p.format);
}

}  // namespace pmhash::testing
