/*
 * DESIGN: repair's fetch buffers: where the k chunks a rebuild reads land,
 * and where the chunks it rebuilds for other members are decoded.
 *
 * First choice, a slot of the fetch region: shared memory from
 * cks_tp_mem_alloc() (CKS_RP_REG_BYTES, carved into chunk-sized slots),
 * made at the first rebuild and kept until the server stops. A member on
 * this host then writes the chunk it serves straight into it (a CHUNK_GET
 * that carries the slot's RMA descriptor, as a client's read does), with
 * one copy on its own progress thread, checking the chunk's CRC from cache
 * as it writes: the rebuilding server's progress thread copies nothing and
 * its decoders need not check those chunks again. Kept for good because
 * each member maps the region and faults its pages in at its first write
 * into it: a region made anew for every rebuild would pay that every time.
 * For the same reason a read takes a free slot that its member wrote last
 * (else one nobody wrote yet, else any): each member then faults in the few
 * slots it has in flight at once rather than, over a repair, all of them.
 * Otherwise (no region, all slots taken, a chunk larger than the region),
 * malloc() memory, kept while repair has work (its pages already touched):
 * the chunk then comes as a payload, copied by UCX on this side.
 * A slot whose read ended without its member's answer (a timeout, a lost
 * connection) is retired for good: that member may still write into it
 * (stopped or slow, then resumed), and a slot handed to another read would
 * take those bytes after they were checked. With every slot retired, reads
 * go as payloads.
 *
 * Runs on the progress thread only.
 */
#include "repair_int.h"

#include <limits.h>
#include <stdlib.h>

/* The region's slots for chunks of `chunk` bytes: made at the first call,
 * carved again for another chunk size once every slot is back. */
static int cks_rp_reg_ready(cks_rp_t *rp, uint64_t chunk)
{
    if (rp->reg_mem == NULL && !rp->reg_none) {
        void *base = NULL;
        if (cks_tp_mem_alloc(rp->s->tp, CKS_RP_REG_BYTES, &rp->reg_mem, &base) != CKS_OK) {
            rp->reg_mem  = NULL;
            rp->reg_none = 1;
            cks_info("repair: no shared fetch region; chunks it reads come as payloads");
            return 0;
        }
        rp->reg_base = base;
        rp->reg_desc = malloc(CKS_RP_REG_SLOTS * sizeof(*rp->reg_desc));
        if (rp->reg_desc == NULL) {
            cks_tp_mem_unmap(rp->reg_mem);
            rp->reg_mem  = NULL;
            rp->reg_base = NULL;
            rp->reg_none = 1;
            return 0;
        }
    }
    if (rp->reg_mem == NULL) {
        return 0;
    }
    if (chunk != rp->reg_chunk && rp->reg_used == 0) {
        uint64_t n    = chunk > 0 ? CKS_RP_REG_BYTES / chunk : 0;
        rp->reg_chunk = chunk;
        rp->reg_slots = (unsigned)(n > CKS_RP_REG_SLOTS ? CKS_RP_REG_SLOTS : n);
        for (unsigned i = 0; i < CKS_RP_REG_SLOTS; i++) {
            rp->reg_writer[i] = CKS_RP_NOBODY;
        }
        /* each slot's descriptor, made once: a read sends its slot's */
        for (unsigned i = 0; i < rp->reg_slots; i++) {
            if (cks_tp_mem_describe(rp->reg_mem, rp->reg_base + (uint64_t)i * chunk, chunk,
                                    rp->reg_desc[i], CKS_TP_RMA_DESC_MAX,
                                    &rp->reg_desc_len[i]) != CKS_OK) {
                rp->reg_slots = i; /* the slots before it */
                break;
            }
        }
    }
    return chunk == rp->reg_chunk && rp->reg_slots > 0;
}

