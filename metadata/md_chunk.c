/*
 * DESIGN: chunks (cks_md.h, cluster): the "chunks" database, job + 0x00 +
 * be64(version) + key + 0x00 + be64(stripe) + u8(idx) -> chunk record, one
 * per chunk of a stripe that this server holds. Deleting chunks hands each
 * record to the caller first, so that it can free the chunk's arena space.
 *
 * Must never: stop deleting a version's chunks at a record that does not
 * decode (it is deleted all the same), or write an output on failure.
 */
#include "md_lmdb.h"

#include <string.h>

/* Bytes of a chunk key after job + 0x00 + be64(version) + key: 0x00 +
 * be64(stripe) + u8(idx). */
#define MD_CKEY_TAIL 10

static size_t md_ckey(uint8_t *buf, const char *job, size_t job_len, uint64_t version,
                      const char *key, size_t key_len, uint64_t stripe, uint32_t idx)
{
    size_t n = cks_vkey(buf, job, job_len, version);
    memcpy(buf + n, key, key_len);
    n += key_len;
    buf[n++] = 0;
    cks_put_be64(buf + n, stripe);
    n += 8;
    buf[n++] = (uint8_t)idx;
    return n;
}

static cks_status_t md_chunk_of(const MDB_val *k, const MDB_val *val, cks_md_chunk_t *c_p)
{
    return cks_md_chunk_decode(k->mv_data, k->mv_size, val->mv_data, val->mv_size, c_p);
}

static cks_status_t md_chunk_check(cks_md_txn_h txn, int need_write, const char *job,
                                   size_t job_len, const char *key, size_t key_len)
{
    cks_status_t status = cks_mdi_txn_job_check(txn, need_write, job, job_len);

    if (status == CKS_OK) {
        status = cks_mdi_key_check(key, key_len);
    }
    return status;
}

cks_status_t cks_md_chunk_put(cks_md_txn_h txn, const char *job, size_t job_len,
                              uint64_t version, const char *key, size_t key_len,
                              const cks_md_chunk_t *c)
{
    uint8_t kbuf[MD_CKEY_MAX], vbuf[CKS_MD_VALUE_MAX];
    cks_status_t status;
    size_t vlen;

    status = md_chunk_check(txn, 1, job, job_len, key, key_len);
    if (status != CKS_OK) {
        return status;
    }
    if (c == NULL || c->idx > 255) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_md_chunk_encode(c, vbuf, &vlen);
    if (status != CKS_OK) {
        return status;
    }
    return cks_mdi_put(
        txn, MD_DB_CHUNKS, kbuf,
        md_ckey(kbuf, job, job_len, version, key, key_len, c->stripe, c->idx), vbuf, vlen,
        MDB_NOOVERWRITE, CKS_ERR_DUPLICATE_KEY);
}

cks_status_t cks_md_chunk_get(cks_md_txn_h txn, const char *job, size_t job_len,
                              uint64_t version, const char *key, size_t key_len,
                              uint64_t stripe, uint32_t idx, cks_md_chunk_t *c_p)
{
    uint8_t kbuf[MD_CKEY_MAX];
    cks_status_t status;
    MDB_val k, val;

    status = md_chunk_check(txn, 0, job, job_len, key, key_len);
    if (status != CKS_OK) {
        return status;
    }
    if (idx > 255) {
        return CKS_ERR_NO_SUCH_KEY;
    }
    k.mv_size = md_ckey(kbuf, job, job_len, version, key, key_len, stripe, idx);
    k.mv_data = kbuf;
    status =
        cks_mdi_get(txn, MD_DB_CHUNKS, k.mv_data, k.mv_size, &val, CKS_ERR_NO_SUCH_KEY);
    if (status != CKS_OK) {
        return status;
    }
    return md_chunk_of(&k, &val, c_p);
}

static cks_status_t md_cdel_one(md_walk_rec_t *r, void *arg)
{
    const md_user_cb_t *u = arg;

    if (u->cb.chunk != NULL) {
        cks_md_chunk_t c;
        cks_status_t status = md_chunk_of(&r->key, &r->val, &c);

        if (status == CKS_OK) {
            status = u->cb.chunk(&c, u->arg);
        }
        if (status != CKS_OK && status != CKS_ERR_IO) {
            return status; /* a corrupt record is deleted all the same */
        }
    }
    r->act = MD_WALK_DELETE;
    return CKS_OK;
}

