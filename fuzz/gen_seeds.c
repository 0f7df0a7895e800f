/*
 * DESIGN: writes the seed corpora of fuzz_rma, fuzz_cluster, fuzz_md and
 * fuzz_secret into <dir>/rma, <dir>/cluster, <dir>/md and <dir>/secret
 * (fuzz/corpus through the fuzz_seeds target), valid inputs made with the
 * real encoders where there is one, plus the edge cases next to each rule:
 *  - rma: descriptors that cks_tp_mem_describe() writes for a region that
 *    cks_tp_mem_alloc() allocated (when UCX can make a worker here), and
 *    descriptors with a synthetic key of UCX's layout; the bare keys, each
 *    behind the byte that makes fuzz_rma walk it with its map length;
 *  - cluster: maps written by hand (valid, and each refused for one rule)
 *    and the canonical text of each valid one (cks_cluster_serialize());
 *  - md: 9 key bytes (be64 version, u8 index) and a value: records from the
 *    encoders of md_int.h with extreme and zero fields, records of the
 *    older formats, schema numbers, and corrupt values;
 *  - secret: files of the lengths around the accepted 16 .. 255 bytes.
 * Deterministic except for what UCX puts in its keys. A host tool; run by
 * hand after changing a format.
 */
#include "cks_tp.h"
#include "md_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *gen_dir;

static int gen_write(const char *sub, const char *name, const void *bytes, size_t len)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s/%s", gen_dir, sub, name);
    f = fopen(path, "wb");
    if (f == NULL) {
        fprintf(stderr, "gen_seeds: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (fwrite(bytes, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "gen_seeds: %s: write failed\n", path);
        return -1;
    }
    return 0;
}

/* ---- rma ------------------------------------------------------------------ */

#define GEN_RMA_HDR (40u + CKS_WIRE_NONCE_LEN)

static void gen_put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

/* A key with the layout UCX packs: map (map_len bytes, little-endian), memory
 * type 0, then per bit of the map a size byte and that many bytes. */
static size_t gen_key(uint8_t *k, size_t map_len, uint64_t map, uint8_t size)
{
    size_t pos = map_len + 1;

    for (size_t i = 0; i < map_len; i++) {
        k[i] = (uint8_t)(map >> (8 * i));
    }
    k[map_len] = 0;
    for (unsigned bit = 0; bit < 8 * map_len; bit++) {
        if (map & (1ull << bit)) {
            k[pos] = size;
            memset(k + pos + 1, (int)(0x10 + bit), size);
            pos += 1 + size;
        }
    }
    return pos;
}

static size_t gen_desc(uint8_t *d, uint64_t addr, uint64_t len, uint64_t base,
                       uint64_t slen, const uint8_t *key, size_t klen)
{
    gen_put64(d, (uint64_t)0x434b5231u << 32);
    gen_put64(d + 4, addr);
    gen_put64(d + 12, len);
    gen_put64(d + 20, base);
    gen_put64(d + 28, slen);
    d[36] = (uint8_t)(klen >> 24);
    d[37] = (uint8_t)(klen >> 16);
    d[38] = (uint8_t)(klen >> 8);
    d[39] = (uint8_t)klen;
    memset(d + 40, 0x5a, CKS_WIRE_NONCE_LEN);
    memcpy(d + GEN_RMA_HDR, key, klen);
    return GEN_RMA_HDR + klen;
}

/* A key behind the byte that makes fuzz_rma walk it with map_len. */
static int gen_bare_key(const char *name, const uint8_t *k, size_t klen, size_t map_len)
{
    uint8_t b[1 + CKS_TP_RMA_DESC_MAX];

    b[0] = map_len == 8 ? 0 : map_len == 4 ? 1 : 2;
    memcpy(b + 1, k, klen);
    return gen_write("rma", name, b, 1 + klen);
}

static void gen_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                       const cks_msg_any_t *body, cks_tp_data_t *data)
{
}

