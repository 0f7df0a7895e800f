/*
 * DESIGN: libckstore's client. Owns one UCX worker, the connection to the
 * server, and a progress thread that is the worker's only user.
 *
 * Application threads never touch UCX: a call packs its request into an op,
 * appends it to the submit queue (mutex) and wakes the progress thread with
 * cks_tp_worker_signal(). The progress thread sends the op, matches the
 * reply by request id, receives payloads zero-copy into the caller's buffer,
 * runs the callback, and enforces timeouts: ops are kept in submission order,
 * and all have the same timeout, so the oldest is the next to expire. An op
 * that times out while UCX still uses the caller's buffer closes the
 * connection (UCX then fails the transfer) so that the buffer is returned
 * only when nothing writes to it any more. The progress thread sleeps on
 * the worker's event fd when there is nothing to do.
 *
 * Blocking calls are *_nb calls plus a wait on a condition variable.
 */
#include "client_int.h"
#include "stage.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ------------------------------------------------------------ */

void cks_cl_set_error(cks_client_h c, cks_status_t status, const char *text,
                             size_t len)
{
    pthread_mutex_lock(&c->lock);
    snprintf(c->last_error, sizeof(c->last_error), "%s: %.*s", cks_status_name(status),
             (int)CKS_MIN(len, (size_t)CKS_MSG_MAX_LEN), text);
    pthread_mutex_unlock(&c->lock);
}

void cks_cl_set_errorf(cks_client_h c, cks_status_t status, const char *fmt, ...)
{
    char text[CKS_MSG_MAX_LEN + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    cks_cl_set_error(c, status, text, strlen(text));
}

void cks_client_last_error(cks_client_h c, char *buf, size_t len)
{
    if (buf == NULL || len == 0) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    snprintf(buf, len, "%s", c->last_error);
    pthread_mutex_unlock(&c->lock);
}

void cks_waiter_cb(void *arg, cks_status_t status)
{
    cks_waiter_t *w = arg;
    pthread_mutex_lock(&w->lock);
    w->status = status;
    w->done   = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void cks_waiter_init(cks_waiter_t *w)
{
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->done   = 0;
    w->status = CKS_INPROGRESS;
}

/* Wait for an op submitted with cks_waiter_cb; `status` is what submit returned. */
cks_status_t cks_waiter_wait(cks_waiter_t *w, cks_status_t status)
{
    if (status == CKS_INPROGRESS) {
        pthread_mutex_lock(&w->lock);
        while (!w->done) {
            pthread_cond_wait(&w->cond, &w->lock);
        }
        status = w->status;
        pthread_mutex_unlock(&w->lock);
    }
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    return status;
}

/* Copy a name into the op and point a wire string at the copy. */
cks_status_t cks_op_name(cks_op_t *op, size_t *used, const char *name,
                                size_t max, cks_wire_str_t *s)
{
    size_t len;
    cks_status_t status;

    if (name == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    len    = strnlen(name, max + 1);
    status = cks_name_check(name, len, max);
    if (status != CKS_OK) {
        return status;
    }
    memcpy(op->names + *used, name, len);
    s->ptr = op->names + *used;
    s->len = (uint32_t)len;
    *used += len + 1;
    return CKS_OK;
}

cks_op_t *cks_op_new(cks_op_kind_t kind, unsigned type)
{
    cks_op_t *op = calloc(1, sizeof(*op));
    if (op != NULL) {
        op->kind     = kind;
        op->type     = type;
        op->status   = CKS_OK;
        op->mem_type = CKS_MEM_HOST;
    }
    return op;
}

/* ---- puts per version (what a seal tells the coordinator) -------------------- */

/* A put completed: count it for its version's seal, and add it to the
 * digest of what this client put (cks_msg_version_seal_t.digest); on a
 * cluster, count it for `srv`, the primary that answered it (the seal's
 * primaries). */
static void cks_cl_put_counted(cks_client_h c, const cks_msg_put_t *m, size_t srv)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9], be[8];
    size_t len = cks_vkey(key, m->job.ptr, m->job.len, m->version);
    cks_put_be64(be, m->size);
    uint64_t digest = cks_crc64(cks_crc64(0, m->key.ptr, m->key.len), be, sizeof(be));
    pthread_mutex_lock(&c->lock);
    cks_cl_puts_t *n = cks_hmap_get(c->put_counts, key, len);
    if (n == NULL && (n = calloc(1, sizeof(*n))) != NULL &&
        cks_hmap_put(c->put_counts, key, len, n) != CKS_OK) {
        free(n);
        n = NULL;
    }
    if (n != NULL && c->map != NULL && srv < c->nsrv && n->on == NULL) {
        n->on = calloc(c->nsrv, sizeof(*n->on)); /* NULL: the seal names none */
    }
    if (n != NULL) {
        n->count++;
        n->digest ^= digest;
        if (n->on != NULL && srv < c->nsrv) {
            n->on[srv]++;
        }
    } else {
        cks_warn("cannot count a put of version %llu", (unsigned long long)m->version);
    }
    pthread_mutex_unlock(&c->lock);
}

cks_cl_puts_t cks_cl_put_count(cks_client_h c, const char *job, uint64_t version, int take)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9];
    size_t job_len = strnlen(job, CKS_JOB_MAX_LEN);
    size_t len     = cks_vkey(key, job, job_len, version);
    cks_cl_puts_t out = {0, 0, NULL};
    pthread_mutex_lock(&c->lock);
    cks_cl_puts_t *n = take ? cks_hmap_del(c->put_counts, key, len)
                            : cks_hmap_get(c->put_counts, key, len);
    if (n != NULL) {
        out = *n;
        if (take) {
            free(n);
        } else {
            out.on = NULL; /* stays with the entry */
        }
    }
    pthread_mutex_unlock(&c->lock);
    return out;
}

static void cks_cl_puts_free(const void *key, size_t len, void *value, void *arg)
{
    cks_cl_puts_t *n = value;
    free(n->on);
    free(n);
}

/* ---- progress thread: ops and servers ---------------------------------------- */

static void cks_cl_dispatch(cks_client_h c, cks_op_t *op);

/* In flight, in deadline order (the timeout sweep stops at the first op not
 * due): most ops share the client's timeout and go last; an op with a longer
 * one of its own, or one that timed out while UCX still holds its buffer
 * (deadline UINT64_MAX), stays behind those due before it. */
static void cks_cl_fl_link(cks_client_h c, cks_op_t *op)
{
    cks_op_t *after = c->fl_tail;
    while (after != NULL && after->deadline_ns > op->deadline_ns) {
        after = after->prev;
    }
    op->prev = after;
    op->next = after != NULL ? after->next : c->fl_head;
    if (op->next != NULL) {
        op->next->prev = op;
    } else {
        c->fl_tail = op;
    }
    if (after != NULL) {
        after->next = op;
    } else {
        c->fl_head = op;
    }
}

static void cks_cl_fl_unlink(cks_client_h c, cks_op_t *op)
{
    if (op->prev != NULL) {
        op->prev->next = op->next;
    } else {
        c->fl_head = op->next;
    }
    if (op->next != NULL) {
        op->next->prev = op->prev;
    } else {
        c->fl_tail = op->prev;
    }
    op->next = op->prev = NULL;
}

/* The next server a CKS_TARGET_ANY op asks (op->tries already counts it):
 * the next one in map order, or, coord_first, the coordinator candidates in
 * order and then the other servers in map order. */
static size_t cks_cl_walk_next(cks_client_h c, const cks_op_t *op)
{
    if (!op->coord_first || c->map == NULL) {
        return (op->srv + 1) % c->nsrv;
    }
    if (op->tries < op->ngroup) {
        return op->group[op->tries];
    }
    size_t k = op->tries - op->ngroup;
    for (size_t pos = 0; pos < c->nsrv; pos++) {
        int cand = 0;
        for (unsigned i = 0; i < op->ngroup; i++) {
            cand |= op->group[i] == pos;
        }
        if (!cand && k-- == 0) {
            return pos;
        }
    }
    return 0;
}

/* Errors after which another server may answer the same question. */
static int cks_cl_retryable(cks_status_t st)
{
    return st == CKS_ERR_CONN_LOST || st == CKS_ERR_UNREACHABLE || st == CKS_ERR_TIMEOUT ||
           st == CKS_ERR_TRANSPORT || st == CKS_ERR_SHUTTING_DOWN;
}

/* Finish an op when nothing of UCX uses its buffers any more: run its
 * callback, or send it to the next server when another may answer. */
/* Send op again from the progress loop's next pass, not from inside the
 * failure being handled: that may be walking the lists a dispatch changes
 * (a server going down fails its ops one by one, and a retry sent at once
 * to another unreachable server could complete and free the next op of
 * that walk). 0 when the client is stopping: the op completes instead. */
static int cks_cl_requeue(cks_client_h c, cks_op_t *op)
{
    pthread_mutex_lock(&c->lock);
    int ok = !c->stop;
    if (ok) {
        op->next = NULL;
        if (c->sub_tail != NULL) {
            c->sub_tail->next = op;
        } else {
            c->sub_head = op;
        }
        c->sub_tail = op;
    }
    pthread_mutex_unlock(&c->lock);
    if (ok) {
        cks_tp_worker_signal(c->tp);
    }
    return ok;
}

