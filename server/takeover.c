/*
 * DESIGN: the takeover of a version whose coordinator does not answer: a
 * rank's seal at a later candidate that holds a grant with the begin's
 * parameters makes it claim a higher ballot; the seals wait for the claim,
 * and go on to the seal handler (seal.c) once the version is open here.
 * This file is the cluster's VERSION_SEAL handler in front of seal.c, and
 * sends the reports a server kept to whoever took a version over (REPORT).
 * See coord.c for the whole design.
 *
 * Never: take over a version whose coordinator answers.
 */
#include "cluster_int.h"
#include "coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- takeover of a version whose coordinator does not answer ------------------------ */

typedef struct {
    cks_tp_conn_h conn;
    uint64_t req_id;
    uint64_t nobjects, digest;
    uint32_t rank;
    uint8_t *primaries;
    uint32_t primaries_len;
    uint32_t flags; /* the seal's header flags (CKS_WIRE_F_RESENT) */
} cks_sv_tq_t;

struct cks_sv_takeover {
    struct cks_sv_takeover *next;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    uint32_t round;
    uint32_t holder; /* the coordinator that does not answer */
    cks_sv_tq_t *q;
    size_t nq, capq;
};

static struct cks_sv_takeover *cks_sv_takeover_find(cks_server_h s, const char *job,
                                                    size_t job_len, uint64_t version)
{
    for (struct cks_sv_takeover *t = s->takeovers; t != NULL; t = t->next) {
        if (t->version == version && t->job_len == job_len && memcmp(t->job, job, job_len) == 0) {
            return t;
        }
    }
    return NULL;
}

static int cks_sv_takeover_queue(struct cks_sv_takeover *t, cks_tp_conn_h conn,
                                 uint64_t req_id, uint32_t flags, uint64_t nobjects,
                                 uint64_t digest, uint32_t rank,
                                 const cks_wire_str_t *primaries)
{
    cks_sv_tq_t *e;
    void *p = cks_array_grow(t->q, &t->capq, t->nq + 1, sizeof(*t->q), 4);
    if (p == NULL) {
        return 0;
    }
    t->q = p;
    e = &t->q[t->nq];
    *e = (cks_sv_tq_t){conn, req_id, nobjects, digest, rank, NULL, 0, flags};
    if (primaries != NULL && primaries->len > 0) {
        e->primaries = malloc(primaries->len);
        if (e->primaries == NULL) {
            return 0;
        }
        memcpy(e->primaries, primaries->ptr, primaries->len);
        e->primaries_len = primaries->len;
    }
    cks_tp_conn_get(conn);
    t->nq++;
    return 1;
}

static void cks_sv_takeover_begun(cks_server_h s, cks_mdq_job_t *j)
{
    cks_sv_version_t *v = j->v;
    if (j->status != CKS_OK) {
        cks_warn("version %llu of '%s' (taken over): its OPEN record was not written: %s",
                 (unsigned long long)v->version, v->job, cks_status_string(j->status));
    } else {
        v->begun = 1;
    }
    free(j);
    v->pending--;
    cks_sv_version_release(s, v);
}

/* Open a version this server won a takeover of (ballot round): coordinator
 * state from the begin's parameters. */
