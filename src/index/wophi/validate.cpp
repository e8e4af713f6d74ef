// Read-only validation before open (SchemeFactory::validate); mirrors Wophi::open's checks.
#include "index/wophi/wophi.hpp"

namespace pmhash::wophi {

Status validate(const SchemeContext& ctx) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  if (r == nullptr) return damaged(ctx, "wophi", "root object missing or damaged");
  if (r->nbuckets == 0 || r->stripe == 0 || r->pab_initial == 0 || r->pab_initial > (1ull << 32) ||
      r->nareas == 0 || r->nareas > kMaxAreas)
    return damaged(ctx, "wophi",
                   "root has " + std::to_string(r->nbuckets) + " buckets, stripe " +
                       std::to_string(r->stripe) + ", " + std::to_string(r->nareas) +
                       " PAB areas of initially " + std::to_string(r->pab_initial));
  if (block_array<Bucket>(ctx, r->buckets, r->nbuckets) == nullptr)
    return damaged(ctx, "wophi",
                   "main buckets at offset " + std::to_string(r->buckets) + " missing");
  uint64_t total = 0;
  for (uint64_t a = 0; a < r->nareas; ++a) {
    if (block_array<Bucket>(ctx, r->areas[a], r->pab_initial << a) == nullptr)
      return damaged(ctx, "wophi",
                     "PAB area " + std::to_string(a) + " at offset " + std::to_string(r->areas[a]) +
                         " missing");
    total += r->pab_initial << a;
  }
  if (r->expand_bucket_num > total)
    return damaged(ctx, "wophi",
                   std::to_string(r->expand_bucket_num) + " PAB buckets handed out of " +
                       std::to_string(total));
  return Status::Ok();
}

}  // namespace pmhash::wophi
