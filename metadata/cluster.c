/*
 * DESIGN: the cluster map (see cks_md.h and docs/CLUSTER_MAP.md): its text
 * format, its validation, and the immutable in-memory form that placement
 * reads.
 *
 * Owns: parsing a map from a file or from bytes (untrusted: every line,
 * token, count and number is bounded before use), turning it into a
 * canonical form (servers sorted by id, dense node and rack indices in that
 * order, so that positions do not depend on the order of the lines), and
 * writing it back as canonical text.
 *
 * Threads: load, parse and free run on whichever thread owns the map
 * (server start-up, client create, a map update). A loaded map is never
 * written again, so any number of threads read it without a lock.
 *
 * Errors: the first problem found, in file order, ends the parse. Its
 * message names the source and the line and is written to the caller's
 * buffer and logged once, here, with cks_error().
 *
 * Must never: use UCX or CUDA, trust a length or count in the text, accept a
 * map that placement could not use (a node in two racks, an empty map), or
 * write an output on failure.
 */
#include "cks_md.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CL_MAX_TOKENS 8 /* a valid line has at most 5 */
#define CL_MSG_LEN    512

/* A loaded map. Never written after cl_build() returns. */
struct cks_cluster {
    uint64_t epoch;
    size_t nservers, nnodes, nracks;
    cks_cluster_server_t *servers; /* sorted by id: index = position */
};

/* One server line while parsing. */
typedef struct {
    cks_cluster_server_t s;
    unsigned line;
} cl_entry_t;

typedef struct {
    const char *src; /* file name, or NULL for text from memory */
    char *err;
    size_t err_len;
} cl_ctx_t;

/* ---- messages ------------------------------------------------------------ */

static void cl_report(const cl_ctx_t *ctx, const char *msg)
{
    cks_error("%s", msg);
    if ((ctx->err != NULL) && (ctx->err_len > 0)) {
        snprintf(ctx->err, ctx->err_len, "%s", msg);
    }
}

/* Report a problem at `line` (0: the map as a whole); returns
 * CKS_ERR_INVALID_PARAM so that callers can `return cl_fail(...)`. */
static cks_status_t cl_fail(const cl_ctx_t *ctx, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static cks_status_t cl_fail(const cl_ctx_t *ctx, unsigned line, const char *fmt, ...)
{
    char what[CL_MSG_LEN];
    char msg[CL_MSG_LEN + 64 + 4096];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);

    if (line > 0) {
        snprintf(msg, sizeof(msg), "cluster map%s%s, line %u: %s",
                 (ctx->src != NULL) ? " " : "", (ctx->src != NULL) ? ctx->src : "", line,
                 what);
    } else {
        snprintf(msg, sizeof(msg), "cluster map%s%s: %s", (ctx->src != NULL) ? " " : "",
                 (ctx->src != NULL) ? ctx->src : "", what);
    }
    cl_report(ctx, msg);
    return CKS_ERR_INVALID_PARAM;
}

/* A token quoted in a message: at most 40 bytes, non-printable bytes as '?'. */
static const char *cl_quote(const char *tok, char *buf, size_t len)
{
    size_t i;

    for (i = 0; (tok[i] != '\0') && (i + 1 < len); i++) {
        unsigned char c = (unsigned char)tok[i];
        buf[i] = ((c >= 0x20) && (c < 0x7f)) ? (char)c : '?';
    }
    if ((tok[i] != '\0') && (i >= 3)) {
        memcpy(&buf[i - 3], "...", 3);
    }
    buf[i] = '\0';
    return buf;
}

#define Q(tok) cl_quote((tok), (char[44]){0}, 44)

/* ---- token checks -------------------------------------------------------- */

/* Decimal digits only (no sign, no blanks), value <= max. */
static int cl_parse_uint(const char *tok, uint64_t max, uint64_t *v_p)
{
    uint64_t v = 0;

    if (*tok == '\0') {
        return -1;
    }
    for (; *tok != '\0'; tok++) {
        unsigned d;
        if ((*tok < '0') || (*tok > '9')) {
            return -1;
        }
        d = (unsigned)(*tok - '0');
        if (v > (max - d) / 10) {
            return -1;
        }
        v = v * 10 + d;
    }
    *v_p = v;
    return 0;
}

