/*
 * DESIGN: the scratch region: where degraded reads (read.c) put the chunks
 * that are not the caller's - parity, partly covered data, data rebuilt
 * outside the caller's range. One region per client, from
 * cks_tp_mem_alloc() like the caller's cks_mem_alloc() buffers, so that a
 * server on this host writes a parity chunk into it with one copy (and maps
 * it once, ahead: MEM_MAP) instead of the client pulling it through the
 * kernel into fresh pages. It is taken in units of 64 KiB, first fit, and
 * bounds the memory of degraded reads: a user that finds it full waits in
 * its queue until another gives room back. One that needs more than all of
 * it, or a client that cannot have it (or has none: size 0), takes malloc()
 * memory instead (the reader decides, cks_cl_scratch_fits()). Size:
 * CKS_CLIENT_FIELD_SCRATCH.
 *
 * Never: touch it from any thread but the progress thread once that runs;
 * wake the waiters here (the reader does, when it gave room back).
 */
#include "client_int.h"

#include <stdlib.h>

#define CKS_CL_SCRATCH_UNIT (64u << 10)

struct cks_cl_scratch {
    cks_cl_mem_t mem;   /* mem.mem NULL: none (size 0, or no memory: malloc) */
    size_t units;       /* of CKS_CL_SCRATCH_UNIT bytes */
    cks_cl_scratch_wait_t *wait_head, *wait_tail;
    uint64_t used[];    /* bit per unit */
};

void cks_cl_scratch_free(cks_client_h c)
{
    if (c->scratch != NULL && c->scratch->mem.mem != NULL) {
        cks_tp_mem_unmap(c->scratch->mem.mem);
    }
    free(c->scratch);
    c->scratch     = NULL;
    c->scratch_mem = NULL;
}

static struct cks_cl_scratch *cks_scratch_get(cks_client_h c)
{
    struct cks_cl_scratch *sc = c->scratch;
    size_t units = (size_t)((c->scratch_size + CKS_CL_SCRATCH_UNIT - 1) / CKS_CL_SCRATCH_UNIT);

    if (sc != NULL) {
        return sc;
    }
    if ((sc = calloc(1, sizeof(*sc) + (units / 64 + 1) * sizeof(uint64_t))) == NULL) {
        return NULL;
    }
    c->scratch = sc;
    if (units == 0) {
        return sc;
    }
    if (cks_tp_mem_alloc(c->tp, units * CKS_CL_SCRATCH_UNIT, &sc->mem.mem, &sc->mem.base) !=
        CKS_OK) {
        sc->mem.mem = NULL;
        cks_info("no scratch region for degraded reads: they use malloc()");
        return sc;
    }
    sc->units      = units;
    sc->mem.len    = units * CKS_CL_SCRATCH_UNIT;
    c->scratch_mem = &sc->mem;
    /* servers on this host map it now; unlike cks_mem_alloc()'s regions it
     * is not faulted in here as well: the parity they write into it faults
     * a slot's pages in once, at its first use, and faulting all 32 MiB in
     * ahead cost every client that much while degraded restores gained
     * nothing measurable (docs/PERFORMANCE.md) */
    cks_cl_mem_announce_all(c, &sc->mem);
    return sc;
}

void cks_cl_scratch_prepare(cks_client_h c)
{
    (void)cks_scratch_get(c); /* without it, degraded reads try again, then malloc() */
}

int cks_cl_scratch_fits(cks_client_h c, unsigned n, uint64_t len)
{
    struct cks_cl_scratch *sc = cks_scratch_get(c);
    uint64_t units = (uint64_t)n * ((len + CKS_CL_SCRATCH_UNIT - 1) / CKS_CL_SCRATCH_UNIT);
    return sc != NULL && sc->mem.mem != NULL && units <= sc->units;
}

static int cks_scratch_bit(const struct cks_cl_scratch *sc, size_t u)
{
    return (int)((sc->used[u / 64] >> (u % 64)) & 1u);
}

static void cks_scratch_mark(struct cks_cl_scratch *sc, size_t first, size_t n, int used)
{
    for (size_t u = first; u < first + n; u++) {
        if (used) {
            sc->used[u / 64] |= 1ull << (u % 64);
        } else {
            sc->used[u / 64] &= ~(1ull << (u % 64));
        }
    }
}

uint8_t *cks_cl_scratch_take(cks_client_h c, uint64_t len)
{
    struct cks_cl_scratch *sc = c->scratch;
    size_t n = (size_t)((len + CKS_CL_SCRATCH_UNIT - 1) / CKS_CL_SCRATCH_UNIT), run = 0;
    for (size_t u = 0; u < sc->units; u++) {
        run = cks_scratch_bit(sc, u) ? 0 : run + 1;
        if (run == n) {
            cks_scratch_mark(sc, u + 1 - n, n, 1);
            return (uint8_t *)sc->mem.base + (u + 1 - n) * (uint64_t)CKS_CL_SCRATCH_UNIT;
        }
    }
    return NULL;
}

void cks_cl_scratch_give(cks_client_h c, uint8_t *p, uint64_t len)
{
    struct cks_cl_scratch *sc = c->scratch;
    size_t first = (size_t)((p - (uint8_t *)sc->mem.base) / CKS_CL_SCRATCH_UNIT);
    cks_scratch_mark(sc, first, (size_t)((len + CKS_CL_SCRATCH_UNIT - 1) / CKS_CL_SCRATCH_UNIT),
                     0);
}

void cks_cl_scratch_wait(cks_client_h c, cks_cl_scratch_wait_t *w)
{
    struct cks_cl_scratch *sc = c->scratch;
    CKS_QUEUE_PUSH(sc->wait_head, sc->wait_tail, w);
    w->queued = 1;
}

cks_cl_scratch_wait_t *cks_cl_scratch_waiter(cks_client_h c)
{
    struct cks_cl_scratch *sc = c->scratch;
    cks_cl_scratch_wait_t *w  = sc != NULL ? sc->wait_head : NULL;
    if (w == NULL) {
        return NULL;
    }
    sc->wait_head = w->next;
    if (sc->wait_head == NULL) {
        sc->wait_tail = NULL;
    }
    w->next   = NULL;
    w->queued = 0;
    return w;
}
