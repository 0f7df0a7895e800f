/*
 * bench/flush.c - `ckstore-bench flush`: the durable tier against plain
 * file I/O on the same directory, in the same run.
 *
 * DESIGN: starts N ckstore-server processes (RS(k, m), one per "node", on
 * 127.0.0.1), writes one version of --size bytes (64 MiB objects), then
 *   1. flush: cks_version_flush() to DIR (every server writes its chunks,
 *      data and parity, and one publishes; the servers' --flush-rate is
 *      the bench's, default 0: unpaced); timed until it returns;
 *   2. plain write: N threads each write and fsync one file of the same
 *      size as a server's chunk file (the same bytes on disk, the same
 *      parallelism), timed until the last fsync; run once before the flush
 *      and once after it (both printed: a shared disk drifts);
 *   3. restore from disk (CKS_RESTORE_DURABLE, every object whole, one get
 *      after another: libckstore reads each with 8 threads) against a plain
 *      read of as many bytes from the plain files with 8 threads and with
 *      4 (pread, a share each), the faster of the two; each after evicting
 *      the files from the page cache (posix_fadvise DONTNEED after fsync;
 *      no root needed);
 *   4. snapshots while a flush runs, --repeat pairs (default 3): a version
 *      of the same size written and sealed alone (timed) and deleted; then
 *      another written, and flushed on another thread while one more is
 *      written (timed, from when the flush has begun writing): each pair's
 *      ratio of bandwidths, their median, and how much of each snapshot
 *      the flush overlapped (a flush that ends first flatters the ratio).
 * Prints GB/s (10^9 bytes/s) and the ratios. Everything it made is removed.
 * Never: runs against a user's servers or deletes anything outside DIR/
 * ckstore-flush-bench-<pid>.
 */
#include "bench.h"
#include "ckstore.h"
#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define FB_MAX_SERVERS 16
#define FB_OBJ         ((uint64_t)64 << 20)

#define FB_MAX_REPEAT 16

/* One run's state: made in cks_bench_flush_main, passed to what needs it. */
typedef struct {
    struct {
        const char *dir;
        const char *server_bin;
        uint64_t size;
        unsigned nsrv, k, m;
        uint64_t chunk;
        const char *flush_rate; /* the servers' --flush-rate */
        unsigned repeat;        /* pairs of snapshots, alone and during a flush */
    } o;
    char root[PATH_MAX - 256]; /* DIR/ckstore-flush-bench-<pid> */
    char map[PATH_MAX];
    char bin[PATH_MAX];
    pid_t pid[FB_MAX_SERVERS];
    uint16_t port[FB_MAX_SERVERS];
} fb_ctx_t;

static int fb_start_servers(fb_ctx_t *x, uint64_t arena)
{
    char path[PATH_MAX];
    FILE *f;
    if (bench_free_ports(x->o.nsrv, x->port) != 0) {
        fprintf(stderr, "ckstore-bench flush: no free ports\n");
        return -1;
    }
    snprintf(x->map, sizeof(x->map), "%s/cluster.map", x->root);
    f = fopen(x->map, "w");
    if (f == NULL) {
        fprintf(stderr, "ckstore-bench flush: %s: %s\n", x->map, strerror(errno));
        return -1;
    }
    fprintf(f, "epoch 1\n");
    for (unsigned i = 0; i < x->o.nsrv; i++) {
        fprintf(f, "server %u 127.0.0.1:%u node=n%u rack=r%u\n", i, x->port[i], i, i % 3);
    }
    fclose(f);
    for (unsigned i = 0; i < x->o.nsrv; i++) {
        char id[16], asize[32], arena_file[PATH_MAX], ddir[PATH_MAX];
        snprintf(id, sizeof(id), "%u", i);
        snprintf(asize, sizeof(asize), "%lluM", (unsigned long long)(arena >> 20));
        snprintf(arena_file, sizeof(arena_file), "/dev/shm/cks-flushbench-%d-%u.arena",
                 (int)getpid(), i);
        snprintf(ddir, sizeof(ddir), "%s/data-%u", x->root, i);
        snprintf(path, sizeof(path), "%s/server-%u.log", x->root, i);
        char *argv[] = {x->bin, "--cluster", x->map, "--id", id, "--arena-size", asize,
                        "--arena-file", arena_file, "--data-dir", ddir, "--flush-dir",
                        x->root, "--flush-rate", (char *)x->o.flush_rate, "--log-level",
                        "warn", NULL};
        int logfd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        x->pid[i] = bench_spawn(argv, logfd);
        if (logfd >= 0) {
            close(logfd);
        }
        if (x->pid[i] < 0) {
            return -1;
        }
    }
    for (unsigned i = 0; i < x->o.nsrv; i++) {
        if (bench_wait_port(x->port[i], x->pid[i], bench_now() + 30) != 0) {
            fprintf(stderr, "ckstore-bench flush: server %u did not start (log in %s)\n",
                    i, x->root);
            return -1;
        }
    }
    return 0;
}

