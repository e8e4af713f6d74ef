// Recovery (§3.7): open checks the root and finishes an interrupted resize; one traversal
// of the table rebuilds the OCF and the hot table.
#include <bit>
#include <vector>

#include "index/hdnh/detail.hpp"

namespace pmhash::hdnh {

using common::load_word;
using common::Slot;
using common::store_word;
using namespace detail;

Status Hdnh::open(SchemeContext& ctx, bool clean, std::unique_ptr<Scheme>* out) {
  (void)clean;  // §3.7: both cases rebuild the DRAM structures; a crash may add resize work
  Config cfg;
  Status s = parse_config(ctx.runtime, &cfg);
  if (!s.ok()) return s;
  const Root* root = existing_root<Root>(ctx, kRootMagic);
  if (root == nullptr) return {Code::kCorrupted, "hdnh: root object missing or damaged"};
  const Root& r = *root;
  uint64_t m = r.segment_buckets;
  auto level_ok = [&](const LevelDesc& l) {
    return l.segments != 0 && l.segments < (uint64_t{1} << 40) &&
           ctx.alloc.block_size(l.off) >= l.segments * m * sizeof(Bucket);
  };
  if (m == 0 || !std::has_single_bit(m) || !level_ok(r.top) || !level_ok(r.bottom) ||
      r.top.segments != 2 * r.bottom.segments || r.resizing_flag > 1 ||
      (r.level_number != 2 && r.level_number != 3) ||
      (r.level_number == 3 &&
       (r.resizing_flag != 1 || !level_ok(r.new_top) || r.new_top.segments != 2 * r.top.segments ||
        r.rehash_progress > r.bottom.segments * m)))
    return {Code::kCorrupted, "hdnh: levels missing or damaged"};
  auto h = std::make_unique<Hdnh>(ctx, ctx.pool.root(), cfg);
  if (r.resizing_flag) {
    // §3.7: an interrupted resize is finished first (level_number 2: attach the new level
    // again; 3: continue rehashing at the recorded bucket).
    std::unique_lock<std::shared_mutex> xl(h->resize_mu_);
    if (r.level_number == 2) {
      s = h->attach_new_top();
      if (!s.ok()) {  // no room for the new level: back to the two levels
        store_word(h->root_->resizing_flag, 0);
        ctx.pool.persister().persist(&h->root_->resizing_flag, 8);
      }
    }
    if (h->root_->resizing_flag) (void)h->rehash();  // a failure leaves three levels, usable
  }
  *out = std::move(h);
  return Status::Ok();
}

// §3.7: one traversal of the table rebuilds the OCF (bitmaps and fingerprints) and the hot
// table, the buckets split into batches across recovery threads.
void Hdnh::rebuild_dram() {
  LevelSet* set = levels_.load();
  std::atomic<int64_t> items{0};
  auto work = [&](unsigned t, unsigned nt) {
    unsigned tid = threads_.id();
    pm::Epochs::Guard guard(epochs_, tid);
    int64_t local = 0;
    std::string value;
    for (int i = 0; i < set->n; ++i) {
      Level& l = *set->lv[i];
      uint64_t per = (l.nbuckets + nt - 1) / nt;
      uint64_t end = std::min(l.nbuckets, (t + 1) * per);
      for (uint64_t b = t * per; b < end; ++b) {
        if (!bucket_live(l, b)) continue;
        const Bucket& bk = l.buckets[b];
        for (uint64_t bits = bk.bitmap & 0xFF; bits; bits &= bits - 1) {
          int s = std::countr_zero(bits);
          Hashed k = hashed_slot(bk.slots[s].key);
          l.ocf[b * kSlots + s].store(ocf::kValid | k.fp, std::memory_order_relaxed);
          ++local;
          if (cfg_.replacement == Replacement::kOff) continue;
          // Warm the hot table: fill empty hot slots only (eviction would be churn here).
          std::string_view key;
          std::string keybuf = items_.slot_key_bytes(bk.slots[s]);
          key = keybuf;
          if (!items_.read_value(bk.slots[s].value, &value)) continue;
          for (int j = 0; j < set->n; ++j) {
            Level& hl = *set->lv[j];
            uint64_t hb = hot_bucket(hl, k);
            bool placed = false;
            for (int e = 0; e < cfg_.hot_slots && !placed; ++e) {
              uint64_t idx = hb * cfg_.hot_slots + e;
              uint16_t mw = hl.hot_meta[idx].load(std::memory_order_relaxed);
              if ((mw & (hot::kValid | hot::kBusy)) != 0) continue;
              if (!hl.hot_meta[idx].compare_exchange_strong(mw, mw | hot::kBusy)) continue;
              hl.hot_key[idx].store(k.kw, std::memory_order_relaxed);
              uint64_t vw = 0;
              if (items_.variable())
                vw = reinterpret_cast<uint64_t>(new HotItem{std::string(key), value});
              else
                std::memcpy(&vw, value.data(), 8);
              hl.hot_value[idx].store(vw, std::memory_order_relaxed);
              hl.hot_meta[idx].store(
                  static_cast<uint16_t>(((mw + hot::kVersionOne) & ~7u) | hot::kValid),
                  std::memory_order_release);
              placed = true;
            }
            if (placed) break;
          }
        }
      }
    }
    items.fetch_add(local);
  };
  unsigned nt = cfg_.recovery_threads;
  if (nt <= 1) {
    work(0, 1);
  } else {
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < nt; ++t) ts.emplace_back(work, t, nt);
    for (auto& t : ts) t.join();
  }
  base_items_ = items.load();
}

}  // namespace pmhash::hdnh
