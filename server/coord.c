/*
 * Coordinator failover, takeover and their fences (cluster servers).
 *
 * Every version has a list of coordinator candidates
 * (cks_place_coordinators(): the placement coordinator first, then servers
 * on other nodes). A client begins a version at the first candidate it
 * reaches. Before a candidate begins a version it claims it: VERSION_CLAIM
 * to every other server, and it begins only when a majority of all servers
 * (itself included) granted the claim. A grant is a ballot (round, coord):
 * round 0 at a begin. A server grants a begin only when it holds no grant
 * of another coordinator and no record of the version.
 *
 * Takeover (a coordinator that dies after the begin). A rank's finish goes
 * on to the next candidate when the coordinator cannot be reached. That
 * candidate, holding a grant of the version to the coordinator (with the
 * begin's parameters, which travel with every claim), claims the version
 * with a higher ballot (round + 1). A server grants the higher ballot only
 * when nothing stands against it: no record of the version, no higher
 * ballot, no fence (below), and the holder of its grant does not answer it
 * either (asked on a new connection, CKS_SV_TAKEOVER_ASK_MS) - a coordinator
 * that is alive and reachable keeps its version, whatever one client sees.
 * With a majority of grants the candidate opens the version itself, asks
 * every server to report its objects of the version again (REPORT: each
 * server keeps what it reported, and what the coordinator, itself a primary,
 * sent it for safekeeping, until the version's outcome arrives), and takes
 * the ranks' seals as they come (their clients send them again to the next
 * candidate; the seals' per-primary counts work as before). Only versions
 * without a parent are taken over: the delete markers of a child live on its
 * coordinator alone.
 *
 * Fence. Before a coordinator records a version's outcome (commit or abort)
 * it asks every server to fence its ballot (FENCE) and goes on only with a
 * majority: a server fences a ballot only while it still holds it (or holds
 * no grant and no record), and a fenced server grants no other ballot until
 * the outcome arrives. A coordinator that fails to gather the majority (its
 * version taken over, or a majority out of its reach) records nothing,
 * sends nothing, and answers its waiting ranks CKS_ERR_NOT_COORDINATOR (they
 * go on to the next candidate).
 *
 * Why two coordinators can never record two outcomes of one version: a
 * ballot wins only with a majority of grants, an outcome needs a majority of
 * fences, and any two majorities share a server. That server grants a higher
 * ballot only before it fenced the lower (a fenced grant refuses it), and
 * fences the lower only while it still holds it (a higher grant refuses it).
 * So when a ballot's fence succeeded, no higher ballot won afterwards, and
 * when a higher ballot won, the lower one's fence can no longer succeed -
 * whichever ranks reach which candidates, and whether the old coordinator
 * is dead, stopped or cut off.
 *
 * Grants live in memory: a server restarted within one version has
 * forgotten its grant (a second coordinator would need a majority that only
 * forgotten grants make up). A coordinator that restarts with a version it
 * left open claims it again (round 0) before it drops it: refused (another
 * coordinator took it over, or it was committed), it keeps its record OPEN,
 * learns the outcome by catch-up, and claims it again every 5 s until then
 * (lost.c): a version the others retired before catch-up fetched it is
 * then dropped here too.
 *
 * The files: claims.c keeps the grants, the reports kept and the versions
 * to claim again (the table every other file reads); this one holds the
 * rules a server grants by and a candidate's claim; fence.c the one round
 * of VERSION_CLAIM to the others and the fence; grant.c answers
 * VERSION_CLAIM; takeover.c takes a version over; lost.c claims what a
 * restart or a failed fence left OPEN.
 *
 * Never: a begin or takeover without a majority of grants; an outcome
 * recorded or sent without a majority of fences; a grant of a higher ballot
 * by a server that fenced a lower one.
 */
#include "coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ballots and grants ---------------------------------------------------------- */

static int cks_sv_gone(cks_status_t st)
{
    return st == CKS_ERR_UNREACHABLE || st == CKS_ERR_CONN_LOST || st == CKS_ERR_TIMEOUT ||
           st == CKS_ERR_TRANSPORT;
}

