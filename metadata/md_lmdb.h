/*
 * metadata private: the LMDB side shared by the files of this library
 * (md.c, md_version.c, md_object.c, md_chunk.c, md_drop.c). Nothing outside
 * metadata/ includes it; the record values' byte codecs are in md_int.h.
 *
 * Every walk over keys goes through cks_mdi_walk(): one cursor, one place
 * where LMDB's cursor codes are translated, and one rule for deleting while
 * walking (seek again after each delete rather than rely on where a cursor
 * lands after mdb_cursor_del).
 */
#ifndef CKS_MD_LMDB_H
#define CKS_MD_LMDB_H

#include "cks_md.h"
#include "md_int.h"

#include <lmdb.h>

/* job + 0x00 + be64(version) */
#define MD_VKEY_MAX (CKS_JOB_MAX_LEN + 1 + 8)
/* ... + object key, + 1 for the successor byte used by pagination */
#define MD_OKEY_MAX (MD_VKEY_MAX + CKS_KEY_MAX_LEN + 1)
/* chunk key: version key + object key + 0x00 + be64(stripe) + u8(idx) */
#define MD_CKEY_MAX (MD_VKEY_MAX + CKS_KEY_MAX_LEN + 1 + 8 + 1)
/* drops (tombstones): version key -> be64(created_ns) be64(dropped_ns) */
#define MD_DROP_LEN 16

/* The named databases, in the order cks_md_open() opens them. */
typedef enum {
    MD_DB_VERSIONS,
    MD_DB_OBJECTS,
    MD_DB_META,
    MD_DB_CHUNKS,
    MD_DB_DROPS,
    MD_DB_COUNT
} md_db_t;

struct cks_md {
    MDB_env *env;
    MDB_dbi dbi[MD_DB_COUNT];
};

struct cks_md_txn {
    cks_md_h md;
    MDB_txn *txn;
    int write;
    int poisoned;              /* LMDB failed inside: only abort is accepted */
    struct cks_md_txn *parent; /* of a nested transaction, else NULL */
};

/* Translate an LMDB failure (never 0, MDB_NOTFOUND or MDB_KEYEXIST: callers
 * handle those), log it once ("metadata: <what>: ..."), and poison `txn`
 * (may be NULL). CKS_ERR_METADATA_FULL or CKS_ERR_IO. */
cks_status_t cks_mdi_mdb_status(cks_md_txn_h txn, int rc, const char *what);

/* mdb_get of one record: CKS_OK with *val, `absent` when there is none;
 * other failures are cks_mdi_mdb_status(), logged as "mdb_get(<record>)". */
cks_status_t cks_mdi_get(cks_md_txn_h txn, md_db_t db, const void *key, size_t key_len,
                         MDB_val *val, cks_status_t absent);
/* mdb_put with `flags`: `exists` on MDB_KEYEXIST (MDB_NOOVERWRITE); other
 * failures as above ("mdb_put(<record>)"). */
cks_status_t cks_mdi_put(cks_md_txn_h txn, md_db_t db, const void *key, size_t key_len,
                         const void *val, size_t len, unsigned flags,
                         cks_status_t exists);

/* Input checks of cks_md.h's status conventions. */
cks_status_t cks_mdi_txn_check(cks_md_txn_h txn, int need_write);
cks_status_t cks_mdi_job_check(const char *job, size_t job_len);
cks_status_t cks_mdi_key_check(const char *key, size_t key_len);
/* cks_mdi_txn_check(), then cks_mdi_job_check(). */
cks_status_t cks_mdi_txn_job_check(cks_md_txn_h txn, int need_write, const char *job,
                                   size_t job_len);

/* A read of one record of `job` into out_p: cks_mdi_txn_job_check(txn, 0,
 * ...), then CKS_ERR_INVALID_PARAM when out_p is NULL. */
cks_status_t cks_mdi_read_check(cks_md_txn_h txn, const char *job, size_t job_len,
                                const void *out_p);

/* The record of (job, version) (key job + 0x00 + be64(version)) in `db`:
 * cks_mdi_read_check(), then cks_mdi_get() with CKS_ERR_NO_SUCH_VERSION
 * when there is none. */
cks_status_t cks_mdi_vget(cks_md_txn_h txn, md_db_t db, const char *job, size_t job_len,
                          uint64_t version, const void *out_p, MDB_val *val);

