/*
 * DESIGN: --hosts: the network namespaces (tools/netns: one per server, one for
 * the raw UCX sink, one for this process and its workers, joined by veth
 * pairs and a bridge; UCX held to TCP on each one's eth0, its veth end), the
 * eth0 counters read around each phase, and the report: the figures against
 * raw UCX over the same path, network bytes per object byte, CPU bounds.
 */
#include "cluster_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --hosts: eth0 counters of the client namespace (this thread is in it) and
 * of every server's (through a server's /proc/PID/net/dev); not ok while a
 * server is down. */
int cl_hosts_setup(cl_ctx_t *x)
{
    char why[256];
    if (cks_test_netns_create(&x->net, x->o.local + 1, why, sizeof(why)) != 0) {
        fprintf(stderr,
                "ckstore-bench: --hosts needs network namespaces (root and "
                "iproute2's ip netns): %s\n",
                why);
        return -1;
    }
    x->net_up = 1;
    /* namespaces separate networks, not memory: without this UCX would
     * still move bytes through shared memory or CMA between them */
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "eth0", 1);
    /* this thread, the workers forked from it and the threads they make */
    if (cks_test_netns_enter_client(&x->net) != 0) {
        return -1;
    }
    snprintf(x->child.netns, sizeof(x->child.netns), "%s", x->net.host[x->o.local]);
    cl_say(x,
           "hosts: client %s (this process and its clients), servers %s .. %s, raw UCX "
           "sink %s; UCX_TLS=tcp UCX_NET_DEVICES=eth0\n",
           x->net.client_addr, x->net.host_addr[0], x->net.host_addr[x->o.local - 1],
           x->net.host_addr[x->o.local]);
    return 0;
}

static const char *const cl_net_phase[CL_NET_N] = {
    "snapshot (to PROTECTED)", "restore, warm", "restore, cold (fresh process)"};

int cl_net_read(const cl_ctx_t *x, cl_netctr_t *c)
{
    memset(c, 0, sizeof(*c));
    if (cks_test_netns_eth0_bytes(&c->cli_rx, &c->cli_tx) != 0) {
        return -1;
    }
    for (unsigned i = 0; i < x->nsrv; i++) {
        uint64_t rx, tx;
        if (x->srv[i].pid <= 0 ||
            cks_test_netns_eth0_bytes_of(x->srv[i].pid, &rx, &tx) != 0) {
            return -1;
        }
        c->srv_rx += rx;
        c->srv_tx += tx;
    }
    c->ok = 1;
    return 0;
}

void cl_net_account(cl_ctx_t *x, unsigned kind, uint64_t obj_bytes)
{
    cl_netctr_t now;
    if (!x->o.hosts || !x->net_go.ok || cl_net_read(x, &now) != 0) {
        return;
    }
    x->netacc[kind].obj += obj_bytes;
    x->netacc[kind].cli_tx += now.cli_tx - x->net_go.cli_tx;
    x->netacc[kind].cli_rx += now.cli_rx - x->net_go.cli_rx;
    x->netacc[kind].srv_tx += now.srv_tx - x->net_go.srv_tx;
    x->netacc[kind].srv_rx += now.srv_rx - x->net_go.srv_rx;
    x->netacc[kind].n++;
}

/* What the CPU allows: all the "hosts" share this machine's cores, so every
 * byte on the network costs CPU time of the same cores (the TCP copies in
 * the kernel on both sides, UCX's own copies), and a figure is bounded by
 * cores / (CPU seconds per GB). */
static void cl_hosts_cpu_row(cl_ctx_t *x, bench_rec_t *r, const char *what,
                             const char *key, double cpu, double gbps, double cores)
{
    cl_say(x, "  %-44s %8.3f %10.2f %10.2f %8.2f\n", what, cpu, cores / cpu, gbps,
           gbps / (cores / cpu));
    if (r != NULL) {
        bench_rec_f64(r, key, cpu); /* key: a string literal */
    }
}