cks_status_t cks_md_chunk_del_version(cks_md_txn_h txn, const char *job, size_t job_len,
                                      uint64_t version, cks_md_chunk_cb_t cb, void *arg)
{
    uint8_t kbuf[MD_VKEY_MAX];
    md_user_cb_t u = {.cb.chunk = cb, .arg = arg};
    cks_status_t status;

    status = cks_mdi_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    md_walk_t w = {.db = MD_DB_CHUNKS,
                   .prefix = kbuf,
                   .prefix_len = cks_vkey(kbuf, job, job_len, version)};
    return cks_mdi_walk(txn, &w, md_cdel_one, &u);
}

static cks_status_t md_ceach_one(md_walk_rec_t *r, void *arg)
{
    const md_user_cb_t *u = arg;
    const uint8_t *p = r->key.mv_data;
    char job[CKS_JOB_MAX_LEN + 1];
    size_t jl = cks_mdi_key_job(&r->key, job);
    cks_md_chunk_t c;
    cks_status_t status;

    /* job 0x00 be64(version) key 0x00 be64(stripe) u8(idx) */
    if (jl == 0 || r->key.mv_size < jl + 9 + 1 + MD_CKEY_TAIL) {
        cks_error("metadata: malformed chunk key (%zu bytes)", r->key.mv_size);
        return CKS_ERR_IO;
    }
    status = md_chunk_of(&r->key, &r->val, &c);
    if (status != CKS_OK) {
        return status;
    }
    return u->cb.chunk_each(job, jl, cks_get_be64(p + jl + 1), (const char *)p + jl + 9,
                            r->key.mv_size - (jl + 9) - MD_CKEY_TAIL, &c, u->arg);
}

cks_status_t cks_md_chunk_foreach(cks_md_txn_h txn, cks_md_chunk_each_cb_t cb, void *arg)
{
    md_user_cb_t u = {.cb.chunk_each = cb, .arg = arg};

    return cks_mdi_foreach(txn, MD_DB_CHUNKS, cb != NULL, md_ceach_one, &u);
}

typedef struct {
    size_t job_len;
    cks_md_chunk_keep_cb_t keep;
    cks_md_chunk_cb_t freed;
    void *arg;
} md_cgc_t;

static cks_status_t md_cgc_one(md_walk_rec_t *r, void *arg)
{
    md_cgc_t *g = arg;
    const uint8_t *p = r->key.mv_data;
    cks_md_chunk_t c;

    if (r->key.mv_size < g->job_len + 9 + 1 + MD_CKEY_TAIL) {
        return CKS_ERR_IO;
    }
    if (g->keep(cks_get_be64(p + g->job_len + 1), (const char *)p + g->job_len + 9,
                r->key.mv_size - (g->job_len + 9) - MD_CKEY_TAIL, g->arg)) {
        return CKS_OK;
    }
    if (g->freed != NULL && md_chunk_of(&r->key, &r->val, &c) == CKS_OK) {
        cks_status_t status = g->freed(&c, g->arg);

        if (status != CKS_OK) {
            return status;
        }
    }
    r->act = MD_WALK_DELETE;
    return CKS_OK;
}

cks_status_t cks_md_chunk_gc(cks_md_txn_h txn, const char *job, size_t job_len,
                             cks_md_chunk_keep_cb_t keep, cks_md_chunk_cb_t freed,
                             void *arg)
{
    uint8_t prefix[CKS_JOB_MAX_LEN + 1];
    md_cgc_t g = {job_len, keep, freed, arg};
    cks_status_t status;

    status = cks_mdi_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK || keep == NULL) {
        return status != CKS_OK ? status : CKS_ERR_INVALID_PARAM;
    }
    memcpy(prefix, job, job_len);
    prefix[job_len] = 0;
    md_walk_t w = {.db = MD_DB_CHUNKS, .prefix = prefix, .prefix_len = job_len + 1};
    return cks_mdi_walk(txn, &w, md_cgc_one, &g);
}
