/*
 * transport: everything that crosses the wire.
 *
 *  1. The wire codec: a fixed 24-byte header and a msgpack body, described by
 *     one message table (CKS_MSG_LIST). The decoder is the only code that
 *     touches untrusted bytes: it checks the header, bounds every length and
 *     count, checks every field's type, and rejects unknown types and
 *     protocol versions with a status and a message.
 *  2. UCX: a worker (context + worker + active-message handler), listeners,
 *     connections (endpoints), message sends with zero-copy payloads, and
 *     receipt of rendezvous payloads straight into the caller's memory.
 *
 * Threads: a cks_tp_worker_h and everything made from it belong to the one
 * thread that progresses it, except cks_tp_worker_signal(), which any thread
 * may call. Callbacks run on that thread, from inside cks_tp_worker_progress().
 */
#ifndef CKS_TP_H
#define CKS_TP_H

#include "cks_common.h"

#include <stddef.h>
#include <stdint.h>

/* ======================================================================
 * Wire codec
 * ====================================================================== */

#define CKS_WIRE_MAGIC       0x434b5331u /* "CKS1" */
#define CKS_WIRE_PROTO       1u
#define CKS_WIRE_HDR_LEN     24u
#define CKS_WIRE_MAX_BODY    4096u /* msgpack body carried in the AM header */
#define CKS_WIRE_MAX_ENTRIES 256u  /* entries in one page of a list reply */
#define CKS_WIRE_MAX_PAGE    (CKS_WIRE_MAX_ENTRIES * (CKS_KEY_MAX_LEN + 128u))
#define CKS_WIRE_MAX_NAME    64u   /* client/server names in HELLO */
#define CKS_WIRE_MAX_ADDR    2048u /* UCX worker address in HELLO */
#define CKS_WIRE_NONCE_LEN   32u   /* challenge nonces and HMAC-SHA256 proofs */
/* A version's member timeout (PUT, VERSION_BEGIN): 0 means the server's
 * default (the servers' CKS_WIRE_MEMBER_MS_DEFAULT); anything else must lie
 * in this range */
#define CKS_WIRE_MEMBER_MS_MIN     100u
#define CKS_WIRE_MEMBER_MS_MAX     600000u
#define CKS_WIRE_MEMBER_MS_DEFAULT 10000u

/** Header flags. */
#define CKS_WIRE_F_PAYLOAD 0x1u /* raw payload bytes follow as AM data */
#define CKS_WIRE_F_PAGE    0x2u /* a msgpack page of entries follows as AM data */
#define CKS_WIRE_F_RMA     0x4u /* request: the AM data is an RMA descriptor (the
                                   payload stays in the sender's memory, or the
                                   reply's payload goes there); reply: the
                                   payload was written there */
#define CKS_WIRE_F_CHECKED 0x8u /* GET request for one range of a whole-object
                                   read: the reader checks the object's CRC
                                   over all its ranges, in order, so the
                                   server sends the range without checking
                                   the whole object first (standalone) */
#define CKS_WIRE_F_BACKGROUND 0x10u /* request: a server's own background work
                                   (repair's chunk reads): the server that
                                   serves it does not count it as clients'
                                   traffic when it paces its own repair */
#define CKS_WIRE_F_RESENT 0x20u /* request: a VERSION_SEAL sent again to the
                                   version's coordinator after the first went
                                   unanswered (the client's request timeout)
                                   while the other candidates said that the
                                   coordinator answers them: a rank already
                                   sealed there waits with the others again,
                                   and a version that committed answers OK
                                   (its commit had every rank's seal) */
#define CKS_WIRE_F_PARTS 0x40u /* PUT request (to a standalone server or a
                                   primary): no bytes come
                                   with it; they come in PUT_PART requests that
                                   follow on the same connection, in order, and
                                   the PUT is answered once all `size` bytes are
                                   in (or the put failed) */
/** Every flag a header may carry. */
#define CKS_WIRE_F_KNOWN                                                                  \
    (CKS_WIRE_F_PAYLOAD | CKS_WIRE_F_PAGE | CKS_WIRE_F_RMA | CKS_WIRE_F_CHECKED |           \
     CKS_WIRE_F_BACKGROUND | CKS_WIRE_F_RESENT | CKS_WIRE_F_PARTS)

/** Fixed header; on the wire big-endian: magic u32, proto u16, type u16,
 *  flags u32, body_len u32, req_id u64. */
typedef struct {
    uint16_t type;
    uint32_t flags;
    uint32_t body_len;
    uint64_t req_id;
} cks_wire_hdr_t;

/** A string field: points into the decoded buffer (not NUL-terminated),
 *  valid as long as that buffer. When packing, points to the sender's bytes. */
typedef struct {
    const char *ptr;
    uint32_t len;
} cks_wire_str_t;

/* ---- message bodies ---------------------------------------------------- */

/* Every reply starts with these two fields. */
#define CKS_MSG_REPLY_FIELDS \
    int32_t status; \
    cks_wire_str_t msg

typedef struct {
    CKS_MSG_REPLY_FIELDS;
} cks_msg_status_t;

typedef struct {
    cks_wire_str_t name;  /* client's name, for logs */
    cks_wire_str_t addr;  /* client's UCX worker address (binary); empty when
                             authenticating: it goes in AUTH */
    cks_wire_str_t nonce; /* client's challenge (with a cluster secret) */
    cks_wire_str_t job;   /* with a job's own secret: that job (AUTH proves
                             its secret, and the connection serves that job
                             only); empty: the cluster secret */
} cks_msg_hello_t;

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    cks_wire_str_t name;  /* server's name */
    cks_wire_str_t addr;  /* server's UCX worker address; empty when the
                             server requires authentication (AUTH_REPLY has it) */
    cks_wire_str_t nonce; /* server's challenge (when it requires a secret) */
    uint64_t arena_size;
    uint64_t arena_used;
    uint64_t enc_bytes;   /* object bytes the encoder threads protected since start */
    uint64_t enc_ns;      /* their CPU time in ISA-L encode calls */
    uint64_t enc_job_ns;  /* their CPU time in whole jobs (CRCs, padding) */
} cks_msg_hello_reply_t;

typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    uint64_t parent; /* UINT64_MAX: none */
    uint32_t nranks;
    uint32_t k, m;       /* Reed-Solomon geometry; 0, 0 on a standalone server */
    uint64_t chunk_size;
    uint32_t retain;     /* keep the newest `retain` restorable versions (0: all) */
    uint32_t timeout_s;  /* abort the version if its ranks have not all finished */
    uint32_t member_ms;  /* wait this long for a server to take the outcome (0: default) */
} cks_msg_version_begin_t;

typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    uint64_t nobjects; /* objects the sealing client put (cluster: the
                          coordinator waits until that many are protected) */
    uint32_t rank;     /* the rank that finished (0 .. nranks-1) */
    uint64_t digest;   /* XOR over the objects it put of the CRC-64 of the
                          key followed by be64(size) (cks_crc64): the
                          coordinator commits only on these objects */
    cks_wire_str_t primaries; /* binary (cluster): where those objects were
                          stored, as entries of CKS_WIRE_SEAL_PRIMARY_LEN
                          bytes: be16 server id (the primary that answered
                          the put), be32 objects it stored for this rank;
                          at most CKS_WIRE_MAX_SEAL_PRIMARIES entries (the
                          client sends the first that fit, by position).
                          A primary that owes objects and is gone fails the
                          version at once (server/cluster.c) */
} cks_msg_version_seal_t;

#define CKS_WIRE_SEAL_PRIMARY_LEN   6u
#define CKS_WIRE_MAX_SEAL_PRIMARIES 512u

typedef struct {
    cks_wire_str_t job;
    uint64_t version;
} cks_msg_version_ref_t; /* SEAL, ABORT, DELETE */

typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    uint64_t holder;   /* the restore that holds it (random, per restore handle) */
    uint32_t lease_ms; /* hold this long from now; 0: let go */
} cks_msg_version_hold_t; /* a restore's lease: retention keeps the version */

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    uint64_t nobjects;
    uint64_t bytes;
} cks_msg_seal_reply_t;

typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    cks_wire_str_t key;
    uint32_t kind;
    int32_t layer;
    int32_t expert;
    int32_t rank;
    uint64_t size; /* payload bytes that follow */
    uint32_t k, m; /* geometry of the version (cluster); 0, 0 standalone */
    uint64_t chunk_size;
    uint32_t member_ms; /* cluster: wait this long for a member to take a chunk (0: default) */
} cks_msg_put_t;

typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    cks_wire_str_t key;
    uint64_t offset;   /* where its payload goes in the object: where the last
                          part ended (0 for the first) */
    uint32_t cancel;   /* 1: no payload; the sender gives the put up (its PUT
                          is answered CKS_ERR_CANCELED) */
} cks_msg_put_part_t; /* bytes of a PUT sent with CKS_WIRE_F_PARTS, to the
                         server that took the PUT */

typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    cks_wire_str_t key;
    uint64_t offset;
    uint64_t length;
} cks_msg_get_t;

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    uint64_t size; /* whole object */
    uint64_t crc64;
    uint64_t offset;
    uint64_t length; /* payload bytes that follow */
} cks_msg_get_reply_t;

typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    uint32_t latest; /* 1: ignore version, use the newest restorable one */
} cks_msg_version_stat_t;

/** A version, as listed. Also the page entry of VERSION_LIST_REPLY. */
typedef struct {
    uint64_t version;
    uint64_t parent;
    uint32_t state;
    uint32_t nranks;
    uint64_t created_ns;
    uint64_t sealed_ns;
    uint64_t nobjects;
    uint64_t bytes;
    uint32_t k, m;
    uint64_t chunk_size;
    uint32_t redundancy; /* servers of any stripe's group it can still lose */
    uint64_t missing;    /* chunks not stored (DEGRADED until rebuilt) */
} cks_msg_version_entry_t;

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    cks_msg_version_entry_t v;
} cks_msg_version_stat_reply_t;

typedef struct {
    cks_wire_str_t job;
    uint32_t has_after;
    uint64_t after; /* list versions > after when has_after */
    uint32_t max;
} cks_msg_version_list_t;

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    uint32_t count; /* entries in the page that follows */
    uint32_t more;  /* 1: more entries after the last one */
} cks_msg_list_reply_t;

typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    cks_wire_str_t key;
} cks_msg_object_stat_t;

/** An object, as listed. Also the page entry of OBJECT_LIST_REPLY. */
typedef struct {
    cks_wire_str_t key;
    uint32_t kind;
    int32_t layer;
    int32_t expert;
    int32_t rank;
    uint64_t size;
    uint64_t crc64;
    uint64_t source; /* the version whose chunks hold the bytes */
} cks_msg_object_entry_t;

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    cks_msg_object_entry_t o;
} cks_msg_object_stat_reply_t;

typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    cks_wire_str_t after; /* empty: from the start */
    uint32_t max;
} cks_msg_object_list_t;

typedef struct {
    cks_wire_str_t after; /* empty: from the start */
    uint32_t max;
} cks_msg_job_list_t;

typedef struct {
    cks_wire_str_t name;
} cks_msg_job_entry_t;

/** Second step of authentication: the client's proof and its address. */
typedef struct {
    cks_wire_str_t proof; /* HMAC(secret, "ckstore-client" | server nonce | client nonce) */
    cks_wire_str_t addr;  /* client's UCX worker address */
} cks_msg_auth_t;

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    cks_wire_str_t addr;  /* server's UCX worker address */
    cks_wire_str_t proof; /* HMAC(secret, "ckstore-server" | client nonce | server nonce) */
} cks_msg_auth_reply_t;

/** A client's memory region (cks_mem_alloc()), named by the RMA descriptor
 *  that comes as the AM data (CKS_WIRE_F_RMA): a server on the same host maps
 *  it and faults its pages in now, ahead of the transfers into and out of it,
 *  the way RDMA memory is registered at allocation. Answer: STATUS_REPLY, once
 *  the region is ready (a server that cannot map it says why; transfers then
 *  work as before). */
typedef struct {
    uint64_t length; /* the region's length: the descriptor names all of it */
} cks_msg_mem_map_t;

/* ---- server to server (cluster) ---------------------------------------- */

/** A chunk of a stripe, primary -> group member; payload: chunk_size bytes. */
typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    cks_wire_str_t key;
    uint64_t stripe;
    uint32_t idx;        /* 0..k-1 data, k..k+m-1 parity */
    uint64_t crc64;      /* of the chunk bytes */
    uint64_t guard;      /* repair's: record it only while this version (the manifest
                            that needs it) is restorable; 0: none (a primary's) */
} cks_msg_chunk_put_t;

/** Read (part of) a chunk; client -> member. */
typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    cks_wire_str_t key;
    uint64_t stripe;
    uint32_t idx;
    uint64_t offset;
    uint64_t length;
} cks_msg_chunk_get_t;

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    uint64_t crc64;     /* of the whole chunk */
    uint64_t chunk_len;
    uint64_t offset;
    uint64_t length;    /* payload bytes that follow */
} cks_msg_chunk_get_reply_t;

/** Primary -> coordinator: an object of an open version is stored (or
 *  could not be: status < 0), with the geometry it was written with (the
 *  coordinator refuses one that differs from the version's), how many of its
 *  chunks could not be stored (members unreachable) and the fewest further
 *  losses any of its stripes survives. */
typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    int32_t status;
    cks_msg_object_entry_t o;
    uint32_t k, m;
    uint64_t chunk_size;
    uint32_t missing;
    uint32_t redundancy;
    cks_wire_str_t why; /* status < 0: the reason (e.g. the servers unreachable) */
    uint32_t primary;   /* id of the primary that stored the object (and reports it) */
    uint32_t backup;    /* 1: a copy the coordinator, itself the object's primary,
                           sends its other candidates for safekeeping (kept for a
                           takeover, not counted: server/coord.c) */
} cks_msg_object_done_t;

/** Coordinator -> every server: a page of a committed version's manifest
 *  (object entries follow as a page). The version record is written with
 *  the page whose `last` is 1. */
typedef struct {
    cks_wire_str_t job;
    cks_msg_version_entry_t v;
    uint32_t last;
    uint32_t retain; /* the job's retention (0: keep all), applied after the last page */
} cks_msg_version_commit_t;

/** Coordinator -> every server: free a version's chunks; state ABORTED
 *  keeps its record as ABORTED, anything else deletes the record. */
typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    uint32_t state;
    uint32_t retain; /* after the drop, keep the newest `retain` restorable
                        versions of the job (0: no retention): an abort for
                        lack of space makes room for the next version */
} cks_msg_version_drop_t;

/** Coordinator -> every server (server/coord.c). `op`:
 *  CLAIM: "I coordinate (job, version) with ballot (round, coord)". A server
 *  grants it (STATUS_REPLY OK) unless it holds a record of the version
 *  (CKS_ERR_VERSION_EXISTS), or a grant it gave stands against it
 *  (CKS_ERR_NOT_COORDINATOR, naming its holder): at round 0 (a begin), any
 *  other holder's; at a higher round (a takeover), a higher ballot, a fenced
 *  one, or one whose holder still answers this server. A coordinator begins
 *  or takes over only with the grants of a majority of the servers. The
 *  begin's parameters travel with the claim, for a takeover.
 *  RELEASE withdraws a claim that did not win.
 *  FENCE: "I am about to commit or abort with this ballot": granted only
 *  while the server's grant is that ballot (or it has none and no record);
 *  the grant is then fenced (no takeover until the version's outcome
 *  arrives). A coordinator records an outcome only with a majority of fences.
 *  REPORT: "send me again your reports of objects of (job, version)": a
 *  takeover's coordinator asks every server once it won. */
typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    uint32_t coord;   /* the claiming server's id */
    uint32_t op;      /* CKS_CLAIM_OP_* */
    uint32_t ttl_s;   /* how long the grant holds (the version's deadline and a margin) */
    uint32_t round;   /* the ballot is (round, coord): 0 at a begin, +1 per takeover */
    uint64_t parent;  /* the begin's parameters (cks_msg_version_begin_t) */
    uint32_t nranks;
    uint32_t k, m;
    uint64_t chunk_size;
    uint32_t retain;
    uint32_t member_ms; /* the begin's member timeout (0: the default), for a takeover */
} cks_msg_version_claim_t;

enum {
    CKS_CLAIM_OP_CLAIM   = 0,
    CKS_CLAIM_OP_RELEASE = 1,
    CKS_CLAIM_OP_FENCE   = 2,
    CKS_CLAIM_OP_REPORT  = 3,
};

/* ---- durable tier (server/flush.c) ---------------------------------------- */

/** Longest directory a flush names, in bytes. */
#define CKS_WIRE_MAX_PATH 1024u

/** Client -> every server: write the chunks of `version` this server holds
 *  (those of every object its manifest references, from whichever version
 *  wrote them) into the flush's temporary directory under `dir` (empty: the
 *  server's --flush-dir). FLUSH_PUBLISH, to one server, then checks that
 *  every stripe has at least k chunks on disk, writes the manifest and
 *  publishes the version by rename. Both answer STATUS_REPLY when done.
 *  FLUSH_VERSION, to one server (nonce unused): that server records the
 *  request in the flush directory, runs both steps itself (FLUSH_CHUNKS to
 *  every peer) and answers once the version is published or the flush
 *  failed; it flushes a recorded request again after a failure or a
 *  restart. */
typedef struct {
    cks_wire_str_t job;
    uint64_t version;
    cks_wire_str_t dir;
    uint64_t nonce; /* names this flush's temporary directory */
} cks_msg_flush_t;

/* ---- catch-up and repair (server/repair.c) ------------------------------ */

/** What a SYNC_LIST asks for. */
typedef enum {
    CKS_SYNC_JOBS     = 0, /* job entries after `after_key` */
    CKS_SYNC_VERSIONS = 1, /* version entries of `job` (every state) after `after` */
    CKS_SYNC_OBJECTS  = 2, /* object entries of (job, version) after `after_key` */
} cks_sync_what_t;

/** Server -> server: list what this server holds, answered from its LMDB
 *  even while it catches up itself (SYNC_REPLY says whether it has). */
typedef struct {
    uint32_t what;          /* cks_sync_what_t */
    cks_wire_str_t job;
    uint64_t version;
    cks_wire_str_t after_key;
    uint32_t has_after;
    uint64_t after;
    uint32_t max;
} cks_msg_sync_list_t;

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    uint32_t synced; /* 1: the answering server has caught up since it started; 2:
                        not yet, and it waits only on servers that have not either */
    uint32_t count;  /* entries in the page that follows */
    uint32_t more;   /* 1: more entries after the last one */
} cks_msg_sync_reply_t;

/** Any -> server: its repair figures. */
typedef struct {
    uint32_t flags; /* 0 */
} cks_msg_repair_status_t;

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    uint32_t synced;      /* caught up since it started */
    uint32_t id;          /* the server's id in the cluster map */
    uint64_t chunks_left; /* chunks placed here and not held, as last counted */
    uint64_t bytes_left;
    uint64_t chunks_done; /* rebuilt since the server started */
    uint64_t bytes_done;
    uint64_t chunks_sent; /* of chunks_done, rebuilt for another member and taken by it */
    uint64_t rate;        /* bytes/s rebuilt over the last seconds of work */
    uint64_t rate_cap;    /* the pacing cap, bytes/s (0: none) */
    uint64_t decodes;     /* decodes that succeeded, one per stripe */
    uint64_t decoded;     /* the chunks those decodes rebuilt */
} cks_msg_repair_status_reply_t;

/** Any -> server: its usage (STATS_REPLY). */
typedef struct {
    uint32_t flags; /* 0 */
} cks_msg_stats_t;

typedef struct {
    CKS_MSG_REPLY_FIELDS;
    uint64_t arena_size;
    uint64_t arena_used;
    uint64_t enc_bytes;  /* object bytes the encoder threads protected since start */
    uint64_t enc_ns;     /* their CPU time in ISA-L encode calls */
    uint64_t enc_job_ns; /* their CPU time in whole jobs (CRCs, padding) */
} cks_msg_stats_reply_t;

/*
 * The message table: the one place that lists every message, and all that
 * the code knows about each.
 * _(NAME, id, body type, direction, payload, rma, data, scope, auth, reply)
 *   direction: "c>s" a request clients (and servers) send, "s>s" one only
 *              servers send each other (cks_msg_server_only()), "s>c" a reply
 *   payload:   1: may carry raw payload bytes or a page as AM data
 *              (CKS_WIRE_F_PAYLOAD, CKS_WIRE_F_PAGE); a request without it
 *              may carry AM data only as an RMA descriptor
 *   rma:       1: may carry CKS_WIRE_F_RMA (a request: its AM data is a
 *              descriptor of the sender's memory; a reply: the payload was
 *              written there)
 *   data:      1: moves clients' object data (foreground traffic: a server
 *              paces its repair around it, unless CKS_WIRE_F_BACKGROUND)
 *   scope:     the job-scope check on a connection whose secret opens one job:
 *              OPEN not checked, JOB the body's `job` must be that job,
 *              NOJOB checked and refused (names no client job)
 *   auth:      PRE: a server with a secret takes it before the connection
 *              has authenticated (the handshake: HELLO, AUTH; and the
 *              replies), AUTHED: only after (refused with "authenticate
 *              first"; a client's transport holds it until then)
 *   reply:     the message that answers it when it succeeds (any request may
 *              be answered by STATUS_REPLY instead); NONE for the replies
 */
