/*
 * DESIGN: the primary's part of a cluster put: the bytes land in one arena
 * extent, STORED is answered at once, an encoder thread encodes and CRCs
 * every chunk, then each chunk goes to its member (CHUNK_PUT, zero-copy
 * from the arena; a member that does not answer makes the chunk missing,
 * the object DEGRADED), and the object is reported to the coordinator
 * (OBJECT_DONE). See cluster.c for the whole flow.
 *
 * Never: encode or write LMDB here (encoder threads and the metadata
 * writer do), or wait: every step is a callback.
 */
#include "primary_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the primary's puts -------------------------------------------------------------- */

static cks_status_t cks_cput_send_chunk(cks_cput_ack_t *a, cks_tp_conn_h conn);
static void cks_cput_try(cks_cput_ack_t *a, cks_tp_conn_h conn, const char *fault);
static void cks_cput_acked(void *arg, cks_status_t status, const char *msg);
static void cks_cput_settle(cks_cput_t *p);

static void cks_cput_free(cks_cput_t *p)
{
    cks_sv_version_t *v = p->v;
    cks_debug("put of '%s' of version %llu ends: %s (extent %llu+%llu)", p->key,
              (unsigned long long)v->version, cks_status_string(p->status),
              (unsigned long long)p->off, (unsigned long long)p->len);
    cks_cput_unspread(p);
    free(p->enc.crcs);
    free(p->local);
    free(p->missing); /* p->took lies in the same allocation */
    free(p->skipped);
    if (p->status != CKS_OK) {
        cks_hmap_del(v->keys, p->key, p->e.key.len); /* the key may be written again */
    }
    v->pending--;
    cks_sv_version_release(p->s, v);
    free(p);
}

static void cks_cput_report_to(cks_cput_t *p);

static void cks_cput_reported(void *arg, cks_status_t status, const char *msg)
{
    cks_cput_t *p = arg;
    if ((cks_sv_unreachable(status) || status == CKS_ERR_NOT_COORDINATOR) &&
        p->coord_try + 1 < p->ncoords && !p->s->stop) {
        /* that server is gone or does not coordinate the version: the next
         * candidate may (coordinator failover) */
        cks_info("object '%s' of version %llu: server %u %s; reporting it to server %u",
                 p->key, (unsigned long long)p->v->version, p->coords[p->coord_try],
                 cks_status_string(status), p->coords[p->coord_try + 1]);
        p->coord_try++;
        cks_cput_report_to(p);
        return;
    }
    if (status != CKS_OK) {
        cks_warn("coordinator refused object '%s' of version %llu: %s %s", p->key,
                 (unsigned long long)p->v->version, cks_status_string(status), msg);
    }
    cks_cput_free(p);
}

static void cks_sv_backup_sent(void *arg, cks_status_t status, const char *msg)
{
    (void)arg;
    if (status != CKS_OK) {
        cks_debug("a report's copy for a takeover was not taken: %s %s",
                  cks_status_string(status), msg != NULL ? msg : "");
    }
}

