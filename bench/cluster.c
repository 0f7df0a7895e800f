/*
 * DESIGN: `ckstore-bench cluster`, the erasure-coded cluster benchmark
 * (docs/BENCHMARKS_CLUSTER.md). Owns:
 *   - the local cluster: N ckstore-server processes (fork + exec of the
 *     binary next to ours) on 127.0.0.1, ports picked at run time, N nodes
 *     in 3 racks, arenas in /dev/shm named after our pid, LMDB in a mkdtemp
 *     directory; started by waiting for each one's "listening" line on a
 *     pipe, killed by pid (SIGKILL) to measure degraded restores, restarted
 *     on the same arena and metadata, stopped by pid (SIGTERM, then SIGKILL)
 *     and their files removed, whatever happens;
 *   - the client processes: C forked workers, each with its own libckstore
 *     client, told what to do over a pipe (two phases: READY, then GO, so
 *     that all start together) and answering with their timestamps
 *     (CLOCK_MONOTONIC is one clock for every process of the machine);
 *   - the references of the same run: raw ISA-L encode / decode of the same
 *     RS(k, m) and chunk size (coding/cks_coding.h), a one-thread memcpy,
 *     and raw UCX between this process and a forked sink (embedded.c,
 *     raw_ucx.c), plus the PEC (partial-expert checkpoint) comparison;
 *   - the printed tables and the records (report.c writes the JSON);
 *   - with --hosts, the network namespaces (tools/netns: one per server, one
 *     for the raw UCX sink, one for this process and its workers, joined by
 *     veth pairs and a bridge; UCX held to TCP on each one's eth0, its veth
 *     end), the fresh processes that make the cold restores (forked at the
 *     start, each used once), and the eth0 counters read around each phase.
 *     The namespaces are removed at exit, also from the signal handler.
 *
 * Threads: the parent's main thread does everything in the parent; each
 * worker's main thread drives its client (libckstore runs its own progress
 * thread and calls our completion callbacks there; they only count).
 * Never: use UCX in the parent before every fork that does not exec (the
 * raw sink, the workers); wait without a deadline; leave a process we
 * started running, or a file of ours in /dev/shm.
 */
#include "cluster.h"
#include "bench.h"
#include "ckstore.h"
#include "cks_coding.h"
#include "cks_netns.h"
#include "peers.h"
#include "plot.h"
#include "proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CL_MAX_SERVERS 64
#define CL_MAX_CLIENTS 32
#define CL_MAX_REPS    100
#define CL_MAX_DOWN    2
#define CL_RACKS       3
/* targets of the issue (docs/BENCHMARKS_CLUSTER.md) */
#define CL_TARGET_ENCODE   0.8
#define CL_TARGET_RESTORE  0.8
#define CL_TARGET_DEGRADED 0.5
/* PEC's published checkpoint-size reduction for 8 experts (see the docs) */
#define CL_PEC_PUBLISHED_8 0.542
/* synthetic MoE layout, in units of d^2 parameters per MoE layer (docs) */
#define CL_PEC_DENSE_UNITS \
    20 /* attention of 2 layers 8, dense FFN 8, embedding share 4 */
#define CL_PEC_EXPERT_UNITS 8 /* one expert FFN: 2 x d x 4d */
#define CL_PEC_OPT_FACTOR   6 /* Adam: fp32 master + m + v = 12 B/param vs 2 B of bf16 */
#define CL_PEC_MAX_OBJS     4096
#define CL_RAW_BUDGET_S     2.0
#define CL_MAX_SWEEP        16
/* --hosts: restores by fresh processes, forked at the start (reps x readers) */
#define CL_MAX_COLD 32
#define CL_MAX_SLOTS (CL_MAX_CLIENTS + CL_MAX_COLD)

/* ---- options ----------------------------------------------------------------------- */

typedef struct {
    unsigned local;  /* servers to start; 0 with --cluster */
    const char *map; /* --cluster: map of a running cluster */
    const char *server_bin;
    unsigned k, m;
    uint64_t chunk;
    unsigned clients;
    uint64_t size;
    unsigned objects;
    unsigned reps;
    unsigned window;
    unsigned encoders;
    uint64_t arena; /* per server; 0: computed */
    int arena_given;
    const char *repair_rate; /* --repair-rate for the servers; NULL: their default */
    int stage_host; /* --stage-host: writers' puts staged through a ring that holds
                       a writer's snapshot (CKS_PUT_FIELD_STAGED); stall = COPIED */
    const char *json;
    int quiet, verbose, no_raw, no_degraded, pec, pec_only;
    unsigned pec_k; /* 0: E/4 */
    unsigned pec_layers;
    uint64_t pec_unit; /* bytes of bf16 parameters per d^2 unit */
    unsigned raw_setups;
    bench_mem_kind_t client_mem; /* the clients' main buffers: BENCH_MEM_CKS or _THP */
    double timeout_s;
    char command[1024];
    const char *mix;       /* --mix: uniform, moe */
    unsigned readers;      /* client processes that restore (--readers; = clients) */
    unsigned versions;     /* snapshots written and kept per repetition */
    double pec_fraction;   /* experts saved per layer as a share of E (0: pec_k) */
    unsigned peers;        /* mask of bench_peer_t to measure */
    const char *plot;      /* --plot DIR */
    /* --sweep-clients, --sweep-servers, --sweep-sizes */
    unsigned sweep_clients[CL_MAX_SWEEP], nsweep_clients;
    unsigned sweep_servers[CL_MAX_SWEEP], nsweep_servers;
    uint64_t sweep_sizes[CL_MAX_SWEEP];
    unsigned nsweep_sizes;
    int hosts; /* --hosts: each server and the clients in network namespaces of their own */
} cl_opts_t;

static cl_opts_t opts;

#define say(...)                   \
    do {                           \
        if (!opts.quiet) {         \
            bench_progress_clear(); \
            printf(__VA_ARGS__);   \
            fflush(stdout);        \
        }                          \
    } while (0)

/* ---- process state (also read by the signal handler) ------------------------------ */

typedef struct {
    unsigned id;
    uint16_t port;
    volatile pid_t pid;
    int out_fd; /* read end of its stdout */
    char arena[128];
    char ddir[160];
    char log[160];
    char netns_path[128]; /* --hosts: /run/netns/NAME of its namespace; "": ours */
} cl_server_t;

static struct {
    cl_server_t srv[CL_MAX_SERVERS];
    unsigned nsrv; /* servers we started (0 with --cluster) */
    unsigned nmap; /* servers in the map */
    char dir[64];  /* mkdtemp: map, logs, data dirs */
    char map[128]; /* the map file clients and servers read */
    char bin[PATH_MAX];
    /* slots 0 .. nreg-1: the workers; then, with --hosts, the cold ones
     * (fresh processes, each restoring once) */
    volatile pid_t worker[CL_MAX_SLOTS];
    int wcmd[CL_MAX_SLOTS], wres[CL_MAX_SLOTS];
    unsigned nworkers, nreg;
    bench_child_t child; /* raw UCX sink (+ a standalone server we do not use) */
    volatile int have_child;
} cl;

/* --hosts: the namespaces (tools/netns): host i for server i, host nsrv for
 * the raw UCX sink, the client namespace for this process and its workers */
static cks_test_netns_t cl_net;
static volatile int cl_net_up;

/* ---- small helpers --------------------------------------------------------------------
 */

static uint64_t cl_mem_available(void)
{
    char line[256];
    unsigned long long kb = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return (uint64_t)kb << 10;
}

static uint64_t cl_shm_free(void)
{
    struct statvfs vfs;
    return statvfs("/dev/shm", &vfs) == 0 ? (uint64_t)vfs.f_bavail * vfs.f_frsize : 0;
}

static double cl_gib(uint64_t b)
{
    return (double)b / (double)(1ull << 30);
}

static double cl_median(double *v, unsigned n)
{
    bench_stats_t st;
    /* bench_stats gives bytes/s of a time; use 1 GB to get 1/t, then invert */
    if (n == 0) {
        return NAN;
    }
    bench_stats((uint64_t)BENCH_GB, v, n, &st);
    return 1.0 / st.median;
}

static volatile pid_t cl_sweep_pid; /* the sweep point running now (a child) */

/* ---- cleanup and signals
 * ------------------------------------------------------------------ */

/* Only unlink/rmdir/kill: also runs in the signal handler. */
static void cl_remove_files(void)
{
    static const char *const md_files[] = {"data.mdb", "lock.mdb"};
    char path[256];
    for (unsigned i = 0; i < cl.nsrv; i++) {
        cl_server_t *s = &cl.srv[i];
        if (s->arena[0] != '\0') {
            unlink(s->arena);
        }
        if (s->ddir[0] != '\0') {
            for (unsigned f = 0; f < 2; f++) {
                snprintf(path, sizeof(path), "%s/%s", s->ddir, md_files[f]);
                unlink(path);
            }
            rmdir(s->ddir);
        }
        if (s->log[0] != '\0') {
            unlink(s->log);
        }
    }
    if (cl.map[0] != '\0' && cl.dir[0] != '\0') {
        unlink(cl.map);
    }
    if (cl.dir[0] != '\0') {
        rmdir(cl.dir);
    }
}

static void cl_kill_all(void)
{
    for (unsigned i = 0; i < cl.nworkers; i++) {
        if (cl.worker[i] > 0) {
            kill(cl.worker[i], SIGKILL);
        }
    }
    for (unsigned i = 0; i < cl.nsrv; i++) {
        if (cl.srv[i].pid > 0) {
            kill(cl.srv[i].pid, SIGKILL);
        }
    }
    if (cl.have_child && cl.child.pid > 0) {
        kill(cl.child.pid, SIGKILL);
    }
    bench_peer_kill(); /* memcached or redis-server, the /dev/shm peer's files */
    if (cl_sweep_pid > 0) {
        kill(cl_sweep_pid, SIGTERM); /* its own handler stops what it started */
    }
}

static void cl_on_signal(int sig)
{
    cl_kill_all();
    if (cl_sweep_pid > 0) {
        waitpid(cl_sweep_pid, NULL, 0);
    }
    for (unsigned i = 0; i < cl.nworkers; i++) {
        if (cl.worker[i] > 0) {
            waitpid(cl.worker[i], NULL, 0);
        }
    }
    for (unsigned i = 0; i < cl.nsrv; i++) {
        if (cl.srv[i].pid > 0) {
            waitpid(cl.srv[i].pid, NULL, 0);
        }
    }
    if (cl.have_child && cl.child.pid > 0) {
        waitpid(cl.child.pid, NULL, 0);
        if (cl.child.arena[0] != '\0') {
            unlink(cl.child.arena);
        }
    }
    cl_remove_files();
    if (cl_net_up) {
        cks_test_netns_remove_now(&cl_net); /* every process in them is gone */
    }
    _exit(128 + sig);
}

static void cl_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = cl_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a dead peer shows as EPIPE */
}

/* ---- the local cluster
 * -------------------------------------------------------------------- */

static int cl_find_server_bin(void)
{
    return bench_find_server_bin(opts.server_bin, cl.bin);
}

/* Free TCP ports on 127.0.0.1 for the servers (released just before they
 * start). */
static int cl_pick_ports(unsigned n)
{
    uint16_t ports[CL_MAX_SERVERS];
    if (bench_free_ports(n, ports) != 0) {
        return -1;
    }
    for (unsigned i = 0; i < n; i++) {
        cl.srv[i].port = ports[i];
    }
    return 0;
}

static void cl_print_log(const cl_server_t *s)
{
    char buf[4096];
    size_t n;
    FILE *f = fopen(s->log, "r");
    if (f == NULL) {
        return;
    }
    fprintf(stderr, "--- server %u's log (%s) ---\n", s->id, s->log);
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        fwrite(buf, 1, n, stderr);
    }
    fclose(f);
}

/* fork + exec one server; its stdout comes back on a pipe, its stderr goes to
 * its log file (ours with --verbose). Also used to restart a killed server:
 * the same command line, the same arena file and data dir. */
static int cl_server_spawn(cl_server_t *s, uint64_t arena)
{
    char id[16], asize[32], enc[16];
    char *argv[24];
    int out[2], logfd, n = 0;
    pid_t parent = getpid();

    snprintf(id, sizeof(id), "%u", s->id);
    snprintf(asize, sizeof(asize), "%lluM", (unsigned long long)(arena >> 20));
    snprintf(enc, sizeof(enc), "%u", opts.encoders);
    argv[n++] = cl.bin;
    argv[n++] = "--cluster";
    argv[n++] = cl.map;
    argv[n++] = "--id";
    argv[n++] = id;
    argv[n++] = "--arena-size";
    argv[n++] = asize;
    argv[n++] = "--arena-file";
    argv[n++] = s->arena;
    argv[n++] = "--data-dir";
    argv[n++] = s->ddir;
    argv[n++] = "--encoders";
    argv[n++] = enc;
    argv[n++] = "--log-level";
    argv[n++] = opts.verbose ? "info" : "warn";
    if (opts.repair_rate != NULL) {
        argv[n++] = "--repair-rate";
        argv[n++] = (char *)opts.repair_rate;
    }
    argv[n] = NULL;

    if (pipe2(out, O_CLOEXEC) != 0) {
        fprintf(stderr, "ckstore-bench: pipe: %s\n", strerror(errno));
        return -1;
    }
    logfd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd < 0) {
        fprintf(stderr, "ckstore-bench: %s: %s\n", s->log, strerror(errno));
        close(out[0]);
        close(out[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ckstore-bench: fork: %s\n", strerror(errno));
        close(out[0]);
        close(out[1]);
        close(logfd);
        return -1;
    }
    if (pid == 0) {
        /* only async-signal-safe calls until exec */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) {
            _exit(127);
        }
        dup2(out[1], STDOUT_FILENO);
        if (!opts.verbose) {
            dup2(logfd, STDERR_FILENO);
        }
        syscall(SYS_close_range, 3u, ~0u, 0u); /* UCX's and our descriptors */
        if (s->netns_path[0] != '\0') {
            /* its "host" (--hosts): a network namespace of its own */
            int nsfd = open(s->netns_path, O_RDONLY | O_CLOEXEC);
            if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) {
                static const char msg[] = "ckstore-bench: cannot enter the server's network "
                                          "namespace\n";
                ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
                (void)w;
                _exit(126);
            }
            close(nsfd);
        }
        signal(SIGPIPE, SIG_DFL);
        execv(cl.bin, argv);
        _exit(127);
    }
    close(out[1]);
    close(logfd);
    s->out_fd = out[0];
    s->pid = pid;
    return 0;
}

/* Wait for the server's "listening" line (before the deadline). */
static int cl_server_wait(cl_server_t *s, double deadline)
{
    char buf[512];
    size_t used = 0;
    while (used < sizeof(buf) - 1) {
        double left = deadline - bench_now();
        struct pollfd pf = {.fd = s->out_fd, .events = POLLIN};
        int r = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            fprintf(stderr,
                    "ckstore-bench: server %u (pid %d) did not say \"listening\" in "
                    "time\n",
                    s->id, (int)s->pid);
            cl_print_log(s);
            return -1;
        }
        ssize_t got = read(s->out_fd, buf + used, sizeof(buf) - 1 - used);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            fprintf(stderr,
                    "ckstore-bench: server %u (pid %d) ended before it listened\n", s->id,
                    (int)s->pid);
            cl_print_log(s);
            return -1;
        }
        used += (size_t)got;
        buf[used] = '\0';
        if (strstr(buf, "listening") != NULL) {
            return 0;
        }
    }
    fprintf(stderr, "ckstore-bench: server %u: unexpected output: %s\n", s->id, buf);
    return -1;
}

/* SIGKILL, and reap (bounded). */
static void cl_server_kill(cl_server_t *s)
{
    if (s->pid <= 0) {
        return;
    }
    kill(s->pid, SIGKILL);
    if (!bench_wait_pid(s->pid, opts.timeout_s, NULL)) {
        fprintf(stderr,
                "ckstore-bench: server %u (pid %d) did not die within %.0f s of "
                "SIGKILL\n",
                s->id, (int)s->pid, opts.timeout_s);
    }
    s->pid = 0;
    if (s->out_fd >= 0) {
        close(s->out_fd);
        s->out_fd = -1;
    }
}

/* SIGTERM to all, wait, SIGKILL the ones left. */
static void cl_servers_stop(void)
{
    for (unsigned i = 0; i < cl.nsrv; i++) {
        if (cl.srv[i].pid > 0) {
            kill(cl.srv[i].pid, SIGTERM);
        }
    }
    for (unsigned i = 0; i < cl.nsrv; i++) {
        cl_server_t *s = &cl.srv[i];
        int wstatus = 0;
        if (s->pid <= 0) {
            continue;
        }
        if (!bench_wait_pid(s->pid, opts.timeout_s, &wstatus)) {
            fprintf(stderr,
                    "ckstore-bench: server %u (pid %d) did not stop within %.0f s of "
                    "SIGTERM: killed\n",
                    s->id, (int)s->pid, opts.timeout_s);
            cl_server_kill(s);
            continue;
        }
        if (!(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
            fprintf(stderr, "ckstore-bench: server %u ended with status 0x%x\n", s->id,
                    wstatus);
            cl_print_log(s);
        }
        s->pid = 0;
        close(s->out_fd);
        s->out_fd = -1;
    }
}

static int cl_cluster_start(uint64_t arena)
{
    FILE *f;
    double deadline;

    snprintf(cl.dir, sizeof(cl.dir), "/tmp/ckstore-bench-cl-XXXXXX");
    if (mkdtemp(cl.dir) == NULL) {
        fprintf(stderr, "ckstore-bench: mkdtemp: %s\n", strerror(errno));
        cl.dir[0] = '\0';
        return -1;
    }
    cl.nsrv = cl.nmap = opts.local;
    for (unsigned i = 0; i < cl.nsrv; i++) {
        cl_server_t *s = &cl.srv[i];
        s->id = i;
        s->out_fd = -1;
        snprintf(s->arena, sizeof(s->arena), "/dev/shm/ckstore-bench-cl-%d-%u.arena",
                 (int)getpid(), i);
        snprintf(s->ddir, sizeof(s->ddir), "%s/md%u", cl.dir, i);
        snprintf(s->log, sizeof(s->log), "%s/server%u.log", cl.dir, i);
        s->netns_path[0] = '\0';
        if (opts.hosts) {
            snprintf(s->netns_path, sizeof(s->netns_path), "/run/netns/%s", cl_net.host[i]);
        }
        unlink(s->arena); /* a stale one of an earlier process with this pid */
    }
    if (cl_pick_ports(cl.nsrv) != 0) {
        fprintf(stderr, "ckstore-bench: cannot find %u free ports\n", cl.nsrv);
        return -1;
    }
    snprintf(cl.map, sizeof(cl.map), "%s/cluster.map", cl.dir);
    if ((f = fopen(cl.map, "w")) == NULL) {
        fprintf(stderr, "ckstore-bench: %s: %s\n", cl.map, strerror(errno));
        return -1;
    }
    fprintf(f,
            "# ckstore-bench cluster: %u servers on this machine%s, %u nodes in %u racks\n",
            cl.nsrv, opts.hosts ? " (each in a network namespace of its own)" : "", cl.nsrv,
            CL_RACKS);
    fprintf(f, "epoch 1\n");
    for (unsigned i = 0; i < cl.nsrv; i++) {
        fprintf(f, "server %u %s:%u node=n%u rack=r%u\n", i,
                opts.hosts ? cl_net.host_addr[i] : "127.0.0.1", cl.srv[i].port, i,
                i % CL_RACKS);
    }
    if (fclose(f) != 0) {
        return -1;
    }
    for (unsigned i = 0; i < cl.nsrv; i++) {
        if (cl_server_spawn(&cl.srv[i], arena) != 0) {
            return -1;
        }
    }
    /* they pre-fault their arenas in parallel; one deadline for all */
    deadline = bench_now() + opts.timeout_s + (double)cl.nsrv * 2;
    for (unsigned i = 0; i < cl.nsrv; i++) {
        if (cl_server_wait(&cl.srv[i], deadline) != 0) {
            return -1;
        }
    }
    return 0;
}

/* ---- PEC layout (shared by the parent and the workers)
 * ------------------------------------ */

typedef struct {
    char key[64];
    cks_tags_t tags;
    uint64_t size;
    int32_t layer, expert; /* expert -1: dense */
} cl_pobj_t;

static uint64_t cl_pec_expert_bytes(int optim)
{
    return CL_PEC_EXPERT_UNITS * opts.pec_unit * (optim ? CL_PEC_OPT_FACTOR : 1);
}

static uint64_t cl_pec_dense_bytes(int optim)
{
    return CL_PEC_DENSE_UNITS * opts.pec_unit * (optim ? CL_PEC_OPT_FACTOR : 1);
}

static void cl_pec_params(unsigned experts, unsigned ranks, cks_pec_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->field_mask = CKS_PEC_FIELD_RANKS;
    p->layers = opts.pec_layers;
    p->experts = experts;
    p->per_step = opts.pec_k ? opts.pec_k : (experts / 4 ? experts / 4 : 1);
    if (opts.pec_fraction > 0) {
        unsigned k = (unsigned)(opts.pec_fraction * experts + 0.5);
        p->per_step = k < 1 ? 1 : k > experts ? experts : k;
    }
    p->ranks = ranks;
}

/* The objects rank `rank` of `ranks` holds: per layer its shard of the dense
 * part (params, optimizer state; ZeRO-like: 1/ranks each) and the params and
 * optimizer state of its experts (contiguous blocks, cks_pec_expert_rank). */
static size_t cl_pec_layout(unsigned experts, unsigned rank, unsigned ranks,
                            cl_pobj_t *out)
{
    cks_pec_params_t p;
    size_t n = 0;
    cl_pec_params(experts, ranks, &p);
    for (unsigned l = 0; l < opts.pec_layers; l++) {
        for (int opt = 0; opt < 2; opt++) {
            if (out != NULL && n < CL_PEC_MAX_OBJS) {
                cl_pobj_t *o = &out[n];
                snprintf(o->key, sizeof(o->key), "layer%02u/dense/%s/rank%u", l,
                         opt ? "optim" : "params", rank);
                o->tags = (cks_tags_t){opt ? CKS_KIND_OPTIMIZER : CKS_KIND_DENSE,
                                       (int32_t)l, CKS_TAG_NONE, (int32_t)rank};
                o->size = (cl_pec_dense_bytes(opt) / ranks + 4095) & ~4095ull;
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
                    o->size = cl_pec_expert_bytes(opt);
                    o->layer = (int32_t)l;
                    o->expert = (int32_t)e;
                }
                n++;
            }
        }
    }
    return n;
}

/* Arena bytes an object of `size` takes in the cluster: whole stripes of k
 * data chunks (the last one zero-padded) and m parity chunks. */
static uint64_t cl_stored_bytes(uint64_t size)
{
    return cks_ec_stripe_count(size, opts.k, opts.chunk) * (opts.k + opts.m) * opts.chunk;
}

/* Bytes of the whole model (all ranks), of the largest rank, and what the
 * model takes in the arenas; with `delta`, only what one partial-expert
 * version writes (dense, and K experts per layer, counted as experts 0..K-1
 * of rank 0's share: the sizes are the same whichever are chosen). */
static uint64_t cl_pec_model_bytes(unsigned experts, int delta, uint64_t *rank_max_p,
                                   uint64_t *stored_p)
{
    static cl_pobj_t objs[CL_PEC_MAX_OBJS];
    cks_pec_params_t p;
    uint64_t total = 0, rmax = 0, stored = 0;
    cl_pec_params(experts, opts.clients, &p);
    for (unsigned r = 0; r < opts.clients; r++) {
        size_t n = cl_pec_layout(experts, r, opts.clients, objs);
        uint64_t rb = 0;
        for (size_t i = 0; i < n && i < CL_PEC_MAX_OBJS; i++) {
            if (delta && objs[i].expert >= 0 &&
                (r != 0 || (unsigned)objs[i].expert >= p.per_step)) {
                continue;
            }
            rb += objs[i].size;
            stored += cl_stored_bytes(objs[i].size);
        }
        total += rb;
        rmax = rb > rmax ? rb : rmax;
    }
    if (rank_max_p != NULL) {
        *rank_max_p = rmax;
    }
    if (stored_p != NULL) {
        *stored_p = stored;
    }
    return total;
}

/* ---- the objects of a snapshot (--mix) ------------------------------------------
 *
 * Every writer puts the same list of objects (its shards), under keys of its
 * own. uniform: --objects objects of --size bytes. moe: one trainer rank's
 * share of a synthetic MoE checkpoint (docs/BENCHMARKS_CLUSTER.md): dense
 * parameter shards, the dense optimizer state, expert states of the sizes
 * the PEC and Lazarus papers give (63 MB and 112 MB), and the RNG state.
 */

#define CL_MAX_OBJS 1024

typedef struct {
    char name[40];
    uint64_t size;
    uint64_t off; /* in a writer's buffer */
    cks_tags_t tags;
} cl_obj_t;

static struct {
    const char *kind; /* "uniform", "moe" */
    cl_obj_t obj[CL_MAX_OBJS];
    unsigned n;
    uint64_t bytes, max, stored; /* one writer's object bytes, largest, arena bytes */
} cl_mix;

static uint64_t cl_stored_bytes(uint64_t size);

static void cl_mix_add(const char *name, unsigned count, uint64_t size, int32_t kind)
{
    for (unsigned i = 0; i < count && cl_mix.n < CL_MAX_OBJS; i++) {
        cl_obj_t *o = &cl_mix.obj[cl_mix.n];
        snprintf(o->name, sizeof(o->name), "%s%03u", name, i);
        o->size = size;
        o->off = cl_mix.bytes;
        o->tags = (cks_tags_t){kind, CKS_TAG_NONE, CKS_TAG_NONE, CKS_TAG_NONE};
        if (kind == CKS_KIND_EXPERT) {
            o->tags.expert = (int32_t)i;
        }
        cl_mix.bytes += size;
        cl_mix.stored += cl_stored_bytes(size);
        cl_mix.max = size > cl_mix.max ? size : cl_mix.max;
        cl_mix.n++;
    }
}

static void cl_mix_build(void)
{
    memset(&cl_mix.obj, 0, sizeof(cl_mix.obj));
    cl_mix.n = 0;
    cl_mix.bytes = cl_mix.max = cl_mix.stored = 0;
    if (strcmp(cl_mix.kind, "moe") == 0) {
        cl_mix_add("dense-params", 2, 16ull << 20, CKS_KIND_DENSE);
        cl_mix_add("dense-optim", 1, 96ull << 20, CKS_KIND_OPTIMIZER);
        cl_mix_add("expert-state-63MB", 2, 63000000ull, CKS_KIND_EXPERT);
        cl_mix_add("expert-state-112MB", 2, 112000000ull, CKS_KIND_EXPERT);
        cl_mix_add("rng", 1, 4096, CKS_KIND_OTHER);
    } else {
        cl_mix_add("object", opts.objects, opts.size, CKS_KIND_OTHER);
    }
}

static void cl_obj_key(unsigned writer, unsigned o, char *key, size_t len)
{
    snprintf(key, len, "client%02u/%s", writer, cl_mix.obj[o].name);
}

static uint64_t cl_obj_seed(unsigned writer, unsigned o)
{
    return 1000u * (writer + 1) + o;
}

/* ---- workers: protocol
 * ------------------------------------------------------------------ */

enum {
    CL_CMD_SNAP = 1,   /* put my objects into `version`, finish my rank */
    CL_CMD_RESTORE,    /* get my objects from `version` */
    CL_CMD_PEC_SETUP,  /* allocate the PEC layout of `experts` (frees the rest) */
    CL_CMD_PEC_SNAP,   /* full (flags) or partial-expert checkpoint `ckpt` */
    CL_CMD_PEC_VERIFY, /* restore `version`: every object from the version that wrote it
                        */
    CL_CMD_QUIT,
};

enum {
    CL_F_FRESH = 1u << 0,  /* a new client first (connected to every live server) */
    CL_F_VERIFY = 1u << 1, /* compare the bytes afterwards (outside the timing) */
    CL_F_FULL = 1u << 2,   /* PEC_SNAP: every expert */
    CL_F_RECONNECT = 1u << 3, /* keep the client; reconnect it to every live server */
};

typedef struct {
    uint32_t op, flags;
    uint64_t version;
    uint32_t rank, nranks;
    uint32_t experts;
    uint32_t nreaders; /* SNAP, RESTORE: clients that restore (their shares) */
    uint64_t ckpt;
    char job[64];
} cl_cmd_t;