static int cl_label_ok(const char *s)
{
    size_t n = strlen(s);

    if ((n == 0) || (n > CKS_CLUSTER_LABEL_MAX)) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!(((c >= 'a') && (c <= 'z')) || ((c >= 'A') && (c <= 'Z')) ||
              ((c >= '0') && (c <= '9')) || (c == '.') || (c == '_') || (c == '-'))) {
            return 0;
        }
    }
    return 1;
}

/* "a.b.c.d:port" into e->s.ipv4, addr, port. */
static cks_status_t cl_parse_endpoint(const cl_ctx_t *ctx, unsigned line, const char *tok,
                                      cl_entry_t *e)
{
    const char *colon = strrchr(tok, ':');
    char addr[CKS_CLUSTER_ADDR_LEN];
    struct in_addr in;
    size_t alen;
    uint64_t port;

    if (colon == NULL) {
        return cl_fail(ctx, line, "expected <ipv4>:<port>, got '%s'", Q(tok));
    }
    alen = (size_t)(colon - tok);
    if ((alen == 0) || (alen >= sizeof(addr))) {
        return cl_fail(ctx, line,
                       "bad IPv4 address in '%s' (want a dotted quad such "
                       "as 10.0.0.1)",
                       Q(tok));
    }
    memcpy(addr, tok, alen);
    addr[alen] = '\0';
    if (inet_pton(AF_INET, addr, &in) != 1) {
        return cl_fail(ctx, line,
                       "bad IPv4 address '%s' (want a dotted quad such as "
                       "10.0.0.1)",
                       Q(addr));
    }
    if (in.s_addr == htonl(INADDR_ANY)) {
        return cl_fail(ctx, line, "bad address '%s': 0.0.0.0 is not a server address",
                       Q(addr));
    }
    if ((cl_parse_uint(colon + 1, 65535, &port) != 0) || (port == 0)) {
        return cl_fail(ctx, line, "bad port '%s' (want 1..65535)", Q(colon + 1));
    }
    e->s.ipv4 = ntohl(in.s_addr);
    e->s.port = (uint16_t)port;
    /* canonical text: inet_pton accepts only plain dotted quads, but format
     * it again so that the stored form never depends on the input */
    if (inet_ntop(AF_INET, &in, e->s.addr, sizeof(e->s.addr)) == NULL) {
        return cl_fail(ctx, line, "bad IPv4 address '%s'", Q(addr));
    }
    return CKS_OK;
}

/* ---- parse --------------------------------------------------------------- */

typedef struct {
    cl_entry_t *ents;
    size_t n, cap;
    uint64_t epoch;
    unsigned epoch_line; /* 0 until seen */
    cks_hmap_t *ids;     /* be16(id) -> entry index + 1 */
    cks_hmap_t *eps;     /* be32(ipv4) be16(port) -> entry index + 1 */
    cks_hmap_t *nodes;   /* node label -> entry index + 1 (first server on it) */
} cl_parse_t;

#define CL_IDX(v) ((size_t)(uintptr_t)(v)-1)
#define CL_VAL(i) ((void *)(uintptr_t)((i) + 1))

