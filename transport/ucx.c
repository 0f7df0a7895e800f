/*
 * DESIGN: the transport's worker. Owns the UCP context and worker and puts
 * the parts together: status translation (status.c), connections and
 * listeners (conn.c), sends (send.c), the active-message handler of
 * peers' messages (recv.c), calls (call.c), the periodic checks (sweep.c),
 * registered memory and one-copy transfers (rma.c, rma_xfer.c, copy.c,
 * prefault.c), the check that the worker still receives (sentinel.c, with
 * a handler of its own).
 * Each file calls only those below it; where a connection's end must reach
 * the layers above it (its held sends, its calls), the worker holds the
 * hooks (held_fail, calls_fail), set here.
 *
 * Thread: everything here runs on the thread that progresses the worker,
 * except cks_tp_worker_signal(). Callbacks into the owner run from
 * cks_tp_worker_progress(); a callback may send, receive and drop references,
 * but a connection is freed only when its last reference goes, never inside
 * its own UCX callback (close requests finish on their own).
 *
 * Never: copy a payload (payloads go zero-copy to or from the caller's
 * memory, or are copied exactly once from an eager buffer by the owner),
 * block, or translate a ucs_status_t anywhere but cks_tp_status().
 */
#include "tp_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>


/* ---- worker ----------------------------------------------------------------- */

int cks_tp_worker_cuda_direct(cks_tp_worker_h w)
{
    ucp_context_attr_t attr;
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(w->context, &attr) != UCS_OK) {
        return 0;
    }
    return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}


cks_status_t cks_tp_ucp_worker_new(ucp_context_h context, ucp_worker_h *worker_p,
                                   const char *what)
{
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    return cks_tp_status(ucp_worker_create(context, &wp, worker_p), what);
}

cks_status_t cks_tp_am_handler_set(ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb,
                                   void *arg, const char *what)
{
    ucp_am_handler_param_t ap;
    memset(&ap, 0, sizeof(ap));
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    ap.id    = id;
    ap.cb    = cb;
    ap.arg   = arg;
    ap.flags = UCP_AM_FLAG_WHOLE_MSG;
    return cks_tp_status(ucp_worker_set_am_recv_handler(worker, &ap), what);
}

/* A new UCP worker of w's context, ready to take w's messages. */
static cks_status_t cks_tp_ucp_worker_ready(cks_tp_worker_h w, ucp_worker_h *uw_p, int *efd_p,
                                            ucp_address_t **addr_p, size_t *addr_len_p)
{
    cks_status_t status = cks_tp_ucp_worker_new(w->context, uw_p, "worker");
    if (status != CKS_OK) {
        return status;
    }
    status = cks_tp_status(ucp_worker_get_efd(*uw_p, efd_p), "worker efd");
    if (status == CKS_OK) {
        status = cks_tp_status(ucp_worker_get_address(*uw_p, addr_p, addr_len_p),
                               "worker address");
    }
    if (status == CKS_OK) {
        status = cks_tp_am_handler_set(*uw_p, CKS_TP_AM_ID, cks_tp_am_cb, w, "am handler");
        if (status != CKS_OK) {
            ucp_worker_release_address(*uw_p, *addr_p);
        }
    }
    if (status != CKS_OK) {
        ucp_worker_destroy(*uw_p);
    }
    return status;
}

/* UCX settings this transport needs where the user set none, in the
 * process environment (read by every UCX context made later; a user's own
 * value wins): UCX's TCP lanes connect with a blocking connect() unless
 * told otherwise (UCX 1.13). To a host that drops the SYNs - cut off, or a
 * firewall that passes only the listening port - that held the calling
 * progress thread in the kernel's SYN retries for about two minutes, every
 * other peer unanswered. Set once, before the first context: the
 * environment is not written while this library's threads read it. */
static pthread_once_t cks_tp_env_once = PTHREAD_ONCE_INIT;

static void cks_tp_env_defaults(void)
{
    setenv("UCX_TCP_CONN_NB", "y", 0);
}

