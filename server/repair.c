/*
 * DESIGN: catch-up and repair in an erasure-coded cluster. Runs on the
 * progress thread, as callbacks of the calls it makes to peers, of the
 * metadata writer's jobs it queues, and of cks_rp_progress() (timers).
 *
 *   catch-up: a round lists, from every other server in turn, the jobs and
 *     versions it holds (SYNC_LIST, answered from its LMDB even while it is
 *     catching up itself; its reply says whether it has caught up). Then:
 *     a restorable version this server lacks, or holds in another state
 *     (OPEN here, DEGRADED here and PROTECTED there, or more chunks missing
 *     here), is fetched - its manifest in pages from the server that holds
 *     the best state - and recorded as a member records a commit; a
 *     restorable version held here that its coordinator (answering, caught
 *     up) does not hold, and that no server answering holds restorable, was
 *     deleted or dropped while this server was away: it is dropped here. A
 *     round runs at start, then every 10 s (3 s while a server does not
 *     answer). Until the first round ends,
 *     lists, stats and `latest` are answered CKS_ERR_BUSY ("catching up"),
 *     which clients treat as a reason to ask another server.
 *   repair: a scan walks every restorable version's manifest and, for each
 *     stripe, the chunks the placement puts on this server; a chunk without
 *     a record is a task. A task reads k chunks of its stripe from the other
 *     members (CHUNK_GET, each checked against its CRC), decodes the missing
 *     one with ISA-L straight into arena space, and records it (the metadata
 *     writer checks it against the CRC computed here). Reads are paced by a
 *     token bucket: --repair-rate bytes/s while clients' data went through
 *     this server in the last 0.5 s (puts, chunk puts, reads other than
 *     repair's own, which carry CKS_WIRE_F_BACKGROUND), --repair-idle-rate
 *     (no cap by default) otherwise. A scan runs after the first
 *     round of catch-up and each that learned something, when a
 *     coordinator's REPAIR_CHECK finds chunks missing here, 5 s after tasks
 *     failed, and every 60 s.
 *   state: the coordinator of a DEGRADED version asks every server, every
 *     2 s, whether it still misses chunks of it (REPAIR_CHECK); once every
 *     server, itself included, answers none, it records the version
 *     PROTECTED (redundancy m, missing 0) and sends the record to the others
 *     (VERSION_COMMIT without entries); a server that misses that learns it
 *     by catch-up.
 *
 * Never: wait, or run an LMDB write here (the metadata writer does); free
 * arena space of a chunk that was recorded (drops do that).
 */
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKS_RP_CALL_MS        5000
#define CKS_RP_FETCH_MS       10000
#define CKS_RP_ROUND_EVERY_NS (10ull * 1000000000ull)
#define CKS_RP_RETRY_NS       (1ull * 1000000000ull)
/* the next round, when a server did not answer this one: one cut off by a
 * partition, or restarting, is caught up soon after it is back */
#define CKS_RP_ROUND_SOON_NS  (3ull * 1000000000ull)
/* A first round that a server answered while still catching up itself (it
 * restarted too) is run again, for at most this long after start: what it
 * holds may not be the truth yet (its drops in particular). */
#define CKS_RP_FIRST_WAIT_NS  (3ull * 1000000000ull)
#define CKS_RP_AGAIN_NS       (200ull * 1000000ull)
#define CKS_RP_SCAN_EVERY_NS  (60ull * 1000000000ull)
#define CKS_RP_RESCAN_NS      (5ull * 1000000000ull) /* after tasks failed */
#define CKS_RP_CHECK_EVERY_NS (2ull * 1000000000ull)
#define CKS_RP_TASKS_MAX      65536u
#define CKS_RP_INFLIGHT       4u
#define CKS_RP_CHECKS_MAX     16u
#define CKS_RP_RATE_DEFAULT   (256ull << 20)
/* No client data through this server for this long: repair runs at its idle
 * pace (--repair-idle-rate, no cap by default) instead of --repair-rate. */
#define CKS_RP_IDLE_NS        (500ull * 1000000ull)
/* The state of a drop record (a deleted version) in SYNC_LIST version pages,
 * between servers only (servers before drop records skip states above
 * ABORTED); created_ns names the incarnation that was deleted. */
#define CKS_RP_STATE_DROPPED  0x100u

/* ---- state ------------------------------------------------------------------------- */

/* What the servers answering a round hold of one version. */
typedef struct {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    cks_msg_version_entry_t best; /* the best restorable state seen, or any */
    size_t best_pos;
    int best_restorable;
    unsigned nrestorable;         /* answering servers that hold it restorable */
    int dropped;                  /* a server answering recorded its delete: */
    uint64_t drop_created;        /* of the incarnation created then */
} cks_rp_seen_t;

typedef enum {
    CKS_RP_ACT_FETCH = 0, /* manifest and record from a peer */
    CKS_RP_ACT_RECORD,    /* the record alone (a better state) */
    CKS_RP_ACT_DROP,      /* deleted while this server was away */
} cks_rp_act_type_t;

typedef struct {
    cks_rp_act_type_t type;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    cks_md_version_t rec;
    size_t pos;
} cks_rp_act_t;

/* A chunk placed here that this server does not hold. */
typedef struct {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    char key[CKS_KEY_MAX_LEN + 1];
    uint32_t key_len;
    uint64_t version; /* whose chunks: the object's source version */
    uint64_t mversion; /* the manifest that needs it */
    uint64_t stripe;
    uint32_t idx;
    unsigned k, m;
    uint64_t chunk;
} cks_rp_task_t;

typedef struct cks_rp_fetch cks_rp_fetch_t;
typedef struct cks_rp_work cks_rp_work_t;

struct cks_rp_fetch {
    cks_rp_work_t *w;
    unsigned idx;      /* the chunk of the stripe */
    uint8_t *buf;
    uint64_t crc;
    unsigned pending;  /* the call, and a receipt it started */
    cks_status_t status;
};

/* A task being done: its reads, then the decode and the record. */
struct cks_rp_work {
    cks_server_h s;
    cks_rp_task_t t;
    uint16_t group[CKS_PLACE_WIDTH_MAX];
    unsigned next;     /* next member of the group to ask */
    unsigned reading;  /* reads in flight */
    unsigned have;     /* chunks read and checked */
    cks_rp_fetch_t f[CKS_PLACE_WIDTH_MAX];
    uint64_t off;      /* the rebuilt chunk's arena space */
};

/* A coordinator's question to every server about one DEGRADED version. */
typedef struct {
    cks_server_h s;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    cks_md_version_t rec;
    unsigned waiting;
    unsigned clean; /* servers that answered that they hold every chunk */
    unsigned total;
} cks_rp_check_t;

/* A request held until this server has caught up (its strings copied). */
typedef struct cks_rp_held {
    struct cks_rp_held *next;
    cks_tp_conn_h conn; /* one reference */
    unsigned type;
    uint64_t req_id;
    cks_msg_any_t b;
    char job[CKS_JOB_MAX_LEN + 1];
    char key[CKS_KEY_MAX_LEN + 1];
} cks_rp_held_t;

#define CKS_RP_HELD_MAX 1024u

struct cks_rp {
    cks_server_h s;
    cks_rp_held_t *held, **held_tail; /* oldest first */
    unsigned nheld;
    int synced;            /* a round of catch-up ended since start */
    uint64_t start_ns;
    /* the round */
    int round;             /* a round is running */
    uint64_t next_round_ns;
    size_t peer;           /* the server being listed */
    int phase;             /* 0: its jobs, 1: versions of jobs[jobi] */
    char (*jobs)[CKS_JOB_MAX_LEN + 1];
    size_t njobs, capjobs, jobi;
    uint64_t after;
    int has_after;
    uint8_t *answered;     /* per position: 1 caught up, 2 catching up */
    cks_hmap_t *seen;      /* "job\0be64(version)" -> cks_rp_seen_t */
    cks_rp_act_t *acts;
    size_t nacts, capacts, acti;
    char after_key[CKS_KEY_MAX_LEN + 1];
    uint32_t after_key_len;
    unsigned mdq_pending;  /* jobs of this round not yet done */
    unsigned learned, dropped;
    /* repair */
    cks_rp_task_t *tasks;
    size_t ntasks, taski;
    cks_hmap_t *queued;    /* chunks in tasks: not queued twice */
    int scan_wanted;
    uint64_t next_scan_ns;
    unsigned inflight;
    uint64_t rate_cap;      /* while clients move data (--repair-rate; UINT64_MAX: none) */
    uint64_t idle_cap;      /* while they do not (--repair-idle-rate; UINT64_MAX: none) */
    double tokens;
    uint64_t tokens_ns;
    uint64_t chunks_done, bytes_done, failed;
    uint64_t failed_at_scan; /* `failed` when the last scan ran */
    uint64_t win_ns, win_bytes, rate;
    uint64_t warned_ns;
    /* coordinator checks */
    uint64_t next_check_ns;
    unsigned checks;
    cks_hmap_t *checking;
};

