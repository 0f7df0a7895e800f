/*
 * DESIGN: catch-up - a returning or replacement server learns every commit,
 * drop and repair it missed (a round of SYNC_LIST pages from its peers,
 * compared with what it holds, the differences applied), and answers
 * peers' SYNC_LIST; until its first round ends it holds the questions it
 * could answer wrongly. See repair.c for the whole design.
 *
 * Never: answer lists, stats or latest before the first round ended.
 */
#include "repair_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- catch-up: the round ---------------------------------------------------------- */

static void cks_rp_seen_free(const void *key, size_t len, void *value, void *arg)
{
    free(value);
}

void cks_rp_round_reset(cks_rp_t *rp)
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

void cks_rp_round_begin(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    cks_rp_round_reset(rp);
    if (cks_hmap_create(&rp->seen) != CKS_OK) {
        rp->next_round_ns = cks_time_ns() + CKS_RP_RETRY_NS;
        return;
    }
    memset(rp->answered, 0, cks_cluster_nservers(s->map));
    rp->round   = 1;
    rp->round_real_ns = cks_time_real_ns();
    rp->round_held = 0;
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
            if (st == CKS_OK) {
                void *p = cks_array_grow(rp->jobs, &rp->capjobs, rp->njobs + 1,
                                         sizeof(*rp->jobs), 64);
                st      = p ? CKS_OK : CKS_ERR_NO_MEMORY;
                if (p != NULL) {
                    rp->jobs = p;
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
        rp->answered[rp->peer] = lc->synced == 1   ? CKS_RP_ANS_SYNCED
                                 : lc->synced == 2 ? CKS_RP_ANS_WAITING
                                                   : CKS_RP_ANS_CATCHING;
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
    void *p = cks_array_grow(rp->acts, &rp->capacts, rp->nacts + 1, sizeof(*rp->acts),
                             64);
    if (p == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    rp->acts = p;
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
    /* committed while the lists were being taken: in none of those taken
     * before, and not deleted for that (CKS_RP_SETTLED_NS) */
    if (cks_rp_restorable(v->state) && coord != s->self && rp->answered[coord] == 1 &&
        v->sealed_ns != 0 && v->sealed_ns + CKS_RP_SETTLED_NS <= rp->round_real_ns) {
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
    unsigned answered = 0, unsynced = 0, catching = 0;
    uint64_t now      = cks_time_ns();
    for (size_t i = 0; i < cks_cluster_nservers(s->map); i++) {
        answered += rp->answered[i] != CKS_RP_ANS_NONE;
        unsynced += rp->answered[i] >= CKS_RP_ANS_CATCHING;
        catching += rp->answered[i] == CKS_RP_ANS_CATCHING;
    }
    int first = !rp->synced;
    rp->round         = 0;
    rp->next_round_ns = now + (answered + 1 < cks_cluster_nservers(s->map) || unsynced > 0
                                   ? CKS_RP_ROUND_SOON_NS
                                   : CKS_RP_ROUND_EVERY_NS);
    if (first && catching > 0 && now - rp->start_ns < CKS_RP_FIRST_WAIT_NS) {
        /* not caught up yet: what was learned is kept, and the round runs
         * again once those servers may have caught up. Those that wait
         * only on such servers themselves are not waited for: they would
         * wait on this one in turn (servers restarted together) */
        rp->next_round_ns = now + CKS_RP_AGAIN_NS;
        rp->waiting       = 1;
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

void cks_rp_round_step(cks_server_h s)
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
        if (!rp->round_held && cks_fault_fire("catchup_hold")) { /* test builds */
            rp->round_held    = 1;
            rp->hold_until_ns = cks_time_ns() + CKS_RP_HOLD_NS;
            cks_info("catch-up: every list taken; comparing in %llu ms (fault catchup_hold)",
                     (unsigned long long)(CKS_RP_HOLD_NS / 1000000));
        }
        if (rp->hold_until_ns != 0 && cks_time_ns() < rp->hold_until_ns) {
            return; /* cks_rp_progress() steps again */
        }
        if (rp->hold_until_ns != 0) {
            rp->hold_until_ns = 0;
            cks_info("catch-up: comparing after the hold");
        }
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
    r.synced = s->rp == NULL ? 0u : s->rp->synced ? 1u : s->rp->waiting ? 2u : 0u;
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

