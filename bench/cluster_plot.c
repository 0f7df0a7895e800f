/*
 * DESIGN: --plot DIR: the charts of a cluster run (plot.c draws them with
 * gnuplot): the sweeps, ckstore against this machine's limits and the peers,
 * cold against warm.
 */
#include "cluster_int.h"
#include "plot.h"

#include <math.h>
#include <string.h>

void cl_plot_sweeps(const cl_ctx_t *x)
{
    static const char *const titles[3] = {"snapshot STORED", "snapshot PROTECTED",
                                          "restore"};
    static const char *const xl[CL_NSWEEPS] = {"client processes", "servers",
                                               "object size, MiB"};
    for (unsigned k = 0; k < CL_NSWEEPS; k++) {
        bench_series_t ser[3];
        char name[32], title[160];
        if (x->sweep_n[k] == 0) {
            continue;
        }
        memset(ser, 0, sizeof(ser));
        for (unsigned f = 0; f < 3; f++) {
            snprintf(ser[f].title, sizeof(ser[f].title), "%s", titles[f]);
            for (unsigned i = 0; i < x->sweep_n[k] && ser[f].n < 32; i++) {
                const cl_sweep_pt_t *pt = &x->sweep_res[k][i];
                unsigned j = ser[f].n;
                if (pt->status != 0) {
                    continue;
                }
                ser[f].x[j] = k == CL_SWEEP_CLIENTS   ? pt->clients
                              : k == CL_SWEEP_SERVERS ? pt->servers
                                                      : (double)pt->size / (1 << 20);
                ser[f].y[j] = pt->st[f].median;
                ser[f].ymin[j] = pt->st[f].min;
                ser[f].ymax[j] = pt->st[f].max;
                ser[f].n++;
            }
        }
        snprintf(name, sizeof(name), "sweep_%s", cl_sweep_names[k]);
        snprintf(
            title, sizeof(title),
            "ckstore, RS(%u,%u), aggregate bandwidth against %s%s (median, min..max)",
            x->o.k, x->o.m, k == CL_SWEEP_SIZES ? "the object size" : "the number of ",
            k == CL_SWEEP_SIZES ? "" : cl_sweep_names[k]);
        bench_plot_lines(x->o.plot, name, title, xl[k], "GB/s (10^9 B/s of object bytes)",
                         k == CL_SWEEP_SIZES, ser, 3, x->o.timeout_s);
    }
}

/* One bar more in b[] (of at most max) when the value is known. */
static void cl_bar(bench_bar_t *b, unsigned *n, unsigned max, const char *label,
                   double value, unsigned group)
{
    if (isfinite(value) && *n < max) {
        snprintf(b[*n].label, sizeof(b[*n].label), "%s", label);
        b[*n].value = value;
        b[*n].group = group;
        (*n)++;
    }
}

