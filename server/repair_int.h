/*
 * repair.c, catchup.c and promote.c: catch-up and repair state, shared.
 */
#ifndef CKS_REPAIR_INT_H
#define CKS_REPAIR_INT_H

#include "server_int.h"

#define CKS_RP_CALL_MS        5000
#define CKS_RP_FETCH_MS       10000
#define CKS_RP_ROUND_EVERY_NS (10ull * 1000000000ull)
#define CKS_RP_RETRY_NS       (1ull * 1000000000ull)
/* the next round, when a server did not answer this one: one cut off by a
 * partition, or restarting, is caught up soon after it is back */
#define CKS_RP_ROUND_SOON_NS  (3ull * 1000000000ull)
/* A first round that a server answered while still catching up itself (it
 * restarted too) is run again, for at most this long after start: what it
 * holds may not be the truth yet (its drops in particular). */
#define CKS_RP_FIRST_WAIT_NS  (3ull * 1000000000ull)
/* How a server answered this round (rp->answered[]): not, caught up,
 * catching up, or not caught up but waiting itself only on servers that
 * have not caught up either (two restarted together wait on each other:
 * waiting longer tells neither more) */
#define CKS_RP_ANS_NONE       0
#define CKS_RP_ANS_SYNCED     1
#define CKS_RP_ANS_CATCHING   2
#define CKS_RP_ANS_WAITING    3
#define CKS_RP_AGAIN_NS       (200ull * 1000000ull)
/* A version held here and listed by no server that answered a round is
 * dropped only when it was committed this long before the round began:
 * lists are taken one server after another, over seconds when one does not
 * answer, and a version committed meanwhile is in none of those taken
 * before it (the margin covers the servers' clocks: sealed_ns is the
 * coordinator's). The next round drops a version deleted while away. */
#define CKS_RP_SETTLED_NS     (2ull * 1000000000ull)
/* test builds, fault catchup_hold: a round waits this long between its
 * lists and its comparison */
#define CKS_RP_HOLD_NS        (4ull * 1000000000ull)
/* test builds, fault repair_wait_fg: repair starts no task until a client's
 * data went through this server, or this long after its start */
#define CKS_RP_HOLD_FG_NS     (10ull * 1000000000ull)
#define CKS_RP_SCAN_EVERY_NS  (60ull * 1000000000ull)
#define CKS_RP_RESCAN_NS      (5ull * 1000000000ull) /* after tasks failed */
#define CKS_RP_CHECK_EVERY_NS (2ull * 1000000000ull)
#define CKS_RP_CHECK_RARE_NS  (60ull * 1000000000ull) /* fault repair_check_rare */
#define CKS_RP_TASKS_MAX      65536u
#define CKS_RP_INFLIGHT       4u
/* A task whose stripe lacks chunks on other members that answer, and whose
 * draw (cks_rp_decoder()) names another of them, waits this long for that
 * member to rebuild them all (it decodes every chunk of the stripe that it
 * learned missing, and sends them), at most CKS_RP_PARKS_MAX times; then it
 * rebuilds its own. */
#define CKS_RP_PARK_NS        (3ull * 1000000000ull)
#define CKS_RP_PARKS_MAX      3u
/* Fetch buffers kept for the next task while repair runs (a chunk each),
 * returned when it has nothing left to do. */
#define CKS_RP_POOL_MAX       (CKS_RP_INFLIGHT * CKS_PLACE_WIDTH_MAX)
#define CKS_RP_REG_BYTES      (32ull << 20) /* the fetch region (repair_bufs.c) */
#define CKS_RP_REG_SLOTS      64u           /* at most, of chunk size each */
#define CKS_RP_NOBODY         UINT32_MAX    /* a slot no server wrote yet */
#define CKS_RP_CHECKS_MAX     16u
#define CKS_RP_RATE_DEFAULT   (256ull << 20)
/* No client data through this server for this long: repair runs at its idle
 * pace (--repair-idle-rate, no cap by default) instead of --repair-rate. */
#define CKS_RP_IDLE_NS        (500ull * 1000000ull)
/* The state of a drop record (a deleted version) in SYNC_LIST version pages,
 * between servers only (servers before drop records skip states above
 * ABORTED); created_ns names the incarnation that was deleted. */
#define CKS_RP_STATE_DROPPED  0x100u


