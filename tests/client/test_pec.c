/*
 * Unit tests of the PEC helpers (client-lib/pec.c, docs/PEC.md): pure
 * functions, no server. Round-robin and load-aware selections are compared
 * with slow references written here that share no code with the library
 * (an inverse position map with 128-bit arithmetic; a qsort of each layer);
 * the schedule's promises (K per layer, coverage window, rank balance,
 * interleaved layers) are checked over many geometries; staleness and PLT
 * on hand-computed examples, among them the worked example of docs/PEC.md.
 * Random inputs come from a fixed seed per test, printed on stderr; set
 * CKS_TEST_SEED=<n> to replay or vary it.
 */
#include "ckstore.h"
#include "cks_test_unit.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- seeds --------------------------------------------------------------------- */

/* The test's seed, printed: see cks_test_unit.h. */
static uint64_t test_seed(const char *name, uint64_t dflt)
{
    return cks_test_named_seed("pec", name, dflt);
}

static uint64_t rng_below(uint64_t *state, uint64_t n)
{
    return cks_test_rng_next(state) % n;
}

/* ---- helpers ------------------------------------------------------------------- */

static cks_pec_params_t params(uint32_t layers, uint32_t experts, uint32_t k,
                               uint32_t ranks)
{
    cks_pec_params_t p;

    memset(&p, 0, sizeof(p));
    p.layers = layers;
    p.experts = experts;
    p.per_step = k;
    if (ranks != 0) {
        p.field_mask |= CKS_PEC_FIELD_RANKS;
        p.ranks = ranks;
    }
    return p;
}

static void *xcalloc(size_t n, size_t size)
{
    void *ptr = calloc(n, size);

    cr_assert_not_null(ptr);
    return ptr;
}

/* Reference round-robin: expert e of layer l is saved at checkpoint c when its
 * position in the rank-interleaved order is among the K positions that start
 * at (c*K + l*offset) mod E. Written from the definition in docs/PEC.md with
 * the inverse map (expert -> position) and 128-bit arithmetic. */
static int ref_rr_saved(uint32_t experts, uint32_t k, uint32_t ranks, uint64_t offset,
                        uint64_t ckpt, uint32_t layer, uint32_t e)
{
    uint32_t per_rank = experts / ranks;
    uint64_t pos = (uint64_t)(e % per_rank) * ranks + e / per_rank;
    unsigned __int128 start =
        ((unsigned __int128)ckpt * k + (unsigned __int128)layer * offset) % experts;
    uint64_t dist = (pos + experts - (uint64_t)start) % experts;

    return dist < k;
}

/* A sweep of geometries: (E, K, R) with R | E, K in 1..E, a few layer counts. */
typedef struct {
    uint32_t layers, experts, k, ranks;
} geom_t;

static int k_in_sweep(uint32_t e, uint32_t k)
{
    /* every K up to E = 16; beyond, the edges, small K and K that do not divide E */
    return e <= 16 || k <= 4 || k == 7 || k == e / 2 || k + 3 >= e;
}

static size_t geometries(geom_t *out, size_t max)
{
    static const uint32_t es[] = {1, 2, 3, 5, 7, 8, 12, 16, 30, 64};
    static const uint32_t ls[] = {1, 2, 3, 7};
    size_t n = 0, i, j;
    uint32_t k, r;

    for (i = 0; i < sizeof(es) / sizeof(es[0]); i++) {
        for (k = 1; k <= es[i]; k++) {
            if (!k_in_sweep(es[i], k)) {
                continue;
            }
            for (r = 1; r <= es[i]; r++) {
                if (es[i] % r != 0 || (r > 4 && r != es[i])) {
                    continue;
                }
                for (j = 0; j < sizeof(ls) / sizeof(ls[0]); j++) {
                    if (n < max) {
                        out[n] = (geom_t){ls[j], es[i], k, r};
                    }
                    n++;
                }
            }
        }
    }
    return n;
}

/* Cheap in hot loops (a passing cr_assert reports to Criterion's runner):
 * plain test, and a failing assertion with the message only on a miss. */
