/*
 * End-to-end: device memory, against real servers (a standalone one, and a
 * 3-server RS(2,1) cluster).
 *
 * stage_*: the staging pipeline (ring of host slices, slicing, ordering,
 * overlap of copies with sends, errors in the middle of an object, ring
 * wrap) through the same code as on a GPU, with the copy step done by a
 * host copy (CKS_STAGE_HOST=1, test builds only): "device" buffers are host
 * memory, so the bytes can be checked here.
 *
 * no_device: without a CUDA device a CUDA put or get is CKS_ERR_UNSUPPORTED
 * naming the reason, and CKS_MEM_AUTO on a host buffer is a host put.
 *
 * cuda_*: real device memory (built with the CUDA toolkit; skipped without
 * a device).
 */
#include "ckstore.h"
#include "cks_faults_gate.h"
#include "cks_test.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef CKS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define KiB (1ull << 10)
#define MiB (1ull << 20)

#define SLICE  (16 * KiB)
#define SLICES 3u

static cks_test_server_t srv;
static cks_test_cluster_t clu;
static int is_cluster;

static cks_client_h connect_staged(uint64_t slice, unsigned slices)
{
    cks_client_params_t p = {0};
    cks_client_h c        = NULL;
    p.field_mask   = CKS_CLIENT_FIELD_TIMEOUT_MS | CKS_CLIENT_FIELD_STAGE;
    p.timeout_ms   = 20000;
    p.stage_slice  = slice;
    p.stage_slices = slices;
    if (is_cluster) {
        p.field_mask |= CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC;
        p.cluster    = clu.map;
        p.ec_k       = 2;
        p.ec_m       = 1;
        p.chunk_size = 64 * KiB;
    } else {
        p.field_mask |= CKS_CLIENT_FIELD_SERVER;
        p.server = srv.addr;
    }
    cr_assert_eq(cks_client_create(&p, &c), CKS_OK);
    return c;
}

static void setup_single(void)
{
    is_cluster = 0;
    cr_assert_eq(cks_test_server_start(&srv, 64 * MiB), 0);
}

static void teardown_single(void)
{
    cks_test_server_cleanup(&srv);
}

static void setup_cluster(void)
{
    is_cluster = 1;
    cr_assert_eq(cks_test_cluster_start(&clu, 3, 3, 64 * MiB, -1, NULL), 0);
}

static void teardown_cluster(void)
{
    cks_test_cluster_cleanup(&clu);
}

/* The order callbacks ran in, as the tests see it. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int events[64];  /* +i: COPIED of put i; 100 + i: put i done */
    cks_status_t status[64];
    int n;
    int done;        /* puts done */
} trace_t;

typedef struct {
    trace_t *t;
    int id;
} trace_arg_t;

static void trace_add(trace_t *t, int ev, cks_status_t st, int is_done)
{
    pthread_mutex_lock(&t->lock);
    if (t->n < 64) {
        t->status[t->n]   = st;
        t->events[t->n++] = ev;
    }
    t->done += is_done;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

/* Wait until n calls are done, at most `secs` seconds (t->done says how
 * many are). */
static void trace_wait(trace_t *t, int n, int secs)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += secs;
    pthread_mutex_lock(&t->lock);
    while (t->done < n && pthread_cond_timedwait(&t->cond, &t->lock, &dl) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&t->lock);
}

static void copied_cb(void *arg, cks_status_t st)
{
    trace_arg_t *a = arg;
    trace_add(a->t, a->id, st, 0);
}

static void done_cb(void *arg, cks_status_t st)
{
    trace_arg_t *a = arg;
    trace_add(a->t, 100 + a->id, st, 1);
}

static cks_status_t put_dev(cks_client_h c, const char *job, uint64_t v, const char *key,
                            const void *buf, uint64_t size, cks_mem_type_t type)
{
    cks_put_params_t p = cks_test_put_params(job, v, key, buf, size);
    p.field_mask       = CKS_PUT_FIELD_MEM_TYPE;
    p.mem_type         = type;
    return cks_put(c, &p);
}

static cks_status_t get_dev(cks_restore_h r, const char *key, void *buf, uint64_t size,
                            uint64_t *len_p, uint32_t flags)
{
    cks_get_params_t g = cks_test_get_params(key, buf, size);
    g.field_mask       = CKS_GET_FIELD_MEM_TYPE | CKS_GET_FIELD_FLAGS;
    g.mem_type         = CKS_MEM_CUDA;
    g.flags            = flags;
    return cks_get(r, &g, len_p);
}

static void stage_env(const char *fail_slice)
{
    setenv("CKS_STAGE_HOST", "1", 1);
    if (fail_slice != NULL) {
        setenv("CKS_STAGE_FAIL_SLICE", fail_slice, 1);
    } else {
        unsetenv("CKS_STAGE_FAIL_SLICE");
    }
}

/* Sizes around the slice and the ring: empty, one byte, a slice less and
 * more one, the ring exactly and past it (wrap), many wraps, odd sizes. */
