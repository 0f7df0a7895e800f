/*
 * common/: the background-work queue (cks_workq_*). Jobs come back in the
 * order they were pushed; batch mode hands a thread every job queued at
 * once; N threads run jobs at the same time; the stop runs what is queued
 * (drain) or hands back what never started; a push after the stop is
 * refused or finished through the done list, as the owner chose; `wake`
 * runs once a job is on the done list. Where a test needs a job to be
 * running (or the stop to have begun) it waits for that state on a
 * condition, up to T_WAIT_S: no sleeps, every loop bounded.
 */
#include "cks_common.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define T_JOBS   64
#define T_WAIT_S 10

typedef struct {
    cks_workq_job_t wq;
    int id;
    int ran;  /* times run */
    int late; /* times passed to `late` */
} tjob_t;

/* What the callbacks saw, under one lock. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int order[T_JOBS];   /* ids in the order they were run */
    int nrun;
    int batch[T_JOBS];   /* how many jobs each `run` call got */
    int nbatch;
    int gate_id;         /* the job whose run waits until `open` (-1: none) */
    int gated, open;
    int barrier;         /* jobs with id < barrier wait until that many run at once */
    int running, peak;
    int timed_out;       /* a wait on a queue thread gave up */
    int wakes, lates;
    cks_workq_t *q;
    int saw_stopping;    /* the gated job saw cks_workq_stopping() */
} tctx_t;

static tjob_t jobs[T_JOBS];
static tctx_t ctx;

static void t_init(void)
{
    memset(jobs, 0, sizeof(jobs));
    for (int i = 0; i < T_JOBS; i++) {
        jobs[i].id = i;
    }
    memset(&ctx, 0, sizeof(ctx));
    pthread_mutex_init(&ctx.lock, NULL);
    pthread_cond_init(&ctx.cond, NULL);
    ctx.gate_id = -1;
}

/* Wait (lock held) until *what >= value, up to T_WAIT_S; 0: it did not. */
static int t_wait_locked(int *what, int value)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += T_WAIT_S;
    while (*what < value) {
        if (pthread_cond_timedwait(&ctx.cond, &ctx.lock, &until) != 0 && *what < value) {
            return 0;
        }
    }
    return 1;
}

static int t_wait(int *what, int value)
{
    pthread_mutex_lock(&ctx.lock);
    int ok = t_wait_locked(what, value);
    pthread_mutex_unlock(&ctx.lock);
    return ok;
}

static void t_open_gate(void)
{
    pthread_mutex_lock(&ctx.lock);
    ctx.open = 1;
    pthread_cond_broadcast(&ctx.cond);
    pthread_mutex_unlock(&ctx.lock);
}

/* One job, on a queue thread: held at the gate or the barrier when asked. */
static void t_run_one(tjob_t *j)
{
    pthread_mutex_lock(&ctx.lock);
    ctx.order[ctx.nrun++] = j->id;
    j->ran++;
    ctx.running++;
    ctx.peak = CKS_MAX(ctx.peak, ctx.running);
    pthread_cond_broadcast(&ctx.cond);
    if (j->id == ctx.gate_id) {
        ctx.gated = 1;
        pthread_cond_broadcast(&ctx.cond);
        ctx.timed_out |= !t_wait_locked(&ctx.open, 1);
        ctx.saw_stopping = cks_workq_stopping(ctx.q);
    }
    if (j->id < ctx.barrier) {
        ctx.timed_out |= !t_wait_locked(&ctx.peak, ctx.barrier);
    }
    ctx.running--;
    pthread_mutex_unlock(&ctx.lock);
}

static void t_run(cks_workq_t *q, cks_workq_job_t *list, void *arg)
{
    int n = 0;
    (void)q;
    (void)arg;
    for (cks_workq_job_t *l = list; l != NULL; l = l->next) {
        t_run_one(CKS_CONTAINER_OF(l, tjob_t, wq));
        n++;
    }
    pthread_mutex_lock(&ctx.lock);
    ctx.batch[ctx.nbatch++] = n;
    pthread_mutex_unlock(&ctx.lock);
}

static void t_wake(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&ctx.lock);
    ctx.wakes++;
    pthread_cond_broadcast(&ctx.cond);
    pthread_mutex_unlock(&ctx.lock);
}

static void t_late(cks_workq_job_t *job, void *arg)
{
    (void)arg;
    CKS_CONTAINER_OF(job, tjob_t, wq)->late++;
    pthread_mutex_lock(&ctx.lock);
    ctx.lates++;
    pthread_mutex_unlock(&ctx.lock);
}