#define CHECK(cond, ...)                                             \
    do {                                                             \
        if (!(cond)) {                                               \
            cr_assert_fail("check failed: " #cond ": " __VA_ARGS__); \
        }                                                            \
    } while (0)

#define MAX_GEOMS 4096

/* fn(g) for every geometry of the sweep; checks that the sweep fits. */
static void for_geometries(void (*fn)(const geom_t *g))
{
    static geom_t g[MAX_GEOMS];
    size_t ng = geometries(g, MAX_GEOMS);

    CHECK((ng) <= (MAX_GEOMS), "ng <= MAX_GEOMS");
    for (size_t gi = 0; gi < ng; gi++) {
        fn(&g[gi]);
    }
}

/* ---- round-robin --------------------------------------------------------------- */

/* rr_exactly_k_per_layer_and_matches_reference for one geometry. */
static void rr_exactly_k_geom(const geom_t *g)
{
    uint64_t c,
        ckpts[] = {0, 1, 2, 3, 5, 17, 1000, 123456789, UINT64_MAX - 1, UINT64_MAX};
    size_t ci;
    cks_pec_params_t p = params(g->layers, g->experts, g->k, g->ranks);
    size_t n = (size_t)g->layers * g->experts;
    uint8_t *mask = xcalloc(n, 1);
    uint32_t l, e, cnt;

    for (ci = 0; ci < sizeof(ckpts) / sizeof(ckpts[0]) + 40; ci++) {
        c = ci < sizeof(ckpts) / sizeof(ckpts[0]) ? ckpts[ci] : 20 + ci;
        memset(mask, 0xAA, n);
        CHECK((cks_pec_select_round_robin(&p, c, mask)) == (CKS_OK),
              "cks_pec_select_round_robin(&p, c, mask) == CKS_OK");
        for (l = 0; l < g->layers; l++) {
            cnt = 0;
            for (e = 0; e < g->experts; e++) {
                uint8_t m = mask[(size_t)l * g->experts + e];
                CHECK(m == 0 || m == 1, "mask byte %u", m);
                cnt += m;
                CHECK((m) == (ref_rr_saved(g->experts, g->k, g->ranks, g->k, c, l, e)),
                      "L=%u E=%u K=%u R=%u ckpt=%" PRIu64 " layer %u expert %u",
                      g->layers, g->experts, g->k, g->ranks, c, l, e);
            }
            CHECK((cnt) == (g->k), "L=%u E=%u K=%u R=%u ckpt %" PRIu64 " layer %u: %u",
                  g->layers, g->experts, g->k, g->ranks, c, l, cnt);
        }
    }
    free(mask);
}

Test(pec, rr_exactly_k_per_layer_and_matches_reference, .timeout = 60)
{
    for_geometries(rr_exactly_k_geom);
}

/* Every expert is saved at least once in every window of ceil(E/K) consecutive
 * checkpoints, and ceil(E/K) is the shortest such window; simulated from
 * checkpoint 0, the largest staleness seen is exactly bounds.max_staleness. */
/* rr_window_covers_every_expert for one geometry. */
static void rr_window_geom(const geom_t *g)
{
    cks_pec_params_t p = params(g->layers, g->experts, g->k, g->ranks);
    size_t n = (size_t)g->layers * g->experts, i;
    uint64_t period = (g->experts + g->k - 1) / g->k;
    uint64_t horizon = 3 * g->experts + 4, c, w, seen_max = 0;
    uint8_t *masks = xcalloc(n * horizon, 1);
    uint64_t *last = xcalloc(n, sizeof(uint64_t));
    cks_pec_bounds_t b;
    int short_window_misses = 0;

    CHECK((cks_pec_bounds(&p, &b)) == (CKS_OK), "cks_pec_bounds(&p, &b) == CKS_OK");
    CHECK((b.period) == (period), "b.period == period");
    CHECK((b.max_staleness) == (period - 1), "b.max_staleness == period - 1");
    for (c = 0; c < horizon; c++) {
        CHECK((cks_pec_select_round_robin(&p, c, masks + c * n)) == (CKS_OK),
              "cks_pec_select_round_robin(&p, c, masks + c * n) == CKS_OK");
    }
    for (c = 0; c + period <= horizon; c++) {
        for (i = 0; i < n; i++) {
            int hit = 0, hit_short = 0;
            for (w = 0; w < period; w++) {
                hit |= masks[(c + w) * n + i];
                if (w + 1 < period) {
                    hit_short |= masks[(c + w) * n + i];
                }
            }
            CHECK(hit,
                  "L=%u E=%u K=%u R=%u: entry %zu not saved in [%" PRIu64 ", %" PRIu64
                  "]",
                  g->layers, g->experts, g->k, g->ranks, i, c, c + period - 1);
            short_window_misses += !hit_short;
        }
    }
    /* a window one checkpoint shorter misses some expert (unless period is 1) */
    if (period > 1) {
        CHECK((short_window_misses) > (0), "E=%u K=%u", g->experts, g->k);
    }
    for (i = 0; i < n; i++) {
        last[i] = CKS_PEC_NEVER;
    }
    for (c = 0; c < horizon; c++) {
        CHECK((cks_pec_note_saved(&p, masks + c * n, c, last, NULL)) == (CKS_OK),
              "cks_pec_note_saved(&p, masks + c * n, c, last, NULL) == CKS_OK");
        if (c + 1 < period) {
            continue;
        }
        for (i = 0; i < n; i++) {
            CHECK((last[i]) != (CKS_PEC_NEVER), "last[i] != CKS_PEC_NEVER");
            CHECK((c - last[i]) <= (b.max_staleness), "c - last[i] <= b.max_staleness");
            seen_max = c - last[i] > seen_max ? c - last[i] : seen_max;
        }
    }
    CHECK((seen_max) == (b.max_staleness), "E=%u K=%u", g->experts, g->k);
    free(last);
    free(masks);
}

Test(pec, rr_window_covers_every_expert, .timeout = 120)
{
    for_geometries(rr_window_geom);
}

/* rr_layers_interleaved for one geometry (of two layers or more). */
static void rr_interleaved_geom(const geom_t *g)
{
    cks_pec_params_t p = params(g->layers, g->experts, g->k, g->ranks);
    cks_pec_params_t same = p;
    uint32_t E = g->experts, l, e;
    size_t n = (size_t)g->layers * E;
    uint8_t *mask = xcalloc(n, 1);
    uint8_t *mask0 = xcalloc(n, 1);
    uint64_t c;

    if (g->layers < 2) {
        free(mask);
        free(mask0);
        return;
    }
    same.field_mask |= CKS_PEC_FIELD_LAYER_OFFSET;
    same.layer_offset = 0;
    for (c = 0; c < 2 * (uint64_t)E + 2; c++) {
        CHECK((cks_pec_select_round_robin(&p, c, mask)) == (CKS_OK),
              "cks_pec_select_round_robin(&p, c, mask) == CKS_OK");
        CHECK((cks_pec_select_round_robin(&same, c, mask0)) == (CKS_OK),
              "cks_pec_select_round_robin(&same, c, mask0) == CKS_OK");
        for (l = 0; l + 1 < g->layers; l++) {
            int differ = memcmp(mask + (size_t)l * E, mask + (size_t)(l + 1) * E, E) != 0;
            /* default: consecutive layers save different experts whenever K < E */
            CHECK((differ) == (g->k < E), "E=%u K=%u ckpt %" PRIu64 " layers %u/%u", E,
                  g->k, c, l, l + 1);
            /* layer_offset 0: every layer saves the same experts */
            CHECK((memcmp(mask0 + (size_t)l * E, mask0 + (size_t)(l + 1) * E, E)) == (0),
                  "memcmp(mask0 + (size_t)l * E, mask0 + (size_t)(l + 1) * E, E) == 0");
        }
        /* default offset K: layer l at checkpoint c saves what layer 0 saves at c + l
         */
        for (l = 1; l < g->layers; l++) {
            for (e = 0; e < E; e++) {
                CHECK((mask[(size_t)l * E + e]) ==
                          (ref_rr_saved(E, g->k, g->ranks, 0, c + l, 0, e)),
                      "mask[(size_t)l * E + e] == ref_rr_saved(E, g->k, "
                      "g->ranks, 0, c + l, 0, e)");
            }
        }
    }
    free(mask);
    free(mask0);
}

Test(pec, rr_layers_interleaved, .timeout = 60)
{
    for_geometries(rr_interleaved_geom);
}

/* Balance across ranks. Per layer and checkpoint, the experts saved on each
 * rank differ by at most one (floor or ceil of K/R); with the default layer
 * offset the totals over all layers do too (floor or ceil of L*K/R); and the
 * counts always lie within bounds.rank_load_min .. rank_load_max. */
/* rr_rank_balance for one geometry, each layer offset. */
static void rr_balance_geom(const geom_t *g)
{
    uint64_t offsets[] = {UINT64_MAX /* default */, 0, 1, 3};
    size_t oi;
    for (oi = 0; oi < sizeof(offsets) / sizeof(offsets[0]); oi++) {
        cks_pec_params_t p = params(g->layers, g->experts, g->k, g->ranks);
        uint32_t E = g->experts, R = g->ranks, K = g->k, l, e, r;
        size_t n = (size_t)g->layers * E;
        uint8_t *mask = xcalloc(n, 1);
        uint64_t *total = xcalloc(R, sizeof(uint64_t));
        uint64_t *layer = xcalloc(R, sizeof(uint64_t));
        cks_pec_bounds_t b;
        uint64_t c, mn, mx, lmn, lmx;
        int dflt = offsets[oi] == UINT64_MAX;

        if (!dflt) {
            p.field_mask |= CKS_PEC_FIELD_LAYER_OFFSET;
            p.layer_offset = offsets[oi];
        }
        CHECK((cks_pec_bounds(&p, &b)) == (CKS_OK), "cks_pec_bounds(&p, &b) == CKS_OK");
        CHECK((b.experts_per_rank) == (E / R), "b.experts_per_rank == E / R");
        CHECK((b.saved_per_ckpt) == ((uint64_t)K * g->layers),
              "b.saved_per_ckpt == (uint64_t)K * g->layers");
        if (dflt) {
            CHECK((b.rank_load_max - b.rank_load_min) <= (1),
                  "b.rank_load_max - b.rank_load_min <= 1");
        }
        for (c = 0; c < 2 * (uint64_t)E + 3; c++) {
            CHECK((cks_pec_select_round_robin(&p, c, mask)) == (CKS_OK),
                  "cks_pec_select_round_robin(&p, c, mask) == CKS_OK");
            memset(total, 0, R * sizeof(uint64_t));
            for (l = 0; l < g->layers; l++) {
                memset(layer, 0, R * sizeof(uint64_t));
                for (e = 0; e < E; e++) {
                    uint32_t rank;
                    CHECK((cks_pec_expert_rank(&p, e, &rank)) == (CKS_OK),
                          "cks_pec_expert_rank(&p, e, &rank) == CKS_OK");
                    layer[rank] += mask[(size_t)l * E + e];
                    total[rank] += mask[(size_t)l * E + e];
                }
                lmn = UINT64_MAX;
                lmx = 0;
                for (r = 0; r < R; r++) {
                    lmn = layer[r] < lmn ? layer[r] : lmn;
                    lmx = layer[r] > lmx ? layer[r] : lmx;
                }
                CHECK((lmx - lmn) <= (1),
                      "E=%u K=%u R=%u layer %u: %" PRIu64 "..%" PRIu64, E, K, R, l, lmn,
                      lmx);
            }
            mn = UINT64_MAX;
            mx = 0;
            for (r = 0; r < R; r++) {
                mn = total[r] < mn ? total[r] : mn;
                mx = total[r] > mx ? total[r] : mx;
            }
            CHECK((mn) >= (b.rank_load_min), "mn >= b.rank_load_min");
            CHECK((mx) <= (b.rank_load_max), "mx <= b.rank_load_max");
            if (dflt) {
                CHECK((mx - mn) <= (1),
                      "L=%u E=%u K=%u R=%u ckpt %" PRIu64 ": %" PRIu64 "..%" PRIu64,
                      g->layers, E, K, R, c, mn, mx);
            }
        }
        free(layer);
        free(total);
        free(mask);
    }
}

Test(pec, rr_rank_balance, .timeout = 60)
{
    for_geometries(rr_balance_geom);
}

/* Without interleaving by rank (a plain 0, 1, 2, ... order over contiguous
 * blocks) K=1, R=4 would put every layer's save on one rank; the helper
 * spreads them. Regression guard for the rank-interleaved order. */
Test(pec, rr_small_case_by_hand, .timeout = 10)
{
    /* E=8, K=2, R=2 (rank 0: experts 0-3, rank 1: 4-7), L=2.
     * Order of positions: 0 4 1 5 2 6 3 7. Layer 0 starts at 2c, layer 1 at 2c+2. */
    static const uint8_t want[4][2][8] = {
        {{1, 0, 0, 0, 1, 0, 0, 0}, {0, 1, 0, 0, 0, 1, 0, 0}},
        {{0, 1, 0, 0, 0, 1, 0, 0}, {0, 0, 1, 0, 0, 0, 1, 0}},
        {{0, 0, 1, 0, 0, 0, 1, 0}, {0, 0, 0, 1, 0, 0, 0, 1}},
        {{0, 0, 0, 1, 0, 0, 0, 1}, {1, 0, 0, 0, 1, 0, 0, 0}},
    };
    cks_pec_params_t p = params(2, 8, 2, 2);
    uint8_t mask[16];
    uint32_t rank;
    uint64_t c;

    for (c = 0; c < 8; c++) {
        cr_assert_eq(cks_pec_select_round_robin(&p, c, mask), CKS_OK);
        cr_assert_eq(memcmp(mask, want[c % 4], sizeof(mask)), 0, "ckpt %" PRIu64, c);
    }
    cr_assert_eq(cks_pec_expert_rank(&p, 3, &rank), CKS_OK);
    cr_assert_eq(rank, 0);
    cr_assert_eq(cks_pec_expert_rank(&p, 4, &rank), CKS_OK);
    cr_assert_eq(rank, 1);
}

/* The masks of docs/PEC.md: E=16, K=4, L=4, R=4, checkpoints 1..4. Rows are
 * layers; the saved experts of each layer are listed. */
static const uint32_t doc_saved[4][4][4] = {
    /* ckpt 1 */ {{1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}, {0, 4, 8, 12}},
    /* ckpt 2 */ {{2, 6, 10, 14}, {3, 7, 11, 15}, {0, 4, 8, 12}, {1, 5, 9, 13}},
    /* ckpt 3 */ {{3, 7, 11, 15}, {0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}},
    /* ckpt 4 */ {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}},
};

