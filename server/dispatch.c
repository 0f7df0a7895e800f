/*
 * DESIGN: the dispatcher. Every request passes the same gates, in this
 * order - a reply that answers no call, shutdown, a payload its message may
 * not carry, authentication, server-only messages, the job scope of the
 * connection, the catch-up gate (cks_rp_gate()), the foreground-traffic
 * clock - and then goes to its handler: one entry per message type in
 * s->handlers, all of one signature (cks_sv_handler_t). The standalone mode
 * fills the table at start (here); a cluster server fills its own handlers
 * on top of it (cks_sv_handlers_cluster(), cluster.c). What a message may
 * carry, who may send it and what answers it is the message table's
 * (CKS_MSG_LIST, cks_tp.h). A type with no handler is answered
 * CKS_ERR_UNSUPPORTED ("... is not a request"). The catch-up gate's held
 * questions live here too, and go through the dispatcher again once the
 * first round ends (catchup.c calls cks_rp_release_held()).
 *
 * Progress thread only.
 */
#include "repair_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- MEM_MAP: a client's region, mapped and faulted in ahead of its transfers ---- */

typedef struct {
    cks_tp_conn_h conn; /* one reference */
    uint64_t req_id;
} cks_sv_mem_map_t;

static void cks_sv_mem_map_done(void *arg, cks_status_t status)
{
    cks_sv_mem_map_t *mm = arg;
    if (status == CKS_ERR_UNSUPPORTED) {
        cks_sv_reply_status(mm->conn, mm->req_id, status,
                            "the region cannot be mapped here (another host, or other "
                            "UCX transports)");
    } else {
        cks_sv_reply_status(mm->conn, mm->req_id, status,
                            status == CKS_OK ? NULL : "could not map the region: %s",
                            cks_status_string(status));
    }
    cks_tp_conn_put(mm->conn);
    free(mm);
}

static void cks_sv_h_mem_map(cks_server_h s, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                             const cks_msg_any_t *b, cks_tp_data_t *data)
{
    const cks_msg_mem_map_t *m = &b->m_MEM_MAP;
    uint64_t req_id            = hdr->req_id;
    cks_sv_mem_map_t *mm;
    cks_status_t status;

    if (data == NULL || !data->is_rma || data->length != m->length) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_BAD_MESSAGE,
                            "MEM_MAP names a whole region with an RMA descriptor");
        return;
    }
    mm = malloc(sizeof(*mm));
    if (mm == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, NULL);
        return;
    }
    mm->conn   = conn;
    mm->req_id = req_id;
    cks_tp_conn_get(conn);
    /* the transport's helper thread faults it in; the answer waits for it */
    status = cks_tp_rma_prefault(conn, data, cks_sv_mem_map_done, mm);
    if (status != CKS_INPROGRESS) {
        cks_sv_mem_map_done(mm, status);
    }
}

/* ---- the standalone mode's handlers ------------------------------------------------ */

CKS_SV_HANDLER(cks_sv_h_hello, cks_sv_hello(s, conn, hdr->req_id, &b->m_HELLO))
CKS_SV_HANDLER(cks_sv_h_auth, cks_sv_auth(s, conn, hdr->req_id, &b->m_AUTH))
CKS_SV_HANDLER(cks_sv_h_stats, cks_sv_stats(s, conn, hdr->req_id))
CKS_SV_HANDLER(cks_sv_h_version_begin,
               cks_sv_version_begin(s, conn, hdr->req_id, &b->m_VERSION_BEGIN))
CKS_SV_HANDLER(cks_sv_h_put, cks_sv_put(s, conn, hdr->req_id, hdr->flags, &b->m_PUT, data))
CKS_SV_HANDLER(cks_sv_h_put_part, cks_sv_put_part(s, conn, hdr->req_id, &b->m_PUT_PART, data))
CKS_SV_HANDLER(cks_sv_h_version_seal,
               cks_sv_version_end(s, conn, hdr->req_id, hdr->type,
                                  &(cks_msg_version_ref_t){b->m_VERSION_SEAL.job,
                                                           b->m_VERSION_SEAL.version}))
/* VERSION_ABORT and VERSION_DELETE */
CKS_SV_HANDLER(cks_sv_h_version_end,
               cks_sv_version_end(s, conn, hdr->req_id, hdr->type, &b->m_VERSION_ABORT))
CKS_SV_HANDLER(cks_sv_h_get, cks_sv_get(s, conn, hdr->req_id, &b->m_GET, data,
                                        !!(hdr->flags & CKS_WIRE_F_CHECKED)))
