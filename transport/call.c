/*
 * DESIGN: calls - a request whose reply (or failure, or timeout) comes back
 * to one callback - and their deadlines; calls fail with their connection.
 * See ucx.c for the whole design.
 *
 * Never: run a call's callback twice, or after its connection's owner let go.
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

/* ---- calls ------------------------------------------------------------------ */

static cks_tp_call_req_t *cks_tp_call_of(cks_dl_t *e)
{
    return CKS_CONTAINER_OF(e, cks_tp_call_req_t, dl);
}

static void cks_tp_call_try_complete(cks_tp_worker_h w, cks_tp_call_req_t *c)
{
    if (c->sending || !c->replied) {
        return;
    }
    cks_hmap_del(w->calls, &c->req_id, sizeof(c->req_id));
    cks_dl_del(&w->calls_dl, &c->dl);
    cks_tp_conn_h conn = c->conn;
    c->cb(c->arg, c->status, c->msg);
    cks_tp_conn_put(conn);
    free(c);
}

static void cks_tp_call_fail(cks_tp_worker_h w, cks_tp_call_req_t *c, cks_status_t status,
                             const char *msg)
{
    if (c->replied) {
        return;
    }
    c->replied = 1;
    c->status  = status;
    snprintf(c->msg, sizeof(c->msg), "%s", msg);
    if (c->sending && c->abandon_ns == 0) {
        /* no reply is awaited now: what is left is UCX's hold of the send */
        c->abandon_ns = cks_time_ns() + c->grace_ns;
        cks_dl_move(&w->calls_dl, &c->dl, c->abandon_ns);
    }
    cks_tp_call_try_complete(w, c);
}

static void cks_tp_call_sent(void *arg, cks_status_t status)
{
    cks_tp_call_req_t *c = arg;
    cks_tp_worker_h w    = c->conn->worker;
    if (cks_fault_fire("call_send_held")) {
        /* test builds: the send's completion never comes, as when UCX
         * holds a send its peer has answered */
        return;
    }
    c->sending = 0;
    if (status != CKS_OK && !c->replied) {
        cks_tp_call_fail(w, c, status, "send failed"); /* completes the call */
    } else {
        cks_tp_call_try_complete(w, c);
    }
}

/* A reply: returns 1 when it answered one of our calls. It answers one only
 * when it came on the connection the call went out on, and - where
 * authentication is required - only once that connection has authenticated,
 * or as the answer to a step of its handshake (the calls with a hook): a
 * reply anyone else sends with the call's id is no answer to it, and is
 * treated as one to no call (#15 item 8). */
/* Two connections between the same two processes (a server's to a peer and
 * the peer's to it) each have a data endpoint to the other's worker address,
 * and UCX may pair them crosswise: an answer the peer sends on the data
 * endpoint of the connection it got the call on then arrives on our data
 * endpoint of the other one. A data endpoint carries only what the process
 * at its address sends (UCX pairs endpoints by worker), so a reply that came
 * through one whose address is that of the call's data endpoint came from
 * the process the call went to. */
static int cks_tp_same_waddr(cks_tp_conn_h a, cks_tp_conn_h b)
{
    return a->peer_waddr != NULL && b->peer_waddr != NULL &&
           a->peer_waddr_len == b->peer_waddr_len &&
           memcmp(a->peer_waddr, b->peer_waddr, a->peer_waddr_len) == 0;
}

static int cks_tp_same_peer(cks_tp_conn_h a, cks_tp_conn_h b)
{
    return a->data_ep != NULL && b->data_ep != NULL && cks_tp_same_waddr(a, b);
}

