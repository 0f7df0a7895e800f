/*
 * DESIGN: checked restores (cks_restore_open_ex()). Before a version is
 * handed out, check that every object of its manifest can be restored; with
 * CKS_RESTORE_FALLBACK, walk the job's older versions, newest first, to the
 * first that passes. ckstore.h defines what the check proves.
 *
 * The check runs on the caller's thread. It pages through the version's
 * manifest (CKS_FB_PAGE objects at a time), asks for one byte of every chunk
 * of every stripe of those objects (CHUNK_GET of offset 0, length 1: the
 * member looks the chunk up and checks the whole chunk's CRC in its memory
 * before it answers), at most CKS_FB_WINDOW requests in flight, waits for
 * the page's answers and judges it: a stripe with fewer than k chunks that
 * passed makes the object, and the version, unrestorable (an empty object
 * has no stripes). A standalone server is asked for one byte of each object
 * instead (none of an empty one). The requests'
 * completion callbacks (progress thread) only record a status and count
 * down.
 * Never: move a chunk's bytes to check it; hand out a version whose check
 * failed; fall back past a version that does not exist, or past an error
 * that is not about the version's data (a list that fails, no memory).
 */
#include "client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKS_FB_WINDOW 256 /* probes in flight per check */
#define CKS_FB_PAGE   128 /* manifest entries judged at a time */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned inflight;
} cks_fb_check_t;

typedef struct {
    cks_fb_check_t *ck;
    cks_status_t status; /* CKS_INPROGRESS until answered */
    uint8_t byte;        /* where the one byte read lands */
} cks_fb_probe_t;

static void cks_fb_probe_done(void *arg, cks_status_t status)
{
    cks_fb_probe_t *pr = arg;
    cks_fb_check_t *ck = pr->ck;

    pthread_mutex_lock(&ck->lock);
    pr->status = status;
    ck->inflight--;
    pthread_cond_signal(&ck->cond);
    pthread_mutex_unlock(&ck->lock);
}

/* Wait until at most `max` probes are in flight. */
static void cks_fb_wait(cks_fb_check_t *ck, unsigned max)
{
    pthread_mutex_lock(&ck->lock);
    while (ck->inflight > max) {
        pthread_cond_wait(&ck->cond, &ck->lock);
    }
    pthread_mutex_unlock(&ck->lock);
}

/* Ask for one byte of chunk `idx` of `stripe` of object `o` (cluster), or of
 * the object in `version` (standalone, as a get reads it). CKS_OK when sent
 * (pr->status comes later). */
static cks_status_t cks_fb_probe(cks_client_h c, cks_fb_check_t *ck, cks_fb_probe_t *pr,
                                 const char *job, uint64_t version, const cks_object_info_t *o,
                                 uint64_t stripe, unsigned idx, size_t srv)
{
    size_t used = 0;
    cks_op_t *op;
    cks_status_t status;

    if (c->map == NULL) {
        cks_msg_get_t *m;
        op = cks_op_new(CKS_OP_GET, CKS_MSG_GET);
        if (op == NULL) {
            return CKS_ERR_NO_MEMORY;
        }
        m      = &op->body.m_GET;
        status = cks_op_name(op, &used, job, CKS_JOB_MAX_LEN, &m->job);
        if (status == CKS_OK) {
            status = cks_op_name(op, &used, o->key, CKS_KEY_MAX_LEN, &m->key);
        }
        m->version = version;
        m->offset  = 0;
        m->length  = CKS_MIN(o->size, 1); /* an empty object is asked for too */
    } else {
        cks_msg_chunk_get_t *m;
        op = cks_op_new(CKS_OP_CHUNK_GET, CKS_MSG_CHUNK_GET);
        if (op == NULL) {
            return CKS_ERR_NO_MEMORY;
        }
        m      = &op->body.m_CHUNK_GET;
        status = cks_op_name(op, &used, job, CKS_JOB_MAX_LEN, &m->job);
        if (status == CKS_OK) {
            status = cks_op_name(op, &used, o->key, CKS_KEY_MAX_LEN, &m->key);
        }
        m->version = o->source_version; /* where the chunks are */
        m->stripe  = stripe;
        m->idx     = idx;
        m->offset  = 0;
        m->length  = 1; /* a part of the chunk: the member checks its CRC first */
        op->srv    = srv;
    }
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    op->buf      = &pr->byte;
    op->buf_size = 1;
    pr->ck       = ck;
    pr->status   = CKS_INPROGRESS;
    cks_fb_wait(ck, CKS_FB_WINDOW - 1);
    pthread_mutex_lock(&ck->lock);
    ck->inflight++;
    pthread_mutex_unlock(&ck->lock);
    status = cks_cl_submit(c, op, cks_fb_probe_done, pr); /* frees op when refused */
    if (status != CKS_INPROGRESS) {
        pthread_mutex_lock(&ck->lock);
        ck->inflight--;
        pthread_mutex_unlock(&ck->lock);
        pr->status = status;
        return status;
    }
    return CKS_OK;
}

