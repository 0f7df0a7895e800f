/*
 * DESIGN: the raw transport client of cks_test_raw.h. Its callbacks run on
 * the test's own thread, inside cks_tp_worker_wait(); they only count.
 */
#include "cks_test_raw.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static void cks_test_raw_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                                const cks_msg_any_t *body, cks_tp_data_t *data)
{
    cks_test_raw_t *r          = arg;
    const cks_msg_status_t *st = &body->m_STATUS_REPLY; /* every reply starts so */
    r->got++;
    r->hdr    = *hdr;
    r->status = st->status;
    snprintf(r->msg, sizeof(r->msg), "%.*s", (int)st->msg.len, st->msg.ptr ? st->msg.ptr : "");
    unsigned n       = r->nlog++ % (unsigned)(sizeof(r->log) / sizeof(r->log[0]));
    r->log[n].req_id = hdr->req_id;
    r->log[n].status = st->status;
}

int32_t cks_test_raw_status_of(const cks_test_raw_t *r, uint64_t req_id)
{
    unsigned cap = (unsigned)(sizeof(r->log) / sizeof(r->log[0]));
    unsigned n   = r->nlog < cap ? r->nlog : cap;
    for (unsigned i = 0; i < n; i++) {
        if (r->log[i].req_id == req_id) {
            return r->log[i].status;
        }
    }
    return 1;
}

static void cks_test_raw_on_bad(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                                cks_status_t status, const char *why)
{
    cks_test_raw_t *r = arg;
    r->got++;
    r->status = status;
    snprintf(r->msg, sizeof(r->msg), "(bad reply) %s", why);
}

static void cks_test_raw_on_err(void *arg, cks_tp_conn_h conn, cks_status_t status)
{
    ((cks_test_raw_t *)arg)->lost++;
}

static void cks_test_raw_hs_done(void *arg, cks_status_t status)
{
    cks_test_raw_t *r = arg;
    r->hs_done        = 1;
    r->hs_status      = status;
}

static void cks_test_raw_sent(void *arg, cks_status_t status)
{
    ((cks_test_raw_t *)arg)->sent++;
}

cks_status_t cks_test_raw_worker(cks_test_raw_t *r, const char *name)
{
    memset(r, 0, sizeof(*r));
    cks_tp_worker_params_t wp = {.name = name, .on_msg = cks_test_raw_on_msg,
                                 .on_bad_msg = cks_test_raw_on_bad,
                                 .on_conn_err = cks_test_raw_on_err, .arg = r};
    return cks_tp_worker_create(&wp, &r->w);
}

void cks_test_raw_open(cks_test_raw_t *r, uint16_t port, const char *name)
{
    cr_assert_eq(cks_test_raw_worker(r, name), CKS_OK);
    cr_assert_eq(cks_tp_conn_connect(r->w, "127.0.0.1", port, &r->conn), CKS_OK);
    cr_assert_eq(cks_tp_conn_handshake(r->conn, name, NULL, 10000, cks_test_raw_hs_done, r),
                 CKS_INPROGRESS);
    CKS_TEST_RAW_WAIT(r, r->hs_done, 15000);
    cr_assert(r->hs_done, "no answer to HELLO");
    cr_assert_eq(r->hs_status, CKS_OK, "handshake: %s", cks_status_name(r->hs_status));
    /* let the server's side finish its upgrade too */
    CKS_TEST_RAW_WAIT(r, cks_tp_conn_local(r->conn), 5000);
    cr_assert(cks_tp_conn_local(r->conn), "the connection to a server on this host is not local");
}

void cks_test_raw_close(cks_test_raw_t *r)
{
    cks_tp_conn_put(r->conn);
    cks_tp_worker_destroy(r->w);
}

int cks_test_raw_put(cks_test_raw_t *r, uint64_t req_id, const char *job, uint64_t version,
                     const char *key, uint64_t size, const void *desc, size_t len, int wait_ms)
{
    cks_msg_put_t m = {0};
    m.job           = cks_wire_cstr(job);
    m.version       = version;
    m.key           = cks_wire_cstr(key);
    m.kind          = CKS_KIND_OTHER;
    m.size          = size;
    return cks_test_raw_request(r, CKS_MSG_PUT, CKS_WIRE_F_RMA, req_id, &m, desc, len, wait_ms);
}

/* The end of a handshake, for cks_test_raw_handshake(). */
typedef struct {
    int done;
    cks_status_t status;
} cks_test_raw_hs_t;

static void cks_test_raw_hs_end(void *arg, cks_status_t status)
{
    cks_test_raw_hs_t *h = arg;
    h->status            = status;
    h->done              = 1;
}

cks_status_t cks_test_raw_handshake(cks_tp_worker_h w, uint16_t port, const char *name,
                                    const cks_tp_secret_t *secret, cks_tp_conn_h *conn_p)
{
    cks_test_raw_hs_t h = {0};
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", port, conn_p), CKS_OK,
                 "connect to port %u", port);
    cr_assert_eq(cks_tp_conn_handshake(*conn_p, name, secret, 10000, cks_test_raw_hs_end, &h),
                 CKS_INPROGRESS);
    uint64_t until = cks_time_ns() + 15ull * 1000000000ull;
    while (!h.done && cks_time_ns() < until) {
        cks_tp_worker_wait(w, 20);
    }
    cr_assert(h.done, "no end to the handshake with port %u", port);
    return h.status;
}

int cks_test_raw_request(cks_test_raw_t *r, unsigned type, uint32_t flags, uint64_t req_id,
                         const void *body, const void *payload, size_t len, int wait_ms)
{
    r->got    = 0;
    r->sent   = 0;
    r->msg[0] = '\0';
    r->status = 1;
    cr_assert_eq(cks_tp_send(r->conn, type, flags, req_id, body, payload, len, CKS_MEM_HOST,
                             NULL, cks_test_raw_sent, r),
                 CKS_INPROGRESS, "send %s", cks_msg_name(type));
    CKS_TEST_RAW_WAIT(r, r->got > 0 && r->sent > 0, wait_ms);
    cr_assert_eq(r->sent, 1, "the request was not sent");
    if (r->got > 0) {
        cr_assert_eq(r->hdr.req_id, req_id, "a reply to another request");
    }
    return r->got > 0;
}
