/*
 * Unit tests of coding/: CRCs and RS(k, m) encode/decode, each compared byte
 * for byte with slow references that share no code with the fast path:
 *   - ISA-L's baseline kernels (crc64_ecma_refl_base, crc32_iscsi_base,
 *     ec_encode_data_base);
 *   - plain bitwise CRCs and plain GF(2^8) table arithmetic written here, with
 *     the Cauchy generator built here from its definition.
 * Random data comes from a fixed seed per test, printed on stderr; set
 * CKS_TEST_SEED=<n> to replay or vary it. Calls rejected on purpose log
 * "ckstore error" lines: expected. crc32c_beyond_4gib skips under valgrind.
 */
#include "cks_coding.h"

#include "cks_common.h"

#include "cks_test_unit.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <inttypes.h>
#include <isa-l.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define TEST_UNDER_VALGRIND() RUNNING_ON_VALGRIND
#endif
#endif
#ifndef TEST_UNDER_VALGRIND
#define TEST_UNDER_VALGRIND() 0
#endif

#define TEST_MAX_N (CKS_EC_MAX_K + CKS_EC_MAX_M)
#define GUARD_LEN  32
#define GUARD_BYTE 0xEE
#define MIB        ((size_t)1 << 20)

/* ---- seeds and random data ----------------------------------------------- */

/* The test's seed, printed: see cks_test_unit.h. */
static uint64_t test_seed(const char *name, uint64_t dflt)
{
    return cks_test_named_seed("coding", name, dflt);
}

static unsigned rng_below(uint64_t *state, unsigned n)
{
    return (unsigned)(cks_test_rng_next(state) % n);
}

static void rng_fill(uint64_t *state, void *buf, size_t len)
{
    uint8_t *p = buf;
    uint64_t v;

    while (len >= 8) {
        v = cks_test_rng_next(state);
        memcpy(p, &v, 8);
        p += 8;
        len -= 8;
    }
    v = cks_test_rng_next(state);
    memcpy(p, &v, len);
}

/* index of the first differing byte, len when equal */
static size_t first_diff(const uint8_t *a, const uint8_t *b, size_t len)
{
    size_t i;

    if (memcmp(a, b, len) == 0) {
        return len;
    }
    for (i = 0; (i < len) && (a[i] == b[i]); i++) {
    }
    return i;
}

#define assert_same_bytes(_got, _want, _len, _fmt, ...)                                 \
    do {                                                                                \
        size_t d_ = first_diff((_got), (_want), (_len));                                \
        cr_assert_eq(d_, (size_t)(_len),                                                \
                     _fmt ": byte %zu of %zu differs (got %#x, want %#x)", __VA_ARGS__, \
                     d_, (size_t)(_len), (d_ < (_len)) ? (_got)[d_] : 0,                \
                     (d_ < (_len)) ? (_want)[d_] : 0);                                  \
    } while (0)

/* ---- slow references ----------------------------------------------------- */

/* A reflected CRC, bit by bit, zlib seed convention: reversed polynomial
 * poly, its width's bits set in mask. */
static uint64_t ref_crc(uint64_t poly, uint64_t mask, uint64_t seed, const uint8_t *buf,
                        size_t len)
{
    uint64_t crc = ~seed & mask;

    for (size_t i = 0; i < len; i++) {
        crc ^= buf[i];
        for (int b = 0; b < 8; b++) {
            crc = (crc >> 1) ^ ((crc & 1) ? poly : 0);
        }
    }
    return ~crc & mask;
}

/* CRC-64/XZ and CRC-32C */
static uint64_t ref_crc64(uint64_t seed, const uint8_t *buf, size_t len)
{
    return ref_crc(0xc96c5795d7870f42ull, UINT64_MAX, seed, buf, len);
}

static uint32_t ref_crc32c(uint32_t seed, const uint8_t *buf, size_t len)
{
    return (uint32_t)ref_crc(0x82f63b78u, UINT32_MAX, seed, buf, len);
}

/* GF(2^8) with polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D), as ISA-L */
static uint8_t ref_mul[256][256];
static uint8_t ref_inv[256];

static uint8_t ref_gf_mul_bits(uint8_t a, uint8_t b)
{
    uint8_t p = 0;

    while (b != 0) {
        if (b & 1) {
            p ^= a;
        }
        a = (uint8_t)((a << 1) ^ ((a & 0x80) ? 0x1d : 0));
        b >>= 1;
    }
    return p;
}

static void ref_gf_init(void)
{
    for (unsigned a = 0; a < 256; a++) {
        for (unsigned b = 0; b < 256; b++) {
            ref_mul[a][b] = ref_gf_mul_bits((uint8_t)a, (uint8_t)b);
            if (ref_mul[a][b] == 1) {
                ref_inv[a] = (uint8_t)b;
            }
        }
    }
}

/* parity i = sum_j data j / ((k + i) ^ j): the documented Cauchy code */
static void ref_encode(unsigned k, unsigned m, size_t len, uint8_t *const *data,
                       uint8_t *const *parity)
{
    for (unsigned i = 0; i < m; i++) {
        memset(parity[i], 0, len);
        for (unsigned j = 0; j < k; j++) {
            const uint8_t *row = ref_mul[ref_inv[(k + i) ^ j]];
            for (size_t b = 0; b < len; b++) {
                parity[i][b] ^= row[data[j][b]];
            }
        }
    }
}

/* ISA-L's baseline kernel with ISA-L's Cauchy matrix */
static void base_encode(unsigned k, unsigned m, size_t len, uint8_t *const *data,
                        uint8_t *const *parity)
{
    uint8_t a[TEST_MAX_N * CKS_EC_MAX_K];
    uint8_t tables[32 * CKS_EC_MAX_K * CKS_EC_MAX_M];
    uint8_t *src[CKS_EC_MAX_K], *dst[CKS_EC_MAX_M];

    memcpy(src, data, k * sizeof(*src));
    memcpy(dst, parity, m * sizeof(*dst));
    gf_gen_cauchy1_matrix(a, (int)(k + m), (int)k);
    ec_init_tables((int)k, (int)m, &a[k * k], tables);
    ec_encode_data_base((int)len, (int)k, (int)m, tables, src, dst);
}

