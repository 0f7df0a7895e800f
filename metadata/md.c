/*
 * DESIGN: the LMDB schema of one storage server (see cks_md.h for the layout):
 * the environment, transactions, input checks and the one cursor walk
 * (md_lmdb.h) that every other file of this library uses.
 *
 * Files: md.c (this: environment, transactions, walks), md_codec.c (record
 * values as bytes), md_version.c (versions and jobs), md_object.c
 * (objects), md_chunk.c (chunks), md_drop.c (drop records).
 *
 * Owns: one LMDB environment per data directory, its named databases
 * ("versions", "objects", "meta", "chunks", "drops") and the byte formats
 * of their keys and values. Nothing else in ckstore includes <lmdb.h> or <msgpack.h> for
 * this data; MDB_* codes are translated here, once, and logged here.
 *
 * Threads: read transactions run on any thread (MDB_NOTLS ties the reader slot
 * to the transaction, not to the thread), one thread at a time per
 * transaction. Write transactions run on the server's single metadata writer
 * thread; LMDB serialises writers anyway. Never call into this module on the
 * per-chunk data path or hold a write transaction across a network wait.
 *
 * Durability: the environment is opened MDB_NOSYNC. A commit reaches the page
 * cache, so a SIGKILL of the process loses nothing committed; only a machine
 * crash can lose the last commits, and a machine crash loses the server's
 * arena (in /dev/shm) anyway, so an fsync per commit would buy nothing.
 * cks_md_sync() forces a flush for callers that want one (clean shutdown).
 * LMDB's copy-on-write B-tree keeps the file consistent either way.
 *
 * Keys: job + 0x00 + be64(version) [+ object key]. Big-endian versions make
 * LMDB's memcmp order numeric order; job names hold no NUL, so the 0x00 ends
 * the job and "job" never matches keys of "job2". The immediate successor of
 * a byte string s is s + 0x00, and "job" + 0x01 is past every key of "job":
 * pagination and job skipping are single MDB_SET_RANGE seeks. Longest key:
 * 128 + 1 + 8 + 256 = 393 bytes, under LMDB's 511.
 *
 * Must never: crash or allocate on a corrupt record, write an output on
 * failure, or keep using a transaction on which LMDB failed (poisoned).
 */
#include "md_lmdb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MD_META_SCHEMA "schema"
#define MD_MAX_DBS     8 /* five used */
#define MD_MAX_READERS 126
/* LMDB's longest key (MDB_MAXKEYSIZE as built by default): a walk copies the
 * key it deletes to seek past it */
#define MD_KEY_BUF 511

/* md_db_t: each database's name, and what one of its records is called in
 * log lines */
static const char *const md_db_name[MD_DB_COUNT] = {"versions", "objects", "meta",
                                                    "chunks", "drops"};
static const char *const md_db_record[MD_DB_COUNT] = {"version", "object", "meta",
                                                      "chunk", "drop"};

/* ---- LMDB codes --------------------------------------------------------- */

cks_status_t cks_mdi_mdb_status(cks_md_txn_h txn, int rc, const char *what)
{
    cks_status_t status;

    if ((rc == MDB_MAP_FULL) || (rc == MDB_TXN_FULL)) {
        status = CKS_ERR_METADATA_FULL;
    } else {
        status = CKS_ERR_IO;
    }
    cks_error("metadata: %s: %s (%d)", what, mdb_strerror(rc), rc);
    if (txn != NULL) {
        txn->poisoned = 1;
    }
    return status;
}

/* Cursor step; *found_p = 0 on MDB_NOTFOUND. */
static cks_status_t md_cursor_get(cks_md_txn_h txn, MDB_cursor *cur, MDB_val *k,
                                  MDB_val *v, MDB_cursor_op op, int *found_p)
{
    int rc = mdb_cursor_get(cur, k, v, op);

    if (rc == MDB_NOTFOUND) {
        *found_p = 0;
        return CKS_OK;
    }
    if (rc != 0) {
        return cks_mdi_mdb_status(txn, rc, "mdb_cursor_get");
    }
    *found_p = 1;
    return CKS_OK;
}

static cks_status_t md_cursor_open(cks_md_txn_h txn, MDB_dbi dbi, MDB_cursor **cur_p)
{
    int rc = mdb_cursor_open(txn->txn, dbi, cur_p);

    if (rc != 0) {
        return cks_mdi_mdb_status(txn, rc, "mdb_cursor_open");
    }
    return CKS_OK;
}

