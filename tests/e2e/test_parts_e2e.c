/*
 * Puts whose bytes come in parts (a standalone server, CKS_WIRE_F_PARTS and
 * PUT_PART; server/parts.c), driven by a raw transport client so that a
 * test can send what the library never would: parts out of order, past the
 * end, for no put, a client that goes away in the middle, one that stops
 * sending. The library's own use of parts (staged puts larger than the
 * ring) is in test_gpu_e2e.c. Every server is stopped by its pid; every wait
 * is bounded.
 */
#include "ckstore.h"
#include "cks_test.h"
#include "cks_test_raw.h"
#include "cks_tp.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static cks_test_server_t srv;
static cks_client_h cl;
static cks_test_raw_t raw;
static cks_tp_mem_h raw_mem;
static uint8_t *raw_base; /* cks_tp_mem_alloc() memory: parts go as descriptors */
static const uint64_t raw_len = 8 * MiB;
static uint8_t *heap;     /* malloc() memory: parts go as bytes */
static uint64_t next_req = 1000;

static void teardown(void);

static void setup_with(const char *flags)
{
    /* Criterion runs the suite's .init before a test's own: a test that
     * asks for other flags replaces what the suite set up */
    if (srv.pid != 0) {
        teardown();
    }
    cks_test_set_server_flags(flags);
    cr_assert_eq(cks_test_server_start(&srv, 64 * MiB), 0);
    cks_test_set_server_flags(NULL);
    cl = cks_test_client(&srv, 20000);
    cks_test_begin(cl, "parts", 1);
    cks_test_raw_open(&raw, srv.port, "parts-raw");
    void *base = NULL;
    cr_assert_eq(cks_tp_mem_alloc(raw.w, raw_len, &raw_mem, &base), CKS_OK);
    raw_base = base;
    heap     = malloc(raw_len);
    cr_assert_not_null(heap);
}

static void setup(void)
{
    setup_with(NULL);
}

static void teardown(void)
{
    if (raw.w != NULL) {
        cks_tp_mem_unmap(raw_mem);
        cks_test_raw_close(&raw);
        raw.w = NULL;
    }
    free(heap);
    heap = NULL;
    cks_client_destroy(cl);
    cl = NULL;
    cks_test_server_cleanup(&srv);
}

TestSuite(parts, .init = setup, .fini = teardown, .timeout = 120);

/* The PUT that opens a put in parts (no bytes with it); its reply comes
 * when the put ends. */
static uint64_t open_put(const char *key, uint64_t size)
{
    cks_msg_put_t m = {0};
    uint64_t req    = ++next_req;
    m.job           = cks_wire_cstr("parts");
    m.version       = 1;
    m.key           = cks_wire_cstr(key);
    m.kind          = CKS_KIND_OTHER;
    m.size          = size;
    cr_assert_eq(cks_tp_send(raw.conn, CKS_MSG_PUT, CKS_WIRE_F_PARTS, req, &m, NULL, 0,
                             CKS_MEM_HOST, NULL, NULL, NULL),
                 CKS_INPROGRESS);
    return req;
}

/* A PUT_PART of [off, off + len) of `key`: from raw_base + off as a
 * descriptor (rma), else as bytes from heap + off; cancel: none. Its
 * request id. */
static uint64_t send_part(const char *key, uint64_t off, uint64_t len, int rma, int cancel)
{
    cks_msg_put_part_t m = {0};
    uint8_t desc[2 * CKS_TP_RMA_DESC_MAX];
    size_t dlen  = 0;
    uint64_t req = ++next_req;
    m.job        = cks_wire_cstr("parts");
    m.version    = 1;
    m.key        = cks_wire_cstr(key);
    m.offset     = off;
    m.cancel     = (uint32_t)cancel;
    if (cancel) {
        cr_assert_eq(cks_tp_send(raw.conn, CKS_MSG_PUT_PART, 0, req, &m, NULL, 0, CKS_MEM_HOST,
                                 NULL, NULL, NULL),
                     CKS_INPROGRESS);
    } else if (rma) {
        cr_assert_eq(cks_tp_mem_describe(raw_mem, raw_base + off, len, desc, sizeof(desc),
                                         &dlen),
                     CKS_OK);
        /* the descriptor is packed into the send before it returns */
        cr_assert_eq(cks_tp_send(raw.conn, CKS_MSG_PUT_PART, CKS_WIRE_F_RMA, req, &m, desc,
                                 dlen, CKS_MEM_HOST, NULL, NULL, NULL),
                     CKS_INPROGRESS);
    } else {
        cr_assert_eq(cks_tp_send(raw.conn, CKS_MSG_PUT_PART, 0, req, &m, heap + off, len,
                                 CKS_MEM_HOST, NULL, NULL, NULL),
                     CKS_INPROGRESS);
    }
    return req;
}

