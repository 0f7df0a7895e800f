/*
 * DESIGN: the server's part in an erasure-coded cluster. Runs on the
 * progress thread; owns the connections to the other servers (peers), the
 * primary's puts while they are encoded and spread, the coordinator's
 * manifests under construction, and the member side of chunk puts, chunk
 * reads, manifest commits and drops.
 *
 *   client --PUT--> primary: bytes land in one arena extent laid out as
 *     [stripes x k data chunks][stripes x m parity chunks]; STORED at once.
 *   primary: encoder thread zero-pads, encodes (ISA-L), CRCs every chunk;
 *     then chunk i of stripe s goes to member i of the stripe's placement
 *     group (CHUNK_PUT, zero-copy from the arena); chunks placed on the
 *     primary itself stay where they are. When every member has recorded its
 *     chunk, the primary tells the version's coordinator (OBJECT_DONE) and
 *     frees what it sent.
 *   client --SEAL(n objects, digest)--> coordinator: once every rank sealed,
 *     waits until exactly the objects the ranks put are done (or one failed,
 *     one no rank put came, or the deadline passed), records the manifest
 *     (state PROTECTED) and sends it to every other server (VERSION_COMMIT,
 *     pages of entries), then answers; on failure it aborts the version
 *     everywhere (VERSION_DROP) and answers with the reason.
 *
 * Never: encode or run an LMDB write here (encoder threads and the metadata
 * writer do), or wait: every step is a callback.
 */
#include "cluster_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- coordinator: manifests ------------------------------------------------------------ */


/* Is `v` a version this server coordinates and that still takes work? */
int cks_sv_cv_open(const cks_sv_version_t *v)
{
    return v != NULL && v->cluster && v->objs != NULL && v->open && v->bcast == 0;
}

/*
 * Abort a version this server coordinates and that is not open any more, or
 * never was, everywhere: its record becomes ABORTED here, and every server
 * (this one included) frees the chunks of it that no manifest uses. Chunks
 * of a version can arrive after it ended - the objects of a coordinator that
 * restarted while it was open, an object put into a version never begun, or
 * one whose put was still spreading when its version was aborted - and no
 * one else would ever free them. `rec` is its record, or NULL when it has
 * none (then it gets one, ABORTED, so that it cannot be begun later with
 * those chunks in it).
 */
static void cks_sv_abort_lost(cks_server_h s, const cks_wire_str_t *job, uint64_t version,
                              const cks_md_version_t *rec, int64_t won_round,
                              cks_status_t why_status, const char *why)
{
    cks_sv_version_t *v = cks_sv_version_find(s, job, version);

    if (v != NULL && v->bcast > 0) {
        if (v->wait == CKS_SV_WAIT_ABORT) {
            v->redrop = 1; /* its drop may have passed a member already */
        }
        return;
    }
    if (v != NULL && (cks_sv_cv_open(v) || v->wait != CKS_SV_WAIT_NONE)) {
        return;
    }
    if (v == NULL && (v = cks_sv_version_new(s, job, version)) == NULL) {
        return; /* out of memory: the next report tries again */
    }
    v->cluster = 1;
    if (rec != NULL) {
        v->rec = *rec;
    } else {
        memset(&v->rec, 0, sizeof(v->rec));
        v->rec.version    = version;
        v->rec.parent     = CKS_MD_NO_PARENT;
        v->rec.nranks     = 1;
        v->rec.created_ns = cks_time_real_ns();
    }
    v->failed = v->bcast_reply = why_status;
    snprintf(v->why, sizeof(v->why), "%s", why);
    v->wait = CKS_SV_WAIT_ABORT;
    if (won_round >= 0) {
        /* this server won a claim of the version with ballot (won_round,
         * self): a majority fences it before the drop is recorded */
        v->claimed          = 1;
        v->round            = (uint32_t)won_round;
        v->fence_ok         = 0;
        v->open_deadline_ns = cks_time_ns();
    }
    cks_warn("dropping version %llu of '%s' on every server: %s", (unsigned long long)version,
             v->job, why);
    cks_sv_cv_finish(s, v, 0);
}


