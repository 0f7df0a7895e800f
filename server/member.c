/*
 * DESIGN: a member's part of the cluster: chunks it takes (CHUNK_PUT) and
 * serves (CHUNK_GET, with the arena space they use held while a read is in
 * flight), and the manifests and drops a coordinator sends it
 * (VERSION_COMMIT, VERSION_DROP). See cluster.c for the whole flow.
 *
 * Never: free arena space a read in flight uses, or wait.
 */
#include "cluster_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reads in flight and the space they use ------------------------------------------ */

void cks_sv_read_begin(cks_server_h s, cks_sv_read_t *r)
{
    r->seq      = ++s->read_seq;
    r->began_ns = cks_time_ns();
    r->closing  = 0;
    if (r->conn != NULL) {
        cks_tp_conn_get(r->conn);
    }
    CKS_LIST_PUSH(s->reads_head, s->reads_tail, r);
}

/* Return what no read in flight may use any more (reads end in any order;
 * space waits for the oldest read that began before it was freed). */
static void cks_sv_deferred_release(cks_server_h s)
{
    uint64_t oldest = s->reads_head != NULL ? s->reads_head->seq : UINT64_MAX;
    size_t n        = 0;
    while (n < s->ndeferred && s->deferred[n].seq < oldest) {
        cks_arena_free(s->arena, s->deferred[n].off, s->deferred[n].len);
        n++;
    }
    if (n > 0) {
        memmove(s->deferred, s->deferred + n, (s->ndeferred - n) * sizeof(*s->deferred));
        s->ndeferred -= n;
    }
}

void cks_sv_read_end(cks_server_h s, cks_sv_read_t *r)
{
    CKS_LIST_DEL(s->reads_head, s->reads_tail, r);
    if (r->conn != NULL) {
        cks_tp_conn_put(r->conn);
        r->conn = NULL;
    }
    if (s->ndeferred > 0) {
        cks_sv_deferred_release(s);
    }
}

int cks_sv_reads_expire(cks_server_h s)
{
    uint64_t now = cks_time_ns(), next = UINT64_MAX;
    /* oldest first (the list is in the order reads began: the first young
     * one ends the walk); a close fails the reply at once or 5 s later (the
     * transport gives up on sends UCX holds), which ends the read */
    for (cks_sv_read_t *r = s->reads_head; r != NULL; r = r->next) {
        if (r->conn == NULL || r->closing) {
            continue;
        }
        if (now - r->began_ns < CKS_SV_READ_HOLD_NS) {
            next = r->began_ns + CKS_SV_READ_HOLD_NS;
            break;
        }
        r->closing = 1;
        cks_warn("a chunk's reply to %s has not gone out in %llu s: closing the connection "
                 "(arena space freed meanwhile waits for it)",
                 cks_tp_conn_peer(r->conn),
                 (unsigned long long)(CKS_SV_READ_HOLD_NS / 1000000000ull));
        cks_tp_conn_close(r->conn); /* r may end here: look again next time */
        return 0;
    }
    return next == UINT64_MAX ? -1 : (int)((next - now) / 1000000 + 1);
}

void cks_sv_free_after_reads(cks_server_h s, uint64_t off, uint64_t len)
{
    if (s->reads_head == NULL) {
        cks_arena_free(s->arena, off, len);
        return;
    }
    void *p = cks_array_grow(s->deferred, &s->capdeferred, s->ndeferred + 1,
                             sizeof(*s->deferred), 64);
    if (p == NULL) {
        /* kept taken rather than reused under a read */
        cks_error("arena: out of memory deferring the free of %llu bytes: kept until "
                  "restart", (unsigned long long)len);
        return;
    }
    s->deferred = p;
    s->deferred[s->ndeferred++] = (cks_sv_deferred_t){off, len, s->read_seq};
    if (s->ndeferred == 1) {
        cks_info("arena space freed while chunk reads are in flight: returned after them");
    }
}

/* ---- members: chunks ------------------------------------------------------------------- */