/* Tell the coordinator that the object is protected, or why it is not. */
static void cks_cput_report_to(cks_cput_t *p)
{
    cks_server_h s = p->s;
    cks_msg_object_done_t m;
    size_t coord = p->coords[p->coord_try];

    m.job     = (cks_wire_str_t){p->v->job, p->v->job_len};
    m.version = p->v->version;
    m.status  = p->status;
    m.o       = p->e;
    m.k       = p->k;
    m.m       = p->m;
    m.chunk_size = p->chunk;
    m.missing    = p->nmissing;
    m.why        = (cks_wire_str_t){p->why, p->status != CKS_OK ? strlen(p->why) : 0};
    m.primary    = cks_cluster_server(s->map, s->self)->id;
    m.redundancy = p->m;
    for (uint64_t st = 0; p->missing != NULL && st < p->stripes; st++) {
        if (p->m - p->missing[st] < m.redundancy) {
            m.redundancy = p->m - p->missing[st];
        }
    }
    m.backup = 0;
    if (p->coord_try == 0) {
        /* kept until the version ends: a takeover asks for it again */
        cks_sv_kept_add(s, &m);
    }
    if (coord == s->self) {
        cks_status_t st;
        char why[CKS_MSG_MAX_LEN];
        int coordinating = p->coord_try == 0 && p->v->objs != NULL && p->v->claimed;
        cks_sv_object_done_local(s, &m, &st, why, sizeof(why));
        if (coordinating && st == CKS_OK) {
            /* this coordinator is the object's primary: no other server
             * could report the object after its death; its other
             * candidates keep a copy for a takeover */
            uint16_t cand[CKS_COORD_CANDIDATES_MAX];
            size_t n = cks_sv_coord_candidates(s, p->v->job, p->v->job_len, p->v->version,
                                               cand);
            m.backup = 1;
            for (size_t i = 0; i < n; i++) {
                cks_tp_conn_h bc = cand[i] != s->self ? cks_sv_peer(s, cand[i]) : NULL;
                if (bc != NULL) {
                    cks_tp_call(bc, CKS_MSG_OBJECT_DONE, 0, &m, NULL, 0, NULL,
                                CKS_SV_MEMBER_TIMEOUT_MS, cks_sv_backup_sent, NULL);
                }
            }
        }
        cks_cput_reported(p, st, why);
        return;
    }
    if (cks_fault_fire("report_drop")) { /* test builds: lost on its way */
        cks_cput_reported(p, CKS_ERR_CANCELED, "(fault report_drop)");
        return;
    }
    cks_tp_conn_h conn = cks_sv_peer(s, coord);
    if (conn == NULL || cks_tp_call(conn, CKS_MSG_OBJECT_DONE, 0, &m, NULL, 0, NULL,
                                    CKS_SV_CALL_TIMEOUT_MS, cks_cput_reported,
                                    p) != CKS_INPROGRESS) {
        cks_cput_reported(p, CKS_ERR_UNREACHABLE, "coordinator unreachable");
    }
}

static void cks_cput_report(cks_cput_t *p)
{
    cks_server_h s = p->s;
    uint16_t cand[CKS_COORD_CANDIDATES_MAX];
    size_t n = cks_sv_coord_candidates(s, p->v->job, p->v->job_len, p->v->version, cand);
    uint32_t holder;

    p->ncoords = p->coord_try = 0;
    if (cks_sv_claim_holder(s, p->v->job, p->v->job_len, p->v->version, &holder)) {
        p->coords[p->ncoords++] = (uint16_t)holder;
    }
    for (size_t i = 0; i < n; i++) {
        if (p->ncoords == 0 || cand[i] != p->coords[0]) {
            p->coords[p->ncoords++] = cand[i];
        }
    }
    cks_cput_report_to(p);
}

