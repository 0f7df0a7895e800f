/*
 * DESIGN: the references of the same run: raw ISA-L encode (with and without the
 * server encoder's CRC-64s) and decode of the same RS(k, m) and chunk size
 * (coding/cks_coding.h), CRC-64, a one-thread memcpy, and raw UCX between
 * this process and a forked sink (embedded.c, raw_ucx.c), each measured
 * before and after the cluster runs; their table and records.
 */
#include "cluster_int.h"
#include "cks_coding.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

static void cl_fig_add(cl_fig_t *f, uint64_t bytes, const double *secs, unsigned n)
{
    double tmp[CL_FIG_SAMPLES];
    bench_stats_t pass;
    unsigned i;
    if (n == 0) {
        return;
    }
    memcpy(tmp, secs, n * sizeof(*secs));
    bench_stats(bytes, tmp, n, &pass);
    if (f->npass < 2) {
        f->pass_med[f->npass++] = pass.median;
    }
    for (i = 0; i < n && f->n < CL_FIG_SAMPLES; i++) {
        f->secs[f->n++] = secs[i];
    }
    memcpy(tmp, f->secs, f->n * sizeof(*tmp));
    bench_stats(bytes, tmp, f->n, &f->st);
    f->ok = 1;
}

static unsigned cl_ref_reps(cl_ctx_t *x)
{
    return x->o.reps > 5 ? x->o.reps : 5;
}

/* Encode every stripe; with crc, the server encoder's per-object work
 * (server/encoder.c): CRC-64 of the object, then per stripe encode and
 * CRC-64 of each of the k + m chunks. */
static void cl_encode(cl_ctx_t *x, cks_ec_h ec, uint8_t *data, uint8_t *parity,
                      uint64_t stripes, uint64_t size, int crc)
{
    const unsigned k = x->o.k, m = x->o.m;
    const uint64_t chunk = x->o.chunk;
    volatile uint64_t sink = crc ? cks_crc64(0, data, size) : 0;
    for (uint64_t s = 0; s < stripes; s++) {
        const uint8_t *d[CKS_EC_MAX_K];
        uint8_t *p[CKS_EC_MAX_M];
        for (unsigned i = 0; i < k; i++) {
            d[i] = data + (s * k + i) * chunk;
        }
        for (unsigned i = 0; i < m; i++) {
            p[i] = parity + (s * m + i) * chunk;
        }
        cks_ec_encode(ec, chunk, d, p);
        for (unsigned i = 0; crc && i < k + m; i++) {
            sink ^= cks_crc64(0, i < k ? d[i] : p[i - k], chunk);
        }
    }
    (void)sink;
}

