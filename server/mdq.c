/*
 * DESIGN: the metadata writer thread. Owns every LMDB write transaction of
 * the server (one writer, as LMDB wants) and the CRC of every stored object
 * (ISA-L, off the progress thread).
 *
 * It is the one thread of a background-work queue (common/workq.c) in batch
 * mode: it takes all queued jobs at once, computes the CRCs of new objects
 * outside any transaction, then applies the batch in one write transaction
 * (group commit), and hands the jobs back through the queue's done list,
 * waking the progress thread with cks_tp_worker_signal(). Jobs are applied
 * in the order they were queued, so a version record is always written
 * before the objects that follow it, and a seal after every put queued
 * before it. The stop runs what is queued; a job pushed after it is not
 * run and finishes as CKS_ERR_CANCELED.
 * Never: touch UCX (other than the thread-safe signal), or hold a write
 * transaction while waiting for anything but LMDB itself.
 */
#include "cks_coding.h"
#include "server_int.h"

#include <stdlib.h>
#include <string.h>

cks_status_t cks_sv_collect_extents(cks_md_txn_h txn, const char *job, size_t job_len,
                                    uint64_t version, cks_sv_extent_t **ext_p,
                                    size_t *n_p)
{
    enum { PAGE = 256 };
    cks_md_object_t *page = malloc(PAGE * sizeof(*page));
    cks_sv_extent_t *ext = NULL, *grown;
    size_t n = 0, cap = 0, count;
    char after[CKS_KEY_MAX_LEN + 1];
    size_t after_len = 0;
    cks_status_t status;
    int more = 1;

    if (page == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    while (more) {
        status = cks_md_object_list(txn, job, job_len, version, after_len ? after : NULL,
                                    after_len, page, PAGE, &count, &more);
        if (status != CKS_OK) {
            goto err_free;
        }
        if (n + count > cap) {
            cap   = CKS_MAX(cap * 2, n + count);
            grown = realloc(ext, cap * sizeof(*ext));
            if (grown == NULL) {
                status = CKS_ERR_NO_MEMORY;
                goto err_free;
            }
            ext = grown;
        }
        for (size_t i = 0; i < count; i++) {
            ext[n].off = page[i].arena_offset;
            ext[n].len = page[i].arena_len;
            n++;
        }
        if (count > 0) {
            memcpy(after, page[count - 1].key, page[count - 1].key_len);
            after_len = page[count - 1].key_len;
        }
    }
    free(page);
    *ext_p = ext;
    *n_p   = n;
    return CKS_OK;

err_free:
    free(ext);
    free(page);
    return status;
}

typedef struct {
    cks_sv_extent_t *ext;
    size_t n, cap;
} cks_mdq_extents_t;

static cks_status_t cks_mdq_chunk_freed(const cks_md_chunk_t *c, void *arg)
{
    cks_mdq_extents_t *e = arg;
    void *p = cks_array_grow(e->ext, &e->cap, e->n + 1, sizeof(*e->ext), 64);
    if (p == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    e->ext = p;
    e->ext[e->n].off = c->arena_offset;
    e->ext[e->n].len = c->arena_len;
    e->n++;
    return CKS_OK;
}

static int cks_mdq_restorable(cks_vstate_t st)
{
    return st == CKS_VSTATE_SEALED || st == CKS_VSTATE_PROTECTED || st == CKS_VSTATE_DEGRADED;
}

typedef struct {
    cks_md_txn_h txn;
    const cks_mdq_job_t *j;
    uint64_t oldest_kept;
    uint64_t *kept;        /* the retained restorable versions */
    size_t nkept;
    cks_mdq_extents_t ext; /* what the collection frees */
} cks_mdq_gc_t;

static cks_status_t cks_mdq_gc_freed(const cks_md_chunk_t *c, void *arg)
{
    return cks_mdq_chunk_freed(c, &((cks_mdq_gc_t *)arg)->ext);
}

static int cks_mdq_held(const cks_mdq_job_t *j, uint64_t version)
{
    for (size_t i = 0; i < j->nheld; i++) {
        if (j->held[i] == version) {
            return 1;
        }
    }
    return 0;
}

/* Chunks of (version, key) stay while a retained (or held) manifest takes
 * that key from that version, or while the version is held, or not older
 * than the oldest retained one (retained, or still being written). */
static int cks_mdq_gc_keep(uint64_t version, const char *key, size_t key_len, void *arg)
{
    cks_mdq_gc_t *g = arg;
    if (version >= g->oldest_kept || cks_mdq_held(g->j, version)) {
        return 1;
    }
    for (size_t i = 0; i < g->nkept; i++) {
        cks_md_object_t o;
        if (cks_md_object_get(g->txn, g->j->job, g->j->job_len, g->kept[i], key, key_len,
                              &o) == CKS_OK &&
            o.source_version == version) {
            return 1;
        }
    }
    return 0;
}

/* Every version record of the job, oldest first (*all_p: the caller frees). */
static cks_status_t cks_mdq_versions(cks_md_txn_h txn, const cks_mdq_job_t *j,
                                     cks_md_version_t **all_p, size_t *n_p)
{
    enum { PAGE = 256 };
    cks_md_version_t *all = NULL, *page = malloc(PAGE * sizeof(*page));
    size_t n = 0, cap = 0, count;
    uint64_t after = 0;
    int more = 1, first = 1;
    cks_status_t status = page ? CKS_OK : CKS_ERR_NO_MEMORY;

    while (status == CKS_OK && more) {
        status = cks_md_version_list(txn, j->job, j->job_len, first ? NULL : &after, page, PAGE,
                                     &count, &more);
        if (status == CKS_OK && n + count > cap) {
            cap     = CKS_MAX(cap * 2, n + count);
            void *p = realloc(all, cap * sizeof(*all));
            status  = p ? CKS_OK : CKS_ERR_NO_MEMORY;
            all     = p ? p : all;
        }
        for (size_t i = 0; status == CKS_OK && i < count; i++) {
            all[n++] = page[i];
        }
        if (count > 0) {
            after = page[count - 1].version;
            first = 0;
        }
    }
    free(page);
    if (status == CKS_ERR_NO_SUCH_JOB) {
        status = CKS_OK; /* no version left */
    }
    if (status != CKS_OK) {
        free(all);
        return status;
    }
    *all_p = all;
    *n_p   = n;
    return CKS_OK;
}

/*
 * Retention, after a manifest commit: keep the newest `retain` restorable
 * versions of the job, the versions restores hold (hold.c), and every chunk
 * their manifests reference; delete the records of older versions and free
 * chunks nothing kept needs. Every server runs the same rule on the same
 * manifests (and, but for a lease one of them missed, the same holds), so
 * all agree.
 */
static cks_status_t cks_mdq_retain(cks_md_txn_h txn, cks_mdq_job_t *j)
{
    cks_md_version_t *all = NULL;
    size_t n = 0;
    cks_status_t status = cks_mdq_versions(txn, j, &all, &n);
    cks_mdq_gc_t g = {txn, j, 0, NULL, 0, {NULL, 0, 0}};
    g.kept = status == CKS_OK ? malloc((j->retain + j->nheld + 1) * sizeof(uint64_t)) : NULL;
    if (status == CKS_OK && g.kept == NULL) {
        status = CKS_ERR_NO_MEMORY;
    }
    for (size_t i = n; status == CKS_OK && i-- > 0 && g.nkept < j->retain;) {
        if (cks_mdq_restorable(all[i].state)) {
            g.kept[g.nkept++] = all[i].version;
            g.oldest_kept     = all[i].version;
        }
    }
    if (status == CKS_OK && g.nkept == j->retain) {
        /* held versions older than the retained ones: kept, with what their
         * manifests take from older versions */
        for (size_t i = 0; i < n && all[i].version < g.oldest_kept; i++) {
            if (cks_mdq_held(j, all[i].version) && cks_mdq_restorable(all[i].state)) {
                g.kept[g.nkept++] = all[i].version;
            }
        }
        for (size_t i = 0; status == CKS_OK && i < n && all[i].version < g.oldest_kept; i++) {
            if (all[i].state != CKS_VSTATE_OPEN && !cks_mdq_held(j, all[i].version)) {
                status = cks_md_version_del(txn, j->job, j->job_len, all[i].version);
            }
        }
        if (status == CKS_OK) {
            status = cks_md_chunk_gc(txn, j->job, j->job_len, cks_mdq_gc_keep,
                                     cks_mdq_gc_freed, &g);
        }
    }
    if (j->nfreed == 0) { /* a manifest job frees nothing else */
        free(j->freed);
        j->freed  = g.ext.ext;
        j->nfreed = g.ext.n;
    } else if (g.ext.n > 0) { /* after a drop: both */
        void *p = realloc(j->freed, (j->nfreed + g.ext.n) * sizeof(*j->freed));
        if (p == NULL) {
            status = CKS_ERR_NO_MEMORY; /* the transaction is undone: nothing freed */
        } else {
            j->freed = p;
            memcpy(j->freed + j->nfreed, g.ext.ext, g.ext.n * sizeof(*j->freed));
            j->nfreed += g.ext.n;
        }
        free(g.ext.ext);
    } else {
        free(g.ext.ext);
    }
    free(g.kept);
    free(all);
    return status;
}

typedef struct {
    cks_md_txn_h txn;
    const cks_mdq_job_t *j;
    cks_md_version_t *left;  /* the versions that remain */
    size_t nleft;
    cks_hmap_t *inherited;   /* be64(source) + key: what the dropped manifest
                                took from older versions */
    uint64_t last_version;   /* the previous decision: chunks come in order */
    char last_key[CKS_KEY_MAX_LEN];
    size_t last_len;
    int last_keep;
    cks_mdq_extents_t ext;   /* what the drop frees */
} cks_mdq_drop_t;

static cks_status_t cks_mdq_drop_freed(const cks_md_chunk_t *c, void *arg)
{
    return cks_mdq_chunk_freed(c, &((cks_mdq_drop_t *)arg)->ext);
}

/* The chunks of (version, key) are freed by this drop when they are the
 * dropped version's own or ones its manifest took from an older version,
 * and no manifest that remains takes `key` from `version`. */
static int cks_mdq_drop_keep(uint64_t version, const char *key, size_t key_len, void *arg)
{
    cks_mdq_drop_t *d = arg;
    uint8_t ref[8 + CKS_KEY_MAX_LEN];
    int keep = 1;

    if (key_len > CKS_KEY_MAX_LEN) {
        return 1; /* not a key this server wrote: left alone */
    }
    if (d->last_len > 0 && version == d->last_version && key_len == d->last_len &&
        memcmp(key, d->last_key, key_len) == 0) {
        return d->last_keep;
    }
    cks_put_be64(ref, version);
    memcpy(ref + 8, key, key_len);
    if (version == d->j->version || cks_hmap_get(d->inherited, ref, 8 + key_len) != NULL) {
        keep = 0;
        for (size_t i = 0; i < d->nleft && !keep; i++) {
            cks_md_object_t o;
            keep = cks_md_object_get(d->txn, d->j->job, d->j->job_len, d->left[i].version, key,
                                     key_len, &o) == CKS_OK &&
                   o.source_version == version;
        }
    }
    d->last_version = version;
    memcpy(d->last_key, key, key_len);
    d->last_len  = key_len;
    d->last_keep = keep;
    return keep;
}

/*
 * A version leaves (deleted, or aborted: then `rec` is its ABORTED record):
 * its record and manifest go, and so do the chunks that only it used. Chunks
 * are shared by manifests: a child takes objects from its parent with their
 * source version, so a chunk of (V, key) is freed only when no manifest that
 * remains takes key from V - by the drop of the last version that used it,
 * whichever was deleted first. Every server holds every manifest and applies
 * the same rule, so all agree; the rule reads only LMDB, so it holds across
 * restarts.
 */
static cks_status_t cks_mdq_drop(cks_md_txn_h txn, cks_mdq_job_t *j)
{
    enum { PAGE = 256 };
    cks_md_object_t *page = malloc(PAGE * sizeof(*page));
    cks_mdq_drop_t d = {txn, j, NULL, 0, NULL, 0, {0}, 0, 0, {NULL, 0, 0}};
    char after[CKS_KEY_MAX_LEN + 1];
    size_t after_len = 0, count;
    int more = 1;
    cks_status_t status = page != NULL ? cks_hmap_create(&d.inherited) : CKS_ERR_NO_MEMORY;

    while (status == CKS_OK && more) {
        status = cks_md_object_list(txn, j->job, j->job_len, j->version,
                                    after_len ? after : NULL, after_len, page, PAGE, &count,
                                    &more);
        for (size_t i = 0; status == CKS_OK && i < count; i++) {
            uint8_t ref[8 + CKS_KEY_MAX_LEN];
            if (page[i].source_version == j->version) {
                continue;
            }
            cks_put_be64(ref, page[i].source_version);
            memcpy(ref + 8, page[i].key, page[i].key_len);
            status = cks_hmap_put(d.inherited, ref, 8 + page[i].key_len, &d);
        }
        if (status == CKS_OK && count > 0) {
            memcpy(after, page[count - 1].key, page[count - 1].key_len);
            after_len = page[count - 1].key_len;
        }
    }
    if (status == CKS_ERR_NO_SUCH_JOB) {
        status = CKS_OK; /* chunks without a manifest yet */
    }
    if (status == CKS_OK && !j->has_rec) {
        /* a delete (not an abort): the incarnation that goes leaves a drop
         * record, so that catch-up never learns it back from a server that
         * missed the delete (repair.c) */
        cks_md_version_t gone;
        status = cks_md_version_get(txn, j->job, j->job_len, j->version, &gone);
        if (status == CKS_OK && gone.state != CKS_VSTATE_ABORTED) {
            status = cks_md_drop_put(txn, j->job, j->job_len, j->version, gone.created_ns,
                                     cks_time_real_ns());
        } else if (status == CKS_OK || status == CKS_ERR_NO_SUCH_VERSION ||
                   status == CKS_ERR_NO_SUCH_JOB) {
            status = CKS_OK;
        }
    }
    if (status == CKS_OK) {
        status = cks_md_version_del(txn, j->job, j->job_len, j->version);
        if (status == CKS_ERR_NO_SUCH_VERSION) {
            status = CKS_OK;
        }
    }
    if (status == CKS_OK && j->has_rec) {
        status = cks_md_version_put(txn, j->job, j->job_len, &j->rec, 1);
    }
    if (status == CKS_OK) {
        status = cks_mdq_versions(txn, j, &d.left, &d.nleft);
    }
    if (status == CKS_OK) {
        status = cks_md_chunk_gc(txn, j->job, j->job_len, cks_mdq_drop_keep,
                                 cks_mdq_drop_freed, &d);
    }
    j->freed  = d.ext.ext;
    j->nfreed = d.ext.n;
    cks_hmap_destroy(d.inherited);
    free(d.left);
    free(page);
    /* an abort for lack of space: the retention one version short */
    return status == CKS_OK && j->retain > 0 ? cks_mdq_retain(txn, j) : status;
}

static cks_status_t cks_mdq_apply(cks_md_txn_h txn, cks_mdq_job_t *j)
{
    const char *job = j->job;
    size_t job_len  = j->job_len;
    cks_status_t status;

    switch (j->type) {
        case CKS_MDQ_BEGIN:
            return cks_md_version_put(txn, job, job_len, &j->rec, 0);
        case CKS_MDQ_PUT:
            if (cks_fault_fire("md_put")) {
                return CKS_ERR_IO;
            }
            return cks_md_object_put(txn, job, job_len, j->version, &j->obj);
        case CKS_MDQ_SEAL:
            return cks_md_version_put(txn, job, job_len, &j->rec, 1);
        case CKS_MDQ_ABORT:
        case CKS_MDQ_DELETE:
            status = cks_sv_collect_extents(txn, job, job_len, j->version, &j->freed,
                                            &j->nfreed);
            if (status != CKS_OK) {
                return status;
            }
            status = cks_md_version_del(txn, job, job_len, j->version);
            if (status == CKS_OK && j->type == CKS_MDQ_ABORT) {
                status = cks_md_version_put(txn, job, job_len, &j->rec, 1);
            }
            return status;
        case CKS_MDQ_CHUNKS:
            if (j->chunk_guard) {
                cks_md_version_t g;
                status = cks_md_version_get(txn, job, job_len, j->guard_version, &g);
                if (status == CKS_OK && g.state != CKS_VSTATE_PROTECTED &&
                    g.state != CKS_VSTATE_DEGRADED) {
                    status = CKS_ERR_NOT_RESTORABLE;
                }
                if (status != CKS_OK) {
                    return status; /* dropped meanwhile: nothing needs the chunk */
                }
            } else {
                /* a version aborted here (its drop came first) takes no chunk:
                 * the primary that sent it may never report the object to
                 * the coordinator (killed, or its receive path stalled), and
                 * then nothing would ever drop the version again to free it */
                cks_md_version_t now;
                status = cks_md_version_get(txn, job, job_len, j->version, &now);
                if (status == CKS_OK && now.state == CKS_VSTATE_ABORTED) {
                    return CKS_ERR_VERSION_NOT_OPEN;
                }
                if (status != CKS_OK && status != CKS_ERR_NO_SUCH_VERSION &&
                    status != CKS_ERR_NO_SUCH_JOB) {
                    return status;
                }
            }
            for (size_t i = 0; i < j->nchunks; i++) {
                status = cks_md_chunk_put(txn, job, job_len, j->version, j->key, j->key_len,
                                          &j->chunks[i]);
                if (status == CKS_OK && i == 1 && cks_fault_fire("md_chunk_dup")) {
                    status = CKS_ERR_DUPLICATE_KEY; /* after one record was written */
                }
                if (status != CKS_OK) {
                    return status;
                }
            }
            return CKS_OK;
        case CKS_MDQ_MANIFEST:
            for (size_t i = 0; i < j->nobjs; i++) {
                status = cks_md_object_put(txn, job, job_len, j->version, &j->objs[i]);
                if (status != CKS_OK && status != CKS_ERR_DUPLICATE_KEY) {
                    return status; /* a page sent twice is harmless */
                }
            }
            if (!j->has_rec) {
                return CKS_OK;
            }
            if (j->rec_if_restorable) {
                cks_md_version_t now;
                status = cks_md_version_get(txn, job, job_len, j->version, &now);
                if (status == CKS_ERR_NO_SUCH_VERSION ||
                    (status == CKS_OK && now.state != CKS_VSTATE_PROTECTED &&
                     now.state != CKS_VSTATE_DEGRADED)) {
                    return CKS_OK; /* dropped meanwhile: not brought back */
                }
                if (status != CKS_OK) {
                    return status;
                }
            }
            if (cks_fault_fire("md_manifest")) {
                return CKS_ERR_IO; /* after the entries were written */
            }
            status = cks_md_version_put(txn, job, job_len, &j->rec, 1);
            return status == CKS_OK && j->retain > 0 ? cks_mdq_retain(txn, j) : status;
        case CKS_MDQ_DROP:
            return cks_mdq_drop(txn, j);
    }
    return CKS_ERR_INTERNAL;
}

static void cks_mdq_run_batch(cks_workq_t *wq, cks_workq_job_t *batch, void *arg)
{
    cks_mdq_t *q = arg;
    cks_md_txn_h txn;
    cks_status_t status;

    (void)wq;
    /* CRCs first, outside the transaction: of new objects, and of chunks
     * received from a primary (a chunk that does not match the CRC its
     * primary computed is refused, never recorded) */
    for (cks_workq_job_t *l = batch; l != NULL; l = l->next) {
        cks_mdq_job_t *j = CKS_CONTAINER_OF(l, cks_mdq_job_t, wq);
        if (j->type == CKS_MDQ_PUT) {
            j->obj.crc64 = cks_crc64(0, j->data, j->obj.size);
        } else if (j->type == CKS_MDQ_CHUNKS && j->data != NULL && j->nchunks == 1 &&
                   cks_crc64(0, j->data, j->chunks[0].len) != j->chunks[0].crc64) {
            j->status = CKS_ERR_CRC_MISMATCH;
        }
    }
    status = cks_md_txn_begin(q->md, 1, &txn);
    if (status == CKS_OK) {
        /* each job in its own nested transaction: a job that fails halfway
         * (a duplicate chunk, a full map) leaves nothing of itself behind,
         * so no record points at space its caller frees on the failure */
        for (cks_workq_job_t *l = batch; l != NULL; l = l->next) {
            cks_mdq_job_t *j = CKS_CONTAINER_OF(l, cks_mdq_job_t, wq);
            cks_md_txn_h child;
            if (j->status != CKS_OK) {
                continue; /* refused before the transaction */
            }
            j->status = cks_md_txn_begin_nested(txn, &child);
            if (j->status == CKS_OK) {
                j->status = cks_mdq_apply(child, j);
                if (j->status == CKS_OK) {
                    j->status = cks_md_txn_commit(child);
                } else {
                    cks_md_txn_abort(child);
                }
            }
            if (j->status != CKS_OK) {
                free(j->freed); /* nothing of it was deleted */
                j->freed  = NULL;
                j->nfreed = 0;
            }
        }
        if (cks_fault_fire("md_commit")) {
            cks_md_txn_abort(txn);
            status = CKS_ERR_IO;
        } else {
            status = cks_md_txn_commit(txn);
        }
    }
    if (status != CKS_OK) {
        cks_error("metadata commit of a batch failed: %s", cks_status_string(status));
        for (cks_workq_job_t *l = batch; l != NULL; l = l->next) {
            cks_mdq_job_t *j = CKS_CONTAINER_OF(l, cks_mdq_job_t, wq);
            if (j->status == CKS_OK) {
                j->status = status;
            }
            free(j->freed); /* nothing was deleted */
            j->freed  = NULL;
            j->nfreed = 0;
        }
    }
}

/* The batch is on the done list: wake the progress thread. */
static void cks_mdq_wake(void *arg)
{
    cks_tp_worker_signal(((cks_mdq_t *)arg)->tp);
}

/* Pushed after the stop: not run, but its callback runs. */
static void cks_mdq_late(cks_workq_job_t *job, void *arg)
{
    (void)arg;
    CKS_CONTAINER_OF(job, cks_mdq_job_t, wq)->status = CKS_ERR_CANCELED;
}

cks_status_t cks_mdq_start(cks_mdq_t *q, cks_md_h md, cks_tp_worker_h tp)
{
    cks_workq_params_t p = {.nthreads = 1,
                            .flags    = CKS_WORKQ_BATCH | CKS_WORKQ_DRAIN,
                            .run      = cks_mdq_run_batch,
                            .wake     = cks_mdq_wake,
                            .late     = cks_mdq_late,
                            .arg      = q,
                            .name     = "cks-metadata"};

    memset(q, 0, sizeof(*q));
    q->md = md;
    q->tp = tp;
    return cks_workq_create(&p, &q->wq);
}

void cks_mdq_stop(cks_mdq_t *q)
{
    if (q->wq != NULL) {
        (void)cks_workq_stop(q->wq); /* drains: nothing is handed back */
    }
}

void cks_mdq_fini(cks_mdq_t *q)
{
    cks_workq_destroy(q->wq);
    q->wq = NULL;
}

void cks_mdq_push(cks_mdq_t *q, cks_mdq_job_t *job)
{
    (void)cks_workq_push(q->wq, &job->wq); /* never refused: `late` is set */
}

cks_workq_job_t *cks_mdq_take_done(cks_mdq_t *q)
{
    return cks_workq_take_done(q->wq);
}
