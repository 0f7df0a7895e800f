/*
 * DESIGN: the server's progress thread. Owns the UCX worker and listener,
 * the arena allocator, and the table of versions with operations in flight.
 * Handles every request: validates it (names, states, sizes, duplicates),
 * reserves arena space and receives payloads zero-copy into it, answers
 * STORED as soon as the bytes are in the arena, and hands CRCs and LMDB
 * writes to the metadata writer thread (mdq.c). Reads (stat, list, get) use
 * short LMDB read transactions here; payloads of gets go zero-copy from the
 * arena.
 *
 * Sleeps on the worker's event fd (and a signalfd) when idle: no polling.
 * Never: run a write transaction, compute a CRC, or block on anything but
 * the event fds.
 */
#include "cks_coding.h"
#include "server_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>


uint64_t cks_sv_realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}


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

static void cks_sv_version_free(cks_server_h s, cks_sv_version_t *v)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9];
    cks_hmap_del(s->versions, key, cks_vkey(key, v->job, v->job_len, v->version));
    cks_hmap_destroy(v->keys);
    cks_hmap_destroy(v->deleted);
    cks_hmap_destroy(v->reported);
    free(v->objs);
    free(v->ranks_done);
    free(v->waiters);
    free(v->stored_on);
    free(v->reported_by);
    free(v);
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

static int cks_sv_restorable(cks_vstate_t st)
{
    return st == CKS_VSTATE_SEALED || st == CKS_VSTATE_PROTECTED ||
           st == CKS_VSTATE_DEGRADED;
}

cks_status_t cks_sv_check_names(const cks_wire_str_t *job, const cks_wire_str_t *key)
{
    cks_status_t status = cks_name_check(job->ptr, job->len, CKS_JOB_MAX_LEN);
    if (status == CKS_OK && key != NULL) {
        status = cks_name_check(key->ptr, key->len, CKS_KEY_MAX_LEN);
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

static void cks_sv_queue(cks_server_h s, cks_sv_version_t *v, cks_mdq_type_t type,
                         cks_tp_conn_h conn, uint64_t req_id)
{
    cks_mdq_job_t *j = cks_sv_mdq_job(s, type, v->job, v->job_len, v->version);
    if (j == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    j->v      = v;
    j->rec    = v->rec;
    j->conn   = conn;
    j->req_id = req_id;
    cks_tp_conn_get(conn);
    if (type == CKS_MDQ_SEAL) {
        j->rec.state     = CKS_VSTATE_SEALED;
        j->rec.sealed_ns = cks_sv_realtime_ns();
        j->rec.nobjects  = v->nobjects;
        j->rec.bytes     = v->bytes;
    } else if (type == CKS_MDQ_ABORT) {
        j->rec.state    = CKS_VSTATE_ABORTED;
        j->rec.nobjects = 0;
        j->rec.bytes    = 0;
    }
    v->pending++; /* the job itself keeps the entry alive */
    cks_mdq_push(&s->mdq, j);
}

/* Run the waiting request of v when its puts (and, to delete, gets) drained. */
static void cks_sv_version_kick(cks_server_h s, cks_sv_version_t *v)
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
        cks_sv_queue(s, v, CKS_MDQ_ABORT, conn, 0); /* no second reply */
        cks_tp_conn_put(conn);
        return;
    }
    cks_sv_queue(s, v, wait == CKS_SV_WAIT_SEAL    ? CKS_MDQ_SEAL
                       : wait == CKS_SV_WAIT_ABORT ? CKS_MDQ_ABORT
                                                   : CKS_MDQ_DELETE,
                 conn, v->wait_req_id);
    cks_tp_conn_put(conn);
}

static void cks_sv_version_defer(cks_server_h s, cks_sv_version_t *v, cks_sv_wait_t wait,
                                 cks_tp_conn_h conn, uint64_t req_id)
{
    v->open        = 0;
    v->wait        = wait;
    v->wait_conn   = conn;
    v->wait_req_id = req_id;
    cks_tp_conn_get(conn);
    cks_sv_version_kick(s, v);
}

/* ---- metadata writer completions ------------------------------------------- */

static void cks_sv_mdq_done(cks_server_h s, cks_mdq_job_t *j)
{
    cks_sv_version_t *v = j->v;
    cks_msg_seal_reply_t seal;

    if (j->done != NULL) { /* cluster work: its owner finishes it */
        j->done(s, j);
        return;
    }
    v->pending--;
    switch (j->type) {
        case CKS_MDQ_BEGIN:
            if (j->status == CKS_OK) {
                v->begun = 1;
                cks_sv_reply_status(j->conn, j->req_id, CKS_OK, NULL);
            } else {
                v->open = 0;
                cks_sv_reply_status(j->conn, j->req_id, j->status,
                                    "cannot record version %llu of '%s'",
                                    (unsigned long long)v->version, v->job);
            }
            break;
        case CKS_MDQ_PUT:
            if (j->status == CKS_OK) {
                v->nobjects++;
                v->bytes += j->obj.size;
            } else {
                cks_error("object '%s' of version %llu of '%s' not recorded: %s",
                          j->obj.key, (unsigned long long)v->version, v->job,
                          cks_status_string(j->status));
                if (v->failed == CKS_OK) {
                    v->failed = j->status;
                }
                cks_arena_free(s->arena, j->obj.arena_offset, j->obj.arena_len);
            }
            break;
        case CKS_MDQ_SEAL:
            seal.status = j->status;
            seal.msg    = cks_wire_cstr(j->status == CKS_OK ? "" : "seal not recorded");
            if (j->status == CKS_OK) {
                v->rec = j->rec;
                cks_info("sealed version %llu of '%s': %llu objects, %llu bytes",
                         (unsigned long long)v->version, v->job,
                         (unsigned long long)v->nobjects, (unsigned long long)v->bytes);
            }
            seal.nobjects = v->nobjects;
            seal.bytes    = v->bytes;
            cks_sv_reply(j->conn, CKS_MSG_SEAL_REPLY, j->req_id, &seal);
            break;
        case CKS_MDQ_ABORT:
        case CKS_MDQ_DELETE:
            for (size_t i = 0; i < j->nfreed; i++) {
                cks_arena_free(s->arena, j->freed[i].off, j->freed[i].len);
            }
            if (j->conn != NULL && j->req_id != 0) {
                cks_sv_reply_status(j->conn, j->req_id, j->status, NULL);
            }
            if (j->status == CKS_OK) {
                v->nobjects = v->bytes = 0;
            }
            free(j->freed);
            break;
        case CKS_MDQ_CHUNKS:
        case CKS_MDQ_MANIFEST:
        case CKS_MDQ_DROP:
            break; /* cluster jobs finish through j->done */
    }
    if (j->conn != NULL) {
        cks_tp_conn_put(j->conn);
    }
    cks_sv_version_kick(s, v);
    cks_sv_version_release(s, v);
    free(j);
}

/* Finish what the metadata writer finished; returns how many jobs. */
static size_t cks_sv_drain_done(cks_server_h s)
{
    size_t n         = 0;
    cks_mdq_job_t *j = cks_mdq_take_done(&s->mdq);
    while (j != NULL) {
        cks_mdq_job_t *next = j->next;
        cks_sv_mdq_done(s, j);
        j = next;
        n++;
    }
    return n;
}

/* ---- request handlers ---------------------------------------------------------- */

/* Refuse a connection that failed authentication: log, answer, serve
 * nothing more from it, and close it a second later (at once, the peer
 * could see the connection go before the answer). */
static void cks_sv_auth_refuse(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                               const char *why)
{
    cks_warn("authentication failed for %s: %s; closing the connection",
             cks_tp_conn_peer(conn), why);
    cks_sv_reply_status(conn, req_id, CKS_ERR_AUTH, "%s", why);
    cks_tp_conn_close_later(conn, 1000);
}

static void cks_sv_auth(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_auth_t *m)
{
    cks_tp_auth_t *a = cks_tp_conn_auth(conn);
    uint8_t proof[CKS_WIRE_NONCE_LEN];
    cks_msg_auth_reply_t r;
    cks_tp_secret_t job_secret;
    const cks_tp_secret_t *key = &s->secret;
    char path[PATH_MAX];
    int peer = 0;
    const void *addr;
    size_t addr_len;

    if (!s->has_secret) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_UNSUPPORTED, "no secret configured");
        return;
    }

    if (a->authed || !a->challenged) {
        cks_sv_auth_refuse(s, conn, req_id, "AUTH without a challenge (HELLO first)");
        return;
    }
    a->challenged = 0; /* one answer per challenge */
    if (a->job[0] == '\0' && s->has_peer_secret &&
        cks_tp_proof_check(&s->peer_secret, CKS_TP_LABEL_PEER_CLIENT, a->server_nonce,
                           CKS_WIRE_NONCE_LEN, a->client_nonce, CKS_WIRE_NONCE_LEN,
                           &m->proof) == CKS_OK) {
        peer = 1; /* a server of the cluster */
        key  = &s->peer_secret;
    } else if (a->job[0] != '\0') { /* the job's own secret, from --job-secrets */
        snprintf(path, sizeof(path), "%s/%s", s->p.job_secrets, a->job);
        if (cks_tp_secret_load(path, &job_secret) != CKS_OK) {
            cks_sv_auth_refuse(s, conn, req_id, "no secret for this job on this server");
            return;
        }
        key = &job_secret;
    }
    if (!peer && cks_tp_proof_check(key, CKS_TP_LABEL_CLIENT, a->server_nonce,
                                    CKS_WIRE_NONCE_LEN, a->client_nonce, CKS_WIRE_NONCE_LEN,
                                    &m->proof) != CKS_OK) {
        cks_sv_auth_refuse(s, conn, req_id,
                           a->job[0]            ? "wrong secret for the job"
                           : s->has_peer_secret ? "wrong cluster secret (nor the peer secret)"
                                                : "wrong cluster secret");
        return;
    }
    if (cks_tp_proof(key, peer ? CKS_TP_LABEL_PEER_SERVER : CKS_TP_LABEL_SERVER,
                     a->client_nonce, CKS_WIRE_NONCE_LEN, a->server_nonce, CKS_WIRE_NONCE_LEN,
                     proof) != CKS_OK) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INTERNAL, "cannot prove the secret");
        return;
    }
    if (cks_tp_conn_authenticated(conn, peer) != CKS_OK) {
        /* the clients' slots are taken; those kept for the peers stay free */
        cks_warn("%s refused: %u client connections open (the limit)", cks_tp_conn_peer(conn),
                 s->p.max_conns ? s->p.max_conns : 1024);
        cks_sv_reply_status(conn, req_id, CKS_ERR_BUSY, "too many client connections");
        cks_tp_conn_close_later(conn, 1000);
        return;
    }
    a->scoped = a->job[0] != '\0';
    if (a->scoped) {
        cks_info("%s authenticated for job '%s' only", cks_tp_conn_peer(conn), a->job);
    } else {
        cks_info("%s authenticated%s", cks_tp_conn_peer(conn),
                 peer ? " as a server of the cluster" : "");
    }
    cks_tp_worker_address(s->tp, &addr, &addr_len);
    r.status = CKS_OK;
    r.msg    = cks_wire_cstr(NULL);
    r.addr   = (cks_wire_str_t){addr, (uint32_t)addr_len};
    r.proof  = (cks_wire_str_t){(const char *)proof, CKS_WIRE_NONCE_LEN};
    cks_sv_reply(conn, CKS_MSG_AUTH_REPLY, req_id, &r);
    if (m->addr.len > 0 && cks_tp_conn_upgrade(conn, m->addr.ptr, m->addr.len) != CKS_OK) {
        cks_warn("cannot connect back to %s by worker address", cks_tp_conn_peer(conn));
    }
}

