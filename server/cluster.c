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

static void cks_sv_cv_check(cks_server_h s, cks_sv_version_t *v);
static void cks_sv_cv_finish(cks_server_h s, cks_sv_version_t *v, int commit);

/* Is `v` a version this server coordinates and that still takes work? */
static int cks_sv_cv_open(const cks_sv_version_t *v)
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
        v->rec.created_ns = cks_sv_realtime_ns();
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

static const cks_sv_aborted_t *cks_sv_aborted_find(cks_server_h s, const cks_wire_str_t *job,
                                                   uint64_t version);

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
 * in tries (an hour). */
#define CKS_SV_RELOST_EVERY_NS (5ull * 1000000000ull)
#define CKS_SV_RELOST_TRIES    720

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

static void cks_sv_relost_add(cks_server_h s, const char *job, size_t job_len,
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
static int cks_sv_object_orphan(cks_server_h s, const cks_msg_object_done_t *m)
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
static int cks_sv_coordinated_elsewhere(cks_server_h s, const cks_sv_version_t *v,
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

/* ---- coordinator: objects a primary stored and has not reported ---------------------- *
 *
 * A primary answers STORED, then spreads the object and reports it
 * (OBJECT_DONE). One that dies in between never reports it, and the version
 * would wait for it until its deadline. So each rank's seal says how many
 * objects it stored on each primary (cks_msg_version_seal_t.primaries), each
 * report says which primary sends it, and while a primary has stored more
 * objects of an open version than it reported, this server asks it whether
 * it is alive (cks_sv_owed_probe(), every CKS_SV_OWED_EVERY_NS): when two
 * questions in a row sent after the last seal that named it fail - its
 * connection refused or lost, or no answer within CKS_SV_OWED_ASK_MS - the
 * version fails at once with CKS_ERR_DATA_LOST, naming it. A report counts
 * for the server that sends it (a put retried on another member may be
 * reported by both: counted for both, which can only delay a failure). A
 * primary killed and started again before it is asked answers: its objects
 * are then waited for until the version's deadline, as before. */
#define CKS_SV_OWED_EVERY_NS (250ull * 1000000ull) /* how often a debtor is asked */
#define CKS_SV_OWED_ASK_MS   2000                   /* how long an answer may take */
#define CKS_SV_OWED_GONE     2                      /* failed questions in a row: gone */

static uint64_t *cks_sv_owed_row(cks_server_h s, uint64_t **row)
{
    if (*row == NULL) {
        *row = calloc(cks_cluster_nservers(s->map), sizeof(**row));
    }
    return *row;
}

/* A report of an object of v, from the primary with id `primary`. */
static void cks_sv_owed_reported(cks_server_h s, cks_sv_version_t *v, uint32_t primary)
{
    size_t pos;
    if (primary <= UINT16_MAX && cks_cluster_find(s->map, (uint16_t)primary, &pos) == CKS_OK &&
        cks_sv_owed_row(s, &v->reported_by) != NULL) {
        v->reported_by[pos]++;
    }
    /* out of memory: not counted, as if the seal had not named it (the
     * version then waits for it until its deadline, as before) */
}

/* A rank's seal: add what it stored on each primary. CKS_ERR_BAD_MESSAGE
 * when the entries are not whole; ids not in the map are ignored. */
static cks_status_t cks_sv_owed_sealed(cks_server_h s, cks_sv_version_t *v,
                                       const cks_wire_str_t *primaries)
{
    const uint8_t *e = (const uint8_t *)primaries->ptr;
    size_t n         = primaries->len / CKS_WIRE_SEAL_PRIMARY_LEN;

    if (primaries->len % CKS_WIRE_SEAL_PRIMARY_LEN != 0) {
        return CKS_ERR_BAD_MESSAGE;
    }
    if (n > 0 && cks_sv_owed_row(s, &v->stored_on) == NULL) {
        return CKS_OK; /* out of memory: the version waits, as before */
    }
    for (size_t i = 0; i < n; i++, e += CKS_WIRE_SEAL_PRIMARY_LEN) {
        uint16_t id    = (uint16_t)((e[0] << 8) | e[1]);
        uint32_t count = ((uint32_t)e[2] << 24) | ((uint32_t)e[3] << 16) |
                         ((uint32_t)e[4] << 8) | e[5];
        size_t pos;
        if (cks_cluster_find(s->map, id, &pos) == CKS_OK && count > 0) {
            v->stored_on[pos] += count;
            /* what it answered before does not say whether it holds these */
            s->peers[pos].owed_since_ns = cks_time_ns();
            s->peers[pos].gone          = 0;
        }
    }
    return CKS_OK;
}

typedef struct {
    cks_server_h s;
    size_t pos;
    uint64_t sent_ns;
} cks_sv_owed_ask_t;

static void cks_sv_owed_answered(void *arg, cks_status_t status, const char *msg)
{
    cks_sv_owed_ask_t *a = arg;
    cks_sv_peer_t *p     = &a->s->peers[a->pos];
    p->owed_probing      = 0;
    if (status == CKS_ERR_CANCELED || status == CKS_ERR_SHUTTING_DOWN ||
        a->sent_ns < p->owed_since_ns) {
        /* this server stops, or closed the connection itself, or the
         * question was sent before the last seal that named the server: no
         * news of the objects that seal counts */
    } else if (!cks_sv_unreachable(status) && status != CKS_ERR_TRANSPORT) {
        p->gone = 0; /* it answers (an error answer is an answer too) */
    } else {
        if (p->gone++ == 0) {
            p->gone_sent_ns = a->sent_ns;
        }
        /* two in a row, both sent after the last seal that named it */
        cks_log(p->gone >= CKS_SV_OWED_GONE ? CKS_LOG_WARN : CKS_LOG_INFO,
                "server %u, which owes objects to a version this server coordinates, "
                "did not answer (%u in a row): %s %s",
                cks_cluster_server(a->s->map, a->pos)->id, p->gone,
                cks_status_string(status), msg != NULL ? msg : "");
    }
    free(a);
}

/* Ask the server at `pos` whether it is alive, unless a question is in
 * flight or was sent a moment ago. A new connection when the last failed or
 * went unanswered (cks_sv_peer()): a killed server then refuses it at once. */
static void cks_sv_owed_probe(cks_server_h s, size_t pos, uint64_t now)
{
    cks_sv_peer_t *p = &s->peers[pos];
    if (p->owed_probing || s->stop || now - p->owed_probe_ns < CKS_SV_OWED_EVERY_NS) {
        return;
    }
    p->owed_probe_ns          = now;
    cks_msg_repair_status_t q = {0};
    cks_sv_owed_ask_t *a      = malloc(sizeof(*a));
    cks_tp_conn_h conn        = a != NULL ? cks_sv_peer(s, pos) : NULL;
    if (a == NULL) {
        return;
    }
    *a              = (cks_sv_owed_ask_t){s, pos, now};
    p->owed_probing = 1;
    if (conn == NULL || cks_tp_call(conn, CKS_MSG_REPAIR_STATUS, 0, &q, NULL, 0, NULL,
                                    CKS_SV_OWED_ASK_MS, cks_sv_owed_answered,
                                    a) != CKS_INPROGRESS) {
        cks_sv_owed_answered(a, CKS_ERR_UNREACHABLE, "cannot connect");
    }
}

/* An open version this server coordinates: does a primary that is gone owe
 * it objects? Then it fails (its abort runs from cks_sv_cv_kick()); else
 * every primary that owes objects is asked whether it is alive. Returns 1
 * while one owes objects. */
static int cks_sv_cv_owed(cks_server_h s, cks_sv_version_t *v, uint64_t now)
{
    int owing = 0;
    if (!cks_sv_cv_open(v) || v->failed != CKS_OK || v->stored_on == NULL ||
        now < v->owed_after_ns) {
        return 0;
    }
    for (size_t pos = 0; pos < cks_cluster_nservers(s->map); pos++) {
        uint64_t reported = v->reported_by != NULL ? v->reported_by[pos] : 0;
        if (pos == s->self || v->stored_on[pos] <= reported) {
            continue; /* this server's own reports come without a wire */
        }
        cks_sv_peer_t *p = &s->peers[pos];
        int was_coord = v->gone_holder >= 0 && pos == (size_t)v->gone_holder;
        if (p->gone >= CKS_SV_OWED_GONE || was_coord) {
            const cks_cluster_server_t *cs = cks_cluster_server(s->map, pos);
            v->failed                      = CKS_ERR_DATA_LOST;
            if (was_coord) {
                snprintf(v->why, sizeof(v->why),
                         "server %u (%s:%u), its coordinator until a takeover, died before "
                         "it spread objects of version %llu: %llu stored, %llu reported; "
                         "write the version again",
                         cs->id, cs->addr, cs->port, (unsigned long long)v->version,
                         (unsigned long long)v->stored_on[pos], (unsigned long long)reported);
            } else {
                snprintf(v->why, sizeof(v->why),
                         "server %u (%s:%u) died before it spread objects of this version: "
                         "of the %llu objects of version %llu it answered STORED for, it "
                         "reported %llu (no answer from it for %.1f s); write the version "
                         "again",
                         cs->id, cs->addr, cs->port, (unsigned long long)v->stored_on[pos],
                         (unsigned long long)v->version, (unsigned long long)reported,
                         (double)(now - p->gone_sent_ns) / 1e9);
            }
            return 0;
        }
        cks_sv_owed_probe(s, pos, now);
        owing = 1;
    }
    return owing;
}

static void cks_sv_cv_owed_each(const void *key, size_t len, void *value, void *arg)
{
    void **a = arg;
    *(int *)a[2] |= cks_sv_cv_owed(a[0], value, *(uint64_t *)a[1]);
}

void cks_sv_object_done_local(cks_server_h s, const cks_msg_object_done_t *m,
                                     cks_status_t *status_p, char *why, size_t why_len)
{
    cks_sv_version_t *v = cks_sv_version_find(s, &m->job, m->version);
    cks_md_object_t *o;

    why[0] = '\0';
    if (cks_sv_coordinated_elsewhere(s, v, &m->job, m->version, why, why_len)) {
        *status_p = CKS_ERR_NOT_COORDINATOR;
        return;
    }
    if (v == NULL || !v->cluster || v->objs == NULL || v->bcast > 0 ||
        v->wait == CKS_SV_WAIT_ABORT || v->wait == CKS_SV_WAIT_DELETE) {
        *status_p = CKS_ERR_VERSION_NOT_OPEN;
        snprintf(why, why_len, "version %llu is not open here",
                 (unsigned long long)m->version);
        if (m->status == CKS_OK && (v == NULL || v->objs == NULL ||
                                    (v->bcast > 0 && v->wait == CKS_SV_WAIT_ABORT)) &&
            cks_sv_object_orphan(s, m)) {
            /* unknown here: the primary asks the other candidates */
            *status_p = CKS_ERR_NOT_COORDINATOR;
            snprintf(why, why_len, "server %zu has no record of version %llu",
                     s->self, (unsigned long long)m->version);
        }
        return;
    }
    if (m->status != CKS_OK) {
        if (v->failed == CKS_OK) {
            v->failed = m->status < 0 ? m->status : CKS_ERR_INTERNAL;
            if (m->why.len > 0) {
                snprintf(v->why, sizeof(v->why), "an object could not be stored: %.*s",
                         (int)m->why.len, m->why.ptr);
            } else {
                snprintf(v->why, sizeof(v->why), "object '%.*s' could not be protected (%s)",
                         (int)m->o.key.len, m->o.key.ptr, cks_status_string(v->failed));
            }
        }
        *status_p = CKS_OK;
        cks_sv_cv_check(s, v);
        return;
    }
    if (cks_sv_geometry_differs(v, m->k, m->m, m->chunk_size)) {
        /* stored with a geometry readers would not use: the version fails,
         * and its abort frees the object's chunks on every server */
        snprintf(why, why_len,
                 "object '%.*s': geometry RS(%u,%u) with %llu-byte chunks differs from the "
                 "version's RS(%u,%u) with %llu-byte chunks",
                 (int)m->o.key.len, m->o.key.ptr, m->k, m->m,
                 (unsigned long long)m->chunk_size, v->rec.ec_k, v->rec.ec_m,
                 (unsigned long long)v->rec.chunk_size);
        if (v->failed == CKS_OK) {
            v->failed = CKS_ERR_INVALID_PARAM;
            snprintf(v->why, sizeof(v->why), "%s", why);
        }
        *status_p = CKS_ERR_INVALID_PARAM;
        cks_sv_cv_check(s, v);
        return;
    }
    if (cks_sv_rank_foreign(v, m->o.rank)) {
        /* not put by one of its ranks: the version fails, and its abort
         * frees the object's chunks on every server */
        snprintf(why, why_len, "object '%.*s' is tagged rank %d; version %llu has ranks 0..%u",
                 (int)m->o.key.len, m->o.key.ptr, m->o.rank, (unsigned long long)m->version,
                 v->rec.nranks - 1);
        if (v->failed == CKS_OK) {
            v->failed = CKS_ERR_INVALID_PARAM;
            snprintf(v->why, sizeof(v->why), "%s", why);
        }
        *status_p = CKS_ERR_INVALID_PARAM;
        cks_sv_cv_check(s, v);
        return;
    }
    uintptr_t seen = v->reported ? (uintptr_t)cks_hmap_get(v->reported, m->o.key.ptr,
                                                            m->o.key.len)
                                 : 0;
    if (seen != 0 && v->objs[seen - 1].size == m->o.size &&
        v->objs[seen - 1].crc64 == m->o.crc64) {
        /* the same object again: its put was retried on the next member of
         * its group while the first primary did not answer, and both stored
         * it (the same chunks, in the same places) */
        cks_sv_owed_reported(s, v, m->primary);
        *status_p = CKS_OK;
        return;
    }
    if (v->reported == NULL && cks_hmap_create(&v->reported) != CKS_OK) {
        *status_p = CKS_ERR_NO_MEMORY;
        return;
    }
    if (v->nobjs == v->capobjs) {
        size_t cap = v->capobjs * 2;
        void *p    = realloc(v->objs, cap * sizeof(*v->objs));
        if (p == NULL) {
            *status_p = CKS_ERR_NO_MEMORY;
            return;
        }
        v->objs    = p;
        v->capobjs = cap;
    }
    if (seen == 0 && cks_hmap_put(v->reported, m->o.key.ptr, m->o.key.len,
                                  (void *)(uintptr_t)(v->nobjs + 1)) != CKS_OK) {
        *status_p = CKS_ERR_NO_MEMORY;
        return;
    }
    o = &v->objs[v->nobjs++];
    memset(o, 0, sizeof(*o));
    memcpy(o->key, m->o.key.ptr, m->o.key.len);
    o->key_len        = m->o.key.len;
    o->kind           = (cks_kind_t)m->o.kind;
    o->layer          = m->o.layer;
    o->expert         = m->o.expert;
    o->rank           = m->o.rank;
    o->size           = m->o.size;
    o->crc64          = m->o.crc64;
    o->source_version = m->version;
    if (m->missing > 0) {
        /* stored without some chunks (members unreachable): DEGRADED */
        v->rec.missing += m->missing;
        if (m->redundancy < v->rec.redundancy) {
            v->rec.redundancy = m->redundancy;
        }
    }
    v->nobjects++;
    v->bytes += m->o.size;
    v->digest ^= cks_sv_object_digest(o->key, o->key_len, o->size);
    cks_sv_owed_reported(s, v, m->primary);
    *status_p = CKS_OK;
    cks_sv_cv_check(s, v);
}

void cks_sv_object_done_here(cks_server_h s, const cks_msg_object_done_t *m,
                             cks_status_t *status_p, char *why, size_t why_len)
{
    cks_sv_object_done_local(s, m, status_p, why, why_len);
}

void cks_sv_object_done(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_object_done_t *m)
{
    char why[CKS_MSG_MAX_LEN];
    cks_status_t status = cks_sv_check_names(&m->job, &m->o.key);
    if (status == CKS_OK && m->backup) {
        /* a coordinator's copy of its own report: kept for a takeover */
        cks_sv_kept_add(s, m);
        cks_sv_reply_status(conn, req_id, CKS_OK, NULL);
        return;
    }
    if (status == CKS_OK) {
        cks_sv_object_done_local(s, m, &status, why, sizeof(why));
    } else {
        snprintf(why, sizeof(why), "bad names");
    }
    cks_sv_reply_status(conn, req_id, status, "%s", why);
}

/* A delete marker: the parent's object `key` is not part of this version. */
void cks_sv_object_delete(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                          const cks_msg_object_stat_t *m)
{
    cks_sv_version_t *v = cks_sv_version_find(s, &m->job, m->version);
    cks_status_t status = cks_sv_check_names(&m->job, &m->key);
    char why[CKS_MSG_MAX_LEN];

    if (status == CKS_OK && !cks_sv_cv_open(v) &&
        cks_sv_coordinated_elsewhere(s, v, &m->job, m->version, why, sizeof(why))) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NOT_COORDINATOR, "%s", why);
        return;
    }
    if (status == CKS_OK && !cks_sv_cv_open(v)) {
        /* no record here: the client asks the next candidate */
        cks_md_version_t rec;
        status = v != NULL && v->objs != NULL ? CKS_OK
                                              : cks_sv_version_lookup(s, &m->job, m->version,
                                                                      &rec);
        status = status == CKS_OK ? CKS_ERR_VERSION_NOT_OPEN : status;
    }
    if (status == CKS_OK && v->deleted == NULL && cks_hmap_create(&v->deleted) != CKS_OK) {
        status = CKS_ERR_NO_MEMORY;
    }
    if (status == CKS_OK) {
        status = cks_hmap_put(v->deleted, m->key.ptr, m->key.len, v);
    }
    cks_sv_reply_status(conn, req_id, status, status == CKS_OK ? NULL : "cannot delete '%.*s'",
                        (int)m->key.len, m->key.ptr);
}

