/*
 * DESIGN: the fence before a coordinator records a version's outcome (a
 * majority must fence its ballot), and the reports each server keeps for
 * a takeover until the version's outcome arrives. See coord.c for the whole
 * design and why no two coordinators record two outcomes.
 *
 * Never: fence a ballot this server no longer holds.
 */
#include "coord_int.h"
#include <stdlib.h>
#include <string.h>

/* ---- fence -------------------------------------------------------------------------- */

/* FENCE here: may ballot (round, coord) record the version's outcome? */
cks_status_t cks_sv_fence_here(cks_server_h s, const cks_wire_str_t *job,
                                      uint64_t version, uint32_t coord, uint32_t round,
                                      uint32_t ttl_s, char *why, size_t why_len)
{
    cks_md_version_t rec;
    cks_sv_claim_t *cl = cks_sv_claim_get(s, job->ptr, job->len, version);
    cks_status_t st;

    if (cl != NULL && (cl->coord != coord || cl->round != round)) {
        snprintf(why, why_len, "version %llu of '%.*s' is coordinated by server %u (ballot "
                 "%u) here, not by server %u (ballot %u)", (unsigned long long)version,
                 (int)job->len, job->ptr, cl->coord, cl->round, coord, round);
        return CKS_ERR_NOT_COORDINATOR;
    }
    if (cl == NULL) {
        st = cks_sv_version_lookup(s, job, version, &rec);
        if (st == CKS_OK && rec.state != CKS_VSTATE_OPEN) {
            snprintf(why, why_len, "version %llu of '%.*s' already ended here (%s)",
                     (unsigned long long)version, (int)job->len, job->ptr,
                     cks_vstate_string(rec.state));
            return CKS_ERR_VERSION_EXISTS;
        }
        st = cks_sv_claim_set(s, job->ptr, job->len, version, coord, round, ttl_s, NULL);
        if (st != CKS_OK) {
            snprintf(why, why_len, "server out of memory");
            return st;
        }
        cl = cks_sv_claim_get(s, job->ptr, job->len, version);
    }
    cl->fenced = 1;
    return CKS_OK;
}

struct cks_sv_fencing {
    cks_server_h s;
    cks_sv_version_t *v; /* held by the caller until done runs */
    cks_sv_fenced_t done;
    unsigned need, acked, answered, asked;
    int decided;
    uint8_t *state; /* by position: CKS_SV_GRANTED, CKS_SV_UNREACHED, CKS_SV_REFUSED */
    cks_status_t refusal;
    char why[CKS_MSG_MAX_LEN];
};

static void cks_sv_fence_decide(struct cks_sv_fencing *f)
{
    if (!f->decided && f->acked >= f->need) {
        f->decided = 1;
        f->done(f->s, f->v, CKS_OK, NULL);
    } else if (!f->decided && f->acked + (f->asked - f->answered) < f->need) {
        f->decided = 1;
        if (f->refusal == CKS_OK) {
            size_t n = cks_cluster_nservers(f->s->map);
            int len  = snprintf(f->why, sizeof(f->why),
                                "%u of %zu servers fenced its ballot, a majority (%u) is "
                                "needed; unreachable:", f->acked, n, f->need);
            cks_sv_why_unreachable(f->s, f->state, 0, f->why, sizeof(f->why), len);
            f->refusal = CKS_ERR_NO_QUORUM;
        }
        f->done(f->s, f->v, f->refusal, f->why);
    }
    if (f->answered == f->asked) {
        free(f->state);
        free(f);
    }
}

static void cks_sv_fence_answered(void *arg, cks_status_t status, const char *msg)
{
    cks_sv_ask_t *call       = arg;
    struct cks_sv_fencing *f = call->owner;
    f->answered++;
    if (status == CKS_OK) {
        f->acked++;
        f->state[call->pos] = CKS_SV_GRANTED;
    } else if (status == CKS_ERR_NOT_COORDINATOR || status == CKS_ERR_VERSION_EXISTS) {
        f->state[call->pos] = CKS_SV_REFUSED;
        if (f->refusal == CKS_OK) {
            f->refusal = CKS_ERR_NOT_COORDINATOR;
            snprintf(f->why, sizeof(f->why), "server %zu: %s", call->pos,
                     msg != NULL && msg[0] ? msg : cks_status_string(status));
        }
    } else {
        f->state[call->pos] = CKS_SV_UNREACHED;
    }
    free(call);
    cks_sv_fence_decide(f);
}