/* "mdb_get(object)" and the like, for cks_mdi_mdb_status() */
static cks_status_t md_op_failed(cks_md_txn_h txn, int rc, const char *op, md_db_t db)
{
    char what[64];

    snprintf(what, sizeof(what), "%s(%s)", op, md_db_record[db]);
    return cks_mdi_mdb_status(txn, rc, what);
}

cks_status_t cks_mdi_get(cks_md_txn_h txn, md_db_t db, const void *key, size_t key_len,
                         MDB_val *val, cks_status_t absent)
{
    MDB_val k = {key_len, (void *)key};
    int rc = mdb_get(txn->txn, txn->md->dbi[db], &k, val);

    if (rc == MDB_NOTFOUND) {
        return absent;
    }
    return rc == 0 ? CKS_OK : md_op_failed(txn, rc, "mdb_get", db);
}

cks_status_t cks_mdi_put(cks_md_txn_h txn, md_db_t db, const void *key, size_t key_len,
                         const void *val, size_t len, unsigned flags, cks_status_t exists)
{
    MDB_val k = {key_len, (void *)key}, v = {len, (void *)val};
    int rc = mdb_put(txn->txn, txn->md->dbi[db], &k, &v, flags);

    if (rc == MDB_KEYEXIST) {
        return exists;
    }
    return rc == 0 ? CKS_OK : md_op_failed(txn, rc, "mdb_put", db);
}

/* ---- input checks ------------------------------------------------------- */

