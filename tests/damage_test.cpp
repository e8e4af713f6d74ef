// Damaged pools and hostile arguments: never crash, never hang, never silently start over,
// never change a file whose open was refused. Regression tests for each bullet of the issue,
// then a fuzz test: pools of every scheme and format damaged at random, each used in a
// forked child with a time limit.
//
//   PMHASH_FUZZ_CASES=N   cases to run (default: a seeded CI sample)
//   PMHASH_FUZZ_SEED=S    base seed (default 1); case i uses seed S + i
//   PMHASH_FUZZ_FIRST=I   first case index (reproduce case I: FIRST=I CASES=1)
//   PMHASH_FUZZ_VERBOSE=1 one line per case
//   PMHASH_FUZZ_TIME_LIMIT=S  seconds per case before it counts as a hang (default 10)
//   PMHASH_FUZZ_STACKS=1  a dying or hanging child prints its stack
//   PMHASH_FUZZ_KEEP=path a copy of each damaged pool (the last case's stays: try the CLI)
//   PMHASH_FUZZ_CLI=N     every Nth case also runs `pmhash info` and `check` (default 7; 0: none)
#include <execinfo.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

#include "crash_sim.hpp"
#include "index/hdnh/hdnh.hpp"
#include "index/lineht/lineht.hpp"
#include "index/pmeh/pmeh.hpp"
#include "index/smartht/smartht.hpp"
#include "index/turbohash/turbohash.hpp"
#include "index/wophi/wophi.hpp"
#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

constexpr uint64_t kSmallChunk = 64u << 10;
constexpr uint64_t kRootWordOffset = pm::kMutableHeaderOffset + 8;

bool exists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
}

Options damage_options(const SchemeFormat& sf) {
  Options o = small_options(sf.scheme, sf.format);
  o.pool_size = 2u << 20;
  o.params = small_params(sf.scheme);
  return o;
}

OpenHooks small_hooks() {
  OpenHooks h;
  h.chunk_size = kSmallChunk;
  return h;
}

std::string key_of(int i, Format f) {
  return make_key(static_cast<uint64_t>(i), f == Format::kFixed);
}

// A pool holding `n` keys, closed cleanly; returns its bytes.
std::vector<char> make_pool(const std::string& path, const SchemeFormat& sf, int n) {
  unlink(path.c_str());
  std::unique_ptr<Index> idx;
  Status s = open_index(path, damage_options(sf), small_hooks(), &idx);
  EXPECT_TRUE(s.ok()) << param_name(sf) << ": " << s.to_string();
  if (!s.ok()) return {};
  bool fixed = sf.format == Format::kFixed;
  for (int i = 0; i < n; ++i) {
    std::string k = key_of(i, sf.format);
    EXPECT_TRUE(idx->insert(k, make_value(k, 1, fixed)).ok());
  }
  EXPECT_TRUE(idx->close().ok());
  idx.reset();
  return read_file(path);
}

Status reopen(const std::string& path, const SchemeFormat& sf, bool create,
              std::unique_ptr<Index>* idx) {
  Options o = damage_options(sf);
  o.create = create;
  return open_index(path, o, small_hooks(), idx);
}

uint64_t word_at(const std::vector<char>& b, uint64_t off) {
  uint64_t w;
  std::memcpy(&w, b.data() + off, 8);
  return w;
}
void set_word(std::vector<char>* b, uint64_t off, uint64_t w) {
  std::memcpy(b->data() + off, &w, 8);
}

// Where a healthy pool's buckets are (offset, bytes), read from its root: the bucket arrays
// and chained buckets, without the root, directories or segment headers that validation
// checks. Zeroing them all leaves a structure that reads as a valid, empty table.
using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;
template <class T>
const T& at(const std::vector<char>& b, uint64_t off) {
  return *reinterpret_cast<const T*>(b.data() + off);
}
Ranges bucket_ranges(const std::vector<char>& b, const std::string& scheme) {
  Ranges out;
  uint64_t root = word_at(b, kRootWordOffset);
  if (scheme == "turbohash") {
    namespace th = turbohash;
    const auto& r = at<th::Root>(b, root);
    for (uint64_t s = 0; s < r.nshards; ++s) {
      const auto& d = at<th::Descriptor>(b, r.directory + s * sizeof(th::Descriptor));
      uint64_t live = d.set[d.version & 1];
      out.push_back({th::packed_offset(live), th::packed_count(live) * sizeof(th::Bucket)});
    }
  } else if (scheme == "smartht") {
    namespace sh = smartht;
    const auto& r = at<sh::Root>(b, root);
    out.push_back({r.heads, r.nheads * sizeof(sh::Bucket)});
    for (uint64_t h = 0; h < r.nheads; ++h)
      for (uint64_t n = at<sh::Bucket>(b, r.heads + h * sizeof(sh::Bucket)).next; n != 0;
           n = at<sh::Bucket>(b, n).next)
        out.push_back({n, sizeof(sh::Bucket)});
  } else if (scheme == "wophi") {
    namespace wo = wophi;
    const auto& r = at<wo::Root>(b, root);
    out.push_back({r.buckets, r.nbuckets * sizeof(wo::Bucket)});
    for (uint64_t a = 0; a < r.nareas; ++a)
      out.push_back({r.areas[a], (r.pab_initial << a) * sizeof(wo::Bucket)});
  } else if (scheme == "hdnh") {
    namespace hd = hdnh;
    const auto& r = at<hd::Root>(b, root);
    for (const hd::LevelDesc* l : {&r.top, &r.bottom, &r.new_top})
      if (l->off != 0)
        out.push_back({l->off, l->segments * r.segment_buckets * sizeof(hd::Bucket)});
  } else if (scheme == "lineht") {
    namespace lh = lineht;
    const auto& r = at<lh::Root>(b, root);
    for (uint64_t s = 0; s < r.nshards; ++s) {
      uint64_t w = word_at(b, r.directory + 8 * s);
      out.push_back({lh::packed_offset(w), lh::packed_count(w) * sizeof(lh::Bucket)});
    }
  } else if (scheme == "pmeh") {
    namespace pe = pmeh;
    const auto& r = at<pe::Root>(b, root);
    std::set<uint64_t> segs;
    for (uint64_t d : r.dirs) {
      if (d == 0) continue;
      const auto& dir = at<pe::Directory>(b, d);
      for (uint64_t t = 0; t < (uint64_t{1} << dir.depth); ++t)
        if (uint64_t so = word_at(b, d + sizeof(pe::Directory) + 8 * t)) segs.insert(so);
    }
    for (uint64_t so : segs)
      out.push_back({so + sizeof(pe::SegmentHeader), r.segment_bytes - sizeof(pe::SegmentHeader)});
  }
  return out;
}

