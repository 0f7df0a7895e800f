/*
 * flush.c - the durable tier on a server: FLUSH_CHUNKS writes the chunks
 * this server holds of a version into a flush's temporary directory;
 * FLUSH_PUBLISH checks that the servers' files hold at least k chunks of
 * every stripe, writes the manifest, and publishes the version by rename.
 * On-disk format: metadata/flushfmt.c; docs/ARCHITECTURE.md, "Durable tier".
 *
 * DESIGN: one flush thread per server, started at the first request (or at
 * the server's start with a policy or retention). The progress thread
 * validates a request, registers a chunk read (so that no arena space the
 * flush may still copy from is reused: cks_sv_read_begin) and queues the
 * job; the flush thread opens its own LMDB read transaction, lists what to
 * write, writes with plain write(2)/fsync(2), and hands the job back
 * (ucp_worker_signal); the progress thread ends the read and answers. A
 * file is published only once fsync'd: chunk files and indexes before the
 * manifest, the manifest before the directory's rename; after a publish,
 * retention (--flush-keep) removes older versions by rename first. The
 * chunk writes are paced (--flush-rate, a token bucket): the flush thread
 * sleeps, never the progress thread. With a policy (--flush-every,
 * --flush-age: whether a version is due by age is read from the flush
 * directory on the flush thread) or retention, the flush thread also
 * scans, from the server's start and every 10 s, for versions due and not
 * published (a policy flush a stop interrupted) and for what unfinished
 * flushes left; the progress thread starts the flushes of those this
 * server coordinates, and retries failed ones with backoff.
 * Never: file I/O, LMDB or a pacing sleep on the progress thread; a write
 * transaction here; a published directory that is not complete.
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

void cks_fl_fail(cks_fl_job_t *j, cks_status_t status, const char *fmt, ...)
{
    va_list ap;
    if (j->status != CKS_OK) {
        return; /* the first reason stands */
    }
    j->status = status;
    va_start(ap, fmt);
    vsnprintf(j->why, sizeof(j->why), fmt, ap);
    va_end(ap);
}

/* ---- paths ------------------------------------------------------------------------------ */



int cks_fl_paths(cks_fl_job_t *j, cks_fl_paths_t *p)
{
    char name[32];
    if (cks_md_flush_job_dir(j->dir, j->job, j->job_len, p->jobdir, sizeof(p->jobdir)) !=
        CKS_OK) {
        cks_fl_fail(j, CKS_ERR_INVALID_PARAM, "flush directory name too long");
        return -1;
    }
    cks_md_flush_version_name(j->version, name, sizeof(name));
    if (snprintf(p->pub, sizeof(p->pub), "%s/%s", p->jobdir, name) >= (int)sizeof(p->pub) ||
        snprintf(p->tmp, sizeof(p->tmp), "%s/.%s.tmp-%016" PRIx64, p->jobdir, name,
                 j->nonce) >= (int)sizeof(p->tmp)) {
        cks_fl_fail(j, CKS_ERR_INVALID_PARAM, "flush directory name too long");
        return -1;
    }
    return 0;
}

int cks_fl_paths_unpublished(cks_fl_job_t *j, cks_fl_paths_t *p)
{
    struct stat st;
    if (cks_fl_paths(j, p) != 0) {
        return -1;
    }
    if (stat(p->pub, &st) == 0) {
        cks_fl_fail(j, CKS_ERR_VERSION_EXISTS, "version %" PRIu64 " is already flushed to %s",
                    j->version, p->pub);
        return -1;
    }
    return 0;
}