typedef struct {
    int32_t status; /* cks_status_t; CL_ERR_VERIFY for bytes that differ */
    uint32_t phase; /* 0: READY, 1: result */
    double t_start, t_stored, t_end;
    double t_copied; /* --stage-host: the last put's COPIED (0: not staged) */
    uint64_t bytes, objects;
    uint64_t stored; /* arena bytes the objects take: data, padding, parity */
    double cpu_s;    /* this client process's CPU seconds in the timed part */
    double alloc_s;  /* preparation: seconds in cks_mem_alloc() of alloc_bytes */
    uint64_t alloc_bytes;
    char err[256];
} cl_res_t;

/* cks_mem_alloc() calls of the workers' preparations (the servers on this
 * host map and fault in each region before it returns): seconds per GiB */
#define CL_MAX_ALLOCS 256
static double cl_alloc_s_gib[CL_MAX_ALLOCS];
static unsigned cl_nallocs;

#define CL_ERR_VERIFY (-1000)

/* ---- workers: the client side
 * ---------------------------------------------------------- */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned inflight;
    cks_status_t first_err;
    double last_copied; /* --stage-host: when the last COPIED came */
} cl_win_t;

static struct {
    unsigned index;
    cks_client_h client;
    bench_buf_t src, dst; /* main: objects x size each */
    cl_pobj_t *pobj;      /* PEC layout of this rank */
    size_t npobj;
    bench_buf_t psrc, pdst; /* PEC: every object back to back; one object */
    uint64_t *poff;         /* offset of each object in psrc */
    uint64_t *psaved;       /* version that last wrote each object */
    uint8_t *mask;
    unsigned pexperts;
} wk;

static void cl_win_init(cl_win_t *w)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    w->inflight    = 0;
    w->last_copied = 0;
    w->first_err = CKS_OK;
}

static void cl_win_destroy(cl_win_t *w)
{
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
}

/* Completion callback (the client's progress thread): count, never block. */
static void cl_win_cb(void *arg, cks_status_t st)
{
    cl_win_t *w = arg;
    pthread_mutex_lock(&w->lock);
    w->inflight--;
    if (st != CKS_OK && w->first_err == CKS_OK) {
        w->first_err = st;
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Wait until fewer than `below` ops are in flight; CKS_ERR_TIMEOUT past the
 * deadline, else the first error seen so far. */
static cks_status_t cl_win_wait(cl_win_t *w, unsigned below, double deadline)
{
    cks_status_t st = CKS_OK;
    pthread_mutex_lock(&w->lock);
    while (w->inflight >= below && w->first_err == CKS_OK) {
        struct timespec ts;
        double d = deadline;
        ts.tv_sec = (time_t)d;
        ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
        if (pthread_cond_timedwait(&w->cond, &w->lock, &ts) == ETIMEDOUT) {
            st = CKS_ERR_TIMEOUT;
            break;
        }
    }
    if (st == CKS_OK) {
        st = w->first_err;
    }
    pthread_mutex_unlock(&w->lock);
    return st;
}

static void cl_w_err(cl_res_t *res, cks_status_t st, const char *what)
{
    char why[200] = "";
    if (wk.client != NULL && st != CL_ERR_VERIFY) {
        cks_client_last_error(wk.client, why, sizeof(why));
    }
    res->status = st;
    snprintf(res->err, sizeof(res->err), "client %u: %s: %s%s%s", wk.index, what,
             st == CL_ERR_VERIFY ? "bytes differ" : cks_status_string(st),
             why[0] ? ": " : "", why);
}

/* Destroy the worker's client with requests still in flight (a timeout): the
 * destroy fails them first, then frees the buffers it allocated. */
static void cl_w_client_drop(void)
{
    cks_client_destroy(wk.client);
    wk.client = NULL;
    if (wk.src.kind == BENCH_MEM_CKS) {
        memset(&wk.src, 0, sizeof(wk.src));
    }
    if (wk.dst.kind == BENCH_MEM_CKS) {
        memset(&wk.dst, 0, sizeof(wk.dst));
    }
}

/* Destroy the worker's client; buffers it allocated go with it. */
static void cl_w_client_destroy(void)
{
    if (wk.client == NULL) {
        return;
    }
    bench_ck_buf_free(wk.client, &wk.src);
    bench_ck_buf_free(wk.client, &wk.dst);
    cl_w_client_drop();
}

static cks_status_t cl_w_connect(cl_res_t *res)
{
    cks_client_params_t cp;
    char name[64];
    uint64_t used = 0;
    cks_status_t st;

    cl_w_client_destroy();
    snprintf(name, sizeof(name), "ckstore-bench-client%u", wk.index);
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC |
                    CKS_CLIENT_FIELD_TIMEOUT_MS | CKS_CLIENT_FIELD_NAME;
    cp.cluster = cl.map;
    cp.ec_k = opts.k;
    cp.ec_m = opts.m;
    cp.chunk_size = opts.chunk;
    cp.timeout_ms = (int)(opts.timeout_s * 1000);
    cp.name = name;
    if (opts.stage_host) {
        /* a ring that holds this writer's snapshot: a slice per object of
         * the largest size (at most 64 slices of at most 1 GiB) */
        uint64_t big = 4096;
        for (unsigned o = 0; o < cl_mix.n; o++) {
            big = cl_mix.obj[o].size > big ? cl_mix.obj[o].size : big;
        }
        cp.field_mask |= CKS_CLIENT_FIELD_STAGE;
        cp.stage_slice  = big < (1ull << 30) ? big : (1ull << 30);
        cp.stage_slices = cl_mix.n < 2 ? 2 : cl_mix.n > 64 ? 64 : cl_mix.n;
    }
    st = cks_client_create(&cp, &wk.client);
    if (st != CKS_OK) {
        wk.client = NULL;
        cl_w_err(res, st, "connect");
        return st;
    }
    /* asks every server: connects to every live one, marks the others down,
     * so that the timed phase starts with the connections a running trainer
     * (or a replacement rank that just started) has */
    st = cks_cluster_usage(wk.client, &used, NULL);
    if (st != CKS_OK) {
        cl_w_err(res, st, "usage");
    }
    return st;
}

/* Put objects [0, n) (key, buffer, size, tags from the callbacks below) with a
 * window of opts.window in flight. */
typedef struct {
    const char *key;
    const void *buf;
    uint64_t size;
    cks_tags_t tags;
} cl_put_t;

static void cl_copied_cb(void *arg, cks_status_t st)
{
    cl_win_t *w = arg;
    (void)st; /* the put's own callback reports an error */
    double now  = bench_now();
    pthread_mutex_lock(&w->lock);
    w->last_copied = now > w->last_copied ? now : w->last_copied;
    pthread_mutex_unlock(&w->lock);
}

/* *copied_p (may be NULL): with --stage-host, when the last COPIED came */
static cks_status_t cl_w_put_all(const char *job, uint64_t version, const cl_put_t *puts,
                                 size_t n, double deadline, const char **what_p,
                                 double *copied_p)
{
    cl_win_t w;
    cks_status_t st = CKS_OK;
    /* staged, the ring holds the snapshot: every put goes at once (the
     * trainer's buffers are free at COPIED, not at STORED) */
    unsigned window = opts.stage_host && n > opts.window ? (unsigned)n : opts.window;
    cl_win_init(&w);
    for (size_t i = 0; i < n && st == CKS_OK; i++) {
        cks_put_params_t pp;
        st = cl_win_wait(&w, window, deadline);
        if (st != CKS_OK) {
            break;
        }
        memset(&pp, 0, sizeof(pp));
        pp.field_mask = CKS_PUT_FIELD_TAGS;
        if (opts.stage_host) {
            pp.field_mask |= CKS_PUT_FIELD_STAGED | CKS_PUT_FIELD_COPIED;
            pp.copied_cb  = cl_copied_cb;
            pp.copied_arg = &w;
        }
        pp.job = job;
        pp.version = version;
        pp.key = puts[i].key;
        pp.buffer = puts[i].buf;
        pp.size = puts[i].size;
        pp.tags = puts[i].tags;
        pthread_mutex_lock(&w.lock);
        w.inflight++;
        pthread_mutex_unlock(&w.lock);
        st = cks_put_nb(wk.client, &pp, cl_win_cb, &w);
        if (st == CKS_INPROGRESS) {
            st = CKS_OK;
        } else {
            pthread_mutex_lock(&w.lock);
            w.inflight--;
            pthread_mutex_unlock(&w.lock);
        }
    }
    *what_p = "put";
    cks_status_t st2 = cl_win_wait(&w, 1, deadline);
    st = st != CKS_OK ? st : st2;
    if (copied_p != NULL) {
        *copied_p = w.last_copied;
    }
    if (w.inflight > 0) {
        /* timed out with puts in flight: destroying the client fails them
         * (their callbacks run) and gives our buffers back */
        cl_w_client_drop();
    }
    cl_win_destroy(&w);
    return st;
}

static cks_status_t cl_w_get_all(cks_restore_h r, const char *const *keys,
                                 void *const *bufs, const uint64_t *sizes, size_t n,
                                 double deadline)
{
    cl_win_t w;
    cks_status_t st = CKS_OK;
    cl_win_init(&w);
    for (size_t i = 0; i < n && st == CKS_OK; i++) {
        cks_get_params_t gp;
        st = cl_win_wait(&w, opts.window, deadline);
        if (st != CKS_OK) {
            break;
        }
        memset(&gp, 0, sizeof(gp));
        gp.key = keys[i];
        gp.buffer = bufs[i];
        gp.buffer_size = sizes[i];
        pthread_mutex_lock(&w.lock);
        w.inflight++;
        pthread_mutex_unlock(&w.lock);
        st = cks_get_nb(r, &gp, NULL, cl_win_cb, &w);
        if (st == CKS_INPROGRESS) {
            st = CKS_OK;
        } else {
            pthread_mutex_lock(&w.lock);
            w.inflight--;
            pthread_mutex_unlock(&w.lock);
        }
    }
    cks_status_t st2 = cl_win_wait(&w, 1, deadline);
    st = st != CKS_OK ? st : st2;
    if (w.inflight > 0) {
        cks_restore_close(r);
        cl_w_client_drop();
        cl_win_destroy(&w);
        return CKS_ERR_TIMEOUT;
    }
    cl_win_destroy(&w);
    return st;
}

/* ---- workers: the commands
 * --------------------------------------------------------------- */

/* The objects reader `reader` of `readers` restores: a contiguous block of
 * the writers' objects (writer-major), so that with as many readers as
 * writers each reads back what it wrote. */
static void cl_read_share(unsigned reader, unsigned readers, unsigned *first_p,
                          unsigned *count_p)
{
    unsigned n = opts.clients * cl_mix.n;
    unsigned first = (unsigned)((uint64_t)n * reader / readers);
    unsigned last = (unsigned)((uint64_t)n * (reader + 1) / readers);
    *first_p = first;
    *count_p = last - first;
}

static int cl_w_alloc_main(const cl_cmd_t *cmd, cl_res_t *res)
{
    char err[BENCH_ERR_LEN];
    unsigned first, count;
    uint64_t rtotal = 0;
    if (wk.src.ptr != NULL || wk.dst.ptr != NULL) {
        return 0;
    }
    cl_read_share(wk.index, cmd->nreaders, &first, &count);
    for (unsigned g = first; g < first + count; g++) {
        rtotal += cl_mix.obj[g % cl_mix.n].size;
    }
    if (opts.client_mem == BENCH_MEM_CKS) {
        /* the client's own memory: the servers read and write it directly */
        if ((wk.index < opts.clients &&
             bench_ck_buf_alloc(wk.client, cl_mix.bytes, &wk.src) != 0) ||
            (rtotal > 0 && bench_ck_buf_alloc(wk.client, rtotal, &wk.dst) != 0)) {
            res->status = CKS_ERR_NO_MEMORY;
            snprintf(res->err, sizeof(res->err), "client %u: cks_mem_alloc failed", wk.index);
            return -1;
        }
        res->alloc_s = wk.src.alloc_s + wk.dst.alloc_s;
        res->alloc_bytes = (wk.src.ptr ? wk.src.len : 0) + (wk.dst.ptr ? wk.dst.len : 0);
    } else if ((wk.index < opts.clients &&
         bench_buf_alloc(BENCH_MEM_THP, cl_mix.bytes, &wk.src, err, sizeof(err)) != 0) ||
        (rtotal > 0 && bench_buf_alloc(BENCH_MEM_THP, rtotal, &wk.dst, err, sizeof(err)) != 0)) {
        res->status = CKS_ERR_NO_MEMORY;
        snprintf(res->err, sizeof(res->err), "client %u: buffers: %.200s", wk.index, err);
        return -1;
    }
    if (wk.src.ptr != NULL) {
        for (unsigned o = 0; o < cl_mix.n; o++) {
            bench_fill((uint8_t *)wk.src.ptr + cl_mix.obj[o].off, cl_mix.obj[o].size,
                       cl_obj_seed(wk.index, o));
        }
    }
    return 0;
}

static void cl_w_free_main(void)
{
    if (wk.client != NULL) {
        bench_ck_buf_free(wk.client, &wk.src);
        bench_ck_buf_free(wk.client, &wk.dst);
    }
    if (wk.src.ptr != NULL) {
        bench_buf_free(&wk.src);
        memset(&wk.src, 0, sizeof(wk.src));
    }
    if (wk.dst.ptr != NULL) {
        bench_buf_free(&wk.dst);
        memset(&wk.dst, 0, sizeof(wk.dst));
    }
}

static void cl_w_snap(const cl_cmd_t *cmd, cl_res_t *res, double deadline)
{
    static cl_put_t puts[CL_MAX_OBJS];
    static char keys[CL_MAX_OBJS][64];
    const char *what = "put";
    cks_status_t st;
    double cpu0 = bench_proc_cpu_s(getpid());

    for (unsigned o = 0; o < cl_mix.n; o++) {
        cl_obj_key(wk.index, o, keys[o], sizeof(keys[o]));
        puts[o].key = keys[o];
        puts[o].buf = (const uint8_t *)wk.src.ptr + cl_mix.obj[o].off;
        puts[o].size = cl_mix.obj[o].size;
        puts[o].tags = cl_mix.obj[o].tags;
        puts[o].tags.rank = (int32_t)cmd->rank;
    }
    res->t_start = bench_now();
    st = cl_w_put_all(cmd->job, cmd->version, puts, cl_mix.n, deadline, &what, &res->t_copied);
    res->t_stored = bench_now();
    if (st != CKS_OK) {
        cl_w_err(res, st, what);
        return;
    }
    st = cks_version_finish(wk.client, cmd->job, cmd->version, cmd->rank);
    res->t_end = bench_now();
    if (st != CKS_OK) {
        cl_w_err(res, st, "finish");
        return;
    }
    res->cpu_s = bench_proc_cpu_s(getpid()) - cpu0;
    res->bytes = cl_mix.bytes;
    res->stored = cl_mix.stored;
    res->objects = cl_mix.n;
}

static void cl_w_restore(const cl_cmd_t *cmd, cl_res_t *res, double deadline)
{
    static const char *keyp[CL_MAX_OBJS * CL_MAX_CLIENTS];
    static void *bufs[CL_MAX_OBJS * CL_MAX_CLIENTS];
    static uint64_t sizes[CL_MAX_OBJS * CL_MAX_CLIENTS];
    static char keys[CL_MAX_OBJS * CL_MAX_CLIENTS][64];
    unsigned first, count;
    uint64_t off = 0;
    cks_restore_h r;
    cks_status_t st;
    double cpu0 = bench_proc_cpu_s(getpid());

    cl_read_share(wk.index, cmd->nreaders, &first, &count);
    for (unsigned i = 0; i < count; i++) {
        unsigned g = first + i, o = g % cl_mix.n;
        cl_obj_key(g / cl_mix.n, o, keys[i], sizeof(keys[i]));
        keyp[i] = keys[i];
        bufs[i] = (uint8_t *)wk.dst.ptr + off;
        sizes[i] = cl_mix.obj[o].size;
        off += sizes[i];
    }
    if ((cmd->flags & CL_F_VERIFY) && off > 0) {
        memset(wk.dst.ptr, 0x5a, off);
    }
    res->t_start = bench_now();
    st = cks_restore_open(wk.client, cmd->job, cmd->version, &r);
    if (st != CKS_OK) {
        cl_w_err(res, st, "restore open");
        return;
    }
    st = cl_w_get_all(r, keyp, bufs, sizes, count, deadline);
    res->t_end = bench_now();
    if (st != CKS_OK) {
        cl_w_err(res, st, "get");
        if (st != CKS_ERR_TIMEOUT) {
            cks_restore_close(r);
        }
        return;
    }
    cks_restore_close(r);
    res->cpu_s = bench_proc_cpu_s(getpid()) - cpu0;
    res->t_stored = res->t_end;
    res->bytes = off;
    res->objects = count;
    if (cmd->flags & CL_F_VERIFY) {
        /* each object against its writer's pattern, made again (untimed) */
        bench_buf_t want;
        char err[BENCH_ERR_LEN];
        if (bench_buf_alloc(BENCH_MEM_THP, cl_mix.max, &want, err, sizeof(err)) != 0) {
            cl_w_err(res, CKS_ERR_NO_MEMORY, "verify buffer");
            return;
        }
        for (unsigned i = 0; i < count; i++) {
            unsigned g = first + i;
            bench_fill(want.ptr, sizes[i], cl_obj_seed(g / cl_mix.n, g % cl_mix.n));
            if (memcmp(want.ptr, bufs[i], sizes[i]) != 0) {
                cl_w_err(res, CL_ERR_VERIFY, keyp[i]);
                break;
            }
        }
        bench_buf_free(&want);
    }
}

static void cl_w_pec_free(void)
{
    if (wk.psrc.ptr != NULL) {
        bench_buf_free(&wk.psrc);
        bench_buf_free(&wk.pdst);
        memset(&wk.psrc, 0, sizeof(wk.psrc));
        memset(&wk.pdst, 0, sizeof(wk.pdst));
    }
    free(wk.pobj);
    free(wk.poff);
    free(wk.psaved);
    free(wk.mask);
    wk.pobj = NULL;
    wk.poff = NULL;
    wk.psaved = NULL;
    wk.mask = NULL;
    wk.npobj = 0;
}

static void cl_w_pec_setup(const cl_cmd_t *cmd, cl_res_t *res)
{
    char err[BENCH_ERR_LEN];
    uint64_t total = 0, biggest = 0;

    cl_w_free_main();
    cl_w_pec_free();
    wk.pexperts = cmd->experts;
    wk.pobj = calloc(CL_PEC_MAX_OBJS, sizeof(*wk.pobj));
    wk.npobj = wk.pobj ? cl_pec_layout(cmd->experts, cmd->rank, cmd->nranks, wk.pobj) : 0;
    wk.poff = calloc(wk.npobj + 1, sizeof(*wk.poff));
    wk.psaved = calloc(wk.npobj + 1, sizeof(*wk.psaved));
    wk.mask = calloc((size_t)opts.pec_layers * cmd->experts, 1);
    if (wk.pobj == NULL || wk.poff == NULL || wk.psaved == NULL || wk.mask == NULL ||
        wk.npobj > CL_PEC_MAX_OBJS) {
        res->status = CKS_ERR_NO_MEMORY;
        snprintf(res->err, sizeof(res->err), "client %u: PEC layout", wk.index);
        return;
    }
    for (size_t i = 0; i < wk.npobj; i++) {
        wk.poff[i] = total;
        wk.psaved[i] = CKS_PEC_NEVER;
        total += wk.pobj[i].size;
        biggest = wk.pobj[i].size > biggest ? wk.pobj[i].size : biggest;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, total, &wk.psrc, err, sizeof(err)) != 0 ||
        bench_buf_alloc(BENCH_MEM_THP, biggest, &wk.pdst, err, sizeof(err)) != 0) {
        res->status = CKS_ERR_NO_MEMORY;
        snprintf(res->err, sizeof(res->err), "client %u: PEC buffers: %.200s", wk.index,
                 err);
        return;
    }
    for (size_t i = 0; i < wk.npobj; i++) {
        bench_fill((uint8_t *)wk.psrc.ptr + wk.poff[i], wk.pobj[i].size,
                   7919u * (wk.index + 1) + i);
    }
    res->bytes = total;
    res->objects = wk.npobj;
}

/* Which objects a PEC version writes: dense always, experts by the mask. */
static int cl_w_pec_selected(const cl_cmd_t *cmd, size_t i)
{
    const cl_pobj_t *o = &wk.pobj[i];
    if ((cmd->flags & CL_F_FULL) || o->expert < 0) {
        return 1;
    }
    return wk.mask[(size_t)o->layer * wk.pexperts + (size_t)o->expert] != 0;
}

static void cl_w_pec_snap(const cl_cmd_t *cmd, cl_res_t *res, double deadline)
{
    cl_put_t *puts = calloc(wk.npobj + 1, sizeof(*puts));
    size_t n = 0;
    uint64_t bytes = 0;
    const char *what = "put";
    cks_pec_params_t p;
    cks_status_t st;

    if (puts == NULL) {
        res->status = CKS_ERR_NO_MEMORY;
        return;
    }
    cl_pec_params(wk.pexperts, cmd->nranks, &p);
    if (!(cmd->flags & CL_F_FULL) &&
        (st = cks_pec_select_round_robin(&p, cmd->ckpt, wk.mask)) != CKS_OK) {
        cl_w_err(res, st, "cks_pec_select_round_robin");
        free(puts);
        return;
    }
    for (size_t i = 0; i < wk.npobj; i++) {
        if (!cl_w_pec_selected(cmd, i)) {
            continue;
        }
        uint8_t *b = (uint8_t *)wk.psrc.ptr + wk.poff[i];
        memcpy(b, &cmd->version,
               sizeof(cmd->version)); /* the stamp, checked on restore */
        puts[n].key = wk.pobj[i].key;
        puts[n].buf = b;
        puts[n].size = wk.pobj[i].size;
        puts[n].tags = wk.pobj[i].tags;
        bytes += wk.pobj[i].size;
        res->stored += cl_stored_bytes(wk.pobj[i].size);
        n++;
    }
    res->t_start = bench_now();
    st = cl_w_put_all(cmd->job, cmd->version, puts, n, deadline, &what, NULL);
    res->t_stored = bench_now();
    free(puts);
    if (st != CKS_OK) {
        cl_w_err(res, st, what);
        return;
    }
    st = cks_version_finish(wk.client, cmd->job, cmd->version, cmd->rank);
    res->t_end = bench_now();
    if (st != CKS_OK) {
        cl_w_err(res, st, "finish");
        return;
    }
    for (size_t i = 0; i < wk.npobj; i++) {
        if (cl_w_pec_selected(cmd, i)) {
            wk.psaved[i] = cmd->version;
        }
    }
    res->bytes = bytes;
    res->objects = n;
}

/* Restore every object of this rank from `version` (untimed): each must come
 * from the version that last wrote it (stamp and source_version), with the
 * bytes written. */
static void cl_w_pec_verify(const cl_cmd_t *cmd, cl_res_t *res)
{
    cks_restore_h r;
    cks_status_t st = cks_restore_open(wk.client, cmd->job, cmd->version, &r);
    if (st != CKS_OK) {
        cl_w_err(res, st, "restore open");
        return;
    }
    res->t_start = bench_now();
    for (size_t i = 0; i < wk.npobj && res->status == CKS_OK; i++) {
        cks_object_info_t info;
        cks_get_params_t gp;
        uint64_t got = 0, stamp;
        const uint8_t *src = (const uint8_t *)wk.psrc.ptr + wk.poff[i];

        st = cks_object_stat(r, wk.pobj[i].key, &info);
        if (st != CKS_OK) {
            cl_w_err(res, st, wk.pobj[i].key);
            break;
        }
        memset(&gp, 0, sizeof(gp));
        gp.key = wk.pobj[i].key;
        gp.buffer = wk.pdst.ptr;
        gp.buffer_size = wk.pdst.len;
        st = cks_get(r, &gp, &got);
        if (st != CKS_OK) {
            cl_w_err(res, st, wk.pobj[i].key);
            break;
        }
        memcpy(&stamp, wk.pdst.ptr, sizeof(stamp));
        if (got != wk.pobj[i].size || stamp != wk.psaved[i] ||
            info.source_version != wk.psaved[i] ||
            memcmp((const uint8_t *)wk.pdst.ptr + 8, src + 8, got - 8) != 0) {
            res->status = CL_ERR_VERIFY;
            snprintf(res->err, sizeof(res->err),
                     "client %u: %s: expected the bytes of version %llu, got stamp %llu, "
                     "source_version %llu, %llu bytes",
                     wk.index, wk.pobj[i].key, (unsigned long long)wk.psaved[i],
                     (unsigned long long)stamp, (unsigned long long)info.source_version,
                     (unsigned long long)got);
            break;
        }
        res->bytes += got;
        res->objects++;
    }
    res->t_end = bench_now();
    cks_restore_close(r);
}

static int cl_worker_main(unsigned index, int cmd_fd, int res_fd)
{
    cl_cmd_t cmd;
    wk.index = index;
    for (;;) {
        cl_res_t res;
        char go;
        /* the parent may be busy for long (references, other phases); it
         * kills us when it goes (PR_SET_PDEATHSIG), this bounds the rest */
        if (bench_read_full(cmd_fd, &cmd, sizeof(cmd), bench_now() + 3600) != 0) {
            break;
        }
        if (cmd.op == CL_CMD_QUIT) {
            break;
        }
        memset(&res, 0, sizeof(res));
        /* preparation, untimed: buffers, then a client when asked for a
         * fresh one or when there is none (PEC_SETUP: always, servers may
         * have been restarted since the last command) */
        if ((cmd.flags & CL_F_FRESH) || wk.client == NULL || cmd.op == CL_CMD_PEC_SETUP) {
            cl_w_connect(&res); /* first: cks_mem_alloc() buffers belong to it */
        } else if (cmd.flags & CL_F_RECONNECT) {
            /* servers were restarted: a running trainer's client finds them
             * again (it asks every server, as cl_w_connect() does) */
            uint64_t used = 0;
            cks_status_t st = cks_cluster_usage(wk.client, &used, NULL);
            if (st != CKS_OK) {
                cl_w_err(&res, st, "reconnect");
            }
        }
        if (res.status == CKS_OK && cmd.op == CL_CMD_SNAP && opts.stage_host) {
            /* the ring a trainer sets up once, before its first checkpoint */
            cks_status_t st = cks_stage_prepare(wk.client);
            if (st != CKS_OK) {
                cl_w_err(&res, st, "staging ring");
            }
        }
        if (res.status == CKS_OK && (cmd.op == CL_CMD_SNAP || cmd.op == CL_CMD_RESTORE)) {
            cl_w_alloc_main(&cmd, &res);
        } else if (res.status == CKS_OK && cmd.op == CL_CMD_PEC_SETUP) {
            cl_w_pec_setup(&cmd, &res);
        }
        res.phase = 0;
        if (bench_write_full(res_fd, &res, sizeof(res)) != 0) {
            break;
        }
        if (res.status != CKS_OK) {
            continue; /* the parent saw it; no GO follows */
        }
        if (bench_read_full(cmd_fd, &go, 1, bench_now() + opts.timeout_s * 4) != 0) {
            break;
        }
        if (go != 'G') {
            continue; /* the parent called it off */
        }
        double deadline = bench_now() + opts.timeout_s * 3;
        switch (cmd.op) {
            case CL_CMD_SNAP:
                cl_w_snap(&cmd, &res, deadline);
                break;
            case CL_CMD_RESTORE:
                cl_w_restore(&cmd, &res, deadline);
                break;
            case CL_CMD_PEC_SETUP:
                break;
            case CL_CMD_PEC_SNAP:
                cl_w_pec_snap(&cmd, &res, deadline);
                break;
            case CL_CMD_PEC_VERIFY:
                cl_w_pec_verify(&cmd, &res);
                break;
            default:
                res.status = CKS_ERR_INVALID_PARAM;
                break;
        }
        res.phase = 1;
        if (bench_write_full(res_fd, &res, sizeof(res)) != 0) {
            break;
        }
    }
    cl_w_free_main();
    cl_w_client_destroy();
    cl_w_pec_free();
    return 0;
}

/* ---- workers: the parent side
 * ---------------------------------------------------------------- */

/* Writers are workers 0 .. clients-1, readers 0 .. readers-1. */
static unsigned cl_nworkers_needed(void)
{
    return opts.readers > opts.clients ? opts.readers : opts.clients;
}

/* Fork the worker of slot `slot` with client index `index` (its rank: which
 * objects it writes and reads). */
static int cl_worker_fork(unsigned slot, unsigned index)
{
    pid_t parent = getpid();
    int cmd[2], res[2];
    if (pipe2(cmd, O_CLOEXEC) != 0) {
        return -1;
    }
    if (pipe2(res, O_CLOEXEC) != 0) {
        close(cmd[0]);
        close(cmd[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ckstore-bench: fork: %s\n", strerror(errno));
        close(cmd[0]);
        close(cmd[1]);
        close(res[0]);
        close(res[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) {
            _exit(1);
        }
        signal(SIGINT, SIG_IGN); /* the parent cleans up and kills us */
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        /* keep only our two pipe ends (and stdio) */
        int a = fcntl(cmd[0], F_DUPFD_CLOEXEC, 1000);
        int b = fcntl(res[1], F_DUPFD_CLOEXEC, 1000);
        int hi = a > b ? a : b;
        syscall(SYS_close_range, 3u, 999u, 0u);
        for (int fd = 1000; fd < hi; fd++) {
            if (fd != a && fd != b) {
                close(fd);
            }
        }
        syscall(SYS_close_range, (unsigned)hi + 1, ~0u, 0u);
        cl.nworkers = 0; /* ours to kill, not theirs */
        cl.nsrv = 0;
        cl.have_child = 0;
        cl_net_up = 0;
        _exit(cl_worker_main(index, a, b));
    }
    close(cmd[0]);
    close(res[1]);
    cl.wcmd[slot] = cmd[1];
    cl.wres[slot] = res[0];
    cl.worker[slot] = pid;
    cl.nworkers = slot + 1;
    return 0;
}

/* With --hosts, the cold restores are made by fresh processes: reps x
 * readers of them, forked now (no UCX in this process yet), each used once
 * (cl_cold_slot()). */
static unsigned cl_ncold(void)
{
    return opts.hosts ? opts.reps * opts.readers : 0;
}

static unsigned cl_cold_slot(unsigned rep, unsigned reader)
{
    return cl.nreg + rep * opts.readers + reader;
}

static int cl_workers_start(void)
{
    cl.nreg = cl_nworkers_needed();
    for (unsigned w = 0; w < cl.nreg; w++) {
        if (cl_worker_fork(w, w) != 0) {
            return -1;
        }
    }
    for (unsigned c = 0; c < cl_ncold(); c++) {
        if (cl_worker_fork(cl.nreg + c, c % opts.readers) != 0) {
            return -1;
        }
    }
    return 0;
}

/* QUIT to the worker of one slot, and reap it (killed after the timeout). */
static void cl_worker_quit(unsigned slot)
{
    cl_cmd_t cmd;
    if (cl.worker[slot] <= 0) {
        return;
    }
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_QUIT;
    bench_write_full(cl.wcmd[slot], &cmd, sizeof(cmd));
    if (!bench_wait_pid(cl.worker[slot], opts.timeout_s, NULL)) {
        fprintf(stderr, "ckstore-bench: client %u (pid %d) did not quit: killed\n", slot,
                (int)cl.worker[slot]);
        kill(cl.worker[slot], SIGKILL);
        bench_wait_pid(cl.worker[slot], opts.timeout_s, NULL);
    }
    cl.worker[slot] = 0;
    close(cl.wcmd[slot]);
    close(cl.wres[slot]);
}

static void cl_workers_stop(void)
{
    cl_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_QUIT;
    for (unsigned w = 0; w < cl.nworkers; w++) {
        if (cl.worker[w] > 0) {
            bench_write_full(cl.wcmd[w], &cmd, sizeof(cmd));
        }
    }
    for (unsigned w = 0; w < cl.nworkers; w++) {
        if (cl.worker[w] <= 0) {
            continue;
        }
        if (!bench_wait_pid(cl.worker[w], opts.timeout_s, NULL)) {
            fprintf(stderr, "ckstore-bench: client %u (pid %d) did not quit: killed\n", w,
                    (int)cl.worker[w]);
            kill(cl.worker[w], SIGKILL);
            bench_wait_pid(cl.worker[w], opts.timeout_s, NULL);
        }
        cl.worker[w] = 0;
        close(cl.wcmd[w]);
        close(cl.wres[w]);
    }
}

/* Run a command on every worker (rank = worker index): READY from all, GO to
 * all, results from all. res[] gets each worker's result. 0 when all went
 * well; errors are printed. */
static double cl_servers_cpu(void);

/* The servers' CPU seconds when the last cl_workers_run() said GO: the
 * workers' preparation (connects, cks_mem_alloc()) is not the phase's. */
static double cl_cpu_go = -1;

/* --hosts: the network counters when the last cl_workers_run() said GO */
typedef struct {
    int ok;
    uint64_t cli_rx, cli_tx; /* eth0 of the client namespace */
    uint64_t srv_rx, srv_tx; /* eth0 of every server's namespace, summed */
} cl_netctr_t;
static cl_netctr_t cl_net_go;
static int cl_net_read(cl_netctr_t *c);

/* Workers of slots base .. base+nw-1 as ranks 0 .. nw-1. */
static int cl_workers_run_at(unsigned base, const cl_cmd_t *proto, cl_res_t *res, unsigned nw)
{
    int rc = 0;
    double deadline = bench_now() + opts.timeout_s * 4;
    for (unsigned w = 0; w < nw; w++) {
        cl_cmd_t cmd = *proto;
        cmd.rank = w;
        cmd.nranks = nw;
        cmd.nreaders = opts.readers;
        if (bench_write_full(cl.wcmd[base + w], &cmd, sizeof(cmd)) != 0) {
            fprintf(stderr, "ckstore-bench: client %u is gone\n", w);
            return -1;
        }
    }
    for (unsigned w = 0; w < nw; w++) {
        if (bench_read_full(cl.wres[base + w], &res[w], sizeof(res[w]), deadline) != 0) {
            fprintf(stderr, "ckstore-bench: client %u did not get ready: %s\n", w,
                    strerror(errno));
            return -1; /* the caller tears everything down */
        }
        if (res[w].status != CKS_OK) {
            fprintf(stderr, "ckstore-bench: %s\n", res[w].err);
            rc = -1;
        }
        if (res[w].alloc_bytes > 0 && cl_nallocs < CL_MAX_ALLOCS) {
            cl_alloc_s_gib[cl_nallocs++] =
                res[w].alloc_s / ((double)res[w].alloc_bytes / (1u << 30));
        }
    }
    cl_cpu_go = rc == 0 ? cl_servers_cpu() : -1;
    cl_net_go.ok = 0;
    if (rc == 0 && opts.hosts) {
        cl_net_read(&cl_net_go);
    }
    for (unsigned w = 0; w < nw; w++) {
        /* those that failed wait for no GO; the others are called off */
        if (res[w].status == CKS_OK) {
            char go = rc == 0 ? 'G' : 'X';
            bench_write_full(cl.wcmd[base + w], &go, 1);
        }
    }
    if (rc != 0) {
        return rc;
    }
    deadline = bench_now() + opts.timeout_s * 4;
    for (unsigned w = 0; w < nw; w++) {
        if (bench_read_full(cl.wres[base + w], &res[w], sizeof(res[w]), deadline) != 0) {
            fprintf(stderr, "ckstore-bench: client %u did not answer: %s\n", w,
                    strerror(errno));
            return -1;
        }
        if (res[w].status != CKS_OK) {
            fprintf(stderr, "ckstore-bench: %s\n", res[w].err);
            rc = -1;
        }
    }
    return rc;
}

static int cl_workers_run(const cl_cmd_t *proto, cl_res_t *res, unsigned nw)
{
    return cl_workers_run_at(0, proto, res, nw);
}

/* Aggregate over the workers: total bytes, (max stored - min start), (max end
 * - min start). */
static void cl_aggregate(const cl_res_t *res, unsigned nw, uint64_t *bytes_p,
                         double *stored_s_p, double *end_s_p, uint64_t *rank_max_p)
{
    double t0 = INFINITY, ts = 0, te = 0;
    uint64_t bytes = 0, rmax = 0;
    for (unsigned w = 0; w < nw; w++) {
        t0 = res[w].t_start < t0 ? res[w].t_start : t0;
        ts = res[w].t_stored > ts ? res[w].t_stored : ts;
        te = res[w].t_end > te ? res[w].t_end : te;
        bytes += res[w].bytes;
        rmax = res[w].bytes > rmax ? res[w].bytes : rmax;
    }
    *bytes_p = bytes;
    if (stored_s_p != NULL) {
        *stored_s_p = ts - t0;
    }
    if (end_s_p != NULL) {
        *end_s_p = te - t0;
    }
    if (rank_max_p != NULL) {
        *rank_max_p = rmax;
    }
}

static uint64_t cl_sum_stored(const cl_res_t *res, unsigned nw)
{
    uint64_t t = 0;
    for (unsigned w = 0; w < nw; w++) {
        t += res[w].stored;
    }
    return t;
}

/* ---- the parent's own client
 * ------------------------------------------------------------------- */

static cks_client_h cl_client;

static int cl_fail(const char *what, cks_status_t st)
{
    char why[256] = "";
    if (cl_client != NULL) {
        cks_client_last_error(cl_client, why, sizeof(why));
    }
    fprintf(stderr, "ckstore-bench: %s: %s%s%s\n", what, cks_status_string(st),
            why[0] ? ": " : "", why);
    return -1;
}

static int cl_client_connect(void)
{
    cks_client_params_t cp;
    cks_status_t st;
    if (cl_client != NULL) {
        cks_client_destroy(cl_client);
        cl_client = NULL;
    }
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC |
                    CKS_CLIENT_FIELD_TIMEOUT_MS | CKS_CLIENT_FIELD_NAME;
    cp.cluster = cl.map;
    cp.ec_k = opts.k;
    cp.ec_m = opts.m;
    cp.chunk_size = opts.chunk;
    cp.timeout_ms = (int)(opts.timeout_s * 1000);
    cp.name = "ckstore-bench-coordinator";
    st = cks_client_create(&cp, &cl_client);
    if (st != CKS_OK) {
        cl_client = NULL;
        return cl_fail("connect to the cluster", st);
    }
    return 0;
}

static int cl_begin(const char *job, uint64_t version, uint64_t parent, uint32_t retain,
                    uint32_t nranks)
{
    cks_version_params_t vp;
    cks_status_t st;
    memset(&vp, 0, sizeof(vp));
    vp.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT;
    vp.job = job;
    vp.version = version;
    vp.nranks = nranks;
    vp.timeout_s = (uint32_t)(opts.timeout_s * 4);
    if (parent != CKS_NO_PARENT) {
        vp.field_mask |= CKS_VERSION_FIELD_PARENT;
        vp.parent = parent;
    }
    if (retain > 0) {
        vp.field_mask |= CKS_VERSION_FIELD_RETAIN;
        vp.retain = retain;
    }
    st = cks_version_begin(cl_client, &vp);
    if (st != CKS_OK) {
        char what[128];
        snprintf(what, sizeof(what), "begin %s version %llu", job,
                 (unsigned long long)version);
        return cl_fail(what, st);
    }
    return 0;
}

/* Free everything a job holds. Deleting versions one by one is not enough
 * once retention has dropped older ones: a version delete frees only the
 * chunks written in that version, so chunks of dropped ancestors that the
 * deleted manifests still used would stay allocated (see the docs). Instead,
 * commit an empty version with retention 1 (the newest restorable version is
 * then the empty one, and the retention sweep frees every chunk of the job
 * that no manifest uses), then delete it and anything left. */
static void cl_release_job(const char *job, uint64_t empty_version)
{
    cks_version_info_t v[256];
    size_t n = 0;
    int more = 0;
    cks_status_t st;

    if (cl_begin(job, empty_version, CKS_NO_PARENT, 1, 1) == 0) {
        st = cks_version_finish(cl_client, job, empty_version, 0);
        if (st != CKS_OK) {
            cl_fail("finish of the empty version", st);
        }
    }
    if (cks_version_list(cl_client, job, NULL, v, 256, &n, &more) != CKS_OK) {
        return;
    }
    while (n-- > 0) {
        st = cks_version_delete(cl_client, job, v[n].version);
        if (st != CKS_OK && st != CKS_ERR_NO_SUCH_VERSION) {
            char what[128];
            snprintf(what, sizeof(what), "delete %s version %llu", job,
                     (unsigned long long)v[n].version);
            cl_fail(what, st);
        }
    }
}

/* ---- references
 * -------------------------------------------------------------------------------- */

/* A reference figure: samples pooled over the passes (before and after the
 * cluster runs: the machine is shared and its speed drifts), the median of
 * each pass, and the statistics of all samples. */
#define CL_FIG_SAMPLES 256
typedef struct {
    int ok;
    bench_stats_t st;
    double secs[CL_FIG_SAMPLES];
    unsigned n;
    double pass_med[2];
    unsigned npass;
} cl_fig_t;

static void cl_fig_add(cl_fig_t *f, uint64_t bytes, const double *secs, unsigned n)
{
    double tmp[CL_FIG_SAMPLES];
    bench_stats_t pass;
    unsigned i;
    if (n == 0) {
        return;
    }
    memcpy(tmp, secs, n * sizeof(*secs));
    bench_stats(bytes, tmp, n, &pass);
    if (f->npass < 2) {
        f->pass_med[f->npass++] = pass.median;
    }
    for (i = 0; i < n && f->n < CL_FIG_SAMPLES; i++) {
        f->secs[f->n++] = secs[i];
    }
    memcpy(tmp, f->secs, f->n * sizeof(*tmp));
    bench_stats(bytes, tmp, f->n, &f->st);
    f->ok = 1;
}

typedef struct {
    cl_fig_t encode, encode_crc, decode[CL_MAX_DOWN + 1], memcpy_fig, crc;
    /* raw UCX: [setup][method][dir] */
    cl_fig_t raw[BENCH_NSETUPS][BENCH_NMETHODS][BENCH_NDIRS];
    char raw_desc[BENCH_NSETUPS][2][64];
    char raw_tls[BENCH_NSETUPS][256];
    /* CPU seconds of both processes (this one and the sink, utime + stime)
     * over the transfers of each raw loop, and their bytes: all passes */
    double raw_cpu_s[BENCH_NSETUPS][BENCH_NMETHODS][BENCH_NDIRS];
    uint64_t raw_cpu_bytes[BENCH_NSETUPS][BENCH_NMETHODS][BENCH_NDIRS];
    uint64_t isal_bytes; /* object bytes per encode pass */
} cl_refs_t;

static cl_refs_t refs;

static unsigned cl_ref_reps(void)
{
    return opts.reps > 5 ? opts.reps : 5;
}

/* The server encoder's per-object work (server/encoder.c): CRC-64 of the
 * object, then per stripe encode and CRC-64 of each of the k + m chunks. */
static void cl_encode_crc(cks_ec_h ec, uint8_t *data, uint8_t *parity, uint64_t stripes,
                          uint64_t size)
{
    const unsigned k = opts.k, m = opts.m;
    const uint64_t chunk = opts.chunk;
    volatile uint64_t sink = cks_crc64(0, data, size);
    for (uint64_t s = 0; s < stripes; s++) {
        const uint8_t *d[CKS_EC_MAX_K];
        uint8_t *p[CKS_EC_MAX_M];
        for (unsigned i = 0; i < k; i++) {
            d[i] = data + (s * k + i) * chunk;
        }
        for (unsigned i = 0; i < m; i++) {
            p[i] = parity + (s * m + i) * chunk;
        }
        cks_ec_encode(ec, chunk, d, p);
        for (unsigned i = 0; i < k; i++) {
            sink ^= cks_crc64(0, d[i], chunk);
        }
        for (unsigned i = 0; i < m; i++) {
            sink ^= cks_crc64(0, p[i], chunk);
        }
    }
    (void)sink;
}

static int cl_refs_isal(void)
{
    const unsigned k = opts.k, m = opts.m;
    const uint64_t chunk = opts.chunk;
    const uint64_t stripes = cks_ec_stripe_count(opts.size, k, chunk);
    const uint64_t dbytes = stripes * k * chunk, pbytes = stripes * m * chunk;
    unsigned reps = cl_ref_reps();
    double secs[CL_MAX_REPS + 8];
    bench_buf_t data, parity, scratch, copy;
    char err[BENCH_ERR_LEN] = "";
    cks_ec_h ec;

    if (cks_ec_create(k, m, &ec) != CKS_OK) {
        fprintf(stderr, "ckstore-bench: cks_ec_create(%u, %u) failed\n", k, m);
        return -1;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, dbytes, &data, err, sizeof(err)) != 0) {
        goto err_ec;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, pbytes, &parity, err, sizeof(err)) != 0) {
        goto err_data;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, (size_t)CL_MAX_DOWN * chunk, &scratch, err,
                        sizeof(err)) != 0) {
        goto err_parity;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, dbytes, &copy, err, sizeof(err)) != 0) {
        goto err_scratch;
    }
    bench_fill(data.ptr, dbytes, 99);
    refs.isal_bytes = dbytes;

    /* encode: input (data) bytes per second, one thread, data from DRAM */
    for (unsigned r = 0; r <= reps; r++) {
        double t0 = bench_now();
        for (uint64_t s = 0; s < stripes; s++) {
            const uint8_t *d[CKS_EC_MAX_K];
            uint8_t *p[CKS_EC_MAX_M];
            for (unsigned i = 0; i < k; i++) {
                d[i] = (const uint8_t *)data.ptr + (s * k + i) * chunk;
            }
            for (unsigned i = 0; i < m; i++) {
                p[i] = (uint8_t *)parity.ptr + (s * m + i) * chunk;
            }
            cks_ec_encode(ec, chunk, d, p);
        }
        if (r > 0) { /* the first is the warm-up */
            secs[r - 1] = bench_now() - t0;
        }
    }
    cl_fig_add(&refs.encode, dbytes, secs, reps);

    for (unsigned r = 0; r <= reps; r++) {
        double t0 = bench_now();
        cl_encode_crc(ec, data.ptr, parity.ptr, stripes, dbytes);
        if (r > 0) {
            secs[r - 1] = bench_now() - t0;
        }
    }
    cl_fig_add(&refs.encode_crc, dbytes, secs, reps);

    /* decode with e erasures (data chunks 0 .. e-1 lost, rebuilt into
     * scratch): object bytes rebuilt per second; the check of the first
     * stripe's rebuilt chunks is outside the timing */
    for (unsigned e = 1; e <= CL_MAX_DOWN && e <= m; e++) {
        for (unsigned r = 0; r <= reps; r++) {
            double t0 = bench_now();
            for (uint64_t s = 0; s < stripes; s++) {
                uint8_t *c[CKS_EC_MAX_K + CKS_EC_MAX_M];
                uint8_t present[CKS_EC_MAX_K + CKS_EC_MAX_M];
                for (unsigned i = 0; i < k + m; i++) {
                    c[i] = i < k ? (uint8_t *)data.ptr + (s * k + i) * chunk
                                 : (uint8_t *)parity.ptr + (s * m + i - k) * chunk;
                    present[i] = 1;
                }
                for (unsigned i = 0; i < e; i++) {
                    c[i] = (uint8_t *)scratch.ptr + i * chunk;
                    present[i] = 0;
                }
                if (cks_ec_decode(ec, chunk, c, present) != CKS_OK) {
                    fprintf(stderr, "ckstore-bench: cks_ec_decode failed\n");
                    goto err_copy;
                }
            }
            if (r > 0) {
                secs[r - 1] = bench_now() - t0;
            }
            if (r == 0) {
                uint64_t s = stripes - 1; /* the last stripe is the one left in scratch */
                for (unsigned i = 0; i < e; i++) {
                    if (memcmp((uint8_t *)scratch.ptr + i * chunk,
                               (uint8_t *)data.ptr + (s * k + i) * chunk, chunk) != 0) {
                        fprintf(stderr,
                                "ckstore-bench: ISA-L decode rebuilt other bytes\n");
                        goto err_copy;
                    }
                }
            }
        }
        cl_fig_add(&refs.decode[e], dbytes, secs, reps);
    }

    /* CRC-64 (what a client checks of every whole chunk it reads) */
    for (unsigned r = 0; r <= reps; r++) {
        double t0 = bench_now();
        volatile uint64_t c = cks_crc64(0, data.ptr, dbytes);
        (void)c;
        if (r > 0) {
            secs[r - 1] = bench_now() - t0;
        }
    }
    cl_fig_add(&refs.crc, dbytes, secs, reps);

    /* memcpy of the object size between the same kind of buffers */
    bench_memcpy_once(copy.ptr, data.ptr, opts.size);
    for (unsigned r = 0; r < reps; r++) {
        secs[r] = bench_memcpy_once(copy.ptr, data.ptr, opts.size);
    }
    cl_fig_add(&refs.memcpy_fig, opts.size, secs, reps);

    bench_buf_free(&copy);
    bench_buf_free(&scratch);
    bench_buf_free(&parity);
    bench_buf_free(&data);
    cks_ec_destroy(ec);
    return 0;

err_copy:
    bench_buf_free(&copy);
err_scratch:
    bench_buf_free(&scratch);
err_parity:
    bench_buf_free(&parity);
err_data:
    bench_buf_free(&data);
err_ec:
    cks_ec_destroy(ec);
    fprintf(stderr, "ckstore-bench: ISA-L reference: %s\n", err);
    return -1;
}