uint8_t *cks_rp_buf_get(cks_rp_t *rp, uint64_t chunk, uint32_t who)
{
    if (cks_rp_reg_ready(rp, chunk)) {
        /* a free slot that `who` wrote before, else one nobody wrote, else
         * any (why: the DESIGN note above) */
        unsigned pick = UINT_MAX, fresh = UINT_MAX, any = UINT_MAX;
        for (unsigned i = 0; i < rp->reg_slots && pick == UINT_MAX; i++) {
            if (rp->reg_used & (1ull << i)) {
                continue;
            }
            if (rp->reg_writer[i] == who) {
                pick = i;
            } else if (rp->reg_writer[i] == CKS_RP_NOBODY && fresh == UINT_MAX) {
                fresh = i;
            } else if (any == UINT_MAX) {
                any = i;
            }
        }
        pick = pick != UINT_MAX ? pick : fresh != UINT_MAX ? fresh : any;
        if (pick != UINT_MAX) {
            rp->reg_used |= 1ull << pick;
            rp->reg_new_writer += rp->reg_writer[pick] != who;
            rp->reg_writer[pick] = who;
            return rp->reg_base + (uint64_t)pick * chunk;
        }
    }
    if (chunk != rp->pool_chunk) {
        cks_rp_pool_drain(rp);
        rp->pool_chunk = chunk;
    }
    return rp->npool > 0 ? rp->pool[--rp->npool] : malloc(chunk);
}

int cks_rp_buf_shared(const cks_rp_t *rp, const uint8_t *buf)
{
    /* also after the stop freed the region: a late task's slots are not
     * malloc() memory */
    return rp->reg_base != NULL && buf >= rp->reg_base &&
           buf < rp->reg_base + (uint64_t)rp->reg_slots * rp->reg_chunk;
}

void cks_rp_buf_put(cks_rp_t *rp, uint8_t *buf, uint64_t chunk)
{
    if (buf == NULL) {
        return;
    }
    if (cks_rp_buf_shared(rp, buf)) {
        rp->reg_used &= ~(1ull << ((uint64_t)(buf - rp->reg_base) / rp->reg_chunk));
    } else if (chunk == rp->pool_chunk && rp->npool < CKS_RP_POOL_MAX) {
        rp->pool[rp->npool++] = buf;
    } else {
        free(buf);
    }
}

int cks_rp_fetch_into(cks_server_h s, cks_tp_conn_h conn, cks_rp_fetch_t *f)
{
    cks_rp_t *rp = s->rp;
    if (rp->reg_mem == NULL || !cks_rp_buf_shared(rp, f->buf) || !cks_tp_conn_local(conn)) {
        return 0;
    }
    unsigned i  = (unsigned)((uint64_t)(f->buf - rp->reg_base) / rp->reg_chunk);
    f->desc     = rp->reg_desc[i];
    f->desc_len = rp->reg_desc_len[i];
    return 1;
}

void cks_rp_buf_retire(cks_rp_t *rp, uint8_t *buf, uint64_t chunk)
{
    if (!cks_rp_buf_shared(rp, buf)) {
        cks_rp_buf_put(rp, buf, chunk); /* a payload's: UCX is done with it */
        return;
    }
    /* its member may still be about to write there (stopped, or slow): the
     * slot stays taken for good, so that no other read lands in it */
    rp->reg_retired++;
    cks_info("repair: fetch slot %llu retired (%llu so far): its read ended without an "
             "answer, and its member may still write there",
             (unsigned long long)((uint64_t)(buf - rp->reg_base) / rp->reg_chunk),
             (unsigned long long)rp->reg_retired);
}

void cks_rp_pool_drain(cks_rp_t *rp)
{
    while (rp->npool > 0) {
        free(rp->pool[--rp->npool]);
    }
}

void cks_rp_bufs_free(cks_rp_t *rp)
{
    cks_rp_pool_drain(rp);
    if (rp->reg_mem != NULL) {
        cks_tp_mem_unmap(rp->reg_mem); /* before the worker goes */
    }
    free(rp->reg_desc);
    rp->reg_desc = NULL;
    rp->reg_mem  = NULL;
    rp->reg_none = 1; /* none made again */
}