cks_status_t cks_tp_worker_create(const cks_tp_worker_params_t *params,
                                  cks_tp_worker_h *worker_p)
{
    ucp_params_t cp;
    ucp_config_t *config;
    cks_tp_worker_h w;
    cks_status_t status;

    if (params == NULL || params->on_msg == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    w->held_fail  = cks_tp_held_release; /* a connection's end, for conn.c */
    w->calls_fail = cks_tp_calls_fail_conn;
    if (cks_hmap_create(&w->calls) != CKS_OK) {
        free(w);
        return CKS_ERR_NO_MEMORY;
    }
    w->params            = *params;
    w->data_peer_errmode = getenv("CKS_TP_DATA_PEER_ERRMODE") != NULL &&
                           strcmp(getenv("CKS_TP_DATA_PEER_ERRMODE"), "0") != 0;
    snprintf(w->name, sizeof(w->name), "%s", params->name ? params->name : "ckstore");

    pthread_once(&cks_tp_env_once, cks_tp_env_defaults);
    status = cks_tp_status(ucp_config_read(NULL, NULL, &config), "config read");
    if (status != CKS_OK) {
        goto err_free;
    }
    memset(&cp, 0, sizeof(cp));
    /* RMA: one-copy transfers from and to a local peer's memory (rma.c);
     * shared: cks_tp_mem_alloc() may run on another thread than the worker's */
    cp.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME |
                    UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    cp.features   = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    cp.mt_workers_shared = 1;
    cp.name       = w->name;
    status = cks_tp_status(ucp_init(&cp, config, &w->context), "ucp init");
    ucp_config_release(config);
    if (status != CKS_OK) {
        goto err_free;
    }
    status = cks_tp_ucp_worker_ready(w, &w->worker, &w->efd, &w->address, &w->address_len);
    if (status != CKS_OK) {
        goto err_cleanup;
    }
    cks_tp_rma_init(w);
    *worker_p = w;
    return CKS_OK;

err_cleanup:
    ucp_cleanup(w->context);
err_free:
    cks_hmap_destroy(w->calls);
    free(w);
    return status;
}

/*
 * The replacement: the new UCP worker takes over first, so that whatever
 * the owner does on hearing of its connections' end (a request sent again
 * elsewhere, a new connection) goes through it. Then the connections that
 * were open fail, as when their peers are lost; the old worker is
 * progressed (bounded) only to finish their endpoints' closes, which
 * complete the sends and receives UCX still held on them with errors.
 * Those it still holds after that are given up: their owners are told now,
 * and the requests stay with the old worker, never progressed again, until
 * the destroy.
 */
cks_status_t cks_tp_worker_renew(cks_tp_worker_h w)
{
    ucp_worker_h uw, old = w->worker;
    ucp_address_t *addr, *old_addr = w->address;
    size_t addr_len, nold = 0;
    int efd, watched = w->sentinel != NULL;
    cks_tp_conn_h *olds;
    cks_status_t status;

    if (w->stopping || w->in_progress > 0 || w->nlisteners > 0) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (w->nretired >= CKS_TP_RETIRED_MAX) {
        return CKS_ERR_BAD_STATE;
    }
    olds = malloc((w->nconns + 1) * sizeof(*olds));
    if (olds == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_tp_ucp_worker_ready(w, &uw, &efd, &addr, &addr_len);
    if (status != CKS_OK) {
        free(olds);
        return status;
    }
    cks_tp_sentinel_stop(w); /* its endpoint reaches the old worker */
    w->retired[w->nretired] = old;
    __atomic_add_fetch(&w->nretired, 1, __ATOMIC_RELAXED); /* cks_tp_worker_renewals() */
    __atomic_store_n(&w->worker, uw, __ATOMIC_RELEASE); /* cks_tp_worker_signal() */
    w->efd         = efd;
    w->address     = addr;
    w->address_len = addr_len;
    ucp_worker_release_address(old, old_addr);
    for (cks_tp_conn_h c = w->conns; c != NULL && nold <= w->nconns; c = c->next) {
        cks_tp_conn_get(c); /* the owner may put its own reference below */
        c->retired   = 1;
        olds[nold++] = c;
    }
    size_t nopen = 0;
    for (size_t i = 0; i < nold; i++) {
        if (!olds[i]->failed) {
            nopen += !olds[i]->closed;
            cks_tp_conn_fail(olds[i], 1, CKS_ERR_CONN_LOST); /* its calls, its owner */
        } else {
            cks_tp_conn_detach(olds[i], 1);
        }
    }
    uint64_t until = cks_time_ns() + 2000000000ull; /* bounded: 2 s */
    while (w->closing > 0 && cks_time_ns() < until) {
        cks_tp_progress_ucp(w, old);
        cks_tp_progress_once(w);
    }
    unsigned given_up = 0;
    for (cks_tp_send_req_t *s = w->inflight; s != NULL; s = s->in_next) {
        if (s->conn != NULL && s->conn->retired && s->cb != NULL) {
            cks_tp_done_cb_t cb = s->cb;
            s->cb               = NULL;
            given_up++;
            cb(s->arg, CKS_ERR_CONN_LOST);
        }
    }
    /* a callback may end other receives (a close it asks for completes
     * them): each one taken is unlinked first, and the walk starts again */
    for (cks_dl_t *e = w->recvs.head; e != NULL;) {
        cks_tp_recv_req_t *r = CKS_CONTAINER_OF(e, cks_tp_recv_req_t, dl);
        if (r->conn == NULL || !r->conn->retired) {
            e = e->next;
            continue;
        }
        cks_dl_del(&w->recvs, e);
        e->prev = e->next = NULL;
        cks_tp_done_cb_t cb = r->cb;
        cks_tp_conn_h conn  = r->conn;
        r->cb               = NULL;
        r->conn             = NULL;
        given_up++;
        if (cb != NULL) {
            cb(r->arg, CKS_ERR_CONN_LOST);
        }
        cks_tp_conn_put(conn);
        e = w->recvs.head;
    }
    for (size_t i = 0; i < nold; i++) {
        cks_tp_conn_put(olds[i]);
    }
    free(olds);
    if (watched && (status = cks_tp_sentinel_start(w)) != CKS_OK) {
        cks_warn("%s: no check of the new worker's receive path: %s", w->name,
                 cks_status_string(status));
    }
    cks_warn("%s: UCX worker replaced (%u of %u): %zu connections closed, %u transfers "
             "UCX still held given up", w->name, w->nretired, CKS_TP_RETIRED_MAX, nopen,
             given_up);
    return CKS_OK;
}

static void cks_tp_flush_done(void *request, ucs_status_t st, void *arg)
{
    cks_tp_worker_h w = arg;
    w->flushing       = st == UCS_OK ? 0 : -1;
    ucp_request_free(request);
}

/* Let UCX finish what it does on its own before the worker goes (bounded by
 * `until`): an endpoint UCX made for a peer's connection to us answers that
 * peer's wireup once its own TCP connect completes, and
 * ucp_worker_destroy() aborts the process on such an
 * answer still queued (UCX 1.13: "Assertion ... got REP message" in
 * ucp_request_send_state_ff(), seen in a client destroyed right after a
 * call to a server plugged back in). A worker flush completes only when no
 * TCP connect is in progress and every endpoint's queue is empty. A flush
 * that ended with an error is asked again (3 tries in all). */
static void cks_tp_worker_flush(cks_tp_worker_h w, uint64_t until)
{
    ucp_request_param_t fp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                              UCP_OP_ATTR_FIELD_USER_DATA,
                              .cb.send      = cks_tp_flush_done,
                              .user_data    = w};
    for (int tries = 0; tries < 3 && cks_time_ns() < until; tries++) {
        void *req = ucp_worker_flush_nbx(w->worker, &fp);
        if (req == NULL) {
            return; /* nothing in flight */
        }
        if (!UCS_PTR_IS_ERR(req)) {
            w->flushing = 1;
            while (w->flushing == 1 && cks_time_ns() < until) {
                cks_tp_progress_once(w);
            }
            if (w->flushing == 0) {
                return;
            }
            if (w->flushing == 1) {
                /* freed by UCX when it completes, or with the worker */
                cks_warn("%s: UCX did not finish its own connections in time", w->name);
                return;
            }
        }
        cks_tp_progress_once(w); /* failed: asked again after a pass */
    }
}

void cks_tp_worker_quiesce(cks_tp_worker_h w)
{
    if (w == NULL || w->stopping) {
        return;
    }
    w->stopping = 1;
    cks_tp_rma_pf_stop(w); /* its jobs hold connections and mappings */
    cks_tp_copy_stop(w);   /* so do the copy threads' */
    unsigned ncalls = 0;
    for (cks_dl_t *e = w->calls_dl.head; e != NULL; e = e->next) {
        ncalls++;
    }
    if (ncalls > 0) {
        cks_info("%s: stopping: %u outstanding calls canceled", w->name, ncalls);
    }
    /* Close what is still open; the closes purge sends still queued in UCX,
     * whose completions may finish calls too: each callback runs here, once. */
    cks_tp_calls_fail_conn(w, NULL, CKS_ERR_CANCELED);
    for (cks_tp_conn_h c = w->conns, next; c != NULL; c = next) {
        cks_tp_conn_get(c); /* detaching may drop its last other reference */
        c->failed = 1;
        cks_tp_conn_detach(c, 1);
        next = c->next;
        cks_tp_conn_put(c);
    }
    uint64_t until = cks_time_ns() + 2000000000ull; /* bounded: 2 s */
    while (w->closing > 0 && cks_time_ns() < until) {
        cks_tp_progress_once(w);
    }
    if (w->closing > 0) {
        cks_warn("%s: %u endpoints did not finish closing", w->name, w->closing);
    }
    cks_tp_worker_flush(w, until);
    /* Sends UCX still holds (to a stopped peer whose endpoint did not let
     * go of them): their owners are told now, while what they touch still
     * exists, and the requests are left to UCX (freed at destroy). */
    unsigned abandoned = 0;
    for (cks_tp_send_req_t *s = w->inflight, *next; s != NULL; s = next) {
        cks_tp_done_cb_t cb = s->cb;
        void *arg           = s->arg;
        next                = s->in_next;
        s->cb               = NULL;
        s->arg              = NULL;
        if (cb != NULL) {
            abandoned++;
            cb(arg, CKS_ERR_CANCELED);
        }
    }
    if (abandoned > 0) {
        cks_info("%s: %u sends still in UCX given up", w->name, abandoned);
    }
}

void cks_tp_worker_destroy(cks_tp_worker_h w)
{
    if (w == NULL) {
        return;
    }
    cks_tp_sentinel_stop(w);
    cks_tp_worker_quiesce(w);
    w->destroying = 1; /* sends UCX completes from here on touch nothing */
    /* receives UCX still holds: their completions, if any, touch nothing
     * (their connections are freed below) */
    for (cks_dl_t *e = w->recvs.head, *nx; e != NULL; e = nx) {
        cks_tp_recv_req_t *r = CKS_CONTAINER_OF(e, cks_tp_recv_req_t, dl);
        nx      = e->next;
        r->cb   = NULL;
        r->conn = NULL;
        e->prev = e->next = NULL;
    }
    w->recvs.head = w->recvs.tail = NULL;
    while (w->conns != NULL) { /* still referenced: their keys go before the worker */
        cks_tp_conn_h c = w->conns;
        w->conns        = c->next;
        cks_tp_rkeys_release(c);
        free(c->peer_waddr);
        free(c);
    }
    free(w->eps.slots);
    free(w->closing_eps.slots);
    free(w->deferred);
    cks_hmap_destroy(w->calls);
    ucp_worker_release_address(w->worker, w->address);
    ucp_worker_destroy(w->worker);
    for (unsigned i = 0; i < w->nretired; i++) {
        ucp_worker_destroy(w->retired[i]); /* completes what it held: touches nothing */
    }
    cks_tp_sends_free(w);
    ucp_cleanup(w->context);
    free(w->key_shape);
    free(w);
}

int cks_tp_worker_progress(cks_tp_worker_h w)
{
    int any = 0;
    while (cks_tp_progress_once(w)) {
        any = 1;
    }
    if (w->pf != NULL && cks_tp_rma_pf_poll(w) > 0) {
        any = 1;
    }
    if (w->copy != NULL && cks_tp_copy_poll(w) > 0) {
        any = 1;
    }
    w->progressed = any;
    return any;
}

int cks_tp_worker_efd(cks_tp_worker_h w)
{
    return w->efd;
}

cks_status_t cks_tp_worker_arm(cks_tp_worker_h w)
{
    ucs_status_t st = ucp_worker_arm(w->worker);
    if (st == UCS_ERR_BUSY) {
        /* see CKS_TP_STALL_SPINS */
        w->stalls = w->progressed ? 0 : w->stalls + 1;
        if (w->stalls > CKS_TP_STALL_SPINS) {
            unsigned shift     = CKS_MIN((w->stalls - 1) / CKS_TP_STALL_SPINS - 1, 4u);
            struct timespec ts = {0, (long)(CKS_TP_STALL_NS << shift)};
            nanosleep(&ts, NULL);
        }
        return CKS_ERR_BUSY;
    }
    w->stalls = 0;
    return cks_tp_status(st, "worker arm");
}

cks_status_t cks_tp_worker_wait(cks_tp_worker_h w, int timeout_ms)
{
    struct pollfd pfd = {.fd = w->efd, .events = POLLIN};
    cks_status_t status;

    cks_tp_worker_progress(w);
    status = cks_tp_worker_arm(w);
    if (status == CKS_ERR_BUSY) {
        return CKS_OK;
    } else if (status != CKS_OK) {
        return status;
    }
    if (poll(&pfd, 1, timeout_ms) < 0 && errno != EINTR) {
        cks_error("poll: %s", strerror(errno));
        return CKS_ERR_INTERNAL;
    }
    return CKS_OK;
}

void cks_tp_worker_signal(cks_tp_worker_h w)
{
    /* any thread: the worker may be replaced meanwhile (a replaced one
     * lives until the destroy; the loop then waits on the new one's fd,
     * and the caller's queue is looked at before each wait) */
    ucp_worker_signal(__atomic_load_n(&w->worker, __ATOMIC_ACQUIRE));
}

unsigned cks_tp_worker_renewals(cks_tp_worker_h w)
{
    return __atomic_load_n(&w->nretired, __ATOMIC_RELAXED); /* any thread */
}
