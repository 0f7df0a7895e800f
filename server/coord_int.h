/*
 * Ballots, grants and claims, shared by the files of coordinator failover
 * (claims.c, coord.c, fence.c, grant.c, takeover.c; see coord.c).
 */
#ifndef CKS_COORD_INT_H
#define CKS_COORD_INT_H

#include "server_int.h"

/* How long a claimant waits for the grants it still needs. */
#define CKS_SV_CLAIM_TIMEOUT_MS 2000
/* A grant outlives the version's deadline by this much. */
#define CKS_SV_CLAIM_MARGIN_S 60u
/* How long a server waits for the holder of its grant to answer before it
 * grants a takeover. */
#define CKS_SV_TAKEOVER_ASK_MS 1000
/* Reports kept for a takeover: at most this many on a server. */
#define CKS_SV_KEPT_MAX (256u * 1024u)
/* ... for this long at most (the version's outcome usually frees them). */
#define CKS_SV_KEPT_TTL_NS (3600ull * 1000000000ull)

typedef struct {
    uint32_t coord;
    uint32_t round;
    int fenced;     /* the holder records the outcome: no other ballot */
    int has_params; /* p holds the begin's parameters */
    uint64_t expires_ns;
    cks_msg_version_claim_t p; /* p.job unused */
} cks_sv_claim_t;

/* A begin or takeover waiting for the grants of the other servers. */
struct cks_sv_claiming {
    cks_server_h s;
    cks_tp_conn_h conn; /* the client's: referenced */
    uint64_t req_id;
    cks_msg_version_begin_t m; /* job points into `job` */
    char job[CKS_JOB_MAX_LEN + 1];
    cks_sv_claim_done_t done;
    uint32_t round;
    int takeover;
    unsigned need;      /* grants that make a majority */
    unsigned granted;   /* this server's own included */
    unsigned answered;  /* servers that answered (or could not be asked) */
    unsigned others;    /* servers asked (a takeover asks itself too) */
    int decided;
    int lost;           /* decided without a majority: late grants are withdrawn */
    uint8_t *grantors;  /* by position: CKS_SV_GRANTED, CKS_SV_UNREACHED, ... */
    cks_status_t refusal; /* the most telling refusal */
    char why[CKS_MSG_MAX_LEN];
};

/* One server asked a VERSION_CLAIM (a claim's or a fence's): the asker,
 * the server's position; freed by the answer's callback. */
typedef struct {
    void *owner; /* struct cks_sv_claiming or struct cks_sv_fencing */
    size_t pos;
} cks_sv_ask_t;

/* What a server answered a claim (grantors[]). */
enum { CKS_SV_UNASKED = 0, CKS_SV_GRANTED = 1, CKS_SV_UNREACHED = 2, CKS_SV_REFUSED = 3 };

/* Reports kept for a takeover (claims.c), by version. */
typedef struct {
    cks_msg_object_done_t m; /* strings point into key, why */
    char key[CKS_KEY_MAX_LEN + 1];
    char *why;
} cks_sv_kept_obj_t;

typedef struct {
    uint64_t expires_ns;
    size_t n, cap;
    cks_sv_kept_obj_t *o;
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    uint64_t version;
} cks_sv_kept_t;

/* ---- claims.c: the claim table, the fence rule, reports kept ---- */

cks_sv_claim_t *cks_sv_claim_get(cks_server_h s, const char *job, size_t job_len,
                                        uint64_t version);

cks_status_t cks_sv_claim_set(cks_server_h s, const char *job, size_t job_len,
                                     uint64_t version, uint32_t coord, uint32_t round,
                                     uint32_t ttl_s, const cks_msg_version_claim_t *params);

/* FENCE here: may ballot (round, coord) record the version's outcome? */
cks_status_t cks_sv_fence_here(cks_server_h s, const cks_wire_str_t *job,
                                      uint64_t version, uint32_t coord, uint32_t round,
                                      uint32_t ttl_s, char *why, size_t why_len);

void cks_sv_kept_free(cks_server_h s, cks_sv_kept_t *k);

/* ---- coord.c: the rules a server grants by, a candidate's claim ---- */

/* May `coord` begin the version (round 0), as far as this server knows? */
cks_status_t cks_sv_claim_check(cks_server_h s, const cks_wire_str_t *job, uint64_t version,
                                uint32_t coord, char *why, size_t why_len);

typedef void (*cks_sv_judged_t)(void *arg, cks_status_t status, const char *why);

/* Decide a takeover's claim (round > 0) here: done(arg, status, why), now or
 * once the holder of this server's grant was asked whether it is alive. */
void cks_sv_judge(cks_server_h s, const cks_msg_version_claim_t *m, cks_sv_judged_t done,
                  void *arg);

void cks_sv_claim_noop(void *arg, cks_status_t status, const char *msg);

void cks_sv_claim_run(cks_server_h s, cks_tp_conn_h conn, uint64_t req_id,
                             const cks_msg_version_begin_t *m, uint32_t round, int lost,
                             cks_sv_claim_done_t done);

/* ---- fence.c: the one round of VERSION_CLAIM to the other servers ---- */

/* The servers marked CKS_SV_UNREACHED in state[] (by position) named at
 * why + len (len: what why holds so far, as snprintf counted it), " <pos>"
 * each, with " (<addr>:<port>)" when `addrs`; cut off at why_len. */
void cks_sv_why_unreachable(cks_server_h s, const uint8_t *state, int addrs, char *why,
                            size_t why_len, int len);

/* cm asked of every other server, each answer to `answered` with its
 * cks_sv_ask_t {owner, pos}; a server that cannot be asked is marked
 * CKS_SV_UNREACHED in state[] (by position) and is not answered: returns how
 * many. */
unsigned cks_sv_claim_ask_others(cks_server_h s, const cks_msg_version_claim_t *cm,
                                 int timeout_ms, cks_tp_call_cb_t answered, void *owner,
                                 uint8_t *state);

/* ---- takeover.c: reports sent again to whoever took a version over ---- */

void cks_sv_kept_resend(cks_server_h s, const cks_wire_str_t *job, uint64_t version,
                               size_t to);

#endif
