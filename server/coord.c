/*
 * Coordinator failover and its fence (cluster servers).
 *
 * Every version has a list of coordinator candidates
 * (cks_place_coordinators(): the placement coordinator first, then servers
 * on other nodes). A client begins a version at the first candidate it
 * reaches. Before a candidate begins a version it claims it: VERSION_CLAIM
 * to every other server, and it begins only when a majority of all servers
 * (itself included) granted the claim. A server grants one coordinator per
 * version until the grant expires (the version's deadline and a margin), and
 * none for a version it holds a record of. Two majorities of one map always
 * share a server, so two coordinators can never both begin - and therefore
 * never both commit - one version, whichever clients reach which of them.
 *
 * The grants also tell the other servers who coordinates: a primary reports
 * its objects there, and a server asked to seal a version another server
 * coordinates answers CKS_ERR_NOT_COORDINATOR naming it, so that a rank
 * whose first candidate is alive but not the coordinator moves on to the
 * next one.
 *
 * Grants live in memory: a server restarted between two claims of one
 * version has forgotten its grant (a second coordinator would need a
 * majority that only forgotten grants make up).
 *
 * Never: a begin without a majority of grants; a grant to a second
 * coordinator while the first one's stands.
 */
#include "server_int.h"

#include <stdlib.h>
#include <string.h>

/* How long a claimant waits for the grants it still needs. */
#define CKS_SV_CLAIM_TIMEOUT_MS 2000
/* A grant outlives the version's deadline by this much. */
#define CKS_SV_CLAIM_MARGIN_S 60u

typedef struct {
    uint32_t coord;
    uint64_t expires_ns;
} cks_sv_claim_t;

/* A begin waiting for the grants of the other servers. */
struct cks_sv_claiming {
    cks_server_h s;
    cks_tp_conn_h conn; /* the client's: referenced */
    uint64_t req_id;
    cks_msg_version_begin_t m; /* job points into `job` */
    char job[CKS_JOB_MAX_LEN + 1];
    cks_sv_claim_done_t done;
    unsigned need;      /* grants that make a majority */
    unsigned granted;   /* this server's own included */
    unsigned answered;  /* other servers that answered (or could not be asked) */
    unsigned others;
    int decided;
    int lost;           /* decided without a majority: late grants are withdrawn */
    uint8_t *grantors;  /* by position: CKS_SV_GRANTED, CKS_SV_UNREACHED, ... */
    cks_status_t refusal; /* the most telling refusal */
    char why[CKS_MSG_MAX_LEN];
};

typedef struct {
    struct cks_sv_claiming *c;
    size_t pos;
} cks_sv_claim_call_t;

/* What a server answered a claim (grantors[]). */
enum { CKS_SV_UNASKED = 0, CKS_SV_GRANTED = 1, CKS_SV_UNREACHED = 2, CKS_SV_REFUSED = 3 };

size_t cks_sv_coord_candidates(cks_server_h s, const char *job, size_t job_len,
                               uint64_t version, uint16_t *out)
{
    return cks_place_coordinators(s->map, job, job_len, version, out,
                                  CKS_COORD_CANDIDATES_MAX);
}

int cks_sv_coord_candidate(cks_server_h s, const char *job, size_t job_len, uint64_t version,
                           size_t *rank_p)
{
    uint16_t cand[CKS_COORD_CANDIDATES_MAX];
    size_t n = cks_sv_coord_candidates(s, job, job_len, version, cand);
    for (size_t i = 0; i < n; i++) {
        if (cand[i] == s->self) {
            if (rank_p != NULL) {
                *rank_p = i;
            }
            return 1;
        }
    }
    return 0;
}

static cks_sv_claim_t *cks_sv_claim_get(cks_server_h s, const char *job, size_t job_len,
                                        uint64_t version)
{
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    size_t klen          = cks_vkey(key, job, job_len, version);
    cks_sv_claim_t *cl   = cks_hmap_get(s->claims, key, klen);
    if (cl != NULL && cl->expires_ns <= cks_time_ns()) {
        free(cks_hmap_del(s->claims, key, klen));
        cl = NULL;
    }
    return cl;
}

