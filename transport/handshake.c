/*
 * DESIGN: the client side of the transport's handshake (HELLO, and AUTH
 * with a secret) on a new connection, for a server that connects to a peer.
 * See ucx.c for the whole design.
 *
 * Never: use a connection whose peer did not prove the secret.
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

/* ---- the client side of the handshake --------------------------------------- */

cks_tp_auth_t *cks_tp_conn_auth(cks_tp_conn_h conn)
{
    return &conn->auth;
}

typedef struct {
    cks_tp_conn_h conn;
    const cks_tp_secret_t *secret;
    int timeout_ms;
    uint8_t cn[CKS_WIRE_NONCE_LEN], sn[CKS_WIRE_NONCE_LEN];
    cks_tp_done_cb_t cb;
    void *arg;
} cks_tp_hs_t;

/* Why the handshake failed, for cks_tp_conn_handshake_error() (the first
 * reason given wins: the one closest to the cause). */
static void cks_tp_hs_why(cks_tp_conn_h conn, const char *fmt, const char *what)
{
    if (conn->hs_error[0] == '\0') {
        snprintf(conn->hs_error, sizeof(conn->hs_error), fmt, what);
    }
}

static void cks_tp_hs_finish(cks_tp_hs_t *hs, cks_status_t status, const char *msg)
{
    cks_tp_conn_h conn = hs->conn;
    if (status != CKS_OK) {
        cks_tp_hs_why(conn, "%s",
                      msg != NULL && msg[0] != '\0' ? msg
                      : status == CKS_ERR_TIMEOUT    ? "no answer from the server in time"
                                                     : cks_status_string(status));
    }
    if (status != CKS_OK && hs->secret != NULL) {
        /* the peer did not authenticate: nothing more goes on this
         * connection (a send made from a callback below fails, and the
         * owner's next request connects again); what was held fails with
         * the reason */
        conn->failed = 1;
    }
    hs->cb(hs->arg, status);
    cks_tp_held_release(conn, status);
    if (status != CKS_OK && hs->secret != NULL) {
        cks_tp_conn_close(conn);
    }
    cks_tp_conn_put(conn);
    free(hs);
}

const char *cks_tp_conn_handshake_error(cks_tp_conn_h conn)
{
    return conn->hs_error;
}

/* AUTH_REPLY (or, without a secret, HELLO_REPLY): move to the data endpoint. */
static void cks_tp_hs_upgrade_hook(cks_tp_call_req_t *c, const cks_wire_hdr_t *hdr,
                                   const cks_msg_any_t *body)
{
    cks_tp_hs_t *hs = c->hook_arg;
    const cks_wire_str_t *addr = hdr->type == CKS_MSG_AUTH_REPLY ? &body->m_AUTH_REPLY.addr
                                 : hdr->type == CKS_MSG_HELLO_REPLY ? &body->m_HELLO_REPLY.addr
                                                                    : NULL;
    if (hs->secret == NULL && hdr->type == CKS_MSG_HELLO_REPLY &&
        body->m_HELLO_REPLY.nonce.len > 0) {
        /* a challenge and no address: the server wants a secret */
        cks_error("%s: server %s requires a cluster secret", c->conn->worker->name,
                  c->conn->peer);
        cks_tp_hs_why(c->conn, "%s", "the server requires a cluster secret");
        c->status = CKS_ERR_AUTH;
        return;
    }
    if (addr != NULL && addr->len > 0 && c->conn->data_ep == NULL) {
        cks_status_t st = cks_tp_conn_upgrade(c->conn, addr->ptr, addr->len);
        if (st != CKS_OK) {
            c->status = st;
        }
    }
}

/* HELLO_REPLY with a secret: keep the server's challenge. */
static void cks_tp_hs_hello_hook(cks_tp_call_req_t *c, const cks_wire_hdr_t *hdr,
                                 const cks_msg_any_t *body)
{
    cks_tp_hs_t *hs = c->hook_arg;
    const cks_msg_hello_reply_t *r = &body->m_HELLO_REPLY;
    if (hdr->type != CKS_MSG_HELLO_REPLY || r->nonce.len != CKS_WIRE_NONCE_LEN) {
        cks_error("%s: server %s does not ask for the cluster secret", c->conn->worker->name,
                  c->conn->peer);
        cks_tp_hs_why(c->conn, "%s", "the server does not know the cluster secret");
        c->status = CKS_ERR_AUTH;
        return;
    }
    memcpy(hs->sn, r->nonce.ptr, CKS_WIRE_NONCE_LEN);
}

/* AUTH_REPLY: check the server's proof before its address is used. */
static void cks_tp_hs_auth_hook(cks_tp_call_req_t *c, const cks_wire_hdr_t *hdr,
                                const cks_msg_any_t *body)
{
    cks_tp_hs_t *hs = c->hook_arg;
    if (hdr->type != CKS_MSG_AUTH_REPLY ||
        cks_tp_proof_check(hs->secret,
                           hs->secret->peer ? CKS_TP_LABEL_PEER_SERVER : CKS_TP_LABEL_SERVER,
                           hs->cn, CKS_WIRE_NONCE_LEN, hs->sn, CKS_WIRE_NONCE_LEN,
                           &body->m_AUTH_REPLY.proof) != CKS_OK) {
        cks_error("%s: server %s did not prove the %s secret", c->conn->worker->name,
                  c->conn->peer, hs->secret->peer ? "peer" : "cluster");
        cks_tp_hs_why(c->conn, "the server did not prove the %s secret",
                      hs->secret->peer ? "peer" : "cluster");
        c->status = CKS_ERR_AUTH;
        return;
    }
    cks_tp_hs_upgrade_hook(c, hdr, body);
}

