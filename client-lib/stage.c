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
 * A staged put: the stage thread submits the put's op (its payload is a
 * cks_tp_source_t) and copies the object slice after slice device-to-host
 * into the ring, at most nslots ahead of what UCX has taken (an object that
 * fits in the ring is copied whole first into one run of slots - it skips
 * to slot 0 rather than wrap - then submitted as a host put from there,
 * which a server on this host copies from our mapped memory, and handed
 * off: its op's callback frees its slots and ends it, while the stage
 * thread goes on with the next jobs; a failed copy then never reaches the
 * server.
 * A larger one first waits for the ring to be empty, so that its pack
 * waits only for its own copies; if it fails, its version is aborted,
 * since UCX cannot take back what it sent); UCX pulls the
 * bytes through cks_stage_pack() on the progress thread, which waits only
 * for a slice whose copy is already under way (slice i's slot is free once
 * slice i - nslots was packed, which pack itself did, in order), so the wait
 * never depends on the progress thread. A staged get: the stage thread reads
 * the object with range gets of one slice each into the ring (up to nslots
 * in flight), and copies each slice host-to-device, in order, while the
 * later slices are still being received; a whole-object get's CRC is checked
 * on the host slices as they pass.
 *
 * Threads: the stage thread makes every copy-engine call but classify (any
 * thread) and the ring's registration (at set-up, on the application thread
 * of the first device transfer, never the progress thread); the
 * progress thread runs pack and the ops' callbacks, which only record and
 * signal under the stage lock. An application thread (or a callback) only
 * queues a job.
 *
 * Must never: make a copy-engine call on the progress thread; let a slot be
 * reused while UCX or a copy may still use it; report CKS_OK for an object
 * some of whose bytes did not come from the device (puts) or the server
 * (gets).
 */
#include "stage.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CKS_STAGE_ALIGN 4096u

typedef enum {
    CKS_SLOT_FREE = 0,
    CKS_SLOT_BUSY, /* a copy or a receive is under way */
    CKS_SLOT_READY /* put: copied, UCX may take it; get: received */
} cks_slot_state_t;

struct cks_stage_job {
    cks_stage_job_t *next;
    cks_stage_t *st;
    int is_put;
    int host;               /* a put of host memory (CKS_PUT_FIELD_STAGED):
                               copied with memcpy(), never by the engine */
    uint8_t *dev;           /* device source (put) or destination (get) */
    uint64_t len;           /* bytes to move */
    int device;
    cks_done_cb_t cb;       /* caller's */
    void *arg;
    /* put */
    cks_op_t *op;
    char vjob[CKS_JOB_NAME_MAX + 1]; /* its version (the op is gone at the end) */
    uint64_t version;
    cks_done_cb_t copied_cb;
    void *copied_arg;
    cks_tp_source_t src;
    uint64_t packed;        /* slices UCX has taken whole */
    int op_done;
    cks_status_t op_status;
    /* get */
    cks_restore_h r;
    char key[CKS_KEY_NAME_MAX + 1];
    uint64_t offset;        /* in the object */
    uint64_t *length_p;
    uint32_t flags;
    int range;
    int chain;              /* get: the object's CRC is checked here over the
                               slices, in order (a standalone server then sends
                               each slice unchecked: CKS_WIRE_F_CHECKED) */
    uint64_t buffer_size;
    unsigned reads;         /* range gets in flight */
    /* both */
    uint64_t nslices;
    uint64_t base;          /* its slice i is in slot (base + i) % nslots */
    int handed_off;         /* a put whose completion the op's callback runs */
    cks_status_t status;    /* first error */
};

/* A slot's range get, as its callback sees it. */
typedef struct {
    cks_stage_t *st;
    unsigned slot;
    uint64_t got;           /* bytes the get wrote */
} cks_slot_read_t;

