/*
 * End-to-end: a cluster that keeps writing with servers down. Six real
 * ckstore-server processes on 127.0.0.1 (ports picked at run time, stopped
 * by pid), RS(4,2), so every stripe's group holds all six servers and any
 * server down touches every object.
 *
 * With one or two servers killed, a version whose coordinator is up commits
 * DEGRADED, stating the redundancy it has, and every object restores
 * bit-exact; with three down,
 * the write fails with an error that names the servers; a version whose
 * coordinator is down is coordinated by its next candidate (and one whose
 * first two candidates are down by the third), commits, restores exactly,
 * and can be deleted with its coordinator still down.
 */
#include "ckstore.h"
#include "cks_test.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB  (1ull << 20)
#define NSRV 6
#define K    4
#define M    2
#define CHUNK (64 * 1024)
#define NOBJ 8

static cks_test_cluster_t cl;
static uint8_t *src[NOBJ];
static uint64_t sizes[NOBJ];
static uint64_t g_seed;

static void setup(void)
{
    cr_assert_eq(cks_test_cluster_start(&cl, NSRV, 3, 256 * MiB, -1, NULL), 0);
}

static void teardown(void)
{
    cks_test_cluster_cleanup(&cl);
    for (size_t i = 0; i < NOBJ; i++) {
        free(src[i]);
        src[i] = NULL;
    }
}

TestSuite(heal, .init = setup, .fini = teardown, .timeout = 300);

/* Objects of mixed sizes (empty, tiny, partial stripe, several stripes with
 * a padded tail), so that their primaries differ and some lie on servers
 * that are down. */
static void make_data(uint64_t seed)
{
    static const uint64_t base[NOBJ] = {0,       1,           4097,    K * CHUNK,
                                        3 * MiB + 12345, 1 * MiB, 700001, 2 * MiB + 3};
    g_seed = seed;
    for (size_t i = 0; i < NOBJ; i++) {
        sizes[i] = base[i];
        free(src[i]);
        src[i] = malloc(sizes[i] + 1);
        cr_assert_not_null(src[i]);
    }
}

/* The bytes of object i of version v. */
static void fill(size_t i, uint64_t v)
{
    cks_test_fill(src[i], sizes[i], g_seed * 1000003 + v * 131 + i);
}

static cks_client_h connect_cluster(int timeout_ms)
{
    cks_client_h c = NULL;
    cr_assert_eq(cks_test_connect_cluster(cl.map, K, M, CHUNK, timeout_ms, &c), CKS_OK,
                 "connect to the cluster in %s", cl.map);
    return c;
}

/* Write version v (every object); the first failure, with its text in why. */
static cks_status_t write_version(cks_client_h c, uint64_t v, char *why, size_t why_len)
{
    cks_version_params_t vp = {0};
    cks_status_t st;
    char key[64];

    why[0]     = '\0';
    vp.job     = "heal";
    vp.version = v;
    st         = cks_version_begin(c, &vp);
    for (size_t i = 0; st == CKS_OK && i < NOBJ; i++) {
        cks_put_params_t p = {0};
        snprintf(key, sizeof(key), "layer%zu/expert%zu", i, i * 5);
        fill(i, v);
        p.job     = "heal";
        p.version = v;
        p.key     = key;
        p.buffer  = src[i];
        p.size    = sizes[i];
        st        = cks_put(c, &p);
    }
    if (st == CKS_OK) {
        st = cks_version_seal(c, "heal", v);
    } else if (st == CKS_ERR_VERSION_NOT_OPEN) {
        /* the version failed meanwhile: a rank that finishes learns why */
        cks_status_t sst = cks_version_seal(c, "heal", v);
        st               = sst != CKS_OK ? sst : st;
    }
    if (st != CKS_OK) {
        cks_client_last_error(c, why, why_len);
    }
    return st;
}

/* Restore every object of version v whole; each must be bit-exact. */
static void verify_version(cks_client_h c, uint64_t v, const char *when)
{
    cks_restore_h r = NULL;
    uint8_t *dst    = malloc(4 * MiB);
    char key[64];

    cr_assert_not_null(dst);
    cks_status_t st = cks_restore_open(c, "heal", v, &r);
    cr_assert_eq(st, CKS_OK, "%s: open version %llu: %s", when, (unsigned long long)v,
                 cks_status_name(st));
    for (size_t i = 0; i < NOBJ; i++) {
        cks_get_params_t g = {0};
        uint64_t got       = UINT64_MAX;
        snprintf(key, sizeof(key), "layer%zu/expert%zu", i, i * 5);
        fill(i, v);
        memset(dst, 0xEE, sizes[i] + 1);
        g.field_mask  = CKS_GET_FIELD_FLAGS;
        g.key         = key;
        g.buffer      = dst;
        g.buffer_size = 4 * MiB;
        g.flags       = CKS_GET_VERIFY;
        st            = cks_get(r, &g, &got);
        cr_assert_eq(st, CKS_OK, "%s: version %llu '%s': %s", when, (unsigned long long)v, key,
                     cks_status_name(st));
        cr_assert_eq(got, sizes[i], "%s: '%s': %llu bytes", when, key,
                     (unsigned long long)got);
        cr_assert(memcmp(dst, src[i], sizes[i]) == 0, "%s: '%s': bytes differ", when, key);
        cr_assert_eq(dst[sizes[i]], 0xEE, "%s: '%s': written past the end", when, key);
    }
    cks_restore_close(r);
    free(dst);
}

