/*
 * DESIGN: ckstore-demo, a synthetic training job's checkpoint traffic.
 *
 * `snapshot` starts --ranks trainer-rank processes that write one multi-rank
 * version of an MoE-shaped checkpoint concurrently: each rank stages its
 * shards (its slice of every dense layer, the experts it holds with their
 * optimizer state, its RNG state) in cks_mem_alloc() memory, then puts them
 * with cks_put_nb() keeping a window of requests in flight, and finishes
 * its rank once every put is STORED. `restore` starts --ranks replacement-
 * rank processes (fresh processes, fresh buffers) that get the same shards
 * with cks_get_nb() and a window, then compare every byte with the data
 * regenerated from the seed.
 *
 * The launcher (this process) never creates a client: it forks the ranks
 * before any UCX state exists, lines them up on a barrier (each rank reports
 * READY after connecting and staging; closing the go pipe starts them all at
 * once), collects each rank's times over a pipe, and prints per phase:
 *   stall      the slowest rank's time from its first put until every one of
 *              its puts is STORED (its buffers are reusable: the trainer may
 *              go on);
 *   STORED     all ranks' bytes / time until the last rank's last STORED;
 *   PROTECTED  all ranks' bytes / time until the last cks_version_finish()
 *              returned (the version is committed and every stripe has its
 *              parity);
 *   restore    all ranks' bytes / time until the last rank's last get landed.
 * Every wait is bounded (--timeout): a rank that does not report in time is
 * killed, and the launcher fails. Uses only the public API.
 * Never: a client in the launcher (UCX state must not cross fork()).
 */
#include "ckstore.h"
#include "cks_common.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEMO_MAX_RANKS 64
#define DEMO_MAX_OBJS  4096

typedef struct {
    char key[96];
    cks_tags_t tags;
    uint64_t size;
    uint64_t seed; /* data seed of this object */
} demo_obj_t;

typedef struct {
    const char *server, *cluster, *job, *secret;
    unsigned ec_k, ec_m, ranks, window;
    uint64_t chunk, version, size, seed;
    int layers, experts, timeout_s, snapshot;
} demo_opts_t;

