// pmhash — status codes returned by every operation. No exceptions cross the API.
#pragma once

#include <string>
#include <utility>

namespace pmhash {

enum class Code {
  kOk = 0,
  kNotFound,            // key absent (get/update/remove), or pool file missing
  kAlreadyExists,       // insert of a key that is present
  kInvalidArgument,     // empty or oversized key/value, wrong size in a fixed pool, bad option
  kNotAPool,            // the file is not a pmhash pool (bad magic)
  kTruncated,           // the file is shorter than its header says
  kChecksumMismatch,    // header checksum does not match (corrupted header)
  kUnsupportedVersion,  // pool format version this build cannot read
  kSchemeMismatch,      // pool holds another scheme than the one asked for
  kFormatMismatch,      // pool holds another key/value format than the one asked for
  kPoolBusy,            // pool already open (this or another process)
  kPoolFull,            // no space left in the pool; reads and deletes still work
  kUnknownScheme,       // no scheme registered under that name
  kIoError,             // the OS refused (open, map, lock, ...)
  kCorrupted,           // a structural check failed
  kClosed,              // the index was closed (by this or another thread)
};

const char* code_name(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }
  // A lookup's miss, the most frequent non-ok status: built without its message (a string
  // copied on every negative read was 8% of one's instructions); message() supplies it.
  static Status KeyNotFound() { return Status(Code::kNotFound); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const {
    return message_.empty() && code_ == Code::kNotFound ? key_not_found() : message_;
  }
  std::string to_string() const;
  bool operator==(Code c) const { return code_ == c; }

 private:
  explicit Status(Code code) : code_(code) {}
  static const std::string& key_not_found() {
    // Never destroyed: a status may be read from another static object's destructor.
    static const std::string& m = *new std::string("key not found");
    return m;
  }
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace pmhash
