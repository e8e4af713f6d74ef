#include "common/items.hpp"

namespace pmhash::common {

Status Items::make(std::string_view key, std::string_view value, uint64_t kw, New* out) const {
  out->key_word = kw;
  if (!variable_) {
    std::memcpy(&out->value_word, value.data(), 8);
    return Status::Ok();
  }
  uint64_t size = 8 + key.size() + value.size();
  pm::Reservation r = alloc_.reserve(size);
  if (!r) return pool_full(size);
  fill(r, key, value, out);
  return Status::Ok();
}

Status Items::pool_full(uint64_t size) {
  return {Code::kPoolFull, "no space for a " + std::to_string(size) + "-byte item"};
}

void Items::fill(const pm::Reservation& r, std::string_view key, std::string_view value,
                 New* out) const {
  uint64_t size = 8 + key.size() + value.size();
  pm::Pool& pool = alloc_.pool();
  char* p = pool.ptr<char>(r.off);
  uint32_t lens[2] = {static_cast<uint32_t>(key.size()), static_cast<uint32_t>(value.size())};
  std::memcpy(p, lens, 8);
  std::memcpy(p + 8, key.data(), key.size());
  std::memcpy(p + 8 + key.size(), value.data(), value.size());
  pool.persister().flush(p, size);
  out->value_word = r.off;
  out->item = r;
}

bool Items::parse(uint64_t value_word, std::string_view* key, std::string_view* value) const {
  const pm::Pool& pool = alloc_.pool();
  if (value_word % pm::kMinBlock != 0 || !pool.contains(value_word, 8)) return false;
  const char* p = pool.ptr<char>(value_word);
  uint32_t klen, vlen;
  std::memcpy(&klen, p, 4);
  std::memcpy(&vlen, p + 4, 4);
  if (!pool.contains(value_word, uint64_t{8} + klen + vlen)) return false;
  *key = std::string_view(p + 8, klen);
  *value = std::string_view(p + 8 + klen, vlen);
  return true;
}

bool Items::item_key(uint64_t value_word, std::string_view* key) const {
  std::string_view value;
  return parse(value_word, key, &value);
}

bool Items::read_value(uint64_t value_word, std::string* out) const {
  if (!variable_) {
    out->assign(reinterpret_cast<const char*>(&value_word), 8);
    return true;
  }
  std::string_view key, value;
  if (!parse(value_word, &key, &value)) return false;
  out->assign(value);
  return true;
}

// A small item goes to a spare block, whose allocation bit a batch persisted earlier; a
// larger one is reserved and marked here (its bit's line flushed beside it).
Status Items::write(std::string_view key, std::string_view value, uint64_t kw, New* out) const {
  uint64_t size = 8 + key.size() + value.size();
  if (!variable_ || size > pm::SpareBlocks::kMaxBlock) {
    Status s = make(key, value, kw, out);
    if (s.ok() && out->item) alloc_.mark(out->item);
    return s;
  }
  out->key_word = kw;
  pm::Reservation r = alloc_.spares().take(size);
  if (!r) return pool_full(size);
  fill(r, key, value, out);
  return Status::Ok();
}

void Items::swap_value(uint64_t& value_word, const New& n) const {
  const pm::Persister& p = alloc_.pool().persister();
  uint64_t old = value_word;
  if (variable_) p.fence();  // the new item and its bit persist before it is published
  store_word(value_word, n.value_word);
  p.persist(&value_word, 8);
  retire(old);
}

std::string Items::slot_key_bytes(const Slot& s) const {
  if (!variable_) return std::string(reinterpret_cast<const char*>(&s.key), 8);
  std::string_view k;
  return item_key(s.value, &k) ? std::string(k) : std::string();
}

}  // namespace pmhash::common