void zero_ranges(std::vector<char>* b, const Ranges& ranges) {
  for (auto [off, len] : ranges) std::memset(b->data() + off, 0, len);
}

class DamageTest : public ::testing::TestWithParam<SchemeFormat> {};

// After a crash the recorded count still bounds the live items from below (nothing was
// removed since the last clean close): check() must report lost items, not call them clean.
TEST_P(DamageTest, CheckAfterACrashReportsItemsBelowTheRecordedCount) {
  TempPool p;
  const SchemeFormat sf = GetParam();
  std::vector<char> bytes = make_pool(p.path, sf, 40);
  ASSERT_FALSE(bytes.empty());
  for (auto [off, len] : bucket_ranges(bytes, sf.scheme))  // the first half of every range
    std::memset(bytes.data() + off, 0, len / 2 / 64 * 64 + (len < 128 ? len / 2 : 0));
  set_word(&bytes, pm::kMutableHeaderOffset, 0);  // the clean-shutdown flag: a crash
  write_bytes(p.path, bytes);
  std::unique_ptr<Index> idx;
  Status s = reopen(p.path, sf, false, &idx);
  ASSERT_TRUE(s.ok()) << s.to_string();  // some items survive: the open is not refused
  ASSERT_LT(idx->size(), 40u) << "the damage removed no item: the test proves nothing";
  std::string report;
  EXPECT_FALSE(idx->impl()->check(&report));
  EXPECT_NE(report.find("none was removed since"), std::string::npos) << report;
}

// A crashed pool whose redo log committed but was not applied: open replays the log before
// it can validate the root. With the root word zeroed, the open is refused — and must leave
// the file as it was, so the replay first runs in a private shadow view (index.cpp).
TEST_P(DamageTest, RefusedOpenOfACrashedPoolWithACommittedLogChangesNothing) {
  TempPool p;
  const SchemeFormat sf = GetParam();
  std::vector<std::vector<char>> images;
  {
    CrashSim sim;
    OpenHooks h = small_hooks();
    h.persist_hook = &sim;
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(open_index(p.path, damage_options(sf), h, &idx).ok());
    sim.at_crash_point = [&] {
      images.emplace_back();
      sim.make_image(CrashSim::Mix::kAllNew, images.size(), &images.back());
    };
    bool fixed = sf.format == Format::kFixed;
    for (int i = 0; i < 12; ++i) {
      std::string k = key_of(i, sf.format);
      ASSERT_TRUE(idx->upsert(k, make_value(k, 1, fixed)).ok());
      ASSERT_TRUE(idx->upsert(k, make_value(k, 2, fixed)).ok());
    }
    sim.at_crash_point = nullptr;
    idx->impl()->closed = true;  // leave the file to the images
  }
  ASSERT_FALSE(images.empty());
  int refused = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    std::vector<char>& bytes = images[i];
    set_word(&bytes, kRootWordOffset, 0);
    write_bytes(p.path, bytes);
    std::unique_ptr<Index> idx;
    Status s = reopen(p.path, sf, false, &idx);
    ASSERT_FALSE(s.ok()) << "crash point " << i;
    EXPECT_EQ(s.code(), Code::kCorrupted) << "crash point " << i << ": " << s.to_string();
    ++refused;
    ASSERT_TRUE(read_file(p.path) == bytes)
        << "crash point " << i << " of " << images.size() << ": the refused open changed the file";
  }
  EXPECT_GT(refused, 0);
}

// A zeroed root word used to re-create the pool silently (100 keys -> 0 keys).
TEST_P(DamageTest, ZeroedRootIsCorruptedAndTheFileUnchanged) {
  TempPool p;
  std::vector<char> bytes = make_pool(p.path, GetParam(), 100);
  ASSERT_FALSE(bytes.empty());
  ASSERT_NE(word_at(bytes, kRootWordOffset), 0u);
  set_word(&bytes, kRootWordOffset, 0);
  write_bytes(p.path, bytes);
  for (bool create : {false, true}) {
    std::unique_ptr<Index> idx;
    Status s = reopen(p.path, GetParam(), create, &idx);
    EXPECT_EQ(s.code(), Code::kCorrupted) << s.to_string();
    EXPECT_NE(s.message().find("root"), std::string::npos) << s.to_string();
    EXPECT_TRUE(read_file(p.path) == bytes) << "a refused open changed the file";
  }
}

// The root object's magic damaged: the scheme refuses, and open wrote nothing before.
TEST_P(DamageTest, RefusedOpenLeavesTheFileIdentical) {
  TempPool p;
  std::vector<char> bytes = make_pool(p.path, GetParam(), 100);
  ASSERT_FALSE(bytes.empty());
  uint64_t root = word_at(bytes, kRootWordOffset);
  set_word(&bytes, root, word_at(bytes, root) ^ 0x5a5a);
  write_bytes(p.path, bytes);
  std::unique_ptr<Index> idx;
  Status s = reopen(p.path, GetParam(), false, &idx);
  EXPECT_EQ(s.code(), Code::kCorrupted) << s.to_string();
  EXPECT_NE(s.message().find(GetParam().scheme), std::string::npos) << s.to_string();
  EXPECT_TRUE(read_file(p.path) == bytes) << "a refused open changed the file";
}

// The fuzz's "OPENED EMPTY" cases: every bucket of a small published table zeroed read as a
// valid empty table. The count recorded at the clean close says it held 8 items.
TEST_P(DamageTest, ZeroedBucketsOfAPublishedPoolAreCorrupted) {
  TempPool p;
  std::vector<char> bytes = make_pool(p.path, GetParam(), 8);
  ASSERT_FALSE(bytes.empty());
  Ranges ranges = bucket_ranges(bytes, GetParam().scheme);
  ASSERT_FALSE(ranges.empty());
  zero_ranges(&bytes, ranges);
  write_bytes(p.path, bytes);
  for (bool read_only : {false, true}) {  // the library, and the tools' read-only open
    OpenHooks h = small_hooks();
    h.read_only = read_only;
    std::unique_ptr<Index> idx;
    Status s = open_index(p.path, damage_options(GetParam()), h, &idx);
    EXPECT_EQ(s.code(), Code::kCorrupted)
        << s.to_string() << (idx ? ", size " + std::to_string(idx->size()) : "");
    EXPECT_NE(s.message().find("recorded 8 live items"), std::string::npos) << s.to_string();
    EXPECT_TRUE(read_file(p.path) == bytes) << "a refused open changed the file";
  }
}

