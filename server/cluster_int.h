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
#define CKS_SV_MEMBER_TIMEOUT_MS 10000
/* A member that failed a chunk put is skipped (its chunks counted missing
 * at once) for this long, so that one dead server does not cost every
 * object of a checkpoint a timeout; after that, for as long as it answers
 * none of the handshakes tried meanwhile (cut off, killed), up to
 * CKS_SV_PEER_DOWN_MAX_NS, when a chunk put asks it again. */
#define CKS_SV_PEER_DOWN_NS     (5ull * 1000000000ull)
#define CKS_SV_PEER_DOWN_MAX_NS (60ull * 1000000000ull)
/* ... while a handshake is tried every this long (a new connection once the
 * last one failed, or its handshake went unanswered for CKS_SV_PEER_HELLO_NS) */
#define CKS_SV_PEER_PROBE_NS (50ull * 1000000ull)
#define CKS_SV_PEER_HELLO_NS (1000ull * 1000000ull)
#define CKS_SV_SEAL_TIMEOUT_NS (60ull * 1000000000ull)
#define CKS_SV_CHUNK_MAX       (64u << 20)

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

void cks_sv_object_done_local(cks_server_h s, const cks_msg_object_done_t *m,
                              cks_status_t *status_p, char *why, size_t why_len);

#endif
