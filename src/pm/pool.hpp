// The pool file: one index per pool. Everything inside is addressed by 8-byte offsets from
// the pool's base, never by raw pointers, so a pool maps at any address.
//
// On-media layout (offsets in bytes):
//
//   0      PoolHeader (256 B, immutable after creation, checksummed)
//   512    MutableHeader: clean_shutdown, root, published, live_count, live_seal (8 B each),
//          each changed by one 8-byte store
//   4096   lanes: kLanes x 256 B redo logs of the allocator (pm/allocator.hpp)
//   ...    chunk table: one 8-byte word per heap chunk (free / large run / slab of a class)
//   ...    slab bitmaps: chunk_size/512 bytes per chunk, one bit per 64-byte block
//   heap   chunk-aligned; nchunks chunks of chunk_size bytes
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "pm/persist.hpp"
#include "pmhash/options.hpp"
#include "pmhash/status.hpp"

struct pmem2_map;
struct pmem2_source;

namespace pmhash::pm {

inline constexpr char kPoolMagic[8] = {'P', 'M', 'H', 'A', 'S', 'H', 'P', 'L'};
// The first 8 bytes of a file while pmhash creates a pool in it (written before the file is
// sized, replaced by kPoolMagic last): such a file is formatted again by open(create).
inline constexpr char kCreatingMagic[8] = {'P', 'M', 'H', 'A', 'S', 'H', 'N', 'W'};
// 2: the mutable header's `published` word (version 1 pools are refused, not guessed at).
// 3: the live count recorded at a clean close (version 2 pools open, without that check).
inline constexpr uint32_t kPoolFormatVersion = 3;
inline constexpr uint32_t kOldestPoolFormatVersion = 2;
inline constexpr uint64_t kHeaderRegion = 4096;
inline constexpr uint64_t kLanes = 64;
inline constexpr uint64_t kLaneBytes = 256;
inline constexpr uint32_t kMaxDelayNs = 1'000'000;  // injected PM write delay per line

//  0 magic[8] | 8 format_version u32 | 12 header_size u32 | 16 scheme[16] |
// 32 key_format u32 | 36 reserved u32 | 40 uuid[16] | 56 pool_size | 64 chunk_size |
// 72 heap_offset | 80 nchunks | 88 chunk_table_offset | 96 bitmap_offset |
// 104 lanes_offset | 112 nlanes | 120 params[128] (scheme layout, "k=v;k=v") | 248 checksum
struct PoolHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_size;
  char scheme[16];
  uint32_t key_format;
  uint32_t reserved;
  uint8_t uuid[16];
  uint64_t pool_size;
  uint64_t chunk_size;
  uint64_t heap_offset;
  uint64_t nchunks;
  uint64_t chunk_table_offset;
  uint64_t bitmap_offset;
  uint64_t lanes_offset;
  uint64_t nlanes;
  char params[128];
  uint64_t checksum;  // XXH3-64 of the 248 bytes before it
};
static_assert(sizeof(PoolHeader) == 256);

inline constexpr uint64_t kMutableHeaderOffset = 512;
struct MutableHeader {
  uint64_t clean_shutdown;  // 1 after a clean close; 0 while open
  uint64_t root;            // offset of the scheme's root object; 0 until created
  uint64_t published;       // kPublished from the commit that set root; 0 before
  // Format 3: the live items at the last clean close, valid while live_seal holds
  // live_seal(live_count); live_seal 0: no record. The first remove after an open clears
  // live_seal (persisted before the remove), so a valid record is exact after a clean close
  // and a lower bound after a crash: the pool holds at least live_count items.
  uint64_t live_count;
  uint64_t live_seal;
};
uint64_t live_seal(uint64_t count);
// Set in the same redo-logged commit as the root: a root of 0 means "creation never
// finished" only when published is 0 too; any other combination is damage.
inline constexpr uint64_t kPublished = 0x4448'5349'4c42'5550ull;  // "PUBLISHD"

// The valid values of the public enums (hostile callers pass anything).
bool valid_mode(Mode m);
std::string mode_range();  // "auto(0), pm(1), ..." for error messages

uint64_t header_checksum(const PoolHeader& h);

struct PoolArgs {
  std::string scheme;  // empty: accept any scheme (tools)
  Format format = Format::kFixed;
  bool any_format = false;  // tools: accept either format
  Mode mode = Mode::kAuto;
  uint32_t delay_ns = 0;
  bool create = false;
  uint64_t pool_size = 1ull << 30;
  uint64_t chunk_size = 1ull << 20;
  std::string params;  // scheme layout parameters recorded at creation
  PersistHook* hook = nullptr;
  // Inspect without changing the file: shared lock, private copy-on-write mapping (recovery
  // runs in private pages), persistence off. For tools (info, check, export).
  bool read_only = false;
  // A read-only view of a pool this process already holds open exclusively (no lock of its
  // own: the holder's covers it). Index::open validates a crashed pool's committed redo log
  // in such a view before replaying it for real, so a refused open changes nothing.
  bool shadow = false;
};

class Pool {
 public:
  static Status open(const std::string& path, const PoolArgs& args, std::unique_ptr<Pool>* out);
  ~Pool();

