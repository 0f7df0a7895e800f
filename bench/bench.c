/*
 * DESIGN: ckstore-bench's main: options, the measurement plan and the
 * printed tables. One client against one server on this machine, object
 * sizes 1 MiB .. 1 GiB; for every size, ckstore's put and get (public API,
 * blocking calls) and, in the same run, the references: a one-thread memcpy
 * and the best plain UCX loop between the same two processes over several
 * buffer setups and methods (raw_ucx.c). Every figure is the median of
 * --reps timed runs after --warmup untimed ones; GB/s is 10^9 bytes/s.
 *
 * Thread: the main thread does everything in the parent (libckstore runs
 * its own progress thread). The server and the raw sink are in a child
 * process (embedded.c) unless --server names a running server.
 * Never: time allocation, page faults or the data check; use UCX in the
 * parent before the child is forked.
 *
 * To grow (later issues): --local N adds servers to the embedded cluster
 * (bench_child_t per server), --clients C forks client processes around
 * bench_ck_measure(), peers (memcached, Redis) are one more measure function
 * each that fills bench_figs_t; every figure goes out through the records of
 * report.c, so the JSON writer stays the one place that knows the format.
 */
#include "bench.h"
#include "ckstore.h"
#include "cluster.h"
#include "proc.h"

#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BENCH_TARGET_RATIO 0.8
/* A raw UCX figure stops taking samples after this many seconds (at least
 * one is taken): some paths (UCX's software-emulated RMA) crawl when the
 * machine is busy, and a default run must stay within a few minutes. */
#define BENCH_RAW_BUDGET_S 2.0
#define BENCH_TARGET_MIN_SIZE (64ull << 20)

typedef struct {
    uint64_t sizes[BENCH_MAX_SIZES];
    unsigned nsizes;
    uint64_t max_size; /* 0: no limit */
    unsigned reps, warmup;
    const char *json;
    int quiet, verbose, no_raw;
    unsigned copy_threads; /* the embedded server's (0: its default) */
    const char *server; /* "ADDR:PORT" of a running server, or NULL */
    unsigned setups, methods;
    double spin_s; /* raw loop: busy-poll before sleeping; < 0: always */
    bench_mem_kind_t client_mem;
    double timeout_s;
    char command[1024];
    char skipped[128]; /* sizes dropped for want of memory */
} bench_opts_t;

typedef struct {
    int ok;
    bench_stats_t st;
} bench_fig_t;

typedef struct {
    bench_fig_t memcpy_fig[BENCH_MAX_SIZES];
    bench_fig_t raw[BENCH_NSETUPS][BENCH_NMETHODS][BENCH_NDIRS][BENCH_MAX_SIZES];
    char raw_desc[BENCH_NSETUPS][2][64]; /* parent's, child's buffer */
    char raw_tls[BENCH_NSETUPS][256];
    bench_fig_t ck[BENCH_NDIRS][BENCH_MAX_SIZES];
    double seal_ms[BENCH_MAX_SIZES];
    char client_desc[64], arena_desc[64], server_desc[128];
} bench_figs_t;

/* One run's state: made in main, passed to every function that needs it. */
typedef struct {
    bench_opts_t o;
    bench_figs_t f;
    uint64_t version; /* the next version bench_ck_measure writes */
} bench_ctx_t;

