/*
 * DESIGN: --sweep-clients, --sweep-servers, --sweep-sizes: one point each, run in a
 * child process of its own (fork; it starts its servers and clients, runs
 * the snapshots and healthy restores, and stops everything it started), so
 * that every point starts from a fresh cluster. The parent makes the point's
 * context before the fork; the child changes only that. The child sends its
 * figures back over a pipe; it is stopped by its pid if it overruns its
 * deadline.
 */
#include "cluster_int.h"
#include "plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

const char *const cl_sweep_names[CL_NSWEEPS] = {"clients", "servers", "sizes"};

/* The context of one point, made by the parent before the fork: its
 * options (the point's clients, servers and size; no degraded phases,
 * quiet), its objects and arena; NULL without memory. */
static cl_ctx_t *cl_sweep_ctx(const cl_ctx_t *x, unsigned clients, unsigned servers,
                              uint64_t size)
{
    cl_ctx_t *pt = cl_ctx_new();
    if (pt == NULL) {
        return NULL;
    }
    pt->o = x->o;
    pt->o.clients = pt->o.readers = clients;
    pt->o.local = servers;
    pt->o.size = size;
    pt->o.no_degraded = 1;
    pt->o.quiet = 1;
    pt->mix.kind = x->mix.kind;
    cl_mix_build(pt);
    if (!pt->o.arena_given) {
        pt->o.arena = cl_arena_size(pt);
    }
    memcpy(pt->bin, x->bin, sizeof(pt->bin));
    return pt;
}

/* A point's cold figures (the first snapshot and restore after its servers
 * started) and warm ones (the median of the later repetitions), GB/s and the
 * servers' CPU seconds per GB. */
static void cl_sweep_cold_warm(const cl_ctx_t *pt, cl_sweep_pt_t *res)
{
    const double *secs[3] = {pt->cw.stored, pt->cw.prot, pt->cw.restore};
    const unsigned n[3]   = {pt->cw.nsnap, pt->cw.nsnap, pt->cw.nrestore};
    const double *cpu[2]  = {pt->fig.srv_cpu_snap, pt->fig.srv_cpu_restore[0]};
    const unsigned ncpu[2] = {pt->fig.ncpu_snap, pt->fig.ncpu_restore[0]};

    for (unsigned f = 0; f < 3; f++) {
        res->cold[f] = n[f] > 0 ? cl_cw_gbps(pt, secs[f][0]) : NAN;
        res->warm[f] = cl_cw_gbps(pt, cl_cw_median_from(secs[f], 1, n[f]));
    }
    for (unsigned f = 0; f < 2; f++) {
        res->cpu_cold[f] = ncpu[f] > 0 ? cpu[f][0] : NAN;
        res->cpu_warm[f] = cl_cw_median_from(cpu[f], 1, ncpu[f]);
    }
}

/* In the point's child: its cluster, clients and figures, sent back on fd. */
static void cl_sweep_child(cl_ctx_t *pt, int fd)
{
    cl_sweep_pt_t res;
    memset(&res, 0, sizeof(res));
    res.status = 1;
    if (cl_check_memory(pt) != 0) {
        res.status = 2;
    } else if (cl_cluster_start(pt, pt->o.arena) == 0 && cl_workers_start(pt) == 0 &&
               cl_measure_main(pt) == 0) {
        res.status = 0;
        res.bytes = pt->fig.bytes;
        cl_stats_of(pt->fig.bytes, pt->fig.stored, pt->fig.nsnap, &res.st[0]);
        cl_stats_of(pt->fig.bytes, pt->fig.prot, pt->fig.nsnap, &res.st[1]);
        cl_stats_of(pt->fig.bytes, pt->fig.restore[0], pt->fig.nrestore[0], &res.st[2]);
        cl_sweep_cold_warm(pt, &res);
    }
    res.clients = pt->o.clients;
    res.servers = pt->o.local;
    res.size = pt->o.size;
    if (pt->client != NULL) {
        cks_client_destroy(pt->client);
        pt->client = NULL;
    }
    cl_workers_stop(pt);
    cl_servers_stop(pt);
    cl_remove_files(pt);
    cl_shm_leftovers(pt);
    bench_write_full(fd, &res, sizeof(res));
}

