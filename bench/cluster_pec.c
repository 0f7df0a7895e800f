/*
 * DESIGN: full versus partial-expert (PEC) checkpoints of a synthetic MoE model:
 * its layout per rank (shared by the parent and the workers), the full and
 * partial versions timed, the newest restored and verified, and the table.
 */
#include "cluster_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t cl_pec_expert_bytes(const cl_ctx_t *x, int optim)
{
    return CL_PEC_EXPERT_UNITS * x->o.pec_unit * (optim ? CL_PEC_OPT_FACTOR : 1);
}

uint64_t cl_pec_dense_bytes(const cl_ctx_t *x, int optim)
{
    return CL_PEC_DENSE_UNITS * x->o.pec_unit * (optim ? CL_PEC_OPT_FACTOR : 1);
}

void cl_pec_params(const cl_ctx_t *x, unsigned experts, unsigned ranks,
                   cks_pec_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->field_mask = CKS_PEC_FIELD_RANKS;
    p->layers = x->o.pec_layers;
    p->experts = experts;
    p->per_step = x->o.pec_k ? x->o.pec_k : (experts / 4 ? experts / 4 : 1);
    if (x->o.pec_fraction > 0) {
        unsigned k = (unsigned)(x->o.pec_fraction * experts + 0.5);
        p->per_step = k < 1 ? 1 : k > experts ? experts : k;
    }
    p->ranks = ranks;
}

/* The objects rank `rank` of `ranks` holds: per layer its shard of the dense
 * part (params, optimizer state; ZeRO-like: 1/ranks each) and the params and
 * optimizer state of its experts (contiguous blocks, cks_pec_expert_rank). */
size_t cl_pec_layout(const cl_ctx_t *x, unsigned experts, unsigned rank, unsigned ranks,
                     cl_pobj_t *out)
{
    cks_pec_params_t p;
    size_t n = 0;
    cl_pec_params(x, experts, ranks, &p);
    for (unsigned l = 0; l < x->o.pec_layers; l++) {
        for (int opt = 0; opt < 2; opt++) {
            if (out != NULL && n < CL_PEC_MAX_OBJS) {
                cl_pobj_t *o = &out[n];
                snprintf(o->key, sizeof(o->key), "layer%02u/dense/%s/rank%u", l,
                         opt ? "optim" : "params", rank);
                o->tags = (cks_tags_t){opt ? CKS_KIND_OPTIMIZER : CKS_KIND_DENSE,
                                       (int32_t)l, CKS_TAG_NONE, (int32_t)rank};
                o->size = (cl_pec_dense_bytes(x, opt) / ranks + 4095) & ~4095ull;
                o->layer = (int32_t)l;
                o->expert = -1;
            }
            n++;
        }
        for (unsigned e = 0; e < experts; e++) {
            uint32_t r = 0;
            if (cks_pec_expert_rank(&p, e, &r) != CKS_OK || r != rank) {
                continue;
            }
            for (int opt = 0; opt < 2; opt++) {
                if (out != NULL && n < CL_PEC_MAX_OBJS) {
                    cl_pobj_t *o = &out[n];
                    snprintf(o->key, sizeof(o->key), "layer%02u/expert%03u/%s", l, e,
                             opt ? "optim" : "params");
                    o->tags = (cks_tags_t){opt ? CKS_KIND_OPTIMIZER : CKS_KIND_EXPERT,
                                           (int32_t)l, (int32_t)e, (int32_t)rank};
                    o->size = cl_pec_expert_bytes(x, opt);
                    o->layer = (int32_t)l;
                    o->expert = (int32_t)e;
                }
                n++;
            }
        }
    }
    return n;
}

/* Bytes of the whole model (all ranks), of the largest rank, and what the
 * model takes in the arenas; with `delta`, only what one partial-expert
 * version writes (dense, and K experts per layer, counted as experts 0..K-1
 * of rank 0's share: the sizes are the same whichever are chosen). */
