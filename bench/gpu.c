/*
 * DESIGN: `ckstore-bench --gpu` and `ckstore-bench cluster --gpu`: device
 * memory through the store, against the CUDA runtime's own copies measured
 * in the same run (docs/BENCHMARKS.md, "GPU"):
 *   - put: device buffer -> server (STORED), GB/s, against one pinned
 *     cudaMemcpy device-to-host of the same bytes (target ratio >= 0.9);
 *   - get: server -> device buffer, against pinned host-to-device;
 *   - stall: from cks_put_nb() to COPIED (the trainer may overwrite its
 *     buffer), against one device-to-host copy of the snapshot.
 * The snapshot is one object, or --objects N of about equal size put (and
 * got) all at once, as a trainer writes its shards.
 * Single: an embedded server (a forked child, as the host bench uses);
 * cluster: the cluster of a map file (--map). Without a CUDA device (or in
 * a build without CUDA) it says so and exits 0: nothing is measured.
 * Owns its CUDA buffers; never touches the trainer's (there is none).
 */
#include "bench.h"
#include "ckstore.h"
#include "cluster.h"

#include <pthread.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef CKS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* 0 and the reason in why when there is no device to measure. */
static int gpu_devices(char *why, size_t len)
{
#ifdef CKS_HAVE_CUDA
    int n           = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        snprintf(why, len, "no CUDA device (%s)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "the runtime counts none");
        return 0;
    }
    return n;
#else
    snprintf(why, len, "no CUDA device: this build has no CUDA support (configure where the "
                       "CUDA toolkit is installed)");
    return 0;
#endif
}

#ifdef CKS_HAVE_CUDA
/* The puts (or gets) of one repetition: how many are left, the first error,
 * and when the last COPIED came. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned left;
    cks_status_t st;
    double t_copied;
} gpu_wait_t;

static void gpu_copied_cb(void *arg, cks_status_t st)
{
    gpu_wait_t *w = arg;
    double t      = bench_now();
    (void)st;
    pthread_mutex_lock(&w->lock);
    w->t_copied = t > w->t_copied ? t : w->t_copied;
    pthread_mutex_unlock(&w->lock);
}

static void gpu_done_cb(void *arg, cks_status_t st)
{
    gpu_wait_t *w = arg;
    pthread_mutex_lock(&w->lock);
    if (st != CKS_OK && w->st == CKS_OK) {
        w->st = st;
    }
    if (--w->left == 0) {
        pthread_cond_signal(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
}

/* A call's return: CKS_INPROGRESS, its callback comes; anything else ends
 * it now (no callback comes). */
static void gpu_count(gpu_wait_t *w, cks_status_t st)
{
    if (st != CKS_INPROGRESS) {
        gpu_done_cb(w, st);
    }
}

static cks_status_t gpu_wait_all(gpu_wait_t *w)
{
    pthread_mutex_lock(&w->lock);
    while (w->left > 0) {
        pthread_cond_wait(&w->cond, &w->lock);
    }
    cks_status_t st = w->st;
    pthread_mutex_unlock(&w->lock);
    return st;
}

/* Object i of n of a snapshot of `size` bytes: its key (32 bytes), offset
 * and length. */
static void gpu_part(uint64_t size, unsigned n, unsigned i, char *key, uint64_t *off_p,
                     uint64_t *len_p)
{
    uint64_t each = size / n;
    snprintf(key, 32, "snapshot-%u", i);
    *off_p = each * i;
    *len_p = i + 1 < n ? each : size - each * (n - 1);
}

static double gbs(uint64_t bytes, double s)
{
    return s > 0 ? (double)bytes / s / 1e9 : 0;
}