int cks_sv_claim_holder(cks_server_h s, const char *job, size_t job_len, uint64_t version,
                        uint32_t *coord_p)
{
    cks_sv_claim_t *cl = s->claims != NULL ? cks_sv_claim_get(s, job, job_len, version) : NULL;
    if (cl != NULL && coord_p != NULL) {
        *coord_p = cl->coord;
    }
    return cl != NULL;
}

void cks_sv_claim_forget(cks_server_h s, const char *job, size_t job_len, uint64_t version)
{
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    if (s->claims != NULL) {
        free(cks_hmap_del(s->claims, key, cks_vkey(key, job, job_len, version)));
    }
}

/* Grant `coord` the version (or renew its grant). */
static cks_status_t cks_sv_claim_set(cks_server_h s, const char *job, size_t job_len,
                                     uint64_t version, uint32_t coord, uint32_t ttl_s)
{
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    size_t klen        = cks_vkey(key, job, job_len, version);
    cks_sv_claim_t *cl = cks_hmap_get(s->claims, key, klen);
    if (cl == NULL) {
        cl = malloc(sizeof(*cl));
        if (cl == NULL || cks_hmap_put(s->claims, key, klen, cl) != CKS_OK) {
            free(cl);
            return CKS_ERR_NO_MEMORY;
        }
    }
    cl->coord      = coord;
    cl->expires_ns = cks_time_ns() + (uint64_t)ttl_s * 1000000000ull;
    return CKS_OK;
}

/* May `coord` coordinate the version, as far as this server knows? */
static cks_status_t cks_sv_claim_check(cks_server_h s, const cks_wire_str_t *job,
                                       uint64_t version, uint32_t coord, char *why,
                                       size_t why_len)
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
        return CKS_ERR_VERSION_EXISTS;
    }
    if (st != CKS_ERR_NO_SUCH_VERSION && st != CKS_ERR_NO_SUCH_JOB) {
        snprintf(why, why_len, "metadata lookup failed");
        return st;
    }
    return CKS_OK;
}

void cks_sv_version_claim(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                          const cks_msg_version_claim_t *m)
{
    char why[CKS_MSG_MAX_LEN] = "";
    cks_status_t st           = cks_sv_check_names(&m->job, NULL);

    if (st != CKS_OK || m->coord >= cks_cluster_nservers(s->map) || m->ttl_s == 0) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM, "bad claim");
        return;
    }
    if (m->release) {
        uint32_t holder;
        if (cks_sv_claim_holder(s, m->job.ptr, m->job.len, m->version, &holder) &&
            holder == m->coord) {
            cks_sv_claim_forget(s, m->job.ptr, m->job.len, m->version);
        }
        cks_sv_reply_status(conn, req_id, CKS_OK, NULL);
        return;
    }
    st = cks_sv_claim_check(s, &m->job, m->version, m->coord, why, sizeof(why));
    if (st == CKS_OK) {
        st = cks_sv_claim_set(s, m->job.ptr, m->job.len, m->version, m->coord, m->ttl_s);
        snprintf(why, sizeof(why), "%s", st == CKS_OK ? "" : "server out of memory");
    }
    if (st == CKS_OK) {
        cks_debug("granted version %llu of '%.*s' to coordinator %u",
                  (unsigned long long)m->version, (int)m->job.len, m->job.ptr, m->coord);
    }
    cks_sv_reply_status(conn, req_id, st, st == CKS_OK ? NULL : "%s", why);
}

static uint32_t cks_sv_claim_ttl(const cks_msg_version_begin_t *m)
{
    return (m->timeout_s ? m->timeout_s : 600) + CKS_SV_CLAIM_MARGIN_S;
}