void cl_print_hosts(cl_ctx_t *x, bench_report_t *rep)
{
    char put_what[40], get_what[40], what[80];
    double raw_put = cl_raw_best(x, BENCH_DIR_PUT, put_what, sizeof(put_what));
    double raw_get = cl_raw_best(x, BENCH_DIR_GET, get_what, sizeof(get_what));
    double kfrac = (double)x->o.k / (x->o.k + x->o.m);
    double cold = x->cw.nfresh > 0
                      ? cl_cw_gbps(x, cl_cw_median_from(x->cw.fresh_s, 0, x->cw.nfresh))
                      : NAN;
    bench_stats_t st;
    unsigned met0 = x->targets_met, judged0 = x->targets_judged;

    cl_say(x,
           "\nacross hosts: %u servers, the clients and the raw UCX sink in %u network "
           "namespaces "
           "joined by veth pairs and a bridge; UCX_TLS=%s, UCX_NET_DEVICES=%s in each "
           "(eth0 there is its veth end)\n",
           x->nsrv, (unsigned)x->net.nhosts + 1, getenv("UCX_TLS"),
           getenv("UCX_NET_DEVICES"));
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        if (x->refs.raw_tls[s][0] != '\0') {
            cl_say(x, "raw UCX over that path (%s buffers): lanes %s\n",
                   bench_setup_name(s), x->refs.raw_tls[s]);
        }
    }
    cl_say(x, "%-36s %9s %-5s %-28s %8s %6s  %s\n", "figure", "value", "unit",
           "reference", "ref", "ratio", "target");
    snprintf(what, sizeof(what), "raw UCX put (%s)", put_what);
    cl_target_row(x, rep, "hosts: snapshot STORED", cl_ck_median(x, 0), "GB/s", raw_put,
                  what, 0.8, 1, NULL);
    cl_stats_of(x->fig.bytes, x->fig.prot, x->fig.nsnap, &st);
    snprintf(what, sizeof(what), "raw UCX put x k/(k+m)");
    cl_target_row(x, rep, "hosts: snapshot PROTECTED", st.median, "GB/s", raw_put * kfrac,
                  what, 0.8, 1, NULL);
    snprintf(what, sizeof(what), "raw UCX get (%s)", get_what);
    cl_target_row(x, rep, "hosts: restore, warm", cl_ck_median(x, 1), "GB/s", raw_get,
                  what, 0.8, 1, NULL);
    cl_target_row(x, rep, "hosts: restore, cold (fresh process)", cold, "GB/s", raw_get,
                  what, 0.8, 1, NULL);
    cl_say(x, "across hosts, targets met: %u of %u judged\n", x->targets_met - met0,
           x->targets_judged - judged0);

    /* bytes on the wire per object byte */
    double snap_min = 1.0 + (double)(x->o.k + x->o.m) / x->o.k * (1.0 - 1.0 / x->nsrv);
    cl_say(x,
           "\nnetwork bytes per object byte (eth0 counters of every namespace, TCP/IP "
           "headers "
           "and acknowledgements included; payload if each chunk crosses once: snapshot "
           "1 + (k+m)/k x (1 - 1/N) = %.2f, restore 1.00)\n",
           snap_min);
    cl_say(x, "%-30s %4s %10s %14s %14s %14s %8s %8s\n", "phase", "n", "object",
           "client->srv", "srv->srv", "srv->client", "total", "payload");
    for (unsigned k = 0; k < CL_NET_N; k++) {
        double obj = (double)x->netacc[k].obj;
        double c2s, s2s, s2c, tot, least = k == CL_NET_SNAP ? snap_min : 1.0;
        char sz[32];
        bench_rec_t *r;
        if (x->netacc[k].n == 0 || obj <= 0) {
            cl_say(x, "%-30s %4u  not measured (a server was down, or no such phase)\n",
                   cl_net_phase[k], 0u);
            continue;
        }
        c2s = (double)x->netacc[k].cli_tx / obj;
        s2c = (double)x->netacc[k].cli_rx / obj;
        /* what the servers sent and the client did not receive went to servers */
        s2s = ((double)x->netacc[k].srv_tx - (double)x->netacc[k].cli_rx) / obj;
        tot = ((double)x->netacc[k].cli_tx + (double)x->netacc[k].srv_tx) / obj;
        cl_say(x, "%-30s %4u %10s %14.3f %14.3f %14.3f %8.3f %8.2f\n", cl_net_phase[k],
               x->netacc[k].n,
               bench_size_str(x->netacc[k].obj / x->netacc[k].n, sz, sizeof(sz)), c2s,
               s2s, s2c, tot, least);
        if ((r = bench_report_add(rep)) == NULL) {
            continue;
        }
        cl_rec_common(x, r, "hosts_net_bytes");
        bench_rec_kv(r, KS("phase", cl_net_phase[k]), KU("phases", x->netacc[k].n),
                     KU("object_bytes", x->netacc[k].obj),
                     KU("client_tx_bytes", x->netacc[k].cli_tx),
                     KU("client_rx_bytes", x->netacc[k].cli_rx),
                     KU("servers_tx_bytes", x->netacc[k].srv_tx),
                     KU("servers_rx_bytes", x->netacc[k].srv_rx),
                     KF("client_to_servers_per_byte", c2s),
                     KF("servers_to_servers_per_byte", s2s),
                     KF("servers_to_client_per_byte", s2c), KF("total_per_byte", tot),
                     KF("payload_per_byte", least));
    }
    {
        double mn, srv_snap, cli_snap, srv_rest, cli_rest, mx;
        double cores = (double)sysconf(_SC_NPROCESSORS_ONLN);
        bench_stats_t ps;
        bench_rec_t *r = bench_report_add(rep);
        cl_vstats(x->fig.srv_cpu_snap, x->fig.ncpu_snap, &mn, &srv_snap, &mx);
        cl_vstats(x->fig.cli_cpu_snap, x->fig.ncpu_snap, &mn, &cli_snap, &mx);
        cl_vstats(x->fig.srv_cpu_restore[0], x->fig.ncpu_restore[0], &mn, &srv_rest, &mx);
        cl_vstats(x->fig.cli_cpu_restore[0], x->fig.ncpu_restore[0], &mn, &cli_rest, &mx);
        cl_stats_of(x->fig.bytes, x->fig.prot, x->fig.nsnap, &ps);
        cl_say(x,
               "\nwhat the CPU allows: every namespace runs on this machine's %.0f "
               "cores, so each "
               "byte on the network costs their time (TCP copies in the kernel on both "
               "sides, "
               "UCX's copies); CPU seconds per GB of object bytes (utime + stime of the "
               "processes "
               "of the phase, medians; softirq time charged to no process is missed)\n",
               cores);
        cl_say(x, "  %-44s %8s %10s %10s %8s\n", "", "CPU s/GB", "cores/that", "measured",
               "ratio");
        if (r != NULL) {
            cl_rec_common(x, r, "hosts_cpu");
            bench_rec_f64(r, "cores", cores);
        }
        cl_hosts_cpu_row(x, r, "raw UCX put (driver + sink)", "raw_put_cpu_s_per_gb",
                         cl_raw_best_cpu(x, BENCH_DIR_PUT), raw_put, cores);
        cl_hosts_cpu_row(x, r, "snapshot to PROTECTED (servers + clients)",
                         "snapshot_cpu_s_per_gb", srv_snap + cli_snap, ps.median, cores);
        cl_say(x, "  %-44s %8.3f (servers) + %.3f (clients)\n", "", srv_snap, cli_snap);
        cl_hosts_cpu_row(x, r, "raw UCX get (driver + sink)", "raw_get_cpu_s_per_gb",
                         cl_raw_best_cpu(x, BENCH_DIR_GET), raw_get, cores);
        cl_hosts_cpu_row(x, r, "restore, warm (servers + clients)",
                         "restore_cpu_s_per_gb", srv_rest + cli_rest, cl_ck_median(x, 1),
                         cores);
        cl_say(x, "  %-44s %8.3f (servers) + %.3f (clients)\n", "", srv_rest, cli_rest);
    }
    {
        bench_rec_t *r = bench_report_add(rep);
        if (r != NULL) {
            cl_rec_common(x, r, "hosts_raw_ucx");
            bench_rec_kv(r, KF("put_gbps", raw_put), KS("put_best_of", put_what),
                         KF("get_gbps", raw_get), KS("get_best_of", get_what),
                         KF("put_x_k_over_k_plus_m_gbps", raw_put * kfrac),
                         KS("ucx_tls", getenv("UCX_TLS") ? getenv("UCX_TLS") : ""),
                         KS("ucx_net_devices",
                            getenv("UCX_NET_DEVICES") ? getenv("UCX_NET_DEVICES") : ""),
                         KU("namespaces", x->net.nhosts + 1));
        }
    }
}