/* <0, 0, >0 as ballot (r1, c1) is lower than, equal to, higher than (r2, c2). */
static int cks_sv_ballot_cmp(uint32_t r1, uint32_t c1, uint32_t r2, uint32_t c2)
{
    if (r1 != r2) {
        return r1 < r2 ? -1 : 1;
    }
    return c1 < c2 ? -1 : c1 > c2;
}

/* May `coord` begin the version (round 0), as far as this server knows? */
cks_status_t cks_sv_claim_check(cks_server_h s, const cks_wire_str_t *job, uint64_t version,
                                uint32_t coord, char *why, size_t why_len)
{
    cks_md_version_t rec;
    cks_sv_version_t *v = cks_sv_version_find(s, job, version);
    cks_sv_claim_t *cl  = cks_sv_claim_get(s, job->ptr, job->len, version);
    cks_status_t st;

    if (cl != NULL && cl->coord != coord) {
        snprintf(why, why_len, "version %llu of '%.*s' is coordinated by server %u",
                 (unsigned long long)version, (int)job->len, job->ptr, cl->coord);
        return CKS_ERR_NOT_COORDINATOR;
    }
    if (v != NULL && v->cluster && v->objs != NULL && v->open && coord != s->self) {
        snprintf(why, why_len, "version %llu of '%.*s' is coordinated by server %zu",
                 (unsigned long long)version, (int)job->len, job->ptr, s->self);
        return CKS_ERR_NOT_COORDINATOR;
    }
    st = cks_sv_version_lookup(s, job, version, &rec);
    if (st == CKS_OK) {
        snprintf(why, why_len, "version %llu of '%.*s' already exists",
                 (unsigned long long)version, (int)job->len, job->ptr);
        if (rec.state == CKS_VSTATE_ABORTED && coord != s->self &&
            coord < cks_cluster_nservers(s->map)) {
            /* a coordinator that holds the version OPEN claims it again (it
             * was cut off or stopped while a takeover aborted it, and missed
             * the drop, which its sender may have forgotten in a restart):
             * the abort recorded here is the outcome (no two are recorded),
             * so it is told, until it takes it */
            cks_sv_owe(s, coord, job->ptr, job->len, version, CKS_VSTATE_ABORTED);
        }
        return CKS_ERR_VERSION_EXISTS;
    }
    if (st != CKS_ERR_NO_SUCH_VERSION && st != CKS_ERR_NO_SUCH_JOB) {
        snprintf(why, why_len, "metadata lookup failed");
        return st;
    }
    return CKS_OK;
}

/* ---- takeover: may a higher ballot have the version? ------------------------------- */

/* A message's job copied into `buf` (CKS_JOB_MAX_LEN + 1 bytes, checked),
 * NUL-terminated: the copy, for the message kept with it. */
static cks_wire_str_t cks_sv_job_own(char *buf, const cks_wire_str_t *job)
{
    memcpy(buf, job->ptr, job->len);
    buf[job->len] = '\0';
    return (cks_wire_str_t){buf, job->len};
}

typedef struct {
    cks_server_h s;
    cks_msg_version_claim_t m; /* job points into `job` */
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t holder;
    cks_sv_judged_t done;
    void *arg;
} cks_sv_judge_t;

/* CKS_OK: granted now; CKS_INPROGRESS: first ask *holder_p whether it is
 * alive (unless it is `gone`); else the refusal. */