#define CKS_MSG_LIST(_) \
    _(HELLO,              1, cks_msg_hello_t,                "c>s", 0, 0, 0, OPEN,  PRE,    HELLO_REPLY) \
    _(HELLO_REPLY,        2, cks_msg_hello_reply_t,          "s>c", 0, 0, 0, OPEN,  PRE,    NONE) \
    _(STATUS_REPLY,       3, cks_msg_status_t,               "s>c", 0, 0, 0, OPEN,  PRE,    NONE) \
    _(VERSION_BEGIN,      4, cks_msg_version_begin_t,        "c>s", 0, 0, 0, JOB,   AUTHED, STATUS_REPLY) \
    _(VERSION_SEAL,       5, cks_msg_version_seal_t,         "c>s", 0, 0, 0, JOB,   AUTHED, SEAL_REPLY) \
    _(SEAL_REPLY,         6, cks_msg_seal_reply_t,           "s>c", 0, 0, 0, OPEN,  PRE,    NONE) \
    _(VERSION_ABORT,      7, cks_msg_version_ref_t,          "c>s", 0, 0, 0, JOB,   AUTHED, STATUS_REPLY) \
    _(VERSION_DELETE,     8, cks_msg_version_ref_t,          "c>s", 0, 0, 0, JOB,   AUTHED, STATUS_REPLY) \
    _(PUT,                9, cks_msg_put_t,                  "c>s", 1, 1, 1, JOB,   AUTHED, STATUS_REPLY) \
    _(GET,               10, cks_msg_get_t,                  "c>s", 0, 1, 1, JOB,   AUTHED, GET_REPLY) \
    _(GET_REPLY,         11, cks_msg_get_reply_t,            "s>c", 1, 1, 0, OPEN,  PRE,    NONE) \
    _(VERSION_STAT,      12, cks_msg_version_stat_t,         "c>s", 0, 0, 0, JOB,   AUTHED, VERSION_STAT_REPLY) \
    _(VERSION_STAT_REPLY,13, cks_msg_version_stat_reply_t,   "s>c", 0, 0, 0, OPEN,  PRE,    NONE) \
    _(VERSION_LIST,      14, cks_msg_version_list_t,         "c>s", 0, 0, 0, JOB,   AUTHED, LIST_REPLY) \
    _(LIST_REPLY,        15, cks_msg_list_reply_t,           "s>c", 1, 0, 0, OPEN,  PRE,    NONE) \
    _(OBJECT_STAT,       16, cks_msg_object_stat_t,          "c>s", 0, 0, 0, JOB,   AUTHED, OBJECT_STAT_REPLY) \
    _(OBJECT_STAT_REPLY, 17, cks_msg_object_stat_reply_t,    "s>c", 0, 0, 0, OPEN,  PRE,    NONE) \
    _(OBJECT_LIST,       18, cks_msg_object_list_t,          "c>s", 0, 0, 0, JOB,   AUTHED, LIST_REPLY) \
    _(JOB_LIST,          19, cks_msg_job_list_t,             "c>s", 0, 0, 0, NOJOB, AUTHED, LIST_REPLY) \
    _(CHUNK_PUT,         20, cks_msg_chunk_put_t,            "s>s", 1, 0, 1, NOJOB, AUTHED, STATUS_REPLY) \
    _(CHUNK_GET,         21, cks_msg_chunk_get_t,            "c>s", 0, 1, 1, JOB,   AUTHED, CHUNK_GET_REPLY) \
    _(CHUNK_GET_REPLY,   22, cks_msg_chunk_get_reply_t,      "s>c", 1, 1, 0, OPEN,  PRE,    NONE) \
    _(OBJECT_DONE,       23, cks_msg_object_done_t,          "s>s", 0, 0, 0, NOJOB, AUTHED, STATUS_REPLY) \
    _(VERSION_COMMIT,    24, cks_msg_version_commit_t,       "s>s", 1, 0, 0, NOJOB, AUTHED, STATUS_REPLY) \
    _(VERSION_DROP,      25, cks_msg_version_drop_t,         "s>s", 0, 0, 0, NOJOB, AUTHED, STATUS_REPLY) \
    _(OBJECT_DELETE,     26, cks_msg_object_stat_t,          "c>s", 0, 0, 0, JOB,   AUTHED, STATUS_REPLY) \
    _(AUTH,              27, cks_msg_auth_t,                 "c>s", 0, 0, 0, NOJOB, PRE,    AUTH_REPLY) \
    _(AUTH_REPLY,        28, cks_msg_auth_reply_t,           "s>c", 0, 0, 0, OPEN,  PRE,    NONE) \
    _(MEM_MAP,           29, cks_msg_mem_map_t,              "c>s", 0, 1, 0, OPEN,  AUTHED, STATUS_REPLY) \
    _(VERSION_HOLD,      30, cks_msg_version_hold_t,         "c>s", 0, 0, 0, JOB,   AUTHED, STATUS_REPLY) \
    _(VERSION_CLAIM,     31, cks_msg_version_claim_t,        "s>s", 0, 0, 0, NOJOB, AUTHED, STATUS_REPLY) \
    _(PUT_PART,          32, cks_msg_put_part_t,             "c>s", 1, 1, 1, JOB,   AUTHED, STATUS_REPLY) \
    _(SYNC_LIST,         40, cks_msg_sync_list_t,            "s>s", 0, 0, 0, NOJOB, AUTHED, SYNC_REPLY) \
    _(SYNC_REPLY,        41, cks_msg_sync_reply_t,           "s>c", 1, 0, 0, OPEN,  PRE,    NONE) \
    _(REPAIR_CHECK,      42, cks_msg_version_ref_t,          "s>s", 0, 0, 0, NOJOB, AUTHED, STATUS_REPLY) \
    _(REPAIR_STATUS,     43, cks_msg_repair_status_t,        "c>s", 0, 0, 0, NOJOB, AUTHED, REPAIR_STATUS_REPLY) \
    _(REPAIR_STATUS_REPLY,44, cks_msg_repair_status_reply_t,  "s>c", 0, 0, 0, OPEN,  PRE,    NONE) \
    _(REPAIR_DONE,       47, cks_msg_version_ref_t,          "s>s", 0, 0, 0, NOJOB, AUTHED, STATUS_REPLY) \
    _(STATS,             45, cks_msg_stats_t,                "c>s", 0, 0, 0, OPEN,  AUTHED, STATS_REPLY) \
    _(STATS_REPLY,       46, cks_msg_stats_reply_t,          "s>c", 0, 0, 0, OPEN,  PRE,    NONE) \
    _(FLUSH_CHUNKS,      60, cks_msg_flush_t,                "c>s", 0, 0, 0, JOB,   AUTHED, STATUS_REPLY) \
    _(FLUSH_PUBLISH,     61, cks_msg_flush_t,                "c>s", 0, 0, 0, JOB,   AUTHED, STATUS_REPLY) \
    _(FLUSH_VERSION,     62, cks_msg_flush_t,                "c>s", 0, 0, 0, JOB,   AUTHED, STATUS_REPLY)

/* What cks_msg_flags() says of a message (0 for an unknown type). */
#define CKS_MSG_F_REPLY       0x01u /* answers a request (matched by req_id): reply NONE */
#define CKS_MSG_F_SERVER_ONLY 0x02u /* direction "s>s" */
#define CKS_MSG_F_PAYLOAD     0x04u /* the payload column */
#define CKS_MSG_F_RMA         0x08u /* the rma column */
#define CKS_MSG_F_DATA        0x10u /* the data column */
#define CKS_MSG_F_SCOPED      0x20u /* scope JOB or NOJOB: the job-scope check applies */
#define CKS_MSG_F_PREAUTH     0x40u /* auth PRE: taken before authentication */

/** Nonzero for message types that answer a request (matched by req_id). */
#define CKS_MSG_IS_REPLY(t) ((cks_msg_flags(t) & CKS_MSG_F_REPLY) != 0)

typedef enum {
    CKS_MSG_NONE = 0,
#define CKS_MSG_ENUM_(name, id, ...) CKS_MSG_##name = id,
    CKS_MSG_LIST(CKS_MSG_ENUM_)
#undef CKS_MSG_ENUM_
    CKS_MSG_LAST
} cks_msg_type_t;

/** Entry kinds of a list page (AM data of LIST_REPLY). */
typedef enum {
    CKS_WIRE_ENTRY_VERSION = 0, /* cks_msg_version_entry_t */
    CKS_WIRE_ENTRY_OBJECT  = 1, /* cks_msg_object_entry_t */
    CKS_WIRE_ENTRY_JOB     = 2, /* cks_msg_job_entry_t */
} cks_wire_entry_t;

/** A union big enough for any body; what cks_wire_unpack() fills. */
typedef union {
#define CKS_MSG_UNION_(name, id, type, ...) type m_##name;
    CKS_MSG_LIST(CKS_MSG_UNION_)
#undef CKS_MSG_UNION_
} cks_msg_any_t;

/** Name of a message type ("PUT"); "UNKNOWN" for others. */
const char *cks_msg_name(unsigned type);
/** The CKS_MSG_F_ flags of a message type (its row of the table); 0 for
 *  an unknown type. */
unsigned cks_msg_flags(unsigned type);
/** The message that answers `type` when it succeeds (the reply column);
 *  CKS_MSG_NONE for replies and unknown types. */
unsigned cks_msg_reply(unsigned type);
/** 1 for the messages only servers send each other (the "s>s" rows of the
 *  table: CHUNK_PUT, OBJECT_DONE, VERSION_COMMIT, VERSION_DROP, VERSION_CLAIM,
 *  SYNC_LIST, REPAIR_CHECK, REPAIR_DONE), else 0. */
int cks_msg_server_only(unsigned type);

/** Pack header and body into buf (at least CKS_WIRE_HDR_LEN + CKS_WIRE_MAX_BODY
 *  bytes). `body` points to the struct of `type`'s table entry. Returns
 *  CKS_ERR_INVALID_PARAM for an unknown type or a string over its bound, and
 *  CKS_ERR_BAD_MESSAGE when the body does not fit. */
