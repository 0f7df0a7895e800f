/*
 * The cluster modules' shared internals: timeouts, and the functions one
 * module (peer.c, primary.c, member.c, cluster.c) calls in another.
 */
#ifndef CKS_CLUSTER_INT_H
#define CKS_CLUSTER_INT_H

#include "server_int.h"

#define CKS_SV_CALL_TIMEOUT_MS 30000
/* How long a primary waits for a member to take a chunk before it counts
 * the chunk as missing (the object is then stored DEGRADED when no stripe
 * misses more than m chunks), and a coordinator for a member to take a
 * manifest or a drop. */
#define CKS_SV_MEMBER_TIMEOUT_MS ((int)CKS_WIRE_MEMBER_MS_DEFAULT)
/* ... unless the version's writer set its own (PUT's and VERSION_BEGIN's
 * member_ms, checked against CKS_WIRE_MEMBER_MS_MIN .. _MAX) */
static inline int cks_sv_member_ms(uint32_t ms)
{
    /* one out of range (a claim's, which no client request checked) counts
     * as none */
    return ms >= CKS_WIRE_MEMBER_MS_MIN && ms <= CKS_WIRE_MEMBER_MS_MAX
               ? (int)ms
               : CKS_SV_MEMBER_TIMEOUT_MS;
}
/* A member that failed a chunk put, or left a handshake (any call's)
 * unanswered (peer.c), is skipped (its chunks counted missing at once) for
 * this long, so that one dead server does not cost every object of a
 * checkpoint a timeout; after that, for as long as it answers none of the
 * handshakes tried meanwhile (cut off, killed), up to
 * CKS_SV_PEER_DOWN_MAX_NS, when a chunk put asks it again. */
#define CKS_SV_PEER_DOWN_NS     (5ull * 1000000000ull)
#define CKS_SV_PEER_DOWN_MAX_NS (60ull * 1000000000ull)
/* ... while a handshake is tried every this long (a new connection once the
 * last one failed, or its handshake went unanswered for CKS_SV_PEER_HELLO_NS) */
#define CKS_SV_PEER_PROBE_NS (50ull * 1000000ull)
#define CKS_SV_PEER_HELLO_NS (1000ull * 1000000ull)
/* A connection whose handshake went unanswered this long is not used for
 * new calls: it was most likely made while the peer could not be reached,
 * and its connect waits out TCP's SYN backoff (cks_sv_peer()) */
#define CKS_SV_PEER_STALE_NS (2000ull * 1000000ull)
#define CKS_SV_SEAL_TIMEOUT_NS (60ull * 1000000000ull)
#define CKS_SV_CHUNK_MAX       (64u << 20)

/* Versions left OPEN without their coordinator state, claimed again
 * (lost.c): every this long, this many times at most. */
#define CKS_SV_RELOST_EVERY_NS (5ull * 1000000000ull)
#define CKS_SV_RELOST_TRIES    720
/* Drops a peer missed, sent again (outcome.c): at most this many kept, one
 * try every CKS_SV_OWED_EVERY ns. */
#define CKS_SV_OWED_MAX   4096
#define CKS_SV_OWED_EVERY (1000000000ull) /* ns between tries */
/* An owed drop's call: short, so that one sent while the peer was cut off
 * (its connection stalled in TCP's retries) is sent again on a new
 * connection within seconds of the peer's return, not after the 30 s of
 * CKS_SV_CALL_TIMEOUT_MS. */
#define CKS_SV_OWED_CALL_MS 5000
/* Objects a primary owes the coordinator (objects.c): see there. */
#define CKS_SV_OWED_EVERY_NS (250ull * 1000000ull) /* how often a debtor is asked */
#define CKS_SV_OWED_ASK_MS   2000                   /* how long an answer may take */
/* A takeover asks the primaries that still owe objects to report them
 * again this often (objects.c). */
#define CKS_SV_REPORT_AGAIN_NS (1000ull * 1000000ull)
#define CKS_SV_WAITLOG_NS      (2000ull * 1000000ull) /* objects.c's debug line */
#define CKS_SV_OWED_GONE     2                      /* failed questions in a row: gone */

