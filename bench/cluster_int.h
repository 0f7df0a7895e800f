/*
 * bench/cluster_int: what the files of `ckstore-bench cluster` share (not
 * a library header): the options, the context that holds every piece of a
 * run's state, the pipe protocol between the parent and its client
 * processes, and each file's functions.
 *
 * One context (cl_ctx_t) per run, passed explicitly; nothing of a run lives
 * in a file-scope variable. The one exception is the pointer the signal
 * handler reads (cluster_servers.c), set once in the parent. A forked child
 * changes only its own copy of a context: a client process reads its
 * parent's (const), a sweep point runs a context of its own that the parent
 * made for it before the fork (cluster_sweep.c).
 *
 *   cluster.c          main: the order of the phases, the run's record
 *   cluster_opts.c     the command line, the context
 *   cluster_layout.c   the objects of a snapshot (--mix), arena size, memory check
 *   cluster_servers.c  the local servers: files, start, kill, restart, stop; signals
 *   cluster_clients.c  the client processes, parent side: fork, command, collect
 *   cluster_worker.c   a client process: its libckstore client and the commands
 *   cluster_refs.c     the references: raw ISA-L, CRC-64, memcpy, raw UCX
 *   cluster_run.c      the snapshot and restore phases, cold and warm
 *   cluster_heal.c     self-healing: repair after servers return, a replacement
 *   cluster_pec.c      full versus partial-expert (PEC) checkpoints
 *   cluster_peers.c    memcached, Redis, /dev/shm files on the same objects
 *   cluster_report.c   the printed tables and their records
 *   cluster_targets.c  the targets: each figure against its reference
 *   cluster_hosts.c    --hosts: namespaces, network bytes, CPU bounds
 *   cluster_sweep.c    --sweep-*: a fresh cluster per point
 *   cluster_plot.c     --plot: the charts
 */
#ifndef CKS_BENCH_CLUSTER_INT_H
#define CKS_BENCH_CLUSTER_INT_H

#include "bench.h"
#include "ckstore.h"
#include "cks_netns.h"
#include "cluster.h"
#include "peers.h"
#include "proc.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

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
#define CL_MAX_COLD     32
#define CL_MAX_SLOTS    (CL_MAX_CLIENTS + CL_MAX_COLD)
#define CL_MAX_OBJS     1024
#define CL_MAX_VERSIONS 10
#define CL_MAX_SNAPS    (CL_MAX_REPS * CL_MAX_VERSIONS)
/* cks_mem_alloc() calls of the workers' preparations (the servers on this
 * host map and fault in each region before it returns): seconds per GiB */
#define CL_MAX_ALLOCS  256
#define CL_FIG_SAMPLES 256

/* ---- options (cluster_opts.c) ------------------------------------------------------ */

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
    const char *arena_dir;    /* --arena-dir: the servers' arena files (/dev/shm) */
    const char *repair_rate;  /* --repair-rate for the servers; NULL: their default */
    const char *copy_threads; /* --copy-threads for the servers; NULL: their default */
    const char *coding_nice;  /* --coding-nice for the servers; NULL: their default */
    int stage_host; /* --stage-host: writers' puts staged through a ring that holds
                       a writer's snapshot (CKS_PUT_FIELD_STAGED); stall = COPIED */
    int stage_default_ring; /* --stage-default-ring: the library's ring instead */
    const char *json;
    int quiet, verbose, no_raw, no_degraded, pec, pec_only;
    unsigned pec_k; /* 0: E/4 */
    unsigned pec_layers;
    uint64_t pec_unit; /* bytes of bf16 parameters per d^2 unit */
    unsigned raw_setups;
    bench_mem_kind_t client_mem; /* the clients' main buffers: BENCH_MEM_CKS or _THP */
    double timeout_s;
    double restart_pause_s; /* --restart-pause: after the restart and repair */
    char command[1024];
    const char *mix;     /* --mix: uniform, moe */
    unsigned readers;    /* client processes that restore (--readers; = clients) */
    unsigned versions;   /* snapshots written and kept per repetition */
    double pec_fraction; /* experts saved per layer as a share of E (0: pec_k) */
    unsigned peers;      /* mask of bench_peer_t to measure */
    const char *plot;    /* --plot DIR */
    /* --sweep-clients, --sweep-servers, --sweep-sizes */
    unsigned sweep_clients[CL_MAX_SWEEP], nsweep_clients;
    unsigned sweep_servers[CL_MAX_SWEEP], nsweep_servers;
    uint64_t sweep_sizes[CL_MAX_SWEEP];
    unsigned nsweep_sizes;
    int hosts; /* --hosts: each server and the clients in network namespaces of their own
                */
} cl_opts_t;

