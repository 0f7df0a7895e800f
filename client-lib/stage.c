/*
 * DESIGN: device memory for libckstore. Decides the path of a device buffer
 * (direct to UCX, or staged), and owns the staging pipeline (which also
 * takes host buffers of puts asked to be staged, CKS_PUT_FIELD_STAGED:
 * copied with memcpy() on the stage thread, never by the engine; a client
 * without a device gets a ring whose engine refuses device memory): a ring of
 * `nslots` pinned host slices (one cks_mem_alloc() region, registered with
 * the copy engine), a FIFO of staged jobs, and the stage thread that runs
 * them in order. Job after job takes the next slots of the ring (slice i of
 * a job is in slot (base + i) % nslots); slot_job and slot_slice say whose
 * slice a slot holds.
 *
 * A staged put: the stage thread copies the object slice after slice
 * device-to-host into the ring. An object that fits in the ring is copied
 * whole first into one run of slots - it skips to slot 0 rather than wrap -
 * then submitted as a host put from there, which a server on this host
 * copies from our mapped memory, and handed off: its op's callback frees
 * its slots and ends it, while the stage thread goes on with the next jobs;
 * a failed copy then never reaches the server. A larger one first waits for
 * the ring to be empty, then goes in parts (server/parts.c): its PUT with
 * CKS_WIRE_F_PARTS and no bytes, then, as each slice's copy completes, a
 * PUT_PART from its slot to the server the PUT went to (op->on_send tells
 * which), at most nslots ahead of the parts answered; each answer frees its
 * slot; a failed copy sends a cancel, so that the server gives the put up
 * (the version goes on without it). A staged get: the stage thread reads
 * the object with range gets of one slice each into the ring, and copies
 * each slice host-to-device, in order, while the later slices are still
 * being received; a whole-object get's CRC is computed on the CRC threads
 * over the host slices as they pass, and combined in order.
 *
 * Threads: the stage thread makes every copy-engine call but classify (any
 * thread) and the ring's registration (at set-up, on the application thread
 * of the first device transfer, never the progress thread); the progress
 * thread runs the ops' callbacks (a part's answer, the PUT's send and end),
 * which only record and signal under the stage lock; the CRC threads only
 * compute CRCs of slots that are held for them. An application thread (or
 * a callback) only queues a job.
 *
 * Must never: make a copy-engine call on the progress thread; let a slot be
 * reused while UCX or a copy may still use it; report CKS_OK for an object
 * some of whose bytes did not come from the device (puts) or the server
 * (gets).
 */
#include "stage_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- no device: host-staged puts only ---------------------------------------------------
 * The ring of a client without a CUDA device (or built without the toolkit)
 * serves host-staged puts (CKS_PUT_FIELD_STAGED), which copy with memcpy()
 * themselves; this engine is never asked to copy. */
static cks_status_t cks_nodev_classify(void *eng, const void *ptr, cks_mem_type_t *type_p,
                                       int *device_p)
{
    (void)eng;
    (void)ptr;
    *type_p   = CKS_MEM_HOST;
    *device_p = 0;
    return CKS_OK;
}

static cks_status_t cks_nodev_register(void *eng, void *ptr, size_t len)
{
    (void)eng;
    (void)ptr;
    (void)len;
    return CKS_OK;
}

static void cks_nodev_unregister(void *eng, void *ptr)
{
    (void)eng;
    (void)ptr;
}

static cks_status_t cks_nodev_bind(void *eng, int device)
{
    (void)eng;
    (void)device;
    return CKS_OK;
}

static cks_status_t cks_nodev_copy_start(void *eng, unsigned slot, cks_copy_dir_t dir,
                                         void *dst, const void *src, size_t len)
{
    (void)eng;
    (void)slot;
    (void)dir;
    (void)dst;
    (void)src;
    (void)len;
    return CKS_ERR_UNSUPPORTED;
}

