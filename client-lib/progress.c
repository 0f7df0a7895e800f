/*
 * DESIGN: the client's progress thread, which drives the op engine (op.c)
 * through time: each pass progresses the transport's worker, dispatches
 * the ops submitted from other threads, times out the requests past their
 * deadline (a server that let a prompt request time out is marked silent;
 * one that still holds a caller's buffer, or has nothing else in flight,
 * is dropped), dispatches the ops due again from the later list, expires
 * the handshakes' calls, connects again on its own to servers on this host
 * that went down (cks_cl_rejoin_run()), and sleeps in poll() until the
 * worker's event fd or the first deadline. At the client's stop it cancels
 * what is left and lets UCX release the buffers. See client.c for the whole
 * design.
 *
 * Never: block anywhere but in poll(); touch an op after a completion that
 * may have freed it.
 */
#include "client_int.h"

#include <errno.h>
#include <poll.h>
#include <string.h>

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

/* Requests past their deadline (c->fl) time out; sends UCX still holds
 * long after their op failed are given up. */
static void cks_cl_check_timeouts(cks_client_h c)
{
    uint64_t now = cks_time_ns();
    /* Ops that failed while UCX held their send, and UCX still holds it
     * long after their connection was closed (UCX 1.13, a server killed on
     * this host): the caller gets the failure now instead of waiting for
     * good. They are parked at the end of the list. A completion may free
     * any op: after each, look again from the tail (each is given up once). */
    for (int again = 1; again;) {
        again = 0;
        for (cks_dl_t *e = c->fl.tail; e != NULL && e->due_ns == CKS_DL_NEVER; e = e->prev) {
            cks_op_t *op = cks_cl_fl_op(e);
            if (!op->sending || op->receiving || op->abandon_ns == 0 || op->abandon_ns > now) {
                continue;
            }
            cks_warn("request %llu (%s) to %s:%u: UCX still held its send %llu s after it "
                     "failed: given up", (unsigned long long)op->req_id,
                     cks_msg_name(op->type), c->srv[op->srv].addr, c->srv[op->srv].port,
                     (unsigned long long)(CKS_CL_ABANDON_NS / 1000000000ull));
            cks_cl_send_abandon(c, op); /* may free op */
            again = 1;
            break;
        }
    }
    /* Each op taken here leaves the head: completed, or parked first. */
    for (cks_dl_t *e; (e = cks_dl_due(&c->fl, now)) != NULL;) {
        cks_op_t *op = cks_cl_fl_op(e);
        /* an op UCX still holds stays in flight until it lets go: parked
         * behind every op with a deadline, or the sweep would stop at it
         * and never time those out */
        cks_dl_move(&c->fl, e, CKS_DL_NEVER);
        if (op->replied && !op->sending && !op->receiving) {
            cks_cl_op_try_complete(c, op); /* over already: it leaves */
            continue;
        }
        size_t pos = op->srv;
        int busy   = op->sending || op->receiving;
        cks_log(op->background ? CKS_LOG_INFO : CKS_LOG_WARN,
                "request %llu (%s) to %s:%u timed out after %d ms",
                (unsigned long long)op->req_id, cks_msg_name(op->type), c->srv[pos].addr,
                c->srv[pos].port, c->timeout_ms);
        if (!op->background) {
            cks_cl_set_errorf(c, CKS_ERR_TIMEOUT, "no answer from the server in time");
        }
        /* a request the server answers at once (not a seal, which waits
         * there for the other ranks, nor a long one): the server is
         * silent - requests that can go elsewhere skip it a while */
        int prompt = op->type != CKS_MSG_VERSION_SEAL && op->timeout_ms == 0;
        if (prompt) {
            c->srv[pos].silent_ns = now;
        }
        uint64_t waited = (uint64_t)(op->timeout_ms > 0 ? op->timeout_ms : c->timeout_ms) *
                          1000000ull;
        cks_cl_op_fail(c, op, CKS_ERR_TIMEOUT); /* may free op */
        cks_cl_srv_t *sv = &c->srv[pos];
        int deaf = prompt && sv->conn != NULL && now - sv->heard_ns >= waited;
        if (busy || (prompt && sv->inflight == 0 && sv->conn != NULL) || deaf) {
            /* UCX still holds a caller's buffer: only closing releases it;
             * or nothing else waits there: a new connection's handshake
             * is the cheapest way to learn when it answers again; or the
             * connection brought nothing for a whole timeout of a request
             * answered at once: a server cut off and plugged back in may
             * not be heard on it for seconds more (TCP backs off while
             * cut), whatever else waits there - those requests fail now
             * and go elsewhere or again. Not for a seal: it waits there,
             * unanswered, for the other ranks or a takeover, and is sent
             * again on the same connection (closing it failed a seal whose
             * takeover outlasted the client's timeout) */
            cks_cl_srv_down(c, pos, CKS_ERR_TIMEOUT);
        }
    }
}