static const uint64_t sizes[] = {0,
                                 1,
                                 SLICE - 1,
                                 SLICE,
                                 SLICE + 1,
                                 SLICES * SLICE,
                                 SLICES * SLICE + 123,
                                 10 * SLICE + 4097,
                                 1 * MiB + 7,
                                 24 * MiB + 13}; /* a rendezvous-sized message */
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void roundtrip(void)
{
    uint64_t seed = cks_test_seed(0x57a6e);
    cks_client_h c;
    uint8_t *src[NSIZES], *dst;
    uint64_t staged = 0;
    char key[32];

    CKS_TEST_NEEDS_FAULT_POINTS();
    stage_env(NULL);
    c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "gpu", 1);
    for (size_t i = 0; i < NSIZES; i++) {
        src[i] = malloc(sizes[i] + 1);
        cks_test_fill(src[i], sizes[i], seed + i);
        snprintf(key, sizeof(key), "obj%zu", i);
        cr_assert_eq(put_dev(c, "gpu", 1, key, src[i], sizes[i], CKS_MEM_CUDA), CKS_OK,
                     "put %llu bytes", (unsigned long long)sizes[i]);
        staged += sizes[i];
    }
    /* CKS_MEM_AUTO: the host engine calls every buffer device memory */
    cr_assert_eq(put_dev(c, "gpu", 1, "auto", src[4], sizes[4], CKS_MEM_AUTO), CKS_OK);
    staged += sizes[4];
    cr_assert_eq(cks_version_seal(c, "gpu", 1), CKS_OK);

    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, "gpu", 1, &r), CKS_OK);
    dst = malloc(25 * MiB);
    for (size_t i = 0; i < NSIZES; i++) {
        uint64_t len = UINT64_MAX;
        snprintf(key, sizeof(key), "obj%zu", i);
        memset(dst, 0xee, sizes[i] + 1);
        cr_assert_eq(get_dev(r, key, dst, sizes[i] + 1, &len, CKS_GET_VERIFY), CKS_OK,
                     "get %llu bytes", (unsigned long long)sizes[i]);
        cr_assert_eq(len, sizes[i]);
        cr_assert(memcmp(dst, src[i], sizes[i]) == 0, "bytes of %s (%llu)", key,
                  (unsigned long long)sizes[i]);
        cr_assert_eq(dst[sizes[i]], 0xee, "a byte past the object was written");
        staged += sizes[i];
    }
    /* a byte range that starts and ends inside slices, across the ring */
    cks_get_params_t g = {0};
    uint64_t len = 0;
    g.field_mask  = CKS_GET_FIELD_MEM_TYPE | CKS_GET_FIELD_RANGE;
    g.key         = "obj8";
    g.buffer      = dst;
    g.buffer_size = 25 * MiB;
    g.mem_type    = CKS_MEM_CUDA;
    g.offset      = SLICE / 2 + 3;
    g.length      = 5 * SLICE + 11;
    cr_assert_eq(cks_get(r, &g, &len), CKS_OK);
    cr_assert_eq(len, g.length);
    cr_assert(memcmp(dst, src[8] + g.offset, g.length) == 0);
    staged += g.length;
    g.offset = sizes[8] - 10;
    g.length = 11;
    cr_assert_eq(cks_get(r, &g, &len), CKS_ERR_OUT_OF_RANGE);

    cks_client_stats_t s;
    cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
    cr_assert_eq(s.gpu_path, CKS_GPU_PATH_STAGED);
    cr_assert_eq(s.device_puts_direct, 0);
    cr_assert_eq(s.device_puts_staged, NSIZES); /* not the empty one; "auto" */
    /* larger than the ring: in parts */
    uint64_t larger = 0;
    for (size_t i = 0; i < NSIZES; i++) {
        larger += sizes[i] > SLICES * SLICE;
    }
    cr_assert_eq(s.staged_puts_in_parts, larger, "%llu puts in parts",
                 (unsigned long long)s.staged_puts_in_parts);
    cr_assert_eq(s.device_gets_staged, NSIZES + 2);
    cr_assert_eq(s.staged_bytes, staged, "%llu staged, %llu expected",
                 (unsigned long long)s.staged_bytes, (unsigned long long)staged);
    cks_restore_close(r);
    cks_client_destroy(c);
    for (size_t i = 0; i < NSIZES; i++) {
        free(src[i]);
    }
    free(dst);
}

Test(stage_single, roundtrip_sizes_ring_wrap, .init = setup_single, .fini = teardown_single,
     .timeout = 120)
{
    roundtrip();
}

Test(stage_cluster, roundtrip_sizes_ring_wrap, .init = setup_cluster,
     .fini = teardown_cluster, .timeout = 180)
{
    roundtrip();
}

/* A ring larger than what gets use (32 MiB, in slices of at most 4 MiB:
 * CKS_STAGE_GET_BYTES): 10 slots of 5 MiB. Puts go through all of it (each
 * of these objects fits in it: none goes in parts, the one of 33 MiB
 * neither); gets through 4 MiB of each of 8 slots. Objects around both
 * slice sizes and a range across many get slices come back exactly. */
static void large_ring(void)
{
    static const uint64_t lsz[] = {1, 4 * MiB - 1, 4 * MiB + 1, 5 * MiB + 3, 33 * MiB + 9};
    enum { N = sizeof(lsz) / sizeof(lsz[0]) };
    uint64_t seed = cks_test_seed(0x1a26e);
    uint8_t *src[N], *dst = malloc(34 * MiB);
    char key[32];

    CKS_TEST_NEEDS_FAULT_POINTS();
    stage_env(NULL);
    cks_client_h c = connect_staged(5 * MiB, 10);
    cks_test_begin(c, "gpu", 3);
    for (size_t i = 0; i < N; i++) {
        src[i] = malloc(lsz[i]);
        cks_test_fill(src[i], lsz[i], seed + i);
        snprintf(key, sizeof(key), "big%zu", i);
        cr_assert_eq(put_dev(c, "gpu", 3, key, src[i], lsz[i], CKS_MEM_CUDA), CKS_OK);
    }
    cr_assert_eq(cks_version_seal(c, "gpu", 3), CKS_OK);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, "gpu", 3, &r), CKS_OK);
    for (size_t i = 0; i < N; i++) {
        uint64_t len = 0;
        snprintf(key, sizeof(key), "big%zu", i);
        memset(dst, 0xee, lsz[i] + 1);
        cr_assert_eq(get_dev(r, key, dst, lsz[i] + 1, &len, CKS_GET_VERIFY), CKS_OK, "%s", key);
        cr_assert_eq(len, lsz[i]);
        cr_assert(memcmp(dst, src[i], lsz[i]) == 0, "bytes of %s", key);
        cr_assert_eq(dst[lsz[i]], 0xee, "a byte past %s was written", key);
    }
    cks_get_params_t g = {0};
    uint64_t len       = 0;
    g.field_mask       = CKS_GET_FIELD_MEM_TYPE | CKS_GET_FIELD_RANGE;
    g.key              = "big4";
    g.buffer           = dst;
    g.buffer_size      = 34 * MiB;
    g.mem_type         = CKS_MEM_CUDA;
    g.offset           = 5 * MiB + 3;
    g.length           = 25 * MiB + 4099;
    cr_assert_eq(cks_get(r, &g, &len), CKS_OK);
    cr_assert(len == g.length && memcmp(dst, src[4] + g.offset, g.length) == 0, "the range");
    cks_client_stats_t st;
    cr_assert_eq(cks_client_stats(c, &st), CKS_OK);
    cr_assert_eq(st.staged_puts_in_parts, 0, "%llu puts in parts",
                 (unsigned long long)st.staged_puts_in_parts);
    cr_assert_eq(st.device_gets_staged, N + 1);
    cks_restore_close(r);
    cks_client_destroy(c);
    for (size_t i = 0; i < N; i++) {
        free(src[i]);
    }
    free(dst);
}

Test(stage_single, gets_use_their_share_of_a_large_ring, .init = setup_single,
     .fini = teardown_single, .timeout = 120)
{
    large_ring();
}

Test(stage_cluster, gets_use_their_share_of_a_large_ring, .init = setup_cluster,
     .fini = teardown_cluster, .timeout = 180)
{
    large_ring();
}

/* Non-blocking puts of objects larger than the ring: each object's COPIED
 * comes before its STORED (its last slices were copied while the first
 * ones were sent: with a ring smaller than the object there is no other
 * way), and the objects complete in the order they were put. */