static void cks_rp_round_step(cks_server_h s);
static void cks_rp_work_start(cks_server_h s);
static void cks_rp_mdq_push(cks_server_h s, cks_mdq_job_t *j);
static void cks_rp_release_held(cks_server_h s, int cancel);

static size_t cks_rp_ckey(uint8_t *buf, const cks_rp_task_t *t)
{
    size_t n = cks_vkey(buf, t->job, t->job_len, t->version);
    memcpy(buf + n, t->key, t->key_len);
    n += t->key_len;
    buf[n++] = 0;
    cks_put_be64(buf + n, t->stripe);
    n += 8;
    buf[n++] = (uint8_t)t->idx;
    return n;
}

static int cks_rp_restorable(uint32_t state)
{
    return state == CKS_VSTATE_PROTECTED || state == CKS_VSTATE_DEGRADED;
}

/* Is state `a` better than `b` (the same version): PROTECTED over
 * DEGRADED, and fewer chunks missing. */
static int cks_rp_better(uint32_t a_state, uint64_t a_missing, uint32_t b_state,
                         uint64_t b_missing)
{
    if (!cks_rp_restorable(a_state)) {
        return 0;
    }
    if (!cks_rp_restorable(b_state)) {
        return 1;
    }
    if (a_state != b_state) {
        return a_state == CKS_VSTATE_PROTECTED;
    }
    return a_state == CKS_VSTATE_DEGRADED && a_missing < b_missing;
}

static void cks_rp_rec_from_entry(cks_md_version_t *r, const cks_msg_version_entry_t *e)
{
    *r = (cks_md_version_t){e->version,    e->parent,     (cks_vstate_t)e->state,
                            e->nranks,     e->created_ns, e->sealed_ns,
                            e->nobjects,   e->bytes,      e->k,
                            e->m,          e->chunk_size, e->redundancy,
                            e->missing};
}


/* ---- catch-up: the round ---------------------------------------------------------- */

static void cks_rp_seen_free(const void *key, size_t len, void *value, void *arg)
{
    free(value);
}

static void cks_rp_round_reset(cks_rp_t *rp)
{
    if (rp->seen != NULL) {
        cks_hmap_foreach(rp->seen, cks_rp_seen_free, NULL);
        cks_hmap_destroy(rp->seen);
        rp->seen = NULL;
    }
    free(rp->jobs);
    free(rp->acts);
    rp->jobs  = NULL;
    rp->acts  = NULL;
    rp->njobs = rp->capjobs = rp->jobi = 0;
    rp->nacts = rp->capacts = rp->acti = 0;
}

static void cks_rp_round_begin(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    cks_rp_round_reset(rp);
    if (cks_hmap_create(&rp->seen) != CKS_OK) {
        rp->next_round_ns = cks_time_ns() + CKS_RP_RETRY_NS;
        return;
    }
    memset(rp->answered, 0, cks_cluster_nservers(s->map));
    rp->round   = 1;
    rp->peer    = 0;
    rp->phase   = 0;
    rp->learned = rp->dropped = 0;
    rp->has_after = 0;
    rp->after_key_len = 0;
    rp->peer = (size_t)-1; /* the step moves to the first peer */
    cks_rp_round_step(s);
}

static void cks_rp_next_peer(cks_rp_t *rp)
{
    size_t n = cks_cluster_nservers(rp->s->map);
    do {
        rp->peer++;
    } while (rp->peer < n && rp->peer == rp->s->self);
    rp->phase         = 0;
    rp->njobs         = 0;
    rp->jobi          = 0;
    rp->has_after     = 0;
    rp->after_key_len = 0;
}

static void cks_rp_note_version(cks_rp_t *rp, size_t pos, const char *job, size_t job_len,
                                const cks_msg_version_entry_t *e)
{
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    size_t klen       = cks_vkey(key, job, job_len, e->version);
    cks_rp_seen_t *sn = cks_hmap_get(rp->seen, key, klen);
    int restorable    = cks_rp_restorable(e->state);

    if (sn == NULL) {
        sn = calloc(1, sizeof(*sn));
        if (sn == NULL || cks_hmap_put(rp->seen, key, klen, sn) != CKS_OK) {
            free(sn);
            return;
        }
        memcpy(sn->job, job, job_len);
        sn->job_len         = (uint32_t)job_len;
        sn->best            = *e;
        sn->best_pos        = pos;
        sn->best_restorable = restorable;
    } else if (e->state == CKS_RP_STATE_DROPPED) {
        /* below: not a state to fetch */
    } else if (cks_rp_better(e->state, e->missing, sn->best.state, sn->best.missing)) {
        sn->best            = *e;
        sn->best_pos        = pos;
        sn->best_restorable = 1;
    }
    sn->nrestorable += restorable;
    if (e->state == CKS_RP_STATE_DROPPED) {
        sn->dropped      = 1;
        sn->drop_created = e->created_ns;
    }
}

typedef struct {
    cks_server_h s;
    cks_status_t status;
    uint32_t synced, count, more;
    int what;
} cks_rp_list_call_t;

/* A page of a peer's listing: jobs, versions, or a manifest's objects. */
static void cks_rp_list_reply(void *arg, const cks_wire_hdr_t *hdr, const cks_msg_any_t *body,
                              cks_tp_data_t *data)
{
    cks_rp_list_call_t *lc          = arg;
    cks_rp_t *rp                    = lc->s->rp;
    const cks_msg_sync_reply_t *r   = &body->m_SYNC_REPLY;
    size_t off = 0, len;
    const uint8_t *page;
    cks_status_t st = CKS_OK;
    cks_rp_act_t *a = lc->what == CKS_SYNC_OBJECTS ? &rp->acts[rp->acti] : NULL;
    cks_mdq_job_t *j = NULL;

    if (hdr->type != CKS_MSG_SYNC_REPLY) {
        lc->status = CKS_ERR_BAD_MESSAGE;
        return;
    }
    lc->synced = r->synced;
    lc->more   = r->more;
    lc->count  = 0;
    if (data == NULL || r->count == 0) {
        return;
    }
    if (data->is_rndv || data->length > CKS_WIRE_MAX_PAGE) {
        /* pages are small: a rendezvous one is not expected from a peer */
        lc->status = CKS_ERR_BAD_MESSAGE;
        return;
    }
    page = data->ptr;
    len  = data->length;
    for (uint32_t i = 0; st == CKS_OK && i < r->count && off < len; i++) {
        if (lc->what == CKS_SYNC_JOBS) {
            cks_msg_job_entry_t e;
            st = cks_wire_entry_unpack(CKS_WIRE_ENTRY_JOB, page, len, &off, &e);
            if (st == CKS_OK) {
                st = cks_name_check(e.name.ptr, e.name.len, CKS_JOB_MAX_LEN);
            }
            if (st == CKS_OK && rp->njobs == rp->capjobs) {
                size_t cap = rp->capjobs ? rp->capjobs * 2 : 64;
                void *p    = realloc(rp->jobs, cap * sizeof(*rp->jobs));
                st         = p ? CKS_OK : CKS_ERR_NO_MEMORY;
                if (p != NULL) {
                    rp->jobs    = p;
                    rp->capjobs = cap;
                }
            }
            if (st == CKS_OK) {
                memcpy(rp->jobs[rp->njobs], e.name.ptr, e.name.len);
                rp->jobs[rp->njobs][e.name.len] = '\0';
                rp->njobs++;
            }
        } else if (lc->what == CKS_SYNC_VERSIONS) {
            cks_msg_version_entry_t e;
            st = cks_wire_entry_unpack(CKS_WIRE_ENTRY_VERSION, page, len, &off, &e);
            if (st == CKS_OK &&
                (e.state <= CKS_VSTATE_ABORTED || e.state == CKS_RP_STATE_DROPPED)) {
                const char *job = rp->jobs[rp->jobi];
                cks_rp_note_version(rp, rp->peer, job, strlen(job), &e);
            }
            if (st == CKS_OK) {
                rp->after     = e.version;
                rp->has_after = 1;
            }
        } else {
            cks_msg_object_entry_t e;
            st = cks_wire_entry_unpack(CKS_WIRE_ENTRY_OBJECT, page, len, &off, &e);
            if (st == CKS_OK) {
                st = cks_name_check(e.key.ptr, e.key.len, CKS_KEY_MAX_LEN);
            }
            if (st == CKS_OK && j == NULL) {
                j = cks_sv_mdq_job(lc->s, CKS_MDQ_MANIFEST, a->job, a->job_len,
                                   a->rec.version);
                if (j == NULL || (j->objs = calloc(r->count, sizeof(*j->objs))) == NULL) {
                    free(j);
                    j  = NULL;
                    st = CKS_ERR_NO_MEMORY;
                }
            }
            if (st != CKS_OK) {
                break;
            }
            cks_sv_object_of_entry(&j->objs[j->nobjs++], &e);
            memcpy(rp->after_key, e.key.ptr, e.key.len);
            rp->after_key_len = e.key.len;
        }
        lc->count++;
    }
    if (st == CKS_OK && off != len) {
        st = CKS_ERR_BAD_MESSAGE;
    }
    if (j != NULL) {
        /* the manifest's pages are recorded in order; its record goes last
         * (cks_rp_list_done) */
        cks_rp_mdq_push(lc->s, j);
    }
    if (st != CKS_OK) {
        lc->status = st;
    }
}

