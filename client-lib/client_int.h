/*
 * client-lib private: the op machinery shared by libckstore's files (the
 * module map in docs/ARCHITECTURE.md says which does what): util.c at the
 * bottom, then the connections (conn.c), the op engine (op.c, reply.c) and
 * its progress thread (progress.c), then versions, puts, gets, restores
 * and device memory; client.c on top.
 */
#ifndef CKS_CLIENT_INT_H
#define CKS_CLIENT_INT_H

#include "ckstore.h"
#include "cks_coding.h"
#include "cks_md.h"
#include "cks_tp.h"

#include <pthread.h>

#define CKS_CLIENT_TIMEOUT_DEFAULT 60000
#define CKS_CL_WINDOW 64 /* requests in flight per server; more wait in the client */
#define CKS_CL_RX_STALL_S 5 /* see cks_cl_sentinel() (progress.c) */
/* an op that failed while UCX held its send: the send is given up this long after */
#define CKS_CL_ABANDON_NS (5ull * 1000000000ull)
/* A question every server answered "catching up" (servers that restarted
 * together) is asked again after this pause, until the op's timeout. */
#define CKS_CL_BUSY_PAUSE_NS (100ull * 1000000ull)
/* A seal sent again to a candidate that did not answer this client in
 * time while no other candidate took the version (op.c): at least this
 * many times (each costs up to one more request timeout, and the other
 * candidates' answers), and as many as the member timeout takes
 * (cks_cl_seal_resends()). */
#define CKS_CL_SEAL_RESENDS     3u
#define CKS_CL_SEAL_RESENDS_MAX 64u
/* A server that let a request time out (a silent one: cut off, stopped,
 * overloaded) is skipped by requests that can go elsewhere - a put to its
 * group's next member, a version's next coordinator candidate, a read
 * decoded from other chunks - so that each of them does not wait a whole
 * timeout for it, until it answers again: a new handshake asks it every
 * CKS_CL_PROBE_NS. While its connection still stands (a seal waits there),
 * no handshake can ask it: it is skipped for CKS_CL_SILENT_NS after the
 * timeout. */
#define CKS_CL_SILENT_NS (5ull * 1000000000ull)
/* A begin no majority granted is asked again, once, after this pause: the
 * servers its candidate could not reach in time may answer a new
 * connection (an endpoint that went stale in a partition). */
#define CKS_CL_QUORUM_TRIES    1u
#define CKS_CL_QUORUM_PAUSE_NS (300ull * 1000000ull)
#define CKS_CL_PROBE_NS  (1000ull * 1000000ull)
/* A put whose every candidate failed, one at least by not answering in time,
 * walks its group once more after this pause: the members that did not
 * answer are asked by a handshake on a new connection first, and one that
 * was cut off and is back answers (a connection that stood through the cut
 * may carry nothing for seconds more: TCP backs off while cut). */
#define CKS_CL_REWALK_PAUSE_NS (500ull * 1000000ull)

typedef struct cks_op cks_op_t;

/* How a reply is turned into results. */
typedef enum {
    CKS_OP_STATUS,       /* STATUS_REPLY only */
    CKS_OP_PUT,          /* send with payload + STATUS_REPLY */
    CKS_OP_SEAL,         /* SEAL_REPLY */
    CKS_OP_GET,          /* GET_REPLY + payload (standalone server) */
    CKS_OP_CHUNK_GET,    /* CHUNK_GET_REPLY + payload (cluster) */
    CKS_OP_VERSION_STAT, /* VERSION_STAT_REPLY */
    CKS_OP_OBJECT_STAT,  /* OBJECT_STAT_REPLY */
    CKS_OP_LIST,         /* LIST_REPLY + page */
    CKS_OP_CONNECT,      /* never sent: done once its server is up */
    CKS_OP_MEM_MAP,      /* MEM_MAP of a cks_mem_alloc() region (buf) + STATUS_REPLY */
    CKS_OP_REPAIR_STATUS, /* REPAIR_STATUS_REPLY */
    CKS_OP_STATS,        /* STATS_REPLY, into a cks_cl_stats_t */
} cks_op_kind_t;

