/*
 * DESIGN: the flushes on the progress thread: FLUSH_CHUNKS, FLUSH_PUBLISH
 * and FLUSH_VERSION received and queued to the flush thread; the flushes
 * this server runs itself - a client's FLUSH_VERSION, every Nth committed
 * version (--flush-every) or one due by age (--flush-age) started by its
 * coordinator, what the scan found due - each server's chunks asked for,
 * then published, failed ones tried again; and every job the flush thread
 * hands back, finished (answered, or the policy's next step). Above the
 * flush thread (flush_thread.c) and its scan (flush_scan.c). See flush.c
 * for the whole design.
 *
 * Never: start a flush the policy did not ask for twice; file I/O here.
 */
#include "flush_int.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the flushes this server runs: client requests, every Nth version, found due ----------- */

/* a policy flush that failed is tried again after 10 s, doubling up to 10 min */
#define CKS_FL_RETRY_NS     10000000000ull
#define CKS_FL_RETRY_MAX_NS (600ull * 1000000000ull)
/* an entry of a failed flush not tried for this long is forgotten */
#define CKS_FL_FORGET_NS    (3600ull * 1000000000ull)

static cks_fl_pol_t *cks_fl_pol_find(struct cks_sv_flush *fl, const char *job, size_t job_len,
                                     uint64_t version)
{
    for (cks_fl_pol_t *e = fl->pol; e != NULL; e = e->next) {
        if (e->version == version && e->job_len == job_len &&
            memcmp(e->job, job, job_len) == 0) {
            return e;
        }
    }
    return NULL;
}

/* Answer one waiting client, and free it. */
static void cks_fl_answer(cks_fl_waiter_t *w, cks_status_t status, const char *why)
{
    cks_sv_reply_status(w->conn, w->req_id, status, why != NULL && why[0] ? "%s" : NULL, why);
    cks_tp_conn_put(w->conn);
    free(w);
}

/* Answer every client waiting for a, with `status` and a's reason. */
static void cks_fl_answer_all(cks_fl_auto_t *a, cks_status_t status, const char *why)
{
    while (a->waiters != NULL) {
        cks_fl_waiter_t *w = a->waiters;
        a->waiters         = w->next;
        cks_fl_answer(w, status, why);
    }
}

/* A failure after which no flush of the version can publish it: a client's
 * request for it is dropped. */
static int cks_fl_hopeless(cks_status_t st)
{
    return st == CKS_ERR_NO_SUCH_VERSION || st == CKS_ERR_NO_SUCH_JOB ||
           st == CKS_ERR_NOT_RESTORABLE || st == CKS_ERR_UNSUPPORTED ||
           st == CKS_ERR_INVALID_PARAM;
}

/* Why a failed (the first reason of the most telling party). */
static void cks_fl_auto_why(cks_fl_auto_t *a, int rank, cks_status_t status, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));
static void cks_fl_auto_why(cks_fl_auto_t *a, int rank, cks_status_t status, const char *fmt,
                            ...)
{
    va_list ap;
    if (status == CKS_OK || status == CKS_ERR_VERSION_EXISTS || rank <= a->status_rank) {
        return;
    }
    a->status      = status;
    a->status_rank = rank;
    va_start(ap, fmt);
    vsnprintf(a->why, sizeof(a->why), fmt, ap);
    va_end(ap);
}

/* A flush this server ran ended: published (or already there), or failed.
 * Its waiting clients are answered; a client's request is removed once the
 * version is published or cannot be, else kept for a retry. */