static cks_status_t cks_nodev_copy_wait(void *eng, unsigned slot)
{
    (void)eng;
    (void)slot;
    return CKS_OK;
}

static void cks_nodev_destroy(void *eng)
{
    (void)eng;
}

static const cks_stage_engine_ops_t cks_nodev_engine_ops = {
    .name            = "no device: host memcpy",
    .classify        = cks_nodev_classify,
    .host_register   = cks_nodev_register,
    .host_unregister = cks_nodev_unregister,
    .bind            = cks_nodev_bind,
    .copy_start      = cks_nodev_copy_start,
    .copy_wait       = cks_nodev_copy_wait,
    .destroy         = cks_nodev_destroy,
};

/* ---- the host-copy engine (test builds) -------------------------------------------
 * Memory is host memory posing as device memory, and a copy is a memcpy()
 * done when it is waited for: the pipeline runs through the same code as
 * with the CUDA engine, so its slicing, ordering, overlap and errors are
 * tested on machines without a GPU. Chosen with CKS_STAGE_HOST=1 in builds
 * with fault points only. */
#ifdef CKS_FAULT_POINTS
typedef struct {
    struct {
        void *dst;
        const void *src;
        size_t len;
    } pending[CKS_STAGE_SLICES_MAX];
} cks_host_engine_t;

static cks_status_t cks_host_classify(void *eng, const void *ptr, cks_mem_type_t *type_p,
                                      int *device_p)
{
    *type_p   = CKS_MEM_CUDA; /* what the tests stage: everything */
    *device_p = 0;
    return CKS_OK;
}

static cks_status_t cks_host_copy_start(void *eng, unsigned slot, cks_copy_dir_t dir, void *dst,
                                        const void *src, size_t len)
{
    cks_host_engine_t *h = eng;
    h->pending[slot].dst = dst;
    h->pending[slot].src = src;
    h->pending[slot].len = len;
    return CKS_OK;
}

static cks_status_t cks_host_copy_wait(void *eng, unsigned slot)
{
    cks_host_engine_t *h = eng;
    if (h->pending[slot].len > 0) {
        memcpy(h->pending[slot].dst, h->pending[slot].src, h->pending[slot].len);
        h->pending[slot].len = 0;
    }
    return CKS_OK;
}

static void cks_host_destroy(void *eng)
{
    free(eng);
}

static const cks_stage_engine_ops_t cks_host_engine_ops = {
    .name            = "host copy (test)",
    .classify        = cks_host_classify,
    .host_register   = cks_nodev_register, /* nothing to pin or bind */
    .host_unregister = cks_nodev_unregister,
    .bind            = cks_nodev_bind,
    .copy_start      = cks_host_copy_start,
    .copy_wait       = cks_host_copy_wait,
    .destroy         = cks_host_destroy,
};
#endif

/* ---- configuration, set-up ------------------------------------------------------------ */

cks_status_t cks_cl_stage_config(cks_client_h c, const cks_client_params_t *params)
{
    c->stage_slice  = CKS_STAGE_SLICE_DEFAULT;
    c->stage_slices = CKS_STAGE_SLICES_DEFAULT;
    if (params->field_mask & CKS_CLIENT_FIELD_STAGE) {
        if (params->stage_slice < CKS_STAGE_ALIGN || params->stage_slice > (1ull << 30) ||
            params->stage_slices < 2 || params->stage_slices > CKS_STAGE_SLICES_MAX) {
            return CKS_ERR_INVALID_PARAM;
        }
        c->stage_slice  = CKS_ALIGN_UP(params->stage_slice, (uint64_t)CKS_STAGE_ALIGN);
        c->stage_slices = params->stage_slices;
    }
    return CKS_OK;
}

void cks_stage_error(cks_client_h c, cks_status_t status, const char *why)
{
    cks_cl_set_errorf(c, status, "%s", why);
}

static void *cks_stage_thread(void *arg);

