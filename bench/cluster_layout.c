/*
 * DESIGN: what a run stores and whether it fits: the objects every writer puts
 * (--mix: uniform, or one MoE trainer rank's share: dense parameter shards,
 * optimizer state, expert states of the sizes the PEC and Lazarus papers give,
 * RNG state), their keys and fill patterns, the share each reader restores,
 * the arena per server, and the check that arenas, buffers and references
 * fit in this machine's memory.
 */
#include "cluster_int.h"
#include "cks_coding.h"
#include "cks_md.h"

#include <stdlib.h>
#include <string.h>

static double cl_gib(uint64_t b)
{
    return (double)b / (double)(1ull << 30);
}

/* Arena bytes an object of `size` takes in the cluster: whole stripes of k
 * data chunks (the last one zero-padded) and m parity chunks. */
uint64_t cl_stored_bytes(const cl_ctx_t *x, uint64_t size)
{
    return cks_ec_stripe_count(size, x->o.k, x->o.chunk) * (x->o.k + x->o.m) * x->o.chunk;
}

static void cl_mix_add(cl_ctx_t *x, const char *name, unsigned count, uint64_t size,
                       int32_t kind)
{
    for (unsigned i = 0; i < count && x->mix.n < CL_MAX_OBJS; i++) {
        cl_obj_t *o = &x->mix.obj[x->mix.n];
        snprintf(o->name, sizeof(o->name), "%s%03u", name, i);
        o->size = size;
        o->off = x->mix.bytes;
        o->tags = (cks_tags_t){kind, CKS_TAG_NONE, CKS_TAG_NONE, CKS_TAG_NONE};
        if (kind == CKS_KIND_EXPERT) {
            o->tags.expert = (int32_t)i;
        }
        x->mix.bytes += size;
        x->mix.stored += cl_stored_bytes(x, size);
        x->mix.max = size > x->mix.max ? size : x->mix.max;
        x->mix.n++;
    }
}

void cl_mix_build(cl_ctx_t *x)
{
    memset(&x->mix.obj, 0, sizeof(x->mix.obj));
    x->mix.n = 0;
    x->mix.bytes = x->mix.max = x->mix.stored = 0;
    if (strcmp(x->mix.kind, "moe") == 0) {
        cl_mix_add(x, "dense-params", 2, 16ull << 20, CKS_KIND_DENSE);
        cl_mix_add(x, "dense-optim", 1, 96ull << 20, CKS_KIND_OPTIMIZER);
        cl_mix_add(x, "expert-state-63MB", 2, 63000000ull, CKS_KIND_EXPERT);
        cl_mix_add(x, "expert-state-112MB", 2, 112000000ull, CKS_KIND_EXPERT);
        cl_mix_add(x, "rng", 1, 4096, CKS_KIND_OTHER);
    } else {
        cl_mix_add(x, "object", x->o.objects, x->o.size, CKS_KIND_OTHER);
    }
}

void cl_obj_key(const cl_ctx_t *x, unsigned writer, unsigned o, char *key, size_t len)
{
    snprintf(key, len, "client%02u/%s", writer, x->mix.obj[o].name);
}

uint64_t cl_obj_seed(unsigned writer, unsigned o)
{
    return 1000u * (writer + 1) + o;
}

/* The objects reader `reader` of `readers` restores: a contiguous block of
 * the writers' objects (writer-major), so that with as many readers as
 * writers each reads back what it wrote. */
void cl_read_share(const cl_ctx_t *x, unsigned reader, unsigned readers,
                   unsigned *first_p, unsigned *count_p)
{
    unsigned n = x->o.clients * x->mix.n;
    unsigned first = (unsigned)((uint64_t)n * reader / readers);
    unsigned last = (unsigned)((uint64_t)n * (reader + 1) / readers);
    *first_p = first;
    *count_p = last - first;
}

