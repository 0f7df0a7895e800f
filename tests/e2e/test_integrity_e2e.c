/*
 * End-to-end: no race or mix-up returns wrong bytes, on a 6-server RS(4,2)
 * cluster of real processes.
 *
 * Stripe geometry: clients with other RS(k, m) or chunk sizes write into one
 * version, and a child version is begun by a client whose geometry differs
 * from its parent's. Each is either refused with a clear error from the
 * servers or restores bit-exact: never CKS_OK with other bytes; what a
 * refused version stored is freed.
 *
 * Shared chunks: a parent whose objects a committed child's manifest uses is
 * deleted; the child (and a grandchild) still restore bit-exact, also after
 * every server was killed and restarted; once the last version using them is
 * deleted, the servers' arena use is back to what it was before any version
 * was written.
 */
#include "ckstore.h"
#include "cks_test.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB  (1ull << 10)
#define MiB  (1ull << 20)
#define NSRV 6

static cks_test_cluster_t cl;

static cks_client_h connect_geo(unsigned k, unsigned m, uint64_t chunk)
{
    cks_client_h c;
    cr_assert_eq(cks_test_connect_cluster(cl.map, k, m, chunk, 20000, &c), CKS_OK,
                 "client RS(%u,%u), %llu-byte chunks", k, m, (unsigned long long)chunk);
    return c;
}

static void setup(void)
{
    cr_assert_eq(cks_test_cluster_start(&cl, NSRV, 3, 128 * MiB, -1, NULL), 0);
}

static void teardown(void)
{
    cks_test_cluster_cleanup(&cl);
}

TestSuite(integrity, .init = setup, .fini = teardown, .timeout = 300);

static cks_status_t put_obj(cks_client_h c, const char *job, uint64_t v, const char *key,
                            const void *buf, uint64_t size)
{
    cks_put_params_t p = {0};
    p.job              = job;
    p.version          = v;
    p.key              = key;
    p.buffer           = buf;
    p.size             = size;
    return cks_put(c, &p);
}

static uint64_t usage(cks_client_h c)
{
    uint64_t used = 0;
    cr_assert_eq(cks_cluster_usage(c, &used, NULL), CKS_OK);
    return used;
}

/* The object's bytes as restored from (job, version): must be exactly `want`.
 * Returns the get's status; asserts the bytes when it is CKS_OK. */
static cks_status_t check_object(cks_client_h c, const char *job, uint64_t v, const char *key,
                                 const uint8_t *want, uint64_t size)
{
    cks_restore_h r;
    cks_status_t st = cks_restore_open(c, job, v, &r);
    if (st != CKS_OK) {
        return st;
    }
    uint8_t *got       = malloc(size + 1);
    cks_get_params_t g = {0};
    uint64_t len       = 0;
    cr_assert_not_null(got);
    memset(got, 0xa5, size + 1);
    g.key         = key;
    g.buffer      = got;
    g.buffer_size = size + 1;
    st            = cks_get(r, &g, &len);
    if (st == CKS_OK) {
        cr_assert_eq(len, size, "'%s' of %llu: %llu bytes, want %llu", key,
                     (unsigned long long)v, (unsigned long long)len, (unsigned long long)size);
        size_t bad = 0;
        while (bad < size && got[bad] == want[bad]) {
            bad++;
        }
        cr_assert(bad == size,
                  "'%s' of version %llu restored with CKS_OK but differs from byte %zu on "
                  "(got 0x%02x, want 0x%02x)",
                  key, (unsigned long long)v, bad, got[bad], want[bad]);
    }
    free(got);
    cks_restore_close(r);
    return st;
}

/* The error a call returned, with the server's message, must name geometry. */
static void assert_geometry_refusal(cks_client_h c, cks_status_t st, const char *what)
{
    char msg[512];
    cks_client_last_error(c, msg, sizeof(msg));
    printf("%s: %s: %s\n", what, cks_status_string(st), msg);
    cr_assert_eq(st, CKS_ERR_INVALID_PARAM, "%s: %s (%s)", what, cks_status_string(st), msg);
    cr_assert(strstr(msg, "geometry") != NULL, "%s: message '%s' does not name the geometry",
              what, msg);
}

typedef struct {
    cks_client_h c;
    const char *job;
    uint64_t version;
    uint32_t rank;
    cks_status_t st;
} finish_arg_t;

static void *finish_thread(void *arg)
{
    finish_arg_t *f = arg;
    f->st           = cks_version_finish(f->c, f->job, f->version, f->rank);
    return NULL;
}

/* #15 item 1: a version begun with RS(4,2) and 4 KiB chunks; rank 0 writes
 * with that geometry, rank 1 from a client with another one. The outcome is
 * a refusal naming the geometry (of the put or of the version), or both
 * objects restore exact; what the refused version stored is freed. */
