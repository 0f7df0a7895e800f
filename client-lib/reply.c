/*
 * DESIGN: the client's side of every reply: the op it answers (on the
 * connection it was sent on, authenticated), its status or error text, the
 * payload received zero-copy into the caller's buffer, decoded pages of
 * entries. See client.c for the whole design.
 *
 * Never: complete an op with a reply from another server or connection.
 */
#include "client_int.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void cks_cl_reply_error(cks_client_h c, cks_op_t *op, int32_t st,
                               const cks_wire_str_t *msg)
{
    cks_status_t status = (cks_status_t)st;
    if (status >= CKS_OK) {
        status = CKS_ERR_BAD_MESSAGE; /* a failed reply must carry an error */
    }
    if (!op->background) {
        cks_cl_set_error(c, status, msg->ptr, msg->len);
    }
    if (status == CKS_ERR_NO_QUORUM && op->unfenced_why != NULL) {
        /* a coordinator that could not fence: kept for the final error (op.c) */
        snprintf(op->unfenced_why, CKS_MSG_MAX_LEN + 1, "%.*s",
                 (int)CKS_MIN(msg->len, (size_t)CKS_MSG_MAX_LEN), msg->ptr);
    }
    op->answered = op->status == CKS_OK;
    cks_cl_op_fail(c, op, status);
}

void cks_cl_version_info(cks_version_info_t *info, const cks_msg_version_entry_t *e)
{
    info->version    = e->version;
    info->parent     = e->parent;
    info->state      = (cks_vstate_t)e->state;
    info->nranks     = e->nranks;
    info->created_ns = e->created_ns;
    info->sealed_ns  = e->sealed_ns;
    info->nobjects   = e->nobjects;
    info->bytes      = e->bytes;
    info->ec_k       = e->k;
    info->ec_m       = e->m;
    info->chunk_size = e->chunk_size;
    info->redundancy = e->redundancy;
    info->missing    = e->missing;
}

static void cks_cl_object_info(cks_object_info_t *info, const cks_msg_object_entry_t *e)
{
    memcpy(info->key, e->key.ptr, e->key.len);
    info->key[e->key.len] = '\0';
    info->tags.kind       = (cks_kind_t)e->kind;
    info->tags.layer      = e->layer;
    info->tags.expert     = e->expert;
    info->tags.rank       = e->rank;
    info->size            = e->size;
    info->crc64           = e->crc64;
    info->source_version  = e->source;
}

/* Decode a received list page into the caller's array. */
static cks_status_t cks_cl_page_decode(cks_op_t *op, uint32_t count)
{
    size_t off = 0;
    if (count > op->out_max) {
        return CKS_ERR_BAD_MESSAGE;
    }
    for (uint32_t i = 0; i < count; i++) {
        union {
            cks_msg_version_entry_t v;
            cks_msg_object_entry_t o;
            cks_msg_job_entry_t j;
        } e;
        cks_status_t status = cks_wire_entry_unpack(op->entry, op->page, op->page_len,
                                                    &off, &e);
        if (status != CKS_OK) {
            return status;
        }
        if (op->entry == CKS_WIRE_ENTRY_VERSION) {
            cks_cl_version_info((cks_version_info_t *)op->out + i, &e.v);
        } else if (op->entry == CKS_WIRE_ENTRY_OBJECT) {
            if (cks_name_check(e.o.key.ptr, e.o.key.len, CKS_KEY_MAX_LEN) != CKS_OK) {
                return CKS_ERR_BAD_MESSAGE;
            }
            cks_cl_object_info((cks_object_info_t *)op->out + i, &e.o);
        } else {
            char(*names)[CKS_JOB_NAME_MAX + 1] = op->out;
            if (cks_name_check(e.j.name.ptr, e.j.name.len, CKS_JOB_MAX_LEN) != CKS_OK) {
                return CKS_ERR_BAD_MESSAGE;
            }
            memcpy(names[i], e.j.name.ptr, e.j.name.len);
            names[i][e.j.name.len] = '\0';
        }
    }
    return off == op->page_len ? CKS_OK : CKS_ERR_BAD_MESSAGE;
}

static void cks_cl_recv_done(void *arg, cks_status_t status)
{
    cks_op_t *op   = arg;
    cks_client_h c = op->client;
    op->receiving  = 0;
    if (status != CKS_OK && op->status == CKS_OK) {
        op->status = status;
    }
    if (op->status == CKS_OK && op->kind == CKS_OP_LIST) {
        op->status = cks_cl_page_decode(op, (uint32_t)*op->count_p);
    }
    if (op->status == CKS_OK && (op->kind == CKS_OP_GET || op->kind == CKS_OP_CHUNK_GET) &&
        (op->flags & CKS_GET_VERIFY) && cks_crc64(0, op->buf, op->obj_size) != op->crc64) {
        cks_cl_set_errorf(c, CKS_ERR_CRC_MISMATCH, "bytes fail their CRC");
        op->status = CKS_ERR_CRC_MISMATCH;
    }
    cks_cl_op_try_complete(c, op);
}

