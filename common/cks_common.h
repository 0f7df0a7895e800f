/*
 * common: what every ckstore library shares: status codes and their strings,
 * logging, monotonic time, small helpers, the one background-work queue.
 * Depends on nothing but libc (and pthreads).
 */
#ifndef CKS_COMMON_H
#define CKS_COMMON_H

#include "ckstore_defs.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CKS_API __attribute__((visibility("default")))

#define CKS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define CKS_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define CKS_MAX(a, b)     ((a) > (b) ? (a) : (b))
#define CKS_ALIGN_UP(x, a) ((((x) + (a) - 1) / (a)) * (a))
#define CKS_UNLIKELY(x)   __builtin_expect(!!(x), 0)
/** The struct of type `type` whose member `member` is at `ptr`. */
#define CKS_CONTAINER_OF(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))
/** Append `item` to the queue head..tail of structs linked by `next`
 *  (oldest first; item->next becomes NULL). */
#define CKS_QUEUE_PUSH(head, tail, item)   \
    do {                                   \
        (item)->next = NULL;               \
        if ((tail) != NULL) {              \
            (tail)->next = (item);         \
        } else {                           \
            (head) = (item);               \
        }                                  \
        (tail) = (item);                   \
    } while (0)
/** The same for a list linked both ways (`prev` too). */
#define CKS_LIST_PUSH(head, tail, item) \
    do {                                \
        (item)->prev = (tail);          \
        CKS_QUEUE_PUSH(head, tail, item); \
    } while (0)
/** Take `item` out of the list head..tail linked both ways, wherever it is
 *  (its links become NULL). */
#define CKS_LIST_DEL(head, tail, item)               \
    do {                                             \
        if ((item)->prev != NULL) {                  \
            (item)->prev->next = (item)->next;       \
        } else {                                     \
            (head) = (item)->next;                   \
        }                                            \
        if ((item)->next != NULL) {                  \
            (item)->next->prev = (item)->prev;       \
        } else {                                     \
            (tail) = (item)->prev;                   \
        }                                            \
        (item)->prev = (item)->next = NULL;          \
    } while (0)

/* Limits shared by client, server and the wire codec. */
#define CKS_JOB_MAX_LEN 128  /* bytes of a job name */
#define CKS_KEY_MAX_LEN 256  /* bytes of an object key (LMDB keys are <= 511 B) */
#define CKS_MSG_MAX_LEN 256  /* bytes of an error message on the wire */

/* ---- logging ---------------------------------------------------------- */
typedef enum {
    CKS_LOG_ERROR = 0,
    CKS_LOG_WARN  = 1,
    CKS_LOG_INFO  = 2,
    CKS_LOG_DEBUG = 3,
    CKS_LOG_TRACE = 4,
} cks_log_level_t;

/** Current threshold; messages above it are dropped. Default WARN, or
 *  CKS_LOG_LEVEL from the environment (error|warn|info|debug|trace). */
extern cks_log_level_t cks_log_threshold;