/* Raw UCX between this process and the forked sink, at the object size:
 * the put and get directions, methods am, tag and rma, for each setup asked. */
static int cl_refs_raw(void)
{
    const unsigned methods[] = {BENCH_METHOD_AM, BENCH_METHOD_TAG, BENCH_METHOD_RMA};
    double secs[BENCH_MAX_REPS];
    char err[BENCH_ERR_LEN];
    unsigned reps = cl_ref_reps();

    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        bench_raw_session_t sess;
        bench_raw_t *raw;
        if (!(opts.raw_setups & (1u << s))) {
            continue;
        }
        if (bench_child_raw_open(&cl.child, s, opts.size, 200e-6, opts.timeout_s, &raw,
                                 &sess, err, sizeof(err)) != 0) {
            fprintf(stderr, "ckstore-bench: %s\n", err);
            return -1;
        }
        snprintf(refs.raw_desc[s][0], sizeof(refs.raw_desc[s][0]), "%s",
                 bench_raw_describe(raw));
        snprintf(refs.raw_desc[s][1], sizeof(refs.raw_desc[s][1]), "%s", sess.child_desc);
        for (unsigned mi = 0; mi < sizeof(methods) / sizeof(methods[0]); mi++) {
            unsigned m = methods[mi];
            for (unsigned d = 0; d < BENCH_NDIRS; d++) {
                double start = bench_now(), sec;
                double cpu0 = bench_proc_cpu_s(getpid()) + bench_proc_cpu_s(cl.child.pid);
                unsigned n = 0, done = 0;
                for (unsigned r = 0; r < reps + 1; r++) {
                    if (bench_raw_transfer(raw, m, d, opts.size, opts.timeout_s, &sec,
                                           err, sizeof(err)) != 0) {
                        fprintf(stderr, "ckstore-bench: %s (setup %s)\n", err,
                                bench_setup_name(s));
                        bench_child_raw_close(&cl.child, raw, opts.timeout_s);
                        return -1;
                    }
                    done++;
                    if (r > 0) {
                        secs[n++] = sec;
                    }
                    if (n > 0 && bench_now() - start > CL_RAW_BUDGET_S) {
                        break;
                    }
                }
                cl_fig_add(&refs.raw[s][m][d], opts.size, secs, n);
                refs.raw_cpu_s[s][m][d] += bench_proc_cpu_s(getpid()) +
                                           bench_proc_cpu_s(cl.child.pid) - cpu0;
                refs.raw_cpu_bytes[s][m][d] += (uint64_t)done * opts.size;
            }
        }
        snprintf(refs.raw_tls[s], sizeof(refs.raw_tls[s]), "%s",
                 bench_raw_transports(raw));
        bench_child_raw_close(&cl.child, raw, opts.timeout_s);
    }
    return 0;
}

/* Best raw figure of a direction; NAN when none. */
static double cl_raw_best(unsigned d, char *what, size_t len)
{
    double best = NAN;
    snprintf(what, len, "-");
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        for (unsigned m = 0; m < BENCH_NMETHODS; m++) {
            const cl_fig_t *f = &refs.raw[s][m][d];
            if (f->ok && !(f->st.median <= best)) {
                best = f->st.median;
                snprintf(what, len, "%s/%s", bench_setup_name(s), bench_method_name(m));
            }
        }
    }
    return best;
}

/* ---- the measurements
 * -------------------------------------------------------------------------- */

#define CL_MAX_VERSIONS 10
#define CL_MAX_SNAPS    (CL_MAX_REPS * CL_MAX_VERSIONS)

typedef struct {
    /* per snapshot (reps x versions): seconds to STORED and to PROTECTED of
     * all writers; the trainer's stall (the slowest writer's time until its
     * buffers are free again); the version commit (from the last STORED to
     * the last cks_version_finish() returning: the version is committed and
     * protected) */
    double stored[CL_MAX_SNAPS], prot[CL_MAX_SNAPS], tail[CL_MAX_SNAPS];
    double stall[CL_MAX_SNAPS];
    /* CPU seconds per GB of object bytes: servers (all), writers (all) */
    double srv_cpu_snap[CL_MAX_SNAPS], cli_cpu_snap[CL_MAX_SNAPS];
    unsigned nsnap, ncpu_snap;
    double restore[CL_MAX_DOWN + 1][CL_MAX_REPS];
    double srv_cpu_restore[CL_MAX_DOWN + 1][CL_MAX_REPS];
    double cli_cpu_restore[CL_MAX_DOWN + 1][CL_MAX_REPS];
    unsigned nrestore[CL_MAX_DOWN + 1], ncpu_restore[CL_MAX_DOWN + 1];
    uint64_t bytes;      /* per snapshot, all clients */
    uint64_t rank_bytes; /* the largest writer's bytes per snapshot */
    /* memory with `versions` snapshots stored (after the first rep's):
     * arena bytes in use (all servers), the servers' resident memory */
    uint64_t used_bytes, rss, rss_anon, rss_shmem;
    unsigned down_ids[CL_MAX_DOWN];
    unsigned ndown; /* levels measured: 0 (healthy only), 1, 2 */
    /* the servers' encoder threads during the snapshots (cks_cluster_stats()
     * before and after each): object bytes, CPU ns in encode calls, in jobs */
    uint64_t enc_bytes, enc_ns, enc_job_ns;
    /* self-healing: degraded snapshots (STORED seconds, per level of servers
     * down), the repair after the killed servers return (rebuild GB/s,
     * seconds from their start to every version PROTECTED), a snapshot
     * taken while that repair runs (STORED seconds, repair bytes left at its
     * start and end), and a replacement server (empty arena and metadata)
     * taking a killed one's id (the same two figures) */
    double down_stored[CL_MAX_DOWN + 1][CL_MAX_REPS];
    unsigned ndown_stored[CL_MAX_DOWN + 1];
    double repair_gbs[CL_MAX_REPS], repair_prot[CL_MAX_REPS];
    unsigned nrepair;
    double during_stored[CL_MAX_REPS];
    uint64_t during_left0[CL_MAX_REPS], during_left1[CL_MAX_REPS];
    unsigned nduring;
    double repl_gbs, repl_prot;
    int repl_ok;
} cl_main_t;

static cl_main_t mainfig;

/* CPU seconds all live servers we started have used so far (-1: none). */
static double cl_servers_cpu(void)
{
    double t = 0;
    int any = 0;
    for (unsigned i = 0; i < cl.nsrv; i++) {
        double c = cl.srv[i].pid > 0 ? bench_proc_cpu_s(cl.srv[i].pid) : -1;
        if (c >= 0) {
            t += c;
            any = 1;
        }
    }
    return any ? t : -1;
}

/* --hosts: eth0 counters of the client namespace (this thread is in it) and
 * of every server's (through a server's /proc/PID/net/dev); not ok while a
 * server is down. */
