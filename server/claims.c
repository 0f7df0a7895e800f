/*
 * DESIGN: what a cluster server keeps by version for the coordinators'
 * ballots, the layer under every file that claims, fences, reports or
 * ends a version: the grants it holds (the claim table: one ballot per
 * version, and the fence that pins it), the reports it keeps for a
 * takeover, the versions it is to claim again, and their expiry; the
 * coordinator candidates, and what grants and candidates say about who
 * coordinates a version. See coord.c for the design of ballots and fences.
 * Progress thread only.
 *
 * Never: call up into the files that claim, fence, report or record
 * outcomes (coord.c, fence.c, outcome.c and the handlers above them).
 */
#include "cluster_int.h"
#include "coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- coordinator candidates --------------------------------------------------------- */

size_t cks_sv_coord_candidates(cks_server_h s, const char *job, size_t job_len,
                               uint64_t version, uint16_t *out)
{
    return cks_place_coordinators(s->map, job, job_len, version, out,
                                  CKS_COORD_CANDIDATES_MAX);
}

int cks_sv_coord_candidate(cks_server_h s, const char *job, size_t job_len, uint64_t version,
                           size_t *rank_p)
{
    uint16_t cand[CKS_COORD_CANDIDATES_MAX];
    size_t n = cks_sv_coord_candidates(s, job, job_len, version, cand);
    for (size_t i = 0; i < n; i++) {
        if (cand[i] == s->self) {
            if (rank_p != NULL) {
                *rank_p = i;
            }
            return 1;
        }
    }
    return 0;
}

/* ---- grants: the claim table -------------------------------------------------------- */

cks_sv_claim_t *cks_sv_claim_get(cks_server_h s, const char *job, size_t job_len,
                                        uint64_t version)
{
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    size_t klen          = cks_vkey(key, job, job_len, version);
    cks_sv_claim_t *cl   = cks_hmap_get(s->claims, key, klen);
    if (cl != NULL && cl->expires_ns <= cks_time_ns()) {
        free(cks_hmap_del(s->claims, key, klen));
        cl = NULL;
    }
    return cl;
}

int cks_sv_claim_holder(cks_server_h s, const char *job, size_t job_len, uint64_t version,
                        uint32_t *coord_p)
{
    cks_sv_claim_t *cl = s->claims != NULL ? cks_sv_claim_get(s, job, job_len, version) : NULL;
    if (cl != NULL && coord_p != NULL) {
        *coord_p = cl->coord;
    }
    return cl != NULL;
}

void cks_sv_claim_forget(cks_server_h s, const char *job, size_t job_len, uint64_t version)
{
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    if (s->claims != NULL) {
        free(cks_hmap_del(s->claims, key, cks_vkey(key, job, job_len, version)));
    }
}

/* Grant ballot (round, coord) the version (or renew its grant); `params`,
 * when not NULL, are the begin's parameters. */
cks_status_t cks_sv_claim_set(cks_server_h s, const char *job, size_t job_len,
                                     uint64_t version, uint32_t coord, uint32_t round,
                                     uint32_t ttl_s, const cks_msg_version_claim_t *params)
{
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    size_t klen        = cks_vkey(key, job, job_len, version);
    cks_sv_claim_t *cl = cks_hmap_get(s->claims, key, klen);
    if (cl == NULL) {
        cl = calloc(1, sizeof(*cl));
        if (cl == NULL || cks_hmap_put(s->claims, key, klen, cl) != CKS_OK) {
            free(cl);
            return CKS_ERR_NO_MEMORY;
        }
    }
    if (cl->coord != coord || cl->round != round) {
        cl->fenced = 0;
    }
    cl->coord      = coord;
    cl->round      = round;
    cl->expires_ns = cks_time_ns() + (uint64_t)ttl_s * 1000000000ull;
    if (params != NULL && params->nranks > 0 && params->k > 0 && params->m > 0 &&
        params->chunk_size > 0) {
        /* a real begin's (an orphan's claim carries none) */
        cl->p          = *params;
        cl->p.job      = (cks_wire_str_t){NULL, 0};
        cl->has_params = 1;
    }
    return CKS_OK;
}