static int gen_rma_real(void)
{
    cks_tp_worker_params_t wp = {.name = "gen_seeds", .on_msg = gen_on_msg};
    uint8_t d[CKS_TP_RMA_DESC_MAX];
    const size_t mlen = 1u << 20;
    cks_tp_worker_h w = NULL;
    cks_tp_mem_h m = NULL;
    size_t len;
    uint8_t *base;
    void *addr;
    int rc = 0;

    if (cks_tp_worker_create(&wp, &w) != CKS_OK) {
        fprintf(stderr, "gen_seeds: no UCX worker here: synthetic keys only\n");
        return 0;
    }
    if (cks_tp_mem_alloc(w, mlen, &m, &addr) != CKS_OK) {
        fprintf(stderr, "gen_seeds: cks_tp_mem_alloc failed: synthetic keys only\n");
        cks_tp_worker_destroy(w);
        return 0;
    }
    base = addr;
    rc |= cks_tp_mem_describe(m, base, mlen, d, sizeof(d), &len) != CKS_OK ||
          gen_write("rma", "ucx-whole", d, len);
    rc |= cks_tp_mem_describe(m, base + mlen - 1, 1, d, sizeof(d), &len) != CKS_OK ||
          gen_write("rma", "ucx-last-byte", d, len);
    rc |= cks_tp_mem_describe(m, base + 4096, 0, d, sizeof(d), &len) != CKS_OK ||
          gen_write("rma", "ucx-empty", d, len);
    /* the key alone, for each map length (the one UCX uses walks) */
    rc |= gen_bare_key("ucx-key-map8", d + GEN_RMA_HDR, len - GEN_RMA_HDR, 8);
    rc |= gen_bare_key("ucx-key-map4", d + GEN_RMA_HDR, len - GEN_RMA_HDR, 4);
    rc |= gen_bare_key("ucx-key-map2", d + GEN_RMA_HDR, len - GEN_RMA_HDR, 2);
    cks_tp_mem_unmap(m);
    cks_tp_worker_destroy(w);
    return rc;
}

static int gen_rma(void)
{
    const uint64_t base = 0x7f0000000000ull, slen = 1ull << 20;
    uint8_t d[CKS_TP_RMA_DESC_MAX], k[CKS_TP_RMA_DESC_MAX];
    size_t klen, len;
    int rc = 0;

    klen = gen_key(k, 8, 0x25, 12); /* three domains */
    len = gen_desc(d, base + 4096, slen - 4096, base, slen, k, klen);
    rc |= gen_write("rma", "syn-map8-whole", d, len);
    len = gen_desc(d, base + slen, 0, base, slen, k, klen);
    rc |= gen_write("rma", "syn-map8-empty-at-end", d, len);
    len = gen_desc(d, base + 4095, 1, base, slen, k, klen); /* in the region's header */
    rc |= gen_write("rma", "bad-in-header", d, len);
    len = gen_desc(d, UINT64_MAX - 8, 8, UINT64_MAX - 4200, 4200, k, klen); /* wraps */
    rc |= gen_write("rma", "bad-region-wraps", d, len);
    len = gen_desc(d, base + 4096, slen, base, slen, k, klen); /* one past */
    rc |= gen_write("rma", "bad-past-region", d, len);
    len = gen_desc(d, base + 4096, 1, base, slen, k, klen);
    d[39]++; /* key length one more than the bytes */
    rc |= gen_write("rma", "bad-key-len", d, len);
    rc |= gen_write("rma", "bad-header-only", d, GEN_RMA_HDR);
    rc |= gen_bare_key("syn-key-map8", k, klen, 8);
    klen = gen_key(k, 4, 0x80000001u, 255); /* first and last bit, longest domains */
    len = gen_desc(d, base + 8192, 100, base, slen, k, klen);
    rc |= gen_write("rma", "syn-map4-long", d, len);
    rc |= gen_bare_key("syn-key-map4", k, klen, 4);
    klen = gen_key(k, 2, 0x3, 0); /* empty domain keys */
    rc |= gen_bare_key("syn-key-map2-empty-domains", k, klen, 2);
    k[2] = 1; /* not host memory */
    rc |= gen_bare_key("bad-key-mem-type", k, klen, 2);
    klen = gen_key(k, 8, 0x1, 200);
    rc |= gen_bare_key("bad-key-truncated", k, klen - 1, 8);
    return rc | gen_rma_real();
}