uint64_t cl_pec_model_bytes(const cl_ctx_t *x, unsigned experts, int delta,
                            uint64_t *rank_max_p, uint64_t *stored_p)
{
    cl_pobj_t *objs = calloc(CL_PEC_MAX_OBJS, sizeof(*objs));
    cks_pec_params_t p;
    uint64_t total = 0, rmax = 0, stored = 0;
    cl_pec_params(x, experts, x->o.clients, &p);
    for (unsigned r = 0; r < x->o.clients && objs != NULL; r++) {
        size_t n = cl_pec_layout(x, experts, r, x->o.clients, objs);
        uint64_t rb = 0;
        for (size_t i = 0; i < n && i < CL_PEC_MAX_OBJS; i++) {
            if (delta && objs[i].expert >= 0 &&
                (r != 0 || (unsigned)objs[i].expert >= p.per_step)) {
                continue;
            }
            rb += objs[i].size;
            stored += cl_stored_bytes(x, objs[i].size);
        }
        total += rb;
        rmax = rb > rmax ? rb : rmax;
    }
    free(objs);
    if (rank_max_p != NULL) {
        *rank_max_p = rmax;
    }
    if (stored_p != NULL) {
        *stored_p = stored;
    }
    return total;
}

/* Arena bytes in use, all servers (shows what retention keeps). */
static void cl_say_used(cl_ctx_t *x)
{
    uint64_t used = 0;
    if (!x->o.verbose || cks_cluster_usage(x->client, &used, NULL) != CKS_OK) {
        return;
    }
    cl_say(x, " [%.0f MiB used:", (double)used / (1 << 20));
    /* each server alone (a plain connection answers with its own arena) */
    for (unsigned i = 0; i < x->nsrv; i++) {
        cks_client_params_t cp;
        cks_client_h c;
        char addr[32];
        memset(&cp, 0, sizeof(cp));
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", x->srv[i].port);
        cp.field_mask = CKS_CLIENT_FIELD_SERVER;
        cp.server = addr;
        if (x->srv[i].pid > 0 && cks_client_create(&cp, &c) == CKS_OK) {
            if (cks_cluster_usage(c, &used, NULL) == CKS_OK) {
                cl_say(x, " %.0f", (double)used / (1 << 20));
            }
            cks_client_destroy(c);
        }
    }
    cl_say(x, "]");
}

