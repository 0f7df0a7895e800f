/*
 * DESIGN: the byte formats of the metadata records' values (md_int.h), on
 * plain buffers: no LMDB here, so the fuzzer and the unit tests run the very
 * code every read and write of a record runs.
 *
 * Values: the records are msgpack arrays [format, fields...], packed with
 * msgpack-c into a fixed stack buffer (no allocation). They are read back
 * with the small bounded reader below rather than msgpack-c's unpacker: that
 * unpacker allocates an array's declared size before checking that the bytes
 * exist, so a 6-byte corrupt value (0x99 0xdd ff ff ff ff) makes it ask for
 * 128 GiB. The reader accepts exactly the integer forms msgpack defines,
 * checks every count and range, and turns anything else into CKS_ERR_IO.
 * (Drop records are two big-endian u64, md_drop.c.)
 *
 * Must never: crash or allocate on a corrupt value, or write an output on
 * failure.
 */
#include "md_int.h"

#include <msgpack.h>
#include <string.h>

/* Record formats: [fmt, version, parent, state, nranks, created_ns, sealed_ns,
 * nobjects, bytes] and [fmt, kind, layer, expert, rank, size, crc64,
 * arena_offset, arena_len]. Fields are only ever appended, with a new fmt. */
#define MD_VREC_FMT                                              \
    3 /* 1 lacked ec_k, ec_m, chunk_size; 2 redundancy, missing; \
         both still read */
#define MD_VREC_NFIELDS 14
#define MD_CREC_FMT     1 /* chunks: [fmt, len, crc64, arena_offset, arena_len] */
#define MD_CREC_NFIELDS 5
#define MD_OREC_FMT     2 /* 1 lacked source_version; still read */
#define MD_OREC_NFIELDS 10
#define MD_VALUE_MAX    CKS_MD_VALUE_MAX /* 1 + 9 * 9 bytes at most */

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

static cks_status_t md_wbuf_out(const md_wbuf_t *w, uint8_t buf[CKS_MD_VALUE_MAX],
                                size_t *len_p)
{
    memcpy(buf, w->buf, w->len);
    *len_p = w->len;
    return CKS_OK;
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

cks_status_t cks_md_version_encode(const cks_md_version_t *v,
                                   uint8_t buf[CKS_MD_VALUE_MAX], size_t *len_p)
{
    md_wbuf_t w = {.len = 0};
    cks_status_t status = md_version_encode(v, &w);

    return status != CKS_OK ? status : md_wbuf_out(&w, buf, len_p);
}

cks_status_t cks_md_object_encode(const cks_md_object_t *o, uint8_t buf[CKS_MD_VALUE_MAX],
                                  size_t *len_p)
{
    md_wbuf_t w = {.len = 0};
    cks_status_t status = md_object_encode(o, &w);

    return status != CKS_OK ? status : md_wbuf_out(&w, buf, len_p);
}

cks_status_t cks_md_schema_encode(uint8_t buf[CKS_MD_VALUE_MAX], size_t *len_p)
{
    md_wbuf_t w = {.len = 0};
    msgpack_packer pk;

    msgpack_packer_init(&pk, &w, md_wbuf_write);
    if (msgpack_pack_uint32(&pk, CKS_MD_SCHEMA_VERSION) != 0) {
        cks_error("metadata: msgpack packing of the schema number failed");
        return CKS_ERR_INTERNAL;
    }
    return md_wbuf_out(&w, buf, len_p);
}

cks_status_t cks_md_chunk_encode(const cks_md_chunk_t *c, uint8_t buf[CKS_MD_VALUE_MAX],
                                 size_t *len_p)
{
    md_wbuf_t w = {.len = 0};

    return md_chunk_encode(c, &w) != 0 ? CKS_ERR_INTERNAL : md_wbuf_out(&w, buf, len_p);
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

cks_status_t cks_md_version_decode(const char *job, size_t job_len, uint64_t key_version,
                                   const void *val, size_t len, cks_md_version_t *v_p)
{
    md_rbuf_t r = {val, (const uint8_t *)val + len, NULL};
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
        (fmt >= 2 && ((md_rd_u64(&r, 16, &k) != 0) || (md_rd_u64(&r, 4, &m) != 0) ||
                      (md_rd_u64(&r, UINT64_MAX, &v.chunk_size) != 0))) ||
        (fmt >= 3 && ((md_rd_u64(&r, 4, &red) != 0) ||
                      (md_rd_u64(&r, UINT64_MAX, &v.missing) != 0)))) {
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
              (int)job_len, job, (unsigned long long)key_version, len, r.what);
    return CKS_ERR_IO;
}

/* Decode an object record; the key is the tail of its LMDB key. */
cks_status_t cks_md_object_decode(const char *job, size_t job_len, uint64_t version,
                                  const void *key, size_t key_len, const void *val,
                                  size_t len, cks_md_object_t *o_p)
{
    md_rbuf_t r = {val, (const uint8_t *)val + len, NULL};
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
              (int)CKS_MIN(key_len, CKS_KEY_MAX_LEN), (const char *)key, len, r.what);
    return CKS_ERR_IO;
}

/* The schema number: a msgpack integer 1 .. UINT32_MAX and nothing else. */
cks_status_t cks_md_schema_decode(const void *val, size_t len, uint64_t *schema_p)
{
    md_rbuf_t r = {val, (const uint8_t *)val + len, NULL};
    uint64_t schema;

    if ((md_rd_u64(&r, UINT32_MAX, &schema) != 0) || (r.p != r.end) || (schema == 0)) {
        return CKS_ERR_IO;
    }
    *schema_p = schema;
    return CKS_OK;
}

cks_status_t cks_md_chunk_decode(const void *key, size_t key_len, const void *val,
                                 size_t len, cks_md_chunk_t *c_p)
{
    md_rbuf_t r = {val, (const uint8_t *)val + len, NULL};
    cks_md_chunk_t c;

    memset(&c, 0, sizeof(c));
    if (key_len < 10) {
        md_rd_fail(&r, "key too short");
        goto corrupt;
    }
    c.stripe = cks_get_be64((const uint8_t *)key + key_len - 9);
    c.idx = ((const uint8_t *)key)[key_len - 1];
    if ((md_rd_header(&r, MD_CREC_FMT, MD_CREC_NFIELDS) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &c.len) != 0) ||
        (md_rd_u64(&r, UINT64_MAX, &c.crc64) != 0) ||
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
    cks_error("metadata: corrupt chunk record (%zu bytes): %s", len, r.what);
    return CKS_ERR_IO;
}
