/*
 * End-to-end: the one-copy path between processes of one host. Buffers from
 * cks_mem_alloc() are UCX-allocated shared memory; a put from one (or a get
 * into one) sends an RMA descriptor, and the server reads (writes) the bytes
 * there itself. Real ckstore-server processes on 127.0.0.1 (ports picked at
 * run time, stopped by pid):
 *
 *  - standalone: round trips bit-exact for sizes 0 .. 64 MiB, byte ranges,
 *    shared and malloc memory mixed, buffers inside a larger allocation,
 *    many small objects from slices of one allocation, more allocations
 *    than the server keeps keys for, cks_mem_alloc()/cks_mem_free() errors;
 *  - proof that the path is taken: the server process maps the very
 *    segment (device and inode in /proc/PID/maps) of the client's
 *    allocation, and does not for malloc memory;
 *  - descriptors made by hand and sent with the raw transport: bad magic,
 *    inconsistent lengths, a real region's descriptor edited to claim more
 *    than it is; each is refused with an error, the server stays up and
 *    serves;
 *  - a 6-server RS(4,2) cluster: restores into shared memory with all
 *    servers up, with two killed (several pairs), ranges across stripes
 *    with one down, and chunks that fail their CRC (fault points), decoded
 *    around; the "crc_check" fault point, which whole-chunk reads only reach
 *    on the one-copy path, shows that CHUNK_GET used it;
 *  - rma_known_bugs: bugs this suite found, fixed since (garbage keys crashed
 *    the server, refused gets got no reply, another process's key was
 *    accepted).
 *
 * Loops are bounded in count and time; seeds are printed (CKS_TEST_SEED
 * replays one).
 */
#include "ckstore.h"
#include "cks_coding.h"
#include "cks_faults_gate.h"
#include "cks_test.h"

#define CKS_TEST_SUITE_CL ccl /* cl: the client of the single-server suites */
#include "cks_test_suite.h"
#include "cks_test_raw.h"
#include "cks_tp.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KiB (1ull << 10)

/* ---- helpers shared by every suite ------------------------------------------ */

static void *shm_alloc(cks_client_h c, size_t size)
{
    void *p = NULL;
    cr_assert_eq(cks_mem_alloc(c, size, &p), CKS_OK, "cks_mem_alloc(%zu)", size);
    cr_assert_not_null(p);
    return p;
}

/* ---- /proc/PID/maps: which segments a process maps --------------------------- */

typedef struct {
    unsigned long long start, end;
    char perms[8];
    char dev[16];
    unsigned long inode;
} map_ent_t;

/* Read the mappings of pid (0: this process); returns how many (at most max). */
static size_t read_maps(pid_t pid, map_ent_t *v, size_t max)
{
    char path[64], line[1024];
    size_t n = 0;
    snprintf(path, sizeof(path), pid ? "/proc/%d/maps" : "/proc/self/maps", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
    while (n < max && fgets(line, sizeof(line), f) != NULL) {
        map_ent_t *e = &v[n];
        if (sscanf(line, "%llx-%llx %7s %*s %15s %lu", &e->start, &e->end, e->perms,
                   e->dev, &e->inode) == 5) {
            n++;
        }
        /* a line longer than the buffer: skip its rest */
        while (strchr(line, '\n') == NULL && fgets(line, sizeof(line), f) != NULL) {
        }
    }
    fclose(f);
    return n;
}

#define MAPS_MAX 8192
static map_ent_t maps_buf[MAPS_MAX];

/* The segment (device, inode) that holds addr in this process; asserts that
 * it is a shared mapping of a file or shared-memory object. */
static map_ent_t own_segment(const void *addr)
{
    size_t n = read_maps(0, maps_buf, MAPS_MAX);
    for (size_t i = 0; i < n; i++) {
        if ((uintptr_t)addr >= maps_buf[i].start && (uintptr_t)addr < maps_buf[i].end) {
            cr_assert_eq(maps_buf[i].perms[3], 's',
                         "cks_mem_alloc() memory is not shared (%s)", maps_buf[i].perms);
            cr_assert_neq(maps_buf[i].inode, 0, "cks_mem_alloc() memory is anonymous");
            return maps_buf[i];
        }
    }
    cr_assert_fail("no mapping holds %p", addr);
    return maps_buf[0];
}

/* Does process pid map the segment seg (same device and inode)? */
static int maps_segment(pid_t pid, const map_ent_t *seg)
{
    size_t n = read_maps(pid, maps_buf, MAPS_MAX);
    for (size_t i = 0; i < n; i++) {
        if (maps_buf[i].inode == seg->inode && strcmp(maps_buf[i].dev, seg->dev) == 0 &&
            maps_buf[i].perms[3] == 's') {
            return 1;
        }
    }
    return 0;
}

/* Shared mappings of pid, as "dev inode" lines, sorted as the kernel lists them. */
static size_t shared_segments(pid_t pid, char (*out)[40], size_t max)
{
    size_t n = read_maps(pid, maps_buf, MAPS_MAX), k = 0;
    for (size_t i = 0; i < n && k < max; i++) {
        if (maps_buf[i].perms[3] == 's') {
            snprintf(out[k++], 40, "%s %lu", maps_buf[i].dev, maps_buf[i].inode);
        }
    }
    return k;
}

/* ======================================================================
 * Standalone server
 * ====================================================================== */

static cks_test_server_t srv;
static cks_client_h cl;

static void setup(void)
{
    cr_assert_eq(cks_test_server_start(&srv, 256 * MiB), 0);
    cl = cks_test_client(&srv, 30000);
}

static void teardown(void)
{
    cks_client_destroy(cl);
    cl = NULL;
    cks_test_server_cleanup(&srv);
}

TestSuite(rma_single, .init = setup, .fini = teardown, .timeout = 240);

/* Give back src and dst (cks_mem_alloc() of the test's client cl; asserts
 * that it takes them) and free ref, the bytes they were checked against. */
static void free_bufs(uint8_t *ref, uint8_t *src, uint8_t *dst)
{
    cr_assert_eq(cks_mem_free(cl, src), CKS_OK, "cks_mem_free() of the source");
    cr_assert_eq(cks_mem_free(cl, dst), CKS_OK, "cks_mem_free() of the destination");
    free(ref);
}

Test(rma_single, round_trip_sizes)
{
    static const uint64_t sizes[] = {0, 1, 4096, MiB + 1, 64 * MiB};
    const uint64_t cap            = 64 * MiB + 4096;
    char key[32];

    uint8_t *src = shm_alloc(cl, 64 * MiB);
    uint8_t *dst = shm_alloc(cl, cap);
    uint8_t *ref = cks_test_seeded_bytes(64 * MiB, 101);
    memcpy(src, ref, 64 * MiB);

    cks_test_begin(cl, "rt", 1);
    for (size_t i = 0; i < CKS_ARRAY_SIZE(sizes); i++) {
        snprintf(key, sizeof(key), "obj-%zu", i);
        cr_assert_eq(cks_test_put(cl, "rt", 1, key, src, sizes[i]), CKS_OK, "put %llu",
                     (unsigned long long)sizes[i]);
    }
    cr_assert_eq(cks_version_seal(cl, "rt", 1), CKS_OK);
    /* the put did not write into the caller's buffer */
    cr_assert(memcmp(src, ref, 64 * MiB) == 0, "the source buffer changed");

    cks_restore_h r;
    cr_assert_eq(cks_restore_open(cl, "rt", 1, &r), CKS_OK);
    for (size_t i = 0; i < CKS_ARRAY_SIZE(sizes); i++) {
        uint64_t len = UINT64_MAX;
        snprintf(key, sizeof(key), "obj-%zu", i);
        memset(dst, 0xA5, sizes[i] + 4096);
        cr_assert_eq(cks_test_get_whole(r, key, dst, cap, &len), CKS_OK, "get %s", key);
        cr_assert_eq(len, sizes[i]);
        cr_assert(memcmp(dst, ref, sizes[i]) == 0, "bytes of %s differ", key);
        for (size_t j = 0; j < 4096; j++) {
            cr_assert_eq(dst[sizes[i] + j], 0xA5,
                         "get of %s wrote past the object (+%zu)", key, j);
        }
        cks_object_info_t oi;
        cr_assert_eq(cks_object_stat(r, key, &oi), CKS_OK);
        cr_assert_eq(oi.size, sizes[i]);
        cr_assert_eq(oi.crc64, cks_crc64(0, ref, sizes[i]), "stored CRC of %s", key);
    }
    /* a whole get into a buffer exactly the object's size */
    memset(dst, 0, MiB + 1);
    cr_assert_eq(cks_test_get_whole(r, "obj-3", dst, MiB + 1, NULL), CKS_OK);
    cr_assert(memcmp(dst, ref, MiB + 1) == 0);
    cks_restore_close(r);
    free_bufs(ref, src, dst);
}

Test(rma_single, byte_ranges_into_shared_memory)
{
    const uint64_t size = 3 * MiB + 12345;
    uint8_t *ref        = cks_test_seeded_bytes(size, 102);
    uint8_t *src = shm_alloc(cl, size);
    uint8_t *dst = shm_alloc(cl, 2 * MiB + 64);
    memcpy(src, ref, size);

    cks_test_begin(cl, "ranges", 1);
    cr_assert_eq(cks_test_put(cl, "ranges", 1, "tensor", src, size), CKS_OK);
    cr_assert_eq(cks_version_seal(cl, "ranges", 1), CKS_OK);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(cl, "ranges", 1, &r), CKS_OK);

    /* destinations: the start of the allocation and odd places inside it */
    static const size_t douts[] = {0, 1, 13, 4099};
    cks_test_check_ranges(r, "tensor", ref, size, dst, douts, CKS_ARRAY_SIZE(douts));
    /* the tail: the last bytes */
    cr_assert_eq(cks_test_get_range(r, "tensor", dst + 3, size - 100001, 100001), CKS_OK);
    cr_assert(memcmp(dst + 3, ref + size - 100001, 100001) == 0);
    /* a range whose destination ends exactly at the end of the allocation */
    cr_assert_eq(cks_test_get_range(r, "tensor", dst + 64, 5, 2 * MiB), CKS_OK);
    cr_assert(memcmp(dst + 64, ref + 5, 2 * MiB) == 0);
    cks_restore_close(r);
    free_bufs(ref, src, dst);
}

