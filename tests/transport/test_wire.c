/*
 * Unit tests of the wire codec (transport/wire.c): the only code that reads
 * untrusted control bytes.
 *
 *  - Round trips of every message of CKS_MSG_LIST and every list-page entry
 *    kind, with extreme values (strings at their bound, INT32_MIN/MAX,
 *    UINT32_MAX, UINT64_MAX, empty strings, binary addresses holding every
 *    byte value) and random ones. Bodies are compared byte for byte with a
 *    reference encoding built here with msgpack-c's packer from an
 *    independent model of the structs (wire_model.h), and the header bytes
 *    are checked one by one.
 *  - Header and body checks on hand-built messages: every field of every
 *    message given every wrong msgpack element (other scalar kinds, ints out
 *    of range, containers, ext, float), strings over their bound, lengths
 *    that claim more than the buffer, wrong counts, trailing bytes, and
 *    truncation at every byte.
 *  - Packing: unknown types, over-long strings, buffers too small.
 *  - 100k random mutations of valid messages and pages (seed printed; set
 *    CKS_TEST_SEED to replay or vary it).
 *  - Secret files (cks_tp_secret_load(), the other bytes a server reads
 *    before it trusts anyone): every length around 16 .. 255, modes, files
 *    that are not regular (a FIFO must be refused, not waited on).
 *
 * Every decode runs on an exact-size heap copy of the bytes, so that the
 * sanitizer build and valgrind see any read past the end. Every failed
 * decode must return a documented status, write a reason into `err`, and
 * leave hdr_p untouched.
 */
#include "cks_tp.h"
#include "wire_model.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TW_BUF_LEN   (CKS_WIRE_HDR_LEN + CKS_WIRE_MAX_BODY)
#define TW_ERR_LEN   128
#define TW_HDR_FILL  0xa5
#define TW_CANARY    0xee
#define TW_MUTATIONS 100000u

/* Assertion for hot loops: Criterion's macros only on failure. */
#define TW_CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            cr_assert_fail(__VA_ARGS__); \
        } \
    } while (0)

#define TW_K(kind) (1u << (kind))
#define TW_INTS    (TW_K(WM_U32) | TW_K(WM_I32) | TW_K(WM_U64))

static const unsigned tw_types[] = {
#define TW_TYPE_(msg, id, ...) CKS_MSG_##msg,
    CKS_MSG_LIST(TW_TYPE_)
#undef TW_TYPE_
};
#define TW_NTYPES CKS_ARRAY_SIZE(tw_types)

/* A target of the body tests: a message type, or a list-page entry kind. */
typedef struct {
    int is_entry;
    unsigned id; /* message type or cks_wire_entry_t */
    const wm_msg_t *m;
} tw_target_t;

#define TW_NTARGETS (TW_NTYPES + WM_NENTRIES)

static tw_target_t tw_target(unsigned t)
{
    tw_target_t tg;
    tg.is_entry = t >= TW_NTYPES;
    tg.id       = tg.is_entry ? t - (unsigned)TW_NTYPES : tw_types[t];
    tg.m        = tg.is_entry ? &wm_entries[tg.id] : &wm_msgs[tg.id];
    cr_assert(tg.m->nfields > 0, "no model for %s %u", tg.is_entry ? "entry" : "type",
              tg.id);
    return tg;
}

static const char *tw_target_name(const tw_target_t *tg)
{
    return tg->is_entry ? tg->m->name : cks_msg_name(tg->id);
}

/* ---- seeds ------------------------------------------------------------------ */

static uint64_t tw_seed(const char *test, uint64_t dflt)
{
    const char *env = getenv("CKS_TEST_SEED");
    uint64_t seed   = dflt;

    if (env != NULL && *env != '\0') {
        seed = strtoull(env, NULL, 0);
    }
    fprintf(stderr, "[wire::%s] seed %" PRIu64 " (set CKS_TEST_SEED to change)\n", test,
            seed);
    cr_log_info("seed %" PRIu64, seed);
    return seed;
}

/* ---- bytes -------------------------------------------------------------- */

static void tw_put_be(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
    }
}