static cks_status_t cks_sv_judge_now(cks_server_h s, const cks_msg_version_claim_t *m,
                                     int64_t gone, uint32_t *holder_p, char *why,
                                     size_t why_len)
{
    cks_md_version_t rec;
    cks_sv_version_t *v = cks_sv_version_find(s, &m->job, m->version);
    cks_sv_claim_t *cl  = cks_sv_claim_get(s, m->job.ptr, m->job.len, m->version);
    cks_status_t st     = cks_sv_version_lookup(s, &m->job, m->version, &rec);

    why[0] = '\0';
    if (st == CKS_OK && rec.state != CKS_VSTATE_OPEN) {
        snprintf(why, why_len, "version %llu of '%.*s' already ended here (%s)",
                 (unsigned long long)m->version, (int)m->job.len, m->job.ptr,
                 cks_vstate_string(rec.state));
        return CKS_ERR_VERSION_EXISTS;
    }
    if (v != NULL && v->cluster && v->objs != NULL && (v->open || v->bcast > 0) &&
        m->coord != s->self) {
        snprintf(why, why_len, "version %llu of '%.*s' is coordinated by server %zu, which "
                 "answers", (unsigned long long)m->version, (int)m->job.len, m->job.ptr,
                 s->self);
        return CKS_ERR_NOT_COORDINATOR;
    }
    if (cl != NULL) {
        int cmp = cks_sv_ballot_cmp(cl->round, cl->coord, m->round, m->coord);
        if (cmp == 0) {
            return cks_sv_claim_set(s, m->job.ptr, m->job.len, m->version, m->coord, m->round,
                                    m->ttl_s, m);
        }
        if (cl->fenced || cmp > 0) {
            snprintf(why, why_len, "version %llu of '%.*s' is coordinated by server %u%s",
                     (unsigned long long)m->version, (int)m->job.len, m->job.ptr, cl->coord,
                     cl->fenced ? " (recording its outcome)" : " (a higher ballot)");
            return CKS_ERR_NOT_COORDINATOR;
        }
        if (cl->coord != m->coord && cl->coord != s->self && (int64_t)cl->coord != gone) {
            *holder_p = cl->coord;
            return CKS_INPROGRESS;
        }
    } else if (st == CKS_OK && !(v != NULL && v->disowned) && m->coord != s->self) {
        /* OPEN here and no grant: this server coordinated it and
         * restarted (it claims the version itself before it drops it);
         * alive, it does not grant it away */
        snprintf(why, why_len, "version %llu of '%.*s' is open here with no grant",
                 (unsigned long long)m->version, (int)m->job.len, m->job.ptr);
        return CKS_ERR_NOT_COORDINATOR;
    }
    return cks_sv_claim_set(s, m->job.ptr, m->job.len, m->version, m->coord, m->round,
                            m->ttl_s, m);
}

static void cks_sv_judge_asked(void *arg, cks_status_t status, const char *msg)
{
    cks_sv_judge_t *j = arg;
    char why[CKS_MSG_MAX_LEN];
    cks_status_t st;
    uint32_t holder = j->holder;
    (void)msg;

    if (j->s->stop) {
        st = CKS_ERR_SHUTTING_DOWN;
        snprintf(why, sizeof(why), "the server is shutting down");
    } else if (!cks_sv_gone(status)) {
        st = CKS_ERR_NOT_COORDINATOR;
        snprintf(why, sizeof(why), "version %llu of '%s' is coordinated by server %u, which "
                 "answers server %zu", (unsigned long long)j->m.version, j->job, j->holder,
                 j->s->self);
    } else {
        if (j->holder < cks_cluster_nservers(j->s->map) && j->holder != j->s->self) {
            /* skipped for a while, as a member that failed a chunk put is:
             * the broadcast of the version's outcome does not wait for it
             * (it learns the outcome by catch-up) */
            j->s->peers[j->holder].down_ns = cks_time_ns();
        }
        st = cks_sv_judge_now(j->s, &j->m, (int64_t)j->holder, &holder, why, sizeof(why));
        if (st == CKS_INPROGRESS) {
            st = CKS_ERR_NOT_COORDINATOR; /* another holder meanwhile: no second round */
            snprintf(why, sizeof(why), "version %llu of '%s' is coordinated by server %u",
                     (unsigned long long)j->m.version, j->job, holder);
        }
        if (st == CKS_OK) {
            cks_info("granted version %llu of '%s' to server %u (ballot %u): its coordinator, "
                     "server %u, does not answer (%s)", (unsigned long long)j->m.version,
                     j->job, j->m.coord, j->m.round, j->holder, cks_status_string(status));
        }
    }
    j->done(j->arg, st, why);
    free(j);
}

