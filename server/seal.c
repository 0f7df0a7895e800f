/*
 * DESIGN: the ranks' end of a version at its coordinator: VERSION_SEAL
 * (each rank's count, digest and per-primary tallies, objects.c's), and
 * VERSION_ABORT and VERSION_DELETE; the callers wait for the version's
 * outcome (outcome.c), or learn that another server coordinates it, that
 * it was aborted and why, or that it is not open. A seal that may start a
 * takeover passes takeover.c first. See cluster.c for the whole flow.
 *
 * Never: count a rank's seal twice (a seal sent again waits with the others).
 */
#include "cluster_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cks_status_t cks_sv_waiter_add(cks_sv_version_t *v, cks_tp_conn_h conn,
                                      uint64_t req_id, int seal)
{
    void *p = cks_array_grow(v->waiters, &v->capwaiters, v->nwaiters + 1,
                             sizeof(*v->waiters), 4);
    if (p == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    v->waiters = p;
    v->waiters[v->nwaiters++] = (cks_sv_waiter_t){conn, req_id, seal};
    cks_tp_conn_get(conn);
    return CKS_OK;
}

void cks_sv_cluster_end(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, unsigned type,
                        uint32_t flags, const cks_wire_str_t *job, uint64_t version,
                        uint64_t nobjects, uint64_t digest, uint32_t rank,
                        const cks_wire_str_t *primaries)
{
    cks_sv_version_t *v = cks_sv_version_find(s, job, version);
    cks_md_version_t rec;
    cks_status_t status;
    /* a rank's seal sent again (its first went unanswered): not a second
     * finish of that rank */
    int resent = type == CKS_MSG_VERSION_SEAL && (flags & CKS_WIRE_F_RESENT);
    /* an abort or delete whose callers were answered while its drop still
     * goes out: a seal or an abort is told, as after it, that the version
     * ended; a delete, that it was deleted (or BUSY after an abort: one
     * drop at a time) */
    int told = v != NULL && v->bcast > 0 && v->told && type != CKS_MSG_VERSION_DELETE;

    if (v != NULL && v->bcast > 0 && v->told && type == CKS_MSG_VERSION_DELETE &&
        v->wait == CKS_SV_WAIT_DELETE) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_SUCH_VERSION,
                            "version %llu of '%.*s' was deleted", (unsigned long long)version,
                            (int)job->len, job->ptr);
        return;
    }

    if (v != NULL && v->bcast > 0 && !told &&
        (v->wait == CKS_SV_WAIT_ABORT || (resent && v->wait == CKS_SV_WAIT_SEAL)) &&
        type != CKS_MSG_VERSION_DELETE) {
        /* already being aborted (an object failed, or the deadline): this
         * caller gets the outcome, and its reason, with the others */
        if (cks_sv_waiter_add(v, conn, req_id, type == CKS_MSG_VERSION_SEAL) != CKS_OK) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        }
        return;
    }
    if (v != NULL && v->bcast > 0 && !told) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_BUSY,
                            "version %llu is being committed, aborted or deleted",
                            (unsigned long long)version);
        return;
    }
    cks_status_t gone = CKS_OK;
    if (type == CKS_MSG_VERSION_DELETE) {
        status = cks_sv_version_lookup(s, job, version, &rec);
        if (status == CKS_OK && rec.state == CKS_VSTATE_OPEN) {
            status = CKS_ERR_BUSY; /* abort it first */
        }
        if (status == CKS_ERR_NO_SUCH_VERSION || status == CKS_ERR_NO_SUCH_JOB) {
            /* not here (retention or a drop took it, or it was never
             * here): other servers may still hold it - one that missed a
             * drop, or kept it for a restore's lease - so the drop goes to
             * every server all the same, and the caller hears that it was
             * not here */
            gone = status;
            memset(&rec, 0, sizeof(rec));
            rec.version = version;
            rec.parent  = CKS_MD_NO_PARENT;
            rec.nranks  = 1;
            status      = CKS_OK;
        }
        if (status != CKS_OK) {
            cks_sv_reply_status(conn, req_id, status, "cannot delete version %llu of '%.*s'",
                                (unsigned long long)version, (int)job->len, job->ptr);
            return;
        }
        if (v == NULL && (v = cks_sv_version_new(s, job, version)) == NULL) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
            return;
        }
        v->rec     = rec;
        v->cluster = 1;
    } else if (!cks_sv_cv_open(v)) {
        char why[CKS_MSG_MAX_LEN];
        if (cks_sv_coordinated_elsewhere(s, v, job, version, why, sizeof(why))) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_NOT_COORDINATOR, "%s", why);
            return;
        }
        const cks_sv_aborted_t *a = cks_sv_aborted_find(s, job, version);
        if (a != NULL && type == CKS_MSG_VERSION_SEAL &&
            cks_sv_version_lookup(s, job, version, &rec) == CKS_OK &&
            rec.state == CKS_VSTATE_ABORTED) {
            /* a rank that finishes after its version failed learns why */
            cks_sv_reply_status(conn, req_id, a->status, "version %llu of '%s' was aborted: %s",
                                (unsigned long long)version, a->job, a->why);
            return;
        }
        if (resent && cks_sv_version_lookup(s, job, version, &rec) == CKS_OK &&
            (rec.state == CKS_VSTATE_PROTECTED || rec.state == CKS_VSTATE_DEGRADED)) {
            /* committed while this rank's first seal went unanswered: the
             * commit had every rank's seal, this one's among them */
            cks_msg_seal_reply_t r = {CKS_OK, cks_wire_cstr(NULL), rec.nobjects, rec.bytes};
            cks_sv_reply(conn, CKS_MSG_SEAL_REPLY, req_id, &r);
            return;
        }
        /* a primary's entry (no objs) is no record: the record says */
        status = v == NULL || v->objs == NULL ? cks_sv_version_lookup(s, job, version, &rec)
                                              : CKS_OK;
        cks_sv_reply_status(conn, req_id, status == CKS_OK ? CKS_ERR_VERSION_NOT_OPEN : status,
                            "version %llu of '%.*s' is not open", (unsigned long long)version,
                            (int)job->len, job->ptr);
        return;
    }
    if (type == CKS_MSG_VERSION_SEAL) {
        if (resent && rank < v->rec.nranks && (v->ranks_done[rank / 8] & (1u << (rank % 8)))) {
            /* sealed here before: it waits with the others again (its
             * first request's answer goes nowhere) */
            if (cks_sv_waiter_add(v, conn, req_id, 1) != CKS_OK) {
                cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
            }
            return;
        }
        if (rank >= v->rec.nranks || (v->ranks_done[rank / 8] & (1u << (rank % 8)))) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                                "rank %u of %u already finished or out of range", rank,
                                v->rec.nranks);
            return;
        }
        if (primaries != NULL && primaries->len % CKS_WIRE_SEAL_PRIMARY_LEN != 0) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_BAD_MESSAGE,
                                "a seal's primaries are %u bytes, not entries of %u",
                                primaries->len, CKS_WIRE_SEAL_PRIMARY_LEN);
            return;
        }
        if (cks_sv_waiter_add(v, conn, req_id, 1) != CKS_OK) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
            return;
        }
        if (primaries != NULL) {
            (void)cks_sv_owed_sealed(s, v, primaries); /* whole entries: checked above */
        }
        v->ranks_done[rank / 8] |= (uint8_t)(1u << (rank % 8));
        v->nranks_done++;
        v->expected = (v->expected == UINT64_MAX ? 0 : v->expected) + nobjects;
        v->expected_digest ^= digest;
        cks_sv_cv_check(s, v);
        return;
    }
    if (cks_sv_waiter_add(v, conn, req_id, 0) != CKS_OK) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    v->wait        = type == CKS_MSG_VERSION_ABORT ? CKS_SV_WAIT_ABORT : CKS_SV_WAIT_DELETE;
    v->bcast_reply = gone;
    if (type == CKS_MSG_VERSION_ABORT) {
        snprintf(v->why, sizeof(v->why), "version %llu was aborted by a writer",
                 (unsigned long long)version);
    }
    cks_sv_cv_finish(s, v, 0);
}
