/*
 * server-private definitions shared by server.c (progress thread: requests,
 * replies, arena) and mdq.c (metadata writer thread: CRCs and LMDB writes).
 */
#ifndef CKS_SERVER_INT_H
#define CKS_SERVER_INT_H

#include "arena.h"
#include "cks_coding.h"
#include "cks_md.h"
#include "cks_server.h"
#include "cks_tp.h"

#include <pthread.h>
#include <signal.h>

typedef struct cks_sv_version cks_sv_version_t;

/* Who waits for a cluster version's outcome. */
typedef struct {
    cks_tp_conn_h conn;
    uint64_t req_id;
    int seal; /* 1: a rank's finish (SEAL_REPLY on success) */
} cks_sv_waiter_t;

/* A deferred request on a version: runs when its puts and gets drain. */
typedef enum {
    CKS_SV_WAIT_NONE = 0,
    CKS_SV_WAIT_SEAL,
    CKS_SV_WAIT_ABORT,
    CKS_SV_WAIT_DELETE,
} cks_sv_wait_t;

/* What the progress thread knows of a version that is open, or that has
 * operations in flight. Owned by the progress thread. */
struct cks_sv_version {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    cks_md_version_t rec;  /* as last committed (or being committed) */
    int open;              /* accepting puts */
    int begun;             /* version record committed */
    unsigned pending;      /* puts accepted and not yet committed */
    unsigned readers;      /* gets whose payload is in flight */
    cks_status_t failed;   /* first failure of a put's commit */
    cks_hmap_t *keys;      /* keys of this version written or in flight */
    uint64_t nobjects, bytes;
    cks_sv_wait_t wait;    /* a seal/abort/delete waiting to run */
    cks_tp_conn_h wait_conn;
    uint64_t wait_req_id;
    /* cluster: the coordinator's manifest under construction */
    int cluster;
    cks_md_object_t *objs;
    size_t nobjs, capobjs;
    uint64_t expected;     /* objects the sealer put; UINT64_MAX until sealed */
    uint64_t digest;       /* XOR of the digests of the objects reported */
    uint64_t expected_digest; /* XOR of the digests the finished ranks sent */
    uint64_t seal_deadline_ns;
    char why[CKS_MSG_MAX_LEN]; /* why `failed` */
    unsigned bcast;        /* peers still to answer a commit/drop broadcast */
    cks_status_t bcast_reply; /* the status the client gets when the broadcast ends */
    cks_sv_waiter_t *waiters; /* ranks that finished (and abort/delete callers) */
    size_t nwaiters, capwaiters;
    uint8_t *ranks_done;   /* bitmap of ranks that finished */
    uint32_t nranks_done;
    uint32_t retain;       /* the job's retention (cluster) */
    uint64_t open_deadline_ns; /* abort when not every rank finished by then */
    uint32_t member_ms;    /* the begin's member timeout (0: the default) */
    cks_hmap_t *deleted;   /* keys of the parent removed in this version */
    int told;              /* an abort's or delete's callers were answered before
                              its drop reached every server (outcome.c) */
    uint64_t told_due_ns;  /* ... when, unless every server took it before */
    int redrop;            /* an object came in while the version's drop was being
                              sent: send the drop once more when it ends */
    cks_hmap_t *reported;  /* keys reported done -> index in objs + 1 (a put
                              retried on another primary may be reported twice) */
    /* per server position (NULL until the first): objects the finished
     * ranks stored on it as their primary (their seals say), and objects it
     * reported; a gone server that stored more than it reported fails the
     * version at once (cluster.c, cks_sv_cv_owed()) */
    uint64_t *stored_on, *reported_by;
    cks_hmap_t *reporters; /* be64(primary id) + key -> 1: each primary's report of an
                              object counts once in reported_by (a kept report is
                              sent again when asked) */
    /* coordinator: the ballot it coordinates with (coord.c): its outcome is
     * recorded only once a majority fenced it */
    int claimed;           /* begun or taken over with a majority of grants */
    uint32_t round;        /* the ballot is (round, this server) */
    int fence_ok;          /* a majority fenced the ballot: record the outcome */
    uint64_t owed_after_ns; /* a takeover: primaries are not asked before this */
    uint64_t report_again_ns; /* when those that still owe objects are asked
                                 again to report them (objects.c) */
    uint64_t waitlog_ns;   /* its last debug line on what it waits for (objects.c) */
    int gone_holder;       /* a takeover: the coordinator that did not answer (-1:
                              none); objects it owes after owed_after_ns are lost */
    int disowned;          /* its fence failed here: another server coordinates it
                              (or none could): seals and reports go elsewhere */
};

/* A read whose bytes may still be taken from the arena (a chunk get, until
 * its send completes): space freed while it runs is returned to the arena
 * only once every read begun before the free has ended (member.c). */
typedef struct cks_sv_read {
    struct cks_sv_read *prev, *next;
    uint64_t seq;
    uint64_t began_ns;  /* cks_sv_read_begin() */
    cks_tp_conn_h conn; /* a chunk's reply: the reader's connection (held), closed
                           when the reply has not gone out after
                           CKS_SV_READ_HOLD_NS; NULL: a flush's read */
    int closing;        /* that close was asked for */
} cks_sv_read_t;