/* The status of the reply to req, waited for at most ms (1: none came). */
static int32_t reply_of(uint64_t req, int ms)
{
    CKS_TEST_RAW_WAIT(&raw, cks_test_raw_status_of(&raw, req) != 1, ms);
    return cks_test_raw_status_of(&raw, req);
}

static uint64_t arena_used(void)
{
    uint64_t used = 0;
    cr_assert_eq(cks_cluster_usage(cl, &used, NULL), CKS_OK);
    return used;
}

/* At most 10 s until the arena use is `want`; the last value seen. */
static uint64_t arena_settles_at(uint64_t want)
{
    return cks_test_usage_settles_at(cl, want, 10000);
}

/* Seal ("parts", 1) and check that `key` restores as want[0, size), and
 * that each of `absent` does not exist. */
static void seal_and_check(const char *key, const uint8_t *want, uint64_t size,
                           const char *const *absent, size_t nabsent)
{
    cks_restore_h r;
    uint8_t *got = malloc(size + 1);
    uint64_t len = 0;
    cks_get_params_t g = {0};
    cks_object_info_t info;
    cr_assert_not_null(got);
    cr_assert_eq(cks_version_seal(cl, "parts", 1), CKS_OK);
    cr_assert_eq(cks_restore_open(cl, "parts", 1, &r), CKS_OK);
    if (key != NULL) {
        g.key         = key;
        g.buffer      = got;
        g.buffer_size = size + 1;
        g.field_mask  = CKS_GET_FIELD_FLAGS;
        g.flags       = CKS_GET_VERIFY;
        cr_assert_eq(cks_get(r, &g, &len), CKS_OK, "get %s", key);
        cr_assert_eq(len, size);
        cr_assert(memcmp(got, want, size) == 0, "%s: WRONG BYTES", key);
    }
    for (size_t i = 0; i < nabsent; i++) {
        cr_assert_eq(cks_object_stat(r, absent[i], &info), CKS_ERR_NO_SUCH_KEY,
                     "the failed put's '%s' exists", absent[i]);
    }
    cks_restore_close(r);
    free(got);
}

/* Parts as descriptors (one of 3 MiB: the server's copy threads take it
 * where it has them) and as bytes, of odd sizes, in order: each is answered
 * once its bytes are in, the PUT once all are, and the object restores
 * exactly (its CRC checked). */
Test(parts, descriptors_and_bytes_make_an_exact_object)
{
    const uint64_t lens[] = {3 * MiB + 5, 4096, 1, 700 * KiB + 3, 2 * MiB};
    uint64_t size = 0, off = 0;
    uint64_t seed = cks_test_seed(0x9a47);
    for (size_t i = 0; i < CKS_ARRAY_SIZE(lens); i++) {
        size += lens[i];
    }
    cr_assert_leq(size, raw_len);
    cks_test_fill(raw_base, size, seed);
    memcpy(heap, raw_base, size);
    uint64_t put = open_put("obj", size);
    for (size_t i = 0; i < CKS_ARRAY_SIZE(lens); i++) {
        uint64_t req = send_part("obj", off, lens[i], i % 2 == 0, 0);
        cr_assert_eq(reply_of(req, 10000), CKS_OK, "part %zu: %s", i, raw.msg);
        if (i + 1 < CKS_ARRAY_SIZE(lens)) {
            cr_assert_eq(cks_test_raw_status_of(&raw, put), 1,
                         "the PUT was answered before its last part");
        }
        off += lens[i];
    }
    cr_assert_eq(reply_of(put, 10000), CKS_OK, "the PUT: %s", raw.msg);
    seal_and_check("obj", heap, size, NULL, 0);
}

/* A part that does not follow the last one, that goes past the end, or
 * that names no put in parts is refused with a message; the first two fail
 * their put (its PUT answered with the error, its space freed), a cancel
 * fails it with CKS_ERR_CANCELED; the key may be put again, and the version
 * seals with only what was stored. */
