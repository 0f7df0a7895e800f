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
#include "server_int.h"

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

/* --flush-rate when not given: bytes/s that one server's flush writes */
#define CKS_FL_RATE_DEFAULT (64ull << 20)

/* a job the flush thread hands back by itself: a version its scan found due
 * by policy and not published (cks_fl_scan) */
#define CKS_FL_SCAN_DUE 0x10000u
/* a version this server coordinates committed: is it due by --flush-age?
 * (the flush thread reads the flush directory to tell) */
#define CKS_FL_AGE_CHECK 0x10001u
/* a client asked this server for a flush (FLUSH_VERSION): write its record,
 * DIR/<job>/.<version>.req-<server id>, before anything else of it */
#define CKS_FL_RECORD 0x10002u
/* the request is met (published) or cannot be (no such version): remove
 * its record */
#define CKS_FL_UNRECORD 0x10003u
/* a job the scan hands back: a request of this server's recorded and not
 * published (a stop interrupted it, or it failed and is tried again) */
#define CKS_FL_SCAN_REQ 0x10004u

typedef struct cks_fl_job {
    struct cks_fl_job *next;
    unsigned type; /* CKS_MSG_FLUSH_CHUNKS, CKS_MSG_FLUSH_PUBLISH or a CKS_FL_ job */
    int due;       /* CKS_FL_AGE_CHECK: the answer */
    cks_tp_conn_h conn;
    uint64_t req_id;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    uint64_t nonce;
    char dir[PATH_MAX];
    cks_sv_read_t read;
    int reading;
    uint64_t start_ns;
    uint64_t bytes, chunks;
    cks_status_t status;
    char why[CKS_MSG_MAX_LEN];
    /* a flush this server started itself (--flush-every): called in place
     * of a reply, on the progress thread; conn is NULL */
    void (*done)(cks_server_h s, struct cks_fl_job *j);
    void *ctx;
} cks_fl_job_t;

typedef struct cks_fl_pol cks_fl_pol_t;
typedef struct cks_fl_auto cks_fl_auto_t;

/* A policy flush this server started: in flight (a), or failed and waiting
 * until next_ns to be tried again. Progress thread only. */
struct cks_fl_pol {
    cks_fl_pol_t *next;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    cks_fl_auto_t *a;
    unsigned tries;
    uint64_t next_ns, last_ns;
};

/* A client waiting for a flush this server runs (FLUSH_VERSION). */
typedef struct cks_fl_waiter {
    struct cks_fl_waiter *next;
    cks_tp_conn_h conn; /* referenced */
    uint64_t req_id;
} cks_fl_waiter_t;

struct cks_fl_auto {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version, nonce;
    unsigned pending, ok, failed;
    unsigned exists;   /* writers that found the version published already */
    int publishing;
    int requested;     /* a client asked for it: its record is removed once
                          the version is published (or cannot be) */
    cks_fl_waiter_t *waiters;
    cks_status_t status; /* why it failed: the publisher's, else this server's
                            writer's, else a peer's */
    int status_rank;     /* 3 publisher, 2 this server's writer, 1 a peer */
    char why[CKS_MSG_MAX_LEN];
    cks_fl_pol_t *pol; /* its entry; NULL once the flush thread stopped */
};

struct cks_sv_flush {
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC */
    cks_fl_job_t *head, *tail, *done_head, *done_tail;
    volatile int stop;
    cks_server_h s;
    /* the policy's scan (flush thread): when it runs next (cks_time_ns();
     * 0: never, no policy) */
    uint64_t scan_ns;
    /* policy flushes this server started, in flight or failed and waiting
     * to be tried again (progress thread only) */
    cks_fl_pol_t *pol;
    /* pacing of the chunk writes (flush thread only): a token bucket of
     * `rate` bytes/s (UINT64_MAX: none) holding at most an eighth of a
     * second of them */
    uint64_t rate;
    double tokens;
    uint64_t tokens_ns;
};

static void cks_fl_fail(cks_fl_job_t *j, cks_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void cks_fl_fail(cks_fl_job_t *j, cks_status_t status, const char *fmt, ...)
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

/* room for a file name after a directory of the flush */
#define CKS_FL_DIR_MAX (PATH_MAX - 512)

typedef struct {
    char jobdir[CKS_FL_DIR_MAX];
    char tmp[CKS_FL_DIR_MAX];
    char pub[CKS_FL_DIR_MAX];
} cks_fl_paths_t;

static int cks_fl_paths(cks_fl_job_t *j, cks_fl_paths_t *p)
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

static int cks_fl_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        return -1;
    }
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Remove a flat directory (files only), best effort. */
static void cks_fl_rmdir_flat(const char *path)
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
static void cks_fl_remove_stale(const cks_fl_job_t *j, const cks_fl_paths_t *p)
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
static void cks_fl_record(struct cks_sv_flush *fl, cks_fl_job_t *j)
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

static void cks_fl_unrecord(struct cks_sv_flush *fl, cks_fl_job_t *j)
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
static size_t cks_fl_job_of_dir(const char *name, char *job, size_t len)
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

/* ---- what this server holds of a version ----------------------------------------------- */

typedef struct {
    cks_md_version_t rec;
    cks_md_object_t *objs;
    size_t nobjs;
} cks_fl_manifest_t;

