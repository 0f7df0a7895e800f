/*
 * disk.c - restores from a flushed copy on disk (cks_restore_open_ex()
 * with a flush_dir): the restore handle's `disk`.
 *
 * DESIGN: a restore handle with `disk` set reads the files of a published
 * version directory (metadata/flushfmt.c) with pread(2): a get's stripes on
 * the calling thread and up to CKS_FL_READERS - 1 threads of its own, each
 * taking the next stripe (joined before the get returns; the object's
 * CRC-64 then on the calling thread): the manifest gives each object's size,
 * CRC-64 and source version, the servers' indexes where each chunk lies and
 * its CRC-64. Each chunk is checked before use; a stripe with a bad or
 * missing data chunk is decoded from any k good chunks (ISA-L), and a whole
 * object is checked against its CRC-64 at the end. Nothing here touches UCX
 * or the progress thread.
 * Never: returns CKS_OK with bytes that failed a check.
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

/* ---- reading a flushed copy --------------------------------------------------------------- */

#define CKS_FL_AHEAD 16 /* stripes whose data chunks are read ahead at once */
#define CKS_FL_READERS 8 /* threads that read the stripes of one get */

typedef struct {
    uint64_t offset, len, crc64;
    int fd;
} cks_cl_dchunk_t;

struct cks_cl_disk {
    char vdir[PATH_MAX - 64];
    cks_md_flush_manifest_t mf;
    cks_hmap_t *objs;        /* key -> index in mf.objs, + 1 */
    cks_hmap_t *chunks;      /* cks_md_flush_hkey() -> cks_cl_dchunk_t */
    cks_cl_dchunk_t *all;
    int *fds;
    size_t nfds;
    cks_ec_h ec;
    size_t last; /* the object the last get read (its index + 1; atomic) */
};

void cks_cl_disk_close(struct cks_cl_disk *d)
{
    if (d == NULL) {
        return;
    }
    for (size_t i = 0; i < d->nfds; i++) {
        if (d->fds[i] >= 0) {
            close(d->fds[i]);
        }
    }
    free(d->fds);
    free(d->all);
    cks_hmap_destroy(d->objs);
    cks_hmap_destroy(d->chunks);
    cks_md_flush_manifest_free(&d->mf);
    if (d->ec != NULL) {
        cks_ec_destroy(d->ec);
    }
    free(d);
}

