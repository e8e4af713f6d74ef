// Read-only validation before open (SchemeFactory::validate): the root, the directory and
// every shard it points to. Mirrors LineHT::open's checks without changing anything.
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

}  // namespace pmhash::lineht
