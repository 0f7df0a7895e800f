/*
 * DESIGN: one-copy transfers between a client's mapped region and the
 * server's arena (or a buffer), described by the client's descriptor,
 * checked part by part, handed to the copy threads when large. See rma.c
 * for the whole design.
 *
 * Never: copy outside the region the descriptor names.
 */
#include "tp_int.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

/* ---- transfers ------------------------------------------------------------------ */

typedef struct {
    cks_tp_conn_h conn;
    cks_tp_rkey_t *rk;
    cks_tp_done_cb_t cb;
    void *arg;
    cks_tp_send_req_t *reply; /* cks_tp_send_into(): sent once the bytes are there */
    size_t reply_len;
    uint64_t req_id;
    cks_status_t fail;        /* a checked write's failure, reported after the flush */
} cks_tp_rma_req_t;

static cks_tp_rma_req_t *cks_tp_rma_req(cks_tp_conn_h conn, cks_tp_rkey_t *rk,
                                        cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_rma_req_t *r = calloc(1, sizeof(*r));
    if (r != NULL) {
        r->conn = conn;
        r->rk   = rk;
        r->cb   = cb;
        r->arg  = arg;
        rk->refs++;
        cks_tp_conn_get(conn);
    }
    return r;
}

static void cks_tp_rma_req_free(cks_tp_rma_req_t *r)
{
    r->rk->refs--;
    cks_tp_conn_put(r->conn);
    free(r);
}

static void cks_tp_rma_get_done(void *request, ucs_status_t st, void *arg)
{
    cks_tp_rma_req_t *r = arg;
    cks_status_t status = cks_tp_status(st, "read peer memory");
    r->cb(r->arg, status);
    cks_tp_rma_req_free(r);
    ucp_request_free(request);
}

/* A get's bytes copied by the copy threads. */
static void cks_tp_rma_copied_in(void *arg, cks_status_t status)
{
    cks_tp_rma_req_t *r = arg;
    r->cb(r->arg, status);
    cks_tp_rma_req_free(r);
}

static void cks_tp_rma_params(ucp_request_param_t *p, ucp_send_nbx_callback_t cb, void *arg)
{
    memset(p, 0, sizeof(*p));
    p->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                      UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p->cb.send   = cb;
    p->user_data = arg;
}

