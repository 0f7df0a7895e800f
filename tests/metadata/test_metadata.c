/*
 * Unit tests of metadata/: the LMDB schema of one storage server.
 *
 * Every test opens its own environment in a fresh mkdtemp() directory under
 * /tmp (removed by the fixture). Corruption is injected by closing the store,
 * writing bytes with a raw LMDB handle (the test links LMDB and msgpack-c
 * itself; the library keeps them private), and reopening. Random data comes
 * from a fixed seed per test, printed on stderr; set CKS_TEST_SEED=<n> to
 * replay or vary it.
 */
#include "cks_md.h"

#include "cks_common.h"

#include "cks_test_unit.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <lmdb.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_EQ CKS_TEST_ST_EQ /* cks_test_unit.h */
#define ST_OK CKS_TEST_ST_OK

/* ---- fixture ------------------------------------------------------------- */

static char g_dir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void setup(void)
{
    strcpy(g_dir, "/tmp/cks_md_test_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
    if (g_dir[0] != '\0') {
        (void)nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        g_dir[0] = '\0';
    }
}

/* The test's seed, printed: see cks_test_unit.h. */
static uint64_t test_seed(const char *name, uint64_t dflt)
{
    return cks_test_named_seed("metadata", name, dflt);
}

/* ---- helpers ------------------------------------------------------------- */

static cks_md_h md_open(uint64_t map_size)
{
    cks_md_h md = NULL;

    ST_OK(cks_md_open(g_dir, map_size, &md));
    cr_assert_not_null(md);
    return md;
}

static cks_md_txn_h txn_begin(cks_md_h md, int write)
{
    cks_md_txn_h txn = NULL;

    ST_OK(cks_md_txn_begin(md, write, &txn));
    cr_assert_not_null(txn);
    return txn;
}

static cks_md_version_t mkver(uint64_t version, cks_vstate_t state)
{
    cks_md_version_t v = {
        .version = version,
        .parent = (version == 0) ? CKS_MD_NO_PARENT : version - 1,
        .state = state,
        .nranks = 1,
        .created_ns = UINT64_C(1700000000000000000) + version,
        .sealed_ns = (state == CKS_VSTATE_OPEN) ? 0 : UINT64_C(1700000000500000000),
        .nobjects = version * 3,
        .bytes = version << 20,
    };
    return v;
}

static void ver_eq(const cks_md_version_t *a, const cks_md_version_t *b)
{
    cr_assert_eq(a->version, b->version);
    cr_assert_eq(a->parent, b->parent);
    cr_assert_eq(a->state, b->state);
    cr_assert_eq(a->nranks, b->nranks);
    cr_assert_eq(a->created_ns, b->created_ns);
    cr_assert_eq(a->sealed_ns, b->sealed_ns);
    cr_assert_eq(a->nobjects, b->nobjects);
    cr_assert_eq(a->bytes, b->bytes);
}

static cks_md_object_t mkobj(const char *key, uint64_t n)
{
    cks_md_object_t o;

    memset(&o, 0, sizeof(o));
    o.key_len = (uint32_t)strlen(key);
    cr_assert_leq(o.key_len, CKS_KEY_MAX_LEN);
    memcpy(o.key, key, o.key_len);
    o.kind = (cks_kind_t)(n % 5);
    o.layer = (int32_t)(n % 7) - 1; /* includes -1 */
    o.expert = (n % 2) ? -1 : (int32_t)(n % 64);
    o.rank = (int32_t)(n % 3) - 1;
    o.size = n * 1000 + 1;
    o.crc64 = n * UINT64_C(0x9e3779b97f4a7c15);
    o.arena_offset = n << 12;
    o.arena_len = CKS_ALIGN_UP(o.size, 4096);
    return o;
}

static void obj_eq(const cks_md_object_t *a, const cks_md_object_t *b)
{
    cr_assert_eq(a->key_len, b->key_len);
    cr_assert_eq(memcmp(a->key, b->key, a->key_len), 0, "key %s vs %s", a->key, b->key);
    cr_assert_eq(a->key[a->key_len], '\0');
    cr_assert_eq(a->kind, b->kind);
    cr_assert_eq(a->layer, b->layer);
    cr_assert_eq(a->expert, b->expert);
    cr_assert_eq(a->rank, b->rank);
    cr_assert_eq(a->size, b->size);
    cr_assert_eq(a->crc64, b->crc64);
    cr_assert_eq(a->arena_offset, b->arena_offset);
    cr_assert_eq(a->arena_len, b->arena_len);
}

#define J(s) (s), strlen(s)

static void put_ver(cks_md_txn_h txn, const char *job, uint64_t version,
                    cks_vstate_t state)
{
    cks_md_version_t v = mkver(version, state);

    ST_OK(cks_md_version_put(txn, J(job), &v, 0));
}

static void put_obj(cks_md_txn_h txn, const char *job, uint64_t version, const char *key,
                    uint64_t n)
{
    cks_md_object_t o = mkobj(key, n);

    ST_OK(cks_md_object_put(txn, J(job), version, &o));
}

/* Raw LMDB access to the store's files, with the store closed. */
static void raw_put(const char *db, const void *k, size_t klen, const void *v,
                    size_t vlen)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val mk = {klen, (void *)k};
    MDB_val mv = {vlen, (void *)v};

    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 8), 0);
    cr_assert_eq(mdb_env_open(env, g_dir, 0, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, db, MDB_CREATE, &dbi), 0);
    cr_assert_eq(mdb_put(txn, dbi, &mk, &mv, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/* Copy of a stored value into buf; returns its length. */
static size_t raw_get(const char *db, const void *k, size_t klen, void *buf, size_t max)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val mk = {klen, (void *)k};
    MDB_val mv;
    size_t len;

    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 8), 0);
    cr_assert_eq(mdb_env_open(env, g_dir, MDB_RDONLY, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, db, 0, &dbi), 0);
    cr_assert_eq(mdb_get(txn, dbi, &mk, &mv), 0);
    cr_assert_leq(mv.mv_size, max);
    memcpy(buf, mv.mv_data, mv.mv_size);
    len = mv.mv_size;
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return len;
}

static size_t vkey(uint8_t *buf, const char *job, uint64_t version)
{
    size_t jl = strlen(job);

    memcpy(buf, job, jl);
    buf[jl] = 0;
    cks_put_be64(buf + jl + 1, version);
    return jl + 9;
}

static size_t okey(uint8_t *buf, const char *job, uint64_t version, const char *key)
{
    size_t plen = vkey(buf, job, version);

    memcpy(buf + plen, key, strlen(key));
    return plen + strlen(key);
}

/* ---- environment --------------------------------------------------------- */

/* One timeout for every test, set on the suite: Criterion 2.4 leaks a small
 * block in the runner for each test that sets its own (seen by LSan). */
TestSuite(metadata, .init = setup, .fini = teardown, .timeout = 120);

Test(metadata, open_creates_dir_and_closes)
{
    char sub[128];
    struct stat sb;
    cks_md_h md = NULL;
    cks_md_h keep = (cks_md_h)(uintptr_t)0x1;
    uint64_t map_size = 0, used = 0;

    snprintf(sub, sizeof(sub), "%s/md", g_dir);
    cr_assert_eq(stat(sub, &sb), -1);
    ST_OK(cks_md_open(sub, 0, &md));
    cr_assert_not_null(md);
    cr_assert_eq(stat(sub, &sb), 0);
    cr_assert(S_ISDIR(sb.st_mode));
    cr_assert_eq(sb.st_mode & 0777, 0700, "mode %o", (unsigned)(sb.st_mode & 0777));

    ST_OK(cks_md_stat(md, &map_size, &used));
    cr_assert_eq(map_size, CKS_MD_MAP_SIZE_DEFAULT);
    cr_assert_gt(used, 0);
    cr_assert_leq(used, map_size);
    ST_OK(cks_md_sync(md));
    cks_md_close(md);
    cks_md_close(NULL);

    /* reopen the existing directory */
    md = NULL;
    ST_OK(cks_md_open(sub, 0, &md));
    cr_assert_not_null(md);
    cks_md_close(md);

    /* bad input and a missing parent: nothing written, nothing created */
    ST_EQ(cks_md_open(NULL, 0, &keep), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_open("", 0, &keep), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_open(sub, 0, NULL), CKS_ERR_INVALID_PARAM);
    snprintf(sub, sizeof(sub), "%s/no/such/parent", g_dir);
    ST_EQ(cks_md_open(sub, 0, &keep), CKS_ERR_IO);
    cr_assert_eq(keep, (cks_md_h)(uintptr_t)0x1);
}

