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

/* Wait for the copy in flight (slot copy_slot) and free its slot (stage
 * thread, lock held on entry and exit; released while it waits): its
 * status. */
static cks_status_t cks_stage_get_copied(cks_stage_t *st, const cks_stage_job_t *j,
                                         unsigned copy_slot, uint64_t *freed_p)
{
    uint64_t ns = 0;
    pthread_mutex_unlock(&st->lock);
    cks_status_t status = cks_stage_copy_wait(st, j, copy_slot, &ns);
    pthread_mutex_lock(&st->lock);
    st->copy_ns += ns;
    st->state[copy_slot] = CKS_SLOT_FREE;
    (*freed_p)++;
    return status;
}

/* Run a staged get (stage thread, lock held on entry and exit). */
static void cks_stage_run_get(cks_stage_t *st, cks_stage_job_t *j)
{
    cks_object_info_t info;
    uint64_t issued = 0, done = 0, freed = 0, crc = 0;
    int copying        = 0; /* slice done - 1's copy is in flight, in copy_slot */
    unsigned copy_slot = 0;
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
    /* In order, slice by slice: wait for its bytes, start its copy to the
     * device, CRC it on the host while the copy engine reads it too, then
     * wait for the previous slice's copy and free that slot. So one copy is
     * in flight beside the next slice's CRC and receive, and a slot is read
     * again (a new range get) only once its copy is done (`freed`). */
    while (done < j->nslices) {
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
        if (done >= issued && copying) {
            /* its slot still holds the slice before, whose copy runs (a
             * ring of one slot): that copy first, then its read */
            copying = 0;
            status  = cks_stage_get_copied(st, j, copy_slot, &freed);
            if (status != CKS_OK) {
                j->status = status;
                break;
            }
            continue;
        }
        /* the oldest slice, in order: wait for it */
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
            freed++;
            break;
        }
        pthread_mutex_unlock(&st->lock);
        status = cks_stage_copy_start(st, j, done, slot);
        if (status == CKS_OK && j->chain) {
            crc = cks_crc64(crc, st->ring + (uint64_t)slot * st->slice, (size_t)want);
        }
        pthread_mutex_lock(&st->lock);
        if (copying) { /* the slice before's copy, begun one slice ago */
            cks_status_t wst = cks_stage_get_copied(st, j, copy_slot, &freed);
            copying          = 0;
            if (wst != CKS_OK && j->status == CKS_OK) {
                j->status = wst;
            }
        }
        if (status != CKS_OK) {
            st->state[slot] = CKS_SLOT_FREE;
            freed++;
            j->status = status;
            break;
        }
        st->staged_bytes += want;
        copying   = 1;
        copy_slot = slot;
        done++;
        if (j->status != CKS_OK) {
            break;
        }
    }
    if (copying) { /* the last slice's copy */
        cks_status_t wst = cks_stage_get_copied(st, j, copy_slot, &freed);
        if (wst != CKS_OK && j->status == CKS_OK) {
            j->status = wst;
        }
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