Test(integrity, put_with_other_geometry_is_refused_or_exact)
{
    static const struct {
        unsigned k, m;
        uint64_t chunk;
    } other[] = {{4, 2, 64 * KiB}, {2, 2, 4 * KiB}, {4, 1, 4 * KiB}};
    const uint64_t size = 16 * KiB; /* one stripe of the version's geometry */
    uint8_t *a = malloc(size), *b = malloc(size);
    cks_client_h ca = connect_geo(4, 2, 4 * KiB);
    const uint64_t base = usage(ca);

    cr_assert(a != NULL && b != NULL);
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        const uint64_t v = 1 + i;
        char what[128];
        cks_client_h cb = connect_geo(other[i].k, other[i].m, other[i].chunk);
        cks_version_params_t vp = {0};
        snprintf(what, sizeof(what), "writer RS(%u,%u) %llu-byte chunks into RS(4,2) 4096",
                 other[i].k, other[i].m, (unsigned long long)other[i].chunk);
        vp.field_mask = CKS_VERSION_FIELD_NRANKS;
        vp.job        = "geo";
        vp.version    = v;
        vp.nranks     = 2;
        cr_assert_eq(cks_version_begin(ca, &vp), CKS_OK);
        cks_test_fill(a, size, 100 + v);
        cks_test_fill(b, size, 200 + v);
        cr_assert_eq(put_obj(ca, "geo", v, "a", a, size), CKS_OK);
        cks_status_t put_b = put_obj(cb, "geo", v, "b", b, size);
        if (put_b != CKS_OK) {
            assert_geometry_refusal(cb, put_b, what);
        }
        finish_arg_t f0 = {ca, "geo", v, 0, CKS_OK};
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, finish_thread, &f0), 0);
        cks_status_t fin1 = cks_version_finish(cb, "geo", v, 1);
        pthread_join(t, NULL);
        if (fin1 != CKS_OK || f0.st != CKS_OK) {
            /* refused: both ranks learn why; nothing of it is restorable */
            assert_geometry_refusal(cb, fin1, what);
            assert_geometry_refusal(ca, f0.st, what);
            cks_restore_h r;
            cr_assert_neq(cks_restore_open(ca, "geo", v, &r), CKS_OK, "%s", what);
        } else {
            cr_assert_eq(check_object(ca, "geo", v, "a", a, size), CKS_OK, "%s", what);
            cks_status_t st = check_object(ca, "geo", v, "b", b, size);
            cr_assert(put_b != CKS_OK || st == CKS_OK, "%s: 'b' stored, committed, then %s",
                      what, cks_status_string(st));
            cr_assert_eq(cks_version_delete(ca, "geo", v), CKS_OK);
        }
        cks_client_destroy(cb);
        /* whatever was refused left nothing behind */
        uint64_t used = usage(ca);
        cr_assert_eq(used, base, "%s: arena use %llu after the version ended, %llu before",
                     what, (unsigned long long)used, (unsigned long long)base);
    }
    cks_client_destroy(ca);
    free(a);
    free(b);
}

/* #15 item 1: a child version begun by a client whose geometry differs from
 * the parent's is refused with the reason, or its inherited objects restore
 * exact. A child of the same geometry works. */
Test(integrity, child_with_other_geometry_is_refused_or_exact)
{
    static const struct {
        unsigned k, m;
        uint64_t chunk;
    } other[] = {{4, 2, 4 * KiB}, {2, 2, 16 * KiB}};
    const uint64_t size = 16 * KiB;
    uint8_t *x = malloc(size), *y = malloc(size);
    cks_client_h cp = connect_geo(4, 2, 16 * KiB);
    cks_version_params_t vp = {0};

    cr_assert(x != NULL && y != NULL);
    cks_test_fill(x, size, 7);
    cks_test_fill(y, size, 8);
    vp.job     = "child";
    vp.version = 1;
    cr_assert_eq(cks_version_begin(cp, &vp), CKS_OK);
    cr_assert_eq(put_obj(cp, "child", 1, "x", x, size), CKS_OK);
    cr_assert_eq(cks_version_seal(cp, "child", 1), CKS_OK);

    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        const uint64_t v = 2 + i;
        char what[128];
        cks_client_h cc = connect_geo(other[i].k, other[i].m, other[i].chunk);
        snprintf(what, sizeof(what), "child RS(%u,%u) %llu-byte chunks of RS(4,2) 16384",
                 other[i].k, other[i].m, (unsigned long long)other[i].chunk);
        vp            = (cks_version_params_t){0};
        vp.field_mask = CKS_VERSION_FIELD_PARENT;
        vp.job        = "child";
        vp.version    = v;
        vp.parent     = 1;
        cks_status_t st = cks_version_begin(cc, &vp);
        if (st != CKS_OK) {
            assert_geometry_refusal(cc, st, what);
        } else {
            cr_assert_eq(put_obj(cc, "child", v, "y", y, size), CKS_OK, "%s", what);
            cr_assert_eq(cks_version_seal(cc, "child", v), CKS_OK, "%s", what);
            cr_assert_eq(check_object(cc, "child", v, "y", y, size), CKS_OK, "%s", what);
            st = check_object(cc, "child", v, "x", x, size);
            cr_assert_eq(st, CKS_OK, "%s: inherited 'x' %s", what, cks_status_string(st));
        }
        cks_client_destroy(cc);
    }
    /* the parent's own geometry: a child works and inherits exactly */
    vp            = (cks_version_params_t){0};
    vp.field_mask = CKS_VERSION_FIELD_PARENT;
    vp.job        = "child";
    vp.version    = 10;
    vp.parent     = 1;
    cr_assert_eq(cks_version_begin(cp, &vp), CKS_OK);
    cr_assert_eq(put_obj(cp, "child", 10, "y", y, size), CKS_OK);
    cr_assert_eq(cks_version_seal(cp, "child", 10), CKS_OK);
    cr_assert_eq(check_object(cp, "child", 10, "x", x, size), CKS_OK);
    cr_assert_eq(check_object(cp, "child", 10, "y", y, size), CKS_OK);
    cks_client_destroy(cp);
    free(x);
    free(y);
}