static const char *cks_fb_why(cks_status_t st)
{
    switch (st) {
        case CKS_ERR_NO_SUCH_KEY:
        case CKS_ERR_NO_SUCH_VERSION:
        case CKS_ERR_NO_SUCH_JOB:
            return "missing";
        case CKS_ERR_CRC_MISMATCH:
            return "corrupt (CRC mismatch)";
        case CKS_ERR_DATA_LOST:
            return "lost (failed the server's CRC check)";
        case CKS_ERR_UNREACHABLE:
            return "unreachable";
        case CKS_ERR_CONN_LOST:
            return "unreachable (connection lost)";
        case CKS_ERR_TIMEOUT:
            return "unreachable (timed out)";
        case CKS_ERR_TRANSPORT:
            return "unreachable (transport error)";
        case CKS_ERR_SHUTTING_DOWN:
            return "unreachable (server shutting down)";
        default:
            return cks_status_string(st);
    }
}

/* Fill `skip` for object `o`, whose `stripe` has `intact` of `width` chunks
 * that passed (statuses in st[0 .. width-1]), `need` needed. */
static void cks_fb_skip_object(cks_restore_skip_t *skip, const cks_object_info_t *o,
                               uint64_t stripe, unsigned intact, unsigned width, unsigned need,
                               const cks_fb_probe_t *st, int standalone)
{
    size_t len = sizeof(skip->reason), n;

    skip->status = CKS_ERR_DATA_LOST;
    snprintf(skip->key, sizeof(skip->key), "%s", o->key);
    skip->source_version = o->source_version;
    skip->stripe         = stripe;
    skip->intact         = intact;
    skip->needed         = need;
    if (standalone) {
        snprintf(skip->reason, len, "object '%s' of version %llu: %s", o->key,
                 (unsigned long long)o->source_version, cks_fb_why(st[0].status));
        return;
    }
    n = (size_t)snprintf(skip->reason, len,
                         "object '%s' (chunks of version %llu): stripe %llu has %u of %u "
                         "chunks intact, needs %u:",
                         o->key, (unsigned long long)o->source_version,
                         (unsigned long long)stripe, intact, width, need);
    for (unsigned i = 0; i < width && n < len; i++) {
        if (st[i].status != CKS_OK) {
            n += (size_t)snprintf(skip->reason + n, len - n, " chunk %u %s;", i,
                                  cks_fb_why(st[i].status));
        }
    }
    if (n > 0 && n < len && skip->reason[n - 1] == ';') {
        skip->reason[n - 1] = '\0';
    }
}

/* Probe one page of manifest entries and judge it: CKS_OK when each object
 * can be restored, CKS_ERR_DATA_LOST (skip filled, the first object in key
 * order) when one cannot, or what stopped the check. */
