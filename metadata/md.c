/*
 * DESIGN: the LMDB schema of one storage server (see cks_md.h for the layout).
 *
 * Owns: one LMDB environment per data directory, its named databases
 * ("versions", "objects", "meta", "chunks", "drops") and the byte formats
 * of their keys and values. Nothing else in ckstore includes <lmdb.h> or <msgpack.h> for this
 * data; MDB_* codes are translated here, once, and logged here.
 *
 * Threads: read transactions run on any thread (MDB_NOTLS ties the reader slot
 * to the transaction, not to the thread), one thread at a time per
 * transaction. Write transactions run on the server's single metadata writer
 * thread; LMDB serialises writers anyway. Never call into this module on the
 * per-chunk data path or hold a write transaction across a network wait.
 *
 * Durability: the environment is opened MDB_NOSYNC. A commit reaches the page
 * cache, so a SIGKILL of the process loses nothing committed; only a machine
 * crash can lose the last commits, and a machine crash loses the server's
 * arena (in /dev/shm) anyway, so an fsync per commit would buy nothing.
 * cks_md_sync() forces a flush for callers that want one (clean shutdown).
 * LMDB's copy-on-write B-tree keeps the file consistent either way.
 *
 * Keys: job + 0x00 + be64(version) [+ object key]. Big-endian versions make
 * LMDB's memcmp order numeric order; job names hold no NUL, so the 0x00 ends
 * the job and "job" never matches keys of "job2". The immediate successor of
 * a byte string s is s + 0x00, and "job" + 0x01 is past every key of "job":
 * pagination and job skipping are single MDB_SET_RANGE seeks. Longest key:
 * 128 + 1 + 8 + 256 = 393 bytes, under LMDB's 511.
 *
 * Values: drop records are two big-endian u64 (16 bytes, checked on read);
 * the others are msgpack arrays [format, fields...], packed with msgpack-c into a
 * fixed stack buffer (no allocation). They are read back with the small
 * bounded reader below rather than msgpack-c's unpacker: that unpacker
 * allocates an array's declared size before checking that the bytes exist, so
 * a 6-byte corrupt value (0x99 0xdd ff ff ff ff) makes it ask for 128 GiB.
 * The reader accepts exactly the integer forms msgpack defines, checks every
 * count and range, and turns anything else into CKS_ERR_IO.
 *
 * Must never: crash or allocate on a corrupt record, write an output on
 * failure, or keep using a transaction on which LMDB failed (poisoned).
 */
#include "cks_md.h"
#include "md_int.h"

#include <errno.h>
#include <lmdb.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MD_DB_VERSIONS "versions"
#define MD_DB_OBJECTS  "objects"
#define MD_DB_META     "meta"
#define MD_META_SCHEMA "schema"
#define MD_MAX_DBS     8 /* five used */
#define MD_MAX_READERS 126

/* job + 0x00 + be64(version) */
#define MD_VKEY_MAX (CKS_JOB_MAX_LEN + 1 + 8)
/* ... + object key, + 1 for the successor byte used by pagination */
#define MD_OKEY_MAX (MD_VKEY_MAX + CKS_KEY_MAX_LEN + 1)

/* Record formats: [fmt, version, parent, state, nranks, created_ns, sealed_ns,
 * nobjects, bytes] and [fmt, kind, layer, expert, rank, size, crc64,
 * arena_offset, arena_len]. Fields are only ever appended, with a new fmt. */
#define MD_VREC_FMT     3 /* 1 lacked ec_k, ec_m, chunk_size; 2 redundancy, missing;
                             both still read */
#define MD_VREC_NFIELDS 14
#define MD_CREC_FMT     1 /* chunks: [fmt, len, crc64, arena_offset, arena_len] */
#define MD_CREC_NFIELDS 5
#define MD_DB_CHUNKS    "chunks"
/* drops (tombstones): version key -> be64(created_ns) be64(dropped_ns) */
#define MD_DB_DROPS     "drops"
#define MD_DROP_LEN     16
/* chunk key: version key + object key + 0x00 + be64(stripe) + u8(idx) */
#define MD_CKEY_MAX (MD_VKEY_MAX + CKS_KEY_MAX_LEN + 1 + 8 + 1)
#define MD_OREC_FMT     2 /* 1 lacked source_version; still read */
#define MD_OREC_NFIELDS 10
#define MD_VALUE_MAX    CKS_MD_VALUE_MAX /* 1 + 9 * 9 bytes at most */

struct cks_md {
    MDB_env *env;
    MDB_dbi dbi_versions;
    MDB_dbi dbi_objects;
    MDB_dbi dbi_meta;
    MDB_dbi dbi_chunks;
    MDB_dbi dbi_drops;
};

struct cks_md_txn {
    cks_md_h md;
    MDB_txn *txn;
    int write;
    int poisoned; /* LMDB failed inside: only abort is accepted */
    struct cks_md_txn *parent; /* of a nested transaction, else NULL */
};

/* ---- LMDB codes --------------------------------------------------------- */

/* Translate an LMDB failure (never 0, MDB_NOTFOUND or MDB_KEYEXIST: callers
 * handle those), log it once, and poison the transaction it happened in. */
static cks_status_t md_status_from_mdb(cks_md_txn_h txn, int rc, const char *what)
{
    cks_status_t status;

    if ((rc == MDB_MAP_FULL) || (rc == MDB_TXN_FULL)) {
        status = CKS_ERR_METADATA_FULL;
    } else {
        status = CKS_ERR_IO;
    }
    cks_error("metadata: %s: %s (%d)", what, mdb_strerror(rc), rc);
    if (txn != NULL) {
        txn->poisoned = 1;
    }
    return status;
}

/* Cursor step; *found_p = 0 on MDB_NOTFOUND. */
static cks_status_t md_cursor_get(cks_md_txn_h txn, MDB_cursor *cur, MDB_val *k,
                                  MDB_val *v, MDB_cursor_op op, int *found_p)
{
    int rc = mdb_cursor_get(cur, k, v, op);

    if (rc == MDB_NOTFOUND) {
        *found_p = 0;
        return CKS_OK;
    }
    if (rc != 0) {
        return md_status_from_mdb(txn, rc, "mdb_cursor_get");
    }
    *found_p = 1;
    return CKS_OK;
}

static cks_status_t md_cursor_open(cks_md_txn_h txn, MDB_dbi dbi, MDB_cursor **cur_p)
{
    int rc = mdb_cursor_open(txn->txn, dbi, cur_p);

    if (rc != 0) {
        return md_status_from_mdb(txn, rc, "mdb_cursor_open");
    }
    return CKS_OK;
}

/* ---- input checks ------------------------------------------------------- */