/* ---- cluster -------------------------------------------------------------- */

static const struct {
    const char *name, *text;
} gen_maps[] = {
    {"one-server", "epoch 1\nserver 0 10.0.0.1:7000 node=n0 rack=r0\n"},
    {"six", "# six servers\nepoch 3\n\n"
            "server 5 127.0.0.1:7006 node=n5 rack=r2   # out of order\n"
            "server 0 127.0.0.1:7001 node=n0 rack=r0\n"
            "server 1 127.0.0.1:7002 node=n1 rack=r0\n"
            "server 2\t127.0.0.1:7003\tnode=n2\track=r1\n"
            "server 3 127.0.0.1:7004 node=n3 rack=r1\n"
            "server 4 127.0.0.1:7005 node=n4 rack=r2\n"},
    {"shared-nodes", "epoch 18446744073709551615\n"
                     "server 65535 255.255.255.254:65535 node=A.b_c-9 rack=R\n"
                     "server 7 192.168.1.2:1 node=A.b_c-9 rack=R\n"
                     "server 8 192.168.1.3:2 node=host-2 rack=R2\n"
                     "server 9 192.168.1.3:3 node=host-2 rack=R2\n"},
    {"long-labels",
     "epoch 0\nserver 1 1.2.3.4:5 "
     "node=nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn "
     "rack=rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr\n"},
    {"no-final-newline", "epoch 2\r\nserver 0 10.0.0.1:7000 node=n0 rack=r0"},
    {"bad-empty", ""},
    {"bad-no-epoch", "server 0 10.0.0.1:7000 node=n0 rack=r0\n"},
    {"bad-two-epochs", "epoch 1\nepoch 2\nserver 0 10.0.0.1:7000 node=n0 rack=r0\n"},
    {"bad-no-servers", "epoch 1\n"},
    {"bad-epoch-overflow",
     "epoch 18446744073709551616\nserver 0 10.0.0.1:7000 node=n0 rack=r0\n"},
    {"bad-dup-id", "epoch 1\nserver 0 10.0.0.1:7000 node=n0 rack=r0\n"
                   "server 0 10.0.0.2:7000 node=n1 rack=r0\n"},
    {"bad-dup-endpoint", "epoch 1\nserver 0 10.0.0.1:7000 node=n0 rack=r0\n"
                         "server 1 10.0.0.1:7000 node=n1 rack=r0\n"},
    {"bad-node-two-racks", "epoch 1\nserver 0 10.0.0.1:7000 node=n0 rack=r0\n"
                           "server 1 10.0.0.1:7001 node=n0 rack=r1\n"},
    {"bad-id-range", "epoch 1\nserver 65536 10.0.0.1:7000 node=n0 rack=r0\n"},
    {"bad-any-address", "epoch 1\nserver 0 0.0.0.0:7000 node=n0 rack=r0\n"},
    {"bad-port-0", "epoch 1\nserver 0 10.0.0.1:0 node=n0 rack=r0\n"},
    {"bad-port-65536", "epoch 1\nserver 0 10.0.0.1:65536 node=n0 rack=r0\n"},
    {"bad-address", "epoch 1\nserver 0 10.0.0.256:7000 node=n0 rack=r0\n"},
    {"bad-address-leading-zero", "epoch 1\nserver 0 10.0.0.01:7000 node=n0 rack=r0\n"},
    {"bad-label-64",
     "epoch 1\nserver 1 1.2.3.4:5 "
     "node=nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn rack=r\n"},
    {"bad-label-char", "epoch 1\nserver 0 10.0.0.1:7000 node=n/0 rack=r0\n"},
    {"bad-no-rack", "epoch 1\nserver 0 10.0.0.1:7000 node=n0\n"},
    {"bad-unknown-item", "epoch 1\nserver 0 10.0.0.1:7000 node=n0 rack=r0\nclient 1\n"},
    {"bad-nul", "epoch 1\nserver 0 10.0.0.1:7000 node=n0\0 rack=r0\n"},
};