/* The version's record and manifest (every object it resolves to). */
static cks_status_t cks_fl_manifest(cks_server_h s, cks_fl_job_t *j, cks_md_txn_h txn,
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
        if (mf->nobjs + PAGE > cap) {
            size_t nc = cap ? cap * 2 : 4 * PAGE;
            void *p   = realloc(mf->objs, nc * sizeof(*mf->objs));
            if (p == NULL) {
                cks_fl_fail(j, CKS_ERR_NO_MEMORY, "out of memory listing the manifest");
                return CKS_ERR_NO_MEMORY;
            }
            mf->objs = p;
            cap      = nc;
        }
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
 * of a second of bytes: writing B bytes takes at least B / rate - 1/8 s. Sleeps in slices of at most 100 ms so that a stop is
 * seen. */
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

static void cks_fl_chunks(struct cks_sv_flush *fl, cks_fl_job_t *j)
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
    struct stat st;

    if (cks_fl_paths(j, &p) != 0) {
        return;
    }
    if (stat(p.pub, &st) == 0) {
        cks_fl_fail(j, CKS_ERR_VERSION_EXISTS, "version %" PRIu64 " is already flushed to %s",
                    j->version, p.pub);
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
                if (nheld == cap) {
                    size_t nc = cap ? cap * 2 : 1024;
                    void *q   = realloc(held, nc * sizeof(*held));
                    if (q == NULL) {
                        cks_fl_fail(j, CKS_ERR_NO_MEMORY, "out of memory");
                        break;
                    }
                    held = q;
                    cap  = nc;
                }
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
    if (fclose(f) != 0) {
        f = NULL;
        cks_fl_fail(j, CKS_ERR_IO, "closing %s: %s", idx_tmp, strerror(errno));
        goto out;
    }
    f = NULL;
    if (rename(idx_tmp, idx_path) != 0 || cks_fl_fsync_dir(p.tmp) != 0) {
        cks_fl_fail(j, CKS_ERR_IO, "publishing %s: %s", idx_path, strerror(errno));
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
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            void *q   = realloc(vs, nc * sizeof(*vs));
            if (q == NULL) {
                goto out;
            }
            vs  = q;
            cap = nc;
        }
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
                if (nrefs == caprefs) {
                    size_t nc = caprefs ? caprefs * 2 : 16;
                    void *q   = realloc(refs, nc * sizeof(*refs));
                    if (q == NULL) {
                        cks_md_flush_manifest_free(&mf);
                        goto out;
                    }
                    refs    = q;
                    caprefs = nc;
                }
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

static void cks_fl_publish(struct cks_sv_flush *fl, cks_fl_job_t *j)
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

    if (cks_fl_paths(j, &p) != 0) {
        return;
    }
    if (stat(p.pub, &st) == 0) {
        cks_fl_fail(j, CKS_ERR_VERSION_EXISTS, "version %" PRIu64 " is already flushed to %s",
                    j->version, p.pub);
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
        if (nids == capids) {
            size_t nc = capids ? capids * 2 : 16;
            void *q   = realloc(ids, nc * sizeof(*ids));
            if (q == NULL) {
                cks_fl_fail(j, CKS_ERR_NO_MEMORY, "out of memory");
                break;
            }
            ids    = q;
            capids = nc;
        }
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
    if (fclose(f) != 0) {
        f = NULL;
        cks_fl_fail(j, CKS_ERR_IO, "closing %s: %s", tmp, strerror(errno));
        goto out;
    }
    f = NULL;
    if (rename(tmp, path) != 0 || cks_fl_fsync_dir(p.tmp) != 0) {
        cks_fl_fail(j, CKS_ERR_IO, "writing %s: %s", path, strerror(errno));
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

/* ---- the policy's scan (flush thread) ------------------------------------------------------ */

/* the first scan after the flush thread starts, then one every ten seconds */
#define CKS_FL_SCAN_FIRST_NS 1000000000ull
#define CKS_FL_SCAN_EVERY_NS 10000000000ull
/* an unfinished flush's directory that nothing touched this long is abandoned
 * (a flush's calls time out after 10 minutes) */
#define CKS_FL_STALE_NS (15ull * 60 * 1000000000ull)

static int cks_fl_policy_on(cks_server_h s)
{
    return s->map != NULL && s->p.flush_dir != NULL &&
           (s->p.flush_every > 0 || s->p.flush_age_s > 0);
}

/* Does the flush thread run from the start and scan? With a flush
 * directory: a client's request recorded there and not published (a stop
 * interrupted it), a policy's flush due, retention's removals that a stop
 * interrupted. */
static int cks_fl_scan_on(cks_server_h s)
{
    return s->map != NULL && s->p.flush_dir != NULL;
}

/* The newest version published in jobdir; 0 when there is none. */
static int cks_fl_newest_published(const char *jobdir, uint64_t *v_p)
{
    DIR *d = opendir(jobdir);
    struct dirent *e;
    uint64_t v;
    int has = 0;
    if (d == NULL) {
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        if (cks_md_flush_version_parse(e->d_name, &v) && (!has || v > *v_p)) {
            *v_p = v;
            has  = 1;
        }
    }
    closedir(d);
    return has;
}

static uint64_t cks_fl_touched_ns(const char *path);

static uint64_t cks_fl_now_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* --flush-age: is the job's newest flushed version older than the age? Its
 * age is that of its checkpoint (the seal time in its manifest); a flush of
 * the job under way (a temporary directory touched since) counts as a
 * version flushed when it was last touched, so that flushes do not pile up
 * behind a slow one. Due when nothing is flushed nor being flushed. */
static int cks_fl_age_due(cks_server_h s, const char *jobdir)
{
    char path[PATH_MAX], name[32], err[256];
    cks_md_flush_manifest_t mf;
    struct dirent *e;
    uint64_t newest = 0, t = 0;
    int seen = 0;
    DIR *d;

    if (cks_fl_newest_published(jobdir, &newest)) {
        seen = 1;
        cks_md_flush_version_name(newest, name, sizeof(name));
        snprintf(path, sizeof(path), "%s/%s/MANIFEST", jobdir, name);
        if (cks_md_flush_manifest_read(path, &mf, err, sizeof(err)) == CKS_OK) {
            t = mf.v.sealed_ns ? mf.v.sealed_ns : mf.v.created_ns;
            cks_md_flush_manifest_free(&mf);
        } else {
            snprintf(path, sizeof(path), "%s/%s", jobdir, name);
            t = cks_fl_touched_ns(path);
        }
    }
    if ((d = opendir(jobdir)) != NULL) {
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp-") != NULL &&
                snprintf(path, sizeof(path), "%s/%s", jobdir, e->d_name) < (int)sizeof(path)) {
                seen = 1;
                t    = CKS_MAX(t, cks_fl_touched_ns(path));
            }
        }
        closedir(d);
    }
    uint64_t now = cks_fl_now_real_ns();
    return !seen || (now > t && now - t >= (uint64_t)s->p.flush_age_s * 1000000000ull);
}

/* Hand a version found due back to the progress thread (lock held). */
static void cks_fl_hand_back(struct cks_sv_flush *fl, cks_fl_job_t *j)
{
    j->next = NULL;
    if (fl->done_tail != NULL) {
        fl->done_tail->next = j;
    } else {
        fl->done_head = j;
    }
    fl->done_tail = j;
}

static void cks_fl_found(struct cks_sv_flush *fl, unsigned type, const char *job,
                         size_t job_len, uint64_t version)
{
    cks_fl_job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        return; /* the next scan finds it again */
    }
    j->type = type;
    memcpy(j->job, job, job_len);
    j->job_len = (uint32_t)job_len;
    j->version = version;
    pthread_mutex_lock(&fl->lock);
    cks_fl_hand_back(fl, j);
    pthread_mutex_unlock(&fl->lock);
}

/* Versions of one job that this server holds, are due by the policy and are
 * newer than the newest one published: every committed version whose number
 * is a multiple of --flush-every; with --flush-age, the newest committed
 * version when the newest flushed one is older than the age. */
static void cks_fl_scan_job(struct cks_sv_flush *fl, cks_md_txn_h txn, const char *job,
                            size_t job_len)
{
    enum { PAGE = 64 };
    cks_server_h s = fl->s;
    char jobdir[CKS_FL_DIR_MAX];
    cks_md_version_t vs[PAGE];
    uint64_t newest = 0, after = 0, last = 0;
    size_t n        = 0;
    int more = 1, first = 1, has, any = 0, last_listed = 0;

    if (!cks_fl_policy_on(s) ||
        cks_md_flush_job_dir(s->p.flush_dir, job, job_len, jobdir, sizeof(jobdir)) != CKS_OK) {
        return;
    }
    has = cks_fl_newest_published(jobdir, &newest);
    while (more && !fl->stop) {
        if (cks_md_version_list(txn, job, job_len, first ? NULL : &after, vs, PAGE, &n,
                                &more) != CKS_OK ||
            n == 0) {
            break;
        }
        first = 0;
        after = vs[n - 1].version;
        for (size_t i = 0; i < n; i++) {
            const cks_md_version_t *v = &vs[i];
            int restorable = (v->state == CKS_VSTATE_SEALED || v->state == CKS_VSTATE_PROTECTED ||
                              v->state == CKS_VSTATE_DEGRADED) &&
                             v->ec_k > 0;
            if (!restorable || (has && v->version <= newest)) {
                continue;
            }
            any         = 1;
            last        = v->version;
            last_listed = s->p.flush_every > 0 && v->version % s->p.flush_every == 0;
            if (last_listed) {
                cks_fl_found(fl, CKS_FL_SCAN_DUE, job, job_len, v->version);
            }
        }
    }
    if (any && !last_listed && s->p.flush_age_s > 0 && cks_fl_age_due(s, jobdir)) {
        cks_fl_found(fl, CKS_FL_SCAN_DUE, job, job_len, last);
    }
}

/* Newest change (CLOCK_REALTIME ns) to a flat directory or a file in it. */
static uint64_t cks_fl_touched_ns(const char *path)
{
    char f[PATH_MAX];
    struct stat st;
    struct dirent *e;
    uint64_t newest = 0;
    DIR *d;
    if (stat(path, &st) == 0) {
        newest = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    }
    if ((d = opendir(path)) == NULL) {
        return newest;
    }
    while ((e = readdir(d)) != NULL) {
        if (snprintf(f, sizeof(f), "%s/%s", path, e->d_name) < (int)sizeof(f) &&
            stat(f, &st) == 0) {
            newest = CKS_MAX(newest, (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
                                         (uint64_t)st.st_mtim.tv_nsec);
        }
    }
    closedir(d);
    return newest;
}

/* Remove what unfinished flushes left in one job's directory: a temporary
 * directory (".<version>.tmp-<nonce>") of a version that is published since,
 * or one that nothing touched for CKS_FL_STALE_NS; the same for a version
 * being removed by retention (".<version>.del-<nonce>"). Never a published
 * directory. */
static void cks_fl_clean_job_dir(const char *jobdir)
{
    char path[PATH_MAX], pub[PATH_MAX], name[21];
    struct dirent *e;
    struct timespec now;
    struct stat st;
    uint64_t v;
    DIR *d = opendir(jobdir);
    if (d == NULL) {
        return;
    }
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.' || strlen(e->d_name) < 26 ||
            (strncmp(e->d_name + 21, ".tmp-", 5) != 0 &&
             strncmp(e->d_name + 21, ".del-", 5) != 0)) {
            continue;
        }
        memcpy(name, e->d_name + 1, 20);
        name[20] = '\0';
        if (!cks_md_flush_version_parse(name, &v) ||
            snprintf(path, sizeof(path), "%s/%s", jobdir, e->d_name) >= (int)sizeof(path) ||
            snprintf(pub, sizeof(pub), "%s/%s", jobdir, name) >= (int)sizeof(pub)) {
            continue;
        }
        int published = e->d_name[22] == 't' && stat(pub, &st) == 0;
        uint64_t touched = cks_fl_touched_ns(path);
        if (published || e->d_name[22] == 'd' || touched + CKS_FL_STALE_NS < now_ns) {
            cks_info("flush: removing %s, left by a flush that did not finish", path);
            cks_fl_rmdir_flat(path);
        }
    }
    closedir(d);
}

