/*
 * DESIGN: prefault - a mapped client region's pages touched ahead of its
 * transfers on a background thread, so that the first snapshot does not
 * pay the page faults on the progress thread. See rma.c for the whole
 * design.
 *
 * The helper thread is the one thread of a background-work queue
 * (common/workq.c) that does not drain: at the stop, the region being
 * faulted in gives up between slices and the regions not started are
 * called back with CKS_ERR_CANCELED, on the worker's thread.
 *
 * Never: touch a region after it was unmapped.
 */
#include "tp_int.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

/* ---- prefault ------------------------------------------------------------------ *
 * A region a peer names ahead of its transfers (MEM_MAP) is mapped here at
 * once and its pages faulted into our page tables by one helper thread, in
 * slices, so that neither the worker's thread nor the first transfers pay
 * for it (4 KiB pages of shared memory: about 40 ms per 512 MiB). The job
 * holds the connection and the key (refs), so the mapping outlives it. */

#define CKS_TP_PF_SLICE (32u << 20) /* faulted in per call; the stop is checked between */

typedef struct {
    cks_workq_job_t wq; /* the prefault queue's link */
    cks_tp_conn_h conn; /* one reference */
    cks_tp_rkey_t *rk;  /* held (refs) */
    uint8_t *addr;      /* the region as mapped here */
    size_t len;
    int err;            /* errno of a failed madvise(); -1: stopped first */
    cks_tp_done_cb_t cb;
    void *arg;
} cks_tp_pf_job_t;

/* One region, on the prefault thread: faulted in slice by slice, giving up
 * between slices once the queue stops. */
static void cks_tp_pf_run(cks_workq_t *q, cks_workq_job_t *l, void *arg)
{
    cks_tp_pf_job_t *j = CKS_CONTAINER_OF(l, cks_tp_pf_job_t, wq);

    (void)arg;
    j->err = 0;
    for (size_t off = 0; off < j->len && j->err == 0; off += CKS_TP_PF_SLICE) {
        size_t n = CKS_MIN((size_t)CKS_TP_PF_SLICE, j->len - off);
        if (madvise(j->addr + off, n, MADV_POPULATE_WRITE) != 0) {
            j->err = errno != 0 ? errno : EIO;
        } else if (cks_workq_stopping(q)) {
            j->err = -1;
        }
    }
}

static void cks_tp_pf_wake(void *arg)
{
    cks_tp_worker_h w = arg;
    cks_tp_worker_signal(w); /* thread-safe: wakes the worker's thread */
}

static void cks_tp_pf_finish(cks_tp_pf_job_t *j)
{
    cks_tp_rkey_t *rk   = j->rk;
    cks_status_t status = CKS_OK;

    if (j->err == 0) {
        /* every block is in our page tables: transfers skip the fault-in */
        memset(rk->faulted, 0xff, (rk->seg_len / CKS_TP_FAULT_BLOCK + 8) / 8);
    } else if (j->err < 0) {
        status = CKS_ERR_CANCELED;
    } else {
        status = j->err == EINVAL ? CKS_ERR_UNSUPPORTED : CKS_ERR_NO_MEMORY;
        cks_warn("%s: faulting in %zu bytes of %s's memory: %s", j->conn->worker->name, j->len,
                 j->conn->peer, strerror(j->err));
    }
    rk->refs--;
    j->cb(j->arg, status);
    cks_tp_conn_put(j->conn); /* may free the connection, and its keys */
    free(j);
}

/* Call back a list of jobs, oldest first; returns how many. */
static unsigned cks_tp_pf_finish_list(cks_workq_job_t *l)
{
    unsigned n = 0;

    while (l != NULL) {
        cks_tp_pf_job_t *j = CKS_CONTAINER_OF(l, cks_tp_pf_job_t, wq);
        l                  = l->next;
        cks_tp_pf_finish(j);
        n++;
    }
    return n;
}

unsigned cks_tp_rma_pf_poll(cks_tp_worker_h w)
{
    return cks_tp_pf_finish_list(cks_workq_take_done(w->pf));
}

void cks_tp_rma_pf_stop(cks_tp_worker_h w)
{
    cks_workq_job_t *left;

    if (w->pf == NULL) {
        return;
    }
    left = cks_workq_stop(w->pf); /* the running job gives up between slices */
    for (cks_workq_job_t *l = left; l != NULL; l = l->next) {
        CKS_CONTAINER_OF(l, cks_tp_pf_job_t, wq)->err = -1; /* never started */
    }
    cks_tp_rma_pf_poll(w); /* what finished, then what never started */
    cks_tp_pf_finish_list(left);
    cks_workq_destroy(w->pf);
    w->pf = NULL;
}

/* The worker's prefault queue, started at its first use. */
static cks_status_t cks_tp_pf_get(cks_tp_worker_h w, cks_workq_t **q_p)
{
    cks_workq_params_t p = {.nthreads = 1,
                            .flags    = 0, /* at stop, what is queued is canceled */
                            .run      = cks_tp_pf_run,
                            .wake     = cks_tp_pf_wake,
                            .arg      = w,
                            .name     = "cks-prefault"};
    cks_status_t status = w->pf != NULL ? CKS_OK : cks_workq_create(&p, &w->pf);

    if (status == CKS_OK) {
        *q_p = w->pf;
    }
    return status;
}

cks_status_t cks_tp_rma_prefault(cks_tp_conn_h conn, const cks_tp_data_t *data,
                                 cks_tp_done_cb_t cb, void *arg)
{
    cks_workq_t *q;
    cks_tp_pf_job_t *j;
    cks_tp_rkey_t *rk;
    cks_status_t status;
    uint64_t nblocks;
    int all = 1;

    if (conn == NULL || data == NULL || !data->is_rma || cb == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_tp_rkey_get(conn, data, &rk); /* maps it, once */
    if (status != CKS_OK) {
        return status;
    }
    if (rk->local == NULL || rk->faulted == NULL) {
        return CKS_OK; /* UCX reaches it without a mapping here */
    }
    nblocks = (rk->seg_len + CKS_TP_FAULT_BLOCK - 1) / CKS_TP_FAULT_BLOCK;
    for (uint64_t b = 0; b < nblocks && all; b++) {
        all = (rk->faulted[b / 8] >> (b % 8)) & 1u;
    }
    if (all) {
        return CKS_OK;
    }
    status = cks_tp_pf_get(conn->worker, &q);
    if (status != CKS_OK) {
        return status;
    }
    if ((j = calloc(1, sizeof(*j))) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    j->conn = conn;
    j->rk   = rk;
    j->addr = rk->local;
    j->len  = (size_t)rk->seg_len;
    j->cb   = cb;
    j->arg  = arg;
    rk->refs++;
    cks_tp_conn_get(conn);
    status = cks_workq_push(q, &j->wq);
    if (status != CKS_OK) { /* its thread was stopped: no callback */
        rk->refs--;
        cks_tp_conn_put(conn);
        free(j);
        return status;
    }
    return CKS_INPROGRESS;
}
