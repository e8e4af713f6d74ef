// The in-DRAM model index the tests compare every scheme against.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "pmhash/status.hpp"

namespace pmhash::testing {

class Model {
 public:
  Code insert(std::string_view k, std::string_view v);
  Code upsert(std::string_view k, std::string_view v);
  Code update(std::string_view k, std::string_view v);
  Code get(std::string_view k, std::string* v) const;
  Code remove(std::string_view k);
  size_t size() const { return m_.size(); }
  const std::map<std::string, std::string>& items() const { return m_; }

 private:
  std::map<std::string, std::string> m_;
};

// Values that prove they are not torn: they carry a checksum of their key and version.
std::string make_value(std::string_view key, uint32_t version, bool fixed);
// The version a make_value() value was made with.
uint32_t value_version(std::string_view value, bool fixed);
bool value_ok(std::string_view key, std::string_view value, bool fixed);
std::string make_key(uint64_t i, bool fixed);

}  // namespace pmhash::testing
