/*
 * ckstore.h - the public API of libckstore, the client library of the ckstore
 * checkpoint store.
 *
 * A trainer rank connects to a storage server, begins a version (normally the
 * training step), puts its objects (named shards with tags) zero-copy from
 * its own buffers, and seals the version. A replacement rank opens a sealed
 * version and gets whole objects or byte ranges into its buffers.
 *
 * Async contract (every *_nb call):
 *   - returns CKS_INPROGRESS: the callback runs exactly once, later, on the
 *     client's progress thread, with the final status;
 *   - returns anything else (an error): the callback never runs.
 *   Buffers passed to a call belong to the caller again only when its
 *   callback has run (for a put: the server holds the bytes, STORED). The
 *   blocking calls are thin wrappers that wait for that callback. Callbacks
 *   must not block; they may submit further *_nb calls.
 *
 * Threads: a client handle may be used from any number of threads at once.
 * Errors: every call that can fail returns a cks_status_t; the server's text
 * for the last failed request is available from cks_client_last_error().
 * The library never aborts the process.
 */
#ifndef CKSTORE_H
#define CKSTORE_H

#include "ckstore_defs.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKS_API_VISIBLE __attribute__((visibility("default")))

/** Largest job name and object key, in bytes (UTF-8, no NUL). */
#define CKS_JOB_NAME_MAX 128
#define CKS_KEY_NAME_MAX 256
/** No parent version. */
#define CKS_NO_PARENT UINT64_MAX
/** Tag value for "not applicable" (layer, expert, rank). */
#define CKS_TAG_NONE (-1)

typedef struct cks_client *cks_client_h;
typedef struct cks_restore *cks_restore_h;

/** Completion callback of a *_nb call. */
typedef void (*cks_done_cb_t)(void *arg, cks_status_t status);

/* ---- client -------------------------------------------------------------- */

enum {
    CKS_CLIENT_FIELD_SERVER     = 1u << 0,
    CKS_CLIENT_FIELD_TIMEOUT_MS = 1u << 1,
    CKS_CLIENT_FIELD_NAME       = 1u << 2,
    CKS_CLIENT_FIELD_CLUSTER    = 1u << 3,
    CKS_CLIENT_FIELD_EC         = 1u << 4,
};

typedef struct {
    uint64_t field_mask;  /**< CKS_CLIENT_FIELD_* bits of the fields that are set */
    const char *server;   /**< "ipv4:port" of a standalone server; copied */
    int timeout_ms;       /**< per request; default 60000 */
    const char *name;     /**< shown in server logs; default "libckstore"; copied */
    const char *cluster;  /**< path of a cluster map (docs/CLUSTER_MAP.md): use the
                               erasure-coded cluster it lists instead of `server` */
    uint32_t ec_k;        /**< with CKS_CLIENT_FIELD_EC: data chunks per stripe of the
                               versions this client begins (default 4) */
    uint32_t ec_m;        /**< parity chunks (default 2) */
    uint64_t chunk_size;  /**< bytes per chunk, multiple of 4096 (default 1 MiB) */
} cks_client_params_t;

/** Connect to a standalone server (`server`) or a cluster (`cluster`): at
 *  least one server must answer within the timeout. */
CKS_API_VISIBLE cks_status_t cks_client_create(const cks_client_params_t *params,
                                               cks_client_h *client_p);

/** Fail every request still in flight with CKS_ERR_CANCELED (their callbacks
 *  run), close the connection, stop the progress thread, free the handle. */
CKS_API_VISIBLE void cks_client_destroy(cks_client_h client);

/** Copy the server's (or the library's) text about the last failed request
 *  into buf (always NUL-terminated). */
CKS_API_VISIBLE void cks_client_last_error(cks_client_h client, char *buf, size_t len);

/* ---- versions ------------------------------------------------------------ */

enum {
    CKS_VERSION_FIELD_PARENT = 1u << 0,
    CKS_VERSION_FIELD_NRANKS = 1u << 1,
};

typedef struct {
    uint64_t field_mask;
    const char *job;   /**< job name (required) */
    uint64_t version;  /**< version number, e.g. the step (required; < UINT64_MAX) */
    uint64_t parent;   /**< default CKS_NO_PARENT */
    uint32_t nranks;   /**< ranks that write it; default 1 */
} cks_version_params_t;

/** Begin a version: it is OPEN until sealed or aborted. */
CKS_API_VISIBLE cks_status_t cks_version_begin_nb(cks_client_h c, const cks_version_params_t *p,
                                                  cks_done_cb_t cb, void *arg);
CKS_API_VISIBLE cks_status_t cks_version_begin(cks_client_h c, const cks_version_params_t *p);

/** Seal: waits for every put to be recorded; then the version is restorable. */
CKS_API_VISIBLE cks_status_t cks_version_seal_nb(cks_client_h c, const char *job,
                                                 uint64_t version, cks_done_cb_t cb,
                                                 void *arg);
CKS_API_VISIBLE cks_status_t cks_version_seal(cks_client_h c, const char *job, uint64_t version);

/** Give up on an open version: it becomes ABORTED and its space is freed. */
CKS_API_VISIBLE cks_status_t cks_version_abort(cks_client_h c, const char *job, uint64_t version);

/** Delete a version and free its space. */
CKS_API_VISIBLE cks_status_t cks_version_delete(cks_client_h c, const char *job, uint64_t version);

/** What is known of a version. */
typedef struct {
    uint64_t version;
    uint64_t parent;      /**< CKS_NO_PARENT when none */
    cks_vstate_t state;
    uint32_t nranks;
    uint64_t created_ns;  /**< wall clock (CLOCK_REALTIME) */
    uint64_t sealed_ns;   /**< 0 until sealed */
    uint64_t nobjects;
    uint64_t bytes;
    uint32_t ec_k, ec_m;  /**< Reed-Solomon geometry; 0, 0 on a standalone server */
    uint64_t chunk_size;
} cks_version_info_t;

