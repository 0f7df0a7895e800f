/*
 * client-lib private: device memory. stage.c owns the staging pipeline (a
 * ring of pinned host slices, its thread, the slicing and ordering of
 * staged puts and gets) and decides which path a device buffer takes;
 * the copies themselves go through a copy engine (cks_stage_engine_ops_t):
 * cuda.c's (the CUDA runtime, built with CKS_HAVE_CUDA), or, in test builds,
 * a host copy, so that the pipeline is tested on machines without a GPU
 * through the same code.
 */
#ifndef CKS_STAGE_H
#define CKS_STAGE_H

#include "client_int.h"

#define CKS_STAGE_SLICE_DEFAULT  (4ull << 20)
#define CKS_STAGE_SLICES_DEFAULT 8u
#define CKS_STAGE_SLICES_MAX     64u

typedef enum {
    CKS_COPY_D2H = 0, /* device to host (puts) */
    CKS_COPY_H2D = 1, /* host to device (gets) */
} cks_copy_dir_t;

/* A copy engine. Every call but classify runs on the stage thread only. */
typedef struct {
    const char *name;
    /* What memory `ptr` is: CKS_MEM_HOST or CKS_MEM_CUDA; *device_p the
     * device that holds it. Any thread; never blocks. */
    cks_status_t (*classify)(void *eng, const void *ptr, cks_mem_type_t *type_p, int *device_p);
    /* Pin [ptr, ptr + len) for the engine's copies; undo with unregister. */
    cks_status_t (*host_register)(void *eng, void *ptr, size_t len);
    void (*host_unregister)(void *eng, void *ptr);
    /* Bind the calling (stage) thread to a device before its copies. */
    cks_status_t (*bind)(void *eng, int device);
    /* Start copying len bytes for ring slot `slot` (asynchronous; copies of
     * different slots may overlap), and wait for that slot's copy. */
    cks_status_t (*copy_start)(void *eng, unsigned slot, cks_copy_dir_t dir, void *dst,
                               const void *src, size_t len);
    cks_status_t (*copy_wait)(void *eng, unsigned slot);
    void (*destroy)(void *eng);
} cks_stage_engine_ops_t;

#ifdef CKS_HAVE_CUDA
/* cuda.c: an engine with `nslots` slots on the CUDA runtime, or
 * CKS_ERR_UNSUPPORTED with the reason in why ("no CUDA device"). */
cks_status_t cks_cuda_engine_create(unsigned nslots, const cks_stage_engine_ops_t **ops_p,
                                    void **eng_p, char *why, size_t why_len);
#endif

typedef struct cks_stage cks_stage_t;
typedef struct cks_stage_job cks_stage_job_t;

/* client create: remember the ring's geometry (CKS_CLIENT_FIELD_STAGE). */
cks_status_t cks_cl_stage_config(cks_client_h c, const cks_client_params_t *params);

/* cks_put_nb() of a buffer whose mem_type is not CKS_MEM_HOST (or with a
 * COPIED callback, or CKS_PUT_FIELD_STAGED: host memory staged too):
 * returns CKS_OK when the op goes on as an ordinary put
 * (host memory, or device memory that UCX moves itself: op->mem_type set),
 * CKS_INPROGRESS when the stage took the op over (it submits it, and runs
 * cb once), or an error (op freed, cb never runs). */
cks_status_t cks_cl_stage_put(cks_client_h c, const cks_put_params_t *p, cks_op_t *op,
                              cks_done_cb_t *cb_p, void **arg_p);

/* cks_get_nb() into a buffer whose mem_type is not CKS_MEM_HOST: CKS_OK
 * when it is host memory after all (CKS_MEM_AUTO), CKS_INPROGRESS when the
 * stage runs it (cb runs once), or an error (cb never runs). */
cks_status_t cks_cl_stage_get(cks_restore_h r, const cks_get_params_t *p, uint64_t *length_p,
                              cks_done_cb_t cb, void *arg);

/* cks_client_stats() */
void cks_cl_stage_stats(cks_client_h c, cks_client_stats_t *stats);

/* client destroy, once the progress thread has stopped (which failed what
 * the stage had in flight, and refuses new ops): stop the stage thread,
 * fail the jobs that wait, unpin and free the ring. */
void cks_cl_stage_free(cks_client_h c);

#endif