// A pool emptied by its user is not damage: insert, remove every key, close, reopen.
TEST_P(DamageTest, LegitimatelyEmptiedPoolStillOpens) {
  TempPool p;
  const SchemeFormat& sf = GetParam();
  make_pool(p.path, sf, 50);
  for (int round = 0; round < 2; ++round) {
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(reopen(p.path, sf, false, &idx).ok());
    EXPECT_EQ(idx->size(), round == 0 ? 50u : 0u);
    for (int i = 0; round == 0 && i < 50; ++i) EXPECT_TRUE(idx->remove(key_of(i, sf.format)).ok());
    EXPECT_EQ(idx->size(), 0u);
    if (round == 0) {  // a crash now: the first remove dropped the record, the pool opens empty
      EXPECT_EQ(word_at(read_file(p.path), pm::kMutableHeaderOffset + 32), 0u);
      TempPool crashed;
      write_bytes(crashed.path, read_file(p.path));
      std::unique_ptr<Index> after;
      Status s = reopen(crashed.path, sf, false, &after);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(after->size(), 0u);
    }
    std::string report;
    EXPECT_TRUE(idx->check(&report).ok()) << report;
    ASSERT_TRUE(idx->close().ok());
  }
  EXPECT_EQ(word_at(read_file(p.path), pm::kMutableHeaderOffset + 24), 0u);  // recorded 0
}

// The recorded count itself: one that disagrees with the buckets is reported at open where
// the scheme counts every bucket there (HDNH, WOPHI), else by check() until the first write;
// a damaged record is kCorrupted; a crash (no clean close) leaves no count to compare.
TEST_P(DamageTest, RecordedCountIsComparedAtOpenOrByCheck) {
  TempPool p;
  const SchemeFormat& sf = GetParam();
  std::vector<char> bytes = make_pool(p.path, sf, 20);
  ASSERT_FALSE(bytes.empty());
  const uint64_t count_off = pm::kMutableHeaderOffset + 24;
  ASSERT_EQ(word_at(bytes, count_off), 20u);
  std::vector<char> wrong = bytes;
  set_word(&wrong, count_off, 21);
  set_word(&wrong, count_off + 8, pm::live_seal(21));
  write_bytes(p.path, wrong);
  const bool full = find_scheme(sf.scheme)->full_count_at_open;
  {
    std::unique_ptr<Index> idx;
    Status s = reopen(p.path, sf, false, &idx);
    if (full) {
      EXPECT_EQ(s.code(), Code::kCorrupted) << s.to_string();
      EXPECT_NE(s.message().find("recorded 21 live items, but the buckets hold 20"),
                std::string::npos)
          << s.to_string();
      EXPECT_TRUE(read_file(p.path) == wrong) << "a refused open changed the file";
    } else {
      ASSERT_TRUE(s.ok()) << s.to_string();
      std::string report;
      EXPECT_EQ(idx->check(&report).code(), Code::kCorrupted);
      EXPECT_NE(report.find("recorded 21 live items; the index holds 20"), std::string::npos)
          << report;
    }
  }
  std::vector<char> torn = bytes;  // the record's seal does not match its count
  set_word(&torn, count_off, 7);
  write_bytes(p.path, torn);
  std::unique_ptr<Index> idx;
  Status s = reopen(p.path, sf, false, &idx);
  EXPECT_EQ(s.code(), Code::kCorrupted) << s.to_string();
  EXPECT_NE(s.message().find("live count recorded at the last clean close"), std::string::npos)
      << s.to_string();
  EXPECT_TRUE(read_file(p.path) == torn);
  std::vector<char> crashed = bytes;  // clean flag 0: the record is a lower bound
  set_word(&crashed, pm::kMutableHeaderOffset, 0);
  write_bytes(p.path, crashed);
  s = reopen(p.path, sf, false, &idx);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(idx->size(), 20u);
}

// After a crash the recorded count still holds as a lower bound, until the first remove:
// every bucket zeroed in a pool that crashed after its reopen is still kCorrupted.
TEST_P(DamageTest, ZeroedBucketsAfterACrashAreCorrupted) {
  TempPool p;
  std::vector<char> bytes = make_pool(p.path, GetParam(), 8);
  ASSERT_FALSE(bytes.empty());
  zero_ranges(&bytes, bucket_ranges(bytes, GetParam().scheme));
  set_word(&bytes, pm::kMutableHeaderOffset, 0);  // not closed cleanly
  write_bytes(p.path, bytes);
  std::unique_ptr<Index> idx;
  Status s = reopen(p.path, GetParam(), false, &idx);
  EXPECT_EQ(s.code(), Code::kCorrupted) << s.to_string();
  EXPECT_NE(s.message().find("held 8 live items at its last clean close and none was removed"),
            std::string::npos)
      << s.to_string();
  EXPECT_TRUE(read_file(p.path) == bytes) << "a refused open changed the file";
}

// Format 2 pools (before the recorded count) still open and keep their version: this build
// records no count in them, since an older build would leave it stale.
TEST_P(DamageTest, FormatTwoPoolOpensWithoutARecordedCount) {
  TempPool p;
  const SchemeFormat& sf = GetParam();
  std::vector<char> bytes = make_pool(p.path, sf, 10);
  ASSERT_FALSE(bytes.empty());
  auto& h = *reinterpret_cast<pm::PoolHeader*>(bytes.data());
  h.format_version = 2;
  h.checksum = pm::header_checksum(h);
  set_word(&bytes, pm::kMutableHeaderOffset + 24, 0);
  set_word(&bytes, pm::kMutableHeaderOffset + 32, 0);
  write_bytes(p.path, bytes);
  {
    std::unique_ptr<Index> idx;
    Status s = reopen(p.path, sf, false, &idx);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(idx->size(), 10u);
    EXPECT_TRUE(idx->remove(key_of(0, sf.format)).ok());
  }
  std::vector<char> after = read_file(p.path);
  EXPECT_EQ(reinterpret_cast<const pm::PoolHeader*>(after.data())->format_version, 2u);
  EXPECT_EQ(word_at(after, pm::kMutableHeaderOffset + 24), 0u);
  EXPECT_EQ(word_at(after, pm::kMutableHeaderOffset + 32), 0u);
  auto& h3 = *reinterpret_cast<pm::PoolHeader*>(after.data());
  h3.format_version = pm::kPoolFormatVersion + 1;
  h3.checksum = pm::header_checksum(h3);
  write_bytes(p.path, after);
  std::unique_ptr<Index> idx;
  Status s = reopen(p.path, sf, false, &idx);
  EXPECT_EQ(s.code(), Code::kUnsupportedVersion);
  EXPECT_NE(s.message().find("reads versions 2 to 3"), std::string::npos) << s.to_string();
}