static cks_status_t cks_sv_takeover_open(cks_server_h s, const cks_msg_version_begin_t *m,
                                         uint32_t round, uint32_t holder, char *why,
                                         size_t why_len)
{
    cks_md_version_t rec;
    cks_sv_version_t *v = cks_sv_version_find(s, &m->job, m->version);
    cks_status_t st     = cks_sv_version_lookup(s, &m->job, m->version, &rec);
    int fresh           = v == NULL;

    if (st == CKS_OK) {
        snprintf(why, why_len, "version %llu of '%.*s' already has a record here (%s)",
                 (unsigned long long)m->version, (int)m->job.len, m->job.ptr,
                 cks_vstate_string(rec.state));
        return CKS_ERR_VERSION_EXISTS;
    }
    if (v != NULL && (v->objs != NULL || v->bcast > 0 || v->wait != CKS_SV_WAIT_NONE)) {
        snprintf(why, why_len, "version %llu of '%.*s' is busy here",
                 (unsigned long long)m->version, (int)m->job.len, m->job.ptr);
        return CKS_ERR_BUSY;
    }
    if (v == NULL) {
        v = cks_sv_version_new(s, &m->job, m->version);
        if (v == NULL || cks_hmap_create(&v->keys) != CKS_OK) {
            if (v != NULL) {
                cks_sv_version_release(s, v);
            }
            snprintf(why, why_len, "server out of memory");
            return CKS_ERR_NO_MEMORY;
        }
    }
    v->objs       = malloc(64 * sizeof(*v->objs));
    v->ranks_done = calloc((m->nranks + 7) / 8, 1);
    if (v->objs == NULL || v->ranks_done == NULL) {
        free(v->objs);
        free(v->ranks_done);
        v->objs       = NULL;
        v->ranks_done = NULL;
        if (fresh) {
            v->open = 0;
            cks_sv_version_release(s, v);
        }
        snprintf(why, why_len, "server out of memory");
        return CKS_ERR_NO_MEMORY;
    }
    cks_sv_rec_open(&v->rec, m);
    v->cluster         = 1;
    v->open            = 1;
    v->failed          = CKS_OK;
    v->why[0]          = '\0';
    v->capobjs         = 64;
    v->nobjs           = 0;
    v->nobjects        = 0;
    v->bytes           = 0;
    v->nranks_done     = 0;
    v->expected        = UINT64_MAX;
    v->digest          = 0;
    v->expected_digest = 0;
    v->retain          = m->retain;
    v->member_ms       = m->member_ms; /* the first coordinator's, from its claim */
    v->disowned        = 0;
    v->claimed         = 1;
    v->round           = round;
    v->fence_ok        = 0;
    v->open_deadline_ns = cks_time_ns() + (uint64_t)(m->timeout_s ? m->timeout_s : 600) *
                                              1000000000ull;
    /* primaries report again first: none is asked whether it is alive before;
     * the coordinator that did not answer is gone for this version (what it
     * stored and neither spread nor gave a copy of is lost with it) */
    v->owed_after_ns = cks_time_ns() + 1000000000ull;
    v->gone_holder   = (int)holder;
    cks_sv_owed_forget(s, v->job, v->job_len, v->version);
    cks_mdq_job_t *j = cks_sv_mdq_job(s, CKS_MDQ_BEGIN, v->job, v->job_len, v->version);
    if (j != NULL) {
        /* OPEN here too: a restart of this server then claims it before it
         * drops it, as the first coordinator's would */
        j->v    = v;
        j->rec  = v->rec;
        j->done = cks_sv_takeover_begun;
        v->pending++;
        cks_mdq_push(&s->mdq, j);
    }
    return CKS_OK;
}

