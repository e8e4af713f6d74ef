#include "pm/pool.hpp"

#include <fcntl.h>
#include <libpmem2.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <random>

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

void Pool::set_clean(bool clean) {
  std::atomic_ref<uint64_t>(mutable_header().clean_shutdown).store(clean ? 1 : 0);
  persister_.persist(&mutable_header().clean_shutdown, 8);
}

Pool::~Pool() {
  if (map_ != nullptr) pmem2_map_delete(&map_);
  if (source_ != nullptr) pmem2_source_delete(&source_);
  if (fd_ >= 0) close(fd_);  // also drops the flock
}

Status Pool::open(const std::string& path, const PoolArgs& args, std::unique_ptr<Pool>* out) {
  std::unique_ptr<Pool> p(new Pool());
  p->path_ = path;
  p->read_only_ = args.read_only;
  int flags = args.read_only ? O_RDONLY : O_RDWR | (args.create ? O_CREAT : 0);
  p->fd_ = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (p->fd_ < 0) {
    if (errno == ENOENT) return {Code::kNotFound, "pool file '" + path + "' does not exist"};
    return {Code::kIoError, errno_text("cannot open pool file", path)};
  }
  // flock locks belong to the open file description: a second open, in this process or
  // another, fails here.
  if (flock(p->fd_, (args.read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return {Code::kPoolBusy, "pool '" + path + "' is already open (locked by another user)"};
    return {Code::kIoError, errno_text("cannot lock pool file", path)};
  }
  struct stat st {};
  if (fstat(p->fd_, &st) != 0) return {Code::kIoError, errno_text("cannot stat", path)};
  uint64_t file_size = static_cast<uint64_t>(st.st_size);

  if (file_size == 0) {
    if (!args.create || args.read_only)
      return {Code::kNotAPool, "'" + path + "' is empty: not a pmhash pool"};
    Status s = p->create_layout(args);
    if (!s.ok()) {
      if (ftruncate(p->fd_, 0) != 0) { /* leave it empty as we found it */
      }
      return s;
    }
    *out = std::move(p);
    return Status::Ok();
  }

  // Validate everything from a copy of the header before mapping or writing anything.
  PoolHeader h{};
  ssize_t got = pread(p->fd_, &h, sizeof h, 0);
  if (got < 0) return {Code::kIoError, errno_text("cannot read", path)};
  if (static_cast<size_t>(got) < sizeof kPoolMagic ||
      std::memcmp(h.magic, kPoolMagic, sizeof kPoolMagic) != 0)
    return {Code::kNotAPool, "'" + path + "' is not a pmhash pool (no pool magic)"};
  if (static_cast<size_t>(got) < sizeof h)
    return {Code::kTruncated, "'" + path + "' is truncated: " + std::to_string(file_size) +
                                  " bytes, shorter than the pool header"};
  if (h.format_version != kPoolFormatVersion)
    return {Code::kUnsupportedVersion,
            "'" + path + "' has pool format version " + std::to_string(h.format_version) +
                "; this build reads version " + std::to_string(kPoolFormatVersion)};
  if (header_checksum(h) != h.checksum)
    return {Code::kChecksumMismatch, "'" + path + "': pool header checksum mismatch (corrupted)"};
  if (file_size < h.pool_size)
    return {Code::kTruncated, "'" + path + "' is truncated: " + std::to_string(file_size) +
                                  " bytes, the header says " + std::to_string(h.pool_size)};
  bool layout_ok = h.header_size == kHeaderRegion && h.chunk_size >= 4096 &&
                   (h.chunk_size & (h.chunk_size - 1)) == 0 && h.nlanes == kLanes &&
                   h.heap_offset % h.chunk_size == 0 &&
                   h.heap_offset + h.nchunks * h.chunk_size <= h.pool_size &&
                   h.chunk_table_offset + h.nchunks * 8 <= h.heap_offset &&
                   h.bitmap_offset + h.nchunks * (h.chunk_size / 512) <= h.heap_offset &&
                   h.lanes_offset + h.nlanes * kLaneBytes <= h.chunk_table_offset &&
                   h.key_format <= 1;
  if (!layout_ok)
    return {Code::kCorrupted, "'" + path + "': pool header describes an impossible layout"};
  std::string scheme = fixed_string(h.scheme, sizeof h.scheme);
  if (!args.scheme.empty() && scheme != args.scheme)
    return {Code::kSchemeMismatch,
            "'" + path + "' holds a '" + scheme + "' index, not '" + args.scheme + "'"};
  if (!args.any_format && h.key_format != static_cast<uint32_t>(args.format))
    return {Code::kFormatMismatch, "'" + path + "' holds the '" +
                                       format_name(static_cast<Format>(h.key_format)) +
                                       "' format, not '" + format_name(args.format) + "'"};
  p->size_ = h.pool_size;
  Status s = p->map(args);
  if (!s.ok()) return s;
  p->was_clean_ = p->mutable_header().clean_shutdown == 1;
  *out = std::move(p);
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
  if (read_only_) pmem2_config_set_sharing(cfg, PMEM2_PRIVATE);  // writes stay in memory
  int rc = pmem2_map_new(&map_, cfg, source_);
  pmem2_config_delete(&cfg);
  if (rc != 0) return {Code::kIoError, "cannot map '" + path_ + "': " + pmem2_errormsg()};
  base_ = static_cast<char*>(pmem2_map_get_address(map_));
  if (args.hook != nullptr) args.hook->on_map(base_, size_);
  pmem2_granularity g = pmem2_map_get_store_granularity(map_);

  bool dax = g != PMEM2_GRANULARITY_PAGE;
  Mode mode = args.mode;
  if (mode == Mode::kPm && !dax)
    return {Code::kInvalidArgument,
            "mode 'pm' asked for, but '" + path_ + "' is not on DAX/persistent memory"};
  if (mode == Mode::kAuto) {
    struct statfs fs {};
    bool tmpfs = fstatfs(fd_, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
    mode = dax ? Mode::kPm : (tmpfs ? Mode::kEmulated : Mode::kMsync);
  }
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

Status Pool::create_layout(const PoolArgs& args) {
  if (args.scheme.empty() || args.scheme.size() >= sizeof(PoolHeader{}.scheme))
    return {Code::kInvalidArgument, "a new pool needs a scheme name of 1-15 characters"};
  if (args.params.size() >= sizeof(PoolHeader{}.params))
    return {Code::kInvalidArgument, "scheme parameters too long for the pool header"};
  uint64_t chunk = args.chunk_size;
  if (chunk < 65536 || (chunk & (chunk - 1)) != 0)
    return {Code::kInvalidArgument, "chunk size must be a power of two >= 64 KiB"};
  // Solve for the chunk count: metadata grows with it.
  uint64_t lanes_off = kHeaderRegion;
  uint64_t table_off = lanes_off + kLanes * kLaneBytes;
  uint64_t n = args.pool_size / chunk;
  uint64_t bitmap_off = 0, heap_off = 0;
  for (;; --n) {
    if (n == 0)
      return {Code::kInvalidArgument,
              "pool size " + std::to_string(args.pool_size) + " is too small"};
    bitmap_off = align_up(table_off + n * 8, 64);
    heap_off = align_up(bitmap_off + n * (chunk / 512), chunk);
    if (heap_off + n * chunk <= args.pool_size) break;
  }
  uint64_t pool_size = heap_off + n * chunk;
  if (ftruncate(fd_, static_cast<off_t>(pool_size)) != 0)
    return {Code::kIoError, errno_text("cannot size pool file", path_)};
  size_ = pool_size;
  Status s = map(args);
  if (!s.ok()) return s;

  PoolHeader h{};
  std::memcpy(h.magic, kPoolMagic, sizeof h.magic);
  h.format_version = kPoolFormatVersion;
  h.header_size = kHeaderRegion;
  std::memcpy(h.scheme, args.scheme.data(), args.scheme.size());
  h.key_format = static_cast<uint32_t>(args.format);
  std::random_device rd;
  for (auto& b : h.uuid) b = static_cast<uint8_t>(rd());
  h.pool_size = pool_size;
  h.chunk_size = chunk;
  h.heap_offset = heap_off;
  h.nchunks = n;
  h.chunk_table_offset = table_off;
  h.bitmap_offset = bitmap_off;
  h.lanes_offset = lanes_off;
  h.nlanes = kLanes;
  std::memcpy(h.params, args.params.data(), args.params.size());
  h.checksum = header_checksum(h);
  // The file is freshly truncated, so all metadata is zero (free). Write the header with a
  // zeroed magic first and the magic last, so a crash mid-create never leaves a valid pool.
  PoolHeader staged = h;
  std::memset(staged.magic, 0, sizeof staged.magic);
  std::memcpy(base_, &staged, sizeof staged);
  persister_.persist(base_, kHeaderRegion);
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base_))
      .store(*reinterpret_cast<const uint64_t*>(kPoolMagic));
  persister_.persist(base_, 8);
  was_clean_ = false;
  return Status::Ok();
}

}  // namespace pmhash::pm