static int gen_cluster(void)
{
    char name[128], err[256];
    int rc = 0;

    for (size_t i = 0; i < sizeof(gen_maps) / sizeof(gen_maps[0]); i++) {
        const char *t = gen_maps[i].text;
        size_t len = strlen(t);
        cks_cluster_h map;
        char *canon;
        size_t clen;

        if (strcmp(gen_maps[i].name, "bad-nul") == 0) {
            len = strlen(t) + 1 + strlen(t + strlen(t) + 1);
        }
        rc |= gen_write("cluster", gen_maps[i].name, t, len);
        if (cks_cluster_parse(t, len, &map, err, sizeof(err)) != CKS_OK) {
            if (strncmp(gen_maps[i].name, "bad-", 4) != 0) {
                fprintf(stderr, "gen_seeds: map %s refused: %s\n", gen_maps[i].name, err);
                rc = -1;
            }
            continue;
        }
        if (strncmp(gen_maps[i].name, "bad-", 4) == 0) {
            fprintf(stderr, "gen_seeds: map %s accepted\n", gen_maps[i].name);
            rc = -1;
        }
        if (cks_cluster_serialize(map, &canon, &clen) != CKS_OK) {
            rc = -1;
        } else {
            snprintf(name, sizeof(name), "canonical-%s", gen_maps[i].name);
            rc |= gen_write("cluster", name, canon, clen);
            free(canon);
        }
        cks_cluster_free(map);
    }
    return rc;
}

/* ---- md ------------------------------------------------------------------- */

static int gen_record(const char *name, uint64_t version, uint8_t idx, const void *val,
                      size_t len)
{
    uint8_t b[9 + 256];

    gen_put64(b, version);
    b[8] = idx;
    memcpy(b + 9, val, len);
    return gen_write("md", name, b, 9 + len);
}

