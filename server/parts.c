/*
 * DESIGN: puts whose bytes come in parts (a standalone server, or a
 * cluster's primary). A client that stages a put through a ring smaller
 * than the object sends the PUT with CKS_WIRE_F_PARTS and no bytes, then
 * one PUT_PART per ring slice, in
 * order, each as soon as the slice is in the ring: the payload of each part
 * is the slice (an RMA descriptor of it on this host: the server copies it
 * straight into the object's place in the arena, on its copy threads), and
 * each part is answered once its bytes are in, so that the client reuses
 * its slot. The PUT handler (handlers.c, primary.c) does every check and
 * takes the arena extent as for any put, then opens a record here in place
 * of its payload's receive; once all `size` bytes are in, the record ends
 * with the put's own continuation (the one its receive would have called:
 * STORED, then the record in LMDB, or the encoding and spreading of a
 * primary), or with the first error.
 *
 * A record ends with an error on a part that does not follow the last one
 * (offset), that goes past the object, or whose bytes did not come; on a
 * part that cancels it (the client's copy failed: CKS_ERR_CANCELED); when
 * no part came for the receive timeout (CKS_ERR_TIMEOUT) or its connection
 * failed (swept by cks_sv_parts_sweep() from the server's loop); and at the
 * server's stop. Its extent is then freed by the put's continuation, as for
 * a put whose bytes did not come.
 *
 * Never: write outside the object's extent; end a record while one of its
 * parts is still being received (the receive writes into the extent).
 */
#include "server_int.h"

#include <stdlib.h>
#include <string.h>

struct cks_sv_parts {
    struct cks_sv_parts *next;
    cks_tp_conn_h conn;
    char job[CKS_JOB_MAX_LEN];
    uint32_t job_len;
    uint64_t version;
    char key[CKS_KEY_MAX_LEN];
    uint32_t key_len;
    uint8_t *dst;           /* the object's bytes in the arena */
    uint64_t total;         /* the object's size */
    uint64_t next_off;      /* where the next part must start */
    uint64_t received;      /* bytes of parts whose receive ended well */
    unsigned inflight;      /* parts being received */
    cks_status_t failed;    /* the first error (CKS_OK: none) */
    uint64_t deadline_ns;   /* no part by then: CKS_ERR_TIMEOUT */
    void (*done)(void *arg, cks_status_t status);
    void *arg;
};

/* One part's receive. */
typedef struct {
    cks_server_h s;
    cks_sv_parts_t *p;
    cks_tp_conn_h conn;
    uint64_t req_id;
    uint64_t len;
} cks_sv_part_t;

static uint64_t cks_sv_parts_wait_ns(cks_server_h s)
{
    return (uint64_t)(s->p.recv_timeout_s ? s->p.recv_timeout_s * 1000u
                                          : CKS_SV_RECV_TIMEOUT_MS) * 1000000ull;
}

/* End the record when nothing of it runs any more: all bytes in, or failed
 * with no part still being received. */