int cl_refs_isal(cl_ctx_t *x)
{
    const unsigned k = x->o.k, m = x->o.m;
    const uint64_t chunk = x->o.chunk;
    const uint64_t stripes = cks_ec_stripe_count(x->o.size, k, chunk);
    const uint64_t dbytes = stripes * k * chunk, pbytes = stripes * m * chunk;
    unsigned reps = cl_ref_reps(x);
    double secs[CL_MAX_REPS + 8];
    bench_buf_t data, parity, scratch, copy;
    char err[BENCH_ERR_LEN] = "";
    cks_ec_h ec;

    if (cks_ec_create(k, m, &ec) != CKS_OK) {
        fprintf(stderr, "ckstore-bench: cks_ec_create(%u, %u) failed\n", k, m);
        return -1;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, dbytes, &data, err, sizeof(err)) != 0) {
        goto err_ec;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, pbytes, &parity, err, sizeof(err)) != 0) {
        goto err_data;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, (size_t)CL_MAX_DOWN * chunk, &scratch, err,
                        sizeof(err)) != 0) {
        goto err_parity;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, dbytes, &copy, err, sizeof(err)) != 0) {
        goto err_scratch;
    }
    cks_pattern_fill(data.ptr, dbytes, 99);
    x->refs.isal_bytes = dbytes;

    /* encode (input bytes per second, one thread, data from DRAM), alone and
     * with the CRCs; the first round is the warm-up */
    for (int crc = 0; crc <= 1; crc++) {
        for (unsigned r = 0; r <= reps; r++) {
            double t0 = bench_now();
            cl_encode(x, ec, data.ptr, parity.ptr, stripes, dbytes, crc);
            if (r > 0) {
                secs[r - 1] = bench_now() - t0;
            }
        }
        cl_fig_add(crc ? &x->refs.encode_crc : &x->refs.encode, dbytes, secs, reps);
    }

    /* decode with e erasures (data chunks 0 .. e-1 lost, rebuilt into
     * scratch): object bytes rebuilt per second; the check of the first
     * stripe's rebuilt chunks is outside the timing */
    for (unsigned e = 1; e <= CL_MAX_DOWN && e <= m; e++) {
        for (unsigned r = 0; r <= reps; r++) {
            double t0 = bench_now();
            for (uint64_t s = 0; s < stripes; s++) {
                uint8_t *c[CKS_EC_MAX_K + CKS_EC_MAX_M];
                uint8_t present[CKS_EC_MAX_K + CKS_EC_MAX_M];
                for (unsigned i = 0; i < k + m; i++) {
                    c[i] = i < k ? (uint8_t *)data.ptr + (s * k + i) * chunk
                                 : (uint8_t *)parity.ptr + (s * m + i - k) * chunk;
                    present[i] = 1;
                }
                for (unsigned i = 0; i < e; i++) {
                    c[i] = (uint8_t *)scratch.ptr + i * chunk;
                    present[i] = 0;
                }
                if (cks_ec_decode(ec, chunk, c, present) != CKS_OK) {
                    fprintf(stderr, "ckstore-bench: cks_ec_decode failed\n");
                    goto err_copy;
                }
            }
            if (r > 0) {
                secs[r - 1] = bench_now() - t0;
            }
            if (r == 0) {
                uint64_t s = stripes - 1; /* the last stripe is the one left in scratch */
                for (unsigned i = 0; i < e; i++) {
                    if (memcmp((uint8_t *)scratch.ptr + i * chunk,
                               (uint8_t *)data.ptr + (s * k + i) * chunk, chunk) != 0) {
                        fprintf(stderr,
                                "ckstore-bench: ISA-L decode rebuilt other bytes\n");
                        goto err_copy;
                    }
                }
            }
        }
        cl_fig_add(&x->refs.decode[e], dbytes, secs, reps);
    }

    /* CRC-64 (what a client checks of every whole chunk it reads) */
    for (unsigned r = 0; r <= reps; r++) {
        double t0 = bench_now();
        volatile uint64_t c = cks_crc64(0, data.ptr, dbytes);
        (void)c;
        if (r > 0) {
            secs[r - 1] = bench_now() - t0;
        }
    }
    cl_fig_add(&x->refs.crc, dbytes, secs, reps);

    /* memcpy of the object size between the same kind of buffers */
    bench_memcpy_once(copy.ptr, data.ptr, x->o.size);
    for (unsigned r = 0; r < reps; r++) {
        secs[r] = bench_memcpy_once(copy.ptr, data.ptr, x->o.size);
    }
    cl_fig_add(&x->refs.memcpy_fig, x->o.size, secs, reps);

    bench_buf_free(&copy);
    bench_buf_free(&scratch);
    bench_buf_free(&parity);
    bench_buf_free(&data);
    cks_ec_destroy(ec);
    return 0;

err_copy:
    bench_buf_free(&copy);
err_scratch:
    bench_buf_free(&scratch);
err_parity:
    bench_buf_free(&parity);
err_data:
    bench_buf_free(&data);
err_ec:
    cks_ec_destroy(ec);
    fprintf(stderr, "ckstore-bench: ISA-L reference: %s\n", err);
    return -1;
}

/* Raw UCX between this process and the forked sink, at the object size:
 * the put and get directions, methods am, tag and rma, for each setup asked. */
