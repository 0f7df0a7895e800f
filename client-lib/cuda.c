/*
 * DESIGN: the CUDA runtime copy engine of the staging pipeline (stage.c),
 * built only with the CUDA toolkit (CKS_HAVE_CUDA). Owns two non-blocking
 * streams of the library's own (copies of consecutive slots alternate
 * between them, so that one slice's copy overlaps the next one's) and one
 * event per ring slot that marks its copy's end.
 *
 * Threads: classify on any thread (cudaPointerGetAttributes does not
 * synchronize); create and host_register/unregister at the stage's set-up
 * and end, on an application thread; every other call on the stage thread
 * only. cudaError_t is
 * translated here, once, and logged with its text.
 *
 * Must never: be called on the UCX progress thread (copy_wait blocks on an
 * event); synchronize the device or a stream other than its own (the
 * trainer's streams run on).
 */
#include "stage.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    unsigned nslots;
    int device;           /* streams and events belong to it (-1: none yet) */
    cudaStream_t stream[2];
    cudaEvent_t event[CKS_STAGE_SLICES_MAX];
} cks_cuda_engine_t;

static cks_status_t cks_cuda_status(cudaError_t err, const char *what)
{
    if (err == cudaSuccess) {
        return CKS_OK;
    }
    cks_error("CUDA %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
    switch (err) {
    case cudaErrorMemoryAllocation:
        return CKS_ERR_NO_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorIllegalAddress:
        return CKS_ERR_INVALID_PARAM;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
        return CKS_ERR_UNSUPPORTED;
    default:
        return CKS_ERR_INTERNAL;
    }
}

static cks_status_t cks_cuda_classify(void *eng, const void *ptr, cks_mem_type_t *type_p,
                                      int *device_p)
{
    struct cudaPointerAttributes a;
    cudaError_t err = cudaPointerGetAttributes(&a, ptr);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it */
        return cks_cuda_status(err, "cudaPointerGetAttributes");
    }
    /* managed memory is reachable from the host, but copying it through the
     * ring keeps the device's pages where they are */
    *type_p   = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged
                    ? CKS_MEM_CUDA
                    : CKS_MEM_HOST;
    *device_p = a.device;
    return CKS_OK;
}

static cks_status_t cks_cuda_register(void *eng, void *ptr, size_t len)
{
    return cks_cuda_status(cudaHostRegister(ptr, len, cudaHostRegisterPortable),
                           "cudaHostRegister");
}

static void cks_cuda_unregister(void *eng, void *ptr)
{
    (void)cks_cuda_status(cudaHostUnregister(ptr), "cudaHostUnregister");
}

static void cks_cuda_release(cks_cuda_engine_t *e)
{
    for (unsigned i = 0; i < e->nslots; i++) {
        if (e->event[i] != NULL) {
            cudaEventDestroy(e->event[i]);
            e->event[i] = NULL;
        }
    }
    for (unsigned i = 0; i < 2; i++) {
        if (e->stream[i] != NULL) {
            cudaStreamDestroy(e->stream[i]);
            e->stream[i] = NULL;
        }
    }
}

static cks_status_t cks_cuda_bind(void *eng, int device)
{
    cks_cuda_engine_t *e = eng;
    cks_status_t status  = cks_cuda_status(cudaSetDevice(device), "cudaSetDevice");
    if (status != CKS_OK || e->device == device) {
        return status;
    }
    cks_cuda_release(e);
    for (unsigned i = 0; status == CKS_OK && i < 2; i++) {
        status = cks_cuda_status(cudaStreamCreateWithFlags(&e->stream[i], cudaStreamNonBlocking),
                                 "cudaStreamCreateWithFlags");
    }
    for (unsigned i = 0; status == CKS_OK && i < e->nslots; i++) {
        status = cks_cuda_status(cudaEventCreateWithFlags(&e->event[i],
                                                          cudaEventDisableTiming),
                                 "cudaEventCreateWithFlags");
    }
    if (status != CKS_OK) {
        cks_cuda_release(e);
        e->device = -1;
        return status;
    }
    e->device = device;
    return CKS_OK;
}

static cks_status_t cks_cuda_copy_start(void *eng, unsigned slot, cks_copy_dir_t dir, void *dst,
                                        const void *src, size_t len)
{
    cks_cuda_engine_t *e = eng;
    cudaStream_t s       = e->stream[slot & 1];
    cks_status_t status  = cks_cuda_status(
        cudaMemcpyAsync(dst, src, len,
                        dir == CKS_COPY_D2H ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s),
        "cudaMemcpyAsync");
    if (status == CKS_OK) {
        status = cks_cuda_status(cudaEventRecord(e->event[slot], s), "cudaEventRecord");
    }
    return status;
}

static cks_status_t cks_cuda_copy_wait(void *eng, unsigned slot)
{
    cks_cuda_engine_t *e = eng;
    return cks_cuda_status(cudaEventSynchronize(e->event[slot]), "cudaEventSynchronize");
}

static void cks_cuda_destroy(void *eng)
{
    cks_cuda_engine_t *e = eng;
    cks_cuda_release(e);
    free(e);
}

static const cks_stage_engine_ops_t cks_cuda_engine_ops = {
    .name            = "CUDA runtime",
    .classify        = cks_cuda_classify,
    .host_register   = cks_cuda_register,
    .host_unregister = cks_cuda_unregister,
    .bind            = cks_cuda_bind,
    .copy_start      = cks_cuda_copy_start,
    .copy_wait       = cks_cuda_copy_wait,
    .destroy         = cks_cuda_destroy,
};

cks_status_t cks_cuda_engine_create(unsigned nslots, const cks_stage_engine_ops_t **ops_p,
                                    void **eng_p, char *why, size_t why_len)
{
    int count       = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        snprintf(why, why_len, "no CUDA device (%s)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "the runtime counts none");
        (void)cudaGetLastError();
        return CKS_ERR_UNSUPPORTED;
    }
    cks_cuda_engine_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    e->nslots = nslots;
    e->device = -1;
    *ops_p    = &cks_cuda_engine_ops;
    *eng_p    = e;
    return CKS_OK;
}