/* ---- the objects of a snapshot (cluster_layout.c) and of the PEC model ------------ */

typedef struct {
    char name[40];
    uint64_t size;
    uint64_t off; /* in a writer's buffer */
    cks_tags_t tags;
} cl_obj_t;

typedef struct {
    const char *kind; /* "uniform", "moe" */
    cl_obj_t obj[CL_MAX_OBJS];
    unsigned n;
    uint64_t bytes, max, stored; /* one writer's object bytes, largest, arena bytes */
} cl_mix_t;

typedef struct {
    char key[64];
    cks_tags_t tags;
    uint64_t size;
    int32_t layer, expert; /* expert -1: dense */
} cl_pobj_t;

/* ---- a local server (cluster_servers.c) -------------------------------------------- */

typedef struct {
    unsigned id;
    uint16_t port;
    volatile pid_t pid;
    int out_fd; /* read end of its stdout */
    char arena[256];
    char ddir[160];
    char log[160];
    char netns_path[128]; /* --hosts: /run/netns/NAME of its namespace; "": ours */
} cl_server_t;

/* ---- the client processes' protocol (cluster_clients.c, cluster_worker.c) ---------- */

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
    CL_F_FRESH = 1u << 0,     /* a new client first (connected to every live server) */
    CL_F_VERIFY = 1u << 1,    /* compare the bytes afterwards (outside the timing) */
    CL_F_FULL = 1u << 2,      /* PEC_SNAP: every expert */
    CL_F_RECONNECT = 1u << 3, /* keep the client; reconnect it to every live server */
};

/* What the workers' clients do before a snapshot (cl_snapshot's `fresh`). */
enum { CL_CLIENT_KEEP = 0, CL_CLIENT_FRESH = 1, CL_CLIENT_RECONNECT = 2 };

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
    uint64_t alloc_huge_bytes; /* of those, bytes in huge pages, reserved or transparent */
    double touch_ms_gib; /* a fresh restore's: the first touch of as much memory
                            of the same kind of page, next to it (0: none) */
    int32_t touch_pages; /* bench_pages_t of that touch */
    char err[256];
} cl_res_t;

#define CL_ERR_VERIFY (-1000)

/* ---- figures ------------------------------------------------------------------------
 */

/* A reference figure: samples pooled over the passes (before and after the
 * cluster runs: the machine is shared and its speed drifts), the median of
 * each pass, and the statistics of all samples. */
typedef struct {
    int ok;
    bench_stats_t st;
    double secs[CL_FIG_SAMPLES];
    unsigned n;
    double pass_med[2];
    unsigned npass;
} cl_fig_t;

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
     * start and end), the same snapshot after the same servers' restart with
     * nothing to repair (STORED seconds: its reference), and a replacement
     * server (empty arena and metadata) taking a killed one's id (the same
     * two figures as the repair) */
    double down_stored[CL_MAX_DOWN + 1][CL_MAX_REPS];
    unsigned ndown_stored[CL_MAX_DOWN + 1];
    double repair_gbs[CL_MAX_REPS], repair_prot[CL_MAX_REPS];
    uint64_t repair_dec[CL_MAX_REPS][2]; /* its decodes, and the chunks they rebuilt */
    unsigned nrepair;
    double during_stored[CL_MAX_REPS];
    uint64_t during_left0[CL_MAX_REPS], during_left1[CL_MAX_REPS];
    unsigned nduring;
    double norepair_stored[CL_MAX_REPS];
    unsigned nnorepair;
    double repl_gbs, repl_prot;
    uint64_t repl_dec[2];
    int repl_ok;
} cl_main_t;