/* Broadcasts to every other server: a manifest in pages, or a drop. */
typedef struct {
    cks_server_h s;
    cks_sv_version_t *v;
    size_t pos;
    size_t next;   /* commit: next object to send */
    int drop;      /* 1: VERSION_DROP */
    uint32_t drop_state;
    uint8_t *page;
} cks_bcast_t;

static void cks_sv_bcast_finish(cks_server_h s, cks_sv_version_t *v);
static void cks_bcast_send(cks_bcast_t *b);

/* ---- drops a peer missed ------------------------------------------------------------ */

#define CKS_SV_OWED_MAX   4096
#define CKS_SV_OWED_EVERY (1000000000ull) /* ns between tries */

static void cks_sv_owe(cks_server_h s, size_t pos, const char *job, size_t job_len,
                       uint64_t version, uint32_t state)
{
    cks_sv_owed_t **pp = &s->owed, *o;
    for (; *pp != NULL; pp = &(*pp)->next) {
        o = *pp;
        if (o->pos == pos && o->version == version && o->job_len == job_len &&
            memcmp(o->job, job, job_len) == 0) {
            o->state = state; /* the newest drop of it */
            return;
        }
    }
    if (s->nowed >= CKS_SV_OWED_MAX || (o = calloc(1, sizeof(*o))) == NULL) {
        cks_warn("server %zu missed the drop of version %llu of '%.*s' and will not be told "
                 "again (%zu drops owed)",
                 pos, (unsigned long long)version, (int)job_len, job, s->nowed);
        return;
    }
    o->s       = s;
    o->pos     = pos;
    memcpy(o->job, job, job_len);
    o->job_len = (uint32_t)job_len;
    o->version = version;
    o->state   = state;
    *pp        = o; /* last: oldest first */
    s->nowed++;
    if (s->owed_next_ns == 0) {
        s->owed_next_ns = cks_time_ns() + CKS_SV_OWED_EVERY;
    }
}