/* Dispatch op again at resume_ns (the later list, in order). */
static void cks_cl_later_add(cks_client_h c, cks_op_t *op, uint64_t resume_ns)
{
    op->resume_ns = resume_ns;
    cks_op_t **at = &c->later;
    while (*at != NULL && (*at)->resume_ns <= op->resume_ns) {
        at = &(*at)->next;
    }
    op->next = *at;
    op->prev = NULL;
    *at      = op;
}

/* Every server a CKS_TARGET_ANY op asked was busy catching up or could not
 * be reached, and one at least was busy: servers that restarted together
 * answer once they have caught up with each other (seconds), so the walk
 * starts again after a pause, until the op's timeout. 0 when the time is up. */
static int cks_cl_busy_again(cks_client_h c, cks_op_t *op)
{
    uint64_t now = cks_time_ns();
    if (op->busy_until_ns == 0) {
        op->busy_until_ns =
            now + (uint64_t)(op->timeout_ms > 0 ? op->timeout_ms : c->timeout_ms) * 1000000ull;
    }
    if (now + CKS_CL_BUSY_PAUSE_NS >= op->busy_until_ns) {
        return 0;
    }
    cks_debug("%s: every server is catching up: asking again in %llu ms",
              cks_msg_name(op->type), (unsigned long long)(CKS_CL_BUSY_PAUSE_NS / 1000000ull));
    op->tries         = 0;
    op->srv           = op->coord_first && c->map != NULL ? op->group[0] : 0;
    op->status        = CKS_OK;
    op->replied       = 0;
    op->cand_notfound = 0;
    op->cand_unsure   = 0;
    op->saw_busy      = 0;
    cks_cl_later_add(c, op, now + CKS_CL_BUSY_PAUSE_NS);
    return 1;
}

/* Dispatch the ops on the later list that are due; the ms until the next
 * one is (-1: none). */
static int cks_cl_later_run(cks_client_h c)
{
    uint64_t now = cks_time_ns();
    while (c->later != NULL && c->later->resume_ns <= now) {
        cks_op_t *op = c->later;
        c->later     = op->next;
        op->next     = NULL;
        cks_cl_dispatch(c, op);
    }
    if (c->later == NULL) {
        return -1;
    }
    return (int)CKS_MIN((c->later->resume_ns - now) / 1000000 + 1, 1000);
}

static void cks_cl_op_try_complete(cks_client_h c, cks_op_t *op)
{
    if (op->sending || op->receiving || !op->replied) {
        return;
    }
    if (op->req_id != 0) {
        cks_cl_srv_t *sv = &c->srv[op->srv];
        cks_hmap_del(c->inflight, &op->req_id, sizeof(op->req_id));
        cks_cl_fl_unlink(c, op);
        op->req_id = 0;
        sv->inflight--;
        if (sv->state == CKS_SRV_UP && sv->wait_head != NULL) { /* the window moves */
            cks_op_t *next = sv->wait_head;
            sv->wait_head  = next->next;
            if (sv->wait_head == NULL) {
                sv->wait_tail = NULL;
            } else {
                sv->wait_head->prev = NULL;
            }
            next->queued = 0;
            next->next = next->prev = NULL;
            cks_cl_dispatch(c, next);
        }
    }
    free(op->page);
    op->page = NULL;
    if (op->rma && op->status == CKS_ERR_UNSUPPORTED && !c->stop) {
        /* a server that cannot use our memory (other UCX transports): send
         * the bytes to it from now on */
        cks_info("server %s: no one-copy transfers; sending the bytes", c->srv[op->srv].addr);
        c->srv[op->srv].no_rma = 1;
        op->rma     = 0;
        op->status  = CKS_OK;
        op->replied = 0;
        cks_cl_dispatch(c, op);
        return;
    }
    /* The version's coordinator candidates are asked first (coord_first):
     * the one that coordinated it holds its record, so their "no such
     * version" is the truth; any other server may have been down when a
     * manifest was sent, so its "no such ..." only counts if no other
     * server knows better. */
    int notfound = op->status == CKS_ERR_NO_SUCH_VERSION || op->status == CKS_ERR_NO_SUCH_KEY ||
                   op->status == CKS_ERR_NO_SUCH_JOB;
    int candidate = op->coord_first && op->tries < op->ngroup;
    if (op->target == CKS_TARGET_ANY && notfound) {
        op->notfound = op->status;
        op->cand_notfound |= candidate;
    }
    /* A server that has not caught up with the others since it started
     * answers lists and stats BUSY: another server answers instead. */
    int busy = op->status == CKS_ERR_BUSY && c->map != NULL;
    if (op->target == CKS_TARGET_ANY && candidate && (busy || cks_cl_retryable(op->status))) {
        op->cand_unsure = 1; /* a candidate that could not say: ask the others too */
    }
    op->saw_busy |= op->target == CKS_TARGET_ANY && busy;
    if (op->target == CKS_TARGET_ANY &&
        (busy || cks_cl_retryable(op->status) || notfound) &&
        !(op->coord_first && op->cand_notfound && !op->cand_unsure &&
          op->tries + 1 >= op->ngroup) &&
        op->tries + 1 < c->nsrv && !c->stop) {
        op->tries++;
        op->srv     = cks_cl_walk_next(c, op);
        op->status  = CKS_OK;
        op->replied = 0;
        cks_cl_dispatch(c, op);
        return;
    }
    if (op->target == CKS_TARGET_COORD && op->tries + 1 < op->ngroup && !c->stop) {
        /* Coordinator failover: the candidate asked cannot be reached, or
         * answers that another server coordinates the version; or, for a
         * finish, abort or delete marker, the first candidate has no record
         * of the version (a later one may have begun it while the first
         * could not be reached) - its answer stands if no later one has it.
         * Any other answer of a server's own is final: "not open" (it has
         * the version's record: the version ended), a version's deadline
         * (TIMEOUT), an abort's reason. */
        int unreach = cks_cl_retryable(op->status) && !op->answered;
        int notopen = op->tries == 0 && op->answered &&
                      (op->status == CKS_ERR_NO_SUCH_VERSION ||
                       op->status == CKS_ERR_NO_SUCH_JOB) &&
                      (op->type == CKS_MSG_VERSION_SEAL || op->type == CKS_MSG_VERSION_ABORT ||
                       op->type == CKS_MSG_OBJECT_DELETE);
        if (unreach || op->status == CKS_ERR_NOT_COORDINATOR || notopen) {
            if (notopen) {
                op->notfound = op->status;
            }
            if (unreach && op->tries == 0) {
                op->unreach = op->status;
            }
            if (unreach && op->status == CKS_ERR_TIMEOUT && op->slow == 0) {
                op->slow = (unsigned)op->tries + 1; /* busy, maybe: see below */
            }
            cks_log(unreach && op->tries == 0 ? CKS_LOG_WARN : CKS_LOG_INFO,
                    "%s: server %s:%u %s; asking the version's next coordinator candidate",
                    cks_msg_name(op->type), c->srv[op->srv].addr, c->srv[op->srv].port,
                    cks_status_string(op->status));
            cks_status_t failed = op->status;
            op->tries++;
            op->srv      = op->group[op->tries];
            op->status   = CKS_OK;
            op->replied  = 0;
            op->answered = 0;
            if (cks_cl_requeue(c, op)) {
                return;
            }
            op->status = failed; /* the client is stopping */
        }
    }
    if (op->target == CKS_TARGET_COORD && op->type == CKS_MSG_VERSION_SEAL && op->slow > 0 &&
        (op->status == CKS_ERR_NOT_COORDINATOR ||
         (op->status == CKS_ERR_VERSION_NOT_OPEN && op->answered) ||
         (cks_cl_retryable(op->status) && !op->answered)) &&
        op->resends < CKS_CL_SEAL_RESENDS && !c->stop) {
        /* A candidate did not answer the seal in time - the coordinator, or
         * the next one when the coordinator is gone - and no later one
         * took the version: they say that one coordinates it (it answers
         * them), or that the version ended meanwhile, or they cannot be
         * reached either. It may be busy, not gone - a commit waits for the
         * members that must take the chunks and the manifest, up to their
         * timeout, which may be longer than this client's. The seal goes
         * to it again, marked as sent again: it waits with the others, or
         * is told the outcome (a commit, which had this rank's first seal,
         * or the abort and its reason). */
        size_t slow = op->slow - 1;
        cks_log(CKS_LOG_INFO,
                "VERSION_SEAL of version %llu: candidate %s:%u did not answer in time and no "
                "later one took the version: sending the seal to it again",
                (unsigned long long)op->body.m_VERSION_SEAL.version,
                c->srv[op->group[slow]].addr, c->srv[op->group[slow]].port);
        op->resends++;
        op->wire_flags |= CKS_WIRE_F_RESENT;
        op->tries    = slow;
        op->srv      = op->group[slow];
        op->slow     = 0;
        op->status   = CKS_OK;
        op->replied  = 0;
        op->answered = 0;
        if (cks_cl_requeue(c, op)) {
            return;
        }
        op->status = CKS_ERR_NOT_COORDINATOR; /* the client is stopping */
    }
    if (op->target == CKS_TARGET_COORD && op->type == CKS_MSG_VERSION_BEGIN &&
        op->status == CKS_ERR_NO_QUORUM && op->answered &&
        op->quorum_tries < CKS_CL_QUORUM_TRIES && !c->stop) {
        /* The candidate could not gather a majority's grants: the servers it
         * could not reach in time may answer a new connection (one whose
         * endpoint went stale in a partition, or that was busy): the begin
         * is asked once more, from the first candidate, after a pause. */
        cks_log(CKS_LOG_INFO, "VERSION_BEGIN of version %llu: no majority granted it; asking "
                              "again in %llu ms",
                (unsigned long long)op->body.m_VERSION_BEGIN.version,
                (unsigned long long)(CKS_CL_QUORUM_PAUSE_NS / 1000000ull));
        op->quorum_tries++;
        op->tries    = 0;
        op->srv      = op->group[0];
        op->status   = CKS_OK;
        op->replied  = 0;
        op->answered = 0;
        op->unreach  = CKS_OK;
        op->notfound = CKS_OK;
        cks_cl_later_add(c, op, cks_time_ns() + CKS_CL_QUORUM_PAUSE_NS);
        return;
    }
    if (op->target == CKS_TARGET_COORD &&
        ((cks_cl_retryable(op->status) && !op->answered) ||
         op->status == CKS_ERR_NOT_COORDINATOR)) {
        /* no candidate took it: the first one's answer, or why it could not
         * be reached (the others named it as the coordinator) */
        uint64_t version = op->type == CKS_MSG_VERSION_SEAL ? op->body.m_VERSION_SEAL.version
                         : op->type == CKS_MSG_OBJECT_DELETE
                             ? op->body.m_OBJECT_DELETE.version
                         : op->type == CKS_MSG_VERSION_BEGIN ? op->body.m_VERSION_BEGIN.version
                                                             : op->body.m_VERSION_ABORT.version;
        if (op->notfound != CKS_OK) {
            cks_cl_set_errorf(c, op->notfound, "%s of version %llu: %s (no coordinator "
                              "candidate has it open)", cks_msg_name(op->type),
                              (unsigned long long)version, cks_status_string(op->notfound));
            op->status = op->notfound;
        } else if (op->unreach != CKS_OK && op->tries > 0) {
            cks_cl_set_errorf(c, op->unreach, "%s of version %llu: its coordinator %s:%u "
                              "did not answer (%s), and no other candidate coordinates it",
                              cks_msg_name(op->type), (unsigned long long)version,
                              c->srv[op->group[0]].addr, c->srv[op->group[0]].port,
                              cks_status_string(op->unreach));
            op->status = op->unreach;
        }
    }
    if (op->target == CKS_TARGET_GROUP && cks_cl_retryable(op->status) &&
        op->tries + 1 < op->ngroup) {
        /* the primary is unreachable: the next member of the group stores
         * the object (it keeps its own chunk, and the primary's is missing
         * until repaired) */
        cks_status_t failed = op->status;
        cks_log(op->tries == 0 ? CKS_LOG_WARN : CKS_LOG_INFO,
                "put of '%.*s': server %s:%u %s; trying the group's next member",
                (int)op->body.m_PUT.key.len, op->body.m_PUT.key.ptr, c->srv[op->srv].addr,
                c->srv[op->srv].port, cks_status_string(op->status));
        op->tries++;
        op->srv     = op->group[op->tries];
        op->status  = CKS_OK;
        op->replied = 0;
        if (cks_cl_requeue(c, op)) {
            return;
        }
        op->status = failed; /* the client is stopping: the put fails */
    }
    if (op->target == CKS_TARGET_GROUP && op->tries > 0 && cks_cl_retryable(op->status)) {
        /* more than m members of the object's group are unreachable */
        char text[CKS_MSG_MAX_LEN];
        int n = snprintf(text, sizeof(text), "put of '%.*s': %zu members of its group "
                         "unreachable (more than the m = %u it can lose):",
                         (int)op->body.m_PUT.key.len, op->body.m_PUT.key.ptr, op->tries,
                         op->body.m_PUT.m);
        for (size_t i = 0; i < op->tries && n > 0 && (size_t)n < sizeof(text); i++) {
            const cks_cl_srv_t *g = &c->srv[op->group[i]];
            n += snprintf(text + n, sizeof(text) - (size_t)n, " %s:%u", g->addr, g->port);
        }
        cks_cl_set_error(c, op->status, text, strnlen(text, sizeof(text)));
    }
    if (op->target == CKS_TARGET_ANY && op->saw_busy &&
        (busy || cks_cl_retryable(op->status)) && op->notfound == CKS_OK && !c->stop &&
        cks_cl_busy_again(c, op)) {
        return; /* every server is catching up: the walk starts again after a pause */
    }
    if (op->target == CKS_TARGET_ANY && op->notfound != CKS_OK &&
        (cks_cl_retryable(op->status) || op->status == CKS_ERR_BUSY)) {
        /* the best answer any server gave (one still catching up knows less) */
        op->status = op->notfound;
    }
    if (op->kind == CKS_OP_PUT && op->status == CKS_OK) {
        cks_cl_put_counted(c, &op->body.m_PUT, op->srv);
    }
    op->cb(op->arg, op->status);
    free(op);
}

