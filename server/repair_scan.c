/*
 * DESIGN: repair's scan - which chunks the placement puts on this server
 * and it holds no record of (the walk of a version's manifest, shared with
 * promote.c's checks) - the task list it fills, and the small helpers on
 * version states that catch-up and repair share. See repair.c for the
 * whole design.
 *
 * Never: write to LMDB here (a read transaction only), or start a task
 * (repair.c does, as the pacing allows).
 */
#include "repair_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- state ------------------------------------------------------------------------- */


size_t cks_rp_ckey(uint8_t *buf, const cks_rp_task_t *t)
{
    size_t n = cks_vkey(buf, t->job, t->job_len, t->version);
    memcpy(buf + n, t->key, t->key_len);
    n += t->key_len;
    buf[n++] = 0;
    cks_put_be64(buf + n, t->stripe);
    n += 8;
    buf[n++] = (uint8_t)t->idx;
    return n;
}

int cks_rp_restorable(uint32_t state)
{
    return state == CKS_VSTATE_PROTECTED || state == CKS_VSTATE_DEGRADED;
}

/* Is state `a` better than `b` (the same version): PROTECTED over
 * DEGRADED, and fewer chunks missing. */
int cks_rp_better(uint32_t a_state, uint64_t a_missing, uint32_t b_state,
                         uint64_t b_missing)
{
    if (!cks_rp_restorable(a_state)) {
        return 0;
    }
    if (!cks_rp_restorable(b_state)) {
        return 1;
    }
    if (a_state != b_state) {
        return a_state == CKS_VSTATE_PROTECTED;
    }
    return a_state == CKS_VSTATE_DEGRADED && a_missing < b_missing;
}

void cks_rp_rec_from_entry(cks_md_version_t *r, const cks_msg_version_entry_t *e)
{
    *r = (cks_md_version_t){e->version,    e->parent,     (cks_vstate_t)e->state,
                            e->nranks,     e->created_ns, e->sealed_ns,
                            e->nobjects,   e->bytes,      e->k,
                            e->m,          e->chunk_size, e->redundancy,
                            e->missing};
}


/* ---- repair: which chunks placed here are missing --------------------------------- */


/* Walk the manifest of (job, version): call cb for every chunk the placement
 * puts on this server that it holds no record of. Returns how many. */
cks_status_t cks_rp_walk(cks_server_h s, cks_md_txn_h txn, const char *job,
                                size_t job_len, const cks_md_version_t *rec,
                                cks_rp_missing_cb_t cb, void *arg, uint64_t *n_p)
{
    cks_md_object_t *objs = malloc(CKS_WIRE_MAX_ENTRIES * sizeof(*objs));
    char after[CKS_KEY_MAX_LEN + 1];
    size_t after_len = 0, count;
    int more         = 1;
    cks_status_t status = objs ? CKS_OK : CKS_ERR_NO_MEMORY;
    unsigned k = rec->ec_k, m = rec->ec_m;

    *n_p = 0;
    if (k == 0 || m == 0 || rec->chunk_size == 0) {
        free(objs);
        return status;
    }
    while (status == CKS_OK && more) {
        status = cks_md_object_list(txn, job, job_len, rec->version, after_len ? after : NULL,
                                    after_len, objs, CKS_WIRE_MAX_ENTRIES, &count, &more);
        for (size_t i = 0; status == CKS_OK && i < count; i++) {
            const cks_md_object_t *o = &objs[i];
            uint64_t stripes         = cks_ec_stripe_count(o->size, k, rec->chunk_size);
            for (uint64_t st = 0; status == CKS_OK && st < stripes; st++) {
                uint16_t group[CKS_PLACE_WIDTH_MAX];
                if (cks_place(s->map, job, job_len, o->key, o->key_len, st, k, m, NULL,
                              group) != CKS_OK) {
                    break;
                }
                for (unsigned idx = 0; idx < k + m; idx++) {
                    cks_md_chunk_t ch;
                    if (group[idx] != s->self) {
                        continue;
                    }
                    cks_status_t cs = cks_md_chunk_get(txn, job, job_len, o->source_version,
                                                       o->key, o->key_len, st, idx, &ch);
                    if (cs == CKS_OK) {
                        continue;
                    }
                    if (cs != CKS_ERR_NO_SUCH_KEY) {
                        status = cs;
                        break;
                    }
                    (*n_p)++;
                    if (cb != NULL) {
                        cks_rp_task_t t = {0};
                        memcpy(t.job, job, job_len);
                        t.job_len = (uint32_t)job_len;
                        memcpy(t.key, o->key, o->key_len);
                        t.key_len = o->key_len;
                        t.version = o->source_version;
                        t.mversion = rec->version;
                        t.stripe  = st;
                        t.idx     = idx;
                        t.k       = k;
                        t.m       = m;
                        t.chunk   = rec->chunk_size;
                        cb(&t, arg);
                    }
                }
            }
        }
        if (status == CKS_OK && count > 0) {
            after_len = objs[count - 1].key_len;
            memcpy(after, objs[count - 1].key, after_len);
        }
        more = more && count > 0;
    }
    free(objs);
    return status;
}

