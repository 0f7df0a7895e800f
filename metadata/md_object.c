/*
 * DESIGN: objects (cks_md.h): the "objects" database, job + 0x00 +
 * be64(version) + key -> object record. The records of one version are the
 * keys with that version's prefix; pagination seeks to prefix + after_key +
 * 0x00, the immediate successor of the last key listed. Version records are
 * not touched here (md_version.c deletes a version's objects with it).
 *
 * Must never: write an output on failure, or hand a callback a record that
 * did not decode.
 */
#include "md_lmdb.h"

#include <string.h>

/* job + 0x00 + be64(version) + key into buf; returns its length. */
static size_t md_okey(uint8_t *buf, const char *job, size_t job_len, uint64_t version,
                      const char *key, size_t key_len)
{
    size_t plen = cks_vkey(buf, job, job_len, version);

    memcpy(buf + plen, key, key_len);
    return plen + key_len;
}

/* The checks that every call on one object makes. */
static cks_status_t md_object_check(cks_md_txn_h txn, int need_write, const char *job,
                                    size_t job_len, const char *key, size_t key_len)
{
    cks_status_t status = cks_mdi_txn_job_check(txn, need_write, job, job_len);

    if (status != CKS_OK) {
        return status;
    }
    return cks_mdi_key_check(key, key_len);
}

cks_status_t cks_md_object_put(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const cks_md_object_t *o)
{
    uint8_t kbuf[MD_OKEY_MAX], vbuf[CKS_MD_VALUE_MAX];
    cks_status_t status;
    size_t vlen;

    status = cks_mdi_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if (o == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_mdi_key_check(o->key, o->key_len);
    if (status != CKS_OK) {
        return status;
    }
    if ((unsigned)o->kind > CKS_KIND_OTHER) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_md_object_encode(o, vbuf, &vlen);
    if (status != CKS_OK) {
        return status;
    }
    return cks_mdi_put(txn, MD_DB_OBJECTS, kbuf,
                       md_okey(kbuf, job, job_len, version, o->key, o->key_len), vbuf,
                       vlen, MDB_NOOVERWRITE, CKS_ERR_DUPLICATE_KEY);
}

cks_status_t cks_md_object_get(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const char *key, size_t key_len,
                               cks_md_object_t *o_p)
{
    uint8_t kbuf[MD_OKEY_MAX];
    cks_status_t status;
    MDB_val val;

    status = md_object_check(txn, 0, job, job_len, key, key_len);
    if (status != CKS_OK) {
        return status;
    }
    if (o_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_mdi_get(txn, MD_DB_OBJECTS, kbuf,
                         md_okey(kbuf, job, job_len, version, key, key_len), &val,
                         CKS_ERR_NO_SUCH_KEY);
    if (status != CKS_OK) {
        return status;
    }
    return cks_md_object_decode(job, job_len, version, key, key_len, val.mv_data,
                                val.mv_size, o_p);
}

cks_status_t cks_md_object_del(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const char *key, size_t key_len)
{
    uint8_t kbuf[MD_OKEY_MAX];
    cks_status_t status;
    MDB_val k;
    int rc;

    status = md_object_check(txn, 1, job, job_len, key, key_len);
    if (status != CKS_OK) {
        return status;
    }
    k.mv_size = md_okey(kbuf, job, job_len, version, key, key_len);
    k.mv_data = kbuf;
    rc = mdb_del(txn->txn, txn->md->dbi[MD_DB_OBJECTS], &k, NULL);
    if (rc == MDB_NOTFOUND) {
        return CKS_ERR_NO_SUCH_KEY;
    }
    if (rc != 0) {
        return cks_mdi_mdb_status(txn, rc, "mdb_del(object)");
    }
    return CKS_OK;
}

typedef struct {
    const char *job;
    size_t job_len;
    uint64_t version;
    size_t plen; /* of the version's prefix */
    cks_md_object_t *out;
    md_page_t page;
} md_olist_t;

static cks_status_t md_olist_one(md_walk_rec_t *r, void *arg)
{
    md_olist_t *l = arg;
    cks_status_t status;

    if (cks_mdi_page_full(&l->page, r)) {
        return CKS_OK;
    }
    status = cks_md_object_decode(
        l->job, l->job_len, l->version, (const uint8_t *)r->key.mv_data + l->plen,
        r->key.mv_size - l->plen, r->val.mv_data, r->val.mv_size, &l->out[l->page.n]);
    if (status == CKS_OK) {
        l->page.n++;
    }
    return status;
}

cks_status_t cks_md_object_list(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version, const char *after_key, size_t after_len,
                                cks_md_object_t *out, size_t max, size_t *count_p,
                                int *more_p)
{
    uint8_t kbuf[MD_OKEY_MAX];
    md_olist_t l = {job, job_len, version, 0, out, {0, max, 0}};
    cks_status_t status;

    status = cks_mdi_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if (after_key != NULL) {
        status = cks_mdi_key_check(after_key, after_len);
        if (status != CKS_OK) {
            return status;
        }
    }
    if (((out == NULL) && (max > 0)) || (count_p == NULL) || (more_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }

    l.plen = cks_vkey(kbuf, job, job_len, version);
    md_walk_t w = {.db = MD_DB_OBJECTS, .prefix = kbuf, .prefix_len = l.plen};
    if (after_key != NULL) { /* prefix + after_key + 0x00: its immediate successor */
        memcpy(kbuf + l.plen, after_key, after_len);
        kbuf[l.plen + after_len] = 0;
        w.from = kbuf;
        w.from_len = l.plen + after_len + 1;
    }
    return cks_mdi_walk_page(txn, &w, md_olist_one, &l, &l.page, count_p, more_p);
}

static cks_status_t md_oeach_one(md_walk_rec_t *r, void *arg)
{
    const md_user_cb_t *u = arg;
    char job[CKS_JOB_MAX_LEN + 1];
    const uint8_t *p = r->key.mv_data;
    cks_md_object_t o;
    cks_status_t status;
    uint64_t version;
    size_t jl = cks_mdi_key_job(&r->key, job);

    if ((jl == 0) || (r->key.mv_size <= jl + 9)) {
        cks_error("metadata: corrupt object key (%zu bytes)", r->key.mv_size);
        return CKS_ERR_IO;
    }
    version = cks_get_be64(p + jl + 1);
    status = cks_md_object_decode(job, jl, version, p + jl + 9, r->key.mv_size - jl - 9,
                                  r->val.mv_data, r->val.mv_size, &o);
    if (status != CKS_OK) {
        return status;
    }
    return u->cb.object(job, jl, version, &o, u->arg);
}

cks_status_t cks_md_object_foreach(cks_md_txn_h txn, cks_md_object_cb_t cb, void *arg)
{
    md_user_cb_t u = {.cb.object = cb, .arg = arg};

    return cks_mdi_foreach(txn, MD_DB_OBJECTS, cb != NULL, md_oeach_one, &u);
}
