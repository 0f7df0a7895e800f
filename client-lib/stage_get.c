/*
 * DESIGN: gets through the staging ring into device memory: the server's
 * bytes land in ring slots, the stage thread copies each slice to the
 * device and checks the CRC while that copy runs (one copy in flight beside
 * the next slice). See stage.c for the whole design.
 *
 * Never: report CKS_OK for bytes that did not come from the server.
 */
#include "stage_int.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* the stage thread runs it (job->run) */
static void cks_stage_run_get(cks_stage_t *st, cks_stage_job_t *j);

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
    j->run         = cks_stage_run_get;
    j->slice       = st->gslice;
    j->nslots      = st->gslots;
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
    g.buffer_size        = j->slice;
    g.offset             = j->offset + i * j->slice;
    g.length             = cks_stage_slice_len(st, j, i);
    st->state[slot]      = CKS_SLOT_BUSY;
    st->slot_slice[slot] = i;
    st->slot_job[slot]   = j;
    st->slot_status[slot] = CKS_OK;
    st->reads[slot].st   = st;
    st->reads[slot].slot = slot;
    st->reads[slot].got  = 0;
    st->cur->reads++; /* the batch's: read_done counts them down there */
    pthread_mutex_unlock(&st->lock);
    cks_restore_renew(j->r); /* as any get does */
    status = cks_cl_read(j->r, &g, &st->reads[slot].got, cks_stage_read_done, &st->reads[slot],
                         j->chain ? CKS_WIRE_F_CHECKED : 0);
    pthread_mutex_lock(&st->lock);
    if (status != CKS_INPROGRESS) {
        st->cur->reads--;
        st->state[slot] = CKS_SLOT_FREE;
        return status;
    }
    return CKS_OK;
}

/* Queue the CRC of slice i, in `slot`, on a CRC thread (lock held; without
 * CRC threads it is computed here, lock released). */
static void cks_stage_crc_queue(cks_stage_t *st, unsigned slot, size_t len)
{
    cks_slot_crc_t *k = &st->crcs[slot];
    k->ptr            = st->ring + (uint64_t)slot * st->slice;
    k->len            = len;
    k->crc            = 0;
    k->queued         = 1;
    if (st->crcq != NULL && cks_workq_push(st->crcq, &k->wq) == CKS_OK) {
        return;
    }
    pthread_mutex_unlock(&st->lock);
    uint64_t crc = cks_crc64(0, k->ptr, len);
    pthread_mutex_lock(&st->lock);
    k->crc    = crc;
    k->queued = 0;
}

/* The most gets one batch takes (the ring's slots bound the bytes). */
#define CKS_STAGE_BATCH_MAX 64u

/* Learn a get's object (stat), its length and whether its CRC is checked
 * here; its status says why not (stage thread, lock held, released for the
 * stat). */
static void cks_stage_get_stat(cks_stage_t *st, cks_stage_job_t *j)
{
    cks_object_info_t info;
    pthread_mutex_unlock(&st->lock);
    cks_status_t status = cks_object_stat(j->r, j->key, &info);
    pthread_mutex_lock(&st->lock);
    j->statted = 1;
    if (status != CKS_OK) {
        j->status = status;
        return;
    }
    if (!j->range) {
        j->len = info.size;
    } else if (j->offset > info.size || j->len > info.size - j->offset) {
        j->status = CKS_ERR_OUT_OF_RANGE;
        return;
    }
    if (j->len > j->buffer_size) {
        j->status = CKS_ERR_INVALID_PARAM;
        return;
    }
    j->nslices = (j->len + j->slice - 1) / j->slice;
    /* a whole object from a standalone server: its CRC covers the whole
     * object only, which that server would check on every slice's read
     * (the object read nslices times over); it is checked here instead, on
     * the slices as they pass. Chunks of a cluster carry their own CRCs. */
    j->chain    = !j->range && ((j->flags & CKS_GET_VERIFY) || j->r->info.ec_k == 0);
    j->crc_want = info.crc64;
}

