/*
 * transport private: the UCX objects shared by ucx.c (connections, messages,
 * calls) and rma.c (one-copy transfers to and from a peer's memory on this
 * host).
 */
#ifndef CKS_TP_INT_H
#define CKS_TP_INT_H

#include "cks_tp.h"

#include <ucp/api/ucp.h>

#define CKS_TP_AM_ID 0
#define CKS_TP_AM_SENTINEL 1 /* sentinel.c: the worker's messages to itself */
#define CKS_TP_SENTINEL_EVERY_NS (1000ull * 1000000ull)
/* The most times cks_tp_worker_renew() replaces one worker's UCP worker
 * (each one replaced keeps its shared-memory segments until the destroy). */
#define CKS_TP_RETIRED_MAX 8u
#define CKS_TP_MAX_PENDING 256 /* default max_pending */
/* a call failed while UCX held its send: given up this long after, or
 * after the call's own timeout where that is shorter (a peer that stopped
 * answering costs a caller at most twice the timeout it set) */
#define CKS_TP_ABANDON_NS (5ull * 1000000000ull)
/* How long a closed endpoint stays known as closed after UCX finished
 * closing it (see closing_eps). */
#define CKS_TP_CLOSED_LINGER_NS (30ull * 1000000000ull)
#define CKS_TP_SEND_BUF (CKS_WIRE_HDR_LEN + CKS_WIRE_MAX_BODY)

typedef struct cks_tp_send_req cks_tp_send_req_t;

/* ucx.c: a worker of `context` for one thread; the active-message handler
 * `id` of a worker (whole messages). `what` names the step in a log line. */
cks_status_t cks_tp_ucp_worker_new(ucp_context_h context, ucp_worker_h *worker_p,
                                   const char *what);
cks_status_t cks_tp_am_handler_set(ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb,
                                   void *arg, const char *what);

struct cks_tp_send_req {
    cks_tp_send_req_t *next; /* free list; a connection's held sends */
    cks_tp_send_req_t *in_prev, *in_next; /* the worker's sends in UCX */
    cks_tp_worker_h worker;
    cks_tp_conn_h conn;
    cks_tp_done_cb_t cb;
    void *arg;
    /* a send held until the connection's handshake is done */
    size_t hdr_len;
    const void *payload;
    size_t payload_len;
    cks_mem_type_t mem_type;
    cks_tp_mem_h payload_memh;
    uint8_t hdr[CKS_TP_SEND_BUF];
};

typedef struct cks_tp_recv_req {
    cks_tp_worker_h worker;
    cks_tp_done_cb_t cb;
    void *arg;
    cks_tp_conn_h conn;     /* held while the payload comes */
    cks_dl_t dl;            /* the worker's receives, by deadline (see
                               recv_timeout_ms; CKS_DL_NEVER: none) */
} cks_tp_recv_req_t;

/* A peer's memory region, unpacked once and kept while the connection lives:
 * attaching a shared-memory segment and faulting in its pages costs more
 * than copying a few MiB out of it. */
#define CKS_TP_RKEYS 32
#define CKS_TP_FAULT_BLOCK (2u << 20)
#define CKS_TP_CHECK_SLICE (256u << 10) /* checked put: bytes per put, checked from cache */
/* A worker that cannot be armed and has nothing to progress (its sends wait
 * for room in a peer's shared-memory receive FIFO: UCX refuses to arm while
 * they wait, and raises no event when the peer frees room) spins this many
 * rounds, then sleeps this long per round, doubled every as many rounds up
 * to 16 times as long, so that a peer slow to drain, or stopped, is not met
 * with a busy core. */
