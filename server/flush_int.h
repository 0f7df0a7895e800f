/*
 * The flush modules' shared state: jobs, the policy, the flush thread's
 * context (flush.c, flush_publish.c, flush_scan.c, flush_thread.c,
 * flush_policy.c).
 */
#ifndef CKS_FLUSH_INT_H
#define CKS_FLUSH_INT_H

#include "server_int.h"

#include <limits.h>
#include <stdio.h>

/* --flush-rate when not given: bytes/s that one server's flush writes */
#define CKS_FL_RATE_DEFAULT (64ull << 20)

/* a job the flush thread hands back by itself: a version its scan found due
 * by policy and not published (cks_fl_scan) */
#define CKS_FL_SCAN_DUE 0x10000u
/* a version this server coordinates committed: is it due by --flush-age?
 * (the flush thread reads the flush directory to tell) */
#define CKS_FL_AGE_CHECK 0x10001u
/* a client asked this server for a flush (FLUSH_VERSION): write its record,
 * DIR/<job>/.<version>.req-<server id>, before anything else of it */
#define CKS_FL_RECORD 0x10002u
/* the request is met (published) or cannot be (no such version): remove
 * its record */
#define CKS_FL_UNRECORD 0x10003u
/* a job the scan hands back: a request of this server's recorded and not
 * published (a stop interrupted it, or it failed and is tried again) */
#define CKS_FL_SCAN_REQ 0x10004u

typedef struct cks_fl_job {
    struct cks_fl_job *next;
    unsigned type; /* CKS_MSG_FLUSH_CHUNKS, CKS_MSG_FLUSH_PUBLISH or a CKS_FL_ job */
    int due;       /* CKS_FL_AGE_CHECK: the answer */
    cks_tp_conn_h conn;
    uint64_t req_id;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    uint64_t nonce;
    char dir[PATH_MAX];
    cks_sv_read_t read;
    int reading;
    uint64_t start_ns;
    uint64_t bytes, chunks;
    cks_status_t status;
    char why[CKS_MSG_MAX_LEN];
    /* a flush this server started itself (--flush-every): called in place
     * of a reply, on the progress thread; conn is NULL */
    void (*done)(cks_server_h s, struct cks_fl_job *j);
    void *ctx;
} cks_fl_job_t;

typedef struct cks_fl_pol cks_fl_pol_t;
typedef struct cks_fl_auto cks_fl_auto_t;

/* A policy flush this server started: in flight (a), or failed and waiting
 * until next_ns to be tried again. Progress thread only. */
struct cks_fl_pol {
    cks_fl_pol_t *next;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    cks_fl_auto_t *a;
    unsigned tries;
    uint64_t next_ns, last_ns;
};

/* A client waiting for a flush this server runs (FLUSH_VERSION). */
typedef struct cks_fl_waiter {
    struct cks_fl_waiter *next;
    cks_tp_conn_h conn; /* referenced */
    uint64_t req_id;
} cks_fl_waiter_t;

struct cks_fl_auto {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version, nonce;
    unsigned pending, ok, failed;
    unsigned exists;   /* writers that found the version published already */
    int publishing;
    int requested;     /* a client asked for it: its record is removed once
                          the version is published (or cannot be) */
    cks_fl_waiter_t *waiters;
    cks_status_t status; /* why it failed: the publisher's, else this server's
                            writer's, else a peer's */
    int status_rank;     /* 3 publisher, 2 this server's writer, 1 a peer */
    char why[CKS_MSG_MAX_LEN];
    cks_fl_pol_t *pol; /* its entry; NULL once the flush thread stopped */
};

struct cks_sv_flush {
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC */
    cks_fl_job_t *head, *tail, *done_head, *done_tail;
    volatile int stop;
    cks_server_h s;
    /* the policy's scan (flush thread): when it runs next (cks_time_ns();
     * 0: never, no policy) */
    uint64_t scan_ns;
    /* policy flushes this server started, in flight or failed and waiting
     * to be tried again (progress thread only) */
    cks_fl_pol_t *pol;
    /* pacing of the chunk writes (flush thread only): a token bucket of
     * `rate` bytes/s (UINT64_MAX: none) holding at most an eighth of a
     * second of them */
    uint64_t rate;
    double tokens;
    uint64_t tokens_ns;
};