/* Free the slot of the batch's oldest slice (sequence number seq): wait for
 * its copy to the device and its CRC, if they were started, and fold the
 * CRC into its get's (slices are freed in order). Stage thread, lock held
 * on entry and exit (released while it waits). */
static void cks_stage_get_free(cks_stage_t *st, uint64_t base, uint64_t seq)
{
    unsigned slot       = (unsigned)((base + seq) % st->gslots);
    cks_stage_job_t *j  = st->slot_job[slot];
    uint64_t i          = st->slot_slice[slot];
    if (st->slot_copied[slot]) {
        uint64_t ns = 0;
        pthread_mutex_unlock(&st->lock);
        cks_status_t status = cks_stage_copy_wait(st, j, slot, &ns);
        pthread_mutex_lock(&st->lock);
        st->copy_ns += ns;
        if (status != CKS_OK && j->status == CKS_OK) {
            j->status = status;
        }
        while (st->crcs[slot].queued) { /* a CRC always ends: no deadline */
            pthread_cond_wait(&st->cond, &st->lock);
        }
        if (j->chain && j->status == CKS_OK) {
            j->crc = cks_crc64_combine(j->crc, st->crcs[slot].crc,
                                       cks_stage_slice_len(st, j, i));
        }
        st->slot_copied[slot] = 0;
    }
    st->state[slot] = CKS_SLOT_FREE;
    j->freed_n++;
}

/* Settle the gets of the batch that are done: every slice read was freed
 * and no more will be read. Their callbacks run as each is done; the
 * others are freed here, the first (`first`, whose `reads` counts the
 * batch's) by the stage thread's loop. Lock held (released for callbacks). */
static void cks_stage_get_settle(cks_stage_t *st, cks_stage_job_t **batch, unsigned nb)
{
    for (unsigned b = 0; b < nb; b++) {
        cks_stage_job_t *j = batch[b];
        if (j == NULL || j->finished || !j->issuing_done || j->freed_n < j->issued) {
            continue;
        }
        j->finished = 1;
        if (j->status == CKS_OK && j->chain && j->crc != j->crc_want) {
            j->status = CKS_ERR_CRC_MISMATCH;
            cks_error("staged get of '%s': CRC mismatch", j->key);
        }
        if (j->status == CKS_OK && j->length_p != NULL) {
            *j->length_p = j->len;
        }
        if (j->status != CKS_OK) {
            cks_log(j->status > -100 ? CKS_LOG_DEBUG : CKS_LOG_WARN, "staged get of '%s': %s",
                    j->key, cks_status_string(j->status));
        }
        st->gets_staged++;
        j->cb_done = 1;
        if (b > 0) {
            batch[b] = NULL;
        }
        pthread_mutex_unlock(&st->lock);
        j->cb(j->arg, j->status);
        if (b > 0) {
            free(j);
        }
        pthread_mutex_lock(&st->lock);
    }
}

/* Run a staged get, with the gets queued right behind it (stage thread,
 * lock held on entry and exit): one stream of slices through the ring, so
 * that the next object's reads start while the last slices of this one
 * are still copied, instead of each object filling and draining the ring
 * in turn. Slice after slice of the stream (its sequence number seq goes to
 * slot (base + seq) % nslots): read with a range get, copied host-to-device
 * in order, CRC-checked on the CRC threads while that copy runs, freed in
 * order. A get that fails (its stat, a read, a copy) reads no more slices;
 * the ones it has in flight still pass through, uncopied, and the others
 * go on. */