Test(pec, rr_docs_example, .timeout = 10)
{
    cks_pec_params_t p = params(4, 16, 4, 4);
    cks_pec_bounds_t b;
    uint8_t mask[64], want[64];
    uint32_t c, l, j;

    for (c = 1; c <= 4; c++) {
        memset(want, 0, sizeof(want));
        for (l = 0; l < 4; l++) {
            for (j = 0; j < 4; j++) {
                want[l * 16 + doc_saved[c - 1][l][j]] = 1;
            }
        }
        cr_assert_eq(cks_pec_select_round_robin(&p, c, mask), CKS_OK);
        cr_assert_eq(memcmp(mask, want, sizeof(mask)), 0, "ckpt %u", c);
    }
    cr_assert_eq(cks_pec_bounds(&p, &b), CKS_OK);
    cr_assert_eq(b.period, 4);
    cr_assert_eq(b.max_staleness, 3);
    cr_assert_eq(b.saved_per_ckpt, 16);
    cr_assert_eq(b.experts_per_rank, 4);
    cr_assert_eq(b.rank_load_min, 4);
    cr_assert_eq(b.rank_load_max, 4);
}

/* ---- load-aware ---------------------------------------------------------------- */

/* Reference: sort each layer's candidates with qsort. */
static const uint64_t *ref_tokens, *ref_last;
static uint64_t ref_ckpt;
static int ref_by_age;

