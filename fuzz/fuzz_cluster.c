/*
 * DESIGN: libFuzzer target for the cluster map text parser
 * (cks_cluster_parse() in metadata/cluster.c, compiled into this executable
 * with placement.c and common/, with coverage and ASan/UBSan). The input is
 * the map text as it would come from a file or the wire.
 *
 * Properties checked; a violation aborts, so libFuzzer saves the input:
 *  - a refused map is CKS_ERR_INVALID_PARAM (or NO_MEMORY), leaves the
 *    output alone, and writes a non-empty, NUL-terminated message;
 *  - an accepted map keeps the rules of cks_md.h: 1..CKS_CLUSTER_MAX_SERVERS
 *    servers in strictly increasing id order, ports 1..65535, canonical
 *    dotted quads (not 0.0.0.0), labels of 1..63 bytes of [A-Za-z0-9._-],
 *    dense node and rack indices numbered in order of first appearance, a
 *    node in one rack only, unique address:port; cks_cluster_find() finds
 *    every id at its position;
 *  - round trip: the canonical text parses to an equal map, whose text is
 *    the same bytes;
 *  - a map that cks_cluster_check() accepts for (k, m), chosen from the
 *    input's length, can place a stripe: k + m positions on distinct nodes.
 *
 * Single-threaded, as libFuzzer calls it; no state kept between inputs.
 */
#include "cks_md.h"

#include "fuzz_util.h"

#include <arpa/inet.h>
#include <string.h>

#define FZ_TARGET "fuzz_cluster"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_init();
    return 0;
}

