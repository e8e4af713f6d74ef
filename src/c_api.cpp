// The C API (include/pmhash/pmhash.h): a thin wrapper over pmhash::Index for FFI.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pmhash/index.hpp"
#include "pmhash/pmhash.h"

static_assert(PMHASH_POOL_FULL == static_cast<int>(pmhash::Code::kPoolFull));
static_assert(PMHASH_CORRUPTED == static_cast<int>(pmhash::Code::kCorrupted));
static_assert(PMHASH_CLOSED == static_cast<int>(pmhash::Code::kClosed));

struct pmhash_index {
  std::unique_ptr<pmhash::Index> index;
};

namespace {

int fail(const pmhash::Status& s, char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) {
    std::string m = s.to_string();
    size_t n = std::min(m.size(), err_len - 1);
    std::memcpy(err, m.data(), n);
    err[n] = '\0';
  }
  return static_cast<int>(s.code());
}

// Success empties err: no earlier call's message stays there to be mistaken for this one's.
int succeed(char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) err[0] = '\0';
  return 0;
}

int invalid(const char* what, char* err = nullptr, size_t err_len = 0) {
  return fail({pmhash::Code::kInvalidArgument, std::string(what) + " is NULL"}, err, err_len);
}

// A (pointer, length) argument: NULL only with length 0.
bool bad_bytes(const void* p, size_t len) {
  return p == nullptr && len != 0;
}

std::string_view bytes(const void* p, size_t len) {
  return {p ? static_cast<const char*>(p) : "", len};
}

}  // namespace

