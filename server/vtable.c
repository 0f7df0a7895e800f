/*
 * DESIGN: what every request handler of the server stands on: replies (a
 * status with a message, or a typed body), the table of versions with
 * operations in flight on this server (find, lookup, make, release), the
 * checks of a request's names, a metadata writer job's making, and seals,
 * aborts and deletes deferred until the version's puts are done. Progress
 * thread only. See server.c for the whole design.
 *
 * Never: call up into a handler, the dispatcher or the loop.
 */
#include "server_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- replies ------------------------------------------------------------- */

void cks_sv_reply_status(cks_tp_conn_h conn, uint64_t req_id, cks_status_t status,
                                const char *fmt, ...)
{
    char text[CKS_MSG_MAX_LEN];
    cks_msg_status_t m;
    va_list ap;

    text[0] = '\0';
    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
    }
    m.status = status;
    m.msg    = cks_wire_cstr(text);
    cks_status_t st = cks_tp_send(conn, CKS_MSG_STATUS_REPLY, 0, req_id, &m, NULL, 0,
                                  CKS_MEM_HOST, NULL, NULL, NULL);
    if (st != CKS_INPROGRESS) {
        cks_debug("reply to %s: %s", cks_tp_conn_peer(conn), cks_status_string(st));
    }
}

/* Send a fixed-type reply whose first fields are status and msg. */
void cks_sv_reply(cks_tp_conn_h conn, unsigned type, uint64_t req_id, void *body)
{
    cks_status_t st = cks_tp_send(conn, type, 0, req_id, body, NULL, 0, CKS_MEM_HOST,
                                  NULL, NULL, NULL);
    if (st != CKS_INPROGRESS) {
        cks_debug("reply to %s: %s", cks_tp_conn_peer(conn), cks_status_string(st));
    }
}

/* ---- version table ---------------------------------------------------------- */

cks_sv_version_t *cks_sv_version_find(cks_server_h s, const cks_wire_str_t *job,
                                             uint64_t version)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9];
    return cks_hmap_get(s->versions, key, cks_vkey(key, job->ptr, job->len, version));
}

cks_sv_version_t *cks_sv_version_new(cks_server_h s, const cks_wire_str_t *job,
                                            uint64_t version)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9];
    cks_sv_version_t *v = calloc(1, sizeof(*v));
    if (v == NULL) {
        return NULL;
    }
    memcpy(v->job, job->ptr, job->len);
    v->job_len = job->len;
    v->version = version;
    if (cks_hmap_put(s->versions, key, cks_vkey(key, job->ptr, job->len, version), v) !=
        CKS_OK) {
        free(v);
        return NULL;
    }
    return v;
}

cks_sv_version_t *cks_sv_version_new_open(cks_server_h s, const cks_wire_str_t *job,
                                          uint64_t version)
{
    cks_sv_version_t *v = cks_sv_version_new(s, job, version);
    if (v == NULL) {
        return NULL;
    }
    if (cks_hmap_create(&v->keys) != CKS_OK) {
        cks_sv_version_free(s, v);
        return NULL;
    }
    v->open = 1;
    return v;
}

/* An entry and all it owns (its waiters' connections are the caller's). */
static void cks_sv_version_free_all(cks_sv_version_t *v)
{
    cks_hmap_destroy(v->keys);
    cks_hmap_destroy(v->deleted);
    cks_hmap_destroy(v->reported);
    cks_hmap_destroy(v->reporters);
    free(v->objs);
    free(v->ranks_done);
    free(v->waiters);
    free(v->stored_on);
    free(v->reported_by);
    free(v);
}

static void cks_sv_free_version(const void *key, size_t len, void *value, void *arg)
{
    cks_sv_version_t *v = value;
    (void)key, (void)len, (void)arg;
    for (size_t i = 0; i < v->nwaiters; i++) {
        cks_tp_conn_put(v->waiters[i].conn);
    }
    cks_sv_version_free_all(v);
}

void cks_sv_versions_free(cks_server_h s)
{
    cks_hmap_foreach(s->versions, cks_sv_free_version, NULL);
}

void cks_sv_version_free(cks_server_h s, cks_sv_version_t *v)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9];
    cks_hmap_del(s->versions, key, cks_vkey(key, v->job, v->job_len, v->version));
    cks_sv_version_free_all(v);
}

/* Drop the entry when nothing needs it any more. */
void cks_sv_version_release(cks_server_h s, cks_sv_version_t *v)
{
    if (!v->open && v->pending == 0 && v->readers == 0 && v->wait == CKS_SV_WAIT_NONE) {
        cks_sv_version_free(s, v);
    }
}

/* Explain why (job, version) cannot take puts or be read: one LMDB lookup. */
cks_status_t cks_sv_version_lookup(cks_server_h s, const cks_wire_str_t *job,
                                          uint64_t version, cks_md_version_t *rec_p)
{
    cks_md_txn_h txn;
    cks_status_t status = cks_md_txn_begin(s->md, 0, &txn);
    if (status != CKS_OK) {
        return status;
    }
    status = cks_md_version_get(txn, job->ptr, job->len, version, rec_p);
    if (status == CKS_ERR_NO_SUCH_VERSION &&
        cks_md_job_exists(txn, job->ptr, job->len) != CKS_OK) {
        status = CKS_ERR_NO_SUCH_JOB;
    }
    cks_md_txn_abort(txn);
    return status;
}

int cks_sv_restorable(cks_vstate_t st)
{
    return st == CKS_VSTATE_SEALED || st == CKS_VSTATE_PROTECTED ||
           st == CKS_VSTATE_DEGRADED;
}