static void cks_rp_mdq_done(cks_server_h s, cks_mdq_job_t *j)
{
    cks_rp_t *rp = s->rp;
    if (j->status != CKS_OK && j->status != CKS_ERR_CANCELED) {
        cks_warn("catch-up: version %llu of '%s' not recorded: %s",
                 (unsigned long long)j->version, j->job, cks_status_string(j->status));
    }
    for (size_t i = 0; i < j->nfreed; i++) {
        cks_sv_free_after_reads(s, j->freed[i].off, j->freed[i].len);
    }
    free(j->freed);
    free(j->objs);
    free(j);
    if (rp != NULL && --rp->mdq_pending == 0 && rp->round && rp->acti >= rp->nacts) {
        cks_rp_round_step(s);
    }
}

void cks_rp_mdq_push(cks_server_h s, cks_mdq_job_t *j)
{
    j->done = cks_rp_mdq_done;
    s->rp->mdq_pending++;
    cks_mdq_push(&s->mdq, j);
}

static void cks_rp_list_done(void *arg, cks_status_t status, const char *msg)
{
    cks_rp_list_call_t *lc = arg;
    cks_server_h s         = lc->s;
    cks_rp_t *rp           = s->rp;

    if (status == CKS_OK) {
        status = lc->status;
    }
    if (s->stop) {
        free(lc);
        rp->round = 0;
        return;
    }
    if (lc->what == CKS_SYNC_OBJECTS) {
        if (status != CKS_OK || !lc->more || lc->count == 0) {
            if (status != CKS_OK) {
                cks_warn("catch-up: manifest of version %llu of '%s' from server %zu: %s %s",
                         (unsigned long long)rp->acts[rp->acti].rec.version,
                         rp->acts[rp->acti].job, rp->acts[rp->acti].pos,
                         cks_status_string(status), msg);
            } else {
                /* every entry is queued: the record follows them */
                cks_rp_act_t *a  = &rp->acts[rp->acti];
                cks_mdq_job_t *j = cks_sv_mdq_job(s, CKS_MDQ_MANIFEST, a->job, a->job_len,
                                                  a->rec.version);
                if (j != NULL) {
                    j->has_rec = 1;
                    j->rec     = a->rec;
                    cks_rp_mdq_push(s, j);
                    rp->learned++;
                }
            }
            rp->acti++;
            rp->after_key_len = 0;
        }
    } else if (status != CKS_OK) {
        /* this peer cannot be listed now: its answers do not count */
        if (status != CKS_ERR_UNREACHABLE && status != CKS_ERR_CONN_LOST) {
            cks_debug("catch-up: server %zu not listed: %s %s", rp->peer,
                      cks_status_string(status), msg);
        }
        rp->answered[rp->peer] = 0;
        cks_rp_next_peer(rp);
    } else {
        rp->answered[rp->peer] = lc->synced ? 1 : 2;
        if (lc->what == CKS_SYNC_JOBS) {
            if (!lc->more || lc->count == 0) {
                rp->phase     = 1;
                rp->jobi      = 0;
                rp->has_after = 0;
            }
        } else if (!lc->more || lc->count == 0) {
            rp->jobi++;
            rp->has_after = 0;
        }
        if (rp->phase == 1 && rp->jobi >= rp->njobs) {
            cks_rp_next_peer(rp);
        }
    }
    free(lc);
    cks_rp_round_step(s);
}

static int cks_rp_list_call(cks_server_h s, size_t pos, const cks_msg_sync_list_t *m)
{
    cks_tp_conn_h conn = cks_sv_peer_down(s, pos) ? NULL : cks_sv_peer_conn(s, pos);
    cks_rp_list_call_t *lc;
    if (conn == NULL || (lc = calloc(1, sizeof(*lc))) == NULL) {
        return 0;
    }
    lc->s    = s;
    lc->what = (int)m->what;
    if (cks_tp_call_data(conn, CKS_MSG_SYNC_LIST, 0, m, CKS_RP_CALL_MS, cks_rp_list_reply,
                         cks_rp_list_done, lc) != CKS_INPROGRESS) {
        free(lc);
        return 0;
    }
    return 1;
}

/* Compare what the peers hold with this server's records: what to fetch,
 * what to record better, what to drop. */
typedef struct {
    cks_server_h s;
    cks_status_t status;
    cks_md_txn_h txn;
} cks_rp_cmp_t;

/* Was the incarnation of (job, version) created at created_ns deleted:
 * here (a drop record), or by a server that answered this round? */
static int cks_rp_deleted(cks_rp_cmp_t *c, const cks_rp_seen_t *sn, uint64_t created_ns)
{
    uint64_t here;
    if (sn->dropped && sn->drop_created == created_ns) {
        return 1;
    }
    return cks_md_drop_get(c->txn, sn->job, sn->job_len, sn->best.version, &here) == CKS_OK &&
           here == created_ns;
}

static cks_status_t cks_rp_act_add(cks_rp_t *rp, cks_rp_act_type_t type, const char *job,
                                   size_t job_len, const cks_md_version_t *rec, size_t pos)
{
    if (rp->nacts == rp->capacts) {
        size_t cap = rp->capacts ? rp->capacts * 2 : 64;
        void *p    = realloc(rp->acts, cap * sizeof(*rp->acts));
        if (p == NULL) {
            return CKS_ERR_NO_MEMORY;
        }
        rp->acts    = p;
        rp->capacts = cap;
    }
    cks_rp_act_t *a = &rp->acts[rp->nacts++];
    memset(a, 0, sizeof(*a));
    a->type = type;
    memcpy(a->job, job, job_len);
    a->job_len = (uint32_t)job_len;
    a->rec     = *rec;
    a->pos     = pos;
    return CKS_OK;
}

/* A restorable version held here: dropped when its coordinator answered,
 * caught up, without it, and no server that answered holds it restorable. */