/* A chunk read's reply that has not gone out this long (its reader cut off,
 * or gone while TCP retries) closes the reader's connection: the reply then
 * fails, and the arena space freed meanwhile, which waits for the reads in
 * flight, is returned. */
#define CKS_SV_READ_HOLD_NS (30ull * 1000000000ull)

/* Arena space freed while reads were in flight: returned after them. */
typedef struct {
    uint64_t off, len;
    uint64_t seq; /* reads up to this one may use it */
} cks_sv_deferred_t;

/* Encoding work, on the encoder threads (encoder.c). */
typedef struct cks_enc_job {
    cks_workq_job_t wq;     /* the encoders' queue link (encoder.c) */
    cks_ec_h ec;
    uint8_t *base;          /* data (stripes x k chunks) then parity (stripes x m) */
    uint64_t size;          /* object bytes at base */
    uint64_t chunk, stripes;
    unsigned k, m;
    uint64_t *crcs;         /* out: stripes x (k + m) chunk CRCs, data then parity */
    uint64_t obj_crc;       /* out: CRC of the object bytes */
    cks_status_t status;    /* out */
    uint64_t encode_ns;     /* out: thread CPU time in the encode calls */
    void *arg;              /* the put it belongs to */
} cks_enc_job_t;

typedef struct {
    cks_workq_t *wq; /* the encoder threads; NULL: not running */
    cks_tp_worker_h tp;
    /* since start, under st_lock: object bytes encoded, and the encoder
     * threads' CPU time in ISA-L's encode calls and in whole jobs (CRCs
     * included); a job is counted before it is on the done list */
    pthread_mutex_t st_lock;
    uint64_t st_bytes, st_encode_ns, st_job_ns;
} cks_enc_t;

/** Start `nthreads` encoder threads, `nice` levels below the server's other
 *  threads (cks_sv_coding_nice()). */
cks_status_t cks_enc_start(cks_enc_t *e, unsigned nthreads, unsigned nice,
                           cks_tp_worker_h tp);
/** Run every queued job, stop the threads, and return the finished jobs not
 *  taken yet (a list linked by `wq.next`, for the caller to complete). */
cks_workq_job_t *cks_enc_stop(cks_enc_t *e);
/** Queue a job. CKS_ERR_CANCELED when the encoders are not running (after
 *  cks_enc_stop()): not queued, the job stays the caller's. */
cks_status_t cks_enc_push(cks_enc_t *e, cks_enc_job_t *job);
/** Take every finished job: a list, oldest first, linked by `wq.next`
 *  (CKS_CONTAINER_OF(link, cks_enc_job_t, wq) is the job); NULL when none
 *  or not running. */
cks_workq_job_t *cks_enc_take_done(cks_enc_t *e);
/** The figures since start (all zero when the encoders are not running). */
void cks_enc_stats(cks_enc_t *e, uint64_t *bytes_p, uint64_t *encode_ns_p,
                   uint64_t *job_ns_p);

/* A server of the cluster as this server sees it (cluster.c). */
typedef struct {
    cks_tp_conn_h conn; /* NULL until first needed, and after a failure */
    uint64_t down_ns;   /* when a chunk put to it last timed out; 0: it took the last,
                           or a handshake with it succeeded since */
    uint64_t warned_ns; /* when its last "did not take chunk" warning was logged */
    uint64_t probe_ns;  /* when it was last asked for a handshake while skipped */
    uint64_t hello_ns;  /* when the handshake on conn began; 0: it ended */
    uint64_t hello_gen; /* the handshake's number (an older one's end is ignored) */
    /* is it alive? asked (REPAIR_STATUS) while it owes objects to a version
     * this server coordinates (cluster.c, cks_sv_owed_probe()) */
    uint64_t owed_probe_ns; /* when the last question was sent */
    int owed_probing;       /* a question in flight */
    unsigned gone;          /* questions in a row it did not answer, sent after
                               owed_since_ns */
    uint64_t gone_sent_ns;  /* when the first of them was sent */
    uint64_t owed_since_ns; /* when a seal last named it: only questions sent
                               after that say that it is gone */
} cks_sv_peer_t;

/* A drop a peer did not take (it was down): sent again until it does. */
typedef struct cks_sv_owed {
    struct cks_sv_owed *next;
    struct cks_server *s;
    size_t pos;            /* the peer */
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    uint32_t state;        /* as VERSION_DROP's */
    int in_flight;
} cks_sv_owed_t;


/* Work for the metadata writer thread. */
typedef enum {
    CKS_MDQ_BEGIN,    /* write rec (new, OPEN) */
    CKS_MDQ_PUT,      /* CRC the bytes, write the object record */
    CKS_MDQ_SEAL,     /* write rec (SEALED) */
    CKS_MDQ_ABORT,    /* delete objects, write rec (ABORTED) */
    CKS_MDQ_DELETE,   /* delete the version and its objects */
    CKS_MDQ_CHUNKS,   /* cluster: write chunk records */
    CKS_MDQ_MANIFEST, /* cluster: write object records (and rec, when has_rec) */
    CKS_MDQ_DROP,     /* cluster: delete chunks and objects; rec ABORTED or deleted */
} cks_mdq_type_t;