static uint64_t tw_get_be(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

/** An exact-size heap copy (so that any over-read is seen). */
static uint8_t *tw_dup(const void *bytes, size_t len)
{
    uint8_t *p = malloc(len > 0 ? len : 1);
    cr_assert_not_null(p);
    if (len > 0) {
        memcpy(p, bytes, len);
    }
    return p;
}

/** Header written here, not by cks_wire_pack(). */
static void tw_hdr(uint8_t *h, uint32_t magic, uint16_t proto, uint16_t type,
                   uint32_t flags, uint32_t body_len, uint64_t req_id)
{
    tw_put_be(h, magic, 4);
    tw_put_be(h + 4, proto, 2);
    tw_put_be(h + 6, type, 2);
    tw_put_be(h + 8, flags, 4);
    tw_put_be(h + 12, body_len, 4);
    tw_put_be(h + 16, req_id, 8);
}

/** Header + body in a heap buffer of exactly the message's size. */
static uint8_t *tw_msg(unsigned type, uint32_t flags, uint64_t req_id, const void *body,
                       size_t body_len, size_t *len_p)
{
    uint8_t *p = malloc(CKS_WIRE_HDR_LEN + body_len);
    cr_assert_not_null(p);
    tw_hdr(p, CKS_WIRE_MAGIC, CKS_WIRE_PROTO, (uint16_t)type, flags, (uint32_t)body_len,
           req_id);
    if (body_len > 0) {
        memcpy(p + CKS_WIRE_HDR_LEN, body, body_len);
    }
    *len_p = CKS_WIRE_HDR_LEN + body_len;
    return p;
}

/* ---- reference encoder (msgpack-c's packer, driven by the model) -------- */

static void tw_ref_field(msgpack_packer *pk, const wm_field_t *f, const void *body)
{
    const uint8_t *p = (const uint8_t *)body + f->off;
    const cks_wire_str_t *s;

    switch (f->kind) {
        case WM_U32:
            msgpack_pack_uint64(pk, *(const uint32_t *)p);
            break;
        case WM_I32:
            msgpack_pack_int64(pk, *(const int32_t *)p);
            break;
        case WM_U64:
            msgpack_pack_uint64(pk, *(const uint64_t *)p);
            break;
        case WM_STR:
        case WM_BIN: {
            int str = f->kind == WM_STR; /* else bin: packed the same way */
            s       = (const void *)p;
            (str ? msgpack_pack_str : msgpack_pack_bin)(pk, s->len);
            if (s->len > 0) {
                (str ? msgpack_pack_str_body : msgpack_pack_bin_body)(pk, s->ptr, s->len);
            }
            break;
        }
    }
}

/* How a hand-built body departs from the valid one. */
typedef struct {
    int count;         /* array count written; -1: the model's */
    int at;            /* field replaced by raw bytes; -1: none */
    const void *raw;
    size_t raw_len;
    int stop;          /* end the body right after raw */
    int array16;       /* array16 header instead of fixarray */
    int array32;       /* array32 header */
} tw_edit_t;

static const tw_edit_t tw_no_edit = {-1, -1, NULL, 0, 0, 0, 0};

/** Body of model m from `body`, with edit applied, into sb (initialized). */
static void tw_ref_body(const wm_msg_t *m, const void *body, const tw_edit_t *ed,
                        msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    unsigned count = ed->count >= 0 ? (unsigned)ed->count : m->nfields;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (ed->array16 || ed->array32) {
        uint8_t h[5];
        unsigned n = ed->array16 ? 2 : 4;
        h[0]       = ed->array16 ? 0xdc : 0xdd;
        tw_put_be(h + 1, count, n);
        msgpack_sbuffer_write(sb, (const char *)h, 1 + n);
    } else {
        msgpack_pack_array(&pk, count);
    }
    for (unsigned i = 0; i < count; i++) {
        if ((int)i == ed->at) {
            msgpack_sbuffer_write(sb, ed->raw, ed->raw_len);
            if (ed->stop) {
                return;
            }
        } else if (i < m->nfields) {
            tw_ref_field(&pk, &m->fields[i], body);
        } else {
            msgpack_pack_uint64(&pk, 7);
        }
    }
}

/* ---- decoding helpers ----------------------------------------------------- */

typedef struct {
    uint8_t *buf; /* exact-size copy the strings point into */
    size_t len;
    cks_status_t st;
    cks_wire_hdr_t hdr;
    wm_body_t body;
    char err[TW_ERR_LEN];
} tw_dec_t;

/** Decode a copy of bytes; checks the failure contract. Free with
 *  tw_dec_free(). */
static void tw_decode(tw_dec_t *d, const void *bytes, size_t len)
{
    cks_wire_hdr_t untouched;

    d->buf = tw_dup(bytes, len);
    d->len = len;
    memset(&d->hdr, TW_HDR_FILL, sizeof(d->hdr));
    memset(&untouched, TW_HDR_FILL, sizeof(untouched));
    memset(d->err, 0, sizeof(d->err));
    d->st = cks_wire_unpack(d->buf, len, &d->hdr, &d->body.msg, d->err, sizeof(d->err));
    TW_CHECK(d->st == CKS_OK || d->st == CKS_ERR_BAD_MESSAGE ||
                 d->st == CKS_ERR_UNSUPPORTED || d->st == CKS_ERR_PROTOCOL,
             "undocumented status %d", d->st);
    if (d->st != CKS_OK) {
        TW_CHECK(d->err[0] != '\0', "no reason written for status %d", d->st);
        TW_CHECK(memchr(d->err, '\0', sizeof(d->err)) != NULL, "reason not terminated");
        TW_CHECK(memcmp(&d->hdr, &untouched, sizeof(untouched)) == 0,
                 "hdr_p written by a failed decode (%s)", d->err);
    }
}

static void tw_dec_free(tw_dec_t *d)
{
    free(d->buf);
    d->buf = NULL;
}

/** Decode and expect a failure with status st; returns nothing. */
static void tw_expect_fail(const void *bytes, size_t len, cks_status_t st,
                           const char *reason_part, const char *what)
{
    tw_dec_t d;
    tw_decode(&d, bytes, len);
    TW_CHECK(d.st == st, "%s: status %d (%s), expected %d", what, d.st, d.err, st);
    TW_CHECK(reason_part == NULL || strstr(d.err, reason_part) != NULL,
             "%s: reason \"%s\" lacks \"%s\"", what, d.err, reason_part);
    tw_dec_free(&d);
}

/** One entry from page at *off; checks the contract around *off. */
static cks_status_t tw_entry_decode(unsigned kind, const uint8_t *page, size_t len,
                                    size_t *off, wm_body_t *e)
{
    size_t before = *off;
    cks_status_t st;

    memset(e, 0, sizeof(*e));
    st = cks_wire_entry_unpack((cks_wire_entry_t)kind, page, len, off, e);
    TW_CHECK(st == CKS_OK || st == CKS_ERR_BAD_MESSAGE, "entry: undocumented status %d",
             st);
    if (st == CKS_OK) {
        TW_CHECK(*off > before && *off <= len, "entry: offset %zu -> %zu (len %zu)",
                 before, *off, len);
    } else {
        TW_CHECK(*off == before, "entry: failed decode moved offset %zu -> %zu", before,
                 *off);
    }
    return st;
}

/** Decode a body built by hand for target tg (wrapped in a header for a
 *  message, alone for an entry); returns the status, and the decoded body in
 *  out (valid until *keep_p is freed). */
static cks_status_t tw_target_decode(const tw_target_t *tg, const void *body, size_t blen,
                                     wm_body_t *out, uint8_t **keep_p, char *err,
                                     size_t err_len)
{
    cks_status_t st;

    if (tg->is_entry) {
        size_t off  = 0;
        uint8_t *pg = tw_dup(body, blen);
        st          = tw_entry_decode(tg->id, pg, blen, &off, out);
        TW_CHECK(st != CKS_OK || off == blen, "%s: entry consumed %zu of %zu bytes",
                 tg->m->name, off, blen);
        snprintf(err, err_len, "%s", st == CKS_OK ? "" : "entry rejected");
        *keep_p = pg;
    } else {
        tw_dec_t d;
        size_t len;
        uint8_t *msg = tw_msg(tg->id, 0, 42, body, blen, &len);
        tw_decode(&d, msg, len);
        free(msg);
        st = d.st;
        if (st == CKS_OK) {
            TW_CHECK(d.hdr.type == tg->id && d.hdr.body_len == blen && d.hdr.req_id == 42,
                     "%s: header decoded wrong", tw_target_name(tg));
            memcpy(out, &d.body, sizeof(*out));
        }
        snprintf(err, err_len, "%s", d.err);
        *keep_p = d.buf;
    }
    return st;
}

/* ---- re-encoding property ---------------------------------------------------- */

/** A decoded message packs again, decodes to the same fields, and packs to
 *  the same bytes a second time; the canonical encoding is never longer. */
static void tw_recode_msg(const tw_dec_t *d)
{
    const wm_msg_t *m = &wm_msgs[d->hdr.type];
    static uint8_t b2[TW_BUF_LEN], b3[TW_BUF_LEN];
    size_t l2 = 0, l3 = 0;
    cks_status_t st;
    tw_dec_t d2;

    st = cks_wire_pack(d->hdr.type, d->hdr.flags, d->hdr.req_id, &d->body, b2, sizeof(b2),
                       &l2);
    TW_CHECK(st == CKS_OK, "%s: re-pack of a decoded message failed: %d",
             cks_msg_name(d->hdr.type), st);
    TW_CHECK(l2 <= d->len, "%s: canonical encoding longer (%zu > %zu)",
             cks_msg_name(d->hdr.type), l2, d->len);
    tw_decode(&d2, b2, l2);
    TW_CHECK(d2.st == CKS_OK, "%s: re-decode failed: %s", cks_msg_name(d->hdr.type),
             d2.err);
    TW_CHECK(d2.hdr.type == d->hdr.type && d2.hdr.flags == d->hdr.flags &&
                 d2.hdr.req_id == d->hdr.req_id &&
                 d2.hdr.body_len == l2 - CKS_WIRE_HDR_LEN,
             "%s: header changed in a round trip", cks_msg_name(d->hdr.type));
    int i = wm_diff(m, &d->body, &d2.body);
    TW_CHECK(i < 0, "%s: field %s changed in a round trip", cks_msg_name(d->hdr.type),
             m->fields[i < 0 ? 0 : i].name);
    st = cks_wire_pack(d2.hdr.type, d2.hdr.flags, d2.hdr.req_id, &d2.body, b3, sizeof(b3),
                       &l3);
    TW_CHECK(st == CKS_OK && l3 == l2 && memcmp(b2, b3, l2) == 0,
             "%s: second pack differs", cks_msg_name(d->hdr.type));
    tw_dec_free(&d2);
}

static void tw_recode_entry(unsigned kind, const wm_body_t *e, size_t consumed)
{
    const wm_msg_t *m = &wm_entries[kind];
    uint8_t b2[1024];
    size_t l2 = 0, off = 0;
    wm_body_t e2;
    cks_status_t st;

    st = cks_wire_entry_pack((cks_wire_entry_t)kind, e, b2, sizeof(b2), &l2);
    TW_CHECK(st == CKS_OK, "%s: re-pack of a decoded entry failed: %d", m->name, st);
    TW_CHECK(l2 <= consumed, "%s: canonical entry longer (%zu > %zu)", m->name, l2,
             consumed);
    uint8_t *copy = tw_dup(b2, l2);
    st            = tw_entry_decode(kind, copy, l2, &off, &e2);
    TW_CHECK(st == CKS_OK && off == l2, "%s: re-decode failed (%d, %zu of %zu)", m->name,
             st, off, l2);
    int i = wm_diff(m, e, &e2);
    TW_CHECK(i < 0, "%s: field %s changed in a round trip", m->name,
             m->fields[i < 0 ? 0 : i].name);
    free(copy);
}

/* ======================================================================
 * The model against the table
 * ====================================================================== */

Test(wire_table, model_matches_message_table, .timeout = 30)
{
    unsigned n = 0, modeled = 0;

#define TW_CHECK_TYPE_(msg, id, type, ...) \
    cr_assert_eq(wm_msgs[id].size, sizeof(type), "%s: model size", #msg); \
    cr_assert_str_eq(wm_msgs[id].name, #type, "%s: model type", #msg); \
    cr_assert_str_eq(cks_msg_name(id), #msg); \
    n++;
    CKS_MSG_LIST(TW_CHECK_TYPE_)
#undef TW_CHECK_TYPE_
    for (unsigned t = 0; t < CKS_MSG_LAST; t++) {
        modeled += wm_msgs[t].nfields > 0;
        for (unsigned i = 0; i < wm_msgs[t].nfields; i++) {
            cr_assert(wm_msgs[t].fields[i].off < wm_msgs[t].size);
        }
    }
    cr_assert_eq(n, TW_NTYPES);
    cr_assert_eq(modeled, n, "model has %u types, table %u", modeled, n);
    cr_assert_eq(wm_entries[CKS_WIRE_ENTRY_VERSION].size,
                 sizeof(cks_msg_version_entry_t));
    cr_assert_eq(wm_entries[CKS_WIRE_ENTRY_OBJECT].size, sizeof(cks_msg_object_entry_t));
    cr_assert_eq(wm_entries[CKS_WIRE_ENTRY_JOB].size, sizeof(cks_msg_job_entry_t));
    for (unsigned t = 0; t < TW_NTARGETS; t++) {
        cr_assert(tw_target(t).m->nfields <= WM_MAX_FIELDS);
    }
}

/* The auth column: a server with a secret takes only the handshake's
 * requests before authentication (dispatch.c's gate and the transport's
 * hold both read it). */
Test(wire_table, only_the_handshake_precedes_authentication, .timeout = 30)
{
    for (size_t i = 0; i < TW_NTYPES; i++) {
        unsigned t = tw_types[i], f = cks_msg_flags(t);
        int handshake = t == CKS_MSG_HELLO || t == CKS_MSG_AUTH;
        if (!(f & CKS_MSG_F_REPLY)) {
            cr_assert_eq(!!(f & CKS_MSG_F_PREAUTH), handshake, "%s: auth column",
                         cks_msg_name(t));
        }
    }
    cr_assert_eq(cks_msg_flags(0) & CKS_MSG_F_PREAUTH, 0u);
    cr_assert_eq(cks_msg_flags(CKS_MSG_LAST) & CKS_MSG_F_PREAUTH, 0u);
}

Test(wire_table, msg_names, .timeout = 30)
{
    cr_assert_str_eq(cks_msg_name(CKS_MSG_PUT), "PUT");
    cr_assert_str_eq(cks_msg_name(CKS_MSG_JOB_LIST), "JOB_LIST");
    cr_assert_str_eq(cks_msg_name(0), "UNKNOWN");
    cr_assert_str_eq(cks_msg_name(CKS_MSG_LAST), "UNKNOWN");
    cr_assert_str_eq(cks_msg_name(0x10000u + CKS_MSG_PUT), "UNKNOWN");
}

Test(wire_table, cstr, .timeout = 30)
{
    cks_wire_str_t s = cks_wire_cstr(NULL);
    cr_assert_not_null(s.ptr);
    cr_assert_eq(s.len, 0);
    s = cks_wire_cstr("job-7");
    cr_assert_eq(s.len, 5);
    cr_assert_eq(memcmp(s.ptr, "job-7", 5), 0);
}

/* ======================================================================
 * Round trips
 * ====================================================================== */

static wm_sample_t tw_sample, tw_sample2;

/** Pack sample s as type, check the header bytes and the body against the
 *  reference encoding, decode a copy and compare every field. */
static void tw_roundtrip_one(unsigned type, uint32_t flags, uint64_t req_id,
                             const wm_sample_t *s)
{
    const wm_msg_t *m = &wm_msgs[type];
    static uint8_t buf[TW_BUF_LEN];
    size_t len = 0;
    msgpack_sbuffer ref;
    tw_dec_t d;
    cks_status_t st;
    const char *name = cks_msg_name(type);

    st = cks_wire_pack(type, flags, req_id, &s->b, buf, sizeof(buf), &len);
    cr_assert_eq(st, CKS_OK, "%s: pack: %d", name, st);
    cr_assert(len >= CKS_WIRE_HDR_LEN && len <= TW_BUF_LEN, "%s: length %zu", name, len);

    /* header, byte by byte (big-endian) */
    cr_assert_eq(memcmp(buf, "CKS1", 4), 0, "%s: magic", name);
    cr_assert_eq(tw_get_be(buf + 4, 2), CKS_WIRE_PROTO, "%s: proto", name);
    cr_assert_eq(tw_get_be(buf + 6, 2), type, "%s: type", name);
    cr_assert_eq(tw_get_be(buf + 8, 4), flags, "%s: flags", name);
    cr_assert_eq(tw_get_be(buf + 12, 4), len - CKS_WIRE_HDR_LEN, "%s: body_len", name);
    cr_assert_eq(tw_get_be(buf + 16, 8), req_id, "%s: req_id", name);

    /* body, against the reference encoding */
    tw_ref_body(m, &s->b, &tw_no_edit, &ref);
    cr_assert_eq(len - CKS_WIRE_HDR_LEN, ref.size, "%s: body %zu bytes, reference %zu",
                 name, len - CKS_WIRE_HDR_LEN, ref.size);
    cr_assert_eq(memcmp(buf + CKS_WIRE_HDR_LEN, ref.data, ref.size), 0,
                 "%s: body differs from the reference encoding", name);
    msgpack_sbuffer_destroy(&ref);

    tw_decode(&d, buf, len);
    cr_assert_eq(d.st, CKS_OK, "%s: unpack: %s", name, d.err);
    cr_assert_eq(d.hdr.type, type);
    cr_assert_eq(d.hdr.flags, flags);
    cr_assert_eq(d.hdr.req_id, req_id);
    cr_assert_eq(d.hdr.body_len, len - CKS_WIRE_HDR_LEN);
    int i = wm_diff(m, &s->b, &d.body);
    cr_assert_lt(i, 0, "%s: field %s differs after a round trip", name,
                 m->fields[i < 0 ? 0 : i].name);
    i = wm_strings_outside(m, &d.body, d.buf + CKS_WIRE_HDR_LEN, d.buf + d.len);
    cr_assert_lt(i, 0, "%s: string %s does not point into the body", name,
                 m->fields[i < 0 ? 0 : i].name);
    tw_recode_msg(&d);
    tw_dec_free(&d);
}

Test(wire_roundtrip, every_type_extremes, .timeout = 60)
{
    static const uint32_t flags[] = {0, CKS_WIRE_F_PAYLOAD, CKS_WIRE_F_PAGE,
                                     CKS_WIRE_F_PAYLOAD | CKS_WIRE_F_PAGE};
    static const uint64_t reqs[]  = {0, 1, UINT64_MAX, 0x0102030405060708ull};

    for (unsigned t = 0; t < TW_NTYPES; t++) {
        unsigned type = tw_types[t];
        wm_fill(&wm_msgs[type], &tw_sample, WM_FILL_MAX, NULL);
        tw_roundtrip_one(type, flags[t % 4], reqs[t % 4], &tw_sample);
        wm_fill(&wm_msgs[type], &tw_sample, WM_FILL_MIN, NULL);
        tw_roundtrip_one(type, flags[(t + 1) % 4], reqs[(t + 1) % 4], &tw_sample);
    }
}

Test(wire_roundtrip, every_type_random, .timeout = 60)
{
    uint64_t rng = tw_seed("every_type_random", 20240611);

    for (unsigned t = 0; t < TW_NTYPES; t++) {
        for (unsigned k = 0; k < 200; k++) {
            unsigned type = tw_types[t];
            wm_fill(&wm_msgs[type], &tw_sample, WM_FILL_RANDOM, &rng);
            tw_roundtrip_one(type, (uint32_t)wm_below(&rng, 4), wm_rand_u64(&rng),
                             &tw_sample);
        }
    }
}

/* Regressions (fixed in wire.c):
 *  - an empty string given as {NULL, 0} (cks_wire_str_t allows it) made the
 *    packer call memcpy(dst, NULL, 0), undefined behaviour that UBSan (the
 *    CKS_SANITIZE build) reports and aborts on;
 *  - a decoded empty str came back with ptr NULL (msgpack-c's choice), not
 *    pointing into the buffer as cks_tp.h promises, and packing it again hit
 *    the first bug. */
Test(wire_roundtrip, empty_string_with_null_pointer, .timeout = 30)
{
    cks_msg_status_t body = {CKS_ERR_NO_SUCH_KEY, {NULL, 0}};
    cks_msg_job_entry_t e = {{NULL, 0}};
    uint8_t buf[TW_BUF_LEN], page[64];
    size_t len = 0, off = 0;
    tw_dec_t d;

    cr_assert_eq(cks_wire_pack(CKS_MSG_STATUS_REPLY, 0, 9, &body, buf, sizeof(buf), &len),
                 CKS_OK);
    tw_decode(&d, buf, len);
    cr_assert_eq(d.st, CKS_OK, "%s", d.err);
    cr_assert_eq(d.body.msg.m_STATUS_REPLY.status, CKS_ERR_NO_SUCH_KEY);
    cr_assert_eq(d.body.msg.m_STATUS_REPLY.msg.len, 0);
    cr_assert(d.body.msg.m_STATUS_REPLY.msg.ptr >= (const char *)d.buf &&
                  d.body.msg.m_STATUS_REPLY.msg.ptr <= (const char *)d.buf + d.len,
              "empty string decoded to %p, buffer %p",
              (void *)d.body.msg.m_STATUS_REPLY.msg.ptr, (void *)d.buf);
    tw_recode_msg(&d);
    tw_dec_free(&d);
    cr_assert_eq(cks_wire_entry_pack(CKS_WIRE_ENTRY_JOB, &e, page, sizeof(page), &off),
                 CKS_OK);
    cr_assert_eq(off, 2); /* fixarray(1), fixstr(0) */
    cr_assert_eq(page[0], 0x91);
    cr_assert_eq(page[1], 0xa0);
    uint8_t *pg = tw_dup(page, off);
    wm_body_t out;
    size_t at = 0;
    cr_assert_eq(tw_entry_decode(CKS_WIRE_ENTRY_JOB, pg, off, &at, &out), CKS_OK);
    cr_assert_eq(out.job.name.len, 0);
    cr_assert(out.job.name.ptr >= (const char *)pg &&
                  out.job.name.ptr <= (const char *)pg + off,
              "empty entry string decoded to %p", (void *)out.job.name.ptr);
    free(pg);
}

Test(wire_roundtrip, ints_accept_any_width, .timeout = 30)
{
    /* A peer may send an integer in any msgpack width, signed or not
     * (msgpack allows it); values in the field's range are accepted. */
    static const uint8_t body[] = {
        0x9c,                                           /* PUT: 12 fields */
        0xa1, 'j',                                      /* job */
        0xd3, 0, 0, 0, 0, 0, 0, 0, 3,                   /* version 3 as int64 */
        0xda, 0, 1, 'k',                                /* key as str16 */
        0xcf, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,       /* kind UINT32_MAX as u64 */
        0xd3, 0xff, 0xff, 0xff, 0xff, 0x80, 0, 0, 0,    /* layer INT32_MIN as i64 */
        0xcf, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff,       /* expert INT32_MAX as u64 */
        0xd0, 0xff,                                     /* rank -1 as int8 */
        0xcc, 0x05,                                     /* size 5 as u8 */
        0xcd, 0x00, 0x04,                               /* k 4 as u16 */
        0xd1, 0x00, 0x02,                               /* m 2 as int16 */
        0xce, 0x00, 0x01, 0x00, 0x00,                   /* chunk_size 65536 as u32 */
        0xd2, 0x00, 0x00, 0x07, 0xd0,                   /* member_ms 2000 as int32 */
    };
    size_t len;
    uint8_t *msg = tw_msg(CKS_MSG_PUT, CKS_WIRE_F_PAYLOAD, 1, body, sizeof(body), &len);
    tw_dec_t d;

    tw_decode(&d, msg, len);
    cr_assert_eq(d.st, CKS_OK, "%s", d.err);
    const cks_msg_put_t *p = &d.body.msg.m_PUT;
    cr_assert_eq(p->job.len, 1);
    cr_assert_eq(p->job.ptr[0], 'j');
    cr_assert_eq(p->version, 3);
    cr_assert_eq(p->key.len, 1);
    cr_assert_eq(p->key.ptr[0], 'k');
    cr_assert_eq(p->kind, UINT32_MAX);
    cr_assert_eq(p->layer, INT32_MIN);
    cr_assert_eq(p->expert, INT32_MAX);
    cr_assert_eq(p->rank, -1);
    cr_assert_eq(p->size, 5);
    cr_assert_eq(p->k, 4);
    cr_assert_eq(p->m, 2);
    cr_assert_eq(p->chunk_size, 65536);
    cr_assert_eq(p->member_ms, 2000);
    tw_recode_msg(&d);
    tw_dec_free(&d);
    free(msg);
}

/* ======================================================================
 * List pages
 * ====================================================================== */

#define TW_PAGE_N 9

Test(wire_entry, pages_of_every_kind, .timeout = 60)
{
    uint64_t rng = tw_seed("pages_of_every_kind", 77);
    static wm_sample_t s[TW_PAGE_N];
    uint8_t *page = malloc(CKS_WIRE_MAX_PAGE);
    cr_assert_not_null(page);

    for (unsigned kind = 0; kind < WM_NENTRIES; kind++) {
        const wm_msg_t *m = &wm_entries[kind];
        size_t ends[TW_PAGE_N], off = 0;
        msgpack_sbuffer ref;

        /* a prefix the packer must not touch */
        memset(page, 0x5a, 16);
        off = 16;
        for (unsigned i = 0; i < TW_PAGE_N; i++) {
            wm_fill_t mode = i == 0 ? WM_FILL_MAX : i == 1 ? WM_FILL_MIN : WM_FILL_RANDOM;
            wm_fill(m, &s[i], mode, &rng);
            size_t before = off;
            cr_assert_eq(cks_wire_entry_pack((cks_wire_entry_t)kind, &s[i].b, page,
                                             CKS_WIRE_MAX_PAGE, &off),
                         CKS_OK, "%s #%u", m->name, i);
            ends[i] = off - 16;
            tw_ref_body(m, &s[i].b, &tw_no_edit, &ref);
            cr_assert_eq(off - before, ref.size, "%s #%u: %zu bytes, reference %zu",
                         m->name, i, off - before, ref.size);
            cr_assert_eq(memcmp(page + before, ref.data, ref.size), 0,
                         "%s #%u differs from the reference encoding", m->name, i);
            msgpack_sbuffer_destroy(&ref);
        }
        for (unsigned i = 0; i < 16; i++) {
            cr_assert_eq(page[i], 0x5a, "%s: prefix overwritten", m->name);
        }

        /* decode from an exact copy of the entries */
        size_t len  = off - 16;
        uint8_t *pg = tw_dup(page + 16, len);
        off         = 0;
        for (unsigned i = 0; i < TW_PAGE_N; i++) {
            wm_body_t e;
            cr_assert_eq(tw_entry_decode(kind, pg, len, &off, &e), CKS_OK, "%s #%u",
                         m->name, i);
            cr_assert_eq(off, ends[i], "%s #%u: consumed up to %zu, expected %zu",
                         m->name, i, off, ends[i]);
            int f = wm_diff(m, &s[i].b, &e);
            cr_assert_lt(f, 0, "%s #%u: field %s differs", m->name, i,
                         m->fields[f < 0 ? 0 : f].name);
            f = wm_strings_outside(m, &e, pg, pg + len);
            cr_assert_lt(f, 0, "%s #%u: string outside the page", m->name, i);
            tw_recode_entry(kind, &e, ends[i] - (i ? ends[i - 1] : 0));
        }
        cr_assert_eq(off, len, "%s: page not consumed exactly", m->name);
        {
            wm_body_t e;
            cr_assert_eq(tw_entry_decode(kind, pg, len, &off, &e), CKS_ERR_BAD_MESSAGE,
                         "%s: decode past the last entry", m->name);
        }
        free(pg);
    }
    free(page);
}

Test(wire_entry, full_page_fits_max_page, .timeout = 60)
{
    uint8_t *page = malloc(CKS_WIRE_MAX_PAGE);
    cr_assert_not_null(page);

    for (unsigned kind = 0; kind < WM_NENTRIES; kind++) {
        size_t off = 0;
        wm_fill(&wm_entries[kind], &tw_sample, WM_FILL_MAX, NULL);
        for (unsigned i = 0; i < CKS_WIRE_MAX_ENTRIES; i++) {
            cr_assert_eq(cks_wire_entry_pack((cks_wire_entry_t)kind, &tw_sample.b, page,
                                             CKS_WIRE_MAX_PAGE, &off),
                         CKS_OK, "%s: entry %u of a full page does not fit",
                         wm_entries[kind].name, i);
        }
        uint8_t *pg = tw_dup(page, off);
        size_t len = off, n = 0;
        off        = 0;
        while (off < len) {
            wm_body_t e;
            cr_assert_eq(tw_entry_decode(kind, pg, len, &off, &e), CKS_OK);
            cr_assert_lt(wm_diff(&wm_entries[kind], &tw_sample.b, &e), 0);
            n++;
        }
        cr_assert_eq(n, CKS_WIRE_MAX_ENTRIES);
        free(pg);
    }
    free(page);
}

Test(wire_entry, wrong_kind_and_bad_arguments, .timeout = 30)
{
    uint8_t page[1024];
    size_t len = 0, off;
    wm_body_t e;

    /* a page of each kind is refused as each other kind */
    for (unsigned kind = 0; kind < WM_NENTRIES; kind++) {
        len = 0;
        wm_fill(&wm_entries[kind], &tw_sample, WM_FILL_MAX, NULL);
        cr_assert_eq(cks_wire_entry_pack((cks_wire_entry_t)kind, &tw_sample.b, page,
                                         sizeof(page), &len),
                     CKS_OK);
        for (unsigned other = 0; other < WM_NENTRIES; other++) {
            off = 0;
            cr_assert_eq(tw_entry_decode(other, page, len, &off, &e),
                         other == kind ? CKS_OK : CKS_ERR_BAD_MESSAGE,
                         "page of %s decoded as %s", wm_entries[kind].name,
                         wm_entries[other].name);
        }
        /* unknown kinds */
        static const unsigned bad_kinds[] = {WM_NENTRIES, 255, 0x80000000u, UINT32_MAX};
        for (unsigned i = 0; i < CKS_ARRAY_SIZE(bad_kinds); i++) {
            off = 0;
            cr_assert_eq(tw_entry_decode(bad_kinds[i], page, len, &off, &e),
                         CKS_ERR_BAD_MESSAGE, "entry kind %u accepted", bad_kinds[i]);
        }
        /* offset past the end, at the end, NULL buffer */
        off = len + 1;
        cr_assert_eq(tw_entry_decode(kind, page, len, &off, &e), CKS_ERR_BAD_MESSAGE);
        off = SIZE_MAX;
        cr_assert_eq(tw_entry_decode(kind, page, len, &off, &e), CKS_ERR_BAD_MESSAGE);
        off = len;
        cr_assert_eq(tw_entry_decode(kind, page, len, &off, &e), CKS_ERR_BAD_MESSAGE);
        off = 0;
        cr_assert_eq(cks_wire_entry_unpack((cks_wire_entry_t)kind, NULL, len, &off, &e),
                     CKS_ERR_BAD_MESSAGE);
    }
}

/* ======================================================================
 * Header checks
 * ====================================================================== */

/** A valid PUT, as an exact-size heap buffer. */
static uint8_t *tw_valid_put(size_t *len_p)
{
    static uint8_t buf[TW_BUF_LEN];
    uint64_t rng = 5;
    wm_fill(&wm_msgs[CKS_MSG_PUT], &tw_sample, WM_FILL_RANDOM, &rng);
    cr_assert_eq(cks_wire_pack(CKS_MSG_PUT, CKS_WIRE_F_PAYLOAD, 77, &tw_sample.b, buf,
                               sizeof(buf), len_p),
                 CKS_OK);
    return tw_dup(buf, *len_p);
}

Test(wire_header, shorter_than_header, .timeout = 30)
{
    size_t len;
    uint8_t *msg = tw_valid_put(&len);
    char err[TW_ERR_LEN];
    cks_wire_hdr_t hdr;
    cks_msg_any_t body;

    for (size_t l = 0; l < CKS_WIRE_HDR_LEN; l++) {
        char what[32];
        snprintf(what, sizeof(what), "%zu bytes", l);
        tw_expect_fail(msg, l, CKS_ERR_BAD_MESSAGE, "shorter", what);
    }
    err[0] = '\0';
    cr_assert_eq(cks_wire_unpack(NULL, 0, &hdr, &body, err, sizeof(err)),
                 CKS_ERR_BAD_MESSAGE);
    cr_assert_neq(err[0], '\0');
    cr_assert_eq(cks_wire_unpack(NULL, len, &hdr, &body, err, sizeof(err)),
                 CKS_ERR_BAD_MESSAGE);
    free(msg);
}

Test(wire_header, bad_magic, .timeout = 30)
{
    size_t len;
    uint8_t *msg = tw_valid_put(&len);

    for (unsigned bit = 0; bit < 32; bit++) {
        msg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        tw_expect_fail(msg, len, CKS_ERR_BAD_MESSAGE, "magic", "magic bit flipped");
        msg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    memcpy(msg, "1SKC", 4); /* little-endian magic */
    tw_expect_fail(msg, len, CKS_ERR_BAD_MESSAGE, "magic", "magic byte-swapped");
    free(msg);
}

Test(wire_header, other_protocol_version, .timeout = 30)
{
    static const uint16_t protos[] = {0, CKS_WIRE_PROTO + 1, 0x0100 | CKS_WIRE_PROTO,
                                      0xffff};
    size_t len;
    uint8_t *msg = tw_valid_put(&len);

    for (unsigned i = 0; i < CKS_ARRAY_SIZE(protos); i++) {
        tw_put_be(msg + 4, protos[i], 2);
        tw_expect_fail(msg, len, CKS_ERR_PROTOCOL, "version", "other protocol");
        /* a newer peer may have new types: the version is reported first */
        tw_put_be(msg + 6, 0xffff, 2);
        tw_expect_fail(msg, len, CKS_ERR_PROTOCOL, "version", "other protocol, new type");
        tw_put_be(msg + 6, CKS_MSG_PUT, 2);
    }
    free(msg);
}

Test(wire_header, unknown_type, .timeout = 30)
{
    static const uint16_t types[] = {0, CKS_MSG_LAST, CKS_MSG_LAST + 1,
                                     0x0100 | CKS_MSG_PUT, 0x8000, 0xffff};
    size_t len;
    uint8_t *msg = tw_valid_put(&len);

    for (unsigned i = 0; i < CKS_ARRAY_SIZE(types); i++) {
        char what[32];
        snprintf(what, sizeof(what), "type 0x%x", types[i]);
        tw_put_be(msg + 6, types[i], 2);
        tw_expect_fail(msg, len, CKS_ERR_UNSUPPORTED, "unknown message type", what);
    }
    free(msg);
}

Test(wire_header, flags, .timeout = 30)
{
    size_t len;
    uint8_t *msg = tw_valid_put(&len);
    tw_dec_t d;

    for (uint32_t f = 0; f < 128; f++) { /* PAYLOAD, PAGE, RMA, CHECKED, BACKGROUND, RESENT,
                                             PARTS */
        tw_put_be(msg + 8, f, 4);
        tw_decode(&d, msg, len);
        cr_assert_eq(d.st, CKS_OK, "flags %u: %s", f, d.err);
        cr_assert_eq(d.hdr.flags, f);
        tw_dec_free(&d);
    }
    cr_assert_eq(CKS_WIRE_F_KNOWN, 127u, "a new flag: the loops above and below must know it");
    for (unsigned bit = 7; bit < 32; bit++) {
        tw_put_be(msg + 8, (1u << bit) | CKS_WIRE_F_PAYLOAD, 4);
        tw_expect_fail(msg, len, CKS_ERR_BAD_MESSAGE, "flags", "unknown flag");
    }
    free(msg);
}

Test(wire_header, body_len_mismatch, .timeout = 30)
{
    size_t len;
    uint8_t *msg = tw_valid_put(&len);
    uint32_t blen = (uint32_t)(len - CKS_WIRE_HDR_LEN);
    static const char *why = "body length";

    /* header claims more, or less, than the message holds */
    static const int64_t deltas[] = {1, -1, 2, -2, 4096, INT32_MAX};
    for (unsigned i = 0; i < CKS_ARRAY_SIZE(deltas); i++) {
        tw_put_be(msg + 12, (uint32_t)(blen + deltas[i]), 4);
        tw_expect_fail(msg, len, CKS_ERR_BAD_MESSAGE, why, "body_len off");
    }
    tw_put_be(msg + 12, 0, 4);
    tw_expect_fail(msg, len, CKS_ERR_BAD_MESSAGE, why, "body_len 0");
    tw_put_be(msg + 12, UINT32_MAX, 4);
    tw_expect_fail(msg, len, CKS_ERR_BAD_MESSAGE, why, "body_len UINT32_MAX");
    tw_put_be(msg + 12, blen, 4);
    /* message longer or shorter than the header says */
    uint8_t *longer = malloc(len + 1);
    cr_assert_not_null(longer);
    memcpy(longer, msg, len);
    longer[len] = 0xc0;
    tw_expect_fail(longer, len + 1, CKS_ERR_BAD_MESSAGE, why, "one byte more");
    tw_expect_fail(msg, len - 1, CKS_ERR_BAD_MESSAGE, why, "one byte less");
    free(longer);

    /* the body bound: CKS_WIRE_MAX_BODY passes the header check (and fails
     * in the body: trailing bytes), one more does not */
    uint8_t *big = calloc(1, CKS_WIRE_HDR_LEN + CKS_WIRE_MAX_BODY + 1);
    cr_assert_not_null(big);
    memcpy(big, msg, len);
    tw_put_be(big + 12, CKS_WIRE_MAX_BODY, 4);
    tw_expect_fail(big, CKS_WIRE_HDR_LEN + CKS_WIRE_MAX_BODY, CKS_ERR_BAD_MESSAGE,
                   "trailing", "max body");
    tw_put_be(big + 12, CKS_WIRE_MAX_BODY + 1, 4);
    tw_expect_fail(big, CKS_WIRE_HDR_LEN + CKS_WIRE_MAX_BODY + 1, CKS_ERR_BAD_MESSAGE,
                   why, "max body + 1");
    free(big);
    free(msg);
}

Test(wire_header, error_text_buffer, .timeout = 30)
{
    size_t len;
    uint8_t *msg = tw_valid_put(&len);
    char err[8];
    cks_wire_hdr_t hdr;
    cks_msg_any_t body;

    msg[0] ^= 0xff;
    memset(err, 'x', sizeof(err));
    cr_assert_eq(cks_wire_unpack(msg, len, &hdr, &body, err, 1), CKS_ERR_BAD_MESSAGE);
    cr_assert_eq(err[0], '\0');
    cr_assert_eq(err[1], 'x', "wrote past err_len");
    memset(err, 'x', sizeof(err));
    cr_assert_eq(cks_wire_unpack(msg, len, &hdr, &body, err, 5), CKS_ERR_BAD_MESSAGE);
    cr_assert_eq(strlen(err), 4);
    cr_assert_eq(err[5], 'x', "wrote past err_len");
    memset(err, 'x', sizeof(err));
    cr_assert_eq(cks_wire_unpack(msg, len, &hdr, &body, err, 0), CKS_ERR_BAD_MESSAGE);
    cr_assert_eq(err[0], 'x', "wrote into a zero-length err");
    cr_assert_eq(cks_wire_unpack(msg, len, &hdr, &body, NULL, 0), CKS_ERR_BAD_MESSAGE);
    cr_assert_eq(cks_wire_unpack(msg, len, &hdr, &body, NULL, 100), CKS_ERR_BAD_MESSAGE);
    free(msg);
}

/* ======================================================================
 * Body checks on hand-built bodies
 * ====================================================================== */

typedef enum {
    TW_C_TYPE      = 1u << 0, /* other scalar kinds: nil, bool, str, bin, ints */
    TW_C_RANGE     = 1u << 1, /* ints out of a field's range (and in it) */
    TW_C_CONTAINER = 1u << 2, /* arrays and maps */
    TW_C_EXT       = 1u << 3, /* ext, fixext, the never-used byte */
    TW_C_FLOAT     = 1u << 4,
} tw_cat_t;

/* One msgpack element put where a field is expected. */
typedef struct {
    const char *what;
    unsigned cat;
    uint8_t len;
    uint8_t bytes[20];
    unsigned accept; /* field kinds that take it */
    uint64_t u;      /* value when accepted by a U32/U64 field */
    int64_t i;       /* value when accepted by an I32 field */
    uint8_t shdr;    /* strings: header bytes before the text */
    uint8_t slen;
} tw_elem_t;

static const tw_elem_t tw_elems[] = {
    {"nil", TW_C_TYPE, 1, {0xc0}, 0, 0, 0, 0, 0},
    {"false", TW_C_TYPE, 1, {0xc2}, 0, 0, 0, 0, 0},
    {"true", TW_C_TYPE, 1, {0xc3}, 0, 0, 0, 0, 0},
    {"fixstr \"ab\"", TW_C_TYPE, 3, {0xa2, 'a', 'b'}, TW_K(WM_STR), 0, 0, 1, 2},
    {"str8 \"\"", TW_C_TYPE, 2, {0xd9, 0}, TW_K(WM_STR), 0, 0, 2, 0},
    {"str16 \"a\"", TW_C_TYPE, 4, {0xda, 0, 1, 'a'}, TW_K(WM_STR), 0, 0, 3, 1},
    {"str32 \"a\"", TW_C_TYPE, 6, {0xdb, 0, 0, 0, 1, 'a'}, TW_K(WM_STR), 0, 0, 5, 1},
    {"bin8 \"ab\"", TW_C_TYPE, 4, {0xc4, 2, 'a', 'b'}, TW_K(WM_BIN), 0, 0, 2, 2},
    {"bin16 \"\"", TW_C_TYPE, 3, {0xc5, 0, 0}, TW_K(WM_BIN), 0, 0, 3, 0},
    {"bin32 \"a\"", TW_C_TYPE, 6, {0xc6, 0, 0, 0, 1, 'a'}, TW_K(WM_BIN), 0, 0, 5, 1},
    {"positive fixint 5", TW_C_TYPE, 1, {0x05}, TW_INTS, 5, 5, 0, 0},
    {"negative fixint -1", TW_C_TYPE | TW_C_RANGE, 1, {0xff}, TW_K(WM_I32), 0, -1, 0, 0},
    {"int8 -128", TW_C_RANGE, 2, {0xd0, 0x80}, TW_K(WM_I32), 0, -128, 0, 0},
    {"int32 INT32_MIN", TW_C_RANGE, 5, {0xd2, 0x80, 0, 0, 0}, TW_K(WM_I32), 0, INT32_MIN,
     0, 0},
    {"int64 INT32_MIN", TW_C_RANGE, 9, {0xd3, 0xff, 0xff, 0xff, 0xff, 0x80, 0, 0, 0},
     TW_K(WM_I32), 0, INT32_MIN, 0, 0},
    {"int64 INT32_MIN-1", TW_C_RANGE, 9,
     {0xd3, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff}, 0, 0, 0, 0, 0},
    {"int64 INT64_MIN", TW_C_RANGE, 9, {0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0, 0, 0},
    {"int64 +5", TW_C_RANGE, 9, {0xd3, 0, 0, 0, 0, 0, 0, 0, 5}, TW_INTS, 5, 5, 0, 0},
    {"uint8 255", TW_C_RANGE, 2, {0xcc, 0xff}, TW_INTS, 255, 255, 0, 0},
    {"uint32 INT32_MAX", TW_C_RANGE, 5, {0xce, 0x7f, 0xff, 0xff, 0xff}, TW_INTS,
     INT32_MAX, INT32_MAX, 0, 0},
    {"uint32 INT32_MAX+1", TW_C_RANGE, 5, {0xce, 0x80, 0, 0, 0},
     TW_K(WM_U32) | TW_K(WM_U64), 0x80000000u, 0, 0, 0},
    {"uint32 UINT32_MAX", TW_C_RANGE, 5, {0xce, 0xff, 0xff, 0xff, 0xff},
     TW_K(WM_U32) | TW_K(WM_U64), UINT32_MAX, 0, 0, 0},
    {"uint64 UINT32_MAX", TW_C_RANGE, 9, {0xcf, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
     TW_K(WM_U32) | TW_K(WM_U64), UINT32_MAX, 0, 0, 0},
    {"uint64 UINT32_MAX+1", TW_C_RANGE, 9, {0xcf, 0, 0, 0, 1, 0, 0, 0, 0}, TW_K(WM_U64),
     (uint64_t)UINT32_MAX + 1, 0, 0, 0},
    {"uint64 INT64_MAX+1", TW_C_RANGE, 9, {0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0},
     TW_K(WM_U64), (uint64_t)INT64_MAX + 1, 0, 0, 0},
    {"uint64 UINT64_MAX", TW_C_RANGE, 9,
     {0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, TW_K(WM_U64), UINT64_MAX, 0,
     0, 0},
    {"fixarray []", TW_C_CONTAINER, 1, {0x90}, 0, 0, 0, 0, 0},
    {"fixarray [1]", TW_C_CONTAINER, 2, {0x91, 0x01}, 0, 0, 0, 0, 0},
    {"fixarray [[]]", TW_C_CONTAINER, 2, {0x91, 0x90}, 0, 0, 0, 0, 0},
    {"array16 [1]", TW_C_CONTAINER, 4, {0xdc, 0, 1, 0x01}, 0, 0, 0, 0, 0},
    {"array32 [1]", TW_C_CONTAINER, 6, {0xdd, 0, 0, 0, 1, 0x01}, 0, 0, 0, 0, 0},
    {"array32 []", TW_C_CONTAINER, 5, {0xdd, 0, 0, 0, 0}, 0, 0, 0, 0, 0},
    {"fixmap {}", TW_C_CONTAINER, 1, {0x80}, 0, 0, 0, 0, 0},
    {"fixmap {1:2}", TW_C_CONTAINER, 3, {0x81, 1, 2}, 0, 0, 0, 0, 0},
    {"map16 {}", TW_C_CONTAINER, 3, {0xde, 0, 0}, 0, 0, 0, 0, 0},
    {"map32 {1:2}", TW_C_CONTAINER, 7, {0xdf, 0, 0, 0, 1, 1, 2}, 0, 0, 0, 0, 0},
    {"fixext1", TW_C_EXT, 3, {0xd4, 1, 0}, 0, 0, 0, 0, 0},
    {"fixext2", TW_C_EXT, 4, {0xd5, 1, 0, 0}, 0, 0, 0, 0, 0},
    {"fixext4 (timestamp)", TW_C_EXT, 6, {0xd6, 0xff, 0, 0, 0, 0}, 0, 0, 0, 0, 0},
    {"fixext8", TW_C_EXT, 10, {0xd7, 1, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0, 0, 0},
    {"fixext16", TW_C_EXT, 18, {0xd8, 1}, 0, 0, 0, 0, 0},
    {"ext8", TW_C_EXT, 4, {0xc7, 1, 1, 0}, 0, 0, 0, 0, 0},
    {"ext8 empty", TW_C_EXT, 3, {0xc7, 0, 1}, 0, 0, 0, 0, 0},
    {"ext16", TW_C_EXT, 5, {0xc8, 0, 1, 1, 0}, 0, 0, 0, 0, 0},
    {"ext32", TW_C_EXT, 7, {0xc9, 0, 0, 0, 1, 1, 0}, 0, 0, 0, 0, 0},
    {"never-used 0xc1", TW_C_EXT, 1, {0xc1}, 0, 0, 0, 0, 0},
    {"float32 1.0", TW_C_FLOAT, 5, {0xca, 0x3f, 0x80, 0, 0}, 0, 0, 0, 0, 0},
    {"float32 0.0", TW_C_FLOAT, 5, {0xca, 0, 0, 0, 0}, 0, 0, 0, 0, 0},
    {"float64 1.0", TW_C_FLOAT, 9, {0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}, 0, 0, 0, 0, 0},
    {"float64 -0.0", TW_C_FLOAT, 9, {0xcb, 0x80, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0, 0, 0},
};

/** Body b with field f set to what element e decodes to (strings are
 *  compared by content, so they may point into e). */
static void tw_expect_value(const wm_field_t *f, const tw_elem_t *e, wm_body_t *b)
{
    void *p = (uint8_t *)b + f->off;
    switch (f->kind) {
        case WM_U32:
            *(uint32_t *)p = (uint32_t)e->u;
            break;
        case WM_I32:
            *(int32_t *)p = (int32_t)e->i;
            break;
        case WM_U64:
            *(uint64_t *)p = e->u;
            break;
        case WM_STR:
        case WM_BIN:
            ((cks_wire_str_t *)p)->ptr = (const char *)e->bytes + e->shdr;
            ((cks_wire_str_t *)p)->len = e->slen;
            break;
    }
}

/** Put every element of categories `cats` into every field of every
 *  message and entry; each must be accepted (with its value) exactly when
 *  the field's kind takes it. Returns {accepted, rejected}. */
static void tw_subst_all(unsigned cats, uint64_t seed, unsigned counts[2])
{
    uint64_t rng = seed;

    counts[0] = counts[1] = 0;
    for (unsigned t = 0; t < TW_NTARGETS; t++) {
        tw_target_t tg = tw_target(t);
        wm_fill(tg.m, &tw_sample, WM_FILL_RANDOM, &rng);
        for (unsigned i = 0; i < tg.m->nfields; i++) {
            const wm_field_t *f = &tg.m->fields[i];
            for (unsigned k = 0; k < CKS_ARRAY_SIZE(tw_elems); k++) {
                const tw_elem_t *e = &tw_elems[k];
                tw_edit_t ed       = tw_no_edit;
                msgpack_sbuffer sb;
                wm_body_t out;
                uint8_t *keep;
                char err[TW_ERR_LEN];
                if (!(e->cat & cats)) {
                    continue;
                }
                ed.at      = (int)i;
                ed.raw     = e->bytes;
                ed.raw_len = e->len;
                tw_ref_body(tg.m, &tw_sample.b, &ed, &sb);
                cks_status_t st = tw_target_decode(&tg, sb.data, sb.size, &out, &keep,
                                                   err, sizeof(err));
                if (e->accept & TW_K(f->kind)) {
                    TW_CHECK(st == CKS_OK, "%s.%s = %s: refused (%s)",
                             tw_target_name(&tg), f->name, e->what, err);
                    memcpy(&tw_sample2.b, &tw_sample.b, sizeof(tw_sample2.b));
                    tw_expect_value(f, e, &tw_sample2.b);
                    int d = wm_diff(tg.m, &tw_sample2.b, &out);
                    TW_CHECK(d < 0, "%s.%s = %s: field %s decoded wrong",
                             tw_target_name(&tg), f->name, e->what,
                             tg.m->fields[d < 0 ? 0 : d].name);
                    counts[0]++;
                } else {
                    TW_CHECK(st == CKS_ERR_BAD_MESSAGE, "%s.%s = %s: status %d, expected "
                             "BAD_MESSAGE",
                             tw_target_name(&tg), f->name, e->what, st);
                    counts[1]++;
                }
                free(keep);
                msgpack_sbuffer_destroy(&sb);
            }
        }
    }
    cr_log_info("%u accepted, %u rejected", counts[0], counts[1]);
}

/* tw_subst_all() of the categories `cats`: some substitutions must be
 * rejected, and some accepted (`some_accepted`) or none. */
static void tw_subst_expect(unsigned cats, uint64_t seed, int some_accepted)
{
    unsigned counts[2];
    tw_subst_all(cats, seed, counts);
    if (some_accepted) {
        cr_assert_gt(counts[0], 0, "no substitution was accepted");
    } else {
        cr_assert_eq(counts[0], 0, "%u substitutions were accepted", counts[0]);
    }
    cr_assert_gt(counts[1], 0, "no substitution was rejected");
}

Test(wire_body, wrong_type_every_field, .timeout = 60)
{
    tw_subst_expect(TW_C_TYPE, 11, 1);
}

Test(wire_body, int_ranges, .timeout = 60)
{
    /* u32 > UINT32_MAX, i32 out of range, negatives in unsigned fields */
    tw_subst_expect(TW_C_RANGE, 12, 1);
}

Test(wire_body, containers_where_scalar_expected, .timeout = 60)
{
    tw_subst_expect(TW_C_CONTAINER, 13, 0);
}

Test(wire_body, ext_and_float_elements, .timeout = 60)
{
    tw_subst_expect(TW_C_EXT | TW_C_FLOAT, 14, 0);
}

/** A string element of `len` bytes in the given msgpack encoding
 *  (0: msgpack-c's shortest). */
static void tw_str_elem(wm_kind_t kind, uint32_t len, uint8_t marker, msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    uint8_t h[5];
    unsigned n = 0;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    switch (marker) {
        case 0:
            if (kind == WM_STR) {
                msgpack_pack_str(&pk, len);
            } else {
                msgpack_pack_bin(&pk, len);
            }
            break;
        case 0xd9:
        case 0xc4:
            n = 1;
            break;
        case 0xda:
        case 0xc5:
            n = 2;
            break;
        default:
            n = 4;
            break;
    }
    if (n > 0) {
        h[0] = marker;
        tw_put_be(h + 1, len, n);
        msgpack_sbuffer_write(sb, (const char *)h, 1 + n);
    }
    for (uint32_t j = 0; j < len; j++) {
        char c = (char)('a' + j % 26);
        msgpack_sbuffer_write(sb, &c, 1);
    }
}

Test(wire_body, strings_at_and_over_their_bound, .timeout = 60)
{
    uint64_t rng   = 15;
    unsigned tried = 0;

    for (unsigned t = 0; t < TW_NTARGETS; t++) {
        tw_target_t tg = tw_target(t);
        wm_fill(tg.m, &tw_sample, WM_FILL_RANDOM, &rng);
        for (unsigned i = 0; i < tg.m->nfields; i++) {
            const wm_field_t *f = &tg.m->fields[i];
            if (f->kind != WM_STR && f->kind != WM_BIN) {
                continue;
            }
            const uint8_t markers_str[] = {0, 0xd9, 0xda, 0xdb};
            const uint8_t markers_bin[] = {0, 0xc4, 0xc5, 0xc6};
            for (unsigned mk = 0; mk < 4; mk++) {
                uint8_t marker = f->kind == WM_STR ? markers_str[mk] : markers_bin[mk];
                for (uint32_t len = f->max; len <= f->max + 1u; len++) {
                    msgpack_sbuffer el, sb;
                    tw_edit_t ed = tw_no_edit;
                    wm_body_t out;
                    uint8_t *keep;
                    char err[TW_ERR_LEN];
                    if ((marker == 0xd9 || marker == 0xc4) && len > 255) {
                        continue;
                    }
                    tw_str_elem(f->kind, len, marker, &el);
                    ed.at      = (int)i;
                    ed.raw     = el.data;
                    ed.raw_len = el.size;
                    tw_ref_body(tg.m, &tw_sample.b, &ed, &sb);
                    cks_status_t st = tw_target_decode(&tg, sb.data, sb.size, &out, &keep,
                                                       err, sizeof(err));
                    if (len <= f->max) {
                        cr_assert_eq(st, CKS_OK,
                                     "%s.%s: %u bytes (marker 0x%x) refused: %s",
                                     tw_target_name(&tg), f->name, len, marker, err);
                        const cks_wire_str_t *s =
                            (const void *)((const uint8_t *)&out + f->off);
                        cr_assert_eq(s->len, len);
                        cr_assert_eq(s->ptr[len - 1], (char)('a' + (len - 1) % 26));
                    } else {
                        cr_assert_eq(st, CKS_ERR_BAD_MESSAGE,
                                     "%s.%s: %u bytes (marker 0x%x) accepted, max %u",
                                     tw_target_name(&tg), f->name, len, marker, f->max);
                        cr_assert(tg.is_entry || strstr(err, "too long") != NULL, "%s",
                                  err);
                    }
                    tried++;
                    free(keep);
                    msgpack_sbuffer_destroy(&sb);
                    msgpack_sbuffer_destroy(&el);
                }
            }
        }
    }
    cr_assert_gt(tried, 0);
}

Test(wire_body, lengths_claiming_more_than_the_buffer, .timeout = 60)
{
    /* a length (or a fixed-size scalar) that runs past the body's end, put
     * at every field position, the body ending right after it */
    static const struct {
        uint8_t marker;
        unsigned n; /* length bytes; 0: fixstr (length in the marker) */
        uint32_t claim;
    } claims[] = {
        {0xa1, 0, 1},        {0xbf, 0, 31},          {0xd9, 1, 32},
        {0xd9, 1, 255},      {0xda, 2, 256},         {0xda, 2, 65535},
        {0xdb, 4, 65536},    {0xdb, 4, UINT32_MAX},  {0xdb, 4, 0x80000000u},
        {0xc4, 1, 1},        {0xc4, 1, 255},         {0xc5, 2, 65535},
        {0xc6, 4, UINT32_MAX}, {0xc6, 4, 4000},
    };
    static const uint8_t scalars[] = {0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1,
                                      0xd2, 0xd3, 0xca, 0xcb};
    static uint8_t raw[2100];
    unsigned tried = 0;

    for (unsigned t = 0; t < TW_NTARGETS; t++) {
        tw_target_t tg = tw_target(t);
        wm_fill(tg.m, &tw_sample, WM_FILL_MIN, NULL);
        for (unsigned i = 0; i < tg.m->nfields; i++) {
            for (unsigned c = 0; c < CKS_ARRAY_SIZE(claims) + CKS_ARRAY_SIZE(scalars);
                 c++) {
                size_t rlen;
                if (c < CKS_ARRAY_SIZE(claims)) {
                    /* header claiming `claim` bytes, then claim - 1 (at most
                     * 2000) bytes of text */
                    unsigned n = claims[c].n;
                    raw[0]     = claims[c].marker;
                    tw_put_be(raw + 1, claims[c].claim, n);
                    size_t text = CKS_MIN((size_t)claims[c].claim - 1, (size_t)2000);
                    memset(raw + 1 + n, 'z', text);
                    rlen = 1 + n + text;
                } else {
                    /* a scalar missing its last byte */
                    uint8_t mk = scalars[c - CKS_ARRAY_SIZE(claims)];
                    size_t need = mk == 0xca   ? 4
                                  : mk == 0xcb ? 8
                                               : (size_t)1 << ((mk - 0xcc) & 3);
                    raw[0]      = mk;
                    memset(raw + 1, 0x01, need - 1);
                    rlen = need;
                }
                tw_edit_t ed = tw_no_edit;
                msgpack_sbuffer sb;
                wm_body_t out;
                uint8_t *keep;
                char err[TW_ERR_LEN];
                ed.at      = (int)i;
                ed.raw     = raw;
                ed.raw_len = rlen;
                ed.stop    = 1;
                tw_ref_body(tg.m, &tw_sample.b, &ed, &sb);
                cr_assert_leq(sb.size, CKS_WIRE_MAX_BODY);
                cks_status_t st = tw_target_decode(&tg, sb.data, sb.size, &out, &keep,
                                                   err, sizeof(err));
                cr_assert_eq(st, CKS_ERR_BAD_MESSAGE, "%s field %u, claim #%u: status %d",
                             tw_target_name(&tg), i, c, st);
                tried++;
                free(keep);
                msgpack_sbuffer_destroy(&sb);
            }
        }
    }
    cr_assert_gt(tried, 0);
}

Test(wire_body, wrong_field_count_and_not_an_array, .timeout = 60)
{
    uint64_t rng = 16;

    for (unsigned t = 0; t < TW_NTARGETS; t++) {
        tw_target_t tg = tw_target(t);
        unsigned n     = tg.m->nfields;
        struct {
            int count, array16, array32;
            cks_status_t st;
        } cases[] = {
            {0, 0, 0, CKS_ERR_BAD_MESSAGE},
            {(int)n - 1, 0, 0, CKS_ERR_BAD_MESSAGE},
            {(int)n + 1, 0, 0, CKS_ERR_BAD_MESSAGE},
            {15, 0, 0, n == 15 ? CKS_OK : CKS_ERR_BAD_MESSAGE},
            {(int)n, 1, 0, CKS_OK}, /* array16 is msgpack too */
            {(int)n + 1, 1, 0, CKS_ERR_BAD_MESSAGE},
            {(int)n + 256, 1, 0, CKS_ERR_BAD_MESSAGE},
            {(int)n, 0, 1, CKS_ERR_BAD_MESSAGE}, /* array32 is refused */
        };
        wm_fill(tg.m, &tw_sample, WM_FILL_RANDOM, &rng);
        for (unsigned c = 0; c < CKS_ARRAY_SIZE(cases); c++) {
            tw_edit_t ed = tw_no_edit;
            msgpack_sbuffer sb;
            wm_body_t out;
            uint8_t *keep;
            char err[TW_ERR_LEN];
            if (cases[c].count < 0) {
                continue;
            }
            ed.count   = cases[c].count;
            ed.array16 = cases[c].array16;
            ed.array32 = cases[c].array32;
            tw_ref_body(tg.m, &tw_sample.b, &ed, &sb);
            cks_status_t st =
                tw_target_decode(&tg, sb.data, sb.size, &out, &keep, err, sizeof(err));
            cr_assert_eq(st, cases[c].st,
                         "%s: count %d (array16 %d, array32 %d): %d (%s)",
                         tw_target_name(&tg), cases[c].count, cases[c].array16,
                         cases[c].array32, st, err);
            if (st == CKS_OK) {
                cr_assert_lt(wm_diff(tg.m, &tw_sample.b, &out), 0);
            } else if (!tg.is_entry && cases[c].count != (int)n) {
                cr_assert(strstr(err, "number of fields") != NULL, "%s", err);
            }
            free(keep);
            msgpack_sbuffer_destroy(&sb);
        }

        /* bodies that are not arrays at all, and an array16 cut short */
        static const struct {
            uint8_t len, bytes[4];
        } others[] = {
            {1, {0x80}}, {1, {0xc0}}, {1, {0x01}}, {2, {0xa1, 'x'}}, {2, {0xdc, 0}},
            {1, {0xdc}}, {3, {0xde, 0, 0}}, {1, {0xc1}},
        };
        for (unsigned c = 0; c < CKS_ARRAY_SIZE(others); c++) {
            wm_body_t out;
            uint8_t *keep;
            char err[TW_ERR_LEN];
            cks_status_t st = tw_target_decode(&tg, others[c].bytes, others[c].len, &out,
                                               &keep, err, sizeof(err));
            cr_assert_eq(st, CKS_ERR_BAD_MESSAGE, "%s: body #%u accepted",
                         tw_target_name(&tg), c);
            free(keep);
        }
    }
}

Test(wire_body, empty_body, .timeout = 30)
{
    for (unsigned t = 0; t < TW_NTYPES; t++) {
        size_t len;
        uint8_t *msg = tw_msg(tw_types[t], 0, 1, NULL, 0, &len);
        tw_expect_fail(msg, len, CKS_ERR_BAD_MESSAGE, "empty", cks_msg_name(tw_types[t]));
        free(msg);
    }
}

Test(wire_body, trailing_bytes, .timeout = 60)
{
    uint64_t rng = 17;

    for (unsigned t = 0; t < TW_NTYPES; t++) {
        unsigned type     = tw_types[t];
        const wm_msg_t *m = &wm_msgs[type];
        msgpack_sbuffer sb;
        size_t len;

        wm_fill(m, &tw_sample, WM_FILL_RANDOM, &rng);
        tw_ref_body(m, &tw_sample.b, &tw_no_edit, &sb);
        size_t blen = sb.size;
        if (2 * blen > CKS_WIRE_MAX_BODY) {
            wm_fill(m, &tw_sample, WM_FILL_MIN, NULL);
            msgpack_sbuffer_destroy(&sb);
            tw_ref_body(m, &tw_sample.b, &tw_no_edit, &sb);
            blen = sb.size;
        }
        /* one nil, a never-used byte, then the whole body again */
        static const uint8_t extra[] = {0xc0, 0xc1};
        for (unsigned x = 0; x < 3; x++) {
            if (x < 2) {
                msgpack_sbuffer_write(&sb, (const char *)&extra[x], 1);
            } else {
                msgpack_sbuffer_write(&sb, sb.data, blen);
            }
            uint8_t *msg = tw_msg(type, 0, 1, sb.data, sb.size, &len);
            tw_expect_fail(msg, len, CKS_ERR_BAD_MESSAGE, "trailing", m->name);
            free(msg);
            sb.size = blen;
        }
        /* and without them it decodes */
        uint8_t *msg = tw_msg(type, 0, 1, sb.data, blen, &len);
        tw_dec_t d;
        tw_decode(&d, msg, len);
        cr_assert_eq(d.st, CKS_OK, "%s: %s", m->name, d.err);
        cr_assert_lt(wm_diff(m, &tw_sample.b, &d.body), 0);
        tw_dec_free(&d);
        free(msg);
        msgpack_sbuffer_destroy(&sb);
    }
}

Test(wire_body, truncation_at_every_byte, .timeout = 120)
{
    uint64_t rng = tw_seed("truncation_at_every_byte", 18);
    static uint8_t buf[TW_BUF_LEN];
    unsigned tried = 0;

    for (unsigned t = 0; t < TW_NTYPES; t++) {
        for (unsigned v = 0; v < 2; v++) {
            unsigned type = tw_types[t];
            size_t len    = 0;
            wm_fill(&wm_msgs[type], &tw_sample, v == 0 ? WM_FILL_MAX : WM_FILL_RANDOM,
                    &rng);
            cr_assert_eq(cks_wire_pack(type, 0, 3, &tw_sample.b, buf, sizeof(buf), &len),
                         CKS_OK);
            for (size_t cut = 0; cut < len; cut++) {
                /* the prefix as it is (header body_len now too long) */
                tw_expect_fail(buf, cut, CKS_ERR_BAD_MESSAGE, NULL, cks_msg_name(type));
                /* the prefix with a header that agrees: a truncated body */
                if (cut >= CKS_WIRE_HDR_LEN) {
                    uint8_t *p = tw_dup(buf, cut);
                    tw_put_be(p + 12, cut - CKS_WIRE_HDR_LEN, 4);
                    tw_expect_fail(p, cut, CKS_ERR_BAD_MESSAGE, NULL, cks_msg_name(type));
                    free(p);
                }
                tried++;
            }
            tw_dec_t d;
            tw_decode(&d, buf, len);
            cr_assert_eq(d.st, CKS_OK, "%s", d.err);
            tw_dec_free(&d);
        }
    }

    /* pages: the entries before the cut decode, the one across it fails */
    uint8_t *page = malloc(CKS_WIRE_MAX_PAGE);
    cr_assert_not_null(page);
    for (unsigned kind = 0; kind < WM_NENTRIES; kind++) {
        size_t ends[5], len = 0;
        for (unsigned i = 0; i < 5; i++) {
            wm_fill(&wm_entries[kind], &tw_sample, i == 0 ? WM_FILL_MAX : WM_FILL_RANDOM,
                    &rng);
            cr_assert_eq(cks_wire_entry_pack((cks_wire_entry_t)kind, &tw_sample.b, page,
                                             CKS_WIRE_MAX_PAGE, &len),
                         CKS_OK);
            ends[i] = len;
        }
        for (size_t cut = 0; cut < len; cut++) {
            uint8_t *pg = tw_dup(page, cut);
            size_t off = 0, whole = 0;
            unsigned n = 0;
            wm_body_t e;
            while (whole < 5 && ends[whole] <= cut) {
                whole++;
            }
            while (tw_entry_decode(kind, pg, cut, &off, &e) == CKS_OK) {
                n++;
                TW_CHECK(n <= whole, "%s: cut %zu: entry %u decoded past the cut",
                         wm_entries[kind].name, cut, n);
            }
            TW_CHECK(n == whole, "%s: cut %zu: %u entries, expected %zu",
                     wm_entries[kind].name, cut, n, whole);
            TW_CHECK(off == (whole ? ends[whole - 1] : 0), "%s: cut %zu: offset %zu",
                     wm_entries[kind].name, cut, off);
            free(pg);
            tried++;
        }
    }
    free(page);
    cr_log_info("%u truncations", tried);
    cr_assert_gt(tried, 1000);
}

/* ======================================================================
 * Packing errors
 * ====================================================================== */

Test(wire_pack, unknown_type_and_bad_arguments, .timeout = 30)
{
    static const unsigned bad[] = {0, CKS_MSG_LAST, CKS_MSG_LAST + 1,
                                   0x10000u + CKS_MSG_PUT, UINT32_MAX};
    static uint8_t buf[TW_BUF_LEN];
    size_t len = 12345;

    wm_fill(&wm_msgs[CKS_MSG_GET_REPLY], &tw_sample, WM_FILL_MAX, NULL);
    for (unsigned i = 0; i < CKS_ARRAY_SIZE(bad); i++) {
        cr_assert_eq(cks_wire_pack(bad[i], 0, 1, &tw_sample.b, buf, sizeof(buf), &len),
                     CKS_ERR_INVALID_PARAM, "type %u packed", bad[i]);
    }
    cr_assert_eq(cks_wire_pack(CKS_MSG_GET_REPLY, 0, 1, NULL, buf, sizeof(buf), &len),
                 CKS_ERR_INVALID_PARAM);
    for (size_t bl = 0; bl < CKS_WIRE_HDR_LEN; bl++) {
        cr_assert_eq(cks_wire_pack(CKS_MSG_GET_REPLY, 0, 1, &tw_sample.b, buf, bl, &len),
                     CKS_ERR_INVALID_PARAM);
    }
    cr_assert_eq(len, 12345, "len_p written by a failed pack");

    size_t off = 0;
    static const unsigned bad_kinds[] = {WM_NENTRIES, 100, UINT32_MAX};
    for (unsigned i = 0; i < CKS_ARRAY_SIZE(bad_kinds); i++) {
        cr_assert_eq(cks_wire_entry_pack((cks_wire_entry_t)bad_kinds[i], &tw_sample.b,
                                         buf, sizeof(buf), &off),
                     CKS_ERR_INVALID_PARAM);
    }
    off = 11;
    cr_assert_eq(cks_wire_entry_pack(CKS_WIRE_ENTRY_JOB, &tw_sample.b, buf, 10, &off),
                 CKS_ERR_INVALID_PARAM, "offset past the buffer accepted");
    cr_assert_eq(off, 11);
}

Test(wire_pack, strings_over_their_bound, .timeout = 30)
{
    static uint8_t buf[TW_BUF_LEN];
    unsigned tried = 0;

    for (unsigned t = 0; t < TW_NTARGETS; t++) {
        tw_target_t tg = tw_target(t);
        for (unsigned i = 0; i < tg.m->nfields; i++) {
            const wm_field_t *f = &tg.m->fields[i];
            cks_wire_str_t *s;
            if (f->kind != WM_STR && f->kind != WM_BIN) {
                continue;
            }
            for (unsigned c = 0; c < 3; c++) {
                size_t len = 777, off = 0;
                cks_status_t st;
                wm_fill(tg.m, &tw_sample, WM_FILL_MAX, NULL);
                s = (void *)((uint8_t *)&tw_sample.b + f->off);
                if (c == 0) {
                    s->len = f->max + 1u; /* the storage holds max + 1 */
                } else if (c == 1) {
                    s->len = UINT32_MAX;
                } else {
                    s->ptr = NULL; /* text missing */
                    s->len = 3;
                }
                memset(buf, TW_CANARY, sizeof(buf));
                st = tg.is_entry
                         ? cks_wire_entry_pack((cks_wire_entry_t)tg.id, &tw_sample.b, buf,
                                               sizeof(buf), &off)
                         : cks_wire_pack(tg.id, 0, 1, &tw_sample.b, buf, sizeof(buf),
                                         &len);
                cr_assert_eq(st, CKS_ERR_INVALID_PARAM, "%s.%s: case %u packed",
                             tw_target_name(&tg), f->name, c);
                cr_assert(len == 777 && off == 0, "%s: outputs written on failure",
                          tw_target_name(&tg));
                cr_assert(tg.is_entry || buf[0] == TW_CANARY,
                          "%s: header written on failure", tw_target_name(&tg));
                tried++;
            }
        }
    }
    cr_assert_gt(tried, 0);
}

Test(wire_pack, bodies_that_do_not_fit, .timeout = 60)
{
    static uint8_t buf[TW_BUF_LEN + 64];
    unsigned tried = 0;

    for (unsigned t = 0; t < TW_NTARGETS; t++) {
        tw_target_t tg = tw_target(t);
        size_t need = 0, base = tg.is_entry ? 7 : 0;
        cks_status_t st;

        wm_fill(tg.m, &tw_sample, WM_FILL_MAX, NULL);
        if (tg.is_entry) {
            need = base;
            st   = cks_wire_entry_pack((cks_wire_entry_t)tg.id, &tw_sample.b, buf,
                                       TW_BUF_LEN, &need);
        } else {
            st = cks_wire_pack(tg.id, 0, 1, &tw_sample.b, buf, TW_BUF_LEN, &need);
        }
        cr_assert_eq(st, CKS_OK, "%s", tw_target_name(&tg));
        cr_assert_leq(need, TW_BUF_LEN);
        for (size_t bl = tg.is_entry ? base : CKS_WIRE_HDR_LEN; bl <= need; bl++) {
            size_t out = tg.is_entry ? base : 999;
            memset(buf, TW_CANARY, sizeof(buf));
            st = tg.is_entry ? cks_wire_entry_pack((cks_wire_entry_t)tg.id, &tw_sample.b,
                                                   buf, bl, &out)
                             : cks_wire_pack(tg.id, 0, 1, &tw_sample.b, buf, bl, &out);
            if (bl == need) {
                TW_CHECK(st == CKS_OK && out == need, "%s: exact buffer refused",
                         tw_target_name(&tg));
            } else {
                TW_CHECK(st == CKS_ERR_BAD_MESSAGE, "%s: %zu of %zu bytes: status %d",
                         tw_target_name(&tg), bl, need, st);
                TW_CHECK(out == (tg.is_entry ? base : 999),
                         "%s: output written on failure", tw_target_name(&tg));
            }
            for (size_t j = bl; j < CKS_MIN(need + 64, sizeof(buf)); j++) {
                TW_CHECK(buf[j] == TW_CANARY, "%s: buf_len %zu: byte %zu written",
                         tw_target_name(&tg), bl, j);
            }
            for (size_t j = 0; tg.is_entry && j < base; j++) {
                TW_CHECK(buf[j] == TW_CANARY, "%s: byte %zu before *off written",
                         tw_target_name(&tg), j);
            }
            tried++;
        }
    }
    cr_assert_gt(tried, 1000);
}

/* ======================================================================
 * Random mutations
 * ====================================================================== */

typedef struct {
    uint8_t *p;
    size_t len;
    int is_page;
    unsigned kind; /* pages: entry kind */
} tw_seedmsg_t;

static const uint8_t tw_interesting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x90, 0x9f, 0xa0,
                                         0xbf, 0xc0, 0xc1, 0xc4, 0xc5, 0xc6, 0xca, 0xcb,
                                         0xcc, 0xcf, 0xd0, 0xd3, 0xd4, 0xd9, 0xda, 0xdb,
                                         0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0x10, 0x20};

Test(wire_fuzz, random_mutations, .timeout = 600)
{
    uint64_t rng = tw_seed("random_mutations", 0xc0ffee);
    tw_seedmsg_t seeds[TW_NTYPES * 4 + WM_NENTRIES * 4];
    unsigned nseeds = 0;
    static uint8_t buf[TW_BUF_LEN], work[TW_BUF_LEN + 64];
    unsigned long n_ok = 0, n_bad = 0, e_ok = 0, e_bad = 0;

    for (unsigned t = 0; t < TW_NTYPES; t++) {
        for (unsigned v = 0; v < 4; v++) {
            size_t len = 0;
            wm_fill(&wm_msgs[tw_types[t]], &tw_sample,
                    v == 0 ? WM_FILL_MAX : v == 1 ? WM_FILL_MIN : WM_FILL_RANDOM, &rng);
            cr_assert_eq(cks_wire_pack(tw_types[t], (uint32_t)wm_below(&rng, 4),
                                       wm_rand(&rng), &tw_sample.b, buf, sizeof(buf),
                                       &len),
                         CKS_OK);
            seeds[nseeds++] = (tw_seedmsg_t){tw_dup(buf, len), len, 0, 0};
        }
    }
    for (unsigned kind = 0; kind < WM_NENTRIES; kind++) {
        for (unsigned v = 0; v < 4; v++) {
            size_t len = 0;
            for (unsigned i = 0; i <= v; i++) {
                wm_fill(&wm_entries[kind], &tw_sample, WM_FILL_RANDOM, &rng);
                cr_assert_eq(cks_wire_entry_pack((cks_wire_entry_t)kind, &tw_sample.b,
                                                 buf, sizeof(buf), &len),
                             CKS_OK);
            }
            seeds[nseeds++] = (tw_seedmsg_t){tw_dup(buf, len), len, 1, kind};
        }
    }

    for (unsigned iter = 0; iter < TW_MUTATIONS; iter++) {
        const tw_seedmsg_t *s = &seeds[wm_below(&rng, nseeds)];
        size_t len            = s->len;
        unsigned nmut         = 1 + (unsigned)wm_below(&rng, 4);

        memcpy(work, s->p, len);
        for (unsigned k = 0; k < nmut; k++) {
            size_t pos = len ? (size_t)wm_below(&rng, len) : 0;
            switch (wm_below(&rng, 6)) {
                case 0: /* flip a bit */
                    if (len) {
                        work[pos] ^= (uint8_t)(1u << wm_below(&rng, 8));
                    }
                    break;
                case 1: /* random byte */
                    if (len) {
                        work[pos] = (uint8_t)wm_rand(&rng);
                    }
                    break;
                case 2: /* a msgpack marker or an edge value */
                    if (len) {
                        work[pos] =
                            tw_interesting[wm_below(&rng, sizeof(tw_interesting))];
                    }
                    break;
                case 3: /* insert a byte */
                    if (len < sizeof(work)) {
                        pos = (size_t)wm_below(&rng, len + 1);
                        memmove(work + pos + 1, work + pos, len - pos);
                        work[pos] =
                            wm_below(&rng, 2)
                                ? (uint8_t)wm_rand(&rng)
                                : tw_interesting[wm_below(&rng, sizeof(tw_interesting))];
                        len++;
                    }
                    break;
                case 4: /* delete a byte */
                    if (len) {
                        memmove(work + pos, work + pos + 1, len - pos - 1);
                        len--;
                    }
                    break;
                default: /* truncate */
                    len = (size_t)wm_below(&rng, len + 1);
                    break;
            }
        }

        if (!s->is_page) {
            /* mostly keep the header consistent so that the body is parsed */
            if (len >= CKS_WIRE_HDR_LEN && wm_below(&rng, 4) != 0) {
                tw_put_be(work + 12, len - CKS_WIRE_HDR_LEN, 4);
            }
            if (len >= CKS_WIRE_HDR_LEN && wm_below(&rng, 8) == 0) {
                tw_put_be(work + 6, wm_below(&rng, CKS_MSG_LAST + 1), 2);
            }
            tw_dec_t d;
            tw_decode(&d, work, len);
            if (d.st == CKS_OK) {
                TW_CHECK(wm_strings_outside(&wm_msgs[d.hdr.type], &d.body,
                                            d.buf + CKS_WIRE_HDR_LEN, d.buf + len) < 0,
                         "iteration %u: string outside the message", iter);
                tw_recode_msg(&d);
                n_ok++;
            } else {
                n_bad++;
            }
            tw_dec_free(&d);
        } else {
            unsigned kind = wm_below(&rng, 4) ? s->kind : (unsigned)wm_below(&rng, 4);
            uint8_t *pg   = tw_dup(work, len);
            size_t off    = 0, prev;
            unsigned steps = 0;
            wm_body_t e;
            for (;;) {
                prev = off;
                if (tw_entry_decode(kind, pg, len, &off, &e) != CKS_OK) {
                    e_bad++;
                    break;
                }
                TW_CHECK(kind < WM_NENTRIES, "iteration %u: entry kind %u accepted", iter,
                         kind);
                TW_CHECK(wm_strings_outside(&wm_entries[kind], &e, pg, pg + len) < 0,
                         "iteration %u: string outside the page", iter);
                tw_recode_entry(kind, &e, off - prev);
                e_ok++;
                TW_CHECK(++steps <= len, "iteration %u: page loop does not end", iter);
            }
            free(pg);
        }
    }
    for (unsigned i = 0; i < nseeds; i++) {
        free(seeds[i].p);
    }
    fprintf(stderr,
            "[wire::random_mutations] %u mutated inputs: messages %lu ok / %lu refused, "
            "entries %lu ok / %lu refused\n",
            TW_MUTATIONS, n_ok, n_bad, e_ok, e_bad);
    cr_assert_eq(n_ok + n_bad + (e_bad), (unsigned long)TW_MUTATIONS,
                 "every input decoded once");
    cr_assert_gt(n_ok, 0);
    cr_assert_gt(n_bad, 0);
    cr_assert_gt(e_ok, 0);
    cr_assert_gt(e_bad, 0);
}

/* ---- secret files ------------------------------------------------------- */

static char tw_secret_dir[256];

static void tw_secret_setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(tw_secret_dir, sizeof(tw_secret_dir), "%s/cks-test-secret.XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    cr_assert_not_null(mkdtemp(tw_secret_dir));
}

static void tw_secret_teardown(void)
{
    static const char *const names[] = {"f", "fifo", "dir"};
    char path[512];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", tw_secret_dir, names[i]);
        (void)unlink(path);
        (void)rmdir(path);
    }
    (void)rmdir(tw_secret_dir);
}

/* A file "f" of len bytes with `mode`; returns its path. */
static const char *tw_secret_file(size_t len, mode_t mode)
{
    static char path[512];
    uint8_t b[400];
    FILE *f;

    cr_assert_leq(len, sizeof(b));
    for (size_t i = 0; i < len; i++) {
        b[i] = (uint8_t)(i * 7 + 1);
    }
    snprintf(path, sizeof(path), "%s/f", tw_secret_dir);
    (void)unlink(path);
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(path, mode), 0);
    return path;
}

/* Refused with CKS_ERR_AUTH, and the output left alone. */
static void tw_secret_refused(const char *path, const char *what)
{
    cks_tp_secret_t s, untouched;

    memset(&s, 0xa5, sizeof(s));
    memcpy(&untouched, &s, sizeof(s));
    cr_assert_eq(cks_tp_secret_load(path, &s), CKS_ERR_AUTH, "%s accepted", what);
    cr_assert_eq(memcmp(&s, &untouched, sizeof(s)), 0, "%s: output written", what);
}

Test(wire_secret, lengths, .init = tw_secret_setup, .fini = tw_secret_teardown,
     .timeout = 30)
{
    static const size_t lens[] = {0, 1, 15, 16, 17, 32, 254, 255, 256, 257, 400};
    cks_tp_secret_t s;

    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        const char *path = tw_secret_file(lens[i], 0600);
        if (lens[i] >= 16 && lens[i] < sizeof(s.key)) {
            memset(&s, 0, sizeof(s));
            cr_assert_eq(cks_tp_secret_load(path, &s), CKS_OK, "%zu bytes refused", lens[i]);
            cr_assert_eq(s.len, lens[i]);
            for (size_t j = 0; j < lens[i]; j++) {
                cr_assert_eq(s.key[j], (uint8_t)(j * 7 + 1));
            }
        } else {
            char what[64];
            snprintf(what, sizeof(what), "a file of %zu bytes", lens[i]);
            tw_secret_refused(path, what);
        }
    }
}

Test(wire_secret, modes_and_kinds, .init = tw_secret_setup, .fini = tw_secret_teardown,
     .timeout = 30)
{
    static const mode_t open_modes[] = {0640, 0604, 0620, 0602, 0610, 0601, 0644};
    char path[512];
    cks_tp_secret_t s;

    for (size_t i = 0; i < sizeof(open_modes) / sizeof(open_modes[0]); i++) {
        char what[64];
        snprintf(what, sizeof(what), "a file of mode %04o", (unsigned)open_modes[i]);
        tw_secret_refused(tw_secret_file(32, open_modes[i]), what);
    }
    cr_assert_eq(cks_tp_secret_load(tw_secret_file(32, 0400), &s), CKS_OK);
    snprintf(path, sizeof(path), "%s/missing", tw_secret_dir);
    tw_secret_refused(path, "a missing file");
    snprintf(path, sizeof(path), "%s/dir", tw_secret_dir);
    cr_assert_eq(mkdir(path, 0700), 0);
    tw_secret_refused(path, "a directory");
    tw_secret_refused("/dev/null", "a character device");
}

/* Regression: a FIFO as the secret file made the loader wait in open() for a
 * writer, forever (a server starting with it hung); it must be refused at
 * once like any file that is not regular. Without the fix this test hangs
 * until its timeout. */
Test(wire_secret, fifo_refused_without_waiting, .init = tw_secret_setup,
     .fini = tw_secret_teardown, .timeout = 10)
{
    char path[512];

    snprintf(path, sizeof(path), "%s/fifo", tw_secret_dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    tw_secret_refused(path, "a FIFO");
}
