/*
 * DESIGN: a restore handle: a version opened for reading (stat, then a
 * lease on every server that holds retention off it while it is open),
 * its objects' stats, lists and tag searches. The reads themselves are
 * read.c's. 
 *
 * Never: let a restore read a version whose lease it does not hold.
 */
#include "client_int.h"
#include "stage.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- restore ----------------------------------------------------------------------------- */

/* A restore holds its version on every server for this long (hold.c), and
 * renews the lease when a get finds a third of it gone. */
#define CKS_RESTORE_LEASE_MS 120000u

/* How long opening a restore waits for the servers to take its lease: a
 * server that is down or cut off does not hold the restore up longer. */
#define CKS_RESTORE_HOLD_WAIT_MS 1000

/* The hold requests of one call, shared with their callbacks (the last one
 * to let go frees it: the caller may stop waiting first). */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t pending;
    size_t refs;
} cks_hold_wait_t;

static void cks_hold_wait_put(cks_hold_wait_t *hw)
{
    pthread_mutex_lock(&hw->lock);
    int last = --hw->refs == 0;
    pthread_mutex_unlock(&hw->lock);
    if (last) {
        pthread_mutex_destroy(&hw->lock);
        pthread_cond_destroy(&hw->cond);
        free(hw);
    }
}

static void cks_restore_hold_done(void *arg, cks_status_t status)
{
    cks_hold_wait_t *hw = arg;
    if (status != CKS_OK) {
        cks_debug("restore lease: %s", cks_status_string(status));
    }
    pthread_mutex_lock(&hw->lock);
    hw->pending--;
    pthread_cond_signal(&hw->cond);
    pthread_mutex_unlock(&hw->lock);
    cks_hold_wait_put(hw);
}

/* Ask every server to hold the restore's version for `lease_ms` (0: let
 * go); with `wait`, until each answered or CKS_RESTORE_HOLD_WAIT_MS passed.
 * A lease that a server missed only means that its retention may free the
 * version's chunks there (reads then decode around them). */
static void cks_restore_hold(cks_restore_h r, uint32_t lease_ms, int wait)
{
    cks_client_h c      = r->client;
    cks_hold_wait_t *hw = calloc(1, sizeof(*hw));
    if (hw == NULL) {
        return;
    }
    pthread_mutex_init(&hw->lock, NULL);
    pthread_cond_init(&hw->cond, NULL);
    hw->refs = 1;
    for (size_t i = 0; i < c->nsrv; i++) {
        size_t used  = 0;
        cks_op_t *op = cks_op_new(CKS_OP_STATUS, CKS_MSG_VERSION_HOLD);
        if (op == NULL) {
            break;
        }
        if (cks_op_name(op, &used, r->job, CKS_JOB_MAX_LEN, &op->body.m_VERSION_HOLD.job) !=
            CKS_OK) {
            free(op);
            break;
        }
        op->body.m_VERSION_HOLD.version  = r->info.version;
        op->body.m_VERSION_HOLD.holder   = r->holder;
        op->body.m_VERSION_HOLD.lease_ms = lease_ms;
        op->srv                          = i;
        op->target                       = CKS_TARGET_FIXED;
        op->background                   = 1;
        pthread_mutex_lock(&hw->lock);
        hw->pending++;
        hw->refs++;
        pthread_mutex_unlock(&hw->lock);
        if (cks_cl_submit(c, op, cks_restore_hold_done, hw) != CKS_INPROGRESS) {
            pthread_mutex_lock(&hw->lock); /* not submitted: no callback */
            hw->pending--;
            hw->refs--;
            pthread_mutex_unlock(&hw->lock);
        }
    }
    if (wait) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += CKS_RESTORE_HOLD_WAIT_MS / 1000;
        until.tv_nsec += (long)(CKS_RESTORE_HOLD_WAIT_MS % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&hw->lock);
        while (hw->pending > 0 &&
               pthread_cond_timedwait(&hw->cond, &hw->lock, &until) == 0) {
        }
        pthread_mutex_unlock(&hw->lock);
    }
    cks_hold_wait_put(hw);
}