INSTANTIATE_TEST_SUITE_P(All, DamageTest, ::testing::ValuesIn(all_scheme_formats()),
                         [](const auto& info) { return param_name(info.param); });

// The case the issue quoted: "turbohash: shard 0 points nowhere" after marking in use.
TEST(Damage, TurboHashShardPointingNowhereLeavesTheFileIdentical) {
  TempPool p;
  SchemeFormat sf{"turbohash", Format::kFixed};
  std::vector<char> bytes = make_pool(p.path, sf, 100);
  ASSERT_FALSE(bytes.empty());
  uint64_t root = word_at(bytes, kRootWordOffset);
  uint64_t dir = word_at(bytes, root + 24);  // Root::directory
  set_word(&bytes, dir, 0);                  // shard 0, set 0: {0 buckets, offset 0}
  set_word(&bytes, dir + 8, 0);              // shard 0, set 1
  write_bytes(p.path, bytes);
  std::unique_ptr<Index> idx;
  Status s = reopen(p.path, sf, false, &idx);
  EXPECT_EQ(s.code(), Code::kCorrupted) << s.to_string();
  EXPECT_NE(s.message().find("shard 0"), std::string::npos) << s.to_string();
  EXPECT_TRUE(read_file(p.path) == bytes);
}

// Every state a killed creation can leave (pm::Pool::create_layout's steps, then a scheme
// whose root was never published) is formatted by open(create), and refused without it.
TEST(Damage, KilledCreationAtEveryStepReopensWithCreate) {
  SchemeFormat sf{"hdnh", Format::kVariable};
  TempPool ref;
  std::vector<char> pool = make_pool(ref.path, sf, 0);
  ASSERT_FALSE(pool.empty());
  std::vector<char> marker(pm::kCreatingMagic, pm::kCreatingMagic + 8);
  std::vector<std::vector<char>> states;
  states.push_back({});                                    // created, nothing written
  states.push_back({marker.begin(), marker.begin() + 3});  // the marker write cut short
  states.push_back(marker);                                // marker written, not sized
  std::vector<char> sized(pool.size(), 0);                 // sized, header not written
  std::copy(marker.begin(), marker.end(), sized.begin());
  states.push_back(sized);
  std::vector<char> header = sized;  // header persisted, magic not yet replaced
  std::copy(pool.begin() + 8, pool.begin() + pm::kHeaderRegion, header.begin() + 8);
  std::fill(header.begin() + pm::kMutableHeaderOffset, header.begin() + pm::kHeaderRegion, 0);
  states.push_back(header);
  std::vector<char> unpublished = header;  // a valid pool whose scheme never published a root
  std::copy(pool.begin(), pool.begin() + 8, unpublished.begin());
  states.push_back(unpublished);
  for (size_t i = 0; i < states.size(); ++i) {
    SCOPED_TRACE("state " + std::to_string(i));
    TempPool p;
    write_bytes(p.path, states[i]);
    std::unique_ptr<Index> idx;
    if (i < states.size() - 1) {
      Status s = reopen(p.path, sf, false, &idx);
      EXPECT_EQ(s.code(), Code::kNotAPool) << s.to_string();
      EXPECT_TRUE(read_file(p.path) == states[i]);
    }
    Status s = reopen(p.path, sf, true, &idx);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_TRUE(idx->insert("key", "value").ok());
    ASSERT_TRUE(idx->close().ok());
    idx.reset();
    ASSERT_TRUE(reopen(p.path, sf, false, &idx).ok());
    std::string v;
    EXPECT_TRUE(idx->get("key", &v).ok());
    EXPECT_EQ(v, "value");
  }
}

// The real thing: creations of a 1 GiB pool SIGKILLed at spread-out moments.
TEST(Damage, SigkilledCreationsReopenWithCreate) {
  SchemeFormat sf{"turbohash", Format::kFixed};
  int interrupted = 0;
  for (int round = 0; round < 12; ++round) {
    TempPool p;
    pid_t child = fork();
    if (child == 0) {
      Options o = small_options(sf.scheme, sf.format);
      o.pool_size = 1ull << 30;
      std::unique_ptr<Index> idx;
      _exit(Index::open(p.path, o, &idx).ok() ? 0 : 3);
    }
    usleep(static_cast<useconds_t>(round * 150));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    interrupted += WIFSIGNALED(status);
    std::unique_ptr<Index> idx;
    Options o = small_options(sf.scheme, sf.format);
    o.pool_size = 1ull << 30;
    Status s = Index::open(p.path, o, &idx);
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.to_string();
    EXPECT_TRUE(idx->insert(key_of(1, sf.format), key_of(2, sf.format)).ok());
  }
  std::printf("%d of 12 creations were killed before they finished\n", interrupted);
}

TEST(Damage, HostileArgumentsAreRefusedAndLeaveNoFile) {
  TempPool p;
  Options o = small_options("turbohash", Format::kFixed);
  std::unique_ptr<Index> idx;
  o.mode = static_cast<Mode>(99);
  Status s = Index::open(p.path, o, &idx);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("emulated(2)"), std::string::npos) << s.to_string();
  EXPECT_FALSE(exists(p.path));
  o.mode = Mode::kEmulated;
  o.format = static_cast<Format>(7);
  EXPECT_EQ(Index::open(p.path, o, &idx).code(), Code::kInvalidArgument);
  o.format = Format::kFixed;
  o.pool_size = 4096;  // too small
  s = Index::open(p.path, o, &idx);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("at least"), std::string::npos) << s.to_string();
  EXPECT_FALSE(exists(p.path)) << "a refused creation left a file behind";
  o.pool_size = 64u << 20;
  o.pm_write_delay_ns = 4'000'000'000u;
  EXPECT_EQ(Index::open(p.path, o, &idx).code(), Code::kInvalidArgument);
  EXPECT_FALSE(exists(p.path));
  o.pm_write_delay_ns = 0;
  for (const char* scheme : {"smartht", "wophi"}) {
    o.scheme = scheme;
    o.params = {{"stripe", "18446744073709551615"}};
    s = Index::open(p.path, o, &idx);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << scheme << ": " << s.to_string();
    EXPECT_NE(s.message().find("stripe"), std::string::npos) << s.to_string();
    EXPECT_FALSE(exists(p.path));
  }
}

