/*
 * DESIGN: the one background-work queue (cks_workq_*, declared in
 * cks_common.h). It owns its threads, one lock, one condition and two
 * intrusive lists of its owner's jobs, both oldest first: queued (to the
 * threads) and done (back to the owner). A thread holds the lock only to
 * move links; `run`, `wake` and `late` are called without it. The stop sets
 * a flag under the lock, wakes every thread and joins them: in drain mode a
 * thread leaves only once nothing is queued, else at once, and what is
 * still queued goes back to the owner.
 * Users: the metadata writer (server/mdq.c: one thread, batches, drain), the
 * encoders (server/encoder.c: N threads, drain), the repair decoders
 * (server/repair.c) and the prefault thread (transport/prefault.c: one
 * thread, no drain). A queue whose params set `nice` runs its threads that
 * many nice levels below the process: the encoders and the decoders, whose
 * work no client waits on, yield the cores to the progress thread's copies.
 * Never: allocate, free or read a job beyond its link; call a callback with
 * the lock held; know what `wake` wakes (common sees no UCX).
 */
#include "cks_common.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

struct cks_workq {
    cks_workq_params_t p;
    pthread_mutex_t lock;
    pthread_cond_t cond;                    /* a job queued, or the stop */
    cks_workq_job_t *head, *tail;           /* queued, oldest first */
    cks_workq_job_t *done_head, *done_tail; /* finished, oldest first */
    int stopping;      /* the stop began (written atomically: cks_workq_stopping()) */
    int stopped;       /* the threads are joined (owner's thread) */
    unsigned nlive;    /* threads that have not left their loop */
    unsigned nthreads; /* threads started */
    pthread_t threads[];
};

/* Append first..last (linked) to a list; under the lock. */
static void cks_workq_append(cks_workq_job_t **head_p, cks_workq_job_t **tail_p,
                             cks_workq_job_t *first, cks_workq_job_t *last)
{
    last->next = NULL;
    if (*tail_p != NULL) {
        (*tail_p)->next = first;
    } else {
        *head_p = first;
    }
    *tail_p = last;
}

/* What a thread takes (under the lock, something queued): the oldest job,
 * or in batch mode every one; *last_p: the list's last job. */
static cks_workq_job_t *cks_workq_take_queued(cks_workq_t *q, cks_workq_job_t **last_p)
{
    cks_workq_job_t *jobs = q->head;

    if (q->p.flags & CKS_WORKQ_BATCH) {
        *last_p = q->tail;
        q->head = q->tail = NULL;
        return jobs;
    }
    q->head = jobs->next;
    if (q->head == NULL) {
        q->tail = NULL;
    }
    jobs->next = NULL;
    *last_p    = jobs;
    return jobs;
}

/* Whether a thread that woke up runs something (under the lock): a job is
 * queued, and either no stop began or the stop drains. */
static int cks_workq_has_work(const cks_workq_t *q)
{
    return q->head != NULL && (!q->stopping || (q->p.flags & CKS_WORKQ_DRAIN));
}

/* Lower the calling thread's CPU priority by `nice` levels (Linux: a
 * thread's nice value is its own). Raising it needs no privilege; a failure
 * only leaves the thread at the process's priority. */
static void cks_workq_lower_priority(unsigned nice)
{
    id_t tid = (id_t)syscall(SYS_gettid);
    int cur;

    errno = 0;
    cur   = getpriority(PRIO_PROCESS, tid);
    if (cur == -1 && errno != 0) {
        return;
    }
    cur += (int)nice;
    if (setpriority(PRIO_PROCESS, tid, cur > 19 ? 19 : cur) != 0) {
        cks_warn("work queue: thread priority not lowered: %s", strerror(errno));
    }
}

static void *cks_workq_thread(void *arg)
{
    cks_workq_t *q = arg;
    cks_workq_job_t *jobs, *last;

    if (q->p.nice > 0) {
        cks_workq_lower_priority(q->p.nice);
    }
    if (q->p.name != NULL) {
        char name[16];
        snprintf(name, sizeof(name), "%s", q->p.name); /* the kernel keeps 15 */
        (void)pthread_setname_np(pthread_self(), name);
    }
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (q->head == NULL && !q->stopping) {
            pthread_cond_wait(&q->cond, &q->lock);
        }
        if (!cks_workq_has_work(q)) {
            break;
        }
        jobs = cks_workq_take_queued(q, &last);
        pthread_mutex_unlock(&q->lock);

        q->p.run(q, jobs, q->p.arg);

        pthread_mutex_lock(&q->lock);
        cks_workq_append(&q->done_head, &q->done_tail, jobs, last);
        if (q->p.wake != NULL) {
            pthread_mutex_unlock(&q->lock);
            q->p.wake(q->p.arg);
            pthread_mutex_lock(&q->lock);
        }
    }
    q->nlive--; /* in the same hold as the decision: a push sees it */
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