void cks_sv_fence(cks_server_h s, cks_sv_version_t *v, uint32_t ttl_s, cks_sv_fenced_t done)
{
    size_t n = cks_cluster_nservers(s->map);
    char why[CKS_MSG_MAX_LEN] = "";
    cks_wire_str_t job        = {v->job, v->job_len};
    struct cks_sv_fencing *f  = calloc(1, sizeof(*f));
    cks_status_t st;

    if (f == NULL || (f->state = calloc(n, 1)) == NULL) {
        free(f);
        done(s, v, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    f->s     = s;
    f->v     = v;
    f->done  = done;
    f->need  = (unsigned)(n / 2 + 1);
    f->asked = (unsigned)n;
    st = cks_sv_fence_here(s, &job, v->version, (uint32_t)s->self, v->round, ttl_s, why,
                           sizeof(why));
    f->answered = 1;
    if (st == CKS_OK) {
        f->acked = 1;
        f->state[s->self] = CKS_SV_GRANTED;
    } else {
        f->state[s->self] = CKS_SV_REFUSED;
        f->refusal        = CKS_ERR_NOT_COORDINATOR;
        snprintf(f->why, sizeof(f->why), "server %zu (itself): %s", s->self, why);
    }
    cks_msg_version_claim_t cm = {job, v->version, (uint32_t)s->self, CKS_CLAIM_OP_FENCE,
                                  ttl_s, v->round, 0, 0, 0, 0, 0, 0};
    f->asked++; /* one pseudo-answer holds f while the calls go out */
    unsigned unasked = cks_sv_claim_ask_others(s, &cm, CKS_SV_CLAIM_TIMEOUT_MS,
                                               cks_sv_fence_answered, f, f->state);
    f->answered += unasked + 1; /* and the hold */
    cks_sv_fence_decide(f);
}

/* ---- reports kept for a takeover ----------------------------------------------------- */

void cks_sv_kept_add(cks_server_h s, const cks_msg_object_done_t *m)
{
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    size_t klen;
    cks_sv_kept_t *k;
    cks_sv_kept_obj_t *o;

    if (s->kept == NULL || s->nkept >= CKS_SV_KEPT_MAX || m->job.len > CKS_JOB_MAX_LEN ||
        m->o.key.len > CKS_KEY_MAX_LEN) {
        return; /* not kept: a takeover then waits for it (until the deadline) */
    }
    klen = cks_vkey(key, m->job.ptr, m->job.len, m->version);
    k    = cks_hmap_get(s->kept, key, klen);
    if (k == NULL) {
        k = calloc(1, sizeof(*k));
        if (k == NULL || cks_hmap_put(s->kept, key, klen, k) != CKS_OK) {
            free(k);
            return;
        }
        memcpy(k->job, m->job.ptr, m->job.len);
        k->job_len    = m->job.len;
        k->version    = m->version;
        k->expires_ns = cks_time_ns() + CKS_SV_KEPT_TTL_NS;
    }
    /* no search for an equal report (a version may have many objects): one
     * kept twice is sent twice, and the coordinator counts it once */
    void *p = cks_array_grow(k->o, &k->cap, k->n + 1, sizeof(*k->o), 8);
    if (p == NULL) {
        return;
    }
    k->o = p;
    o    = &k->o[k->n];
    o->m = *m;
    memcpy(o->key, m->o.key.ptr, m->o.key.len);
    o->key[m->o.key.len] = '\0';
    o->why               = NULL;
    if (m->why.len > 0 && (o->why = malloc(m->why.len + 1)) != NULL) {
        memcpy(o->why, m->why.ptr, m->why.len);
        o->why[m->why.len] = '\0';
    }
    o->m.job    = (cks_wire_str_t){NULL, 0};
    o->m.o.key  = (cks_wire_str_t){o->key, m->o.key.len};
    o->m.why    = (cks_wire_str_t){o->why, o->why != NULL ? m->why.len : 0};
    o->m.backup = 0;
    k->n++;
    s->nkept++;
}

void cks_sv_kept_free(cks_server_h s, cks_sv_kept_t *k)
{
    for (size_t i = 0; i < k->n; i++) {
        free(k->o[i].why);
    }
    s->nkept -= k->n;
    free(k->o);
    free(k);
}

void cks_sv_kept_forget(cks_server_h s, const char *job, size_t job_len, uint64_t version)
{
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    cks_sv_kept_t *k;
    if (s->kept != NULL &&
        (k = cks_hmap_del(s->kept, key, cks_vkey(key, job, job_len, version))) != NULL) {
        cks_sv_kept_free(s, k);
    }
}

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
            cks_sv_object_done_here(s, &m, &st, why, sizeof(why));
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
