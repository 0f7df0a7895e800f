/*
 * DESIGN: self-healing: the repair after killed servers return (its rebuild
 * rate, the time until every kept version is PROTECTED again), a snapshot
 * taken while it runs, and a replacement server (empty arena and metadata)
 * taking a killed one's id.
 */
#include "cluster_int.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

/* How often cl_repair_wait() asks the servers, seconds: a repair of the
 * default run takes 0.15 - 0.2 s here, so 20 ms (until 2026-11-28) made its
 * rate a figure of +-10 % or more */
#define CL_REPAIR_POLL_S 0.005

/* How a repair went, as cl_repair_wait() saw it (every CL_REPAIR_POLL_S). */
typedef struct {
    uint64_t done;      /* chunk bytes the servers rebuilt */
    uint64_t chunks, sent; /* chunks they rebuilt, and of those the ones sent to
                              another of them (one decode for a stripe) */
    uint64_t decodes, decoded; /* their decodes (one per stripe), and the chunks
                                  those rebuilt */
    double first, last; /* seconds since t0 of the first sample that saw
                           rebuilt bytes, and of the one that saw them all */
    double protected_s; /* seconds since t0 until every version was PROTECTED */
    int caught;         /* every one of the servers has caught up */
    double caught_s;    /* seconds since t0 of the first sample that saw that */
    uint64_t caught_done; /* the bytes rebuilt by then */
    /* every server's CPU seconds (user + system) from the sample before the
     * first that saw rebuilt bytes to the one that saw them all, and that
     * span's seconds: how busy the machine's cores were while it rebuilt */
    double cpu_s, span_s;
} cl_repair_t;

/* The repair figures of the servers in ids: *left_p chunk bytes they still
 * lack, *done_p bytes they rebuilt since they started. 1 when each has
 * caught up and lacks nothing. */
static int cl_repair_left(cl_ctx_t *x, const unsigned *ids, unsigned n, uint64_t *left_p,
                          uint64_t *done_p, cl_repair_t *r)
{
    int all = 1;
    *left_p = *done_p = 0;
    r->chunks = r->sent = r->decodes = r->decoded = 0;
    r->caught = 1;
    for (unsigned i = 0; i < n; i++) {
        cks_repair_info_t ri;
        if (cks_repair_status(x->client, ids[i], &ri) != CKS_OK) {
            all = r->caught = 0;
            continue;
        }
        r->caught = r->caught && ri.caught_up;
        *left_p += ri.bytes_left;
        *done_p += ri.bytes_done;
        r->chunks += ri.chunks_done;
        r->sent += ri.chunks_sent;
        r->decodes += ri.stripes_decoded;
        r->decoded += ri.chunks_decoded;
        all = all && ri.caught_up && ri.chunks_left == 0;
    }
    return all;
}

/* Wait (bounded) until the servers in ids lack nothing and every version in
 * vs is PROTECTED. 0, or -1 (said why). */