typedef struct {
    uint64_t off, len;
} cks_sv_extent_t;

typedef struct cks_mdq_job cks_mdq_job_t;

/* A job for the metadata writer. Ownership, one rule for every array:
 *  - the writer thread (mdq.c) never frees what the job's creator put in it
 *    (chunks, objs, data); it only fills `status` and `freed`;
 *  - `freed` is the writer's (it replaces or clears it on failure) and then
 *    the finishing side's;
 *  - the finishing side - `done` for cluster jobs, cks_sv_mdq_done() for
 *    standalone ones, both on the progress thread - frees `freed`, `objs`
 *    unless it keeps them (a committed manifest becomes the version's), and
 *    `chunks` when the creator allocated them for the job (a member's
 *    CHUNK_PUT); a primary lends its cput's `local` array as `chunks`, which
 *    the cput frees (cks_cput_free), never the job;
 *  - the job itself is freed by the finishing side, which also puts `conn`.
 * At shutdown, jobs pushed after cks_mdq_stop() finish as CKS_ERR_CANCELED
 * through the same path. */
/* The most versions of one job that restore leases keep from retention at
 * once (hold.c; more are left to their per-read holds). */
#define CKS_SV_HELD_MAX 16
/* A payload being received (a put's or a chunk's bytes) that has not come
 * after this, plus its length at CKS_SV_RECV_MIN_RATE, closes its
 * connection (cks_tp_worker_params_t.recv_timeout_ms). */
#define CKS_SV_RECV_TIMEOUT_MS 30000u
/* cks_server_params_t.stall_exit_s by default */
#define CKS_SV_STALL_EXIT_S 30u
#define CKS_SV_RECV_MIN_RATE   (16ull << 20)
typedef struct cks_sv_hold cks_sv_hold_t;

struct cks_mdq_job {
    cks_workq_job_t wq;     /* the writer's queue link (mdq.c) */
    cks_mdq_type_t type;
    cks_sv_version_t *v;    /* standalone jobs: the version entry (may be NULL) */
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    cks_md_version_t rec;   /* BEGIN, SEAL, ABORT, MANIFEST (has_rec), DROP (ABORTED) */
    int has_rec;
    cks_md_object_t obj;    /* PUT */
    const uint8_t *data;    /* PUT: bytes in the arena; CHUNKS received from a
                               primary: the chunk's bytes, checked against its
                               CRC before it is recorded */
    char key[CKS_KEY_MAX_LEN + 1]; /* CHUNKS: the object */
    uint32_t key_len;
    cks_md_chunk_t *chunks; /* CHUNKS (see the ownership rule above) */
    size_t nchunks;
    cks_md_object_t *objs;  /* MANIFEST, DROP (freed by the finishing side) */
    size_t nobjs;
    uint32_t retain;        /* MANIFEST with has_rec: then keep the newest `retain`
                               restorable versions of the job (0: all) */
    uint64_t held[CKS_SV_HELD_MAX]; /* with retain: versions restores hold, kept too */
    size_t nheld;
    int chunk_guard;        /* CHUNKS rebuilt by repair: record them only while
                               version `guard_version` (the manifest that needs
                               them) is PROTECTED or DEGRADED, so that a drop
                               that ran meanwhile leaves no chunk behind */
    uint64_t guard_version;
    int rec_if_restorable;  /* MANIFEST with has_rec: write rec only over a record
                               that is PROTECTED or DEGRADED now (a state that
                               repair or catch-up raised; never a version a drop
                               removed meanwhile) */
    cks_tp_conn_h conn;     /* who gets the reply (one reference) */
    uint64_t req_id;
    cks_status_t status;    /* result, set by the writer */
    cks_sv_extent_t *freed; /* ABORT, DELETE, DROP: extents to return to the arena */
    size_t nfreed;
    struct cks_server *server;
    /* cluster jobs: what to do when done (progress thread), and its context */
    void (*done)(struct cks_server *s, cks_mdq_job_t *j);
    void *ctx;
};

typedef struct {
    cks_workq_t *wq;    /* its one thread, batch mode; NULL: not started */
    cks_md_h md;
    cks_tp_worker_h tp; /* signalled when jobs are done */
} cks_mdq_t;

/* Why a version this server coordinated was aborted, for the ranks that
 * finish after the abort (cluster.c; the newest few, in memory only). */
#define CKS_SV_ABORTED_MAX 16
typedef struct {
    char job[CKS_JOB_MAX_LEN + 1]; /* "" when unused */
    uint64_t version;
    cks_status_t status;
    char why[CKS_MSG_MAX_LEN];
} cks_sv_aborted_t;

struct cks_server;

/** A request's handler: one signature for every message type, so that the
 *  dispatcher (dispatch.c) calls each through s->handlers. */