static void cks_sv_owed_unlink(cks_server_h s, cks_sv_owed_t *o)
{
    for (cks_sv_owed_t **pp = &s->owed; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == o) {
            *pp = o->next;
            s->nowed--;
            free(o);
            return;
        }
    }
}

static void cks_sv_owed_done(void *arg, cks_status_t status, const char *msg)
{
    cks_sv_owed_t *o = arg;
    o->in_flight     = 0;
    if (status == CKS_OK) {
        cks_info("server %zu took the drop of version %llu of '%s' it had missed", o->pos,
                 (unsigned long long)o->version, o->job);
        cks_sv_owed_unlink(o->s, o);
    } else if (status == CKS_ERR_CANCELED || status == CKS_ERR_SHUTTING_DOWN) {
        cks_sv_owed_unlink(o->s, o); /* this server stops: forgotten (in memory only) */
    } else {
        (void)msg; /* tried again later */
    }
}

/* Send every owed drop again (at most once a second each). */
static void cks_sv_owed_send(cks_server_h s, int all_cancel)
{
    cks_sv_owed_t *o = s->owed, *next;
    if (all_cancel) {
        for (; o != NULL; o = next) {
            next = o->next;
            if (!o->in_flight) {
                cks_sv_owed_unlink(s, o);
            }
        }
        return;
    }
    for (; o != NULL; o = o->next) {
        if (o->in_flight) {
            continue;
        }
        cks_tp_conn_h conn = cks_sv_peer(s, o->pos);
        if (conn == NULL) {
            continue;
        }
        cks_msg_version_drop_t m = {{o->job, o->job_len}, o->version, o->state, 0};
        o->in_flight             = 1;
        if (cks_tp_call(conn, CKS_MSG_VERSION_DROP, 0, &m, NULL, 0, NULL,
                        CKS_SV_CALL_TIMEOUT_MS, cks_sv_owed_done, o) != CKS_INPROGRESS) {
            o->in_flight = 0;
        }
    }
}

