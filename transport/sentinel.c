/*
 * DESIGN: the sentinel - a check that the worker still receives. A second
 * UCX worker of the same context, progressed on the worker's own thread,
 * sends the worker a small active message (its own id) every second. UCX
 * carries it the way it carries a message from another process on this
 * host (its shared-memory FIFO, where the worker has one), into the same
 * receive path as every peer's messages.
 *
 * Why: UCX 1.13's shared-memory sender takes a slot of the receiver's FIFO
 * (a CAS on its head), copies the message in, then marks the slot written.
 * A sender SIGKILLed in between leaves the slot unwritten for good, and the
 * receiver takes no message from anyone after it: it runs, arms, is told
 * there is data, finds none (the stacks of such a server: its loop in
 * cks_tp_worker_arm()'s back-off, for ever). Nothing inside the worker can
 * tell that from peers that have nothing to say; a message of its own that
 * never arrives can. What to do about it is the owner's choice
 * (ckstore-server exits, so that its supervisor starts it again).
 *
 * Only seconds the worker's thread runs count (cks_tp_sentinel_poll() is
 * called from its loop): a process that was stopped (SIGSTOP) and goes on
 * takes the messages that waited, and the count starts again.
 *
 * Never: send more than one message at a time (one that cannot go waits in
 * UCX; the next is sent once it went), or block.
 */
#include "tp_int.h"

#include <stdlib.h>
#include <string.h>

struct cks_tp_sentinel {
    ucp_worker_h worker;    /* the sender's */
    ucp_ep_h ep;            /* to the watched worker */
    void *req;              /* the message UCX still holds, if any */
    uint64_t seq;           /* the message being sent (its payload) */
    uint64_t sent, got;     /* messages sent; messages the watched worker took */
    uint64_t got_seen;      /* `got` at the last tick */
    uint64_t next_ns;       /* the next tick */
    unsigned dry;           /* ticks in a row with nothing taken while one was out */
};

static ucs_status_t cks_tp_sentinel_am(void *arg, const void *header, size_t header_length,
                                       void *data, size_t length,
                                       const ucp_am_recv_param_t *param)
{
    cks_tp_worker_h w = arg;
    (void)header;
    (void)header_length;
    (void)data;
    (void)param;
    /* test builds: the receive path of the worker as first made takes
     * nothing (a replaced one's, cks_tp_worker_renew(), works again) */
    if (length == sizeof(uint64_t) && w->sentinel != NULL &&
        !(w->nretired == 0 && cks_fault_fire("sentinel_lost"))) {
        w->sentinel->got++;
    }
    return UCS_OK;
}

cks_status_t cks_tp_sentinel_start(cks_tp_worker_h w)
{
    ucp_ep_params_t ep;
    struct cks_tp_sentinel *sn;
    cks_status_t status;

    if (w->sentinel != NULL) {
        return CKS_OK;
    }
    sn = calloc(1, sizeof(*sn));
    if (sn == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_tp_am_handler_set(w->worker, CKS_TP_AM_SENTINEL, cks_tp_sentinel_am, w,
                                   "sentinel handler");
    if (status == CKS_OK) {
        status = cks_tp_ucp_worker_new(w->context, &sn->worker, "sentinel worker");
    }
    if (status != CKS_OK) {
        free(sn);
        return status;
    }
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address    = w->address;
    status = cks_tp_status(ucp_ep_create(sn->worker, &ep, &sn->ep), "sentinel endpoint");
    if (status != CKS_OK) {
        ucp_worker_destroy(sn->worker);
        free(sn);
        return status;
    }
    sn->next_ns = cks_time_ns();
    w->sentinel = sn;
    return CKS_OK;
}

unsigned cks_tp_sentinel_poll(cks_tp_worker_h w, int *next_ms)
{
    struct cks_tp_sentinel *sn = w->sentinel;
    uint64_t now;

    if (sn == NULL) {
        *next_ms = -1;
        return 0;
    }
    while (ucp_worker_progress(sn->worker) != 0) {
    }
    now = cks_time_ns();
    if (now < sn->next_ns) {
        *next_ms = (int)((sn->next_ns - now + 999999) / 1000000);
        return sn->dry;
    }
    sn->next_ns = now + CKS_TP_SENTINEL_EVERY_NS;
    *next_ms    = (int)(CKS_TP_SENTINEL_EVERY_NS / 1000000);
    ucs_status_t st = sn->req != NULL ? ucp_request_check_status(sn->req) : UCS_OK;
    if (sn->req != NULL && st != UCS_INPROGRESS) {
        if (st != UCS_OK) { /* it never went: not one that waits */
            cks_tp_status(st, "sentinel send");
            sn->sent--;
        }
        ucp_request_free(sn->req);
        sn->req = NULL;
    }
    if (sn->got != sn->got_seen || sn->got == sn->sent) {
        sn->dry = 0; /* one came in, or none is out */
    } else {
        sn->dry++;
    }
    sn->got_seen = sn->got;
    if (sn->req != NULL) {
        return sn->dry; /* the last one has not gone yet */
    }
    ucp_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags        = UCP_AM_SEND_FLAG_EAGER;
    sn->seq         = sn->sent + 1;
    void *req = ucp_am_send_nbx(sn->ep, CKS_TP_AM_SENTINEL, NULL, 0, &sn->seq, sizeof(sn->seq),
                                &rp);
    if (UCS_PTR_IS_ERR(req)) {
        cks_tp_status(UCS_PTR_STATUS(req), "sentinel send");
        return sn->dry;
    }
    sn->sent++;
    sn->req = req; /* NULL: it went at once */
    return sn->dry;
}

void cks_tp_sentinel_stop(cks_tp_worker_h w)
{
    struct cks_tp_sentinel *sn = w->sentinel;
    if (sn == NULL) {
        return;
    }
    w->sentinel = NULL;
    if (sn->req != NULL) {
        ucp_request_cancel(sn->worker, sn->req);
        ucp_request_free(sn->req);
    }
    ucp_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    void *req       = ucp_ep_close_nbx(sn->ep, &rp);
    for (int i = 0; i < 10000 && req != NULL && !UCS_PTR_IS_ERR(req) &&
                    ucp_request_check_status(req) == UCS_INPROGRESS;
         i++) {
        ucp_worker_progress(sn->worker);
        ucp_worker_progress(w->worker);
    }
    if (req != NULL && !UCS_PTR_IS_ERR(req)) {
        ucp_request_free(req);
    }
    ucp_worker_destroy(sn->worker);
    free(sn);
}
