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
 *
 * Commit on what the ranks put: another client's object in a version never
 * takes the place of a rank's object that is protected later.
 */
#include "ckstore.h"
#include "cks_test.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        cr_assert_eq(cks_test_put(ca, "geo", v, "a", a, size), CKS_OK);
        cks_status_t put_b = cks_test_put(cb, "geo", v, "b", b, size);
        if (put_b != CKS_OK) {
            assert_geometry_refusal(cb, put_b, what);
        }
        cks_test_finish_t f0;
        cks_test_finish_start(&f0, ca, "geo", v, 0);
        cks_status_t fin1 = cks_version_finish(cb, "geo", v, 1);
        cks_test_finish_join(&f0);
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
        /* whatever was refused left nothing behind. A chunk that a member
         * took while the drop was on its way is freed once its record
         * reaches the metadata writer, after the drop (refused there): the
         * answer to the finish or delete can come first, so the space is
         * waited for, bounded (once under ASan in the full suite: 20480
         * bytes still in use when the call returned) */
        uint64_t used = usage(ca);
        if (used != base) {
            fprintf(stderr, "%s: arena use %llu when the version ended, %llu before: waiting\n",
                    what, (unsigned long long)used, (unsigned long long)base);
            used = cks_test_usage_settles_at(ca, base, 5000);
        }
        cr_assert_eq(used, base, "%s: arena use %llu 5 s after the version ended, %llu before",
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
    cr_assert_eq(cks_test_put(cp, "child", 1, "x", x, size), CKS_OK);
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
            cr_assert_eq(cks_test_put(cc, "child", v, "y", y, size), CKS_OK, "%s", what);
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
    cr_assert_eq(cks_test_put(cp, "child", 10, "y", y, size), CKS_OK);
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
            cr_assert_eq(cks_test_put(c, "share", v, key, b, obj_size[i]), CKS_OK);
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

/* ---- #15 item 2: a version commits on what its ranks put -------------------- */

/* Object bytes a server's encoder threads protected since it started. */
static uint64_t encoded_by(size_t i)
{
    cks_cluster_stats_t t;
    cks_client_h c;
    cr_assert_eq(cks_test_connect(&cl.srv[i], 20000, &c), CKS_OK, "server %zu", i);
    cr_assert_eq(cks_cluster_stats(c, &t), CKS_OK, "server %zu", i);
    cks_client_destroy(c);
    return t.encoded_bytes;
}

/* Position of the primary of `key` in `job` (placement does not depend on the
 * version): the server whose encoder protects it when it is written into the
 * scratch version `scratch`. */
static size_t primary_of(cks_client_h c, const char *job, uint64_t scratch, const char *key)
{
    uint64_t before[NSRV];
    uint8_t b[4096];
    cks_version_params_t vp = {0};
    size_t found = NSRV;

    for (size_t i = 0; i < NSRV; i++) {
        before[i] = encoded_by(i);
    }
    memset(b, 0x5a, sizeof(b));
    vp.job     = job;
    vp.version = scratch;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put(c, job, scratch, key, b, sizeof(b)), CKS_OK);
    cr_assert_eq(cks_version_seal(c, job, scratch), CKS_OK);
    for (size_t i = 0; i < NSRV; i++) {
        if (encoded_by(i) - before[i] >= sizeof(b)) {
            cr_assert_eq(found, NSRV, "'%s' encoded on servers %zu and %zu", key, found, i);
            found = i;
        }
    }
    cr_assert_neq(found, NSRV, "no server encoded '%s'", key);
    return found;
}

/* The state of (job, version) once it is no longer OPEN, asked with a bound. */
static cks_vstate_t wait_not_open(cks_client_h c, const char *job, uint64_t v)
{
    cks_version_info_t vi = {0};
    const struct timespec tick = {0, 20 * 1000 * 1000};
    for (int i = 0; i < 1500; i++) {
        cr_assert_eq(cks_version_stat(c, job, v, &vi), CKS_OK);
        if (vi.state != CKS_VSTATE_OPEN) {
            return vi.state;
        }
        nanosleep(&tick, NULL);
    }
    cr_assert_fail("version %llu still OPEN", (unsigned long long)v);
    return vi.state;
}

/* #15 item 2: version 1 holds K; version 2, a partial-expert child of 1 with
 * one rank, is written by rank 0 (K with new bytes) while another client puts
 * a key of its own into it: a stray writer that is no rank (no rank tag), or
 * a stale writer that claims rank 0. The stray object is protected first; K's
 * is held back (one member of its stripe is stopped) until the version's
 * outcome is known. The version either commits with K's new bytes or fails
 * with a reason naming what its ranks put: never CKS_OK with the parent's K. */
