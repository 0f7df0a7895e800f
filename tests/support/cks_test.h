/*
 * Test support: real ckstore-server processes on 127.0.0.1 with ports picked
 * at run time, each stopped by its own pid; seeds that are printed; paths in
 * a private temporary directory.
 */
#ifndef CKS_TEST_H
#define CKS_TEST_H

#include "ckstore.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

typedef struct {
    pid_t pid;            /* 0 when not running */
    uint16_t port;
    uint64_t arena_size;
    char dir[256];        /* private temp dir: arena file, data dir, log */
    char arena[300];
    char data[300];
    char log[300];
    char addr[64];        /* "127.0.0.1:port", for cks_client_params_t.server */
    const char *map;      /* cluster map file, or NULL (standalone) */
    int id;               /* id in the map */
    char faults[128];     /* CKS_FAULTS for this server ("" for none) */
    char netns[64];       /* network namespace it runs in ("": the caller's) */
    char host[16];        /* IPv4 address of its host in the map ("": 127.0.0.1) */
    unsigned starts;      /* times it started (seeds its CKS_FAULT_SEED) */
    uint64_t fault_seed;  /* CKS_FAULT_SEED of its current run (with faults) */
    struct cks_test_cluster *cluster; /* the cluster it is a member of, or NULL */
} cks_test_server_t;

#define CKS_TEST_MAX_SERVERS 16

/* A cluster of servers on 127.0.0.1, one per "node", with racks as labels. */
typedef struct cks_test_cluster {
    size_t n;
    size_t racks;
    uint64_t epoch;       /* of the map; raised when a member moves to another port */
    char dir[256];
    char map[300];
    cks_test_server_t srv[CKS_TEST_MAX_SERVERS];
} cks_test_cluster_t;

#define CKS_TEST_ALL (-2) /* fault_id: arm the faults on every server */

/** Write a map of n servers (node i = "n<i>", rack = "r<i % racks>") with ports
 *  picked at run time, start them all, wait until each serves. `faults`
 *  (may be NULL) arms fault points on server `fault_id` only. */
int cks_test_cluster_start(cks_test_cluster_t *c, size_t n, size_t racks, uint64_t arena_size,
                           int fault_id, const char *faults);
/** As cks_test_cluster_start(), with server i on its own "host": it listens
 *  on hosts[i] (an IPv4 address, written into the map) and, when netns is
 *  not NULL and netns[i] is not NULL, runs in the network namespace named
 *  netns[i] (as `ip netns exec` names it). No fault points. */
int cks_test_cluster_start_hosts(cks_test_cluster_t *c, size_t n, size_t racks,
                                 uint64_t arena_size, const char *const *hosts,
                                 const char *const *netns);
/** Position (= index in srv[]) of the coordinator of (job, version) in the
 *  cluster of map file `map`, as clients and servers compute it; -1 when
 *  the map cannot be read. */
int cks_test_coordinator(const char *map, const char *job, uint64_t version);
/** The coordinator candidates of (job, version), in the order they take
 *  over (out[0] is cks_test_coordinator()'s): how many (at most max), -1
 *  when the map cannot be read. */
int cks_test_coordinators(const char *map, const char *job, uint64_t version, int *out,
                          size_t max);
/** Position of the primary of object `key` of `job` (the first server of
 *  its stripe 0's placement group, k + m wide) in the cluster of map file
 *  `map`, as clients compute it; -1 when the map cannot be read. */
int cks_test_primary(const char *map, const char *job, const char *key, unsigned k,
                     unsigned m);
/** SIGKILL server i (and reap it). */
void cks_test_cluster_kill(cks_test_cluster_t *c, size_t i);
/** Print every thread's stack of a running server to stderr (gdb, at most
 *  20 s; a line saying why not when gdb is missing or the server is not
 *  running): for a server that answers nothing, before it is killed. */
void cks_test_server_stacks(const cks_test_server_t *s);
/** Stop every server and remove the files. */
void cks_test_cluster_cleanup(cks_test_cluster_t *c);

/** Start a server with a fresh temp dir; waits (bounded) until it serves.
 *  Returns 0 or -1 (with a message on stderr). */
int cks_test_server_start(cks_test_server_t *s, uint64_t arena_size);
/** The same with its arena file in arena_dir (a hugetlbfs mount, say). */
int cks_test_server_start_in(cks_test_server_t *s, uint64_t arena_size, const char *arena_dir);
/** Start again on the same arena file and data dir. A standalone server
 *  gets a new port. A cluster member listens on its port in the map (ports
 *  of maps lie outside the kernel's ephemeral range, so no connection can
 *  hold one); when that port cannot be bound, it moves to a fresh one: the
 *  map is rewritten with it (epoch + 1) and the members that run are
 *  restarted on their data so that they read it (clients made before keep
 *  the old map). At most 5 tries. */
