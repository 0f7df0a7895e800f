/*
 * DESIGN: the client processes, the parent's side: C forked workers (and with
 * --hosts the fresh processes of the cold restores, forked at the start),
 * one command to each over a pipe, READY from all, GO to all, results from
 * all, and the aggregate of their timestamps. Never: use UCX in the parent
 * before a fork; wait for a worker without a deadline.
 */
#include "cluster_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Writers are workers 0 .. clients-1, readers 0 .. readers-1. */
static unsigned cl_nworkers_needed(cl_ctx_t *x)
{
    return x->o.readers > x->o.clients ? x->o.readers : x->o.clients;
}

/* Fork the worker of slot `slot` with client index `index` (its rank: which
 * objects it writes and reads). */
static int cl_worker_fork(cl_ctx_t *x, unsigned slot, unsigned index)
{
    pid_t parent = getpid();
    int cmd[2], res[2];
    if (pipe2(cmd, O_CLOEXEC) != 0) {
        return -1;
    }
    if (pipe2(res, O_CLOEXEC) != 0) {
        close(cmd[0]);
        close(cmd[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ckstore-bench: fork: %s\n", strerror(errno));
        close(cmd[0]);
        close(cmd[1]);
        close(res[0]);
        close(res[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) {
            _exit(1);
        }
        signal(SIGINT, SIG_IGN); /* the parent cleans up and kills us */
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        /* keep only our two pipe ends (and stdio) */
        int a = fcntl(cmd[0], F_DUPFD_CLOEXEC, 1000);
        int b = fcntl(res[1], F_DUPFD_CLOEXEC, 1000);
        int hi = a > b ? a : b;
        syscall(SYS_close_range, 3u, 999u, 0u);
        for (int fd = 1000; fd < hi; fd++) {
            if (fd != a && fd != b) {
                close(fd);
            }
        }
        syscall(SYS_close_range, (unsigned)hi + 1, ~0u, 0u);
        x->nworkers = 0; /* ours to kill, not theirs */
        x->nsrv = 0;
        x->have_child = 0;
        x->net_up = 0;
        _exit(cl_worker_main(x, index, a, b));
    }
    close(cmd[0]);
    close(res[1]);
    x->wcmd[slot] = cmd[1];
    x->wres[slot] = res[0];
    x->worker[slot] = pid;
    x->nworkers = slot + 1;
    return 0;
}

/* With --hosts, the cold restores are made by fresh processes: reps x
 * readers of them, forked now (no UCX in this process yet), each used once
 * (cl_cold_slot()). */
static unsigned cl_ncold(cl_ctx_t *x)
{
    return x->o.hosts ? x->o.reps * x->o.readers : 0;
}

unsigned cl_cold_slot(const cl_ctx_t *x, unsigned rep, unsigned reader)
{
    return x->nreg + rep * x->o.readers + reader;
}

int cl_workers_start(cl_ctx_t *x)
{
    x->nreg = cl_nworkers_needed(x);
    for (unsigned w = 0; w < x->nreg; w++) {
        if (cl_worker_fork(x, w, w) != 0) {
            return -1;
        }
    }
    for (unsigned c = 0; c < cl_ncold(x); c++) {
        if (cl_worker_fork(x, x->nreg + c, c % x->o.readers) != 0) {
            return -1;
        }
    }
    return 0;
}

/* QUIT to the worker of one slot (still running, not yet told). */
static void cl_worker_tell_quit(const cl_ctx_t *x, unsigned slot)
{
    cl_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_QUIT;
    bench_write_full(x->wcmd[slot], &cmd, sizeof(cmd));
}

/* Reap the worker of one slot after its QUIT (killed after the timeout). */
static void cl_worker_reap(cl_ctx_t *x, unsigned slot)
{
    if (!bench_wait_pid(x->worker[slot], x->o.timeout_s, NULL)) {
        fprintf(stderr, "ckstore-bench: client %u (pid %d) did not quit: killed\n", slot,
                (int)x->worker[slot]);
        kill(x->worker[slot], SIGKILL);
        bench_wait_pid(x->worker[slot], x->o.timeout_s, NULL);
    }
    x->worker[slot] = 0;
    close(x->wcmd[slot]);
    close(x->wres[slot]);
}

void cl_worker_quit(cl_ctx_t *x, unsigned slot)
{
    if (x->worker[slot] > 0) {
        cl_worker_tell_quit(x, slot);
        cl_worker_reap(x, slot);
    }
}

/* QUIT to all first, then reap them: they end together. */
void cl_workers_stop(cl_ctx_t *x)
{
    for (unsigned w = 0; w < x->nworkers; w++) {
        if (x->worker[w] > 0) {
            cl_worker_tell_quit(x, w);
        }
    }
    for (unsigned w = 0; w < x->nworkers; w++) {
        if (x->worker[w] > 0) {
            cl_worker_reap(x, w);
        }
    }
}

/* Workers of slots base .. base+nw-1 as ranks 0 .. nw-1. */
int cl_workers_run_at(cl_ctx_t *x, unsigned base, const cl_cmd_t *proto, cl_res_t *res,
                      unsigned nw)
{
    int rc = 0;
    double deadline = bench_now() + x->o.timeout_s * 4;
    for (unsigned w = 0; w < nw; w++) {
        cl_cmd_t cmd = *proto;
        cmd.rank = w;
        cmd.nranks = nw;
        cmd.nreaders = x->o.readers;
        if (bench_write_full(x->wcmd[base + w], &cmd, sizeof(cmd)) != 0) {
            fprintf(stderr, "ckstore-bench: client %u is gone\n", w);
            return -1;
        }
    }
    for (unsigned w = 0; w < nw; w++) {
        if (bench_read_full(x->wres[base + w], &res[w], sizeof(res[w]), deadline) != 0) {
            fprintf(stderr, "ckstore-bench: client %u did not get ready: %s\n", w,
                    strerror(errno));
            return -1; /* the caller tears everything down */
        }
        if (res[w].status != CKS_OK) {
            fprintf(stderr, "ckstore-bench: %s\n", res[w].err);
            rc = -1;
        }
        x->alloc_bytes += res[w].alloc_bytes;
        x->alloc_huge_bytes += res[w].alloc_huge_bytes;
        if (res[w].alloc_bytes > 0 && x->nallocs < CL_MAX_ALLOCS) {
            x->alloc_s_gib[x->nallocs++] =
                res[w].alloc_s / ((double)res[w].alloc_bytes / (1u << 30));
        }
    }
    x->cpu_go = rc == 0 ? cl_servers_cpu(x) : -1;
    x->net_go.ok = 0;
    if (rc == 0 && x->o.hosts) {
        cl_net_read(x, &x->net_go);
    }
    for (unsigned w = 0; w < nw; w++) {
        /* those that failed wait for no GO; the others are called off */
        if (res[w].status == CKS_OK) {
            char go = rc == 0 ? 'G' : 'X';
            bench_write_full(x->wcmd[base + w], &go, 1);
        }
    }
    if (rc != 0) {
        return rc;
    }
    deadline = bench_now() + x->o.timeout_s * 4;
    for (unsigned w = 0; w < nw; w++) {
        if (bench_read_full(x->wres[base + w], &res[w], sizeof(res[w]), deadline) != 0) {
            fprintf(stderr, "ckstore-bench: client %u did not answer: %s\n", w,
                    strerror(errno));
            return -1;
        }
        if (res[w].status != CKS_OK) {
            fprintf(stderr, "ckstore-bench: %s\n", res[w].err);
            rc = -1;
        }
    }
    return rc;
}

int cl_workers_run(cl_ctx_t *x, const cl_cmd_t *proto, cl_res_t *res, unsigned nw)
{
    return cl_workers_run_at(x, 0, proto, res, nw);
}

/* Aggregate over the workers: total bytes, (max stored - min start), (max end
 * - min start). */
void cl_aggregate(const cl_res_t *res, unsigned nw, uint64_t *bytes_p, double *stored_s_p,
                  double *end_s_p, uint64_t *rank_max_p)
{
    double t0 = INFINITY, ts = 0, te = 0;
    uint64_t bytes = 0, rmax = 0;
    for (unsigned w = 0; w < nw; w++) {
        t0 = res[w].t_start < t0 ? res[w].t_start : t0;
        ts = res[w].t_stored > ts ? res[w].t_stored : ts;
        te = res[w].t_end > te ? res[w].t_end : te;
        bytes += res[w].bytes;
        rmax = res[w].bytes > rmax ? res[w].bytes : rmax;
    }
    *bytes_p = bytes;
    if (stored_s_p != NULL) {
        *stored_s_p = ts - t0;
    }
    if (end_s_p != NULL) {
        *end_s_p = te - t0;
    }
    if (rank_max_p != NULL) {
        *rank_max_p = rmax;
    }
}

uint64_t cl_sum_stored(const cl_res_t *res, unsigned nw)
{
    uint64_t t = 0;
    for (unsigned w = 0; w < nw; w++) {
        t += res[w].stored;
    }
    return t;
}

double cl_clients_cpu(const cl_res_t *res, unsigned nw)
{
    double t = 0;
    for (unsigned w = 0; w < nw; w++) {
        t += res[w].cpu_s;
    }
    return t;
}
