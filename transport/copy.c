/*
 * DESIGN: copy threads for large transfers between this process and a
 * peer's region mapped here (transport/rma.c). Between processes of one host
 * UCX serves a get or a put from a mapped region with one memcpy() on the
 * worker's thread: one core moves every byte of a server, whatever the
 * number of cores, and nothing else progresses meanwhile. With copy threads
 * (cks_tp_worker_copy_threads()), a transfer of at least CKS_TP_COPY_MIN
 * bytes is cut into parts of CKS_TP_COPY_PART bytes that the threads take
 * in order, first job first; the peer's pages of a part not yet in our page
 * tables are faulted in by the thread that copies it (in parallel too). When
 * a job's last part is copied it goes on the done list and the worker is
 * signalled; its callback runs on the worker's thread (cks_tp_copy_poll()).
 * A checked job (the whole object a get writes into the client's memory):
 * the thread that copies a part computes its CRC over the bytes as written,
 * while they are in its cache (one pass over memory, as the progress
 * thread's checked write does), and the worker's thread combines the parts'
 * CRCs in order (check->combine) and fails the job with
 * CKS_ERR_CRC_MISMATCH when the result is not the stored one.
 *
 * Ownership: a job's source and destination stay valid until its callback
 * (the caller holds the mapping's and the connection's references); the job
 * itself is this file's, freed after its callback.
 *
 * Must never: run a callback on a copy thread; leave a job uncalled at
 * stop (queued parts are cancelled, running ones finished, then every job
 * is called back: CKS_ERR_CANCELED where a part was not copied).
 */
#include "tp_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CKS_TP_COPY_THREADS_MAX 16u
#define CKS_TP_PAGE             4096u

struct cks_tp_copy_job {
    cks_tp_copy_job_t *next;
    uint8_t *dst;
    const uint8_t *src;
    size_t len;
    size_t taken;          /* bytes handed to threads */
    size_t left;           /* bytes not yet copied (or cancelled) */
    int fault;             /* 1: fault the peer's side of each part in first */
    int peer_is_dst;       /* which side is the peer's mapping */
    int canceled;
    /* checked: each part's CRC over the bytes as written (crcs[part]),
     * combined in order at the end; the job fails if it is not expect */
    cks_tp_check_t check;
    uint64_t *crcs;        /* NULL: not checked */
    cks_tp_copy_cb_t cb;
    void *arg;
};

struct cks_tp_copy {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t threads[CKS_TP_COPY_THREADS_MAX];
    unsigned nthreads;
    cks_tp_copy_job_t *head, *tail; /* jobs with parts not yet taken */
    cks_tp_copy_job_t *done;        /* for the worker's thread */
    int stop;
    uint64_t jobs, bytes;           /* submitted, for the log at stop */
    cks_tp_worker_h w;
};

/* Fault [p, p + n) in, page-aligned outward; a failure only costs faults
 * during the copy. */
