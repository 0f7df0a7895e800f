/*
 * DESIGN: a version's outcome at its coordinator: decided once the ranks'
 * seals (seal.c) and the objects' reports (objects.c) add up, or on a
 * failure; the commit (manifest recorded, fenced, broadcast) or abort (drop
 * broadcast), the waiters answered, the reasons of aborts kept for ranks
 * that finish later, and the drops a peer missed sent again. Under the
 * handlers that feed it; above the fence (fence.c) and the claim table
 * (claims.c). See cluster.c for the whole flow.
 *
 * Never: record or send an outcome without a majority's fence.
 */
#include "cluster_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void cks_bcast_send(cks_bcast_t *b);
static void cks_sv_waiters_answer(cks_server_h s, cks_sv_version_t *v);
static void cks_sv_bcast_finish(cks_server_h s, cks_sv_version_t *v);

/* ---- drops a peer missed ------------------------------------------------------------ */

void cks_sv_owe(cks_server_h s, size_t pos, const char *job, size_t job_len,
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
void cks_sv_owed_send(cks_server_h s, int all_cancel)
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
        if (cks_tp_call(conn, CKS_MSG_VERSION_DROP, 0, &m, NULL, 0, NULL, CKS_SV_OWED_CALL_MS,
                        cks_sv_owed_done, o) != CKS_INPROGRESS) {
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
                             cks_sv_member_ms(v->member_ms), cks_bcast_done, b);
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
                                 off ? b->page : NULL, off, NULL, cks_sv_member_ms(v->member_ms),
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
    if (drop && (v->wait == CKS_SV_WAIT_ABORT || v->wait == CKS_SV_WAIT_DELETE) &&
        v->bcast > 1) {
        /* cks_sv_drop_grace() answers its callers then if some server has
         * not taken it by that time */
        v->told_due_ns = cks_time_ns() + CKS_SV_DROP_GRACE_NS;
    }
    if (--v->bcast == 0) {
        cks_sv_bcast_finish(s, v);
    }
}

/* The reason a failed version was aborted, kept for ranks that finish later. */
static void cks_sv_aborted_note(cks_server_h s, const cks_sv_version_t *v)
{
    cks_wire_str_t job        = {v->job, v->job_len};
    const cks_sv_aborted_t *k = cks_sv_aborted_find(s, &job, v->version);
    /* noted once (an abort's callers may be answered before its drop ends) */
    cks_sv_aborted_t *a = k != NULL ? &s->aborted[k - s->aborted]
                                    : &s->aborted[s->aborted_next++ % CKS_SV_ABORTED_MAX];
    memcpy(a->job, v->job, v->job_len);
    a->job[v->job_len] = '\0';
    a->version         = v->version;
    a->status          = v->failed;
    snprintf(a->why, sizeof(a->why), "%s", v->why);
}

const cks_sv_aborted_t *cks_sv_aborted_find(cks_server_h s, const cks_wire_str_t *job,
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

/* What only the coordinator of an open version holds (its objects, the
 * ranks that finished, the keys deleted, the reports and the primaries'
 * tallies): freed once the outcome is decided or disowned. */
static void cks_sv_cv_coord_free(cks_sv_version_t *v)
{
    free(v->objs);
    v->objs  = NULL;
    v->nobjs = v->capobjs = 0;
    free(v->ranks_done);
    v->ranks_done = NULL;
    cks_hmap_destroy(v->deleted);
    v->deleted = NULL;
    cks_hmap_destroy(v->reported);
    v->reported = NULL;
    cks_hmap_destroy(v->reporters);
    v->reporters = NULL;
    free(v->stored_on);
    free(v->reported_by);
    v->stored_on = v->reported_by = NULL;
}

/* Answer everyone who waits for the version's outcome. */
static void cks_sv_waiters_answer(cks_server_h s, cks_sv_version_t *v)
{
    int committed = v->wait == CKS_SV_WAIT_SEAL && v->bcast_reply == CKS_OK;
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
}

/* The version's outcome is known everywhere (or owed to those that did not
 * take it): answer everyone who still waits. */
static void cks_sv_bcast_finish(cks_server_h s, cks_sv_version_t *v)
{
    int committed = v->wait == CKS_SV_WAIT_SEAL && v->bcast_reply == CKS_OK;
    cks_sv_kept_forget(s, v->job, v->job_len, v->version);
    cks_sv_waiters_answer(s, v);
    v->wait        = CKS_SV_WAIT_NONE;
    v->told        = 0;
    v->told_due_ns = 0;
    if (committed) {
        cks_sv_flush_committed(s, v->job, v->job_len, v->version); /* --flush-every */
    }
    cks_sv_cv_coord_free(v);
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

/* An abort or a delete is decided once its drop is recorded here: a server
 * that does not take the drop is owed it (cks_bcast_done()), whatever it
 * answers, and a restore asks the coordinator first, whose "no such
 * version" is the truth. So its callers wait for the servers that answer
 * (a list on any of them then no longer shows the version), but not past
 * CKS_SV_DROP_GRACE_NS for one that does not (a cut one would hold them
 * for its member timeout, longer than a client waits); later callers are
 * told that the version ended (seal.c). The cluster's progress calls this
 * once that grace has passed and the drop still goes out. */
void cks_sv_drop_grace(cks_server_h s, cks_sv_version_t *v)
{
    if (v->nwaiters > 0) {
        cks_info("version %llu of '%s': its %s answered; its drop still goes to %u servers",
                 (unsigned long long)v->version, v->job,
                 v->wait == CKS_SV_WAIT_DELETE ? "delete" : "abort", v->bcast);
    }
    cks_sv_waiters_answer(s, v);
    v->told        = 1;
    v->told_due_ns = 0;
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
    /* NO_QUORUM: the ranks learn that the outcome is not recorded, unless a
     * later candidate took the version over (they ask it next) */
    cks_status_t reply = status == CKS_ERR_NO_QUORUM ? status : CKS_ERR_NOT_COORDINATOR;
    for (size_t i = 0; i < v->nwaiters; i++) {
        cks_sv_waiter_t *w = &v->waiters[i];
        cks_sv_reply_status(w->conn, w->req_id, reply,
                            "server %zu cannot record the outcome of version %llu: %s",
                            s->self, (unsigned long long)v->version, why != NULL ? why : "");
        cks_tp_conn_put(w->conn);
    }
    free(v->waiters);
    v->waiters  = NULL;
    v->nwaiters = v->capwaiters = 0;
    cks_sv_cv_coord_free(v);
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
void cks_sv_cv_finish(cks_server_h s, cks_sv_version_t *v, int commit)
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
        j->rec.sealed_ns = cks_time_real_ns();
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
void cks_sv_cv_check(cks_server_h s, cks_sv_version_t *v)
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