/* Broadcasts to every other server: a manifest in pages, or a drop. */
typedef struct {
    cks_server_h s;
    cks_sv_version_t *v;
    size_t pos;
    size_t next;   /* commit: next object to send */
    int drop;      /* 1: VERSION_DROP */
    uint32_t drop_state;
    uint8_t *page;
} cks_bcast_t;

struct cks_cput;

cks_ec_h cks_sv_ec(cks_server_h s, unsigned k, unsigned m);

int cks_sv_geometry_differs(const cks_sv_version_t *v, unsigned k, unsigned m,
                            uint64_t chunk_size);

uint64_t cks_sv_object_digest(const char *key, size_t len, uint64_t size);

int cks_sv_peers_probe(cks_server_h s);

int cks_sv_rank_foreign(const cks_sv_version_t *v, int32_t rank);

int cks_sv_unreachable(cks_status_t st);

void cks_cput_spread(struct cks_cput *p);

void cks_sv_slow_sends(cks_server_h s, int all);

/* Test builds: chunks held back by fault chunk_hold, recorded once due (all:
 * failed now, at shutdown). */
void cks_sv_held_chunks(cks_server_h s, int all);
/** Send again the chunks on s->chunks_again that are due (all: fail them, at a stop). */
void cks_sv_chunks_again(cks_server_h s, int all);
/* a chunk its stripe cannot do without, whose connection failed at once: sent again this often */
#define CKS_SV_CHUNK_AGAIN_NS (200ull * 1000000ull)

/* ---- between the coordinator's files (cluster.c's DESIGN names them, top
 * down; each calls only those below it) ---- */

/* claims.c: who coordinates a version, and the versions to claim again */

/* Is `v` a version this server coordinates and that still takes work? */
int cks_sv_cv_open(const cks_sv_version_t *v);

int cks_sv_coordinated_elsewhere(cks_server_h s, const cks_sv_version_t *v,
                                        const cks_wire_str_t *job, uint64_t version,
                                        char *why, size_t why_len);

/* A version left OPEN here without its coordinator state, claimed again by
 * lost.c (cks_sv_relost_run()). */
typedef struct cks_sv_relost {
    struct cks_sv_relost *next;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
    uint64_t next_ns;
    unsigned tries;
    uint32_t round; /* the ballot's round of the next claim */
    int in_flight;
} cks_sv_relost_t;

void cks_sv_relost_add(cks_server_h s, const char *job, size_t job_len,
                              uint64_t version, uint64_t when_ns);

/* The entry of (job, version), unlinked from the list when `unlink`; NULL
 * when there is none. */
cks_sv_relost_t *cks_sv_relost_find(cks_server_h s, const cks_wire_str_t *job, uint64_t version,
                                    int unlink);

/* lost.c: orphans and versions left OPEN, claimed, then dropped */

int cks_sv_object_orphan(cks_server_h s, const cks_msg_object_done_t *m);

/* Claim again the listed versions that are due (the cluster's progress). */
void cks_sv_relost_run(cks_server_h s, uint64_t now);

/* objects.c: the objects a version's primaries report and owe */

void cks_sv_object_done_local(cks_server_h s, const cks_msg_object_done_t *m,
                              cks_status_t *status_p, char *why, size_t why_len);

cks_status_t cks_sv_owed_sealed(cks_server_h s, cks_sv_version_t *v,
                                       const cks_wire_str_t *primaries);

void cks_sv_cv_owed_each(const void *key, size_t len, void *value, void *arg);

/* outcome.c: seals decided, commit and abort, the broadcasts, drops owed */

void cks_sv_owed_send(cks_server_h s, int all_cancel);

/* How long an abort's or delete's callers wait for a server that does not
 * take its drop (cks_sv_drop_grace()). */
#define CKS_SV_DROP_GRACE_NS (1000ull * 1000000ull)
void cks_sv_drop_grace(cks_server_h s, cks_sv_version_t *v);

const cks_sv_aborted_t *cks_sv_aborted_find(cks_server_h s, const cks_wire_str_t *job,
                                                   uint64_t version);

void cks_sv_cv_finish(cks_server_h s, cks_sv_version_t *v, int commit);

void cks_sv_cv_check(cks_server_h s, cks_sv_version_t *v);

/* cluster.c */

void cks_sv_cv_kick(const void *key, size_t len, void *value, void *arg);

#endif