static cks_status_t cks_rp_cmp_local(const char *job, size_t job_len, const cks_md_version_t *v,
                                     void *arg)
{
    cks_rp_cmp_t *c   = arg;
    cks_server_h s    = c->s;
    cks_rp_t *rp      = s->rp;
    uint8_t key[CKS_JOB_MAX_LEN + 16];
    size_t klen       = cks_vkey(key, job, job_len, v->version);
    cks_rp_seen_t *sn = cks_hmap_get(rp->seen, key, klen);
    size_t coord      = cks_place_coordinator(s->map, job, job_len, v->version);

    if (sn != NULL && sn->dropped && sn->drop_created == v->created_ns &&
        v->state != CKS_VSTATE_ABORTED) {
        /* deleted while this server was away (or missed the drop): a
         * server answering recorded the delete of this incarnation */
        c->status = cks_rp_act_add(rp, CKS_RP_ACT_DROP, job, job_len, v, sn->best_pos);
        cks_hmap_del(rp->seen, key, klen);
        free(sn);
        return c->status;
    }
    if (sn != NULL) {
        /* an ABORTED record here is this server's own abort (a version it
         * coordinated and found OPEN at start) or a drop it took: kept */
        if (sn->best_restorable && v->state != CKS_VSTATE_ABORTED &&
            cks_rp_better(sn->best.state, sn->best.missing, v->state, v->missing)) {
            cks_md_version_t rec;
            cks_rp_rec_from_entry(&rec, &sn->best);
            /* OPEN here (a member of a version it missed the commit of) or
             * not restorable: the whole manifest; else the record alone */
            c->status = cks_rp_act_add(rp, cks_rp_restorable(v->state) ? CKS_RP_ACT_RECORD
                                                                       : CKS_RP_ACT_FETCH,
                                       job, job_len, &rec, sn->best_pos);
        }
        cks_hmap_del(rp->seen, key, klen);
        free(sn);
        return c->status;
    }
    if (cks_rp_restorable(v->state) && coord != s->self && rp->answered[coord] == 1) {
        c->status = cks_rp_act_add(rp, CKS_RP_ACT_DROP, job, job_len, v, coord);
    }
    return c->status;
}

static void cks_rp_cmp_new(const void *key, size_t len, void *value, void *arg)
{
    cks_rp_cmp_t *c   = arg;
    cks_rp_seen_t *sn = value;
    if (sn->best_restorable && c->status == CKS_OK && cks_rp_deleted(c, sn, sn->best.created_ns)) {
        cks_info("catch-up: version %llu of '%.*s' is held by server %zu, but was deleted: "
                 "not learned", (unsigned long long)sn->best.version, (int)sn->job_len, sn->job,
                 sn->best_pos);
        return;
    }
    if (sn->best_restorable && c->status == CKS_OK) {
        cks_md_version_t rec;
        cks_rp_rec_from_entry(&rec, &sn->best);
        c->status = cks_rp_act_add(c->s->rp, CKS_RP_ACT_FETCH, sn->job, sn->job_len, &rec,
                                   sn->best_pos);
    }
}

static void cks_rp_compare(cks_server_h s)
{
    cks_rp_cmp_t c = {s, CKS_OK, NULL};
    if (cks_md_txn_begin(s->md, 0, &c.txn) != CKS_OK) {
        return;
    }
    /* the versions held here first: what is left in `seen` is new here */
    c.status = cks_md_version_foreach(c.txn, cks_rp_cmp_local, &c);
    if (c.status == CKS_OK) {
        cks_hmap_foreach(s->rp->seen, cks_rp_cmp_new, &c);
    }
    cks_md_txn_abort(c.txn);
    if (c.status != CKS_OK) {
        cks_warn("catch-up: comparing versions failed: %s", cks_status_string(c.status));
    }
}

/* Queue one action; returns 1 when it waits for a call. */
static int cks_rp_act_run(cks_server_h s, cks_rp_act_t *a)
{
    cks_rp_t *rp = s->rp;
    cks_mdq_job_t *j;

    if (a->type == CKS_RP_ACT_FETCH) {
        cks_msg_sync_list_t m = {CKS_SYNC_OBJECTS,
                                 {a->job, a->job_len},
                                 a->rec.version,
                                 {rp->after_key, rp->after_key_len},
                                 0,
                                 0,
                                 CKS_WIRE_MAX_ENTRIES};
        if (cks_rp_list_call(s, a->pos, &m)) {
            return 1;
        }
        cks_info("catch-up: server %zu unreachable for the manifest of version %llu of '%s'",
                 a->pos, (unsigned long long)a->rec.version, a->job);
        return 0;
    }
    j = cks_sv_mdq_job(s, a->type == CKS_RP_ACT_DROP ? CKS_MDQ_DROP : CKS_MDQ_MANIFEST, a->job,
                       a->job_len, a->rec.version);
    if (j == NULL) {
        return 0;
    }
    if (a->type == CKS_RP_ACT_RECORD) {
        j->has_rec           = 1;
        j->rec_if_restorable = 1;
        j->rec               = a->rec;
        rp->learned++;
    } else {
        cks_info("catch-up: version %llu of '%s' was dropped while this server was away "
                 "(server %zu recorded its delete, or it is its coordinator and no server "
                 "that answered holds it): dropped here",
                 (unsigned long long)a->rec.version, a->job, a->pos);
        rp->dropped++;
    }
    cks_rp_mdq_push(s, j);
    return 0;
}

static void cks_rp_round_end(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    unsigned answered = 0, unsynced = 0;
    uint64_t now      = cks_time_ns();
    for (size_t i = 0; i < cks_cluster_nservers(s->map); i++) {
        answered += rp->answered[i] != 0;
        unsynced += rp->answered[i] == 2;
    }
    int first = !rp->synced;
    rp->round         = 0;
    rp->next_round_ns = now + (answered + 1 < cks_cluster_nservers(s->map) || unsynced > 0
                                   ? CKS_RP_ROUND_SOON_NS
                                   : CKS_RP_ROUND_EVERY_NS);
    if (first && unsynced > 0 && now - rp->start_ns < CKS_RP_FIRST_WAIT_NS) {
        /* not caught up yet: what was learned is kept, and the round runs
         * again once those servers may have caught up */
        rp->next_round_ns = now + CKS_RP_AGAIN_NS;
        cks_rp_round_reset(rp);
        return;
    }
    if (first) {
        cks_info("caught up with %u of %zu other servers in %.1f s: %u versions learned, %u "
                 "dropped", answered, cks_cluster_nservers(s->map) - 1,
                 (double)(cks_time_ns() - rp->start_ns) / 1e9, rp->learned, rp->dropped);
    } else if (rp->learned + rp->dropped > 0) {
        cks_info("catch-up: %u versions learned, %u dropped", rp->learned, rp->dropped);
    }
    rp->synced = 1;
    if (first) {
        cks_rp_release_held(s, 0);
    }
    if (first || rp->learned + rp->dropped > 0) {
        rp->scan_wanted = 1; /* chunks of what was learned may be placed here */
    }
    cks_rp_round_reset(rp);
}

static void cks_rp_round_step(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    size_t n     = cks_cluster_nservers(s->map);

    if (s->stop) {
        rp->round = 0;
        return;
    }
    /* listing: one peer after another */
    if (rp->peer == (size_t)-1) {
        cks_rp_next_peer(rp);
    }
    while (rp->peer < n) {
        cks_msg_sync_list_t m = {0};
        m.max = CKS_WIRE_MAX_ENTRIES;
        if (rp->phase == 0) {
            m.what      = CKS_SYNC_JOBS;
            m.job       = cks_wire_cstr(NULL);
            m.after_key = rp->njobs ? cks_wire_cstr(rp->jobs[rp->njobs - 1])
                                    : cks_wire_cstr(NULL);
        } else {
            m.what      = CKS_SYNC_VERSIONS;
            m.job       = cks_wire_cstr(rp->jobs[rp->jobi]);
            m.after_key = cks_wire_cstr(NULL);
            m.has_after = (uint32_t)rp->has_after;
            m.after     = rp->after;
        }
        if (cks_rp_list_call(s, rp->peer, &m)) {
            return;
        }
        rp->answered[rp->peer] = 0;
        cks_rp_next_peer(rp);
    }
    if (rp->peer == n) {
        rp->peer++; /* listed: compare once */
        cks_rp_compare(s);
    }
    while (rp->acti < rp->nacts) {
        if (cks_rp_act_run(s, &rp->acts[rp->acti])) {
            return;
        }
        rp->acti++;
    }
    if (rp->mdq_pending > 0) {
        return; /* the last job's completion steps again */
    }
    cks_rp_round_end(s);
}