/* The claim of a version an object was reported for and this first
 * candidate did not know: won, no other server coordinates it (and none can
 * now), so it was never begun; lost, another one coordinates it. */
static void cks_sv_orphan_claimed(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                                  const cks_msg_version_begin_t *m, cks_status_t status,
                                  const char *why)
{
    char text[CKS_MSG_MAX_LEN];
    (void)conn;
    (void)req_id;
    if (status != CKS_OK) {
        cks_info("version %llu of '%.*s' is not this server's to drop: %s",
                 (unsigned long long)m->version, (int)m->job.len, m->job.ptr,
                 why != NULL ? why : cks_status_string(status));
        return;
    }
    snprintf(text, sizeof(text),
             "objects were put into version %llu, which was never begun (no server "
             "coordinates it)",
             (unsigned long long)m->version);
    cks_sv_abort_lost(s, &m->job, m->version, NULL, 0, CKS_ERR_VERSION_NOT_OPEN, text);
}

/* Versions left OPEN here without their coordinator state: a restart, or a
 * fence that found no majority (cut off, nobody took the version over).
 * Each is claimed again (coord.c) every CKS_SV_RELOST_EVERY_NS, first with
 * ballot (0, self): won (no other server took it over), it is dropped
 * everywhere (fenced first, as every outcome is); no majority, tried again.
 * Refused (a higher ballot, or another server's record), it stays OPEN here
 * until its outcome arrives or catch-up learns it, and is claimed again with
 * the next round: a server grants that only when the holder of its grant
 * does not answer (coord.c's takeover rule), so a live coordinator that
 * took the version over keeps it, while one that died, or restarted and
 * forgot it, no longer leaves the version OPEN everywhere for good. Bounded
 * in tries (an hour): CKS_SV_RELOST_EVERY_NS, CKS_SV_RELOST_TRIES in
 * cluster_int.h. */

typedef struct cks_sv_relost {
    struct cks_sv_relost *next;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    uint64_t next_ns;
    unsigned tries;
    uint32_t round; /* the ballot's round of the next claim */
    int in_flight;
} cks_sv_relost_t;

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

static cks_sv_relost_t *cks_sv_relost_find(cks_server_h s, const cks_wire_str_t *job,
                                           uint64_t version, int unlink)
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

static void cks_sv_lost_claimed(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                                const cks_msg_version_begin_t *m, cks_status_t status,
                                const char *why)
{
    cks_md_version_t rec;
    cks_sv_relost_t *r = cks_sv_relost_find(s, &m->job, m->version, 0);
    uint32_t round     = r != NULL ? r->round : 0;
    (void)conn;
    (void)req_id;
    if (r != NULL) {
        r->in_flight = 0;
    }
    if (status != CKS_OK && status != CKS_ERR_VERSION_EXISTS &&
        status != CKS_ERR_SHUTTING_DOWN && r != NULL && ++r->tries < CKS_SV_RELOST_TRIES) {
        if (status == CKS_ERR_NOT_COORDINATOR) {
            r->round++; /* a higher ballot: granted where its holder does not answer */
        }
        r->next_ns = cks_time_ns() + CKS_SV_RELOST_EVERY_NS;
        cks_info("version %llu of '%.*s', open here without its coordinator: %s; claimed "
                 "again in %llu s (ballot %u)", (unsigned long long)m->version,
                 (int)m->job.len, m->job.ptr, why != NULL ? why : cks_status_string(status),
                 (unsigned long long)(CKS_SV_RELOST_EVERY_NS / 1000000000ull), r->round);
        return;
    }
    free(cks_sv_relost_find(s, &m->job, m->version, 1));
    if (status != CKS_OK) {
        cks_warn("version %llu of '%.*s' is kept OPEN here (its outcome comes from the server "
                 "that took it over, or by catch-up): %s", (unsigned long long)m->version,
                 (int)m->job.len, m->job.ptr, why != NULL ? why : cks_status_string(status));
        return;
    }
    if (cks_sv_version_lookup(s, &m->job, m->version, &rec) == CKS_OK &&
        rec.state == CKS_VSTATE_OPEN) {
        cks_sv_abort_lost(s, &m->job, m->version, &rec, round, CKS_ERR_VERSION_NOT_OPEN,
                          "its coordinator stopped, or lost its majority, while the version "
                          "was open");
    }
}

