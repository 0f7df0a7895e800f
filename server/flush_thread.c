/*
 * DESIGN: the flush thread: it takes jobs from the progress thread, writes
 * chunks to disk paced by --flush-rate, and hands results back. See flush.c
 * for the whole design.
 *
 * Never: touch the progress thread's state or UCX from this thread.
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

/* ---- the flush thread -------------------------------------------------------------------- */

static void *cks_fl_thread(void *arg)
{
    struct cks_sv_flush *fl = arg;
    pthread_mutex_lock(&fl->lock);
    for (;;) {
        while (fl->head == NULL && !fl->stop &&
               (fl->scan_ns == 0 || cks_time_ns() < fl->scan_ns)) {
            if (fl->scan_ns == 0) {
                pthread_cond_wait(&fl->cond, &fl->lock);
            } else {
                struct timespec ts = {(time_t)(fl->scan_ns / 1000000000ull),
                                      (long)(fl->scan_ns % 1000000000ull)};
                pthread_cond_timedwait(&fl->cond, &fl->lock, &ts);
            }
        }
        if (fl->head == NULL && fl->stop) {
            break;
        }
        if (!fl->stop && fl->scan_ns != 0 && cks_time_ns() >= fl->scan_ns) {
            fl->scan_ns = cks_time_ns() + CKS_FL_SCAN_EVERY_NS;
            pthread_mutex_unlock(&fl->lock);
            cks_fl_scan(fl);
            pthread_mutex_lock(&fl->lock);
            continue;
        }
        cks_fl_job_t *j = fl->head;
        fl->head        = j->next;
        if (fl->head == NULL) {
            fl->tail = NULL;
        }
        pthread_mutex_unlock(&fl->lock);
        if (fl->stop) {
            cks_fl_fail(j, CKS_ERR_SHUTTING_DOWN, "the server is shutting down");
        } else if (j->type == CKS_FL_AGE_CHECK) {
            cks_fl_paths_t p;
            j->due = cks_fl_paths(j, &p) == 0 && cks_fl_age_due(fl->s, p.jobdir);
        } else if (j->type == CKS_MSG_FLUSH_CHUNKS) {
            cks_fl_chunks(fl, j);
        } else if (j->type == CKS_FL_RECORD) {
            cks_fl_record(fl, j);
        } else if (j->type == CKS_FL_UNRECORD) {
            cks_fl_unrecord(fl, j);
        } else {
            cks_fl_publish(fl, j);
        }
        pthread_mutex_lock(&fl->lock);
        cks_fl_hand_back(fl, j);
        cks_tp_worker_signal(fl->s->tp);
    }
    pthread_mutex_unlock(&fl->lock);
    return NULL;
}


void cks_fl_finish(cks_server_h s, cks_fl_job_t *j)
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
    pthread_mutex_lock(&fl->lock);
    j             = fl->done_head;
    fl->done_head = fl->done_tail = NULL;
    pthread_mutex_unlock(&fl->lock);
    while (j != NULL) {
        cks_fl_job_t *next = j->next;
        cks_fl_finish(s, j);
        j = next;
    }
}

cks_status_t cks_fl_start(cks_server_h s)
{
    struct cks_sv_flush *fl = calloc(1, sizeof(*fl));
    if (fl == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    fl->s         = s;
    fl->rate      = s->p.flush_rate ? s->p.flush_rate : CKS_FL_RATE_DEFAULT;
    fl->tokens_ns = cks_time_ns();
    fl->scan_ns   = cks_fl_scan_on(s) ? cks_time_ns() + CKS_FL_SCAN_FIRST_NS : 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* cks_time_ns()'s clock */
    pthread_mutex_init(&fl->lock, NULL);
    pthread_cond_init(&fl->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&fl->thread, NULL, cks_fl_thread, fl) != 0) {
        pthread_cond_destroy(&fl->cond);
        pthread_mutex_destroy(&fl->lock);
        free(fl);
        return CKS_ERR_INTERNAL;
    }
    fl->started = 1;
    s->flush    = fl;
    return CKS_OK;
}

void cks_sv_flush_stop(cks_server_h s)
{
    struct cks_sv_flush *fl = s->flush;
    if (fl == NULL) {
        return;
    }
    pthread_mutex_lock(&fl->lock);
    fl->stop = 1;
    pthread_cond_broadcast(&fl->cond);
    pthread_mutex_unlock(&fl->lock);
    pthread_join(fl->thread, NULL); /* queued jobs end as SHUTTING_DOWN */
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
    pthread_cond_destroy(&fl->cond);
    pthread_mutex_destroy(&fl->lock);
    free(fl);
    s->flush = NULL;
}


/* To the flush thread (progress thread). */
void cks_fl_queue(cks_server_h s, cks_fl_job_t *j)
{
    j->start_ns = cks_time_ns();
    if (j->type == CKS_MSG_FLUSH_CHUNKS) {
        /* arena space freed from now on is not reused until the flush ends */
        cks_sv_read_begin(s, &j->read);
        j->reading = 1;
    }
    pthread_mutex_lock(&s->flush->lock);
    cks_fl_append(&s->flush->head, &s->flush->tail, j);
    pthread_cond_signal(&s->flush->cond);
    pthread_mutex_unlock(&s->flush->lock);
}


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