Test(metadata, txn_abort_discards_and_read_txn_cannot_write)
{
    cks_md_h md = md_open(0);
    cks_md_txn_h txn;
    cks_md_version_t v = mkver(1, CKS_VSTATE_OPEN);
    cks_md_object_t o = mkobj("k", 1);

    txn = txn_begin(md, 1);
    ST_OK(cks_md_version_put(txn, J("job"), &v, 0));
    cks_md_txn_abort(txn);
    cks_md_txn_abort(NULL);

    txn = txn_begin(md, 0);
    ST_EQ(cks_md_version_get(txn, J("job"), 1, &v), CKS_ERR_NO_SUCH_VERSION);
    ST_EQ(cks_md_version_put(txn, J("job"), &v, 0), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_object_put(txn, J("job"), 1, &o), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_version_del(txn, J("job"), 1), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_object_del(txn, J("job"), 1, J("k")), CKS_ERR_INVALID_PARAM);
    ST_OK(cks_md_txn_commit(txn));
    cks_md_close(md);
}

/* A nested transaction: what an aborted child wrote is gone, what a
 * committed child wrote reaches its parent, and only with the parent. */
Test(metadata, nested_txn_abort_discards_only_the_child)
{
    cks_md_h md = md_open(0);
    cks_md_txn_h txn = txn_begin(md, 1), child, rd;
    cks_md_version_t v = mkver(1, CKS_VSTATE_OPEN), got;
    cks_md_chunk_t c = {0, 0, 4096, 1, 8192, 4096}, gc;

    ST_OK(cks_md_version_put(txn, J("job"), &v, 0));
    /* a child that writes one chunk, fails on the second and is aborted */
    ST_OK(cks_md_txn_begin_nested(txn, &child));
    ST_OK(cks_md_chunk_put(child, J("job"), 1, J("k"), &c));
    c.idx = 1;
    ST_OK(cks_md_chunk_put(child, J("job"), 1, J("k"), &c));
    ST_EQ(cks_md_chunk_put(child, J("job"), 1, J("k"), &c), CKS_ERR_DUPLICATE_KEY);
    cks_md_txn_abort(child);
    ST_EQ(cks_md_chunk_get(txn, J("job"), 1, J("k"), 0, 0, &gc), CKS_ERR_NO_SUCH_KEY);
    ST_OK(cks_md_version_get(txn, J("job"), 1, &got));
    /* a child that commits */
    ST_OK(cks_md_txn_begin_nested(txn, &child));
    c.idx = 2;
    ST_OK(cks_md_chunk_put(child, J("job"), 1, J("k"), &c));
    ST_OK(cks_md_txn_commit(child));
    ST_OK(cks_md_chunk_get(txn, J("job"), 1, J("k"), 0, 2, &gc));
    /* only a write transaction has children */
    rd = txn_begin(md, 0);
    ST_EQ(cks_md_txn_begin_nested(rd, &child), CKS_ERR_INVALID_PARAM);
    cks_md_txn_abort(rd);
    ST_OK(cks_md_txn_commit(txn));
    rd = txn_begin(md, 0);
    ST_OK(cks_md_chunk_get(rd, J("job"), 1, J("k"), 0, 2, &gc));
    ST_EQ(cks_md_chunk_get(rd, J("job"), 1, J("k"), 0, 1, &gc), CKS_ERR_NO_SUCH_KEY);
    cks_md_txn_abort(rd);
    cks_md_close(md);
}

/* ---- versions ------------------------------------------------------------ */

Test(metadata, version_put_get_overwrite)
{
    cks_md_h md = md_open(0);
    cks_md_txn_h txn;
    cks_md_version_t v = mkver(7, CKS_VSTATE_OPEN), got, untouched;

    txn = txn_begin(md, 1);
    ST_OK(cks_md_version_put(txn, J("job"), &v, 0));
    ST_OK(cks_md_version_get(txn, J("job"), 7, &got));
    ver_eq(&got, &v);

    /* exists: refused without overwrite, record unchanged */
    cks_md_version_t sealed = mkver(7, CKS_VSTATE_SEALED);
    sealed.nobjects = 99;
    ST_EQ(cks_md_version_put(txn, J("job"), &sealed, 0), CKS_ERR_VERSION_EXISTS);
    ST_OK(cks_md_version_get(txn, J("job"), 7, &got));
    ver_eq(&got, &v);

    /* overwrite replaces it */
    ST_OK(cks_md_version_put(txn, J("job"), &sealed, 1));
    ST_OK(cks_md_version_get(txn, J("job"), 7, &got));
    ver_eq(&got, &sealed);

    /* not found: output untouched */
    memset(&untouched, 0xab, sizeof(untouched));
    memcpy(&got, &untouched, sizeof(got));
    ST_EQ(cks_md_version_get(txn, J("job"), 8, &got), CKS_ERR_NO_SUCH_VERSION);
    ST_EQ(cks_md_version_get(txn, J("jo"), 7, &got), CKS_ERR_NO_SUCH_VERSION);
    ST_EQ(cks_md_version_get(txn, J("job2"), 7, &got), CKS_ERR_NO_SUCH_VERSION);
    cr_assert_eq(memcmp(&got, &untouched, sizeof(got)), 0);

    /* bad records */
    cks_md_version_t bad = mkver(CKS_MD_NO_PARENT, CKS_VSTATE_OPEN);
    ST_EQ(cks_md_version_put(txn, J("job"), &bad, 0), CKS_ERR_INVALID_PARAM);
    bad = mkver(1, CKS_VSTATE_OPEN);
    bad.state = (cks_vstate_t)5;
    ST_EQ(cks_md_version_put(txn, J("job"), &bad, 0), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_version_put(txn, J("job"), NULL, 0), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_version_get(txn, J("job"), 7, NULL), CKS_ERR_INVALID_PARAM);

    /* version 0 and the largest valid version are ordinary */
    put_ver(txn, "job", 0, CKS_VSTATE_OPEN);
    put_ver(txn, "job", CKS_MD_NO_PARENT - 1, CKS_VSTATE_OPEN);
    ST_OK(cks_md_version_get(txn, J("job"), CKS_MD_NO_PARENT - 1, &got));
    cr_assert_eq(got.version, CKS_MD_NO_PARENT - 1);
    ST_OK(cks_md_version_get(txn, J("job"), 0, &got));
    cr_assert_eq(got.parent, CKS_MD_NO_PARENT);
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 0);
    ST_OK(cks_md_version_get(txn, J("job"), 7, &got));
    ver_eq(&got, &sealed);
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

Test(metadata, versions_sort_numerically)
{
    static const uint64_t put_order[] = {256, 2, UINT64_C(1) << 40, 10};
    static const uint64_t sorted[] = {2, 10, 256, UINT64_C(1) << 40};
    cks_md_h md = md_open(0);
    cks_md_version_t out[8], latest;
    cks_md_txn_h txn;
    size_t count = 0;
    int more = -1;
    uint64_t after;

    txn = txn_begin(md, 1);
    for (size_t i = 0; i < CKS_ARRAY_SIZE(put_order); i++) {
        put_ver(txn, "job", put_order[i], CKS_VSTATE_SEALED);
    }
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 0);
    ST_OK(cks_md_version_list(txn, J("job"), NULL, out, 8, &count, &more));
    cr_assert_eq(count, CKS_ARRAY_SIZE(sorted));
    cr_assert_eq(more, 0);
    for (size_t i = 0; i < count; i++) {
        cr_assert_eq(out[i].version, sorted[i], "out[%zu] = %" PRIu64, i, out[i].version);
        cks_md_version_t want = mkver(sorted[i], CKS_VSTATE_SEALED);
        ver_eq(&out[i], &want);
    }
    ST_OK(cks_md_version_latest(txn, J("job"), 0, &latest));
    cr_assert_eq(latest.version, UINT64_C(1) << 40);
    ST_OK(cks_md_version_latest(txn, J("job"), 1, &latest));
    cr_assert_eq(latest.version, UINT64_C(1) << 40);

    after = 10;
    ST_OK(cks_md_version_list(txn, J("job"), &after, out, 8, &count, &more));
    cr_assert_eq(count, 2);
    cr_assert_eq(out[0].version, 256);
    cr_assert_eq(out[1].version, UINT64_C(1) << 40);
    after = 3; /* not a stored version */
    ST_OK(cks_md_version_list(txn, J("job"), &after, out, 1, &count, &more));
    cr_assert_eq(count, 1);
    cr_assert_eq(out[0].version, 10);
    cr_assert_eq(more, 1);
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

