// Read-only validation before open (SchemeFactory::validate): what open() and the shard
// walk dereference first. Mirrors TurboHash::open's checks without changing anything.
#include <bit>

#include "index/turbohash/turbohash.hpp"

namespace pmhash::turbohash {

Status validate(const SchemeContext& ctx) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  if (r == nullptr) return damaged(ctx, "turbohash", "root object missing or damaged");
  if (r->nshards == 0 || r->nshards > (1u << 24) || r->scope == 0 || r->scope > 1024)
    return damaged(
        ctx, "turbohash",
        "root has " + std::to_string(r->nshards) + " shards and scope " + std::to_string(r->scope));
  const Descriptor* d = block_array<Descriptor>(ctx, r->directory, r->nshards);
  if (d == nullptr)
    return damaged(ctx, "turbohash",
                   "shard directory at offset " + std::to_string(r->directory) + " missing");
  for (uint64_t s = 0; s < r->nshards; ++s) {
    uint64_t live = d[s].set[d[s].version & 1];
    if (block_array<Bucket>(ctx, packed_offset(live), packed_count(live)) == nullptr)
      return damaged(ctx, "turbohash",
                     "shard " + std::to_string(s) + " points nowhere (offset " +
                         std::to_string(packed_offset(live)) + ", " +
                         std::to_string(packed_count(live)) + " buckets)");
  }
  return Status::Ok();
}

// Live slots by the buckets' metadata words, shard by shard (validate() checked the shards).
uint64_t items_found(const SchemeContext& ctx, uint64_t enough) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  const Descriptor* d = ctx.pool.ptr<Descriptor>(r->directory);
  uint64_t n = 0;
  for (uint64_t s = 0; s < r->nshards && n < enough; ++s) {
    uint64_t live = d[s].set[d[s].version & 1];
    const Bucket* b = ctx.pool.ptr<Bucket>(packed_offset(live));
    for (uint64_t i = 0; i < packed_count(live) && n < enough; ++i)
      n += std::popcount(Bucket::live(b[i].meta));
  }
  return n;
}

}  // namespace pmhash::turbohash