static void cks_stage_run_get(cks_stage_t *st, cks_stage_job_t *first)
{
    cks_stage_job_t *batch[CKS_STAGE_BATCH_MAX];
    unsigned nb = 0, io = 0; /* io: the get whose slices are read next */
    uint64_t issued = 0, done = 0, freed = 0; /* of the stream */
    uint64_t base = first->base;
    struct timespec dl;

    batch[nb++] = first;
    while (nb < CKS_STAGE_BATCH_MAX && st->head != NULL && st->head->run == cks_stage_run_get &&
           st->head->device == first->device && !st->stop) {
        cks_stage_job_t *n = st->head;
        st->head           = n->next;
        if (st->head == NULL) {
            st->tail = NULL;
        }
        batch[nb++] = n;
    }
    cks_stage_drain(st); /* earlier puts' slots */
    /* slices copying (and CRC-checked) at once, out of the ring's slots;
     * the others take reads */
    uint64_t window = CKS_MAX(1u, CKS_MIN(st->crc_threads + 1u, st->gslots / 2u));
    for (;;) {
        /* keep the ring full of reads, get after get */
        while (issued < freed + st->gslots && io < nb) {
            cks_stage_job_t *j = batch[io];
            if (!j->statted && j->status == CKS_OK) {
                cks_stage_get_stat(st, j);
                j->base = base + issued; /* its slice i is the stream's issued + i */
            }
            if (j->status != CKS_OK || j->issued == j->nslices) {
                j->issuing_done = 1;
                io++;
                continue;
            }
            cks_status_t status = cks_stage_read_start(st, j, j->issued);
            if (status != CKS_OK) {
                j->status       = status;
                j->issuing_done = 1;
                io++;
                continue;
            }
            j->issued++;
            issued++;
        }
        cks_stage_get_settle(st, batch, nb);
        if (io == nb && freed == issued) {
            break;
        }
        /* the oldest slice, once its CRC is in, unless one copy is all
         * that runs while the next slice is still to come */
        unsigned fslot = (unsigned)((base + freed) % st->gslots);
        if (freed < done && !st->crcs[fslot].queued &&
            (done - freed >= 2 || done == issued)) {
            cks_stage_get_free(st, base, freed++);
            continue;
        }
        unsigned slot = (unsigned)((base + done) % st->gslots);
        if (done < issued && done - freed < window && st->state[slot] == CKS_SLOT_READY) {
            cks_stage_job_t *j = st->slot_job[slot];
            uint64_t i         = st->slot_slice[slot];
            uint64_t want      = cks_stage_slice_len(st, j, i);
            if (j->status == CKS_OK &&
                (st->slot_status[slot] != CKS_OK || st->reads[slot].got != want)) {
                j->status = st->slot_status[slot] != CKS_OK ? st->slot_status[slot]
                                                            : CKS_ERR_INTERNAL;
            }
            st->state[slot] = CKS_SLOT_BUSY; /* its copy and CRC, or nothing */
            if (j->status == CKS_OK) {
                pthread_mutex_unlock(&st->lock);
                cks_status_t status = cks_stage_copy_start(st, j, i, slot);
                pthread_mutex_lock(&st->lock);
                if (status != CKS_OK) {
                    j->status = status;
                } else {
                    st->slot_copied[slot] = 1;
                    if (j->chain) {
                        cks_stage_crc_queue(st, slot, (size_t)want);
                    }
                    st->staged_bytes += want;
                }
            }
            done++;
            continue;
        }
        if (freed < done && (done - freed >= window || done == issued)) {
            /* the window is full, or nothing else to do: the oldest next */
            cks_stage_get_free(st, base, freed++);
            continue;
        }
        /* a read or a CRC to end: each signals (a read ends at the latest at
         * its own timeout) */
        cks_stage_deadline(&dl, st->c->timeout_ms * 2);
        (void)pthread_cond_timedwait(&st->cond, &st->lock, &dl);
    }
    /* reads whose callback has not run yet (a read that failed to start
     * has none): none can be left, every slice issued was freed */
    while (first->reads > 0) {
        pthread_cond_wait(&st->cond, &st->lock);
    }
    /* the ring moves on past the whole stream (the stage thread's loop
     * takes first->base + first->nslices) */
    first->nslices = issued;
}
