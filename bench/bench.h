/*
 * bench: what the parts of ckstore-bench share. The tool measures one
 * client against one server on this machine and, in the same run, the
 * references that say what "fast" means here: a one-thread memcpy and a
 * plain UCX loop between the same two processes (see docs/BENCHMARKS.md).
 *
 *   bench.c     main: options, the measurement plan, the printed tables
 *   report.c    the result records, the machine description, the JSON writer
 *   mem.c       buffers (malloc, anonymous THP, shmem THP), page checks, memcpy
 *   raw_ucx.c   the plain UCX loop (one side of it: driver or sink)
 *   embedded.c  the child process: a ckstore server plus the raw UCX sink
 *   opts.c      the command lines (option tables) of every subcommand
 *
 * Everything here is a tool, not a library: errors are reported once, where
 * they are found, on stderr, and the caller unwinds.
 */
#ifndef CKS_BENCH_H
#define CKS_BENCH_H

#include "cks_common.h" /* cks_pattern_fill() and the status codes */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BENCH_GB 1e9 /* GB/s means 10^9 bytes per second */
#define BENCH_MAX_SIZES 32
#define BENCH_MAX_REPS 1000
#define BENCH_ERR_LEN 256

/** `ckstore-bench flush` (flush.c): the durable tier against plain file I/O. */
int cks_bench_flush_main(int argc, char **argv);

/* ---- time and statistics -------------------------------------------------- */

/** Monotonic clock, seconds. */
double bench_now(void);
/** qsort() order of doubles. */
int bench_cmp_double(const void *a, const void *b);

typedef struct {
    double median, min, max; /* GB/s */
    unsigned n;
} bench_stats_t;

/** GB/s statistics of n transfers of `bytes`, each taking secs[i] seconds
 *  (secs is reordered). */
void bench_stats(uint64_t bytes, double *secs, unsigned n, bench_stats_t *st_p);

/** "1 MiB", "256 MiB", "1 GiB", "1536 KiB" into buf. */
const char *bench_size_str(uint64_t size, char *buf, size_t len);
/** Parse "4096", "64K", "16M", "1G" (binary units). Returns 0 on success. */
int bench_size_parse(const char *text, uint64_t *size_p);

/* ---- command lines (opts.c) ------------------------------------------------- */

typedef enum {
    BENCH_OPT_HELP,   /* bench_opts_parse() returns 1 */
    BENCH_OPT_FLAG,   /* int dst = 1 */
    BENCH_OPT_CLEAR,  /* unsigned dst &= ~lo */
    BENCH_OPT_STR,    /* const char *dst = the argument (kinds from here take one) */
    BENCH_OPT_UINT,   /* unsigned dst, lo .. hi */
    BENCH_OPT_SIZE,   /* uint64_t dst, binary units, at least lo */
    BENCH_OPT_DOUBLE, /* double dst; lo = 1: above 0 */
    BENCH_OPT_CALL,   /* fn(argument, the entry): 0, or -1 when bad */
} bench_opt_kind_t;

typedef struct bench_opt bench_opt_t;
struct bench_opt {
    const char *name; /* --name */
    int key;          /* -k, or 0 */
    bench_opt_kind_t kind;
    void *dst;
    unsigned lo, hi;
    int (*fn)(const char *arg, const bench_opt_t *o);
    const char *const *names; /* bench_opt_mask / bench_opt_enum: hi names */
    void *aux;                /* an int set to 1 when the option is given */
    unsigned *count;          /* bench_opt_uints, bench_opt_size_list: items */
};