/* One server's usage figures (STATS_REPLY): what CKS_OP_STATS fills. */
typedef struct {
    uint64_t arena_used;
    uint64_t arena_size;
    uint64_t enc_bytes;  /* object bytes its encoder threads protected */
    uint64_t enc_ns;     /* their CPU time in encode calls */
    uint64_t enc_job_ns; /* their CPU time in whole jobs */
} cks_cl_stats_t;

/* Where an op may go. */
typedef enum {
    CKS_TARGET_FIXED = 0, /* op->srv only */
    CKS_TARGET_ANY   = 1, /* op->srv first, then every other server in turn */
    CKS_TARGET_GROUP = 2, /* a put: the placement group's members in order, while
                             the one asked is unreachable (at most m + 1 of them) */
    CKS_TARGET_COORD = 3, /* a version's begin, finish, abort, delete or delete
                             marker: its coordinator candidates in order
                             (op->group), while the one asked is unreachable
                             or answers that another one coordinates it */
} cks_target_t;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    cks_status_t status;
} cks_waiter_t;

struct cks_op {
    cks_op_t *next, *prev;  /* submit queue, or a server's wait list */
    cks_dl_t dl;            /* in flight: the client's deadline list (c->fl) */
    cks_client_h client;
    cks_op_kind_t kind;
    unsigned type;          /* request message type */
    uint64_t req_id;
    int timeout_ms;         /* 0: the client's; more for long requests (a flush) */
    size_t srv;             /* target server position */
    cks_target_t target;
    size_t tries;           /* servers tried (CKS_TARGET_ANY, CKS_TARGET_GROUP) */
    uint16_t group[CKS_PLACE_WIDTH_MAX]; /* CKS_TARGET_GROUP: stripe 0's members */
    unsigned ngroup;        /* how many of them may act as the primary */
    int coord_first;        /* CKS_TARGET_ANY: the version's coordinator candidates
                               (op->group) are asked first, in order; their "no
                               such version" is the truth, the other servers are
                               asked only when none of them answers */
    int cand_notfound;      /* coord_first: a candidate answered "no such ..." */
    int cand_unsure;        /* coord_first: a candidate was busy or unreachable */
    int background;         /* the library's own (a restore's lease): its failure is
                               logged at info and never becomes the last error */
    cks_status_t notfound;  /* a "no such ..." from a server that may have missed
                               a manifest (CKS_TARGET_ANY, not the first asked) */
    int saw_busy;           /* CKS_TARGET_ANY: a server of this walk was busy */
    uint64_t busy_until_ns; /* CKS_TARGET_ANY: no server answered and one was busy
                               catching up: the walk starts again until then
                               (0: not yet) */
    uint64_t resume_ns;     /* on the client's later list: dispatched then */
    cks_msg_any_t body;     /* request; strings point into `names` */
    char names[CKS_JOB_MAX_LEN + 2 * CKS_KEY_MAX_LEN + 3];
    const void *payload;    /* PUT */
    uint64_t payload_len;
    cks_mem_type_t mem_type;
    void *buf;              /* GET / CHUNK_GET destination */
    uint64_t buf_size;
    uint64_t *length_p;
    uint32_t flags;
    uint32_t wire_flags;    /* header flags the request carries (CKS_WIRE_F_CHECKED) */
    /* called (progress thread) each time the op is sent, with the server
     * it goes to: a put in parts sends its parts there (stage_put.c) */
    void (*on_send)(void *arg, size_t srv);
    void *on_send_arg;
    void *out;              /* stat / list results (caller's) */
    size_t out_max;
    size_t *count_p;
    int *more_p;
    cks_wire_entry_t entry; /* LIST */
    uint8_t *page;          /* LIST: received page */
    size_t page_len;
    uint64_t crc64, obj_size; /* GET: whole object; CHUNK_GET: whole chunk */
    int rma;                /* the request names the caller's memory (rma_desc):
                               the server reads the payload from it, or writes
                               the reply's payload into it */
    size_t rma_len;
    uint8_t rma_desc[CKS_TP_RMA_DESC_MAX];
    int sending;            /* UCX holds the payload (send) */
    uint64_t abandon_ns;    /* failed while sending: the send is given up then */
    int receiving;          /* UCX writes into buf */
    int replied;
    int answered;           /* status is the server's own answer (not a
                               failure to reach it) */
    cks_status_t unreach;   /* CKS_TARGET_COORD: why the first candidate
                               could not be reached, else CKS_OK */
    unsigned resends;       /* VERSION_SEAL: sent again to a candidate that let
                               it time out (CKS_WIRE_F_RESENT), at most
                               cks_cl_seal_resends() times */
    uint32_t slow_mask;     /* VERSION_SEAL, PUT: the candidates (bit = position
                               in group) that let it time out */
    unsigned rewalks;       /* PUT: walks of its group after the first
                               (CKS_CL_REWALK_PAUSE_NS) */
    uint32_t resent_mask;   /* VERSION_SEAL: those it was sent again to */
    uint32_t unfenced_mask; /* VERSION_SEAL, VERSION_ABORT: the candidates (bit =
                               position in group) that had the version and
                               could not record its outcome, no majority
                               having fenced their ballot (CKS_ERR_NO_QUORUM) */
    char *unfenced_why;     /* VERSION_SEAL, VERSION_ABORT: the last one's text, in
                               room after the op (version.c); NULL for others */
    unsigned quorum_tries;  /* VERSION_BEGIN: asked again after CKS_ERR_NO_QUORUM */
    int patient;            /* CHUNK_GET that the read cannot do without: it
                               waits for its server's connection (not failed
                               at once because the server failed before) */
    int queued;             /* on a server's wait list */
    cks_status_t status;
    cks_done_cb_t cb;
    void *arg;
};

