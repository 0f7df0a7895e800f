/*
 * End-to-end: cks_mem_alloc() memory in huge pages. UCX allocates a
 * client's registered memory as SysV shared memory and takes huge pages for
 * it where the host has some reserved (UCX_SYSV_HUGETLB_MODE "try"); every
 * server on the host then maps the client's segment 2 MiB at a time. Real
 * ckstore-server processes on 127.0.0.1 (ports picked at run time, stopped
 * by pid):
 *
 *  - a client held to base pages (UCX_SYSV_HUGETLB_MODE=n) reports none of
 *    its registered bytes in huge pages: the figure is not always "huge";
 *  - with huge pages to be had (root: /proc/sys/vm/nr_overcommit_hugepages is
 *    raised for the test, so that the kernel hands out surplus huge pages on
 *    demand and takes each back when it is freed, and put back after it;
 *    skipped where that cannot be done), the
 *    client's regions are in 2 MiB pages, the server maps the very segment
 *    with 2 MiB pages and faults it in, and puts from it and whole and
 *    ranged gets into it are bit-exact;
 *  - the same against a 6-server RS(4, 2) cluster, restored with two servers
 *    killed (the degraded path decodes into huge-page memory);
 *  - a server's arena on hugetlbfs (a mount of the test's own, as root): in
 *    2 MiB pages, all taken at start, exact, kept across a restart; an odd
 *    size and a pool too small refused at start with their reasons.
 *
 * Loops are bounded in count and time.
 */
#include "ckstore.h"
#include "cks_common.h"
#include "cks_test.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define MiB   (1ull << 20)
#define HUGE  (2ull << 20)
#define NEED  48 /* huge pages the tests hold at most at once (96 MiB) */
#define SLACK 16 /* and UCX's own, see huge_reserve() */

/* ---- the host's huge pages ------------------------------------------------------- */

#define OVERCOMMIT "/proc/sys/vm/nr_overcommit_hugepages"

static long nr_before = -1; /* OVERCOMMIT before a test raised it (-1: untouched) */

