/*
 * DESIGN: receiving - the one active-message handler through which every
 * ckstore message arrives (its checks before the owner sees it: the
 * header, payload flags, descriptors, replies to our calls, the flood
 * limit), and payloads received zero-copy into the owner's memory, each
 * with its deadline (a common/deadline.c list). See ucx.c for the whole
 * design.
 *
 * Never: hand the owner a message that failed a check, or copy a payload.
 */
#include "tp_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

/* ---- receiving --------------------------------------------------------------- */

/* A message refused before its owner saw it: logged, and the owner told
 * (hdr NULL when not even the header could be read). Returns UCS_OK: UCX
 * drops any payload. */
static ucs_status_t cks_tp_bad_msg(cks_tp_worker_h w, cks_tp_conn_h conn,
                                   const cks_wire_hdr_t *hdr, cks_status_t status,
                                   const char *why)
{
    cks_warn("%s: bad message %s from %s: %s (%s)", w->name,
             hdr != NULL ? cks_msg_name(hdr->type) : "?", conn->peer, why,
             cks_status_name(status));
    if (w->params.on_bad_msg != NULL) {
        w->params.on_bad_msg(w->params.arg, conn, hdr, status, why);
    }
    return UCS_OK;
}

ucs_status_t cks_tp_am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    cks_tp_worker_h w = arg;
    cks_tp_conn_h conn = NULL;
    cks_wire_hdr_t hdr;
    cks_msg_any_t body;
    cks_tp_data_t d;
    char why[128];
    cks_status_t status;

    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
        conn = cks_tp_slot_find(w, param->reply_ep);
        /* not one we closed and UCX has not let go of yet (its owner let go
         * of it: what still comes on it is dropped below) */
        if (conn == NULL && param->reply_ep != NULL &&
            !cks_tp_ep_closing(w, param->reply_ep)) {
            conn = cks_tp_conn_adopt(w, param->reply_ep);
        }
    }
    if (conn == NULL || conn->failed || conn->refused || conn->close_at_ns != 0) {
        cks_debug("%s: message from an unknown or closed endpoint dropped", w->name);
        return UCS_OK;
    }
    status = cks_wire_unpack(header, header_length, &hdr, &body, why, sizeof(why));
    if (status != CKS_OK) {
        int have_hdr = header_length >= CKS_WIRE_HDR_LEN;
        if (have_hdr) {
            const uint8_t *h = header;
            hdr.type         = (uint16_t)((h[6] << 8) | h[7]);
            hdr.flags        = 0;
            hdr.body_len     = 0;
            hdr.req_id       = cks_get_be64(h + 16);
        }
        return cks_tp_bad_msg(w, conn, have_hdr ? &hdr : NULL, status, why);
    }
    if ((length > 0) != !!(hdr.flags & (CKS_WIRE_F_PAYLOAD | CKS_WIRE_F_PAGE))) {
        return cks_tp_bad_msg(w, conn, &hdr, CKS_ERR_BAD_MESSAGE, "payload and flags disagree");
    }
    if (CKS_MSG_IS_REPLY(hdr.type) && w->require_auth && !conn->auth.authed &&
        !conn->outgoing) {
        cks_warn("%s: reply from unauthenticated %s dropped", w->name, conn->peer);
        return UCS_OK;
    }
    memset(&d, 0, sizeof(d));
    d.conn    = conn;
    d.length  = length;
    d.is_rndv = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
    d.ptr     = d.is_rndv ? NULL : data;
    d.desc    = d.is_rndv ? data : NULL;
    if (cks_tp_call_reply(w, conn,
                          conn->data_ep != NULL && (param->recv_attr &
                                                    UCP_AM_RECV_ATTR_FIELD_REPLY_EP) &&
                              param->reply_ep == conn->data_ep,
                          &hdr, &body,
                          length > 0 && !(hdr.flags & CKS_WIRE_F_RMA) ? &d : NULL)) {
        /* a reply to one of our calls; a payload no cks_tp_call_data()
         * reply callback took is dropped */
        return UCS_OK;
    }
    /* a reply that answered none of our calls, on a connection a listener
     * accepted (a client's), is answered like a request: it is held to the
     * same limit */
    if ((!CKS_MSG_IS_REPLY(hdr.type) || conn->accepted) &&
        (conn->overrun || conn->sends >= (w->params.max_pending ? w->params.max_pending
                                                                : CKS_TP_MAX_PENDING))) {
        /* a peer that sends requests but does not take its replies: serve
         * nothing more; cks_tp_worker_sweep() closes it */
        if (!conn->overrun) {
            cks_warn("%s: %s does not read its replies (%u in flight): closing it", w->name,
                     conn->peer, conn->sends);
        }
        conn->overrun = 1;
        return UCS_OK;
    }
    /* descriptors come with the requests of the table's rma column (PUT's
     * payload, where GET's and CHUNK_GET's reply goes, MEM_MAP's region);
     * its replies (of GET and CHUNK_GET) say the bytes went there */
    unsigned mf = cks_msg_flags(hdr.type);
    if ((hdr.flags & CKS_WIRE_F_RMA) &&
        (!(mf & CKS_MSG_F_RMA) ||
         (length > 0 ? (mf & CKS_MSG_F_REPLY) || d.is_rndv ||
                           cks_tp_rma_parse(data, length, &d) != CKS_OK
                     : !(mf & CKS_MSG_F_REPLY)))) {
        return cks_tp_bad_msg(w, conn, &hdr, CKS_ERR_BAD_MESSAGE, "bad RMA descriptor");
    }
    cks_tp_conn_get(conn);
    w->params.on_msg(w->params.arg, conn, &hdr, &body, length > 0 ? &d : NULL);
    cks_tp_conn_put(conn);
    return UCS_OK;
}

