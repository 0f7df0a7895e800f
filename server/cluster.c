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
 * The files, top down, each calling only those below it: this one (a
 * cluster server's handler table, the cluster's progress and life cycle);
 * grant.c (VERSION_CLAIM answered); takeover.c, in front of seal.c (a
 * rank's seal, abort, delete); primary.c (puts); objects.c (OBJECT_DONE);
 * lost.c (versions this server lost track of); coord.c (a candidate's
 * claims); outcome.c (commit, abort, the broadcasts); member.c (what a
 * member is sent); fence.c; and claims.c, the table all of them read
 * (grants, reports kept, versions to claim again, who coordinates what).
 *
 * Never: encode or run an LMDB write here (encoder threads and the metadata
 * writer do), or wait: every step is a callback.
 */
#include "cluster_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a cluster server's handlers (on top of the standalone ones, dispatch.c) ---- */

CKS_SV_HANDLER(cks_sv_h_cluster_put,
               cks_sv_cluster_put(s, conn, hdr->req_id,
                                  (hdr->flags & CKS_WIRE_F_PARTS) && b->m_PUT.size > 0,
                                  &b->m_PUT, data))
CKS_SV_HANDLER(cks_sv_h_cluster_seal,
               cks_sv_cluster_seal(s, conn, hdr->req_id, hdr->flags, &b->m_VERSION_SEAL.job,
                                   b->m_VERSION_SEAL.version, b->m_VERSION_SEAL.nobjects,
                                   b->m_VERSION_SEAL.digest, b->m_VERSION_SEAL.rank,
                                   &b->m_VERSION_SEAL.primaries))
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
CKS_SV_HANDLER(cks_sv_h_repair_done,
               cks_rp_repair_done(s, conn, hdr->req_id, &b->m_REPAIR_DONE))

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
    h[CKS_MSG_REPAIR_DONE]    = cks_sv_h_repair_done;
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

/* arg: {now, ms until the next grace ends (-1: none), a version whose grace
 * ended (answered after the walk: answers may end connections)} */
static void cks_sv_cv_grace_each(const void *key, size_t len, void *value, void *arg)
{
    void **a              = arg;
    cks_sv_version_t *v   = value;
    uint64_t now          = *(uint64_t *)a[0];
    int *ms               = a[1];
    cks_sv_version_t **due = a[2];
    (void)key;
    (void)len;
    if (v->told_due_ns == 0 || v->bcast == 0) {
        return;
    }
    int left = now >= v->told_due_ns ? 0 : (int)((v->told_due_ns - now + 999999) / 1000000);
    if (left == 0 && *due == NULL) {
        *due = v;
    }
    if (*ms < 0 || left < *ms) {
        *ms = left;
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
    if (s->fences_again != NULL) {
        cks_sv_fences_again(s, 0);
    }
    if (s->late_releases != NULL) {
        cks_sv_late_releases(s, 0);
    }
    if (s->slow != NULL) {
        cks_sv_slow_sends(s, 0);
    }
    if (s->held_chunks != NULL) {
        cks_sv_held_chunks(s, 0);
    }
    if (s->chunks_again != NULL) {
        cks_sv_chunks_again(s, 0);
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
    int grace_ms              = -1;
    cks_sv_version_t *graced = NULL;
    void *ga[3]               = {&now, &grace_ms, &graced};
    cks_hmap_foreach(s->versions, cks_sv_cv_grace_each, ga);
    if (graced != NULL) {
        cks_sv_drop_grace(s, graced); /* others due: the next pass (timeout 0) */
    }
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
    if (grace_ms >= 0 && (timeout < 0 || grace_ms < timeout)) {
        timeout = grace_ms; /* an abort's or delete's callers answered */
    }
    if (probing && (timeout < 0 || timeout > (int)(CKS_SV_PEER_PROBE_NS / 1000000))) {
        timeout = (int)(CKS_SV_PEER_PROBE_NS / 1000000); /* the next probe */
    }
    if (owing && (timeout < 0 || timeout > (int)(CKS_SV_OWED_EVERY_NS / 1000000))) {
        timeout = (int)(CKS_SV_OWED_EVERY_NS / 1000000); /* the next question */
    }
    if (s->chunks_again != NULL &&
        (timeout < 0 || timeout > (int)(CKS_SV_CHUNK_AGAIN_NS / 1000000))) {
        timeout = (int)(CKS_SV_CHUNK_AGAIN_NS / 1000000); /* a chunk sent again */
    }
    if (s->fences_again != NULL &&
        (timeout < 0 || timeout > (int)(CKS_SV_FENCE_PAUSE_NS / 1000000))) {
        timeout = (int)(CKS_SV_FENCE_PAUSE_NS / 1000000); /* a fence asked again */
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
    return cks_enc_start(&s->enc, encoders, cks_sv_coding_nice(s), s->tp);
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
    cks_sv_held_chunks(s, 1);
    cks_sv_chunks_again(s, 1);
    cks_sv_fences_again(s, 1); /* their outcomes are not recorded */
    cks_sv_late_releases(s, 1);
    cks_sv_owed_send(s, 1);  /* what was owed is forgotten (in memory only) */
}

void cks_sv_cluster_fini(cks_server_h s)
{
    if (s->map == NULL) {
        return;
    }
    cks_sv_cluster_quiesce(s);
    cks_rp_fini(s);
    cks_sv_takeovers_fini(s);
    cks_sv_claims_fini(s);
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