// ---- the fuzz test ----

uint64_t env_u64(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : def;
}

enum Damage { kHeaderFlip, kBodyFlip, kWordSmash, kZeroPage, kTruncate, kAppend, kDamageKinds };
const char* const kDamageName[] = {"header-flip", "body-flip", "word-smash",
                                   "zero-page",   "truncate",  "append"};

enum Outcome { kOpenedClean, kOpenedDamaged, kRefused, kOpenedEmpty, kCrash, kHang, kOutcomes };
const char* const kOutcomeName[] = {
    "ok", "ok, check found damage", "refused", "OPENED EMPTY", "CRASH", "HANG"};

// Child exit codes (anything else, e.g. a sanitizer's 1, is a crash).
constexpr int kExitClean = 10, kExitDamaged = 11, kExitEmpty = 12, kExitRefused = 40;  // + Code
const char* const kStageName[] = {"start", "inspect-open", "inspect-check", "inspect-iterate",
                                  "open",  "check",        "get",           "write",
                                  "close"};

// Damage applied to a copy of a pool. Offsets are drawn from pages the pool uses (non-zero in
// the original) so most damage hits live structures.
std::string apply_damage(Damage kind, std::mt19937_64& rng, std::vector<char>* b) {
  std::vector<uint64_t> pages;
  for (uint64_t pg = 1; pg * 4096 < b->size(); ++pg)
    for (uint64_t i = pg * 4096; i < std::min<uint64_t>(b->size(), (pg + 1) * 4096); i += 8)
      if (word_at(*b, i) != 0) {
        pages.push_back(pg);
        break;
      }
  auto live_off = [&] {
    uint64_t pg = pages.empty() ? 1 : pages[rng() % pages.size()];
    return pg * 4096 + rng() % 4096;
  };
  char what[128];
  switch (kind) {
    case kHeaderFlip: {
      // The mutable words (clean, root, published) or the immutable header — half of the
      // time with its checksum made to match, so the damage reaches the layout and the
      // scheme parameters recorded there.
      bool resum = rng() % 2;
      uint64_t off = rng() % 2 ? rng() % 248 : pm::kMutableHeaderOffset + rng() % 24;
      (*b)[off] ^= static_cast<char>(1u << (rng() % 8));
      if (resum && off < 248) {
        pm::PoolHeader h;
        std::memcpy(&h, b->data(), sizeof h);
        h.checksum = pm::header_checksum(h);
        std::memcpy(b->data(), &h, sizeof h);
      }
      std::snprintf(what, sizeof what, "flip a bit of byte %llu%s", (unsigned long long)off,
                    resum && off < 248 ? " (checksum fixed)" : "");
      break;
    }
    case kBodyFlip: {
      uint64_t off = live_off();
      (*b)[off] ^= static_cast<char>(1 + rng() % 255);
      std::snprintf(what, sizeof what, "flip byte %llu", (unsigned long long)off);
      break;
    }
    case kWordSmash: {
      uint64_t off = live_off() & ~uint64_t{7};
      uint64_t choices[] = {0,
                            ~uint64_t{0},
                            rng(),
                            rng() % b->size(),
                            word_at(*b, off) + 64,
                            uint64_t{1} << (rng() % 64)};
      uint64_t v = choices[rng() % 6];
      set_word(b, off, v);
      std::snprintf(what, sizeof what, "word at %llu := %#llx", (unsigned long long)off,
                    (unsigned long long)v);
      break;
    }
    case kZeroPage: {
      uint64_t pg = rng() % 4 == 0 ? 0 : (pages.empty() ? 1 : pages[rng() % pages.size()]);
      std::fill(b->begin() + pg * 4096, b->begin() + std::min<uint64_t>(b->size(), (pg + 1) * 4096),
                0);
      std::snprintf(what, sizeof what, "zero page %llu", (unsigned long long)pg);
      break;
    }
    case kTruncate: {
      uint64_t n = rng() % 2 ? rng() % b->size() : b->size() - 1 - rng() % 8192;
      b->resize(n);
      std::snprintf(what, sizeof what, "truncate to %llu", (unsigned long long)n);
      break;
    }
    default: {
      uint64_t n = 1 + rng() % 8192;
      for (uint64_t i = 0; i < n; ++i) b->push_back(static_cast<char>(rng()));
      std::snprintf(what, sizeof what, "append %llu bytes", (unsigned long long)n);
      break;
    }
  }
  return what;
}