static void cks_sv_hello(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                         const cks_msg_hello_t *m)
{
    cks_msg_hello_reply_t r = {0};
    cks_tp_auth_t *a = cks_tp_conn_auth(conn);
    const void *addr;
    size_t addr_len;

    cks_tp_worker_address(s->tp, &addr, &addr_len);
    if (s->has_secret && !a->authed) {
        /* challenge: our nonce now; our proof and address after AUTH, and
         * nothing about the arena before it */
        if (m->nonce.len != CKS_WIRE_NONCE_LEN) {
            cks_sv_auth_refuse(s, conn, req_id, "this server requires a cluster secret");
            return;
        }
        if (m->job.len > 0) { /* a job's secret: only a safe file name */
            int bad = s->p.job_secrets == NULL || m->job.len > CKS_JOB_MAX_LEN ||
                      m->job.ptr[0] == '.';
            for (uint32_t i = 0; i < m->job.len && !bad; i++) {
                bad = m->job.ptr[i] == '/' || m->job.ptr[i] == '\0';
            }
            if (bad) {
                cks_sv_auth_refuse(s, conn, req_id,
                                   s->p.job_secrets == NULL ? "this server has no job secrets"
                                                            : "bad job name");
                return;
            }
        }
        memcpy(a->job, m->job.ptr, m->job.len);
        a->job[m->job.len] = '\0';
        memcpy(a->client_nonce, m->nonce.ptr, CKS_WIRE_NONCE_LEN);
        if (cks_tp_nonce(a->server_nonce) != CKS_OK) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_INTERNAL, "cannot make a challenge");
            return;
        }
        a->challenged = 1;
        r.status      = CKS_OK;
        r.msg         = cks_wire_cstr(NULL);
        r.name        = cks_wire_cstr(s->name);
        r.addr        = cks_wire_cstr(NULL);
        r.nonce       = (cks_wire_str_t){(const char *)a->server_nonce, CKS_WIRE_NONCE_LEN};
        cks_sv_reply(conn, CKS_MSG_HELLO_REPLY, req_id, &r);
        return;
    }
    r.status     = CKS_OK;
    r.msg        = cks_wire_cstr(NULL);
    r.name       = cks_wire_cstr(s->name);
    r.addr       = (cks_wire_str_t){addr, (uint32_t)addr_len};
    r.arena_size = cks_arena_size(s->arena);
    r.arena_used = cks_arena_used(s->arena);
    if (s->enc.threads != NULL) {
        pthread_mutex_lock(&s->enc.lock);
        r.enc_bytes  = s->enc.st_bytes;
        r.enc_ns     = s->enc.st_encode_ns;
        r.enc_job_ns = s->enc.st_job_ns;
        pthread_mutex_unlock(&s->enc.lock);
    }
    cks_debug("hello from %.*s at %s", (int)m->name.len, m->name.ptr,
              cks_tp_conn_peer(conn));
    /* the reply goes on the listener's endpoint; then the connection moves
     * to an endpoint made from the client's worker address (all transports) */
    cks_sv_reply(conn, CKS_MSG_HELLO_REPLY, req_id, &r);
    if (m->addr.len > 0 && !s->has_secret) {
        cks_status_t status = cks_tp_conn_upgrade(conn, m->addr.ptr, m->addr.len);
        if (status != CKS_OK) {
            cks_warn("cannot connect back to %s by worker address: %s",
                     cks_tp_conn_peer(conn), cks_status_string(status));
        }
    }
}