cks_status_t cks_wire_pack(unsigned type, uint32_t flags, uint64_t req_id,
                           const void *body, void *buf, size_t buf_len, size_t *len_p);

/** Decode an untrusted message (header followed by body_len body bytes).
 *  On success fills hdr_p and body_p (the struct of hdr_p->type); string
 *  fields point into buf. On failure returns CKS_ERR_BAD_MESSAGE,
 *  CKS_ERR_UNSUPPORTED or CKS_ERR_PROTOCOL, and writes a reason into err
 *  (err_len bytes, may be NULL). */
cks_status_t cks_wire_unpack(const void *buf, size_t len, cks_wire_hdr_t *hdr_p,
                             cks_msg_any_t *body_p, char *err, size_t err_len);

/** Pack one list-page entry (kind `entry`) at buf+*off, advancing *off.
 *  Returns CKS_ERR_BAD_MESSAGE when it does not fit in buf_len. */
cks_status_t cks_wire_entry_pack(cks_wire_entry_t entry, const void *e, void *buf,
                                 size_t buf_len, size_t *off);

/** Decode the next entry of an untrusted page at buf+*off into e (the struct
 *  of `entry`), advancing *off. String fields point into buf. */
cks_status_t cks_wire_entry_unpack(cks_wire_entry_t entry, const void *buf, size_t len,
                                   size_t *off, void *e);

/** Convenience: a cks_wire_str_t for a C string (NULL gives an empty one). */
cks_wire_str_t cks_wire_cstr(const char *s);

/* ======================================================================
 * UCX
 * ====================================================================== */

typedef struct cks_tp_worker *cks_tp_worker_h;
typedef struct cks_tp_conn *cks_tp_conn_h;
typedef struct cks_tp_listener *cks_tp_listener_h;
typedef struct cks_tp_mem *cks_tp_mem_h;

/** A payload announced by a received message (AM data), or - with
 *  CKS_WIRE_F_RMA - memory of the peer's that it lets us read or write. */
typedef struct {
    size_t length;
    int is_rndv;     /* 1: not yet here; receive with cks_tp_data_recv() */
    const void *ptr; /* !is_rndv: the bytes, valid during the callback only */
    void *desc;      /* is_rndv: UCX's data descriptor */
    int is_rma;      /* 1: the peer's memory [rma_addr, rma_addr + length):
                        a payload to read with cks_tp_data_recv(), or where
                        the reply's payload goes (cks_tp_send_into()) */
    cks_tp_conn_h conn;
    uint64_t rma_addr, rma_seg_base, rma_seg_len; /* the region it lies in */
    const void *rkey; /* packed remote key, valid during the callback only */
    size_t rkey_len;
    const uint8_t *rma_token; /* the owner's token (CKS_WIRE_NONCE_LEN bytes) */
} cks_tp_data_t;

/** A received message, already decoded and validated. `data` is NULL when
 *  the message carries no payload. Runs on the worker thread. A rendezvous
 *  payload that the callback neither receives nor keeps is dropped. */
typedef void (*cks_tp_msg_cb_t)(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                                const cks_msg_any_t *body, cks_tp_data_t *data);

/** A message that failed to decode: the worker calls this so the owner can
 *  answer with an error (hdr is NULL when even the header was bad). */
typedef void (*cks_tp_bad_msg_cb_t)(void *arg, cks_tp_conn_h conn,
                                    const cks_wire_hdr_t *hdr, cks_status_t status,
                                    const char *reason);

/** A connection failed or was closed by the peer. Called once; the owner
 *  must release its reference with cks_tp_conn_put(). */
typedef void (*cks_tp_conn_err_cb_t)(void *arg, cks_tp_conn_h conn, cks_status_t status);

/** A new connection from a listener (already accepted; the callee owns one
 *  reference). */
typedef void (*cks_tp_accept_cb_t)(void *arg, cks_tp_conn_h conn);

/** Completion of a send or a receive: status CKS_OK or an error. */
typedef void (*cks_tp_done_cb_t)(void *arg, cks_status_t status);

typedef struct {
    const char *name;            /* for logs */
    cks_tp_msg_cb_t on_msg;
    cks_tp_bad_msg_cb_t on_bad_msg;
    cks_tp_conn_err_cb_t on_conn_err;
    void *arg;                   /* passed to the three callbacks */
    /* limits (0: the default; see cks_tp_worker_sweep()) */
    unsigned max_conns;          /* connections a listener accepts at once
                                    (default: unlimited) */
    unsigned max_pending;        /* sends a connection may have in flight
                                    before its requests close it (256) */
    unsigned stall_ms;           /* a connection whose pending sends make no
                                    progress this long is closed (default:
                                    never) */
    unsigned auth_timeout_ms;    /* with cks_tp_worker_require_auth(): an
                                    accepted connection that has not
                                    authenticated this long is closed
                                    (0: 10000) */
    unsigned recv_timeout_ms;    /* a payload being received with
                                    cks_tp_data_recv() (a rendezvous) that
                                    has not arrived this long, plus its
                                    length at recv_min_rate, closes its
                                    connection: the receive then fails
                                    (default: never) */
    uint64_t recv_min_rate;      /* bytes/s; 0: the length adds nothing */
} cks_tp_worker_params_t;

/** Create a UCX context and worker (single-threaded, with a wake-up fd). */
cks_status_t cks_tp_worker_create(const cks_tp_worker_params_t *params,
                                  cks_tp_worker_h *worker_p);
/** First step of a shutdown: from now on new connections and calls are
 *  refused (CKS_ERR_CANCELED, at once; their callbacks never run); every
 *  outstanding call completes now with CKS_ERR_CANCELED (its callback runs
 *  here, and may free what it owns); every connection is closed (bounded
 *  wait for the closes). The owner calls it while everything the calls'
 *  callbacks touch still exists, then frees that, then destroys the worker.
 *  Idempotent. */
void cks_tp_worker_quiesce(cks_tp_worker_h worker);
/** Destroy: quiesces (if not done yet), closes every listener still open and
 *  frees the worker. */
void cks_tp_worker_destroy(cks_tp_worker_h worker);

/** Run callbacks for everything that has happened; returns nonzero when
 *  something progressed. */
int cks_tp_worker_progress(cks_tp_worker_h worker);

/** The fd to poll for readability before calling cks_tp_worker_arm(). */
int cks_tp_worker_efd(cks_tp_worker_h worker);

/** Arm the fd: CKS_OK means the thread may now sleep on it; CKS_ERR_BUSY
 *  means events are pending (progress again first). When it stays busy
 *  round after round with nothing progressed (sends waiting for room in a
 *  peer's shared-memory FIFO: UCX raises no event when it frees), the call
 *  sleeps 50 us to 0.8 ms before it answers, instead of letting the thread
 *  spin. */
cks_status_t cks_tp_worker_arm(cks_tp_worker_h worker);

/** Progress until nothing happens, then sleep on the event fd for at most
 *  timeout_ms (-1: no limit) or until cks_tp_worker_signal(). */
cks_status_t cks_tp_worker_wait(cks_tp_worker_h worker, int timeout_ms);

/** Wake the worker's thread; safe from any thread. */
void cks_tp_worker_signal(cks_tp_worker_h worker);

/** Listen on addr:port (port 0: pick one; see cks_tp_listener_port()). */
cks_status_t cks_tp_listener_create(cks_tp_worker_h worker, const char *addr,
                                    uint16_t port, cks_tp_accept_cb_t on_accept,
                                    void *arg, cks_tp_listener_h *listener_p);
uint16_t cks_tp_listener_port(cks_tp_listener_h listener);
void cks_tp_listener_destroy(cks_tp_listener_h listener);

/** Start connecting to addr:port. The connection is usable at once (sends
 *  queue until it is up); a failure arrives through on_conn_err. The caller
 *  owns one reference. */
cks_status_t cks_tp_conn_connect(cks_tp_worker_h worker, const char *addr,
                                 uint16_t port, cks_tp_conn_h *conn_p);