/* Cold and warm, per phase: what a user meets first is cold: the first
 * snapshot after the servers start, and the restore by a replacement rank (a
 * fresh client with fresh buffers the servers have never seen). The main
 * figures are medians over the repetitions; these keep the first apart from
 * the later ones. The snapshots need no run of their own (the main figures'
 * first entry is the first snapshot after start); the fresh restore is one
 * more restore per repetition, after the writer's, by fresh clients; the
 * warm restore is the writer's restore of the same version once more, right
 * after its first (in the repetitions after the first, that first one comes
 * right after two servers restarted, while they map the writer's buffers
 * again: no steady state). The
 * reference for cks_mem_alloc() is the first touch of as many pages of
 * anonymous memory by one thread of the same process, right after it: 4 KiB
 * pages, or 2 MiB ones where the clients' memory got huge pages, reserved
 * (scripts/hugepages) or transparent (cluster_worker.c). */
typedef struct {
    double fresh_s[CL_MAX_REPS]; /* restore by fresh clients into fresh buffers */
    double again_s[CL_MAX_REPS]; /* the writer's restore again, at once: warm */
    unsigned nagain;
    double fresh_alloc_ms_gib[CL_MAX_REPS * CL_MAX_CLIENTS]; /* their cks_mem_alloc() */
    double touch_ms_gib[CL_MAX_REPS * CL_MAX_CLIENTS]; /* first touch of as many
                                                             pages, by each of them */
    unsigned nfresh, nfresh_alloc, ntouch;
    int touch_pages; /* bench_pages_t of the last touch */
    double back_ms_gib[CL_MAX_REPS]; /* the host's backing of free memory before
                                        them (bench_back_free_memory()) */
    unsigned nback;
    /* the main figures' per-snapshot and healthy-restore seconds in the
     * order they were measured (the main report sorts those in place) */
    double stored[CL_MAX_SNAPS], prot[CL_MAX_SNAPS], stall[CL_MAX_SNAPS];
    double restore[CL_MAX_REPS];
    unsigned nsnap, nrestore;
} cl_cw_t;

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

/* --hosts: network counters (eth0 of the client namespace; of every
 * server's, summed) */
typedef struct {
    int ok;
    uint64_t cli_rx, cli_tx;
    uint64_t srv_rx, srv_tx;
} cl_netctr_t;

/* Network bytes of the phases, from GO to the end of the last worker's part
 * (every byte any eth0 sent: TCP/IP headers and acknowledgements included) */
enum { CL_NET_SNAP, CL_NET_RESTORE, CL_NET_RESTORE_COLD, CL_NET_N };

typedef struct {
    uint64_t obj, cli_tx, cli_rx, srv_tx, srv_rx;
    unsigned n;
} cl_netacc_t;

typedef enum {
    CL_SWEEP_CLIENTS,
    CL_SWEEP_SERVERS,
    CL_SWEEP_SIZES,
    CL_NSWEEPS
} cl_sweep_t;

typedef struct {
    int32_t status; /* 0 measured, 1 failed, 2 did not fit in memory */
    uint32_t clients, servers;
    uint64_t size, bytes;
    bench_stats_t st[3]; /* STORED, PROTECTED, restore: aggregate GB/s */
    /* the same three, cold (the first after the servers start) and warm (the
     * median of the later repetitions; NAN with one): aggregate GB/s */
    double cold[3], warm[3];
    /* server CPU seconds per GB of object bytes (all servers): snapshot,
     * restore; cold and warm as above */
    double cpu_cold[2], cpu_warm[2];
} cl_sweep_pt_t;

