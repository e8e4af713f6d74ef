// What close() does to concurrent callers, for every scheme with its default options: each
// call returns a normal status or kClosed (never anything else, never a crash or hang);
// once close() has returned every call gets kClosed; what was acknowledged before close is
// durable. The same through the C API (pmhash_shutdown), and the C API's NULL checks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pmhash/pmhash.h"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

using namespace std::chrono_literals;

// Aborts the process (a clear failure instead of a ctest timeout) if not disarmed within
// a generous liveness bound.
class Watchdog {
 public:
  explicit Watchdog(std::string what, std::chrono::seconds limit = 120s)
      : what_(std::move(what)), t_([this, limit] {
          std::unique_lock<std::mutex> l(mu_);
          if (!cv_.wait_for(l, limit, [&] { return done_; })) {
            std::fprintf(stderr, "no progress in %lld s: %s\n", (long long)limit.count(),
                         what_.c_str());
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> g(mu_);
      done_ = true;
    }
    cv_.notify_all();
    t_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread t_;
};

// What one caller thread saw.
struct CallerLog {
  std::vector<uint64_t> inserted;  // acknowledged inserts (key ids), not removed
  std::vector<uint64_t> removed;   // acknowledged removes
  std::vector<uint64_t> refused;   // inserts that got kClosed: must not be there
  std::string unexpected;          // first status that was neither normal nor kClosed
  uint64_t ops = 0, closed = 0;
};

class CloseTest : public ::testing::TestWithParam<SchemeFormat> {};

constexpr int kCallers = 8;
constexpr uint64_t kKeysPerCaller = 20000;  // bounded: the pool never fills

uint64_t key_id(int caller, uint64_t i) {
  return uint64_t(caller) * kKeysPerCaller + i;
}

TEST_P(CloseTest, ConcurrentCallersGetNormalResultsOrClosedAndAcknowledgedWritesSurvive) {
  const SchemeFormat& sf = GetParam();
  const bool fixed = sf.format == Format::kFixed;
  TempPool p;
  Options o = small_options(sf.scheme, sf.format);
  o.pool_size = 256u << 20;
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  std::vector<CallerLog> logs(kCallers);
  std::atomic<uint64_t> acknowledged{0};
  std::atomic<bool> close_returned{false};
  {
    Watchdog wd("close() with " + std::to_string(kCallers) + " callers, " + param_name(sf));
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; ++c)
      callers.emplace_back([&, c] {
        CallerLog& log = logs[c];
        std::string v;
        int after_close = 0;  // calls made once close() had returned
        auto note = [&](const char* what, const Status& s, bool normal, bool closed_before) {
          ++log.ops;
          if (s.code() == Code::kClosed) {
            ++log.closed;
            return;
          }
          if (log.unexpected.empty() && (closed_before || !normal))
            log.unexpected =
                std::string(what) + (closed_before ? " after close: " : ": ") + s.to_string();
        };
        for (uint64_t i = 0; after_close < 200; ++i) {
          bool closed_before = close_returned.load();
          if (closed_before) ++after_close;
          uint64_t id = key_id(c, i % kKeysPerCaller);
          std::string k = make_key(id, fixed);
          if (i < kKeysPerCaller) {
            Status s = idx->insert(k, make_value(k, 1, fixed));
            note("insert", s, s.ok(), closed_before);
            if (s.ok()) {
              log.inserted.push_back(id);
              acknowledged.fetch_add(1);
            } else if (s.code() == Code::kClosed) {
              log.refused.push_back(id);
            }
            // Every fourth acknowledged key is removed again.
            if (s.ok() && i % 4 == 3) {
              closed_before = close_returned.load();
              Status r = idx->remove(k);
              note("remove", r, r.ok(), closed_before);
              if (r.ok()) {
                log.inserted.pop_back();
                log.removed.push_back(id);
              }
            }
          } else {  // every key written: keep reading
            Status s = idx->get(k, &v);
            bool removed = (i % kKeysPerCaller) % 4 == 3;
            bool normal =
                removed ? s.code() == Code::kNotFound : s.ok() && v == make_value(k, 1, fixed);
            note("get", s, normal, closed_before);
          }
          if (i % 64 == 0) {  // whole-table calls
            closed_before = close_returned.load();
            Stats st = idx->stats();
            uint64_t n = idx->size();
            if (closed_before && log.unexpected.empty() && (!st.scheme.empty() || n != 0))
              log.unexpected = "stats()/size() answered after close";
            if (!closed_before && !st.scheme.empty() && st.scheme != sf.scheme)
              log.unexpected = "stats() names scheme " + st.scheme;
          }
          if (i % 16 == 0) {  // a read of the caller's first key
            closed_before = close_returned.load();
            std::string k0 = make_key(key_id(c, 0), fixed);
            Status s = idx->get(k0, &v);
            note("get", s, s.ok() && v == make_value(k0, 1, fixed), closed_before);
          }
        }
      });
    // Close while every caller is busy (a count of acknowledged writes, not a time).
    while (acknowledged.load() < 2000) std::this_thread::yield();
    EXPECT_TRUE(idx->close().ok());
    close_returned = true;
    for (auto& t : callers) t.join();
  }
  uint64_t closed_calls = 0;
  for (int c = 0; c < kCallers; ++c) {
    EXPECT_EQ(logs[c].unexpected, "") << "caller " << c;
    closed_calls += logs[c].closed;
  }
  EXPECT_GE(closed_calls, uint64_t(kCallers) * 200);  // every caller ran into the closed gate
  // After close: every call is refused.
  std::string v;
  std::string k = make_key(key_id(0, 0), fixed);
  EXPECT_EQ(idx->insert(make_key(999999999, fixed), make_value(k, 1, fixed)).code(), Code::kClosed);
  EXPECT_EQ(idx->upsert(k, make_value(k, 2, fixed)).code(), Code::kClosed);
  EXPECT_EQ(idx->update(k, make_value(k, 2, fixed)).code(), Code::kClosed);
  EXPECT_EQ(idx->get(k, &v).code(), Code::kClosed);
  EXPECT_EQ(idx->remove(k).code(), Code::kClosed);
  EXPECT_EQ(idx->check().code(), Code::kClosed);
  EXPECT_EQ(idx->size(), 0u);
  EXPECT_TRUE(idx->stats().scheme.empty());
  EXPECT_TRUE(idx->close().ok());  // a second close is harmless
  idx.reset();

  // Reopen: every acknowledged write is there; refused inserts are not.
  o.create = false;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  EXPECT_FALSE(idx->stats().recovered_from_crash);  // close() was clean
  uint64_t present = 0;
  for (int c = 0; c < kCallers; ++c) {
    for (uint64_t id : logs[c].inserted) {
      std::string key = make_key(id, fixed);
      Status s = idx->get(key, &v);
      ASSERT_TRUE(s.ok()) << "acknowledged insert of key " << id << " lost: " << s.to_string();
      ASSERT_EQ(v, make_value(key, 1, fixed)) << "key " << id;
      ++present;
    }
    for (uint64_t id : logs[c].removed)
      ASSERT_EQ(idx->get(make_key(id, fixed), &v).code(), Code::kNotFound)
          << "acknowledged remove of key " << id << " undone";
    for (uint64_t id : logs[c].refused)
      ASSERT_EQ(idx->get(make_key(id, fixed), &v).code(), Code::kNotFound)
          << "insert of key " << id << " returned kClosed but happened";
  }
  EXPECT_EQ(idx->size(), present);
  EXPECT_TRUE(idx->check().ok());
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, CloseTest, ::testing::ValuesIn(all_scheme_formats()),
                         [](const auto& info) { return param_name(info.param); });

// --- C API ----------------------------------------------------------------------------

pmhash_options c_options(const char* scheme) {
  return c_variable_options(scheme, 256u << 20);
}

bool normal_or_closed(int rc) {
  return rc == PMHASH_OK || rc == PMHASH_NOT_FOUND || rc == PMHASH_ALREADY_EXISTS ||
         rc == PMHASH_CLOSED;
}

TEST(CApiClose, ShutdownWhileOtherThreadsCallGivesClosed) {
  for (const std::string& scheme : schemes()) {
    SCOPED_TRACE(scheme);
    TempPool p;
    pmhash_options o = c_options(scheme.c_str());
    pmhash_index* t = nullptr;
    char err[256];
    ASSERT_EQ(pmhash_open(p.path.c_str(), &o, &t, err, sizeof err), 0) << err;
    std::atomic<uint64_t> acknowledged{0};
    std::atomic<bool> shut_returned{false};
    std::atomic<int> unexpected{0}, not_closed_after{0};
    {
      Watchdog wd("pmhash_shutdown with callers, " + scheme);
      std::vector<std::thread> callers;
      for (int c = 0; c < 4; ++c)
        callers.emplace_back([&, c] {
          char buf[64];
          size_t len = 0;
          for (int i = 0, after = 0; after < 100; ++i) {
            bool shut_before = shut_returned.load();
            if (shut_before) ++after;
            std::string k = "c" + std::to_string(c) + "-" + std::to_string(i % 5000);
            int rcs[4] = {pmhash_upsert(t, k.data(), k.size(), "value", 5),
                          pmhash_get(t, k.data(), k.size(), buf, sizeof buf, &len),
                          i % 3 == 0 ? pmhash_remove(t, k.data(), k.size()) : PMHASH_CLOSED,
                          // check() is meaningful only without writers: once shut down only
                          shut_before ? pmhash_check(t, nullptr, 0) : PMHASH_CLOSED};
            if (rcs[0] == PMHASH_OK) acknowledged.fetch_add(1);
            for (int rc : rcs) {
              if (!normal_or_closed(rc) && unexpected.fetch_add(1) == 0)
                std::fprintf(stderr, "unexpected code %d (%s)\n", rc, pmhash_code_name(rc));
              if (shut_before && rc != PMHASH_CLOSED) not_closed_after.fetch_add(1);
            }
            if (shut_before && pmhash_size(t) != 0) not_closed_after.fetch_add(1);
          }
        });
      while (acknowledged.load() < 200) std::this_thread::yield();
      EXPECT_EQ(pmhash_shutdown(t), PMHASH_OK);
      shut_returned = true;
      for (auto& th : callers) th.join();
    }
    EXPECT_EQ(unexpected.load(), 0);
    EXPECT_EQ(not_closed_after.load(), 0);
    EXPECT_EQ(pmhash_insert(t, "k", 1, "v", 1), PMHASH_CLOSED);
    EXPECT_EQ(pmhash_shutdown(t), PMHASH_OK);  // idempotent
    EXPECT_EQ(pmhash_close(t), PMHASH_OK);
  }
}

TEST(CApiClose, NullArgumentsAreRefused) {
  TempPool p;
  pmhash_options o = c_options("turbohash");
  pmhash_index* t = nullptr;
  char err[256] = "";
  EXPECT_EQ(pmhash_open(nullptr, &o, &t, err, sizeof err), PMHASH_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("NULL"), std::string::npos) << err;
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(pmhash_open(p.path.c_str(), &o, nullptr, err, sizeof err), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(access(p.path.c_str(), F_OK), -1) << "a refused open created the pool";
  EXPECT_EQ(pmhash_open(nullptr, &o, &t, nullptr, 0), PMHASH_INVALID_ARGUMENT);  // err NULL too

  // A NULL index.
  char buf[8];
  size_t len = 0;
  EXPECT_EQ(pmhash_insert(nullptr, "k", 1, "v", 1), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_upsert(nullptr, "k", 1, "v", 1), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_update(nullptr, "k", 1, "v", 1), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_get(nullptr, "k", 1, buf, sizeof buf, &len), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_remove(nullptr, "k", 1), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_check(nullptr, err, sizeof err), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_shutdown(nullptr), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_close(nullptr), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_size(nullptr), 0u);

  // NULL key or value pointers with a non-zero length.
  ASSERT_EQ(pmhash_open(p.path.c_str(), &o, &t, err, sizeof err), PMHASH_OK) << err;
  EXPECT_EQ(pmhash_insert(t, nullptr, 4, "v", 1), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_insert(t, "k", 1, nullptr, 4), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_upsert(t, nullptr, 4, "v", 1), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_update(t, nullptr, 4, "v", 1), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_get(t, nullptr, 3, buf, sizeof buf, &len), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_get(t, "k", 1, nullptr, 8, &len), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_remove(t, nullptr, 2), PMHASH_INVALID_ARGUMENT);
  // NULL with length 0 is an empty byte string (refused as an empty key, not a crash).
  EXPECT_EQ(pmhash_insert(t, nullptr, 0, "v", 1), PMHASH_INVALID_ARGUMENT);
  EXPECT_EQ(pmhash_insert(t, "k", 1, "value", 5), PMHASH_OK);
  EXPECT_EQ(pmhash_get(t, "k", 1, nullptr, 0, &len), PMHASH_OK);  // length only
  EXPECT_EQ(len, 5u);
  EXPECT_EQ(pmhash_size(t), 1u);  // none of the refused calls wrote anything
  EXPECT_EQ(pmhash_close(t), PMHASH_OK);
}

}  // namespace
}  // namespace pmhash::testing
