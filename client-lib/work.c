/*
 * DESIGN: the client's work threads: jobs that would hold up the progress
 * thread (the decode of a degraded read's stripe, read.c) run on threads of
 * their own while the progress thread goes on receiving, and each job's
 * `done` runs back on the progress thread, which owns every structure the
 * job came from. The queue (a cks_workq) starts at the first push; a
 * thread's wake-up is the transport's worker signal, so the progress
 * thread's poll() returns and takes the finished jobs on its next pass.
 * When no thread can start, the caller runs the job itself.
 *
 * Never: run `done` anywhere but the progress thread; leave a job behind at
 * the client's stop (queued ones are run, then finished).
 */
#include "client_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

unsigned cks_cl_helper_threads(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu >= 8 ? (unsigned)CKS_MIN(ncpu / 4, 4) : 1u;
}

static void cks_cl_work_run(cks_workq_t *q, cks_workq_job_t *jobs, void *arg)
{
    (void)q;
    (void)arg;
    cks_cl_work_t *w = CKS_CONTAINER_OF(jobs, cks_cl_work_t, wq);
    w->run(w);
}

static void cks_cl_work_wake(void *arg)
{
    cks_client_h c = arg;
    cks_tp_worker_signal(c->tp);
}

cks_status_t cks_cl_work_push(cks_client_h c, cks_cl_work_t *w)
{
    if (c->work == NULL && !c->work_none) {
        cks_workq_params_t p = {.nthreads = cks_cl_helper_threads(),
                                .flags    = CKS_WORKQ_DRAIN,
                                .run      = cks_cl_work_run,
                                .wake     = cks_cl_work_wake,
                                .arg      = c,
                                .name     = "cks-work"};
        int none = 0;
#ifdef CKS_FAULT_POINTS
        /* test builds: CKS_NO_WORK_THREADS=1 - as if none could start */
        const char *env = getenv("CKS_NO_WORK_THREADS");
        none            = env != NULL && strcmp(env, "1") == 0;
#endif
        if (none || cks_workq_create(&p, &c->work) != CKS_OK) {
            c->work      = NULL;
            c->work_none = 1;
            cks_warn("no work threads: the progress thread decodes degraded reads itself");
        }
    }
    if (c->work == NULL) {
        return CKS_ERR_UNSUPPORTED;
    }
    return cks_workq_push(c->work, &w->wq);
}

unsigned cks_cl_work_reap(cks_client_h c)
{
    cks_workq_job_t *l = c->work != NULL ? cks_workq_take_done(c->work) : NULL;
    unsigned n         = 0;
    while (l != NULL) {
        cks_workq_job_t *next = l->next;
        cks_cl_work_t *w      = CKS_CONTAINER_OF(l, cks_cl_work_t, wq);
        w->done(w); /* may free w */
        l = next;
        n++;
    }
    return n;
}

void cks_cl_work_stop(cks_client_h c)
{
    if (c->work == NULL) {
        return;
    }
    (void)cks_workq_stop(c->work); /* drain: every queued job runs */
    cks_cl_work_reap(c);
    cks_workq_destroy(c->work);
    c->work      = NULL;
    c->work_none = 1; /* a `done` that pushes again gets its job back */
}