/* What the servers answering a round hold of one version. */
typedef struct {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    cks_msg_version_entry_t best; /* the best restorable state seen, or any */
    size_t best_pos;
    int best_restorable;
    unsigned nrestorable;         /* answering servers that hold it restorable */
    int dropped;                  /* a server answering recorded its delete: */
    uint64_t drop_created;        /* of the incarnation created then */
} cks_rp_seen_t;

typedef enum {
    CKS_RP_ACT_FETCH = 0, /* manifest and record from a peer */
    CKS_RP_ACT_RECORD,    /* the record alone (a better state) */
    CKS_RP_ACT_DROP,      /* deleted while this server was away */
} cks_rp_act_type_t;

typedef struct {
    cks_rp_act_type_t type;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    cks_md_version_t rec;
    size_t pos;
} cks_rp_act_t;

/* A chunk placed here that this server does not hold. */
typedef struct {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    char key[CKS_KEY_MAX_LEN + 1];
    uint32_t key_len;
    uint64_t version; /* whose chunks: the object's source version */
    uint64_t mversion; /* the manifest that needs it */
    uint64_t stripe;
    uint32_t idx;
    unsigned k, m;
    uint64_t chunk;
    unsigned parks;   /* times it waited for another member to rebuild its stripe */
} cks_rp_task_t;

typedef struct cks_rp_fetch cks_rp_fetch_t;
typedef struct cks_rp_work cks_rp_work_t;

/* One member's chunk of a task's stripe: its probe, its read, or the
 * rebuilt chunk sent to it. */
struct cks_rp_fetch {
    cks_rp_work_t *w;
    unsigned idx;      /* the chunk of the stripe */
    uint8_t *buf;
    uint64_t crc;
    unsigned pending;  /* the call, and a receipt it started */
    cks_status_t status;
    int into;          /* read: its member writes it into buf (repair_bufs.c) */
    int checked;       /* ... and checked its CRC as it wrote it */
    const uint8_t *desc; /* buf's RMA descriptor, sent with the read (its slot's) */
    size_t desc_len;
};

/* A task being done: the probes of the other members, then its reads, the
 * decode, the rebuilt chunks of other members sent to them, and the record.
 * Or parked: another member rebuilds the stripe. */
struct cks_rp_work {
    cks_workq_job_t wq; /* the decoders' queue link (repair.c) */
    cks_server_h s;
    cks_rp_task_t t;
    uint16_t group[CKS_PLACE_WIDTH_MAX];
    unsigned probing;  /* probes in flight */
    uint32_t lost;     /* members that answered that they lack their chunk (bits) */
    uint32_t holds;    /* members that answered that they hold theirs: those read */
    uint32_t outs;     /* chunks rebuilt here for those members (bits) */
    unsigned pushing;  /* those sent, not yet answered */
    uint64_t ocrc[CKS_PLACE_WIDTH_MAX]; /* the CRCs of the chunks rebuilt */
    double cost;       /* the pacing tokens it took */
    uint64_t park_ns;  /* parked: until then */
    cks_rp_work_t *prev, *next; /* the parked list */
    unsigned ask;      /* next member of the group to read */
    unsigned reading;  /* reads in flight */
    unsigned have;     /* chunks read, not yet found bad by their CRC */
    cks_rp_fetch_t f[CKS_PLACE_WIDTH_MAX];
    uint64_t off;      /* the rebuilt chunk's arena space */
    /* the decode, on a decoder thread: its inputs, set before the push, and
     * what it found (read by the progress thread once the job is back) */
    cks_ec_h ec;
    uint8_t *chunks[CKS_PLACE_WIDTH_MAX]; /* the k inputs, and the outputs */
    uint8_t present[CKS_PLACE_WIDTH_MAX];
    cks_status_t dstatus;
    unsigned bad;      /* CKS_ERR_CRC_MISMATCH: the chunk that failed its CRC */
};

/* A coordinator's question to every server about one DEGRADED version. */
typedef struct {
    cks_server_h s;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    cks_md_version_t rec;
    unsigned waiting;
    unsigned clean; /* servers that answered that they hold every chunk */
    unsigned total;
} cks_rp_check_t;

/* A request held until this server has caught up (its strings copied). */
typedef struct cks_rp_held {
    struct cks_rp_held *next;
    cks_tp_conn_h conn; /* one reference */
    unsigned type;
    uint64_t req_id;
    cks_msg_any_t b;
    char job[CKS_JOB_MAX_LEN + 1];
    char key[CKS_KEY_MAX_LEN + 1];
    uint8_t *primaries; /* a seal's, copied (NULL: none) */
} cks_rp_held_t;