static int cl_repair_wait(cl_ctx_t *x, const char *job, const unsigned *ids,
                          unsigned nids, const uint64_t *vs, unsigned nvs, double t0,
                          cl_repair_t *r)
{
    double deadline = bench_now() + x->o.timeout_s * 4 + 30;
    uint64_t left = 0, done = 0;
    unsigned v = 0;
    double prev_s = 0, prev_cpu = cl_servers_cpu(x), cpu0 = 0, t_cpu0 = 0;
    memset(r, 0, sizeof(*r));
    r->first    = -1;
    r->caught_s = -1;
    while (bench_now() < deadline) {
        int clean  = cl_repair_left(x, ids, nids, &left, &done, r);
        double now = bench_now() - t0, cpu = cl_servers_cpu(x);
        if (r->caught && r->caught_s < 0) {
            r->caught_s    = now;
            r->caught_done = done;
        }
        if (done > r->done) {
            if (r->first < 0) {
                r->first = now;
                cpu0     = prev_cpu;
                t_cpu0   = prev_s;
            }
            r->last   = now;
            r->done   = done;
            r->cpu_s  = cpu - cpu0;
            r->span_s = now - t_cpu0;
        }
        prev_s   = now;
        prev_cpu = cpu;
        if (clean) {
            for (; v < nvs; v++) { /* a version PROTECTED stays so: ask the rest */
                cks_version_info_t vi;
                if (cks_version_stat(x->client, job, vs[v], &vi) != CKS_OK ||
                    vi.state != CKS_VSTATE_PROTECTED) {
                    break;
                }
            }
            if (v == nvs) {
                r->protected_s = bench_now() - t0;
                return 0;
            }
        }
        usleep((useconds_t)(CL_REPAIR_POLL_S * 1e6));
    }
    fprintf(stderr,
            "ckstore-bench: repair did not end in %.0f s (%llu bytes left, version %llu "
            "of %u "
            "not PROTECTED)\n",
            x->o.timeout_s * 4 + 30, (unsigned long long)left,
            (unsigned long long)(v < nvs ? vs[v] : 0), nvs);
    return -1;
}

/* The rebuild rate of a repair: its bytes over the time between the first
 * and the last sample that saw them grow (one sample period more, so that
 * a repair within one period is not counted as instant); NAN when nothing
 * was rebuilt. */
static double cl_repair_gbs(const cl_repair_t *r)
{
    return r->done > 0
               ? (double)r->done / (r->last - r->first + CL_REPAIR_POLL_S) / BENCH_GB
               : NAN;
}

/* What one core of ISA-L would take for the decodes of a repair: chunk
 * bytes per second. A decode costs the k chunks it reads, whether it
 * rebuilds one chunk of its stripe or two (decode[e]: object bytes, k chunks
 * per stripe, per second with e lost), so the bound is the chunks rebuilt
 * over the time of that many decodes: with 1 and 2 lost per stripe
 * (at most 2 servers down here), 2D - C stripes lost one and C - D two.
 * NAN when it cannot be told (no decode counted, a reference missing).
 * Taken with the references of the whole run (cl_print_targets()), not
 * those of its start alone. */
double cl_repair_bound(const cl_ctx_t *x, uint64_t d, uint64_t c)
{
    if (d == 0 || c < d || c > 2 * d || !x->refs.decode[1].ok ||
        (c > d && (x->o.m < 2 || !x->refs.decode[2].ok))) {
        return NAN;
    }
    /* in GB, and GB/s as the references are */
    double chunk  = (double)x->o.chunk / BENCH_GB, stripe = x->o.k * chunk;
    double t1     = (double)(2 * d - c) * stripe / x->refs.decode[1].st.median;
    double t2     = c > d ? (double)(c - d) * stripe / x->refs.decode[2].st.median : 0;
    return (double)c * chunk / (t1 + t2);
}

/* The servers' repair pacing cap (--repair-rate), bytes/s; 0: none or unknown. */
static uint64_t cl_repair_cap(cl_ctx_t *x, unsigned id)
{
    cks_repair_info_t ri;
    return cks_repair_status(x->client, id, &ri) == CKS_OK ? ri.rate_cap : 0;
}