struct cks_stage {
    cks_client_h c;
    const cks_stage_engine_ops_t *ops;
    void *eng;
    int direct;             /* UCX moves CUDA memory: puts go direct */
    int no_device;          /* no copy engine for device memory: host-staged
                               puts only (memcpy), device transfers refused */
    int device;             /* the device the engine is bound to (-1: none yet) */
    uint8_t *ring;
    uint64_t slice;
    unsigned nslots;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;    /* any change of the below */
    cks_stage_job_t *head, *tail;
    cks_stage_job_t *cur;
    int stop;
    cks_slot_state_t state[CKS_STAGE_SLICES_MAX];
    uint64_t slot_slice[CKS_STAGE_SLICES_MAX]; /* the slice a slot holds */
    cks_stage_job_t *slot_job[CKS_STAGE_SLICES_MAX]; /* of which job */
    uint64_t ring_pos;      /* where the next job starts in the ring */
    cks_status_t slot_status[CKS_STAGE_SLICES_MAX];
    cks_slot_read_t reads[CKS_STAGE_SLICES_MAX];
    int fail_slice;         /* test builds: CKS_STAGE_FAIL_SLICE, -1: none */
    char why[160];          /* no_device: why there is no device */
    uint64_t host_ns[CKS_STAGE_SLICES_MAX]; /* a host-staged slice's memcpy() */
    uint64_t copies;        /* copies started (for fail_slice) */
    /* figures */
    uint64_t puts_direct, puts_staged, gets_staged, staged_bytes, copy_ns;
    uint64_t host_puts, host_bytes; /* host-staged puts (CKS_PUT_FIELD_STAGED) */
};

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
        c->stage_slice  = (params->stage_slice + CKS_STAGE_ALIGN - 1) & ~(uint64_t)(CKS_STAGE_ALIGN - 1);
        c->stage_slices = params->stage_slices;
    }
    return CKS_OK;
}

static void cks_stage_error(cks_client_h c, cks_status_t status, const char *why)
{
    cks_cl_set_errorf(c, status, "%s", why);
}

static void *cks_stage_thread(void *arg);

/* The stage of a client, made at its first staged transfer (any thread but
 * the progress thread). On a machine without a device, a device transfer
 * gets CKS_ERR_UNSUPPORTED (why: "no CUDA device"); a host-staged put
 * (host_ok) gets a stage without a device (st->no_device), which refuses
 * device transfers the same way. */