void cks_sv_owed_forget(cks_server_h s, const char *job, size_t job_len, uint64_t version)
{
    cks_sv_owed_t *o = s->owed, *next;
    for (; o != NULL; o = next) {
        next = o->next;
        if (o->version == version && o->job_len == job_len &&
            memcmp(o->job, job, job_len) == 0 && !o->in_flight) {
            cks_sv_owed_unlink(s, o);
        }
    }
}

static void cks_bcast_done(void *arg, cks_status_t status, const char *msg)
{
    cks_bcast_t *b = arg;
    free(b->page);
    b->page = NULL;
    if (status != CKS_OK && b->drop && status != CKS_ERR_CANCELED &&
        status != CKS_ERR_SHUTTING_DOWN) {
        /* told again until it takes it: a server that was down must not
         * keep a version the others dropped (its chunks, its retention) */
        cks_sv_owe(b->s, b->pos, b->v->job, b->v->job_len, b->v->version, b->drop_state);
    }
    if (status != CKS_OK) {
        const cks_cluster_server_t *cs = cks_cluster_server(b->s->map, b->pos);
        cks_warn("server %u (%s:%u) did not take the %s of version %llu of '%s': %s %s",
                 cs->id, cs->addr, cs->port, b->drop ? "drop" : "manifest",
                 (unsigned long long)b->v->version, b->v->job, cks_status_string(status),
                 msg);
        if (status == CKS_ERR_TIMEOUT) {
            b->s->peers[b->pos].down_ns = cks_time_ns();
        }
    } else if (!b->drop && b->next < b->v->nobjs) {
        cks_bcast_send(b); /* the next page */
        return;
    }
    cks_sv_version_t *v = b->v;
    cks_server_h s      = b->s;
    free(b);
    if (--v->bcast == 0) {
        cks_sv_bcast_finish(s, v);
    }
}

/* A version aborted because an arena was full, in a job that keeps two or
 * more versions: the drop also applies the retention one version short, so
 * that the space of the oldest kept version is there for the next one (a
 * full arena would otherwise stay full: retention frees space only after a
 * commit). A job that keeps one version keeps it. 0: no retention. */