static void cks_fl_auto_end(cks_server_h s, cks_fl_auto_t *a, int published)
{
    cks_fl_pol_t *e = a->pol;
    int hopeless    = !published && a->status_rank >= 2 && cks_fl_hopeless(a->status);
    uint64_t wait   = 0;
    char text[2 * CKS_MSG_MAX_LEN];

    if (!published && a->status == CKS_OK) {
        cks_fl_auto_why(a, 3, CKS_ERR_DATA_LOST, "no server wrote its chunks");
    }
    if (e != NULL && s->flush != NULL) {
        e->a = NULL;
        if (published || hopeless) {
            for (cks_fl_pol_t **pp = &s->flush->pol; *pp != NULL; pp = &(*pp)->next) {
                if (*pp == e) {
                    *pp = e->next;
                    break;
                }
            }
            free(e);
        } else {
            wait       = CKS_MIN(CKS_FL_RETRY_NS << CKS_MIN(e->tries - 1, 6u), CKS_FL_RETRY_MAX_NS);
            e->next_ns = cks_time_ns() + wait;
            cks_warn("flush%s: version %" PRIu64 " of '%s' not flushed (try %u): %s; "
                     "tried again in %" PRIu64 " s",
                     a->requested ? "" : " policy", a->version, a->job, e->tries, a->why,
                     (uint64_t)(wait / 1000000000ull));
        }
    }
    if (published) {
        int already = a->ok == 0 && a->exists > 0;
        snprintf(text, sizeof(text), "version %" PRIu64 " of '%s' is flushed already",
                 a->version, a->job);
        cks_fl_answer_all(a, already ? CKS_ERR_VERSION_EXISTS : CKS_OK, already ? text : NULL);
    } else if (a->requested && !hopeless) {
        if (wait > 0) {
            snprintf(text, sizeof(text),
                     "%.150s; the request is recorded: this server flushes the version again "
                     "in %" PRIu64 " s (and once it is back if it stops)",
                     a->why, (uint64_t)(wait / 1000000000ull));
        } else {
            snprintf(text, sizeof(text),
                     "%.150s; the request is recorded: this server flushes the version again "
                     "once it is back",
                     a->why);
        }
        cks_fl_answer_all(a, a->status, text);
    } else {
        cks_fl_answer_all(a, a->status, a->why);
    }
    if (a->requested && (published || hopeless) && s->flush != NULL && !s->flush->stop) {
        cks_fl_job_t *j = calloc(1, sizeof(*j));
        if (j != NULL) { /* else the scan removes it once it sees it published */
            j->type = CKS_FL_UNRECORD;
            memcpy(j->job, a->job, a->job_len);
            j->job_len = a->job_len;
            j->version = a->version;
            snprintf(j->dir, sizeof(j->dir), "%s", s->p.flush_dir);
            cks_fl_queue(s, j);
        }
    }
    free(a);
}

static void cks_fl_auto_publish(cks_server_h s, cks_fl_auto_t *a);

static void cks_fl_auto_one(cks_server_h s, cks_fl_auto_t *a, cks_status_t status)
{
    if (status == CKS_OK) {
        a->ok++;
    } else {
        a->failed++;
        a->exists += status == CKS_ERR_VERSION_EXISTS;
    }
    if (--a->pending == 0) {
        cks_fl_auto_publish(s, a);
    }
}

static void cks_fl_auto_local_done(cks_server_h s, cks_fl_job_t *j)
{
    cks_fl_auto_t *a = j->ctx;
    if (a->publishing) {
        if (j->status == CKS_OK) {
            cks_info("flush: version %" PRIu64 " of '%s' flushed to %s (chunks of %u of %u "
                     "servers)",
                     a->version, a->job, s->p.flush_dir, a->ok, a->ok + a->failed);
        }
        cks_fl_auto_why(a, 3, j->status, "%s", j->why);
        cks_fl_auto_end(s, a, j->status == CKS_OK || j->status == CKS_ERR_VERSION_EXISTS);
        return;
    }
    cks_fl_auto_why(a, 2, j->status, "%s", j->why);
    cks_fl_auto_one(s, a, j->status);
}

typedef struct {
    cks_server_h s;
    cks_fl_auto_t *a;
    unsigned id; /* the peer's server id */
} cks_fl_call_t;