static cks_workq_t *t_create(unsigned nthreads, unsigned flags, int with_late)
{
    cks_workq_params_t p = {nthreads, flags, t_run, t_wake, with_late ? t_late : NULL, NULL, 0,
                            NULL};
    cks_workq_t *q       = NULL;
    cr_assert_eq(cks_workq_create(&p, &q), CKS_OK);
    ctx.q = q;
    return q;
}

static void t_push(cks_workq_t *q, int from, int to)
{
    for (int i = from; i < to; i++) {
        cr_assert_eq(cks_workq_push(q, &jobs[i].wq), CKS_OK, "push of job %d", i);
    }
}

/* The ids of a list, in its order; returns how many. */
static int t_ids(cks_workq_job_t *list, int *ids, int max)
{
    int n = 0;
    for (cks_workq_job_t *l = list; l != NULL && n < max; l = l->next) {
        ids[n++] = CKS_CONTAINER_OF(l, tjob_t, wq)->id;
    }
    return n;
}

static void t_expect_ids(cks_workq_job_t *list, int from, int to, const char *what)
{
    int ids[T_JOBS];
    int n = t_ids(list, ids, T_JOBS);
    cr_assert_eq(n, to - from, "%s: %d jobs, expected %d", what, n, to - from);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(ids[i], from + i, "%s: position %d holds job %d", what, i, ids[i]);
    }
}

/* Stop the queue from another thread (the stop waits for the gated job). */
typedef struct {
    pthread_t thread;
    cks_workq_job_t *left;
} tstopper_t;

static void *t_stopper(void *arg)
{
    tstopper_t *st = arg;
    st->left       = cks_workq_stop(ctx.q);
    return NULL;
}

/* Job 0 held in `run`, jobs 1..n-1 queued behind it, then the stop begun on
 * another thread. */
static void t_stop_while_queued(cks_workq_t *q, int n, tstopper_t *st)
{
    ctx.gate_id = 0;
    t_push(q, 0, 1);
    cr_assert(t_wait(&ctx.gated, 1), "job 0 did not start");
    t_push(q, 1, n);
    cr_assert_eq(pthread_create(&st->thread, NULL, t_stopper, st), 0);
    for (int i = 0; i < T_WAIT_S * 1000 && !cks_workq_stopping(q); i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL); /* polls a flag, bounded; no ordering rests on it */
    }
    cr_assert(cks_workq_stopping(q), "the stop did not begin");
}

TestSuite(workq, .init = t_init, .timeout = 30);

Test(workq, bad_params_are_refused)
{
    cks_workq_params_t p = {1, 0, t_run, NULL, NULL, NULL, 0, NULL};
    cks_workq_t *q       = NULL;

    p.nthreads = 0;
    cr_assert_eq(cks_workq_create(&p, &q), CKS_ERR_INVALID_PARAM);
    p.nthreads = 1;
    p.run      = NULL;
    cr_assert_eq(cks_workq_create(&p, &q), CKS_ERR_INVALID_PARAM);
    p.run   = t_run;
    p.flags = 1u << 7;
    cr_assert_eq(cks_workq_create(&p, &q), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_workq_create(NULL, &q), CKS_ERR_INVALID_PARAM);
    p.flags = 0;
    p.nice  = 20;
    cr_assert_eq(cks_workq_create(&p, &q), CKS_ERR_INVALID_PARAM);
    cr_assert_null(q, "a failed create wrote its output");
}

/* What a queue thread's nice value is, seen from the job it runs. */
static int nice_seen[2];

static void t_run_nice(cks_workq_t *q, cks_workq_job_t *list, void *arg)
{
    (void)q;
    (void)arg;
    errno = 0;
    int v = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    nice_seen[CKS_CONTAINER_OF(list, tjob_t, wq)->id] = errno != 0 ? -100 : v;
}

Test(workq, nice_lowers_the_threads_priority_and_not_the_callers)
{
    cks_workq_params_t p = {.nthreads = 1, .flags = CKS_WORKQ_DRAIN, .run = t_run_nice};
    cks_workq_t *q       = NULL;
    int self = getpriority(PRIO_PROCESS, 0);

    if (self > 9) {
        cr_skip_test("this process already runs at nice %d", self);
    }
    p.nice = 10; /* job 0 */
    cr_assert_eq(cks_workq_create(&p, &q), CKS_OK);
    cr_assert_eq(cks_workq_push(q, &jobs[0].wq), CKS_OK);
    cr_assert_null(cks_workq_stop(q));
    cks_workq_destroy(q);
    p.nice = 0; /* job 1: the process's own */
    cr_assert_eq(cks_workq_create(&p, &q), CKS_OK);
    cr_assert_eq(cks_workq_push(q, &jobs[1].wq), CKS_OK);
    cr_assert_null(cks_workq_stop(q));
    cks_workq_destroy(q);
    cr_assert_eq(nice_seen[0], self + 10, "nice 10: the thread ran at %d (process %d)",
                 nice_seen[0], self);
    cr_assert_eq(nice_seen[1], self, "nice 0: the thread ran at %d (process %d)",
                 nice_seen[1], self);
    cr_assert_eq(getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)), self,
                 "the creating thread's priority changed");
}

