/*
 * DESIGN: `ckstore-bench cluster`, the erasure-coded cluster benchmark
 * (docs/BENCHMARKS_CLUSTER.md): the order of a run (processes first, then
 * the references, the measurements, the references again, the report) and
 * its record. The parts are in cluster_*.c (cluster_int.h lists them).
 * Threads: the parent's main thread does everything in the parent.
 * Never: use UCX in the parent before every fork that does not exec (the
 * raw sink, the workers); wait without a deadline; leave a process we
 * started running, or a file of ours in /dev/shm.
 */
#include "cluster_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Before any process starts: the server binary, the arena and whether it
 * all fits (--local), or the servers of the map (--cluster). 0 or -1. */
static int cl_prepare(cl_ctx_t *x)
{
    char line[1100];
    FILE *f;
    if (x->o.local > 0) {
        if (cl_find_server_bin(x) != 0) {
            return -1;
        }
        if (x->o.arena == 0) {
            x->o.arena = cl_arena_size(x);
        }
        return cl_check_memory(x);
    }
    snprintf(x->map, sizeof(x->map), "%s", x->o.map);
    if ((f = fopen(x->map, "r")) == NULL) {
        fprintf(stderr, "ckstore-bench: %s: %s\n", x->map, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        x->nmap += strncmp(line + strspn(line, " \t"), "server", 6) == 0;
    }
    fclose(f);
    return 0;
}

static void cl_say_machine(cl_ctx_t *x, bench_report_t *rep, double load_start)
{
    char sz[32];
    cl_say(x, "ckstore-bench cluster: %s, RS(%u,%u), %s chunks, %u client%s\n",
           x->o.local
               ? (x->o.hosts ? "local servers, each in a network namespace (--hosts)"
                             : "local servers")
               : x->o.map,
           x->o.k, x->o.m, bench_size_str(x->o.chunk, sz, sizeof(sz)), x->o.clients,
           x->o.clients > 1 ? "s" : "");
    cl_say(
        x,
        "machine: %s, %llu cores, %.1f GiB, %s, UCX %s; THP %s, shmem THP %s, /dev/shm "
        "huge=%s\n",
        bench_rec_get_str(&rep->machine, "cpu"),
        (unsigned long long)bench_rec_get_u64(&rep->machine, "cores"),
        (double)bench_rec_get_u64(&rep->machine, "memory_bytes") / (1ull << 30),
        bench_rec_get_str(&rep->machine, "kernel"),
        bench_rec_get_str(&rep->machine, "ucx_version"),
        bench_rec_get_str(&rep->machine, "thp_enabled"),
        bench_rec_get_str(&rep->machine, "shmem_thp_enabled"),
        bench_rec_get_str(&rep->machine, "dev_shm_huge"));
    if (load_start >= 0.5 * (double)bench_rec_get_u64(&rep->machine, "cores")) {
        cl_say(x,
               "NOTE: load average %.2f: other work is running, the figures will be "
               "disturbed\n",
               load_start);
    }
}

/* The processes, before any UCX in this one: the namespaces (--hosts), the
 * servers, the raw UCX sink, the workers. 0 or -1. */
static int cl_start(cl_ctx_t *x)
{
    char sz[32];
    cl_install_signals(x);
    if (x->o.hosts && cl_hosts_setup(x) != 0) {
        return -1;
    }
    if (x->o.local > 0) {
        double t0 = bench_now();
        if (cl_cluster_start(x, x->o.arena) != 0) {
            return -1;
        }
        cl_say(x, "%u servers up in %.1f s (arena %s each, map %s), pids", x->nsrv,
               bench_now() - t0, bench_size_str(x->o.arena, sz, sizeof(sz)), x->map);
        for (unsigned i = 0; i < x->nsrv; i++) {
            cl_say(x, " %d", (int)x->srv[i].pid);
        }
        cl_say(x, "\n");
    }
    if (!x->o.no_raw) {
        char err[BENCH_ERR_LEN];
        x->child.verbose = x->o.verbose;
        if (bench_child_start(&x->child, 64ull << 20, x->o.timeout_s, err, sizeof(err)) !=
            0) {
            fprintf(stderr, "ckstore-bench: the raw UCX sink did not start: %s\n", err);
            return -1;
        }
        x->have_child = 1;
        cl_install_signals(x); /* bench_child_start installed its own */
    }
    return cl_workers_start(x);
}

/* One pass of the references (before and after the cluster runs). */
static int cl_refs_pass(cl_ctx_t *x, const char *what)
{
    cl_say(x, "%s", what);
    if (cl_refs_isal(x) != 0) {
        return -1;
    }
    if (!x->o.no_raw) {
        cl_say(x, ", raw UCX");
        if (cl_refs_raw(x) != 0) {
            return -1;
        }
    }
    cl_say(x, "\n");
    return 0;
}

static int cl_measure(cl_ctx_t *x)
{
    if (cl_refs_pass(x, "\nreferences: ISA-L, memcpy") != 0) {
        return -1;
    }
    if (!x->o.pec_only) {
        cl_say(x, "snapshots and restores (%u reps):\n", x->o.reps);
        if (cl_measure_main(x) != 0) {
            return -1;
        }
    }
    if (!x->o.pec_only && x->o.peers != 0) {
        cl_say(x, "peers (the same objects):\n");
        if (cl_measure_peers(x) != 0) {
            return -1;
        }
    }
    if (x->o.pec) {
        cl_say(x, "partial-expert checkpoints:\n");
        if (cl_measure_pec(x) != 0) {
            return -1;
        }
    }
    return cl_refs_pass(x, "references again: ISA-L, memcpy");
}

static void cl_report(cl_ctx_t *x, bench_report_t *rep)
{
    cl_print_refs(x, rep);
    cl_rec_raw_best(x, rep);
    if (!x->o.pec_only) {
        cl_print_main(x, rep);
        cl_cw_print(x, rep); /* cold and warm, per phase */
        cl_print_figures(x, rep);
        cl_print_peers(x, rep);
    }
    if (x->o.pec) {
        cl_print_pec(x, rep);
    }
    if (!x->o.pec_only) {
        cl_print_targets(x, rep);
    }
    if (x->o.hosts && !x->o.pec_only) {
        cl_print_hosts(x, rep);
    }
    if (x->o.plot != NULL && !x->o.pec_only) {
        cl_plot_bars(x);
        cl_cw_plot(x); /* cold and warm, per phase */
    }
}

/* The run's record (the JSON's "run"). */
static void cl_record_run(const cl_ctx_t *x, bench_rec_t *run, double load_start,
                          double load_end)
{
    bench_rec_kv(run, KS("command", x->o.command), KS("mode", "cluster"),
                 KS("cluster", x->o.local ? (x->o.hosts ? "hosts" : "local") : x->o.map),
                 KU("hosts", (uint64_t)x->o.hosts), KU("servers", x->nmap),
                 KU("racks", x->o.local ? CL_RACKS : 0), KU("k", x->o.k), KU("m", x->o.m),
                 KU("chunk", x->o.chunk), KU("clients", x->o.clients),
                 KU("objects", x->o.objects), KS("mix", x->mix.kind),
                 KU("readers", x->o.readers), KU("versions", x->o.versions),
                 KU("size", x->o.size), KU("reps", x->o.reps), KU("window", x->o.window),
                 KU("encoders", x->o.encoders), KU("arena_bytes", x->o.arena),
                 KF("loadavg_start", load_start), KF("loadavg_end", load_end));
    if (x->o.pec) {
        bench_rec_kv(run, KU("pec_layers", x->o.pec_layers),
                     KU("pec_unit", x->o.pec_unit));
    }
    if (x->fig.ndown > 0) {
        char ids[32];
        if (x->fig.ndown > 1) {
            snprintf(ids, sizeof(ids), "%u,%u", x->fig.down_ids[0], x->fig.down_ids[1]);
        } else {
            snprintf(ids, sizeof(ids), "%u", x->fig.down_ids[0]);
        }
        bench_rec_str(run, "killed_servers", ids);
    }
}

/* Everything the run started, stopped; its files removed. */
static void cl_stop(cl_ctx_t *x)
{
    if (x->client != NULL) {
        cks_client_destroy(x->client);
        x->client = NULL;
    }
    cl_workers_stop(x);
    if (x->have_child) {
        bench_child_stop(&x->child, x->o.timeout_s);
        x->have_child = 0;
    }
    cl_servers_stop(x);
    cl_remove_files(x);
    if (x->net_up) {
        cks_test_netns_destroy(&x->net); /* leaves the client namespace first */
        x->net_up = 0;
    }
}

int cl_finish(const cl_ctx_t *x, bench_report_t *rep, int rc)
{
    if (rc == 0 && x->o.json != NULL) {
        if (bench_report_write_json(rep, x->o.json) != 0) {
            fprintf(stderr, "ckstore-bench: cannot write %s: %s\n", x->o.json,
                    strerror(errno));
            rc = 1;
        } else {
            cl_say(x, "\nresults written to %s\n", x->o.json);
        }
    }
    if (cl_shm_leftovers(x) != 0) {
        rc = 1;
    }
    bench_report_free(rep);
    return rc;
}

int cks_bench_cluster_main(int argc, char **argv)
{
    bench_report_t rep = {0};
    double load_start, load_end;
    cl_ctx_t *x = cl_ctx_new();
    int rc = 1;

    if (x == NULL) {
        fprintf(stderr, "ckstore-bench: out of memory\n");
        return 1;
    }
    if (cl_parse_opts(x, argc, argv) != 0) {
        cl_ctx_free(x);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (x->o.nsweep_clients + x->o.nsweep_servers + x->o.nsweep_sizes > 0) {
        rc = cl_sweep_main(x, &rep);
        cl_ctx_free(x);
        return rc;
    }
    if (cl_prepare(x) != 0) {
        cl_ctx_free(x);
        return 1;
    }
    bench_machine_describe(&rep.machine);
    load_start = bench_loadavg();
    cl_say_machine(x, &rep, load_start);
    if (cl_start(x) == 0 && cl_measure(x) == 0) {
        load_end = bench_loadavg();
        cl_report(x, &rep);
        cl_say(x, "load average: %.2f at the start, %.2f at the end\n", load_start,
               load_end);
        cl_record_run(x, &rep.run, load_start, load_end);
        rc = 0;
    }
    cl_stop(x);
    rc = cl_finish(x, &rep, rc);
    cl_ctx_free(x);
    return rc;
}
