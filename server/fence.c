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
    struct cks_sv_fencing *next; /* s->fences_again, while it waits to ask again */
    cks_server_h s;
    cks_sv_version_t *v; /* held by the caller until done runs */
    cks_sv_fenced_t done;
    uint32_t ttl_s;
    unsigned need, acked, answered, asked;
    unsigned busy;  /* servers that hold another server's begin claim for now */
    unsigned tries; /* rounds asked */
    int decided;
    int again;      /* this round failed on a claim that ends soon: ask again */
    uint64_t again_ns;
    uint8_t *state; /* by position: CKS_SV_GRANTED, CKS_SV_UNREACHED, CKS_SV_REFUSED */
    cks_status_t refusal;
    char why[CKS_MSG_MAX_LEN];
};

static void cks_sv_fence_round(struct cks_sv_fencing *f);

static void cks_sv_fence_decide(struct cks_sv_fencing *f)
{
    if (!f->decided && f->acked >= f->need) {
        f->decided = 1;
        f->done(f->s, f->v, CKS_OK, NULL);
    } else if (!f->decided && !f->again && f->acked + (f->asked - f->answered) < f->need) {
        if (f->busy > 0 && f->tries < CKS_SV_FENCE_TRIES && !f->s->stop) {
            /* refused by servers that hold the begin claim of a server
             * that cannot win it now (this one won its ballot): a
             * candidate claiming a version it does not know, to learn who
             * coordinates it (lost.c), or a begin racing this one. That
             * claim is withdrawn once it loses (coord.c): asked again */
            f->again = 1;
        } else {
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
    }
    if (f->answered < f->asked) {
        return;
    }
    if (f->again && !f->decided) {
        /* every answer of this round is in: the next after a pause */
        cks_info("version %llu of '%s': %u of %u servers fenced its ballot, %u hold another "
                 "server's begin claim: asking again in %llu ms (round %u of %u)",
                 (unsigned long long)f->v->version, f->v->job, f->acked, f->asked, f->busy,
                 (unsigned long long)(CKS_SV_FENCE_PAUSE_NS / 1000000ull), f->tries + 1,
                 CKS_SV_FENCE_TRIES);
        f->again_ns        = cks_time_ns() + CKS_SV_FENCE_PAUSE_NS;
        f->next            = f->s->fences_again;
        f->s->fences_again = f;
        return;
    }
    free(f->state);
    free(f);
}

static void cks_sv_fence_answered(void *arg, cks_status_t status, const char *msg)
{
    cks_sv_ask_t *call       = arg;
    struct cks_sv_fencing *f = call->owner;
    f->answered++;
    if (status == CKS_OK) {
        f->acked++;
        f->state[call->pos] = CKS_SV_GRANTED;
    } else if (status == CKS_ERR_NOT_COORDINATOR || status == CKS_ERR_VERSION_EXISTS ||
               status == CKS_ERR_BUSY) {
        f->state[call->pos] = CKS_SV_REFUSED;
        f->busy += status == CKS_ERR_BUSY;
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

/* One round: this server's own fence, then every other server's. */
static void cks_sv_fence_round(struct cks_sv_fencing *f)
{
    cks_server_h s            = f->s;
    cks_sv_version_t *v       = f->v;
    size_t n                  = cks_cluster_nservers(s->map);
    char why[CKS_MSG_MAX_LEN] = "";
    cks_wire_str_t job        = {v->job, v->job_len};
    cks_status_t st;

    memset(f->state, 0, n);
    f->asked    = (unsigned)n;
    f->acked    = 0;
    f->busy     = 0;
    f->again    = 0;
    f->refusal  = CKS_OK;
    f->why[0]   = '\0';
    f->tries++;
    st = cks_sv_fence_here(s, &job, v->version, (uint32_t)s->self, v->round, f->ttl_s, why,
                           sizeof(why));
    f->answered = 1;
    if (st == CKS_OK) {
        f->acked = 1;
        f->state[s->self] = CKS_SV_GRANTED;
    } else {
        f->state[s->self] = CKS_SV_REFUSED;
        f->busy += st == CKS_ERR_BUSY;
        f->refusal        = CKS_ERR_NOT_COORDINATOR;
        snprintf(f->why, sizeof(f->why), "server %zu (itself): %s", s->self, why);
    }
    cks_msg_version_claim_t cm = {job, v->version, (uint32_t)s->self, CKS_CLAIM_OP_FENCE,
                                  f->ttl_s, v->round, 0, 0, 0, 0, 0, 0, 0};
    f->asked++; /* one pseudo-answer holds f while the calls go out */
    unsigned unasked = cks_sv_claim_ask_others(s, &cm, CKS_SV_CLAIM_TIMEOUT_MS,
                                               cks_sv_fence_answered, f, f->state);
    f->answered += unasked + 1; /* and the hold */
    cks_sv_fence_decide(f);
}

void cks_sv_fence(cks_server_h s, cks_sv_version_t *v, uint32_t ttl_s, cks_sv_fenced_t done)
{
    struct cks_sv_fencing *f = calloc(1, sizeof(*f));

    if (f == NULL || (f->state = calloc(cks_cluster_nservers(s->map), 1)) == NULL) {
        free(f);
        done(s, v, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    f->s     = s;
    f->v     = v;
    f->done  = done;
    f->ttl_s = ttl_s;
    f->need  = (unsigned)(cks_cluster_nservers(s->map) / 2 + 1);
    cks_sv_fence_round(f);
}

void cks_sv_fences_again(cks_server_h s, int all)
{
    uint64_t now                 = cks_time_ns();
    struct cks_sv_fencing **pp   = &s->fences_again;
    while (*pp != NULL) {
        struct cks_sv_fencing *f = *pp;
        if (!all && f->again_ns > now) {
            pp = &f->next;
            continue;
        }
        *pp = f->next;
        if (all || s->stop) { /* shutting down: the outcome is not recorded */
            f->done(s, f->v, CKS_ERR_SHUTTING_DOWN, "the server is shutting down");
            free(f->state);
            free(f);
            continue;
        }
        cks_sv_fence_round(f); /* may queue f again: taken off the list first */
    }
}