/* a request recorded this long ago and still not published is given up */
#define CKS_FL_REQ_EXPIRE_NS (24ull * 3600 * 1000000000ull)

/* This server's requests recorded in one job's directory (`dname`, its
 * name): one whose version is published since is removed; one older than a
 * day is given up (removed, logged); the others are handed to the progress
 * thread, which flushes them again (cks_fl_policy_start: not while one is in
 * flight, and after a failure only once its retry is due). */
static void cks_fl_scan_requests(struct cks_sv_flush *fl, const char *jobdir, const char *dname)
{
    char suffix[16], name[21], path[PATH_MAX], pub[PATH_MAX], job[CKS_JOB_MAX_LEN + 1];
    size_t job_len = 0;
    struct dirent *e;
    struct stat st;
    uint64_t v;
    DIR *d;

    snprintf(suffix, sizeof(suffix), ".req-%u",
             (unsigned)cks_cluster_server(fl->s->map, fl->s->self)->id);
    if ((d = opendir(jobdir)) == NULL) {
        return;
    }
    uint64_t now = cks_fl_now_real_ns();
    while ((e = readdir(d)) != NULL && !fl->stop) {
        if (e->d_name[0] != '.' || strlen(e->d_name) != 21 + strlen(suffix) ||
            strcmp(e->d_name + 21, suffix) != 0) {
            continue;
        }
        memcpy(name, e->d_name + 1, 20);
        name[20] = '\0';
        if (!cks_md_flush_version_parse(name, &v) ||
            snprintf(path, sizeof(path), "%s/%s", jobdir, e->d_name) >= (int)sizeof(path) ||
            snprintf(pub, sizeof(pub), "%s/%s", jobdir, name) >= (int)sizeof(pub)) {
            continue;
        }
        if (stat(pub, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (unlink(path) == 0) {
                cks_fl_fsync_dir(jobdir);
                cks_info("flush: the request for version %" PRIu64 " in %s is met (published)",
                         v, jobdir);
            }
            continue;
        }
        if (stat(path, &st) == 0 &&
            (uint64_t)st.st_mtim.tv_sec * 1000000000ull + CKS_FL_REQ_EXPIRE_NS < now) {
            if (unlink(path) == 0) {
                cks_fl_fsync_dir(jobdir);
                cks_warn("flush: version %" PRIu64 " in %s was asked for a day ago and could "
                         "not be flushed since: the request is given up",
                         v, jobdir);
            }
            continue;
        }
        if (job_len == 0 && (job_len = cks_fl_job_of_dir(dname, job, sizeof(job))) == 0) {
            break;
        }
        cks_fl_found(fl, CKS_FL_SCAN_REQ, job, job_len, v);
    }
    closedir(d);
}

/* The policy's scan: which versions this server holds are due and not
 * published (handed to the progress thread, which starts those it
 * coordinates), and what unfinished flushes left in the flush directory. */
static void cks_fl_scan(struct cks_sv_flush *fl)
{
    enum { PAGE = 64 };
    cks_server_h s = fl->s;
    char(*names)[CKS_JOB_MAX_LEN + 1] = malloc(PAGE * sizeof(*names));
    char after[CKS_JOB_MAX_LEN + 1], path[PATH_MAX];
    size_t after_len = 0, n = 0;
    int more = 1, first = 1;
    cks_md_txn_h txn = NULL;
    struct dirent *e;
    struct stat st;
    DIR *d;

    if (names == NULL) {
        return;
    }
    if (cks_md_txn_begin(s->md, 0, &txn) == CKS_OK) {
        while (more && !fl->stop) {
            if (cks_md_job_list(txn, first ? NULL : after, after_len, names, PAGE, &n,
                                &more) != CKS_OK ||
                n == 0) {
                break;
            }
            first     = 0;
            after_len = strlen(names[n - 1]);
            memcpy(after, names[n - 1], after_len + 1);
            for (size_t i = 0; i < n && !fl->stop; i++) {
                cks_fl_scan_job(fl, txn, names[i], strlen(names[i]));
            }
        }
        cks_md_txn_abort(txn);
    }
    free(names);
    /* every job's directory, also those of jobs this server does not hold */
    if ((d = opendir(s->p.flush_dir)) != NULL) {
        while ((e = readdir(d)) != NULL && !fl->stop) {
            if (e->d_name[0] != '.' &&
                snprintf(path, sizeof(path), "%s/%s", s->p.flush_dir, e->d_name) <
                    (int)sizeof(path) &&
                stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                cks_fl_scan_requests(fl, path, e->d_name);
                cks_fl_clean_job_dir(path);
            }
        }
        closedir(d);
    }
    pthread_mutex_lock(&fl->lock);
    if (fl->done_head != NULL) {
        cks_tp_worker_signal(s->tp);
    }
    pthread_mutex_unlock(&fl->lock);
}

/* ---- the flush thread -------------------------------------------------------------------- */

static void *cks_fl_thread(void *arg)
{
    struct cks_sv_flush *fl = arg;
    pthread_mutex_lock(&fl->lock);
    for (;;) {
        while (fl->head == NULL && !fl->stop &&
               (fl->scan_ns == 0 || cks_time_ns() < fl->scan_ns)) {
            if (fl->scan_ns == 0) {
                pthread_cond_wait(&fl->cond, &fl->lock);
            } else {
                struct timespec ts = {(time_t)(fl->scan_ns / 1000000000ull),
                                      (long)(fl->scan_ns % 1000000000ull)};
                pthread_cond_timedwait(&fl->cond, &fl->lock, &ts);
            }
        }
        if (fl->head == NULL && fl->stop) {
            break;
        }
        if (!fl->stop && fl->scan_ns != 0 && cks_time_ns() >= fl->scan_ns) {
            fl->scan_ns = cks_time_ns() + CKS_FL_SCAN_EVERY_NS;
            pthread_mutex_unlock(&fl->lock);
            cks_fl_scan(fl);
            pthread_mutex_lock(&fl->lock);
            continue;
        }
        cks_fl_job_t *j = fl->head;
        fl->head        = j->next;
        if (fl->head == NULL) {
            fl->tail = NULL;
        }
        pthread_mutex_unlock(&fl->lock);
        if (fl->stop) {
            cks_fl_fail(j, CKS_ERR_SHUTTING_DOWN, "the server is shutting down");
        } else if (j->type == CKS_FL_AGE_CHECK) {
            cks_fl_paths_t p;
            j->due = cks_fl_paths(j, &p) == 0 && cks_fl_age_due(fl->s, p.jobdir);
        } else if (j->type == CKS_MSG_FLUSH_CHUNKS) {
            cks_fl_chunks(fl, j);
        } else if (j->type == CKS_FL_RECORD) {
            cks_fl_record(fl, j);
        } else if (j->type == CKS_FL_UNRECORD) {
            cks_fl_unrecord(fl, j);
        } else {
            cks_fl_publish(fl, j);
        }
        pthread_mutex_lock(&fl->lock);
        cks_fl_hand_back(fl, j);
        cks_tp_worker_signal(fl->s->tp);
    }
    pthread_mutex_unlock(&fl->lock);
    return NULL;
}

static void cks_fl_scan_due(cks_server_h s, const cks_fl_job_t *j);
static void cks_fl_policy_start(cks_server_h s, const char *job, size_t job_len,
                                uint64_t version, const char *why, int requested,
                                cks_fl_waiter_t *w);

static void cks_fl_finish(cks_server_h s, cks_fl_job_t *j)
{
    uint64_t ms = (cks_time_ns() - j->start_ns) / 1000000u;
    if (j->type == CKS_FL_SCAN_DUE) {
        cks_fl_scan_due(s, j);
        free(j);
        return;
    }
    if (j->type == CKS_FL_AGE_CHECK) {
        if (j->due && s->flush != NULL && !s->flush->stop) {
            cks_fl_policy_start(s, j->job, j->job_len, j->version,
                                "the newest flushed version is older than --flush-age", 0,
                                NULL);
        }
        free(j);
        return;
    }
    if (j->type == CKS_FL_SCAN_REQ) {
        if (s->flush != NULL && !s->flush->stop) {
            cks_fl_policy_start(s, j->job, j->job_len, j->version,
                                "asked for and not finished", 1, NULL);
        }
        free(j);
        return;
    }
    if (j->type == CKS_FL_RECORD || j->type == CKS_FL_UNRECORD) {
        if (j->status != CKS_OK && j->status != CKS_ERR_SHUTTING_DOWN) {
            cks_warn("flush of version %" PRIu64 " of '%s': %s (it goes on, unrecorded: a stop "
                     "now would not resume it)",
                     j->version, j->job, j->why);
        }
        free(j);
        return;
    }
    if (j->reading) {
        cks_sv_read_end(s, &j->read);
    }
    if (j->status == CKS_OK && j->type == CKS_MSG_FLUSH_CHUNKS) {
        cks_info("flush: version %" PRIu64 " of '%s': %" PRIu64 " chunks, %" PRIu64
                 " bytes written in %" PRIu64 " ms",
                 j->version, j->job, j->chunks, j->bytes, ms);
    } else if (j->status != CKS_OK) {
        cks_warn("flush of version %" PRIu64 " of '%s' failed: %s", j->version, j->job,
                 j->why);
    }
    if (j->done != NULL) {
        j->done(s, j);
    } else {
        cks_sv_reply_status(j->conn, j->req_id, j->status, j->status == CKS_OK ? NULL : "%s",
                            j->why);
        cks_tp_conn_put(j->conn);
    }
    free(j);
}

static cks_status_t cks_fl_start(cks_server_h s);
static void cks_fl_answer_all(cks_fl_auto_t *a, cks_status_t status, const char *why);

void cks_sv_flush_progress(cks_server_h s)
{
    struct cks_sv_flush *fl = s->flush;
    cks_fl_job_t *j;
    if (fl == NULL) {
        /* with a policy, the flush thread runs from the start: its scan
         * resumes flushes that a stop interrupted */
        if (cks_fl_scan_on(s) && !s->stop) {
            cks_fl_start(s);
        }
        return;
    }
    pthread_mutex_lock(&fl->lock);
    j             = fl->done_head;
    fl->done_head = fl->done_tail = NULL;
    pthread_mutex_unlock(&fl->lock);
    while (j != NULL) {
        cks_fl_job_t *next = j->next;
        cks_fl_finish(s, j);
        j = next;
    }
}

static cks_status_t cks_fl_start(cks_server_h s)
{
    struct cks_sv_flush *fl = calloc(1, sizeof(*fl));
    if (fl == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    fl->s         = s;
    fl->rate      = s->p.flush_rate ? s->p.flush_rate : CKS_FL_RATE_DEFAULT;
    fl->tokens_ns = cks_time_ns();
    fl->scan_ns   = cks_fl_scan_on(s) ? cks_time_ns() + CKS_FL_SCAN_FIRST_NS : 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* cks_time_ns()'s clock */
    pthread_mutex_init(&fl->lock, NULL);
    pthread_cond_init(&fl->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&fl->thread, NULL, cks_fl_thread, fl) != 0) {
        pthread_cond_destroy(&fl->cond);
        pthread_mutex_destroy(&fl->lock);
        free(fl);
        return CKS_ERR_INTERNAL;
    }
    fl->started = 1;
    s->flush    = fl;
    return CKS_OK;
}

void cks_sv_flush_stop(cks_server_h s)
{
    struct cks_sv_flush *fl = s->flush;
    if (fl == NULL) {
        return;
    }
    pthread_mutex_lock(&fl->lock);
    fl->stop = 1;
    pthread_cond_broadcast(&fl->cond);
    pthread_mutex_unlock(&fl->lock);
    pthread_join(fl->thread, NULL); /* queued jobs end as SHUTTING_DOWN */
    cks_sv_flush_progress(s);
    while (fl->pol != NULL) {
        cks_fl_pol_t *e = fl->pol;
        fl->pol         = e->next;
        if (e->a != NULL) {
            e->a->pol = NULL; /* its peers' answers may still come */
            /* its clients, while their connections are up */
            cks_fl_answer_all(e->a, CKS_ERR_SHUTTING_DOWN,
                              e->a->requested
                                  ? "the server is stopping; the request is recorded: it "
                                    "flushes the version once it is back"
                                  : "the server is stopping");
        }
        free(e);
    }
    pthread_cond_destroy(&fl->cond);
    pthread_mutex_destroy(&fl->lock);
    free(fl);
    s->flush = NULL;
}

#define CKS_FL_CALL_TIMEOUT_MS 600000

/* To the flush thread (progress thread). */
static void cks_fl_queue(cks_server_h s, cks_fl_job_t *j)
{
    j->start_ns = cks_time_ns();
    if (j->type == CKS_MSG_FLUSH_CHUNKS) {
        /* arena space freed from now on is not reused until the flush ends */
        cks_sv_read_begin(s, &j->read);
        j->reading = 1;
    }
    pthread_mutex_lock(&s->flush->lock);
    if (s->flush->tail != NULL) {
        s->flush->tail->next = j;
    } else {
        s->flush->head = j;
    }
    s->flush->tail = j;
    pthread_cond_signal(&s->flush->cond);
    pthread_mutex_unlock(&s->flush->lock);
}

static void cks_fl_policy_start(cks_server_h s, const char *job, size_t job_len,
                                uint64_t version, const char *why, int requested,
                                cks_fl_waiter_t *w);

void cks_sv_flush_request(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, unsigned type,
                          const cks_msg_flush_t *m)
{
    const char *root = s->p.flush_dir;
    cks_fl_job_t *j;
    cks_status_t status;

    if (s->map == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_UNSUPPORTED,
                            "flush needs a cluster (erasure-coded versions)");
        return;
    }
    status = cks_sv_check_names(&m->job, NULL);
    if (status != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "bad job name");
        return;
    }
    if (root == NULL) {
        /* a client never chooses where a server writes: only the operator */
        cks_sv_reply_status(conn, req_id, CKS_ERR_UNSUPPORTED,
                            "flushing is off: this server was started without --flush-dir");
        return;
    }
    if (m->dir.len > 0 &&
        (m->dir.len >= PATH_MAX || memchr(m->dir.ptr, '\0', m->dir.len) != NULL ||
         m->dir.ptr[0] != '/')) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                            "the flush directory must be an absolute path");
        return;
    }
    if (m->dir.len > 0 &&
        (m->dir.len != strlen(root) || memcmp(m->dir.ptr, root, m->dir.len) != 0)) {
        /* a server with a flush directory writes there only */
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                            "this server flushes to its --flush-dir %s only", root);
        return;
    }
    if (s->flush == NULL && (status = cks_fl_start(s)) != CKS_OK) {
        cks_sv_reply_status(conn, req_id, status, "cannot start the flush thread");
        return;
    }
    if (type == CKS_MSG_FLUSH_VERSION) {
        /* a client asks this server to run the whole flush: the request is
         * recorded first (the flush thread takes jobs in order), then the
         * flush starts, or the client joins the one in flight */
        cks_fl_waiter_t *w = calloc(1, sizeof(*w));
        j                  = calloc(1, sizeof(*j));
        if (w == NULL || j == NULL) {
            free(w);
            free(j);
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, NULL);
            return;
        }
        j->type = CKS_FL_RECORD;
        memcpy(j->job, m->job.ptr, m->job.len);
        j->job_len = m->job.len;
        j->version = m->version;
        snprintf(j->dir, sizeof(j->dir), "%s", root);
        cks_fl_queue(s, j);
        w->conn = conn;
        cks_tp_conn_get(conn);
        w->req_id = req_id;
        cks_fl_policy_start(s, m->job.ptr, m->job.len, m->version, "asked for by a client", 1,
                            w);
        return;
    }
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, NULL);
        return;
    }
    j->type = type;
    j->conn = conn;
    cks_tp_conn_get(conn);
    j->req_id = req_id;
    memcpy(j->job, m->job.ptr, m->job.len);
    j->job_len = m->job.len;
    j->version = m->version;
    j->nonce   = m->nonce;
    if (m->dir.len > 0) {
        memcpy(j->dir, m->dir.ptr, m->dir.len);
    } else {
        snprintf(j->dir, sizeof(j->dir), "%s", root);
    }
    cks_fl_queue(s, j);
}

