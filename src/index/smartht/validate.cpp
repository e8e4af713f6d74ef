// Read-only validation before open (SchemeFactory::validate); mirrors SmartHT::open's checks.
#include "index/smartht/smartht.hpp"

namespace pmhash::smartht {

Status validate(const SchemeContext& ctx) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  if (r == nullptr) return damaged(ctx, "smartht", "root object missing or damaged");
  if (r->nheads == 0 || r->stripe == 0 || r->stripe > (uint64_t{1} << 32))
    return damaged(ctx, "smartht",
                   "root has " + std::to_string(r->nheads) + " head buckets, stripe " +
                       std::to_string(r->stripe));
  if (block_array<Bucket>(ctx, r->heads, r->nheads) == nullptr)
    return damaged(ctx, "smartht",
                   "head bucket array at offset " + std::to_string(r->heads) + " missing");
  if (r->saved_filter != 0 && ctx.alloc.block_size(r->saved_filter) == 0)
    return damaged(ctx, "smartht",
                   "saved filter at offset " + std::to_string(r->saved_filter) + " missing");
  return Status::Ok();
}

}  // namespace pmhash::smartht