/* ---- SYNC_LIST: what this server holds ------------------------------------------- */

static void cks_rp_page_sent(void *arg, cks_status_t status)
{
    free(arg);
}

void cks_rp_sync_list(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                      const cks_msg_sync_list_t *m)
{
    union {
        cks_md_version_t v[CKS_WIRE_MAX_ENTRIES];
        cks_md_object_t o[CKS_WIRE_MAX_ENTRIES];
        char j[CKS_WIRE_MAX_ENTRIES][CKS_JOB_MAX_LEN + 1];
        struct {
            uint64_t v[CKS_WIRE_MAX_ENTRIES], c[CKS_WIRE_MAX_ENTRIES];
        } d; /* drop records (after the versions were packed) */
    } *buf             = malloc(sizeof(*buf));
    uint8_t *page      = malloc(CKS_WIRE_MAX_PAGE);
    size_t count = 0, off = 0;
    int more           = 0;
    uint32_t max       = CKS_MIN(CKS_MAX(m->max, 1u), CKS_WIRE_MAX_ENTRIES);
    cks_status_t status = buf && page ? CKS_OK : CKS_ERR_NO_MEMORY;
    cks_md_txn_h txn;

    if (status == CKS_OK && m->what != CKS_SYNC_JOBS) {
        status = cks_sv_check_names(&m->job, NULL);
    }
    if (status == CKS_OK && m->after_key.len > 0) {
        status = cks_name_check(m->after_key.ptr, m->after_key.len, CKS_KEY_MAX_LEN);
    }
    if (status == CKS_OK && m->what > CKS_SYNC_OBJECTS) {
        status = CKS_ERR_BAD_MESSAGE;
    }
    if (status == CKS_OK) {
        status = cks_md_txn_begin(s->md, 0, &txn);
    }
    if (status == CKS_OK) {
        if (m->what == CKS_SYNC_JOBS) {
            status = cks_md_job_list(txn, m->after_key.len ? m->after_key.ptr : NULL,
                                     m->after_key.len, buf->j, max, &count, &more);
            for (size_t i = 0; status == CKS_OK && i < count; i++) {
                cks_msg_job_entry_t e = {cks_wire_cstr(buf->j[i])};
                status = cks_wire_entry_pack(CKS_WIRE_ENTRY_JOB, &e, page, CKS_WIRE_MAX_PAGE,
                                             &off);
            }
        } else if (m->what == CKS_SYNC_VERSIONS) {
            status = cks_md_version_list(txn, m->job.ptr, m->job.len,
                                         m->has_after ? &m->after : NULL, buf->v, max, &count,
                                         &more);
            for (size_t i = 0; status == CKS_OK && i < count; i++) {
                cks_msg_version_entry_t e;
                cks_sv_entry_from_rec(&e, &buf->v[i]);
                status = cks_wire_entry_pack(CKS_WIRE_ENTRY_VERSION, &e, page,
                                             CKS_WIRE_MAX_PAGE, &off);
            }
            if (status == CKS_OK && !more && count < max) {
                /* the job's drop records after its last page, as many as
                 * the page has room for (the newest) */
                size_t nd = 0;
                int dmore = 0;
                status    = cks_md_drop_list(txn, m->job.ptr, m->job.len, NULL, buf->d.v,
                                             buf->d.c, CKS_WIRE_MAX_ENTRIES, &nd, &dmore);
                for (size_t i = nd > max - count ? nd - (max - count) : 0;
                     status == CKS_OK && i < nd; i++) {
                    cks_msg_version_entry_t e = {0};
                    e.version    = buf->d.v[i];
                    e.parent     = CKS_MD_NO_PARENT;
                    e.state      = CKS_RP_STATE_DROPPED;
                    e.created_ns = buf->d.c[i];
                    status = cks_wire_entry_pack(CKS_WIRE_ENTRY_VERSION, &e, page,
                                                 CKS_WIRE_MAX_PAGE, &off);
                    count++;
                }
            }
        } else {
            cks_md_version_t rec;
            status = cks_md_version_get(txn, m->job.ptr, m->job.len, m->version, &rec);
            if (status == CKS_OK && !cks_rp_restorable(rec.state)) {
                status = CKS_ERR_NOT_RESTORABLE;
            }
            if (status == CKS_OK) {
                status = cks_md_object_list(txn, m->job.ptr, m->job.len, m->version,
                                            m->after_key.len ? m->after_key.ptr : NULL,
                                            m->after_key.len, buf->o, max, &count, &more);
            }
            for (size_t i = 0; status == CKS_OK && i < count; i++) {
                const cks_md_object_t *o = &buf->o[i];
                cks_msg_object_entry_t e;
                cks_sv_entry_from_obj(&e, o);
                status = cks_wire_entry_pack(CKS_WIRE_ENTRY_OBJECT, &e, page,
                                             CKS_WIRE_MAX_PAGE, &off);
            }
        }
        cks_md_txn_abort(txn);
    }
    free(buf);
    cks_msg_sync_reply_t r = {0};
    r.status = status;
    r.msg    = cks_wire_cstr(status == CKS_OK ? NULL : cks_status_string(status));
    r.synced = s->rp != NULL && s->rp->synced;
    r.count  = status == CKS_OK ? (uint32_t)count : 0;
    r.more   = status == CKS_OK ? (uint32_t)more : 0;
    if (status != CKS_OK || off == 0) {
        free(page);
        cks_sv_reply(conn, CKS_MSG_SYNC_REPLY, req_id, &r);
        return;
    }
    if (cks_tp_send(conn, CKS_MSG_SYNC_REPLY, CKS_WIRE_F_PAGE, req_id, &r, page, off,
                    CKS_MEM_HOST, NULL, cks_rp_page_sent, page) != CKS_INPROGRESS) {
        free(page);
    }
}

/* Hold a request that needs the versions this server coordinates (a begin
 * must not take a version number that exists elsewhere; a delete, abort or
 * seal of a version it has not learned yet must not answer "no such
 * version") until it has caught up; 0 when it cannot be held. */
static int cks_rp_hold(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, unsigned type,
                       const cks_msg_any_t *b)
{
    cks_rp_t *rp = s->rp;
    const cks_wire_str_t *job, *key = NULL;
    cks_rp_held_t *h;

    switch (type) {
        case CKS_MSG_VERSION_BEGIN: job = &b->m_VERSION_BEGIN.job; break;
        case CKS_MSG_VERSION_SEAL: job = &b->m_VERSION_SEAL.job; break;
        case CKS_MSG_VERSION_ABORT: job = &b->m_VERSION_ABORT.job; break;
        case CKS_MSG_VERSION_DELETE: job = &b->m_VERSION_DELETE.job; break;
        case CKS_MSG_OBJECT_DELETE:
            job = &b->m_OBJECT_DELETE.job;
            key = &b->m_OBJECT_DELETE.key;
            break;
        default: return 0;
    }
    if (job->len > CKS_JOB_MAX_LEN || (key != NULL && key->len > CKS_KEY_MAX_LEN) ||
        rp->nheld >= CKS_RP_HELD_MAX || (h = calloc(1, sizeof(*h))) == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_BUSY,
                            "catching up with the other servers: try again");
        return 1;
    }
    h->conn   = conn;
    h->type   = type;
    h->req_id = req_id;
    h->b      = *b;
    memcpy(h->job, job->ptr, job->len);
    cks_wire_str_t *hjob = type == CKS_MSG_VERSION_BEGIN   ? &h->b.m_VERSION_BEGIN.job
                           : type == CKS_MSG_VERSION_SEAL  ? &h->b.m_VERSION_SEAL.job
                           : type == CKS_MSG_VERSION_ABORT ? &h->b.m_VERSION_ABORT.job
                           : type == CKS_MSG_VERSION_DELETE ? &h->b.m_VERSION_DELETE.job
                                                            : &h->b.m_OBJECT_DELETE.job;
    hjob->ptr = h->job;
    if (type == CKS_MSG_VERSION_SEAL) {
        /* its primaries point into the message, which is gone when the seal
         * is handled: held without them (the version then waits for the
         * objects of a primary that died, until its deadline, as before) */
        h->b.m_VERSION_SEAL.primaries = cks_wire_cstr(NULL);
    }
    if (key != NULL) {
        memcpy(h->key, key->ptr, key->len);
        h->b.m_OBJECT_DELETE.key.ptr = h->key;
    }
    cks_tp_conn_get(conn);
    *rp->held_tail = h;
    rp->held_tail  = &h->next;
    rp->nheld++;
    return 1;
}