static void cks_fl_auto_peer_done(void *arg, cks_status_t status, const char *msg)
{
    cks_fl_call_t *c = arg;
    if (status != CKS_OK && status != CKS_ERR_VERSION_EXISTS) {
        cks_warn("flush: server %u did not write its chunks of version %" PRIu64
                 " of '%s': %s%s%s",
                 c->id, c->a->version, c->a->job, cks_status_string(status), msg ? ": " : "",
                 msg ? msg : "");
        cks_fl_auto_why(c->a, 1, status, "server %u did not write its chunks: %s%s%.600s", c->id,
                        cks_status_string(status), msg ? ": " : "", msg ? msg : "");
    }
    cks_fl_auto_one(c->s, c->a, status);
    free(c);
}

static cks_fl_job_t *cks_fl_auto_job(cks_server_h s, cks_fl_auto_t *a, unsigned type)
{
    cks_fl_job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        return NULL;
    }
    j->type = type;
    memcpy(j->job, a->job, a->job_len);
    j->job_len = a->job_len;
    j->version = a->version;
    j->nonce   = a->nonce;
    snprintf(j->dir, sizeof(j->dir), "%s", s->p.flush_dir);
    j->done = cks_fl_auto_local_done;
    j->ctx  = a;
    return j;
}

static void cks_fl_auto_publish(cks_server_h s, cks_fl_auto_t *a)
{
    if (s->flush == NULL || s->flush->stop) {
        /* shutting down: the next start's scan resumes it */
        cks_fl_auto_why(a, 3, CKS_ERR_SHUTTING_DOWN, "the server is stopping");
        cks_fl_auto_end(s, a, 0);
        return;
    }
    if (a->ok == 0 && a->exists > 0) {
        cks_fl_auto_end(s, a, 1); /* published before this flush began */
        return;
    }
    cks_fl_job_t *j = a->ok > 0 ? cks_fl_auto_job(s, a, CKS_MSG_FLUSH_PUBLISH) : NULL;
    if (j == NULL) {
        cks_warn("flush: version %" PRIu64 " of '%s' not flushed: no server wrote its chunks",
                 a->version, a->job);
        cks_fl_auto_end(s, a, 0);
        return;
    }
    a->publishing = 1;
    cks_fl_queue(s, j);
}

/* Flush (job, version) to --flush-dir: every server writes its chunks (a
 * server-to-server FLUSH_CHUNKS; this one on its flush thread), then this
 * one publishes. Not when a flush of it is in flight here (a client's
 * request joins it), nor, unless a client asks (w), while a failed one
 * waits for its retry. `requested`: a client asked for it (its record is
 * removed once it is published). w: a waiting client, answered when it
 * ends (this function owns it). */
