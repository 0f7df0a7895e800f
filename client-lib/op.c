/*
 * DESIGN: the client's op engine, on its progress thread: the submit queue,
 * the in-flight list in deadline order, the window per server, dispatch
 * (waiting for a connection, which conn.c makes and whose end it tells the
 * engine through a callback; skipping a silent server), completion with
 * the failover of puts (next member), versions (next coordinator
 * candidate, a seal sent again) and questions (any server), and a server's
 * loss (the ops on it and waiting for it fail, and may move on). The
 * progress thread (progress.c) drives it: the timeout sweep, the ops asked
 * again after a pause. See client.c for the whole design.
 *
 * Never: touch UCX from an application thread; free an op UCX still uses.
 */
#include "client_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- progress thread: ops and servers ---------------------------------------- */


/* In flight, in deadline order (common's deadline engine): most ops share
 * the client's timeout and go last; an op with a longer one of its own, or
 * one that timed out while UCX still holds its buffer (parked), stays
 * behind those due before it. */
static void cks_cl_fl_link(cks_client_h c, cks_op_t *op, uint64_t due_ns)
{
    cks_dl_add(&c->fl, &op->dl, due_ns);
}

static void cks_cl_fl_unlink(cks_client_h c, cks_op_t *op)
{
    cks_dl_del(&c->fl, &op->dl);
}