/* Memory from cks_mem_alloc(). */
typedef struct cks_cl_mem {
    struct cks_cl_mem *next;
    void *base;
    size_t len;
    size_t page; /* the kernel's page size for it (0: not known yet) */
    cks_tp_mem_h mem;
} cks_cl_mem_t;

/* How a server's connection attempt ended (conn.c calls it; the op
 * engine's): CKS_OK, it is up; else why not. */
typedef void (*cks_cl_srv_cb_t)(cks_client_h c, size_t pos, cks_status_t status);

/* A server as the client sees it. */
typedef enum {
    CKS_SRV_IDLE = 0,    /* no connection yet, or the last one failed */
    CKS_SRV_CONNECTING,  /* HELLO in flight; ops wait */
    CKS_SRV_UP,
} cks_srv_state_t;

typedef struct {
    cks_client_h client;
    char addr[64];
    uint16_t port;
    cks_tp_conn_h conn;
    cks_srv_state_t state;
    cks_status_t last_error;
    uint64_t silent_ns;      /* when a request it answers at once last went
                                unanswered (timed out); 0 once it answers
                                anything: meanwhile a request that has
                                another server to go to skips it
                                (cks_cl_dispatch()) */
    uint64_t probe_ns;       /* the last handshake started to ask a silent one */
    uint64_t heard_ns;       /* when its connection last brought a reply (or
                                its handshake's end): a request that times
                                out on a connection that brought nothing for
                                that long closes it (progress.c) */
    uint64_t failed_ns;      /* when it last failed (reconnects are paced) */
    cks_cl_srv_cb_t ended;   /* told how the last connection attempt ended
                                (cks_cl_srv_connect()'s caller's) */
    cks_op_t *wait_head, *wait_tail; /* waiting for the connection or the window */
    unsigned inflight;       /* requests sent and not finished (the window) */
    int no_rma;              /* it refused our memory descriptors: send the bytes */
    unsigned maps_pending;   /* MEM_MAPs of a new connection not answered yet */
    int local;               /* its last connection that came up was on this host */
    uint64_t rejoin_ns;      /* when to connect to it again on our own (0: not
                                planned; cks_cl_rejoin_run()) */
    uint64_t rejoin_wait_ns; /* the pause before the attempt after that */
    int rejoining;           /* the connection being made is such an attempt */
    uint64_t warned_ns;      /* when a request last warned that it went elsewhere:
                                one warning per server per CKS_CL_WARN_EVERY_NS */
} cks_cl_srv_t;