static uint64_t ref_age(uint32_t i)
{
    return ref_last[i] == CKS_PEC_NEVER ? UINT64_MAX : ref_ckpt - ref_last[i];
}

static int ref_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint64_t x1 = ref_by_age ? ref_age(x) : ref_tokens[x];
    uint64_t y1 = ref_by_age ? ref_age(y) : ref_tokens[y];
    uint64_t x2 = ref_by_age ? ref_tokens[x] : ref_age(x);
    uint64_t y2 = ref_by_age ? ref_tokens[y] : ref_age(y);

    if (x1 != y1) {
        return x1 > y1 ? -1 : 1;
    }
    if (x2 != y2) {
        return x2 > y2 ? -1 : 1;
    }
    return x < y ? -1 : (x > y ? 1 : 0);
}

static void ref_load_aware(const cks_pec_params_t *p, const uint64_t *tokens,
                           const uint64_t *last, uint64_t ckpt, uint8_t *mask)
{
    uint32_t E = p->experts, l, e, nf, nr, take;
    uint32_t *forced = xcalloc(E, sizeof(uint32_t));
    uint32_t *rest = xcalloc(E, sizeof(uint32_t));
    int has_age = !!(p->field_mask & CKS_PEC_FIELD_MAX_AGE);

    for (l = 0; l < p->layers; l++) {
        ref_tokens = tokens + (size_t)l * E;
        ref_last = last + (size_t)l * E;
        ref_ckpt = ckpt;
        nf = nr = 0;
        for (e = 0; e < E; e++) {
            if (has_age && ref_age(e) >= p->max_age) {
                forced[nf++] = e;
            } else {
                rest[nr++] = e;
            }
        }
        memset(mask + (size_t)l * E, 0, E);
        ref_by_age = 1;
        qsort(forced, nf, sizeof(uint32_t), ref_cmp);
        take = nf < p->per_step ? nf : p->per_step;
        for (e = 0; e < take; e++) {
            mask[(size_t)l * E + forced[e]] = 1;
        }
        ref_by_age = 0;
        qsort(rest, nr, sizeof(uint32_t), ref_cmp);
        for (e = 0; e < p->per_step - take; e++) {
            mask[(size_t)l * E + rest[e]] = 1;
        }
    }
    free(rest);
    free(forced);
}

Test(pec, la_top_k_by_tokens, .timeout = 10)
{
    cks_pec_params_t p = params(2, 6, 2, 0);
    /* layer 0: experts 4 and 1 have the most; layer 1: 0 and 5 */
    uint64_t tokens[12] = {10, 50, 20, 30, 90, 0, 70, 5, 5, 5, 5, 60};
    uint64_t last[12];
    uint8_t mask[12];
    static const uint8_t want[12] = {0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1};
    size_t i;

    for (i = 0; i < 12; i++) {
        last[i] = 3;
    }
    cr_assert_eq(cks_pec_select_load_aware(&p, tokens, last, 7, mask), CKS_OK);
    cr_assert_eq(memcmp(mask, want, sizeof(want)), 0);
}

Test(pec, la_tie_rules, .timeout = 10)
{
    /* E=6, K=3, one layer. Tokens: expert 0 has the most; 1..5 tie at 40.
     * Among the tied: expert 4 never saved (stalest of all), then experts 2
     * and 5 both saved at ckpt 1 (age 8) -> the lower id, 2. */
    cks_pec_params_t p = params(1, 6, 3, 0);
    uint64_t tokens[6] = {100, 40, 40, 40, 40, 40};
    uint64_t last[6] = {8, 6, 1, 5, CKS_PEC_NEVER, 1};
    static const uint8_t want[6] = {1, 0, 0, 0, 1, 0};
    static const uint8_t want2[6] = {1, 0, 1, 0, 1, 0};
    uint8_t mask[6];

    p.per_step = 2;
    cr_assert_eq(cks_pec_select_load_aware(&p, tokens, last, 9, mask), CKS_OK);
    cr_assert_eq(memcmp(mask, want, sizeof(want)), 0);
    p.per_step = 3;
    cr_assert_eq(cks_pec_select_load_aware(&p, tokens, last, 9, mask), CKS_OK);
    cr_assert_eq(memcmp(mask, want2, sizeof(want2)), 0);
    /* all equal: lowest ids */
    memset(tokens, 0, sizeof(tokens));
    for (int i = 0; i < 6; i++) {
        last[i] = 2;
    }
    cr_assert_eq(cks_pec_select_load_aware(&p, tokens, last, 9, mask), CKS_OK);
    cr_assert_eq(memcmp(mask, (uint8_t[6]){1, 1, 1, 0, 0, 0}, 6), 0);
}