/* ---- stripes of test buffers with guard bytes ---------------------------- */

typedef struct {
    unsigned k, m, n;
    size_t len;
    uint8_t *mem[TEST_MAX_N];
    uint8_t *buf[TEST_MAX_N]; /* chunk i, misaligned by `misalign` bytes */
    unsigned misalign;
} test_stripe_t;

static void stripe_alloc(test_stripe_t *st, unsigned k, unsigned m, size_t len,
                         unsigned misalign)
{
    memset(st, 0, sizeof(*st));
    st->k = k;
    st->m = m;
    st->n = k + m;
    st->len = len;
    st->misalign = misalign;
    for (unsigned i = 0; i < st->n; i++) {
        st->mem[i] = malloc(misalign + len + GUARD_LEN);
        cr_assert_not_null(st->mem[i]);
        memset(st->mem[i], GUARD_BYTE, misalign + len + GUARD_LEN);
        st->buf[i] = st->mem[i] + misalign;
    }
}

static void stripe_check_guards(const test_stripe_t *st)
{
    for (unsigned i = 0; i < st->n; i++) {
        for (unsigned g = 0; g < st->misalign; g++) {
            cr_assert_eq(st->mem[i][g], GUARD_BYTE,
                         "chunk %u: guard byte %u before the chunk overwritten", i, g);
        }
        for (unsigned g = 0; g < GUARD_LEN; g++) {
            cr_assert_eq(st->buf[i][st->len + g], GUARD_BYTE,
                         "chunk %u: guard byte %u after the chunk overwritten", i, g);
        }
    }
}

static void stripe_free(test_stripe_t *st)
{
    for (unsigned i = 0; i < st->n; i++) {
        free(st->mem[i]);
    }
}

/* work: an RS(k, m) stripe of len-byte chunks, every chunk random (rng);
 * copy: the same bytes, to compare with after calls that must leave work
 * alone; *ec: the code's handle (asserts that it was made). */
static void stripe_pair(uint64_t *rng, unsigned k, unsigned m, size_t len, test_stripe_t *work,
                        test_stripe_t *copy, cks_ec_h *ec)
{
    stripe_alloc(work, k, m, len, 0);
    stripe_alloc(copy, k, m, len, 0);
    for (unsigned i = 0; i < work->n; i++) {
        rng_fill(rng, work->buf[i], len);
        memcpy(copy->buf[i], work->buf[i], len);
    }
    cr_assert_eq(cks_ec_create(k, m, ec), CKS_OK, "RS(%u, %u)", k, m);
}

/* Free what stripe_pair() made. */
static void stripe_pair_free(cks_ec_h ec, test_stripe_t *work, test_stripe_t *copy)
{
    cks_ec_destroy(ec);
    stripe_free(copy);
    stripe_free(work);
}

/* random data chunks, parity by the table reference */
static void stripe_fill_encoded(test_stripe_t *st, uint64_t *rng)
{
    for (unsigned i = 0; i < st->k; i++) {
        rng_fill(rng, st->buf[i], st->len);
    }
    ref_encode(st->k, st->m, st->len, st->buf, &st->buf[st->k]);
}

/* ---- CRC ------------------------------------------------------------------ */

Test(coding, crc_check_values, .timeout = 60)
{
    static const char check[] = "123456789";

    cr_assert_eq(cks_crc64(0, check, 9), 0x995dc9bbdf1939faull);
    cr_assert_eq(cks_crc32c(0, check, 9), 0xe3069283u);
    cr_assert_eq(ref_crc64(0, (const uint8_t *)check, 9), 0x995dc9bbdf1939faull);
    cr_assert_eq(ref_crc32c(0, (const uint8_t *)check, 9), 0xe3069283u);
    /* empty input returns the seed, buf may be NULL */
    cr_assert_eq(cks_crc64(0, NULL, 0), 0);
    cr_assert_eq(cks_crc32c(0, NULL, 0), 0);
    cr_assert_eq(cks_crc64(0x123456789abcdefull, NULL, 0), 0x123456789abcdefull);
    cr_assert_eq(cks_crc32c(0xdeadbeefu, NULL, 0), 0xdeadbeefu);
}

Test(coding, crc_vs_references, .timeout = 60)
{
    uint64_t rng = test_seed("crc_vs_references", 1001);
    const size_t big = MIB + 3;
    static const size_t lens[] = {1,   2,   3,   7,    8,    15,   16,   17,
                                  31,  32,  33,  63,   64,   65,   127,  128,
                                  129, 255, 256, 1000, 4095, 4096, 4097, 65537};
    uint8_t *buf = malloc(big + 1);
    uint64_t seed64;
    uint32_t seed32;

    cr_assert_not_null(buf);
    rng_fill(&rng, buf, big + 1);

    for (size_t l = 0; l < CKS_ARRAY_SIZE(lens); l++) {
        for (unsigned off = 0; off < 2; off++) { /* aligned and not */
            const uint8_t *p = buf + off;
            size_t len = lens[l];

            seed64 = (l & 1) ? cks_test_rng_next(&rng) : 0;
            seed32 = (uint32_t)seed64;
            cr_assert_eq(cks_crc64(seed64, p, len), ref_crc64(seed64, p, len),
                         "crc64 len %zu off %u", len, off);
            cr_assert_eq(cks_crc64(seed64, p, len), crc64_ecma_refl_base(seed64, p, len),
                         "crc64 vs base len %zu off %u", len, off);
            cr_assert_eq(cks_crc32c(seed32, p, len), ref_crc32c(seed32, p, len),
                         "crc32c len %zu off %u", len, off);
            cr_assert_eq(cks_crc32c(seed32, p, len),
                         ~crc32_iscsi_base((uint8_t *)p, (int)len, ~seed32),
                         "crc32c vs base len %zu off %u", len, off);
        }
    }

    /* an odd length above the kernels' folding blocks */
    cr_assert_eq(cks_crc64(0, buf, big), crc64_ecma_refl_base(0, buf, big));
    cr_assert_eq(cks_crc32c(0, buf, big), ~crc32_iscsi_base(buf, (int)big, ~0u));
    free(buf);
}

