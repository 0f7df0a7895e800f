/*
 * Unit tests of the cluster map (metadata/cluster.c) and of placement
 * (metadata/placement.c).
 *
 * Map tests parse texts built here, the example maps in examples/ and files
 * written to a mkstemp() path; every invalid map must be refused with
 * CKS_ERR_INVALID_PARAM and a message naming the line and the problem.
 *
 * Placement tests: XXH64 against the reference vectors of libxxhash 0.8.1; the
 * library against ref_place(), a slow literal re-implementation of the
 * definition in cks_md.h (generic hash over byte records, sort instead of a
 * running maximum), on random maps with random down servers; known groups
 * pinned (the function is part of the storage format); determinism,
 * distinct nodes, the rack rules, spread, and which chunks move when a
 * server joins or leaves. Random maps and object keys come from a fixed seed
 * per test, printed on stderr; set CKS_TEST_SEED=<n> to vary or replay it.
 * Measured figures (spread, movement) are printed on stderr.
 */
#include "cks_md.h"

#include "cks_common.h"

#include "cks_test_unit.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ST_EQ CKS_TEST_ST_EQ /* cks_test_unit.h */
#define ST_OK CKS_TEST_ST_OK

#define JOB  "job-0"
#define J(s) (s), strlen(s)

/* The test's seed, printed: see cks_test_unit.h. */
static uint64_t test_seed(const char *name, uint64_t dflt)
{
    return cks_test_named_seed("cluster", name, dflt);
}

static unsigned rnd_below(uint64_t *s, unsigned n)
{
    return (unsigned)(cks_test_rng_next(s) % n);
}

/* ---- building maps --------------------------------------------------------- */

typedef struct {
    unsigned id, node, rack;
} tsrv_t;

/* Map text for servers `s` (any order); node n is "n<n>", rack r "r<r>";
 * addresses 10.1.<id/256>.<id%256>:13337 (unique per id). Caller frees. */
static char *map_text(uint64_t epoch, const tsrv_t *s, size_t n)
{
    size_t cap = 64 + n * 80, len;
    char *t = malloc(cap);

    cr_assert_not_null(t);
    len = (size_t)snprintf(t, cap, "epoch %" PRIu64 "\n", epoch);
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(t + len, cap - len,
                                "server %u 10.1.%u.%u:13337 node=n%u rack=r%u\n", s[i].id,
                                s[i].id / 256, s[i].id % 256, s[i].node, s[i].rack);
        cr_assert_lt(len, cap);
    }
    return t;
}

static cks_cluster_h parse_ok(const char *text)
{
    char err[512] = "";
    cks_cluster_h map = NULL;
    cks_status_t st = cks_cluster_parse(text, strlen(text), &map, err, sizeof(err));

    cr_assert_eq(st, CKS_OK, "parse: %s: %s\n%s", cks_status_name(st), err, text);
    cr_assert_not_null(map);
    return map;
}

static cks_cluster_h map_of(const tsrv_t *s, size_t n)
{
    char *t = map_text(1, s, n);
    cks_cluster_h map = parse_ok(t);

    free(t);
    return map;
}

/* `nservers` servers, one per node, node i in rack i % nracks, id i. */
static size_t flat_layout(tsrv_t *s, unsigned nservers, unsigned nracks)
{
    for (unsigned i = 0; i < nservers; i++) {
        s[i] = (tsrv_t){.id = i, .node = i, .rack = i % nracks};
    }
    return nservers;
}

/* A random layout: 1..6 racks, 1..16 nodes, 1..3 servers per node, ids
 * distinct in 0..999 and listed in random order. Returns the count. */
