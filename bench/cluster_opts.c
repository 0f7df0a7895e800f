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
        "      --arena-dir DIR    the servers' arena files (default /dev/shm; a\n"
        "                         hugetlbfs mount puts them in huge pages)\n"
        "      --no-degraded      skip the degraded restores (and the repair after "
        "them)\n"
        "      --repair-rate SIZE the servers' repair pacing cap while clients move "
        "data,\n"
        "                         bytes/s (default: the server's); the figures name it\n"
        "      --copy-threads N   the servers' copy threads (ckstore-server\n"
        "                         --copy-threads; default: the server's)\n"
        "      --coding-nice N    the servers' encoder and decoder priority\n"
        "                         (ckstore-server --coding-nice; default: the server's)\n"
        "      --restart-pause SEC\n"
        "                         a trainer's pause between the killed servers'\n"
        "                         restart (and repair) and its next snapshot (0)\n"
        "      --stage-host       writers stage their puts through a ring of host\n"
        "                         memory that holds a writer's snapshot\n"
        "                         (CKS_PUT_FIELD_STAGED), all of its puts at once: the\n"
        "                         stall ends at the last COPIED, STORED is timed as\n"
        "                         before\n"
        "      --stage-default-ring  with --stage-host, the library's default ring\n"
        "                         (8 x 4 MiB) instead: larger objects go in parts\n"
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

static int cl_opt_mix(const char *arg, const bench_opt_t *o)
{
    static const char *const mixes[] = {"uniform", "moe"};
    int at = bench_name_index(arg, strlen(arg), mixes, 2);
    *(const char **)o->dst = at >= 0 ? mixes[at] : NULL;
    return at >= 0 ? 0 : -1;
}