/* A field of /proc/meminfo ("HugePages_Free"), -1 when it is not there. */
static long meminfo(const char *name)
{
    char line[256];
    long v = -1;
    size_t n = strlen(name);
    FILE *f = fopen("/proc/meminfo", "r");
    while (f != NULL && v < 0 && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, name, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return v;
}

static long read_nr(void)
{
    long v = -1;
    FILE *f = fopen(OVERCOMMIT, "r");
    if (f != NULL && fscanf(f, "%ld", &v) != 1) {
        v = -1;
    }
    if (f != NULL) {
        fclose(f);
    }
    return v;
}

static int write_nr(long nr)
{
    FILE *f = fopen(OVERCOMMIT, "w");
    int ok = f != NULL && fprintf(f, "%ld\n", nr) > 0;
    return (f != NULL && fclose(f) == 0 && ok) ? 0 : -1;
}

/* The host's huge pages are one setting for every process: a test holds
 * this lock from huge_reserve() to huge_release(), so that two runs of this
 * binary at once (scripts/test runs its release and ASan passes side by
 * side) do not change the limit under each other. Before, one put it back
 * while the other still allocated (a client's second region in 4 KiB
 * pages: "10813454 of 19202126 registered bytes in huge pages"), and the
 * limit was left raised after both. */
#define HUGE_LOCK      "/tmp/ckstore-test-hugepages.lock"
#define HUGE_LOCK_WAIT 600 /* s: longer than this binary's tests take */
static int huge_lock_fd = -1;

static void huge_lock(void)
{
    if (huge_lock_fd >= 0) {
        return;
    }
    /* read-only is enough for flock(), and opens a file another user made */
    huge_lock_fd = open(HUGE_LOCK, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    if (huge_lock_fd < 0) {
        cr_log_warn("no lock on the host's huge pages (%s: %s)", HUGE_LOCK, strerror(errno));
        return;
    }
    for (int i = 0; flock(huge_lock_fd, LOCK_EX | LOCK_NB) != 0; i++) {
        cr_assert_lt(i, HUGE_LOCK_WAIT * 10, "another test held %s for %d s", HUGE_LOCK,
                     HUGE_LOCK_WAIT);
        usleep(100 * 1000);
    }
}

/* Put the limit back as it was (a .fini, also after a failed test; a
 * skipped test's .fini does not run); the kernel frees surplus pages as
 * their last user lets go of them. Then let the next test have them. */
static void huge_release(void)
{
    if (nr_before >= 0) {
        (void)write_nr(nr_before);
        nr_before = -1;
    }
    if (huge_lock_fd >= 0) {
        close(huge_lock_fd); /* drops the lock */
        huge_lock_fd = -1;
    }
}

static void huge_skip_cleanup(void);

/* Make NEED huge pages of 2 MiB available: free in the pool, or allowed as
 * surplus pages the kernel takes from free memory when they are asked for
 * (raising OVERCOMMIT where that is short); or skip the test saying why. */
static void huge_reserve(void)
{
    huge_lock();
    long free_now = meminfo("HugePages_Free"), over = read_nr();
    /* UCX also takes huge pages for its shared-memory FIFOs (one or two a
     * process) where it can: SLACK more for those */
    long want = meminfo("HugePages_Surp") + NEED + SLACK - free_now;
    if (meminfo("Hugepagesize") != 2048) {
        huge_skip_cleanup();
        cr_skip_test("this host's huge pages are not 2 MiB");
    }
    if (free_now < NEED + SLACK && (over < 0 || over < want)) {
        if (geteuid() != 0 || over < 0 || write_nr(want) != 0) {
            huge_skip_cleanup();
            cr_skip_test("%ld huge pages free and %s cannot be raised (not root)",
                         free_now, OVERCOMMIT);
        }
        nr_before = over;
    }
    /* can the kernel find them (2 MiB of contiguous free memory each)? */
    void *p = mmap(NULL, NEED * HUGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
        huge_skip_cleanup();
        cr_skip_test("the kernel has no %d huge pages to give (memory fragmented)", NEED);
    }
    munmap(p, NEED * HUGE);
}

/* ---- /proc/PID/smaps: the mapping that holds a segment ---------------------------- */

typedef struct {
    char dev[16];
    unsigned long inode;
    long page_kb;    /* KernelPageSize */
    long hugetlb_kb; /* Shared_Hugetlb + Private_Hugetlb: huge pages mapped */
    long rss_kb;
} seg_t;

/* The mapping of pid (0: this process) that holds addr (addr != NULL) or
 * maps the segment like->dev/inode (addr == NULL); page_kb -1: none. */
static seg_t smaps_find(pid_t pid, const void *addr, const seg_t *like)
{
    char path[64], line[512];
    seg_t s = {.page_kb = -1}, cur = {.page_kb = -1};
    int in = 0, found = 0;
    snprintf(path, sizeof(path), pid ? "/proc/%d/smaps" : "/proc/self/smaps", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "open %s", path);
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        unsigned long long lo, hi;
        long v;
        if (sscanf(line, "%llx-%llx %*s %*s %15s %lu", &lo, &hi, cur.dev, &cur.inode) ==
            4) {
            if (in) {
                found = 1; /* the mapping's fields ended */
                break;
            }
            in = addr != NULL
                     ? (uintptr_t)addr >= lo && (uintptr_t)addr < hi
                     : cur.inode == like->inode && strcmp(cur.dev, like->dev) == 0;
            if (in) {
                s = cur;
                s.page_kb = 0;
            }
        } else if (in && sscanf(line, "KernelPageSize: %ld kB", &v) == 1) {
            s.page_kb = v;
        } else if (in && (sscanf(line, "Shared_Hugetlb: %ld kB", &v) == 1 ||
                          sscanf(line, "Private_Hugetlb: %ld kB", &v) == 1)) {
            s.hugetlb_kb += v;
        } else if (in && sscanf(line, "Rss: %ld kB", &v) == 1) {
            s.rss_kb = v;
        }
    }
    fclose(f);
    return s;
}

static uint8_t *mem_alloc(cks_client_h c, size_t size)
{
    void *p = NULL;
    cr_assert_eq(cks_mem_alloc(c, size, &p), CKS_OK, "cks_mem_alloc(%zu)", size);
    return p;
}

static cks_client_stats_t stats_of(cks_client_h c)
{
    cks_client_stats_t s;
    cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
    return s;
}

/* Put `n` objects of sizes[] from src (ref's bytes) as version 1 of job. */
static void put_objects(cks_client_h c, const char *job, const uint8_t *src,
                        const uint64_t *sizes, size_t n)
{
    char key[32];
    uint64_t off = 0;
    cks_test_begin(c, job, 1);
    for (size_t i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "obj-%zu", i);
        cr_assert_eq(cks_test_put(c, job, 1, key, src + off, sizes[i]), CKS_OK, "put %s",
                     key);
        off += sizes[i];
    }
    cr_assert_eq(cks_version_seal(c, job, 1), CKS_OK);
}