static void order_overlap(void)
{
    uint64_t seed = cks_test_seed(0x0de5);
    enum { N = 6 };
    trace_t t = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    trace_arg_t args[N];
    uint8_t *src[N];
    uint64_t size[N];
    char key[N][16];
    cks_client_h c;

    CKS_TEST_NEEDS_FAULT_POINTS();
    stage_env(NULL);
    c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "ord", 7);
    for (int i = 0; i < N; i++) {
        size[i] = (uint64_t)(SLICES + 2 + i) * SLICE + (uint64_t)i * 511 + 1;
        src[i]  = malloc(size[i]);
        cks_test_fill(src[i], size[i], seed + (uint64_t)i);
        snprintf(key[i], sizeof(key[i]), "k%d", i);
        args[i].t = &t;
        args[i].id = i;
        cks_put_params_t p = {0};
        p.field_mask = CKS_PUT_FIELD_MEM_TYPE | CKS_PUT_FIELD_COPIED;
        p.job        = "ord";
        p.version    = 7;
        p.key        = key[i];
        p.buffer     = src[i];
        p.size       = size[i];
        p.mem_type   = CKS_MEM_CUDA;
        p.copied_cb  = copied_cb;
        p.copied_arg = &args[i];
        cr_assert_eq(cks_put_nb(c, &p, done_cb, &args[i]), CKS_INPROGRESS);
    }
    trace_wait(&t, N, 120);
    cr_assert_eq(t.done, N, "puts done: %d of %d", t.done, N);
    cr_assert_eq(t.n, 2 * N);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(t.events[2 * i], i, "event %d: %d (COPIED of put %d expected)", 2 * i,
                     t.events[2 * i], i);
        cr_assert_eq(t.events[2 * i + 1], 100 + i, "event %d: %d (put %d done expected)",
                     2 * i + 1, t.events[2 * i + 1], i);
        cr_assert_eq(t.status[2 * i], CKS_OK);
        cr_assert_eq(t.status[2 * i + 1], CKS_OK);
    }
    cr_assert_eq(cks_version_seal(c, "ord", 7), CKS_OK);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, "ord", 7, &r), CKS_OK);
    for (int i = 0; i < N; i++) {
        uint8_t *dst = malloc(size[i]);
        uint64_t len = 0;
        cr_assert_eq(get_dev(r, key[i], dst, size[i], &len, 0), CKS_OK);
        cr_assert(len == size[i] && memcmp(dst, src[i], size[i]) == 0, "bytes of %s", key[i]);
        free(dst);
        free(src[i]);
    }
    cks_restore_close(r);
    cks_client_destroy(c);
}

/* Non-blocking puts of objects that fit in the ring (1 to 3 slices): each
 * is copied whole, then sent from its slots while the next ones are copied
 * into the free slots. Every COPIED comes in the order of the puts and
 * before that put's own STORED; every object restores exactly. */
static void small_objects(void)
{
    uint64_t seed = cks_test_seed(0x5a11);
    enum { N = 12 };
    trace_t t = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    trace_arg_t args[N];
    uint8_t *src[N];
    uint64_t size[N];
    char key[N][16];
    cks_client_h c;

    CKS_TEST_NEEDS_FAULT_POINTS();
    stage_env(NULL);
    c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "small", 2);
    for (int i = 0; i < N; i++) {
        size[i] = (uint64_t)(i % SLICES) * SLICE + 1 + (uint64_t)i * 97;
        src[i]  = malloc(size[i]);
        cks_test_fill(src[i], size[i], seed + (uint64_t)i);
        snprintf(key[i], sizeof(key[i]), "s%d", i);
        args[i].t  = &t;
        args[i].id = i;
        cks_put_params_t p = {0};
        p.field_mask = CKS_PUT_FIELD_MEM_TYPE | CKS_PUT_FIELD_COPIED;
        p.job        = "small";
        p.version    = 2;
        p.key        = key[i];
        p.buffer     = src[i];
        p.size       = size[i];
        p.mem_type   = CKS_MEM_CUDA;
        p.copied_cb  = copied_cb;
        p.copied_arg = &args[i];
        cr_assert_eq(cks_put_nb(c, &p, done_cb, &args[i]), CKS_INPROGRESS);
    }
    trace_wait(&t, N, 120);
    cr_assert_eq(t.done, N, "puts done: %d of %d", t.done, N);
    cr_assert_eq(t.n, 2 * N);
    int next_copied = 0, copied_seen[N] = {0};
    for (int e = 0; e < t.n; e++) {
        cr_assert_eq(t.status[e], CKS_OK, "event %d: %d", e, t.events[e]);
        if (t.events[e] < 100) {
            cr_assert_eq(t.events[e], next_copied, "COPIED of put %d, %d expected",
                         t.events[e], next_copied);
            copied_seen[next_copied++] = 1;
        } else {
            cr_assert(copied_seen[t.events[e] - 100], "put %d STORED before COPIED",
                      t.events[e] - 100);
        }
    }
    cr_assert_eq(cks_version_seal(c, "small", 2), CKS_OK);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, "small", 2, &r), CKS_OK);
    for (int i = 0; i < N; i++) {
        uint8_t *dst = malloc(size[i]);
        uint64_t len = 0;
        cr_assert_eq(get_dev(r, key[i], dst, size[i], &len, CKS_GET_VERIFY), CKS_OK);
        cr_assert(len == size[i] && memcmp(dst, src[i], size[i]) == 0, "bytes of %s", key[i]);
        free(dst);
        free(src[i]);
    }
    cks_client_stats_t s;
    cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
    cr_assert_eq(s.device_puts_staged, N);
    cks_restore_close(r);
    cks_client_destroy(c);
}

Test(stage_single, small_objects_in_flight_together, .init = setup_single,
     .fini = teardown_single, .timeout = 120)
{
    small_objects();
}

Test(stage_cluster, small_objects_in_flight_together, .init = setup_cluster,
     .fini = teardown_cluster, .timeout = 180)
{
    small_objects();
}

/* Gets queued one behind the other go through the ring as one stream (a
 * batch): N non-blocking gets at once - objects of every size around the
 * ring, an empty one, a byte range, a key that does not exist - each end
 * with its own outcome, and the bytes are exact. Then the same with the
 * client's 5th copy failing (CKS_STAGE_FAIL_SLICE): exactly one get fails,
 * with the copy's error, and every other one is exact. */
/* A batch of staged gets (the trace reset first): key i into dst[i], whose
 * size[i] + 1 bytes are set to 0xee first, with `flags`; get `range` (-1:
 * none) takes `length` bytes from `off` instead of the whole object. */
typedef struct {
    int n;
    char (*key)[16];
    uint8_t **dst;
    const uint64_t *size;
    uint64_t *len;
    trace_arg_t *args;
    int range;
    uint64_t off, length;
} batch_t;

