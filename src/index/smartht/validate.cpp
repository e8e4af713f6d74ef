// Read-only validation before open (SchemeFactory::validate); mirrors SmartHT::open's checks.
#include <bit>

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

// Live slots of the head buckets, then of the chains, each link checked as the hot paths
// do (an allocated 64-byte block; no more links than the pool has blocks).
uint64_t items_found(const SchemeContext& ctx, uint64_t enough) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  const Bucket* heads = ctx.pool.ptr<Bucket>(r->heads);
  auto live = [](const Bucket& b) {
    uint64_t k = 0;
    for (int i = 0; i < kSlots; ++i) k += b.live(i);
    return k;
  };
  uint64_t n = 0;
  for (uint64_t h = 0; h < r->nheads && n < enough; ++h) n += live(heads[h]);
  uint64_t links = 0, limit = ctx.pool.size() / sizeof(Bucket);
  for (uint64_t h = 0; h < r->nheads && n < enough; ++h)
    for (uint64_t next = heads[h].next; next != 0 && n < enough && ++links <= limit;) {
      if (ctx.alloc.block_size(next) != sizeof(Bucket)) break;  // damage: check() says where
      const Bucket* b = ctx.pool.ptr<Bucket>(next);
      n += live(*b);
      next = b->next;
    }
  return n;
}

}  // namespace pmhash::smartht
