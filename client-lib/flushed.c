/*
 * flushed.c - the durable tier in libckstore: cks_version_flush() (asks
 * one server, the version's coordinator first, to run the flush: it has
 * every server write its chunks, publishes, and answers), and what a flush
 * directory holds (cks_flushed_stat/list/progress: read from the
 * directory, no client). Restores from a flushed copy are in disk.c.
 *
 * Never: use a client or UCX for what the directory alone can say.
 */
#include "client_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- flush ------------------------------------------------------------------------------- */

/* How long a caller waits for the server that runs its flush: more than
 * that server's own calls to its peers (10 min), so that it answers first. */
#define CKS_FLUSH_TIMEOUT_MS 660000

static cks_op_t *cks_fl_op(cks_client_h c, unsigned type, const char *job, uint64_t version,
                           const char *dir, uint64_t nonce, cks_status_t *st_p)
{
    size_t used  = 0;
    cks_op_t *op = cks_op_new(CKS_OP_STATUS, type);
    if (op == NULL) {
        *st_p = CKS_ERR_NO_MEMORY;
        return NULL;
    }
    *st_p = cks_op_name(op, &used, job, CKS_JOB_MAX_LEN, &op->body.m_FLUSH_CHUNKS.job);
    if (*st_p != CKS_OK) {
        free(op);
        return NULL;
    }
    /* the caller's string: it waits for the op */
    op->body.m_FLUSH_CHUNKS.dir     = cks_wire_cstr(dir);
    op->body.m_FLUSH_CHUNKS.version = version;
    op->body.m_FLUSH_CHUNKS.nonce   = nonce;
    op->timeout_ms = CKS_MAX(c->timeout_ms, CKS_FLUSH_TIMEOUT_MS);
    return op;
}

/* The server did not take the request, or stopped running it: another may
 * (it is down, stopping, or missed the version). UCX reports a peer that
 * died as a timeout ("timed out waiting for the peer"): a TIMEOUT long
 * before the request's own deadline is one. */
static int cks_fl_ask_next(cks_status_t st, uint64_t took_ns)
{
    return st == CKS_ERR_CONN_LOST || st == CKS_ERR_UNREACHABLE || st == CKS_ERR_TRANSPORT ||
           st == CKS_ERR_SHUTTING_DOWN || st == CKS_ERR_NO_SUCH_VERSION ||
           st == CKS_ERR_NO_SUCH_JOB ||
           (st == CKS_ERR_TIMEOUT &&
            took_ns + 10000000000ull < (uint64_t)CKS_FLUSH_TIMEOUT_MS * 1000000ull);
}

/* FLUSH_VERSION to the version's coordinator candidates in order, then the
 * other servers: the first that takes it records the request in the flush
 * directory, has every server write its chunks, publishes, and answers.
 * Another server is asked only when one cannot take it (down, stopping, or
 * it lacks the version) - never after a timeout, where the flush may still
 * run: the caller's wait is one server's, at most CKS_FLUSH_TIMEOUT_MS. */
