/*
 * End-to-end: checked restores and fallback to an older version
 * (cks_restore_open_ex(), CKS_RESTORE_CHECK, CKS_RESTORE_FALLBACK) on a
 * cluster of 6 real ckstore-server processes on 127.0.0.1, RS(4,2).
 *
 * Version 2 is made unrestorable while version 1 stays restorable. Every
 * stripe of a 6-server RS(4,2) cluster spans all six servers, so killing
 * servers cannot tell two versions apart; a chunk is corrupted instead, the
 * way memory rots: the test finds a chunk's bytes in a server's arena file
 * (MAP_SHARED, the server's own memory) and flips one, after the server
 * recorded its CRC. No fault points are needed.
 *
 * Checked: without a flag the latest version opens and its get fails with
 * an error naming the object, the stripe and why; with CKS_RESTORE_CHECK
 * the open fails the same way; with CKS_RESTORE_FALLBACK version 1 opens,
 * the skip of version 2 is reported (callback and log) with its object and
 * reason, and every byte of version 1 restores exactly - also with two
 * servers down, and for a partial-expert child; when no version can be
 * restored (an inherited object corrupted, or three servers down) the call
 * fails with a clear error and no handle. The CLI's restore-check too. On a
 * standalone server, an object that rotted while the server was down (its
 * start-up CRC check marks it) makes the fallback open the version before.
 */
#include "ckstore.h"
#include "cks_md.h"
#include "cks_test.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB   (1ull << 10)
#define MiB   (1ull << 20)
#define NSRV  6
#define CHUNK (64 * KiB)
#define JOB   "moe"

static cks_test_cluster_t cl;

static void setup(void)
{
    cr_assert_eq(cks_test_cluster_start(&cl, NSRV, 3, 64 * MiB, -1, NULL), 0);
}

static void teardown(void)
{
    cks_test_cluster_cleanup(&cl);
}

TestSuite(fallback, .init = setup, .fini = teardown, .timeout = 300);

/* The objects: an empty one, one under a chunk, and several stripes (a
 * stripe is 4 x 64 KiB) with a padded tail. */
static const struct {
    const char *key;
    uint64_t size;
} objs[] = {
    {"dense", 700 * KiB + 5},
    {"expert.0", 300 * KiB + 1},
    {"expert.1", 600 * KiB + 77},
    {"expert.2", 40 * KiB},
    {"rng", 0},
};
#define NOBJ (sizeof(objs) / sizeof(objs[0]))

static uint64_t seed0;

/* The bytes of object i as written in `version`. */
static uint8_t *obj_bytes(size_t i, uint64_t version)
{
    uint8_t *b = malloc(objs[i].size + 1);
    cr_assert_not_null(b);
    cks_test_fill(b, objs[i].size, seed0 + version * 100 + i);
    return b;
}

static size_t obj_index(const char *key)
{
    for (size_t i = 0; i < NOBJ; i++) {
        if (strcmp(objs[i].key, key) == 0) {
            return i;
        }
    }
    cr_assert_fail("no object '%s'", key);
    return 0;
}

static cks_client_h connect_cl(void)
{
    cks_client_h c = NULL;
    cr_assert_eq(cks_test_connect_cluster(cl.map, 4, 2, CHUNK, 20000, &c), CKS_OK,
                 "connect to the cluster in %s", cl.map);
    return c;
}

/* Write `version` (child of `parent`, or CKS_NO_PARENT) with the objects
 * whose bit is set in `mask`. */
static void write_version(cks_client_h c, uint64_t version, uint64_t parent, unsigned mask)
{
    cks_version_params_t vp = {0};
    vp.field_mask           = parent != CKS_NO_PARENT ? CKS_VERSION_FIELD_PARENT : 0;
    vp.job                  = JOB;
    vp.version              = version;
    vp.parent               = parent;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK, "begin version %llu",
                 (unsigned long long)version);
    for (size_t i = 0; i < NOBJ; i++) {
        if (!(mask & (1u << i))) {
            continue;
        }
        uint8_t *b         = obj_bytes(i, version);
        cks_put_params_t p = {0};
        p.job              = JOB;
        p.version          = version;
        p.key              = objs[i].key;
        p.buffer           = b;
        p.size             = objs[i].size;
        cr_assert_eq(cks_put(c, &p), CKS_OK, "put %s", objs[i].key);
        free(b);
    }
    cr_assert_eq(cks_version_seal(c, JOB, version), CKS_OK, "seal version %llu",
                 (unsigned long long)version);
}

