/*
 * DESIGN: sending - a pool of send requests; zero-copy sends of a header and
 * the caller's payload (held while the connection's handshake runs, failed
 * with their connection), raw bytes (tests), and sends given up when UCX holds them long
 * after their connection closed. See ucx.c for the whole design.
 *
 * Never: copy a payload, or send on a connection that failed.
 */
#include "tp_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

/* ---- sending ---------------------------------------------------------------- */

cks_tp_send_req_t *cks_tp_send_req_get(cks_tp_worker_h w)
{
    cks_tp_send_req_t *s = w->free_sends;
    if (s != NULL) {
        w->free_sends = s->next;
    } else if ((s = malloc(sizeof(*s))) == NULL) {
        return NULL;
    }
    return s;
}

void cks_tp_send_req_put(cks_tp_worker_h w, cks_tp_send_req_t *s)
{
    s->next       = w->free_sends;
    w->free_sends = s;
}

static void cks_tp_inflight_add(cks_tp_worker_h w, cks_tp_send_req_t *s)
{
    s->in_prev = NULL;
    s->in_next = w->inflight;
    if (w->inflight != NULL) {
        w->inflight->in_prev = s;
    }
    w->inflight = s;
}

static void cks_tp_inflight_del(cks_tp_worker_h w, cks_tp_send_req_t *s)
{
    if (s->in_prev != NULL) {
        s->in_prev->in_next = s->in_next;
    } else {
        w->inflight = s->in_next;
    }
    if (s->in_next != NULL) {
        s->in_next->in_prev = s->in_prev;
    }
    s->in_prev = s->in_next = NULL;
}

static void cks_tp_send_done(void *request, ucs_status_t st, void *arg)
{
    cks_tp_send_req_t *s = arg;
    cks_tp_worker_h w    = s->worker;

    cks_tp_inflight_del(w, s);
    if (w->destroying) {
        /* ucp_worker_destroy() purges a send still queued on an endpoint
         * that never finished closing (one to a dead server, still wiring
         * up): its connection is freed and its owner is gone */
        free(s);
        ucp_request_free(request);
        return;
    }
    cks_status_t status = cks_tp_status(st, "send");
    s->conn->sends--;
    s->conn->progress_ns = cks_time_ns();
    if (s->cb != NULL) {
        s->cb(s->arg, status);
    }
    cks_tp_conn_put(s->conn);
    cks_tp_send_req_put(w, s);
    ucp_request_free(request);
}

cks_status_t cks_tp_send_hdr(cks_tp_conn_h conn, cks_tp_send_req_t *s, size_t hdr_len,
                             const void *payload, size_t payload_len, cks_mem_type_t mem_type,
                             cks_tp_mem_h payload_memh, cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_worker_h w = conn->worker;
    ucp_request_param_t p;
    cks_status_t status;
    void *req;

    s->worker = w;
    s->conn   = conn;
    s->cb     = cb;
    s->arg    = arg;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMORY_TYPE |
                     UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.send      = cks_tp_send_done;
    p.user_data    = s;
    p.flags        = UCP_AM_SEND_FLAG_REPLY;
    p.memory_type  = cks_tp_mem_type(mem_type);
    if (payload_memh != NULL) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p.memh = payload_memh->memh;
    }
    /* the callback may run inside ucp_am_send_nbx(): take the reference
     * and list the send first */
    cks_tp_conn_get(conn);
    if (conn->sends++ == 0) {
        conn->progress_ns = cks_time_ns();
    }
    cks_tp_inflight_add(w, s);
    req = ucp_am_send_nbx(conn->data_ep ? conn->data_ep : conn->ep, CKS_TP_AM_ID, s->hdr,
                          hdr_len, payload, payload_len, &p);
    if (UCS_PTR_IS_ERR(req) || req == NULL) {
        cks_tp_inflight_del(w, s);
    }
    if (UCS_PTR_IS_ERR(req)) {
        status = cks_tp_status(UCS_PTR_STATUS(req), "send");
        conn->sends--;
        cks_tp_send_req_put(w, s);
        cks_tp_conn_put(conn);
        return status;
    }
    if (req == NULL) { /* completed in place (a payload source only) */
        conn->sends--;
        conn->progress_ns = cks_time_ns();
        if (cb != NULL) {
            cb(arg, CKS_OK);
        }
        cks_tp_conn_put(conn);
        cks_tp_send_req_put(w, s);
    }
    return CKS_INPROGRESS;
}

/* Queue a packed send on a connection still in its handshake; it goes out
 * (or fails) when the handshake ends. Holds a reference on conn. */
static cks_status_t cks_tp_send_hold(cks_tp_conn_h conn, cks_tp_send_req_t *s, size_t hdr_len,
                                     const void *payload, size_t payload_len,
                                     cks_mem_type_t mem_type, cks_tp_mem_h payload_memh,
                                     cks_tp_done_cb_t cb, void *arg)
{
    s->conn         = conn;
    s->cb           = cb;
    s->arg          = arg;
    s->hdr_len      = hdr_len;
    s->payload      = payload;
    s->payload_len  = payload_len;
    s->mem_type     = mem_type;
    s->payload_memh = payload_memh;
    CKS_QUEUE_PUSH(conn->held_head, conn->held_tail, s);
    cks_tp_conn_get(conn);
    return CKS_INPROGRESS;
}

