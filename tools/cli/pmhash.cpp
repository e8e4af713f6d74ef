// pmhash — inspect, check, dump and load pool files; run the benchmark.
//
//   pmhash info POOL          what the pool holds (the file is not changed)
//   pmhash check POOL         structural + leak check (the file is not changed); exit 0 if clean
//   pmhash export POOL FILE   every item to a portable dump (docs/cli.md)
//   pmhash import FILE POOL --scheme S [--format fixed|variable] [--params k=v,..]
//                             [--pool-size BYTES]
//   pmhash bench ...          the benchmark driver (pmhash-bench)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "index_impl.hpp"

namespace pmhash::bench {
int bench_main(int argc, char** argv);
}

using namespace pmhash;

namespace {

constexpr char kDumpMagic[8] = {'P', 'M', 'H', 'X', 'P', 'O', 'R', 'T'};
constexpr uint32_t kDumpVersion = 1;
constexpr uint32_t kEnd = 0xFFFFFFFF;

int usage(FILE* to = stderr) {
  std::fprintf(to,
               "usage: pmhash info POOL | check POOL | export POOL FILE |\n"
               "       import FILE POOL --scheme S [--format fixed|variable] [--params k=v,..]"
               " [--pool-size BYTES] | bench ...\n");
  return to == stdout ? 0 : 2;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "pmhash: %s\n", what.c_str());
  return 1;
}

// Opens whatever scheme and format the pool holds, without changing the file. `report`
// collects every problem validation finds.
Status open_read_only(const std::string& path, std::unique_ptr<Index>* out,
                      std::string* report = nullptr) {
  OpenHooks h;
  h.read_only = true;
  h.any_scheme = true;
  h.report = report;
  Options o;
  o.create = false;
  return open_index(path, o, h, out);
}

std::string uuid_text(const uint8_t* u) {
  char uuid[40];
  std::snprintf(uuid, sizeof uuid,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
                u[15]);
  return uuid;
}

// What the header says, read with pread (no mapping): printed even when the index cannot be
// opened. False when there is no header to speak of.
bool print_header(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO: no waiting
  if (fd < 0) return false;
  pm::PoolHeader h{};
  struct stat st {};
  ssize_t got = pread(fd, &h, sizeof h, 0);
  bool have = fstat(fd, &st) == 0 && got == static_cast<ssize_t>(sizeof h) &&
              std::memcmp(h.magic, pm::kPoolMagic, 8) == 0;
  ::close(fd);
  if (!have) return false;
  Status hs = pm::validate_header(h, static_cast<uint64_t>(st.st_size), path);
  std::printf("pool:         %s\n", path.c_str());
  if (!hs.ok())
    std::printf("header:       DAMAGED (%s); the fields below are unverified\n",
                hs.to_string().c_str());
  std::printf("uuid:         %s\n", uuid_text(h.uuid).c_str());
  std::printf("scheme:       %s (layout %s)\n",
              std::string(h.scheme, strnlen(h.scheme, 16)).c_str(),
              std::string(h.params, strnlen(h.params, sizeof h.params)).c_str());
  std::printf("format:       %s\n",
              h.key_format <= 1 ? format_name(static_cast<Format>(h.key_format)) : "? (damaged)");
  std::printf("pool bytes:   %llu (file %llu)\n", static_cast<unsigned long long>(h.pool_size),
              static_cast<unsigned long long>(st.st_size));
  return true;
}

int info(const std::string& path) {
  std::unique_ptr<Index> idx;
  Status s = open_read_only(path, &idx);
  if (!s.ok()) {
    if (!print_header(path)) return fail(s.to_string());
    std::printf("index:        cannot be opened: %s\n", s.to_string().c_str());
    return 1;
  }
  print_header(path);
  Stats st = idx->stats();
  std::printf("mode:         %s\n", mode_name(st.mode));
  std::printf("allocated:    %llu bytes\n", static_cast<unsigned long long>(st.pm_bytes));
  std::printf("keys:         %llu\n", static_cast<unsigned long long>(st.size));
  std::printf("load factor:  %.3f\n", st.load_factor);
  std::printf("last close:   %s\n",
              st.recovered_from_crash ? "crashed (the next open runs recovery)" : "clean");
  return 0;
}

// Every problem found, one per line; exit 1 on any damage.
int check(const std::string& path) {
  std::unique_ptr<Index> idx;
  std::string report;
  Status s = open_read_only(path, &idx, &report);
  if (!s.ok()) {
    if (s.code() != Code::kCorrupted) return fail(s.to_string());
    std::printf("%s: PROBLEMS FOUND (the index cannot be opened: corrupted)\n%s", path.c_str(),
                report.empty() ? (s.message() + "\n").c_str() : report.c_str());
    return 1;
  }
  bool ok = idx->impl()->check(&report);
  std::printf("%s: %s, %llu keys: %s\n", path.c_str(), idx->stats().scheme.c_str(),
              static_cast<unsigned long long>(idx->size()), ok ? "clean" : "PROBLEMS FOUND");
  if (!ok) std::printf("%s", report.c_str());
  return ok ? 0 : 1;
}