static cks_status_t cl_parse_server(const cl_ctx_t *ctx, cl_parse_t *p, unsigned line,
                                    char **tok, size_t ntok)
{
    static const char usage[] = "expected 'server <id> <ipv4>:<port> node=<label> "
                                "rack=<label>'";
    const char *node = NULL, *rack = NULL;
    uint8_t idkey[2], epkey[6];
    cl_entry_t e;
    uint64_t id;
    cks_status_t status;
    void *v;

    memset(&e, 0, sizeof(e));
    e.line = line;
    if (ntok < 3) {
        return cl_fail(ctx, line, "%s", usage);
    }
    if (cl_parse_uint(tok[1], 65535, &id) != 0) {
        return cl_fail(ctx, line, "bad server id '%s' (want 0..65535)", Q(tok[1]));
    }
    e.s.id = (uint16_t)id;
    status = cl_parse_endpoint(ctx, line, tok[2], &e);
    if (status != CKS_OK) {
        return status;
    }
    for (size_t i = 3; i < ntok; i++) {
        if (strncmp(tok[i], "node=", 5) == 0) {
            if (node != NULL) {
                return cl_fail(ctx, line, "node= given twice");
            }
            node = tok[i] + 5;
        } else if (strncmp(tok[i], "rack=", 5) == 0) {
            if (rack != NULL) {
                return cl_fail(ctx, line, "rack= given twice");
            }
            rack = tok[i] + 5;
        } else {
            return cl_fail(ctx, line,
                           "unknown attribute '%s' (want node=<label> and "
                           "rack=<label>)",
                           Q(tok[i]));
        }
    }
    if (node == NULL) {
        return cl_fail(ctx, line, "missing node=<label>; %s", usage);
    }
    if (rack == NULL) {
        return cl_fail(ctx, line, "missing rack=<label>; %s", usage);
    }
    if (!cl_label_ok(node)) {
        return cl_fail(ctx, line,
                       "bad node label '%s' (want 1..%u characters of "
                       "A-Z a-z 0-9 . _ -)",
                       Q(node), CKS_CLUSTER_LABEL_MAX);
    }
    if (!cl_label_ok(rack)) {
        return cl_fail(ctx, line,
                       "bad rack label '%s' (want 1..%u characters of "
                       "A-Z a-z 0-9 . _ -)",
                       Q(rack), CKS_CLUSTER_LABEL_MAX);
    }
    strcpy(e.s.node_label, node); /* lengths checked by cl_label_ok() */
    strcpy(e.s.rack_label, rack);

    if (p->n == CKS_CLUSTER_MAX_SERVERS) {
        return cl_fail(ctx, line, "more than %u servers", CKS_CLUSTER_MAX_SERVERS);
    }
    idkey[0] = (uint8_t)(e.s.id >> 8);
    idkey[1] = (uint8_t)e.s.id;
    v = cks_hmap_get(p->ids, idkey, sizeof(idkey));
    if (v != NULL) {
        return cl_fail(ctx, line, "duplicate server id %u (first on line %u)",
                       (unsigned)e.s.id, p->ents[CL_IDX(v)].line);
    }
    for (int i = 0; i < 4; i++) {
        epkey[i] = (uint8_t)(e.s.ipv4 >> (24 - 8 * i));
    }
    epkey[4] = (uint8_t)(e.s.port >> 8);
    epkey[5] = (uint8_t)e.s.port;
    v = cks_hmap_get(p->eps, epkey, sizeof(epkey));
    if (v != NULL) {
        const cl_entry_t *f = &p->ents[CL_IDX(v)];
        return cl_fail(ctx, line, "duplicate address %s:%u (server %u, line %u)",
                       e.s.addr, (unsigned)e.s.port, (unsigned)f->s.id, f->line);
    }
    v = cks_hmap_get(p->nodes, node, strlen(node));
    if (v != NULL) {
        const cl_entry_t *f = &p->ents[CL_IDX(v)];
        if (strcmp(f->s.rack_label, rack) != 0) {
            return cl_fail(ctx, line,
                           "node %s is in rack %s on line %u but in rack %s "
                           "here; a node lies in one rack",
                           node, f->s.rack_label, f->line, rack);
        }
    }

    if (p->n == p->cap) {
        size_t cap = (p->cap == 0) ? 16 : 2 * p->cap;
        cl_entry_t *ents = realloc(p->ents, cap * sizeof(*ents));
        if (ents == NULL) {
            return CKS_ERR_NO_MEMORY;
        }
        p->ents = ents;
        p->cap = cap;
    }
    if ((cks_hmap_put(p->ids, idkey, sizeof(idkey), CL_VAL(p->n)) != CKS_OK) ||
        (cks_hmap_put(p->eps, epkey, sizeof(epkey), CL_VAL(p->n)) != CKS_OK) ||
        ((v == NULL) &&
         (cks_hmap_put(p->nodes, node, strlen(node), CL_VAL(p->n)) != CKS_OK))) {
        return CKS_ERR_NO_MEMORY;
    }
    p->ents[p->n++] = e;
    return CKS_OK;
}