/* ---- the flush policy: every Nth version, started by its coordinator ----------------------- */

/* a policy flush that failed is tried again after 10 s, doubling up to 10 min */
#define CKS_FL_RETRY_NS     10000000000ull
#define CKS_FL_RETRY_MAX_NS (600ull * 1000000000ull)
/* an entry of a failed flush not tried for this long is forgotten */
#define CKS_FL_FORGET_NS    (3600ull * 1000000000ull)

static cks_fl_pol_t *cks_fl_pol_find(struct cks_sv_flush *fl, const char *job, size_t job_len,
                                     uint64_t version)
{
    for (cks_fl_pol_t *e = fl->pol; e != NULL; e = e->next) {
        if (e->version == version && e->job_len == job_len &&
            memcmp(e->job, job, job_len) == 0) {
            return e;
        }
    }
    return NULL;
}

/* Answer one waiting client, and free it. */
static void cks_fl_answer(cks_fl_waiter_t *w, cks_status_t status, const char *why)
{
    cks_sv_reply_status(w->conn, w->req_id, status, why != NULL && why[0] ? "%s" : NULL, why);
    cks_tp_conn_put(w->conn);
    free(w);
}

/* Answer every client waiting for a, with `status` and a's reason. */
static void cks_fl_answer_all(cks_fl_auto_t *a, cks_status_t status, const char *why)
{
    while (a->waiters != NULL) {
        cks_fl_waiter_t *w = a->waiters;
        a->waiters         = w->next;
        cks_fl_answer(w, status, why);
    }
}

