#include "model.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace pmhash::testing {

Code Model::insert(std::string_view k, std::string_view v) {
  return m_.emplace(std::string(k), std::string(v)).second ? Code::kOk : Code::kAlreadyExists;
}
Code Model::upsert(std::string_view k, std::string_view v) {
  m_[std::string(k)] = std::string(v);
  return Code::kOk;
}
Code Model::update(std::string_view k, std::string_view v) {
  auto it = m_.find(std::string(k));
  if (it == m_.end()) return Code::kNotFound;
  it->second = std::string(v);
  return Code::kOk;
}
Code Model::get(std::string_view k, std::string* v) const {
  auto it = m_.find(std::string(k));
  if (it == m_.end()) return Code::kNotFound;
  *v = it->second;
  return Code::kOk;
}
Code Model::remove(std::string_view k) {
  return m_.erase(std::string(k)) ? Code::kOk : Code::kNotFound;
}

std::string make_key(uint64_t i, bool fixed) {
  if (fixed) {
    uint64_t k = i * 0x9E3779B97F4A7C15ull + 1;
    return std::string(reinterpret_cast<const char*>(&k), 8);
  }
  std::string k = "key-" + std::to_string(i);
  k.append(i % 23, static_cast<char>('a' + i % 26));  // lengths vary
  return k;
}

// fixed:    | version u32 | checksum u32 |
// variable: "v<version>:" + filler + 8 hex digits of the checksum
std::string make_value(std::string_view key, uint32_t version, bool fixed) {
  uint32_t sum = static_cast<uint32_t>(XXH3_64bits_withSeed(key.data(), key.size(), version));
  if (fixed) {
    uint64_t w = uint64_t{version} | (uint64_t{sum} << 32);
    return std::string(reinterpret_cast<const char*>(&w), 8);
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", sum);
  std::string v = "v" + std::to_string(version) + ":";
  v.append(version % 37, 'x');
  return v + hex;
}

uint32_t value_version(std::string_view value, bool fixed) {
  if (fixed) {
    uint32_t v = 0;
    std::memcpy(&v, value.data(), std::min<size_t>(4, value.size()));
    return v;
  }
  return static_cast<uint32_t>(std::strtoul(std::string(value.substr(1)).c_str(), nullptr, 10));
}

bool value_ok(std::string_view key, std::string_view value, bool fixed) {
  if (fixed ? value.size() != 8 : value.size() < 10 || value[0] != 'v') return false;
  return make_value(key, value_version(value, fixed), fixed) == value;
}

}  // namespace pmhash::testing
