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
 *     a record is a task (repair_scan.c). A task probes the other members
 *     (CHUNK_GET of no bytes: do they hold their chunks?). Where another
 *     lacks its chunk too, one of the members lacking theirs (drawn from
 *     the key and stripe) rebuilds them all with one decode and sends each
 *     to its member (CHUNK_PUT with a guard); the others' tasks are parked
 *     until their chunk comes (or 3 s, then they probe again). A task that rebuilds reads k
 *     chunks of its stripe from the members holding theirs (CHUNK_GET,
 *     into fetch buffers kept while repair runs); a decoder thread (one of
 *     --encoders, a background-work queue of its own) checks each against
 *     its CRC (one that fails is read from another member instead),
 *     decodes the missing ones with ISA-L (the one placed here straight
 *     into arena space allocated for it), and computes their CRCs; the
 *     progress thread, which only receives meanwhile, sends those of other
 *     members, then records its own. Reads are paced by a
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

/* ---- repair: one task ------------------------------------------------------------- */

/* The connection to the member of chunk i of the task's stripe; NULL while
 * it is skipped (a chunk put to it timed out a moment ago). */
static cks_tp_conn_h cks_rp_member(cks_rp_work_t *w, unsigned i)
{
    return cks_sv_peer_down(w->s, w->group[i]) ? NULL : cks_sv_peer_conn(w->s, w->group[i]);
}

/* The task's buffers in `which` (bits) go back to the pool. */
static void cks_rp_bufs_put(cks_rp_work_t *w, uint32_t which)
{
    for (unsigned i = 0; i < CKS_PLACE_WIDTH_MAX; i++) {
        if (which & (1u << i)) {
            cks_rp_buf_put(w->s->rp, w->f[i].buf, w->t.chunk);
            w->f[i].buf = NULL;
        }
    }
}

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
    cks_rp_bufs_put(w, UINT32_MAX);
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
 * one into arena space (cks_rp_decode_run), and with it the chunks of the
 * members that answered that they lack theirs, into fetch buffers; the
 * progress thread goes on receiving meanwhile. */
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
    w->outs             = 0;
    for (unsigned j = 0; j < w->t.k + w->t.m; j++) {
        /* none read from it; without a buffer it is left to its member */
        if ((w->lost & (1u << j)) && j != w->t.idx && w->f[j].buf == NULL &&
            (w->f[j].buf = cks_rp_buf_get(s->rp, w->t.chunk, (uint32_t)s->self)) != NULL) {
            w->chunks[j] = w->f[j].buf;
            w->outs |= 1u << j;
        }
    }
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
        /* a chunk its member wrote here was checked as it was written */
        if (w->present[i] && !w->f[i].checked &&
            cks_crc64(0, w->chunks[i], w->t.chunk) != w->f[i].crc) {
            w->dstatus = CKS_ERR_CRC_MISMATCH;
            w->bad     = i;
            return;
        }
    }
    w->dstatus = cks_ec_decode(w->ec, w->t.chunk, w->chunks, w->present);
    for (unsigned i = 0; w->dstatus == CKS_OK && i < w->t.k + w->t.m; i++) {
        if (w->chunks[i] != NULL && !w->present[i]) {
            w->ocrc[i] = cks_crc64(0, w->chunks[i], w->t.chunk);
        }
    }
}

/* The rebuilt chunk placed here goes to the metadata writer with the CRC
 * the decoder computed from its bytes (no `data`: the writer's one thread
 * does not CRC them a second time, as it does a chunk that came over the
 * wire). */
static void cks_rp_record(cks_rp_work_t *w)
{
    cks_server_h s = w->s;
    cks_mdq_job_t *j = cks_sv_mdq_job(s, CKS_MDQ_CHUNKS, w->t.job, w->t.job_len, w->t.version);

    if (j == NULL || (j->chunks = calloc(1, sizeof(*j->chunks))) == NULL) {
        free(j);
        cks_arena_free(s->arena, w->off, w->t.chunk);
        cks_rp_work_end(w, CKS_ERR_NO_MEMORY, "decode");
        return;
    }
    memcpy(j->key, w->t.key, w->t.key_len);
    j->key_len       = w->t.key_len;
    j->nchunks       = 1;
    j->chunks[0]     = (cks_md_chunk_t){w->t.stripe, w->t.idx, w->t.chunk,
                                        w->ocrc[w->t.idx], w->off, w->t.chunk};
    j->chunk_guard   = 1;
    j->guard_version = w->t.mversion;
    j->done          = cks_rp_recorded;
    j->ctx           = w;
    cks_mdq_push(&s->mdq, j);
}

