/*
 * Test support: a raw transport client of one server on this host. It speaks
 * the wire protocol through libckstore's transport directly (no client
 * library), so that a test can send what a client never would: hand-made
 * descriptors, keys of memory that is gone, requests out of order. Every
 * wait is bounded. Criterion assertions fail the calling test.
 */
#ifndef CKS_TEST_RAW_H
#define CKS_TEST_RAW_H

#include "cks_tp.h"

#include <stdint.h>

typedef struct {
    cks_tp_worker_h w;
    cks_tp_conn_h conn;
    int hs_done;
    cks_status_t hs_status;
    int got, sent, lost; /* replies, payloads sent, connections lost */
    cks_wire_hdr_t hdr;  /* of the last reply */
    int32_t status;      /* of the last reply */
    char msg[256];       /* its text */
    struct {
        uint64_t req_id;
        int32_t status;
    } log[32];           /* the last replies, oldest first (a ring of 32) */
    unsigned nlog;       /* replies logged in all */
} cks_test_raw_t;

/** The status of the logged reply to req_id (the last 32 replies), or 1
 *  when none of them answers it. */
int32_t cks_test_raw_status_of(const cks_test_raw_t *r, uint64_t req_id);

/* Progress r's worker until cond holds or ms pass. */
#define CKS_TEST_RAW_WAIT(r, cond, ms)                                              \
    do {                                                                            \
        uint64_t until_ = cks_time_ns() + (uint64_t)(ms) * 1000000ull;              \
        while (!(cond) && cks_time_ns() < until_) {                                 \
            cks_tp_worker_wait((r)->w, 20);                                         \
            cks_tp_worker_expire((r)->w);                                           \
        }                                                                           \
    } while (0)

/** Zero r and create its worker (replies and losses counted into r). */
cks_status_t cks_test_raw_worker(cks_test_raw_t *r, const char *name);
/** A worker, a connection to 127.0.0.1:port and the HELLO handshake, and the
 *  data endpoint to the server (on this host) up; asserts each step. */
void cks_test_raw_open(cks_test_raw_t *r, uint16_t port, const char *name);
void cks_test_raw_close(cks_test_raw_t *r);
/** A one-copy PUT (CKS_WIRE_F_RMA) of `size` bytes into (job, version, key),
 *  kind other, from the memory that the descriptor desc (len bytes) names:
 *  cks_test_raw_request() with req_id; 1 when a reply came within wait_ms. */
int cks_test_raw_put(cks_test_raw_t *r, uint64_t req_id, const char *job, uint64_t version,
                     const char *key, uint64_t size, const void *desc, size_t len, int wait_ms);
/** A connection from w to 127.0.0.1:port and the transport's own handshake
 *  on it as `name` (with `secret`, which may be NULL), waited for at most
 *  15 s (asserts that it ended): its status; the connection in *conn_p. */
cks_status_t cks_test_raw_handshake(cks_tp_worker_h w, uint16_t port, const char *name,
                                    const cks_tp_secret_t *secret, cks_tp_conn_h *conn_p);
/** Send a message with a payload (e.g. a descriptor), wait (bounded) for the
 *  payload to be sent and for one reply; 1 when a reply came (r->status,
 *  r->msg), 0 when none did within wait_ms. */
int cks_test_raw_request(cks_test_raw_t *r, unsigned type, uint32_t flags, uint64_t req_id,
                         const void *body, const void *payload, size_t len, int wait_ms);

#endif
