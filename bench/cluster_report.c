/*
 * DESIGN: the printed tables of a cluster run and their records (report.c writes
 * the JSON): the main table, the derived figures, the cold and warm table,
 * the per-snapshot figures; the statistics helpers they share.
 */
#include "cluster_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

double cl_median(const double *v, unsigned n)
{
    double mn, md, mx;
    cl_vstats(v, n, &mn, &md, &mx);
    return md;
}

void cl_rec_common(const cl_ctx_t *x, bench_rec_t *r, const char *op)
{
    bench_rec_kv(r, KS("op", op), KU("k", x->o.k), KU("m", x->o.m),
                 KU("chunk", x->o.chunk));
}

void cl_rec_stats(bench_rec_t *r, const bench_stats_t *st)
{
    bench_rec_kv(r, KF("gbps", st->median), KF("min_gbps", st->min),
                 KF("max_gbps", st->max), KU("reps", st->n));
}

void cl_rec_ref(bench_rec_t *r, const cl_fig_t *f)
{
    cl_rec_stats(r, &f->st);
    bench_rec_kv(r, KF("before_gbps", f->pass_med[0]),
                 KF("after_gbps", f->npass > 1 ? f->pass_med[1] : NAN));
}

/* One row of the main table and its record. */
static void cl_main_row(cl_ctx_t *x, bench_report_t *rep, const char *op, unsigned down,
                        double *secs, unsigned n, double ref, const char *ref_what,
                        double healthy, double target)
{
    bench_stats_t st;
    bench_rec_t *r;
    double ratio;

    if (n == 0) {
        return;
    }
    bench_stats(x->fig.bytes, secs, n, &st);
    ratio = st.median / ref;
    cl_say(x, "%-18s %4u %7.2f %6.2f %6.2f  %-28s", op, down, st.median, st.min, st.max,
           ref_what);
    if (isfinite(ratio)) {
        cl_say(x, " %6.2f %6.2f", ref, ratio);
    } else {
        cl_say(x, " %6s %6s", "-", "-");
    }
    if (isfinite(healthy)) {
        cl_say(x, "  %5.2f", st.median / healthy);
    } else {
        cl_say(x, "  %5s", "-");
    }
    if (isfinite(target) && isfinite(ratio)) {
        cl_say(x, "  %s %.1f %s", ratio >= target ? ">=" : "< ", target,
               ratio >= target ? "met" : "NOT met");
    }
    cl_say(x, "\n");
    if ((r = bench_report_add(rep)) == NULL) {
        return;
    }
    cl_rec_common(x, r, op);
    bench_rec_kv(r, KU("servers", x->nmap), KU("clients", x->nworkers),
                 KU("objects", x->o.objects), KU("size", x->o.size),
                 KU("bytes", x->fig.bytes));
    if (strcmp(op, "restore_degraded") == 0) {
        bench_rec_u64(r, "servers_down", down);
    }
    if (strncmp(op, "snapshot", 8) == 0 && x->placement_max_ratio > 0) {
        /* the busiest primary's object bytes over the mean (cl_placement_say()) */
        bench_rec_f64(r, "busiest_primary_ratio", x->placement_max_ratio);
    }
    cl_rec_stats(r, &st);
    bench_rec_kv(r, KF("ratio", ratio), KF("ref_gbps", ref), KS("ref", ref_what));
    if (isfinite(healthy)) {
        bench_rec_f64(r, "healthy_ratio", st.median / healthy);
    }
    if (isfinite(target)) {
        bench_rec_f64(r, "target_ratio", target);
    }
    if (strcmp(op, "snapshot_protected") == 0) {
        bench_rec_f64(r, "protect_tail_ms", cl_median(x->fig.tail, x->fig.nsnap) * 1e3);
        if (x->o.local > 0) {
            bench_rec_u64(r, "encoders_per_server", x->o.encoders);
        }
        if (x->fig.used_bytes > 0) {
            bench_rec_u64(r, "arena_used_bytes", x->fig.used_bytes);
        }
    }
}