static int cl_net_read(cl_netctr_t *c)
{
    memset(c, 0, sizeof(*c));
    if (cks_test_netns_eth0_bytes(&c->cli_rx, &c->cli_tx) != 0) {
        return -1;
    }
    for (unsigned i = 0; i < cl.nsrv; i++) {
        uint64_t rx, tx;
        if (cl.srv[i].pid <= 0 || cks_test_netns_eth0_bytes_of(cl.srv[i].pid, &rx, &tx) != 0) {
            return -1;
        }
        c->srv_rx += rx;
        c->srv_tx += tx;
    }
    c->ok = 1;
    return 0;
}

/* Network bytes of the phases, from GO to the end of the last worker's part
 * (every byte any eth0 sent: TCP/IP headers and acknowledgements included) */
enum { CL_NET_SNAP, CL_NET_RESTORE, CL_NET_RESTORE_COLD, CL_NET_N };
static const char *const cl_net_phase[CL_NET_N] = {
    "snapshot (to PROTECTED)", "restore, warm", "restore, cold (fresh process)"};
static struct {
    uint64_t obj, cli_tx, cli_rx, srv_tx, srv_rx;
    unsigned n;
} cl_netacc[CL_NET_N];

static void cl_net_account(unsigned kind, uint64_t obj_bytes)
{
    cl_netctr_t now;
    if (!opts.hosts || !cl_net_go.ok || cl_net_read(&now) != 0) {
        return;
    }
    cl_netacc[kind].obj += obj_bytes;
    cl_netacc[kind].cli_tx += now.cli_tx - cl_net_go.cli_tx;
    cl_netacc[kind].cli_rx += now.cli_rx - cl_net_go.cli_rx;
    cl_netacc[kind].srv_tx += now.srv_tx - cl_net_go.srv_tx;
    cl_netacc[kind].srv_rx += now.srv_rx - cl_net_go.srv_rx;
    cl_netacc[kind].n++;
}

static double cl_clients_cpu(const cl_res_t *res, unsigned nw)
{
    double t = 0;
    for (unsigned w = 0; w < nw; w++) {
        t += res[w].cpu_s;
    }
    return t;
}

static int cl_restore_phase(const char *job, uint64_t version, unsigned level, int verify,
                            int fresh)
{
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    uint64_t bytes;
    double secs, cpu0, cpu1;
    unsigned n = mainfig.nrestore[level];

    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_RESTORE;
    cmd.flags = (verify ? CL_F_VERIFY : 0) | (fresh ? CL_F_FRESH : 0);
    cmd.version = version;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    bench_progress("rep %u/%u: restore of version %llu, %u server%s down", n + 1, opts.reps,
                   (unsigned long long)version, level, level == 1 ? "" : "s");
    if (cl_workers_run(&cmd, res, opts.readers) != 0) {
        return -1;
    }
    cpu0 = cl_cpu_go;
    cpu1 = cl_servers_cpu();
    cl_aggregate(res, opts.readers, &bytes, NULL, &secs, NULL);
    if (level == 0) {
        cl_net_account(CL_NET_RESTORE, bytes);
    }
    mainfig.restore[level][n] = secs;
    mainfig.nrestore[level]++;
    if (cpu0 >= 0 && cpu1 >= 0) {
        mainfig.srv_cpu_restore[level][mainfig.ncpu_restore[level]] =
            (cpu1 - cpu0) / ((double)bytes / BENCH_GB);
        mainfig.cli_cpu_restore[level][mainfig.ncpu_restore[level]++] =
            cl_clients_cpu(res, opts.readers) / ((double)bytes / BENCH_GB);
    }
    say("  rep %u: restore, %u server%s down: %.2f GB/s%s\n", n + 1, level,
        level == 1 ? "" : "s", (double)bytes / secs / BENCH_GB,
        verify ? " (bytes verified)" : "");
    return 0;
}

/* What the workers' clients do before a snapshot (cl_snapshot's `fresh`). */
enum { CL_CLIENT_KEEP = 0, CL_CLIENT_FRESH = 1, CL_CLIENT_RECONNECT = 2 };

/* One snapshot: `version` of all writers, timed. */
static int cl_snapshot(const char *job, uint64_t version, int fresh, unsigned rep)
{
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    uint64_t bytes, rmax;
    double stored_s, prot_s, cpu0, cpu1, stall = 0, last_stored = 0, last_end = 0;

    if (cl_begin(job, version, CKS_NO_PARENT, 0, opts.clients) != 0) {
        return -1;
    }
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_SNAP;
    cmd.flags = fresh == CL_CLIENT_FRESH ? CL_F_FRESH
                : fresh == CL_CLIENT_RECONNECT ? CL_F_RECONNECT : 0;
    cmd.version = version;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    bench_progress("rep %u/%u: snapshot, version %llu", rep + 1, opts.reps,
                   (unsigned long long)version);
    cks_cluster_stats_t es0, es1;
    int have_es = cks_cluster_stats(cl_client, &es0) == CKS_OK;
    if (cl_workers_run(&cmd, res, opts.clients) != 0) {
        cks_version_abort(cl_client, job, version);
        return -1;
    }
    cpu0 = cl_cpu_go;
    cpu1 = cl_servers_cpu();
    cl_aggregate(res, opts.clients, &bytes, &stored_s, &prot_s, &rmax);
    cl_net_account(CL_NET_SNAP, bytes);
    /* counters since each server's start: a phase with a restart in it, or a
     * server that did not answer both times, is left out */
    if (have_es && cks_cluster_stats(cl_client, &es1) == CKS_OK &&
        es0.answered == es0.servers && es1.answered == es1.servers &&
        es1.encoded_bytes >= es0.encoded_bytes && es1.encode_cpu_ns >= es0.encode_cpu_ns &&
        es1.encoder_cpu_ns >= es0.encoder_cpu_ns) {
        mainfig.enc_bytes += es1.encoded_bytes - es0.encoded_bytes;
        mainfig.enc_ns += es1.encode_cpu_ns - es0.encode_cpu_ns;
        mainfig.enc_job_ns += es1.encoder_cpu_ns - es0.encoder_cpu_ns;
    }
    for (unsigned w = 0; w < opts.clients; w++) {
        /* the trainer's buffers are free at STORED, or, staged, at COPIED */
        double st = (res[w].t_copied > 0 ? res[w].t_copied : res[w].t_stored) - res[w].t_start;
        stall = st > stall ? st : stall;
        last_stored = res[w].t_stored > last_stored ? res[w].t_stored : last_stored;
        last_end = res[w].t_end > last_end ? res[w].t_end : last_end;
    }
    mainfig.bytes = bytes;
    mainfig.rank_bytes = rmax;
    if (mainfig.nsnap < CL_MAX_SNAPS) {
        unsigned n = mainfig.nsnap++;
        mainfig.stored[n] = stored_s;
        mainfig.prot[n] = prot_s;
        mainfig.tail[n] = last_end - last_stored;
        mainfig.stall[n] = stall;
        if (cpu0 >= 0 && cpu1 >= 0) {
            mainfig.srv_cpu_snap[mainfig.ncpu_snap] = (cpu1 - cpu0) / ((double)bytes / BENCH_GB);
            mainfig.cli_cpu_snap[mainfig.ncpu_snap++] =
                cl_clients_cpu(res, opts.clients) / ((double)bytes / BENCH_GB);
        }
    }
    say("  rep %u: snapshot (version %llu): STORED %.2f GB/s, PROTECTED %.2f GB/s, stall "
        "%.0f ms, commit %.0f ms\n",
        rep + 1, (unsigned long long)version, (double)bytes / stored_s / BENCH_GB,
        (double)bytes / prot_s / BENCH_GB, stall * 1e3, (last_end - last_stored) * 1e3);
    return 0;
}

/* A snapshot with `down` servers killed: a version whose coordinator is up
 * (from *version_io on, the next numbers are tried: one whose coordinator is
 * down cannot begin), stored without the dead servers' chunks and committed
 * DEGRADED. Prints STORED and committed bandwidth and the state. */
static int cl_snapshot_down(const char *job, uint64_t *version_io, unsigned down, unsigned rep,
                            const char *label, double *stored_p)
{
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    cks_version_params_t vp;
    cks_version_info_t vi;
    cks_status_t st = CKS_ERR_UNREACHABLE;
    uint64_t bytes, rmax;
    double stored_s, prot_s;

    for (unsigned t = 0; t < 16 && st != CKS_OK; t++, (*version_io)++) {
        memset(&vp, 0, sizeof(vp));
        vp.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT;
        vp.job        = job;
        vp.version    = *version_io;
        vp.nranks     = opts.clients;
        vp.timeout_s  = (uint32_t)(opts.timeout_s * 4);
        st            = cks_version_begin(cl_client, &vp);
        if (st != CKS_OK && st != CKS_ERR_UNREACHABLE && st != CKS_ERR_CONN_LOST &&
            st != CKS_ERR_TIMEOUT) {
            return cl_fail("begin a version with servers down", st);
        }
    }
    if (st != CKS_OK) {
        return cl_fail("begin a version with servers down", st);
    }
    (*version_io)--; /* the one begun */
    memset(&cmd, 0, sizeof(cmd));
    cmd.op      = CL_CMD_SNAP;
    cmd.version = *version_io;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    bench_progress("rep %u/%u: snapshot with %u down, version %llu", rep + 1, opts.reps, down,
                   (unsigned long long)*version_io);
    if (cl_workers_run(&cmd, res, opts.clients) != 0) {
        cks_version_abort(cl_client, job, *version_io);
        return -1;
    }
    cl_aggregate(res, opts.clients, &bytes, &stored_s, &prot_s, &rmax);
    st = cks_version_stat(cl_client, job, *version_io, &vi);
    if (st != CKS_OK) {
        return cl_fail("stat of a version written with servers down", st);
    }
    if (stored_p != NULL) {
        *stored_p = stored_s;
    }
    if (label != NULL) {
        say("  rep %u: snapshot %s (version %llu): STORED %.2f GB/s, committed %.2f GB/s, %s\n",
            rep + 1, label, (unsigned long long)*version_io,
            (double)bytes / stored_s / BENCH_GB, (double)bytes / prot_s / BENCH_GB,
            cks_vstate_string(vi.state));
        return 0;
    }
    if (down <= CL_MAX_DOWN && mainfig.ndown_stored[down] < CL_MAX_REPS) {
        mainfig.down_stored[down][mainfig.ndown_stored[down]++] = stored_s;
    }
    say("  rep %u: snapshot with %u of %u servers down (version %llu): STORED %.2f GB/s, "
        "committed %.2f GB/s, %s, redundancy %u/%u, %llu chunks missing\n",
        rep + 1, down, cl.nsrv, (unsigned long long)*version_io,
        (double)bytes / stored_s / BENCH_GB, (double)bytes / prot_s / BENCH_GB,
        cks_vstate_string(vi.state), vi.redundancy, vi.ec_m, (unsigned long long)vi.missing);
    return 0;
}

/* Arena bytes in use and the servers' resident memory, now. */
static void cl_memory_now(void)
{
    uint64_t used = 0;
    if (cks_cluster_usage(cl_client, &used, NULL) == CKS_OK) {
        mainfig.used_bytes = used;
    }
    mainfig.rss = mainfig.rss_anon = mainfig.rss_shmem = 0;
    for (unsigned i = 0; i < cl.nsrv; i++) {
        uint64_t rss, anon, shmem;
        if (cl.srv[i].pid > 0 && bench_proc_rss(cl.srv[i].pid, &rss, &anon, &shmem) == 0) {
            mainfig.rss += rss;
            mainfig.rss_anon += anon;
            mainfig.rss_shmem += shmem;
        }
    }
}

/* ---- cold and warm, per phase -----------------------------------------------------
 * What a user meets first is cold: the first snapshot after the servers
 * start, and the restore by a replacement rank (a fresh client with fresh
 * buffers the servers have never seen). The main figures are medians over
 * the repetitions; these keep the first apart from the later ones. The
 * snapshots need no run of their own (mainfig's first entry is the first
 * snapshot after start); the fresh restore is one more restore per
 * repetition, after the warm one, by fresh clients. The reference for
 * cks_mem_alloc() is the first touch of as many 4 KiB pages of anonymous
 * memory by one thread, measured next to it. */

static struct {
    double fresh_s[CL_MAX_REPS];        /* restore by fresh clients into fresh buffers */
    double fresh_alloc_ms_gib[CL_MAX_REPS * CL_MAX_CLIENTS]; /* their cks_mem_alloc() */
    double touch_ms_gib[CL_MAX_REPS];   /* first touch of 4 KiB pages, one thread */
    unsigned nfresh, nfresh_alloc, ntouch;
    /* mainfig's per-snapshot and healthy-restore seconds in the order they
     * were measured (the main report sorts mainfig's arrays in place) */
    double stored[CL_MAX_SNAPS], prot[CL_MAX_SNAPS], stall[CL_MAX_SNAPS];
    double restore[CL_MAX_REPS];
    unsigned nsnap, nrestore;
} cwfig;

/* Keep the measured order of mainfig's figures (after the measurements). */
static void cl_cw_keep(void)
{
    cwfig.nsnap = mainfig.nsnap;
    memcpy(cwfig.stored, mainfig.stored, sizeof(cwfig.stored));
    memcpy(cwfig.prot, mainfig.prot, sizeof(cwfig.prot));
    memcpy(cwfig.stall, mainfig.stall, sizeof(cwfig.stall));
    cwfig.nrestore = mainfig.nrestore[0];
    memcpy(cwfig.restore, mainfig.restore[0], sizeof(cwfig.restore));
}

/* ms per GiB to fault in `len` bytes of fresh anonymous 4 KiB pages by
 * writing them (NAN: no memory) */
static double cl_cw_touch_ms_gib(uint64_t len)
{
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double t0, t1;
    if (p == MAP_FAILED) {
        return NAN;
    }
    madvise(p, len, MADV_NOHUGEPAGE); /* the pages cks_mem_alloc() gets here: 4 KiB */
    t0 = bench_now();
    memset(p, 1, len);
    t1 = bench_now();
    munmap(p, len);
    return (t1 - t0) * 1e3 / ((double)len / (1u << 30));
}

static int cl_cw_restore_fresh(const char *job, uint64_t version)
{
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    uint64_t bytes, touch = 0;
    double secs;

    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_RESTORE;
    cmd.flags = CL_F_FRESH;
    cmd.version = version;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    if (opts.hosts && cwfig.nfresh < opts.reps) {
        /* fresh processes, forked at the start, that have not used UCX yet */
        unsigned rep = cwfig.nfresh;
        bench_progress("restore of version %llu by fresh processes", (unsigned long long)version);
        int rc = cl_workers_run_at(cl_cold_slot(rep, 0), &cmd, res, opts.readers);
        for (unsigned w = 0; w < opts.readers; w++) {
            cl_worker_quit(cl_cold_slot(rep, w)); /* their buffers go with them */
        }
        if (rc != 0) {
            return -1;
        }
    } else {
        bench_progress("restore of version %llu by fresh clients", (unsigned long long)version);
        if (cl_workers_run(&cmd, res, opts.readers) != 0) {
            return -1;
        }
    }
    cl_aggregate(res, opts.readers, &bytes, NULL, &secs, NULL);
    cl_net_account(CL_NET_RESTORE_COLD, bytes);
    if (cwfig.nfresh < CL_MAX_REPS) {
        cwfig.fresh_s[cwfig.nfresh++] = secs;
    }
    for (unsigned w = 0; w < opts.readers; w++) {
        if (res[w].alloc_bytes > 0 && cwfig.nfresh_alloc < CL_MAX_REPS * CL_MAX_CLIENTS) {
            cwfig.fresh_alloc_ms_gib[cwfig.nfresh_alloc++] =
                res[w].alloc_s * 1e3 / ((double)res[w].alloc_bytes / (1u << 30));
            touch = res[w].alloc_bytes > touch ? res[w].alloc_bytes : touch;
        }
    }
    if (touch > 0 && cwfig.ntouch < CL_MAX_REPS) {
        double ms = cl_cw_touch_ms_gib(touch);
        if (isfinite(ms)) {
            cwfig.touch_ms_gib[cwfig.ntouch++] = ms;
        }
    }
    say("  restore by fresh %s into fresh buffers: %.2f GB/s\n",
        opts.hosts ? "processes" : "clients", (double)bytes / secs / BENCH_GB);
    return 0;
}

/* ---- self-healing: repair after servers return, and a replacement ---------------- */

/* The repair figures of the servers in ids: *left_p chunk bytes they still
 * lack, *done_p bytes they rebuilt since they started. 1 when each has
 * caught up and lacks nothing. */
static int cl_repair_left(const unsigned *ids, unsigned n, uint64_t *left_p, uint64_t *done_p)
{
    int all = 1;
    *left_p = *done_p = 0;
    for (unsigned i = 0; i < n; i++) {
        cks_repair_info_t ri;
        if (cks_repair_status(cl_client, ids[i], &ri) != CKS_OK) {
            all = 0;
            continue;
        }
        *left_p += ri.bytes_left;
        *done_p += ri.bytes_done;
        all = all && ri.caught_up && ri.chunks_left == 0;
    }
    return all;
}

/* How a repair went, as cl_repair_wait() saw it (sampled every 20 ms). */
typedef struct {
    uint64_t done;       /* chunk bytes the servers rebuilt */
    double first, last;  /* seconds since t0 of the first sample that saw
                            rebuilt bytes, and of the one that saw them all */
    double protected_s;  /* seconds since t0 until every version was PROTECTED */
} cl_repair_t;

/* Wait (bounded) until the servers in ids lack nothing and every version in
 * vs is PROTECTED. 0, or -1 (said why). */
static int cl_repair_wait(const char *job, const unsigned *ids, unsigned nids,
                          const uint64_t *vs, unsigned nvs, double t0, cl_repair_t *r)
{
    double deadline = bench_now() + opts.timeout_s * 4 + 30;
    uint64_t left = 0, done = 0;
    unsigned v = 0;
    memset(r, 0, sizeof(*r));
    r->first = -1;
    while (bench_now() < deadline) {
        int clean = cl_repair_left(ids, nids, &left, &done);
        double now = bench_now() - t0;
        if (done > r->done) {
            r->first = r->first < 0 ? now : r->first;
            r->last  = now;
            r->done  = done;
        }
        if (clean) {
            for (; v < nvs; v++) { /* a version PROTECTED stays so: ask the rest */
                cks_version_info_t vi;
                if (cks_version_stat(cl_client, job, vs[v], &vi) != CKS_OK ||
                    vi.state != CKS_VSTATE_PROTECTED) {
                    break;
                }
            }
            if (v == nvs) {
                r->protected_s = bench_now() - t0;
                return 0;
            }
        }
        usleep(20 * 1000);
    }
    fprintf(stderr,
            "ckstore-bench: repair did not end in %.0f s (%llu bytes left, version %llu of %u "
            "not PROTECTED)\n",
            opts.timeout_s * 4 + 30, (unsigned long long)left,
            (unsigned long long)(v < nvs ? vs[v] : 0), nvs);
    return -1;
}

/* The rebuild rate of a repair: its bytes over the time between the first
 * and the last sample that saw them grow (one sample period more, so that
 * a repair within one period is not counted as instant); NAN when nothing
 * was rebuilt. */
static double cl_repair_gbs(const cl_repair_t *r)
{
    return r->done > 0 ? (double)r->done / (r->last - r->first + 0.02) / BENCH_GB : NAN;
}

/* The servers' repair pacing cap (--repair-rate), bytes/s; 0: none or unknown. */
static uint64_t cl_repair_cap(unsigned id)
{
    cks_repair_info_t ri;
    return cks_repair_status(cl_client, id, &ri) == CKS_OK ? ri.rate_cap : 0;
}

static void cl_say_repair(unsigned rep, const char *what, const cl_repair_t *r, unsigned id)
{
    uint64_t cap = cl_repair_cap(id);
    char capbuf[80] = "no cap";
    if (cap > 0) {
        snprintf(capbuf, sizeof(capbuf), "capped at %.0f MiB/s while clients move data",
                 (double)cap / (1 << 20));
    }
    say("  rep %u: %s: %.1f MiB rebuilt at %.2f GB/s (%s), from %.2f s to %.2f s after the "
        "start; every version PROTECTED after %.2f s\n",
        rep + 1, what, (double)r->done / (1 << 20), cl_repair_gbs(r), capbuf,
        r->first < 0 ? 0.0 : r->first, r->last, r->protected_s);
}

/* Empty a server's metadata directory and remove its arena file (it is down). */
static void cl_server_wipe(cl_server_t *s)
{
    static const char *const md_files[] = {"data.mdb", "lock.mdb"};
    char path[256];
    unlink(s->arena);
    for (unsigned f = 0; f < 2; f++) {
        snprintf(path, sizeof(path), "%s/%s", s->ddir, md_files[f]);
        unlink(path);
    }
}

/* After the killed servers were restarted at t_spawn: in odd repetitions a
 * snapshot taken at once, while they rebuild what they missed; in the
 * others the time until every kept version is PROTECTED again and the bytes
 * rebuilt. In the last repetition, a replacement: one of them killed again,
 * its arena and metadata deleted, started empty with its id, and timed the
 * same way. */
static int cl_heal_phase(const char *job, uint64_t first, uint64_t newest,
                         const uint64_t *downv, unsigned rep, double t_spawn)
{
    unsigned ids[CL_MAX_DOWN], nids = mainfig.ndown;
    uint64_t vs[CL_MAX_VERSIONS + CL_MAX_DOWN + 1], done = 0, left0 = 0, left1 = 0;
    unsigned nvs = 0;
    cl_repair_t r;

    for (unsigned d = 0; d < nids; d++) {
        ids[d] = mainfig.down_ids[d];
    }
    for (uint64_t v = first; v <= newest; v++) {
        vs[nvs++] = v;
    }
    for (unsigned d = 0; d < nids; d++) {
        vs[nvs++] = downv[d];
    }
    if (opts.reps > 1 && rep % 2 == 1) {
        double stored_s = 0;
        uint64_t hv = 2000000 + (uint64_t)rep * 1000;
        /* the repair starts once the servers back have caught up: the
         * snapshot starts when it has (bounded) */
        double until = bench_now() + opts.timeout_s + 10;
        while (!cl_repair_left(ids, nids, &left0, &done) && left0 == 0 && done == 0 &&
               bench_now() < until) {
            usleep(5 * 1000);
        }
        if (cl_snapshot_down(job, &hv, 0, rep, "while repair runs", &stored_s) != 0) {
            return -1;
        }
        cl_repair_left(ids, nids, &left1, &done);
        say("  rep %u: repair had %.0f MiB left when that snapshot began, %.0f MiB when it "
            "was stored\n",
            rep + 1, (double)left0 / (1 << 20), (double)left1 / (1 << 20));
        if (mainfig.nduring < CL_MAX_REPS) {
            mainfig.during_stored[mainfig.nduring] = stored_s;
            mainfig.during_left0[mainfig.nduring]  = left0;
            mainfig.during_left1[mainfig.nduring++] = left1;
        }
        vs[nvs++] = hv;
        if (cl_repair_wait(job, ids, nids, vs, nvs, t_spawn, &r) < 0) {
            return -1;
        }
        cks_status_t st = cks_version_delete(cl_client, job, hv);
        if (st != CKS_OK) {
            return cl_fail("delete", st);
        }
        nvs--;
    } else {
        bench_progress("rep %u/%u: repair after the servers' return", rep + 1, opts.reps);
        if (cl_repair_wait(job, ids, nids, vs, nvs, t_spawn, &r) < 0) {
            return -1;
        }
        cl_say_repair(rep, nids == 1 ? "repair by the server back" : "repair by the servers back",
                      &r, ids[0]);
        if (mainfig.nrepair < CL_MAX_REPS && r.done > 0) {
            mainfig.repair_gbs[mainfig.nrepair]   = cl_repair_gbs(&r);
            mainfig.repair_prot[mainfig.nrepair++] = r.protected_s;
        }
    }
    if (rep + 1 < opts.reps || nids == 0) {
        return 0;
    }
    cl_server_t *s = &cl.srv[ids[0]];
    bench_progress("rep %u/%u: a replacement for server %u", rep + 1, opts.reps, s->id);
    cl_server_kill(s);
    cl_server_wipe(s);
    double t0 = bench_now();
    if (cl_server_spawn(s, opts.arena) != 0 ||
        cl_server_wait(s, bench_now() + opts.timeout_s + 10) != 0) {
        return -1;
    }
    if (cl_repair_wait(job, ids, 1, vs, nvs, t0, &r) < 0) {
        return -1;
    }
    char what[80];
    snprintf(what, sizeof(what), "replacement of server %u (empty arena and metadata)", s->id);
    cl_say_repair(rep, what, &r, s->id);
    mainfig.repl_gbs  = cl_repair_gbs(&r);
    mainfig.repl_prot = r.protected_s;
    mainfig.repl_ok   = 1;
    return 0;
}

static int cl_measure_main(void)
{
    char job[64];
    int fresh = CL_CLIENT_FRESH;

    snprintf(job, sizeof(job), "bench-%d", (int)getpid());
    mainfig.ndown = 0;
    if (opts.local > 0 && !opts.no_degraded) {
        mainfig.ndown = opts.m < CL_MAX_DOWN ? opts.m : CL_MAX_DOWN;
        /* two servers of one rack (rack r1 of 3): a rack lost */
        mainfig.down_ids[0] = 1;
        mainfig.down_ids[1] = 1 + CL_RACKS < cl.nsrv ? 1 + CL_RACKS : cl.nsrv - 1;
        if (cl.nsrv - mainfig.ndown < opts.k) {
            mainfig.ndown = cl.nsrv > opts.k ? cl.nsrv - opts.k : 0;
        }
    }
    for (unsigned rep = 0; rep < opts.reps; rep++) {
        uint64_t first = (uint64_t)rep * opts.versions + 1;
        uint64_t newest = first + opts.versions - 1;
        uint64_t downv[CL_MAX_DOWN] = {0};

        if (cl_client_connect() != 0) {
            return -1;
        }
        /* `versions` snapshots in a row, all kept */
        for (uint64_t v = first; v <= newest; v++) {
            if (cl_snapshot(job, v, fresh, rep) != 0) {
                return -1;
            }
            fresh = CL_CLIENT_KEEP;
        }
        if (rep == 0) {
            cl_memory_now();
        }
        if (cl_restore_phase(job, newest, 0, rep == 0, 0) != 0) {
            return -1;
        }
        if (cl_cw_restore_fresh(job, newest) != 0) { /* cold and warm: a replacement rank */
            return -1;
        }
        for (unsigned d = 0; d < mainfig.ndown; d++) {
            cl_server_kill(&cl.srv[mainfig.down_ids[d]]);
            /* a fresh client: a replacement rank restoring after the failure */
            if (cl_restore_phase(job, newest, d + 1, rep == 0, 1) != 0) {
                return -1;
            }
            /* and a checkpoint written with them down (DEGRADED) */
            downv[d] = 1000000 + (uint64_t)rep * 1000 + d * 100;
            if (cl_snapshot_down(job, &downv[d], d + 1, rep, NULL, NULL) != 0) {
                return -1;
            }
        }
        if (mainfig.ndown > 0) {
            double deadline = bench_now() + opts.timeout_s + 10;
            double t_spawn  = bench_now();
            bench_progress("rep %u/%u: restarting the killed servers", rep + 1, opts.reps);
            for (unsigned d = 0; d < mainfig.ndown; d++) {
                if (cl_server_spawn(&cl.srv[mainfig.down_ids[d]], opts.arena) != 0) {
                    return -1;
                }
            }
            for (unsigned d = 0; d < mainfig.ndown; d++) {
                if (cl_server_wait(&cl.srv[mainfig.down_ids[d]], deadline) != 0) {
                    return -1;
                }
            }
            /* the trainer goes on with the replacement ranks' clients (the
             * last degraded restore's): they find the restarted servers */
            fresh = CL_CLIENT_RECONNECT;
            if (cl_client_connect() != 0) {
                return -1;
            }
            if (cl_heal_phase(job, first, newest, downv, rep, t_spawn) != 0) {
                return -1;
            }
        }
        for (uint64_t v = first; v <= newest; v++) {
            cks_status_t st = cks_version_delete(cl_client, job, v);
            if (st != CKS_OK) {
                return cl_fail("delete", st);
            }
        }
        for (unsigned d = 0; d < mainfig.ndown; d++) {
            cks_status_t st = cks_version_delete(cl_client, job, downv[d]);
            if (st != CKS_OK) {
                return cl_fail("delete", st);
            }
        }
    }
    bench_progress_clear();
    cl_cw_keep(); /* cold and warm, per phase */
    return 0;
}