Test(metadata, version_list_paginates)
{
    enum { N = 25, PAGE = 7 };
    cks_md_h md = md_open(0);
    cks_md_version_t out[PAGE];
    cks_md_txn_h txn;
    uint64_t after = 0, expect = 1;
    size_t count, total = 0, pages = 0;
    int more = 1;

    txn = txn_begin(md, 1);
    for (uint64_t i = 0; i < N; i++) {
        put_ver(txn, "job", 3 * i + 1, CKS_VSTATE_SEALED);
        put_ver(txn, "job2", 3 * i + 2, CKS_VSTATE_SEALED); /* neighbour */
        put_ver(txn, "jo", 3 * i, CKS_VSTATE_SEALED);       /* prefix */
    }
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 0);
    while (more) {
        ST_OK(cks_md_version_list(txn, J("job"), (pages == 0) ? NULL : &after, out, PAGE,
                                  &count, &more));
        pages++;
        cr_assert_eq(count, (total + PAGE <= N) ? PAGE : N - total, "page %zu", pages);
        cr_assert_eq(more, total + count < N, "page %zu", pages);
        for (size_t i = 0; i < count; i++) {
            cr_assert_eq(out[i].version, expect, "page %zu item %zu", pages, i);
            expect += 3;
        }
        total += count;
        after = out[count - 1].version;
        cr_assert_leq(pages, 10);
    }
    cr_assert_eq(total, N);
    cr_assert_eq(pages, 4);

    /* a full last page says no more when nothing follows */
    after = 3 * (N - 1 - PAGE) + 1;
    ST_OK(cks_md_version_list(txn, J("job"), &after, out, PAGE, &count, &more));
    cr_assert_eq(count, PAGE);
    cr_assert_eq(more, 0);

    /* max 0: nothing written, but says whether any follow */
    ST_OK(cks_md_version_list(txn, J("job"), NULL, NULL, 0, &count, &more));
    cr_assert_eq(count, 0);
    cr_assert_eq(more, 1);

    /* past the end, at the top of the range, unknown job */
    after = 3 * (N - 1) + 1;
    ST_OK(cks_md_version_list(txn, J("job"), &after, out, PAGE, &count, &more));
    cr_assert_eq(count, 0);
    cr_assert_eq(more, 0);
    after = UINT64_MAX;
    count = 99;
    ST_OK(cks_md_version_list(txn, J("job"), &after, out, PAGE, &count, &more));
    cr_assert_eq(count, 0);
    ST_OK(cks_md_version_list(txn, J("nojob"), NULL, out, PAGE, &count, &more));
    cr_assert_eq(count, 0);
    cr_assert_eq(more, 0);
    ST_EQ(cks_md_version_list(txn, J("job"), NULL, NULL, PAGE, &count, &more),
          CKS_ERR_INVALID_PARAM);
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

Test(metadata, latest_skips_unrestorable)
{
    cks_md_h md = md_open(0);
    cks_md_version_t v, untouched;
    cks_md_txn_h txn;

    txn = txn_begin(md, 1);
    put_ver(txn, "job", 1, CKS_VSTATE_SEALED);
    put_ver(txn, "job", 2, CKS_VSTATE_PROTECTED);
    put_ver(txn, "job", 3, CKS_VSTATE_DEGRADED);
    put_ver(txn, "job", 4, CKS_VSTATE_OPEN);
    put_ver(txn, "job", 5, CKS_VSTATE_ABORTED);
    put_ver(txn, "job", 6, CKS_VSTATE_OPEN);
    put_ver(txn, "job2", 100, CKS_VSTATE_SEALED); /* sorts right after "job" */
    put_ver(txn, "jo", 200, CKS_VSTATE_SEALED);   /* sorts before "job" */
    put_ver(txn, "open-only", 1, CKS_VSTATE_OPEN);
    put_ver(txn, "open-only", 2, CKS_VSTATE_ABORTED);
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 0);
    ST_OK(cks_md_version_latest(txn, J("job"), 0, &v));
    cr_assert_eq(v.version, 6);
    cr_assert_eq(v.state, CKS_VSTATE_OPEN);
    ST_OK(cks_md_version_latest(txn, J("job"), 1, &v));
    cr_assert_eq(v.version, 3);
    cr_assert_eq(v.state, CKS_VSTATE_DEGRADED);
    ST_OK(cks_md_version_latest(txn, J("job2"), 1, &v));
    cr_assert_eq(v.version, 100);
    ST_OK(cks_md_version_latest(txn, J("jo"), 1, &v));
    cr_assert_eq(v.version, 200);
    ST_OK(cks_md_version_latest(txn, J("open-only"), 0, &v));
    cr_assert_eq(v.version, 2);

    memset(&untouched, 0x5a, sizeof(untouched));
    memcpy(&v, &untouched, sizeof(v));
    ST_EQ(cks_md_version_latest(txn, J("open-only"), 1, &v), CKS_ERR_NO_SUCH_VERSION);
    ST_EQ(cks_md_version_latest(txn, J("j"), 0, &v), CKS_ERR_NO_SUCH_JOB);
    ST_EQ(cks_md_version_latest(txn, J("job3"), 0, &v), CKS_ERR_NO_SUCH_JOB);
    ST_EQ(cks_md_version_latest(txn, J("zzz"), 1, &v), CKS_ERR_NO_SUCH_JOB);
    cr_assert_eq(memcmp(&v, &untouched, sizeof(v)), 0);
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

/* ---- objects ------------------------------------------------------------- */

Test(metadata, object_put_get_dup_missing)
{
    cks_md_h md = md_open(0);
    cks_md_object_t o = mkobj("model.layers.0.weight", 42), got, untouched;
    cks_md_txn_h txn;
    char job[CKS_JOB_MAX_LEN + 1], key[CKS_KEY_MAX_LEN + 1];

    o.layer = INT32_MIN;
    o.expert = INT32_MAX;
    o.rank = -1;
    o.crc64 = UINT64_MAX;
    txn = txn_begin(md, 1);
    put_ver(txn, "job", 1, CKS_VSTATE_OPEN);
    ST_OK(cks_md_object_put(txn, J("job"), 1, &o));
    ST_OK(cks_md_object_get(txn, J("job"), 1, o.key, o.key_len, &got));
    obj_eq(&got, &o);

    /* duplicate refused, record unchanged; same key elsewhere is separate */
    cks_md_object_t other = mkobj("model.layers.0.weight", 7);
    ST_EQ(cks_md_object_put(txn, J("job"), 1, &other), CKS_ERR_DUPLICATE_KEY);
    ST_OK(cks_md_object_get(txn, J("job"), 1, o.key, o.key_len, &got));
    obj_eq(&got, &o);
    ST_OK(cks_md_object_put(txn, J("job"), 2, &other));
    ST_OK(cks_md_object_put(txn, J("job2"), 1, &other));
    ST_OK(cks_md_object_get(txn, J("job"), 2, other.key, other.key_len, &got));
    obj_eq(&got, &other);

    /* missing: output untouched */
    memset(&untouched, 0xcd, sizeof(untouched));
    memcpy(&got, &untouched, sizeof(got));
    ST_EQ(cks_md_object_get(txn, J("job"), 1, J("model.layers.0"), &got),
          CKS_ERR_NO_SUCH_KEY);
    ST_EQ(cks_md_object_get(txn, J("job"), 1, J("model.layers.0.weightX"), &got),
          CKS_ERR_NO_SUCH_KEY);
    ST_EQ(cks_md_object_get(txn, J("job"), 3, o.key, o.key_len, &got),
          CKS_ERR_NO_SUCH_KEY);
    cr_assert_eq(memcmp(&got, &untouched, sizeof(got)), 0);

    /* delete */
    ST_OK(cks_md_object_del(txn, J("job"), 1, o.key, o.key_len));
    ST_EQ(cks_md_object_get(txn, J("job"), 1, o.key, o.key_len, &got),
          CKS_ERR_NO_SUCH_KEY);
    ST_EQ(cks_md_object_del(txn, J("job"), 1, o.key, o.key_len), CKS_ERR_NO_SUCH_KEY);
    ST_OK(cks_md_object_get(txn, J("job"), 2, other.key, other.key_len, &got));

    /* the longest job with the longest key fits LMDB's key limit */
    memset(job, 'j', CKS_JOB_MAX_LEN);
    job[CKS_JOB_MAX_LEN] = '\0';
    memset(key, 'k', CKS_KEY_MAX_LEN);
    key[CKS_KEY_MAX_LEN] = '\0';
    cks_md_object_t big = mkobj(key, 5);
    cr_assert_eq(big.key_len, CKS_KEY_MAX_LEN);
    put_ver(txn, job, 1, CKS_VSTATE_OPEN);
    ST_OK(cks_md_object_put(txn, J(job), 1, &big));
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 0);
    ST_OK(cks_md_object_get(txn, J(job), 1, J(key), &got));
    obj_eq(&got, &big);
    cks_md_txn_abort(txn);

    /* a bad kind is refused */
    txn = txn_begin(md, 1);
    other = mkobj("x", 1);
    other.kind = (cks_kind_t)5;
    ST_EQ(cks_md_object_put(txn, J("job"), 1, &other), CKS_ERR_INVALID_PARAM);
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