Test(coding, crc_chaining, .timeout = 60)
{
    uint64_t rng = test_seed("crc_chaining", 1002);
    const size_t len = 3 * 4096 + 5;
    uint8_t *buf = malloc(len);
    uint64_t whole64, crc64;
    uint32_t whole32, crc32;
    size_t a, b;

    cr_assert_not_null(buf);
    rng_fill(&rng, buf, len);
    whole64 = cks_crc64(0, buf, len);
    whole32 = cks_crc32c(0, buf, len);

    for (unsigned iter = 0; iter < 200; iter++) {
        /* three pieces at random cuts, any of them possibly empty */
        a = cks_test_rng_next(&rng) % (len + 1);
        b = cks_test_rng_next(&rng) % (len + 1);
        if (a > b) {
            size_t t = a;
            a = b;
            b = t;
        }
        crc64 =
            cks_crc64(cks_crc64(cks_crc64(0, buf, a), buf + a, b - a), buf + b, len - b);
        crc32 = cks_crc32c(cks_crc32c(cks_crc32c(0, buf, a), buf + a, b - a), buf + b,
                           len - b);
        cr_assert_eq(crc64, whole64, "crc64 cut at %zu, %zu", a, b);
        cr_assert_eq(crc32, whole32, "crc32c cut at %zu, %zu", a, b);
    }

    /* a flipped bit changes both */
    buf[len / 2] ^= 0x10;
    cr_assert_neq(cks_crc64(0, buf, len), whole64);
    cr_assert_neq(cks_crc32c(0, buf, len), whole32);
    free(buf);
}

/* The CRC-64 of a concatenation from its parts' CRCs equals ISA-L's over
 * the whole: random cuts (empty parts too), many parts of one size and a
 * tail (as the copy threads combine them), and a long second part (zero
 * pages of a read-only map). */
