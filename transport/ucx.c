/*
 * DESIGN: the UCX side of the transport. Owns the UCP context and worker,
 * listeners, endpoints (wrapped as reference-counted connections; conn.c),
 * sends (zero-copy, held during a handshake, produced while sent) and
 * registered memory; the one active-message handler through which every
 * ckstore message arrives is in recv.c, calls in call.c.
 *
 * Thread: everything here runs on the thread that progresses the worker,
 * except cks_tp_worker_signal(). Callbacks into the owner run from
 * cks_tp_worker_progress(); a callback may send, receive and drop references,
 * but a connection is freed only when its last reference goes, never inside
 * its own UCX callback (close requests finish on their own).
 *
 * Never: copy a payload (payloads go zero-copy to or from the caller's
 * memory, or are copied exactly once from an eager buffer by the owner),
 * block, or translate a ucs_status_t anywhere but cks_tp_status().
 */
#include "tp_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>


/* ---- status translation (the one place) ---------------------------------- */

cks_status_t cks_tp_status(ucs_status_t st, const char *what)
{
    switch (st) {
        case UCS_OK:
            return CKS_OK;
        case UCS_INPROGRESS:
            return CKS_INPROGRESS;
        case UCS_ERR_CANCELED:
            return CKS_ERR_CANCELED;
        case UCS_ERR_NO_MEMORY:
            cks_warn("%s: %s", what, ucs_status_string(st));
            return CKS_ERR_NO_MEMORY;
        case UCS_ERR_TIMED_OUT:
        case UCS_ERR_ENDPOINT_TIMEOUT:
            cks_info("%s: %s", what, ucs_status_string(st));
            return CKS_ERR_TIMEOUT;
        case UCS_ERR_UNREACHABLE:
        case UCS_ERR_REJECTED:
            cks_info("%s: %s", what, ucs_status_string(st));
            return CKS_ERR_UNREACHABLE;
        case UCS_ERR_CONNECTION_RESET:
        case UCS_ERR_NOT_CONNECTED:
        case UCS_ERR_IO_ERROR:
            cks_info("%s: %s", what, ucs_status_string(st));
            return CKS_ERR_CONN_LOST;
        default:
            cks_warn("%s: %s", what, ucs_status_string(st));
            return CKS_ERR_TRANSPORT;
    }
}

/* ---- sending ---------------------------------------------------------------- */

