/*
 * DESIGN: puts (cks_put_nb(), cks_put()): an object's PUT as an op for the
 * engine in op.c - its names, tags and geometry, and on a cluster its
 * placement group (the primary first, the next members while it cannot be
 * reached) - with a device buffer, a COPIED callback or
 * CKS_PUT_FIELD_STAGED handed to the staging ring first (stage_put.c),
 * which takes the op over or lets it go on as an ordinary put.
 *
 * Never: touch UCX here (op.c sends the payload, on the progress thread);
 * keep the caller's buffer after its op completed.
 */
#include "client_int.h"
#include "stage.h"

#include <stdlib.h>
#include <string.h>

cks_status_t cks_put_nb(cks_client_h c, const cks_put_params_t *p, cks_done_cb_t cb,
                        void *arg)
{
    cks_msg_put_t *m;
    size_t used = 0;
    cks_op_t *op;
    cks_status_t status;

    if (c == NULL || p == NULL || cb == NULL || (p->size > 0 && p->buffer == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if ((p->field_mask & CKS_PUT_FIELD_TAGS) && (unsigned)p->tags.kind > CKS_KIND_OTHER) {
        return CKS_ERR_INVALID_PARAM;
    }
    op = cks_op_new(CKS_OP_PUT, CKS_MSG_PUT);
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    m      = &op->body.m_PUT;
    status = cks_op_name(op, &used, p->job, CKS_JOB_MAX_LEN, &m->job);
    if (status == CKS_OK) {
        status = cks_op_name(op, &used, p->key, CKS_KEY_MAX_LEN, &m->key);
    }
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    m->version = p->version;
    if (p->field_mask & CKS_PUT_FIELD_TAGS) {
        m->kind   = p->tags.kind;
        m->layer  = p->tags.layer;
        m->expert = p->tags.expert;
        m->rank   = p->tags.rank;
    } else {
        m->kind   = CKS_KIND_OTHER;
        m->layer  = m->expert = m->rank = CKS_TAG_NONE;
    }
    m->size         = p->size;
    m->k            = c->k;
    m->m            = c->m;
    m->chunk_size   = c->chunk_size;
    m->member_ms    = c->member_ms;
    op->payload     = p->buffer;
    op->payload_len = p->size;
    if (c->map != NULL) {
        uint16_t group[CKS_PLACE_WIDTH_MAX];
        status = cks_place(c->map, m->job.ptr, m->job.len, m->key.ptr, m->key.len, 0, c->k,
                           c->m, NULL, group);
        if (status != CKS_OK) {
            free(op);
            return status;
        }
        op->srv = group[0]; /* the primary: first member of stripe 0's group */
        /* while it is unreachable, the next members (up to m of them: with
         * more down, no stripe of the object could be stored) */
        op->target = CKS_TARGET_GROUP;
        op->ngroup = c->m + 1 < c->k + c->m ? c->m + 1 : c->k + c->m;
        memcpy(op->group, group, sizeof(op->group));
    }
    /* device memory (stage.c): direct to UCX, or staged through host slices;
     * host memory asked to be staged (CKS_PUT_FIELD_STAGED) likewise */
    if (p->field_mask & (CKS_PUT_FIELD_MEM_TYPE | CKS_PUT_FIELD_COPIED | CKS_PUT_FIELD_STAGED)) {
        status = cks_cl_stage_put(c, p, op, &cb, &arg);
        if (status != CKS_OK) {
            if (status != CKS_INPROGRESS) {
                free(op);
            }
            return status;
        }
    }
    return cks_cl_submit(c, op, cb, arg);
}

cks_status_t cks_put(cks_client_h c, const cks_put_params_t *p)
{
    cks_waiter_t w;
    cks_waiter_init(&w);
    return cks_waiter_wait(&w, cks_put_nb(c, p, cks_waiter_cb, &w));
}