/* Get them back whole into dst (cleared first) and one range of each into
 * dst at an odd offset; every byte must be ref's. */
static void check_objects(cks_client_h c, const char *job, const uint8_t *ref,
                          uint8_t *dst, const uint64_t *sizes, size_t n, const char *tag)
{
    char key[32];
    uint64_t off = 0;
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, job, 1, &r), CKS_OK, "%s: restore_open", tag);
    for (size_t i = 0; i < n; i++) {
        uint64_t got = 0, roff = sizes[i] / 3 + 1,
                 rlen = sizes[i] > 64 ? sizes[i] - roff - 5 : 0;
        snprintf(key, sizeof(key), "obj-%zu", i);
        memset(dst, 0x5A, sizes[i]);
        cr_assert_eq(cks_test_get_whole(r, key, dst, sizes[i], &got), CKS_OK,
                     "%s: get %s", tag, key);
        cr_assert(got == sizes[i] && memcmp(dst, ref + off, sizes[i]) == 0,
                  "%s: bytes of %s differ", tag, key);
        if (rlen == 0) {
            off += sizes[i];
            continue;
        }
        memset(dst, 0x5A, sizes[i]);
        cr_assert_eq(cks_test_get_range(r, key, dst + 7, roff, rlen), CKS_OK,
                     "%s: range of %s", tag, key);
        cr_assert(memcmp(dst + 7, ref + off + roff, rlen) == 0, "%s: range of %s differs",
                  tag, key);
        off += sizes[i];
    }
    cks_restore_close(r);
}

/* ======================================================================
 * Standalone server
 * ====================================================================== */

static cks_test_server_t srv;

static void setup(void)
{
    cr_assert_eq(cks_test_server_start(&srv, 256 * MiB), 0);
}

static void teardown(void)
{
    cks_test_server_cleanup(&srv);
    huge_release();
    unsetenv("UCX_SYSV_HUGETLB_MODE");
}

TestSuite(huge_single, .init = setup, .fini = teardown, .timeout = 120);

Test(huge_single, a_client_held_to_base_pages_reports_none_in_huge_pages)
{
    setenv("UCX_SYSV_HUGETLB_MODE", "n", 1); /* read when the client's UCX starts */
    cks_client_h c = cks_test_client(&srv, 30000);
    const size_t size = 4 * MiB + 1;
    uint8_t *p = mem_alloc(c, size);
    cks_client_stats_t s = stats_of(c);
    seg_t own = smaps_find(0, p, NULL);
    cr_assert_eq(own.page_kb, sysconf(_SC_PAGESIZE) / 1024, "the region's pages: %ld kB",
                 own.page_kb);
    cr_assert_eq(s.registered_bytes, size, "registered %llu bytes",
                 (unsigned long long)s.registered_bytes);
    cr_assert_eq(s.registered_huge_bytes, 0, "%llu bytes reported in huge pages",
                 (unsigned long long)s.registered_huge_bytes);
    cr_assert_eq(cks_mem_free(c, p), CKS_OK);
    s = stats_of(c);
    cr_assert_eq(s.registered_bytes, 0, "%llu bytes registered after the free",
                 (unsigned long long)s.registered_bytes);
    cks_client_destroy(c);
}