static void cks_sv_version_open(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                                const cks_msg_version_begin_t *m, cks_status_t status,
                                const char *why);

static void cks_sv_version_begin(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                                 const cks_msg_version_begin_t *m)
{
    cks_status_t status;

    status = cks_sv_check_names(&m->job, NULL);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "bad job name");
        return;
    }
    if (m->version == CKS_MD_NO_PARENT || m->nranks == 0) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                            "version must be < 2^64-1 and nranks >= 1");
        return;
    }
    if (s->map == NULL && (m->k != 0 || m->m != 0 || m->nranks != 1 ||
                           m->parent != CKS_MD_NO_PARENT)) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_UNSUPPORTED,
                            "this server is standalone: one rank, no parent version, no "
                            "erasure coding (use a cluster)");
        return;
    }
    if (m->nranks > 65536) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM, "at most 65536 ranks");
        return;
    }
    cks_md_version_t prec;
    if (m->parent != CKS_MD_NO_PARENT) {
        cks_wire_str_t job = m->job;
        status = cks_sv_version_lookup(s, &job, m->parent, &prec);
        if (status == CKS_OK && prec.state != CKS_VSTATE_PROTECTED &&
            prec.state != CKS_VSTATE_SEALED && prec.state != CKS_VSTATE_DEGRADED) {
            status = CKS_ERR_NOT_RESTORABLE;
        }
        if (status != CKS_OK) {
            cks_sv_reply_status(conn, req_id, status, "parent version %llu: %s",
                                (unsigned long long)m->parent, cks_status_string(status));
            return;
        }
    }
    if (s->map != NULL) {
        char err[160];
        if (m->k < 1 || m->k > CKS_EC_MAX_K || m->m < 1 || m->m > CKS_EC_MAX_M ||
            m->chunk_size == 0 || m->chunk_size % 4096 != 0 || m->chunk_size > (64u << 20) ||
            cks_cluster_check(s->map, m->k, m->m, err, sizeof(err)) != CKS_OK) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                                "bad geometry RS(%u,%u) with %llu-byte chunks", m->k, m->m,
                                (unsigned long long)m->chunk_size);
            return;
        }
        /* a child inherits its parent's objects, and readers read every
         * object of a version with the version's geometry */
        if (m->parent != CKS_MD_NO_PARENT &&
            (m->k != prec.ec_k || m->m != prec.ec_m || m->chunk_size != prec.chunk_size)) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                                "geometry RS(%u,%u) with %llu-byte chunks differs from parent "
                                "version %llu's RS(%u,%u) with %llu-byte chunks",
                                m->k, m->m, (unsigned long long)m->chunk_size,
                                (unsigned long long)m->parent, prec.ec_k, prec.ec_m,
                                (unsigned long long)prec.chunk_size);
            return;
        }
    }
    if (s->map != NULL) {
        /* a majority of the servers must grant this server the version
         * first (coord.c): then no other candidate can coordinate it */
        cks_sv_claim_begin(s, conn, req_id, m, cks_sv_version_open);
        return;
    }
    cks_sv_version_open(s, conn, req_id, m, CKS_OK, NULL);
}

/* Begin a version whose parameters were checked (and, in a cluster, whose
 * claim a majority granted): record it OPEN. */