cks_op_t *cks_cl_fl_op(cks_dl_t *e)
{
    return CKS_CONTAINER_OF(e, cks_op_t, dl);
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
int cks_cl_retryable(cks_status_t st)
{
    return st == CKS_ERR_CONN_LOST || st == CKS_ERR_UNREACHABLE || st == CKS_ERR_TIMEOUT ||
           st == CKS_ERR_TRANSPORT || st == CKS_ERR_SHUTTING_DOWN;
}

/* Is a warning about server s due (none for CKS_CL_WARN_EVERY_NS)? Taken if so. */
static int cks_cl_warn_due(cks_cl_srv_t *s)
{
    uint64_t now = cks_time_ns();
    if (s->warned_ns != 0 && now - s->warned_ns < CKS_CL_WARN_EVERY_NS) {
        return 0;
    }
    s->warned_ns = now;
    return 1;
}

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
        CKS_QUEUE_PUSH(c->sub_head, c->sub_tail, op);
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

static void cks_cl_srv_probe(cks_client_h c, size_t pos, uint64_t now);

/* A put whose every candidate failed, one at least by not answering in
 * time (CKS_CL_REWALK_PAUSE_NS): each of those is asked by a handshake on
 * a new connection now, and the walk starts again after the pause. One
 * that answers meanwhile is no longer silent (cks_cl_dispatch() skips it
 * no more) and takes the put. */
static void cks_cl_put_rewalk(cks_client_h c, cks_op_t *op)
{
    uint64_t now = cks_time_ns();
    for (size_t i = 0; i <= op->tries && i < op->ngroup; i++) {
        if (op->slow_mask & (1u << i)) {
            cks_cl_srv_probe(c, op->group[i], now);
        }
    }
    cks_log(CKS_LOG_INFO, "put of '%.*s': no member of its group took it; asking those that "
                          "did not answer on new connections, and the group again in %llu ms",
            (int)op->body.m_PUT.key.len, op->body.m_PUT.key.ptr,
            (unsigned long long)(CKS_CL_REWALK_PAUSE_NS / 1000000ull));
    op->rewalks++;
    op->tries     = 0;
    op->srv       = op->group[0];
    op->slow_mask = 0;
    op->status    = CKS_OK;
    op->replied   = 0;
    cks_cl_later_add(c, op, now + CKS_CL_REWALK_PAUSE_NS);
}

/* How often a seal goes again to a candidate that let it time out: a commit
 * waits for the members that must take the manifest up to the version's
 * member timeout (this client's, or the servers' default), which may be
 * many of this client's request timeouts; twice that is given (a takeover's
 * claim may wait as long again). Before, 3 times whatever the two timeouts:
 * a client with a 1 s timeout gave up on a coordinator still committing. */
static unsigned cks_cl_seal_resends(const cks_client_h c)
{
    uint64_t member = c->member_ms != 0 ? c->member_ms : CKS_WIRE_MEMBER_MS_DEFAULT;
    uint64_t each   = c->timeout_ms > 0 ? (uint64_t)c->timeout_ms : 1;
    uint64_t n      = (2 * member + each - 1) / each + 1;
    return (unsigned)CKS_MIN(CKS_MAX(n, CKS_CL_SEAL_RESENDS), CKS_CL_SEAL_RESENDS_MAX);
}

/* Position of the highest bit set in mask (not 0). */
static size_t cks_cl_highest_bit(uint32_t mask)
{
    return 31u - (size_t)__builtin_clz(mask);
}

/* Finish an op when nothing of UCX uses its buffers any more: run its
 * callback, or send it to the next server when another may answer. */
void cks_cl_op_try_complete(cks_client_h c, cks_op_t *op)
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
        __atomic_sub_fetch(&c->requests, 1, __ATOMIC_RELAXED);
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
     * answers lists and stats BUSY: another server answers instead (a
     * client of that one server alone asks it again after a pause). */
    int busy = op->status == CKS_ERR_BUSY;
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
        /* its coordinator could not get a majority to fence its ballot: a
         * later candidate may have taken the version over */
        int unfenced = op->answered && op->status == CKS_ERR_NO_QUORUM &&
                       (op->type == CKS_MSG_VERSION_SEAL || op->type == CKS_MSG_VERSION_ABORT);
        if (unreach || op->status == CKS_ERR_NOT_COORDINATOR || notopen || unfenced) {
            if (unfenced) {
                op->unfenced_mask |= 1u << op->tries;
            }
            if (notopen) {
                op->notfound = op->status;
            }
            if (unreach && op->tries == 0) {
                op->unreach = op->status;
            }
            if (unreach && (op->status == CKS_ERR_TIMEOUT || c->renewing)) {
                /* busy, maybe: see below; or up, its connection closed by
                 * this client's worker replacement (progress.c) */
                op->slow_mask |= 1u << op->tries;
            }
            cks_log(unreach && !op->tries && cks_cl_warn_due(&c->srv[op->srv]) ? CKS_LOG_WARN
                                                                               : CKS_LOG_INFO,
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
    if (op->target == CKS_TARGET_COORD && op->type == CKS_MSG_VERSION_SEAL && op->slow_mask != 0 &&
        (op->status == CKS_ERR_NOT_COORDINATOR ||
         (op->status == CKS_ERR_VERSION_NOT_OPEN && op->answered) ||
         (cks_cl_retryable(op->status) && !op->answered)) &&
        op->resends < cks_cl_seal_resends(c) && !c->stop) {
        /* A candidate did not answer the seal in time - the coordinator, or
         * the next one when the coordinator is gone - and no later one
         * took the version: they say that one coordinates it (it answers
         * them), or that the version ended meanwhile, or they cannot be
         * reached either. It may be busy, not gone - a commit waits for the
         * members that must take the chunks and the manifest, up to their
         * timeout, which may be longer than this client's. The seal goes
         * to it again, marked as sent again: it waits with the others, or
         * is told the outcome (a commit, which had this rank's first seal,
         * or the abort and its reason). Of those that timed out, the last
         * one not sent to again goes first: when the coordinator is gone,
         * a later candidate busy taking the version over is likelier to
         * answer than an earlier one that is cut off; then the others. */
        uint32_t left = op->slow_mask & ~op->resent_mask;
        size_t slow   = cks_cl_highest_bit(left != 0 ? left : op->slow_mask);
        op->resent_mask |= 1u << slow;
        cks_log(CKS_LOG_INFO,
                "VERSION_SEAL of version %llu: candidate %s:%u did not answer in time and no "
                "later one took the version: sending the seal to it again",
                (unsigned long long)op->body.m_VERSION_SEAL.version,
                c->srv[op->group[slow]].addr, c->srv[op->group[slow]].port);
        op->resends++;
        op->wire_flags |= CKS_WIRE_F_RESENT;
        op->tries    = slow;
        op->srv      = op->group[slow];
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
    int no_record = op->status == CKS_ERR_NO_SUCH_VERSION || op->status == CKS_ERR_NO_SUCH_JOB ||
                    op->status == CKS_ERR_NO_QUORUM;
    if (op->target == CKS_TARGET_COORD &&
        ((cks_cl_retryable(op->status) && !op->answered) ||
         op->status == CKS_ERR_NOT_COORDINATOR || (op->unfenced_mask != 0 && no_record))) {
        /* no candidate took it: the first one's answer, or why it could not
         * be reached (the others named it as the coordinator), or that the
         * one that had it could not record its outcome */
        uint64_t version = op->type == CKS_MSG_VERSION_SEAL ? op->body.m_VERSION_SEAL.version
                         : op->type == CKS_MSG_OBJECT_DELETE
                             ? op->body.m_OBJECT_DELETE.version
                         : op->type == CKS_MSG_VERSION_BEGIN ? op->body.m_VERSION_BEGIN.version
                                                             : op->body.m_VERSION_ABORT.version;
        if (op->unfenced_mask != 0) {
            /* the version was open there, so "no such version" elsewhere
             * does not say it ended */
            const cks_cl_srv_t *sv = &c->srv[op->group[cks_cl_highest_bit(op->unfenced_mask)]];
            cks_cl_set_errorf(c, CKS_ERR_NO_QUORUM, "%s of version %llu: outcome not "
                              "recorded yet (cks_version_stat() tells it later); coordinator "
                              "%s:%u: %s", cks_msg_name(op->type), (unsigned long long)version,
                              sv->addr, sv->port,
                              op->unfenced_why != NULL ? op->unfenced_why : "");
            op->status = CKS_ERR_NO_QUORUM;
        } else if (op->notfound != CKS_OK) {
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
    if (op->target == CKS_TARGET_GROUP && op->status == CKS_ERR_TIMEOUT) {
        op->slow_mask |= 1u << op->tries; /* asked again if the walk fails */
    }
    if (op->target == CKS_TARGET_GROUP && cks_cl_retryable(op->status) &&
        op->tries + 1 < op->ngroup) {
        /* the primary is unreachable: the next member of the group stores the
         * object (it keeps its own chunk; the primary's is missing until repaired) */
        cks_status_t failed = op->status;
        cks_log(op->tries == 0 && cks_cl_warn_due(&c->srv[op->srv]) ? CKS_LOG_WARN
                                                                    : CKS_LOG_INFO,
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
    if (op->target == CKS_TARGET_GROUP && op->tries > 0 && cks_cl_retryable(op->status) &&
        op->slow_mask != 0 && op->rewalks == 0 && !c->stop) {
        cks_cl_put_rewalk(c, op);
        return;
    }
    if (op->target == CKS_TARGET_GROUP && op->tries > 0 && cks_cl_retryable(op->status)) {
        /* more than m members of the object's group are unreachable */
        char text[CKS_MSG_MAX_LEN];
        int n = snprintf(text, sizeof(text), "put of '%.*s': %zu members of its group "
                         "unreachable (more than the m = %u it can lose):",
                         (int)op->body.m_PUT.key.len, op->body.m_PUT.key.ptr, op->tries + 1,
                         op->body.m_PUT.m);
        for (size_t i = 0; i <= op->tries && n > 0 && (size_t)n < sizeof(text); i++) {
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
    if (op->type == CKS_MSG_PUT && op->status == CKS_OK) { /* an object, not a part */
        cks_cl_put_counted(c, &op->body.m_PUT, op->srv);
    }
    op->cb(op->arg, op->status);
    free(op);
}

/* Fail an op: it completes as soon as UCX lets go of its buffers. */
void cks_cl_op_fail(cks_client_h c, cks_op_t *op, cks_status_t status)
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

void cks_cl_send_abandon(cks_client_h c, cks_op_t *op)
{
    cks_tp_send_abandon(c->tp, cks_cl_send_done, op);
    op->sending = 0;
    cks_cl_op_try_complete(c, op); /* may free op */
}

/* Does the op's buffer lie in memory from cks_mem_alloc(), and is its server
 * on this host? Then describe the buffer instead of sending the bytes. */
static int cks_cl_rma_describe(cks_client_h c, cks_op_t *op, cks_tp_conn_h conn)
{
    const void *ptr = op->kind == CKS_OP_PUT ? op->payload : op->buf;
    size_t len      = op->kind == CKS_OP_PUT ? op->payload_len : op->buf_size;
    cks_status_t status = CKS_ERR_INVALID_PARAM;

    if (len == 0 || op->mem_type != CKS_MEM_HOST || !cks_tp_conn_local(conn) ||
        c->srv[op->srv].no_rma || (op->kind != CKS_OP_MEM_MAP && c->srv[op->srv].maps_pending) ||
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
    cks_cl_fl_link(c, op, /* in flight from now on, in deadline order */
                   cks_time_ns() +
                       (uint64_t)(op->timeout_ms > 0 ? op->timeout_ms : c->timeout_ms) *
                           1000000ull);
    if (cks_hmap_put(c->inflight, &op->req_id, sizeof(op->req_id), op) != CKS_OK) {
        cks_cl_fl_unlink(c, op);
        op->req_id = 0;
        cks_cl_op_fail(c, op, CKS_ERR_NO_MEMORY);
        return;
    }
    sv->inflight++;
    __atomic_add_fetch(&c->requests, 1, __ATOMIC_RELAXED);
    if (op->on_send != NULL) {
        op->on_send(op->on_send_arg, op->srv);
    }
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
        status = cks_tp_send(sv->conn, op->type, 0, op->req_id, &op->body, op->payload,
                             op->payload_len, op->mem_type, NULL, cks_cl_send_done, op);
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

/* ---- the ops waiting on a server, and its connection's end ------------------- */

static void cks_cl_srv_wait(cks_cl_srv_t *sv, cks_op_t *op)
{
    op->queued = 1;
    CKS_LIST_PUSH(sv->wait_head, sv->wait_tail, op);
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
void cks_cl_srv_down(cks_client_h c, size_t pos, cks_status_t status)
{
    cks_tp_conn_h conn = cks_cl_srv_drop(c, pos, status); /* the server is IDLE */
    if (conn == NULL) {
        return;
    }
    /* fail its ops with this status first: closing makes UCX complete their
     * transfers at once, as "canceled", which would be the status they keep */
    for (cks_dl_t *e = c->fl.head; e != NULL;) {
        cks_dl_t *next = e->next;
        cks_op_t *op   = cks_cl_fl_op(e);
        if (op->srv == pos && !op->replied) {
            cks_cl_op_fail(c, op, status);
        }
        e = next;
    }
    cks_tp_conn_close(conn); /* UCX fails what is still in flight on it */
    cks_cl_srv_settle(c, pos, status);
    cks_tp_conn_put(conn);
}

/* A connection that dispatch asked for ended (cks_cl_srv_connect()'s
 * callback). The server is up: the ops that waited go, and it is told of
 * every region we have (a server on this host maps and faults them in now,
 * a restarted one too; until it has, our transfers with it send the bytes
 * instead of faulting its new mapping in as they copy). Or it failed: the
 * ops that waited fail, and the connection, if one was made, is dropped. */
static void cks_cl_srv_ended(cks_client_h c, size_t pos, cks_status_t status)
{
    if (status != CKS_OK && c->srv[pos].conn != NULL) {
        cks_cl_srv_down(c, pos, status);
        return;
    }
    cks_op_t *op = status == CKS_OK && c->srv[pos].state == CKS_SRV_UP
                     ? cks_cl_mem_map_ops(c, pos) : NULL; /* counted in maps_pending */
    cks_cl_srv_settle(c, pos, status);
    while (op != NULL) {
        cks_op_t *next = op->next;
        op->next       = NULL;
        cks_cl_start(c, op, cks_cl_map_done, &c->srv[pos]);
        op = next;
    }
}

/* Ask a server that let requests time out with a handshake on a new
 * connection, unless one is being made: its answer ends its silence. */
static void cks_cl_srv_probe(cks_client_h c, size_t pos, uint64_t now)
{
    cks_cl_srv_t *sv = &c->srv[pos];
    if (sv->state == CKS_SRV_IDLE) {
        sv->probe_ns = now;
        cks_cl_srv_connect(c, pos, cks_cl_srv_ended);
    }
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
void cks_cl_dispatch(cks_client_h c, cks_op_t *op)
{
    cks_cl_srv_t *sv = &c->srv[op->srv];

    uint64_t now = cks_time_ns();
    /* a put's second walk of its group (cks_cl_put_rewalk()) skips no one:
     * it waits for the handshake that asks a silent member (bounded by the
     * client's timeout) rather than fail with m servers down - one plugged
     * back in took more than the walk's pause to answer a new connection */
    int rewalk = op->target == CKS_TARGET_GROUP && op->rewalks > 0;
    if (sv->silent_ns != 0 && op->kind != CKS_OP_CONNECT && !rewalk &&
        (sv->state != CKS_SRV_UP || now - sv->silent_ns < CKS_CL_SILENT_NS) &&
        cks_cl_has_alternative(c, op)) {
        /* it let a request time out: this one goes elsewhere at once; a new
         * handshake asks it now and then (its answer ends this) */
        if (now - sv->probe_ns >= CKS_CL_PROBE_NS) {
            cks_cl_srv_probe(c, op->srv, now);
        }
        cks_log(CKS_LOG_DEBUG, "%s to %s:%u: skipped (it let a request time out %llu ms ago)",
                cks_msg_name(op->type), sv->addr, sv->port,
                (unsigned long long)((now - sv->silent_ns) / 1000000ull));
        cks_cl_op_fail(c, op, CKS_ERR_TIMEOUT);
        return;
    }

    if (op->kind == CKS_OP_MEM_MAP && sv->state != CKS_SRV_UP) {
        /* no connect for it: when the server comes up, it is told of every
         * region then (cks_cl_srv_ended()) */
        cks_cl_op_fail(c, op, CKS_ERR_UNREACHABLE);
        return;
    }
    if (sv->state == CKS_SRV_UP) {
        if (op->kind == CKS_OP_CONNECT) { /* it is up */
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
            cks_cl_srv_connect(c, op->srv, cks_cl_srv_ended);
            cks_cl_op_fail(c, op, CKS_ERR_UNREACHABLE);
            return;
        }
        cks_cl_srv_wait(sv, op);
        cks_cl_srv_connect(c, op->srv, cks_cl_srv_ended);
        return;
    }
    if (degradable) {
        cks_cl_op_fail(c, op, CKS_ERR_UNREACHABLE);
        return;
    }
    cks_cl_srv_wait(sv, op);
}

/* Hand an op to the progress thread. Returns CKS_INPROGRESS. */
cks_status_t cks_cl_submit(cks_client_h c, cks_op_t *op, cks_done_cb_t cb, void *arg)
{
    op->client = c;
    op->cb     = cb;
    op->arg    = arg;
    if (!cks_cl_requeue(c, op)) {
        free(op);
        return CKS_ERR_CANCELED;
    }
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