typedef void (*cks_sv_handler_t)(struct cks_server *s, cks_tp_conn_h conn,
                                 const cks_wire_hdr_t *hdr, const cks_msg_any_t *b,
                                 cks_tp_data_t *data);

/** Define `name`, a handler that does `call`: an adapter from the one
 *  signature to a function of the arguments it needs (s, conn, hdr, b and
 *  data are the handler's). */
#define CKS_SV_HANDLER(name, call)                                                     \
    static void name(struct cks_server *s, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr, \
                     const cks_msg_any_t *b, cks_tp_data_t *data)                        \
    {                                                                                    \
        call;                                                                            \
    }

struct cks_server {
    cks_server_params_t p;
    /* each request type's handler (NULL: not a request): the standalone
     * mode's (dispatch.c), with a cluster server's on top (cluster.c) */
    cks_sv_handler_t handlers[CKS_MSG_LAST];
    char name[64];
    char *arena_file, *data_dir, *listen_addr;
    cks_tp_worker_h tp;
    cks_tp_listener_h listener;
    cks_tp_mem_h arena_mem;
    cks_arena_t *arena;
    cks_md_h md;
    cks_mdq_t mdq;
    cks_hmap_t *versions; /* "job\0be64(version)" -> cks_sv_version_t */
    cks_hmap_t *bad;      /* objects whose CRC failed at start: same key + obj key */
    volatile int stop;
    int sigfd;
    uint64_t nconns;
    /* cluster mode (cluster.c); map == NULL on a standalone server */
    cks_cluster_h map;
    size_t self;          /* this server's position in the map */
    cks_sv_peer_t *peers; /* by position */
    cks_enc_t enc;
    cks_ec_h ec[CKS_EC_MAX_K + 1][CKS_EC_MAX_M + 1];
    cks_sv_aborted_t aborted[CKS_SV_ABORTED_MAX]; /* a ring */
    unsigned aborted_next;
    cks_tp_secret_t secret; /* with --secret */
    int has_secret;
    /* versions this server found OPEN at start and marked ABORTED: the drop
     * is sent to every other server once the server runs (cluster.c) */
    /* chunk reads in flight, oldest first, and space freed meanwhile */
    cks_sv_read_t *reads_head, *reads_tail;
    uint64_t read_seq;
    cks_sv_deferred_t *deferred;
    size_t ndeferred, capdeferred;
    struct cks_sv_slow_send *slow; /* test builds: sends held back by a fault */
    struct cks_chunk_in *held_chunks; /* test builds: chunks held back (chunk_hold) */
    struct cks_cput_ack *chunks_again; /* chunks a stripe needs, sent again soon (primary.c) */
    cks_sv_owed_t *owed;   /* drops peers missed, oldest first */
    size_t nowed;
    uint64_t owed_next_ns; /* next time they are sent again */
    char (*lost_jobs)[CKS_JOB_MAX_LEN + 1];
    uint64_t *lost_versions;
    size_t nlost;
    cks_tp_secret_t peer_secret; /* with --peer-secret: the servers' own */
    int has_peer_secret;
    struct cks_sv_hold *holds; /* restore leases (hold.c) */
    size_t nholds, capholds;
    struct cks_sv_flush *flush; /* flush.c: NULL until the first flush */
    struct cks_rp *rp;     /* catch-up and repair (repair.c); cluster only */
    uint64_t fg_ns;        /* when a client's data last went through this server
                              (puts, chunk puts, reads other than repair's):
                              repair's pacing (progress thread) */
    /* backpressure on STORED (cluster.c): bytes of puts this primary holds
     * and has not spread yet, and the puts whose STORED answer waits */
    uint64_t unspread;
    struct cks_cput *owed_head, *owed_tail;
    /* claims.c: grants of versions to coordinators, "job\0be64(version)" ->
     * cks_sv_claim_t (cluster only) */
    cks_hmap_t *claims;
    uint64_t claims_sweep_ns; /* next sweep of expired grants */
    /* claims.c: reports of objects of versions not yet ended that this
     * server sent as a primary, or was sent for safekeeping by their
     * coordinator ("job\0be64(version)" -> cks_sv_kept_t), for a takeover */
    cks_hmap_t *kept;
    size_t nkept;
    struct cks_sv_takeover *takeovers; /* takeovers being claimed here (takeover.c) */
    /* claims.c: versions left OPEN here without their coordinator state (a
     * restart, or a fence that found no majority): claimed again by lost.c,
     * and dropped everywhere once this server wins (every few seconds,
     * bounded) */
    struct cks_sv_relost *relost;
    struct cks_sv_fencing *fences_again; /* fences to ask again after a pause (fence.c) */
    struct cks_sv_late_release *late_releases; /* test builds: claims withdrawn late */
    struct cks_sv_parts *parts; /* puts taking their bytes in parts (parts.c) */
};

/** The nice levels the encoder and repair decoder threads run below the
 *  server's others (cks_server_params_t.coding_nice: 0 is the default,
 *  CKS_SV_CODING_NICE; UINT_MAX none). */