int cks_test_server_restart(cks_test_server_t *s);
/** SIGKILL every member of c, then start them all at once on their data
 *  (as a rack whose power came back): each is started before any is waited
 *  for. A member whose port was taken meanwhile is restarted as
 *  cks_test_server_restart() does. 0 when all run. */
int cks_test_cluster_restart_all(cks_test_cluster_t *c);
/** The same for the n members of c listed in `which` (indices). */
int cks_test_cluster_restart_some(cks_test_cluster_t *c, const size_t *which, size_t n);
/** Send sig to the server and reap it (bounded wait; SIGKILL after 10 s). */
int cks_test_server_stop(cks_test_server_t *s, int sig);
/** Stop if running and remove the temp dir. */
void cks_test_server_cleanup(cks_test_server_t *s);

/** A client of the standalone server `s` with this request timeout. */
cks_status_t cks_test_connect(const cks_test_server_t *s, int timeout_ms, cks_client_h *c_p);
/** cks_test_connect() that must succeed: asserts that it did. */
cks_client_h cks_test_client(const cks_test_server_t *s, int timeout_ms);
/** A client of the cluster in map file `map`: RS(k, m) with this chunk
 *  size and request timeout, once its own requests (the MEM_MAPs of its
 *  scratch region) are answered, or 5 s passed: a server SIGKILLed while
 *  it writes a reply into the client's shared-memory FIFO leaves that FIFO
 *  stuck for good with UCX 1.13 (docs/ARCHITECTURE.md, Known limits), and
 *  the tests kill servers right after they connect. */
cks_status_t cks_test_connect_cluster(const char *map, unsigned k, unsigned m,
                                      uint64_t chunk_size, int timeout_ms, cks_client_h *c_p);
/** Wait (at most `ms`) until client c has no request in flight: 0, or -1
 *  when some were still in flight at the end. */
int cks_test_client_quiet(cks_client_h c, int ms);
/** Poll (every 50 ms, at most `ms`) the arena use of the servers of client
 *  c (cks_cluster_usage()) until it is `want`: a server frees space after it
 *  answers, in another process, so there is no event to wait on. Returns
 *  the last value seen (UINT64_MAX when no server answered). */
uint64_t cks_test_usage_settles_at(cks_client_h c, uint64_t want, int ms);

/** A client of the cluster in map file `map` (RS(4, 2), 64 KiB chunks) that
 *  authenticates with the cluster secret in file `secret`. */
cks_status_t cks_test_connect_secret(const char *map, const char *secret, int timeout_ms,
                                     cks_client_h *c_p);

/** cks_test_connect_cluster() that must succeed: asserts that it did. */
cks_client_h cks_test_cluster_client(const char *map, unsigned k, unsigned m,
                                     uint64_t chunk_size, int timeout_ms);
/** Print to stderr, with its server's index, each line of the logs of c's
 *  servers that contains one of `words` (a NULL-terminated list). */
void cks_test_cluster_dump_logs(const cks_test_cluster_t *c, const char *const *words);

/** Servers started from now on (in this process) get `--secret path`;
 *  NULL or "" for none. */
void cks_test_set_secret(const char *path);
/** Cluster members started from now on with a secret get `--peer-secret
 *  path`; NULL or "" (the default): their cluster's own, a file of random
 *  bytes made with it (dir/peer.key). */
void cks_test_set_peer_secret(const char *path);
/** Servers started from now on get these extra flags (space-separated, at
 *  most 12); NULL or "" for none. */
void cks_test_set_server_flags(const char *flags);

/** Does the file (a server's log) have a line containing `text`? Looks
 *  again every 50 ms for up to `wait_ms` (0: once): another process writes
 *  it, so there is no event to wait on. */
int cks_test_log_has(const char *path, const char *text, int wait_ms);

/** The test's seed: CKS_TEST_SEED from the environment, or `dflt`; printed
 *  ("seed N (replay: CKS_TEST_SEED=N)") so that a failure can be replayed.
 *  Servers started after it with fault points armed get a CKS_FAULT_SEED
 *  derived from it, their id and how many times they started (printed with
 *  their faults): a replay arms the same draws. */
uint64_t cks_test_seed(uint64_t dflt);
/** A default seed that differs from run to run (time and pid), for
 *  randomized tests: pass it to cks_test_seed(), which prints it. */
