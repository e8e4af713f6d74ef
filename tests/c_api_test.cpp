// The C API mirrors the C++ one (FFI users: Python, Rust, Go, ...).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "pmhash/pmhash.h"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

pmhash_options variable_options(const char* scheme) {
  return c_variable_options(scheme, 64u << 20);
}

TEST(CApi, RoundTripAndErrors) {
  for (const std::string& scheme : schemes()) {
    TempPool p;
    pmhash_options o = variable_options(scheme.c_str());
    pmhash_index* t = nullptr;
    char err[256];
    ASSERT_EQ(pmhash_open(p.path.c_str(), &o, &t, err, sizeof err), 0) << err;
    EXPECT_EQ(pmhash_insert(t, "k", 1, "v1", 2), PMHASH_OK);
    EXPECT_EQ(pmhash_insert(t, "k", 1, "v2", 2), PMHASH_ALREADY_EXISTS);
    EXPECT_EQ(pmhash_upsert(t, "k", 1, "value", 5), PMHASH_OK);
    char buf[3];
    size_t len = 0;
    EXPECT_EQ(pmhash_get(t, "k", 1, buf, sizeof buf, &len), PMHASH_OK);
    EXPECT_EQ(len, 5u);  // the full length, though only 3 bytes fit
    EXPECT_EQ(std::memcmp(buf, "val", 3), 0);
    EXPECT_EQ(pmhash_update(t, "x", 1, "v", 1), PMHASH_NOT_FOUND);
    // A failed get sets *len to 0, not the previous call's length (37d1a4d, 7b492b8).
    len = 99;
    EXPECT_EQ(pmhash_get(t, "x", 1, buf, sizeof buf, &len), PMHASH_NOT_FOUND);
    EXPECT_EQ(len, 0u);
    len = 99;
    EXPECT_EQ(pmhash_get(t, "", 0, buf, sizeof buf, &len), PMHASH_INVALID_ARGUMENT);
    EXPECT_EQ(len, 0u);
    len = 99;
    EXPECT_EQ(pmhash_get(t, "k", 1, nullptr, 3, &len), PMHASH_INVALID_ARGUMENT);
    EXPECT_EQ(len, 0u);
    EXPECT_EQ(pmhash_insert(t, "", 0, "v", 1), PMHASH_INVALID_ARGUMENT);
    EXPECT_EQ(pmhash_size(t), 1u);
    // Routing: only PMEH partitions its keys; this thread (the index's only one) holds slot 0.
    // (PMEH's default zone_threads is the number of cores.)
    EXPECT_EQ(pmhash_partitions(t) > 1, scheme == "pmeh" && std::thread::hardware_concurrency() > 1)
        << scheme;
    EXPECT_LT(pmhash_owner(t, "k", 1), pmhash_partitions(t));
    EXPECT_EQ(pmhash_partition(t), 0u);
    EXPECT_EQ(pmhash_partition(nullptr), PMHASH_NO_PARTITION);
    EXPECT_EQ(pmhash_check(t, err, sizeof err), 0) << err;
    EXPECT_EQ(pmhash_remove(t, "k", 1), PMHASH_OK);
    EXPECT_EQ(pmhash_remove(t, "k", 1), PMHASH_NOT_FOUND);
    EXPECT_STREQ(pmhash_code_name(PMHASH_NOT_FOUND), "not found");
    EXPECT_EQ(pmhash_close(t), 0);
    // A second open with the other format fails with a message.
    o.variable_format = 0;
    int rc = pmhash_open(p.path.c_str(), &o, &t, err, sizeof err);
    EXPECT_NE(rc, 0);
    EXPECT_NE(std::strstr(err, "format"), nullptr) << err;
    // variable_format is 0 or 1: other values are refused, naming the allowed ones.
    for (int bad : {7, -1}) {
      o.variable_format = bad;
      err[0] = 0;
      EXPECT_NE(pmhash_open(p.path.c_str(), &o, &t, err, sizeof err), 0) << bad;
      EXPECT_NE(std::strstr(err, "fixed(0), variable(1)"), nullptr) << err;
    }
  }
}