/* The newest version flushed for job in dir (published directories only). */
cks_status_t cks_cl_disk_open(cks_client_h c, const char *dir, const char *job,
                              uint64_t version, cks_restore_h *r_p)
{
    char path[PATH_MAX], err[256];
    struct cks_cl_disk *d;
    cks_restore_h r;
    cks_status_t status;
    size_t total = 0;
    uint8_t hk[CKS_MD_FLUSH_HKEY_MAX];

    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_cl_flushed_vdir(dir, job, &version, d->vdir, sizeof(d->vdir));
    if (status != CKS_OK) {
        free(d);
        return status;
    }
    snprintf(path, sizeof(path), "%s/MANIFEST", d->vdir);
    status = cks_md_flush_manifest_read(path, &d->mf, err, sizeof(err));
    if (status != CKS_OK) {
        if (status == CKS_ERR_NO_SUCH_VERSION) {
            snprintf(err, sizeof(err), "version %" PRIu64 " of job '%s' is not flushed to %s",
                     version, job, dir);
        }
        cks_cl_set_errorf(c, status, "%s", err);
        free(d);
        return status;
    }
    if (d->mf.job_len != strlen(job) || memcmp(d->mf.job, job, d->mf.job_len) != 0 ||
        d->mf.v.version != version) {
        snprintf(err, sizeof(err), "%.200s holds another job or version", path);
        cks_cl_set_errorf(c, CKS_ERR_IO, "%s", err);
        cks_cl_disk_close(d);
        return CKS_ERR_IO;
    }
    if (d->mf.v.ec_k > CKS_EC_MAX_K || d->mf.v.ec_m > CKS_EC_MAX_M ||
        d->mf.v.chunk_size > CKS_EC_MAX_LEN) {
        cks_cl_disk_close(d);
        return CKS_ERR_UNSUPPORTED;
    }
    status = cks_ec_create(d->mf.v.ec_k, d->mf.v.ec_m, &d->ec);
    if (status == CKS_OK) {
        status = cks_hmap_create(&d->objs);
    }
    if (status == CKS_OK) {
        status = cks_hmap_create(&d->chunks);
    }
    d->fds = calloc(d->mf.nservers ? d->mf.nservers : 1, sizeof(*d->fds));
    if (d->fds == NULL) {
        status = CKS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; status == CKS_OK && i < d->mf.nobjs; i++) {
        status = cks_hmap_put(d->objs, d->mf.objs[i].key, d->mf.objs[i].key_len,
                              (void *)(uintptr_t)(i + 1));
    }
    /* every server's index; a file that cannot be read leaves its chunks out
     * (the stripes' other chunks may still cover them) */
    for (size_t s = 0; status == CKS_OK && s < d->mf.nservers; s++) {
        cks_md_flush_chunk_t *cs = NULL;
        size_t ncs               = 0;
        d->fds[d->nfds++]        = -1;
        snprintf(path, sizeof(path), "%s/server-%u.index", d->vdir, (unsigned)d->mf.servers[s]);
        if (cks_md_flush_index_read(path, &cs, &ncs, err, sizeof(err)) != CKS_OK) {
            cks_warn("flushed copy: %s: its chunks are left out", err);
            continue;
        }
        snprintf(path, sizeof(path), "%s/server-%u.chunks", d->vdir, (unsigned)d->mf.servers[s]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            cks_warn("flushed copy: cannot open %s: %s: its chunks are left out", path,
                     strerror(errno));
            free(cs);
            continue;
        }
        d->fds[d->nfds - 1] = fd;
        void *p             = realloc(d->all, (total + ncs + 1) * sizeof(*d->all));
        if (p == NULL) {
            free(cs);
            status = CKS_ERR_NO_MEMORY;
            break;
        }
        d->all = p;
        for (size_t i = 0; i < ncs; i++) {
            d->all[total + i] = (cks_cl_dchunk_t){cs[i].offset, cs[i].len, cs[i].crc64, fd};
        }
        /* pointers into d->all are taken once it stops moving: store indexes */
        for (size_t i = 0; status == CKS_OK && i < ncs; i++) {
            size_t n = cks_md_flush_hkey(cs[i].key, cs[i].key_len, cs[i].source, cs[i].stripe,
                                         cs[i].idx, hk);
            status   = cks_hmap_put(d->chunks, hk, n, (void *)(uintptr_t)(total + i + 1));
        }
        total += ncs;
        free(cs);
    }
    if (status == CKS_OK && (r = calloc(1, sizeof(*r))) == NULL) {
        status = CKS_ERR_NO_MEMORY;
    }
    if (status != CKS_OK) {
        cks_cl_disk_close(d);
        return status;
    }
    r->client = c;
    snprintf(r->job, sizeof(r->job), "%s", job);
    cks_cl_flushed_info(&r->info, &d->mf.v);
    r->disk = d;
    cks_info("restoring version %" PRIu64 " of job '%s' from its flushed copy in %s", version,
             job, d->vdir);
    *r_p = r;
    return CKS_OK;
}

static const cks_md_object_t *cks_fl_obj(struct cks_cl_disk *d, const char *key)
{
    void *v = key != NULL ? cks_hmap_get(d->objs, key, strlen(key)) : NULL;
    return v != NULL ? &d->mf.objs[(uintptr_t)v - 1] : NULL;
}

static void cks_fl_obj_info(const cks_md_object_t *o, cks_object_info_t *info)
{
    memset(info, 0, sizeof(*info));
    memcpy(info->key, o->key, o->key_len + 1);
    info->tags.kind      = o->kind;
    info->tags.layer     = o->layer;
    info->tags.expert    = o->expert;
    info->tags.rank      = o->rank;
    info->size           = o->size;
    info->crc64          = o->crc64;
    info->source_version = o->source_version;
}