/* j appended to the list (*head_p, *tail_p): the flush thread's queue or its
 * done list (lock held) */
static inline void cks_fl_append(cks_fl_job_t **head_p, cks_fl_job_t **tail_p,
                                 cks_fl_job_t *j)
{
    j->next = NULL;
    if (*tail_p != NULL) {
        (*tail_p)->next = j;
    } else {
        *head_p = j;
    }
    *tail_p = j;
}

/* the first scan after the flush thread starts, then one every ten seconds */
#define CKS_FL_SCAN_FIRST_NS 1000000000ull
#define CKS_FL_SCAN_EVERY_NS 10000000000ull
/* how long a flush call to a peer may take */
#define CKS_FL_CALL_TIMEOUT_MS 600000

/* room for a file name after a directory of the flush */
#define CKS_FL_DIR_MAX (PATH_MAX - 512)

typedef struct {
    char jobdir[CKS_FL_DIR_MAX];
    char tmp[CKS_FL_DIR_MAX];
    char pub[CKS_FL_DIR_MAX];
} cks_fl_paths_t;

/* ---- what this server holds of a version ----------------------------------------------- */
typedef struct {
    cks_md_version_t rec;
    cks_md_object_t *objs;
    size_t nobjs;
} cks_fl_manifest_t;

/* A job fails with this reason (the first one stands). */
void cks_fl_fail(cks_fl_job_t *j, cks_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- between the flush files, grouped by the file that defines them:
 * flush_policy.c calls flush_thread.c, which runs the jobs of flush.c,
 * flush_publish.c and flush_scan.c ---- */

/* flush.c: paths, records, what a server holds, chunks written */

int cks_fl_paths(cks_fl_job_t *j, cks_fl_paths_t *p);

/* cks_fl_paths, and the job failed (CKS_ERR_VERSION_EXISTS) when its
 * version is published already: 0, or -1 with the job failed. */
int cks_fl_paths_unpublished(cks_fl_job_t *j, cks_fl_paths_t *p);

int cks_fl_fsync_dir(const char *path);

/* A file written at `tmp` and synced, closed (`f`, closed either way) and
 * renamed to `path`, then its directory `dir` synced: 0, or -1 with the job
 * failed ("closing <tmp>", or "<verb> <path>" when the rename or the sync
 * fails). */
int cks_fl_close_rename(cks_fl_job_t *j, FILE *f, const char *tmp, const char *path,
                        const char *dir, const char *verb);

void cks_fl_rmdir_flat(const char *path);

void cks_fl_remove_stale(const cks_fl_job_t *j, const cks_fl_paths_t *p);

void cks_fl_record(struct cks_sv_flush *fl, cks_fl_job_t *j);

void cks_fl_unrecord(struct cks_sv_flush *fl, cks_fl_job_t *j);

size_t cks_fl_job_of_dir(const char *name, char *job, size_t len);

cks_status_t cks_fl_manifest(cks_server_h s, cks_fl_job_t *j, cks_md_txn_h txn,
                                    cks_fl_manifest_t *mf);

void cks_fl_chunks(struct cks_sv_flush *fl, cks_fl_job_t *j);

/* flush_publish.c */

void cks_fl_publish(struct cks_sv_flush *fl, cks_fl_job_t *j);

/* flush_scan.c: the scan, an age check, whether the policy and scan are on */

int cks_fl_scan_on(cks_server_h s);

int cks_fl_policy_on(cks_server_h s);

int cks_fl_age_due(cks_server_h s, const char *jobdir);

void cks_fl_scan_requests(struct cks_sv_flush *fl, const char *jobdir, const char *dname);

void cks_fl_scan(struct cks_sv_flush *fl);

/* flush_thread.c: the thread, its queue and the jobs it hands back */

cks_status_t cks_fl_start(cks_server_h s);

void cks_fl_queue(cks_server_h s, cks_fl_job_t *j);

cks_fl_job_t *cks_fl_take_done(struct cks_sv_flush *fl);

void cks_fl_stop(struct cks_sv_flush *fl);

void cks_fl_free(cks_server_h s);

#endif