/* The measurements, with a connected client. */
static int gpu_measure(cks_client_h c, uint64_t size, unsigned nobj, unsigned reps)
{
    void *dev = NULL, *host = NULL;
    double d2h = 1e30, h2d = 1e30, put = 1e30, get = 1e30, stall = 1e30;
    double put1 = 0, get1 = 0, stall1 = 0; /* the first repetition: what a user meets */
    int rc = 1;

    if (cudaMalloc(&dev, size) != cudaSuccess || cudaMallocHost(&host, size) != cudaSuccess) {
        fprintf(stderr, "ckstore-bench --gpu: cannot allocate %llu bytes on the device and "
                        "pinned on the host\n", (unsigned long long)size);
        goto out;
    }
    memset(host, 0x5a, size);
    cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice);
    for (unsigned r = 0; r < reps; r++) { /* the references: best of reps */
        double t0 = bench_now();
        cudaMemcpy(host, dev, size, cudaMemcpyDeviceToHost);
        double t1 = bench_now();
        cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice);
        double t2 = bench_now();
        d2h = t1 - t0 < d2h ? t1 - t0 : d2h;
        h2d = t2 - t1 < h2d ? t2 - t1 : h2d;
    }
    for (unsigned r = 0; r < reps; r++) {
        cks_version_params_t vp = {0};
        gpu_wait_t w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, nobj, CKS_OK, 0};
        cks_restore_h rh;
        vp.job     = "bench-gpu";
        vp.version = r + 1;
        if (cks_version_begin(c, &vp) != CKS_OK) {
            fprintf(stderr, "ckstore-bench --gpu: begin failed\n");
            goto out;
        }
        /* every object's put at once, as a trainer snapshots its shards */
        double t0 = bench_now();
        for (unsigned i = 0; i < nobj; i++) {
            cks_put_params_t p = {0};
            uint64_t off, len;
            char key[32];
            gpu_part(size, nobj, i, key, &off, &len);
            p.field_mask = CKS_PUT_FIELD_MEM_TYPE | CKS_PUT_FIELD_COPIED;
            p.job        = vp.job;
            p.version    = vp.version;
            p.key        = key;
            p.buffer     = (uint8_t *)dev + off;
            p.size       = len;
            p.mem_type   = CKS_MEM_CUDA;
            p.copied_cb  = gpu_copied_cb;
            p.copied_arg = &w;
            gpu_count(&w, cks_put_nb(c, &p, gpu_done_cb, &w));
        }
        cks_status_t st = gpu_wait_all(&w);
        double t1 = bench_now();
        if (st != CKS_OK) {
            char err[256];
            cks_client_last_error(c, err, sizeof(err));
            fprintf(stderr, "ckstore-bench --gpu: put: %s (%s)\n", cks_status_string(st), err);
            goto out;
        }
        put   = t1 - t0 < put ? t1 - t0 : put;
        stall = w.t_copied - t0 < stall ? w.t_copied - t0 : stall;
        if (r == 0) {
            put1   = t1 - t0;
            stall1 = w.t_copied - t0;
        }
        if (cks_version_seal(c, vp.job, vp.version) != CKS_OK ||
            cks_restore_open(c, vp.job, vp.version, &rh) != CKS_OK) {
            fprintf(stderr, "ckstore-bench --gpu: seal or open failed\n");
            goto out;
        }
        uint64_t *lens = calloc(nobj, sizeof(*lens));
        if (lens == NULL) {
            cks_restore_close(rh);
            goto out;
        }
        w.left = nobj;
        t0     = bench_now();
        for (unsigned i = 0; i < nobj; i++) {
            cks_get_params_t g = {0};
            uint64_t off, len;
            char key[32];
            gpu_part(size, nobj, i, key, &off, &len);
            g.field_mask  = CKS_GET_FIELD_MEM_TYPE;
            g.key         = key;
            g.buffer      = (uint8_t *)dev + off;
            g.buffer_size = len;
            g.mem_type    = CKS_MEM_CUDA;
            gpu_count(&w, cks_get_nb(rh, &g, &lens[i], gpu_done_cb, &w));
        }
        st = gpu_wait_all(&w);
        t1 = bench_now();
        cks_restore_close(rh);
        (void)cks_version_delete(c, vp.job, vp.version);
        for (unsigned i = 0; st == CKS_OK && i < nobj; i++) {
            uint64_t off, len;
            char key[32];
            gpu_part(size, nobj, i, key, &off, &len);
            st = lens[i] == len ? CKS_OK : CKS_ERR_INTERNAL;
        }
        free(lens);
        if (st != CKS_OK) {
            fprintf(stderr, "ckstore-bench --gpu: get: %s\n", cks_status_string(st));
            goto out;
        }
        get = t1 - t0 < get ? t1 - t0 : get;
        if (r == 0) {
            get1 = t1 - t0;
        }
    }
    cks_client_stats_t s;
    cks_client_stats(c, &s);
    printf("gpu path: %s\n", s.gpu_path == CKS_GPU_PATH_DIRECT   ? "direct (UCX moves CUDA memory)"
                             : s.gpu_path == CKS_GPU_PATH_STAGED ? "staged (pinned host ring)"
                                                                 : "none");
    printf("snapshot %llu bytes in %u object%s, best of %u (first repetition, cold, in "
           "brackets)\n", (unsigned long long)size, nobj, nobj == 1 ? "" : "s", reps);
    printf("  D2H cudaMemcpy (pinned)  %8.2f GB/s\n", gbs(size, d2h));
    printf("  put device -> server     %8.2f GB/s   ratio %.2f (target >= 0.9)   [%.2f GB/s]\n",
           gbs(size, put), gbs(size, put) / gbs(size, d2h), gbs(size, put1));
    printf("  H2D cudaMemcpy (pinned)  %8.2f GB/s\n", gbs(size, h2d));
    printf("  get server -> device     %8.2f GB/s   ratio %.2f (target >= 0.9)   [%.2f GB/s]\n",
           gbs(size, get), gbs(size, get) / gbs(size, h2d), gbs(size, get1));
    printf("  trainer stall (to COPIED) %7.3f ms   one D2H copy %.3f ms   ratio %.2f   [%.3f ms]\n",
           stall * 1e3, d2h * 1e3, stall / d2h, stall1 * 1e3);
    rc = 0;
