/*
 * DESIGN: the command line of `ckstore-bench cluster` and the context it starts:
 * defaults, parsing and checks of every option (the usage text is the list),
 * the context's allocation, and cl_say(), the printed lines of a run.
 */
#include "cluster_int.h"
#include "cks_coding.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

cl_ctx_t *cl_ctx_new(void)
{
    cl_ctx_t *x = calloc(1, sizeof(*x));
    if (x != NULL) {
        x->cpu_go = -1;
    }
    return x;
}

void cl_ctx_free(cl_ctx_t *x)
{
    free(x);
}

void cl_say(const cl_ctx_t *x, const char *fmt, ...)
{
    va_list ap;
    if (x->o.quiet) {
        return;
    }
    bench_progress_clear();
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

void cl_client_params(const cl_ctx_t *x, cks_client_params_t *cp, const char *name)
{
    memset(cp, 0, sizeof(*cp));
    cp->field_mask = CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC |
                     CKS_CLIENT_FIELD_TIMEOUT_MS | CKS_CLIENT_FIELD_NAME;
    cp->cluster = x->map;
    cp->ec_k = x->o.k;
    cp->ec_m = x->o.m;
    cp->chunk_size = x->o.chunk;
    cp->timeout_ms = (int)(x->o.timeout_s * 1000);
    cp->name = name;
}

static void cl_usage(FILE *f)
{
    fprintf(
        f,
        "Usage: ckstore-bench cluster [OPTIONS]\n"
        "Measure an erasure-coded ckstore cluster on this machine: snapshot (STORED,\n"
        "PROTECTED), restore, degraded restore and snapshot (DEGRADED) with servers\n"
        "killed, and full versus\n"
        "partial-expert checkpoints, against raw ISA-L, memcpy and raw UCX measured in\n"
        "the same run (see docs/BENCHMARKS_CLUSTER.md).\n"
        "\n"
        "  -l, --local N          start N servers here (default 6; 3 racks)\n"
        "  -c, --cluster FILE     use the running cluster of this map instead (no\n"
        "                         degraded restores: its servers are not ours to kill)\n"
        "      --server-bin PATH  ckstore-server (default: next to this binary)\n"
        "  -k, --k N              data chunks per stripe (4)\n"
        "  -M, --m N              parity chunks per stripe (2)\n"
        "      --chunk SIZE       chunk size (1M)\n"
        "  -C, --clients N        client processes, each writing its own objects (1)\n"
        "  -s, --size SIZE        bytes per object (64M)\n"
        "  -o, --objects N        objects per client (8)\n"
        "  -r, --reps N           repetitions; median reported (3)\n"
        "  -W, --window N         puts / gets in flight per client (4)\n"
        "  -e, --encoders N       encoder threads per server (1)\n"
        "      --arena SIZE       arena per server (default: sized from the run)\n"
        "      --no-degraded      skip the degraded restores (and the repair after "
        "them)\n"
        "      --repair-rate SIZE the servers' repair pacing cap while clients move "
        "data,\n"
        "                         bytes/s (default: the server's); the figures name it\n"
        "      --copy-threads N   the servers' copy threads (ckstore-server\n"
        "                         --copy-threads; default: the server's)\n"
        "      --stage-host       writers stage their puts through a ring of host\n"
        "                         memory that holds a writer's snapshot\n"
        "                         (CKS_PUT_FIELD_STAGED), all of its puts at once: the\n"
        "                         stall ends at the last COPIED, STORED is timed as\n"
        "                         before\n"
        "      --pec              also full vs partial-expert checkpoints (8, 16 "
        "experts)\n"
        "      --pec-only         only those\n"
        "      --pec-k N          experts saved per layer (default E/4)\n"
        "      --pec-layers N     MoE layers (4)\n"
        "      --pec-unit SIZE    bf16 bytes of d^2 parameters (256K; see the docs)\n"
        "      --mix KIND         objects per client: uniform (--objects x --size) or\n"
        "                         moe (dense, optimizer, 63 MB and 112 MB expert "
        "states,\n"
        "                         RNG: 462 MiB)\n"
        "      --readers N        client processes that restore (default: --clients);\n"
        "                         each reads a contiguous share of all objects\n"
        "      --versions N       snapshots written and kept per repetition (1; at most "
        "10)\n"
        "      --pec-fraction F   experts saved per layer, as a share of E (instead of\n"
        "                         --pec-k)\n"
        "      --peers LIST       peers on the same objects (memcached,redis,shm: all)\n"
        "      --no-peers, --no-memcached, --no-redis, --no-shm\n"
        "                         skip them (or one)\n"
        "      --sweep-clients LIST, --sweep-servers LIST, --sweep-sizes LIST\n"
        "                         only sweeps: a fresh local cluster per point, "
        "snapshots\n"
        "                         and healthy restores, aggregate GB/s per point\n"
        "      --hosts            each server, the clients and the raw UCX sink in "
        "network\n"
        "                         namespaces of their own, joined by veth pairs and a\n"
        "                         bridge: every byte over UCX's TCP transport (needs\n"
        "                         root and iproute2; no peers)\n"
        "      --plot DIR         PNG charts with gnuplot (.dat and .gp files next to "
        "them)\n"
        "      --raw-setups LIST  raw UCX buffer setups (thp,shm-thp,ucx)\n"
        "      --client-mem KIND  the clients' main buffers: ckstore (cks_mem_alloc(),\n"
        "                         the default) or thp\n"
        "      --no-raw           skip the raw UCX reference\n"
        "  -j, --json FILE        write the results as JSON\n"
        "  -t, --timeout SEC      bound on each wait (30)\n"
        "  -v, --verbose          servers log to stderr (info)\n"
        "  -q, --quiet            print nothing but errors\n"
        "  -h, --help             this text\n");
}

static int cl_parse_uint(const char *text, unsigned lo, unsigned hi, unsigned *v_p)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "ckstore-bench: bad number '%s' (%u .. %u)\n", text, lo, hi);
        return -1;
    }
    *v_p = (unsigned)v;
    return 0;
}

