#pragma once

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "crash_sim.hpp"
#include "model.hpp"
#include "pmhash/index.hpp"
#include "pmhash/pmhash.h"

namespace pmhash::testing {

// A pool path under /dev/shm removed when the test ends.
struct TempPool {
  std::string path;
  explicit TempPool(const std::string& tag = "t") : path(temp_pool_path(tag)) {}
  ~TempPool() { unlink(path.c_str()); }
};

inline std::vector<char> read_file(const std::string& path) {  // in one read (fast in Debug)
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return {};
  std::vector<char> b(static_cast<size_t>(f.tellg()));
  f.seekg(0);
  f.read(b.data(), static_cast<std::streamsize>(b.size()));
  return b;
}
inline void write_bytes(const std::string& path, const std::vector<char>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// A new variable-format pool of `scheme` through the C API, emulated mode.
inline pmhash_options c_variable_options(const char* scheme, uint64_t pool_size) {
  pmhash_options o{};
  o.scheme = scheme;
  o.variable_format = 1;
  o.mode = 2;  // emulated
  o.create = 1;
  o.pool_size = pool_size;
  return o;
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
  if (scheme == "lineht") return {{"shards", "2"}, {"buckets", "2"}, {"probe", "2"}};
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

// The concurrency, kill and crash tests run every scheme with its DEFAULT options (no
// params, what a user gets), with small_params (tables that resize often), and with
// other_params: the options small_params does not reach (background workers, other
// replacement policies, the filter off, zones and split multiples), on small tables too.
enum class OptionSet { kDefaults, kSmall, kOther };
inline std::map<std::string, std::string> other_params(const std::string& scheme) {
  std::map<std::string, std::string> p = small_params(scheme);
  if (scheme == "turbohash") p["simd"] = "false";
  if (scheme == "smartht") p["filter"] = "off";
  if (scheme == "lineht") {  // one-bucket shards: a probe bound longer than the shard
    p["buckets"] = "1";
    p["probe"] = "5";
    p["filter"] = "off";
  }
  if (scheme == "wophi") p["pab_grow"] = "background";
  if (scheme == "hdnh") {
    p["sync_write"] = "background";
    p["hot_table"] = "lru";
  }
  if (scheme == "pmeh") {
    p["split"] = "16";
    p["zones"] = "4";
    p["depth"] = "2";
  }
  return p;
}
struct SchemeConfig {
  std::string scheme;
  Format format;
  OptionSet set;
  bool small() const { return set != OptionSet::kDefaults; }  // small tables
  // The workloads of the crash tests are sized to resize the small_params tables.
  bool resizes_expected() const { return set == OptionSet::kSmall; }
  std::map<std::string, std::string> params() const {
    if (set == OptionSet::kSmall) return small_params(scheme);
    if (set == OptionSet::kOther) return other_params(scheme);
    return {};
  }
};
inline std::string param_name(const SchemeConfig& p) {
  const char* set = p.set == OptionSet::kSmall   ? "_small"
                    : p.set == OptionSet::kOther ? "_other"
                                                 : "_defaults";
  return p.scheme + "_" + format_name(p.format) + set;
}
inline void PrintTo(const SchemeConfig& c, std::ostream* os) {
  *os << param_name(c);
}
inline std::vector<SchemeConfig> all_scheme_configs() {
  std::vector<SchemeConfig> v;
  for (auto& sf : all_scheme_formats())
    for (OptionSet o : {OptionSet::kSmall, OptionSet::kDefaults, OptionSet::kOther})
      v.push_back({sf.scheme, sf.format, o});
  return v;
}
// Crash-simulator settings for a scheme's default tables (SmartHT's 2^18 head buckets take
// 16 MB): a pool that holds them, and, since a crash state's cost grows with the pool
// (every image is a full pool file, opened and checked), a seeded sample of the fences
// thinned in proportion, one random image per crash point.
inline void use_default_tables(CrashConfig* cfg) {
  const std::string& s = cfg->scheme;
  cfg->pool_size = (s == "smartht" || s == "wophi") ? 20u << 20
                   : s == "turbohash"               ? 8u << 20
                   : s == "pmeh" || s == "lineht"   ? 4u << 20
                                                    : 2u << 20;
  cfg->sample_rate = std::clamp(0.34 * double(2u << 20) / double(cfg->pool_size), 0.1, 0.34);
  cfg->random_images = 1;
  cfg->recovery_crash_every = 3;
}
}  // namespace pmhash::testing
