/*
 * DESIGN: versions this server, as a coordinator candidate, lost track of:
 * objects reported for a version it does not know or that ended (orphans),
 * and versions left OPEN here without their coordinator state (a restart,
 * a fence that found no majority). Each is claimed first (coord.c) - another
 * candidate may coordinate it - and aborted everywhere (outcome.c) only
 * once this server wins the claim. The list of versions to claim again is
 * claims.c's; this file runs it from the cluster's progress (cluster.c).
 *
 * Never: drop a version before a majority granted this server its claim.
 */
#include "cluster_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- aborted everywhere ------------------------------------------------------------- */

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

/* ---- objects of versions not open here ---------------------------------------------- */

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

/* ---- versions left OPEN without their coordinator state ----------------------------- */

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
 * cluster_int.h; the list is claims.c's. */

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
    /* Refused because a server holds the version's record (VERSION_EXISTS:
     * another candidate committed it, or it was aborted): catch-up brings
     * the outcome here, and cks_sv_relost_run() then forgets the entry.
     * Claimed again all the same: when every server that held it retired it
     * (retention, a delete) before catch-up fetched its manifest here,
     * nothing else would ever end the OPEN record, and a delete of the
     * version would be answered BUSY for good
     * (repair_race/version_left_open_by_its_restarted_coordinator_and_retired_elsewhere_ends).
     * A claim wins only where a majority holds neither a record nor a grant. */
    if (status != CKS_OK && status != CKS_ERR_SHUTTING_DOWN && r != NULL &&
        ++r->tries < CKS_SV_RELOST_TRIES) {
        if (status == CKS_ERR_NOT_COORDINATOR) {
            r->round++; /* a higher ballot: granted where its holder does not answer */
        }
        r->next_ns = cks_time_ns() + CKS_SV_RELOST_EVERY_NS;
        cks_log(status == CKS_ERR_VERSION_EXISTS && r->tries == 1 ? CKS_LOG_WARN : CKS_LOG_INFO,
                "version %llu of '%.*s', open here without its coordinator: %s; kept OPEN "
                "until its outcome comes (catch-up), claimed again in %llu s (ballot %u)",
                (unsigned long long)m->version, (int)m->job.len, m->job.ptr,
                why != NULL ? why : cks_status_string(status),
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

void cks_sv_relost_run(cks_server_h s, uint64_t now)
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
                                     0,          0};
        r->in_flight = 1;
        cks_sv_claim_lost(s, &b, r->round, cks_sv_lost_claimed); /* may free r */
    }
}