/* FENCE here: may ballot (round, coord) record the version's outcome? */
cks_status_t cks_sv_fence_here(cks_server_h s, const cks_wire_str_t *job,
                                      uint64_t version, uint32_t coord, uint32_t round,
                                      uint32_t ttl_s, char *why, size_t why_len)
{
    cks_md_version_t rec;
    cks_sv_claim_t *cl = cks_sv_claim_get(s, job->ptr, job->len, version);
    cks_status_t st;

    if (cl != NULL && !cl->fenced && cl->round == 0 && round == 0 && cl->coord != coord) {
        /* the begin claim of another server, held here while the
         * fencing one won a majority at round 0: that claim cannot win
         * too, and is withdrawn once it loses - ask again (fence.c) */
        snprintf(why, why_len, "version %llu of '%.*s': server %u's begin claim is held here "
                 "for now", (unsigned long long)version, (int)job->len, job->ptr, cl->coord);
        return CKS_ERR_BUSY;
    }
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

/* ---- who coordinates a version ------------------------------------------------------ */

/* Is `v` a version this server coordinates and that still takes work? */
int cks_sv_cv_open(const cks_sv_version_t *v)
{
    return v != NULL && v->cluster && v->objs != NULL && v->open && v->bcast == 0;
}

/*
 * A version that is not open here: does another server coordinate it? Yes
 * when this server granted it to another one (coord.c), or when it knows
 * nothing of it and is not its first candidate (a failover coordinator
 * began it while this server could not hear the claim). Then whoever asked
 * (a rank's seal, a primary's report) tries the next candidate, and nothing
 * here treats the version as never begun.
 */
int cks_sv_coordinated_elsewhere(cks_server_h s, const cks_sv_version_t *v,
                                        const cks_wire_str_t *job, uint64_t version,
                                        char *why, size_t why_len)
{
    cks_md_version_t rec;
    uint16_t cand[CKS_COORD_CANDIDATES_MAX];
    uint32_t holder;

    if (v != NULL && v->disowned) {
        snprintf(why, why_len, "server %zu no longer coordinates version %llu of '%.*s' (its "
                 "fence failed: another server took it over, or a majority is out of its "
                 "reach)", s->self, (unsigned long long)version, (int)job->len, job->ptr);
        return 1;
    }
    if (v != NULL && v->objs != NULL) {
        return 0; /* this server coordinates (or coordinated) it */
    }
    if (cks_sv_claim_holder(s, job->ptr, job->len, version, &holder)) {
        if (holder == s->self) {
            return 0;
        }
        snprintf(why, why_len, "version %llu of '%.*s' is coordinated by server %u",
                 (unsigned long long)version, (int)job->len, job->ptr, holder);
        return 1;
    }
    cks_sv_coord_candidates(s, job->ptr, job->len, version, cand);
    if (cand[0] == s->self || cks_sv_version_lookup(s, job, version, &rec) == CKS_OK) {
        return 0;
    }
    snprintf(why, why_len, "server %zu does not coordinate version %llu of '%.*s'", s->self,
             (unsigned long long)version, (int)job->len, job->ptr);
    return 1;
}

/* ---- reports kept for a takeover ---------------------------------------------------- */

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

/* ---- versions to claim again -------------------------------------------------------- */

/* Versions left OPEN here without their coordinator state (a restart, or a
 * fence that found no majority), each claimed again by lost.c until it is
 * dropped, refused for good or out of tries. Added once per version. */
void cks_sv_relost_add(cks_server_h s, const char *job, size_t job_len,
                              uint64_t version, uint64_t when_ns)
{
    cks_sv_relost_t *r;
    for (r = s->relost; r != NULL; r = r->next) {
        if (r->version == version && r->job_len == job_len && memcmp(r->job, job, job_len) == 0) {
            return;
        }
    }
    if ((r = calloc(1, sizeof(*r))) == NULL) {
        return;
    }
    memcpy(r->job, job, job_len);
    r->job_len = (uint32_t)job_len;
    r->version = version;
    r->next_ns = when_ns;
    r->next    = s->relost;
    s->relost  = r;
}

cks_sv_relost_t *cks_sv_relost_find(cks_server_h s, const cks_wire_str_t *job, uint64_t version,
                                    int unlink)
{
    for (cks_sv_relost_t **pp = &s->relost; *pp != NULL; pp = &(*pp)->next) {
        cks_sv_relost_t *r = *pp;
        if (r->version == version && r->job_len == job->len &&
            memcmp(r->job, job->ptr, job->len) == 0) {
            if (unlink) {
                *pp = r->next;
            }
            return r;
        }
    }
    return NULL;
}

/* ---- expiry and life cycle ---------------------------------------------------------- */

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
    while (s->relost != NULL) {
        cks_sv_relost_t *r = s->relost;
        s->relost          = r->next;
        free(r);
    }
}