static void cks_fl_policy_start(cks_server_h s, const char *job, size_t job_len,
                                uint64_t version, const char *why, int requested,
                                cks_fl_waiter_t *w)
{
    cks_fl_auto_t *a = NULL;
    cks_fl_job_t *j;
    cks_fl_pol_t *e;
    uint64_t now = cks_time_ns();
    size_t n     = cks_cluster_nservers(s->map);

    if (s->flush == NULL && (s->stop || cks_fl_start(s) != CKS_OK)) {
        if (w != NULL) { /* stopping (or no thread): the next start's scan resumes it */
            cks_fl_answer(w, CKS_ERR_SHUTTING_DOWN, "the server is stopping");
        }
        return;
    }
    e = cks_fl_pol_find(s->flush, job, job_len, version);
    if (e != NULL && e->a != NULL) {
        e->a->requested |= requested;
        if (w != NULL) {
            w->next         = e->a->waiters;
            e->a->waiters   = w;
        }
        return;
    }
    if (e != NULL && now < e->next_ns && w == NULL) {
        return;
    }
    if ((e == NULL && (e = calloc(1, sizeof(*e))) == NULL) ||
        (a = calloc(1, sizeof(*a))) == NULL) {
        if (e != NULL && e->tries == 0) {
            free(e);
        }
        cks_warn("flush: cannot flush version %" PRIu64 ": out of memory", version);
        if (w != NULL) {
            cks_fl_answer(w, CKS_ERR_NO_MEMORY, "server out of memory");
        }
        return;
    }
    if (e->tries == 0) {
        memcpy(e->job, job, job_len);
        e->job_len    = (uint32_t)job_len;
        e->version    = version;
        e->next       = s->flush->pol;
        s->flush->pol = e;
    }
    e->tries++;
    e->last_ns   = now;
    e->a         = a;
    a->pol       = e;
    a->requested = requested;
    a->waiters   = w;
    if (w != NULL) {
        w->next = NULL;
    }
    memcpy(a->job, job, job_len);
    a->job_len = (uint32_t)job_len;
    a->version = version;
    a->nonce   = cks_tp_random_id();
    a->pending = 1; /* held until every request is out */
    cks_msg_flush_t m = {{a->job, a->job_len}, version, cks_wire_cstr(NULL), a->nonce};
    for (size_t pos = 0; pos < n; pos++) {
        if (pos == s->self) {
            if ((j = cks_fl_auto_job(s, a, CKS_MSG_FLUSH_CHUNKS)) != NULL) {
                a->pending++;
                cks_fl_queue(s, j);
            } else {
                a->failed++;
            }
            continue;
        }
        /* the peer writes to its own --flush-dir (the same storage) */
        cks_tp_conn_h conn = cks_sv_peer(s, pos);
        cks_fl_call_t *c   = malloc(sizeof(*c));
        unsigned id        = cks_cluster_server(s->map, pos)->id;
        if (conn == NULL || c == NULL) {
            free(c);
            a->failed++;
            cks_fl_auto_why(a, 1, CKS_ERR_UNREACHABLE, "server %u cannot be reached", id);
            continue;
        }
        *c = (cks_fl_call_t){s, a, id};
        a->pending++;
        if (cks_tp_call(conn, CKS_MSG_FLUSH_CHUNKS, 0, &m, NULL, 0, NULL,
                        CKS_FL_CALL_TIMEOUT_MS, cks_fl_auto_peer_done, c) != CKS_INPROGRESS) {
            free(c);
            a->pending--;
            a->failed++;
            cks_fl_auto_why(a, 1, CKS_ERR_UNREACHABLE, "server %u cannot be reached", id);
        }
    }
    cks_info("flush%s: flushing version %" PRIu64 " of '%.*s' to %s (%s%s)",
             requested ? "" : " policy", version, (int)job_len, job, s->p.flush_dir, why,
             e->tries > 1 ? ", tried again" : "");
    if (--a->pending == 0) { /* the hold: nothing went out */
        cks_fl_auto_publish(s, a);
    }
}

void cks_sv_flush_committed(cks_server_h s, const char *job, size_t job_len, uint64_t version)
{
    cks_fl_job_t *j;
    if (!cks_fl_policy_on(s)) {
        return;
    }
    if (s->p.flush_every > 0 && version % s->p.flush_every == 0) {
        cks_fl_policy_start(s, job, job_len, version, "every Nth version", 0, NULL);
        return;
    }
    if (s->p.flush_age_s == 0 || s->stop ||
        (s->flush == NULL && cks_fl_start(s) != CKS_OK) ||
        (j = calloc(1, sizeof(*j))) == NULL) {
        return; /* (no thread or memory: the scan finds it due) */
    }
    /* --flush-age: the flush thread reads the directory, then
     * cks_fl_finish() starts the flush when it is due */
    j->type = CKS_FL_AGE_CHECK;
    memcpy(j->job, job, job_len);
    j->job_len = (uint32_t)job_len;
    j->version = version;
    snprintf(j->dir, sizeof(j->dir), "%s", s->p.flush_dir);
    cks_fl_queue(s, j);
}

/* The scan found (job, version) due and not published: this server flushes
 * it when it is the version's first coordinator candidate (the server that
 * coordinates it unless it was down), or when a policy flush of it that this
 * server started failed and its retry is due. */