cks_status_t cks_version_flush(cks_client_h c, const char *job, uint64_t version,
                               const char *dir)
{
    uint16_t cand[CKS_COORD_CANDIDATES_MAX];
    cks_status_t status = CKS_ERR_UNREACHABLE, notfound = CKS_OK;
    char tried[CKS_MSG_MAX_LEN] = "";
    size_t ncand, used = 0, asked = 0;
    uint64_t took = 0;

    if (c == NULL || job == NULL || version == UINT64_MAX) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (dir != NULL && (dir[0] != '/' || strlen(dir) >= CKS_WIRE_MAX_PATH)) {
        cks_cl_set_errorf(c, CKS_ERR_INVALID_PARAM, "the flush directory must be an absolute path");
        return CKS_ERR_INVALID_PARAM;
    }
    if (c->map == NULL) {
        return CKS_ERR_UNSUPPORTED;
    }
    ncand = cks_place_coordinators(c->map, job, strlen(job), version, cand,
                                   CKS_COORD_CANDIDATES_MAX);
    for (size_t i = 0; i < ncand + c->nsrv; i++) {
        size_t pos = i < ncand ? cand[i] : i - ncand;
        int again  = 0;
        for (size_t k = 0; i >= ncand && k < ncand; k++) {
            again |= cand[k] == pos;
        }
        if (again || pos >= c->nsrv) {
            continue;
        }
        cks_op_t *op = cks_fl_op(c, CKS_MSG_FLUSH_VERSION, job, version, dir, 0, &status);
        if (op == NULL) {
            return status;
        }
        op->srv     = pos;
        op->target  = CKS_TARGET_FIXED;
        uint64_t t0 = cks_time_ns();
        status      = cks_cl_run(c, op);
        took        = cks_time_ns() - t0;
        asked++;
        if (!cks_fl_ask_next(status, took)) {
            break;
        }
        if (status == CKS_ERR_NO_SUCH_VERSION || status == CKS_ERR_NO_SUCH_JOB) {
            notfound = notfound == CKS_OK ? status : notfound;
        }
        if (used < sizeof(tried)) {
            used += (size_t)snprintf(tried + used, sizeof(tried) - used, "%s%s:%u %s",
                                     used ? ", " : "", c->srv[pos].addr, c->srv[pos].port,
                                     cks_status_string(status));
        }
        cks_info("flush of version %" PRIu64 " of '%s': server %s:%u did not take it (%s); "
                 "asking the next",
                 version, job, c->srv[pos].addr, c->srv[pos].port, cks_status_string(status));
    }
    if (!cks_fl_ask_next(status, took) && status == CKS_ERR_TIMEOUT) {
        cks_cl_set_errorf(c, status,
                          "flush of version %" PRIu64 " of '%s': no answer in %u s from the "
                          "server that runs it; it goes on there (the request is recorded): "
                          "ckstore versions JOB DIR shows its progress",
                          version, job, CKS_FLUSH_TIMEOUT_MS / 1000);
    } else if (cks_fl_ask_next(status, took) && notfound != CKS_OK) {
        status = notfound; /* the servers that answered lack it */
    } else if (cks_fl_ask_next(status, took)) {
        cks_cl_set_errorf(c, status,
                          "flush of version %" PRIu64 " of '%s': no server took it (%.700s); a "
                          "server that recorded the request before it stopped flushes the "
                          "version once it is back",
                          version, job, tried);
    }
    return status;
}

static cks_status_t cks_fl_latest(const char *jobdir, uint64_t *v_p)
{
    DIR *dd = opendir(jobdir);
    struct dirent *e;
    int found = 0;
    uint64_t best = 0, v;
    if (dd == NULL) {
        return CKS_ERR_NO_SUCH_JOB;
    }
    while ((e = readdir(dd)) != NULL) {
        if (cks_md_flush_version_parse(e->d_name, &v) && (!found || v > best)) {
            best  = v;
            found = 1;
        }
    }
    closedir(dd);
    if (!found) {
        return CKS_ERR_NO_SUCH_VERSION;
    }
    *v_p = best;
    return CKS_OK;
}

cks_status_t cks_cl_flushed_vdir(const char *dir, const char *job, uint64_t *version, char *out,
                                 size_t len)
{
    char jobdir[PATH_MAX - 128], name[32];
    cks_status_t status;
    if (dir == NULL || job == NULL ||
        cks_md_flush_job_dir(dir, job, strlen(job), jobdir, sizeof(jobdir)) != CKS_OK) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (*version == CKS_VERSION_LATEST && (status = cks_fl_latest(jobdir, version)) != CKS_OK) {
        return status;
    }
    cks_md_flush_version_name(*version, name, sizeof(name));
    if (snprintf(out, len, "%s/%s", jobdir, name) >= (int)len) {
        return CKS_ERR_INVALID_PARAM;
    }
    return CKS_OK;
}

void cks_cl_flushed_info(cks_version_info_t *info, const cks_md_version_t *v)
{
    memset(info, 0, sizeof(*info));
    info->version    = v->version;
    info->parent     = v->parent;
    info->state      = v->state;
    info->nranks     = v->nranks;
    info->created_ns = v->created_ns;
    info->sealed_ns  = v->sealed_ns;
    info->nobjects   = v->nobjects;
    info->bytes      = v->bytes;
    info->ec_k       = v->ec_k;
    info->ec_m       = v->ec_m;
    info->chunk_size = v->chunk_size;
    info->redundancy = v->redundancy;
    info->missing    = v->missing;
}