static void cks_sv_version_open(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                                const cks_msg_version_begin_t *m, cks_status_t status,
                                const char *why)
{
    cks_md_version_t rec;
    cks_sv_version_t *v;

    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "%s", why != NULL ? why : "");
        return;
    }
    if (cks_sv_version_find(s, &m->job, m->version) != NULL ||
        (status = cks_sv_version_lookup(s, &m->job, m->version, &rec)) == CKS_OK) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_VERSION_EXISTS,
                            "version %llu of '%.*s' already exists",
                            (unsigned long long)m->version, (int)m->job.len, m->job.ptr);
        return;
    }
    if (status != CKS_ERR_NO_SUCH_VERSION && status != CKS_ERR_NO_SUCH_JOB) {
        cks_sv_reply_status(conn, req_id, status, "metadata lookup failed");
        return;
    }
    v = cks_sv_version_new(s, &m->job, m->version);
    if (v == NULL || cks_hmap_create(&v->keys) != CKS_OK) {
        if (v != NULL) {
            cks_sv_version_free(s, v);
        }
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    memset(&v->rec, 0, sizeof(v->rec));
    v->rec.version    = m->version;
    v->rec.parent     = m->parent;
    v->rec.state      = CKS_VSTATE_OPEN;
    v->rec.nranks     = m->nranks;
    v->rec.created_ns = cks_sv_realtime_ns();
    v->rec.ec_k       = m->k;
    v->rec.ec_m       = m->m;
    v->rec.chunk_size = m->chunk_size;
    v->rec.redundancy = m->m; /* less if objects are stored DEGRADED */
    v->open           = 1;
    v->pending        = 0;
    if (s->map != NULL) { /* this server coordinates the version */
        cks_sv_owed_forget(s, v->job, v->job_len, v->version);
        v->cluster          = 1;
        v->claimed          = 1; /* a majority granted ballot (0, this server) */
        v->gone_holder      = -1;
        v->round            = 0;
        v->expected         = UINT64_MAX;
        v->digest           = 0;
        v->expected_digest  = 0;
        v->capobjs          = 64;
        v->retain           = m->retain;
        v->open_deadline_ns = cks_time_ns() + (uint64_t)(m->timeout_s ? m->timeout_s : 600) *
                                                  1000000000ull;
        v->objs             = malloc(v->capobjs * sizeof(*v->objs));
        v->ranks_done       = calloc((m->nranks + 7) / 8, 1);
        if (v->objs == NULL || v->ranks_done == NULL) {
            cks_sv_version_free(s, v);
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
            return;
        }
    }
    cks_mdq_job_t *j  = cks_sv_mdq_job(s, CKS_MDQ_BEGIN, v->job, v->job_len, v->version);
    if (j == NULL) {
        cks_sv_version_free(s, v);
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    j->v      = v;
    j->rec    = v->rec;
    j->conn   = conn;
    j->req_id = req_id;
    cks_tp_conn_get(conn);
    v->pending++;
    cks_mdq_push(&s->mdq, j);
}

/* A put whose payload is in the arena: answer STORED, queue the record. */
static void cks_sv_put_stored(cks_server_h s, cks_mdq_job_t *j)
{
    cks_sv_reply_status(j->conn, j->req_id, CKS_OK, NULL);
    cks_tp_conn_put(j->conn);
    j->conn = NULL;
    cks_mdq_push(&s->mdq, j);
}

static void cks_sv_put_failed(cks_server_h s, cks_mdq_job_t *j, cks_status_t status)
{
    cks_sv_version_t *v = j->v;
    cks_sv_reply_status(j->conn, j->req_id, status, "payload of '%s' not received",
                        j->obj.key);
    cks_arena_free(s->arena, j->obj.arena_offset, j->obj.arena_len);
    cks_hmap_del(v->keys, j->obj.key, j->obj.key_len);
    cks_tp_conn_put(j->conn);
    free(j);
    v->pending--;
    cks_sv_version_kick(s, v);
    cks_sv_version_release(s, v);
}

static void cks_sv_put_recv_done(void *arg, cks_status_t status)
{
    cks_mdq_job_t *j = arg;
    if (status == CKS_OK && cks_fault_fire("chunk_recv")) {
        status = CKS_ERR_TRANSPORT;
    }
    if (status == CKS_OK) {
        cks_sv_put_stored(j->server, j);
    } else {
        cks_sv_put_failed(j->server, j, status);
    }
}

static void cks_sv_put(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                       const cks_msg_put_t *m, cks_tp_data_t *data)
{
    cks_md_version_t rec;
    cks_sv_version_t *v;
    cks_mdq_job_t *j;
    cks_status_t status;
    uint64_t off = 0, len;

    status = cks_sv_check_names(&m->job, &m->key);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "bad job name or key (%u, %u bytes)",
                            m->job.len, m->key.len);
        return;
    }
    if ((data == NULL ? 0 : data->length) != m->size) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_BAD_MESSAGE,
                            "put announces %llu bytes but carries %zu",
                            (unsigned long long)m->size, data ? data->length : (size_t)0);
        return;
    }
    if (m->kind > CKS_KIND_OTHER) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM, "unknown object kind %u",
                            m->kind);
        return;
    }
    v = cks_sv_version_find(s, &m->job, m->version);
    if (v == NULL || !v->open) {
        status = cks_sv_version_lookup(s, &m->job, m->version, &rec);
        if (status == CKS_OK || v != NULL) {
            status = CKS_ERR_VERSION_NOT_OPEN;
        }
        cks_sv_reply_status(conn, req_id, status, "cannot put into version %llu of '%.*s'",
                            (unsigned long long)m->version, (int)m->job.len, m->job.ptr);
        return;
    }
    if (cks_hmap_get(v->keys, m->key.ptr, m->key.len) != NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_DUPLICATE_KEY,
                            "key '%.*s' already written in version %llu", (int)m->key.len,
                            m->key.ptr, (unsigned long long)m->version);
        return;
    }
    len    = cks_arena_extent_len(m->size);
    status = cks_arena_alloc(s->arena, len, &off);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status,
                            "arena full: %llu bytes wanted, %llu of %llu used",
                            (unsigned long long)len,
                            (unsigned long long)cks_arena_used(s->arena),
                            (unsigned long long)cks_arena_size(s->arena));
        return;
    }
    j = cks_sv_mdq_job(s, CKS_MDQ_PUT, v->job, v->job_len, v->version);
    if (j == NULL || cks_hmap_put(v->keys, m->key.ptr, m->key.len, v) != CKS_OK) {
        free(j);
        cks_arena_free(s->arena, off, len);
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    j->v    = v;
    memcpy(j->obj.key, m->key.ptr, m->key.len);
    j->obj.key[m->key.len] = '\0';
    j->obj.key_len         = m->key.len;
    j->obj.kind            = (cks_kind_t)m->kind;
    j->obj.layer           = m->layer;
    j->obj.expert          = m->expert;
    j->obj.rank            = m->rank;
    j->obj.size            = m->size;
    j->obj.arena_offset    = off;
    j->obj.arena_len       = len;
    j->obj.source_version  = m->version;
    j->data                = cks_arena_base(s->arena) + off;
    j->conn                = conn;
    j->req_id              = req_id;
    cks_tp_conn_get(conn);
    v->pending++;

    if (data == NULL) {
        cks_sv_put_stored(s, j);
    } else if (!data->is_rndv && !data->is_rma) {
        memcpy(cks_arena_base(s->arena) + off, data->ptr, data->length);
        cks_sv_put_stored(s, j);
    } else {
        status = cks_tp_data_recv(s->tp, data, cks_arena_base(s->arena) + off,
                                  CKS_MEM_HOST, s->arena_mem, cks_sv_put_recv_done, j);
        if (status != CKS_INPROGRESS) {
            cks_sv_put_failed(s, j, status);
        }
    }
}

static void cks_sv_version_end(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                               unsigned type, const cks_msg_version_ref_t *m)
{
    cks_md_version_t rec;
    cks_sv_version_t *v;
    cks_status_t status;

    status = cks_sv_check_names(&m->job, NULL);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "bad job name");
        return;
    }
    v = cks_sv_version_find(s, &m->job, m->version);
    if (v != NULL && v->wait != CKS_SV_WAIT_NONE) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_BUSY,
                            "version %llu is being sealed, aborted or deleted",
                            (unsigned long long)m->version);
        return;
    }
    if (type != CKS_MSG_VERSION_DELETE) {
        /* seal and abort: only an open version */
        if (v == NULL || !v->open) {
            status = cks_sv_version_lookup(s, &m->job, m->version, &rec);
            if (status == CKS_OK || v != NULL) {
                status = CKS_ERR_VERSION_NOT_OPEN;
            }
            cks_sv_reply_status(conn, req_id, status, "version %llu of '%.*s' is not open",
                                (unsigned long long)m->version, (int)m->job.len,
                                m->job.ptr);
            return;
        }
        cks_sv_version_defer(s, v,
                             type == CKS_MSG_VERSION_SEAL ? CKS_SV_WAIT_SEAL
                                                          : CKS_SV_WAIT_ABORT,
                             conn, req_id);
        return;
    }
    if (v == NULL) {
        status = cks_sv_version_lookup(s, &m->job, m->version, &rec);
        if (status != CKS_OK) {
            cks_sv_reply_status(conn, req_id, status, "no version %llu of '%.*s'",
                                (unsigned long long)m->version, (int)m->job.len,
                                m->job.ptr);
            return;
        }
        v = cks_sv_version_new(s, &m->job, m->version);
        if (v == NULL) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
            return;
        }
        v->rec = rec;
    }
    cks_sv_version_defer(s, v, CKS_SV_WAIT_DELETE, conn, req_id);
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

typedef struct {
    cks_server_h server;
    cks_sv_version_t *v;
} cks_sv_get_ctx_t;

static void cks_sv_get_done(void *arg, cks_status_t status)
{
    cks_sv_get_ctx_t *c = arg;
    c->v->readers--;
    cks_sv_version_kick(c->server, c->v);
    cks_sv_version_release(c->server, c->v);
    free(c);
}