/* ckstore's figures next to this machine's limits and the peers. */
void cl_plot_bars(cl_ctx_t *x)
{
    bench_bar_t b[32];
    unsigned n = 0;
    char what[40], sz[32], title[200];
    bench_stats_t st;
    cl_bar(b, &n, 32, "memcpy (1 thread)", x->refs.memcpy_fig.st.median, 1);
    cl_bar(b, &n, 32, "raw UCX put", cl_raw_best(x, BENCH_DIR_PUT, what, sizeof(what)),
           1);
    cl_bar(b, &n, 32, "raw UCX get", cl_raw_best(x, BENCH_DIR_GET, what, sizeof(what)),
           1);
    cl_bar(b, &n, 32, "ISA-L encode (1 thread)", x->refs.encode.st.median, 1);
    cl_bar(b, &n, 32, "memcpy x k/(k+m)",
           x->refs.memcpy_fig.st.median * x->o.k / (x->o.k + x->o.m), 1);
    cl_bar(b, &n, 32, "ckstore STORED", cl_ck_median(x, 0), 0);
    cl_stats_of(x->fig.bytes, x->fig.prot, x->fig.nsnap, &st);
    cl_bar(b, &n, 32, "ckstore PROTECTED", st.median, 0);
    cl_bar(b, &n, 32, "ckstore restore", cl_ck_median(x, 1), 0);
    for (unsigned d = 1; d <= x->fig.ndown; d++) {
        char lbl[48];
        cl_stats_of(x->fig.bytes, x->fig.restore[d], x->fig.nrestore[d], &st);
        snprintf(lbl, sizeof(lbl), "ckstore restore, %u down", d);
        cl_bar(b, &n, 32, lbl, st.median, 0);
    }
    for (unsigned p = 0; p < BENCH_NPEERS; p++) {
        static const char *const lbl[BENCH_NPEERS][2] = {
            {"memcached SET", "memcached GET"},
            {"Redis SET", "Redis GET"},
            {"/dev/shm file write", "/dev/shm file read"}};
        if (!x->peerres[p].ok) {
            continue;
        }
        for (unsigned d = 0; d < 2; d++) {
            cl_stats_of(x->peerres[p].bytes,
                        d ? x->peerres[p].get_s : x->peerres[p].set_s, x->peerres[p].n,
                        &st);
            cl_bar(b, &n, 32, lbl[p][d], st.median, 2);
        }
    }
    snprintf(title, sizeof(title),
             "ckstore (%u servers, RS(%u,%u), %u client%s, %s objects) against this "
             "machine's limits and peers, median of %u",
             x->nmap, x->o.k, x->o.m, x->o.clients, x->o.clients > 1 ? "s" : "",
             strcmp(x->mix.kind, "moe") == 0 ? "MoE mix of"
                                             : bench_size_str(x->o.size, sz, sizeof(sz)),
             x->o.reps);
    bench_plot_bars(x->o.plot, "ckstore_vs_limits_and_peers", title,
                    "GB/s (10^9 B/s of object bytes)", b, n, x->o.timeout_s);
}

/* The chart: each phase cold and warm side by side, the references grey. */
void cl_cw_plot(cl_ctx_t *x)
{
    bench_bar_t b[16];
    unsigned n = 0;
    char what[40], title[200];
    double warm_restore =
        x->cw.nrestore > 1 ? cl_cw_median_from(x->cw.restore, 1, x->cw.nrestore) : NAN;
    if (x->cw.nsnap == 0) {
        return;
    }
    cl_bar(b, &n, 16, "STORED, first after start", cl_cw_gbps(x, x->cw.stored[0]), 2);
    cl_bar(b, &n, 16, "STORED, steady",
           cl_cw_gbps(x, cl_cw_warm_snap(x, x->cw.stored)), 0);
    cl_bar(b, &n, 16, "raw UCX put", cl_raw_best(x, BENCH_DIR_PUT, what, sizeof(what)),
           1);
    cl_bar(b, &n, 16, "PROTECTED, first after start", cl_cw_gbps(x, x->cw.prot[0]), 2);
    cl_bar(b, &n, 16, "PROTECTED, steady",
           cl_cw_gbps(x, cl_cw_warm_snap(x, x->cw.prot)), 0);
    cl_bar(b, &n, 16, "restore, fresh client",
           x->cw.nfresh > 0
               ? cl_cw_gbps(x, cl_cw_median_from(x->cw.fresh_s, 0, x->cw.nfresh))
               : NAN,
           2);
    cl_bar(b, &n, 16, "restore, warm client", cl_cw_gbps(x, warm_restore), 0);
    cl_bar(b, &n, 16, "raw UCX get", cl_raw_best(x, BENCH_DIR_GET, what, sizeof(what)),
           1);
    snprintf(title, sizeof(title),
             "ckstore cold (orange: first after start, fresh client) and warm (blue), "
             "%u servers, RS(%u,%u)",
             x->nmap, x->o.k, x->o.m);
    bench_plot_bars(x->o.plot, "ckstore_cold_vs_warm", title,
                    "GB/s (10^9 B/s of object bytes)", b, n, x->o.timeout_s);
}