static void cks_tp_hs_auth_done(void *arg, cks_status_t status, const char *msg)
{
    cks_tp_hs_t *hs = arg;
    if (status != CKS_OK) {
        cks_error("%s: authentication with %s failed: %s %s", hs->conn->worker->name,
                  hs->conn->peer, cks_status_string(status), msg);
    } else {
        hs->conn->auth.authed = 1;
        hs->conn->auth.peer   = hs->secret->peer;
    }
    cks_tp_hs_finish(hs, status, msg);
}

static void cks_tp_hs_hello_done(void *arg, cks_status_t status, const char *msg)
{
    cks_tp_hs_t *hs = arg;
    cks_msg_auth_t auth;
    uint8_t proof[CKS_WIRE_NONCE_LEN];
    const void *addr;
    size_t addr_len;

    if (status != CKS_OK || hs->secret == NULL) {
        cks_tp_hs_finish(hs, status, msg);
        return;
    }
    cks_tp_worker_address(hs->conn->worker, &addr, &addr_len);
    status = cks_tp_proof(hs->secret,
                          hs->secret->peer ? CKS_TP_LABEL_PEER_CLIENT : CKS_TP_LABEL_CLIENT,
                          hs->sn, CKS_WIRE_NONCE_LEN, hs->cn, CKS_WIRE_NONCE_LEN, proof);
    auth.proof = (cks_wire_str_t){(const char *)proof, CKS_WIRE_NONCE_LEN};
    auth.addr  = (cks_wire_str_t){addr, (uint32_t)addr_len};
    if (status == CKS_OK) {
        status = cks_tp_call_hooked(hs->conn, CKS_MSG_AUTH, 0, &auth, NULL, 0, NULL,
                                    hs->timeout_ms, cks_tp_hs_auth_done, hs,
                                    cks_tp_hs_auth_hook, hs, NULL);
    }
    if (status != CKS_INPROGRESS) {
        cks_tp_hs_finish(hs, status == CKS_OK ? CKS_ERR_INTERNAL : status, NULL);
    }
}

cks_status_t cks_tp_conn_handshake(cks_tp_conn_h conn, const char *name,
                                   const cks_tp_secret_t *secret, int timeout_ms,
                                   cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_hs_t *hs = calloc(1, sizeof(*hs));
    cks_msg_hello_t hello;
    const void *addr;
    size_t addr_len;
    cks_status_t status;

    if (hs == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    hs->conn       = conn;
    hs->secret     = secret;
    hs->timeout_ms = timeout_ms;
    hs->cb         = cb;
    hs->arg        = arg;
    if (secret != NULL && cks_tp_nonce(hs->cn) != CKS_OK) {
        free(hs);
        return CKS_ERR_INTERNAL;
    }
    cks_tp_worker_address(conn->worker, &addr, &addr_len);
    hello.name  = cks_wire_cstr(name);
    /* with a secret, our address goes only in AUTH, after the server proved itself */
    hello.addr  = secret ? cks_wire_cstr(NULL) : (cks_wire_str_t){addr, (uint32_t)addr_len};
    hello.nonce = secret ? (cks_wire_str_t){(const char *)hs->cn, CKS_WIRE_NONCE_LEN}
                         : cks_wire_cstr(NULL);
    /* a job's own secret: the job it opens (a server proves the cluster's) */
    hello.job   = cks_wire_cstr(secret != NULL && secret->job[0] != '\0' ? secret->job : NULL);
    conn->hs_error[0] = '\0';
    cks_tp_conn_get(conn);
    conn->handshaking = secret != NULL; /* without one, the server serves at once */
    status = cks_tp_call_hooked(conn, CKS_MSG_HELLO, 0, &hello, NULL, 0, NULL, timeout_ms,
                                cks_tp_hs_hello_done, hs,
                                secret ? cks_tp_hs_hello_hook : cks_tp_hs_upgrade_hook, hs, NULL);
    if (status != CKS_INPROGRESS) {
        conn->handshaking = 0;
        cks_tp_conn_put(conn);
        free(hs);
    }
    return status;
}

void cks_tp_worker_require_auth(cks_tp_worker_h w)
{
    w->require_auth = 1;
}

int cks_tp_conn_implicit(cks_tp_conn_h conn)
{
    return conn->implicit;
}

void cks_tp_worker_set_peer_room(cks_tp_worker_h w, unsigned room)
{
    w->peer_room = room;
}

cks_status_t cks_tp_conn_authenticated(cks_tp_conn_h conn, int peer)
{
    cks_tp_worker_h w = conn->worker;
    if (peer) {
        if (conn->guest) { /* a peer takes none of the clients' slots */
            conn->guest = 0;
            w->nguests--;
        }
        conn->auth.peer = 1;
    } else if (conn->accepted && !conn->client) {
        if (w->params.max_conns != 0 && w->nclients >= w->params.max_conns) {
            return CKS_ERR_BUSY;
        }
        conn->client = 1;
        w->nclients++;
    }
    conn->auth.authed = 1;
    return CKS_OK;
}