static int cks_sv_is_bad(cks_server_h s, const cks_wire_str_t *job, uint64_t version,
                         const cks_wire_str_t *key)
{
    uint8_t k[CKS_JOB_MAX_LEN + 9 + CKS_KEY_MAX_LEN];
    size_t n;
    if (cks_hmap_count(s->bad) == 0) {
        return 0;
    }
    n = cks_vkey(k, job->ptr, job->len, version);
    memcpy(k + n, key->ptr, key->len);
    return cks_hmap_get(s->bad, k, n + key->len) != NULL;
}

/* `dest`: where the client wants the bytes written (its memory), or NULL;
 * `checked`: the reader checks the whole object's CRC over its ranges
 * (CKS_WIRE_F_CHECKED), so a range is sent without a pass over the object */
static void cks_sv_get(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                       const cks_msg_get_t *m, const cks_tp_data_t *dest, int checked)
{
    cks_msg_get_reply_t r = {0};
    cks_md_version_t rec;
    cks_md_object_t obj;
    cks_md_txn_h txn;
    cks_sv_get_ctx_t *c;
    cks_sv_version_t *v;
    cks_status_t status;

    status = cks_sv_check_names(&m->job, &m->key);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "bad job name or key");
        return;
    }
    v = cks_sv_version_find(s, &m->job, m->version);
    if (v != NULL && v->wait == CKS_SV_WAIT_DELETE) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_SUCH_VERSION, "version being deleted");
        return;
    }
    status = cks_md_txn_begin(s->md, 0, &txn);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "metadata unavailable");
        return;
    }
    status = cks_sv_readable(txn, &m->job, m->version, &rec);
    if (status == CKS_OK) {
        status = cks_md_object_get(txn, m->job.ptr, m->job.len, m->version, m->key.ptr,
                                   m->key.len, &obj);
    }
    cks_md_txn_abort(txn);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "cannot read '%.*s' of version %llu of '%.*s'",
                            (int)m->key.len, m->key.ptr, (unsigned long long)m->version,
                            (int)m->job.len, m->job.ptr);
        return;
    }
    uint64_t length = m->length == UINT64_MAX && m->offset <= obj.size
                          ? obj.size - m->offset /* the whole object, or its tail */
                          : m->length;
    if (m->offset > obj.size || length > obj.size - m->offset) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_OUT_OF_RANGE,
                            "range %llu+%llu past the end of '%s' (%llu bytes)",
                            (unsigned long long)m->offset, (unsigned long long)m->length,
                            obj.key, (unsigned long long)obj.size);
        return;
    }
    if (cks_sv_is_bad(s, &m->job, m->version, &m->key)) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_DATA_LOST,
                            "'%s' failed its CRC check at server start", obj.key);
        return;
    }
    /* the object's CRC covers it whole: a part of it cannot be checked by
     * the reader, so it is checked here (one pass over the object), unless
     * the reader reads every part and checks them together; the whole
     * object is checked by the reader as it arrives, or by the transport as
     * it writes it into the reader's memory */
    const uint8_t *bytes = cks_arena_base(s->arena) + obj.arena_offset;
    int whole            = m->offset == 0 && length == obj.size;
    if (!whole && !checked && cks_crc64(0, bytes, obj.size) != obj.crc64) {
        cks_error("object '%s' of version %llu of '%.*s' fails its CRC", obj.key,
                  (unsigned long long)m->version, (int)m->job.len, m->job.ptr);
        cks_sv_reply_status(conn, req_id, CKS_ERR_CRC_MISMATCH, "'%s' fails its CRC",
                            obj.key);
        return;
    }
    cks_tp_check_t check = {cks_crc64, obj.crc64, cks_crc64_combine};
    if (v == NULL && (v = cks_sv_version_new(s, &m->job, m->version)) == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    c = malloc(sizeof(*c));
    if (c == NULL) {
        cks_sv_version_release(s, v);
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    c->server = s;
    c->v      = v;
    v->readers++;
    r.status = CKS_OK;
    r.msg    = cks_wire_cstr(NULL);
    r.size   = obj.size;
    r.crc64  = obj.crc64;
    r.offset = m->offset;
    r.length = length;
    status   = cks_tp_send_into(conn, CKS_MSG_GET_REPLY, req_id, &r, bytes + m->offset, length,
                                s->arena_mem, dest, whole ? &check : NULL, cks_sv_get_done, c);
    if (status != CKS_INPROGRESS) {
        cks_sv_get_done(c, status);
        cks_sv_reply_status(conn, req_id, status, "cannot send %llu bytes of '%s'%s",
                            (unsigned long long)length, obj.key,
                            dest == NULL ? ""
                            : status == CKS_ERR_INVALID_PARAM
                                ? ": the client's buffer is too small"
                                : " into the client's memory");
    }
}

/* ---- MEM_MAP: a client's region, mapped and faulted in ahead of its transfers ---- */

typedef struct {
    cks_tp_conn_h conn; /* one reference */
    uint64_t req_id;
} cks_sv_mem_map_t;

static void cks_sv_mem_map_done(void *arg, cks_status_t status)
{
    cks_sv_mem_map_t *mm = arg;
    if (status == CKS_ERR_UNSUPPORTED) {
        cks_sv_reply_status(mm->conn, mm->req_id, status,
                            "the region cannot be mapped here (another host, or other "
                            "UCX transports)");
    } else {
        cks_sv_reply_status(mm->conn, mm->req_id, status,
                            status == CKS_OK ? NULL : "could not map the region: %s",
                            cks_status_string(status));
    }
    cks_tp_conn_put(mm->conn);
    free(mm);
}

static void cks_sv_mem_map(cks_tp_conn_h conn, uint64_t req_id, const cks_msg_mem_map_t *m,
                           cks_tp_data_t *data)
{
    cks_sv_mem_map_t *mm;
    cks_status_t status;

    if (data == NULL || !data->is_rma || data->length != m->length) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_BAD_MESSAGE,
                            "MEM_MAP names a whole region with an RMA descriptor");
        return;
    }
    mm = malloc(sizeof(*mm));
    if (mm == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, NULL);
        return;
    }
    mm->conn   = conn;
    mm->req_id = req_id;
    cks_tp_conn_get(conn);
    /* the transport's helper thread faults it in; the answer waits for it */
    status = cks_tp_rma_prefault(conn, data, cks_sv_mem_map_done, mm);
    if (status != CKS_INPROGRESS) {
        cks_sv_mem_map_done(mm, status);
    }
}

/* ---- transport callbacks -------------------------------------------------------- */