#define CKS_TP_STALL_SPINS 16u
#define CKS_TP_STALL_NS    50000ull
typedef struct {
    uint8_t *packed; /* the peer's packed key (NULL: slot free) */
    size_t packed_len;
    uint64_t seg_base, seg_len;
    uint8_t token[CKS_WIRE_NONCE_LEN]; /* the owner's, checked in the region's header */
    ucp_rkey_h rkey;
    void *local;     /* where UCX maps the region here (NULL: it does not) */
    uint8_t *faulted; /* bit per CKS_TP_FAULT_BLOCK of the region: in our page tables */
    unsigned refs;   /* transfers in flight on it */
    uint64_t used_ns;
} cks_tp_rkey_t;

typedef struct cks_tp_call_req cks_tp_call_req_t;
/* Runs on the reply of a call, while its body is valid; may set c->status. */
typedef void (*cks_tp_call_hook_t)(cks_tp_call_req_t *c, const cks_wire_hdr_t *hdr,
                                   const cks_msg_any_t *body);

struct cks_tp_call_req {
    cks_dl_t dl; /* the worker's calls: due at the reply's deadline, then (failed
                    while UCX holds its send) at abandon_ns */
    cks_tp_call_hook_t hook;
    void *hook_arg;
    uint64_t req_id;
    unsigned type; /* the request's message type (for the log) */
    cks_tp_conn_h conn;
    int sending, replied;
    uint64_t abandon_ns; /* failed while UCX held its send: given up then */
    uint64_t grace_ns;   /* how long after failing: CKS_TP_ABANDON_NS or its timeout */
    cks_status_t status;
    char msg[CKS_MSG_MAX_LEN + 1];
    cks_tp_call_cb_t cb;
    void *arg;
    cks_tp_reply_cb_t on_reply; /* cks_tp_call_data(): the reply's body and payload */
};

struct cks_tp_conn {
    cks_tp_worker_h worker;
    ucp_ep_h ep;      /* made through the listener or by sockaddr */
    ucp_ep_h data_ep; /* made from the peer's worker address; NULL until upgraded */
    unsigned refs;
    int failed;
    int closed;
    uint64_t closed_ns; /* when it was closed */
    uint64_t grace_ns;  /* closed: its sends UCX holds are given up this long after
                           (0: CKS_TP_ABANDON_NS; a timed-out call's timeout if shorter) */
    int implicit; /* made by UCX, adopted by cks_tp_conn_adopt() */
    int outgoing; /* made by cks_tp_conn_connect(): we chose the peer */
    int unanswered; /* outgoing, and a call on it timed out unanswered */
    int local;    /* the data endpoint reaches a process of this host (shared memory) */
    int forged_logged; /* it answered a call of another connection (logged once) */
    int retired;  /* its endpoints belong to a worker cks_tp_worker_renew() replaced */
    uint8_t *peer_waddr; /* the worker address the data endpoint was made from */
    size_t peer_waddr_len;
    int accepted;      /* made by a listener (cks_tp_listener_create()) */
    int guest;         /* counted in nguests: accepted, not authenticated as a peer */
    int client;        /* counted in nclients: authenticated, not as a peer */
    uint64_t accepted_ns;
    int handshaking; /* cks_tp_conn_handshake() runs: other sends are held */
    char hs_error[160]; /* why the last handshake failed ("" if it did not) */
    unsigned sends;       /* sends in flight */
    uint64_t progress_ns; /* when one last completed, or the first began */
    int overrun;          /* a request came with max_pending sends in flight */
    int refused;          /* accepted past max_conns, to be closed */
    uint64_t close_at_ns; /* cks_tp_conn_close_later(): drop its messages, close then */
    cks_tp_send_req_t *held_head, *held_tail;
    cks_tp_auth_t auth;
    cks_tp_rkey_t rkeys[CKS_TP_RKEYS]; /* peers' memory we read and write (rma.c) */
    void *user;
    char peer[64];
    cks_tp_conn_h prev, next; /* worker's list */
};

struct cks_tp_listener {
    cks_tp_worker_h worker;
    ucp_listener_h listener;
    uint16_t port;
    cks_tp_accept_cb_t on_accept;
    void *arg;
};