static void cks_sv_relost_run(cks_server_h s, uint64_t now)
{
    for (cks_sv_relost_t *r = s->relost, *next; r != NULL; r = next) {
        next = r->next;
        if (r->in_flight || r->next_ns > now) {
            continue;
        }
        cks_wire_str_t job = {r->job, r->job_len};
        cks_md_version_t rec;
        cks_sv_version_t *v = cks_sv_version_find(s, &job, r->version);
        if (cks_sv_version_lookup(s, &job, r->version, &rec) != CKS_OK ||
            rec.state != CKS_VSTATE_OPEN || (v != NULL && v->objs != NULL)) {
            free(cks_sv_relost_find(s, &job, r->version, 1)); /* its outcome arrived */
            continue;
        }
        cks_msg_version_begin_t b = {job,        r->version, rec.parent,     rec.nranks,
                                     rec.ec_k,   rec.ec_m,   rec.chunk_size, 0,
                                     0};
        r->in_flight = 1;
        cks_sv_claim_lost(s, &b, r->round, cks_sv_lost_claimed); /* may free r */
    }
}

/* An object reported for a version that is not open here: when the version
 * never began, or was aborted, the object's chunks are dropped everywhere.
 * Returns 1 when this server has no record of the version: then it claims
 * the version (coord.c) before it concludes anything - another candidate
 * may have begun it while this one could not hear the claim (it was down) -
 * and drops it only when it wins the claim. */
int cks_sv_object_orphan(cks_server_h s, const cks_msg_object_done_t *m)
{
    cks_md_version_t rec;
    char why[CKS_MSG_MAX_LEN];
    cks_status_t st = cks_sv_version_lookup(s, &m->job, m->version, &rec);

    if (st == CKS_ERR_NO_SUCH_VERSION || st == CKS_ERR_NO_SUCH_JOB) {
        cks_msg_version_begin_t b = {.job = m->job, .version = m->version, .nranks = 1};
        cks_info("object '%.*s' reported for version %llu, unknown here: claiming the "
                 "version to learn whether another server coordinates it",
                 (int)m->o.key.len, m->o.key.ptr, (unsigned long long)m->version);
        cks_sv_claim_begin(s, NULL, 0, &b, cks_sv_orphan_claimed);
        return 1;
    } else if (st == CKS_OK && rec.state == CKS_VSTATE_ABORTED) {
        /* the abort's own reason stays the one a late seal is told: this
         * object is dropped with the version, under that reason */
        const cks_sv_aborted_t *a = cks_sv_aborted_find(s, &m->job, m->version);
        cks_status_t why_status   = a != NULL ? a->status : CKS_ERR_VERSION_NOT_OPEN;
        if (a != NULL) {
            cks_info("object '%.*s' arrived after version %llu was aborted",
                     (int)m->o.key.len, m->o.key.ptr, (unsigned long long)m->version);
            snprintf(why, sizeof(why), "%s", a->why);
        } else {
            snprintf(why, sizeof(why), "object '%.*s' arrived after version %llu was aborted",
                     (int)m->o.key.len, m->o.key.ptr, (unsigned long long)m->version);
        }
        cks_sv_abort_lost(s, &m->job, m->version, &rec, -1, why_status, why);
    }
    return 0;
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

/* ---- takeover ----------------------------------------------------------------------- */

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

cks_status_t cks_sv_takeover_open(cks_server_h s, const cks_msg_version_begin_t *m,
                                  uint32_t round, uint32_t holder, char *why, size_t why_len)
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

/* ---- a cluster server's handlers (on top of the standalone ones, dispatch.c) ---- */

CKS_SV_HANDLER(cks_sv_h_cluster_put,
               cks_sv_cluster_put(s, conn, hdr->req_id, &b->m_PUT, data))
CKS_SV_HANDLER(cks_sv_h_cluster_seal,
               cks_sv_cluster_end(s, conn, hdr->req_id, hdr->type, hdr->flags,
                                  &b->m_VERSION_SEAL.job, b->m_VERSION_SEAL.version,
                                  b->m_VERSION_SEAL.nobjects, b->m_VERSION_SEAL.digest,
                                  b->m_VERSION_SEAL.rank, &b->m_VERSION_SEAL.primaries))
/* VERSION_ABORT and VERSION_DELETE */
CKS_SV_HANDLER(cks_sv_h_cluster_end,
               cks_sv_cluster_end(s, conn, hdr->req_id, hdr->type, 0,
                                  &b->m_VERSION_ABORT.job, b->m_VERSION_ABORT.version, 0,
                                  0, 0, NULL))
CKS_SV_HANDLER(cks_sv_h_no_get,
               cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_UNSUPPORTED,
                                   "a cluster server serves chunks (CHUNK_GET)"))