Test(huge_single, regions_in_huge_pages_are_mapped_so_by_the_server_and_round_trip)
{
    static const uint64_t sizes[] = {6 * MiB + 5, 1, 3 * HUGE, 123457};
    uint64_t total = 0;
    for (size_t i = 0; i < CKS_ARRAY_SIZE(sizes); i++) {
        total += sizes[i];
    }
    huge_reserve();
    cks_client_h c = cks_test_client(&srv, 30000);
    uint8_t *src = mem_alloc(c, total), *dst = mem_alloc(c, 6 * MiB + 64);
    uint8_t *ref = cks_test_seeded_bytes(total, 701);
    cks_client_stats_t s = stats_of(c);
    cr_assert_eq(s.registered_bytes, total + 6 * MiB + 64);
    cr_assert_eq(s.registered_huge_bytes, s.registered_bytes,
                 "%llu of %llu registered bytes in huge pages, with %ld huge pages free",
                 (unsigned long long)s.registered_huge_bytes,
                 (unsigned long long)s.registered_bytes, meminfo("HugePages_Free"));

    /* the server maps the client's segment in huge pages, and has faulted
     * it in by the time cks_mem_alloc() returned (it waits for the MEM_MAP
     * answer, which waits for the fault-in) */
    seg_t own = smaps_find(0, src, NULL);
    cr_assert_eq(own.page_kb, HUGE / 1024, "the client's region: %ld kB pages",
                 own.page_kb);
    seg_t theirs = smaps_find(srv.pid, NULL, &own);
    cr_assert_eq(theirs.page_kb, HUGE / 1024,
                 "the server maps the client's segment (%s %lu) with %ld kB pages "
                 "(-1: not at all)",
                 own.dev, own.inode, theirs.page_kb);
    cr_assert_geq(theirs.hugetlb_kb, (long)(total / 1024),
                  "the server faulted in %ld KiB of the %llu-byte region",
                  theirs.hugetlb_kb, (unsigned long long)total);

    memcpy(src, ref, total);
    put_objects(c, "huge", src, sizes, CKS_ARRAY_SIZE(sizes));
    cr_assert(memcmp(src, ref, total) == 0, "the put wrote into the source");
    check_objects(c, "huge", ref, dst, sizes, CKS_ARRAY_SIZE(sizes), "standalone");
    cr_assert_eq(cks_mem_free(c, src), CKS_OK);
    cr_assert_eq(cks_mem_free(c, dst), CKS_OK);
    cks_client_destroy(c);
    free(ref);
}

/* ======================================================================
 * A 6-server RS(4, 2) cluster
 * ====================================================================== */

static cks_test_cluster_t ccl;

/* Before a skip: a skipped test's .fini does not run, so what its suite's
 * .init started (the server, the cluster) is stopped and removed here, and
 * the limit and the lock are given back. */
static void huge_skip_cleanup(void)
{
    cks_test_server_cleanup(&srv);
    memset(&srv, 0, sizeof(srv));
    cks_test_cluster_cleanup(&ccl);
    memset(&ccl, 0, sizeof(ccl));
    huge_release();
}

static void cluster_setup(void)
{
    cr_assert_eq(cks_test_cluster_start(&ccl, 6, 3, 256 * MiB, -1, NULL), 0);
}

static void cluster_teardown(void)
{
    cks_test_cluster_cleanup(&ccl);
    huge_release();
}

TestSuite(huge_cluster, .init = cluster_setup, .fini = cluster_teardown, .timeout = 240);

Test(huge_cluster, restores_into_huge_pages_with_two_servers_down)
{
    static const uint64_t sizes[] = {8 * MiB + 3, 64 * 1024 * 5 + 11, 2 * MiB};
    uint64_t total = 0;
    for (size_t i = 0; i < CKS_ARRAY_SIZE(sizes); i++) {
        total += sizes[i];
    }
    huge_reserve();
    cks_client_h c = cks_test_cluster_client(ccl.map, 4, 2, 64 * 1024, 30000);
    uint8_t *src = mem_alloc(c, total), *dst = mem_alloc(c, 8 * MiB + 64);
    uint8_t *ref = cks_test_seeded_bytes(total, 702);
    cks_client_stats_t s = stats_of(c);
    cr_assert_eq(s.registered_huge_bytes, s.registered_bytes,
                 "%llu of %llu registered bytes in huge pages",
                 (unsigned long long)s.registered_huge_bytes,
                 (unsigned long long)s.registered_bytes);
    memcpy(src, ref, total);
    put_objects(c, "huge", src, sizes, CKS_ARRAY_SIZE(sizes));
    check_objects(c, "huge", ref, dst, sizes, CKS_ARRAY_SIZE(sizes), "all up");

    cks_test_cluster_kill(&ccl, 1);
    cks_test_cluster_kill(&ccl, 4);
    check_objects(c, "huge", ref, dst, sizes, CKS_ARRAY_SIZE(sizes),
                  "servers 1 and 4 down");
    cr_assert_eq(cks_mem_free(c, src), CKS_OK);
    cr_assert_eq(cks_mem_free(c, dst), CKS_OK);
    cks_client_destroy(c);
    free(ref);
}

/* ======================================================================
 * An arena on hugetlbfs
 * ====================================================================== */

static char hmount[64]; /* a hugetlbfs mount of the test's own ("": none) */

static void arena_teardown(void)
{
    cks_test_server_cleanup(&srv);
    if (hmount[0] != '\0') {
        (void)umount(hmount);
        (void)rmdir(hmount);
        hmount[0] = '\0';
    }
    huge_release();
}