#define ALL ((1u << NOBJ) - 1)

/* The 256 bytes from the middle of data chunk `idx` of `stripe` of object
 * i as written in `version` (random bytes: unique); free() them. */
static uint8_t *chunk_needle(size_t i, uint64_t version, uint64_t stripe, unsigned idx)
{
    uint64_t off = (stripe * 4 + idx) * CHUNK + CHUNK / 2;
    uint8_t *b   = obj_bytes(i, version);

    cr_assert(off + 256 <= objs[i].size, "%s has no bytes at %llu", objs[i].key,
              (unsigned long long)off);
    memmove(b, b + off, 256);
    return b;
}

/* Flip a byte of every copy of that chunk in the arena of server `srv` (-1:
 * every server's). Returns how many copies were changed. */
static int corrupt_chunk(size_t i, uint64_t version, uint64_t stripe, unsigned idx, int srv)
{
    uint8_t *needle = chunk_needle(i, version, stripe, idx);
    int found       = 0;

    for (size_t s = 0; s < NSRV; s++) {
        if (srv < 0 || (size_t)srv == s) {
            int n = cks_test_rot(cl.srv[s].arena, needle);
            cr_assert_geq(n, 0, "cannot open or map %s", cl.srv[s].arena);
            found += n;
        }
    }
    free(needle);
    return found;
}

/* Skips reported by cks_restore_open_ex(). */
typedef struct {
    size_t n;
    cks_restore_skip_t s[8];
} skips_t;

static void on_skip(void *arg, const cks_restore_skip_t *skip)
{
    skips_t *k = arg;
    cr_assert_lt(k->n, 8);
    k->s[k->n++] = *skip;
}

static cks_status_t open_ex(cks_client_h c, uint64_t version, uint32_t flags, skips_t *k,
                            cks_restore_h *r_p)
{
    cks_restore_params_t p = {0};
    p.field_mask           = CKS_RESTORE_FIELD_FLAGS | CKS_RESTORE_FIELD_SKIP_CB;
    p.job                  = JOB;
    p.version              = version;
    p.flags                = flags;
    p.skip_cb              = on_skip;
    p.skip_arg             = k;
    k->n                   = 0;
    return cks_restore_open_ex(c, &p, r_p);
}

static void last_error_has(cks_client_h c, const char *const *words, size_t n)
{
    char err[512];
    cks_client_last_error(c, err, sizeof(err));
    for (size_t i = 0; i < n; i++) {
        cr_assert(strstr(err, words[i]) != NULL, "the error does not say '%s': %s", words[i],
                  err);
    }
    printf("  error: %s\n", err);
}

/* Every object of the handle's version restores bit-exact: its manifest
 * lists `mask`'s objects, object i from version src[i]. */
static void restore_exact(cks_restore_h r, unsigned mask, const uint64_t *src)
{
    cks_object_info_t list[NOBJ + 1];
    size_t count;
    int more;
    uint8_t *dst = malloc(MiB);

    cr_assert_eq(cks_object_list(r, NULL, list, NOBJ + 1, &count, &more), CKS_OK);
    cr_assert_eq(count, (size_t)__builtin_popcount(mask));
    for (size_t j = 0; j < count; j++) {
        size_t i = obj_index(list[j].key);
        cr_assert(mask & (1u << i), "unexpected object %s", list[j].key);
        cr_assert_eq(list[j].source_version, src[i], "%s from version %llu", list[j].key,
                     (unsigned long long)list[j].source_version);
        uint8_t *want   = obj_bytes(i, src[i]);
        cks_status_t st = cks_test_get_check(r, list[j].key, want, objs[i].size, dst, MiB,
                                             "restore");
        cr_assert_eq(st, CKS_OK, "get %s: %s", list[j].key, cks_status_name(st));
        free(want);
    }
    free(dst);
}

