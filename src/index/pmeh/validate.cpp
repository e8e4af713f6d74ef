// Read-only validation before open (SchemeFactory::validate): Pmeh::open's checks plus the
// directory -> segment mapping of the latest directory (the one recovery and lookups follow).
#include <bit>
#include <vector>

#include "index/pmeh/pmeh.hpp"

namespace pmhash::pmeh {

uint64_t& open_segment_reads() {
  thread_local uint64_t n = 0;
  return n;
}

namespace {

// Directory number n, as Pmeh::dir finds it: in ring entry n % kMaxDirs, with that number.
const Directory* dir_number(const SchemeContext& ctx, const Root& r, uint64_t n) {
  uint64_t off = r.dirs[n % kMaxDirs];
  if (off == 0) return nullptr;
  const Directory* d = ctx.pool.checked<Directory>(off);
  return d != nullptr && (d->number == n || (d->number == 0 && n < kMaxDirs)) ? d : nullptr;
}

// The directory -> segment mapping the hot paths trust (docs/schemes/pmeh.md, "Trust"),
// as far as the directories alone tell: every entry of the latest directory leads, through
// the older directories where its zone is not filled yet (find_segment's walk), to an
// allocated, aligned block of a segment's size. No segment is read, so that recovery stays
// instant (§III-F): that the segment covers all of the entry's hashes (seg::covers_entry)
// and has a crash version an open used is checked at its first access instead
// (Pmeh::check_first_access). Directory sizes were checked by the caller. Every state a
// crash can leave (a split record not yet redone, a zone fill cut short) satisfies it: a
// split publishes the new segment before the entries point at it.
Status validate_mapping(const SchemeContext& ctx, const Root& r) {
  const uint64_t k = r.latest_dir;
  const Directory* ld = dir_number(ctx, r, k);
  std::vector<const Directory*> older;  // newest first, as the walk goes
  for (uint64_t j = k; j-- > (k >= kMaxDirs - 1 ? k - (kMaxDirs - 1) : 0);) {
    const Directory* d = dir_number(ctx, r, j);
    if (d != nullptr && d->depth > ld->depth)
      return damaged(ctx, "pmeh",
                     "directory " + std::to_string(j) + " is deeper (" + std::to_string(d->depth) +
                         ") than the latest (" + std::to_string(ld->depth) + ")");
    older.push_back(d);
  }
  auto where = [&](uint64_t t) {
    return "hash prefix " + std::to_string(t) + " of the latest directory (" + std::to_string(k) +
           ", depth " + std::to_string(ld->depth) + ")";
  };
  uint64_t prev = 0;  // consecutive entries mostly share a segment: look it up once
  for (uint64_t t = 0; t < (uint64_t{1} << ld->depth); ++t) {
    uint64_t so = ld->entries[t];
    for (size_t i = 0; so == 0 && i < older.size(); ++i)
      if (older[i] != nullptr) so = older[i]->entries[t >> (ld->depth - older[i]->depth)];
    if (so == 0) return damaged(ctx, "pmeh", where(t) + " leads to no segment");
    if (so != prev && (so % alignof(SegmentHeader) != 0 ||
                       block_array<uint64_t>(ctx, so, r.segment_bytes / 8) == nullptr))
      return damaged(ctx, "pmeh",
                     where(t) + " leads to offset " + std::to_string(so) + ", not a segment");
    prev = so;
  }
  return Status::Ok();
}

}  // namespace

Status validate(const SchemeContext& ctx) {
  open_segment_reads() = 0;
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  if (r == nullptr) return damaged(ctx, "pmeh", "root object missing or damaged");
  if (r->segment_bytes < 2048 || r->segment_bytes > 131072 ||
      !std::has_single_bit(r->segment_bytes) || r->split_shift == 0 || r->split_shift > 4 ||
      r->zone_bits > 12)
    return damaged(ctx, "pmeh",
                   "root parameters impossible (segment " + std::to_string(r->segment_bytes) +
                       " B, split shift " + std::to_string(r->split_shift) + ", zone bits " +
                       std::to_string(r->zone_bits) + ")");
  uint64_t zones = uint64_t{1} << r->zone_bits;
  if (block_array<SplitRecord>(ctx, r->split_log, zones) == nullptr)
    return damaged(ctx, "pmeh", "split log at offset " + std::to_string(r->split_log) + " missing");
  // The directory array is a ring: directory number n lives in entry n % kMaxDirs.
  uint64_t latest = r->latest_dir % kMaxDirs;
  if (r->dirs[latest] == 0)
    return damaged(ctx, "pmeh", "latest directory " + std::to_string(r->latest_dir) + " missing");
  for (uint64_t j = 0; j < kMaxDirs; ++j) {
    if (r->dirs[j] == 0) continue;
    const auto* d = block_array<Directory>(ctx, r->dirs[j], 1);
    std::string where =
        "directory entry " + std::to_string(j) + " at offset " + std::to_string(r->dirs[j]);
    if (d == nullptr || d->depth > 40 ||
        ctx.alloc.block_size(r->dirs[j]) < sizeof(Directory) + (8ull << d->depth))
      return damaged(ctx, "pmeh", where + " damaged");
    if (j != latest) continue;
    // Pools written before the ring keep number 0 with the index as their number.
    if (d->number != r->latest_dir && !(d->number == 0 && r->latest_dir < kMaxDirs))
      return damaged(ctx, "pmeh",
                     where + ": number " + std::to_string(d->number) +
                         " is not the latest directory's " + std::to_string(r->latest_dir));
  }
  return validate_mapping(ctx, *r);
}

// Allocated slots of the segments the latest directory leads to (validate() checked that
// mapping), stopping at `enough`. Without the covers() filter: after a split a record can be
// counted in both segments, so this is only ever asked for "at least one".
uint64_t items_found(const SchemeContext& ctx, uint64_t enough) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  const Directory* ld = dir_number(ctx, *r, r->latest_dir);
  std::vector<const Directory*> older;
  for (uint64_t j = r->latest_dir;
       j-- > (r->latest_dir >= kMaxDirs - 1 ? r->latest_dir - (kMaxDirs - 1) : 0);)
    older.push_back(dir_number(ctx, *r, j));
  const uint64_t nb = r->segment_bytes / sizeof(Bucket) - 1;  // buckets and stash
  uint64_t n = 0, prev = 0;
  for (uint64_t t = 0; t < (uint64_t{1} << ld->depth) && n < enough; ++t) {
    uint64_t so = ld->entries[t];
    for (size_t i = 0; so == 0 && i < older.size(); ++i)
      if (older[i] != nullptr) so = older[i]->entries[t >> (ld->depth - older[i]->depth)];
    if (so == prev) continue;
    prev = so;
    ++open_segment_reads();
    const Bucket* b = reinterpret_cast<const Bucket*>(ctx.pool.ptr<SegmentHeader>(so) + 1);
    for (uint64_t i = 0; i < nb && n < enough; ++i) n += std::popcount(word::alloc(b[i].word0));
  }
  return n;
}

}  // namespace pmhash::pmeh