/* Fail an op: it completes as soon as UCX lets go of its buffers. */
static void cks_cl_op_fail(cks_client_h c, cks_op_t *op, cks_status_t status)
{
    if (op->status == CKS_OK) {
        op->status = status;
    }
    if (op->sending && op->abandon_ns == 0) {
        op->abandon_ns = cks_time_ns() + CKS_CL_ABANDON_NS;
    }
    op->replied = 1;
    cks_cl_op_try_complete(c, op);
}

static void cks_cl_send_done(void *arg, cks_status_t status)
{
    cks_op_t *op = arg;
    op->sending  = 0;
    if (status != CKS_OK && op->status == CKS_OK) {
        op->status = status;
    }
    cks_cl_op_try_complete(op->client, op);
}

/* Does the op's buffer lie in memory from cks_mem_alloc(), and is its server
 * on this host? Then describe the buffer instead of sending the bytes. */
static int cks_cl_rma_describe(cks_client_h c, cks_op_t *op, cks_tp_conn_h conn)
{
    const void *ptr = op->kind == CKS_OP_PUT ? op->payload : op->buf;
    size_t len      = op->kind == CKS_OP_PUT ? op->payload_len : op->buf_size;
    cks_status_t status = CKS_ERR_INVALID_PARAM;

    if (len == 0 || op->mem_type != CKS_MEM_HOST || !cks_tp_conn_local(conn) ||
        c->srv[op->srv].no_rma ||
        (op->kind != CKS_OP_PUT && op->kind != CKS_OP_GET && op->kind != CKS_OP_CHUNK_GET &&
         op->kind != CKS_OP_MEM_MAP)) {
        return 0;
    }
    const cks_cl_mem_t *scratch = cks_cl_scratch_mem(c); /* this thread's */
    if (scratch != NULL && cks_tp_mem_holds(scratch->mem, ptr, len)) {
        return cks_tp_mem_describe(scratch->mem, ptr, len, op->rma_desc, sizeof(op->rma_desc),
                                   &op->rma_len) == CKS_OK;
    }
    pthread_mutex_lock(&c->lock);
    for (cks_cl_mem_t *m = c->mems; m != NULL; m = m->next) {
        if (cks_tp_mem_holds(m->mem, ptr, len)) {
            status = cks_tp_mem_describe(m->mem, ptr, len, op->rma_desc, sizeof(op->rma_desc),
                                         &op->rma_len);
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return status == CKS_OK;
}

/* Send an op to its server, whose connection exists. */
static void cks_cl_send_op(cks_client_h c, cks_op_t *op)
{
    cks_cl_srv_t *sv = &c->srv[op->srv];
    cks_status_t status;

    /* a random id: a reply is taken only from this op's connection (see
     * cks_cl_reply_op()), and no one on another connection can guess it */
    do {
        op->req_id = cks_tp_random_id();
    } while (cks_hmap_get(c->inflight, &op->req_id, sizeof(op->req_id)) != NULL);
    op->deadline_ns = cks_time_ns() +
                      (uint64_t)(op->timeout_ms > 0 ? op->timeout_ms : c->timeout_ms) *
                          1000000ull;
    cks_cl_fl_link(c, op); /* in flight from now on, in deadline order */
    if (cks_hmap_put(c->inflight, &op->req_id, sizeof(op->req_id), op) != CKS_OK) {
        cks_cl_fl_unlink(c, op);
        op->req_id = 0;
        cks_cl_op_fail(c, op, CKS_ERR_NO_MEMORY);
        return;
    }
    sv->inflight++;
    op->rma = cks_cl_rma_describe(c, op, sv->conn);
    if (op->kind == CKS_OP_MEM_MAP && !op->rma) {
        /* a server on another host (or one that refused our memory before)
         * has nothing to map */
        cks_cl_op_fail(c, op, CKS_ERR_UNSUPPORTED);
        return;
    }
    if (op->rma) {
        /* the descriptor goes as the payload; it lives in the op */
        op->sending = 1;
        status = cks_tp_send(sv->conn, op->type, CKS_WIRE_F_RMA | op->wire_flags, op->req_id,
                             &op->body,
                             op->rma_desc, op->rma_len, CKS_MEM_HOST, NULL, cks_cl_send_done,
                             op);
        if (status != CKS_INPROGRESS) {
            op->sending = 0;
            cks_cl_op_fail(c, op, status);
        }
        return;
    }
    if (op->kind == CKS_OP_PUT && op->payload_len > 0) {
        op->sending = 1;
        if (op->stage != NULL) { /* staged device memory: bytes as they are copied */
            status = cks_tp_send_stream(sv->conn, op->type, 0, op->req_id, &op->body,
                                        cks_cl_stage_source(op->stage), cks_cl_send_done, op);
        } else {
            status = cks_tp_send(sv->conn, op->type, 0, op->req_id, &op->body, op->payload,
                                 op->payload_len, op->mem_type, NULL, cks_cl_send_done, op);
        }
        if (status != CKS_INPROGRESS) {
            op->sending = 0;
            cks_cl_op_fail(c, op, status);
        }
        return;
    }
    status = cks_tp_send(sv->conn, op->type, op->wire_flags, op->req_id, &op->body, NULL, 0,
                         CKS_MEM_HOST, NULL, NULL, NULL);
    if (status != CKS_INPROGRESS) {
        cks_cl_op_fail(c, op, status);
    }
}

static void cks_cl_srv_wait(cks_cl_srv_t *sv, cks_op_t *op)
{
    op->queued = 1;
    op->next   = NULL;
    op->prev   = sv->wait_tail;
    if (sv->wait_tail != NULL) {
        sv->wait_tail->next = op;
    } else {
        sv->wait_head = op;
    }
    sv->wait_tail = op;
}

/* The server's connection came up (status OK) or could not: run or fail
 * what waited for it. */
static void cks_cl_srv_settle(cks_client_h c, size_t pos, cks_status_t status)
{
    cks_cl_srv_t *sv = &c->srv[pos];
    cks_op_t *op     = sv->wait_head;
    sv->wait_head = sv->wait_tail = NULL;
    while (op != NULL) {
        cks_op_t *next = op->next;
        op->queued     = 0;
        op->next = op->prev = NULL;
        if (status == CKS_OK) {
            cks_cl_dispatch(c, op);
        } else {
            cks_cl_op_fail(c, op, status);
        }
        op = next;
    }
}

/* Drop a server's connection after a failure; its ops fail (and may move on). */
static void cks_cl_srv_down(cks_client_h c, size_t pos, cks_status_t status)
{
    cks_cl_srv_t *sv = &c->srv[pos];
    if (sv->conn == NULL) {
        return;
    }
    /* warn when a working server goes; retries of a dead one are routine */
    cks_log(status == CKS_ERR_CANCELED     ? CKS_LOG_DEBUG
            : sv->state == CKS_SRV_UP      ? CKS_LOG_WARN
                                           : CKS_LOG_INFO,
            "server %s:%u: %s", sv->addr, sv->port, cks_status_string(status));
    cks_tp_conn_h conn = sv->conn;
    sv->conn           = NULL;
    sv->state          = CKS_SRV_IDLE;
    sv->last_error     = status;
    sv->failed_ns      = cks_time_ns();
    /* fail its ops with this status first: closing makes UCX complete their
     * transfers at once, as "canceled", which would be the status they keep */
    for (cks_op_t *op = c->fl_head; op != NULL;) {
        cks_op_t *next = op->next;
        if (op->srv == pos && !op->replied) {
            cks_cl_op_fail(c, op, status);
        }
        op = next;
    }
    cks_tp_conn_close(conn); /* UCX fails what is still in flight on it */
    cks_cl_srv_settle(c, pos, status);
    cks_tp_conn_put(conn);
}

static void cks_cl_noop_done(void *arg, cks_status_t status)
{
}

/* A MEM_MAP op for region m on server pos (NULL: no memory). */
static cks_op_t *cks_cl_mem_map_op(const cks_cl_mem_t *m, size_t pos)
{
    cks_op_t *op = cks_op_new(CKS_OP_MEM_MAP, CKS_MSG_MEM_MAP);
    if (op != NULL) {
        op->body.m_MEM_MAP.length = m->len;
        op->buf                   = m->base;
        op->buf_size              = m->len;
        op->srv                   = pos;
        op->target                = CKS_TARGET_FIXED;
    }
    return op;
}

/* A server came up: tell it of every region we have, so that a server on
 * this host maps and faults them in now (a restarted one too), not during
 * the first transfers. Nobody waits for these; a failure only means the
 * first transfers fault the pages in. Progress thread. */
static void cks_cl_mem_announce(cks_client_h c, size_t pos)
{
    cks_op_t *ops = NULL;

    if (!cks_tp_conn_local(c->srv[pos].conn) || c->srv[pos].no_rma) {
        return;
    }
    pthread_mutex_lock(&c->lock); /* the list; ops are sent outside (describe locks) */
    for (cks_cl_mem_t *m = c->mems; m != NULL; m = m->next) {
        cks_op_t *op = cks_cl_mem_map_op(m, pos);
        if (op != NULL) {
            op->next = ops;
            ops      = op;
        }
    }
    pthread_mutex_unlock(&c->lock);
    while (ops != NULL) {
        cks_op_t *next = ops->next;
        ops->next      = NULL;
        cks_cl_start(c, ops, cks_cl_noop_done, NULL);
        ops = next;
    }
    if (cks_cl_scratch_mem(c) != NULL) {
        cks_op_t *op = cks_cl_mem_map_op(cks_cl_scratch_mem(c), pos);
        if (op != NULL) {
            cks_cl_start(c, op, cks_cl_noop_done, NULL);
        }
    }
}

void cks_cl_mem_announce_all(cks_client_h c, const cks_cl_mem_t *m)
{
    for (size_t pos = 0; pos < c->nsrv; pos++) {
        cks_op_t *op;
        if (c->srv[pos].state != CKS_SRV_UP || !cks_tp_conn_local(c->srv[pos].conn) ||
            c->srv[pos].no_rma || (op = cks_cl_mem_map_op(m, pos)) == NULL) {
            continue;
        }
        cks_cl_start(c, op, cks_cl_noop_done, NULL);
    }
}

static void cks_cl_hello_done(void *arg, cks_status_t status)
{
    cks_cl_srv_t *sv = arg;
    cks_client_h c   = sv->client;
    size_t pos       = (size_t)(sv - c->srv);
    if (status == CKS_OK && sv->conn != NULL) {
        sv->state = CKS_SRV_UP;
        cks_cl_srv_settle(c, pos, CKS_OK);
        if (sv->state == CKS_SRV_UP) {
            cks_cl_mem_announce(c, pos);
        }
    } else if (sv->conn != NULL) {
        cks_cl_srv_down(c, pos, status == CKS_ERR_CONN_LOST ? CKS_ERR_UNREACHABLE : status);
    }
}

/* Connect to a server and say HELLO, which moves the connection to a
 * worker-address endpoint; ops wait on the server until it answers. With a
 * secret, HELLO carries our challenge and its reply the server's; AUTH
 * (cks_cl_auth()) then carries our proof and address, and its reply the
 * server's proof and address (cks_cl_auth_reply()). */
static void cks_cl_srv_connect(cks_client_h c, size_t pos)
{
    cks_cl_srv_t *sv = &c->srv[pos];
    const void *addr;
    size_t addr_len;
    cks_op_t *op;
    cks_status_t status;

    status = cks_tp_conn_connect(c->tp, sv->addr, sv->port, &sv->conn);
    if (status != CKS_OK) {
        sv->conn       = NULL;
        sv->last_error = status;
        sv->failed_ns  = cks_time_ns();
        cks_cl_srv_settle(c, pos, CKS_ERR_UNREACHABLE);
        return;
    }
    cks_tp_conn_set_user(sv->conn, sv);
    sv->state = CKS_SRV_CONNECTING;
    op        = cks_op_new(CKS_OP_HELLO, CKS_MSG_HELLO);
    if (op == NULL || (c->has_secret && cks_tp_nonce(sv->nonce) != CKS_OK)) {
        free(op);
        cks_cl_srv_down(c, pos, CKS_ERR_NO_MEMORY);
        return;
    }
    cks_tp_worker_address(c->tp, &addr, &addr_len);
    op->body.m_HELLO.name = cks_wire_cstr(c->name);
    if (c->has_secret) { /* our address only after the server proved the secret */
        op->body.m_HELLO.addr  = cks_wire_cstr(NULL);
        op->body.m_HELLO.nonce = (cks_wire_str_t){(const char *)sv->nonce, CKS_WIRE_NONCE_LEN};
        op->body.m_HELLO.job   = cks_wire_cstr(c->secret_job);
    } else {
        op->body.m_HELLO.addr  = (cks_wire_str_t){addr, (uint32_t)addr_len};
        op->body.m_HELLO.nonce = cks_wire_cstr(NULL);
        op->body.m_HELLO.job   = cks_wire_cstr(NULL);
    }
    op->client = c;
    op->srv    = pos;
    op->cb     = cks_cl_hello_done;
    op->arg    = sv;
    cks_cl_send_op(c, op);
}

/* The server sent its challenge (HELLO_REPLY): answer it with AUTH, which
 * carries our proof and address; the handshake's outcome moves to the AUTH
 * op, whose reply must carry the server's proof (cks_cl_auth_reply()). */
static cks_status_t cks_cl_auth(cks_client_h c, cks_op_t *hello,
                                const cks_msg_hello_reply_t *r)
{
    cks_cl_srv_t *sv = &c->srv[hello->srv];
    const void *addr;
    size_t addr_len;
    cks_op_t *op;

    if (r->nonce.len != CKS_WIRE_NONCE_LEN) {
        cks_error("server %s:%u does not ask for the cluster secret", sv->addr, sv->port);
        cks_cl_set_errorf(c, CKS_ERR_AUTH, "the server does not know the cluster secret");
        return CKS_ERR_AUTH;
    }
    memcpy(sv->snonce, r->nonce.ptr, CKS_WIRE_NONCE_LEN);
    op = cks_op_new(CKS_OP_AUTH, CKS_MSG_AUTH);
    if (op == NULL || cks_tp_proof(&c->secret, CKS_TP_LABEL_CLIENT, sv->snonce,
                                   CKS_WIRE_NONCE_LEN, sv->nonce, CKS_WIRE_NONCE_LEN,
                                   sv->proof) != CKS_OK) {
        free(op);
        return CKS_ERR_NO_MEMORY;
    }
    cks_tp_worker_address(c->tp, &addr, &addr_len);
    op->body.m_AUTH.proof = (cks_wire_str_t){(const char *)sv->proof, CKS_WIRE_NONCE_LEN};
    op->body.m_AUTH.addr  = (cks_wire_str_t){addr, (uint32_t)addr_len};
    op->client            = c;
    op->srv               = hello->srv;
    op->cb                = hello->cb;
    op->arg               = hello->arg;
    hello->cb             = cks_cl_noop_done;
    cks_cl_send_op(c, op);
    return CKS_OK;
}

/* AUTH_REPLY: the server proves the secret; only then its address is used. */
static cks_status_t cks_cl_auth_reply(cks_client_h c, cks_op_t *op, cks_tp_conn_h conn,
                                      const cks_msg_auth_reply_t *r)
{
    cks_cl_srv_t *sv = &c->srv[op->srv];
    if (cks_tp_proof_check(&c->secret, CKS_TP_LABEL_SERVER, sv->nonce, CKS_WIRE_NONCE_LEN,
                           sv->snonce, CKS_WIRE_NONCE_LEN, &r->proof) != CKS_OK) {
        cks_error("server %s:%u did not prove the cluster secret", sv->addr, sv->port);
        cks_cl_set_errorf(c, CKS_ERR_AUTH, "the server did not prove the cluster secret");
        return CKS_ERR_AUTH;
    }
    return r->addr.len > 0 ? cks_tp_conn_upgrade(conn, r->addr.ptr, r->addr.len) : CKS_OK;
}

/* Another server may take op when the one it is for fails it: a put's next
 * group member, a version's next coordinator candidate (not for a seal sent
 * again to its coordinator), or any server for a question any may answer.
 * Not a chunk read: the read itself asks a silent server's chunks last
 * (read.c), and must be able to ask it when the others are not enough. */
static int cks_cl_has_alternative(cks_client_h c, const cks_op_t *op)
{
    switch (op->target) {
        case CKS_TARGET_GROUP:
            return op->tries + 1 < op->ngroup;
        case CKS_TARGET_COORD:
            return op->tries + 1 < op->ngroup && op->resends == 0;
        case CKS_TARGET_ANY:
            return op->tries + 1 < c->nsrv;
        default:
            return 0;
    }
}

/* Route an op (progress thread): send it, or wait for its server's
 * connection, starting one when there is none. */
static void cks_cl_dispatch(cks_client_h c, cks_op_t *op)
{
    cks_cl_srv_t *sv = &c->srv[op->srv];

    uint64_t now = cks_time_ns();
    if (sv->silent_ns != 0 && op->kind != CKS_OP_HELLO && op->kind != CKS_OP_AUTH &&
        (sv->state != CKS_SRV_UP || now - sv->silent_ns < CKS_CL_SILENT_NS) &&
        cks_cl_has_alternative(c, op)) {
        /* it let a request time out: this one goes elsewhere at once; a new
         * handshake asks it now and then (its answer ends this) */
        if (sv->state == CKS_SRV_IDLE && now - sv->probe_ns >= CKS_CL_PROBE_NS) {
            sv->probe_ns = now;
            cks_cl_srv_connect(c, op->srv);
        }
        cks_log(CKS_LOG_DEBUG, "%s to %s:%u: skipped (it let a request time out %llu ms ago)",
                cks_msg_name(op->type), sv->addr, sv->port,
                (unsigned long long)((now - sv->silent_ns) / 1000000ull));
        cks_cl_op_fail(c, op, CKS_ERR_TIMEOUT);
        return;
    }

    if (op->kind == CKS_OP_MEM_MAP && sv->state != CKS_SRV_UP) {
        /* no connect for it: when the server comes up, it is told of every
         * region then (cks_cl_mem_announce()) */
        cks_cl_op_fail(c, op, CKS_ERR_UNREACHABLE);
        return;
    }
    if (sv->state == CKS_SRV_UP) {
        if (op->kind == CKS_OP_HELLO && op->out == NULL) { /* a connect request: it is up */
            op->replied = 1;
            cks_cl_op_try_complete(c, op);
        } else if (sv->inflight >= CKS_CL_WINDOW) {
            /* back-pressure: a server serves a bounded number of our requests
             * at once; the rest wait here, in order */
            cks_cl_srv_wait(sv, op);
        } else {
            cks_cl_send_op(c, op);
        }
        return;
    }
    /* A chunk read can be decoded around: it does not wait for a server that
     * failed before to come back; the reconnect goes on in the background. */
    int degradable = op->kind == CKS_OP_CHUNK_GET && sv->failed_ns != 0 && !op->patient;
    if (sv->state == CKS_SRV_IDLE) {
        /* a read that can be decoded around does not ask a server that just
         * failed again at once; anything else tries to reconnect (a restarted
         * server is back at once) */
        if (degradable && cks_time_ns() - sv->failed_ns < 1000000000ull) {
            cks_cl_op_fail(c, op, sv->last_error == CKS_ERR_CONN_LOST ? CKS_ERR_CONN_LOST
                                                                      : CKS_ERR_UNREACHABLE);
            return;
        }
        if (degradable) {
            cks_cl_srv_connect(c, op->srv);
            cks_cl_op_fail(c, op, CKS_ERR_UNREACHABLE);
            return;
        }
        cks_cl_srv_wait(sv, op);
        cks_cl_srv_connect(c, op->srv);
        return;
    }
    if (degradable) {
        cks_cl_op_fail(c, op, CKS_ERR_UNREACHABLE);
        return;
    }
    cks_cl_srv_wait(sv, op);
}

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
 * connection, which must have authenticated unless the op is a step of the
 * handshake. NULL for anything else: a reply on another server's connection,
 * on an endpoint UCX made by itself, or from a server that has not proved
 * the secret yet must not complete an op (#15 item 8). */
static cks_op_t *cks_cl_reply_op(cks_client_h c, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr)
{
    cks_op_t *op     = cks_hmap_get(c->inflight, &hdr->req_id, sizeof(hdr->req_id));
    cks_cl_srv_t *sv = cks_tp_conn_user(conn);
    if (op != NULL && !c->has_secret && sv == NULL && cks_tp_conn_implicit(conn)) {
        /* without a secret, a server may answer on a data endpoint UCX could
         * not pair with ours yet; nothing proves who anyone is there anyway */
        sv = &c->srv[op->srv];
        conn = sv->conn;
    }
    if (op == NULL || sv != &c->srv[op->srv] || sv->conn != conn) {
        return NULL;
    }
    if (sv->state != CKS_SRV_UP && op->kind != CKS_OP_HELLO && op->kind != CKS_OP_AUTH) {
        return NULL;
    }
    sv->silent_ns = 0; /* it answers */
    return op;
}

static void cks_cl_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                          const cks_msg_any_t *b, cks_tp_data_t *data)
{
    cks_client_h c = arg;
    cks_op_t *op   = cks_cl_reply_op(c, conn, hdr);

    if (op == NULL || op->replied) {
        cks_debug("reply %s for unknown request %llu dropped", cks_msg_name(hdr->type),
                  (unsigned long long)hdr->req_id);
        return;
    }
    if (hdr->type == CKS_MSG_STATUS_REPLY) {
        /* any request may be answered by a plain status (errors, STORED) */
        const cks_msg_status_t *m = &b->m_STATUS_REPLY;
        if (m->status != CKS_OK) {
            cks_cl_reply_error(c, op, m->status, &m->msg);
            return;
        }
        if (op->kind != CKS_OP_STATUS && op->kind != CKS_OP_PUT &&
            op->kind != CKS_OP_MEM_MAP) {
            cks_cl_op_fail(c, op, CKS_ERR_BAD_MESSAGE);
            return;
        }
        op->replied = 1;
        cks_cl_op_try_complete(c, op);
        return;
    }
    op->replied = 1;
    switch (op->kind) {
        case CKS_OP_HELLO:
            if (hdr->type != CKS_MSG_HELLO_REPLY || data != NULL) {
                break;
            }
            if (b->m_HELLO_REPLY.status != CKS_OK) {
                cks_cl_reply_error(c, op, b->m_HELLO_REPLY.status, &b->m_HELLO_REPLY.msg);
                return;
            }
            if (op->out != NULL) { /* a usage query, not a handshake */
                uint64_t *usage = op->out;
                usage[0]        = b->m_HELLO_REPLY.arena_used;
                usage[1]        = b->m_HELLO_REPLY.arena_size;
                usage[2]        = b->m_HELLO_REPLY.enc_bytes;
                usage[3]        = b->m_HELLO_REPLY.enc_ns;
                usage[4]        = b->m_HELLO_REPLY.enc_job_ns;
            } else if (c->has_secret) {
                cks_status_t status = cks_cl_auth(c, op, &b->m_HELLO_REPLY);
                if (status != CKS_OK) {
                    cks_cl_op_fail(c, op, status);
                    return;
                }
            } else if (b->m_HELLO_REPLY.nonce.len > 0) {
                /* the server wants a secret: it sent a challenge, no address */
                cks_cl_set_errorf(c, CKS_ERR_AUTH, "the server requires a cluster secret");
                cks_cl_op_fail(c, op, CKS_ERR_AUTH);
                return;
            } else if (b->m_HELLO_REPLY.addr.len > 0) {
                /* move to an endpoint made from the server's worker address */
                cks_status_t status = cks_tp_conn_upgrade(conn, b->m_HELLO_REPLY.addr.ptr,
                                                          b->m_HELLO_REPLY.addr.len);
                if (status != CKS_OK) {
                    cks_cl_op_fail(c, op, status);
                    return;
                }
            }
            cks_cl_op_try_complete(c, op);
            return;
        case CKS_OP_AUTH:
            if (hdr->type != CKS_MSG_AUTH_REPLY || data != NULL) {
                break;
            }
            if (b->m_AUTH_REPLY.status != CKS_OK) {
                cks_cl_reply_error(c, op, b->m_AUTH_REPLY.status, &b->m_AUTH_REPLY.msg);
                return;
            }
            if (c->has_secret) {
                cks_status_t status = cks_cl_auth_reply(c, op, conn, &b->m_AUTH_REPLY);
                if (status != CKS_OK) {
                    cks_cl_op_fail(c, op, status);
                    return;
                }
            }
            cks_cl_op_try_complete(c, op);
            return;
        case CKS_OP_SEAL:
            if (hdr->type != CKS_MSG_SEAL_REPLY || data != NULL) {
                break;
            }
            if (b->m_SEAL_REPLY.status != CKS_OK) {
                cks_cl_reply_error(c, op, b->m_SEAL_REPLY.status, &b->m_SEAL_REPLY.msg);
                return;
            }
            cks_cl_op_try_complete(c, op);
            return;
        case CKS_OP_REPAIR_STATUS: {
            const cks_msg_repair_status_reply_t *r = &b->m_REPAIR_STATUS_REPLY;
            if (hdr->type != CKS_MSG_REPAIR_STATUS_REPLY || data != NULL) {
                break;
            }
            if (r->status != CKS_OK) {
                cks_cl_reply_error(c, op, r->status, &r->msg);
                return;
            }
            cks_repair_info_t *info = op->out;
            info->server_id   = r->id;
            info->caught_up   = r->synced != 0;
            info->chunks_left = r->chunks_left;
            info->bytes_left  = r->bytes_left;
            info->chunks_done = r->chunks_done;
            info->bytes_done  = r->bytes_done;
            info->rate        = r->rate;
            info->rate_cap    = r->rate_cap;
            cks_cl_op_try_complete(c, op);
            return;
        }
        case CKS_OP_VERSION_STAT:
            if (hdr->type != CKS_MSG_VERSION_STAT_REPLY || data != NULL) {
                break;
            }
            if (b->m_VERSION_STAT_REPLY.status != CKS_OK) {
                cks_cl_reply_error(c, op, b->m_VERSION_STAT_REPLY.status,
                                   &b->m_VERSION_STAT_REPLY.msg);
                return;
            }
            cks_cl_version_info(op->out, &b->m_VERSION_STAT_REPLY.v);
            cks_cl_op_try_complete(c, op);
            return;
        case CKS_OP_OBJECT_STAT:
            if (hdr->type != CKS_MSG_OBJECT_STAT_REPLY || data != NULL ||
                (b->m_OBJECT_STAT_REPLY.status == CKS_OK &&
                 cks_name_check(b->m_OBJECT_STAT_REPLY.o.key.ptr,
                                b->m_OBJECT_STAT_REPLY.o.key.len,
                                CKS_KEY_MAX_LEN) != CKS_OK)) {
                break;
            }
            if (b->m_OBJECT_STAT_REPLY.status != CKS_OK) {
                cks_cl_reply_error(c, op, b->m_OBJECT_STAT_REPLY.status,
                                   &b->m_OBJECT_STAT_REPLY.msg);
                return;
            }
            cks_cl_object_info(op->out, &b->m_OBJECT_STAT_REPLY.o);
            cks_cl_op_try_complete(c, op);
            return;
        case CKS_OP_LIST: {
            const cks_msg_list_reply_t *m = &b->m_LIST_REPLY;
            if (hdr->type != CKS_MSG_LIST_REPLY) {
                break;
            }
            if (m->status != CKS_OK) {
                cks_cl_reply_error(c, op, m->status, &m->msg);
                return;
            }
            if (m->count > op->out_max || (m->count > 0) != (data != NULL) ||
                (data != NULL && data->length > CKS_WIRE_MAX_PAGE)) {
                break;
            }
            *op->count_p = m->count;
            *op->more_p  = m->more != 0;
            if (data == NULL) {
                cks_cl_op_try_complete(c, op);
                return;
            }
            op->page     = malloc(data->length);
            op->page_len = data->length;
            if (op->page == NULL) {
                cks_cl_op_fail(c, op, CKS_ERR_NO_MEMORY);
                return;
            }
            cks_cl_take_payload(c, op, data, op->page, CKS_MEM_HOST);
            return;
        }
        case CKS_OP_GET: {
            const cks_msg_get_reply_t *m = &b->m_GET_REPLY;
            if (hdr->type != CKS_MSG_GET_REPLY) {
                break;
            }
            if (m->status != CKS_OK) {
                cks_cl_reply_error(c, op, m->status, &m->msg);
                return;
            }
            if (cks_cl_reply_bytes(op, hdr, data, m->length) != m->length ||
                m->offset != op->body.m_GET.offset ||
                (op->body.m_GET.length != UINT64_MAX && m->length != op->body.m_GET.length)) {
                break;
            }
            if (m->length > op->buf_size) {
                cks_cl_set_errorf(c, CKS_ERR_INVALID_PARAM,
                                  "buffer of %llu bytes too small for %llu bytes",
                                  (unsigned long long)op->buf_size,
                                  (unsigned long long)m->length);
                cks_cl_op_fail(c, op, CKS_ERR_INVALID_PARAM);
                return;
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
            if (hdr->flags & CKS_WIRE_F_RMA) {
                cks_cl_recv_done(op, CKS_OK); /* the server wrote the bytes into buf */
                return;
            }
            if (data == NULL) {
                cks_cl_op_try_complete(c, op);
                return;
            }
            cks_cl_take_payload(c, op, data, op->buf, op->mem_type);
            return;
        }
        case CKS_OP_CHUNK_GET: {
            const cks_msg_chunk_get_reply_t *m = &b->m_CHUNK_GET_REPLY;
            const cks_msg_chunk_get_t *q       = &op->body.m_CHUNK_GET;
            if (hdr->type != CKS_MSG_CHUNK_GET_REPLY) {
                break;
            }
            if (m->status != CKS_OK) {
                cks_cl_reply_error(c, op, m->status, &m->msg);
                return;
            }
            if (cks_cl_reply_bytes(op, hdr, data, m->length) != m->length || m->offset != q->offset ||
                m->length != q->length || m->length > op->buf_size) {
                break;
            }
            /* a whole chunk is checked here; a part of one, or one the
             * server wrote into our memory, by the server */
            if (m->offset == 0 && m->length == m->chunk_len && !(hdr->flags & CKS_WIRE_F_RMA)) {
                op->flags |= CKS_GET_VERIFY;
            }
            op->crc64    = m->crc64;
            op->obj_size = m->length;
            if (hdr->flags & CKS_WIRE_F_RMA) {
                cks_cl_recv_done(op, CKS_OK); /* the server wrote the bytes into buf */
                return;
            }
            if (data == NULL) {
                cks_cl_op_try_complete(c, op);
                return;
            }
            cks_cl_take_payload(c, op, data, op->buf, op->mem_type);
            return;
        }
        default:
            break;
    }
    cks_warn("unexpected %s for request %llu", cks_msg_name(hdr->type),
             (unsigned long long)hdr->req_id);
    cks_cl_set_errorf(c, CKS_ERR_BAD_MESSAGE, "unexpected reply");
    cks_cl_op_fail(c, op, CKS_ERR_BAD_MESSAGE);
}

static void cks_cl_on_bad_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                              cks_status_t status, const char *reason)
{
    cks_client_h c = arg;
    cks_op_t *op   = hdr ? cks_cl_reply_op(c, conn, hdr) : NULL;
    if (op != NULL && !op->replied) {
        cks_cl_set_errorf(c, status, "%s", reason);
        cks_cl_op_fail(c, op, status);
    }
}

static void cks_cl_on_conn_err(void *arg, cks_tp_conn_h conn, cks_status_t status)
{
    cks_client_h c   = arg;
    cks_cl_srv_t *sv = cks_tp_conn_user(conn);
    if (sv == NULL || sv->conn != conn) {
        return; /* a connection we already dropped */
    }
    cks_cl_srv_down(c, (size_t)(sv - c->srv),
                    status == CKS_ERR_TIMEOUT ? CKS_ERR_TIMEOUT : CKS_ERR_CONN_LOST);
}

static void cks_cl_check_timeouts(cks_client_h c)
{
    uint64_t now = cks_time_ns();
    /* Ops that failed while UCX held their send, and UCX still holds it
     * long after their connection was closed (UCX 1.13, a server killed on
     * this host): the caller gets the failure now instead of waiting for
     * good. They wait at the end of the list (deadline UINT64_MAX). */
    for (cks_op_t *op = c->fl_tail; op != NULL && op->deadline_ns == UINT64_MAX;) {
        cks_op_t *prev = op->prev;
        if (op->sending && !op->receiving && op->abandon_ns != 0 && op->abandon_ns <= now) {
            cks_warn("request %llu (%s) to %s:%u: UCX still held its send %llu s after it "
                     "failed: given up", (unsigned long long)op->req_id,
                     cks_msg_name(op->type), c->srv[op->srv].addr, c->srv[op->srv].port,
                     (unsigned long long)(CKS_CL_ABANDON_NS / 1000000000ull));
            cks_tp_send_abandon(c->tp, cks_cl_send_done, op);
            op->sending = 0;
            cks_cl_op_try_complete(c, op); /* may free op */
        }
        op = prev;
    }
    for (cks_op_t *op = c->fl_head; op != NULL && op->deadline_ns <= now;) {
        cks_op_t *next = op->next;
        if (!op->replied || op->sending || op->receiving) {
            size_t pos = op->srv;
            int busy   = op->sending || op->receiving;
            cks_log(op->background ? CKS_LOG_INFO : CKS_LOG_WARN,
                    "request %llu (%s) to %s:%u timed out after %d ms",
                    (unsigned long long)op->req_id, cks_msg_name(op->type), c->srv[pos].addr,
                    c->srv[pos].port, c->timeout_ms);
            if (!op->background) {
                cks_cl_set_errorf(c, CKS_ERR_TIMEOUT, "no answer from the server in time");
            }
            /* an op UCX still holds stays in flight until it lets go: it
             * moves behind every op with a deadline, or the sweep would stop
             * at it and never time those out */
            op->deadline_ns = UINT64_MAX;
            if (busy) {
                cks_cl_fl_unlink(c, op);
                cks_cl_fl_link(c, op);
            }
            /* a request the server answers at once (not a seal, which waits
             * there for the other ranks, nor a long one): the server is
             * silent - requests that can go elsewhere skip it a while */
            int prompt = op->type != CKS_MSG_VERSION_SEAL && op->timeout_ms == 0;
            int handshake = op->kind == CKS_OP_HELLO || op->kind == CKS_OP_AUTH;
            if (prompt) {
                c->srv[pos].silent_ns = now;
            }
            cks_cl_op_fail(c, op, CKS_ERR_TIMEOUT); /* may free op */
            if (busy || (prompt && !handshake && c->srv[pos].inflight == 0 &&
                         c->srv[pos].conn != NULL)) {
                /* UCX still holds a caller's buffer: only closing releases it;
                 * or nothing else waits there: a new connection's handshake
                 * is the cheapest way to learn when it answers again */
                cks_cl_srv_down(c, pos, CKS_ERR_TIMEOUT);
                next = c->fl_head; /* the list changed under us */
            }
        }
        op = next;
    }
}

static void *cks_cl_thread(void *arg)
{
    cks_client_h c    = arg;
    struct pollfd pfd = {.fd = cks_tp_worker_efd(c->tp), .events = POLLIN};

    for (;;) {
        cks_op_t *list;
        int stop;

        cks_tp_worker_progress(c->tp);
        pthread_mutex_lock(&c->lock);
        list        = c->sub_head;
        c->sub_head = c->sub_tail = NULL;
        stop        = c->stop;
        pthread_mutex_unlock(&c->lock);
        while (list != NULL) {
            cks_op_t *next = list->next;
            list->next     = NULL;
            cks_cl_dispatch(c, list);
            list = next;
        }
        cks_cl_check_timeouts(c);
        int later_ms = cks_cl_later_run(c);
        if (stop) {
            break;
        }
        if (cks_tp_worker_arm(c->tp) == CKS_ERR_BUSY) {
            continue;
        }
        pthread_mutex_lock(&c->lock);
        int queued = c->sub_head != NULL || c->stop;
        pthread_mutex_unlock(&c->lock);
        if (queued) {
            continue;
        }
        int timeout = -1;
        if (c->fl_head != NULL) {
            uint64_t now = cks_time_ns();
            uint64_t dl  = c->fl_head->deadline_ns;
            timeout      = dl <= now ? 0 : (int)CKS_MIN((dl - now) / 1000000 + 1, 1000);
        }
        if (later_ms >= 0 && (timeout < 0 || later_ms < timeout)) {
            timeout = later_ms;
        }
        if (poll(&pfd, 1, timeout) < 0 && errno != EINTR) {
            cks_error("poll: %s", strerror(errno));
        }
    }
    /* stopping: cancel what is left, and let UCX release the buffers */
    while (c->later != NULL) {
        cks_op_t *op = c->later;
        c->later     = op->next;
        op->status   = CKS_ERR_CANCELED;
        op->replied  = 1;
        cks_cl_op_try_complete(c, op); /* runs its callback and frees it */
    }
    for (size_t i = 0; i < c->nsrv; i++) {
        cks_cl_srv_down(c, i, CKS_ERR_CANCELED);
    }
    uint64_t until = cks_time_ns() + 2000000000ull;
    while (c->fl_head != NULL && cks_time_ns() < until) {
        cks_tp_worker_progress(c->tp);
    }
    return NULL;
}

/* Hand an op to the progress thread. Returns CKS_INPROGRESS. */
cks_status_t cks_cl_submit(cks_client_h c, cks_op_t *op, cks_done_cb_t cb, void *arg)
{
    op->client = c;
    op->cb     = cb;
    op->arg    = arg;
    op->next   = NULL;
    pthread_mutex_lock(&c->lock);
    if (c->stop) {
        pthread_mutex_unlock(&c->lock);
        free(op);
        return CKS_ERR_CANCELED;
    }
    if (c->sub_tail != NULL) {
        c->sub_tail->next = op;
    } else {
        c->sub_head = op;
    }
    c->sub_tail = op;
    pthread_mutex_unlock(&c->lock);
    cks_tp_worker_signal(c->tp);
    return CKS_INPROGRESS;
}

void cks_cl_start(cks_client_h c, cks_op_t *op, cks_done_cb_t cb, void *arg)
{
    op->client = c;
    op->cb     = cb;
    op->arg    = arg;
    cks_cl_dispatch(c, op);
}

cks_status_t cks_cl_run(cks_client_h c, cks_op_t *op)
{
    cks_waiter_t w;
    cks_waiter_init(&w);
    return cks_waiter_wait(&w, cks_cl_submit(c, op, cks_waiter_cb, &w));
}

/* op->group: the coordinator candidates of (job, version), the first asked
 * (the standalone server when there is no map). */
static void cks_cl_candidates(cks_client_h c, cks_op_t *op, const char *job, size_t job_len,
                              uint64_t version)
{
    op->tries  = 0;
    op->ngroup = 1;
    op->group[0] = 0;
    if (c->map != NULL) {
        op->ngroup = (unsigned)cks_place_coordinators(c->map, job, job_len, version,
                                                      op->group, CKS_COORD_CANDIDATES_MAX);
    }
    op->srv = op->group[0];
}

void cks_cl_to_coordinator(cks_client_h c, cks_op_t *op, const char *job, size_t job_len,
                           uint64_t version)
{
    cks_cl_candidates(c, op, job, job_len, version);
    op->target = c->map != NULL ? CKS_TARGET_COORD : CKS_TARGET_FIXED;
}

void cks_cl_coord_first(cks_client_h c, cks_op_t *op, const char *job, size_t job_len,
                        uint64_t version)
{
    cks_cl_candidates(c, op, job, job_len, version);
    op->coord_first = 1;
}

size_t cks_cl_coordinator(cks_client_h c, const char *job, size_t job_len, uint64_t version)
{
    return c->map == NULL ? 0 : cks_place_coordinator(c->map, job, job_len, version);
}

/* ---- client life cycle ---------------------------------------------------------------- */

static cks_status_t cks_cl_parse_server(const char *server, char *addr, size_t addr_len,
                                        uint16_t *port_p)
{
    const char *colon = server ? strrchr(server, ':') : NULL;
    char *end;
    unsigned long port;

    if (colon == NULL || colon == server || (size_t)(colon - server) >= addr_len) {
        return CKS_ERR_INVALID_PARAM;
    }
    port = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || port == 0 || port > 65535) {
        return CKS_ERR_INVALID_PARAM;
    }
    memcpy(addr, server, (size_t)(colon - server));
    addr[colon - server] = '\0';
    *port_p              = (uint16_t)port;
    return CKS_OK;
}

/* Servers from the params: one standalone server, or a cluster map. */
static cks_status_t cks_cl_servers(cks_client_h c, const cks_client_params_t *params)
{
    char err[256];
    cks_status_t status;

    if (params->field_mask & CKS_CLIENT_FIELD_CLUSTER) {
        status = cks_cluster_load(params->cluster, &c->map, err, sizeof(err));
        if (status != CKS_OK) {
            cks_cl_set_errorf(c, status, "%s", err);
            return status;
        }
        c->k          = 4;
        c->m          = 2;
        c->chunk_size = 1u << 20;
        if (params->field_mask & CKS_CLIENT_FIELD_EC) {
            c->k          = params->ec_k;
            c->m          = params->ec_m;
            c->chunk_size = params->chunk_size;
        }
        if (c->chunk_size == 0 || c->chunk_size % 4096 != 0 || c->chunk_size > (64u << 20)) {
            cks_error("chunk size %llu must be a multiple of 4096 up to 64 MiB",
                      (unsigned long long)c->chunk_size);
            return CKS_ERR_INVALID_PARAM;
        }
        status = cks_cluster_check(c->map, c->k, c->m, err, sizeof(err));
        if (status != CKS_OK) {
            cks_cl_set_errorf(c, status, "%s", err);
            return status;
        }
        c->nsrv         = cks_cluster_nservers(c->map);
        c->scratch_size = 32u << 20;
        if (params->field_mask & CKS_CLIENT_FIELD_SCRATCH) {
            if (params->scratch_size > (4ull << 30)) {
                cks_error("scratch size %llu: at most 4 GiB",
                          (unsigned long long)params->scratch_size);
                return CKS_ERR_INVALID_PARAM;
            }
            c->scratch_size = params->scratch_size;
        }
    } else if (params->field_mask & CKS_CLIENT_FIELD_SERVER) {
        c->nsrv = 1;
    } else {
        return CKS_ERR_INVALID_PARAM;
    }
    c->srv = calloc(c->nsrv, sizeof(*c->srv));
    if (c->srv == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < c->nsrv; i++) {
        c->srv[i].client = c;
        if (c->map != NULL) {
            const cks_cluster_server_t *cs = cks_cluster_server(c->map, i);
            snprintf(c->srv[i].addr, sizeof(c->srv[i].addr), "%s", cs->addr);
            c->srv[i].port = cs->port;
        } else {
            status = cks_cl_parse_server(params->server, c->srv[i].addr,
                                         sizeof(c->srv[i].addr), &c->srv[i].port);
            if (status != CKS_OK) {
                cks_error("server address '%s' is not ipv4:port",
                          params->server ? params->server : "");
                return status;
            }
        }
    }
    return CKS_OK;
}

static void cks_cl_free(cks_client_h c)
{
    for (unsigned k = 0; k <= CKS_EC_MAX_K; k++) {
        for (unsigned m = 0; m <= CKS_EC_MAX_M; m++) {
            cks_ec_destroy(c->ec[k][m]);
        }
    }
    free(c->srv);
    cks_cluster_free(c->map);
    cks_hmap_destroy(c->inflight);
    if (c->put_counts != NULL) {
        cks_hmap_foreach(c->put_counts, cks_cl_puts_free, NULL);
    }
    cks_hmap_destroy(c->put_counts);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

cks_status_t cks_client_create(const cks_client_params_t *params, cks_client_h *client_p)
{
    cks_tp_worker_params_t wp;
    cks_client_h c;
    cks_op_t *op;
    cks_status_t status;

    if (params == NULL || client_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->timeout_ms = (params->field_mask & CKS_CLIENT_FIELD_TIMEOUT_MS) && params->timeout_ms > 0
                        ? params->timeout_ms
                        : CKS_CLIENT_TIMEOUT_DEFAULT;
    snprintf(c->name, sizeof(c->name), "%s",
             (params->field_mask & CKS_CLIENT_FIELD_NAME) && params->name ? params->name
                                                                          : "libckstore");
    status = cks_hmap_create(&c->inflight);
    if (status == CKS_OK) {
        status = cks_hmap_create(&c->put_counts);
    }
    if (status == CKS_OK) {
        status = cks_cl_servers(c, params);
    }
    if (status == CKS_OK) {
        status = cks_cl_stage_config(c, params);
    }
    if (status == CKS_OK && (params->field_mask & CKS_CLIENT_FIELD_SECRET)) {
        status        = params->secret != NULL ? cks_tp_secret_load(params->secret, &c->secret)
                                               : CKS_ERR_INVALID_PARAM;
        c->has_secret = status == CKS_OK;
        if (status == CKS_OK && params->secret_job != NULL) {
            if (strlen(params->secret_job) > CKS_JOB_MAX_LEN) {
                status = CKS_ERR_INVALID_PARAM;
            } else {
                snprintf(c->secret_job, sizeof(c->secret_job), "%s", params->secret_job);
            }
        }
    }
    if (status != CKS_OK) {
        cks_cl_free(c);
        return status;
    }
    memset(&wp, 0, sizeof(wp));
    wp.name        = c->name;
    wp.on_msg      = cks_cl_on_msg;
    wp.on_bad_msg  = cks_cl_on_bad_msg;
    wp.on_conn_err = cks_cl_on_conn_err;
    wp.arg         = c;
    status         = cks_tp_worker_create(&wp, &c->tp);
    if (status != CKS_OK) {
        cks_cl_free(c);
        return status;
    }
    if (c->map != NULL) {
        cks_cl_scratch_prepare(c); /* before the thread: then it is the thread's */
    }
    if (pthread_create(&c->thread, NULL, cks_cl_thread, c) != 0) {
        cks_cl_scratch_free(c);
        cks_tp_worker_destroy(c->tp);
        cks_cl_free(c);
        return CKS_ERR_NO_MEMORY;
    }
    /* a server must answer: the first that does (any, for a cluster) */
    op = cks_op_new(CKS_OP_HELLO, CKS_MSG_HELLO);
    if (op == NULL) {
        status = CKS_ERR_NO_MEMORY;
    } else {
        op->target = CKS_TARGET_ANY;
        status     = cks_cl_run(c, op);
    }
    if (status != CKS_OK) {
        cks_error("cannot reach %s: %s", c->map ? "any server of the cluster" : "the server",
                  cks_status_string(status));
        cks_client_destroy(c);
        return cks_cl_retryable(status) ? CKS_ERR_UNREACHABLE : status;
    }
    *client_p = c;
    return CKS_OK;
}

/* Tell every server that is up of a new region, and wait (bounded by the
 * client's timeout) until those on this host have mapped and faulted it in:
 * registration at allocation, as RDMA memory is registered, so that the
 * transfers run at full speed from the first. Servers elsewhere have nothing
 * to do; any failure only leaves the fault-in to the first transfers. */
static void cks_cl_mem_register(cks_client_h c, const cks_cl_mem_t *m)
{
    cks_waiter_t *w = calloc(c->nsrv, sizeof(*w));
    cks_status_t *st = calloc(c->nsrv, sizeof(*st));
    size_t mapped = 0;

    for (size_t i = 0; w != NULL && st != NULL && i < c->nsrv; i++) {
        cks_op_t *op = cks_cl_mem_map_op(m, i);
        cks_waiter_init(&w[i]);
        st[i] = op != NULL ? cks_cl_submit(c, op, cks_waiter_cb, &w[i]) : CKS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; w != NULL && st != NULL && i < c->nsrv; i++) {
        st[i] = cks_waiter_wait(&w[i], st[i]);
        mapped += st[i] == CKS_OK;
        if (st[i] != CKS_OK && st[i] != CKS_ERR_UNSUPPORTED && st[i] != CKS_ERR_UNREACHABLE) {
            cks_info("server %s:%u did not map a region of %zu bytes ahead: %s",
                     c->srv[i].addr, c->srv[i].port, m->len, cks_status_string(st[i]));
        }
    }
    cks_debug("%zu bytes at %p: mapped ahead by %zu of %zu servers", m->len, m->base, mapped,
              c->nsrv);
    free(st);
    free(w);
}

cks_status_t cks_mem_alloc(cks_client_h c, size_t size, void **ptr_p)
{
    cks_cl_mem_t *m;
    cks_status_t status;

    if (c == NULL || size == 0 || ptr_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_tp_mem_alloc(c->tp, size, &m->mem, &m->base);
    if (status != CKS_OK) {
        free(m);
        return status;
    }
    m->len = size;
    pthread_mutex_lock(&c->lock);
    m->next = c->mems;
    c->mems = m;
    pthread_mutex_unlock(&c->lock);
    cks_cl_mem_register(c, m);
    *ptr_p = m->base;
    return CKS_OK;
}

cks_status_t cks_mem_free(cks_client_h c, void *ptr)
{
    cks_cl_mem_t **pp, *m = NULL;

    if (c == NULL || ptr == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&c->lock);
    for (pp = &c->mems; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->base == ptr) {
            m   = *pp;
            *pp = m->next;
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (m == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    cks_tp_mem_unmap(m->mem);
    free(m);
    return CKS_OK;
}

void cks_client_destroy(cks_client_h c)
{
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_mutex_unlock(&c->lock);
    cks_tp_worker_signal(c->tp);
    pthread_join(c->thread, NULL);
    /* ops submitted after the thread's last look at the queue */
    while (c->sub_head != NULL) {
        cks_op_t *op = c->sub_head;
        c->sub_head  = op->next;
        op->cb(op->arg, CKS_ERR_CANCELED);
        free(op);
    }
    cks_cl_stage_free(c); /* its ops all failed above: its thread ends */
    while (c->mems != NULL) { /* the caller's to free; UCX's must go before the worker */
        cks_cl_mem_t *m = c->mems;
        cks_warn("cks_client_destroy: %zu bytes from cks_mem_alloc() not freed", m->len);
        c->mems = m->next;
        cks_tp_mem_unmap(m->mem);
        free(m);
    }
    cks_cl_scratch_free(c);
    cks_tp_worker_destroy(c->tp);
    cks_cl_free(c);
}