/* Take a payload into dst: copy an eager one, receive a rendezvous one. */
static void cks_cl_take_payload(cks_client_h c, cks_op_t *op, cks_tp_data_t *data,
                                void *dst, cks_mem_type_t mem_type)
{
    cks_status_t status;

    op->receiving = 1;
    if (!data->is_rndv) {
        memcpy(dst, data->ptr, data->length); /* eager: small, already here */
        cks_cl_recv_done(op, CKS_OK);
        return;
    }
    status = cks_tp_data_recv(c->tp, data, dst, mem_type, NULL, cks_cl_recv_done, op);
    if (status != CKS_INPROGRESS) {
        op->receiving = 0;
        cks_cl_op_fail(c, op, status);
    }
}

/* The payload bytes a reply brings: those it carries, or - with
 * CKS_WIRE_F_RMA, which only a request that described our memory may get -
 * those the server wrote there (UINT64_MAX: a reply that cannot be right). */
static uint64_t cks_cl_reply_bytes(const cks_op_t *op, const cks_wire_hdr_t *hdr,
                                   const cks_tp_data_t *data, uint64_t claimed)
{
    if (hdr->flags & CKS_WIRE_F_RMA) {
        return op->rma && claimed <= op->buf_size ? claimed : UINT64_MAX;
    }
    return data == NULL ? 0 : data->length;
}

/* The op a reply answers: the one in flight with its id, sent on this very
 * connection, whose handshake is over (the transport's calls took its
 * replies). NULL for anything else: a reply on another server's connection,
 * on an endpoint UCX made by itself, or from a server that has not proved
 * the secret yet must not complete an op (#15 item 8). */
cks_op_t *cks_cl_reply_op(cks_client_h c, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr)
{
    cks_op_t *op     = cks_hmap_get(c->inflight, &hdr->req_id, sizeof(hdr->req_id));
    cks_cl_srv_t *sv = cks_tp_conn_user(conn);
    if (op != NULL && !c->has_secret && sv == NULL && cks_tp_conn_implicit(conn)) {
        /* without a secret, a server may answer on a data endpoint UCX could
         * not pair with ours yet; nothing proves who anyone is there anyway */
        sv = &c->srv[op->srv];
        conn = sv->conn;
    }
    if (op == NULL || sv != &c->srv[op->srv] || sv->conn != conn || sv->state != CKS_SRV_UP) {
        return NULL;
    }
    sv->silent_ns = 0; /* it answers */
    sv->heard_ns  = cks_time_ns();
    return op;
}

/* ---- one function per reply type ------------------------------------------
 * Each takes a reply of its type, whose status is CKS_OK, for the op it
 * answers (the message table names that type as the reply of op->type):
 * it completes the op, fails it, or starts receiving its payload, and
 * returns 1; 0 when the reply makes no sense for the op (it is then failed
 * as unexpected). */
typedef int (*cks_cl_reply_fn)(cks_client_h c, cks_op_t *op, const cks_wire_hdr_t *hdr,
                               const cks_msg_any_t *b, cks_tp_data_t *data);

/* A reply that carries nothing more than its status (STATUS_REPLY of a
 * request that expects one, SEAL_REPLY). */
static int cks_cl_reply_done(cks_client_h c, cks_op_t *op, const cks_wire_hdr_t *hdr,
                             const cks_msg_any_t *b, cks_tp_data_t *data)
{
    (void)hdr, (void)b, (void)data;
    cks_cl_op_try_complete(c, op);
    return 1;
}

static int cks_cl_reply_repair(cks_client_h c, cks_op_t *op, const cks_wire_hdr_t *hdr,
                               const cks_msg_any_t *b, cks_tp_data_t *data)
{
    const cks_msg_repair_status_reply_t *r = &b->m_REPAIR_STATUS_REPLY;
    cks_repair_info_t *info                = op->out;
    (void)hdr, (void)data;
    info->server_id       = r->id;
    info->caught_up       = r->synced != 0;
    info->chunks_left     = r->chunks_left;
    info->bytes_left      = r->bytes_left;
    info->chunks_done     = r->chunks_done;
    info->chunks_sent     = r->chunks_sent;
    info->bytes_done      = r->bytes_done;
    info->rate            = r->rate;
    info->rate_cap        = r->rate_cap;
    info->stripes_decoded = r->decodes;
    info->chunks_decoded  = r->decoded;
    cks_cl_op_try_complete(c, op);
    return 1;
}