static uint32_t cks_sv_press_retain(const cks_sv_version_t *v)
{
    return v->wait == CKS_SV_WAIT_ABORT && v->failed == CKS_ERR_ARENA_FULL && v->retain >= 2
               ? v->retain - 1
               : 0;
}

static void cks_bcast_send(cks_bcast_t *b)
{
    cks_server_h s      = b->s;
    cks_sv_version_t *v = b->v;
    /* a member that just failed to take chunks is not waited for again: it
     * misses this outcome, as a server that is down does */
    cks_tp_conn_h conn  = cks_sv_peer_down(s, b->pos) ? NULL : cks_sv_peer(s, b->pos);
    cks_status_t status = conn ? CKS_OK : CKS_ERR_UNREACHABLE;

    if (status == CKS_OK && b->drop) {
        cks_msg_version_drop_t m = {{v->job, v->job_len}, v->version, b->drop_state,
                                    cks_sv_press_retain(v)};
        status = cks_tp_call(conn, CKS_MSG_VERSION_DROP, 0, &m, NULL, 0, NULL,
                             CKS_SV_MEMBER_TIMEOUT_MS, cks_bcast_done, b);
    } else if (status == CKS_OK) {
        cks_msg_version_commit_t m = {0};
        size_t off = 0, n = 0;
        b->page    = malloc(CKS_WIRE_MAX_PAGE);
        status     = b->page ? CKS_OK : CKS_ERR_NO_MEMORY;
        while (status == CKS_OK && b->next + n < v->nobjs && n < CKS_WIRE_MAX_ENTRIES) {
            const cks_md_object_t *o = &v->objs[b->next + n];
            cks_msg_object_entry_t e;
            cks_sv_entry_from_obj(&e, o);
            status = cks_wire_entry_pack(CKS_WIRE_ENTRY_OBJECT, &e, b->page,
                                         CKS_WIRE_MAX_PAGE, &off);
            n += status == CKS_OK;
        }
        b->next += n;
        m.job = (cks_wire_str_t){v->job, v->job_len};
        cks_sv_entry_from_rec(&m.v, &v->rec);
        m.v.version = v->version;
        m.last   = b->next >= v->nobjs;
        m.retain = v->retain;
        if (status == CKS_OK) {
            status = cks_tp_call(conn, CKS_MSG_VERSION_COMMIT, off ? CKS_WIRE_F_PAGE : 0, &m,
                                 off ? b->page : NULL, off, NULL, CKS_SV_MEMBER_TIMEOUT_MS,
                                 cks_bcast_done, b);
        }
    }
    if (status != CKS_INPROGRESS) {
        cks_bcast_done(b, status == CKS_OK ? CKS_ERR_INTERNAL : status, "not sent");
    }
}

/* Send to every other server; the last answer calls cks_sv_bcast_finish(). */
static void cks_sv_bcast(cks_server_h s, cks_sv_version_t *v, int drop, uint32_t drop_state)
{
    size_t n = cks_cluster_nservers(s->map);
    v->bcast = 1; /* hold */
    for (size_t pos = 0; pos < n; pos++) {
        if (pos == s->self) {
            continue;
        }
        cks_bcast_t *b = calloc(1, sizeof(*b));
        if (b == NULL) {
            continue;
        }
        *b = (cks_bcast_t){s, v, pos, 0, drop, drop_state, NULL};
        v->bcast++;
        cks_bcast_send(b);
    }
    if (--v->bcast == 0) {
        cks_sv_bcast_finish(s, v);
    }
}

static cks_status_t cks_sv_waiter_add(cks_sv_version_t *v, cks_tp_conn_h conn,
                                      uint64_t req_id, int seal)
{
    if (v->nwaiters == v->capwaiters) {
        size_t cap = v->capwaiters ? v->capwaiters * 2 : 4;
        void *p    = realloc(v->waiters, cap * sizeof(*v->waiters));
        if (p == NULL) {
            return CKS_ERR_NO_MEMORY;
        }
        v->waiters    = p;
        v->capwaiters = cap;
    }
    v->waiters[v->nwaiters++] = (cks_sv_waiter_t){conn, req_id, seal};
    cks_tp_conn_get(conn);
    return CKS_OK;
}

/* The reason a failed version was aborted, kept for ranks that finish later. */
static void cks_sv_aborted_note(cks_server_h s, const cks_sv_version_t *v)
{
    cks_sv_aborted_t *a = &s->aborted[s->aborted_next++ % CKS_SV_ABORTED_MAX];
    memcpy(a->job, v->job, v->job_len);
    a->job[v->job_len] = '\0';
    a->version         = v->version;
    a->status          = v->failed;
    snprintf(a->why, sizeof(a->why), "%s", v->why);
}

static const cks_sv_aborted_t *cks_sv_aborted_find(cks_server_h s, const cks_wire_str_t *job,
                                                   uint64_t version)
{
    for (unsigned i = 0; i < CKS_SV_ABORTED_MAX; i++) {
        const cks_sv_aborted_t *a = &s->aborted[i];
        if (a->version == version && a->job[0] != '\0' && strlen(a->job) == job->len &&
            memcmp(a->job, job->ptr, job->len) == 0) {
            return a;
        }
    }
    return NULL;
}

