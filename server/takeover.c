/*
 * DESIGN: the takeover of a version whose coordinator does not answer: a
 * rank's seal at a later candidate that holds a grant with the begin's
 * parameters makes it claim a higher ballot; the seals wait for the claim.
 * See coord.c for the whole design.
 *
 * Never: take over a version whose coordinator answers.
 */
#include "coord_int.h"
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
                                      t->round, 0, 0, 0, 0, 0, 0};
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

int cks_sv_takeover_seal(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, uint32_t flags,
                         const cks_wire_str_t *job, uint64_t version, uint64_t nobjects,
                         uint64_t digest, uint32_t rank, const cks_wire_str_t *primaries)
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
                                     : 1};
    cks_sv_claim_run(s, NULL, 0, &b, t->round, 0, cks_sv_takeover_claimed);
    return 1;
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

/* Expired grants, a bounded batch per sweep (the map cannot change while
 * it is walked). */
#define CKS_SV_CLAIM_SWEEP 32
typedef struct {
    uint64_t now;
    size_t n;
    size_t len[CKS_SV_CLAIM_SWEEP];
    uint8_t key[CKS_SV_CLAIM_SWEEP][CKS_JOB_MAX_LEN + 16];
} cks_sv_claim_sweep_t;

static void cks_sv_claim_expire_cb(const void *key, size_t len, void *value, void *arg)
{
    cks_sv_claim_sweep_t *sw = arg;
    cks_sv_claim_t *cl       = value;
    if (cl->expires_ns <= sw->now && sw->n < CKS_SV_CLAIM_SWEEP &&
        len <= sizeof(sw->key[0])) {
        memcpy(sw->key[sw->n], key, len);
        sw->len[sw->n++] = len;
    }
}

static void cks_sv_kept_expire_cb(const void *key, size_t len, void *value, void *arg)
{
    cks_sv_claim_sweep_t *sw = arg;
    cks_sv_kept_t *k         = value;
    if (k->expires_ns <= sw->now && sw->n < CKS_SV_CLAIM_SWEEP && len <= sizeof(sw->key[0])) {
        memcpy(sw->key[sw->n], key, len);
        sw->len[sw->n++] = len;
    }
}

void cks_sv_claims_expire(cks_server_h s)
{
    cks_sv_claim_sweep_t sw;
    if (s->kept != NULL && cks_hmap_count(s->kept) > 0) {
        sw.now = cks_time_ns();
        sw.n   = 0;
        cks_hmap_foreach(s->kept, cks_sv_kept_expire_cb, &sw);
        for (size_t i = 0; i < sw.n; i++) {
            cks_sv_kept_t *k = cks_hmap_del(s->kept, sw.key[i], sw.len[i]);
            if (k != NULL) {
                cks_sv_kept_free(s, k);
            }
        }
    }
    if (s->claims == NULL || cks_hmap_count(s->claims) == 0) {
        return;
    }
    sw.now = cks_time_ns();
    sw.n   = 0;
    cks_hmap_foreach(s->claims, cks_sv_claim_expire_cb, &sw);
    for (size_t i = 0; i < sw.n; i++) {
        free(cks_hmap_del(s->claims, sw.key[i], sw.len[i]));
    }
}

cks_status_t cks_sv_claims_init(cks_server_h s)
{
    cks_status_t st = cks_hmap_create(&s->claims);
    return st == CKS_OK ? cks_hmap_create(&s->kept) : st;
}

static void cks_sv_kept_free_cb(const void *key, size_t len, void *value, void *arg)
{
    cks_sv_kept_t *k = value;
    (void)key;
    (void)len;
    for (size_t i = 0; i < k->n; i++) {
        free(k->o[i].why);
    }
    free(k->o);
    free(k);
    (void)arg;
}

static void cks_sv_claim_free_cb(const void *key, size_t len, void *value, void *arg)
{
    (void)key;
    (void)len;
    (void)arg;
    free(value);
}

void cks_sv_claims_fini(cks_server_h s)
{
    cks_sv_takeovers_fini(s);
    if (s->kept != NULL) {
        cks_hmap_foreach(s->kept, cks_sv_kept_free_cb, NULL);
        cks_hmap_destroy(s->kept);
        s->kept  = NULL;
        s->nkept = 0;
    }
    if (s->claims != NULL) {
        cks_hmap_foreach(s->claims, cks_sv_claim_free_cb, NULL);
        cks_hmap_destroy(s->claims);
        s->claims = NULL;
    }
}