static int gen_md(void)
{
    uint8_t b[CKS_MD_VALUE_MAX];
    size_t len;
    int rc = 0;
    cks_md_version_t vmax = {
        UINT64_MAX - 1, UINT64_MAX, CKS_VSTATE_ABORTED, UINT32_MAX, UINT64_MAX,
        UINT64_MAX,     UINT64_MAX, UINT64_MAX,         16,         4,
        UINT64_MAX,     UINT32_MAX, UINT64_MAX};
    cks_md_version_t vmid = {7,
                             6,
                             CKS_VSTATE_SEALED,
                             1,
                             1700000000000000000ull,
                             1700000001000000000ull,
                             300,
                             1u << 30,
                             4,
                             2,
                             1u << 20,
                             1,
                             3};
    cks_md_version_t vmin = {0, CKS_MD_NO_PARENT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    cks_md_object_t omax = {.kind = CKS_KIND_OTHER,
                            .layer = INT32_MAX,
                            .expert = INT32_MIN,
                            .rank = -1,
                            .size = UINT64_MAX,
                            .crc64 = UINT64_MAX,
                            .arena_offset = UINT64_MAX,
                            .arena_len = UINT64_MAX,
                            .source_version = UINT64_MAX};
    cks_md_object_t omid = {.kind = 0,
                            .layer = 12,
                            .expert = -1,
                            .rank = 0,
                            .size = 4096,
                            .crc64 = 0x123456789abcdefull,
                            .arena_offset = 1u << 20,
                            .arena_len = 8192,
                            .source_version = 5};
    cks_md_chunk_t cmax = {UINT64_MAX, 255,        UINT64_MAX,
                           UINT64_MAX, UINT64_MAX, UINT64_MAX};
    cks_md_chunk_t cmid = {3, 5, 1u << 20, 0xfeedull, 4096, 1u << 20};
    /* older formats and corrupt values, by hand */
    static const uint8_t v1[] = {0x99, 0x01, 0x07, 0x06, 0x02, 0x01,
                                 0x05, 0x06, 0x10, 0xcd, 0x10, 0x00};
    static const uint8_t o1[] = {0x99, 0x01, 0x00, 0xff, 0xd0, 0x80,
                                 0x00, 0x10, 0x00, 0x00, 0x20};
    static const uint8_t wide[] = {0xdc, 0x00, 0x05, 0xd3, 0, 0, 0,    0,    0, 0,    0,
                                   1,    0xd2, 0,    0,    0, 9, 0xd1, 0,    1, 0xcf, 0,
                                   0,    0,    0,    0,    0, 0, 2,    0xd0, 3};
    static const uint8_t huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t neg[] = {0x95, 0x01, 0xff, 0x00, 0x00, 0x00};
    static const uint8_t trail[] = {0x95, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00};
    static const uint8_t str[] = {0x95, 0x01, 0xa1, 'x', 0x00, 0x00, 0x00};
    static const uint8_t s1[] = {0x01}, s0[] = {0x00},
                         smax[] = {0xce, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t sbig[] = {0xcf, 0, 0, 0, 1, 0, 0, 0, 0};

    rc |= cks_md_version_encode(&vmax, b, &len) != CKS_OK ||
          gen_record("version-max", vmax.version, 0, b, len);
    rc |= cks_md_version_encode(&vmid, b, &len) != CKS_OK ||
          gen_record("version-sealed", vmid.version, 0, b, len);
    rc |= cks_md_version_encode(&vmin, b, &len) != CKS_OK ||
          gen_record("version-min", vmin.version, 0, b, len);
    rc |= gen_record("version-fmt1", 7, 0, v1, sizeof(v1));
    rc |= cks_md_object_encode(&omax, b, &len) != CKS_OK ||
          gen_record("object-max", 9, 0, b, len);
    rc |= cks_md_object_encode(&omid, b, &len) != CKS_OK ||
          gen_record("object-mid", 9, 0, b, len);
    rc |= gen_record("object-fmt1", 9, 0, o1, sizeof(o1));
    rc |= cks_md_chunk_encode(&cmax, b, &len) != CKS_OK ||
          gen_record("chunk-max", cmax.stripe, (uint8_t)cmax.idx, b, len);
    rc |= cks_md_chunk_encode(&cmid, b, &len) != CKS_OK ||
          gen_record("chunk-mid", cmid.stripe, (uint8_t)cmid.idx, b, len);
    rc |= gen_record("chunk-wide-ints", 1, 1, wide, sizeof(wide));
    rc |= gen_record("bad-huge-array", 0, 0, huge, sizeof(huge));
    rc |= gen_record("bad-negative", 0, 0, neg, sizeof(neg));
    rc |= gen_record("bad-trailing", 0, 0, trail, sizeof(trail));
    rc |= gen_record("bad-string", 0, 0, str, sizeof(str));
    rc |= gen_record("bad-empty", 0, 0, NULL, 0);
    rc |= gen_record("schema-1", 0, 0, s1, sizeof(s1));
    rc |= gen_record("schema-max", 0, 0, smax, sizeof(smax));
    rc |= gen_record("bad-schema-0", 0, 0, s0, sizeof(s0));
    rc |= gen_record("bad-schema-big", 0, 0, sbig, sizeof(sbig));
    return rc;
}

/* ---- secret --------------------------------------------------------------- */

static int gen_secret(void)
{
    static const size_t lens[] = {0, 15, 16, 32, 255, 256, 300};
    uint8_t b[300];
    char name[64];
    int rc = 0;

    for (size_t i = 0; i < sizeof(b); i++) {
        b[i] = (uint8_t)('a' + i % 26);
    }
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        snprintf(name, sizeof(name), "%s-%zu",
                 lens[i] >= 16 && lens[i] < 256 ? "ok" : "bad", lens[i]);
        rc |= gen_write("secret", name, b, lens[i]);
    }
    rc |= gen_write("secret", "ok-text-newline", "correct horse battery staple\n", 29);
    rc |= gen_write("secret", "ok-binary",
                    "\0\xff\0\xff\0\xff\0\xff\0\xff\0\xff\0\xff\0\xff", 16);
    return rc;
}

int main(int argc, char **argv)
{
    int rc;

    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR (with rma/ cluster/ md/ secret/ in it)\n",
                argv[0]);
        return 2;
    }
    gen_dir = argv[1];
    cks_log_set_level(CKS_LOG_WARN);
    rc = gen_rma();
    rc |= gen_cluster();
    rc |= gen_md();
    rc |= gen_secret();
    return rc != 0 ? 1 : 0;
}