static cks_status_t md_txn_check(cks_md_txn_h txn, int need_write)
{
    if (txn == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (txn->poisoned) {
        return CKS_ERR_BAD_STATE;
    }
    if (need_write && !txn->write) {
        return CKS_ERR_INVALID_PARAM;
    }
    return CKS_OK;
}

static cks_status_t md_job_check(const char *job, size_t job_len)
{
    if ((job == NULL) || (job_len == 0)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (job_len > CKS_JOB_MAX_LEN) {
        return CKS_ERR_KEY_TOO_LONG;
    }
    if (memchr(job, '\0', job_len) != NULL) {
        return CKS_ERR_INVALID_PARAM; /* would end the job early in the key */
    }
    return CKS_OK;
}

static cks_status_t md_key_check(const char *key, size_t key_len)
{
    if ((key == NULL) || (key_len == 0)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (key_len > CKS_KEY_MAX_LEN) {
        return CKS_ERR_KEY_TOO_LONG;
    }
    return CKS_OK;
}

static cks_status_t md_txn_job_check(cks_md_txn_h txn, int need_write, const char *job,
                                     size_t job_len)
{
    cks_status_t status = md_txn_check(txn, need_write);

    if (status != CKS_OK) {
        return status;
    }
    return md_job_check(job, job_len);
}

/* ---- keys --------------------------------------------------------------- */

/* job + 0x00 + be64(version) into buf; returns its length. */

/* Does key k belong to `job` (start with job + 0x00)? */
static int md_key_in_job(const MDB_val *k, const char *job, size_t job_len)
{
    const uint8_t *p = k->mv_data;

    return (k->mv_size > job_len) && (memcmp(p, job, job_len) == 0) && (p[job_len] == 0);
}

/* Does key k start with prefix[0 .. plen) and have something after it? */
static int md_key_has_prefix(const MDB_val *k, const uint8_t *prefix, size_t plen)
{
    return (k->mv_size > plen) && (memcmp(k->mv_data, prefix, plen) == 0);
}

/* Length of the job part of a stored key, or 0 when the key is malformed. */
static size_t md_key_job_len(const MDB_val *k)
{
    const uint8_t *nul = memchr(k->mv_data, 0, CKS_MIN(k->mv_size, CKS_JOB_MAX_LEN + 1));

    if (nul == NULL) {
        return 0;
    }
    return (size_t)(nul - (const uint8_t *)k->mv_data);
}

/* ---- values: writing ---------------------------------------------------- */

typedef struct {
    uint8_t buf[MD_VALUE_MAX];
    size_t len;
} md_wbuf_t;

static int md_wbuf_write(void *data, const char *p, size_t n)
{
    md_wbuf_t *w = data;

    if (n > sizeof(w->buf) - w->len) {
        return -1;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    return 0;
}

static cks_status_t md_version_encode(const cks_md_version_t *v, md_wbuf_t *w)
{
    msgpack_packer pk;
    int rc = 0;

    w->len = 0;
    msgpack_packer_init(&pk, w, md_wbuf_write);
    rc |= msgpack_pack_array(&pk, MD_VREC_NFIELDS);
    rc |= msgpack_pack_uint32(&pk, MD_VREC_FMT);
    rc |= msgpack_pack_uint64(&pk, v->version);
    rc |= msgpack_pack_uint64(&pk, v->parent);
    rc |= msgpack_pack_uint32(&pk, (uint32_t)v->state);
    rc |= msgpack_pack_uint32(&pk, v->nranks);
    rc |= msgpack_pack_uint64(&pk, v->created_ns);
    rc |= msgpack_pack_uint64(&pk, v->sealed_ns);
    rc |= msgpack_pack_uint64(&pk, v->nobjects);
    rc |= msgpack_pack_uint64(&pk, v->bytes);
    rc |= msgpack_pack_uint32(&pk, v->ec_k);
    rc |= msgpack_pack_uint32(&pk, v->ec_m);
    rc |= msgpack_pack_uint64(&pk, v->chunk_size);
    rc |= msgpack_pack_uint32(&pk, v->redundancy);
    rc |= msgpack_pack_uint64(&pk, v->missing);
    if (rc != 0) {
        cks_error("metadata: msgpack packing of a version record failed");
        return CKS_ERR_INTERNAL;
    }
    return CKS_OK;
}

static cks_status_t md_object_encode(const cks_md_object_t *o, md_wbuf_t *w)
{
    msgpack_packer pk;
    int rc = 0;

    w->len = 0;
    msgpack_packer_init(&pk, w, md_wbuf_write);
    rc |= msgpack_pack_array(&pk, MD_OREC_NFIELDS);
    rc |= msgpack_pack_uint32(&pk, MD_OREC_FMT);
    rc |= msgpack_pack_uint32(&pk, (uint32_t)o->kind);
    rc |= msgpack_pack_int32(&pk, o->layer);
    rc |= msgpack_pack_int32(&pk, o->expert);
    rc |= msgpack_pack_int32(&pk, o->rank);
    rc |= msgpack_pack_uint64(&pk, o->size);
    rc |= msgpack_pack_uint64(&pk, o->crc64);
    rc |= msgpack_pack_uint64(&pk, o->arena_offset);
    rc |= msgpack_pack_uint64(&pk, o->arena_len);
    rc |= msgpack_pack_uint64(&pk, o->source_version);
    if (rc != 0) {
        cks_error("metadata: msgpack packing of an object record failed");
        return CKS_ERR_INTERNAL;
    }
    return CKS_OK;
}

/* ---- values: reading ------------------------------------------------------
 * A bounded reader of msgpack arrays of integers. Every function returns 0 or
 * -1 and sets r->what to the first problem found. */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
    const char *what;
} md_rbuf_t;

static int md_rd_fail(md_rbuf_t *r, const char *what)
{
    if (r->what == NULL) {
        r->what = what;
    }
    return -1;
}

static int md_rd_be(md_rbuf_t *r, size_t n, uint64_t *u_p)
{
    uint64_t u = 0;

    if ((size_t)(r->end - r->p) < n) {
        return md_rd_fail(r, "truncated");
    }
    for (size_t i = 0; i < n; i++) {
        u = (u << 8) | r->p[i];
    }
    r->p += n;
    *u_p = u;
    return 0;
}

static int md_rd_array(md_rbuf_t *r, uint64_t *n_p)
{
    uint8_t b;

    if (r->p == r->end) {
        return md_rd_fail(r, "empty value");
    }
    b = *r->p++;
    if ((b & 0xf0) == 0x90) {
        *n_p = b & 0x0f;
        return 0;
    }
    if (b == 0xdc) {
        return md_rd_be(r, 2, n_p);
    }
    if (b == 0xdd) {
        return md_rd_be(r, 4, n_p);
    }
    return md_rd_fail(r, "not an array");
}

/* Any msgpack integer; *neg_p = 1 with the value in *s_p when negative,
 * else the value in *u_p. */
static int md_rd_int(md_rbuf_t *r, int *neg_p, uint64_t *u_p, int64_t *s_p)
{
    static const uint8_t width[4] = {1, 2, 4, 8};
    uint64_t u;
    uint8_t b;

    if (r->p == r->end) {
        return md_rd_fail(r, "truncated");
    }
    b = *r->p++;
    if (b <= 0x7f) { /* positive fixint */
        *neg_p = 0;
        *u_p = b;
        return 0;
    }
    if (b >= 0xe0) { /* negative fixint */
        *neg_p = 1;
        *s_p = (int8_t)b;
        return 0;
    }
    if ((b >= 0xcc) && (b <= 0xcf)) { /* uint 8/16/32/64 */
        if (md_rd_be(r, width[b - 0xcc], &u) != 0) {
            return -1;
        }
        *neg_p = 0;
        *u_p = u;
        return 0;
    }
    if ((b >= 0xd0) && (b <= 0xd3)) { /* int 8/16/32/64 */
        unsigned bits = 8u * width[b - 0xd0];
        int64_t s;

        if (md_rd_be(r, width[b - 0xd0], &u) != 0) {
            return -1;
        }
        if ((bits < 64) && (u & (UINT64_C(1) << (bits - 1)))) {
            u |= ~UINT64_C(0) << bits; /* sign-extend */
        }
        memcpy(&s, &u, sizeof(s));
        if (s < 0) {
            *neg_p = 1;
            *s_p = s;
        } else {
            *neg_p = 0;
            *u_p = (uint64_t)s;
        }
        return 0;
    }
    return md_rd_fail(r, "not an integer");
}

static int md_rd_u64(md_rbuf_t *r, uint64_t max, uint64_t *v_p)
{
    uint64_t u = 0;
    int64_t s = 0;
    int neg;

    if (md_rd_int(r, &neg, &u, &s) != 0) {
        return -1;
    }
    if (neg || (u > max)) {
        return md_rd_fail(r, "integer out of range");
    }
    *v_p = u;
    return 0;
}

static int md_rd_i32(md_rbuf_t *r, int32_t *v_p)
{
    uint64_t u = 0;
    int64_t s = 0;
    int neg;

    if (md_rd_int(r, &neg, &u, &s) != 0) {
        return -1;
    }
    if (neg ? (s < INT32_MIN) : (u > INT32_MAX)) {
        return md_rd_fail(r, "integer out of range");
    }
    *v_p = neg ? (int32_t)s : (int32_t)u;
    return 0;
}

/* Array header and format number shared by both records. */
static int md_rd_header(md_rbuf_t *r, uint64_t fmt, uint64_t nfields)
{
    uint64_t n, f;

    if (md_rd_array(r, &n) != 0) {
        return -1;
    }
    if (n != nfields) {
        return md_rd_fail(r, "wrong field count");
    }
    if (md_rd_u64(r, UINT32_MAX, &f) != 0) {
        return -1;
    }
    if (f != fmt) {
        return md_rd_fail(r, "unknown record format");
    }
    return 0;
}

static cks_status_t md_version_decode(const char *job, size_t job_len,
                                      uint64_t key_version, const MDB_val *val,
                                      cks_md_version_t *v_p)
{
    md_rbuf_t r = {val->mv_data, (const uint8_t *)val->mv_data + val->mv_size, NULL};
    cks_md_version_t v;
    uint64_t state, nranks;

    uint64_t n = 0, fmt = 0, k = 0, m = 0, red = 0;
    memset(&v, 0, sizeof(v));
    /* format 1 (9 fields), 2 (12 fields: + ec_k, ec_m, chunk_size) or 3 (14
     * fields: + redundancy, missing) */
    if ((md_rd_array(&r, &n) != 0) || (md_rd_u64(&r, UINT32_MAX, &fmt) != 0) ||
        !((fmt == 1 && n == 9) || (fmt == 2 && n == 12) ||
          (fmt == MD_VREC_FMT && n == MD_VREC_NFIELDS))) {
        md_rd_fail(&r, "unknown record format or field count");
        goto corrupt;
    }
    if ((md_rd_u64(&r, UINT64_MAX, &v.version) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &v.parent) != 0) ||
        (md_rd_u64(&r, CKS_VSTATE_ABORTED, &state) != 0) ||
        (md_rd_u64(&r, UINT32_MAX, &nranks) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &v.created_ns) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &v.sealed_ns) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &v.nobjects) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &v.bytes) != 0) ||
        (fmt >= 2 &&
         ((md_rd_u64(&r, 16, &k) != 0) || (md_rd_u64(&r, 4, &m) != 0) ||
          (md_rd_u64(&r, UINT64_MAX, &v.chunk_size) != 0))) ||
        (fmt >= 3 &&
         ((md_rd_u64(&r, 4, &red) != 0) || (md_rd_u64(&r, UINT64_MAX, &v.missing) != 0)))) {
        goto corrupt;
    }
    v.ec_k = (uint32_t)k;
    v.ec_m = (uint32_t)m;
    /* records before format 3 were written whole: full redundancy */
    v.redundancy = fmt >= 3 ? (uint32_t)red : (uint32_t)m;
    if (r.p != r.end) {
        md_rd_fail(&r, "trailing bytes");
        goto corrupt;
    }
    if (v.version != key_version) {
        md_rd_fail(&r, "version differs from its key");
        goto corrupt;
    }
    v.state = (cks_vstate_t)state;
    v.nranks = (uint32_t)nranks;
    *v_p = v;
    return CKS_OK;