static void cks_fl_scan_due(cks_server_h s, const cks_fl_job_t *j)
{
    struct cks_sv_flush *fl = s->flush;
    size_t rank             = SIZE_MAX;
    uint64_t now            = cks_time_ns();

    if (fl == NULL || fl->stop) {
        return;
    }
    /* forget failed flushes not tried for an hour (dropped from memory since) */
    for (cks_fl_pol_t **pp = &fl->pol; *pp != NULL;) {
        cks_fl_pol_t *e = *pp;
        if (e->a == NULL && e->last_ns + CKS_FL_FORGET_NS < now) {
            *pp = e->next;
            free(e);
        } else {
            pp = &e->next;
        }
    }
    if (cks_fl_pol_find(fl, j->job, j->job_len, j->version) == NULL &&
        (!cks_sv_coord_candidate(s, j->job, j->job_len, j->version, &rank) || rank != 0)) {
        return;
    }
    cks_fl_policy_start(s, j->job, j->job_len, j->version, "due and not published", 0, NULL);
}

/* ---- jobs handed back, progress and stop (progress thread) --------------------------------- */

/* A job the flush thread handed back, finished: the scan's finds and an
 * age check go to the policy, a policy flush's job to its `done`, a
 * client's request is answered. */
static void cks_fl_finish(cks_server_h s, cks_fl_job_t *j)
{
    uint64_t ms = (cks_time_ns() - j->start_ns) / 1000000u;
    if (j->type == CKS_FL_SCAN_DUE) {
        cks_fl_scan_due(s, j);
        free(j);
        return;
    }
    if (j->type == CKS_FL_AGE_CHECK) {
        if (j->due && s->flush != NULL && !s->flush->stop) {
            cks_fl_policy_start(s, j->job, j->job_len, j->version,
                                "the newest flushed version is older than --flush-age", 0,
                                NULL);
        }
        free(j);
        return;
    }
    if (j->type == CKS_FL_SCAN_REQ) {
        if (s->flush != NULL && !s->flush->stop) {
            cks_fl_policy_start(s, j->job, j->job_len, j->version,
                                "asked for and not finished", 1, NULL);
        }
        free(j);
        return;
    }
    if (j->type == CKS_FL_RECORD || j->type == CKS_FL_UNRECORD) {
        if (j->status != CKS_OK && j->status != CKS_ERR_SHUTTING_DOWN) {
            cks_warn("flush of version %" PRIu64 " of '%s': %s (it goes on, unrecorded: a stop "
                     "now would not resume it)",
                     j->version, j->job, j->why);
        }
        free(j);
        return;
    }
    if (j->reading) {
        cks_sv_read_end(s, &j->read);
    }
    if (j->status == CKS_OK && j->type == CKS_MSG_FLUSH_CHUNKS) {
        cks_info("flush: version %" PRIu64 " of '%s': %" PRIu64 " chunks, %" PRIu64
                 " bytes written in %" PRIu64 " ms",
                 j->version, j->job, j->chunks, j->bytes, ms);
    } else if (j->status != CKS_OK) {
        cks_warn("flush of version %" PRIu64 " of '%s' failed: %s", j->version, j->job,
                 j->why);
    }
    if (j->done != NULL) {
        j->done(s, j);
    } else {
        cks_sv_reply_status(j->conn, j->req_id, j->status, j->status == CKS_OK ? NULL : "%s",
                            j->why);
        cks_tp_conn_put(j->conn);
    }
    free(j);
}

void cks_sv_flush_progress(cks_server_h s)
{
    struct cks_sv_flush *fl = s->flush;
    cks_fl_job_t *j;
    if (fl == NULL) {
        /* with a policy, the flush thread runs from the start: its scan
         * resumes flushes that a stop interrupted */
        if (cks_fl_scan_on(s) && !s->stop) {
            cks_fl_start(s);
        }
        return;
    }
    j = cks_fl_take_done(fl);
    while (j != NULL) {
        cks_fl_job_t *next = j->next;
        cks_fl_finish(s, j);
        j = next;
    }
}