/* Caught up: handle what was held, in order. */
static void cks_rp_release_held(cks_server_h s, int cancel)
{
    cks_rp_t *rp = s->rp;
    while (rp->held != NULL) {
        cks_rp_held_t *h = rp->held;
        rp->held         = h->next;
        rp->nheld--;
        if (cancel) {
            cks_sv_reply_status(h->conn, h->req_id, CKS_ERR_SHUTTING_DOWN, NULL);
        } else if (!cks_tp_conn_failed(h->conn)) {
            cks_sv_redispatch(s, h->conn, h->type, h->req_id, &h->b);
        }
        cks_tp_conn_put(h->conn);
        free(h);
    }
    rp->held_tail = &rp->held;
}

int cks_rp_gate(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, unsigned type,
                const cks_msg_any_t *b)
{
    if (s->rp == NULL || s->rp->synced) {
        return 0;
    }
    if (cks_rp_hold(s, conn, req_id, type, b)) {
        return 1;
    }
    if (type != CKS_MSG_VERSION_STAT && type != CKS_MSG_VERSION_LIST &&
        type != CKS_MSG_OBJECT_STAT && type != CKS_MSG_OBJECT_LIST && type != CKS_MSG_JOB_LIST) {
        return 0;
    }
    cks_sv_reply_status(conn, req_id, CKS_ERR_BUSY,
                        "catching up with the other servers: ask another server, or again");
    return 1;
}

/* ---- repair: which chunks placed here are missing --------------------------------- */

typedef void (*cks_rp_missing_cb_t)(const cks_rp_task_t *t, void *arg);

/* Walk the manifest of (job, version): call cb for every chunk the placement
 * puts on this server that it holds no record of. Returns how many. */
static cks_status_t cks_rp_walk(cks_server_h s, cks_md_txn_h txn, const char *job,
                                size_t job_len, const cks_md_version_t *rec,
                                cks_rp_missing_cb_t cb, void *arg, uint64_t *n_p)
{
    cks_md_object_t *objs = malloc(CKS_WIRE_MAX_ENTRIES * sizeof(*objs));
    char after[CKS_KEY_MAX_LEN + 1];
    size_t after_len = 0, count;
    int more         = 1;
    cks_status_t status = objs ? CKS_OK : CKS_ERR_NO_MEMORY;
    unsigned k = rec->ec_k, m = rec->ec_m;

    *n_p = 0;
    if (k == 0 || m == 0 || rec->chunk_size == 0) {
        free(objs);
        return status;
    }
    while (status == CKS_OK && more) {
        status = cks_md_object_list(txn, job, job_len, rec->version, after_len ? after : NULL,
                                    after_len, objs, CKS_WIRE_MAX_ENTRIES, &count, &more);
        for (size_t i = 0; status == CKS_OK && i < count; i++) {
            const cks_md_object_t *o = &objs[i];
            uint64_t stripes         = cks_ec_stripe_count(o->size, k, rec->chunk_size);
            for (uint64_t st = 0; status == CKS_OK && st < stripes; st++) {
                uint16_t group[CKS_PLACE_WIDTH_MAX];
                if (cks_place(s->map, job, job_len, o->key, o->key_len, st, k, m, NULL,
                              group) != CKS_OK) {
                    break;
                }
                for (unsigned idx = 0; idx < k + m; idx++) {
                    cks_md_chunk_t ch;
                    if (group[idx] != s->self) {
                        continue;
                    }
                    cks_status_t cs = cks_md_chunk_get(txn, job, job_len, o->source_version,
                                                       o->key, o->key_len, st, idx, &ch);
                    if (cs == CKS_OK) {
                        continue;
                    }
                    if (cs != CKS_ERR_NO_SUCH_KEY) {
                        status = cs;
                        break;
                    }
                    (*n_p)++;
                    if (cb != NULL) {
                        cks_rp_task_t t = {0};
                        memcpy(t.job, job, job_len);
                        t.job_len = (uint32_t)job_len;
                        memcpy(t.key, o->key, o->key_len);
                        t.key_len = o->key_len;
                        t.version = o->source_version;
                        t.mversion = rec->version;
                        t.stripe  = st;
                        t.idx     = idx;
                        t.k       = k;
                        t.m       = m;
                        t.chunk   = rec->chunk_size;
                        cb(&t, arg);
                    }
                }
            }
        }
        if (status == CKS_OK && count > 0) {
            after_len = objs[count - 1].key_len;
            memcpy(after, objs[count - 1].key, after_len);
        }
        more = more && count > 0;
    }
    free(objs);
    return status;
}

static void cks_rp_task_add(const cks_rp_task_t *t, void *arg)
{
    cks_rp_t *rp = arg;
    uint8_t key[CKS_JOB_MAX_LEN + CKS_KEY_MAX_LEN + 32];
    size_t klen = cks_rp_ckey(key, t);
    if (rp->ntasks >= CKS_RP_TASKS_MAX || cks_hmap_get(rp->queued, key, klen) != NULL ||
        cks_hmap_put(rp->queued, key, klen, rp) != CKS_OK) {
        return; /* queued already, or more than a scan takes: the next scan */
    }
    rp->tasks[rp->ntasks++] = *t;
}

typedef struct {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    cks_md_version_t rec;
} cks_rp_ver_t;

typedef struct {
    cks_rp_ver_t *v;
    size_t n, cap;
    int degraded_coord_only; /* the coordinator's checks: DEGRADED versions it coordinates */
    cks_server_h s;
} cks_rp_vers_t;

static cks_status_t cks_rp_vers_add(const char *job, size_t job_len, const cks_md_version_t *v,
                                    void *arg)
{
    cks_rp_vers_t *vs = arg;
    if (!cks_rp_restorable(v->state)) {
        return CKS_OK;
    }
    if (vs->degraded_coord_only &&
        (v->state != CKS_VSTATE_DEGRADED ||
         cks_place_coordinator(vs->s->map, job, job_len, v->version) != vs->s->self)) {
        return CKS_OK;
    }
    if (vs->n == vs->cap) {
        size_t cap = vs->cap ? vs->cap * 2 : 64;
        void *p    = realloc(vs->v, cap * sizeof(*vs->v));
        if (p == NULL) {
            return CKS_ERR_NO_MEMORY;
        }
        vs->v   = p;
        vs->cap = cap;
    }
    memcpy(vs->v[vs->n].job, job, job_len);
    vs->v[vs->n].job[job_len] = '\0';
    vs->v[vs->n].job_len      = (uint32_t)job_len;
    vs->v[vs->n].rec          = *v;
    vs->n++;
    return CKS_OK;
}

/* Find every chunk placed here that is missing: the task list. */
static void cks_rp_scan(cks_server_h s)
{
    cks_rp_t *rp      = s->rp;
    cks_rp_vers_t vs  = {NULL, 0, 0, 0, s};
    cks_md_txn_h txn;
    cks_status_t status;
    uint64_t before = rp->ntasks - rp->taski;

    rp->scan_wanted    = 0;
    rp->next_scan_ns   = cks_time_ns() + CKS_RP_SCAN_EVERY_NS;
    rp->failed_at_scan = rp->failed;
    if (rp->taski > 0) { /* drop the tasks done */
        memmove(rp->tasks, rp->tasks + rp->taski, (rp->ntasks - rp->taski) * sizeof(*rp->tasks));
        rp->ntasks -= rp->taski;
        rp->taski = 0;
    }
    if (rp->tasks == NULL &&
        (rp->tasks = malloc(CKS_RP_TASKS_MAX * sizeof(*rp->tasks))) == NULL) {
        return;
    }
    status = cks_md_txn_begin(s->md, 0, &txn);
    if (status != CKS_OK) {
        return;
    }
    status = cks_md_version_foreach(txn, cks_rp_vers_add, &vs);
    for (size_t i = 0; status == CKS_OK && i < vs.n; i++) {
        uint64_t n;
        status = cks_rp_walk(s, txn, vs.v[i].job, vs.v[i].job_len, &vs.v[i].rec,
                             cks_rp_task_add, rp, &n);
    }
    cks_md_txn_abort(txn);
    free(vs.v);
    if (status != CKS_OK) {
        cks_warn("repair: scan failed: %s", cks_status_string(status));
    }
    if (rp->ntasks > before) {
        cks_info("repair: %zu chunks placed here are missing: rebuilding them (at most %llu "
                 "MiB/s)", rp->ntasks, (unsigned long long)(rp->rate_cap >> 20));
    }
}