/* The version's outcome is known everywhere: answer everyone who waits. */
static void cks_sv_bcast_finish(cks_server_h s, cks_sv_version_t *v)
{
    int committed = v->wait == CKS_SV_WAIT_SEAL && v->bcast_reply == CKS_OK;
    cks_sv_kept_forget(s, v->job, v->job_len, v->version);
    if (v->wait == CKS_SV_WAIT_ABORT && v->failed != CKS_OK) {
        cks_sv_aborted_note(s, v);
    }
    for (size_t i = 0; i < v->nwaiters; i++) {
        cks_sv_waiter_t *w = &v->waiters[i];
        if (committed && w->seal) {
            cks_msg_seal_reply_t r = {CKS_OK, cks_wire_cstr(NULL), v->nobjects, v->bytes};
            cks_sv_reply(w->conn, CKS_MSG_SEAL_REPLY, w->req_id, &r);
        } else if (!w->seal && v->bcast_reply == CKS_OK) {
            cks_sv_reply_status(w->conn, w->req_id, CKS_OK, NULL); /* abort, delete */
        } else {
            cks_status_t st = v->bcast_reply != CKS_OK ? v->bcast_reply : CKS_ERR_CANCELED;
            cks_sv_reply_status(w->conn, w->req_id, st, "%s", v->why);
        }
        cks_tp_conn_put(w->conn);
    }
    free(v->waiters);
    v->waiters  = NULL;
    v->nwaiters = v->capwaiters = 0;
    v->wait     = CKS_SV_WAIT_NONE;
    if (committed) {
        cks_sv_flush_committed(s, v->job, v->job_len, v->version); /* --flush-every */
    }
    free(v->objs);
    v->objs  = NULL;
    v->nobjs = v->capobjs = 0;
    free(v->ranks_done);
    v->ranks_done = NULL;
    cks_hmap_destroy(v->deleted);
    v->deleted = NULL;
    cks_hmap_destroy(v->reported);
    v->reported = NULL;
    free(v->stored_on);
    free(v->reported_by);
    v->stored_on = v->reported_by = NULL;
    v->pending--;
    if (v->redrop && v->failed != CKS_OK) {
        /* objects came in while the drop was sent: drop once more */
        v->redrop = 0;
        v->wait   = CKS_SV_WAIT_ABORT;
        cks_sv_cv_finish(s, v, 0);
        return;
    }
    cks_sv_version_release(s, v);
}

static void cks_sv_cv_recorded(cks_server_h s, cks_mdq_job_t *j)
{
    cks_sv_version_t *v = j->ctx;
    for (size_t i = 0; i < j->nfreed; i++) {
        cks_sv_free_after_reads(s, j->freed[i].off, j->freed[i].len);
    }
    free(j->freed);
    if (j->type == CKS_MDQ_MANIFEST && j->status != CKS_OK) {
        /* not recorded here (the job left nothing of itself in LMDB): the
         * version is aborted everywhere, so that seal, abort and delete get
         * a clear answer and every server frees its chunks */
        cks_status_t st = j->status;
        cks_error("the manifest of version %llu of '%s' could not be recorded: %s; "
                  "aborting it",
                  (unsigned long long)v->version, v->job, cks_status_string(st));
        free(j->objs);
        free(j);
        v->failed = v->bcast_reply = st;
        snprintf(v->why, sizeof(v->why),
                 "version %llu: its manifest could not be recorded on its coordinator (%s)",
                 (unsigned long long)v->version, cks_status_string(st));
        v->wait  = CKS_SV_WAIT_ABORT;
        v->bcast = 0;
        v->pending--;
        cks_sv_cv_finish(s, v, 0);
        return;
    }
    if (j->status != CKS_OK && v->bcast_reply == CKS_OK) {
        v->bcast_reply = j->status;
        snprintf(v->why, sizeof(v->why), "%s not recorded",
                 j->type == CKS_MDQ_DROP ? "drop" : "manifest");
    }
    if (j->type == CKS_MDQ_MANIFEST && j->status == CKS_OK) {
        v->rec = j->rec;
        /* what the broadcast sends: the manifest as recorded */
        free(v->objs);
        v->objs    = j->objs;
        v->nobjs   = j->nobjs;
        v->capobjs = j->nobjs;
        j->objs    = NULL;
        cks_info("version %llu of '%s' committed: %llu objects, %llu bytes, %s "
                 "(survives %u more lost servers; %llu chunks missing)",
                 (unsigned long long)v->version, v->job, (unsigned long long)v->rec.nobjects,
                 (unsigned long long)v->rec.bytes, cks_vstate_string(v->rec.state),
                 v->rec.redundancy, (unsigned long long)v->rec.missing);
    }
    free(j->objs);
    int drop    = j->type == CKS_MDQ_DROP;
    uint32_t st = j->has_rec ? (uint32_t)j->rec.state : UINT32_MAX;
    free(j);
    if (!drop && v->bcast_reply != CKS_OK) {
        /* not recorded here: do not tell others it is committed */
        v->bcast = 0;
        cks_sv_bcast_finish(s, v);
        return;
    }
    cks_sv_bcast(s, v, drop, st);
}

/* The manifest of a committing version: the parent's manifest, less what this
 * version deleted or wrote again, plus what it wrote (newer wins). */