Test(pec, la_max_age_first, .timeout = 10)
{
    /* E=5, K=2, max_age 3 at ckpt 10: experts 1 (age 4) and 3 (age 3) are due
     * although they have the fewest tokens; with three due, the oldest two. */
    cks_pec_params_t p = params(1, 5, 2, 0);
    uint64_t tokens[5] = {50, 1, 40, 2, 30};
    uint64_t last[5] = {9, 6, 9, 7, 8};
    uint8_t mask[5];

    p.field_mask |= CKS_PEC_FIELD_MAX_AGE;
    p.max_age = 3;
    cr_assert_eq(cks_pec_select_load_aware(&p, tokens, last, 10, mask), CKS_OK);
    cr_assert_eq(memcmp(mask, (uint8_t[5]){0, 1, 0, 1, 0}, 5), 0);
    /* one due: it, then the most tokens */
    last[3] = 9;
    cr_assert_eq(cks_pec_select_load_aware(&p, tokens, last, 10, mask), CKS_OK);
    cr_assert_eq(memcmp(mask, (uint8_t[5]){1, 1, 0, 0, 0}, 5), 0);
    /* three due (ages 4, 3, 3; never-saved counts as oldest): never, then age 4 */
    last[3] = 7;
    last[4] = CKS_PEC_NEVER;
    cr_assert_eq(cks_pec_select_load_aware(&p, tokens, last, 10, mask), CKS_OK);
    cr_assert_eq(memcmp(mask, (uint8_t[5]){0, 1, 0, 0, 1}, 5), 0);
    /* without the cap: by tokens */
    p.field_mask &= ~(uint64_t)CKS_PEC_FIELD_MAX_AGE;
    cr_assert_eq(cks_pec_select_load_aware(&p, tokens, last, 10, mask), CKS_OK);
    cr_assert_eq(memcmp(mask, (uint8_t[5]){1, 0, 1, 0, 0}, 5), 0);
}

Test(pec, la_matches_reference_random, .timeout = 120)
{
    uint64_t seed = test_seed("la_matches_reference_random", 20240807);
    uint64_t st = seed;
    int iter;

    for (iter = 0; iter < 3000; iter++) {
        uint32_t E = 1 + (uint32_t)rng_below(&st, 40),
                 L = 1 + (uint32_t)rng_below(&st, 4);
        cks_pec_params_t p = params(L, E, 1 + (uint32_t)rng_below(&st, E), 0);
        size_t n = (size_t)L * E, i;
        uint64_t *tokens = xcalloc(n, sizeof(uint64_t));
        uint64_t *last = xcalloc(n, sizeof(uint64_t));
        uint8_t *mask = xcalloc(n, 1);
        uint8_t *want = xcalloc(n, 1);
        uint64_t ckpt = rng_below(&st, 4) == 0 ? UINT64_MAX - 1 - rng_below(&st, 8)
                                               : 5 + rng_below(&st, 20);
        uint64_t range =
            rng_below(&st, 3) == 0 ? 3 : (rng_below(&st, 2) ? 1000 : UINT64_MAX);

        for (i = 0; i < n; i++) {
            tokens[i] = range == UINT64_MAX ? cks_test_rng_next(&st) : rng_below(&st, range);
            if (rng_below(&st, 8) == 0) {
                last[i] = CKS_PEC_NEVER;
            } else if (rng_below(&st, 2)) {
                last[i] = ckpt - rng_below(&st, 4); /* many ties in age */
            } else {
                last[i] = ckpt - rng_below(&st, ckpt < 6 ? ckpt + 1 : 6);
            }
        }
        if (rng_below(&st, 2)) {
            p.field_mask |= CKS_PEC_FIELD_MAX_AGE;
            p.max_age = rng_below(&st, 6);
        }
        cr_assert_eq(cks_pec_select_load_aware(&p, tokens, last, ckpt, mask), CKS_OK);
        ref_load_aware(&p, tokens, last, ckpt, want);
        cr_assert_eq(memcmp(mask, want, n), 0,
                     "seed %" PRIu64 " iter %d: L=%u E=%u K=%u max_age %s%" PRIu64, seed,
                     iter, L, E, p.per_step,
                     (p.field_mask & CKS_PEC_FIELD_MAX_AGE) ? "" : "(off) ", p.max_age);
        free(want);
        free(mask);
        free(last);
        free(tokens);
    }
}

/* With skewed loads (some experts get no tokens at all), load-aware without a
 * cap never saves an idle expert again; with max_age = ceil(E/K) every expert
 * is saved at least every max_age checkpoints. */