/** A table entry: BOPT("reps", 'r', UINT, &reps, .lo = 1, .hi = 100). */
#define BOPT(n, k, kd, d, ...) \
    {.name = (n), .key = (k), .kind = BENCH_OPT_##kd, .dst = (d), __VA_ARGS__}
/** Parse argv[1..] by the table: 0, 1 for --help, -1 when bad (said on
 *  stderr, prefixed with prog). */
int bench_opts_parse(const char *prog, const bench_opt_t *t, unsigned n, int argc,
                     char **argv);
/** `first` and argv[0 .. argc) joined by spaces (the command of a record). */
void bench_join_args(char *buf, size_t len, const char *first, int argc, char **argv);
/** A comma list of at most max items, each given to one(); the count, or -1. */
int bench_parse_list(const char *text, unsigned max,
                     int (*one)(const char *item, unsigned i, void *ctx), void *ctx);
/** "64M,256M,1G" into v (at most max sizes); 0 or -1. */
int bench_parse_sizes(const char *text, uint64_t *v, unsigned max, unsigned *n_p);
/** Index of name[0 .. len) among names (NULL entries skipped); -1: none. */
int bench_name_index(const char *name, size_t len, const char *const *names, unsigned n);
/** BENCH_OPT_CALL functions: a comma list of o->names into a bit mask
 *  (unsigned dst), or one of them into its index. */
int bench_opt_mask(const char *arg, const bench_opt_t *o);
int bench_opt_enum(const char *arg, const bench_opt_t *o);
/** BENCH_OPT_CALL functions: a comma list of numbers (lo .. hi each) or of
 *  sizes into the array dst, at most hi items for sizes, 16 for numbers. */
int bench_opt_uints(const char *arg, const bench_opt_t *o);
/** --copy-threads N (0 to 16) into a cks_server_params_t.copy_threads value
 *  (0 -> UINT_MAX: none) (mem.c). */
int bench_opt_copy_threads(const char *arg, const bench_opt_t *o);
int bench_opt_sizes(const char *arg, const bench_opt_t *o);

/* ---- buffers (mem.c) -------------------------------------------------------- */

typedef enum {
    BENCH_MEM_MALLOC,   /* malloc, pre-faulted with memset: 4 KiB pages */
    BENCH_MEM_THP,      /* anonymous mmap, 2 MiB aligned, MADV_HUGEPAGE, pre-faulted */
    BENCH_MEM_SHM_THP,  /* file in /dev/shm (unlinked), as the server's arena */
    BENCH_MEM_CKS,      /* cks_mem_alloc(): shared memory UCX allocates (bench.c) */
} bench_mem_kind_t;

typedef struct {
    void *ptr;
    size_t len;
    size_t map_len; /* what to munmap (0: free()) */
    bench_mem_kind_t kind;
    double alloc_s; /* BENCH_MEM_CKS: how long cks_mem_alloc() took */
} bench_buf_t;

int bench_buf_alloc(bench_mem_kind_t kind, size_t len, bench_buf_t *buf_p, char *err,
                    size_t errlen);
void bench_buf_free(bench_buf_t *buf);

struct cks_client;
/** BENCH_MEM_CKS buffers: cks_mem_alloc() of `client`, pre-faulted; freed by
 *  bench_ck_buf_free() (a no-op for other kinds) before the client goes. */
int bench_ck_buf_alloc(struct cks_client *client, size_t len, bench_buf_t *buf);
void bench_ck_buf_free(struct cks_client *client, bench_buf_t *buf);

/** How much of the resident memory of the mappings that hold [addr, addr+len)
 *  in process `pid` (0: self) huge pages map, in percent (AnonHugePages,
 *  ShmemPmdMapped, FilePmdMapped over Rss of /proc/PID/smaps). With `path`
 *  set, the mappings of that file are looked at instead of the range.
 *  Returns -1 when smaps cannot be read. */
int bench_huge_percent(pid_t pid, const void *addr, size_t len, const char *path);

/** The kinds of page a region can have, for a first-touch reference. */
typedef enum {
    BENCH_PAGES_BASE,    /* 4 KiB pages (MADV_NOHUGEPAGE) */
    BENCH_PAGES_HUGETLB, /* reserved huge pages (scripts/hugepages) */
    BENCH_PAGES_THP,     /* transparent huge pages (MADV_HUGEPAGE) */
} bench_pages_t;

/** Milliseconds per GiB to fault in `len` bytes of fresh anonymous memory
 *  of the kind *kind by writing them once, one thread; where the host has no
 *  reserved huge pages, base pages instead, and *kind says so. NAN: no
 *  memory. The region is unmapped before it returns. */
double bench_touch_ms_gib(size_t len, bench_pages_t *kind);
const char *bench_pages_name(bench_pages_t kind);

/** Write `len` bytes of fresh anonymous memory in transparent huge pages
 *  once, then unmap it; milliseconds per GiB it took (NAN: no memory). On a
 *  VM that hands idle free memory back to its host (virtio-balloon free page
 *  reporting), this has the host back that much of the free memory again,
 *  so that first touches made within the next second or so cost what the
 *  guest's own faults cost, whichever of them comes first. */
double bench_back_free_memory(size_t len);


/** Time one memcpy of `size` bytes; seconds. */
double bench_memcpy_once(void *dst, const void *src, size_t size);

/* ---- the plain UCX loop (raw_ucx.c) ----------------------------------------- */

typedef enum {
    BENCH_SETUP_MALLOC,  /* malloc'd, pre-faulted: 4 KiB pages */
    BENCH_SETUP_THP,     /* anonymous THP (as the bench's client buffers) */
    BENCH_SETUP_SHM_THP, /* /dev/shm file THP (as the server's arena) */
    BENCH_SETUP_UCX,     /* ucp_mem_map(ALLOCATE), UCX's default UCX_ALLOC_PRIO */
    BENCH_SETUP_UCX_THP, /* ucp_mem_map(ALLOCATE) with ALLOC_PRIO=thp first */
    BENCH_NSETUPS
} bench_setup_t;

typedef enum {
    BENCH_METHOD_AM,  /* ucp_am_send_nbx rendezvous (ckstore's own protocol) */
    BENCH_METHOD_TAG, /* ucp_tag_send_nbx / ucp_tag_recv_nbx (ucx_perftest tag_bw) */
    BENCH_METHOD_RMA, /* ucp_put_nbx / ucp_get_nbx + flush into the peer's buffer */
    BENCH_NMETHODS
} bench_method_t;

typedef enum {
    BENCH_DIR_PUT, /* parent (client) -> child (server) */
    BENCH_DIR_GET, /* child -> parent, after a small request */
    BENCH_NDIRS
} bench_dir_t;

const char *bench_setup_name(bench_setup_t s);
const char *bench_method_name(bench_method_t m);
const char *bench_dir_name(bench_dir_t d);
extern const char *const bench_setup_names[BENCH_NSETUPS];
extern const char *const bench_method_names[BENCH_NMETHODS];

typedef struct bench_raw bench_raw_t;

/** One side of the loop: a UCP context and worker of its own, and one buffer
 *  of buf_size bytes of the given setup, registered with ucp_mem_map (its
 *  memh goes with every operation). Waits busy-poll for spin_s seconds, then
 *  sleep on the worker's event fd; spin_s < 0: busy-poll only (ucx_perftest). */
int bench_raw_create(bench_setup_t setup, size_t buf_size, double spin_s,
                     bench_raw_t **raw_p, char *err, size_t errlen);
void bench_raw_destroy(bench_raw_t *r);
void bench_raw_address(bench_raw_t *r, const void **addr_p, size_t *len_p);
/** The buffer's address and packed rkey (for the peer's RMA). */
int bench_raw_rkey(bench_raw_t *r, uint64_t *addr_p, void **rkey_p, size_t *len_p);
void bench_raw_rkey_release(void *rkey);
void *bench_raw_buffer(bench_raw_t *r);
const char *bench_raw_setup_name(const bench_raw_t *r);
/** What the buffer turned out to be: "sysv, 4 KiB pages", "thp 100%". */
const char *bench_raw_describe(bench_raw_t *r);
/** Endpoint to the peer by its worker address (no peer-failure mode). */
int bench_raw_connect(bench_raw_t *r, const void *peer_addr, size_t len, char *err,
                      size_t errlen);
/** Make this side the sink: keep receives posted, answer get requests. */
void bench_raw_serve(bench_raw_t *r);
/** Driver: the peer's buffer, for RMA. */
int bench_raw_set_remote(bench_raw_t *r, uint64_t addr, const void *rkey, size_t len,
                         char *err, size_t errlen);
/** The worker's event fd, and arming it: 0 when armed (sleep on the fd now),
 *  -1 when there are events to progress first. */
int bench_raw_efd(bench_raw_t *r);
int bench_raw_arm(bench_raw_t *r);
double bench_raw_spin(bench_raw_t *r);
void bench_raw_set_spin(bench_raw_t *r, double spin_s);
/** Progress once; the sink also answers requests here. Returns events seen. */
unsigned bench_raw_progress(bench_raw_t *r);
/** Driver: one transfer of `size` bytes, timed; seconds in *sec_p. */
int bench_raw_transfer(bench_raw_t *r, bench_method_t m, bench_dir_t d, size_t size,
                       double timeout_s, double *sec_p, char *err, size_t errlen);
/** Flush and close the endpoint, progressing, within the timeout. */
int bench_raw_disconnect(bench_raw_t *r, double timeout_s);
/** Print UCX's description of the endpoint (lanes, transports). */
void bench_raw_print_ep(bench_raw_t *r, void *file);
/** The transports of the endpoint's lanes, e.g. "cma/memory, posix/memory". */
const char *bench_raw_transports(bench_raw_t *r);

/* ---- the embedded child (embedded.c) ---------------------------------------- */

typedef struct {
    pid_t pid;
    uint16_t port;
    int cmd_fd;   /* parent -> child */
    int reply_fd; /* child -> parent */
    char dir[64];    /* mkdtemp: data dir (removed once the server runs) */
    char arena[128]; /* /dev/shm/ckstore-bench-PID.arena (idem) */
    int log_fd;      /* the child's stderr (an unlinked file), -1 when verbose */
    int verbose;     /* set before start: the child logs to our stderr */
    unsigned copy_threads; /* set before start: the server's copy_threads
                        (cks_server_params_t; 0: its default) */
    char netns[64];  /* set before start: the network namespace (as `ip netns`
                        names it) the child runs in; "": ours */
} bench_child_t;

/** Fork the child: a ckstore server (port 0, arena of arena_size bytes) and a
 *  raw UCX sink thread; wait for its port. Call before any UCX use in the
 *  parent. */
int bench_child_start(bench_child_t *c, uint64_t arena_size, double timeout_s, char *err,
                      size_t errlen);
/** Ask for a stop, wait, kill by pid after the timeout, remove the files. */
void bench_child_stop(bench_child_t *c, double timeout_s);

/** Parent side of one raw session: the child builds a sink of `setup` and
 *  both sides connect; `raw` is the parent's side (created here); desc gets
 *  what backs each side's buffer (bench_raw_describe(): ours, the child's). */
int bench_child_raw_open(bench_child_t *c, bench_setup_t setup, size_t buf_size,
                         double spin_s, double timeout_s, bench_raw_t **raw_p,
                         char (*desc)[64], char *err, size_t errlen);
/** warmup + reps timed transfers of one method and direction, sampling for
 *  at most budget_s seconds (one sample at least): their seconds into secs,
 *  the count into *n_p. 0, or -1 (said on stderr). */
int bench_raw_sample(bench_raw_t *raw, bench_method_t m, bench_dir_t d, size_t size,
                     unsigned warmup, unsigned reps, double budget_s, double timeout_s,
                     double *secs, unsigned *n_p);
void bench_child_raw_close(bench_child_t *c, bench_raw_t *raw, double timeout_s);
/** Change how long the child's side busy-polls before it sleeps (< 0: always). */
int bench_child_raw_spin(bench_child_t *c, bench_raw_t *raw, double spin_s, double timeout_s);

/* ---- results and JSON (report.c) --------------------------------------------- */

typedef enum { BENCH_F_STR, BENCH_F_U64, BENCH_F_F64, BENCH_F_NULL } bench_ftype_t;

typedef struct {
    const char *key; /* a string literal */
    bench_ftype_t type;
    union {
        uint64_t u;
        double d;
    };
    char s[256];
} bench_field_t;

#define BENCH_REC_FIELDS 24

/** One JSON object: ordered fields. */
typedef struct {
    bench_field_t f[BENCH_REC_FIELDS];
    unsigned n;
} bench_rec_t;

void bench_rec_str(bench_rec_t *r, const char *key, const char *value);
void bench_rec_u64(bench_rec_t *r, const char *key, uint64_t value);
/** A number; NaN is written as null. */
void bench_rec_f64(bench_rec_t *r, const char *key, double value);

/** One field of bench_rec_kv(): KS("key", string), KU("key", integer),
 *  KF("key", number). */
typedef struct {
    const char *key;
    bench_ftype_t type;
    uint64_t u;
    double d;
    const char *s;
} bench_kv_t;
bench_kv_t bench_kv_s(const char *key, const char *v);
bench_kv_t bench_kv_f(const char *key, double v);
bench_kv_t bench_kv_u(const char *key, uint64_t v);
#define KS bench_kv_s
#define KU bench_kv_u
#define KF bench_kv_f
bench_rec_t *bench_rec_set(bench_rec_t *r, const bench_kv_t *kv, unsigned n);
/** Set the fields given (KS, KU, KF ...) in order; r may be NULL (nothing).
 *  Returns r. */
#define bench_rec_kv(r, ...)                            \
    bench_rec_set(r, (const bench_kv_t[]){__VA_ARGS__}, \
                  sizeof((const bench_kv_t[]){__VA_ARGS__}) / sizeof(bench_kv_t))

typedef struct {
    bench_rec_t machine;
    bench_rec_t run; /* how the figures were made: command, options */
    bench_rec_t *results;
    size_t n, cap;
} bench_report_t;

/** A new record (NULL when out of memory: the record is dropped). */
bench_rec_t *bench_report_add(bench_report_t *rep);
/** A new record with these fields (KS, KU, KF ...); NULL as bench_report_add(). */
#define bench_report_kv(rep, ...) bench_rec_kv(bench_report_add(rep), __VA_ARGS__)
void bench_report_free(bench_report_t *rep);
/** The 1-minute load average (-1: unknown). */
double bench_loadavg(void);
/** Fill rep->machine from /proc, /sys, uname and UCX. */
void bench_machine_describe(bench_rec_t *m);
/** Look up a field's string value (NULL when absent). */
const char *bench_rec_get_str(const bench_rec_t *r, const char *key);
/** Look up a field's integer value (0 when absent). */
uint64_t bench_rec_get_u64(const bench_rec_t *r, const char *key);
/** Write {"machine": ..., "run": ..., "results": [...]} to path. */
int bench_report_write_json(const bench_report_t *rep, const char *path);

#endif