  char* base() const { return base_; }
  uint64_t size() const { return size_; }
  const PoolHeader& header() const { return *reinterpret_cast<const PoolHeader*>(base_); }
  MutableHeader& mutable_header() const {
    return *reinterpret_cast<MutableHeader*>(base_ + kMutableHeaderOffset);
  }
  // Unchecked: only for offsets that open/recovery validated (docs/pool-format.md, "Trust").
  template <class T>
  T* ptr(uint64_t off) const {
    return reinterpret_cast<T*>(base_ + off);
  }
  // The one bounds-checked accessor for offsets read from the pool: `count` objects of T at
  // `off`, or null when off is 0, misaligned for T, or the range leaves the pool.
  template <class T>
  T* checked(uint64_t off, uint64_t count = 1) const {
    if (off == 0 || off % alignof(T) != 0 || count > size_ / sizeof(T)) return nullptr;
    return contains(off, count * sizeof(T)) ? ptr<T>(off) : nullptr;
  }
  uint64_t offset(const void* p) const {
    return static_cast<uint64_t>(static_cast<const char*>(p) - base_);
  }
  bool contains(uint64_t off, uint64_t len) const { return off <= size_ && len <= size_ - off; }

  const Persister& persister() const { return persister_; }
  Persister& persister() { return persister_; }
  Mode mode() const { return mode_; }
  Format format() const { return static_cast<Format>(header().key_format); }
  std::string scheme() const;
  std::string params() const;
  const std::string& path() const { return path_; }

  bool was_clean() const { return was_clean_; }  // clean flag found at open
  bool read_only() const { return read_only_; }
  uint64_t root() const;
  bool published() const;      // the published word holds kPublished
  void set_clean(bool clean);  // 8-byte store + persist
  // The live count the last clean close recorded (exact if was_clean(), else a lower bound):
  // Ok with *known = false when there is none (a remove since, a format 2 pool), kCorrupted
  // when the record is damaged.
  Status recorded_count(uint64_t* count, bool* known) const;
  // At a clean close, before set_clean(true); nothing for a format 2 pool (an older build
  // writing it would leave the record stale). A crash inside leaves no record, never a
  // wrong one.
  void record_count(uint64_t count);
  // Before the first remove after an open: the record stops holding (one store, persisted).
  void drop_recorded_count();
  // Root word and published word agree: {0, 0} (creation unfinished) or {root, kPublished}.
  Status check_root_state() const;
  // The scheme refused to create its index here (e.g. too small a pool for its capacity):
  // leave nothing behind. A file this open created is removed; any other is marked as a
  // creation that did not finish, so the next open(create) formats it with new arguments.
  void abandon_creation();

  // Copies [off, off + len) of the pool to out, a hole of a sparse pool's file as the zeros
  // it reads as, without reading it: a load there faults a page in, which on a full tmpfs
  // raises SIGBUS. For checks that may meet pages nothing ever wrote.
  void read_without_backing(uint64_t off, uint64_t len, void* out) const;
  // Flushes [off, off + len) but its pages that are holes of the file: a flush faults a
  // page in like a load. Read-write pools.
  void flush_written(uint64_t off, uint64_t len) const;

  // Allocates the file's pages under [off, off + len) (fallocate), so that a first store
  // there cannot raise SIGBUS for want of room. False only when the file system has no room;
  // a file or device that cannot allocate (device DAX) and a read-only view are left as
  // they are.
  bool back(uint64_t off, uint64_t len);

  // Options::prefault: allocate every page of the file and fault it in (pool.cpp). Called
  // by Index::open only after the pool passed validation, so a refused pool is not grown.
  Status prefault();

  // Test-only fault injection ("mutations") used to prove the crash harness has teeth.
  uint64_t mutations = 0;

 private:
  Pool() = default;
  Status map(const PoolArgs& args);
  Status create_layout(const PoolArgs& args);
  bool page_is_hole(uint64_t page_off, int pagemap) const;  // pagemap: -1 or an open fd
  Status open_existing(const PoolArgs& args, uint64_t file_size);

  std::string path_;
  int fd_ = -1;
  pmem2_source* source_ = nullptr;
  pmem2_map* map_ = nullptr;
  char* base_ = nullptr;
  uint64_t size_ = 0;
  Mode mode_ = Mode::kAuto;
  Persister persister_;
  bool was_clean_ = false;
  bool read_only_ = false;
  bool created_file_ = false;  // this open created the file
};

// Where a pool of `pool_size` bytes puts its metadata and heap (pure; validates the sizes).
struct Layout {
  uint64_t pool_size, chunk_size, nchunks, lanes_off, table_off, bitmap_off, heap_off;
};
Status plan_layout(uint64_t pool_size, uint64_t chunk_size, Layout* out);
// Every check open makes of a header copy, without the file: the first problem, or Ok.
Status validate_header(const PoolHeader& h, uint64_t file_size, const std::string& path);
// How durability is obtained for a file: the one mode detection (library and tools).
Mode detect_mode(int fd, bool dax);

// A mutation is active when its bit is set in Pool::mutations. Compiled out without hooks.
#ifdef PMHASH_CRASH_HOOKS
#define PMHASH_MUTATION(pool, bit) (((pool).mutations & (bit)) != 0)
#else
#define PMHASH_MUTATION(pool, bit) false
#endif

}  // namespace pmhash::pm
