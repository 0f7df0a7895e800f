/*
 * DESIGN: Partial Experts Checkpoint (PEC) helpers of libckstore (the
 * "PEC helpers" section of include/ckstore.h; definitions and a worked
 * example in docs/PEC.md). Owns the rules that decide which experts a
 * trainer writes at a checkpoint (round-robin, or load-aware from the
 * trainer's token counts), and the arithmetic of staleness and of the
 * proportion of lost tokens (PLT) after a restore.
 *
 * Threads: any; every function is pure (reads its inputs, writes its
 * outputs, keeps no state), so concurrent calls need no lock.
 * Never: allocate, log, do I/O, touch a client handle, or write an output
 * before every input has been checked (outputs are written only on CKS_OK).
 *
 * Round-robin. Experts are visited in a fixed cyclic order of E positions
 * that takes the ranks in turn: position q is expert (q % R) * (E/R) + q / R
 * (rank q % R, its (q / R)-th local expert; ranks hold contiguous blocks).
 * At checkpoint c, layer l saves the K positions that start at
 * (c*K + l*layer_offset) mod E. Any K consecutive positions therefore spread
 * over the ranks as evenly as possible, and with the default layer_offset
 * = K the layers of one checkpoint continue each other, so that all L*K
 * positions of a checkpoint are consecutive and the per-rank total is even
 * as well. c*K walks each layer once round the cycle every E/K checkpoints.
 *
 * Load-aware. Top-n by a lexicographic key (k1 desc, k2 desc, id asc)
 * without sorting or scratch memory: binary search for the largest k1
 * threshold that keeps at least n candidates, then the same on k2 among
 * the candidates at that threshold, then the lowest ids. About 130 passes
 * over a layer's E entries, whatever K is. tests/client/test_pec.c compares
 * it with a qsort-based reference.
 */
#include "ckstore.h"

#include <stddef.h>
#include <stdint.h>

/* ---- parameters ------------------------------------------------------------------ */

/* Checked params with defaults applied. */
typedef struct {
    uint32_t layers;
    uint32_t experts;  /* E */
    uint32_t per_step; /* K */
    uint32_t ranks;    /* R */
    uint32_t per_rank; /* E / R */
    uint64_t offset;   /* layer_offset mod E */
    int has_max_age;
    uint64_t max_age;
    size_t entries; /* layers * E */
} pec_cfg_t;

static cks_status_t pec_cfg_get(const cks_pec_params_t *p, pec_cfg_t *cfg)
{
    uint64_t entries;

    if (p == NULL || p->layers == 0 || p->experts == 0 || p->per_step == 0 ||
        p->per_step > p->experts) {
        return CKS_ERR_INVALID_PARAM;
    }
    entries = (uint64_t)p->layers * p->experts; /* < 2^64: both < 2^32 */
    if (entries > CKS_PEC_MAX_ENTRIES || entries > SIZE_MAX / sizeof(uint64_t)) {
        return CKS_ERR_INVALID_PARAM;
    }
    cfg->layers = p->layers;
    cfg->experts = p->experts;
    cfg->per_step = p->per_step;
    cfg->ranks = 1;
    if (p->field_mask & CKS_PEC_FIELD_RANKS) {
        if (p->ranks == 0 || p->ranks > p->experts || p->experts % p->ranks != 0) {
            return CKS_ERR_INVALID_PARAM;
        }
        cfg->ranks = p->ranks;
    }
    cfg->per_rank = cfg->experts / cfg->ranks;
    cfg->offset =
        ((p->field_mask & CKS_PEC_FIELD_LAYER_OFFSET) ? p->layer_offset : p->per_step) %
        cfg->experts;
    cfg->has_max_age = !!(p->field_mask & CKS_PEC_FIELD_MAX_AGE);
    cfg->max_age = cfg->has_max_age ? p->max_age : 0;
    cfg->entries = (size_t)entries;
    return CKS_OK;
}

/* ---- schedule facts --------------------------------------------------------------- */

/* Expert at position q (0..E-1) of the rank-interleaved cyclic order. */
static uint32_t pec_position_expert(const pec_cfg_t *cfg, uint64_t q)
{
    return (uint32_t)((q % cfg->ranks) * cfg->per_rank + q / cfg->ranks);
}

