// Read-only validation before open (SchemeFactory::validate): the root and the directory.
// The shard words are checked at each shard's first use (LineHT::locked_view), so that an
// open reads none of them; but for the variable format's open after a crash, which sweeps
// the items no slot reaches, all of them now: a shard skipped as damaged would have its
// items freed.
#include <bit>

#include "index/lineht/lineht.hpp"

namespace pmhash::lineht {

Status validate(const SchemeContext& ctx) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  if (r == nullptr) return damaged(ctx, "lineht", "root object missing or damaged");
  if (r->nshards == 0 || r->nshards > kMaxShards || r->probe == 0 || r->probe > kMaxProbe)
    return damaged(
        ctx, "lineht",
        "root has " + std::to_string(r->nshards) + " shards and probe " + std::to_string(r->probe));
  const uint64_t* d = block_array<uint64_t>(ctx, r->directory, r->nshards);
  if (d == nullptr)
    return damaged(ctx, "lineht",
                   "shard directory at offset " + std::to_string(r->directory) + " missing");
  const bool sweeps = ctx.items.variable() && !ctx.pool.was_clean();
  for (uint64_t s = 0; sweeps && s < r->nshards; ++s)
    if (!shard_sound(ctx.alloc, d[s]))
      return damaged(ctx, "lineht",
                     "shard " + std::to_string(s) + " points nowhere (offset " +
                         std::to_string(packed_offset(d[s])) + ", " +
                         std::to_string(packed_count(d[s])) + " buckets)");
  return Status::Ok();
}

// Items in the buckets, counting up to `enough` (Index::open compares them with the live
// count recorded at the last clean close: a published pool never opens empty). Runs after
// validate(), so the directory is known to be sound; a shard word that names no bucket
// array holds no item here (its first use reports it).
uint64_t items_found(const SchemeContext& ctx, uint64_t enough) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  const uint64_t* d = ctx.pool.ptr<uint64_t>(r->directory);
  uint64_t n = 0;
  for (uint64_t s = 0; s < r->nshards && n < enough; ++s) {
    if (!shard_sound(ctx.alloc, d[s])) continue;
    const Bucket* b = ctx.pool.ptr<Bucket>(packed_offset(d[s]));
    for (uint64_t i = 0; i < packed_count(d[s]) && n < enough; ++i)
      n += std::popcount(Bucket::valid(b[i].meta));
  }
  return n;
}

}  // namespace pmhash::lineht
