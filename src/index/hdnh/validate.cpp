// Read-only validation before open (SchemeFactory::validate); mirrors Hdnh::open's checks.
#include <algorithm>
#include <bit>
#include <numeric>
#include <thread>
#include <vector>

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

namespace {

// Valid slots in buckets [from, to), stopping once `enough` are found. The bitmaps are
// prefetched: one line in four of the walk, a stride the hardware does not follow far.
uint64_t count_valid(const Bucket* b, uint64_t from, uint64_t to, uint64_t enough) {
  constexpr uint64_t kAhead = 16;
  uint64_t n = 0;
  for (uint64_t i = from; i < to && n < enough; ++i) {
    if (i + kAhead < to) __builtin_prefetch(&b[i + kAhead].bitmap);
    n += std::popcount(b[i].bitmap & 0xFF);
  }
  return n;
}

}  // namespace

// Valid slots by the buckets' bitmaps, as the open's rebuild counts them (bottom buckets an
// interrupted resize already moved are skipped, as Hdnh::bucket_live does). The full count
// (after a clean close: every bucket) is split across the cores, as the rebuild after it.
uint64_t items_found(const SchemeContext& ctx, uint64_t enough) {
  const Root* r = existing_root<Root>(ctx, kRootMagic);
  const uint64_t m = r->segment_buckets;
  struct Range {
    const Bucket* b;
    uint64_t from, to;
  };
  std::vector<Range> ranges;
  auto level = [&](const LevelDesc& l, uint64_t skip) {
    ranges.push_back({ctx.pool.ptr<Bucket>(l.off), skip, l.segments * m});
  };
  level(r->top, 0);
  level(r->bottom, r->level_number == 3 ? r->rehash_progress : 0);
  if (r->level_number == 3) level(r->new_top, 0);
  const unsigned nt =
      enough == UINT64_MAX ? std::clamp(std::thread::hardware_concurrency(), 1u, 8u) : 1;
  std::vector<uint64_t> found(nt);
  auto walk = [&](unsigned t) {
    for (const Range& g : ranges) {
      if (found[t] >= enough) break;
      uint64_t len = g.to - g.from;
      found[t] +=
          count_valid(g.b, g.from + len * t / nt, g.from + len * (t + 1) / nt, enough - found[t]);
    }
  };
  std::vector<std::thread> ts;
  for (unsigned t = 1; t < nt; ++t) ts.emplace_back(walk, t);
  walk(0);
  for (auto& t : ts) t.join();
  return std::accumulate(found.begin(), found.end(), uint64_t{0});
}

}  // namespace pmhash::hdnh