static cks_status_t cks_stage_get(cks_client_h c, int host_ok, cks_stage_t **st_p, char *c_why,
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
    st->slice      = c->stage_slice;
    st->nslots     = c->stage_slices;
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
    if (pthread_create(&st->thread, NULL, cks_stage_thread, st) != 0) {
        status = CKS_ERR_NO_MEMORY;
        goto err_sync;
    }
    st->thread_started = 1;
    if (st->no_device) {
        cks_info("staging ring: %u x %llu-byte host slices for host-staged puts (no device "
                 "memory: %s)", st->nslots, (unsigned long long)st->slice, st->why);
    } else {
        cks_info("device memory: %s (%s): puts %s; gets staged through %u x %llu-byte pinned "
                 "host slices",
                 st->direct ? "direct" : "staged", st->ops->name,
                 st->direct ? "hand device pointers to UCX (it reports the CUDA memory type)"
                            : "staged (UCX has no CUDA transport)",
                 st->nslots, (unsigned long long)st->slice);
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
static cks_status_t cks_stage_classify(cks_client_h c, const void *ptr, cks_mem_type_t asked,
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

static void cks_stage_enqueue(cks_stage_t *st, cks_stage_job_t *j)
{
    pthread_mutex_lock(&st->lock);
    j->next = NULL;
    if (st->tail != NULL) {
        st->tail->next = j;
    } else {
        st->head = j;
    }
    st->tail = j;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

/* ---- puts --------------------------------------------------------------------------------- */

/* COPIED for a put that is not staged: its callback, wrapped. */
typedef struct {
    cks_done_cb_t cb, copied_cb;
    void *arg, *copied_arg;
    cks_stage_t *st;
    int direct;
} cks_put_wrap_t;

static void cks_stage_put_wrap_done(void *arg, cks_status_t status)
{
    cks_put_wrap_t *w = arg;
    if (w->direct) {
        pthread_mutex_lock(&w->st->lock);
        w->st->puts_direct++;
        pthread_mutex_unlock(&w->st->lock);
    }
    if (w->copied_cb != NULL) {
        w->copied_cb(w->copied_arg, status);
    }
    w->cb(w->arg, status);
    free(w);
}

static size_t cks_stage_pack(void *arg, size_t offset, void *dst, size_t max);

cks_status_t cks_cl_stage_put(cks_client_h c, const cks_put_params_t *p, cks_op_t *op,
                              cks_done_cb_t *cb_p, void **arg_p)
{
    cks_mem_type_t asked = (p->field_mask & CKS_PUT_FIELD_MEM_TYPE) ? p->mem_type : CKS_MEM_HOST;
    cks_mem_type_t type  = CKS_MEM_HOST;
    int copied = (p->field_mask & CKS_PUT_FIELD_COPIED) && p->copied_cb != NULL;
    int staged = (p->field_mask & CKS_PUT_FIELD_STAGED) != 0;
    cks_stage_t *st = NULL;
    int device = 0;
    cks_status_t status;

    if ((unsigned)asked > CKS_MEM_AUTO) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (asked != CKS_MEM_HOST && p->size > 0) {
        status = cks_stage_classify(c, p->buffer, asked, &st, &type, &device);
        if (status != CKS_OK) {
            return status;
        }
    }
    int host_staged = staged && type == CKS_MEM_HOST && p->size > 0;
    if (host_staged) {
        char why[160] = "";
        st     = NULL;
        status = cks_stage_get(c, 1, &st, why, sizeof(why));
        if (status != CKS_OK) {
            if (why[0] != '\0') {
                cks_stage_error(c, status, why);
            }
            return status;
        }
    }
    if (!host_staged && (type == CKS_MEM_HOST || st->direct)) {
        op->mem_type = type;
        if (!copied && type == CKS_MEM_HOST) {
            return CKS_OK;
        }
        cks_put_wrap_t *w = calloc(1, sizeof(*w));
        if (w == NULL) {
            return CKS_ERR_NO_MEMORY;
        }
        w->cb         = *cb_p;
        w->arg        = *arg_p;
        w->copied_cb  = copied ? p->copied_cb : NULL;
        w->copied_arg = p->copied_arg;
        w->st         = st;
        w->direct     = type == CKS_MEM_CUDA;
        *cb_p         = cks_stage_put_wrap_done;
        *arg_p        = w;
        return CKS_OK;
    }
    cks_stage_job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    j->st         = st;
    j->is_put     = 1;
    j->host       = host_staged;
    j->dev        = (uint8_t *)p->buffer;
    j->len        = p->size;
    j->device     = device;
    j->cb         = *cb_p;
    j->arg        = *arg_p;
    j->copied_cb  = copied ? p->copied_cb : NULL;
    j->copied_arg = p->copied_arg;
    j->op         = op;
    j->version    = p->version;
    snprintf(j->vjob, sizeof(j->vjob), "%s", p->job);
    j->nslices    = (p->size + st->slice - 1) / st->slice;
    j->src.len    = p->size;
    j->src.pack   = cks_stage_pack;
    j->src.arg    = j;
    op->mem_type  = CKS_MEM_CUDA; /* never described for one-copy transfers */
    op->stage     = j;
    cks_stage_enqueue(st, j);
    return CKS_INPROGRESS;
}

cks_status_t cks_stage_prepare(cks_client_h c)
{
    char why[160] = "";
    cks_stage_t *st = NULL;
    if (c == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    cks_status_t status = cks_stage_get(c, 1, &st, why, sizeof(why));
    if (status != CKS_OK && why[0] != '\0') {
        cks_stage_error(c, status, why);
    }
    return status;
}

const cks_tp_source_t *cks_cl_stage_source(cks_stage_job_t *j)
{
    return &j->src;
}

static uint64_t cks_stage_slice_len(const cks_stage_t *st, const cks_stage_job_t *j,
                                    uint64_t i)
{
    uint64_t off = i * st->slice;
    return CKS_MIN(st->slice, j->len - off);
}

static unsigned cks_stage_slot(const cks_stage_t *st, const cks_stage_job_t *j, uint64_t i)
{
    return (unsigned)((j->base + i) % st->nslots);
}

static void cks_stage_deadline(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* UCX takes bytes [offset, offset + max) of a staged put (progress thread).
 * It waits for the slice's copy, which the stage thread has started or
 * starts without needing this thread; a slice that cannot come (an error,
 * the client's timeout) is sent as zeros and the put fails (its version is
 * aborted: cks_stage_run_put()). */
static size_t cks_stage_pack(void *arg, size_t offset, void *dst, size_t max)
{
    cks_stage_job_t *j = arg;
    cks_stage_t *st    = j->st;
    uint64_t i         = offset / st->slice;
    uint64_t within    = offset % st->slice;
    uint64_t n         = CKS_MIN((uint64_t)max, cks_stage_slice_len(st, j, i) - within);
    unsigned slot      = cks_stage_slot(st, j, i);
    struct timespec dl;

    pthread_mutex_lock(&st->lock);
    if (j->status == CKS_OK && i < j->packed) {
        j->status = CKS_ERR_INTERNAL; /* asked again for bytes already released */
        cks_error("staged put: UCX asked again for offset %zu", offset);
    }
    cks_stage_deadline(&dl, st->c->timeout_ms);
    while (j->status == CKS_OK && !st->stop &&
           !(st->state[slot] == CKS_SLOT_READY && st->slot_job[slot] == j &&
             st->slot_slice[slot] == i)) {
        if (pthread_cond_timedwait(&st->cond, &st->lock, &dl) == ETIMEDOUT) {
            j->status = CKS_ERR_TIMEOUT;
            cks_warn("staged put: slice %llu not copied within %d ms",
                     (unsigned long long)i, st->c->timeout_ms);
        }
    }
    if (j->status == CKS_OK && st->stop) {
        j->status = CKS_ERR_CANCELED;
    }
    if (j->status != CKS_OK) {
        pthread_mutex_unlock(&st->lock);
        memset(dst, 0, (size_t)n);
        return (size_t)n;
    }
    pthread_mutex_unlock(&st->lock);
    memcpy(dst, st->ring + (uint64_t)slot * st->slice + within, (size_t)n);
    if (within + n == cks_stage_slice_len(st, j, i)) {
        pthread_mutex_lock(&st->lock);
        st->state[slot] = CKS_SLOT_FREE;
        j->packed       = i + 1;
        pthread_cond_broadcast(&st->cond);
        pthread_mutex_unlock(&st->lock);
    }
    return (size_t)n;
}

/* The put's op completed (progress thread). */
static void cks_stage_put_op_done(void *arg, cks_status_t status)
{
    cks_stage_job_t *j = arg;
    cks_stage_t *st    = j->st;
    pthread_mutex_lock(&st->lock);
    int handed_off = j->handed_off; /* else the stage thread frees j once we unlock */
    j->op_done     = 1;
    j->op_status   = status;
    if (handed_off) {
        /* copied whole, then sent: UCX is done with its slots; it ends here */
        for (unsigned s = 0; s < st->nslots; s++) {
            if (st->slot_job[s] == j) {
                st->state[s]    = CKS_SLOT_FREE;
                st->slot_job[s] = NULL;
            }
        }
        *(j->host ? &st->host_puts : &st->puts_staged) += 1;
    }
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
    if (handed_off) {
        j->cb(j->arg, status);
        free(j);
    }
}

/* Wait until no slot is in use: earlier objects' slots are released by the
 * progress thread (pack, or the op's end), never by this one. */
static void cks_stage_drain(cks_stage_t *st)
{
    for (;;) {
        unsigned busy = 0;
        for (unsigned s = 0; s < st->nslots; s++) {
            busy += st->state[s] != CKS_SLOT_FREE;
        }
        if (busy == 0) {
            return;
        }
        pthread_cond_wait(&st->cond, &st->lock);
    }
}

/* Start a copy for slice i of the current job into/out of its slot; an
 * injected failure (test builds) counts as the copy's. Stage thread. */
static cks_status_t cks_stage_copy_start(cks_stage_t *st, cks_stage_job_t *j, uint64_t i,
                                         unsigned slot)
{
    uint64_t len = cks_stage_slice_len(st, j, i);
    uint8_t *host = st->ring + (uint64_t)slot * st->slice;
    uint8_t *dev  = j->dev + i * st->slice;
    if (st->fail_slice >= 0 && st->copies++ == (uint64_t)st->fail_slice) {
        cks_warn("staged %s: slice %llu: injected copy failure (CKS_STAGE_FAIL_SLICE)",
                 j->is_put ? "put" : "get", (unsigned long long)i);
        return CKS_ERR_INTERNAL;
    }
    if (j->host) { /* host memory: copied here, at once */
        uint64_t t0 = cks_time_ns();
        memcpy(host, dev, len);
        st->host_ns[slot] = cks_time_ns() - t0;
        return CKS_OK;
    }
    return j->is_put ? st->ops->copy_start(st->eng, slot, CKS_COPY_D2H, host, dev, len)
                     : st->ops->copy_start(st->eng, slot, CKS_COPY_H2D, dev, host, len);
}

/* Wait for a slot's copy (stage thread, lock not held); *ns_p the wait
 * (a host-staged slice: its memcpy()). */
static cks_status_t cks_stage_copy_wait(cks_stage_t *st, const cks_stage_job_t *j,
                                        unsigned slot, uint64_t *ns_p)
{
    if (j->host) {
        *ns_p = st->host_ns[slot];
        return CKS_OK;
    }
    uint64_t t0 = cks_time_ns();
    cks_status_t status = st->ops->copy_wait(st->eng, slot);
    *ns_p = cks_time_ns() - t0;
    return status;
}

/* Run a staged put (stage thread, lock held on entry and exit). */
static void cks_stage_run_put(cks_stage_t *st, cks_stage_job_t *j)
{
    cks_client_h c   = st->c;
    uint64_t started = 0, copied = 0;
    struct timespec dl;
    cks_status_t status;

    /* An object that fits in the ring is copied whole before its request
     * goes out, so that a failed copy fails it before the server saw a
     * byte; a larger one is sent while it is copied. */
    int whole = j->nslices <= st->nslots;
    if (whole && j->base % st->nslots + j->nslices > st->nslots) {
        /* it would wrap: it starts at slot 0, so that its slots are one run
         * of the ring and it is sent from there as host memory */
        j->base += st->nslots - j->base % st->nslots;
    }
    if (!whole) {
        /* its pack must only ever wait for its own copies */
        cks_stage_drain(st);
        status = cks_cl_submit(c, j->op, cks_stage_put_op_done, j);
        if (status != CKS_INPROGRESS) {
            j->op        = NULL; /* freed */
            j->op_done   = 1;
            j->op_status = status;
            j->status    = status;
        }
    }
    /* copy slice after slice, at most nslots ahead of what UCX took */
    while (j->status == CKS_OK && copied < j->nslices && !j->op_done) {
        if (started < j->nslices && started < j->packed + st->nslots &&
            st->state[cks_stage_slot(st, j, started)] == CKS_SLOT_FREE) {
            unsigned slot = cks_stage_slot(st, j, started);
            st->state[slot]      = CKS_SLOT_BUSY;
            st->slot_slice[slot] = started;
            st->slot_job[slot]   = j;
            pthread_mutex_unlock(&st->lock);
            status = cks_stage_copy_start(st, j, started, slot);
            pthread_mutex_lock(&st->lock);
            if (status != CKS_OK) {
                st->state[slot] = CKS_SLOT_FREE;
                j->status       = status;
                break;
            }
            started++;
            if (started - copied < 2 && started < j->nslices &&
                started < j->packed + st->nslots &&
                st->state[cks_stage_slot(st, j, started)] == CKS_SLOT_FREE) {
                continue; /* two copies under way before waiting for one */
            }
        }
        if (copied < started) {
            unsigned slot = cks_stage_slot(st, j, copied);
            uint64_t ns;
            pthread_mutex_unlock(&st->lock);
            status = cks_stage_copy_wait(st, j, slot, &ns);
            pthread_mutex_lock(&st->lock);
            st->copy_ns += ns;
            *(j->host ? &st->host_bytes : &st->staged_bytes) += cks_stage_slice_len(st, j, copied);
            if (status != CKS_OK) {
                j->status = status;
                break;
            }
            st->state[slot] = CKS_SLOT_READY;
            copied++;
            pthread_cond_broadcast(&st->cond);
            continue;
        }
        /* the next slot holds a slice UCX has not taken yet (this object's,
         * or an earlier one's) */
        cks_stage_deadline(&dl, c->timeout_ms);
        while ((started >= j->packed + st->nslots ||
                st->state[cks_stage_slot(st, j, started)] != CKS_SLOT_FREE) &&
               j->status == CKS_OK && !j->op_done) {
            if (pthread_cond_timedwait(&st->cond, &st->lock, &dl) == ETIMEDOUT) {
                break; /* the op's own timeout ends it */
            }
        }
    }
    /* copies started and not waited for still use the device buffer */
    while (copied < started) {
        unsigned slot = cks_stage_slot(st, j, copied);
        uint64_t ns;
        pthread_mutex_unlock(&st->lock);
        (void)cks_stage_copy_wait(st, j, slot, &ns);
        pthread_mutex_lock(&st->lock);
        copied++;
    }
    cks_status_t stage_status = j->status;
    if (j->status != CKS_OK) {
        pthread_cond_broadcast(&st->cond); /* pack: stop waiting */
        cks_warn("staged put of %llu bytes: %s", (unsigned long long)j->len,
                 cks_status_string(j->status));
    }
    if (j->copied_cb != NULL) { /* the device buffer is the caller's again */
        cks_done_cb_t cb = j->copied_cb;
        j->copied_cb     = NULL;
        pthread_mutex_unlock(&st->lock);
        cb(j->copied_arg, j->status);
        pthread_mutex_lock(&st->lock);
    }
    if (whole) {
        if (j->status == CKS_OK) {
            /* sent from its slots while the next objects are copied: the
             * op's callback ends it (cks_stage_put_op_done(), which waits
             * for this lock) */
            j->handed_off = 1;
            /* its slots are one run of the ring (cks_mem_alloc() memory): it
             * goes as a host put from there - to a server on this host, one
             * copy by the server from our mapped memory; elsewhere, UCX's
             * zero-copy send - instead of through the pack callback */
            j->op->stage       = NULL;
            j->op->payload     = st->ring + (uint64_t)cks_stage_slot(st, j, 0) * st->slice;
            j->op->payload_len = j->len;
            j->op->mem_type    = CKS_MEM_HOST;
            status = cks_cl_submit(c, j->op, cks_stage_put_op_done, j);
            if (status == CKS_INPROGRESS) {
                return;
            }
            j->handed_off = 0;
        } else {
            free(j->op); /* never sent */
            status = j->status;
        }
        j->op        = NULL;
        j->op_done   = 1;
        j->op_status = status;
        j->status    = status;
    }
    /* the op's callback comes, at the latest, at its timeout or the client's end */
    while (!j->op_done) {
        pthread_cond_wait(&st->cond, &st->lock);
    }
    if (j->status == CKS_OK) {
        j->status = j->op_status;
    } else if (!whole && j->op_status != CKS_ERR_CANCELED) {
        /* its first bytes were with the server before the copy failed, and
         * UCX cannot take back the rest of a message it sends (zeros, from
         * pack): the server may hold the object with bytes that are not the
         * device's. Abort its version, so that it is never restored. */
        cks_error("staged put: the copy of an object of %llu bytes failed while it was "
                  "being sent (the server answered: %s): version %llu of job '%s' is "
                  "aborted",
                  (unsigned long long)j->len, cks_status_string(j->op_status),
                  (unsigned long long)j->version, j->vjob);
        pthread_mutex_unlock(&st->lock);
        cks_status_t ast = cks_version_abort(c, j->vjob, j->version);
        if (ast != CKS_OK) {
            cks_error("staged put: cannot abort version %llu of job '%s': %s",
                      (unsigned long long)j->version, j->vjob, cks_status_string(ast));
        }
        pthread_mutex_lock(&st->lock);
    }
    if (stage_status != CKS_OK) {
        /* leave the reason for cks_client_last_error() */
        pthread_mutex_unlock(&st->lock);
        cks_stage_error(c, stage_status,
                        whole ? "the staged copy of the device buffer failed; the object "
                                "was not stored"
                              : "the staged copy of the device buffer failed while the "
                                "object was being sent: its version was aborted");
        pthread_mutex_lock(&st->lock);
    }
    *(j->host ? &st->host_puts : &st->puts_staged) += 1;
}

/* ---- gets ---------------------------------------------------------------------------------- */

static void cks_stage_read_done(void *arg, cks_status_t status)
{
    cks_slot_read_t *rd = arg;
    cks_stage_t *st     = rd->st;
    pthread_mutex_lock(&st->lock);
    st->state[rd->slot]       = CKS_SLOT_READY;
    st->slot_status[rd->slot] = status;
    st->cur->reads--;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

cks_status_t cks_cl_stage_get(cks_restore_h r, const cks_get_params_t *p, uint64_t *length_p,
                              cks_done_cb_t cb, void *arg)
{
    cks_client_h c = r->client;
    cks_mem_type_t type = CKS_MEM_HOST;
    cks_stage_t *st = NULL;
    int device = 0;
    cks_status_t status;

    if ((unsigned)p->mem_type > CKS_MEM_AUTO) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (p->key == NULL || strlen(p->key) > CKS_KEY_NAME_MAX) {
        return p->key == NULL ? CKS_ERR_INVALID_PARAM : CKS_ERR_KEY_TOO_LONG;
    }
    if ((p->flags & CKS_GET_SCRUB) && (p->field_mask & CKS_GET_FIELD_FLAGS)) {
        return CKS_ERR_UNSUPPORTED; /* a scrub reads into host memory */
    }
    status = cks_stage_classify(c, p->buffer, p->mem_type, &st, &type, &device);
    if (status != CKS_OK || type == CKS_MEM_HOST) {
        return status;
    }
    cks_stage_job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    j->st          = st;
    j->r           = r;
    j->dev         = p->buffer;
    j->device      = device;
    j->buffer_size = p->buffer_size;
    j->cb          = cb;
    j->arg         = arg;
    j->length_p    = length_p;
    j->flags       = (p->field_mask & CKS_GET_FIELD_FLAGS) ? p->flags : 0;
    j->range       = !!(p->field_mask & CKS_GET_FIELD_RANGE);
    j->offset      = j->range ? p->offset : 0;
    j->len         = j->range ? p->length : 0;
    snprintf(j->key, sizeof(j->key), "%s", p->key);
    cks_stage_enqueue(st, j);
    return CKS_INPROGRESS;
}

/* Start the range get of slice i into its slot (lock held). */
static cks_status_t cks_stage_read_start(cks_stage_t *st, cks_stage_job_t *j, uint64_t i)
{
    unsigned slot = cks_stage_slot(st, j, i);
    cks_get_params_t g = {0};
    cks_status_t status;

    g.field_mask         = CKS_GET_FIELD_RANGE;
    g.key                = j->key;
    g.buffer             = st->ring + (uint64_t)slot * st->slice;
    g.buffer_size        = st->slice;
    g.offset             = j->offset + i * st->slice;
    g.length             = cks_stage_slice_len(st, j, i);
    st->state[slot]      = CKS_SLOT_BUSY;
    st->slot_slice[slot] = i;
    st->slot_job[slot]   = j;
    st->slot_status[slot] = CKS_OK;
    st->reads[slot].st   = st;
    st->reads[slot].slot = slot;
    st->reads[slot].got  = 0;
    j->reads++;
    pthread_mutex_unlock(&st->lock);
    status = cks_cl_get_nb(j->r, &g, &st->reads[slot].got, cks_stage_read_done,
                           &st->reads[slot], j->chain ? CKS_WIRE_F_CHECKED : 0);
    pthread_mutex_lock(&st->lock);
    if (status != CKS_INPROGRESS) {
        j->reads--;
        st->state[slot] = CKS_SLOT_FREE;
        return status;
    }
    return CKS_OK;
}

/* Run a staged get (stage thread, lock held on entry and exit). */
static void cks_stage_run_get(cks_stage_t *st, cks_stage_job_t *j)
{
    cks_object_info_t info;
    uint64_t issued = 0, done = 0, crc = 0;
    struct timespec dl;
    cks_status_t status;

    pthread_mutex_unlock(&st->lock);
    status = cks_object_stat(j->r, j->key, &info);
    pthread_mutex_lock(&st->lock);
    if (status != CKS_OK) {
        j->status = status;
        goto out;
    }
    if (!j->range) {
        j->len = info.size;
    } else if (j->offset > info.size || j->len > info.size - j->offset) {
        j->status = CKS_ERR_OUT_OF_RANGE;
        goto out;
    }
    if (j->len > j->buffer_size) {
        j->status = CKS_ERR_INVALID_PARAM;
        goto out;
    }
    j->nslices = (j->len + st->slice - 1) / st->slice;
    /* a whole object from a standalone server: its CRC covers the whole
     * object only, which that server would check on every slice's read
     * (the object read nslices times over); it is checked here instead, on
     * the slices as they pass. Chunks of a cluster carry their own CRCs. */
    j->chain = !j->range && ((j->flags & CKS_GET_VERIFY) || j->r->info.ec_k == 0);
    cks_stage_drain(st); /* earlier puts' slots */
    while (done < j->nslices) {
        /* keep the ring full of reads */
        while (j->status == CKS_OK && issued < j->nslices && issued < done + st->nslots) {
            status = cks_stage_read_start(st, j, issued);
            if (status != CKS_OK) {
                j->status = status;
                break;
            }
            issued++;
        }
        if (j->status != CKS_OK) {
            break;
        }
        /* the oldest slice, in order: wait for it, then copy it to the device
         * while the later ones are still being received */
        unsigned slot = cks_stage_slot(st, j, done);
        cks_stage_deadline(&dl, st->c->timeout_ms * 2);
        while (st->state[slot] != CKS_SLOT_READY) {
            if (pthread_cond_timedwait(&st->cond, &st->lock, &dl) == ETIMEDOUT) {
                break; /* the read's own timeout ends it; look again */
            }
        }
        if (st->state[slot] != CKS_SLOT_READY) {
            continue;
        }
        uint64_t want = cks_stage_slice_len(st, j, done);
        if (st->slot_status[slot] != CKS_OK || st->reads[slot].got != want) {
            j->status = st->slot_status[slot] != CKS_OK ? st->slot_status[slot]
                                                        : CKS_ERR_INTERNAL;
            st->state[slot] = CKS_SLOT_FREE;
            break;
        }
        pthread_mutex_unlock(&st->lock);
        if (j->chain) {
            crc = cks_crc64(crc, st->ring + (uint64_t)slot * st->slice, (size_t)want);
        }
        uint64_t ns = 0;
        status = cks_stage_copy_start(st, j, done, slot);
        if (status == CKS_OK) {
            status = cks_stage_copy_wait(st, j, slot, &ns);
        }
        pthread_mutex_lock(&st->lock);
        st->copy_ns += ns;
        st->staged_bytes += want;
        st->state[slot] = CKS_SLOT_FREE;
        if (status != CKS_OK) {
            j->status = status;
            break;
        }
        done++;
    }
    /* reads still in flight write into the ring: wait for every callback */
    while (j->reads > 0) {
        pthread_cond_wait(&st->cond, &st->lock);
    }
    if (j->status == CKS_OK && j->chain && crc != info.crc64) {
        j->status = CKS_ERR_CRC_MISMATCH;
        cks_error("staged get of '%s': CRC mismatch", j->key);
    }
out:
    if (j->status == CKS_OK && j->length_p != NULL) {
        *j->length_p = j->len;
    }
    if (j->status != CKS_OK) {
        cks_log(j->status > -100 ? CKS_LOG_DEBUG : CKS_LOG_WARN, "staged get of '%s': %s",
                j->key, cks_status_string(j->status));
    }
    st->gets_staged++;
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
            } else if (j->status == CKS_OK && j->is_put) {
                cks_stage_run_put(st, j);
            } else if (j->status == CKS_OK) {
                cks_stage_run_get(st, j);
            }
        }
        st->ring_pos = j->base + j->nslices; /* a put may have skipped to slot 0 */
        st->cur = NULL;
        if (j->handed_off) {
            continue; /* its op's callback ends it; j may be gone already */
        }
        for (unsigned s = 0; s < st->nslots; s++) { /* nothing uses its slots now */
            if (st->slot_job[s] == j) {
                st->state[s]    = CKS_SLOT_FREE;
                st->slot_job[s] = NULL;
            }
        }
        pthread_cond_broadcast(&st->cond);
        pthread_mutex_unlock(&st->lock);
        if (j->is_put && j->copied_cb != NULL) {
            j->copied_cb(j->copied_arg, j->status);
        }
        j->cb(j->arg, j->status);
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
    st->ops->host_unregister(st->eng, st->ring);
    cks_mem_free(c, st->ring);
    st->ops->destroy(st->eng);
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    c->stage = NULL;
    free(st);
}

cks_status_t cks_client_stats(cks_client_h c, cks_client_stats_t *stats_p)
{
    if (c == NULL || stats_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    cks_cl_stage_stats(c, stats_p);
    return CKS_OK;
}