Test(rma_single, shared_and_malloc_memory_mixed)
{
    const uint64_t size = 5 * MiB + 333;
    uint8_t *ref        = cks_test_seeded_bytes(size, 103);
    uint8_t *mbuf       = malloc(size);
    cr_assert_not_null(mbuf);
    uint8_t *sbuf = shm_alloc(cl, size);

    cks_test_begin(cl, "mixed", 1);
    memcpy(sbuf, ref, size);
    cr_assert_eq(cks_test_put(cl, "mixed", 1, "from-shm", sbuf, size), CKS_OK);
    memcpy(mbuf, ref, size);
    mbuf[0] ^= 0xff; /* a different object, so that a mix-up shows */
    cr_assert_eq(cks_test_put(cl, "mixed", 1, "from-malloc", mbuf, size), CKS_OK);
    cr_assert_eq(cks_version_seal(cl, "mixed", 1), CKS_OK);

    cks_restore_h r;
    uint64_t len;
    cr_assert_eq(cks_restore_open(cl, "mixed", 1, &r), CKS_OK);
    /* put from shared memory, get into malloc memory */
    memset(mbuf, 0, size);
    cr_assert_eq(cks_test_get_whole(r, "from-shm", mbuf, size, &len), CKS_OK);
    cr_assert(len == size && memcmp(mbuf, ref, size) == 0, "from-shm into malloc memory");
    /* put from malloc memory, get into shared memory */
    memset(sbuf, 0, size);
    cr_assert_eq(cks_test_get_whole(r, "from-malloc", sbuf, size, &len), CKS_OK);
    cr_assert_eq(len, size);
    cr_assert_eq(sbuf[0], (uint8_t)(ref[0] ^ 0xff));
    cr_assert(memcmp(sbuf + 1, ref + 1, size - 1) == 0, "from-malloc into shared memory");
    /* and each into the other kind, ranges too */
    cr_assert_eq(cks_test_get_whole(r, "from-shm", sbuf, size, &len), CKS_OK);
    cr_assert(memcmp(sbuf, ref, size) == 0);
    cr_assert_eq(cks_test_get_range(r, "from-malloc", mbuf, 1, size - 2), CKS_OK);
    cr_assert(memcmp(mbuf, ref + 1, size - 2) == 0);
    cks_restore_close(r);
    cr_assert_eq(cks_mem_free(cl, sbuf), CKS_OK);
    free(mbuf);
    free(ref);
}

Test(rma_single, buffers_inside_a_larger_allocation)
{
    const uint64_t alloc = 8 * MiB;
    uint8_t *ref         = cks_test_seeded_bytes(alloc, 104);
    uint8_t *big = shm_alloc(cl, alloc);
    uint8_t *out = shm_alloc(cl, alloc);
    memcpy(big, ref, alloc);

    /* a put from an offset pointer, one ending at the allocation's end */
    cks_test_begin(cl, "sub", 1);
    cr_assert_eq(cks_test_put(cl, "sub", 1, "mid", big + 4097, MiB + 3), CKS_OK);
    cr_assert_eq(cks_test_put(cl, "sub", 1, "tail", big + alloc - 777, 777), CKS_OK);

    /* 200 small objects from slices of the one allocation */
    enum { N = 200 };
    uint64_t off[N], len[N];
    char key[32];
    for (int i = 0; i < N; i++) {
        off[i] = (uint64_t)i * 20000 + (uint64_t)(i % 7);
        len[i] = 1 + ((uint64_t)i * 37) % 5000;
        snprintf(key, sizeof(key), "small-%03d", i);
        cr_assert_eq(cks_test_put(cl, "sub", 1, key, big + off[i], len[i]), CKS_OK, "put %s",
                     key);
    }
    cr_assert_eq(cks_version_seal(cl, "sub", 1), CKS_OK);

    cks_restore_h r;
    uint64_t got;
    cr_assert_eq(cks_restore_open(cl, "sub", 1, &r), CKS_OK);
    memset(out, 0x11, alloc);
    cr_assert_eq(cks_test_get_whole(r, "mid", out + 3 * MiB + 1, MiB + 3, &got), CKS_OK);
    cr_assert(got == MiB + 3 && memcmp(out + 3 * MiB + 1, ref + 4097, MiB + 3) == 0);
    cr_assert_eq(out[3 * MiB], 0x11);
    cr_assert_eq(out[4 * MiB + 4], 0x11);
    /* into the very end of the allocation */
    cr_assert_eq(cks_test_get_whole(r, "tail", out + alloc - 777, 777, &got), CKS_OK);
    cr_assert(got == 777 && memcmp(out + alloc - 777, ref + alloc - 777, 777) == 0);
    /* the 200 small objects, each into its own slice of the second allocation */
    memset(out, 0x22, alloc);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "small-%03d", i);
        uint64_t o = alloc - off[i] - len[i]; /* a different place from the put's */
        cr_assert_eq(cks_test_get_whole(r, key, out + o, len[i], &got), CKS_OK, "get %s", key);
        cr_assert(got == len[i] && memcmp(out + o, ref + off[i], len[i]) == 0,
                  "bytes of %s", key);
    }
    cks_restore_close(r);
    cr_assert_eq(cks_mem_free(cl, big), CKS_OK);
    cr_assert_eq(cks_mem_free(cl, out), CKS_OK);
    free(ref);
}

/* Completion of non-blocking puts and gets: callbacks run on the client's
 * progress thread and signal the waiting test. */
typedef struct {
    int done;
    cks_status_t status;
} nb_t;

static pthread_mutex_t nb_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nb_cond  = PTHREAD_COND_INITIALIZER;

static void nb_done(void *arg, cks_status_t status)
{
    nb_t *n = arg;
    pthread_mutex_lock(&nb_lock);
    n->status = status;
    n->done   = 1;
    pthread_cond_broadcast(&nb_cond);
    pthread_mutex_unlock(&nb_lock);
}

/* Wait (bounded) until all n are done. */
static void nb_wait(nb_t *nb, size_t n, int ms)
{
    struct timespec until = cks_test_deadline(ms);
    pthread_mutex_lock(&nb_lock);
    for (size_t i = 0; i < n; i++) {
        while (!nb[i].done && pthread_cond_timedwait(&nb_cond, &nb_lock, &until) == 0) {
        }
        int done = nb[i].done;
        if (!done) {
            pthread_mutex_unlock(&nb_lock);
        }
        cr_assert(done, "operation %zu never completed", i);
    }
    pthread_mutex_unlock(&nb_lock);
}

/* The server keeps a few peers' keys per connection; more allocations than
 * that, used in turn, must all keep working. */
Test(rma_single, more_allocations_than_the_server_caches)
{
    enum { NA = 12, SZ = 256 * 1024 };
    uint8_t *a[NA];
    char key[32];
    uint8_t *ref = cks_test_seeded_bytes((size_t)NA * SZ, 105);
    for (int i = 0; i < NA; i++) {
        a[i] = shm_alloc(cl, SZ);
        memcpy(a[i], ref + (size_t)i * SZ, SZ);
    }
    cks_test_begin(cl, "many-allocs", 1);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < NA; i++) {
            snprintf(key, sizeof(key), "r%d-a%02d", round, i);
            cr_assert_eq(cks_test_put(cl, "many-allocs", 1, key, a[i] + round, SZ - round),
                         CKS_OK, "put %s", key);
        }
    }
    cr_assert_eq(cks_version_seal(cl, "many-allocs", 1), CKS_OK);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(cl, "many-allocs", 1, &r), CKS_OK);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < NA; i++) {
            int t = (i + 5) % NA; /* into another allocation */
            uint64_t got;
            snprintf(key, sizeof(key), "r%d-a%02d", round, i);
            memset(a[t], 0, SZ);
            cr_assert_eq(cks_test_get_whole(r, key, a[t], SZ, &got), CKS_OK, "get %s", key);
            cr_assert(got == (uint64_t)(SZ - round) &&
                          memcmp(a[t], ref + (size_t)i * SZ + round, SZ - round) == 0,
                      "bytes of %s", key);
        }
    }
    cks_restore_close(r);

    /* all of them at once: puts, then gets, each from (into) its own allocation */
    cks_test_begin(cl, "many-allocs", 2);
    nb_t nb[NA];
    for (int i = 0; i < NA; i++) {
        memcpy(a[i], ref + (size_t)i * SZ, SZ);
        snprintf(key, sizeof(key), "a%02d", i);
        cks_put_params_t p = cks_test_put_params("many-allocs", 2, key, a[i], SZ);
        nb[i] = (nb_t){0, CKS_INPROGRESS};
        cr_assert_eq(cks_put_nb(cl, &p, nb_done, &nb[i]), CKS_INPROGRESS, "put %s", key);
    }
    nb_wait(nb, NA, 30000);
    for (int i = 0; i < NA; i++) {
        cr_assert_eq(nb[i].status, CKS_OK, "concurrent put from allocation %d: %s", i,
                     cks_status_name(nb[i].status));
    }
    cr_assert_eq(cks_version_seal(cl, "many-allocs", 2), CKS_OK);
    cr_assert_eq(cks_restore_open(cl, "many-allocs", 2, &r), CKS_OK);
    for (int i = 0; i < NA; i++) {
        int t = (i + 7) % NA;
        memset(a[t], 0, SZ);
        snprintf(key, sizeof(key), "a%02d", i);
        cks_get_params_t g = {0};
        g.key         = key;
        g.buffer      = a[t];
        g.buffer_size = SZ;
        nb[i]         = (nb_t){0, CKS_INPROGRESS};
        cr_assert_eq(cks_get_nb(r, &g, NULL, nb_done, &nb[i]), CKS_INPROGRESS, "get %s",
                     key);
    }
    nb_wait(nb, NA, 30000);
    for (int i = 0; i < NA; i++) {
        int t = (i + 7) % NA;
        cr_assert_eq(nb[i].status, CKS_OK, "concurrent get into allocation %d: %s", t,
                     cks_status_name(nb[i].status));
        cr_assert(memcmp(a[t], ref + (size_t)i * SZ, SZ) == 0, "bytes of a%02d", i);
    }
    cks_restore_close(r);
    for (int i = 0; i < NA; i++) {
        cr_assert_eq(cks_mem_free(cl, a[i]), CKS_OK);
    }
    free(ref);
}

