/*
 * server-private definitions shared by server.c (progress thread: requests,
 * replies, arena) and mdq.c (metadata writer thread: CRCs and LMDB writes).
 */
#ifndef CKS_SERVER_INT_H
#define CKS_SERVER_INT_H

#include "arena.h"
#include "cks_md.h"
#include "cks_server.h"
#include "cks_tp.h"

#include <pthread.h>
#include <signal.h>

typedef struct cks_sv_version cks_sv_version_t;

/* A deferred request on a version: runs when its puts and gets drain. */
typedef enum {
    CKS_SV_WAIT_NONE = 0,
    CKS_SV_WAIT_SEAL,
    CKS_SV_WAIT_ABORT,
    CKS_SV_WAIT_DELETE,
} cks_sv_wait_t;

/* What the progress thread knows of a version that is open, or that has
 * operations in flight. Owned by the progress thread. */
struct cks_sv_version {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    cks_md_version_t rec;  /* as last committed (or being committed) */
    int open;              /* accepting puts */
    int begun;             /* version record committed */
    unsigned pending;      /* puts accepted and not yet committed */
    unsigned readers;      /* gets whose payload is in flight */
    cks_status_t failed;   /* first failure of a put's commit */
    cks_hmap_t *keys;      /* keys of this version written or in flight */
    uint64_t nobjects, bytes;
    cks_sv_wait_t wait;    /* a seal/abort/delete waiting to run */
    cks_tp_conn_h wait_conn;
    uint64_t wait_req_id;
};

/* Work for the metadata writer thread. */
typedef enum {
    CKS_MDQ_BEGIN,  /* write rec (new, OPEN) */
    CKS_MDQ_PUT,    /* CRC the bytes, write the object record */
    CKS_MDQ_SEAL,   /* write rec (SEALED) */
    CKS_MDQ_ABORT,  /* delete objects, write rec (ABORTED) */
    CKS_MDQ_DELETE, /* delete the version and its objects */
} cks_mdq_type_t;

typedef struct {
    uint64_t off, len;
} cks_sv_extent_t;

typedef struct cks_mdq_job {
    struct cks_mdq_job *next;
    cks_mdq_type_t type;
    cks_sv_version_t *v;    /* job/version strings are read by the writer */
    cks_md_version_t rec;   /* BEGIN, SEAL, ABORT */
    cks_md_object_t obj;    /* PUT */
    const uint8_t *data;    /* PUT: bytes in the arena */
    cks_tp_conn_h conn;     /* who gets the reply (one reference) */
    uint64_t req_id;
    cks_status_t status;    /* result, set by the writer */
    cks_sv_extent_t *freed; /* ABORT, DELETE: extents to return to the arena */
    size_t nfreed;
    cks_tp_worker_h tp;     /* PUT: payload receipt context */
    struct cks_server *server;
} cks_mdq_job_t;

typedef struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    cks_mdq_job_t *head, *tail; /* to the writer */
    cks_mdq_job_t *done_head, *done_tail; /* back to the progress thread */
    int stop;
    int started;
    cks_md_h md;
    cks_tp_worker_h tp; /* signalled when jobs are done */
} cks_mdq_t;

cks_status_t cks_mdq_start(cks_mdq_t *q, cks_md_h md, cks_tp_worker_h tp);
/** Finish queued jobs, then stop the thread. */
void cks_mdq_stop(cks_mdq_t *q);
void cks_mdq_push(cks_mdq_t *q, cks_mdq_job_t *job);
/** Take every finished job (a list, oldest first). */
cks_mdq_job_t *cks_mdq_take_done(cks_mdq_t *q);

/** Collect the arena extents of every object of a version (for freeing).
 *  Runs inside the caller's transaction. */
cks_status_t cks_sv_collect_extents(cks_md_txn_h txn, const char *job, size_t job_len,
                                    uint64_t version, cks_sv_extent_t **ext_p,
                                    size_t *n_p);

#endif