static void fb_stop_servers(fb_ctx_t *x)
{
    for (unsigned i = 0; i < x->o.nsrv; i++) {
        char arena_file[PATH_MAX];
        if (x->pid[i] > 0) {
            bench_stop_pid(x->pid[i], SIGTERM, 10);
            x->pid[i] = 0;
        }
        snprintf(arena_file, sizeof(arena_file), "/dev/shm/cks-flushbench-%d-%u.arena",
                 (int)getpid(), i);
        unlink(arena_file);
    }
}

/* Bytes of the files in dir whose names contain `part`; with evict, drop
 * them from the page cache. */
static uint64_t fb_dir_bytes(const char *dir, const char *part, int evict)
{
    char path[PATH_MAX];
    uint64_t total = 0;
    struct dirent *e;
    DIR *d = opendir(dir);
    if (d == NULL) {
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (strstr(e->d_name, part) == NULL ||
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path) ||
            stat(path, &st) != 0) {
            continue;
        }
        total += (uint64_t)st.st_size;
        if (evict) {
            int fd = open(path, O_RDONLY);
            if (fd >= 0) {
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                close(fd);
            }
        }
    }
    closedir(d);
    return total;
}

typedef struct {
    char path[PATH_MAX];
    uint64_t bytes;
    const uint8_t *src;
    int failed;
} fb_writer_t;

static void *fb_write_file(void *arg)
{
    fb_writer_t *w = arg;
    int fd         = open(w->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    uint64_t done  = 0;
    if (fd < 0) {
        w->failed = 1;
        return NULL;
    }
    while (done < w->bytes) {
        size_t n  = (size_t)(w->bytes - done < FB_OBJ ? w->bytes - done : FB_OBJ);
        ssize_t r = write(fd, w->src, n);
        if (r <= 0) {
            w->failed = 1;
            break;
        }
        done += (uint64_t)r;
    }
    if (fsync(fd) != 0) {
        w->failed = 1;
    }
    close(fd);
    return NULL;
}

/* N threads write and fsync `bytes` in all under dir/tag-<i>; seconds, or -1. */
static double fb_plain_write(const char *dir, const char *tag, uint64_t bytes,
                             const uint8_t *src, fb_writer_t *w, unsigned n)
{
    pthread_t th[FB_MAX_SERVERS];
    int failed = 0;
    double t0  = bench_now();
    for (unsigned i = 0; i < n; i++) {
        snprintf(w[i].path, sizeof(w[i].path), "%.3900s/%s-%u", dir, tag, i);
        w[i].bytes = bytes / n;
        w[i].src    = src;
        w[i].failed = 0;
        pthread_create(&th[i], NULL, fb_write_file, &w[i]);
    }
    for (unsigned i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (w[i].failed) {
            fprintf(stderr, "ckstore-bench flush: writing %s failed\n", w[i].path);
            failed = 1;
        }
    }
    return failed ? -1 : bench_now() - t0;
}

/* The plain parallel read: FB_READERS threads (as many as libckstore reads
 * one object of a flushed copy with), and FB_READERS_FEW (what it used
 * before; fewer threads read faster on some disks), each pread() one
 * contiguous share of the files w[0..n) taken end to end. The restore is
 * set against the faster of the two. */
#define FB_READERS     8
#define FB_READERS_FEW 4
typedef struct {
    const fb_writer_t *w;
    unsigned n;
    uint64_t from, to; /* the share, in the files end to end */
    int failed;
} fb_reader_t;

static void *fb_read_share(void *arg)
{
    fb_reader_t *r = arg;
    uint8_t *buf   = malloc(FB_OBJ);
    uint64_t base  = 0, pos = r->from;
    for (unsigned i = 0; buf != NULL && i < r->n && pos < r->to; i++) {
        uint64_t end = base + r->w[i].bytes;
        if (pos < end) {
            int fd = open(r->w[i].path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                r->failed = 1;
                break;
            }
            while (pos < end && pos < r->to) {
                uint64_t stop = end < r->to ? end : r->to;
                uint64_t n    = stop - pos < FB_OBJ ? stop - pos : FB_OBJ;
                ssize_t got = pread(fd, buf, (size_t)n, (off_t)(pos - base));
                if (got <= 0) {
                    r->failed = 1;
                    break;
                }
                pos += (uint64_t)got;
            }
            close(fd);
        }
        base = end;
    }
    r->failed |= buf == NULL;
    free(buf);
    return NULL;
}

/* Read `bytes` (at most what the files hold) of w[0..n) with `nthr` (at
 * most FB_READERS) threads; seconds, or -1. *read_p: the bytes read. */
static double fb_plain_read(const fb_writer_t *w, unsigned n, uint64_t bytes, unsigned nthr,
                            uint64_t *read_p)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        total += w[i].bytes;
    }
    bytes = bytes < total ? bytes : total;
    fb_reader_t r[FB_READERS];
    pthread_t th[FB_READERS];
    unsigned started = 0;
    int failed = 0;
    double t0 = bench_now();
    for (unsigned t = 0; t < nthr; t++) {
        r[t] = (fb_reader_t){w, n, bytes * t / nthr, bytes * (t + 1) / nthr, 0};
        if (pthread_create(&th[t], NULL, fb_read_share, &r[t]) != 0) {
            failed = 1;
            break;
        }
        started++;
    }
    for (unsigned t = 0; t < started; t++) {
        pthread_join(th[t], NULL);
        failed |= r[t].failed;
    }
    *read_p = bytes;
    return failed ? -1 : bench_now() - t0;
}

