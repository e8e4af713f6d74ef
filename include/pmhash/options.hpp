// pmhash — options for opening or creating an index.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace pmhash {

// Key/value format, chosen at creation and recorded in the pool.
//  fixed:    8-byte keys and 8-byte values stored inline (the papers' setup).
//  variable: byte strings stored out of line; the slot holds an 8-byte hashed key and an
//            8-byte offset of the item (TurboHash §3.6).
enum class Format : uint32_t { kFixed = 0, kVariable = 1 };

// How durability is obtained. Always reported back in Stats::mode.
//  kAuto:     kPm on DAX, kEmulated under /dev/shm (tmpfs), kMsync elsewhere.
//  kPm:       DAX/real PM, cache-line flush (nothing to flush under eADR).
//  kEmulated: any file, cache-line flush; survives a process crash, not a power loss.
//  kMsync:    page-cache file made durable with msync.
//  kNone:     persistence off: flush and fence do nothing (benchmark baseline only).
enum class Mode : uint32_t { kAuto = 0, kPm, kEmulated, kMsync, kNone };

const char* format_name(Format f);
const char* mode_name(Mode m);

struct Options {
  std::string scheme = "turbohash";
  Format format = Format::kFixed;
  Mode mode = Mode::kAuto;
  bool create = true;               // create the pool when the file is missing or empty
  uint64_t pool_size = 1ull << 30;  // bytes, for a new pool (the file is sparse)
  uint64_t capacity_hint = 0;       // expected number of keys; schemes size tables from it
  uint32_t pm_write_delay_ns = 0;   // injected delay per flushed line (emulates slower PM)
  // Fault every page of the pool in at open (PMDK's prefault): no operation takes a
  // first-touch page fault later, and a pool the file system has no room for is refused at
  // open (without it, writes fail with kPoolFull once the file system is full). Costs time at open
  // and pool_size of memory or media from then on; it runs after validation, so a refused (e.g.
  // damaged) pool's file is left as it was. Msync mode only allocates (populating would write the
  // whole pool back); kernels before 5.14 only allocate (no MADV_POPULATE_WRITE).
  bool prefault = false;
  // Scheme-specific knobs ("shards", "buckets", "scope", ...); see docs/schemes/<scheme>.md.
  std::map<std::string, std::string> params;
};

}  // namespace pmhash
