/*
 * Unit tests of the transport's calls (cks_tp_call()) between two workers
 * of this process over 127.0.0.1 (UCX_NET_DEVICES=lo in the suite), both
 * progressed by the test's own thread. A call is answered while UCX still
 * holds its send (fault point call_send_held: the send's completion never
 * comes). Before: the answered call waited for that completion without a
 * deadline, and its owner never heard of it - a primary's chunk put, in
 * the randomized kill test under ASan: the member answered, the call never
 * ended, and the version ran into its deadline instead of failing its
 * object at once. Now it ends with the answer's status once the grace for
 * UCX's hold has passed. Every wait here is bounded.
 */
#include "cks_tp.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAYLOAD (1u << 20)

typedef struct {
    cks_tp_conn_h accepted; /* the peer's end (one reference) */
    int requests;
} peer_t;

/* The peer: every request is answered at once with CKS_ERR_ARENA_FULL (its
 * payload is not received: UCX drops it). */
static void peer_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                     const cks_msg_any_t *body, cks_tp_data_t *data)
{
    peer_t *p          = arg;
    cks_msg_status_t m = {.status = CKS_ERR_ARENA_FULL, .msg = cks_wire_cstr("refused")};
    (void)body;
    (void)data;
    p->requests++;
    cr_assert_eq(cks_tp_send(conn, CKS_MSG_STATUS_REPLY, 0, hdr->req_id, &m, NULL, 0,
                             CKS_MEM_HOST, NULL, NULL, NULL),
                 CKS_INPROGRESS);
}

static void peer_accept(void *arg, cks_tp_conn_h conn)
{
    peer_t *p = arg;
    if (p->accepted != NULL) {
        cks_tp_conn_put(p->accepted);
    }
    p->accepted = conn;
}

static void ignore_err(void *arg, cks_tp_conn_h conn, cks_status_t status)
{
    (void)arg;
    (void)conn;
    (void)status;
}

static void ignore_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                       const cks_msg_any_t *body, cks_tp_data_t *data)
{
    (void)arg, (void)conn, (void)hdr, (void)body, (void)data;
}

typedef struct {
    int done;
    cks_status_t status;
    char msg[128];
} call_end_t;

static void call_done(void *arg, cks_status_t status, const char *msg)
{
    call_end_t *e = arg;
    e->done       = 1;
    e->status     = status;
    snprintf(e->msg, sizeof(e->msg), "%s", msg != NULL ? msg : "");
}

/* One pass of both workers' loops, then a wait (at most 10 ms: the calls'
 * deadlines) for either worker's event. */
static void both(cks_tp_worker_h a, cks_tp_worker_h b)
{
    cks_tp_worker_progress(a);
    cks_tp_worker_expire(a);
    cks_tp_worker_progress(b);
    cks_tp_worker_expire(b);
    if (cks_tp_worker_arm(a) == CKS_ERR_BUSY || cks_tp_worker_arm(b) == CKS_ERR_BUSY) {
        return; /* more to progress now */
    }
    struct pollfd pfd[2] = {{.fd = cks_tp_worker_efd(a), .events = POLLIN},
                            {.fd = cks_tp_worker_efd(b), .events = POLLIN}};
    (void)poll(pfd, 2, 10);
}

/* A call with a payload from caller to peer, its end waited for at most
 * 20 s: the seconds it took (e->done says whether it ended). */
static double call_once(cks_tp_worker_h peer, cks_tp_worker_h caller, cks_tp_conn_h conn,
                        const uint8_t *payload, call_end_t *e)
{
    cks_msg_chunk_put_t m = {.job = cks_wire_cstr("job"), .version = 1,
                             .key = cks_wire_cstr("key"), .stripe = 0, .idx = 0, .crc64 = 0};
    memset(e, 0, sizeof(*e));
    /* 3 s to answer, and so at most 3 s of grace for UCX's hold */
    cr_assert_eq(cks_tp_call(conn, CKS_MSG_CHUNK_PUT, 0, &m, payload, PAYLOAD, NULL, 3000,
                             call_done, e),
                 CKS_INPROGRESS);
    uint64_t t0 = cks_time_ns(), until = t0 + 20ull * 1000000000ull;
    while (!e->done && cks_time_ns() < until) {
        both(peer, caller);
    }
    return (double)(cks_time_ns() - t0) / 1e9;
}

Test(call, answered_while_ucx_holds_its_send_ends_after_the_grace, .timeout = 90)
{
    if (!cks_fault_points_built()) {
        cr_skip_test("this build has no fault points (configure with -DCKS_FAULT_POINTS=ON, "
                     "as scripts/test does)");
    }
    peer_t p                  = {0};
    cks_tp_worker_params_t pp = {.name = "peer", .on_msg = peer_msg, .on_conn_err = ignore_err,
                                 .arg = &p};
    cks_tp_worker_params_t cp = {.name = "caller", .on_msg = ignore_msg,
                                 .on_conn_err = ignore_err};
    cks_tp_worker_h peer, caller;
    cks_tp_listener_h lis;
    cks_tp_conn_h conn;
    call_end_t e;
    cr_assert_eq(cks_tp_worker_create(&pp, &peer), CKS_OK);
    cr_assert_eq(cks_tp_worker_create(&cp, &caller), CKS_OK);
    cr_assert_eq(cks_tp_listener_create(peer, "127.0.0.1", 0, peer_accept, &p, &lis), CKS_OK);
    cr_assert_eq(cks_tp_conn_connect(caller, "127.0.0.1", cks_tp_listener_port(lis), &conn),
                 CKS_OK);
    uint8_t *payload = malloc(PAYLOAD);
    cr_assert_not_null(payload);
    memset(payload, 0x5a, PAYLOAD);

    /* as it should be: the answer ends the call */
    double secs = call_once(peer, caller, conn, payload, &e);
    cr_assert(e.done, "a call did not end in 20 s");
    cr_assert_eq(e.status, CKS_ERR_ARENA_FULL, "%s", cks_status_name(e.status));
    cr_log_info("answered, its send completed: ended after %.2f s", secs);

    /* answered while UCX holds the send for good */
    cr_assert_eq(cks_fault_arm("call_send_held", CKS_FAULT_ONCE), CKS_OK);
    secs = call_once(peer, caller, conn, payload, &e);
    cks_fault_disarm_all();
    cr_log_info("answered, its send held: %s after %.2f s (%s)",
                e.done ? cks_status_name(e.status) : "not ended", secs, e.msg);
    cr_assert(e.done, "a call answered while UCX held its send did not end in 20 s");
    cr_assert_eq(e.status, CKS_ERR_ARENA_FULL, "it ended with %s, not the answer's status",
                 cks_status_name(e.status));
    cr_assert(secs >= 2.5 && secs < 10.0, "it ended after %.2f s (the grace is 3 s)", secs);
    cr_assert_eq(p.requests, 2);

    /* the connections closed with both workers running, then the workers */
    cks_tp_conn_close(conn);
    cks_tp_conn_put(conn);
    if (p.accepted != NULL) {
        cks_tp_conn_close(p.accepted);
        cks_tp_conn_put(p.accepted);
    }
    for (int i = 0; i < 50; i++) { /* their closes: at most 0.5 s of both loops */
        both(peer, caller);
    }
    cks_tp_listener_destroy(lis);
    cks_tp_worker_destroy(caller);
    cks_tp_worker_destroy(peer);
    free(payload);
}