#define CKS_RP_HELD_MAX 1024u

struct cks_rp {
    cks_server_h s;
    cks_rp_held_t *held, **held_tail; /* oldest first */
    unsigned nheld;
    int synced;            /* a round of catch-up ended since start */
    int waiting;           /* not synced: its last round ran again only for servers that
                              had not caught up (SYNC_REPLY's synced 2) */
    uint64_t start_ns;
    /* the round */
    int round;             /* a round is running */
    uint64_t next_round_ns;
    uint64_t round_real_ns; /* when it began (CLOCK_REALTIME) */
    uint64_t hold_until_ns; /* fault catchup_hold: compare from then on */
    int round_held;         /* ... and this round was held */
    size_t peer;           /* the server being listed */
    int phase;             /* 0: its jobs, 1: versions of jobs[jobi] */
    char (*jobs)[CKS_JOB_MAX_LEN + 1];
    size_t njobs, capjobs, jobi;
    uint64_t after;
    int has_after;
    uint8_t *answered;     /* per position: 1 caught up, 2 catching up */
    cks_hmap_t *seen;      /* "job\0be64(version)" -> cks_rp_seen_t */
    cks_rp_act_t *acts;
    size_t nacts, capacts, acti;
    char after_key[CKS_KEY_MAX_LEN + 1];
    uint32_t after_key_len;
    unsigned mdq_pending;  /* jobs of this round not yet done */
    unsigned learned, dropped;
    /* repair */
    cks_rp_task_t *tasks;
    size_t ntasks, taski;
    cks_hmap_t *queued;    /* chunks in tasks: not queued twice */
    int scan_wanted;
    uint64_t next_scan_ns;
    unsigned inflight;
    cks_workq_t *wq;        /* the decoder threads (CRC checks, decode, CRC) */
    uint8_t *pool[CKS_RP_POOL_MAX]; /* fetch buffers of pool_chunk bytes */
    size_t npool;
    uint64_t pool_chunk;
    /* repair_bufs.c: the fetch region, members on this host write into */
    cks_tp_mem_h reg_mem;   /* NULL: none yet (or none to be had: reg_none) */
    int reg_none;
    uint8_t *reg_base;
    uint64_t reg_chunk;     /* its slots' size */
    unsigned reg_slots;     /* at most CKS_RP_REG_SLOTS */
    uint8_t (*reg_desc)[CKS_TP_RMA_DESC_MAX]; /* each slot's RMA descriptor */
    size_t reg_desc_len[CKS_RP_REG_SLOTS];
    uint64_t reg_used;      /* bit per slot taken (or retired) */
    uint32_t reg_writer[CKS_RP_REG_SLOTS]; /* who wrote each slot last (a server's
                                              position), CKS_RP_NOBODY: none yet */
    uint64_t reg_retired;   /* slots retired (repair_bufs.c) */
    uint64_t reg_new_writer; /* slots handed to another server than their last writer */
    uint64_t reads_into;    /* chunk reads its members wrote into it */
    uint64_t reads_payload; /* the others: payloads */
    uint64_t rate_cap;      /* while clients move data (--repair-rate; UINT64_MAX: none) */
    uint64_t idle_cap;      /* while they do not (--repair-idle-rate; UINT64_MAX: none) */
    double tokens;
    uint64_t tokens_ns;
    uint64_t chunks_done, bytes_done, failed;
    uint64_t chunks_sent;   /* of chunks_done: rebuilt for another member */
    uint64_t decodes;       /* decodes that succeeded here (one per stripe) */
    uint64_t decoded;       /* the chunks they rebuilt (here, and for members) */
    cks_rp_work_t *parked, *parked_tail; /* oldest first */
    uint64_t taken, taken_told; /* tasks taken off the list; at the last REPAIR_DONE */
    uint64_t failed_at_scan; /* `failed` when the last scan ran */
    uint64_t win_ns, win_bytes, rate;
    uint64_t warned_ns;
    /* coordinator checks */
    uint64_t next_check_ns;
    unsigned checks;
    cks_hmap_t *checking;
};


/* A version to repair or check, and the list of them. */
typedef struct {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    cks_md_version_t rec;
} cks_rp_ver_t;

typedef struct {
    cks_rp_ver_t *v;
    size_t n, cap;
    int degraded_coord_only; /* the coordinator's checks: DEGRADED versions it coordinates */
    cks_server_h s;
} cks_rp_vers_t;

/* A chunk placed here that is missing (cks_rp_walk()). */
typedef void (*cks_rp_missing_cb_t)(const cks_rp_task_t *t, void *arg);