/* Each thread's name as its job saw it (the kernel's, /proc/.../comm). */
static char name_seen[2][32];

static void t_run_name(cks_workq_t *q, cks_workq_job_t *l, void *arg)
{
    (void)q;
    (void)arg;
    tjob_t *j = CKS_CONTAINER_OF(l, tjob_t, wq);
    if (pthread_getname_np(pthread_self(), name_seen[j->id], sizeof(name_seen[j->id])) != 0) {
        snprintf(name_seen[j->id], sizeof(name_seen[j->id]), "(getname failed)");
    }
}

Test(workq, threads_take_the_name_given_cut_to_fifteen_characters)
{
    cks_workq_params_t p = {.nthreads = 1, .flags = CKS_WORKQ_DRAIN, .run = t_run_name};
    char self[32]        = "";
    cks_workq_t *q       = NULL;

    p.name = "cks-a-long-queue-name"; /* job 0 */
    cr_assert_eq(cks_workq_create(&p, &q), CKS_OK);
    cr_assert_eq(cks_workq_push(q, &jobs[0].wq), CKS_OK);
    cr_assert_null(cks_workq_stop(q));
    cks_workq_destroy(q);
    p.name = NULL; /* job 1: the process's */
    cr_assert_eq(cks_workq_create(&p, &q), CKS_OK);
    cr_assert_eq(cks_workq_push(q, &jobs[1].wq), CKS_OK);
    cr_assert_null(cks_workq_stop(q));
    cks_workq_destroy(q);
    cr_assert_eq(pthread_getname_np(pthread_self(), self, sizeof(self)), 0);
    cr_assert_str_eq(name_seen[0], "cks-a-long-queu");
    cr_assert_str_eq(name_seen[1], self, "unnamed: '%s', the creator's '%s'", name_seen[1],
                     self);
}

Test(workq, one_thread_runs_and_returns_jobs_in_push_order)
{
    cks_workq_t *q = t_create(1, CKS_WORKQ_DRAIN, 0);

    t_push(q, 0, T_JOBS);
    cr_assert_null(cks_workq_stop(q), "a draining stop left jobs");
    cr_assert_eq(ctx.nrun, T_JOBS);
    for (int i = 0; i < T_JOBS; i++) {
        cr_assert_eq(ctx.order[i], i, "run %d was job %d", i, ctx.order[i]);
    }
    t_expect_ids(cks_workq_take_done(q), 0, T_JOBS, "done list");
    cr_assert_null(cks_workq_take_done(q), "taken twice");
    cks_workq_destroy(q);
}

Test(workq, batch_mode_gets_every_queued_job_at_once)
{
    cks_workq_t *q = t_create(1, CKS_WORKQ_BATCH | CKS_WORKQ_DRAIN, 0);

    ctx.gate_id = 0;
    t_push(q, 0, 1);
    cr_assert(t_wait(&ctx.gated, 1), "job 0 did not start");
    t_push(q, 1, 10); /* queued while the thread runs job 0 */
    t_open_gate();
    cr_assert(t_wait(&ctx.nrun, 10), "the batch was not run");
    cr_assert_null(cks_workq_stop(q));
    cr_assert_eq(ctx.nbatch, 2, "%d run calls", ctx.nbatch);
    cr_assert_eq(ctx.batch[0], 1);
    cr_assert_eq(ctx.batch[1], 9, "the second call got %d jobs", ctx.batch[1]);
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(ctx.order[i], i);
    }
    t_expect_ids(cks_workq_take_done(q), 0, 10, "done list");
    cr_assert_eq(ctx.wakes, 2, "one wake per batch");
    cks_workq_destroy(q);
}