/* A server on this host that went down while we have registered regions is
 * connected to again on our own, first after CKS_CL_REJOIN_FIRST_NS, then at
 * pauses that double up to CKS_CL_REJOIN_MAX_NS, until it answers: a
 * restarted server then maps and faults in our regions (MEM_MAP) well before
 * our next transfer instead of during it (cks_cl_rejoin_run()). */
#define CKS_CL_REJOIN_FIRST_NS (1000ull * 1000000ull)
#define CKS_CL_REJOIN_MAX_NS   (30ull * 1000000000ull)

int cks_cl_rejoin_run(cks_client_h c);

/* A server that every request of a checkpoint finds down is said once a
 * while at warn level, the other requests that go elsewhere at info. */
#define CKS_CL_WARN_EVERY_NS (10ull * 1000000000ull)

struct cks_client {
    char name[CKS_WIRE_MAX_NAME + 1];
    int timeout_ms;
    cks_cluster_h map;        /* NULL: one standalone server */
    size_t nsrv;
    cks_cl_srv_t *srv;
    unsigned k, m;            /* geometry of versions this client begins */
    uint64_t chunk_size;
    uint32_t member_ms;       /* member timeout sent with puts and begins (0: the servers') */
    cks_ec_h ec[CKS_EC_MAX_K + 1][CKS_EC_MAX_M + 1]; /* decoders, made on demand */
    cks_tp_worker_h tp;
    pthread_t thread;
    pthread_mutex_t lock;     /* submit queue, stop, last error */
    cks_op_t *sub_head, *sub_tail;
    cks_op_t *later;          /* ops asked again after a pause, by resume_ns
                                 (progress thread only) */
    int stop;
    char last_error[CKS_MSG_MAX_LEN + 64];
    cks_hmap_t *put_counts;   /* job\0be64(version) -> cks_cl_puts_t (under lock) */
    cks_cl_mem_t *mems;       /* cks_mem_alloc() (under lock) */
    int pages_checked;        /* mem.c: a region of 2 MiB or more was checked */
    struct cks_cl_scratch *scratch; /* scratch.c: degraded reads' chunk buffers
                                       (progress thread; NULL until needed) */
    const cks_cl_mem_t *scratch_mem; /* its registered region (scratch.c sets
                                        it), NULL when none: cks_cl_scratch_mem() */
    uint64_t scratch_size;    /* its size (CKS_CLIENT_FIELD_SCRATCH) */
    cks_tp_secret_t secret;   /* with CKS_CLIENT_FIELD_SECRET (and the job
                                 of a job's own secret) */
    int has_secret;
    /* stage.c: device memory (NULL until the first device transfer) */
    struct cks_stage *stage;
    uint64_t stage_slice;     /* bytes per slice of its ring */
    unsigned stage_slices;    /* slices in the ring */
    unsigned long requests;   /* requests in flight (the sum of the servers'
                                 `inflight`) and handshakes; atomic:
                                 cks_client_stats() */
    unsigned rx_stalled_s;    /* the sentinel's count (cks_tp_sentinel_poll());
                                 atomic: cks_client_stats() */
    /* progress thread only */
    int rx_stall_said;        /* the stall was logged */
    int renewing;             /* cks_tp_worker_renew() runs (progress thread) */
    cks_workq_t *work;        /* work.c: its threads (NULL until the first job) */
    int work_none;            /* none could start, or stopped: callers run jobs */
    cks_hmap_t *inflight;     /* req_id -> op */
    cks_dl_list_t fl;         /* in flight, in deadline order (op->dl) */
};

