// Read-only validation before open (SchemeFactory::validate); mirrors Wophi::open's checks.
#include <bit>

#include "index/wophi/wophi.hpp"

namespace pmhash::wophi {

namespace {

// A chain link must be a bucket of a PAB area or an allocated 128-byte block.
bool valid_link(const SchemeContext& ctx, const Root& r, uint64_t off) {
  for (uint64_t a = 0; a < r.nareas; ++a) {
    uint64_t base = r.areas[a], n = r.pab_initial << a;
    if (off >= base && off < base + n * sizeof(Bucket)) return (off - base) % sizeof(Bucket) == 0;
  }
  return ctx.alloc.block_size(off) == sizeof(Bucket);
}

// Every chain, so that the walks after open (get, put, remove, size, for_each, check,
// recover_pab) can follow links unchecked. More links than the pool has 128-byte blocks
// means a cycle.
Status validate_chains(const SchemeContext& ctx, const Root& r) {
  const Bucket* mains = ctx.pool.ptr<Bucket>(r.buckets);
  uint64_t links = 0, limit = ctx.pool.size() / sizeof(Bucket);
  for (uint64_t i = 0; i < r.nbuckets; ++i)
    for (const Bucket* b = mains + i; b->next != 0; b = ctx.pool.ptr<Bucket>(b->next)) {
      if (!valid_link(ctx, r, b->next))
        return damaged(ctx, "wophi",
                       "bucket " + std::to_string(i) + "'s chain links offset " +
                           std::to_string(b->next) + ", not a bucket");
      if (++links > limit)
        return damaged(ctx, "wophi", "bucket " + std::to_string(i) + "'s chain does not end");
    }
  return Status::Ok();
}

}  // namespace

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
  return validate_chains(ctx, *r);
}

// Every live slot of the main buckets and their chains (validate() checked the chains).
uint64_t items_found(const SchemeContext& ctx, uint64_t enough) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  const Bucket* mains = ctx.pool.ptr<Bucket>(r->buckets);
  uint64_t n = 0;
  for (uint64_t i = 0; i < r->nbuckets && n < enough; ++i)
    for (const Bucket* b = mains + i;; b = ctx.pool.ptr<Bucket>(b->next)) {
      for (int j = 0; j < kSlots; ++j) n += b->live(j);
      if (b->next == 0) break;
    }
  return n;
}

}  // namespace pmhash::wophi
