/*
 * DESIGN: libFuzzer target for the record decoders of metadata/md_codec.c (the
 * values stored in LMDB), compiled into this executable with coverage and
 * ASan/UBSan and called on plain buffers through md_int.h: no LMDB
 * environment is opened.
 *
 * Input: 9 bytes of key, then the value. The key bytes are be64(version)
 * and u8(idx): the version the record is stored under (version and object
 * records) and the stripe and chunk index at the end of a chunk's key. The
 * value is given to every decoder: version, object, chunk and schema.
 *
 * Properties checked; a violation aborts, so libFuzzer saves the input:
 *  - a refused value is CKS_ERR_IO and leaves the output alone;
 *  - a decoded record takes only values its fields allow (state, kind,
 *    ec_k <= 16, ec_m <= 4, a schema of 1..UINT32_MAX), carries the version
 *    and the key of its LMDB key;
 *  - round trip: the record encodes again, decodes to the same fields and
 *    encodes again to the same bytes; the encoding is no longer than the
 *    input when the input was of the current format (older formats gain
 *    the fields appended since).
 *
 * Single-threaded, as libFuzzer calls it; no state kept between inputs.
 */
#include "md_int.h"

#include "fuzz_util.h"

#include <string.h>

#define FZ_TARGET "fuzz_md"

#define FM_KEY_BYTES 9
#define FM_JOB       "job"
#define FM_OKEY      "layers.0.weight"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_init();
    return 0;
}

static uint64_t fm_be64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

static int fm_version_same(const cks_md_version_t *a, const cks_md_version_t *b)
{
    return a->version == b->version && a->parent == b->parent && a->state == b->state &&
           a->nranks == b->nranks && a->created_ns == b->created_ns &&
           a->sealed_ns == b->sealed_ns && a->nobjects == b->nobjects &&
           a->bytes == b->bytes && a->ec_k == b->ec_k && a->ec_m == b->ec_m &&
           a->chunk_size == b->chunk_size;
}

static int fm_object_same(const cks_md_object_t *a, const cks_md_object_t *b)
{
    return a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len + 1) == 0 &&
           a->kind == b->kind && a->layer == b->layer && a->expert == b->expert &&
           a->rank == b->rank && a->size == b->size && a->crc64 == b->crc64 &&
           a->arena_offset == b->arena_offset && a->arena_len == b->arena_len &&
           a->source_version == b->source_version;
}

static int fm_chunk_same(const cks_md_chunk_t *a, const cks_md_chunk_t *b)
{
    return a->stripe == b->stripe && a->idx == b->idx && a->len == b->len &&
           a->crc64 == b->crc64 && a->arena_offset == b->arena_offset &&
           a->arena_len == b->arena_len;
}

/* An exact-size copy, so that ASan sees a read past the encoding. */
static uint8_t *fm_copy(const uint8_t *b, size_t len)
{
    uint8_t *c = malloc(len > 0 ? len : 1);

    if (c == NULL) {
        abort();
    }
    memcpy(c, b, len);
    return c;
}

static void fm_refused(const char *what, cks_status_t st, const void *out,
                       const void *untouched, size_t len)
{
    if (st != CKS_ERR_IO) {
        FZ_FAIL("%s: undocumented status %d", what, st);
    }
    if (memcmp(out, untouched, len) != 0) {
        FZ_FAIL("%s: refused, but the output was written", what);
    }
}

static void fm_version(uint64_t kv, const uint8_t *val, size_t len)
{
    cks_md_version_t v, v2, untouched;
    uint8_t b2[CKS_MD_VALUE_MAX], b3[CKS_MD_VALUE_MAX], *copy;
    size_t l2 = 0, l3 = 0;
    cks_status_t st;

    memset(&v, 0xa5, sizeof(v));
    memcpy(&untouched, &v, sizeof(v));
    st = cks_md_version_decode(FM_JOB, 3, kv, val, len, &v);
    if (st != CKS_OK) {
        fm_refused("version", st, &v, &untouched, sizeof(v));
        return;
    }
    if (v.version != kv || v.state > CKS_VSTATE_ABORTED || v.ec_k > 16 || v.ec_m > 4) {
        FZ_FAIL("version: decoded out of range (version %llu of key %llu, state %d, "
                "k %u, m %u)",
                (unsigned long long)v.version, (unsigned long long)kv, (int)v.state,
                v.ec_k, v.ec_m);
    }
    if (cks_md_version_encode(&v, b2, &l2) != CKS_OK || l2 == 0 ||
        l2 > CKS_MD_VALUE_MAX) {
        FZ_FAIL("version: re-encode failed");
    }
    /* a record of the current format (14 fields, format 3) re-encodes no
     * longer; older formats (1, 2) grow by the fields they lacked */
    if (l2 > len && len >= 2 && val[0] == 0x9e && val[1] == 0x03) {
        FZ_FAIL("version: canonical encoding longer than the input (%zu > %zu)", l2, len);
    }
    copy = fm_copy(b2, l2);
    memset(&v2, 0, sizeof(v2));
    if (cks_md_version_decode(FM_JOB, 3, kv, copy, l2, &v2) != CKS_OK ||
        !fm_version_same(&v, &v2)) {
        FZ_FAIL("version: changed in a round trip");
    }
    free(copy);
    if (cks_md_version_encode(&v2, b3, &l3) != CKS_OK || l3 != l2 ||
        memcmp(b2, b3, l2) != 0) {
        FZ_FAIL("version: second encoding differs");
    }
}

