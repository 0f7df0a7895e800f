/*
 * DESIGN: versions and jobs (cks_md.h): the "versions" database, job +
 * 0x00 + be64(version) -> version record. A job exists while it has a
 * version; its list is a walk over the first key of each job. Deleting a
 * version deletes its object records with it ("objects", md_object.c).
 *
 * Must never: write an output on failure, or return a version record whose
 * number differs from its key's (the decoder checks).
 */
#include "md_lmdb.h"

#include <string.h>

/* Decode a versions-db entry at a key known to start with job + 0x00. */
static cks_status_t md_version_from_entry(const char *job, size_t job_len,
                                          const MDB_val *k, const MDB_val *val,
                                          cks_md_version_t *v_p)
{
    if (k->mv_size != job_len + 9) {
        cks_error("metadata: corrupt version key (job '%.*s', %zu bytes)", (int)job_len,
                  job, k->mv_size);
        return CKS_ERR_IO;
    }
    return cks_md_version_decode(job, job_len,
                                 cks_get_be64((const uint8_t *)k->mv_data + job_len + 1),
                                 val->mv_data, val->mv_size, v_p);
}

/* A walk over the versions of one job: prefix job + 0x00 in kbuf. */
static md_walk_t md_job_walk(cks_md_txn_h txn, uint8_t *kbuf, const char *job,
                             size_t job_len)
{
    md_walk_t w = {.db = MD_DB_VERSIONS, .prefix = kbuf, .prefix_len = job_len + 1};

    memcpy(kbuf, job, job_len);
    kbuf[job_len] = 0;
    return w;
}

cks_status_t cks_md_version_put(cks_md_txn_h txn, const char *job, size_t job_len,
                                const cks_md_version_t *v, int overwrite)
{
    uint8_t kbuf[MD_VKEY_MAX], vbuf[CKS_MD_VALUE_MAX];
    cks_status_t status;
    size_t vlen;

    status = cks_mdi_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if ((v == NULL) || (v->version == CKS_MD_NO_PARENT) ||
        ((unsigned)v->state > CKS_VSTATE_ABORTED)) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_md_version_encode(v, vbuf, &vlen);
    if (status != CKS_OK) {
        return status;
    }
    return cks_mdi_put(txn, MD_DB_VERSIONS, kbuf,
                       cks_vkey(kbuf, job, job_len, v->version), vbuf, vlen,
                       overwrite ? 0 : MDB_NOOVERWRITE, CKS_ERR_VERSION_EXISTS);
}

cks_status_t cks_md_version_get(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version, cks_md_version_t *v_p)
{
    MDB_val val;
    cks_status_t status = cks_mdi_vget(txn, MD_DB_VERSIONS, job, job_len, version, v_p, &val);

    if (status != CKS_OK) {
        return status;
    }
    return cks_md_version_decode(job, job_len, version, val.mv_data, val.mv_size, v_p);
}

static cks_status_t md_delete_each(md_walk_rec_t *r, void *arg)
{
    (void)arg;
    r->act = MD_WALK_DELETE;
    return CKS_OK;
}

cks_status_t cks_md_version_del(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version)
{
    uint8_t kbuf[MD_VKEY_MAX];
    md_walk_t w = {.db = MD_DB_OBJECTS, .prefix = kbuf};
    cks_status_t status;
    MDB_val k, val;
    int rc;

    status = cks_mdi_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    w.prefix_len = cks_vkey(kbuf, job, job_len, version);
    status = cks_mdi_get(txn, MD_DB_VERSIONS, kbuf, w.prefix_len, &val,
                         CKS_ERR_NO_SUCH_VERSION);
    if (status != CKS_OK) {
        return status;
    }

    /* Objects first: every key starting with job + 0x00 + be64(version). */
    status = cks_mdi_walk(txn, &w, md_delete_each, NULL);
    if (status != CKS_OK) {
        return status;
    }

    k.mv_size = w.prefix_len;
    k.mv_data = kbuf;
    rc = mdb_del(txn->txn, txn->md->dbi[MD_DB_VERSIONS], &k, NULL);
    if (rc != 0) { /* found above in this very txn: NOTFOUND is a fault too */
        return cks_mdi_mdb_status(txn, rc, "mdb_del(version)");
    }
    return CKS_OK;
}