static int cl_measure_pec_one(cl_ctx_t *x, cl_pec_fig_t *f, unsigned experts)
{
    char job[64];
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    cks_pec_params_t p;
    uint64_t version = 0, bytes, rmax;
    double stored_s, prot_s;
    unsigned npec;

    cl_pec_params(x, experts, x->o.clients, &p);
    f->experts = experts;
    f->per_step = p.per_step;
    npec = (experts + p.per_step - 1) / p.per_step; /* one period */
    npec = npec > x->o.reps ? npec : x->o.reps;
    snprintf(job, sizeof(job), "bench-%d-pec%u", (int)getpid(), experts);

    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_PEC_SETUP;
    cmd.experts = experts;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    if (cl_workers_run(x, &cmd, res, x->o.clients) != 0) {
        return -1;
    }
    cl_say(x, "  %2u experts, full:", experts);
    /* full checkpoints: each a version of its own; the previous one deleted
     * first (untimed), so that the arenas hold one model at a time */
    for (unsigned rep = 0; rep < x->o.reps; rep++) {
        if (version > 0) {
            cks_status_t st = cks_version_delete(x->client, job, version);
            if (st != CKS_OK) {
                return cl_fail(x, "delete", st);
            }
        }
        version++;
        if (cl_begin(x, job, version, CKS_NO_PARENT, 0, x->o.clients) != 0) {
            return -1;
        }
        cmd.op = CL_CMD_PEC_SNAP;
        cmd.flags = CL_F_FULL;
        cmd.version = version;
        cmd.ckpt = 0;
        if (cl_workers_run(x, &cmd, res, x->o.clients) != 0) {
            cks_version_abort(x->client, job, version);
            return -1;
        }
        cl_aggregate(res, x->o.clients, &bytes, &stored_s, &prot_s, &rmax);
        f->full_bytes = bytes;
        f->full_stored = cl_sum_stored(res, x->o.clients);
        f->full_rank_max = rmax;
        f->full_stored_s[f->nfull] = stored_s;
        f->full_s[f->nfull++] = prot_s;
        cl_say(x, " %.2f s", prot_s);
        cl_say_used(x);
    }
    cl_say(x, "; PEC (K = %u):", p.per_step);
    /* partial-expert checkpoints: each the child of the one before, K experts
     * per layer (round-robin), retention 2 (the oldest chunks that no
     * retained manifest uses are freed) */
    for (unsigned c = 1; c <= npec; c++) {
        uint64_t parent = version++;
        if (cl_begin(x, job, version, parent, 2, x->o.clients) != 0) {
            return -1;
        }
        cmd.op = CL_CMD_PEC_SNAP;
        cmd.flags = 0;
        cmd.version = version;
        cmd.ckpt = c;
        if (cl_workers_run(x, &cmd, res, x->o.clients) != 0) {
            cks_version_abort(x->client, job, version);
            return -1;
        }
        cl_aggregate(res, x->o.clients, &bytes, &stored_s, &prot_s, &rmax);
        if (f->npec > 0 && bytes != f->pec_bytes) {
            fprintf(stderr,
                    "ckstore-bench: PEC versions of different sizes (%llu, %llu)\n",
                    (unsigned long long)bytes, (unsigned long long)f->pec_bytes);
        }
        f->pec_bytes = bytes;
        f->pec_stored = cl_sum_stored(res, x->o.clients);
        f->pec_rank_max = rmax > f->pec_rank_max ? rmax : f->pec_rank_max;
        f->pec_stored_s[f->npec] = stored_s;
        f->pec_s[f->npec++] = prot_s;
        cl_say(x, " %.2f s", prot_s);
        cl_say_used(x);
    }
    /* the newest version restores as a whole model, each object from the
     * version that wrote it (untimed) */
    cmd.op = CL_CMD_PEC_VERIFY;
    cmd.flags = 0;
    cmd.version = version;
    if (cl_workers_run(x, &cmd, res, x->o.clients) != 0) {
        return -1;
    }
    cl_say(x, "; restore of version %llu verified", (unsigned long long)version);
    cl_release_job(x, job, version + 1);
    cl_say_used(x);
    cl_say(x, "\n");
    f->ok = 1;
    return 0;
}

int cl_measure_pec(cl_ctx_t *x)
{
    static const unsigned experts[2] = {8, 16};
    if (x->client == NULL && cl_client_connect(x) != 0) {
        return -1;
    }
    for (unsigned i = 0; i < 2; i++) {
        if (cl_measure_pec_one(x, &x->pecfig[i], experts[i]) != 0) {
            return -1;
        }
    }
    return 0;
}

/* The record of one kind of checkpoint, up to its bandwidth. */
static bench_rec_t *cl_rec_ckpt(cl_ctx_t *x, bench_report_t *rep, const char *op,
                                unsigned experts, unsigned saved, uint64_t bytes,
                                uint64_t stored, uint64_t rank_max, double secs,
                                double stored_secs)
{
    bench_rec_t *r = bench_report_add(rep);
    if (r != NULL) {
        cl_rec_common(x, r, op);
        bench_rec_kv(r, KU("experts", experts), KU("experts_saved", saved),
                     KU("layers", x->o.pec_layers), KU("ranks", x->o.clients),
                     KU("bytes", bytes), KU("stored_bytes", stored),
                     KU("rank_bytes", rank_max), KF("seconds", secs),
                     KF("stored_seconds", stored_secs),
                     KF("gbps", (double)bytes / secs / BENCH_GB));
    }
    return r;
}

