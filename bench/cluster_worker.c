/*
 * DESIGN: one client process of the cluster bench: its own libckstore client, told
 * what to do over a pipe (two phases: READY, then GO, so that all start
 * together) and answering with its timestamps (CLOCK_MONOTONIC is one clock
 * for every process of the machine). It reads its parent's context and
 * changes nothing of it (const); its own state is a cl_worker_t.
 * Threads: the process's main thread drives the client; libckstore runs its
 * own progress thread and calls our completion callbacks there (they only
 * count). Never: block in a callback; wait without a deadline.
 */
#include "cluster_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Puts or gets in flight, counted by the completion callbacks. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned inflight;
    cks_status_t first_err;
    double last_copied; /* --stage-host: when the last COPIED came */
} cl_win_t;

/* Put objects [0, n) with a window of --window in flight. */
typedef struct {
    const char *key;
    const void *buf;
    uint64_t size;
    cks_tags_t tags;
} cl_put_t;

#define CL_MAX_READ (CL_MAX_OBJS * CL_MAX_CLIENTS) /* objects one reader may restore */

/* A client process's own state. */
typedef struct {
    const cl_ctx_t *x; /* its parent's context, as it was at the fork */
    unsigned index;
    cks_client_h client;
    bench_buf_t src, dst; /* main: objects x size each */
    cl_pobj_t *pobj;      /* PEC layout of this rank */
    size_t npobj;
    bench_buf_t psrc, pdst; /* PEC: every object back to back; one object */
    uint64_t *poff;         /* offset of each object in psrc */
    uint64_t *psaved;       /* version that last wrote each object */
    uint8_t *mask;
    unsigned pexperts;
    /* a snapshot's puts, a restore's gets */
    cl_put_t puts[CL_MAX_OBJS];
    char put_keys[CL_MAX_OBJS][64];
    const char *get_keyp[CL_MAX_READ];
    void *get_bufs[CL_MAX_READ];
    uint64_t get_sizes[CL_MAX_READ];
    char get_keys[CL_MAX_READ][64];
} cl_worker_t;

static void cl_win_init(cl_win_t *w)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    w->inflight = 0;
    w->last_copied = 0;
    w->first_err = CKS_OK;
}

static void cl_win_destroy(cl_win_t *w)
{
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
}

/* One op more in flight (before it is issued); cl_win_undo() when the call
 * did not take it. */
static void cl_win_add(cl_win_t *w, int n)
{
    pthread_mutex_lock(&w->lock);
    w->inflight = (unsigned)((int)w->inflight + n);
    pthread_mutex_unlock(&w->lock);
}

/* The status of an op issued after cl_win_add(w, 1): one the client did not
 * take is not in flight. */
static cks_status_t cl_win_issued(cl_win_t *w, cks_status_t st)
{
    if (st == CKS_INPROGRESS) {
        return CKS_OK;
    }
    cl_win_add(w, -1);
    return st;
}