int cl_refs_raw(cl_ctx_t *x)
{
    const unsigned methods[] = {BENCH_METHOD_AM, BENCH_METHOD_TAG, BENCH_METHOD_RMA};
    double secs[BENCH_MAX_REPS];
    char err[BENCH_ERR_LEN];
    unsigned reps = cl_ref_reps(x);

    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        bench_raw_t *raw;
        if (!(x->o.raw_setups & (1u << s))) {
            continue;
        }
        if (bench_child_raw_open(&x->child, s, x->o.size, 200e-6, x->o.timeout_s, &raw,
                                 x->refs.raw_desc[s], err, sizeof(err)) != 0) {
            fprintf(stderr, "ckstore-bench: %s\n", err);
            return -1;
        }
        for (unsigned mi = 0; mi < sizeof(methods) / sizeof(methods[0]); mi++) {
            unsigned m = methods[mi], n;
            for (unsigned d = 0; d < BENCH_NDIRS; d++) {
                double cpu0 = bench_proc_cpu_s(getpid()) + bench_proc_cpu_s(x->child.pid);
                if (bench_raw_sample(raw, m, d, x->o.size, 1, reps, CL_RAW_BUDGET_S,
                                     x->o.timeout_s, secs, &n) != 0) {
                    bench_child_raw_close(&x->child, raw, x->o.timeout_s);
                    return -1;
                }
                cl_fig_add(&x->refs.raw[s][m][d], x->o.size, secs, n);
                x->refs.raw_cpu_s[s][m][d] +=
                    bench_proc_cpu_s(getpid()) + bench_proc_cpu_s(x->child.pid) - cpu0;
                x->refs.raw_cpu_bytes[s][m][d] += (uint64_t)(n + 1) * x->o.size;
            }
        }
        snprintf(x->refs.raw_tls[s], sizeof(x->refs.raw_tls[s]), "%s",
                 bench_raw_transports(raw));
        bench_child_raw_close(&x->child, raw, x->o.timeout_s);
    }
    return 0;
}

/* Best raw figure of a direction; NAN when none. */
double cl_raw_best(const cl_ctx_t *x, unsigned d, char *what, size_t len)
{
    double best = NAN;
    snprintf(what, len, "-");
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        for (unsigned m = 0; m < BENCH_NMETHODS; m++) {
            const cl_fig_t *f = &x->refs.raw[s][m][d];
            if (f->ok && !(f->st.median <= best)) {
                best = f->st.median;
                snprintf(what, len, "%s/%s", bench_setup_name(s), bench_method_name(m));
            }
        }
    }
    return best;
}

static void cl_say_ref(cl_ctx_t *x, const char *what, const cl_fig_t *f)
{
    cl_say(x, "  %-58s %6.2f %7.2f %6.2f\n", what, f->st.median, f->pass_med[0],
           f->npass > 1 ? f->pass_med[1] : NAN);
}

/* The record of a one-thread ISA-L figure (erasures: 0 for an encode). */
static void cl_rec_isal(cl_ctx_t *x, bench_report_t *rep, const char *op,
                        unsigned erasures, const cl_fig_t *f)
{
    bench_rec_t *r = bench_report_add(rep);
    if (r != NULL) {
        cl_rec_common(x, r, op);
        if (erasures > 0) {
            bench_rec_u64(r, "erasures", erasures);
        }
        bench_rec_kv(r, KU("size", x->refs.isal_bytes), KU("threads", 1));
        cl_rec_ref(r, f);
    }
}