bool parse_u64(const std::string& v, uint64_t* out) {
  if (v.empty() || v[0] == '-') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *out = x;
  return true;
}

void put32(std::ostream& o, uint32_t v) {
  o.write(reinterpret_cast<const char*>(&v), 4);
}

// Why export must not write to `file`, or "" if it may, with *target the path the dump is
// renamed to: `file`, or the file a symbolic link names (the link stays). Refused: anything
// but a regular file (a device such as /dev/null, a FIFO, a directory: the rename would
// replace it, and opening a FIFO to look into it would block), a dangling link, the pool
// itself (also through a link), and any pmhash pool (another process may have it mapped).
std::string export_target_refusal(const std::string& pool, const std::string& file,
                                  std::string* target) {
  *target = file;
  struct stat ls {};
  if (lstat(file.c_str(), &ls) != 0) return "";  // a new file
  if (S_ISLNK(ls.st_mode)) {
    char* real = realpath(file.c_str(), nullptr);
    if (real == nullptr) return "'" + file + "' is a symbolic link to nothing";
    *target = real;
    std::free(real);
  }
  struct stat ps {
  }, fs{};
  if (stat(target->c_str(), &fs) != 0) return "";
  if (!S_ISREG(fs.st_mode))
    return "'" + file +
           "' is not a regular file (a device, FIFO or directory): export writes a "
           "dump file";
  if (stat(pool.c_str(), &ps) == 0 && ps.st_dev == fs.st_dev && ps.st_ino == fs.st_ino)
    return "'" + file + "' is the pool being exported";
  char head[8] = {};
  std::ifstream in(*target, std::ios::binary);
  if (in.read(head, 8) &&
      (std::memcmp(head, pm::kPoolMagic, 8) == 0 || std::memcmp(head, pm::kCreatingMagic, 8) == 0))
    return "'" + file + "' is a pmhash pool: export writes dumps, never over a pool";
  return "";
}

void put_record(std::ostream& o, std::string_view k, std::string_view v) {
  put32(o, static_cast<uint32_t>(k.size()));
  put32(o, static_cast<uint32_t>(v.size()));
  o.write(k.data(), static_cast<std::streamsize>(k.size()));
  o.write(v.data(), static_cast<std::streamsize>(v.size()));
}

// The dump is written to FILE.tmp.PID and renamed over FILE once complete: a failed export
// leaves FILE as it was.
int export_pool(const std::string& path, const std::string& file) {
  std::unique_ptr<Index> idx;
  Status s = open_read_only(path, &idx);
  if (!s.ok()) return fail(s.to_string());
  std::string target;
  std::string refusal = export_target_refusal(path, file, &target);
  if (!refusal.empty()) return fail(refusal);
  std::string tmp = target + ".tmp." + std::to_string(getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return fail("cannot write '" + tmp + "'");
  out.write(kDumpMagic, 8);
  put32(out, kDumpVersion);
  put32(out, static_cast<uint32_t>(idx->stats().format));
  struct Ctx {
    std::ofstream* out;
    uint64_t n;
  } ctx{&out, 0};
  idx->for_each(
      [](void* c, std::string_view k, std::string_view v) {
        auto* x = static_cast<Ctx*>(c);
        put_record(*x->out, k, v);
        x->n++;
      },
      &ctx);
  put32(out, kEnd);
  put32(out, 0);
  out.write(reinterpret_cast<const char*>(&ctx.n), 8);
  out.close();
  if (!out || std::rename(tmp.c_str(), target.c_str()) != 0) {
    std::remove(tmp.c_str());
    return fail("write to '" + file + "' failed");
  }
  std::printf("exported %llu items from %s\n", static_cast<unsigned long long>(ctx.n),
              path.c_str());
  return 0;
}

// Why the dump's items cannot all go into a pool of `format`, or "": every key and value
// within the format's limits, no key twice.
std::string dump_items_refusal(
    const std::vector<std::pair<std::string_view, std::string_view>>& items, Format format) {
  std::set<std::string_view> keys;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& [k, v] = items[i];
    std::string at = "item " + std::to_string(i) + ": ";
    if (k.empty() || k.size() > kMaxKeySize)
      return at + "key of " + std::to_string(k.size()) + " bytes (1.." +
             std::to_string(kMaxKeySize) + " allowed)";
    if (v.size() > kMaxValueSize)
      return at + "value of " + std::to_string(v.size()) + " bytes (at most " +
             std::to_string(kMaxValueSize) + ")";
    if (format == Format::kVariable && v.empty()) return at + "empty value";
    if (format == Format::kFixed && (k.size() != 8 || v.size() != 8))
      return at + "not an 8-byte key and value";
    if (!keys.insert(k).second) return at + "its key appears twice";
  }
  return "";
}