static cks_status_t cks_workq_check(const cks_workq_params_t *params)
{
    if (params == NULL || params->run == NULL || params->nthreads == 0 || params->nice > 19 ||
        (params->flags & ~(unsigned)(CKS_WORKQ_BATCH | CKS_WORKQ_DRAIN)) != 0) {
        return CKS_ERR_INVALID_PARAM;
    }
    return CKS_OK;
}

cks_status_t cks_workq_create(const cks_workq_params_t *params, cks_workq_t **q_p)
{
    cks_status_t status = cks_workq_check(params);
    cks_workq_t *q;
    int rc;

    if (status != CKS_OK) {
        return status;
    }
    q = calloc(1, sizeof(*q) + params->nthreads * sizeof(q->threads[0]));
    if (q == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    q->p = *params;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    for (unsigned i = 0; i < params->nthreads; i++) {
        q->nlive++; /* threads read it only after the stop, under the lock */
        rc = pthread_create(&q->threads[i], NULL, cks_workq_thread, q);
        if (rc != 0) {
            cks_error("work queue: thread %u of %u not started: %s", i + 1,
                      params->nthreads, strerror(rc));
            q->nlive--;
            status = CKS_ERR_NO_MEMORY;
            goto err_stop;
        }
        q->nthreads++;
    }
    *q_p = q;
    return CKS_OK;

err_stop:
    (void)cks_workq_stop(q); /* nothing was queued */
    cks_workq_destroy(q);
    return status;
}

/* A push after the stop began, when no thread will run it. */
static cks_status_t cks_workq_push_late(cks_workq_t *q, cks_workq_job_t *job)
{
    if (q->p.late == NULL) {
        return CKS_ERR_CANCELED;
    }
    q->p.late(job, q->p.arg);
    pthread_mutex_lock(&q->lock);
    cks_workq_append(&q->done_head, &q->done_tail, job, job);
    pthread_mutex_unlock(&q->lock);
    return CKS_OK;
}

cks_status_t cks_workq_push(cks_workq_t *q, cks_workq_job_t *job)
{
    pthread_mutex_lock(&q->lock);
    if (q->stopping && (q->nlive == 0 || !(q->p.flags & CKS_WORKQ_DRAIN))) {
        pthread_mutex_unlock(&q->lock);
        return cks_workq_push_late(q, job);
    }
    cks_workq_append(&q->head, &q->tail, job, job);
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
    return CKS_OK;
}

cks_workq_job_t *cks_workq_take_done(cks_workq_t *q)
{
    cks_workq_job_t *list;

    pthread_mutex_lock(&q->lock);
    list         = q->done_head;
    q->done_head = q->done_tail = NULL;
    pthread_mutex_unlock(&q->lock);
    return list;
}

int cks_workq_stopping(const cks_workq_t *q)
{
    return __atomic_load_n(&q->stopping, __ATOMIC_RELAXED);
}

cks_workq_job_t *cks_workq_stop(cks_workq_t *q)
{
    cks_workq_job_t *left;

    if (q->stopped) {
        return NULL;
    }
    pthread_mutex_lock(&q->lock);
    __atomic_store_n(&q->stopping, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
    for (unsigned i = 0; i < q->nthreads; i++) {
        pthread_join(q->threads[i], NULL);
    }
    pthread_mutex_lock(&q->lock);
    left    = q->head; /* NULL in drain mode: the threads ran everything */
    q->head = q->tail = NULL;
    q->stopped        = 1;
    pthread_mutex_unlock(&q->lock);
    return left;
}

void cks_workq_destroy(cks_workq_t *q)
{
    if (q == NULL) {
        return;
    }
    (void)cks_workq_stop(q); /* a second stop: nothing */
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->lock);
    free(q);
}
