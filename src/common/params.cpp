#include "common/params.hpp"

#include <cstdlib>

namespace pmhash::common {

Params Params::parse(const std::string& text) {
  Params p;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = text.find(';', i);
    if (end == std::string::npos) end = text.size();
    std::string kv = text.substr(i, end - i);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) p.m_[kv.substr(0, eq)] = kv.substr(eq + 1);
    i = end + 1;
  }
  return p;
}

std::string Params::serialize() const {
  std::string s;
  for (auto& [k, v] : m_) s += (s.empty() ? "" : ";") + k + "=" + v;
  return s;
}

std::string Params::get(const std::string& k, const std::string& def) const {
  auto it = m_.find(k);
  return it == m_.end() ? def : it->second;
}

bool Params::get_u64(const std::string& k, uint64_t def, uint64_t* out) const {
  auto it = m_.find(k);
  if (it == m_.end()) {
    *out = def;
    return true;
  }
  if (it->second.empty()) return false;
  char* end = nullptr;
  unsigned long long v = std::strtoull(it->second.c_str(), &end, 10);
  if (*end != '\0' || it->second[0] == '-') return false;
  *out = v;
  return true;
}

Status Params::get_u64(const char* scheme, const std::string& k, uint64_t def, uint64_t min,
                       uint64_t max, uint64_t* out) const {
  uint64_t v = 0;
  bool parsed = get_u64(k, def, &v);
  if (parsed && v >= min && v <= max) {
    *out = v;
    return Status::Ok();
  }
  return {Code::kInvalidArgument, std::string(scheme) + ": parameter " + k + "='" + get(k, "") +
                                      "' must be an integer in [" + std::to_string(min) + ", " +
                                      std::to_string(max) + "]"};
}

bool Params::get_bool(const std::string& k, bool def) const {
  auto it = m_.find(k);
  if (it == m_.end()) return def;
  return it->second == "1" || it->second == "on" || it->second == "true";
}

}  // namespace pmhash::common