Test(rma_single, mem_alloc_and_free_errors)
{
    void *p = NULL, *q = NULL;
    int on_stack;
    cr_assert_eq(cks_mem_alloc(cl, 0, &p), CKS_ERR_INVALID_PARAM);
    cr_assert_null(p);
    cr_assert_eq(cks_mem_alloc(cl, 4096, NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_mem_alloc(NULL, 4096, &p), CKS_ERR_INVALID_PARAM);

    void *m = malloc(4096);
    cr_assert_eq(cks_mem_free(cl, m), CKS_ERR_INVALID_PARAM, "malloc memory");
    free(m);
    cr_assert_eq(cks_mem_free(cl, &on_stack), CKS_ERR_INVALID_PARAM, "a stack address");
    cr_assert_eq(cks_mem_free(cl, NULL), CKS_ERR_INVALID_PARAM);

    cr_assert_eq(cks_mem_alloc(cl, 1, &p), CKS_OK); /* one byte is enough */
    cr_assert_eq(cks_mem_alloc(cl, 3 * MiB + 5, &q), CKS_OK);
    cr_assert_neq(p, q);
    ((uint8_t *)q)[3 * MiB + 4] = 7; /* all of it is usable */
    cr_assert_eq(cks_mem_free(cl, (uint8_t *)q + 1), CKS_ERR_INVALID_PARAM,
                 "interior pointer");
    cr_assert_eq(cks_mem_free(NULL, q), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_mem_free(cl, q), CKS_OK);
    cr_assert_eq(cks_mem_free(cl, q), CKS_ERR_INVALID_PARAM, "freed twice");
    /* memory of another client is not this client's to free */
    cks_client_h other = cks_test_client(&srv, 30000);
    cr_assert_eq(cks_mem_free(other, p), CKS_ERR_INVALID_PARAM,
                 "another client's memory");
    cks_client_destroy(other);
    cr_assert_eq(cks_mem_free(cl, p), CKS_OK);
}

/* Resident KiB of pid's mapping of seg (smaps "Rss:"); -1: not mapped. */
static long segment_rss_kb(pid_t pid, const map_ent_t *seg)
{
    char path[64], line[1024], dev[16], perms[8];
    unsigned long long start, end;
    unsigned long inode;
    long rss = -1;
    int in   = 0;
    snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
    while (fgets(line, sizeof(line), f) != NULL) {
        long kb;
        if (sscanf(line, "%llx-%llx %7s %*s %15s %lu", &start, &end, perms, dev, &inode) == 5) {
            in = inode == seg->inode && strcmp(dev, seg->dev) == 0 && perms[3] == 's';
        } else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1) {
            rss = (rss < 0 ? 0 : rss) + kb;
        }
    }
    fclose(f);
    return rss;
}

/* Allocation registers: when cks_mem_alloc() returns, the server on this
 * host maps the new segment (same device and inode) and has faulted all of
 * it in (its mapping is resident), before any transfer; transfers from and
 * into it are exact. Malloc memory makes the server map nothing new. */
Test(rma_single, the_server_maps_the_clients_segment_at_allocation)
{
    const uint64_t size = 6 * MiB + 5;
    static char before[512][40], after[512][40];
    uint8_t *ref  = cks_test_seeded_bytes(size, 106);
    uint8_t *mbuf = malloc(size);
    cr_assert_not_null(mbuf);
    memcpy(mbuf, ref, size);

    /* malloc memory: no new shared mapping in the server */
    cks_test_begin(cl, "proof", 1);
    size_t nb = shared_segments(srv.pid, before, 512);
    cr_assert_eq(cks_test_put(cl, "proof", 1, "plain", mbuf, size), CKS_OK);
    size_t na = shared_segments(srv.pid, after, 512);
    cr_assert_eq(na, nb, "a put from malloc memory made the server map a shared segment");
    for (size_t i = 0; i < na; i++) {
        cr_assert_str_eq(after[i], before[i]);
    }

    uint8_t *src = shm_alloc(cl, size);
    uint8_t *dst = shm_alloc(cl, size);
    map_ent_t src_seg = own_segment(src), dst_seg = own_segment(dst);
    cr_assert(src_seg.inode != dst_seg.inode || strcmp(src_seg.dev, dst_seg.dev) != 0,
              "two allocations share a segment");
    /* the client has not touched either: the server's mapping is resident
     * only because the server faulted it in when told of it */
    long src_kb = segment_rss_kb(srv.pid, &src_seg), dst_kb = segment_rss_kb(srv.pid, &dst_seg);
    cr_assert(src_kb >= (long)(size / 1024) && dst_kb >= (long)(size / 1024),
              "after cks_mem_alloc() the server maps %ld and %ld KiB of the two %llu-byte "
              "segments (-1: not at all)",
              src_kb, dst_kb, (unsigned long long)size);

    memcpy(src, ref, size);
    cr_assert_eq(cks_test_put(cl, "proof", 1, "shared", src, size), CKS_OK);
    cr_assert_eq(cks_version_seal(cl, "proof", 1), CKS_OK);

    cks_restore_h r;
    uint64_t got;
    cr_assert_eq(cks_restore_open(cl, "proof", 1, &r), CKS_OK);
    memset(mbuf, 0, size);
    cr_assert_eq(cks_test_get_whole(r, "shared", mbuf, size, &got), CKS_OK);
    cr_assert(got == size && memcmp(mbuf, ref, size) == 0);
    memset(dst, 0, size);
    cr_assert_eq(cks_test_get_whole(r, "plain", dst, size, &got), CKS_OK);
    cr_assert(got == size && memcmp(dst, ref, size) == 0);
    cks_restore_close(r);
    free_bufs(ref, src, dst);
    free(mbuf);
}

/* ======================================================================
 * Hand-made descriptors over the raw transport
 * ====================================================================== */

#define DESC_HDR 72u /* 40 bytes of fields, then the owner's 32-byte token */
#define MEM_HDR  4096u /* a region's header, before the caller's bytes */

/* the raw transport client: tests/support/cks_test_raw.h */

/* Fields of a descriptor (big-endian). */
static void be64_put(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8) {
        p[i] = (uint8_t)v;
    }
}

static uint64_t be64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = v << 8 | p[i];
    }
    return v;
}

static void be32_put(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

#define D_ADDR   4
#define D_LEN    12
#define D_BASE   20
#define D_SEGLEN 28
#define D_KLEN   36

typedef struct {
    uint8_t b[2 * CKS_TP_RMA_DESC_MAX];
    size_t len;
} desc_t;

static cks_tp_mem_h raw_mem;
static uint8_t *raw_base;
static const uint64_t raw_len = MiB;

static desc_t describe(const void *addr, size_t len)
{
    desc_t d;
    memset(&d, 0, sizeof(d));
    cr_assert_eq(cks_tp_mem_describe(raw_mem, addr, len, d.b, sizeof(d.b), &d.len),
                 CKS_OK);
    cr_assert_gt(d.len, DESC_HDR);
    cr_assert_eq(be64_get(d.b + D_ADDR), (uint64_t)(uintptr_t)addr);
    cr_assert_eq(be64_get(d.b + D_LEN), (uint64_t)len);
    cr_assert_eq(be64_get(d.b + D_BASE) + MEM_HDR, (uint64_t)(uintptr_t)raw_base);
    cr_assert_geq(be64_get(d.b + D_SEGLEN), raw_len + MEM_HDR);
    return d;
}

static const uint8_t *obj_ref; /* the bytes of src/1 "obj" */
static uint64_t obj_size = 300 * KiB + 7;

/* A server with an open version ("raw", 1) for puts and a sealed one ("src",
 * 1) holding "obj" for gets; a raw client with a 1 MiB cks_tp_mem_alloc()
 * region. */
static cks_test_raw_t raw;

static void raw_setup(void)
{
    setup();
    static uint8_t *ref;
    uint64_t seed = cks_test_seed(201);
    ref           = malloc(obj_size);
    cr_assert_not_null(ref);
    cks_test_fill(ref, obj_size, seed);
    obj_ref = ref;
    cks_test_begin(cl, "src", 1);
    cr_assert_eq(cks_test_put(cl, "src", 1, "obj", ref, obj_size), CKS_OK);
    cr_assert_eq(cks_version_seal(cl, "src", 1), CKS_OK);
    cks_test_begin(cl, "raw", 1);
    cks_test_raw_open(&raw, srv.port, "rma-raw");
    void *base = NULL;
    cr_assert_eq(cks_tp_mem_alloc(raw.w, raw_len, &raw_mem, &base), CKS_OK);
    raw_base = base;
    cks_test_fill(raw_base, raw_len, seed + 1);
}

static void raw_teardown(void)
{
    if (raw.w != NULL) {
        cks_tp_mem_unmap(raw_mem);
        cks_test_raw_close(&raw);
        raw.w = NULL;
    }
    free((void *)obj_ref);
    obj_ref = NULL;
    teardown();
}

static uint64_t raw_req_id = 100;

/* PUT into ("raw", 1) with the descriptor as its payload; returns 1 and
 * fills raw.status / raw.msg when a reply came. */
static int raw_put(const char *key, uint64_t size, const desc_t *d, int wait_ms)
{
    return cks_test_raw_put(&raw, ++raw_req_id, "raw", 1, key, size, d->b, d->len, wait_ms);
}

/* GET of ("src", 1, "obj") [off, off + len) into the described memory. */
static int raw_get(uint64_t off, uint64_t len, const desc_t *d, int wait_ms)
{
    cks_msg_get_t m = {0};
    m.job           = cks_wire_cstr("src");
    m.version       = 1;
    m.key           = cks_wire_cstr("obj");
    m.offset        = off;
    m.length        = len;
    return cks_test_raw_request(&raw, CKS_MSG_GET, CKS_WIRE_F_RMA, ++raw_req_id, &m, d->b, d->len,
                       wait_ms);
}

/* The server refused the request: an error status with a message. */
#define EXPECT_REFUSED(replied, what)                                                   \
    do {                                                                                \
        cr_assert((replied), "%s: no reply within the deadline", (what));              \
        cr_assert_lt(raw.status, 0, "%s: status %d (%s)", (what), raw.status, raw.msg); \
        cr_assert_neq(raw.msg[0], '\0', "%s: an error without a message", (what));     \
        cr_log_info("%s: %s: %s", (what), cks_status_name(raw.status), raw.msg);        \
    } while (0)

/* Still serving: the raw connection (an honest one-copy put and get), a new
 * normal client (put, seal, get), and the process is alive. */
static void still_serving(const char *tag)
{
    char key[64];
    cr_assert(cks_test_server_alive(&srv), "the server died (%s)", tag);

    /* an honest descriptor on the same raw connection */
    snprintf(key, sizeof(key), "honest-%s", tag);
    desc_t d = describe(raw_base + 1000, 70000);
    cr_assert(raw_put(key, 70000, &d, 10000), "honest put: no reply");
    cr_assert_eq(raw.status, CKS_OK, "honest put: %s", raw.msg);
    memset(raw_base + 200000, 0, obj_size + 64);
    d = describe(raw_base + 200000 + 3, obj_size);
    cr_assert(raw_get(0, UINT64_MAX, &d, 10000), "honest get: no reply");
    cr_assert_eq(raw.status, CKS_OK, "honest get: %s", raw.msg);
    cr_assert(raw.hdr.flags & CKS_WIRE_F_RMA,
              "the reply does not say the bytes went there");
    cr_assert(memcmp(raw_base + 200000 + 3, obj_ref, obj_size) == 0,
              "the server did not write the object into the described memory");

    /* a normal client on a new connection */
    cks_client_h c = cks_test_client(&srv, 30000);
    uint8_t buf[5000], back[5000];
    cks_test_fill(buf, sizeof(buf), 77);
    char job[64];
    snprintf(job, sizeof(job), "after-%s", tag);
    cks_test_begin(c, job, 1);
    cr_assert_eq(cks_test_put(c, job, 1, "k", buf, sizeof(buf)), CKS_OK);
    cr_assert_eq(cks_version_seal(c, job, 1), CKS_OK);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, job, 1, &r), CKS_OK);
    cr_assert_eq(cks_test_get_whole(r, "k", back, sizeof(back), NULL), CKS_OK);
    cr_assert(memcmp(buf, back, sizeof(buf)) == 0);
    cks_restore_close(r);
    cks_client_destroy(c);
    cr_assert(cks_test_server_alive(&srv), "the server died (%s)", tag);
}