static void cks_sv_takeover_claimed(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                                    const cks_msg_version_begin_t *m, cks_status_t status,
                                    const char *why)
{
    struct cks_sv_takeover **pp = &s->takeovers, *t = NULL;
    char text[CKS_MSG_MAX_LEN];
    (void)conn;
    (void)req_id;

    for (; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->version == m->version && (*pp)->job_len == m->job.len &&
            memcmp((*pp)->job, m->job.ptr, m->job.len) == 0) {
            t  = *pp;
            *pp = t->next;
            break;
        }
    }
    if (t == NULL) {
        return;
    }
    if (status == CKS_OK && !s->stop) {
        status = cks_sv_takeover_open(s, m, t->round, t->holder, text, sizeof(text));
        why    = text;
    }
    if (status == CKS_OK) {
        cks_msg_version_claim_t cm = {m->job, m->version, (uint32_t)s->self,
                                      CKS_CLAIM_OP_REPORT, m->timeout_s + CKS_SV_CLAIM_MARGIN_S,
                                      t->round, 0, 0, 0, 0, 0, 0, 0};
        cks_warn("took over version %llu of '%.*s' (ballot %u): asking every server to "
                 "report its objects again",
                 (unsigned long long)m->version, (int)m->job.len, m->job.ptr, t->round);
        for (size_t pos = 0; pos < cks_cluster_nservers(s->map); pos++) {
            cks_tp_conn_h pc = pos != s->self ? cks_sv_peer(s, pos) : NULL;
            if (pc != NULL) {
                cks_tp_call(pc, CKS_MSG_VERSION_CLAIM, 0, &cm, NULL, 0, NULL,
                            CKS_SV_CLAIM_TIMEOUT_MS, cks_sv_claim_noop, NULL);
            }
        }
        cks_sv_kept_resend(s, &m->job, m->version, s->self);
    } else {
        cks_info("no takeover of version %llu of '%.*s': %s", (unsigned long long)m->version,
                 (int)m->job.len, m->job.ptr, why != NULL ? why : cks_status_string(status));
    }
    for (size_t i = 0; i < t->nq; i++) {
        cks_sv_tq_t *e = &t->q[i];
        if (status == CKS_OK) {
            cks_wire_str_t pr = {(const char *)e->primaries, e->primaries_len};
            cks_sv_cluster_end(s, e->conn, e->req_id, CKS_MSG_VERSION_SEAL, e->flags, &m->job,
                               m->version,
                               e->nobjects, e->digest, e->rank,
                               e->primaries != NULL ? &pr : NULL);
        } else {
            cks_sv_reply_status(e->conn, e->req_id,
                                status == CKS_ERR_SHUTTING_DOWN ? status
                                                                : CKS_ERR_NOT_COORDINATOR,
                                "%s", why != NULL ? why : cks_status_string(status));
        }
        cks_tp_conn_put(e->conn);
        free(e->primaries);
    }
    free(t->q);
    free(t);
}

/* A rank's seal of a version this server does not coordinate, whose grant
 * here names a coordinator: when the version may be taken over (a grant
 * with its parameters, no parent, this server a candidate), this server
 * claims it with a higher ballot and the seal waits for the outcome
 * (returns 1: the request is taken); else 0 and the caller goes on. */
static int cks_sv_takeover_seal(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                                uint32_t flags, const cks_wire_str_t *job, uint64_t version,
                                uint64_t nobjects, uint64_t digest, uint32_t rank,
                                const cks_wire_str_t *primaries)
{
    struct cks_sv_takeover *t = cks_sv_takeover_find(s, job->ptr, job->len, version);
    cks_sv_claim_t *cl;

    if (t != NULL) {
        return cks_sv_takeover_queue(t, conn, req_id, flags, nobjects, digest, rank,
                                     primaries);
    }
    cl = cks_sv_claim_get(s, job->ptr, job->len, version);
    if (cl == NULL || !cl->has_params || cl->coord == s->self || cl->fenced ||
        cl->p.parent != CKS_MD_NO_PARENT || cl->round >= UINT32_MAX - 1 ||
        !cks_sv_coord_candidate(s, job->ptr, job->len, version, NULL)) {
        return 0;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return 0;
    }
    memcpy(t->job, job->ptr, job->len);
    t->job_len = job->len;
    t->version = version;
    t->round   = cl->round + 1;
    t->holder  = cl->coord;
    if (!cks_sv_takeover_queue(t, conn, req_id, flags, nobjects, digest, rank, primaries)) {
        free(t->q);
        free(t);
        return 0;
    }
    t->next      = s->takeovers;
    s->takeovers = t;
    cks_msg_version_begin_t b = {{t->job, t->job_len},
                                 version,
                                 cl->p.parent,
                                 cl->p.nranks,
                                 cl->p.k,
                                 cl->p.m,
                                 cl->p.chunk_size,
                                 cl->p.retain,
                                 cl->p.ttl_s > CKS_SV_CLAIM_MARGIN_S
                                     ? cl->p.ttl_s - CKS_SV_CLAIM_MARGIN_S
                                     : 1,
                                 cl->p.member_ms /* the begin's, carried by its claim */};
    cks_sv_claim_run(s, NULL, 0, &b, t->round, 0, cks_sv_takeover_claimed);
    return 1;
}