/* Completion callback (the client's progress thread): count, never block. */
static void cl_win_cb(void *arg, cks_status_t st)
{
    cl_win_t *w = arg;
    pthread_mutex_lock(&w->lock);
    w->inflight--;
    if (st != CKS_OK && w->first_err == CKS_OK) {
        w->first_err = st;
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Wait until fewer than `below` ops are in flight; CKS_ERR_TIMEOUT past the
 * deadline, else the first error seen so far. */
static cks_status_t cl_win_wait(cl_win_t *w, unsigned below, double deadline)
{
    cks_status_t st = CKS_OK;
    pthread_mutex_lock(&w->lock);
    while (w->inflight >= below && w->first_err == CKS_OK) {
        struct timespec ts;
        double d = deadline;
        ts.tv_sec = (time_t)d;
        ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
        if (pthread_cond_timedwait(&w->cond, &w->lock, &ts) == ETIMEDOUT) {
            st = CKS_ERR_TIMEOUT;
            break;
        }
    }
    if (st == CKS_OK) {
        st = w->first_err;
    }
    pthread_mutex_unlock(&w->lock);
    return st;
}

static void cl_w_err(cl_worker_t *wk, cl_res_t *res, cks_status_t st, const char *what)
{
    char why[200] = "";
    if (wk->client != NULL && st != CL_ERR_VERIFY) {
        cks_client_last_error(wk->client, why, sizeof(why));
    }
    res->status = st;
    snprintf(res->err, sizeof(res->err), "client %u: %s: %s%s%s", wk->index, what,
             st == CL_ERR_VERIFY ? "bytes differ" : cks_status_string(st),
             why[0] ? ": " : "", why);
}

/* Destroy the worker's client with requests still in flight (a timeout): the
 * destroy fails them first, then frees the buffers it allocated. */
static void cl_w_client_drop(cl_worker_t *wk)
{
    cks_client_destroy(wk->client);
    wk->client = NULL;
    if (wk->src.kind == BENCH_MEM_CKS) {
        memset(&wk->src, 0, sizeof(wk->src));
    }
    if (wk->dst.kind == BENCH_MEM_CKS) {
        memset(&wk->dst, 0, sizeof(wk->dst));
    }
}

/* Destroy the worker's client; buffers it allocated go with it. */
static void cl_w_client_destroy(cl_worker_t *wk)
{
    if (wk->client == NULL) {
        return;
    }
    bench_ck_buf_free(wk->client, &wk->src);
    bench_ck_buf_free(wk->client, &wk->dst);
    cl_w_client_drop(wk);
}

static cks_status_t cl_w_connect(cl_worker_t *wk, cl_res_t *res)
{
    const cl_ctx_t *x = wk->x;
    cks_client_params_t cp;
    char name[64];
    cks_status_t st;

    cl_w_client_destroy(wk);
    snprintf(name, sizeof(name), "ckstore-bench-client%u", wk->index);
    cl_client_params(x, &cp, name);
    if (x->o.stage_host && !x->o.stage_default_ring) {
        /* a ring that holds this writer's snapshot: a slice per object of
         * the largest size (at most 64 slices of at most 1 GiB) */
        uint64_t big = 4096;
        for (unsigned o = 0; o < x->mix.n; o++) {
            big = x->mix.obj[o].size > big ? x->mix.obj[o].size : big;
        }
        cp.field_mask |= CKS_CLIENT_FIELD_STAGE;
        cp.stage_slice = big < (1ull << 30) ? big : (1ull << 30);
        cp.stage_slices = x->mix.n < 2 ? 2 : x->mix.n > 64 ? 64 : x->mix.n;
    }
    st = cks_client_create(&cp, &wk->client);
    if (st != CKS_OK) {
        wk->client = NULL;
        cl_w_err(wk, res, st, "connect");
        return st;
    }
    /* nothing more: a replacement rank that just started has reached one
     * server; its cks_mem_alloc() (next) connects to those on this host,
     * its first requests to the others */
    return CKS_OK;
}

static void cl_copied_cb(void *arg, cks_status_t st)
{
    cl_win_t *w = arg;
    (void)st; /* the put's own callback reports an error */
    double now = bench_now();
    pthread_mutex_lock(&w->lock);
    w->last_copied = now > w->last_copied ? now : w->last_copied;
    pthread_mutex_unlock(&w->lock);
}

/* *copied_p (may be NULL): with --stage-host, when the last COPIED came */
static cks_status_t cl_w_put_all(cl_worker_t *wk, const char *job, uint64_t version,
                                 const cl_put_t *puts, size_t n, double deadline,
                                 const char **what_p, double *copied_p)
{
    const cl_ctx_t *x = wk->x;
    cl_win_t w;
    cks_status_t st = CKS_OK;
    /* staged, the ring holds the snapshot: every put goes at once (the
     * trainer's buffers are free at COPIED, not at STORED) */
    unsigned window = x->o.stage_host && n > x->o.window ? (unsigned)n : x->o.window;
    cl_win_init(&w);
    for (size_t i = 0; i < n && st == CKS_OK; i++) {
        cks_put_params_t pp;
        st = cl_win_wait(&w, window, deadline);
        if (st != CKS_OK) {
            break;
        }
        memset(&pp, 0, sizeof(pp));
        pp.field_mask = CKS_PUT_FIELD_TAGS;
        if (x->o.stage_host) {
            pp.field_mask |= CKS_PUT_FIELD_STAGED | CKS_PUT_FIELD_COPIED;
            pp.copied_cb = cl_copied_cb;
            pp.copied_arg = &w;
        }
        pp.job = job;
        pp.version = version;
        pp.key = puts[i].key;
        pp.buffer = puts[i].buf;
        pp.size = puts[i].size;
        pp.tags = puts[i].tags;
        cl_win_add(&w, 1);
        st = cl_win_issued(&w, cks_put_nb(wk->client, &pp, cl_win_cb, &w));
    }
    *what_p = "put";
    cks_status_t st2 = cl_win_wait(&w, 1, deadline);
    st = st != CKS_OK ? st : st2;
    if (copied_p != NULL) {
        *copied_p = w.last_copied;
    }
    if (w.inflight > 0) {
        /* timed out with puts in flight: destroying the client fails them
         * (their callbacks run) and gives our buffers back */
        cl_w_client_drop(wk);
    }
    cl_win_destroy(&w);
    return st;
}

static cks_status_t cl_w_get_all(cl_worker_t *wk, cks_restore_h r,
                                 const char *const *keys, void *const *bufs,
                                 const uint64_t *sizes, size_t n, double deadline)
{
    const cl_ctx_t *x = wk->x;
    cl_win_t w;
    cks_status_t st = CKS_OK;
    cl_win_init(&w);
    for (size_t i = 0; i < n && st == CKS_OK; i++) {
        cks_get_params_t gp;
        st = cl_win_wait(&w, x->o.window, deadline);
        if (st != CKS_OK) {
            break;
        }
        memset(&gp, 0, sizeof(gp));
        gp.key = keys[i];
        gp.buffer = bufs[i];
        gp.buffer_size = sizes[i];
        cl_win_add(&w, 1);
        st = cl_win_issued(&w, cks_get_nb(r, &gp, NULL, cl_win_cb, &w));
    }
    cks_status_t st2 = cl_win_wait(&w, 1, deadline);
    st = st != CKS_OK ? st : st2;
    if (w.inflight > 0) {
        /* timed out with gets in flight: destroying the client fails them
         * (their callbacks run). They read r until then, so it is not
         * closed first, nor after (its close would use the client): it is
         * left, a few hundred bytes, on this error path */
        cl_w_client_drop(wk);
        cl_win_destroy(&w);
        return CKS_ERR_TIMEOUT;
    }
    cl_win_destroy(&w);
    return st;
}

/* The timed part of a snapshot: puts [0, n), then this rank's finish, with
 * t_start, t_stored and t_end in res. CKS_OK, or the error (said in res). */
static cks_status_t cl_w_put_finish(cl_worker_t *wk, const cl_cmd_t *cmd,
                                    const cl_put_t *puts, size_t n, cl_res_t *res,
                                    double deadline, double *copied_p)
{
    const char *what = "put";
    cks_status_t st;
    res->t_start = bench_now();
    st = cl_w_put_all(wk, cmd->job, cmd->version, puts, n, deadline, &what, copied_p);
    res->t_stored = bench_now();
    if (st != CKS_OK) {
        cl_w_err(wk, res, st, what);
        return st;
    }
    st = cks_version_finish(wk->client, cmd->job, cmd->version, cmd->rank);
    res->t_end = bench_now();
    if (st != CKS_OK) {
        cl_w_err(wk, res, st, "finish");
    }
    return st;
}

/* What pages the cks_mem_alloc() buffers got: reserved huge pages (the
 * library counts them), transparent ones (UCX's "thp" allocation, where no
 * shared-memory transport is in use: across hosts; smaps tells), or 4 KiB
 * ones. For a fresh process's restore, the reference of its allocation: the
 * first touch of as much fresh memory of the same kind, here and now, while
 * the buffers still hold theirs (on a VM that hands freed memory back to its
 * host, memory freed moments ago faults in several times faster than memory
 * that sat free: a touch elsewhere or later would not compare) */
static void cl_w_alloc_pages(cl_worker_t *wk, const cl_cmd_t *cmd, cl_res_t *res)
{
    cks_client_stats_t cs;
    uint64_t reserved = 0, thp = 0;
    const bench_buf_t *buf[2] = {&wk->src, &wk->dst};
    bench_pages_t kind;

    if (cks_client_stats(wk->client, &cs) == CKS_OK) {
        reserved = CKS_MIN(cs.registered_huge_bytes, res->alloc_bytes);
    }
    for (unsigned i = 0; i < 2; i++) {
        int pct = buf[i]->ptr != NULL ? bench_huge_percent(0, buf[i]->ptr, buf[i]->len, NULL)
                                      : 0;
        thp += pct > 0 ? buf[i]->len / 100 * (uint64_t)pct : 0;
    }
    res->alloc_huge_bytes = CKS_MIN(reserved + thp, res->alloc_bytes);
    kind = reserved > 0                     ? BENCH_PAGES_HUGETLB
           : thp > res->alloc_bytes / 2     ? BENCH_PAGES_THP
                                            : BENCH_PAGES_BASE;
    if ((cmd->flags & CL_F_FRESH) && cmd->op == CL_CMD_RESTORE && res->alloc_bytes > 0) {
        res->touch_ms_gib = bench_touch_ms_gib(res->alloc_bytes, &kind);
        res->touch_pages  = (int32_t)kind;
    }
}

static int cl_w_alloc_main(cl_worker_t *wk, const cl_cmd_t *cmd, cl_res_t *res)
{
    const cl_ctx_t *x = wk->x;
    char err[BENCH_ERR_LEN];
    unsigned first, count;
    uint64_t rtotal = 0;
    if (wk->src.ptr != NULL || wk->dst.ptr != NULL) {
        return 0;
    }
    cl_read_share(x, wk->index, cmd->nreaders, &first, &count);
    for (unsigned g = first; g < first + count; g++) {
        rtotal += x->mix.obj[g % x->mix.n].size;
    }
    if (x->o.client_mem == BENCH_MEM_CKS) {
        /* the client's own memory: the servers read and write it directly */
        if ((wk->index < x->o.clients &&
             bench_ck_buf_alloc(wk->client, x->mix.bytes, &wk->src) != 0) ||
            (rtotal > 0 && bench_ck_buf_alloc(wk->client, rtotal, &wk->dst) != 0)) {
            res->status = CKS_ERR_NO_MEMORY;
            snprintf(res->err, sizeof(res->err), "client %u: cks_mem_alloc failed",
                     wk->index);
            return -1;
        }
        res->alloc_s = wk->src.alloc_s + wk->dst.alloc_s;
        res->alloc_bytes =
            (wk->src.ptr ? wk->src.len : 0) + (wk->dst.ptr ? wk->dst.len : 0);
        cl_w_alloc_pages(wk, cmd, res);
    } else if ((wk->index < x->o.clients &&
                bench_buf_alloc(BENCH_MEM_THP, x->mix.bytes, &wk->src, err,
                                sizeof(err)) != 0) ||
               (rtotal > 0 && bench_buf_alloc(BENCH_MEM_THP, rtotal, &wk->dst, err,
                                              sizeof(err)) != 0)) {
        res->status = CKS_ERR_NO_MEMORY;
        snprintf(res->err, sizeof(res->err), "client %u: buffers: %.200s", wk->index,
                 err);
        return -1;
    }
    if (wk->src.ptr != NULL) {
        for (unsigned o = 0; o < x->mix.n; o++) {
            cks_pattern_fill((uint8_t *)wk->src.ptr + x->mix.obj[o].off,
                             x->mix.obj[o].size, cl_obj_seed(wk->index, o));
        }
    }
    return 0;
}

static void cl_w_free_main(cl_worker_t *wk)
{
    if (wk->client != NULL) {
        bench_ck_buf_free(wk->client, &wk->src);
        bench_ck_buf_free(wk->client, &wk->dst);
    }
    if (wk->src.ptr != NULL) {
        bench_buf_free(&wk->src);
        memset(&wk->src, 0, sizeof(wk->src));
    }
    if (wk->dst.ptr != NULL) {
        bench_buf_free(&wk->dst);
        memset(&wk->dst, 0, sizeof(wk->dst));
    }
}

static void cl_w_snap(cl_worker_t *wk, const cl_cmd_t *cmd, cl_res_t *res,
                      double deadline)
{
    const cl_ctx_t *x = wk->x;
    cl_put_t *puts = wk->puts;
    char(*keys)[64] = wk->put_keys;
    double cpu0 = bench_proc_cpu_s(getpid());

    for (unsigned o = 0; o < x->mix.n; o++) {
        cl_obj_key(x, wk->index, o, keys[o], sizeof(keys[o]));
        puts[o].key = keys[o];
        puts[o].buf = (const uint8_t *)wk->src.ptr + x->mix.obj[o].off;
        puts[o].size = x->mix.obj[o].size;
        puts[o].tags = x->mix.obj[o].tags;
        puts[o].tags.rank = (int32_t)cmd->rank;
    }
    if (cl_w_put_finish(wk, cmd, puts, x->mix.n, res, deadline, &res->t_copied) !=
        CKS_OK) {
        return;
    }
    res->cpu_s = bench_proc_cpu_s(getpid()) - cpu0;
    res->bytes = x->mix.bytes;
    res->stored = x->mix.stored;
    res->objects = x->mix.n;
}

static void cl_w_restore(cl_worker_t *wk, const cl_cmd_t *cmd, cl_res_t *res,
                         double deadline)
{
    const cl_ctx_t *x = wk->x;
    const char **keyp = wk->get_keyp;
    void **bufs = wk->get_bufs;
    uint64_t *sizes = wk->get_sizes;
    char(*keys)[64] = wk->get_keys;
    unsigned first, count;
    uint64_t off = 0;
    cks_restore_h r;
    cks_status_t st;
    double cpu0 = bench_proc_cpu_s(getpid());

    cl_read_share(x, wk->index, cmd->nreaders, &first, &count);
    for (unsigned i = 0; i < count; i++) {
        unsigned g = first + i, o = g % x->mix.n;
        cl_obj_key(x, g / x->mix.n, o, keys[i], sizeof(keys[i]));
        keyp[i] = keys[i];
        bufs[i] = (uint8_t *)wk->dst.ptr + off;
        sizes[i] = x->mix.obj[o].size;
        off += sizes[i];
    }
    if ((cmd->flags & CL_F_VERIFY) && off > 0) {
        memset(wk->dst.ptr, 0x5a, off);
    }
    res->t_start = bench_now();
    st = cks_restore_open(wk->client, cmd->job, cmd->version, &r);
    if (st != CKS_OK) {
        cl_w_err(wk, res, st, "restore open");
        return;
    }
    st = cl_w_get_all(wk, r, keyp, bufs, sizes, count, deadline);
    res->t_end = bench_now();
    if (st != CKS_OK) {
        cl_w_err(wk, res, st, "get");
        if (st != CKS_ERR_TIMEOUT) {
            cks_restore_close(r);
        }
        return;
    }
    cks_restore_close(r);
    res->cpu_s = bench_proc_cpu_s(getpid()) - cpu0;
    res->t_stored = res->t_end;
    res->bytes = off;
    res->objects = count;
    if (cmd->flags & CL_F_VERIFY) {
        /* each object against its writer's pattern, made again (untimed) */
        bench_buf_t want;
        char err[BENCH_ERR_LEN];
        if (bench_buf_alloc(BENCH_MEM_THP, x->mix.max, &want, err, sizeof(err)) != 0) {
            cl_w_err(wk, res, CKS_ERR_NO_MEMORY, "verify buffer");
            return;
        }
        for (unsigned i = 0; i < count; i++) {
            unsigned g = first + i;
            cks_pattern_fill(want.ptr, sizes[i], cl_obj_seed(g / x->mix.n, g % x->mix.n));
            if (memcmp(want.ptr, bufs[i], sizes[i]) != 0) {
                cl_w_err(wk, res, CL_ERR_VERIFY, keyp[i]);
                break;
            }
        }
        bench_buf_free(&want);
    }
}

static void cl_w_pec_free(cl_worker_t *wk)
{
    if (wk->psrc.ptr != NULL) {
        bench_buf_free(&wk->psrc);
        bench_buf_free(&wk->pdst);
        memset(&wk->psrc, 0, sizeof(wk->psrc));
        memset(&wk->pdst, 0, sizeof(wk->pdst));
    }
    free(wk->pobj);
    free(wk->poff);
    free(wk->psaved);
    free(wk->mask);
    wk->pobj = NULL;
    wk->poff = NULL;
    wk->psaved = NULL;
    wk->mask = NULL;
    wk->npobj = 0;
}

static void cl_w_pec_setup(cl_worker_t *wk, const cl_cmd_t *cmd, cl_res_t *res)
{
    const cl_ctx_t *x = wk->x;
    char err[BENCH_ERR_LEN];
    uint64_t total = 0, biggest = 0;

    cl_w_free_main(wk);
    cl_w_pec_free(wk);
    wk->pexperts = cmd->experts;
    wk->pobj = calloc(CL_PEC_MAX_OBJS, sizeof(*wk->pobj));
    wk->npobj =
        wk->pobj ? cl_pec_layout(x, cmd->experts, cmd->rank, cmd->nranks, wk->pobj) : 0;
    wk->poff = calloc(wk->npobj + 1, sizeof(*wk->poff));
    wk->psaved = calloc(wk->npobj + 1, sizeof(*wk->psaved));
    wk->mask = calloc((size_t)x->o.pec_layers * cmd->experts, 1);
    if (wk->pobj == NULL || wk->poff == NULL || wk->psaved == NULL || wk->mask == NULL ||
        wk->npobj > CL_PEC_MAX_OBJS) {
        res->status = CKS_ERR_NO_MEMORY;
        snprintf(res->err, sizeof(res->err), "client %u: PEC layout", wk->index);
        return;
    }
    for (size_t i = 0; i < wk->npobj; i++) {
        wk->poff[i] = total;
        wk->psaved[i] = CKS_PEC_NEVER;
        total += wk->pobj[i].size;
        biggest = wk->pobj[i].size > biggest ? wk->pobj[i].size : biggest;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, total, &wk->psrc, err, sizeof(err)) != 0 ||
        bench_buf_alloc(BENCH_MEM_THP, biggest, &wk->pdst, err, sizeof(err)) != 0) {
        res->status = CKS_ERR_NO_MEMORY;
        snprintf(res->err, sizeof(res->err), "client %u: PEC buffers: %.200s", wk->index,
                 err);
        return;
    }
    for (size_t i = 0; i < wk->npobj; i++) {
        cks_pattern_fill((uint8_t *)wk->psrc.ptr + wk->poff[i], wk->pobj[i].size,
                         7919u * (wk->index + 1) + i);
    }
    res->bytes = total;
    res->objects = wk->npobj;
}

/* Which objects a PEC version writes: dense always, experts by the mask. */
static int cl_w_pec_selected(cl_worker_t *wk, const cl_cmd_t *cmd, size_t i)
{
    const cl_pobj_t *o = &wk->pobj[i];
    if ((cmd->flags & CL_F_FULL) || o->expert < 0) {
        return 1;
    }
    return wk->mask[(size_t)o->layer * wk->pexperts + (size_t)o->expert] != 0;
}

static void cl_w_pec_snap(cl_worker_t *wk, const cl_cmd_t *cmd, cl_res_t *res,
                          double deadline)
{
    const cl_ctx_t *x = wk->x;
    cl_put_t *puts = calloc(wk->npobj + 1, sizeof(*puts));
    size_t n = 0;
    uint64_t bytes = 0;
    cks_pec_params_t p;
    cks_status_t st;

    if (puts == NULL) {
        res->status = CKS_ERR_NO_MEMORY;
        return;
    }
    cl_pec_params(x, wk->pexperts, cmd->nranks, &p);
    if (!(cmd->flags & CL_F_FULL) &&
        (st = cks_pec_select_round_robin(&p, cmd->ckpt, wk->mask)) != CKS_OK) {
        cl_w_err(wk, res, st, "cks_pec_select_round_robin");
        free(puts);
        return;
    }
    for (size_t i = 0; i < wk->npobj; i++) {
        if (!cl_w_pec_selected(wk, cmd, i)) {
            continue;
        }
        uint8_t *b = (uint8_t *)wk->psrc.ptr + wk->poff[i];
        memcpy(b, &cmd->version,
               sizeof(cmd->version)); /* the stamp, checked on restore */
        puts[n].key = wk->pobj[i].key;
        puts[n].buf = b;
        puts[n].size = wk->pobj[i].size;
        puts[n].tags = wk->pobj[i].tags;
        bytes += wk->pobj[i].size;
        res->stored += cl_stored_bytes(x, wk->pobj[i].size);
        n++;
    }
    st = cl_w_put_finish(wk, cmd, puts, n, res, deadline, NULL);
    free(puts);
    if (st != CKS_OK) {
        return;
    }
    for (size_t i = 0; i < wk->npobj; i++) {
        if (cl_w_pec_selected(wk, cmd, i)) {
            wk->psaved[i] = cmd->version;
        }
    }
    res->bytes = bytes;
    res->objects = n;
}

/* Restore every object of this rank from `version` (untimed): each must come
 * from the version that last wrote it (stamp and source_version), with the
 * bytes written. */
static void cl_w_pec_verify(cl_worker_t *wk, const cl_cmd_t *cmd, cl_res_t *res)
{
    cks_restore_h r;
    cks_status_t st = cks_restore_open(wk->client, cmd->job, cmd->version, &r);
    if (st != CKS_OK) {
        cl_w_err(wk, res, st, "restore open");
        return;
    }
    res->t_start = bench_now();
    for (size_t i = 0; i < wk->npobj && res->status == CKS_OK; i++) {
        cks_object_info_t info;
        cks_get_params_t gp;
        uint64_t got = 0, stamp;
        const uint8_t *src = (const uint8_t *)wk->psrc.ptr + wk->poff[i];

        st = cks_object_stat(r, wk->pobj[i].key, &info);
        if (st != CKS_OK) {
            cl_w_err(wk, res, st, wk->pobj[i].key);
            break;
        }
        memset(&gp, 0, sizeof(gp));
        gp.key = wk->pobj[i].key;
        gp.buffer = wk->pdst.ptr;
        gp.buffer_size = wk->pdst.len;
        st = cks_get(r, &gp, &got);
        if (st != CKS_OK) {
            cl_w_err(wk, res, st, wk->pobj[i].key);
            break;
        }
        memcpy(&stamp, wk->pdst.ptr, sizeof(stamp));
        if (got != wk->pobj[i].size || stamp != wk->psaved[i] ||
            info.source_version != wk->psaved[i] ||
            memcmp((const uint8_t *)wk->pdst.ptr + 8, src + 8, got - 8) != 0) {
            res->status = CL_ERR_VERIFY;
            snprintf(res->err, sizeof(res->err),
                     "client %u: %s: expected the bytes of version %llu, got stamp %llu, "
                     "source_version %llu, %llu bytes",
                     wk->index, wk->pobj[i].key, (unsigned long long)wk->psaved[i],
                     (unsigned long long)stamp, (unsigned long long)info.source_version,
                     (unsigned long long)got);
            break;
        }
        res->bytes += got;
        res->objects++;
    }
    res->t_end = bench_now();
    cks_restore_close(r);
}

int cl_worker_main(const cl_ctx_t *x, unsigned index, int cmd_fd, int res_fd)
{
    cl_cmd_t cmd;
    cl_worker_t *wk = calloc(1, sizeof(*wk));
    if (wk == NULL) {
        return 1;
    }
    wk->x = x;
    wk->index = index;
    for (;;) {
        cl_res_t res;
        char go;
        /* the parent may be busy for long (references, other phases); it
         * kills us when it goes (PR_SET_PDEATHSIG), this bounds the rest */
        if (bench_read_full(cmd_fd, &cmd, sizeof(cmd), bench_now() + 3600) != 0) {
            break;
        }
        if (cmd.op == CL_CMD_QUIT) {
            break;
        }
        memset(&res, 0, sizeof(res));
        /* preparation, untimed: buffers, then a client when asked for a
         * fresh one or when there is none (PEC_SETUP: always, servers may
         * have been restarted since the last command) */
        if ((cmd.flags & CL_F_FRESH) || wk->client == NULL ||
            cmd.op == CL_CMD_PEC_SETUP) {
            cl_w_connect(wk, &res); /* first: cks_mem_alloc() buffers belong to it */
        } else if (cmd.flags & CL_F_RECONNECT) {
            /* servers were restarted: a running trainer's client finds them
             * again (asked every server: the connections its own rejoin
             * makes to those on this host, 1 s after a loss at the soonest) */
            uint64_t used = 0;
            cks_status_t st = cks_cluster_usage(wk->client, &used, NULL);
            if (st != CKS_OK) {
                cl_w_err(wk, &res, st, "reconnect");
            }
        }
        if (res.status == CKS_OK && cmd.op == CL_CMD_SNAP && x->o.stage_host) {
            /* the ring a trainer sets up once, before its first checkpoint */
            cks_status_t st = cks_stage_prepare(wk->client);
            if (st != CKS_OK) {
                cl_w_err(wk, &res, st, "staging ring");
            }
        }
        if (res.status == CKS_OK && (cmd.op == CL_CMD_SNAP || cmd.op == CL_CMD_RESTORE)) {
            cl_w_alloc_main(wk, &cmd, &res);
        } else if (res.status == CKS_OK && cmd.op == CL_CMD_PEC_SETUP) {
            cl_w_pec_setup(wk, &cmd, &res);
        }
        res.phase = 0;
        if (bench_write_full(res_fd, &res, sizeof(res)) != 0) {
            break;
        }
        if (res.status != CKS_OK) {
            continue; /* the parent saw it; no GO follows */
        }
        if (bench_read_full(cmd_fd, &go, 1, bench_now() + x->o.timeout_s * 4) != 0) {
            break;
        }
        if (go != 'G') {
            continue; /* the parent called it off */
        }
        double deadline = bench_now() + x->o.timeout_s * 3;
        switch (cmd.op) {
            case CL_CMD_SNAP:
                cl_w_snap(wk, &cmd, &res, deadline);
                break;
            case CL_CMD_RESTORE:
                cl_w_restore(wk, &cmd, &res, deadline);
                break;
            case CL_CMD_PEC_SETUP:
                break;
            case CL_CMD_PEC_SNAP:
                cl_w_pec_snap(wk, &cmd, &res, deadline);
                break;
            case CL_CMD_PEC_VERIFY:
                cl_w_pec_verify(wk, &cmd, &res);
                break;
            default:
                res.status = CKS_ERR_INVALID_PARAM;
                break;
        }
        res.phase = 1;
        if (bench_write_full(res_fd, &res, sizeof(res)) != 0) {
            break;
        }
    }
    cl_w_free_main(wk);
    cl_w_client_destroy(wk);
    cl_w_pec_free(wk);
    free(wk);
    return 0;
}