cks_status_t cks_mdi_txn_check(cks_md_txn_h txn, int need_write)
{
    if (txn == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (txn->poisoned) {
        return CKS_ERR_BAD_STATE;
    }
    if (need_write && !txn->write) {
        return CKS_ERR_INVALID_PARAM;
    }
    return CKS_OK;
}

cks_status_t cks_mdi_job_check(const char *job, size_t job_len)
{
    if ((job == NULL) || (job_len == 0)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (job_len > CKS_JOB_MAX_LEN) {
        return CKS_ERR_KEY_TOO_LONG;
    }
    if (memchr(job, '\0', job_len) != NULL) {
        return CKS_ERR_INVALID_PARAM; /* would end the job early in the key */
    }
    return CKS_OK;
}

cks_status_t cks_mdi_key_check(const char *key, size_t key_len)
{
    if ((key == NULL) || (key_len == 0)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (key_len > CKS_KEY_MAX_LEN) {
        return CKS_ERR_KEY_TOO_LONG;
    }
    return CKS_OK;
}

cks_status_t cks_mdi_txn_job_check(cks_md_txn_h txn, int need_write, const char *job,
                                   size_t job_len)
{
    cks_status_t status = cks_mdi_txn_check(txn, need_write);

    if (status != CKS_OK) {
        return status;
    }
    return cks_mdi_job_check(job, job_len);
}

cks_status_t cks_mdi_read_check(cks_md_txn_h txn, const char *job, size_t job_len,
                                const void *out_p)
{
    cks_status_t status = cks_mdi_txn_job_check(txn, 0, job, job_len);

    if ((status == CKS_OK) && (out_p == NULL)) {
        status = CKS_ERR_INVALID_PARAM;
    }
    return status;
}

cks_status_t cks_mdi_vget(cks_md_txn_h txn, md_db_t db, const char *job, size_t job_len,
                          uint64_t version, const void *out_p, MDB_val *val)
{
    uint8_t kbuf[MD_VKEY_MAX];
    cks_status_t status = cks_mdi_read_check(txn, job, job_len, out_p);

    if (status != CKS_OK) {
        return status;
    }
    return cks_mdi_get(txn, db, kbuf, cks_vkey(kbuf, job, job_len, version), val,
                       CKS_ERR_NO_SUCH_VERSION);
}

/* ---- keys --------------------------------------------------------------- */

size_t cks_mdi_key_job(const MDB_val *k, char *job)
{
    const uint8_t *nul = memchr(k->mv_data, 0, CKS_MIN(k->mv_size, CKS_JOB_MAX_LEN + 1));
    size_t jl = (nul == NULL) ? 0 : (size_t)(nul - (const uint8_t *)k->mv_data);

    if ((job != NULL) && (jl > 0)) {
        memcpy(job, k->mv_data, jl);
        job[jl] = '\0';
    }
    return jl;
}

/* ---- walks (md_lmdb.h) --------------------------------------------------- */

static int md_walk_in_range(const md_walk_t *w, const MDB_val *k)
{
    return (w->prefix_len == 0) || ((k->mv_size >= w->prefix_len) &&
                                    (memcmp(k->mv_data, w->prefix, w->prefix_len) == 0));
}

cks_status_t cks_mdi_walk(cks_md_txn_h txn, const md_walk_t *w, md_walk_cb_t cb,
                          void *arg)
{
    uint8_t again[MD_KEY_BUF];
    MDB_cursor *cur;
    MDB_cursor_op op = MDB_SET_RANGE;
    md_walk_rec_t r;
    int found = 0;
    int rc;
    cks_status_t status = md_cursor_open(txn, txn->md->dbi[w->db], &cur);

    if (status != CKS_OK) {
        return status;
    }
    memset(&r, 0, sizeof(r));
    r.key.mv_data = (void *)(w->from != NULL ? w->from : w->prefix);
    r.key.mv_size = w->from != NULL ? w->from_len : w->prefix_len;
    if (r.key.mv_size == 0) {
        op = w->reverse ? MDB_LAST : MDB_FIRST;
    }
    status = md_cursor_get(txn, cur, &r.key, &r.val, op, &found);
    if ((status == CKS_OK) && w->reverse && (op == MDB_SET_RANGE)) {
        /* the last key before `from` */
        status =
            md_cursor_get(txn, cur, &r.key, &r.val, found ? MDB_PREV : MDB_LAST, &found);
    }
    while ((status == CKS_OK) && found && md_walk_in_range(w, &r.key)) {
        r.act = MD_WALK_NEXT;
        status = cb(&r, arg);
        if ((status != CKS_OK) || (r.act == MD_WALK_STOP)) {
            break;
        }
        op = w->reverse ? MDB_PREV : MDB_NEXT;
        if (w->reverse && (r.act != MD_WALK_NEXT)) {
            cks_error("metadata: a reverse walk over %s records cannot delete or seek",
                      md_db_record[w->db]);
            status = CKS_ERR_INTERNAL;
            break;
        }
        if (r.act == MD_WALK_DELETE) {
            size_t n = CKS_MIN(r.key.mv_size, sizeof(again));

            memcpy(again, r.key.mv_data, n);
            rc = mdb_cursor_del(cur, 0);
            if (rc != 0) {
                status = md_op_failed(txn, rc, "mdb_cursor_del", w->db);
                break;
            }
            /* seek again rather than rely on where the cursor lands after a delete */
            r.key.mv_data = again;
            r.key.mv_size = n;
            op = MDB_SET_RANGE;
        } else if (r.act == MD_WALK_SEEK) {
            r.key = r.seek;
            op = MDB_SET_RANGE;
        }
        status = md_cursor_get(txn, cur, &r.key, &r.val, op, &found);
    }
    mdb_cursor_close(cur);
    return status;
}

cks_status_t cks_mdi_foreach(cks_md_txn_h txn, md_db_t db, int have_cb, md_walk_cb_t cb,
                             void *arg)
{
    md_walk_t w = {.db = db};
    cks_status_t status = cks_mdi_txn_check(txn, 0);

    if (status != CKS_OK) {
        return status;
    }
    return have_cb ? cks_mdi_walk(txn, &w, cb, arg) : CKS_ERR_INVALID_PARAM;
}

/* ---- environment -------------------------------------------------------- */

/* Create or check the schema number inside the opening write transaction. */
static cks_status_t md_schema_check(cks_md_h md, MDB_txn *txn, const char *dir)
{
    MDB_val k = {sizeof(MD_META_SCHEMA) - 1, (void *)MD_META_SCHEMA};
    MDB_val val;
    MDB_stat vst, ost;
    uint8_t buf[CKS_MD_VALUE_MAX];
    cks_status_t status;
    uint64_t schema;
    int rc;

    rc = mdb_get(txn, md->dbi[MD_DB_META], &k, &val);
    if (rc == MDB_NOTFOUND) {
        if (((rc = mdb_stat(txn, md->dbi[MD_DB_VERSIONS], &vst)) != 0) ||
            ((rc = mdb_stat(txn, md->dbi[MD_DB_OBJECTS], &ost)) != 0)) {
            return cks_mdi_mdb_status(NULL, rc, "mdb_stat");
        }
        if ((vst.ms_entries != 0) || (ost.ms_entries != 0)) {
            cks_error("metadata: %s holds records but no schema number; refusing it",
                      dir);
            return CKS_ERR_IO;
        }
        status = cks_md_schema_encode(buf, &val.mv_size);
        if (status != CKS_OK) {
            return status;
        }
        val.mv_data = buf;
        rc = mdb_put(txn, md->dbi[MD_DB_META], &k, &val, 0);
        if (rc != 0) {
            return cks_mdi_mdb_status(NULL, rc, "mdb_put(schema)");
        }
        cks_info("metadata: created schema %u in %s", CKS_MD_SCHEMA_VERSION, dir);
        return CKS_OK;
    }
    if (rc != 0) {
        return cks_mdi_mdb_status(NULL, rc, "mdb_get(schema)");
    }

    if (cks_md_schema_decode(val.mv_data, val.mv_size, &schema) != CKS_OK) {
        cks_error("metadata: %s: corrupt schema number (%zu bytes)", dir, val.mv_size);
        return CKS_ERR_IO;
    }
    if (schema > CKS_MD_SCHEMA_VERSION) {
        cks_error("metadata: %s holds schema %llu, newer than this build's %u; "
                  "refusing to open it (upgrade ckstore or use another directory)",
                  dir, (unsigned long long)schema, CKS_MD_SCHEMA_VERSION);
        return CKS_ERR_UNSUPPORTED;
    }
    return CKS_OK;
}

static void md_files_remove(const char *dir)
{
    static const char *const names[] = {"data.mdb", "lock.mdb"};
    char path[4096];

    for (size_t i = 0; i < CKS_ARRAY_SIZE(names); i++) {
        if (snprintf(path, sizeof(path), "%s/%s", dir, names[i]) < (int)sizeof(path)) {
            (void)unlink(path);
        }
    }
}

cks_status_t cks_md_open(const char *dir, uint64_t map_size, cks_md_h *md_p)
{
    cks_status_t status;
    MDB_txn *txn;
    cks_md_h md;
    int created = 0;
    int dead = 0;
    int rc;

    if ((dir == NULL) || (dir[0] == '\0') || (md_p == NULL) || (map_size > SIZE_MAX)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (map_size == 0) {
        map_size = CKS_MD_MAP_SIZE_DEFAULT;
    }

    md = calloc(1, sizeof(*md));
    if (md == NULL) {
        cks_error("metadata: out of memory opening %s", dir);
        return CKS_ERR_NO_MEMORY;
    }

    if (mkdir(dir, 0700) == 0) {
        created = 1;
    } else if (errno != EEXIST) {
        cks_error("metadata: mkdir %s: %s", dir, strerror(errno));
        status = CKS_ERR_IO;
        goto free_md;
    }

    rc = mdb_env_create(&md->env);
    if (rc != 0) {
        status = cks_mdi_mdb_status(NULL, rc, "mdb_env_create");
        goto remove_dir;
    }
    if (((rc = mdb_env_set_maxdbs(md->env, MD_MAX_DBS)) != 0) ||
        ((rc = mdb_env_set_maxreaders(md->env, MD_MAX_READERS)) != 0) ||
        ((rc = mdb_env_set_mapsize(md->env, (size_t)map_size)) != 0)) {
        status = cks_mdi_mdb_status(NULL, rc, "mdb_env_set");
        goto close_env;
    }
    /* NOSYNC: see DESIGN above. NOTLS: read txns move between threads. */
    rc = mdb_env_open(md->env, dir, MDB_NOTLS | MDB_NOSYNC, 0600);
    if (rc != 0) {
        cks_error("metadata: opening the environment in %s failed", dir);
        status = cks_mdi_mdb_status(NULL, rc, "mdb_env_open");
        goto close_env;
    }
    rc = mdb_reader_check(md->env, &dead);
    if (rc != 0) {
        status = cks_mdi_mdb_status(NULL, rc, "mdb_reader_check");
        goto close_env;
    }
    if (dead > 0) {
        cks_info("metadata: %s: cleared %d reader slots of dead processes", dir, dead);
    }

    rc = mdb_txn_begin(md->env, NULL, 0, &txn);
    if (rc != 0) {
        status = cks_mdi_mdb_status(NULL, rc, "mdb_txn_begin");
        goto close_env;
    }
    for (int i = 0; i < MD_DB_COUNT; i++) {
        rc = mdb_dbi_open(txn, md_db_name[i], MDB_CREATE, &md->dbi[i]);
        if (rc != 0) {
            status = cks_mdi_mdb_status(NULL, rc, "mdb_dbi_open");
            goto abort_txn;
        }
    }
    status = md_schema_check(md, txn, dir);
    if (status != CKS_OK) {
        goto abort_txn;
    }
    rc = mdb_txn_commit(txn); /* frees txn whatever the result */
    if (rc != 0) {
        status = cks_mdi_mdb_status(NULL, rc, "mdb_txn_commit(open)");
        goto close_env;
    }

    cks_debug("metadata: opened %s (map %llu bytes)", dir, (unsigned long long)map_size);
    *md_p = md;
    return CKS_OK;

abort_txn:
    mdb_txn_abort(txn);
close_env:
    mdb_env_close(md->env);
remove_dir:
    if (created) {
        md_files_remove(dir);
        (void)rmdir(dir);
    }
free_md:
    free(md);
    return status;
}

void cks_md_close(cks_md_h md)
{
    if (md == NULL) {
        return;
    }
    mdb_env_close(md->env);
    free(md);
}

cks_status_t cks_md_sync(cks_md_h md)
{
    int rc;

    if (md == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    rc = mdb_env_sync(md->env, 1);
    if (rc != 0) {
        return cks_mdi_mdb_status(NULL, rc, "mdb_env_sync");
    }
    return CKS_OK;
}

cks_status_t cks_md_stat(cks_md_h md, uint64_t *map_size_p, uint64_t *used_bytes_p)
{
    MDB_envinfo info;
    MDB_stat st;
    int rc;

    if ((md == NULL) || (map_size_p == NULL) || (used_bytes_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (((rc = mdb_env_info(md->env, &info)) != 0) ||
        ((rc = mdb_env_stat(md->env, &st)) != 0)) {
        return cks_mdi_mdb_status(NULL, rc, "mdb_env_info");
    }
    *map_size_p = info.me_mapsize;
    *used_bytes_p = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    return CKS_OK;
}

/* ---- transactions ------------------------------------------------------- */

cks_status_t cks_md_txn_begin(cks_md_h md, int write, cks_md_txn_h *txn_p)
{
    cks_status_t status;
    cks_md_txn_h txn;
    int rc;

    if ((md == NULL) || (txn_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    txn = calloc(1, sizeof(*txn));
    if (txn == NULL) {
        cks_error("metadata: out of memory beginning a transaction");
        return CKS_ERR_NO_MEMORY;
    }
    txn->md = md;
    txn->write = !!write;
    rc = mdb_txn_begin(md->env, NULL, write ? 0 : MDB_RDONLY, &txn->txn);
    if (rc != 0) {
        status = cks_mdi_mdb_status(NULL, rc, "mdb_txn_begin");
        goto free_txn;
    }
    *txn_p = txn;
    return CKS_OK;

free_txn:
    free(txn);
    return status;
}

cks_status_t cks_md_txn_begin_nested(cks_md_txn_h parent, cks_md_txn_h *txn_p)
{
    cks_status_t status;
    cks_md_txn_h txn;
    int rc;

    if ((parent == NULL) || (txn_p == NULL) || !parent->write) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (parent->poisoned) {
        return CKS_ERR_BAD_STATE;
    }
    txn = calloc(1, sizeof(*txn));
    if (txn == NULL) {
        cks_error("metadata: out of memory beginning a nested transaction");
        return CKS_ERR_NO_MEMORY;
    }
    txn->md = parent->md;
    txn->write = 1;
    txn->parent = parent;
    rc = mdb_txn_begin(parent->md->env, parent->txn, 0, &txn->txn);
    if (rc != 0) {
        status = cks_mdi_mdb_status(NULL, rc, "mdb_txn_begin (nested)");
        free(txn);
        return status;
    }
    *txn_p = txn;
    return CKS_OK;
}

cks_status_t cks_md_txn_commit(cks_md_txn_h txn)
{
    cks_status_t status = CKS_OK;
    int rc;

    if (txn == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (txn->poisoned) {
        mdb_txn_abort(txn->txn);
        status = CKS_ERR_BAD_STATE;
    } else {
        rc = mdb_txn_commit(txn->txn); /* frees the LMDB txn whatever the result */
        if (rc != 0) {
            /* a nested commit that failed leaves its parent unusable */
            status = cks_mdi_mdb_status(txn->parent, rc, "mdb_txn_commit");
        }
    }
    free(txn);
    return status;
}

void cks_md_txn_abort(cks_md_txn_h txn)
{
    if (txn == NULL) {
        return;
    }
    mdb_txn_abort(txn->txn);
    free(txn);
}