/* ---- PEC
 * -------------------------------------------------------------------------------------------
 */

typedef struct {
    unsigned experts, per_step;
    uint64_t full_bytes, pec_bytes;       /* per version, all ranks */
    uint64_t full_rank_max, pec_rank_max; /* largest rank's bytes */
    uint64_t full_stored, pec_stored;     /* arena bytes per version (parity, padding) */
    double full_s[CL_MAX_REPS], pec_s[CL_MAX_REPS * 4];
    double full_stored_s[CL_MAX_REPS], pec_stored_s[CL_MAX_REPS * 4];
    unsigned nfull, npec;
    int ok;
} cl_pec_fig_t;

static cl_pec_fig_t pecfig[2];

/* Arena bytes in use, all servers (shows what retention keeps). */
static void cl_say_used(void)
{
    uint64_t used = 0;
    if (!opts.verbose || cks_cluster_usage(cl_client, &used, NULL) != CKS_OK) {
        return;
    }
    say(" [%.0f MiB used:", (double)used / (1 << 20));
    /* each server alone (a plain connection answers with its own arena) */
    for (unsigned i = 0; i < cl.nsrv; i++) {
        cks_client_params_t cp;
        cks_client_h c;
        char addr[32];
        memset(&cp, 0, sizeof(cp));
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", cl.srv[i].port);
        cp.field_mask = CKS_CLIENT_FIELD_SERVER;
        cp.server = addr;
        if (cl.srv[i].pid > 0 && cks_client_create(&cp, &c) == CKS_OK) {
            if (cks_cluster_usage(c, &used, NULL) == CKS_OK) {
                say(" %.0f", (double)used / (1 << 20));
            }
            cks_client_destroy(c);
        }
    }
    say("]");
}

static int cl_measure_pec_one(cl_pec_fig_t *f, unsigned experts)
{
    char job[64];
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    cks_pec_params_t p;
    uint64_t version = 0, bytes, rmax;
    double stored_s, prot_s;
    unsigned npec;

    cl_pec_params(experts, opts.clients, &p);
    f->experts = experts;
    f->per_step = p.per_step;
    npec = (experts + p.per_step - 1) / p.per_step; /* one period */
    npec = npec > opts.reps ? npec : opts.reps;
    snprintf(job, sizeof(job), "bench-%d-pec%u", (int)getpid(), experts);

    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_PEC_SETUP;
    cmd.experts = experts;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    if (cl_workers_run(&cmd, res, opts.clients) != 0) {
        return -1;
    }
    say("  %2u experts, full:", experts);
    /* full checkpoints: each a version of its own; the previous one deleted
     * first (untimed), so that the arenas hold one model at a time */
    for (unsigned rep = 0; rep < opts.reps; rep++) {
        if (version > 0) {
            cks_status_t st = cks_version_delete(cl_client, job, version);
            if (st != CKS_OK) {
                return cl_fail("delete", st);
            }
        }
        version++;
        if (cl_begin(job, version, CKS_NO_PARENT, 0, opts.clients) != 0) {
            return -1;
        }
        cmd.op = CL_CMD_PEC_SNAP;
        cmd.flags = CL_F_FULL;
        cmd.version = version;
        cmd.ckpt = 0;
        if (cl_workers_run(&cmd, res, opts.clients) != 0) {
            cks_version_abort(cl_client, job, version);
            return -1;
        }
        cl_aggregate(res, opts.clients, &bytes, &stored_s, &prot_s, &rmax);
        f->full_bytes = bytes;
        f->full_stored = cl_sum_stored(res, opts.clients);
        f->full_rank_max = rmax;
        f->full_stored_s[f->nfull] = stored_s;
        f->full_s[f->nfull++] = prot_s;
        say(" %.2f s", prot_s);
        cl_say_used();
    }
    say("; PEC (K = %u):", p.per_step);
    /* partial-expert checkpoints: each the child of the one before, K experts
     * per layer (round-robin), retention 2 (the oldest chunks that no
     * retained manifest uses are freed) */
    for (unsigned c = 1; c <= npec; c++) {
        uint64_t parent = version++;
        if (cl_begin(job, version, parent, 2, opts.clients) != 0) {
            return -1;
        }
        cmd.op = CL_CMD_PEC_SNAP;
        cmd.flags = 0;
        cmd.version = version;
        cmd.ckpt = c;
        if (cl_workers_run(&cmd, res, opts.clients) != 0) {
            cks_version_abort(cl_client, job, version);
            return -1;
        }
        cl_aggregate(res, opts.clients, &bytes, &stored_s, &prot_s, &rmax);
        if (f->npec > 0 && bytes != f->pec_bytes) {
            fprintf(stderr,
                    "ckstore-bench: PEC versions of different sizes (%llu, %llu)\n",
                    (unsigned long long)bytes, (unsigned long long)f->pec_bytes);
        }
        f->pec_bytes = bytes;
        f->pec_stored = cl_sum_stored(res, opts.clients);
        f->pec_rank_max = rmax > f->pec_rank_max ? rmax : f->pec_rank_max;
        f->pec_stored_s[f->npec] = stored_s;
        f->pec_s[f->npec++] = prot_s;
        say(" %.2f s", prot_s);
        cl_say_used();
    }
    /* the newest version restores as a whole model, each object from the
     * version that wrote it (untimed) */
    cmd.op = CL_CMD_PEC_VERIFY;
    cmd.flags = 0;
    cmd.version = version;
    if (cl_workers_run(&cmd, res, opts.clients) != 0) {
        return -1;
    }
    say("; restore of version %llu verified", (unsigned long long)version);
    cl_release_job(job, version + 1);
    cl_say_used();
    say("\n");
    f->ok = 1;
    return 0;
}

static int cl_measure_pec(void)
{
    static const unsigned experts[2] = {8, 16};
    if (cl_client == NULL && cl_client_connect() != 0) {
        return -1;
    }
    for (unsigned i = 0; i < 2; i++) {
        if (cl_measure_pec_one(&pecfig[i], experts[i]) != 0) {
            return -1;
        }
    }
    return 0;
}

/* ---- results
 * -------------------------------------------------------------------------------------
 */

static void cl_rec_common(bench_rec_t *r, const char *op)
{
    bench_rec_str(r, "op", op);
    bench_rec_u64(r, "k", opts.k);
    bench_rec_u64(r, "m", opts.m);
    bench_rec_u64(r, "chunk", opts.chunk);
}

static void cl_rec_stats(bench_rec_t *r, const bench_stats_t *st)
{
    bench_rec_f64(r, "gbps", st->median);
    bench_rec_f64(r, "min_gbps", st->min);
    bench_rec_f64(r, "max_gbps", st->max);
    bench_rec_u64(r, "reps", st->n);
}

static void cl_rec_ref(bench_rec_t *r, const cl_fig_t *f)
{
    cl_rec_stats(r, &f->st);
    bench_rec_f64(r, "before_gbps", f->pass_med[0]);
    bench_rec_f64(r, "after_gbps", f->npass > 1 ? f->pass_med[1] : NAN);
}

static void cl_say_ref(const char *what, const cl_fig_t *f)
{
    say("  %-58s %6.2f %7.2f %6.2f\n", what, f->st.median, f->pass_med[0],
        f->npass > 1 ? f->pass_med[1] : NAN);
}

static void cl_print_refs(bench_report_t *rep)
{
    char sz[32], csz[32];
    bench_rec_t *r;

    say("\nreferences, this run, one thread, GB/s = 10^9 B/s: median of the %u samples "
        "taken "
        "before and after the cluster runs, and of each pass\n",
        refs.encode.n);
    bench_size_str(opts.chunk, csz, sizeof(csz));
    bench_size_str(opts.size, sz, sizeof(sz));
    say("  %-58s %6s %7s %6s\n", "", "GB/s", "before", "after");
    cl_say_ref("ISA-L encode RS(k,m), data bytes/s (isal_encode_raw)", &refs.encode);
    cl_say_ref("  + CRC-64 of object and every chunk, as a server encoder",
               &refs.encode_crc);
    for (unsigned e = 1; e <= CL_MAX_DOWN; e++) {
        if (refs.decode[e].ok) {
            char what[80];
            snprintf(what, sizeof(what),
                     "ISA-L decode, %u data chunk%s lost, object bytes/s", e,
                     e > 1 ? "s" : "");
            cl_say_ref(what, &refs.decode[e]);
        }
    }
    cl_say_ref("CRC-64 (crc64_ecma_refl)", &refs.crc);
    cl_say_ref("memcpy of one object (anonymous THP buffers)", &refs.memcpy_fig);
    say("  (RS(%u,%u), %s chunks, %s of object data per pass, from DRAM)\n", opts.k,
        opts.m, csz, sz);

    r = bench_report_add(rep);
    if (r != NULL) {
        cl_rec_common(r, "isal_encode_raw");
        bench_rec_u64(r, "size", refs.isal_bytes);
        bench_rec_u64(r, "threads", 1);
        cl_rec_ref(r, &refs.encode);
    }
    r = bench_report_add(rep);
    if (r != NULL) {
        cl_rec_common(r, "isal_encode_crc_raw");
        bench_rec_u64(r, "size", refs.isal_bytes);
        bench_rec_u64(r, "threads", 1);
        cl_rec_ref(r, &refs.encode_crc);
    }
    for (unsigned e = 1; e <= CL_MAX_DOWN; e++) {
        if (refs.decode[e].ok && (r = bench_report_add(rep)) != NULL) {
            cl_rec_common(r, "isal_decode_raw");
            bench_rec_u64(r, "erasures", e);
            bench_rec_u64(r, "size", refs.isal_bytes);
            bench_rec_u64(r, "threads", 1);
            cl_rec_ref(r, &refs.decode[e]);
        }
    }
    if ((r = bench_report_add(rep)) != NULL) {
        bench_rec_str(r, "op", "crc64_raw");
        bench_rec_u64(r, "size", refs.isal_bytes);
        bench_rec_u64(r, "threads", 1);
        cl_rec_ref(r, &refs.crc);
    }
    if ((r = bench_report_add(rep)) != NULL) {
        bench_rec_str(r, "op", "memcpy");
        bench_rec_u64(r, "size", opts.size);
        cl_rec_ref(r, &refs.memcpy_fig);
    }

    if (opts.no_raw) {
        say("  raw UCX: not measured (--no-raw)\n");
        return;
    }
    say("\nraw UCX between this process and a forked sink, %s, GB/s (median of the "
        "samples of "
        "both passes; put and get before / after)\n",
        sz);
    say("  %-16s %6s %6s  %13s %13s   %s\n", "setup/method", "put", "get", "put b/a",
        "get b/a", "buffers (ours | sink's)");
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        for (unsigned m = 0; m < BENCH_NMETHODS; m++) {
            const cl_fig_t *fp = &refs.raw[s][m][BENCH_DIR_PUT];
            const cl_fig_t *fg = &refs.raw[s][m][BENCH_DIR_GET];
            char name[32];
            if (!fp->ok && !fg->ok) {
                continue;
            }
            snprintf(name, sizeof(name), "%s/%s", bench_setup_name(s),
                     bench_method_name(m));
            say("  %-16s %6.2f %6.2f  %6.2f/%-6.2f %6.2f/%-6.2f   %s | %s\n", name,
                fp->st.median, fg->st.median, fp->pass_med[0],
                fp->npass > 1 ? fp->pass_med[1] : NAN, fg->pass_med[0],
                fg->npass > 1 ? fg->pass_med[1] : NAN, refs.raw_desc[s][0],
                refs.raw_desc[s][1]);
            for (unsigned d = 0; d < BENCH_NDIRS; d++) {
                const cl_fig_t *f = &refs.raw[s][m][d];
                if (!f->ok || (r = bench_report_add(rep)) == NULL) {
                    continue;
                }
                bench_rec_str(r, "op", "raw");
                bench_rec_str(r, "dir", bench_dir_name(d));
                bench_rec_str(r, "setup", bench_setup_name(s));
                bench_rec_str(r, "method", bench_method_name(m));
                bench_rec_u64(r, "size", opts.size);
                cl_rec_ref(r, f);
                bench_rec_str(r, "buffers", refs.raw_desc[s][0]);
                bench_rec_str(r, "peer_buffers", refs.raw_desc[s][1]);
                bench_rec_str(r, "transports", refs.raw_tls[s]);
            }
        }
    }
}

/* One row of the main table and its record. */
static void cl_main_row(bench_report_t *rep, const char *op, unsigned down, double *secs,
                        unsigned n, double ref, const char *ref_what, double healthy,
                        double target)
{
    bench_stats_t st;
    bench_rec_t *r;
    double ratio;

    if (n == 0) {
        return;
    }
    bench_stats(mainfig.bytes, secs, n, &st);
    ratio = st.median / ref;
    say("%-18s %4u %7.2f %6.2f %6.2f  %-28s", op, down, st.median, st.min, st.max,
        ref_what);
    if (isfinite(ratio)) {
        say(" %6.2f %6.2f", ref, ratio);
    } else {
        say(" %6s %6s", "-", "-");
    }
    if (isfinite(healthy)) {
        say("  %5.2f", st.median / healthy);
    } else {
        say("  %5s", "-");
    }
    if (isfinite(target) && isfinite(ratio)) {
        say("  %s %.1f %s", ratio >= target ? ">=" : "< ", target,
            ratio >= target ? "met" : "NOT met");
    }
    say("\n");
    if ((r = bench_report_add(rep)) == NULL) {
        return;
    }
    cl_rec_common(r, op);
    bench_rec_u64(r, "servers", cl.nmap);
    bench_rec_u64(r, "clients", cl.nworkers);
    bench_rec_u64(r, "objects", opts.objects);
    bench_rec_u64(r, "size", opts.size);
    bench_rec_u64(r, "bytes", mainfig.bytes);
    if (strcmp(op, "restore_degraded") == 0) {
        bench_rec_u64(r, "servers_down", down);
    }
    cl_rec_stats(r, &st);
    bench_rec_f64(r, "ratio", ratio);
    bench_rec_f64(r, "ref_gbps", ref);
    bench_rec_str(r, "ref", ref_what);
    if (isfinite(healthy)) {
        bench_rec_f64(r, "healthy_ratio", st.median / healthy);
    }
    if (isfinite(target)) {
        bench_rec_f64(r, "target_ratio", target);
    }
    if (strcmp(op, "snapshot_protected") == 0) {
        bench_rec_f64(r, "protect_tail_ms", cl_median(mainfig.tail, mainfig.nsnap) * 1e3);
        if (opts.local > 0) {
            bench_rec_u64(r, "encoders_per_server", opts.encoders);
        }
        if (mainfig.used_bytes > 0) {
            bench_rec_u64(r, "arena_used_bytes", mainfig.used_bytes);
        }
    }
}

static void cl_print_main(bench_report_t *rep)
{
    char put_what[40], get_what[40], what[64], sz[32];
    double raw_put = cl_raw_best(BENCH_DIR_PUT, put_what, sizeof(put_what));
    double raw_get = cl_raw_best(BENCH_DIR_GET, get_what, sizeof(get_what));
    double bound = refs.memcpy_fig.st.median * opts.k / (opts.k + opts.m);
    double tails[CL_MAX_REPS];
    bench_stats_t healthy;
    double tail_s;

    if (strcmp(cl_mix.kind, "moe") == 0) {
        snprintf(what, sizeof(what), "the MoE mix (%u objects, %.0f MiB)", cl_mix.n,
                 (double)cl_mix.bytes / (1 << 20));
    } else {
        char osz[32];
        snprintf(what, sizeof(what), "%u objects x %s", opts.objects,
                 bench_size_str(opts.size, osz, sizeof(osz)));
    }
    say("\nckstore cluster: %u servers, RS(%u,%u), %s chunks, %u writer%s x %s = %.0f MiB "
        "per snapshot, %u reader%s; GB/s = 10^9 B/s of object bytes, median of %u\n",
        cl.nmap, opts.k, opts.m, bench_size_str(opts.chunk, sz, sizeof(sz)), opts.clients,
        opts.clients > 1 ? "s" : "", what, (double)mainfig.bytes / (1 << 20), opts.readers,
        opts.readers > 1 ? "s" : "", mainfig.nsnap);
    say("%-18s %4s %7s %6s %6s  %-28s %6s %6s  %5s  %s\n", "op", "down", "GB/s", "min",
        "max", "reference", "ref", "ratio", "/heal", "target");
    snprintf(what, sizeof(what), "raw UCX put (%s)", put_what);
    cl_main_row(rep, "snapshot_stored", 0, mainfig.stored, mainfig.nsnap, raw_put, what,
                NAN, NAN);
    snprintf(what, sizeof(what), "memcpy x k/(k+m)");
    cl_main_row(rep, "snapshot_protected", 0, mainfig.prot, mainfig.nsnap, bound, what,
                NAN, NAN);
    snprintf(what, sizeof(what), "raw UCX get (%s)", get_what);
    memcpy(tails, mainfig.restore[0], sizeof(tails));
    bench_stats(mainfig.bytes, tails, mainfig.nrestore[0], &healthy);
    cl_main_row(rep, "restore", 0, mainfig.restore[0], mainfig.nrestore[0], raw_get, what,
                NAN, opts.readers == 1 ? CL_TARGET_RESTORE : NAN);
    for (unsigned d = 1; d <= mainfig.ndown; d++) {
        cl_main_row(rep, "restore_degraded", d, mainfig.restore[d], mainfig.nrestore[d],
                    raw_get, what, healthy.median,
                    opts.readers == 1 ? CL_TARGET_DEGRADED : NAN);
    }
    if (mainfig.ndown == 0) {
        say("(no degraded restores: %s)\n",
            opts.local == 0 ? "--cluster names servers this bench did not start"
                            : "--no-degraded or m = 0");
    } else {
        say("servers down: id %u", mainfig.down_ids[0]);
        if (mainfig.ndown > 1) {
            say(", then also id %u (both in rack r%u)", mainfig.down_ids[1],
                mainfig.down_ids[1] % CL_RACKS);
        }
        say("; SIGKILLed after the healthy restore, restarted after the degraded ones\n");
    }
    if (cl_nallocs > 0) {
        /* untimed preparation, but a cost a replacement rank pays once */
        say("cks_mem_alloc() of the clients' buffers (untimed preparation; the servers on "
            "this host map each buffer before it returns, and fault it in afterwards): median "
            "%.0f ms per GiB over %u preparations\n",
            cl_median(cl_alloc_s_gib, cl_nallocs) * 1e3, cl_nallocs);
    }

    /* what the seal costs after STORED: encode + CRC + chunk sends + commit on
     * the servers, overlapped with the puts, so this is not an encode rate */
    memcpy(tails, mainfig.tail, sizeof(tails));
    tail_s = cl_median(tails, mainfig.nsnap);
    if (isfinite(raw_get) && mainfig.nrestore[0] > 0) {
        /* the serving servers copy every chunk into the client's memory and
         * CRC each slice from cache right after its copy (not counted here:
         * from cache it runs several times faster than from memory); a
         * degraded stripe's parity goes into the client's scratch the same
         * way, and the client decodes the stripe once k are in */
        double dec = refs.decode[1].st.median;
        double hb = raw_get;
        double db = 1.0 / (1.0 / raw_get + 1.0 / dec);
        double deg1 = NAN;
        if (mainfig.nrestore[1] > 0) {
            deg1 = (double)mainfig.bytes /
                   cl_median(mainfig.restore[1], mainfig.nrestore[1]) / BENCH_GB;
        }
        say("\nderived from this run's one-thread figures: a restore costs one UCX copy per "
            "byte (by the serving servers' progress threads with cks_mem_alloc() buffers, "
            "which CRC each 256 KiB slice from cache right after copying it; by the "
            "client's progress thread otherwise): %.2f GB/s per thread, reached at %.2f; a "
            "degraded one adds a decode (the client's, of each degraded stripe once k "
            "chunks are in; parity comes into the client's scratch): 1/(1/%.2f + 1/%.2f) = "
            "%.2f GB/s, reached at %.2f (1 server down)\n",
            hb, healthy.median / hb, raw_get, dec, db, deg1 / db);
    }
    {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        double one = (double)mainfig.bytes / (refs.encode_crc.st.median * BENCH_GB);
        double prot = cl_median(mainfig.prot, mainfig.nsnap);
        unsigned thr = cl.nmap * opts.encoders;
        char thrtxt[64];
        if (opts.local > 0) {
            snprintf(thrtxt, sizeof(thrtxt), "%u encoder thread%s", thr,
                     thr > 1 ? "s" : "");
        } else {
            snprintf(thrtxt, sizeof(thrtxt),
                     "%u servers' encoder threads (number unknown)", cl.nmap);
        }
        say("\nthe protect tail (PROTECTED - STORED) is %.0f ms (median) for %.0f MiB; it "
            "holds the encoding not yet done when the last put was STORED, the chunk sends "
            "and the commits. The servers run %s in all on %ld cores here. Encode + CRC "
            "at the raw one-thread rate (%.2f GB/s) would take %.0f ms on one thread, "
            "%.0f ms on all %ld cores; the whole snapshot took %.0f ms to PROTECTED.\n",
            tail_s * 1e3, (double)mainfig.bytes / (1 << 20), thrtxt, cores,
            refs.encode_crc.st.median, one * 1e3,
            one / (double)(cores > 0 ? cores : 1) * 1e3, cores, prot * 1e3);
        if (mainfig.enc_ns > 0 && mainfig.enc_job_ns > 0 && isfinite(refs.encode.st.median)) {
            double enc = (double)mainfig.enc_bytes / (double)mainfig.enc_ns;     /* GB/s */
            double job = (double)mainfig.enc_bytes / (double)mainfig.enc_job_ns; /* GB/s */
            double ratio = enc / refs.encode.st.median;
            say("server-side encoding, per encoder thread (the servers' own CPU-time "
                "counters over the snapshots, %.0f MiB encoded): ISA-L encode %.2f GB/s = "
                "%.2f x raw one-thread ISA-L (%.2f); whole encoder jobs (object CRC, "
                "encode, chunk CRCs) %.2f GB/s = %.2f x raw encode + CRC (%.2f). Target "
                "(encoding >= %.1f x raw per encoder thread): %s\n",
                (double)mainfig.enc_bytes / (1 << 20), enc, ratio, refs.encode.st.median,
                job, job / refs.encode_crc.st.median, refs.encode_crc.st.median,
                CL_TARGET_ENCODE, ratio >= CL_TARGET_ENCODE ? "met" : "NOT met");
            bench_rec_t *r = bench_report_add(rep);
            if (r != NULL) {
                cl_rec_common(r, "server_encode");
                bench_rec_u64(r, "size", mainfig.enc_bytes);
                bench_rec_f64(r, "gbps", enc);
                bench_rec_f64(r, "raw_gbps", refs.encode.st.median);
                bench_rec_f64(r, "ratio", ratio);
                bench_rec_f64(r, "job_gbps", job);
                bench_rec_f64(r, "job_raw_gbps", refs.encode_crc.st.median);
                bench_rec_f64(r, "job_ratio", job / refs.encode_crc.st.median);
                bench_rec_f64(r, "target", CL_TARGET_ENCODE);
            }
        } else {
            say("server-side encoding: not measured (no encoder counters: a server did "
                "not answer, or was restarted during every snapshot)\n");
        }
    }
    if (mainfig.used_bytes > 0) {
        say("arena bytes in use with %u snapshot%s stored: %.0f MiB = %.3f x the object "
            "bytes (RS(%u,%u): %.3f)\n",
            opts.versions, opts.versions > 1 ? "s" : "", (double)mainfig.used_bytes / (1 << 20),
            (double)mainfig.used_bytes / ((double)mainfig.bytes * opts.versions), opts.k,
            opts.m, (double)(opts.k + opts.m) / opts.k);
    }
}

static void cl_print_pec(bench_report_t *rep)
{
    char sz[32];
    say("\nPEC: synthetic MoE, %u MoE layers, per layer a dense part of %u units and E "
        "experts "
        "of %u units, unit = %s of bf16 params, optimizer state %ux params; %u rank%s\n",
        opts.pec_layers, CL_PEC_DENSE_UNITS, CL_PEC_EXPERT_UNITS,
        bench_size_str(opts.pec_unit, sz, sizeof(sz)), CL_PEC_OPT_FACTOR, opts.clients,
        opts.clients > 1 ? "s" : "");
    say("%-3s %-4s %5s %9s %9s %10s %8s %6s %8s %9s %9s\n", "E", "kind", "saved",
        "MiB/vers", "MiB/rank", "arena MiB", "s PROT", "GB/s", "s STORED", "reduction",
        "PEC paper");
    for (unsigned i = 0; i < 2; i++) {
        cl_pec_fig_t *f = &pecfig[i];
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
        say("%-3u %-4s %5u %9.1f %9.1f %10.1f %8.3f %6.2f %8.3f %9s %9s\n", f->experts,
            "full", f->experts, (double)f->full_bytes / (1 << 20),
            (double)f->full_rank_max / (1 << 20), (double)f->full_stored / (1 << 20),
            full_s, (double)f->full_bytes / full_s / BENCH_GB, full_st, "-", "-");
        {
            char redtxt[32], paper[32];
            snprintf(redtxt, sizeof(redtxt), "%.1f %%", red * 100);
            snprintf(paper, sizeof(paper), f->experts == 8 ? "54.2 %%" : "-");
            say("%-3u %-4s %5u %9.1f %9.1f %10.1f %8.3f %6.2f %8.3f %9s %9s\n",
                f->experts, "pec", f->per_step, (double)f->pec_bytes / (1 << 20),
                (double)f->pec_rank_max / (1 << 20), (double)f->pec_stored / (1 << 20),
                pec_s, (double)f->pec_bytes / pec_s / BENCH_GB, pec_st, redtxt, paper);
        }
        say("%-3s time to PROTECTED: %.1f %% less than a full checkpoint\n", "",
            tred * 100);

        if ((r = bench_report_add(rep)) != NULL) {
            cl_rec_common(r, "checkpoint_full");
            bench_rec_u64(r, "experts", f->experts);
            bench_rec_u64(r, "experts_saved", f->experts);
            bench_rec_u64(r, "layers", opts.pec_layers);
            bench_rec_u64(r, "ranks", opts.clients);
            bench_rec_u64(r, "bytes", f->full_bytes);
            bench_rec_u64(r, "stored_bytes", f->full_stored);
            bench_rec_u64(r, "rank_bytes", f->full_rank_max);
            bench_rec_f64(r, "seconds", full_s);
            bench_rec_f64(r, "stored_seconds", full_st);
            bench_rec_f64(r, "gbps", (double)f->full_bytes / full_s / BENCH_GB);
            bench_rec_u64(r, "reps", f->nfull);
        }
        if ((r = bench_report_add(rep)) != NULL) {
            cl_rec_common(r, "checkpoint_pec");
            bench_rec_u64(r, "experts", f->experts);
            bench_rec_u64(r, "experts_saved", f->per_step);
            bench_rec_u64(r, "layers", opts.pec_layers);
            bench_rec_u64(r, "ranks", opts.clients);
            bench_rec_u64(r, "bytes", f->pec_bytes);
            bench_rec_u64(r, "stored_bytes", f->pec_stored);
            bench_rec_u64(r, "rank_bytes", f->pec_rank_max);
            bench_rec_f64(r, "seconds", pec_s);
            bench_rec_f64(r, "stored_seconds", pec_st);
            bench_rec_f64(r, "gbps", (double)f->pec_bytes / pec_s / BENCH_GB);
            bench_rec_f64(r, "reduction", red);
            bench_rec_f64(r, "time_reduction", tred);
            bench_rec_f64(r, "published_reduction",
                          f->experts == 8 ? CL_PEC_PUBLISHED_8 : NAN);
            bench_rec_u64(r, "reps", f->npec);
        }
    }
    say("saved: experts per layer written; MiB: object bytes; arena MiB: with parity and "
        "the "
        "zero padding of last stripes; s PROT / s STORED: seconds to PROTECTED / STORED "
        "(median)\nreduction = 1 - PEC bytes / full bytes per version; PEC paper: the "
        "54.2 %% "
        "the PEC paper reports for 8 experts (its own model and K; see the docs)\n");
}

/* ---- peers ------------------------------------------------------------------------
 *
 * memcached, Redis and files in /dev/shm store and read back the objects of
 * one writer (writer 0's: the same sizes and bytes), from this process over
 * one connection, `reps` rounds after a warm-up round (peers.c).
 */