/* VERSION_SEAL on a cluster server (cks_sv_handlers_cluster()). */
void cks_sv_cluster_seal(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, uint32_t flags,
                         const cks_wire_str_t *job, uint64_t version, uint64_t nobjects,
                         uint64_t digest, uint32_t rank, const cks_wire_str_t *primaries)
{
    cks_sv_version_t *v = cks_sv_version_find(s, job, version);

    /* not coordinated here (now, or until its fence failed) and not being
     * ended here */
    if ((v == NULL || (v->bcast == 0 && v->objs == NULL && !v->disowned)) &&
        cks_sv_takeover_seal(s, conn, req_id, flags, job, version, nobjects, digest, rank,
                             primaries)) {
        return; /* its coordinator does not answer: taken over here (coord.c) */
    }
    cks_sv_cluster_end(s, conn, req_id, CKS_MSG_VERSION_SEAL, flags, job, version, nobjects,
                       digest, rank, primaries);
}

void cks_sv_takeovers_fini(cks_server_h s)
{
    while (s->takeovers != NULL) {
        struct cks_sv_takeover *t = s->takeovers;
        s->takeovers              = t->next;
        for (size_t i = 0; i < t->nq; i++) {
            cks_tp_conn_put(t->q[i].conn);
            free(t->q[i].primaries);
        }
        free(t->q);
        free(t);
    }
}

/* ---- reports sent again to whoever took a version over ------------------------------ */

static void cks_sv_kept_sent(void *arg, cks_status_t status, const char *msg)
{
    (void)arg;
    if (status != CKS_OK) {
        cks_debug("a report sent again to a takeover's coordinator: %s %s",
                 cks_status_string(status), msg != NULL ? msg : "");
    }
}

/* Send every kept report of the version to the server at `to` (this one:
 * cks_sv_object_done_local()). */
void cks_sv_kept_resend(cks_server_h s, const cks_wire_str_t *job, uint64_t version,
                               size_t to)
{
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    cks_sv_kept_t *k =
        s->kept != NULL ? cks_hmap_get(s->kept, key, cks_vkey(key, job->ptr, job->len, version))
                        : NULL;
    cks_tp_conn_h conn = NULL;
    size_t sent        = 0;

    if (k == NULL || k->n == 0) {
        return;
    }
    if (to != s->self && (conn = cks_sv_peer(s, to)) == NULL) {
        cks_warn("cannot send the reports of version %llu of '%.*s' to server %zu",
                 (unsigned long long)version, (int)job->len, job->ptr, to);
        return;
    }
    /* a local report may change the table (not this entry): copy first */
    size_t n                = k->n;
    cks_sv_kept_obj_t *copy = malloc(n * sizeof(*copy));
    if (copy == NULL) {
        return;
    }
    memcpy(copy, k->o, n * sizeof(*copy));
    for (size_t i = 0; i < n; i++) {
        cks_msg_object_done_t m = copy[i].m;
        m.job                   = (cks_wire_str_t){k->job, k->job_len};
        m.o.key                 = (cks_wire_str_t){copy[i].key, copy[i].m.o.key.len};
        m.backup                = 0;
        if (to == s->self) {
            cks_status_t st;
            char why[CKS_MSG_MAX_LEN];
            cks_sv_object_done_local(s, &m, &st, why, sizeof(why));
            sent++;
        } else if (cks_tp_call(conn, CKS_MSG_OBJECT_DONE, 0, &m, NULL, 0, NULL,
                               CKS_SV_CLAIM_TIMEOUT_MS * 5, cks_sv_kept_sent,
                               NULL) == CKS_INPROGRESS) {
            sent++;
        }
    }
    free(copy);
    cks_info("sent %zu reports of version %llu of '%.*s' again to server %zu (a takeover)",
             sent, (unsigned long long)version, (int)job->len, job->ptr, to);
}
