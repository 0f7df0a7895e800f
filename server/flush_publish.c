/*
 * DESIGN: the durable tier's publication: a flushed version made visible
 * (FLUSH_PUBLISH, its manifest written last and renamed into place), and
 * the retention of flushed versions (--flush-keep). See flush.c for the
 * whole design.
 *
 * Never: publish a version before every chunk of it is on disk.
 */
#include "flush_int.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- retention of the durable tier (--flush-keep) ----------------------------------------- */

static int cks_fl_has_u64(const uint64_t *a, size_t n, uint64_t v)
{
    for (size_t i = 0; i < n; i++) {
        if (a[i] == v) {
            return 1;
        }
    }
    return 0;
}

static int cks_fl_cmp_desc(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* After a publish: keep the `keep` newest versions published for the job,
 * and every older one that a kept version's manifest names as an object's
 * source (a partial-expert child's parent, grandparent ...); remove the
 * others. Newest first, so that a version kept for a reference adds its own.
 * A version is first renamed to ".<version>.del-<nonce>" (no reader opens
 * it any more, the rename is atomic), then its files are removed. A kept
 * manifest that cannot be read stops the removal (its references unknown).
 * Flush thread. */
static void cks_fl_retain(cks_server_h s, const cks_fl_job_t *j, const cks_fl_paths_t *p)
{
    unsigned keep = s->p.flush_keep;
    uint64_t *vs = NULL, *refs = NULL, v;
    size_t n = 0, cap = 0, nrefs = 0, caprefs = 0;
    char name[32], path[PATH_MAX], del[PATH_MAX], err[256];
    struct dirent *e;
    DIR *d;

    if (keep == 0 || (d = opendir(p->jobdir)) == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (!cks_md_flush_version_parse(e->d_name, &v)) {
            continue;
        }
        void *q = cks_array_grow(vs, &cap, n + 1, sizeof(*vs), 64);
        if (q == NULL) {
            goto out;
        }
        vs = q;
        vs[n++] = v;
    }
    if (n <= keep) {
        goto out;
    }
    qsort(vs, n, sizeof(*vs), cks_fl_cmp_desc);
    for (size_t i = 0; i < n; i++) {
        cks_md_flush_version_name(vs[i], name, sizeof(name));
        if (i < keep || cks_fl_has_u64(refs, nrefs, vs[i])) {
            cks_md_flush_manifest_t mf;
            snprintf(path, sizeof(path), "%s/%s/MANIFEST", p->jobdir, name);
            if (cks_md_flush_manifest_read(path, &mf, err, sizeof(err)) != CKS_OK) {
                cks_warn("flush retention: %s: nothing older removed", err);
                goto out;
            }
            for (size_t k = 0; k < mf.nobjs; k++) {
                uint64_t src = mf.objs[k].source_version;
                if (src == vs[i] || cks_fl_has_u64(refs, nrefs, src)) {
                    continue;
                }
                void *q = cks_array_grow(refs, &caprefs, nrefs + 1, sizeof(*refs), 16);
                if (q == NULL) {
                    cks_md_flush_manifest_free(&mf);
                    goto out;
                }
                refs = q;
                refs[nrefs++] = src;
            }
            cks_md_flush_manifest_free(&mf);
            if (i >= keep) {
                cks_info("flush retention: version %" PRIu64 " of '%s' kept: a kept version "
                         "reads objects from it",
                         vs[i], j->job);
            }
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", p->jobdir, name);
        snprintf(del, sizeof(del), "%s/.%s.del-%016" PRIx64, p->jobdir, name,
                 cks_tp_random_id());
        if (rename(path, del) != 0) {
            cks_warn("flush retention: cannot remove %s: %s", path, strerror(errno));
            continue;
        }
        cks_fl_fsync_dir(p->jobdir);
        cks_fl_rmdir_flat(del);
        cks_info("flush retention: version %" PRIu64 " of '%s' removed from %s (--flush-keep "
                 "%u)",
                 vs[i], j->job, p->jobdir, keep);
    }
out:
    closedir(d);
    free(vs);
    free(refs);
}

/* ---- FLUSH_PUBLISH ----------------------------------------------------------------------- */

void cks_fl_publish(struct cks_sv_flush *fl, cks_fl_job_t *j)
{
    cks_server_h s = fl->s;
    cks_fl_paths_t p;
    cks_fl_manifest_t mf = {0};
    cks_md_flush_manifest_t out = {0};
    cks_hmap_t *have = NULL;
    cks_md_txn_h txn = NULL;
    uint16_t *ids = NULL;
    size_t nids = 0, capids = 0;
    char path[PATH_MAX], tmp[PATH_MAX], err[256];
    uint8_t hk[CKS_MD_FLUSH_HKEY_MAX];
    struct stat st;
    DIR *d = NULL;
    struct dirent *e;
    FILE *f = NULL;
    int published = 0;

    if (cks_fl_paths_unpublished(j, &p) != 0) {
        return;
    }
    if (cks_md_txn_begin(s->md, 0, &txn) != CKS_OK) {
        cks_fl_fail(j, CKS_ERR_IO, "cannot read the metadata");
        goto out;
    }
    cks_fl_manifest(s, j, txn, &mf);
    cks_md_txn_abort(txn);
    if (j->status != CKS_OK) {
        goto out;
    }
    if (cks_hmap_create(&have) != CKS_OK) {
        cks_fl_fail(j, CKS_ERR_NO_MEMORY, "out of memory");
        goto out;
    }
    /* every server's index that was published into the temporary directory */
    d = opendir(p.tmp);
    if (d == NULL) {
        cks_fl_fail(j, CKS_ERR_DATA_LOST, "no server wrote chunks to %s: %s", p.tmp,
                    strerror(errno));
        goto out;
    }
    while ((e = readdir(d)) != NULL && j->status == CKS_OK) {
        unsigned id;
        int end                  = 0;
        cks_md_flush_chunk_t *cs = NULL;
        size_t ncs               = 0;
        /* "server-<id>.index" exactly (not its .chunks, not a .tmp) */
        if (sscanf(e->d_name, "server-%u.index%n", &id, &end) != 1 || end == 0 ||
            e->d_name[end] != '\0' || id > UINT16_MAX) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", p.tmp, e->d_name);
        if (cks_md_flush_index_read(path, &cs, &ncs, err, sizeof(err)) != CKS_OK) {
            cks_warn("flush: %s: left out", err);
            continue;
        }
        snprintf(path, sizeof(path), "%s/server-%u.chunks", p.tmp, id);
        uint64_t need = 0;
        for (size_t i = 0; i < ncs; i++) {
            need = CKS_MAX(need, cs[i].offset + cs[i].len);
        }
        if (stat(path, &st) != 0 || (uint64_t)st.st_size < need) {
            cks_warn("flush: %s is missing or shorter than its index: left out", path);
            free(cs);
            continue;
        }
        for (size_t i = 0; i < ncs; i++) {
            size_t n = cks_md_flush_hkey(cs[i].key, cs[i].key_len, cs[i].source, cs[i].stripe,
                                         cs[i].idx, hk);
            if (cks_hmap_put(have, hk, n, have) != CKS_OK) {
                cks_fl_fail(j, CKS_ERR_NO_MEMORY, "out of memory");
                break;
            }
        }
        free(cs);
        void *q = cks_array_grow(ids, &capids, nids + 1, sizeof(*ids), 16);
        if (q == NULL) {
            cks_fl_fail(j, CKS_ERR_NO_MEMORY, "out of memory");
            break;
        }
        ids = q;
        ids[nids++] = (uint16_t)id;
    }
    if (j->status != CKS_OK) {
        goto out;
    }
    /* a version on disk restores on its own: every stripe of every object of
     * its manifest has at least k chunks there */
    unsigned k = mf.rec.ec_k, width = mf.rec.ec_k + mf.rec.ec_m;
    for (size_t i = 0; i < mf.nobjs && j->status == CKS_OK; i++) {
        const cks_md_object_t *o = &mf.objs[i];
        uint64_t stripes         = cks_ec_stripe_count(o->size, k, mf.rec.chunk_size);
        for (uint64_t sn = 0; sn < stripes; sn++) {
            unsigned n = 0;
            for (unsigned idx = 0; idx < width; idx++) {
                size_t hl = cks_md_flush_hkey(o->key, o->key_len, o->source_version, sn, idx,
                                              hk);
                n += cks_hmap_get(have, hk, hl) != NULL;
            }
            if (n < k) {
                cks_fl_fail(j, CKS_ERR_DATA_LOST,
                            "object '%s' (version %" PRIu64 "), stripe %" PRIu64
                            ": %u of the %u chunks it needs were written (servers that "
                            "wrote: %zu)",
                            o->key, o->source_version, sn, n, k, nids);
                break;
            }
        }
    }
    if (j->status != CKS_OK) {
        goto out;
    }
    memcpy(out.job, j->job, j->job_len + 1);
    out.job_len  = j->job_len;
    out.v        = mf.rec;
    out.servers  = ids;
    out.nservers = nids;
    out.objs     = mf.objs;
    out.nobjs    = mf.nobjs;
    snprintf(tmp, sizeof(tmp), "%s/MANIFEST.tmp", p.tmp);
    snprintf(path, sizeof(path), "%s/MANIFEST", p.tmp);
    f = fopen(tmp, "w");
    if (f == NULL || cks_md_flush_manifest_write(f, &out) != CKS_OK || fflush(f) != 0 ||
        fsync(fileno(f)) != 0) {
        cks_fl_fail(j, CKS_ERR_IO, "writing %s: %s", tmp, strerror(errno));
        goto out;
    }
    int rc = cks_fl_close_rename(j, f, tmp, path, p.tmp, "writing");
    f      = NULL;
    if (rc != 0) {
        goto out;
    }
    if (cks_fault_fire("flush_publish_die")) {
        cks_error("fault flush_publish_die: killed before publishing %s", p.pub);
        raise(SIGKILL);
    }
    /* the one step that makes it visible, then made durable */
    if (rename(p.tmp, p.pub) != 0 || cks_fl_fsync_dir(p.jobdir) != 0) {
        cks_fl_fail(j, errno == ENOTEMPTY || errno == EEXIST ? CKS_ERR_VERSION_EXISTS
                                                              : CKS_ERR_IO,
                    "publishing %s: %s", p.pub, strerror(errno));
        goto out;
    }
    published = 1;
    cks_fl_remove_stale(j, &p);
    cks_fl_retain(s, j, &p);
    cks_info("flush: version %" PRIu64 " of '%s' published to %s (%zu objects, %zu servers' "
             "files)",
             j->version, j->job, p.pub, mf.nobjs, nids);
out:
    if (f != NULL) {
        fclose(f);
    }
    if (d != NULL) {
        closedir(d);
    }
    if (!published && j->status != CKS_ERR_VERSION_EXISTS) {
        cks_fl_rmdir_flat(p.tmp); /* nothing half-written stays behind */
    }
    cks_hmap_destroy(have);
    free(ids);
    free(mf.objs);
}
