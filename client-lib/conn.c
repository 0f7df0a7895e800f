/*
 * DESIGN: the client's connection to each server: connect and the
 * transport's handshake (HELLO, and AUTH with a secret), the ops that wait
 * for it, its loss (every op on it fails and may move on), and telling a
 * new connection of the registered regions.
 *
 * Never: use a connection before the server proved the secret.
 */
#include "client_int.h"
#include "stage.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cks_cl_srv_wait(cks_cl_srv_t *sv, cks_op_t *op)
{
    op->queued = 1;
    CKS_LIST_PUSH(sv->wait_head, sv->wait_tail, op);
}

/* The server's connection came up (status OK) or could not: run or fail
 * what waited for it. */
static void cks_cl_srv_settle(cks_client_h c, size_t pos, cks_status_t status)
{
    cks_cl_srv_t *sv = &c->srv[pos];
    cks_op_t *op     = sv->wait_head;
    sv->wait_head = sv->wait_tail = NULL;
    while (op != NULL) {
        cks_op_t *next = op->next;
        op->queued     = 0;
        op->next = op->prev = NULL;
        if (status == CKS_OK) {
            cks_cl_dispatch(c, op);
        } else {
            cks_cl_op_fail(c, op, status);
        }
        op = next;
    }
}

/* Drop a server's connection after a failure; its ops fail (and may move on). */
void cks_cl_srv_down(cks_client_h c, size_t pos, cks_status_t status)
{
    cks_cl_srv_t *sv = &c->srv[pos];
    if (sv->conn == NULL) {
        return;
    }
    /* warn when a working server goes; retries of a dead one are routine */
    cks_log(status == CKS_ERR_CANCELED     ? CKS_LOG_DEBUG
            : sv->state == CKS_SRV_UP      ? CKS_LOG_WARN
                                           : CKS_LOG_INFO,
            "server %s:%u: %s", sv->addr, sv->port, cks_status_string(status));
    cks_tp_conn_h conn = sv->conn;
    sv->conn           = NULL;
    sv->state          = CKS_SRV_IDLE;
    sv->last_error     = status;
    sv->failed_ns      = cks_time_ns();
    /* fail its ops with this status first: closing makes UCX complete their
     * transfers at once, as "canceled", which would be the status they keep */
    for (cks_dl_t *e = c->fl.head; e != NULL;) {
        cks_dl_t *next = e->next;
        cks_op_t *op   = cks_cl_fl_op(e);
        if (op->srv == pos && !op->replied) {
            cks_cl_op_fail(c, op, status);
        }
        e = next;
    }
    cks_tp_conn_close(conn); /* UCX fails what is still in flight on it */
    cks_cl_srv_settle(c, pos, status);
    cks_tp_conn_put(conn);
}

static void cks_cl_noop_done(void *arg, cks_status_t status)
{
}

/* A MEM_MAP op for region m on server pos (NULL: no memory). */
cks_op_t *cks_cl_mem_map_op(const cks_cl_mem_t *m, size_t pos)
{
    cks_op_t *op = cks_op_new(CKS_OP_MEM_MAP, CKS_MSG_MEM_MAP);
    if (op != NULL) {
        op->body.m_MEM_MAP.length = m->len;
        op->buf                   = m->base;
        op->buf_size              = m->len;
        op->srv                   = pos;
        op->target                = CKS_TARGET_FIXED;
    }
    return op;
}

/* A server came up: tell it of every region we have, so that a server on
 * this host maps and faults them in now (a restarted one too), not during
 * the first transfers. Nobody waits for these; a failure only means the
 * first transfers fault the pages in. Progress thread. */