typedef struct cks_chunk_in {
    cks_server_h s;
    cks_tp_conn_h conn;
    uint64_t req_id;
    cks_mdq_job_t *j;
    struct cks_chunk_in *held_next; /* test builds: fault chunk_hold */
    uint64_t held_due_ns;
} cks_chunk_in_t;

static void cks_chunk_recorded(cks_server_h s, cks_mdq_job_t *j)
{
    cks_chunk_in_t *c = j->ctx;
    if (j->status != CKS_OK) {
        cks_arena_free(s->arena, j->chunks[0].arena_offset, j->chunks[0].arena_len);
    } else if (j->chunk_guard) {
        cks_rp_taken(s, j->job, j->job_len, j->version, j->key, j->key_len, &j->chunks[0]);
    } else if (cks_fault_fire("chunk_corrupt")) {
        /* a bit flips in memory after the chunk was checked and recorded */
        cks_arena_base(s->arena)[j->chunks[0].arena_offset + j->chunks[0].len / 2] ^= 0x10;
    }
    if (j->status == CKS_ERR_VERSION_NOT_OPEN) {
        cks_info("chunk %u of stripe %llu of '%.*s' came after version %llu of '%s' was "
                 "aborted: refused", j->chunks[0].idx, (unsigned long long)j->chunks[0].stripe,
                 (int)j->key_len, j->key, (unsigned long long)j->version, j->job);
    } else if (j->status == CKS_ERR_CRC_MISMATCH) {
        cks_error("chunk %u of stripe %llu of '%.*s' (version %llu of '%s') arrived with "
                  "bytes that fail its CRC: refused",
                  j->chunks[0].idx, (unsigned long long)j->chunks[0].stripe, (int)j->key_len,
                  j->key, (unsigned long long)j->version, j->job);
    }
    cks_sv_reply_status(c->conn, c->req_id, j->status,
                        j->status == CKS_OK ? NULL
                        : j->status == CKS_ERR_CRC_MISMATCH
                            ? "chunk refused: its bytes fail the CRC the primary computed"
                        : j->status == CKS_ERR_VERSION_NOT_OPEN
                            ? "chunk refused: its version was aborted"
                            : "chunk not recorded");
    cks_tp_conn_put(c->conn);
    free(j->chunks);
    free(j);
    free(c);
}

static void cks_chunk_received(void *arg, cks_status_t status)
{
    cks_chunk_in_t *c  = arg;
    cks_mdq_job_t *j   = c->j;
    cks_md_chunk_t *ch = &j->chunks[0];
    if (status == CKS_OK && cks_fault_fire("chunk_recv")) {
        status = CKS_ERR_TRANSPORT;
    }
    if (status != CKS_OK) {
        j->status = status;
        cks_chunk_recorded(c->s, j);
        return;
    }
    if (cks_fault_fire("chunk_wire_corrupt")) {
        /* a bit flips on the way, after the primary computed the CRC */
        cks_arena_base(c->s->arena)[ch->arena_offset + ch->len / 2] ^= 0x10;
    }
    j->data = cks_arena_base(c->s->arena) + ch->arena_offset; /* checked before recorded */
    if (cks_fault_fire("chunk_hold")) {
        /* test builds: the chunk is recorded 4 s after its bytes came, as
         * one whose primary's messages come late would be (its version may
         * have ended meanwhile); the test waits for this line */
        cks_warn("fault chunk_hold: chunk %u of stripe %llu of '%.*s' (version %llu) held "
                 "4 s before it is recorded", ch->idx, (unsigned long long)ch->stripe,
                 (int)j->key_len, j->key, (unsigned long long)j->version);
        c->held_due_ns   = cks_time_ns() + 4000000000ull;
        c->held_next     = c->s->held_chunks;
        c->s->held_chunks = c;
        return;
    }
    cks_mdq_push(&c->s->mdq, j);
}

