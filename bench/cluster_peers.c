/*
 * DESIGN: the peers on the same objects: memcached, Redis and files in /dev/shm
 * store and read back the objects of one writer (writer 0's: the same sizes
 * and bytes), from this process over one connection, `reps` rounds after a
 * warm-up round (peers.c); their table and target rows.
 */
#include "cluster_int.h"

#include <math.h>
#include <string.h>

static const char *const cl_peer_ops[BENCH_NPEERS][2] = {
    {"peer_memcached_set", "peer_memcached_get"},
    {"peer_redis_set", "peer_redis_get"},
    {"peer_shm_write", "peer_shm_read"},
};

int cl_measure_peers(cl_ctx_t *x)
{
    bench_buf_t src, dst;
    char err[BENCH_ERR_LEN];
    uint64_t sizes[CL_MAX_OBJS];
    bench_peer_params_t pp;

    if (bench_buf_alloc(BENCH_MEM_THP, x->mix.bytes, &src, err, sizeof(err)) != 0) {
        fprintf(stderr, "ckstore-bench: peers: %s\n", err);
        return -1;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, x->mix.max + (1u << 20), &dst, err, sizeof(err)) !=
        0) {
        fprintf(stderr, "ckstore-bench: peers: %s\n", err);
        bench_buf_free(&src);
        return -1;
    }
    for (unsigned o = 0; o < x->mix.n; o++) {
        sizes[o] = x->mix.obj[o].size;
        cks_pattern_fill((uint8_t *)src.ptr + x->mix.obj[o].off, sizes[o], cl_obj_seed(0, o));
    }
    memset(&pp, 0, sizeof(pp));
    pp.src = src.ptr;
    pp.sizes = sizes;
    pp.nobj = x->mix.n;
    pp.dst = dst.ptr;
    pp.dst_len = dst.len;
    pp.reps = x->o.reps;
    pp.timeout_s = x->o.timeout_s;
    for (unsigned p = 0; p < BENCH_NPEERS; p++) {
        if (!(x->o.peers & (1u << p))) {
            continue;
        }
        x->peer_tried[p] = 1;
        if (bench_peer_run(&x->peer, p, &pp, &x->peerres[p]) != 0) {
            cl_say(x, "  peer %s: skipped: %s\n", bench_peer_name(p), x->peerres[p].note);
            continue;
        }
        cl_say(x, "  peer %s: %s\n", bench_peer_name(p), x->peerres[p].desc);
    }
    bench_buf_free(&dst);
    bench_buf_free(&src);
    return 0;
}

void cl_print_peers(cl_ctx_t *x, bench_report_t *rep)
{
    int any = 0;
    for (unsigned p = 0; p < BENCH_NPEERS; p++) {
        any |= x->peer_tried[p];
    }
    if (!any) {
        return;
    }
    cl_say(
        x,
        "\npeers, the same objects (writer 0's: %u objects, %.0f MiB, %s), one "
        "connection "
        "from this process, GB/s = 10^9 B/s, median of %u rounds after a warm-up round; "
        "ckstore: %u client%s, STORED and restore\n",
        x->mix.n, (double)x->mix.bytes / (1 << 20), x->mix.kind, x->o.reps, x->o.clients,
        x->o.clients > 1 ? "s" : "");
    cl_say(x, "%-20s %6s %6s %6s  %-16s %6s %8s %9s %9s\n", "op", "GB/s", "min", "max",
           "ckstore", "GB/s", "ck/peer", "srv CPU", "srv RSS");
    cl_say(x, "%-20s %6s %6s %6s  %-16s %6s %8s %9s %9s\n", "", "", "", "", "", "", "",
           "s/GB", "B/B");
    for (unsigned p = 0; p < BENCH_NPEERS; p++) {
        bench_peer_res_t *pr = &x->peerres[p];
        if (!x->peer_tried[p]) {
            continue;
        }
        if (!pr->ok) {
            cl_say(x, "%-20s skipped: %s\n", bench_peer_name(p), pr->note);
            continue;
        }
        for (unsigned d = 0; d < 2; d++) {
            bench_stats_t st;
            double ck = cl_ck_median(x, (int)d);
            double cpu =
                pr->server_cpu_s >= 0
                    ? pr->server_cpu_s / ((double)pr->bytes * pr->n / BENCH_GB) / 2
                    : NAN;
            double rss =
                pr->server_rss > 0 ? (double)pr->server_rss / (double)pr->bytes : NAN;
            bench_rec_t *r;
            cl_stats_of(pr->bytes, d ? pr->get_s : pr->set_s, pr->n, &st);
            cl_say(x, "%-20s %6.2f %6.2f %6.2f  %-16s %6.2f %7.2fx %9.3f %9.2f\n",
                   cl_peer_ops[p][d], st.median, st.min, st.max,
                   d ? "restore" : "snapshot STORED", ck, ck / st.median, cpu, rss);
            if ((r = bench_report_add(rep)) == NULL) {
                continue;
            }
            bench_rec_kv(r, KS("op", cl_peer_ops[p][d]), KU("objects", x->mix.n),
                         KU("size", x->mix.max), KU("bytes", pr->bytes),
                         KS("mix", x->mix.kind));
            cl_rec_stats(r, &st);
            bench_rec_kv(r, KU("connections", 1), KF("ckstore_gbps", ck),
                         KS("ckstore_op", d ? "restore" : "snapshot_stored"),
                         KF("ratio", ck / st.median), KF("server_cpu_s_per_gb", cpu),
                         KF("server_rss_per_byte", rss), KS("peer", pr->desc));
        }
    }
    cl_say(x, "ck/peer: ckstore's figure over the peer's; srv CPU: the peer server's CPU "
              "seconds "
              "per GB moved (set and get rounds together, halved); srv RSS: its resident "
              "memory "
              "holding one round's objects, per object byte\n");
}

/* The targets against the peers: ckstore's STORED and restore over the
 * peer's SET and GET. */
void cl_peer_targets(cl_ctx_t *x, bench_report_t *rep, double stored, double restore)
{
    char what[64];
    static const struct {
        unsigned peer;
        double target;
        const char *set, *get;
    } pt[] = {{BENCH_PEER_MEMCACHED, 3, "vs memcached SET (STORED)",
               "vs memcached GET (restore)"},
              {BENCH_PEER_REDIS, 10, "vs Redis SET (STORED)", "vs Redis GET (restore)"}};
    for (unsigned i = 0; i < 2; i++) {
        const bench_peer_res_t *pr = &x->peerres[pt[i].peer];
        bench_stats_t ps, pg;
        if (!pr->ok) {
            cl_say(x, "%-36s %9s  %s\n", pt[i].set, "-",
                   x->peer_tried[pt[i].peer] ? "not judged: the peer was skipped"
                                             : "not judged: the peer was not run");
            continue;
        }
        cl_stats_of(pr->bytes, pr->set_s, pr->n, &ps);
        cl_stats_of(pr->bytes, pr->get_s, pr->n, &pg);
        snprintf(what, sizeof(what), "%s SET, 1 connection", bench_peer_name(pt[i].peer));
        cl_target_row(x, rep, pt[i].set, stored, "GB/s", ps.median, what, pt[i].target, 1,
                      NULL);
        snprintf(what, sizeof(what), "%s GET, 1 connection", bench_peer_name(pt[i].peer));
        cl_target_row(x, rep, pt[i].get, restore, "GB/s", pg.median, what, pt[i].target,
                      1, NULL);
    }
}