cks_tp_send_req_t *cks_tp_send_req_get(cks_tp_worker_h w)
{
    cks_tp_send_req_t *s = w->free_sends;
    if (s != NULL) {
        w->free_sends = s->next;
    } else if ((s = malloc(sizeof(*s))) == NULL) {
        return NULL;
    }
    s->src = NULL;
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
    if (s->src != NULL) {
        /* the bytes come from the source's pack(), as UCX sends them */
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        p.datatype    = w->stream_dt;
        p.memory_type = UCS_MEMORY_TYPE_HOST;
        payload       = s->src;
        payload_len   = s->src->len;
        /* UCX 1.13 takes the datatype only when NO_IMM_CMPL is not asked
         * for (with both it sends the address as contiguous bytes): the
         * send may then complete in place, below */
        p.op_attr_mask &= ~(uint32_t)UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
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

/* ---- payloads produced while they are sent (generic datatype) ---------------- */

static void *cks_tp_stream_start(void *context, const void *buffer, size_t count)
{
    return (void *)buffer; /* the cks_tp_source_t */
}

static void *cks_tp_stream_start_unpack(void *context, void *buffer, size_t count)
{
    return NULL; /* never received with this datatype */
}

static size_t cks_tp_stream_packed_size(void *state)
{
    return ((const cks_tp_source_t *)state)->len;
}

static size_t cks_tp_stream_pack(void *state, size_t offset, void *dest, size_t max_length)
{
    const cks_tp_source_t *src = state;
    size_t n = CKS_MIN(max_length, src->len - offset);
    return n == 0 ? 0 : src->pack(src->arg, offset, dest, n);
}

static ucs_status_t cks_tp_stream_unpack(void *state, size_t offset, const void *src,
                                         size_t length)
{
    return UCS_ERR_UNSUPPORTED;
}

static void cks_tp_stream_finish(void *state)
{
}

static const ucp_generic_dt_ops_t cks_tp_stream_ops = {
    .start_pack   = cks_tp_stream_start,
    .start_unpack = cks_tp_stream_start_unpack,
    .packed_size  = cks_tp_stream_packed_size,
    .pack         = cks_tp_stream_pack,
    .unpack       = cks_tp_stream_unpack,
    .finish       = cks_tp_stream_finish,
};

cks_status_t cks_tp_send_stream(cks_tp_conn_h conn, unsigned type, uint32_t flags,
                                uint64_t req_id, const void *body, const cks_tp_source_t *src,
                                cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_worker_h w = conn->worker;
    cks_tp_send_req_t *s;
    cks_status_t status;

    if (src == NULL || src->len == 0 || src->pack == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (conn->failed || conn->closed) {
        return CKS_ERR_CONN_LOST;
    }
    if (w->stream_dt == 0) {
        status = cks_tp_status(ucp_dt_create_generic(&cks_tp_stream_ops, NULL, &w->stream_dt),
                               "generic datatype");
        if (status != CKS_OK) {
            w->stream_dt = 0;
            return status;
        }
    }
    if ((s = cks_tp_send_req_get(w)) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    s->src = src;
    return cks_tp_send_packed(conn, s, type, flags | CKS_WIRE_F_PAYLOAD, req_id, body, NULL,
                              src->len, CKS_MEM_HOST, NULL, cb, arg);
}

int cks_tp_worker_cuda_direct(cks_tp_worker_h w)
{
    ucp_context_attr_t attr;
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(w->context, &attr) != UCS_OK) {
        return 0;
    }
    return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
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

/* ---- memory ------------------------------------------------------------------ */

cks_status_t cks_tp_mem_map(cks_tp_worker_h w, void *addr, size_t len, cks_tp_mem_h *mem_p)
{
    ucp_mem_map_params_t p;
    cks_tp_mem_h m;
    cks_status_t status;

    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    m->worker    = w;
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    p.address    = addr;
    p.length     = len;
    status       = cks_tp_status(ucp_mem_map(w->context, &p, &m->memh), "mem map");
    if (status != CKS_OK) {
        free(m);
        return status;
    }
    *mem_p = m;
    return CKS_OK;
}

void cks_tp_mem_unmap(cks_tp_mem_h m)
{
    if (m != NULL) {
        ucp_mem_unmap(m->worker->context, m->memh);
        free(m->rkey);
        free(m);
    }
}

/* ---- worker ----------------------------------------------------------------- */

cks_status_t cks_tp_worker_create(const cks_tp_worker_params_t *params,
                                  cks_tp_worker_h *worker_p)
{
    ucp_params_t cp;
    ucp_worker_params_t wp;
    ucp_am_handler_param_t ap;
    ucp_config_t *config;
    cks_tp_worker_h w;
    cks_status_t status;

    if (params == NULL || params->on_msg == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    if (cks_hmap_create(&w->calls) != CKS_OK) {
        free(w);
        return CKS_ERR_NO_MEMORY;
    }
    w->params            = *params;
    w->data_peer_errmode = getenv("CKS_TP_DATA_PEER_ERRMODE") != NULL &&
                           strcmp(getenv("CKS_TP_DATA_PEER_ERRMODE"), "0") != 0;
    snprintf(w->name, sizeof(w->name), "%s", params->name ? params->name : "ckstore");

    status = cks_tp_status(ucp_config_read(NULL, NULL, &config), "config read");
    if (status != CKS_OK) {
        goto err_free;
    }
    memset(&cp, 0, sizeof(cp));
    /* RMA: one-copy transfers from and to a local peer's memory (rma.c);
     * shared: cks_tp_mem_alloc() may run on another thread than the worker's */
    cp.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME |
                    UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    cp.features   = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    cp.mt_workers_shared = 1;
    cp.name       = w->name;
    status = cks_tp_status(ucp_init(&cp, config, &w->context), "ucp init");
    ucp_config_release(config);
    if (status != CKS_OK) {
        goto err_free;
    }
    memset(&wp, 0, sizeof(wp));
    wp.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = cks_tp_status(ucp_worker_create(w->context, &wp, &w->worker), "worker");
    if (status != CKS_OK) {
        goto err_cleanup;
    }
    status = cks_tp_status(ucp_worker_get_efd(w->worker, &w->efd), "worker efd");
    if (status != CKS_OK) {
        goto err_worker;
    }
    status = cks_tp_status(ucp_worker_get_address(w->worker, &w->address, &w->address_len),
                           "worker address");
    if (status != CKS_OK) {
        goto err_worker;
    }
    memset(&ap, 0, sizeof(ap));
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    ap.id    = CKS_TP_AM_ID;
    ap.cb    = cks_tp_am_cb;
    ap.arg   = w;
    ap.flags = UCP_AM_FLAG_WHOLE_MSG;
    status   = cks_tp_status(ucp_worker_set_am_recv_handler(w->worker, &ap), "am handler");
    if (status != CKS_OK) {
        goto err_address;
    }
    cks_tp_rma_init(w);
    *worker_p = w;
    return CKS_OK;

err_address:
    ucp_worker_release_address(w->worker, w->address);
err_worker:
    ucp_worker_destroy(w->worker);
err_cleanup:
    ucp_cleanup(w->context);
err_free:
    cks_hmap_destroy(w->calls);
    free(w);
    return status;
}

void cks_tp_worker_quiesce(cks_tp_worker_h w)
{
    if (w == NULL || w->stopping) {
        return;
    }
    w->stopping = 1;
    cks_tp_rma_pf_stop(w); /* its jobs hold connections and mappings */
    cks_tp_copy_stop(w);   /* so do the copy threads' */
    unsigned ncalls = 0;
    for (cks_dl_t *e = w->calls_dl.head; e != NULL; e = e->next) {
        ncalls++;
    }
    if (ncalls > 0) {
        cks_info("%s: stopping: %u outstanding calls canceled", w->name, ncalls);
    }
    /* Close what is still open; the closes purge sends still queued in UCX,
     * whose completions may finish calls too: each callback runs here, once. */
    cks_tp_calls_fail_conn(w, NULL, CKS_ERR_CANCELED);
    for (cks_tp_conn_h c = w->conns, next; c != NULL; c = next) {
        cks_tp_conn_get(c); /* detaching may drop its last other reference */
        c->failed = 1;
        cks_tp_conn_detach(c, 1);
        next = c->next;
        cks_tp_conn_put(c);
    }
    uint64_t until = cks_time_ns() + 2000000000ull; /* bounded: 2 s */
    while (w->closing > 0 && cks_time_ns() < until) {
        cks_tp_progress_once(w);
    }
    if (w->closing > 0) {
        cks_warn("%s: %u endpoints did not finish closing", w->name, w->closing);
    }
    /* Sends UCX still holds (to a stopped peer whose endpoint did not let
     * go of them): their owners are told now, while what they touch still
     * exists, and the requests are left to UCX (freed at destroy). */
    unsigned abandoned = 0;
    for (cks_tp_send_req_t *s = w->inflight, *next; s != NULL; s = next) {
        cks_tp_done_cb_t cb = s->cb;
        void *arg           = s->arg;
        next                = s->in_next;
        s->cb               = NULL;
        s->arg              = NULL;
        if (cb != NULL) {
            abandoned++;
            cb(arg, CKS_ERR_CANCELED);
        }
    }
    if (abandoned > 0) {
        cks_info("%s: %u sends still in UCX given up", w->name, abandoned);
    }
}

void cks_tp_worker_destroy(cks_tp_worker_h w)
{
    if (w == NULL) {
        return;
    }
    cks_tp_worker_quiesce(w);
    w->destroying = 1; /* sends UCX completes from here on touch nothing */
    /* receives UCX still holds: their completions, if any, touch nothing
     * (their connections are freed below) */
    for (cks_dl_t *e = w->recvs.head, *nx; e != NULL; e = nx) {
        cks_tp_recv_req_t *r = CKS_CONTAINER_OF(e, cks_tp_recv_req_t, dl);
        nx      = e->next;
        r->cb   = NULL;
        r->conn = NULL;
        e->prev = e->next = NULL;
    }
    w->recvs.head = w->recvs.tail = NULL;
    while (w->conns != NULL) { /* still referenced: their keys go before the worker */
        cks_tp_conn_h c = w->conns;
        w->conns        = c->next;
        cks_tp_rkeys_release(c);
        free(c->peer_waddr);
        free(c);
    }
    while (w->free_sends != NULL) {
        cks_tp_send_req_t *s = w->free_sends;
        w->free_sends        = s->next;
        free(s);
    }
    free(w->slots);
    free(w->deferred);
    cks_hmap_destroy(w->calls);
    ucp_worker_release_address(w->worker, w->address);
    if (w->stream_dt != 0) {
        ucp_dt_destroy(w->stream_dt);
    }
    ucp_worker_destroy(w->worker);
    while (w->inflight != NULL) { /* sends ucp_worker_destroy() did not complete */
        cks_tp_send_req_t *s = w->inflight;
        cks_tp_inflight_del(w, s);
        free(s);
    }
    ucp_cleanup(w->context);
    free(w->key_shape);
    free(w);
}

int cks_tp_worker_progress(cks_tp_worker_h w)
{
    int any = 0;
    while (cks_tp_progress_once(w)) {
        any = 1;
    }
    if (w->pf != NULL && cks_tp_rma_pf_poll(w) > 0) {
        any = 1;
    }
    if (w->copy != NULL && cks_tp_copy_poll(w) > 0) {
        any = 1;
    }
    w->progressed = any;
    return any;
}

int cks_tp_worker_efd(cks_tp_worker_h w)
{
    return w->efd;
}

cks_status_t cks_tp_worker_arm(cks_tp_worker_h w)
{
    ucs_status_t st = ucp_worker_arm(w->worker);
    if (st == UCS_ERR_BUSY) {
        /* see CKS_TP_STALL_SPINS */
        w->stalls = w->progressed ? 0 : w->stalls + 1;
        if (w->stalls > CKS_TP_STALL_SPINS) {
            unsigned shift     = CKS_MIN((w->stalls - 1) / CKS_TP_STALL_SPINS - 1, 4u);
            struct timespec ts = {0, (long)(CKS_TP_STALL_NS << shift)};
            nanosleep(&ts, NULL);
        }
        return CKS_ERR_BUSY;
    }
    w->stalls = 0;
    return cks_tp_status(st, "worker arm");
}

cks_status_t cks_tp_worker_wait(cks_tp_worker_h w, int timeout_ms)
{
    struct pollfd pfd = {.fd = w->efd, .events = POLLIN};
    cks_status_t status;

    cks_tp_worker_progress(w);
    status = cks_tp_worker_arm(w);
    if (status == CKS_ERR_BUSY) {
        return CKS_OK;
    } else if (status != CKS_OK) {
        return status;
    }
    if (poll(&pfd, 1, timeout_ms) < 0 && errno != EINTR) {
        cks_error("poll: %s", strerror(errno));
        return CKS_ERR_INTERNAL;
    }
    return CKS_OK;
}

void cks_tp_worker_signal(cks_tp_worker_h w)
{
    ucp_worker_signal(w->worker);
}