static void gets_start(cks_restore_h r, const batch_t *b, trace_t *t, uint32_t flags)
{
    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    for (int i = 0; i < b->n; i++) {
        cks_get_params_t g = cks_test_get_params(b->key[i], b->dst[i], b->size[i] + 1);
        g.field_mask       = CKS_GET_FIELD_MEM_TYPE | CKS_GET_FIELD_FLAGS;
        g.mem_type         = CKS_MEM_CUDA;
        g.flags            = flags;
        if (i == b->range) {
            g.field_mask |= CKS_GET_FIELD_RANGE;
            g.offset = b->off;
            g.length = b->length;
        }
        memset(b->dst[i], 0xee, b->size[i] + 1);
        b->len[i]     = UINT64_MAX;
        b->args[i].t  = t;
        b->args[i].id = i;
        cr_assert_eq(cks_get_nb(r, &g, &b->len[i], done_cb, &b->args[i]), CKS_INPROGRESS);
    }
}

static void gets_in_a_batch(void)
{
    uint64_t seed = cks_test_seed(0xba7c);
    enum { N = 10 };
    static const uint64_t size[N] = {0,           1,      SLICE - 1,     SLICE,
                                     SLICE + 1,   SLICES * SLICE,        SLICES * SLICE + 5,
                                     5 * SLICE + 9, 64 * KiB + 3,        3 * SLICE};
    uint8_t *src[N], *dst[N];
    uint64_t len[N];
    char key[N][16];
    trace_t t = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    trace_arg_t args[N];
    cks_client_h c;
    cks_restore_h r;

    CKS_TEST_NEEDS_FAULT_POINTS();
    stage_env(NULL);
    c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "batch", 1);
    for (int i = 0; i < N; i++) {
        src[i] = malloc(size[i] + 1);
        dst[i] = malloc(size[i] + 1);
        cks_test_fill(src[i], size[i], seed + (uint64_t)i);
        snprintf(key[i], sizeof(key[i]), "b%d", i);
        if (i != N - 1) { /* the last is never put: NO_SUCH_KEY */
            cr_assert_eq(put_dev(c, "batch", 1, key[i], src[i], size[i], CKS_MEM_CUDA), CKS_OK);
        }
    }
    cr_assert_eq(cks_version_seal(c, "batch", 1), CKS_OK);
    for (int round = 0; round < 2; round++) {
        if (round == 1) { /* a client whose 5th copy fails */
            cks_client_destroy(c);
            stage_env("4");
            c = connect_staged(SLICE, SLICES);
        }
        cr_assert_eq(cks_restore_open(c, "batch", 1, &r), CKS_OK);
        /* get 7: a byte range across slices */
        batch_t b = {N, key, dst, size, len, args, 7, SLICE / 2, 3 * SLICE + 1};
        gets_start(r, &b, &t, CKS_GET_VERIFY);
        trace_wait(&t, N, 120);
        cr_assert_eq(t.done, N, "gets done: %d of %d", t.done, N);
        cks_status_t st[N];
        for (int e = 0; e < t.n; e++) {
            st[t.events[e] - 100] = t.status[e];
        }
        int failed = 0;
        for (int i = 0; i < N; i++) {
            if (i == N - 1) {
                cr_assert_eq(st[i], CKS_ERR_NO_SUCH_KEY, "get %d: %s", i, cks_status_name(st[i]));
                continue;
            }
            if (round == 1 && st[i] == CKS_ERR_INTERNAL) {
                failed++; /* the injected copy failure */
                continue;
            }
            cr_assert_eq(st[i], CKS_OK, "round %d, get %d: %s", round, i, cks_status_name(st[i]));
            uint64_t off = i == 7 ? SLICE / 2 : 0, want = i == 7 ? 3 * SLICE + 1 : size[i];
            cr_assert_eq(len[i], want, "get %d: %llu bytes", i, (unsigned long long)len[i]);
            cr_assert(memcmp(dst[i], src[i] + off, want) == 0, "round %d: bytes of get %d",
                      round, i);
            cr_assert_eq(dst[i][want], 0xee, "get %d wrote past its bytes", i);
        }
        cr_assert_eq(failed, round, "round %d: %d gets failed", round, failed);
        cks_restore_close(r);
    }
    cks_client_destroy(c);
    for (int i = 0; i < N; i++) {
        free(src[i]);
        free(dst[i]);
    }
}

Test(stage_single, gets_queued_together_share_the_ring, .init = setup_single,
     .fini = teardown_single, .timeout = 120)
{
    gets_in_a_batch();
}

Test(stage_cluster, gets_queued_together_share_the_ring, .init = setup_cluster,
     .fini = teardown_cluster, .timeout = 180)
{
    gets_in_a_batch();
}

/* Staged gets from a cluster with a server down (m = 1): a fresh client's
 * gets in a batch - whole objects of one to several stripes, and a byte
 * range - decode what the dead server held and restore every object
 * exactly, with CKS_GET_VERIFY and without. */
Test(stage_cluster, gets_with_a_server_down_are_exact, .init = setup_cluster,
     .fini = teardown_cluster, .timeout = 180)
{
    enum { N = 6 };
    static const uint64_t size[N] = {1, SLICE + 1, SLICES * SLICE + 5, 10 * SLICE + 7,
                                     300 * KiB + 3, 10 * SLICE + 7};
    uint8_t *src[N], *dst[N];
    uint64_t len[N], seed = cks_test_seed(0xd0e1);
    char key[N][16];
    trace_t t;
    trace_arg_t args[N];
    cks_restore_h r;

    CKS_TEST_NEEDS_FAULT_POINTS();
    stage_env(NULL);
    cks_client_h c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "down", 2);
    for (int i = 0; i < N; i++) {
        src[i] = malloc(size[i] + 1);
        dst[i] = malloc(size[i] + 1);
        cr_assert(src[i] != NULL && dst[i] != NULL);
        cks_test_fill(src[i], size[i], seed + (uint64_t)i);
        snprintf(key[i], sizeof(key[i]), "d%d", i);
        if (i < N - 1) { /* the last is a range of d3 */
            cr_assert_eq(put_dev(c, "down", 2, key[i], src[i], size[i], CKS_MEM_CUDA), CKS_OK);
        }
    }
    memcpy(src[N - 1], src[3], size[3]);
    snprintf(key[N - 1], sizeof(key[N - 1]), "d3");
    cr_assert_eq(cks_version_seal(c, "down", 2), CKS_OK);
    cks_client_destroy(c);
    int primary = cks_test_primary(clu.map, "down", "d4", 2, 1);
    cr_assert_geq(primary, 0);
    cks_test_cluster_kill(&clu, (size_t)primary);

    c = connect_staged(SLICE, SLICES); /* a fresh client, as a replacement rank */
    for (int round = 0; round < 2; round++) {
        uint32_t flags = round == 0 ? CKS_GET_VERIFY : 0;
        cr_assert_eq(cks_restore_open(c, "down", 2, &r), CKS_OK);
        /* the last: a byte range across slices and a stripe */
        batch_t b = {N, key, dst, size, len, args, N - 1, SLICE / 2, 8 * SLICE + 1};
        gets_start(r, &b, &t, flags);
        trace_wait(&t, N, 120);
        cr_assert_eq(t.done, N, "gets done: %d of %d", t.done, N);
        for (int e = 0; e < t.n; e++) {
            int i = t.events[e] - 100;
            cr_assert_eq(t.status[e], CKS_OK, "round %d, get %d: %s", round, i,
                         cks_status_name(t.status[e]));
            uint64_t off = i == N - 1 ? SLICE / 2 : 0, want = i == N - 1 ? 8 * SLICE + 1 : size[i];
            cr_assert_eq(len[i], want, "get %d: %llu bytes", i, (unsigned long long)len[i]);
            cr_assert(memcmp(dst[i], src[i] + off, want) == 0, "round %d: bytes of get %d",
                      round, i);
            cr_assert_eq(dst[i][want], 0xee, "get %d wrote past its bytes", i);
        }
        cks_restore_close(r);
        pthread_mutex_destroy(&t.lock);
        pthread_cond_destroy(&t.cond);
    }
    cks_client_destroy(c);
    for (int i = 0; i < N; i++) {
        free(src[i]);
        free(dst[i]);
    }
}