static cks_status_t cl_parse_line(const cl_ctx_t *ctx, cl_parse_t *p, unsigned line,
                                  char *buf)
{
    char *tok[CL_MAX_TOKENS];
    size_t ntok = 0;
    char *s = buf;
    char *hash = strchr(buf, '#');

    if (hash != NULL) {
        *hash = '\0';
    }
    for (;;) {
        s += strspn(s, " \t\r\v\f");
        if (*s == '\0') {
            break;
        }
        if (ntok == CL_MAX_TOKENS) {
            return cl_fail(ctx, line, "too many fields");
        }
        tok[ntok++] = s;
        s += strcspn(s, " \t\r\v\f");
        if (*s != '\0') {
            *s++ = '\0';
        }
    }
    if (ntok == 0) {
        return CKS_OK;
    }

    if (strcmp(tok[0], "server") == 0) {
        return cl_parse_server(ctx, p, line, tok, ntok);
    }
    if (strcmp(tok[0], "epoch") == 0) {
        if (p->epoch_line != 0) {
            return cl_fail(ctx, line, "second 'epoch' line (first on line %u)",
                           p->epoch_line);
        }
        if (ntok != 2) {
            return cl_fail(ctx, line, "expected 'epoch <number>'");
        }
        if (cl_parse_uint(tok[1], UINT64_MAX, &p->epoch) != 0) {
            return cl_fail(ctx, line,
                           "bad epoch '%s' (want a decimal number "
                           "0..18446744073709551615)",
                           Q(tok[1]));
        }
        p->epoch_line = line;
        return CKS_OK;
    }
    return cl_fail(ctx, line, "unknown keyword '%s' (want 'epoch' or 'server')",
                   Q(tok[0]));
}

static int cl_entry_cmp(const void *a, const void *b)
{
    const cl_entry_t *x = a, *y = b;

    return (x->s.id > y->s.id) - (x->s.id < y->s.id);
}

/* Dense index of `label` in `labels` (label -> index + 1), adding it if new. */
static cks_status_t cl_index(cks_hmap_t *labels, const char *label, uint16_t *idx_p)
{
    size_t len = strlen(label);
    void *v = cks_hmap_get(labels, label, len);
    size_t idx;

    if (v != NULL) {
        *idx_p = (uint16_t)CL_IDX(v);
        return CKS_OK;
    }
    idx = cks_hmap_count(labels);
    if (cks_hmap_put(labels, label, len, CL_VAL(idx)) != CKS_OK) {
        return CKS_ERR_NO_MEMORY;
    }
    *idx_p = (uint16_t)idx;
    return CKS_OK;
}

/* The canonical map from parsed entries (sorted here). */
static cks_status_t cl_build(cl_parse_t *p, cks_cluster_h *map_p)
{
    cks_hmap_t *nodes = NULL, *racks = NULL;
    struct cks_cluster *map;
    cks_status_t status;

    qsort(p->ents, p->n, sizeof(*p->ents), cl_entry_cmp);

    map = calloc(1, sizeof(*map));
    if (map == NULL) {
        status = CKS_ERR_NO_MEMORY;
        goto err;
    }
    map->epoch = p->epoch;
    map->nservers = p->n;
    map->servers = calloc(p->n, sizeof(*map->servers));
    if (map->servers == NULL) {
        status = CKS_ERR_NO_MEMORY;
        goto err_free_map;
    }
    status = cks_hmap_create(&nodes);
    if (status != CKS_OK) {
        goto err_free_map;
    }
    status = cks_hmap_create(&racks);
    if (status != CKS_OK) {
        goto err_destroy_nodes;
    }
    for (size_t i = 0; i < p->n; i++) {
        cks_cluster_server_t *s = &map->servers[i];

        *s = p->ents[i].s;
        status = cl_index(racks, s->rack_label, &s->rack);
        if (status != CKS_OK) {
            goto err_destroy_racks;
        }
        status = cl_index(nodes, s->node_label, &s->node);
        if (status != CKS_OK) {
            goto err_destroy_racks;
        }
    }
    map->nnodes = cks_hmap_count(nodes);
    map->nracks = cks_hmap_count(racks);
    cks_hmap_destroy(racks);
    cks_hmap_destroy(nodes);
    *map_p = map;
    return CKS_OK;

err_destroy_racks:
    cks_hmap_destroy(racks);
err_destroy_nodes:
    cks_hmap_destroy(nodes);
err_free_map:
    cks_cluster_free(map);
err:
    return status;
}

