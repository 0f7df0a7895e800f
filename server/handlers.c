/*
 * DESIGN: a standalone server's request handlers (HELLO, versions, puts,
 * gets, stats, lists, deletes, usage) and the metadata writer's
 * completions that answer them; a cluster server's dispatcher sends the
 * cluster's requests to cluster.c and its roles instead. See server.c for
 * the whole design.
 *
 * Never: write LMDB on this thread (the metadata writer does), or wait.
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
size_t cks_sv_drain_done(cks_server_h s)
{
    size_t n           = 0;
    cks_workq_job_t *l = cks_mdq_take_done(&s->mdq);
    while (l != NULL) {
        cks_mdq_job_t *j = CKS_CONTAINER_OF(l, cks_mdq_job_t, wq);
        l                = l->next;
        cks_sv_mdq_done(s, j);
        n++;
    }
    return n;
}

/* ---- request handlers ---------------------------------------------------------- */

/* Refuse a connection that failed authentication: log, answer, serve
 * nothing more from it, and close it a second later (at once, the peer
 * could see the connection go before the answer). */
void cks_sv_auth_refuse(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                               const char *why)
{
    cks_warn("authentication failed for %s: %s; closing the connection",
             cks_tp_conn_peer(conn), why);
    cks_sv_reply_status(conn, req_id, CKS_ERR_AUTH, "%s", why);
    cks_tp_conn_close_later(conn, 1000);
}

void cks_sv_auth(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
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

/* The usage figures of STATS_REPLY (and of HELLO_REPLY, for clients before
 * STATS): the arena's size and use, what the encoder threads did. */
static void cks_sv_usage(cks_server_h s, cks_msg_stats_reply_t *r)
{
    r->arena_size = cks_arena_size(s->arena);
    r->arena_used = cks_arena_used(s->arena);
    cks_enc_stats(&s->enc, &r->enc_bytes, &r->enc_ns, &r->enc_job_ns);
}

void cks_sv_hello(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
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
    cks_msg_stats_reply_t u = {0};
    cks_sv_usage(s, &u); /* for clients before STATS */
    r.arena_size = u.arena_size;
    r.arena_used = u.arena_used;
    r.enc_bytes  = u.enc_bytes;
    r.enc_ns     = u.enc_ns;
    r.enc_job_ns = u.enc_job_ns;
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

/* STATS: the arena's size and use, and what the encoder threads did */
void cks_sv_stats(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id)
{
    cks_msg_stats_reply_t r = {0};

    r.status = CKS_OK;
    r.msg    = cks_wire_cstr(NULL);
    cks_sv_usage(s, &r);
    cks_sv_reply(conn, CKS_MSG_STATS_REPLY, req_id, &r);
}

static void cks_sv_version_open(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                                const cks_msg_version_begin_t *m, cks_status_t status,
                                const char *why);

/* The OPEN record of a version begun (or taken over) with the begin's
 * parameters, created now. */
void cks_sv_rec_open(cks_md_version_t *rec, const cks_msg_version_begin_t *m)
{
    memset(rec, 0, sizeof(*rec));
    rec->version    = m->version;
    rec->parent     = m->parent;
    rec->state      = CKS_VSTATE_OPEN;
    rec->nranks     = m->nranks;
    rec->created_ns = cks_time_real_ns();
    rec->ec_k       = m->k;
    rec->ec_m       = m->m;
    rec->chunk_size = m->chunk_size;
    rec->redundancy = m->m; /* less if objects are stored DEGRADED */
}

void cks_sv_version_begin(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
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
    if (cks_sv_member_ms_refused(conn, req_id, m->member_ms)) {
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
    v = cks_sv_version_new_open(s, &m->job, m->version);
    if (v == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    cks_sv_rec_open(&v->rec, m);
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
        v->member_ms        = m->member_ms;
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
    if (cks_sv_version_queue(s, v, CKS_MDQ_BEGIN, conn, req_id) != CKS_OK) {
        cks_sv_version_free(s, v);
    }
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

void cks_sv_put(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, uint32_t flags,
                       const cks_msg_put_t *m, cks_tp_data_t *data)
{
    int parts = (flags & CKS_WIRE_F_PARTS) != 0 && m->size > 0; /* parts.c */
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
    if (parts ? data != NULL : (data == NULL ? 0 : data->length) != m->size) {
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

    if (parts) { /* the bytes come in PUT_PARTs: their end ends it */
        status = cks_sv_parts_open(s, conn, &m->job, m->version, &m->key,
                                   cks_arena_base(s->arena) + off, m->size,
                                   cks_sv_put_recv_done, j);
        if (status != CKS_OK) {
            cks_sv_put_failed(s, j, status);
        }
    } else if (data == NULL) {
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

void cks_sv_version_end(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
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
void cks_sv_get(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
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