out:
    cudaFree(dev);
    cudaFreeHost(host);
    return rc;
}
#endif

int cks_bench_gpu_main(int argc, char **argv, int cluster)
{
    const char *map = NULL, *server = NULL;
    uint64_t size   = 256ull << 20;
    uint64_t slice  = 0; /* the staging ring: the library's default */
    unsigned slices = 0;
    unsigned reps   = 3;
    unsigned nobj   = 1;
    unsigned copy_threads = 0; /* the embedded server's default */
    int gpu = 0;
    char why[256];
    const bench_opt_t t[] = {
        BOPT("gpu", 0, FLAG, &gpu),
        BOPT("size", 0, SIZE, &size),
        BOPT("reps", 0, UINT, &reps, .lo = 1, .hi = 100),
        BOPT("objects", 0, UINT, &nobj, .lo = 1, .hi = 4096),
        BOPT("map", 0, STR, &map),
        BOPT("server", 0, STR, &server),
        BOPT("slice", 0, SIZE, &slice),
        BOPT("slices", 0, UINT, &slices, .hi = UINT_MAX),
        BOPT("copy-threads", 0, CALL, &copy_threads, .fn = bench_opt_copy_threads),
    };

    if (bench_opts_parse("ckstore-bench --gpu", t, sizeof(t) / sizeof(t[0]), argc, argv) !=
        0) {
        fprintf(stderr, "usage: ckstore-bench [cluster] --gpu [--size S] [--objects N] [--reps N] "
                        "[--slice S --slices N] [--copy-threads N] "
                        "[--server IP:PORT | --map FILE (cluster)]\n");
        return 2;
    }
    if (gpu_devices(why, sizeof(why)) == 0) {
        printf("ckstore-bench%s --gpu: %s; nothing measured\n", cluster ? " cluster" : "", why);
        return 0;
    }
#ifdef CKS_HAVE_CUDA
    bench_child_t child = {0};
    cks_client_params_t cp = {0};
    cks_client_h client = NULL;
    char addr[64], err[256];
    int rc = 1;

    if (cluster && map == NULL) {
        fprintf(stderr, "ckstore-bench cluster --gpu: give the cluster's map (--map FILE)\n");
        return 2;
    }
    if (!cluster && server == NULL) {
        child.copy_threads = copy_threads;
        if (bench_child_start(&child, size * 2 + (64ull << 20), 30, err, sizeof(err)) != 0) {
            fprintf(stderr, "ckstore-bench --gpu: %s\n", err);
            return 1;
        }
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", child.port);
        server = addr;
    }
    cp.field_mask = CKS_CLIENT_FIELD_TIMEOUT_MS | CKS_CLIENT_FIELD_NAME;
    cp.timeout_ms = 60000;
    cp.name       = "ckstore-bench-gpu";
    if (slice > 0 || slices > 0) { /* the staging ring: slices x slice bytes */
        cp.field_mask |= CKS_CLIENT_FIELD_STAGE;
        cp.stage_slice  = slice > 0 ? slice : 4ull << 20;
        cp.stage_slices = slices > 0 ? slices : 8;
    }
    if (cluster) {
        cp.field_mask |= CKS_CLIENT_FIELD_CLUSTER;
        cp.cluster = map;
    } else {
        cp.field_mask |= CKS_CLIENT_FIELD_SERVER;
        cp.server = server;
    }
    if (cks_client_create(&cp, &client) != CKS_OK) {
        fprintf(stderr, "ckstore-bench --gpu: cannot connect\n");
    } else {
        printf("server: %s; staging ring %u x %llu bytes%s\n", cluster ? map : server,
               slices > 0 ? slices : 8, (unsigned long long)(slice > 0 ? slice : 4ull << 20),
               slice > 0 || slices > 0 ? "" : " (the default)");
        rc = gpu_measure(client, size, nobj, reps);
        cks_client_destroy(client);
    }
    if (child.pid > 0) {
        bench_child_stop(&child, 30);
    }
    return rc;
#else
    (void)map;
    (void)server;
    (void)slice;
    (void)slices;
    (void)copy_threads;
    (void)nobj;
    return 0;
#endif
}