uint64_t cks_test_seed_fresh(void);
/** Lines of the file (a server's log) that contain `text`. */
int cks_test_log_count(const char *path, const char *text);
/** The last line of the file (a server's log) that contains `text`, into
 *  line (len bytes, NUL-terminated); 1 if there is one, else 0. */
int cks_test_log_last(const char *path, const char *text, char *line, size_t len);
/** cks_test_log_count() of a file that must be there: asserts that it can
 *  be read (a log that is missing fails the test instead of counting 0). */
int cks_test_log_lines(const char *path, const char *text);
/** cks_test_log_count(), looked at again every 50 ms until it is above
 *  `above` or `wait_ms` passed (another process writes the log: there is no
 *  event to wait on); the last count. */
int cks_test_log_wait_count(const char *path, const char *text, int above, int wait_ms);
/** Wait until server `pos` of c's cluster says it has caught up
 *  (cks_repair_status()), at most wait_ms; fails the test when it has not
 *  (another process: there is no event to wait on, it is asked every 20 ms). */
void cks_test_wait_caught_up(cks_client_h c, size_t pos, int wait_ms);
/** Deterministic bytes for seed: common's cks_pattern_fill(), which the demo and
 *  the bench write too. */
void cks_test_fill(void *buf, size_t len, uint64_t seed);
/** `size` bytes (malloc) of cks_test_fill() from the test's seed
 *  (cks_test_seed(dflt), which prints it); asserts the allocation. */
uint8_t *cks_test_seeded_bytes(uint64_t size, uint64_t dflt);
/** Flip a bit of byte 100 in every copy of the 256 bytes at `needle` in the
 *  file `path` - a running server's arena (MAP_SHARED: its memory), as
 *  memory rots after the server recorded the bytes' CRC. Returns how many
 *  copies were changed, or -1 when the file cannot be opened or mapped. */
int cks_test_rot(const char *path, const uint8_t *needle);

/** Completions of n non-blocking calls: pass cks_test_count_done as their
 *  callback and the count as its argument, then wait for all of them. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned left;
    cks_status_t first; /* the first error, or CKS_OK */
} cks_test_count_t;
/** The CLOCK_REALTIME time `ms` milliseconds from now: the deadline of a
 *  pthread_cond_timedwait(). */
struct timespec cks_test_deadline(int ms);
void cks_test_count_init(cks_test_count_t *c, unsigned n);
void cks_test_count_done(void *arg, cks_status_t status);
/** Wait until every call completed (at most timeout_ms): their first error,
 *  CKS_OK, or CKS_ERR_TIMEOUT. Then the count may be initialised again. */
cks_status_t cks_test_count_wait(cks_test_count_t *c, int timeout_ms);

/* ---- client calls as the tests make them ----------------------------------- */

/** Put params for (job, version, key) of the bytes [buf, buf + size), no
 *  other field: a test sets field_mask and whatever else it needs. */
cks_put_params_t cks_test_put_params(const char *job, uint64_t version, const char *key,
                                     const void *buf, uint64_t size);
/** cks_put() of cks_test_put_params(). */
cks_status_t cks_test_put(cks_client_h c, const char *job, uint64_t version, const char *key,
                          const void *buf, uint64_t size);
/** cks_put() of cks_test_put_params() with these tags. */
cks_status_t cks_test_put_tagged(cks_client_h c, const char *job, uint64_t version,
                                 const char *key, const void *buf, uint64_t size,
                                 cks_tags_t tags);
/** Get params for `key` into [buf, buf + buffer_size), no other field. */
cks_get_params_t cks_test_get_params(const char *key, void *buf, uint64_t buffer_size);
/** cks_get() of all of `key` into [buf, buf + cap), checked (CKS_GET_VERIFY). */
cks_status_t cks_test_get_whole(cks_restore_h r, const char *key, void *buf, uint64_t cap,
                                uint64_t *len_p);
/** cks_get() of the bytes [off, off + len) of `key` into buf. */
cks_status_t cks_test_get_range(cks_restore_h r, const char *key, void *buf, uint64_t off,
                                uint64_t len);
/** Ranged gets of `key` of r, an object of `size` bytes (more than 2 MiB)
 *  that must equal `ref`: offsets and lengths across page and MiB borders,
 *  each into dst + douts[k] (taking the n_douts destinations in turn; dst
 *  itself when n_douts is 0; dst holds 2 MiB + 64 bytes at least). Asserts
 *  each is exact and writes nothing before its destination or in the 32
 *  bytes past it; then the last byte, an empty range at the end, and two
 *  ranges past the end (CKS_ERR_OUT_OF_RANGE, the last call made). */
