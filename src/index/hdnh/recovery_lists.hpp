// Recovery's lists between its two passes (§3.7, recovery.cpp): the records one recovery
// thread found for hot-table partitions other than the one it was traversing.
#pragma once

#include <cassert>
#include <cstdint>
#include <new>
#include <vector>

#include "index/hdnh/hot_table.hpp"

namespace pmhash::hdnh {

// A record found by the recovery traversal, for the hot table.
struct HotRecord {
  uint64_t h1, kw, vw;
};

// One list per partition, each a chain of 4 KiB chunks cut in order from one arena on
// transparent huge pages. (A std::vector per partition took a 4 KiB page fault, with its
// zeroing, every 170 records: 240 ms -> 212 ms for a fresh process's recovery at 10M keys,
// docs/schemes/hdnh.md.) The arena is sized for every record the thread can find, so a
// push never allocates.
//
//   chunk (4096 bytes): next chunk (8) | unused (8) | 170 records of 24 bytes
class RecordLists {
 public:
  struct Chunk {
    static constexpr uint32_t kRecords = (4096 - 16) / sizeof(HotRecord);
    Chunk* next;
    uint64_t unused;
    HotRecord r[kRecords];
  };
  static_assert(sizeof(Chunk) == 4096);

  // Room for `records` records in `parts` lists, in any split (address space: only the
  // pages written are faulted in). Every chunk of a list but its last is full, so a split
  // n_0 .. n_(parts-1) takes sum ceil(n_q / kRecords) <= records / kRecords + parts chunks.
  static uint64_t chunks_for(unsigned parts, uint64_t records) {
    return records / Chunk::kRecords + parts;
  }
  RecordLists(unsigned parts, uint64_t records)
      : tail_(parts),
        bytes_(chunks_for(parts, records) * sizeof(Chunk)),
        arena_(static_cast<char*>(common::map_zeroed(bytes_, /*huge=*/true))) {}
  ~RecordLists() { common::unmap_zeroed(arena_, bytes_); }
  RecordLists(const RecordLists&) = delete;
  RecordLists& operator=(const RecordLists&) = delete;

  void push(unsigned q, const HotRecord& r) {
    Tail& t = tail_[q];
    if (t.chunk == nullptr || t.n == Chunk::kRecords) start_chunk(t);
    t.chunk->r[t.n++] = r;
    // The list's next line, for its next record (hundreds of records later): no
    // read-for-ownership stall in that store. (An address past the chunk, or the arena, is
    // harmless to a prefetch.)
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(t.chunk->r + t.n) +
                                                     2 * sizeof(HotRecord)),
                       1);
  }

  uint64_t chunks_used() const { return used_ / sizeof(Chunk); }
  uint64_t chunks_room() const { return bytes_ / sizeof(Chunk); }

  // fn(record) for list q's records, in the order pushed.
  template <class Fn>
  void for_each(unsigned q, Fn fn) const {
    const Tail& t = tail_[q];
    for (const Chunk* c = t.head; c != nullptr; c = c->next) {
      const uint32_t n = c == t.chunk ? t.n : Chunk::kRecords;
      for (uint32_t i = 0; i < n; ++i) fn(c->r[i]);
    }
  }

 private:
  struct Tail {
    Chunk* head = nullptr;
    Chunk* chunk = nullptr;  // the last chunk, with n records
    uint32_t n = 0;
  };
  // Never past the arena: see chunks_for.
  void start_chunk(Tail& t) {
    assert(used_ + sizeof(Chunk) <= bytes_);
    Chunk* c = ::new (arena_ + used_) Chunk;
    used_ += sizeof(Chunk);
    c->next = nullptr;
    if (t.chunk != nullptr)
      t.chunk->next = c;
    else
      t.head = c;
    t.chunk = c;
    t.n = 0;
  }

  std::vector<Tail> tail_;
  uint64_t bytes_;
  char* arena_;
  uint64_t used_ = 0;
};

}  // namespace pmhash::hdnh