void cks_cl_mem_announce(cks_client_h c, size_t pos)
{
    cks_op_t *ops = NULL;

    if (!cks_tp_conn_local(c->srv[pos].conn) || c->srv[pos].no_rma) {
        return;
    }
    pthread_mutex_lock(&c->lock); /* the list; ops are sent outside (describe locks) */
    for (cks_cl_mem_t *m = c->mems; m != NULL; m = m->next) {
        cks_op_t *op = cks_cl_mem_map_op(m, pos);
        if (op != NULL) {
            op->next = ops;
            ops      = op;
        }
    }
    pthread_mutex_unlock(&c->lock);
    while (ops != NULL) {
        cks_op_t *next = ops->next;
        ops->next      = NULL;
        cks_cl_start(c, ops, cks_cl_noop_done, NULL);
        ops = next;
    }
    if (cks_cl_scratch_mem(c) != NULL) {
        cks_op_t *op = cks_cl_mem_map_op(cks_cl_scratch_mem(c), pos);
        if (op != NULL) {
            cks_cl_start(c, op, cks_cl_noop_done, NULL);
        }
    }
}

void cks_cl_mem_announce_all(cks_client_h c, const cks_cl_mem_t *m)
{
    for (size_t pos = 0; pos < c->nsrv; pos++) {
        cks_op_t *op;
        if (c->srv[pos].state != CKS_SRV_UP || !cks_tp_conn_local(c->srv[pos].conn) ||
            c->srv[pos].no_rma || (op = cks_cl_mem_map_op(m, pos)) == NULL) {
            continue;
        }
        cks_cl_start(c, op, cks_cl_noop_done, NULL);
    }
}

/* The transport's handshake with a server ended (progress thread). arg is
 * the connection it ran on: the outcome of one the client dropped since
 * (cks_cl_srv_down()) is old news. */
static void cks_cl_handshake_done(void *arg, cks_status_t status)
{
    cks_tp_conn_h conn = arg;
    cks_cl_srv_t *sv   = cks_tp_conn_user(conn);
    if (sv == NULL || sv->conn != conn) {
        return;
    }
    cks_client_h c = sv->client;
    size_t pos     = (size_t)(sv - c->srv);
    if (status == CKS_OK) {
        sv->silent_ns = 0; /* it answers */
        sv->state     = CKS_SRV_UP;
        cks_cl_srv_settle(c, pos, CKS_OK);
        if (sv->state == CKS_SRV_UP) {
            cks_cl_mem_announce(c, pos);
        }
        return;
    }
    const char *why = cks_tp_conn_handshake_error(conn);
    cks_log(status == CKS_ERR_TIMEOUT || status == CKS_ERR_CONN_LOST ? CKS_LOG_DEBUG
                                                                      : CKS_LOG_INFO,
            "handshake with %s:%u: %s (%s)", sv->addr, sv->port, cks_status_string(status), why);
    if (status != CKS_ERR_CONN_LOST) {
        cks_cl_set_errorf(c, status, "%s", why);
    }
    if (status == CKS_ERR_TIMEOUT) {
        /* silent: requests that can go elsewhere skip it a while */
        sv->silent_ns = cks_time_ns();
    }
    cks_cl_srv_down(c, pos, status == CKS_ERR_CONN_LOST ? CKS_ERR_UNREACHABLE : status);
}

/* Connect to a server and run the transport's handshake (HELLO, and AUTH
 * with a secret; cks_tp_conn_handshake()), which ends on a worker-address
 * endpoint; ops wait on the server until it is over. */
void cks_cl_srv_connect(cks_client_h c, size_t pos)
{
    cks_cl_srv_t *sv = &c->srv[pos];
    cks_status_t status;

    status = cks_tp_conn_connect(c->tp, sv->addr, sv->port, &sv->conn);
    if (status != CKS_OK) {
        sv->conn       = NULL;
        sv->last_error = status;
        sv->failed_ns  = cks_time_ns();
        cks_cl_srv_settle(c, pos, CKS_ERR_UNREACHABLE);
        return;
    }
    cks_tp_conn_set_user(sv->conn, sv);
    sv->state = CKS_SRV_CONNECTING;
    status    = cks_tp_conn_handshake(sv->conn, c->name, c->has_secret ? &c->secret : NULL,
                                      c->timeout_ms, cks_cl_handshake_done, sv->conn);
    if (status != CKS_INPROGRESS) {
        cks_cl_srv_down(c, pos, status == CKS_OK ? CKS_ERR_INTERNAL : status);
    }
}