TestSuite(rma_raw, .init = raw_setup, .fini = raw_teardown, .timeout = 180);

Test(rma_raw, honest_descriptors_work)
{
    /* the baseline the refusals below are measured against */
    still_serving("baseline");
    /* what the honest put stored is what was in the region */
    cr_assert_eq(cks_version_seal(cl, "raw", 1), CKS_OK);
    cks_restore_h r;
    uint8_t *back = malloc(70000);
    cr_assert_eq(cks_restore_open(cl, "raw", 1, &r), CKS_OK);
    cr_assert_eq(cks_test_get_whole(r, "honest-baseline", back, 70000, NULL), CKS_OK);
    cr_assert(memcmp(back, raw_base + 1000, 70000) == 0, "the put stored other bytes");
    cks_restore_close(r);
    free(back);
    /* a range of the object, into an odd place */
    memset(raw_base, 0, 5000);
    desc_t d = describe(raw_base + 1, 4001);
    cr_assert(raw_get(777, 4001, &d, 10000));
    cr_assert_eq(raw.status, CKS_OK, "%s", raw.msg);
    cr_assert(memcmp(raw_base + 1, obj_ref + 777, 4001) == 0);
    cr_assert_eq(raw_base[0], 0);
    cr_assert_eq(raw_base[4002], 0);
}

Test(rma_raw, malformed_descriptors_are_refused)
{
    const desc_t good = describe(raw_base + 4096, 4096);
    const uint32_t klen = (uint32_t)(good.len - DESC_HDR);
    const uint64_t base = be64_get(good.b + D_BASE); /* the region, header included */
    const uint64_t slen = be64_get(good.b + D_SEGLEN);
    char key[32];
    desc_t d;
    int n = 0;

#define CASE(what, edit)                                                    \
    do {                                                                    \
        d = good;                                                           \
        edit;                                                               \
        snprintf(key, sizeof(key), "bad-%d", n++);                          \
        EXPECT_REFUSED(raw_put(key, be64_get(d.b + D_LEN), &d, 10000),      \
                       "put, " what);                                       \
        d = good;                                                           \
        edit;                                                               \
        EXPECT_REFUSED(raw_get(0, 4096, &d, 10000), "get, " what);          \
        cr_assert(cks_test_server_alive(&srv), "the server died: " what);                   \
    } while (0)

    CASE("bad magic", d.b[0] ^= 0x20);
    CASE("magic of another protocol", memcpy(d.b, "CKS1", 4));
    CASE("rkey_len one more than the key", be32_put(d.b + D_KLEN, klen + 1));
    CASE("rkey_len one less than the key", be32_put(d.b + D_KLEN, klen - 1));
    CASE("rkey_len huge", be32_put(d.b + D_KLEN, 0xffffffffu));
    CASE("rkey_len 0, key cut off", (be32_put(d.b + D_KLEN, 0), d.len = DESC_HDR));
    CASE("shorter than the header", d.len = DESC_HDR - 1);
    CASE("only the magic", d.len = 4);
    CASE("longer than a descriptor may be",
         (be32_put(d.b + D_KLEN, CKS_TP_RMA_DESC_MAX + 8 - DESC_HDR),
          d.len = CKS_TP_RMA_DESC_MAX + 8));
    CASE("addr below seg_base", be64_put(d.b + D_ADDR, base - 4096));
    CASE("addr past the region", be64_put(d.b + D_ADDR, base + slen + 4096));
    CASE("len past the region's end", be64_put(d.b + D_ADDR, base + slen - 100));
    CASE("len huge", be64_put(d.b + D_LEN, UINT64_MAX));
    CASE("len past the end by one",
         (be64_put(d.b + D_ADDR, base), be64_put(d.b + D_LEN, slen + 1)));
    CASE("seg_len 0", be64_put(d.b + D_SEGLEN, 0));
    CASE("seg_base + seg_len wraps",
         (be64_put(d.b + D_BASE, UINT64_MAX - 4095),
          be64_put(d.b + D_ADDR, UINT64_MAX - 4095), be64_put(d.b + D_SEGLEN, 1ull << 40),
          be64_put(d.b + D_LEN, 16)));
#undef CASE

    /* a put that announces other bytes than its descriptor names */
    d = good;
    EXPECT_REFUSED(raw_put("bad-size", 4095, &d, 10000), "put, size differs from len");
    /* RMA on a message that takes none, and a PUT with the flag but no descriptor */
    cks_msg_version_stat_t vs = {cks_wire_cstr("src"), 1, 0};
    EXPECT_REFUSED(cks_test_raw_request(&raw, CKS_MSG_VERSION_STAT, CKS_WIRE_F_RMA, ++raw_req_id,
                               &vs, good.b, good.len, 10000),
                   "VERSION_STAT with a descriptor");
    cks_msg_put_t m = {0};
    m.job     = cks_wire_cstr("raw");
    m.version = 1;
    m.key     = cks_wire_cstr("no-desc");
    m.size    = 0;
    raw.got   = 0;
    cr_assert_eq(cks_tp_send(raw.conn, CKS_MSG_PUT, CKS_WIRE_F_RMA, ++raw_req_id, &m,
                             NULL, 0, CKS_MEM_HOST, NULL, NULL, NULL),
                 CKS_INPROGRESS);
    CKS_TEST_RAW_WAIT(&raw, raw.got > 0, 10000);
    EXPECT_REFUSED(raw.got > 0, "PUT with the RMA flag and no descriptor");
    still_serving("malformed");
    /* none of the refused puts left a key behind */
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "bad-%d", i);
        cr_assert_eq(cks_test_put(cl, "raw", 1, key, "x", 1), CKS_OK, "key %s was kept", key);
    }
}

/* A client's real 1 MiB region, described, then edited to claim more than
 * it is: a server that believed it would read (put) or write (get) its own
 * memory past its mapping of the client's segment. */
typedef struct {
    const char *what;
    uint64_t addr, seg_base, seg_len;
} lie_t;

static size_t make_lies(lie_t *lies)
{
    desc_t d            = describe(raw_base, 4096);
    const uint64_t base = be64_get(d.b + D_BASE);   /* the true region, header included */
    const uint64_t slen = be64_get(d.b + D_SEGLEN); /* and its true length */
    size_t n            = 0;
    /* the one the brief names: 64 MiB claimed, the range 32 MiB past the base */
    lies[n++] = (lie_t){"seg_len 64 MiB, addr 32 MiB past the base", base + 32 * MiB,
                        base, 64 * MiB};
    lies[n++] = (lie_t){"seg_len 64 MiB, addr just past the real end", base + slen, base,
                        64 * MiB};
    lies[n++] = (lie_t){"seg_len twice the truth, addr just past the real end",
                        base + slen, base, 2 * slen};
    lies[n++] = (lie_t){"seg_base 32 MiB up", base + 32 * MiB, base + 32 * MiB, slen};
    lies[n++] = (lie_t){"seg_base 32 MiB down", base, base - 32 * MiB, 64 * MiB};
    lies[n++] = (lie_t){"seg_base one page up", base + 2 * 4096, base + 4096, slen - 4096};
    return n;
}

static desc_t lie_desc(const lie_t *l)
{
    desc_t d = describe(raw_base, 4096);
    be64_put(d.b + D_ADDR, l->addr);
    be64_put(d.b + D_BASE, l->seg_base);
    be64_put(d.b + D_SEGLEN, l->seg_len);
    be64_put(d.b + D_LEN, 4096);
    return d;
}

Test(rma_raw, a_lying_region_is_refused)
{
    lie_t lies[8];
    size_t n = make_lies(lies);
    desc_t d = describe(raw_base, 4096);
    char key[32], what[160];

    /* an honest use first: the server keeps the key of the true region */
    cr_assert(raw_put("first-honest", 4096, &d, 10000));
    cr_assert_eq(raw.status, CKS_OK, "%s", raw.msg);

    for (size_t i = 0; i < n; i++) {
        d = lie_desc(&lies[i]);
        snprintf(key, sizeof(key), "lie-%zu", i);
        snprintf(what, sizeof(what), "put, %s", lies[i].what);
        int replied = raw_put(key, 4096, &d, 10000);
        cr_assert(cks_test_server_alive(&srv), "the server died: %s", what);
        EXPECT_REFUSED(replied, what);

        /* a get: refused and answered; the server must not write and must
         * keep serving */
        d = lie_desc(&lies[i]);
        snprintf(what, sizeof(what), "get, %s", lies[i].what);
        replied = raw_get(0, 4096, &d, 2000);
        cr_assert(cks_test_server_alive(&srv), "the server died: %s", what);
        EXPECT_REFUSED(replied, what);
    }
    /* each put and each get was refused: by the check of the mapping, or
     * (a range in the region's header) already by the descriptor's bounds */
    size_t logged =
        (size_t)cks_test_log_lines(srv.log, "sent a descriptor that does not match its memory") +
        (size_t)cks_test_log_lines(srv.log, "bad RMA descriptor");
    cr_assert_geq(logged, 2 * n, "the server logged %zu refused descriptors of %zu", logged,
                  2 * n);
    still_serving("lies");
    /* no refused put left a key (or bytes from the server's memory) behind */
    for (size_t i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "lie-%zu", i);
        cr_assert_eq(cks_test_put(cl, "raw", 1, key, "x", 1), CKS_OK, "key %s was kept", key);
    }
}

/* ======================================================================
 * Cluster: 6 servers, RS(4,2) (cks_test_suite.h)
 * ====================================================================== */

#define STRIPE (4 * CHUNK)

static cks_client_h connect_cluster(void)
{
    cks_client_h c;
    cr_assert_eq(cks_test_connect_cluster(ccl.map, K, M, CHUNK, 20000, &c), CKS_OK,
                 "connect to the cluster in %s", ccl.map);
    return c;
}

/* empty, tiny, less than a chunk, a stripe, stripe-aligned (8 stripes),
 * several stripes with a padded tail */