/* Pack the header into s, then send s - or, while the connection's
 * handshake runs, hold it (a server with a secret serves nothing before
 * AUTH); s goes back to the pool when packing fails. */
static cks_status_t cks_tp_send_packed(cks_tp_conn_h conn, cks_tp_send_req_t *s,
                                       unsigned type, uint32_t flags, uint64_t req_id,
                                       const void *body, const void *payload,
                                       size_t payload_len, cks_mem_type_t mem_type,
                                       cks_tp_mem_h payload_memh, cks_tp_done_cb_t cb,
                                       void *arg)
{
    size_t hdr_len;
    cks_status_t status = cks_wire_pack(type, flags, req_id, body, s->hdr, sizeof(s->hdr),
                                        &hdr_len);
    if (status != CKS_OK) {
        cks_error("%s: cannot pack %s: %s", conn->worker->name, cks_msg_name(type),
                  cks_status_string(status));
        cks_tp_send_req_put(conn->worker, s);
        return status;
    }
    if (conn->handshaking && !(cks_msg_flags(type) & CKS_MSG_F_PREAUTH)) {
        return cks_tp_send_hold(conn, s, hdr_len, payload, payload_len, mem_type,
                                payload_memh, cb, arg);
    }
    return cks_tp_send_hdr(conn, s, hdr_len, payload, payload_len, mem_type, payload_memh,
                           cb, arg);
}

cks_status_t cks_tp_send(cks_tp_conn_h conn, unsigned type, uint32_t flags,
                         uint64_t req_id, const void *body, const void *payload,
                         size_t payload_len, cks_mem_type_t mem_type,
                         cks_tp_mem_h payload_memh, cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_send_req_t *s;

    if (conn->failed || conn->closed) {
        return CKS_ERR_CONN_LOST;
    }
    if ((s = cks_tp_send_req_get(conn->worker)) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    if (payload_len > 0 && !(flags & CKS_WIRE_F_PAGE)) {
        flags |= CKS_WIRE_F_PAYLOAD;
    }
    return cks_tp_send_packed(conn, s, type, flags, req_id, body, payload, payload_len,
                              mem_type, payload_memh, cb, arg);
}

/* The handshake is over: send what was held (CKS_OK), or fail it. */
void cks_tp_held_release(cks_tp_conn_h conn, cks_status_t status)
{
    conn->handshaking = 0;
    while (conn->held_head != NULL) {
        cks_tp_send_req_t *s = conn->held_head;
        cks_tp_done_cb_t cb  = s->cb;
        void *arg            = s->arg;
        cks_status_t st      = status;
        conn->held_head      = s->next;
        if (conn->held_head == NULL) {
            conn->held_tail = NULL;
        }
        if (st == CKS_OK && !conn->failed && !conn->closed) {
            st = cks_tp_send_hdr(conn, s, s->hdr_len, s->payload, s->payload_len, s->mem_type,
                                 s->payload_memh, cb, arg);
            if (st == CKS_INPROGRESS) {
                cks_tp_conn_put(conn);
                continue;
            }
        } else {
            cks_tp_send_req_put(conn->worker, s);
            st = st == CKS_OK ? CKS_ERR_CONN_LOST : st;
        }
        if (cb != NULL) {
            cb(arg, st);
        }
        cks_tp_conn_put(conn);
    }
}

cks_status_t cks_tp_send_raw(cks_tp_conn_h conn, const void *bytes, size_t len,
                             const void *payload, size_t payload_len,
                             cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_send_req_t *s;

    if (conn->failed || conn->closed) {
        return CKS_ERR_CONN_LOST;
    }
    if (len > CKS_TP_SEND_BUF || (s = cks_tp_send_req_get(conn->worker)) == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    memcpy(s->hdr, bytes, len);
    return cks_tp_send_hdr(conn, s, len, payload, payload_len, CKS_MEM_HOST, NULL, cb, arg);
}

void cks_tp_send_abandon(cks_tp_worker_h w, cks_tp_done_cb_t cb, void *arg)
{
    for (cks_tp_send_req_t *s = w->inflight; s != NULL; s = s->in_next) {
        if (s->cb == cb && s->arg == arg) {
            s->cb  = NULL;
            s->arg = NULL;
        }
    }
    for (cks_tp_conn_h conn = w->conns; conn != NULL; conn = conn->next) {
        for (cks_tp_send_req_t *s = conn->held_head; s != NULL; s = s->next) {
            if (s->cb == cb && s->arg == arg) {
                s->cb  = NULL;
                s->arg = NULL;
            }
        }
    }
}

void cks_tp_sends_free(cks_tp_worker_h w)
{
    while (w->free_sends != NULL) {
        cks_tp_send_req_t *s = w->free_sends;
        w->free_sends        = s->next;
        free(s);
    }
    while (w->inflight != NULL) { /* sends ucp_worker_destroy() did not complete */
        cks_tp_send_req_t *s = w->inflight;
        cks_tp_inflight_del(w, s);
        free(s);
    }
}