static void cks_sv_claim_noop(void *arg, cks_status_t status, const char *msg)
{
    (void)arg;
    (void)status;
    (void)msg;
}

/* Withdraw a claim that did not win: here, and where it was granted. */
static void cks_sv_claim_release(struct cks_sv_claiming *c)
{
    cks_server_h s = c->s;
    cks_msg_version_claim_t r = {c->m.job, c->m.version, (uint32_t)s->self, 1,
                                 cks_sv_claim_ttl(&c->m)};
    uint32_t holder;

    if (s->stop || s->claims == NULL) {
        return; /* shutting down: the grants expire */
    }
    if (cks_sv_claim_holder(s, c->job, c->m.job.len, c->m.version, &holder) &&
        holder == s->self) {
        cks_sv_claim_forget(s, c->job, c->m.job.len, c->m.version);
    }
    for (size_t pos = 0; pos < cks_cluster_nservers(s->map); pos++) {
        cks_tp_conn_h conn =
            c->grantors[pos] == CKS_SV_GRANTED && pos != s->self ? cks_sv_peer(s, pos) : NULL;
        if (conn != NULL) {
            cks_tp_call(conn, CKS_MSG_VERSION_CLAIM, 0, &r, NULL, 0, NULL,
                        CKS_SV_CLAIM_TIMEOUT_MS, cks_sv_claim_noop, NULL);
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
        cks_debug("version %llu of '%s': %u of %u servers granted the claim",
                  (unsigned long long)c->m.version, c->job, c->granted, c->others + 1);
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
            for (size_t pos = 0; pos < n && len > 0 && (size_t)len < sizeof(c->why); pos++) {
                const cks_cluster_server_t *cs = cks_cluster_server(c->s->map, pos);
                if (c->grantors[pos] == CKS_SV_UNREACHED) {
                    len += snprintf(c->why + len, sizeof(c->why) - (size_t)len, " %zu (%s:%u)",
                                    pos, cs->addr, cs->port);
                }
            }
            c->refusal = CKS_ERR_NO_QUORUM;
        }
        cks_warn("%s", c->why);
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
    cks_sv_claim_call_t *call  = arg;
    struct cks_sv_claiming *c = call->c;

    c->answered++;
    if (status == CKS_OK && c->lost && !c->s->stop) {
        cks_msg_version_claim_t r = {c->m.job, c->m.version, (uint32_t)c->s->self, 1,
                                     cks_sv_claim_ttl(&c->m)};
        cks_tp_conn_h conn        = cks_sv_peer(c->s, call->pos);
        if (conn != NULL) {
            cks_tp_call(conn, CKS_MSG_VERSION_CLAIM, 0, &r, NULL, 0, NULL,
                        CKS_SV_CLAIM_TIMEOUT_MS, cks_sv_claim_noop, NULL);
        }
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

void cks_sv_claim_begin(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_version_begin_t *m, cks_sv_claim_done_t done)
{
    size_t n = cks_cluster_nservers(s->map), rank;
    char why[CKS_MSG_MAX_LEN] = "";
    cks_status_t st;
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
    st = cks_sv_claim_check(s, &m->job, m->version, (uint32_t)s->self, why, sizeof(why));
    if (st == CKS_OK) {
        st = cks_sv_claim_set(s, m->job.ptr, m->job.len, m->version, (uint32_t)s->self,
                              cks_sv_claim_ttl(m));
    }
    c = st == CKS_OK ? calloc(1, sizeof(*c)) : NULL;
    if (c != NULL && (c->grantors = calloc(n, 1)) == NULL) {
        free(c);
        c = NULL;
    }
    if (c == NULL) {
        if (st == CKS_OK) {
            cks_sv_claim_forget(s, m->job.ptr, m->job.len, m->version);
            st = CKS_ERR_NO_MEMORY;
            snprintf(why, sizeof(why), "server out of memory");
        }
        done(s, conn, req_id, m, st, why);
        return;
    }
    if (rank > 0) {
        cks_info("coordinating version %llu of '%.*s' as its candidate %zu (a client could "
                 "not reach the ones before)",
                 (unsigned long long)m->version, (int)m->job.len, m->job.ptr, rank);
    }
    c->s      = s;
    c->conn   = conn;
    c->req_id = req_id;
    c->m      = *m;
    memcpy(c->job, m->job.ptr, m->job.len);
    c->job[m->job.len] = '\0';
    c->m.job           = (cks_wire_str_t){c->job, m->job.len};
    c->done            = done;
    c->need            = (unsigned)(n / 2 + 1);
    c->granted         = 1;
    c->others          = (unsigned)(n - 1);
    c->grantors[s->self] = CKS_SV_GRANTED;
    if (conn != NULL) {
        cks_tp_conn_get(conn);
    }

    cks_msg_version_claim_t cm = {c->m.job, m->version, (uint32_t)s->self, 0,
                                  cks_sv_claim_ttl(m)};
    /* a claim that a majority can answer at once is decided at its first
     * answers; `answered` counts the servers that cannot be asked too */
    unsigned unasked = 0;
    for (size_t pos = 0; pos < n; pos++) {
        if (pos == s->self) {
            continue;
        }
        cks_tp_conn_h pc          = cks_sv_peer(s, pos);
        cks_sv_claim_call_t *call = pc != NULL ? malloc(sizeof(*call)) : NULL;
        if (call != NULL) {
            call->c   = c;
            call->pos = pos;
        }
        if (call == NULL ||
            cks_tp_call(pc, CKS_MSG_VERSION_CLAIM, 0, &cm, NULL, 0, NULL,
                        CKS_SV_CLAIM_TIMEOUT_MS, cks_sv_claim_answered, call) !=
                CKS_INPROGRESS) {
            free(call);
            c->grantors[pos] = CKS_SV_UNREACHED;
            unasked++;
        }
    }
    c->answered += unasked;
    cks_sv_claim_decide(c);
}

/* Expired grants, a bounded batch per sweep (the map cannot change while
 * it is walked). */
#define CKS_SV_CLAIM_SWEEP 32
typedef struct {
    uint64_t now;
    size_t n;
    size_t len[CKS_SV_CLAIM_SWEEP];
    uint8_t key[CKS_SV_CLAIM_SWEEP][CKS_JOB_MAX_LEN + 16];
} cks_sv_claim_sweep_t;

static void cks_sv_claim_expire_cb(const void *key, size_t len, void *value, void *arg)
{
    cks_sv_claim_sweep_t *sw = arg;
    cks_sv_claim_t *cl       = value;
    if (cl->expires_ns <= sw->now && sw->n < CKS_SV_CLAIM_SWEEP &&
        len <= sizeof(sw->key[0])) {
        memcpy(sw->key[sw->n], key, len);
        sw->len[sw->n++] = len;
    }
}

void cks_sv_claims_expire(cks_server_h s)
{
    cks_sv_claim_sweep_t sw;
    if (s->claims == NULL || cks_hmap_count(s->claims) == 0) {
        return;
    }
    sw.now = cks_time_ns();
    sw.n   = 0;
    cks_hmap_foreach(s->claims, cks_sv_claim_expire_cb, &sw);
    for (size_t i = 0; i < sw.n; i++) {
        free(cks_hmap_del(s->claims, sw.key[i], sw.len[i]));
    }
}

cks_status_t cks_sv_claims_init(cks_server_h s)
{
    return cks_hmap_create(&s->claims);
}

static void cks_sv_claim_free_cb(const void *key, size_t len, void *value, void *arg)
{
    (void)key;
    (void)len;
    (void)arg;
    free(value);
}

void cks_sv_claims_fini(cks_server_h s)
{
    if (s->claims != NULL) {
        cks_hmap_foreach(s->claims, cks_sv_claim_free_cb, NULL);
        cks_hmap_destroy(s->claims);
        s->claims = NULL;
    }
}