/* A member took the chunk rebuilt for it (or not: its own task rebuilds it
 * later). Once every one is answered, the chunk placed here is recorded:
 * after them, so that a member that asks whether this one holds its chunk
 * meanwhile learns that it does not, and waits for the chunk sent to it. */
static void cks_rp_sent(void *arg, cks_status_t status, const char *msg)
{
    cks_rp_fetch_t *f = arg;
    cks_rp_work_t *w  = f->w;
    cks_rp_t *rp      = w->s->rp;

    if (status == CKS_OK) {
        rp->chunks_done++;
        rp->chunks_sent++;
        rp->bytes_done += w->t.chunk;
        rp->win_bytes += w->t.chunk;
    } else {
        cks_debug("repair: chunk %u of stripe %llu of '%s' rebuilt for server %u not taken: "
                  "%s (%s)", f->idx, (unsigned long long)w->t.stripe, w->t.key,
                  cks_cluster_server(w->s->map, w->group[f->idx])->id,
                  cks_status_string(status), msg);
    }
    if (--w->pushing == 0) {
        cks_rp_record(w);
    }
}

/* Send each chunk rebuilt for another member to it (CHUNK_PUT, guarded by
 * the manifest that needs it, as a record of our own is). */
static void cks_rp_send(cks_rp_work_t *w)
{
    w->pushing = 1; /* until every send is made */
    for (unsigned j = 0; j < w->t.k + w->t.m; j++) {
        cks_rp_fetch_t *f = &w->f[j];
        if (!(w->outs & (1u << j))) {
            continue;
        }
        cks_tp_conn_h conn    = cks_rp_member(w, j);
        cks_msg_chunk_put_t m = {.job     = {w->t.job, w->t.job_len},
                                 .version = w->t.version,
                                 .key     = {w->t.key, w->t.key_len},
                                 .stripe  = w->t.stripe,
                                 .idx     = j,
                                 .crc64   = w->ocrc[j],
                                 .guard   = w->t.mversion};
        f->w   = w;
        f->idx = j;
        w->pushing++;
        if (conn == NULL ||
            cks_tp_call(conn, CKS_MSG_CHUNK_PUT, CKS_WIRE_F_BACKGROUND, &m, f->buf, w->t.chunk,
                        NULL, CKS_RP_FETCH_MS, cks_rp_sent, f) != CKS_INPROGRESS) {
            w->pushing--;
        }
    }
    if (--w->pushing == 0) {
        cks_rp_record(w);
    }
}

/* A decode is back: a chunk that failed its CRC is read from another
 * member instead; the chunks rebuilt for other members are sent to them,
 * then the one placed here is recorded. */
static void cks_rp_decode_done(cks_rp_work_t *w, int cancel)
{
    cks_server_h s = w->s;

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
        cks_rp_bufs_put(w, w->outs | (1u << w->bad)); /* outputs: taken again */
        w->outs   = 0;
        f->status = CKS_ERR_CRC_MISMATCH;
        w->have--;
        cks_rp_fetch_more(w);
        return;
    }
    if (w->dstatus == CKS_OK) {
        s->rp->decodes++;
        s->rp->decoded += 1 + (unsigned)__builtin_popcount(w->outs);
    }
    if (w->dstatus != CKS_OK) {
        cks_rp_work_end(w, w->dstatus, "decode");
    } else if (w->outs != 0) {
        cks_rp_send(w);
    } else {
        cks_rp_record(w);
    }
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
                            .arg      = s,
                            .nice     = cks_sv_coding_nice(s),
                            .name     = "cks-repair"};
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

/* A read that ended with no answer from its member (it may still act on it). */
static int cks_rp_unanswered(cks_status_t st)
{
    return st == CKS_ERR_TIMEOUT || st == CKS_ERR_CONN_LOST || st == CKS_ERR_UNREACHABLE ||
           st == CKS_ERR_TRANSPORT || st == CKS_ERR_CANCELED || st == CKS_ERR_SHUTTING_DOWN;
}