static uint64_t cl_round_up(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

/* Arena per server: one snapshot at a time (the previous one is deleted)
 * spread over N servers, a quarter more for uneven placement and the
 * allocator's slack, plus the whole objects (with parity) a primary may hold
 * until they are protected; with --pec, one 16-expert model and two partial
 * versions (retention 2). */
uint64_t cl_arena_size(const cl_ctx_t *x)
{
    const unsigned n = x->o.local;
    uint64_t need = 0;
    if (!x->o.pec_only) {
        /* the puts are STORED long before the encoders are done: a primary
         * may hold every object it is primary of, whole and with its parity;
         * placement spreads primaries evenly, count twice the mean (at least
         * 3) for the unlucky server */
        uint64_t nobj = (uint64_t)x->o.clients * x->mix.n;
        uint64_t primary = 2 * ((nobj + n - 1) / n);
        primary = primary < 3 ? 3 : primary;
        primary = primary > nobj ? nobj : primary;
        /* --versions snapshots are kept at once */
        double snap = (double)x->o.clients * (double)x->mix.stored * x->o.versions;
        need = (uint64_t)(1.25 * snap / n +
                          (double)primary * cl_stored_bytes(x, x->mix.max));
        if (!x->o.no_degraded) {
            /* the versions written with 1 and 2 servers down are kept next
             * to the healthy one until the end of the repetition, on fewer
             * servers, and one snapshot is taken while the repair runs:
             * room for them too (across hosts the 1-down snapshot ran out of
             * a 640 MiB arena at the defaults; here the 2-down one did, 2
             * runs of 3, with "arena full") */
            double one = (double)x->o.clients * (double)x->mix.stored;
            for (unsigned d = 1; d <= CL_MAX_DOWN && d <= x->o.m && d < n; d++) {
                need += (uint64_t)(1.25 * one / (n - d));
            }
            need += (uint64_t)(1.25 * one / n);
        }
    }
    if (x->o.pec) {
        uint64_t model, delta;
        cl_pec_model_bytes(x, 16, 0, NULL, &model);
        cl_pec_model_bytes(x, 16, 1, NULL, &delta);
        /* 1.75: measured on the 2-core machine, 832 MiB per server (1.65 x
         * the live bytes of the 16-expert chain) ran out, 1024 MiB (2.0 x)
         * did not; with the objects in flight this gives 1152 MiB (docs) */
        uint64_t p = (uint64_t)(1.75 * (double)(model + 2 * delta) / n +
                                (double)x->o.window *
                                    cl_stored_bytes(x, cl_pec_dense_bytes(x, 1)));
        need = p > need ? p : need;
    }
    need += 64ull << 20;
    return cl_round_up(need, 64ull << 20);
}

/* Refuse to start what does not fit: arenas in /dev/shm, client buffers and
 * references in memory. Returns 0 when it fits. */
int cl_check_memory(const cl_ctx_t *x)
{
    /* arenas elsewhere than /dev/shm (hugetlbfs): the servers say what is short */
    int in_shm = strcmp(x->o.arena_dir, "/dev/shm") == 0;
    uint64_t avail = bench_mem_available(), shm = in_shm ? bench_shm_free() : 0;
    uint64_t arenas = x->o.local * x->o.arena;
    uint64_t clients = 0, refsz, rank_max = 0;
    if (!x->o.pec_only) {
        /* writers' objects, readers' shares, a verify buffer per reader; the
         * peers' copy of one writer's objects and the peer server holding them */
        clients = x->o.clients * x->mix.bytes * 2 + x->o.readers * x->mix.max;
        if (x->o.peers != 0) {
            clients += 2 * x->mix.bytes + x->mix.max;
        }
    }
    if (x->o.pec) {
        uint64_t p = cl_pec_model_bytes(x, 16, 0, &rank_max, NULL) +
                     x->o.clients * cl_pec_dense_bytes(x, 1);
        clients = p > clients ? p : clients;
    }
    refsz = 4 * x->o.size + (x->o.no_raw ? 0 : 4 * x->o.size + (64ull << 20));
    uint64_t ram = arenas + clients + refsz;
    cl_say(x,
           "memory: arenas %u x %.2f GiB = %.2f GiB in %s (%.1f GiB free there), "
           "client "
           "buffers %.2f GiB, references %.2f GiB; MemAvailable %.1f GiB\n",
           x->o.local, cl_gib(x->o.arena), cl_gib(arenas), x->o.arena_dir, cl_gib(shm),
           cl_gib(clients), cl_gib(refsz), cl_gib(avail));
    if (arenas > (8ull << 30)) {
        fprintf(stderr, "ckstore-bench: NOTE: the arenas take more than 8 GiB\n");
    }
    if ((shm > 0 && arenas + (arenas >> 4) > shm) ||
        (avail > 0 && ram + ram / 8 > avail)) {
        fprintf(stderr, "ckstore-bench: not enough memory for this run: lower --size, "
                        "--objects, --clients or --pec-unit\n");
        return -1;
    }
    return 0;
}

/* Where the writers' objects have their primaries (cks_place(): a hash of
 * the job and the key, so it changes with the job's name, here the bench's
 * pid): a snapshot is STORED when the busiest primary has pulled all of
 * its objects, so with few objects per server its STORED figure follows
 * this more than anything else (docs/PERFORMANCE.md, "Where a snapshot's
 * objects land"). */
void cl_placement_say(cl_ctx_t *x, const char *job)
{
    const char *path = x->o.map != NULL ? x->o.map : x->map;
    cks_cluster_h map = NULL;
    char err[256];
    unsigned *objs = NULL, nobj = 0, busiest = 0, used = 0;
    uint64_t *bytes = NULL, most = 0;
    size_t n;

    if (cks_cluster_load(path, &map, err, sizeof(err)) != CKS_OK) {
        return;
    }
    n     = cks_cluster_nservers(map);
    objs  = calloc(n, sizeof(*objs));
    bytes = calloc(n, sizeof(*bytes));
    for (unsigned w = 0; objs != NULL && bytes != NULL && w < x->o.clients; w++) {
        for (unsigned o = 0; o < x->mix.n; o++) {
            char key[96];
            uint16_t group[CKS_PLACE_WIDTH_MAX];
            cl_obj_key(x, w, o, key, sizeof(key));
            if (cks_place(map, job, strlen(job), key, strlen(key), 0, x->o.k, x->o.m, NULL,
                          group) != CKS_OK) {
                continue;
            }
            objs[group[0]]++;
            bytes[group[0]] += x->mix.obj[o].size;
            nobj++;
        }
    }
    for (size_t i = 0; objs != NULL && bytes != NULL && i < n; i++) {
        used += objs[i] > 0;
        if (bytes[i] > most) {
            most    = bytes[i];
            busiest = objs[i];
        }
    }
    if (nobj > 0) {
        double mean = (double)(x->mix.bytes * x->o.clients) / (double)n;
        cl_say(x,
               "placement of job %s: the primaries of its %u objects are %u of %zu servers; "
               "the busiest has %u of them, %.0f MiB (%.2f x the mean %.0f MiB): each "
               "snapshot is STORED once that one has pulled them\n",
               job, nobj, used, n, busiest, (double)most / (1u << 20),
               (double)most / mean, mean / (1u << 20));
        x->placement_max_ratio = (double)most / mean;
    }
    free(objs);
    free(bytes);
    cks_cluster_free(map);
}