/** Attach the owner's pointer to a connection, and read it back. */
void cks_tp_conn_set_user(cks_tp_conn_h conn, void *user);
void *cks_tp_conn_user(cks_tp_conn_h conn);
/** Peer's address as text ("127.0.0.1:4242"), for logs. */
const char *cks_tp_conn_peer(cks_tp_conn_h conn);
/** Nonzero once the connection failed or was closed. */
int cks_tp_conn_failed(cks_tp_conn_h conn);
/** Nonzero once a call made on this connection, which we opened
 *  (cks_tp_conn_connect()), went unanswered past its deadline. Its peer may
 *  be a process that is gone while UCX has not noticed (a server killed and
 *  started again on the same address): a caller that wants answers opens a
 *  new connection for its next calls; calls in flight on this one keep
 *  their own deadlines. */
int cks_tp_conn_unanswered(cks_tp_conn_h conn);
/** Nonzero for an endpoint UCX made by itself for a peer (not paired with one
 *  of ours): which connection it belongs to is unknown. */
int cks_tp_conn_implicit(cks_tp_conn_h conn);

/** This worker's UCX address (valid until the worker is destroyed). */
void cks_tp_worker_address(cks_tp_worker_h worker, const void **addr_p, size_t *len_p);

/** Upgrade a connection made through the listener (sockaddr) to one made
 *  from the peer's worker address, so that UCX can use the shared-memory
 *  and CMA transports of one host. Both sides call it with the other's
 *  address; from then on sends use the new endpoint. For a peer on another
 *  host it does nothing and returns CKS_OK: the listener's endpoint already
 *  reaches it over every network transport. */
cks_status_t cks_tp_conn_upgrade(cks_tp_conn_h conn, const void *peer_addr, size_t len);

/* ---- authentication ------------------------------------------------------
 * A cluster secret (a file readable by its owner only) authenticates both
 * ends of a connection with a challenge-response before anything else is
 * accepted: HELLO carries the client's nonce, HELLO_REPLY the server's nonce,
 * AUTH the client's proof (so that the server can log a wrong secret), and
 * AUTH_REPLY the server's proof, which the client checks before it uses the
 * connection. Proofs are HMAC-SHA256 (OpenSSL) over a label and both nonces.
 * Worker addresses, which let a peer open a data endpoint, are exchanged only
 * inside AUTH / AUTH_REPLY.
 */
typedef struct {
    uint8_t key[256];
    size_t len;
    int peer; /* the servers' own secret (--peer-secret): a handshake with it
                 proves the role of a server of the cluster (the peer labels
                 below), which a client of the cluster secret cannot */
    char job[CKS_JOB_MAX_LEN + 1]; /* a job's own secret: the job it opens
                                      (HELLO names it); "": the cluster's */
} cks_tp_secret_t;

#define CKS_TP_LABEL_SERVER "ckstore-server" /* what the server's proof covers */
#define CKS_TP_LABEL_CLIENT "ckstore-client"
/* the same two proofs between servers, with the peer secret: a proof of one
 * role never answers a challenge of the other */
#define CKS_TP_LABEL_PEER_SERVER "ckstore-peer-server"
#define CKS_TP_LABEL_PEER_CLIENT "ckstore-peer-client"

/** Load a secret file: 16..255 bytes, a regular file readable by its owner
 *  only (mode & 077 == 0). Errors name the problem. `peer` is 0 (set it for
 *  the peer secret). */
cks_status_t cks_tp_secret_load(const char *path, cks_tp_secret_t *secret_p);
/** The job a client request is about (the body's `job`, for the rows of
 *  scope JOB of the message table), or NULL for types that name none (HELLO,
 *  JOB_LIST, AUTH, replies, server-to-server messages). */
const cks_wire_str_t *cks_msg_client_job(unsigned type, const cks_msg_any_t *body);
/** Random nonce. */
cks_status_t cks_tp_nonce(uint8_t nonce[CKS_WIRE_NONCE_LEN]);
/** A random, nonzero request id (OpenSSL's generator): ids that a peer on
 *  another connection cannot guess. Any thread. */
uint64_t cks_tp_random_id(void);
/** proof = HMAC-SHA256(secret, label | a | b). */
cks_status_t cks_tp_proof(const cks_tp_secret_t *secret, const char *label, const void *a,
                          size_t alen, const void *b, size_t blen,
                          uint8_t proof[CKS_WIRE_NONCE_LEN]);
/** Constant-time check of a received proof; CKS_OK or CKS_ERR_AUTH. */
cks_status_t cks_tp_proof_check(const cks_tp_secret_t *secret, const char *label,
                                const void *a, size_t alen, const void *b, size_t blen,
                                const cks_wire_str_t *proof);

/** Per-connection authentication state, kept by the transport for the owner
 *  (the server stores its challenge here between HELLO and AUTH). */
typedef struct {
    int authed;
    int peer;       /* authenticated as a server of the cluster (peer secret):
                       only such a connection may carry server-to-server
                       messages (cks_msg_server_only()) */
    int challenged; /* a HELLO got our nonce; AUTH may follow, once */
    int scoped;     /* authenticated with a job's secret: serves `job` only */
    char job[CKS_JOB_MAX_LEN + 1];
    uint8_t client_nonce[CKS_WIRE_NONCE_LEN];
    uint8_t server_nonce[CKS_WIRE_NONCE_LEN];
} cks_tp_auth_t;
cks_tp_auth_t *cks_tp_conn_auth(cks_tp_conn_h conn);

/** From now on, replies are taken only from authenticated connections (a
 *  call's reply only from the connection the call went out on, in any case),
 *  and accepted connections that do not authenticate within auth_timeout_ms
 *  are closed. The server sets it when it has a secret. */
void cks_tp_worker_require_auth(cks_tp_worker_h worker);

/** Copy threads: transfers of 2 MiB and more from or to a peer's region
 *  that UCX maps here (a client's cks_tp_mem_alloc() memory on this host)
 *  are copied by nthreads threads in 1 MiB parts instead of by UCX on the
 *  worker's thread; completions still run on the worker's thread. 0 (the
 *  default): none. At most 16; call once, before the first transfer. */
cks_status_t cks_tp_worker_copy_threads(cks_tp_worker_h worker, unsigned nthreads);

/** Room for peers: with authentication required, the listener accepts up to
 *  max_conns + room connections that have not proved the peer role, and
 *  cks_tp_conn_authenticated() lets at most max_conns of them authenticate
 *  as clients; connections authenticated as peers are not counted. So
 *  clients cannot take the slots the servers of a cluster need. 0 by
 *  default (a standalone server). */
void cks_tp_worker_set_peer_room(cks_tp_worker_h worker, unsigned room);

/** The owner's verdict on a connection's handshake (server side): it proved
 *  the peer secret (peer = 1) or a client's secret. A client connection past
 *  max_conns clients is refused with CKS_ERR_BUSY (the connection stays as it
 *  was: the owner answers and closes it); otherwise the connection is marked
 *  authenticated (and as a peer) and CKS_OK returned. */
cks_status_t cks_tp_conn_authenticated(cks_tp_conn_h conn, int peer);

/** The one client side of the handshake (libckstore's connections, and a
 *  server opening a peer connection): HELLO (naming the secret's job, if
 *  any), then - with a secret - send AUTH and check the server's proof in
 *  its reply (with a peer secret, both proofs use the peer labels, and the
 *  connection is marked as one to a peer); finally move the connection to
 *  the server's worker-address endpoint. Other sends on the connection are
 *  held until it ends. `secret` may be NULL (no authentication); it must
 *  outlive the handshake. cb runs once, on the worker's thread, with the
 *  outcome: CKS_ERR_AUTH when the proofs do not match or the server wants a
 *  secret we do not have, CKS_ERR_TIMEOUT without an answer in timeout_ms,
 *  or the status the server answered with; cks_tp_conn_handshake_error()
 *  then says why. */