/* ---- repair: one chunk ------------------------------------------------------------ */

static void cks_rp_work_end(cks_rp_work_t *w, cks_status_t status, const char *why)
{
    cks_server_h s = w->s;
    cks_rp_t *rp   = s->rp;
    uint8_t key[CKS_JOB_MAX_LEN + CKS_KEY_MAX_LEN + 32];

    if (status != CKS_OK && status != CKS_ERR_CANCELED && status != CKS_ERR_SHUTTING_DOWN) {
        rp->failed++;
        uint64_t now = cks_time_ns();
        if (now - rp->warned_ns > 1000000000ull) {
            rp->warned_ns = now;
            cks_warn("repair: chunk %u of stripe %llu of '%s' (version %llu of '%s') not "
                     "rebuilt: %s (%s); tried again later",
                     w->t.idx, (unsigned long long)w->t.stripe, w->t.key,
                     (unsigned long long)w->t.version, w->t.job, cks_status_string(status),
                     why);
        }
    }
    cks_hmap_del(rp->queued, key, cks_rp_ckey(key, &w->t));
    for (unsigned i = 0; i < CKS_PLACE_WIDTH_MAX; i++) {
        free(w->f[i].buf);
    }
    free(w);
    rp->inflight--;
    if (!s->stop) {
        cks_rp_work_start(s);
    }
}

static void cks_rp_recorded(cks_server_h s, cks_mdq_job_t *j)
{
    cks_rp_work_t *w = j->ctx;
    cks_rp_t *rp     = s->rp;
    cks_status_t st  = j->status;
    if (st != CKS_OK) {
        /* not recorded (a duplicate: the chunk came meanwhile): its space
         * was never anyone's */
        cks_arena_free(s->arena, j->chunks[0].arena_offset, j->chunks[0].arena_len);
    } else {
        rp->chunks_done++;
        rp->bytes_done += w->t.chunk;
        rp->win_bytes += w->t.chunk;
    }
    free(j->chunks);
    free(j);
    /* a duplicate: the chunk came meanwhile; a version dropped meanwhile:
     * nothing needs it any more */
    cks_rp_work_end(w,
                    st == CKS_ERR_DUPLICATE_KEY || st == CKS_ERR_NO_SUCH_VERSION ||
                            st == CKS_ERR_NOT_RESTORABLE
                        ? CKS_OK
                        : st,
                    "not recorded");
}

/* k chunks are here: decode the missing one into arena space, record it. */
static void cks_rp_decode(cks_rp_work_t *w)
{
    cks_server_h s = w->s;
    uint8_t *chunks[CKS_PLACE_WIDTH_MAX] = {0};
    uint8_t present[CKS_PLACE_WIDTH_MAX] = {0};
    cks_ec_h ec = cks_sv_ec_get(s, w->t.k, w->t.m);
    cks_mdq_job_t *j;
    cks_status_t st;
    unsigned used = 0;

    if (ec == NULL) {
        cks_rp_work_end(w, CKS_ERR_NO_MEMORY, "no coder");
        return;
    }
    st = cks_arena_alloc(s->arena, w->t.chunk, &w->off);
    if (st != CKS_OK) {
        cks_rp_work_end(w, st, "arena full");
        return;
    }
    for (unsigned i = 0; i < w->t.k + w->t.m && used < w->t.k; i++) {
        if (w->f[i].buf != NULL && w->f[i].status == CKS_OK && w->f[i].pending == 0 &&
            i != w->t.idx) {
            chunks[i]  = w->f[i].buf;
            present[i] = 1;
            used++;
        }
    }
    chunks[w->t.idx] = cks_arena_base(s->arena) + w->off;
    st = cks_ec_decode(ec, w->t.chunk, chunks, present);
    j  = st == CKS_OK ? cks_sv_mdq_job(s, CKS_MDQ_CHUNKS, w->t.job, w->t.job_len, w->t.version)
                      : NULL;
    if (j == NULL || (j->chunks = calloc(1, sizeof(*j->chunks))) == NULL) {
        free(j);
        cks_arena_free(s->arena, w->off, w->t.chunk);
        cks_rp_work_end(w, st == CKS_OK ? CKS_ERR_NO_MEMORY : st, "decode");
        return;
    }
    memcpy(j->key, w->t.key, w->t.key_len);
    j->key_len   = w->t.key_len;
    j->nchunks   = 1;
    j->chunks[0] = (cks_md_chunk_t){w->t.stripe, w->t.idx, w->t.chunk,
                                    cks_crc64(0, chunks[w->t.idx], w->t.chunk), w->off,
                                    w->t.chunk};
    j->data      = chunks[w->t.idx];
    j->chunk_guard   = 1;
    j->guard_version = w->t.mversion;
    j->done      = cks_rp_recorded;
    j->ctx       = w;
    cks_mdq_push(&s->mdq, j);
}

static void cks_rp_fetch_more(cks_rp_work_t *w);

static void cks_rp_fetch_end(cks_rp_fetch_t *f)
{
    cks_rp_work_t *w = f->w;
    if (--f->pending > 0) {
        return;
    }
    if (f->status == CKS_OK && cks_crc64(0, f->buf, w->t.chunk) != f->crc) {
        f->status = CKS_ERR_CRC_MISMATCH;
    }
    if (f->status == CKS_OK) {
        w->have++;
    } else {
        free(f->buf);
        f->buf = NULL;
    }
    w->reading--;
    cks_rp_fetch_more(w);
}

static void cks_rp_fetch_recvd(void *arg, cks_status_t status)
{
    cks_rp_fetch_t *f = arg;
    if (status != CKS_OK && f->status == CKS_OK) {
        f->status = status;
    }
    cks_rp_fetch_end(f);
}

static void cks_rp_fetch_reply(void *arg, const cks_wire_hdr_t *hdr, const cks_msg_any_t *body,
                               cks_tp_data_t *data)
{
    cks_rp_fetch_t *f                    = arg;
    const cks_msg_chunk_get_reply_t *r   = &body->m_CHUNK_GET_REPLY;
    uint64_t len                         = f->w->t.chunk;

    if (hdr->type != CKS_MSG_CHUNK_GET_REPLY || data == NULL || data->length != len ||
        r->chunk_len != len || r->offset != 0 || r->length != len) {
        f->status = CKS_ERR_BAD_MESSAGE;
        return;
    }
    f->crc = r->crc64;
    if (!data->is_rndv) {
        memcpy(f->buf, data->ptr, len);
        return;
    }
    f->pending++;
    cks_status_t st = cks_tp_data_recv(f->w->s->tp, data, f->buf, CKS_MEM_HOST, NULL,
                                       cks_rp_fetch_recvd, f);
    if (st != CKS_INPROGRESS) {
        f->pending--;
        f->status = st;
    }
}

static void cks_rp_fetch_done(void *arg, cks_status_t status, const char *msg)
{
    cks_rp_fetch_t *f = arg;
    if (status != CKS_OK && f->status == CKS_OK) {
        f->status = status;
    }
    cks_rp_fetch_end(f);
}

