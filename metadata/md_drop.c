/*
 * DESIGN: drop records (cks_md.h, cluster tombstones): the "drops"
 * database, job + 0x00 + be64(version) -> be64(created_ns) be64(dropped_ns)
 * (MD_DROP_LEN bytes, checked on read). Each put first prunes the records
 * older than CKS_MD_DROP_KEEP_NS, so the table stays small without a timer.
 *
 * Must never: read a value of another length as a drop, or write an output
 * on failure.
 */
#include "md_lmdb.h"

#include <string.h>

/* Remove drop records older than CKS_MD_DROP_KEEP_NS before *now_ns. */
static cks_status_t md_prune_one(md_walk_rec_t *r, void *arg)
{
    uint64_t now_ns = *(const uint64_t *)arg;

    if (r->val.mv_size == MD_DROP_LEN && r->key.mv_size <= MD_VKEY_MAX &&
        cks_get_be64((const uint8_t *)r->val.mv_data + 8) + CKS_MD_DROP_KEEP_NS <
            now_ns) {
        r->act = MD_WALK_DELETE;
    }
    return CKS_OK;
}

cks_status_t cks_md_drop_put(cks_md_txn_h txn, const char *job, size_t job_len,
                             uint64_t version, uint64_t created_ns, uint64_t dropped_ns)
{
    uint8_t kbuf[MD_VKEY_MAX], vbuf[MD_DROP_LEN];
    cks_status_t status = cks_mdi_txn_job_check(txn, 1, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    md_walk_t w = {.db = MD_DB_DROPS};
    status = cks_mdi_walk(txn, &w, md_prune_one, &dropped_ns);
    if (status != CKS_OK) {
        return status;
    }
    cks_put_be64(vbuf, created_ns);
    cks_put_be64(vbuf + 8, dropped_ns);
    return cks_mdi_put(txn, MD_DB_DROPS, kbuf, cks_vkey(kbuf, job, job_len, version),
                       vbuf, sizeof(vbuf), 0, CKS_OK);
}

cks_status_t cks_md_drop_get(cks_md_txn_h txn, const char *job, size_t job_len,
                             uint64_t version, uint64_t *created_ns_p)
{
    MDB_val val;
    cks_status_t status =
        cks_mdi_vget(txn, MD_DB_DROPS, job, job_len, version, created_ns_p, &val);
    if (status != CKS_OK) {
        return status;
    }
    if (val.mv_size != MD_DROP_LEN) {
        cks_error("metadata: drop record of version %llu of '%.*s': %zu bytes",
                  (unsigned long long)version, (int)job_len, job, val.mv_size);
        return CKS_ERR_IO;
    }
    *created_ns_p = cks_get_be64(val.mv_data);
    return CKS_OK;
}

typedef struct {
    size_t job_len;
    uint64_t *versions, *created;
    md_page_t page;
} md_dlist_t;

static cks_status_t md_dlist_one(md_walk_rec_t *r, void *arg)
{
    md_dlist_t *l = arg;

    if (r->key.mv_size != l->job_len + 9 || r->val.mv_size != MD_DROP_LEN) {
        return CKS_ERR_IO; /* not a record this module wrote */
    }
    if (cks_mdi_page_full(&l->page, r)) {
        return CKS_OK;
    }
    l->versions[l->page.n] =
        cks_get_be64((const uint8_t *)r->key.mv_data + l->job_len + 1);
    l->created[l->page.n] = cks_get_be64(r->val.mv_data);
    l->page.n++;
    return CKS_OK;
}

cks_status_t cks_md_drop_list(cks_md_txn_h txn, const char *job, size_t job_len,
                              const uint64_t *after, uint64_t *versions,
                              uint64_t *created, size_t max, size_t *count_p, int *more_p)
{
    uint8_t from[MD_VKEY_MAX];
    md_dlist_t l = {job_len, versions, created, {0, max, 0}};
    cks_status_t status = cks_mdi_txn_job_check(txn, 0, job, job_len);
    if (status != CKS_OK) {
        return status;
    }
    if ((max > 0 && (versions == NULL || created == NULL)) || count_p == NULL ||
        more_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    *count_p = 0;
    *more_p = 0;
    if (after != NULL && *after >= CKS_MD_NO_PARENT - 1) {
        return CKS_OK;
    }
    /* the job's keys (job + 0x00, the start of `from`) from version after + 1 */
    md_walk_t w = {.db = MD_DB_DROPS,
                   .prefix = from,
                   .prefix_len = job_len + 1,
                   .from = from,
                   .from_len =
                       cks_vkey(from, job, job_len, after == NULL ? 0 : *after + 1)};
    return cks_mdi_walk_page(txn, &w, md_dlist_one, &l, &l.page, count_p, more_p);
}