Test(workq, n_threads_run_jobs_at_once_and_all_complete)
{
    const int nthreads = 4;
    cks_workq_t *q     = t_create((unsigned)nthreads, CKS_WORKQ_DRAIN, 0);

    ctx.barrier = nthreads; /* jobs 0..3 each wait until 4 run at once */
    t_push(q, 0, T_JOBS);
    cr_assert(t_wait(&ctx.nrun, T_JOBS), "not every job ran");
    cr_assert_null(cks_workq_stop(q));
    cr_assert_not(ctx.timed_out, "the first %d jobs never ran at the same time",
                  nthreads);
    cr_assert_geq(ctx.peak, nthreads);
    int ids[T_JOBS], seen[T_JOBS] = {0};
    cr_assert_eq(t_ids(cks_workq_take_done(q), ids, T_JOBS), T_JOBS);
    for (int i = 0; i < T_JOBS; i++) {
        seen[ids[i]]++;
        cr_assert_eq(jobs[i].ran, 1, "job %d ran %d times", i, jobs[i].ran);
    }
    for (int i = 0; i < T_JOBS; i++) {
        cr_assert_eq(seen[i], 1, "job %d came back %d times", i, seen[i]);
    }
    cks_workq_destroy(q);
}

Test(workq, draining_stop_runs_what_is_queued)
{
    cks_workq_t *q = t_create(1, CKS_WORKQ_DRAIN, 0);
    tstopper_t st  = {0};

    t_stop_while_queued(q, 6, &st);
    cr_assert_eq(cks_workq_push(q, &jobs[6].wq), CKS_OK,
                 "a push while a draining stop waits is refused");
    t_open_gate();
    pthread_join(st.thread, NULL);
    cr_assert_null(st.left, "a draining stop returned jobs");
    cr_assert_eq(ctx.nrun, 7, "%d of 7 jobs ran", ctx.nrun);
    t_expect_ids(cks_workq_take_done(q), 0, 7, "done list");
    cr_assert_eq(ctx.wakes, 7);
    cks_workq_destroy(q);
}

Test(workq, stop_without_drain_returns_what_never_started)
{
    cks_workq_t *q = t_create(1, 0, 0);
    tstopper_t st  = {0};

    t_stop_while_queued(q, 6, &st);
    t_open_gate();
    pthread_join(st.thread, NULL);
    cr_assert(ctx.saw_stopping, "the running job did not see the stop");
    cr_assert_eq(ctx.nrun, 1, "%d jobs ran; only job 0 had started", ctx.nrun);
    t_expect_ids(st.left, 1, 6, "jobs handed back");
    t_expect_ids(cks_workq_take_done(q), 0, 1, "done list");
    for (int i = 1; i < 6; i++) {
        cr_assert_eq(jobs[i].ran, 0, "job %d ran", i);
    }
    cks_workq_destroy(q);
}

Test(workq, push_after_stop_is_refused_without_late)
{
    cks_workq_t *q = t_create(2, CKS_WORKQ_DRAIN, 0);

    cr_assert_null(cks_workq_stop(q));
    cr_assert_eq(cks_workq_push(q, &jobs[0].wq), CKS_ERR_CANCELED);
    cr_assert_null(cks_workq_take_done(q), "a refused job came back");
    cr_assert_null(cks_workq_stop(q), "a second stop returned jobs");
    cr_assert_eq(jobs[0].ran, 0);
    cks_workq_destroy(q);
}

Test(workq, push_after_stop_goes_to_done_with_late)
{
    cks_workq_t *q = t_create(1, CKS_WORKQ_BATCH | CKS_WORKQ_DRAIN, 1);

    t_push(q, 0, 1);
    cr_assert(t_wait(&ctx.wakes, 1), "job 0 was not run");
    cr_assert_null(cks_workq_stop(q));
    t_push(q, 1, 3);
    cr_assert_eq(ctx.lates, 2);
    cr_assert_eq(jobs[1].late + jobs[2].late, 2);
    cr_assert_eq(jobs[1].ran + jobs[2].ran, 0, "a job pushed after the stop ran");
    cr_assert_eq(ctx.wakes, 1, "a late push woke the owner");
    t_expect_ids(cks_workq_take_done(q), 0, 3, "done list");
    cks_workq_destroy(q);
}

Test(workq, wake_comes_once_the_job_is_on_the_done_list)
{
    cks_workq_t *q = t_create(1, CKS_WORKQ_DRAIN, 0);

    for (int i = 0; i < 3; i++) {
        t_push(q, i, i + 1);
        cr_assert(t_wait(&ctx.wakes, i + 1), "no wake for job %d", i);
        t_expect_ids(cks_workq_take_done(q), i, i + 1, "done list at the wake");
    }
    cr_assert_null(cks_workq_stop(q));
    cr_assert_eq(ctx.wakes, 3);
    cks_workq_destroy(q);
}