void cks_test_check_ranges(cks_restore_h r, const char *key, const uint8_t *ref, uint64_t size,
                           uint8_t *dst, const size_t *douts, size_t n_douts);
/** Begin (job, version) with no other field; asserts that it is CKS_OK. */
void cks_test_begin(cks_client_h c, const char *job, uint64_t version);
/** Get `key` of r (CKS_GET_VERIFY) into dst, dst_size bytes (more than
 *  size; poisoned first), and assert that it is exactly the `size` bytes of
 *  `want`, with nothing written past them; each message starts with `what`.
 *  The get's status: the checks run on CKS_OK only. */
cks_status_t cks_test_get_check(cks_restore_h r, const char *key, const uint8_t *want,
                                uint64_t size, uint8_t *dst, uint64_t dst_size,
                                const char *what);

/** Version (job, version) of n objects "obj<i>", object i the `size` bytes
 *  at buf + i: begin, put each, seal. The first failure, or CKS_OK. */
cks_status_t cks_test_write_objs(cks_client_h c, const char *job, uint64_t version,
                                 const uint8_t *buf, uint64_t size, int n);
/** Restore the objects of cks_test_write_objs() from (job, version);
 *  asserts that each is exactly its bytes. */
void cks_test_verify_objs(cks_client_h c, const char *job, uint64_t version, const uint8_t *buf,
                          uint64_t size, int n);

#define CKS_TEST_MAX_OBJS 16

/** Objects that a test writes version after version: object i is size[i]
 *  bytes; cks_test_objs_fill() puts its bytes for a version in src[i]
 *  (size[i] + 1 bytes: room for a byte past the end). */
typedef struct {
    size_t n;
    uint64_t seed;
    uint64_t size[CKS_TEST_MAX_OBJS];
    uint8_t *src[CKS_TEST_MAX_OBJS];
} cks_test_objs_t;
/** n objects of these sizes, their bytes drawn from `seed`: allocates (or
 *  allocates again) their buffers; asserts. */
void cks_test_objs_init(cks_test_objs_t *o, const uint64_t *sizes, size_t n, uint64_t seed);
/** The bytes of object i in version v into o->src[i] (from the seed, v, i). */
void cks_test_objs_fill(cks_test_objs_t *o, size_t i, uint64_t version);
/** cks_test_objs_init(), then every object's bytes of version 0: for tests
 *  whose objects stay the same from version to version. */
void cks_test_objs_make(cks_test_objs_t *o, const uint64_t *sizes, size_t n, uint64_t seed);
/** Free the buffers (a second call frees nothing). */
void cks_test_objs_free(cks_test_objs_t *o);
/** The name of object i of a test's objects, into key (len bytes). */
typedef void (*cks_test_key_fn)(size_t i, char *key, size_t len);
/** Begin (job, v) and put each object of o, its bytes of version v
 *  (cks_test_objs_fill()), object i named by key_of; no seal. The first
 *  failure (the puts stop there), or CKS_OK. */
cks_status_t cks_test_objs_put(cks_client_h c, const char *job, uint64_t v, cks_test_objs_t *o,
                               cks_test_key_fn key_of);
/** Restore each object of o from (job, v) whole (CKS_GET_VERIFY) and assert
 *  that it is exactly its bytes of version v (cks_test_get_check()); the
 *  messages start with `when`. On a failure, before the assertion: the
 *  client's last error to stderr, then on_fail() (NULL: nothing), e.g. to
 *  print the servers' logs. */
void cks_test_objs_verify(cks_client_h c, const char *job, uint64_t v, cks_test_objs_t *o,
                          cks_test_key_fn key_of, void (*on_fail)(void), const char *when);

/** cks_version_finish() of one rank on a thread of its own, so that the
 *  ranks of a version can finish together: start, then join for its status. */
typedef struct {
    cks_client_h c;
    const char *job;
    uint64_t version;
    uint32_t rank;
    cks_status_t st;
    pthread_t thread;
} cks_test_finish_t;
void cks_test_finish_start(cks_test_finish_t *f, cks_client_h c, const char *job,
                           uint64_t version, uint32_t rank);
cks_status_t cks_test_finish_join(cks_test_finish_t *f);

/** Is the server running: not gone, and not a zombie? It is our child: one
 *  that died is reaped here (how it ended printed) and its pid set to 0, so
 *  that nothing signals a pid that may be reused. */
int cks_test_server_alive(cks_test_server_t *s);
/** Run a shell command; what it writes to stdout into out (at most len - 1
 *  bytes, NUL-terminated). Its exit status, -1 when it did not exit. */
int cks_test_run(const char *cmd, char *out, size_t len);

#endif