static const uint64_t csizes[] = {0, 1, 4097, STRIPE, 8 * STRIPE, 3 * MiB + 12345, 5 * MiB};
#define CNOBJ CKS_ARRAY_SIZE(csizes)
#define CMAX  (5 * MiB)

static void ckey(char *key, size_t n, size_t i)
{
    snprintf(key, n, "layer%zu/expert%zu", i, i * 3);
}

/* The objects' bytes (in objs.src[], freed by the suite's teardown) from
 * the test's printed seed. */
static void make_cdata(uint64_t dflt)
{
    cks_test_objs_make(&objs, csizes, CNOBJ, cks_test_seed(dflt));
}

/* Put every object from slices (at odd offsets) of one cks_mem_alloc()
 * allocation, then seal. The primaries read the bytes out of the client's
 * memory: they map its segment. */
static void write_cversion(cks_client_h c, const char *job, uint64_t version)
{
    uint64_t total = 0;
    for (size_t i = 0; i < CNOBJ; i++) {
        total += csizes[i] + 64;
    }
    uint8_t *buf = shm_alloc(c, total);
    cks_test_begin(c, job, version);
    uint64_t off = 0;
    for (size_t i = 0; i < CNOBJ; i++) {
        char key[64];
        ckey(key, sizeof(key), i);
        off += i; /* unaligned */
        memcpy(buf + off, objs.src[i], csizes[i]);
        cr_assert_eq(cks_test_put(c, job, version, key, buf + off, csizes[i]), CKS_OK,
                     "put %s", key);
        off += csizes[i];
    }
    cr_assert_eq(cks_version_seal(c, job, version), CKS_OK);
    map_ent_t seg = own_segment(buf);
    int mapped    = 0;
    for (size_t i = 0; i < NSRV; i++) {
        mapped += ccl.srv[i].pid != 0 && maps_segment(ccl.srv[i].pid, &seg);
    }
    cr_assert_geq(mapped, 1, "no server maps the segment the puts came from");
    cr_assert_eq(cks_mem_free(c, buf), CKS_OK);
}

/* Restore every object whole into cks_mem_alloc() memory (with 4 KiB of
 * guard after it), and a range across chunk and stripe borders. */
static void verify_cversion(cks_client_h c, const char *job, uint64_t version,
                            const char *tag)
{
    cks_restore_h r = NULL;
    uint8_t *dst    = shm_alloc(c, CMAX + 4096);
    cr_assert_eq(cks_restore_open(c, job, version, &r), CKS_OK, "%s: open", tag);
    for (size_t i = 0; i < CNOBJ; i++) {
        char key[64];
        uint64_t got = UINT64_MAX;
        ckey(key, sizeof(key), i);
        memset(dst, 0xEE, csizes[i] + 4096);
        cks_status_t st = cks_test_get_whole(r, key, dst, CMAX + 4096, &got);
        cr_assert_eq(st, CKS_OK, "%s: get %s: %s", tag, key, cks_status_name(st));
        cr_assert_eq(got, csizes[i], "%s: %s: %llu bytes", tag, key,
                     (unsigned long long)got);
        cr_assert(memcmp(dst, objs.src[i], csizes[i]) == 0, "%s: %s: bytes differ", tag, key);
        for (size_t b = 0; b < 4096; b++) {
            cr_assert_eq(dst[csizes[i] + b], 0xEE, "%s: %s: written past the end", tag,
                         key);
        }
        if (csizes[i] > 300000) {
            uint64_t off = CHUNK * 3 + 77, len = csizes[i] - off - 3;
            st = cks_test_get_range(r, key, dst + 1, off, len);
            cr_assert_eq(st, CKS_OK, "%s: range of %s: %s", tag, key,
                         cks_status_name(st));
            cr_assert(memcmp(dst + 1, objs.src[i] + off, len) == 0, "%s: range of %s", tag,
                      key);
        }
    }
    cks_restore_close(r);
    cr_assert_eq(cks_mem_free(c, dst), CKS_OK);
}

TestSuite(rma_cluster, .init = cks_test_suite_setup, .fini = cks_test_suite_teardown, .timeout = 600);

Test(rma_cluster, restores_into_shared_memory_with_two_servers_down)
{
    make_cdata(301);
    cks_client_h c = connect_cluster();
    write_cversion(c, "moe", 1);
    verify_cversion(c, "moe", 1, "all up");
    /* the one-copy path was taken: a server maps the client's segments */
    uint8_t *probe = shm_alloc(c, 2 * STRIPE);
    map_ent_t seg  = own_segment(probe);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, "moe", 1, &r), CKS_OK);
    char key[64];
    ckey(key, sizeof(key), 4); /* 8 stripes: every server serves chunks of it */
    cr_assert_eq(cks_test_get_range(r, key, probe, STRIPE, 2 * STRIPE), CKS_OK);
    cr_assert(memcmp(probe, objs.src[4] + STRIPE, 2 * STRIPE) == 0);
    cks_restore_close(r);
    int mapped = 0;
    for (size_t i = 0; i < NSRV; i++) {
        mapped += maps_segment(ccl.srv[i].pid, &seg);
    }
    cr_assert_geq(mapped, 4,
                  "only %d servers map the client's segment after CHUNK_GETs into it",
                  mapped);
    cr_assert_eq(cks_mem_free(c, probe), CKS_OK);
    cks_client_destroy(c);

    /* pairs of servers down (SIGKILL), a fresh client each time */
    static const size_t pairs[][2] = {{0, 3}, {1, 5}, {2, 4}};
    for (size_t p = 0; p < CKS_ARRAY_SIZE(pairs); p++) {
        size_t a = pairs[p][0], b = pairs[p][1];
        char tag[64];
        snprintf(tag, sizeof(tag), "servers %zu and %zu down", a, b);
        cks_test_cluster_kill(&ccl, a);
        cks_test_cluster_kill(&ccl, b);
        c = connect_cluster();
        verify_cversion(c, "moe", 1, tag);
        cks_client_destroy(c);
        cr_assert_eq(cks_test_server_restart(&ccl.srv[a]), 0);
        cr_assert_eq(cks_test_server_restart(&ccl.srv[b]), 0);
    }
}

/* A running client whose server on this host was killed and restarted
 * finds it again on its own (a connection of its own about a second after
 * the loss, then at pauses that double): the restarted server maps and
 * faults in the client's region with no request of the caller's, so that
 * the next checkpoint does not pay for it; a restore through it is then
 * exact. */
Test(rma_cluster, a_restarted_server_maps_a_running_clients_memory_on_its_own)
{
    const size_t victim = 2, size = 8 * MiB;
    make_cdata(303);
    cks_client_h c = connect_cluster();
    write_cversion(c, "moe", 1);
    uint64_t used = 0;
    (void)cks_cluster_usage(c, &used, NULL); /* connected to every server */
    uint8_t *buf  = shm_alloc(c, size);
    map_ent_t seg = own_segment(buf);
    long kb       = segment_rss_kb(ccl.srv[victim].pid, &seg);
    cr_assert_geq(kb, (long)(size / 1024), "server %zu maps %ld KiB of the region", victim, kb);
    cks_test_cluster_kill(&ccl, victim);
    (void)cks_cluster_usage(c, &used, NULL); /* the client finds it gone */
    cr_assert_eq(cks_test_server_restart(&ccl.srv[victim]), 0);
    /* no request from here on until the restarted server maps the region */
    uint64_t t0 = cks_time_ns();
    for (kb = -1; kb < (long)(size / 1024) && cks_time_ns() - t0 < 20000000000ull;) {
        usleep(50 * 1000);
        kb = segment_rss_kb(ccl.srv[victim].pid, &seg);
    }
    cr_assert_geq(kb, (long)(size / 1024),
                  "server %zu, restarted, maps %ld KiB of the client's region after %llu ms",
                  victim, kb, (unsigned long long)((cks_time_ns() - t0) / 1000000));
    fprintf(stderr, "the restarted server mapped the region %llu ms after its start\n",
            (unsigned long long)((cks_time_ns() - t0) / 1000000));
    verify_cversion(c, "moe", 1, "after the restart");
    cr_assert_eq(cks_mem_free(c, buf), CKS_OK);
    cks_client_destroy(c);
}

/* A trainer (a replacement rank) that allocates its buffers right after
 * cks_client_create() has reached one server of the cluster. Every server
 * on this host must still map and fault in the region before
 * cks_mem_alloc() returns; a server that was never asked had mapped it only
 * at its first request, while the first restore ran (its bytes sent over
 * the connection until then: 1.4 GB/s against 16 - 19 for 8 x 64 MiB). A
 * server that is down costs the allocation no wait: it is told when it
 * comes back. */
Test(rma_cluster, a_fresh_clients_region_is_mapped_by_every_server_on_the_host_at_allocation)
{
    const size_t down = 4, size = 8 * MiB;
    cks_test_cluster_kill(&ccl, down);
    cks_client_h c = connect_cluster();
    uint64_t t0    = cks_time_ns();
    uint8_t *buf   = shm_alloc(c, size);
    uint64_t ms    = (cks_time_ns() - t0) / 1000000;
    cr_assert_lt(ms, 10000, "cks_mem_alloc() took %llu ms with server %zu down",
                 (unsigned long long)ms, down);
    map_ent_t seg = own_segment(buf);
    for (size_t i = 0; i < ccl.n; i++) {
        if (i == down) {
            continue;
        }
        long kb = segment_rss_kb(ccl.srv[i].pid, &seg);
        cr_assert_geq(kb, (long)(size / 1024),
                      "server %zu maps %ld KiB of the region when cks_mem_alloc() returns", i,
                      kb);
    }
    /* and the fresh client's version, written from and restored into the
     * regions it allocates next, is exact */
    make_cdata(304);
    write_cversion(c, "moe", 1);
    verify_cversion(c, "moe", 1, "a fresh client's first allocation");
    cr_assert_eq(cks_mem_free(c, buf), CKS_OK);
    cks_client_destroy(c);
}

/* Page faults a restore into a region of `pages` may take, all told (its
 * allocations, UCX's): a quarter of one per page. Under AddressSanitizer,
 * whose shadow of the region is faulted in at the first instrumented
 * access, and whose allocator faults more: fewer than one per page. */
#if defined(__SANITIZE_ADDRESS__)
#define RESTORE_FAULTS_MAX(pages) (pages)
#else
#define RESTORE_FAULTS_MAX(pages) ((pages) / 4)
#endif

/* Minor page faults of this process so far (every thread). */
static long own_minor_faults(void)
{
    struct rusage ru;
    cr_assert_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_minflt;
}