static cks_status_t cl_parse(const cl_ctx_t *ctx, const char *text, size_t len,
                             cks_cluster_h *map_p)
{
    char buf[CKS_CLUSTER_LINE_MAX + 1];
    cl_parse_t p;
    cks_status_t status;
    size_t pos = 0;
    unsigned line = 0;

    if ((text == NULL) && (len > 0)) {
        return cl_fail(ctx, 0, "no text");
    }
    if (len > CKS_CLUSTER_TEXT_MAX) {
        return cl_fail(ctx, 0, "%zu bytes, more than the %u a map may have", len,
                       CKS_CLUSTER_TEXT_MAX);
    }
    memset(&p, 0, sizeof(p));
    if ((cks_hmap_create(&p.ids) != CKS_OK) || (cks_hmap_create(&p.eps) != CKS_OK) ||
        (cks_hmap_create(&p.nodes) != CKS_OK)) {
        status = CKS_ERR_NO_MEMORY;
        goto out;
    }

    while (pos < len) {
        const char *start = text + pos;
        const char *nl = memchr(start, '\n', len - pos);
        size_t llen = (nl != NULL) ? (size_t)(nl - start) : len - pos;

        line++;
        pos += llen + ((nl != NULL) ? 1 : 0);
        if (llen > CKS_CLUSTER_LINE_MAX) {
            status = cl_fail(ctx, line, "longer than %u bytes", CKS_CLUSTER_LINE_MAX);
            goto out;
        }
        if (memchr(start, '\0', llen) != NULL) {
            status = cl_fail(ctx, line, "NUL byte in the text");
            goto out;
        }
        memcpy(buf, start, llen);
        buf[llen] = '\0';
        status = cl_parse_line(ctx, &p, line, buf);
        if (status != CKS_OK) {
            goto out;
        }
    }
    if (p.epoch_line == 0) {
        status = cl_fail(ctx, 0, "no 'epoch <number>' line");
        goto out;
    }
    if (p.n == 0) {
        status = cl_fail(ctx, 0, "no 'server' lines");
        goto out;
    }
    status = cl_build(&p, map_p);

out:
    if (status == CKS_ERR_NO_MEMORY) {
        cl_report(ctx, "cluster map: out of memory");
    }
    cks_hmap_destroy(p.nodes);
    cks_hmap_destroy(p.eps);
    cks_hmap_destroy(p.ids);
    free(p.ents);
    return status;
}

/* ---- public calls -------------------------------------------------------- */

cks_status_t cks_cluster_parse(const char *text, size_t len, cks_cluster_h *map_p,
                               char *err, size_t err_len)
{
    cl_ctx_t ctx = {.src = NULL, .err = err, .err_len = err_len};

    if (map_p == NULL) {
        cl_report(&ctx, "cluster map: no output handle");
        return CKS_ERR_INVALID_PARAM;
    }
    return cl_parse(&ctx, text, len, map_p);
}

cks_status_t cks_cluster_load(const char *path, cks_cluster_h *map_p, char *err,
                              size_t err_len)
{
    cl_ctx_t ctx = {.src = path, .err = err, .err_len = err_len};
    char msg[CL_MSG_LEN + 4096];
    cks_status_t status;
    char *text;
    size_t len;
    FILE *f;

    if ((path == NULL) || (map_p == NULL)) {
        cl_report(&ctx, "cluster map: no path or no output handle");
        return CKS_ERR_INVALID_PARAM;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(msg, sizeof(msg), "cluster map %s: cannot open: %s", path,
                 strerror(errno));
        cl_report(&ctx, msg);
        return CKS_ERR_IO;
    }
    /* one byte more than allowed, to tell "too large" from "exactly full" */
    text = malloc((size_t)CKS_CLUSTER_TEXT_MAX + 1);
    if (text == NULL) {
        cl_report(&ctx, "cluster map: out of memory");
        status = CKS_ERR_NO_MEMORY;
        goto out_close;
    }
    len = fread(text, 1, (size_t)CKS_CLUSTER_TEXT_MAX + 1, f);
    if (ferror(f)) {
        snprintf(msg, sizeof(msg), "cluster map %s: cannot read: %s", path,
                 strerror(errno));
        cl_report(&ctx, msg);
        status = CKS_ERR_IO;
        goto out_free;
    }
    status = cl_parse(&ctx, text, len, map_p);

out_free:
    free(text);
out_close:
    fclose(f);
    return status;
}

