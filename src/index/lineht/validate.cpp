// Read-only validation before open (SchemeFactory::validate): the root, the directory and
// every shard it points to. Mirrors LineHT::open's checks without changing anything.
#include <bit>
#include <vector>

#include "index/lineht/lineht.hpp"

namespace pmhash::lineht {

// Every shard word names an allocated block of its size (checked before), and no two name
// the same one, nor the root's or the directory's: a word damaged into another live block's
// offset would make two shards write one array, and a crash open's sweep would free the
// block the damaged word lost. (A 1-bucket shard's word damaged into a variable-format
// item's block is not caught: that needs every slot.)
//
// The offsets go into an open-addressing set at most 3/4 full (8-21 bytes per shard, 1 MiB
// for the at most 65,536 shards a capacity hint gives), so the check's cost follows the
// shards, not the pool: a bit per 64-byte line of the pool faulted in pages across the
// shards' span, 0.8 ms at 100M keys, and 14 ms in opens where the kernel compacted memory
// for its huge pages (session 22). Offset 0 is the pool header, never a block: a free slot.
Status shards_distinct(const SchemeContext& ctx, const Root* r, const uint64_t* d) {
  std::vector<uint64_t> set(std::bit_ceil((r->nshards + 2) * 4 / 3 + 1), 0);
  const int shift = 64 - std::countr_zero(set.size());
  auto first_claim = [&](uint64_t off) {
    for (uint64_t i = (off / 64) * 0x9E3779B97F4A7C15ull >> shift;; i = (i + 1) % set.size()) {
      if (set[i] == off) return false;
      if (set[i] == 0) {
        set[i] = off;
        return true;
      }
    }
  };
  bool ok = first_claim(ctx.pool.root()) && first_claim(r->directory);
  for (uint64_t s = 0; ok && s < r->nshards; ++s)
    if (!first_claim(packed_offset(d[s])))
      return damaged(ctx, "lineht",
                     "shard " + std::to_string(s) + " names the block at offset " +
                         std::to_string(packed_offset(d[s])) +
                         ", which another shard, the root or the directory names too");
  if (!ok) return damaged(ctx, "lineht", "the root and the directory name one block");
  return Status::Ok();
}

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
  return shards_distinct(ctx, r, d);
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