Test(integrity, stray_put_never_commits_a_version_early)
{
    const char *job = "race";
    const uint64_t size = 64 * KiB;
    uint8_t *old_k = malloc(size), *new_k = malloc(size);
    cks_client_h cr = connect_geo(4, 2, 16 * KiB), cs = connect_geo(4, 2, 16 * KiB);
    cks_version_params_t vp = {0};

    cr_assert(old_k != NULL && new_k != NULL);
    cks_test_fill(old_k, size, 11);
    cks_test_fill(new_k, size, 22);
    vp.job     = job;
    vp.version = 1;
    cr_assert_eq(cks_version_begin(cr, &vp), CKS_OK);
    cr_assert_eq(cks_test_put(cr, job, 1, "K", old_k, size), CKS_OK);
    cr_assert_eq(cks_version_seal(cr, job, 1), CKS_OK);
    const size_t pk = primary_of(cr, job, 100, "K");

    for (int stale = 0; stale < 2; stale++) {
        const uint64_t v = 2 + (uint64_t)stale;
        const char *stray = stale ? "stale" : "stray";
        const size_t pj = primary_of(cr, job, 101 + (uint64_t)stale, stray);
        const size_t co = (size_t)cks_test_coordinator(cl.map, job, v);
        size_t held = 0;
        while (held == pk || held == pj || held == co) {
            held++;
        }
        printf("version %llu: coordinator %zu, K on %zu, '%s' on %zu, holding %zu\n",
               (unsigned long long)v, co, pk, stray, pj, held);

        vp            = (cks_version_params_t){0};
        vp.field_mask = CKS_VERSION_FIELD_PARENT;
        vp.job        = job;
        vp.version    = v;
        vp.parent     = 1;
        cr_assert_eq(cks_version_begin(cr, &vp), CKS_OK);
        /* the stray object: 0 bytes, so no member holds a chunk of it */
        cks_put_params_t p = {0};
        p.field_mask       = stale ? CKS_PUT_FIELD_TAGS : 0;
        p.job              = job;
        p.version          = v;
        p.key              = stray;
        p.buffer           = new_k;
        p.size             = 0;
        p.tags             = (cks_tags_t){CKS_KIND_OTHER, CKS_TAG_NONE, CKS_TAG_NONE, 0};
        cks_status_t put_j = cks_put(cs, &p);
        printf("%s writer's put: %s\n", stray, cks_status_string(put_j));

        cr_assert_eq(kill(cl.srv[held].pid, SIGSTOP), 0);
        cr_assert_eq(cks_test_put(cr, job, v, "K", new_k, size), CKS_OK);
        cks_test_finish_t f;
        cks_test_finish_start(&f, cr, job, v, 0);
        cks_vstate_t state = wait_not_open(cs, job, v);
        cr_assert_eq(kill(cl.srv[held].pid, SIGCONT), 0);
        cks_test_finish_join(&f);

        char msg[512];
        cks_client_last_error(cr, msg, sizeof(msg));
        printf("version %llu (%s writer): %s, finish %s: %s\n", (unsigned long long)v, stray,
               cks_vstate_string(state), cks_status_string(f.st), msg);
        if (f.st == CKS_OK) {
            cks_status_t st = check_object(cs, job, v, "K", new_k, size);
            cr_assert_eq(st, CKS_OK, "K of committed version %llu: %s", (unsigned long long)v,
                         cks_status_string(st));
        } else {
            cr_assert(strstr(msg, "rank") != NULL, "reason '%s' does not name the ranks", msg);
            cks_restore_h r;
            cr_assert_neq(cks_restore_open(cs, job, v, &r), CKS_OK, "failed version %llu",
                          (unsigned long long)v);
        }
    }
    /* a put tagged with a rank the version does not have: refused at once, or
     * the version fails naming it, or it commits without it */
    vp            = (cks_version_params_t){0};
    vp.field_mask = CKS_VERSION_FIELD_PARENT;
    vp.job        = job;
    vp.version    = 4;
    vp.parent     = 1;
    cr_assert_eq(cks_version_begin(cr, &vp), CKS_OK);
    cks_put_params_t p = {0};
    p.field_mask       = CKS_PUT_FIELD_TAGS;
    p.job              = job;
    p.version          = 4;
    p.key              = "foreign";
    p.buffer           = old_k;
    p.size             = size;
    p.tags             = (cks_tags_t){CKS_KIND_OTHER, CKS_TAG_NONE, CKS_TAG_NONE, 1};
    cks_status_t put_f = cks_put(cs, &p);
    char msg[512];
    cks_client_last_error(cs, msg, sizeof(msg));
    printf("put tagged rank 1 into a version of 1 rank: %s: %s\n", cks_status_string(put_f),
           put_f == CKS_OK ? "" : msg);
    if (put_f != CKS_OK) {
        cr_assert_eq(put_f, CKS_ERR_INVALID_PARAM);
        cr_assert(strstr(msg, "tagged rank 1") != NULL, "message '%s'", msg);
    }
    cr_assert_eq(cks_test_put(cr, job, 4, "K", new_k, size), CKS_OK);
    cks_status_t fin = cks_version_finish(cr, job, 4, 0);
    cks_client_last_error(cr, msg, sizeof(msg));
    printf("version 4: finish %s: %s\n", cks_status_string(fin), fin == CKS_OK ? "" : msg);
    if (fin == CKS_OK) {
        cr_assert_eq(check_object(cs, job, 4, "K", new_k, size), CKS_OK);
        cr_assert_neq(check_object(cs, job, 4, "foreign", old_k, size), CKS_OK,
                      "an object of no rank is part of version 4");
    } else {
        cr_assert_eq(put_f, CKS_OK, "refused at once, then %s", cks_status_string(fin));
        cr_assert(strstr(msg, "tagged rank 1") != NULL, "reason '%s' does not name the rank",
                  msg);
    }
    /* the parent is untouched */
    cr_assert_eq(check_object(cs, job, 1, "K", old_k, size), CKS_OK);
    cks_client_destroy(cs);
    cks_client_destroy(cr);
    free(old_k);
    free(new_k);
}