/* A replacement rank restores into a region it has just allocated, with
 * two servers down: its decoder reads the chunks the servers wrote into the
 * region and writes the lost ones there. cks_mem_alloc() faults the region
 * into this process's page tables too, as the servers fault it into theirs
 * (registration at allocation), so the restore takes no page fault per page
 * of it. Before, each 4 KiB of the region cost one on the decoder's thread
 * (about 1500 for this restore's 1280 pages, 215 after; a 2-down restore
 * of 64 MiB objects by a fresh process: 2.6 GB/s, 5.2 once faulted in). */
Test(rma_cluster, a_degraded_restore_into_a_fresh_region_faults_in_none_of_its_pages)
{
    const size_t down[2] = {1, 4}, big = CNOBJ - 1; /* 5 MiB: 1280 pages */
    const long pages     = (long)(CMAX / 4096);
    make_cdata(305);
    cks_client_h c = connect_cluster();
    write_cversion(c, "moe", 1);
    cks_client_destroy(c);
    cks_test_cluster_kill(&ccl, down[0]);
    cks_test_cluster_kill(&ccl, down[1]);
    c = connect_cluster();
    /* a first degraded restore, into malloc() memory: the scratch's slots
     * it uses are faulted in then (at their first use), not counted below */
    uint8_t *warm = malloc(CMAX);
    uint64_t got  = 0;
    char key[64];
    cr_assert_not_null(warm);
    ckey(key, sizeof(key), big - 1);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, "moe", 1, &r), CKS_OK);
    cr_assert_eq(cks_test_get_whole(r, key, warm, CMAX, &got), CKS_OK);
    cr_assert(got == csizes[big - 1] && memcmp(warm, objs.src[big - 1], got) == 0);
    cks_restore_close(r);
    free(warm);
    uint8_t *dst  = shm_alloc(c, CMAX);
    map_ent_t seg = own_segment(dst);
    long kb       = segment_rss_kb(getpid(), &seg);
    cr_assert_geq(kb, (long)(CMAX / 1024),
                  "this process maps %ld KiB of its %zu KiB region when cks_mem_alloc() "
                  "returns", kb, (size_t)(CMAX / 1024));
    ckey(key, sizeof(key), big);
    cr_assert_eq(cks_restore_open(c, "moe", 1, &r), CKS_OK);
    long f0         = own_minor_faults();
    cks_status_t st = cks_test_get_whole(r, key, dst, CMAX, &got);
    long faults     = own_minor_faults() - f0;
    cr_assert_eq(st, CKS_OK, "get %s with servers %zu and %zu down: %s", key, down[0],
                 down[1], cks_status_name(st));
    cr_assert(got == csizes[big] && memcmp(dst, objs.src[big], got) == 0, "bytes differ");
    fprintf(stderr, "a 2-down restore of %llu bytes into a fresh region: %ld page faults\n",
            (unsigned long long)got, faults);
    cr_assert_lt(faults, RESTORE_FAULTS_MAX(pages), "%ld page faults for a region of %ld pages",
                 faults, pages);
    cks_restore_close(r);
    cr_assert_eq(cks_mem_free(c, dst), CKS_OK);
    cks_client_destroy(c);
    cr_assert_eq(cks_test_server_restart(&ccl.srv[down[0]]), 0);
    cr_assert_eq(cks_test_server_restart(&ccl.srv[down[1]]), 0);
}

Test(rma_cluster, ranges_across_stripes_with_one_server_down)
{
    make_cdata(302);
    cks_client_h c = connect_cluster();
    write_cversion(c, "moe", 2);
    cks_client_destroy(c);

    cks_test_cluster_kill(&ccl, 2);
    c = connect_cluster();
    const size_t big = CNOBJ - 1; /* 5 MiB: 20 stripes */
    char key[64];
    ckey(key, sizeof(key), big);
    uint8_t *dst = shm_alloc(c, 2 * MiB + 64);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, "moe", 2, &r), CKS_OK);
    struct {
        uint64_t off, len;
        size_t at;
    } rg[] = {
        {2 * STRIPE - 777, STRIPE + 1554, 0},      /* across two stripe borders */
        {STRIPE - 1, 2, 3},                        /* a byte each side of a border */
        {3 * STRIPE + CHUNK / 2, 5 * STRIPE, 17},  /* mid-chunk to mid-chunk */
        {0, 2 * MiB, 64},                          /* to the allocation's end */
        {csizes[big] - STRIPE - 5, STRIPE + 5, 1}, /* the tail */
    };
    for (size_t i = 0; i < CKS_ARRAY_SIZE(rg); i++) {
        memset(dst, 0x3C, 2 * MiB + 64);
        cks_status_t st = cks_test_get_range(r, key, dst + rg[i].at, rg[i].off, rg[i].len);
        cr_assert_eq(st, CKS_OK, "range %llu+%llu: %s", (unsigned long long)rg[i].off,
                     (unsigned long long)rg[i].len, cks_status_name(st));
        cr_assert(memcmp(dst + rg[i].at, objs.src[big] + rg[i].off, rg[i].len) == 0,
                  "range %llu+%llu with server 2 down", (unsigned long long)rg[i].off,
                  (unsigned long long)rg[i].len);
        for (size_t b = 0; b < rg[i].at; b++) {
            cr_assert_eq(dst[b], 0x3C, "written before the destination");
        }
        for (size_t b = rg[i].at + rg[i].len; b < 2 * MiB + 64; b++) {
            cr_assert_eq(dst[b], 0x3C, "range %zu: written past the destination (+%zu)",
                         i, b - rg[i].at - rg[i].len);
        }
    }
    cks_restore_close(r);
    cr_assert_eq(cks_mem_free(c, dst), CKS_OK);
    verify_cversion(c, "moe", 2, "server 2 down");
    cks_client_destroy(c);
}

TestSuite(rma_cluster_faults, .fini = cks_test_suite_teardown, .timeout = 600);

/* "crc_check" fires where the server decides whether a chunk is checked on
 * its side (it then counts as failing the check).
 * Whole chunks read into malloc memory are checked by the client, not
 * there; read into cks_mem_alloc() memory, the server checks them (it writes
 * them straight into the client's memory). So: a stripe-aligned object read
 * into malloc memory does not reach the fault point; read into shared memory
 * it does, the chunk counts as corrupt, and the restore decodes around it. */
Test(rma_cluster_faults, crc_check_on_the_one_copy_path)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    cks_test_suite_start("crc_check:once", 3);
    make_cdata(303);
    cks_client_h c = connect_cluster();
    write_cversion(c, "moe", 3);

    const size_t aligned = 4; /* 8 stripes */
    char key[64];
    ckey(key, sizeof(key), aligned);
    const uint64_t size = csizes[aligned];
    const char *fired   = "fault point 'crc_check' fired";
    cks_restore_h r;
    uint64_t got;
    cr_assert_eq(cks_restore_open(c, "moe", 3, &r), CKS_OK);

    uint8_t *mdst = malloc(size);
    cr_assert_eq(cks_test_get_whole(r, key, mdst, size, &got), CKS_OK);
    cr_assert(got == size && memcmp(mdst, objs.src[aligned], size) == 0);
    cr_assert(!cks_test_log_has(ccl.srv[3].log, fired, 0),
              "whole chunks read into malloc memory were checked by the server");

    uint8_t *sdst = shm_alloc(c, size);
    cks_status_t st = cks_test_get_whole(r, key, sdst, size, &got);
    cr_assert_eq(st, CKS_OK, "a chunk failing its CRC is decoded around: %s",
                 cks_status_name(st));
    cr_assert(got == size && memcmp(sdst, objs.src[aligned], size) == 0,
              "restore into shared memory around a chunk failing its CRC");
    cr_assert(cks_test_log_has(ccl.srv[3].log, fired, 2000),
              "server 3 never checked a chunk: CHUNK_GET did not take the one-copy path");
    cr_assert(cks_test_log_has(ccl.srv[3].log, "fails its CRC", 2000));
    cks_restore_close(r);
    cr_assert_eq(cks_mem_free(c, sdst), CKS_OK);
    free(mdst);
    verify_cversion(c, "moe", 3, "after the CRC fault");
    cks_client_destroy(c);
}

/* Chunks really corrupted in a server's arena: server 3 flips a bit in every
 * chunk it receives. Restores into shared memory, where the server checks
 * each chunk as it writes it into the client's memory (the bad bytes land
 * there, and the error reply follows), decode around them bit-exact,
 * overwriting them; a scrub reports them, with the bytes still right. */
Test(rma_cluster_faults, corrupted_chunks_are_decoded_around)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    cks_test_suite_start("chunk_corrupt:always", 3);
    make_cdata(304);
    cks_client_h c = connect_cluster();
    write_cversion(c, "moe", 4);
    cr_assert(cks_test_log_has(ccl.srv[3].log, "fault point 'chunk_corrupt' fired", 2000),
              "the corruption fault never fired");
    verify_cversion(c, "moe", 4, "server 3's chunks corrupted");
    cr_assert(cks_test_log_has(ccl.srv[3].log, "fails its CRC", 2000),
              "server 3 sent corrupted chunks without noticing");

    cks_restore_h r;
    int bad      = 0;
    uint8_t *dst = shm_alloc(c, CMAX);
    cr_assert_eq(cks_restore_open(c, "moe", 4, &r), CKS_OK);
    for (size_t i = 0; i < CNOBJ; i++) {
        char key[64];
        cks_get_params_t g = {0};
        ckey(key, sizeof(key), i);
        g.field_mask  = CKS_GET_FIELD_FLAGS;
        g.key         = key;
        g.buffer      = dst;
        g.buffer_size = CMAX;
        g.flags       = CKS_GET_VERIFY | CKS_GET_SCRUB;
        memset(dst, 0, csizes[i]);
        cks_status_t st = cks_get(r, &g, NULL);
        cr_assert(st == CKS_OK || st == CKS_ERR_CRC_MISMATCH, "%s: %s", key,
                  cks_status_name(st));
        /* the bytes are right either way */
        cr_assert(memcmp(dst, objs.src[i], csizes[i]) == 0, "scrub of %s: bytes differ", key);
        bad += st == CKS_ERR_CRC_MISMATCH;
    }
    cr_assert_geq(bad, 1, "the scrub found no corrupted object");
    fprintf(stderr, "scrub: %d of %zu objects have a corrupted chunk\n", bad, CNOBJ);
    cks_restore_close(r);
    cr_assert_eq(cks_mem_free(c, dst), CKS_OK);
    cks_client_destroy(c);
}

/* ======================================================================
 * Bugs found by this suite, fixed since; these tests keep them fixed.
 * ====================================================================== */

/* Fixed since: the key's shape is checked before UCX sees it, refused gets
 * are answered, and a region's header must hold its owner's token. */
static void known_bug(const char *what)
{
    (void)what;
}

TestSuite(rma_known_bugs, .fini = raw_teardown, .timeout = 240);