int cks_tp_call_reply(cks_tp_worker_h w, cks_tp_conn_h conn, int via_data,
                             const cks_wire_hdr_t *hdr, const cks_msg_any_t *body,
                             cks_tp_data_t *data)
{
    cks_tp_call_req_t *c;
    if (!CKS_MSG_IS_REPLY(hdr->type) ||
        (c = cks_hmap_get(w->calls, &hdr->req_id, sizeof(hdr->req_id))) == NULL) {
        return 0;
    }
    /* Without authentication, an endpoint UCX made by itself may carry the
     * answer: a peer that answered on its data endpoint before we had made
     * ours to it (requests sent right after HELLO, not held behind a
     * handshake), so that UCX could not pair the two. Nothing proves who
     * anyone is there anyway. */
    int unpaired = conn->implicit && !w->require_auth;
    int crossed  = via_data && cks_tp_same_peer(conn, c->conn);
    /* Two servers of one host that call each other while both connections
     * are being set up: calls sent right after HELLO, before its answer
     * made the call's data endpoint, are answered through the peer's data
     * endpoint, which UCX pairs with ours of the peer's connection to us
     * (the only one there is yet). Taken when that connection names the
     * call's worker, or the call's does not know its worker yet; where
     * authentication is required, only from a connection that proved the
     * servers' own secret: no client can answer a server's call. */
    int twin = !crossed && conn->peer_waddr != NULL &&
               (c->conn->peer_waddr == NULL || cks_tp_same_waddr(conn, c->conn)) &&
               (!w->require_auth || (conn->auth.authed && conn->auth.peer));
    crossed  = crossed || twin;
    if ((c->conn != conn && !unpaired && !crossed) ||
        (w->require_auth && !conn->auth.authed && c->hook == NULL)) {
        if (!conn->forged_logged) { /* once per connection: it may send many */
            cks_warn("%s: %s answered a call made on another connection: ignored", w->name,
                     conn->peer);
            conn->forged_logged = 1;
        }
        return 0;
    }
    if (!c->replied) {
        /* every reply body starts with status and msg */
        const cks_msg_status_t *r = &body->m_STATUS_REPLY;
        c->replied                = 1;
        c->status                 = r->status > 0 ? CKS_ERR_BAD_MESSAGE : r->status;
        snprintf(c->msg, sizeof(c->msg), "%.*s", (int)r->msg.len, r->msg.ptr);
        if (c->hook != NULL && c->status == CKS_OK) {
            c->hook(c, hdr, body);
        }
        if (c->on_reply != NULL && c->status == CKS_OK) {
            c->on_reply(c->arg, hdr, body, data);
        }
        if (c->sending && c->abandon_ns == 0) {
            /* answered while UCX still holds the send (the peer needs the
             * payload no more): its completion is waited for at most the
             * grace, then given up (cks_tp_worker_expire()); before, such a
             * call waited for it without a deadline, and its owner never
             * heard of it */
            c->abandon_ns = cks_time_ns() + c->grace_ns;
            cks_dl_move(&w->calls_dl, &c->dl, c->abandon_ns);
        }
        cks_tp_call_try_complete(w, c);
    }
    return 1;
}

void cks_tp_calls_fail_conn(cks_tp_worker_h w, cks_tp_conn_h conn, cks_status_t status)
{
    /* a callback may end or free any call: look again from the head after
     * each one failed (each is failed once, so this ends) */
    for (int again = 1; again;) {
        again = 0;
        for (cks_dl_t *e = w->calls_dl.head; e != NULL; e = e->next) {
            cks_tp_call_req_t *c = cks_tp_call_of(e);
            if (!c->replied && (conn == NULL || c->conn == conn)) {
                cks_tp_call_fail(w, c, status, "connection failed");
                again = 1;
                break;
            }
        }
    }
}


cks_status_t cks_tp_call(cks_tp_conn_h conn, unsigned type, uint32_t flags, const void *body,
                         const void *payload, size_t payload_len, cks_tp_mem_h payload_memh,
                         int timeout_ms, cks_tp_call_cb_t cb, void *arg)
{
    return cks_tp_call_hooked(conn, type, flags, body, payload, payload_len, payload_memh,
                              timeout_ms, cb, arg, NULL, NULL, NULL);
}