static void assert_skip(const cks_restore_skip_t *s, uint64_t version, const char *key,
                        uint64_t source, uint64_t stripe, uint32_t intact, const char *why)
{
    printf("  skipped version %llu: %s\n", (unsigned long long)s->version, s->reason);
    cr_assert_eq(s->version, version);
    cr_assert_eq(s->status, CKS_ERR_DATA_LOST);
    cr_assert_str_eq(s->key, key);
    cr_assert_eq(s->source_version, source);
    cr_assert_eq(s->stripe, stripe);
    cr_assert_eq(s->intact, intact);
    cr_assert_eq(s->needed, 4);
    cr_assert(strstr(s->reason, key) != NULL, "reason: %s", s->reason);
    cr_assert(strstr(s->reason, why) != NULL, "reason does not say '%s': %s", why, s->reason);
}

/* Version 2 has an object with three corrupt chunks in one stripe (more
 * than m = 2): a plain open of the latest version opens it and its get
 * fails naming the object; a checked open refuses it; a fallback open
 * gives version 1, reports why it skipped version 2, and version 1
 * restores exactly. The CLI says the same. */
Test(fallback, corrupt_latest_falls_back_to_the_previous_version)
{
    static const uint64_t v1[NOBJ] = {1, 1, 1, 1, 1};
    cks_version_info_t vi;
    cks_restore_h r = NULL;
    skips_t k;

    seed0          = cks_test_seed(61);
    cks_client_h c = connect_cl();
    write_version(c, 1, CKS_NO_PARENT, ALL);
    write_version(c, 2, CKS_NO_PARENT, ALL);
    size_t e1 = obj_index("expert.1");
    for (unsigned idx = 0; idx < 3; idx++) {
        cr_assert_geq(corrupt_chunk(e1, 2, 1, idx, -1), 1, "chunk %u not found", idx);
    }

    /* no flag: unchanged, version 2 opens; its get fails naming the object */
    cr_assert_eq(cks_restore_open(c, JOB, CKS_VERSION_LATEST, &r), CKS_OK);
    cks_restore_info(r, &vi);
    cr_assert_eq(vi.version, 2);
    uint8_t *dst       = malloc(MiB);
    cks_get_params_t g = {0};
    g.key              = "expert.1";
    g.buffer           = dst;
    g.buffer_size      = MiB;
    cr_assert_eq(cks_get(r, &g, NULL), CKS_ERR_DATA_LOST);
    last_error_has(c, (const char *[]){"'expert.1'", "version 2", "stripe 1", "3 of 6",
                                       "3 failed their CRC"},
                   5);
    cks_restore_close(r);
    free(dst);

    /* a checked open refuses version 2, and says why */
    r = NULL;
    cr_assert_eq(open_ex(c, CKS_VERSION_LATEST, CKS_RESTORE_CHECK, &k, &r), CKS_ERR_DATA_LOST);
    cr_assert_null(r, "a failed open wrote a handle");
    cr_assert_eq(k.n, 1);
    assert_skip(&k.s[0], 2, "expert.1", 2, 1, 3, "corrupt");
    last_error_has(c, (const char *[]){"version 2", "'expert.1'", "stripe 1", "corrupt"}, 4);

    /* fallback: version 1, version 2 reported, every byte of version 1 */
    for (int asked = 0; asked < 2; asked++) { /* latest, then 2 by number */
        cr_assert_eq(open_ex(c, asked ? 2 : CKS_VERSION_LATEST, CKS_RESTORE_FALLBACK, &k, &r),
                     CKS_OK);
        cr_assert_eq(k.n, 1, "%zu versions skipped", k.n);
        assert_skip(&k.s[0], 2, "expert.1", 2, 1, 3, "corrupt");
        cr_assert_eq(cks_restore_info(r, &vi), CKS_OK);
        cr_assert_eq(vi.version, 1, "opened version %llu", (unsigned long long)vi.version);
        restore_exact(r, ALL, v1);
        cks_restore_close(r);
    }

    /* version 1 by itself passes the check with nothing skipped */
    cr_assert_eq(open_ex(c, 1, CKS_RESTORE_CHECK, &k, &r), CKS_OK);
    cr_assert_eq(k.n, 0);
    cks_restore_close(r);
    cks_client_destroy(c);

    /* the CLI */
    char cmd[1024], out[4096] = "";
    snprintf(cmd, sizeof(cmd), "%s --cluster %s restore-check %s latest --fallback 2>&1",
             CKS_CLI_BIN, cl.map, JOB);
    cr_assert_eq(cks_test_run(cmd, out, sizeof(out)), 0, "%s", out);
    printf("  ckstore restore-check --fallback:\n%s", out);
    cr_assert(strstr(out, "skip 2 CKS_ERR_DATA_LOST: object 'expert.1'") != NULL, "%s", out);
    cr_assert(strstr(out, "restorable 1 ") != NULL, "%s", out);
    snprintf(cmd, sizeof(cmd), "%s --cluster %s restore-check %s latest 2>&1", CKS_CLI_BIN,
             cl.map, JOB);
    cr_assert_eq(cks_test_run(cmd, out, sizeof(out)), 1, "%s", out);
    cr_assert(strstr(out, "'expert.1'") != NULL, "%s", out);
}