/* A client destroyed with staged puts queued and in flight (objects that fit
 * in the ring and larger ones): every callback runs exactly once, with
 * CKS_OK or CKS_ERR_CANCELED, and the destroy returns. */
Test(stage_single, destroy_with_puts_in_flight, .init = setup_single,
     .fini = teardown_single, .timeout = 120)
{
    enum { N = 10 };
    trace_t t = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    trace_arg_t args[N];
    uint64_t size = 8 * SLICE + 5;
    uint8_t *src = malloc(size);
    char key[N][16];
    cks_client_h c;

    CKS_TEST_NEEDS_FAULT_POINTS();
    stage_env(NULL);
    cks_test_fill(src, size, cks_test_seed(0xde57));
    c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "bye", 1);
    for (int i = 0; i < N; i++) {
        snprintf(key[i], sizeof(key[i]), "b%d", i);
        args[i].t  = &t;
        args[i].id = i;
        cks_put_params_t p = {0};
        p.field_mask = CKS_PUT_FIELD_MEM_TYPE | CKS_PUT_FIELD_COPIED;
        p.job        = "bye";
        p.version    = 1;
        p.key        = key[i];
        p.buffer     = src;
        p.size       = i % 2 ? size : SLICE + (uint64_t)i;
        p.mem_type   = CKS_MEM_CUDA;
        p.copied_cb  = copied_cb;
        p.copied_arg = &args[i];
        cr_assert_eq(cks_put_nb(c, &p, done_cb, &args[i]), CKS_INPROGRESS);
    }
    cks_client_destroy(c);
    cr_assert_eq(t.done, N, "callbacks: %d of %d", t.done, N);
    cr_assert_eq(t.n, 2 * N, "events: %d", t.n);
    for (int e = 0; e < t.n; e++) {
        cr_assert(t.status[e] == CKS_OK || t.status[e] == CKS_ERR_CANCELED,
                  "event %d (%d): %s", e, t.events[e], cks_status_name(t.status[e]));
    }
    free(src);
}

Test(stage_single, order_and_overlap, .init = setup_single, .fini = teardown_single,
     .timeout = 120)
{
    order_overlap();
}

Test(stage_cluster, order_and_overlap, .init = setup_cluster, .fini = teardown_cluster,
     .timeout = 180)
{
    order_overlap();
}

/* Errors in the middle of an object (an injected copy failure: the Nth
 * copy of the client, CKS_STAGE_FAIL_SLICE=N).
 * An object that fits in the ring (3 slices) fails at its slice 1: the
 * put fails with the copy's error before the server saw a byte, so the
 * object is not stored; the next object (7 slices, larger than the ring)
 * goes through the same ring and restores exactly.
 * A larger object fails at its slice 2, while its first slices are on
 * their way as parts: the put fails with the copy's error and the reason,
 * it is given up at the server (a cancel), the version goes on without it,
 * and the ring serves the next object.
 * A get whose copy fails at its slice 3 fails; the same get again
 * succeeds, exactly. */
static void error_mid_object(void)
{
    uint64_t seed = cks_test_seed(0xe770);
    uint64_t small = 2 * SLICE + 77, size = 6 * SLICE + 77;
    uint8_t *a = malloc(size), *b = malloc(size), *dst = malloc(size);
    char err[256];
    cks_client_h c;
    cks_restore_h r;
    uint64_t len = 0;

    CKS_TEST_NEEDS_FAULT_POINTS();
    cks_test_fill(a, size, seed);
    cks_test_fill(b, size, seed + 1);

    stage_env("1"); /* copies of this client: put "a" 0..1 (fails), put "b" 2..8 */
    c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "err", 3);
    cr_assert_eq(put_dev(c, "err", 3, "a", a, small, CKS_MEM_CUDA), CKS_ERR_INTERNAL);
    cks_client_last_error(c, err, sizeof(err));
    cr_assert(strstr(err, "was not stored") != NULL, "last error: %s", err);
    cr_assert_eq(put_dev(c, "err", 3, "b", b, size, CKS_MEM_CUDA), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "err", 3), CKS_OK);
    cr_assert_eq(cks_restore_open(c, "err", 3, &r), CKS_OK);
    cks_object_info_t info;
    cr_assert_eq(cks_object_stat(r, "a", &info), CKS_ERR_NO_SUCH_KEY,
                 "the failed put's object was stored");
    cr_assert_eq(get_dev(r, "b", dst, size, &len, CKS_GET_VERIFY), CKS_OK);
    cr_assert(len == size && memcmp(dst, b, size) == 0);
    cks_restore_close(r);
    cks_client_destroy(c);

    stage_env("2"); /* put "c" (7 slices) fails at its slice 2 */
    c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "err", 4);
    cr_assert_eq(put_dev(c, "err", 4, "c", a, size, CKS_MEM_CUDA), CKS_ERR_INTERNAL);
    cks_client_last_error(c, err, sizeof(err));
    cr_assert(strstr(err, "staged copy") != NULL, "last error: %s", err);
    cks_version_info_t vi;
    /* given up at the server: the version is still open */
    cr_assert(strstr(err, "was not stored") != NULL, "last error: %s", err);
    cr_assert_eq(cks_version_stat(c, "err", 4, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_OPEN, "state %s", cks_vstate_string(vi.state));
    /* the ring serves the next object */
    cr_assert_eq(put_dev(c, "err", 4, "d", b, size, CKS_MEM_CUDA), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "err", 4), CKS_OK);
    cr_assert_eq(cks_restore_open(c, "err", 4, &r), CKS_OK);
    cr_assert_eq(get_dev(r, "d", dst, size, &len, CKS_GET_VERIFY), CKS_OK);
    cr_assert(len == size && memcmp(dst, b, size) == 0);
    cr_assert_eq(cks_object_stat(r, "c", &info), CKS_ERR_NO_SUCH_KEY,
                 "the failed put's object was stored");
    cks_restore_close(r);
    cks_client_destroy(c);

    stage_env("3"); /* the first get fails at its slice 3 */
    c = connect_staged(SLICE, SLICES);
    cr_assert_eq(cks_restore_open(c, "err", 3, &r), CKS_OK);
    memset(dst, 0, size);
    cr_assert_eq(get_dev(r, "b", dst, size, &len, 0), CKS_ERR_INTERNAL);
    cr_assert_eq(get_dev(r, "b", dst, size, &len, CKS_GET_VERIFY), CKS_OK);
    cr_assert(len == size && memcmp(dst, b, size) == 0);
    cks_client_stats_t s;
    cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
    cr_assert_eq(s.device_gets_staged, 2);
    cks_restore_close(r);
    cks_client_destroy(c);
    free(a);
    free(b);
    free(dst);
}