/* Length of the job part of a stored key (up to its first 0x00), or 0 when
 * the key has no 0x00 within CKS_JOB_MAX_LEN + 1 bytes (malformed). When
 * that length is not 0 and `job` is not NULL, the job is copied there
 * (CKS_JOB_MAX_LEN + 1 bytes), NUL-terminated. */
size_t cks_mdi_key_job(const MDB_val *k, char *job);

/* ---- walks ---------------------------------------------------------------
 * cks_mdi_walk() visits the records of one database in key order (or in
 * reverse), calling `cb` once per record. Range:
 *   - keys that begin with prefix[0 .. prefix_len) (every key when
 *     prefix_len is 0);
 *   - forward: from the first key >= `from` (from_len bytes); when `from`
 *     is NULL, from the first key >= prefix (the first key of the database
 *     when there is no prefix);
 *   - reverse: from the last key < `from` (which reverse walks must give),
 *     or the last key of the database when none is >= `from`; then down.
 * The walk ends at the first key outside the prefix, or at either end.
 *
 * Contract of the callback: it gets the record in r->key and r->val (valid
 * until it returns) and r->act set to MD_WALK_NEXT. It returns CKS_OK and
 * leaves in r->act what comes next:
 *   MD_WALK_NEXT    the next record;
 *   MD_WALK_STOP    none: cks_mdi_walk() returns CKS_OK;
 *   MD_WALK_DELETE  delete this record, then the first key after it;
 *   MD_WALK_SEEK    the first key >= r->seek (bytes the callback keeps valid
 *                   until it is called again or the walk ends).
 * Any other status ends the walk at once (nothing of r->act is done) and is
 * returned. DELETE and SEEK are for forward walks; a reverse walk that asks
 * for them ends with CKS_ERR_INTERNAL. LMDB failures end the walk with
 * cks_mdi_mdb_status() (the transaction is poisoned); a failed delete is
 * logged as "mdb_cursor_del(<record>)" ("object", "chunk", "drop").
 */
typedef enum {
    MD_WALK_NEXT = 0,
    MD_WALK_STOP,
    MD_WALK_DELETE,
    MD_WALK_SEEK,
} md_walk_act_t;

typedef struct {
    MDB_val key;
    MDB_val val;
    md_walk_act_t act;
    MDB_val seek; /* MD_WALK_SEEK only */
} md_walk_rec_t;

typedef cks_status_t (*md_walk_cb_t)(md_walk_rec_t *r, void *arg);

typedef struct {
    md_db_t db;
    const void *prefix;
    size_t prefix_len;
    const void *from;
    size_t from_len;
    int reverse;
} md_walk_t;

cks_status_t cks_mdi_walk(cks_md_txn_h txn, const md_walk_t *w, md_walk_cb_t cb,
                          void *arg);

/* The walk of a cks_md_*_foreach() call: checks txn (a read will do) and
 * that the caller gave a callback (`have_cb`), then walks all of `db`. */
cks_status_t cks_mdi_foreach(cks_md_txn_h txn, md_db_t db, int have_cb, md_walk_cb_t cb,
                             void *arg);

/* A caller's callback and its argument, carried through a walk to the
 * walk's own callback. */
typedef struct {
    union {
        cks_md_version_cb_t version;
        cks_md_object_cb_t object;
        cks_md_chunk_cb_t chunk;
        cks_md_chunk_each_cb_t chunk_each;
    } cb;
    void *arg;
} md_user_cb_t;

/* A page of a list call: n records of at most max, and whether more follow.
 * A list callback calls cks_mdi_page_full() before it fills a slot: on a
 * full page it sets more and asks the walk to stop. */
typedef struct {
    size_t n;
    size_t max;
    int more;
} md_page_t;

static inline int cks_mdi_page_full(md_page_t *pg, md_walk_rec_t *r)
{
    if (pg->n < pg->max) {
        return 0;
    }
    pg->more = 1;
    r->act = MD_WALK_STOP;
    return 1;
}

/* A list call's walk: cks_mdi_walk(), then the page `pg` (filled by `cb`
 * through `arg`) handed out as *count_p and *more_p when it succeeds. */
static inline cks_status_t cks_mdi_walk_page(cks_md_txn_h txn, const md_walk_t *w,
                                             md_walk_cb_t cb, void *arg, const md_page_t *pg,
                                             size_t *count_p, int *more_p)
{
    cks_status_t status = cks_mdi_walk(txn, w, cb, arg);
    if (status == CKS_OK) {
        *count_p = pg->n;
        *more_p = pg->more;
    }
    return status;
}

#endif
