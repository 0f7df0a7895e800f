/*
 * DESIGN: placement, the function from (job, key, stripe) and a cluster map
 * to the stripe's placement group: k + m servers on distinct nodes, spread
 * over racks as evenly as the map allows, chunk i on group member i, member 0
 * the primary. The definition is in cks_md.h and docs/CLUSTER_MAP.md; it is
 * part of the storage format, so this file must compute exactly that, bit for
 * bit, on every platform and in every release. tests/metadata/test_cluster.c
 * pins XXH64 to the reference vectors, checks this code against a literal
 * re-implementation of the definition, and pins known groups.
 *
 * Why per-slot rendezvous hashing: every slot (chunk index) ranks the
 * servers by a weight of its own and takes the best eligible one. A server
 * that joins therefore takes over only the slots it wins, and one that
 * leaves frees only its own slots; the other chunks of the group keep their
 * positions, so little data moves (CRUSH's "indep" mode has the same aim).
 * Ranking every server once and handing out slots in that order would shift
 * every later chunk of a group by one position whenever a server entered
 * or left it.
 *
 * Hash: XXH64, written here from its specification (no dependency), reading
 * bytes little-endian one at a time so that alignment and host byte order do
 * not matter. pl_weight() is XXH64 specialised to the 16-byte weight record;
 * the tests compare it with the general function through whole placements.
 *
 * Threads: pure functions of their arguments and an immutable map; no
 * allocation, no lock, no I/O; about 5 KiB of stack. Runs on the client per
 * object stripe and on servers during repair; never per chunk byte.
 *
 * Must never: depend on anything but its inputs (no time, no randomness, no
 * pointer values, no host byte order), or place two chunks of a stripe on
 * one node.
 */
#include "cks_md.h"

#include <string.h>

#define XXH_P1 UINT64_C(0x9E3779B185EBCA87)
#define XXH_P2 UINT64_C(0xC2B2AE3D27D4EB4F)
#define XXH_P3 UINT64_C(0x165667B19E3779F9)
#define XXH_P4 UINT64_C(0x85EBCA77C2B2AE63)
#define XXH_P5 UINT64_C(0x27D4EB2F165667C5)

/* ---- XXH64 ----------------------------------------------------------------- */

