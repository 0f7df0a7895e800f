/*
 * DESIGN: registered memory (cks_mem_alloc(), cks_mem_free()): buffers UCX
 * allocates in shared memory, kept on the client's list, and announced to
 * every server that is up - on a cluster, after connecting to every server
 * on this host - so that each on this host maps and faults them in at
 * allocation, not during the first transfers, as this process does too
 * (the scratch region too, from
 * the progress thread; a server that comes up later is told by the op
 * engine, op.c). See client.c for the whole design.
 *
 * Never: free a region a transfer may still use (the caller's contract).
 */
#include "client_int.h"

#include <stdlib.h>
#include <unistd.h>

#define CKS_HUGE_PAGE (2u << 20)

/* Connect to the servers of the cluster on this host that no request has
 * reached yet, and wait for them (each bounded by the client's timeout): a
 * MEM_MAP makes no connection (op.c), and a trainer that allocates right
 * after cks_client_create() has reached one server, so the others mapped
 * its buffers only at their first requests, while its first transfers ran
 * (a replacement rank's first restore of 8 x 64 MiB: 1.4 GB/s against 16 -
 * 19 once every server had mapped them; docs/PERFORMANCE.md). Each server
 * that comes up is told of the regions already on the list
 * (cks_cl_srv_ended()); the new one is told next. A server that is down
 * fails its connect at once, and is told when it comes back. */
static void cks_cl_mem_connect_local(cks_client_h c)
{
    cks_waiter_t *w  = c->map != NULL ? calloc(c->nsrv, sizeof(*w)) : NULL;
    cks_status_t *st = w != NULL ? calloc(c->nsrv, sizeof(*st)) : NULL;

    for (size_t i = 0; st != NULL && i < c->nsrv; i++) {
        cks_op_t *op = NULL;
        cks_waiter_init(&w[i]);
        st[i] = CKS_ERR_UNSUPPORTED; /* elsewhere: nothing to map */
        if (cks_tp_peer_is_local(c->srv[i].addr) &&
            (op = cks_op_new(CKS_OP_CONNECT, CKS_MSG_HELLO)) != NULL) {
            op->srv    = i;
            op->target = CKS_TARGET_FIXED;
            st[i]      = cks_cl_submit(c, op, cks_waiter_cb, &w[i]);
        }
    }
    for (size_t i = 0; st != NULL && i < c->nsrv; i++) {
        (void)cks_waiter_wait(&w[i], st[i]); /* a failure: its region waits for it */
    }
    free(st);
    free(w);
}

/* Tell every server that is up of a new region, and wait (bounded by the
 * client's timeout) until those on this host have mapped and faulted it in:
 * registration at allocation, as RDMA memory is registered, so that the
 * transfers run at full speed from the first. Servers elsewhere have nothing
 * to do; any failure only leaves the fault-in to the first transfers. */
static void cks_cl_mem_register(cks_client_h c, const cks_cl_mem_t *m)
{
    cks_waiter_t *w = calloc(c->nsrv, sizeof(*w));
    cks_status_t *st = calloc(c->nsrv, sizeof(*st));
    size_t mapped = 0;

    for (size_t i = 0; w != NULL && st != NULL && i < c->nsrv; i++) {
        cks_op_t *op = cks_cl_mem_map_op(m, i);
        cks_waiter_init(&w[i]);
        st[i] = op != NULL ? cks_cl_submit(c, op, cks_waiter_cb, &w[i]) : CKS_ERR_NO_MEMORY;
    }
    /* our own page tables too, while the servers fill theirs: the servers
     * write a restore's bytes through their mappings, so without this every
     * first access of ours (a degraded restore's decode into the buffer, the
     * trainer's reads of what was restored, its writes before a put) took
     * a page fault per 4 KiB page */
    if (cks_tp_mem_populate(m->mem) != CKS_OK) {
        cks_debug("%zu bytes at %p: not faulted in ahead here (the kernel cannot)", m->len,
                  m->base);
    }
    for (size_t i = 0; w != NULL && st != NULL && i < c->nsrv; i++) {
        st[i] = cks_waiter_wait(&w[i], st[i]);
        mapped += st[i] == CKS_OK;
        if (st[i] != CKS_OK && st[i] != CKS_ERR_UNSUPPORTED && st[i] != CKS_ERR_UNREACHABLE) {
            cks_info("server %s:%u did not map a region of %zu bytes ahead: %s",
                     c->srv[i].addr, c->srv[i].port, m->len, cks_status_string(st[i]));
        }
    }
    cks_debug("%zu bytes at %p: mapped ahead by %zu of %zu servers", m->len, m->base, mapped,
              c->nsrv);
    free(st);
    free(w);
}

/* The same from the progress thread, for a region of the library's own
 * (the scratch): every server on this host that is up is asked to map it,
 * answers not awaited. */
void cks_cl_mem_announce_all(cks_client_h c, const cks_cl_mem_t *m)
{
    for (size_t pos = 0; pos < c->nsrv; pos++) {
        cks_op_t *op;
        if (c->srv[pos].state != CKS_SRV_UP || !cks_tp_conn_local(c->srv[pos].conn) ||
            c->srv[pos].no_rma || (op = cks_cl_mem_map_op(m, pos)) == NULL) {
            continue;
        }
        cks_cl_start(c, op, cks_cl_noop_done, NULL);
    }
}

/* The region's page size, where the kernel tells it cheaply; for the first
 * region of at least a huge page of a client, in any case: when that one got
 * base pages, say so (info): every server on this host then faults in (and
 * the hypervisor may trap) each 4 KiB of it. UCX takes huge pages where the
 * host has some to give (scripts/hugepages). cks_client_stats() looks up
 * the ones not known. */
static void cks_cl_mem_pages(cks_client_h c, cks_cl_mem_t *m)
{
    long base = sysconf(_SC_PAGESIZE);
    int first = m->len >= CKS_HUGE_PAGE &&
                !__atomic_exchange_n(&c->pages_checked, 1, __ATOMIC_RELAXED);
    m->page   = cks_tp_mem_page_size(m->mem, first);
    cks_debug("cks_mem_alloc: %zu bytes at %p in pages of %zu bytes (0: not known yet)",
              m->len, m->base, m->page);
    if (first && m->page != 0 && m->page <= (size_t)base) {
        cks_info("cks_mem_alloc: %zu bytes in %ld-byte pages (no huge pages were free on "
                 "this host); servers on this host map them page by page",
                 m->len, base);
    }
}

cks_status_t cks_mem_alloc(cks_client_h c, size_t size, void **ptr_p)
{
    cks_cl_mem_t *m;
    cks_status_t status;

    if (c == NULL || size == 0 || ptr_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_tp_mem_alloc(c->tp, size, &m->mem, &m->base);
    if (status != CKS_OK) {
        free(m);
        return status;
    }
    m->len  = size;
    cks_cl_mem_pages(c, m);
    cks_cl_mem_connect_local(c); /* before the list: a server that comes up maps the rest */
    pthread_mutex_lock(&c->lock);
    m->next = c->mems;
    c->mems = m;
    pthread_mutex_unlock(&c->lock);
    cks_cl_mem_register(c, m);
    *ptr_p = m->base;
    return CKS_OK;
}

cks_status_t cks_mem_free(cks_client_h c, void *ptr)
{
    cks_cl_mem_t **pp, *m = NULL;

    if (c == NULL || ptr == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&c->lock);
    for (pp = &c->mems; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->base == ptr) {
            m   = *pp;
            *pp = m->next;
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (m == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    cks_tp_mem_unmap(m->mem);
    free(m);
    return CKS_OK;
}