/* A comma-separated list of at most CL_MAX_SWEEP items, each parsed by
 * one(item, i, ctx) (which says what is wrong with it); *n_p gets the count. */
static int cl_parse_items(const char *text,
                          int (*one)(const char *item, unsigned i, void *ctx), void *ctx,
                          unsigned *n_p)
{
    char item[32];
    unsigned n = 0;
    const char *p = text;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof(item) || n == CL_MAX_SWEEP) {
            fprintf(stderr, "ckstore-bench: bad list '%s' (at most %u items)\n", text,
                    CL_MAX_SWEEP);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (one(item, n, ctx) != 0) {
            return -1;
        }
        n++;
        p += len + (p[len] == ',');
    }
    if (n == 0) {
        fprintf(stderr, "ckstore-bench: empty list\n");
        return -1;
    }
    *n_p = n;
    return 0;
}

typedef struct {
    unsigned lo, hi, *v;
} cl_uint_items_t;

static int cl_uint_item(const char *item, unsigned i, void *ctx)
{
    cl_uint_items_t *u = ctx;
    return cl_parse_uint(item, u->lo, u->hi, &u->v[i]);
}

/* "1,2,4,8" within [lo, hi]. */
static int cl_parse_list(const char *text, unsigned lo, unsigned hi, unsigned *v,
                         unsigned *n_p)
{
    cl_uint_items_t u = {lo, hi, v};
    return cl_parse_items(text, cl_uint_item, &u, n_p);
}

static int cl_size_item(const char *item, unsigned i, void *ctx)
{
    uint64_t *v = ctx;
    if (bench_size_parse(item, &v[i]) != 0 || v[i] == 0) {
        fprintf(stderr, "ckstore-bench: bad size '%s'\n", item);
        return -1;
    }
    return 0;
}