/* A failure after which no flush of the version can publish it: a client's
 * request for it is dropped. */
static int cks_fl_hopeless(cks_status_t st)
{
    return st == CKS_ERR_NO_SUCH_VERSION || st == CKS_ERR_NO_SUCH_JOB ||
           st == CKS_ERR_NOT_RESTORABLE || st == CKS_ERR_UNSUPPORTED ||
           st == CKS_ERR_INVALID_PARAM;
}

/* Why a failed (the first reason of the most telling party). */
static void cks_fl_auto_why(cks_fl_auto_t *a, int rank, cks_status_t status, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));
static void cks_fl_auto_why(cks_fl_auto_t *a, int rank, cks_status_t status, const char *fmt,
                            ...)
{
    va_list ap;
    if (status == CKS_OK || status == CKS_ERR_VERSION_EXISTS || rank <= a->status_rank) {
        return;
    }
    a->status      = status;
    a->status_rank = rank;
    va_start(ap, fmt);
    vsnprintf(a->why, sizeof(a->why), fmt, ap);
    va_end(ap);
}

/* A flush this server ran ended: published (or already there), or failed.
 * Its waiting clients are answered; a client's request is removed once the
 * version is published or cannot be, else kept for a retry. */
static void cks_fl_auto_end(cks_server_h s, cks_fl_auto_t *a, int published)
{
    cks_fl_pol_t *e = a->pol;
    int hopeless    = !published && a->status_rank >= 2 && cks_fl_hopeless(a->status);
    uint64_t wait   = 0;
    char text[2 * CKS_MSG_MAX_LEN];

    if (!published && a->status == CKS_OK) {
        cks_fl_auto_why(a, 3, CKS_ERR_DATA_LOST, "no server wrote its chunks");
    }
    if (e != NULL && s->flush != NULL) {
        e->a = NULL;
        if (published || hopeless) {
            for (cks_fl_pol_t **pp = &s->flush->pol; *pp != NULL; pp = &(*pp)->next) {
                if (*pp == e) {
                    *pp = e->next;
                    break;
                }
            }
            free(e);
        } else {
            wait       = CKS_MIN(CKS_FL_RETRY_NS << CKS_MIN(e->tries - 1, 6u), CKS_FL_RETRY_MAX_NS);
            e->next_ns = cks_time_ns() + wait;
            cks_warn("flush%s: version %" PRIu64 " of '%s' not flushed (try %u): %s; "
                     "tried again in %" PRIu64 " s",
                     a->requested ? "" : " policy", a->version, a->job, e->tries, a->why,
                     (uint64_t)(wait / 1000000000ull));
        }
    }
    if (published) {
        int already = a->ok == 0 && a->exists > 0;
        snprintf(text, sizeof(text), "version %" PRIu64 " of '%s' is flushed already",
                 a->version, a->job);
        cks_fl_answer_all(a, already ? CKS_ERR_VERSION_EXISTS : CKS_OK, already ? text : NULL);
    } else if (a->requested && !hopeless) {
        if (wait > 0) {
            snprintf(text, sizeof(text),
                     "%.150s; the request is recorded: this server flushes the version again "
                     "in %" PRIu64 " s (and once it is back if it stops)",
                     a->why, (uint64_t)(wait / 1000000000ull));
        } else {
            snprintf(text, sizeof(text),
                     "%.150s; the request is recorded: this server flushes the version again "
                     "once it is back",
                     a->why);
        }
        cks_fl_answer_all(a, a->status, text);
    } else {
        cks_fl_answer_all(a, a->status, a->why);
    }
    if (a->requested && (published || hopeless) && s->flush != NULL && !s->flush->stop) {
        cks_fl_job_t *j = calloc(1, sizeof(*j));
        if (j != NULL) { /* else the scan removes it once it sees it published */
            j->type = CKS_FL_UNRECORD;
            memcpy(j->job, a->job, a->job_len);
            j->job_len = a->job_len;
            j->version = a->version;
            snprintf(j->dir, sizeof(j->dir), "%s", s->p.flush_dir);
            cks_fl_queue(s, j);
        }
    }
    free(a);
}