Test(pec, la_max_age_bounds_staleness, .timeout = 120)
{
    uint64_t seed = test_seed("la_max_age_bounds_staleness", 424242);
    uint64_t st = seed;
    uint32_t E, K;

    for (E = 1; E <= 24; E++) {
        for (K = 1; K <= E; K++) {
            cks_pec_params_t p = params(2, E, K, 0);
            uint64_t period = (E + K - 1) / K;
            size_t n = 2 * (size_t)E, i;
            uint64_t *tokens = xcalloc(n, sizeof(uint64_t));
            uint64_t *last = xcalloc(n, sizeof(uint64_t));
            uint8_t *mask = xcalloc(n, 1);
            uint64_t c, worst = 0;
            int capped;

            for (capped = 0; capped < 3; capped++) {
                /* 0: no cap; 1: max_age = ceil(E/K); 2: a looser cap */
                p.field_mask = capped ? CKS_PEC_FIELD_MAX_AGE : 0;
                p.max_age = capped == 2 ? period + 2 : period;
                for (i = 0; i < n; i++) {
                    last[i] = CKS_PEC_NEVER;
                    tokens[i] = 0;
                }
                worst = 0;
                for (c = 0; c < 200; c++) {
                    for (i = 0; i < n; i++) {
                        /* expert 0 of each layer is idle; the others skewed */
                        uint64_t e = i % E;
                        tokens[i] +=
                            e == 0 ? 0 : rng_below(&st, 1000) * (e % 3 == 0 ? 20 : 1);
                    }
                    cr_assert_eq(cks_pec_select_load_aware(&p, tokens, last, c, mask),
                                 CKS_OK);
                    cr_assert_eq(cks_pec_note_saved(&p, mask, c, last, tokens), CKS_OK);
                    if (c + 1 < period) {
                        continue;
                    }
                    for (i = 0; i < n; i++) {
                        uint64_t age =
                            last[i] == CKS_PEC_NEVER ? UINT64_MAX : c - last[i];
                        worst = age > worst ? age : worst;
                    }
                }
                if (capped) {
                    cr_assert_lt(worst, p.max_age,
                                 "seed %" PRIu64 " E=%u K=%u: age %" PRIu64, seed, E, K,
                                 worst);
                } else if (K < E) {
                    /* the idle expert starves once it has been saved */
                    cr_assert_geq(worst, 100, "seed %" PRIu64 " E=%u K=%u: age %" PRIu64,
                                  seed, E, K, worst);
                }
            }
            free(mask);
            free(last);
            free(tokens);
        }
    }
}

Test(pec, note_saved, .timeout = 10)
{
    cks_pec_params_t p = params(1, 4, 2, 0);
    static const uint8_t m[] = {0, 1, 0, 1};
    uint64_t last[4] = {1, 2, CKS_PEC_NEVER, CKS_PEC_NEVER};
    uint64_t tok[4] = {10, 20, 30, 40};

    cr_assert_eq(cks_pec_note_saved(&p, m, 5, last, tok), CKS_OK);
    cr_assert_eq(memcmp(last, (uint64_t[4]){1, 5, CKS_PEC_NEVER, 5}, sizeof(last)), 0);
    cr_assert_eq(memcmp(tok, (uint64_t[4]){10, 0, 30, 0}, sizeof(tok)), 0);
    cr_assert_eq(cks_pec_note_saved(&p, m, 6, last, NULL), CKS_OK);
    cr_assert_eq(last[3], 6);
    cr_assert_eq(tok[1], 0);
    cr_assert_eq(cks_pec_note_saved(&p, m, CKS_PEC_NEVER, last, tok),
                 CKS_ERR_INVALID_PARAM);
    cr_assert_eq(last[3], 6);
}

/* ---- staleness and PLT --------------------------------------------------------- */

Test(pec, staleness_values, .timeout = 10)
{
    cks_pec_params_t p = params(2, 3, 1, 0);
    uint64_t saved[6] = {700, 600, CKS_PEC_NEVER, 500, 700, 400};
    uint64_t out[6];
    cks_pec_staleness_stats_t st;

    cr_assert_eq(cks_pec_staleness(&p, 700, saved, out, &st), CKS_OK);
    cr_assert_eq(
        memcmp(out, (uint64_t[6]){0, 100, CKS_PEC_NEVER, 200, 0, 300}, sizeof(out)), 0);
    cr_assert_eq(st.max, 300);
    cr_assert_eq(st.never, 1);
    cr_assert_eq(st.stale, 4);
    cr_assert_float_eq(st.mean, 120.0, 1e-12); /* (0+100+200+0+300)/5 */
    cr_assert_eq(cks_pec_staleness(&p, 700, saved, out, NULL), CKS_OK);

    /* all saved at the restored step */
    for (int i = 0; i < 6; i++) {
        saved[i] = 900;
    }
    cr_assert_eq(cks_pec_staleness(&p, 900, saved, out, &st), CKS_OK);
    cr_assert_eq(st.max, 0);
    cr_assert_eq(st.stale, 0);
    cr_assert_float_eq(st.mean, 0.0, 1e-12);

    /* none ever saved */
    for (int i = 0; i < 6; i++) {
        saved[i] = CKS_PEC_NEVER;
    }
    cr_assert_eq(cks_pec_staleness(&p, 900, saved, out, &st), CKS_OK);
    cr_assert_eq(st.never, 6);
    cr_assert_eq(st.max, 0);
    cr_assert_eq(out[5], CKS_PEC_NEVER);

    /* a source newer than the restored version: error, outputs untouched */
    saved[2] = 901;
    memset(out, 0x5A, sizeof(out));
    memset(&st, 0x5A, sizeof(st));
    cr_assert_eq(cks_pec_staleness(&p, 900, saved, out, &st), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(out[0], 0x5A5A5A5A5A5A5A5Aull);
    cr_assert_eq(st.never, 0x5A5A5A5A5A5A5A5Aull);
    cr_assert_eq(cks_pec_staleness(&p, CKS_PEC_NEVER, saved, out, &st),
                 CKS_ERR_INVALID_PARAM);
}

Test(pec, plt_examples, .timeout = 10)
{
    cks_pec_params_t p = params(1, 4, 2, 0);
    uint64_t lost[4];
    double plt = -1.0;

    static const struct {
        const char *what;
        uint64_t lost[4], routed;
        double plt;
    } ok[] = {
        {"everything saved at the restored step: nothing lost", {0, 0, 0, 0}, 1000, 0.0},
        {"nothing ever saved: every token routed since the start is lost",
         {100, 300, 250, 350}, 1000, 1.0},
        {"mixed: experts 0 and 2 saved at the restored step, 1 and 3 earlier",
         {0, 120, 0, 30}, 1000, 0.15},
        {"empty window", {0, 0, 0, 0}, 0, 0.0},
    };

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        memcpy(lost, ok[i].lost, sizeof(lost));
        cr_assert_eq(cks_pec_plt(&p, lost, ok[i].routed, &plt), CKS_OK, "%s", ok[i].what);
        cr_assert_float_eq(plt, ok[i].plt, 1e-15, "%s: plt %g, want %g", ok[i].what, plt,
                           ok[i].plt);
    }
    /* more lost than routed; a sum past UINT64_MAX: errors, output untouched */
    plt = -1.0;
    lost[0] = 1001;
    cr_assert_eq(cks_pec_plt(&p, lost, 1000, &plt), CKS_ERR_INVALID_PARAM);
    lost[0] = UINT64_MAX;
    lost[1] = 1;
    cr_assert_eq(cks_pec_plt(&p, lost, UINT64_MAX, &plt), CKS_ERR_INVALID_PARAM);
    cr_assert_float_eq(plt, -1.0, 1e-15);
    lost[1] = 0;
    cr_assert_eq(cks_pec_plt(&p, lost, UINT64_MAX, &plt), CKS_OK);
    cr_assert_float_eq(plt, 1.0, 1e-15);
}

