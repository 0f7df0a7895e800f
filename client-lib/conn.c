/*
 * DESIGN: the client's connection to each server, below the op engine:
 * connect and the transport's handshake (HELLO, and AUTH with a secret),
 * whose end - up, or failed - goes to the callback of whoever asked for it
 * (the op engine's dispatch, which runs or fails the ops that wait), a
 * failed connection taken from its server, and the MEM_MAP ops that tell a
 * server that came up of our registered regions.
 *
 * Never: use a connection before the server proved the secret; start,
 * fail or queue an op here (the op engine does).
 */
#include "client_int.h"

/* Take a failed server's connection from it: logged, and the server IDLE
 * with the failure and its time. The caller fails the ops on it, then
 * closes and puts it. NULL when it has none. */
cks_tp_conn_h cks_cl_srv_drop(cks_client_h c, size_t pos, cks_status_t status)
{
    cks_cl_srv_t *sv = &c->srv[pos];
    if (sv->conn == NULL) {
        return NULL;
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
    sv->rejoining      = 0;
    pthread_mutex_lock(&c->lock);
    int regions = c->mems != NULL;
    pthread_mutex_unlock(&c->lock);
    if (sv->local && regions && status != CKS_ERR_CANCELED && !c->stop && sv->rejoin_ns == 0) {
        /* asked again on our own (cks_cl_rejoin_run()) */
        sv->rejoin_wait_ns = sv->rejoin_wait_ns != 0 ? sv->rejoin_wait_ns
                                                      : CKS_CL_REJOIN_FIRST_NS;
        sv->rejoin_ns      = sv->failed_ns + sv->rejoin_wait_ns;
    }
    return conn;
}

/* Connect again, on our own, to the servers whose time for it came
 * (cks_cl_srv_drop() plans it; the pause doubles after each attempt): one
 * that answers is told of our regions (cks_cl_srv_ended()), quietly - a
 * failed attempt is logged at debug level and is no request's error. The
 * ms until the next planned one (-1: none). Progress thread. */
int cks_cl_rejoin_run(cks_client_h c)
{
    uint64_t now = cks_time_ns(), next = UINT64_MAX;
    for (size_t pos = 0; pos < c->nsrv; pos++) {
        cks_cl_srv_t *sv = &c->srv[pos];
        if (sv->rejoin_ns == 0 || sv->state != CKS_SRV_IDLE) {
            sv->rejoin_ns = 0; /* a request connects (its failure plans it again) */
            continue;
        }
        if (sv->rejoin_ns > now) {
            next = CKS_MIN(next, sv->rejoin_ns);
            continue;
        }
        sv->rejoin_ns      = 0;
        sv->rejoin_wait_ns = CKS_MIN(2 * sv->rejoin_wait_ns, CKS_CL_REJOIN_MAX_NS);
        sv->rejoining      = 1;
        cks_log(CKS_LOG_DEBUG, "server %s:%u: connecting again on our own", sv->addr,
                sv->port);
        cks_cl_srv_connect(c, pos, sv->ended); /* the op engine's, as it came up */
        if (sv->state == CKS_SRV_IDLE && sv->rejoin_ns == 0) { /* failed at once */
            sv->rejoining = 0;
            sv->rejoin_ns = now + sv->rejoin_wait_ns;
        }
        if (sv->rejoin_ns != 0) {
            next = CKS_MIN(next, sv->rejoin_ns);
        }
    }
    return next == UINT64_MAX ? -1 : (int)CKS_MIN((next - now) / 1000000 + 1, 1000);
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

/* The MEM_MAP ops for a server that came up, linked by next: one for every
 * region we have (cks_mem_alloc()'s, then the scratch), none unless it is on
 * this host and takes our memory. Each counts in its maps_pending until its
 * answer (started with cks_cl_map_done()). Progress thread. */
cks_op_t *cks_cl_mem_map_ops(cks_client_h c, size_t pos)
{
    cks_op_t *ops = NULL, **end = &ops;

    if (!cks_tp_conn_local(c->srv[pos].conn) || c->srv[pos].no_rma) {
        return NULL;
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
    while (*end != NULL) {
        end = &(*end)->next;
    }
    if (cks_cl_scratch_mem(c) != NULL) {
        *end = cks_cl_mem_map_op(cks_cl_scratch_mem(c), pos);
    }
    for (const cks_op_t *o = ops; o != NULL; o = o->next) {
        c->srv[pos].maps_pending++;
    }
    return ops;
}

/* What a handshake's end means for the server it ran with: it is up, or
 * the ops that waited for it fail. */
static void cks_cl_handshake_ended(cks_client_h c, cks_cl_srv_t *sv, cks_tp_conn_h conn,
                                   cks_status_t status)
{
    size_t pos    = (size_t)(sv - c->srv);
    int rejoining = sv->rejoining; /* our own attempt: no request's error */
    sv->rejoining = 0;
    if (status == CKS_OK) {
        sv->silent_ns      = 0; /* it answers */
        sv->heard_ns       = cks_time_ns();
        sv->state          = CKS_SRV_UP;
        sv->local          = cks_tp_conn_local(conn);
        sv->rejoin_ns      = 0;
        sv->rejoin_wait_ns = 0;
        sv->ended(c, pos, CKS_OK);
        return;
    }
    const char *why = cks_tp_conn_handshake_error(conn);
    cks_log(status == CKS_ERR_TIMEOUT || status == CKS_ERR_CONN_LOST || rejoining
                ? CKS_LOG_DEBUG
                : CKS_LOG_INFO,
            "handshake with %s:%u: %s (%s)", sv->addr, sv->port, cks_status_string(status), why);
    if (status != CKS_ERR_CONN_LOST && !rejoining) {
        cks_cl_set_errorf(c, status, "%s", why);
    }
    if (status == CKS_ERR_TIMEOUT && !rejoining) {
        /* silent: requests that can go elsewhere skip it a while */
        sv->silent_ns = cks_time_ns();
    }
    sv->ended(c, pos, status == CKS_ERR_CONN_LOST ? CKS_ERR_UNREACHABLE : status);
}

/* The transport's handshake with a server ended (progress thread). arg is
 * the connection it ran on: the outcome of one the client dropped since
 * (cks_cl_srv_drop()) is old news. */
static void cks_cl_handshake_done(void *arg, cks_status_t status)
{
    cks_tp_conn_h conn = arg;
    cks_cl_srv_t *sv   = cks_tp_conn_user(conn);
    if (sv == NULL) {
        return;
    }
    cks_client_h c = sv->client;
    if (sv->conn == conn) {
        cks_cl_handshake_ended(c, sv, conn, status);
    }
    /* the handshake counts as in flight until what it started (the ops that
     * waited, the MEM_MAPs) has been sent and counts in its place: a client
     * never looks idle between the two */
    __atomic_sub_fetch(&c->requests, 1, __ATOMIC_RELAXED);
}

/* Connect to a server and run the transport's handshake (HELLO, and AUTH
 * with a secret; cks_tp_conn_handshake()), which ends on a worker-address
 * endpoint. */
void cks_cl_srv_connect(cks_client_h c, size_t pos, cks_cl_srv_cb_t ended)
{
    cks_cl_srv_t *sv = &c->srv[pos];
    cks_status_t status;

    sv->ended = ended;
    status    = cks_tp_conn_connect(c->tp, sv->addr, sv->port, &sv->conn);
    if (status != CKS_OK) {
        sv->conn       = NULL;
        sv->last_error = status;
        sv->failed_ns  = cks_time_ns();
        ended(c, pos, CKS_ERR_UNREACHABLE);
        return;
    }
    cks_tp_conn_set_user(sv->conn, sv);
    sv->state = CKS_SRV_CONNECTING;
    __atomic_add_fetch(&c->requests, 1, __ATOMIC_RELAXED); /* until its end */
    status = cks_tp_conn_handshake(sv->conn, c->name, c->has_secret ? &c->secret : NULL,
                                   c->timeout_ms, cks_cl_handshake_done, sv->conn);
    if (status != CKS_INPROGRESS) {
        __atomic_sub_fetch(&c->requests, 1, __ATOMIC_RELAXED); /* it never began */
        ended(c, pos, status == CKS_OK ? CKS_ERR_INTERNAL : status);
    }
}
