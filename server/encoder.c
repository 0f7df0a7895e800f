/*
 * DESIGN: the encoder threads. They take objects that a primary holds in its
 * arena, zero the padding of the last stripe, compute the parity of every
 * stripe with ISA-L, and the CRC of every chunk and of the object, each byte
 * touched while it is still in cache (stripe by stripe). Finished jobs go
 * back through a done queue, waking the progress thread with
 * cks_tp_worker_signal(). Never: touch UCX (but the signal), LMDB or the
 * arena allocator; the progress thread owns those.
 */
#include "server_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* This thread's CPU time: what the encoder uses of a core, not the time it
 * waits for one (the servers' threads share few cores). */
static uint64_t cks_enc_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void cks_enc_run(cks_enc_job_t *j)
{
    const uint64_t width = (uint64_t)j->k + j->m;
    const uint64_t data  = j->stripes * j->k * j->chunk;

    /* the last stripe's padding must be zeros: it is part of the code */
    memset(j->base + j->size, 0, data - j->size);
    j->status  = CKS_OK;
    j->obj_crc = cks_crc64(0, j->base, j->size);
    for (uint64_t s = 0; s < j->stripes; s++) {
        const uint8_t *d[CKS_EC_MAX_K];
        uint8_t *p[CKS_EC_MAX_M];
        for (unsigned i = 0; i < j->k; i++) {
            d[i] = j->base + (s * j->k + i) * j->chunk;
        }
        for (unsigned i = 0; i < j->m; i++) {
            p[i] = j->base + data + (s * j->m + i) * j->chunk;
        }
        uint64_t t0 = cks_enc_cpu_ns();
        if (cks_ec_encode(j->ec, j->chunk, d, p) != CKS_OK || cks_fault_fire("encoder")) {
            j->status = CKS_ERR_INTERNAL; /* the object cannot be protected */
            return;
        }
        j->encode_ns += cks_enc_cpu_ns() - t0;
        for (unsigned i = 0; i < j->k; i++) {
            j->crcs[s * width + i] = cks_crc64(0, d[i], j->chunk);
        }
        for (unsigned i = 0; i < j->m; i++) {
            j->crcs[s * width + j->k + i] = cks_crc64(0, p[i], j->chunk);
        }
    }
}

static void *cks_enc_thread(void *arg)
{
    cks_enc_t *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (e->head == NULL && !e->stop) {
            pthread_cond_wait(&e->cond, &e->lock);
        }
        if (e->head == NULL) {
            break;
        }
        cks_enc_job_t *j = e->head;
        e->head          = j->next;
        if (e->head == NULL) {
            e->tail = NULL;
        }
        pthread_mutex_unlock(&e->lock);

        uint64_t t0  = cks_enc_cpu_ns();
        j->encode_ns = 0;
        cks_enc_run(j);
        uint64_t job_ns = cks_enc_cpu_ns() - t0;

        pthread_mutex_lock(&e->lock);
        if (j->status == CKS_OK) {
            e->st_bytes += j->size;
            e->st_encode_ns += j->encode_ns;
            e->st_job_ns += job_ns;
        }
        j->next = NULL;
        if (e->done_tail != NULL) {
            e->done_tail->next = j;
        } else {
            e->done_head = j;
        }
        e->done_tail = j;
        cks_tp_worker_signal(e->tp);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

cks_status_t cks_enc_start(cks_enc_t *e, unsigned nthreads, cks_tp_worker_h tp)
{
    memset(e, 0, sizeof(*e));
    e->tp      = tp;
    e->threads = calloc(nthreads, sizeof(*e->threads));
    if (e->threads == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    for (unsigned i = 0; i < nthreads; i++) {
        if (pthread_create(&e->threads[i], NULL, cks_enc_thread, e) != 0) {
            (void)cks_enc_stop(e); /* nothing was queued yet */
            return CKS_ERR_NO_MEMORY;
        }
        e->nthreads++;
    }
    return CKS_OK;
}

cks_enc_job_t *cks_enc_stop(cks_enc_t *e)
{
    if (e->threads == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&e->lock);
    e->stop = 1;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    for (unsigned i = 0; i < e->nthreads; i++) {
        pthread_join(e->threads[i], NULL);
    }
    cks_enc_job_t *done = e->done_head; /* the threads ran every queued job */
    e->done_head = e->done_tail = NULL;
    free(e->threads);
    e->threads = NULL;
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    return done;
}

void cks_enc_push(cks_enc_t *e, cks_enc_job_t *job)
{
    job->next = NULL;
    pthread_mutex_lock(&e->lock);
    if (e->tail != NULL) {
        e->tail->next = job;
    } else {
        e->head = job;
    }
    e->tail = job;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

cks_enc_job_t *cks_enc_take_done(cks_enc_t *e)
{
    if (e->threads == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&e->lock);
    cks_enc_job_t *list = e->done_head;
    e->done_head = e->done_tail = NULL;
    pthread_mutex_unlock(&e->lock);
    return list;
}
