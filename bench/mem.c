/*
 * DESIGN: buffers for the benchmark and what backs them. Owns the three
 * kinds of host buffer the bench compares (malloc, anonymous transparent
 * huge pages, /dev/shm file with huge pages as the server's arena), the
 * check of how much of a range huge pages really map (/proc/PID/smaps), the
 * pattern fill and the memcpy reference. Runs on whichever thread calls it.
 * Never: leave a buffer un-faulted (first-touch page faults are 6-10x slower
 * than a copy and would be measured instead of the transport).
 */
#include "bench.h"
#include "ckstore.h"
#include "cks_common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define BENCH_HUGE (2ul << 20)

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void bench_stats(uint64_t bytes, double *secs, unsigned n, bench_stats_t *st_p)
{
    bench_stats_t st = {0, 0, 0, n};
    if (n > 0) {
        qsort(secs, n, sizeof(*secs), bench_cmp_double);
        /* the median time gives the median rate; an even count averages the two */
        double med = n % 2 ? secs[n / 2] : (secs[n / 2 - 1] + secs[n / 2]) / 2;
        st.median  = (double)bytes / med / BENCH_GB;
        st.max     = (double)bytes / secs[0] / BENCH_GB;
        st.min     = (double)bytes / secs[n - 1] / BENCH_GB;
    }
    *st_p = st;
}

const char *bench_size_str(uint64_t size, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    while (u + 1 < sizeof(unit) / sizeof(unit[0]) && size >= 1024 && size % 1024 == 0) {
        size /= 1024;
        u++;
    }
    snprintf(buf, len, "%llu %s", (unsigned long long)size, unit[u]);
    return buf;
}

int bench_size_parse(const char *text, uint64_t *size_p)
{
    uint64_t v;
    if (cks_size_parse(text, &v) != CKS_OK || v == 0 || v > (1ull << 40)) {
        return -1;
    }
    *size_p = v;
    return 0;
}

int bench_opt_copy_threads(const char *arg, const bench_opt_t *o)
{
    char *end;
    unsigned long v = strtoul(arg, &end, 10);
    if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || v > 16) {
        return -1;
    }
    *(unsigned *)o->dst = v == 0 ? UINT_MAX : (unsigned)v;
    return 0;
}

static void bench_prefault(void *p, size_t len)
{
    if (madvise(p, len, MADV_POPULATE_WRITE) == 0) {
        return;
    }
    memset(p, 0, len); /* kernels before 5.14 */
}

/* A 2 MiB-aligned mapping of len bytes: THP needs the alignment. */
static void *bench_map_aligned(size_t len, int fd, size_t *map_len_p)
{
    size_t span = len + BENCH_HUGE;
    char *area  = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) {
        return NULL;
    }
    char *base = (char *)(((uintptr_t)area + BENCH_HUGE - 1) & ~(uintptr_t)(BENCH_HUGE - 1));
    int flags  = MAP_FIXED | (fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS);
    if (mmap(base, len, PROT_READ | PROT_WRITE, flags, fd, 0) == MAP_FAILED) {
        munmap(area, span);
        return NULL;
    }
    if (base > area) {
        munmap(area, (size_t)(base - area));
    }
    if (area + span > base + len) {
        munmap(base + len, (size_t)(area + span - (base + len)));
    }
    *map_len_p = len;
    return base;
}

int bench_buf_alloc(bench_mem_kind_t kind, size_t len, bench_buf_t *buf_p, char *err,
                    size_t errlen)
{
    bench_buf_t b = {NULL, len, 0, kind, 0};
    char path[96];
    int fd;

    len = (len + BENCH_HUGE - 1) & ~(BENCH_HUGE - 1);
    switch (kind) {
        case BENCH_MEM_CKS:
            snprintf(err, errlen, "cks_mem_alloc() memory needs a client (bench.c)");
            return -1;
        case BENCH_MEM_MALLOC:
            b.ptr = malloc(len);
            if (b.ptr == NULL) {
                snprintf(err, errlen, "malloc(%zu) failed", len);
                return -1;
            }
            memset(b.ptr, 0, len);
            break;
        case BENCH_MEM_THP:
            b.ptr = bench_map_aligned(len, -1, &b.map_len);
            if (b.ptr == NULL) {
                snprintf(err, errlen, "mmap(%zu): %s", len, strerror(errno));
                return -1;
            }
            madvise(b.ptr, len, MADV_HUGEPAGE); /* fails only without THP support */
            bench_prefault(b.ptr, len);
            break;
        case BENCH_MEM_SHM_THP:
            snprintf(path, sizeof(path), "/dev/shm/ckstore-bench-%d-%p.buf", (int)getpid(),
                     (void *)buf_p);
            fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            if (fd < 0) {
                snprintf(err, errlen, "%s: %s", path, strerror(errno));
                return -1;
            }
            unlink(path); /* nothing to clean up, whatever happens next */
            if (ftruncate(fd, (off_t)len) != 0 ||
                (b.ptr = bench_map_aligned(len, fd, &b.map_len)) == NULL) {
                snprintf(err, errlen, "%s: %s", path, strerror(errno));
                close(fd);
                return -1;
            }
            close(fd);
            madvise(b.ptr, len, MADV_HUGEPAGE); /* huge pages if /dev/shm allows them */
            bench_prefault(b.ptr, len);
            break;
    }
    *buf_p = b;
    return 0;
}