static void cl_say_repair(cl_ctx_t *x, unsigned rep, const char *what,
                          const cl_repair_t *r, unsigned id)
{
    uint64_t cap = cl_repair_cap(x, id);
    char capbuf[80] = "no cap";
    if (cap > 0) {
        snprintf(capbuf, sizeof(capbuf), "capped at %.0f MiB/s while clients move data",
                 (double)cap / (1 << 20));
    }
    cl_say(x,
           "  rep %u: %s: %.1f MiB rebuilt at %.2f GB/s (%s), from %.2f s to %.2f s "
           "after the start (all caught up after %.2f s, %.1f MiB rebuilt by then); every "
           "version PROTECTED after %.2f s; %llu of %llu chunks "
           "sent by the server that decoded their stripe; %llu decodes rebuilt %llu "
           "chunks; the servers used %.2f CPU seconds in its %.2f s (%.2f of %ld cores)\n",
           rep + 1, what, (double)r->done / (1 << 20), cl_repair_gbs(r), capbuf,
           r->first < 0 ? 0.0 : r->first, r->last, r->caught_s,
           (double)r->caught_done / (1 << 20), r->protected_s,
           (unsigned long long)r->sent, (unsigned long long)r->chunks,
           (unsigned long long)r->decodes, (unsigned long long)r->decoded, r->cpu_s,
           r->span_s, r->span_s > 0 ? r->cpu_s / r->span_s : NAN, sysconf(_SC_NPROCESSORS_ONLN));
}

/* The reference of the snapshot taken while repair runs: the same servers
 * killed and restarted at once, with their arenas and metadata, so that they
 * miss nothing and there is nothing to rebuild, and a snapshot taken as soon
 * as they have caught up - as that one was. Both then run right after a
 * restart, while the restarted servers map the writer's buffers again, and
 * differ in the repair alone. 0, or -1 (said why). */
static int cl_heal_reference(cl_ctx_t *x, const char *job, const unsigned *ids,
                             unsigned nids, unsigned rep, double during_s)
{
    double deadline = bench_now() + x->o.timeout_s + 10, stored_s = 0;
    uint64_t left = 0, done = 0, hv = 3000000 + (uint64_t)rep * 1000;
    cl_repair_t rr;
    int clean = 0;

    bench_progress("rep %u/%u: a restart with nothing to repair", rep + 1, x->o.reps);
    for (unsigned d = 0; d < nids; d++) {
        cl_server_kill(x, &x->srv[ids[d]]);
    }
    if (cl_servers_respawn(x, ids, nids) != 0 || cl_client_connect(x) != 0) {
        return -1;
    }
    while (!(clean = cl_repair_left(x, ids, nids, &left, &done, &rr)) &&
           bench_now() < deadline) {
        usleep(5 * 1000);
    }
    if (!clean) {
        fprintf(stderr,
                "ckstore-bench: the servers restarted with nothing missed did not catch "
                "up in %.0f s (%llu bytes to rebuild)\n",
                x->o.timeout_s + 10, (unsigned long long)left);
        return -1;
    }
    if (cl_snapshot_down(x, job, &hv, 0, rep, "after a restart with nothing to repair",
                         &stored_s) != 0) {
        return -1;
    }
    cl_say(x,
           "  rep %u: the snapshot while repair ran kept %.2f of that one (STORED "
           "seconds %.3f against %.3f)\n",
           rep + 1, during_s > 0 ? stored_s / during_s : NAN, during_s, stored_s);
    if (x->fig.nnorepair < CL_MAX_REPS) {
        x->fig.norepair_stored[x->fig.nnorepair++] = stored_s;
    }
    cks_status_t st = cks_version_delete(x->client, job, hv);
    return st == CKS_OK ? 0 : cl_fail(x, "delete", st);
}

/* After the killed servers were restarted at t_spawn: in odd repetitions a
 * snapshot taken at once, while they rebuild what they missed, and its
 * reference (cl_heal_reference()); in the
 * others the time until every kept version is PROTECTED again and the bytes
 * rebuilt. In the last repetition, a replacement: one of them killed again,
 * its arena and metadata deleted, started empty with its id, and timed the
 * same way. */
