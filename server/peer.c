/*
 * DESIGN: a cluster server's connections to the other servers (peers):
 * made on first use, each with its handshake; a member that failed a chunk
 * put or left a handshake unanswered (cks_sv_peer_silent()) is skipped a
 * while and probed with new handshakes until it answers;
 * and the small helpers every cluster role shares.
 *
 * Never: wait here (every step is a callback on the progress thread).
 */
#include "cluster_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- peers ------------------------------------------------------------------------ */

/* A handshake with a peer: which one, and its number. */
typedef struct {
    cks_server_h s;
    size_t pos; /* s->peers[pos], as long as the server lives */
    uint64_t gen;
} cks_sv_hello_t;

/* The peer at `pos` left a handshake of ours unanswered in time (cut off,
 * stopped): it is skipped as a member whose chunk put timed out is,
 * whichever call found it, until it answers a handshake (the probes of
 * cks_sv_peer_down(): a live peer answers one within milliseconds).
 * Before, each primary learned it only from a chunk put's own timeout, and
 * a server whose catch-up or repair reads had found it silent still made
 * its next objects wait the member timeout for it. A call that timed out
 * does not count (a live peer may take its time over one), nor does a
 * refused or lost connection (killed, not yet started, or a peer that
 * refused our proof): it costs a chunk put nothing, failing at once. */
static void cks_sv_peer_silent(cks_server_h s, size_t pos, const char *what)
{
    cks_sv_peer_t *p = &s->peers[pos];
    uint64_t now     = cks_time_ns();
    if (p->down_ns != 0 && now - p->down_ns < CKS_SV_PEER_DOWN_MAX_NS) {
        return; /* skipped already */
    }
    const cks_cluster_server_t *cs = cks_cluster_server(s->map, pos);
    cks_warn("server %zu (%s:%u) is silent (it %s): its chunks are counted missing at once "
             "until it answers a handshake",
             pos, cs->addr, cs->port, what);
    p->down_ns = now;
}

static void cks_sv_hello_done(void *arg, cks_status_t status)
{
    cks_sv_hello_t *h = arg;
    cks_sv_peer_t *p  = &h->s->peers[h->pos];
    int ours          = p->hello_gen == h->gen;
    uint64_t waited   = ours && p->hello_ns != 0 ? cks_time_ns() - p->hello_ns : 0;
    if (status == CKS_OK) {
        p->down_ns = 0; /* it answers: no longer skipped (a restarted server) */
    } else {
        /* a probe of a skipped member fails every 50 ms while it is down */
        cks_log(p->down_ns != 0 ? CKS_LOG_DEBUG : CKS_LOG_WARN,
                "handshake with a peer failed: %s (server %zu)", cks_status_string(status),
                h->pos);
        /* silent: no answer in time, or a failure that came only after a
         * second without one (a host gone from the network: "destination
         * unreachable" once its address no longer resolves), not a refusal */
        if (ours && (status == CKS_ERR_TIMEOUT ||
                     (cks_sv_unreachable(status) && waited >= CKS_SV_PEER_HELLO_NS))) {
            cks_sv_peer_silent(h->s, h->pos, status == CKS_ERR_TIMEOUT
                                                 ? "let a handshake time out"
                                                 : "failed a handshake after a second");
        }
    }
    if (ours) {
        p->hello_ns = 0;
    }
    free(h);
}

/* The connection to the server at `pos`, made on first use. */
cks_tp_conn_h cks_sv_peer(cks_server_h s, size_t pos)
{
    cks_sv_peer_t *p = &s->peers[pos];
    const cks_cluster_server_t *cs;
    int stale = p->hello_ns != 0 && cks_time_ns() - p->hello_ns >= CKS_SV_PEER_STALE_NS;

    if (p->conn != NULL && !cks_tp_conn_failed(p->conn) && !cks_tp_conn_unanswered(p->conn) &&
        !stale) {
        return p->conn;
    }
    if (p->conn != NULL) {
        if (!cks_tp_conn_failed(p->conn) && stale) {
            /* a live peer answers a handshake within milliseconds (a call
             * may take its time: a call that timed out does not count) */
            cks_sv_peer_silent(s, pos, "left a handshake unanswered for 2 s");
        }
        /* failed, or a call on it went unanswered: the peer may be a process
         * that is gone while UCX has not noticed (killed and started again on
         * its address, and our endpoint still reaches the old one); the next
         * calls go on a new connection, those in flight keep their deadlines.
         * Its handshake unanswered for CKS_SV_PEER_STALE_NS: most likely made
         * while this server was cut off, its connect waits out TCP's SYN
         * backoff (seconds after the link is back), and the calls queued on
         * it fail when the first of them times out - a primary's chunk puts
         * queued behind an unanswered REPAIR_CHECK counted members that were
         * up as unreachable (partition/primary_plugged_back_in_...) */
        cks_tp_conn_put(p->conn);
        p->conn = NULL;
    }
    cs = cks_cluster_server(s->map, pos);
    if (cks_tp_conn_connect(s->tp, cs->addr, cs->port, &p->conn) != CKS_OK) {
        p->conn = NULL;
        return NULL;
    }
    cks_tp_conn_set_user(p->conn, p);
    /* requests may follow at once: they queue behind the handshake on the
     * listener endpoint, and a server with a secret answers nothing else
     * before AUTH */
    cks_sv_hello_t *h = malloc(sizeof(*h));
    if (h == NULL) {
        cks_tp_conn_put(p->conn);
        p->conn = NULL;
        return NULL;
    }
    *h          = (cks_sv_hello_t){s, pos, ++p->hello_gen};
    p->hello_ns = cks_time_ns();
    if (cks_tp_conn_handshake(p->conn, s->name, s->has_peer_secret ? &s->peer_secret : NULL,
                              CKS_SV_CALL_TIMEOUT_MS, cks_sv_hello_done, h) !=
        CKS_INPROGRESS) {
        free(h);
        p->hello_ns = 0;
        cks_tp_conn_put(p->conn);
        p->conn = NULL;
    }
    return p->conn;
}