/* The sentinel (transport/sentinel.c): a client whose UCX worker took none
 * of its own check messages for CKS_CL_RX_STALL_S of running takes no reply
 * any more - UCX 1.13's shared-memory receive FIFO stays stuck after a
 * server on this host was killed while it sent to this client - and every
 * request to a server would time out. The client replaces its worker
 * (cks_tp_worker_renew()): the requests on its connections fail now, as
 * when their servers are lost (those that can go elsewhere or again do),
 * and the next ones connect through the new worker, which announces our
 * memory to each server again (cks_cl_mem_map_ops()). Logged as an error,
 * and in cks_client_stats_t (receive_stalled_s, receive_renewals). The ms
 * until it wants a pass. */
static int cks_cl_sentinel(cks_client_h c)
{
    int next_ms;
    unsigned dry = cks_tp_sentinel_poll(c->tp, &next_ms);
    __atomic_store_n(&c->rx_stalled_s, dry, __ATOMIC_RELAXED);
    if (dry >= CKS_CL_RX_STALL_S && !c->rx_stall_said) {
        c->rx_stall_said = 1;
        cks_error("this client's UCX worker has taken none of its own check messages for "
                  "%u s: its receive path is stalled (a server on this host killed while "
                  "it sent to this client leaves UCX's shared-memory receive FIFO stuck): "
                  "replacing the worker; the requests in flight fail", dry);
        c->renewing     = 1; /* a seal failed now is sent again (op.c) */
        cks_status_t st = cks_tp_worker_renew(c->tp);
        c->renewing     = 0;
        if (st != CKS_OK) {
            cks_error("the client's UCX worker cannot be replaced (%s): its requests will "
                      "time out; destroy the client and create a new one",
                      cks_status_string(st));
        }
        next_ms = 0; /* the new worker's sentinel */
    } else if (dry == 0) {
        c->rx_stall_said = 0;
    }
    return next_ms;
}

void *cks_cl_thread(void *arg)
{
    cks_client_h c    = arg;
    struct pollfd pfd = {.fd = cks_tp_worker_efd(c->tp), .events = POLLIN};

    for (;;) {
        cks_op_t *list;
        int stop;

        cks_tp_worker_progress(c->tp);
        int sentinel_ms = cks_cl_sentinel(c);
        cks_cl_work_reap(c);
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
        int calls_ms = cks_tp_worker_expire(c->tp); /* the handshakes */
        if (stop) {
            break;
        }
        int rejoin_ms = cks_cl_rejoin_run(c); /* servers on this host that went down */
        if (cks_tp_worker_arm(c->tp) == CKS_ERR_BUSY) {
            continue;
        }
        pthread_mutex_lock(&c->lock);
        int queued = c->sub_head != NULL || c->stop;
        pthread_mutex_unlock(&c->lock);
        /* a job that finished before the arm (which may have taken its
         * signal) is finished now, and the pass goes on */
        if (queued || cks_cl_work_reap(c) > 0) {
            continue;
        }
        /* ops in flight: wake by the first deadline, and at least each
         * second while any is in flight - a parked one, whose send UCX
         * still holds, is given up after CKS_CL_ABANDON_NS by the sweep
         * above (without this wake-up a put cut off by a partition hung) */
        int fl_ms = cks_dl_wait_ms(&c->fl, cks_time_ns(), 1000);
        if (c->fl.head != NULL && fl_ms < 0) {
            fl_ms = 1000;
        }
        int timeout = cks_dl_sooner(cks_dl_sooner(fl_ms, rejoin_ms),
                                    cks_dl_sooner(cks_dl_sooner(later_ms, calls_ms),
                                                  sentinel_ms));
        pfd.fd = cks_tp_worker_efd(c->tp); /* a replaced worker has a new one */
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
    while (c->fl.head != NULL && cks_time_ns() < until) {
        cks_tp_worker_progress(c->tp);
    }
    cks_cl_work_stop(c); /* the decodes of reads whose fetches all ended */
    return NULL;
}