cks_status_t cks_flushed_stat(const char *dir, const char *job, uint64_t version,
                              cks_version_info_t *info_p)
{
    char vdir[PATH_MAX - 64], path[PATH_MAX], err[256];
    cks_md_flush_manifest_t mf;
    cks_status_t status;

    if (info_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_cl_flushed_vdir(dir, job, &version, vdir, sizeof(vdir));
    if (status != CKS_OK) {
        return status;
    }
    snprintf(path, sizeof(path), "%s/MANIFEST", vdir);
    status = cks_md_flush_manifest_read(path, &mf, err, sizeof(err));
    if (status != CKS_OK) {
        if (status != CKS_ERR_NO_SUCH_VERSION) {
            cks_warn("%s", err);
        }
        return status;
    }
    cks_cl_flushed_info(info_p, &mf.v);
    cks_md_flush_manifest_free(&mf);
    return CKS_OK;
}

static int cks_fl_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

cks_status_t cks_flushed_list(const char *dir, const char *job, uint64_t *out, size_t max,
                              size_t *count_p, int *more_p)
{
    char jobdir[PATH_MAX - 128];
    uint64_t *all = NULL, v;
    size_t n = 0, cap = 0;
    struct dirent *e;
    DIR *dd;

    if (dir == NULL || job == NULL || count_p == NULL || (out == NULL && max > 0) ||
        cks_md_flush_job_dir(dir, job, strlen(job), jobdir, sizeof(jobdir)) != CKS_OK) {
        return CKS_ERR_INVALID_PARAM;
    }
    dd = opendir(jobdir);
    if (dd != NULL) {
        while ((e = readdir(dd)) != NULL) {
            if (!cks_md_flush_version_parse(e->d_name, &v)) {
                continue;
            }
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 64;
                void *p   = realloc(all, nc * sizeof(*all));
                if (p == NULL) {
                    closedir(dd);
                    free(all);
                    return CKS_ERR_NO_MEMORY;
                }
                all = p;
                cap = nc;
            }
            all[n++] = v;
        }
        closedir(dd);
    }
    if (n > 0) {
        qsort(all, n, sizeof(*all), cks_fl_cmp_u64);
    }
    *count_p = CKS_MIN(n, max);
    if (*count_p > 0) {
        memcpy(out, all, *count_p * sizeof(*out));
    }
    if (more_p != NULL) {
        *more_p = n > max;
    }
    free(all);
    return CKS_OK;
}

/* Chunk bytes in a flush directory (the sizes of its server-<id>.chunks
 * files), how many there are, how many servers' indexes, and the newest
 * change to it (CLOCK_REALTIME ns). */
static void cks_fl_dir_files(const char *path, uint64_t *bytes_p, uint32_t *chunks_p,
                             uint32_t *indexes_p, uint64_t *touched_p)
{
    char f[PATH_MAX];
    struct stat st;
    struct dirent *e;
    unsigned id;
    int end;
    DIR *d;

    *bytes_p = *touched_p = 0;
    *chunks_p = *indexes_p = 0;
    if (stat(path, &st) == 0) {
        *touched_p = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    }
    if ((d = opendir(path)) == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (snprintf(f, sizeof(f), "%s/%s", path, e->d_name) >= (int)sizeof(f) ||
            stat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
            continue;
        }
        uint64_t t = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
        *touched_p = CKS_MAX(*touched_p, t);
        end        = 0;
        if (sscanf(e->d_name, "server-%u.chunks%n", &id, &end) == 1 && end > 0 &&
            e->d_name[end] == '\0') {
            *bytes_p += (uint64_t)st.st_size;
            (*chunks_p)++;
        }
        end = 0;
        if (sscanf(e->d_name, "server-%u.index%n", &id, &end) == 1 && end > 0 &&
            e->d_name[end] == '\0') {
            (*indexes_p)++;
        }
    }
    closedir(d);
}

cks_status_t cks_flushed_progress(const char *dir, const char *job, uint64_t version,
                                  cks_flush_progress_t *out)
{
    char jobdir[PATH_MAX - 128], name[32], prefix[64], path[PATH_MAX];
    struct dirent *e;
    struct stat st;
    uint64_t bytes, touched;
    uint32_t nchunks, nindexes;
    DIR *d;

    if (out == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    memset(out, 0, sizeof(*out));
    if (dir == NULL || job == NULL || version == CKS_VERSION_LATEST ||
        cks_md_flush_job_dir(dir, job, strlen(job), jobdir, sizeof(jobdir)) != CKS_OK) {
        return CKS_ERR_INVALID_PARAM;
    }
    cks_md_flush_version_name(version, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", jobdir, name);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        out->published = 1;
        cks_fl_dir_files(path, &out->published_bytes, &nchunks, &nindexes, &touched);
    }
    snprintf(prefix, sizeof(prefix), ".%s.tmp-", name);
    if ((d = opendir(jobdir)) != NULL) {
        while ((e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 ||
                snprintf(path, sizeof(path), "%s/%s", jobdir, e->d_name) >= (int)sizeof(path)) {
                continue;
            }
            cks_fl_dir_files(path, &bytes, &nchunks, &nindexes, &touched);
            out->unfinished++;
            if (out->unfinished == 1 || touched > out->touched_ns) {
                out->servers_started = nchunks;
                out->servers_done    = nindexes;
                out->bytes_written   = bytes;
                out->touched_ns      = touched;
            }
        }
        closedir(d);
    }
    return out->published || out->unfinished > 0 ? CKS_OK : CKS_ERR_NO_SUCH_VERSION;
}