// pmhash_get_many: each key's code, length and bytes as pmhash_get gives them; argument
// errors refuse the whole call (and say so in every code); a closed index too.
TEST(CApi, GetManyAnswersEachKeyAsGetDoes) {
  TempPool p;
  pmhash_options o = variable_options("lineht");
  pmhash_index* t = nullptr;
  char err[256];
  ASSERT_EQ(pmhash_open(p.path.c_str(), &o, &t, err, sizeof err), 0) << err;
  ASSERT_EQ(pmhash_insert(t, "a", 1, "alpha", 5), PMHASH_OK);
  ASSERT_EQ(pmhash_insert(t, "b", 1, "be", 2), PMHASH_OK);
  const void* keys[] = {"a", "x", "b", nullptr, ""};
  size_t key_lens[] = {1, 1, 1, 3, 0};
  char b0[3], b1[8], b2[8], b3[8], b4[8];
  void* bufs[] = {b0, b1, b2, b3, b4};
  size_t caps[] = {sizeof b0, sizeof b1, sizeof b2, sizeof b3, sizeof b4};
  size_t lens[5];
  int codes[5];
  ASSERT_EQ(pmhash_get_many(t, 5, keys, key_lens, bufs, caps, lens, codes), PMHASH_OK);
  int want[] = {PMHASH_OK, PMHASH_NOT_FOUND, PMHASH_OK, PMHASH_INVALID_ARGUMENT,
                PMHASH_INVALID_ARGUMENT};
  size_t want_lens[] = {5, 0, 2, 0, 0};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(codes[i], want[i]) << i;
    EXPECT_EQ(lens[i], want_lens[i]) << i;
  }
  EXPECT_EQ(std::memcmp(b0, "alp", 3), 0);  // cut at its cap; lens[0] says 5
  EXPECT_EQ(std::memcmp(b2, "be", 2), 0);
  // Lengths only.
  ASSERT_EQ(pmhash_get_many(t, 5, keys, key_lens, nullptr, nullptr, lens, codes), PMHASH_OK);
  EXPECT_EQ(lens[0], 5u);
  // Bad arguments refuse the whole call.
  EXPECT_EQ(pmhash_get_many(t, 5, keys, key_lens, bufs, nullptr, lens, codes),
            PMHASH_INVALID_ARGUMENT);
  for (int c : codes) EXPECT_EQ(c, PMHASH_INVALID_ARGUMENT);
  void* null_buf[] = {b0, nullptr, b2, b3, b4};
  EXPECT_EQ(pmhash_get_many(t, 5, keys, key_lens, null_buf, caps, lens, codes),
            PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_get_many(nullptr, 5, keys, key_lens, bufs, caps, lens, codes),
            PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_get_many(t, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), PMHASH_OK);
  // After shutdown every key says closed.
  ASSERT_EQ(pmhash_shutdown(t), 0);
  EXPECT_EQ(pmhash_get_many(t, 5, keys, key_lens, bufs, caps, lens, codes), PMHASH_CLOSED);
  for (int c : codes) EXPECT_EQ(c, PMHASH_CLOSED);
  for (size_t l : lens) EXPECT_EQ(l, 0u);
  EXPECT_EQ(pmhash_close(t), 0);
}

// A successful open (and check) empties err: it kept an earlier failure's message. A
// closed index's size is an error, as every other call's: pmhash_size answers 0, as for an
// empty index; pmhash_count says PMHASH_CLOSED.
TEST(CApi, SuccessClearsErrAndCountReportsAClosedIndex) {
  TempPool p;
  pmhash_options o = variable_options("lineht");
  pmhash_index* t = nullptr;
  char err[256] = "an earlier call's message";
  ASSERT_EQ(pmhash_open(p.path.c_str(), &o, &t, err, sizeof err), 0) << err;
  EXPECT_STREQ(err, "");
  std::strcpy(err, "stale");
  EXPECT_EQ(pmhash_check(t, err, sizeof err), 0);
  EXPECT_STREQ(err, "");
  uint64_t n = 99;
  EXPECT_EQ(pmhash_count(t, &n), PMHASH_OK);
  EXPECT_EQ(n, 0u);  // empty, and open
  ASSERT_EQ(pmhash_insert(t, "k", 1, "v", 1), PMHASH_OK);
  EXPECT_EQ(pmhash_count(t, &n), PMHASH_OK);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(pmhash_count(t, nullptr), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_count(nullptr, &n), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(n, 0u);
  ASSERT_EQ(pmhash_shutdown(t), PMHASH_OK);
  n = 99;
  EXPECT_EQ(pmhash_count(t, &n), PMHASH_CLOSED);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(pmhash_size(t), 0u);  // documented: pmhash_count tells this from empty
  EXPECT_EQ(pmhash_close(t), PMHASH_OK);
}

// REVIEW PROBE: with every thread slot taken (kMaxThreads threads on the index at once),
// the other calls refuse (PMHASH_INVALID_ARGUMENT, "more than 256 threads"); pmhash_count
// answers PMHASH_OK with 0 for an index holding a key.
TEST(CApi, CountWithEveryThreadSlotTaken) {
  TempPool p;
  pmhash_options o = variable_options("lineht");
  pmhash_index* t = nullptr;
  ASSERT_EQ(pmhash_open(p.path.c_str(), &o, &t, nullptr, 0), 0);
  ASSERT_EQ(pmhash_insert(t, "k", 1, "v", 1), PMHASH_OK);
  std::atomic<int> ready{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> ts;
  for (int i = 0; i < 256; ++i)
    ts.emplace_back([&] {
      uint64_t n;
      pmhash_count(t, &n);  // takes a slot
      ready++;
      while (!done) std::this_thread::yield();
    });
  while (ready < 256) std::this_thread::yield();
  std::thread([&] {
    char buf[8];
    size_t len;
    int get = pmhash_get(t, "k", 1, buf, sizeof buf, &len);
    uint64_t n = 99;
    int count = pmhash_count(t, &n);
    EXPECT_EQ(count, get) << "get says " << get << "; count says " << count << " with n=" << n;
  }).join();
  done = true;
  for (auto& th : ts) th.join();
  EXPECT_EQ(pmhash_close(t), 0);
}

}  // namespace
}  // namespace pmhash::testing