Test(parts, bad_parts_and_a_cancel_fail_the_put_and_free_its_space)
{
    uint64_t base = arena_used();
    uint64_t seed = cks_test_seed(0xbad9);
    cks_test_fill(raw_base, 2 * MiB, seed);

    /* a gap */
    uint64_t put = open_put("gap", 2 * MiB);
    cr_assert_eq(reply_of(send_part("gap", 0, MiB, 1, 0), 10000), CKS_OK);
    int32_t st = reply_of(send_part("gap", MiB + 4096, 4096, 1, 0), 10000);
    cr_assert_eq(st, CKS_ERR_BAD_MESSAGE, "a gap: %s (%s)", cks_status_name(st), raw.msg);
    cr_assert_neq(raw.msg[0], '\0');
    cr_log_info("a gap, then its PUT answered: %s", raw.msg);
    cr_assert_eq(reply_of(put, 10000), CKS_ERR_BAD_MESSAGE);
    /* later parts of a failed put are refused */
    st = reply_of(send_part("gap", MiB, 4096, 1, 0), 10000);
    cr_assert_lt(st, 0, "a part after the put failed: %s", cks_status_name(st));

    /* past the end */
    put = open_put("long", MiB);
    st  = reply_of(send_part("long", 0, MiB + 1, 1, 0), 10000);
    cr_assert_eq(st, CKS_ERR_BAD_MESSAGE, "past the end: %s", cks_status_name(st));
    cr_assert_eq(reply_of(put, 10000), CKS_ERR_BAD_MESSAGE);

    /* no put in parts of that key (and a PUT without the flag takes none) */
    st = reply_of(send_part("none", 0, 4096, 1, 0), 10000);
    cr_assert_eq(st, CKS_ERR_NO_SUCH_KEY, "no put: %s", cks_status_name(st));
    cr_log_info("no put: %s", raw.msg);

    /* a cancel after a part */
    put = open_put("cancel", 2 * MiB);
    cr_assert_eq(reply_of(send_part("cancel", 0, MiB, 1, 0), 10000), CKS_OK);
    cr_assert_eq(reply_of(send_part("cancel", 0, 0, 0, 1), 10000), CKS_OK);
    cr_assert_eq(reply_of(put, 10000), CKS_ERR_CANCELED);

    uint64_t used = arena_settles_at(base);
    cr_assert_eq(used, base, "arena use %llu after the failed puts, %llu before",
                 (unsigned long long)used, (unsigned long long)base);

    /* a failed put's key is free again */
    put = open_put("gap", 2 * MiB);
    cr_assert_eq(reply_of(send_part("gap", 0, 2 * MiB, 1, 0), 10000), CKS_OK);
    cr_assert_eq(reply_of(put, 10000), CKS_OK);
    const char *const absent[] = {"long", "cancel", "none"};
    seal_and_check("gap", raw_base, 2 * MiB, absent, CKS_ARRAY_SIZE(absent));
}

/* A client that goes away in the middle of a put in parts: the server ends
 * the put (its connection failed) and frees the space, and the version
 * seals without it. */
Test(parts, a_client_gone_mid_object_frees_its_space)
{
    uint64_t base = arena_used();
    cks_test_fill(raw_base, MiB, cks_test_seed(0x90e));
    (void)open_put("half", 4 * MiB);
    cr_assert_eq(reply_of(send_part("half", 0, MiB, 1, 0), 10000), CKS_OK);
    cr_assert_gt(arena_used(), base, "the put took no space");
    cks_tp_mem_unmap(raw_mem);
    cks_test_raw_close(&raw);
    raw.w = NULL;
    uint64_t used = arena_settles_at(base);
    cr_assert_eq(used, base, "arena use %llu after the client went, %llu before",
                 (unsigned long long)used, (unsigned long long)base);
    const char *const absent[] = {"half"};
    seal_and_check(NULL, NULL, 0, absent, 1);
}

/* A client that stops sending parts (its connection up): after the receive
 * timeout (--recv-timeout 2) the put fails with CKS_ERR_TIMEOUT and its
 * space is freed. */
Test(parts, a_put_whose_parts_stop_coming_times_out)
{
    setup_with("--recv-timeout 2");
    uint64_t base = arena_used();
    cks_test_fill(raw_base, MiB, cks_test_seed(0x7173));
    uint64_t put = open_put("stuck", 3 * MiB);
    cr_assert_eq(reply_of(send_part("stuck", 0, MiB, 1, 0), 10000), CKS_OK);
    uint64_t t0 = cks_time_ns();
    int32_t st  = reply_of(put, 10000);
    double s    = (double)(cks_time_ns() - t0) / 1e9;
    cr_assert_eq(st, CKS_ERR_TIMEOUT, "the PUT: %s after %.1f s", cks_status_name(st), s);
    cr_assert(s >= 1.5 && s < 6.0, "answered after %.1f s (timeout 2 s)", s);
    uint64_t used = arena_settles_at(base);
    cr_assert_eq(used, base, "arena use %llu, %llu before", (unsigned long long)used,
                 (unsigned long long)base);
    const char *const absent[] = {"stuck"};
    seal_and_check(NULL, NULL, 0, absent, 1);
}