struct Dump {
  std::string data;  // the file's bytes: items point into it
  Format format = Format::kFixed;
  std::vector<std::pair<std::string_view, std::string_view>> items;
};

// Reads and validates the whole dump (nothing is created before); "" or why it is invalid.
std::string read_dump(std::ifstream& in, Dump* d) {
  d->data.assign(std::istreambuf_iterator<char>(in), {});
  const std::string& data = d->data;
  if (data.size() < 16 || std::memcmp(data.data(), kDumpMagic, 8) != 0) return "no dump magic";
  uint32_t version, fmt;
  std::memcpy(&version, data.data() + 8, 4);
  std::memcpy(&fmt, data.data() + 12, 4);
  if (version != kDumpVersion) return "unsupported version " + std::to_string(version);
  for (size_t pos = 16;;) {
    if (pos + 8 > data.size()) return "truncated";
    uint32_t kl, vl;
    std::memcpy(&kl, data.data() + pos, 4);
    std::memcpy(&vl, data.data() + pos + 4, 4);
    pos += 8;
    if (kl == kEnd) {
      uint64_t n;
      if (pos + 8 != data.size()) return "truncated or trailing bytes";
      std::memcpy(&n, data.data() + pos, 8);
      if (n != d->items.size()) return "item count does not match";
      break;
    }
    if (pos + uint64_t{kl} + vl > data.size()) return "truncated";
    d->items.emplace_back(std::string_view(data.data() + pos, kl),
                          std::string_view(data.data() + pos + kl, vl));
    pos += uint64_t{kl} + vl;
  }
  if (fmt > 1) return "unknown pool format " + std::to_string(fmt);
  d->format = static_cast<Format>(fmt);
  return "";
}

// The temporary pool an import builds and renames into place ("POOL.importing.PID", beside
// POOL: the rename stays in one file system). A signal that ends the import removes it;
// SIGKILL or a power loss leaves it (docs/cli.md).
char g_import_tmp[4096];

void remove_import_tmp_and_exit(int sig) {
  unlink(g_import_tmp);  // async-signal-safe
  signal(sig, SIG_DFL);
  raise(sig);
}

std::string start_import_tmp(const std::string& path) {
  std::string tmp = path + ".importing." + std::to_string(getpid());
  if (tmp.size() >= sizeof g_import_tmp) return "";
  unlink(tmp.c_str());  // a killed import's, under a PID now ours: no live process owns it
  std::memcpy(g_import_tmp, tmp.c_str(), tmp.size() + 1);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    struct sigaction was {};
    sigaction(sig, nullptr, &was);
    // An ignored signal stays ignored (nohup's SIGHUP, a background job's SIGINT).
    if (was.sa_handler != SIG_IGN) signal(sig, remove_import_tmp_and_exit);
  }
  return tmp;
}

