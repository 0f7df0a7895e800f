/*
 * metadata: the LMDB schema of one storage server.
 *
 * One environment per server, in a data directory; three named databases:
 *   "versions"  job + 0x00 + be64(version)            -> version record
 *   "objects"   job + 0x00 + be64(version) + key      -> object record
 *   "meta"      "schema"                              -> schema number
 * Integers in keys are big-endian so that LMDB's byte order is numeric order;
 * job names contain no NUL, so "job" + 0x00 never prefixes another job's keys.
 * Values are msgpack arrays whose first element is a record format number.
 *
 * Transactions: every call below runs inside a transaction from
 * cks_md_txn_begin(). Any number of read transactions may be open at once,
 * each usable from any thread (one thread at a time); there is at most one
 * write transaction at a time, and the server runs all of them on its one
 * metadata writer thread. A write transaction must never stay open across a
 * network wait.
 *
 * Status conventions: all calls return cks_status_t; outputs (the `_p`
 * parameters) are written only when the call returns CKS_OK. Array outputs
 * (`out`, `names`) are caller-owned buffers whose contents are unspecified
 * when a call fails. Lengths are bounded on every call: a job of 0 bytes or
 * one containing NUL is CKS_ERR_INVALID_PARAM, a job longer than
 * CKS_JOB_MAX_LEN or a key longer than CKS_KEY_MAX_LEN is
 * CKS_ERR_KEY_TOO_LONG. A stored record that does not decode is CKS_ERR_IO
 * (logged once, with the job and version). LMDB's "map full" and "transaction
 * full" are CKS_ERR_METADATA_FULL; other LMDB failures are CKS_ERR_IO.
 *
 * A transaction on which LMDB failed (full map, I/O error) is poisoned: every
 * later call on it returns CKS_ERR_BAD_STATE, and cks_md_txn_commit() aborts
 * it and returns CKS_ERR_BAD_STATE. Not-found, already-exists and bad-input
 * results do not poison a transaction.
 */
#ifndef CKS_MD_H
#define CKS_MD_H

#include "cks_common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Parent of a version that has none; also never a valid version number. */
#define CKS_MD_NO_PARENT UINT64_MAX
/** Map size used when cks_md_open() is given 0. */
#define CKS_MD_MAP_SIZE_DEFAULT (UINT64_C(1) << 30)
/** Schema this build writes; an environment with a newer one is refused. */
#define CKS_MD_SCHEMA_VERSION 1u

/** An open metadata environment. */
typedef struct cks_md *cks_md_h;
/** A read or write transaction on one environment. */
typedef struct cks_md_txn *cks_md_txn_h;

/** One version of one job. Version numbers are 0 .. UINT64_MAX - 1. */
typedef struct {
    uint64_t version;
    uint64_t parent; /**< CKS_MD_NO_PARENT when none */
    cks_vstate_t state;
    uint32_t nranks;     /**< ranks expected to write (1 for now) */
    uint64_t created_ns; /**< CLOCK_REALTIME, nanoseconds */
    uint64_t sealed_ns;  /**< CLOCK_REALTIME, nanoseconds; 0 until sealed */
    uint64_t nobjects;   /**< objects written in this version (kept by the caller) */
    uint64_t bytes;      /**< their total size (kept by the caller) */
} cks_md_version_t;

/** One object of one version. */
typedef struct {
    char key[CKS_KEY_MAX_LEN + 1]; /**< NUL-terminated copy of the key */
    uint32_t key_len;              /**< 1 .. CKS_KEY_MAX_LEN */
    cks_kind_t kind;
    int32_t layer, expert, rank; /**< -1 = not applicable */
    uint64_t size;               /**< bytes of the object */
    uint64_t crc64;        /**< crc64_ecma_refl of the bytes, computed by the caller */
    uint64_t arena_offset; /**< where the bytes live in this server's arena */
    uint64_t arena_len;    /**< bytes reserved in the arena (>= size, aligned) */
} cks_md_object_t;

/**
 * Called once per object by cks_md_object_foreach(). `job` is a NUL-terminated
 * copy valid only during the call; `o` likewise. A status other than CKS_OK
 * stops the iteration and is returned by cks_md_object_foreach(). The callback
 * must not modify the "objects" database through the same transaction.
 */
typedef cks_status_t (*cks_md_object_cb_t)(const char *job, size_t job_len,
                                           uint64_t version, const cks_md_object_t *o,
                                           void *arg);

/** As cks_md_object_cb_t, for cks_md_version_foreach(); must not modify the
 *  "versions" database through the same transaction. */
typedef cks_status_t (*cks_md_version_cb_t)(const char *job, size_t job_len,
                                            const cks_md_version_t *v, void *arg);

/* ---- environment ------------------------------------------------------ */

/**
 * Open the environment in `dir`, creating the directory (mode 0700, last
 * component only) and the databases when missing. `map_size` is the most
 * bytes the store may ever hold (0 = CKS_MD_MAP_SIZE_DEFAULT); it is virtual
 * address space, not memory. Clears reader slots left by dead processes.
 * Returns CKS_ERR_UNSUPPORTED when the directory holds a newer schema.
 * Open a directory at most once per process. `dir` is copied.
 */