cks_status_t cks_cl_disk_stat(cks_restore_h r, const char *key, cks_object_info_t *info_p)
{
    const cks_md_object_t *o = cks_fl_obj(r->disk, key);
    if (o == NULL) {
        return CKS_ERR_NO_SUCH_KEY;
    }
    cks_fl_obj_info(o, info_p);
    return CKS_OK;
}

cks_status_t cks_cl_disk_list(cks_restore_h r, const char *after_key, cks_object_info_t *out,
                              size_t max, size_t *count_p, int *more_p)
{
    struct cks_cl_disk *d = r->disk;
    size_t n = 0, i = 0;
    if ((out == NULL && max > 0) || count_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    /* objects are in key byte order (as the servers list them) */
    if (after_key != NULL && after_key[0] != '\0') {
        size_t al = strlen(after_key);
        while (i < d->mf.nobjs) {
            const cks_md_object_t *o = &d->mf.objs[i];
            int c = memcmp(o->key, after_key, CKS_MIN(o->key_len, al));
            if (c > 0 || (c == 0 && o->key_len > al)) {
                break;
            }
            i++;
        }
    }
    for (; i < d->mf.nobjs && n < max; i++) {
        cks_fl_obj_info(&d->mf.objs[i], &out[n++]);
    }
    *count_p = n;
    if (more_p != NULL) {
        *more_p = i < d->mf.nobjs;
    }
    return CKS_OK;
}

/* A whole object's CRC-64 is checked without a second pass over its bytes:
 * each chunk read whole is checked against its CRC-64 from the index, and
 * the object's is put together from those (and from the CRC of the bytes of
 * a partial or decoded chunk) with cks_crc64_combine(). */

/* Read chunk (o, stripe, idx) whole into buf and check it: CKS_OK (*crc_p:
 * its CRC-64, checked), or why not (written to why). */
static cks_status_t cks_fl_chunk_read(struct cks_cl_disk *d, const cks_md_object_t *o,
                                      uint64_t stripe, unsigned idx, uint8_t *buf,
                                      uint64_t *crc_p, char *why, size_t why_len)
{
    uint8_t hk[CKS_MD_FLUSH_HKEY_MAX];
    size_t n  = cks_md_flush_hkey(o->key, o->key_len, o->source_version, stripe, idx, hk);
    void *v   = cks_hmap_get(d->chunks, hk, n);
    uint64_t cs = d->mf.v.chunk_size;
    if (v == NULL) {
        snprintf(why, why_len, "chunk %u: not on disk", idx);
        return CKS_ERR_DATA_LOST;
    }
    const cks_cl_dchunk_t *ch = &d->all[(uintptr_t)v - 1];
    if (ch->len != cs) {
        snprintf(why, why_len, "chunk %u: %" PRIu64 " bytes, not %" PRIu64, idx, ch->len, cs);
        return CKS_ERR_DATA_LOST;
    }
    uint64_t done = 0;
    while (done < cs) {
        ssize_t got = pread(ch->fd, buf + done, cs - done, (off_t)(ch->offset + done));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            snprintf(why, why_len, "chunk %u: %s", idx,
                     got < 0 ? strerror(errno) : "file cut short");
            return CKS_ERR_IO;
        }
        done += (uint64_t)got;
    }
    if (cks_crc64(0, buf, cs) != ch->crc64) {
        snprintf(why, why_len, "chunk %u: CRC mismatch", idx);
        return CKS_ERR_CRC_MISMATCH;
    }
    *crc_p = ch->crc64;
    return CKS_OK;
}

/* Object bytes [off, off + len) of stripe `s` into dst; with crc_p, their
 * CRC-64 (from the checked CRCs of the chunks read whole in place; computed
 * over the bytes of the others). */