/* Renew the lease when a third of it is gone (one caller of many wins). */
void cks_restore_renew(cks_restore_h r)
{
    if (r->holder == 0) {
        return; /* a handle of the library's own (fallback.c's trials) holds nothing */
    }
    uint64_t now  = cks_time_ns();
    uint64_t last = __atomic_load_n(&r->held_ns, __ATOMIC_RELAXED);
    if (now - last > CKS_RESTORE_LEASE_MS / 3 * 1000000ull &&
        __atomic_compare_exchange_n(&r->held_ns, &last, now, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
        cks_restore_hold(r, CKS_RESTORE_LEASE_MS, 0);
    }
}

cks_status_t cks_restore_open(cks_client_h c, const char *job, uint64_t version,
                              cks_restore_h *r_p)
{
    cks_version_info_t info;
    cks_status_t status;

    if (c == NULL || r_p == NULL || job == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = version == CKS_VERSION_LATEST ? cks_version_latest(c, job, &info)
                                           : cks_version_stat(c, job, version, &info);
    if (status != CKS_OK) {
        return status;
    }
    if (info.state != CKS_VSTATE_SEALED && info.state != CKS_VSTATE_PROTECTED &&
        info.state != CKS_VSTATE_DEGRADED) {
        cks_cl_set_errorf(c, CKS_ERR_NOT_RESTORABLE, "version %llu is %s",
                          (unsigned long long)info.version, cks_vstate_string(info.state));
        return CKS_ERR_NOT_RESTORABLE;
    }
    return cks_cl_restore_new(c, job, &info, r_p);
}

cks_status_t cks_cl_restore_new(cks_client_h c, const char *job, const cks_version_info_t *info,
                                cks_restore_h *r_p)
{
    cks_restore_h r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    r->client = c;
    snprintf(r->job, sizeof(r->job), "%s", job);
    r->info    = *info;
    r->holder  = cks_tp_random_id();
    r->held_ns = cks_time_ns();
    cks_restore_hold(r, CKS_RESTORE_LEASE_MS, 1);
    *r_p = r;
    return CKS_OK;
}

void cks_restore_close(cks_restore_h r)
{
    if (r != NULL) {
        if (r->disk != NULL) {
            cks_cl_disk_close(r->disk); /* a flushed copy: no lease on any server */
        } else {
            cks_restore_hold(r, 0, 0);
        }
    }
    free(r);
}

cks_status_t cks_restore_info(cks_restore_h r, cks_version_info_t *info_p)
{
    if (r == NULL || info_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    *info_p = r->info;
    return CKS_OK;
}

cks_status_t cks_object_stat(cks_restore_h r, const char *key, cks_object_info_t *info_p)
{
    cks_object_info_t info;
    size_t used = 0;
    cks_op_t *op;
    cks_status_t status;

    if (r == NULL || info_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (r->disk != NULL) {
        return cks_cl_disk_stat(r, key, info_p);
    }
    op = cks_op_new(CKS_OP_OBJECT_STAT, CKS_MSG_OBJECT_STAT);
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_op_name(op, &used, r->job, CKS_JOB_MAX_LEN, &op->body.m_OBJECT_STAT.job);
    if (status == CKS_OK) {
        status = cks_op_name(op, &used, key, CKS_KEY_MAX_LEN, &op->body.m_OBJECT_STAT.key);
    }
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    op->body.m_OBJECT_STAT.version = r->info.version;
    op->out                        = &info;
    op->target                     = CKS_TARGET_ANY;
    cks_cl_coord_first(r->client, op, r->job, strlen(r->job), r->info.version);
    status                         = cks_cl_run(r->client, op);
    if (status == CKS_OK) {
        *info_p = info;
    }
    return status;
}

cks_status_t cks_object_list(cks_restore_h r, const char *after_key, cks_object_info_t *out,
                             size_t max, size_t *count_p, int *more_p)
{
    size_t used = 0;
    cks_op_t *op;
    cks_status_t status;

    if (r == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (r->disk != NULL) {
        return cks_cl_disk_list(r, after_key, out, max, count_p, more_p);
    }
    op = cks_op_new(CKS_OP_LIST, CKS_MSG_OBJECT_LIST);
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_op_name(op, &used, r->job, CKS_JOB_MAX_LEN, &op->body.m_OBJECT_LIST.job);
    if (status == CKS_OK && after_key != NULL && after_key[0] != '\0') {
        status = cks_op_name(op, &used, after_key, CKS_KEY_MAX_LEN,
                             &op->body.m_OBJECT_LIST.after);
    } else {
        op->body.m_OBJECT_LIST.after = cks_wire_cstr(NULL);
    }
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    op->entry                      = CKS_WIRE_ENTRY_OBJECT;
    op->target                     = CKS_TARGET_ANY;
    cks_cl_coord_first(r->client, op, r->job, strlen(r->job), r->info.version);
    op->body.m_OBJECT_LIST.version = r->info.version;
    op->body.m_OBJECT_LIST.max     = (uint32_t)CKS_MIN(max, (size_t)CKS_WIRE_MAX_ENTRIES);
    return cks_cl_list(r->client, op, out, max, count_p, more_p);
}

/* ---- finding objects by their tags -------------------------------------------- */

static int cks_filter_match(const cks_tag_filter_t *f, const cks_tags_t *t)
{
    return (!(f->field_mask & CKS_FILTER_KIND) || f->tags.kind == t->kind) &&
           (!(f->field_mask & CKS_FILTER_LAYER) || f->tags.layer == t->layer) &&
           (!(f->field_mask & CKS_FILTER_EXPERT) || f->tags.expert == t->expert) &&
           (!(f->field_mask & CKS_FILTER_RANK) || f->tags.rank == t->rank);
}

cks_status_t cks_object_find(cks_restore_h r, const char *after_key,
                             const cks_tag_filter_t *filter, cks_object_info_t *out,
                             size_t max, size_t *count_p, int *more_p)
{
    enum { PAGE = 128 };
    cks_object_info_t *page;
    char after[CKS_KEY_NAME_MAX + 1] = "";
    size_t n = 0, count;
    int more = 1;
    cks_status_t status = CKS_OK;

    if (r == NULL || filter == NULL || out == NULL || count_p == NULL || max == 0) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (after_key != NULL) {
        snprintf(after, sizeof(after), "%s", after_key);
    }
    page = malloc(PAGE * sizeof(*page));
    if (page == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    /* page through the manifest, keeping the matches, until `max` are found */
    while (status == CKS_OK && more && n < max) {
        status = cks_object_list(r, after[0] ? after : NULL, page, PAGE, &count, &more);
        for (size_t i = 0; status == CKS_OK && i < count; i++) {
            snprintf(after, sizeof(after), "%s", page[i].key);
            if (cks_filter_match(filter, &page[i].tags)) {
                out[n++] = page[i];
                if (n == max) {
                    more = more || i + 1 < count;
                    break;
                }
            }
        }
        if (count == 0) {
            more = 0;
        }
    }
    free(page);
    if (status == CKS_OK) {
        *count_p = n;
        if (more_p != NULL) {
            *more_p = more;
        }
    }
    return status;
}
