/*
 * DESIGN: the flush thread: it takes jobs from the progress thread in
 * order, runs each (chunks written, flush.c; a version published,
 * flush_publish.c; a request recorded or removed; a version's age read)
 * and the scan when it is due (flush_scan.c), and hands every job back;
 * the progress thread takes them (cks_fl_take_done()) and finishes them
 * (flush_policy.c). Start, queue, stop. See flush.c for the whole design.
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
    (void)pthread_setname_np(pthread_self(), "cks-flush");
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
        cks_fl_append(&fl->done_head, &fl->done_tail, j); /* to the progress thread */
        cks_tp_worker_signal(fl->s->tp);
    }
    pthread_mutex_unlock(&fl->lock);
    return NULL;
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

/* Every job the flush thread handed back, oldest first (progress thread). */
cks_fl_job_t *cks_fl_take_done(struct cks_sv_flush *fl)
{
    cks_fl_job_t *j;
    pthread_mutex_lock(&fl->lock);
    j             = fl->done_head;
    fl->done_head = fl->done_tail = NULL;
    pthread_mutex_unlock(&fl->lock);
    return j;
}

/* Stop the flush thread and wait for it: what it had queued ends
 * SHUTTING_DOWN, handed back. */
void cks_fl_stop(struct cks_sv_flush *fl)
{
    pthread_mutex_lock(&fl->lock);
    fl->stop = 1;
    pthread_cond_broadcast(&fl->cond);
    pthread_mutex_unlock(&fl->lock);
    pthread_join(fl->thread, NULL); /* queued jobs end as SHUTTING_DOWN */
}

/* Free the flush thread's state (after cks_fl_stop() and the last take). */
void cks_fl_free(cks_server_h s)
{
    struct cks_sv_flush *fl = s->flush;
    pthread_cond_destroy(&fl->cond);
    pthread_mutex_destroy(&fl->lock);
    free(fl);
    s->flush = NULL;
}
