/*
 * server: the ckstore-server daemon as a library, so that the daemon's main()
 * and an embedded test or benchmark cluster run the same code.
 *
 * One server owns: an arena (file-backed, pre-faulted, registered with UCX
 * once), an LMDB environment, a UCX worker with a listener, and a metadata
 * writer thread. cks_server_run() is the progress thread: it sleeps on the
 * worker's event fd (an idle server uses no CPU) and returns after
 * cks_server_stop() or SIGTERM/SIGINT when `handle_signals` is set.
 */
#ifndef CKS_SERVER_H
#define CKS_SERVER_H

#include "cks_common.h"

typedef struct cks_server *cks_server_h;

/* The exit status of a server whose UCX receive path stalled
 * (cks_server_params_t.stall_exit_s): EX_TEMPFAIL, start it again. */
#define CKS_SV_EXIT_STALLED 75

typedef struct {
    const char *name;       /* for logs and HELLO; default "ckstore-server" */
    const char *listen_addr;/* IPv4 address; default "0.0.0.0" */
    uint16_t port;          /* 0: pick a free port */
    uint64_t arena_size;    /* bytes, multiple of 4096 */
    const char *arena_file; /* created when missing */
    const char *data_dir;   /* LMDB environment; created when missing */
    uint64_t md_map_size;   /* 0: default */
    int handle_signals;     /* 1: SIGTERM/SIGINT stop the server */
    const char *cluster_map;/* cluster map file; NULL: a standalone server */
    uint16_t server_id;     /* this server's id in the map */
    unsigned encoders;      /* encoder threads (cluster); 0: 1 */
    unsigned coding_nice;   /* nice levels (1..19) the encoder and repair
                               decoder threads run below the server's other
                               threads; 0: 5; UINT_MAX: none (the same) */
    unsigned max_conns;     /* connections at once; 0: 1024 */
    unsigned max_pending;   /* replies in flight per connection; 0: 4096 */
    unsigned reply_timeout_s; /* close a peer that takes no reply this long; 0: 60 */
    const char *secret_file;/* cluster secret: every connection must authenticate */
    const char *job_secrets;/* directory of job secrets (file per job name): a
                               client may prove one instead, for that job only */
    const char *peer_secret_file; /* the servers' own secret (required by a
                               cluster member with secret_file): peers prove
                               it, and only they may send server-to-server
                               messages */
    unsigned auth_timeout_s;/* with a secret: close a connection that has not
                               authenticated this long; 0: 10 */
    unsigned stall_exit_s;  /* exit (status CKS_SV_EXIT_STALLED) when UCX has
                               taken none of the server's own check messages
                               for this many seconds of running: its receive
                               path is stalled (cks_tp_sentinel_start());
                               0: 30; UINT_MAX: never */
    unsigned recv_timeout_s;/* close a connection whose payload (a put's or a
                               chunk's bytes) has not come this long, plus
                               its length at 16 MiB/s; 0: 30 */
    const char *flush_dir;  /* durable tier: where flushes that name no
                               directory write; when set, the only directory
                               this server flushes to (NULL: none) */
    unsigned flush_every;   /* with flush_dir: a version this server coordinates
                               is flushed once it commits when its number is a
                               multiple of this (0: only on request) */
    unsigned flush_age_s;   /* with flush_dir: a version this server coordinates
                               is flushed once it commits when the newest
                               flushed version of its job is older than this
                               many seconds (0: no age policy) */
    unsigned flush_keep;    /* with flush_dir: flushed versions kept per job
                               (the newest ones, and older ones a kept version
                               reads objects from); 0: all */
    uint64_t flush_rate;    /* most bytes/s that this server's flush writes
                               (paced on its flush thread); 0: 64 MiB/s;
                               UINT64_MAX: no cap */
    uint64_t repair_rate;   /* cluster: most bytes/s that repair reads from other
                               servers to rebuild chunks while clients move
                               data through this server; 0: 256 MiB/s;
                               UINT64_MAX: no cap */
    uint64_t repair_idle_rate; /* the same while no client has moved data
                               through it for CKS_RP_IDLE_NS; 0 or UINT64_MAX:
                               no cap */
    unsigned copy_threads;  /* threads that copy transfers of 2 MiB and more
                               from or into clients' shared memory on this
                               host (cks_tp_worker_copy_threads()); 0: one
                               per 4 online CPUs, at most 8 (none below 4
                               CPUs); UINT_MAX: none (UCX copies on the
                               progress thread) */
} cks_server_params_t;

/** Open the arena and metadata, re-check every stored object's CRC, abort
 *  versions that a crash left OPEN, and start listening. Strings in params
 *  are copied. */
cks_status_t cks_server_create(const cks_server_params_t *params, cks_server_h *server_p);

/** The port the listener got (useful with port 0). */
uint16_t cks_server_port(cks_server_h server);

/** Serve until stopped. Returns CKS_OK on a clean stop. */
cks_status_t cks_server_run(cks_server_h server);

/** Ask a running server to stop; safe from any thread and from a signal handler. */
void cks_server_stop(cks_server_h server);

/** Close connections, stop the metadata thread, unmap the arena. */
void cks_server_destroy(cks_server_h server);

#endif
