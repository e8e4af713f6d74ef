/* pmhash — C API for FFI. Functions return 0 on success or a pmhash status code
 * (the numeric value of pmhash::Code; pmhash_code_name() names it). */
#ifndef PMHASH_PMHASH_H
#define PMHASH_PMHASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  PMHASH_OK = 0,
  PMHASH_NOT_FOUND = 1,
  PMHASH_ALREADY_EXISTS = 2,
  PMHASH_INVALID_ARGUMENT = 3,
  PMHASH_POOL_FULL = 11,
  PMHASH_CORRUPTED = 14,
  PMHASH_CLOSED = 15
};

typedef struct pmhash_index pmhash_index;

typedef struct pmhash_options {
  const char* scheme;     /* e.g. "turbohash" */
  int variable_format;    /* 0: fixed 8-byte keys/values, 1: variable byte strings (else refused) */
  int mode;               /* 0 auto, 1 pm, 2 emulated, 3 msync, 4 none */
  int create;             /* create the pool when missing */
  uint64_t pool_size;     /* bytes for a new pool (0: default) */
  uint64_t capacity_hint; /* expected keys (0: none) */
} pmhash_options;

/* err (may be NULL) receives a message on failure. A NULL path, out, index, key or value
 * pointer (with a non-zero length) gets PMHASH_INVALID_ARGUMENT. */
int pmhash_open(const char* path, const pmhash_options* options, pmhash_index** out, char* err,
                size_t err_len);
int pmhash_insert(pmhash_index* t, const void* key, size_t key_len, const void* value,
                  size_t value_len);
int pmhash_upsert(pmhash_index* t, const void* key, size_t key_len, const void* value,
                  size_t value_len);
int pmhash_update(pmhash_index* t, const void* key, size_t key_len, const void* value,
                  size_t value_len);
/* Copies up to cap bytes of the value into buf; *len receives the full length (0 when the
 * call fails: a missing key, ...). */
int pmhash_get(pmhash_index* t, const void* key, size_t key_len, void* buf, size_t cap,
               size_t* len);
int pmhash_remove(pmhash_index* t, const void* key, size_t key_len);
uint64_t pmhash_size(const pmhash_index* t);
/* Routing keys to threads (Index::partitions/owner/partition in index.hpp): the number of
 * partitions, the one owning a key, and the calling thread's (PMHASH_NO_PARTITION: none).
 * An index without partitions answers 1, 0 and 0; a NULL t 1, 0 and PMHASH_NO_PARTITION. */
#define PMHASH_NO_PARTITION 0xFFFFFFFFu
uint32_t pmhash_partitions(const pmhash_index* t);
uint32_t pmhash_owner(const pmhash_index* t, const void* key, size_t key_len);
uint32_t pmhash_partition(const pmhash_index* t);
int pmhash_check(pmhash_index* t, char* err, size_t err_len);
/* Shuts the index down while other threads may still be calling it: their calls in flight
 * finish, later calls return PMHASH_CLOSED; t stays allocated until pmhash_close(). */
int pmhash_shutdown(pmhash_index* t);
/* Clean shutdown (as pmhash_shutdown), then frees t: no thread may use t afterwards. */
int pmhash_close(pmhash_index* t);
const char* pmhash_code_name(int code);

#ifdef __cplusplus
}
#endif
#endif