/* What a rank sends the launcher: READY once, then its result. */
enum { DEMO_MSG_READY = 1, DEMO_MSG_RESULT = 2 };
typedef struct {
    int type;
    int status;         /* cks_status_t of the phase */
    int mismatch;       /* restore: objects whose bytes differ */
    uint32_t nobjs;
    uint64_t bytes;
    double t_alloc;     /* seconds cks_mem_alloc() took */
    double t_start;     /* CLOCK_MONOTONIC: first request issued */
    double t_stored;    /* snapshot: last put STORED; restore: last get landed */
    double t_end;       /* snapshot: cks_version_finish() returned */
    char err[200];
} demo_msg_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank `rank` of `ranks`: its slice of each layer's dense part, the experts
 * expert-parallelism gives it (contiguous blocks: expert e lives on rank
 * e * ranks / experts) with their optimizer state (2x the parameters, as
 * Adam's two moments), and its RNG state. Sizes are deliberately not
 * multiples of the chunk size. */
static size_t layout(const demo_opts_t *o, unsigned rank, demo_obj_t *objs, size_t max)
{
    size_t n = 0;
    for (int l = 0; l < o->layers; l++) {
        if (n < max) {
            snprintf(objs[n].key, sizeof(objs[n].key), "layer%02d/dense/rank%u", l, rank);
            objs[n].tags = (cks_tags_t){CKS_KIND_DENSE, l, CKS_TAG_NONE, (int32_t)rank};
            objs[n++].size = o->size + 4096u * rank;
        }
        for (int e = 0; e < o->experts; e++) {
            if ((unsigned)((uint64_t)e * o->ranks / (uint64_t)o->experts) != rank) {
                continue;
            }
            if (n < max) {
                snprintf(objs[n].key, sizeof(objs[n].key), "layer%02d/expert%03d/params", l, e);
                objs[n].tags   = (cks_tags_t){CKS_KIND_EXPERT, l, e, (int32_t)rank};
                objs[n++].size = o->size / 2 + 8u * (uint64_t)e + 1;
            }
            if (n < max) {
                snprintf(objs[n].key, sizeof(objs[n].key), "layer%02d/expert%03d/optim", l, e);
                objs[n].tags   = (cks_tags_t){CKS_KIND_OPTIMIZER, l, e, (int32_t)rank};
                objs[n++].size = o->size + 8u * (uint64_t)e + 3;
            }
        }
    }
    if (n < max) {
        snprintf(objs[n].key, sizeof(objs[n].key), "rng/rank%u", rank);
        objs[n].tags   = (cks_tags_t){CKS_KIND_RNG, CKS_TAG_NONE, CKS_TAG_NONE, (int32_t)rank};
        objs[n++].size = 4096 + 17;
    }
    for (size_t i = 0; i < n; i++) {
        objs[i].seed = o->seed * 1000003u + (uint64_t)rank * 10007u + i;
    }
    return n;
}

/* ---- one rank (a child process) ------------------------------------------ */

/* The window of requests in flight: callbacks run on libckstore's progress
 * thread and only count. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned inflight, done;
    cks_status_t first_error;
    double t_last;
} demo_window_t;

static void demo_done_cb(void *arg, cks_status_t status)
{
    demo_window_t *w = arg;
    pthread_mutex_lock(&w->lock);
    w->inflight--;
    w->done++;
    w->t_last = now_s();
    if (status != CKS_OK && w->first_error == CKS_OK) {
        w->first_error = status;
    }
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Wait (bounded by `deadline`, CLOCK_MONOTONIC seconds) until fewer than
 * `limit` requests are in flight. CKS_ERR_TIMEOUT when the deadline passes. */
static cks_status_t demo_window_wait(demo_window_t *w, unsigned limit, double deadline)
{
    cks_status_t st = CKS_OK;
    pthread_mutex_lock(&w->lock);
    while (w->inflight >= limit && w->inflight > 0) {
        double left = deadline - now_s();
        if (left <= 0) {
            st = CKS_ERR_TIMEOUT;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double at   = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (left < 0.5 ? left : 0.5);
        ts.tv_sec   = (time_t)at;
        ts.tv_nsec  = (long)((at - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&w->cond, &w->lock, &ts);
    }
    pthread_mutex_unlock(&w->lock);
    return st;
}

static void demo_send(int fd, const demo_msg_t *m)
{
    const char *p = (const char *)m;
    size_t left   = sizeof(*m);
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return; /* the launcher is gone; nothing to tell */
        }
        p += w;
        left -= (size_t)w;
    }
}

static void demo_fail(demo_msg_t *m, cks_client_h cl, cks_status_t st, const char *what)
{
    char err[160] = "";
    if (cl != NULL) {
        cks_client_last_error(cl, err, sizeof(err));
    }
    m->status = st;
    snprintf(m->err, sizeof(m->err), "%s: %s%s%s", what, cks_status_string(st),
             err[0] ? ": " : "", err);
}

static int demo_rank(const demo_opts_t *o, unsigned rank, int out_fd, int go_fd)
{
    static demo_obj_t objs[DEMO_MAX_OBJS];
    demo_msg_t m;
    demo_window_t w;
    cks_client_params_t cp = {0};
    cks_client_h cl        = NULL;
    cks_restore_h r        = NULL;
    void *stage            = NULL;
    uint64_t staged        = 0;
    uint64_t *off          = NULL;
    cks_status_t st;
    double deadline = now_s() + o->timeout_s;

    memset(&m, 0, sizeof(m));
    m.type = DEMO_MSG_READY;
    size_t n = layout(o, rank, objs, DEMO_MAX_OBJS);
    m.nobjs  = (uint32_t)n;
    pthread_mutex_init(&w.lock, NULL);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&w.cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    w.inflight = w.done = 0;
    w.first_error       = CKS_OK;
    w.t_last            = 0;

    char name[48];
    snprintf(name, sizeof(name), "ckstore-demo-%s-rank%u", o->snapshot ? "snap" : "restore",
             rank);
    cp.field_mask = CKS_CLIENT_FIELD_NAME | CKS_CLIENT_FIELD_TIMEOUT_MS;
    cp.name       = name;
    cp.timeout_ms = o->timeout_s * 1000 / 2;
    if (o->cluster != NULL) {
        cp.field_mask |= CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC;
        cp.cluster    = o->cluster;
        cp.ec_k       = o->ec_k;
        cp.ec_m       = o->ec_m;
        cp.chunk_size = o->chunk;
    } else {
        cp.field_mask |= CKS_CLIENT_FIELD_SERVER;
        cp.server = o->server;
    }
    if (o->secret != NULL) {
        cp.field_mask |= CKS_CLIENT_FIELD_SECRET;
        cp.secret = o->secret;
    }
    st = cks_client_create(&cp, &cl);
    if (st != CKS_OK) {
        demo_fail(&m, NULL, st, "connect");
        cl = NULL;
        goto report;
    }

    /* one staging area, a 64-byte aligned slice per object, as a trainer
     * copies its tensors into pinned host memory */
    off = calloc(n, sizeof(*off));
    if (off == NULL) {
        demo_fail(&m, cl, CKS_ERR_NO_MEMORY, "staging offsets");
        goto report;
    }
    for (size_t i = 0; i < n; i++) {
        off[i] = staged;
        staged += (objs[i].size + 63) & ~(uint64_t)63;
        m.bytes += objs[i].size;
    }
    double t0 = now_s();
    st        = cks_mem_alloc(cl, staged ? staged : 1, &stage);
    m.t_alloc = now_s() - t0;
    if (st != CKS_OK) {
        demo_fail(&m, cl, st, "cks_mem_alloc");
        stage = NULL;
        goto report;
    }
    if (o->snapshot) {
        for (size_t i = 0; i < n; i++) {
            cks_pattern_fill((uint8_t *)stage + off[i], objs[i].size, objs[i].seed);
        }
        if (rank == 0) { /* rank 0 opens the version for every rank */
            cks_version_params_t vp = {0};
            vp.field_mask           = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT;
            vp.job                  = o->job;
            vp.version              = o->version;
            vp.nranks               = o->ranks;
            vp.timeout_s            = (uint32_t)o->timeout_s;
            st                      = cks_version_begin(cl, &vp);
            if (st != CKS_OK) {
                demo_fail(&m, cl, st, "cks_version_begin");
                goto report;
            }
        }
    } else {
        st = cks_restore_open(cl, o->job, o->version, &r);
        if (st != CKS_OK) {
            demo_fail(&m, cl, st, "cks_restore_open");
            goto report;
        }
    }

    /* READY, then wait for the launcher to close the go pipe (bounded) */
    demo_send(out_fd, &m);
    {
        struct pollfd pf = {go_fd, POLLIN, 0};
        char c;
        int left_ms = (int)((deadline - now_s()) * 1000);
        if (left_ms <= 0 || poll(&pf, 1, left_ms) != 1 || read(go_fd, &c, 1) != 0) {
            demo_fail(&m, NULL, CKS_ERR_TIMEOUT, "no go from the launcher");
            goto report;
        }
    }

    m.t_start = now_s();
    for (size_t i = 0; i < n; i++) {
        st = demo_window_wait(&w, o->window, deadline);
        if (st != CKS_OK) {
            demo_fail(&m, NULL, st, "window");
            break;
        }
        pthread_mutex_lock(&w.lock);
        w.inflight++;
        pthread_mutex_unlock(&w.lock);
        if (o->snapshot) {
            cks_put_params_t p = {0};
            p.field_mask       = CKS_PUT_FIELD_TAGS;
            p.job              = o->job;
            p.version          = o->version;
            p.key              = objs[i].key;
            p.buffer           = (uint8_t *)stage + off[i];
            p.size             = objs[i].size;
            p.tags             = objs[i].tags;
            st                 = cks_put_nb(cl, &p, demo_done_cb, &w);
        } else {
            cks_get_params_t g = {0};
            g.key              = objs[i].key;
            g.buffer           = (uint8_t *)stage + off[i];
            g.buffer_size      = objs[i].size;
            st                 = cks_get_nb(r, &g, NULL, demo_done_cb, &w);
        }
        if (st != CKS_INPROGRESS) { /* done at once, or refused: no callback */
            demo_done_cb(&w, st);
            if (st != CKS_OK) {
                break;
            }
        }
    }
    /* every request submitted must complete before its buffer is touched */
    if (demo_window_wait(&w, 1, deadline) != CKS_OK) {
        demo_fail(&m, NULL, CKS_ERR_TIMEOUT, "requests still in flight");
        goto report;
    }
    m.t_stored = w.t_last > m.t_start ? w.t_last : now_s();
    if (m.status == CKS_OK && w.first_error != CKS_OK) {
        demo_fail(&m, cl, w.first_error, o->snapshot ? "put" : "get");
    }
    if (m.status == CKS_OK && st != CKS_OK && st != CKS_INPROGRESS) {
        demo_fail(&m, cl, st, o->snapshot ? "cks_put_nb" : "cks_get_nb");
    }
    if (m.status != CKS_OK) {
        if (o->snapshot && rank == 0) {
            cks_version_abort(cl, o->job, o->version);
        }
        goto report;
    }
    if (o->snapshot) {
        st      = cks_version_finish(cl, o->job, o->version, rank);
        m.t_end = now_s();
        if (st != CKS_OK) {
            demo_fail(&m, cl, st, "cks_version_finish");
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            if (cks_pattern_check((uint8_t *)stage + off[i], objs[i].size, objs[i].seed) !=
                objs[i].size) {
                if (m.mismatch++ == 0) {
                    snprintf(m.err, sizeof(m.err), "%.96s differs from what was written",
                             objs[i].key);
                }
            }
        }
    }

report:
    m.type = DEMO_MSG_RESULT;
    demo_send(out_fd, &m);
    if (r != NULL) {
        cks_restore_close(r);
    }
    if (stage != NULL) {
        cks_mem_free(cl, stage);
    }
    if (cl != NULL) {
        cks_client_destroy(cl);
    }
    free(off);
    return m.status == CKS_OK && m.mismatch == 0 ? 0 : 1;
}

/* ---- the launcher ----------------------------------------------------------- */

typedef struct {
    pid_t pid;
    int fd;          /* read end of the rank's result pipe */
    size_t got;      /* bytes of the current message read */
    demo_msg_t msg;  /* being read */
    int ready, done; /* messages received */
    demo_msg_t res;
} demo_child_t;

/* Read what the ranks send until each has sent `want` (READY or RESULT) or the
 * deadline passes. 0, or -1 with the ranks that did not answer named. */
static int demo_collect(demo_child_t *ch, unsigned n, int want, double deadline)
{
    for (;;) {
        struct pollfd pf[DEMO_MAX_RANKS];
        unsigned idx[DEMO_MAX_RANKS], np = 0;
        for (unsigned i = 0; i < n; i++) {
            int have = want == DEMO_MSG_READY ? ch[i].ready : ch[i].done;
            if (!have && ch[i].fd >= 0) {
                pf[np]    = (struct pollfd){ch[i].fd, POLLIN, 0};
                idx[np++] = i;
            }
        }
        if (np == 0) {
            break;
        }
        int left_ms = (int)((deadline - now_s()) * 1000);
        if (left_ms <= 0) {
            break;
        }
        int rc = poll(pf, np, left_ms);
        if (rc < 0 && errno == EINTR) {
            continue;
        }
        if (rc <= 0) {
            break;
        }
        for (unsigned j = 0; j < np; j++) {
            demo_child_t *c = &ch[idx[j]];
            if (pf[j].revents == 0) {
                continue;
            }
            ssize_t got = read(c->fd, (char *)&c->msg + c->got, sizeof(c->msg) - c->got);
            if (got <= 0) { /* the rank died without reporting */
                close(c->fd);
                c->fd = -1;
                continue;
            }
            c->got += (size_t)got;
            if (c->got < sizeof(c->msg)) {
                continue;
            }
            c->got = 0;
            if (c->msg.type == DEMO_MSG_READY) {
                c->ready = 1;
            } else {
                c->ready = c->done = 1;
                c->res             = c->msg;
            }
        }
    }
    int rc = 0;
    for (unsigned i = 0; i < n; i++) {
        int have = want == DEMO_MSG_READY ? ch[i].ready : ch[i].done;
        if (!have) {
            fprintf(stderr, "ckstore-demo: rank %u (pid %d) %s\n", i, (int)ch[i].pid,
                    ch[i].fd < 0 ? "died without reporting" : "did not report in time");
            rc = -1;
        }
    }
    return rc;
}

static int demo_launch(const demo_opts_t *o)
{
    demo_child_t ch[DEMO_MAX_RANKS];
    int go[2];
    unsigned n = o->ranks;
    int rc     = 1;

    memset(ch, 0, sizeof(ch));
    if (pipe2(go, O_CLOEXEC) != 0) {
        perror("ckstore-demo: pipe");
        return 1;
    }
    fflush(NULL);
    for (unsigned i = 0; i < n; i++) {
        int p[2];
        ch[i].fd = -1;
        if (pipe2(p, O_CLOEXEC) != 0) {
            perror("ckstore-demo: pipe");
            goto stop;
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("ckstore-demo: fork");
            close(p[0]);
            close(p[1]);
            goto stop;
        }
        if (pid == 0) {
            close(p[0]);
            close(go[1]);
            for (unsigned j = 0; j < i; j++) {
                close(ch[j].fd);
            }
            _exit(demo_rank(o, i, p[1], go[0]));
        }
        close(p[1]);
        ch[i].pid = pid;
        ch[i].fd  = p[0];
    }
    close(go[0]);
    go[0] = -1;

    /* every rank connected and staged (rank 0 began the version) */
    double deadline = now_s() + o->timeout_s;
    if (demo_collect(ch, n, DEMO_MSG_READY, deadline) != 0) {
        goto stop;
    }
    for (unsigned i = 0; i < n; i++) {
        if (ch[i].done) { /* a rank that failed before the barrier */
            fprintf(stderr, "ckstore-demo: rank %u: %s\n", i, ch[i].res.err);
            goto stop;
        }
    }
    close(go[1]); /* go: every rank sees the end of the pipe at once */
    go[1] = -1;
    if (demo_collect(ch, n, DEMO_MSG_RESULT, now_s() + o->timeout_s) != 0) {
        goto stop;
    }

    uint64_t bytes = 0, objs = 0;
    double t_start = 0, t_stored = 0, t_end = 0, stall = 0, alloc = 0;
    int bad        = 0;
    for (unsigned i = 0; i < n; i++) {
        const demo_msg_t *m = &ch[i].res;
        if (m->status != CKS_OK || m->mismatch != 0) {
            fprintf(stderr, "ckstore-demo: rank %u: %s%s\n", i, m->err,
                    m->mismatch > 1 ? " (and more objects)" : "");
            bad = 1;
            continue;
        }
        bytes += m->bytes;
        objs += m->nobjs;
        t_start  = i == 0 || m->t_start < t_start ? m->t_start : t_start;
        t_stored = m->t_stored > t_stored ? m->t_stored : t_stored;
        t_end    = m->t_end > t_end ? m->t_end : t_end;
        stall    = m->t_stored - m->t_start > stall ? m->t_stored - m->t_start : stall;
        alloc    = m->t_alloc > alloc ? m->t_alloc : alloc;
    }
    if (bad) {
        goto stop;
    }
    if (o->snapshot) {
        printf("snapshot of %s version %llu: %u ranks, %llu objects, %.1f MiB, %u requests "
               "in flight per rank\n"
               "  trainer stall (buffers reusable) %.0f ms; STORED %.2f GB/s; "
               "PROTECTED %.2f GB/s (committed after %.3f s)\n"
               "  staging per rank: cks_mem_alloc() %.0f ms (slowest rank)\n",
               o->job, (unsigned long long)o->version, n, (unsigned long long)objs,
               (double)bytes / (1 << 20), o->window, stall * 1e3,
               (double)bytes / (t_stored - t_start) / 1e9,
               (double)bytes / (t_end - t_start) / 1e9, t_end - t_start, alloc * 1e3);
    } else {
        printf("restore of %s version %llu by %u fresh ranks into fresh buffers: %llu "
               "objects, %.1f MiB, every byte verified\n"
               "  restore %.2f GB/s (%.3f s); staging per rank: cks_mem_alloc() %.0f ms\n",
               o->job, (unsigned long long)o->version, n, (unsigned long long)objs,
               (double)bytes / (1 << 20), (double)bytes / (t_stored - t_start) / 1e9,
               t_stored - t_start, alloc * 1e3);
    }
    rc = 0;

stop:
    if (go[1] >= 0) {
        close(go[1]); /* ranks waiting for go see EOF and give up */
    }
    if (go[0] >= 0) {
        close(go[0]);
    }
    for (unsigned i = 0; i < n; i++) {
        if (ch[i].pid <= 0) {
            continue;
        }
        int status;
        /* a rank exits by itself once it has reported; give it its teardown
         * time, bounded, then kill it */
        double until = now_s() + (rc == 0 ? 30 : 5);
        pid_t got;
        while ((got = waitpid(ch[i].pid, &status, WNOHANG)) == 0 && now_s() < until) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (got == 0) {
            fprintf(stderr, "ckstore-demo: rank %u (pid %d) did not exit; killed\n", i,
                    (int)ch[i].pid);
            kill(ch[i].pid, SIGKILL);
            waitpid(ch[i].pid, &status, 0);
            rc = 1;
        } else if (got == ch[i].pid && rc == 0 &&
                   !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            fprintf(stderr, "ckstore-demo: rank %u exited with status %d\n", i, status);
            rc = 1;
        }
        if (ch[i].fd >= 0) {
            close(ch[i].fd);
        }
    }
    return rc;
}

/* ---- options ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ckstore-demo snapshot|restore (--cluster MAP | --server IP:PORT) [options]\n"
            "  snapshot: --ranks trainer processes write one version of a synthetic MoE\n"
            "            checkpoint concurrently (non-blocking puts from cks_mem_alloc()\n"
            "            memory, --window requests in flight each); prints the stall,\n"
            "            STORED and PROTECTED bandwidth\n"
            "  restore:  --ranks fresh processes restore it into fresh buffers and check\n"
            "            every byte; prints the restore bandwidth\n"
            "  (write and verify are older names of snapshot and restore)\n"
            "  --cluster MAP     a cluster map: RS-coded cluster (see --k, --m, --chunk)\n"
            "  --server IP:PORT  a standalone server (one rank only)\n"
            "  --k N, --m N      data and parity chunks per stripe (default 4, 2)\n"
            "  --chunk SIZE      chunk size (default 1M)\n"
            "  --secret FILE     the cluster secret the servers require\n"
            "  --job NAME        (default demo)\n"
            "  --version N       (default 1)\n"
            "  --ranks N         rank processes (default 4, at most %d)\n"
            "  --window N        requests in flight per rank (default 4)\n"
            "  --layers N        MoE layers (default 4)\n"
            "  --experts N       experts per layer, spread over the ranks (default 8)\n"
            "  --size SIZE       dense shard per rank and layer, e.g. 16M (default 8M);\n"
            "                    an expert's parameters are half of it, its optimizer\n"
            "                    state as much\n"
            "  --seed N          data seed (default 1)\n"
            "  --timeout S       bound on each phase, in seconds (default 120)\n",
            DEMO_MAX_RANKS);
}

static int parse_uint(const char *t, unsigned long long max, unsigned long long *v_p)
{
    char *end;
    errno                = 0;
    unsigned long long v = strtoull(t, &end, 10);
    if (errno != 0 || end == t || *end != '\0' || v > max || t[0] == '-') {
        return -1;
    }
    *v_p = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'},  {"job", required_argument, NULL, 'j'},
        {"version", required_argument, NULL, 'v'}, {"layers", required_argument, NULL, 'l'},
        {"experts", required_argument, NULL, 'e'}, {"size", required_argument, NULL, 'z'},
        {"seed", required_argument, NULL, 'r'},    {"ranks", required_argument, NULL, 'n'},
        {"cluster", required_argument, NULL, 'c'}, {"k", required_argument, NULL, 'K'},
        {"m", required_argument, NULL, 'M'},       {"chunk", required_argument, NULL, 'C'},
        {"secret", required_argument, NULL, 'S'},  {"window", required_argument, NULL, 'w'},
        {"timeout", required_argument, NULL, 't'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    demo_opts_t o = {.job = "demo", .ec_k = 4, .ec_m = 2, .ranks = 4, .window = 4,
                     .chunk = 1u << 20, .version = 1, .size = 8u << 20, .seed = 1,
                     .layers = 4, .experts = 8, .timeout_s = 120};
    unsigned long long v;
    int c, bad = 0;

    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "snapshot") == 0 || strcmp(argv[1], "write") == 0) {
        o.snapshot = 1;
    } else if (strcmp(argv[1], "restore") != 0 && strcmp(argv[1], "verify") != 0) {
        fprintf(stderr, "ckstore-demo: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    optind = 2;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
            case 's': o.server = optarg; break;
            case 'c': o.cluster = optarg; break;
            case 'j': o.job = optarg; break;
            case 'S': o.secret = optarg; break;
            case 'v': bad |= parse_uint(optarg, UINT64_MAX - 1, &v); o.version = v; break;
            case 'l': bad |= parse_uint(optarg, 99, &v); o.layers = (int)v; break;
            case 'e': bad |= parse_uint(optarg, 999, &v); o.experts = (int)v; break;
            case 'r': bad |= parse_uint(optarg, UINT32_MAX, &v); o.seed = v; break;
            case 'n': bad |= parse_uint(optarg, DEMO_MAX_RANKS, &v); o.ranks = (unsigned)v; break;
            case 'w': bad |= parse_uint(optarg, 4096, &v); o.window = (unsigned)v; break;
            case 't': bad |= parse_uint(optarg, 3600, &v); o.timeout_s = (int)v; break;
            case 'K': bad |= parse_uint(optarg, 255, &v); o.ec_k = (unsigned)v; break;
            case 'M': bad |= parse_uint(optarg, 255, &v); o.ec_m = (unsigned)v; break;
            case 'z': bad |= cks_size_parse(optarg, &o.size) != CKS_OK; break;
            case 'C': bad |= cks_size_parse(optarg, &o.chunk) != CKS_OK; break;
            case 'h': usage(stdout); return 0;
            default: usage(stderr); return 2;
        }
    }
    if (bad || optind != argc) {
        fprintf(stderr, "ckstore-demo: bad argument (see --help)\n");
        return 2;
    }
    if ((o.server == NULL) == (o.cluster == NULL)) {
        fprintf(stderr, "ckstore-demo: give exactly one of --cluster and --server\n");
        return 2;
    }
    if (o.ranks < 1 || o.window < 1 || o.layers < 1 || o.size == 0 || o.size > (1ull << 40) ||
        o.timeout_s < 1) {
        fprintf(stderr, "ckstore-demo: --ranks, --window, --layers, --size and --timeout "
                        "must be at least 1\n");
        return 2;
    }
    if (o.server != NULL && o.ranks != 1) {
        fprintf(stderr, "ckstore-demo: a standalone server takes single-rank versions: "
                        "use --ranks 1, or --cluster\n");
        return 2;
    }
    if (o.experts > 0 && (unsigned)o.experts < o.ranks) {
        fprintf(stderr, "ckstore-demo: --experts (%d) must be at least --ranks (%u), so "
                        "that every rank holds an expert\n", o.experts, o.ranks);
        return 2;
    }
    /* SIGPIPE would kill a rank whose launcher died; its writes then fail */
    signal(SIGPIPE, SIG_IGN);
    return demo_launch(&o);
}
