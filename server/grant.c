/*
 * DESIGN: VERSION_CLAIM answered, the server's side of another's ballot:
 * a begin's claim granted or refused and a takeover's judged (by coord.c's
 * rules), a fence (claims.c's rule), a grant released, and a takeover's
 * call for the reports this server kept (sent by takeover.c). See coord.c
 * for the whole design.
 *
 * Never: grant a ballot coord.c's rules refuse.
 */
#include "coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A takeover's claim from a peer, judged: the answer. */
typedef struct {
    cks_tp_conn_h conn;
    uint64_t req_id;
} cks_sv_claim_reply_t;

static void cks_sv_claim_judged(void *arg, cks_status_t status, const char *why)
{
    cks_sv_claim_reply_t *r = arg;
    cks_sv_reply_status(r->conn, r->req_id, status, status == CKS_OK ? NULL : "%s",
                        why != NULL ? why : "");
    cks_tp_conn_put(r->conn);
    free(r);
}

/* ---- VERSION_CLAIM from a peer ------------------------------------------------------ */

void cks_sv_version_claim(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                          const cks_msg_version_claim_t *m)
{
    char why[CKS_MSG_MAX_LEN] = "";
    cks_status_t st           = cks_sv_check_names(&m->job, NULL);

    if (st != CKS_OK || m->coord >= cks_cluster_nservers(s->map) || m->ttl_s == 0 ||
        m->op > CKS_CLAIM_OP_REPORT) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM, "bad claim");
        return;
    }
    if (m->op == CKS_CLAIM_OP_RELEASE) {
        cks_sv_claim_t *cl = cks_sv_claim_get(s, m->job.ptr, m->job.len, m->version);
        if (cl != NULL && cl->coord == m->coord && cl->round == m->round && !cl->fenced) {
            cks_sv_claim_forget(s, m->job.ptr, m->job.len, m->version);
        }
        cks_sv_reply_status(conn, req_id, CKS_OK, NULL);
        return;
    }
    if (m->op == CKS_CLAIM_OP_FENCE) {
        st = cks_sv_fence_here(s, &m->job, m->version, m->coord, m->round, m->ttl_s, why,
                               sizeof(why));
        cks_sv_reply_status(conn, req_id, st, st == CKS_OK ? NULL : "%s", why);
        return;
    }
    if (m->op == CKS_CLAIM_OP_REPORT) {
        /* also when this server did not grant the takeover (it was slow, or
         * reaches the old coordinator): reports are facts, sent to whoever
         * won a majority; one that does not coordinate the version refuses */
        if (!cks_fault_fire("report_lost")) { /* test builds: the question is lost */
            cks_sv_kept_resend(s, &m->job, m->version, m->coord);
        }
        cks_sv_reply_status(conn, req_id, CKS_OK, NULL);
        return;
    }
    if (m->round > 0) {
        /* a takeover: judged here, maybe after asking the holder */
        cks_sv_claim_reply_t *r = malloc(sizeof(*r));
        if (r == NULL) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
            return;
        }
        r->conn   = conn;
        r->req_id = req_id;
        cks_tp_conn_get(conn);
        cks_sv_judge(s, m, cks_sv_claim_judged, r);
        return;
    }
    st = cks_sv_claim_check(s, &m->job, m->version, m->coord, why, sizeof(why));
    if (st == CKS_OK) {
        st = cks_sv_claim_set(s, m->job.ptr, m->job.len, m->version, m->coord, 0, m->ttl_s, m);
        snprintf(why, sizeof(why), "%s", st == CKS_OK ? "" : "server out of memory");
    }
    if (st == CKS_OK) {
        cks_debug("granted version %llu of '%.*s' to coordinator %u",
                  (unsigned long long)m->version, (int)m->job.len, m->job.ptr, m->coord);
    }
    cks_sv_reply_status(conn, req_id, st, st == CKS_OK ? NULL : "%s", why);
}
