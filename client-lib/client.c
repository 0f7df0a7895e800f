/*
 * DESIGN: libckstore's client and its life cycle. A client owns one UCX
 * worker, a connection to each server, and a progress thread that is the
 * worker's only user; this file makes and destroys them and puts the parts
 * together (servers from the params or the cluster map, the secret, the
 * staging ring, the scratch region).
 *
 * Application threads never touch UCX: a call packs its request into an op,
 * appends it to the submit queue (mutex) and wakes the progress thread with
 * cks_tp_worker_signal(). The progress thread (op.c) sends the op, matches
 * the reply by request id (reply.c), receives payloads zero-copy into the
 * caller's buffer, runs the callback, and enforces timeouts: ops in flight
 * are kept in deadline order (common/deadline.c), so the sweep looks only
 * at those due. An op that times out while UCX still uses the caller's
 * buffer closes the connection (UCX then fails the transfer) so that the
 * buffer is returned only when nothing writes to it any more. The progress
 * thread sleeps on the worker's event fd when there is nothing to do.
 *
 * Blocking calls are *_nb calls plus a wait on a condition variable.
 */
#include "client_int.h"
#include "stage.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- client life cycle ---------------------------------------------------------------- */

static cks_status_t cks_cl_parse_server(const char *server, char *addr, size_t addr_len,
                                        uint16_t *port_p)
{
    const char *colon = server ? strrchr(server, ':') : NULL;
    char *end;
    unsigned long port;

    if (colon == NULL || colon == server || (size_t)(colon - server) >= addr_len) {
        return CKS_ERR_INVALID_PARAM;
    }
    port = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || port == 0 || port > 65535) {
        return CKS_ERR_INVALID_PARAM;
    }
    memcpy(addr, server, (size_t)(colon - server));
    addr[colon - server] = '\0';
    *port_p              = (uint16_t)port;
    return CKS_OK;
}

/* Servers from the params: one standalone server, or a cluster map. */
static cks_status_t cks_cl_servers(cks_client_h c, const cks_client_params_t *params)
{
    char err[256];
    cks_status_t status;

    if (params->field_mask & CKS_CLIENT_FIELD_CLUSTER) {
        status = cks_cluster_load(params->cluster, &c->map, err, sizeof(err));
        if (status != CKS_OK) {
            cks_cl_set_errorf(c, status, "%s", err);
            return status;
        }
        c->k          = 4;
        c->m          = 2;
        c->chunk_size = 1u << 20;
        if (params->field_mask & CKS_CLIENT_FIELD_EC) {
            c->k          = params->ec_k;
            c->m          = params->ec_m;
            c->chunk_size = params->chunk_size;
        }
        if (c->chunk_size == 0 || c->chunk_size % 4096 != 0 || c->chunk_size > (64u << 20)) {
            cks_error("chunk size %llu must be a multiple of 4096 up to 64 MiB",
                      (unsigned long long)c->chunk_size);
            return CKS_ERR_INVALID_PARAM;
        }
        status = cks_cluster_check(c->map, c->k, c->m, err, sizeof(err));
        if (status != CKS_OK) {
            cks_cl_set_errorf(c, status, "%s", err);
            return status;
        }
        if (params->field_mask & CKS_CLIENT_FIELD_MEMBER_TIMEOUT) {
            if (params->member_timeout_ms < CKS_WIRE_MEMBER_MS_MIN ||
                params->member_timeout_ms > CKS_WIRE_MEMBER_MS_MAX) {
                cks_cl_set_errorf(c, CKS_ERR_INVALID_PARAM,
                                  "member timeout %u ms: must be %u .. %u ms",
                                  params->member_timeout_ms, CKS_WIRE_MEMBER_MS_MIN,
                                  CKS_WIRE_MEMBER_MS_MAX);
                return CKS_ERR_INVALID_PARAM;
            }
            c->member_ms = params->member_timeout_ms;
        }
        c->nsrv         = cks_cluster_nservers(c->map);
        c->scratch_size = 32u << 20;
        if (params->field_mask & CKS_CLIENT_FIELD_SCRATCH) {
            if (params->scratch_size > (4ull << 30)) {
                cks_error("scratch size %llu: at most 4 GiB",
                          (unsigned long long)params->scratch_size);
                return CKS_ERR_INVALID_PARAM;
            }
            c->scratch_size = params->scratch_size;
        }
    } else if (params->field_mask & CKS_CLIENT_FIELD_SERVER) {
        c->nsrv = 1;
    } else {
        return CKS_ERR_INVALID_PARAM;
    }
    c->srv = calloc(c->nsrv, sizeof(*c->srv));
    if (c->srv == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < c->nsrv; i++) {
        c->srv[i].client = c;
        if (c->map != NULL) {
            const cks_cluster_server_t *cs = cks_cluster_server(c->map, i);
            snprintf(c->srv[i].addr, sizeof(c->srv[i].addr), "%s", cs->addr);
            c->srv[i].port = cs->port;
        } else {
            status = cks_cl_parse_server(params->server, c->srv[i].addr,
                                         sizeof(c->srv[i].addr), &c->srv[i].port);
            if (status != CKS_OK) {
                cks_error("server address '%s' is not ipv4:port",
                          params->server ? params->server : "");
                return status;
            }
        }
    }
    return CKS_OK;
}