static void cks_cput_fail(cks_cput_t *p, cks_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void cks_cput_fail(cks_cput_t *p, cks_status_t status, const char *fmt, ...)
{
    if (p->status == CKS_OK) {
        va_list ap;
        p->status = status;
        va_start(ap, fmt);
        vsnprintf(p->why, sizeof(p->why), fmt, ap);
        va_end(ap);
    }
}

static void cks_cput_chunks_recorded(cks_server_h s, cks_mdq_job_t *j)
{
    cks_cput_t *p = j->ctx;
    if (j->status != CKS_OK) {
        cks_cput_fail(p, j->status, "chunks of '%s' not recorded", p->key);
        for (size_t i = 0; i < p->nlocal; i++) {
            cks_arena_free(s->arena, p->local[i].arena_offset, p->local[i].arena_len);
        }
    }
    free(j);
    cks_cput_report(p);
}

/* A member did not take a chunk: count it missing, and remember the member. */
static void cks_cput_missing(cks_cput_t *p, uint64_t stripe, uint16_t pos)
{
    unsigned i;
    p->missing[stripe]++;
    p->nmissing++;
    for (i = 0; i < p->ndown && p->down[i] != pos; i++) {
    }
    if (i == p->ndown && p->ndown < CKS_PLACE_WIDTH_MAX) {
        p->down[p->ndown++] = pos;
    }
}

/* A stripe that misses more than m chunks cannot be restored: the object
 * fails, naming the members that did not take their chunks. */
static void cks_cput_check_missing(cks_cput_t *p)
{
    char names[CKS_MSG_MAX_LEN / 2];
    size_t off = 0;

    for (uint64_t st = 0; p->status == CKS_OK && st < p->stripes; st++) {
        if (p->missing[st] <= p->m) {
            continue;
        }
        names[0] = '\0';
        for (unsigned i = 0; i < p->ndown && off < sizeof(names); i++) {
            const cks_cluster_server_t *cs = cks_cluster_server(p->s->map, p->down[i]);
            int n = snprintf(names + off, sizeof(names) - off, "%s%u (%s:%u)", i ? ", " : "",
                             cs->id, cs->addr, cs->port);
            off += n > 0 ? (size_t)n : 0;
        }
        cks_cput_fail(p, CKS_ERR_UNREACHABLE,
                      "servers unreachable: %s; stripe %llu of '%s' would miss %u of its %u "
                      "chunks, more than RS(%u,%u) survives",
                      names, (unsigned long long)st, p->key, p->missing[st], p->k + p->m,
                      p->k, p->m);
    }
}

/* Every member answered: record the chunks kept here, then report. */
/* Chunks skipped because their member failed a moment ago: when a stripe
 * would miss more than m without them, they are sent after all (a member
 * restarted or back from a partition takes them; one still down fails them
 * for real) and 1 is returned: the put settles again when they are
 * answered. Otherwise their space is freed. */
static int cks_cput_second_chance(cks_cput_t *p)
{
    cks_server_h s = p->s;
    int failing    = 0;
    for (uint64_t st = 0; st < p->stripes && p->missing != NULL; st++) {
        failing |= p->missing[st] > p->m;
    }
    if (p->nskipped == 0) {
        return 0;
    }
    if (!failing || p->status != CKS_OK || s->stop) {
        for (size_t i = 0; i < p->nskipped; i++) {
            cks_arena_free(s->arena, p->skipped[i]->off, p->chunk);
            free(p->skipped[i]);
        }
        p->nskipped = 0;
        return 0;
    }
    cks_info("object '%s' of version %llu: sending %zu chunks to members that failed a "
             "moment ago after all (without them it cannot be protected)",
             p->key, (unsigned long long)p->v->version, p->nskipped);
    p->acks = 1;
    for (size_t i = 0; i < p->nskipped; i++) {
        cks_cput_ack_t *a = p->skipped[i];
        p->missing[a->stripe]--;
        p->nmissing--;
        for (unsigned d = 0; d < p->ndown; d++) { /* named again if it fails again */
            if (p->down[d] == a->pos) {
                p->down[d] = p->down[--p->ndown];
                break;
            }
        }
    }
    for (size_t i = 0; i < p->nskipped; i++) {
        cks_cput_ack_t *a = p->skipped[i];
        a->needed_ns      = cks_time_ns(); /* its member timeout runs from here */
        p->acks++;
        cks_cput_try(a, cks_sv_peer(s, a->pos), "chunk_send_timeout");
    }
    p->nskipped = 0;
    if (--p->acks == 0) {
        cks_cput_settle(p);
    }
    return 1;
}

static void cks_cput_settle(cks_cput_t *p)
{
    cks_server_h s = p->s;
    cks_mdq_job_t *j;

    if (cks_cput_second_chance(p)) {
        return;
    }
    if (p->missing != NULL) {
        cks_cput_check_missing(p);
    }
    cks_debug("put of '%s' of version %llu settled: %s, %zu chunks kept here, %u missing",
              p->key, (unsigned long long)p->v->version, cks_status_string(p->status),
              p->nlocal, p->nmissing);

    if (p->status != CKS_OK || p->nlocal == 0) {
        for (size_t i = 0; p->status != CKS_OK && i < p->nlocal; i++) {
            cks_arena_free(s->arena, p->local[i].arena_offset, p->local[i].arena_len);
        }
        if (p->status != CKS_OK) {
            cks_warn("object '%s' of version %llu not protected: %s", p->key,
                     (unsigned long long)p->v->version, p->why);
        }
        cks_cput_report(p);
        return;
    }
    j = cks_sv_mdq_job(s, CKS_MDQ_CHUNKS, p->v->job, p->v->job_len, p->v->version);
    if (j == NULL) {
        cks_cput_fail(p, CKS_ERR_NO_MEMORY, "server out of memory");
        p->nlocal = 0; /* nothing recorded: they are freed below */
        cks_cput_settle(p);
        return;
    }
    memcpy(j->key, p->key, p->e.key.len);
    j->key_len = p->e.key.len;
    j->chunks  = p->local;
    j->nchunks = p->nlocal;
    j->done    = cks_cput_chunks_recorded;
    j->ctx     = p;
    cks_mdq_push(&s->mdq, j);
}

/* CHUNK_PUT of the chunk `a` names, from the put's extent, on conn. */
static cks_status_t cks_cput_send_chunk(cks_cput_ack_t *a, cks_tp_conn_h conn)
{
    cks_cput_t *p  = a->p;
    cks_server_h s = p->s;
    cks_msg_chunk_put_t m = {
        .job     = {p->v->job, p->v->job_len},
        .version = p->v->version,
        .key     = p->e.key,
        .stripe  = a->stripe,
        .idx     = a->idx,
        .crc64   = p->enc.crcs[a->stripe * (p->k + p->m) + a->idx],
    };
    a->sent_ns = cks_time_ns();
    return cks_tp_call(conn, CKS_MSG_CHUNK_PUT, 0, &m, cks_arena_base(s->arena) + a->off,
                       p->chunk, s->arena_mem, p->member_ms, cks_cput_acked, a);
}

/* Send `a` on conn (NULL: none could be made) - or, in test builds, fail it
 * at once with a timeout as a connection that failed does (fault `fault`). */
static void cks_cput_try(cks_cput_ack_t *a, cks_tp_conn_h conn, const char *fault)
{
    if (conn != NULL && cks_fault_fire(fault)) {
        a->sent_ns = cks_time_ns();
        cks_warn("fault %s: chunk %u of stripe %llu of '%s' failed at once", fault, a->idx,
                 (unsigned long long)a->stripe, a->p->key);
        cks_cput_acked(a, CKS_ERR_TIMEOUT, "send failed (fault)");
    } else if (conn == NULL || cks_cput_send_chunk(a, conn) != CKS_INPROGRESS) {
        cks_cput_acked(a, CKS_ERR_UNREACHABLE, "send failed");
    }
}

/* Send `a` again in CKS_SV_CHUNK_AGAIN_NS (cks_sv_chunks_again()). */
static void cks_cput_again(cks_cput_ack_t *a)
{
    cks_server_h s  = a->p->s;
    a->again_ns     = cks_time_ns() + CKS_SV_CHUNK_AGAIN_NS;
    a->again_next   = s->chunks_again;
    s->chunks_again = a;
}

void cks_sv_chunks_again(cks_server_h s, int all)
{
    cks_cput_ack_t *due = NULL, **pp = &s->chunks_again;
    uint64_t now        = cks_time_ns();
    while (*pp != NULL) { /* those due leave first: a send that fails queues again */
        cks_cput_ack_t *a = *pp;
        if (!all && a->again_ns > now) {
            pp = &a->again_next;
            continue;
        }
        *pp           = a->again_next;
        a->again_next = due;
        due           = a;
    }
    while (due != NULL) {
        cks_cput_ack_t *a = due;
        due               = a->again_next;
        a->again_next     = NULL;
        if (all) {
            cks_cput_acked(a, CKS_ERR_SHUTTING_DOWN, "the server stops");
        } else if (a->p->took[a->stripe] >= a->p->k || a->p->status != CKS_OK) {
            cks_cput_acked(a, CKS_ERR_UNREACHABLE, "(its object needs it no more)");
        } else {
            cks_cput_try(a, cks_sv_peer(s, a->pos), "chunk_again_timeout");
        }
    }
}

static void cks_cput_acked(void *arg, cks_status_t status, const char *msg)
{
    cks_cput_ack_t *a = arg;
    cks_cput_t *p     = a->p;
    uint64_t now      = cks_time_ns();
    /* a timeout long before the member's is the transport's: a connection
     * made while the member was cut off fails as it comes back */
    int early   = status == CKS_ERR_TIMEOUT &&
                  now - a->sent_ns < (uint64_t)p->member_ms * 500000ull;
    int at_once = (status == CKS_ERR_CONN_LOST || status == CKS_ERR_UNREACHABLE || early) &&
                  !p->s->stop;
    if (at_once && !a->resent) {
        /* the connection broke at once: it may have led to a process that
         * is gone while the member runs again (restarted), or been made
         * while it was cut off; one more try, on a new connection, before
         * the chunk counts as missing */
        a->resent = 1;
        cks_debug("chunk %u of stripe %llu of '%s' to server %u: %s (%s); sent again on a "
                  "new connection", a->idx, (unsigned long long)a->stripe, p->key,
                  cks_cluster_server(p->s->map, a->pos)->id, cks_status_string(status), msg);
        cks_cput_try(a, cks_sv_peer(p->s, a->pos), "chunk_resend_timeout");
        return;
    }
    /* A chunk the object needs (its second chance, and its stripe has
     * fewer than k chunks stored) whose member fails at once: the member
     * gets the member timeout to take it, tried every
     * CKS_SV_CHUNK_AGAIN_NS, as a silent one gets to answer. A server just
     * plugged back in: its peers' connections made while it was cut off
     * fail as it returns, and a new one may too for a moment (seen:
     * "destination unreachable" on the first try and the resend, 1 s after
     * the heal, and a version failed with two other servers killed -
     * heal_partition/random_...) */
    if (at_once && a->needed_ns != 0 && p->took[a->stripe] < p->k && p->status == CKS_OK &&
        now - a->needed_ns < (uint64_t)p->member_ms * 1000000ull) {
        cks_cput_again(a);
        return;
    }
    int keep = at_once && a->needed_ns == 0 && p->skipped != NULL &&
               p->nskipped < p->stripes * (p->k + p->m);
    if (!keep) {
        cks_arena_free(p->s->arena, a->off, p->chunk); /* UCX is done with it */
    }
    if (status == CKS_ERR_UNREACHABLE || status == CKS_ERR_TIMEOUT ||
        status == CKS_ERR_CONN_LOST || status == CKS_ERR_SHUTTING_DOWN ||
        status == CKS_ERR_CANCELED) {
        /* the member is gone or does not answer: the chunk is missing, and
         * the object is stored DEGRADED if its stripes survive that */
        if (now - p->s->peers[a->pos].warned_ns > 1000000000ull) { /* once a second */
            p->s->peers[a->pos].warned_ns = now;
            const cks_cluster_server_t *cs = cks_cluster_server(p->s->map, a->pos);
            cks_warn("server %u (%s:%u) did not take chunk %u of stripe %llu of '%s': %s %s; "
                     "writing without it", cs->id, cs->addr, cs->port, a->idx,
                     (unsigned long long)a->stripe, p->key, cks_status_string(status), msg);
        }
        if (status == CKS_ERR_TIMEOUT) {
            /* waiting on it is what costs: later chunks skip it for a while
             * (a refused or lost connection fails at once, and a restarted
             * server is used again at once) */
            p->s->peers[a->pos].down_ns = cks_time_ns();
        }
        cks_cput_missing(p, a->stripe, a->pos);
    } else if (status != CKS_OK) {
        cks_cput_fail(p, status, "chunk %u of stripe %llu: %s %s", a->idx,
                      (unsigned long long)a->stripe, cks_status_string(status), msg);
    } else {
        p->s->peers[a->pos].down_ns = 0;
        p->took[a->stripe]++;
    }
    if (keep) {
        /* missing, its slice kept: sent after all should the object fail
         * without it (cks_cput_second_chance()) */
        a->resent                 = 0;
        p->skipped[p->nskipped++] = a;
    } else {
        free(a);
    }
    if (--p->acks == 0) {
        cks_cput_settle(p);
    }
}

/* Encoded: send every chunk to its member; keep those placed here. */
/* A chunk that stays on the primary moves out of the put's extent into one
 * of its own (the lowest free space that fits a chunk), so that the extent
 * is freed whole: left in place, the chunks kept at every (k+m)-th place
 * would cut the space the others leave into holes too small for the next
 * object, and an arena would be "full" at half its use. Where no space is
 * free, the chunk stays where it is. Returns the chunk's offset. */
static uint64_t cks_cput_keep_local(cks_cput_t *p, uint64_t at)
{
    cks_server_h s = p->s;
    uint64_t off;
    if (cks_arena_alloc(s->arena, p->chunk, &off) != CKS_OK) {
        return at;
    }
    if (off > at) { /* no better place than where it is */
        cks_arena_free(s->arena, off, p->chunk);
        return at;
    }
    memcpy(cks_arena_base(s->arena) + off, cks_arena_base(s->arena) + at, p->chunk);
    cks_arena_free(s->arena, at, p->chunk);
    return off;
}

void cks_cput_spread(cks_cput_t *p)
{
    cks_server_h s        = p->s;
    const unsigned width  = p->k + p->m;
    const uint64_t data_b = p->stripes * p->k * p->chunk;

    if (p->stalled) {
        return; /* fault put_stall: held until the test kills this server */
    }
    cks_debug("put of '%s' of version %llu encoded: %s; spreading", p->key,
              (unsigned long long)p->v->version, cks_status_string(p->enc.status));
    p->e.crc64 = p->enc.obj_crc;
    if (p->enc.status != CKS_OK) {
        cks_cput_fail(p, p->enc.status, "encoding failed");
        cks_arena_free(s->arena, p->off, p->len);
        cks_cput_settle(p);
        return;
    }
    p->local   = calloc(p->stripes * width, sizeof(*p->local));
    p->missing = calloc(2 * (p->stripes ? p->stripes : 1), 1); /* and took, after it */
    p->took    = p->missing != NULL ? p->missing + (p->stripes ? p->stripes : 1) : NULL;
    p->skipped = calloc(p->stripes * width + 1, sizeof(*p->skipped));
    if (p->local == NULL || p->missing == NULL || p->skipped == NULL) {
        cks_cput_fail(p, CKS_ERR_NO_MEMORY, "server out of memory");
        cks_arena_free(s->arena, p->off, p->len);
        cks_cput_settle(p);
        return;
    }
    p->acks = 1; /* held until every chunk is on its way */
    for (uint64_t st = 0; st < p->stripes; st++) {
        uint16_t group[CKS_PLACE_WIDTH_MAX];
        cks_status_t status = cks_place(s->map, p->v->job, p->v->job_len, p->key,
                                        p->e.key.len, st, p->k, p->m, NULL, group);
        for (unsigned i = 0; i < width; i++) {
            uint64_t rel = i < p->k ? (st * p->k + i) * p->chunk
                                    : data_b + (st * p->m + (i - p->k)) * p->chunk;
            uint64_t crc = p->enc.crcs[st * width + i];
            if (status == CKS_OK && group[i] == s->self) {
                cks_md_chunk_t *c = &p->local[p->nlocal++];
                c->stripe         = st;
                c->idx            = i;
                c->len            = p->chunk;
                c->crc64          = crc;
                c->arena_offset   = cks_cput_keep_local(p, p->off + rel);
                c->arena_len      = p->chunk;
                p->took[st]++;
                continue;
            }
            if (status != CKS_OK) {
                cks_cput_fail(p, status, "no placement for stripe %llu",
                              (unsigned long long)st);
                cks_arena_free(s->arena, p->off + rel, p->chunk);
                continue;
            }
            if (cks_sv_peer_down(s, group[i])) {
                /* failed a moment ago: do not wait on it again - unless
                 * the object would fail without it (cks_cput_settle()) */
                cks_cput_ack_t *a = malloc(sizeof(*a));
                cks_cput_missing(p, st, group[i]);
                if (a == NULL || p->nskipped == p->stripes * width) {
                    free(a);
                    cks_arena_free(s->arena, p->off + rel, p->chunk);
                } else {
                    *a = (cks_cput_ack_t){
                        .p = p, .off = p->off + rel, .stripe = st, .idx = i, .pos = group[i]};
                    p->skipped[p->nskipped++] = a;
                }
                continue;
            }
            cks_tp_conn_h conn = cks_sv_peer(s, group[i]);
            cks_cput_ack_t *a  = malloc(sizeof(*a));
            if (conn == NULL || a == NULL) {
                free(a);
                if (conn == NULL) {
                    cks_cput_missing(p, st, group[i]);
                } else {
                    cks_cput_fail(p, CKS_ERR_NO_MEMORY, "server out of memory");
                }
                cks_arena_free(s->arena, p->off + rel, p->chunk);
                continue;
            }
            *a = (cks_cput_ack_t){
                .p = p, .off = p->off + rel, .stripe = st, .idx = i, .pos = group[i]};
            p->acks++;
            if (cks_fault_fire("chunk_send")) {
                /* the send is lost: the chunk is missing, the member is not down */
                free(a);
                p->acks--;
                cks_cput_missing(p, st, group[i]);
                cks_arena_free(s->arena, p->off + rel, p->chunk);
                continue;
            }
            cks_cput_try(a, conn, "chunk_send_timeout"); /* fails as a failed connection's */
        }
    }
    if (--p->acks == 0) {
        cks_cput_settle(p);
    }
}

static void cks_cput_received(void *arg, cks_status_t status)
{
    cks_cput_t *p  = arg;
    cks_server_h s = p->s;

    cks_debug("put of '%s' of version %llu: payload %s", p->key,
              (unsigned long long)p->v->version, cks_status_string(status));
    if (status != CKS_OK) {
        cks_sv_reply_status(p->conn, p->req_id, status, "payload not received");
        cks_tp_conn_put(p->conn);
        p->conn   = NULL;
        p->status = status;
        cks_arena_free(s->arena, p->off, p->len);
        cks_cput_free(p);
        return;
    }
    p->counted = 1;
    s->unspread += p->len;
    if (cks_fault_fire("put_stall")) {
        /* test builds: a primary that answers STORED and dies before it
         * spreads the object (the test kills it); logged before the answer */
        cks_warn("fault put_stall: object '%s' of version %llu answered STORED and not "
                 "spread", p->key, (unsigned long long)p->v->version);
        p->stalled = 1;
    }
    if (s->unspread > cks_sv_unspread_max(s) && s->unspread > p->len) {
        /* STORED, but answered as the backlog drains (see above) */
        p->owed = 1;
        if (s->owed_tail != NULL) {
            s->owed_tail->owed_next = p;
        } else {
            s->owed_head = p;
        }
        s->owed_tail = p;
    } else {
        cks_cput_answer(p, CKS_OK);
    }
    if (cks_enc_push(&s->enc, &p->enc) != CKS_OK) { /* STORED: now protect it */
        p->enc.status = CKS_ERR_CANCELED; /* the encoders stopped: it fails */
        cks_cput_spread(p);
    }
}

void cks_sv_cluster_put(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, int parts,
                        const cks_msg_put_t *m, cks_tp_data_t *data)
{
    cks_md_version_t rec;
    cks_sv_version_t *v;
    cks_cput_t *p;
    cks_status_t status;
    char err[128];

    status = cks_sv_check_names(&m->job, &m->key);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "bad job name or key");
        return;
    }
    if ((parts ? data != NULL : (data == NULL ? 0 : data->length) != m->size) ||
        m->kind > CKS_KIND_OTHER) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_BAD_MESSAGE,
                            "put announces %llu bytes of kind %u", (unsigned long long)m->size,
                            m->kind);
        return;
    }
    if (m->k < 1 || m->k > CKS_EC_MAX_K || m->m < 1 || m->m > CKS_EC_MAX_M ||
        m->chunk_size == 0 || m->chunk_size % 4096 != 0 || m->chunk_size > CKS_SV_CHUNK_MAX ||
        cks_cluster_check(s->map, m->k, m->m, err, sizeof(err)) != CKS_OK) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                            "bad geometry RS(%u,%u), chunk %llu", m->k, m->m,
                            (unsigned long long)m->chunk_size);
        return;
    }
    if (cks_sv_member_ms_refused(conn, req_id, m->member_ms)) {
        return;
    }
    v = cks_sv_version_find(s, &m->job, m->version);
    if (v == NULL) {
        /* the coordinator decides whether the version is open; here, only a
         * version this server already holds a manifest of is refused */
        if (cks_sv_version_lookup(s, &m->job, m->version, &rec) == CKS_OK) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_VERSION_NOT_OPEN,
                                "version %llu is %s", (unsigned long long)m->version,
                                cks_vstate_string(rec.state));
            return;
        }
        /* open until the coordinator commits or drops it */
        v = cks_sv_version_new_open(s, &m->job, m->version);
        if (v == NULL) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
            return;
        }
        v->cluster = 1;
    }
    if (v->objs != NULL && cks_sv_geometry_differs(v, m->k, m->m, m->chunk_size)) {
        /* this server coordinates the version: refuse the put at once */
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                            "'%.*s': geometry RS(%u,%u) with %llu-byte chunks differs from "
                            "version %llu's RS(%u,%u) with %llu-byte chunks",
                            (int)m->key.len, m->key.ptr, m->k, m->m,
                            (unsigned long long)m->chunk_size, (unsigned long long)m->version,
                            v->rec.ec_k, v->rec.ec_m, (unsigned long long)v->rec.chunk_size);
        return;
    }
    if (v->objs != NULL && cks_sv_rank_foreign(v, m->rank)) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                            "'%.*s' is tagged rank %d; version %llu has ranks 0..%u",
                            (int)m->key.len, m->key.ptr, m->rank,
                            (unsigned long long)m->version, v->rec.nranks - 1);
        return;
    }
    if (v->keys == NULL || cks_hmap_get(v->keys, m->key.ptr, m->key.len) != NULL) {
        cks_sv_reply_status(conn, req_id, v->keys ? CKS_ERR_DUPLICATE_KEY
                                                  : CKS_ERR_VERSION_NOT_OPEN,
                            "key '%.*s' already written in version %llu", (int)m->key.len,
                            m->key.ptr, (unsigned long long)m->version);
        return;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    p->s       = s;
    p->v       = v;
    p->k       = m->k;
    p->m       = m->m;
    p->chunk   = m->chunk_size;
    p->member_ms = cks_sv_member_ms(m->member_ms);
    p->stripes = cks_ec_stripe_count(m->size, m->k, m->chunk_size);
    p->len     = p->stripes * (m->k + m->m) * m->chunk_size;
    memcpy(p->key, m->key.ptr, m->key.len);
    p->e = (cks_msg_object_entry_t){{p->key, m->key.len}, m->kind, m->layer, m->expert,
                                    m->rank, m->size, 0, m->version};
    status = cks_arena_alloc(s->arena, p->len, &p->off);
    if (status != CKS_OK) {
        /* the version cannot be completed: its coordinator learns why (an
         * abort for lack of space makes room for the next version), before
         * the client does, so that a client's abort comes after it */
        uint64_t used = cks_arena_used(s->arena), size = cks_arena_size(s->arena);
        cks_cput_fail(p, status, "arena full on server %u: %llu bytes wanted, %llu of %llu used",
                      cks_cluster_server(s->map, s->self)->id, (unsigned long long)p->len,
                      (unsigned long long)used, (unsigned long long)size);
        v->pending++;
        cks_cput_report(p); /* p may be gone */
        cks_sv_reply_status(conn, req_id, status,
                            "arena full: %llu bytes wanted for RS(%u,%u), %llu of %llu used",
                            (unsigned long long)(m->size), m->k, m->m,
                            (unsigned long long)used, (unsigned long long)size);
        return;
    }
    p->enc.crcs = calloc(p->stripes ? p->stripes * (m->k + m->m) : 1, sizeof(uint64_t));
    if (p->enc.crcs == NULL || cks_sv_ec(s, m->k, m->m) == NULL ||
        cks_hmap_put(v->keys, m->key.ptr, m->key.len, v) != CKS_OK) {
        free(p->enc.crcs);
        cks_arena_free(s->arena, p->off, p->len);
        free(p);
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    p->enc.ec      = s->ec[m->k][m->m];
    p->enc.base    = cks_arena_base(s->arena) + p->off;
    p->enc.size    = m->size;
    p->enc.chunk   = m->chunk_size;
    p->enc.stripes = p->stripes;
    p->enc.k       = m->k;
    p->enc.m       = m->m;
    p->enc.arg     = p;
    p->conn        = conn;
    p->req_id      = req_id;
    cks_tp_conn_get(conn);
    v->pending++;
    cks_debug("put of '%s' of version %llu (%llu bytes) from %s: extent %llu+%llu", p->key,
              (unsigned long long)v->version, (unsigned long long)m->size,
              cks_tp_conn_peer(conn), (unsigned long long)p->off, (unsigned long long)p->len);
    if (data == NULL && !parts) {
        cks_cput_received(p, CKS_OK);
    } else if (!parts && !data->is_rndv && !data->is_rma) {
        memcpy(p->enc.base, data->ptr, data->length);
        cks_cput_received(p, CKS_OK);
    } else {
        status = parts ? cks_sv_parts_open(s, conn, &m->job, m->version, &m->key, p->enc.base,
                                           m->size, cks_cput_received, p)
                       : cks_tp_data_recv(s->tp, data, p->enc.base, CKS_MEM_HOST,
                                          s->arena_mem, cks_cput_received, p);
        if (status != CKS_INPROGRESS && status != CKS_OK) {
            cks_cput_received(p, status);
        }
    }
}