cks_status_t cks_cluster_serialize(cks_cluster_h map, char **text_p, size_t *len_p)
{
    static const char head[] = "# ckstore cluster map (format: docs/CLUSTER_MAP.md)\n";
    /* "server 65535 255.255.255.255:65535 node=<63> rack=<63>\n" */
    const size_t line_max = 40 + 2 * (5 + CKS_CLUSTER_LABEL_MAX);
    size_t cap, len;
    char *text;
    int n;

    if ((map == NULL) || (text_p == NULL) || (len_p == NULL)) {
        return CKS_ERR_INVALID_PARAM;
    }
    cap = sizeof(head) + 32 + map->nservers * line_max;
    text = malloc(cap);
    if (text == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    n = snprintf(text, cap, "%sepoch %llu\n", head, (unsigned long long)map->epoch);
    len = (size_t)n;
    for (size_t i = 0; i < map->nservers; i++) {
        const cks_cluster_server_t *s = &map->servers[i];
        n = snprintf(text + len, cap - len, "server %u %s:%u node=%s rack=%s\n",
                     (unsigned)s->id, s->addr, (unsigned)s->port, s->node_label,
                     s->rack_label);
        if ((n < 0) || ((size_t)n >= cap - len)) { /* cannot happen: bounded above */
            free(text);
            return CKS_ERR_INTERNAL;
        }
        len += (size_t)n;
    }
    *text_p = text;
    *len_p = len;
    return CKS_OK;
}

void cks_cluster_free(cks_cluster_h map)
{
    if (map == NULL) {
        return;
    }
    free(map->servers);
    free(map);
}

cks_status_t cks_cluster_check(cks_cluster_h map, unsigned k, unsigned m, char *err,
                               size_t err_len)
{
    cl_ctx_t ctx = {.src = NULL, .err = err, .err_len = err_len};
    char msg[CL_MSG_LEN];

    if (map == NULL) {
        cl_report(&ctx, "cluster map: no map");
        return CKS_ERR_INVALID_PARAM;
    }
    if ((k < 1) || (k > CKS_PLACE_K_MAX)) {
        snprintf(msg, sizeof(msg),
                 "cluster map (epoch %llu): k = %u is out of range "
                 "(1..%u data chunks)",
                 (unsigned long long)map->epoch, k, CKS_PLACE_K_MAX);
    } else if ((m < 1) || (m > CKS_PLACE_M_MAX)) {
        snprintf(msg, sizeof(msg),
                 "cluster map (epoch %llu): m = %u is out of range "
                 "(1..%u parity chunks)",
                 (unsigned long long)map->epoch, m, CKS_PLACE_M_MAX);
    } else if (k + m > map->nnodes) {
        snprintf(msg, sizeof(msg),
                 "cluster map (epoch %llu): k + m = %u + %u = %u "
                 "chunks per stripe need %u distinct nodes, but the map has only %zu "
                 "node%s (%zu server%s)",
                 (unsigned long long)map->epoch, k, m, k + m, k + m, map->nnodes,
                 (map->nnodes == 1) ? "" : "s", map->nservers,
                 (map->nservers == 1) ? "" : "s");
    } else {
        return CKS_OK;
    }
    cl_report(&ctx, msg);
    return CKS_ERR_INVALID_PARAM;
}

uint64_t cks_cluster_epoch(cks_cluster_h map)
{
    return map->epoch;
}

size_t cks_cluster_nservers(cks_cluster_h map)
{
    return map->nservers;
}

size_t cks_cluster_nnodes(cks_cluster_h map)
{
    return map->nnodes;
}

size_t cks_cluster_nracks(cks_cluster_h map)
{
    return map->nracks;
}

const cks_cluster_server_t *cks_cluster_server(cks_cluster_h map, size_t pos)
{
    return (pos < map->nservers) ? &map->servers[pos] : NULL;
}

cks_status_t cks_cluster_find(cks_cluster_h map, uint16_t id, size_t *pos_p)
{
    size_t lo = 0, hi = map->nservers;

    while (lo < hi) { /* servers are sorted by id */
        size_t mid = lo + (hi - lo) / 2;
        if (map->servers[mid].id < id) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if ((lo == map->nservers) || (map->servers[lo].id != id)) {
        return CKS_ERR_INVALID_PARAM;
    }
    *pos_p = lo;
    return CKS_OK;
}