static void cks_fl_auto_publish(cks_server_h s, cks_fl_auto_t *a);

static void cks_fl_auto_one(cks_server_h s, cks_fl_auto_t *a, cks_status_t status)
{
    if (status == CKS_OK) {
        a->ok++;
    } else {
        a->failed++;
        a->exists += status == CKS_ERR_VERSION_EXISTS;
    }
    if (--a->pending == 0) {
        cks_fl_auto_publish(s, a);
    }
}

static void cks_fl_auto_local_done(cks_server_h s, cks_fl_job_t *j)
{
    cks_fl_auto_t *a = j->ctx;
    if (a->publishing) {
        if (j->status == CKS_OK) {
            cks_info("flush: version %" PRIu64 " of '%s' flushed to %s (chunks of %u of %u "
                     "servers)",
                     a->version, a->job, s->p.flush_dir, a->ok, a->ok + a->failed);
        }
        cks_fl_auto_why(a, 3, j->status, "%s", j->why);
        cks_fl_auto_end(s, a, j->status == CKS_OK || j->status == CKS_ERR_VERSION_EXISTS);
        return;
    }
    cks_fl_auto_why(a, 2, j->status, "%s", j->why);
    cks_fl_auto_one(s, a, j->status);
}

typedef struct {
    cks_server_h s;
    cks_fl_auto_t *a;
    unsigned id; /* the peer's server id */
} cks_fl_call_t;