/* Ask members of the stripe's group for their chunks until k are here. */
static void cks_rp_fetch_more(cks_rp_work_t *w)
{
    cks_server_h s = w->s;
    unsigned width = w->t.k + w->t.m;

    while (!s->stop && w->have + w->reading < w->t.k && w->next < width) {
        unsigned i = w->next++;
        cks_rp_fetch_t *f = &w->f[i];
        if (i == w->t.idx || w->group[i] == s->self) {
            continue;
        }
        cks_tp_conn_h conn = cks_sv_peer_down(s, w->group[i]) ? NULL
                                                              : cks_sv_peer_conn(s, w->group[i]);
        if (conn == NULL || (f->buf = malloc(w->t.chunk)) == NULL) {
            continue;
        }
        f->w       = w;
        f->idx     = i;
        f->status  = CKS_OK;
        f->pending = 1;
        cks_msg_chunk_get_t m = {{w->t.job, w->t.job_len}, w->t.version,
                                 {w->t.key, w->t.key_len}, w->t.stripe, i, 0, w->t.chunk};
        w->reading++;
        if (cks_tp_call_data(conn, CKS_MSG_CHUNK_GET, CKS_WIRE_F_BACKGROUND, &m, CKS_RP_FETCH_MS,
                             cks_rp_fetch_reply,
                             cks_rp_fetch_done, f) != CKS_INPROGRESS) {
            w->reading--;
            free(f->buf);
            f->buf = NULL;
        }
    }
    if (w->reading > 0) {
        return;
    }
    if (s->stop) {
        cks_rp_work_end(w, CKS_ERR_CANCELED, "stopping");
    } else if (w->have >= w->t.k) {
        cks_rp_decode(w);
    } else {
        char why[64];
        snprintf(why, sizeof(why), "%u of the %u chunks needed could be read", w->have,
                 w->t.k);
        cks_rp_work_end(w, CKS_ERR_DATA_LOST, why);
    }
}

/* Start tasks while the pace allows. */
static void cks_rp_work_start(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    uint64_t now = cks_time_ns();
    /* clients' puts and reads come first: the tighter cap while they run */
    uint64_t cap = now - s->fg_ns < CKS_RP_IDLE_NS ? rp->rate_cap : rp->idle_cap;

    if (cap != UINT64_MAX) {
        double add = (double)(now - rp->tokens_ns) * 1e-9 * (double)cap;
        rp->tokens += add;
        if (rp->tokens > (double)cap / 4) {
            rp->tokens = (double)cap / 4; /* a quarter second of burst */
        }
    } else if (rp->rate_cap != UINT64_MAX && rp->tokens > (double)rp->rate_cap / 4) {
        rp->tokens = (double)rp->rate_cap / 4; /* clients may come back at any time */
    }
    rp->tokens_ns = now;
    while (!s->stop && rp->inflight < CKS_RP_INFLIGHT && rp->taski < rp->ntasks) {
        cks_rp_task_t *t = &rp->tasks[rp->taski];
        double cost      = (double)t->k * (double)t->chunk;
        if (cap != UINT64_MAX && rp->tokens < cost && rp->inflight > 0) {
            return; /* cks_rp_progress() starts it when the bucket allows */
        }
        if (cap != UINT64_MAX && rp->tokens < 0) {
            return;
        }
        rp->tokens -= cap != UINT64_MAX ? cost : 0;
        rp->taski++;
        cks_rp_work_t *w = calloc(1, sizeof(*w));
        if (w == NULL) {
            return;
        }
        w->s = s;
        w->t = *t;
        rp->inflight++;
        if (cks_place(s->map, t->job, t->job_len, t->key, t->key_len, t->stripe, t->k, t->m,
                      NULL, w->group) != CKS_OK) {
            cks_rp_work_end(w, CKS_ERR_INTERNAL, "no placement");
            continue;
        }
        cks_rp_fetch_more(w);
    }
}

/* ---- coordinator: DEGRADED to PROTECTED ---------------------------------------------- */

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

static void cks_rp_check_versions(cks_server_h s)
{
    cks_rp_t *rp     = s->rp;
    cks_rp_vers_t vs = {NULL, 0, 0, 1, s};
    cks_md_txn_h txn;

    rp->next_check_ns = cks_time_ns() + CKS_RP_CHECK_EVERY_NS;
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

/* ---- figures, life cycle ------------------------------------------------------------ */

void cks_rp_repair_status(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id)
{
    cks_rp_t *rp                    = s->rp;
    cks_msg_repair_status_reply_t r = {0};
    r.status = rp != NULL ? CKS_OK : CKS_ERR_UNSUPPORTED;
    r.msg    = cks_wire_cstr(rp != NULL ? NULL : "not a cluster server");
    if (rp != NULL) {
        uint64_t left = rp->ntasks - rp->taski + rp->inflight;
        uint64_t bytes = 0;
        for (size_t i = rp->taski; i < rp->ntasks; i++) {
            bytes += rp->tasks[i].chunk;
        }
        r.synced      = (uint32_t)rp->synced;
        r.id          = cks_cluster_server(s->map, s->self)->id;
        r.chunks_left = left;
        r.bytes_left  = bytes;
        r.chunks_done = rp->chunks_done;
        r.bytes_done  = rp->bytes_done;
        r.rate        = rp->rate;
        r.rate_cap    = rp->rate_cap == UINT64_MAX ? 0 : rp->rate_cap;
    }
    cks_sv_reply(conn, CKS_MSG_REPAIR_STATUS_REPLY, req_id, &r);
}

cks_status_t cks_rp_init(cks_server_h s)
{
    cks_rp_t *rp = calloc(1, sizeof(*rp));
    if (rp == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    rp->s        = s;
    rp->answered = calloc(cks_cluster_nservers(s->map), 1);
    if (rp->answered == NULL || cks_hmap_create(&rp->queued) != CKS_OK ||
        cks_hmap_create(&rp->checking) != CKS_OK) {
        free(rp->answered);
        cks_hmap_destroy(rp->queued);
        free(rp);
        return CKS_ERR_NO_MEMORY;
    }
    rp->rate_cap  = s->p.repair_rate ? s->p.repair_rate : CKS_RP_RATE_DEFAULT;
    rp->idle_cap  = s->p.repair_idle_rate ? s->p.repair_idle_rate : UINT64_MAX;
    rp->start_ns  = cks_time_ns();
    rp->tokens_ns = rp->start_ns;
    rp->win_ns    = rp->start_ns;
    rp->next_check_ns = rp->start_ns + CKS_RP_CHECK_EVERY_NS;
    rp->peer      = (size_t)-1;
    rp->held_tail = &rp->held;
    s->rp         = rp;
    if (cks_cluster_nservers(s->map) == 1) {
        rp->synced = 1;
    }
    return CKS_OK;
}

void cks_rp_fini(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    if (rp == NULL) {
        return;
    }
    cks_rp_release_held(s, 1);
    cks_rp_round_reset(rp);
    cks_hmap_destroy(rp->queued);
    cks_hmap_destroy(rp->checking);
    free(rp->answered);
    free(rp->tasks);
    free(rp);
    s->rp = NULL;
}

int cks_rp_progress(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    uint64_t now = cks_time_ns();
    int timeout  = 1000;

    if (rp == NULL || s->stop) {
        return -1;
    }
    if (!rp->round && now >= rp->next_round_ns) {
        cks_rp_round_begin(s);
    }
    if (now - rp->win_ns >= 2000000000ull) { /* the rate over the last 2 s */
        rp->rate      = (uint64_t)((double)rp->win_bytes * 1e9 / (double)(now - rp->win_ns));
        rp->win_bytes = 0;
        rp->win_ns    = now;
    }
    if (!rp->synced) {
        return 100;
    }
    if (rp->failed > rp->failed_at_scan &&
        rp->next_scan_ns > now + CKS_RP_RESCAN_NS) {
        rp->next_scan_ns = now + CKS_RP_RESCAN_NS; /* tasks failed: try again soon */
    }
    if (rp->inflight == 0 && rp->taski >= rp->ntasks &&
        (rp->scan_wanted || now >= rp->next_scan_ns)) {
        cks_rp_scan(s);
    }
    if (rp->taski < rp->ntasks) {
        cks_rp_work_start(s);
        if (rp->taski < rp->ntasks && rp->inflight < CKS_RP_INFLIGHT) {
            timeout = 10; /* the bucket refills */
        }
    }
    if (rp->checks == 0 && now >= rp->next_check_ns) {
        cks_rp_check_versions(s);
    }
    return timeout;
}