static int cks_cl_reply_stats(cks_client_h c, cks_op_t *op, const cks_wire_hdr_t *hdr,
                              const cks_msg_any_t *b, cks_tp_data_t *data)
{
    const cks_msg_stats_reply_t *r = &b->m_STATS_REPLY;
    cks_cl_stats_t *st             = op->out;
    (void)hdr, (void)data;
    st->arena_used = r->arena_used;
    st->arena_size = r->arena_size;
    st->enc_bytes  = r->enc_bytes;
    st->enc_ns     = r->enc_ns;
    st->enc_job_ns = r->enc_job_ns;
    cks_cl_op_try_complete(c, op);
    return 1;
}

static int cks_cl_reply_version_stat(cks_client_h c, cks_op_t *op, const cks_wire_hdr_t *hdr,
                                     const cks_msg_any_t *b, cks_tp_data_t *data)
{
    (void)hdr, (void)data;
    cks_cl_version_info(op->out, &b->m_VERSION_STAT_REPLY.v);
    cks_cl_op_try_complete(c, op);
    return 1;
}

static int cks_cl_reply_object_stat(cks_client_h c, cks_op_t *op, const cks_wire_hdr_t *hdr,
                                    const cks_msg_any_t *b, cks_tp_data_t *data)
{
    const cks_msg_object_entry_t *o = &b->m_OBJECT_STAT_REPLY.o;
    (void)hdr, (void)data;
    if (cks_name_check(o->key.ptr, o->key.len, CKS_KEY_MAX_LEN) != CKS_OK) {
        return 0;
    }
    cks_cl_object_info(op->out, o);
    cks_cl_op_try_complete(c, op);
    return 1;
}

static int cks_cl_reply_list(cks_client_h c, cks_op_t *op, const cks_wire_hdr_t *hdr,
                             const cks_msg_any_t *b, cks_tp_data_t *data)
{
    const cks_msg_list_reply_t *m = &b->m_LIST_REPLY;
    (void)hdr;
    if (m->count > op->out_max || (m->count > 0) != (data != NULL) ||
        (data != NULL && data->length > CKS_WIRE_MAX_PAGE)) {
        return 0;
    }
    *op->count_p = m->count;
    *op->more_p  = m->more != 0;
    if (data == NULL) {
        cks_cl_op_try_complete(c, op);
        return 1;
    }
    op->page     = malloc(data->length);
    op->page_len = data->length;
    if (op->page == NULL) {
        cks_cl_op_fail(c, op, CKS_ERR_NO_MEMORY);
        return 1;
    }
    cks_cl_take_payload(c, op, data, op->page, CKS_MEM_HOST);
    return 1;
}

/* The bytes of a get or a chunk get: written into the caller's memory by
 * the server (RMA), or a payload to receive, or none. */
static void cks_cl_reply_bytes_in(cks_client_h c, cks_op_t *op, const cks_wire_hdr_t *hdr,
                                  cks_tp_data_t *data)
{
    if (hdr->flags & CKS_WIRE_F_RMA) {
        cks_cl_recv_done(op, CKS_OK); /* the server wrote the bytes into buf */
    } else if (data == NULL) {
        cks_cl_op_try_complete(c, op);
    } else {
        cks_cl_take_payload(c, op, data, op->buf, op->mem_type);
    }
}

static int cks_cl_reply_get(cks_client_h c, cks_op_t *op, const cks_wire_hdr_t *hdr,
                            const cks_msg_any_t *b, cks_tp_data_t *data)
{
    const cks_msg_get_reply_t *m = &b->m_GET_REPLY;
    if (cks_cl_reply_bytes(op, hdr, data, m->length) != m->length ||
        m->offset != op->body.m_GET.offset ||
        (op->body.m_GET.length != UINT64_MAX && m->length != op->body.m_GET.length)) {
        return 0;
    }
    if (m->length > op->buf_size) {
        cks_cl_set_errorf(c, CKS_ERR_INVALID_PARAM, "buffer of %llu bytes too small for %llu bytes",
                          (unsigned long long)op->buf_size, (unsigned long long)m->length);
        cks_cl_op_fail(c, op, CKS_ERR_INVALID_PARAM);
        return 1;
    }
    if (op->length_p != NULL) {
        *op->length_p = m->length;
    }
    op->crc64    = m->crc64;
    op->obj_size = m->size;
    if (m->length != m->size) {
        op->flags &= ~CKS_GET_VERIFY; /* a range: the server checked the object */
    } else if (!(hdr->flags & CKS_WIRE_F_RMA)) {
        op->flags |= CKS_GET_VERIFY; /* a whole payload: always checked here */
    }
    cks_cl_reply_bytes_in(c, op, hdr, data);
    return 1;
}