void cks_sv_held_chunks(cks_server_h s, int all)
{
    cks_chunk_in_t **pp = &s->held_chunks;
    uint64_t now        = cks_time_ns();
    while (*pp != NULL) {
        cks_chunk_in_t *c = *pp;
        if (!all && c->held_due_ns > now) {
            pp = &c->held_next;
            continue;
        }
        *pp = c->held_next;
        if (all) { /* shutting down */
            c->j->status = CKS_ERR_CANCELED;
            cks_chunk_recorded(s, c->j);
        } else {
            cks_info("fault chunk_hold: chunk %u of stripe %llu released to be recorded",
                     c->j->chunks[0].idx, (unsigned long long)c->j->chunks[0].stripe);
            cks_mdq_push(&s->mdq, c->j);
        }
    }
}

void cks_sv_chunk_put(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                      const cks_msg_chunk_put_t *m, cks_tp_data_t *data)
{
    cks_chunk_in_t *c;
    cks_mdq_job_t *j;
    uint64_t off;
    cks_status_t status = cks_sv_check_names(&m->job, &m->key);

    if (status == CKS_OK && (data == NULL || data->length == 0 || data->length % 4096 ||
                             data->length > CKS_SV_CHUNK_MAX ||
                             m->idx >= CKS_PLACE_WIDTH_MAX)) {
        status = CKS_ERR_BAD_MESSAGE;
    }
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "bad chunk");
        return;
    }
    status = cks_arena_alloc(s->arena, data->length, &off);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "arena full for a chunk of %zu bytes",
                            data->length);
        return;
    }
    c = calloc(1, sizeof(*c));
    j = cks_sv_mdq_job(s, CKS_MDQ_CHUNKS, m->job.ptr, m->job.len, m->version);
    if (c == NULL || j == NULL || (j->chunks = calloc(1, sizeof(*j->chunks))) == NULL) {
        free(c);
        free(j);
        cks_arena_free(s->arena, off, data->length);
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    memcpy(j->key, m->key.ptr, m->key.len);
    j->key_len      = m->key.len;
    j->nchunks      = 1;
    j->chunks[0]    = (cks_md_chunk_t){m->stripe, m->idx, data->length, m->crc64, off,
                                       data->length};
    j->done         = cks_chunk_recorded;
    j->ctx          = c;
    if (m->guard != 0) {
        /* a chunk another member rebuilt for this one (repair.c): the
         * manifest that needs it must still be restorable */
        j->chunk_guard   = 1;
        j->guard_version = m->guard;
    }
    c->s            = s;
    c->conn         = conn;
    c->req_id       = req_id;
    c->j            = j;
    cks_tp_conn_get(conn);
    if (!data->is_rndv) {
        memcpy(cks_arena_base(s->arena) + off, data->ptr, data->length);
        cks_chunk_received(c, CKS_OK);
        return;
    }
    status = cks_tp_data_recv(s->tp, data, cks_arena_base(s->arena) + off, CKS_MEM_HOST,
                              s->arena_mem, cks_chunk_received, c);
    if (status != CKS_INPROGRESS) {
        cks_chunk_received(c, status);
    }
}

typedef struct {
    cks_server_h s;
    cks_sv_version_t *v;
    cks_sv_read_t read; /* the chunk's space stays until the send ends */
    uint64_t stripe; /* the chunk, for the log */
    uint32_t idx;
    uint32_t key_len;
    char key[CKS_KEY_MAX_LEN];
} cks_chunk_out_t;

/* Test builds: a chunk's send held back after its check (fault point
 * chunk_get_slow), as a send that UCX completes late would be. */
struct cks_sv_slow_send {
    struct cks_sv_slow_send *next;
    uint64_t due_ns;
    cks_tp_conn_h conn;
    uint64_t req_id;
    cks_msg_chunk_get_reply_t r;
    const uint8_t *bytes;
    cks_chunk_out_t *o;
    /* a write into the reader's memory (chunk_write_late): where, with
     * copies of what the descriptor pointed at */
    int into;
    cks_tp_data_t dest;
    uint64_t crc;
    uint8_t rkey[CKS_TP_RMA_DESC_MAX];
    uint8_t token[CKS_WIRE_NONCE_LEN];
};