/* repair_bufs.c: a chunk-sized fetch buffer (a slot of the fetch region
 * when one is free - preferably one that `who`, the server position that
 * will write it, wrote before -, else malloc(); NULL without memory),
 * whether a buffer is
 * a slot, and its return; the pool's malloc() buffers freed (repair idle),
 * and everything at the stop, before the transport's worker goes. */
uint8_t *cks_rp_buf_get(cks_rp_t *rp, uint64_t chunk, uint32_t who);
int cks_rp_buf_shared(const cks_rp_t *rp, const uint8_t *buf);
void cks_rp_buf_put(cks_rp_t *rp, uint8_t *buf, uint64_t chunk);
void cks_rp_bufs_free(cks_rp_t *rp);
/* A fetch buffer whose read ended without its member's answer: a slot is
 * never handed out again; a malloc() one goes back as by cks_rp_buf_put(). */
void cks_rp_buf_retire(cks_rp_t *rp, uint8_t *buf, uint64_t chunk);
/* Will f's member (on conn) write its chunk into f->buf? 1 when f->buf is a
 * slot and the member is on this host: f->desc and f->desc_len then name
 * the slot's descriptor (the region's, described once). */
int cks_rp_fetch_into(cks_server_h s, cks_tp_conn_h conn, cks_rp_fetch_t *f);

/* repair_scan.c: the key of a task's chunk in rp->queued (buf: at least
 * CKS_JOB_MAX_LEN + CKS_KEY_MAX_LEN + 32 bytes); its length. */
size_t cks_rp_ckey(uint8_t *buf, const cks_rp_task_t *t);

/* Records of catch-up and repair go to the metadata writer through this. */
void cks_rp_mdq_push(cks_server_h s, cks_mdq_job_t *j);

/* ---- between repair.c, catchup.c (the catch-up round, SYNC_LIST) and
 * promote.c (DEGRADED to PROTECTED) ---- */

int cks_rp_restorable(uint32_t state);

int cks_rp_better(uint32_t a_state, uint64_t a_missing, uint32_t b_state,
                         uint64_t b_missing);

void cks_rp_rec_from_entry(cks_md_version_t *r, const cks_msg_version_entry_t *e);

cks_status_t cks_rp_walk(cks_server_h s, cks_md_txn_h txn, const char *job,
                                size_t job_len, const cks_md_version_t *rec,
                                cks_rp_missing_cb_t cb, void *arg, uint64_t *n_p);

/* Does this server hold the task's chunk by now (sent by another member
 * that rebuilt the stripe)? */
int cks_rp_chunk_held(cks_server_h s, const cks_rp_task_t *t);

cks_status_t cks_rp_vers_add(const char *job, size_t job_len, const cks_md_version_t *v,
                                    void *arg);

void cks_rp_round_reset(cks_rp_t *rp);

void cks_rp_round_begin(cks_server_h s);

void cks_rp_round_step(cks_server_h s);

void cks_rp_release_held(cks_server_h s, int cancel);

void cks_rp_check_versions(cks_server_h s);
/* repair.c: a scan of every restorable version for chunks this server
 * lacks, and the tasks started that the pacing allows (heal.c's tick) */
void cks_rp_scan(cks_server_h s);
void cks_rp_work_start(cks_server_h s);
/* repair.c: the decoder threads started (their count: --encoders) and
 * stopped; the decodes they finished, taken on the progress thread; the
 * fetch buffers kept, returned (repair idle, or the state's end) */
cks_status_t cks_rp_decoders_start(cks_server_h s, unsigned nthreads);
void cks_rp_decoders_stop(cks_server_h s);
void cks_rp_decoded(cks_server_h s);
void cks_rp_pool_drain(cks_rp_t *rp);
/* repair.c: parked tasks whose wait is over probe again (heal.c's tick);
 * returns the ms until the next one is due, -1: none. At the state's end,
 * the parked tasks are dropped. */
int cks_rp_parked_wake(cks_server_h s);
void cks_rp_parked_drop(cks_rp_t *rp);
/* promote.c: repair has nothing left here (tasks were taken since the last
 * time): every other server is told (REPAIR_DONE) and this one, so that
 * coordinators check their DEGRADED versions now, not at their next tick */
void cks_rp_tell_done(cks_server_h s);
/* promote.c: ns between a coordinator's checks of its DEGRADED versions */
uint64_t cks_rp_check_every(void);

#endif
