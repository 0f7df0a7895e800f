/*
 * query.c - a server's answers about what it holds: VERSION_STAT (a version,
 * or the newest restorable one), OBJECT_STAT, and the paged lists
 * (VERSION_LIST, OBJECT_LIST, JOB_LIST), read from LMDB in one read
 * transaction per request on the progress thread (small, bounded reads:
 * one page at most).
 *
 * Never: a write transaction; a page larger than CKS_WIRE_MAX_PAGE.
 */
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cks_sv_entry_from_rec(cks_msg_version_entry_t *e, const cks_md_version_t *rec)
{
    e->version    = rec->version;
    e->parent     = rec->parent;
    e->state      = rec->state;
    e->nranks     = rec->nranks;
    e->created_ns = rec->created_ns;
    e->sealed_ns  = rec->sealed_ns;
    e->nobjects   = rec->nobjects;
    e->bytes      = rec->bytes;
    e->k          = rec->ec_k;
    e->m          = rec->ec_m;
    e->chunk_size = rec->chunk_size;
    e->redundancy = rec->redundancy;
    e->missing    = rec->missing;
}

void cks_sv_entry_from_obj(cks_msg_object_entry_t *e, const cks_md_object_t *o)
{
    e->key    = (cks_wire_str_t){o->key, o->key_len};
    e->kind   = o->kind;
    e->layer  = o->layer;
    e->expert = o->expert;
    e->rank   = o->rank;
    e->size   = o->size;
    e->crc64  = o->crc64;
    e->source = o->source_version;
}

/* A version OPEN in this server's record that it does not coordinate open:
 * it coordinated it until a takeover or a cut, or until it restarted
 * (coord.c); the version's outcome is elsewhere, so this server's answer
 * about it is not the truth: BUSY (another server answers). */
static int cks_sv_open_elsewhere(cks_server_h s, const cks_wire_str_t *job, uint64_t version,
                                 const cks_md_version_t *rec)
{
    if (rec->state != CKS_VSTATE_OPEN || s->map == NULL) {
        return 0;
    }
    cks_sv_version_t *v = cks_sv_version_find(s, job, version);
    return v == NULL || v->objs == NULL;
}

void cks_sv_version_stat(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                         const cks_msg_version_stat_t *m)
{
    cks_msg_version_stat_reply_t r = {0};
    cks_md_version_t rec;
    cks_md_txn_h txn;
    cks_status_t status;

    status = cks_sv_names_txn(s, &m->job, NULL, &txn);
    if (status == CKS_OK) {
        if (m->latest) {
            status = cks_md_version_latest(txn, m->job.ptr, m->job.len, 1, &rec);
        } else {
            status = cks_md_version_get(txn, m->job.ptr, m->job.len, m->version, &rec);
            if (status == CKS_ERR_NO_SUCH_VERSION &&
                cks_md_job_exists(txn, m->job.ptr, m->job.len) != CKS_OK) {
                status = CKS_ERR_NO_SUCH_JOB;
            }
        }
        cks_md_txn_abort(txn);
    }
    if (status == CKS_OK && !m->latest && cks_sv_open_elsewhere(s, &m->job, m->version, &rec)) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_BUSY,
                            "version %llu is open here without its coordinator: ask another "
                            "server", (unsigned long long)m->version);
        return;
    }
    r.status = status;
    r.msg    = cks_wire_cstr(status == CKS_OK ? NULL : cks_status_string(status));
    if (status == CKS_OK) {
        cks_sv_entry_from_rec(&r.v, &rec);
    }
    cks_sv_reply(conn, CKS_MSG_VERSION_STAT_REPLY, req_id, &r);
}

void cks_sv_object_stat(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_object_stat_t *m)
{
    cks_msg_object_stat_reply_t r = {0};
    cks_md_version_t rec;
    cks_md_object_t obj;
    cks_md_txn_h txn;
    cks_status_t status;

    status = cks_sv_names_txn(s, &m->job, &m->key, &txn);
    if (status == CKS_OK) {
        status = cks_sv_readable(txn, &m->job, m->version, &rec);
        if (status == CKS_OK) {
            status = cks_md_object_get(txn, m->job.ptr, m->job.len, m->version, m->key.ptr,
                                       m->key.len, &obj);
        }
        cks_md_txn_abort(txn);
    }
    if (status == CKS_ERR_NOT_RESTORABLE && cks_sv_open_elsewhere(s, &m->job, m->version, &rec)) {
        /* not "not restorable": this server does not know (a cut-off
         * coordinator that was taken over, seen in the partition test) */
        cks_sv_reply_status(conn, req_id, CKS_ERR_BUSY,
                            "version %llu is open here without its coordinator: ask another "
                            "server", (unsigned long long)m->version);
        return;
    }
    r.status = status;
    r.msg    = cks_wire_cstr(status == CKS_OK ? NULL : cks_status_string(status));
    if (status == CKS_OK) {
        cks_sv_entry_from_obj(&r.o, &obj);
    }
    cks_sv_reply(conn, CKS_MSG_OBJECT_STAT_REPLY, req_id, &r);
}

/* List replies: header with count/more, and a msgpack page as AM data. */
static void cks_sv_page_sent(void *arg, cks_status_t status)
{
    free(arg);
}