/** One version's record. */
CKS_API_VISIBLE cks_status_t cks_version_stat(cks_client_h c, const char *job, uint64_t version,
                                              cks_version_info_t *info_p);

/** The newest restorable (SEALED or later) version of a job. */
CKS_API_VISIBLE cks_status_t cks_version_latest(cks_client_h c, const char *job,
                                                cks_version_info_t *info_p);

/** Versions of a job in increasing order, after *after (NULL: from the first).
 *  Fills out[0 .. *count_p-1], at most max (caller's array); *more_p is 1 when
 *  more follow (call again with after = the last one's version). */
CKS_API_VISIBLE cks_status_t cks_version_list(cks_client_h c, const char *job,
                                              const uint64_t *after, cks_version_info_t *out,
                                              size_t max, size_t *count_p, int *more_p);

/** Names of the jobs that have versions, in byte order, after `after` (NULL:
 *  from the first). names is the caller's array of max entries. */
CKS_API_VISIBLE cks_status_t cks_job_list(cks_client_h c, const char *after,
                                          char (*names)[CKS_JOB_NAME_MAX + 1], size_t max,
                                          size_t *count_p, int *more_p);

/* ---- objects ------------------------------------------------------------- */

typedef struct {
    cks_kind_t kind;   /**< dense, expert, optimizer, rng, other */
    int32_t layer;     /**< CKS_TAG_NONE when not applicable */
    int32_t expert;
    int32_t rank;
} cks_tags_t;

enum {
    CKS_PUT_FIELD_TAGS     = 1u << 0,
    CKS_PUT_FIELD_MEM_TYPE = 1u << 1,
};

typedef struct {
    uint64_t field_mask;
    const char *job;          /**< required */
    uint64_t version;         /**< required; must be OPEN */
    const char *key;          /**< required; unique within the version */
    const void *buffer;       /**< the bytes (caller's; read until completion) */
    uint64_t size;            /**< bytes; 0 is allowed */
    cks_tags_t tags;          /**< default: kind other, every tag CKS_TAG_NONE */
    cks_mem_type_t mem_type;  /**< default CKS_MEM_HOST */
} cks_put_params_t;

/** Store an object, zero-copy from `buffer`. Completes once the server holds
 *  the bytes (STORED); the buffer may be reused from then on. */
CKS_API_VISIBLE cks_status_t cks_put_nb(cks_client_h c, const cks_put_params_t *p,
                                        cks_done_cb_t cb, void *arg);
CKS_API_VISIBLE cks_status_t cks_put(cks_client_h c, const cks_put_params_t *p);

/** What is known of an object. */
typedef struct {
    char key[CKS_KEY_NAME_MAX + 1];
    cks_tags_t tags;
    uint64_t size;
    uint64_t crc64;  /**< CRC-64 (ECMA-182, reflected, ISA-L crc64_ecma_refl) */
} cks_object_info_t;

/* ---- restore ------------------------------------------------------------- */

/** Version number meaning "the newest restorable version". */
#define CKS_VERSION_LATEST UINT64_MAX

/** Open a version for restore: it must be SEALED or later. The handle keeps
 *  the job and version; close it when done. */
CKS_API_VISIBLE cks_status_t cks_restore_open(cks_client_h c, const char *job,
                                              uint64_t version, cks_restore_h *r_p);
CKS_API_VISIBLE void cks_restore_close(cks_restore_h r);
/** The version a restore handle reads. */
CKS_API_VISIBLE cks_status_t cks_restore_info(cks_restore_h r, cks_version_info_t *info_p);

/** One object's record. */
CKS_API_VISIBLE cks_status_t cks_object_stat(cks_restore_h r, const char *key,
                                             cks_object_info_t *info_p);

/** Objects of the version in key order, after `after_key` (NULL: first). */
CKS_API_VISIBLE cks_status_t cks_object_list(cks_restore_h r, const char *after_key,
                                             cks_object_info_t *out, size_t max,
                                             size_t *count_p, int *more_p);

enum {
    CKS_GET_FIELD_RANGE    = 1u << 0,
    CKS_GET_FIELD_MEM_TYPE = 1u << 1,
    CKS_GET_FIELD_FLAGS    = 1u << 2,
};

/** Check the whole object's CRC on arrival (costs one pass over the bytes;
 *  only for whole-object reads). */
#define CKS_GET_VERIFY 0x1u

typedef struct {
    uint64_t field_mask;
    const char *key;          /**< required */
    void *buffer;             /**< destination (caller's; written until completion) */
    uint64_t buffer_size;     /**< bytes available at buffer */
    uint64_t offset;          /**< with CKS_GET_FIELD_RANGE; default 0 */
    uint64_t length;          /**< with CKS_GET_FIELD_RANGE; default: the whole object */
    cks_mem_type_t mem_type;  /**< default CKS_MEM_HOST */
    uint32_t flags;           /**< CKS_GET_VERIFY */
} cks_get_params_t;

/** Read an object, or a byte range of it, straight into `buffer`. Without a
 *  range, buffer_size must be at least the object's size; *length_p (may be
 *  NULL; written before the callback runs) receives the bytes read. */
CKS_API_VISIBLE cks_status_t cks_get_nb(cks_restore_h r, const cks_get_params_t *p,
                                        uint64_t *length_p, cks_done_cb_t cb, void *arg);
CKS_API_VISIBLE cks_status_t cks_get(cks_restore_h r, const cks_get_params_t *p,
                                     uint64_t *length_p);

#ifdef __cplusplus
}
#endif
#endif