static void cks_fl_auto_peer_done(void *arg, cks_status_t status, const char *msg)
{
    cks_fl_call_t *c = arg;
    if (status != CKS_OK && status != CKS_ERR_VERSION_EXISTS) {
        cks_warn("flush: server %u did not write its chunks of version %" PRIu64
                 " of '%s': %s%s%s",
                 c->id, c->a->version, c->a->job, cks_status_string(status), msg ? ": " : "",
                 msg ? msg : "");
        cks_fl_auto_why(c->a, 1, status, "server %u did not write its chunks: %s%s%.600s", c->id,
                        cks_status_string(status), msg ? ": " : "", msg ? msg : "");
    }
    cks_fl_auto_one(c->s, c->a, status);
    free(c);
}

static cks_fl_job_t *cks_fl_auto_job(cks_server_h s, cks_fl_auto_t *a, unsigned type)
{
    cks_fl_job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        return NULL;
    }
    j->type = type;
    memcpy(j->job, a->job, a->job_len);
    j->job_len = a->job_len;
    j->version = a->version;
    j->nonce   = a->nonce;
    snprintf(j->dir, sizeof(j->dir), "%s", s->p.flush_dir);
    j->done = cks_fl_auto_local_done;
    j->ctx  = a;
    return j;
}

static void cks_fl_auto_publish(cks_server_h s, cks_fl_auto_t *a)
{
    if (s->flush == NULL || s->flush->stop) {
        /* shutting down: the next start's scan resumes it */
        cks_fl_auto_why(a, 3, CKS_ERR_SHUTTING_DOWN, "the server is stopping");
        cks_fl_auto_end(s, a, 0);
        return;
    }
    if (a->ok == 0 && a->exists > 0) {
        cks_fl_auto_end(s, a, 1); /* published before this flush began */
        return;
    }
    cks_fl_job_t *j = a->ok > 0 ? cks_fl_auto_job(s, a, CKS_MSG_FLUSH_PUBLISH) : NULL;
    if (j == NULL) {
        cks_warn("flush: version %" PRIu64 " of '%s' not flushed: no server wrote its chunks",
                 a->version, a->job);
        cks_fl_auto_end(s, a, 0);
        return;
    }
    a->publishing = 1;
    cks_fl_queue(s, j);
}

/* Flush (job, version) to --flush-dir: every server writes its chunks (a
 * server-to-server FLUSH_CHUNKS; this one on its flush thread), then this
 * one publishes. Not when a flush of it is in flight here (a client's
 * request joins it), nor, unless a client asks (w), while a failed one
 * waits for its retry. `requested`: a client asked for it (its record is
 * removed once it is published). w: a waiting client, answered when it
 * ends (this function owns it). */