void cl_print_main(cl_ctx_t *x, bench_report_t *rep)
{
    char put_what[40], get_what[40], what[64], sz[32];
    double raw_put = cl_raw_best(x, BENCH_DIR_PUT, put_what, sizeof(put_what));
    double raw_get = cl_raw_best(x, BENCH_DIR_GET, get_what, sizeof(get_what));
    double bound = x->refs.memcpy_fig.st.median * x->o.k / (x->o.k + x->o.m);
    double tails[CL_MAX_REPS];
    bench_stats_t healthy;
    double tail_s;

    if (strcmp(x->mix.kind, "moe") == 0) {
        snprintf(what, sizeof(what), "the MoE mix (%u objects, %.0f MiB)", x->mix.n,
                 (double)x->mix.bytes / (1 << 20));
    } else {
        char osz[32];
        snprintf(what, sizeof(what), "%u objects x %s", x->o.objects,
                 bench_size_str(x->o.size, osz, sizeof(osz)));
    }
    cl_say(x,
           "\nckstore cluster: %u servers, RS(%u,%u), %s chunks, %u writer%s x %s = %.0f "
           "MiB "
           "per snapshot, %u reader%s; GB/s = 10^9 B/s of object bytes, median of %u\n",
           x->nmap, x->o.k, x->o.m, bench_size_str(x->o.chunk, sz, sizeof(sz)),
           x->o.clients, x->o.clients > 1 ? "s" : "", what,
           (double)x->fig.bytes / (1 << 20), x->o.readers, x->o.readers > 1 ? "s" : "",
           x->fig.nsnap);
    cl_say(x, "%-18s %4s %7s %6s %6s  %-28s %6s %6s  %5s  %s\n", "op", "down", "GB/s",
           "min", "max", "reference", "ref", "ratio", "/heal", "target");
    snprintf(what, sizeof(what), "raw UCX put (%s)", put_what);
    cl_main_row(x, rep, "snapshot_stored", 0, x->fig.stored, x->fig.nsnap, raw_put, what,
                NAN, NAN);
    snprintf(what, sizeof(what), "memcpy x k/(k+m)");
    cl_main_row(x, rep, "snapshot_protected", 0, x->fig.prot, x->fig.nsnap, bound, what,
                NAN, NAN);
    snprintf(what, sizeof(what), "raw UCX get (%s)", get_what);
    memcpy(tails, x->fig.restore[0], sizeof(tails));
    bench_stats(x->fig.bytes, tails, x->fig.nrestore[0], &healthy);
    cl_main_row(x, rep, "restore", 0, x->fig.restore[0], x->fig.nrestore[0], raw_get,
                what, NAN, x->o.readers == 1 ? CL_TARGET_RESTORE : NAN);
    for (unsigned d = 1; d <= x->fig.ndown; d++) {
        cl_main_row(x, rep, "restore_degraded", d, x->fig.restore[d], x->fig.nrestore[d],
                    raw_get, what, healthy.median,
                    x->o.readers == 1 ? CL_TARGET_DEGRADED : NAN);
    }
    if (x->fig.ndown == 0) {
        cl_say(x, "(no degraded restores: %s)\n",
               x->o.local == 0 ? "--cluster names servers this bench did not start"
                               : "--no-degraded or m = 0");
    } else {
        cl_say(x, "servers down: id %u", x->fig.down_ids[0]);
        if (x->fig.ndown > 1) {
            cl_say(x, ", then also id %u (both in rack r%u)", x->fig.down_ids[1],
                   x->fig.down_ids[1] % CL_RACKS);
        }
        cl_say(
            x,
            "; SIGKILLed after the healthy restore, restarted after the degraded ones\n");
    }
    if (x->nallocs > 0) {
        /* untimed preparation, but a cost a replacement rank pays once */
        cl_say(x,
               "cks_mem_alloc() of the clients' buffers (untimed preparation; the "
               "servers on this host map and fault in each buffer before it "
               "returns): median "
               "%.0f ms per GiB over %u preparations; %.0f of %.0f MiB in huge pages\n",
               cl_median(x->alloc_s_gib, x->nallocs) * 1e3, x->nallocs,
               (double)x->alloc_huge_bytes / (1u << 20),
               (double)x->alloc_bytes / (1u << 20));
    }

    /* what the seal costs after STORED: encode + CRC + chunk sends + commit on
     * the servers, overlapped with the puts, so this is not an encode rate */
    tail_s = cl_median(x->fig.tail, x->fig.nsnap);
    if (isfinite(raw_get) && x->fig.nrestore[0] > 0) {
        /* the serving servers copy every chunk into the client's memory and
         * CRC each slice from cache right after its copy (not counted here:
         * from cache it runs several times faster than from memory); a
         * degraded stripe's parity goes into the client's scratch the same
         * way, and the client decodes the stripe once k are in */
        double dec = x->refs.decode[1].st.median;
        double hb = raw_get;
        double db = 1.0 / (1.0 / raw_get + 1.0 / dec);
        double deg1 = NAN;
        if (x->fig.nrestore[1] > 0) {
            deg1 = (double)x->fig.bytes /
                   cl_median(x->fig.restore[1], x->fig.nrestore[1]) / BENCH_GB;
        }
        cl_say(x,
               "\nderived from this run's one-thread figures: a restore costs one UCX "
               "copy per "
               "byte (by the serving servers' progress threads with cks_mem_alloc() "
               "buffers, "
               "which CRC each 256 KiB slice from cache right after copying it; by the "
               "client's progress thread otherwise): %.2f GB/s per thread, reached at "
               "%.2f; a "
               "degraded one adds a decode (the client's, of each degraded stripe once k "
               "chunks are in; parity comes into the client's scratch): 1/(1/%.2f + "
               "1/%.2f) = "
               "%.2f GB/s, reached at %.2f (1 server down)\n",
               hb, healthy.median / hb, raw_get, dec, db, deg1 / db);
    }
    {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        double one = (double)x->fig.bytes / (x->refs.encode_crc.st.median * BENCH_GB);
        double prot = cl_median(x->fig.prot, x->fig.nsnap);
        unsigned thr = x->nmap * x->o.encoders;
        char thrtxt[64];
        if (x->o.local > 0) {
            snprintf(thrtxt, sizeof(thrtxt), "%u encoder thread%s", thr,
                     thr > 1 ? "s" : "");
        } else {
            snprintf(thrtxt, sizeof(thrtxt),
                     "%u servers' encoder threads (number unknown)", x->nmap);
        }
        cl_say(
            x,
            "\nthe protect tail (PROTECTED - STORED) is %.0f ms (median) for %.0f MiB; "
            "it "
            "holds the encoding not yet done when the last put was STORED, the chunk "
            "sends "
            "and the commits. The servers run %s in all on %ld cores here. Encode + CRC "
            "at the raw one-thread rate (%.2f GB/s) would take %.0f ms on one thread, "
            "%.0f ms on all %ld cores; the whole snapshot took %.0f ms to PROTECTED.\n",
            tail_s * 1e3, (double)x->fig.bytes / (1 << 20), thrtxt, cores,
            x->refs.encode_crc.st.median, one * 1e3,
            one / (double)(cores > 0 ? cores : 1) * 1e3, cores, prot * 1e3);
        if (x->fig.enc_ns > 0 && x->fig.enc_job_ns > 0 &&
            isfinite(x->refs.encode.st.median)) {
            double enc = (double)x->fig.enc_bytes / (double)x->fig.enc_ns;     /* GB/s */
            double job = (double)x->fig.enc_bytes / (double)x->fig.enc_job_ns; /* GB/s */
            double ratio = enc / x->refs.encode.st.median;
            cl_say(
                x,
                "server-side encoding, per encoder thread (the servers' own CPU-time "
                "counters over the snapshots, %.0f MiB encoded): ISA-L encode %.2f GB/s "
                "= "
                "%.2f x raw one-thread ISA-L (%.2f); whole encoder jobs (object CRC, "
                "encode, chunk CRCs) %.2f GB/s = %.2f x raw encode + CRC (%.2f). Target "
                "(encoding >= %.1f x raw per encoder thread): %s\n",
                (double)x->fig.enc_bytes / (1 << 20), enc, ratio,
                x->refs.encode.st.median, job, job / x->refs.encode_crc.st.median,
                x->refs.encode_crc.st.median, CL_TARGET_ENCODE,
                ratio >= CL_TARGET_ENCODE ? "met" : "NOT met");
            bench_rec_t *r = bench_report_add(rep);
            if (r != NULL) {
                cl_rec_common(x, r, "server_encode");
                bench_rec_kv(r, KU("size", x->fig.enc_bytes), KF("gbps", enc),
                             KF("raw_gbps", x->refs.encode.st.median), KF("ratio", ratio),
                             KF("job_gbps", job),
                             KF("job_raw_gbps", x->refs.encode_crc.st.median),
                             KF("job_ratio", job / x->refs.encode_crc.st.median),
                             KF("target", CL_TARGET_ENCODE));
            }
        } else {
            cl_say(
                x,
                "server-side encoding: not measured (no encoder counters: a server did "
                "not answer, or was restarted during every snapshot)\n");
        }
    }
    if (x->fig.used_bytes > 0) {
        cl_say(
            x,
            "arena bytes in use with %u snapshot%s stored: %.0f MiB = %.3f x the object "
            "bytes (RS(%u,%u): %.3f)\n",
            x->o.versions, x->o.versions > 1 ? "s" : "",
            (double)x->fig.used_bytes / (1 << 20),
            (double)x->fig.used_bytes / ((double)x->fig.bytes * x->o.versions), x->o.k,
            x->o.m, (double)(x->o.k + x->o.m) / x->o.k);
    }
}