static size_t random_layout(uint64_t *rs, tsrv_t *s, size_t max)
{
    unsigned nracks = 1 + rnd_below(rs, 6);
    unsigned nnodes = 1 + rnd_below(rs, 16);
    unsigned ids[1000];
    size_t n = 0;

    for (unsigned i = 0; i < 1000; i++) {
        ids[i] = i;
    }
    for (unsigned i = 999; i > 0; i--) {
        unsigned j = rnd_below(rs, i + 1), t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    for (unsigned node = 0; node < nnodes; node++) {
        unsigned rack = rnd_below(rs, nracks);
        unsigned per = 1 + rnd_below(rs, 3);
        for (unsigned j = 0; (j < per) && (n < max); j++, n++) {
            s[n] = (tsrv_t){.id = ids[n], .node = node, .rack = rack};
        }
    }
    return n;
}

/* Positions to server ids. */
static void to_ids(cks_cluster_h map, const uint16_t *pos, unsigned w, unsigned *ids)
{
    for (unsigned i = 0; i < w; i++) {
        const cks_cluster_server_t *s = cks_cluster_server(map, pos[i]);
        cr_assert_not_null(s, "position %u out of range", (unsigned)pos[i]);
        ids[i] = s->id;
    }
}

static void obj_key(char *key, size_t len, uint64_t seed, unsigned i)
{
    snprintf(key, len, "ckpt/%016" PRIx64 "/layer.%u/expert.%u", seed, i / 64, i % 64);
}

/* One object to place on a random layout: what for_random_objects() passes. */
typedef struct {
    uint64_t *rs;           /* the random state (the callback may draw from it) */
    cks_cluster_h map;
    size_t n;               /* servers in map */
    int iter, obj;          /* which map, which object of it */
    unsigned k, m;          /* random, with k + m no more than the nodes */
    char key[80];
    uint8_t down[CKS_PLACE_DOWN_BYTES(48)]; /* scratch for the callback's down servers */
} place_case_t;

/* `maps` random layouts (of at least two nodes; others are skipped) with
 * `objs` objects each: m in 1..4, k in 1..16, key from rs; fn(c) each. */
static void for_random_objects(uint64_t *rs, int maps, int objs, void (*fn)(place_case_t *c))
{
    place_case_t c = {.rs = rs};

    for (c.iter = 0; c.iter < maps; c.iter++) {
        tsrv_t s[48];
        size_t nn;

        c.n   = random_layout(rs, s, 48);
        c.map = map_of(s, c.n);
        nn    = cks_cluster_nnodes(c.map);
        for (c.obj = 0; (nn >= 2) && (c.obj < objs); c.obj++) {
            c.m = 1 + rnd_below(rs, CKS_MIN(4u, (unsigned)nn - 1));
            c.k = 1 + rnd_below(rs, CKS_MIN(16u, (unsigned)nn - c.m));
            obj_key(c.key, sizeof(c.key), *rs, (unsigned)c.obj);
            fn(&c);
        }
        cks_cluster_free(c.map);
    }
}

/* ---- cluster map: parsing -------------------------------------------------- */

Test(cluster_map, parse_canonical, .timeout = 10)
{
    static const char text[] =
        "# a map with comments, blanks, tabs and CRLF line ends\r\n"
        "\n"
        "server 7 10.0.0.7:7007 rack=rB node=nB   # attributes in any order\n"
        "\tepoch\t42\r\n"
        "server 2 10.0.0.2:7002 node=nA rack=rA\n"
        "server 5 192.168.1.20:65535 node=nB rack=rB\n"
        "   server 0 127.0.0.1:1 node=n.0_x-Y rack=rA\n"
        "server 65535 10.0.0.9:7009 node=nC rack=rA";
    cks_cluster_h map = parse_ok(text);
    const cks_cluster_server_t *s;
    size_t pos = 99;

    cr_assert_eq(cks_cluster_epoch(map), 42);
    cr_assert_eq(cks_cluster_nservers(map), 5);
    cr_assert_eq(cks_cluster_nnodes(map), 4);
    cr_assert_eq(cks_cluster_nracks(map), 2);

    /* positions in id order; node and rack indices dense, in that order */
    static const unsigned ids[] = {0, 2, 5, 7, 65535};
    static const unsigned nodes[] = {0, 1, 2, 2, 3};
    static const unsigned racks[] = {0, 0, 1, 1, 0};
    for (size_t i = 0; i < 5; i++) {
        s = cks_cluster_server(map, i);
        cr_assert_not_null(s);
        cr_assert_eq(s->id, ids[i], "position %zu: id %u", i, (unsigned)s->id);
        cr_assert_eq(s->node, nodes[i], "position %zu: node %u", i, (unsigned)s->node);
        cr_assert_eq(s->rack, racks[i], "position %zu: rack %u", i, (unsigned)s->rack);
        ST_OK(cks_cluster_find(map, s->id, &pos));
        cr_assert_eq(pos, i);
    }
    cr_assert_null(cks_cluster_server(map, 5));
    pos = 99;
    ST_EQ(cks_cluster_find(map, 3, &pos), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_cluster_find(map, 65534, &pos), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(pos, 99, "find wrote its output on failure");

    /* addresses and labels as written */
    static const struct {
        size_t pos;
        const char *addr;
        uint32_t ipv4;
        unsigned port;
        const char *node, *rack;
    } want[] = {
        {0, "127.0.0.1", UINT32_C(0x7f000001), 1, "n.0_x-Y", "rA"},
        {2, "192.168.1.20", UINT32_C(0xc0a80114), 65535, "nB", "rB"},
        {4, "10.0.0.9", UINT32_C(0x0a000009), 7009, "nC", "rA"},
    };
    for (size_t i = 0; i < CKS_ARRAY_SIZE(want); i++) {
        s = cks_cluster_server(map, want[i].pos);
        cr_assert_str_eq(s->addr, want[i].addr, "position %zu: address %s", want[i].pos,
                         s->addr);
        cr_assert_eq(s->ipv4, want[i].ipv4, "position %zu: IPv4 %#x", want[i].pos,
                     (unsigned)s->ipv4);
        cr_assert_eq(s->port, want[i].port, "position %zu: port %u", want[i].pos,
                     (unsigned)s->port);
        cr_assert_str_eq(s->node_label, want[i].node, "position %zu: node %s", want[i].pos,
                         s->node_label);
        cr_assert_str_eq(s->rack_label, want[i].rack, "position %zu: rack %s", want[i].pos,
                         s->rack_label);
    }
    cks_cluster_free(map);
}

/* Same servers, lines in another order: same canonical text, same positions. */
Test(cluster_map, line_order_irrelevant, .timeout = 10)
{
    uint64_t rs = test_seed("line_order_irrelevant", 11);
    tsrv_t s[64];
    size_t n = random_layout(&rs, s, 64);
    char *t1 = map_text(9, s, n), *t2, *c1, *c2;
    size_t l1, l2;
    cks_cluster_h m1, m2;

    for (size_t i = n - 1; i > 0; i--) {
        size_t j = rnd_below(&rs, (unsigned)i + 1);
        tsrv_t t = s[i];
        s[i] = s[j];
        s[j] = t;
    }
    t2 = map_text(9, s, n);
    m1 = parse_ok(t1);
    m2 = parse_ok(t2);
    ST_OK(cks_cluster_serialize(m1, &c1, &l1));
    ST_OK(cks_cluster_serialize(m2, &c2, &l2));
    cr_assert_eq(l1, l2);
    cr_assert_str_eq(c1, c2);
    cr_assert_eq(strlen(c1), l1);
    free(c1);
    free(c2);
    free(t1);
    free(t2);
    cks_cluster_free(m1);
    cks_cluster_free(m2);
}

static void map_eq(cks_cluster_h a, cks_cluster_h b)
{
    cr_assert_eq(cks_cluster_epoch(a), cks_cluster_epoch(b));
    cr_assert_eq(cks_cluster_nservers(a), cks_cluster_nservers(b));
    cr_assert_eq(cks_cluster_nnodes(a), cks_cluster_nnodes(b));
    cr_assert_eq(cks_cluster_nracks(a), cks_cluster_nracks(b));
    for (size_t i = 0; i < cks_cluster_nservers(a); i++) {
        const cks_cluster_server_t *x = cks_cluster_server(a, i);
        const cks_cluster_server_t *y = cks_cluster_server(b, i);
        cr_assert_eq(x->id, y->id);
        cr_assert_eq(x->port, y->port);
        cr_assert_eq(x->node, y->node);
        cr_assert_eq(x->rack, y->rack);
        cr_assert_eq(x->ipv4, y->ipv4);
        cr_assert_str_eq(x->addr, y->addr);
        cr_assert_str_eq(x->node_label, y->node_label);
        cr_assert_str_eq(x->rack_label, y->rack_label);
    }
}

Test(cluster_map, serialize_round_trip, .timeout = 20)
{
    uint64_t rs = test_seed("serialize_round_trip", 12);

    for (int iter = 0; iter < 50; iter++) {
        tsrv_t s[64];
        size_t n = random_layout(&rs, s, 64);
        uint64_t epoch = (iter == 0) ? UINT64_MAX : cks_test_rng_next(&rs);
        char *t = map_text(epoch, s, n), *c1, *c2;
        size_t l1, l2;
        cks_cluster_h m1 = parse_ok(t), m2, m3;

        cr_assert_eq(cks_cluster_epoch(m1), epoch);
        ST_OK(cks_cluster_serialize(m1, &c1, &l1));
        cr_assert_eq(strlen(c1), l1);
        m2 = parse_ok(c1);
        map_eq(m1, m2);
        ST_OK(cks_cluster_serialize(m2, &c2, &l2));
        cr_assert_eq(l1, l2);
        cr_assert_str_eq(c1, c2, "serialization is not canonical");
        /* and not the identity function: the text depends on the map */
        m3 = parse_ok(t);
        map_eq(m1, m3);
        free(c1);
        free(c2);
        free(t);
        cks_cluster_free(m1);
        cks_cluster_free(m2);
        cks_cluster_free(m3);
    }
}

Test(cluster_map, example_maps, .timeout = 10)
{
    char err[512] = "";
    cks_cluster_h map = NULL;

    ST_OK(cks_cluster_load(CKS_SOURCE_DIR "/examples/cluster-6.map", &map, err,
                           sizeof(err)));
    cr_assert_eq(cks_cluster_nservers(map), 6);
    cr_assert_eq(cks_cluster_nnodes(map), 6);
    cr_assert_eq(cks_cluster_nracks(map), 3);
    for (size_t i = 0; i < 6; i++) {
        const cks_cluster_server_t *s = cks_cluster_server(map, i);
        cr_assert_eq(s->id, i);
        cr_assert_str_eq(s->addr, "127.0.0.1");
        cr_assert_eq(s->port, 7001 + i);
    }
    ST_OK(cks_cluster_check(map, 4, 2, err, sizeof(err)));
    ST_EQ(cks_cluster_check(map, 5, 2, err, sizeof(err)), CKS_ERR_INVALID_PARAM);
    cks_cluster_free(map);

    map = NULL;
    ST_OK(cks_cluster_load(CKS_SOURCE_DIR "/examples/cluster-12.map", &map, err,
                           sizeof(err)));
    cr_assert_eq(cks_cluster_nservers(map), 12);
    cr_assert_eq(cks_cluster_nnodes(map), 12);
    cr_assert_eq(cks_cluster_nracks(map), 4);
    ST_OK(cks_cluster_check(map, 4, 2, err, sizeof(err)));
    ST_OK(cks_cluster_check(map, 8, 4, err, sizeof(err)));
    cks_cluster_free(map);
}

Test(cluster_map, load_file, .timeout = 10)
{
    char path[] = "/tmp/cks_cluster_test_XXXXXX";
    char err[512] = "";
    cks_cluster_h map = NULL;
    static const char bad[] = "epoch 1\nserver 0 127.0.0.1:7001 node=a rack=r\n"
                              "server 0 127.0.0.1:7002 node=b rack=r\n";
    int fd = mkstemp(path);
    FILE *f;

    cr_assert_geq(fd, 0);
    f = fdopen(fd, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bad, 1, strlen(bad), f), strlen(bad));
    cr_assert_eq(fclose(f), 0);

    ST_EQ(cks_cluster_load(path, &map, err, sizeof(err)), CKS_ERR_INVALID_PARAM);
    cr_assert_null(map, "output written on failure");
    cr_assert_not_null(strstr(err, path), "message does not name the file: %s", err);
    cr_assert_not_null(strstr(err, "line 3"), "message: %s", err);
    cr_assert_not_null(strstr(err, "duplicate server id 0"), "message: %s", err);
    cr_assert_not_null(strstr(err, "line 2"), "message: %s", err);
    cr_assert_eq(unlink(path), 0);

    err[0] = '\0';
    ST_EQ(cks_cluster_load(path, &map, err, sizeof(err)), CKS_ERR_IO);
    cr_assert_null(map);
    cr_assert_not_null(strstr(err, path), "message: %s", err);
    cr_assert_not_null(strstr(err, "cannot open"), "message: %s", err);
}

/* One invalid map: the status, and the words its message must contain. */
typedef struct {
    const char *text;
    const char *want1, *want2;
} bad_map_t;

#define S0 "server 0 127.0.0.1:7001 node=n0 rack=r0\n"
#define S1 "server 1 127.0.0.1:7002 node=n1 rack=r0\n"

static const bad_map_t bad_maps[] = {
    /* ids */
    {"epoch 1\n" S0 S1 "server 1 127.0.0.1:7003 node=n2 rack=r0\n", "line 4",
     "duplicate server id 1 (first on line 3)"},
    {"epoch 1\n" S0 "server 65536 127.0.0.1:7002 node=n1 rack=r0\n", "line 3",
     "bad server id '65536'"},
    {"epoch 1\n" S0 "server -1 127.0.0.1:7002 node=n1 rack=r0\n", "line 3",
     "bad server id"},
    {"epoch 1\n" S0 "server x1 127.0.0.1:7002 node=n1 rack=r0\n", "line 3",
     "bad server id"},
    /* addresses and ports */
    {"epoch 1\n" S0 "server 1 127.0.0.1:7001 node=n1 rack=r0\n", "line 3",
     "duplicate address 127.0.0.1:7001 (server 0, line 2)"},
    {"epoch 1\nserver 0 300.0.0.1:7001 node=n0 rack=r0\n", "line 2",
     "bad IPv4 address '300.0.0.1'"},
    {"epoch 1\nserver 0 localhost:7001 node=n0 rack=r0\n", "line 2", "bad IPv4 address"},
    {"epoch 1\nserver 0 10.0.1:7001 node=n0 rack=r0\n", "line 2", "bad IPv4 address"},
    {"epoch 1\nserver 0 10.0.0.01:7001 node=n0 rack=r0\n", "line 2", "bad IPv4 address"},
    {"epoch 1\nserver 0 ::1:7001 node=n0 rack=r0\n", "line 2", "bad IPv4 address"},
    {"epoch 1\nserver 0 0.0.0.0:7001 node=n0 rack=r0\n", "line 2",
     "not a server address"},
    {"epoch 1\nserver 0 :7001 node=n0 rack=r0\n", "line 2", "bad IPv4 address"},
    {"epoch 1\nserver 0 10.0.0.1 node=n0 rack=r0\n", "line 2", "<ipv4>:<port>"},
    {"epoch 1\nserver 0 10.0.0.1:0 node=n0 rack=r0\n", "line 2", "bad port '0'"},
    {"epoch 1\nserver 0 10.0.0.1:65536 node=n0 rack=r0\n", "line 2", "bad port '65536'"},
    {"epoch 1\nserver 0 10.0.0.1: node=n0 rack=r0\n", "line 2", "bad port"},
    {"epoch 1\nserver 0 10.0.0.1:7x node=n0 rack=r0\n", "line 2", "bad port '7x'"},
    /* labels and attributes */
    {"epoch 1\nserver 0 10.0.0.1:7001 node=n/0 rack=r0\n", "line 2",
     "bad node label 'n/0'"},
    {"epoch 1\nserver 0 10.0.0.1:7001 node= rack=r0\n", "line 2", "bad node label"},
    {"epoch 1\nserver 0 10.0.0.1:7001 node=n0 rack=r\xc3\xa9\n", "line 2",
     "bad rack label"},
    {"epoch 1\nserver 0 10.0.0.1:7001 node=n0 rack="
     "r234567890123456789012345678901234567890123456789012345678901234\n",
     "line 2", "bad rack label"},
    {"epoch 1\nserver 0 10.0.0.1:7001 rack=r0\n", "line 2", "missing node="},
    {"epoch 1\nserver 0 10.0.0.1:7001 node=n0\n", "line 2", "missing rack="},
    {"epoch 1\nserver 0 10.0.0.1:7001 node=n0 rack=r0 node=n1\n", "line 2",
     "node= given twice"},
    {"epoch 1\nserver 0 10.0.0.1:7001 node=n0 rack=r0 zone=z\n", "line 2",
     "unknown attribute 'zone=z'"},
    {"epoch 1\nserver 0\n", "line 2", "expected 'server <id>"},
    {"epoch 1\n" S0 "server 1 127.0.0.1:7002 node=n0 rack=r1\n", "line 3",
     "node n0 is in rack r0 on line 2"},
    /* keywords and epoch */
    {"epoch 1\n" S0 "servers 1 127.0.0.1:7002 node=n1 rack=r0\n", "line 3",
     "unknown keyword 'servers'"},
    {"epoch 1\nEPOCH 2\n" S0, "line 2", "unknown keyword 'EPOCH'"},
    {S0 S1, "no 'epoch", NULL},
    {"epoch 1\n" S0 "epoch 2\n", "line 3", "second 'epoch' line (first on line 1)"},
    {"epoch -1\n" S0, "line 1", "bad epoch '-1'"},
    {"epoch 18446744073709551616\n" S0, "line 1", "bad epoch"},
    {"epoch\n" S0, "line 1", "expected 'epoch <number>'"},
    {"epoch 1 2\n" S0, "line 1", "expected 'epoch <number>'"},
    {"epoch 1\n# no servers\n", "no 'server' lines", NULL},
    {"", "no 'epoch", NULL},
    /* bytes */
    {"epoch 1\n" S0 "server 1 127.0.0.1:7002 node=n1 rack=r0 a b c d e\n", "line 3",
     "too many fields"},
};

static void expect_bad(const char *text, size_t len, const char *want1, const char *want2)
{
    char err[512];
    cks_cluster_h map = NULL;
    cks_status_t st;

    memset(err, 'x', sizeof(err));
    err[sizeof(err) - 1] = '\0';
    st = cks_cluster_parse(text, len, &map, err, sizeof(err));
    cr_assert_eq(st, CKS_ERR_INVALID_PARAM, "accepted (%s):\n%s", cks_status_name(st),
                 text);
    cr_assert_null(map, "output written on failure");
    cr_assert_eq(strncmp(err, "cluster map", 11), 0, "message: %s", err);
    cr_assert_not_null(strstr(err, want1), "message '%s' lacks '%s'", err, want1);
    if (want2 != NULL) {
        cr_assert_not_null(strstr(err, want2), "message '%s' lacks '%s'", err, want2);
    }
}

Test(cluster_map, invalid_maps_refused, .timeout = 10)
{
    for (size_t i = 0; i < CKS_ARRAY_SIZE(bad_maps); i++) {
        expect_bad(bad_maps[i].text, strlen(bad_maps[i].text), bad_maps[i].want1,
                   bad_maps[i].want2);
    }
}

Test(cluster_map, invalid_bytes_refused, .timeout = 10)
{
    static const char nul[] = "epoch 1\nserver 0 127.0.0.1:7001\0 node=n0 rack=r0\n";
    size_t big = CKS_CLUSTER_LINE_MAX + 1;
    char *text = malloc(big + 32);

    expect_bad(nul, sizeof(nul) - 1, "line 2", "NUL byte");

    cr_assert_not_null(text);
    strcpy(text, "epoch 1\n");
    memset(text + 8, ' ', big);
    memcpy(text + 8 + big, "\n", 2);
    expect_bad(text, strlen(text), "line 2", "longer than 1024 bytes");
    free(text);

    /* the length is refused before a byte is read */
    expect_bad("epoch 1\n", CKS_CLUSTER_TEXT_MAX + 1, "more than", NULL);
}

Test(cluster_map, server_count_bound, .timeout = 30)
{
    tsrv_t *s = calloc(CKS_CLUSTER_MAX_SERVERS + 1, sizeof(*s));
    char *t;
    cks_cluster_h map;

    cr_assert_not_null(s);
    flat_layout(s, CKS_CLUSTER_MAX_SERVERS + 1, 64);
    t = map_text(1, s, CKS_CLUSTER_MAX_SERVERS);
    map = parse_ok(t);
    cr_assert_eq(cks_cluster_nservers(map), CKS_CLUSTER_MAX_SERVERS);
    cr_assert_eq(cks_cluster_nnodes(map), CKS_CLUSTER_MAX_SERVERS);
    cr_assert_eq(cks_cluster_nracks(map), 64);
    cks_cluster_free(map);
    free(t);

    t = map_text(1, s, CKS_CLUSTER_MAX_SERVERS + 1);
    expect_bad(t, strlen(t), "line 4098", "more than 4096 servers");
    free(t);
    free(s);
}

Test(cluster_map, error_buffer, .timeout = 10)
{
    static const char bad[] = "epoch 1\nbogus\n";
    char err[8];
    cks_cluster_h map = NULL;

    memset(err, 'x', sizeof(err));
    ST_EQ(cks_cluster_parse(bad, strlen(bad), &map, err, sizeof(err)),
          CKS_ERR_INVALID_PARAM);
    cr_assert_eq(strlen(err), sizeof(err) - 1, "not truncated to fit");
    cr_assert_eq(strncmp(err, "cluster", 7), 0);
    ST_EQ(cks_cluster_parse(bad, strlen(bad), &map, NULL, 0), CKS_ERR_INVALID_PARAM);
    cr_assert_null(map);
    ST_EQ(cks_cluster_parse(bad, strlen(bad), NULL, NULL, 0), CKS_ERR_INVALID_PARAM);
}

Test(cluster_map, check_k_m, .timeout = 10)
{
    static const char six_on_five[] = "epoch 7\n"
                                      "server 0 127.0.0.1:7001 node=a rack=r0\n"
                                      "server 1 127.0.0.1:7002 node=a rack=r0\n"
                                      "server 2 127.0.0.1:7003 node=b rack=r1\n"
                                      "server 3 127.0.0.1:7004 node=c rack=r1\n"
                                      "server 4 127.0.0.1:7005 node=d rack=r2\n"
                                      "server 5 127.0.0.1:7006 node=e rack=r2\n";
    cks_cluster_h map = parse_ok(six_on_five);
    char err[512];

    cr_assert_eq(cks_cluster_nnodes(map), 5);
    ST_OK(cks_cluster_check(map, 3, 2, err, sizeof(err)));
    ST_OK(cks_cluster_check(map, 1, 4, err, sizeof(err)));
    ST_EQ(cks_cluster_check(map, 4, 2, err, sizeof(err)), CKS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(err, "need 6 distinct nodes"), "message: %s", err);
    cr_assert_not_null(strstr(err, "only 5 nodes (6 servers)"), "message: %s", err);
    ST_EQ(cks_cluster_check(map, 0, 2, err, sizeof(err)), CKS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(err, "k = 0"), "message: %s", err);
    ST_EQ(cks_cluster_check(map, 17, 2, err, sizeof(err)), CKS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(err, "k = 17"), "message: %s", err);
    ST_EQ(cks_cluster_check(map, 2, 0, err, sizeof(err)), CKS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(err, "m = 0"), "message: %s", err);
    ST_EQ(cks_cluster_check(map, 1, 5, err, sizeof(err)), CKS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(err, "m = 5"), "message: %s", err);
    cks_cluster_free(map);

    /* the k = 16, m = 4 limits are reachable */
    tsrv_t s[20];
    map = map_of(s, flat_layout(s, 20, 5));
    ST_OK(cks_cluster_check(map, 16, 4, err, sizeof(err)));
    cks_cluster_free(map);
}

/* ---- placement: the hash --------------------------------------------------- */

Test(placement, xxh64_reference_vectors, .timeout = 10)
{
    /* From libxxhash 0.8.1 (XXH64), seeds 0 and 0x9E3779B185EBCA87. */
    static const struct {
        size_t len;
        uint64_t h0, h1;
    } v[] = {
        {0, UINT64_C(0xef46db3751d8e999), UINT64_C(0x6ec6d05f61c7e7a7)},
        {1, UINT64_C(0xd24ec4f1a98c6e5b), UINT64_C(0x727c10e0d238e188)},
        {3, UINT64_C(0x44bc2cf5ad770999), UINT64_C(0xa7cb2aac405e36c7)},
        {16, UINT64_C(0x5c5b90c34e376d0b), UINT64_C(0xb88793e9256783a6)},
        {43, UINT64_C(0x0b242d361fda71bc), UINT64_C(0xb8a8089add7e03d9)},
        {100, UINT64_C(0x6ac1e58032166597), UINT64_C(0x0000278bda0ee3f586)},
    };
    static const char *text[] = {"", "a", "abc", "0123456789abcdef",
                                 "The quick brown fox jumps over the lazy dog"};
    uint8_t bytes[101];

    for (int i = 0; i < 100; i++) {
        bytes[i + 1] = (uint8_t)i; /* unaligned on purpose */
    }
    for (size_t i = 0; i < CKS_ARRAY_SIZE(v); i++) {
        const void *p = (i < 5) ? (const void *)text[i] : (const void *)&bytes[1];
        uint64_t h0 = cks_place_hash64(p, v[i].len, 0);
        uint64_t h1 = cks_place_hash64(p, v[i].len, UINT64_C(0x9E3779B185EBCA87));
        cr_assert_eq(h0, v[i].h0, "len %zu seed 0: %016" PRIx64, v[i].len, h0);
        cr_assert_eq(h1, v[i].h1, "len %zu seed P1: %016" PRIx64, v[i].len, h1);
    }
}

/* ---- placement: a literal reference ---------------------------------------- */

typedef struct {
    uint64_t w;
    unsigned id;
    size_t pos;
} cand_t;

static int cand_cmp(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;

    if (x->w != y->w) {
        return (x->w < y->w) ? 1 : -1; /* highest weight first */
    }
    return (x->id > y->id) - (x->id < y->id); /* then lower id */
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

/* The definition in cks_md.h, step by step, with the generic hash. */
/* The least possible maximum of chunks on one rack when w chunks go on
 * distinct live nodes, live[r] of them in rack r (at least w in all): fill
 * the racks level by level. */
static unsigned least_rack_max(const unsigned *live, size_t nr, unsigned w)
{
    for (unsigned most = 1;; most++) {
        unsigned room = 0;
        for (size_t r = 0; r < nr; r++) {
            room += CKS_MIN(most, live[r]);
        }
        if (room >= w) {
            return most;
        }
    }
}

static cks_status_t ref_place(cks_cluster_h map, const char *job, const char *key,
                              uint64_t stripe, unsigned k, unsigned m,
                              const uint8_t *down, uint16_t *out)
{
    size_t n = cks_cluster_nservers(map), nn = cks_cluster_nnodes(map);
    size_t nr = cks_cluster_nracks(map), jl = strlen(job), kl = strlen(key);
    unsigned w = k + m, distinct = 0, live_racks = 0, live_nodes = 0, d, c;
    unsigned *rack_live = calloc(nr, sizeof(unsigned));
    unsigned *rack_used = calloc(nr, sizeof(unsigned));
    unsigned char *node_live = calloc(nn, 1), *node_used = calloc(nn, 1);
    cand_t *cand = calloc(n, sizeof(*cand));
    uint8_t rec[600], wrec[16];
    uint64_t g;
    cks_status_t st = CKS_OK;

    cr_assert(rack_live && rack_used && node_live && node_used && cand);
    for (size_t p = 0; p < n; p++) {
        const cks_cluster_server_t *s = cks_cluster_server(map, p);
        if (!cks_place_down_test(down, p) && !node_live[s->node]) {
            node_live[s->node] = 1;
            live_nodes++;
            live_racks += (rack_live[s->rack]++ == 0);
        }
    }
    if (live_nodes < w) {
        st = CKS_ERR_UNREACHABLE;
        goto out;
    }
    d = CKS_MIN(w, live_racks);
    c = least_rack_max(rack_live, nr, w);
    put_le(rec, jl, 4);
    memcpy(rec + 4, job, jl);
    put_le(rec + 4 + jl, kl, 4);
    memcpy(rec + 8 + jl, key, kl);
    put_le(rec + 8 + jl + kl, stripe, 8);
    g = cks_place_hash64(rec, 16 + jl + kl, 0);
    for (unsigned slot = 0; slot < w; slot++) {
        size_t nc = 0;
        for (size_t p = 0; p < n; p++) {
            const cks_cluster_server_t *s = cks_cluster_server(map, p);
            unsigned used = rack_used[s->rack];
            if (cks_place_down_test(down, p) || node_used[s->node] || (used >= c) ||
                ((used > 0) && (w - slot - 1 < d - distinct))) {
                continue;
            }
            put_le(wrec, g, 8);
            put_le(wrec + 8, s->id, 4);
            put_le(wrec + 12, slot, 4);
            cand[nc++] = (cand_t){cks_place_hash64(wrec, 16, 0), s->id, p};
        }
        cr_assert_gt(nc, 0, "reference: no candidate for slot %u", slot);
        qsort(cand, nc, sizeof(*cand), cand_cmp);
        {
            const cks_cluster_server_t *s = cks_cluster_server(map, cand[0].pos);
            out[slot] = (uint16_t)cand[0].pos;
            node_used[s->node] = 1;
            distinct += (rack_used[s->rack]++ == 0);
        }
    }
out:
    free(cand);
    free(node_used);
    free(node_live);
    free(rack_used);
    free(rack_live);
    return st;
}

static unsigned mr_cases, mr_unreachable;

/* matches_reference: cks_place() of one object against ref_place(). */
static void match_reference(place_case_t *c)
{
    uint64_t stripe   = cks_test_rng_next(c->rs) % 4;
    const uint8_t *dp = NULL;
    uint16_t a[CKS_PLACE_WIDTH_MAX], b[CKS_PLACE_WIDTH_MAX];
    cks_status_t st;

    if (c->obj % 2) { /* about one server in eight down */
        memset(c->down, 0, sizeof(c->down));
        for (size_t p = 0; p < c->n; p++) {
            if (rnd_below(c->rs, 8) == 0) {
                cks_place_down_set(c->down, p);
            }
        }
        dp = c->down;
    }
    st = ref_place(c->map, JOB, c->key, stripe, c->k, c->m, dp, b);
    ST_EQ(cks_place(c->map, J(JOB), J(c->key), stripe, c->k, c->m, dp, a), st);
    mr_cases++;
    if (st != CKS_OK) {
        mr_unreachable++;
        return;
    }
    for (unsigned i = 0; i < c->k + c->m; i++) {
        cr_assert_eq(a[i], b[i], "map %d object %d slot %u: %u, reference %u", c->iter,
                     c->obj, i, (unsigned)a[i], (unsigned)b[i]);
    }
}

Test(placement, matches_reference, .timeout = 120)
{
    uint64_t rs = test_seed("matches_reference", 21);

    for_random_objects(&rs, 150, 20, match_reference);
    fprintf(stderr, "[cluster::matches_reference] %u placements, %u unreachable\n", mr_cases,
            mr_unreachable);
    cr_assert_gt(mr_cases - mr_unreachable, 1000);
}

/* ---- placement: pinned groups ---------------------------------------------- */

/* Part of the storage format: if this test fails, the placement of every
 * stored chunk has changed. The groups were also computed by an independent
 * Python script from the definition in cks_md.h and libxxhash 0.8.1's XXH64,
 * with the same results. */
Test(placement, pinned_groups, .timeout = 10)
{
    static const struct {
        const char *key;
        uint64_t stripe;
        unsigned ids[6];
    } pin[] = {
        {"model.embed_tokens.weight", UINT64_C(0), {6, 8, 10, 1, 2, 4}},
        {"model.layers.0.mlp.experts.3.w1", UINT64_C(0), {11, 8, 10, 4, 1, 2}},
        {"optimizer/adam/exp_avg/layer.17", UINT64_C(1), {4, 11, 3, 7, 8, 0}},
        {"rng/rank.0", UINT64_C(0), {0, 3, 6, 8, 4, 9}},
        {"x", UINT64_C(0), {3, 6, 5, 2, 11, 0}},
        {"model.layers.79.self_attn.o_proj.weight", UINT64_C(7), {4, 8, 2, 1, 9, 11}},
        {"\xc3\xa9t\xc3\xa9/expert.63", UINT64_C(0), {2, 8, 7, 11, 9, 3}},
        {"model.embed_tokens.weight", UINT64_MAX, {10, 8, 4, 9, 0, 5}},
    };
    char err[512] = "";
    cks_cluster_h map = NULL;

    ST_OK(cks_cluster_load(CKS_SOURCE_DIR "/examples/cluster-12.map", &map, err,
                           sizeof(err)));
    for (size_t i = 0; i < CKS_ARRAY_SIZE(pin); i++) {
        uint16_t out[6];
        unsigned ids[6];

        ST_OK(cks_place(map, J("llama-70b"), J(pin[i].key), pin[i].stripe, 4, 2, NULL,
                        out));
        to_ids(map, out, 6, ids);
        for (int j = 0; j < 6; j++) {
            cr_assert_eq(ids[j], pin[i].ids[j],
                         "%s stripe %" PRIu64 " slot %d: %u, "
                         "pinned %u",
                         pin[i].key, pin[i].stripe, j, ids[j], pin[i].ids[j]);
        }
    }
    cks_cluster_free(map);
}

/* ---- placement: properties ------------------------------------------------- */

/* Coordinator candidates: the first is the placement coordinator (what
 * every client and server computed before failover), they lie on distinct
 * nodes, and there are as many as the map has nodes, at most
 * CKS_COORD_CANDIDATES_MAX. */
Test(placement, coordinator_candidates, .timeout = 30)
{
    static const char *maps[] = {"/examples/cluster-12.map", "/examples/cluster-6.map"};
    for (size_t mi = 0; mi < CKS_ARRAY_SIZE(maps); mi++) {
        char path[512], err[512] = "";
        cks_cluster_h map = NULL;
        snprintf(path, sizeof(path), "%s%s", CKS_SOURCE_DIR, maps[mi]);
        ST_OK(cks_cluster_load(path, &map, err, sizeof(err)));
        size_t want = CKS_MIN(cks_cluster_nnodes(map), (size_t)CKS_COORD_CANDIDATES_MAX);
        for (uint64_t v = 0; v < 2000; v++) {
            uint16_t cand[CKS_COORD_CANDIDATES_MAX];
            size_t n = cks_place_coordinators(map, J("job-a"), v, cand,
                                              CKS_COORD_CANDIDATES_MAX);
            cr_assert_eq(n, want, "%s version %" PRIu64 ": %zu candidates", maps[mi], v, n);
            cr_assert_eq(cand[0], cks_place_coordinator(map, J("job-a"), v));
            for (size_t i = 0; i < n; i++) {
                for (size_t j = i + 1; j < n; j++) {
                    cr_assert_neq(cks_cluster_server(map, cand[i])->node,
                                  cks_cluster_server(map, cand[j])->node,
                                  "%s version %" PRIu64 ": candidates %zu and %zu share a node",
                                  maps[mi], v, i, j);
                }
            }
            cr_assert_eq(cks_place_coordinators(map, J("job-a"), v, cand, 2), CKS_MIN(want, 2));
        }
        cks_cluster_free(map);
    }
}

Test(placement, deterministic_across_loads, .timeout = 60)
{
    uint64_t seed = test_seed("deterministic_across_loads", 31);
    tsrv_t s[12];
    size_t n = flat_layout(s, 12, 4);
    char *t1 = map_text(5, s, n), *t2;
    size_t len;
    cks_cluster_h m1 = parse_ok(t1), m2, m3;
    unsigned differ_stripe = 0;

    /* second load from the serialized text, third from reversed lines */
    ST_OK(cks_cluster_serialize(m1, &t2, &len));
    m2 = parse_ok(t2);
    for (size_t i = 0; i < n / 2; i++) {
        tsrv_t t = s[i];
        s[i] = s[n - 1 - i];
        s[n - 1 - i] = t;
    }
    free(t1);
    t1 = map_text(5, s, n);
    m3 = parse_ok(t1);
    for (unsigned i = 0; i < 10000; i++) {
        uint16_t a[6], b[6], c[6], d[6], e[6];
        char key[80];

        obj_key(key, sizeof(key), seed, i);
        ST_OK(cks_place(m1, J(JOB), J(key), 0, 4, 2, NULL, a));
        ST_OK(cks_place(m1, J(JOB), J(key), 0, 4, 2, NULL, b));
        ST_OK(cks_place(m2, J(JOB), J(key), 0, 4, 2, NULL, c));
        ST_OK(cks_place(m3, J(JOB), J(key), 0, 4, 2, NULL, d));
        cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "object %u: two calls differ", i);
        cr_assert_eq(memcmp(a, c, sizeof(a)), 0, "object %u: reloaded map differs", i);
        cr_assert_eq(memcmp(a, d, sizeof(a)), 0, "object %u: reordered map differs", i);
        /* and the inputs matter: another stripe gives another group */
        ST_OK(cks_place(m1, J(JOB), J(key), 1, 4, 2, NULL, e));
        differ_stripe += (memcmp(a, e, sizeof(a)) != 0);
    }
    cr_assert_gt(differ_stripe, 9000, "stripe barely changes the group (%u)",
                 differ_stripe);
    free(t1);
    free(t2);
    cks_cluster_free(m1);
    cks_cluster_free(m2);
    cks_cluster_free(m3);
}

/* The rack rules, computed independently of both implementations: chunks on
 * distinct nodes, on exactly min(W, live racks) racks, and no rack holding
 * more than the least possible maximum. */
static void check_group(cks_cluster_h map, const uint8_t *down, const uint16_t *out,
                        unsigned w)
{
    size_t n = cks_cluster_nservers(map), nr = cks_cluster_nracks(map);
    size_t nn = cks_cluster_nnodes(map);
    unsigned *live = calloc(nr, sizeof(unsigned)), *used = calloc(nr, sizeof(unsigned));
    unsigned char *node_seen = calloc(nn, 1), *node_used = calloc(nn, 1);
    unsigned live_racks = 0, racks = 0, max_used = 0, best_max;

    cr_assert(live && used && node_seen && node_used);
    for (size_t p = 0; p < n; p++) {
        const cks_cluster_server_t *s = cks_cluster_server(map, p);
        if (!cks_place_down_test(down, p) && !node_seen[s->node]) {
            node_seen[s->node] = 1;
            live_racks += (live[s->rack]++ == 0);
        }
    }
    for (unsigned i = 0; i < w; i++) {
        const cks_cluster_server_t *s = cks_cluster_server(map, out[i]);
        cr_assert_not_null(s);
        cr_assert(!cks_place_down_test(down, out[i]), "slot %u on a down server", i);
        cr_assert(!node_used[s->node], "slot %u: node %s used twice", i, s->node_label);
        node_used[s->node] = 1;
        racks += (used[s->rack]++ == 0);
        max_used = CKS_MAX(max_used, used[s->rack]);
    }
    cr_assert_eq(racks, CKS_MIN(w, live_racks), "%u racks used of %u live, W = %u", racks,
                 live_racks, w);
    best_max = least_rack_max(live, nr, w);
    cr_assert_eq(max_used, best_max, "a rack holds %u chunks; %u was possible", max_used,
                 best_max);
    free(node_used);
    free(node_seen);
    free(used);
    free(live);
}

static unsigned dn_groups;

/* distinct_nodes_and_racks: one object's group (with a server down for one
 * object in three) obeys check_group(). */
static void distinct_group(place_case_t *c)
{
    uint16_t out[CKS_PLACE_WIDTH_MAX];
    const uint8_t *dp = NULL;
    cks_status_t st;

    if (c->obj % 3 == 0) {
        memset(c->down, 0, sizeof(c->down));
        cks_place_down_set(c->down, rnd_below(c->rs, (unsigned)c->n));
        dp = c->down;
    }
    st = cks_place(c->map, J(JOB), J(c->key), (uint64_t)c->obj, c->k, c->m, dp, out);
    if (st == CKS_ERR_UNREACHABLE) {
        cr_assert_not_null(dp, "unreachable without down servers");
        return;
    }
    ST_OK(st);
    check_group(c->map, dp, out, c->k + c->m);
    dn_groups++;
}

Test(placement, distinct_nodes_and_racks, .timeout = 120)
{
    uint64_t rs = test_seed("distinct_nodes_and_racks", 41);

    for_random_objects(&rs, 200, 50, distinct_group);
    fprintf(stderr, "[cluster::distinct_nodes_and_racks] %u groups checked\n", dn_groups);
    cr_assert_gt(dn_groups, 5000);
}

/* With at least W racks, every chunk of a stripe is on its own rack, however
 * unequal the racks. */
Test(placement, distinct_racks_when_enough, .timeout = 60)
{
    uint64_t seed = test_seed("distinct_racks_when_enough", 42);
    tsrv_t s[40];
    size_t n = 0;
    cks_cluster_h map;

    /* 8 racks of 1, 2, ..., 8 nodes (36 nodes), two servers on node 0 */
    for (unsigned r = 0, node = 0; r < 8; r++) {
        for (unsigned j = 0; j <= r; j++, node++) {
            s[n] = (tsrv_t){.id = (unsigned)n, .node = node, .rack = r};
            n++;
        }
    }
    s[n] = (tsrv_t){.id = (unsigned)n, .node = 0, .rack = 0};
    n++;
    map = map_of(s, n);
    cr_assert_eq(cks_cluster_nracks(map), 8);
    for (unsigned w = 2; w <= 8; w++) {
        for (unsigned i = 0; i < 2000; i++) {
            uint16_t out[8];
            unsigned char rack_used[8] = {0};
            char key[80];

            obj_key(key, sizeof(key), seed, i);
            ST_OK(cks_place(map, J(JOB), J(key), 0, w - (w > 4 ? 4 : 1), (w > 4 ? 4 : 1),
                            NULL, out));
            for (unsigned j = 0; j < w; j++) {
                unsigned r = cks_cluster_server(map, out[j])->rack;
                cr_assert(!rack_used[r], "W = %u object %u: rack %u twice", w, i, r);
                rack_used[r] = 1;
            }
        }
    }
    cks_cluster_free(map);
}

typedef struct {
    double max_over_mean, primary_max_over_mean;
    unsigned min, max;
} spread_t;

static spread_t measure_spread(unsigned nracks, unsigned nobj, unsigned nstripes,
                               uint64_t seed)
{
    tsrv_t s[12];
    cks_cluster_h map = map_of(s, flat_layout(s, 12, nracks));
    unsigned load[12] = {0}, prim[12] = {0};
    unsigned total = 0, ptotal = 0, pmax = 0;
    spread_t r = {.min = UINT32_MAX};

    for (unsigned i = 0; i < nobj; i++) {
        char key[80];

        obj_key(key, sizeof(key), seed, i);
        for (unsigned st = 0; st < nstripes; st++) {
            uint16_t out[6];
            ST_OK(cks_place(map, J(JOB), J(key), st, 4, 2, NULL, out));
            for (int j = 0; j < 6; j++) {
                load[out[j]]++;
                total++;
            }
            prim[out[0]]++;
            ptotal++;
        }
    }
    for (int i = 0; i < 12; i++) {
        r.max = CKS_MAX(r.max, load[i]);
        r.min = CKS_MIN(r.min, load[i]);
        pmax = CKS_MAX(pmax, prim[i]);
    }
    r.max_over_mean = r.max / (total / 12.0);
    r.primary_max_over_mean = pmax / (ptotal / 12.0);
    fprintf(stderr,
            "[cluster::spread] 12 servers, %u racks, k=4 m=2, %u objects x %u stripe(s): "
            "chunks per server %u..%u, max/mean %.4f; primaries max/mean %.4f\n",
            nracks, nobj, nstripes, r.min, r.max, r.max_over_mean,
            r.primary_max_over_mean);
    cks_cluster_free(map);
    return r;
}

Test(placement, spread, .timeout = 120)
{
    uint64_t seed = test_seed("spread", 51);
    static const unsigned racks[] = {3, 4, 12};

    for (size_t i = 0; i < CKS_ARRAY_SIZE(racks); i++) {
        spread_t r = measure_spread(racks[i], 10000, 1, seed);
        cr_assert_leq(r.max_over_mean, 1.1, "%u racks: max/mean %.4f", racks[i],
                      r.max_over_mean);
        cr_assert_leq(r.primary_max_over_mean, 1.2, "%u racks: primaries %.4f", racks[i],
                      r.primary_max_over_mean);
    }
}

/* Groups of the same objects on two maps, compared by server id. `changed`
 * is the server that joined (in `after` only) or left (in `before` only). */
typedef struct {
    unsigned groups_changed, slots_moved, slots_total, slots_on_changed;
    unsigned extra_moves; /* moved slots not explained by `changed` itself */
} movement_t;

static movement_t measure_movement(cks_cluster_h before, cks_cluster_h after,
                                   unsigned changed, int joined, uint64_t seed,
                                   const char *what)
{
    movement_t mv = {0};

    for (unsigned i = 0; i < 10000; i++) {
        uint16_t pa[6], pb[6];
        unsigned a[6], b[6];
        int where = -1;
        char key[80];
        unsigned moved = 0;

        obj_key(key, sizeof(key), seed, i);
        ST_OK(cks_place(before, J(JOB), J(key), 0, 4, 2, NULL, pb));
        ST_OK(cks_place(after, J(JOB), J(key), 0, 4, 2, NULL, pa));
        to_ids(before, pb, 6, b);
        to_ids(after, pa, 6, a);
        for (int j = 0; j < 6; j++) {
            if ((joined ? a[j] : b[j]) == changed) {
                where = j;
            }
        }
        for (int j = 0; j < 6; j++) {
            moved += (a[j] != b[j]);
        }
        mv.slots_total += 6;
        mv.slots_moved += moved;
        if (where < 0) {
            /* the server is not in this group: nothing may change */
            cr_assert_eq(moved, 0, "%s: object %u changed without server %u", what, i,
                         changed);
            continue;
        }
        /* slots before the server's slot keep their servers */
        for (int j = 0; j < where; j++) {
            cr_assert_eq(a[j], b[j], "%s: object %u slot %d moved before slot %d", what,
                         i, j, where);
        }
        cr_assert_neq(a[where], b[where]);
        mv.groups_changed++;
        mv.slots_on_changed++;
        mv.extra_moves += moved - 1;
    }
    fprintf(stderr,
            "[cluster::movement] %s: %u of 10000 groups changed (%.2f%%), %u of %u chunk "
            "slots moved (%.2f%%), %u of them to/from the server itself, %u others\n",
            what, mv.groups_changed, mv.groups_changed / 100.0, mv.slots_moved,
            mv.slots_total, 100.0 * mv.slots_moved / mv.slots_total, mv.slots_on_changed,
            mv.extra_moves);
    return mv;
}

/* Bounds on what moves when one server of N joins or leaves (share = 1 / N):
 *  - groups changed: only those holding the server, about W / N of them
 *    (plus 10 % slack);
 *  - slots moved: the server's own slots, about 1 / N of all, must move; the
 *    other slots of its groups move at most as often (a slot freed by it may
 *    be taken by a later slot, or the rack counts shift), so at most 2 / N.
 *    Ranking servers once and handing out slots in that order would move
 *    every later slot of a changed group: about 3.5 / N of all slots. */
static void check_movement(const movement_t *mv, double share)
{
    cr_assert_leq(mv->groups_changed / 10000.0, 6 * share * 1.1, "%u groups changed",
                  mv->groups_changed);
    cr_assert_leq(mv->extra_moves, mv->slots_on_changed, "%u extra moves, %u needed",
                  mv->extra_moves, mv->slots_on_changed);
    cr_assert_leq((double)mv->slots_moved / mv->slots_total, 2 * share, "%u slots moved",
                  mv->slots_moved);
}

static void movement_case(unsigned nracks, unsigned add_rack, const char *what_add,
                          const char *what_remove, uint64_t seed)
{
    tsrv_t s[13];
    size_t n = flat_layout(s, 12, nracks);
    cks_cluster_h m12 = map_of(s, n), m13, m11;
    movement_t mv;
    /* a server's fair share of slots: W / nservers of all of them */
    double share13 = 1.0 / 13, share12 = 1.0 / 12;

    s[12] = (tsrv_t){.id = 12, .node = 12, .rack = add_rack};
    m13 = map_of(s, 13);
    mv = measure_movement(m12, m13, 12, 1, seed, what_add);
    cr_assert_gt(mv.slots_on_changed, 0);
    check_movement(&mv, share13);

    /* remove server 5 (12 servers -> 11) */
    memmove(&s[5], &s[6], 6 * sizeof(s[0]));
    m11 = map_of(s, 11);
    mv = measure_movement(m12, m11, 5, 0, seed, what_remove);
    check_movement(&mv, share12);
    cks_cluster_free(m11);
    cks_cluster_free(m13);
    cks_cluster_free(m12);
}

Test(placement, movement_one_rack_per_node, .timeout = 120)
{
    uint64_t seed = test_seed("movement_one_rack_per_node", 61);

    movement_case(12, 12, "12 -> 13 servers, 12 -> 13 racks",
                  "12 -> 11 servers, 12 -> 11 racks", seed);
}

Test(placement, movement_four_racks, .timeout = 120)
{
    uint64_t seed = test_seed("movement_four_racks", 62);

    /* the 13th server joins rack r1; server 5 leaves rack r1: the number of
     * racks and the cap (2 per rack) stay the same */
    movement_case(4, 1, "12 -> 13 servers in 4 racks", "12 -> 11 servers in 4 racks",
                  seed);
}

/* Placing with servers marked down gives the servers of placing on the map
 * without them: the fallback is deterministic. */
Test(placement, down_equals_removed, .timeout = 120)
{
    uint64_t rs = test_seed("down_equals_removed", 71);
    unsigned compared = 0;

    for (int iter = 0; iter < 100; iter++) {
        tsrv_t s[48], live[48];
        size_t n = random_layout(&rs, s, 48), nl = 0;
        cks_cluster_h map = map_of(s, n), lmap;
        uint8_t down[CKS_PLACE_DOWN_BYTES(48)] = {0};

        for (size_t p = 0; p < n; p++) {
            if (rnd_below(&rs, 5) == 0) {
                cks_place_down_set(down, p);
            }
        }
        for (size_t i = 0; i < n; i++) {
            size_t p;
            ST_OK(cks_cluster_find(map, (uint16_t)s[i].id, &p));
            if (!cks_place_down_test(down, p)) {
                live[nl++] = s[i];
            }
        }
        if ((nl == 0) || (cks_cluster_nnodes(map) < 2)) {
            cks_cluster_free(map);
            continue;
        }
        lmap = map_of(live, nl);
        for (int obj = 0; obj < 30; obj++) {
            unsigned nn = (unsigned)cks_cluster_nnodes(map);
            unsigned m = 1 + rnd_below(&rs, CKS_MIN(3u, nn - 1));
            unsigned k = 1 + rnd_below(&rs, CKS_MIN(6u, nn - m));
            uint16_t a[10], b[10];
            unsigned ia[10], ib[10];
            char key[80];
            cks_status_t st;

            obj_key(key, sizeof(key), rs, (unsigned)obj);
            st = cks_place(map, J(JOB), J(key), 3, k, m, down, a);
            if (k + m > cks_cluster_nnodes(lmap)) {
                ST_EQ(st, CKS_ERR_UNREACHABLE);
                continue;
            }
            ST_OK(st);
            ST_OK(cks_place(lmap, J(JOB), J(key), 3, k, m, NULL, b));
            to_ids(map, a, k + m, ia);
            to_ids(lmap, b, k + m, ib);
            for (unsigned j = 0; j < k + m; j++) {
                cr_assert_eq(ia[j], ib[j], "map %d object %d slot %u", iter, obj, j);
            }
            compared++;
        }
        cks_cluster_free(lmap);
        cks_cluster_free(map);
    }
    fprintf(stderr, "[cluster::down_equals_removed] %u groups compared\n", compared);
    cr_assert_gt(compared, 1000);
}

Test(placement, bad_arguments, .timeout = 10)
{
    tsrv_t s[6];
    cks_cluster_h map = map_of(s, flat_layout(s, 6, 3));
    uint8_t down[1] = {0};
    uint16_t out[CKS_PLACE_WIDTH_MAX];
    char key[CKS_KEY_MAX_LEN + 2], job[CKS_JOB_MAX_LEN + 2];

    memset(key, 'k', sizeof(key));
    memset(job, 'j', sizeof(job));
    for (size_t i = 0; i < CKS_ARRAY_SIZE(out); i++) {
        out[i] = 0xBEEF;
    }
    ST_EQ(cks_place(map, J(JOB), "k", 1, 0, 5, 2, NULL, out), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_place(map, J(JOB), "k", 1, 0, 0, 2, NULL, out), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_place(map, J(JOB), "k", 1, 0, 17, 1, NULL, out), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_place(map, J(JOB), "k", 1, 0, 2, 0, NULL, out), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_place(map, J(JOB), "k", 1, 0, 1, 5, NULL, out), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_place(map, J(JOB), "k", 0, 0, 4, 2, NULL, out), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_place(map, JOB, 0, "k", 1, 0, 4, 2, NULL, out), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_place(map, J(JOB), NULL, 1, 0, 4, 2, NULL, out), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_place(NULL, J(JOB), "k", 1, 0, 4, 2, NULL, out), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_place(map, J(JOB), "k", 1, 0, 4, 2, NULL, NULL), CKS_ERR_INVALID_PARAM);
    ST_EQ(cks_place(map, J(JOB), key, CKS_KEY_MAX_LEN + 1, 0, 4, 2, NULL, out),
          CKS_ERR_KEY_TOO_LONG);
    ST_EQ(cks_place(map, job, CKS_JOB_MAX_LEN + 1, "k", 1, 0, 4, 2, NULL, out),
          CKS_ERR_KEY_TOO_LONG);
    /* the longest job and key are fine */
    ST_OK(cks_place(map, job, CKS_JOB_MAX_LEN, key, CKS_KEY_MAX_LEN, 0, 4, 2, NULL, out));
    for (size_t i = 0; i < CKS_ARRAY_SIZE(out); i++) {
        out[i] = 0xBEEF;
    }
    /* one server down: 5 live nodes for W = 6 */
    cks_place_down_set(down, 3);
    ST_EQ(cks_place(map, J(JOB), "k", 1, 0, 4, 2, down, out), CKS_ERR_UNREACHABLE);
    for (size_t i = 0; i < CKS_ARRAY_SIZE(out); i++) {
        cr_assert_eq(out[i], 0xBEEF, "output written on failure");
    }
    /* W = 5 still fits, and avoids the down server */
    ST_OK(cks_place(map, J(JOB), "k", 1, 0, 3, 2, down, out));
    for (int i = 0; i < 5; i++) {
        cr_assert_neq(out[i], 3);
    }
    cks_cluster_free(map);
}
