/*
 * DESIGN: the client's connection to each server: connect, HELLO and (with
 * a secret) AUTH, the ops that wait for it, its loss (every op on it fails
 * and may move on), and telling a new connection of the registered regions.
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
    op->next   = NULL;
    op->prev   = sv->wait_tail;
    if (sv->wait_tail != NULL) {
        sv->wait_tail->next = op;
    } else {
        sv->wait_head = op;
    }
    sv->wait_tail = op;
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
    for (cks_op_t *op = c->fl_head; op != NULL;) {
        cks_op_t *next = op->next;
        if (op->srv == pos && !op->replied) {
            cks_cl_op_fail(c, op, status);
        }
        op = next;
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

static void cks_cl_hello_done(void *arg, cks_status_t status)
{
    cks_cl_srv_t *sv = arg;
    cks_client_h c   = sv->client;
    size_t pos       = (size_t)(sv - c->srv);
    if (status == CKS_OK && sv->conn != NULL) {
        sv->state = CKS_SRV_UP;
        cks_cl_srv_settle(c, pos, CKS_OK);
        if (sv->state == CKS_SRV_UP) {
            cks_cl_mem_announce(c, pos);
        }
    } else if (sv->conn != NULL) {
        cks_cl_srv_down(c, pos, status == CKS_ERR_CONN_LOST ? CKS_ERR_UNREACHABLE : status);
    }
}

/* Connect to a server and say HELLO, which moves the connection to a
 * worker-address endpoint; ops wait on the server until it answers. With a
 * secret, HELLO carries our challenge and its reply the server's; AUTH
 * (cks_cl_auth()) then carries our proof and address, and its reply the
 * server's proof and address (cks_cl_auth_reply()). */
void cks_cl_srv_connect(cks_client_h c, size_t pos)
{
    cks_cl_srv_t *sv = &c->srv[pos];
    const void *addr;
    size_t addr_len;
    cks_op_t *op;
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
    op        = cks_op_new(CKS_OP_HELLO, CKS_MSG_HELLO);
    if (op == NULL || (c->has_secret && cks_tp_nonce(sv->nonce) != CKS_OK)) {
        free(op);
        cks_cl_srv_down(c, pos, CKS_ERR_NO_MEMORY);
        return;
    }
    cks_tp_worker_address(c->tp, &addr, &addr_len);
    op->body.m_HELLO.name = cks_wire_cstr(c->name);
    if (c->has_secret) { /* our address only after the server proved the secret */
        op->body.m_HELLO.addr  = cks_wire_cstr(NULL);
        op->body.m_HELLO.nonce = (cks_wire_str_t){(const char *)sv->nonce, CKS_WIRE_NONCE_LEN};
        op->body.m_HELLO.job   = cks_wire_cstr(c->secret_job);
    } else {
        op->body.m_HELLO.addr  = (cks_wire_str_t){addr, (uint32_t)addr_len};
        op->body.m_HELLO.nonce = cks_wire_cstr(NULL);
        op->body.m_HELLO.job   = cks_wire_cstr(NULL);
    }
    op->client = c;
    op->srv    = pos;
    op->cb     = cks_cl_hello_done;
    op->arg    = sv;
    cks_cl_send_op(c, op);
}

/* The server sent its challenge (HELLO_REPLY): answer it with AUTH, which
 * carries our proof and address; the handshake's outcome moves to the AUTH
 * op, whose reply must carry the server's proof (cks_cl_auth_reply()). */
cks_status_t cks_cl_auth(cks_client_h c, cks_op_t *hello,
                                const cks_msg_hello_reply_t *r)
{
    cks_cl_srv_t *sv = &c->srv[hello->srv];
    const void *addr;
    size_t addr_len;
    cks_op_t *op;

    if (r->nonce.len != CKS_WIRE_NONCE_LEN) {
        cks_error("server %s:%u does not ask for the cluster secret", sv->addr, sv->port);
        cks_cl_set_errorf(c, CKS_ERR_AUTH, "the server does not know the cluster secret");
        return CKS_ERR_AUTH;
    }
    memcpy(sv->snonce, r->nonce.ptr, CKS_WIRE_NONCE_LEN);
    op = cks_op_new(CKS_OP_AUTH, CKS_MSG_AUTH);
    if (op == NULL || cks_tp_proof(&c->secret, CKS_TP_LABEL_CLIENT, sv->snonce,
                                   CKS_WIRE_NONCE_LEN, sv->nonce, CKS_WIRE_NONCE_LEN,
                                   sv->proof) != CKS_OK) {
        free(op);
        return CKS_ERR_NO_MEMORY;
    }
    cks_tp_worker_address(c->tp, &addr, &addr_len);
    op->body.m_AUTH.proof = (cks_wire_str_t){(const char *)sv->proof, CKS_WIRE_NONCE_LEN};
    op->body.m_AUTH.addr  = (cks_wire_str_t){addr, (uint32_t)addr_len};
    op->client            = c;
    op->srv               = hello->srv;
    op->cb                = hello->cb;
    op->arg               = hello->arg;
    hello->cb             = cks_cl_noop_done;
    cks_cl_send_op(c, op);
    return CKS_OK;
}

/* AUTH_REPLY: the server proves the secret; only then its address is used. */
cks_status_t cks_cl_auth_reply(cks_client_h c, cks_op_t *op, cks_tp_conn_h conn,
                                      const cks_msg_auth_reply_t *r)
{
    cks_cl_srv_t *sv = &c->srv[op->srv];
    if (cks_tp_proof_check(&c->secret, CKS_TP_LABEL_SERVER, sv->nonce, CKS_WIRE_NONCE_LEN,
                           sv->snonce, CKS_WIRE_NONCE_LEN, &r->proof) != CKS_OK) {
        cks_error("server %s:%u did not prove the cluster secret", sv->addr, sv->port);
        cks_cl_set_errorf(c, CKS_ERR_AUTH, "the server did not prove the cluster secret");
        return CKS_ERR_AUTH;
    }
    return r->addr.len > 0 ? cks_tp_conn_upgrade(conn, r->addr.ptr, r->addr.len) : CKS_OK;
}