static void fm_object(uint64_t version, const uint8_t *val, size_t len)
{
    cks_md_object_t o, o2, untouched;
    uint8_t b2[CKS_MD_VALUE_MAX], b3[CKS_MD_VALUE_MAX], *copy, *key;
    size_t klen = sizeof(FM_OKEY) - 1, l2 = 0, l3 = 0;
    cks_status_t st;

    key = fm_copy((const uint8_t *)FM_OKEY, klen); /* not NUL-terminated */
    memset(&o, 0xa5, sizeof(o));
    memcpy(&untouched, &o, sizeof(o));
    st = cks_md_object_decode(FM_JOB, 3, version, key, klen, val, len, &o);
    if (st != CKS_OK) {
        fm_refused("object", st, &o, &untouched, sizeof(o));
        free(key);
        return;
    }
    if (o.key_len != klen || memcmp(o.key, FM_OKEY, klen + 1) != 0 ||
        o.kind > CKS_KIND_OTHER) {
        FZ_FAIL("object: wrong key or kind %d", (int)o.kind);
    }
    if (cks_md_object_encode(&o, b2, &l2) != CKS_OK || l2 == 0 || l2 > CKS_MD_VALUE_MAX) {
        FZ_FAIL("object: re-encode failed");
    }
    if (l2 > len && len >= 2 && val[0] == 0x9a && val[1] == 0x02) {
        FZ_FAIL("object: canonical encoding longer than the input (%zu > %zu)", l2, len);
    }
    copy = fm_copy(b2, l2);
    memset(&o2, 0, sizeof(o2));
    if (cks_md_object_decode(FM_JOB, 3, version, key, klen, copy, l2, &o2) != CKS_OK ||
        !fm_object_same(&o, &o2)) {
        FZ_FAIL("object: changed in a round trip");
    }
    free(copy);
    free(key);
    if (cks_md_object_encode(&o2, b3, &l3) != CKS_OK || l3 != l2 ||
        memcmp(b2, b3, l2) != 0) {
        FZ_FAIL("object: second encoding differs");
    }
}

static void fm_chunk(const uint8_t *tail, const uint8_t *val, size_t len)
{
    /* job + 0x00 + be64(version) + key + 0x00 + be64(stripe) + u8(idx) */
    uint8_t key[3 + 1 + 8 + sizeof(FM_OKEY) + FM_KEY_BYTES];
    uint8_t b2[CKS_MD_VALUE_MAX], b3[CKS_MD_VALUE_MAX], *copy;
    cks_md_chunk_t c, c2, untouched;
    size_t l2 = 0, l3 = 0;
    cks_status_t st;

    memset(key, 0, sizeof(key));
    memcpy(key, FM_JOB, 3);
    memcpy(key + 12, FM_OKEY, sizeof(FM_OKEY)); /* with its 0x00 */
    memcpy(key + sizeof(key) - FM_KEY_BYTES, tail, FM_KEY_BYTES);
    memset(&c, 0xa5, sizeof(c));
    memcpy(&untouched, &c, sizeof(c));
    st = cks_md_chunk_decode(key, sizeof(key), val, len, &c);
    if (st != CKS_OK) {
        fm_refused("chunk", st, &c, &untouched, sizeof(c));
        return;
    }
    if (c.stripe != fm_be64(tail) || c.idx != tail[8]) {
        FZ_FAIL("chunk: stripe or index not from the key");
    }
    if (cks_md_chunk_encode(&c, b2, &l2) != CKS_OK || l2 == 0 || l2 > len) {
        FZ_FAIL("chunk: re-encode failed or longer than the input (%zu > %zu)", l2, len);
    }
    copy = fm_copy(b2, l2);
    memset(&c2, 0, sizeof(c2));
    if (cks_md_chunk_decode(key, sizeof(key), copy, l2, &c2) != CKS_OK ||
        !fm_chunk_same(&c, &c2)) {
        FZ_FAIL("chunk: changed in a round trip");
    }
    free(copy);
    if (cks_md_chunk_encode(&c2, b3, &l3) != CKS_OK || l3 != l2 ||
        memcmp(b2, b3, l2) != 0) {
        FZ_FAIL("chunk: second encoding differs");
    }
}

static void fm_schema(const uint8_t *val, size_t len)
{
    uint64_t schema = 0xa5a5, untouched = schema;
    cks_status_t st = cks_md_schema_decode(val, len, &schema);

    if (st != CKS_OK) {
        fm_refused("schema", st, &schema, &untouched, sizeof(schema));
        return;
    }
    if (schema == 0 || schema > UINT32_MAX || len == 0 || len > 9) {
        FZ_FAIL("schema %llu from %zu bytes", (unsigned long long)schema, len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *val;
    size_t len;
    uint64_t version;

    if (size < FM_KEY_BYTES) {
        return 0;
    }
    version = fm_be64(data);
    val = data + FM_KEY_BYTES;
    len = size - FM_KEY_BYTES;
    fm_version(version, val, len);
    fm_object(version, val, len);
    fm_chunk(data, val, len);
    fm_schema(val, len);
    return 0;
}