bool fsync_path(const std::string& p, int flags) {
  int fd = ::open(p.c_str(), flags | O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0 && fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

// Moves the finished pool to `path`, never over an existing file (renameat2's
// RENAME_NOREPLACE; link + unlink where the file system lacks it), and makes the new name
// durable. "" or why not.
std::string publish_pool(const std::string& tmp, const std::string& path) {
  if (!fsync_path(tmp, 0)) return "cannot sync '" + tmp + "': " + std::strerror(errno);
  int rc = renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
  // Any refusal but EEXIST falls back (EINVAL: the file system; ENOSYS, EPERM, EOPNOTSUPP: an
  // old kernel or a sandbox's filter); link() then reports a real error itself.
  if (rc != 0 && errno != EEXIST && (rc = link(tmp.c_str(), path.c_str())) == 0)
    unlink(tmp.c_str());
  if (rc != 0)
    return errno == EEXIST
               ? "'" + path + "' appeared meanwhile: import creates a new pool"
               : "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno);
  std::string dir = std::filesystem::path(path).parent_path().string();
  fsync_path(dir.empty() ? "." : dir, O_DIRECTORY);  // best effort: the pool is in place
  return "";
}

// For tests only: with PMHASH_TEST_IMPORT_STOP_AFTER=N in the environment, an import stops
// itself (SIGSTOP) after its Nth insert, so a test signals it at a known point midway, not
// after a sleep (tests/cli_test.cpp, Cli.AKilledImportLeavesNoPoolAtItsTarget).
size_t test_stop_after() {
  const char* e = std::getenv("PMHASH_TEST_IMPORT_STOP_AFTER");
  return e != nullptr ? std::strtoull(e, nullptr, 10) : SIZE_MAX;
}

// The items inserted into a new pool at `tmp`, closed cleanly; "" or why not.
std::string build_pool(const std::string& tmp, const Options& o, const Dump& d) {
  std::unique_ptr<Index> idx;
  Status s = Index::open(tmp, o, &idx);
  const size_t stop_after = test_stop_after();
  for (size_t i = 0; s.ok() && i < d.items.size(); ++i) {
    if (i == stop_after) raise(SIGSTOP);
    s = idx->insert(d.items[i].first, d.items[i].second);
  }
  if (s.ok()) s = idx->close();
  return s.ok() ? "" : s.to_string();
}

// Without --format the pool takes the format the dump records (export has always written
// it), so an emptied variable pool stays variable; "" or why the items do not fit.
std::string choose_format(const Dump& d, bool format_given, Options* o) {
  if (!format_given) o->format = d.format;
  bool all_8_8 = std::all_of(d.items.begin(), d.items.end(), [](const auto& kv) {
    return kv.first.size() == 8 && kv.second.size() == 8;
  });
  if (o->format == Format::kFixed && !all_8_8)
    return format_given ? "--format fixed: the dump holds items that are not 8-byte keys and values"
                        : "the dump records the fixed format but holds items that are not 8-byte "
                          "keys and values (--format variable imports them)";
  return "";
}

// The pool is built in a temporary file and renamed to POOL only once complete and closed
// cleanly: a failed or killed import leaves no pool at POOL (docs/cli.md).
int import_pool(const std::string& file, const std::string& path, Options o, bool format_given) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return fail("cannot read '" + file + "'");
  Dump d;
  std::string why = read_dump(in, &d);
  if (!why.empty()) return fail("'" + file + "' is not a valid pmhash dump: " + why);
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0)
    return fail("'" + path + "' exists: import creates a new pool");
  why = choose_format(d, format_given, &o);
  if (!why.empty()) return fail(why);
  why = dump_items_refusal(d.items, o.format);
  if (!why.empty()) return fail("'" + file + "' is not a valid pmhash dump: " + why);
  if (!o.capacity_hint) o.capacity_hint = d.items.size();
  std::string tmp = start_import_tmp(path);
  if (tmp.empty()) return fail("'" + path + "': path too long");
  why = build_pool(tmp, o, d);
  if (why.empty()) why = publish_pool(tmp, path);
  if (!why.empty()) {
    unlink(tmp.c_str());
    return fail("import stopped, no pool left at '" + path + "': " + why);
  }
  std::printf("imported %zu items into %s (%s, %s)\n", d.items.size(), path.c_str(),
              o.scheme.c_str(), format_name(o.format));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string cmd = argv[1];
  for (int i = 1; i < argc; ++i)  // `pmhash --help`, `pmhash info --help`, ...
    if ((std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) && cmd != "bench")
      return usage(stdout);
  if (cmd == "bench") return pmhash::bench::bench_main(argc - 1, argv + 1);
  if (cmd == "info" && argc == 3) return info(argv[2]);
  if (cmd == "check" && argc == 3) return check(argv[2]);
  if (cmd == "export" && argc == 4) return export_pool(argv[2], argv[3]);
  if (cmd == "import" && argc >= 4) {
    Options o;
    o.scheme.clear();
    bool format_given = false;
    for (int i = 4; i < argc; ++i) {
      std::string a = argv[i];
      if (i + 1 >= argc) return usage();
      std::string v = argv[++i];
      if (a == "--scheme")
        o.scheme = v;
      else if (a == "--format" && (v == "fixed" || v == "variable")) {
        o.format = v == "variable" ? Format::kVariable : Format::kFixed;
        format_given = true;
      } else if (a == "--format")
        return fail("--format must be 'fixed' or 'variable', not '" + v + "'");
      else if (a == "--pool-size" && !parse_u64(v, &o.pool_size))
        return fail("--pool-size must be a byte count (an unsigned integer), not '" + v + "'");
      else if (a == "--pool-size")
        continue;
      else if (a == "--params") {
        std::stringstream ss(v);
        for (std::string kv; std::getline(ss, kv, ',');)
          if (kv.find('=') != std::string::npos)
            o.params[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
      } else
        return usage();
    }
    if (o.scheme.empty()) return usage();
    return import_pool(argv[2], argv[3], o, format_given);
  }
  return usage();
}
