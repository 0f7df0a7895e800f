/*
 * DESIGN: the one round of VERSION_CLAIM to the other servers (a
 * candidate's claim, coord.c, or a coordinator's fence) and the fence
 * before a coordinator records a version's outcome: a majority must fence
 * its ballot (each server by claims.c's rule, cks_sv_fence_here()). See
 * coord.c for the whole design and why no two coordinators record two
 * outcomes.
 *
 * Never: fence a ballot this server no longer holds.
 */
#include "coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the one round of VERSION_CLAIM to the other servers ---------------------------- */

void cks_sv_why_unreachable(cks_server_h s, const uint8_t *state, int addrs, char *why,
                            size_t why_len, int len)
{
    size_t n = cks_cluster_nservers(s->map);
    for (size_t pos = 0; pos < n && len > 0 && (size_t)len < why_len; pos++) {
        const cks_cluster_server_t *cs = cks_cluster_server(s->map, pos);
        if (state[pos] != CKS_SV_UNREACHED) {
            continue;
        }
        if (addrs) {
            len += snprintf(why + len, why_len - (size_t)len, " %zu (%s:%u)", pos, cs->addr,
                            cs->port);
        } else {
            len += snprintf(why + len, why_len - (size_t)len, " %zu", pos);
        }
    }
}

unsigned cks_sv_claim_ask_others(cks_server_h s, const cks_msg_version_claim_t *cm,
                                 int timeout_ms, cks_tp_call_cb_t answered, void *owner,
                                 uint8_t *state)
{
    size_t n         = cks_cluster_nservers(s->map);
    unsigned unasked = 0;
    for (size_t pos = 0; pos < n; pos++) {
        if (pos == s->self) {
            continue;
        }
        cks_tp_conn_h pc   = cks_sv_peer(s, pos);
        cks_sv_ask_t *call = pc != NULL ? malloc(sizeof(*call)) : NULL;
        if (call != NULL) {
            call->owner = owner;
            call->pos   = pos;
        }
        if (call == NULL || cks_tp_call(pc, CKS_MSG_VERSION_CLAIM, 0, cm, NULL, 0, NULL,
                                        timeout_ms, answered, call) != CKS_INPROGRESS) {
            free(call);
            state[pos] = CKS_SV_UNREACHED;
            unasked++;
        }
    }
    return unasked;
}

/* ---- fence -------------------------------------------------------------------------- */

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
                                  ttl_s, v->round, 0, 0, 0, 0, 0, 0, 0};
    f->asked++; /* one pseudo-answer holds f while the calls go out */
    unsigned unasked = cks_sv_claim_ask_others(s, &cm, CKS_SV_CLAIM_TIMEOUT_MS,
                                               cks_sv_fence_answered, f, f->state);
    f->answered += unasked + 1; /* and the hold */
    cks_sv_fence_decide(f);
}