static int cks_cl_reply_chunk_get(cks_client_h c, cks_op_t *op, const cks_wire_hdr_t *hdr,
                                  const cks_msg_any_t *b, cks_tp_data_t *data)
{
    const cks_msg_chunk_get_reply_t *m = &b->m_CHUNK_GET_REPLY;
    const cks_msg_chunk_get_t *q       = &op->body.m_CHUNK_GET;
    if (cks_cl_reply_bytes(op, hdr, data, m->length) != m->length || m->offset != q->offset ||
        m->length != q->length || m->length > op->buf_size) {
        return 0;
    }
    /* a whole chunk is checked here; a part of one, or one the server
     * wrote into our memory, by the server */
    if (m->offset == 0 && m->length == m->chunk_len && !(hdr->flags & CKS_WIRE_F_RMA)) {
        op->flags |= CKS_GET_VERIFY;
    }
    op->crc64    = m->crc64;
    op->obj_size = m->length;
    cks_cl_reply_bytes_in(c, op, hdr, data);
    return 1;
}

/* The client's column of the message table: what each reply type does. */
static const cks_cl_reply_fn cks_cl_replies[CKS_MSG_LAST] = {
    [CKS_MSG_STATUS_REPLY]        = cks_cl_reply_done,
    [CKS_MSG_SEAL_REPLY]          = cks_cl_reply_done,
    [CKS_MSG_REPAIR_STATUS_REPLY] = cks_cl_reply_repair,
    [CKS_MSG_STATS_REPLY]         = cks_cl_reply_stats,
    [CKS_MSG_VERSION_STAT_REPLY]  = cks_cl_reply_version_stat,
    [CKS_MSG_OBJECT_STAT_REPLY]   = cks_cl_reply_object_stat,
    [CKS_MSG_LIST_REPLY]          = cks_cl_reply_list,
    [CKS_MSG_GET_REPLY]           = cks_cl_reply_get,
    [CKS_MSG_CHUNK_GET_REPLY]     = cks_cl_reply_chunk_get,
};

void cks_cl_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                   const cks_msg_any_t *b, cks_tp_data_t *data)
{
    cks_client_h c = arg;
    cks_op_t *op   = cks_cl_reply_op(c, conn, hdr);

    if (op == NULL || op->replied) {
        cks_debug("reply %s for unknown request %llu dropped", cks_msg_name(hdr->type),
                  (unsigned long long)hdr->req_id);
        return;
    }
    /* every reply body starts with status and msg: any request may be
     * answered by a failed STATUS_REPLY (and a failed reply of its own type) */
    const cks_msg_status_t *rs = &b->m_STATUS_REPLY;
    if (CKS_MSG_IS_REPLY(hdr->type) && rs->status != CKS_OK &&
        (hdr->type == CKS_MSG_STATUS_REPLY || hdr->type == cks_msg_reply(op->type))) {
        cks_cl_reply_error(c, op, rs->status, &rs->msg);
        return;
    }
    op->replied = 1;
    /* else the reply the message table names for the request, with a
     * payload only where its row allows one */
    cks_cl_reply_fn fn = hdr->type < CKS_MSG_LAST ? cks_cl_replies[hdr->type] : NULL;
    if (hdr->type != cks_msg_reply(op->type) || fn == NULL ||
        (data != NULL && !(cks_msg_flags(hdr->type) & CKS_MSG_F_PAYLOAD)) ||
        !fn(c, op, hdr, b, data)) {
        cks_warn("unexpected %s for request %llu", cks_msg_name(hdr->type),
                 (unsigned long long)hdr->req_id);
        cks_cl_set_errorf(c, CKS_ERR_BAD_MESSAGE, "unexpected reply");
        cks_cl_op_fail(c, op, CKS_ERR_BAD_MESSAGE);
    }
}

void cks_cl_on_bad_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                              cks_status_t status, const char *reason)
{
    cks_client_h c = arg;
    cks_op_t *op   = hdr ? cks_cl_reply_op(c, conn, hdr) : NULL;
    if (op != NULL && !op->replied) {
        cks_cl_set_errorf(c, status, "%s", reason);
        cks_cl_op_fail(c, op, status);
    }
}

void cks_cl_on_conn_err(void *arg, cks_tp_conn_h conn, cks_status_t status)
{
    cks_client_h c   = arg;
    cks_cl_srv_t *sv = cks_tp_conn_user(conn);
    if (sv == NULL || sv->conn != conn) {
        return; /* a connection we already dropped */
    }
    cks_cl_srv_down(c, (size_t)(sv - c->srv),
                    status == CKS_ERR_TIMEOUT ? CKS_ERR_TIMEOUT : CKS_ERR_CONN_LOST);
}