Test(metadata, object_list_10000_ordered_and_paginated)
{
    enum { N = 10000, PAGE = 97 };
    uint64_t seed = test_seed("object_list_10000", 0x5eed0001);
    cks_md_h md = md_open(0);
    char **keys = calloc(N, sizeof(*keys));
    char **sorted = calloc(N, sizeof(*sorted));
    size_t *order = calloc(N, sizeof(*order));
    cks_md_object_t *out = calloc(PAGE, sizeof(*out));
    cks_md_txn_h txn;
    char after[CKS_KEY_MAX_LEN + 1] = "";
    size_t count, total = 0, pages = 0;
    int more = 1;

    cr_assert(keys && sorted && order && out);
    /* keys of varied lengths so that byte order differs from insertion and
     * from numeric order of i */
    for (size_t i = 0; i < N; i++) {
        char buf[64];
        uint64_t r = cks_test_rng_next(&seed);

        snprintf(buf, sizeof(buf), "layer.%" PRIu64 ".%s.%zu", r % 97,
                 (r & 1) ? "w" : "bias", i);
        keys[i] = strdup(buf);
        sorted[i] = keys[i];
        order[i] = i;
    }
    for (size_t i = N - 1; i > 0; i--) { /* shuffle the insertion order */
        size_t j = cks_test_rng_next(&seed) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    qsort(sorted, N, sizeof(*sorted), cmp_str);

    txn = txn_begin(md, 1);
    put_ver(txn, "job", 5, CKS_VSTATE_OPEN);
    for (size_t i = 0; i < N; i++) {
        put_obj(txn, "job", 5, keys[order[i]], order[i]);
    }
    /* neighbours that must not show up */
    put_obj(txn, "job", 4, "a", 1);
    put_obj(txn, "job", 6, "a", 1);
    put_obj(txn, "job2", 5, "a", 1);
    put_obj(txn, "jo", 5, "zzz", 1);
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 0);
    while (more) {
        ST_OK(cks_md_object_list(txn, J("job"), 5, (pages == 0) ? NULL : after,
                                 strlen(after), out, PAGE, &count, &more));
        pages++;
        cr_assert_eq(count, CKS_MIN((size_t)PAGE, N - total), "page %zu", pages);
        for (size_t i = 0; i < count; i++) {
            size_t idx;

            cr_assert_str_eq(out[i].key, sorted[total + i], "item %zu", total + i);
            cr_assert_eq(out[i].key_len, strlen(sorted[total + i]));
            /* the fields came back with the right key */
            idx = strtoul(strrchr(out[i].key, '.') + 1, NULL, 10);
            cks_md_object_t want = mkobj(keys[idx], idx);
            obj_eq(&out[i], &want);
        }
        total += count;
        if (count > 0) {
            strcpy(after, out[count - 1].key);
        }
        cr_assert_leq(pages, N / PAGE + 2);
    }
    cr_assert_eq(total, N);
    cr_assert_eq(pages, (N + PAGE - 1) / PAGE);

    /* after a key that is not stored: starts at its successor */
    ST_OK(cks_md_object_list(txn, J("job"), 5, J("layer.5"), out, 1, &count, &more));
    cr_assert_eq(count, 1);
    cr_assert_gt(strcmp(out[0].key, "layer.5"), 0);
    for (size_t i = 0; i < N; i++) {
        if (strcmp(sorted[i], "layer.5") > 0) {
            cr_assert_str_eq(out[0].key, sorted[i]);
            break;
        }
    }
    cks_md_txn_abort(txn);

    for (size_t i = 0; i < N; i++) {
        free(keys[i]);
    }
    free(keys);
    free(sorted);
    free(order);
    free(out);
    cks_md_close(md);
}

Test(metadata, version_del_removes_only_its_objects)
{
    cks_md_h md = md_open(0);
    cks_md_object_t out[16], got;
    cks_md_version_t v;
    cks_md_txn_h txn;
    size_t count;
    int more;
    char key[16];

    txn = txn_begin(md, 1);
    for (uint64_t ver = 1; ver <= 2; ver++) {
        put_ver(txn, "job", ver, CKS_VSTATE_SEALED);
        put_ver(txn, "job2", ver, CKS_VSTATE_SEALED);
        put_ver(txn, "jo", ver, CKS_VSTATE_SEALED);
        for (int i = 0; i < 10; i++) {
            snprintf(key, sizeof(key), "k%d", i);
            put_obj(txn, "job", ver, key, (uint64_t)i);
            put_obj(txn, "job2", ver, key, (uint64_t)i);
            put_obj(txn, "jo", ver, key, (uint64_t)i);
        }
    }
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 1);
    ST_OK(cks_md_version_del(txn, J("job"), 1));
    ST_EQ(cks_md_version_del(txn, J("job"), 1), CKS_ERR_NO_SUCH_VERSION);
    ST_EQ(cks_md_version_del(txn, J("job"), 3), CKS_ERR_NO_SUCH_VERSION);
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 0);
    ST_EQ(cks_md_version_get(txn, J("job"), 1, &v), CKS_ERR_NO_SUCH_VERSION);
    ST_EQ(cks_md_object_get(txn, J("job"), 1, J("k0"), &got), CKS_ERR_NO_SUCH_KEY);
    ST_EQ(cks_md_object_get(txn, J("job"), 1, J("k9"), &got), CKS_ERR_NO_SUCH_KEY);
    ST_OK(cks_md_object_list(txn, J("job"), 1, NULL, 0, out, 16, &count, &more));
    cr_assert_eq(count, 0);

    ST_OK(cks_md_version_get(txn, J("job"), 2, &v));
    ST_OK(cks_md_object_list(txn, J("job"), 2, NULL, 0, out, 16, &count, &more));
    cr_assert_eq(count, 10);
    for (int i = 0; i < 3; i++) {
        const char *job = (i == 0) ? "job2" : "jo";
        uint64_t ver = (i == 2) ? 2 : 1;

        ST_OK(cks_md_version_get(txn, J(job), ver, &v));
        ST_OK(cks_md_object_list(txn, J(job), ver, NULL, 0, out, 16, &count, &more));
        cr_assert_eq(count, 10, "%s/%" PRIu64, job, ver);
    }
    ST_OK(cks_md_object_list(txn, J("job2"), 2, NULL, 0, out, 16, &count, &more));
    cr_assert_eq(count, 10);
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

/* ---- jobs ---------------------------------------------------------------- */

Test(metadata, job_exists_and_list)
{
    static const char *const jobs[] = {"a", "b", "job", "job2", "jo", "zeta"};
    static const char *const sorted[] = {"a", "b", "jo", "job", "job2", "zeta"};
    char names[8][CKS_JOB_MAX_LEN + 1];
    char all[8][CKS_JOB_MAX_LEN + 1];
    cks_md_h md = md_open(0);
    cks_md_txn_h txn;
    size_t count, total = 0;
    int more;

    txn = txn_begin(md, 0);
    ST_EQ(cks_md_job_exists(txn, J("job")), CKS_ERR_NO_SUCH_JOB);
    ST_OK(cks_md_job_list(txn, NULL, 0, names, 8, &count, &more));
    cr_assert_eq(count, 0);
    cr_assert_eq(more, 0);
    cks_md_txn_abort(txn);

    txn = txn_begin(md, 1);
    for (size_t i = 0; i < CKS_ARRAY_SIZE(jobs); i++) {
        for (uint64_t ver = 0; ver < 3 + 20 * (i == 1); ver++) { /* "b" has 23 */
            put_ver(txn, jobs[i], ver, CKS_VSTATE_OPEN);
        }
    }
    put_obj(txn, "objects-only", 1, "k", 1); /* a job is a job with versions */
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 0);
    for (size_t i = 0; i < CKS_ARRAY_SIZE(jobs); i++) {
        ST_OK(cks_md_job_exists(txn, J(jobs[i])));
    }
    ST_EQ(cks_md_job_exists(txn, J("j")), CKS_ERR_NO_SUCH_JOB);
    ST_EQ(cks_md_job_exists(txn, J("job3")), CKS_ERR_NO_SUCH_JOB);
    ST_EQ(cks_md_job_exists(txn, J("objects-only")), CKS_ERR_NO_SUCH_JOB);
    ST_EQ(cks_md_job_exists(txn, J("zz")), CKS_ERR_NO_SUCH_JOB);

    ST_OK(cks_md_job_list(txn, NULL, 0, names, 8, &count, &more));
    cr_assert_eq(count, CKS_ARRAY_SIZE(sorted));
    cr_assert_eq(more, 0);
    for (size_t i = 0; i < count; i++) {
        cr_assert_str_eq(names[i], sorted[i]);
    }

    /* pages of two */
    more = 1;
    while (more) {
        ST_OK(cks_md_job_list(txn, (total == 0) ? NULL : all[total - 1],
                              (total == 0) ? 0 : strlen(all[total - 1]), names, 2, &count,
                              &more));
        cr_assert_leq(total + count, CKS_ARRAY_SIZE(sorted));
        memcpy(all[total], names, count * sizeof(names[0]));
        total += count;
        cr_assert_eq(more, total < CKS_ARRAY_SIZE(sorted));
    }
    cr_assert_eq(total, CKS_ARRAY_SIZE(sorted));
    for (size_t i = 0; i < total; i++) {
        cr_assert_str_eq(all[i], sorted[i]);
    }

    /* after a name that is not a job; max 0 */
    ST_OK(cks_md_job_list(txn, J("joa"), names, 8, &count, &more));
    cr_assert_eq(count, 3);
    cr_assert_str_eq(names[0], "job");
    ST_OK(cks_md_job_list(txn, J("zeta"), names, 8, &count, &more));
    cr_assert_eq(count, 0);
    cr_assert_eq(more, 0);
    ST_OK(cks_md_job_list(txn, NULL, 0, NULL, 0, &count, &more));
    cr_assert_eq(count, 0);
    cr_assert_eq(more, 1);
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