static cks_status_t cks_sv_cv_manifest(cks_server_h s, cks_sv_version_t *v,
                                       cks_md_object_t **objs_p, size_t *n_p)
{
    size_t n = v->nobjs, cap = v->nobjs + 64;
    cks_md_object_t *objs = malloc(cap * sizeof(*objs));
    cks_hmap_t *mine      = NULL;
    cks_status_t status   = objs && cks_hmap_create(&mine) == CKS_OK ? CKS_OK
                                                                     : CKS_ERR_NO_MEMORY;
    for (size_t i = 0; status == CKS_OK && i < v->nobjs; i++) {
        objs[i] = v->objs[i];
        status  = cks_hmap_put(mine, v->objs[i].key, v->objs[i].key_len, v);
    }
    if (status == CKS_OK && v->rec.parent != CKS_MD_NO_PARENT) {
        enum { PAGE = 256 };
        cks_md_object_t *page = malloc(PAGE * sizeof(*page));
        char after[CKS_KEY_MAX_LEN + 1];
        size_t after_len = 0, count;
        int more = 1;
        cks_md_txn_h txn;
        cks_md_version_t prec;
        status = page ? cks_md_txn_begin(s->md, 0, &txn) : CKS_ERR_NO_MEMORY;
        if (status == CKS_OK) {
            status = cks_md_version_get(txn, v->job, v->job_len, v->rec.parent, &prec);
            if (status == CKS_OK && prec.state != CKS_VSTATE_PROTECTED &&
                prec.state != CKS_VSTATE_SEALED && prec.state != CKS_VSTATE_DEGRADED) {
                status = CKS_ERR_NOT_RESTORABLE;
            }
            if (status == CKS_OK && prec.ec_m == v->rec.ec_m &&
                prec.redundancy < v->rec.redundancy) {
                /* inherited objects are no better protected than the parent */
                v->rec.redundancy = prec.redundancy;
            }
            while (status == CKS_OK && more) {
                status = cks_md_object_list(txn, v->job, v->job_len, v->rec.parent,
                                            after_len ? after : NULL, after_len, page, PAGE,
                                            &count, &more);
                for (size_t i = 0; status == CKS_OK && i < count; i++) {
                    const cks_md_object_t *o = &page[i];
                    if (cks_hmap_get(mine, o->key, o->key_len) != NULL ||
                        (v->deleted && cks_hmap_get(v->deleted, o->key, o->key_len))) {
                        continue; /* written again, or deleted, in this version */
                    }
                    if (n == cap) {
                        void *p = realloc(objs, (cap *= 2) * sizeof(*objs));
                        if (p == NULL) {
                            status = CKS_ERR_NO_MEMORY;
                            break;
                        }
                        objs = p;
                    }
                    objs[n++] = *o; /* keeps its source version */
                }
                if (count > 0) {
                    memcpy(after, page[count - 1].key, page[count - 1].key_len);
                    after_len = page[count - 1].key_len;
                }
            }
            cks_md_txn_abort(txn);
        }
        free(page);
        if (status != CKS_OK) {
            snprintf(v->why, sizeof(v->why), "parent version %llu: %s",
                     (unsigned long long)v->rec.parent, cks_status_string(status));
        }
    }
    cks_hmap_destroy(mine);
    if (status != CKS_OK) {
        free(objs);
        return status;
    }
    *objs_p = objs;
    *n_p    = n;
    return CKS_OK;
}

/* Its fence failed: another server took the version over, or a majority
 * is out of reach. Nothing is recorded or sent; the ranks waiting here go on
 * to the next candidate; this server keeps only its part as a primary. */
static void cks_sv_cv_disown(cks_server_h s, cks_sv_version_t *v, cks_status_t status,
                             const char *why)
{
    cks_warn("version %llu of '%s': fenced, its %s is neither recorded nor sent (%s: %s)",
             (unsigned long long)v->version, v->job,
             v->wait == CKS_SV_WAIT_SEAL ? "commit" : "abort", cks_status_string(status),
             why != NULL ? why : "");
    for (size_t i = 0; i < v->nwaiters; i++) {
        cks_sv_waiter_t *w = &v->waiters[i];
        cks_sv_reply_status(w->conn, w->req_id, CKS_ERR_NOT_COORDINATOR,
                            "server %zu cannot record the outcome of version %llu: %s",
                            s->self, (unsigned long long)v->version, why != NULL ? why : "");
        cks_tp_conn_put(w->conn);
    }
    free(v->waiters);
    v->waiters  = NULL;
    v->nwaiters = v->capwaiters = 0;
    free(v->objs);
    v->objs  = NULL;
    v->nobjs = v->capobjs = 0;
    free(v->ranks_done);
    v->ranks_done = NULL;
    cks_hmap_destroy(v->deleted);
    v->deleted = NULL;
    cks_hmap_destroy(v->reported);
    v->reported = NULL;
    free(v->stored_on);
    free(v->reported_by);
    v->stored_on = v->reported_by = NULL;
    v->claimed  = 0;
    v->fence_ok = 0;
    v->disowned = 1;
    v->wait     = CKS_SV_WAIT_NONE;
    uint32_t holder;
    if (cks_sv_claim_holder(s, v->job, v->job_len, v->version, &holder) && holder == s->self) {
        cks_sv_claim_forget(s, v->job, v->job_len, v->version);
    }
    if (status != CKS_ERR_SHUTTING_DOWN) {
        /* no majority could be reached, or another ballot holds it: claimed
         * again later (a higher round when refused), and dropped once won;
         * the outcome of the one that holds it, when it comes, ends that */
        cks_sv_relost_add(s, v->job, v->job_len, v->version,
                          cks_time_ns() + CKS_SV_RELOST_EVERY_NS);
    }
    /* a primary's entry until the version's outcome arrives here */
    v->open = v->keys != NULL;
    cks_sv_version_release(s, v);
}

static void cks_sv_cv_fenced(cks_server_h s, cks_sv_version_t *v, cks_status_t status,
                             const char *why)
{
    v->bcast = 0;
    v->pending--;
    if (status == CKS_OK) {
        v->fence_ok = 1;
        cks_sv_cv_finish(s, v, v->wait == CKS_SV_WAIT_SEAL);
        return;
    }
    cks_sv_cv_disown(s, v, status, why);
}

