// Read-only validation before open (SchemeFactory::validate): the root, the directory and
// every shard it points to. Mirrors LineHT::open's checks without changing anything.
#include <algorithm>
#include <bit>

#include "common/zeroed_map.hpp"
#include "index/lineht/lineht.hpp"

namespace pmhash::lineht {

// Every shard word names an allocated block of its size (checked before), and no two name
// the same one, nor the root's or the directory's: a word damaged into another live block's
// offset would make two shards write one array, and a crash open's sweep would free the
// block the damaged word lost. (A 1-bucket shard's word damaged into a variable-format
// item's block is not caught: that needs every slot.)
//
// Distinct live blocks of at least `unit` bytes start at least `unit` bytes apart, so one
// bit per `unit` bytes of the pool tells the shards apart, `unit` being the shortest shard's
// size rounded down to a power of two: 16 KiB of bits for an 8 GiB pool of 64 KiB shards
// (~100M keys), a bit per 64-byte line (pool / 512 bytes) only for 1-bucket shards. Sparse
// zero pages of 4 KiB: a bit per line on huge pages cost 0.8 ms at 100M keys, 14 ms in
// opens where the kernel compacted memory for them; a hash set of the offsets (session 22's
// first version) was slower past ~100K shards and zero-filled 256 MiB for 2^24 of them
// (helper-43's review). The root and the directory are compared, not marked: they may be
// smaller than `unit`.
Status shards_distinct(const SchemeContext& ctx, const Root* r, const uint64_t* d) {
  const uint64_t root = ctx.pool.root();
  if (root == r->directory)
    return damaged(ctx, "lineht", "the root and the directory name one block");
  uint64_t unit = UINT64_MAX;
  for (uint64_t s = 0; s < r->nshards; ++s)
    unit = std::min(unit, std::max<uint64_t>(packed_count(d[s]), 1) * sizeof(Bucket));
  const int shift = std::countr_zero(std::bit_floor(unit));
  common::ZeroedMap map((ctx.pool.size() >> shift) / 8 + 8);
  auto* seen = map.as<uint64_t>();
  auto first_claim = [&](uint64_t off) {
    uint64_t u = off >> shift, bit = uint64_t{1} << (u % 64);
    bool first = (seen[u / 64] & bit) == 0;
    seen[u / 64] |= bit;
    return first;
  };
  for (uint64_t s = 0; s < r->nshards; ++s) {
    uint64_t off = packed_offset(d[s]);
    if (off == root || off == r->directory || !first_claim(off))
      return damaged(ctx, "lineht",
                     "shard " + std::to_string(s) + " names the block at offset " +
                         std::to_string(off) +
                         ", which another shard, the root or the directory names too");
  }
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