static inline uint64_t xxh_rotl(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t xxh_read64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static inline uint32_t xxh_read32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline uint64_t xxh_round(uint64_t acc, uint64_t input)
{
    acc += input * XXH_P2;
    acc = xxh_rotl(acc, 31);
    return acc * XXH_P1;
}

static inline uint64_t xxh_merge(uint64_t acc, uint64_t val)
{
    acc ^= xxh_round(0, val);
    return acc * XXH_P1 + XXH_P4;
}

static inline uint64_t xxh_avalanche(uint64_t h)
{
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    h ^= h >> 32;
    return h;
}

uint64_t cks_place_hash64(const void *data, size_t len, uint64_t seed)
{
    const uint8_t *p = data;
    const uint8_t *end = p + len;
    uint64_t h;

    if (len >= 32) {
        uint64_t v1 = seed + XXH_P1 + XXH_P2;
        uint64_t v2 = seed + XXH_P2;
        uint64_t v3 = seed;
        uint64_t v4 = seed - XXH_P1;

        do {
            v1 = xxh_round(v1, xxh_read64(p));
            v2 = xxh_round(v2, xxh_read64(p + 8));
            v3 = xxh_round(v3, xxh_read64(p + 16));
            v4 = xxh_round(v4, xxh_read64(p + 24));
            p += 32;
        } while ((size_t)(end - p) >= 32);
        h = xxh_rotl(v1, 1) + xxh_rotl(v2, 7) + xxh_rotl(v3, 12) + xxh_rotl(v4, 18);
        h = xxh_merge(h, v1);
        h = xxh_merge(h, v2);
        h = xxh_merge(h, v3);
        h = xxh_merge(h, v4);
    } else {
        h = seed + XXH_P5;
    }
    h += (uint64_t)len;
    while ((size_t)(end - p) >= 8) {
        h ^= xxh_round(0, xxh_read64(p));
        h = xxh_rotl(h, 27) * XXH_P1 + XXH_P4;
        p += 8;
    }
    if ((size_t)(end - p) >= 4) {
        h ^= (uint64_t)xxh_read32(p) * XXH_P1;
        h = xxh_rotl(h, 23) * XXH_P2 + XXH_P3;
        p += 4;
    }
    while (p < end) {
        h ^= (uint64_t)(*p) * XXH_P5;
        h = xxh_rotl(h, 11) * XXH_P1;
        p++;
    }
    return xxh_avalanche(h);
}

/* XXH64(le64(g) le32(id) le32(slot), seed 0): the 16-byte path of the
 * function above, with the record's two 8-byte lanes built directly. */
static inline uint64_t pl_weight(uint64_t g, uint32_t id, uint32_t slot)
{
    uint64_t h = XXH_P5 + 16;

    h ^= xxh_round(0, g);
    h = xxh_rotl(h, 27) * XXH_P1 + XXH_P4;
    h ^= xxh_round(0, (uint64_t)id | ((uint64_t)slot << 32));
    h = xxh_rotl(h, 27) * XXH_P1 + XXH_P4;
    return xxh_avalanche(h);
}

/* g = XXH64(le32(job_len) job le32(key_len) key le64(stripe), seed 0) */
static uint64_t pl_group_hash(const char *job, size_t job_len, const char *key,
                              size_t key_len, uint64_t stripe)
{
    uint8_t rec[4 + CKS_JOB_MAX_LEN + 4 + CKS_KEY_MAX_LEN + 8];
    size_t n = 0;

    for (int i = 0; i < 4; i++) {
        rec[n++] = (uint8_t)(job_len >> (8 * i));
    }
    memcpy(&rec[n], job, job_len);
    n += job_len;
    for (int i = 0; i < 4; i++) {
        rec[n++] = (uint8_t)(key_len >> (8 * i));
    }
    memcpy(&rec[n], key, key_len);
    n += key_len;
    for (int i = 0; i < 8; i++) {
        rec[n++] = (uint8_t)(stripe >> (8 * i));
    }
    return cks_place_hash64(rec, n, 0);
}

/* ---- placement ------------------------------------------------------------- */

#define PL_BIT_TEST(b, i) (((b)[(i) / 8] >> ((i) % 8)) & 1u)
#define PL_BIT_SET(b, i)  ((b)[(i) / 8] |= (uint8_t)(1u << ((i) % 8)))

cks_status_t cks_place(cks_cluster_h map, const char *job, size_t job_len,
                       const char *key, size_t key_len, uint64_t stripe, unsigned k,
                       unsigned m, const uint8_t *down, uint16_t *out)
{
    uint8_t node_bits[CKS_CLUSTER_MAX_SERVERS / 8]; /* live nodes, then used nodes */
    uint8_t rack_cnt[CKS_CLUSTER_MAX_SERVERS];      /* live nodes (<= W), then chunks */
    uint16_t pick[CKS_PLACE_WIDTH_MAX];
    size_t nservers, nnodes, nracks, live_nodes = 0, live_racks = 0;
    unsigned width, distinct = 0, cap, want_racks;
    uint64_t g;

    if ((map == NULL) || (job == NULL) || (key == NULL) || (out == NULL) ||
        (job_len == 0) || (key_len == 0)) {
        cks_error("placement: NULL argument or empty job or key");
        return CKS_ERR_INVALID_PARAM;
    }
    if ((job_len > CKS_JOB_MAX_LEN) || (key_len > CKS_KEY_MAX_LEN)) {
        cks_error("placement: job of %zu bytes or key of %zu bytes too long", job_len,
                  key_len);
        return CKS_ERR_KEY_TOO_LONG;
    }
    nservers = cks_cluster_nservers(map);
    nnodes = cks_cluster_nnodes(map);
    nracks = cks_cluster_nracks(map);
    width = k + m;
    if ((k < 1) || (k > CKS_PLACE_K_MAX) || (m < 1) || (m > CKS_PLACE_M_MAX) ||
        (width > nnodes)) {
        cks_error("placement: k = %u, m = %u do not fit a map of %zu nodes "
                  "(cks_cluster_check() refuses it)",
                  k, m, nnodes);
        return CKS_ERR_INVALID_PARAM;
    }

    /* Live nodes per rack, saturated at W: all that the cap needs. */
    memset(node_bits, 0, (nnodes + 7) / 8);
    memset(rack_cnt, 0, nracks);
    for (size_t pos = 0; pos < nservers; pos++) {
        const cks_cluster_server_t *s = cks_cluster_server(map, pos);

        if (cks_place_down_test(down, pos) || PL_BIT_TEST(node_bits, s->node)) {
            continue;
        }
        PL_BIT_SET(node_bits, s->node);
        live_nodes++;
        if (rack_cnt[s->rack] == 0) {
            live_racks++;
        }
        if (rack_cnt[s->rack] < width) {
            rack_cnt[s->rack]++;
        }
    }
    if (live_nodes < width) {
        cks_debug("placement: %zu of %zu nodes have a live server, k + m = %u need",
                  live_nodes, nnodes, width);
        return CKS_ERR_UNREACHABLE;
    }
    want_racks = (unsigned)CKS_MIN((size_t)width, live_racks);
    /* The least cap C with sum(min(C, live nodes of rack)) >= W; C = W always
     * qualifies because live_nodes >= W. */
    for (cap = 1; cap < width; cap++) {
        size_t room = 0;
        for (size_t r = 0; (r < nracks) && (room < width); r++) {
            room += CKS_MIN((unsigned)rack_cnt[r], cap);
        }
        if (room >= width) {
            break;
        }
    }

    memset(node_bits, 0, (nnodes + 7) / 8);
    memset(rack_cnt, 0, nracks);
    g = pl_group_hash(job, job_len, key, key_len, stripe);
    for (unsigned slot = 0; slot < width; slot++) {
        /* when as many slots are left as racks still wanted, only new racks */
        int new_rack_only = (want_racks - distinct >= width - slot);
        uint64_t best_w = 0;
        size_t best = SIZE_MAX;

        for (size_t pos = 0; pos < nservers; pos++) {
            const cks_cluster_server_t *s = cks_cluster_server(map, pos);
            uint8_t c;
            uint64_t w;

            if (cks_place_down_test(down, pos) || PL_BIT_TEST(node_bits, s->node)) {
                continue;
            }
            c = rack_cnt[s->rack];
            if ((c >= cap) || ((c > 0) && new_rack_only)) {
                continue;
            }
            w = pl_weight(g, s->id, slot);
            if ((best == SIZE_MAX) || (w > best_w)) { /* ties: lower id (first) */
                best = pos;
                best_w = w;
            }
        }
        if (best == SIZE_MAX) { /* impossible: see the cap argument in the docs */
            cks_error("placement: no eligible server for slot %u (internal error)", slot);
            return CKS_ERR_INTERNAL;
        }
        {
            const cks_cluster_server_t *s = cks_cluster_server(map, best);
            PL_BIT_SET(node_bits, s->node);
            if (rack_cnt[s->rack]++ == 0) {
                distinct++;
            }
        }
        pick[slot] = (uint16_t)best;
    }
    memcpy(out, pick, width * sizeof(*out));
    return CKS_OK;
}