/* Write version v of nobj 64 MiB objects and seal it; seconds, or -1. */
static double fb_write_version(cks_client_h c, uint64_t v, uint64_t nobj, uint8_t *buf)
{
    cks_version_params_t vp = {0};
    double t0               = bench_now();
    vp.job                  = "bench";
    vp.version              = v;
    if (cks_version_begin(c, &vp) != CKS_OK) {
        return -1;
    }
    for (uint64_t i = 0; i < nobj; i++) {
        cks_put_params_t p = {0};
        char key[32];
        snprintf(key, sizeof(key), "shard%05" PRIu64, i);
        buf[0]    = (uint8_t)i;
        p.job     = "bench";
        p.version = v;
        p.key     = key;
        p.buffer  = buf;
        p.size    = FB_OBJ;
        if (cks_put(c, &p) != CKS_OK) {
            return -1;
        }
    }
    if (cks_version_seal(c, "bench", v) != CKS_OK) {
        return -1;
    }
    return bench_now() - t0;
}

typedef struct {
    cks_client_h c;
    const char *root;
    uint64_t version;
    cks_status_t st;
    double t0, t1;
} fb_flusher_t;

static void *fb_flush_thread(void *arg)
{
    fb_flusher_t *f = arg;
    f->t0           = bench_now();
    f->st           = cks_version_flush(f->c, "bench", f->version, f->root);
    f->t1           = bench_now();
    return NULL;
}

static void fb_usage(FILE *f)
{
    fprintf(f,
            "usage: ckstore-bench flush --dir DIR [--size SIZE] [--servers N]\n"
            "                           [--flush-rate SIZE] [--repeat N] [--server-bin PATH]\n"
            "  --dir DIR          the durable storage to measure (a file system path;\n"
            "                     the bench works in DIR/ckstore-flush-bench-<pid>)\n"
            "  --size SIZE        bytes of the version flushed (default 1G)\n"
            "  --servers N        ckstore-server processes, RS(4,2) (default 6, 6..16)\n"
            "  --flush-rate SIZE  the servers' --flush-rate (default 0: unpaced; 64M\n"
            "                     is the servers' own default)\n"
            "  --repeat N         pairs of snapshots, alone and while a flush runs\n"
            "                     (default 3, at most 16)\n"
            "  --server-bin PATH  ckstore-server (default: next to this binary)\n");
}