void cl_print_refs(cl_ctx_t *x, bench_report_t *rep)
{
    char sz[32], csz[32];
    bench_rec_t *r;

    cl_say(
        x,
        "\nreferences, this run, one thread, GB/s = 10^9 B/s: median of the %u samples "
        "taken "
        "before and after the cluster runs, and of each pass\n",
        x->refs.encode.n);
    bench_size_str(x->o.chunk, csz, sizeof(csz));
    bench_size_str(x->o.size, sz, sizeof(sz));
    cl_say(x, "  %-58s %6s %7s %6s\n", "", "GB/s", "before", "after");
    cl_say_ref(x, "ISA-L encode RS(k,m), data bytes/s (isal_encode_raw)",
               &x->refs.encode);
    cl_say_ref(x, "  + CRC-64 of object and every chunk, as a server encoder",
               &x->refs.encode_crc);
    for (unsigned e = 1; e <= CL_MAX_DOWN; e++) {
        if (x->refs.decode[e].ok) {
            char what[80];
            snprintf(what, sizeof(what),
                     "ISA-L decode, %u data chunk%s lost, object bytes/s", e,
                     e > 1 ? "s" : "");
            cl_say_ref(x, what, &x->refs.decode[e]);
        }
    }
    cl_say_ref(x, "CRC-64 (crc64_ecma_refl)", &x->refs.crc);
    cl_say_ref(x, "memcpy of one object (anonymous THP buffers)", &x->refs.memcpy_fig);
    cl_say(x, "  (RS(%u,%u), %s chunks, %s of object data per pass, from DRAM)\n", x->o.k,
           x->o.m, csz, sz);

    cl_rec_isal(x, rep, "isal_encode_raw", 0, &x->refs.encode);
    cl_rec_isal(x, rep, "isal_encode_crc_raw", 0, &x->refs.encode_crc);
    for (unsigned e = 1; e <= CL_MAX_DOWN; e++) {
        if (x->refs.decode[e].ok) {
            cl_rec_isal(x, rep, "isal_decode_raw", e, &x->refs.decode[e]);
        }
    }
    if ((r = bench_report_add(rep)) != NULL) {
        bench_rec_kv(r, KS("op", "crc64_raw"), KU("size", x->refs.isal_bytes),
                     KU("threads", 1));
        cl_rec_ref(r, &x->refs.crc);
    }
    if ((r = bench_report_add(rep)) != NULL) {
        bench_rec_kv(r, KS("op", "memcpy"), KU("size", x->o.size));
        cl_rec_ref(r, &x->refs.memcpy_fig);
    }

    if (x->o.no_raw) {
        cl_say(x, "  raw UCX: not measured (--no-raw)\n");
        return;
    }
    cl_say(x,
           "\nraw UCX between this process and a forked sink, %s, GB/s (median of the "
           "samples of "
           "both passes; put and get before / after)\n",
           sz);
    cl_say(x, "  %-16s %6s %6s  %13s %13s   %s\n", "setup/method", "put", "get",
           "put b/a", "get b/a", "buffers (ours | sink's)");
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        for (unsigned m = 0; m < BENCH_NMETHODS; m++) {
            const cl_fig_t *fp = &x->refs.raw[s][m][BENCH_DIR_PUT];
            const cl_fig_t *fg = &x->refs.raw[s][m][BENCH_DIR_GET];
            char name[32];
            if (!fp->ok && !fg->ok) {
                continue;
            }
            snprintf(name, sizeof(name), "%s/%s", bench_setup_name(s),
                     bench_method_name(m));
            cl_say(x, "  %-16s %6.2f %6.2f  %6.2f/%-6.2f %6.2f/%-6.2f   %s | %s\n", name,
                   fp->st.median, fg->st.median, fp->pass_med[0],
                   fp->npass > 1 ? fp->pass_med[1] : NAN, fg->pass_med[0],
                   fg->npass > 1 ? fg->pass_med[1] : NAN, x->refs.raw_desc[s][0],
                   x->refs.raw_desc[s][1]);
            for (unsigned d = 0; d < BENCH_NDIRS; d++) {
                const cl_fig_t *f = &x->refs.raw[s][m][d];
                if (!f->ok || (r = bench_report_add(rep)) == NULL) {
                    continue;
                }
                bench_rec_kv(r, KS("op", "raw"), KS("dir", bench_dir_name(d)),
                             KS("setup", bench_setup_name(s)),
                             KS("method", bench_method_name(m)), KU("size", x->o.size));
                cl_rec_ref(r, f);
                bench_rec_kv(r, KS("buffers", x->refs.raw_desc[s][0]),
                             KS("peer_buffers", x->refs.raw_desc[s][1]),
                             KS("transports", x->refs.raw_tls[s]));
            }
        }
    }
}

/* The best raw UCX figure of each direction, as one record each (op raw_ucx). */
void cl_rec_raw_best(cl_ctx_t *x, bench_report_t *rep)
{
    for (unsigned d = 0; d < BENCH_NDIRS; d++) {
        char what[40];
        double best = cl_raw_best(x, d, what, sizeof(what));
        bench_rec_t *r;
        if (!isfinite(best) || (r = bench_report_add(rep)) == NULL) {
            continue;
        }
        bench_rec_kv(r, KS("op", "raw_ucx"), KS("dir", bench_dir_name(d)),
                     KU("size", x->o.size), KF("gbps", best), KS("best_of", what));
    }
}

/* CPU seconds per GB of the best raw loop of a direction (NAN: none). */
double cl_raw_best_cpu(const cl_ctx_t *x, unsigned d)
{
    double best = NAN, cpu = NAN;
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        for (unsigned m = 0; m < BENCH_NMETHODS; m++) {
            const cl_fig_t *f = &x->refs.raw[s][m][d];
            if (f->ok && !(f->st.median <= best) && x->refs.raw_cpu_bytes[s][m][d] > 0) {
                best = f->st.median;
                cpu = x->refs.raw_cpu_s[s][m][d] /
                      ((double)x->refs.raw_cpu_bytes[s][m][d] / BENCH_GB);
            }
        }
    }
    return cpu;
}