static void cks_sv_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                          const cks_msg_any_t *b, cks_tp_data_t *data)
{
    cks_server_h s = arg;

    if (CKS_MSG_IS_REPLY(hdr->type)) {
        /* a reply that answered none of this server's calls (the transport
         * matched it to none): never answered, since an answer carries the
         * same request id back to the sender, where it would end a call of
         * its own with this error */
        cks_info("%s from %s (req %llu) answers no call of this server: dropped",
                 cks_msg_name(hdr->type), cks_tp_conn_peer(conn),
                 (unsigned long long)hdr->req_id);
        return;
    }
    if (s->stop) {
        cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_SHUTTING_DOWN, NULL);
        return;
    }
    if (data != NULL && hdr->type != CKS_MSG_PUT && hdr->type != CKS_MSG_CHUNK_PUT &&
        hdr->type != CKS_MSG_VERSION_COMMIT && !data->is_rma) {
        cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_BAD_MESSAGE,
                            "%s carries no payload", cks_msg_name(hdr->type));
        return;
    }
    cks_trace("%s from %s (req %llu)", cks_msg_name(hdr->type), cks_tp_conn_peer(conn),
              (unsigned long long)hdr->req_id);
    if (s->has_secret && !cks_tp_conn_auth(conn)->authed && hdr->type != CKS_MSG_HELLO &&
        hdr->type != CKS_MSG_AUTH) {
        /* nothing is read or written before authentication: a payload is dropped */
        cks_sv_auth_refuse(s, conn, hdr->req_id, "authenticate first");
        return;
    }
    if (s->has_peer_secret && cks_msg_server_only(hdr->type) && !cks_tp_conn_auth(conn)->peer) {
        /* only a server that proved the peer secret: a client of the cluster
         * secret could otherwise store chunks, commit or drop versions */
        cks_warn("%s refused %s: only servers of the cluster send it", cks_tp_conn_peer(conn),
                 cks_msg_name(hdr->type));
        cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_AUTH,
                            "%s: only servers of the cluster may send it",
                            cks_msg_name(hdr->type));
        return;
    }
    if (cks_tp_conn_auth(conn)->scoped && hdr->type != CKS_MSG_HELLO &&
        hdr->type != CKS_MSG_MEM_MAP) {
        /* a job's secret opens that job and nothing else (MEM_MAP names
         * only the client's own memory) */
        const cks_tp_auth_t *a   = cks_tp_conn_auth(conn);
        const cks_wire_str_t *job = cks_msg_client_job(hdr->type, b);
        if (job == NULL || job->len != strlen(a->job) ||
            memcmp(job->ptr, a->job, job->len) != 0) {
            cks_warn("%s (job '%s') refused %s for another job or for all jobs",
                     cks_tp_conn_peer(conn), a->job, cks_msg_name(hdr->type));
            cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_AUTH,
                                "this connection's secret is for job '%s' only", a->job);
            return;
        }
    }
    if (cks_rp_gate(s, conn, hdr->req_id, hdr->type, b)) {
        return; /* catching up: another server answers */
    }
    if ((hdr->type == CKS_MSG_PUT || hdr->type == CKS_MSG_GET || hdr->type == CKS_MSG_CHUNK_PUT ||
         hdr->type == CKS_MSG_CHUNK_GET) &&
        !(hdr->flags & CKS_WIRE_F_BACKGROUND)) {
        s->fg_ns = cks_time_ns(); /* clients' data: repair slows down (repair.c) */
    }
    switch (hdr->type) {
        case CKS_MSG_HELLO:
            cks_sv_hello(s, conn, hdr->req_id, &b->m_HELLO);
            break;
        case CKS_MSG_AUTH:
            cks_sv_auth(s, conn, hdr->req_id, &b->m_AUTH);
            break;
        case CKS_MSG_VERSION_BEGIN:
            cks_sv_version_begin(s, conn, hdr->req_id, &b->m_VERSION_BEGIN);
            break;
        case CKS_MSG_PUT:
            if (s->map != NULL) {
                cks_sv_cluster_put(s, conn, hdr->req_id, &b->m_PUT, data);
            } else {
                cks_sv_put(s, conn, hdr->req_id, &b->m_PUT, data);
            }
            break;
        case CKS_MSG_VERSION_SEAL: {
            cks_msg_version_ref_t ref = {b->m_VERSION_SEAL.job, b->m_VERSION_SEAL.version};
            if (s->map != NULL) {
                cks_sv_cluster_end(s, conn, hdr->req_id, hdr->type, hdr->flags, &ref.job,
                                   ref.version,
                                   b->m_VERSION_SEAL.nobjects, b->m_VERSION_SEAL.digest,
                                   b->m_VERSION_SEAL.rank, &b->m_VERSION_SEAL.primaries);
            } else {
                cks_sv_version_end(s, conn, hdr->req_id, hdr->type, &ref);
            }
            break;
        }
        case CKS_MSG_VERSION_ABORT:
        case CKS_MSG_VERSION_DELETE:
            if (s->map != NULL) {
                cks_sv_cluster_end(s, conn, hdr->req_id, hdr->type, 0, &b->m_VERSION_ABORT.job,
                                   b->m_VERSION_ABORT.version, 0, 0, 0, NULL);
            } else {
                cks_sv_version_end(s, conn, hdr->req_id, hdr->type, &b->m_VERSION_ABORT);
            }
            break;
        case CKS_MSG_GET:
            if (s->map != NULL) {
                cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_UNSUPPORTED,
                                    "a cluster server serves chunks (CHUNK_GET)");
            } else {
                cks_sv_get(s, conn, hdr->req_id, &b->m_GET, data,
                           !!(hdr->flags & CKS_WIRE_F_CHECKED));
            }
            break;
        case CKS_MSG_OBJECT_DELETE:
            if (s->map == NULL) {
                cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_UNSUPPORTED,
                                    "delete markers need a cluster (partial versions)");
            } else {
                cks_sv_object_delete(s, conn, hdr->req_id, &b->m_OBJECT_DELETE);
            }
            break;
        case CKS_MSG_CHUNK_PUT:
        case CKS_MSG_CHUNK_GET:
        case CKS_MSG_OBJECT_DONE:
        case CKS_MSG_VERSION_COMMIT:
        case CKS_MSG_VERSION_DROP:
        case CKS_MSG_VERSION_CLAIM:
            if (s->map == NULL) {
                cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_UNSUPPORTED,
                                    "%s: this server is not in a cluster",
                                    cks_msg_name(hdr->type));
            } else if (hdr->type == CKS_MSG_CHUNK_PUT) {
                cks_sv_chunk_put(s, conn, hdr->req_id, &b->m_CHUNK_PUT, data);
            } else if (hdr->type == CKS_MSG_CHUNK_GET) {
                cks_sv_chunk_get(s, conn, hdr->req_id, &b->m_CHUNK_GET, data);
            } else if (hdr->type == CKS_MSG_OBJECT_DONE) {
                cks_sv_object_done(s, conn, hdr->req_id, &b->m_OBJECT_DONE);
            } else if (hdr->type == CKS_MSG_VERSION_COMMIT) {
                cks_sv_version_commit(s, conn, hdr->req_id, &b->m_VERSION_COMMIT, data);
            } else if (hdr->type == CKS_MSG_VERSION_CLAIM) {
                cks_sv_version_claim(s, conn, hdr->req_id, &b->m_VERSION_CLAIM);
            } else {
                cks_sv_version_drop(s, conn, hdr->req_id, &b->m_VERSION_DROP);
            }
            break;
        case CKS_MSG_SYNC_LIST:
        case CKS_MSG_REPAIR_CHECK:
        case CKS_MSG_REPAIR_STATUS:
            if (s->map == NULL) {
                cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_UNSUPPORTED,
                                    "%s: this server is not in a cluster",
                                    cks_msg_name(hdr->type));
            } else if (hdr->type == CKS_MSG_SYNC_LIST) {
                cks_rp_sync_list(s, conn, hdr->req_id, &b->m_SYNC_LIST);
            } else if (hdr->type == CKS_MSG_REPAIR_CHECK) {
                cks_rp_repair_check(s, conn, hdr->req_id, &b->m_REPAIR_CHECK);
            } else {
                cks_rp_repair_status(s, conn, hdr->req_id);
            }
            break;
        case CKS_MSG_VERSION_STAT:
            cks_sv_version_stat(s, conn, hdr->req_id, &b->m_VERSION_STAT);
            break;
        case CKS_MSG_VERSION_HOLD:
            cks_sv_version_hold(s, conn, hdr->req_id, &b->m_VERSION_HOLD);
            break;
        case CKS_MSG_MEM_MAP:
            cks_sv_mem_map(conn, hdr->req_id, &b->m_MEM_MAP, data);
            break;
        case CKS_MSG_FLUSH_CHUNKS:
        case CKS_MSG_FLUSH_PUBLISH:
        case CKS_MSG_FLUSH_VERSION:
            cks_sv_flush_request(s, conn, hdr->req_id, hdr->type, &b->m_FLUSH_CHUNKS);
            break;
        case CKS_MSG_OBJECT_STAT:
            cks_sv_object_stat(s, conn, hdr->req_id, &b->m_OBJECT_STAT);
            break;
        case CKS_MSG_VERSION_LIST:
        case CKS_MSG_OBJECT_LIST:
        case CKS_MSG_JOB_LIST:
            cks_sv_list(s, conn, hdr->req_id, hdr->type, b);
            break;
        default:
            cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_UNSUPPORTED,
                                "%s is not a request", cks_msg_name(hdr->type));
            break;
    }
}

