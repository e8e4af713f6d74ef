// Publishing a commit word that lock-free readers load (durable linearizability).
//
// A write whose last step is one 8-byte store to PM (a bucket's metadata word, a bitmap)
// is visible to other threads as soon as it is stored, but durable only after the flush
// and fence that follow. A lock-free reader that acts on it in between returns something a
// crash can take back. Link-and-persist (David et al., "Log-Free Concurrent Data
// Structures", USENIX ATC '18) closes the window with one spare bit of the word:
//
//   writer:  store(value | mark); persist; store(value)     (the last store is not flushed:
//                                                           with or without the mark the
//                                                           word says the same)
//   reader:  v = load(); if (v & mark) persist the word     (it helps: what it acts on is
//                                                           then durable)
//
// Recovery and every other reader ignore the mark. The cost is one more store to a line
// the writer already holds; a reader flushes only when it meets a write in flight.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

#include "pm/persist.hpp"

namespace pmhash::pm {

inline void publish_persisted(const Persister& p, uint64_t* word, uint64_t value, uint64_t mark) {
  std::atomic_ref<uint64_t> w(*word);
  w.store(value | mark, std::memory_order_release);
  p.persist(word, sizeof *word);
  w.store(value, std::memory_order_release);
}

// The word with the mark cleared, persisted first if a writer had not persisted it yet.
inline uint64_t load_persisted(const Persister& p, const uint64_t* word, uint64_t mark) {
  uint64_t v =
      std::atomic_ref<uint64_t>(const_cast<uint64_t&>(*word)).load(std::memory_order_acquire);
  if (v & mark) p.persist(word, sizeof *word);
  return v & ~mark;
}

// For a walk that reports many words (for_each, size): the word with the mark cleared, its
// line flushed if a writer had not persisted it yet — no fence: the walk's caller fences
// once before it reports what the walk read (Index::for_each per piece, Index::size).
inline uint64_t load_flushed(const Persister& p, const uint64_t* word, uint64_t mark) {
  uint64_t v =
      std::atomic_ref<uint64_t>(const_cast<uint64_t&>(*word)).load(std::memory_order_acquire);
  if (v & mark) p.flush(word, sizeof *word);
  return v & ~mark;
}

// For a walk whose writers show a write in flight by a bit held from before their first PM
// store until after their persist (HDNH's OCF busy bits, PMEH's bucket locks) instead of a
// mark in the commit word: a walk that finds that bit set after reading a bucket flushes the
// bucket's commit word and the slots it reports from the bucket (bit i of `reported`: slot
// i; an in-place update commits through a slot's value word), each line once; no fence, as
// load_flushed. Slots must not straddle a line.
template <class Slot>
inline void flush_reported(const Persister& p, const uint64_t* commit_word, const Slot* slots,
                           uint32_t reported) {
  auto line = [](const void* a) { return reinterpret_cast<uintptr_t>(a) / kCacheLine; };
  p.flush(commit_word, sizeof *commit_word);
  uintptr_t flushed = line(commit_word);
  for (; reported != 0; reported &= reported - 1) {
    const Slot* s = &slots[std::countr_zero(reported)];
    if (line(s) == flushed) continue;  // slots ascend: a line's slots are consecutive
    p.flush(s, sizeof *s);
    flushed = line(s);
  }
}

}  // namespace pmhash::pm
