// Read-only validation before open (SchemeFactory::validate): the root, the directory and
// every shard it points to. Mirrors LineHT::open's checks without changing anything.
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
  for (uint64_t s = 0; s < r->nshards; ++s)
    if (block_array<Bucket>(ctx, packed_offset(d[s]), packed_count(d[s])) == nullptr)
      return damaged(ctx, "lineht",
                     "shard " + std::to_string(s) + " points nowhere (offset " +
                         std::to_string(packed_offset(d[s])) + ", " +
                         std::to_string(packed_count(d[s])) + " buckets)");
  return Status::Ok();
}

// Items in the buckets, counting up to `enough` (Index::open compares them with the live
// count recorded at the last clean close: a published pool never opens empty). Runs after
// validate(), so the directory and shards are known to be sound.
uint64_t items_found(const SchemeContext& ctx, uint64_t enough) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  const uint64_t* d = ctx.pool.ptr<uint64_t>(r->directory);
  uint64_t n = 0;
  for (uint64_t s = 0; s < r->nshards && n < enough; ++s) {
    const Bucket* b = ctx.pool.ptr<Bucket>(packed_offset(d[s]));
    for (uint64_t i = 0; i < packed_count(d[s]) && n < enough; ++i)
      n += std::popcount(Bucket::valid(b[i].meta));
  }
  return n;
}

}  // namespace pmhash::lineht