typedef struct {
    const char *job;
    size_t job_len;
    cks_md_version_t *out;
    md_page_t page;
} md_vlist_t;

static cks_status_t md_vlist_one(md_walk_rec_t *r, void *arg)
{
    md_vlist_t *l = arg;
    cks_status_t status;

    if (cks_mdi_page_full(&l->page, r)) {
        return CKS_OK;
    }
    status =
        md_version_from_entry(l->job, l->job_len, &r->key, &r->val, &l->out[l->page.n]);
    if (status == CKS_OK) {
        l->page.n++;
    }
    return status;
}

cks_status_t cks_md_version_list(cks_md_txn_h txn, const char *job, size_t job_len,
                                 const uint64_t *after, cks_md_version_t *out, size_t max,
                                 size_t *count_p, int *more_p)
{
    uint8_t from[MD_VKEY_MAX];
    md_vlist_t l = {job, job_len, out, {0, max, 0}};
    cks_status_t status;
    md_walk_t w;

    status = cks_mdi_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if (((out == NULL) && (max > 0)) || (count_p == NULL) || (more_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if ((after != NULL) && (*after >= CKS_MD_NO_PARENT - 1)) {
        *count_p = 0; /* nothing can follow the largest version */
        *more_p = 0;
        return CKS_OK;
    }
    /* the job's keys (job + 0x00, the start of `from`) from version after + 1 */
    w = md_job_walk(txn, from, job, job_len);
    w.from = from;
    w.from_len = cks_vkey(from, job, job_len, (after == NULL) ? 0 : *after + 1);
    return cks_mdi_walk_page(txn, &w, md_vlist_one, &l, &l.page, count_p, more_p);
}

static int md_vstate_restorable(cks_vstate_t state)
{
    return (state == CKS_VSTATE_SEALED) || (state == CKS_VSTATE_PROTECTED) ||
           (state == CKS_VSTATE_DEGRADED);
}

typedef struct {
    const char *job;
    size_t job_len;
    int restorable_only;
    int any, found;
    cks_md_version_t v;
} md_latest_t;

static cks_status_t md_latest_one(md_walk_rec_t *r, void *arg)
{
    md_latest_t *l = arg;
    cks_status_t status;

    l->any = 1;
    status = md_version_from_entry(l->job, l->job_len, &r->key, &r->val, &l->v);
    if ((status == CKS_OK) && (!l->restorable_only || md_vstate_restorable(l->v.state))) {
        l->found = 1;
        r->act = MD_WALK_STOP;
    }
    return status;
}

cks_status_t cks_md_version_latest(cks_md_txn_h txn, const char *job, size_t job_len,
                                   int restorable_only, cks_md_version_t *v_p)
{
    uint8_t prefix[CKS_JOB_MAX_LEN + 1], from[CKS_JOB_MAX_LEN + 1];
    md_latest_t l = {.job = job, .job_len = job_len, .restorable_only = restorable_only};
    cks_status_t status;
    md_walk_t w;

    status = cks_mdi_read_check(txn, job, job_len, v_p);
    if (status != CKS_OK) {
        return status;
    }
    /* job + 0x01 sorts after every key of job: walk back from there. */
    w = md_job_walk(txn, prefix, job, job_len);
    memcpy(from, job, job_len);
    from[job_len] = 1;
    w.from = from;
    w.from_len = job_len + 1;
    w.reverse = 1;
    status = cks_mdi_walk(txn, &w, md_latest_one, &l);
    if (status != CKS_OK) {
        return status;
    }
    if (!l.found) {
        return l.any ? CKS_ERR_NO_SUCH_VERSION : CKS_ERR_NO_SUCH_JOB;
    }
    *v_p = l.v;
    return CKS_OK;
}

static cks_status_t md_veach_one(md_walk_rec_t *r, void *arg)
{
    const md_user_cb_t *u = arg;
    char job[CKS_JOB_MAX_LEN + 1];
    cks_md_version_t v;
    cks_status_t status;
    size_t jl = cks_mdi_key_job(&r->key, job);

    if (jl == 0) {
        cks_error("metadata: corrupt version key (%zu bytes, no job)", r->key.mv_size);
        return CKS_ERR_IO;
    }
    status = md_version_from_entry(job, jl, &r->key, &r->val, &v);
    if (status != CKS_OK) {
        return status;
    }
    return u->cb.version(job, jl, &v, u->arg);
}

cks_status_t cks_md_version_foreach(cks_md_txn_h txn, cks_md_version_cb_t cb, void *arg)
{
    md_user_cb_t u = {.cb.version = cb, .arg = arg};

    return cks_mdi_foreach(txn, MD_DB_VERSIONS, cb != NULL, md_veach_one, &u);
}

/* ---- jobs --------------------------------------------------------------- */

static cks_status_t md_found_one(md_walk_rec_t *r, void *arg)
{
    *(int *)arg = 1;
    r->act = MD_WALK_STOP;
    return CKS_OK;
}

cks_status_t cks_md_job_exists(cks_md_txn_h txn, const char *job, size_t job_len)
{
    uint8_t prefix[CKS_JOB_MAX_LEN + 1];
    cks_status_t status;
    md_walk_t w;
    int found = 0;

    status = cks_mdi_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    w = md_job_walk(txn, prefix, job, job_len);
    status = cks_mdi_walk(txn, &w, md_found_one, &found);
    if ((status == CKS_OK) && !found) {
        status = CKS_ERR_NO_SUCH_JOB;
    }
    return status;
}

typedef struct {
    char (*names)[CKS_JOB_MAX_LEN + 1];
    md_page_t page;
    uint8_t skip[CKS_JOB_MAX_LEN + 1]; /* the seek past the job just listed */
} md_jlist_t;

static cks_status_t md_jlist_one(md_walk_rec_t *r, void *arg)
{
    md_jlist_t *l = arg;
    size_t jl = cks_mdi_key_job(&r->key, NULL);

    if ((jl == 0) || (r->key.mv_size != jl + 9)) {
        cks_error("metadata: corrupt version key (%zu bytes)", r->key.mv_size);
        return CKS_ERR_IO;
    }
    if (cks_mdi_page_full(&l->page, r)) {
        return CKS_OK;
    }
    memcpy(l->names[l->page.n], r->key.mv_data, jl);
    l->names[l->page.n][jl] = '\0';
    l->page.n++;
    /* skip the rest of this job's versions in one seek */
    memcpy(l->skip, r->key.mv_data, jl);
    l->skip[jl] = 1;
    r->seek.mv_size = jl + 1;
    r->seek.mv_data = l->skip;
    r->act = MD_WALK_SEEK;
    return CKS_OK;
}

cks_status_t cks_md_job_list(cks_md_txn_h txn, const char *after, size_t after_len,
                             char (*names)[CKS_JOB_MAX_LEN + 1], size_t max,
                             size_t *count_p, int *more_p)
{
    uint8_t from[CKS_JOB_MAX_LEN + 1];
    md_jlist_t l = {.names = names, .page = {0, max, 0}};
    cks_status_t status;

    status = cks_mdi_txn_check(txn, 0);
    if (status != CKS_OK) {
        return status;
    }
    if (after != NULL) {
        status = cks_mdi_job_check(after, after_len);
        if (status != CKS_OK) {
            return status;
        }
    }
    if (((names == NULL) && (max > 0)) || (count_p == NULL) || (more_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    md_walk_t w = {.db = MD_DB_VERSIONS};
    if (after != NULL) {
        memcpy(from, after, after_len);
        from[after_len] = 1; /* past every key of `after` */
        w.from = from;
        w.from_len = after_len + 1;
    }
    return cks_mdi_walk_page(txn, &w, md_jlist_one, &l, &l.page, count_p, more_p);
}