/* "64M,256M,1G": sizes above 0. */
static int cl_parse_size_list(const char *text, uint64_t *v, unsigned *n_p)
{
    return cl_parse_items(text, cl_size_item, v, n_p);
}

static int cl_parse_size(const char *text, uint64_t *v_p)
{
    if (bench_size_parse(text, v_p) != 0) {
        fprintf(stderr, "ckstore-bench: bad size '%s'\n", text);
        return -1;
    }
    return 0;
}

int cl_parse_opts(cl_ctx_t *x, int argc, char **argv)
{
    enum {
        O_SERVER_BIN = 256,
        O_CHUNK,
        O_ARENA,
        O_NO_DEGRADED,
        O_REPAIR_RATE,
        O_COPY_THREADS,
        O_PEC,
        O_PEC_ONLY,
        O_PEC_K,
        O_PEC_LAYERS,
        O_PEC_UNIT,
        O_RAW_SETUPS,
        O_CLIENT_MEM,
        O_NO_RAW,
        O_MIX,
        O_READERS,
        O_VERSIONS,
        O_PEC_FRACTION,
        O_PEERS,
        O_NO_PEERS,
        O_NO_MEMCACHED,
        O_NO_REDIS,
        O_NO_SHM,
        O_PLOT,
        O_SWEEP_CLIENTS,
        O_SWEEP_SERVERS,
        O_SWEEP_SIZES,
        O_HOSTS,
        O_STAGE_HOST
    };
    static const struct option longopts[] = {
        {"local", required_argument, NULL, 'l'},
        {"cluster", required_argument, NULL, 'c'},
        {"server-bin", required_argument, NULL, O_SERVER_BIN},
        {"k", required_argument, NULL, 'k'},
        {"m", required_argument, NULL, 'M'},
        {"chunk", required_argument, NULL, O_CHUNK},
        {"clients", required_argument, NULL, 'C'},
        {"size", required_argument, NULL, 's'},
        {"objects", required_argument, NULL, 'o'},
        {"reps", required_argument, NULL, 'r'},
        {"window", required_argument, NULL, 'W'},
        {"encoders", required_argument, NULL, 'e'},
        {"arena", required_argument, NULL, O_ARENA},
        {"no-degraded", no_argument, NULL, O_NO_DEGRADED},
        {"repair-rate", required_argument, NULL, O_REPAIR_RATE},
        {"copy-threads", required_argument, NULL, O_COPY_THREADS},
        {"pec", no_argument, NULL, O_PEC},
        {"pec-only", no_argument, NULL, O_PEC_ONLY},
        {"pec-k", required_argument, NULL, O_PEC_K},
        {"pec-layers", required_argument, NULL, O_PEC_LAYERS},
        {"pec-unit", required_argument, NULL, O_PEC_UNIT},
        {"raw-setups", required_argument, NULL, O_RAW_SETUPS},
        {"client-mem", required_argument, NULL, O_CLIENT_MEM},
        {"no-raw", no_argument, NULL, O_NO_RAW},
        {"mix", required_argument, NULL, O_MIX},
        {"readers", required_argument, NULL, O_READERS},
        {"versions", required_argument, NULL, O_VERSIONS},
        {"pec-fraction", required_argument, NULL, O_PEC_FRACTION},
        {"peers", required_argument, NULL, O_PEERS},
        {"no-peers", no_argument, NULL, O_NO_PEERS},
        {"no-memcached", no_argument, NULL, O_NO_MEMCACHED},
        {"no-redis", no_argument, NULL, O_NO_REDIS},
        {"no-shm", no_argument, NULL, O_NO_SHM},
        {"plot", required_argument, NULL, O_PLOT},
        {"sweep-clients", required_argument, NULL, O_SWEEP_CLIENTS},
        {"sweep-servers", required_argument, NULL, O_SWEEP_SERVERS},
        {"sweep-sizes", required_argument, NULL, O_SWEEP_SIZES},
        {"hosts", no_argument, NULL, O_HOSTS},
        {"stage-host", no_argument, NULL, O_STAGE_HOST},
        {"json", required_argument, NULL, 'j'},
        {"timeout", required_argument, NULL, 't'},
        {"verbose", no_argument, NULL, 'v'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char *end;
    int c;

    memset(&x->o, 0, sizeof(x->o));
    x->o.local = 6;
    x->o.k = 4;
    x->o.m = 2;
    x->o.chunk = 1ull << 20;
    x->o.clients = 1;
    x->o.size = 64ull << 20;
    x->o.objects = 8;
    x->o.reps = 3;
    x->o.window = 4;
    x->o.encoders = 1;
    x->o.pec_layers = 4;
    x->o.pec_unit = 256ull << 10;
    x->o.timeout_s = 30;
    x->o.client_mem = BENCH_MEM_CKS;
    x->o.raw_setups =
        (1u << BENCH_SETUP_THP) | (1u << BENCH_SETUP_SHM_THP) | (1u << BENCH_SETUP_UCX);
    x->o.mix = "uniform";
    x->o.versions = 1;
    x->o.peers = (1u << BENCH_NPEERS) - 1;
    snprintf(x->o.command, sizeof(x->o.command), "ckstore-bench");
    for (int i = 0, used = (int)strlen(x->o.command);
         i < argc && used < (int)sizeof(x->o.command) - 1; i++) {
        used += snprintf(x->o.command + used, sizeof(x->o.command) - (size_t)used, " %s",
                         argv[i]);
    }
    optind = 1;
    while ((c = getopt_long(argc, argv, "l:c:k:M:C:s:o:r:W:e:j:t:vqh", longopts, NULL)) !=
           -1) {
        switch (c) {
            case 'l':
                if (cl_parse_uint(optarg, 1, CL_MAX_SERVERS, &x->o.local) != 0) {
                    return -1;
                }
                break;
            case 'c':
                x->o.map = optarg;
                break;
            case O_SERVER_BIN:
                x->o.server_bin = optarg;
                break;
            case 'k':
                if (cl_parse_uint(optarg, 1, CKS_EC_MAX_K, &x->o.k) != 0) {
                    return -1;
                }
                break;
            case 'M':
                if (cl_parse_uint(optarg, 1, CKS_EC_MAX_M, &x->o.m) != 0) {
                    return -1;
                }
                break;
            case O_CHUNK:
                if (cl_parse_size(optarg, &x->o.chunk) != 0) {
                    return -1;
                }
                if (x->o.chunk % 4096 != 0) {
                    fprintf(stderr,
                            "ckstore-bench: the chunk size must be a multiple of 4096\n");
                    return -1;
                }
                break;
            case 'C':
                if (cl_parse_uint(optarg, 1, CL_MAX_CLIENTS, &x->o.clients) != 0) {
                    return -1;
                }
                break;
            case 's':
                if (cl_parse_size(optarg, &x->o.size) != 0) {
                    return -1;
                }
                break;
            case 'o':
                if (cl_parse_uint(optarg, 1, 1024, &x->o.objects) != 0) {
                    return -1;
                }
                break;
            case 'r':
                if (cl_parse_uint(optarg, 1, CL_MAX_REPS, &x->o.reps) != 0) {
                    return -1;
                }
                break;
            case 'W':
                if (cl_parse_uint(optarg, 1, 256, &x->o.window) != 0) {
                    return -1;
                }
                break;
            case 'e':
                if (cl_parse_uint(optarg, 1, 64, &x->o.encoders) != 0) {
                    return -1;
                }
                break;
            case O_ARENA:
                if (cl_parse_size(optarg, &x->o.arena) != 0) {
                    return -1;
                }
                x->o.arena_given = 1;
                break;
            case O_NO_DEGRADED:
                x->o.no_degraded = 1;
                break;
            case O_REPAIR_RATE:
                x->o.repair_rate = optarg; /* the server checks it */
                break;
            case O_COPY_THREADS:
                x->o.copy_threads = optarg; /* the server checks it */
                break;
            case O_PEC:
                x->o.pec = 1;
                break;
            case O_PEC_ONLY:
                x->o.pec = x->o.pec_only = 1;
                break;
            case O_PEC_K:
                if (cl_parse_uint(optarg, 1, 16, &x->o.pec_k) != 0) {
                    return -1;
                }
                break;
            case O_PEC_LAYERS:
                if (cl_parse_uint(optarg, 1, 64, &x->o.pec_layers) != 0) {
                    return -1;
                }
                break;
            case O_PEC_UNIT:
                if (cl_parse_size(optarg, &x->o.pec_unit) != 0) {
                    return -1;
                }
                break;
            case O_RAW_SETUPS:
                if (bench_setup_mask(optarg, &x->o.raw_setups) != 0) {
                    fprintf(stderr, "ckstore-bench: bad setup list '%s'\n", optarg);
                    return -1;
                }
                break;
            case O_NO_RAW:
                x->o.no_raw = 1;
                break;
            case O_CLIENT_MEM:
                if (strcmp(optarg, "ckstore") == 0) {
                    x->o.client_mem = BENCH_MEM_CKS;
                } else if (strcmp(optarg, "thp") == 0) {
                    x->o.client_mem = BENCH_MEM_THP;
                } else {
                    fprintf(stderr,
                            "ckstore-bench: bad --client-mem '%s' (ckstore or thp)\n",
                            optarg);
                    return -1;
                }
                break;
            case O_MIX:
                if (strcmp(optarg, "uniform") != 0 && strcmp(optarg, "moe") != 0) {
                    fprintf(stderr, "ckstore-bench: bad --mix '%s' (uniform or moe)\n",
                            optarg);
                    return -1;
                }
                x->o.mix = optarg;
                break;
            case O_READERS:
                if (cl_parse_uint(optarg, 1, CL_MAX_CLIENTS, &x->o.readers) != 0) {
                    return -1;
                }
                break;
            case O_VERSIONS:
                if (cl_parse_uint(optarg, 1, CL_MAX_VERSIONS, &x->o.versions) != 0) {
                    return -1;
                }
                break;
            case O_PEC_FRACTION:
                x->o.pec_fraction = strtod(optarg, &end);
                if (*end != '\0' || !(x->o.pec_fraction > 0 && x->o.pec_fraction <= 1)) {
                    fprintf(stderr,
                            "ckstore-bench: bad --pec-fraction '%s' (0 < F <= 1)\n",
                            optarg);
                    return -1;
                }
                break;
            case O_PEERS:
                if (bench_peer_mask(optarg, &x->o.peers) != 0) {
                    fprintf(stderr,
                            "ckstore-bench: bad peer list '%s' (memcached,redis,shm)\n",
                            optarg);
                    return -1;
                }
                break;
            case O_NO_PEERS:
                x->o.peers = 0;
                break;
            case O_NO_MEMCACHED:
                x->o.peers &= ~(1u << BENCH_PEER_MEMCACHED);
                break;
            case O_NO_REDIS:
                x->o.peers &= ~(1u << BENCH_PEER_REDIS);
                break;
            case O_NO_SHM:
                x->o.peers &= ~(1u << BENCH_PEER_SHM);
                break;
            case O_PLOT:
                x->o.plot = optarg;
                break;
            case O_SWEEP_CLIENTS:
                if (cl_parse_list(optarg, 1, CL_MAX_CLIENTS, x->o.sweep_clients,
                                  &x->o.nsweep_clients) != 0) {
                    return -1;
                }
                break;
            case O_SWEEP_SERVERS:
                if (cl_parse_list(optarg, 1, CL_MAX_SERVERS, x->o.sweep_servers,
                                  &x->o.nsweep_servers) != 0) {
                    return -1;
                }
                break;
            case O_SWEEP_SIZES:
                if (cl_parse_size_list(optarg, x->o.sweep_sizes, &x->o.nsweep_sizes) !=
                    0) {
                    return -1;
                }
                break;
            case O_HOSTS:
                x->o.hosts = 1;
                break;
            case O_STAGE_HOST:
                x->o.stage_host = 1;
                break;
            case 'j':
                x->o.json = optarg;
                break;
            case 't':
                x->o.timeout_s = strtod(optarg, &end);
                if (*end != '\0' || !(x->o.timeout_s > 0)) {
                    fprintf(stderr, "ckstore-bench: bad timeout '%s'\n", optarg);
                    return -1;
                }
                break;
            case 'v':
                x->o.verbose = 1;
                break;
            case 'q':
                x->o.quiet = 1;
                break;
            case 'h':
                cl_usage(stdout);
                exit(0);
            default:
                cl_usage(stderr);
                return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ckstore-bench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (x->o.map != NULL) {
        x->o.local = 0;
    } else if (x->o.local < x->o.k + x->o.m) {
        fprintf(stderr, "ckstore-bench: RS(%u,%u) needs at least %u servers (--local)\n",
                x->o.k, x->o.m, x->o.k + x->o.m);
        return -1;
    }
    if (x->o.pec && (8 % x->o.clients != 0 || 16 % x->o.clients != 0)) {
        fprintf(stderr, "ckstore-bench: --pec needs a client count that divides 8 (the "
                        "experts are spread over the ranks)\n");
        return -1;
    }
    if (x->o.pec_k > 8) {
        fprintf(stderr, "ckstore-bench: --pec-k must be at most 8 (the 8-expert run)\n");
        return -1;
    }
    if (x->o.pec_k > 0 && x->o.pec_fraction > 0) {
        fprintf(stderr, "ckstore-bench: --pec-k and --pec-fraction exclude each other\n");
        return -1;
    }
    if (x->o.readers == 0) {
        x->o.readers = x->o.clients;
    }
    if (x->o.size == 0) {
        fprintf(stderr, "ckstore-bench: --size must be above 0\n");
        return -1;
    }
    if ((x->o.nsweep_clients || x->o.nsweep_servers || x->o.nsweep_sizes) &&
        x->o.map != NULL) {
        fprintf(stderr, "ckstore-bench: the sweeps start their own servers: not with "
                        "--cluster\n");
        return -1;
    }
    for (unsigned i = 0; i < x->o.nsweep_servers; i++) {
        if (x->o.sweep_servers[i] < x->o.k + x->o.m) {
            fprintf(stderr,
                    "ckstore-bench: --sweep-servers %u: RS(%u,%u) needs at least "
                    "%u servers\n",
                    x->o.sweep_servers[i], x->o.k, x->o.m, x->o.k + x->o.m);
            return -1;
        }
    }
    if (x->o.hosts) {
        if (x->o.map != NULL || x->o.nsweep_clients || x->o.nsweep_servers ||
            x->o.nsweep_sizes) {
            fprintf(stderr,
                    "ckstore-bench: --hosts starts its own servers, one sweep point "
                    "at a time is not supported: not with --cluster or the sweeps\n");
            return -1;
        }
        if (x->o.local + 1 > CKS_TEST_NETNS_MAX_HOSTS) {
            fprintf(stderr,
                    "ckstore-bench: --hosts: at most %d servers (a namespace each, "
                    "and one for the raw UCX sink)\n",
                    CKS_TEST_NETNS_MAX_HOSTS - 1);
            return -1;
        }
        if (x->o.reps * x->o.readers > CL_MAX_COLD) {
            fprintf(stderr,
                    "ckstore-bench: --hosts: reps x readers at most %d (a fresh "
                    "process per cold restore)\n",
                    CL_MAX_COLD);
            return -1;
        }
        x->o.peers = 0; /* memcached and Redis would run in the client's namespace */
    }
    x->mix.kind = x->o.mix;
    cl_mix_build(x);
    if (strcmp(x->o.mix, "moe") == 0) {
        x->o.objects = x->mix.n;
        x->o.size = x->mix.max; /* the references are measured at the largest object */
    }
    return 0;
}