/* Two servers down and one corrupt chunk: a stripe of version 2 keeps 3 of
 * its 6 chunks, every stripe of version 1 keeps 4. Fallback opens version 1
 * and it restores exactly, decoded around the two lost servers. */
Test(fallback, two_down_and_a_corrupt_chunk)
{
    static const uint64_t v1[NOBJ] = {1, 1, 1, 1, 1};
    char err[256];
    cks_cluster_h map;
    uint16_t group[6];
    cks_version_info_t vi;
    cks_restore_h r = NULL;
    skips_t k;

    seed0          = cks_test_seed(62);
    cks_client_h c = connect_cl();
    write_version(c, 1, CKS_NO_PARENT, ALL);
    write_version(c, 2, CKS_NO_PARENT, ALL);
    cks_client_destroy(c);

    /* the servers of stripe 0 of expert.0, as the client places it */
    cr_assert_eq(cks_cluster_load(cl.map, &map, err, sizeof(err)), CKS_OK, "%s", err);
    cr_assert_eq(cks_place(map, JOB, strlen(JOB), "expert.0", 8, 0, 4, 2, NULL, group), CKS_OK);
    cks_cluster_free(map);
    cr_assert_geq(corrupt_chunk(obj_index("expert.0"), 2, 0, 0, group[0]), 1);
    cks_test_cluster_kill(&cl, group[1]);
    cks_test_cluster_kill(&cl, group[2]);

    c = connect_cl();
    cr_assert_eq(open_ex(c, CKS_VERSION_LATEST, CKS_RESTORE_FALLBACK, &k, &r), CKS_OK);
    cr_assert_eq(k.n, 1, "%zu versions skipped", k.n);
    assert_skip(&k.s[0], 2, "expert.0", 2, 0, 3, "chunk 0 corrupt");
    cr_assert(strstr(k.s[0].reason, "chunk 1 ") != NULL && strstr(k.s[0].reason, "chunk 2 "),
              "the lost servers' chunks are not named: %s", k.s[0].reason);
    cks_restore_info(r, &vi);
    cr_assert_eq(vi.version, 1);
    restore_exact(r, ALL, v1);
    cks_restore_close(r);
    cks_client_destroy(c);
}

/* A partial-expert child: version 2 writes dense and expert.1 and takes the
 * rest from version 1. Its own expert.1 corrupt: fallback gives version 1.
 * Then version 1's expert.0 corrupt too - an object version 2 inherits -
 * and no version can be restored: a clear error, no handle. */