/* The recipe of docs/PEC.md end to end: round-robin every 100 steps after a
 * full base at step 0, per-step random routing, counters reset by
 * cks_pec_note_saved and kept with each version; after a restore the kept
 * counters are each expert's lost tokens. Checked against the per-step
 * history, and the staleness against the schedule's bound. */
Test(pec, recipe_matches_history, .timeout = 60)
{
    enum { L = 3, E = 10, K = 3, INTERVAL = 100, STEPS = 1500 };
    uint64_t seed = test_seed("recipe_matches_history", 77);
    uint64_t st = seed;
    cks_pec_params_t p = params(L, E, K, 0);
    static uint64_t hist[STEPS + 1][L * E]; /* assignments routed at each step */
    static uint64_t kept[STEPS / INTERVAL + 1][L * E]; /* counters stored per version */
    static uint64_t kept_last[STEPS / INTERVAL + 1][L * E];
    uint64_t counters[L * E], last[L * E], saved_step[L * E], stale[L * E];
    uint64_t routed_total = 0, step, c, restore_c, lost_check, window;
    uint8_t mask[L * E];
    cks_pec_bounds_t b;
    cks_pec_staleness_stats_t sst;
    double plt;
    size_t i;

    cr_assert_eq(cks_pec_bounds(&p, &b), CKS_OK);
    memset(counters, 0, sizeof(counters));
    for (i = 0; i < L * E; i++) {
        last[i] = 0; /* version 0 (step 0) is the full base */
    }
    memcpy(kept[0], counters, sizeof(counters));
    memcpy(kept_last[0], last, sizeof(last));
    for (step = 1; step <= STEPS; step++) {
        for (i = 0; i < L * E; i++) {
            hist[step][i] = rng_below(&st, 50) * (i % 4 + 1);
            counters[i] += hist[step][i];
            routed_total += hist[step][i];
        }
        if (step % INTERVAL == 0) {
            c = step / INTERVAL;
            cr_assert_eq(cks_pec_select_round_robin(&p, c, mask), CKS_OK);
            cr_assert_eq(cks_pec_note_saved(&p, mask, c, last, counters), CKS_OK);
            memcpy(kept[c], counters, sizeof(counters));
            memcpy(kept_last[c], last, sizeof(last));
        }
    }
    cr_assert_gt(routed_total, 0);
    for (restore_c = 1; restore_c <= STEPS / INTERVAL; restore_c++) {
        uint64_t oldest = restore_c * INTERVAL;
        uint64_t lost_sum = 0;

        for (i = 0; i < L * E; i++) {
            saved_step[i] = kept_last[restore_c][i] * INTERVAL; /* source version */
            oldest = saved_step[i] < oldest ? saved_step[i] : oldest;
            /* lost: routed to i in (saved_step, restored step] */
            lost_check = 0;
            for (step = saved_step[i] + 1; step <= restore_c * INTERVAL; step++) {
                lost_check += hist[step][i];
            }
            cr_assert_eq(kept[restore_c][i], lost_check, "ckpt %" PRIu64 " entry %zu",
                         restore_c, i);
            lost_sum += lost_check;
        }
        cr_assert_eq(cks_pec_staleness(&p, restore_c * INTERVAL, saved_step, stale, &sst),
                     CKS_OK);
        cr_assert_eq(sst.never, 0);
        cr_assert_leq(sst.max, b.max_staleness * INTERVAL);
        if (restore_c >= b.period) {
            cr_assert_eq(sst.max, b.max_staleness * INTERVAL, "ckpt %" PRIu64, restore_c);
        }
        /* window: every assignment in (oldest source, restored step] */
        window = 0;
        for (step = oldest + 1; step <= restore_c * INTERVAL; step++) {
            for (i = 0; i < L * E; i++) {
                window += hist[step][i];
            }
        }
        cr_assert_eq(cks_pec_plt(&p, kept[restore_c], window, &plt), CKS_OK);
        cr_assert_float_eq(plt, window ? (double)lost_sum / (double)window : 0.0, 1e-12);
        cr_assert(plt >= 0.0 && plt < 1.0);
    }
}

/* The restore of docs/PEC.md: full base at step 0, a checkpoint every 100
 * steps, restore of step 1000 (checkpoint 10); token rates per 100 steps the
 * same for every layer and every interval. */