static void say(const bench_ctx_t *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void say(const bench_ctx_t *x, const char *fmt, ...)
{
    va_list ap;
    if (x->o.quiet) {
        return;
    }
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* ---- options ------------------------------------------------------------------- */

static void bench_usage(FILE *f)
{
    fprintf(f,
            "Usage: ckstore-bench [OPTIONS]\n"
            "Measure ckstore put and get between one client and one server on this\n"
            "machine, against a one-thread memcpy and the best plain UCX loop between the\n"
            "same two processes, measured in the same run (see docs/BENCHMARKS.md).\n"
            "\n"
            "  -s, --sizes LIST       object sizes, e.g. 1M,64M,1G (default\n"
            "                         1M,4M,16M,64M,256M,1G)\n"
            "  -m, --max-size SIZE    drop sizes above SIZE\n"
            "  -r, --reps N           timed repetitions per figure; median reported (5)\n"
            "  -w, --warmup N         untimed repetitions before them (1)\n"
            "  -j, --json FILE        write the results as JSON (schema in the docs)\n"
            "  -S, --server ADDR:PORT use a running server instead of the embedded one\n"
            "                         (no raw UCX reference then)\n"
            "      --client-mem KIND  the client's buffers: ckstore (default:\n"
            "                         cks_mem_alloc(), which the server reads and\n"
            "                         writes directly), thp (anonymous, MADV_HUGEPAGE),\n"
            "                         malloc (4 KiB pages) or shm-thp (a /dev/shm file,\n"
            "                         as the server's arena); all pre-faulted\n"
            "      --raw-setups LIST  buffer setups of the raw UCX loop\n"
            "                         (malloc,thp,shm-thp,ucx,ucx-thp: all by default)\n"
            "      --raw-methods LIST am,tag,rma (all by default)\n"
            "      --raw-spin USEC    each side of the raw loop busy-polls this long,\n"
            "                         then sleeps on UCX's event fd (default 200);\n"
            "                         -1: busy-poll only, as ucx_perftest does\n"
            "      --no-raw           skip the raw UCX reference\n"
            "      --copy-threads N   the embedded server's copy threads (0: none;\n"
            "                         default: the server's, one per 4 CPUs)\n"
            "  -t, --timeout SEC      limit on every wait: start, connect, each\n"
            "                         operation (30)\n"
            "  -v, --verbose          the server logs to stderr; print UCX's endpoints\n"
            "  -q, --quiet            print nothing but errors\n"
            "  -h, --help             this text\n");
}

static int bench_parse_opts(bench_ctx_t *x, int argc, char **argv)
{
    static const char *const mem_names[] = {"malloc", "thp", "shm-thp", "ckstore"};
    const bench_opt_t t[] = {
        BOPT("sizes", 's', CALL, x->o.sizes, .hi = BENCH_MAX_SIZES, .fn = bench_opt_sizes,
             .count = &x->o.nsizes),
        BOPT("max-size", 'm', SIZE, &x->o.max_size),
        BOPT("reps", 'r', UINT, &x->o.reps, .lo = 1, .hi = BENCH_MAX_REPS),
        BOPT("warmup", 'w', UINT, &x->o.warmup, .hi = BENCH_MAX_REPS),
        BOPT("json", 'j', STR, &x->o.json),
        BOPT("server", 'S', STR, &x->o.server),
        BOPT("raw-setups", 0, CALL, &x->o.setups, .hi = BENCH_NSETUPS,
             .fn = bench_opt_mask, .names = bench_setup_names),
        BOPT("raw-methods", 0, CALL, &x->o.methods, .hi = BENCH_NMETHODS,
             .fn = bench_opt_mask, .names = bench_method_names),
        BOPT("raw-spin", 0, DOUBLE, &x->o.spin_s),
        BOPT("no-raw", 0, FLAG, &x->o.no_raw),
        BOPT("copy-threads", 0, CALL, &x->o.copy_threads, .fn = bench_opt_copy_threads),
        BOPT("client-mem", 0, CALL, &x->o.client_mem, .hi = 4, .fn = bench_opt_enum,
             .names = mem_names),
        BOPT("timeout", 't', DOUBLE, &x->o.timeout_s, .lo = 1),
        BOPT("verbose", 'v', FLAG, &x->o.verbose),
        BOPT("quiet", 'q', FLAG, &x->o.quiet),
        BOPT("help", 'h', HELP, NULL),
    };
    int rc;

    bench_parse_sizes("1M,4M,16M,64M,256M,1G", x->o.sizes, BENCH_MAX_SIZES, &x->o.nsizes);
    x->o.reps = 5;
    x->o.warmup = 1;
    x->o.timeout_s = 30;
    x->o.spin_s = 200; /* microseconds until parsed */
    x->o.client_mem = BENCH_MEM_CKS;
    x->o.setups = (1u << BENCH_NSETUPS) - 1;
    x->o.methods = (1u << BENCH_NMETHODS) - 1;
    bench_join_args(x->o.command, sizeof(x->o.command), "", argc, argv);
    rc = bench_opts_parse("ckstore-bench", t, sizeof(t) / sizeof(t[0]), argc, argv);
    if (rc != 0) {
        bench_usage(rc > 0 ? stdout : stderr);
        exit(rc > 0 ? 0 : 2);
    }
    x->o.spin_s *= 1e-6;
    if (x->o.max_size > 0) {
        unsigned n = 0;
        for (unsigned i = 0; i < x->o.nsizes; i++) {
            if (x->o.sizes[i] <= x->o.max_size) {
                x->o.sizes[n++] = x->o.sizes[i];
            }
        }
        x->o.nsizes = n;
        if (n == 0) {
            fprintf(stderr, "ckstore-bench: no size left under --max-size\n");
            return -1;
        }
    }
    return 0;
}

static uint64_t bench_arena_size(uint64_t max)
{
    /* one object at a time (each version is deleted after use) + headers */
    return (max + max / 8 + (32ull << 20) + (2ull << 20) - 1) & ~((2ull << 20) - 1);
}

/* Drop the sizes that do not fit in the memory this machine has free now:
 * the client's two buffers, the server's arena, one raw UCX buffer on each
 * side; /dev/shm holds the arena and, for shm-thp, both raw buffers. A
 * benchmark killed by the OOM killer tells nobody anything. Returns the
 * largest size left (0: none). */
static uint64_t bench_fit_sizes(bench_ctx_t *x)
{
    uint64_t avail = bench_mem_available(), shm_free = bench_shm_free();
    char sz[32];

    while (x->o.nsizes > 0) {
        uint64_t max = 0;
        unsigned at  = 0;
        for (unsigned i = 0; i < x->o.nsizes; i++) {
            if (x->o.sizes[i] > max) {
                max = x->o.sizes[i];
                at  = i;
            }
        }
        int embedded = x->o.server == NULL;
        int raw = embedded && !x->o.no_raw;
        uint64_t ram = 2 * max + (embedded ? bench_arena_size(max) : 0) + (raw ? 2 * max : 0);
        uint64_t shm = embedded ? bench_arena_size(max) : 0;
        if (raw && (x->o.setups & (1u << BENCH_SETUP_SHM_THP))) {
            shm += 2 * max;
        }
        if (avail == 0 ||
            (ram + ram / 8 <= avail && (shm_free == 0 || shm <= shm_free))) {
            return max;
        }
        fprintf(stderr,
                "ckstore-bench: NOTE: %s skipped: it needs about %.1f GiB of memory (%.1f GiB "
                "in /dev/shm); %.1f GiB are available (%.1f GiB in /dev/shm)\n",
                bench_size_str(max, sz, sizeof(sz)), (double)ram / (1 << 30),
                (double)shm / (1 << 30), (double)avail / (1 << 30),
                (double)shm_free / (1 << 30));
        size_t used = strlen(x->o.skipped);
        snprintf(x->o.skipped + used, sizeof(x->o.skipped) - used, "%s%s",
                 used ? "," : "", bench_size_str(max, sz, sizeof(sz)));
        memmove(&x->o.sizes[at], &x->o.sizes[at + 1],
                (x->o.nsizes - at - 1) * sizeof(uint64_t));
        x->o.nsizes--;
    }
    return 0;
}

/* ---- measurements ------------------------------------------------------------------ */

static void bench_memcpy_measure(bench_ctx_t *x, unsigned i, void *dst, const void *src)
{
    double secs[BENCH_MAX_REPS];
    uint64_t size = x->o.sizes[i];
    for (unsigned w = 0; w < x->o.warmup; w++) {
        bench_memcpy_once(dst, src, size);
    }
    for (unsigned r = 0; r < x->o.reps; r++) {
        secs[r] = bench_memcpy_once(dst, src, size);
    }
    bench_stats(size, secs, x->o.reps, &x->f.memcpy_fig[i].st);
    x->f.memcpy_fig[i].ok = 1;
}

/* One setup at one size: a fresh session (buffers of that size on both
 * sides), every method, both directions. */
static int bench_raw_measure_setup(bench_ctx_t *x, bench_child_t *child, bench_setup_t s,
                                   unsigned i)
{
    double secs[BENCH_MAX_REPS];
    uint64_t size = x->o.sizes[i];
    char err[BENCH_ERR_LEN];
    bench_raw_t *raw;
    int rc = 0;

    /* memory is checked again here: the machine is shared, and other work may
     * have taken (or filled /dev/shm with) what was free at the start */
    uint64_t avail = bench_mem_available(), shm_free = bench_shm_free();
    if ((avail != 0 && avail < 2 * size + size / 2) ||
        (s == BENCH_SETUP_SHM_THP && shm_free != 0 && shm_free < 2 * size + (64ull << 20))) {
        char sz[32];
        fprintf(stderr,
                "ckstore-bench: NOTE: raw %s at %s skipped: %.1f GiB of memory and %.1f GiB "
                "of /dev/shm are free\n",
                bench_setup_name(s), bench_size_str(size, sz, sizeof(sz)),
                (double)avail / (1 << 30), (double)shm_free / (1 << 30));
        return -1;
    }
    if (bench_child_raw_open(child, s, size, x->o.spin_s, x->o.timeout_s, &raw,
                             x->f.raw_desc[s], err, sizeof(err)) != 0) {
        fprintf(stderr, "ckstore-bench: %s\n", err);
        return -1;
    }
    for (unsigned m = 0; m < BENCH_NMETHODS && rc == 0; m++) {
        if (!(x->o.methods & (1u << m))) {
            continue;
        }
        /* UCX 1.13 has an RMA lane here only for memory its sysv/posix
         * transports allocated (the peer maps it); other memory gets put/get
         * emulated over active messages, which needs the peer to poll: let
         * the child busy-poll while rma runs */
        double child_spin = m == BENCH_METHOD_RMA ? -1 : x->o.spin_s;
        if (child_spin != bench_raw_spin(raw) &&
            bench_child_raw_spin(child, raw, child_spin, x->o.timeout_s) != 0) {
            rc = -1;
            break;
        }
        bench_raw_set_spin(raw, child_spin); /* mirrors the child's setting */
        for (unsigned d = 0; d < BENCH_NDIRS && rc == 0; d++) {
            unsigned n;
            rc = bench_raw_sample(raw, m, d, size, x->o.warmup, x->o.reps,
                                  BENCH_RAW_BUDGET_S, x->o.timeout_s, secs, &n);
            if (rc == 0) {
                bench_stats(size, secs, n, &x->f.raw[s][m][d][i].st);
                x->f.raw[s][m][d][i].ok = 1;
            }
        }
    }
    if (x->f.raw_tls[s][0] == '\0') {
        /* after traffic, so that wireup is complete */
        snprintf(x->f.raw_tls[s], sizeof(x->f.raw_tls[s]), "%s",
                 bench_raw_transports(raw));
        if (x->o.verbose) {
            fprintf(stderr, "--- raw UCX endpoint, setup %s (parent side) ---\n",
                    bench_setup_name(s));
            bench_raw_print_ep(raw, stderr);
        }
    }
    bench_child_raw_close(child, raw, x->o.timeout_s);
    return rc;
}

static int bench_ck_fail(cks_client_h c, const char *what, uint64_t size, cks_status_t st)
{
    char why[256] = "";
    char sz[32];
    if (c != NULL) {
        cks_client_last_error(c, why, sizeof(why));
    }
    fprintf(stderr, "ckstore-bench: %s of %s: %s%s%s\n", what,
            bench_size_str(size, sz, sizeof(sz)), cks_status_string(st), why[0] ? ": " : "",
            why);
    return -1;
}

static cks_status_t bench_ck_connect(const bench_ctx_t *x, const char *server,
                                     cks_client_h *c_p)
{
    cks_client_params_t cp;
    memset(&cp, 0, sizeof(cp));
    cp.field_mask =
        CKS_CLIENT_FIELD_SERVER | CKS_CLIENT_FIELD_TIMEOUT_MS | CKS_CLIENT_FIELD_NAME;
    cp.server     = server;
    cp.timeout_ms = (int)(x->o.timeout_s * 1000);
    cp.name       = "ckstore-bench";
    cks_status_t st = cks_client_create(&cp, c_p);
    if (st != CKS_OK) {
        fprintf(stderr, "ckstore-bench: cannot connect to %s: %s\n", server,
                cks_status_string(st));
    }
    return st;
}

/* ckstore at one size: warmup + reps of begin, put, seal, open, get, delete. */
static int bench_ck_measure(bench_ctx_t *x, cks_client_h c, unsigned i, uint8_t *src,
                            uint8_t *dst)
{
    double put_s[BENCH_MAX_REPS], get_s[BENCH_MAX_REPS], seal_s[BENCH_MAX_REPS];
    uint64_t size = x->o.sizes[i];
    cks_status_t st;
    char job[64];
    int rc = 0;

    snprintf(job, sizeof(job), "ckstore-bench-%d", (int)getpid());
    for (unsigned r = 0; r < x->o.warmup + x->o.reps && rc == 0; r++) {
        uint64_t version = x->version++;
        cks_version_params_t vp = {0};
        cks_put_params_t pp     = {0};
        cks_get_params_t gp     = {0};
        cks_restore_h rh;
        uint64_t got = 0;
        int check    = r == 0; /* once per size, outside the timing */
        double t0, t1, t2, t3, t4;

        vp.job     = job;
        vp.version = version;
        st         = cks_version_begin(c, &vp);
        if (st != CKS_OK) {
            rc = bench_ck_fail(c, "begin", size, st);
            break;
        }
        pp.job     = job;
        pp.version = version;
        pp.key     = "object";
        pp.buffer  = src;
        pp.size    = size;
        t0         = bench_now();
        st         = cks_put(c, &pp);
        t1         = bench_now();
        if (st != CKS_OK) {
            rc = bench_ck_fail(c, "put", size, st);
            cks_version_abort(c, job, version);
            break;
        }
        st = cks_version_seal(c, job, version);
        t2 = bench_now();
        if (st != CKS_OK) {
            rc = bench_ck_fail(c, "seal", size, st);
            cks_version_abort(c, job, version);
            break;
        }
        st = cks_restore_open(c, job, version, &rh);
        if (st != CKS_OK) {
            rc = bench_ck_fail(c, "restore open", size, st);
            cks_version_delete(c, job, version);
            break;
        }
        if (check) {
            memset(dst, 0x5a, size);
        }
        gp.key         = "object";
        gp.buffer      = dst;
        gp.buffer_size = size;
        t3             = bench_now();
        st             = cks_get(rh, &gp, &got);
        t4             = bench_now();
        cks_restore_close(rh);
        if (st != CKS_OK || got != size) {
            rc = bench_ck_fail(c, "get", size, st != CKS_OK ? st : CKS_ERR_INTERNAL);
            cks_version_delete(c, job, version);
            break;
        }
        if (check && memcmp(src, dst, size) != 0) {
            char sz[32];
            fprintf(stderr, "ckstore-bench: get of %s returned other bytes than put\n",
                    bench_size_str(size, sz, sizeof(sz)));
            rc = -1;
        }
        st = cks_version_delete(c, job, version);
        if (st != CKS_OK) {
            rc = bench_ck_fail(c, "delete", size, st);
            break;
        }
        if (r >= x->o.warmup) {
            put_s[r - x->o.warmup] = t1 - t0;
            seal_s[r - x->o.warmup] = t2 - t1;
            get_s[r - x->o.warmup] = t4 - t3;
        }
    }
    if (rc == 0) {
        bench_stats_t seal;
        bench_stats(size, put_s, x->o.reps, &x->f.ck[BENCH_DIR_PUT][i].st);
        bench_stats(size, get_s, x->o.reps, &x->f.ck[BENCH_DIR_GET][i].st);
        bench_stats(size, seal_s, x->o.reps, &seal);
        x->f.ck[BENCH_DIR_PUT][i].ok = x->f.ck[BENCH_DIR_GET][i].ok = 1;
        x->f.seal_ms[i] = (double)size / (seal.median * BENCH_GB) * 1e3;
    }
    return rc;
}

/* ---- results ------------------------------------------------------------------------ */

/* The best raw figure of a direction and size among the methods of `mask`:
 * which setup and method. */
static int bench_raw_best(const bench_ctx_t *x, unsigned d, unsigned i, unsigned mask,
                          unsigned *s_p, unsigned *m_p)
{
    double best = 0;
    int found   = 0;
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        for (unsigned m = 0; m < BENCH_NMETHODS; m++) {
            const bench_fig_t *f = &x->f.raw[s][m][d][i];
            if ((mask & (1u << m)) && f->ok && f->st.median > best) {
                best  = f->st.median;
                *s_p  = s;
                *m_p  = m;
                found = 1;
            }
        }
    }
    return found;
}

static void bench_print_raw(const bench_ctx_t *x)
{
    int short_runs = 0;
    char sz[32];
    for (unsigned d = 0; d < BENCH_NDIRS; d++) {
        say(x, "\nraw UCX between the same two processes, %s, GB/s (median of %u)\n",
            d == BENCH_DIR_PUT ? "client -> server (put direction)"
                               : "server -> client after a request (get direction)",
            x->o.reps);
        say(x, "%-16s", "setup/method");
        for (unsigned i = 0; i < x->o.nsizes; i++) {
            say(x, "%8s ", bench_size_str(x->o.sizes[i], sz, sizeof(sz)));
        }
        say(x, "\n");
        for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
            for (unsigned m = 0; m < BENCH_NMETHODS; m++) {
                if (!(x->o.setups & (1u << s)) || !(x->o.methods & (1u << m))) {
                    continue;
                }
                char name[32];
                snprintf(name, sizeof(name), "%s/%s", bench_setup_name(s),
                         bench_method_name(m));
                say(x, "%-16s", name);
                for (unsigned i = 0; i < x->o.nsizes; i++) {
                    const bench_fig_t *f = &x->f.raw[s][m][d][i];
                    if (f->ok) {
                        short_runs |= f->st.n < x->o.reps;
                        say(x, "%8.2f%c", f->st.median, f->st.n < x->o.reps ? '*' : ' ');
                    } else {
                        say(x, "%8s ", "-");
                    }
                }
                say(x, "\n");
            }
        }
    }
    if (short_runs) {
        say(x, "* fewer than %u samples: the figure's %.0f s budget ran out\n", x->o.reps,
            BENCH_RAW_BUDGET_S);
    }
    say(x, "\nraw UCX buffers (parent | child) and the parent endpoint's lanes:\n");
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        if (x->o.setups & (1u << s)) {
            say(x, "  %-8s %s | %s\n           %s\n", bench_setup_name(s),
                x->f.raw_desc[s][0], x->f.raw_desc[s][1],
                x->f.raw_tls[s][0] ? x->f.raw_tls[s] : "-");
        }
    }
}