// A dying child prints its stack (resolve with addr2line -e pmhash-tests), then dies of the
// same signal, so the parent still classifies it.
void print_stack_and_die(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

// What the tools and a user do with a damaged pool; reports its stage through `stage_fd`.
[[noreturn]] void use_damaged_pool(const std::string& path, const SchemeFormat& sf, int stage_fd,
                                   unsigned time_limit_s) {
  if (env_u64("PMHASH_FUZZ_STACKS", 0) != 0)
    for (int sig : {SIGALRM, SIGSEGV, SIGBUS, SIGABRT, SIGFPE}) signal(sig, print_stack_and_die);
  alarm(time_limit_s);
  auto stage = [&](uint8_t s) {
    if (write(stage_fd, &s, 1) != 1) _exit(99);
  };
  // pmhash info / check / export: read-only, any scheme.
  stage(1);
  {
    OpenHooks h;
    h.read_only = true;
    h.any_scheme = true;
    Options o;
    o.create = false;
    std::unique_ptr<Index> idx;
    if (open_index(path, o, h, &idx).ok()) {
      stage(2);
      std::string report;
      (void)idx->impl()->check(&report);
      (void)idx->stats();
      stage(3);
      uint64_t n = 0;
      idx->for_each(
          [](void* c, std::string_view, std::string_view) { ++*static_cast<uint64_t*>(c); }, &n);
    }
  }
  stage(4);
  std::unique_ptr<Index> idx;
  Status s = reopen(path, sf, false, &idx);
  if (!s.ok()) _exit(kExitRefused + static_cast<int>(s.code()));
  stage(5);
  bool clean = idx->check().ok();
  // Every pool here held 100 keys: one that opens with none and a clean check started over.
  if (clean && idx->size() == 0) _exit(kExitEmpty);
  stage(6);
  std::string v;
  for (int i = 0; i < 120; ++i) (void)idx->get(key_of(i, sf.format), &v);
  stage(7);
  bool fixed = sf.format == Format::kFixed;
  for (int i = 0; i < 40; ++i) {
    std::string k = key_of(1000 + i, sf.format);
    (void)idx->insert(k, make_value(k, 2, fixed));
    (void)idx->upsert(key_of(i, sf.format), make_value(k, 3, fixed));
    if (i % 3 == 0) (void)idx->remove(key_of(i + 50, sf.format));
  }
  stage(8);
  (void)idx->close();
  _exit(clean ? kExitClean : kExitDamaged);
}

// The pmhash tool on a damaged pool, as a user runs it: `info` then `check`, each in its own
// process with the time limit (an alarm survives exec). Read-only: the file must not change.
struct CliOutcome {
  std::string failure;  // empty: no crash, no hang, the file unchanged, info printed something
  int check_exit = 0;   // 0 clean, 1 problems found
};
#if defined(PMHASH_CLI)
bool run_cli(const char* cmd, const std::string& path, unsigned time_limit_s, int* exit_code,
             std::string* out, std::string* failure) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  pid_t c = fork();
  if (c == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    alarm(time_limit_s);
    execl(PMHASH_CLI, PMHASH_CLI, cmd, path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(c, &status, 0);
  if (WIFSIGNALED(status)) {
    *failure = std::string("pmhash ") + cmd + (WTERMSIG(status) == SIGALRM ? " HANG" : " CRASH") +
               " (" + strsignal(WTERMSIG(status)) + ")";
    return false;
  }
  *exit_code = WEXITSTATUS(status);
  if (*exit_code > 1) {  // 2 is a usage error, 127 no binary; a sanitizer's report exits 1
    *failure = std::string("pmhash ") + cmd + " exited " + std::to_string(*exit_code);
    return false;
  }
  return true;
}
#endif

CliOutcome use_cli(const std::string& path, const std::vector<char>& bytes, unsigned time_limit_s) {
  CliOutcome r;
#if defined(PMHASH_CLI)
  std::string out;
  int code = 0;
  if (!run_cli("info", path, time_limit_s, &code, &out, &r.failure)) return r;
  if (out.find("pool:") == std::string::npos && out.find(path) == std::string::npos) {
    r.failure = "pmhash info printed nothing about the pool: " + out;
    return r;
  }
  out.clear();
  if (!run_cli("check", path, time_limit_s, &r.check_exit, &out, &r.failure)) return r;
  if (read_file(path) != bytes) r.failure = "pmhash info or check changed the file";
#else
  (void)path, (void)bytes, (void)time_limit_s;
#endif
  return r;
}

TEST(DamageFuzz, DamagedPoolsNeverCrashHangOrChangeWhenRefused) {
  const uint64_t cases = env_u64("PMHASH_FUZZ_CASES", 360);
  const uint64_t base_seed = env_u64("PMHASH_FUZZ_SEED", 1);
  const uint64_t first = env_u64("PMHASH_FUZZ_FIRST", 0);
  const bool verbose = env_u64("PMHASH_FUZZ_VERBOSE", 0) != 0;
  const unsigned time_limit = static_cast<unsigned>(env_u64("PMHASH_FUZZ_TIME_LIMIT", 10));
#if defined(PMHASH_CLI)
  const uint64_t cli_every = env_u64("PMHASH_FUZZ_CLI", 7);  // coprime with 10 configs x 6 kinds
#else
  const uint64_t cli_every = 0;  // a build without the tool (PMHASH_BUILD_BENCH=OFF)
#endif
  uint64_t cli_runs = 0;
  std::vector<SchemeFormat> configs = all_scheme_formats();
  std::vector<std::vector<char>> originals;
  for (const SchemeFormat& sf : configs) {
    TempPool p("fuzz-orig");
    // Built in a child, so this process never holds liburcu threads across the forks below.
    pid_t c = fork();
    if (c == 0) _exit(make_pool(p.path, sf, 100).empty() ? 1 : 0);
    int st = 0;
    waitpid(c, &st, 0);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << param_name(sf);
    originals.push_back(read_file(p.path));
  }
  uint64_t counts[kDamageKinds][kOutcomes] = {};
  std::map<std::string, uint64_t> refusals;
  int failures = 0;
  TempPool p("fuzz");
  for (uint64_t i = first; i < first + cases; ++i) {
    const uint64_t seed = base_seed + i;
    const SchemeFormat& sf = configs[i % configs.size()];
    Damage kind = static_cast<Damage>((i / configs.size()) % kDamageKinds);
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull);
    std::vector<char> bytes = originals[i % configs.size()];
    std::string what = apply_damage(kind, rng, &bytes);
    for (uint64_t extra = rng() % 3; extra > 0 && kind != kTruncate && kind != kAppend; --extra)
      what += "; " + apply_damage(kind, rng, &bytes);
    if (rng() % 2 && bytes.size() >= pm::kHeaderRegion) {  // a crashed pool: recovery runs
      set_word(&bytes, pm::kMutableHeaderOffset, 0);
      what += "; not closed cleanly";
    }
    write_bytes(p.path, bytes);
    if (const char* keep = std::getenv("PMHASH_FUZZ_KEEP")) write_bytes(keep, bytes);
    const bool cli = cli_every != 0 && i % cli_every == 0;
    CliOutcome tool;
    if (cli) {
      tool = use_cli(p.path, bytes, time_limit);
      ++cli_runs;
    }
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t child = fork();
    if (child == 0) {
      close(fds[0]);
      use_damaged_pool(p.path, sf, fds[1], time_limit);
    }
    close(fds[1]);
    uint8_t stage = 0, s;
    while (read(fds[0], &s, 1) == 1) stage = s;
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    Outcome out = kCrash;
    std::string detail;
    if (WIFSIGNALED(status)) {
      out = WTERMSIG(status) == SIGALRM ? kHang : kCrash;
      detail = strsignal(WTERMSIG(status));
    } else if (WEXITSTATUS(status) == kExitClean) {
      out = kOpenedClean;
    } else if (WEXITSTATUS(status) == kExitDamaged) {
      out = kOpenedDamaged;
    } else if (WEXITSTATUS(status) == kExitEmpty) {
      out = kOpenedEmpty;
    } else if (WEXITSTATUS(status) >= kExitRefused && WEXITSTATUS(status) < kExitRefused + 20) {
      out = kRefused;
      std::string code = code_name(static_cast<Code>(WEXITSTATUS(status) - kExitRefused));
      refusals[code]++;
      detail = code;
    } else {
      detail = "exit " + std::to_string(WEXITSTATUS(status));
    }
    counts[kind][out]++;
    std::string where = "case " + std::to_string(i) + " seed " + std::to_string(seed) + " " +
                        param_name(sf) + " " + kDamageName[kind] + " (" + what + "): ";
    if (verbose)
      std::printf("%s%s %s at %s%s%s\n", where.c_str(), kOutcomeName[out], detail.c_str(),
                  kStageName[stage], cli ? "; pmhash check exit " : "",
                  cli ? std::to_string(tool.check_exit).c_str() : "");
    std::string again = "; reproduce: PMHASH_FUZZ_SEED=" + std::to_string(base_seed) +
                        " PMHASH_FUZZ_FIRST=" + std::to_string(i) + " PMHASH_FUZZ_CASES=1";
    if (!tool.failure.empty()) {
      ++failures;
      ADD_FAILURE() << where << tool.failure << again;
    } else if (cli && tool.check_exit == 0 && (out == kRefused || out == kOpenedDamaged)) {
      ++failures;
      ADD_FAILURE() << where << "pmhash check exited 0 on a pool the library found damaged ("
                    << kOutcomeName[out] << ")" << again;
    }
    if (out == kCrash || out == kHang || out == kOpenedEmpty) {
      ++failures;
      ADD_FAILURE() << where << kOutcomeName[out] << " (" << detail << ") at stage "
                    << kStageName[stage] << again;
    }
    if (out == kRefused && read_file(p.path) != bytes) {
      ++failures;
      ADD_FAILURE() << where << "the open was refused (" << detail << ") but the file changed";
    }
    if (failures > 20) break;
  }
  std::printf("damage fuzz: %llu cases from %llu, seed %llu, %llu with the pmhash tool\n%-12s",
              (unsigned long long)cases, (unsigned long long)first, (unsigned long long)base_seed,
              (unsigned long long)cli_runs, "");
  for (int o = 0; o < kOutcomes; ++o) std::printf(" | %s", kOutcomeName[o]);
  std::printf("\n");
  for (int k = 0; k < kDamageKinds; ++k) {
    std::printf("%-12s", kDamageName[k]);
    for (int o = 0; o < kOutcomes; ++o) std::printf(" | %llu", (unsigned long long)counts[k][o]);
    std::printf("\n");
  }
  std::printf("refusals by code:");
  for (auto& [code, n] : refusals) std::printf(" %s %llu;", code.c_str(), (unsigned long long)n);
  std::printf("\n");
}

}  // namespace
}  // namespace pmhash::testing