CKS_SV_HANDLER(cks_sv_h_object_delete,
               cks_sv_object_delete(s, conn, hdr->req_id, &b->m_OBJECT_DELETE))
CKS_SV_HANDLER(cks_sv_h_chunk_put,
               cks_sv_chunk_put(s, conn, hdr->req_id, &b->m_CHUNK_PUT, data))
CKS_SV_HANDLER(cks_sv_h_chunk_get,
               cks_sv_chunk_get(s, conn, hdr->req_id, &b->m_CHUNK_GET, data))
CKS_SV_HANDLER(cks_sv_h_object_done,
               cks_sv_object_done(s, conn, hdr->req_id, &b->m_OBJECT_DONE))
CKS_SV_HANDLER(cks_sv_h_version_commit,
               cks_sv_version_commit(s, conn, hdr->req_id, &b->m_VERSION_COMMIT, data))
CKS_SV_HANDLER(cks_sv_h_version_drop,
               cks_sv_version_drop(s, conn, hdr->req_id, &b->m_VERSION_DROP))
CKS_SV_HANDLER(cks_sv_h_version_claim,
               cks_sv_version_claim(s, conn, hdr->req_id, &b->m_VERSION_CLAIM))
CKS_SV_HANDLER(cks_sv_h_sync_list,
               cks_rp_sync_list(s, conn, hdr->req_id, &b->m_SYNC_LIST))
CKS_SV_HANDLER(cks_sv_h_repair_check,
               cks_rp_repair_check(s, conn, hdr->req_id, &b->m_REPAIR_CHECK))
CKS_SV_HANDLER(cks_sv_h_repair_status, cks_rp_repair_status(s, conn, hdr->req_id))

void cks_sv_handlers_cluster(cks_server_h s)
{
    cks_sv_handler_t *h = s->handlers;

    h[CKS_MSG_PUT]            = cks_sv_h_cluster_put;
    h[CKS_MSG_VERSION_SEAL]   = cks_sv_h_cluster_seal;
    h[CKS_MSG_VERSION_ABORT]  = cks_sv_h_cluster_end;
    h[CKS_MSG_VERSION_DELETE] = cks_sv_h_cluster_end;
    h[CKS_MSG_GET]            = cks_sv_h_no_get;
    h[CKS_MSG_OBJECT_DELETE]  = cks_sv_h_object_delete;
    h[CKS_MSG_CHUNK_PUT]      = cks_sv_h_chunk_put;
    h[CKS_MSG_CHUNK_GET]      = cks_sv_h_chunk_get;
    h[CKS_MSG_OBJECT_DONE]    = cks_sv_h_object_done;
    h[CKS_MSG_VERSION_COMMIT] = cks_sv_h_version_commit;
    h[CKS_MSG_VERSION_DROP]   = cks_sv_h_version_drop;
    h[CKS_MSG_VERSION_CLAIM]  = cks_sv_h_version_claim;
    h[CKS_MSG_SYNC_LIST]      = cks_sv_h_sync_list;
    h[CKS_MSG_REPAIR_CHECK]   = cks_sv_h_repair_check;
    h[CKS_MSG_REPAIR_STATUS]  = cks_sv_h_repair_status;
}