/* A put in parts whose primary is down when it starts: its PUT goes to the
 * group's next member, and its parts follow it to the server it was sent
 * to; the object restores exactly with the primary still down. */
Test(stage_cluster, a_put_in_parts_follows_its_put_to_the_next_member,
     .init = setup_cluster, .fini = teardown_cluster, .timeout = 180)
{
    uint64_t size = 6 * SLICE + 77; /* 7 slices: larger than the ring */
    uint8_t *a = malloc(size), *dst = malloc(size);
    uint64_t len = 0;
    cks_restore_h r;
    cks_client_stats_t s;

    CKS_TEST_NEEDS_FAULT_POINTS();
    cr_assert(a != NULL && dst != NULL);
    cks_test_fill(a, size, cks_test_seed(0x9a77));
    int primary = cks_test_primary(clu.map, "down", "big", 2, 1);
    cr_assert_geq(primary, 0);
    cks_test_cluster_kill(&clu, (size_t)primary);
    stage_env(NULL);
    cks_client_h c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "down", 1);
    cr_assert_eq(put_dev(c, "down", 1, "big", a, size, CKS_MEM_CUDA), CKS_OK);
    cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
    cr_assert_eq(s.staged_puts_in_parts, 1);
    cr_assert_eq(cks_version_seal(c, "down", 1), CKS_OK);
    cr_assert_eq(cks_restore_open(c, "down", 1, &r), CKS_OK);
    cr_assert_eq(get_dev(r, "big", dst, size, &len, CKS_GET_VERIFY), CKS_OK);
    cr_assert(len == size && memcmp(dst, a, size) == 0, "WRONG BYTES");
    cks_restore_close(r);
    cks_client_destroy(c);
    free(a);
    free(dst);
}

/* A put in parts whose primary is killed mid-object: the stage thread is
 * held after the object's part 2 went to it (CKS_STAGE_PAUSE_PART) while
 * the test kills it. The PUT moves to the group's next member, and the
 * slices are copied and sent there again from the start; COPIED runs once,
 * after the last copy and before the put's own callback, both CKS_OK. The
 * object restores exactly with the primary still down, and the version
 * commits DEGRADED. */
Test(stage_cluster, a_put_in_parts_whose_primary_dies_mid_object_goes_again,
     .init = setup_cluster, .fini = teardown_cluster, .timeout = 180)
{
    uint64_t size = 9 * SLICE + 77; /* 10 slices: larger than the ring */
    uint8_t *a = malloc(size), *dst = malloc(size);
    trace_t t  = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    trace_arg_t arg = {&t, 0};
    char pause[320], env[340];
    uint64_t len = 0;
    cks_restore_h r;
    cks_client_stats_t s;
    cks_version_info_t vi;

    CKS_TEST_NEEDS_FAULT_POINTS();
    cr_assert(a != NULL && dst != NULL);
    cks_test_fill(a, size, cks_test_seed(0x3e5e));
    int primary = cks_test_primary(clu.map, "mid", "big", 2, 1);
    cr_assert_geq(primary, 0);
    snprintf(pause, sizeof(pause), "%s/stage-pause", clu.dir);
    snprintf(env, sizeof(env), "2:%s", pause);
    stage_env(NULL);
    setenv("CKS_STAGE_PAUSE_PART", env, 1);
    cks_client_h c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "mid", 1);
    cks_put_params_t p = cks_test_put_params("mid", 1, "big", a, size);
    p.field_mask |= CKS_PUT_FIELD_MEM_TYPE | CKS_PUT_FIELD_COPIED;
    p.mem_type    = CKS_MEM_CUDA;
    p.copied_cb   = copied_cb;
    p.copied_arg  = &arg;
    cr_assert_eq(cks_put_nb(c, &p, done_cb, &arg), CKS_INPROGRESS); /* its ring read it */
    unsetenv("CKS_STAGE_PAUSE_PART");
    /* the stage thread holds after part 2 went to the primary */
    for (int i = 0; i < 3000 && access(pause, F_OK) != 0; i++) {
        usleep(10 * 1000);
    }
    cr_assert_eq(access(pause, F_OK), 0, "the put never reached its part 2");
    cr_assert_eq(t.n, 0, "the put ended before its primary was killed");
    cks_test_cluster_kill(&clu, (size_t)primary);
    unlink(pause);
    trace_wait(&t, 1, 120);
    cr_assert_eq(t.done, 1, "the put did not end");
    cr_assert_eq(t.n, 2, "%d callbacks", t.n);
    cr_assert(t.events[0] == 0 && t.events[1] == 100, "COPIED, then done: %d, %d",
              t.events[0], t.events[1]);
    cr_assert(t.status[0] == CKS_OK && t.status[1] == CKS_OK, "COPIED %s, done %s",
              cks_status_name(t.status[0]), cks_status_name(t.status[1]));
    cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
    cr_assert_eq(s.staged_puts_in_parts, 1);
    cr_assert_eq(s.staged_puts_resent, 1, "%llu puts sent again",
                 (unsigned long long)s.staged_puts_resent);
    cr_assert_eq(cks_version_seal(c, "mid", 1), CKS_OK);
    cr_assert_eq(cks_version_stat(c, "mid", 1, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_DEGRADED, "state %s", cks_vstate_string(vi.state));
    cr_assert_eq(cks_restore_open(c, "mid", 1, &r), CKS_OK);
    cr_assert_eq(get_dev(r, "big", dst, size, &len, CKS_GET_VERIFY), CKS_OK);
    cr_assert(len == size && memcmp(dst, a, size) == 0, "WRONG BYTES");
    cks_restore_close(r);
    cks_client_destroy(c);
    free(a);
    free(dst);
}