struct cks_tp_mem {
    cks_tp_worker_h worker;
    ucp_mem_h memh;
    int allocated;        /* cks_tp_mem_alloc(): UCX allocated it */
    void *base;           /* where it is mapped, and how long */
    size_t len;
    void *rkey;           /* cks_tp_mem_alloc(): packed remote key */
    size_t rkey_len;
};

/* Map from ucp_ep_h to its connection: reply endpoints arrive as ucp_ep_h. */
typedef struct {
    ucp_ep_h ep;
    cks_tp_conn_h conn;
    uint64_t until_ns; /* closing_eps: kept until then (UINT64_MAX: closing) */
} cks_tp_slot_t;

/* An open-addressing map from endpoints (conn.c). */
typedef struct {
    cks_tp_slot_t *slots;
    size_t n, used;
} cks_tp_eptab_t;

struct cks_tp_worker {
    cks_tp_worker_params_t params;
    char name[64];
    /* What the layers above a connection do when it goes: conn.c calls
     * them, ucx.c sets them when it makes the worker (so that no file
     * calls up): fail its held sends (send.c), fail its calls (call.c). */
    void (*held_fail)(cks_tp_conn_h conn, cks_status_t status);
    void (*calls_fail)(cks_tp_worker_h w, cks_tp_conn_h conn, cks_status_t status);
    uint64_t abandon_check_ns; /* next look for sends held on closed connections */
    cks_dl_list_t recvs; /* payloads being received (rendezvous) */
    ucp_context_h context;
    ucp_worker_h worker;
    int efd;
    cks_tp_conn_h conns; /* every open connection */
    unsigned nconns;
    uint64_t refused_log_ns; /* last "too many connections" line */
    cks_tp_eptab_t eps;     /* live endpoints -> their connection */
    /* Endpoints closed, until CKS_TP_CLOSED_LINGER_NS after UCX finished
     * closing them: a message UCX still delivers on one (UCX 1.13 did, after
     * the close completed) is dropped, never taken for an endpoint UCX made
     * by itself (cks_tp_conn_adopt()): UCX frees it, and a map entry left for
     * it named a freed connection once UCX reused its address. */
    cks_tp_eptab_t closing_eps;
    uint64_t closing_purge_ns; /* the next look for entries past their time */
    cks_tp_send_req_t *free_sends;
    cks_tp_send_req_t *inflight; /* sends UCX holds (a list through in_next) */
    unsigned closing; /* endpoint close requests in flight */
    int flushing;     /* cks_tp_worker_quiesce()'s flush: 1 in flight, 0 done, -1 failed */
    int stopping;     /* cks_tp_worker_quiesce() ran: no new connections or calls */
    int destroying;   /* cks_tp_worker_destroy() freed the connections */
    /* Endpoints to close once ucp_worker_progress() has returned, not from
     * the callback inside it that asks (an error callback), while UCX may
     * still walk the transport endpoints that the close frees. */
    unsigned in_progress;
    struct cks_tp_deferred_close {
        ucp_ep_h ep;
        int force;
    } *deferred;
    size_t ndeferred, deferred_cap;
    ucp_address_t *address;
    size_t address_len;
    int data_peer_errmode; /* see cks_tp_conn_upgrade() */
    /* rma.c: our token, written at the head of every region we allocate;
     * and the shape of a key UCX packs for such a region on this host */
    uint8_t rma_token[CKS_WIRE_NONCE_LEN];
    uint8_t *key_shape;    /* NULL: keys cannot be checked, descriptors refused */
    size_t key_shape_len, key_map_len;
    /* where such a key holds its shared-memory domain's bytes, and which
     * domain that is (CKS_TP_SEG_*, rma.c; 0: none found) */
    size_t key_seg_off;
    int key_seg_kind;
    cks_workq_t *pf;       /* prefault.c: the prefault queue (NULL until first needed) */
    struct cks_tp_copy *copy; /* copy.c: copy threads (NULL: none, UCX copies) */
    int require_auth;      /* see cks_tp_worker_require_auth() */
    unsigned nguests;      /* accepted connections not authenticated as peers */
    unsigned nclients;     /* ...of which authenticated (as clients) */
    unsigned peer_room;    /* see cks_tp_worker_set_peer_room() */
    cks_hmap_t *calls;      /* req_id -> cks_tp_call_req_t */
    cks_dl_list_t calls_dl; /* calls in flight (cks_tp_call_req_t.dl) */
    int progressed;         /* the last cks_tp_worker_progress() did something */
    unsigned stalls;        /* arms refused since, with nothing progressed */
    struct cks_tp_sentinel *sentinel; /* sentinel.c (NULL: none) */
    /* UCP workers cks_tp_worker_renew() replaced: never progressed again,
     * destroyed with this one (another thread may still signal one) */
    ucp_worker_h retired[CKS_TP_RETIRED_MAX];
    unsigned nretired;
    unsigned nlisteners; /* open listeners (a worker with one is not renewed) */
};