/* ---- the CRC threads of staged gets ----------------------------------------------------
 * A whole object's get from a standalone server checks the object's CRC on
 * the ring's slices (stage_get.c); one thread's CRC was slower than the copy
 * engine, so each slice's CRC runs on one of these threads while its copy
 * runs, and the stage thread combines them in order (cks_crc64_combine()). */
static void cks_stage_crc_run(cks_workq_t *q, cks_workq_job_t *jobs, void *arg)
{
    (void)q;
    (void)arg;
    cks_slot_crc_t *k = CKS_CONTAINER_OF(jobs, cks_slot_crc_t, wq);
    k->crc = cks_crc64(0, k->ptr, k->len);
}

static void cks_stage_crc_wake(void *arg)
{
    cks_stage_t *st = arg;
    pthread_mutex_lock(&st->lock);
    cks_workq_job_t *l = cks_workq_take_done(st->crcq);
    while (l != NULL) {
        cks_workq_job_t *next = l->next;
        CKS_CONTAINER_OF(l, cks_slot_crc_t, wq)->queued = 0;
        l = next;
    }
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

/* One CRC thread per 4 CPUs, 1 to 4 (ISA-L's CRC-64 runs at about a third
 * of a copy engine's bandwidth per core). Without them (none could start)
 * the stage thread computes each CRC itself. */
static void cks_stage_crc_start(cks_stage_t *st)
{
    unsigned n           = cks_cl_helper_threads();
    cks_workq_params_t p = {.nthreads = n,
                            .run      = cks_stage_crc_run,
                            .wake     = cks_stage_crc_wake,
                            .arg      = st,
                            .name     = "cks-stage-crc"};
    if (cks_workq_create(&p, &st->crcq) != CKS_OK) {
        st->crcq = NULL;
        cks_warn("staging ring: no CRC threads; the stage thread checks gets itself");
        return;
    }
    st->crc_threads = n;
}

/* After the stage thread ended (no CRC is queued then). */
static void cks_stage_crc_stop(cks_stage_t *st)
{
    if (st->crcq != NULL) {
        (void)cks_workq_stop(st->crcq);
        (void)cks_workq_take_done(st->crcq);
        cks_workq_destroy(st->crcq);
        st->crcq = NULL;
    }
}

/* The stage of a client, made at its first staged transfer (any thread but
 * the progress thread). On a machine without a device, a device transfer
 * gets CKS_ERR_UNSUPPORTED (why: "no CUDA device"); a host-staged put
 * (host_ok) gets a stage without a device (st->no_device), which refuses
 * device transfers the same way. */
cks_status_t cks_stage_get(cks_client_h c, int host_ok, cks_stage_t **st_p, char *c_why,
                                  size_t why_len)
{
    static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;
    char why[160] = "";
    cks_stage_t *st;
    cks_status_t status;

    pthread_mutex_lock(&make_lock);
    if (c->stage != NULL) {
        st = c->stage;
        pthread_mutex_unlock(&make_lock);
        if (st->no_device && !host_ok) {
            snprintf(c_why, why_len, "%s", st->why);
            return CKS_ERR_UNSUPPORTED;
        }
        *st_p = st;
        return CKS_OK;
    }
    if (pthread_equal(pthread_self(), c->thread)) {
        pthread_mutex_unlock(&make_lock);
        cks_stage_error(c, CKS_ERR_INVALID_PARAM,
                        "the first device transfer must come from an application thread, "
                        "not a completion callback");
        return CKS_ERR_INVALID_PARAM;
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        pthread_mutex_unlock(&make_lock);
        return CKS_ERR_NO_MEMORY;
    }
    st->c          = c;
    st->device     = -1;
    st->fail_slice = -1;
    st->pause_part = -1;
    st->slice      = c->stage_slice;
    st->nslots     = c->stage_slices;
    st->gslice     = CKS_MIN(st->slice, CKS_STAGE_GET_SLICE);
    st->gslots     = (unsigned)CKS_MAX(1u, CKS_MIN((uint64_t)st->nslots,
                                                   CKS_STAGE_GET_BYTES / st->gslice));
    status         = CKS_ERR_UNSUPPORTED;
    int host_engine = 0;
#ifdef CKS_FAULT_POINTS
    const char *env = getenv("CKS_STAGE_HOST");
    if (env != NULL && strcmp(env, "1") == 0) {
        st->ops     = &cks_host_engine_ops;
        host_engine = 1;
        st->eng = calloc(1, sizeof(cks_host_engine_t));
        status  = st->eng != NULL ? CKS_OK : CKS_ERR_NO_MEMORY;
    }
    env = getenv("CKS_STAGE_FAIL_SLICE");
    if (env != NULL) {
        st->fail_slice = atoi(env);
    }
    env = getenv("CKS_STAGE_PAUSE_PART"); /* "N:path" */
    if (env != NULL && strchr(env, ':') != NULL) {
        st->pause_part = atoi(env);
        snprintf(st->pause_path, sizeof(st->pause_path), "%s", strchr(env, ':') + 1);
    }
#endif
#ifdef CKS_HAVE_CUDA
    if (st->ops == NULL) {
        status = cks_cuda_engine_create(st->nslots, &st->ops, &st->eng, why, sizeof(why));
    }
#else
    if (st->ops == NULL) {
        snprintf(why, sizeof(why), "no CUDA device: this build has no CUDA support");
    }
#endif
    if (status != CKS_OK) {
        static int told;
        if (!told) { /* once per process: a machine without a device stays so */
            told = 1;
            cks_info("device memory: %s", why[0] ? why : cks_status_string(status));
        }
        snprintf(st->why, sizeof(st->why), "%s", why[0] ? why : "no CUDA device");
        if (!host_ok || status != CKS_ERR_UNSUPPORTED) {
            snprintf(c_why, why_len, "%s", st->why);
            free(st);
            pthread_mutex_unlock(&make_lock);
            return status;
        }
        /* host-staged puts need no device: a ring without one */
        st->ops       = &cks_nodev_engine_ops;
        st->eng       = NULL;
        st->no_device = 1;
        status        = CKS_OK;
    }
    st->direct = !host_engine && !st->no_device && cks_tp_worker_cuda_direct(c->tp);
    status = cks_mem_alloc(c, (size_t)(st->slice * st->nslots), (void **)&st->ring);
    if (status != CKS_OK) {
        goto err_engine;
    }
    status = st->ops->host_register(st->eng, st->ring, (size_t)(st->slice * st->nslots));
    if (status != CKS_OK) {
        goto err_ring;
    }
    pthread_mutex_init(&st->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (!st->no_device) {
        cks_stage_crc_start(st);
    }
    if (pthread_create(&st->thread, NULL, cks_stage_thread, st) != 0) {
        status = CKS_ERR_NO_MEMORY;
        cks_stage_crc_stop(st);
        goto err_sync;
    }
    st->thread_started = 1;
    if (st->no_device) {
        cks_info("staging ring: %u x %llu-byte host slices for host-staged puts (no device "
                 "memory: %s)", st->nslots, (unsigned long long)st->slice, st->why);
    } else {
        cks_info("device memory: %s (%s): puts %s; a ring of %u x %llu-byte pinned host "
                 "slices, gets through %u x %llu bytes of it, CRCs on %u threads",
                 st->direct ? "direct" : "staged", st->ops->name,
                 st->direct ? "hand device pointers to UCX (it reports the CUDA memory type)"
                            : "staged (UCX has no CUDA transport; an object larger than "
                              "the ring goes in parts)",
                 st->nslots, (unsigned long long)st->slice, st->gslots,
                 (unsigned long long)st->gslice, st->crc_threads);
    }
    __atomic_store_n(&c->stage, st, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&make_lock);
    *st_p = st;
    return CKS_OK;

err_sync:
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    st->ops->host_unregister(st->eng, st->ring);
err_ring:
    cks_mem_free(c, st->ring);
err_engine:
    st->ops->destroy(st->eng);
    free(st);
    pthread_mutex_unlock(&make_lock);
    cks_stage_error(c, status, "cannot set up the staging ring");
    return status;
}

/* Resolve CKS_MEM_AUTO / CKS_MEM_CUDA: *type_p the buffer's memory type. */
cks_status_t cks_stage_classify(cks_client_h c, const void *ptr, cks_mem_type_t asked,
                                       cks_stage_t **st_p, cks_mem_type_t *type_p,
                                       int *device_p)
{
    cks_stage_t *st = NULL;
    char why[160] = "";
    cks_status_t status = cks_stage_get(c, 0, &st, why, sizeof(why));

    if (status != CKS_OK) {
        if (asked == CKS_MEM_AUTO && status == CKS_ERR_UNSUPPORTED) {
            *type_p = CKS_MEM_HOST; /* no device: it cannot be device memory */
            return CKS_OK;
        }
        if (why[0] != '\0') {
            cks_stage_error(c, status, why);
        }
        return status;
    }
    *device_p = st->device < 0 ? 0 : st->device;
    if (asked == CKS_MEM_AUTO) {
        status = st->ops->classify(st->eng, ptr, type_p, device_p);
        if (status != CKS_OK) {
            cks_stage_error(c, status, "the CUDA runtime cannot tell what memory the buffer is");
            return status;
        }
    } else {
        *type_p = CKS_MEM_CUDA;
        cks_mem_type_t t;
        if (st->ops->classify(st->eng, ptr, &t, device_p) == CKS_OK && t != CKS_MEM_CUDA) {
            cks_stage_error(c, CKS_ERR_INVALID_PARAM,
                            "mem_type is CKS_MEM_CUDA but the buffer is not device memory");
            return CKS_ERR_INVALID_PARAM;
        }
    }
    *st_p = st;
    return CKS_OK;
}

/* Free every slot job j holds (stage lock held; nothing uses them). */
void cks_stage_free_slots(cks_stage_t *st, const cks_stage_job_t *j)
{
    for (unsigned s = 0; s < st->nslots; s++) {
        if (st->slot_job[s] == j) {
            st->state[s]    = CKS_SLOT_FREE;
            st->slot_job[s] = NULL;
        }
    }
}

void cks_stage_enqueue(cks_stage_t *st, cks_stage_job_t *j)
{
    pthread_mutex_lock(&st->lock);
    CKS_QUEUE_PUSH(st->head, st->tail, j);
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

/* ---- the stage thread ------------------------------------------------------------------------ */

static void *cks_stage_thread(void *arg)
{
    cks_stage_t *st = arg;

    pthread_mutex_lock(&st->lock);
    for (;;) {
        while (st->head == NULL && !st->stop) {
            pthread_cond_wait(&st->cond, &st->lock);
        }
        cks_stage_job_t *j = st->head;
        if (j == NULL) {
            break; /* stopping, nothing left */
        }
        st->head = j->next;
        if (st->head == NULL) {
            st->tail = NULL;
        }
        st->cur = j;
        j->base = st->ring_pos;
        if (st->stop) {
            j->status = CKS_ERR_CANCELED;
            if (j->is_put) {
                free(j->op); /* never submitted */
            }
        } else {
            if (st->device != j->device) {
                pthread_mutex_unlock(&st->lock);
                cks_status_t status = st->ops->bind(st->eng, j->device);
                pthread_mutex_lock(&st->lock);
                if (status == CKS_OK) {
                    st->device = j->device;
                } else {
                    j->status = status;
                }
            }
            if (j->status != CKS_OK && j->is_put) {
                free(j->op);
            } else if (j->status == CKS_OK) {
                j->run(st, j);
            }
        }
        st->ring_pos = j->base + j->nslices; /* a put may have skipped to slot 0 */
        st->cur = NULL;
        if (j->handed_off) {
            continue; /* its op's callback ends it; j may be gone already */
        }
        cks_stage_free_slots(st, j); /* nothing uses them now */
        pthread_cond_broadcast(&st->cond);
        pthread_mutex_unlock(&st->lock);
        if (j->is_put && j->copied_cb != NULL) {
            j->copied_cb(j->copied_arg, j->status);
        }
        if (!j->cb_done) { /* a get that led a batch ran its own (stage_get.c) */
            j->cb(j->arg, j->status);
        }
        free(j);
        pthread_mutex_lock(&st->lock);
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

void cks_cl_stage_stats(cks_client_h c, cks_client_stats_t *stats)
{
    cks_stage_t *st = __atomic_load_n(&c->stage, __ATOMIC_ACQUIRE);
    memset(stats, 0, sizeof(*stats));
    if (st == NULL) {
        return;
    }
    pthread_mutex_lock(&st->lock);
    stats->gpu_path           = st->no_device ? CKS_GPU_PATH_NONE
                                : st->direct  ? CKS_GPU_PATH_DIRECT
                                              : CKS_GPU_PATH_STAGED;
    stats->host_puts_staged   = st->host_puts;
    stats->host_staged_bytes  = st->host_bytes;
    stats->device_puts_direct = st->puts_direct;
    stats->device_puts_staged = st->puts_staged;
    stats->staged_puts_in_parts = st->puts_in_parts;
    stats->staged_puts_resent   = st->puts_resent;
    stats->device_gets_staged = st->gets_staged;
    stats->staged_bytes       = st->staged_bytes;
    stats->stage_copy_ns      = st->copy_ns;
    pthread_mutex_unlock(&st->lock);
}

void cks_cl_stage_free(cks_client_h c)
{
    cks_stage_t *st = c->stage;
    if (st == NULL) {
        return;
    }
    pthread_mutex_lock(&st->lock);
    st->stop = 1;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->thread, NULL);
    cks_stage_crc_stop(st);
    st->ops->host_unregister(st->eng, st->ring);
    cks_mem_free(c, st->ring);
    st->ops->destroy(st->eng);
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    c->stage = NULL;
    free(st);
}

#define CKS_CL_PAGE_LOOKUPS 64 /* regions looked up by one cks_client_stats() */

cks_status_t cks_client_stats(cks_client_h c, cks_client_stats_t *stats_p)
{
    if (c == NULL || stats_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    cks_cl_stage_stats(c, stats_p);
    stats_p->requests_in_flight = __atomic_load_n(&c->requests, __ATOMIC_RELAXED);
    stats_p->receive_stalled_s  = __atomic_load_n(&c->rx_stalled_s, __ATOMIC_RELAXED);
    stats_p->receive_renewals   = cks_tp_worker_renewals(c->tp);
    /* regions whose page size was not known at allocation: looked up by
     * address outside the lock (a scan of /proc/self/smaps can take long,
     * and the progress thread takes this lock for its submit queue) */
    const void *look[CKS_CL_PAGE_LOOKUPS];
    size_t page[CKS_CL_PAGE_LOOKUPS], n = 0;
    pthread_mutex_lock(&c->lock);
    for (const cks_cl_mem_t *m = c->mems; m != NULL && n < CKS_CL_PAGE_LOOKUPS; m = m->next) {
        if (m->page == 0) {
            look[n++] = m->base;
        }
    }
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        page[i] = cks_tp_page_size_at(look[i], 1);
    }
    pthread_mutex_lock(&c->lock);
    for (cks_cl_mem_t *m = c->mems; m != NULL; m = m->next) {
        for (size_t i = 0; m->page == 0 && i < n; i++) {
            m->page = look[i] == m->base ? page[i] : 0; /* what is mapped there now */
        }
        stats_p->registered_bytes += m->len;
        stats_p->registered_huge_bytes += m->page > (size_t)sysconf(_SC_PAGESIZE) ? m->len : 0;
    }
    pthread_mutex_unlock(&c->lock);
    return CKS_OK;
}