cks_tp_conn_h cks_sv_peer_conn(cks_server_h s, size_t pos)
{
    return cks_sv_peer(s, pos);
}

int cks_sv_cluster_conn_err(cks_server_h s, cks_tp_conn_h conn)
{
    cks_sv_peer_t *p = cks_tp_conn_user(conn);
    if (s->map == NULL || p == NULL || p < s->peers ||
        p >= s->peers + cks_cluster_nservers(s->map)) {
        return 0;
    }
    if (p->conn == conn) {
        p->conn = NULL;
        cks_tp_conn_put(conn);
    }
    return 1;
}

/* Did this member fail a chunk put, or leave a handshake unanswered, a
 * moment ago? While it is skipped, a handshake on a new connection is tried every
 * CKS_SV_PEER_PROBE_NS (here, and from the server loop:
 * cks_sv_peers_probe()): a server restarted on its address answers it, and
 * is used again at once (cks_sv_hello_done()). After CKS_SV_PEER_DOWN_NS it
 * is skipped only while no handshaken connection to it stands (before,
 * every 5 s a member cut off cost the objects then in flight a 10 s timeout
 * again); a connection whose handshake or a call went unanswered is none. */
int cks_sv_peer_down(cks_server_h s, size_t pos)
{
    cks_sv_peer_t *p = &s->peers[pos];
    uint64_t now     = cks_time_ns();
    if (p->down_ns == 0 || now - p->down_ns >= CKS_SV_PEER_DOWN_MAX_NS ||
        (now - p->down_ns >= CKS_SV_PEER_DOWN_NS && p->hello_ns == 0 &&
         p->conn != NULL && !cks_tp_conn_failed(p->conn) &&
         !cks_tp_conn_unanswered(p->conn))) {
        return 0;
    }
    if (!s->stop && now - p->probe_ns >= CKS_SV_PEER_PROBE_NS) {
        p->probe_ns = now;
        if (p->conn != NULL && p->hello_ns != 0 && now - p->hello_ns >= CKS_SV_PEER_HELLO_NS) {
            /* its handshake is not answered: our endpoint may reach a process
             * that is gone while a new one serves the address */
            cks_tp_conn_put(p->conn);
            p->conn = NULL;
        }
        (void)cks_sv_peer(s, pos); /* a new connection when the last one failed */
    }
    return p->down_ns != 0;
}

/* Probe every skipped member (server loop); 1 while one is skipped. */
int cks_sv_peers_probe(cks_server_h s)
{
    int any = 0;
    for (size_t i = 0; i < cks_cluster_nservers(s->map); i++) {
        if (i != s->self && s->peers[i].down_ns != 0) {
            any |= cks_sv_peer_down(s, i);
        }
    }
    return any;
}

/* Did a call fail because its server could not be reached in time? */
int cks_sv_unreachable(cks_status_t st)
{
    return st == CKS_ERR_UNREACHABLE || st == CKS_ERR_CONN_LOST || st == CKS_ERR_TIMEOUT;
}

/* The digest of one object a rank put, as VERSION_SEAL carries them XORed. */
uint64_t cks_sv_object_digest(const char *key, size_t len, uint64_t size)
{
    uint8_t be[8];
    cks_put_be64(be, size);
    return cks_crc64(cks_crc64(0, key, len), be, sizeof(be));
}

/* Is `rank` (a put's rank tag) none of the version's ranks? No tag (-1) is
 * allowed: the digests the ranks send decide whether the object is theirs. */
int cks_sv_rank_foreign(const cks_sv_version_t *v, int32_t rank)
{
    return rank != -1 && (rank < 0 || (uint32_t)rank >= v->rec.nranks);
}

/* Does an object's geometry differ from that of the version `v` coordinated
 * here? Readers read every object of a version, and of its children, with
 * the version's geometry: an object written with another is refused. */
int cks_sv_geometry_differs(const cks_sv_version_t *v, unsigned k, unsigned m,
                                   uint64_t chunk_size)
{
    return k != v->rec.ec_k || m != v->rec.ec_m || chunk_size != v->rec.chunk_size;
}

cks_ec_h cks_sv_ec(cks_server_h s, unsigned k, unsigned m)
{
    if (s->ec[k][m] == NULL && cks_ec_create(k, m, &s->ec[k][m]) != CKS_OK) {
        return NULL;
    }
    return s->ec[k][m];
}

cks_ec_h cks_sv_ec_get(cks_server_h s, unsigned k, unsigned m)
{
    return cks_sv_ec(s, k, m);
}