static void cks_sv_chunk_crc_error(uint32_t idx, uint64_t stripe, const char *key,
                                   size_t key_len)
{
    cks_error("chunk %u of stripe %llu of '%.*s' fails its CRC", idx,
              (unsigned long long)stripe, (int)key_len, key);
}

static void cks_chunk_sent(void *arg, cks_status_t status)
{
    cks_chunk_out_t *o = arg;
    if (status == CKS_ERR_CRC_MISMATCH) { /* the transport's check of what it wrote */
        cks_sv_chunk_crc_error(o->idx, o->stripe, o->key, o->key_len);
    }
    o->v->readers--;
    cks_sv_version_release(o->s, o->v);
    cks_sv_read_end(o->s, &o->read);
    free(o);
}

void cks_sv_slow_sends(cks_server_h s, int all)
{
    struct cks_sv_slow_send **pp = &s->slow;
    uint64_t now                 = cks_time_ns();
    while (*pp != NULL) {
        struct cks_sv_slow_send *w = *pp;
        if (!all && w->due_ns > now) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        if (w->into && !all) { /* the tests wait for this line */
            cks_info("fault chunk_write_late: chunk %u of stripe %llu written into the "
                     "reader's memory 11 s late", w->o->idx,
                     (unsigned long long)w->o->stripe);
        }
        cks_tp_check_t check = {cks_crc64, w->crc, cks_crc64_combine};
        cks_status_t st = all ? CKS_ERR_CANCELED
                              : cks_tp_send_into(w->conn, CKS_MSG_CHUNK_GET_REPLY, w->req_id,
                                                 &w->r, w->bytes, w->r.length,
                                                 s->arena_mem, w->into ? &w->dest : NULL,
                                                 w->into ? &check : NULL, cks_chunk_sent,
                                                 w->o);
        if (st != CKS_INPROGRESS) {
            cks_chunk_sent(w->o, st);
            if (!all) {
                cks_sv_reply_status(w->conn, w->req_id, st, "chunk send failed");
            }
        }
        cks_tp_conn_put(w->conn);
        free(w);
    }
}

