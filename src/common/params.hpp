// Scheme parameters: "key=value;key=value" (recorded in the pool header for layout
// parameters, given in Options::params for run-time knobs).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "pmhash/status.hpp"

namespace pmhash::common {

class Params {
 public:
  Params() = default;
  explicit Params(const std::map<std::string, std::string>& m) : m_(m) {}
  static Params parse(const std::string& text);
  std::string serialize() const;

  bool has(const std::string& k) const {
    asked_.insert(k);
    return m_.count(k) != 0;
  }
  std::string get(const std::string& k, const std::string& def) const;
  // Returns false (and leaves *out) when the value is not an unsigned integer.
  bool get_u64(const std::string& k, uint64_t def, uint64_t* out) const;
  // The value in [min, max] (default `def` when absent); otherwise kInvalidArgument naming
  // the parameter, its value and the allowed range. `scheme` prefixes the message.
  Status get_u64(const char* scheme, const std::string& k, uint64_t def, uint64_t min, uint64_t max,
                 uint64_t* out) const;
  // on|off, true|false or 1|0 (default `def` when absent); otherwise kInvalidArgument naming
  // the parameter and the words allowed.
  Status get_bool(const char* scheme, const std::string& k, bool def, bool* out) const;
  // One of `allowed` (the first is the default when absent); otherwise kInvalidArgument
  // naming the parameter and the words allowed.
  Status get_enum(const char* scheme, const std::string& k, const std::vector<std::string>& allowed,
                  std::string* out) const;
  void set(const std::string& k, const std::string& v) { m_[k] = v; }
  const std::map<std::string, std::string>& map() const { return m_; }
  // The names a scheme asked for (any get or has, given or not): what it understands. A
  // given name never asked for is a misspelling or another scheme's parameter.
  const std::set<std::string>& asked() const { return asked_; }
  std::vector<std::string> unasked() const;

 private:
  std::map<std::string, std::string> m_;
  mutable std::set<std::string> asked_;
};

}  // namespace pmhash::common