Test(pec, docs_restore_example, .timeout = 10)
{
    static const uint64_t rate[16] = {9000, 2000, 1500, 4000, 1000, 6500, 2500, 1500,
                                      3000, 1200, 800,  2000, 4500, 1800, 3500, 2700};
    static const uint64_t want_layer_lost[4] = {77100, 83800, 61300, 62800};
    cks_pec_params_t p = params(4, 16, 4, 4);
    uint64_t last[64], saved_step[64], stale[64], lost[64], since_start = 0, window = 0;
    uint64_t layer_lost[4] = {0};
    uint8_t mask[64];
    cks_pec_staleness_stats_t sst;
    uint64_t c;
    double plt;
    size_t i;

    for (i = 0; i < 64; i++) {
        last[i] = 0;
    }
    for (c = 1; c <= 10; c++) {
        cr_assert_eq(cks_pec_select_round_robin(&p, c, mask), CKS_OK);
        cr_assert_eq(cks_pec_note_saved(&p, mask, c, last, NULL), CKS_OK);
    }
    for (i = 0; i < 64; i++) {
        saved_step[i] = last[i] * 100;
    }
    /* layer 0: experts 0,4,8,12 @800; 1,5,9,13 @900; 2,6,10,14 @1000; 3,7,11,15 @700 */
    cr_assert_eq(saved_step[0], 800);
    cr_assert_eq(saved_step[13], 900);
    cr_assert_eq(saved_step[2], 1000);
    cr_assert_eq(saved_step[3], 700);
    /* layer 1 is one checkpoint ahead: expert 0 @700, expert 3 @1000 */
    cr_assert_eq(saved_step[16 + 0], 700);
    cr_assert_eq(saved_step[16 + 3], 1000);
    /* layers 2 and 3 */
    cr_assert_eq(saved_step[32 + 0], 1000);
    cr_assert_eq(saved_step[48 + 0], 900);
    cr_assert_eq(cks_pec_staleness(&p, 1000, saved_step, stale, &sst), CKS_OK);
    cr_assert_eq(stale[3], 300);
    cr_assert_eq(sst.max, 300);
    cr_assert_float_eq(sst.mean, 150.0, 1e-12);
    cr_assert_eq(sst.stale, 48);
    cr_assert_eq(sst.never, 0);
    for (i = 0; i < 64; i++) {
        lost[i] = rate[i % 16] * stale[i] / 100;
        layer_lost[i / 16] += lost[i];
        since_start += rate[i % 16] * 10; /* steps 0..1000 */
        window += rate[i % 16] * 3;       /* steps 700..1000 */
    }
    cr_assert_eq(memcmp(layer_lost, want_layer_lost, sizeof(layer_lost)), 0,
                 "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, layer_lost[0],
                 layer_lost[1], layer_lost[2], layer_lost[3]);
    cr_assert_eq(since_start, 1900000);
    cr_assert_eq(window, 570000);
    cr_assert_eq(cks_pec_plt(&p, lost, since_start, &plt), CKS_OK);
    cr_assert_float_eq(plt, 285000.0 / 1900000.0, 1e-12); /* 0.15 */
    cr_assert_eq(cks_pec_plt(&p, lost, window, &plt), CKS_OK);
    cr_assert_float_eq(plt, 0.5, 1e-12);
}

/* ---- bad parameters ------------------------------------------------------------ */

Test(pec, bad_params, .timeout = 10)
{
    cks_pec_params_t p = params(2, 4, 2, 0), q;
    uint64_t a[8] = {0}, b[8] = {0}, c8[8];
    uint8_t mask[8];
    uint32_t rank = 77;
    cks_pec_bounds_t bd;
    double plt = -1.0;

    /* NULL params and outputs */
    cr_assert_eq(cks_pec_bounds(NULL, &bd), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_bounds(&p, NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_select_round_robin(NULL, 0, mask), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_select_round_robin(&p, 0, NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_select_load_aware(&p, NULL, b, 0, mask), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_select_load_aware(&p, a, NULL, 0, mask), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_select_load_aware(&p, a, b, 0, NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_select_load_aware(&p, a, b, CKS_PEC_NEVER, mask),
                 CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_note_saved(&p, NULL, 0, b, a), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_note_saved(&p, mask, 0, NULL, a), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_staleness(&p, 0, NULL, c8, NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_staleness(&p, 0, a, NULL, NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_plt(&p, NULL, 10, &plt), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_plt(&p, a, 10, NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_expert_rank(&p, 0, NULL), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_pec_expert_rank(&p, 4, &rank), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(rank, 77);

    /* geometry */
    q = p;
    q.layers = 0;
    cr_assert_eq(cks_pec_bounds(&q, &bd), CKS_ERR_INVALID_PARAM);
    q = p;
    q.experts = 0;
    cr_assert_eq(cks_pec_select_round_robin(&q, 0, mask), CKS_ERR_INVALID_PARAM);
    q = p;
    q.per_step = 0;
    cr_assert_eq(cks_pec_select_round_robin(&q, 0, mask), CKS_ERR_INVALID_PARAM);
    q = p;
    q.per_step = 5; /* > experts */
    cr_assert_eq(cks_pec_select_load_aware(&q, a, b, 0, mask), CKS_ERR_INVALID_PARAM);
    q = params(2, 4, 2, 0);
    q.field_mask |= CKS_PEC_FIELD_RANKS;
    q.ranks = 0;
    cr_assert_eq(cks_pec_bounds(&q, &bd), CKS_ERR_INVALID_PARAM);
    q.ranks = 3; /* does not divide 4 */
    cr_assert_eq(cks_pec_bounds(&q, &bd), CKS_ERR_INVALID_PARAM);
    q.ranks = 8; /* more ranks than experts */
    cr_assert_eq(cks_pec_bounds(&q, &bd), CKS_ERR_INVALID_PARAM);
    q.field_mask = 0; /* ranks ignored without its bit */
    cr_assert_eq(cks_pec_bounds(&q, &bd), CKS_OK);
    cr_assert_eq(bd.experts_per_rank, 4);
    /* layers * experts above CKS_PEC_MAX_ENTRIES (2^32): 65536 * 65537 */
    q = params(65536, 65537, 1, 0);
    cr_assert_eq(cks_pec_bounds(&q, &bd), CKS_ERR_INVALID_PARAM);
    q = params(UINT32_MAX, UINT32_MAX, UINT32_MAX, 0);
    cr_assert_eq(cks_pec_bounds(&q, &bd), CKS_ERR_INVALID_PARAM);
    q = params(65536, 65536, 65536, 0); /* exactly 2^32: accepted (no array touched) */
    cr_assert_eq(cks_pec_bounds(&q, &bd), CKS_OK);
    cr_assert_eq(bd.period, 1);

    /* a save after the checkpoint being chosen; outputs untouched on error */
    b[3] = 9;
    memset(mask, 0xCC, sizeof(mask));
    cr_assert_eq(cks_pec_select_load_aware(&p, a, b, 8, mask), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(mask[0], 0xCC);
    cr_assert_eq(cks_pec_select_load_aware(&p, a, b, 9, mask), CKS_OK);
    cr_assert(mask[0] == 0 || mask[0] == 1);
}