cks_status_t cks_tp_call_data(cks_tp_conn_h conn, unsigned type, uint32_t flags,
                              const void *body, int timeout_ms, cks_tp_reply_cb_t on_reply,
                              cks_tp_call_cb_t cb, void *arg)
{
    if (on_reply == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    return cks_tp_call_hooked(conn, type, flags, body, NULL, 0, NULL, timeout_ms, cb, arg,
                              NULL, NULL, on_reply);
}

cks_status_t cks_tp_call_data_into(cks_tp_conn_h conn, unsigned type, uint32_t flags,
                                   const void *body, const void *desc, size_t desc_len,
                                   int timeout_ms, cks_tp_reply_cb_t on_reply,
                                   cks_tp_call_cb_t cb, void *arg)
{
    if (on_reply == NULL || (desc_len > 0 && desc == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (desc_len == 0) {
        return cks_tp_call_data(conn, type, flags, body, timeout_ms, on_reply, cb, arg);
    }
    return cks_tp_call_hooked(conn, type, flags | CKS_WIRE_F_RMA, body, desc, desc_len, NULL,
                              timeout_ms, cb, arg, NULL, NULL, on_reply);
}

cks_status_t cks_tp_call_hooked(cks_tp_conn_h conn, unsigned type, uint32_t flags,
                                       const void *body, const void *payload,
                                       size_t payload_len, cks_tp_mem_h payload_memh,
                                       int timeout_ms, cks_tp_call_cb_t cb, void *arg,
                                       cks_tp_call_hook_t hook, void *hook_arg,
                                       cks_tp_reply_cb_t on_reply)
{
    cks_tp_worker_h w = conn->worker;
    cks_tp_call_req_t *c;
    cks_status_t status;

    if (cb == NULL || timeout_ms <= 0) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (w->stopping) {
        return CKS_ERR_CANCELED;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    /* random ids (apart from the owner's, with the top bit set): a peer
     * cannot guess those of the calls made on other connections */
    do {
        c->req_id = cks_tp_random_id() | (1ull << 63);
    } while (cks_hmap_get(w->calls, &c->req_id, sizeof(c->req_id)) != NULL);
    c->conn        = conn;
    c->type        = type;
    c->cb          = cb;
    c->arg         = arg;
    c->hook        = hook;
    c->hook_arg    = hook_arg;
    c->on_reply    = on_reply;
    c->sending     = 1;
    c->grace_ns    = CKS_MIN((uint64_t)timeout_ms * 1000000ull, CKS_TP_ABANDON_NS);
    if (cks_hmap_put(w->calls, &c->req_id, sizeof(c->req_id), c) != CKS_OK) {
        free(c);
        return CKS_ERR_NO_MEMORY;
    }
    cks_dl_add(&w->calls_dl, &c->dl, cks_time_ns() + (uint64_t)timeout_ms * 1000000ull);
    cks_tp_conn_get(conn);
    status = cks_tp_send(conn, type, flags, c->req_id, body, payload, payload_len,
                         CKS_MEM_HOST, payload_memh, cks_tp_call_sent, c);
    if (status != CKS_INPROGRESS) {
        /* unlink without a callback: the caller gets the error. Not
         * necessarily the last call any more: the send may have run other
         * completions, whose callbacks made calls */
        c->cb      = NULL;
        c->sending = 0;
        c->replied = 1;
        cks_hmap_del(w->calls, &c->req_id, sizeof(c->req_id));
        cks_dl_del(&w->calls_dl, &c->dl);
        cks_tp_conn_put(conn);
        free(c);
        return status;
    }
    return CKS_INPROGRESS;
}

/* A call that failed while UCX held its send, and UCX still holds it long
 * after the connection was closed (UCX 1.13 kept rendezvous sends to a peer
 * killed or restarted on this host): the call completes now, so that its
 * owner is not stuck (a put's chunks, a round of catch-up). The send is
 * left to UCX with no callback; the worker frees it when UCX lets go, or at
 * its destruction. The owner may reuse the payload's memory: should UCX
 * still read it for a peer, that peer checks the chunk's CRC and refuses
 * it. */

static void cks_tp_call_abandon(cks_tp_worker_h w, cks_tp_call_req_t *c)
{
    cks_tp_send_abandon(w, cks_tp_call_sent, c);
    cks_warn("%s: UCX still held a send to %s %llu ms after its call ended: given up",
             w->name, c->conn->peer, (unsigned long long)(c->grace_ns / 1000000ull));
    c->sending = 0;
    cks_tp_call_try_complete(w, c);
}

int cks_tp_worker_expire(cks_tp_worker_h w)
{
    uint64_t now = cks_time_ns();
    /* Failing a call runs its callback, which may end or free any call (and
     * its connection): the head is looked at again after each. Each call
     * taken leaves the head: it ends, waits for UCX's hold of its send
     * (until abandon_ns), or is parked. */
    for (cks_dl_t *e; (e = cks_dl_due(&w->calls_dl, now)) != NULL;) {
        cks_tp_call_req_t *c = cks_tp_call_of(e);
        if (c->replied) {
            cks_dl_move(&w->calls_dl, e, CKS_DL_NEVER);
            if (c->sending && c->abandon_ns != 0 && c->abandon_ns <= now) {
                cks_tp_call_abandon(w, c); /* c is gone */
            }
            continue;
        }
        cks_tp_conn_h conn = c->conn;
        int in_flight      = c->sending;
        uint64_t grace     = c->grace_ns;
        cks_tp_conn_get(conn); /* the call's reference goes when it ends */
        cks_warn("%s: %s did not answer %s in time", w->name, conn->peer,
                 cks_msg_name(c->type));
        conn->unanswered = conn->outgoing;
        cks_dl_move(&w->calls_dl, e, CKS_DL_NEVER);
        cks_tp_call_fail(w, c, CKS_ERR_TIMEOUT, "no answer in time"); /* c may be gone */
        if (in_flight && !conn->closed) {
            /* UCX still reads the payload: only closing releases it. The
             * other calls on the connection fail as this one did, first:
             * the peer does not answer (the close would say "connection
             * lost", which reads as a peer that went away and may be back
             * at once - a primary would send its chunks there again) */
            cks_tp_calls_fail_conn(w, conn, CKS_ERR_TIMEOUT);
            conn->grace_ns = grace;
            cks_tp_conn_close(conn);
        }
        cks_tp_conn_put(conn);
    }
    return cks_dl_wait_ms(&w->calls_dl, now, -1);
}