static void cks_sv_parts_settle(cks_server_h s, cks_sv_parts_t *p)
{
    if (p->inflight > 0 || (p->failed == CKS_OK && p->received < p->total)) {
        return;
    }
    for (cks_sv_parts_t **pp = &s->parts; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    cks_tp_conn_put(p->conn);
    void (*done)(void *, cks_status_t) = p->done;
    void *arg             = p->arg;
    cks_status_t status   = p->failed;
    free(p);
    done(arg, status);
}

static void cks_sv_parts_fail(cks_server_h s, cks_sv_parts_t *p, cks_status_t status)
{
    if (p->failed == CKS_OK) {
        p->failed = status;
    }
    cks_sv_parts_settle(s, p);
}

cks_status_t cks_sv_parts_open(cks_server_h s, cks_tp_conn_h conn, const cks_wire_str_t *job,
                               uint64_t version, const cks_wire_str_t *key, uint8_t *dst,
                               uint64_t total, void (*done)(void *arg, cks_status_t status),
                               void *arg)
{
    cks_sv_parts_t *p = calloc(1, sizeof(*p));
    if (p == NULL || job->len > sizeof(p->job) || key->len > sizeof(p->key)) {
        free(p);
        return p == NULL ? CKS_ERR_NO_MEMORY : CKS_ERR_INVALID_PARAM;
    }
    p->conn = conn;
    cks_tp_conn_get(conn);
    memcpy(p->job, job->ptr, job->len);
    p->job_len = job->len;
    p->version = version;
    memcpy(p->key, key->ptr, key->len);
    p->key_len     = key->len;
    p->dst         = dst;
    p->total       = total;
    p->failed      = CKS_OK;
    p->deadline_ns = cks_time_ns() + cks_sv_parts_wait_ns(s);
    p->done        = done;
    p->arg         = arg;
    p->next        = s->parts;
    s->parts       = p;
    return CKS_OK;
}

static void cks_sv_part_recv_done(void *arg, cks_status_t status)
{
    cks_sv_part_t *pt = arg;
    cks_server_h s    = pt->s;
    cks_sv_parts_t *p = pt->p;
    p->inflight--;
    if (status == CKS_OK) {
        p->received += pt->len;
        cks_sv_reply_status(pt->conn, pt->req_id, CKS_OK, NULL);
    } else {
        cks_sv_reply_status(pt->conn, pt->req_id, status, "part of '%.*s' not received",
                            (int)p->key_len, p->key);
        if (p->failed == CKS_OK) {
            p->failed = status;
        }
    }
    cks_tp_conn_put(pt->conn);
    free(pt);
    cks_sv_parts_settle(s, p);
}

void cks_sv_put_part(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                     const cks_msg_put_part_t *m, cks_tp_data_t *data)
{
    cks_sv_parts_t *p = s->parts;
    while (p != NULL && !(p->conn == conn && p->version == m->version &&
                          p->job_len == m->job.len && p->key_len == m->key.len &&
                          memcmp(p->job, m->job.ptr, m->job.len) == 0 &&
                          memcmp(p->key, m->key.ptr, m->key.len) == 0)) {
        p = p->next;
    }
    if (p == NULL || p->failed != CKS_OK) {
        cks_sv_reply_status(conn, req_id, p == NULL ? CKS_ERR_NO_SUCH_KEY : p->failed,
                            p == NULL ? "no put of '%.*s' in version %llu takes parts on "
                                        "this connection"
                                      : "the put of '%.*s' in version %llu failed",
                            (int)m->key.len, m->key.ptr, (unsigned long long)m->version);
        return;
    }
    if (m->cancel) {
        cks_sv_reply_status(conn, req_id, CKS_OK, NULL);
        cks_sv_parts_fail(s, p, CKS_ERR_CANCELED);
        return;
    }
    uint64_t len = data == NULL ? 0 : data->length;
    if (len == 0 || m->offset != p->next_off || len > p->total - p->next_off) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_BAD_MESSAGE,
                            "part of '%.*s' at %llu of %llu bytes: the next must start at "
                            "%llu and end by %llu",
                            (int)m->key.len, m->key.ptr, (unsigned long long)m->offset,
                            (unsigned long long)len, (unsigned long long)p->next_off,
                            (unsigned long long)p->total);
        cks_sv_parts_fail(s, p, CKS_ERR_BAD_MESSAGE);
        return;
    }
    p->next_off += len;
    p->deadline_ns = cks_time_ns() + cks_sv_parts_wait_ns(s);
    if (!data->is_rndv && !data->is_rma) {
        memcpy(p->dst + m->offset, data->ptr, len);
        p->received += len;
        cks_sv_reply_status(conn, req_id, CKS_OK, NULL);
        cks_sv_parts_settle(s, p);
        return;
    }
    cks_sv_part_t *pt = calloc(1, sizeof(*pt));
    if (pt == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        cks_sv_parts_fail(s, p, CKS_ERR_NO_MEMORY);
        return;
    }
    pt->s      = s;
    pt->p      = p;
    pt->conn   = conn;
    pt->req_id = req_id;
    pt->len    = len;
    cks_tp_conn_get(conn);
    p->inflight++;
    cks_status_t status = cks_tp_data_recv(s->tp, data, p->dst + m->offset, CKS_MEM_HOST,
                                           s->arena_mem, cks_sv_part_recv_done, pt);
    if (status != CKS_INPROGRESS) {
        cks_sv_part_recv_done(pt, status);
    }
}

int cks_sv_parts_sweep(cks_server_h s)
{
    if (s->parts == NULL) {
        return -1; /* the server's loop calls it every turn */
    }
    uint64_t now = cks_time_ns(), next = UINT64_MAX;
    cks_sv_parts_t *p = s->parts;
    while (p != NULL) {
        cks_sv_parts_t *following = p->next; /* p may end here */
        if (p->failed == CKS_OK && p->inflight == 0) {
            if (cks_tp_conn_failed(p->conn)) {
                cks_info("put of '%.*s' in parts: its connection failed", (int)p->key_len,
                         p->key);
                cks_sv_parts_fail(s, p, CKS_ERR_TRANSPORT);
            } else if (now >= p->deadline_ns) {
                cks_warn("put of '%.*s' in parts: no part for %llu ms (%llu of %llu bytes "
                         "in): it fails", (int)p->key_len, p->key,
                         (unsigned long long)(cks_sv_parts_wait_ns(s) / 1000000u),
                         (unsigned long long)p->received, (unsigned long long)p->total);
                cks_sv_parts_fail(s, p, CKS_ERR_TIMEOUT);
            } else if (p->deadline_ns < next) {
                next = p->deadline_ns;
            }
        }
        p = following;
    }
    if (next == UINT64_MAX) { /* none left, or parts in flight: look again */
        return s->parts != NULL ? 1000 : -1;
    }
    uint64_t ms = (next - now + 999999u) / 1000000u;
    return ms > 1000 ? 1000 : (int)ms; /* a failed connection is seen within 1 s */
}

void cks_sv_parts_stop(cks_server_h s)
{
    cks_sv_parts_t *p = s->parts;
    while (p != NULL) {
        cks_sv_parts_t *following = p->next;
        cks_sv_parts_fail(s, p, CKS_ERR_SHUTTING_DOWN); /* ends it unless a part runs */
        p = following;
    }
}