/* Print the main table and fill the records; returns 1 when the target is
 * met, 0 when it is not, -1 when no figure could judge it. */
static int bench_results(const bench_ctx_t *x, bench_report_t *rep)
{
    int have_raw = 0, met = 1, judged = 0;
    double worst = INFINITY;
    char worst_what[64] = "";
    char sz[32];

    say(x,
        "\nckstore (1 client, 1 server) against the references, GB/s = 10^9 B/s, "
        "median of %u\n",
        x->o.reps);
    say(x, "%-4s %9s %6s %6s %6s %6s %-15s %5s %6s %5s %6s %5s\n", "op", "size", "GB/s",
        "min", "max", "raw", "(best of)", "ratio", "raw am", "/am", "memcpy", "/mcpy");
    for (unsigned i = 0; i < x->o.nsizes; i++) {
        for (unsigned d = 0; d < BENCH_NDIRS; d++) {
            const bench_fig_t *f = &x->f.ck[d][i];
            const bench_fig_t *mc = &x->f.memcpy_fig[i];
            unsigned bs = 0, bm = 0, as = 0, am = 0;
            int raw_ok = bench_raw_best(x, d, i, ~0u, &bs, &bm);
            int am_ok = bench_raw_best(x, d, i, 1u << BENCH_METHOD_AM, &as, &am);
            double raw = raw_ok ? x->f.raw[bs][bm][d][i].st.median : NAN;
            double ram = am_ok ? x->f.raw[as][am][d][i].st.median : NAN;
            double gbps = f->ok ? f->st.median : NAN;
            double ratio = gbps / raw, mratio = gbps / mc->st.median;
            char best[32] = "-";

            have_raw |= raw_ok;
            if (raw_ok) {
                snprintf(best, sizeof(best), "%s/%s", bench_setup_name(bs),
                         bench_method_name(bm));
            }
            say(x, "%-4s %9s ", bench_dir_name(d),
                bench_size_str(x->o.sizes[i], sz, sizeof(sz)));
            if (f->ok) {
                say(x, "%6.2f %6.2f %6.2f ", f->st.median, f->st.min, f->st.max);
            } else {
                say(x, "%6s %6s %6s ", "-", "-", "-");
            }
            if (raw_ok) {
                say(x, "%6.2f %-15s %5.2f ", raw, best, ratio);
            } else {
                say(x, "%6s %-15s %5s ", "-", "-", "-");
            }
            if (am_ok) {
                say(x, "%6.2f %5.2f ", ram, gbps / ram);
            } else {
                say(x, "%6s %5s ", "-", "-");
            }
            say(x, "%6.2f %5.2f\n", mc->st.median, mratio);

            if (x->o.sizes[i] >= BENCH_TARGET_MIN_SIZE && isfinite(ratio)) {
                judged = 1;
                if (ratio < worst) {
                    worst = ratio;
                    snprintf(worst_what, sizeof(worst_what), "%s %s", bench_dir_name(d),
                             bench_size_str(x->o.sizes[i], sz, sizeof(sz)));
                }
                met &= ratio >= BENCH_TARGET_RATIO;
            }

            bench_rec_t *r = bench_report_add(rep);
            if (r == NULL) {
                continue;
            }
            bench_rec_kv(r, KS("op", bench_dir_name(d)), KU("size", x->o.sizes[i]),
                         KF("gbps", gbps), KF("raw_gbps", raw), KF("ratio", ratio),
                         KF("min_gbps", f->ok ? f->st.min : NAN),
                         KF("max_gbps", f->ok ? f->st.max : NAN),
                         KS("raw_setup", raw_ok ? bench_setup_name(bs) : NULL),
                         KS("raw_method", raw_ok ? bench_method_name(bm) : NULL),
                         KF("raw_am_gbps", ram), KF("am_ratio", gbps / ram),
                         KS("raw_am_setup", am_ok ? bench_setup_name(as) : NULL),
                         KF("memcpy_gbps", mc->st.median), KF("memcpy_ratio", mratio));
            if (d == BENCH_DIR_PUT) {
                bench_rec_f64(r, "seal_ms", f->ok ? x->f.seal_ms[i] : NAN);
            }
            bench_rec_u64(r, "reps", x->o.reps);
        }
    }
    if (!have_raw) {
        say(x, "(no raw UCX reference in this run%s)\n",
            x->o.server ? ": --server names a server outside this process tree" : "");
    }
    if (judged) {
        say(x,
            "\ntarget: put and get >= %.1f x raw UCX at %s and above: %s (lowest ratio "
            "%.2f, %s)\n",
            BENCH_TARGET_RATIO, bench_size_str(BENCH_TARGET_MIN_SIZE, sz, sizeof(sz)),
            met ? "met" : "NOT met", worst, worst_what);
    }

    for (unsigned i = 0; i < x->o.nsizes; i++) {
        bench_rec_t *r = bench_report_add(rep);
        if (r != NULL && x->f.memcpy_fig[i].ok) {
            bench_rec_kv(r, KS("op", "memcpy"), KU("size", x->o.sizes[i]),
                         KF("gbps", x->f.memcpy_fig[i].st.median),
                         KF("min_gbps", x->f.memcpy_fig[i].st.min),
                         KF("max_gbps", x->f.memcpy_fig[i].st.max),
                         KU("reps", x->o.reps));
        }
    }
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        for (unsigned m = 0; m < BENCH_NMETHODS; m++) {
            for (unsigned d = 0; d < BENCH_NDIRS; d++) {
                for (unsigned i = 0; i < x->o.nsizes; i++) {
                    const bench_fig_t *f = &x->f.raw[s][m][d][i];
                    bench_rec_t *r;
                    if (!f->ok || (r = bench_report_add(rep)) == NULL) {
                        continue;
                    }
                    bench_rec_kv(r, KS("op", "raw"), KS("dir", bench_dir_name(d)),
                                 KS("setup", bench_setup_name(s)),
                                 KS("method", bench_method_name(m)),
                                 KU("size", x->o.sizes[i]), KF("gbps", f->st.median),
                                 KF("min_gbps", f->st.min), KF("max_gbps", f->st.max),
                                 KU("reps", f->st.n), KS("buffers", x->f.raw_desc[s][0]),
                                 KS("peer_buffers", x->f.raw_desc[s][1]),
                                 KS("transports", x->f.raw_tls[s]));
                }
            }
        }
    }
    return judged ? met : -1;
}

