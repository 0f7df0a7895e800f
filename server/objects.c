/*
 * DESIGN: the coordinator's view of a version's objects: each primary's
 * report (OBJECT_DONE) checked and counted, the objects a primary stored
 * and has not reported yet (owed, probed when that primary goes quiet),
 * object deletes. See cluster.c for the whole flow.
 *
 * Never: count an object twice, or one no rank of the version put.
 */
#include "cluster_int.h"
#include "coord_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * for the server that sends it, once per object (a put retried on another
 * member may be reported by both: counted for both, which can only delay a
 * failure; a kept report sent again counts once). A
 * primary killed and started again before it is asked answers: its objects
 * are then waited for until the version's deadline, as before. */

static uint64_t *cks_sv_owed_row(cks_server_h s, uint64_t **row)
{
    if (*row == NULL) {
        *row = calloc(cks_cluster_nservers(s->map), sizeof(**row));
    }
    return *row;
}

/* A report of object `key` of v, from the primary with id `primary`:
 * counted once per primary and object (a kept report sent again when the
 * coordinator asks for it is not a second object). */
static void cks_sv_owed_reported(cks_server_h s, cks_sv_version_t *v, uint32_t primary,
                                 const cks_wire_str_t *key)
{
    uint8_t rk[8 + CKS_KEY_MAX_LEN];
    size_t pos;
    if (key->len > CKS_KEY_MAX_LEN || primary > UINT16_MAX ||
        cks_cluster_find(s->map, (uint16_t)primary, &pos) != CKS_OK) {
        return;
    }
    cks_put_be64(rk, primary);
    memcpy(rk + 8, key->ptr, key->len);
    if (v->reporters == NULL && cks_hmap_create(&v->reporters) != CKS_OK) {
        return;
    }
    if (cks_hmap_get(v->reporters, rk, 8 + key->len) != NULL) {
        return; /* counted already */
    }
    if (cks_hmap_put(v->reporters, rk, 8 + key->len, (void *)1) == CKS_OK &&
        cks_sv_owed_row(s, &v->reported_by) != NULL) {
        v->reported_by[pos]++;
    }
    /* out of memory: not counted, as if the seal had not named it (the
     * version then waits for it until its deadline, as before) */
}

/* A rank's seal: add what it stored on each primary. CKS_ERR_BAD_MESSAGE
 * when the entries are not whole; ids not in the map are ignored. */
cks_status_t cks_sv_owed_sealed(cks_server_h s, cks_sv_version_t *v,
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
/* A primary that still owes objects a second after the seals named them
 * (its report was lost: its connection broke; or a takeover's question, or
 * the reports it sent after it, went to a server that no longer
 * coordinates) is asked to send its kept reports again. */
static void cks_sv_cv_report_ask(cks_server_h s, cks_sv_version_t *v, size_t pos,
                                 uint64_t now)
{
    uint64_t left_s = v->open_deadline_ns > now ? (v->open_deadline_ns - now) / 1000000000ull
                                                : 0;
    cks_msg_version_claim_t cm = {{v->job, v->job_len}, v->version, (uint32_t)s->self,
                                  CKS_CLAIM_OP_REPORT, (uint32_t)left_s + CKS_SV_CLAIM_MARGIN_S,
                                  v->round, 0, 0, 0, 0, 0, 0, 0};
    cks_tp_conn_h pc = cks_sv_peer(s, pos);
    if (pc != NULL) {
        cks_debug("version %llu of '%s': server %zu still owes objects; asking it to report "
                  "them again", (unsigned long long)v->version, v->job, pos);
        cks_tp_call(pc, CKS_MSG_VERSION_CLAIM, 0, &cm, NULL, 0, NULL, CKS_SV_CLAIM_TIMEOUT_MS,
                    cks_sv_claim_noop, NULL);
    }
}

/* At log level debug: what an open version this server coordinates
 * still waits for, every CKS_SV_WAITLOG_NS (a version that stalls says why). */
static void cks_sv_cv_waitlog(cks_server_h s, cks_sv_version_t *v, uint64_t now)
{
    char owed[256];
    size_t off = 0;
    if (CKS_LOG_DEBUG > cks_log_threshold || !v->cluster || !v->open || v->objs == NULL ||
        now - v->waitlog_ns < CKS_SV_WAITLOG_NS) {
        return;
    }
    v->waitlog_ns = now;
    owed[0]       = '\0';
    for (size_t pos = 0; v->stored_on != NULL && pos < cks_cluster_nservers(s->map); pos++) {
        uint64_t rep = v->reported_by != NULL ? v->reported_by[pos] : 0;
        if (v->stored_on[pos] > rep && off < sizeof(owed) - 32) {
            off += (size_t)snprintf(owed + off, sizeof(owed) - off, " %zu:%llu/%llu", pos,
                                    (unsigned long long)rep,
                                    (unsigned long long)v->stored_on[pos]);
        }
    }
    cks_debug("version %llu of '%s' (ballot %u, claimed %d, fence %d): %u of %u ranks "
              "sealed, %zu objects reported, broadcast %u, failed %s; primaries owing "
              "(reported/stored):%s",
              (unsigned long long)v->version, v->job, v->round, v->claimed, v->fence_ok,
              v->nranks_done, v->rec.nranks, v->nobjs, v->bcast, cks_status_name(v->failed),
              off > 0 ? owed : (v->stored_on != NULL ? " none" : " no seal yet"));
}

static int cks_sv_cv_owed(cks_server_h s, cks_sv_version_t *v, uint64_t now)
{
    int owing = 0, ask = 0;
    cks_sv_cv_waitlog(s, v, now);
    if (!cks_sv_cv_open(v) || v->failed != CKS_OK || v->stored_on == NULL ||
        now < v->owed_after_ns) {
        return 0;
    }
    if (v->claimed) {
        /* a report lost on the way (a connection that broke, a takeover's
         * question that did not arrive): the primary keeps its reports
         * until the version ends and sends them again */
        if (v->report_again_ns == 0) {
            v->report_again_ns = now + CKS_SV_REPORT_AGAIN_NS;
        } else if (now >= v->report_again_ns) {
            v->report_again_ns = now + CKS_SV_REPORT_AGAIN_NS;
            ask                = 1;
        }
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
        if (ask) {
            cks_sv_cv_report_ask(s, v, pos, now);
        }
        owing = 1;
    }
    return owing;
}

void cks_sv_cv_owed_each(const void *key, size_t len, void *value, void *arg)
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
        cks_sv_owed_reported(s, v, m->primary, &m->o.key);
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
    cks_sv_owed_reported(s, v, m->primary, &m->o.key);
    *status_p = CKS_OK;
    cks_sv_cv_check(s, v);
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