/* Garbage in a descriptor's packed key. The server must answer every such
 * request and stay up; it may refuse it (an error), or carry it out when
 * UCX makes sense of the key, as long as only the described bytes move. */
Test(rma_known_bugs, garbage_keys_are_refused)
{
    known_bug(
        "a garbage packed key crashes the server: ucp_ep_rkey_unpack() of untrusted "
        "bytes (transport/rma.c cks_tp_rkey_get) dies in ucp_rkey_destroy()");
    raw_setup();
    enum { NV = 12 };
    const desc_t dput = describe(raw_base, 8192);
    const desc_t dget = describe(raw_base + 65536, 8192);
    const size_t kl   = dput.len - DESC_HDR;
    uint64_t seed     = cks_test_seed(202);
    uint64_t x        = seed | 1;
    int accepted[NV]  = {0};
    char key[32], what[96];

    for (int v = 0; v < NV; v++) {
        uint8_t k[CKS_TP_RMA_DESC_MAX];
        memcpy(k, dput.b + DESC_HDR, kl);
        if (v == 0) {
            memset(k, 0, kl);
        } else if (v == 1) {
            memset(k, 0xff, kl);
        } else if (v == 2) {
            k[0] ^= 0xff;
        } else if (v == 3) {
            k[kl - 1] ^= 0xff;
        } else if (v == 4) {
            memset(k + 1, 0xff, kl - 1);
        } else {
            for (size_t i = v < 8 ? kl / 2 : 0; i < kl; i++) { /* the tail, or all */
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                k[i] = (uint8_t)x;
            }
        }
        desc_t d = dput;
        memcpy(d.b + DESC_HDR, k, kl);
        snprintf(key, sizeof(key), "garbage-%d", v);
        snprintf(what, sizeof(what), "put, garbage key %d", v);
        int replied = raw_put(key, 8192, &d, 5000);
        cr_assert(cks_test_server_alive(&srv), "the server died of %s", what);
        cr_assert(replied, "%s: no reply", what);
        accepted[v] = raw.status == CKS_OK;
        if (!accepted[v]) {
            EXPECT_REFUSED(replied, what);
        }

        d = dget;
        memcpy(d.b + DESC_HDR, k, kl);
        memset(raw_base + 65536, 0x77, 8192);
        snprintf(what, sizeof(what), "get, garbage key %d", v);
        replied = raw_get(0, 8192, &d, 5000);
        cr_assert(cks_test_server_alive(&srv), "the server died of %s", what);
        cr_assert(replied, "%s: no reply", what);
        if (raw.status == CKS_OK) {
            cr_assert(memcmp(raw_base + 65536, obj_ref, 8192) == 0,
                      "%s: accepted, but the bytes are not where the descriptor says",
                      what);
        } else {
            EXPECT_REFUSED(replied, what);
        }
    }
    still_serving("garbage");
    /* what an accepted put stored is the described bytes */
    cr_assert_eq(cks_version_seal(cl, "raw", 1), CKS_OK);
    cks_restore_h r;
    uint8_t back[8192];
    cr_assert_eq(cks_restore_open(cl, "raw", 1, &r), CKS_OK);
    for (int v = 0; v < NV; v++) {
        if (accepted[v]) {
            snprintf(key, sizeof(key), "garbage-%d", v);
            cr_assert_eq(cks_test_get_whole(r, key, back, sizeof(back), NULL), CKS_OK);
            cr_assert(memcmp(back, raw_base, 8192) == 0, "%s stored other bytes", key);
        }
    }
    cks_restore_close(r);
}

/* A GET (or CHUNK_GET) that cks_tp_send_into() refuses at once gets no
 * reply at all: the client waits for its whole timeout. */
Test(rma_known_bugs, get_refusals_are_answered)
{
    known_bug(
        "server/server.c cks_sv_get() and server/cluster.c cks_sv_chunk_get() send no "
        "reply when cks_tp_send_into() fails");
    raw_setup();
    lie_t lies[8];
    size_t n = make_lies(lies);
    char what[160];
    for (size_t i = 0; i < n; i++) {
        desc_t d = lie_desc(&lies[i]);
        snprintf(what, sizeof(what), "get, %s", lies[i].what);
        int replied = raw_get(0, 4096, &d, 5000);
        cr_assert(cks_test_server_alive(&srv), "the server died: %s", what);
        EXPECT_REFUSED(replied, what);
    }
    /* an honest descriptor of less memory than the reply needs */
    desc_t d = describe(raw_base, 100);
    EXPECT_REFUSED(raw_get(0, UINT64_MAX, &d, 5000),
                   "get, descriptor shorter than the object");
    still_serving("short");
}

/* A whole get into a cks_mem_alloc() buffer smaller than the object: with
 * malloc memory it is CKS_ERR_INVALID_PARAM at once; with shared memory the
 * server refuses the descriptor without a reply, and the get times out. */
Test(rma_known_bugs, too_small_shared_buffer_is_invalid_param)
{
    known_bug("a whole get into a too small cks_mem_alloc() buffer times out instead of "
              "CKS_ERR_INVALID_PARAM (no reply: see get_refusals_are_answered)");
    cr_assert_eq(cks_test_server_start(&srv, 64 * MiB), 0);
    cks_client_params_t p = {0};
    p.field_mask          = CKS_CLIENT_FIELD_SERVER | CKS_CLIENT_FIELD_TIMEOUT_MS;
    p.server              = srv.addr;
    p.timeout_ms          = 5000;
    cr_assert_eq(cks_client_create(&p, &cl), CKS_OK);
    const uint64_t size = 64 * KiB;
    uint8_t *ref = malloc(size), *m = malloc(size);
    cks_test_fill(ref, size, 5);
    cks_test_begin(cl, "small", 1);
    cr_assert_eq(cks_test_put(cl, "small", 1, "k", ref, size), CKS_OK);
    cr_assert_eq(cks_version_seal(cl, "small", 1), CKS_OK);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(cl, "small", 1, &r), CKS_OK);
    cr_assert_eq(cks_test_get_whole(r, "k", m, size - 1, NULL), CKS_ERR_INVALID_PARAM,
                 "malloc memory");
    uint8_t *s = shm_alloc(cl, 2 * size);
    memset(s, 0x33, 2 * size);
    uint64_t t0     = cks_time_ns();
    cks_status_t st = cks_test_get_whole(r, "k", s, size - 1, NULL);
    double secs     = (double)(cks_time_ns() - t0) / 1e9;
    for (uint64_t b = size - 1; b < 2 * size; b++) {
        cr_assert_eq(s[b], 0x33, "written past the buffer");
    }
    cr_assert_eq(st, CKS_ERR_INVALID_PARAM, "shared memory: %s after %.1f s",
                 cks_status_name(st), secs);
    cks_restore_close(r);
    cr_assert_eq(cks_mem_free(cl, s), CKS_OK);
    free(ref);
    free(m);
}

/* The key names a segment by a system-wide id (a SysV shmid or a posix
 * file): a client can send the key of ANOTHER process's cks_mem_alloc()
 * memory, with that region's true base and length. The mapping the unpack
 * makes is new, shared, starts at the base and is long enough, so every
 * check passes, and the server reads (put) and writes (get) the other
 * process's memory for this client. rma.c's DESIGN says "a peer can only
 * make us read or write its own segment". */
static void victim_child(int wfd, int rfd)
{
    cks_test_raw_t dummy;
    cks_tp_worker_h w;
    cks_tp_mem_h m;
    void *base;
    uint8_t d[CKS_TP_RMA_DESC_MAX];
    size_t len;
    char go;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (cks_test_raw_worker(&dummy, "victim") != CKS_OK ||
        cks_tp_mem_alloc((w = dummy.w), MiB, &m, &base) != CKS_OK) {
        _exit(10);
    }
    memset(base, 0x42, MiB);
    if (cks_tp_mem_describe(m, base, 8192, d, sizeof(d), &len) != CKS_OK ||
        write(wfd, &len, sizeof(len)) != (ssize_t)sizeof(len) ||
        write(wfd, d, len) != (ssize_t)len) {
        _exit(11);
    }
    struct pollfd pf = {.fd = rfd, .events = POLLIN};
    if (poll(&pf, 1, 120000) != 1 || read(rfd, &go, 1) != 1) {
        _exit(12);
    }
    int touched = 0;
    for (size_t i = 0; i < MiB; i++) {
        touched |= ((uint8_t *)base)[i] != 0x42;
    }
    cks_tp_mem_unmap(m);
    cks_tp_worker_destroy(w);
    _exit(touched ? 3 : 0);
}

Test(rma_known_bugs, another_processs_region_is_refused)
{
    known_bug("a descriptor with another process's key passes every check "
              "(transport/rma.c cks_tp_rkey_check)");
    int to_parent[2], to_child[2];
    cr_assert_eq(pipe(to_parent), 0);
    cr_assert_eq(pipe(to_child), 0);
    /* the victim first, before this process has any UCX state to fork */
    pid_t victim = fork();
    cr_assert_geq(victim, 0);
    if (victim == 0) {
        close(to_parent[0]);
        close(to_child[1]);
        victim_child(to_parent[1], to_child[0]);
    }
    close(to_parent[1]);
    close(to_child[0]);
    desc_t vd;
    memset(&vd, 0, sizeof(vd));
    struct pollfd pf = {.fd = to_parent[0], .events = POLLIN};
    cr_assert_eq(poll(&pf, 1, 30000), 1, "the victim process did not start");
    cr_assert_eq(read(to_parent[0], &vd.len, sizeof(vd.len)), (ssize_t)sizeof(vd.len));
    cr_assert(vd.len > DESC_HDR && vd.len <= CKS_TP_RMA_DESC_MAX);
    cr_assert_eq(read(to_parent[0], vd.b, vd.len), (ssize_t)vd.len);

    raw_setup();
    /* the attacker can learn the victim's key (SysV ids are listed by ipcs),
     * not the token in the victim's memory: it sends its own */
    desc_t mine = describe(raw_base, 4096);
    memcpy(vd.b + 40, mine.b + 40, 32);
    int put_replied    = raw_put("stolen", 8192, &vd, 5000);
    int32_t put_status = raw.status;
    char put_msg[256];
    snprintf(put_msg, sizeof(put_msg), "%s", raw.msg);
    int get_replied    = raw_get(0, 8192, &vd, 5000);
    int32_t get_status = raw.status;
    cr_assert(cks_test_server_alive(&srv));

    /* what the victim saw */
    cr_assert_eq(write(to_child[1], "x", 1), 1);
    int st = 0;
    /* the victim holds the write end of to_parent until it exits: wait for
     * the hang-up (bounded), then reap it */
    struct pollfd hup = {.fd = to_parent[0], .events = POLLIN};
    char drain;
    for (int i = 0; i < 16 && poll(&hup, 1, 20000) == 1 && read(to_parent[0], &drain, 1) == 1;
         i++) {
    }
    if (waitpid(victim, &st, WNOHANG) == 0) {
        kill(victim, SIGKILL);
        waitpid(victim, &st, 0);
    }
    close(to_parent[0]);
    close(to_child[1]);
    /* what the put stored */
    int stolen = 0;
    if (put_replied && put_status == CKS_OK) {
        cks_restore_h r;
        uint8_t back[8192];
        cr_assert_eq(cks_version_seal(cl, "raw", 1), CKS_OK);
        cr_assert_eq(cks_restore_open(cl, "raw", 1, &r), CKS_OK);
        if (cks_test_get_whole(r, "stolen", back, sizeof(back), NULL) == CKS_OK) {
            stolen = 1;
            for (size_t i = 0; i < sizeof(back); i++) {
                stolen &= back[i] == 0x42;
            }
        }
        cks_restore_close(r);
    }
    cr_log_info("put: replied %d, %s (%s); get: replied %d, %s; victim exit %d",
                put_replied, cks_status_name(put_status), put_msg, get_replied,
                cks_status_name(get_status), WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 10 && WEXITSTATUS(st) != 11 &&
                  WEXITSTATUS(st) != 12,
              "the victim process failed on its own (status %d)", st);
    cr_assert(!stolen,
              "the server copied another process's memory into this client's object");
    cr_assert(put_replied && put_status < 0, "a put naming another process's memory: %s",
              cks_status_name(put_status));
    cr_assert_eq(WEXITSTATUS(st), 0, "the server wrote into another process's memory");
    cr_assert(get_replied && get_status < 0, "a get naming another process's memory: %s",
              cks_status_name(get_status));
}