static void cks_tp_recv_done(void *request, ucs_status_t st, size_t length, void *arg)
{
    cks_tp_recv_req_t *r = arg;
    cks_tp_worker_h w    = r->worker;
    cks_status_t status  = cks_tp_status(st, "receive payload");
    (void)length;
    if (!w->destroying) { /* a destroyed worker let go of its list */
        cks_dl_del(&w->recvs, &r->dl);
    }
    if (r->cb != NULL) {
        r->cb(r->arg, status);
    }
    if (r->conn != NULL) {
        cks_tp_conn_put(r->conn);
    }
    free(r);
    ucp_request_free(request);
}

/* When a payload of `length` bytes being received now is late: the
 * worker's recv_timeout_ms, plus its length at recv_min_rate. */
static uint64_t cks_tp_recv_deadline(cks_tp_worker_h w, size_t length)
{
    if (w->params.recv_timeout_ms == 0) {
        return CKS_DL_NEVER;
    }
    uint64_t ns = (uint64_t)w->params.recv_timeout_ms * 1000000ull;
    if (w->params.recv_min_rate > 0) {
        ns += (uint64_t)((double)length / (double)w->params.recv_min_rate * 1e9);
    }
    return cks_time_ns() + ns;
}

int cks_tp_recvs_expire(cks_tp_worker_h w)
{
    uint64_t now = cks_time_ns();
    /* closing a connection completes its receives (failed), which takes
     * them out and may free others: each one due is parked first */
    for (cks_dl_t *e; (e = cks_dl_due(&w->recvs, now)) != NULL;) {
        cks_tp_recv_req_t *r = CKS_CONTAINER_OF(e, cks_tp_recv_req_t, dl);
        uint64_t late_ns     = now - e->due_ns;
        cks_dl_move(&w->recvs, e, CKS_DL_NEVER);
        if (r->conn->failed || r->conn->closed) {
            continue; /* its completion comes with the close */
        }
        cks_tp_conn_h conn = r->conn;
        cks_warn("%s: a payload from %s did not arrive in %llu ms: closing the "
                 "connection", w->name, conn->peer,
                 (unsigned long long)(late_ns / 1000000ull +
                                      w->params.recv_timeout_ms));
        cks_tp_conn_get(conn);
        cks_tp_conn_fail(conn, 1, CKS_ERR_TIMEOUT); /* r may be gone */
        cks_tp_conn_put(conn);
    }
    return cks_dl_wait_ms(&w->recvs, now, -1);
}

cks_status_t cks_tp_data_recv(cks_tp_worker_h w, cks_tp_data_t *data, void *buf,
                              cks_mem_type_t mem_type, cks_tp_mem_h buf_memh,
                              cks_tp_done_cb_t cb, void *arg)
{
    ucp_request_param_t p;
    cks_tp_recv_req_t *r;
    void *req;

    if (data->is_rma) {
        return cks_tp_rma_get(w, data, buf, cb, arg);
    }
    if (!data->is_rndv || data->desc == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    r = malloc(sizeof(*r));
    if (r == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    r->worker      = w;
    r->cb          = cb;
    r->arg         = arg;
    r->conn        = data->conn;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv_am     = cks_tp_recv_done;
    p.user_data      = r;
    p.memory_type    = cks_tp_mem_type(mem_type);
    if (buf_memh != NULL) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p.memh = buf_memh->memh;
    }
    /* linked (and its connection held) before UCX may complete it */
    cks_tp_conn_get(r->conn);
    cks_dl_add(&w->recvs, &r->dl, cks_tp_recv_deadline(w, data->length));
    req        = ucp_am_recv_data_nbx(w->worker, data->desc, buf, data->length, &p);
    data->desc = NULL;
    if (UCS_PTR_IS_ERR(req)) {
        cks_dl_del(&w->recvs, &r->dl);
        cks_tp_conn_put(r->conn);
        free(r);
        return cks_tp_status(UCS_PTR_STATUS(req), "receive payload");
    }
    return CKS_INPROGRESS;
}
