/*
 * DESIGN: puts through the staging ring: a device buffer (or a host one,
 * CKS_PUT_FIELD_STAGED) copied slice by slice into ring slots on the stage
 * thread and sent from there, in order: whole from its slots when it fits
 * in the ring, else slice by slice as PUT_PARTs; the put ends when every
 * slice was sent and the server answered. In parts to a cluster, a PUT that
 * moves to the group's next member (its server lost mid-object) takes the
 * slices again from the start. See stage.c for the whole design.
 *
 * Never: reuse a slot UCX or a copy may still use.
 */
#include "stage_int.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* the stage thread runs it (job->run) */
static void cks_stage_run_put(cks_stage_t *st, cks_stage_job_t *j);

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
    j->run        = cks_stage_run_put;
    j->slice      = st->slice;
    j->nslots     = st->nslots;
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
    snprintf(j->key, sizeof(j->key), "%s", p->key);
    j->nslices    = (p->size + st->slice - 1) / st->slice;
    op->payload     = NULL; /* the ring's slots, or its parts: cks_stage_run_put() */
    op->payload_len = 0;
    op->mem_type    = CKS_MEM_HOST;
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

uint64_t cks_stage_slice_len(const cks_stage_t *st, const cks_stage_job_t *j,
                                    uint64_t i)
{
    (void)st;
    uint64_t off = i * j->slice;
    return CKS_MIN(j->slice, j->len - off);
}

unsigned cks_stage_slot(const cks_stage_t *st, const cks_stage_job_t *j, uint64_t i)
{
    (void)st;
    return (unsigned)((j->base + i) % j->nslots);
}

void cks_stage_deadline(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* The PUT of a put in parts went to server srv (progress thread): its
 * parts go there. */
static void cks_stage_put_sent(void *arg, size_t srv)
{
    cks_stage_job_t *j = arg;
    pthread_mutex_lock(&j->st->lock);
    j->srv      = srv;
    j->put_sent = 1;
    j->sends++; /* a second one: it moved (cks_stage_moved()) */
    pthread_cond_broadcast(&j->st->cond);
    pthread_mutex_unlock(&j->st->lock);
}

/* Wait until the PUT of a put in parts was sent (its server known), it
 * ended, or the put failed here: 1 when it was sent (stage thread, lock
 * held). */
static int cks_stage_wait_sent(cks_stage_t *st, cks_stage_job_t *j)
{
    struct timespec dl;
    cks_stage_deadline(&dl, st->c->timeout_ms);
    while (!j->put_sent && !j->op_done) {
        /* its connection is being made, or it moved to another member */
        if (pthread_cond_timedwait(&st->cond, &st->lock, &dl) == ETIMEDOUT) {
            break; /* the PUT's own timeout ends it */
        }
    }
    if (j->put_sent && !j->gen_known) { /* the parts go to this send's server */
        j->gen       = j->sends;
        j->gen_known = 1;
    }
    return j->put_sent && !j->op_done;
}

/* Has the PUT of a resendable put in parts gone again since its parts
 * started (its server was lost), or did a part fail (its server may be
 * lost: the PUT's fate says)? Its parts stop then (stage thread, lock held). */
static int cks_stage_moved(const cks_stage_job_t *j)
{
    return j->resendable &&
           ((j->gen_known && j->sends != j->gen) || j->part_status != CKS_OK);
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
        cks_stage_free_slots(st, j);
        *(j->host ? &st->host_puts : &st->puts_staged) += 1;
    }
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
    if (handed_off) {
        j->cb(j->arg, status);
        free(j);
    }
}

/* A PUT_PART was answered (progress thread): its slot is free again; an
 * error fails the put (the server failed it too). */
