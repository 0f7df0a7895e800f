/*
 * DESIGN: the targets of the capacity benchmark: each figure against its
 * reference of the same run, met or missed by how much, printed and recorded.
 */
#include "cluster_int.h"

#include <math.h>
#include <string.h>

void cl_target_row(cl_ctx_t *x, bench_report_t *rep, const char *name, double value,
                   const char *unit, double ref, const char *ref_what, double target,
                   int higher, const char *note)
{
    double ratio = value / ref;
    bench_rec_t *r;
    if (!isfinite(ratio)) {
        cl_say(x, "%-36s %9s  %-34s %s\n", name, "-", ref_what,
               note != NULL ? note : "not judged");
        return;
    }
    int met = higher ? ratio >= target : ratio <= target;
    double miss = higher ? 1.0 - ratio / target : ratio / target - 1.0;
    char verdict[64];
    if (met) {
        snprintf(verdict, sizeof(verdict), "met");
    } else {
        snprintf(verdict, sizeof(verdict), "MISSED by %.0f %%", miss * 100);
    }
    x->targets_judged++;
    x->targets_met += (unsigned)met;
    cl_say(x, "%-36s %9.2f %-5s %-28s %8.2f %6.2f  %s %-5.2f %s\n", name, value, unit,
           ref_what, ref, ratio, higher ? ">=" : "<=", target, verdict);
    if ((r = bench_report_add(rep)) == NULL) {
        return;
    }
    bench_rec_kv(r, KS("op", "target"), KS("figure", name), KF("value", value),
                 KS("unit", unit), KF("ref_value", ref), KS("ref", ref_what),
                 KF("ratio", ratio), KF("target", target),
                 KS("sense", higher ? ">=" : "<="), KU("met", (uint64_t)met),
                 KF("miss", met ? 0.0 : miss));
}

/* A figure (GB/s) against a reference it was judged against before, under
 * its target row: said, not judged. */
static void cl_info_row(cl_ctx_t *x, double gbps, const char *ref_what, double ref)
{
    cl_say(x, "%-36s %9.2f %-5s %-28s %8.2f %6.2f  (not judged)\n", "", gbps, "GB/s",
           ref_what, ref, gbps / ref);
}