/* ---- the context ------------------------------------------------------------------- */

typedef struct cl_ctx {
    cl_opts_t o;  /* the options; a sweep point's context has its own */
    cl_mix_t mix; /* the objects every writer puts */

    /* processes and files (also read by the signal handler) */
    cl_server_t srv[CL_MAX_SERVERS];
    unsigned nsrv; /* servers we started (0 with --cluster) */
    unsigned nmap; /* servers in the map */
    double placement_max_ratio; /* the busiest primary's bytes over the mean
                                   (cl_placement_say(); 0: not known) */
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
    /* --hosts: the namespaces (tools/netns): host i for server i, host nsrv
     * for the raw UCX sink, the client namespace for this process and its
     * workers */
    cks_test_netns_t net;
    volatile int net_up;
    bench_peer_state_t peer;  /* the peer running now (cluster_peers.c) */
    volatile pid_t sweep_pid; /* the sweep point running now (a child) */
    struct cl_ctx *point;     /* its context, made by this process before the fork */

    cks_client_h client; /* this process's own client (versions, stats, repair) */

    /* figures */
    cl_refs_t refs;
    cl_main_t fig;
    cl_cw_t cw;
    cl_pec_fig_t pecfig[2];
    bench_peer_res_t peerres[BENCH_NPEERS];
    int peer_tried[BENCH_NPEERS];
    double alloc_s_gib[CL_MAX_ALLOCS];
    unsigned nallocs;
    uint64_t alloc_bytes, alloc_huge_bytes; /* all preparations': bytes, in huge pages */
    /* the servers' CPU seconds when the last cl_workers_run() said GO: the
     * workers' preparation (connects, cks_mem_alloc()) is not the phase's */
    double cpu_go;
    cl_netctr_t net_go; /* --hosts: the network counters at that GO */
    cl_netacc_t netacc[CL_NET_N];
    unsigned targets_met, targets_judged;
    cl_sweep_pt_t sweep_res[CL_NSWEEPS][CL_MAX_SWEEP];
    unsigned sweep_n[CL_NSWEEPS];
} cl_ctx_t;

/* ---- cluster_opts.c ---------------------------------------------------------------- */

