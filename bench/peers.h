/*
 * bench/peers: the peers ckstore is compared with in the same run, on the
 * same objects: memcached and Redis (started here on 127.0.0.1, a port
 * picked at run time, stopped by their pid), driven through the Debian
 * client libraries (libmemcached, hiredis), and plain files in /dev/shm.
 * A peer whose program or client library is missing is skipped with a note.
 */
#ifndef CKS_BENCH_PEERS_H
#define CKS_BENCH_PEERS_H

#include <stdint.h>

#define BENCH_PEER_MAX_REPS 100
#define BENCH_PEER_MAX_OBJS 1024

#include <sys/types.h>

/* What a peer run has open now: its server process and log, the /dev/shm
 * peer's files. The caller's (in its context), so that its signal handler
 * can stop and remove them through bench_peer_kill(). */
typedef struct {
    volatile pid_t pid; /* the server running now */
    int log_fd;         /* its output (an unlinked temporary file) */
    char files[BENCH_PEER_MAX_OBJS][64];
    volatile unsigned nfiles;
} bench_peer_state_t;

typedef enum {
    BENCH_PEER_MEMCACHED,
    BENCH_PEER_REDIS,
    BENCH_PEER_SHM,
    BENCH_NPEERS
} bench_peer_t;

typedef struct {
    const uint8_t *src;    /* the objects, back to back */
    const uint64_t *sizes; /* nobj sizes */
    unsigned nobj;
    uint8_t *dst; /* pre-faulted; at least the largest object + 1 MiB */
    uint64_t dst_len;
    unsigned reps;    /* timed rounds, after one untimed warm-up round */
    double timeout_s; /* bound on the start and on every request */
} bench_peer_params_t;

typedef struct {
    int ok;         /* measured */
    char note[256]; /* why it was skipped or failed */
    char desc[192]; /* what ran: program, version, pid, port, settings */
    double set_s[BENCH_PEER_MAX_REPS]; /* one round: every object stored, seconds */
    double get_s[BENCH_PEER_MAX_REPS]; /* one round: every object read back */
    unsigned n;                        /* timed rounds */
    uint64_t bytes;                    /* per round */
    double server_cpu_s; /* server CPU seconds, timed rounds (-1: none or unknown) */
    uint64_t server_rss; /* server resident bytes holding one round (0: unknown) */
} bench_peer_res_t;

/** "memcached", "redis", "shm". */
const char *bench_peer_name(bench_peer_t p);
extern const char *const bench_peer_names[BENCH_NPEERS];
/** Start the peer (if it is a server), store and read every object `reps`
 *  times, check the bytes of the first round, stop it. 0 when measured; -1
 *  with res->note set when skipped or failed (the run goes on). */
int bench_peer_run(bench_peer_state_t *ps, bench_peer_t p, const bench_peer_params_t *pp,
                   bench_peer_res_t *res);
/** For a signal handler: SIGKILL the peer server that runs now, remove the
 *  peer's files. Async-signal-safe. */
void bench_peer_kill(const bench_peer_state_t *ps);

#endif