void cks_sv_chunk_get(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                      const cks_msg_chunk_get_t *m, const cks_tp_data_t *dest)
{
    cks_msg_chunk_get_reply_t r = {0};
    cks_md_chunk_t ch;
    cks_md_txn_h txn;
    cks_sv_version_t *v;
    cks_chunk_out_t *o;
    cks_status_t status = cks_sv_names_txn(s, &m->job, &m->key, &txn);

    if (status == CKS_OK) {
        status = cks_md_chunk_get(txn, m->job.ptr, m->job.len, m->version, m->key.ptr,
                                  m->key.len, m->stripe, m->idx, &ch);
        cks_md_version_t rec;
        if (status == CKS_ERR_NO_SUCH_KEY && m->length == 0 &&
            cks_md_version_get(txn, m->job.ptr, m->job.len, m->version, &rec) != CKS_OK) {
            /* a probe (repair.c): a server that has not learned the version
             * yet (catching up) is not one that lacks the chunk */
            status = CKS_ERR_NO_SUCH_VERSION;
        }
        cks_md_txn_abort(txn);
    }
    if (status == CKS_OK && (m->offset > ch.len || m->length > ch.len - m->offset)) {
        status = CKS_ERR_OUT_OF_RANGE;
    }
    if (status == CKS_OK && m->length == 0 && dest == NULL) {
        /* nothing to read: whether this server holds the chunk (repair's
         * question before it reads a stripe) */
        r.msg       = cks_wire_cstr(NULL);
        r.crc64     = ch.crc64;
        r.chunk_len = ch.len;
        r.offset    = m->offset;
        cks_sv_reply(conn, CKS_MSG_CHUNK_GET_REPLY, req_id, &r);
        return;
    }
    const uint8_t *bytes = status == CKS_OK ? cks_arena_base(s->arena) + ch.arena_offset
                                            : NULL;
    /* a part of a chunk cannot be checked by the reader, nor bytes written
     * straight into its memory: check them here; a whole chunk written into
     * the reader's memory is checked by the transport as it writes it */
    int whole = m->offset == 0 && m->length == ch.len;
    if (status == CKS_OK && (!whole || dest != NULL) &&
        (cks_fault_fire("crc_check") ||
         (!whole && cks_crc64(0, bytes, ch.len) != ch.crc64))) {
        cks_sv_chunk_crc_error(m->idx, m->stripe, m->key.ptr, m->key.len);
        status = CKS_ERR_CRC_MISMATCH;
    }
    v = status == CKS_OK ? cks_sv_version_find(s, &m->job, m->version) : NULL;
    if (status == CKS_OK && v == NULL && (v = cks_sv_version_new(s, &m->job, m->version)) ==
                                             NULL) {
        status = CKS_ERR_NO_MEMORY;
    }
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "chunk %u of stripe %llu of '%.*s': %s",
                            m->idx, (unsigned long long)m->stripe, (int)m->key.len,
                            m->key.ptr, cks_status_string(status));
        return;
    }
    o = malloc(sizeof(*o));
    if (o == NULL) {
        cks_sv_version_release(s, v);
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return;
    }
    *o = (cks_chunk_out_t){s, v, {NULL, NULL, 0, 0, conn, 0}, m->stripe, m->idx,
                           (uint32_t)m->key.len, {0}};
    memcpy(o->key, m->key.ptr, m->key.len); /* checked: at most CKS_KEY_MAX_LEN */
    v->readers++;
    cks_sv_read_begin(s, &o->read); /* from the check until the bytes are sent */
    r.status    = CKS_OK;
    r.msg       = cks_wire_cstr(NULL);
    r.crc64     = ch.crc64;
    r.chunk_len = ch.len;
    r.offset    = m->offset;
    r.length    = m->length;
    /* test builds: a send held back 1 s, not into the reader's memory; or
     * a write into it held back 11 s, past a repair read's timeout (10 s),
     * as from a member stopped, then resumed */
    int late = dest != NULL && whole && dest->rkey_len <= CKS_TP_RMA_DESC_MAX &&
               cks_fault_fire("chunk_write_late");
    if (late || (dest == NULL && cks_fault_fire("chunk_get_slow"))) {
        struct cks_sv_slow_send *w = calloc(1, sizeof(*w));
        if (w != NULL) {
            *w = (struct cks_sv_slow_send){.next   = s->slow,
                                           .due_ns = cks_time_ns() +
                                                     (late ? 11000000000ull : 1000000000ull),
                                           .conn   = conn,
                                           .req_id = req_id,
                                           .r      = r,
                                           .bytes  = bytes + m->offset,
                                           .o      = o,
                                           .into   = late,
                                           .crc    = ch.crc64};
            if (late) { /* what the descriptor points at lives only during this call */
                w->dest = *dest;
                memcpy(w->rkey, dest->rkey, dest->rkey_len);
                memcpy(w->token, dest->rma_token, CKS_WIRE_NONCE_LEN);
                w->dest.rkey      = w->rkey;
                w->dest.rma_token = w->token;
            }
            cks_tp_conn_get(conn);
            s->slow = w;
            return;
        }
    }
    cks_tp_check_t check = {cks_crc64, ch.crc64, cks_crc64_combine};
    status = cks_tp_send_into(conn, CKS_MSG_CHUNK_GET_REPLY, req_id, &r, bytes + m->offset,
                              m->length, s->arena_mem, dest, whole ? &check : NULL,
                              cks_chunk_sent, o);
    if (status != CKS_INPROGRESS) {
        cks_chunk_sent(o, status); /* logs a CRC mismatch */
        cks_sv_reply_status(conn, req_id, status, "cannot send chunk %u of stripe %llu%s: %s",
                            m->idx, (unsigned long long)m->stripe,
                            dest == NULL ? "" : " into the client's memory",
                            cks_status_string(status));
    }
}

