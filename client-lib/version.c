/*
 * DESIGN: libckstore's calls on versions and objects - begin, finish (seal),
 * abort, delete and delete markers, stat, `latest`, lists, and the
 * cluster's usage and repair figures - as ops for the engine in op.c:
 * each packs its request into an op (client_int.h), picks whom it goes to
 * (a fixed server, the version's coordinator candidates, first or only:
 * cks_cl_coord_first(), cks_cl_to_coordinator(), or any server) and waits
 * for it, or returns at once (*_nb). Puts are put.c's.
 *
 * Never: touch UCX or a server's connection state here (the progress thread
 * in op.c owns them); keep a caller's buffer after its op completed.
 */
#include "client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- versions ----------------------------------------------------------------------- */

/* op->group: the coordinator candidates of (job, version), the first asked
 * (the standalone server when there is no map). */
static void cks_cl_candidates(cks_client_h c, cks_op_t *op, const char *job, size_t job_len,
                              uint64_t version)
{
    op->tries  = 0;
    op->ngroup = 1;
    op->group[0] = 0;
    if (c->map != NULL) {
        op->ngroup = (unsigned)cks_place_coordinators(c->map, job, job_len, version,
                                                      op->group, CKS_COORD_CANDIDATES_MAX);
    }
    op->srv = op->group[0];
}

void cks_cl_to_coordinator(cks_client_h c, cks_op_t *op, const char *job, size_t job_len,
                           uint64_t version)
{
    cks_cl_candidates(c, op, job, job_len, version);
    op->target = c->map != NULL ? CKS_TARGET_COORD : CKS_TARGET_FIXED;
}

void cks_cl_coord_first(cks_client_h c, cks_op_t *op, const char *job, size_t job_len,
                        uint64_t version)
{
    cks_cl_candidates(c, op, job, job_len, version);
    op->coord_first = 1;
}

/* An op whose body is (job, version): seal, abort. A seal's op has room
 * after it for the primaries its body names (cks_cl_seal_primaries():
 * op->names is too small), then, as an abort's, for the text of a
 * coordinator that could not fence its ballot (op->unfenced_why): they go
 * with the op wherever it is freed, and no other op carries them. */
static cks_status_t cks_cl_version_ref_op(unsigned type, cks_op_kind_t kind, const char *job,
                                          uint64_t version, cks_op_t **op_p)
{
    size_t used  = 0;
    size_t prims = type == CKS_MSG_VERSION_SEAL
                       ? CKS_WIRE_MAX_SEAL_PRIMARIES * CKS_WIRE_SEAL_PRIMARY_LEN
                       : 0;
    cks_wire_str_t job_str;
    cks_op_t *op = cks_op_new(kind, type);
    if (op != NULL) {
        /* before any string points into it */
        cks_op_t *big = realloc(op, sizeof(*op) + prims + CKS_MSG_MAX_LEN + 1);
        if (big == NULL) {
            free(op);
        }
        op = big;
    }
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    op->unfenced_why    = (char *)(op + 1) + prims;
    op->unfenced_why[0] = '\0';
    cks_status_t status = cks_op_name(op, &used, job, CKS_JOB_MAX_LEN, &job_str);
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    if (type == CKS_MSG_VERSION_SEAL) {
        op->body.m_VERSION_SEAL.job     = job_str;
        op->body.m_VERSION_SEAL.version = version;
    } else {
        op->body.m_VERSION_ABORT.job     = job_str;
        op->body.m_VERSION_ABORT.version = version;
    }
    *op_p = op;
    return CKS_OK;
}

cks_status_t cks_version_begin_nb(cks_client_h c, const cks_version_params_t *p,
                                  cks_done_cb_t cb, void *arg)
{
    cks_msg_version_begin_t *m;
    size_t used = 0;
    cks_op_t *op;
    cks_status_t status;

    if (c == NULL || p == NULL || cb == NULL || p->version == UINT64_MAX) {
        return CKS_ERR_INVALID_PARAM;
    }
    op = cks_op_new(CKS_OP_STATUS, CKS_MSG_VERSION_BEGIN);
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    m      = &op->body.m_VERSION_BEGIN;
    status = cks_op_name(op, &used, p->job, CKS_JOB_MAX_LEN, &m->job);
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    m->version    = p->version;
    m->parent     = (p->field_mask & CKS_VERSION_FIELD_PARENT) ? p->parent : CKS_NO_PARENT;
    m->nranks     = (p->field_mask & CKS_VERSION_FIELD_NRANKS) ? p->nranks : 1;
    m->k          = c->k;
    m->m          = c->m;
    m->chunk_size = c->chunk_size;
    m->retain     = (p->field_mask & CKS_VERSION_FIELD_RETAIN) ? p->retain : 0;
    m->timeout_s  = (p->field_mask & CKS_VERSION_FIELD_TIMEOUT) ? p->timeout_s : 0;
    m->member_ms  = c->member_ms;
    if (m->nranks == 0) {
        free(op);
        return CKS_ERR_INVALID_PARAM;
    }
    cks_cl_to_coordinator(c, op, m->job.ptr, m->job.len, m->version);
    return cks_cl_submit(c, op, cb, arg);
}