#define CKS_SV_CODING_NICE 5u
static inline unsigned cks_sv_coding_nice(const struct cks_server *s)
{
    unsigned n = s->p.coding_nice;
    return n == 0 ? CKS_SV_CODING_NICE : n > 19 ? 0u : n;
}

cks_status_t cks_mdq_start(cks_mdq_t *q, cks_md_h md, cks_tp_worker_h tp);
/** Finish queued jobs, then stop the thread. Jobs pushed after it are not
 *  run: they go to the finished list with status CKS_ERR_CANCELED, so that
 *  their done callbacks still run (shutdown). */
void cks_mdq_stop(cks_mdq_t *q);
/** Free the queue (after cks_mdq_stop() and the last take). */
void cks_mdq_fini(cks_mdq_t *q);
/** Queue a job (between cks_mdq_start() and cks_mdq_fini()); it always
 *  comes back through cks_mdq_take_done(). */
void cks_mdq_push(cks_mdq_t *q, cks_mdq_job_t *job);
/** Take every finished job: a list, oldest first, linked by `wq.next`
 *  (CKS_CONTAINER_OF(link, cks_mdq_job_t, wq) is the job). */
cks_workq_job_t *cks_mdq_take_done(cks_mdq_t *q);

/** Collect the arena extents of every object of a version (for freeing).
 *  Runs inside the caller's transaction. */
cks_status_t cks_sv_collect_extents(cks_md_txn_h txn, const char *job, size_t job_len,
                                    uint64_t version, cks_sv_extent_t **ext_p,
                                    size_t *n_p);

/* member.c: a manifest entry from the wire as a metadata object (its key
 * checked by the caller; a kind past the last one reads as OTHER) */
void cks_sv_object_of_entry(cks_md_object_t *o, const cks_msg_object_entry_t *e);

/* claims.c: what a server keeps by version for the coordinators' ballots */
cks_status_t cks_sv_claims_init(struct cks_server *s);
void cks_sv_claims_fini(struct cks_server *s);
/** Drop grants past their time (progress thread, now and then). */
void cks_sv_claims_expire(struct cks_server *s);
/** Keep a report (a primary's, or a coordinator's copy) for a takeover. */
void cks_sv_kept_add(struct cks_server *s, const cks_msg_object_done_t *m);
/** The version ended: its kept reports go. */
void cks_sv_kept_forget(struct cks_server *s, const char *job, size_t job_len,
                        uint64_t version);
/** 1 when a grant of the version stands here (its coordinator in *coord_p). */
int cks_sv_claim_holder(struct cks_server *s, const char *job, size_t job_len,
                        uint64_t version, uint32_t *coord_p);
/** The version committed or was dropped here: its grant is not needed. */
void cks_sv_claim_forget(struct cks_server *s, const char *job, size_t job_len,
                         uint64_t version);
/** The version's coordinator candidates (cks_place_coordinators()). */
size_t cks_sv_coord_candidates(struct cks_server *s, const char *job, size_t job_len,
                               uint64_t version, uint16_t *out);
/** 1 when this server is one of them (its place in *rank_p, may be NULL). */
int cks_sv_coord_candidate(struct cks_server *s, const char *job, size_t job_len,
                           uint64_t version, size_t *rank_p);

/* coord.c: a candidate's claims */
/** What a claimed begin continues with: status CKS_OK when a majority of the
 *  servers granted this server the version (then the begin goes on), else
 *  the refusal and its reason (to answer the client with). */
typedef void (*cks_sv_claim_done_t)(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                                    const cks_msg_version_begin_t *m, cks_status_t status,
                                    const char *why);
/** Claim (job, version) for this server from every other one; `done` runs
 *  once a majority granted it or can no longer (m's strings are copied;
 *  conn may be NULL: a claim of the server's own, no client waits). */
void cks_sv_claim_begin(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_version_begin_t *m, cks_sv_claim_done_t done);
/** A restarted coordinator's claim of a version it left OPEN, with ballot
 *  (round, self); its own record does not stand against it. Round 0 first;
 *  refused, a higher round, which the other servers judge as a takeover
 *  (granted only when the holder of their grant does not answer). */
void cks_sv_claim_lost(struct cks_server *s, const cks_msg_version_begin_t *m, uint32_t round,
                       cks_sv_claim_done_t done);

/* fence.c: the fence before an outcome is recorded */
/** What a fence continues with: CKS_OK when a majority fenced the ballot. */
typedef void (*cks_sv_fenced_t)(struct cks_server *s, cks_sv_version_t *v,
                                cks_status_t status, const char *why);
/** Ask every server to fence v's ballot (round v->round, this server). */
void cks_sv_fence(struct cks_server *s, cks_sv_version_t *v, uint32_t ttl_s,
                  cks_sv_fenced_t done);
/* A fence refused by servers that hold another server's begin claim (one
 * that cannot win: see fence.c) is asked again this often, this many rounds
 * in all: such a claim ends within a claim's timeout. */