corrupt:
    cks_error("metadata: corrupt version record (job '%.*s' version %llu, %zu bytes): %s",
              (int)job_len, job, (unsigned long long)key_version, val->mv_size, r.what);
    return CKS_ERR_IO;
}

/* Decode an object record; the key is the tail of its LMDB key. */
static cks_status_t md_object_decode(const char *job, size_t job_len, uint64_t version,
                                     const uint8_t *key, size_t key_len,
                                     const MDB_val *val, cks_md_object_t *o_p)
{
    md_rbuf_t r = {val->mv_data, (const uint8_t *)val->mv_data + val->mv_size, NULL};
    cks_md_object_t o;
    uint64_t kind;

    memset(&o, 0, sizeof(o));
    if ((key_len == 0) || (key_len > CKS_KEY_MAX_LEN)) {
        md_rd_fail(&r, "key length out of range");
        goto corrupt;
    }
    uint64_t n = 0, fmt = 0;
    if ((md_rd_array(&r, &n) != 0) || (md_rd_u64(&r, UINT32_MAX, &fmt) != 0) ||
        !((fmt == 1 && n == 9) || (fmt == MD_OREC_FMT && n == MD_OREC_NFIELDS))) {
        md_rd_fail(&r, "unknown record format or field count");
        goto corrupt;
    }
    o.source_version = version;
    if ((md_rd_u64(&r, CKS_KIND_OTHER, &kind) != 0) || (md_rd_i32(&r, &o.layer) != 0) ||
        (md_rd_i32(&r, &o.expert) != 0) || (md_rd_i32(&r, &o.rank) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &o.size) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &o.crc64) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &o.arena_offset) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &o.arena_len) != 0) ||
        (fmt == MD_OREC_FMT && md_rd_u64(&r, UINT64_MAX, &o.source_version) != 0)) {
        goto corrupt;
    }
    if (r.p != r.end) {
        md_rd_fail(&r, "trailing bytes");
        goto corrupt;
    }
    memcpy(o.key, key, key_len);
    o.key[key_len] = '\0';
    o.key_len = (uint32_t)key_len;
    o.kind = (cks_kind_t)kind;
    *o_p = o;
    return CKS_OK;

corrupt:
    cks_error("metadata: corrupt object record (job '%.*s' version %llu key '%.*s', "
              "%zu bytes): %s",
              (int)job_len, job, (unsigned long long)version,
              (int)CKS_MIN(key_len, CKS_KEY_MAX_LEN), (const char *)key, val->mv_size,
              r.what);
    return CKS_ERR_IO;
}

/* Decode a versions-db entry at a key known to start with job + 0x00. */
static cks_status_t md_version_from_entry(const char *job, size_t job_len,
                                          const MDB_val *k, const MDB_val *val,
                                          cks_md_version_t *v_p)
{
    if (k->mv_size != job_len + 9) {
        cks_error("metadata: corrupt version key (job '%.*s', %zu bytes)", (int)job_len,
                  job, k->mv_size);
        return CKS_ERR_IO;
    }
    return md_version_decode(
        job, job_len, cks_get_be64((const uint8_t *)k->mv_data + job_len + 1), val, v_p);
}

/* The schema number: a msgpack integer 1 .. UINT32_MAX and nothing else;
 * 0, or -1 when the value is not one. */
static int md_schema_decode(const MDB_val *val, uint64_t *schema_p)
{
    md_rbuf_t r = {val->mv_data, (const uint8_t *)val->mv_data + val->mv_size, NULL};
    uint64_t schema;

    if ((md_rd_u64(&r, UINT32_MAX, &schema) != 0) || (r.p != r.end) || (schema == 0)) {
        return -1;
    }
    *schema_p = schema;
    return 0;
}

/* ---- environment -------------------------------------------------------- */

/* Create or check the schema number inside the opening write transaction. */
static cks_status_t md_schema_check(cks_md_h md, MDB_txn *txn, const char *dir)
{
    MDB_val k = {sizeof(MD_META_SCHEMA) - 1, (void *)MD_META_SCHEMA};
    MDB_val val;
    MDB_stat vst, ost;
    md_wbuf_t w = {.len = 0};
    msgpack_packer pk;
    uint64_t schema;
    int rc;

    rc = mdb_get(txn, md->dbi_meta, &k, &val);
    if (rc == MDB_NOTFOUND) {
        if (((rc = mdb_stat(txn, md->dbi_versions, &vst)) != 0) ||
            ((rc = mdb_stat(txn, md->dbi_objects, &ost)) != 0)) {
            return md_status_from_mdb(NULL, rc, "mdb_stat");
        }
        if ((vst.ms_entries != 0) || (ost.ms_entries != 0)) {
            cks_error("metadata: %s holds records but no schema number; refusing it",
                      dir);
            return CKS_ERR_IO;
        }
        msgpack_packer_init(&pk, &w, md_wbuf_write);
        if (msgpack_pack_uint32(&pk, CKS_MD_SCHEMA_VERSION) != 0) {
            cks_error("metadata: msgpack packing of the schema number failed");
            return CKS_ERR_INTERNAL;
        }
        val.mv_size = w.len;
        val.mv_data = w.buf;
        rc = mdb_put(txn, md->dbi_meta, &k, &val, 0);
        if (rc != 0) {
            return md_status_from_mdb(NULL, rc, "mdb_put(schema)");
        }
        cks_info("metadata: created schema %u in %s", CKS_MD_SCHEMA_VERSION, dir);
        return CKS_OK;
    }
    if (rc != 0) {
        return md_status_from_mdb(NULL, rc, "mdb_get(schema)");
    }

    if (md_schema_decode(&val, &schema) != 0) {
        cks_error("metadata: %s: corrupt schema number (%zu bytes)", dir, val.mv_size);
        return CKS_ERR_IO;
    }
    if (schema > CKS_MD_SCHEMA_VERSION) {
        cks_error("metadata: %s holds schema %llu, newer than this build's %u; "
                  "refusing to open it (upgrade ckstore or use another directory)",
                  dir, (unsigned long long)schema, CKS_MD_SCHEMA_VERSION);
        return CKS_ERR_UNSUPPORTED;
    }
    return CKS_OK;
}

static void md_files_remove(const char *dir)
{
    static const char *const names[] = {"data.mdb", "lock.mdb"};
    char path[4096];

    for (size_t i = 0; i < CKS_ARRAY_SIZE(names); i++) {
        if (snprintf(path, sizeof(path), "%s/%s", dir, names[i]) < (int)sizeof(path)) {
            (void)unlink(path);
        }
    }
}