/* ---- foreach ------------------------------------------------------------- */

typedef struct {
    size_t count;
    size_t stop_at; /* 0 = never */
    uint64_t sum;
    char last[CKS_JOB_MAX_LEN + 1];
} walk_t;

static cks_status_t walk_object(const char *job, size_t job_len, uint64_t version,
                                const cks_md_object_t *o, void *arg)
{
    walk_t *w = arg;
    cks_md_object_t want;
    uint64_t n;

    cr_assert_eq(strlen(job), job_len);
    n = strtoull(o->key + 1, NULL, 10);
    want = mkobj(o->key, n);
    obj_eq(o, &want);
    w->count++;
    w->sum += version * 1000 + n + (strcmp(job, "job2") == 0) * 100000;
    strcpy(w->last, job);
    return (w->count == w->stop_at) ? CKS_ERR_CANCELED : CKS_OK;
}

static cks_status_t walk_version(const char *job, size_t job_len,
                                 const cks_md_version_t *v, void *arg)
{
    walk_t *w = arg;
    cks_md_version_t want = mkver(v->version, CKS_VSTATE_SEALED);

    cr_assert_eq(strlen(job), job_len);
    ver_eq(v, &want);
    w->count++;
    w->sum += v->version + (strcmp(job, "job2") == 0) * 100000;
    strcpy(w->last, job);
    return (w->count == w->stop_at) ? CKS_ERR_CANCELED : CKS_OK;
}

/* Walk the objects (versions 0) or the versions of txn: all `count` of them,
 * their sum `sum`, job2's last; then a walk that walk_object/walk_version
 * stop after `stop_at` records, which must end CKS_ERR_CANCELED there. */
static void check_walk(cks_md_txn_h txn, int versions, size_t count, uint64_t sum,
                       size_t stop_at)
{
    const char *what = versions ? "versions" : "objects";

    for (int stop = 0; stop < 2; stop++) {
        walk_t w = {.stop_at = stop ? stop_at : 0};
        cks_status_t st = versions ? cks_md_version_foreach(txn, walk_version, &w)
                                   : cks_md_object_foreach(txn, walk_object, &w);

        cr_assert_eq(st, stop ? CKS_ERR_CANCELED : CKS_OK, "walk of %s (stop at %zu): %s",
                     what, w.stop_at, cks_status_name(st));
        cr_assert_eq(w.count, stop ? stop_at : count, "walk of %s (stop at %zu): %zu records",
                     what, w.stop_at, w.count);
        if (!stop) {
            cr_assert_eq(w.sum, sum, "walk of %s: sum %" PRIu64 ", want %" PRIu64, what, w.sum,
                         sum);
            cr_assert_str_eq(w.last, "job2", "walk of %s: last job %s", what, w.last);
        }
    }
}

Test(metadata, foreach_walks_everything_and_stops)
{
    cks_md_h md = md_open(0);
    cks_md_txn_h txn;
    walk_t w;
    uint64_t want_osum = 0, want_vsum = 0;
    char key[16];

    txn = txn_begin(md, 0);
    memset(&w, 0, sizeof(w));
    ST_OK(cks_md_object_foreach(txn, walk_object, &w));
    ST_OK(cks_md_version_foreach(txn, walk_version, &w));
    cr_assert_eq(w.count, 0);
    cks_md_txn_abort(txn);

    txn = txn_begin(md, 1);
    for (uint64_t ver = 1; ver <= 3; ver++) {
        for (int j = 0; j < 2; j++) {
            const char *job = j ? "job2" : "job";

            put_ver(txn, job, ver, CKS_VSTATE_SEALED);
            want_vsum += ver + j * 100000;
            for (uint64_t n = 0; n < 5; n++) {
                snprintf(key, sizeof(key), "k%" PRIu64, n);
                put_obj(txn, job, ver, key, n);
                want_osum += ver * 1000 + n + j * 100000;
            }
        }
    }
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 0);
    check_walk(txn, 0, 30, want_osum, 7);
    check_walk(txn, 1, 6, want_vsum, 2);
    memset(&w, 0, sizeof(w));
    ST_EQ(cks_md_object_foreach(txn, NULL, &w), CKS_ERR_INVALID_PARAM);
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

static cks_status_t count_object(const char *job, size_t job_len, uint64_t version,
                                 const cks_md_object_t *o, void *arg)
{
    (*(size_t *)arg)++;
    return CKS_OK;
}

static cks_status_t count_version(const char *job, size_t job_len,
                                  const cks_md_version_t *v, void *arg)
{
    (*(size_t *)arg)++;
    return CKS_OK;
}

/* ---- persistence, limits, threads ---------------------------------------- */