#define CKS_SV_FENCE_PAUSE_NS (250ull * 1000000ull)
#define CKS_SV_FENCE_TRIES 12u
/** Test builds: claim withdrawals held back by fault claim_release_late,
 *  those due (all: dropped, as the server shuts down; coord.c). */
void cks_sv_late_releases(struct cks_server *s, int all);
/** Fences waiting to ask again: those due (all: every one, ended as the
 *  server shuts down). Returns nothing; from the cluster's progress. */
void cks_sv_fences_again(struct cks_server *s, int all);

/* grant.c */
/** VERSION_CLAIM from a peer. */
void cks_sv_version_claim(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                          const cks_msg_version_claim_t *m);

/* takeover.c: a version whose coordinator does not answer, taken over */
/** VERSION_SEAL on a cluster server: a seal of a version this server does
 *  not coordinate, whose grant here names a coordinator that may be taken
 *  over (a grant with the begin's parameters, no parent, this server a
 *  candidate), waits while this server claims it with a higher ballot;
 *  every other one (and those, once the claim is decided) goes on to
 *  cks_sv_cluster_end(). */
void cks_sv_cluster_seal(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                         uint32_t flags, const cks_wire_str_t *job, uint64_t version,
                         uint64_t nobjects, uint64_t digest, uint32_t rank,
                         const cks_wire_str_t *primaries);
void cks_sv_takeovers_fini(struct cks_server *s);

/* seal.c */
/* Seal, abort or delete on the coordinator of a cluster version; `flags`
 * the request's header flags (CKS_WIRE_F_RESENT). */
void cks_sv_cluster_end(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                        unsigned type, uint32_t flags, const cks_wire_str_t *job,
                        uint64_t version,
                        uint64_t nobjects, uint64_t digest, uint32_t rank,
                        const cks_wire_str_t *primaries);

/* hold.c: restore leases */
void cks_sv_version_hold(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                         const cks_msg_version_hold_t *m);
/** The versions of `job` that leases hold now (at most `max`, each once). */
size_t cks_sv_held(struct cks_server *s, const char *job, size_t job_len, uint64_t *out,
                   size_t max);
void cks_sv_holds_fini(struct cks_server *s);

/* vtable.c: a metadata writer job for (job, version), zeroed */
cks_mdq_job_t *cks_sv_mdq_job(struct cks_server *s, cks_mdq_type_t type, const char *job,
                              size_t job_len, uint64_t version);
/* vtable.c: v's record queued for the metadata writer (a
 * seal or an abort written into it), answered to (conn, req_id) when it is
 * recorded; CKS_ERR_NO_MEMORY, answered at once, when the job cannot be had. */
cks_status_t cks_sv_version_queue(struct cks_server *s, cks_sv_version_t *v,
                                  cks_mdq_type_t type, cks_tp_conn_h conn, uint64_t req_id);