int cl_parse_opts(cl_ctx_t *x, int argc, char **argv)
{
    static const char *const mem_names[] = {NULL, "thp", NULL, "ckstore"};
    cl_opts_t *o = &x->o;
    const bench_opt_t t[] = {
        BOPT("local", 'l', UINT, &o->local, .lo = 1, .hi = CL_MAX_SERVERS),
        BOPT("cluster", 'c', STR, &o->map),
        BOPT("server-bin", 0, STR, &o->server_bin),
        BOPT("k", 'k', UINT, &o->k, .lo = 1, .hi = CKS_EC_MAX_K),
        BOPT("m", 'M', UINT, &o->m, .lo = 1, .hi = CKS_EC_MAX_M),
        BOPT("chunk", 0, SIZE, &o->chunk),
        BOPT("clients", 'C', UINT, &o->clients, .lo = 1, .hi = CL_MAX_CLIENTS),
        BOPT("size", 's', SIZE, &o->size),
        BOPT("objects", 'o', UINT, &o->objects, .lo = 1, .hi = CL_MAX_OBJS),
        BOPT("reps", 'r', UINT, &o->reps, .lo = 1, .hi = CL_MAX_REPS),
        BOPT("window", 'W', UINT, &o->window, .lo = 1, .hi = 256),
        BOPT("encoders", 'e', UINT, &o->encoders, .lo = 1, .hi = 64),
        BOPT("arena", 0, SIZE, &o->arena, .aux = &o->arena_given),
        BOPT("arena-dir", 0, STR, &o->arena_dir),
        BOPT("no-degraded", 0, FLAG, &o->no_degraded),
        BOPT("repair-rate", 0, STR, &o->repair_rate),   /* the server checks it */
        BOPT("copy-threads", 0, STR, &o->copy_threads), /* idem */
        BOPT("coding-nice", 0, STR, &o->coding_nice),   /* idem */
        BOPT("pec", 0, FLAG, &o->pec),
        BOPT("pec-only", 0, FLAG, &o->pec_only, .aux = &o->pec),
        BOPT("pec-k", 0, UINT, &o->pec_k, .lo = 1, .hi = 16),
        BOPT("pec-layers", 0, UINT, &o->pec_layers, .lo = 1, .hi = 64),
        BOPT("pec-unit", 0, SIZE, &o->pec_unit),
        BOPT("raw-setups", 0, CALL, &o->raw_setups, .hi = BENCH_NSETUPS,
             .fn = bench_opt_mask, .names = bench_setup_names),
        BOPT("client-mem", 0, CALL, &o->client_mem, .hi = 4, .fn = bench_opt_enum,
             .names = mem_names),
        BOPT("no-raw", 0, FLAG, &o->no_raw),
        BOPT("mix", 0, CALL, &o->mix, .fn = cl_opt_mix),
        BOPT("readers", 0, UINT, &o->readers, .lo = 1, .hi = CL_MAX_CLIENTS),
        BOPT("versions", 0, UINT, &o->versions, .lo = 1, .hi = CL_MAX_VERSIONS),
        BOPT("pec-fraction", 0, DOUBLE, &o->pec_fraction, .lo = 1),
        BOPT("peers", 0, CALL, &o->peers, .hi = BENCH_NPEERS, .fn = bench_opt_mask,
             .names = bench_peer_names),
        BOPT("no-peers", 0, CLEAR, &o->peers, .lo = ~0u),
        BOPT("no-memcached", 0, CLEAR, &o->peers, .lo = 1u << BENCH_PEER_MEMCACHED),
        BOPT("no-redis", 0, CLEAR, &o->peers, .lo = 1u << BENCH_PEER_REDIS),
        BOPT("no-shm", 0, CLEAR, &o->peers, .lo = 1u << BENCH_PEER_SHM),
        BOPT("plot", 0, STR, &o->plot),
        BOPT("sweep-clients", 0, CALL, o->sweep_clients, .lo = 1, .hi = CL_MAX_CLIENTS,
             .fn = bench_opt_uints, .count = &o->nsweep_clients),
        BOPT("sweep-servers", 0, CALL, o->sweep_servers, .lo = 1, .hi = CL_MAX_SERVERS,
             .fn = bench_opt_uints, .count = &o->nsweep_servers),
        BOPT("sweep-sizes", 0, CALL, o->sweep_sizes, .hi = CL_MAX_SWEEP,
             .fn = bench_opt_sizes, .count = &o->nsweep_sizes),
        BOPT("hosts", 0, FLAG, &o->hosts),
        BOPT("restart-pause", 0, DOUBLE, &o->restart_pause_s),
        BOPT("stage-host", 0, FLAG, &o->stage_host),
        BOPT("stage-default-ring", 0, FLAG, &o->stage_default_ring),
        BOPT("json", 'j', STR, &o->json),
        BOPT("timeout", 't', DOUBLE, &o->timeout_s, .lo = 1),
        BOPT("verbose", 'v', FLAG, &o->verbose),
        BOPT("quiet", 'q', FLAG, &o->quiet),
        BOPT("help", 'h', HELP, NULL),
    };
    int rc;

    memset(o, 0, sizeof(*o));
    o->local = 6;
    o->k = 4;
    o->m = 2;
    o->chunk = 1ull << 20;
    o->clients = 1;
    o->size = 64ull << 20;
    o->objects = 8;
    o->reps = 3;
    o->window = 4;
    o->arena_dir = "/dev/shm";
    o->encoders = 1;
    o->pec_layers = 4;
    o->pec_unit = 256ull << 10;
    o->timeout_s = 30;
    o->client_mem = BENCH_MEM_CKS;
    o->raw_setups =
        (1u << BENCH_SETUP_THP) | (1u << BENCH_SETUP_SHM_THP) | (1u << BENCH_SETUP_UCX);
    o->mix = "uniform";
    o->versions = 1;
    o->peers = (1u << BENCH_NPEERS) - 1;
    bench_join_args(o->command, sizeof(o->command), "ckstore-bench", argc, argv);
    rc = bench_opts_parse("ckstore-bench", t, sizeof(t) / sizeof(t[0]), argc, argv);
    if (rc != 0) {
        cl_usage(rc > 0 ? stdout : stderr);
        if (rc > 0) {
            exit(0);
        }
        return -1;
    }
    if (strlen(x->o.arena_dir) > 200) {
        fprintf(stderr, "ckstore-bench: --arena-dir: a path of at most 200 bytes\n");
        return -1;
    }
    if (x->o.chunk % 4096 != 0 || x->o.pec_fraction > 1) {
        fprintf(stderr, "ckstore-bench: the chunk size must be a multiple of 4096, "
                        "--pec-fraction at most 1\n");
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
    if (x->o.stage_default_ring && !x->o.stage_host) {
        fprintf(stderr, "ckstore-bench: --stage-default-ring goes with --stage-host\n");
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