/* ucx.c */
cks_status_t cks_tp_status(ucs_status_t st, const char *what);
cks_tp_send_req_t *cks_tp_send_req_get(cks_tp_worker_h w);
void cks_tp_send_req_put(cks_tp_worker_h w, cks_tp_send_req_t *s);
/* Send s->hdr[0..hdr_len) and the payload; s is recycled on every path. */
cks_status_t cks_tp_send_hdr(cks_tp_conn_h conn, cks_tp_send_req_t *s, size_t hdr_len,
                             const void *payload, size_t payload_len, cks_mem_type_t mem_type,
                             cks_tp_mem_h payload_memh, cks_tp_done_cb_t cb, void *arg);

/* rma.c */
/* Parse the RMA descriptor that came as a message's AM data into d. */
cks_status_t cks_tp_rma_parse(const void *buf, size_t len, cks_tp_data_t *d);
/* Walk a packed remote key of `len` bytes whose memory-domain map is
 * `map_len` bytes: 0 when it has the layout UCX packs for host memory (and,
 * with `shape` non-NULL and at least `len` bytes, the same size bytes as
 * `shape`), else -1. Reads only k[0 .. len). */
int cks_tp_key_walk(const uint8_t *k, size_t len, size_t map_len, const uint8_t *shape);
/* cks_tp_data_recv() of a payload that stays in the peer's memory. */
cks_status_t cks_tp_rma_get(cks_tp_worker_h w, cks_tp_data_t *data, void *buf,
                            cks_tp_done_cb_t cb, void *arg);
/* Make the worker's token and learn the key shape (at worker creation);
 * failures only disable descriptors. */
void cks_tp_rma_init(cks_tp_worker_h w);
/* Release a connection's remote keys (when it is freed). */
void cks_tp_rkeys_release(cks_tp_conn_h conn);
/* Finished prefaults: mark their regions faulted in, call back (worker
 * thread); returns how many finished. */
unsigned cks_tp_rma_pf_poll(cks_tp_worker_h w);
/* Stop the prefault thread; what it had not finished is called back with
 * CKS_ERR_CANCELED (worker destroy, before connections go). */
void cks_tp_rma_pf_stop(cks_tp_worker_h w);

/* copy.c: copy threads for large transfers from or to a peer's region
 * mapped here (see the top of copy.c). */