CKS_SV_HANDLER(cks_sv_h_version_stat,
               cks_sv_version_stat(s, conn, hdr->req_id, &b->m_VERSION_STAT))
CKS_SV_HANDLER(cks_sv_h_version_hold,
               cks_sv_version_hold(s, conn, hdr->req_id, &b->m_VERSION_HOLD))
/* FLUSH_CHUNKS, FLUSH_PUBLISH and FLUSH_VERSION */
CKS_SV_HANDLER(cks_sv_h_flush,
               cks_sv_flush_request(s, conn, hdr->req_id, hdr->type, &b->m_FLUSH_CHUNKS))
CKS_SV_HANDLER(cks_sv_h_object_stat,
               cks_sv_object_stat(s, conn, hdr->req_id, &b->m_OBJECT_STAT))
/* VERSION_LIST, OBJECT_LIST and JOB_LIST */
CKS_SV_HANDLER(cks_sv_h_list, cks_sv_list(s, conn, hdr->req_id, hdr->type, b))
/* what only a cluster server serves (cks_sv_handlers_cluster() replaces these) */
CKS_SV_HANDLER(cks_sv_h_no_cluster,
               cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_UNSUPPORTED,
                                   "%s: this server is not in a cluster",
                                   cks_msg_name(hdr->type)))
CKS_SV_HANDLER(cks_sv_h_no_object_delete,
               cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_UNSUPPORTED,
                                   "delete markers need a cluster (partial versions)"))

void cks_sv_handlers_standalone(cks_server_h s)
{
    static const unsigned cluster_only[] = {
        CKS_MSG_CHUNK_PUT,      CKS_MSG_CHUNK_GET,    CKS_MSG_OBJECT_DONE,
        CKS_MSG_VERSION_COMMIT, CKS_MSG_VERSION_DROP, CKS_MSG_VERSION_CLAIM,
        CKS_MSG_SYNC_LIST,      CKS_MSG_REPAIR_CHECK, CKS_MSG_REPAIR_STATUS,
        CKS_MSG_REPAIR_DONE};
    cks_sv_handler_t *h = s->handlers;

    memset(s->handlers, 0, sizeof(s->handlers)); /* replies: not requests */
    h[CKS_MSG_HELLO]          = cks_sv_h_hello;
    h[CKS_MSG_AUTH]           = cks_sv_h_auth;
    h[CKS_MSG_STATS]          = cks_sv_h_stats;
    h[CKS_MSG_VERSION_BEGIN]  = cks_sv_h_version_begin;
    h[CKS_MSG_PUT]            = cks_sv_h_put;
    h[CKS_MSG_PUT_PART]       = cks_sv_h_put_part;
    h[CKS_MSG_VERSION_SEAL]   = cks_sv_h_version_seal;
    h[CKS_MSG_VERSION_ABORT]  = cks_sv_h_version_end;
    h[CKS_MSG_VERSION_DELETE] = cks_sv_h_version_end;
    h[CKS_MSG_GET]            = cks_sv_h_get;
    h[CKS_MSG_OBJECT_DELETE]  = cks_sv_h_no_object_delete;
    h[CKS_MSG_VERSION_STAT]   = cks_sv_h_version_stat;
    h[CKS_MSG_VERSION_HOLD]   = cks_sv_h_version_hold;
    h[CKS_MSG_MEM_MAP]        = cks_sv_h_mem_map;
    h[CKS_MSG_FLUSH_CHUNKS]   = cks_sv_h_flush;
    h[CKS_MSG_FLUSH_PUBLISH]  = cks_sv_h_flush;
    h[CKS_MSG_FLUSH_VERSION]  = cks_sv_h_flush;
    h[CKS_MSG_OBJECT_STAT]    = cks_sv_h_object_stat;
    h[CKS_MSG_VERSION_LIST]   = cks_sv_h_list;
    h[CKS_MSG_OBJECT_LIST]    = cks_sv_h_list;
    h[CKS_MSG_JOB_LIST]       = cks_sv_h_list;
    for (size_t i = 0; i < CKS_ARRAY_SIZE(cluster_only); i++) {
        h[cluster_only[i]] = cks_sv_h_no_cluster;
    }
}

/* ---- the gates, then the handler ------------------------------------------------------ */