/* Record locally (commit or drop), then broadcast. */
static void cks_sv_cv_finish(cks_server_h s, cks_sv_version_t *v, int commit)
{
    cks_mdq_job_t *j;
    cks_status_t status;

    if (v->claimed && !v->fence_ok && v->wait != CKS_SV_WAIT_DELETE && !s->stop) {
        /* first a majority must fence this coordinator's ballot (coord.c):
         * a version taken over elsewhere is not recorded here */
        uint64_t now = cks_time_ns();
        uint64_t left = v->open_deadline_ns > now ? (v->open_deadline_ns - now) / 1000000000ull
                                                  : 0;
        v->open  = 0;
        v->bcast = 1; /* held while the fence is asked */
        v->pending++;
        (void)commit; /* v->wait says which */
        cks_sv_fence(s, v, (uint32_t)(left + 60), cks_sv_cv_fenced);
        return;
    }
    v->open  = 0;
    v->bcast = 1; /* held while the outcome is recorded here */
    v->pending++; /* the entry lives until everyone has been answered */
    j        = cks_sv_mdq_job(s, commit ? CKS_MDQ_MANIFEST : CKS_MDQ_DROP, v->job, v->job_len,
                              v->version);
    if (j == NULL) {
        v->bcast_reply = CKS_ERR_NO_MEMORY;
        v->bcast       = 0;
        cks_sv_bcast_finish(s, v);
        return;
    }
    j->rec     = v->rec;
    j->has_rec = 1;
    if (commit) {
        status = cks_sv_cv_manifest(s, v, &j->objs, &j->nobjs);
        if (status != CKS_OK) {
            /* the parent is gone or unusable: abort instead */
            free(j);
            v->failed = v->bcast_reply = status;
            v->wait   = CKS_SV_WAIT_ABORT;
            v->bcast  = 0;
            v->pending--;
            cks_warn("aborting version %llu of '%s': %s", (unsigned long long)v->version,
                     v->job, v->why);
            cks_sv_cv_finish(s, v, 0);
            return;
        }
        j->rec.redundancy = v->rec.redundancy;
        j->rec.state = j->rec.missing > 0 || j->rec.redundancy < j->rec.ec_m
                           ? CKS_VSTATE_DEGRADED
                           : CKS_VSTATE_PROTECTED;
        j->rec.sealed_ns = cks_sv_realtime_ns();
        j->rec.nobjects  = j->nobjs;
        j->rec.bytes     = 0;
        for (size_t i = 0; i < j->nobjs; i++) {
            j->rec.bytes += j->objs[i].size;
        }
        j->retain = v->retain;
        j->nheld  = cks_sv_held(s, j->job, j->job_len, j->held, CKS_SV_HELD_MAX);
    } else if (v->wait == CKS_SV_WAIT_DELETE) {
        j->has_rec = 0;
    } else {
        j->rec.state    = CKS_VSTATE_ABORTED;
        j->rec.nobjects = j->rec.bytes = 0;
        j->retain       = cks_sv_press_retain(v);
        if (j->retain > 0) {
            j->nheld = cks_sv_held(s, j->job, j->job_len, j->held, CKS_SV_HELD_MAX);
            cks_warn("version %llu of '%s' aborted for lack of space: every server keeps "
                     "the newest %u restorable versions (not %u) until the next commit, to "
                     "make room", (unsigned long long)v->version, v->job, j->retain, v->retain);
        }
    }
    j->done = cks_sv_cv_recorded;
    j->ctx  = v;
    cks_mdq_push(&s->mdq, j);
}

/* Commit when every rank finished and the objects reported are exactly those
 * the ranks put (as many, and the same digest); abort on failure, or when
 * objects no rank put were reported (a later object cannot mend that). */
static void cks_sv_cv_check(cks_server_h s, cks_sv_version_t *v)
{
    if (v->bcast > 0 || v->objs == NULL || !v->open) {
        return;
    }
    if (v->failed == CKS_OK && v->nranks_done == v->rec.nranks &&
        (v->nobjects > v->expected ||
         (v->nobjects == v->expected && v->digest != v->expected_digest))) {
        v->failed = CKS_ERR_INVALID_PARAM;
        snprintf(v->why, sizeof(v->why),
                 "version %llu: the %llu objects reported are not the %llu its ranks put: "
                 "a writer that is not one of its ranks put an object, or a put its "
                 "writer saw fail was stored",
                 (unsigned long long)v->version, (unsigned long long)v->nobjects,
                 (unsigned long long)v->expected);
    }
    if (v->failed != CKS_OK) {
        v->bcast_reply = v->failed;
        cks_warn("aborting version %llu of '%s': %s", (unsigned long long)v->version, v->job,
                 v->why);
        v->wait = CKS_SV_WAIT_ABORT; /* the reply is the failure */
        cks_sv_cv_finish(s, v, 0);
        return;
    }
    if (v->nranks_done == v->rec.nranks && v->nobjects == v->expected &&
        v->digest == v->expected_digest) {
        v->wait        = CKS_SV_WAIT_SEAL;
        v->bcast_reply = CKS_OK;
        cks_sv_cv_finish(s, v, 1);
    }
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

    if (v != NULL && v->bcast > 0 &&
        (v->wait == CKS_SV_WAIT_ABORT || (resent && v->wait == CKS_SV_WAIT_SEAL)) &&
        type != CKS_MSG_VERSION_DELETE) {
        /* already being aborted (an object failed, or the deadline): this
         * caller gets the outcome, and its reason, with the others */
        if (cks_sv_waiter_add(v, conn, req_id, type == CKS_MSG_VERSION_SEAL) != CKS_OK) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        }
        return;
    }
    if (v != NULL && v->bcast > 0) {
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
        if (type == CKS_MSG_VERSION_SEAL && (v == NULL || (v->objs == NULL && !v->disowned)) &&
            cks_sv_takeover_seal(s, conn, req_id, flags, job, version, nobjects, digest, rank,
                                 primaries)) {
            return; /* its coordinator does not answer: taken over here (coord.c) */
        }
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
    memset(&v->rec, 0, sizeof(v->rec));
    v->rec.version     = m->version;
    v->rec.parent      = m->parent;
    v->rec.state       = CKS_VSTATE_OPEN;
    v->rec.nranks      = m->nranks;
    v->rec.created_ns  = cks_sv_realtime_ns();
    v->rec.ec_k        = m->k;
    v->rec.ec_m        = m->m;
    v->rec.chunk_size  = m->chunk_size;
    v->rec.redundancy  = m->m;
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

static void cks_sv_cv_kick(const void *key, size_t len, void *value, void *arg)
{
    cks_sv_version_t *v = value;
    if (cks_sv_cv_open(v) && v->failed != CKS_OK) {
        *(cks_sv_version_t **)arg = v;
    }
}

int cks_sv_cluster_progress(cks_server_h s)
{
    cks_enc_job_t *e;
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
    e = cks_enc_take_done(&s->enc);
    while (e != NULL) {
        cks_enc_job_t *next = e->next;
        cks_cput_spread(e->arg);
        e = next;
    }
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
    cks_enc_job_t *e = cks_enc_stop(&s->enc);
    while (e != NULL) {
        cks_enc_job_t *next = e->next;
        cks_cput_spread(e->arg);
        e = next;
    }
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
}