static int fb_main(fb_ctx_t *x, int argc, char **argv)
{
    cks_client_params_t cp = {0};
    cks_client_h c         = NULL;
    uint8_t *buf = NULL, *rbuf = NULL;
    uint64_t nobj, disk_bytes = 0;
    char vdir[PATH_MAX], plain[PATH_MAX], err[512];
    fb_writer_t *w = NULL;
    struct statfs sfs;
    int rc = 1;

    const bench_opt_t t[] = {
        BOPT("dir", 0, STR, &x->o.dir),
        BOPT("size", 0, SIZE, &x->o.size, .lo = FB_OBJ),
        BOPT("repeat", 0, UINT, &x->o.repeat, .lo = 1, .hi = FB_MAX_REPEAT),
        BOPT("flush-rate", 0, STR, &x->o.flush_rate), /* the servers check it */
        BOPT("servers", 0, UINT, &x->o.nsrv, .lo = x->o.k + x->o.m, .hi = FB_MAX_SERVERS),
        BOPT("server-bin", 0, STR, &x->o.server_bin),
        BOPT("help", 0, HELP, NULL),
    };
    rc = bench_opts_parse("ckstore-bench flush", t, sizeof(t) / sizeof(t[0]), argc, argv);
    if (rc != 0) {
        fb_usage(rc > 0 ? stdout : stderr);
        return rc > 0 ? 0 : 2;
    }
    rc = 1;
    if (x->o.dir == NULL || x->o.dir[0] != '/') {
        fb_usage(stderr);
        return 2;
    }
    if (bench_find_server_bin(x->o.server_bin, x->bin) != 0) {
        fprintf(stderr, "ckstore-bench flush: no ckstore-server binary; use --server-bin\n");
        return 1;
    }
    snprintf(x->root, sizeof(x->root), "%.3000s/ckstore-flush-bench-%d", x->o.dir,
             (int)getpid());
    if (mkdir(x->root, 0700) != 0) {
        fprintf(stderr, "ckstore-bench flush: %s: %s\n", x->root, strerror(errno));
        return 1;
    }
    nobj = x->o.size / FB_OBJ;
    /* each server holds (k + m) / k of its share; twice that, and room */
    uint64_t arena =
        (2 * x->o.size * (x->o.k + x->o.m) / x->o.k / x->o.nsrv + (256ull << 20)) &
        ~((1ull << 20) - 1);
    if (fb_start_servers(x, arena) != 0) {
        goto out;
    }
    cp.field_mask = CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC |
                    CKS_CLIENT_FIELD_TIMEOUT_MS | CKS_CLIENT_FIELD_NAME;
    cp.cluster    = x->map;
    cp.ec_k       = x->o.k;
    cp.ec_m       = x->o.m;
    cp.chunk_size = x->o.chunk;
    cp.timeout_ms = 120000;
    cp.name       = "ckstore-bench-flush";
    if (cks_client_create(&cp, &c) != CKS_OK) {
        fprintf(stderr, "ckstore-bench flush: cannot connect to the servers\n");
        goto out;
    }
    buf  = malloc(FB_OBJ);
    rbuf = malloc(FB_OBJ);
    if (buf == NULL || rbuf == NULL) {
        goto out;
    }
    for (uint64_t i = 0; i < FB_OBJ / 8; i++) {
        ((uint64_t *)buf)[i] = i * 0x9e3779b97f4a7c15ull;
    }
    if (fb_write_version(c, 1, nobj, buf) < 0) {
        goto fail;
    }

    /* the plain reference first (the same bytes the flush will write) */
    snprintf(plain, sizeof(plain), "%s/plain", x->root);
    mkdir(plain, 0700);
    w = calloc(x->o.nsrv, sizeof(*w));
    if (w == NULL) {
        goto out;
    }
    uint64_t expect = nobj * FB_OBJ / x->o.k * (x->o.k + x->o.m);
    double plain0_s = fb_plain_write(plain, "before", expect, buf, w, x->o.nsrv);
    if (plain0_s < 0) {
        goto out;
    }
    fb_dir_bytes(plain, "before-", 1);

    /* 1. flush */
    double t0        = bench_now();
    cks_status_t fst = cks_version_flush(c, "bench", 1, x->root);
    double flush_s   = bench_now() - t0;
    if (fst != CKS_OK) {
        goto fail;
    }
    snprintf(vdir, sizeof(vdir), "%s/bench/%020u", x->root, 1u);
    disk_bytes = fb_dir_bytes(vdir, ".chunks", 1);

    /* 2. plain parallel write of the same bytes, again */
    double plain_s = fb_plain_write(plain, "after", disk_bytes, buf, w, x->o.nsrv);
    if (plain_s < 0) {
        goto out;
    }
    fb_dir_bytes(plain, "after-", 1);

    /* 3. restore from disk (libckstore reads each object with 8 threads)
     * against a plain read of as many bytes with as many threads, and with
     * 4 (the faster counts) */
    cks_restore_params_t rp = {0};
    cks_restore_h r;
    rp.field_mask = CKS_RESTORE_FIELD_FLAGS | CKS_RESTORE_FIELD_FLUSH_DIR;
    rp.job        = "bench";
    rp.version    = 1;
    rp.flags      = CKS_RESTORE_DURABLE;
    rp.flush_dir  = x->root;
    t0            = bench_now();
    if (cks_restore_open_ex(c, &rp, &r) != CKS_OK) {
        goto fail;
    }
    for (uint64_t i = 0; i < nobj; i++) {
        cks_get_params_t g = {0};
        char key[32];
        snprintf(key, sizeof(key), "shard%05" PRIu64, i);
        g.key         = key;
        g.buffer      = rbuf;
        g.buffer_size = FB_OBJ;
        if (cks_get(r, &g, NULL) != CKS_OK || rbuf[0] != (uint8_t)i) {
            cks_restore_close(r);
            goto fail;
        }
    }
    double restore_s = bench_now() - t0;
    cks_restore_close(r);
    uint64_t read_bytes = 0;
    double read_s       = fb_plain_read(w, x->o.nsrv, nobj * FB_OBJ, FB_READERS, &read_bytes);
    fb_dir_bytes(plain, "after-", 1);
    double read_few_s =
        fb_plain_read(w, x->o.nsrv, nobj * FB_OBJ, FB_READERS_FEW, &read_bytes);
    if (read_s < 0 || read_few_s < 0) {
        fprintf(stderr, "ckstore-bench flush: the plain read failed\n");
        goto fail;
    }

    /* 4. pairs of snapshots: one alone, then one while another version is
     * flushed (each pair right after the other: a shared machine drifts) */
    if (cks_version_delete(c, "bench", 1) != CKS_OK) {
        goto fail;
    }
    double alone_s[FB_MAX_REPEAT], busy_s[FB_MAX_REPEAT], ratio[FB_MAX_REPEAT];
    double flush4_s[FB_MAX_REPEAT], overlap[FB_MAX_REPEAT];
    for (unsigned rep = 0; rep < x->o.repeat; rep++) {
        uint64_t v = 10 + 3 * (uint64_t)rep; /* alone: v; flushed: v + 1; during: v + 2 */
        alone_s[rep] = fb_write_version(c, v, nobj, buf);
        if (alone_s[rep] < 0 || cks_version_delete(c, "bench", v) != CKS_OK ||
            fb_write_version(c, v + 1, nobj, buf) < 0) {
            goto fail;
        }
        fb_flusher_t fl = {c, x->root, v + 1, CKS_OK, 0, 0};
        pthread_t flt;
        if (pthread_create(&flt, NULL, fb_flush_thread, &fl) != 0) {
            goto out;
        }
        /* once the servers write: the temporary directory has chunk bytes
         * (at most 10 s) */
        double wait_end = bench_now() + 10;
        while (bench_now() < wait_end) {
            cks_flush_progress_t fp;
            if (cks_flushed_progress(x->root, "bench", v + 1, &fp) == CKS_OK &&
                (fp.published || fp.bytes_written > 0)) {
                break;
            }
            usleep(1000);
        }
        double snap_t0 = bench_now();
        busy_s[rep]    = fb_write_version(c, v + 2, nobj, buf);
        double snap_t1 = bench_now();
        pthread_join(flt, NULL);
        if (busy_s[rep] < 0 || fl.st != CKS_OK ||
            cks_version_delete(c, "bench", v + 1) != CKS_OK ||
            cks_version_delete(c, "bench", v + 2) != CKS_OK) {
            goto fail;
        }
        snprintf(vdir, sizeof(vdir), "%s/bench/%020" PRIu64, x->root, v + 1);
        bench_rm_tree(vdir); /* room on the disk */
        ratio[rep]    = alone_s[rep] / busy_s[rep];
        flush4_s[rep] = fl.t1 - fl.t0;
        overlap[rep]  = ((fl.t1 < snap_t1 ? fl.t1 : snap_t1) - snap_t0) / (snap_t1 - snap_t0);
    }

    statfs(x->o.dir, &sfs);
    printf("ckstore-bench flush: %s (file system type 0x%lx), %u servers, RS(%u,%u), "
           "%" PRIu64 " objects of 64 MiB\n",
           x->o.dir, (unsigned long)sfs.f_type, x->o.nsrv, x->o.k, x->o.m, nobj);
    printf("  version bytes              %12" PRIu64 "\n", nobj * FB_OBJ);
    printf("  bytes on disk (chunks)     %12" PRIu64 "  ((k+m)/k = %.2f)\n", disk_bytes,
           (double)disk_bytes / (double)(nobj * FB_OBJ));
    printf("  flush                      %8.3f s  %6.2f GB/s on disk  %6.2f GB/s of version\n",
           flush_s, (double)disk_bytes / flush_s / BENCH_GB,
           (double)(nobj * FB_OBJ) / flush_s / BENCH_GB);
    printf("  plain write before, %2u thr %7.3f s  %6.2f GB/s on disk  (same bytes, fsync)\n",
           x->o.nsrv, plain0_s, (double)(expect / x->o.nsrv * x->o.nsrv) / plain0_s / BENCH_GB);
    printf("  plain write after, %2u thr  %7.3f s  %6.2f GB/s on disk\n", x->o.nsrv,
           plain_s, (double)(disk_bytes / x->o.nsrv * x->o.nsrv) / plain_s / BENCH_GB);
    printf("  flush / plain write        %8.2f (before)  %.2f (after)\n",
           plain0_s / flush_s * (double)disk_bytes / (double)expect, plain_s / flush_s);
    printf("  restore from disk, 1 client %7.3f s  %6.2f GB/s of version (cache evicted)\n",
           restore_s, (double)(nobj * FB_OBJ) / restore_s / BENCH_GB);
    printf("  plain read, %u threads      %8.3f s  %6.2f GB/s  (as many bytes, evicted)\n",
           FB_READERS, read_s, (double)read_bytes / read_s / BENCH_GB);
    printf("  plain read, %u threads      %8.3f s  %6.2f GB/s  (the same, evicted again)\n",
           FB_READERS_FEW, read_few_s, (double)read_bytes / read_few_s / BENCH_GB);
    printf("  restore / plain read       %8.2f  (against the faster plain read)\n",
           (read_s < read_few_s ? read_s : read_few_s) / restore_s);
    printf("  snapshot while a flush runs (--flush-rate %s; put + seal, one client):\n",
           x->o.flush_rate);
    for (unsigned rep = 0; rep < x->o.repeat; rep++) {
        double ov = overlap[rep] < 0 ? 0 : overlap[rep] > 1 ? 1 : overlap[rep];
        printf("    alone %6.2f GB/s, during a flush %6.2f GB/s: %.2f (the flush took "
               "%.3f s, overlapped %.0f%% of it)\n",
               (double)(nobj * FB_OBJ) / alone_s[rep] / BENCH_GB,
               (double)(nobj * FB_OBJ) / busy_s[rep] / BENCH_GB, ratio[rep], flush4_s[rep],
               ov * 100);
    }
    qsort(ratio, x->o.repeat, sizeof(*ratio), bench_cmp_double);
    printf("  snapshot with / without    %8.2f (median of %u)\n", ratio[x->o.repeat / 2],
           x->o.repeat);
    rc = 0;
    goto out;
fail:
    cks_client_last_error(c, err, sizeof(err));
    fprintf(stderr, "ckstore-bench flush: failed: %s\n", err);
out:
    free(w);
    free(buf);
    free(rbuf);
    if (c != NULL) {
        cks_client_destroy(c);
    }
    fb_stop_servers(x);
    bench_rm_tree(x->root);
    return rc;
}

int cks_bench_flush_main(int argc, char **argv)
{
    fb_ctx_t *x = calloc(1, sizeof(*x));
    int rc;
    if (x == NULL) {
        fprintf(stderr, "ckstore-bench flush: out of memory\n");
        return 1;
    }
    x->o.size = 1ull << 30;
    x->o.nsrv = 6;
    x->o.k = 4;
    x->o.m = 2;
    x->o.chunk = 1ull << 20;
    x->o.flush_rate = "0";
    x->o.repeat = 3;
    rc = fb_main(x, argc, argv);
    free(x);
    return rc;
}
