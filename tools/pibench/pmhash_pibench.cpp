// libpmhash_pibench.so: any pmhash scheme as a PiBench index (docs/pibench.md).
//
//   PMHASH_SCHEME   scheme name (default turbohash)
//   PMHASH_MODE     auto | pm | emulated | msync | none (default auto)
//   PMHASH_FORMAT   fixed | variable (default: fixed when keys and values are 8 bytes)
//   PMHASH_PARAMS   scheme parameters, "k=v,k=v"
//   PMHASH_CAPACITY expected number of keys (capacity hint)
// The pool comes from tree_options_t::pool_path / pool_size (defaults: /dev/shm, 4 GiB).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

#include "pmhash/index.hpp"
#include "tree_api.hpp"

namespace {

std::string env(const char* name, const std::string& def) {
  const char* v = std::getenv(name);
  return v && *v ? v : def;
}

class PmhashTree final : public tree_api {
 public:
  explicit PmhashTree(std::unique_ptr<pmhash::Index> i, size_t value_size)
      : index_(std::move(i)), value_size_(value_size) {}
  bool find(const char* key, size_t sz, char* value_out) override {
    thread_local std::string v;
    if (!index_->get({key, sz}, &v).ok()) return false;
    std::memcpy(value_out, v.data(), std::min(v.size(), value_size_));
    return true;
  }
  bool insert(const char* key, size_t key_sz, const char* value, size_t value_sz) override {
    return index_->insert({key, key_sz}, {value, value_sz}).ok();
  }
  bool update(const char* key, size_t key_sz, const char* value, size_t value_sz) override {
    return index_->update({key, key_sz}, {value, value_sz}).ok();
  }
  bool remove(const char* key, size_t key_sz) override {
    return index_->remove({key, key_sz}).ok();
  }
  int scan(const char*, size_t, int, char*&) override { return 0; }  // hash indexes do not scan

 private:
  std::unique_ptr<pmhash::Index> index_;
  size_t value_size_;
};

}  // namespace

// The environment's settings, each checked: a typo is refused with a message (create_tree
// returns null), never read as a default.
static std::string parse_env(pmhash::Options* o, const tree_options_t& opt) {
  o->scheme = env("PMHASH_SCHEME", "turbohash");
  std::string mode = env("PMHASH_MODE", "auto");
  const std::pair<const char*, pmhash::Mode> modes[] = {{"auto", pmhash::Mode::kAuto},
                                                        {"pm", pmhash::Mode::kPm},
                                                        {"emulated", pmhash::Mode::kEmulated},
                                                        {"msync", pmhash::Mode::kMsync},
                                                        {"none", pmhash::Mode::kNone}};
  auto m = std::find_if(std::begin(modes), std::end(modes),
                        [&](const auto& e) { return mode == e.first; });
  if (m == std::end(modes))
    return "PMHASH_MODE='" + mode + "' is not one of auto, pm, emulated, msync, none";
  o->mode = m->second;
  bool fixed = opt.key_size == 8 && opt.value_size == 8;
  std::string format = env("PMHASH_FORMAT", fixed ? "fixed" : "variable");
  if (format != "fixed" && format != "variable")
    return "PMHASH_FORMAT='" + format + "' is not fixed or variable";
  o->format = format == "fixed" ? pmhash::Format::kFixed : pmhash::Format::kVariable;
  std::stringstream params(env("PMHASH_PARAMS", ""));
  for (std::string kv; std::getline(params, kv, ',');) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return "PMHASH_PARAMS: '" + kv + "' is not name=value";
    o->params[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::string cap = env("PMHASH_CAPACITY", "0");
  char* end = nullptr;
  errno = 0;
  o->capacity_hint = std::strtoull(cap.c_str(), &end, 10);
  if (cap.empty() || *end != '\0' || errno != 0 || cap[0] < '0' || cap[0] > '9')
    return "PMHASH_CAPACITY='" + cap + "' is not a number of keys";
  return "";
}

extern "C" tree_api* create_tree(const tree_options_t& opt) {
  pmhash::Options o;
  std::string bad = parse_env(&o, opt);
  if (!bad.empty()) {
    std::fprintf(stderr, "pmhash: %s\n", bad.c_str());
    return nullptr;
  }
  o.pool_size = opt.pool_size ? opt.pool_size : (uint64_t{4} << 30);
  std::string path = opt.pool_path.empty() ? "/dev/shm/pmhash-pibench.pool" : opt.pool_path;
  std::unique_ptr<pmhash::Index> idx;
  pmhash::Status s = pmhash::Index::open(path, o, &idx);
  if (!s.ok()) {
    std::fprintf(stderr, "pmhash: cannot open '%s': %s\n", path.c_str(), s.to_string().c_str());
    return nullptr;
  }
  std::fprintf(stderr, "pmhash: %s (%s format) on %s, mode %s\n", o.scheme.c_str(),
               pmhash::format_name(o.format), path.c_str(), pmhash::mode_name(idx->stats().mode));
  return new PmhashTree(std::move(idx), opt.value_size);
}