static cks_status_t cks_fl_stripe(cks_client_h c, struct cks_cl_disk *d,
                                  const cks_md_object_t *o, uint64_t s, uint64_t off,
                                  uint64_t len, uint8_t *dst, uint8_t *scratch, uint64_t *crc_p)
{
    uint64_t crcs[CKS_EC_MAX_K + CKS_EC_MAX_M];
    unsigned k = d->mf.v.ec_k, w = d->mf.v.ec_k + d->mf.v.ec_m;
    uint64_t cs = d->mf.v.chunk_size, sbase = s * k * cs;
    uint8_t *chunks[CKS_EC_MAX_K + CKS_EC_MAX_M] = {0};
    uint8_t present[CKS_EC_MAX_K + CKS_EC_MAX_M] = {0};
    uint8_t tried[CKS_EC_MAX_K + CKS_EC_MAX_M]   = {0};
    char why[CKS_EC_MAX_K + CKS_EC_MAX_M][64];
    unsigned good = 0, need_missing = 0;
    cks_status_t worst = CKS_ERR_DATA_LOST;

    uint8_t direct[CKS_EC_MAX_K + CKS_EC_MAX_M] = {0};
    for (unsigned i = 0; i < w; i++) {
        uint64_t lo = sbase + i * cs;
        /* a data chunk wholly inside the range is read (or decoded) in place */
        direct[i] = i < k && lo >= off && lo + cs <= off + len;
        chunks[i] = direct[i] ? dst + (lo - off) : scratch + (uint64_t)i * cs;
        why[i][0] = '\0';
    }
    /* the data chunks the range needs */
    for (unsigned i = 0; i < k; i++) {
        uint64_t lo = sbase + i * cs, hi = lo + cs;
        if (hi <= off || lo >= off + len) {
            continue;
        }
        tried[i]        = 1;
        cks_status_t st =
            cks_fl_chunk_read(d, o, s, i, chunks[i], &crcs[i], why[i], sizeof(why[i]));
        if (st == CKS_OK) {
            present[i] = 1;
            good++;
        } else {
            need_missing++;
            worst = st == CKS_ERR_CRC_MISMATCH ? st : worst;
            cks_warn("flushed copy: object '%s' (version %" PRIu64 "), stripe %" PRIu64
                     ": %s",
                     o->key, o->source_version, s, why[i]);
        }
    }
    if (need_missing > 0) {
        /* decode: any k good chunks of the stripe */
        for (unsigned i = 0; i < w && good < k; i++) {
            if (tried[i]) {
                continue;
            }
            tried[i] = 1;
            if (cks_fl_chunk_read(d, o, s, i, chunks[i], &crcs[i], why[i], sizeof(why[i])) ==
                CKS_OK) {
                present[i] = 1;
                good++;
            }
        }
        if (good < k) {
            char text[CKS_MSG_MAX_LEN];
            size_t n = (size_t)snprintf(text, sizeof(text),
                                        "object '%s' (version %" PRIu64 "), stripe %" PRIu64
                                        " of its flushed copy: %u chunks intact, %u needed",
                                        o->key, o->source_version, s, good, k);
            for (unsigned i = 0; i < w && n < sizeof(text); i++) {
                if (why[i][0] != '\0') {
                    n += (size_t)snprintf(text + n, sizeof(text) - n, "; %s", why[i]);
                }
            }
            cks_cl_set_errorf(c, worst, "%s", text);
            return worst;
        }
        uint8_t *bufs[CKS_EC_MAX_K + CKS_EC_MAX_M];
        for (unsigned i = 0; i < w; i++) {
            bufs[i] = present[i] || i < k ? chunks[i] : NULL;
        }
        cks_status_t st = cks_ec_decode(d->ec, cs, bufs, present);
        if (st != CKS_OK) {
            return st;
        }
    }
    uint64_t crc = 0;
    for (unsigned i = 0; i < k; i++) {
        uint64_t lo = sbase + i * cs, hi = lo + cs;
        uint64_t a = CKS_MAX(lo, off), b = CKS_MIN(hi, off + len);
        if (a >= b) {
            continue;
        }
        if (!direct[i]) {
            memcpy(dst + (a - off), chunks[i] + (a - lo), b - a);
        }
        if (crc_p != NULL) {
            /* a chunk read whole in place has its checked CRC; a part of
             * one, or a decoded one, is CRC'd here (in cache) */
            uint64_t part = direct[i] && present[i] && !need_missing
                                ? crcs[i]
                                : cks_crc64(0, dst + (a - off), b - a);
            crc = cks_crc64_combine(crc, part, b - a);
        }
    }
    if (crc_p != NULL) {
        *crc_p = crc;
    }
    return CKS_OK;
}