/* On a failure: the servers' warnings and errors, for the reader. */
static void dump_logs(void)
{
    char line[1024];
    for (size_t i = 0; i < cl.n; i++) {
        FILE *f = fopen(cl.srv[i].log, "r");
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
            if (strstr(line, " warn ") != NULL || strstr(line, " error ") != NULL) {
                fprintf(stderr, "  server %zu: %s", i, line);
            }
        }
        if (f != NULL) {
            fclose(f);
        }
    }
}

/* The first version from `from` on whose coordinator is not in down[]. */
static uint64_t version_with_live_coordinator(uint64_t from, const int *down)
{
    for (uint64_t v = from; v < from + 1000; v++) {
        int coord = cks_test_coordinator(cl.map, "heal", v);
        cr_assert(coord >= 0);
        if (!down[coord]) {
            return v;
        }
    }
    cr_assert_fail("no version with a live coordinator");
    return 0;
}

/* A server that is not down and does not coordinate version v. */
static size_t pick_victim(uint64_t v, const int *down, size_t after)
{
    int coord = cks_test_coordinator(cl.map, "heal", v);
    for (size_t i = 0; i < NSRV; i++) {
        size_t s = (after + i) % NSRV;
        if (!down[s] && (int)s != coord) {
            return s;
        }
    }
    cr_assert_fail("no server to take down");
    return 0;
}

static void expect_state(cks_client_h c, uint64_t v, cks_vstate_t state, uint32_t redundancy)
{
    cks_version_info_t vi;
    cks_status_t st = cks_version_stat(c, "heal", v, &vi);
    cr_assert_eq(st, CKS_OK, "stat of version %llu: %s", (unsigned long long)v,
                 cks_status_name(st));
    cr_assert_eq(vi.state, state, "version %llu is %s, not %s", (unsigned long long)v,
                 cks_vstate_string(vi.state), cks_vstate_string(state));
    cr_assert_eq(vi.redundancy, redundancy, "version %llu: redundancy %u, not %u",
                 (unsigned long long)v, vi.redundancy, redundancy);
    cr_assert_eq(vi.ec_m, M);
    cr_assert_eq(vi.nobjects, NOBJ);
    if (state == CKS_VSTATE_PROTECTED) {
        cr_assert_eq(vi.missing, 0);
    } else {
        cr_assert_gt(vi.missing, 0, "version %llu: DEGRADED with no chunk missing",
                     (unsigned long long)v);
    }
}

/* One, then two servers killed: each version commits DEGRADED with the
 * redundancy it has left, and every version restores exactly with both
 * still down. */
Test(heal, degraded_writes_with_one_and_two_servers_down)
{
    int down[NSRV] = {0};
    char why[512];
    make_data(cks_test_seed(cks_test_seed_fresh()));
    cks_client_h c = connect_cluster(20000);

    uint64_t v1 = version_with_live_coordinator(1, down);
    cr_assert_eq(write_version(c, v1, why, sizeof(why)), CKS_OK, "healthy write: %s", why);
    expect_state(c, v1, CKS_VSTATE_PROTECTED, M);

    uint64_t v2 = version_with_live_coordinator(v1 + 1, down);
    size_t a    = pick_victim(v2, down, (size_t)g_seed % NSRV);
    fprintf(stderr, "version %llu: server %zu killed\n", (unsigned long long)v2, a);
    cks_test_cluster_kill(&cl, a);
    down[a] = 1;
    cks_status_t st = write_version(c, v2, why, sizeof(why));
    if (st != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "write with server %zu down: %s (%s)", a, cks_status_name(st),
                 why);
    expect_state(c, v2, CKS_VSTATE_DEGRADED, M - 1);
    verify_version(c, v2, "one down");

    uint64_t v3 = version_with_live_coordinator(v2 + 1, down);
    size_t b    = pick_victim(v3, down, a + 1);
    fprintf(stderr, "version %llu: servers %zu and %zu killed\n", (unsigned long long)v3, a, b);
    cks_test_cluster_kill(&cl, b);
    down[b] = 1;
    st = write_version(c, v3, why, sizeof(why));
    if (st != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "write with servers %zu, %zu down: %s (%s)", a, b,
                 cks_status_name(st), why);
    expect_state(c, v3, CKS_VSTATE_DEGRADED, 0);
    verify_version(c, v1, "two down");
    verify_version(c, v2, "two down");
    verify_version(c, v3, "two down");
    cks_client_destroy(c);

    /* a fresh client (no knowledge of who is down) reads them all too */
    c = connect_cluster(20000);
    verify_version(c, v3, "two down, fresh client");
    cks_client_destroy(c);
}

