// Run-time parameters (Options::params): a bad value — out of range, not a number, not one
// of the words allowed — is refused with kInvalidArgument naming the parameter and what is
// allowed, before the pool file is touched (an existing pool stays byte-identical, a new
// one is not created).
#include "common/params.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include "test_util.hpp"

namespace pmhash::testing {
namespace {

using Map = std::map<std::string, std::string>;

struct BadParam {
  const char* name;
  const char* value;
  const char* allowed;  // expected in the message
};

std::vector<BadParam> bad_values(const std::string& scheme) {
  const char* kBool = "one of on, off, true, false, 1, 0";
  if (scheme == "turbohash") return {{"simd", "maybe", kBool}, {"simd", "", kBool}};
  if (scheme == "smartht")
    return {{"filter", "2", kBool},
            {"filter", "ON", kBool},
            {"recovery_threads", "0", "[1, 256]"},
            {"recovery_threads", "300", "[1, 256]"}};
  if (scheme == "lineht")
    return {{"filter", "maybe", kBool}, {"filter", "", kBool}, {"prefetch", "2", kBool}};
  if (scheme == "wophi")
    return {{"pab", "yes", kBool},
            {"pab_grow", "sometimes", "one of background, inline"},
            {"pab_grow", "", "one of background, inline"}};
  if (scheme == "hdnh")
    return {{"recovery_threads", "0", "[1, 256]"},
            {"recovery_threads", "257", "[1, 256]"},
            {"recovery_threads", "four", "[1, 256]"},
            {"hot_slots", "9", "[1, 8]"},
            {"hot_slots", "-1", "[1, 8]"},
            {"ocf", "nope", kBool},
            {"hot_table", "fifo", "one of rafl, lru, off"},
            {"sync_write", "later", "one of inline, background"}};
  if (scheme == "pmeh")
    return {{"zone_threads", "0", "[1, 256]"},
            {"zone_threads", "257", "[1, 256]"},
            {"zone_threads", "18446744073709551616", "[1, 256]"},  // overflows uint64
            {"zone_threads", " 4", "[1, 256]"},
            {"opportunistic", "sometimes", kBool},
            {"concurrency", "helping", "one of opportunistic, partition, locked"}};
  return {};
}

// Bad values, and names the scheme does not have: a misspelling of one of its own and
// another scheme's parameter (before, both were ignored and the default stayed in force).
std::vector<BadParam> bad_params(const std::string& scheme) {
  std::vector<BadParam> v = bad_values(scheme);
  const char* misspelt = scheme == "pmeh"   ? "segment_size"
                         : scheme == "hdnh" ? "hotslots"
                                            : "bucket";
  v.push_back({misspelt, "8", "unknown parameter"});
  v.push_back({scheme == "pmeh" ? "scope" : "zone_threads", "2", "unknown parameter"});
  return v;
}

class ParamsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ParamsTest, BadRuntimeValueIsRefusedNamingTheRangeAndTouchesNoFile) {
  const std::string scheme = GetParam();
  TempPool p;
  Options o = small_options(scheme, Format::kVariable);
  o.params = small_params(scheme);
  o.pool_size = 8u << 20;  // read back after every refusal
  {
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    ASSERT_TRUE(idx->insert("key", "value").ok());
    ASSERT_TRUE(idx->close().ok());
  }
  const std::vector<char> before = read_file(p.path);
  ASSERT_FALSE(bad_params(scheme).empty());
  for (const BadParam& b : bad_params(scheme)) {
    SCOPED_TRACE(std::string(b.name) + "='" + b.value + "'");
    Options bad = o;
    bad.params[b.name] = b.value;
    for (bool create : {false, true}) {  // an existing pool, with and without create
      bad.create = create;
      std::unique_ptr<Index> idx;
      Status s = Index::open(p.path, bad, &idx);
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
      EXPECT_NE(s.message().find(b.name), std::string::npos) << s.to_string();
      EXPECT_NE(s.message().find(b.allowed), std::string::npos) << s.to_string();
      EXPECT_TRUE(read_file(p.path) == before) << "a refused open changed the file";
    }
    TempPool fresh;  // a new pool is not created
    bad.create = true;
    std::unique_ptr<Index> idx;
    EXPECT_EQ(Index::open(fresh.path, bad, &idx).code(), Code::kInvalidArgument);
    EXPECT_NE(access(fresh.path.c_str(), F_OK), 0) << "a refused creation left a file";
  }
  // The pool is still fine with its good parameters.
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  std::string v;
  EXPECT_TRUE(idx->get("key", &v).ok());
  EXPECT_EQ(v, "value");
}

// Layout parameters, other valid values than the pool's (small_params): each scheme's table
// shape. A reopen ignores them: the pool keeps what it recorded at creation.
Map other_layout(const std::string& scheme) {
  if (scheme == "turbohash") return {{"shards", "4"}, {"buckets", "2"}, {"scope", "8"}};
  if (scheme == "smartht") return {{"buckets", "8"}, {"stripe", "4"}, {"filter_keys", "32"}};
  if (scheme == "wophi") return {{"buckets", "8"}, {"stripe", "4"}, {"pab_buckets", "4"}};
  if (scheme == "hdnh") return {{"segment_bytes", "512"}, {"segments", "2"}};
  if (scheme == "pmeh")
    return {{"segment_bytes", "4096"}, {"split", "2"}, {"zones", "2"}, {"depth", "1"}};
  if (scheme == "lineht") return {{"shards", "4"}, {"buckets", "4"}, {"probe", "4"}};
  return {};
}

// Layout parameters are fixed at creation (recorded in the pool header): a reopen with the
// same or other valid values opens the pool as it was made, and Stats::layout reports the
// recorded values. The header is not rewritten.
TEST_P(ParamsTest, LayoutParamsOnReopenAreIgnoredAndTheRecordedOnesReported) {
  const std::string scheme = GetParam();
  TempPool p;
  Options o = small_options(scheme, Format::kFixed);
  o.params = small_params(scheme);
  o.pool_size = 8u << 20;
  std::string recorded;
  {
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    ASSERT_TRUE(idx->insert("12345678", "abcdefgh").ok());
    recorded = idx->stats().layout;
    for (auto& [k, v] : small_params(scheme))  // the layout ones (pab_grow is run-time)
      if (other_layout(scheme).count(k)) {
        EXPECT_NE(recorded.find(k + "=" + v), std::string::npos) << recorded;
      }
  }
  const std::vector<char> file = read_file(p.path);
  const std::vector<char> header(file.begin(), file.begin() + 256);
  ASSERT_FALSE(other_layout(scheme).empty());
  for (const Map& given : {small_params(scheme), other_layout(scheme)}) {
    Options again = o;
    again.params = given;
    std::unique_ptr<Index> idx;
    Status s = Index::open(p.path, again, &idx);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(idx->stats().layout, recorded);
    std::string v;
    EXPECT_TRUE(idx->get("12345678", &v).ok());
    ASSERT_TRUE(idx->close().ok());
    std::vector<char> now = read_file(p.path);
    EXPECT_TRUE(std::vector<char>(now.begin(), now.begin() + 256) == header);
  }
}

// A capacity hint larger than any initial table a scheme makes: sized to the largest, and a
// pool too small for it is refused naming the hint the user passed (HDNH named 'segments',
// a parameter the user never gave); no file is left behind.
// (2^64 - 1 too: LineHT's rounding up wrapped it to a small table, opened without a word.)
TEST_P(ParamsTest, HugeCapacityHintIsRefusedNamingTheHint) {
  for (uint64_t hint : {uint64_t{1} << 62, ~uint64_t{0}}) {
    SCOPED_TRACE(hint);
    TempPool p;
    Options o = small_options(GetParam(), Format::kFixed);
    o.capacity_hint = hint;
    std::unique_ptr<Index> idx;
    Status s = Index::open(p.path, o, &idx);
    EXPECT_EQ(s.code(), Code::kPoolFull) << s.to_string();
    EXPECT_NE(s.message().find("capacity_hint " + std::to_string(hint)), std::string::npos)
        << s.to_string();
    EXPECT_NE(access(p.path.c_str(), F_OK), 0) << "a refused creation left a file";
  }
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, ParamsTest, ::testing::ValuesIn(schemes()),
                         [](const auto& info) { return info.param; });

// Numbers are digits only: strtoull's sign, blanks and saturation on overflow are refused.
TEST(Params, IntegersAreDigitsOnlyAndInRange) {
  uint64_t v = 7;
  for (const char* text : {"-1", "+5", " 5", "5 ", "0x10", "", "18446744073709551616"}) {
    common::Params p(Map{{"n", text}});
    EXPECT_FALSE(p.get_u64("n", 1, &v)) << "'" << text << "'";
    EXPECT_EQ(p.get_u64("s", "n", 1, 0, ~uint64_t{0}, &v).code(), Code::kInvalidArgument) << text;
  }
  EXPECT_EQ(v, 7u);
  common::Params max(Map{{"n", "18446744073709551615"}});
  EXPECT_TRUE(max.get_u64("s", "n", 1, 0, ~uint64_t{0}, &v).ok());
  EXPECT_EQ(v, ~uint64_t{0});
  common::Params none;
  EXPECT_TRUE(none.get_u64("s", "n", 3, 1, 8, &v).ok());
  EXPECT_EQ(v, 3u);
}

TEST(Params, BooleansAndWords) {
  bool b = false;
  for (const char* yes : {"on", "true", "1"}) {
    b = false;
    EXPECT_TRUE(common::Params(Map{{"f", yes}}).get_bool("s", "f", false, &b).ok());
    EXPECT_TRUE(b) << yes;
  }
  for (const char* no : {"off", "false", "0"}) {
    b = true;
    EXPECT_TRUE(common::Params(Map{{"f", no}}).get_bool("s", "f", true, &b).ok());
    EXPECT_FALSE(b) << no;
  }
  Status s = common::Params(Map{{"f", "yes"}}).get_bool("s", "f", true, &b);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "s: parameter f='yes' must be one of on, off, true, false, 1, 0");
  std::string w;
  EXPECT_TRUE(common::Params().get_enum("s", "e", {"a", "b"}, &w).ok());
  EXPECT_EQ(w, "a");  // the first word is the default
  s = common::Params(Map{{"e", "c"}}).get_enum("s", "e", {"a", "b"}, &w);
  EXPECT_EQ(s.message(), "s: parameter e='c' must be one of a, b");
}

}  // namespace
}  // namespace pmhash::testing