/* Ask the kernel to read ahead the data chunks of stripes [s0, s1) (the
 * reads that follow then find them in the page cache). */
static void cks_fl_readahead(struct cks_cl_disk *d, const cks_md_object_t *o, uint64_t s0,
                             uint64_t s1)
{
    uint8_t hk[CKS_MD_FLUSH_HKEY_MAX];
    for (uint64_t s = s0; s < s1; s++) {
        for (unsigned i = 0; i < d->mf.v.ec_k; i++) {
            size_t n = cks_md_flush_hkey(o->key, o->key_len, o->source_version, s, i, hk);
            void *v  = cks_hmap_get(d->chunks, hk, n);
            if (v != NULL) {
                const cks_cl_dchunk_t *ch = &d->all[(uintptr_t)v - 1];
                posix_fadvise(ch->fd, (off_t)ch->offset, (off_t)ch->len, POSIX_FADV_WILLNEED);
            }
        }
    }
}

/* The stripes of one get, read by up to CKS_FL_READERS threads: each takes
 * the next stripe not taken yet, reads (and if need be decodes) it into the
 * caller's buffer with a scratch of its own; the first error stops them. */
typedef struct {
    cks_client_h c;
    struct cks_cl_disk *d;
    const cks_md_object_t *o;
    uint64_t off, len, s0, s_end;
    uint8_t *dst;
    pthread_mutex_t lock;
    uint64_t next;       /* the next stripe to take */
    cks_status_t status; /* the first error */
    uint64_t *crcs;      /* whole-object gets: each stripe's CRC-64 (else NULL) */
} cks_fl_reading_t;

static void *cks_fl_reader(void *arg)
{
    cks_fl_reading_t *g = arg;
    struct cks_cl_disk *d = g->d;
    uint64_t cs = d->mf.v.chunk_size, k = d->mf.v.ec_k;
    uint8_t *scratch = malloc((size_t)((d->mf.v.ec_k + d->mf.v.ec_m) * cs));

    for (;;) {
        pthread_mutex_lock(&g->lock);
        if (scratch == NULL && g->status == CKS_OK) {
            g->status = CKS_ERR_NO_MEMORY;
        }
        uint64_t s = g->next;
        int stop   = g->status != CKS_OK || s >= g->s_end;
        g->next += !stop;
        pthread_mutex_unlock(&g->lock);
        if (stop) {
            break;
        }
        if ((s - g->s0) % CKS_FL_AHEAD == 0) {
            /* the next stripes' data chunks, CKS_FL_AHEAD at a time */
            cks_fl_readahead(d, g->o, s, CKS_MIN(s + CKS_FL_AHEAD, g->s_end));
        }
        uint64_t lo = CKS_MAX(g->off, s * k * cs), hi = CKS_MIN(g->off + g->len, (s + 1) * k * cs);
        cks_status_t st = cks_fl_stripe(g->c, d, g->o, s, lo, hi - lo, g->dst + (lo - g->off),
                                        scratch, g->crcs ? &g->crcs[s - g->s0] : NULL);
        if (st != CKS_OK) {
            pthread_mutex_lock(&g->lock);
            g->status = g->status == CKS_OK ? st : g->status;
            pthread_mutex_unlock(&g->lock);
        }
    }
    free(scratch);
    return NULL;
}

