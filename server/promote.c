/*
 * DESIGN: the coordinator's side of repair: it checks its DEGRADED
 * versions with their members and records each PROTECTED once every chunk
 * is back: every 2 s, and at once when a member says that it has nothing
 * left to rebuild (REPAIR_DONE). See repair.c for the whole design.
 *
 * Never: mark a version PROTECTED before every member has its chunks.
 */
#include "repair_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- coordinator: DEGRADED to PROTECTED ---------------------------------------------- */

uint64_t cks_rp_check_every(void)
{
    /* test builds, fault repair_check_rare: only REPAIR_DONE makes it sooner */
    return cks_fault_fire("repair_check_rare") ? CKS_RP_CHECK_RARE_NS : CKS_RP_CHECK_EVERY_NS;
}

static void cks_rp_promoted_sent(void *arg, cks_status_t status, const char *msg)
{
    (void)arg; /* a server that misses it learns it by catch-up */
    (void)status;
    (void)msg;
}

static void cks_rp_promoted(cks_server_h s, cks_mdq_job_t *j)
{
    if (j->status == CKS_OK) {
        cks_info("version %llu of '%s' is PROTECTED again: every chunk is stored",
                 (unsigned long long)j->version, j->job);
        cks_msg_version_commit_t m = {0};
        m.job = (cks_wire_str_t){j->job, j->job_len};
        cks_sv_entry_from_rec(&m.v, &j->rec);
        m.last   = 1;
        m.retain = 0;
        for (size_t pos = 0; !s->stop && pos < cks_cluster_nservers(s->map); pos++) {
            cks_tp_conn_h conn = pos == s->self ? NULL : cks_sv_peer_conn(s, pos);
            if (conn != NULL) {
                (void)cks_tp_call(conn, CKS_MSG_VERSION_COMMIT, 0, &m, NULL, 0, NULL,
                                  CKS_RP_CALL_MS, cks_rp_promoted_sent, NULL);
            }
        }
    }
    free(j->objs);
    free(j);
}

static void cks_rp_check_end(cks_rp_check_t *c)
{
    cks_server_h s = c->s;
    cks_rp_t *rp   = s->rp;
    uint8_t key[CKS_JOB_MAX_LEN + 16];

    if (!s->stop && c->clean == c->total) {
        cks_md_version_t now;
        cks_wire_str_t job = {c->job, c->job_len};
        /* still the record the question was about (not dropped meanwhile) */
        if (cks_sv_version_lookup(s, &job, c->rec.version, &now) == CKS_OK &&
            now.state == CKS_VSTATE_DEGRADED) {
            cks_mdq_job_t *j = cks_sv_mdq_job(s, CKS_MDQ_MANIFEST, c->job, c->job_len,
                                              c->rec.version);
            if (j != NULL) {
                j->has_rec        = 1;
                j->rec_if_restorable = 1;
                j->rec            = now;
                j->rec.state      = CKS_VSTATE_PROTECTED;
                j->rec.redundancy = now.ec_m;
                j->rec.missing    = 0;
                j->done           = cks_rp_promoted;
                cks_mdq_push(&s->mdq, j);
            }
        }
    }
    cks_hmap_del(rp->checking, key, cks_vkey(key, c->job, c->job_len, c->rec.version));
    rp->checks--;
    free(c);
}

static void cks_rp_check_done(void *arg, cks_status_t status, const char *msg)
{
    cks_rp_check_t *c = arg;
    c->clean += status == CKS_OK;
    if (--c->waiting == 0) {
        cks_rp_check_end(c);
    }
}