static int cl_sweep_point(cl_ctx_t *x, cl_sweep_t kind, unsigned clients,
                          unsigned servers, uint64_t size)
{
    cl_sweep_pt_t *pt = &x->sweep_res[kind][x->sweep_n[kind]++];
    cl_ctx_t *px;
    int fds[2];
    char sz[32];
    memset(pt, 0, sizeof(*pt));
    pt->status = 1;
    pt->clients = clients;
    pt->servers = servers;
    pt->size = size;
    bench_progress("sweep: %u client%s, %u servers, %s per object", clients,
                   clients > 1 ? "s" : "", servers, bench_size_str(size, sz, sizeof(sz)));
    if ((px = cl_sweep_ctx(x, clients, servers, size)) == NULL) {
        return -1;
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        cl_ctx_free(px);
        return -1;
    }
    x->point = px; /* the signal handler stops what the child starts */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        x->point = NULL;
        cl_ctx_free(px);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* our handler cleans up */
        close(fds[0]);
        cl_sweep_child(px, fds[1]);
        _exit(0);
    }
    close(fds[1]);
    x->sweep_pid = pid;
    /* every phase of every repetition is bounded by the timeout (x 4 for a
     * client phase); the servers' start too */
    double limit = x->o.timeout_s * (8.0 + 12.0 * x->o.reps) + (double)servers * 2;
    if (bench_read_full(fds[0], pt, sizeof(*pt), bench_now() + limit) != 0) {
        fprintf(stderr,
                "ckstore-bench: sweep point (%u clients, %u servers) gave no result: "
                "%s\n",
                clients, servers, strerror(errno));
        pt->status = 1;
        bench_stop_pid(pid, SIGTERM, x->o.timeout_s);
    } else if (!bench_wait_pid(pid, x->o.timeout_s, NULL)) {
        bench_stop_pid(pid, SIGTERM, x->o.timeout_s);
    }
    x->sweep_pid = 0;
    x->point = NULL;
    cl_ctx_free(px);
    close(fds[0]);
    return pt->status == 0 ? 0 : -1;
}

static void cl_run_sweeps(cl_ctx_t *x)
{
    for (unsigned i = 0; i < x->o.nsweep_clients; i++) {
        cl_sweep_point(x, CL_SWEEP_CLIENTS, x->o.sweep_clients[i], x->o.local, x->o.size);
    }
    for (unsigned i = 0; i < x->o.nsweep_servers; i++) {
        cl_sweep_point(x, CL_SWEEP_SERVERS, x->o.clients, x->o.sweep_servers[i],
                       x->o.size);
    }
    for (unsigned i = 0; i < x->o.nsweep_sizes; i++) {
        cl_sweep_point(x, CL_SWEEP_SIZES, x->o.clients, x->o.local, x->o.sweep_sizes[i]);
    }
    bench_progress_clear();
}

/* A figure of a sweep record, left out when it was not measured. */
static void cl_sweep_rec_f(bench_rec_t *r, const char *key, double v)
{
    if (isfinite(v)) {
        bench_rec_f64(r, key, v);
    }
}

/* The second table of a sweep: each point's cold and warm GB/s and the
 * servers' CPU seconds per GB (what docs/CAPACITY.md takes as costs). */
static void cl_print_sweep_cold_warm(cl_ctx_t *x, unsigned k)
{
    char sz[32];
    cl_say(x,
           "cold (the first after the servers start) / warm (median of the later reps), "
           "aggregate GB/s; server CPU s per GB of object bytes, all servers, cold / warm\n");
    cl_say(x, "%7s %7s %9s  %-15s %-15s %-15s %-15s %-15s\n", "clients", "servers", "size",
           "STORED", "PROTECTED", "restore", "CPU snapshot", "CPU restore");
    for (unsigned i = 0; i < x->sweep_n[k]; i++) {
        const cl_sweep_pt_t *pt = &x->sweep_res[k][i];
        if (pt->status != 0) {
            continue;
        }
        cl_say(x, "%7u %7u %9s  ", pt->clients, pt->servers,
               bench_size_str(pt->size, sz, sizeof(sz)));
        for (unsigned f = 0; f < 5; f++) {
            char cell[32];
            double c = f < 3 ? pt->cold[f] : pt->cpu_cold[f - 3];
            double w = f < 3 ? pt->warm[f] : pt->cpu_warm[f - 3];
            snprintf(cell, sizeof(cell), f < 3 ? "%.2f / %.2f" : "%.3f / %.3f", c, w);
            cl_say(x, "%-15s ", cell);
        }
        cl_say(x, "\n");
    }
}