static void cks_cl_free(cks_client_h c)
{
    for (unsigned k = 0; k <= CKS_EC_MAX_K; k++) {
        for (unsigned m = 0; m <= CKS_EC_MAX_M; m++) {
            cks_ec_destroy(c->ec[k][m]);
        }
    }
    free(c->srv);
    cks_cluster_free(c->map);
    cks_hmap_destroy(c->inflight);
    cks_cl_put_counts_free(c);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

cks_status_t cks_client_create(const cks_client_params_t *params, cks_client_h *client_p)
{
    cks_tp_worker_params_t wp;
    cks_client_h c;
    cks_op_t *op;
    cks_status_t status;

    if (params == NULL || client_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->timeout_ms = (params->field_mask & CKS_CLIENT_FIELD_TIMEOUT_MS) && params->timeout_ms > 0
                        ? params->timeout_ms
                        : CKS_CLIENT_TIMEOUT_DEFAULT;
    snprintf(c->name, sizeof(c->name), "%s",
             (params->field_mask & CKS_CLIENT_FIELD_NAME) && params->name ? params->name
                                                                          : "libckstore");
    status = cks_hmap_create(&c->inflight);
    if (status == CKS_OK) {
        status = cks_hmap_create(&c->put_counts);
    }
    if (status == CKS_OK) {
        status = cks_cl_servers(c, params);
    }
    if (status == CKS_OK) {
        status = cks_cl_stage_config(c, params);
    }
    if (status == CKS_OK && (params->field_mask & CKS_CLIENT_FIELD_SECRET)) {
        status        = params->secret != NULL ? cks_tp_secret_load(params->secret, &c->secret)
                                               : CKS_ERR_INVALID_PARAM;
        c->has_secret = status == CKS_OK;
        if (status == CKS_OK && params->secret_job != NULL) {
            if (strlen(params->secret_job) > CKS_JOB_MAX_LEN) {
                status = CKS_ERR_INVALID_PARAM;
            } else {
                snprintf(c->secret.job, sizeof(c->secret.job), "%s", params->secret_job);
            }
        }
    }
    if (status != CKS_OK) {
        cks_cl_free(c);
        return status;
    }
    memset(&wp, 0, sizeof(wp));
    wp.name        = c->name;
    wp.on_msg      = cks_cl_on_msg;
    wp.on_bad_msg  = cks_cl_on_bad_msg;
    wp.on_conn_err = cks_cl_on_conn_err;
    wp.arg         = c;
    status         = cks_tp_worker_create(&wp, &c->tp);
    if (status != CKS_OK) {
        cks_cl_free(c);
        return status;
    }
    if ((status = cks_tp_sentinel_start(c->tp)) != CKS_OK) { /* see cks_cl_thread() */
        cks_warn("no check of the client's receive path: %s", cks_status_string(status));
    }
    if (c->map != NULL) {
        cks_cl_scratch_prepare(c); /* before the thread: then it is the thread's */
    }
    if (pthread_create(&c->thread, NULL, cks_cl_thread, c) != 0) {
        cks_cl_scratch_free(c);
        cks_tp_worker_destroy(c->tp);
        cks_cl_free(c);
        return CKS_ERR_NO_MEMORY;
    }
    /* a server must answer: the first that does (any, for a cluster) */
    op = cks_op_new(CKS_OP_CONNECT, CKS_MSG_HELLO);
    if (op == NULL) {
        status = CKS_ERR_NO_MEMORY;
    } else {
        op->target = CKS_TARGET_ANY;
        status     = cks_cl_run(c, op);
    }
    if (status != CKS_OK) {
        cks_error("cannot reach %s: %s", c->map ? "any server of the cluster" : "the server",
                  cks_status_string(status));
        cks_client_destroy(c);
        return cks_cl_retryable(status) ? CKS_ERR_UNREACHABLE : status;
    }
    *client_p = c;
    return CKS_OK;
}

void cks_client_destroy(cks_client_h c)
{
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_mutex_unlock(&c->lock);
    cks_tp_worker_signal(c->tp);
    pthread_join(c->thread, NULL);
    /* ops submitted after the thread's last look at the queue */
    while (c->sub_head != NULL) {
        cks_op_t *op = c->sub_head;
        c->sub_head  = op->next;
        op->cb(op->arg, CKS_ERR_CANCELED);
        free(op);
    }
    cks_cl_stage_free(c); /* its ops all failed above: its thread ends */
    while (c->mems != NULL) { /* the caller's to free; UCX's must go before the worker */
        cks_cl_mem_t *m = c->mems;
        cks_warn("cks_client_destroy: %zu bytes from cks_mem_alloc() not freed", m->len);
        c->mems = m->next;
        cks_tp_mem_unmap(m->mem);
        free(m);
    }
    cks_cl_scratch_free(c);
    cks_tp_worker_destroy(c->tp);
    cks_cl_free(c);
}
