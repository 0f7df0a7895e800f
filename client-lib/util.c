/*
 * DESIGN: what every file of libckstore stands on: the last error's text,
 * waiters (a blocking call is a *_nb call and a wait), an op's allocation
 * and its bounded names, and the puts counted per version (what a seal
 * tells the coordinator). See client.c for the whole design.
 *
 * Never: call up into the op engine, a connection or a restore.
 */
#include "client_int.h"

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

void cks_cl_noop_done(void *arg, cks_status_t status)
{
}

/* A MEM_MAP of a new connection was answered (cks_cl_mem_map_ops()): the
 * server mapped the region, or will fault it in as it copies. */
void cks_cl_map_done(void *arg, cks_status_t status)
{
    cks_cl_srv_t *sv = arg;
    (void)status;
    sv->maps_pending--;
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
    (void)key, (void)len, (void)arg;
    free(n->on);
    free(n);
}

void cks_cl_put_counts_free(cks_client_h c)
{
    if (c->put_counts != NULL) {
        cks_hmap_foreach(c->put_counts, cks_cl_puts_free, NULL);
    }
    cks_hmap_destroy(c->put_counts);
}