/* ======================================================================
 * Copy threads: a server with --copy-threads copies transfers of 2 MiB and
 * more from and into the client's shared memory on its own threads, in
 * 1 MiB parts; every byte lands where it belongs, and nothing else.
 * ====================================================================== */

static void setup_copy(void)
{
    cks_test_set_server_flags("--copy-threads 3");
    setup();
    cks_test_set_server_flags(NULL);
}

/* The "copy threads: N transfers, B bytes" line a server logs when it stops. */
static int copy_log(const char *path, unsigned long long *jobs_p, unsigned long long *bytes_p)
{
    FILE *f = fopen(path, "r");
    char line[512];
    int found = 0;

    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *p = strstr(line, "copy threads: ");
        if (p != NULL && sscanf(p, "copy threads: %llu transfers, %llu bytes", jobs_p,
                                bytes_p) == 2) {
            found = 1;
        }
    }
    fclose(f);
    return found;
}

TestSuite(rma_copy, .init = setup_copy, .fini = teardown, .timeout = 240);

Test(rma_copy, puts_and_ranges_copied_by_threads_are_exact)
{
    /* at, just past and far past the threshold; parts that do not divide
     * the size; sources and destinations at odd places */
    static const uint64_t sizes[] = {2 * MiB, 2 * MiB + 1, 5 * MiB + 4097, 48 * MiB + 13};
    const uint64_t big             = 48 * MiB + 13;
    unsigned long long jobs = 0, bytes = 0;
    char key[32];

    cr_assert(cks_test_log_has(srv.log, "3 copy threads", 5000), "the server started no copy threads");
    uint8_t *ref = cks_test_seeded_bytes(big + 4096, 151);
    uint8_t *src = shm_alloc(cl, big + 4096);
    uint8_t *dst = shm_alloc(cl, big + 65536);
    memcpy(src, ref, big + 4096);

    cks_test_begin(cl, "copy", 1);
    for (size_t i = 0; i < CKS_ARRAY_SIZE(sizes); i++) {
        snprintf(key, sizeof(key), "obj-%zu", i);
        cr_assert_eq(cks_test_put(cl, "copy", 1, key, src + 7 * i, sizes[i]), CKS_OK,
                     "put %s", key);
    }
    cr_assert_eq(cks_version_seal(cl, "copy", 1), CKS_OK);
    cr_assert(memcmp(src, ref, big + 4096) == 0, "the source buffer changed");

    cks_restore_h r;
    cr_assert_eq(cks_restore_open(cl, "copy", 1, &r), CKS_OK);
    for (size_t i = 0; i < CKS_ARRAY_SIZE(sizes); i++) {
        uint64_t len = UINT64_MAX;
        snprintf(key, sizeof(key), "obj-%zu", i);
        /* whole (checked as written, by the progress thread) */
        memset(dst, 0xA5, sizes[i] + 4096);
        cr_assert_eq(cks_test_get_whole(r, key, dst, big + 65536, &len), CKS_OK, "get %s", key);
        cr_assert_eq(len, sizes[i]);
        cr_assert(memcmp(dst, ref + 7 * i, sizes[i]) == 0, "bytes of %s differ", key);
        /* ranges of 2 MiB and more (unchecked: the copy threads) at odd
         * offsets into odd destinations, with guards either side */
        uint64_t off = sizes[i] > 2 * MiB ? 1 : 0;
        uint64_t n   = sizes[i] - 1; /* never the whole object: unchecked */
        size_t d     = 13 + 4096 * i;
        memset(dst, 0x5C, n + d + 64);
        cr_assert_eq(cks_test_get_range(r, key, dst + d, off, n), CKS_OK, "range of %s", key);
        cr_assert(memcmp(dst + d, ref + 7 * i + off, n) == 0, "range of %s differs", key);
        for (size_t b = 0; b < d; b++) {
            cr_assert_eq(dst[b], 0x5C, "written before the range of %s", key);
        }
        for (size_t b = 0; b < 64; b++) {
            cr_assert_eq(dst[d + n + b], 0x5C, "written past the range of %s", key);
        }
    }
    cks_restore_close(r);
    free_bufs(ref, src, dst);

    /* the threads did the copies: every put, the whole gets (each part
     * checked as written) and the ranges of 2 MiB and more */
    cr_assert_eq(cks_test_server_stop(&srv, SIGTERM), 0);
    cr_assert(copy_log(srv.log, &jobs, &bytes), "the server logged no copy-thread counts");
    cr_assert_geq(jobs, 2 * CKS_ARRAY_SIZE(sizes) - 1, "%llu transfers (%llu bytes) by the copy threads", jobs, bytes);
    cr_assert_geq(bytes, 2 * (2 * MiB + 5 * MiB + 48 * MiB), "%llu bytes by the copy threads", bytes);
}

Test(rma_copy, many_transfers_in_flight_at_once_are_exact)
{
    enum { N = 12 };
    const uint64_t size = 6 * MiB + 333;
    cks_test_count_t b;
    uint8_t *ref        = cks_test_seeded_bytes(size * N, 152);
    uint8_t *src = shm_alloc(cl, size * N);
    uint8_t *dst = shm_alloc(cl, size * N);
    memcpy(src, ref, size * N);

    /* non-blocking puts, all in flight together: the threads take their
     * parts job after job */
    cks_test_begin(cl, "burst", 1);
    cks_test_count_init(&b, N);
    for (unsigned i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof(key), "o%u", i);
        cks_put_params_t p = cks_test_put_params("burst", 1, key, src + i * size, size);
        cr_assert_eq(cks_put_nb(cl, &p, cks_test_count_done, &b), CKS_INPROGRESS, "put %s",
                     key);
    }
    cks_status_t st = cks_test_count_wait(&b, 60000);
    cr_assert_eq(st, CKS_OK, "the puts: %s", cks_status_name(st));
    cr_assert_eq(cks_version_seal(cl, "burst", 1), CKS_OK);

    /* range gets, all in flight together, into neighbouring destinations */
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(cl, "burst", 1, &r), CKS_OK);
    memset(dst, 0, size * N);
    cks_test_count_init(&b, N);
    for (unsigned i = 0; i < N; i++) {
        char key[32];
        cks_get_params_t g = {0};
        snprintf(key, sizeof(key), "o%u", i);
        g.field_mask  = CKS_GET_FIELD_RANGE;
        g.key         = key;
        g.buffer      = dst + i * size;
        g.buffer_size = size;
        g.offset      = 0;
        g.length      = size - 1;
        cr_assert_eq(cks_get_nb(r, &g, NULL, cks_test_count_done, &b), CKS_INPROGRESS,
                     "get %s", key);
    }
    st = cks_test_count_wait(&b, 60000);
    cr_assert_eq(st, CKS_OK, "the gets: %s", cks_status_name(st));
    for (unsigned i = 0; i < N; i++) {
        cr_assert(memcmp(dst + i * size, ref + i * size, size - 1) == 0, "o%u differs", i);
        cr_assert_eq(dst[i * size + size - 1], 0, "o%u: written past its range", i);
    }
    cks_restore_close(r);
    free_bufs(ref, src, dst);
}

Test(rma_copy, a_rotted_object_fails_its_whole_get_on_the_copy_threads)
{
    const uint64_t size = 9 * MiB + 77; /* parts that do not divide it */
    uint64_t seed       = cks_test_seed(153);
    uint8_t *src        = shm_alloc(cl, size);
    uint8_t *dst        = shm_alloc(cl, size);
    uint64_t len        = 0;

    cks_test_fill(src, size, seed);
    cks_test_begin(cl, "rot", 1);
    cr_assert_eq(cks_test_put(cl, "rot", 1, "obj", src, size), CKS_OK);
    cr_assert_eq(cks_version_seal(cl, "rot", 1), CKS_OK);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(cl, "rot", 1, &r), CKS_OK);
    /* whole gets are checked (each part as written, then combined) */
    cr_assert_eq(cks_test_get_whole(r, "obj", dst, size, &len), CKS_OK);
    cr_assert(len == size && memcmp(dst, src, size) == 0, "the bytes before the rot");

    /* the arena's copy rots after its CRC was recorded: near the end, in a
     * part that one of the other threads copies */
    cr_assert_eq(cks_test_rot(srv.arena, src + size - 3 * MiB + 5), 1);
    cr_assert_eq(cks_test_get_whole(r, "obj", dst, size, &len), CKS_ERR_CRC_MISMATCH,
                 "a whole get of a rotted object");
    cks_restore_close(r);
    cr_assert_eq(cks_mem_free(cl, src), CKS_OK);
    cr_assert_eq(cks_mem_free(cl, dst), CKS_OK);

    unsigned long long jobs = 0, bytes = 0;
    cr_assert_eq(cks_test_server_stop(&srv, SIGTERM), 0);
    cr_assert(copy_log(srv.log, &jobs, &bytes), "the server logged no copy-thread counts");
    cr_assert_eq(jobs, 3, "the put and both gets went to the copy threads (%llu)", jobs);
}