cks_status_t cks_tp_rma_get(cks_tp_worker_h w, cks_tp_data_t *data, void *buf,
                            cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_conn_h conn = data->conn;
    ucp_request_param_t p;
    cks_tp_rma_req_t *r;
    cks_tp_rkey_t *rk;
    cks_status_t status;
    void *req;

    status = cks_tp_rkey_get(conn, data, &rk);
    if (status != CKS_OK) {
        return status;
    }
    if ((r = cks_tp_rma_req(conn, rk, cb, arg)) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    if (rk->local != NULL && cks_tp_copy_wants(w, data->length)) {
        const uint8_t *src = (const uint8_t *)rk->local + (data->rma_addr - rk->seg_base);
        status = cks_tp_copy_submit(w, buf, src, data->length,
                                    cks_tp_rkey_unfaulted(rk, data->rma_addr, data->length), 0,
                                    NULL, cks_tp_rma_copied_in, r);
        if (status != CKS_OK) {
            cks_tp_rma_req_free(r);
            return status;
        }
        data->is_rma = 0; /* taken */
        return CKS_INPROGRESS;
    }
    cks_tp_rkey_fault(rk, data->rma_addr, data->length);
    cks_tp_rma_params(&p, cks_tp_rma_get_done, r);
    req = ucp_get_nbx(conn->data_ep, buf, data->length, data->rma_addr, rk->rkey, &p);
    if (UCS_PTR_IS_ERR(req)) {
        cks_tp_rma_req_free(r);
        return cks_tp_status(UCS_PTR_STATUS(req), "read peer memory");
    }
    data->is_rma = 0; /* taken */
    return CKS_INPROGRESS;
}

/* The reply of a cks_tp_send_into() whose write failed: an error status. */
static void cks_tp_rma_reply_error(cks_tp_rma_req_t *r, cks_status_t status)
{
    cks_msg_status_t m = {status, cks_wire_cstr(status == CKS_ERR_CRC_MISMATCH
                                                    ? "the bytes failed their CRC check"
                                                    : "could not write into the client's memory")};
    cks_tp_send_req_t *s = r->reply;
    size_t len;

    r->reply = NULL;
    if (cks_wire_pack(CKS_MSG_STATUS_REPLY, 0, r->req_id, &m, s->hdr, sizeof(s->hdr), &len) !=
        CKS_OK) {
        cks_tp_send_req_put(r->conn->worker, s);
        return;
    }
    (void)cks_tp_send_hdr(r->conn, s, len, NULL, 0, CKS_MEM_HOST, NULL, NULL, NULL);
}

static void cks_tp_rma_flush_done(void *request, ucs_status_t st, void *arg)
{
    cks_tp_rma_req_t *r = arg;
    cks_status_t status = cks_tp_status(st, "write peer memory");

    if (status == CKS_OK && r->fail != CKS_OK) {
        status = r->fail;
    }
    if (status == CKS_OK) {
        cks_tp_send_req_t *s = r->reply;
        r->reply             = NULL;
        status = cks_tp_send_hdr(r->conn, s, r->reply_len, NULL, 0, CKS_MEM_HOST, NULL, r->cb,
                                 r->arg);
        if (status == CKS_INPROGRESS) {
            r->cb = NULL; /* runs when the reply is sent */
        }
    } else {
        cks_tp_rma_reply_error(r, status);
    }
    if (r->cb != NULL) {
        r->cb(r->arg, status == CKS_INPROGRESS ? CKS_OK : status);
    }
    if (r->reply != NULL) {
        cks_tp_send_req_put(r->conn->worker, r->reply);
    }
    cks_tp_rma_req_free(r);
    if (request != NULL) {
        ucp_request_free(request);
    }
}

/* The puts are done locally; the flush says they are in the peer's memory
 * (between processes of one host it is at once: no request). */
static void cks_tp_rma_flush(cks_tp_rma_req_t *r)
{
    ucp_request_param_t p;
    void *req;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send      = cks_tp_rma_flush_done;
    p.user_data    = r;
    req            = ucp_ep_flush_nbx(r->conn->data_ep, &p);
    if (req == NULL || UCS_PTR_IS_ERR(req)) {
        cks_tp_rma_flush_done(NULL, UCS_PTR_STATUS(req), r);
    }
}

static void cks_tp_rma_put_done(void *request, ucs_status_t st, void *arg)
{
    cks_tp_rma_req_t *r = arg;

    ucp_request_free(request);
    if (st != UCS_OK) {
        cks_tp_rma_flush_done(NULL, st, r);
        return;
    }
    cks_tp_rma_flush(r);
}

/* A reply's bytes copied into the peer's region by the copy threads: the
 * reply goes now (cancelled at stop: the owner is told, nothing is sent). */
static void cks_tp_rma_copied_out(void *arg, cks_status_t status)
{
    cks_tp_rma_req_t *r = arg;

    if (status == CKS_OK || status == CKS_ERR_CRC_MISMATCH) {
        r->fail = status; /* a mismatch: the error reply instead */
        cks_tp_rma_flush_done(NULL, UCS_OK, r);
        return;
    }
    if (r->cb != NULL) {
        r->cb(r->arg, status);
    }
    cks_tp_send_req_put(r->conn->worker, r->reply);
    r->reply = NULL;
    cks_tp_rma_req_free(r);
}

/* Write [payload, +len) to the mapped region at addr in slices, checking
 * each slice as written right after its put, while it is in this core's
 * cache: one pass over memory where a check first and a copy then make two.
 * UCX copies between processes of one host at once (its shared-memory
 * transports memcpy into the mapping); a put that it queues instead has its
 * slice checked from the source. *crc_p gets the chained check. */
static cks_status_t cks_tp_put_checked(cks_tp_conn_h conn, cks_tp_rkey_t *rk,
                                       const uint8_t *payload, size_t len, uint64_t addr,
                                       const cks_tp_check_t *check, uint64_t *crc_p)
{
    const uint8_t *local = (const uint8_t *)rk->local + (addr - rk->seg_base);
    ucp_request_param_t p;
    uint64_t crc = 0;
    size_t off, n;
    void *req;

    memset(&p, 0, sizeof(p)); /* no callback: NULL when done at once */
    for (off = 0; off < len; off += n) {
        n   = CKS_MIN(len - off, (size_t)CKS_TP_CHECK_SLICE);
        req = ucp_put_nbx(conn->data_ep, payload + off, n, addr + off, rk->rkey, &p);
        if (UCS_PTR_IS_ERR(req)) {
            return cks_tp_status(UCS_PTR_STATUS(req), "write peer memory");
        }
        if (req == NULL) {
            crc = check->fn(crc, local + off, n);
        } else {
            crc = check->fn(crc, payload + off, n);
            ucp_request_free(req); /* completes before the flush */
        }
    }
    *crc_p = crc;
    return CKS_OK;
}

cks_status_t cks_tp_send_into(cks_tp_conn_h conn, unsigned type, uint64_t req_id,
                              const void *body, const void *payload, size_t payload_len,
                              cks_tp_mem_h payload_memh, const cks_tp_data_t *dest,
                              const cks_tp_check_t *check, cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_worker_h w = conn->worker;
    ucp_request_param_t p;
    cks_tp_rma_req_t *r;
    cks_tp_send_req_t *s;
    cks_tp_rkey_t *rk;
    cks_status_t status;
    size_t len;
    void *req;

    if (dest == NULL || !dest->is_rma || payload_len == 0) {
        return cks_tp_send(conn, type, 0, req_id, body, payload, payload_len, CKS_MEM_HOST,
                           payload_memh, cb, arg);
    }
    if (payload_len > dest->length) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_tp_rkey_get(conn, dest, &rk);
    if (status != CKS_OK) {
        return status;
    }
    if (check != NULL && rk->local == NULL &&
        check->fn(0, payload, payload_len) != check->expect) {
        return CKS_ERR_CRC_MISMATCH; /* not mapped here: checked before it goes */
    }
    if ((s = cks_tp_send_req_get(w)) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_wire_pack(type, CKS_WIRE_F_RMA, req_id, body, s->hdr, sizeof(s->hdr), &len);
    if (status != CKS_OK || (r = cks_tp_rma_req(conn, rk, cb, arg)) == NULL) {
        cks_tp_send_req_put(w, s);
        return status != CKS_OK ? status : CKS_ERR_NO_MEMORY;
    }
    r->reply     = s;
    r->reply_len = len;
    r->req_id    = req_id;
    if (rk->local != NULL && cks_tp_copy_wants(w, payload_len) &&
        (check == NULL || check->combine != NULL)) {
        uint8_t *dst = (uint8_t *)rk->local + (dest->rma_addr - rk->seg_base);
        status = cks_tp_copy_submit(w, dst, payload, payload_len,
                                    cks_tp_rkey_unfaulted(rk, dest->rma_addr, payload_len), 1,
                                    check, cks_tp_rma_copied_out, r);
        if (status == CKS_OK) {
            return CKS_INPROGRESS;
        }
        r->cb = NULL; /* the caller learns it from the return value */
        cks_tp_send_req_put(w, r->reply);
        r->reply = NULL;
        cks_tp_rma_req_free(r);
        return status;
    }
    cks_tp_rkey_fault(rk, dest->rma_addr, payload_len);
    if (check != NULL && rk->local != NULL) {
        uint64_t crc = 0;
        /* a failure is reported after the flush: no slice put before it
         * may land after the peer has the answer */
        r->fail = cks_tp_put_checked(conn, rk, payload, payload_len, dest->rma_addr, check,
                                     &crc);
        if (r->fail == CKS_OK && crc != check->expect) {
            r->fail = CKS_ERR_CRC_MISMATCH;
        }
        cks_tp_rma_flush(r); /* then the reply, or the error */
        return CKS_INPROGRESS;
    }
    cks_tp_rma_params(&p, cks_tp_rma_put_done, r);
    req = ucp_put_nbx(conn->data_ep, payload, payload_len, dest->rma_addr, rk->rkey, &p);
    if (UCS_PTR_IS_ERR(req)) {
        r->cb = NULL; /* the caller learns it from the return value */
        cks_tp_send_req_put(w, r->reply);
        r->reply = NULL;
        cks_tp_rma_req_free(r);
        return cks_tp_status(UCS_PTR_STATUS(req), "write peer memory");
    }
    return CKS_INPROGRESS;
}