void cks_sv_reply_status(cks_tp_conn_h conn, uint64_t req_id, cks_status_t status,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void cks_sv_reply(cks_tp_conn_h conn, unsigned type, uint64_t req_id, void *body);
cks_sv_version_t *cks_sv_version_find(struct cks_server *s, const cks_wire_str_t *job,
                                      uint64_t version);
cks_sv_version_t *cks_sv_version_new(struct cks_server *s, const cks_wire_str_t *job,
                                     uint64_t version);
/* A new entry open for puts here (open, its key set made); NULL when out of
 * memory. */
cks_sv_version_t *cks_sv_version_new_open(struct cks_server *s, const cks_wire_str_t *job,
                                          uint64_t version);
void cks_sv_version_release(struct cks_server *s, cks_sv_version_t *v);
cks_status_t cks_sv_version_lookup(struct cks_server *s, const cks_wire_str_t *job,
                                   uint64_t version, cks_md_version_t *rec_p);
cks_status_t cks_sv_check_names(const cks_wire_str_t *job, const cks_wire_str_t *key);
/* A put's or begin's member timeout out of range is answered INVALID_PARAM
 * (returns 1); 0 (the default) or one in range passes (returns 0). */
int cks_sv_member_ms_refused(cks_tp_conn_h conn, uint64_t req_id, uint32_t ms);
/* A request's names checked (cks_sv_check_names), then a read transaction
 * begun in *txn_p (the caller aborts it) when they pass. */
cks_status_t cks_sv_names_txn(struct cks_server *s, const cks_wire_str_t *job,
                              const cks_wire_str_t *key, cks_md_txn_h *txn_p);
/* The OPEN record of a version begun (or taken over) with the begin's
 * parameters, created now (handlers.c). */
void cks_sv_rec_open(cks_md_version_t *rec, const cks_msg_version_begin_t *m);

/* (job, version)'s record when it can be read from: CKS_ERR_NO_SUCH_JOB,
 * _NO_SUCH_VERSION or _NOT_RESTORABLE otherwise (vtable.c) */
cks_status_t cks_sv_readable(cks_md_txn_h txn, const cks_wire_str_t *job, uint64_t version,
                             cks_md_version_t *rec_p);

/* query.c: answers to stats and lists (progress thread) */
void cks_sv_version_stat(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                         const cks_msg_version_stat_t *m);
void cks_sv_object_stat(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_object_stat_t *m);
void cks_sv_list(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id, unsigned type,
                 const cks_msg_any_t *body);
/* As a version is listed (VERSION_LIST and SYNC_LIST pages). */
void cks_sv_entry_from_rec(cks_msg_version_entry_t *e, const cks_md_version_t *rec);
/* As an object is listed (OBJECT_LIST, manifest pages); e->key points into o. */
void cks_sv_entry_from_obj(cks_msg_object_entry_t *e, const cks_md_object_t *o);

/* recover.c: check every record against the arena at start, abort versions
 * a crash left OPEN */
cks_status_t cks_sv_recover(struct cks_server *s);

/* cluster.c */
cks_status_t cks_sv_cluster_init(struct cks_server *s);
/** Shutdown, after the transport is quiesced: stop the encoders and finish
 *  (fail) what they encoded. */
void cks_sv_cluster_quiesce(struct cks_server *s);
void cks_sv_cluster_fini(struct cks_server *s);
/** Return arena space of recorded chunks or objects (a drop, retention):
 *  at once when no read is in flight, else once every read begun before
 *  this call has ended, so that no read sends bytes of space reused. */
void cks_sv_free_after_reads(struct cks_server *s, uint64_t off, uint64_t len);
/** A read of arena space begins / ends (progress thread): space freed in
 *  between is returned to the arena only after it ends. */
void cks_sv_read_begin(struct cks_server *s, cks_sv_read_t *r);
void cks_sv_read_end(struct cks_server *s, cks_sv_read_t *r);
/** Close the connections of chunk reads held past CKS_SV_READ_HOLD_NS;
 *  returns ms until the next is due, or -1 (member.c). */
int cks_sv_reads_expire(struct cks_server *s);

/* flush_policy.c: the durable tier on the progress thread */
/** FLUSH_CHUNKS or FLUSH_PUBLISH (progress thread): validated and queued to
 *  the flush thread; answered when it is done. */
void cks_sv_flush_request(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                          unsigned type, const cks_msg_flush_t *m);
/** A version this server coordinates committed: flush it when the policy
 *  says so (--flush-every N: versions whose number is a multiple of N;
 *  --flush-age S: when the newest flushed version of its job is older than
 *  S s, which the flush thread reads from --flush-dir), every server
 *  writing its chunks, this one publishing. */
void cks_sv_flush_committed(struct cks_server *s, const char *job, size_t job_len,
                            uint64_t version);
/** Answer the flushes the flush thread finished, and start the flushes its
 *  scan found due (progress thread); with a policy or retention, start the
 *  flush thread at the first call. */
void cks_sv_flush_progress(struct cks_server *s);
/** Shutdown: stop the flush thread (a flush under way fails), answer. */
void cks_sv_flush_stop(struct cks_server *s);

/* the cluster's roles: peer.c, outcome.c, cluster.c, primary.c, member.c,
 * objects.c */
/** The connection to the server at map position pos (peer.c). */
cks_tp_conn_h cks_sv_peer(struct cks_server *s, size_t pos);
/** A version of `job` is begun again on its coordinator: drops still owed
 *  for an earlier version of that number must not reach it (outcome.c). */
void cks_sv_owed_forget(struct cks_server *s, const char *job, size_t job_len,
                        uint64_t version);
/* Encoder completions, call timeouts, seal deadlines; returns the poll timeout. */
int cks_sv_cluster_progress(struct cks_server *s);
/* A connection failed: 1 when it was one of our peer connections. */
int cks_sv_cluster_conn_err(struct cks_server *s, cks_tp_conn_h conn);
/* A put to its primary; parts: its bytes come in PUT_PARTs (parts.c), not
 * with it */
void cks_sv_cluster_put(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id, int parts,
                        const cks_msg_put_t *m, cks_tp_data_t *data);
void cks_sv_chunk_put(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                      const cks_msg_chunk_put_t *m, cks_tp_data_t *data);
void cks_sv_chunk_get(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                      const cks_msg_chunk_get_t *m, const cks_tp_data_t *dest);
void cks_sv_object_done(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_object_done_t *m);
void cks_sv_object_delete(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                          const cks_msg_object_stat_t *m);
void cks_sv_version_commit(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                           const cks_msg_version_commit_t *m, cks_tp_data_t *data);
void cks_sv_version_drop(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                         const cks_msg_version_drop_t *m);

/* cluster.c, for repair.c */
/** The connection to the server at position `pos`, made on first use; NULL
 *  when it cannot be made now. */
cks_tp_conn_h cks_sv_peer_conn(struct cks_server *s, size_t pos);
/** Did the server at `pos` fail a chunk put a moment ago? */
int cks_sv_peer_down(struct cks_server *s, size_t pos);
/** The coder of RS(k, m), made on first use; NULL when out of memory. */
cks_ec_h cks_sv_ec_get(struct cks_server *s, unsigned k, unsigned m);

/* dispatch.c: the transport's message callback (gates, then s->handlers) */
void cks_sv_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                   const cks_msg_any_t *b, cks_tp_data_t *data);
/** Fill s->handlers for a standalone server (at start; again when the
 *  cluster state is freed). */