static int fc_label_ok(const char *s)
{
    size_t n = strnlen(s, CKS_CLUSTER_LABEL_MAX + 1);

    if (n == 0 || n > CKS_CLUSTER_LABEL_MAX) {
        return 0;
    }
    return strspn(s,
                  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
           n;
}

static void fc_check_map(cks_cluster_h map)
{
    size_t n = cks_cluster_nservers(map), nnodes = cks_cluster_nnodes(map);
    size_t nracks = cks_cluster_nracks(map), pos;
    uint16_t node_rack[CKS_CLUSTER_MAX_SERVERS];
    size_t next_node = 0, next_rack = 0;
    char addr[CKS_CLUSTER_ADDR_LEN];

    if (n == 0 || n > CKS_CLUSTER_MAX_SERVERS || nnodes == 0 || nnodes > n ||
        nracks == 0 || nracks > nnodes) {
        FZ_FAIL("%zu servers, %zu nodes, %zu racks", n, nnodes, nracks);
    }
    if (cks_cluster_server(map, n) != NULL) {
        FZ_FAIL("a server past the last position");
    }
    for (size_t i = 0; i < n; i++) {
        const cks_cluster_server_t *s = cks_cluster_server(map, i);
        struct in_addr in = {htonl(s->ipv4)};

        if (i > 0 && cks_cluster_server(map, i - 1)->id >= s->id) {
            FZ_FAIL("server %zu: ids not strictly increasing", i);
        }
        if (s->port == 0 || s->ipv4 == 0 ||
            inet_ntop(AF_INET, &in, addr, sizeof(addr)) == NULL ||
            strncmp(addr, s->addr, sizeof(addr)) != 0) {
            FZ_FAIL("server %u: address %.16s:%u", s->id, s->addr, s->port);
        }
        if (!fc_label_ok(s->node_label) || !fc_label_ok(s->rack_label)) {
            FZ_FAIL("server %u: bad label", s->id);
        }
        /* dense indices in order of first appearance */
        if (s->node > next_node || s->node >= nnodes || s->rack > next_rack ||
            s->rack >= nracks) {
            FZ_FAIL("server %u: node %u / rack %u not dense", s->id, s->node, s->rack);
        }
        if (s->node == next_node) {
            node_rack[next_node++] = s->rack;
        } else if (node_rack[s->node] != s->rack) {
            FZ_FAIL("server %u: node %u in two racks", s->id, s->node);
        }
        if (s->rack == next_rack) {
            next_rack++;
        }
        for (size_t j = 0; j < i && n <= 512; j++) { /* labels and endpoints */
            const cks_cluster_server_t *t = cks_cluster_server(map, j);
            if ((t->node == s->node) != (strcmp(t->node_label, s->node_label) == 0) ||
                (t->rack == s->rack) != (strcmp(t->rack_label, s->rack_label) == 0)) {
                FZ_FAIL("servers %u and %u: indices disagree with labels", t->id, s->id);
            }
            if (t->ipv4 == s->ipv4 && t->port == s->port) {
                FZ_FAIL("servers %u and %u: same address and port", t->id, s->id);
            }
        }
        if (cks_cluster_find(map, s->id, &pos) != CKS_OK || pos != i) {
            FZ_FAIL("server %u not found at position %zu", s->id, i);
        }
    }
    if (next_node != nnodes || next_rack != nracks) {
        FZ_FAIL("%zu nodes and %zu racks counted, %zu and %zu said", next_node, next_rack,
                nnodes, nracks);
    }
}

static void fc_same(cks_cluster_h a, cks_cluster_h b)
{
    size_t n = cks_cluster_nservers(a);

    if (cks_cluster_epoch(a) != cks_cluster_epoch(b) || n != cks_cluster_nservers(b) ||
        cks_cluster_nnodes(a) != cks_cluster_nnodes(b) ||
        cks_cluster_nracks(a) != cks_cluster_nracks(b)) {
        FZ_FAIL("round trip: epoch or counts changed");
    }
    for (size_t i = 0; i < n; i++) {
        const cks_cluster_server_t *s = cks_cluster_server(a, i);
        const cks_cluster_server_t *t = cks_cluster_server(b, i);

        if (s->id != t->id || s->port != t->port || s->node != t->node ||
            s->rack != t->rack || s->ipv4 != t->ipv4 || strcmp(s->addr, t->addr) != 0 ||
            strcmp(s->node_label, t->node_label) != 0 ||
            strcmp(s->rack_label, t->rack_label) != 0) {
            FZ_FAIL("round trip: server at position %zu changed", i);
        }
    }
}

static void fc_roundtrip(cks_cluster_h map)
{
    cks_cluster_h map2 = NULL;
    char *text = NULL, *text2 = NULL;
    size_t len = 0, len2 = 0;
    char err[256] = "";

    if (cks_cluster_serialize(map, &text, &len) != CKS_OK) {
        FZ_FAIL("serialize failed");
    }
    if (strlen(text) != len) {
        FZ_FAIL("serialized text of %zu bytes says %zu", strlen(text), len);
    }
    if (cks_cluster_parse(text, len, &map2, err, sizeof(err)) != CKS_OK) {
        FZ_FAIL("canonical text refused: %s", err);
    }
    fc_same(map, map2);
    if (cks_cluster_serialize(map2, &text2, &len2) != CKS_OK || len2 != len ||
        memcmp(text, text2, len) != 0) {
        FZ_FAIL("canonical text not stable");
    }
    free(text2);
    free(text);
    cks_cluster_free(map2);
}

static void fc_place(cks_cluster_h map, size_t size)
{
    unsigned k = 1 + (unsigned)(size % 4), m = 1 + (unsigned)(size / 4 % 2);
    uint16_t out[CKS_PLACE_WIDTH_MAX];
    uint16_t node[CKS_PLACE_WIDTH_MAX];
    cks_status_t st;

    if (cks_cluster_check(map, k, m, NULL, 0) != CKS_OK) {
        if (k + m <= cks_cluster_nnodes(map)) {
            FZ_FAIL("check refused k %u m %u with %zu nodes", k, m,
                    cks_cluster_nnodes(map));
        }
        return;
    }
    st = cks_place(map, "job", 3, "key", 3, size, k, m, NULL, out);
    if (st != CKS_OK) {
        FZ_FAIL("a checked map (k %u m %u) cannot place: %d", k, m, st);
    }
    for (unsigned i = 0; i < k + m; i++) {
        const cks_cluster_server_t *s = cks_cluster_server(map, out[i]);
        if (s == NULL) {
            FZ_FAIL("placed on position %u of %zu", out[i], cks_cluster_nservers(map));
        }
        node[i] = s->node;
        for (unsigned j = 0; j < i; j++) {
            if (node[j] == node[i]) {
                FZ_FAIL("two chunks of a stripe on node %u", node[i]);
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cks_cluster_h map = (cks_cluster_h)&fz_err_fd; /* not written on failure */
    char err[256];
    cks_status_t st;

    memset(err, 'x', sizeof(err));
    st = cks_cluster_parse((const char *)data, size, &map, err, sizeof(err));
    if (st != CKS_OK) {
        if (st != CKS_ERR_INVALID_PARAM && st != CKS_ERR_NO_MEMORY) {
            FZ_FAIL("undocumented status %d", st);
        }
        if (map != (cks_cluster_h)&fz_err_fd) {
            FZ_FAIL("refused, but the output was written");
        }
        if (memchr(err, '\0', sizeof(err)) == NULL || err[0] == '\0') {
            FZ_FAIL("refused without a terminated message");
        }
        return 0;
    }
    fc_check_map(map);
    fc_roundtrip(map);
    fc_place(map, size);
    cks_cluster_free(map);
    return 0;
}