static bench_peer_res_t peerres[BENCH_NPEERS];
static int peer_tried[BENCH_NPEERS];

static int cl_measure_peers(void)
{
    bench_buf_t src, dst;
    char err[BENCH_ERR_LEN];
    uint64_t sizes[CL_MAX_OBJS];
    bench_peer_params_t pp;

    if (bench_buf_alloc(BENCH_MEM_THP, cl_mix.bytes, &src, err, sizeof(err)) != 0) {
        fprintf(stderr, "ckstore-bench: peers: %s\n", err);
        return -1;
    }
    if (bench_buf_alloc(BENCH_MEM_THP, cl_mix.max + (1u << 20), &dst, err, sizeof(err)) != 0) {
        fprintf(stderr, "ckstore-bench: peers: %s\n", err);
        bench_buf_free(&src);
        return -1;
    }
    for (unsigned o = 0; o < cl_mix.n; o++) {
        sizes[o] = cl_mix.obj[o].size;
        bench_fill((uint8_t *)src.ptr + cl_mix.obj[o].off, sizes[o], cl_obj_seed(0, o));
    }
    memset(&pp, 0, sizeof(pp));
    pp.src = src.ptr;
    pp.sizes = sizes;
    pp.nobj = cl_mix.n;
    pp.dst = dst.ptr;
    pp.dst_len = dst.len;
    pp.reps = opts.reps;
    pp.timeout_s = opts.timeout_s;
    for (unsigned p = 0; p < BENCH_NPEERS; p++) {
        if (!(opts.peers & (1u << p))) {
            continue;
        }
        peer_tried[p] = 1;
        if (bench_peer_run(p, &pp, &peerres[p]) != 0) {
            say("  peer %s: skipped: %s\n", bench_peer_name(p), peerres[p].note);
            continue;
        }
        say("  peer %s: %s\n", bench_peer_name(p), peerres[p].desc);
    }
    bench_buf_free(&dst);
    bench_buf_free(&src);
    return 0;
}

/* GB/s statistics of a list of seconds for `bytes` (the list is kept). */
static void cl_stats_of(uint64_t bytes, const double *secs, unsigned n, bench_stats_t *st)
{
    double tmp[CL_MAX_SNAPS];
    memset(st, 0, sizeof(*st));
    st->median = st->min = st->max = NAN;
    if (n == 0) {
        return;
    }
    n = n > CL_MAX_SNAPS ? CL_MAX_SNAPS : n;
    memcpy(tmp, secs, n * sizeof(*tmp));
    bench_stats(bytes, tmp, n, st);
}

/* min / median / max of plain values. */
static void cl_vstats(const double *v, unsigned n, double *min_p, double *med_p, double *max_p)
{
    double tmp[CL_MAX_SNAPS];
    *min_p = *med_p = *max_p = NAN;
    if (n == 0) {
        return;
    }
    n = n > CL_MAX_SNAPS ? CL_MAX_SNAPS : n;
    memcpy(tmp, v, n * sizeof(*tmp));
    for (unsigned i = 1; i < n; i++) { /* insertion sort: n is small */
        double x = tmp[i];
        unsigned j = i;
        while (j > 0 && tmp[j - 1] > x) {
            tmp[j] = tmp[j - 1];
            j--;
        }
        tmp[j] = x;
    }
    *min_p = tmp[0];
    *max_p = tmp[n - 1];
    *med_p = n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static const char *const cl_peer_ops[BENCH_NPEERS][2] = {
    {"peer_memcached_set", "peer_memcached_get"},
    {"peer_redis_set", "peer_redis_get"},
    {"peer_shm_write", "peer_shm_read"},
};

/* ckstore's figures the peers are compared with: one client's snapshot to
 * STORED (its buffers are free, the bytes are in the servers' memory, as
 * after a SET) and its restore. NAN when not measured. */
static double cl_ck_median(int restore)
{
    bench_stats_t st;
    if (restore) {
        cl_stats_of(mainfig.bytes, mainfig.restore[0], mainfig.nrestore[0], &st);
    } else {
        cl_stats_of(mainfig.bytes, mainfig.stored, mainfig.nsnap, &st);
    }
    return st.median;
}

static void cl_print_peers(bench_report_t *rep)
{
    int any = 0;
    for (unsigned p = 0; p < BENCH_NPEERS; p++) {
        any |= peer_tried[p];
    }
    if (!any) {
        return;
    }
    say("\npeers, the same objects (writer 0's: %u objects, %.0f MiB, %s), one connection "
        "from this process, GB/s = 10^9 B/s, median of %u rounds after a warm-up round; "
        "ckstore: %u client%s, STORED and restore\n",
        cl_mix.n, (double)cl_mix.bytes / (1 << 20), cl_mix.kind, opts.reps, opts.clients,
        opts.clients > 1 ? "s" : "");
    say("%-20s %6s %6s %6s  %-16s %6s %8s %9s %9s\n", "op", "GB/s", "min", "max", "ckstore",
        "GB/s", "ck/peer", "srv CPU", "srv RSS");
    say("%-20s %6s %6s %6s  %-16s %6s %8s %9s %9s\n", "", "", "", "", "", "", "", "s/GB",
        "B/B");
    for (unsigned p = 0; p < BENCH_NPEERS; p++) {
        bench_peer_res_t *pr = &peerres[p];
        if (!peer_tried[p]) {
            continue;
        }
        if (!pr->ok) {
            say("%-20s skipped: %s\n", bench_peer_name(p), pr->note);
            continue;
        }
        for (unsigned d = 0; d < 2; d++) {
            bench_stats_t st;
            double ck = cl_ck_median((int)d);
            double cpu = pr->server_cpu_s >= 0
                             ? pr->server_cpu_s / ((double)pr->bytes * pr->n / BENCH_GB) / 2
                             : NAN;
            double rss = pr->server_rss > 0 ? (double)pr->server_rss / (double)pr->bytes : NAN;
            bench_rec_t *r;
            cl_stats_of(pr->bytes, d ? pr->get_s : pr->set_s, pr->n, &st);
            say("%-20s %6.2f %6.2f %6.2f  %-16s %6.2f %7.2fx %9.3f %9.2f\n", cl_peer_ops[p][d],
                st.median, st.min, st.max, d ? "restore" : "snapshot STORED", ck,
                ck / st.median, cpu, rss);
            if ((r = bench_report_add(rep)) == NULL) {
                continue;
            }
            bench_rec_str(r, "op", cl_peer_ops[p][d]);
            bench_rec_u64(r, "objects", cl_mix.n);
            bench_rec_u64(r, "size", cl_mix.max);
            bench_rec_u64(r, "bytes", pr->bytes);
            bench_rec_str(r, "mix", cl_mix.kind);
            cl_rec_stats(r, &st);
            bench_rec_u64(r, "connections", 1);
            bench_rec_f64(r, "ckstore_gbps", ck);
            bench_rec_str(r, "ckstore_op", d ? "restore" : "snapshot_stored");
            bench_rec_f64(r, "ratio", ck / st.median);
            bench_rec_f64(r, "server_cpu_s_per_gb", cpu);
            bench_rec_f64(r, "server_rss_per_byte", rss);
            bench_rec_str(r, "peer", pr->desc);
        }
    }
    say("ck/peer: ckstore's figure over the peer's; srv CPU: the peer server's CPU seconds "
        "per GB moved (set and get rounds together, halved); srv RSS: its resident memory "
        "holding one round's objects, per object byte\n");
}

typedef struct {
    const char *what, *phase, *who;
    const double *v;
    unsigned n, down;
} cl_cpu_row_t;

/* The issue's figures per snapshot, min / median / max. */
static void cl_print_figures(bench_report_t *rep)
{
    double mn, md, mx;
    double mc = refs.memcpy_fig.st.median;
    double mc_ms = (double)mainfig.rank_bytes / (mc * BENCH_GB) * 1e3;
    double gb = (double)mainfig.bytes / BENCH_GB;
    bench_rec_t *r;
    char sz[32];

    say("\nper snapshot (%u snapshot%s: %u rep%s x %u version%s), min / median / max\n",
        mainfig.nsnap, mainfig.nsnap > 1 ? "s" : "", opts.reps, opts.reps > 1 ? "s" : "",
        opts.versions, opts.versions > 1 ? "s" : "");
    say("%-44s %9s %9s %9s  %s\n", "figure", "min", "median", "max", "note");
    double ms[CL_MAX_SNAPS];
    for (unsigned i = 0; i < mainfig.nsnap; i++) {
        ms[i] = mainfig.stall[i] * 1e3;
    }
    cl_vstats(ms, mainfig.nsnap, &mn, &md, &mx);
    say("%-44s %9.1f %9.1f %9.1f  one memcpy of a writer's %s: %.1f ms\n",
        "trainer stall (buffers reusable), ms", mn, md, mx,
        bench_size_str(mainfig.rank_bytes, sz, sizeof(sz)), mc_ms);
    if ((r = bench_report_add(rep)) != NULL) {
        cl_rec_common(r, "trainer_stall");
        bench_rec_u64(r, "clients", opts.clients);
        bench_rec_u64(r, "rank_bytes", mainfig.rank_bytes);
        bench_rec_f64(r, "ms", md);
        bench_rec_f64(r, "min_ms", mn);
        bench_rec_f64(r, "max_ms", mx);
        bench_rec_f64(r, "memcpy_ms", mc_ms);
        bench_rec_f64(r, "ratio", md / mc_ms);
        bench_rec_u64(r, "reps", mainfig.nsnap);
    }
    for (unsigned i = 0; i < mainfig.nsnap; i++) {
        ms[i] = mainfig.tail[i] * 1e3;
    }
    cl_vstats(ms, mainfig.nsnap, &mn, &md, &mx);
    say("%-44s %9.1f %9.1f %9.1f  last STORED -> last cks_version_finish() returned\n",
        "version commit latency, ms", mn, md, mx);
    if ((r = bench_report_add(rep)) != NULL) {
        cl_rec_common(r, "version_commit");
        bench_rec_u64(r, "clients", opts.clients);
        bench_rec_u64(r, "bytes", mainfig.bytes);
        bench_rec_f64(r, "ms", md);
        bench_rec_f64(r, "min_ms", mn);
        bench_rec_f64(r, "max_ms", mx);
        bench_rec_u64(r, "reps", mainfig.nsnap);
    }
    cl_cpu_row_t cpu[2 + 2 * (CL_MAX_DOWN + 1)];
    unsigned nc = 0;
    cpu[nc++] = (cl_cpu_row_t){"server CPU s per GB, snapshot", "snapshot", "servers",
                                 mainfig.srv_cpu_snap, mainfig.ncpu_snap, 0};
    cpu[nc++] = (cl_cpu_row_t){"client CPU s per GB, snapshot", "snapshot", "clients",
                                 mainfig.cli_cpu_snap, mainfig.ncpu_snap, 0};
    for (unsigned d = 0; d <= mainfig.ndown; d++) {
        static const char *const sw[] = {"server CPU s per GB, restore", "server CPU s per GB, "
                                         "restore 1 down", "server CPU s per GB, restore 2 down"};
        static const char *const cw[] = {"client CPU s per GB, restore", "client CPU s per GB, "
                                         "restore 1 down", "client CPU s per GB, restore 2 down"};
        cpu[nc++] = (cl_cpu_row_t){sw[d], "restore", "servers", mainfig.srv_cpu_restore[d],
                                     mainfig.ncpu_restore[d], d};
        cpu[nc++] = (cl_cpu_row_t){cw[d], "restore", "clients", mainfig.cli_cpu_restore[d],
                                     mainfig.ncpu_restore[d], d};
    }
    for (unsigned i = 0; i < nc; i++) {
        if (cpu[i].n == 0) {
            continue;
        }
        cl_vstats(cpu[i].v, cpu[i].n, &mn, &md, &mx);
        say("%-44s %9.3f %9.3f %9.3f  %s\n", cpu[i].what, mn, md, mx,
            i == 0 ? "utime + stime of every server process, /proc/PID/stat" : "");
        if ((r = bench_report_add(rep)) != NULL) {
            cl_rec_common(r, strcmp(cpu[i].who, "servers") == 0 ? "server_cpu_per_gb"
                                                                 : "client_cpu_per_gb");
            bench_rec_str(r, "phase", cpu[i].phase);
            bench_rec_u64(r, "servers_down", cpu[i].down);
            bench_rec_u64(r, "servers", cl.nmap);
            bench_rec_u64(r, "clients", strcmp(cpu[i].phase, "restore") == 0 ? opts.readers
                                                                              : opts.clients);
            bench_rec_f64(r, "s_per_gb", md);
            bench_rec_f64(r, "min_s_per_gb", mn);
            bench_rec_f64(r, "max_s_per_gb", mx);
            bench_rec_u64(r, "reps", cpu[i].n);
        }
    }
    if (mainfig.used_bytes > 0 || mainfig.rss > 0) {
        double logical = gb * opts.versions * BENCH_GB;
        say("%-44s %9s %9.3f %9s  arena bytes in use / object bytes (%u version%s stored; "
            "RS(%u,%u): %.3f)\n",
            "memory per byte stored: arena used", "", (double)mainfig.used_bytes / logical, "",
            opts.versions, opts.versions > 1 ? "s" : "", opts.k, opts.m,
            (double)(opts.k + opts.m) / opts.k);
        if (mainfig.rss > 0) {
            say("%-44s %9s %9.3f %9s  all servers' VmRSS (the pre-faulted arenas: %u x %s)\n",
                "memory per byte stored: server RSS", "", (double)mainfig.rss / logical, "",
                cl.nsrv, bench_size_str(opts.arena, sz, sizeof(sz)));
            say("%-44s %9s %9.3f %9s  RssAnon: heap, LMDB maps, UCX (not the arena)\n",
                "memory per byte stored: server RSS non-arena", "",
                (double)mainfig.rss_anon / logical, "");
        }
        if ((r = bench_report_add(rep)) != NULL) {
            cl_rec_common(r, "memory_per_gb");
            bench_rec_u64(r, "servers", cl.nmap);
            bench_rec_u64(r, "versions", opts.versions);
            bench_rec_u64(r, "logical_bytes", (uint64_t)logical);
            bench_rec_u64(r, "arena_used_bytes", mainfig.used_bytes);
            bench_rec_f64(r, "arena_used_per_byte", (double)mainfig.used_bytes / logical);
            bench_rec_u64(r, "server_rss_bytes", mainfig.rss);
            bench_rec_f64(r, "server_rss_per_byte",
                          mainfig.rss > 0 ? (double)mainfig.rss / logical : NAN);
            bench_rec_u64(r, "server_rss_anon_bytes", mainfig.rss_anon);
            bench_rec_u64(r, "server_rss_shmem_bytes", mainfig.rss_shmem);
            bench_rec_u64(r, "arena_bytes_per_server", opts.arena);
        }
    }
}

/* The best raw UCX figure of each direction, as one record each (op raw_ucx). */
static void cl_rec_raw_best(bench_report_t *rep)
{
    for (unsigned d = 0; d < BENCH_NDIRS; d++) {
        char what[40];
        double best = cl_raw_best(d, what, sizeof(what));
        bench_rec_t *r;
        if (!isfinite(best) || (r = bench_report_add(rep)) == NULL) {
            continue;
        }
        bench_rec_str(r, "op", "raw_ucx");
        bench_rec_str(r, "dir", bench_dir_name(d));
        bench_rec_u64(r, "size", opts.size);
        bench_rec_f64(r, "gbps", best);
        bench_rec_str(r, "best_of", what);
    }
}

/* The issue's targets: each figure over its target, and by how much it is
 * missed. `higher`: the figure must reach target x ref; else stay below. */
static unsigned cl_targets_met, cl_targets_judged;

static void cl_target_row(bench_report_t *rep, const char *name, double value,
                          const char *unit, double ref, const char *ref_what, double target,
                          int higher, const char *note)
{
    double ratio = value / ref;
    bench_rec_t *r;
    if (!isfinite(ratio)) {
        say("%-36s %9s  %-34s %s\n", name, "-", ref_what, note != NULL ? note : "not judged");
        return;
    }
    int met = higher ? ratio >= target : ratio <= target;
    double miss = higher ? 1.0 - ratio / target : ratio / target - 1.0;
    char verdict[64];
    if (met) {
        snprintf(verdict, sizeof(verdict), "met");
    } else {
        snprintf(verdict, sizeof(verdict), "MISSED by %.0f %%", miss * 100);
    }
    cl_targets_judged++;
    cl_targets_met += (unsigned)met;
    say("%-36s %9.2f %-5s %-28s %8.2f %6.2f  %s %-5.2f %s\n", name, value, unit, ref_what,
        ref, ratio, higher ? ">=" : "<=", target, verdict);
    if ((r = bench_report_add(rep)) == NULL) {
        return;
    }
    bench_rec_str(r, "op", "target");
    bench_rec_str(r, "figure", name);
    bench_rec_f64(r, "value", value);
    bench_rec_str(r, "unit", unit);
    bench_rec_f64(r, "ref_value", ref);
    bench_rec_str(r, "ref", ref_what);
    bench_rec_f64(r, "ratio", ratio);
    bench_rec_f64(r, "target", target);
    bench_rec_str(r, "sense", higher ? ">=" : "<=");
    bench_rec_u64(r, "met", (uint64_t)met);
    bench_rec_f64(r, "miss", met ? 0.0 : miss);
}

static void cl_print_targets(bench_report_t *rep)
{
    char put_what[40], get_what[40], what[64];
    double raw_put = cl_raw_best(BENCH_DIR_PUT, put_what, sizeof(put_what));
    double raw_get = cl_raw_best(BENCH_DIR_GET, get_what, sizeof(get_what));
    double stored = cl_ck_median(0), restore = cl_ck_median(1);
    double bound = refs.memcpy_fig.st.median * opts.k / (opts.k + opts.m);
    bench_stats_t st;
    int one = opts.clients == 1 && opts.readers == 1;
    int big = strcmp(cl_mix.kind, "uniform") == 0 && opts.size >= (64ull << 20);

    say("\ntargets of the capacity benchmark (ratio = figure / reference; "
        "missed by = how far the ratio is from the target)\n");
    say("%-36s %9s %-5s %-28s %8s %6s  %s\n", "figure", "value", "unit", "reference", "ref",
        "ratio", "target");
    snprintf(what, sizeof(what), "raw UCX put (%s)", put_what);
    cl_target_row(rep, "put (snapshot STORED), >= 64 MiB", one && big ? stored : NAN, "GB/s",
                  raw_put, what, 0.9, 1, "not judged: needs 1 client, --mix uniform, >= 64M");
    snprintf(what, sizeof(what), "raw UCX get (%s)", get_what);
    cl_target_row(rep, "get (restore), >= 64 MiB", one && big ? restore : NAN, "GB/s", raw_get,
                  what, 0.9, 1, "not judged: needs 1 client, --mix uniform, >= 64M");
    cl_stats_of(mainfig.bytes, mainfig.prot, mainfig.nsnap, &st);
    snprintf(what, sizeof(what), "memcpy x k/(k+m)");
    cl_target_row(rep, "snapshot PROTECTED", st.median, "GB/s", bound, what, 0.8, 1, NULL);
    for (unsigned d = 1; d <= mainfig.ndown; d++) {
        char name[64];
        cl_stats_of(mainfig.bytes, mainfig.restore[d], mainfig.nrestore[d], &st);
        snprintf(name, sizeof(name), "degraded restore, %u down", d);
        cl_target_row(rep, name, st.median, "GB/s", restore, "healthy restore", 0.7, 1, NULL);
    }
    for (unsigned d = 1; d <= mainfig.ndown; d++) {
        char name[64];
        cl_stats_of(mainfig.bytes, mainfig.down_stored[d], mainfig.ndown_stored[d], &st);
        snprintf(name, sizeof(name), "degraded snapshot STORED, %u down", d);
        cl_target_row(rep, name, st.median, "GB/s", stored, "healthy snapshot STORED", 0.8, 1,
                      NULL);
    }
    if (mainfig.nrepair > 0) {
        double mn, md, mx;
        unsigned e = mainfig.ndown;
        cl_vstats(mainfig.repair_gbs, mainfig.nrepair, &mn, &md, &mx);
        /* ISA-L alone rebuilds e chunks per stripe of k: decode[e] (object
         * bytes/s) x e / k chunk bytes per second, on one core */
        double dbound = e >= 1 && e <= CL_MAX_DOWN && refs.decode[e].ok
                            ? refs.decode[e].st.median * e / opts.k
                            : NAN;
        snprintf(what, sizeof(what), "ISA-L decode, %u lost (chunk B/s)", e);
        cl_target_row(rep, "repair (rebuilt chunk bytes)", md, "GB/s", dbound, what, 0.5, 1,
                      NULL);
    }
    if (mainfig.nduring > 0) {
        cl_stats_of(mainfig.bytes, mainfig.during_stored, mainfig.nduring, &st);
        cl_target_row(rep, "snapshot STORED while repair runs", st.median, "GB/s", stored,
                      "healthy snapshot STORED", 0.7, 1, NULL);
    }
    static const struct {
        unsigned peer;
        double target;
        const char *set, *get;
    } pt[] = {{BENCH_PEER_MEMCACHED, 3, "vs memcached SET (STORED)", "vs memcached GET (restore)"},
              {BENCH_PEER_REDIS, 10, "vs Redis SET (STORED)", "vs Redis GET (restore)"}};
    for (unsigned i = 0; i < 2; i++) {
        const bench_peer_res_t *pr = &peerres[pt[i].peer];
        bench_stats_t ps, pg;
        if (!pr->ok) {
            say("%-36s %9s  %s\n", pt[i].set, "-",
                peer_tried[pt[i].peer] ? "not judged: the peer was skipped"
                                       : "not judged: the peer was not run");
            continue;
        }
        cl_stats_of(pr->bytes, pr->set_s, pr->n, &ps);
        cl_stats_of(pr->bytes, pr->get_s, pr->n, &pg);
        snprintf(what, sizeof(what), "%s SET, 1 connection", bench_peer_name(pt[i].peer));
        cl_target_row(rep, pt[i].set, stored, "GB/s", ps.median, what, pt[i].target, 1,
                      NULL);
        snprintf(what, sizeof(what), "%s GET, 1 connection", bench_peer_name(pt[i].peer));
        cl_target_row(rep, pt[i].get, restore, "GB/s", pg.median, what, pt[i].target, 1,
                      NULL);
    }
    {
        double ms[CL_MAX_SNAPS], mn, md, mx;
        for (unsigned i = 0; i < mainfig.nsnap; i++) {
            ms[i] = mainfig.stall[i] * 1e3;
        }
        cl_vstats(ms, mainfig.nsnap, &mn, &md, &mx);
        double mc_ms = (double)mainfig.rank_bytes / (refs.memcpy_fig.st.median * BENCH_GB) * 1e3;
        cl_target_row(rep, "trainer stall per snapshot", md, "ms", mc_ms,
                      "one memcpy of a writer's bytes", 1.0, 0, NULL);
    }
    say("targets met: %u of %u judged\n", cl_targets_met, cl_targets_judged);
}

static uint64_t cl_arena_size(void);
static int cl_check_memory(void);
static unsigned cl_shm_leftovers(void);

/* ---- sweeps -----------------------------------------------------------------------
 *
 * --sweep-clients, --sweep-servers, --sweep-sizes: one point each, run in a
 * child process of its own (fork; it starts its servers and clients, runs
 * the snapshots and healthy restores, and stops everything it started), so
 * that every point starts from a fresh cluster. The child sends its figures
 * back over a pipe; it is stopped by its pid if it overruns its deadline.
 */

typedef enum { CL_SWEEP_CLIENTS, CL_SWEEP_SERVERS, CL_SWEEP_SIZES, CL_NSWEEPS } cl_sweep_t;

typedef struct {
    int32_t status; /* 0 measured, 1 failed, 2 did not fit in memory */
    uint32_t clients, servers;
    uint64_t size, bytes;
    bench_stats_t st[3]; /* STORED, PROTECTED, restore: aggregate GB/s */
} cl_sweep_pt_t;

static cl_sweep_pt_t cl_sweep_res[CL_NSWEEPS][CL_MAX_SWEEP];
static unsigned cl_sweep_n[CL_NSWEEPS];

static void cl_sweep_child(int fd, unsigned clients, unsigned servers, uint64_t size)
{
    cl_sweep_pt_t pt;
    memset(&pt, 0, sizeof(pt));
    opts.clients = opts.readers = clients;
    opts.local = servers;
    opts.size = size;
    opts.no_degraded = 1;
    opts.quiet = 1;
    cl_mix_build();
    if (!opts.arena_given) {
        opts.arena = cl_arena_size();
    }
    pt.status = 1;
    if (cl_check_memory() != 0) {
        pt.status = 2;
    } else if (cl_cluster_start(opts.arena) == 0 && cl_workers_start() == 0 &&
               cl_measure_main() == 0) {
        pt.status = 0;
        pt.bytes = mainfig.bytes;
        cl_stats_of(mainfig.bytes, mainfig.stored, mainfig.nsnap, &pt.st[0]);
        cl_stats_of(mainfig.bytes, mainfig.prot, mainfig.nsnap, &pt.st[1]);
        cl_stats_of(mainfig.bytes, mainfig.restore[0], mainfig.nrestore[0], &pt.st[2]);
    }
    pt.clients = clients;
    pt.servers = servers;
    pt.size = size;
    if (cl_client != NULL) {
        cks_client_destroy(cl_client);
        cl_client = NULL;
    }
    cl_workers_stop();
    cl_servers_stop();
    cl_remove_files();
    cl_shm_leftovers();
    bench_write_full(fd, &pt, sizeof(pt));
}

static int cl_sweep_point(cl_sweep_t kind, unsigned clients, unsigned servers, uint64_t size)
{
    cl_sweep_pt_t *pt = &cl_sweep_res[kind][cl_sweep_n[kind]++];
    int fds[2];
    char sz[32];
    memset(pt, 0, sizeof(*pt));
    pt->status = 1;
    pt->clients = clients;
    pt->servers = servers;
    pt->size = size;
    bench_progress("sweep: %u client%s, %u servers, %s per object", clients,
                   clients > 1 ? "s" : "", servers, bench_size_str(size, sz, sizeof(sz)));
    if (pipe2(fds, O_CLOEXEC) != 0) {
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* our handler cleans up */
        close(fds[0]);
        cl_sweep_pid = 0;
        cl_sweep_child(fds[1], clients, servers, size);
        _exit(0);
    }
    close(fds[1]);
    cl_sweep_pid = pid;
    /* every phase of every repetition is bounded by the timeout (x 4 for a
     * client phase); the servers' start too */
    double limit = opts.timeout_s * (8.0 + 12.0 * opts.reps) + (double)servers * 2;
    if (bench_read_full(fds[0], pt, sizeof(*pt), bench_now() + limit) != 0) {
        fprintf(stderr, "ckstore-bench: sweep point (%u clients, %u servers) gave no result: "
                        "%s\n", clients, servers, strerror(errno));
        pt->status = 1;
        bench_stop_pid(pid, SIGTERM, opts.timeout_s);
    } else if (!bench_wait_pid(pid, opts.timeout_s, NULL)) {
        bench_stop_pid(pid, SIGTERM, opts.timeout_s);
    }
    cl_sweep_pid = 0;
    close(fds[0]);
    return pt->status == 0 ? 0 : -1;
}

static const char *const cl_sweep_names[CL_NSWEEPS] = {"clients", "servers", "sizes"};

static void cl_run_sweeps(void)
{
    for (unsigned i = 0; i < opts.nsweep_clients; i++) {
        cl_sweep_point(CL_SWEEP_CLIENTS, opts.sweep_clients[i], opts.local, opts.size);
    }
    for (unsigned i = 0; i < opts.nsweep_servers; i++) {
        cl_sweep_point(CL_SWEEP_SERVERS, opts.clients, opts.sweep_servers[i], opts.size);
    }
    for (unsigned i = 0; i < opts.nsweep_sizes; i++) {
        cl_sweep_point(CL_SWEEP_SIZES, opts.clients, opts.local, opts.sweep_sizes[i]);
    }
    bench_progress_clear();
}

static void cl_print_sweeps(bench_report_t *rep)
{
    static const char *const ops[3] = {"sweep_snapshot_stored", "sweep_snapshot_protected",
                                       "sweep_restore"};
    char sz[32];
    for (unsigned k = 0; k < CL_NSWEEPS; k++) {
        if (cl_sweep_n[k] == 0) {
            continue;
        }
        say("\nsweep over %s: RS(%u,%u), %s chunks, %u objects per client, aggregate GB/s = "
            "10^9 B/s of object bytes, median (min .. max) of %u; each point a fresh "
            "cluster\n",
            cl_sweep_names[k], opts.k, opts.m, bench_size_str(opts.chunk, sz, sizeof(sz)),
            opts.objects, opts.reps);
        say("%7s %7s %9s  %-21s %-21s %-21s %9s\n", "clients", "servers", "size",
            "STORED", "PROTECTED", "restore", "PROT/srv");
        for (unsigned i = 0; i < cl_sweep_n[k]; i++) {
            const cl_sweep_pt_t *pt = &cl_sweep_res[k][i];
            say("%7u %7u %9s  ", pt->clients, pt->servers,
                bench_size_str(pt->size, sz, sizeof(sz)));
            if (pt->status != 0) {
                say("%s\n", pt->status == 2 ? "skipped: does not fit in memory"
                                            : "failed (see the errors above)");
                continue;
            }
            for (unsigned f = 0; f < 3; f++) {
                char cell[32];
                snprintf(cell, sizeof(cell), "%.2f (%.2f..%.2f)", pt->st[f].median,
                         pt->st[f].min, pt->st[f].max);
                say("%-21s ", cell);
            }
            say("%9.3f\n", pt->st[1].median / pt->servers);
            for (unsigned f = 0; f < 3; f++) {
                bench_rec_t *r = bench_report_add(rep);
                if (r == NULL) {
                    continue;
                }
                cl_rec_common(r, ops[f]);
                bench_rec_str(r, "sweep", cl_sweep_names[k]);
                bench_rec_u64(r, "clients", pt->clients);
                bench_rec_u64(r, "servers", pt->servers);
                bench_rec_u64(r, "objects", opts.objects);
                bench_rec_u64(r, "size", pt->size);
                bench_rec_u64(r, "bytes", pt->bytes);
                cl_rec_stats(r, &pt->st[f]);
                bench_rec_f64(r, "per_server_gbps", pt->st[f].median / pt->servers);
                bench_rec_f64(r, "per_client_gbps", pt->st[f].median / pt->clients);
            }
        }
    }
}

/* ---- charts (--plot DIR) ------------------------------------------------------------ */

static void cl_plot_sweeps(void)
{
    static const char *const titles[3] = {"snapshot STORED", "snapshot PROTECTED",
                                          "restore"};
    static const char *const xl[CL_NSWEEPS] = {"client processes", "servers",
                                               "object size, MiB"};
    for (unsigned k = 0; k < CL_NSWEEPS; k++) {
        bench_series_t ser[3];
        char name[32], title[160];
        if (cl_sweep_n[k] == 0) {
            continue;
        }
        memset(ser, 0, sizeof(ser));
        for (unsigned f = 0; f < 3; f++) {
            snprintf(ser[f].title, sizeof(ser[f].title), "%s", titles[f]);
            for (unsigned i = 0; i < cl_sweep_n[k] && ser[f].n < 32; i++) {
                const cl_sweep_pt_t *pt = &cl_sweep_res[k][i];
                unsigned j = ser[f].n;
                if (pt->status != 0) {
                    continue;
                }
                ser[f].x[j] = k == CL_SWEEP_CLIENTS   ? pt->clients
                              : k == CL_SWEEP_SERVERS ? pt->servers
                                                      : (double)pt->size / (1 << 20);
                ser[f].y[j] = pt->st[f].median;
                ser[f].ymin[j] = pt->st[f].min;
                ser[f].ymax[j] = pt->st[f].max;
                ser[f].n++;
            }
        }
        snprintf(name, sizeof(name), "sweep_%s", cl_sweep_names[k]);
        snprintf(title, sizeof(title),
                 "ckstore, RS(%u,%u), aggregate bandwidth against %s%s (median, min..max)",
                 opts.k, opts.m, k == CL_SWEEP_SIZES ? "the object size" : "the number of ",
                 k == CL_SWEEP_SIZES ? "" : cl_sweep_names[k]);
        bench_plot_lines(opts.plot, name, title, xl[k], "GB/s (10^9 B/s of object bytes)",
                         k == CL_SWEEP_SIZES, ser, 3, opts.timeout_s);
    }
}

/* ckstore's figures next to this machine's limits and the peers. */
static void cl_plot_bars(void)
{
    bench_bar_t b[32];
    unsigned n = 0;
    char what[40], sz[32], title[200];
    bench_stats_t st;
#define CL_BAR(lbl, val, grp)                                          \
    do {                                                               \
        if (isfinite(val) && n < 32) {                                 \
            snprintf(b[n].label, sizeof(b[n].label), "%s", lbl);       \
            b[n].value = (val);                                        \
            b[n].group = (grp);                                        \
            n++;                                                       \
        }                                                              \
    } while (0)
    CL_BAR("memcpy (1 thread)", refs.memcpy_fig.st.median, 1);
    CL_BAR("raw UCX put", cl_raw_best(BENCH_DIR_PUT, what, sizeof(what)), 1);
    CL_BAR("raw UCX get", cl_raw_best(BENCH_DIR_GET, what, sizeof(what)), 1);
    CL_BAR("ISA-L encode (1 thread)", refs.encode.st.median, 1);
    CL_BAR("memcpy x k/(k+m)", refs.memcpy_fig.st.median * opts.k / (opts.k + opts.m), 1);
    CL_BAR("ckstore STORED", cl_ck_median(0), 0);
    cl_stats_of(mainfig.bytes, mainfig.prot, mainfig.nsnap, &st);
    CL_BAR("ckstore PROTECTED", st.median, 0);
    CL_BAR("ckstore restore", cl_ck_median(1), 0);
    for (unsigned d = 1; d <= mainfig.ndown; d++) {
        char lbl[48];
        cl_stats_of(mainfig.bytes, mainfig.restore[d], mainfig.nrestore[d], &st);
        snprintf(lbl, sizeof(lbl), "ckstore restore, %u down", d);
        CL_BAR(lbl, st.median, 0);
    }
    for (unsigned p = 0; p < BENCH_NPEERS; p++) {
        static const char *const lbl[BENCH_NPEERS][2] = {
            {"memcached SET", "memcached GET"},
            {"Redis SET", "Redis GET"},
            {"/dev/shm file write", "/dev/shm file read"}};
        if (!peerres[p].ok) {
            continue;
        }
        for (unsigned d = 0; d < 2; d++) {
            cl_stats_of(peerres[p].bytes, d ? peerres[p].get_s : peerres[p].set_s,
                        peerres[p].n, &st);
            CL_BAR(lbl[p][d], st.median, 2);
        }
    }
#undef CL_BAR
    snprintf(title, sizeof(title),
             "ckstore (%u servers, RS(%u,%u), %u client%s, %s objects) against this "
             "machine's limits and peers, median of %u",
             cl.nmap, opts.k, opts.m, opts.clients, opts.clients > 1 ? "s" : "",
             strcmp(cl_mix.kind, "moe") == 0 ? "MoE mix of"
                                             : bench_size_str(opts.size, sz, sizeof(sz)),
             opts.reps);
    bench_plot_bars(opts.plot, "ckstore_vs_limits_and_peers", title,
                    "GB/s (10^9 B/s of object bytes)", b, n, opts.timeout_s);
}

/* ---- cold and warm, per phase: the report -------------------------------------- */

/* median of v[first .. n-1] (NAN when empty); v is not reordered */
static double cl_cw_median_from(const double *v, unsigned first, unsigned n)
{
    double tmp[CL_MAX_SNAPS];
    unsigned k = 0;
    for (unsigned i = first; i < n && k < CL_MAX_SNAPS; i++) {
        tmp[k++] = v[i];
    }
    return k > 0 ? cl_median(tmp, k) : NAN;
}

static double cl_cw_gbps(double secs)
{
    return isfinite(secs) && secs > 0 ? (double)mainfig.bytes / secs / BENCH_GB : NAN;
}

/* One row: cold and warm (GB/s, or ms when `ms`), their ratio, and the cold
 * figure against a reference of the same run with its target. For GB/s the
 * ratios are figure / reference (higher is better); for ms, cold / reference
 * (lower is better). */
static void cl_cw_row(bench_report_t *rep, const char *phase, int ms, double cold, double warm,
                      double cw_target, const char *ref_what, double ref, double ref_target)
{
    double cw = cold / warm;
    double rr = cold / ref;
    bench_rec_t *r;

    say("%-46s %8.2f %8.2f %6.2f", phase, cold, warm, cw);
    if (isfinite(cw_target) && isfinite(cw)) {
        say(" %s", (ms ? cw <= cw_target : cw >= cw_target) ? "met   " : "MISSED");
    } else {
        say(" %6s", "");
    }
    say("  %-32s %8.2f %6.2f", ref_what, ref, rr);
    if (isfinite(ref_target) && isfinite(rr)) {
        say(" %s %.1f %s", ms ? "<=" : ">=", ref_target,
            (ms ? rr <= ref_target : rr >= ref_target) ? "met" : "MISSED");
    }
    say("\n");
    if ((r = bench_report_add(rep)) == NULL) {
        return;
    }
    cl_rec_common(r, "cold_warm");
    bench_rec_str(r, "phase", phase);
    bench_rec_str(r, "unit", ms ? "ms" : "GB/s");
    bench_rec_f64(r, "cold", cold);
    bench_rec_f64(r, "warm", warm);
    bench_rec_f64(r, "cold_warm_ratio", cw);
    if (isfinite(cw_target)) {
        bench_rec_f64(r, "cold_warm_target", cw_target);
    }
    bench_rec_str(r, "ref", ref_what);
    bench_rec_f64(r, "ref_value", ref);
    bench_rec_f64(r, "ref_ratio", rr);
    if (isfinite(ref_target)) {
        bench_rec_f64(r, "ref_target", ref_target);
    }
    bench_rec_u64(r, "bytes", mainfig.bytes);
    bench_rec_u64(r, "servers", cl.nmap);
}

static void cl_cw_print(bench_report_t *rep)
{
    char put_what[40], get_what[40], ref[64];
    double raw_put = cl_raw_best(BENCH_DIR_PUT, put_what, sizeof(put_what));
    double raw_get = cl_raw_best(BENCH_DIR_GET, get_what, sizeof(get_what));
    double memcpy_gbps = refs.memcpy_fig.st.median;
    double bound = memcpy_gbps * opts.k / (opts.k + opts.m);
    double memcpy_ms = (double)mainfig.rank_bytes / (memcpy_gbps * BENCH_GB) * 1e3;
    double fresh = cwfig.nfresh > 0 ? cl_cw_median_from(cwfig.fresh_s, 0, cwfig.nfresh) : NAN;

    if (cwfig.nsnap == 0) {
        return;
    }
    say("\ncold and warm, per phase (cold: the first after the servers start, or a fresh %s "
        "with fresh buffers; warm: the median of the later repetitions; cold/warm and "
        "cold/reference are ratios of the same run)\n",
        opts.hosts ? "process" : "client");
    say("%-46s %8s %8s %6s %6s  %-32s %8s %6s %s\n", "phase", "cold", "warm", "c/w", "",
        "reference (same run)", "ref", "c/ref", "target");
    snprintf(ref, sizeof(ref), "raw UCX put (%s)", isfinite(raw_put) ? put_what : "-");
    cl_cw_row(rep, "snapshot STORED, GB/s", 0, cl_cw_gbps(cwfig.stored[0]),
              cl_cw_gbps(cl_cw_median_from(cwfig.stored, 1, cwfig.nsnap)), 0.8, ref, raw_put,
              0.8);
    cl_cw_row(rep, "snapshot PROTECTED, GB/s", 0, cl_cw_gbps(cwfig.prot[0]),
              cl_cw_gbps(cl_cw_median_from(cwfig.prot, 1, cwfig.nsnap)), 0.8,
              "memcpy x k/(k+m)", bound, 0.8);
    cl_cw_row(rep, "trainer stall, ms", 1, cwfig.stall[0] * 1e3,
              cl_cw_median_from(cwfig.stall, 1, cwfig.nsnap) * 1e3, NAN,
              "one memcpy of a writer's bytes", memcpy_ms, 1.5);
    if (cwfig.nsnap > 1) {
        /* the warm stall against the same reference */
        say("%-46s %8s %8.2f %6s %6s  %-32s %8.2f %6.2f <= 1.5 %s\n", "trainer stall, warm, ms",
            "", cl_cw_median_from(cwfig.stall, 1, cwfig.nsnap) * 1e3, "", "",
            "one memcpy of a writer's bytes", memcpy_ms,
            cl_cw_median_from(cwfig.stall, 1, cwfig.nsnap) * 1e3 / memcpy_ms,
            cl_cw_median_from(cwfig.stall, 1, cwfig.nsnap) * 1e3 / memcpy_ms <= 1.5
                ? "met"
                : "MISSED");
    }
    snprintf(ref, sizeof(ref), "raw UCX get (%s)", isfinite(raw_get) ? get_what : "-");
    if (cwfig.nrestore > 0) {
        double warm = cl_cw_median_from(cwfig.restore, 1, cwfig.nrestore);
        cl_cw_row(rep, "restore, first by the writer, GB/s", 0,
                  cl_cw_gbps(cwfig.restore[0]), cl_cw_gbps(warm), 0.8, ref, raw_get, 0.8);
        cl_cw_row(rep,
                  opts.hosts ? "restore by a fresh process (replacement), GB/s"
                             : "restore by a fresh client (replacement), GB/s",
                  0, cl_cw_gbps(fresh),
                  cl_cw_gbps(warm), 0.8, ref, raw_get, 0.8);
    }
    if (cwfig.nfresh_alloc > 0 && cwfig.ntouch > 0) {
        double a = cl_cw_median_from(cwfig.fresh_alloc_ms_gib, 0, cwfig.nfresh_alloc);
        double t = cl_cw_median_from(cwfig.touch_ms_gib, 0, cwfig.ntouch);
        snprintf(ref, sizeof(ref), "first touch, 4 KiB pages");
        say("%-46s %8.0f %8s %6s %6s  %-32s %8.0f %6.2f <= 1.0 %s\n",
            "cks_mem_alloc() of a fresh client, ms/GiB", a, "", "", "", ref, t, a / t,
            a / t <= 1.0 ? "met" : "MISSED");
        bench_rec_t *r = bench_report_add(rep);
        if (r != NULL) {
            cl_rec_common(r, "cold_warm");
            bench_rec_str(r, "phase", "cks_mem_alloc() of a fresh client, ms/GiB");
            bench_rec_str(r, "unit", "ms/GiB");
            bench_rec_f64(r, "cold", a);
            bench_rec_str(r, "ref", ref);
            bench_rec_f64(r, "ref_value", t);
            bench_rec_f64(r, "ref_ratio", a / t);
            bench_rec_f64(r, "ref_target", 1.0);
            bench_rec_u64(r, "servers", cl.nmap);
        }
    }
}

/* ---- across hosts (--hosts) -----------------------------------------------------
 * The same figures with every byte on UCX's TCP transport over veth pairs
 * (the servers, the clients and the raw UCX sink each in a network namespace
 * of their own), judged against raw UCX over the same path, measured in the
 * same run; and the bytes each phase put on the network per object byte. */

/* CPU seconds per GB of the best raw loop of a direction (NAN: none). */
static double cl_raw_best_cpu(unsigned d)
{
    double best = NAN, cpu = NAN;
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        for (unsigned m = 0; m < BENCH_NMETHODS; m++) {
            const cl_fig_t *f = &refs.raw[s][m][d];
            if (f->ok && !(f->st.median <= best) && refs.raw_cpu_bytes[s][m][d] > 0) {
                best = f->st.median;
                cpu = refs.raw_cpu_s[s][m][d] /
                      ((double)refs.raw_cpu_bytes[s][m][d] / BENCH_GB);
            }
        }
    }
    return cpu;
}

