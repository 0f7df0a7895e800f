/*
 * DESIGN: the self-healing state of a cluster server: its life cycle
 * (cks_rp_init, cks_rp_fini) and its tick from the progress loop
 * (cks_rp_progress): catch-up rounds begun and stepped (catchup.c), repair
 * scans and tasks started as the pacing allows (repair.c), the DEGRADED
 * versions checked for promotion (promote.c). See repair.c for the whole
 * design.
 *
 * Never: block, or be called by the three files it ticks (it is above them).
 */
#include "repair_int.h"

#include <stdlib.h>

cks_status_t cks_rp_init(cks_server_h s)
{
    cks_rp_t *rp = calloc(1, sizeof(*rp));
    if (rp == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    rp->s        = s;
    rp->answered = calloc(cks_cluster_nservers(s->map), 1);
    if (rp->answered == NULL || cks_hmap_create(&rp->queued) != CKS_OK ||
        cks_hmap_create(&rp->checking) != CKS_OK) {
        free(rp->answered);
        cks_hmap_destroy(rp->queued);
        free(rp);
        return CKS_ERR_NO_MEMORY;
    }
    rp->rate_cap  = s->p.repair_rate ? s->p.repair_rate : CKS_RP_RATE_DEFAULT;
    rp->idle_cap  = s->p.repair_idle_rate ? s->p.repair_idle_rate : UINT64_MAX;
    rp->start_ns  = cks_time_ns();
    rp->tokens_ns = rp->start_ns;
    rp->win_ns    = rp->start_ns;
    rp->next_check_ns = rp->start_ns + cks_rp_check_every();
    rp->peer      = (size_t)-1;
    rp->held_tail = &rp->held;
    s->rp         = rp;
    if (cks_cluster_nservers(s->map) == 1) {
        rp->synced = 1;
    }
    if (cks_rp_decoders_start(s, s->p.encoders) != CKS_OK) {
        cks_rp_fini(s);
        return CKS_ERR_NO_MEMORY;
    }
    return CKS_OK;
}

void cks_rp_fini(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    if (rp == NULL) {
        return;
    }
    rp->taski = rp->ntasks; /* no task starts from here on */
    cks_rp_decoders_stop(s);
    cks_rp_bufs_free(rp);
    cks_rp_parked_drop(rp);
    cks_rp_release_held(s, 1);
    cks_rp_round_reset(rp);
    cks_hmap_destroy(rp->queued);
    cks_hmap_destroy(rp->checking);
    free(rp->answered);
    free(rp->tasks);
    free(rp);
    s->rp = NULL;
}

int cks_rp_progress(cks_server_h s)
{
    cks_rp_t *rp = s->rp;
    uint64_t now = cks_time_ns();
    int timeout  = 1000;

    if (rp == NULL || s->stop) {
        return -1;
    }
    cks_rp_decoded(s);
    if (!rp->round && now >= rp->next_round_ns) {
        cks_rp_round_begin(s);
    } else if (rp->round && rp->hold_until_ns != 0) {
        if (now >= rp->hold_until_ns) {
            cks_rp_round_step(s); /* test builds: a held round compares */
        }
        timeout = 100;
    }
    if (now - rp->win_ns >= 2000000000ull) { /* the rate over the last 2 s */
        rp->rate      = (uint64_t)((double)rp->win_bytes * 1e9 / (double)(now - rp->win_ns));
        rp->win_bytes = 0;
        rp->win_ns    = now;
    }
    if (!rp->synced) {
        return 100;
    }
    if (rp->failed > rp->failed_at_scan &&
        rp->next_scan_ns > now + CKS_RP_RESCAN_NS) {
        rp->next_scan_ns = now + CKS_RP_RESCAN_NS; /* tasks failed: try again soon */
    }
    if (rp->inflight == 0 && rp->taski >= rp->ntasks &&
        (rp->scan_wanted || now >= rp->next_scan_ns)) {
        cks_rp_scan(s);
    }
    if (rp->inflight == 0 && rp->taski >= rp->ntasks) {
        cks_rp_pool_drain(rp); /* nothing to rebuild: the buffers go back */
        if (rp->parked == NULL && rp->taken != rp->taken_told) {
            rp->taken_told = rp->taken;
            cks_rp_tell_done(s);
        }
    }
    int parked = cks_rp_parked_wake(s);
    if (parked >= 0 && parked < timeout) {
        timeout = parked;
    }
    if (rp->taski < rp->ntasks) {
        cks_rp_work_start(s);
        if (rp->taski < rp->ntasks && rp->inflight < CKS_RP_INFLIGHT) {
            timeout = 10; /* the bucket refills */
        }
    }
    if (rp->checks == 0 && now >= rp->next_check_ns) {
        cks_rp_check_versions(s);
    }
    return timeout;
}