Test(stage_single, error_mid_object_then_next, .init = setup_single, .fini = teardown_single,
     .timeout = 120)
{
    error_mid_object();
}

Test(stage_cluster, error_mid_object_then_next, .init = setup_cluster,
     .fini = teardown_cluster, .timeout = 180)
{
    error_mid_object();
}

static int cuda_devices(void)
{
#ifdef CKS_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

/* A standalone server sends the slices of a whole-object staged get without
 * checking the object's CRC on each (the reader checks it over the slices):
 * an object that rotted in the server's memory is still an error - whole
 * (checked by the reader, without CKS_GET_VERIFY), as a range (checked by
 * the server), and as a host get - never CKS_OK with other bytes. */
Test(stage_single, rotted_object_is_an_error_not_other_bytes, .init = setup_single,
     .fini = teardown_single, .timeout = 60)
{
    const uint64_t size = 40 * SLICE + 77; /* many slices, many ring wraps */
    uint8_t *src = malloc(size), *dst = malloc(size);
    cks_client_h c;
    cks_restore_h r;
    uint64_t len = 0;

    CKS_TEST_NEEDS_FAULT_POINTS();
    stage_env(NULL);
    cks_test_fill(src, size, cks_test_seed(0x707));
    c = connect_staged(SLICE, SLICES);
    cks_test_begin(c, "rot", 1);
    cr_assert_eq(put_dev(c, "rot", 1, "obj", src, size, CKS_MEM_CUDA), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "rot", 1), CKS_OK);
    cr_assert_eq(cks_restore_open(c, "rot", 1, &r), CKS_OK);
    cr_assert_eq(get_dev(r, "obj", dst, size, &len, 0), CKS_OK);
    cr_assert(len == size && memcmp(dst, src, size) == 0, "the bytes before the rot");

    /* the rot: in slice 30, far from the range read below */
    cr_assert_eq(cks_test_rot(srv.arena, src + 30 * SLICE + 5), 1);
    cr_assert_eq(get_dev(r, "obj", dst, size, &len, 0), CKS_ERR_CRC_MISMATCH,
                 "a staged whole get of a rotted object");
    cks_get_params_t g = {0};
    g.field_mask  = CKS_GET_FIELD_MEM_TYPE | CKS_GET_FIELD_RANGE;
    g.key         = "obj";
    g.buffer      = dst;
    g.buffer_size = size;
    g.mem_type    = CKS_MEM_CUDA;
    g.offset      = SLICE + 3;
    g.length      = 2 * SLICE;
    cr_assert_eq(cks_get(r, &g, &len), CKS_ERR_CRC_MISMATCH, "a staged range get");
    g.field_mask = 0;
    cr_assert_eq(cks_get(r, &g, &len), CKS_ERR_CRC_MISMATCH, "a host get");
    cks_restore_close(r);
    cks_client_destroy(c);
    free(src);
    free(dst);
}

/* Without a device: CUDA puts and gets are refused with the reason; AUTO on
 * a host buffer is a host transfer. */
Test(no_device, cuda_is_unsupported_auto_is_host, .init = setup_single,
     .fini = teardown_single, .timeout = 60)
{
    uint8_t buf[4096], dst[4096];
    char err[256];
    cks_client_h c;

    if (cuda_devices() > 0) {
        cr_skip_test("this machine has a CUDA device: the cuda_* tests run instead");
    }
    unsetenv("CKS_STAGE_HOST");
    c = connect_staged(SLICE, SLICES);
    cks_test_fill(buf, sizeof(buf), 5);
    cks_test_begin(c, "nodev", 1);
    cr_assert_eq(put_dev(c, "nodev", 1, "x", buf, sizeof(buf), CKS_MEM_CUDA),
                 CKS_ERR_UNSUPPORTED);
    cks_client_last_error(c, err, sizeof(err));
    cr_assert(strstr(err, "no CUDA device") != NULL, "last error: %s", err);
    cr_assert_eq(put_dev(c, "nodev", 1, "x", buf, sizeof(buf), CKS_MEM_AUTO), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "nodev", 1), CKS_OK);
    cks_restore_h r;
    uint64_t len = 0;
    cr_assert_eq(cks_restore_open(c, "nodev", 1, &r), CKS_OK);
    cr_assert_eq(get_dev(r, "x", dst, sizeof(dst), &len, 0), CKS_ERR_UNSUPPORTED);
    cks_get_params_t g = {0};
    g.field_mask  = CKS_GET_FIELD_MEM_TYPE;
    g.key         = "x";
    g.buffer      = dst;
    g.buffer_size = sizeof(dst);
    g.mem_type    = CKS_MEM_AUTO;
    cr_assert_eq(cks_get(r, &g, &len), CKS_OK);
    cr_assert(len == sizeof(buf) && memcmp(dst, buf, sizeof(buf)) == 0);
    cks_client_stats_t s;
    cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
    cr_assert_eq(s.gpu_path, CKS_GPU_PATH_NONE);
    cks_restore_close(r);
    cks_client_destroy(c);
}

/* Host memory staged through the ring (CKS_PUT_FIELD_STAGED), no GPU and
 * no test engine needed: each put's COPIED comes before its completion, and
 * its buffer is overwritten in its COPIED callback - the library never
 * reads it again - yet every object restores with the bytes it had. Sizes
 * around the slice and the ring (an object larger than the ring is sent
 * while it is copied). Without a device, device puts on the same client are
 * still refused with the reason. */
typedef struct {
    trace_arg_t ta;
    uint8_t *buf;
    uint64_t size;
} scribble_t;

static void scribble_copied(void *arg, cks_status_t st)
{
    scribble_t *s = arg;
    if (st == CKS_OK) {
        memset(s->buf, 0x5a, s->size); /* the caller's again */
    }
    copied_cb(&s->ta, st);
}

