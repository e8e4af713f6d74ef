#include "pm/pool.hpp"

#include <fcntl.h>
#include <libpmem2.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

namespace pmhash::pm {
namespace {

uint64_t align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

std::string errno_text(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

std::string fixed_string(const char* s, size_t n) {
  return std::string(s, strnlen(s, n));
}

}  // namespace

uint64_t header_checksum(const PoolHeader& h) {
  return XXH3_64bits(&h, offsetof(PoolHeader, checksum));
}

std::string Pool::scheme() const {
  return fixed_string(header().scheme, sizeof header().scheme);
}
std::string Pool::params() const {
  return fixed_string(header().params, sizeof header().params);
}

uint64_t Pool::root() const {
  return std::atomic_ref<uint64_t>(mutable_header().root).load(std::memory_order_acquire);
}

bool Pool::published() const {
  return std::atomic_ref<uint64_t>(mutable_header().published).load() == kPublished;
}

Status Pool::check_root_state() const {
  uint64_t root = this->root(), pub = mutable_header().published;
  if (pub != 0 && pub != kPublished)
    return {Code::kCorrupted, "'" + path_ + "': published word at offset " +
                                  std::to_string(kMutableHeaderOffset + 16) + " is damaged (" +
                                  std::to_string(pub) + ")"};
  if (root == 0 && pub == kPublished)
    return {Code::kCorrupted, "'" + path_ + "': root word at offset " +
                                  std::to_string(kMutableHeaderOffset + 8) +
                                  " is 0 in a pool that was published (damaged)"};
  if (root != 0 && pub != kPublished)
    return {Code::kCorrupted, "'" + path_ +
                                  "': root word is set but the pool was never "
                                  "published (damaged published word)"};
  return Status::Ok();
}

uint64_t live_seal(uint64_t count) {
  // Never 0 (0: no record).
  return XXH3_64bits_withSeed(&count, sizeof count, 0x4c49'5645'434e'54ull) | 1;  // "LIVECNT"
}

Status Pool::recorded_count(uint64_t* count, bool* known) const {
  *known = false;
  const MutableHeader& m = mutable_header();
  if (header().format_version < 3 || m.live_seal == 0) return Status::Ok();
  if (live_seal(m.live_count) != m.live_seal)
    return {Code::kCorrupted, "'" + path_ +
                                  "': the live count recorded at the last clean close (offset " +
                                  std::to_string(kMutableHeaderOffset + 24) + ") is damaged"};
  *count = m.live_count;
  *known = true;
  return Status::Ok();
}

void Pool::record_count(uint64_t count) {
  if (header().format_version < 3) return;
  MutableHeader& m = mutable_header();
  drop_recorded_count();  // no moment with a new count under the old seal
  std::atomic_ref<uint64_t>(m.live_count).store(count);
  persister_.persist(&m.live_count, 8);
  std::atomic_ref<uint64_t>(m.live_seal).store(live_seal(count));
  persister_.persist(&m.live_seal, 8);
}

void Pool::drop_recorded_count() {
  MutableHeader& m = mutable_header();
  if (header().format_version < 3 || m.live_seal == 0) return;
  std::atomic_ref<uint64_t>(m.live_seal).store(0);
  persister_.persist(&m.live_seal, 8);
}

void Pool::set_clean(bool clean) {
  std::atomic_ref<uint64_t>(mutable_header().clean_shutdown).store(clean ? 1 : 0);
  persister_.persist(&mutable_header().clean_shutdown, 8);
}

Pool::~Pool() {
  if (map_ != nullptr) pmem2_map_delete(&map_);
  if (source_ != nullptr) pmem2_source_delete(&source_);
  if (fd_ >= 0) close(fd_);  // also drops the flock
}

bool valid_mode(Mode m) {
  return static_cast<uint32_t>(m) <= static_cast<uint32_t>(Mode::kNone);
}

std::string mode_range() {
  std::string r;
  for (uint32_t m = 0; m <= static_cast<uint32_t>(Mode::kNone); ++m)
    r += (r.empty() ? "" : ", ") + std::string(mode_name(static_cast<Mode>(m))) + "(" +
         std::to_string(m) + ")";
  return r;
}

Status plan_layout(uint64_t pool_size, uint64_t chunk, Layout* out) {
  if (chunk < 65536 || chunk > (uint64_t{1} << 30) || (chunk & (chunk - 1)) != 0)
    return {Code::kInvalidArgument,
            "chunk size " + std::to_string(chunk) + " must be a power of two in [64 KiB, 1 GiB]"};
  constexpr uint64_t kMaxPool = uint64_t{1} << 50;  // 1 PiB: keeps every sum below 2^63
  uint64_t lanes_off = kHeaderRegion;
  uint64_t table_off = lanes_off + kLanes * kLaneBytes;
  uint64_t n = std::min(pool_size, kMaxPool) / chunk;
  // Solve for the chunk count: metadata grows with it (at most a few chunks of it).
  for (; n > 0; --n) {
    uint64_t bitmap_off = align_up(table_off + n * 8, 64);
    uint64_t heap_off = align_up(bitmap_off + n * (chunk / 512), chunk);
    if (heap_off + n * chunk <= pool_size && pool_size <= kMaxPool) {
      *out = {heap_off + n * chunk, chunk, n, lanes_off, table_off, bitmap_off, heap_off};
      return Status::Ok();
    }
  }
  if (pool_size > kMaxPool)
    return {Code::kInvalidArgument, "pool size " + std::to_string(pool_size) +
                                        " is out of range: at most " + std::to_string(kMaxPool)};
  uint64_t min = align_up(align_up(table_off + 8, 64) + chunk / 512, chunk) + chunk;
  return {Code::kInvalidArgument, "pool size " + std::to_string(pool_size) +
                                      " is too small: with chunks of " + std::to_string(chunk) +
                                      " bytes it must be at least " + std::to_string(min)};
}

Status validate_header(const PoolHeader& h, uint64_t file_size, const std::string& path) {
  if (h.format_version < kOldestPoolFormatVersion || h.format_version > kPoolFormatVersion)
    return {Code::kUnsupportedVersion,
            "'" + path + "' has pool format version " + std::to_string(h.format_version) +
                "; this build reads versions " + std::to_string(kOldestPoolFormatVersion) + " to " +
                std::to_string(kPoolFormatVersion)};
  if (header_checksum(h) != h.checksum)
    return {Code::kChecksumMismatch, "'" + path + "': pool header checksum mismatch (corrupted)"};
  if (file_size < h.pool_size)
    return {Code::kTruncated, "'" + path + "' is truncated: " + std::to_string(file_size) +
                                  " bytes, the header says " + std::to_string(h.pool_size)};
  // The layout is a function of (pool size, chunk size): every other field must match it.
  Layout l{};
  bool layout_ok = plan_layout(h.pool_size, h.chunk_size, &l).ok() && l.pool_size == h.pool_size &&
                   h.header_size == kHeaderRegion && h.nlanes == kLanes && h.nchunks == l.nchunks &&
                   h.heap_offset == l.heap_off && h.chunk_table_offset == l.table_off &&
                   h.bitmap_offset == l.bitmap_off && h.lanes_offset == l.lanes_off &&
                   h.key_format <= 1;
  if (!layout_ok)
    return {Code::kCorrupted, "'" + path + "': pool header describes an impossible layout"};
  return Status::Ok();
}

Mode detect_mode(int fd, bool dax) {
  if (dax) return Mode::kPm;
  struct statfs fs {};
  bool tmpfs = fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  return tmpfs ? Mode::kEmulated : Mode::kMsync;
}

namespace {

// A file open(create) may format: empty, or left by a creation that did not finish (it
// starts with kCreatingMagic, or with a prefix of it if the 8-byte write itself was cut).
bool formattable(int fd, uint64_t file_size) {
  if (file_size == 0) return true;
  char m[8] = {};
  ssize_t got = pread(fd, m, sizeof m, 0);
  if (got <= 0) return false;
  if (file_size < sizeof m)
    return static_cast<uint64_t>(got) == file_size &&
           std::memcmp(m, kCreatingMagic, file_size) == 0;
  return got == sizeof m && std::memcmp(m, kCreatingMagic, sizeof m) == 0;
}

Status check_create_args(const PoolArgs& args) {
  if (args.scheme.empty() || args.scheme.size() >= sizeof(PoolHeader{}.scheme))
    return {Code::kInvalidArgument, "a new pool needs a scheme name of 1-15 characters"};
  if (args.params.size() >= sizeof(PoolHeader{}.params))
    return {Code::kInvalidArgument, "scheme parameters too long for the pool header (" +
                                        std::to_string(args.params.size()) + " bytes, at most " +
                                        std::to_string(sizeof(PoolHeader{}.params) - 1) + ")"};
  Layout l{};
  return plan_layout(args.pool_size, args.chunk_size, &l);
}

}  // namespace

Status Pool::open(const std::string& path, const PoolArgs& args, std::unique_ptr<Pool>* out) {
  if (!valid_mode(args.mode))
    return {Code::kInvalidArgument, "mode " + std::to_string(static_cast<uint32_t>(args.mode)) +
                                        " is not one of " + mode_range()};
  if (!args.any_format && static_cast<uint32_t>(args.format) > 1)
    return {Code::kInvalidArgument, "format " + std::to_string(static_cast<uint32_t>(args.format)) +
                                        " is not one of fixed(0), variable(1)"};
  if (args.delay_ns > kMaxDelayNs)
    return {Code::kInvalidArgument, "PM write delay " + std::to_string(args.delay_ns) +
                                        " ns is out of range [0, " + std::to_string(kMaxDelayNs) +
                                        "]"};
  bool may_create = args.create && !args.read_only;
  std::unique_ptr<Pool> p(new Pool());
  p->path_ = path;
  p->read_only_ = args.read_only;
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  p->fd_ = ::open(path.c_str(), (args.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK);
  bool created_file = false;  // by this call: removed again if creation is refused
  if (p->fd_ < 0 && errno == ENOENT && may_create) {
    Status s = check_create_args(args);  // refuse before the file exists
    if (!s.ok()) return s;
    p->fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (p->fd_ >= 0)
      created_file = true;
    else if (errno == EEXIST)  // created meanwhile by someone else: theirs
      p->fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  }
  if (p->fd_ < 0) {
    if (errno == ENOENT) return {Code::kNotFound, "pool file '" + path + "' does not exist"};
    return {Code::kIoError, errno_text("cannot open pool file", path)};
  }
  // flock locks belong to the open file description: a second open, in this process or
  // another, fails here.
  if (!args.shadow && flock(p->fd_, (args.read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return {Code::kPoolBusy,
              "pool '" + path + "' is already open (locked: by this process or another)"};
    return {Code::kIoError, errno_text("cannot lock pool file", path)};
  }
  struct stat st {};
  if (fstat(p->fd_, &st) != 0) return {Code::kIoError, errno_text("cannot stat", path)};
  if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISDIR(st.st_mode))
    return {Code::kNotAPool, "'" + path + "' is not a regular file or a device: not a pool"};
  uint64_t file_size = static_cast<uint64_t>(st.st_size);

  if (formattable(p->fd_, file_size)) {
    if (!may_create)
      return {Code::kNotAPool, file_size == 0 ? "'" + path + "' is empty: not a pmhash pool"
                                              : "'" + path +
                                                    "': pool creation did not finish (open "
                                                    "with create to format it again)"};
    Status s = check_create_args(args);
    if (s.ok()) s = p->create_layout(args);
    if (!s.ok()) {
      if (created_file) {
        unlink(path.c_str());
      } else if (file_size == 0 && ftruncate(p->fd_, 0) != 0) { /* leave it empty */
      }
      return s;
    }
    p->created_file_ = created_file;
    *out = std::move(p);
    return Status::Ok();
  }
  Status s = p->open_existing(args, file_size);
  if (!s.ok()) return s;
  *out = std::move(p);
  return Status::Ok();
}

// Validates everything from a copy of the header before mapping or writing anything.
Status Pool::open_existing(const PoolArgs& args, uint64_t file_size) {
  PoolHeader h{};
  ssize_t got = pread(fd_, &h, sizeof h, 0);
  if (got < 0) return {Code::kIoError, errno_text("cannot read", path_)};
  if (static_cast<size_t>(got) < sizeof kPoolMagic ||
      std::memcmp(h.magic, kPoolMagic, sizeof kPoolMagic) != 0)
    return {Code::kNotAPool, "'" + path_ + "' is not a pmhash pool (no pool magic)"};
  if (static_cast<size_t>(got) < sizeof h || file_size < kHeaderRegion)
    return {Code::kTruncated, "'" + path_ + "' is truncated: " + std::to_string(file_size) +
                                  " bytes, shorter than the pool header"};
  Status s = validate_header(h, file_size, path_);
  if (!s.ok()) return s;
  std::string scheme = fixed_string(h.scheme, sizeof h.scheme);
  if (!args.scheme.empty() && scheme != args.scheme)
    return {Code::kSchemeMismatch,
            "'" + path_ + "' holds a '" + scheme + "' index, not '" + args.scheme + "'"};
  if (!args.any_format && h.key_format != static_cast<uint32_t>(args.format))
    return {Code::kFormatMismatch, "'" + path_ + "' holds the '" +
                                       format_name(static_cast<Format>(h.key_format)) +
                                       "' format, not '" + format_name(args.format) + "'"};
  size_ = h.pool_size;
  s = map(args);
  if (!s.ok()) return s;
  was_clean_ = mutable_header().clean_shutdown == 1;
  return Status::Ok();
}

Status Pool::map(const PoolArgs& args) {
  if (pmem2_source_from_fd(&source_, fd_) != 0)
    return {Code::kIoError, std::string("libpmem2 source: ") + pmem2_errormsg()};
  pmem2_config* cfg = nullptr;
  if (pmem2_config_new(&cfg) != 0)
    return {Code::kIoError, std::string("libpmem2 config: ") + pmem2_errormsg()};
  pmem2_config_set_required_store_granularity(cfg, PMEM2_GRANULARITY_PAGE);
  pmem2_config_set_length(cfg, size_);
  // The granularity is the file's only with a shared mapping (a private one always says
  // "byte"), so a read-only open learns it from a shared read-only probe first.
  pmem2_granularity g = PMEM2_GRANULARITY_PAGE;
  if (read_only_) {
    pmem2_config_set_protection(cfg, PMEM2_PROT_READ);
    pmem2_map* probe = nullptr;
    if (pmem2_map_new(&probe, cfg, source_) == 0) {
      g = pmem2_map_get_store_granularity(probe);
      pmem2_map_delete(&probe);
    }
    pmem2_config_set_protection(cfg, PMEM2_PROT_READ | PMEM2_PROT_WRITE);
    pmem2_config_set_sharing(cfg, PMEM2_PRIVATE);  // writes stay in memory
  }
  int rc = pmem2_map_new(&map_, cfg, source_);
  pmem2_config_delete(&cfg);
  if (rc != 0) return {Code::kIoError, "cannot map '" + path_ + "': " + pmem2_errormsg()};
  base_ = static_cast<char*>(pmem2_map_get_address(map_));
  if (args.hook != nullptr) args.hook->on_map(base_, size_);
  if (!read_only_) g = pmem2_map_get_store_granularity(map_);

  bool dax = g != PMEM2_GRANULARITY_PAGE;
  Mode mode = args.mode;
  if (mode == Mode::kPm && !dax)
    return {Code::kInvalidArgument,
            "mode 'pm' asked for, but '" + path_ + "' is not on DAX/persistent memory"};
  if (mode == Mode::kAuto) mode = detect_mode(fd_, dax);
  mode_ = mode;
  if (read_only_) {  // nothing reaches the file: report the mode, flush nothing
    persister_.instr = FlushInstr::kNothing;
    persister_.fence_enabled = false;
    return Status::Ok();
  }
  persister_.delay_ns = args.delay_ns;
  persister_.hook = args.hook;
  switch (mode) {
    case Mode::kPm:  // eADR (byte granularity): caches are persistent, nothing to flush
      persister_.instr =
          g == PMEM2_GRANULARITY_BYTE ? FlushInstr::kNothing : best_flush_instruction();
      break;
    case Mode::kEmulated:
      persister_.instr = best_flush_instruction();
      break;
    case Mode::kMsync:
      persister_.instr = FlushInstr::kMsync;
      persister_.msync_flush = pmem2_get_flush_fn(map_);
      persister_.msync_drain = pmem2_get_drain_fn(map_);
      break;
    case Mode::kNone:
    case Mode::kAuto:
      persister_.instr = FlushInstr::kNothing;
      persister_.fence_enabled = false;
      break;
  }
  return Status::Ok();
}

namespace {

// /proc/self/pagemap: a private copy of a page is present and not a file page (bit 61), or
// swapped out (bit 62). Unreadable (a process that changed its user is not dumpable):
// mincore, which is right for a caller with write access to the file; else assumed a copy.
bool private_copy(const char* addr, int pagemap, uint64_t page) {
  uint64_t e = 0;
  off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(addr) / page * 8);
  if (pagemap < 0 || pread(pagemap, &e, 8, at) != 8) {
    unsigned char resident = 1;
    (void)mincore(const_cast<char*>(addr), page, &resident);
    return resident & 1;
  }
  bool present = (e >> 63) & 1, swapped = (e >> 62) & 1, file_page = (e >> 61) & 1;
  return swapped || (present && !file_page);
}

// f(page, from, to) for each page of [off, off + len), with the part of the range in it.
template <class F>
void each_page(uint64_t off, uint64_t len, F f) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (uint64_t p = off / page * page; p < off + len; p += page)
    f(p, std::max(p, off), std::min(p + page, off + len));
}

}  // namespace

// A hole of the file, and in a private view (read-only, shadow) not a copy holding
// recovery's writes, so it reads as zeros. (Not mincore: it reports every page resident to
// a caller without write access to the file, e.g. a read-only `pmhash check`.) The pool
// does positional I/O only, so moving the descriptor's offset is harmless.
bool Pool::page_is_hole(uint64_t p, int pagemap) const {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (fd_ < 0) return false;
  if (read_only_ && private_copy(base_ + p, pagemap, page)) return false;
  off_t data = lseek(fd_, static_cast<off_t>(p), SEEK_DATA);
  return data < 0 ? errno == ENXIO : static_cast<uint64_t>(data) >= p + page;
}

// Page by page: a range may straddle a written page and a hole (a 2 KiB bitmap at 39424
// covers pages 9 and 10): deciding for the whole range at once read the hole.
void Pool::read_without_backing(uint64_t off, uint64_t len, void* out) const {
  int pagemap = read_only_ ? ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1;
  char* dst = static_cast<char*>(out);
  each_page(off, len, [&](uint64_t p, uint64_t from, uint64_t to) {
    if (page_is_hole(p, pagemap))
      std::memset(dst + (from - off), 0, to - from);
    else
      std::memcpy(dst + (from - off), base_ + from, to - from);
  });
  if (pagemap >= 0) ::close(pagemap);
}

void Pool::flush_written(uint64_t off, uint64_t len) const {
  each_page(off, len, [&](uint64_t p, uint64_t from, uint64_t to) {
    if (!page_is_hole(p, -1)) persister_.flush(base_ + from, to - from);
  });
}

bool Pool::back(uint64_t off, uint64_t len) {
  if (fd_ < 0 || read_only_ || len == 0) return true;
  int r;
  do {
    r = fallocate(fd_, 0, static_cast<off_t>(off), static_cast<off_t>(len));
  } while (r != 0 && errno == EINTR);
  return r == 0 || (errno != ENOSPC && errno != EDQUOT);
}

// Options::prefault. First the room: the pages the file lacks must fit in what its file
// system has free, checked before anything is allocated (a refusal then leaves the file
// system as it was), then allocated (fallocate: a file system that cannot is skipped).
// Then every page faulted in writable, what they hold unchanged — but in msync mode, where
// that would dirty every page and write the whole pool back. EINVAL from the populate is a
// kernel without MADV_POPULATE_WRITE (< 5.14), or a mapping it cannot populate: then pages
// fault in as they are written.
Status Pool::prefault() {
  struct stat st {};
  struct statfs fs {};
  // A file system reporting no size (f_blocks 0: an unlimited tmpfs, ramfs) has no free
  // count to check against.
  if (fstat(fd_, &st) == 0 && fstatfs(fd_, &fs) == 0 && fs.f_blocks != 0) {
    uint64_t backed = uint64_t(st.st_blocks) * 512;
    uint64_t need = size_ > backed ? size_ - backed : 0;
    uint64_t free = uint64_t(fs.f_bavail) * uint64_t(fs.f_bsize);
    if (need > free)
      return {Code::kIoError, "no room to prefault '" + path_ + "': it needs " +
                                  std::to_string(need) + " more bytes, its file system has " +
                                  std::to_string(free) + " free"};
  }
  if (fallocate(fd_, 0, 0, static_cast<off_t>(size_)) != 0 && errno != EOPNOTSUPP)
    return {Code::kIoError, errno_text("no room to prefault the pool", path_)};
  if (mode_ == Mode::kMsync) return Status::Ok();
  if (madvise(base_, size_, MADV_POPULATE_WRITE) == 0 || errno == EINVAL) return Status::Ok();
  return {Code::kIoError, errno_text("cannot fault in the pool", path_)};
}

// Creation is atomic as the next open sees it: the file is emptied, its first 8 bytes become
// kCreatingMagic (one small write, synced), it is sized, the header is written and
// persisted, and kPoolMagic replaces kCreatingMagic last. A kill at any step leaves an
// empty file or one starting with kCreatingMagic: open(create) formats both.
Status Pool::create_layout(const PoolArgs& args) {
  Layout l{};
  Status s = plan_layout(args.pool_size, args.chunk_size, &l);
  if (!s.ok()) return s;
  if (ftruncate(fd_, 0) != 0 ||
      pwrite(fd_, kCreatingMagic, sizeof kCreatingMagic, 0) != sizeof kCreatingMagic ||
      fdatasync(fd_) != 0)
    return {Code::kIoError, errno_text("cannot start creating pool", path_)};
  if (ftruncate(fd_, static_cast<off_t>(l.pool_size)) != 0)
    return {Code::kIoError, errno_text("cannot size pool file", path_)};
  size_ = l.pool_size;
  s = map(args);
  if (!s.ok()) return s;
  // The header, the lanes and the chunk table (8 bytes a chunk: open reads all of it) now;
  // the bitmaps and heap a chunk at a time as the allocator first hands them out
  // (Allocator::back_chunks).
  if (!back(0, l.bitmap_off))
    return {Code::kPoolFull,
            errno_text("no room for the pool's header, logs and chunk table", path_)};

  PoolHeader h{};
  std::memcpy(h.magic, kPoolMagic, sizeof h.magic);
  h.format_version = kPoolFormatVersion;
  h.header_size = kHeaderRegion;
  std::memcpy(h.scheme, args.scheme.data(), args.scheme.size());
  h.key_format = static_cast<uint32_t>(args.format);
  std::random_device rd;
  for (auto& b : h.uuid) b = static_cast<uint8_t>(rd());
  h.pool_size = l.pool_size;
  h.chunk_size = l.chunk_size;
  h.heap_offset = l.heap_off;
  h.nchunks = l.nchunks;
  h.chunk_table_offset = l.table_off;
  h.bitmap_offset = l.bitmap_off;
  h.lanes_offset = l.lanes_off;
  h.nlanes = kLanes;
  std::memcpy(h.params, args.params.data(), args.params.size());
  h.checksum = header_checksum(h);
  // All metadata is zero (free, unpublished). The header goes in with kCreatingMagic still
  // in place; the magic is the last store.
  PoolHeader staged = h;
  std::memcpy(staged.magic, kCreatingMagic, sizeof staged.magic);
  std::memcpy(base_, &staged, sizeof staged);
  persister_.persist(base_, kHeaderRegion);
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base_))
      .store(*reinterpret_cast<const uint64_t*>(kPoolMagic));
  persister_.persist(base_, 8);
  was_clean_ = false;
  return Status::Ok();
}

}  // namespace pmhash::pm

namespace pmhash::pm {

void Pool::abandon_creation() {
  if (created_file_) {
    unlink(path_.c_str());
    return;
  }
  if (pwrite(fd_, kCreatingMagic, sizeof kCreatingMagic, 0) == sizeof kCreatingMagic)
    fdatasync(fd_);
}

}  // namespace pmhash::pm
