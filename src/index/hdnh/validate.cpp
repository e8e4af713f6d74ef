// Read-only validation before open (SchemeFactory::validate); mirrors Hdnh::open's checks.
#include <bit>

#include "index/hdnh/hdnh.hpp"

namespace pmhash::hdnh {

Status validate(const SchemeContext& ctx) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  if (r == nullptr) return damaged(ctx, "hdnh", "root object missing or damaged");
  uint64_t m = r->segment_buckets;
  if (m == 0 || !std::has_single_bit(m) || m > (uint64_t{1} << 20))
    return damaged(ctx, "hdnh", "segment of " + std::to_string(m) + " buckets");
  auto level = [&](const LevelDesc& l, const char* name) -> Status {
    if (l.segments == 0 || l.segments >= (uint64_t{1} << 40) ||
        block_array<Bucket>(ctx, l.off, l.segments * m) == nullptr)
      return damaged(ctx, "hdnh",
                     std::string(name) + " level (offset " + std::to_string(l.off) + ", " +
                         std::to_string(l.segments) + " segments) missing");
    return Status::Ok();
  };
  Status s = level(r->top, "top");
  if (s.ok()) s = level(r->bottom, "bottom");
  if (!s.ok()) return s;
  if (r->top.segments != 2 * r->bottom.segments || r->resizing_flag > 1 ||
      (r->level_number != 2 && r->level_number != 3))
    return damaged(ctx, "hdnh",
                   "levels of " + std::to_string(r->top.segments) + " and " +
                       std::to_string(r->bottom.segments) + " segments, flag " +
                       std::to_string(r->resizing_flag) + ", level number " +
                       std::to_string(r->level_number));
  if (r->level_number == 3) {
    if (r->resizing_flag != 1 || r->new_top.segments != 2 * r->top.segments ||
        r->rehash_progress > r->bottom.segments * m)
      return damaged(ctx, "hdnh", "an interrupted resize with impossible progress");
    return level(r->new_top, "new top");
  }
  return Status::Ok();
}

// Valid slots by the buckets' bitmaps, as the open's rebuild counts them (bottom buckets an
// interrupted resize already moved are skipped, as Hdnh::bucket_live does).
uint64_t items_found(const SchemeContext& ctx, uint64_t enough) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  uint64_t m = r->segment_buckets, n = 0;
  auto level = [&](const LevelDesc& l, uint64_t skip) {
    const Bucket* b = ctx.pool.ptr<Bucket>(l.off);
    for (uint64_t i = skip; i < l.segments * m && n < enough; ++i)
      n += std::popcount(b[i].bitmap & 0xFF);
  };
  level(r->top, 0);
  level(r->bottom, r->level_number == 3 ? r->rehash_progress : 0);
  if (r->level_number == 3) level(r->new_top, 0);
  return n;
}

}  // namespace pmhash::hdnh
