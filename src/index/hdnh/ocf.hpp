// The OCF entry encoding (§3.2, Fig. 4).
#pragma once

#include <atomic>
#include <cstdint>

namespace pmhash::hdnh {

// OCF entry (§3.2, Fig. 4), 2 bytes per non-volatile slot, changed only by CAS:
//   bits 0..7 fingerprint (low byte of the key's hash) | bit 8 bitmap | bit 9 opmap |
//   bits 10..15 version
namespace ocf {
inline constexpr uint16_t kValid = 1u << 8, kBusy = 1u << 9, kVersionOne = 1u << 10;
inline uint8_t fp(uint16_t e) {
  return static_cast<uint8_t>(e);
}
inline bool valid(uint16_t e) {
  return (e & kValid) != 0;
}
inline bool busy(uint16_t e) {
  return (e & kBusy) != 0;
}
// The entry after a writer's change: new fingerprint and bitmap bit, unlocked, version + 1.
inline uint16_t next(uint16_t e, bool is_valid, uint8_t f) {
  return static_cast<uint16_t>(((e & 0xFC00u) + kVersionOne) | (is_valid ? kValid : 0) | f);
}

// A bucket's change count (DRAM, 4 bytes per bucket, beside the OCF): the proof that a miss
// in a bucket is a miss. The 6-bit versions cannot give it: 64 changes of one entry during
// one scan restore the entry bit for bit. A writer bumps the count *before* each release of
// an entry (release_entry); a scan reads it before its first entry and again before a miss
// counts (scan_start, changed_since). Equal counts mean every release the scan saw was
// counted before the scan began, so the scan saw the bucket as it was at one instant, but
// for at most one release per writer in flight (counted before the scan, stored during it):
// an update's second release (the old slot) is bumped only after its first (the new slot)
// is stored, so the scan sees the new slot valid or the old one still locked. Locking an
// entry (opmap on, nothing else) does not bump: it never moves a record, and every lock
// ends in a release. The count wraps only after 2^32 releases in one bucket during one
// scan: a reader descheduled for minutes (most releases follow a persisted PM write).
inline void release_entry(std::atomic<uint16_t>& entry, std::atomic<uint32_t>& changes,
                          uint16_t value) {
  // Release: a scan whose first read of the count sees this bump synchronizes with it (every
  // bump is an RMW, so it heads a release sequence) and so sees every store this writer
  // made before it -- an update's new-slot release before its old-slot bump. Relaxed lets
  // the scan see the bump but not the new slot (C++ model, ARM/POWER, or a compiler that
  // hoists the relaxed RMW above the preceding release store). Same lock xadd on x86.
  changes.fetch_add(1, std::memory_order_release);
  entry.store(value, std::memory_order_release);
}
inline uint32_t scan_start(const std::atomic<uint32_t>& changes) {
  return changes.load(std::memory_order_acquire);  // acquire: before the entries' loads
}
inline bool changed_since(const std::atomic<uint32_t>& changes, uint32_t seen) {
  return changes.load(std::memory_order_acquire) != seen;  // after the entries' (acquire) loads
}
}  // namespace ocf

}  // namespace pmhash::hdnh
