/*
 * DESIGN: the encoder threads. They take objects that a primary holds in its
 * arena, zero the padding of the last stripe, compute the parity of every
 * stripe with ISA-L, and the CRC of every chunk, each byte touched while it
 * is still in cache (stripe by stripe); the object's CRC is combined from its
 * data chunks' (cks_crc64_combine()), not read from memory once more. They
 * are the threads of a background-work queue (common/workq.c), one job at a
 * time; finished jobs go back through its done list, waking the progress
 * thread with cks_tp_worker_signal(); the stop runs every queued job.
 * Never: touch UCX (but the signal), LMDB or the arena allocator; the
 * progress thread owns those.
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
    j->obj_crc = 0;
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
            uint64_t off = (s * j->k + i) * j->chunk;
            j->crcs[s * width + i] = cks_crc64(0, d[i], j->chunk);
            /* the object's CRC from its chunks' (no pass of its own over
             * memory): whole chunks combined, the last one's bytes before
             * the padding CRCed while they are in cache */
            if (off + j->chunk <= j->size) {
                j->obj_crc = cks_crc64_combine(j->obj_crc, j->crcs[s * width + i], j->chunk);
            } else if (off < j->size) {
                j->obj_crc = cks_crc64(j->obj_crc, d[i], j->size - off);
            }
        }
        for (unsigned i = 0; i < j->m; i++) {
            j->crcs[s * width + j->k + i] = cks_crc64(0, p[i], j->chunk);
        }
    }
}

/* One job, on an encoder thread; its figures are counted before the queue
 * puts it on the done list, so a job taken back is always counted. */
static void cks_enc_work(cks_workq_t *wq, cks_workq_job_t *l, void *arg)
{
    cks_enc_t *e     = arg;
    cks_enc_job_t *j = CKS_CONTAINER_OF(l, cks_enc_job_t, wq);

    (void)wq;
    uint64_t t0  = cks_enc_cpu_ns();
    j->encode_ns = 0;
    cks_enc_run(j);
    uint64_t job_ns = cks_enc_cpu_ns() - t0;

    if (j->status == CKS_OK) {
        pthread_mutex_lock(&e->st_lock);
        e->st_bytes += j->size;
        e->st_encode_ns += j->encode_ns;
        e->st_job_ns += job_ns;
        pthread_mutex_unlock(&e->st_lock);
    }
}

/* A job is on the done list: wake the progress thread. */
static void cks_enc_wake(void *arg)
{
    cks_tp_worker_signal(((cks_enc_t *)arg)->tp);
}

cks_status_t cks_enc_start(cks_enc_t *e, unsigned nthreads, unsigned nice,
                           cks_tp_worker_h tp)
{
    cks_workq_params_t p = {.nthreads = nthreads,
                            .flags    = CKS_WORKQ_DRAIN,
                            .run      = cks_enc_work,
                            .wake     = cks_enc_wake,
                            .arg      = e,
                            .nice     = nice,
                            .name     = "cks-encoder"};
    cks_status_t status;

    memset(e, 0, sizeof(*e));
    e->tp = tp;
    pthread_mutex_init(&e->st_lock, NULL);
    status = cks_workq_create(&p, &e->wq);
    if (status != CKS_OK) {
        pthread_mutex_destroy(&e->st_lock);
    }
    return status;
}

cks_workq_job_t *cks_enc_stop(cks_enc_t *e)
{
    cks_workq_job_t *done;

    if (e->wq == NULL) {
        return NULL;
    }
    (void)cks_workq_stop(e->wq); /* drains: the threads ran every queued job */
    done = cks_workq_take_done(e->wq);
    cks_workq_destroy(e->wq);
    e->wq = NULL;
    pthread_mutex_destroy(&e->st_lock);
    return done;
}

cks_status_t cks_enc_push(cks_enc_t *e, cks_enc_job_t *job)
{
    return e->wq != NULL ? cks_workq_push(e->wq, &job->wq) : CKS_ERR_CANCELED;
}

cks_workq_job_t *cks_enc_take_done(cks_enc_t *e)
{
    return e->wq != NULL ? cks_workq_take_done(e->wq) : NULL;
}

void cks_enc_stats(cks_enc_t *e, uint64_t *bytes_p, uint64_t *encode_ns_p,
                   uint64_t *job_ns_p)
{
    *bytes_p = *encode_ns_p = *job_ns_p = 0;
    if (e->wq == NULL) {
        return;
    }
    pthread_mutex_lock(&e->st_lock);
    *bytes_p     = e->st_bytes;
    *encode_ns_p = e->st_encode_ns;
    *job_ns_p    = e->st_job_ns;
    pthread_mutex_unlock(&e->st_lock);
}