void bench_buf_free(bench_buf_t *b)
{
    if (b->ptr == NULL || b->kind == BENCH_MEM_CKS) {
        return; /* cks_mem_alloc()'s: the client frees them */
    }
    if (b->map_len > 0) {
        munmap(b->ptr, b->map_len);
    } else {
        free(b->ptr);
    }
    b->ptr = NULL;
}

int bench_huge_percent(pid_t pid, const void *addr, size_t len, const char *path)
{
    char name[64], line[512];
    uintptr_t lo = (uintptr_t)addr, hi = lo + len;
    int64_t huge = 0, rss = 0;
    int in       = 0;

    if (pid == 0) {
        snprintf(name, sizeof(name), "/proc/self/smaps");
    } else {
        snprintf(name, sizeof(name), "/proc/%d/smaps", (int)pid);
    }
    FILE *f = fopen(name, "r");
    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long start, end;
        char key[64];
        long long kb;
        if (sscanf(line, "%lx-%lx ", &start, &end) == 2) {
            /* a mapping header: "start-end perms offset dev inode [path]" */
            if (path != NULL) {
                in = strstr(line, path) != NULL; /* also "PATH (deleted)" */
            } else {
                in = start < hi && end > lo;
            }
            continue;
        }
        if (!in || sscanf(line, "%63[^:]: %lld kB", key, &kb) != 2) {
            continue;
        }
        if (strcmp(key, "Rss") == 0) {
            rss += kb;
        } else if (strcmp(key, "AnonHugePages") == 0 || strcmp(key, "ShmemPmdMapped") == 0 ||
                   strcmp(key, "FilePmdMapped") == 0) {
            huge += kb;
        }
    }
    fclose(f);
    return rss > 0 ? (int)((100 * huge + rss / 2) / rss) : 0;
}

double bench_touch_ms_gib(size_t len, bench_pages_t *kind)
{
    size_t map_len = CKS_ALIGN_UP(len, BENCH_HUGE);
    uint8_t *p     = NULL;
    double t0, t1;
    if (*kind == BENCH_PAGES_HUGETLB) {
        p = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        p = p != MAP_FAILED ? p : NULL;
        *kind = p != NULL ? BENCH_PAGES_HUGETLB : BENCH_PAGES_BASE;
    }
    if (p == NULL) {
        /* on a 2 MiB boundary, so that THP can map every page of it */
        if ((p = bench_map_aligned(map_len, -1, &map_len)) == NULL) {
            return NAN;
        }
        madvise(p, len, *kind == BENCH_PAGES_THP ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    }
    t0 = bench_now();
    memset(p, 1, len);
    t1 = bench_now();
    munmap(p, map_len);
    return (t1 - t0) * 1e3 / ((double)len / (1u << 30));
}

double bench_back_free_memory(size_t len)
{
    bench_pages_t kind = BENCH_PAGES_THP;
    return bench_touch_ms_gib(len, &kind);
}

const char *bench_pages_name(bench_pages_t kind)
{
    return kind == BENCH_PAGES_HUGETLB ? "2 MiB"
           : kind == BENCH_PAGES_THP   ? "THP 2 MiB"
                                       : "4 KiB";
}

double bench_memcpy_once(void *dst, const void *src, size_t size)
{
    double t0 = bench_now();
    memcpy(dst, src, size);
    /* keep the compiler from dropping or moving the copy */
    __asm__ __volatile__("" : : "r"(dst) : "memory");
    return bench_now() - t0;
}

/* Client buffers from cks_mem_alloc(), which faults them in (in this process
 * and in every server on this host) before it returns. */
int bench_ck_buf_alloc(cks_client_h client, size_t len, bench_buf_t *buf)
{
    double t0       = bench_now();
    cks_status_t st = cks_mem_alloc(client, len, &buf->ptr);
    buf->alloc_s    = bench_now() - t0;
    if (st != CKS_OK) {
        fprintf(stderr, "ckstore-bench: cks_mem_alloc(%zu): %s\n", len, cks_status_string(st));
        return -1;
    }
    buf->len     = len;
    buf->map_len = 0;
    buf->kind    = BENCH_MEM_CKS;
    /* not touched here: a replacement rank restores straight into what it
     * allocated (until 2026-11-29 a memset here faulted the pages into the
     * client, which hid that cks_mem_alloc() left its own page tables
     * empty; the kernel hands the region over zeroed) */
    return 0;
}

void bench_ck_buf_free(cks_client_h client, bench_buf_t *buf)
{
    if (buf->kind == BENCH_MEM_CKS && buf->ptr != NULL) {
        cks_mem_free(client, buf->ptr);
        buf->ptr = NULL;
    }
}