static void cl_print_sweeps(cl_ctx_t *x, bench_report_t *rep)
{
    static const char *const ops[3] = {"sweep_snapshot_stored",
                                       "sweep_snapshot_protected", "sweep_restore"};
    char sz[32];
    for (unsigned k = 0; k < CL_NSWEEPS; k++) {
        if (x->sweep_n[k] == 0) {
            continue;
        }
        cl_say(x,
               "\nsweep over %s: RS(%u,%u), %s chunks, %u objects per client, aggregate "
               "GB/s = "
               "10^9 B/s of object bytes, median (min .. max) of %u; each point a fresh "
               "cluster\n",
               cl_sweep_names[k], x->o.k, x->o.m,
               bench_size_str(x->o.chunk, sz, sizeof(sz)), x->o.objects, x->o.reps);
        cl_say(x, "%7s %7s %9s  %-21s %-21s %-21s %9s\n", "clients", "servers", "size",
               "STORED", "PROTECTED", "restore", "PROT/srv");
        for (unsigned i = 0; i < x->sweep_n[k]; i++) {
            const cl_sweep_pt_t *pt = &x->sweep_res[k][i];
            cl_say(x, "%7u %7u %9s  ", pt->clients, pt->servers,
                   bench_size_str(pt->size, sz, sizeof(sz)));
            if (pt->status != 0) {
                cl_say(x, "%s\n",
                       pt->status == 2 ? "skipped: does not fit in memory"
                                       : "failed (see the errors above)");
                continue;
            }
            for (unsigned f = 0; f < 3; f++) {
                char cell[32];
                snprintf(cell, sizeof(cell), "%.2f (%.2f..%.2f)", pt->st[f].median,
                         pt->st[f].min, pt->st[f].max);
                cl_say(x, "%-21s ", cell);
            }
            cl_say(x, "%9.3f\n", pt->st[1].median / pt->servers);
            for (unsigned f = 0; f < 3; f++) {
                bench_rec_t *r = bench_report_add(rep);
                if (r == NULL) {
                    continue;
                }
                cl_rec_common(x, r, ops[f]);
                bench_rec_kv(r, KS("sweep", cl_sweep_names[k]),
                             KU("clients", pt->clients), KU("servers", pt->servers),
                             KU("objects", x->o.objects), KU("size", pt->size),
                             KU("bytes", pt->bytes));
                cl_rec_stats(r, &pt->st[f]);
                bench_rec_kv(r, KF("per_server_gbps", pt->st[f].median / pt->servers),
                             KF("per_client_gbps", pt->st[f].median / pt->clients));
                cl_sweep_rec_f(r, "cold_gbps", pt->cold[f]);
                cl_sweep_rec_f(r, "warm_gbps", pt->warm[f]);
                cl_sweep_rec_f(r, "server_cpu_s_per_gb_cold", pt->cpu_cold[f == 2]);
                cl_sweep_rec_f(r, "server_cpu_s_per_gb_warm", pt->cpu_warm[f == 2]);
            }
        }
        cl_print_sweep_cold_warm(x, k);
    }
}

/* With --sweep-*: only the sweeps (each point a cluster of its own). */
int cl_sweep_main(cl_ctx_t *x, bench_report_t *rep)
{
    double load_start, load_end;
    if (cl_find_server_bin(x) != 0) {
        return 1;
    }
    bench_machine_describe(&rep->machine);
    cl_say(x,
           "ckstore-bench cluster, sweeps: RS(%u,%u), %u objects per client, %u reps per "
           "point; "
           "machine: %s, %llu cores\n",
           x->o.k, x->o.m, x->o.objects, x->o.reps,
           bench_rec_get_str(&rep->machine, "cpu"),
           (unsigned long long)bench_rec_get_u64(&rep->machine, "cores"));
    load_start = bench_loadavg();
    cl_install_signals(x);
    cl_run_sweeps(x);
    load_end = bench_loadavg();
    cl_print_sweeps(x, rep);
    if (x->o.plot != NULL) {
        cl_plot_sweeps(x);
    }
    cl_say(x, "load average: %.2f at the start, %.2f at the end\n", load_start, load_end);
    bench_rec_kv(&rep->run, KS("command", x->o.command), KS("mode", "cluster-sweep"),
                 KU("k", x->o.k), KU("m", x->o.m), KU("chunk", x->o.chunk),
                 KU("objects", x->o.objects), KU("reps", x->o.reps),
                 KU("window", x->o.window), KU("stage_host", (uint64_t)x->o.stage_host),
                 KU("stage_default_ring", (uint64_t)x->o.stage_default_ring),
                 KF("loadavg_start", load_start), KF("loadavg_end", load_end));
    return cl_finish(x, rep, 0);
}