cks_status_t cks_tp_conn_handshake(cks_tp_conn_h conn, const char *name,
                                   const cks_tp_secret_t *secret, int timeout_ms,
                                   cks_tp_done_cb_t cb, void *arg);
/** Why the last handshake on conn failed, in words ("" when it did not);
 *  the text belongs to conn. */
const char *cks_tp_conn_handshake_error(cks_tp_conn_h conn);

/** Enforce the per-connection limits, outside any UCX callback: close the
 *  connections that stopped reading their replies (more than max_pending
 *  sends in flight when a request came, or no send completed for stall_ms),
 *  and those a payload being received stalls on (recv_timeout_ms), failing
 *  them as by a transport error (on_conn_err with CKS_ERR_TIMEOUT).
 *  Returns the milliseconds until the next check is due, or -1. */
int cks_tp_worker_sweep(cks_tp_worker_h worker);

/** Start the worker's sentinel (sentinel.c): a second UCX worker of the
 *  same context that sends this one a small message every second, the way a
 *  process on this host would (over shared memory where UCX has it), to
 *  show that the worker still takes messages. UCX 1.13's shared-memory
 *  receive path takes none from anyone, for good, after a sender on this
 *  host was killed in the middle of a send. Stopped by
 *  cks_tp_worker_destroy(). */
cks_status_t cks_tp_sentinel_start(cks_tp_worker_h worker);
/** On the worker's thread, from its loop: progress the sentinel and send
 *  its next message when due. Returns for how many seconds (counted only
 *  while this is called: a stopped process does not count) a message of
 *  the sentinel has been waiting with none taken by the worker; 0 while
 *  they arrive, or without a sentinel. *next_ms: when to call again (-1:
 *  no need). */
unsigned cks_tp_sentinel_poll(cks_tp_worker_h worker, int *next_ms);
void cks_tp_sentinel_stop(cks_tp_worker_h worker);

/** Replace the worker's UCP worker by a new one of the same context, for a
 *  worker whose receive path stalled (above): its registered memory stays
 *  valid, its address changes. Every connection open now fails as if its
 *  peer was lost (CKS_ERR_CONN_LOST: its calls fail and on_conn_err runs;
 *  the owner still puts its references); sends and receives UCX held on
 *  them complete with that error (their callbacks run here). New
 *  connections go through the new worker, whose event fd
 *  (cks_tp_worker_efd()) the owner waits on from now; a running sentinel
 *  is started again on it. The old worker is never progressed again and
 *  is freed by cks_tp_worker_destroy(). On the worker's thread, not from
 *  one of its callbacks; not for a worker with a listener (a server's:
 *  CKS_ERR_INVALID_PARAM). At most CKS_TP_RETIRED_MAX (8) times per worker,
 *  then CKS_ERR_BAD_STATE; on any error nothing changed. */
cks_status_t cks_tp_worker_renew(cks_tp_worker_h worker);
/** How many times cks_tp_worker_renew() replaced the UCP worker (any
 *  thread). */
unsigned cks_tp_worker_renewals(cks_tp_worker_h worker);

/** Serve nothing more from this connection, and close it in `ms` (by
 *  cks_tp_worker_sweep()): time for an answer already sent to arrive before
 *  the peer sees its connection go, and for the peer to close it first. */
void cks_tp_conn_close_later(cks_tp_conn_h conn, int ms);

/** Take / release a reference. The last release closes the endpoint. */
void cks_tp_conn_get(cks_tp_conn_h conn);
void cks_tp_conn_put(cks_tp_conn_h conn);

/** Close now: outstanding sends and receives on it complete with
 *  CKS_ERR_CANCELED or CKS_ERR_CONN_LOST. The references stay valid. */
void cks_tp_conn_close(cks_tp_conn_h conn);

/** Send a message: header + body packed from `body`, and `payload_len`
 *  bytes from `payload` (zero-copy; not touched through msgpack). `flags`
 *  carries CKS_WIRE_F_PAGE for list pages; CKS_WIRE_F_PAYLOAD is set for
 *  any payload. `payload_memh` may name a registered region holding it.
 *  Returns CKS_INPROGRESS, and `cb` (may be NULL) runs exactly once when UCX
 *  is done with the payload, or an error, and `cb` never runs. The payload
 *  belongs to the caller until then. */
cks_status_t cks_tp_send(cks_tp_conn_h conn, unsigned type, uint32_t flags,
                         uint64_t req_id, const void *body, const void *payload,
                         size_t payload_len, cks_mem_type_t mem_type,
                         cks_tp_mem_h payload_memh, cks_tp_done_cb_t cb, void *arg);

/** Give up on sends still in UCX whose callback is (cb, arg): after a
 *  connection was closed, UCX 1.13 may hold a send to a peer on this host
 *  that was killed or restarted for good. Their callback will not run; the
 *  requests are freed when UCX lets go of them, or with the worker. For a
 *  payload UCX only reads, and only for a peer that is gone or checks what
 *  it receives (a member checks a chunk's CRC). */
void cks_tp_send_abandon(cks_tp_worker_h w, cks_tp_done_cb_t cb, void *arg);

/** Whether this worker's UCX context moves CUDA device memory itself (its
 *  memory types include CUDA: cuda_copy, cuda_ipc, gdr_copy or GPUDirect
 *  RDMA transports are loaded). */
int cks_tp_worker_cuda_direct(cks_tp_worker_h worker);

/** Send `len` bytes as a message header exactly as given (no packing), with
 *  an optional payload: for tests that must send malformed messages. Same
 *  completion contract as cks_tp_send(); `bytes` is copied. */
cks_status_t cks_tp_send_raw(cks_tp_conn_h conn, const void *bytes, size_t len,
                             const void *payload, size_t payload_len,
                             cks_tp_done_cb_t cb, void *arg);

/** Completion of a call: `status` is a transport error (timeout, lost
 *  connection) or the status the peer's reply carried; `msg` its text. */
typedef void (*cks_tp_call_cb_t)(void *arg, cks_status_t status, const char *msg);

/** A request whose reply only carries a status (server to server): send it,
 *  match the reply by request id, and complete exactly once - with the
 *  reply's status, or CKS_ERR_TIMEOUT after timeout_ms, or the connection's
 *  error - and only when UCX no longer uses the payload. A call that times
 *  out while its payload is still in flight closes the connection, because
 *  only that releases the payload. Returns CKS_INPROGRESS or an error (then
 *  cb never runs). Expiry needs cks_tp_worker_expire() from the owner's loop. */
cks_status_t cks_tp_call(cks_tp_conn_h conn, unsigned type, uint32_t flags, const void *body,
                         const void *payload, size_t payload_len, cks_tp_mem_h payload_memh,
                         int timeout_ms, cks_tp_call_cb_t cb, void *arg);

/** A reply to cks_tp_call_data() that carries status OK: `body` and `data`
 *  (NULL without a payload) are valid during the callback only; it may
 *  copy the payload (data->ptr when !data->is_rndv) or start its receipt
 *  with cks_tp_data_recv(). The call's `cb` runs after it. */
typedef void (*cks_tp_reply_cb_t)(void *arg, const cks_wire_hdr_t *hdr,
                                  const cks_msg_any_t *body, cks_tp_data_t *data);

/** As cks_tp_call(), for a request whose reply has a body of its own and
 *  may carry a payload (a list page, a chunk): `on_reply` sees them before
 *  `cb` runs with the reply's status. A peer's reply that is not OK, a
 *  timeout or a lost connection give `cb` alone. */
cks_status_t cks_tp_call_data(cks_tp_conn_h conn, unsigned type, uint32_t flags,
                              const void *body, int timeout_ms, cks_tp_reply_cb_t on_reply,
                              cks_tp_call_cb_t cb, void *arg);