void cks_sv_flush_stop(cks_server_h s)
{
    struct cks_sv_flush *fl = s->flush;
    if (fl == NULL) {
        return;
    }
    cks_fl_stop(fl); /* queued jobs end as SHUTTING_DOWN */
    cks_sv_flush_progress(s);
    while (fl->pol != NULL) {
        cks_fl_pol_t *e = fl->pol;
        fl->pol         = e->next;
        if (e->a != NULL) {
            e->a->pol = NULL; /* its peers' answers may still come */
            /* its clients, while their connections are up */
            cks_fl_answer_all(e->a, CKS_ERR_SHUTTING_DOWN,
                              e->a->requested
                                  ? "the server is stopping; the request is recorded: it "
                                    "flushes the version once it is back"
                                  : "the server is stopping");
        }
        free(e);
    }
    cks_fl_free(s);
}

/* ---- FLUSH_CHUNKS, FLUSH_PUBLISH and FLUSH_VERSION received -------------------------------- */

void cks_sv_flush_request(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, unsigned type,
                          const cks_msg_flush_t *m)
{
    const char *root = s->p.flush_dir;
    cks_fl_job_t *j;
    cks_status_t status;

    if (s->map == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_UNSUPPORTED,
                            "flush needs a cluster (erasure-coded versions)");
        return;
    }
    status = cks_sv_check_names(&m->job, NULL);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "bad job name");
        return;
    }
    if (root == NULL) {
        /* a client never chooses where a server writes: only the operator */
        cks_sv_reply_status(conn, req_id, CKS_ERR_UNSUPPORTED,
                            "flushing is off: this server was started without --flush-dir");
        return;
    }
    if (m->dir.len > 0 &&
        (m->dir.len >= PATH_MAX || memchr(m->dir.ptr, '\0', m->dir.len) != NULL ||
         m->dir.ptr[0] != '/')) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                            "the flush directory must be an absolute path");
        return;
    }
    if (m->dir.len > 0 &&
        (m->dir.len != strlen(root) || memcmp(m->dir.ptr, root, m->dir.len) != 0)) {
        /* a server with a flush directory writes there only */
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                            "this server flushes to its --flush-dir %s only", root);
        return;
    }
    if (s->flush == NULL && (status = cks_fl_start(s)) != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "cannot start the flush thread");
        return;
    }
    if (type == CKS_MSG_FLUSH_VERSION) {
        /* a client asks this server to run the whole flush: the request is
         * recorded first (the flush thread takes jobs in order), then the
         * flush starts, or the client joins the one in flight */
        cks_fl_waiter_t *w = calloc(1, sizeof(*w));
        j                  = calloc(1, sizeof(*j));
        if (w == NULL || j == NULL) {
            free(w);
            free(j);
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, NULL);
            return;
        }
        j->type = CKS_FL_RECORD;
        memcpy(j->job, m->job.ptr, m->job.len);
        j->job_len = m->job.len;
        j->version = m->version;
        snprintf(j->dir, sizeof(j->dir), "%s", root);
        cks_fl_queue(s, j);
        w->conn = conn;
        cks_tp_conn_get(conn);
        w->req_id = req_id;
        cks_fl_policy_start(s, m->job.ptr, m->job.len, m->version, "asked for by a client", 1,
                            w);
        return;
    }
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, NULL);
        return;
    }
    j->type = type;
    j->conn = conn;
    cks_tp_conn_get(conn);
    j->req_id = req_id;
    memcpy(j->job, m->job.ptr, m->job.len);
    j->job_len = m->job.len;
    j->version = m->version;
    j->nonce   = m->nonce;
    if (m->dir.len > 0) {
        memcpy(j->dir, m->dir.ptr, m->dir.len);
    } else {
        snprintf(j->dir, sizeof(j->dir), "%s", root);
    }
    cks_fl_queue(s, j);
}