/* First position of layer l at checkpoint c; every product has factors < 2^32. */
static uint64_t pec_layer_start(const pec_cfg_t *cfg, uint64_t ckpt, uint32_t layer)
{
    uint64_t e = cfg->experts;
    uint64_t a = ((ckpt % e) * cfg->per_step) % e;
    uint64_t b = ((layer % e) * cfg->offset) % e;

    return (a + b) % e;
}

cks_status_t cks_pec_bounds(const cks_pec_params_t *p, cks_pec_bounds_t *bounds_p)
{
    cks_pec_bounds_t b;
    pec_cfg_t cfg;
    cks_status_t status;
    uint64_t k, r, total;

    status = pec_cfg_get(p, &cfg);
    if (status != CKS_OK) {
        return status;
    }
    if (bounds_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    k = cfg.per_step;
    r = cfg.ranks;
    total = k * cfg.layers;
    b.period = (cfg.experts + k - 1) / k;
    b.max_staleness = b.period - 1;
    b.saved_per_ckpt = total;
    b.experts_per_rank = cfg.per_rank;
    if (cfg.offset == k % cfg.experts) {
        /* the L*K positions of a checkpoint are consecutive; rank = position % R */
        b.rank_load_min = total / r;
        b.rank_load_max = (total + r - 1) / r;
    } else {
        /* each layer alone is even: floor or ceil of K/R per rank */
        b.rank_load_min = cfg.layers * (k / r);
        b.rank_load_max = cfg.layers * ((k + r - 1) / r);
    }
    *bounds_p = b;
    return CKS_OK;
}

cks_status_t cks_pec_expert_rank(const cks_pec_params_t *p, uint32_t expert,
                                 uint32_t *rank_p)
{
    pec_cfg_t cfg;
    cks_status_t status;

    status = pec_cfg_get(p, &cfg);
    if (status != CKS_OK) {
        return status;
    }
    if (rank_p == NULL || expert >= cfg.experts) {
        return CKS_ERR_INVALID_PARAM;
    }
    *rank_p = expert / cfg.per_rank;
    return CKS_OK;
}

/* ---- round-robin ------------------------------------------------------------------ */

cks_status_t cks_pec_select_round_robin(const cks_pec_params_t *p, uint64_t ckpt,
                                        uint8_t *mask)
{
    pec_cfg_t cfg;
    cks_status_t status;
    uint8_t *row;
    uint64_t start, q;
    uint32_t l, j, e;

    status = pec_cfg_get(p, &cfg);
    if (status != CKS_OK) {
        return status;
    }
    if (mask == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    for (l = 0; l < cfg.layers; l++) {
        row = mask + (size_t)l * cfg.experts;
        start = pec_layer_start(&cfg, ckpt, l);
        for (e = 0; e < cfg.experts; e++) {
            row[e] = 0;
        }
        for (j = 0; j < cfg.per_step; j++) {
            q = start + j;
            if (q >= cfg.experts) {
                q -= cfg.experts;
            }
            row[pec_position_expert(&cfg, q)] = 1;
        }
    }
    return CKS_OK;
}

/* ---- load-aware ------------------------------------------------------------------- */

enum { PEC_BY_AGE, PEC_BY_TOKENS };

/* One layer's view for top-n selection. */
typedef struct {
    const uint64_t *tokens; /* the layer's row */
    const uint64_t *last;
    uint8_t *mask;
    uint32_t n; /* E */
    uint64_t ckpt;
    int order;       /* PEC_BY_AGE: (age, tokens, id); PEC_BY_TOKENS: (tokens, age, id) */
    int forced_only; /* candidates: only experts due under max_age */
    uint64_t max_age;
} pec_rank_t;

static uint64_t pec_age(const pec_rank_t *x, uint32_t e)
{
    /* never saved is older than any saved expert; ages otherwise < UINT64_MAX */
    return x->last[e] == CKS_PEC_NEVER ? UINT64_MAX : x->ckpt - x->last[e];
}

static uint64_t pec_k1(const pec_rank_t *x, uint32_t e)
{
    return x->order == PEC_BY_AGE ? pec_age(x, e) : x->tokens[e];
}

static uint64_t pec_k2(const pec_rank_t *x, uint32_t e)
{
    return x->order == PEC_BY_AGE ? x->tokens[e] : pec_age(x, e);
}

static int pec_candidate(const pec_rank_t *x, uint32_t e)
{
    return !x->mask[e] && (!x->forced_only || pec_age(x, e) >= x->max_age);
}

static uint32_t pec_count_candidates(const pec_rank_t *x)
{
    uint32_t e, c = 0;

    for (e = 0; e < x->n; e++) {
        c += (uint32_t)pec_candidate(x, e);
    }
    return c;
}

/* Candidates with k1 >= t (use_k1_eq == 0), or with k1 == k1_eq and k2 >= t. */
static uint32_t pec_count_at_least(const pec_rank_t *x, int use_k1_eq, uint64_t k1_eq,
                                   uint64_t t)
{
    uint32_t e, c = 0;

    for (e = 0; e < x->n; e++) {
        if (!pec_candidate(x, e)) {
            continue;
        }
        if (!use_k1_eq) {
            c += (uint32_t)(pec_k1(x, e) >= t);
        } else {
            c += (uint32_t)(pec_k1(x, e) == k1_eq && pec_k2(x, e) >= t);
        }
    }
    return c;
}

/* Largest t in [lo, hi] with count_at_least(t) >= want; count_at_least(lo) >= want. */
static uint64_t pec_threshold(const pec_rank_t *x, int use_k1_eq, uint64_t k1_eq,
                              uint64_t lo, uint64_t hi, uint32_t want)
{
    uint64_t mid;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2 + ((hi - lo) & 1); /* upper middle, no overflow */
        if (pec_count_at_least(x, use_k1_eq, k1_eq, mid) >= want) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

/* Mark the best `want` candidates (1 <= want <= candidates) in x->mask. */
static void pec_select_top(pec_rank_t *x, uint32_t want)
{
    uint64_t lo = UINT64_MAX, hi = 0, t, u, k1, k2;
    uint32_t e, above = 0, tied;

    /* t: largest k1 that keeps at least `want` candidates at or above it */
    for (e = 0; e < x->n; e++) {
        if (pec_candidate(x, e)) {
            k1 = pec_k1(x, e);
            lo = k1 < lo ? k1 : lo;
            hi = k1 > hi ? k1 : hi;
        }
    }
    t = pec_threshold(x, 0, 0, lo, hi, want);

    /* above: candidates with k1 > t, all taken (fewer than want, by the choice of t) */
    lo = UINT64_MAX;
    hi = 0;
    for (e = 0; e < x->n; e++) {
        if (!pec_candidate(x, e)) {
            continue;
        }
        k1 = pec_k1(x, e);
        if (k1 > t) {
            above++;
        } else if (k1 == t) {
            k2 = pec_k2(x, e);
            lo = k2 < lo ? k2 : lo;
            hi = k2 > hi ? k2 : hi;
        }
    }
    /* u: the same on k2 among the candidates with k1 == t */
    u = pec_threshold(x, 1, t, lo, hi, want - above);
    tied = want - above;
    for (e = 0; e < x->n; e++) {
        if (pec_candidate(x, e) && pec_k1(x, e) == t && pec_k2(x, e) > u) {
            tied--;
        }
    }
    /* tied: how many of the candidates at exactly (t, u) to take, by lowest id */
    for (e = 0; e < x->n; e++) {
        if (!pec_candidate(x, e)) {
            continue;
        }
        k1 = pec_k1(x, e);
        k2 = pec_k2(x, e);
        if (k1 > t || (k1 == t && k2 > u)) {
            x->mask[e] = 1;
        } else if (k1 == t && k2 == u && tied > 0) {
            x->mask[e] = 1;
            tied--;
        }
    }
}

cks_status_t cks_pec_select_load_aware(const cks_pec_params_t *p,
                                       const uint64_t *tokens_since_save,
                                       const uint64_t *last_saved, uint64_t ckpt,
                                       uint8_t *mask)
{
    pec_rank_t x;
    pec_cfg_t cfg;
    cks_status_t status;
    uint32_t l, e, forced, taken;
    size_t i;

    status = pec_cfg_get(p, &cfg);
    if (status != CKS_OK) {
        return status;
    }
    if (tokens_since_save == NULL || last_saved == NULL || mask == NULL ||
        ckpt == CKS_PEC_NEVER) {
        return CKS_ERR_INVALID_PARAM;
    }
    for (i = 0; i < cfg.entries; i++) {
        if (last_saved[i] != CKS_PEC_NEVER && last_saved[i] > ckpt) {
            return CKS_ERR_INVALID_PARAM; /* a save after the checkpoint being chosen */
        }
    }
    for (l = 0; l < cfg.layers; l++) {
        x.tokens = tokens_since_save + (size_t)l * cfg.experts;
        x.last = last_saved + (size_t)l * cfg.experts;
        x.mask = mask + (size_t)l * cfg.experts;
        x.n = cfg.experts;
        x.ckpt = ckpt;
        x.max_age = cfg.max_age;
        for (e = 0; e < cfg.experts; e++) {
            x.mask[e] = 0;
        }
        taken = 0;
        if (cfg.has_max_age) {
            x.order = PEC_BY_AGE;
            x.forced_only = 1;
            forced = pec_count_candidates(&x);
            taken = forced < cfg.per_step ? forced : cfg.per_step;
            if (taken > 0) {
                pec_select_top(&x, taken);
            }
        }
        if (taken < cfg.per_step) {
            x.order = PEC_BY_TOKENS;
            x.forced_only = 0;
            pec_select_top(&x, cfg.per_step - taken);
        }
    }
    return CKS_OK;
}

cks_status_t cks_pec_note_saved(const cks_pec_params_t *p, const uint8_t *mask,
                                uint64_t ckpt, uint64_t *last_saved,
                                uint64_t *tokens_since_save)
{
    pec_cfg_t cfg;
    cks_status_t status;
    size_t i;

    status = pec_cfg_get(p, &cfg);
    if (status != CKS_OK) {
        return status;
    }
    if (mask == NULL || last_saved == NULL || ckpt == CKS_PEC_NEVER) {
        return CKS_ERR_INVALID_PARAM;
    }
    for (i = 0; i < cfg.entries; i++) {
        if (mask[i]) {
            last_saved[i] = ckpt;
            if (tokens_since_save != NULL) {
                tokens_since_save[i] = 0;
            }
        }
    }
    return CKS_OK;
}

/* ---- after a restore -------------------------------------------------------------- */

cks_status_t cks_pec_staleness(const cks_pec_params_t *p, uint64_t restored_step,
                               const uint64_t *saved_step, uint64_t *staleness,
                               cks_pec_staleness_stats_t *stats_p)
{
    cks_pec_staleness_stats_t st = {0};
    pec_cfg_t cfg;
    cks_status_t status;
    double sum = 0.0;
    uint64_t saved = 0, s;
    size_t i;

    status = pec_cfg_get(p, &cfg);
    if (status != CKS_OK) {
        return status;
    }
    if (saved_step == NULL || staleness == NULL || restored_step == CKS_PEC_NEVER) {
        return CKS_ERR_INVALID_PARAM;
    }
    for (i = 0; i < cfg.entries; i++) {
        if (saved_step[i] != CKS_PEC_NEVER && saved_step[i] > restored_step) {
            return CKS_ERR_INVALID_PARAM; /* newer than the version restored */
        }
    }
    for (i = 0; i < cfg.entries; i++) {
        if (saved_step[i] == CKS_PEC_NEVER) {
            staleness[i] = CKS_PEC_NEVER;
            st.never++;
            st.stale++;
            continue;
        }
        s = restored_step - saved_step[i];
        staleness[i] = s;
        st.max = s > st.max ? s : st.max;
        st.stale += (uint64_t)(s > 0);
        sum += (double)s;
        saved++;
    }
    st.mean = saved > 0 ? sum / (double)saved : 0.0;
    if (stats_p != NULL) {
        *stats_p = st;
    }
    return CKS_OK;
}

cks_status_t cks_pec_plt(const cks_pec_params_t *p, const uint64_t *tokens_lost,
                         uint64_t tokens_routed, double *plt_p)
{
    pec_cfg_t cfg;
    cks_status_t status;
    uint64_t lost = 0;
    size_t i;

    status = pec_cfg_get(p, &cfg);
    if (status != CKS_OK) {
        return status;
    }
    if (tokens_lost == NULL || plt_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    for (i = 0; i < cfg.entries; i++) {
        if (tokens_lost[i] > UINT64_MAX - lost) {
            return CKS_ERR_INVALID_PARAM;
        }
        lost += tokens_lost[i];
    }
    if (lost > tokens_routed) {
        return CKS_ERR_INVALID_PARAM; /* the window does not cover the lost tokens */
    }
    *plt_p = tokens_routed == 0 ? 0.0 : (double)lost / (double)tokens_routed;
    return CKS_OK;
}