void cl_print_pec(cl_ctx_t *x, bench_report_t *rep)
{
    char sz[32];
    cl_say(
        x,
        "\nPEC: synthetic MoE, %u MoE layers, per layer a dense part of %u units and E "
        "experts "
        "of %u units, unit = %s of bf16 params, optimizer state %ux params; %u rank%s\n",
        x->o.pec_layers, CL_PEC_DENSE_UNITS, CL_PEC_EXPERT_UNITS,
        bench_size_str(x->o.pec_unit, sz, sizeof(sz)), CL_PEC_OPT_FACTOR, x->o.clients,
        x->o.clients > 1 ? "s" : "");
    cl_say(x, "%-3s %-4s %5s %9s %9s %10s %8s %6s %8s %9s %9s\n", "E", "kind", "saved",
           "MiB/vers", "MiB/rank", "arena MiB", "s PROT", "GB/s", "s STORED", "reduction",
           "PEC paper");
    for (unsigned i = 0; i < 2; i++) {
        cl_pec_fig_t *f = &x->pecfig[i];
        double full_s, pec_s, full_st, pec_st, red, tred;
        bench_rec_t *r;
        if (!f->ok) {
            continue;
        }
        full_s = cl_median(f->full_s, f->nfull);
        pec_s = cl_median(f->pec_s, f->npec);
        full_st = cl_median(f->full_stored_s, f->nfull);
        pec_st = cl_median(f->pec_stored_s, f->npec);
        red = 1.0 - (double)f->pec_bytes / (double)f->full_bytes;
        tred = 1.0 - pec_s / full_s;
        cl_say(x, "%-3u %-4s %5u %9.1f %9.1f %10.1f %8.3f %6.2f %8.3f %9s %9s\n",
               f->experts, "full", f->experts, (double)f->full_bytes / (1 << 20),
               (double)f->full_rank_max / (1 << 20), (double)f->full_stored / (1 << 20),
               full_s, (double)f->full_bytes / full_s / BENCH_GB, full_st, "-", "-");
        {
            char redtxt[32], paper[32];
            snprintf(redtxt, sizeof(redtxt), "%.1f %%", red * 100);
            snprintf(paper, sizeof(paper), f->experts == 8 ? "54.2 %%" : "-");
            cl_say(x, "%-3u %-4s %5u %9.1f %9.1f %10.1f %8.3f %6.2f %8.3f %9s %9s\n",
                   f->experts, "pec", f->per_step, (double)f->pec_bytes / (1 << 20),
                   (double)f->pec_rank_max / (1 << 20), (double)f->pec_stored / (1 << 20),
                   pec_s, (double)f->pec_bytes / pec_s / BENCH_GB, pec_st, redtxt, paper);
        }
        cl_say(x, "%-3s time to PROTECTED: %.1f %% less than a full checkpoint\n", "",
               tred * 100);

        if ((r = cl_rec_ckpt(x, rep, "checkpoint_full", f->experts, f->experts,
                             f->full_bytes, f->full_stored, f->full_rank_max, full_s,
                             full_st)) != NULL) {
            bench_rec_u64(r, "reps", f->nfull);
        }
        if ((r = cl_rec_ckpt(x, rep, "checkpoint_pec", f->experts, f->per_step,
                             f->pec_bytes, f->pec_stored, f->pec_rank_max, pec_s,
                             pec_st)) != NULL) {
            bench_rec_kv(
                r, KF("reduction", red), KF("time_reduction", tred),
                KF("published_reduction", f->experts == 8 ? CL_PEC_PUBLISHED_8 : NAN),
                KU("reps", f->npec));
        }
    }
    cl_say(
        x,
        "saved: experts per layer written; MiB: object bytes; arena MiB: with parity and "
        "the "
        "zero padding of last stripes; s PROT / s STORED: seconds to PROTECTED / STORED "
        "(median)\nreduction = 1 - PEC bytes / full bytes per version; PEC paper: the "
        "54.2 %% "
        "the PEC paper reports for 8 experts (its own model and K; see the docs)\n");
}
