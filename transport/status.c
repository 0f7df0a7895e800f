/*
 * DESIGN: status translation - the one place where a UCX status becomes a
 * ckstore status (and is logged at the level it deserves). See ucx.c for
 * the whole design.
 *
 * Never: translate a ucs_status_t anywhere else.
 */
#include "tp_int.h"

#include <ucp/api/ucp.h>

/* ---- status translation (the one place) ---------------------------------- */

cks_status_t cks_tp_status(ucs_status_t st, const char *what)
{
    switch (st) {
        case UCS_OK:
            return CKS_OK;
        case UCS_INPROGRESS:
            return CKS_INPROGRESS;
        case UCS_ERR_CANCELED:
            return CKS_ERR_CANCELED;
        case UCS_ERR_NO_MEMORY:
            cks_warn("%s: %s", what, ucs_status_string(st));
            return CKS_ERR_NO_MEMORY;
        case UCS_ERR_TIMED_OUT:
        case UCS_ERR_ENDPOINT_TIMEOUT:
            cks_info("%s: %s", what, ucs_status_string(st));
            return CKS_ERR_TIMEOUT;
        case UCS_ERR_UNREACHABLE:
        case UCS_ERR_REJECTED:
            cks_info("%s: %s", what, ucs_status_string(st));
            return CKS_ERR_UNREACHABLE;
        case UCS_ERR_CONNECTION_RESET:
        case UCS_ERR_NOT_CONNECTED:
        case UCS_ERR_IO_ERROR:
            cks_info("%s: %s", what, ucs_status_string(st));
            return CKS_ERR_CONN_LOST;
        default:
            cks_warn("%s: %s", what, ucs_status_string(st));
            return CKS_ERR_TRANSPORT;
    }
}