/* Three of six servers down with RS(4,2): no stripe could keep k chunks,
 * and no coordinator can win a majority; the write fails at its begin
 * (CKS_ERR_NO_QUORUM) with an error naming the servers, and the version is
 * never restorable. */
Test(heal, more_than_m_down_fails_naming_the_servers)
{
    int down[NSRV] = {0};
    char why[512], port[16];
    make_data(cks_test_seed(cks_test_seed_fresh()));
    cks_client_h c = connect_cluster(20000);
    uint64_t v     = version_with_live_coordinator(1, down);
    for (int n = 0; n < 3; n++) {
        size_t s = pick_victim(v, down, (size_t)n * 2);
        cks_test_cluster_kill(&cl, s);
        down[s] = 1;
    }
    cks_status_t st = write_version(c, v, why, sizeof(why));
    fprintf(stderr, "write with 3 down: %s: %s\n", cks_status_name(st), why);
    cr_assert(st < 0, "a write with three servers down: %s", cks_status_name(st));
    int named = 0;
    for (size_t i = 0; i < NSRV; i++) {
        snprintf(port, sizeof(port), ":%u", cl.srv[i].port);
        if (strstr(why, port) != NULL) {
            cr_assert(down[i], "'%s' names server %zu, which is up", why, i);
            named++;
        }
    }
    cr_assert_eq(named, 3, "'%s' names %d of the 3 servers down", why, named);
    cks_restore_h r;
    cr_assert_neq(cks_restore_open(c, "heal", v, &r), CKS_OK);
    cks_client_destroy(c);
}

/* A version's coordinator is down: its next candidate coordinates it (the
 * majority of the servers grants it the version), it commits DEGRADED and
 * restores exactly; with its first two candidates down, the third. Deletes,
 * stats and latest go on with the coordinator down. Before failover, such a
 * version could not begin ('CKS_ERR_UNREACHABLE'). */
Test(heal, version_with_its_coordinator_down_is_coordinated_by_the_next)
{
    int down[NSRV] = {0};
    int cand[NSRV];
    char why[512];
    make_data(cks_test_seed(cks_test_seed_fresh()));
    cks_client_h c = connect_cluster(5000);
    uint64_t v1    = version_with_live_coordinator(1, down);
    cr_assert_eq(write_version(c, v1, why, sizeof(why)), CKS_OK, "%s", why);

    uint64_t v2 = v1 + 1;
    int n       = cks_test_coordinators(cl.map, "heal", v2, cand, NSRV);
    cr_assert_geq(n, 3, "%d coordinator candidates", n);
    cr_assert_eq(cand[0], cks_test_coordinator(cl.map, "heal", v2));
    cks_test_cluster_kill(&cl, (size_t)cand[0]);
    down[cand[0]]   = 1;
    cks_status_t st = write_version(c, v2, why, sizeof(why));
    if (st != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "version %llu with its coordinator %d down: %s (%s)",
                 (unsigned long long)v2, cand[0], cks_status_name(st), why);
    expect_state(c, v2, CKS_VSTATE_DEGRADED, M - 1);
    verify_version(c, v2, "coordinated by the second candidate");

    /* the first two candidates of the next version down (one more server) */
    uint64_t v3 = v2 + 1;
    for (;; v3++) {
        cr_assert_eq(cks_test_coordinators(cl.map, "heal", v3, cand, NSRV), n);
        if ((down[cand[0]] || down[cand[1]]) && !down[cand[2]]) {
            break;
        }
        cr_assert_lt(v3, v2 + 1000, "no version whose third candidate is up");
    }
    for (int i = 0; i < 2; i++) {
        if (!down[cand[i]]) {
            cks_test_cluster_kill(&cl, (size_t)cand[i]);
            down[cand[i]] = 1;
        }
    }
    st = write_version(c, v3, why, sizeof(why));
    if (st != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "version %llu with candidates %d and %d down: %s (%s)",
                 (unsigned long long)v3, cand[0], cand[1], cks_status_name(st), why);
    expect_state(c, v3, CKS_VSTATE_DEGRADED, 0);
    verify_version(c, v1, "two servers down");
    verify_version(c, v2, "two servers down");
    verify_version(c, v3, "coordinated by the third candidate");

    /* latest, and a delete whose coordinator is down */
    cks_version_info_t vi;
    cr_assert_eq(cks_version_latest(c, "heal", &vi), CKS_OK);
    cr_assert_eq(vi.version, v3);
    st = cks_version_delete(c, "heal", v2);
    cr_assert_eq(st, CKS_OK, "delete of version %llu with its coordinator down: %s",
                 (unsigned long long)v2, cks_status_name(st));
    cr_assert_eq(cks_version_stat(c, "heal", v2, &vi), CKS_ERR_NO_SUCH_VERSION);
    verify_version(c, v3, "after the delete");
    cks_client_destroy(c);
}