static void cks_fl_policy_start(cks_server_h s, const char *job, size_t job_len,
                                uint64_t version, const char *why, int requested,
                                cks_fl_waiter_t *w)
{
    cks_fl_auto_t *a = NULL;
    cks_fl_job_t *j;
    cks_fl_pol_t *e;
    uint64_t now = cks_time_ns();
    size_t n     = cks_cluster_nservers(s->map);

    if (s->flush == NULL && (s->stop || cks_fl_start(s) != CKS_OK)) {
        if (w != NULL) { /* stopping (or no thread): the next start's scan resumes it */
            cks_fl_answer(w, CKS_ERR_SHUTTING_DOWN, "the server is stopping");
        }
        return;
    }
    e = cks_fl_pol_find(s->flush, job, job_len, version);
    if (e != NULL && e->a != NULL) {
        e->a->requested |= requested;
        if (w != NULL) {
            w->next         = e->a->waiters;
            e->a->waiters   = w;
        }
        return;
    }
    if (e != NULL && now < e->next_ns && w == NULL) {
        return;
    }
    if ((e == NULL && (e = calloc(1, sizeof(*e))) == NULL) ||
        (a = calloc(1, sizeof(*a))) == NULL) {
        if (e != NULL && e->tries == 0) {
            free(e);
        }
        cks_warn("flush: cannot flush version %" PRIu64 ": out of memory", version);
        if (w != NULL) {
            cks_fl_answer(w, CKS_ERR_NO_MEMORY, "server out of memory");
        }
        return;
    }
    if (e->tries == 0) {
        memcpy(e->job, job, job_len);
        e->job_len    = (uint32_t)job_len;
        e->version    = version;
        e->next       = s->flush->pol;
        s->flush->pol = e;
    }
    e->tries++;
    e->last_ns   = now;
    e->a         = a;
    a->pol       = e;
    a->requested = requested;
    a->waiters   = w;
    if (w != NULL) {
        w->next = NULL;
    }
    memcpy(a->job, job, job_len);
    a->job_len = (uint32_t)job_len;
    a->version = version;
    a->nonce   = cks_tp_random_id();
    a->pending = 1; /* held until every request is out */
    cks_msg_flush_t m = {{a->job, a->job_len}, version, cks_wire_cstr(NULL), a->nonce};
    for (size_t pos = 0; pos < n; pos++) {
        if (pos == s->self) {
            if ((j = cks_fl_auto_job(s, a, CKS_MSG_FLUSH_CHUNKS)) != NULL) {
                a->pending++;
                cks_fl_queue(s, j);
            } else {
                a->failed++;
            }
            continue;
        }
        /* the peer writes to its own --flush-dir (the same storage) */
        cks_tp_conn_h conn = cks_sv_peer(s, pos);
        cks_fl_call_t *c   = malloc(sizeof(*c));
        unsigned id        = cks_cluster_server(s->map, pos)->id;
        if (conn == NULL || c == NULL) {
            free(c);
            a->failed++;
            cks_fl_auto_why(a, 1, CKS_ERR_UNREACHABLE, "server %u cannot be reached", id);
            continue;
        }
        *c = (cks_fl_call_t){s, a, id};
        a->pending++;
        if (cks_tp_call(conn, CKS_MSG_FLUSH_CHUNKS, 0, &m, NULL, 0, NULL,
                        CKS_FL_CALL_TIMEOUT_MS, cks_fl_auto_peer_done, c) != CKS_INPROGRESS) {
            free(c);
            a->pending--;
            a->failed++;
            cks_fl_auto_why(a, 1, CKS_ERR_UNREACHABLE, "server %u cannot be reached", id);
        }
    }
    cks_info("flush%s: flushing version %" PRIu64 " of '%.*s' to %s (%s%s)",
             requested ? "" : " policy", version, (int)job_len, job, s->p.flush_dir, why,
             e->tries > 1 ? ", tried again" : "");
    if (--a->pending == 0) { /* the hold: nothing went out */
        cks_fl_auto_publish(s, a);
    }
}

void cks_sv_flush_committed(cks_server_h s, const char *job, size_t job_len, uint64_t version)
{
    cks_fl_job_t *j;
    if (!cks_fl_policy_on(s)) {
        return;
    }
    if (s->p.flush_every > 0 && version % s->p.flush_every == 0) {
        cks_fl_policy_start(s, job, job_len, version, "every Nth version", 0, NULL);
        return;
    }
    if (s->p.flush_age_s == 0 || s->stop ||
        (s->flush == NULL && cks_fl_start(s) != CKS_OK) ||
        (j = calloc(1, sizeof(*j))) == NULL) {
        return; /* (no thread or memory: the scan finds it due) */
    }
    /* --flush-age: the flush thread reads the directory, then
     * cks_fl_finish() starts the flush when it is due */
    j->type = CKS_FL_AGE_CHECK;
    memcpy(j->job, job, job_len);
    j->job_len = (uint32_t)job_len;
    j->version = version;
    snprintf(j->dir, sizeof(j->dir), "%s", s->p.flush_dir);
    cks_fl_queue(s, j);
}

/* The scan found (job, version) due and not published: this server flushes
 * it when it is the version's first coordinator candidate (the server that
 * coordinates it unless it was down), or when a policy flush of it that this
 * server started failed and its retry is due. */
static void cks_fl_scan_due(cks_server_h s, const cks_fl_job_t *j)
{
    struct cks_sv_flush *fl = s->flush;
    size_t rank             = SIZE_MAX;
    uint64_t now            = cks_time_ns();

    if (fl == NULL || fl->stop) {
        return;
    }
    /* forget failed flushes not tried for an hour (dropped from memory since) */
    for (cks_fl_pol_t **pp = &fl->pol; *pp != NULL;) {
        cks_fl_pol_t *e = *pp;
        if (e->a == NULL && e->last_ns + CKS_FL_FORGET_NS < now) {
            *pp = e->next;
            free(e);
        } else {
            pp = &e->next;
        }
    }
    if (cks_fl_pol_find(fl, j->job, j->job_len, j->version) == NULL &&
        (!cks_sv_coord_candidate(s, j->job, j->job_len, j->version, &rank) || rank != 0)) {
        return;
    }
    cks_fl_policy_start(s, j->job, j->job_len, j->version, "due and not published", 0, NULL);
}