/* ---- members: manifests and drops --------------------------------------------------- */

typedef struct {
    cks_tp_conn_h conn;
    uint64_t req_id;
    uint8_t *page;
    size_t page_len;
    cks_mdq_job_t *j;
} cks_commit_in_t;

static void cks_commit_recorded(cks_server_h s, cks_mdq_job_t *j)
{
    cks_commit_in_t *c = j->ctx;
    cks_wire_str_t job = {j->job, j->job_len};
    cks_sv_version_t *v = cks_sv_version_find(s, &job, j->version);
    if (v != NULL && v->cluster && v->objs == NULL &&
        (j->type == CKS_MDQ_DROP || j->has_rec)) {
        v->open = 0; /* a primary's key set is no longer needed */
        cks_sv_version_release(s, v);
    }
    for (size_t i = 0; i < j->nfreed; i++) {
        cks_sv_free_after_reads(s, j->freed[i].off, j->freed[i].len);
    }
    cks_sv_reply_status(c->conn, c->req_id, j->status, NULL);
    cks_tp_conn_put(c->conn);
    free(j->freed);
    free(j->objs);
    free(j);
    free(c->page);
    free(c);
}

/* A manifest's or a drop's job for the metadata writer, answered by
 * cks_commit_recorded (it holds `conn`); NULL, the request answered, when
 * out of memory. */
static cks_mdq_job_t *cks_commit_job(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                                     cks_mdq_type_t type, const cks_wire_str_t *job,
                                     uint64_t version)
{
    cks_commit_in_t *c = malloc(sizeof(*c));
    cks_mdq_job_t *j   = cks_sv_mdq_job(s, type, job->ptr, job->len, version);
    if (c == NULL || j == NULL) {
        free(c);
        free(j);
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return NULL;
    }
    *c      = (cks_commit_in_t){.conn = conn, .req_id = req_id, .j = j};
    j->done = cks_commit_recorded;
    j->ctx  = c;
    cks_tp_conn_get(conn);
    return j;
}

static void cks_commit_page_in(void *arg, cks_status_t status)
{
    cks_commit_in_t *c = arg;
    cks_mdq_job_t *j   = c->j;
    size_t off         = 0;

    /* decode the page: every entry is untrusted */
    j->objs = calloc(CKS_WIRE_MAX_ENTRIES, sizeof(*j->objs));
    if (status == CKS_OK && j->objs == NULL) {
        status = CKS_ERR_NO_MEMORY;
    }
    while (status == CKS_OK && off < c->page_len && j->nobjs < CKS_WIRE_MAX_ENTRIES) {
        cks_msg_object_entry_t e;
        status = cks_wire_entry_unpack(CKS_WIRE_ENTRY_OBJECT, c->page, c->page_len, &off, &e);
        if (status == CKS_OK) {
            status = cks_name_check(e.key.ptr, e.key.len, CKS_KEY_MAX_LEN);
        }
        if (status == CKS_OK) {
            cks_sv_object_of_entry(&j->objs[j->nobjs++], &e);
        }
    }
    if (status == CKS_OK && off != c->page_len) {
        status = CKS_ERR_BAD_MESSAGE;
    }
    if (status != CKS_OK) {
        j->status = status;
        cks_commit_recorded(j->server, j);
        return;
    }
    cks_mdq_push(&j->server->mdq, j);
}