Test(fallback, partial_expert_child)
{
    static const uint64_t v1[NOBJ] = {1, 1, 1, 1, 1};
    cks_version_info_t vi;
    cks_restore_h r = NULL;
    skips_t k;

    seed0          = cks_test_seed(63);
    cks_client_h c = connect_cl();
    write_version(c, 1, CKS_NO_PARENT, ALL);
    write_version(c, 2, 1, (1u << obj_index("dense")) | (1u << obj_index("expert.1")));

    /* healthy: version 2 opens checked, with its inherited objects */
    static const uint64_t v2[NOBJ] = {2, 1, 2, 1, 1};
    cr_assert_eq(open_ex(c, CKS_VERSION_LATEST, CKS_RESTORE_FALLBACK, &k, &r), CKS_OK);
    cr_assert_eq(k.n, 0);
    cks_restore_info(r, &vi);
    cr_assert_eq(vi.version, 2);
    restore_exact(r, ALL, v2);
    cks_restore_close(r);

    cr_assert_geq(corrupt_chunk(obj_index("expert.1"), 2, 0, 0, -1), 1);
    cr_assert_geq(corrupt_chunk(obj_index("expert.1"), 2, 0, 1, -1), 1);
    cr_assert_geq(corrupt_chunk(obj_index("expert.1"), 2, 0, 3, -1), 1);
    cr_assert_eq(open_ex(c, CKS_VERSION_LATEST, CKS_RESTORE_FALLBACK, &k, &r), CKS_OK);
    cr_assert_eq(k.n, 1);
    assert_skip(&k.s[0], 2, "expert.1", 2, 0, 3, "corrupt");
    cks_restore_info(r, &vi);
    cr_assert_eq(vi.version, 1);
    restore_exact(r, ALL, v1);
    cks_restore_close(r);

    /* version 1's expert.0, which version 2 takes from it */
    for (unsigned idx = 0; idx < 3; idx++) {
        cr_assert_geq(corrupt_chunk(obj_index("expert.0"), 1, 0, idx, -1), 1);
    }
    r = NULL;
    cr_assert_eq(open_ex(c, CKS_VERSION_LATEST, CKS_RESTORE_FALLBACK, &k, &r),
                 CKS_ERR_DATA_LOST);
    cr_assert_null(r, "a failed open wrote a handle");
    cr_assert_eq(k.n, 2);
    assert_skip(&k.s[0], 2, "expert.0", 1, 0, 3, "corrupt"); /* inherited: chunks of 1 */
    assert_skip(&k.s[1], 1, "expert.0", 1, 0, 3, "corrupt");
    last_error_has(c, (const char *[]){"no version", "'moe'", "2 skipped", "'expert.0'"}, 4);
    cks_client_destroy(c);
}

/* Three servers down: every stripe of every version keeps 3 of 6 chunks.
 * A plain get, a checked open and a fallback open all fail clearly. */
Test(fallback, three_down_nothing_restorable)
{
    cks_restore_h r = NULL;
    skips_t k;

    seed0          = cks_test_seed(64);
    cks_client_h c = connect_cl();
    write_version(c, 1, CKS_NO_PARENT, ALL);
    write_version(c, 2, CKS_NO_PARENT, ALL);
    cks_client_destroy(c);
    for (size_t s = 0; s < 3; s++) {
        cks_test_cluster_kill(&cl, s * 2); /* one per rack */
    }

    c = connect_cl();
    cr_assert_eq(cks_restore_open(c, JOB, CKS_VERSION_LATEST, &r), CKS_OK);
    uint8_t *dst       = malloc(MiB);
    cks_get_params_t g = {0};
    g.key              = "dense";
    g.buffer           = dst;
    g.buffer_size      = MiB;
    cr_assert_eq(cks_get(r, &g, NULL), CKS_ERR_DATA_LOST);
    last_error_has(c, (const char *[]){"'dense'", "3 of 6", "unreachable"}, 3);
    cks_restore_close(r);
    free(dst);

    r = NULL;
    cr_assert_eq(open_ex(c, CKS_VERSION_LATEST, CKS_RESTORE_CHECK, &k, &r), CKS_ERR_DATA_LOST);
    cr_assert_null(r);
    cr_assert_eq(k.n, 1);
    assert_skip(&k.s[0], 2, "dense", 2, 0, 3, "unreachable");

    cr_assert_eq(open_ex(c, CKS_VERSION_LATEST, CKS_RESTORE_FALLBACK, &k, &r),
                 CKS_ERR_DATA_LOST);
    cr_assert_null(r);
    cr_assert_eq(k.n, 2);
    assert_skip(&k.s[0], 2, "dense", 2, 0, 3, "unreachable");
    assert_skip(&k.s[1], 1, "dense", 1, 0, 3, "unreachable");
    last_error_has(c, (const char *[]){"no version", "2 skipped", "'dense'"}, 3);
    cks_client_destroy(c);
}

/* Versions that are not restorable by state: an aborted version asked for
 * by number is skipped (NOT_RESTORABLE) and the one before opens; a
 * version that does not exist is an error, not a reason to fall back; a
 * healthy latest opens with nothing skipped; unknown flags are refused. */
