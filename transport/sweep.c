/*
 * DESIGN: the worker's periodic checks, made from its owner's loop outside
 * any UCX callback (cks_tp_worker_sweep()): connections that stopped
 * reading their replies, that never authenticated or are due to close,
 * sends UCX still holds long after their connection closed, payloads that
 * stopped coming. See ucx.c for the whole design.
 *
 * Never: run inside a UCX callback.
 */
#include "tp_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cks_tp_conn_close_later(cks_tp_conn_h conn, int ms)
{
    if (conn->close_at_ns == 0) {
        conn->close_at_ns = cks_time_ns() + (uint64_t)ms * 1000000ull;
    }
}

int cks_tp_worker_sweep(cks_tp_worker_h w)
{
    uint64_t now   = cks_time_ns();
    uint64_t stall = (uint64_t)w->params.stall_ms * 1000000ull;
    uint64_t auth_to = (uint64_t)(w->params.auth_timeout_ms ? w->params.auth_timeout_ms
                                                            : 10000u) * 1000000ull;
    uint64_t next  = UINT64_MAX;
    cks_tp_conn_h conn = w->conns;

    while (conn != NULL) {
        cks_tp_conn_h after = conn->next;
        int stalled = !conn->failed && conn->sends > 0 && stall > 0 &&
                      now - conn->progress_ns >= stall;
        int due     = !conn->failed && conn->close_at_ns != 0 && now >= conn->close_at_ns;
        /* a connection that never authenticates holds its slot no longer
         * than the deadline */
        int unauthed = w->require_auth && conn->accepted && !conn->auth.authed &&
                       !conn->failed && conn->close_at_ns == 0;
        int late     = unauthed && now - conn->accepted_ns >= auth_to;
        if (conn->refused) {
            if (now >= conn->close_at_ns) {
                /* gracefully: once the handshake is done, a forced close of
                 * the listener's endpoint goes unnoticed by the peer */
                cks_tp_conn_fail(conn, 0, CKS_ERR_CONN_LOST);
                after = conn->next;
                cks_tp_conn_put(conn); /* the worker's only reference */
            } else {
                next = CKS_MIN(next, conn->close_at_ns);
            }
        } else if (late) {
            cks_warn("%s: %s did not authenticate in %llu ms: closing it", w->name, conn->peer,
                     (unsigned long long)(auth_to / 1000000));
            cks_tp_conn_get(conn);
            cks_tp_conn_fail(conn, 0, CKS_ERR_TIMEOUT); /* gracefully: the peer is told */
            after = conn->next;
            cks_tp_conn_put(conn);
        } else if (due || (!conn->failed && (conn->overrun || stalled))) {
            if (stalled && !conn->overrun && !due) {
                cks_warn("%s: %s took none of its %u replies in %u ms: closing it", w->name,
                         conn->peer, conn->sends, w->params.stall_ms);
            }
            /* a refused peer is closed gracefully, so that it is told (a
             * forced close of the listener's endpoint went unnoticed by it) */
            cks_tp_conn_get(conn);
            cks_tp_conn_fail(conn, !due, due ? CKS_ERR_AUTH : CKS_ERR_TIMEOUT);
            after = conn->next; /* the callback may have dropped others */
            cks_tp_conn_put(conn);
        } else {
            if (!conn->failed && conn->sends > 0 && stall > 0) {
                next = CKS_MIN(next, conn->progress_ns + stall);
            }
            if (!conn->failed && conn->close_at_ns != 0) {
                next = CKS_MIN(next, conn->close_at_ns);
            }
            if (unauthed) {
                next = CKS_MIN(next, conn->accepted_ns + auth_to);
            }
        }
        conn = after;
    }
    /* Sends UCX still holds a while after their connection was closed (5 s,
     * or the timeout of the call that closed it where shorter; UCX 1.13
     * kept rendezvous sends to a peer killed on this host): their owners
     * are told now, so that what waits on them goes on - a chunk read's
     * space, held until its reply is sent, is returned - and the requests
     * are left to UCX (freed when it lets go, or with the worker). Nothing
     * more goes out on a closed endpoint. */
    unsigned abandoned = 0;
    /* a look every 100 ms: a walk of every send on each pass would slow a
     * server that has thousands of replies in flight */
    cks_tp_send_req_t *first = now >= w->abandon_check_ns ? w->inflight : NULL;
    if (first != NULL) {
        w->abandon_check_ns = now + 100000000ull;
    }
    for (cks_tp_send_req_t *s = first, *nx; s != NULL; s = nx) {
        nx = s->in_next;
        if (s->cb == NULL || !s->conn->closed) {
            continue;
        }
        uint64_t due = s->conn->closed_ns +
                       (s->conn->grace_ns != 0 ? s->conn->grace_ns : CKS_TP_ABANDON_NS);
        if (now < due) {
            next = CKS_MIN(next, due);
            continue;
        }
        cks_tp_done_cb_t cb = s->cb;
        void *arg           = s->arg;
        s->cb               = NULL;
        s->arg              = NULL;
        abandoned++;
        cb(arg, CKS_ERR_CONN_LOST);
    }
    if (abandoned > 0) {
        cks_warn("%s: %u sends UCX still held after their connection closed: given up",
                 w->name, abandoned);
    }
    int recv_ms = cks_tp_recvs_expire(w);
    if (recv_ms >= 0) {
        next = CKS_MIN(next, now + (uint64_t)recv_ms * 1000000ull);
    }
    if (next == UINT64_MAX) {
        return -1;
    }
    return next <= now ? 0 : (int)((next - now) / 1000000 + 1);
}
