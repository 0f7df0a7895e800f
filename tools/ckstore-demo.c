/*
 * DESIGN: ckstore-demo, a synthetic trainer rank. `write` snapshots a
 * synthetic MoE checkpoint (dense shards, expert shards, optimizer state, RNG
 * state) from deterministic data; `verify` restores it into fresh buffers and
 * compares every byte with the data regenerated from the same seed. Both
 * print their bandwidth. Used by scripts/demo; uses only the public API.
 */
#include "ckstore.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef struct {
    char key[96];
    cks_tags_t tags;
    uint64_t size;
} demo_obj_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill(uint8_t *p, uint64_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < len; i++) {
        p[i] = (uint8_t)(x >> (8 * (i & 7)));
    }
}

static void *alloc_buf(uint64_t len)
{
    void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    madvise(p, len, MADV_HUGEPAGE);
    return p;
}

/* The synthetic layout: per layer a dense shard and `experts` expert shards
 * with their optimizer state (2x), plus one RNG state object. */
static size_t layout(demo_obj_t *objs, size_t max, int layers, int experts, uint64_t size,
                     int rank)
{
    size_t n = 0;
    for (int l = 0; l < layers; l++) {
        if (n < max) {
            snprintf(objs[n].key, sizeof(objs[n].key), "layer%02d/dense/rank%d", l, rank);
            objs[n].tags = (cks_tags_t){CKS_KIND_DENSE, l, CKS_TAG_NONE, rank};
            objs[n++].size = size;
        }
        for (int e = 0; e < experts; e++) {
            if (n < max) {
                snprintf(objs[n].key, sizeof(objs[n].key), "layer%02d/expert%03d/params", l,
                         e);
                objs[n].tags   = (cks_tags_t){CKS_KIND_EXPERT, l, e, rank};
                objs[n++].size = size / 2 + (uint64_t)e; /* odd sizes on purpose */
            }
            if (n < max) {
                snprintf(objs[n].key, sizeof(objs[n].key), "layer%02d/expert%03d/optim", l,
                         e);
                objs[n].tags   = (cks_tags_t){CKS_KIND_OPTIMIZER, l, e, rank};
                objs[n++].size = size + (uint64_t)e;
            }
        }
    }
    if (n < max) {
        snprintf(objs[n].key, sizeof(objs[n].key), "rng/rank%d", rank);
        objs[n].tags   = (cks_tags_t){CKS_KIND_RNG, CKS_TAG_NONE, CKS_TAG_NONE, rank};
        objs[n++].size = 4096 + 17;
    }
    return n;
}