cks_status_t cks_version_begin(cks_client_h c, const cks_version_params_t *p)
{
    cks_waiter_t w;
    cks_waiter_init(&w);
    return cks_waiter_wait(&w, cks_version_begin_nb(c, p, cks_waiter_cb, &w));
}

cks_status_t cks_version_seal_nb(cks_client_h c, const char *job, uint64_t version,
                                 cks_done_cb_t cb, void *arg)
{
    return cks_version_finish_nb(c, job, version, 0, cb, arg);
}

cks_status_t cks_version_finish(cks_client_h c, const char *job, uint64_t version,
                                uint32_t rank)
{
    cks_waiter_t w;
    cks_waiter_init(&w);
    return cks_waiter_wait(&w, cks_version_finish_nb(c, job, version, rank, cks_waiter_cb,
                                                     &w));
}

cks_status_t cks_object_delete(cks_client_h c, const char *job, uint64_t version,
                               const char *key)
{
    size_t used = 0;
    cks_op_t *op;
    cks_status_t status;

    if (c == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (c->map == NULL) {
        return CKS_ERR_UNSUPPORTED;
    }
    op = cks_op_new(CKS_OP_STATUS, CKS_MSG_OBJECT_DELETE);
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_op_name(op, &used, job, CKS_JOB_MAX_LEN, &op->body.m_OBJECT_DELETE.job);
    if (status == CKS_OK) {
        status = cks_op_name(op, &used, key, CKS_KEY_MAX_LEN, &op->body.m_OBJECT_DELETE.key);
    }
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    op->body.m_OBJECT_DELETE.version = version;
    cks_cl_to_coordinator(c, op, op->body.m_OBJECT_DELETE.job.ptr,
                          op->body.m_OBJECT_DELETE.job.len, version);
    return cks_cl_run(c, op);
}

/* The seal's primaries (cks_msg_version_seal_t.primaries): for each server
 * that answered puts of this rank as their primary, its id and how many, in
 * the room after the op (cks_cl_version_ref_op()). When more servers than
 * fit did, the first that fit: the coordinator then knows of fewer objects
 * than were stored, which only costs it the early failure for the others. */
static void cks_cl_seal_primaries(cks_client_h c, cks_op_t *op, const uint64_t *on)
{
    uint8_t *out = (uint8_t *)(op + 1);
    size_t n     = 0;
    for (size_t i = 0; on != NULL && i < c->nsrv && n < CKS_WIRE_MAX_SEAL_PRIMARIES; i++) {
        if (on[i] == 0) {
            continue;
        }
        uint16_t id    = cks_cluster_server(c->map, i)->id;
        uint32_t count = on[i] > UINT32_MAX ? UINT32_MAX : (uint32_t)on[i];
        uint8_t *e     = out + n++ * CKS_WIRE_SEAL_PRIMARY_LEN;
        e[0]           = (uint8_t)(id >> 8);
        e[1]           = (uint8_t)id;
        e[2]           = (uint8_t)(count >> 24);
        e[3]           = (uint8_t)(count >> 16);
        e[4]           = (uint8_t)(count >> 8);
        e[5]           = (uint8_t)count;
    }
    op->body.m_VERSION_SEAL.primaries =
        (cks_wire_str_t){(const char *)out, (uint32_t)(n * CKS_WIRE_SEAL_PRIMARY_LEN)};
}

cks_status_t cks_version_finish_nb(cks_client_h c, const char *job, uint64_t version,
                                   uint32_t rank, cks_done_cb_t cb, void *arg)
{
    cks_op_t *op;
    if (c == NULL || cb == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    cks_status_t status = cks_cl_version_ref_op(CKS_MSG_VERSION_SEAL, CKS_OP_SEAL, job,
                                                version, &op);
    if (status != CKS_OK) {
        return status;
    }
    cks_cl_to_coordinator(c, op, op->body.m_VERSION_SEAL.job.ptr,
                          op->body.m_VERSION_SEAL.job.len, version);
    cks_cl_puts_t puts = cks_cl_put_count(c, job, version, 1);
    op->body.m_VERSION_SEAL.nobjects = puts.count;
    op->body.m_VERSION_SEAL.digest   = puts.digest;
    op->body.m_VERSION_SEAL.rank     = rank;
    cks_cl_seal_primaries(c, op, puts.on);
    free(puts.on);
    return cks_cl_submit(c, op, cb, arg);
}

cks_status_t cks_version_seal(cks_client_h c, const char *job, uint64_t version)
{
    cks_waiter_t w;
    cks_waiter_init(&w);
    return cks_waiter_wait(&w, cks_version_seal_nb(c, job, version, cks_waiter_cb, &w));
}

static cks_status_t cks_cl_version_simple(cks_client_h c, unsigned type, const char *job,
                                          uint64_t version)
{
    cks_op_t *op;
    if (c == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    cks_status_t status = cks_cl_version_ref_op(type, CKS_OP_STATUS, job, version, &op);
    if (status != CKS_OK) {
        return status;
    }
    cks_cl_to_coordinator(c, op, op->body.m_VERSION_ABORT.job.ptr,
                          op->body.m_VERSION_ABORT.job.len, version);
    if (type == CKS_MSG_VERSION_ABORT) {
        free(cks_cl_put_count(c, job, version, 1).on);
    }
    return cks_cl_run(c, op);
}

cks_status_t cks_version_abort(cks_client_h c, const char *job, uint64_t version)
{
    return cks_cl_version_simple(c, CKS_MSG_VERSION_ABORT, job, version);
}

cks_status_t cks_version_delete(cks_client_h c, const char *job, uint64_t version)
{
    return cks_cl_version_simple(c, CKS_MSG_VERSION_DELETE, job, version);
}

cks_status_t cks_cl_version_stat(cks_client_h c, const char *job, uint64_t version, int latest,
                                 cks_version_info_t *info_p)
{
    cks_version_info_t info;
    size_t used = 0;
    cks_op_t *op;
    cks_status_t status;

    if (c == NULL || info_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    op = cks_op_new(CKS_OP_VERSION_STAT, CKS_MSG_VERSION_STAT);
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_op_name(op, &used, job, CKS_JOB_MAX_LEN, &op->body.m_VERSION_STAT.job);
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    op->body.m_VERSION_STAT.version = version;
    op->body.m_VERSION_STAT.latest  = (uint32_t)latest;
    op->out                         = &info;
    op->target                      = CKS_TARGET_ANY; /* every server has the manifests */
    op->srv = 0;
    if (!latest) {
        cks_cl_coord_first(c, op, job, strlen(job), version);
    }
    status     = cks_cl_run(c, op);
    if (status == CKS_OK) {
        *info_p = info;
    }
    return status;
}

cks_status_t cks_version_stat(cks_client_h c, const char *job, uint64_t version,
                              cks_version_info_t *info_p)
{
    return cks_cl_version_stat(c, job, version, 0, info_p);
}

typedef struct {
    cks_waiter_t w;
    cks_version_info_t info;
    cks_status_t status;
} cks_latest_t;

static int cks_cl_restorable(cks_vstate_t st)
{
    return st == CKS_VSTATE_PROTECTED || st == CKS_VSTATE_SEALED || st == CKS_VSTATE_DEGRADED;
}

/*
 * Cluster: no one server's "latest" is the truth. A server that was down when
 * versions committed (a restarted one) answers an older version, one that
 * missed a delete a version that is gone. Every server is asked at once; the
 * newest version any of them names is taken once its coordinator (asked
 * first by cks_version_stat) confirms it restorable, else the next newest.
 */
/* Ask every server for its latest version of job at once (l: one per server). */
static void cks_cl_latest_ask(cks_client_h c, const char *job, cks_latest_t *l)
{
    for (size_t i = 0; i < c->nsrv; i++) {
        size_t used  = 0;
        cks_op_t *op = cks_op_new(CKS_OP_VERSION_STAT, CKS_MSG_VERSION_STAT);
        cks_waiter_init(&l[i].w);
        l[i].status = op != NULL ? cks_op_name(op, &used, job, CKS_JOB_MAX_LEN,
                                               &op->body.m_VERSION_STAT.job)
                                 : CKS_ERR_NO_MEMORY;
        if (l[i].status != CKS_OK) {
            free(op);
            continue;
        }
        op->body.m_VERSION_STAT.version = 0;
        op->body.m_VERSION_STAT.latest  = 1;
        op->out                         = &l[i].info;
        op->srv                         = i;
        op->target                      = CKS_TARGET_FIXED;
        l[i].status                     = cks_cl_submit(c, op, cks_waiter_cb, &l[i].w);
    }
    for (size_t i = 0; i < c->nsrv; i++) {
        l[i].status = cks_waiter_wait(&l[i].w, l[i].status);
    }
}

cks_status_t cks_version_latest(cks_client_h c, const char *job, cks_version_info_t *info_p)
{
    cks_status_t status, notfound;
    cks_latest_t *l;

    if (c == NULL || info_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (c->map == NULL || c->nsrv < 2) {
        return cks_cl_version_stat(c, job, 0, 1, info_p);
    }
    l = calloc(c->nsrv, sizeof(*l));
    if (l == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    /* servers that restarted together answer BUSY until they have caught up
     * with each other: asked again after a pause, until the timeout */
    uint64_t until = cks_time_ns() + (uint64_t)c->timeout_ms * 1000000ull;
    for (;;) {
        int answered = 0, busy = 0;
        status   = CKS_ERR_UNREACHABLE;
        notfound = CKS_OK;
        cks_cl_latest_ask(c, job, l);
        for (size_t i = 0; i < c->nsrv; i++) {
            answered += l[i].status == CKS_OK;
            busy += l[i].status == CKS_ERR_BUSY;
            if (l[i].status == CKS_ERR_NO_SUCH_JOB || l[i].status == CKS_ERR_NO_SUCH_VERSION) {
                notfound = notfound == CKS_OK ? l[i].status : notfound;
            } else if (l[i].status != CKS_OK && status == CKS_ERR_UNREACHABLE) {
                status = l[i].status; /* kept when no server answers */
            }
        }
        if (answered > 0 || notfound != CKS_OK || busy == 0 ||
            cks_time_ns() + CKS_CL_BUSY_PAUSE_NS >= until) {
            break;
        }
        struct timespec ts = {0, (long)CKS_CL_BUSY_PAUSE_NS};
        nanosleep(&ts, NULL);
    }
    /* newest first: each candidate once */
    for (;;) {
        size_t best = c->nsrv;
        for (size_t i = 0; i < c->nsrv; i++) {
            if (l[i].status == CKS_OK &&
                (best == c->nsrv || l[i].info.version > l[best].info.version)) {
                best = i;
            }
        }
        if (best == c->nsrv) {
            break;
        }
        uint64_t v = l[best].info.version;
        cks_version_info_t info;
        cks_status_t st = cks_cl_version_stat(c, job, v, 0, &info);
        if (st == CKS_OK && cks_cl_restorable(info.state)) {
            *info_p = info;
            free(l);
            return CKS_OK;
        }
        if (st != CKS_OK && st != CKS_ERR_NO_SUCH_VERSION && st != CKS_ERR_NO_SUCH_JOB) {
            *info_p = l[best].info; /* no one could confirm: as the servers said */
            free(l);
            return CKS_OK;
        }
        for (size_t i = 0; i < c->nsrv; i++) {
            if (l[i].status == CKS_OK && l[i].info.version == v) {
                l[i].status = CKS_ERR_NO_SUCH_VERSION; /* gone, or not restorable */
                notfound    = CKS_ERR_NO_SUCH_VERSION;
            }
        }
    }
    free(l);
    return notfound != CKS_OK ? notfound : status;
}

cks_status_t cks_cl_list(cks_client_h c, cks_op_t *op, void *out, size_t max,
                                size_t *count_p, int *more_p)
{
    size_t count = 0;
    int more     = 0;
    cks_status_t status;

    if (out == NULL || count_p == NULL || max == 0) {
        free(op);
        return CKS_ERR_INVALID_PARAM;
    }
    op->out     = out;
    op->out_max = CKS_MIN(max, (size_t)CKS_WIRE_MAX_ENTRIES);
    op->count_p = &count;
    op->more_p  = &more;
    status      = cks_cl_run(c, op);
    if (status == CKS_OK) {
        *count_p = count;
        if (more_p != NULL) {
            *more_p = more;
        }
    }
    return status;
}

cks_status_t cks_version_list(cks_client_h c, const char *job, const uint64_t *after,
                              cks_version_info_t *out, size_t max, size_t *count_p,
                              int *more_p)
{
    size_t used = 0;
    cks_op_t *op;
    cks_status_t status;

    if (c == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    op = cks_op_new(CKS_OP_LIST, CKS_MSG_VERSION_LIST);
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_op_name(op, &used, job, CKS_JOB_MAX_LEN, &op->body.m_VERSION_LIST.job);
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    op->target                         = CKS_TARGET_ANY;
    op->entry                          = CKS_WIRE_ENTRY_VERSION;
    op->body.m_VERSION_LIST.has_after  = after != NULL;
    op->body.m_VERSION_LIST.after      = after ? *after : 0;
    op->body.m_VERSION_LIST.max        = (uint32_t)CKS_MIN(max, (size_t)CKS_WIRE_MAX_ENTRIES);
    return cks_cl_list(c, op, out, max, count_p, more_p);
}

cks_status_t cks_job_list(cks_client_h c, const char *after,
                          char (*names)[CKS_JOB_NAME_MAX + 1], size_t max, size_t *count_p,
                          int *more_p)
{
    size_t used = 0;
    cks_op_t *op;
    cks_status_t status;

    if (c == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    op = cks_op_new(CKS_OP_LIST, CKS_MSG_JOB_LIST);
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    if (after != NULL && after[0] != '\0') {
        status = cks_op_name(op, &used, after, CKS_JOB_MAX_LEN, &op->body.m_JOB_LIST.after);
        if (status != CKS_OK) {
            free(op);
            return status;
        }
    } else {
        op->body.m_JOB_LIST.after = cks_wire_cstr(NULL);
    }
    op->target              = CKS_TARGET_ANY;
    op->entry               = CKS_WIRE_ENTRY_JOB;
    op->body.m_JOB_LIST.max = (uint32_t)CKS_MIN(max, (size_t)CKS_WIRE_MAX_ENTRIES);
    return cks_cl_list(c, op, names, max, count_p, more_p);
}

/* ---- usage ------------------------------------------------------------------------ */

typedef struct {
    cks_waiter_t w;
    cks_cl_stats_t st;
} cks_usage_t;

cks_status_t cks_cluster_stats(cks_client_h c, cks_cluster_stats_t *stats_p)
{
    cks_cluster_stats_t t = {0};
    cks_usage_t *u;

    if (c == NULL || stats_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    u = calloc(c->nsrv, sizeof(*u));
    if (u == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    /* ask every server at once, then collect */
    cks_status_t *st = calloc(c->nsrv, sizeof(*st));
    for (size_t i = 0; st != NULL && i < c->nsrv; i++) {
        cks_op_t *op = cks_op_new(CKS_OP_STATS, CKS_MSG_STATS);
        cks_waiter_init(&u[i].w);
        if (op == NULL) {
            st[i] = CKS_ERR_NO_MEMORY;
            continue;
        }
        op->body.m_STATS.flags = 0;
        op->out                = &u[i].st;
        op->srv                = i;
        op->target             = CKS_TARGET_FIXED;
        st[i]                  = cks_cl_submit(c, op, cks_waiter_cb, &u[i].w);
    }
    for (size_t i = 0; st != NULL && i < c->nsrv; i++) {
        if (cks_waiter_wait(&u[i].w, st[i]) == CKS_OK) {
            t.arena_used += u[i].st.arena_used;
            t.arena_capacity += u[i].st.arena_size;
            t.encoded_bytes += u[i].st.enc_bytes;
            t.encode_cpu_ns += u[i].st.enc_ns;
            t.encoder_cpu_ns += u[i].st.enc_job_ns;
            t.answered++;
        }
    }
    t.servers = (uint32_t)c->nsrv;
    free(st);
    free(u);
    if (t.answered == 0) {
        return CKS_ERR_UNREACHABLE;
    }
    *stats_p = t;
    return CKS_OK;
}

cks_status_t cks_repair_status(cks_client_h c, size_t server, cks_repair_info_t *info_p)
{
    cks_repair_info_t info = {0};
    cks_op_t *op;
    cks_status_t status;

    if (c == NULL || info_p == NULL || server >= c->nsrv) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (c->map == NULL) {
        return CKS_ERR_UNSUPPORTED;
    }
    op = cks_op_new(CKS_OP_REPAIR_STATUS, CKS_MSG_REPAIR_STATUS);
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    op->body.m_REPAIR_STATUS.flags = 0;
    op->out                        = &info;
    op->srv                        = server;
    op->target                     = CKS_TARGET_FIXED;
    status                         = cks_cl_run(c, op);
    if (status == CKS_OK) {
        *info_p = info;
    }
    return status;
}

cks_status_t cks_cluster_usage(cks_client_h c, uint64_t *used_p, uint64_t *capacity_p)
{
    cks_cluster_stats_t t;
    cks_status_t status;

    if (c == NULL || used_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_cluster_stats(c, &t);
    if (status == CKS_OK) {
        *used_p = t.arena_used;
        if (capacity_p != NULL) {
            *capacity_p = t.arena_capacity;
        }
    }
    return status;
}