/* What the CPU allows: all the "hosts" share this machine's cores, so every
 * byte on the network costs CPU time of the same cores (the TCP copies in
 * the kernel on both sides, UCX's own copies), and a figure is bounded by
 * cores / (CPU seconds per GB). */
static void cl_hosts_cpu_row(bench_rec_t *r, const char *what, const char *key, double cpu,
                             double gbps, double cores)
{
    say("  %-44s %8.3f %10.2f %10.2f %8.2f\n", what, cpu, cores / cpu, gbps,
        gbps / (cores / cpu));
    if (r != NULL) {
        bench_rec_f64(r, key, cpu); /* key: a string literal */
    }
}

static void cl_print_hosts(bench_report_t *rep)
{
    char put_what[40], get_what[40], what[80];
    double raw_put = cl_raw_best(BENCH_DIR_PUT, put_what, sizeof(put_what));
    double raw_get = cl_raw_best(BENCH_DIR_GET, get_what, sizeof(get_what));
    double kfrac = (double)opts.k / (opts.k + opts.m);
    double cold = cwfig.nfresh > 0 ? cl_cw_gbps(cl_cw_median_from(cwfig.fresh_s, 0, cwfig.nfresh))
                                   : NAN;
    bench_stats_t st;
    unsigned met0 = cl_targets_met, judged0 = cl_targets_judged;

    say("\nacross hosts: %u servers, the clients and the raw UCX sink in %u network namespaces "
        "joined by veth pairs and a bridge; UCX_TLS=%s, UCX_NET_DEVICES=%s in each "
        "(eth0 there is its veth end)\n",
        cl.nsrv, (unsigned)cl_net.nhosts + 1, getenv("UCX_TLS"), getenv("UCX_NET_DEVICES"));
    for (unsigned s = 0; s < BENCH_NSETUPS; s++) {
        if (refs.raw_tls[s][0] != '\0') {
            say("raw UCX over that path (%s buffers): lanes %s\n", bench_setup_name(s),
                refs.raw_tls[s]);
        }
    }
    say("%-36s %9s %-5s %-28s %8s %6s  %s\n", "figure", "value", "unit", "reference", "ref",
        "ratio", "target");
    snprintf(what, sizeof(what), "raw UCX put (%s)", put_what);
    cl_target_row(rep, "hosts: snapshot STORED", cl_ck_median(0), "GB/s", raw_put, what, 0.8,
                  1, NULL);
    cl_stats_of(mainfig.bytes, mainfig.prot, mainfig.nsnap, &st);
    snprintf(what, sizeof(what), "raw UCX put x k/(k+m)");
    cl_target_row(rep, "hosts: snapshot PROTECTED", st.median, "GB/s", raw_put * kfrac, what,
                  0.8, 1, NULL);
    snprintf(what, sizeof(what), "raw UCX get (%s)", get_what);
    cl_target_row(rep, "hosts: restore, warm", cl_ck_median(1), "GB/s", raw_get, what, 0.8, 1,
                  NULL);
    cl_target_row(rep, "hosts: restore, cold (fresh process)", cold, "GB/s", raw_get, what,
                  0.8, 1, NULL);
    say("across hosts, targets met: %u of %u judged\n", cl_targets_met - met0,
        cl_targets_judged - judged0);

    /* bytes on the wire per object byte */
    double snap_min = 1.0 + (double)(opts.k + opts.m) / opts.k * (1.0 - 1.0 / cl.nsrv);
    say("\nnetwork bytes per object byte (eth0 counters of every namespace, TCP/IP headers "
        "and acknowledgements included; payload if each chunk crosses once: snapshot "
        "1 + (k+m)/k x (1 - 1/N) = %.2f, restore 1.00)\n", snap_min);
    say("%-30s %4s %10s %14s %14s %14s %8s %8s\n", "phase", "n", "object", "client->srv",
        "srv->srv", "srv->client", "total", "payload");
    for (unsigned k = 0; k < CL_NET_N; k++) {
        double obj = (double)cl_netacc[k].obj;
        double c2s, s2s, s2c, tot, least = k == CL_NET_SNAP ? snap_min : 1.0;
        char sz[32];
        bench_rec_t *r;
        if (cl_netacc[k].n == 0 || obj <= 0) {
            say("%-30s %4u  not measured (a server was down, or no such phase)\n",
                cl_net_phase[k], 0u);
            continue;
        }
        c2s = (double)cl_netacc[k].cli_tx / obj;
        s2c = (double)cl_netacc[k].cli_rx / obj;
        /* what the servers sent and the client did not receive went to servers */
        s2s = ((double)cl_netacc[k].srv_tx - (double)cl_netacc[k].cli_rx) / obj;
        tot = ((double)cl_netacc[k].cli_tx + (double)cl_netacc[k].srv_tx) / obj;
        say("%-30s %4u %10s %14.3f %14.3f %14.3f %8.3f %8.2f\n", cl_net_phase[k],
            cl_netacc[k].n, bench_size_str(cl_netacc[k].obj / cl_netacc[k].n, sz, sizeof(sz)),
            c2s, s2s, s2c, tot, least);
        if ((r = bench_report_add(rep)) == NULL) {
            continue;
        }
        cl_rec_common(r, "hosts_net_bytes");
        bench_rec_str(r, "phase", cl_net_phase[k]);
        bench_rec_u64(r, "phases", cl_netacc[k].n);
        bench_rec_u64(r, "object_bytes", cl_netacc[k].obj);
        bench_rec_u64(r, "client_tx_bytes", cl_netacc[k].cli_tx);
        bench_rec_u64(r, "client_rx_bytes", cl_netacc[k].cli_rx);
        bench_rec_u64(r, "servers_tx_bytes", cl_netacc[k].srv_tx);
        bench_rec_u64(r, "servers_rx_bytes", cl_netacc[k].srv_rx);
        bench_rec_f64(r, "client_to_servers_per_byte", c2s);
        bench_rec_f64(r, "servers_to_servers_per_byte", s2s);
        bench_rec_f64(r, "servers_to_client_per_byte", s2c);
        bench_rec_f64(r, "total_per_byte", tot);
        bench_rec_f64(r, "payload_per_byte", least);
    }
    {
        double mn, srv_snap, cli_snap, srv_rest, cli_rest, mx;
        double cores = (double)sysconf(_SC_NPROCESSORS_ONLN);
        bench_stats_t ps;
        bench_rec_t *r = bench_report_add(rep);
        cl_vstats(mainfig.srv_cpu_snap, mainfig.ncpu_snap, &mn, &srv_snap, &mx);
        cl_vstats(mainfig.cli_cpu_snap, mainfig.ncpu_snap, &mn, &cli_snap, &mx);
        cl_vstats(mainfig.srv_cpu_restore[0], mainfig.ncpu_restore[0], &mn, &srv_rest, &mx);
        cl_vstats(mainfig.cli_cpu_restore[0], mainfig.ncpu_restore[0], &mn, &cli_rest, &mx);
        cl_stats_of(mainfig.bytes, mainfig.prot, mainfig.nsnap, &ps);
        say("\nwhat the CPU allows: every namespace runs on this machine's %.0f cores, so each "
            "byte on the network costs their time (TCP copies in the kernel on both sides, "
            "UCX's copies); CPU seconds per GB of object bytes (utime + stime of the processes "
            "of the phase, medians; softirq time charged to no process is missed)\n", cores);
        say("  %-44s %8s %10s %10s %8s\n", "", "CPU s/GB", "cores/that", "measured", "ratio");
        if (r != NULL) {
            cl_rec_common(r, "hosts_cpu");
            bench_rec_f64(r, "cores", cores);
        }
        cl_hosts_cpu_row(r, "raw UCX put (driver + sink)", "raw_put_cpu_s_per_gb",
                         cl_raw_best_cpu(BENCH_DIR_PUT), raw_put, cores);
        cl_hosts_cpu_row(r, "snapshot to PROTECTED (servers + clients)",
                         "snapshot_cpu_s_per_gb", srv_snap + cli_snap, ps.median, cores);
        say("  %-44s %8.3f (servers) + %.3f (clients)\n", "", srv_snap, cli_snap);
        cl_hosts_cpu_row(r, "raw UCX get (driver + sink)", "raw_get_cpu_s_per_gb",
                         cl_raw_best_cpu(BENCH_DIR_GET), raw_get, cores);
        cl_hosts_cpu_row(r, "restore, warm (servers + clients)", "restore_cpu_s_per_gb",
                         srv_rest + cli_rest, cl_ck_median(1), cores);
        say("  %-44s %8.3f (servers) + %.3f (clients)\n", "", srv_rest, cli_rest);
    }
    {
        bench_rec_t *r = bench_report_add(rep);
        if (r != NULL) {
            cl_rec_common(r, "hosts_raw_ucx");
            bench_rec_f64(r, "put_gbps", raw_put);
            bench_rec_str(r, "put_best_of", put_what);
            bench_rec_f64(r, "get_gbps", raw_get);
            bench_rec_str(r, "get_best_of", get_what);
            bench_rec_f64(r, "put_x_k_over_k_plus_m_gbps", raw_put * kfrac);
            bench_rec_str(r, "ucx_tls", getenv("UCX_TLS") ? getenv("UCX_TLS") : "");
            bench_rec_str(r, "ucx_net_devices",
                          getenv("UCX_NET_DEVICES") ? getenv("UCX_NET_DEVICES") : "");
            bench_rec_u64(r, "namespaces", cl_net.nhosts + 1);
        }
    }
}

/* The chart: each phase cold and warm side by side, the references grey. */
static void cl_cw_plot(void)
{
    bench_bar_t b[16];
    unsigned n = 0;
    char what[40], title[200];
    double warm_restore = cwfig.nrestore > 1
                              ? cl_cw_median_from(cwfig.restore, 1, cwfig.nrestore)
                              : NAN;
#define CW_BAR(lbl, val, grp)                                          \
    do {                                                               \
        if (isfinite(val) && n < 16) {                                 \
            snprintf(b[n].label, sizeof(b[n].label), "%s", lbl);       \
            b[n].value = (val);                                        \
            b[n].group = (grp);                                        \
            n++;                                                       \
        }                                                              \
    } while (0)
    if (cwfig.nsnap == 0) {
        return;
    }
    CW_BAR("STORED, first after start", cl_cw_gbps(cwfig.stored[0]), 2);
    CW_BAR("STORED, steady", cl_cw_gbps(cl_cw_median_from(cwfig.stored, 1, cwfig.nsnap)),
           0);
    CW_BAR("raw UCX put", cl_raw_best(BENCH_DIR_PUT, what, sizeof(what)), 1);
    CW_BAR("PROTECTED, first after start", cl_cw_gbps(cwfig.prot[0]), 2);
    CW_BAR("PROTECTED, steady", cl_cw_gbps(cl_cw_median_from(cwfig.prot, 1, cwfig.nsnap)),
           0);
    CW_BAR("restore, fresh client",
           cwfig.nfresh > 0 ? cl_cw_gbps(cl_cw_median_from(cwfig.fresh_s, 0, cwfig.nfresh))
                            : NAN,
           2);
    CW_BAR("restore, warm client", cl_cw_gbps(warm_restore), 0);
    CW_BAR("raw UCX get", cl_raw_best(BENCH_DIR_GET, what, sizeof(what)), 1);
#undef CW_BAR
    snprintf(title, sizeof(title),
             "ckstore cold (orange: first after start, fresh client) and warm (blue), "
             "%u servers, RS(%u,%u)",
             cl.nmap, opts.k, opts.m);
    bench_plot_bars(opts.plot, "ckstore_cold_vs_warm", title, "GB/s (10^9 B/s of object bytes)",
                    b, n, opts.timeout_s);
}

/* ---- options
 * ------------------------------------------------------------------------------------ */

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
        "      --no-degraded      skip the degraded restores (and the repair after them)\n"
        "      --repair-rate SIZE the servers' repair pacing cap while clients move data,\n"
        "                         bytes/s (default: the server's); the figures name it\n"
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
        "                         moe (dense, optimizer, 63 MB and 112 MB expert states,\n"
        "                         RNG: 462 MiB)\n"
        "      --readers N        client processes that restore (default: --clients);\n"
        "                         each reads a contiguous share of all objects\n"
        "      --versions N       snapshots written and kept per repetition (1; at most 10)\n"
        "      --pec-fraction F   experts saved per layer, as a share of E (instead of\n"
        "                         --pec-k)\n"
        "      --peers LIST       peers on the same objects (memcached,redis,shm: all)\n"
        "      --no-peers, --no-memcached, --no-redis, --no-shm\n"
        "                         skip them (or one)\n"
        "      --sweep-clients LIST, --sweep-servers LIST, --sweep-sizes LIST\n"
        "                         only sweeps: a fresh local cluster per point, snapshots\n"
        "                         and healthy restores, aggregate GB/s per point\n"
        "      --hosts            each server, the clients and the raw UCX sink in network\n"
        "                         namespaces of their own, joined by veth pairs and a\n"
        "                         bridge: every byte over UCX's TCP transport (needs\n"
        "                         root and iproute2; no peers)\n"
        "      --plot DIR         PNG charts with gnuplot (.dat and .gp files next to them)\n"
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
static int cl_parse_items(const char *text, int (*one)(const char *item, unsigned i, void *ctx),
                          void *ctx, unsigned *n_p)
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
static int cl_parse_list(const char *text, unsigned lo, unsigned hi, unsigned *v, unsigned *n_p)
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

