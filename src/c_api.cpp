// The C API (include/pmhash/pmhash.h): a thin wrapper over pmhash::Index for FFI.
#include <cstring>
#include <memory>
#include <string>

#include "pmhash/index.hpp"
#include "pmhash/pmhash.h"

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

}  // namespace

extern "C" {

int pmhash_open(const char* path, const pmhash_options* o, pmhash_index** out, char* err,
                size_t err_len) {
  pmhash::Options opt;
  if (o != nullptr) {
    if (o->scheme != nullptr) opt.scheme = o->scheme;
    opt.format = o->variable_format ? pmhash::Format::kVariable : pmhash::Format::kFixed;
    opt.mode = static_cast<pmhash::Mode>(o->mode);
    opt.create = o->create != 0;
    if (o->pool_size != 0) opt.pool_size = o->pool_size;
    opt.capacity_hint = o->capacity_hint;
  }
  auto h = std::make_unique<pmhash_index>();
  pmhash::Status s = pmhash::Index::open(path, opt, &h->index);
  if (!s.ok()) return fail(s, err, err_len);
  *out = h.release();
  return 0;
}

int pmhash_insert(pmhash_index* t, const void* k, size_t kl, const void* v, size_t vl) {
  return static_cast<int>(
      t->index->insert({static_cast<const char*>(k), kl}, {static_cast<const char*>(v), vl})
          .code());
}

int pmhash_upsert(pmhash_index* t, const void* k, size_t kl, const void* v, size_t vl) {
  return static_cast<int>(
      t->index->upsert({static_cast<const char*>(k), kl}, {static_cast<const char*>(v), vl})
          .code());
}

int pmhash_update(pmhash_index* t, const void* k, size_t kl, const void* v, size_t vl) {
  return static_cast<int>(
      t->index->update({static_cast<const char*>(k), kl}, {static_cast<const char*>(v), vl})
          .code());
}

int pmhash_get(pmhash_index* t, const void* k, size_t kl, void* buf, size_t cap, size_t* len) {
  std::string v;
  pmhash::Status s = t->index->get({static_cast<const char*>(k), kl}, &v);
  if (!s.ok()) return static_cast<int>(s.code());
  if (len != nullptr) *len = v.size();
  if (buf != nullptr) std::memcpy(buf, v.data(), std::min(cap, v.size()));
  return 0;
}

int pmhash_remove(pmhash_index* t, const void* k, size_t kl) {
  return static_cast<int>(t->index->remove({static_cast<const char*>(k), kl}).code());
}

uint64_t pmhash_size(const pmhash_index* t) {
  return t->index->size();
}

int pmhash_check(pmhash_index* t, char* err, size_t err_len) {
  pmhash::Status s = t->index->check();
  return s.ok() ? 0 : fail(s, err, err_len);
}

int pmhash_close(pmhash_index* t) {
  int rc = static_cast<int>(t->index->close().code());
  delete t;
  return rc;
}

const char* pmhash_code_name(int code) {
  return pmhash::code_name(static_cast<pmhash::Code>(code));
}

}  // extern "C"