#define CKS_TP_COPY_MIN  (2u << 20) /* smaller transfers: UCX, on the worker's thread */
#define CKS_TP_COPY_PART (1u << 20) /* bytes a thread takes at a time */
typedef struct cks_tp_copy_job cks_tp_copy_job_t;
typedef void (*cks_tp_copy_cb_t)(void *arg, cks_status_t status);
/* 1 when a transfer of len bytes goes to the copy threads. */
int cks_tp_copy_wants(cks_tp_worker_h w, size_t len);
/* Copy len bytes from src to dst on the copy threads; cb runs on the
 * worker's thread (cks_tp_copy_poll()) with CKS_OK, CKS_ERR_CANCELED at
 * stop, or CKS_ERR_CRC_MISMATCH when check (may be NULL; with a combine)
 * over the bytes written is not check->expect. fault: fault in the peer's side of each part first (peer_is_dst
 * says which side that is). */
cks_status_t cks_tp_copy_submit(cks_tp_worker_h w, void *dst, const void *src, size_t len,
                                int fault, int peer_is_dst, const cks_tp_check_t *check,
                                cks_tp_copy_cb_t cb, void *arg);
/* Finished jobs: their callbacks, in order; returns how many. */
unsigned cks_tp_copy_poll(cks_tp_worker_h w);
/* Stop the threads (at quiesce): queued parts are cancelled, every job is
 * called back. */
void cks_tp_copy_stop(cks_tp_worker_h w);

/* ---- between ucx.c, conn.c (connections, listener), call.c (calls and
 * their deadlines) and handshake.c (the client side of the handshake) ---- */

void cks_tp_held_release(cks_tp_conn_h conn, cks_status_t status);
/* Payloads late past recv_timeout_ms close their connections (ucx.c, from
 * cks_tp_worker_sweep()); returns ms until the next is due, or -1. */
int cks_tp_recvs_expire(cks_tp_worker_h w);
/* send.c: free the pool of send requests and those UCX never completed
 * (after ucp_worker_destroy()) */
void cks_tp_sends_free(cks_tp_worker_h w);

/* recv.c: the worker's one active-message handler */
ucs_status_t cks_tp_am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param);

static inline ucs_memory_type_t cks_tp_mem_type(cks_mem_type_t t)
{
    return t == CKS_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

cks_tp_conn_h cks_tp_slot_find(cks_tp_worker_h w, ucp_ep_h ep);
/* Is ep one that was closed, whose close UCX has not finished? */
int cks_tp_ep_closing(cks_tp_worker_h w, ucp_ep_h ep);

unsigned cks_tp_progress_once(cks_tp_worker_h w);
unsigned cks_tp_progress_ucp(cks_tp_worker_h w, ucp_worker_h uw);

void cks_tp_conn_detach(cks_tp_conn_h conn, int force);

void cks_tp_conn_fail(cks_tp_conn_h conn, int force, cks_status_t status);

cks_tp_conn_h cks_tp_conn_adopt(cks_tp_worker_h w, ucp_ep_h ep);

int cks_tp_call_reply(cks_tp_worker_h w, cks_tp_conn_h conn, int via_data,
                      const cks_wire_hdr_t *hdr, const cks_msg_any_t *body, cks_tp_data_t *data);

void cks_tp_calls_fail_conn(cks_tp_worker_h w, cks_tp_conn_h conn, cks_status_t status);

cks_status_t cks_tp_call_hooked(cks_tp_conn_h conn, unsigned type, uint32_t flags,
                                const void *body, const void *payload, size_t payload_len,
                                cks_tp_mem_h payload_memh, int timeout_ms, cks_tp_call_cb_t cb,
                                void *arg, cks_tp_call_hook_t hook, void *hook_arg,
                                cks_tp_reply_cb_t on_reply);

/* ---- between rma.c, prefault.c and rma_xfer.c ---- */

void cks_tp_rkey_fault(cks_tp_rkey_t *rk, uint64_t addr, size_t len);

int cks_tp_rkey_unfaulted(cks_tp_rkey_t *rk, uint64_t addr, size_t len);

cks_status_t cks_tp_rkey_get(cks_tp_conn_h conn, const cks_tp_data_t *d,
                                    cks_tp_rkey_t **rk_p);

#endif
