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

/* err (may be NULL) receives a message on failure, the empty string on success. A NULL path, out,
 * index, key or value pointer (with a non-zero length) gets PMHASH_INVALID_ARGUMENT. */
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
/* Many lookups in one call (Index::get_many: their cache misses overlap). For each i < n:
 * key i is keys[i] of key_lens[i] bytes; up to caps[i] bytes of its value go to bufs[i];
 * lens[i] receives the value's full length (0 when the lookup fails) and codes[i] what
 * pmhash_get would return for that key (a NULL keys[i] with a non-zero length:
 * PMHASH_INVALID_ARGUMENT for that key). bufs and caps may both be NULL (lengths only), lens
 * may be NULL. Returns 0, or the code that refused the whole call, then also in every
 * codes[i] (PMHASH_CLOSED; PMHASH_INVALID_ARGUMENT for a NULL t, keys, key_lens or codes with
 * n > 0, or only one of bufs and caps NULL, or a NULL bufs[i] with a non-zero caps[i]). */
int pmhash_get_many(pmhash_index* t, size_t n, const void* const* keys, const size_t* key_lens,
                    void* const* bufs, const size_t* caps, size_t* lens, int* codes);
int pmhash_remove(pmhash_index* t, const void* key, size_t key_len);
/* The live keys; 0 also for a closed index or a NULL t (pmhash_count tells them apart). */
uint64_t pmhash_size(const pmhash_index* t);
/* The live keys into *size, reporting errors as the other calls do: 0, PMHASH_CLOSED after
 * pmhash_shutdown, PMHASH_INVALID_ARGUMENT for a NULL t or size or a thread past the limit
 * of threads using the index at once (*size 0 on every error). */
int pmhash_count(const pmhash_index* t, uint64_t* size);
/* Routing keys to threads (Index::partitions/owner/partition in index.hpp): the number of
 * partitions, the one owning a key, and the calling thread's (PMHASH_NO_PARTITION: none).
 * An index without partitions answers 1, 0 and 0; a NULL t 1, 0 and PMHASH_NO_PARTITION. */
#define PMHASH_NO_PARTITION 0xFFFFFFFFu
uint32_t pmhash_partitions(const pmhash_index* t);
uint32_t pmhash_owner(const pmhash_index* t, const void* key, size_t key_len);
uint32_t pmhash_partition(const pmhash_index* t);
/* err as for pmhash_open: a message on failure, the empty string on success. */
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
