/*
 * DESIGN: restore leases. A client that opens a restore holds the version
 * on every server (VERSION_HOLD: job, version, a holder id, a lease); while
 * any holder's lease runs, retention (mdq.c) keeps the version's record and
 * every chunk its manifest uses, so a restore that began is not cut short
 * by the checkpoints that follow it. The client renews the lease while it
 * reads and lets go at close; a client that dies leaves a lease that simply
 * runs out. Retention frees a version once nothing holds it, at the job's
 * next commit. Explicit deletes are not held back (their own reads are:
 * cks_sv_free_after_reads).
 *
 * Never: hold more than CKS_SV_HOLDS_MAX leases (a further one is refused),
 * or longer than CKS_SV_HOLD_MAX_MS from its last renewal.
 */
#include "server_int.h"

#include <stdlib.h>
#include <string.h>

#define CKS_SV_HOLDS_MAX   4096
#define CKS_SV_HOLD_MAX_MS (10u * 60u * 1000u)

struct cks_sv_hold {
    char job[CKS_JOB_MAX_LEN];
    uint32_t job_len;
    uint64_t version;
    uint64_t holder;
    uint64_t until_ns;
};

/* Drop the leases that ran out. */
static void cks_sv_holds_expire(cks_server_h s, uint64_t now)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nholds; i++) {
        if (s->holds[i].until_ns > now) {
            s->holds[n++] = s->holds[i];
        }
    }
    s->nholds = n;
}

void cks_sv_version_hold(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                         const cks_msg_version_hold_t *m)
{
    uint64_t now = cks_time_ns();
    size_t i;

    if (m->job.len == 0 || m->job.len > CKS_JOB_MAX_LEN) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM, "a hold needs a job name");
        return;
    }
    if (m->lease_ms > CKS_SV_HOLD_MAX_MS) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_INVALID_PARAM,
                            "a lease of %u ms is longer than the most, %u ms", m->lease_ms,
                            CKS_SV_HOLD_MAX_MS);
        return;
    }
    cks_sv_holds_expire(s, now);
    for (i = 0; i < s->nholds; i++) {
        cks_sv_hold_t *h = &s->holds[i];
        if (h->holder == m->holder && h->version == m->version && h->job_len == m->job.len &&
            memcmp(h->job, m->job.ptr, m->job.len) == 0) {
            break;
        }
    }
    if (m->lease_ms == 0) {
        if (i < s->nholds) {
            s->holds[i] = s->holds[--s->nholds];
        }
        cks_sv_reply_status(conn, req_id, CKS_OK, NULL);
        return;
    }
    if (i == s->nholds) {
        if (s->nholds == CKS_SV_HOLDS_MAX) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_BUSY,
                                "%u restores hold versions already: retention will not wait "
                                "for this one",
                                CKS_SV_HOLDS_MAX);
            return;
        }
        void *p = cks_array_grow(s->holds, &s->capholds, s->nholds + 1, sizeof(*s->holds),
                                 16);
        if (p == NULL) {
            cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "no memory for a lease");
            return;
        }
        s->holds = p;
        cks_sv_hold_t *h = &s->holds[s->nholds++];
        memcpy(h->job, m->job.ptr, m->job.len);
        h->job_len = (uint32_t)m->job.len;
        h->version = m->version;
        h->holder  = m->holder;
    }
    s->holds[i].until_ns = now + (uint64_t)m->lease_ms * 1000000ull;
    cks_sv_reply_status(conn, req_id, CKS_OK, NULL);
}

size_t cks_sv_held(cks_server_h s, const char *job, size_t job_len, uint64_t *out, size_t max)
{
    size_t n = 0;
    cks_sv_holds_expire(s, cks_time_ns());
    for (size_t i = 0; i < s->nholds && n < max; i++) {
        const cks_sv_hold_t *h = &s->holds[i];
        size_t j;
        if (h->job_len != job_len || memcmp(h->job, job, job_len) != 0) {
            continue;
        }
        for (j = 0; j < n && out[j] != h->version; j++) {
        }
        if (j == n) {
            out[n++] = h->version;
        }
    }
    return n;
}

void cks_sv_holds_fini(cks_server_h s)
{
    free(s->holds);
    s->holds  = NULL;
    s->nholds = s->capholds = 0;
}