/* GB/s statistics of a list of seconds for `bytes` (the list is kept). */
void cl_stats_of(uint64_t bytes, const double *secs, unsigned n, bench_stats_t *st)
{
    double tmp[CL_MAX_SNAPS];
    memset(st, 0, sizeof(*st));
    st->median = st->min = st->max = NAN;
    if (n == 0) {
        return;
    }
    n = n > CL_MAX_SNAPS ? CL_MAX_SNAPS : n;
    memcpy(tmp, secs, n * sizeof(*tmp));
    bench_stats(bytes, tmp, n, st);
}

/* min / median / max of plain values (NAN when there are none). */
void cl_vstats(const double *v, unsigned n, double *min_p, double *med_p, double *max_p)
{
    double tmp[CL_MAX_SNAPS];
    *min_p = *med_p = *max_p = NAN;
    if (n == 0) {
        return;
    }
    n = n > CL_MAX_SNAPS ? CL_MAX_SNAPS : n;
    memcpy(tmp, v, n * sizeof(*tmp));
    qsort(tmp, n, sizeof(*tmp), bench_cmp_double);
    *min_p = tmp[0];
    *max_p = tmp[n - 1];
    *med_p = n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

/* ckstore's figures the peers are compared with: one client's snapshot to
 * STORED (its buffers are free, the bytes are in the servers' memory, as
 * after a SET) and its restore. NAN when not measured. */
double cl_ck_median(const cl_ctx_t *x, int restore)
{
    bench_stats_t st;
    if (restore) {
        cl_stats_of(x->fig.bytes, x->fig.restore[0], x->fig.nrestore[0], &st);
    } else {
        cl_stats_of(x->fig.bytes, x->fig.stored, x->fig.nsnap, &st);
    }
    return st.median;
}

/* The record of a per-snapshot figure in ms, up to its min / median / max. */
static bench_rec_t *cl_rec_ms(const cl_ctx_t *x, bench_report_t *rep, const char *op,
                              const char *bytes_key, uint64_t bytes, double mn, double md,
                              double mx)
{
    bench_rec_t *r = bench_report_add(rep);
    if (r != NULL) {
        cl_rec_common(x, r, op);
        bench_rec_u64(r, "clients", x->o.clients);
        bench_rec_u64(r, bytes_key, bytes); /* a string literal */
        bench_rec_kv(r, KF("ms", md), KF("min_ms", mn), KF("max_ms", mx));
    }
    return r;
}

/* The figures per snapshot, min / median / max. */
void cl_print_figures(cl_ctx_t *x, bench_report_t *rep)
{
    double mn, md, mx;
    double mc = x->refs.memcpy_fig.st.median;
    double mc_ms = (double)x->fig.rank_bytes / (mc * BENCH_GB) * 1e3;
    double gb = (double)x->fig.bytes / BENCH_GB;
    bench_rec_t *r;
    char sz[32];

    cl_say(
        x,
        "\nper snapshot (%u snapshot%s: %u rep%s x %u version%s), min / median / max\n",
        x->fig.nsnap, x->fig.nsnap > 1 ? "s" : "", x->o.reps, x->o.reps > 1 ? "s" : "",
        x->o.versions, x->o.versions > 1 ? "s" : "");
    cl_say(x, "%-44s %9s %9s %9s  %s\n", "figure", "min", "median", "max", "note");
    double ms[CL_MAX_SNAPS];
    for (unsigned i = 0; i < x->fig.nsnap; i++) {
        ms[i] = x->fig.stall[i] * 1e3;
    }
    cl_vstats(ms, x->fig.nsnap, &mn, &md, &mx);
    cl_say(x, "%-44s %9.1f %9.1f %9.1f  one memcpy of a writer's %s: %.1f ms\n",
           "trainer stall (buffers reusable), ms", mn, md, mx,
           bench_size_str(x->fig.rank_bytes, sz, sizeof(sz)), mc_ms);
    if ((r = cl_rec_ms(x, rep, "trainer_stall", "rank_bytes", x->fig.rank_bytes, mn, md,
                       mx)) != NULL) {
        bench_rec_kv(r, KF("memcpy_ms", mc_ms), KF("ratio", md / mc_ms),
                     KU("reps", x->fig.nsnap));
    }
    for (unsigned i = 0; i < x->fig.nsnap; i++) {
        ms[i] = x->fig.tail[i] * 1e3;
    }
    cl_vstats(ms, x->fig.nsnap, &mn, &md, &mx);
    cl_say(x,
           "%-44s %9.1f %9.1f %9.1f  last STORED -> last cks_version_finish() returned\n",
           "version commit latency, ms", mn, md, mx);
    if ((r = cl_rec_ms(x, rep, "version_commit", "bytes", x->fig.bytes, mn, md, mx)) !=
        NULL) {
        bench_rec_u64(r, "reps", x->fig.nsnap);
    }
    /* CPU per GB: snapshot, then restore at each level down; servers, clients */
    for (unsigned i = 0; i < 2 * (x->fig.ndown + 2); i++) {
        int cli = i % 2, snap = i < 2;
        unsigned d = snap ? 0 : i / 2 - 1;
        const double *v =
            snap ? (cli ? x->fig.cli_cpu_snap : x->fig.srv_cpu_snap)
                 : (cli ? x->fig.cli_cpu_restore[d] : x->fig.srv_cpu_restore[d]);
        unsigned n = snap ? x->fig.ncpu_snap : x->fig.ncpu_restore[d];
        char what[80], down[24] = "";
        if (n == 0) {
            continue;
        }
        if (d > 0) {
            snprintf(down, sizeof(down), " %u down", d);
        }
        snprintf(what, sizeof(what), "%s CPU s per GB, %s%s", cli ? "client" : "server",
                 snap ? "snapshot" : "restore", down);
        cl_vstats(v, n, &mn, &md, &mx);
        cl_say(x, "%-44s %9.3f %9.3f %9.3f  %s\n", what, mn, md, mx,
               i == 0 ? "utime + stime of every server process, /proc/PID/stat" : "");
        r = bench_report_add(rep);
        cl_rec_common(x, r, cli ? "client_cpu_per_gb" : "server_cpu_per_gb");
        bench_rec_kv(r, KS("phase", snap ? "snapshot" : "restore"), KU("servers_down", d),
                     KU("servers", x->nmap),
                     KU("clients", snap ? x->o.clients : x->o.readers),
                     KF("s_per_gb", md), KF("min_s_per_gb", mn), KF("max_s_per_gb", mx),
                     KU("reps", n));
    }
    if (x->fig.used_bytes > 0 || x->fig.rss > 0) {
        double logical = gb * x->o.versions * BENCH_GB;
        cl_say(x,
               "%-44s %9s %9.3f %9s  arena bytes in use / object bytes (%u version%s "
               "stored; "
               "RS(%u,%u): %.3f)\n",
               "memory per byte stored: arena used", "",
               (double)x->fig.used_bytes / logical, "", x->o.versions,
               x->o.versions > 1 ? "s" : "", x->o.k, x->o.m,
               (double)(x->o.k + x->o.m) / x->o.k);
        if (x->fig.rss > 0) {
            cl_say(x,
                   "%-44s %9s %9.3f %9s  all servers' VmRSS (the pre-faulted arenas: %u "
                   "x %s)\n",
                   "memory per byte stored: server RSS", "", (double)x->fig.rss / logical,
                   "", x->nsrv, bench_size_str(x->o.arena, sz, sizeof(sz)));
            cl_say(x,
                   "%-44s %9s %9.3f %9s  RssAnon: heap, LMDB maps, UCX (not the arena)\n",
                   "memory per byte stored: server RSS non-arena", "",
                   (double)x->fig.rss_anon / logical, "");
        }
        if ((r = bench_report_add(rep)) != NULL) {
            cl_rec_common(x, r, "memory_per_gb");
            bench_rec_kv(r, KU("servers", x->nmap), KU("versions", x->o.versions),
                         KU("logical_bytes", (uint64_t)logical),
                         KU("arena_used_bytes", x->fig.used_bytes),
                         KF("arena_used_per_byte", (double)x->fig.used_bytes / logical),
                         KU("server_rss_bytes", x->fig.rss),
                         KF("server_rss_per_byte",
                            x->fig.rss > 0 ? (double)x->fig.rss / logical : NAN),
                         KU("server_rss_anon_bytes", x->fig.rss_anon),
                         KU("server_rss_shmem_bytes", x->fig.rss_shmem),
                         KU("arena_bytes_per_server", x->o.arena));
        }
    }
}

/* median of v[first .. n-1] (NAN when empty) */
double cl_cw_median_from(const double *v, unsigned first, unsigned n)
{
    return first < n ? cl_median(v + first, n - first) : NAN;
}

double cl_cw_warm_snap(const cl_ctx_t *x, const double *v)
{
    unsigned n = x->cw.nsnap, per = x->o.versions, k = 0;
    double w[CL_MAX_SNAPS];
    if (per < 2) {
        return cl_cw_median_from(v, 1, n);
    }
    for (unsigned i = 1; i < n && i < CL_MAX_SNAPS; i++) {
        if (i % per != 0) {
            w[k++] = v[i];
        }
    }
    return k > 0 ? cl_median(w, k) : NAN;
}

double cl_cw_gbps(const cl_ctx_t *x, double secs)
{
    return isfinite(secs) && secs > 0 ? (double)x->fig.bytes / secs / BENCH_GB : NAN;
}

/* One row: cold and warm (GB/s, or ms when `ms`), their ratio, and the cold
 * figure against a reference of the same run with its target. For GB/s the
 * ratios are figure / reference (higher is better); for ms, cold / reference
 * (lower is better). */
static void cl_cw_row(cl_ctx_t *x, bench_report_t *rep, const char *phase, int ms,
                      double cold, double warm, double cw_target, const char *ref_what,
                      double ref, double ref_target)
{
    double cw = cold / warm;
    double rr = cold / ref;
    bench_rec_t *r;

    cl_say(x, "%-46s %8.2f %8.2f %6.2f", phase, cold, warm, cw);
    if (isfinite(cw_target) && isfinite(cw)) {
        cl_say(x, " %s", (ms ? cw <= cw_target : cw >= cw_target) ? "met   " : "MISSED");
    } else {
        cl_say(x, " %6s", "");
    }
    cl_say(x, "  %-32s %8.2f %6.2f", ref_what, ref, rr);
    if (isfinite(ref_target) && isfinite(rr)) {
        cl_say(x, " %s %.1f %s", ms ? "<=" : ">=", ref_target,
               (ms ? rr <= ref_target : rr >= ref_target) ? "met" : "MISSED");
    }
    cl_say(x, "\n");
    if ((r = bench_report_add(rep)) == NULL) {
        return;
    }
    cl_rec_common(x, r, "cold_warm");
    bench_rec_kv(r, KS("phase", phase), KS("unit", ms ? "ms" : "GB/s"), KF("cold", cold),
                 KF("warm", warm), KF("cold_warm_ratio", cw));
    if (isfinite(cw_target)) {
        bench_rec_f64(r, "cold_warm_target", cw_target);
    }
    bench_rec_kv(r, KS("ref", ref_what), KF("ref_value", ref), KF("ref_ratio", rr));
    if (isfinite(ref_target)) {
        bench_rec_f64(r, "ref_target", ref_target);
    }
    bench_rec_kv(r, KU("bytes", x->fig.bytes), KU("servers", x->nmap));
}

void cl_cw_print(cl_ctx_t *x, bench_report_t *rep)
{
    char put_what[40], get_what[40], ref[64];
    double raw_put = cl_raw_best(x, BENCH_DIR_PUT, put_what, sizeof(put_what));
    double raw_get = cl_raw_best(x, BENCH_DIR_GET, get_what, sizeof(get_what));
    double memcpy_gbps = x->refs.memcpy_fig.st.median;
    double bound = memcpy_gbps * x->o.k / (x->o.k + x->o.m);
    double memcpy_ms = (double)x->fig.rank_bytes / (memcpy_gbps * BENCH_GB) * 1e3;
    double fresh =
        x->cw.nfresh > 0 ? cl_cw_median_from(x->cw.fresh_s, 0, x->cw.nfresh) : NAN;

    if (x->cw.nsnap == 0) {
        return;
    }
    cl_say(x,
           "\ncold and warm, per phase (cold: the first after the servers start, or a "
           "fresh %s with fresh buffers; warm: the median of the %s snapshots, and of "
           "the writer's restores made again at once; cold/warm and cold/reference are "
           "ratios of the same run)\n",
           x->o.hosts ? "process" : "client",
           x->o.versions >= 2 ? "repetitions' second and later" : "later");
    if (x->o.versions < 2 && x->fig.ndown > 0) {
        cl_say(x, "(the later snapshots come right after two servers restarted; with "
                  "--versions 2 the warm ones follow another at once)\n");
    }
    cl_say(x, "%-46s %8s %8s %6s %6s  %-32s %8s %6s %s\n", "phase", "cold", "warm", "c/w",
           "", "reference (same run)", "ref", "c/ref", "target");
    snprintf(ref, sizeof(ref), "raw UCX put (%s)", isfinite(raw_put) ? put_what : "-");
    cl_cw_row(x, rep, "snapshot STORED, GB/s", 0, cl_cw_gbps(x, x->cw.stored[0]),
              cl_cw_gbps(x, cl_cw_warm_snap(x, x->cw.stored)), 0.8, ref,
              raw_put, 0.8);
    cl_cw_row(x, rep, "snapshot PROTECTED, GB/s", 0, cl_cw_gbps(x, x->cw.prot[0]),
              cl_cw_gbps(x, cl_cw_warm_snap(x, x->cw.prot)), 0.8,
              "memcpy x k/(k+m)", bound, 0.8);
    double warm_stall_ms = cl_cw_warm_snap(x, x->cw.stall) * 1e3;
    cl_cw_row(x, rep, "trainer stall, ms", 1, x->cw.stall[0] * 1e3, warm_stall_ms, NAN,
              "one memcpy of a writer's bytes", memcpy_ms, 1.5);
    if (x->cw.nsnap > 1) {
        /* the warm stall against the same reference */
        cl_say(x, "%-46s %8s %8.2f %6s %6s  %-32s %8.2f %6.2f <= 1.5 %s\n",
               "trainer stall, warm, ms", "", warm_stall_ms, "", "",
               "one memcpy of a writer's bytes", memcpy_ms, warm_stall_ms / memcpy_ms,
               warm_stall_ms / memcpy_ms <= 1.5 ? "met" : "MISSED");
    }
    snprintf(ref, sizeof(ref), "raw UCX get (%s)", isfinite(raw_get) ? get_what : "-");
    if (x->cw.nrestore > 0) {
        /* warm: the writer's restores made again at once; without them (a
         * run of one repetition before 2026-11-28 had none) the later first
         * ones */
        double warm = x->cw.nagain > 0
                          ? cl_cw_median_from(x->cw.again_s, 0, x->cw.nagain)
                          : cl_cw_median_from(x->cw.restore, 1, x->cw.nrestore);
        cl_cw_row(x, rep, "restore, first by the writer, GB/s", 0,
                  cl_cw_gbps(x, x->cw.restore[0]), cl_cw_gbps(x, warm), 0.8, ref, raw_get,
                  0.8);
        cl_cw_row(x, rep,
                  x->o.hosts ? "restore by a fresh process (replacement), GB/s"
                             : "restore by a fresh client (replacement), GB/s",
                  0, cl_cw_gbps(x, fresh), cl_cw_gbps(x, warm), 0.8, ref, raw_get, 0.8);
    }
    if (x->cw.nfresh_alloc > 0 && x->cw.ntouch > 0) {
        double a = cl_cw_median_from(x->cw.fresh_alloc_ms_gib, 0, x->cw.nfresh_alloc);
        double t = cl_cw_median_from(x->cw.touch_ms_gib, 0, x->cw.ntouch);
        snprintf(ref, sizeof(ref), "first touch, %s pages",
                 bench_pages_name((bench_pages_t)x->cw.touch_pages));
        cl_say(x, "%-46s %8.0f %8s %6s %6s  %-32s %8.0f %6.2f <= 1.0 %s\n",
               "cks_mem_alloc() of a fresh client, ms/GiB", a, "", "", "", ref, t, a / t,
               a / t <= 1.0 ? "met" : "MISSED");
        double back = x->cw.nback > 0 ? cl_cw_median_from(x->cw.back_ms_gib, 0, x->cw.nback)
                                      : NAN;
        if (isfinite(back)) {
            cl_say(x, "  (both on free memory the host backed first: its first touch took "
                      "%.0f ms/GiB in THP 2 MiB pages, by the bench, before them)\n",
                   back);
        }
        bench_rec_t *r = bench_report_add(rep);
        if (r != NULL) {
            cl_rec_common(x, r, "cold_warm");
            bench_rec_kv(r, KS("phase", "cks_mem_alloc() of a fresh client, ms/GiB"),
                         KS("unit", "ms/GiB"), KF("cold", a), KS("ref", ref),
                         KF("ref_value", t), KF("ref_ratio", a / t),
                         KF("ref_target", 1.0), KU("servers", x->nmap),
                         KU("alloc_bytes", x->alloc_bytes),
                         KU("alloc_huge_bytes", x->alloc_huge_bytes),
                         KF("backing_ms_gib", back));
        }
        /* what a replacement rank waits for: its buffers, then its restore
         * (the medians of both, for the restore's bytes) */
        double whole_s = fresh + a / 1e3 * (double)x->fig.bytes / (double)(1u << 30);
        if (isfinite(whole_s) && whole_s > 0) {
            cl_say(x, "%-46s %8.2f %8s %6s %6s  (cks_mem_alloc() %.0f ms/GiB, restore %.2f GB/s)\n",
                   "replacement rank: its buffers + restore, GB/s", cl_cw_gbps(x, whole_s), "",
                   "", "", a, cl_cw_gbps(x, fresh));
            r = bench_report_add(rep);
            if (r != NULL) {
                cl_rec_common(x, r, "cold_warm");
                bench_rec_kv(r, KS("phase", "replacement rank: its buffers + restore, GB/s"),
                             KS("unit", "GB/s"), KF("cold", cl_cw_gbps(x, whole_s)));
            }
        }
    }
}