struct cks_restore {
    cks_client_h client;
    char job[CKS_JOB_MAX_LEN + 1];
    cks_version_info_t info;
    uint64_t holder;  /* this restore's lease on the version (read.c); 0: none */
    uint64_t held_ns; /* when it was last sent (atomic: gets renew it) */
    struct cks_cl_disk *disk; /* disk.c: reads the durable copy (NULL: memory;
                                 then no lease is held) */
};

/* restore.c: a restore handle of a restorable version, holding it on every
 * server (a lease renewed by its gets, let go by cks_restore_close) */
cks_status_t cks_cl_restore_new(cks_client_h c, const char *job, const cks_version_info_t *info,
                                cks_restore_h *r_p);

/* read.c: a get of a restore in memory into host memory (the caller renewed
 * the lease; p, cb checked): a standalone server's GET or a cluster read.
 * wire_flags, for a standalone server's range GET: CKS_WIRE_F_CHECKED when
 * the caller checks the object's CRC over all its ranges itself
 * (stage_get.c); 0 for cks_get_nb() (get.c). */
cks_status_t cks_cl_read(cks_restore_h r, const cks_get_params_t *p, uint64_t *length_p,
                         cks_done_cb_t cb, void *arg, uint32_t wire_flags);

/* disk.c: restores from the durable tier (a flushed copy on disk) */
/* Open the flushed copy of (job, version) in dir (CKS_VERSION_LATEST: the
 * newest there) as a restore handle of client c. */
cks_status_t cks_cl_disk_open(cks_client_h c, const char *dir, const char *job,
                              uint64_t version, cks_restore_h *r_p);
void cks_cl_disk_close(struct cks_cl_disk *d);
/* flushed.c: the directory of version `*version` of job in flush dir `dir`
 * (CKS_VERSION_LATEST: the newest published one, written back), and a
 * version record as the API's info. */
cks_status_t cks_cl_flushed_vdir(const char *dir, const char *job, uint64_t *version, char *out,
                                 size_t len);
void cks_cl_flushed_info(cks_version_info_t *info, const cks_md_version_t *v);
cks_status_t cks_cl_disk_stat(cks_restore_h r, const char *key, cks_object_info_t *info_p);
cks_status_t cks_cl_disk_list(cks_restore_h r, const char *after_key, cks_object_info_t *out,
                              size_t max, size_t *count_p, int *more_p);
/* Read on the calling thread; the callback runs before it returns. */
cks_status_t cks_cl_disk_get(cks_restore_h r, const cks_get_params_t *p, uint64_t *length_p,
                             cks_done_cb_t cb, void *arg);

/* util.c: the last error, waiters, ops' allocation and names */
void cks_cl_set_error(cks_client_h c, cks_status_t status, const char *text, size_t len);
/* The client's last error: its status and a printf-style text (cut at the
 * wire's message bound); for text that is not NUL-terminated (a server's
 * reason on the wire), cks_cl_set_error with its length. */
