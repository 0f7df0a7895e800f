/*
 * DESIGN: libckstore's client. Owns one UCX worker, the connection to the
 * server, and a progress thread that is the worker's only user.
 *
 * Application threads never touch UCX: a call packs its request into an op,
 * appends it to the submit queue (mutex) and wakes the progress thread with
 * cks_tp_worker_signal(). The progress thread sends the op, matches the
 * reply by request id, receives payloads zero-copy into the caller's buffer,
 * runs the callback, and enforces timeouts: ops are kept in submission order,
 * and all have the same timeout, so the oldest is the next to expire. An op
 * that times out while UCX still uses the caller's buffer closes the
 * connection (UCX then fails the transfer) so that the buffer is returned
 * only when nothing writes to it any more. The progress thread sleeps on
 * the worker's event fd when there is nothing to do.
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

/* ---- small helpers ------------------------------------------------------------ */

void cks_cl_set_error(cks_client_h c, cks_status_t status, const char *text,
                             size_t len)
{
    pthread_mutex_lock(&c->lock);
    snprintf(c->last_error, sizeof(c->last_error), "%s: %.*s", cks_status_name(status),
             (int)CKS_MIN(len, (size_t)CKS_MSG_MAX_LEN), text);
    pthread_mutex_unlock(&c->lock);
}

void cks_cl_set_errorf(cks_client_h c, cks_status_t status, const char *fmt, ...)
{
    char text[CKS_MSG_MAX_LEN + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    cks_cl_set_error(c, status, text, strlen(text));
}

void cks_client_last_error(cks_client_h c, char *buf, size_t len)
{
    if (buf == NULL || len == 0) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    snprintf(buf, len, "%s", c->last_error);
    pthread_mutex_unlock(&c->lock);
}

void cks_waiter_cb(void *arg, cks_status_t status)
{
    cks_waiter_t *w = arg;
    pthread_mutex_lock(&w->lock);
    w->status = status;
    w->done   = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void cks_waiter_init(cks_waiter_t *w)
{
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->done   = 0;
    w->status = CKS_INPROGRESS;
}

/* Wait for an op submitted with cks_waiter_cb; `status` is what submit returned. */
cks_status_t cks_waiter_wait(cks_waiter_t *w, cks_status_t status)
{
    if (status == CKS_INPROGRESS) {
        pthread_mutex_lock(&w->lock);
        while (!w->done) {
            pthread_cond_wait(&w->cond, &w->lock);
        }
        status = w->status;
        pthread_mutex_unlock(&w->lock);
    }
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    return status;
}

/* Copy a name into the op and point a wire string at the copy. */
cks_status_t cks_op_name(cks_op_t *op, size_t *used, const char *name,
                                size_t max, cks_wire_str_t *s)
{
    size_t len;
    cks_status_t status;

    if (name == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    len    = strnlen(name, max + 1);
    status = cks_name_check(name, len, max);
    if (status != CKS_OK) {
        return status;
    }
    memcpy(op->names + *used, name, len);
    s->ptr = op->names + *used;
    s->len = (uint32_t)len;
    *used += len + 1;
    return CKS_OK;
}

cks_op_t *cks_op_new(cks_op_kind_t kind, unsigned type)
{
    cks_op_t *op = calloc(1, sizeof(*op));
    if (op != NULL) {
        op->kind     = kind;
        op->type     = type;
        op->status   = CKS_OK;
        op->mem_type = CKS_MEM_HOST;
    }
    return op;
}

/* ---- puts per version (what a seal tells the coordinator) -------------------- */

/* A put completed: count it for its version's seal, and add it to the
 * digest of what this client put (cks_msg_version_seal_t.digest); on a
 * cluster, count it for `srv`, the primary that answered it (the seal's
 * primaries). */
void cks_cl_put_counted(cks_client_h c, const cks_msg_put_t *m, size_t srv)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9], be[8];
    size_t len = cks_vkey(key, m->job.ptr, m->job.len, m->version);
    cks_put_be64(be, m->size);
    uint64_t digest = cks_crc64(cks_crc64(0, m->key.ptr, m->key.len), be, sizeof(be));
    pthread_mutex_lock(&c->lock);
    cks_cl_puts_t *n = cks_hmap_get(c->put_counts, key, len);
    if (n == NULL && (n = calloc(1, sizeof(*n))) != NULL &&
        cks_hmap_put(c->put_counts, key, len, n) != CKS_OK) {
        free(n);
        n = NULL;
    }
    if (n != NULL && c->map != NULL && srv < c->nsrv && n->on == NULL) {
        n->on = calloc(c->nsrv, sizeof(*n->on)); /* NULL: the seal names none */
    }
    if (n != NULL) {
        n->count++;
        n->digest ^= digest;
        if (n->on != NULL && srv < c->nsrv) {
            n->on[srv]++;
        }
    } else {
        cks_warn("cannot count a put of version %llu", (unsigned long long)m->version);
    }
    pthread_mutex_unlock(&c->lock);
}

cks_cl_puts_t cks_cl_put_count(cks_client_h c, const char *job, uint64_t version, int take)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9];
    size_t job_len = strnlen(job, CKS_JOB_MAX_LEN);
    size_t len     = cks_vkey(key, job, job_len, version);
    cks_cl_puts_t out = {0, 0, NULL};
    pthread_mutex_lock(&c->lock);
    cks_cl_puts_t *n = take ? cks_hmap_del(c->put_counts, key, len)
                            : cks_hmap_get(c->put_counts, key, len);
    if (n != NULL) {
        out = *n;
        if (take) {
            free(n);
        } else {
            out.on = NULL; /* stays with the entry */
        }
    }
    pthread_mutex_unlock(&c->lock);
    return out;
}