void cl_print_targets(cl_ctx_t *x, bench_report_t *rep)
{
    char put_what[40], get_what[40], what[64];
    double raw_put = cl_raw_best(x, BENCH_DIR_PUT, put_what, sizeof(put_what));
    double raw_get = cl_raw_best(x, BENCH_DIR_GET, get_what, sizeof(get_what));
    double stored = cl_ck_median(x, 0), restore = cl_ck_median(x, 1);
    double bound = x->refs.memcpy_fig.st.median * x->o.k / (x->o.k + x->o.m);
    bench_stats_t st;
    int one = x->o.clients == 1 && x->o.readers == 1;
    int big = strcmp(x->mix.kind, "uniform") == 0 && x->o.size >= (64ull << 20);

    cl_say(x, "\ntargets of the capacity benchmark (ratio = figure / reference; "
              "missed by = how far the ratio is from the target)\n");
    cl_say(x, "%-36s %9s %-5s %-28s %8s %6s  %s\n", "figure", "value", "unit",
           "reference", "ref", "ratio", "target");
    snprintf(what, sizeof(what), "raw UCX put (%s)", put_what);
    cl_target_row(x, rep, "put (snapshot STORED), >= 64 MiB", one && big ? stored : NAN,
                  "GB/s", raw_put, what, 0.9, 1,
                  "not judged: needs 1 client, --mix uniform, >= 64M");
    snprintf(what, sizeof(what), "raw UCX get (%s)", get_what);
    cl_target_row(x, rep, "get (restore), >= 64 MiB", one && big ? restore : NAN, "GB/s",
                  raw_get, what, 0.9, 1,
                  "not judged: needs 1 client, --mix uniform, >= 64M");
    cl_stats_of(x->fig.bytes, x->fig.prot, x->fig.nsnap, &st);
    snprintf(what, sizeof(what), "memcpy x k/(k+m)");
    cl_target_row(x, rep, "snapshot PROTECTED", st.median, "GB/s", bound, what, 0.8, 1,
                  NULL);
    /* a degraded restore is made by a fresh client into fresh buffers right
     * after servers were killed: judged against the healthy restore made the
     * same way in the same repetitions (all servers up), not against the
     * median of the writer's restores, which mixes its first with ones made
     * right after two servers restarted (their new mappings of its buffers)
     * and is said beside it, not judged */
    double fresh = x->cw.nfresh > 0
                       ? cl_cw_gbps(x, cl_cw_median_from(x->cw.fresh_s, 0, x->cw.nfresh))
                       : NAN;
    for (unsigned d = 1; d <= x->fig.ndown; d++) {
        char name[64];
        cl_stats_of(x->fig.bytes, x->fig.restore[d], x->fig.nrestore[d], &st);
        snprintf(name, sizeof(name), "degraded restore, %u down", d);
        cl_target_row(x, rep, name, st.median, "GB/s", fresh, "healthy, by a fresh client",
                      0.7, 1, NULL);
        cl_info_row(x, st.median, "healthy restore (median)", restore);
    }
    for (unsigned d = 1; d <= x->fig.ndown; d++) {
        char name[64];
        cl_stats_of(x->fig.bytes, x->fig.down_stored[d], x->fig.ndown_stored[d], &st);
        snprintf(name, sizeof(name), "degraded snapshot STORED, %u down", d);
        cl_target_row(x, rep, name, st.median, "GB/s", stored, "healthy snapshot STORED",
                      0.8, 1, NULL);
    }
    if (x->fig.nrepair > 0) {
        double mn, md, mx;
        unsigned e = x->fig.ndown;
        double bmn, bmd, bmx, bounds[CL_MAX_REPS];
        cl_vstats(x->fig.repair_gbs, x->fig.nrepair, &mn, &md, &mx);
        for (unsigned i = 0; i < x->fig.nrepair; i++) {
            bounds[i] = cl_repair_bound(x, x->fig.repair_dec[i][0], x->fig.repair_dec[i][1]);
        }
        /* the repairs' own decodes on one core of ISA-L (cl_repair_bound():
         * a stripe that lost one chunk costs a decode as one that lost two) */
        cl_vstats(bounds, x->fig.nrepair, &bmn, &bmd, &bmx);
        cl_target_row(x, rep, "repair (rebuilt chunk bytes)", md, "GB/s", bmd,
                      "ISA-L decodes of it (chunk B/s)", 0.5, 1, NULL);
        /* before 2026-11-28 the bound took every stripe as having lost e =
         * servers down chunks: decode[e] x e / k; said, not judged */
        double dbound = e >= 1 && e <= CL_MAX_DOWN && x->refs.decode[e].ok
                            ? x->refs.decode[e].st.median * e / x->o.k
                            : NAN;
        snprintf(what, sizeof(what), "ISA-L decode, all %u lost", e);
        cl_info_row(x, md, what, dbound);
    }
    if (x->fig.repl_ok) {
        cl_target_row(x, rep, "repair by a replacement", x->fig.repl_gbs, "GB/s",
                      cl_repair_bound(x, x->fig.repl_dec[0], x->fig.repl_dec[1]),
                      "ISA-L decodes of it (chunk B/s)", 0.5, 1, NULL);
    }
    if (x->fig.nduring > 0) {
        bench_stats_t ns;
        cl_stats_of(x->fig.bytes, x->fig.during_stored, x->fig.nduring, &st);
        /* against the same snapshot after the same restart with nothing to
         * repair; the healthy median (other conditions: the first snapshot
         * after the start, others long after a restart) is said beside it */
        cl_stats_of(x->fig.bytes, x->fig.norepair_stored, x->fig.nnorepair, &ns);
        cl_target_row(x, rep, "snapshot STORED while repair runs", st.median, "GB/s",
                      x->fig.nnorepair > 0 ? ns.median : NAN,
                      "restarted, nothing to repair", 0.7, 1, NULL);
        cl_info_row(x, st.median, "healthy snapshot STORED", stored);
    }
    cl_peer_targets(x, rep, stored, restore);
    {
        double ms[CL_MAX_SNAPS], mn, md, mx;
        for (unsigned i = 0; i < x->fig.nsnap; i++) {
            ms[i] = x->fig.stall[i] * 1e3;
        }
        cl_vstats(ms, x->fig.nsnap, &mn, &md, &mx);
        double mc_ms =
            (double)x->fig.rank_bytes / (x->refs.memcpy_fig.st.median * BENCH_GB) * 1e3;
        cl_target_row(x, rep, "trainer stall per snapshot", md, "ms", mc_ms,
                      "one memcpy of a writer's bytes", 1.0, 0, NULL);
    }
    cl_say(x, "targets met: %u of %u judged\n", x->targets_met, x->targets_judged);
}
