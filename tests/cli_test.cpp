// The pmhash command-line tool, run as a separate process.
#if defined(PMHASH_CLI)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "index_impl.hpp"
#include "test_util.hpp"

namespace pmhash::testing {
namespace {

struct CliRun {
  int exit_code;  // -1 when killed by a signal
  std::string out;
};

CliRun run(const std::string& args) {
  std::string cmd = std::string(PMHASH_CLI) + " " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  CliRun r{0, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.out.append(buf, n);
  int status = pclose(f);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::map<std::string, std::string> contents(const std::string& path, const Options& o) {
  std::unique_ptr<Index> idx;
  Status s = Index::open(path, o, &idx);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::map<std::string, std::string> m;
  if (!s.ok()) return m;  // (a null idx crashed the test, leaving its files)
  idx->for_each(
      [](void* c, std::string_view k, std::string_view v) {
        (*static_cast<std::map<std::string, std::string>*>(c))[std::string(k)] = std::string(v);
      },
      &m);
  return m;
}

void fill(const std::string& path, const Options& o, int n, bool crash) {
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(path, o, &idx).ok());
  bool fixed = o.format == Format::kFixed;
  for (int i = 0; i < n; ++i)
    ASSERT_TRUE(idx->insert(make_key(i, fixed), make_value(make_key(i, fixed), 1, fixed)).ok());
  if (crash) idx->impl()->closed = true;
}

TEST(Cli, InfoAndCheckLeaveTheFileUnchanged) {
  for (bool crash : {false, true}) {
    TempPool p;
    Options o = small_options("smartht", Format::kVariable);
    fill(p.path, o, 500, crash);
    std::vector<char> before = read_file(p.path);
    CliRun r = run("info " + p.path);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("smartht"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("variable"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("keys:         500"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(crash ? "crashed" : "clean"), std::string::npos) << r.out;
    r = run("check " + p.path);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("clean"), std::string::npos) << r.out;
    EXPECT_EQ(read_file(p.path), before) << "info/check changed the file";
  }
}

TEST(Cli, CheckReportsDamage) {
  TempPool p;
  Options o = small_options("turbohash", Format::kFixed);
  fill(p.path, o, 300, false);
  {  // free a reachable block without unlinking it: the leak check must object
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
    uint64_t victim = 0;
    idx->impl()->alloc->for_each_allocated([&](uint64_t off, uint64_t) { victim = off; });
    pm::Tx tx(*idx->impl()->alloc);
    tx.free(victim);
    tx.commit();
  }
  CliRun r = run("check " + p.path);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  // Found by the leak check, or already by the scheme's open-time validation.
  EXPECT_TRUE(r.out.find("not allocated") != std::string::npos ||
              r.out.find("corrupted") != std::string::npos)
      << r.out;
}

// One mode detection: a read-only tool open used to say "pm" under /dev/shm.
TEST(Cli, InfoReportsTheModeTheLibraryUses) {
  TempPool p;
  Options o = small_options("turbohash", Format::kFixed);
  o.mode = Mode::kAuto;
  fill(p.path, o, 10, false);
  std::unique_ptr<Index> idx;
  ASSERT_TRUE(Index::open(p.path, o, &idx).ok());
  std::string lib = mode_name(idx->stats().mode);
  idx.reset();
  CliRun r = run("info " + p.path);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("mode:         " + lib + "\n"), std::string::npos) << lib << "\n" << r.out;
}

// A damaged pool: info prints the header and why the index cannot be opened; check lists
// the problems; both exit 1, neither crashes, the file is unchanged.
TEST(Cli, DamagedPoolGetsAReportNotACrash) {
  TempPool p;
  Options o = small_options("pmeh", Format::kVariable);
  fill(p.path, o, 50, false);
  std::vector<char> bytes = read_file(p.path);
  std::fill(bytes.begin() + pm::kMutableHeaderOffset + 8,
            bytes.begin() + pm::kMutableHeaderOffset + 16, 0);  // the root word
  write_bytes(p.path, bytes);
  CliRun r = run("info " + p.path);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("scheme:       pmeh"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot be opened: corrupted"), std::string::npos) << r.out;
  r = run("check " + p.path);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("PROBLEMS FOUND"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("root word"), std::string::npos) << r.out;
  EXPECT_TRUE(read_file(p.path) == bytes);
  r = run("import /dev/null " + p.path + "x --scheme wophi --pool-size lots");
  EXPECT_EQ(r.exit_code, 1) << r.out;
}

TEST(Cli, BadFilesGetAMessageNotACrash) {
  TempPool foreign;
  write_bytes(foreign.path, std::vector<char>(10000, 'x'));
  TempPool good;
  fill(good.path, small_options("wophi", Format::kFixed), 10, false);
  std::vector<char> bytes = read_file(good.path);
  TempPool cut;
  write_bytes(cut.path, std::vector<char>(bytes.begin(), bytes.begin() + bytes.size() / 3));
  TempPool dump("dump");
  for (const std::string& cmd :
       {std::string("info "), std::string("check "), std::string("export ")}) {
    std::string tail = cmd == "export " ? " " + dump.path : "";
    CliRun r = run(cmd + foreign.path + tail);
    EXPECT_EQ(r.exit_code, 1) << cmd << r.out;
    EXPECT_NE(r.out.find("not a pmhash pool"), std::string::npos) << r.out;
    r = run(cmd + cut.path + tail);
    EXPECT_EQ(r.exit_code, 1) << cmd << r.out;
    EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
    r = run(cmd + "/dev/shm/pmhash-no-such-file" + tail);
    EXPECT_EQ(r.exit_code, 1) << cmd << r.out;
  }
  EXPECT_EQ(read_file(foreign.path), std::vector<char>(10000, 'x'));
  EXPECT_EQ(run("frobnicate").exit_code, 2);
  EXPECT_EQ(run("bench --help").exit_code, 0);
}

// A FIFO is not a pool: info and check say so instead of waiting for a writer forever
// (a bounded `timeout` turns a hang into exit 124), and the library refuses it, also with
// create, writing nothing into it.
TEST(Cli, AFifoIsRefusedNotWaitedOn) {
  std::string fifo = temp_pool_path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const char* cmd : {"info ", "check "}) {
    std::string line = "timeout 60 " + std::string(PMHASH_CLI) + " " + cmd + fifo + " 2>&1";
    FILE* f = popen(line.c_str(), "r");
    std::string out;
    char buf[512];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    int status = pclose(f);
    ASSERT_TRUE(WIFEXITED(status)) << cmd;
    EXPECT_EQ(WEXITSTATUS(status), 1) << cmd << out;
    EXPECT_NE(out.find("not a regular file"), std::string::npos) << cmd << out;
  }
  for (bool create : {false, true}) {
    Options o = small_options("turbohash", Format::kFixed);
    o.create = create;
    std::unique_ptr<Index> idx;
    Status s = Index::open(fifo, o, &idx);
    EXPECT_EQ(s.code(), Code::kNotAPool) << s.to_string();
  }
  struct stat st {};
  ASSERT_EQ(stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  unlink(fifo.c_str());
}

TEST(Cli, ExportImportMovesDataBetweenSchemes) {
  TempPool src, dst, dump("dump");
  Options o = small_options("turbohash", Format::kVariable);
  fill(src.path, o, 2000, true);  // exported from a crashed pool: recovery runs privately
  CliRun r = run("export " + src.path + " " + dump.path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run("import " + dump.path + " " + dst.path + " --scheme wophi --format variable");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  Options w = small_options("wophi", Format::kVariable);
  EXPECT_EQ(contents(dst.path, w), contents(src.path, o));
  EXPECT_EQ(contents(dst.path, w).size(), 2000u);
  // A damaged dump is refused before any pool is created.
  std::vector<char> d = read_file(dump.path);
  TempPool broken("dump"), target;
  write_bytes(broken.path, std::vector<char>(d.begin(), d.end() - 20));
  r = run("import " + broken.path + " " + target.path + " --scheme smartht --format variable");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("not a valid pmhash dump"), std::string::npos) << r.out;
  EXPECT_NE(access(target.path.c_str(), F_OK), 0);
  r = run("import " + dump.path + " " + dst.path + " --scheme smartht");  // exists
  EXPECT_EQ(r.exit_code, 1) << r.out;
}

// --help anywhere (but after `bench`, which has its own) prints the usage and succeeds; it
// was read as a pool path ("pool file '--help' does not exist").
TEST(Cli, HelpPrintsTheUsage) {
  for (const char* args : {"--help", "-h", "info --help", "export --help x"}) {
    SCOPED_TRACE(args);
    CliRun r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("usage: pmhash"), std::string::npos) << r.out;
  }
}

// The bench's options take whole numbers in range: a word aborted the process (an uncaught
// std::invalid_argument), "-1" wrapped to 2^64 - 1, 0 threads or an empty list ran nothing,
// a value size of 2^64 - 1 aborted (std::length_error), the fixed format ignored sizes, and
// variable keys too short to be distinct ran (16 keys of one hex digit: most inserts failed).
TEST(Cli, BenchRefusesBadNumbersWithAMessage) {
  for (const char* args :
       {"--keys abc", "--keys -1", "--keys 10x", "--threads 0", "--threads 2,x", "--repeat many",
        "--seed ''", "--mode nvm", "--threads ''", "--threads 1,,2", "--schemes ''",
        "--variants pm,", "--schemes lineht,hdnh --params filter=off", "--key-size 4",
        "--value-size 70000", "--delay-ns 4294967295", "--format variable --key-size 5000",
        "--format variable --key-size 1", "--format variable --key-size 7"}) {
    SCOPED_TRACE(args);
    CliRun r = run(std::string("bench --pool-dir /nonexistent ") + args);
    EXPECT_EQ(r.exit_code, 2) << r.out;
    std::string option = std::string(args).substr(0, std::string(args).find(' '));
    if (option == "--format") option = "--key-size";
    if (std::string(args).find("filter=off") != std::string::npos)
      option = "hdnh: unknown parameter";
    if (option == "--key-size" && std::string(args) == "--key-size 4") option = "fixed format";
    EXPECT_NE(r.out.find(option), std::string::npos) << r.out;
  }
}

// Export never writes over a pool: not the one it exports (a truncate under its own mapping
// killed it with SIGBUS and left an empty file), not through a link, and not another pool
// (another process may have it mapped). Each refusal leaves both files as they were.
TEST(Cli, ExportNeverWritesOverAPool) {
  TempPool src, other, link("link");
  Options o = small_options("lineht", Format::kFixed);
  fill(src.path, o, 100, false);
  fill(other.path, o, 10, false);
  ASSERT_EQ(symlink(src.path.c_str(), link.path.c_str()), 0);
  std::vector<char> src_bytes = read_file(src.path), other_bytes = read_file(other.path);
  for (const std::string& target : {src.path, link.path, other.path}) {
    SCOPED_TRACE(target);
    CliRun r = run("export " + src.path + " " + target);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("pool"), std::string::npos) << r.out;
    EXPECT_TRUE(read_file(src.path) == src_bytes);
    EXPECT_TRUE(read_file(other.path) == other_bytes);
  }
}

// Export renames its dump into place: over anything but a regular file that would replace
// it (as root, `export POOL /dev/null` turned /dev/null into a file; a FIFO blocked the
// export for good). Those are refused and left as they were; a link to a regular file is
// written through, the link kept.
TEST(Cli, ExportWritesOnlyRegularFilesAndThroughLinks) {
  TempPool src, fifo("fifo"), dir("dir"), dangling("dangling"), file("file"), link("link");
  fill(src.path, small_options("lineht", Format::kFixed), 10, false);
  ASSERT_EQ(mkfifo(fifo.path.c_str(), 0600), 0);
  ASSERT_EQ(mkdir(dir.path.c_str(), 0700), 0);
  ASSERT_EQ(symlink((dangling.path + ".nothing").c_str(), dangling.path.c_str()), 0);
  for (const std::string& target : {fifo.path, dir.path, dangling.path}) {
    SCOPED_TRACE(target);
    struct stat before {};
    ASSERT_EQ(lstat(target.c_str(), &before), 0);
    CliRun r = run("export " + src.path + " " + target);  // a FIFO blocked here
    EXPECT_EQ(r.exit_code, 1) << r.out;
    struct stat after {};
    ASSERT_EQ(lstat(target.c_str(), &after), 0);
    EXPECT_EQ(after.st_mode, before.st_mode) << "replaced";
    EXPECT_EQ(after.st_ino, before.st_ino) << "replaced";
  }
  rmdir(dir.path.c_str());
  { std::ofstream(file.path) << "old"; }
  ASSERT_EQ(symlink(file.path.c_str(), link.path.c_str()), 0);
  CliRun r = run("export " + src.path + " " + link.path);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  struct stat l {};
  ASSERT_EQ(lstat(link.path.c_str(), &l), 0);
  EXPECT_TRUE(S_ISLNK(l.st_mode)) << "the link was replaced";
  std::vector<char> dumped = read_file(file.path);
  EXPECT_TRUE(dumped.size() > 8 && std::memcmp(dumped.data(), "PMHXPORT", 8) == 0)
      << "the dump did not reach the file the link names";
}

std::vector<char> dump_of(const std::vector<std::pair<std::string, std::string>>& items,
                          uint32_t format = 1) {
  std::string d("PMHXPORT", 8);
  auto put32 = [&](uint32_t v) { d.append(reinterpret_cast<const char*>(&v), 4); };
  put32(1);
  put32(format);
  for (auto& [k, v] : items) {
    put32(static_cast<uint32_t>(k.size()));
    put32(static_cast<uint32_t>(v.size()));
    d += k + v;
  }
  put32(0xFFFFFFFF);
  put32(0);
  uint64_t n = items.size();
  d.append(reinterpret_cast<const char*>(&n), 8);
  return {d.begin(), d.end()};
}

// Import checks every item against the pool it will create before creating it, and leaves
// no partial pool when an insert fails (it used to pick the format from the first item and
// stop half way, leaving a pool with part of the dump).
TEST(Cli, ImportStoresTheWholeDumpOrLeavesNoPool) {
  std::vector<std::pair<std::string, std::string>> items;
  for (int i = 0; i < 50; ++i) items.emplace_back(make_key(i, true), make_key(i, true));
  items.emplace_back("x", "y");  // not 8/8, and last
  TempPool dump("dump"), target;
  write_bytes(dump.path, dump_of(items));
  CliRun r = run("import " + dump.path + " " + target.path + " --scheme turbohash --format fixed");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(access(target.path.c_str(), F_OK), 0) << "a refused import left a pool";
  r = run("import " + dump.path + " " + target.path + " --scheme turbohash");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(contents(target.path, small_options("turbohash", Format::kVariable)).size(), 51u);

  auto refused = [](const std::vector<char>& bytes, const std::string& why) {
    SCOPED_TRACE(why);
    TempPool bad("dump"), none;
    write_bytes(bad.path, bytes);
    CliRun r =
        run("import " + bad.path + " " + none.path + " --scheme smartht --pool-size 4194304");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find(why), std::string::npos) << r.out;
    EXPECT_NE(access(none.path.c_str(), F_OK), 0) << "a refused import left a pool";
  };
  refused(dump_of({{"a", "1"}, {"b", "2"}, {"a", "3"}}), "appears twice");
  refused(dump_of({{"", "1"}}), "key of 0 bytes");
  refused(dump_of({{"a", std::string(70000, 'v')}}), "value of 70000 bytes");
  refused(dump_of({{"a", "1"}}, 7), "unknown pool format 7");
  std::vector<std::pair<std::string, std::string>> big;
  for (int i = 0; i < 100; ++i) big.emplace_back("k" + std::to_string(i), std::string(60000, 'v'));
  refused(dump_of(big), "no pool left");  // 6 MB of values into a 4 MiB pool
}

// Without --format, import keeps the format the dump records: an emptied variable pool, or
// one holding only 8-byte keys and values, came back fixed (the format was inferred from the
// items). A dump recording fixed whose items are not all 8/8 (not one export writes) is
// refused, naming --format variable.
TEST(Cli, ImportKeepsTheFormatTheDumpRecords) {
  for (int n : {0, 20}) {
    SCOPED_TRACE(n);
    TempPool src, dst, dump("dump");
    Options o = small_options("lineht", Format::kVariable);
    {
      std::unique_ptr<Index> idx;
      ASSERT_TRUE(Index::open(src.path, o, &idx).ok());
      ASSERT_TRUE(idx->insert("a longer key", "a longer value").ok());
      ASSERT_TRUE(idx->remove("a longer key").ok());  // emptied of its variable items
      for (int i = 0; i < n; ++i) ASSERT_TRUE(idx->insert(make_key(i, true), "8 bytes!").ok());
    }
    CliRun r = run("export " + src.path + " " + dump.path);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    r = run("import " + dump.path + " " + dst.path + " --scheme lineht");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("variable"), std::string::npos) << r.out;
    EXPECT_EQ(contents(dst.path, o), contents(src.path, o));
  }
  TempPool dump("dump"), none;
  write_bytes(dump.path, dump_of({{"a", "1"}}, 0));
  CliRun r = run("import " + dump.path + " " + none.path + " --scheme lineht");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("--format variable"), std::string::npos) << r.out;
  EXPECT_NE(access(none.path.c_str(), F_OK), 0) << "a refused import left a pool";
}