/* ---- #15 item 4: shared chunks ------------------------------------------------ */

enum { NOBJ = 4 };
static const uint64_t obj_size[NOBJ] = {100 * KiB + 7, 64 * KiB, 3 * KiB + 1, 200 * KiB};

static void obj_bytes(uint8_t *b, int i, uint64_t v)
{
    cks_test_fill(b, obj_size[i], (uint64_t)i << 20 ^ v);
}

/* Version v (parent p, or none) writing the objects whose bit is in `mask`. */
static void write_version(cks_client_h c, uint64_t v, uint64_t p, unsigned mask)
{
    cks_version_params_t vp = {0};
    uint8_t *b = malloc(256 * KiB);
    char key[16];
    cr_assert_not_null(b);
    vp.field_mask = p ? CKS_VERSION_FIELD_PARENT : 0;
    vp.job        = "share";
    vp.version    = v;
    vp.parent     = p;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK, "begin %llu", (unsigned long long)v);
    for (int i = 0; i < NOBJ; i++) {
        if (mask & (1u << i)) {
            snprintf(key, sizeof(key), "o%d", i);
            obj_bytes(b, i, v);
            cr_assert_eq(put_obj(c, "share", v, key, b, obj_size[i]), CKS_OK);
        }
    }
    cr_assert_eq(cks_version_seal(c, "share", v), CKS_OK, "seal %llu", (unsigned long long)v);
    free(b);
}

/* Every object of version v restores exact, from the version `src[i]`. */
static void verify_version(cks_client_h c, uint64_t v, const uint64_t src[NOBJ])
{
    uint8_t *b = malloc(256 * KiB);
    char key[16];
    cr_assert_not_null(b);
    for (int i = 0; i < NOBJ; i++) {
        snprintf(key, sizeof(key), "o%d", i);
        obj_bytes(b, i, src[i]);
        cks_status_t st = check_object(c, "share", v, key, b, obj_size[i]);
        if (st != CKS_OK) {
            char msg[512];
            cks_client_last_error(c, msg, sizeof(msg));
            cr_assert_fail("'%s' of version %llu (written in %llu): %s (%s)", key,
                           (unsigned long long)v, (unsigned long long)src[i],
                           cks_status_string(st), msg);
        }
    }
    free(b);
}

static void delete_parent_then_children(int restart)
{
    cks_client_h c = connect_geo(4, 2, 16 * KiB);
    const uint64_t base = usage(c);
    /* 1 writes every object; 2 (child of 1) rewrites o1; 3 (child of 2)
     * rewrites o2: 3 takes o0 and o3 from 1, o1 from 2 */
    const uint64_t src2[NOBJ] = {1, 2, 1, 1}, src3[NOBJ] = {1, 2, 3, 1};

    write_version(c, 1, 0, 0xf);
    write_version(c, 2, 1, 1u << 1);
    write_version(c, 3, 2, 1u << 2);
    cr_assert_eq(cks_version_delete(c, "share", 1), CKS_OK);
    verify_version(c, 2, src2);
    verify_version(c, 3, src3);
    if (restart) {
        cks_client_destroy(c);
        for (size_t i = 0; i < NSRV; i++) {
            cr_assert_eq(cks_test_server_restart(&cl.srv[i]), 0, "restart server %zu", i);
        }
        c = connect_geo(4, 2, 16 * KiB);
        verify_version(c, 2, src2);
        verify_version(c, 3, src3);
    }
    /* the middle one: 3 still takes o1 from 2 and o0, o3 from 1 */
    cr_assert_eq(cks_version_delete(c, "share", 2), CKS_OK);
    verify_version(c, 3, src3);
    cr_assert(usage(c) > base);
    cr_assert_eq(cks_version_delete(c, "share", 3), CKS_OK);
    uint64_t used = usage(c);
    cr_assert_eq(used, base, "arena use %llu after every version was deleted, %llu before",
                 (unsigned long long)used, (unsigned long long)base);
    cks_client_destroy(c);
}

Test(integrity, delete_parent_keeps_chunks_children_use)
{
    delete_parent_then_children(0);
}

Test(integrity, delete_parent_keeps_chunks_across_restart)
{
    delete_parent_then_children(1);
}