static void cks_rp_fetch_end(cks_rp_fetch_t *f)
{
    cks_rp_work_t *w = f->w;
    if (--f->pending > 0) {
        return;
    }
    if (f->status == CKS_OK && cks_fault_fire("repair_fetch_corrupt")) {
        f->buf[w->t.chunk / 2] ^= 0x10; /* a bit flips after its member's check: */
        f->checked = 0;                  /* the decoders' check must find it */
    }
    if (f->status == CKS_OK) {
        w->have++; /* its CRC is checked with the decode, unless its member did */
        w->s->rp->reads_into += f->into ? 1 : 0;
        w->s->rp->reads_payload += f->into ? 0 : 1;
    } else {
        if (f->status == CKS_ERR_CRC_MISMATCH) { /* its member's check, as it wrote */
            cks_warn("repair: chunk %u of stripe %llu of '%s' (version %llu of '%s') read "
                     "from server %u fails its CRC: reading another",
                     f->idx, (unsigned long long)w->t.stripe, w->t.key,
                     (unsigned long long)w->t.version, w->t.job,
                     cks_cluster_server(w->s->map, w->group[f->idx])->id);
        }
        if (f->into && cks_rp_unanswered(f->status)) {
            cks_rp_buf_retire(w->s->rp, f->buf, w->t.chunk);
        } else {
            cks_rp_buf_put(w->s->rp, f->buf, w->t.chunk);
        }
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

    if (hdr->type != CKS_MSG_CHUNK_GET_REPLY || r->chunk_len != len || r->offset != 0 ||
        r->length != len) {
        f->status = CKS_ERR_BAD_MESSAGE;
        return;
    }
    f->crc = r->crc64;
    if (hdr->flags & CKS_WIRE_F_RMA) {
        /* its member wrote it into buf, checking it as it wrote */
        f->checked = f->into && data == NULL;
        f->status  = f->checked ? CKS_OK : CKS_ERR_BAD_MESSAGE;
        return;
    }
    if (data == NULL || data->length != len) {
        f->status = CKS_ERR_BAD_MESSAGE;
        return;
    }
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

/* Ask the members that hold their chunks of the stripe for them until k
 * are here. */
static void cks_rp_fetch_more(cks_rp_work_t *w)
{
    cks_server_h s = w->s;
    unsigned width = w->t.k + w->t.m;

    while (!s->stop && w->have + w->reading < w->t.k && w->ask < width) {
        unsigned i = w->ask++;
        cks_rp_fetch_t *f = &w->f[i];
        if (!(w->holds & (1u << i))) {
            continue; /* lacks it, or did not answer its probe in time */
        }
        cks_tp_conn_h conn = cks_rp_member(w, i);
        if (conn == NULL ||
            (f->buf = cks_rp_buf_get(s->rp, w->t.chunk, (uint32_t)w->group[i])) == NULL) {
            continue;
        }
        f->w       = w;
        f->idx     = i;
        f->status  = CKS_OK;
        f->pending = 1;
        f->checked = 0;
        f->into    = cks_rp_fetch_into(s, conn, f);
        cks_msg_chunk_get_t m = {{w->t.job, w->t.job_len}, w->t.version,
                                 {w->t.key, w->t.key_len}, w->t.stripe, i, 0, w->t.chunk};
        w->reading++;
        if (cks_tp_call_data_into(conn, CKS_MSG_CHUNK_GET, CKS_WIRE_F_BACKGROUND, &m,
                                  f->desc, f->into ? f->desc_len : 0, CKS_RP_FETCH_MS,
                                  cks_rp_fetch_reply, cks_rp_fetch_done, f) != CKS_INPROGRESS) {
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

/* ---- repair: a stripe that lacks chunks on several members -------------------------- */

/* The task's entry in rp->queued: the task itself while it is parked, else
 * the state (queued or in flight). */
static void cks_rp_queued_set(cks_rp_t *rp, const cks_rp_task_t *t, void *value)
{
    uint8_t key[CKS_JOB_MAX_LEN + CKS_KEY_MAX_LEN + 32];
    size_t klen = cks_rp_ckey(key, t);
    cks_hmap_del(rp->queued, key, klen);
    (void)cks_hmap_put(rp->queued, key, klen, value); /* lost: a scan queues it again */
}

/* Another member rebuilds the stripe: the task waits (holding no buffer, no
 * slot and no tokens) until that member sends the chunk (cks_rp_taken())
 * or CKS_RP_PARK_NS passed (cks_rp_parked_wake()). */
static void cks_rp_park(cks_rp_work_t *w)
{
    cks_server_h s = w->s;
    cks_rp_t *rp   = s->rp;

    rp->tokens += w->cost;
    rp->inflight--;
    w->t.parks++;
    w->park_ns = cks_time_ns() + CKS_RP_PARK_NS;
    cks_rp_queued_set(rp, &w->t, w);
    CKS_LIST_PUSH(rp->parked, rp->parked_tail, w);
    cks_rp_work_start(s);
}

void cks_rp_taken(cks_server_h s, const char *job, size_t job_len, uint64_t version,
                  const char *key, size_t key_len, const cks_md_chunk_t *ch)
{
    cks_rp_t *rp = s->rp;
    uint8_t k[CKS_JOB_MAX_LEN + CKS_KEY_MAX_LEN + 32];
    cks_rp_task_t t = {0};

    if (rp == NULL || job_len > CKS_JOB_MAX_LEN || key_len > CKS_KEY_MAX_LEN) {
        return;
    }
    memcpy(t.job, job, job_len);
    t.job_len = (uint32_t)job_len;
    memcpy(t.key, key, key_len);
    t.key_len = (uint32_t)key_len;
    t.version = version;
    t.stripe  = ch->stripe;
    t.idx     = ch->idx;
    size_t klen       = cks_rp_ckey(k, &t);
    cks_rp_work_t *w  = cks_hmap_get(rp->queued, k, klen);
    if (w == NULL || (void *)w == (void *)rp) {
        return; /* not parked: a task queued or in flight finds it recorded */
    }
    cks_hmap_del(rp->queued, k, klen);
    CKS_LIST_DEL(rp->parked, rp->parked_tail, w);
    free(w);
}

int cks_rp_parked_wake(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    uint64_t now = cks_time_ns();

    /* parked in the order of their deadlines: the first not due ends it */
    while (rp->parked != NULL && rp->parked->park_ns <= now && !s->stop) {
        cks_rp_work_t *w = rp->parked;
        CKS_LIST_DEL(rp->parked, rp->parked_tail, w);
        if (rp->ntasks < CKS_RP_TASKS_MAX) {
            cks_rp_queued_set(rp, &w->t, rp);
            rp->tasks[rp->ntasks++] = w->t; /* queued again, as paced as any */
        } else {
            uint8_t key[CKS_JOB_MAX_LEN + CKS_KEY_MAX_LEN + 32];
            cks_hmap_del(rp->queued, key, cks_rp_ckey(key, &w->t)); /* the next scan */
        }
        free(w);
    }
    return rp->parked == NULL ? -1 : (int)((rp->parked->park_ns - now) / 1000000 + 1);
}

void cks_rp_parked_drop(cks_rp_t *rp)
{
    while (rp->parked != NULL) {
        cks_rp_work_t *w = rp->parked;
        CKS_LIST_DEL(rp->parked, rp->parked_tail, w);
        free(w);
    }
}

/* Which of the chunks in `lacking` (bits: this task's and those of the
 * members that lack theirs) is rebuilt by the member that decodes them all:
 * drawn from the object's key and the stripe, so that every member that
 * learned the same set draws the same one, and two servers back share the
 * work evenly (the lowest index would give one of them most stripes: with
 * servers placed in turn, all those where it comes first). */
static unsigned cks_rp_decoder(const cks_rp_task_t *t, uint32_t lacking)
{
    uint64_t h = cks_crc64(t->stripe, t->key, t->key_len);
    unsigned n = (unsigned)__builtin_popcount(lacking), pick = (unsigned)(h % n);
    for (unsigned i = 0;; i++) {
        if ((lacking & (1u << i)) && pick-- == 0) {
            return i;
        }
    }
}

/* The probes are back. Where other members lack their chunks too, one of
 * them all decodes every one (each learns the same set from its probes):
 * when it is another, the task waits for it, at most CKS_RP_PARKS_MAX
 * times. Otherwise it reads k chunks and rebuilds its own and those of the
 * members that lack theirs. */
static void cks_rp_probed_all(cks_rp_work_t *w)
{
    uint32_t lacking = w->lost | (1u << w->t.idx);

    if (w->s->stop) {
        cks_rp_work_end(w, CKS_ERR_CANCELED, "stopping");
    } else if (cks_rp_chunk_held(w->s, &w->t)) {
        /* taken while the probes ran: a member that rebuilt it answers
         * that it holds its own chunk only once this one took it */
        w->s->rp->tokens += w->cost;
        cks_rp_work_end(w, CKS_OK, "sent meanwhile");
    } else if (w->lost != 0 && w->t.parks < CKS_RP_PARKS_MAX &&
               cks_rp_decoder(&w->t, lacking) != w->t.idx) {
        cks_rp_park(w);
    } else {
        cks_rp_fetch_more(w);
    }
}

static void cks_rp_probed(void *arg, cks_status_t status, const char *msg)
{
    cks_rp_fetch_t *f = arg;
    cks_rp_work_t *w  = f->w;

    (void)msg;
    if (status == CKS_ERR_NO_SUCH_KEY) {
        w->lost |= 1u << f->idx;
    } else if (status == CKS_OK) {
        w->holds |= 1u << f->idx;
    }
    if (--w->probing == 0) {
        cks_rp_probed_all(w);
    }
}

/* Ask every other member of the stripe's group whether it holds its chunk
 * (a CHUNK_GET of no bytes): one that answers that it does not lacks it
 * too, and the stripe is rebuilt by one decode, not one per member. */
static void cks_rp_probe(cks_rp_work_t *w)
{
    cks_server_h s = w->s;

    w->lost    = 0;
    w->holds   = 0;
    w->probing = 1; /* until every probe is sent */
    for (unsigned i = 0; i < w->t.k + w->t.m; i++) {
        cks_rp_fetch_t *f = &w->f[i];
        cks_tp_conn_h conn;
        if (i == w->t.idx || w->group[i] == s->self || (conn = cks_rp_member(w, i)) == NULL) {
            continue;
        }
        cks_msg_chunk_get_t m = {{w->t.job, w->t.job_len}, w->t.version,
                                 {w->t.key, w->t.key_len}, w->t.stripe, i, 0, 0};
        f->w   = w;
        f->idx = i;
        w->probing++;
        if (cks_tp_call(conn, CKS_MSG_CHUNK_GET, CKS_WIRE_F_BACKGROUND, &m, NULL, 0, NULL,
                        CKS_RP_CALL_MS, cks_rp_probed, f) != CKS_INPROGRESS) {
            w->probing--;
        }
    }
    if (--w->probing == 0) {
        cks_rp_probed_all(w);
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
        if (cks_rp_chunk_held(s, t)) {
            uint8_t key[CKS_JOB_MAX_LEN + CKS_KEY_MAX_LEN + 32];
            cks_hmap_del(rp->queued, key, cks_rp_ckey(key, t));
            rp->taski++;
            rp->taken++;
            continue; /* another member rebuilt it and sent it */
        }
        if (cap != UINT64_MAX && rp->tokens < cost && rp->inflight > 0) {
            return; /* cks_rp_progress() starts it when the bucket allows */
        }
        if (cap != UINT64_MAX && rp->tokens < 0) {
            return;
        }
        rp->tokens -= cap != UINT64_MAX ? cost : 0;
        rp->taski++;
        rp->taken++;
        cks_rp_work_t *w = calloc(1, sizeof(*w));
        if (w == NULL) {
            return;
        }
        w->s    = s;
        w->t    = *t;
        w->cost = cap != UINT64_MAX ? cost : 0;
        rp->inflight++;
        if (cks_place(s->map, t->job, t->job_len, t->key, t->key_len, t->stripe, t->k, t->m,
                      NULL, w->group) != CKS_OK) {
            cks_rp_work_end(w, CKS_ERR_INTERNAL, "no placement");
            continue;
        }
        cks_rp_probe(w);
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
        for (const cks_rp_work_t *w = rp->parked; w != NULL; w = w->next) {
            left++;
            bytes += w->t.chunk;
        }
        r.synced      = (uint32_t)rp->synced;
        r.id          = cks_cluster_server(s->map, s->self)->id;
        r.chunks_left = left;
        r.bytes_left  = bytes;
        r.chunks_done = rp->chunks_done;
        r.bytes_done  = rp->bytes_done;
        r.chunks_sent = rp->chunks_sent;
        r.decodes     = rp->decodes;
        r.decoded     = rp->decoded;
        r.rate        = rp->rate;
        r.rate_cap    = rp->rate_cap == UINT64_MAX ? 0 : rp->rate_cap;
    }
    cks_sv_reply(conn, CKS_MSG_REPAIR_STATUS_REPLY, req_id, &r);
}