void cks_sv_redispatch(cks_server_h s, cks_tp_conn_h conn, unsigned type, uint64_t req_id,
                       const cks_msg_any_t *b)
{
    cks_wire_hdr_t hdr = {0};
    hdr.type           = (uint16_t)type;
    hdr.req_id         = req_id;
    cks_sv_on_msg(s, conn, &hdr, b, NULL);
}

static void cks_sv_on_bad_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                              cks_status_t status, const char *reason)
{
    /* answer when we know which request it was; the connection stays up */
    cks_sv_reply_status(conn, hdr != NULL ? hdr->req_id : 0, status, "%s", reason);
}

static void cks_sv_on_accept(void *arg, cks_tp_conn_h conn)
{
    cks_server_h s = arg;
    s->nconns++;
}

static void cks_sv_on_conn_err(void *arg, cks_tp_conn_h conn, cks_status_t status)
{
    cks_server_h s = arg;
    if (cks_sv_cluster_conn_err(s, conn)) {
        cks_info("peer %s gone: %s", cks_tp_conn_peer(conn), cks_status_string(status));
        return;
    }
    cks_debug("client %s gone: %s", cks_tp_conn_peer(conn), cks_status_string(status));
    s->nconns--;
    cks_tp_conn_put(conn); /* the reference the accept gave us */
}

/* ---- life cycle ----------------------------------------------------------------------- */

static void cks_sv_params_free(cks_server_h s)
{
    free(s->arena_file);
    free(s->data_dir);
    free(s->listen_addr);
    free(s->lost_jobs);
    free(s->lost_versions);
}