/* ---- life cycle and progress ------------------------------------------------------ */

static void cks_sv_cv_expire(const void *key, size_t len, void *value, void *arg)
{
    cks_sv_version_t *v = value;
    uint64_t now        = *(uint64_t *)arg;
    if (cks_sv_cv_open(v) && v->failed == CKS_OK && v->open_deadline_ns <= now) {
        v->failed = CKS_ERR_TIMEOUT;
        snprintf(v->why, sizeof(v->why),
                 "%u of %u ranks finished and %llu objects were protected before the "
                 "version's deadline",
                 v->nranks_done, v->rec.nranks, (unsigned long long)v->nobjects);
    }
}

void cks_sv_cv_kick(const void *key, size_t len, void *value, void *arg)
{
    cks_sv_version_t *v = value;
    if (cks_sv_cv_open(v) && v->failed != CKS_OK) {
        *(cks_sv_version_t **)arg = v;
    }
}

/* Spread the puts whose encoding finished (a list of the encoders'
 * links, oldest first). */
static void cks_sv_enc_spread(cks_workq_job_t *l)
{
    while (l != NULL) {
        cks_enc_job_t *e = CKS_CONTAINER_OF(l, cks_enc_job_t, wq);
        l                = l->next;
        cks_cput_spread(e->arg);
    }
}

int cks_sv_cluster_progress(cks_server_h s)
{
    uint64_t now = cks_time_ns();

    if (s->map == NULL) {
        return -1;
    }
    if (s->nlost > 0) {
        /* versions that were open when this server stopped: the others
         * hold chunks of them, which only this coordinator can release -
         * unless another candidate took the version over meanwhile: it is
         * claimed again first (coord.c) */
        for (size_t i = 0; i < s->nlost; i++) {
            cks_sv_relost_add(s, s->lost_jobs[i], strlen(s->lost_jobs[i]), s->lost_versions[i],
                              now);
        }
        free(s->lost_jobs);
        free(s->lost_versions);
        s->lost_jobs     = NULL;
        s->lost_versions = NULL;
        s->nlost         = 0;
    }
    if (s->relost != NULL) {
        cks_sv_relost_run(s, now);
    }
    if (s->slow != NULL) {
        cks_sv_slow_sends(s, 0);
    }
    if (s->owed != NULL && now >= s->owed_next_ns) {
        s->owed_next_ns = now + CKS_SV_OWED_EVERY;
        cks_sv_owed_send(s, 0);
    }
    if (now >= s->claims_sweep_ns) {
        s->claims_sweep_ns = now + 1000000000ull;
        cks_sv_claims_expire(s);
    }
    int probing = cks_sv_peers_probe(s);
    cks_sv_enc_spread(cks_enc_take_done(&s->enc));
    /* seals past their deadline fail (one per pass: checking changes the table) */
    cks_hmap_foreach(s->versions, cks_sv_cv_expire, &now);
    /* and those owed objects by a primary that is gone */
    int owing   = 0;
    void *oa[3] = {s, &now, &owing};
    cks_hmap_foreach(s->versions, cks_sv_cv_owed_each, oa);
    cks_sv_version_t *late = NULL;
    cks_hmap_foreach(s->versions, cks_sv_cv_kick, &late);
    if (late != NULL) {
        cks_sv_cv_check(s, late);
    }
    int rp_timeout = cks_rp_progress(s);
    int timeout    = cks_tp_worker_expire(s->tp);
    int reads_ms   = cks_sv_reads_expire(s);
    if (reads_ms >= 0 && (timeout < 0 || reads_ms < timeout)) {
        timeout = reads_ms;
    }
    if (rp_timeout >= 0 && (timeout < 0 || rp_timeout < timeout)) {
        timeout = rp_timeout;
    }
    if (probing && (timeout < 0 || timeout > (int)(CKS_SV_PEER_PROBE_NS / 1000000))) {
        timeout = (int)(CKS_SV_PEER_PROBE_NS / 1000000); /* the next probe */
    }
    if (owing && (timeout < 0 || timeout > (int)(CKS_SV_OWED_EVERY_NS / 1000000))) {
        timeout = (int)(CKS_SV_OWED_EVERY_NS / 1000000); /* the next question */
    }
    /* wake at least once a second while seals wait */
    return timeout < 0 || timeout > 1000 ? 1000 : timeout;
}