cks_status_t cks_md_open(const char *dir, uint64_t map_size, cks_md_h *md_p)
{
    cks_status_t status;
    MDB_txn *txn;
    cks_md_h md;
    int created = 0;
    int dead = 0;
    int rc;

    if ((dir == NULL) || (dir[0] == '\0') || (md_p == NULL) || (map_size > SIZE_MAX)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (map_size == 0) {
        map_size = CKS_MD_MAP_SIZE_DEFAULT;
    }

    md = calloc(1, sizeof(*md));
    if (md == NULL) {
        cks_error("metadata: out of memory opening %s", dir);
        return CKS_ERR_NO_MEMORY;
    }

    if (mkdir(dir, 0700) == 0) {
        created = 1;
    } else if (errno != EEXIST) {
        cks_error("metadata: mkdir %s: %s", dir, strerror(errno));
        status = CKS_ERR_IO;
        goto free_md;
    }

    rc = mdb_env_create(&md->env);
    if (rc != 0) {
        status = md_status_from_mdb(NULL, rc, "mdb_env_create");
        goto remove_dir;
    }
    if (((rc = mdb_env_set_maxdbs(md->env, MD_MAX_DBS)) != 0) ||
        ((rc = mdb_env_set_maxreaders(md->env, MD_MAX_READERS)) != 0) ||
        ((rc = mdb_env_set_mapsize(md->env, (size_t)map_size)) != 0)) {
        status = md_status_from_mdb(NULL, rc, "mdb_env_set");
        goto close_env;
    }
    /* NOSYNC: see DESIGN above. NOTLS: read txns move between threads. */
    rc = mdb_env_open(md->env, dir, MDB_NOTLS | MDB_NOSYNC, 0600);
    if (rc != 0) {
        cks_error("metadata: opening the environment in %s failed", dir);
        status = md_status_from_mdb(NULL, rc, "mdb_env_open");
        goto close_env;
    }
    rc = mdb_reader_check(md->env, &dead);
    if (rc != 0) {
        status = md_status_from_mdb(NULL, rc, "mdb_reader_check");
        goto close_env;
    }
    if (dead > 0) {
        cks_info("metadata: %s: cleared %d reader slots of dead processes", dir, dead);
    }

    rc = mdb_txn_begin(md->env, NULL, 0, &txn);
    if (rc != 0) {
        status = md_status_from_mdb(NULL, rc, "mdb_txn_begin");
        goto close_env;
    }
    if (((rc = mdb_dbi_open(txn, MD_DB_VERSIONS, MDB_CREATE, &md->dbi_versions)) != 0) ||
        ((rc = mdb_dbi_open(txn, MD_DB_OBJECTS, MDB_CREATE, &md->dbi_objects)) != 0) ||
        ((rc = mdb_dbi_open(txn, MD_DB_META, MDB_CREATE, &md->dbi_meta)) != 0) ||
        ((rc = mdb_dbi_open(txn, MD_DB_CHUNKS, MDB_CREATE, &md->dbi_chunks)) != 0) ||
        ((rc = mdb_dbi_open(txn, MD_DB_DROPS, MDB_CREATE, &md->dbi_drops)) != 0)) {
        status = md_status_from_mdb(NULL, rc, "mdb_dbi_open");
        goto abort_txn;
    }
    status = md_schema_check(md, txn, dir);
    if (status != CKS_OK) {
        goto abort_txn;
    }
    rc = mdb_txn_commit(txn); /* frees txn whatever the result */
    if (rc != 0) {
        status = md_status_from_mdb(NULL, rc, "mdb_txn_commit(open)");
        goto close_env;
    }

    cks_debug("metadata: opened %s (map %llu bytes)", dir, (unsigned long long)map_size);
    *md_p = md;
    return CKS_OK;

abort_txn:
    mdb_txn_abort(txn);
close_env:
    mdb_env_close(md->env);
remove_dir:
    if (created) {
        md_files_remove(dir);
        (void)rmdir(dir);
    }
free_md:
    free(md);
    return status;
}

void cks_md_close(cks_md_h md)
{
    if (md == NULL) {
        return;
    }
    mdb_env_close(md->env);
    free(md);
}

cks_status_t cks_md_sync(cks_md_h md)
{
    int rc;

    if (md == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    rc = mdb_env_sync(md->env, 1);
    if (rc != 0) {
        return md_status_from_mdb(NULL, rc, "mdb_env_sync");
    }
    return CKS_OK;
}

cks_status_t cks_md_stat(cks_md_h md, uint64_t *map_size_p, uint64_t *used_bytes_p)
{
    MDB_envinfo info;
    MDB_stat st;
    int rc;

    if ((md == NULL) || (map_size_p == NULL) || (used_bytes_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (((rc = mdb_env_info(md->env, &info)) != 0) ||
        ((rc = mdb_env_stat(md->env, &st)) != 0)) {
        return md_status_from_mdb(NULL, rc, "mdb_env_info");
    }
    *map_size_p = info.me_mapsize;
    *used_bytes_p = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    return CKS_OK;
}

/* ---- transactions ------------------------------------------------------- */

cks_status_t cks_md_txn_begin(cks_md_h md, int write, cks_md_txn_h *txn_p)
{
    cks_status_t status;
    cks_md_txn_h txn;
    int rc;

    if ((md == NULL) || (txn_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    txn = calloc(1, sizeof(*txn));
    if (txn == NULL) {
        cks_error("metadata: out of memory beginning a transaction");
        return CKS_ERR_NO_MEMORY;
    }
    txn->md = md;
    txn->write = !!write;
    rc = mdb_txn_begin(md->env, NULL, write ? 0 : MDB_RDONLY, &txn->txn);
    if (rc != 0) {
        status = md_status_from_mdb(NULL, rc, "mdb_txn_begin");
        goto free_txn;
    }
    *txn_p = txn;
    return CKS_OK;

free_txn:
    free(txn);
    return status;
}

cks_status_t cks_md_txn_begin_nested(cks_md_txn_h parent, cks_md_txn_h *txn_p)
{
    cks_status_t status;
    cks_md_txn_h txn;
    int rc;

    if ((parent == NULL) || (txn_p == NULL) || !parent->write) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (parent->poisoned) {
        return CKS_ERR_BAD_STATE;
    }
    txn = calloc(1, sizeof(*txn));
    if (txn == NULL) {
        cks_error("metadata: out of memory beginning a nested transaction");
        return CKS_ERR_NO_MEMORY;
    }
    txn->md     = parent->md;
    txn->write  = 1;
    txn->parent = parent;
    rc = mdb_txn_begin(parent->md->env, parent->txn, 0, &txn->txn);
    if (rc != 0) {
        status = md_status_from_mdb(NULL, rc, "mdb_txn_begin (nested)");
        free(txn);
        return status;
    }
    *txn_p = txn;
    return CKS_OK;
}

cks_status_t cks_md_txn_commit(cks_md_txn_h txn)
{
    cks_status_t status = CKS_OK;
    int rc;

    if (txn == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (txn->poisoned) {
        mdb_txn_abort(txn->txn);
        status = CKS_ERR_BAD_STATE;
    } else {
        rc = mdb_txn_commit(txn->txn); /* frees the LMDB txn whatever the result */
        if (rc != 0) {
            /* a nested commit that failed leaves its parent unusable */
            status = md_status_from_mdb(txn->parent, rc, "mdb_txn_commit");
        }
    }
    free(txn);
    return status;
}

void cks_md_txn_abort(cks_md_txn_h txn)
{
    if (txn == NULL) {
        return;
    }
    mdb_txn_abort(txn->txn);
    free(txn);
}

/* ---- versions ----------------------------------------------------------- */

cks_status_t cks_md_version_put(cks_md_txn_h txn, const char *job, size_t job_len,
                                const cks_md_version_t *v, int overwrite)
{
    uint8_t kbuf[MD_VKEY_MAX];
    cks_status_t status;
    MDB_val k, val;
    md_wbuf_t w;
    int rc;

    status = md_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if ((v == NULL) || (v->version == CKS_MD_NO_PARENT) ||
        ((unsigned)v->state > CKS_VSTATE_ABORTED)) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = md_version_encode(v, &w);
    if (status != CKS_OK) {
        return status;
    }
    k.mv_size = cks_vkey(kbuf, job, job_len, v->version);
    k.mv_data = kbuf;
    val.mv_size = w.len;
    val.mv_data = w.buf;
    rc = mdb_put(txn->txn, txn->md->dbi_versions, &k, &val,
                 overwrite ? 0 : MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST) {
        return CKS_ERR_VERSION_EXISTS;
    }
    if (rc != 0) {
        return md_status_from_mdb(txn, rc, "mdb_put(version)");
    }
    return CKS_OK;
}

cks_status_t cks_md_version_get(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version, cks_md_version_t *v_p)
{
    uint8_t kbuf[MD_VKEY_MAX];
    cks_status_t status;
    MDB_val k, val;
    int rc;

    status = md_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if (v_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    k.mv_size = cks_vkey(kbuf, job, job_len, version);
    k.mv_data = kbuf;
    rc = mdb_get(txn->txn, txn->md->dbi_versions, &k, &val);
    if (rc == MDB_NOTFOUND) {
        return CKS_ERR_NO_SUCH_VERSION;
    }
    if (rc != 0) {
        return md_status_from_mdb(txn, rc, "mdb_get(version)");
    }
    return md_version_decode(job, job_len, version, &val, v_p);
}

cks_status_t cks_md_version_del(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version)
{
    uint8_t kbuf[MD_VKEY_MAX];
    cks_status_t status;
    MDB_cursor *cur;
    MDB_val k, val, ok, ov;
    size_t plen;
    int found, rc;

    status = md_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    plen = cks_vkey(kbuf, job, job_len, version);
    k.mv_size = plen;
    k.mv_data = kbuf;
    rc = mdb_get(txn->txn, txn->md->dbi_versions, &k, &val);
    if (rc == MDB_NOTFOUND) {
        return CKS_ERR_NO_SUCH_VERSION;
    }
    if (rc != 0) {
        return md_status_from_mdb(txn, rc, "mdb_get(version)");
    }

    /* Objects first: every key starting with job + 0x00 + be64(version).
     * Seek again after each delete rather than rely on where a cursor lands
     * after mdb_cursor_del. */
    status = md_cursor_open(txn, txn->md->dbi_objects, &cur);
    if (status != CKS_OK) {
        return status;
    }
    for (;;) {
        ok.mv_size = plen;
        ok.mv_data = kbuf;
        status = md_cursor_get(txn, cur, &ok, &ov, MDB_SET_RANGE, &found);
        if ((status != CKS_OK) || !found || !md_key_has_prefix(&ok, kbuf, plen)) {
            break;
        }
        rc = mdb_cursor_del(cur, 0);
        if (rc != 0) {
            status = md_status_from_mdb(txn, rc, "mdb_cursor_del(object)");
            break;
        }
    }
    mdb_cursor_close(cur);
    if (status != CKS_OK) {
        return status;
    }

    rc = mdb_del(txn->txn, txn->md->dbi_versions, &k, NULL);
    if (rc != 0) { /* found above in this very txn: NOTFOUND is a fault too */
        return md_status_from_mdb(txn, rc, "mdb_del(version)");
    }
    return CKS_OK;
}

cks_status_t cks_md_version_list(cks_md_txn_h txn, const char *job, size_t job_len,
                                 const uint64_t *after, cks_md_version_t *out, size_t max,
                                 size_t *count_p, int *more_p)
{
    uint8_t kbuf[MD_VKEY_MAX];
    cks_status_t status;
    MDB_cursor *cur;
    MDB_val k, val;
    size_t n = 0;
    int more = 0;
    int found = 0;

    status = md_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if (((out == NULL) && (max > 0)) || (count_p == NULL) || (more_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if ((after != NULL) && (*after >= CKS_MD_NO_PARENT - 1)) {
        *count_p = 0; /* nothing can follow the largest version */
        *more_p = 0;
        return CKS_OK;
    }

    status = md_cursor_open(txn, txn->md->dbi_versions, &cur);
    if (status != CKS_OK) {
        return status;
    }
    k.mv_size = cks_vkey(kbuf, job, job_len, (after == NULL) ? 0 : *after + 1);
    k.mv_data = kbuf;
    status = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
    while ((status == CKS_OK) && found && md_key_in_job(&k, job, job_len)) {
        if (n == max) {
            more = 1;
            break;
        }
        status = md_version_from_entry(job, job_len, &k, &val, &out[n]);
        if (status != CKS_OK) {
            break;
        }
        n++;
        status = md_cursor_get(txn, cur, &k, &val, MDB_NEXT, &found);
    }
    mdb_cursor_close(cur);
    if (status != CKS_OK) {
        return status;
    }
    *count_p = n;
    *more_p = more;
    return CKS_OK;
}

/* ---- drops (tombstones) ------------------------------------------------------------ */

/* Remove drop records older than CKS_MD_DROP_KEEP_NS before now_ns. */
static cks_status_t md_drop_prune(cks_md_txn_h txn, uint64_t now_ns)
{
    MDB_cursor *cur;
    MDB_val k, val;
    int found;
    cks_status_t status = md_cursor_open(txn, txn->md->dbi_drops, &cur);
    if (status != CKS_OK) {
        return status;
    }
    status = md_cursor_get(txn, cur, &k, &val, MDB_FIRST, &found);
    while (status == CKS_OK && found) {
        if (val.mv_size == MD_DROP_LEN && k.mv_size <= MD_VKEY_MAX &&
            cks_get_be64((const uint8_t *)val.mv_data + 8) + CKS_MD_DROP_KEEP_NS < now_ns) {
            uint8_t kbuf[MD_VKEY_MAX];
            size_t klen = k.mv_size;
            memcpy(kbuf, k.mv_data, klen);
            int rc = mdb_cursor_del(cur, 0);
            if (rc != 0) {
                status = md_status_from_mdb(txn, rc, "mdb_cursor_del(drop)");
                break;
            }
            /* seek again: the first record after the one deleted */
            k.mv_size = klen;
            k.mv_data = kbuf;
            status    = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
            continue;
        }
        status = md_cursor_get(txn, cur, &k, &val, MDB_NEXT, &found);
    }
    mdb_cursor_close(cur);
    return status;
}

cks_status_t cks_md_drop_put(cks_md_txn_h txn, const char *job, size_t job_len,
                             uint64_t version, uint64_t created_ns, uint64_t dropped_ns)
{
    uint8_t kbuf[MD_VKEY_MAX], vbuf[MD_DROP_LEN];
    MDB_val k, val;
    cks_status_t status = md_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    status = md_drop_prune(txn, dropped_ns);
    if (status != CKS_OK) {
        return status;
    }
    cks_put_be64(vbuf, created_ns);
    cks_put_be64(vbuf + 8, dropped_ns);
    k.mv_size   = cks_vkey(kbuf, job, job_len, version);
    k.mv_data   = kbuf;
    val.mv_size = sizeof(vbuf);
    val.mv_data = vbuf;
    int rc      = mdb_put(txn->txn, txn->md->dbi_drops, &k, &val, 0);
    return rc == 0 ? CKS_OK : md_status_from_mdb(txn, rc, "mdb_put(drop)");
}

cks_status_t cks_md_drop_get(cks_md_txn_h txn, const char *job, size_t job_len,
                             uint64_t version, uint64_t *created_ns_p)
{
    uint8_t kbuf[MD_VKEY_MAX];
    MDB_val k, val;
    cks_status_t status = md_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if (created_ns_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    k.mv_size = cks_vkey(kbuf, job, job_len, version);
    k.mv_data = kbuf;
    int rc    = mdb_get(txn->txn, txn->md->dbi_drops, &k, &val);
    if (rc == MDB_NOTFOUND) {
        return CKS_ERR_NO_SUCH_VERSION;
    }
    if (rc != 0) {
        return md_status_from_mdb(txn, rc, "mdb_get(drop)");
    }
    if (val.mv_size != MD_DROP_LEN) {
        cks_error("metadata: drop record of version %llu of '%.*s': %zu bytes",
                  (unsigned long long)version, (int)job_len, job, val.mv_size);
        return CKS_ERR_IO;
    }
    *created_ns_p = cks_get_be64(val.mv_data);
    return CKS_OK;
}

cks_status_t cks_md_drop_list(cks_md_txn_h txn, const char *job, size_t job_len,
                              const uint64_t *after, uint64_t *versions, uint64_t *created,
                              size_t max, size_t *count_p, int *more_p)
{
    uint8_t kbuf[MD_VKEY_MAX];
    MDB_cursor *cur;
    MDB_val k, val;
    size_t n = 0;
    int more = 0, found = 0;
    cks_status_t status = md_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if ((max > 0 && (versions == NULL || created == NULL)) || count_p == NULL ||
        more_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    *count_p = 0;
    *more_p  = 0;
    if (after != NULL && *after >= CKS_MD_NO_PARENT - 1) {
        return CKS_OK;
    }
    status = md_cursor_open(txn, txn->md->dbi_drops, &cur);
    if (status != CKS_OK) {
        return status;
    }
    k.mv_size = cks_vkey(kbuf, job, job_len, after == NULL ? 0 : *after + 1);
    k.mv_data = kbuf;
    status    = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
    while (status == CKS_OK && found && md_key_in_job(&k, job, job_len)) {
        if (k.mv_size != job_len + 9 || val.mv_size != MD_DROP_LEN) {
            status = CKS_ERR_IO; /* not a record this module wrote */
            break;
        }
        if (n == max) {
            more = 1;
            break;
        }
        versions[n] = cks_get_be64((const uint8_t *)k.mv_data + job_len + 1);
        created[n]  = cks_get_be64(val.mv_data);
        n++;
        status = md_cursor_get(txn, cur, &k, &val, MDB_NEXT, &found);
    }
    mdb_cursor_close(cur);
    if (status == CKS_OK) {
        *count_p = n;
        *more_p  = more;
    }
    return status;
}

static int md_vstate_restorable(cks_vstate_t state)
{
    return (state == CKS_VSTATE_SEALED) || (state == CKS_VSTATE_PROTECTED) ||
           (state == CKS_VSTATE_DEGRADED);
}

cks_status_t cks_md_version_latest(cks_md_txn_h txn, const char *job, size_t job_len,
                                   int restorable_only, cks_md_version_t *v_p)
{
    uint8_t kbuf[MD_VKEY_MAX];
    cks_status_t status;
    cks_md_version_t v;
    MDB_cursor *cur;
    MDB_val k, val;
    int any = 0;
    int found = 0;

    status = md_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if (v_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = md_cursor_open(txn, txn->md->dbi_versions, &cur);
    if (status != CKS_OK) {
        return status;
    }

    /* job + 0x01 sorts after every key of job: seek there, step back. */
    memcpy(kbuf, job, job_len);
    kbuf[job_len] = 1;
    k.mv_size = job_len + 1;
    k.mv_data = kbuf;
    status = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
    if (status != CKS_OK) {
        goto close_cursor;
    }
    status = md_cursor_get(txn, cur, &k, &val, found ? MDB_PREV : MDB_LAST, &found);
    while ((status == CKS_OK) && found && md_key_in_job(&k, job, job_len)) {
        any = 1;
        status = md_version_from_entry(job, job_len, &k, &val, &v);
        if (status != CKS_OK) {
            goto close_cursor;
        }
        if (!restorable_only || md_vstate_restorable(v.state)) {
            mdb_cursor_close(cur);
            *v_p = v;
            return CKS_OK;
        }
        status = md_cursor_get(txn, cur, &k, &val, MDB_PREV, &found);
    }
    if (status == CKS_OK) {
        status = any ? CKS_ERR_NO_SUCH_VERSION : CKS_ERR_NO_SUCH_JOB;
    }
close_cursor:
    mdb_cursor_close(cur);
    return status;
}

cks_status_t cks_md_version_foreach(cks_md_txn_h txn, cks_md_version_cb_t cb, void *arg)
{
    char job[CKS_JOB_MAX_LEN + 1];
    cks_status_t status;
    cks_md_version_t v;
    MDB_cursor *cur;
    MDB_val k, val;
    size_t jl;
    int found = 0;

    status = md_txn_check(txn, 0);
    if (status != CKS_OK) {
        return status;
    }
    if (cb == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = md_cursor_open(txn, txn->md->dbi_versions, &cur);
    if (status != CKS_OK) {
        return status;
    }
    status = md_cursor_get(txn, cur, &k, &val, MDB_FIRST, &found);
    while ((status == CKS_OK) && found) {
        jl = md_key_job_len(&k);
        if (jl == 0) {
            cks_error("metadata: corrupt version key (%zu bytes, no job)", k.mv_size);
            status = CKS_ERR_IO;
            break;
        }
        memcpy(job, k.mv_data, jl);
        job[jl] = '\0';
        status = md_version_from_entry(job, jl, &k, &val, &v);
        if (status != CKS_OK) {
            break;
        }
        status = cb(job, jl, &v, arg);
        if (status != CKS_OK) {
            break;
        }
        status = md_cursor_get(txn, cur, &k, &val, MDB_NEXT, &found);
    }
    mdb_cursor_close(cur);
    return status;
}

/* ---- jobs --------------------------------------------------------------- */

cks_status_t cks_md_job_exists(cks_md_txn_h txn, const char *job, size_t job_len)
{
    uint8_t kbuf[MD_VKEY_MAX];
    cks_status_t status;
    MDB_cursor *cur;
    MDB_val k, val;
    int found = 0;

    status = md_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    status = md_cursor_open(txn, txn->md->dbi_versions, &cur);
    if (status != CKS_OK) {
        return status;
    }
    memcpy(kbuf, job, job_len);
    kbuf[job_len] = 0;
    k.mv_size = job_len + 1;
    k.mv_data = kbuf;
    status = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
    if ((status == CKS_OK) && !(found && md_key_in_job(&k, job, job_len))) {
        status = CKS_ERR_NO_SUCH_JOB;
    }
    mdb_cursor_close(cur);
    return status;
}

cks_status_t cks_md_job_list(cks_md_txn_h txn, const char *after, size_t after_len,
                             char (*names)[CKS_JOB_MAX_LEN + 1], size_t max,
                             size_t *count_p, int *more_p)
{
    uint8_t kbuf[CKS_JOB_MAX_LEN + 1];
    cks_status_t status;
    MDB_cursor *cur;
    MDB_val k, val;
    size_t n = 0;
    size_t jl;
    int more = 0;
    int found = 0;

    status = md_txn_check(txn, 0);
    if (status != CKS_OK) {
        return status;
    }
    if (after != NULL) {
        status = md_job_check(after, after_len);
        if (status != CKS_OK) {
            return status;
        }
    }
    if (((names == NULL) && (max > 0)) || (count_p == NULL) || (more_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = md_cursor_open(txn, txn->md->dbi_versions, &cur);
    if (status != CKS_OK) {
        return status;
    }
    if (after == NULL) {
        status = md_cursor_get(txn, cur, &k, &val, MDB_FIRST, &found);
    } else {
        memcpy(kbuf, after, after_len);
        kbuf[after_len] = 1; /* past every key of `after` */
        k.mv_size = after_len + 1;
        k.mv_data = kbuf;
        status = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
    }
    while ((status == CKS_OK) && found) {
        jl = md_key_job_len(&k);
        if ((jl == 0) || (k.mv_size != jl + 9)) {
            cks_error("metadata: corrupt version key (%zu bytes)", k.mv_size);
            status = CKS_ERR_IO;
            break;
        }
        if (n == max) {
            more = 1;
            break;
        }
        memcpy(names[n], k.mv_data, jl);
        names[n][jl] = '\0';
        n++;
        /* skip the rest of this job's versions in one seek */
        memcpy(kbuf, k.mv_data, jl);
        kbuf[jl] = 1;
        k.mv_size = jl + 1;
        k.mv_data = kbuf;
        status = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
    }
    mdb_cursor_close(cur);
    if (status != CKS_OK) {
        return status;
    }
    *count_p = n;
    *more_p = more;
    return CKS_OK;
}

/* ---- objects ------------------------------------------------------------ */

/* job + 0x00 + be64(version) + key into buf; returns its length. */
static size_t md_okey(uint8_t *buf, const char *job, size_t job_len, uint64_t version,
                      const char *key, size_t key_len)
{
    size_t plen = cks_vkey(buf, job, job_len, version);

    memcpy(buf + plen, key, key_len);
    return plen + key_len;
}

cks_status_t cks_md_object_put(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const cks_md_object_t *o)
{
    uint8_t kbuf[MD_OKEY_MAX];
    cks_status_t status;
    MDB_val k, val;
    md_wbuf_t w;
    int rc;

    status = md_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if (o == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = md_key_check(o->key, o->key_len);
    if (status != CKS_OK) {
        return status;
    }
    if ((unsigned)o->kind > CKS_KIND_OTHER) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = md_object_encode(o, &w);
    if (status != CKS_OK) {
        return status;
    }
    k.mv_size = md_okey(kbuf, job, job_len, version, o->key, o->key_len);
    k.mv_data = kbuf;
    val.mv_size = w.len;
    val.mv_data = w.buf;
    rc = mdb_put(txn->txn, txn->md->dbi_objects, &k, &val, MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST) {
        return CKS_ERR_DUPLICATE_KEY;
    }
    if (rc != 0) {
        return md_status_from_mdb(txn, rc, "mdb_put(object)");
    }
    return CKS_OK;
}

cks_status_t cks_md_object_get(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const char *key, size_t key_len,
                               cks_md_object_t *o_p)
{
    uint8_t kbuf[MD_OKEY_MAX];
    cks_status_t status;
    MDB_val k, val;
    int rc;

    status = md_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    status = md_key_check(key, key_len);
    if (status != CKS_OK) {
        return status;
    }
    if (o_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    k.mv_size = md_okey(kbuf, job, job_len, version, key, key_len);
    k.mv_data = kbuf;
    rc = mdb_get(txn->txn, txn->md->dbi_objects, &k, &val);
    if (rc == MDB_NOTFOUND) {
        return CKS_ERR_NO_SUCH_KEY;
    }
    if (rc != 0) {
        return md_status_from_mdb(txn, rc, "mdb_get(object)");
    }
    return md_object_decode(job, job_len, version, (const uint8_t *)key, key_len, &val,
                            o_p);
}

cks_status_t cks_md_object_del(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const char *key, size_t key_len)
{
    uint8_t kbuf[MD_OKEY_MAX];
    cks_status_t status;
    MDB_val k;
    int rc;

    status = md_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    status = md_key_check(key, key_len);
    if (status != CKS_OK) {
        return status;
    }
    k.mv_size = md_okey(kbuf, job, job_len, version, key, key_len);
    k.mv_data = kbuf;
    rc = mdb_del(txn->txn, txn->md->dbi_objects, &k, NULL);
    if (rc == MDB_NOTFOUND) {
        return CKS_ERR_NO_SUCH_KEY;
    }
    if (rc != 0) {
        return md_status_from_mdb(txn, rc, "mdb_del(object)");
    }
    return CKS_OK;
}

cks_status_t cks_md_object_list(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version, const char *after_key, size_t after_len,
                                cks_md_object_t *out, size_t max, size_t *count_p,
                                int *more_p)
{
    uint8_t kbuf[MD_OKEY_MAX];
    cks_status_t status;
    MDB_cursor *cur;
    MDB_val k, val;
    size_t plen;
    size_t n = 0;
    int more = 0;
    int found = 0;

    status = md_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if (after_key != NULL) {
        status = md_key_check(after_key, after_len);
        if (status != CKS_OK) {
            return status;
        }
    }
    if (((out == NULL) && (max > 0)) || (count_p == NULL) || (more_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = md_cursor_open(txn, txn->md->dbi_objects, &cur);
    if (status != CKS_OK) {
        return status;
    }

    plen = cks_vkey(kbuf, job, job_len, version);
    k.mv_size = plen;
    if (after_key != NULL) { /* prefix + after_key + 0x00: its immediate successor */
        memcpy(kbuf + plen, after_key, after_len);
        kbuf[plen + after_len] = 0;
        k.mv_size = plen + after_len + 1;
    }
    k.mv_data = kbuf;
    status = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
    while ((status == CKS_OK) && found && md_key_has_prefix(&k, kbuf, plen)) {
        if (n == max) {
            more = 1;
            break;
        }
        status =
            md_object_decode(job, job_len, version, (const uint8_t *)k.mv_data + plen,
                             k.mv_size - plen, &val, &out[n]);
        if (status != CKS_OK) {
            break;
        }
        n++;
        status = md_cursor_get(txn, cur, &k, &val, MDB_NEXT, &found);
    }
    mdb_cursor_close(cur);
    if (status != CKS_OK) {
        return status;
    }
    *count_p = n;
    *more_p = more;
    return CKS_OK;
}

cks_status_t cks_md_object_foreach(cks_md_txn_h txn, cks_md_object_cb_t cb, void *arg)
{
    char job[CKS_JOB_MAX_LEN + 1];
    cks_status_t status;
    cks_md_object_t o;
    MDB_cursor *cur;
    MDB_val k, val;
    uint64_t version;
    size_t jl;
    int found = 0;

    status = md_txn_check(txn, 0);
    if (status != CKS_OK) {
        return status;
    }
    if (cb == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = md_cursor_open(txn, txn->md->dbi_objects, &cur);
    if (status != CKS_OK) {
        return status;
    }
    status = md_cursor_get(txn, cur, &k, &val, MDB_FIRST, &found);
    while ((status == CKS_OK) && found) {
        jl = md_key_job_len(&k);
        if ((jl == 0) || (k.mv_size <= jl + 9)) {
            cks_error("metadata: corrupt object key (%zu bytes)", k.mv_size);
            status = CKS_ERR_IO;
            break;
        }
        memcpy(job, k.mv_data, jl);
        job[jl] = '\0';
        version = cks_get_be64((const uint8_t *)k.mv_data + jl + 1);
        status = md_object_decode(job, jl, version, (const uint8_t *)k.mv_data + jl + 9,
                                  k.mv_size - jl - 9, &val, &o);
        if (status != CKS_OK) {
            break;
        }
        status = cb(job, jl, version, &o, arg);
        if (status != CKS_OK) {
            break;
        }
        status = md_cursor_get(txn, cur, &k, &val, MDB_NEXT, &found);
    }
    mdb_cursor_close(cur);
    return status;
}

/* ---- chunks ------------------------------------------------------------- */

static size_t md_ckey(uint8_t *buf, const char *job, size_t job_len, uint64_t version,
                      const char *key, size_t key_len, uint64_t stripe, uint32_t idx)
{
    size_t n = cks_vkey(buf, job, job_len, version);
    memcpy(buf + n, key, key_len);
    n += key_len;
    buf[n++] = 0;
    cks_put_be64(buf + n, stripe);
    n += 8;
    buf[n++] = (uint8_t)idx;
    return n;
}

/* The value of a chunk record; 0, or -1 when it does not fit (it always does). */
static int md_chunk_encode(const cks_md_chunk_t *c, md_wbuf_t *w)
{
    msgpack_packer pk;
    int rc = 0;

    w->len = 0;
    msgpack_packer_init(&pk, w, md_wbuf_write);
    rc |= msgpack_pack_array(&pk, MD_CREC_NFIELDS);
    rc |= msgpack_pack_uint32(&pk, MD_CREC_FMT);
    rc |= msgpack_pack_uint64(&pk, c->len);
    rc |= msgpack_pack_uint64(&pk, c->crc64);
    rc |= msgpack_pack_uint64(&pk, c->arena_offset);
    rc |= msgpack_pack_uint64(&pk, c->arena_len);
    return rc != 0 ? -1 : 0;
}

static cks_status_t md_chunk_decode(const MDB_val *k, const MDB_val *val, cks_md_chunk_t *c_p)
{
    md_rbuf_t r = {val->mv_data, (const uint8_t *)val->mv_data + val->mv_size, NULL};
    cks_md_chunk_t c;

    memset(&c, 0, sizeof(c));
    if (k->mv_size < 10) {
        md_rd_fail(&r, "key too short");
        goto corrupt;
    }
    c.stripe = cks_get_be64((const uint8_t *)k->mv_data + k->mv_size - 9);
    c.idx    = ((const uint8_t *)k->mv_data)[k->mv_size - 1];
    if ((md_rd_header(&r, MD_CREC_FMT, MD_CREC_NFIELDS) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &c.len) != 0) || (md_rd_u64(&r, UINT64_MAX, &c.crc64) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &c.arena_offset) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &c.arena_len) != 0)) {
        goto corrupt;
    }
    if (r.p != r.end) {
        md_rd_fail(&r, "trailing bytes");
        goto corrupt;
    }
    *c_p = c;
    return CKS_OK;

corrupt:
    cks_error("metadata: corrupt chunk record (%zu bytes): %s", val->mv_size, r.what);
    return CKS_ERR_IO;
}

cks_status_t cks_md_chunk_put(cks_md_txn_h txn, const char *job, size_t job_len,
                              uint64_t version, const char *key, size_t key_len,
                              const cks_md_chunk_t *c)
{
    uint8_t kbuf[MD_CKEY_MAX];
    md_wbuf_t w = {.len = 0};
    MDB_val k, val;
    cks_status_t status;
    int rc;

    status = md_txn_job_check(txn, 1, job, job_len);
    if (status == CKS_OK) {
        status = md_key_check(key, key_len);
    }
    if (status != CKS_OK) {
        return status;
    }
    if (c == NULL || c->idx > 255) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (md_chunk_encode(c, &w) != 0) {
        return CKS_ERR_INTERNAL;
    }
    k.mv_size   = md_ckey(kbuf, job, job_len, version, key, key_len, c->stripe, c->idx);
    k.mv_data   = kbuf;
    val.mv_size = w.len;
    val.mv_data = w.buf;
    rc          = mdb_put(txn->txn, txn->md->dbi_chunks, &k, &val, MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST) {
        return CKS_ERR_DUPLICATE_KEY;
    }
    return rc == 0 ? CKS_OK : md_status_from_mdb(txn, rc, "mdb_put(chunk)");
}

cks_status_t cks_md_chunk_get(cks_md_txn_h txn, const char *job, size_t job_len,
                              uint64_t version, const char *key, size_t key_len,
                              uint64_t stripe, uint32_t idx, cks_md_chunk_t *c_p)
{
    uint8_t kbuf[MD_CKEY_MAX];
    MDB_val k, val;
    cks_status_t status;
    int rc;

    status = md_txn_job_check(txn, 0, job, job_len);
    if (status == CKS_OK) {
        status = md_key_check(key, key_len);
    }
    if (status != CKS_OK) {
        return status;
    }
    if (idx > 255) {
        return CKS_ERR_NO_SUCH_KEY;
    }
    k.mv_size = md_ckey(kbuf, job, job_len, version, key, key_len, stripe, idx);
    k.mv_data = kbuf;
    rc        = mdb_get(txn->txn, txn->md->dbi_chunks, &k, &val);
    if (rc == MDB_NOTFOUND) {
        return CKS_ERR_NO_SUCH_KEY;
    }
    if (rc != 0) {
        return md_status_from_mdb(txn, rc, "mdb_get(chunk)");
    }
    return md_chunk_decode(&k, &val, c_p);
}

cks_status_t cks_md_chunk_del_version(cks_md_txn_h txn, const char *job, size_t job_len,
                                      uint64_t version, cks_md_chunk_cb_t cb, void *arg)
{
    uint8_t kbuf[MD_VKEY_MAX];
    cks_status_t status;
    MDB_cursor *cur;
    MDB_val k, val;
    size_t plen;
    int found, rc;

    status = md_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    plen   = cks_vkey(kbuf, job, job_len, version);
    status = md_cursor_open(txn, txn->md->dbi_chunks, &cur);
    if (status != CKS_OK) {
        return status;
    }
    for (;;) {
        k.mv_size = plen;
        k.mv_data = kbuf;
        status    = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
        if ((status != CKS_OK) || !found || !md_key_has_prefix(&k, kbuf, plen)) {
            break;
        }
        if (cb != NULL) {
            cks_md_chunk_t c;
            status = md_chunk_decode(&k, &val, &c);
            if (status == CKS_OK) {
                status = cb(&c, arg);
            }
            if (status != CKS_OK && status != CKS_ERR_IO) {
                break; /* a corrupt record is deleted all the same */
            }
        }
        rc = mdb_cursor_del(cur, 0);
        if (rc != 0) {
            status = md_status_from_mdb(txn, rc, "mdb_cursor_del(chunk)");
            break;
        }
        status = CKS_OK;
    }
    mdb_cursor_close(cur);
    return status;
}

cks_status_t cks_md_chunk_foreach(cks_md_txn_h txn, cks_md_chunk_each_cb_t cb, void *arg)
{
    cks_status_t status = md_txn_check(txn, 0);
    MDB_cursor *cur;
    MDB_val k, val;
    int found;

    if (status != CKS_OK || cb == NULL) {
        return status != CKS_OK ? status : CKS_ERR_INVALID_PARAM;
    }
    status = md_cursor_open(txn, txn->md->dbi_chunks, &cur);
    if (status != CKS_OK) {
        return status;
    }
    status = md_cursor_get(txn, cur, &k, &val, MDB_FIRST, &found);
    while (status == CKS_OK && found) {
        const uint8_t *p = k.mv_data;
        size_t jl        = md_key_job_len(&k);
        cks_md_chunk_t c;
        /* job 0x00 be64(version) key 0x00 be64(stripe) u8(idx) */
        if (jl == 0 || k.mv_size < jl + 9 + 1 + 1 + 9) {
            cks_error("metadata: malformed chunk key (%zu bytes)", k.mv_size);
            status = CKS_ERR_IO;
            break;
        }
        size_t klen = k.mv_size - (jl + 9) - 10;
        status      = md_chunk_decode(&k, &val, &c);
        if (status == CKS_OK) {
            char job[CKS_JOB_MAX_LEN + 1];
            memcpy(job, p, jl);
            job[jl] = '\0';
            status  = cb(job, jl, cks_get_be64(p + jl + 1), (const char *)p + jl + 9, klen, &c,
                         arg);
        }
        if (status == CKS_OK) {
            status = md_cursor_get(txn, cur, &k, &val, MDB_NEXT, &found);
        }
    }
    mdb_cursor_close(cur);
    return status;
}

cks_status_t cks_md_chunk_gc(cks_md_txn_h txn, const char *job, size_t job_len,
                             cks_md_chunk_keep_cb_t keep, cks_md_chunk_cb_t freed, void *arg)
{
    uint8_t prefix[CKS_JOB_MAX_LEN + 1];
    cks_status_t status;
    MDB_cursor *cur;
    MDB_val k, val;
    int found, rc;

    status = md_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK || keep == NULL) {
        return status != CKS_OK ? status : CKS_ERR_INVALID_PARAM;
    }
    memcpy(prefix, job, job_len);
    prefix[job_len] = 0;
    status          = md_cursor_open(txn, txn->md->dbi_chunks, &cur);
    if (status != CKS_OK) {
        return status;
    }
    k.mv_size = job_len + 1;
    k.mv_data = prefix;
    status    = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
    while (status == CKS_OK && found && md_key_has_prefix(&k, prefix, job_len + 1)) {
        const uint8_t *p = k.mv_data;
        cks_md_chunk_t c;
        if (k.mv_size < job_len + 9 + 1 + 1 + 9) {
            status = CKS_ERR_IO;
            break;
        }
        size_t klen      = k.mv_size - (job_len + 9) - 10;
        uint64_t version = cks_get_be64(p + job_len + 1);
        if (keep(version, (const char *)p + job_len + 9, klen, arg)) {
            status = md_cursor_get(txn, cur, &k, &val, MDB_NEXT, &found);
            continue;
        }
        if (freed != NULL && md_chunk_decode(&k, &val, &c) == CKS_OK) {
            status = freed(&c, arg);
            if (status != CKS_OK) {
                break;
            }
        }
        uint8_t again[MD_CKEY_MAX];
        size_t again_len = CKS_MIN(k.mv_size, sizeof(again));
        memcpy(again, k.mv_data, again_len);
        rc = mdb_cursor_del(cur, 0);
        if (rc != 0) {
            status = md_status_from_mdb(txn, rc, "mdb_cursor_del(chunk)");
            break;
        }
        /* seek again rather than rely on where the cursor lands after a delete */
        k.mv_size = again_len;
        k.mv_data = again;
        status    = md_cursor_get(txn, cur, &k, &val, MDB_SET_RANGE, &found);
    }
    mdb_cursor_close(cur);
    return status;
}

/* ---- record codecs on bytes (md_int.h) ----------------------------------- */

static cks_status_t md_wbuf_out(const md_wbuf_t *w, uint8_t buf[CKS_MD_VALUE_MAX],
                                size_t *len_p)
{
    memcpy(buf, w->buf, w->len);
    *len_p = w->len;
    return CKS_OK;
}

cks_status_t cks_md_version_encode(const cks_md_version_t *v, uint8_t buf[CKS_MD_VALUE_MAX],
                                   size_t *len_p)
{
    md_wbuf_t w = {.len = 0};
    cks_status_t status = md_version_encode(v, &w);

    return status != CKS_OK ? status : md_wbuf_out(&w, buf, len_p);
}

cks_status_t cks_md_version_decode(const char *job, size_t job_len, uint64_t key_version,
                                   const void *val, size_t len, cks_md_version_t *v_p)
{
    MDB_val m = {len, (void *)val};

    return md_version_decode(job, job_len, key_version, &m, v_p);
}

cks_status_t cks_md_object_encode(const cks_md_object_t *o, uint8_t buf[CKS_MD_VALUE_MAX],
                                  size_t *len_p)
{
    md_wbuf_t w = {.len = 0};
    cks_status_t status = md_object_encode(o, &w);

    return status != CKS_OK ? status : md_wbuf_out(&w, buf, len_p);
}

cks_status_t cks_md_object_decode(const char *job, size_t job_len, uint64_t version,
                                  const void *key, size_t key_len, const void *val,
                                  size_t len, cks_md_object_t *o_p)
{
    MDB_val m = {len, (void *)val};

    return md_object_decode(job, job_len, version, key, key_len, &m, o_p);
}

cks_status_t cks_md_chunk_encode(const cks_md_chunk_t *c, uint8_t buf[CKS_MD_VALUE_MAX],
                                 size_t *len_p)
{
    md_wbuf_t w = {.len = 0};

    return md_chunk_encode(c, &w) != 0 ? CKS_ERR_INTERNAL : md_wbuf_out(&w, buf, len_p);
}

cks_status_t cks_md_chunk_decode(const void *key, size_t key_len, const void *val, size_t len,
                                 cks_md_chunk_t *c_p)
{
    MDB_val k = {key_len, (void *)key}, m = {len, (void *)val};

    return md_chunk_decode(&k, &m, c_p);
}

cks_status_t cks_md_schema_decode(const void *val, size_t len, uint64_t *schema_p)
{
    MDB_val m = {len, (void *)val};

    return md_schema_decode(&m, schema_p) == 0 ? CKS_OK : CKS_ERR_IO;
}