namespace pmhash::testing {
namespace {

// Issue 16 review: the word at ((key 5's offset & ~(align-1)) + rel) := value (a bucket's
// chain pointer); then check(), stats() and for_each() in a child with a time
// limit must neither crash nor hang, and a refused open must leave the file identical.
void smash_and_use(const SchemeFormat& sf, uint64_t align, uint64_t rel, uint64_t value) {
  TempPool p;
  std::vector<char> bytes = make_pool(p.path, sf, 100);
  ASSERT_FALSE(bytes.empty());
  std::string key = key_of(5, sf.format);  // stored inline in its bucket (fixed format)
  auto at = std::search(bytes.begin() + 4096, bytes.end(), key.begin(), key.end());
  ASSERT_NE(at, bytes.end());
  uint64_t off = (uint64_t(at - bytes.begin()) & ~(align - 1)) + rel;
  set_word(&bytes, off, value);
  write_bytes(p.path, bytes);
  pid_t c = fork();
  if (c == 0) {
    alarm(20);
    std::unique_ptr<Index> idx;
    Status s = reopen(p.path, sf, false, &idx);
    if (!s.ok()) _exit(read_file(p.path) == bytes ? 10 : 11);
    std::string report;
    bool ok = idx->impl()->check(&report);
    (void)idx->stats();
    uint64_t n = 0;
    idx->for_each([](void* v, std::string_view, std::string_view) { ++*static_cast<uint64_t*>(v); },
                  &n);
    _exit(ok ? 12 : 13);
  }
  int st = 0;
  ASSERT_EQ(waitpid(c, &st, 0), c);
  ASSERT_TRUE(WIFEXITED(st)) << "the child died of signal " << WTERMSIG(st);
  EXPECT_NE(WEXITSTATUS(st), 11) << "a refused open changed the file";
  EXPECT_NE(WEXITSTATUS(st), 12) << "check() found nothing wrong";
}

// PMEH: a bucket's lock bit (bit 31 of its first word) left set in a cleanly closed pool
// (damage: a lock is never held across opens). get(), remove() and insert() of the keys of
// that bucket must finish (a child with a time limit), not retry or spin forever.
TEST(Damage, PmehStaleLockBitInACleanPoolDoesNotHang) {
  SchemeFormat sf{"pmeh", Format::kFixed};
  TempPool p;
  {  // the default options (one zone per thread, opportunistic writes)
    Options o = small_options("pmeh", Format::kFixed);
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    for (int i = 0; i < 100; ++i) {
      std::string k = key_of(i, sf.format);
      ASSERT_TRUE(idx->insert(k, make_value(k, 1, true)).ok());
    }
  }
  std::vector<char> bytes = read_file(p.path);
  ASSERT_FALSE(bytes.empty());
  std::string key = key_of(5, sf.format);
  auto at = std::search(bytes.begin() + 4096, bytes.end(), key.begin(), key.end());
  ASSERT_NE(at, bytes.end());
  uint64_t bucket = uint64_t(at - bytes.begin()) & ~uint64_t{255};
  set_word(&bytes, bucket, word_at(bytes, bucket) | (uint64_t{1} << 31));
  write_bytes(p.path, bytes);
  pid_t c = fork();
  if (c == 0) {
    alarm(20);
    std::unique_ptr<Index> idx;
    Options o = small_options("pmeh", Format::kFixed);
    o.create = false;
    if (!Index::open(p.path, o, &idx).ok()) _exit(10);
    std::string v;
    bool fixed = sf.format == Format::kFixed;
    (void)idx->get(key, &v);
    (void)idx->remove(key);
    (void)idx->insert(key, make_value(key, 2, fixed));
    _exit(idx->get(key, &v).ok() ? 0 : 12);
  }
  int st = 0;
  ASSERT_EQ(waitpid(c, &st, 0), c);
  ASSERT_TRUE(WIFEXITED(st)) << "the child died of signal " << WTERMSIG(st) << " (SIGALRM: a hang)";
  EXPECT_NE(WEXITSTATUS(st), 12) << "the key is not readable after remove and insert";
}

// PMEH reads no segment at open (instant recovery; docs/schemes/pmeh.md, "Trust"). A zeroed
// segment header (crash version 0, and metadata 0, which reads as an empty depth-0 segment
// covering every key) opens; the first access to the segment is kCorrupted naming the crash
// version and writes nothing, every access after it too, and check() reports it. Without the
// first-access check, the header would be taken as recovered-to-be and its keys lost.
TEST(Damage, PmehZeroedSegmentHeaderIsCorruptedAtItsFirstAccess) {
  SchemeFormat sf{"pmeh", Format::kFixed};
  TempPool p;
  std::vector<char> bytes = make_pool(p.path, sf, 100);
  ASSERT_FALSE(bytes.empty());
  const auto& r = at<pmeh::Root>(bytes, word_at(bytes, kRootWordOffset));
  uint64_t d = r.dirs[r.latest_dir % pmeh::kMaxDirs];
  const std::string key = key_of(5, sf.format);
  uint64_t t = pmeh::entry_of(common::Items::hash(key), at<pmeh::Directory>(bytes, d).depth);
  uint64_t so = word_at(bytes, d + sizeof(pmeh::Directory) + 8 * t);
  ASSERT_NE(so, 0u);
  std::memset(bytes.data() + so, 0, sizeof(pmeh::SegmentHeader));
  write_bytes(p.path, bytes);
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(reopen(p.path, sf, false, &idx).ok());
  std::string v;
  for (int round = 0; round < 2; ++round) {
    Status s = idx->get(key, &v);
    EXPECT_EQ(s.code(), Code::kCorrupted) << s.to_string();
    EXPECT_NE(s.message().find("crash version 0"), std::string::npos) << s.to_string();
    EXPECT_EQ(idx->remove(key).code(), Code::kCorrupted);
    EXPECT_EQ(idx->upsert(key, make_value(key, 2, true)).code(), Code::kCorrupted);
  }
  const auto* sh = idx->impl()->pool->ptr<pmeh::SegmentHeader>(so);
  EXPECT_EQ(sh->lock_gen, 0u) << "the damaged segment was written";
  EXPECT_EQ(sh->meta, 0u);
  std::string report;
  EXPECT_FALSE(idx->impl()->check(&report));
  EXPECT_NE(report.find("crash version 0"), std::string::npos) << report;
}

// LineHT checks every shard word before open (validate(); open itself no longer repeats
// the check): a word that names no bucket array is refused, naming the shard, after a clean
// close and after a crash, in both formats, and the file is unchanged. (A check at the
// shard's first use instead, tried in session 14, was unsound: a word naming a block that
// is free at open passes once a later resize or item takes that block.)
// A two-shard LineHT pool of `sf` with shard 1's directory word replaced by what `damage`
// returns (given the pool's bytes and root), closed cleanly or crashed: the open is refused
// as corrupted with a message containing `why`, and the file is unchanged.
template <class Damage>
void expect_lineht_shard1_refused(const SchemeFormat& sf, bool crashed, Damage damage,
                                  const std::string& why) {
  TempPool p;
  std::vector<char> bytes = make_pool(p.path, sf, 6);
  ASSERT_FALSE(bytes.empty());
  const auto& r = at<lineht::Root>(bytes, word_at(bytes, kRootWordOffset));
  ASSERT_EQ(r.nshards, 2u);
  set_word(&bytes, r.directory + 8, damage(bytes, r));
  if (crashed) set_word(&bytes, pm::kMutableHeaderOffset, 0);
  write_bytes(p.path, bytes);
  std::unique_ptr<Index> idx;
  Status s = reopen(p.path, sf, false, &idx);
  EXPECT_EQ(s.code(), Code::kCorrupted) << s.to_string();
  EXPECT_NE(s.message().find(why), std::string::npos) << s.to_string();
  EXPECT_TRUE(read_file(p.path) == bytes) << "a refused open changed the file";
}

TEST(Damage, LineHTShardPointingNowhereIsRefusedAtOpen) {
  for (Format f : {Format::kFixed, Format::kVariable})
    for (bool crashed : {false, true}) {
      SchemeFormat sf{"lineht", f};
      SCOPED_TRACE(param_name(sf) + (crashed ? ", after a crash" : ", after a clean close"));
      expect_lineht_shard1_refused(
          sf, crashed,
          [](const std::vector<char>&, const lineht::Root&) {
            return lineht::pack(4, 64);  // 4 buckets at offset 64: no block
          },
          "shard 1 points nowhere");
    }
}

// A shard word damaged into another live block's offset: every word names an allocated
// block of its size, so only a check that no two objects share a block sees it. Shard 1
// made to name shard 0's array, and then the directory's own block: both refused, before
// and after a crash (whose sweep would otherwise free shard 1's real array), the file
// unchanged.
TEST(Damage, LineHTShardNamingAnotherLiveBlockIsRefusedAtOpen) {
  for (Format f : {Format::kFixed, Format::kVariable})
    for (bool crashed : {false, true})
      for (bool directory : {false, true}) {
        SchemeFormat sf{"lineht", f};
        SCOPED_TRACE(param_name(sf) + (crashed ? ", after a crash" : ", after a clean close") +
                     (directory ? ", the directory's block" : ", shard 0's block"));
        expect_lineht_shard1_refused(
            sf, crashed,
            [directory](const std::vector<char>& bytes, const lineht::Root& r) {
              return directory ? lineht::pack(1, r.directory) : word_at(bytes, r.directory);
            },
            "shard 1 names the block");
      }
}

TEST(Damage, SmartHTBadChainPointerIsReportedNotFollowed) {
  smash_and_use({"smartht", Format::kFixed}, 64, 56, 0xffffffffffffffffull);
}

TEST(Damage, WophiBadChainPointerIsRefusedAtOpen) {
  smash_and_use({"wophi", Format::kFixed}, 128, 8, 0x4141414141414100ull);
}

}  // namespace
}  // namespace pmhash::testing