// `pmhash import DUMP POOL ...` as a child process (output discarded) that stops itself
// (SIGSTOP, the CLI's test hook PMHASH_TEST_IMPORT_STOP_AFTER) after `stop_after` inserts;
// its pid.
pid_t spawn_import(const std::string& dump, const std::string& pool, size_t stop_after,
                   int ignored = 0) {
  std::string stop = std::to_string(stop_after);
  pid_t pid = fork();
  if (pid == 0) {
    if (ignored != 0) signal(ignored, SIG_IGN);  // as nohup ignores SIGHUP
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    setenv("PMHASH_TEST_IMPORT_STOP_AFTER", stop.c_str(), 1);
    execl(PMHASH_CLI, "pmhash", "import", dump.c_str(), pool.c_str(), "--scheme", "lineht",
          "--format", "fixed", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Signals an import with `sig` while it is stopped midway (after half the dump's items):
// no sleep, no race. It must end by that signal.
void kill_import_midway(const std::string& dump, const std::string& target, size_t items, int sig) {
  pid_t pid = spawn_import(dump, target, items / 2);
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status)) << "the import did not reach its stop point";
  std::string tmp = target + ".importing." + std::to_string(pid);
  EXPECT_EQ(access(tmp.c_str(), F_OK), 0) << "midway, the pool is built in " << tmp;
  EXPECT_NE(access(target.c_str(), F_OK), 0) << "midway, an import left a pool at its target";
  kill(pid, sig);
  if (sig != SIGKILL) kill(pid, SIGCONT);  // a stopped process takes its other signals later
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
}

// The files beside `target` whose names start with it and a dot.
std::vector<std::string> left_beside(const std::string& target) {
  std::vector<std::string> left;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(target).parent_path()))
    if (e.path().string().starts_with(target + ".")) left.push_back(e.path().string());
  return left;
}