static void cks_rp_task_add(const cks_rp_task_t *t, void *arg)
{
    cks_rp_t *rp = arg;
    uint8_t key[CKS_JOB_MAX_LEN + CKS_KEY_MAX_LEN + 32];
    size_t klen = cks_rp_ckey(key, t);
    if (rp->ntasks >= CKS_RP_TASKS_MAX || cks_hmap_get(rp->queued, key, klen) != NULL ||
        cks_hmap_put(rp->queued, key, klen, rp) != CKS_OK) {
        return; /* queued already, or more than a scan takes: the next scan */
    }
    rp->tasks[rp->ntasks++] = *t;
}

cks_status_t cks_rp_vers_add(const char *job, size_t job_len, const cks_md_version_t *v,
                                    void *arg)
{
    cks_rp_vers_t *vs = arg;
    if (!cks_rp_restorable(v->state)) {
        return CKS_OK;
    }
    if (vs->degraded_coord_only &&
        (v->state != CKS_VSTATE_DEGRADED ||
         cks_place_coordinator(vs->s->map, job, job_len, v->version) != vs->s->self)) {
        return CKS_OK;
    }
    void *p = cks_array_grow(vs->v, &vs->cap, vs->n + 1, sizeof(*vs->v), 64);
    if (p == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    vs->v = p;
    memcpy(vs->v[vs->n].job, job, job_len);
    vs->v[vs->n].job[job_len] = '\0';
    vs->v[vs->n].job_len      = (uint32_t)job_len;
    vs->v[vs->n].rec          = *v;
    vs->n++;
    return CKS_OK;
}

/* Find every chunk placed here that is missing: the task list. */
void cks_rp_scan(cks_server_h s)
{
    cks_rp_t *rp      = s->rp;
    cks_rp_vers_t vs  = {NULL, 0, 0, 0, s};
    cks_md_txn_h txn;
    cks_status_t status;
    uint64_t before = rp->ntasks - rp->taski;

    rp->scan_wanted    = 0;
    rp->next_scan_ns   = cks_time_ns() + CKS_RP_SCAN_EVERY_NS;
    rp->failed_at_scan = rp->failed;
    if (rp->taski > 0) { /* drop the tasks done */
        memmove(rp->tasks, rp->tasks + rp->taski, (rp->ntasks - rp->taski) * sizeof(*rp->tasks));
        rp->ntasks -= rp->taski;
        rp->taski = 0;
    }
    if (rp->tasks == NULL &&
        (rp->tasks = malloc(CKS_RP_TASKS_MAX * sizeof(*rp->tasks))) == NULL) {
        return;
    }
    status = cks_md_txn_begin(s->md, 0, &txn);
    if (status != CKS_OK) {
        return;
    }
    status = cks_md_version_foreach(txn, cks_rp_vers_add, &vs);
    for (size_t i = 0; status == CKS_OK && i < vs.n; i++) {
        uint64_t n;
        status = cks_rp_walk(s, txn, vs.v[i].job, vs.v[i].job_len, &vs.v[i].rec,
                             cks_rp_task_add, rp, &n);
    }
    cks_md_txn_abort(txn);
    free(vs.v);
    if (status != CKS_OK) {
        cks_warn("repair: scan failed: %s", cks_status_string(status));
    }
    if (rp->ntasks > before) {
        cks_info("repair: %zu chunks placed here are missing: rebuilding them (at most %llu "
                 "MiB/s)", rp->ntasks, (unsigned long long)(rp->rate_cap >> 20));
    }
}

/* Does this server hold the task's chunk by now (sent by another member
 * that rebuilt the stripe)? */
int cks_rp_chunk_held(cks_server_h s, const cks_rp_task_t *t)
{
    cks_md_txn_h txn;
    cks_md_chunk_t ch;
    if (cks_md_txn_begin(s->md, 0, &txn) != CKS_OK) {
        return 0;
    }
    int held = cks_md_chunk_get(txn, t->job, t->job_len, t->version, t->key, t->key_len,
                                t->stripe, t->idx, &ch) == CKS_OK;
    cks_md_txn_abort(txn);
    return held;
}