static void cks_sv_list_reply(cks_tp_conn_h conn, uint64_t req_id, cks_status_t status,
                              uint8_t *page, size_t page_len, uint32_t count, int more)
{
    cks_msg_list_reply_t r;
    r.status = status;
    r.msg    = cks_wire_cstr(status == CKS_OK ? NULL : cks_status_string(status));
    r.count  = status == CKS_OK ? count : 0;
    r.more   = status == CKS_OK ? (uint32_t)more : 0;
    if (status != CKS_OK || page_len == 0) {
        free(page);
        cks_sv_reply(conn, CKS_MSG_LIST_REPLY, req_id, &r);
        return;
    }
    cks_status_t st = cks_tp_send(conn, CKS_MSG_LIST_REPLY, CKS_WIRE_F_PAGE, req_id, &r,
                                  page, page_len, CKS_MEM_HOST, NULL, cks_sv_page_sent,
                                  page);
    if (st != CKS_INPROGRESS) {
        free(page);
    }
}

void cks_sv_list(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, unsigned type,
                 const cks_msg_any_t *body)
{
    union {
        cks_md_version_t v[CKS_WIRE_MAX_ENTRIES];
        cks_md_object_t o[CKS_WIRE_MAX_ENTRIES];
        char j[CKS_WIRE_MAX_ENTRIES][CKS_JOB_MAX_LEN + 1];
    } *buf      = NULL;
    uint8_t *page = NULL;
    size_t count = 0, off = 0;
    cks_md_txn_h txn;
    cks_status_t status;
    uint32_t max;
    int more = 0;

    max = type == CKS_MSG_VERSION_LIST ? body->m_VERSION_LIST.max
          : type == CKS_MSG_OBJECT_LIST ? body->m_OBJECT_LIST.max
                                        : body->m_JOB_LIST.max;
    max = CKS_MIN(CKS_MAX(max, 1u), CKS_WIRE_MAX_ENTRIES);
    buf  = malloc(sizeof(*buf));
    page = malloc(CKS_WIRE_MAX_PAGE);
    if (buf == NULL || page == NULL) {
        status = CKS_ERR_NO_MEMORY;
        goto out;
    }
    status = cks_md_txn_begin(s->md, 0, &txn);
    if (status != CKS_OK) {
        goto out;
    }
    if (type == CKS_MSG_VERSION_LIST) {
        const cks_msg_version_list_t *m = &body->m_VERSION_LIST;
        status = cks_sv_check_names(&m->job, NULL);
        if (status == CKS_OK) {
            status = cks_md_version_list(txn, m->job.ptr, m->job.len,
                                         m->has_after ? &m->after : NULL, buf->v, max,
                                         &count, &more);
        }
        if (status == CKS_OK && count == 0 && !m->has_after &&
            cks_md_job_exists(txn, m->job.ptr, m->job.len) != CKS_OK) {
            status = CKS_ERR_NO_SUCH_JOB;
        }
        for (size_t i = 0; status == CKS_OK && i < count; i++) {
            cks_msg_version_entry_t e;
            cks_sv_entry_from_rec(&e, &buf->v[i]);
            status = cks_wire_entry_pack(CKS_WIRE_ENTRY_VERSION, &e, page,
                                         CKS_WIRE_MAX_PAGE, &off);
        }
    } else if (type == CKS_MSG_OBJECT_LIST) {
        const cks_msg_object_list_t *m = &body->m_OBJECT_LIST;
        cks_md_version_t rec;
        status = cks_sv_check_names(&m->job, NULL);
        if (status == CKS_OK) {
            status = cks_sv_readable(txn, &m->job, m->version, &rec);
            if (status == CKS_ERR_NOT_RESTORABLE &&
                cks_sv_open_elsewhere(s, &m->job, m->version, &rec)) {
                status = CKS_ERR_BUSY; /* its outcome is elsewhere: ask another */
            }
        }
        if (status == CKS_OK) {
            status = cks_md_object_list(txn, m->job.ptr, m->job.len, m->version,
                                        m->after.len ? m->after.ptr : NULL, m->after.len,
                                        buf->o, max, &count, &more);
        }
        for (size_t i = 0; status == CKS_OK && i < count; i++) {
            cks_msg_object_entry_t e;
            cks_sv_entry_from_obj(&e, &buf->o[i]);
            status = cks_wire_entry_pack(CKS_WIRE_ENTRY_OBJECT, &e, page,
                                         CKS_WIRE_MAX_PAGE, &off);
        }
    } else {
        const cks_msg_job_list_t *m = &body->m_JOB_LIST;
        status = cks_md_job_list(txn, m->after.len ? m->after.ptr : NULL, m->after.len,
                                 buf->j, max, &count, &more);
        for (size_t i = 0; status == CKS_OK && i < count; i++) {
            cks_msg_job_entry_t e = {cks_wire_cstr(buf->j[i])};
            status = cks_wire_entry_pack(CKS_WIRE_ENTRY_JOB, &e, page, CKS_WIRE_MAX_PAGE,
                                         &off);
        }
    }
    cks_md_txn_abort(txn);
out:
    free(buf);
    cks_sv_list_reply(conn, req_id, status, page, off, (uint32_t)count, more);
}