Test(metadata, reopen_keeps_everything)
{
    cks_md_h md = md_open(0);
    cks_md_version_t v1 = mkver(1, CKS_VSTATE_PROTECTED), v2 = mkver(2, CKS_VSTATE_OPEN);
    cks_md_object_t o1 = mkobj("a", 11), o2 = mkobj("b", 12), got;
    cks_md_version_t gv;
    cks_md_txn_h txn;

    txn = txn_begin(md, 1);
    ST_OK(cks_md_version_put(txn, J("job"), &v1, 0));
    ST_OK(cks_md_version_put(txn, J("job"), &v2, 0));
    ST_OK(cks_md_object_put(txn, J("job"), 1, &o1));
    ST_OK(cks_md_object_put(txn, J("job"), 2, &o2));
    ST_OK(cks_md_txn_commit(txn));
    /* an aborted write is not persisted */
    txn = txn_begin(md, 1);
    put_ver(txn, "ghost", 1, CKS_VSTATE_OPEN);
    cks_md_txn_abort(txn);
    cks_md_close(md);

    md = md_open(0);
    txn = txn_begin(md, 0);
    ST_OK(cks_md_version_get(txn, J("job"), 1, &gv));
    ver_eq(&gv, &v1);
    ST_OK(cks_md_version_get(txn, J("job"), 2, &gv));
    ver_eq(&gv, &v2);
    ST_OK(cks_md_object_get(txn, J("job"), 1, J("a"), &got));
    obj_eq(&got, &o1);
    ST_OK(cks_md_object_get(txn, J("job"), 2, J("b"), &got));
    obj_eq(&got, &o2);
    ST_EQ(cks_md_job_exists(txn, J("ghost")), CKS_ERR_NO_SUCH_JOB);
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

Test(metadata, map_full_is_metadata_full_and_poisons_txn)
{
    cks_md_h md = md_open(64 * 1024);
    cks_md_txn_h txn;
    cks_md_version_t v;
    cks_status_t st = CKS_OK;
    char key[CKS_KEY_MAX_LEN + 1];
    uint64_t map_size, used;
    int i;

    ST_OK(cks_md_stat(md, &map_size, &used));
    cr_assert_eq(map_size, 64 * 1024);
    txn = txn_begin(md, 1);
    put_ver(txn, "job", 1, CKS_VSTATE_OPEN);
    ST_OK(cks_md_txn_commit(txn));

    txn = txn_begin(md, 1);
    memset(key, 'k', 200);
    for (i = 0; (i < 100000) && (st == CKS_OK); i++) {
        cks_md_object_t o;

        snprintf(key + 200, sizeof(key) - 200, "%06d", i);
        o = mkobj(key, (uint64_t)i);
        st = cks_md_object_put(txn, J("job"), 1, &o);
    }
    cr_assert_eq(st, CKS_ERR_METADATA_FULL, "after %d puts: %s", i, cks_status_name(st));
    cr_assert_gt(i, 1);
    /* poisoned: only abort (or a failing commit) from here */
    ST_EQ(cks_md_version_get(txn, J("job"), 1, &v), CKS_ERR_BAD_STATE);
    ST_EQ(cks_md_txn_commit(txn), CKS_ERR_BAD_STATE);

    /* the store is still usable and holds only what was committed */
    txn = txn_begin(md, 0);
    ST_OK(cks_md_version_get(txn, J("job"), 1, &v));
    ST_EQ(cks_md_object_get(txn, J("job"), 1, J(key), &(cks_md_object_t){0}),
          CKS_ERR_NO_SUCH_KEY);
    cks_md_txn_abort(txn);
    txn = txn_begin(md, 1);
    put_obj(txn, "job", 1, "small", 1);
    ST_OK(cks_md_txn_commit(txn));
    cks_md_close(md);
}

Test(metadata, too_long_and_invalid_names)
{
    cks_md_h md = md_open(0);
    char job[CKS_JOB_MAX_LEN + 2], key[CKS_KEY_MAX_LEN + 2];
    char names[2][CKS_JOB_MAX_LEN + 1];
    cks_md_version_t v = mkver(1, CKS_VSTATE_OPEN);
    cks_md_object_t o = mkobj("k", 1), out[2];
    cks_md_txn_h txn;
    size_t count, n = 0;
    int more;

    memset(job, 'j', sizeof(job));
    memset(key, 'k', sizeof(key));
    txn = txn_begin(md, 1);
    /* one byte over */
    ST_EQ(cks_md_version_put(txn, job, CKS_JOB_MAX_LEN + 1, &v, 0), CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_version_get(txn, job, CKS_JOB_MAX_LEN + 1, 1, &v), CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_version_del(txn, job, CKS_JOB_MAX_LEN + 1, 1), CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_version_list(txn, job, CKS_JOB_MAX_LEN + 1, NULL, &v, 1, &count, &more),
          CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_version_latest(txn, job, CKS_JOB_MAX_LEN + 1, 0, &v),
          CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_job_exists(txn, job, CKS_JOB_MAX_LEN + 1), CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_job_list(txn, job, CKS_JOB_MAX_LEN + 1, names, 2, &count, &more),
          CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_object_put(txn, job, CKS_JOB_MAX_LEN + 1, 1, &o), CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_object_get(txn, job, CKS_JOB_MAX_LEN + 1, 1, J("k"), &o),
          CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_object_get(txn, J("job"), 1, key, CKS_KEY_MAX_LEN + 1, &o),
          CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_object_del(txn, J("job"), 1, key, CKS_KEY_MAX_LEN + 1),
          CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_md_object_list(txn, J("job"), 1, key, CKS_KEY_MAX_LEN + 1, out, 2, &count,
                             &more),
          CKS_ERR_KEY_TOO_LONG);
    o.key_len = CKS_KEY_MAX_LEN + 1;
    ST_EQ(cks_md_object_put(txn, J("job"), 1, &o), CKS_ERR_KEY_TOO_LONG);
    o.key_len = UINT32_MAX;
    ST_EQ(cks_md_object_put(txn, J("job"), 1, &o), CKS_ERR_KEY_TOO_LONG);

    /* empty, NUL inside, NULL */
    o = mkobj("k", 1);
    ST_EQ(cks_md_version_put(txn, "job", 0, &v, 0), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_version_put(txn, "jo\0b", 4, &v, 0), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_version_put(txn, NULL, 3, &v, 0), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_job_exists(txn, "jo\0b", 4), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_job_list(txn, "jo\0b", 4, names, 2, &count, &more),
          CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_md_object_get(txn, J("job"), 1, "k", 0, &o), CKS_ERR_INVALID_PARAM);
    o.key_len = 0;
    ST_EQ(cks_md_object_put(txn, J("job"), 1, &o), CKS_ERR_INVALID_PARAM);

    /* nothing was stored by any of the above */
    ST_OK(cks_md_job_list(txn, NULL, 0, names, 2, &count, &more));
    cr_assert_eq(count, 0);
    ST_OK(cks_md_object_foreach(txn, count_object, &n));
    cr_assert_eq(n, 0);

    /* exactly at the limit is fine */
    ST_OK(cks_md_version_put(txn, job, CKS_JOB_MAX_LEN, &v, 0));
    ST_OK(cks_md_job_list(txn, NULL, 0, names, 2, &count, &more));
    cr_assert_eq(count, 1);
    cr_assert_eq(strlen(names[0]), CKS_JOB_MAX_LEN);
    ST_OK(cks_md_txn_commit(txn));
    cks_md_close(md);
}

typedef struct {
    cks_md_txn_h txn;
    cks_status_t st;
    uint64_t version;
} reader_t;

/* The latest version of "job" that r->txn sees into r->version; the
 * status in r->st. */
static void read_latest(reader_t *r)
{
    cks_md_version_t v;

    r->st = cks_md_version_latest(r->txn, J("job"), 0, &v);
    if (r->st == CKS_OK) {
        r->version = v.version;
    }
}

/* read_latest() on a thread of its own. */
static void *reader_main(void *arg)
{
    read_latest(arg);
    return NULL;
}

Test(metadata, read_txn_moves_between_threads_and_sees_a_snapshot)
{
    cks_md_h md = md_open(0);
    cks_md_txn_h w;
    reader_t r = {.st = CKS_ERR_INTERNAL};
    pthread_t th;

    w = txn_begin(md, 1);
    put_ver(w, "job", 1, CKS_VSTATE_SEALED);
    ST_OK(cks_md_txn_commit(w));

    r.txn = txn_begin(md, 0); /* begun here, used on another thread */
    w = txn_begin(md, 1);
    put_ver(w, "job", 2, CKS_VSTATE_SEALED);
    ST_OK(cks_md_txn_commit(w));

    cr_assert_eq(pthread_create(&th, NULL, reader_main, &r), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    ST_OK(r.st);
    cr_assert_eq(r.version, 1); /* the snapshot predates version 2 */
    ST_OK(cks_md_txn_commit(r.txn));

    r.txn = txn_begin(md, 0);
    read_latest(&r);
    ST_OK(r.st);
    cr_assert_eq(r.version, 2);
    cks_md_txn_abort(r.txn);
    cks_md_close(md);
}

/* ---- stored bytes -------------------------------------------------------- */

Test(metadata, values_are_plain_msgpack)
{
    cks_md_h md = md_open(0);
    cks_md_version_t v = mkver(UINT64_C(1) << 40, CKS_VSTATE_DEGRADED);
    cks_md_object_t o = mkobj("w", 3);
    cks_md_txn_h txn;
    uint8_t k[512], buf[256];
    msgpack_unpacked u;
    msgpack_object_array *a;
    size_t len, off = 0;

    o.layer          = -1;
    o.source_version = v.version - 1;
    v.ec_k           = 4;
    v.ec_m       = 2;
    v.chunk_size = 1u << 20;
    v.redundancy = 1;
    v.missing    = 3;
    txn = txn_begin(md, 1);
    ST_OK(cks_md_version_put(txn, J("job"), &v, 0));
    ST_OK(cks_md_object_put(txn, J("job"), v.version, &o));
    ST_OK(cks_md_txn_commit(txn));
    cks_md_close(md);

    len = raw_get("versions", k, vkey(k, "job", v.version), buf, sizeof(buf));
    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, (const char *)buf, len, &off),
                 MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(off, len);
    cr_assert_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
    a = &u.data.via.array;
    cr_assert_eq(a->size, 14);
    cr_assert_eq(a->ptr[0].via.u64, 3); /* record format */
    cr_assert_eq(a->ptr[1].via.u64, v.version);
    cr_assert_eq(a->ptr[2].via.u64, v.parent);
    cr_assert_eq(a->ptr[3].via.u64, CKS_VSTATE_DEGRADED);
    cr_assert_eq(a->ptr[8].via.u64, v.bytes);
    cr_assert_eq(a->ptr[9].via.u64, 4);
    cr_assert_eq(a->ptr[10].via.u64, 2);
    cr_assert_eq(a->ptr[11].via.u64, 1u << 20);
    cr_assert_eq(a->ptr[12].via.u64, 1);
    cr_assert_eq(a->ptr[13].via.u64, 3);
    msgpack_unpacked_destroy(&u);

    len = raw_get("objects", k, okey(k, "job", v.version, "w"), buf, sizeof(buf));
    msgpack_unpacked_init(&u);
    off = 0;
    cr_assert_eq(msgpack_unpack_next(&u, (const char *)buf, len, &off),
                 MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
    a = &u.data.via.array;
    cr_assert_eq(a->size, 10);
    cr_assert_eq(a->ptr[0].via.u64, 2);
    cr_assert_eq(a->ptr[1].via.u64, o.kind);
    cr_assert_eq(a->ptr[9].via.u64, o.source_version);
    cr_assert_eq(a->ptr[2].type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
    cr_assert_eq(a->ptr[2].via.i64, -1);
    cr_assert_eq(a->ptr[6].via.u64, o.crc64);
    msgpack_unpacked_destroy(&u);
}

/* Values that must not decode, each with why. */
static const struct {
    const char *bytes;
    size_t len;
} g_garbage[] = {
    {"", 0},                                          /* empty */
    {"\xc0", 1},                                      /* nil */
    {"\x01", 1},                                      /* a bare integer */
    {"\x90", 1},                                      /* empty array */
    {"\x99\x01\x01", 3},                              /* truncated */
    {"\x99\xdd\xff\xff\xff\xff", 6},                  /* nested 4G-element array header */
    {"\xdd\xff\xff\xff\xff", 5},                      /* 4G-element array */
    {"\xdc\x00", 2},                                  /* truncated array16 header */
    {"\x99\x02\x01\x01\x01\x01\x01\x01\x01\x01", 10}, /* unknown format 2 */
    {"\x98\x01\x01\x01\x01\x01\x01\x01\x01", 9},      /* 8 fields */
    {"\x99\x01\x01\x01\x01\x01\x01\x01\x01\x01\x00", 11}, /* trailing byte */
    {"\x99\x01\xa1x\x01\x01\x01\x01\x01\x01\x01", 11},    /* a string field */
    {"\x99\x01\xcf\x00", 4},                              /* truncated uint64 */
    {"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 12},
};

Test(metadata, corrupt_values_are_io_errors)
{
    cks_md_h md;
    cks_md_txn_h txn;
    cks_md_version_t v, vout[4], untouched;
    cks_md_object_t o, oout[4];
    uint8_t k[512];
    size_t count, n = 0;
    int more;

    for (size_t g = 0; g < CKS_ARRAY_SIZE(g_garbage); g++) {
        /* version record 1: garbage; version 2: fine */
        md = md_open(0);
        txn = txn_begin(md, 1);
        put_ver(txn, "job", 1, CKS_VSTATE_SEALED);
        put_ver(txn, "job", 2, CKS_VSTATE_OPEN);
        put_obj(txn, "job", 2, "a", 1);
        put_obj(txn, "job", 2, "b", 2);
        ST_OK(cks_md_txn_commit(txn));
        cks_md_close(md);
        raw_put("versions", k, vkey(k, "job", 1), g_garbage[g].bytes, g_garbage[g].len);
        raw_put("objects", k, okey(k, "job", 2, "b"), g_garbage[g].bytes,
                g_garbage[g].len);

        md = md_open(0);
        txn = txn_begin(md, 0);
        memset(&untouched, 0x77, sizeof(untouched));
        memcpy(&v, &untouched, sizeof(v));
        ST_EQ(cks_md_version_get(txn, J("job"), 1, &v), CKS_ERR_IO);
        cr_assert_eq(memcmp(&v, &untouched, sizeof(v)), 0, "garbage %zu", g);
        ST_OK(cks_md_version_get(txn, J("job"), 2, &v));
        ST_EQ(cks_md_version_list(txn, J("job"), NULL, vout, 4, &count, &more),
              CKS_ERR_IO);
        ST_EQ(cks_md_version_latest(txn, J("job"), 1, &v), CKS_ERR_IO);
        ST_EQ(cks_md_version_foreach(txn, count_version, &n), CKS_ERR_IO);
        ST_EQ(cks_md_object_get(txn, J("job"), 2, J("b"), &o), CKS_ERR_IO);
        ST_OK(cks_md_object_get(txn, J("job"), 2, J("a"), &o));
        ST_EQ(cks_md_object_list(txn, J("job"), 2, NULL, 0, oout, 4, &count, &more),
              CKS_ERR_IO);
        ST_EQ(cks_md_object_foreach(txn, count_object, &n), CKS_ERR_IO);
        /* a decode failure does not poison the txn */
        ST_OK(cks_md_version_get(txn, J("job"), 2, &v));
        ST_OK(cks_md_txn_commit(txn));

        /* the bad record can still be deleted, objects and all */
        txn = txn_begin(md, 1);
        ST_OK(cks_md_version_del(txn, J("job"), 1));
        ST_OK(cks_md_version_del(txn, J("job"), 2));
        ST_OK(cks_md_txn_commit(txn));
        txn = txn_begin(md, 0);
        n = 0;
        ST_OK(cks_md_version_foreach(txn, count_version, &n));
        ST_OK(cks_md_object_foreach(txn, count_object, &n));
        cr_assert_eq(n, 0, "garbage %zu: %zu records left", g, n);
        cks_md_txn_abort(txn);
        cks_md_close(md);
    }
}

Test(metadata, corrupt_keys_are_io_errors)
{
    cks_md_h md = md_open(0);
    cks_md_txn_h txn;
    cks_md_version_t v = mkver(1, CKS_VSTATE_SEALED);
    char names[4][CKS_JOB_MAX_LEN + 1];
    uint8_t k[512], val[64];
    size_t vlen, count, n = 0;
    int more;

    txn = txn_begin(md, 1);
    ST_OK(cks_md_version_put(txn, J("job"), &v, 0));
    ST_OK(cks_md_txn_commit(txn));
    cks_md_close(md);

    /* a versions key with no NUL, and an objects key with nothing after
     * the version */
    vlen = raw_get("versions", k, vkey(k, "job", 1), val, sizeof(val));
    raw_put("versions", "nonul", 5, val, vlen);
    raw_put("objects", k, vkey(k, "zob", 1), val, vlen);

    md = md_open(0);
    txn = txn_begin(md, 0);
    ST_EQ(cks_md_version_foreach(txn, count_version, &n), CKS_ERR_IO);
    ST_EQ(cks_md_job_list(txn, NULL, 0, names, 4, &count, &more), CKS_ERR_IO);
    ST_EQ(cks_md_object_foreach(txn, count_object, &n), CKS_ERR_IO);
    ST_OK(cks_md_version_get(txn, J("job"), 1, &v));
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

Test(metadata, mutated_records_never_crash)
{
    enum { N = 2000 };
    uint64_t seed = test_seed("mutated_records", 0x5eed0002);
    cks_md_h md = md_open(0);
    cks_md_txn_h txn;
    cks_md_object_t o = mkobj("orig", 77), got;
    uint8_t k[512], good[128], bad[160];
    MDB_env *env;
    MDB_txn *rtxn;
    MDB_dbi dbi;
    size_t glen, nio = 0, nok = 0;
    char key[16];

    o.layer = -1;
    txn = txn_begin(md, 1);
    ST_OK(cks_md_object_put(txn, J("job"), 1, &o));
    ST_OK(cks_md_txn_commit(txn));
    cks_md_close(md);
    glen = raw_get("objects", k, okey(k, "job", 1, "orig"), good, sizeof(good));

    /* N mutants in one raw transaction: byte flips, truncations, extensions */
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 8), 0);
    cr_assert_eq(mdb_env_open(env, g_dir, 0, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &rtxn), 0);
    cr_assert_eq(mdb_dbi_open(rtxn, "objects", 0, &dbi), 0);
    for (int i = 0; i < N; i++) {
        uint64_t r = cks_test_rng_next(&seed);
        size_t blen = glen;
        MDB_val mk, mv;

        memcpy(bad, good, glen);
        switch (r % 4) {
            case 0: /* one random byte */
            case 1:
                bad[(r >> 8) % glen] = (uint8_t)(r >> 32);
                break;
            case 2: /* truncate */
                blen = (r >> 8) % glen;
                break;
            default: /* random tail */
                blen = glen + 1 + (r >> 8) % 16;
                for (size_t j = glen; j < blen; j++) {
                    bad[j] = (uint8_t)cks_test_rng_next(&seed);
                }
                break;
        }
        snprintf(key, sizeof(key), "m%05d", i);
        mk.mv_size = okey(k, "job", 1, key);
        mk.mv_data = k;
        mv.mv_size = blen;
        mv.mv_data = bad;
        cr_assert_eq(mdb_put(rtxn, dbi, &mk, &mv, 0), 0);
    }
    cr_assert_eq(mdb_txn_commit(rtxn), 0);
    mdb_env_close(env);

    md = md_open(0);
    txn = txn_begin(md, 0);
    for (int i = 0; i < N; i++) {
        cks_status_t st;

        snprintf(key, sizeof(key), "m%05d", i);
        st = cks_md_object_get(txn, J("job"), 1, J(key), &got);
        cr_assert(st == CKS_OK || st == CKS_ERR_IO, "mutant %d: %s", i,
                  cks_status_name(st));
        if (st == CKS_OK) {
            cr_assert_str_eq(got.key, key);
            cr_assert_leq((unsigned)got.kind, CKS_KIND_OTHER);
            nok++;
        } else {
            nio++;
        }
    }
    fprintf(stderr, "[metadata::mutated_records] %zu decoded, %zu rejected\n", nok, nio);
    cr_assert_gt(nio, N / 4); /* truncations and tails alone are about half */
    cr_assert_gt(nok, 0);     /* some flips land in payload bytes */
    cks_md_txn_abort(txn);
    cks_md_close(md);
}

Test(metadata, newer_schema_is_refused)
{
    cks_md_h md = md_open(0);
    cks_md_h keep = (cks_md_h)(uintptr_t)0x2;

    cks_md_close(md);
    raw_put("meta", "schema", 6, "\x63", 1); /* msgpack 99 */
    ST_EQ(cks_md_open(g_dir, 0, &keep), CKS_ERR_UNSUPPORTED);
    cr_assert_eq(keep, (cks_md_h)(uintptr_t)0x2);

    raw_put("meta", "schema", 6, "\xa1x", 2); /* not a number */
    ST_EQ(cks_md_open(g_dir, 0, &keep), CKS_ERR_IO);

    raw_put("meta", "schema", 6, "\x01", 1); /* back to ours */
    md = md_open(0);
    cks_md_close(md);
}

/* ---- chunks ---------------------------------------------------------------- */

static cks_status_t count_chunk(const cks_md_chunk_t *c, void *arg)
{
    (void)c;
    (*(int *)arg)++;
    return CKS_OK;
}

static int keep_version_7(uint64_t version, const char *key, size_t key_len, void *arg)
{
    (void)key;
    (void)key_len;
    (void)arg;
    return version == 7;
}

typedef struct {
    int n;
    uint64_t last_version;
} each_t;

static cks_status_t each_chunk(const char *job, size_t job_len, uint64_t version,
                               const char *key, size_t key_len, const cks_md_chunk_t *c,
                               void *arg)
{
    each_t *e = arg;
    cr_assert_eq(job_len, 3);
    cr_assert(memcmp(job, "job", 3) == 0);
    cr_assert(key_len == 1 || key_len == 2, "key %.*s", (int)key_len, key);
    cr_assert(c->idx < 6);
    e->n++;
    e->last_version = version;
    return CKS_OK;
}

Test(metadata, chunk_records)
{
    cks_md_h md = md_open(0);
    cks_md_txn_h txn = txn_begin(md, 1);
    cks_md_chunk_t c = {3, 5, 65536, 0xabcdef, 8192, 65536}, got;

    /* stripes 0..2, chunks 0..5 of keys "k" (version 7) and "k2" (version 8) */
    for (uint64_t s = 0; s < 3; s++) {
        for (uint32_t i = 0; i < 6; i++) {
            c.stripe = s;
            c.idx    = i;
            ST_OK(cks_md_chunk_put(txn, J("job"), 7, J("k"), &c));
            ST_OK(cks_md_chunk_put(txn, J("job"), 8, J("k2"), &c));
        }
    }
    c.stripe = 1;
    c.idx    = 2;
    ST_EQ(cks_md_chunk_put(txn, J("job"), 7, J("k"), &c), CKS_ERR_DUPLICATE_KEY);
    ST_OK(cks_md_chunk_get(txn, J("job"), 7, J("k"), 1, 2, &got));
    cr_assert_eq(got.stripe, 1);
    cr_assert_eq(got.idx, 2);
    cr_assert_eq(got.len, 65536);
    cr_assert_eq(got.crc64, 0xabcdef);
    cr_assert_eq(got.arena_offset, 8192);
    ST_EQ(cks_md_chunk_get(txn, J("job"), 7, J("k"), 3, 0, &got), CKS_ERR_NO_SUCH_KEY);
    /* "k" of version 7 does not see the chunks of "k2" */
    ST_EQ(cks_md_chunk_get(txn, J("job"), 7, J("k2"), 0, 0, &got), CKS_ERR_NO_SUCH_KEY);
    each_t e = {0, 0};
    ST_OK(cks_md_chunk_foreach(txn, each_chunk, &e));
    cr_assert_eq(e.n, 36);
    /* garbage collection keeps version 7, frees version 8 */
    int freed = 0;
    ST_OK(cks_md_chunk_gc(txn, J("job"), keep_version_7, count_chunk, &freed));
    cr_assert_eq(freed, 18);
    ST_EQ(cks_md_chunk_get(txn, J("job"), 8, J("k2"), 0, 0, &got), CKS_ERR_NO_SUCH_KEY);
    ST_OK(cks_md_chunk_get(txn, J("job"), 7, J("k"), 0, 0, &got));
    /* deleting a version's chunks */
    freed = 0;
    ST_OK(cks_md_chunk_del_version(txn, J("job"), 7, count_chunk, &freed));
    cr_assert_eq(freed, 18);
    e.n = 0;
    ST_OK(cks_md_chunk_foreach(txn, each_chunk, &e));
    cr_assert_eq(e.n, 0);
    ST_OK(cks_md_txn_commit(txn));
    cks_md_close(md);
}

Test(metadata, drop_records)
{
    cks_md_h md        = md_open(0);
    cks_md_txn_h txn   = txn_begin(md, 1);
    const uint64_t day = 24ull * 3600 * 1000000000ull;
    const uint64_t now = 400 * day;
    uint64_t created, v[8], cr[8];
    size_t n;
    int more;

    ST_EQ(cks_md_drop_get(txn, J("job"), 3, &created), CKS_ERR_NO_SUCH_VERSION);
    ST_OK(cks_md_drop_put(txn, J("job"), 3, 333, now - 10 * day)); /* old: pruned below */
    ST_OK(cks_md_drop_put(txn, J("job"), 5, 555, now - 10 * day));
    ST_OK(cks_md_drop_get(txn, J("job"), 3, &created));
    cr_assert_eq(created, 333);
    ST_OK(cks_md_drop_put(txn, J("job2"), 1, 111, now));
    ST_OK(cks_md_drop_put(txn, J("job"), 9, 999, now)); /* prunes 3 and 5 */
    ST_EQ(cks_md_drop_get(txn, J("job"), 3, &created), CKS_ERR_NO_SUCH_VERSION);
    ST_EQ(cks_md_drop_get(txn, J("job"), 5, &created), CKS_ERR_NO_SUCH_VERSION);
    ST_OK(cks_md_drop_put(txn, J("job"), 7, 777, now));
    /* job's own, in order, paged; job2's apart */
    ST_OK(cks_md_drop_list(txn, J("job"), NULL, v, cr, 1, &n, &more));
    cr_assert(n == 1 && more && v[0] == 7 && cr[0] == 777);
    ST_OK(cks_md_drop_list(txn, J("job"), &v[0], v, cr, 8, &n, &more));
    cr_assert(n == 1 && !more && v[0] == 9 && cr[0] == 999, "n %zu v %llu", n,
              (unsigned long long)v[0]);
    ST_OK(cks_md_drop_list(txn, J("job2"), NULL, v, cr, 8, &n, &more));
    cr_assert(n == 1 && !more && v[0] == 1 && cr[0] == 111);
    /* a second delete of a version number (another incarnation) replaces it */
    ST_OK(cks_md_drop_put(txn, J("job"), 7, 778, now + 1));
    ST_OK(cks_md_drop_get(txn, J("job"), 7, &created));
    cr_assert_eq(created, 778);
    ST_EQ(cks_md_drop_list(txn, J("job"), NULL, NULL, cr, 8, &n, &more), CKS_ERR_INVALID_PARAM);
    ST_OK(cks_md_txn_commit(txn));
    cks_md_close(md);
}

static int keep_odd_versions(uint64_t version, const char *key, size_t key_len, void *arg)
{
    (void)key;
    (void)key_len;
    (void)arg;
    return version % 2 == 1;
}

static cks_status_t count_any_chunk(const char *job, size_t job_len, uint64_t version,
                                    const char *key, size_t key_len,
                                    const cks_md_chunk_t *c, void *arg)
{
    (void)job_len;
    (void)key;
    (void)key_len;
    (void)c;
    cr_assert(strcmp(job, "job") != 0 || version % 2 == 1, "version %llu of job left",
              (unsigned long long)version);
    (*(int *)arg)++;
    return CKS_OK;
}

/* Deletes between kept records, in the walks of chunk_gc and of the drop
 * pruning: each delete seeks past the deleted key, and neither a kept record
 * nor a neighbouring job ("jo", "job2") is touched. */
Test(metadata, walks_delete_between_kept_records)
{
    cks_md_h md = md_open(0);
    cks_md_txn_h txn = txn_begin(md, 1);
    cks_md_chunk_t c = {0, 0, 4096, 0x1234, 0, 4096};
    const uint64_t day = 24ull * 3600 * 1000000000ull;
    const uint64_t now = 400 * day, old = now - 8 * day;
    uint64_t created, v[4], cr[4];
    int freed = 0, n = 0, more;
    size_t count;

    for (uint64_t ver = 1; ver <= 6; ver++) {
        for (uint32_t i = 0; i < 2; i++) {
            c.idx = i;
            ST_OK(cks_md_chunk_put(txn, J("job"), ver, J("k"), &c));
        }
    }
    for (uint32_t i = 0; i < 2; i++) {
        c.idx = i;
        ST_OK(cks_md_chunk_put(txn, J("jo"), 2, J("k"), &c));
        ST_OK(cks_md_chunk_put(txn, J("job2"), 2, J("k"), &c));
    }
    ST_OK(cks_md_chunk_gc(txn, J("job"), keep_odd_versions, count_chunk, &freed));
    cr_assert_eq(freed, 6);
    ST_OK(cks_md_chunk_foreach(txn, count_any_chunk, &n));
    cr_assert_eq(n, 10);

    ST_OK(cks_md_drop_put(txn, J("a"), 1, 11, old));
    ST_OK(cks_md_drop_put(txn, J("b"), 1, 21, now));
    ST_OK(cks_md_drop_put(txn, J("c"), 1, 31, old));
    ST_OK(cks_md_drop_put(txn, J("c"), 2, 32, now));
    ST_OK(cks_md_drop_put(txn, J("c"), 3, 33, old));
    ST_OK(cks_md_drop_put(txn, J("d"), 1, 41, now)); /* prunes a/1, c/1, c/3 */
    ST_EQ(cks_md_drop_get(txn, J("a"), 1, &created), CKS_ERR_NO_SUCH_VERSION);
    ST_OK(cks_md_drop_get(txn, J("b"), 1, &created));
    cr_assert_eq(created, 21);
    ST_OK(cks_md_drop_list(txn, J("c"), NULL, v, cr, 4, &count, &more));
    cr_assert(count == 1 && !more && v[0] == 2 && cr[0] == 32, "count %zu", count);
    ST_OK(cks_md_txn_commit(txn));
    cks_md_close(md);
}