static int cl_parse_opts(int argc, char **argv)
{
    enum {
        O_SERVER_BIN = 256,
        O_CHUNK,
        O_ARENA,
        O_NO_DEGRADED,
        O_REPAIR_RATE,
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

    memset(&opts, 0, sizeof(opts));
    opts.local = 6;
    opts.k = 4;
    opts.m = 2;
    opts.chunk = 1ull << 20;
    opts.clients = 1;
    opts.size = 64ull << 20;
    opts.objects = 8;
    opts.reps = 3;
    opts.window = 4;
    opts.encoders = 1;
    opts.pec_layers = 4;
    opts.pec_unit = 256ull << 10;
    opts.timeout_s = 30;
    opts.client_mem = BENCH_MEM_CKS;
    opts.raw_setups = (1u << BENCH_SETUP_THP) | (1u << BENCH_SETUP_SHM_THP) |
                      (1u << BENCH_SETUP_UCX);
    opts.mix = "uniform";
    opts.versions = 1;
    opts.peers = (1u << BENCH_NPEERS) - 1;
    snprintf(opts.command, sizeof(opts.command), "ckstore-bench");
    for (int i = 0, used = (int)strlen(opts.command);
         i < argc && used < (int)sizeof(opts.command) - 1; i++) {
        used += snprintf(opts.command + used, sizeof(opts.command) - (size_t)used, " %s",
                         argv[i]);
    }
    optind = 1;
    while ((c = getopt_long(argc, argv, "l:c:k:M:C:s:o:r:W:e:j:t:vqh", longopts, NULL)) !=
           -1) {
        switch (c) {
            case 'l':
                if (cl_parse_uint(optarg, 1, CL_MAX_SERVERS, &opts.local) != 0) {
                    return -1;
                }
                break;
            case 'c':
                opts.map = optarg;
                break;
            case O_SERVER_BIN:
                opts.server_bin = optarg;
                break;
            case 'k':
                if (cl_parse_uint(optarg, 1, CKS_EC_MAX_K, &opts.k) != 0) {
                    return -1;
                }
                break;
            case 'M':
                if (cl_parse_uint(optarg, 1, CKS_EC_MAX_M, &opts.m) != 0) {
                    return -1;
                }
                break;
            case O_CHUNK:
                if (cl_parse_size(optarg, &opts.chunk) != 0) {
                    return -1;
                }
                if (opts.chunk % 4096 != 0) {
                    fprintf(stderr,
                            "ckstore-bench: the chunk size must be a multiple of 4096\n");
                    return -1;
                }
                break;
            case 'C':
                if (cl_parse_uint(optarg, 1, CL_MAX_CLIENTS, &opts.clients) != 0) {
                    return -1;
                }
                break;
            case 's':
                if (cl_parse_size(optarg, &opts.size) != 0) {
                    return -1;
                }
                break;
            case 'o':
                if (cl_parse_uint(optarg, 1, 1024, &opts.objects) != 0) {
                    return -1;
                }
                break;
            case 'r':
                if (cl_parse_uint(optarg, 1, CL_MAX_REPS, &opts.reps) != 0) {
                    return -1;
                }
                break;
            case 'W':
                if (cl_parse_uint(optarg, 1, 256, &opts.window) != 0) {
                    return -1;
                }
                break;
            case 'e':
                if (cl_parse_uint(optarg, 1, 64, &opts.encoders) != 0) {
                    return -1;
                }
                break;
            case O_ARENA:
                if (cl_parse_size(optarg, &opts.arena) != 0) {
                    return -1;
                }
                opts.arena_given = 1;
                break;
            case O_NO_DEGRADED:
                opts.no_degraded = 1;
                break;
            case O_REPAIR_RATE:
                opts.repair_rate = optarg; /* the server checks it */
                break;
            case O_PEC:
                opts.pec = 1;
                break;
            case O_PEC_ONLY:
                opts.pec = opts.pec_only = 1;
                break;
            case O_PEC_K:
                if (cl_parse_uint(optarg, 1, 16, &opts.pec_k) != 0) {
                    return -1;
                }
                break;
            case O_PEC_LAYERS:
                if (cl_parse_uint(optarg, 1, 64, &opts.pec_layers) != 0) {
                    return -1;
                }
                break;
            case O_PEC_UNIT:
                if (cl_parse_size(optarg, &opts.pec_unit) != 0) {
                    return -1;
                }
                break;
            case O_RAW_SETUPS:
                if (bench_setup_mask(optarg, &opts.raw_setups) != 0) {
                    fprintf(stderr, "ckstore-bench: bad setup list '%s'\n", optarg);
                    return -1;
                }
                break;
            case O_NO_RAW:
                opts.no_raw = 1;
                break;
            case O_CLIENT_MEM:
                if (strcmp(optarg, "ckstore") == 0) {
                    opts.client_mem = BENCH_MEM_CKS;
                } else if (strcmp(optarg, "thp") == 0) {
                    opts.client_mem = BENCH_MEM_THP;
                } else {
                    fprintf(stderr, "ckstore-bench: bad --client-mem '%s' (ckstore or thp)\n",
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
                opts.mix = optarg;
                break;
            case O_READERS:
                if (cl_parse_uint(optarg, 1, CL_MAX_CLIENTS, &opts.readers) != 0) {
                    return -1;
                }
                break;
            case O_VERSIONS:
                if (cl_parse_uint(optarg, 1, CL_MAX_VERSIONS, &opts.versions) != 0) {
                    return -1;
                }
                break;
            case O_PEC_FRACTION:
                opts.pec_fraction = strtod(optarg, &end);
                if (*end != '\0' || !(opts.pec_fraction > 0 && opts.pec_fraction <= 1)) {
                    fprintf(stderr, "ckstore-bench: bad --pec-fraction '%s' (0 < F <= 1)\n",
                            optarg);
                    return -1;
                }
                break;
            case O_PEERS:
                if (bench_peer_mask(optarg, &opts.peers) != 0) {
                    fprintf(stderr, "ckstore-bench: bad peer list '%s' (memcached,redis,shm)\n",
                            optarg);
                    return -1;
                }
                break;
            case O_NO_PEERS:
                opts.peers = 0;
                break;
            case O_NO_MEMCACHED:
                opts.peers &= ~(1u << BENCH_PEER_MEMCACHED);
                break;
            case O_NO_REDIS:
                opts.peers &= ~(1u << BENCH_PEER_REDIS);
                break;
            case O_NO_SHM:
                opts.peers &= ~(1u << BENCH_PEER_SHM);
                break;
            case O_PLOT:
                opts.plot = optarg;
                break;
            case O_SWEEP_CLIENTS:
                if (cl_parse_list(optarg, 1, CL_MAX_CLIENTS, opts.sweep_clients,
                                  &opts.nsweep_clients) != 0) {
                    return -1;
                }
                break;
            case O_SWEEP_SERVERS:
                if (cl_parse_list(optarg, 1, CL_MAX_SERVERS, opts.sweep_servers,
                                  &opts.nsweep_servers) != 0) {
                    return -1;
                }
                break;
            case O_SWEEP_SIZES:
                if (cl_parse_size_list(optarg, opts.sweep_sizes, &opts.nsweep_sizes) != 0) {
                    return -1;
                }
                break;
            case O_HOSTS:
                opts.hosts = 1;
                break;
            case O_STAGE_HOST:
                opts.stage_host = 1;
                break;
            case 'j':
                opts.json = optarg;
                break;
            case 't':
                opts.timeout_s = strtod(optarg, &end);
                if (*end != '\0' || !(opts.timeout_s > 0)) {
                    fprintf(stderr, "ckstore-bench: bad timeout '%s'\n", optarg);
                    return -1;
                }
                break;
            case 'v':
                opts.verbose = 1;
                break;
            case 'q':
                opts.quiet = 1;
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
    if (opts.map != NULL) {
        opts.local = 0;
    } else if (opts.local < opts.k + opts.m) {
        fprintf(stderr, "ckstore-bench: RS(%u,%u) needs at least %u servers (--local)\n",
                opts.k, opts.m, opts.k + opts.m);
        return -1;
    }
    if (opts.pec && (8 % opts.clients != 0 || 16 % opts.clients != 0)) {
        fprintf(stderr, "ckstore-bench: --pec needs a client count that divides 8 (the "
                        "experts are spread over the ranks)\n");
        return -1;
    }
    if (opts.pec_k > 8) {
        fprintf(stderr, "ckstore-bench: --pec-k must be at most 8 (the 8-expert run)\n");
        return -1;
    }
    if (opts.pec_k > 0 && opts.pec_fraction > 0) {
        fprintf(stderr, "ckstore-bench: --pec-k and --pec-fraction exclude each other\n");
        return -1;
    }
    if (opts.readers == 0) {
        opts.readers = opts.clients;
    }
    if (opts.size == 0) {
        fprintf(stderr, "ckstore-bench: --size must be above 0\n");
        return -1;
    }
    if ((opts.nsweep_clients || opts.nsweep_servers || opts.nsweep_sizes) &&
        opts.map != NULL) {
        fprintf(stderr, "ckstore-bench: the sweeps start their own servers: not with "
                        "--cluster\n");
        return -1;
    }
    for (unsigned i = 0; i < opts.nsweep_servers; i++) {
        if (opts.sweep_servers[i] < opts.k + opts.m) {
            fprintf(stderr, "ckstore-bench: --sweep-servers %u: RS(%u,%u) needs at least "
                            "%u servers\n", opts.sweep_servers[i], opts.k, opts.m,
                    opts.k + opts.m);
            return -1;
        }
    }
    if (opts.hosts) {
        if (opts.map != NULL || opts.nsweep_clients || opts.nsweep_servers ||
            opts.nsweep_sizes) {
            fprintf(stderr, "ckstore-bench: --hosts starts its own servers, one sweep point "
                            "at a time is not supported: not with --cluster or the sweeps\n");
            return -1;
        }
        if (opts.local + 1 > CKS_TEST_NETNS_MAX_HOSTS) {
            fprintf(stderr, "ckstore-bench: --hosts: at most %d servers (a namespace each, "
                            "and one for the raw UCX sink)\n", CKS_TEST_NETNS_MAX_HOSTS - 1);
            return -1;
        }
        if (opts.reps * opts.readers > CL_MAX_COLD) {
            fprintf(stderr, "ckstore-bench: --hosts: reps x readers at most %d (a fresh "
                            "process per cold restore)\n", CL_MAX_COLD);
            return -1;
        }
        opts.peers = 0; /* memcached and Redis would run in the client's namespace */
    }
    cl_mix.kind = opts.mix;
    cl_mix_build();
    if (strcmp(opts.mix, "moe") == 0) {
        opts.objects = cl_mix.n;
        opts.size = cl_mix.max; /* the references are measured at the largest object */
    }
    return 0;
}

/* ---- memory
 * ---------------------------------------------------------------------------------------
 */

static uint64_t cl_round_up(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

/* Arena per server: one snapshot at a time (the previous one is deleted)
 * spread over N servers, a quarter more for uneven placement and the
 * allocator's slack, plus the whole objects (with parity) a primary may hold
 * until they are protected; with --pec, one 16-expert model and two partial
 * versions (retention 2). */
static uint64_t cl_arena_size(void)
{
    const unsigned n = opts.local;
    uint64_t need = 0;
    if (!opts.pec_only) {
        /* the puts are STORED long before the encoders are done: a primary
         * may hold every object it is primary of, whole and with its parity;
         * placement spreads primaries evenly, count twice the mean (at least
         * 3) for the unlucky server */
        uint64_t nobj = (uint64_t)opts.clients * cl_mix.n;
        uint64_t primary = 2 * ((nobj + n - 1) / n);
        primary = primary < 3 ? 3 : primary;
        primary = primary > nobj ? nobj : primary;
        /* --versions snapshots are kept at once */
        double snap = (double)opts.clients * (double)cl_mix.stored * opts.versions;
        need = (uint64_t)(1.25 * snap / n + (double)primary * cl_stored_bytes(cl_mix.max));
        if (!opts.no_degraded) {
            /* the versions written with 1 and 2 servers down are kept next
             * to the healthy one until the end of the repetition, on fewer
             * servers, and one snapshot is taken while the repair runs:
             * room for them too (across hosts the 1-down snapshot ran out of
             * a 640 MiB arena at the defaults; here the 2-down one did, 2
             * runs of 3, with "arena full") */
            double one = (double)opts.clients * (double)cl_mix.stored;
            for (unsigned d = 1; d <= CL_MAX_DOWN && d <= opts.m && d < n; d++) {
                need += (uint64_t)(1.25 * one / (n - d));
            }
            need += (uint64_t)(1.25 * one / n);
        }
    }
    if (opts.pec) {
        uint64_t model, delta;
        cl_pec_model_bytes(16, 0, NULL, &model);
        cl_pec_model_bytes(16, 1, NULL, &delta);
        /* 1.75: measured on the 2-core machine, 832 MiB per server (1.65 x
         * the live bytes of the 16-expert chain) ran out, 1024 MiB (2.0 x)
         * did not; with the objects in flight this gives 1152 MiB (docs) */
        uint64_t p =
            (uint64_t)(1.75 * (double)(model + 2 * delta) / n +
                       (double)opts.window * cl_stored_bytes(cl_pec_dense_bytes(1)));
        need = p > need ? p : need;
    }
    need += 64ull << 20;
    return cl_round_up(need, 64ull << 20);
}

/* Refuse to start what does not fit: arenas in /dev/shm, client buffers and
 * references in memory. Returns 0 when it fits. */
static int cl_check_memory(void)
{
    uint64_t avail = cl_mem_available(), shm = cl_shm_free();
    uint64_t arenas = opts.local * opts.arena;
    uint64_t clients = 0, refsz, rank_max = 0;
    if (!opts.pec_only) {
        /* writers' objects, readers' shares, a verify buffer per reader; the
         * peers' copy of one writer's objects and the peer server holding them */
        clients = opts.clients * cl_mix.bytes * 2 + opts.readers * cl_mix.max;
        if (opts.peers != 0) {
            clients += 2 * cl_mix.bytes + cl_mix.max;
        }
    }
    if (opts.pec) {
        uint64_t p = cl_pec_model_bytes(16, 0, &rank_max, NULL) +
                     opts.clients * cl_pec_dense_bytes(1);
        clients = p > clients ? p : clients;
    }
    refsz = 4 * opts.size + (opts.no_raw ? 0 : 4 * opts.size + (64ull << 20));
    uint64_t ram = arenas + clients + refsz;
    say("memory: arenas %u x %.2f GiB = %.2f GiB in /dev/shm (%.1f GiB free there), "
        "client "
        "buffers %.2f GiB, references %.2f GiB; MemAvailable %.1f GiB\n",
        opts.local, cl_gib(opts.arena), cl_gib(arenas), cl_gib(shm), cl_gib(clients),
        cl_gib(refsz), cl_gib(avail));
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

/* Files of ours left in /dev/shm (there should be none). */
static unsigned cl_shm_leftovers(void)
{
    unsigned n = 0;
    char path[160];
    struct stat st;
    for (unsigned i = 0; i < CL_MAX_SERVERS; i++) {
        snprintf(path, sizeof(path), "/dev/shm/ckstore-bench-cl-%d-%u.arena",
                 (int)getpid(), i);
        if (stat(path, &st) == 0) {
            fprintf(stderr, "ckstore-bench: left behind: %s\n", path);
            n++;
        }
    }
    snprintf(path, sizeof(path), "/dev/shm/ckstore-bench-%d.arena", (int)getpid());
    if (stat(path, &st) == 0) {
        fprintf(stderr, "ckstore-bench: left behind: %s\n", path);
        n++;
    }
    return n;
}

/* ---- main
 * ------------------------------------------------------------------------------------------
 */

/* With --sweep-*: only the sweeps (each point a cluster of its own). */
static int cl_sweep_main(bench_report_t *rep)
{
    double load_start, load_end;
    int rc = 1;
    if (cl_find_server_bin() != 0) {
        fprintf(stderr, "ckstore-bench: no ckstore-server binary (%s); use --server-bin\n",
                cl.bin);
        return 1;
    }
    bench_machine_describe(&rep->machine);
    say("ckstore-bench cluster, sweeps: RS(%u,%u), %u objects per client, %u reps per point; "
        "machine: %s, %llu cores\n",
        opts.k, opts.m, opts.objects, opts.reps, bench_rec_get_str(&rep->machine, "cpu"),
        (unsigned long long)bench_rec_get_u64(&rep->machine, "cores"));
    load_start = bench_loadavg();
    cl_install_signals();
    cl_run_sweeps();
    load_end = bench_loadavg();
    cl_print_sweeps(rep);
    if (opts.plot != NULL) {
        cl_plot_sweeps();
    }
    say("load average: %.2f at the start, %.2f at the end\n", load_start, load_end);
    bench_rec_str(&rep->run, "command", opts.command);
    bench_rec_str(&rep->run, "mode", "cluster-sweep");
    bench_rec_u64(&rep->run, "k", opts.k);
    bench_rec_u64(&rep->run, "m", opts.m);
    bench_rec_u64(&rep->run, "chunk", opts.chunk);
    bench_rec_u64(&rep->run, "objects", opts.objects);
    bench_rec_u64(&rep->run, "reps", opts.reps);
    bench_rec_u64(&rep->run, "window", opts.window);
    bench_rec_u64(&rep->run, "stage_host", (uint64_t)opts.stage_host);
    bench_rec_f64(&rep->run, "loadavg_start", load_start);
    bench_rec_f64(&rep->run, "loadavg_end", load_end);
    rc = 0;
    if (opts.json != NULL) {
        if (bench_report_write_json(rep, opts.json) != 0) {
            fprintf(stderr, "ckstore-bench: cannot write %s: %s\n", opts.json,
                    strerror(errno));
            rc = 1;
        } else {
            say("\nresults written to %s\n", opts.json);
        }
    }
    if (cl_shm_leftovers() != 0) {
        rc = 1;
    }
    bench_report_free(rep);
    return rc;
}

int cks_bench_cluster_main(int argc, char **argv)
{
    bench_report_t rep = {0};
    double load_start, load_end;
    char sz[32];
    int rc = 1;

    if (cl_parse_opts(argc, argv) != 0) {
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (opts.nsweep_clients + opts.nsweep_servers + opts.nsweep_sizes > 0) {
        return cl_sweep_main(&rep);
    }
    if (opts.local > 0) {
        if (cl_find_server_bin() != 0) {
            fprintf(stderr,
                    "ckstore-bench: no ckstore-server binary (%s); use --server-bin\n",
                    cl.bin);
            return 1;
        }
        if (opts.arena == 0) {
            opts.arena = cl_arena_size();
        }
        if (cl_check_memory() != 0) {
            return 1;
        }
    } else {
        char line[1100];
        FILE *f;
        snprintf(cl.map, sizeof(cl.map), "%s", opts.map);
        if ((f = fopen(cl.map, "r")) == NULL) {
            fprintf(stderr, "ckstore-bench: %s: %s\n", cl.map, strerror(errno));
            return 1;
        }
        while (fgets(line, sizeof(line), f) != NULL) {
            cl.nmap += strncmp(line + strspn(line, " \t"), "server", 6) == 0;
        }
        fclose(f);
    }
    bench_machine_describe(&rep.machine);
    say("ckstore-bench cluster: %s, RS(%u,%u), %s chunks, %u client%s\n",
        opts.local ? (opts.hosts ? "local servers, each in a network namespace (--hosts)"
                                 : "local servers")
                   : opts.map,
        opts.k, opts.m,
        bench_size_str(opts.chunk, sz, sizeof(sz)), opts.clients,
        opts.clients > 1 ? "s" : "");
    say("machine: %s, %llu cores, %.1f GiB, %s, UCX %s; THP %s, shmem THP %s, /dev/shm "
        "huge=%s\n",
        bench_rec_get_str(&rep.machine, "cpu"),
        (unsigned long long)bench_rec_get_u64(&rep.machine, "cores"),
        (double)bench_rec_get_u64(&rep.machine, "memory_bytes") / (1ull << 30),
        bench_rec_get_str(&rep.machine, "kernel"),
        bench_rec_get_str(&rep.machine, "ucx_version"),
        bench_rec_get_str(&rep.machine, "thp_enabled"),
        bench_rec_get_str(&rep.machine, "shmem_thp_enabled"),
        bench_rec_get_str(&rep.machine, "dev_shm_huge"));
    load_start = bench_loadavg();
    if (load_start >= 0.5 * (double)bench_rec_get_u64(&rep.machine, "cores")) {
        say("NOTE: load average %.2f: other work is running, the figures will be "
            "disturbed\n",
            load_start);
    }

    /* processes first: no UCX in this process before the forks */
    cl_install_signals();
    if (opts.hosts) {
        char why[256];
        if (cks_test_netns_create(&cl_net, opts.local + 1, why, sizeof(why)) != 0) {
            fprintf(stderr, "ckstore-bench: --hosts needs network namespaces (root and "
                            "iproute2's ip netns): %s\n", why);
            goto out;
        }
        cl_net_up = 1;
        /* namespaces separate networks, not memory: without this UCX would
         * still move bytes through shared memory or CMA between them */
        setenv("UCX_TLS", "tcp", 1);
        setenv("UCX_NET_DEVICES", "eth0", 1);
        /* this thread, the workers forked from it and the threads they make */
        if (cks_test_netns_enter_client(&cl_net) != 0) {
            goto out;
        }
        snprintf(cl.child.netns, sizeof(cl.child.netns), "%s", cl_net.host[opts.local]);
        say("hosts: client %s (this process and its clients), servers %s .. %s, raw UCX sink "
            "%s; UCX_TLS=tcp UCX_NET_DEVICES=eth0\n",
            cl_net.client_addr, cl_net.host_addr[0], cl_net.host_addr[opts.local - 1],
            cl_net.host_addr[opts.local]);
    }
    if (opts.local > 0) {
        double t0 = bench_now();
        if (cl_cluster_start(opts.arena) != 0) {
            goto out;
        }
        say("%u servers up in %.1f s (arena %s each, map %s), pids", cl.nsrv,
            bench_now() - t0, bench_size_str(opts.arena, sz, sizeof(sz)), cl.map);
        for (unsigned i = 0; i < cl.nsrv; i++) {
            say(" %d", (int)cl.srv[i].pid);
        }
        say("\n");
    }
    if (!opts.no_raw) {
        cl.child.verbose = opts.verbose;
        char err[BENCH_ERR_LEN];
        if (bench_child_start(&cl.child, 64ull << 20, opts.timeout_s, err, sizeof(err)) !=
            0) {
            fprintf(stderr, "ckstore-bench: the raw UCX sink did not start: %s\n", err);
            goto out;
        }
        cl.have_child = 1;
        cl_install_signals(); /* bench_child_start installed its own */
    }
    if (cl_workers_start() != 0) {
        goto out;
    }

    say("\nreferences: ISA-L, memcpy");
    if (cl_refs_isal() != 0) {
        goto out;
    }
    if (!opts.no_raw) {
        say(", raw UCX");
        if (cl_refs_raw() != 0) {
            goto out;
        }
    }
    say("\n");
    if (!opts.pec_only) {
        say("snapshots and restores (%u reps):\n", opts.reps);
        if (cl_measure_main() != 0) {
            goto out;
        }
    }
    if (!opts.pec_only && opts.peers != 0) {
        say("peers (the same objects):\n");
        if (cl_measure_peers() != 0) {
            goto out;
        }
    }
    if (opts.pec) {
        say("partial-expert checkpoints:\n");
        if (cl_measure_pec() != 0) {
            goto out;
        }
    }
    say("references again: ISA-L, memcpy");
    if (cl_refs_isal() != 0) {
        goto out;
    }
    if (!opts.no_raw) {
        say(", raw UCX");
        if (cl_refs_raw() != 0) {
            goto out;
        }
    }
    say("\n");
    load_end = bench_loadavg();

    cl_print_refs(&rep);
    cl_rec_raw_best(&rep);
    if (!opts.pec_only) {
        cl_print_main(&rep);
        cl_cw_print(&rep); /* cold and warm, per phase */
        cl_print_figures(&rep);
        cl_print_peers(&rep);
    }
    if (opts.pec) {
        cl_print_pec(&rep);
    }
    if (!opts.pec_only) {
        cl_print_targets(&rep);
    }
    if (opts.hosts && !opts.pec_only) {
        cl_print_hosts(&rep);
    }
    if (opts.plot != NULL && !opts.pec_only) {
        cl_plot_bars();
        cl_cw_plot(); /* cold and warm, per phase */
    }
    say("load average: %.2f at the start, %.2f at the end\n", load_start, load_end);

    bench_rec_str(&rep.run, "command", opts.command);
    bench_rec_str(&rep.run, "mode", "cluster");
    bench_rec_str(&rep.run, "cluster", opts.local ? (opts.hosts ? "hosts" : "local") : opts.map);
    bench_rec_u64(&rep.run, "hosts", (uint64_t)opts.hosts);
    bench_rec_u64(&rep.run, "servers", cl.nmap);
    bench_rec_u64(&rep.run, "racks", opts.local ? CL_RACKS : 0);
    bench_rec_u64(&rep.run, "k", opts.k);
    bench_rec_u64(&rep.run, "m", opts.m);
    bench_rec_u64(&rep.run, "chunk", opts.chunk);
    bench_rec_u64(&rep.run, "clients", opts.clients);
    bench_rec_u64(&rep.run, "objects", opts.objects);
    bench_rec_str(&rep.run, "mix", cl_mix.kind);
    bench_rec_u64(&rep.run, "readers", opts.readers);
    bench_rec_u64(&rep.run, "versions", opts.versions);
    bench_rec_u64(&rep.run, "size", opts.size);
    bench_rec_u64(&rep.run, "reps", opts.reps);
    bench_rec_u64(&rep.run, "window", opts.window);
    bench_rec_u64(&rep.run, "encoders", opts.encoders);
    bench_rec_u64(&rep.run, "arena_bytes", opts.arena);
    bench_rec_f64(&rep.run, "loadavg_start", load_start);
    bench_rec_f64(&rep.run, "loadavg_end", load_end);
    if (opts.pec) {
        bench_rec_u64(&rep.run, "pec_layers", opts.pec_layers);
        bench_rec_u64(&rep.run, "pec_unit", opts.pec_unit);
    }
    if (mainfig.ndown > 0) {
        char ids[32];
        if (mainfig.ndown > 1) {
            snprintf(ids, sizeof(ids), "%u,%u", mainfig.down_ids[0], mainfig.down_ids[1]);
        } else {
            snprintf(ids, sizeof(ids), "%u", mainfig.down_ids[0]);
        }
        bench_rec_str(&rep.run, "killed_servers", ids);
    }
    if (opts.json != NULL) {
        if (bench_report_write_json(&rep, opts.json) != 0) {
            fprintf(stderr, "ckstore-bench: cannot write %s: %s\n", opts.json,
                    strerror(errno));
            goto out;
        }
        say("\nresults written to %s\n", opts.json);
    }
    rc = 0;

out:
    if (cl_client != NULL) {
        cks_client_destroy(cl_client);
        cl_client = NULL;
    }
    cl_workers_stop();
    if (cl.have_child) {
        bench_child_stop(&cl.child, opts.timeout_s);
        cl.have_child = 0;
    }
    cl_servers_stop();
    cl_remove_files();
    if (cl_net_up) {
        cks_test_netns_destroy(&cl_net); /* leaves the client namespace first */
        cl_net_up = 0;
    }
    if (cl_shm_leftovers() != 0) {
        rc = 1;
    }
    bench_report_free(&rep);
    return rc;
}