extern "C" {

int pmhash_open(const char* path, const pmhash_options* o, pmhash_index** out, char* err,
                size_t err_len) {
  if (path == nullptr) return invalid("path", err, err_len);
  if (out == nullptr) return invalid("out", err, err_len);
  pmhash::Options opt;
  if (o != nullptr) {
    if (o->scheme != nullptr) opt.scheme = o->scheme;
    // 0 or 1; anything else reaches Index::open, which names the allowed values.
    opt.format = static_cast<pmhash::Format>(static_cast<uint32_t>(o->variable_format));
    opt.mode = static_cast<pmhash::Mode>(o->mode);
    opt.create = o->create != 0;
    if (o->pool_size != 0) opt.pool_size = o->pool_size;
    opt.capacity_hint = o->capacity_hint;
  }
  auto h = std::make_unique<pmhash_index>();
  pmhash::Status s = pmhash::Index::open(path, opt, &h->index);
  if (!s.ok()) return fail(s, err, err_len);
  *out = h.release();
  return succeed(err, err_len);
}

int pmhash_insert(pmhash_index* t, const void* k, size_t kl, const void* v, size_t vl) {
  if (t == nullptr || bad_bytes(k, kl) || bad_bytes(v, vl)) return invalid("an argument");
  return static_cast<int>(t->index->insert(bytes(k, kl), bytes(v, vl)).code());
}

int pmhash_upsert(pmhash_index* t, const void* k, size_t kl, const void* v, size_t vl) {
  if (t == nullptr || bad_bytes(k, kl) || bad_bytes(v, vl)) return invalid("an argument");
  return static_cast<int>(t->index->upsert(bytes(k, kl), bytes(v, vl)).code());
}

int pmhash_update(pmhash_index* t, const void* k, size_t kl, const void* v, size_t vl) {
  if (t == nullptr || bad_bytes(k, kl) || bad_bytes(v, vl)) return invalid("an argument");
  return static_cast<int>(t->index->update(bytes(k, kl), bytes(v, vl)).code());
}

int pmhash_get(pmhash_index* t, const void* k, size_t kl, void* buf, size_t cap, size_t* len) {
  if (len != nullptr) *len = 0;  // also when the call fails, not a previous call's length
  if (t == nullptr || bad_bytes(k, kl) || (buf == nullptr && cap != 0))
    return invalid("an argument");
  std::string v;
  pmhash::Status s = t->index->get(bytes(k, kl), &v);
  if (!s.ok()) return static_cast<int>(s.code());
  if (len != nullptr) *len = v.size();
  if (buf != nullptr) std::memcpy(buf, v.data(), std::min(cap, v.size()));
  return 0;
}

int pmhash_get_many(pmhash_index* t, size_t n, const void* const* keys, const size_t* key_lens,
                    void* const* bufs, const size_t* caps, size_t* lens, int* codes) {
  bool bad =
      t == nullptr || (n > 0 && (keys == nullptr || key_lens == nullptr || codes == nullptr ||
                                 (bufs == nullptr) != (caps == nullptr)));
  for (size_t i = 0; !bad && bufs != nullptr && i < n; ++i)
    bad = bufs[i] == nullptr && caps[i] != 0;
  if (bad) {
    for (size_t i = 0; lens != nullptr && i < n; ++i) lens[i] = 0;
    for (size_t i = 0; codes != nullptr && i < n; ++i)
      codes[i] = static_cast<int>(pmhash::Code::kInvalidArgument);
    return invalid("an argument");
  }
  // A NULL key with a length becomes the empty key, which every pool refuses.
  std::vector<std::string_view> views(n);
  for (size_t i = 0; i < n; ++i)
    views[i] = bad_bytes(keys[i], key_lens[i]) ? std::string_view() : bytes(keys[i], key_lens[i]);
  std::vector<std::string> values(n);
  std::vector<pmhash::Status> statuses(n);
  pmhash::Status s = t->index->get_many(views, values, statuses);
  for (size_t i = 0; i < n; ++i) {  // key_lens may be lens: read above, written only here
    codes[i] = static_cast<int>(statuses[i].code());
    if (lens != nullptr) lens[i] = statuses[i].ok() ? values[i].size() : 0;
    if (!statuses[i].ok()) continue;
    if (bufs != nullptr && caps[i] != 0)
      std::memcpy(bufs[i], values[i].data(), std::min(caps[i], values[i].size()));
  }
  return static_cast<int>(s.code());
}

int pmhash_remove(pmhash_index* t, const void* k, size_t kl) {
  if (t == nullptr || bad_bytes(k, kl)) return invalid("an argument");
  return static_cast<int>(t->index->remove(bytes(k, kl)).code());
}

uint64_t pmhash_size(const pmhash_index* t) {
  return t == nullptr ? 0 : t->index->size();
}

int pmhash_count(const pmhash_index* t, uint64_t* size) {
  if (size != nullptr) *size = 0;
  if (t == nullptr || size == nullptr) return invalid("an argument");
  return static_cast<int>(t->index->count(size).code());
}

uint32_t pmhash_partitions(const pmhash_index* t) {
  return t == nullptr ? 1 : t->index->partitions();
}

uint32_t pmhash_owner(const pmhash_index* t, const void* k, size_t kl) {
  return t == nullptr || bad_bytes(k, kl) ? 0 : t->index->owner(bytes(k, kl));
}

uint32_t pmhash_partition(const pmhash_index* t) {
  return t == nullptr ? PMHASH_NO_PARTITION : t->index->partition();
}

static_assert(PMHASH_NO_PARTITION == pmhash::Index::kNoPartition);

int pmhash_check(pmhash_index* t, char* err, size_t err_len) {
  if (t == nullptr) return invalid("index", err, err_len);
  pmhash::Status s = t->index->check();
  return s.ok() ? succeed(err, err_len) : fail(s, err, err_len);
}

int pmhash_shutdown(pmhash_index* t) {
  if (t == nullptr) return invalid("index");
  return static_cast<int>(t->index->close().code());
}

int pmhash_close(pmhash_index* t) {
  if (t == nullptr) return invalid("index");
  int rc = static_cast<int>(t->index->close().code());
  delete t;
  return rc;
}

const char* pmhash_code_name(int code) {
  return pmhash::code_name(static_cast<pmhash::Code>(code));
}

}  // extern "C"