void cks_cl_set_errorf(cks_client_h c, cks_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void cks_waiter_init(cks_waiter_t *w);
void cks_waiter_cb(void *arg, cks_status_t status);
cks_status_t cks_waiter_wait(cks_waiter_t *w, cks_status_t status);
cks_status_t cks_op_name(cks_op_t *op, size_t *used, const char *name, size_t max,
                         cks_wire_str_t *s);
cks_op_t *cks_op_new(cks_op_kind_t kind, unsigned type);
/* The callback of an op nobody waits for (a region announced). */
void cks_cl_noop_done(void *arg, cks_status_t status);
void cks_cl_map_done(void *arg, cks_status_t status);
/* op.c: queue an op from any thread; CKS_INPROGRESS (cb runs once) or an error. */
cks_status_t cks_cl_submit(cks_client_h c, cks_op_t *op, cks_done_cb_t cb, void *arg);
/* Submit and wait. */
cks_status_t cks_cl_run(cks_client_h c, cks_op_t *op);
/* Start an op from the progress thread (a callback); cb runs once, later. */
void cks_cl_start(cks_client_h c, cks_op_t *op, cks_done_cb_t cb, void *arg);
/** Send `op` to the coordinator of (job, version): its candidates in turn
 *  (CKS_TARGET_COORD) on a cluster, the server on a standalone one. */
void cks_cl_to_coordinator(cks_client_h c, cks_op_t *op, const char *job, size_t job_len,
                           uint64_t version);
/** A question about (job, version) that any server may answer (target
 *  CKS_TARGET_ANY, set by the caller): its coordinator candidates first. */
void cks_cl_coord_first(cks_client_h c, cks_op_t *op, const char *job, size_t job_len,
                        uint64_t version);
/* The scratch region's registered memory, if any (for descriptors and
 * MEM_MAP; progress thread). */
static inline const cks_cl_mem_t *cks_cl_scratch_mem(cks_client_h c)
{
    return c->scratch_mem;
}
/* work.c: jobs run off the progress thread, finished on it. A job is its
 * owner's memory (embed the struct); the queue holds it from a push that
 * returns CKS_OK until `done`. */
typedef struct cks_cl_work cks_cl_work_t;
struct cks_cl_work {
    cks_workq_job_t wq;
    void (*run)(cks_cl_work_t *w);  /* on a work thread: touches only what the
                                       progress thread leaves alone meanwhile */
    void (*done)(cks_cl_work_t *w); /* then on the progress thread; may free w */
};
/* Threads for a client's helpers: 1, or one per 4 CPUs up to 4. */
unsigned cks_cl_helper_threads(void);
/* Queue w (progress thread; the queue starts at the first push). An error
 * (no threads, or the client stopping): the job is the caller's, to run
 * itself. */
cks_status_t cks_cl_work_push(cks_client_h c, cks_cl_work_t *w);
/* Finish the jobs done (each pass of the progress thread; how many), and at
 * its end run the queued ones, finish them and stop the threads. */
unsigned cks_cl_work_reap(cks_client_h c);
void cks_cl_work_stop(cks_client_h c);
/* scratch.c: the scratch region, where degraded reads put the chunks that
 * are not the caller's (progress thread). Allocate it now (cluster clients,
 * at create, before the progress thread starts): memory reserved up front,
 * not in the first degraded read; and its release (client destroy, after
 * the progress thread). */
void cks_cl_scratch_prepare(cks_client_h c);
void cks_cl_scratch_free(cks_client_h c);
/* Could n pieces of len bytes each be had from it at once (once the others
 * gave theirs back)? 0 when the client has none or it is smaller: malloc()
 * them. It is made on first use. */
int cks_cl_scratch_fits(cks_client_h c, unsigned n, uint64_t len);
/* len bytes of it (first fit), or NULL when it has no such room now; and
 * their return. */
uint8_t *cks_cl_scratch_take(cks_client_h c, uint64_t len);
void cks_cl_scratch_give(cks_client_h c, uint8_t *p, uint64_t len);
/* A user waiting for room in it, in its own struct: queued in order
 * (cks_cl_scratch_wait()), and taken back off by whoever gave room back
 * (cks_cl_scratch_waiter(): the first, NULL when none waits). */
typedef struct cks_cl_scratch_wait {
    struct cks_cl_scratch_wait *next;
    int queued;                /* on the queue */
} cks_cl_scratch_wait_t;
void cks_cl_scratch_wait(cks_client_h c, cks_cl_scratch_wait_t *w);
cks_cl_scratch_wait_t *cks_cl_scratch_waiter(cks_client_h c);
/* mem.c: ask the servers on this host that are up to map a region ahead
 * of its transfers, answers not awaited (progress thread). */
void cks_cl_mem_announce_all(cks_client_h c, const cks_cl_mem_t *m);
/* reply.c: a version entry of a reply as the API's info */
void cks_cl_version_info(cks_version_info_t *info, const cks_msg_version_entry_t *e);
/* version.c: a version's stat (latest: the job's newest), and a list op run
 * into the caller's entries */
cks_status_t cks_cl_version_stat(cks_client_h c, const char *job, uint64_t version, int latest,
                                 cks_version_info_t *info_p);
cks_status_t cks_cl_list(cks_client_h c, cks_op_t *op, void *out, size_t max,
                         size_t *count_p, int *more_p);

/* util.c: puts completed per version (what a seal tells the coordinator). */
typedef struct {
    uint64_t count;  /* puts completed */
    uint64_t digest; /* XOR of their digests (cks_msg_version_seal_t.digest) */
    uint64_t *on;    /* cluster: puts each server (by position, c->nsrv of them)
                        answered as the primary; NULL when none */
} cks_cl_puts_t;

/* Puts completed for (job, version); `take` forgets them, and hands the
 * caller `on` (free() it); without `take`, `on` is NULL. */
cks_cl_puts_t cks_cl_put_count(cks_client_h c, const char *job, uint64_t version, int take);
/* A put completed (the op engine): counted for its version's seal. */
void cks_cl_put_counted(cks_client_h c, const cks_msg_put_t *m, size_t srv);
/* util.c: the table of puts per version freed (client teardown) */
void cks_cl_put_counts_free(cks_client_h c);

/* ---- op.c: the op engine, on the progress thread (progress.c drives it;
 * the replies, reply.c, complete its ops) ---- */

int cks_cl_retryable(cks_status_t st);

void cks_cl_op_try_complete(cks_client_h c, cks_op_t *op);

void cks_cl_op_fail(cks_client_h c, cks_op_t *op, cks_status_t status);


void cks_cl_dispatch(cks_client_h c, cks_op_t *op);

/* The op of an entry of c->fl (its requests in flight). */
cks_op_t *cks_cl_fl_op(cks_dl_t *e);

/* Give up the send UCX still holds for an op that failed long ago: the op
 * completes (and may be freed). */
void cks_cl_send_abandon(cks_client_h c, cks_op_t *op);

/* A server's connection failed, or is dropped: the ops on it and those
 * waiting for it fail (and may move on). */
void cks_cl_srv_down(cks_client_h c, size_t pos, cks_status_t status);

/* ---- progress.c: the progress thread (client.c starts it) ---- */

void *cks_cl_thread(void *arg);

/* ---- conn.c: each server's connection, below the op engine (progress
 * thread) ---- */

/* Connect to server pos and run the handshake; `ended` is told how it
 * ended, maybe before this returns: CKS_OK, the server is up; else the
 * failure, with the connection, if one was made, still the server's, to be
 * dropped (cks_cl_srv_down()). */
void cks_cl_srv_connect(cks_client_h c, size_t pos, cks_cl_srv_cb_t ended);

cks_tp_conn_h cks_cl_srv_drop(cks_client_h c, size_t pos, cks_status_t status);

cks_op_t *cks_cl_mem_map_op(const cks_cl_mem_t *m, size_t pos);

cks_op_t *cks_cl_mem_map_ops(cks_client_h c, size_t pos);

/* ---- reply.c: the transport's callbacks for the client's connections ---- */

cks_op_t *cks_cl_reply_op(cks_client_h c, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr);

void cks_cl_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                   const cks_msg_any_t *b, cks_tp_data_t *data);

void cks_cl_on_bad_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                       cks_status_t status, const char *reason);

void cks_cl_on_conn_err(void *arg, cks_tp_conn_h conn, cks_status_t status);

/* ---- between restore.c and the gets (get.c, stage_get.c) ---- */

void cks_restore_renew(cks_restore_h r);

#endif