static void cks_tp_copy_fault(const uint8_t *p, size_t n)
{
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(CKS_TP_PAGE - 1);
    uintptr_t e = ((uintptr_t)p + n + CKS_TP_PAGE - 1) & ~(uintptr_t)(CKS_TP_PAGE - 1);
    (void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
}

/* Under the lock: a part of the first job, or NULL. */
static cks_tp_copy_job_t *cks_tp_copy_take(struct cks_tp_copy *cp, size_t *off_p, size_t *n_p)
{
    cks_tp_copy_job_t *j = cp->head;

    if (j == NULL) {
        return NULL;
    }
    *off_p = j->taken;
    *n_p   = CKS_MIN(j->len - j->taken, (size_t)CKS_TP_COPY_PART);
    j->taken += *n_p;
    if (j->taken == j->len) {
        cp->head = j->next;
        if (cp->head == NULL) {
            cp->tail = NULL;
        }
        j->next = NULL;
    }
    return j;
}

/* Under the lock: n bytes of j are settled; the last ones move it to done. */
static void cks_tp_copy_settle(struct cks_tp_copy *cp, cks_tp_copy_job_t *j, size_t n)
{
    j->left -= n;
    if (j->left == 0) {
        j->next  = cp->done;
        cp->done = j;
        cks_tp_worker_signal(cp->w); /* thread-safe: wakes the worker's thread */
    }
}

static void *cks_tp_copy_thread(void *arg)
{
    struct cks_tp_copy *cp = arg;
    cks_tp_copy_job_t *j;
    size_t off, n;

    (void)pthread_setname_np(pthread_self(), "cks-copy");
    pthread_mutex_lock(&cp->lock);
    for (;;) {
        while (cp->head == NULL && !cp->stop) {
            pthread_cond_wait(&cp->cond, &cp->lock);
        }
        if (cp->stop) {
            break; /* what is queued is cancelled by cks_tp_copy_stop() */
        }
        j = cks_tp_copy_take(cp, &off, &n);
        pthread_mutex_unlock(&cp->lock);
        if (j->fault) {
            cks_tp_copy_fault(j->peer_is_dst ? j->dst + off : j->src + off, n);
        }
        memcpy(j->dst + off, j->src + off, n);
        if (j->crcs != NULL) { /* the bytes as written, while in this core's cache */
            j->crcs[off / CKS_TP_COPY_PART] = j->check.fn(0, j->dst + off, n);
        }
        pthread_mutex_lock(&cp->lock);
        cks_tp_copy_settle(cp, j, n);
    }
    pthread_mutex_unlock(&cp->lock);
    return NULL;
}

cks_status_t cks_tp_worker_copy_threads(cks_tp_worker_h w, unsigned nthreads)
{
    struct cks_tp_copy *cp;

    if (w == NULL || w->copy != NULL || nthreads > CKS_TP_COPY_THREADS_MAX) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (nthreads == 0) {
        return CKS_OK; /* UCX copies on the worker's thread */
    }
    if ((cp = calloc(1, sizeof(*cp))) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    cp->w = w;
    pthread_mutex_init(&cp->lock, NULL);
    pthread_cond_init(&cp->cond, NULL);
    for (; cp->nthreads < nthreads; cp->nthreads++) {
        if (pthread_create(&cp->threads[cp->nthreads], NULL, cks_tp_copy_thread, cp) != 0) {
            break;
        }
    }
    if (cp->nthreads == 0) {
        pthread_cond_destroy(&cp->cond);
        pthread_mutex_destroy(&cp->lock);
        free(cp);
        return CKS_ERR_NO_MEMORY;
    }
    if (cp->nthreads < nthreads) {
        cks_warn("%s: %u of %u copy threads started", w->name, cp->nthreads, nthreads);
    }
    w->copy = cp;
    cks_info("%s: %u copy threads for transfers of %u KiB and more", w->name, cp->nthreads,
             CKS_TP_COPY_MIN >> 10);
    return CKS_OK;
}

int cks_tp_copy_wants(cks_tp_worker_h w, size_t len)
{
    return w->copy != NULL && !w->stopping && len >= CKS_TP_COPY_MIN;
}

cks_status_t cks_tp_copy_submit(cks_tp_worker_h w, void *dst, const void *src, size_t len,
                                int fault, int peer_is_dst, const cks_tp_check_t *check,
                                cks_tp_copy_cb_t cb, void *arg)
{
    struct cks_tp_copy *cp = w->copy;
    cks_tp_copy_job_t *j;

    if (cp == NULL || len == 0 || cb == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    if ((j = calloc(1, sizeof(*j))) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    j->dst         = dst;
    j->src         = src;
    j->len         = len;
    j->left        = len;
    j->fault       = fault;
    j->peer_is_dst = peer_is_dst;
    j->cb          = cb;
    j->arg         = arg;
    if (check != NULL) {
        if (check->combine == NULL ||
            (j->crcs = malloc((len + CKS_TP_COPY_PART - 1) / CKS_TP_COPY_PART *
                              sizeof(*j->crcs))) == NULL) {
            free(j);
            return check->combine == NULL ? CKS_ERR_INVALID_PARAM : CKS_ERR_NO_MEMORY;
        }
        j->check = *check;
    }
    pthread_mutex_lock(&cp->lock);
    cp->jobs++;
    cp->bytes += len;
    CKS_QUEUE_PUSH(cp->head, cp->tail, j);
    pthread_cond_broadcast(&cp->cond);
    pthread_mutex_unlock(&cp->lock);
    return CKS_OK;
}

unsigned cks_tp_copy_poll(cks_tp_worker_h w)
{
    struct cks_tp_copy *cp = w->copy;
    cks_tp_copy_job_t *list, *rev = NULL;
    unsigned n = 0;

    if (cp == NULL) {
        return 0;
    }
    pthread_mutex_lock(&cp->lock);
    list     = cp->done;
    cp->done = NULL;
    pthread_mutex_unlock(&cp->lock);
    while (list != NULL) { /* call back in the order they finished */
        cks_tp_copy_job_t *next = list->next;
        list->next              = rev;
        rev                     = list;
        list                    = next;
    }
    while (rev != NULL) {
        cks_tp_copy_job_t *next = rev->next;
        cks_status_t status = rev->canceled ? CKS_ERR_CANCELED : CKS_OK;
        if (status == CKS_OK && rev->crcs != NULL) {
            uint64_t crc = 0;
            for (size_t off = 0; off < rev->len; off += CKS_TP_COPY_PART) {
                size_t part = CKS_MIN((size_t)CKS_TP_COPY_PART, rev->len - off);
                crc = rev->check.combine(crc, rev->crcs[off / CKS_TP_COPY_PART], part);
            }
            status = crc == rev->check.expect ? CKS_OK : CKS_ERR_CRC_MISMATCH;
        }
        rev->cb(rev->arg, status);
        free(rev->crcs);
        free(rev);
        rev = next;
        n++;
    }
    return n;
}

void cks_tp_copy_stop(cks_tp_worker_h w)
{
    struct cks_tp_copy *cp = w->copy;

    if (cp == NULL) {
        return;
    }
    pthread_mutex_lock(&cp->lock);
    cp->stop = 1;
    pthread_cond_broadcast(&cp->cond);
    pthread_mutex_unlock(&cp->lock);
    for (unsigned i = 0; i < cp->nthreads; i++) {
        pthread_join(cp->threads[i], NULL); /* each finishes the part it copies */
    }
    while (cp->head != NULL) { /* parts never taken: cancelled */
        cks_tp_copy_job_t *j = cp->head;
        cp->head             = j->next;
        j->canceled          = 1;
        cks_tp_copy_settle(cp, j, j->len - j->taken);
    }
    cp->tail = NULL;
    cks_tp_copy_poll(w);
    cks_info("%s: copy threads: %llu transfers, %llu bytes", w->name,
             (unsigned long long)cp->jobs, (unsigned long long)cp->bytes);
    pthread_cond_destroy(&cp->cond);
    pthread_mutex_destroy(&cp->lock);
    free(cp);
    w->copy = NULL;
}