static void cks_stage_part_done(void *arg, cks_status_t status)
{
    cks_slot_read_t *pt = arg;
    cks_stage_t *st     = pt->st;
    pthread_mutex_lock(&st->lock);
    cks_stage_job_t *j = st->slot_job[pt->slot];
    st->state[pt->slot] = CKS_SLOT_FREE;
    j->answered++;
    j->parts_inflight--;
    /* a resendable put's part failed: its PUT moves on, or fails (it cannot
     * be STORED without this part); else the put fails here */
    cks_status_t *first = j->resendable ? &j->part_status : &j->status;
    if (status != CKS_OK && *first == CKS_OK) {
        *first = status;
    }
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

/* The answer to a cancel (progress thread). */
static void cks_stage_cancel_done(void *arg, cks_status_t status)
{
    cks_stage_job_t *j = arg;
    cks_stage_t *st    = j->st;
    (void)status;
    pthread_mutex_lock(&st->lock);
    j->parts_inflight--;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

/* Send slice i of a put in parts from its slot, or (cancel) give the put up,
 * to server srv, the PUT's (stage thread, lock not held). */
static cks_status_t cks_stage_part_send(cks_stage_t *st, cks_stage_job_t *j, uint64_t i,
                                        int cancel, size_t srv)
{
    cks_op_t *op = cks_op_new(CKS_OP_PUT, CKS_MSG_PUT_PART);
    size_t used  = 0;
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    cks_msg_put_part_t *m = &op->body.m_PUT_PART;
    cks_status_t status   = cks_op_name(op, &used, j->vjob, CKS_JOB_MAX_LEN, &m->job);
    if (status == CKS_OK) {
        status = cks_op_name(op, &used, j->key, CKS_KEY_MAX_LEN, &m->key);
    }
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    m->version = j->version;
    m->offset  = i * st->slice;
    m->cancel  = (uint32_t)cancel;
    op->srv    = srv;
    unsigned slot = cks_stage_slot(st, j, i);
    if (!cancel) {
        op->payload     = st->ring + (uint64_t)slot * st->slice;
        op->payload_len = cks_stage_slice_len(st, j, i);
        op->mem_type    = CKS_MEM_HOST;
        st->reads[slot].st   = st;
        st->reads[slot].slot = slot;
    }
    return cks_cl_submit(st->c, op, cancel ? cks_stage_cancel_done : cks_stage_part_done,
                         cancel ? (void *)j : (void *)&st->reads[slot]);
}

/* Wait until no slot is in use: earlier objects' slots are released by the
 * progress thread (a part's answer, or the op's end), never by this one. */
void cks_stage_drain(cks_stage_t *st)
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
cks_status_t cks_stage_copy_start(cks_stage_t *st, cks_stage_job_t *j, uint64_t i,
                                         unsigned slot)
{
    uint64_t len = cks_stage_slice_len(st, j, i);
    uint8_t *host = st->ring + (uint64_t)slot * st->slice;
    uint8_t *dev  = j->dev + i * j->slice;
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
cks_status_t cks_stage_copy_wait(cks_stage_t *st, const cks_stage_job_t *j,
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

/* Test builds: hold the stage thread after the part CKS_STAGE_PAUSE_PART
 * names ("N:path") went, until the file `path`, created here, is removed
 * (at most 30 s): a test kills the put's server meanwhile. */
static void cks_stage_pause(cks_stage_t *st)
{
    FILE *f = fopen(st->pause_path, "w");
    st->pause_part = -1;
    if (f == NULL) {
        return;
    }
    fclose(f);
    cks_warn("staged put paused after a part (CKS_STAGE_PAUSE_PART) until %s is removed",
             st->pause_path);
    for (int i = 0; i < 3000 && access(st->pause_path, F_OK) == 0; i++) {
        struct timespec dl;
        cks_stage_deadline(&dl, 10);
        pthread_cond_timedwait(&st->cond, &st->lock, &dl); /* answers come meanwhile */
    }
}

/* Copy the put's slices into the ring, at most nslots ahead of the parts
 * answered, and send each as a part once copied (in parts); until all are,
 * a failure, its PUT's end, or (resendable) its move. Stage thread, lock
 * held. */
static void cks_stage_put_slices(cks_stage_t *st, cks_stage_job_t *j)
{
    cks_client_h c   = st->c;
    uint64_t started = 0, copied = 0;
    struct timespec dl;
    cks_status_t status;

    while (j->status == CKS_OK && copied < j->nslices && !j->op_done && !cks_stage_moved(j)) {
        if (started < j->nslices && started < j->answered + st->nslots &&
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
                started < j->answered + st->nslots &&
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
            if (j->parts) { /* its part goes now; its answer frees the slot */
                if (!cks_stage_wait_sent(st, j) || cks_stage_moved(j)) {
                    st->state[slot] = CKS_SLOT_FREE;
                    break; /* the PUT ended (its status is the put's), or moved */
                }
                j->parts_inflight++;
                size_t srv = j->srv;
                pthread_mutex_unlock(&st->lock);
                status = cks_stage_part_send(st, j, copied - 1, 0, srv);
                pthread_mutex_lock(&st->lock);
                if (status != CKS_INPROGRESS) {
                    j->parts_inflight--;
                    st->state[slot] = CKS_SLOT_FREE;
                    j->status       = status;
                    break;
                }
                if (copied - 1 == (uint64_t)st->pause_part) { /* once: test builds */
                    cks_stage_pause(st);
                }
            }
            continue;
        }
        /* the next slot holds a slice whose part is not answered yet (this
         * object's), or an earlier object's */
        cks_stage_deadline(&dl, c->timeout_ms);
        while ((started >= j->answered + st->nslots ||
                st->state[cks_stage_slot(st, j, started)] != CKS_SLOT_FREE) &&
               j->status == CKS_OK && !j->op_done && !cks_stage_moved(j)) {
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
}

/* A resendable put in parts whose slices all went, or whose parts stopped
 * (cks_stage_moved()): once every part sent is answered, either its PUT
 * ended (0: the put's outcome is its own), or it went to another server
 * (its first lost mid-object), which waits for all the parts: its slots
 * are freed and its slices are copied and sent again from the start (1),
 * from the caller's buffer, which COPIED has not handed back. A part that
 * failed while the PUT neither moved nor ended within the client's timeout
 * fails the put (0). Stage thread, lock held. */
static int cks_stage_resend(cks_stage_t *st, cks_stage_job_t *j)
{
    struct timespec dl;
    int timed = 0;
    if (!j->resendable || j->status != CKS_OK) {
        return 0;
    }
    while (j->parts_inflight > 0) { /* answered, at the latest at their timeout */
        pthread_cond_wait(&st->cond, &st->lock);
    }
    /* every part went: the PUT is answered once its server has them, or it
     * moves (then its new server waits for them) */
    while (!j->op_done && !(j->gen_known && j->sends != j->gen)) {
        if (j->part_status == CKS_OK) {
            pthread_cond_wait(&st->cond, &st->lock); /* at the latest its timeout */
            continue;
        }
        if (!timed) {
            cks_stage_deadline(&dl, st->c->timeout_ms);
            timed = 1;
        }
        if (pthread_cond_timedwait(&st->cond, &st->lock, &dl) == ETIMEDOUT) {
            break;
        }
    }
    if (j->op_done) {
        return 0;
    }
    if (!(j->gen_known && j->sends != j->gen) || j->resends >= CKS_STAGE_RESENDS) {
        j->status = j->part_status != CKS_OK ? j->part_status : CKS_ERR_TIMEOUT;
        return 0; /* given up at its server (a cancel) */
    }
    cks_stage_free_slots(st, j); /* nothing uses them now */
    const cks_cl_srv_t *to = &st->c->srv[j->srv];
    cks_log(CKS_LOG_INFO, "staged put of '%s' (%llu bytes): its server was lost mid-object; "
            "its parts go again, to %s:%u", j->key, (unsigned long long)j->len, to->addr,
            to->port);
    j->answered    = 0;
    j->part_status = CKS_OK;
    j->gen_known   = 0;
    j->resends++;
    return 1;
}

/* Run a staged put (stage thread, lock held on entry and exit). */
static void cks_stage_run_put(cks_stage_t *st, cks_stage_job_t *j)
{
    cks_client_h c = st->c;
    cks_status_t status;

    /* An object that fits in the ring is copied whole before its request
     * goes out, so that a failed copy fails it before the server saw a
     * byte, and is sent from the ring while the next object is copied; a
     * larger one is sent while it is copied. (In parts, an object that fits
     * would also be sent while copied, but the next object's copies would
     * wait for its last part's answer: a snapshot of many objects that the
     * ring holds would stall the trainer for its whole put.) */
    int whole = j->nslices <= st->nslots;
    if (whole && j->base % st->nslots + j->nslices > st->nslots) {
        /* it would wrap: it starts at slot 0, so that its slots are one run
         * of the ring and it is sent from there as host memory */
        j->base += st->nslots - j->base % st->nslots;
    }
    /* a larger one goes in parts: its PUT first, with no bytes, then each
     * slice, once copied, from its slot as a PUT_PART to the server the PUT
     * went to (on this host that server copies it from our mapped memory;
     * elsewhere UCX's zero-copy send), whose answer frees the slot */
    j->parts = !whole;
    if (j->parts) {
        j->op->wire_flags |= CKS_WIRE_F_PARTS;
        j->op->on_send     = cks_stage_put_sent;
        j->op->on_send_arg = j;
        /* to a cluster: its PUT may move to the group's next member */
        j->resendable = j->op->target == CKS_TARGET_GROUP && j->op->ngroup > 1;
        /* its slots come back only as its parts are answered */
        cks_stage_drain(st);
        status = cks_cl_submit(c, j->op, cks_stage_put_op_done, j);
        if (status != CKS_INPROGRESS) {
            j->op        = NULL; /* freed */
            j->op_done   = 1;
            j->op_status = status;
            j->status    = status;
        }
    }
    /* copy and send; a server lost mid-object: again, to the next one */
    do {
        cks_stage_put_slices(st, j);
    } while (cks_stage_resend(st, j));
    cks_status_t stage_status = j->status;
    if (j->status != CKS_OK) {
        pthread_cond_broadcast(&st->cond);
        cks_warn("staged put of %llu bytes: %s", (unsigned long long)j->len,
                 cks_status_string(j->status));
        if (j->parts && cks_stage_wait_sent(st, j)) {
            /* the server waits for the rest: the put is given up there, and
             * its PUT answered (CKS_ERR_CANCELED) */
            j->parts_inflight++;
            size_t srv = j->srv;
            pthread_mutex_unlock(&st->lock);
            status = cks_stage_part_send(st, j, 0, 1, srv);
            pthread_mutex_lock(&st->lock);
            if (status != CKS_INPROGRESS) {
                j->parts_inflight--;
            }
        }
    }
    /* the buffer is the caller's again (a resendable put's at its end: until
     * then its slices may be copied again) */
    if (j->copied_cb != NULL && !j->resendable) {
        cks_done_cb_t cb = j->copied_cb;
        j->copied_cb     = NULL;
        pthread_mutex_unlock(&st->lock);
        cb(j->copied_arg, j->status);
        pthread_mutex_lock(&st->lock);
    }
    /* parts sent still use their slots until answered (at the latest at
     * their timeout) */
    while (j->parts_inflight > 0) {
        pthread_cond_wait(&st->cond, &st->lock);
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
             * zero-copy send */
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
    }
    if (stage_status != CKS_OK) {
        /* leave the reason for cks_client_last_error() */
        pthread_mutex_unlock(&st->lock);
        cks_stage_error(c, stage_status,
                        "the staged copy of the device buffer failed (or a part of it was "
                        "refused); the object was not stored");
        pthread_mutex_lock(&st->lock);
    }
    *(j->host ? &st->host_puts : &st->puts_staged) += 1;
    st->puts_in_parts += j->parts;
    st->puts_resent += j->resends > 0;
}
