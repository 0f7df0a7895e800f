/*
 * DESIGN: gets (cks_get_nb(), cks_get()): where each goes. A restore of a
 * flushed copy reads the disk (disk.c). Otherwise the get renews the
 * restore's lease on the servers, a device buffer goes through the staging
 * ring (stage_get.c, which reads each slice through read.c), and host
 * memory is read by read.c: a standalone server's GET, or a cluster's
 * stripes.
 *
 * Never: hand read.c device memory (the ring stages it; CKS_MEM_AUTO that
 * turns out to be host memory is read directly).
 */
#include "client_int.h"
#include "stage.h"

cks_status_t cks_get_nb(cks_restore_h r, const cks_get_params_t *p, uint64_t *length_p,
                        cks_done_cb_t cb, void *arg)
{
    cks_status_t status;

    if (r == NULL || p == NULL || cb == NULL || (p->buffer == NULL && p->buffer_size > 0)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (r->disk != NULL) {
        return cks_cl_disk_get(r, p, length_p, cb, arg);
    }
    cks_restore_renew(r);
    if ((p->field_mask & CKS_GET_FIELD_MEM_TYPE) && p->mem_type != CKS_MEM_HOST) {
        /* device memory: staged through host slices (stage_get.c) */
        status = cks_cl_stage_get(r, p, length_p, cb, arg);
        if (status != CKS_OK) {
            return status;
        }
    }
    return cks_cl_read(r, p, length_p, cb, arg, 0);
}

cks_status_t cks_get(cks_restore_h r, const cks_get_params_t *p, uint64_t *length_p)
{
    cks_waiter_t w;
    cks_waiter_init(&w);
    return cks_waiter_wait(&w, cks_get_nb(r, p, length_p, cks_waiter_cb, &w));
}