TestSuite(huge_arena, .fini = arena_teardown, .timeout = 120);

/* Mount hugetlbfs on a directory of the test's own, or skip saying why. */
static void mount_hugetlbfs(void)
{
    snprintf(hmount, sizeof(hmount), "/tmp/cks-hugetlbfs-XXXXXX");
    cr_assert_not_null(mkdtemp(hmount));
    if (mount("none", hmount, "hugetlbfs", 0, NULL) != 0) {
        int err = errno;
        rmdir(hmount);
        hmount[0] = '\0';
        huge_release();
        cr_skip_test("cannot mount hugetlbfs: %s", strerror(err));
    }
}

/* The server's mapping of its arena file: page size and huge pages mapped. */
static seg_t arena_mapping(const cks_test_server_t *s)
{
    struct stat st;
    seg_t like = {0};
    cr_assert_eq(stat(s->arena, &st), 0, "stat %s", s->arena);
    snprintf(like.dev, sizeof(like.dev), "%02x:%02x", major(st.st_dev), minor(st.st_dev));
    like.inode = (unsigned long)st.st_ino;
    return smaps_find(s->pid, NULL, &like);
}

/* A server whose arena file is on hugetlbfs maps it with 2 MiB pages, takes
 * them all at start, serves exactly, and finds its objects again after a
 * restart on the same file. An arena that is not a whole number of huge
 * pages, or larger than the huge pages the host can give, is refused at
 * start with a message that says so (before: "cannot size to ...: Invalid
 * argument" and "mmap: Cannot allocate memory", both "server I/O error"). */
Test(huge_arena, an_arena_on_hugetlbfs_serves_and_keeps_its_objects_across_a_restart)
{
    static const uint64_t sizes[] = {5 * MiB + 3, 4097, 1};
    const uint64_t arena = 32 * MiB;
    uint64_t total = 0;
    for (size_t i = 0; i < CKS_ARRAY_SIZE(sizes); i++) {
        total += sizes[i];
    }
    huge_reserve();
    mount_hugetlbfs();
    cr_assert_eq(cks_test_server_start_in(&srv, arena, hmount), 0);
    seg_t m = arena_mapping(&srv);
    cr_assert_eq(m.page_kb, HUGE / 1024, "the server maps its arena with %ld kB pages",
                 m.page_kb);
    cr_assert_eq(m.hugetlb_kb, (long)(arena / 1024), "%ld KiB of the arena mapped at start",
                 m.hugetlb_kb);

    cks_client_h c = cks_test_client(&srv, 30000);
    uint8_t *ref = cks_test_seeded_bytes(total, 703), *dst = malloc(sizes[0]);
    cr_assert_not_null(dst);
    put_objects(c, "harena", ref, sizes, CKS_ARRAY_SIZE(sizes));
    check_objects(c, "harena", ref, dst, sizes, CKS_ARRAY_SIZE(sizes), "hugetlbfs arena");
    cks_client_destroy(c);

    cr_assert_eq(cks_test_server_restart(&srv), 0);
    c = cks_test_client(&srv, 30000);
    check_objects(c, "harena", ref, dst, sizes, CKS_ARRAY_SIZE(sizes), "after a restart");
    cks_client_destroy(c);
    free(dst);
    free(ref);

    /* refused at start, each with its reason */
    cks_test_server_t bad;
    cr_assert_neq(cks_test_server_start_in(&bad, arena + 4096, hmount), 0,
                  "an arena of 32 MiB + 4 KiB on hugetlbfs started");
    cr_assert(cks_test_log_has(bad.log, "must be a multiple of the huge page size", 0),
              "no reason given for the odd size (log %s)", bad.log);
    cks_test_server_cleanup(&bad);
    long can = meminfo("HugePages_Free") + read_nr() - meminfo("HugePages_Surp");
    if (can < 4096) { /* at most 8 GiB asked: skipped on a host with a larger pool */
        uint64_t too_big = (uint64_t)(can + 16) * HUGE;
        cr_assert_neq(cks_test_server_start_in(&bad, too_big, hmount), 0,
                      "an arena of %ld huge pages started with %ld to be had", can + 16,
                      can);
        cr_assert(cks_test_log_has(bad.log, "huge pages needed", 0),
                  "no reason given for the pool too small (log %s)", bad.log);
        cks_test_server_cleanup(&bad);
    }
}