void cks_sv_version_commit(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                           const cks_msg_version_commit_t *m, cks_tp_data_t *data)
{
    cks_commit_in_t *c;
    cks_mdq_job_t *j;
    cks_status_t status = cks_sv_check_names(&m->job, NULL);

    if (status == CKS_OK && (m->v.state > CKS_VSTATE_ABORTED ||
                             (data != NULL && data->length > CKS_WIRE_MAX_PAGE))) {
        status = CKS_ERR_BAD_MESSAGE;
    }
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "bad manifest page");
        return;
    }
    if (m->last) {
        cks_sv_claim_forget(s, m->job.ptr, m->job.len, m->v.version);
        cks_sv_kept_forget(s, m->job.ptr, m->job.len, m->v.version);
    }
    j = cks_commit_job(s, conn, req_id, CKS_MDQ_MANIFEST, &m->job, m->v.version);
    if (j == NULL) {
        return;
    }
    c = j->ctx;
    j->has_rec = m->last != 0;
    j->rec     = (cks_md_version_t){m->v.version,  m->v.parent,     (cks_vstate_t)m->v.state,
                                    m->v.nranks,   m->v.created_ns, m->v.sealed_ns,
                                    m->v.nobjects, m->v.bytes,      m->v.k,
                                    m->v.m,        m->v.chunk_size,
                                    m->v.redundancy, m->v.missing};
    j->retain         = m->last ? m->retain : 0;
    j->nheld          = cks_sv_held(s, j->job, j->job_len, j->held, CKS_SV_HELD_MAX);
    if (data == NULL) {
        cks_commit_page_in(c, CKS_OK);
        return;
    }
    c->page     = malloc(data->length);
    c->page_len = data->length;
    if (c->page == NULL) {
        cks_commit_page_in(c, CKS_ERR_NO_MEMORY);
    } else if (!data->is_rndv) {
        memcpy(c->page, data->ptr, data->length);
        cks_commit_page_in(c, CKS_OK);
    } else {
        status = cks_tp_data_recv(s->tp, data, c->page, CKS_MEM_HOST, NULL,
                                  cks_commit_page_in, c);
        if (status != CKS_INPROGRESS) {
            cks_commit_page_in(c, status);
        }
    }
}

void cks_sv_object_of_entry(cks_md_object_t *o, const cks_msg_object_entry_t *e)
{
    memcpy(o->key, e->key.ptr, e->key.len);
    o->key_len        = e->key.len;
    o->kind           = e->kind > CKS_KIND_OTHER ? CKS_KIND_OTHER : (cks_kind_t)e->kind;
    o->layer          = e->layer;
    o->expert         = e->expert;
    o->rank           = e->rank;
    o->size           = e->size;
    o->crc64          = e->crc64;
    o->source_version = e->source;
}

void cks_sv_version_drop(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                         const cks_msg_version_drop_t *m)
{
    cks_mdq_job_t *j;
    cks_md_version_t rec;
    cks_status_t status = cks_sv_check_names(&m->job, NULL);

    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "bad drop");
        return;
    }
    cks_sv_claim_forget(s, m->job.ptr, m->job.len, m->version);
    cks_sv_kept_forget(s, m->job.ptr, m->job.len, m->version);
    j = cks_commit_job(s, conn, req_id, CKS_MDQ_DROP, &m->job, m->version);
    if (j == NULL) {
        return;
    }
    if (m->state == CKS_VSTATE_ABORTED) {
        if (cks_sv_version_lookup(s, &m->job, m->version, &rec) != CKS_OK) {
            memset(&rec, 0, sizeof(rec));
            rec.version = m->version;
            rec.parent  = CKS_MD_NO_PARENT;
            rec.nranks  = 1;
        }
        rec.state    = CKS_VSTATE_ABORTED;
        rec.nobjects = rec.bytes = 0;
        j->rec       = rec;
        j->has_rec   = 1;
        j->retain    = m->retain; /* an abort for lack of space: make room */
        if (j->retain > 0) {
            j->nheld = cks_sv_held(s, j->job, j->job_len, j->held, CKS_SV_HELD_MAX);
        }
    }
    /* a put still spreading this version on this server keeps its chunks
     * until it ends; the drop removes what is recorded now */
    cks_mdq_push(&s->mdq, j);
}