/* ---- main --------------------------------------------------------------------------- */

static void bench_describe_buf(const bench_ctx_t *x, const void *p, size_t len, char *buf,
                               size_t buflen)
{
    static const char *const kind[] = {"malloc", "anon thp", "shm thp",
                                       "cks_mem_alloc (UCX shared memory)"};
    snprintf(buf, buflen, "%s, %d%% huge", kind[x->o.client_mem],
             bench_huge_percent(0, p, len, NULL));
}

/* The single-server bench: one client, one server, the references. */
static int bench_main(bench_ctx_t *x, int argc, char **argv)
{
    bench_child_t child = {0};
    cks_client_h client = NULL;
    bench_report_t rep  = {0};
    bench_buf_t src = {0}, dst = {0};
    char err[BENCH_ERR_LEN], addr[96], sz[32];
    const char *server;
    uint64_t max;
    double load_start = -1, load_end;
    int rc = 1, met;

    if (bench_parse_opts(x, argc, argv) != 0) {
        return 2;
    }
    max = bench_fit_sizes(x);
    if (max == 0) {
        fprintf(stderr, "ckstore-bench: not enough memory for any size\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    server = x->o.server;

    /* the child first: UCX must not be initialised in the parent before fork() */
    if (x->o.server == NULL) {
        uint64_t arena = bench_arena_size(max);
        child.verbose = x->o.verbose;
        child.copy_threads = x->o.copy_threads;
        if (bench_child_start(&child, arena, x->o.timeout_s, err, sizeof(err)) != 0) {
            fprintf(stderr, "ckstore-bench: %s\n", err);
            return 1;
        }
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", child.port);
        server = addr;
        snprintf(x->f.server_desc, sizeof(x->f.server_desc),
                 "embedded (pid %d, %s, arena %s)", (int)child.pid, addr,
                 bench_size_str(arena, sz, sizeof(sz)));
        snprintf(x->f.arena_desc, sizeof(x->f.arena_desc), "shm file, %d%% huge",
                 bench_huge_percent(child.pid, NULL, 0, child.arena));
    } else {
        snprintf(x->f.server_desc, sizeof(x->f.server_desc), "%s", x->o.server);
        snprintf(x->f.arena_desc, sizeof(x->f.arena_desc), "unknown");
    }

    if (bench_ck_connect(x, server, &client) != CKS_OK) {
        goto out;
    }
    if (x->o.client_mem == BENCH_MEM_CKS) {
        if (bench_ck_buf_alloc(client, max, &src) != 0 ||
            bench_ck_buf_alloc(client, max, &dst) != 0) {
            goto out;
        }
    } else if (bench_buf_alloc(x->o.client_mem, max, &src, err, sizeof(err)) != 0 ||
               bench_buf_alloc(x->o.client_mem, max, &dst, err, sizeof(err)) != 0) {
        fprintf(stderr, "ckstore-bench: client buffers: %s\n", err);
        goto out;
    }
    cks_pattern_fill(src.ptr, max, 42);
    bench_describe_buf(x, src.ptr, max, x->f.client_desc, sizeof(x->f.client_desc));

    bench_machine_describe(&rep.machine);
    say(x, "ckstore-bench: 1 client -> 1 server %s\n", x->f.server_desc);
    say(x, "machine: %s, %llu cores, %.1f GiB, %s, UCX %s\n",
        bench_rec_get_str(&rep.machine, "cpu"),
        (unsigned long long)bench_rec_get_u64(&rep.machine, "cores"),
        (double)bench_rec_get_u64(&rep.machine, "memory_bytes") / (1ull << 30),
        bench_rec_get_str(&rep.machine, "kernel"),
        bench_rec_get_str(&rep.machine, "ucx_version"));
    say(x,
        "pages: THP %s, shmem THP %s, /dev/shm huge=%s; client buffers %s; server arena "
        "%s\n",
        bench_rec_get_str(&rep.machine, "thp_enabled"),
        bench_rec_get_str(&rep.machine, "shmem_thp_enabled"),
        bench_rec_get_str(&rep.machine, "dev_shm_huge"), x->f.client_desc,
        x->f.arena_desc);
    load_start = bench_loadavg();
    if (load_start >= 0.5 * (double)bench_rec_get_u64(&rep.machine, "cores")) {
        say(x,
            "NOTE: load average %.2f on %llu cores: other work is running, the figures "
            "will "
            "be disturbed\n",
            load_start, (unsigned long long)bench_rec_get_u64(&rep.machine, "cores"));
    }
    say(x, "sizes:");
    for (unsigned i = 0; i < x->o.nsizes; i++) {
        say(x, " %s", bench_size_str(x->o.sizes[i], sz, sizeof(sz)));
    }
    say(x, "; %u reps after %u warm-up\n\n", x->o.reps, x->o.warmup);

    /* size by size, so that every figure of a size is taken within seconds of
     * the others: these machines are shared, and their speed drifts */
    for (unsigned i = 0; i < x->o.nsizes; i++) {
        say(x, "  %-8s memcpy", bench_size_str(x->o.sizes[i], sz, sizeof(sz)));
        bench_memcpy_measure(x, i, dst.ptr, src.ptr);
        for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
            if (x->o.server == NULL && !x->o.no_raw && (x->o.setups & (1u << s))) {
                say(x, ", raw %s", bench_setup_name(s));
                bench_raw_measure_setup(x, &child, s, i);
            }
        }
        say(x, ", ckstore\n");
        if (bench_ck_measure(x, client, i, src.ptr, dst.ptr) != 0) {
            goto out;
        }
    }
    bench_ck_buf_free(client, &src);
    bench_ck_buf_free(client, &dst);
    cks_client_destroy(client);
    client   = NULL;
    load_end = bench_loadavg();

    if (x->o.server == NULL && !x->o.no_raw) {
        bench_print_raw(x);
    }
    met = bench_results(x, &rep);
    say(x, "load average: %.2f at the start, %.2f at the end; target %s\n", load_start,
        load_end,
        met > 0    ? "met"
        : met == 0 ? "NOT met"
                   : "not judged");

    bench_rec_kv(&rep.run, KS("command", x->o.command), KS("server", x->f.server_desc),
                 KU("reps", x->o.reps), KU("warmup", x->o.warmup),
                 KF("raw_spin_us", x->o.spin_s < 0 ? -1 : x->o.spin_s * 1e6),
                 KF("loadavg_start", load_start), KF("loadavg_end", load_end));
    if (x->o.skipped[0] != '\0') {
        bench_rec_str(&rep.run, "skipped_sizes", x->o.skipped);
    }
    bench_rec_kv(&rep.run, KS("client_buffers", x->f.client_desc),
                 KS("server_arena", x->f.arena_desc),
                 KF("target_ratio", BENCH_TARGET_RATIO),
                 KU("target_min_size", BENCH_TARGET_MIN_SIZE));
    if (x->o.json != NULL) {
        if (bench_report_write_json(&rep, x->o.json) != 0) {
            fprintf(stderr, "ckstore-bench: cannot write %s: %s\n", x->o.json,
                    strerror(errno));
            goto out;
        }
        say(x, "\nresults written to %s\n", x->o.json);
    }
    rc = 0;

out:
    if (client != NULL) {
        bench_ck_buf_free(client, &src);
        bench_ck_buf_free(client, &dst);
        cks_client_destroy(client);
    }
    bench_buf_free(&src);
    bench_buf_free(&dst);
    if (x->o.server == NULL) {
        bench_child_stop(&child, x->o.timeout_s);
    }
    bench_report_free(&rep);
    return rc;
}

int main(int argc, char **argv)
{
    bench_ctx_t *x;
    int rc;

    /* servers and clients of this host: UCX's network lanes on the loopback
     * interface only (left alone, UCX also opens TCP lanes on the host's
     * own address); set UCX_NET_DEVICES to measure another */
    setenv("UCX_NET_DEVICES", "lo", 0);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--gpu") ==
            0) { /* device memory (gpu.c; docs/BENCHMARKS.md) */
            int cluster = argc > 1 && strcmp(argv[1], "cluster") == 0;
            return cks_bench_gpu_main(argc - cluster, argv + cluster, cluster);
        }
    }
    if (argc > 1 && strcmp(argv[1], "cluster") == 0) {
        return cks_bench_cluster_main(argc - 1,
                                      argv + 1); /* docs/BENCHMARKS_CLUSTER.md */
    }
    if (argc > 1 && strcmp(argv[1], "flush") == 0) {
        return cks_bench_flush_main(argc - 1, argv + 1); /* the durable tier (flush.c) */
    }
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        fprintf(stderr, "ckstore-bench: out of memory\n");
        return 1;
    }
    x->version = 1;
    rc = bench_main(x, argc, argv);
    free(x);
    return rc;
}