Test(coding, crc64_combine_matches_isal, .timeout = 60)
{
    uint64_t rng     = test_seed("crc64_combine", 1003);
    const size_t len = 5 * 65536 + 77;
    uint8_t *buf     = malloc(len);

    cr_assert_not_null(buf);
    rng_fill(&rng, buf, len);
    const uint64_t whole = crc64_ecma_refl_base(0, buf, len);
    for (unsigned iter = 0; iter < 300; iter++) {
        size_t a = cks_test_rng_next(&rng) % (len + 1);
        uint64_t ca = cks_crc64(0, buf, a), cb = cks_crc64(0, buf + a, len - a);
        cr_assert_eq(cks_crc64_combine(ca, cb, len - a), whole, "cut at %zu", a);
    }
    for (size_t part = 1; part <= 65536; part *= 16) {
        uint64_t crc = 0;
        for (size_t off = 0; off < len; off += part) {
            size_t n = CKS_MIN(part, len - off);
            crc      = cks_crc64_combine(crc, cks_crc64(0, buf + off, n), n);
        }
        cr_assert_eq(crc, whole, "parts of %zu bytes", part);
    }
    cr_assert_eq(cks_crc64_combine(whole, 0, 0), whole, "an empty second part");
    cr_assert_eq(cks_crc64_combine(0, whole, len), whole, "an empty first part");
    free(buf);

    /* 64 MiB + 3 of zeros after a few bytes: a long second part */
    const size_t zlen = (64ull << 20) + 3;
    void *zeros       = mmap(NULL, zlen, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(zeros, MAP_FAILED);
    const uint8_t head[5] = {1, 2, 3, 4, 5};
    uint64_t ch           = cks_crc64(0, head, sizeof(head));
    uint64_t cz           = cks_crc64(0, zeros, zlen);
    cr_assert_eq(cks_crc64_combine(ch, cz, zlen), cks_crc64(ch, zeros, zlen));
    munmap(zeros, zlen);
}

/* ISA-L's CRC-32C kernel counts bytes in an int: lengths past 4 GiB must
 * still give the CRC of every byte. The reference feeds pieces of 1 GiB + 1.
 * Zero pages of a read-only anonymous map cost no memory. Skipped under
 * valgrind, where 8 GiB of CRC take minutes. */
Test(coding, crc32c_beyond_4gib, .timeout = 60)
{
    const size_t len = ((size_t)4 << 30) + 4099;
    const size_t step = ((size_t)1 << 30) + 1;
    uint8_t *zeros =
        mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    uint32_t whole, chained = 0;

    if (TEST_UNDER_VALGRIND()) {
        munmap(zeros, len);
        cr_skip_test("8 GiB of CRC-32C is too slow under valgrind");
    }
    cr_assert_neq(zeros, MAP_FAILED);
    whole = cks_crc32c(0, zeros, len);
    for (size_t off = 0; off < len; off += step) {
        chained = cks_crc32c(chained, zeros + off, CKS_MIN(step, len - off));
    }
    cr_assert_eq(whole, chained, "crc32c over %zu bytes: %#x, in pieces %#x", len, whole,
                 chained);
    /* what a length cut to 32 bits would give */
    cr_assert_neq(whole, cks_crc32c(0, zeros, len & 0xffffffffu));
    munmap(zeros, len);
}

/* ---- the reference field is ISA-L's field --------------------------------- */

Test(coding, gf_reference_matches_isal, .timeout = 60)
{
    ref_gf_init();
    for (unsigned a = 0; a < 256; a++) {
        for (unsigned b = 0; b < 256; b++) {
            cr_assert_eq(ref_mul[a][b], gf_mul((uint8_t)a, (uint8_t)b), "%u * %u", a, b);
        }
        if (a != 0) {
            cr_assert_eq(ref_inv[a], gf_inv((uint8_t)a), "1 / %u", a);
            cr_assert_eq(ref_mul[a][ref_inv[a]], 1, "%u * (1 / %u)", a, a);
        }
    }
}

/* ---- create ----------------------------------------------------------------- */

Test(coding, create_valid_and_invalid, .timeout = 60)
{
    cks_ec_h sentinel = (cks_ec_h)(uintptr_t)0x1234;
    cks_ec_h ec;
    static const unsigned bad[][2] = {{0, 1},  {1, 0},  {0, 0},  {17, 1},   {1, 5},
                                      {17, 5}, {16, 5}, {17, 4}, {1000, 2}, {4, 1000}};

    for (unsigned k = 1; k <= CKS_EC_MAX_K; k++) {
        for (unsigned m = 1; m <= CKS_EC_MAX_M; m++) {
            ec = NULL;
            cr_assert_eq(cks_ec_create(k, m, &ec), CKS_OK, "RS(%u, %u)", k, m);
            cr_assert_not_null(ec);
            cr_assert_eq(cks_ec_k(ec), k);
            cr_assert_eq(cks_ec_m(ec), m);
            cks_ec_destroy(ec);
        }
    }
    for (size_t i = 0; i < CKS_ARRAY_SIZE(bad); i++) {
        ec = sentinel;
        cr_assert_eq(cks_ec_create(bad[i][0], bad[i][1], &ec), CKS_ERR_INVALID_PARAM,
                     "RS(%u, %u)", bad[i][0], bad[i][1]);
        cr_assert_eq(ec, sentinel, "output written on failure");
    }
    cr_assert_eq(cks_ec_create(4, 2, NULL), CKS_ERR_INVALID_PARAM);
    cks_ec_destroy(NULL);
}

/* ---- encode ------------------------------------------------------------------ */

static void check_encode(unsigned k, unsigned m, size_t len, unsigned misalign,
                         int with_base, uint64_t *rng)
{
    test_stripe_t st, want;
    cks_ec_h ec;

    stripe_alloc(&st, k, m, len, misalign);
    stripe_alloc(&want, k, m, len, 0);
    for (unsigned i = 0; i < k; i++) {
        rng_fill(rng, st.buf[i], len);
        memcpy(want.buf[i], st.buf[i], len);
    }
    for (unsigned i = k; i < k + m; i++) {
        rng_fill(rng, st.buf[i], len); /* garbage that must be overwritten */
    }

    cr_assert_eq(cks_ec_create(k, m, &ec), CKS_OK);
    cr_assert_eq(cks_ec_encode(ec, len, (const uint8_t *const *)st.buf, &st.buf[k]),
                 CKS_OK, "RS(%u, %u) len %zu", k, m, len);

    ref_encode(k, m, len, want.buf, &want.buf[k]);
    for (unsigned i = 0; i < k + m; i++) {
        assert_same_bytes(st.buf[i], want.buf[i], len,
                          "RS(%u, %u) len %zu misalign %u: chunk %u vs GF reference", k,
                          m, len, misalign, i);
    }
    if (with_base) {
        for (unsigned i = k; i < k + m; i++) {
            memset(want.buf[i], 0x5a, len);
        }
        base_encode(k, m, len, want.buf, &want.buf[k]);
        for (unsigned i = k; i < k + m; i++) {
            assert_same_bytes(st.buf[i], want.buf[i], len,
                              "RS(%u, %u) len %zu: parity %u vs ec_encode_data_base", k,
                              m, len, i - k);
        }
    }
    stripe_check_guards(&st);
    cks_ec_destroy(ec);
    stripe_free(&want);
    stripe_free(&st);
}

Test(coding, encode_vs_references, .timeout = 60)
{
    uint64_t rng = test_seed("encode_vs_references", 2001);
    static const unsigned codes[][2] = {{1, 1}, {4, 2}, {8, 3},  {16, 4}, {2, 1}, {3, 3},
                                        {5, 4}, {1, 4}, {16, 1}, {7, 2},  {11, 4}};
    static const size_t lens[] = {1,  7,  15, 16,  17,  31,  32,   33,
                                  63, 64, 65, 100, 255, 256, 4096, 4097};

    ref_gf_init();
    for (size_t c = 0; c < CKS_ARRAY_SIZE(codes); c++) {
        for (size_t l = 0; l < CKS_ARRAY_SIZE(lens); l++) {
            check_encode(codes[c][0], codes[c][1], lens[l], (unsigned)(l % 3), 1, &rng);
        }
    }
}

Test(coding, encode_large_odd, .timeout = 60)
{
    uint64_t rng = test_seed("encode_large_odd", 2002);
    static const unsigned codes[][2] = {{1, 1}, {4, 2}, {8, 3}, {16, 4}};

    ref_gf_init();
    for (size_t c = 0; c < CKS_ARRAY_SIZE(codes); c++) {
        /* the baseline kernel is slow: compare it on the widest code only */
        check_encode(codes[c][0], codes[c][1], MIB + 3, 1, c == 3, &rng);
    }
}

Test(coding, encode_invalid_and_empty, .timeout = 60)
{
    uint64_t rng = test_seed("encode_invalid_and_empty", 2003);
    test_stripe_t st, copy;
    const uint8_t *data[CKS_EC_MAX_K];
    cks_ec_h ec;

    stripe_pair(&rng, 4, 2, 64, &st, &copy, &ec);
    memcpy(data, st.buf, 4 * sizeof(*data));

    cr_assert_eq(cks_ec_encode(NULL, 64, data, &st.buf[4]), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_ec_encode(ec, 64, NULL, &st.buf[4]), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_ec_encode(ec, 64, data, NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_ec_encode(ec, CKS_EC_MAX_LEN + 1, data, &st.buf[4]),
                 CKS_ERR_INVALID_PARAM);
    data[3] = NULL;
    cr_assert_eq(cks_ec_encode(ec, 64, data, &st.buf[4]), CKS_ERR_INVALID_PARAM);
    data[3] = st.buf[3];
    st.buf[5] = NULL;
    cr_assert_eq(cks_ec_encode(ec, 64, data, &st.buf[4]), CKS_ERR_INVALID_PARAM);
    st.buf[5] = st.mem[5];
    /* len 0: success, nothing touched */
    cr_assert_eq(cks_ec_encode(ec, 0, data, &st.buf[4]), CKS_OK);

    for (unsigned i = 0; i < st.n; i++) {
        assert_same_bytes(st.buf[i], copy.buf[i], st.len,
                          "chunk %u changed by a rejected or empty encode", i);
    }
    stripe_check_guards(&st);
    stripe_pair_free(ec, &st, &copy);
}

/* ---- decode ------------------------------------------------------------------ */

/* Erase the chunks in `erased` (garbage in their buffers), pass NULL for those
 * also in `skipped`, decode, and compare every passed buffer with the
 * original stripe. */
static void check_decode(cks_ec_h ec, const test_stripe_t *orig, test_stripe_t *work,
                         uint32_t erased, uint32_t skipped, uint64_t *rng)
{
    uint8_t *chunks[TEST_MAX_N];
    uint8_t present[TEST_MAX_N];
    cks_status_t status;

    for (unsigned i = 0; i < orig->n; i++) {
        if (erased & (1u << i)) {
            present[i] = 0;
            rng_fill(rng, work->buf[i], orig->len);
            chunks[i] = (skipped & (1u << i)) ? NULL : work->buf[i];
        } else {
            present[i] = (uint8_t)(1 + rng_below(rng, 255)); /* any nonzero */
            memcpy(work->buf[i], orig->buf[i], orig->len);
            chunks[i] = work->buf[i];
        }
    }

    status = cks_ec_decode(ec, orig->len, chunks, present);
    cr_assert_eq(status, CKS_OK, "RS(%u, %u) len %zu erased %#x skipped %#x: %s", orig->k,
                 orig->m, orig->len, erased, skipped, cks_status_name(status));
    for (unsigned i = 0; i < orig->n; i++) {
        if (chunks[i] != NULL) {
            assert_same_bytes(work->buf[i], orig->buf[i], orig->len,
                              "RS(%u, %u) len %zu erased %#x skipped %#x: chunk %u",
                              orig->k, orig->m, orig->len, erased, skipped, i);
        }
    }
    stripe_check_guards(work);
}

/* every erasure pattern of up to m chunks; for short chunks also every choice
 * of which erased chunks to rebuild */
static void check_all_patterns(unsigned k, unsigned m, size_t len, int all_subsets,
                               uint64_t *rng)
{
    test_stripe_t orig, work;
    unsigned n = k + m, count = 0;
    cks_ec_h ec;

    stripe_alloc(&orig, k, m, len, 0);
    stripe_alloc(&work, k, m, len, 3);
    stripe_fill_encoded(&orig, rng);
    cr_assert_eq(cks_ec_create(k, m, &ec), CKS_OK);

    for (uint32_t erased = 0; erased < (1u << n); erased++) {
        if ((unsigned)__builtin_popcount(erased) > m) {
            continue;
        }
        count++;
        check_decode(ec, &orig, &work, erased, 0, rng);
        if (all_subsets) {
            /* every nonempty subset of the erased chunks is skipped once */
            for (uint32_t sk = (erased - 1) & erased; sk != 0; sk = (sk - 1) & erased) {
                check_decode(ec, &orig, &work, erased, sk, rng);
            }
            if (erased != 0) {
                check_decode(ec, &orig, &work, erased, erased, rng);
            }
        } else if (erased != 0) {
            check_decode(ec, &orig, &work, erased, erased & (uint32_t)cks_test_rng_next(rng), rng);
        }
    }
    /* sum_{j <= m} C(n, j) patterns, so the loop did not skip any */
    {
        unsigned want = 0, binom = 1;
        for (unsigned j = 0; j <= m; j++) {
            want += binom;
            binom = binom * (n - j) / (j + 1);
        }
        cr_assert_eq(count, want, "RS(%u, %u): %u patterns, want %u", k, m, count, want);
    }
    cks_ec_destroy(ec);
    stripe_free(&work);
    stripe_free(&orig);
}

Test(coding, decode_every_pattern_small, .timeout = 60)
{
    uint64_t rng = test_seed("decode_every_pattern_small", 3001);
    static const unsigned codes[][2] = {{2, 1}, {4, 2}, {3, 3}, {5, 4},
                                        {1, 1}, {1, 4}, {8, 3}, {16, 1}};
    static const size_t lens[] = {1, 7, 4097};

    ref_gf_init();
    for (size_t c = 0; c < CKS_ARRAY_SIZE(codes); c++) {
        for (size_t l = 0; l < CKS_ARRAY_SIZE(lens); l++) {
            check_all_patterns(codes[c][0], codes[c][1], lens[l], lens[l] < 64, &rng);
        }
    }
}

Test(coding, decode_every_pattern_16_4, .timeout = 60)
{
    uint64_t rng = test_seed("decode_every_pattern_16_4", 3002);

    ref_gf_init();
    check_all_patterns(16, 4, 33, 0, &rng);
}

static uint32_t random_erasures(uint64_t *rng, unsigned n, unsigned count)
{
    uint32_t mask = 0;

    while ((unsigned)__builtin_popcount(mask) < count) {
        mask |= 1u << rng_below(rng, n);
    }
    return mask;
}

Test(coding, decode_random_16_4, .timeout = 60)
{
    uint64_t rng = test_seed("decode_random_16_4", 3003);
    test_stripe_t orig, work;
    cks_ec_h ec;
    uint32_t erased;

    ref_gf_init();
    cr_assert_eq(cks_ec_create(16, 4, &ec), CKS_OK);

    for (unsigned iter = 0; iter < 40; iter++) {
        size_t len = 1 + rng_below(&rng, 20000);

        stripe_alloc(&orig, 16, 4, len, 0);
        stripe_alloc(&work, 16, 4, len, rng_below(&rng, 8));
        stripe_fill_encoded(&orig, &rng);
        for (unsigned p = 0; p < 5; p++) {
            erased = random_erasures(&rng, 20, rng_below(&rng, 5));
            check_decode(ec, &orig, &work, erased,
                         (p & 1) ? (erased & (uint32_t)cks_test_rng_next(&rng)) : 0, &rng);
        }
        stripe_free(&work);
        stripe_free(&orig);
    }

    /* one large odd stripe, four erasures */
    stripe_alloc(&orig, 16, 4, MIB + 3, 0);
    stripe_alloc(&work, 16, 4, MIB + 3, 1);
    stripe_fill_encoded(&orig, &rng);
    check_decode(ec, &orig, &work, random_erasures(&rng, 20, 4), 0, &rng);
    check_decode(ec, &orig, &work, 0xf, 0, &rng);     /* four data chunks */
    check_decode(ec, &orig, &work, 0xf0000, 0, &rng); /* all parity */
    stripe_free(&work);
    stripe_free(&orig);
    cks_ec_destroy(ec);
}

/* decode reads the first k present chunks, data first: a spare present parity
 * chunk is not read (here it holds garbage and the result is still right) */
Test(coding, decode_reads_first_k_present, .timeout = 60)
{
    uint64_t rng = test_seed("decode_reads_first_k_present", 3004);
    uint8_t present[6] = {1, 1, 1, 1, 1, 0};
    test_stripe_t orig, work;
    cks_ec_h ec;

    ref_gf_init();
    stripe_alloc(&orig, 4, 2, 1000, 0);
    stripe_alloc(&work, 4, 2, 1000, 0);
    stripe_fill_encoded(&orig, &rng);
    for (unsigned i = 0; i < 4; i++) {
        memcpy(work.buf[i], orig.buf[i], orig.len);
    }
    rng_fill(&rng, work.buf[4], orig.len); /* "present" but wrong */
    rng_fill(&rng, work.buf[5], orig.len); /* to rebuild */
    cr_assert_eq(cks_ec_create(4, 2, &ec), CKS_OK);
    cr_assert_eq(cks_ec_decode(ec, orig.len, work.buf, present), CKS_OK);
    assert_same_bytes(work.buf[5], orig.buf[5], orig.len, "parity %u", 1);
    cks_ec_destroy(ec);
    stripe_free(&work);
    stripe_free(&orig);
}

/* more than m erasures: CKS_ERR_DATA_LOST and no buffer touched */
static void check_data_lost(cks_ec_h ec, unsigned n, size_t len, test_stripe_t *work,
                            const test_stripe_t *copy, uint32_t erased)
{
    uint8_t present[TEST_MAX_N];
    cks_status_t status;

    for (unsigned i = 0; i < n; i++) {
        present[i] = !(erased & (1u << i));
    }
    status = cks_ec_decode(ec, len, work->buf, present);
    cr_assert_eq(status, CKS_ERR_DATA_LOST, "erased %#x: %s", erased,
                 cks_status_name(status));
    for (unsigned i = 0; i < n; i++) {
        assert_same_bytes(work->buf[i], copy->buf[i], len, "erased %#x: chunk %u touched",
                          erased, i);
    }
}

Test(coding, decode_too_few_chunks, .timeout = 60)
{
    uint64_t rng = test_seed("decode_too_few_chunks", 3005);
    test_stripe_t work, copy;
    unsigned count = 0;
    cks_ec_h ec;

    /* RS(4, 2): every pattern of 3..6 erasures (42 of them) */
    stripe_pair(&rng, 4, 2, 257, &work, &copy, &ec);
    for (uint32_t erased = 0; erased < (1u << 6); erased++) {
        if (__builtin_popcount(erased) > 2) {
            check_data_lost(ec, 6, work.len, &work, &copy, erased);
            count++;
        }
    }
    cr_assert_eq(count, 42);
    stripe_pair_free(ec, &work, &copy);

    /* RS(16, 4): random patterns of 5..20 erasures */
    stripe_pair(&rng, 16, 4, 100, &work, &copy, &ec);
    for (unsigned iter = 0; iter < 100; iter++) {
        check_data_lost(ec, 20, work.len, &work, &copy,
                        random_erasures(&rng, 20, 5 + rng_below(&rng, 16)));
    }
    stripe_pair_free(ec, &work, &copy);
}

Test(coding, decode_invalid_and_trivial, .timeout = 60)
{
    uint64_t rng = test_seed("decode_invalid_and_trivial", 3006);
    uint8_t present[6] = {1, 1, 0, 1, 1, 0};
    uint8_t all[6] = {1, 1, 1, 1, 1, 1};
    test_stripe_t work, copy;
    uint8_t *saved;
    cks_ec_h ec;

    stripe_pair(&rng, 4, 2, 64, &work, &copy, &ec);

    cr_assert_eq(cks_ec_decode(NULL, 64, work.buf, present), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_ec_decode(ec, 64, NULL, present), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_ec_decode(ec, 64, work.buf, NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_ec_decode(ec, CKS_EC_MAX_LEN + 1, work.buf, present),
                 CKS_ERR_INVALID_PARAM);
    /* a present chunk without a buffer */
    saved = work.buf[3];
    work.buf[3] = NULL;
    cr_assert_eq(cks_ec_decode(ec, 64, work.buf, present), CKS_ERR_INVALID_PARAM);
    work.buf[3] = saved;
    /* nothing missing; len 0 */
    cr_assert_eq(cks_ec_decode(ec, 64, work.buf, all), CKS_OK);
    cr_assert_eq(cks_ec_decode(ec, 0, work.buf, present), CKS_OK);
    /* missing chunks, all skipped */
    work.buf[2] = NULL;
    work.buf[5] = NULL;
    cr_assert_eq(cks_ec_decode(ec, 64, work.buf, present), CKS_OK);
    work.buf[2] = work.mem[2];
    work.buf[5] = work.mem[5];

    for (unsigned i = 0; i < 6; i++) {
        assert_same_bytes(work.buf[i], copy.buf[i], work.len,
                          "chunk %u changed by a rejected or trivial decode", i);
    }
    stripe_check_guards(&work);
    stripe_pair_free(ec, &work, &copy);
}

/* ---- stripe geometry --------------------------------------------------------- */

Test(coding, geometry_examples, .timeout = 60)
{
    /* k = 4, chunk 2: stripes of 8 bytes */
    cr_assert_eq(cks_ec_stripe_count(0, 4, 2), 0);
    cr_assert_eq(cks_ec_stripe_count(1, 4, 2), 1);
    cr_assert_eq(cks_ec_stripe_count(8, 4, 2), 1);
    cr_assert_eq(cks_ec_stripe_count(9, 4, 2), 2);
    cr_assert_eq(cks_ec_stripe_count(16, 4, 2), 2);
    cr_assert_eq(cks_ec_stripe_count(17, 4, 2), 3);
    /* size 11: stripe 1 holds 3 bytes, in chunks 0 (2) and 1 (1) */
    cr_assert_eq(cks_ec_chunk_data_len(11, 4, 2, 0, 0), 2);
    cr_assert_eq(cks_ec_chunk_data_len(11, 4, 2, 0, 3), 2);
    cr_assert_eq(cks_ec_chunk_data_len(11, 4, 2, 1, 0), 2);
    cr_assert_eq(cks_ec_chunk_data_len(11, 4, 2, 1, 1), 1);
    cr_assert_eq(cks_ec_chunk_data_len(11, 4, 2, 1, 2), 0);
    cr_assert_eq(cks_ec_chunk_data_len(11, 4, 2, 1, 3), 0);
    cr_assert_eq(cks_ec_chunk_data_len(11, 4, 2, 2, 0), 0); /* past the end */
    cr_assert_eq(cks_ec_chunk_data_len(11, 4, 2, 0, 4), 0); /* c >= k */
    cr_assert_eq(cks_ec_chunk_data_len(0, 4, 2, 0, 0), 0);
    /* invalid geometry gives 0 */
    cr_assert_eq(cks_ec_stripe_count(100, 0, 2), 0);
    cr_assert_eq(cks_ec_stripe_count(100, 4, 0), 0);
    cr_assert_eq(cks_ec_chunk_data_len(100, 0, 2, 0, 0), 0);
    cr_assert_eq(cks_ec_chunk_data_len(100, 4, 0, 0, 0), 0);
    /* realistic: 4 MiB chunks, RS(4, 2), an object of 10 GiB + 5 bytes */
    {
        uint64_t cs = 4 << 20, size = (10ull << 30) + 5, n;

        n = cks_ec_stripe_count(size, 4, cs);
        cr_assert_eq(n, 641);
        cr_assert_eq(cks_ec_chunk_data_len(size, 4, cs, 639, 3), cs);
        cr_assert_eq(cks_ec_chunk_data_len(size, 4, cs, 640, 0), 5);
        cr_assert_eq(cks_ec_chunk_data_len(size, 4, cs, 640, 1), 0);
    }
    /* no overflow near UINT64_MAX */
    cr_assert_eq(cks_ec_stripe_count(UINT64_MAX, 1, 1), UINT64_MAX);
    cr_assert_eq(cks_ec_chunk_data_len(UINT64_MAX, 1, 1, UINT64_MAX - 1, 0), 1);
    cr_assert_eq(cks_ec_chunk_data_len(UINT64_MAX, 1, 1, UINT64_MAX, 0), 0);
    cr_assert_eq(cks_ec_stripe_count(UINT64_MAX, 16, UINT64_MAX / 16 + 1), 1);
    cr_assert_eq(cks_ec_chunk_data_len(UINT64_MAX, 16, 1ull << 62, 0, 3),
                 (1ull << 62) - 1);
    cr_assert_eq(cks_ec_chunk_data_len(UINT64_MAX, 16, 1ull << 62, 0, 4), 0);
    cr_assert_eq(cks_ec_chunk_data_len(UINT64_MAX, 16, 1ull << 62, 1, 0), 0);
    cr_assert_eq(cks_ec_stripe_count(UINT64_MAX, 16, 1ull << 59), 2);
    cr_assert_eq(cks_ec_chunk_data_len(UINT64_MAX, 16, 1ull << 59, 1, 14), 1ull << 59);
    cr_assert_eq(cks_ec_chunk_data_len(UINT64_MAX, 16, 1ull << 59, 1, 15),
                 (1ull << 59) - 1);
}

/* against byte-by-byte counting for every small geometry */
Test(coding, geometry_exhaustive_small, .timeout = 60)
{
    static uint64_t want[152][6]; /* [stripe][chunk]: size <= 150, k <= 5 */

    for (unsigned k = 1; k <= 5; k++) {
        for (uint64_t cs = 1; cs <= 7; cs++) {
            for (uint64_t size = 0; size <= 150; size++) {
                uint64_t n = cks_ec_stripe_count(size, k, cs);
                uint64_t wn = (size + k * cs - 1) / (k * cs);
                uint64_t tot = 0;

                cr_assert_eq(n, wn, "size %" PRIu64 " k %u cs %" PRIu64, size, k, cs);
                cr_assert_leq(n, 150);
                memset(want, 0, sizeof(want));
                for (uint64_t b = 0; b < size; b++) {
                    want[b / (k * cs)][(b % (k * cs)) / cs]++;
                }
                for (uint64_t s = 0; s <= n; s++) { /* one past the end too */
                    for (unsigned c = 0; c <= k; c++) {
                        uint64_t got = cks_ec_chunk_data_len(size, k, cs, s, c);
                        uint64_t w = want[s][c]; /* 0 past the end */

                        cr_assert_eq(got, w,
                                     "size %" PRIu64 " k %u cs %" PRIu64
                                     " stripe %" PRIu64 " chunk %u: %" PRIu64
                                     ", want %" PRIu64,
                                     size, k, cs, s, c, got, w);
                        tot += got;
                    }
                }
                cr_assert_eq(tot, size);
            }
        }
    }
}

/* ---- an object end to end: cut, pad, encode, lose, decode, reassemble ------- */

Test(coding, object_roundtrip_with_padding, .timeout = 60)
{
    uint64_t rng = test_seed("object_roundtrip_with_padding", 4001);
    static const struct {
        unsigned k, m;
        uint64_t cs, size;
    } cases[] = {
        {4, 2, 4099, 3 * 4 * 4099 + 4099 + 17}, /* last stripe: 1 chunk + 17 B */
        {8, 3, 1000, 8 * 1000 - 1},             /* one stripe, one byte short */
        {3, 3, 7, 1},                           /* one byte */
        {16, 4, 513, 16 * 513 * 2},             /* exact, no padding */
        {5, 4, 65, 5 * 65 + 64},
    };

    ref_gf_init();
    for (size_t t = 0; t < CKS_ARRAY_SIZE(cases); t++) {
        unsigned k = cases[t].k, m = cases[t].m, n = k + m;
        uint64_t cs = cases[t].cs, size = cases[t].size;
        uint64_t nstripes = cks_ec_stripe_count(size, k, cs);
        uint8_t *obj = malloc(size);
        uint8_t *back = malloc(size);
        uint8_t *stripes = malloc(nstripes * n * cs); /* [s][chunk][cs] */
        uint8_t *chunks[TEST_MAX_N];
        uint8_t present[TEST_MAX_N];
        uint64_t off = 0;
        cks_ec_h ec;

        cr_assert(obj && back && stripes);
        rng_fill(&rng, obj, size);
        rng_fill(&rng, stripes, nstripes * n * cs); /* padding must be set */
        memset(back, 0, size);
        cr_assert_eq(cks_ec_create(k, m, &ec), CKS_OK);

        /* write side: cut, zero-pad, encode */
        for (uint64_t s = 0; s < nstripes; s++) {
            for (unsigned i = 0; i < n; i++) {
                chunks[i] = stripes + (s * n + i) * cs;
            }
            for (unsigned c = 0; c < k; c++) {
                uint64_t dl = cks_ec_chunk_data_len(size, k, cs, s, c);

                memcpy(chunks[c], obj + off, dl);
                memset(chunks[c] + dl, 0, cs - dl);
                off += dl;
            }
            cr_assert_eq(
                cks_ec_encode(ec, cs, (const uint8_t *const *)chunks, &chunks[k]),
                CKS_OK);
        }
        cr_assert_eq(off, size);

        /* read side: lose m chunks of every stripe, rebuild, reassemble */
        off = 0;
        for (uint64_t s = 0; s < nstripes; s++) {
            uint32_t erased = random_erasures(&rng, n, m);

            for (unsigned i = 0; i < n; i++) {
                chunks[i] = stripes + (s * n + i) * cs;
                present[i] = !(erased & (1u << i));
                if (!present[i]) {
                    rng_fill(&rng, chunks[i], cs);
                }
            }
            cr_assert_eq(cks_ec_decode(ec, cs, chunks, present), CKS_OK);
            for (unsigned c = 0; c < k; c++) {
                uint64_t dl = cks_ec_chunk_data_len(size, k, cs, s, c);

                memcpy(back + off, chunks[c], dl);
                off += dl;
                for (uint64_t p = dl; p < cs; p++) {
                    cr_assert_eq(chunks[c][p], 0,
                                 "case %zu stripe %" PRIu64 " chunk %u: padding "
                                 "byte %" PRIu64 " not zero",
                                 t, s, c, p);
                }
            }
        }
        cr_assert_eq(off, size);
        assert_same_bytes(back, obj, size, "case %zu: object after roundtrip", t);
        cr_assert_eq(cks_crc64(0, back, size), cks_crc64(0, obj, size));

        cks_ec_destroy(ec);
        free(stripes);
        free(back);
        free(obj);
    }
}

/* ---- one handle, many threads ------------------------------------------------- */

#define THREADS     4
#define THREAD_ITER 30

typedef struct {
    cks_ec_h ec;
    uint64_t seed;
    unsigned failures;
} thread_arg_t;

/* One thread's share: THREAD_ITER random encodes and decodes through the
 * shared handle, checked against the reference; what went wrong counted in
 * failures (for the test's thread to assert on). */
static void *thread_main(void *p)
{
    thread_arg_t *arg = p;
    uint64_t rng = arg->seed;
    unsigned k = cks_ec_k(arg->ec), m = cks_ec_m(arg->ec), n = k + m;
    const size_t len = 8191;
    uint8_t *mem = malloc(3 * n * len);
    uint8_t *got[TEST_MAX_N], *want[TEST_MAX_N];
    uint8_t present[TEST_MAX_N];

    if (mem == NULL) {
        arg->failures++;
        return NULL;
    }
    for (unsigned i = 0; i < n; i++) {
        got[i] = mem + i * len;
        want[i] = mem + (n + i) * len;
    }
    for (unsigned iter = 0; iter < THREAD_ITER; iter++) {
        uint32_t erased = random_erasures(&rng, n, m);

        for (unsigned i = 0; i < k; i++) {
            rng_fill(&rng, want[i], len);
            memcpy(got[i], want[i], len);
        }
        ref_encode(k, m, len, want, &want[k]);
        if (cks_ec_encode(arg->ec, len, (const uint8_t *const *)got, &got[k]) != CKS_OK) {
            arg->failures++;
        }
        for (unsigned i = 0; i < n; i++) {
            present[i] = !(erased & (1u << i));
            if (!present[i]) {
                memset(got[i], 0xa5, len);
            }
        }
        if (cks_ec_decode(arg->ec, len, got, present) != CKS_OK) {
            arg->failures++;
        }
        for (unsigned i = 0; i < n; i++) {
            if (memcmp(got[i], want[i], len) != 0) {
                arg->failures++;
            }
        }
    }
    free(mem);
    return NULL;
}

Test(coding, shared_handle_many_threads, .timeout = 60)
{
    uint64_t seed = test_seed("shared_handle_many_threads", 5001);
    thread_arg_t args[THREADS];
    pthread_t threads[THREADS];
    cks_ec_h ec;

    ref_gf_init();
    cr_assert_eq(cks_ec_create(16, 4, &ec), CKS_OK);
    for (unsigned t = 0; t < THREADS; t++) {
        args[t] = (thread_arg_t){.ec = ec, .seed = seed + t, .failures = 0};
        cr_assert_eq(pthread_create(&threads[t], NULL, thread_main, &args[t]), 0);
    }
    for (unsigned t = 0; t < THREADS; t++) {
        cr_assert_eq(pthread_join(threads[t], NULL), 0);
    }
    for (unsigned t = 0; t < THREADS; t++) {
        cr_assert_eq(args[t].failures, 0, "thread %u: %u failures", t, args[t].failures);
    }
    cks_ec_destroy(ec);
}