Test(fallback, states_and_params)
{
    cks_version_params_t vp = {0};
    cks_version_info_t vi;
    cks_restore_h r = NULL;
    skips_t k;

    seed0          = cks_test_seed(65);
    cks_client_h c = connect_cl();
    write_version(c, 1, CKS_NO_PARENT, ALL);
    vp.job     = JOB;
    vp.version = 3;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_version_abort(c, JOB, 3), CKS_OK);

    cr_assert_eq(open_ex(c, 3, CKS_RESTORE_CHECK, &k, &r), CKS_ERR_NOT_RESTORABLE);
    cr_assert_null(r);
    last_error_has(c, (const char *[]){"version 3", "ABORTED"}, 2);
    cr_assert_eq(open_ex(c, 3, CKS_RESTORE_FALLBACK, &k, &r), CKS_OK);
    cr_assert_eq(k.n, 1);
    cr_assert_eq(k.s[0].version, 3);
    cr_assert_eq(k.s[0].status, CKS_ERR_NOT_RESTORABLE);
    cr_assert(strstr(k.s[0].reason, "ABORTED") != NULL, "%s", k.s[0].reason);
    cks_restore_info(r, &vi);
    cr_assert_eq(vi.version, 1);
    cks_restore_close(r);

    r = NULL;
    cr_assert_eq(open_ex(c, 9, CKS_RESTORE_FALLBACK, &k, &r), CKS_ERR_NO_SUCH_VERSION);
    cr_assert_null(r);
    cr_assert_eq(k.n, 0);

    cr_assert_eq(open_ex(c, CKS_VERSION_LATEST, CKS_RESTORE_FALLBACK, &k, &r), CKS_OK);
    cr_assert_eq(k.n, 0);
    cks_restore_info(r, &vi);
    cr_assert_eq(vi.version, 1);
    cks_restore_close(r);

    r = NULL;
    cr_assert_eq(open_ex(c, 1, 0x80, &k, &r), CKS_ERR_INVALID_PARAM);
    cr_assert_null(r);
    cks_client_destroy(c);
}

/* A standalone server: an object of version 2 rots while the server is
 * down; at its start the server's CRC check marks it bad. The check finds
 * it (one-byte reads), and a fallback open gives version 1, exact. */
static cks_test_server_t single;

static void single_setup(void)
{
    cr_assert_eq(cks_test_server_start(&single, 64 * MiB), 0);
}

static void single_teardown(void)
{
    cks_test_server_cleanup(&single);
}

TestSuite(fallback_single, .init = single_setup, .fini = single_teardown, .timeout = 120);

Test(fallback_single, object_bad_at_server_start)
{
    static const uint64_t v1[NOBJ] = {1, 1, 1, 1, 1};
    const unsigned some = ALL; /* the empty object too: it survives a restart */
    cks_version_info_t vi;
    cks_restore_h r = NULL;
    cks_client_h c  = NULL;
    skips_t k;

    seed0 = cks_test_seed(66);
    cr_assert_eq(cks_test_connect(&single, 20000, &c), CKS_OK);
    write_version(c, 1, CKS_NO_PARENT, some);
    write_version(c, 2, CKS_NO_PARENT, some);
    cks_client_destroy(c);
    cr_assert_eq(cks_test_server_stop(&single, SIGTERM), 0);
    uint8_t *needle = chunk_needle(obj_index("expert.1"), 2, 1, 2);
    cr_assert_eq(cks_test_rot(single.arena, needle), 1);
    free(needle);
    cr_assert_eq(cks_test_server_restart(&single), 0);

    cr_assert_eq(cks_test_connect(&single, 20000, &c), CKS_OK);
    r = NULL;
    cr_assert_eq(open_ex(c, CKS_VERSION_LATEST, CKS_RESTORE_CHECK, &k, &r), CKS_ERR_DATA_LOST);
    cr_assert_null(r);
    last_error_has(c, (const char *[]){"version 2", "'expert.1'", "CRC"}, 3);
    cr_assert_eq(open_ex(c, CKS_VERSION_LATEST, CKS_RESTORE_FALLBACK, &k, &r), CKS_OK);
    cr_assert_eq(k.n, 1);
    printf("  skipped version %llu: %s\n", (unsigned long long)k.s[0].version, k.s[0].reason);
    cr_assert_eq(k.s[0].version, 2);
    cr_assert_eq(k.s[0].status, CKS_ERR_DATA_LOST);
    cr_assert_str_eq(k.s[0].key, "expert.1");
    cks_restore_info(r, &vi);
    cr_assert_eq(vi.version, 1);
    restore_exact(r, some, v1);
    cks_restore_close(r);
    cks_client_destroy(c);
}
