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
    cks_restore_renew(j->r); /* as any get does */
    status = cks_cl_read(j->r, &g, &st->reads[slot].got, cks_stage_read_done, &st->reads[slot],
                         j->chain ? CKS_WIRE_F_CHECKED : 0);
    pthread_mutex_lock(&st->lock);
    if (status != CKS_INPROGRESS) {
        j->reads--;
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

/* Free the oldest slice's slot: wait for its copy to the device and, when
 * the object's CRC is checked here, its CRC, which is folded into *crc_p
 * (slices are freed in order). Stage thread, lock held on entry and exit
 * (released while it waits). Its status: the copy's. */
static cks_status_t cks_stage_get_free(cks_stage_t *st, cks_stage_job_t *j, uint64_t i,
                                       uint64_t *crc_p)
{
    unsigned slot = cks_stage_slot(st, j, i);
    uint64_t ns   = 0;
    pthread_mutex_unlock(&st->lock);
    cks_status_t status = cks_stage_copy_wait(st, j, slot, &ns);
    pthread_mutex_lock(&st->lock);
    st->copy_ns += ns;
    while (st->crcs[slot].queued) { /* a CRC always ends: no deadline */
        pthread_cond_wait(&st->cond, &st->lock);
    }
    if (j->chain) {
        *crc_p = cks_crc64_combine(*crc_p, st->crcs[slot].crc, cks_stage_slice_len(st, j, i));
    }
    st->state[slot] = CKS_SLOT_FREE;
    return status;
}

/* Run a staged get (stage thread, lock held on entry and exit). */
static void cks_stage_run_get(cks_stage_t *st, cks_stage_job_t *j)
{
    cks_object_info_t info;
    uint64_t issued = 0, done = 0, freed = 0, crc = 0;
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
    /* slices received and not yet freed: their copies run, and their CRCs
     * on the CRC threads; the rest of the ring takes reads */
    uint64_t window = CKS_MAX(1u, CKS_MIN(st->crc_threads + 1u, st->nslots / 2u));
    cks_stage_drain(st); /* earlier puts' slots */
    /* Slices go in order: [freed, done) are copying to the device (and
     * being CRCed), [done, issued) are being read into the ring. A slot is
     * read again only once its slice's copy and CRC are done. */
    while (freed < j->nslices) {
        /* keep the ring full of reads */
        while (j->status == CKS_OK && issued < j->nslices && issued < freed + st->nslots) {
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
        /* the oldest slice, once its CRC is in, unless one copy is all
         * that runs while the next slice is still to come */
        if (freed < done && !st->crcs[cks_stage_slot(st, j, freed)].queued &&
            (done - freed >= 2 || done == j->nslices || done >= issued)) {
            status = cks_stage_get_free(st, j, freed, &crc);
            freed++;
            if (status != CKS_OK) {
                j->status = status;
                break;
            }
            continue;
        }
        unsigned slot = cks_stage_slot(st, j, done);
        if (done < issued && done - freed < window && st->state[slot] == CKS_SLOT_READY) {
            uint64_t want = cks_stage_slice_len(st, j, done);
            if (st->slot_status[slot] != CKS_OK || st->reads[slot].got != want) {
                j->status = st->slot_status[slot] != CKS_OK ? st->slot_status[slot]
                                                            : CKS_ERR_INTERNAL;
                break;
            }
            st->state[slot] = CKS_SLOT_BUSY; /* its copy and CRC */
            pthread_mutex_unlock(&st->lock);
            status = cks_stage_copy_start(st, j, done, slot);
            pthread_mutex_lock(&st->lock);
            if (status != CKS_OK) {
                j->status = status;
                break;
            }
            if (j->chain) {
                cks_stage_crc_queue(st, slot, (size_t)want);
            }
            st->staged_bytes += want;
            done++;
            continue;
        }
        if (freed < done && done - freed >= window) {
            /* the window is full: the oldest's CRC next */
            status = cks_stage_get_free(st, j, freed, &crc);
            freed++;
            if (status != CKS_OK) {
                j->status = status;
                break;
            }
            continue;
        }
        /* a read or a CRC to end: each signals (a read ends at the latest at
         * its own timeout) */
        cks_stage_deadline(&dl, st->c->timeout_ms * 2);
        (void)pthread_cond_timedwait(&st->cond, &st->lock, &dl);
    }
    /* copies started and CRCs queued still use their slots */
    while (freed < done) {
        uint64_t unused = 0;
        (void)cks_stage_get_free(st, j, freed, &unused);
        freed++;
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