static cks_status_t cks_fb_check_page(cks_client_h c, const char *job,
                                      const cks_version_info_t *info,
                                      const cks_object_info_t *page, size_t count,
                                      cks_restore_skip_t *skip)
{
    const int standalone = c->map == NULL;
    const unsigned width = standalone ? 1 : info->ec_k + info->ec_m;
    const unsigned need  = standalone ? 1 : info->ec_k;
    const uint64_t stripe_b = standalone ? 0 : (uint64_t)info->ec_k * info->chunk_size;
    uint64_t nstripes[CKS_FB_PAGE], base[CKS_FB_PAGE], total = 0;
    cks_fb_check_t ck;
    cks_fb_probe_t *pr;
    cks_status_t status = CKS_OK;

    for (size_t i = 0; i < count; i++) {
        uint64_t size = page[i].size;
        nstripes[i]   = standalone ? 1 : size / stripe_b + (size % stripe_b != 0);
        base[i]       = total;
        if (nstripes[i] > (UINT64_MAX / 2 - total) / width) {
            return CKS_ERR_NO_MEMORY;
        }
        total += nstripes[i] * width;
    }
    if (total == 0) {
        return CKS_OK;
    }
    if (total > SIZE_MAX / sizeof(*pr) || (pr = calloc((size_t)total, sizeof(*pr))) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&ck.lock, NULL);
    pthread_cond_init(&ck.cond, NULL);
    ck.inflight = 0;
    for (size_t i = 0; status == CKS_OK && i < count; i++) {
        for (uint64_t s = 0; status == CKS_OK && s < nstripes[i]; s++) {
            uint16_t group[CKS_PLACE_WIDTH_MAX] = {0};
            if (!standalone) {
                status = cks_place(c->map, job, strlen(job), page[i].key, strlen(page[i].key),
                                   s, info->ec_k, info->ec_m, NULL, group);
            }
            for (unsigned j = 0; status == CKS_OK && j < width; j++) {
                status = cks_fb_probe(c, &ck, &pr[base[i] + s * width + j], job,
                                      info->version, &page[i], s, j, group[j]);
            }
        }
    }
    cks_fb_wait(&ck, 0); /* every probe sent has answered */
    pthread_cond_destroy(&ck.cond);
    pthread_mutex_destroy(&ck.lock);
    for (size_t i = 0; status == CKS_OK && i < count; i++) {
        for (uint64_t s = 0; s < nstripes[i]; s++) {
            const cks_fb_probe_t *st = &pr[base[i] + s * width];
            unsigned intact          = 0;
            for (unsigned j = 0; j < width; j++) {
                if (st[j].status == CKS_ERR_NO_MEMORY || st[j].status == CKS_ERR_CANCELED) {
                    status = st[j].status; /* ours, not the data's */
                }
                intact += st[j].status == CKS_OK;
            }
            if (status == CKS_OK && intact < need) {
                cks_fb_skip_object(skip, &page[i], s, intact, width, need, st, standalone);
                status = CKS_ERR_DATA_LOST;
            }
            if (status != CKS_OK) {
                break;
            }
        }
    }
    free(pr);
    return status;
}

/* Check one restorable version: CKS_OK when every object of its manifest can
 * be restored; CKS_ERR_DATA_LOST or CKS_ERR_NOT_RESTORABLE (gone meanwhile)
 * with `skip` filled; or what stopped the check. */