// A killed import leaves no pool at its target (it left a partial pool that opened and
// checked clean): the pool is built in POOL.importing.PID and renamed into place when
// complete. SIGKILL leaves that file behind; SIGINT, SIGTERM, SIGHUP and SIGPIPE remove it.
// An existing target is refused and left as it was.
TEST(Cli, AKilledImportLeavesNoPoolAtItsTarget) {
  const size_t n = 2000;
  std::vector<std::pair<std::string, std::string>> items;
  for (size_t i = 0; i < n; ++i) items.emplace_back(make_key(i, true), make_key(i, true));
  TempPool dump("dump"), target;
  write_bytes(dump.path, dump_of(items, 0));
  kill_import_midway(dump.path, target.path, n, SIGKILL);
  EXPECT_NE(access(target.path.c_str(), F_OK), 0) << "a killed import left a pool";
  EXPECT_NE(run("check " + target.path).exit_code, 0);
  std::vector<std::string> left = left_beside(target.path);
  ASSERT_EQ(left.size(), 1u) << "SIGKILL leaves the temporary pool, named POOL.importing.PID";
  EXPECT_NE(left[0].find(".importing."), std::string::npos) << left[0];
  unlink(left[0].c_str());

  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    SCOPED_TRACE(strsignal(sig));
    kill_import_midway(dump.path, target.path, n, sig);
    EXPECT_NE(access(target.path.c_str(), F_OK), 0) << "a killed import left a pool";
    for (const std::string& f : left_beside(target.path)) {
      ADD_FAILURE() << f << " left";
      unlink(f.c_str());
    }
  }

  // A signal the import was started ignoring stays ignored (nohup): the import completes.
  pid_t pid = spawn_import(dump.path, target.path, n / 2, SIGHUP);
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status));
  kill(pid, SIGHUP);
  kill(pid, SIGCONT);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(run("check " + target.path).exit_code, 0);
  unlink(target.path.c_str());

  fill(target.path, small_options("lineht", Format::kFixed), 10, false);
  std::vector<char> before = read_file(target.path);
  CliRun r = run("import " + dump.path + " " + target.path + " --scheme lineht");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("exists"), std::string::npos) << r.out;
  EXPECT_TRUE(read_file(target.path) == before) << "an import changed an existing pool";
}

}  // namespace
}  // namespace pmhash::testing
#endif
