/*
 * DESIGN: prefault - a mapped client region's pages touched ahead of its
 * transfers on a background thread, so that the first snapshot does not
 * pay the page faults on the progress thread. See rma.c for the whole
 * design.
 *
 * Never: touch a region after it was unmapped.
 */
#include "tp_int.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <pthread.h>
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

typedef struct cks_tp_pf_job {
    struct cks_tp_pf_job *next;
    cks_tp_conn_h conn; /* one reference */
    cks_tp_rkey_t *rk;  /* held (refs) */
    uint8_t *addr;      /* the region as mapped here */
    size_t len;
    int err;            /* errno of a failed madvise(); -1: stopped first */
    cks_tp_done_cb_t cb;
    void *arg;
} cks_tp_pf_job_t;

struct cks_tp_pf {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    cks_tp_pf_job_t *head, *tail; /* queued, oldest first */
    cks_tp_pf_job_t *done;        /* finished, for the worker's thread */
    int stop;
    cks_tp_worker_h w;
};

static void *cks_tp_pf_thread(void *arg)
{
    struct cks_tp_pf *pf = arg;

    pthread_mutex_lock(&pf->lock);
    for (;;) {
        while (pf->head == NULL && !pf->stop) {
            pthread_cond_wait(&pf->cond, &pf->lock);
        }
        if (pf->stop) {
            break; /* the rest is called back as canceled */
        }
        cks_tp_pf_job_t *j = pf->head;
        pf->head           = j->next;
        if (pf->head == NULL) {
            pf->tail = NULL;
        }
        pthread_mutex_unlock(&pf->lock);
        j->err = 0;
        for (size_t off = 0; off < j->len && j->err == 0; off += CKS_TP_PF_SLICE) {
            size_t n = CKS_MIN((size_t)CKS_TP_PF_SLICE, j->len - off);
            if (madvise(j->addr + off, n, MADV_POPULATE_WRITE) != 0) {
                j->err = errno != 0 ? errno : EIO;
            } else if (__atomic_load_n(&pf->stop, __ATOMIC_RELAXED)) {
                j->err = -1;
            }
        }
        pthread_mutex_lock(&pf->lock);
        j->next  = pf->done;
        pf->done = j;
        ucp_worker_signal(pf->w->worker); /* thread-safe: wakes the worker's thread */
    }
    pthread_mutex_unlock(&pf->lock);
    return NULL;
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

unsigned cks_tp_rma_pf_poll(cks_tp_worker_h w)
{
    struct cks_tp_pf *pf = w->pf;
    cks_tp_pf_job_t *list;
    unsigned n = 0;

    pthread_mutex_lock(&pf->lock);
    list     = pf->done;
    pf->done = NULL;
    pthread_mutex_unlock(&pf->lock);
    while (list != NULL) {
        cks_tp_pf_job_t *next = list->next;
        cks_tp_pf_finish(list);
        list = next;
        n++;
    }
    return n;
}

void cks_tp_rma_pf_stop(cks_tp_worker_h w)
{
    struct cks_tp_pf *pf = w->pf;

    if (pf == NULL) {
        return;
    }
    pthread_mutex_lock(&pf->lock);
    __atomic_store_n(&pf->stop, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&pf->cond);
    pthread_mutex_unlock(&pf->lock);
    pthread_join(pf->thread, NULL);
    for (cks_tp_pf_job_t *j = pf->head; j != NULL; j = j->next) {
        j->err = -1;
    }
    if (pf->tail != NULL) {
        pf->tail->next = pf->done;
        pf->done       = pf->head;
        pf->head = pf->tail = NULL;
    }
    cks_tp_rma_pf_poll(w);
    pthread_cond_destroy(&pf->cond);
    pthread_mutex_destroy(&pf->lock);
    free(pf);
    w->pf = NULL;
}

static struct cks_tp_pf *cks_tp_pf_get(cks_tp_worker_h w)
{
    struct cks_tp_pf *pf = w->pf;

    if (pf != NULL) {
        return pf;
    }
    pf = calloc(1, sizeof(*pf));
    if (pf == NULL) {
        return NULL;
    }
    pf->w = w;
    pthread_mutex_init(&pf->lock, NULL);
    pthread_cond_init(&pf->cond, NULL);
    if (pthread_create(&pf->thread, NULL, cks_tp_pf_thread, pf) != 0) {
        pthread_cond_destroy(&pf->cond);
        pthread_mutex_destroy(&pf->lock);
        free(pf);
        return NULL;
    }
    w->pf = pf;
    return pf;
}

cks_status_t cks_tp_rma_prefault(cks_tp_conn_h conn, const cks_tp_data_t *data,
                                 cks_tp_done_cb_t cb, void *arg)
{
    struct cks_tp_pf *pf;
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
    if ((pf = cks_tp_pf_get(conn->worker)) == NULL || (j = calloc(1, sizeof(*j))) == NULL) {
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
    pthread_mutex_lock(&pf->lock);
    if (pf->tail != NULL) {
        pf->tail->next = j;
    } else {
        pf->head = j;
    }
    pf->tail = j;
    pthread_cond_signal(&pf->cond);
    pthread_mutex_unlock(&pf->lock);
    return CKS_INPROGRESS;
}