void cks_rp_check_versions(cks_server_h s)
{
    cks_rp_t *rp     = s->rp;
    cks_rp_vers_t vs = {NULL, 0, 0, 1, s};
    cks_md_txn_h txn;

    rp->next_check_ns = cks_time_ns() + cks_rp_check_every();
    if (cks_md_txn_begin(s->md, 0, &txn) != CKS_OK) {
        return;
    }
    (void)cks_md_version_foreach(txn, cks_rp_vers_add, &vs);
    for (size_t i = 0; i < vs.n && rp->checks < CKS_RP_CHECKS_MAX; i++) {
        uint8_t key[CKS_JOB_MAX_LEN + 16];
        size_t klen = cks_vkey(key, vs.v[i].job, vs.v[i].job_len, vs.v[i].rec.version);
        uint64_t here;
        if (cks_hmap_get(rp->checking, key, klen) != NULL ||
            cks_rp_walk(s, txn, vs.v[i].job, vs.v[i].job_len, &vs.v[i].rec, NULL, NULL,
                        &here) != CKS_OK) {
            continue;
        }
        if (here > 0) {
            rp->scan_wanted = 1; /* this server misses chunks of it: not yet */
            continue;
        }
        cks_rp_check_t *c = calloc(1, sizeof(*c));
        if (c == NULL || cks_hmap_put(rp->checking, key, klen, c) != CKS_OK) {
            free(c);
            break;
        }
        c->s = s;
        memcpy(c->job, vs.v[i].job, vs.v[i].job_len);
        c->job_len = vs.v[i].job_len;
        c->rec     = vs.v[i].rec;
        c->total   = (unsigned)cks_cluster_nservers(s->map);
        c->clean   = 1; /* this server */
        c->waiting = 1; /* held until every question is out */
        rp->checks++;
        cks_msg_version_ref_t m = {{c->job, c->job_len}, c->rec.version};
        for (size_t pos = 0; pos < cks_cluster_nservers(s->map); pos++) {
            cks_tp_conn_h conn = pos == s->self ? NULL : cks_sv_peer_conn(s, pos);
            if (conn == NULL) {
                continue;
            }
            c->waiting++;
            if (cks_tp_call(conn, CKS_MSG_REPAIR_CHECK, 0, &m, NULL, 0, NULL, CKS_RP_CALL_MS,
                            cks_rp_check_done, c) != CKS_INPROGRESS) {
                c->waiting--;
            }
        }
        cks_rp_check_done(c, CKS_ERR_CANCELED, NULL); /* the hold */
    }
    cks_md_txn_abort(txn);
    free(vs.v);
}

void cks_rp_repair_check(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                         const cks_msg_version_ref_t *m)
{
    cks_md_version_t rec;
    cks_md_txn_h txn;
    uint64_t n = 0;
    cks_status_t status = cks_sv_check_names(&m->job, NULL);

    if (status == CKS_OK && (s->rp == NULL || !s->rp->synced)) {
        status = CKS_ERR_BUSY;
    }
    if (status == CKS_OK) {
        status = cks_md_txn_begin(s->md, 0, &txn);
    }
    if (status == CKS_OK) {
        status = cks_md_version_get(txn, m->job.ptr, m->job.len, m->version, &rec);
        if (status == CKS_OK && !cks_rp_restorable(rec.state)) {
            status = CKS_ERR_NOT_RESTORABLE;
        }
        if (status == CKS_OK) {
            status = cks_rp_walk(s, txn, m->job.ptr, m->job.len, &rec, NULL, NULL, &n);
        }
        cks_md_txn_abort(txn);
    }
    if (status == CKS_OK && n > 0) {
        /* chunks placed here are missing (a chunk put that timed out while
         * this server was up): look for them now */
        s->rp->scan_wanted = 1;
        status             = CKS_ERR_BUSY;
    }
    cks_sv_reply_status(conn, req_id, status,
                        status == CKS_OK ? NULL : "%llu chunks of version %llu missing here (%s)",
                        (unsigned long long)n, (unsigned long long)m->version,
                        cks_status_string(status));
}

static void cks_rp_told(void *arg, cks_status_t status, const char *msg)
{
    (void)arg; /* one that misses it checks at its next tick */
    (void)status;
    (void)msg;
}

void cks_rp_tell_done(cks_server_h s)
{
    cks_msg_version_ref_t m = {cks_wire_cstr(NULL), 0}; /* no version: all of them */
    cks_rp_t *rp            = s->rp;
    cks_info("repair: nothing left to rebuild here (%llu chunks rebuilt, %llu of them sent "
             "to their members; %llu chunk reads written here by their members, %llu as "
             "payloads; %llu fetch slots retired, %llu handed to another server than "
             "the one that wrote there last); telling the coordinators",
             (unsigned long long)rp->chunks_done, (unsigned long long)rp->chunks_sent,
             (unsigned long long)rp->reads_into, (unsigned long long)rp->reads_payload,
             (unsigned long long)rp->reg_retired, (unsigned long long)rp->reg_new_writer);
    rp->next_check_ns = 0;
    for (size_t pos = 0; !s->stop && pos < cks_cluster_nservers(s->map); pos++) {
        cks_tp_conn_h conn = pos == s->self ? NULL : cks_sv_peer_conn(s, pos);
        if (conn != NULL) {
            (void)cks_tp_call(conn, CKS_MSG_REPAIR_DONE, 0, &m, NULL, 0, NULL, CKS_RP_CALL_MS,
                              cks_rp_told, NULL);
        }
    }
}

void cks_rp_repair_done(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_version_ref_t *m)
{
    (void)m; /* every DEGRADED version this server coordinates is checked */
    if (s->rp != NULL) {
        s->rp->next_check_ns = 0; /* cks_rp_progress() checks (after a check running now) */
    }
    cks_sv_reply_status(conn, req_id, s->rp != NULL ? CKS_OK : CKS_ERR_UNSUPPORTED, NULL);
}