cks_status_t cks_md_open(const char *dir, uint64_t map_size, cks_md_h *md_p);

/** Close an environment; every transaction on it must have ended. NULL is a
 *  no-op. */
void cks_md_close(cks_md_h md);

/** Flush committed transactions to disk (commits reach the page cache only). */
cks_status_t cks_md_sync(cks_md_h md);

/** Map size in bytes, and bytes of it in use (high-water mark of pages). */
cks_status_t cks_md_stat(cks_md_h md, uint64_t *map_size_p, uint64_t *used_bytes_p);

/* ---- transactions ----------------------------------------------------- */

/** Begin a read (`write` = 0) or write transaction. A second write
 *  transaction blocks until the first ends. */
cks_status_t cks_md_txn_begin(cks_md_h md, int write, cks_md_txn_h *txn_p);

/** Commit and free `txn`, whatever the result. Committing a read transaction
 *  just ends it. */
cks_status_t cks_md_txn_commit(cks_md_txn_h txn);

/** Discard and free `txn`. NULL is a no-op. */
void cks_md_txn_abort(cks_md_txn_h txn);

/* ---- versions ----------------------------------------------------------- */

/** Store `v` under (job, v->version). With `overwrite` = 0 an existing record
 *  is left alone and CKS_ERR_VERSION_EXISTS returned. Write transactions only. */
cks_status_t cks_md_version_put(cks_md_txn_h txn, const char *job, size_t job_len,
                                const cks_md_version_t *v, int overwrite);

/** CKS_ERR_NO_SUCH_VERSION when absent. */
cks_status_t cks_md_version_get(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version, cks_md_version_t *v_p);

/** Delete a version and every object record of it. CKS_ERR_NO_SUCH_VERSION
 *  (nothing changed) when the version record is absent. */
cks_status_t cks_md_version_del(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version);

/**
 * Versions of `job` in increasing order: those greater than `*after`, or from
 * the first when `after` is NULL. Fills out[0 .. *count_p - 1] (at most `max`;
 * `out` may be NULL when `max` is 0) and sets `*more_p` to 1 when further
 * versions follow. A job without versions gives count 0 (use
 * cks_md_job_exists() to tell the cases apart).
 */
cks_status_t cks_md_version_list(cks_md_txn_h txn, const char *job, size_t job_len,
                                 const uint64_t *after, cks_md_version_t *out, size_t max,
                                 size_t *count_p, int *more_p);

/** Newest version of `job`; with `restorable_only`, the newest SEALED,
 *  PROTECTED or DEGRADED one. CKS_ERR_NO_SUCH_JOB when the job has no
 *  versions, CKS_ERR_NO_SUCH_VERSION when none qualifies. */
cks_status_t cks_md_version_latest(cks_md_txn_h txn, const char *job, size_t job_len,
                                   int restorable_only, cks_md_version_t *v_p);

/** Every version of every job, in key order (job bytes, then version). */
cks_status_t cks_md_version_foreach(cks_md_txn_h txn, cks_md_version_cb_t cb, void *arg);

/* ---- jobs --------------------------------------------------------------- */

/** CKS_OK when `job` has at least one version, else CKS_ERR_NO_SUCH_JOB. */
cks_status_t cks_md_job_exists(cks_md_txn_h txn, const char *job, size_t job_len);

/**
 * Distinct jobs that have versions, in byte order: those after `after`
 * (`after_len` bytes), or from the first when `after` is NULL. Writes up to
 * `max` NUL-terminated names; `*more_p` = 1 when further jobs follow.
 */
cks_status_t cks_md_job_list(cks_md_txn_h txn, const char *after, size_t after_len,
                             char (*names)[CKS_JOB_MAX_LEN + 1], size_t max,
                             size_t *count_p, int *more_p);

/* ---- objects ------------------------------------------------------------ */

/** Store `o` under (job, version, o->key). CKS_ERR_DUPLICATE_KEY when that key
 *  exists. Does not touch the version record. Write transactions only. */
cks_status_t cks_md_object_put(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const cks_md_object_t *o);

/** CKS_ERR_NO_SUCH_KEY when absent. */
cks_status_t cks_md_object_get(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const char *key, size_t key_len,
                               cks_md_object_t *o_p);

/** CKS_ERR_NO_SUCH_KEY when absent. Write transactions only. */
cks_status_t cks_md_object_del(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const char *key, size_t key_len);

/**
 * Objects of one version in key byte order: those after `after_key`
 * (`after_len` bytes), or from the first when `after_key` is NULL. Same
 * output conventions as cks_md_version_list().
 */
cks_status_t cks_md_object_list(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version, const char *after_key, size_t after_len,
                                cks_md_object_t *out, size_t max, size_t *count_p,
                                int *more_p);

/** Every object of every version of every job, in key order. A record that
 *  does not decode stops the walk with CKS_ERR_IO. */
cks_status_t cks_md_object_foreach(cks_md_txn_h txn, cks_md_object_cb_t cb, void *arg);

#ifdef __cplusplus
}
#endif
#endif