static void host_staged(void)
{
    uint64_t seed = cks_test_seed(0x4057);
    trace_t t     = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, {0}, 0, 0};
    scribble_t sc[NSIZES];
    uint8_t *buf[NSIZES], *orig[NSIZES], *dst = malloc(25 * MiB);
    uint64_t bytes = 0, puts = 0;
    char key[32];

    unsetenv("CKS_STAGE_HOST");
    unsetenv("CKS_STAGE_FAIL_SLICE");
    cks_client_h c = connect_staged(SLICE, SLICES);
    cr_assert_eq(cks_stage_prepare(NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_stage_prepare(c), CKS_OK, "the ring, set up before the first put");
    cks_test_begin(c, "hs", 1);
    for (size_t i = 0; i < NSIZES; i++) {
        buf[i]  = malloc(sizes[i] + 1);
        orig[i] = malloc(sizes[i] + 1);
        cks_test_fill(orig[i], sizes[i], seed + i);
        memcpy(buf[i], orig[i], sizes[i]);
        sc[i] = (scribble_t){{&t, (int)i}, buf[i], sizes[i]};
        snprintf(key, sizeof(key), "obj%zu", i);
        cks_put_params_t p = {0};
        p.field_mask = CKS_PUT_FIELD_STAGED | CKS_PUT_FIELD_COPIED;
        p.job        = "hs";
        p.version    = 1;
        p.key        = key;
        p.buffer     = buf[i];
        p.size       = sizes[i];
        p.copied_cb  = scribble_copied;
        p.copied_arg = &sc[i];
        cr_assert_eq(cks_put_nb(c, &p, done_cb, &sc[i].ta), CKS_INPROGRESS, "put %zu", i);
        bytes += sizes[i];
        puts += sizes[i] > 0;
    }
    trace_wait(&t, (int)NSIZES, 600);
    cr_assert_eq(t.done, (int)NSIZES, "%d of %zu puts completed", t.done, NSIZES);
    for (size_t i = 0; i < NSIZES; i++) { /* COPIED, then done, each once */
        int copied_at = -1, done_at = -1;
        for (int e = 0; e < t.n; e++) {
            cr_assert_eq(t.status[e], CKS_OK, "event %d: %s", t.events[e],
                         cks_status_name(t.status[e]));
            copied_at = t.events[e] == (int)i ? e : copied_at;
            done_at   = t.events[e] == 100 + (int)i ? e : done_at;
        }
        cr_assert(copied_at >= 0 && done_at > copied_at, "put %zu: COPIED at %d, done at %d",
                  i, copied_at, done_at);
        cr_assert(sizes[i] == 0 || buf[i][0] == 0x5a, "the COPIED callback ran on the buffer");
    }
    cks_client_stats_t s;
    cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
    cr_assert_eq(s.host_puts_staged, puts, "%llu host-staged puts",
                 (unsigned long long)s.host_puts_staged);
    cr_assert_eq(s.host_staged_bytes, bytes);
    cr_assert_eq(s.device_puts_staged, 0);
    if (cuda_devices() == 0) {
        cr_assert_eq(s.gpu_path, CKS_GPU_PATH_NONE);
        char err[256];
        cr_assert_eq(put_dev(c, "hs", 1, "dev", orig[1], sizes[1], CKS_MEM_CUDA),
                     CKS_ERR_UNSUPPORTED);
        cks_client_last_error(c, err, sizeof(err));
        cr_assert(strstr(err, "no CUDA device") != NULL, "last error: %s", err);
    }
    cr_assert_eq(cks_version_seal(c, "hs", 1), CKS_OK);

    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, "hs", 1, &r), CKS_OK);
    for (size_t i = 0; i < NSIZES; i++) {
        uint64_t len = UINT64_MAX;
        snprintf(key, sizeof(key), "obj%zu", i);
        cr_assert_eq(cks_test_get_whole(r, key, dst, 25 * MiB, &len), CKS_OK, "get %s", key);
        cr_assert_eq(len, sizes[i]);
        cr_assert(memcmp(dst, orig[i], sizes[i]) == 0, "bytes of %s (%llu)", key,
                  (unsigned long long)sizes[i]);
    }
    cks_restore_close(r);
    cks_client_destroy(c);
    for (size_t i = 0; i < NSIZES; i++) {
        free(buf[i]);
        free(orig[i]);
    }
    free(dst);
}

Test(stage_single, host_memory_staged_copied_then_stored, .init = setup_single,
     .fini = teardown_single, .timeout = 120)
{
    host_staged();
}

Test(stage_cluster, host_memory_staged_copied_then_stored, .init = setup_cluster,
     .fini = teardown_cluster, .timeout = 120)
{
    host_staged();
}

/* Real device memory: puts from and gets into cudaMalloc() buffers, sizes
 * around the slice, checked against host copies. */
Test(cuda, device_roundtrip, .fini = teardown_single, .timeout = 120)
{
    if (cuda_devices() == 0) {
        /* before the server starts: a skipped test does not run its .fini,
         * and the server's arena file would stay behind */
        cr_skip_test("no CUDA device on this machine (or no CUDA in this build)");
    }
    setup_single();
#ifdef CKS_HAVE_CUDA
    uint64_t seed = cks_test_seed(0xc0da);
    unsetenv("CKS_STAGE_HOST");
    cks_client_h c = connect_staged(64 * KiB, 4);
    cks_test_begin(c, "dev", 1);
    for (size_t i = 0; i < NSIZES; i++) {
        uint8_t *h = malloc(sizes[i] + 1), *back = malloc(sizes[i] + 1);
        void *d = NULL;
        char key[32];
        cr_assert_eq(cudaMalloc(&d, sizes[i] + 1), cudaSuccess);
        cks_test_fill(h, sizes[i], seed + i);
        cr_assert_eq(cudaMemcpy(d, h, sizes[i], cudaMemcpyHostToDevice), cudaSuccess);
        /* a copy from pageable memory may return before its DMA ends, and
         * the library's copies run on streams of its own, which wait for no
         * other: the caller's writes must be complete before the put */
        cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
        snprintf(key, sizeof(key), "d%zu", i);
        cr_assert_eq(put_dev(c, "dev", 1, key, d, sizes[i], CKS_MEM_AUTO), CKS_OK);
        cudaFree(d);
        free(h);
        free(back);
    }
    cr_assert_eq(cks_version_seal(c, "dev", 1), CKS_OK);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, "dev", 1, &r), CKS_OK);
    for (size_t i = 0; i < NSIZES; i++) {
        uint8_t *h = malloc(sizes[i] + 1), *back = malloc(sizes[i] + 1);
        void *d = NULL;
        uint64_t len = 0;
        char key[32];
        cr_assert_eq(cudaMalloc(&d, sizes[i] + 1), cudaSuccess);
        cks_test_fill(h, sizes[i], seed + i);
        snprintf(key, sizeof(key), "d%zu", i);
        cr_assert_eq(get_dev(r, key, d, sizes[i] + 1, &len, CKS_GET_VERIFY), CKS_OK);
        cr_assert_eq(len, sizes[i]);
        cr_assert_eq(cudaMemcpy(back, d, sizes[i], cudaMemcpyDeviceToHost), cudaSuccess);
        cr_assert(memcmp(back, h, sizes[i]) == 0, "bytes of %s", key);
        cudaFree(d);
        free(h);
        free(back);
    }
    cks_client_stats_t s;
    cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
    cr_assert_neq(s.gpu_path, CKS_GPU_PATH_NONE);
    cks_restore_close(r);
    cks_client_destroy(c);
#endif
}
