// Read-only validation before open (SchemeFactory::validate): Pmeh::open's checks plus the
// entries of the latest directory (the one recovery and lookups follow).
#include "index/pmeh/pmeh.hpp"

namespace pmhash::pmeh {

Status validate(const SchemeContext& ctx) {
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
    for (uint64_t e = 0; e < (uint64_t{1} << d->depth); ++e) {
      uint64_t seg = d->entries[e];
      if (seg != 0 && ctx.alloc.block_size(seg) < r->segment_bytes)
        return damaged(ctx, "pmeh",
                       where + ": entry " + std::to_string(e) + " points to no segment (offset " +
                           std::to_string(seg) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace pmhash::pmeh
