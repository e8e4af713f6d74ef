#include "common/params.hpp"

#include <cerrno>
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

std::vector<std::string> Params::unasked() const {
  std::vector<std::string> out;
  for (auto& [k, v] : m_)
    if (asked_.count(k) == 0) out.push_back(k);
  return out;
}

std::string Params::get(const std::string& k, const std::string& def) const {
  asked_.insert(k);
  auto it = m_.find(k);
  return it == m_.end() ? def : it->second;
}

bool Params::get_u64(const std::string& k, uint64_t def, uint64_t* out) const {
  asked_.insert(k);
  auto it = m_.find(k);
  if (it == m_.end()) {
    *out = def;
    return true;
  }
  // Digits only: strtoull would take a sign or leading blanks, and saturates on overflow.
  if (it->second.empty() || it->second.find_first_not_of("0123456789") != std::string::npos)
    return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(it->second.c_str(), &end, 10);
  if (errno == ERANGE) return false;
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

Status Params::get_bool(const char* scheme, const std::string& k, bool def, bool* out) const {
  asked_.insert(k);
  auto it = m_.find(k);
  if (it == m_.end()) {
    *out = def;
    return Status::Ok();
  }
  const std::string& v = it->second;
  if (v == "on" || v == "true" || v == "1" || v == "off" || v == "false" || v == "0") {
    *out = v == "on" || v == "true" || v == "1";
    return Status::Ok();
  }
  return {Code::kInvalidArgument, std::string(scheme) + ": parameter " + k + "='" + v +
                                      "' must be one of on, off, true, false, 1, 0"};
}

Status Params::get_enum(const char* scheme, const std::string& k,
                        const std::vector<std::string>& allowed, std::string* out) const {
  std::string v = get(k, allowed.front());
  for (const std::string& a : allowed)
    if (v == a) {
      *out = v;
      return Status::Ok();
    }
  std::string words;
  for (const std::string& a : allowed) words += (words.empty() ? "" : ", ") + a;
  return {Code::kInvalidArgument,
          std::string(scheme) + ": parameter " + k + "='" + v + "' must be one of " + words};
}

}  // namespace pmhash::common