void cks_sv_handlers_standalone(struct cks_server *s);
/** cluster.c: a cluster server's handlers, on top of the standalone ones. */
void cks_sv_handlers_cluster(struct cks_server *s);
/* dispatch.c, for repair.c: handle a request again (one that was held back
 * while this server caught up); `b`'s strings must stay valid during it. */
void cks_sv_redispatch(struct cks_server *s, cks_tp_conn_h conn, unsigned type,
                       uint64_t req_id, const cks_msg_any_t *b);

/* heal.c: the catch-up and repair state (repair.c, catchup.c, promote.c) */
typedef struct cks_rp cks_rp_t;
cks_status_t cks_rp_init(struct cks_server *s);
void cks_rp_fini(struct cks_server *s);
/** Timers: rounds of catch-up, scans, paced repair, the coordinator's
 *  checks. Returns the poll timeout it needs (ms), -1: none. */
int cks_rp_progress(struct cks_server *s);
/** Until this server has caught up, lists, stats and `latest` are answered
 *  CKS_ERR_BUSY, and begins, seals, aborts and deletes (which need the
 *  versions it coordinates) are held and handled once it has: returns 1
 *  when it took the request so. */
int cks_rp_gate(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id, unsigned type,
                const cks_msg_any_t *b);
void cks_rp_sync_list(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                      const cks_msg_sync_list_t *m);
void cks_rp_repair_check(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                         const cks_msg_version_ref_t *m);
void cks_rp_repair_status(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id);
/** promote.c: a member has nothing left to rebuild: check the DEGRADED
 *  versions this server coordinates now. */
void cks_rp_repair_done(struct cks_server *s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_version_ref_t *m);
/** member.c: a chunk that another member rebuilt for this one was recorded
 *  here: this server's own task for it (parked, waiting for it) ends. */
void cks_rp_taken(struct cks_server *s, const char *job, size_t job_len, uint64_t version,
                  const char *key, size_t key_len, const cks_md_chunk_t *ch);

/* ---- between server.c and handlers.c ---- */

void cks_sv_version_free(cks_server_h s, cks_sv_version_t *v);
/* At teardown: every entry of the table freed, its waiters' connections put
 * (the table itself stays for the caller to destroy). */
void cks_sv_versions_free(struct cks_server *s);

int cks_sv_restorable(cks_vstate_t st);

void cks_sv_version_kick(cks_server_h s, cks_sv_version_t *v);

void cks_sv_version_defer(cks_server_h s, cks_sv_version_t *v, cks_sv_wait_t wait,
                                 cks_tp_conn_h conn, uint64_t req_id);

size_t cks_sv_drain_done(cks_server_h s);

void cks_sv_auth_refuse(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                               const char *why);

void cks_sv_auth(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                        const cks_msg_auth_t *m);

void cks_sv_hello(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                         const cks_msg_hello_t *m);

void cks_sv_stats(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id);

void cks_sv_version_begin(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                                 const cks_msg_version_begin_t *m);

void cks_sv_put(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id, uint32_t flags,
                       const cks_msg_put_t *m, cks_tp_data_t *data);

/* ---- puts whose bytes come in parts (parts.c) ---- */
typedef struct cks_sv_parts cks_sv_parts_t;

/** Take the put of (job, version, key) on `conn` in parts (a PUT with
 *  CKS_WIRE_F_PARTS): its `total` bytes go to dst as PUT_PARTs bring them;
 *  `done` runs once, with CKS_OK when all are in, or the first error (the
 *  caller then frees what it took for the put). */
cks_status_t cks_sv_parts_open(cks_server_h s, cks_tp_conn_h conn, const cks_wire_str_t *job,
                               uint64_t version, const cks_wire_str_t *key, uint8_t *dst,
                               uint64_t total, void (*done)(void *arg, cks_status_t status),
                               void *arg);
/** PUT_PART: a part's bytes, or the sender's cancel. */
void cks_sv_put_part(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                     const cks_msg_put_part_t *m, cks_tp_data_t *data);
/** Fail the puts no part came for within the receive timeout, or whose
 *  connection failed (the server's loop); ms until it should run again
 *  (-1: nothing open). */
int cks_sv_parts_sweep(cks_server_h s);
/** At the stop: every open put fails (CKS_ERR_SHUTTING_DOWN), before the
 *  connections close. */
void cks_sv_parts_stop(cks_server_h s);

void cks_sv_version_end(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                               unsigned type, const cks_msg_version_ref_t *m);

void cks_sv_get(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                       const cks_msg_get_t *m, const cks_tp_data_t *dest, int checked);

/* Owe server `pos` the drop of (job, version) in `state`: sent again until it
 * takes it, in memory only (outcome.c). */
void cks_sv_owe(cks_server_h s, size_t pos, const char *job, size_t job_len,
                uint64_t version, uint32_t state);

#endif