/** A zeroed context (cpu_go -1, no descriptors); NULL without memory. */
cl_ctx_t *cl_ctx_new(void);
void cl_ctx_free(cl_ctx_t *x);
/** Options into x->o (defaults first); builds the mix. -1 on bad options. */
int cl_parse_opts(cl_ctx_t *x, int argc, char **argv);
/** A client of the cluster the run uses (map, RS(k, m), chunk, timeout). */
void cl_client_params(const cl_ctx_t *x, cks_client_params_t *cp, const char *name);
/** printf to stdout unless --quiet (after clearing the progress line). */
void cl_say(const cl_ctx_t *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- cluster_layout.c -------------------------------------------------------------- */

/** Arena bytes an object of `size` takes: whole stripes of k + m chunks. */
uint64_t cl_stored_bytes(const cl_ctx_t *x, uint64_t size);
void cl_mix_build(cl_ctx_t *x);
void cl_obj_key(const cl_ctx_t *x, unsigned writer, unsigned o, char *key, size_t len);
uint64_t cl_obj_seed(unsigned writer, unsigned o);
void cl_read_share(const cl_ctx_t *x, unsigned reader, unsigned readers,
                   unsigned *first_p, unsigned *count_p);
uint64_t cl_arena_size(const cl_ctx_t *x);
int cl_check_memory(const cl_ctx_t *x);

/* ---- cluster_servers.c ------------------------------------------------------------- */

void cl_install_signals(cl_ctx_t *x);
void cl_remove_files(const cl_ctx_t *x);
int cl_find_server_bin(cl_ctx_t *x);
int cl_cluster_start(cl_ctx_t *x, uint64_t arena);
int cl_server_spawn(cl_ctx_t *x, cl_server_t *s, uint64_t arena);
int cl_server_wait(const cl_server_t *s, double deadline);
void cl_server_kill(const cl_ctx_t *x, cl_server_t *s);
/* Start the servers of positions ids again (their command lines, arenas and
 * data dirs) and wait until each listens (bounded). 0, or -1 (said why). */
int cl_servers_respawn(cl_ctx_t *x, const unsigned *ids, unsigned n);
void cl_server_wipe(const cl_server_t *s);
void cl_servers_stop(cl_ctx_t *x);
double cl_servers_cpu(const cl_ctx_t *x);
unsigned cl_shm_leftovers(const cl_ctx_t *x);

/* ---- cluster_clients.c ------------------------------------------------------------- */

int cl_workers_start(cl_ctx_t *x);
void cl_workers_stop(cl_ctx_t *x);
/** QUIT to the worker of one slot, and reap it (killed after the timeout). */
void cl_worker_quit(cl_ctx_t *x, unsigned slot);
unsigned cl_cold_slot(const cl_ctx_t *x, unsigned rep, unsigned reader);
int cl_workers_run_at(cl_ctx_t *x, unsigned base, const cl_cmd_t *proto, cl_res_t *res,
                      unsigned nw);
int cl_workers_run(cl_ctx_t *x, const cl_cmd_t *proto, cl_res_t *res, unsigned nw);
void cl_aggregate(const cl_res_t *res, unsigned nw, uint64_t *bytes_p, double *stored_s_p,
                  double *end_s_p, uint64_t *rank_max_p);
uint64_t cl_sum_stored(const cl_res_t *res, unsigned nw);
double cl_clients_cpu(const cl_res_t *res, unsigned nw);

/* ---- cluster_worker.c -------------------------------------------------------------- */

/** A client process's loop: commands from cmd_fd, results to res_fd. */
int cl_worker_main(const cl_ctx_t *x, unsigned index, int cmd_fd, int res_fd);

/* ---- cluster_refs.c ---------------------------------------------------------------- */

int cl_refs_isal(cl_ctx_t *x);
int cl_refs_raw(cl_ctx_t *x);
/** Best raw figure of a direction; NAN when none. */
double cl_raw_best(const cl_ctx_t *x, unsigned d, char *what, size_t len);
double cl_raw_best_cpu(const cl_ctx_t *x, unsigned d);
void cl_print_refs(cl_ctx_t *x, bench_report_t *rep);
void cl_rec_raw_best(cl_ctx_t *x, bench_report_t *rep);

/* ---- cluster_run.c ----------------------------------------------------------------- */

int cl_fail(const cl_ctx_t *x, const char *what, cks_status_t st);
int cl_client_connect(cl_ctx_t *x);
int cl_begin(cl_ctx_t *x, const char *job, uint64_t version, uint64_t parent,
             uint32_t retain, uint32_t nranks);
void cl_release_job(cl_ctx_t *x, const char *job, uint64_t empty_version);
int cl_snapshot_down(cl_ctx_t *x, const char *job, uint64_t *version_io, unsigned down,
                     unsigned rep, const char *label, double *stored_p);
int cl_measure_main(cl_ctx_t *x);

/* ---- cluster_heal.c ---------------------------------------------------------------- */

/* One core of ISA-L running d decodes that rebuilt c chunks: chunk GB/s. */
double cl_repair_bound(const cl_ctx_t *x, uint64_t d, uint64_t c);
int cl_heal_phase(cl_ctx_t *x, const char *job, uint64_t first, uint64_t newest,
                  const uint64_t *downv, unsigned rep, double t_spawn);

/* ---- cluster_pec.c ----------------------------------------------------------------- */

uint64_t cl_pec_dense_bytes(const cl_ctx_t *x, int optim);
void cl_pec_params(const cl_ctx_t *x, unsigned experts, unsigned ranks,
                   cks_pec_params_t *p);
size_t cl_pec_layout(const cl_ctx_t *x, unsigned experts, unsigned rank, unsigned ranks,
                     cl_pobj_t *out);
uint64_t cl_pec_model_bytes(const cl_ctx_t *x, unsigned experts, int delta,
                            uint64_t *rank_max_p, uint64_t *stored_p);
int cl_measure_pec(cl_ctx_t *x);
void cl_print_pec(cl_ctx_t *x, bench_report_t *rep);

/* ---- cluster_peers.c --------------------------------------------------------------- */

int cl_measure_peers(cl_ctx_t *x);
void cl_print_peers(cl_ctx_t *x, bench_report_t *rep);
void cl_peer_targets(cl_ctx_t *x, bench_report_t *rep, double stored, double restore);

/* ---- cluster_report.c -------------------------------------------------------------- */

double cl_median(const double *v, unsigned n);
/** GB/s statistics of a list of seconds for `bytes` (the list is kept). */
void cl_stats_of(uint64_t bytes, const double *secs, unsigned n, bench_stats_t *st);
/** min / median / max of plain values (the list is kept). */
void cl_vstats(const double *v, unsigned n, double *min_p, double *med_p, double *max_p);
double cl_ck_median(const cl_ctx_t *x, int restore);
double cl_cw_median_from(const double *v, unsigned first, unsigned n);
double cl_cw_gbps(const cl_ctx_t *x, double secs);
/* The warm figure of the snapshots (seconds, or ms): with --versions 2 or
 * more, the median of the snapshots that came right after another in their
 * repetition (a steady state); else of every one after the first (in a run
 * with servers killed, those come right after two servers restarted). */
double cl_cw_warm_snap(const cl_ctx_t *x, const double *v);
void cl_rec_common(const cl_ctx_t *x, bench_rec_t *r, const char *op);
/** Print where the writers' objects of `job` have their primaries. */
void cl_placement_say(cl_ctx_t *x, const char *job);
void cl_rec_stats(bench_rec_t *r, const bench_stats_t *st);
void cl_rec_ref(bench_rec_t *r, const cl_fig_t *f);
void cl_print_main(cl_ctx_t *x, bench_report_t *rep);
void cl_cw_print(cl_ctx_t *x, bench_report_t *rep);
void cl_print_figures(cl_ctx_t *x, bench_report_t *rep);

/* ---- cluster_targets.c ------------------------------------------------------------- */

void cl_target_row(cl_ctx_t *x, bench_report_t *rep, const char *name, double value,
                   const char *unit, double ref, const char *ref_what, double target,
                   int higher, const char *note);
void cl_print_targets(cl_ctx_t *x, bench_report_t *rep);

/* ---- cluster_hosts.c --------------------------------------------------------------- */

/** --hosts: the namespaces, and this process in the client's. 0 or -1. */
int cl_hosts_setup(cl_ctx_t *x);
int cl_net_read(const cl_ctx_t *x, cl_netctr_t *c);
void cl_net_account(cl_ctx_t *x, unsigned kind, uint64_t obj_bytes);
void cl_print_hosts(cl_ctx_t *x, bench_report_t *rep);

/* ---- cluster_sweep.c --------------------------------------------------------------- */

extern const char *const cl_sweep_names[CL_NSWEEPS];
int cl_sweep_main(cl_ctx_t *x, bench_report_t *rep);

/* ---- cluster_plot.c ---------------------------------------------------------------- */

void cl_plot_sweeps(const cl_ctx_t *x);
void cl_plot_bars(cl_ctx_t *x);
void cl_cw_plot(cl_ctx_t *x);

/* ---- cluster.c --------------------------------------------------------------------- */

/** The JSON file (--json) and the check for files left in /dev/shm; frees
 *  the report. Returns rc, or 1 when either failed. */
int cl_finish(const cl_ctx_t *x, bench_report_t *rep, int rc);

#endif