void cks_log_set_level(cks_log_level_t level);
/** Parse "error".."trace"; returns CKS_ERR_INVALID_PARAM on unknown text. */
cks_status_t cks_log_level_parse(const char *text, cks_log_level_t *level_p);
/** Prefix printed before every line (e.g. "server 3"); copied. */
void cks_log_set_prefix(const char *prefix);
void cks_log_write(cks_log_level_t level, const char *file, int line,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* `level` is evaluated once (it may be an expression with effects) */
#define cks_log(level, ...) \
    do { \
        cks_log_level_t cks_log_level_ = (level); \
        if (cks_log_level_ <= cks_log_threshold) \
            cks_log_write(cks_log_level_, __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define cks_error(...) cks_log(CKS_LOG_ERROR, __VA_ARGS__)
#define cks_warn(...)  cks_log(CKS_LOG_WARN, __VA_ARGS__)
#define cks_info(...)  cks_log(CKS_LOG_INFO, __VA_ARGS__)
#define cks_debug(...) cks_log(CKS_LOG_DEBUG, __VA_ARGS__)
#define cks_trace(...) cks_log(CKS_LOG_TRACE, __VA_ARGS__)

/* ---- time ------------------------------------------------------------- */
/** Monotonic clock in nanoseconds. */
uint64_t cks_time_ns(void);
/** Wall clock (CLOCK_REALTIME) in nanoseconds: what records say. */
uint64_t cks_time_real_ns(void);

/* ---- names -------------------------------------------------------------- */
/** Check a job name or key: 1..max_len bytes, valid UTF-8, no NUL.
 *  Returns CKS_ERR_KEY_TOO_LONG or CKS_ERR_NAME_INVALID on failure. */
cks_status_t cks_name_check(const char *name, size_t len, size_t max_len);

/* ---- sizes -------------------------------------------------------------- */
/** Parse a byte count: decimal digits with an optional binary suffix K, M, G
 *  or T (either case), optionally followed by "i", "B" or "iB" ("16M",
 *  "16MiB" and "16MB" are all 16 << 20). Refuses an empty string, a sign,
 *  other characters and values that do not fit in 64 bits with
 *  CKS_ERR_INVALID_PARAM; *size_p is set only on success. Zero is accepted:
 *  callers with a lower bound check it themselves. */
cks_status_t cks_size_parse(const char *text, uint64_t *size_p);

/* ---- growing arrays ----------------------------------------------------- */
/** Room for `need` elements of `elem_size` bytes in the array `arr` of
 *  `*cap_p` elements: returns `arr` itself when it has room, else the array
 *  reallocated to twice its capacity (`first` elements when it had none),
 *  doubled again until `need` fit, with `*cap_p` updated; NULL when out of
 *  memory, with `arr` and `*cap_p` left as they were. The caller assigns the
 *  result: `if ((p = cks_array_grow(a, &cap, n + 1, sizeof(*a), 64)) == NULL)`. */
void *cks_array_grow(void *arr, size_t *cap_p, size_t need, size_t elem_size, size_t first);

/* ---- a test pattern -------------------------------------------------------- */
/** Fill buf[0..len) with the byte pattern of `seed` (xorshift64, 8 bytes
 *  at a time): what the demo, the tests and the bench write, to check what
 *  comes back without keeping a copy. */
void cks_pattern_fill(void *buf, size_t len, uint64_t seed);
/** The offset of the first byte of buf[0..len) that differs from the
 *  pattern of `seed`, or len when none does. */
size_t cks_pattern_check(const void *buf, size_t len, uint64_t seed);

/* ---- byte order --------------------------------------------------------- */
static inline void cks_put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static inline uint64_t cks_get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

/** The key of a version everywhere (LMDB, the server's version table, the
 *  client's put counts): job + 0x00 + be64(version). buf holds at least
 *  job_len + 9 bytes; returns the key's length. */
#define CKS_VKEY_MAX (CKS_JOB_MAX_LEN + 9)
static inline size_t cks_vkey(uint8_t *buf, const char *job, size_t job_len, uint64_t version)
{
    memcpy(buf, job, job_len);
    buf[job_len] = 0;
    cks_put_be64(buf + job_len + 1, version);
    return job_len + 9;
}

/* ---- fault points ------------------------------------------------------
 * Named points in the code where a test can make an operation fail. They
 * exist only in builds configured with -DCKS_FAULT_POINTS=ON (test builds;
 * scripts/test builds that way), which define the macro CKS_FAULT_POINTS.
 * There they are armed from the environment (CKS_FAULTS="name:mode,...",
 * mode = once | always | a probability such as 0.05; CKS_FAULT_SEED seeds
 * the draws, default 1, so a run is repeatable) or by cks_fault_arm(), and
 * cost one load when nothing is armed. In a build without them (the default,
 * release) cks_fault_fire() is the constant 0, there is no table, the
 * environment is not parsed (a process that finds CKS_FAULTS set logs one
 * warning that it is ignored) and the arm calls return CKS_ERR_UNSUPPORTED.
 * Points: chunk_send, chunk_recv, chunk_corrupt (a stored chunk's bit flips),
 * chunk_wire_corrupt (a chunk's bit flips before its member checks it),
 * repair_fetch_corrupt (a chunk that repair read flips a bit once it is
 * there, as if after its member's check: the decoders' check must find it),
 * repair_wait_fg (repair starts no task until a client's data went through
 * the server, at most 10 s after its start: a test of the pacing sees it capped),
 * md_put, md_commit, md_manifest (the coordinator's manifest is not
 * recorded), md_chunk_dup (the second chunk record of a job is a duplicate),
 * chunk_get_slow (a chunk's send, not into the reader's memory, is held back
 * 1 s after its check), chunk_write_late (a whole chunk's write into the
 * reader's memory is held back 11 s: past a repair read's timeout),
 * arena_alloc, encoder, crc_check, flush_die (a server writing a flush is
 * SIGKILLed halfway through its chunks), flush_publish_die (the server
 * publishing a flush is SIGKILLed after its manifest, before the rename),
 * report_lost (a takeover's request to report objects again is answered
 * and not acted on), catchup_hold (a catch-up round waits 4 s between its
 * lists and its comparison), report_drop (a primary's report of an object
 * to a coordinator on another server is lost, as if its connection broke),
 * sentinel_lost (the worker drops its sentinel's message: a receive path
 * that takes nothing, transport/sentinel.c), claim_release_late (a claim
 * that lost is withdrawn - here and from its grantors - 1.5 s late),
 * chunk_send_timeout (a primary's chunk put fails at once with a timeout,
 * as on a connection that failed; its first try, and a second chance's),
 * chunk_resend_timeout (the same for the try again on a new connection
 * that follows such a failure), chunk_again_timeout (the same for the tries
 * every 200 ms of a chunk its object needs).
 */
typedef enum {
    CKS_FAULT_OFF    = 0,
    CKS_FAULT_ONCE   = 1,
    CKS_FAULT_ALWAYS = 2,
    CKS_FAULT_PROB   = 3, /* fires with the probability given to cks_fault_arm_p() */
} cks_fault_mode_t;

/** 1 when this build has fault points (CKS_FAULT_POINTS), else 0: tests that
 *  arm them skip themselves when it is 0. */
int cks_fault_points_built(void);
cks_status_t cks_fault_arm(const char *name, cks_fault_mode_t mode);
/** Arm a point to fire with probability p (0 < p <= 1). */
cks_status_t cks_fault_arm_p(const char *name, double p);
void cks_fault_disarm_all(void);
#ifdef CKS_FAULT_POINTS
/** Returns nonzero when the named point fires now. */
int cks_fault_fire(const char *name);
#else
/* No fault points in this build: every call site folds away. */
static inline int cks_fault_fire(const char *name)
{
    (void)name;
    return 0;
}
#endif

/* ---- a small hash map with byte-string keys --------------------------------
 * Chained, power-of-two buckets, grows at load 1. Keys are copied; values are
 * the caller's pointers. Not thread-safe: one owner thread.
 */
typedef struct cks_hmap cks_hmap_t;

cks_status_t cks_hmap_create(cks_hmap_t **map_p);
/** Frees the map and its key copies; values are the caller's. */
void cks_hmap_destroy(cks_hmap_t *map);
/** Value for key, or NULL. */
void *cks_hmap_get(const cks_hmap_t *map, const void *key, size_t len);
/** Insert or replace. */
cks_status_t cks_hmap_put(cks_hmap_t *map, const void *key, size_t len, void *value);
/** Remove; returns the value that was there, or NULL. */
void *cks_hmap_del(cks_hmap_t *map, const void *key, size_t len);
size_t cks_hmap_count(const cks_hmap_t *map);
/** Call cb for every entry; cb may not modify the map. */
void cks_hmap_foreach(const cks_hmap_t *map,
                      void (*cb)(const void *key, size_t len, void *value, void *arg),
                      void *arg);

/* ---- a background-work queue (workq.c) -------------------------------------
 * A FIFO of jobs run by N threads of its own, for work that must stay off an
 * owner's thread (LMDB writes, encoding, page faults). The owner pushes jobs;
 * a thread takes the oldest one (or, in batch mode, every job queued) and
 * calls `run` outside the queue's lock; finished jobs go on a done list,
 * oldest first, and `wake` is called so that the owner comes to take them.
 * The queue knows nothing of what it wakes (a UCX worker, a condition):
 * `wake` is the owner's. Any thread may push; one owner takes and stops.
 */

/** The link a job embeds (anywhere in its own struct; CKS_CONTAINER_OF()
 *  gets the job back). A job is its owner's memory: the queue never
 *  allocates or frees one. From a push that returns CKS_OK until the job is
 *  taken back (cks_workq_take_done(), or the list cks_workq_stop() returns)
 *  the queue owns the link, and `run` may use the rest; the owner must not
 *  touch it meanwhile. Once taken back the job is the owner's again, to
 *  finish and free; a push that fails leaves it with the caller. */
typedef struct cks_workq_job {
    struct cks_workq_job *next;
} cks_workq_job_t;

typedef struct cks_workq cks_workq_t;

/** Run `jobs` (a list linked by `next`: one job, or in batch mode every job
 *  that was queued, oldest first), on a queue thread. It must not change
 *  the links: the list goes on the done list as it is. `q` is for
 *  cks_workq_stopping(). */
typedef void (*cks_workq_run_cb_t)(cks_workq_t *q, cks_workq_job_t *jobs, void *arg);
/** Tell the owner that jobs are done; called from a queue thread, outside
 *  the queue's lock, after each job (or batch) is on the done list. */
typedef void (*cks_workq_wake_cb_t)(void *arg);
/** A job pushed after the stop, before it goes on the done list without
 *  being run (the owner marks it canceled); on the pushing thread. */
typedef void (*cks_workq_late_cb_t)(cks_workq_job_t *job, void *arg);

typedef enum {
    CKS_WORKQ_BATCH = 1u << 0, /* `run` gets every queued job at once */
    CKS_WORKQ_DRAIN = 1u << 1, /* the stop runs what is queued first */
} cks_workq_flags_t;

typedef struct {
    unsigned nthreads;        /* at least 1 */
    unsigned flags;           /* cks_workq_flags_t bits */
    cks_workq_run_cb_t run;   /* required */
    cks_workq_wake_cb_t wake; /* NULL: the owner polls */
    cks_workq_late_cb_t late; /* NULL: a push after the stop fails */
    void *arg;                /* passed to the three callbacks */
    unsigned nice;            /* 0..19: each thread runs this many nice levels
                                 below the process (background work that
                                 yields the cores to the threads others wait
                                 on); 0: the process's own */
    const char *name;         /* the threads' name (its first 15 characters;
                                 ps, /proc/PID/task/TID/comm); NULL: the
                                 process's */
} cks_workq_params_t;

/** Start the queue's threads. CKS_ERR_INVALID_PARAM for a bad params,
 *  CKS_ERR_NO_MEMORY when memory or a thread is missing (then nothing is
 *  left running). */
cks_status_t cks_workq_create(const cks_workq_params_t *params, cks_workq_t **q_p);
/** Queue `job` (its link is overwritten). CKS_OK: it comes back on the done
 *  list - run, or, pushed after cks_workq_stop() began while `late` is set,
 *  not run (`late` was called on it; `wake` is not: the owner takes after
 *  its stop). CKS_ERR_CANCELED: pushed after the stop began without
 *  `late`: not queued, the job is the caller's. In drain mode a push while
 *  the stop waits for the threads is still run. */
cks_status_t cks_workq_push(cks_workq_t *q, cks_workq_job_t *job);
/** Take every finished job: a list, oldest first (NULL: none). */
cks_workq_job_t *cks_workq_take_done(cks_workq_t *q);
/** 1 once cks_workq_stop() has begun: a long job checks it between slices
 *  and gives up. Any thread. */
int cks_workq_stopping(const cks_workq_t *q);
/** Stop the threads and wait for them: a running job finishes; with
 *  CKS_WORKQ_DRAIN every queued job is run first, else the jobs never
 *  started are returned (a list, oldest first), not run, for the owner to
 *  cancel. The done list stays for cks_workq_take_done(). A second call
 *  returns NULL. */
cks_workq_job_t *cks_workq_stop(cks_workq_t *q);
/** Free the queue, after cks_workq_stop() (NULL: nothing). Jobs still on
 *  the done list are not touched: take them first. */
void cks_workq_destroy(cks_workq_t *q);

/* ---- deadlines (deadline.c) -------------------------------------------------
 * The one deadline engine: an intrusive list of the owner's entries kept in
 * deadline order, so that a sweep looks only at what is due (the head) and
 * the wait until the next one is the head's. The transport's calls and
 * payload receives and the client's requests in flight each keep one. An
 * entry that waits for something without a deadline (UCX still holds its
 * buffer) is parked: it stays in the list, behind every deadline, until its
 * owner moves or removes it. One thread (the owner's) uses a list.
 */
#define CKS_DL_NEVER UINT64_MAX /* a parked entry's due time */

/** The link an entry embeds (CKS_CONTAINER_OF() gets the entry back). From
 *  cks_dl_add() to cks_dl_del() the list owns the links; due_ns may be read
 *  and changes only through cks_dl_move(). */
typedef struct cks_dl {
    struct cks_dl *prev, *next;
    uint64_t due_ns;
} cks_dl_t;

typedef struct {
    cks_dl_t *head, *tail; /* earliest first; parked entries last */
} cks_dl_list_t;

/** Add e, due at due_ns (CKS_DL_NEVER: parked), behind the entries due no
 *  later (most entries share one timeout: it looks from the tail). */
void cks_dl_add(cks_dl_list_t *l, cks_dl_t *e, uint64_t due_ns);
/** Take e out of l (it must be in it). */
void cks_dl_del(cks_dl_list_t *l, cks_dl_t *e);
/** Give e (in l) a new due time. */
void cks_dl_move(cks_dl_list_t *l, cks_dl_t *e, uint64_t due_ns);
/** The earliest entry when it is due at `now`, else NULL. A sweep takes it
 *  until NULL; each one taken must be removed or moved later (or parked)
 *  before the next call, or the sweep would not end. */
cks_dl_t *cks_dl_due(const cks_dl_list_t *l, uint64_t now);
/** Milliseconds from now until the earliest deadline (rounded up; 0 when
 *  one is due), at most cap_ms when cap_ms >= 0; -1 when none (empty, or
 *  only parked entries). */
int cks_dl_wait_ms(const cks_dl_list_t *l, uint64_t now, int cap_ms);
/** The earlier of two waits as cks_dl_wait_ms() gives them (-1: none). */
int cks_dl_sooner(int a_ms, int b_ms);

#endif