cks_status_t cks_server_create(const cks_server_params_t *params, cks_server_h *server_p)
{
    cks_tp_worker_params_t wp;
    cks_server_h s;
    cks_status_t status;

    if (params == NULL || params->arena_file == NULL || params->data_dir == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    s->p     = *params;
    s->sigfd = -1;
    if (params->handle_signals) {
        /* block before any thread (UCX's, the writer) exists, so that every
         * thread inherits the mask and the signals reach only the signalfd */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        s->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    }
    s->arena_file  = strdup(params->arena_file);
    s->data_dir    = strdup(params->data_dir);
    s->listen_addr = strdup(params->listen_addr ? params->listen_addr : "0.0.0.0");
    snprintf(s->name, sizeof(s->name), "%s", params->name ? params->name : "ckstore-server");
    if (s->arena_file == NULL || s->data_dir == NULL || s->listen_addr == NULL ||
        cks_hmap_create(&s->versions) != CKS_OK || cks_hmap_create(&s->bad) != CKS_OK) {
        status = CKS_ERR_NO_MEMORY;
        goto err_free;
    }
    if (params->secret_file != NULL) {
        status = cks_tp_secret_load(params->secret_file, &s->secret);
        if (status != CKS_OK) {
            goto err_free;
        }
        s->has_secret = 1;
    }
    if (params->peer_secret_file != NULL || (params->cluster_map != NULL && s->has_secret)) {
        /* clients hold the cluster secret: the role of a server needs one
         * they are not given */
        if (params->peer_secret_file == NULL || !s->has_secret) {
            cks_error(params->peer_secret_file == NULL
                          ? "a cluster server with --secret needs --peer-secret FILE too: "
                            "the servers' own secret, which clients are not given "
                            "(docs/SECURITY.md)"
                          : "--peer-secret needs --secret (the clients' secret)");
            status = CKS_ERR_INVALID_PARAM;
            goto err_free;
        }
        status = cks_tp_secret_load(params->peer_secret_file, &s->peer_secret);
        if (status != CKS_OK) {
            goto err_free;
        }
        if (s->peer_secret.len == s->secret.len &&
            memcmp(s->peer_secret.key, s->secret.key, s->secret.len) == 0) {
            cks_error("the peer secret must differ from the cluster secret: clients hold "
                      "that one");
            status = CKS_ERR_INVALID_PARAM;
            goto err_free;
        }
        s->peer_secret.peer = 1;
        s->has_peer_secret  = 1;
    }
    status = cks_md_open(s->data_dir, params->md_map_size, &s->md);
    if (status != CKS_OK) {
        cks_error("cannot open metadata in %s: %s", s->data_dir, cks_status_string(status));
        goto err_free;
    }
    status = cks_arena_open(s->arena_file, params->arena_size, &s->arena);
    if (status != CKS_OK) {
        goto err_md;
    }
    status = cks_sv_recover(s);
    if (status != CKS_OK) {
        cks_error("recovery failed: %s", cks_status_string(status));
        goto err_arena;
    }
    memset(&wp, 0, sizeof(wp));
    /* a restarted server listens on the port it had: allow it at once */
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    wp.name        = s->name;
    wp.on_msg      = cks_sv_on_msg;
    wp.on_bad_msg  = cks_sv_on_bad_msg;
    wp.on_conn_err = cks_sv_on_conn_err;
    wp.arg         = s;
    wp.max_conns   = params->max_conns ? params->max_conns : 1024;
    wp.max_pending = params->max_pending ? params->max_pending : 4096;
    wp.stall_ms    = (params->reply_timeout_s ? params->reply_timeout_s : 60) * 1000u;
    wp.auth_timeout_ms = (params->auth_timeout_s ? params->auth_timeout_s : 10) * 1000u;
    status         = cks_tp_worker_create(&wp, &s->tp);
    if (status != CKS_OK) {
        goto err_arena;
    }
    if (s->has_secret) {
        cks_tp_worker_require_auth(s->tp);
    }
    unsigned ncopy = params->copy_threads;
    if (ncopy == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        ncopy     = ncpu >= 4 ? (unsigned)CKS_MIN(ncpu / 4, 8) : 0;
    } else if (ncopy == UINT_MAX) {
        ncopy = 0;
    }
    status = cks_tp_worker_copy_threads(s->tp, ncopy);
    if (status != CKS_OK) {
        cks_error("cannot start %u copy threads: %s", ncopy, cks_status_string(status));
        goto err_tp;
    }
    status = cks_tp_mem_map(s->tp, cks_arena_base(s->arena), cks_arena_size(s->arena),
                            &s->arena_mem);
    if (status != CKS_OK) {
        cks_error("cannot register the arena with UCX: %s", cks_status_string(status));
        goto err_tp;
    }
    uint16_t port = params->port;
    if (params->cluster_map != NULL) {
        status = cks_sv_cluster_init(s);
        if (status != CKS_OK) {
            goto err_mem;
        }
        /* each peer connects to us once (twice while it reconnects): room
         * that clients cannot take (cks_tp_worker_set_peer_room()) */
        if (s->has_peer_secret) {
            cks_tp_worker_set_peer_room(s->tp, 2u * (unsigned)cks_cluster_nservers(s->map));
        }
        const cks_cluster_server_t *me = cks_cluster_server(s->map, s->self);
        if (params->listen_addr == NULL) { /* listen where the map says */
            free(s->listen_addr);
            s->listen_addr = strdup(me->addr);
        }
        if (port == 0) {
            port = me->port;
        }
        snprintf(s->name, sizeof(s->name), "%s", params->name ? params->name : "ckstore-server");
    }
    status = s->listen_addr == NULL ? CKS_ERR_NO_MEMORY
                                    : cks_tp_listener_create(s->tp, s->listen_addr, port,
                                                             cks_sv_on_accept, s,
                                                             &s->listener);
    if (status != CKS_OK) {
        goto err_mem;
    }
    status = cks_mdq_start(&s->mdq, s->md, s->tp);
    if (status != CKS_OK) {
        goto err_listener;
    }
    *server_p = s;
    return CKS_OK;

err_listener:
    cks_tp_listener_destroy(s->listener);
err_mem:
    cks_sv_cluster_fini(s);
    cks_tp_mem_unmap(s->arena_mem);
err_tp:
    cks_tp_worker_destroy(s->tp);
err_arena:
    cks_arena_close(s->arena);
err_md:
    cks_md_close(s->md);
err_free:
    cks_hmap_destroy(s->bad);
    cks_hmap_destroy(s->versions);
    cks_sv_params_free(s);
    if (s->sigfd >= 0) {
        close(s->sigfd);
    }
    free(s);
    return status;
}

uint16_t cks_server_port(cks_server_h s)
{
    return cks_tp_listener_port(s->listener);
}

cks_status_t cks_server_run(cks_server_h s)
{
    struct pollfd pfd[2];
    int nfds = 1;

    pfd[0].fd     = cks_tp_worker_efd(s->tp);
    pfd[0].events = POLLIN;
    if (s->sigfd >= 0) {
        pfd[1].fd     = s->sigfd;
        pfd[1].events = POLLIN;
        nfds          = 2;
    }
    cks_info("%s serving on %s:%u (arena %llu MiB)", s->name, s->listen_addr,
             cks_server_port(s),
             (unsigned long long)(cks_arena_size(s->arena) >> 20));
    while (!s->stop) {
        cks_tp_worker_progress(s->tp);
        cks_sv_drain_done(s);
        cks_sv_flush_progress(s);
        int timeout = cks_sv_cluster_progress(s);
        int sweep   = cks_tp_worker_sweep(s->tp); /* per-connection limits */
        if (sweep >= 0 && (timeout < 0 || sweep < timeout)) {
            timeout = sweep;
        }
        if (cks_tp_worker_arm(s->tp) == CKS_ERR_BUSY) {
            /* sends wait for room (arm backed off): no sleep on the fds,
             * but a signal is read all the same - a server whose replies
             * wait on a stopped client still stops on SIGTERM */
            timeout = 0;
        }
        if (poll(pfd, (nfds_t)nfds, timeout) < 0 && errno != EINTR) {
            cks_error("poll: %s", strerror(errno));
            return CKS_ERR_INTERNAL;
        }
        if (nfds == 2 && (pfd[1].revents & POLLIN)) {
            struct signalfd_siginfo si;
            if (read(s->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                cks_info("signal %u: shutting down", si.ssi_signo);
                s->stop = 1;
            }
        }
    }
    return CKS_OK;
}

void cks_server_stop(cks_server_h s)
{
    s->stop = 1;
    cks_tp_worker_signal(s->tp);
}

static void cks_sv_free_version(const void *key, size_t len, void *value, void *arg)
{
    cks_sv_version_t *v = value;
    for (size_t i = 0; i < v->nwaiters; i++) {
        cks_tp_conn_put(v->waiters[i].conn);
    }
    cks_hmap_destroy(v->keys);
    cks_hmap_destroy(v->deleted);
    cks_hmap_destroy(v->reported);
    free(v->objs);
    free(v->ranks_done);
    free(v->waiters);
    free(v->stored_on);
    free(v->reported_by);
    free(v);
}

void cks_server_destroy(cks_server_h s)
{
    if (s == NULL) {
        return;
    }
    /* Stop in the order that lets every callback find what it touches:
     * no new connections; queued metadata work finishes and is answered;
     * then every outstanding call completes (canceled) and every connection
     * closes, while the versions and the map still exist; the encoders'
     * finished work fails; the metadata jobs all that queued are completed
     * as canceled. Only then is anything freed. */
    cks_tp_listener_destroy(s->listener);
    s->listener = NULL;
    cks_mdq_stop(&s->mdq);
    cks_sv_drain_done(s);
    cks_sv_flush_stop(s); /* answers its flushes while connections are up */
    cks_tp_worker_quiesce(s->tp);
    cks_sv_cluster_quiesce(s);
    for (int round = 0; round < 16 && cks_sv_drain_done(s) > 0; round++) {
        /* a done callback may queue more */
    }
    cks_mdq_fini(&s->mdq);
    cks_sv_cluster_fini(s); /* frees the map */
    cks_sv_holds_fini(s);
    cks_hmap_foreach(s->versions, cks_sv_free_version, NULL); /* puts connections */
    cks_tp_mem_unmap(s->arena_mem);
    cks_tp_worker_destroy(s->tp);
    cks_hmap_destroy(s->versions);
    cks_hmap_destroy(s->bad);
    cks_arena_close(s->arena);
    cks_md_close(s->md);
    if (s->sigfd >= 0) {
        close(s->sigfd);
    }
    cks_sv_params_free(s);
    free(s);
}