cks_status_t cks_cl_disk_get(cks_restore_h r, const cks_get_params_t *p, uint64_t *length_p,
                             cks_done_cb_t cb, void *arg)
{
    struct cks_cl_disk *d = r->disk;
    const cks_md_object_t *o;
    uint64_t off = 0, len, cs = d->mf.v.chunk_size, k = d->mf.v.ec_k;
    cks_status_t status = CKS_OK;

    if ((p->field_mask & CKS_GET_FIELD_MEM_TYPE) && p->mem_type != CKS_MEM_HOST) {
        return CKS_ERR_UNSUPPORTED; /* a flushed copy is read into host memory */
    }
    o = cks_fl_obj(d, p->key);
    if (o == NULL) {
        return CKS_ERR_NO_SUCH_KEY;
    }
    /* gets in manifest order (a whole restore): the kernel reads the next
     * object's first stripes while this one is read, so that no get starts
     * on a cold disk */
    size_t idx = (size_t)(o - d->mf.objs);
    if (__atomic_exchange_n(&d->last, idx + 1, __ATOMIC_RELAXED) == idx && idx + 1 < d->mf.nobjs) {
        const cks_md_object_t *nx = &d->mf.objs[idx + 1];
        cks_fl_readahead(d, nx, 0,
                         CKS_MIN((uint64_t)CKS_FL_AHEAD,
                                 cks_ec_stripe_count(nx->size, k, cs)));
    }
    if (p->field_mask & CKS_GET_FIELD_RANGE) {
        if (p->offset > o->size || p->length > o->size - p->offset ||
            p->length > p->buffer_size) {
            return CKS_ERR_OUT_OF_RANGE;
        }
        off = p->offset;
        len = p->length;
    } else {
        if (p->buffer_size < o->size) {
            return CKS_ERR_INVALID_PARAM;
        }
        len = o->size;
    }
    int whole          = !(p->field_mask & CKS_GET_FIELD_RANGE);
    uint64_t crc       = 0;
    if (len > 0) {
        cks_fl_reading_t g = {r->client, d, o, off, len, off / (k * cs),
                              (off + len - 1) / (k * cs) + 1, (uint8_t *)p->buffer,
                              PTHREAD_MUTEX_INITIALIZER, off / (k * cs), CKS_OK, NULL};
        pthread_t th[CKS_FL_READERS - 1];
        uint64_t nstripes = g.s_end - g.s0;
        unsigned extra    = 0;
        if (whole && (g.crcs = malloc(nstripes * sizeof(*g.crcs))) == NULL) {
            return CKS_ERR_NO_MEMORY;
        }
        /* this thread reads too; the others only when there is more than
         * one stripe */
        while (extra + 1 < CKS_FL_READERS && extra + 1 < nstripes &&
               pthread_create(&th[extra], NULL, cks_fl_reader, &g) == 0) {
            extra++;
        }
        cks_fl_reader(&g);
        for (unsigned t = 0; t < extra; t++) {
            pthread_join(th[t], NULL);
        }
        pthread_mutex_destroy(&g.lock);
        status = g.status;
        /* the object's CRC-64, stripe after stripe */
        for (uint64_t s = g.s0; whole && status == CKS_OK && s < g.s_end; s++) {
            uint64_t lo = CKS_MAX(off, s * k * cs), hi = CKS_MIN(off + len, (s + 1) * k * cs);
            crc         = cks_crc64_combine(crc, g.crcs[s - g.s0], hi - lo);
        }
        free(g.crcs);
    }
    if (status == CKS_OK && whole && crc != o->crc64) {
        cks_cl_set_errorf(r->client, CKS_ERR_CRC_MISMATCH,
                          "object '%s' (version %" PRIu64 ") of the flushed copy in %s fails "
                          "its CRC-64",
                          o->key, o->source_version, d->vdir);
        status = CKS_ERR_CRC_MISMATCH;
    }
    if (status == CKS_OK && length_p != NULL) {
        *length_p = len;
    }
    cb(arg, status);
    return CKS_INPROGRESS;
}