int cks_fl_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        return -1;
    }
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int cks_fl_close_rename(cks_fl_job_t *j, FILE *f, const char *tmp, const char *path,
                        const char *dir, const char *verb)
{
    if (fclose(f) != 0) {
        cks_fl_fail(j, CKS_ERR_IO, "closing %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (rename(tmp, path) != 0 || cks_fl_fsync_dir(dir) != 0) {
        cks_fl_fail(j, CKS_ERR_IO, "%s %s: %s", verb, path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Remove a flat directory (files only), best effort. */
void cks_fl_rmdir_flat(const char *path)
{
    char f[PATH_MAX];
    DIR *d = opendir(path);
    struct dirent *e;
    if (d == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        if (snprintf(f, sizeof(f), "%s/%s", path, e->d_name) < (int)sizeof(f)) {
            unlink(f);
        }
    }
    closedir(d);
    rmdir(path);
}

/* Remove what flushes of this version that never published left behind
 * (a writer killed halfway): once it is published they are of no use. */
void cks_fl_remove_stale(const cks_fl_job_t *j, const cks_fl_paths_t *p)
{
    char prefix[64], name[32], path[PATH_MAX];
    struct dirent *e;
    DIR *d = opendir(p->jobdir);
    cks_md_flush_version_name(j->version, name, sizeof(name));
    snprintf(prefix, sizeof(prefix), ".%s.tmp-", name);
    if (d == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 &&
            snprintf(path, sizeof(path), "%s/%s", p->jobdir, e->d_name) < (int)sizeof(path)) {
            cks_info("flush: removing %s, left by a flush that did not finish", path);
            cks_fl_rmdir_flat(path);
        }
    }
    closedir(d);
}

/* ---- a client's request, recorded in the flush directory ---------------------------------- */

/* DIR/<job>/.<version>.req-<id>: a flush that a client asked server <id>
 * for and that is not published yet. That server writes it before the
 * flush starts and removes it once the version is published (or cannot be:
 * no such version); its scan (cks_fl_scan_requests) flushes again what a
 * stop or a failure left unpublished. */
static int cks_fl_request_path(const cks_fl_job_t *j, const cks_fl_paths_t *p, uint16_t id,
                               char *out, size_t len)
{
    char name[32];
    cks_md_flush_version_name(j->version, name, sizeof(name));
    return snprintf(out, len, "%s/.%s.req-%u", p->jobdir, name, (unsigned)id) < (int)len ? 0
                                                                                       : -1;
}

/* Write the record (flush thread): a temporary name, fsync, rename, fsync of
 * the job's directory. */
void cks_fl_record(struct cks_sv_flush *fl, cks_fl_job_t *j)
{
    uint16_t id = cks_cluster_server(fl->s->map, fl->s->self)->id;
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    cks_fl_paths_t p;
    FILE *f = NULL;

    if (cks_fl_paths(j, &p) != 0 || cks_fl_request_path(j, &p, id, path, sizeof(path)) != 0) {
        cks_fl_fail(j, CKS_ERR_INVALID_PARAM, "flush directory name too long");
        return;
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if ((mkdir(p.jobdir, 0755) != 0 && errno != EEXIST) || (f = fopen(tmp, "w")) == NULL ||
        fprintf(f, "ckstore flush request\nversion %" PRIu64 "\nserver %u\n", j->version,
                (unsigned)id) < 0 ||
        fflush(f) != 0 || fsync(fileno(f)) != 0) {
        cks_fl_fail(j, CKS_ERR_IO, "cannot record the request in %s: %s", tmp, strerror(errno));
        if (f != NULL) {
            fclose(f);
            unlink(tmp);
        }
        return;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0 || cks_fl_fsync_dir(p.jobdir) != 0) {
        cks_fl_fail(j, CKS_ERR_IO, "cannot record the request in %s: %s", path, strerror(errno));
        unlink(tmp);
    }
}

void cks_fl_unrecord(struct cks_sv_flush *fl, cks_fl_job_t *j)
{
    uint16_t id = cks_cluster_server(fl->s->map, fl->s->self)->id;
    char path[PATH_MAX];
    cks_fl_paths_t p;
    if (cks_fl_paths(j, &p) == 0 && cks_fl_request_path(j, &p, id, path, sizeof(path)) == 0 &&
        unlink(path) == 0) {
        cks_fl_fsync_dir(p.jobdir);
    }
}

/* The job whose directory is named `name` (cks_md_flush_job_dir's %XX
 * undone; the name must be the one that job's directory has): its length,
 * or 0. */
size_t cks_fl_job_of_dir(const char *name, char *job, size_t len)
{
    char back[CKS_FL_DIR_MAX];
    size_t n = 0;
    for (const char *c = name; *c != '\0'; c++) {
        unsigned x;
        if (n + 1 >= len) {
            return 0;
        }
        if (*c == '%') {
            if (sscanf(c + 1, "%2x", &x) != 1 || c[1] == '\0' || c[2] == '\0') {
                return 0;
            }
            job[n++] = (char)x;
            c += 2;
        } else {
            job[n++] = *c;
        }
    }
    job[n] = '\0';
    if (n == 0 || cks_md_flush_job_dir("", job, n, back, sizeof(back)) != CKS_OK ||
        strcmp(back + 1, name) != 0) {
        return 0;
    }
    return n;
}



/* The version's record and manifest (every object it resolves to). */
cks_status_t cks_fl_manifest(cks_server_h s, cks_fl_job_t *j, cks_md_txn_h txn,
                                    cks_fl_manifest_t *mf)
{
    enum { PAGE = 256 };
    size_t cap = 0, count = 0;
    int more = 1;
    cks_status_t status;

    (void)s;
    status = cks_md_version_get(txn, j->job, j->job_len, j->version, &mf->rec);
    if (status != CKS_OK) {
        cks_fl_fail(j, status, "version %" PRIu64 " of job '%s': %s", j->version, j->job,
                    cks_status_string(status));
        return status;
    }
    if (mf->rec.state != CKS_VSTATE_SEALED && mf->rec.state != CKS_VSTATE_PROTECTED &&
        mf->rec.state != CKS_VSTATE_DEGRADED) {
        cks_fl_fail(j, CKS_ERR_NOT_RESTORABLE, "version %" PRIu64 " is %s", j->version,
                    cks_vstate_string(mf->rec.state));
        return CKS_ERR_NOT_RESTORABLE;
    }
    if (mf->rec.ec_k == 0 || mf->rec.chunk_size == 0) {
        cks_fl_fail(j, CKS_ERR_UNSUPPORTED, "only erasure-coded (cluster) versions flush");
        return CKS_ERR_UNSUPPORTED;
    }
    while (more) {
        void *p = cks_array_grow(mf->objs, &cap, mf->nobjs + PAGE, sizeof(*mf->objs),
                                 4 * PAGE);
        if (p == NULL) {
            cks_fl_fail(j, CKS_ERR_NO_MEMORY, "out of memory listing the manifest");
            return CKS_ERR_NO_MEMORY;
        }
        mf->objs = p;
        const cks_md_object_t *last = mf->nobjs > 0 ? &mf->objs[mf->nobjs - 1] : NULL;
        status = cks_md_object_list(txn, j->job, j->job_len, j->version,
                                    last ? last->key : NULL, last ? last->key_len : 0,
                                    mf->objs + mf->nobjs, PAGE, &count, &more);
        if (status != CKS_OK) {
            cks_fl_fail(j, status, "listing the manifest: %s", cks_status_string(status));
            return status;
        }
        mf->nobjs += count;
        if (count == 0) {
            more = 0;
        }
    }
    return CKS_OK;
}

typedef struct {
    cks_md_flush_chunk_t c;
    uint64_t arena_offset;
} cks_fl_held_t;

/* ---- FLUSH_CHUNKS ------------------------------------------------------------------------ */

static int cks_fl_write_all(int fd, const uint8_t *p, uint64_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len > (1u << 30) ? (1u << 30) : (size_t)len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        p += n;
        len -= (uint64_t)n;
    }
    return 0;
}

/* Wait (on the flush thread) until `len` more bytes may be written under
 * --flush-rate. The bucket refills at the rate and holds at most an eighth
 * of a second of bytes: writing B bytes takes at least B / rate - 1/8 s.
 * Sleeps in slices of at most 100 ms so that a stop is seen. */
static void cks_fl_pace(struct cks_sv_flush *fl, uint64_t len)
{
    if (fl->rate == UINT64_MAX) {
        return;
    }
    double rate  = (double)fl->rate;
    double burst = rate / 8;
    for (int first = 1;; first = 0) {
        uint64_t now = cks_time_ns();
        fl->tokens += (double)(now - fl->tokens_ns) * 1e-9 * rate;
        fl->tokens_ns = now;
        if (fl->tokens > burst) {
            fl->tokens = burst;
        }
        if (first) {
            fl->tokens -= (double)len;
        }
        if (fl->tokens >= 0 || fl->stop) {
            return;
        }
        double wait_s = CKS_MIN(-fl->tokens / rate, 0.1);
        struct timespec ts = {(time_t)wait_s, (long)((wait_s - (double)(time_t)wait_s) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

void cks_fl_chunks(struct cks_sv_flush *fl, cks_fl_job_t *j)
{
    cks_server_h s = fl->s;
    cks_fl_paths_t p;
    cks_fl_manifest_t mf = {0};
    cks_fl_held_t *held  = NULL;
    size_t nheld = 0, cap = 0;
    cks_md_txn_h txn = NULL;
    char data_path[PATH_MAX], idx_path[PATH_MAX], idx_tmp[PATH_MAX];
    uint16_t id = cks_cluster_server(s->map, s->self)->id;
    int fd      = -1;
    FILE *f     = NULL;

    if (cks_fl_paths_unpublished(j, &p) != 0) {
        return;
    }
    if ((mkdir(p.jobdir, 0755) != 0 && errno != EEXIST) ||
        (mkdir(p.tmp, 0755) != 0 && errno != EEXIST)) {
        cks_fl_fail(j, CKS_ERR_IO, "cannot make %s: %s", p.tmp, strerror(errno));
        return;
    }
    if (cks_md_txn_begin(s->md, 0, &txn) != CKS_OK) {
        cks_fl_fail(j, CKS_ERR_IO, "cannot read the metadata");
        return;
    }
    if (cks_fl_manifest(s, j, txn, &mf) != CKS_OK) {
        goto out_txn;
    }
    unsigned k = mf.rec.ec_k, width = mf.rec.ec_k + mf.rec.ec_m;
    for (size_t i = 0; i < mf.nobjs && j->status == CKS_OK; i++) {
        const cks_md_object_t *o = &mf.objs[i];
        uint64_t stripes         = cks_ec_stripe_count(o->size, k, mf.rec.chunk_size);
        for (uint64_t sn = 0; sn < stripes && j->status == CKS_OK; sn++) {
            for (unsigned idx = 0; idx < width; idx++) {
                cks_md_chunk_t ch;
                if (cks_md_chunk_get(txn, j->job, j->job_len, o->source_version, o->key,
                                     o->key_len, sn, idx, &ch) != CKS_OK) {
                    continue; /* another server's */
                }
                void *q = cks_array_grow(held, &cap, nheld + 1, sizeof(*held), 1024);
                if (q == NULL) {
                    cks_fl_fail(j, CKS_ERR_NO_MEMORY, "out of memory");
                    break;
                }
                held = q;
                cks_fl_held_t *h = &held[nheld++];
                memcpy(h->c.key, o->key, o->key_len + 1);
                h->c.key_len    = o->key_len;
                h->c.source     = o->source_version;
                h->c.stripe     = sn;
                h->c.idx        = idx;
                h->c.len        = ch.len;
                h->c.crc64      = ch.crc64;
                h->arena_offset = ch.arena_offset;
            }
        }
    }
out_txn:
    cks_md_txn_abort(txn);
    if (j->status != CKS_OK) {
        goto out;
    }
    if (snprintf(data_path, sizeof(data_path), "%s/server-%u.chunks", p.tmp, id) >=
            (int)sizeof(data_path) ||
        snprintf(idx_path, sizeof(idx_path), "%s/server-%u.index", p.tmp, id) >=
            (int)sizeof(idx_path) ||
        snprintf(idx_tmp, sizeof(idx_tmp), "%s/server-%u.index.tmp", p.tmp, id) >=
            (int)sizeof(idx_tmp)) {
        cks_fl_fail(j, CKS_ERR_INVALID_PARAM, "flush directory name too long");
        goto out;
    }
    fd = open(data_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    f  = fopen(idx_tmp, "w");
    if (fd < 0 || f == NULL || cks_md_flush_index_head(f) != CKS_OK) {
        cks_fl_fail(j, CKS_ERR_IO, "cannot create %s: %s", fd < 0 ? data_path : idx_tmp,
                    strerror(errno));
        goto out;
    }
    const uint8_t *base = cks_arena_base(s->arena);
    uint64_t off = 0, written = 0;
    for (size_t i = 0; i < nheld; i++) {
        cks_fl_held_t *h = &held[i];
        if (fl->stop) {
            cks_fl_fail(j, CKS_ERR_SHUTTING_DOWN, "the server stopped during the flush");
            goto out;
        }
        if (i == nheld / 2 && cks_fault_fire("flush_die")) {
            cks_error("fault flush_die: killed halfway through writing %zu chunks", nheld);
            raise(SIGKILL);
        }
        cks_fl_pace(fl, h->c.len);
        if (cks_crc64(0, base + h->arena_offset, h->c.len) != h->c.crc64) {
            /* never write bytes known bad: the stripe's other chunks cover it */
            cks_error("flush: chunk %u of stripe %" PRIu64 " of '%s' (version %" PRIu64
                      ") fails its CRC in memory: not written",
                      h->c.idx, h->c.stripe, h->c.key, h->c.source);
            continue;
        }
        if (cks_fl_write_all(fd, base + h->arena_offset, h->c.len) != 0) {
            cks_fl_fail(j, CKS_ERR_IO, "writing %s: %s", data_path, strerror(errno));
            goto out;
        }
        h->c.offset = off;
        off += h->c.len;
        if (cks_md_flush_index_chunk(f, &h->c) != CKS_OK) {
            cks_fl_fail(j, CKS_ERR_IO, "writing %s", idx_tmp);
            goto out;
        }
        written++;
    }
    if (fsync(fd) != 0 || cks_md_flush_index_end(f, written) != CKS_OK || fflush(f) != 0 ||
        fsync(fileno(f)) != 0) {
        cks_fl_fail(j, CKS_ERR_IO, "flushing %s: %s", p.tmp, strerror(errno));
        goto out;
    }
    int rc = cks_fl_close_rename(j, f, idx_tmp, idx_path, p.tmp, "publishing");
    f      = NULL;
    if (rc != 0) {
        goto out;
    }
    j->bytes  = off;
    j->chunks = written;
out:
    if (f != NULL) {
        fclose(f);
    }
    if (fd >= 0) {
        close(fd);
    }
    free(held);
    free(mf.objs);
}