/* Resolve a readable version: open LMDB read txn is the caller's. */
cks_status_t cks_sv_readable(cks_md_txn_h txn, const cks_wire_str_t *job, uint64_t version,
                             cks_md_version_t *rec_p)
{
    cks_status_t status = cks_md_version_get(txn, job->ptr, job->len, version, rec_p);
    if (status == CKS_ERR_NO_SUCH_VERSION &&
        cks_md_job_exists(txn, job->ptr, job->len) != CKS_OK) {
        return CKS_ERR_NO_SUCH_JOB;
    }
    if (status == CKS_OK && !cks_sv_restorable(rec_p->state)) {
        return CKS_ERR_NOT_RESTORABLE;
    }
    return status;
}

cks_status_t cks_sv_check_names(const cks_wire_str_t *job, const cks_wire_str_t *key)
{
    cks_status_t status = cks_name_check(job->ptr, job->len, CKS_JOB_MAX_LEN);
    if (status == CKS_OK && key != NULL) {
        status = cks_name_check(key->ptr, key->len, CKS_KEY_MAX_LEN);
    }
    return status;
}

int cks_sv_member_ms_refused(cks_tp_conn_h conn, uint64_t req_id, uint32_t ms)
{
    if (ms == 0 || (ms >= CKS_WIRE_MEMBER_MS_MIN && ms <= CKS_WIRE_MEMBER_MS_MAX)) {
        return 0;
    }
    cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                        "member timeout %u ms: must be %u .. %u ms", ms, CKS_WIRE_MEMBER_MS_MIN,
                        CKS_WIRE_MEMBER_MS_MAX);
    return 1;
}

cks_status_t cks_sv_names_txn(cks_server_h s, const cks_wire_str_t *job,
                              const cks_wire_str_t *key, cks_md_txn_h *txn_p)
{
    cks_status_t status = cks_sv_check_names(job, key);
    if (status == CKS_OK) {
        status = cks_md_txn_begin(s->md, 0, txn_p);
    }
    return status;
}

cks_mdq_job_t *cks_sv_mdq_job(cks_server_h s, cks_mdq_type_t type, const char *job,
                              size_t job_len, uint64_t version)
{
    cks_mdq_job_t *j = calloc(1, sizeof(*j));
    if (j != NULL) {
        j->type = type;
        memcpy(j->job, job, job_len);
        j->job_len = (uint32_t)job_len;
        j->version = version;
        j->server  = s;
    }
    return j;
}

/* ---- deferred seal / abort / delete ----------------------------------------- */

cks_status_t cks_sv_version_queue(cks_server_h s, cks_sv_version_t *v, cks_mdq_type_t type,
                                  cks_tp_conn_h conn, uint64_t req_id)
{
    cks_mdq_job_t *j = cks_sv_mdq_job(s, type, v->job, v->job_len, v->version);
    if (j == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return CKS_ERR_NO_MEMORY;
    }
    j->v      = v;
    j->rec    = v->rec;
    j->conn   = conn;
    j->req_id = req_id;
    cks_tp_conn_get(conn);
    if (type == CKS_MDQ_SEAL) {
        j->rec.state     = CKS_VSTATE_SEALED;
        j->rec.sealed_ns = cks_time_real_ns();
        j->rec.nobjects  = v->nobjects;
        j->rec.bytes     = v->bytes;
    } else if (type == CKS_MDQ_ABORT) {
        j->rec.state    = CKS_VSTATE_ABORTED;
        j->rec.nobjects = 0;
        j->rec.bytes    = 0;
    }
    v->pending++; /* the job itself keeps the entry alive */
    cks_mdq_push(&s->mdq, j);
    return CKS_OK;
}

/* Run the waiting request of v when its puts (and, to delete, gets) drained. */
void cks_sv_version_kick(cks_server_h s, cks_sv_version_t *v)
{
    if (v->wait == CKS_SV_WAIT_NONE || v->pending > 0 ||
        (v->wait == CKS_SV_WAIT_DELETE && v->readers > 0)) {
        return;
    }
    cks_sv_wait_t wait = v->wait;
    cks_tp_conn_h conn = v->wait_conn;
    v->wait            = CKS_SV_WAIT_NONE;
    v->wait_conn       = NULL;
    if (wait == CKS_SV_WAIT_SEAL && v->failed != CKS_OK) {
        /* a put could not be recorded: the version cannot be sealed whole */
        cks_sv_reply_status(conn, v->wait_req_id, v->failed,
                            "version %llu of '%s' lost an object (%s); aborting it",
                            (unsigned long long)v->version, v->job,
                            cks_status_string(v->failed));
        cks_sv_version_queue(s, v, CKS_MDQ_ABORT, conn, 0); /* no second reply */
        cks_tp_conn_put(conn);
        return;
    }
    cks_sv_version_queue(s, v, wait == CKS_SV_WAIT_SEAL    ? CKS_MDQ_SEAL
                               : wait == CKS_SV_WAIT_ABORT ? CKS_MDQ_ABORT
                                                           : CKS_MDQ_DELETE,
                         conn, v->wait_req_id);
    cks_tp_conn_put(conn);
}

void cks_sv_version_defer(cks_server_h s, cks_sv_version_t *v, cks_sv_wait_t wait,
                                 cks_tp_conn_h conn, uint64_t req_id)
{
    v->open        = 0;
    v->wait        = wait;
    v->wait_conn   = conn;
    v->wait_req_id = req_id;
    cks_tp_conn_get(conn);
    cks_sv_version_kick(s, v);
}