int cl_heal_phase(cl_ctx_t *x, const char *job, uint64_t first, uint64_t newest,
                  const uint64_t *downv, unsigned rep, double t_spawn)
{
    unsigned ids[CL_MAX_DOWN], nids = x->fig.ndown;
    uint64_t vs[CL_MAX_VERSIONS + CL_MAX_DOWN + 1], done = 0, left0 = 0, left1 = 0;
    unsigned nvs = 0;
    cl_repair_t r;

    for (unsigned d = 0; d < nids; d++) {
        ids[d] = x->fig.down_ids[d];
    }
    for (uint64_t v = first; v <= newest; v++) {
        vs[nvs++] = v;
    }
    for (unsigned d = 0; d < nids; d++) {
        vs[nvs++] = downv[d];
    }
    if (x->o.reps > 1 && rep % 2 == 1) {
        double stored_s = 0;
        uint64_t hv = 2000000 + (uint64_t)rep * 1000;
        /* the repair starts once the servers back have caught up: the
         * snapshot starts when it has (bounded) */
        double until = bench_now() + x->o.timeout_s + 10;
        cl_repair_t rr;
        while (!cl_repair_left(x, ids, nids, &left0, &done, &rr) && left0 == 0 && done == 0 &&
               bench_now() < until) {
            usleep(5 * 1000);
        }
        if (cl_snapshot_down(x, job, &hv, 0, rep, "while repair runs", &stored_s) != 0) {
            return -1;
        }
        cl_repair_left(x, ids, nids, &left1, &done, &rr);
        cl_say(x,
               "  rep %u: repair had %.0f MiB left when that snapshot began, %.0f MiB "
               "when it "
               "was stored\n",
               rep + 1, (double)left0 / (1 << 20), (double)left1 / (1 << 20));
        if (x->fig.nduring < CL_MAX_REPS) {
            x->fig.during_stored[x->fig.nduring] = stored_s;
            x->fig.during_left0[x->fig.nduring] = left0;
            x->fig.during_left1[x->fig.nduring++] = left1;
        }
        vs[nvs++] = hv;
        if (cl_repair_wait(x, job, ids, nids, vs, nvs, t_spawn, &r) < 0) {
            return -1;
        }
        cks_status_t st = cks_version_delete(x->client, job, hv);
        if (st != CKS_OK) {
            return cl_fail(x, "delete", st);
        }
        nvs--;
        if (cl_heal_reference(x, job, ids, nids, rep, stored_s) != 0) {
            return -1;
        }
    } else {
        bench_progress("rep %u/%u: repair after the servers' return", rep + 1, x->o.reps);
        if (cl_repair_wait(x, job, ids, nids, vs, nvs, t_spawn, &r) < 0) {
            return -1;
        }
        cl_say_repair(x, rep,
                      nids == 1 ? "repair by the server back"
                                : "repair by the servers back",
                      &r, ids[0]);
        if (x->fig.nrepair < CL_MAX_REPS && r.done > 0) {
            x->fig.repair_dec[x->fig.nrepair][0] = r.decodes;
            x->fig.repair_dec[x->fig.nrepair][1] = r.decoded;
            x->fig.repair_gbs[x->fig.nrepair] = cl_repair_gbs(&r);
            x->fig.repair_prot[x->fig.nrepair++] = r.protected_s;
        }
    }
    if (rep + 1 < x->o.reps || nids == 0) {
        return 0;
    }
    cl_server_t *s = &x->srv[ids[0]];
    bench_progress("rep %u/%u: a replacement for server %u", rep + 1, x->o.reps, s->id);
    cl_server_kill(x, s);
    cl_server_wipe(s);
    double t0 = bench_now();
    if (cl_servers_respawn(x, ids, 1) != 0) {
        return -1;
    }
    if (cl_repair_wait(x, job, ids, 1, vs, nvs, t0, &r) < 0) {
        return -1;
    }
    char what[80];
    snprintf(what, sizeof(what), "replacement of server %u (empty arena and metadata)",
             s->id);
    cl_say_repair(x, rep, what, &r, s->id);
    x->fig.repl_gbs   = cl_repair_gbs(&r);
    x->fig.repl_dec[0] = r.decodes;
    x->fig.repl_dec[1] = r.decoded;
    x->fig.repl_prot  = r.protected_s;
    x->fig.repl_ok    = 1;
    return 0;
}