void cks_sv_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                   const cks_msg_any_t *b, cks_tp_data_t *data)
{
    cks_server_h s = arg;

    if (CKS_MSG_IS_REPLY(hdr->type)) {
        /* a reply that answered none of this server's calls (the transport
         * matched it to none): never answered, since an answer carries the
         * same request id back to the sender, where it would end a call of
         * its own with this error */
        cks_info("%s from %s (req %llu) answers no call of this server: dropped",
                 cks_msg_name(hdr->type), cks_tp_conn_peer(conn),
                 (unsigned long long)hdr->req_id);
        return;
    }
    if (s->stop) {
        cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_SHUTTING_DOWN, NULL);
        return;
    }
    if (data != NULL && !(cks_msg_flags(hdr->type) & CKS_MSG_F_PAYLOAD) && !data->is_rma) {
        cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_BAD_MESSAGE,
                            "%s carries no payload", cks_msg_name(hdr->type));
        return;
    }
    cks_trace("%s from %s (req %llu)", cks_msg_name(hdr->type), cks_tp_conn_peer(conn),
              (unsigned long long)hdr->req_id);
    if (s->has_secret && !cks_tp_conn_auth(conn)->authed &&
        !(cks_msg_flags(hdr->type) & CKS_MSG_F_PREAUTH)) {
        /* nothing is read or written before authentication (the auth column
         * of the message table: only the handshake's HELLO and AUTH); a
         * payload is dropped */
        cks_sv_auth_refuse(s, conn, hdr->req_id, "authenticate first");
        return;
    }
    if (s->has_peer_secret && cks_msg_server_only(hdr->type) && !cks_tp_conn_auth(conn)->peer) {
        /* only a server that proved the peer secret: a client of the cluster
         * secret could otherwise store chunks, commit or drop versions */
        cks_warn("%s refused %s: only servers of the cluster send it", cks_tp_conn_peer(conn),
                 cks_msg_name(hdr->type));
        cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_AUTH,
                            "%s: only servers of the cluster may send it",
                            cks_msg_name(hdr->type));
        return;
    }
    if (cks_tp_conn_auth(conn)->scoped && (cks_msg_flags(hdr->type) & CKS_MSG_F_SCOPED)) {
        /* a job's secret opens that job and nothing else (the scope column
         * of the message table: HELLO, STATS and MEM_MAP, which names only
         * the client's own memory, are not checked) */
        const cks_tp_auth_t *a   = cks_tp_conn_auth(conn);
        const cks_wire_str_t *job = cks_msg_client_job(hdr->type, b);
        if (job == NULL || job->len != strlen(a->job) ||
            memcmp(job->ptr, a->job, job->len) != 0) {
            cks_warn("%s (job '%s') refused %s for another job or for all jobs",
                     cks_tp_conn_peer(conn), a->job, cks_msg_name(hdr->type));
            cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_AUTH,
                                "this connection's secret is for job '%s' only", a->job);
            return;
        }
    }
    if (cks_rp_gate(s, conn, hdr->req_id, hdr->type, b)) {
        return; /* catching up: another server answers */
    }
    if ((cks_msg_flags(hdr->type) & CKS_MSG_F_DATA) && !(hdr->flags & CKS_WIRE_F_BACKGROUND)) {
        s->fg_ns = cks_time_ns(); /* clients' data: repair slows down (repair.c) */
    }
    cks_sv_handler_t handler = hdr->type < CKS_MSG_LAST ? s->handlers[hdr->type] : NULL;
    if (handler == NULL) {
        cks_sv_reply_status(conn, hdr->req_id, CKS_ERR_UNSUPPORTED, "%s is not a request",
                            cks_msg_name(hdr->type));
        return;
    }
    handler(s, conn, hdr, b, data);
}

/* ---- the catch-up gate ------------------------------------------------------ */

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
         * is handled: copied (without them a version whose seal came while
         * its coordinator caught up waited for the objects of a primary
         * that died until its deadline, instead of failing at once) */
        const cks_wire_str_t *pr = &b->m_VERSION_SEAL.primaries;
        h->b.m_VERSION_SEAL.primaries = cks_wire_cstr(NULL);
        if (pr->len > 0 && pr->len <= CKS_WIRE_MAX_SEAL_PRIMARIES * CKS_WIRE_SEAL_PRIMARY_LEN &&
            (h->primaries = malloc(pr->len)) != NULL) {
            memcpy(h->primaries, pr->ptr, pr->len);
            h->b.m_VERSION_SEAL.primaries = (cks_wire_str_t){(const char *)h->primaries,
                                                             pr->len};
        }
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
void cks_rp_release_held(cks_server_h s, int cancel)
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
        free(h->primaries);
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

void cks_sv_redispatch(cks_server_h s, cks_tp_conn_h conn, unsigned type, uint64_t req_id,
                       const cks_msg_any_t *b)
{
    cks_wire_hdr_t hdr = {0};
    hdr.type           = (uint16_t)type;
    hdr.req_id         = req_id;
    cks_sv_on_msg(s, conn, &hdr, b, NULL);
}

