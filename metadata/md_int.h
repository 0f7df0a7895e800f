/*
 * metadata private: the byte codecs of the LMDB records' values (md_codec.c),
 * on plain buffers rather than LMDB values; every read and write of a record
 * runs them, and so do the unit tests and the fuzzers. A value that does not
 * decode is CKS_ERR_IO (logged once, as on a read), and outputs are written
 * only on CKS_OK.
 */
#ifndef CKS_MD_INT_H
#define CKS_MD_INT_H

#include "cks_md.h"

/** Longest encoded record value, in bytes. */
#define CKS_MD_VALUE_MAX 128

/** Encoders: the value that the put calls store, into buf (CKS_MD_VALUE_MAX
 *  bytes); *len_p gets its length. */
cks_status_t cks_md_version_encode(const cks_md_version_t *v,
                                   uint8_t buf[CKS_MD_VALUE_MAX], size_t *len_p);
cks_status_t cks_md_object_encode(const cks_md_object_t *o, uint8_t buf[CKS_MD_VALUE_MAX],
                                  size_t *len_p);
cks_status_t cks_md_chunk_encode(const cks_md_chunk_t *c, uint8_t buf[CKS_MD_VALUE_MAX],
                                 size_t *len_p);

/** The schema number record (CKS_MD_SCHEMA_VERSION). */
cks_status_t cks_md_schema_encode(uint8_t buf[CKS_MD_VALUE_MAX], size_t *len_p);

/** A version record stored under (job, key_version); job names it in the log. */
cks_status_t cks_md_version_decode(const char *job, size_t job_len, uint64_t key_version,
                                   const void *val, size_t len, cks_md_version_t *v_p);
/** An object record stored under (job, version, key); `key` is the tail of
 *  the LMDB key (its length is checked, 1 .. CKS_KEY_MAX_LEN). */
cks_status_t cks_md_object_decode(const char *job, size_t job_len, uint64_t version,
                                  const void *key, size_t key_len, const void *val,
                                  size_t len, cks_md_object_t *o_p);
/** A chunk record under the LMDB key `key` (stripe and index are its last
 *  9 bytes). */
cks_status_t cks_md_chunk_decode(const void *key, size_t key_len, const void *val,
                                 size_t len, cks_md_chunk_t *c_p);
/** The schema number record (not logged here: cks_md_open() names the
 *  directory). */
cks_status_t cks_md_schema_decode(const void *val, size_t len, uint64_t *schema_p);

#endif