/* Decide a takeover's claim (round > 0) here: done(arg, status, why), now or
 * once the holder of this server's grant was asked whether it is alive. */
void cks_sv_judge(cks_server_h s, const cks_msg_version_claim_t *m, cks_sv_judged_t done,
                  void *arg)
{
    char why[CKS_MSG_MAX_LEN];
    uint32_t holder     = 0;
    cks_status_t st     = cks_sv_judge_now(s, m, -1, &holder, why, sizeof(why));
    cks_sv_judge_t *j;
    cks_tp_conn_h conn;

    if (st != CKS_INPROGRESS) {
        done(arg, st, why);
        return;
    }
    j = malloc(sizeof(*j));
    if (j == NULL) {
        done(arg, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    j->s      = s;
    j->m      = *m;
    j->m.job  = cks_sv_job_own(j->job, &m->job);
    j->holder = holder;
    j->done   = done;
    j->arg    = arg;
    /* a new connection when the last one failed or went unanswered: a
     * killed server refuses it at once, a cut-off one does not answer */
    cks_msg_repair_status_t q = {0};
    conn = holder < cks_cluster_nservers(s->map) ? cks_sv_peer(s, holder) : NULL;
    if (conn == NULL || cks_tp_call(conn, CKS_MSG_REPAIR_STATUS, 0, &q, NULL, 0, NULL,
                                    CKS_SV_TAKEOVER_ASK_MS, cks_sv_judge_asked,
                                    j) != CKS_INPROGRESS) {
        cks_sv_judge_asked(j, CKS_ERR_UNREACHABLE, "cannot connect");
    }
}

/* ---- claiming ---------------------------------------------------------------------- */

static uint32_t cks_sv_claim_ttl(const cks_msg_version_begin_t *m)
{
    return (m->timeout_s ? m->timeout_s : 600) + CKS_SV_CLAIM_MARGIN_S;
}

static void cks_sv_claim_msg(cks_msg_version_claim_t *cm, const struct cks_sv_claiming *c,
                             uint32_t op)
{
    *cm = (cks_msg_version_claim_t){c->m.job,        c->m.version, (uint32_t)c->s->self,
                                    op,              cks_sv_claim_ttl(&c->m),
                                    c->round,        c->m.parent,  c->m.nranks,
                                    c->m.k,          c->m.m,       c->m.chunk_size,
                                    c->m.retain,     c->m.member_ms};
}

void cks_sv_claim_noop(void *arg, cks_status_t status, const char *msg)
{
    (void)arg;
    (void)status;
    (void)msg;
}

/* ---- withdrawing a claim -------------------------------------------------------- */

/* Test builds (fault claim_release_late): a withdrawal - this server's own
 * grant forgotten, a RELEASE to a grantor - done 1.5 s late, as by a
 * claimant whose answers come slowly (a candidate that cannot reach some
 * servers waits for them up to CKS_SV_CLAIM_TIMEOUT_MS). */
struct cks_sv_late_release {
    struct cks_sv_late_release *next;
    uint64_t due_ns;
    size_t pos;
    cks_msg_version_claim_t r; /* r.job points into job */
    char job[CKS_JOB_MAX_LEN + 1];
};

static int cks_sv_release_held(cks_server_h s, size_t pos, const cks_msg_version_claim_t *r)
{
    struct cks_sv_late_release *l;
    if (!cks_fault_fire("claim_release_late") || r->job.len > CKS_JOB_MAX_LEN ||
        (l = calloc(1, sizeof(*l))) == NULL) {
        return 0;
    }
    l->due_ns = cks_time_ns() + 1500000000ull;
    l->pos    = pos;
    l->r      = *r;
    memcpy(l->job, r->job.ptr, r->job.len);
    l->r.job = (cks_wire_str_t){l->job, r->job.len};
    l->next  = s->late_releases;
    s->late_releases = l;
    cks_warn("fault claim_release_late: the claim of version %llu of '%s' (ballot %u) is "
             "withdrawn from server %zu in 1.5 s", (unsigned long long)r->version, l->job,
             r->round, pos);
    return 1;
}

/* Withdraw the claim in r (a RELEASE) from the server at pos: this one's
 * own grant forgotten, or the RELEASE sent. */
static void cks_sv_release_at(cks_server_h s, size_t pos, const cks_msg_version_claim_t *r)
{
    if (pos == s->self) {
        cks_sv_claim_t *cl = cks_sv_claim_get(s, r->job.ptr, r->job.len, r->version);
        if (cl != NULL && cl->coord == s->self && cl->round == r->round && !cl->fenced) {
            cks_sv_claim_forget(s, r->job.ptr, r->job.len, r->version);
        }
        return;
    }
    cks_tp_conn_h conn = cks_sv_peer(s, pos);
    if (conn != NULL) {
        cks_tp_call(conn, CKS_MSG_VERSION_CLAIM, 0, r, NULL, 0, NULL, CKS_SV_CLAIM_TIMEOUT_MS,
                    cks_sv_claim_noop, NULL);
    }
}

static void cks_sv_release(cks_server_h s, size_t pos, const cks_msg_version_claim_t *r)
{
    if (!cks_sv_release_held(s, pos, r)) {
        cks_sv_release_at(s, pos, r);
    }
}

void cks_sv_late_releases(cks_server_h s, int all)
{
    uint64_t now                      = cks_time_ns();
    struct cks_sv_late_release **pp   = &s->late_releases;
    while (*pp != NULL) {
        struct cks_sv_late_release *l = *pp;
        if (!all && l->due_ns > now) {
            pp = &l->next;
            continue;
        }
        *pp = l->next;
        if (!all && !s->stop) {
            cks_info("fault claim_release_late: the claim of version %llu of '%s' withdrawn "
                     "from server %zu", (unsigned long long)l->r.version, l->job, l->pos);
            cks_sv_release_at(s, l->pos, &l->r);
        }
        free(l);
    }
}

/* Withdraw a claim that did not win: here, and where it was granted. */
static void cks_sv_claim_release(struct cks_sv_claiming *c)
{
    cks_server_h s = c->s;
    cks_msg_version_claim_t r;

    if (s->stop || s->claims == NULL) {
        return; /* shutting down: the grants expire */
    }
    cks_sv_claim_msg(&r, c, CKS_CLAIM_OP_RELEASE);
    cks_sv_release(s, s->self, &r);
    for (size_t pos = 0; pos < cks_cluster_nservers(s->map); pos++) {
        if (c->grantors[pos] == CKS_SV_GRANTED && pos != s->self) {
            cks_sv_release(s, pos, &r);
        }
    }
}

static void cks_sv_claiming_free(struct cks_sv_claiming *c)
{
    if (c->conn != NULL) {
        cks_tp_conn_put(c->conn);
    }
    free(c->grantors);
    free(c);
}

/* Decide when the grants make a majority, or can no longer. */
static void cks_sv_claim_decide(struct cks_sv_claiming *c)
{
    if (!c->decided && c->s->stop) {
        c->decided = 1;
        c->lost    = 1;
        c->done(c->s, c->conn, c->req_id, &c->m, CKS_ERR_SHUTTING_DOWN,
                "the server is shutting down");
    }
    if (!c->decided && c->granted >= c->need) {
        c->decided = 1;
        cks_debug("version %llu of '%s': %u of %zu servers granted the claim",
                  (unsigned long long)c->m.version, c->job, c->granted,
                  cks_cluster_nservers(c->s->map));
        c->done(c->s, c->conn, c->req_id, &c->m, CKS_OK, NULL);
    } else if (!c->decided && c->granted + (c->others - c->answered) < c->need) {
        c->decided = 1;
        if (c->refusal == CKS_OK) {
            /* too few servers answer: name those that could not be reached */
            size_t n = cks_cluster_nservers(c->s->map);
            int len  = snprintf(c->why, sizeof(c->why),
                                "cannot coordinate version %llu of '%s': %u of %zu servers "
                                "granted it, a majority (%u) is needed; unreachable:",
                                (unsigned long long)c->m.version, c->job, c->granted, n,
                                c->need);
            cks_sv_why_unreachable(c->s, c->grantors, 1, c->why, sizeof(c->why), len);
            c->refusal = CKS_ERR_NO_QUORUM;
        }
        cks_log(c->takeover ? CKS_LOG_INFO : CKS_LOG_WARN, "%s", c->why);
        c->lost = 1;
        cks_sv_claim_release(c);
        c->done(c->s, c->conn, c->req_id, &c->m, c->refusal, c->why);
    }
    if (c->answered == c->others) {
        cks_sv_claiming_free(c);
    }
}

static void cks_sv_claim_answered(void *arg, cks_status_t status, const char *msg)
{
    cks_sv_ask_t *call        = arg;
    struct cks_sv_claiming *c = call->owner;

    c->answered++;
    if (status == CKS_OK && c->lost && !c->s->stop) {
        cks_msg_version_claim_t r; /* a grant after the claim lost: withdrawn */
        cks_sv_claim_msg(&r, c, CKS_CLAIM_OP_RELEASE);
        cks_sv_release(c->s, call->pos, &r);
    } else if (status == CKS_OK) {
        c->granted++;
        c->grantors[call->pos] = CKS_SV_GRANTED;
    } else {
        c->grantors[call->pos] = status == CKS_ERR_NOT_COORDINATOR ||
                                         status == CKS_ERR_VERSION_EXISTS
                                     ? CKS_SV_REFUSED
                                     : CKS_SV_UNREACHED;
    }
    if ((status == CKS_ERR_NOT_COORDINATOR || status == CKS_ERR_VERSION_EXISTS) &&
        c->refusal == CKS_OK) {
        c->refusal = status;
        snprintf(c->why, sizeof(c->why), "%s", msg != NULL && msg[0] ? msg
                                                                    : cks_status_string(status));
    }
    free(call);
    cks_sv_claim_decide(c);
}

/* Claim the version with ballot (round, self). round 0: a begin (or, with
 * `lost`, a restarted coordinator's claim of a version it left OPEN: its own
 * record does not stand against it); round > 0: a takeover, which this
 * server judges as the others do. */
void cks_sv_claim_run(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                             const cks_msg_version_begin_t *m, uint32_t round, int lost,
                             cks_sv_claim_done_t done)
{
    size_t n = cks_cluster_nservers(s->map), rank;
    char why[CKS_MSG_MAX_LEN] = "";
    cks_status_t st = CKS_OK;
    struct cks_sv_claiming *c;

    if (!cks_sv_coord_candidate(s, m->job.ptr, m->job.len, m->version, &rank)) {
        uint16_t cand[CKS_COORD_CANDIDATES_MAX];
        cks_sv_coord_candidates(s, m->job.ptr, m->job.len, m->version, cand);
        snprintf(why, sizeof(why),
                 "server %zu is not a coordinator candidate of version %llu of '%.*s' "
                 "(its first is server %u)",
                 s->self, (unsigned long long)m->version, (int)m->job.len, m->job.ptr,
                 cand[0]);
        done(s, conn, req_id, m, CKS_ERR_NOT_COORDINATOR, why);
        return;
    }
    c = calloc(1, sizeof(*c));
    if (c != NULL && (c->grantors = calloc(n, 1)) == NULL) {
        free(c);
        c = NULL;
    }
    if (c == NULL) {
        done(s, conn, req_id, m, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    c->s      = s;
    c->conn   = conn;
    c->req_id = req_id;
    c->m        = *m;
    c->m.job    = cks_sv_job_own(c->job, &m->job);
    c->done     = done;
    c->round    = round;
    c->takeover = round > 0;
    c->need     = (unsigned)(n / 2 + 1);
    c->others   = (unsigned)(n - 1);

    cks_msg_version_claim_t cm;
    cks_sv_claim_msg(&cm, c, CKS_CLAIM_OP_CLAIM);
    if (round == 0) {
        if (lost) {
            cks_sv_claim_t *cl = cks_sv_claim_get(s, m->job.ptr, m->job.len, m->version);
            if (cl != NULL && cl->coord != s->self) {
                st = CKS_ERR_NOT_COORDINATOR;
                snprintf(why, sizeof(why), "version %llu of '%.*s' is coordinated by server %u",
                         (unsigned long long)m->version, (int)m->job.len, m->job.ptr,
                         cl->coord);
            }
        } else {
            cks_sv_claim_t *cl = cks_sv_claim_get(s, m->job.ptr, m->job.len, m->version);
            st = cks_sv_claim_check(s, &m->job, m->version, (uint32_t)s->self, why,
                                    sizeof(why));
            if (st == CKS_OK && cl != NULL && cl->round > 0) {
                /* this server is taking the version over, or took it */
                st = CKS_ERR_NOT_COORDINATOR;
                snprintf(why, sizeof(why), "version %llu of '%.*s' is being taken over here",
                         (unsigned long long)m->version, (int)m->job.len, m->job.ptr);
            }
        }
        if (st == CKS_OK) {
            st = cks_sv_claim_set(s, m->job.ptr, m->job.len, m->version, (uint32_t)s->self, 0,
                                  cks_sv_claim_ttl(m), &cm);
        }
        if (st != CKS_OK) {
            c->conn = NULL; /* not referenced yet */
            cks_sv_claiming_free(c);
            done(s, conn, req_id, m, st, why[0] ? why : "server out of memory");
            return;
        }
        c->granted           = 1;
        c->grantors[s->self] = CKS_SV_GRANTED;
        if (rank > 0 && !lost) {
            cks_info("coordinating version %llu of '%.*s' as its candidate %zu (a client "
                     "could not reach the ones before)",
                     (unsigned long long)m->version, (int)m->job.len, m->job.ptr, rank);
        }
    } else {
        c->others++; /* this server is asked as the others are */
        cks_info("taking over version %llu of '%.*s' as its candidate %zu (ballot %u): its "
                 "coordinator does not answer",
                 (unsigned long long)m->version, (int)m->job.len, m->job.ptr, rank, round);
    }
    if (conn != NULL) {
        cks_tp_conn_get(conn);
    }

    /* a claim that a majority can answer at once is decided at its first
     * answers; `answered` counts the servers that cannot be asked too; one
     * pseudo-answer holds c while the calls go out */
    c->others++;
    unsigned unasked = cks_sv_claim_ask_others(
        s, &cm, CKS_SV_CLAIM_TIMEOUT_MS + (round > 0 ? CKS_SV_TAKEOVER_ASK_MS : 0),
        cks_sv_claim_answered, c, c->grantors);
    c->answered += unasked;
    if (round > 0) {
        cks_sv_ask_t *call = malloc(sizeof(*call));
        if (call == NULL) {
            c->answered++;
            c->grantors[s->self] = CKS_SV_UNREACHED;
        } else {
            call->owner = c;
            call->pos   = s->self;
            cks_sv_judge(s, &cm, cks_sv_claim_answered, call);
        }
    }
    c->answered++; /* the hold */
    cks_sv_claim_decide(c);
}

void cks_sv_claim_begin(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_version_begin_t *m, cks_sv_claim_done_t done)
{
    cks_sv_claim_run(s, conn, req_id, m, 0, 0, done);
}

void cks_sv_claim_lost(cks_server_h s, const cks_msg_version_begin_t *m, uint32_t round,
                       cks_sv_claim_done_t done)
{
    cks_sv_claim_run(s, NULL, 0, m, round, 1, done);
}