static cks_status_t cks_fb_check_version(cks_client_h c, const char *job,
                                         const cks_version_info_t *info,
                                         cks_restore_skip_t *skip)
{
    struct cks_restore r = {.client = c, .info = *info};
    char after[CKS_KEY_NAME_MAX + 1] = "";
    cks_object_info_t *page;
    cks_status_t status = CKS_OK;
    size_t count;
    int more = 1;

    memset(skip, 0, sizeof(*skip));
    skip->version = info->version;
    if (c->map == NULL ? info->ec_k != 0
                       : info->ec_k == 0 || info->ec_k > CKS_EC_MAX_K ||
                             info->ec_m > CKS_EC_MAX_M || info->chunk_size == 0) {
        return CKS_ERR_UNSUPPORTED; /* as a get of it would */
    }
    snprintf(r.job, sizeof(r.job), "%s", job);
    page = malloc(CKS_FB_PAGE * sizeof(*page));
    if (page == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    while (status == CKS_OK && more) {
        status = cks_object_list(&r, after[0] ? after : NULL, page, CKS_FB_PAGE, &count, &more);
        if (status != CKS_OK || count == 0) {
            break;
        }
        status = cks_fb_check_page(c, job, info, page, count, skip);
        snprintf(after, sizeof(after), "%s", page[count - 1].key);
    }
    free(page);
    if (status == CKS_ERR_NO_SUCH_VERSION) { /* deleted (retention) since it was listed */
        skip->status = CKS_ERR_NOT_RESTORABLE;
        snprintf(skip->reason, sizeof(skip->reason), "version %llu no longer exists",
                 (unsigned long long)info->version);
        status = CKS_ERR_NOT_RESTORABLE;
    }
    return status;
}

static int cks_fb_restorable(cks_vstate_t state)
{
    return state == CKS_VSTATE_SEALED || state == CKS_VSTATE_PROTECTED ||
           state == CKS_VSTATE_DEGRADED;
}

typedef struct {
    cks_client_h c;
    const char *job;
    cks_restore_skip_cb_t cb;
    void *arg;
    size_t lost;                /* versions whose check failed (not their state) */
    size_t skipped;
    cks_restore_skip_t newest;  /* the first skip, for the error text */
} cks_fb_walk_t;

static void cks_fb_report(cks_fb_walk_t *w, const cks_restore_skip_t *skip)
{
    cks_warn("job '%s': not restoring version %llu: %s", w->job,
             (unsigned long long)skip->version, skip->reason);
    if (w->skipped++ == 0) {
        w->newest = *skip;
    }
    w->lost += skip->status == CKS_ERR_DATA_LOST;
    if (w->cb != NULL) {
        w->cb(w->arg, skip);
    }
}

/* Check `info` (restorable state or not): CKS_OK when it passes, the skip's
 * status when it was reported, or what stopped the walk. */
static cks_status_t cks_fb_try(cks_fb_walk_t *w, const cks_version_info_t *info)
{
    cks_restore_skip_t skip;
    cks_status_t status;

    if (!cks_fb_restorable(info->state)) {
        memset(&skip, 0, sizeof(skip));
        skip.version = info->version;
        skip.status  = CKS_ERR_NOT_RESTORABLE;
        snprintf(skip.reason, sizeof(skip.reason), "version %llu is %s",
                 (unsigned long long)info->version, cks_vstate_string(info->state));
        cks_fb_report(w, &skip);
        return skip.status;
    }
    status = cks_fb_check_version(w->c, w->job, info, &skip);
    if (status == CKS_ERR_DATA_LOST || status == CKS_ERR_NOT_RESTORABLE) {
        cks_fb_report(w, &skip);
    }
    return status;
}

/* The restorable versions of the job older than `below`, oldest first. */
static cks_status_t cks_fb_older(cks_client_h c, const char *job, uint64_t below,
                                 cks_version_info_t **out_p, size_t *n_p)
{
    cks_version_info_t page[64], *out = NULL;
    size_t n = 0, cap = 0, count;
    uint64_t after = 0;
    int more = 1, first = 1;
    cks_status_t status = CKS_OK;

    while (more) {
        status = cks_version_list(c, job, first ? NULL : &after, page, 64, &count, &more);
        if (status != CKS_OK || count == 0) {
            break;
        }
        for (size_t i = 0; i < count; i++) {
            if (page[i].version >= below || !cks_fb_restorable(page[i].state)) {
                continue;
            }
            if (n == cap) {
                size_t ncap = cap ? 2 * cap : 64;
                cks_version_info_t *grown = realloc(out, ncap * sizeof(*out));
                if (grown == NULL) {
                    free(out);
                    return CKS_ERR_NO_MEMORY;
                }
                out = grown;
                cap = ncap;
            }
            out[n++] = page[i];
        }
        after = page[count - 1].version;
        first = 0;
        more  = more && after < below; /* listed in increasing order */
    }
    if (status != CKS_OK) {
        free(out);
        return status;
    }
    *out_p = out;
    *n_p   = n;
    return CKS_OK;
}

/* The memory tier does not have the version (or cannot restore it): its
 * flushed copy, or the memory tier's status when there is none. */
static cks_status_t cks_fb_durable(cks_client_h c, const char *dir, const char *job,
                                   uint64_t version, cks_status_t mem, cks_restore_h *r_p)
{
    cks_status_t st = cks_cl_disk_open(c, dir, job, version, r_p);
    if (st == CKS_OK) {
        cks_info("job '%s': version %llu read from its flushed copy (memory tier: %s)", job,
                 (unsigned long long)version, cks_status_string(mem));
        return CKS_OK;
    }
    cks_cl_set_errorf(c, mem, "version %llu of job '%s': %s in memory; flushed copy in %s: %s",
                      (unsigned long long)version, job, cks_status_string(mem), dir,
                      cks_status_string(st));
    return mem;
}

static int cks_fb_durable_case(cks_status_t st)
{
    return st == CKS_ERR_NO_SUCH_VERSION || st == CKS_ERR_NO_SUCH_JOB ||
           st == CKS_ERR_NOT_RESTORABLE || st == CKS_ERR_DATA_LOST;
}

cks_status_t cks_restore_open_ex(cks_client_h c, const cks_restore_params_t *p,
                                 cks_restore_h *r_p)
{
    const char *fdir;
    cks_fb_walk_t w = {0};
    cks_version_info_t info, *older = NULL;
    size_t nolder = 0;
    uint32_t flags;
    cks_status_t status;

    if (c == NULL || p == NULL || r_p == NULL || p->job == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    flags = (p->field_mask & CKS_RESTORE_FIELD_FLAGS) ? p->flags : 0;
    fdir  = (p->field_mask & CKS_RESTORE_FIELD_FLUSH_DIR) ? p->flush_dir : NULL;
    if ((flags & ~(CKS_RESTORE_CHECK | CKS_RESTORE_FALLBACK | CKS_RESTORE_DURABLE)) ||
        ((flags & CKS_RESTORE_DURABLE) && fdir == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (flags & CKS_RESTORE_DURABLE) {
        return cks_cl_disk_open(c, fdir, p->job, p->version, r_p);
    }
    if (flags == 0) {
        status = cks_restore_open(c, p->job, p->version, r_p);
        if (fdir != NULL && cks_fb_durable_case(status)) {
            status = cks_fb_durable(c, fdir, p->job, p->version, status, r_p);
        }
        return status;
    }
    if (strlen(p->job) > CKS_JOB_MAX_LEN) {
        return CKS_ERR_KEY_TOO_LONG;
    }
    w.c   = c;
    w.job = p->job;
    if (p->field_mask & CKS_RESTORE_FIELD_SKIP_CB) {
        w.cb  = p->skip_cb;
        w.arg = p->skip_arg;
    }
    /* the version asked for: it must exist */
    status = p->version == CKS_VERSION_LATEST ? cks_version_latest(c, p->job, &info)
                                              : cks_version_stat(c, p->job, p->version, &info);
    if (status != CKS_OK) {
        if (fdir != NULL && cks_fb_durable_case(status)) {
            status = cks_fb_durable(c, fdir, p->job, p->version, status, r_p);
        }
        return status;
    }
    status = cks_fb_try(&w, &info);
    if (status == CKS_OK) {
        return cks_cl_restore_new(c, p->job, &info, r_p);
    }
    if (status != CKS_ERR_DATA_LOST && status != CKS_ERR_NOT_RESTORABLE) {
        return status;
    }
    /* the same version, exactly, from its flushed copy, before any older one */
    if (fdir != NULL && cks_cl_disk_open(c, fdir, p->job, info.version, r_p) == CKS_OK) {
        cks_info("job '%s': version %llu read from its flushed copy (memory tier: %s)",
                 p->job, (unsigned long long)info.version, cks_status_string(status));
        return CKS_OK;
    }
    if (!(flags & CKS_RESTORE_FALLBACK)) {
        cks_cl_set_errorf(c, status, "version %llu of job '%s' cannot be restored: %s",
                          (unsigned long long)info.version, p->job, w.newest.reason);
        return status;
    }
    /* fall back: the older restorable versions, newest first */
    status = cks_fb_older(c, p->job, info.version, &older, &nolder);
    for (size_t i = nolder; status == CKS_OK && i > 0; i--) {
        cks_status_t st = cks_fb_try(&w, &older[i - 1]);
        if (st == CKS_OK) {
            cks_info("job '%s': restoring version %llu in place of %llu", p->job,
                     (unsigned long long)older[i - 1].version,
                     (unsigned long long)info.version);
            status = cks_cl_restore_new(c, p->job, &older[i - 1], r_p);
            free(older);
            return status;
        }
        if (st != CKS_ERR_DATA_LOST && st != CKS_ERR_NOT_RESTORABLE) {
            status = st;
        }
    }
    free(older);
    if (status != CKS_OK) {
        return status; /* the walk stopped: not a verdict on the versions */
    }
    status = w.lost > 0 ? CKS_ERR_DATA_LOST : CKS_ERR_NOT_RESTORABLE;
    cks_cl_set_errorf(c, status,
                      "no version of job '%s' up to %llu can be restored (%zu skipped); "
                      "version %llu: %s",
                      p->job, (unsigned long long)info.version, w.skipped,
                      (unsigned long long)w.newest.version, w.newest.reason);
    return status;
}
