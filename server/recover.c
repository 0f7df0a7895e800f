/*
 * recover.c - a server's start-up: every object and chunk record is checked
 * against the arena (its CRC-64 over the bytes the arena file kept) and its
 * arena space taken again; an object that fails is set aside (answered
 * CRC_MISMATCH, never served), a chunk that fails is kept and logged
 * (readers check each chunk's CRC and decode around it); versions a crash
 * left OPEN are aborted. Runs once, before the listener accepts anything.
 *
 * Never: serve an object whose CRC failed at start.
 */
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- start-up recovery ------------------------------------------------------------- */

typedef struct {
    cks_server_h s;
    uint64_t objects, bytes, bad;
    char (*open_jobs)[CKS_JOB_MAX_LEN + 1];
    uint64_t *open_versions;
    size_t nopen, capopen;
} cks_sv_recover_t;

static cks_status_t cks_sv_recover_version(const char *job, size_t job_len,
                                           const cks_md_version_t *v, void *arg)
{
    cks_sv_recover_t *r = arg;
    if (v->state != CKS_VSTATE_OPEN) {
        return CKS_OK;
    }
    /* two arrays of one capacity: it grows once both have */
    size_t capj = r->capopen, capv = r->capopen;
    void *j = cks_array_grow(r->open_jobs, &capj, r->nopen + 1, sizeof(*r->open_jobs), 8);
    if (j == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    r->open_jobs = j;
    void *vv     = cks_array_grow(r->open_versions, &capv, r->nopen + 1,
                                  sizeof(*r->open_versions), 8);
    if (vv == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    r->open_versions = vv;
    r->capopen       = capv;
    memcpy(r->open_jobs[r->nopen], job, job_len);
    r->open_jobs[r->nopen][job_len] = '\0';
    r->open_versions[r->nopen++]    = v->version;
    return CKS_OK;
}

/* Versions a crash left OPEN lost the puts that were in flight: abort them. */
static cks_status_t cks_sv_abort_open_versions(cks_server_h s)
{
    cks_sv_recover_t r = {.s = s};
    cks_md_txn_h txn;
    cks_status_t status;

    status = cks_md_txn_begin(s->md, 1, &txn);
    if (status != CKS_OK) {
        return status;
    }
    status = cks_md_version_foreach(txn, cks_sv_recover_version, &r);
    /* a cluster coordinator keeps them OPEN: another candidate may have
     * taken one over and committed it; it claims each again before it drops
     * it (cks_sv_cluster_progress(), coord.c) */
    for (size_t i = 0; status == CKS_OK && s->p.cluster_map == NULL && i < r.nopen; i++) {
        cks_md_version_t rec;
        size_t jl = strlen(r.open_jobs[i]);
        status    = cks_md_version_get(txn, r.open_jobs[i], jl, r.open_versions[i], &rec);
        if (status == CKS_OK) {
            status = cks_md_version_del(txn, r.open_jobs[i], jl, r.open_versions[i]);
        }
        if (status == CKS_OK) {
            rec.state    = CKS_VSTATE_ABORTED;
            rec.nobjects = rec.bytes = 0;
            status = cks_md_version_put(txn, r.open_jobs[i], jl, &rec, 1);
        }
        if (status == CKS_OK) {
            cks_warn("version %llu of '%s' was still open when the server stopped: "
                     "marked ABORTED%s",
                     (unsigned long long)r.open_versions[i], r.open_jobs[i],
                     s->p.cluster_map ? "; every server will be told to drop it" : "");
        }
    }
    if (status == CKS_OK) {
        status = cks_md_txn_commit(txn);
    } else {
        cks_md_txn_abort(txn);
    }
    for (size_t i = 0; status == CKS_OK && s->p.cluster_map != NULL && i < r.nopen; i++) {
        cks_warn("version %llu of '%s' was still open when the server stopped: it is "
                 "claimed again, and dropped everywhere unless another server took it over",
                 (unsigned long long)r.open_versions[i], r.open_jobs[i]);
    }
    if (status == CKS_OK && s->p.cluster_map != NULL && r.nopen > 0) {
        /* the other servers hold chunks of these versions: they are told
         * (cks_sv_cluster_progress) once this server runs */
        s->lost_jobs     = r.open_jobs;
        s->lost_versions = r.open_versions;
        s->nlost         = r.nopen;
        return CKS_OK;
    }
    free(r.open_jobs);
    free(r.open_versions);
    return status;
}

static cks_status_t cks_sv_recover_object(const char *job, size_t job_len,
                                          uint64_t version, const cks_md_object_t *o,
                                          void *arg)
{
    cks_sv_recover_t *r = arg;
    cks_server_h s      = r->s;
    uint64_t size       = cks_arena_size(s->arena);
    if (o->arena_len == 0 && o->size > 0) {
        return CKS_OK; /* a cluster manifest entry: its bytes are chunks */
    }
    if (o->arena_len == 0 && o->size == 0) {
        /* an empty object holds no arena space: nothing to take back, and
         * its CRC is that of no bytes */
        if (o->crc64 == cks_crc64(0, NULL, 0)) {
            r->objects++;
            return CKS_OK;
        }
    }
    int ok              = o->arena_offset >= CKS_ARENA_HDR_LEN && o->arena_len >= o->size &&
             o->arena_offset <= size && o->arena_len <= size - o->arena_offset;

    if (ok && cks_arena_reserve(s->arena, o->arena_offset, o->arena_len) != CKS_OK) {
        ok = 0;
    }
    if (ok && cks_crc64(0, cks_arena_base(s->arena) + o->arena_offset, o->size) != o->crc64) {
        ok = 0;
    }
    if (ok) {
        r->objects++;
        r->bytes += o->size;
        return CKS_OK;
    }
    uint8_t k[CKS_JOB_MAX_LEN + 9 + CKS_KEY_MAX_LEN];
    size_t n = cks_vkey(k, job, job_len, version);
    memcpy(k + n, o->key, o->key_len);
    cks_error("object '%s' of version %llu of '%s' failed its check at start "
              "(CRC or arena extent): it will not be served",
              o->key, (unsigned long long)version, job);
    r->bad++;
    return cks_hmap_put(s->bad, k, n + o->key_len, s);
}

/* A chunk this server holds: take its arena space back and check its CRC. A
 * bad chunk is kept (and logged): readers check CRCs and decode around it. */
static cks_status_t cks_sv_recover_chunk(const char *job, size_t job_len, uint64_t version,
                                         const char *key, size_t key_len,
                                         const cks_md_chunk_t *c, void *arg)
{
    cks_sv_recover_t *r = arg;
    cks_server_h s      = r->s;
    uint64_t size       = cks_arena_size(s->arena);
    int ok = c->arena_offset >= CKS_ARENA_HDR_LEN && c->arena_len >= c->len &&
             c->arena_offset <= size && c->arena_len <= size - c->arena_offset &&
             cks_arena_reserve(s->arena, c->arena_offset, c->arena_len) == CKS_OK;
    if (ok && cks_crc64(0, cks_arena_base(s->arena) + c->arena_offset, c->len) == c->crc64) {
        r->objects++;
        r->bytes += c->len;
        return CKS_OK;
    }
    r->bad++;
    cks_error("chunk %u of stripe %llu of '%.*s' (version %llu of '%s') failed its check at "
              "start; readers will decode around it",
              c->idx, (unsigned long long)c->stripe, (int)key_len, key,
              (unsigned long long)version, job);
    return CKS_OK;
}

cks_status_t cks_sv_recover(cks_server_h s)
{
    cks_sv_recover_t r = {.s = s};
    cks_md_txn_h txn;
    cks_status_t status;
    uint64_t t0 = cks_time_ns();

    status = cks_sv_abort_open_versions(s);
    if (status != CKS_OK) {
        return status;
    }
    status = cks_md_txn_begin(s->md, 0, &txn);
    if (status != CKS_OK) {
        return status;
    }
    status = cks_md_object_foreach(txn, cks_sv_recover_object, &r);
    if (status == CKS_OK) {
        status = cks_md_chunk_foreach(txn, cks_sv_recover_chunk, &r);
    }
    cks_md_txn_abort(txn);
    if (status == CKS_OK && (r.objects > 0 || r.bad > 0)) {
        cks_info("re-attached %llu objects or chunks (%llu bytes) in %.1f ms, CRCs checked; "
                 "%llu failed",
                 (unsigned long long)r.objects, (unsigned long long)r.bytes,
                 (double)(cks_time_ns() - t0) / 1e6, (unsigned long long)r.bad);
    }
    if (r.bad > 0) {
        cks_error("%llu objects or chunks failed their check at start (objects: restores "
                  "return CKS_ERR_DATA_LOST; chunks: decoded around)",
                  (unsigned long long)r.bad);
    }
    return status;
}
