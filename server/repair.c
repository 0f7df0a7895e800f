/*
 * DESIGN: catch-up and repair in an erasure-coded cluster. Runs on the
 * progress thread, as callbacks of the calls it makes to peers, of the
 * metadata writer's jobs it queues, and of cks_rp_progress() (heal.c:
 * the timers, and the state's life cycle); a repair's CRC checks and
 * decode run on its decoder threads.
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
 *     members (CHUNK_GET, into fetch buffers kept while repair runs); a
 *     decoder thread (one of --encoders, a background-work queue of its own)
 *     checks each against its CRC (one that fails is read from another
 *     member instead), decodes the missing one with ISA-L straight into
 *     arena space allocated for it, and computes its CRC; the progress
 *     thread, which only receives meanwhile, records it. Reads are paced by a
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
#include "repair_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- state ------------------------------------------------------------------------- */


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

int cks_rp_restorable(uint32_t state)
{
    return state == CKS_VSTATE_PROTECTED || state == CKS_VSTATE_DEGRADED;
}

/* Is state `a` better than `b` (the same version): PROTECTED over
 * DEGRADED, and fewer chunks missing. */
int cks_rp_better(uint32_t a_state, uint64_t a_missing, uint32_t b_state,
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

void cks_rp_rec_from_entry(cks_md_version_t *r, const cks_msg_version_entry_t *e)
{
    *r = (cks_md_version_t){e->version,    e->parent,     (cks_vstate_t)e->state,
                            e->nranks,     e->created_ns, e->sealed_ns,
                            e->nobjects,   e->bytes,      e->k,
                            e->m,          e->chunk_size, e->redundancy,
                            e->missing};
}


/* ---- repair: which chunks placed here are missing --------------------------------- */


/* Walk the manifest of (job, version): call cb for every chunk the placement
 * puts on this server that it holds no record of. Returns how many. */
cks_status_t cks_rp_walk(cks_server_h s, cks_md_txn_h txn, const char *job,
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

cks_status_t cks_rp_vers_add(const char *job, size_t job_len, const cks_md_version_t *v,
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
    void *p = cks_array_grow(vs->v, &vs->cap, vs->n + 1, sizeof(*vs->v), 64);
    if (p == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    vs->v = p;
    memcpy(vs->v[vs->n].job, job, job_len);
    vs->v[vs->n].job[job_len] = '\0';
    vs->v[vs->n].job_len      = (uint32_t)job_len;
    vs->v[vs->n].rec          = *v;
    vs->n++;
    return CKS_OK;
}

/* Find every chunk placed here that is missing: the task list. */
void cks_rp_scan(cks_server_h s)
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

/* ---- repair: fetch buffers, kept while repair runs ------------------------------- */

/* A chunk-sized buffer: one kept from an earlier task (its pages already
 * touched), or a new one. */
static uint8_t *cks_rp_buf_get(cks_rp_t *rp, uint64_t chunk)
{
    if (chunk != rp->pool_chunk) {
        cks_rp_pool_drain(rp);
        rp->pool_chunk = chunk;
    }
    return rp->npool > 0 ? rp->pool[--rp->npool] : malloc(chunk);
}

static void cks_rp_buf_put(cks_rp_t *rp, uint8_t *buf, uint64_t chunk)
{
    if (buf == NULL) {
        return;
    }
    if (chunk == rp->pool_chunk && rp->npool < CKS_RP_POOL_MAX) {
        rp->pool[rp->npool++] = buf;
    } else {
        free(buf);
    }
}

void cks_rp_pool_drain(cks_rp_t *rp)
{
    while (rp->npool > 0) {
        free(rp->pool[--rp->npool]);
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
        cks_rp_buf_put(rp, w->f[i].buf, w->t.chunk);
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

static void cks_rp_fetch_more(cks_rp_work_t *w);

/* k chunks are here: the decoders check their CRCs and decode the missing
 * one into arena space (cks_rp_decode_run); the progress thread goes on
 * receiving meanwhile. */
static void cks_rp_decode(cks_rp_work_t *w)
{
    cks_server_h s = w->s;
    cks_status_t st;
    unsigned used = 0;

    w->ec = cks_sv_ec_get(s, w->t.k, w->t.m);
    if (w->ec == NULL) {
        cks_rp_work_end(w, CKS_ERR_NO_MEMORY, "no coder");
        return;
    }
    st = cks_arena_alloc(s->arena, w->t.chunk, &w->off);
    if (st != CKS_OK) {
        cks_rp_work_end(w, st, "arena full");
        return;
    }
    memset(w->chunks, 0, sizeof(w->chunks));
    memset(w->present, 0, sizeof(w->present));
    for (unsigned i = 0; i < w->t.k + w->t.m && used < w->t.k; i++) {
        if (w->f[i].buf != NULL && w->f[i].status == CKS_OK && w->f[i].pending == 0 &&
            i != w->t.idx) {
            w->chunks[i]  = w->f[i].buf;
            w->present[i] = 1;
            used++;
        }
    }
    w->chunks[w->t.idx] = cks_arena_base(s->arena) + w->off;
    if (s->rp->wq == NULL || cks_workq_push(s->rp->wq, &w->wq) != CKS_OK) {
        cks_arena_free(s->arena, w->off, w->t.chunk);
        cks_rp_work_end(w, CKS_ERR_CANCELED, "stopping");
    }
}

/* On a decoder thread: only the work's decode fields, the fetched chunks
 * and its arena space (allocated for it) are touched. */
static void cks_rp_decode_run(cks_workq_t *q, cks_workq_job_t *l, void *arg)
{
    cks_rp_work_t *w = CKS_CONTAINER_OF(l, cks_rp_work_t, wq);

    (void)q;
    (void)arg;
    for (unsigned i = 0; i < w->t.k + w->t.m; i++) {
        if (w->present[i] && cks_crc64(0, w->chunks[i], w->t.chunk) != w->f[i].crc) {
            w->dstatus = CKS_ERR_CRC_MISMATCH;
            w->bad     = i;
            return;
        }
    }
    w->dstatus = cks_ec_decode(w->ec, w->t.chunk, w->chunks, w->present);
    if (w->dstatus == CKS_OK) {
        w->crc = cks_crc64(0, w->chunks[w->t.idx], w->t.chunk);
    }
}

/* A decode is back: a chunk that failed its CRC is read from another
 * member instead; a rebuilt chunk goes to the metadata writer with the CRC
 * the decoder computed from its bytes (no `data`: the writer's one thread
 * does not CRC them a second time, as it does a chunk that came over the
 * wire). */
static void cks_rp_decode_done(cks_rp_work_t *w, int cancel)
{
    cks_server_h s = w->s;
    cks_mdq_job_t *j;

    cancel = cancel || s->stop;
    if (cancel || w->dstatus != CKS_OK) {
        cks_arena_free(s->arena, w->off, w->t.chunk);
    }
    if (cancel) {
        cks_rp_work_end(w, CKS_ERR_CANCELED, "stopping");
        return;
    }
    if (w->dstatus == CKS_ERR_CRC_MISMATCH) {
        cks_rp_fetch_t *f = &w->f[w->bad];
        cks_warn("repair: chunk %u of stripe %llu of '%s' (version %llu of '%s') read from "
                 "server %u fails its CRC: reading another",
                 w->bad, (unsigned long long)w->t.stripe, w->t.key,
                 (unsigned long long)w->t.version, w->t.job,
                 cks_cluster_server(s->map, w->group[w->bad])->id);
        cks_rp_buf_put(s->rp, f->buf, w->t.chunk);
        f->buf    = NULL;
        f->status = CKS_ERR_CRC_MISMATCH;
        w->have--;
        cks_rp_fetch_more(w);
        return;
    }
    j = w->dstatus == CKS_OK
            ? cks_sv_mdq_job(s, CKS_MDQ_CHUNKS, w->t.job, w->t.job_len, w->t.version)
            : NULL;
    if (j == NULL || (j->chunks = calloc(1, sizeof(*j->chunks))) == NULL) {
        free(j);
        if (w->dstatus == CKS_OK) {
            cks_arena_free(s->arena, w->off, w->t.chunk);
        }
        cks_rp_work_end(w, w->dstatus == CKS_OK ? CKS_ERR_NO_MEMORY : w->dstatus, "decode");
        return;
    }
    memcpy(j->key, w->t.key, w->t.key_len);
    j->key_len       = w->t.key_len;
    j->nchunks       = 1;
    j->chunks[0]     = (cks_md_chunk_t){w->t.stripe, w->t.idx, w->t.chunk, w->crc, w->off,
                                        w->t.chunk};
    j->chunk_guard   = 1;
    j->guard_version = w->t.mversion;
    j->done          = cks_rp_recorded;
    j->ctx           = w;
    cks_mdq_push(&s->mdq, j);
}

/* The decodes finished since the last pass, in the order they finished. */
void cks_rp_decoded(cks_server_h s)
{
    cks_workq_job_t *l = s->rp->wq != NULL ? cks_workq_take_done(s->rp->wq) : NULL;
    while (l != NULL) {
        cks_workq_job_t *next = l->next;
        cks_rp_decode_done(CKS_CONTAINER_OF(l, cks_rp_work_t, wq), 0);
        l = next;
    }
}

static void cks_rp_decoders_wake(void *arg)
{
    cks_tp_worker_signal(((cks_server_h)arg)->tp);
}

cks_status_t cks_rp_decoders_start(cks_server_h s, unsigned nthreads)
{
    cks_workq_params_t p = {.nthreads = nthreads ? nthreads : 1,
                            .run      = cks_rp_decode_run,
                            .wake     = cks_rp_decoders_wake,
                            .arg      = s};
    return cks_workq_create(&p, &s->rp->wq);
}

/* The state's end (after the metadata writer's): a running decode
 * finishes; those not begun come back; every one ends canceled, its arena
 * space freed. */
void cks_rp_decoders_stop(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    if (rp->wq == NULL) {
        return;
    }
    cks_workq_job_t *lists[2] = {cks_workq_stop(rp->wq), NULL};
    lists[1] = cks_workq_take_done(rp->wq);
    for (int i = 0; i < 2; i++) {
        while (lists[i] != NULL) {
            cks_workq_job_t *next = lists[i]->next;
            cks_rp_decode_done(CKS_CONTAINER_OF(lists[i], cks_rp_work_t, wq), 1);
            lists[i] = next;
        }
    }
    cks_workq_destroy(rp->wq);
    rp->wq = NULL;
}

static void cks_rp_fetch_end(cks_rp_fetch_t *f)
{
    cks_rp_work_t *w = f->w;
    if (--f->pending > 0) {
        return;
    }
    if (f->status == CKS_OK && cks_fault_fire("repair_fetch_corrupt")) {
        f->buf[w->t.chunk / 2] ^= 0x10; /* a bit flips on the way */
    }
    if (f->status == CKS_OK) {
        w->have++; /* its CRC is checked with the decode */
    } else {
        cks_rp_buf_put(w->s->rp, f->buf, w->t.chunk);
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
        if (conn == NULL || (f->buf = cks_rp_buf_get(s->rp, w->t.chunk)) == NULL) {
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
            cks_rp_buf_put(s->rp, f->buf, w->t.chunk);
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
void cks_rp_work_start(cks_server_h s)
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
    if (s->fg_ns == 0 && now - rp->start_ns < CKS_RP_HOLD_FG_NS &&
        cks_fault_fire("repair_wait_fg")) {
        return; /* test builds: no task before a client's data came through */
    }
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