static void cks_cl_puts_free(const void *key, size_t len, void *value, void *arg)
{
    cks_cl_puts_t *n = value;
    free(n->on);
    free(n);
}

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
    if (c->put_counts != NULL) {
        cks_hmap_foreach(c->put_counts, cks_cl_puts_free, NULL);
    }
    cks_hmap_destroy(c->put_counts);
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

/* Tell every server that is up of a new region, and wait (bounded by the
 * client's timeout) until those on this host have mapped and faulted it in:
 * registration at allocation, as RDMA memory is registered, so that the
 * transfers run at full speed from the first. Servers elsewhere have nothing
 * to do; any failure only leaves the fault-in to the first transfers. */
static void cks_cl_mem_register(cks_client_h c, const cks_cl_mem_t *m)
{
    cks_waiter_t *w = calloc(c->nsrv, sizeof(*w));
    cks_status_t *st = calloc(c->nsrv, sizeof(*st));
    size_t mapped = 0;

    for (size_t i = 0; w != NULL && st != NULL && i < c->nsrv; i++) {
        cks_op_t *op = cks_cl_mem_map_op(m, i);
        cks_waiter_init(&w[i]);
        st[i] = op != NULL ? cks_cl_submit(c, op, cks_waiter_cb, &w[i]) : CKS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; w != NULL && st != NULL && i < c->nsrv; i++) {
        st[i] = cks_waiter_wait(&w[i], st[i]);
        mapped += st[i] == CKS_OK;
        if (st[i] != CKS_OK && st[i] != CKS_ERR_UNSUPPORTED && st[i] != CKS_ERR_UNREACHABLE) {
            cks_info("server %s:%u did not map a region of %zu bytes ahead: %s",
                     c->srv[i].addr, c->srv[i].port, m->len, cks_status_string(st[i]));
        }
    }
    cks_debug("%zu bytes at %p: mapped ahead by %zu of %zu servers", m->len, m->base, mapped,
              c->nsrv);
    free(st);
    free(w);
}

cks_status_t cks_mem_alloc(cks_client_h c, size_t size, void **ptr_p)
{
    cks_cl_mem_t *m;
    cks_status_t status;

    if (c == NULL || size == 0 || ptr_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_tp_mem_alloc(c->tp, size, &m->mem, &m->base);
    if (status != CKS_OK) {
        free(m);
        return status;
    }
    m->len = size;
    pthread_mutex_lock(&c->lock);
    m->next = c->mems;
    c->mems = m;
    pthread_mutex_unlock(&c->lock);
    cks_cl_mem_register(c, m);
    *ptr_p = m->base;
    return CKS_OK;
}

cks_status_t cks_mem_free(cks_client_h c, void *ptr)
{
    cks_cl_mem_t **pp, *m = NULL;

    if (c == NULL || ptr == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&c->lock);
    for (pp = &c->mems; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->base == ptr) {
            m   = *pp;
            *pp = m->next;
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (m == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    cks_tp_mem_unmap(m->mem);
    free(m);
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