static uint64_t parse_size(const char *t)
{
    char *end;
    uint64_t v = strtoull(t, &end, 10);
    switch (*end) {
        case 'K': case 'k': return v << 10;
        case 'M': case 'm': return v << 20;
        case 'G': case 'g': return v << 30;
        default: return v;
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ckstore-demo write|verify (--server IP:PORT | --cluster MAP) [options]\n"
               "  --cluster MAP     a cluster map: RS-coded cluster (see --k, --m, --chunk)\n"
               "  --k N, --m N      data and parity chunks per stripe (default 4, 2)\n"
               "  --chunk SIZE      chunk size (default 1M)\n"
               "  --secret FILE     the cluster secret the servers require\n"
               "  --job NAME        (default demo)\n"
               "  --version N       (default 1)\n"
               "  --layers N        (default 2)\n"
               "  --experts N       experts per layer (default 4)\n"
               "  --size SIZE       dense shard size, e.g. 64M (default 32M)\n"
               "  --seed N          data seed (default 1)\n"
               "  --rank N          rank tag (default 0)\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'}, {"job", required_argument, NULL, 'j'},
        {"version", required_argument, NULL, 'v'}, {"layers", required_argument, NULL, 'l'},
        {"experts", required_argument, NULL, 'e'}, {"size", required_argument, NULL, 'z'},
        {"seed", required_argument, NULL, 'r'},   {"rank", required_argument, NULL, 'k'},
        {"cluster", required_argument, NULL, 'c'}, {"k", required_argument, NULL, 'K'},
        {"m", required_argument, NULL, 'M'},       {"chunk", required_argument, NULL, 'C'},
        {"secret", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    const char *server = NULL, *cluster = NULL, *job = "demo", *secret = NULL;
    unsigned ec_k = 4, ec_m = 2;
    uint64_t chunk = 1u << 20;
    uint64_t version = 1, size = 32ull << 20, seed = 1;
    int layers = 2, experts = 4, rank = 0, c;
    demo_obj_t objs[1024];
    cks_status_t st;
    char err[512];

    if (argc < 2 || (strcmp(argv[1], "write") != 0 && strcmp(argv[1], "verify") != 0)) {
        usage(argc > 1 && strcmp(argv[1], "--help") == 0 ? stdout : stderr);
        return argc > 1 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    int writing = strcmp(argv[1], "write") == 0;
    optind      = 2;
    while ((c = getopt_long(argc, argv, "s:j:v:l:e:z:r:k:c:K:M:C:S:h", opts, NULL)) != -1) {
        switch (c) {
            case 's': server = optarg; break;
            case 'j': job = optarg; break;
            case 'v': version = strtoull(optarg, NULL, 10); break;
            case 'l': layers = atoi(optarg); break;
            case 'e': experts = atoi(optarg); break;
            case 'z': size = parse_size(optarg); break;
            case 'r': seed = strtoull(optarg, NULL, 10); break;
            case 'k': rank = atoi(optarg); break;
            case 'c': cluster = optarg; break;
            case 'K': ec_k = (unsigned)atoi(optarg); break;
            case 'M': ec_m = (unsigned)atoi(optarg); break;
            case 'C': chunk = parse_size(optarg); break;
            case 'S': secret = optarg; break;
            case 'h': usage(stdout); return 0;
            default: usage(stderr); return 2;
        }
    }
    if ((server == NULL) == (cluster == NULL) || layers < 1 || experts < 0 || size == 0) {
        usage(stderr);
        return 2;
    }
    size_t n = layout(objs, 1024, layers, experts, size, rank);
    uint64_t maxsz = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        maxsz = objs[i].size > maxsz ? objs[i].size : maxsz;
        total += objs[i].size;
    }

    cks_client_params_t cp = {0};
    cks_client_h cl;
    cp.field_mask = CKS_CLIENT_FIELD_NAME;
    cp.name       = "ckstore-demo";
    if (cluster != NULL) {
        cp.field_mask |= CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC;
        cp.cluster    = cluster;
        cp.ec_k       = ec_k;
        cp.ec_m       = ec_m;
        cp.chunk_size = chunk;
    } else {
        cp.field_mask |= CKS_CLIENT_FIELD_SERVER;
        cp.server = server;
    }
    if (secret != NULL) {
        cp.field_mask |= CKS_CLIENT_FIELD_SECRET;
        cp.secret = secret;
    }
    st            = cks_client_create(&cp, &cl);
    if (st != CKS_OK) {
        fprintf(stderr, "ckstore-demo: cannot connect to %s: %s\n",
                server ? server : cluster, cks_status_string(st));
        return 1;
    }
    /* one staging area from cks_mem_alloc(), a slice per object, as a trainer
     * copies its tensors into pinned host memory: servers on this host read
     * and write it directly (one copy); plain memory per object otherwise */
    uint8_t **bufs = calloc(n, sizeof(*bufs));
    uint8_t *check = writing ? NULL : alloc_buf(maxsz);
    uint64_t staged = 0;
    void *stage    = NULL;
    for (size_t i = 0; i < n; i++) {
        staged += (objs[i].size + 63) & ~(uint64_t)63;
    }
    if (cks_mem_alloc(cl, staged ? staged : 1, &stage) != CKS_OK) {
        fprintf(stderr, "ckstore-demo: no staging memory (cks_mem_alloc); using plain buffers\n");
        stage = NULL;
    }
    staged = 0;
    for (size_t i = 0; i < n; i++) {
        if (stage != NULL) {
            bufs[i] = (uint8_t *)stage + staged;
            staged += (objs[i].size + 63) & ~(uint64_t)63;
        } else {
            bufs[i] = alloc_buf(objs[i].size);
        }
        if (bufs[i] == NULL) {
            fprintf(stderr, "ckstore-demo: out of memory\n");
            return 1;
        }
        if (writing) {
            fill(bufs[i], objs[i].size, seed * 1000003u + i);
        } else {
            memset(bufs[i], 0, objs[i].size); /* pre-fault the destination */
        }
    }

    int rc = 0;
    double t0 = now_s(), t1;
    if (writing) {
        cks_version_params_t vp = {0};
        vp.job                  = job;
        vp.version              = version;
        st                      = cks_version_begin(cl, &vp);
        for (size_t i = 0; st == CKS_OK && i < n; i++) {
            cks_put_params_t p = {0};
            p.field_mask       = CKS_PUT_FIELD_TAGS;
            p.job              = job;
            p.version          = version;
            p.key              = objs[i].key;
            p.buffer           = bufs[i];
            p.size             = objs[i].size;
            p.tags             = objs[i].tags;
            st                 = cks_put(cl, &p);
        }
        t1 = now_s();
        if (st == CKS_OK) {
            st = cks_version_seal(cl, job, version);
        }
        double t2 = now_s();
        if (st != CKS_OK) {
            cks_client_last_error(cl, err, sizeof(err));
            fprintf(stderr, "ckstore-demo: write failed: %s (%s)\n", cks_status_string(st),
                    err);
            rc = 1;
        } else {
            printf("wrote %s version %llu: %zu objects, %.1f MiB; stored at %.2f GB/s "
                   "(%.3f s), %s at %.2f GB/s (seal after %.3f s)\n",
                   job, (unsigned long long)version, n, (double)total / (1 << 20),
                   (double)total / (t1 - t0) / 1e9, t1 - t0,
                   cluster ? "protected" : "sealed", (double)total / (t2 - t0) / 1e9,
                   t2 - t0);
        }
    } else {
        cks_restore_h r = NULL;
        st              = cks_restore_open(cl, job, version, &r);
        for (size_t i = 0; st == CKS_OK && i < n; i++) {
            cks_get_params_t g = {0};
            uint64_t got       = 0;
            g.key              = objs[i].key;
            g.buffer           = bufs[i];
            g.buffer_size      = objs[i].size;
            st                 = cks_get(r, &g, &got);
            if (st == CKS_OK && got != objs[i].size) {
                st = CKS_ERR_DATA_LOST;
            }
        }
        t1 = now_s();
        for (size_t i = 0; st == CKS_OK && i < n; i++) {
            fill(check, objs[i].size, seed * 1000003u + i);
            if (memcmp(check, bufs[i], objs[i].size) != 0) {
                fprintf(stderr, "ckstore-demo: object %s differs from what was written\n",
                        objs[i].key);
                rc = 1;
            }
        }
        if (st != CKS_OK) {
            cks_client_last_error(cl, err, sizeof(err));
            fprintf(stderr, "ckstore-demo: restore failed: %s (%s)\n", cks_status_string(st),
                    err);
            rc = 1;
        } else if (rc == 0) {
            printf("restored %s version %llu: %zu objects, %.1f MiB, every byte verified; "
                   "get %.2f GB/s (%.3f s)\n",
                   job, (unsigned long long)version, n, (double)total / (1 << 20),
                   (double)total / (t1 - t0) / 1e9, t1 - t0);
        }
        cks_restore_close(r);
    }
    for (size_t i = 0; stage == NULL && i < n; i++) {
        munmap(bufs[i], objs[i].size ? objs[i].size : 1);
    }
    if (stage != NULL) {
        cks_mem_free(cl, stage);
    }
    if (check != NULL) {
        munmap(check, maxsz);
    }
    free(bufs);
    cks_client_destroy(cl);
    return rc;
}