cks_status_t cks_sv_cluster_init(cks_server_h s)
{
    char err[256];
    cks_status_t status;
    unsigned encoders = s->p.encoders ? s->p.encoders : 1;

    status = cks_cluster_load(s->p.cluster_map, &s->map, err, sizeof(err));
    if (status != CKS_OK) {
        return status;
    }
    cks_sv_handlers_cluster(s); /* a cluster server's requests, from here on */
    status = cks_cluster_find(s->map, s->p.server_id, &s->self);
    if (status != CKS_OK) {
        cks_error("server id %u is not in the cluster map %s", s->p.server_id,
                  s->p.cluster_map);
        return CKS_ERR_INVALID_PARAM;
    }
    s->peers = calloc(cks_cluster_nservers(s->map), sizeof(*s->peers));
    if (s->peers == NULL || cks_sv_claims_init(s) != CKS_OK) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_rp_init(s);
    if (status != CKS_OK) {
        return status;
    }
    return cks_enc_start(&s->enc, encoders, s->tp);
}

void cks_sv_cluster_quiesce(cks_server_h s)
{
    if (s->map == NULL) {
        return;
    }
    /* What the encoders finished is spread now: with the transport
     * quiesced, its chunk sends are refused at once and the objects fail
     * (their callbacks run, so nothing they own is left behind). */
    cks_sv_enc_spread(cks_enc_stop(&s->enc));
    cks_sv_slow_sends(s, 1); /* test builds: sends held back end now */
    cks_sv_owed_send(s, 1);  /* what was owed is forgotten (in memory only) */
}

void cks_sv_cluster_fini(cks_server_h s)
{
    if (s->map == NULL) {
        return;
    }
    cks_sv_cluster_quiesce(s);
    cks_rp_fini(s);
    cks_sv_claims_fini(s);
    while (s->relost != NULL) {
        cks_sv_relost_t *r = s->relost;
        s->relost          = r->next;
        free(r);
    }
    while (s->owed != NULL) {
        cks_sv_owed_t *o = s->owed;
        s->owed          = o->next;
        free(o);
    }
    s->nowed = 0;
    free(s->deferred); /* the arena goes with the server */
    s->deferred  = NULL;
    s->ndeferred = s->capdeferred = 0;
    for (size_t i = 0; s->peers != NULL && i < cks_cluster_nservers(s->map); i++) {
        if (s->peers[i].conn != NULL) {
            cks_tp_conn_put(s->peers[i].conn);
        }
    }
    free(s->peers);
    for (unsigned k = 0; k <= CKS_EC_MAX_K; k++) {
        for (unsigned m = 0; m <= CKS_EC_MAX_M; m++) {
            cks_ec_destroy(s->ec[k][m]);
        }
    }
    cks_cluster_free(s->map);
    s->map = NULL;
    cks_sv_handlers_standalone(s); /* nothing of the cluster is left to serve it */
}