/** As cks_tp_call_data(), for a request whose reply's payload the peer may
 *  write into our memory: `desc` (cks_tp_mem_describe() of where it goes;
 *  desc_len 0: none, then exactly cks_tp_call_data()) goes as the request's
 *  payload with CKS_WIRE_F_RMA and must stay valid until `cb` runs. A peer
 *  that wrote the bytes there replies with CKS_WIRE_F_RMA and no payload
 *  (`on_reply` gets data NULL); one that could not reach our memory may
 *  send them as a payload instead, or fail the call. */
cks_status_t cks_tp_call_data_into(cks_tp_conn_h conn, unsigned type, uint32_t flags,
                                   const void *body, const void *desc, size_t desc_len,
                                   int timeout_ms, cks_tp_reply_cb_t on_reply,
                                   cks_tp_call_cb_t cb, void *arg);

/** Fail calls past their deadline; returns the milliseconds until the next
 *  deadline (-1: none), for the owner's poll timeout. */
int cks_tp_worker_expire(cks_tp_worker_h worker);

/** Receive a rendezvous payload into buf (len == data->length); call it from
 *  the message callback. Returns CKS_INPROGRESS, and cb runs exactly once
 *  when the bytes are in buf (buf belongs to UCX until then), or an error,
 *  and cb never runs. */
cks_status_t cks_tp_data_recv(cks_tp_worker_h worker, cks_tp_data_t *data, void *buf,
                              cks_mem_type_t mem_type, cks_tp_mem_h buf_memh,
                              cks_tp_done_cb_t cb, void *arg);

/* ---- one copy between processes of one host --------------------------------
 * A peer on this host may hand us a region of its memory that UCX allocated
 * in shared memory (cks_tp_mem_alloc()): UCX then maps it into our process,
 * and a transfer is one memcpy by the side that serves it, instead of a
 * rendezvous through the kernel (CMA) by the receiver. The peer sends an RMA
 * descriptor (CKS_WIRE_F_RMA) in place of the payload: for a request with a
 * payload we read it from there (cks_tp_data_recv()); for a request that
 * wants a payload back we write the reply's payload there (cks_tp_send_into()).
 * Every descriptor is checked: the key must have the shape UCX gives keys
 * of such memory on this host; the range must lie in the region it names,
 * past the region's header; where UCX maps the region into this process, the
 * mapping must be the one UCX just made for it, starting at its base and as
 * long as it says, and the region's header must hold the token that the
 * descriptor carries (a random token of the allocating worker: a client
 * cannot name another process's region, whose header it cannot write).
 */
#define CKS_TP_RMA_DESC_MAX 1024u /* a descriptor with its packed key */

/** Allocate len bytes that a peer on this host can read and write directly
 *  (UCX-allocated shared memory). Free with cks_tp_mem_unmap(). Any thread. */
cks_status_t cks_tp_mem_alloc(cks_tp_worker_h worker, size_t len, cks_tp_mem_h *mem_p,
                              void **addr_p);
/** Fault every page of mem into this process's page tables for writing
 *  (MADV_POPULATE_WRITE, Linux 5.14 on), as registering memory for RDMA
 *  pins it: the owner's own first accesses (its writes before a put, a
 *  degraded restore's decodes into it, its reads after a restore) then take
 *  no page fault each. CKS_OK; CKS_ERR_UNSUPPORTED where the kernel cannot
 *  (an older one, or no memory for the pages now): those accesses then
 *  fault as before. CKS_ERR_INVALID_PARAM for memory not from
 *  cks_tp_mem_alloc(). Any thread. */
cks_status_t cks_tp_mem_populate(cks_tp_mem_h mem);
/** Does mem (from cks_tp_mem_alloc()) hold [addr, addr + len)? */
int cks_tp_mem_holds(cks_tp_mem_h mem, const void *addr, size_t len);
/** The page size the kernel backs mem with (4096, or 2 MiB where UCX got
 *  huge pages for it); 0 when it cannot be told. Cheap where the kernel
 *  answers PROCMAP_QUERY (6.11 on); elsewhere 0 unless `scan`, which reads
 *  /proc/self/smaps, whose cost grows with the memory the process has
 *  populated. Any thread. */
size_t cks_tp_mem_page_size(cks_tp_mem_h mem, int scan);
/** The same for the mapping that holds addr (any mapping of this process). */
size_t cks_tp_page_size_at(const void *addr, int scan);
/** Write the descriptor of [addr, addr + len) of mem into buf (at least
 *  CKS_TP_RMA_DESC_MAX bytes); *len_p gets its length. */
cks_status_t cks_tp_mem_describe(cks_tp_mem_h mem, const void *addr, size_t len, void *buf,
                                 size_t buf_len, size_t *len_p);
/** Nonzero when the connection's peer is on this host and reached through a
 *  data endpoint that has shared-memory transports (descriptors help). */
int cks_tp_conn_local(cks_tp_conn_h conn);
/** Is the peer at `addr` ("ipv4" or "ipv4:port") on this host: a loopback
 *  address, or one of this host's interfaces? Any thread. */
int cks_tp_peer_is_local(const char *addr);

/** A check of the bytes cks_tp_send_into() writes into a peer's memory:
 *  `fn` (a CRC with zlib-style chaining: seed 0, then the previous result)
 *  over them must give `expect`. `combine` (may be NULL) gives the CRC of
 *  a || b from fn's results over a and b and b's length: with it, the copy
 *  threads check the parts they write and the results are combined. */
typedef struct {
    uint64_t (*fn)(uint64_t seed, const void *buf, size_t len);
    uint64_t expect;
    uint64_t (*combine)(uint64_t crc_a, uint64_t crc_b, uint64_t len_b);
} cks_tp_check_t;

/** Send a reply whose payload goes into `dest`: the peer's memory when
 *  dest->is_rma (the bytes are written there, then the reply follows with
 *  CKS_WIRE_F_RMA and no payload), otherwise as cks_tp_send(). A failed
 *  write sends a STATUS_REPLY with the error instead. Same completion
 *  contract as cks_tp_send(); dest is only read during the call.
 *  With `check` (may be NULL) and a write into the peer's memory, the bytes
 *  are checked: where the region is mapped here, the bytes as written, slice
 *  by slice while they are in this core's cache (one pass over memory
 *  instead of two); elsewhere the payload, before it is written. Bytes that
 *  fail give CKS_ERR_CRC_MISMATCH: at once when nothing was written, else to
 *  `cb`, with a STATUS_REPLY of that error sent once the writes are done (the
 *  peer's bytes there are then garbage). Without a write into the peer's
 *  memory the check is not made: the payload travels and its reader checks. */
cks_status_t cks_tp_send_into(cks_tp_conn_h conn, unsigned type, uint64_t req_id,
                              const void *body, const void *payload, size_t payload_len,
                              cks_tp_mem_h payload_memh, const cks_tp_data_t *dest,
                              const cks_tp_check_t *check, cks_tp_done_cb_t cb, void *arg);

/** Map the whole region that `data` (an RMA descriptor) lies in, now, and
 *  fault its pages into this process's page tables on a helper thread of the
 *  transport, so that the first transfers into and out of it copy at full
 *  speed (a mapping's pages are otherwise faulted in by the first copies,
 *  which then run at half speed or less). The region stays mapped while the
 *  connection lives, as it does after a transfer. Returns CKS_INPROGRESS and
 *  calls cb(arg, status) later on the worker's thread (CKS_ERR_CANCELED when
 *  the worker goes first); CKS_OK when there is nothing to fault in (UCX does
 *  not map the peer's memory here, or it is already faulted in); an error
 *  status, with cb never called, when the descriptor cannot be used
 *  (CKS_ERR_UNSUPPORTED: no transport reaches the peer's memory). */
cks_status_t cks_tp_rma_prefault(cks_tp_conn_h conn, const cks_tp_data_t *data,
                                 cks_tp_done_cb_t cb, void *arg);

/** Register memory once with UCX (the arena, staging rings). */
cks_status_t cks_tp_mem_map(cks_tp_worker_h worker, void *addr, size_t len,
                            cks_tp_mem_h *mem_p);
void cks_tp_mem_unmap(cks_tp_mem_h mem);

#endif
