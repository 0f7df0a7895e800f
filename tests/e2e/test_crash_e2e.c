/*
 * End-to-end: a client that dies, or frees its memory, right after it named
 * that memory in an RMA descriptor. A trainer that crashes mid-snapshot is
 * the first failure the store must survive; the server then unpacks a key
 * whose shared-memory segment is gone. Real ckstore-server on 127.0.0.1
 * (port picked at run time, stopped by pid):
 *
 *  - dead_segment_keys_are_refused: a raw transport client allocates a
 *    region with cks_tp_mem_alloc(), describes it (its packed key inside),
 *    frees it (UCX marked the segment removed at allocation, so with its one
 *    attachment gone it no longer exists), then sends the descriptor in a
 *    MEM_MAP (what a client sends for its regions when it connects) and in a
 *    one-copy PUT, several times. The server must answer each with an error
 *    and stay up, serving a live region on the same connection and a new
 *    client. Before the fix UCX 1.13's failed unpack destroyed a key with
 *    domains it had not unpacked and the server died with SIGSEGV (what
 *    versions/writers_race_for_one_version hit about one run in ten, when a
 *    short-lived racer's MEM_MAP reached a server after the racer exited).
 *
 *  - crash_stop/sigterm_with_calls_to_a_stopped_peer_exits_cleanly: a
 *    server stopped while its calls to a SIGSTOPped peer are outstanding
 *    (described where the suite is).
 *
 * Bounded loops; no sleeps as synchronisation.
 */
#include "ckstore.h"
#include "cks_faults_gate.h"
#include "cks_server.h"
#include "cks_test.h"
#include "cks_test_raw.h"
#include "cks_tp.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static cks_test_server_t srv;
static cks_client_h cl;

/* ---- a raw transport client: tests/support/cks_test_raw.h ------------------- */

static cks_test_raw_t raw;

/* Send a request with the descriptor as its payload; 1 when a reply came. */
static int raw_request(unsigned type, uint64_t req_id, const void *body, const void *desc,
                       size_t len, int wait_ms)
{
    return cks_test_raw_request(&raw, type, CKS_WIRE_F_RMA, req_id, body, desc, len, wait_ms);
}

typedef struct {
    uint8_t b[CKS_TP_RMA_DESC_MAX];
    size_t len;
} desc_t;

static void setup(void)
{
    cr_assert_eq(cks_test_server_start(&srv, 128 * MiB), 0);
    cr_assert_eq(cks_test_connect(&srv, 30000, &cl), CKS_OK, "connect to %s", srv.addr);
    cks_test_begin(cl, "crash", 1);
    cks_test_raw_open(&raw, srv.port, "crash-raw");
}

static void teardown(void)
{
    if (raw.w != NULL) {
        cks_tp_conn_put(raw.conn);
        cks_tp_worker_destroy(raw.w);
        raw.w = NULL;
    }
    cks_client_destroy(cl);
    cl = NULL;
    cks_test_server_cleanup(&srv);
}

TestSuite(crash, .init = setup, .fini = teardown, .timeout = 180);

/* A one-copy PUT into ("crash", 1) of [addr, addr + size) named by d. */
static int put_rma(uint64_t req_id, const char *key, uint64_t size, const desc_t *d)
{
    return cks_test_raw_put(&raw, req_id, "crash", 1, key, size, d->b, d->len, 10000);
}

Test(crash, dead_segment_keys_are_refused)
{
    enum { ROUNDS = 8 };
    const size_t len = 2 * MiB;
    uint64_t req_id  = 100;

    for (int round = 0; round < ROUNDS; round++) {
        cks_tp_mem_h m;
        void *base;
        desc_t d;
        char key[32];

        /* a region, its descriptor, and then no region */
        cr_assert_eq(cks_tp_mem_alloc(raw.w, len, &m, &base), CKS_OK);
        memset(base, round, len);
        cr_assert_eq(cks_tp_mem_describe(m, base, len, d.b, sizeof(d.b), &d.len), CKS_OK);
        cks_tp_mem_unmap(m);

        if (round % 2 == 0) {
            cks_msg_mem_map_t mm = {.length = len};
            cr_assert(raw_request(CKS_MSG_MEM_MAP, ++req_id, &mm, d.b, d.len, 10000),
                      "round %d: MEM_MAP of a freed region got no reply", round);
        } else {
            snprintf(key, sizeof(key), "dead-%d", round);
            cr_assert(put_rma(++req_id, key, len, &d),
                      "round %d: PUT from a freed region got no reply", round);
        }
        cr_assert_lt(raw.status, 0, "round %d: a freed region's descriptor was accepted (%s)",
                     round, raw.msg);
        cr_log_info("round %d: %s: %s", round, cks_status_name(raw.status), raw.msg);
        cr_assert(cks_test_server_alive(&srv), "round %d: the server died", round);
    }

    /* still serving: a live region on the same connection ... */
    cks_tp_mem_h m;
    void *base;
    desc_t d;
    cr_assert_eq(cks_tp_mem_alloc(raw.w, 64 * KiB, &m, &base), CKS_OK);
    cks_test_fill(base, 64 * KiB, 7);
    cr_assert_eq(cks_tp_mem_describe(m, base, 64 * KiB, d.b, sizeof(d.b), &d.len), CKS_OK);
    cr_assert(put_rma(++req_id, "live", 64 * KiB, &d), "a live region's PUT got no reply");
    cr_assert_eq(raw.status, CKS_OK, "a live region's PUT: %s", raw.msg);

    /* ... and a new client, which reads back what the live put stored */
    cks_client_h c;
    cks_restore_h r;
    uint8_t *back = malloc(64 * KiB);
    uint64_t got  = 0;
    cr_assert_not_null(back);
    memset(back, 1, 64 * KiB);
    cr_assert_eq(cks_test_connect(&srv, 30000, &c), CKS_OK);
    cr_assert_eq(cks_test_put(c, "crash", 1, "plain", back, 1000), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "crash", 1), CKS_OK);
    cr_assert_eq(cks_restore_open(c, "crash", 1, &r), CKS_OK);
    cks_get_params_t g = {.key = "live", .buffer = back, .buffer_size = 64 * KiB};
    cr_assert_eq(cks_get(r, &g, &got), CKS_OK);
    cr_assert_eq(got, 64 * KiB);
    cr_assert(memcmp(back, base, 64 * KiB) == 0, "the live put stored other bytes");
    cks_restore_close(r);
    cks_client_destroy(c);
    cks_tp_mem_unmap(m);
    free(back);
    cr_assert(cks_test_server_alive(&srv), "the server died");
}

/* ---- a server stopped while its calls to a peer are outstanding -------------- */
/*
 * crash_stop/sigterm_with_calls_to_a_stopped_peer_exits_cleanly: six servers,
 * RS(4,2); one member is SIGSTOPped (not the version's coordinator), then a
 * client puts objects. Each primary other than the stopped one stores its
 * objects (STORED) and sends their chunks to every member of the stripe
 * group, so it has calls to the stopped member outstanding (they wait for
 * its reply until the peer timeout). Every other server is then stopped
 * with SIGTERM: each must exit with status 0, and under ASan without a
 * report. At least one of them must say that it canceled outstanding calls
 * when it stopped, or the case was not reached and the test fails.
 */
static cks_test_cluster_t stop_cl;

static void stop_fini(void)
{
    if (stop_cl.srv[0].dir[0] != '\0') {
        for (size_t i = 0; i < stop_cl.n; i++) {
            if (stop_cl.srv[i].pid > 0) {
                kill(stop_cl.srv[i].pid, SIGCONT);
            }
        }
        cks_test_cluster_cleanup(&stop_cl);
    }
}

TestSuite(crash_stop, .fini = stop_fini, .timeout = 120);

/* Copy a sanitizer's report from a server's log to stderr (the log goes
 * with the cluster's temp dir). */
static void print_report(const char *log)
{
    FILE *f = fopen(log, "r");
    char line[512];
    int left = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "AddressSanitizer") != NULL || strstr(line, "runtime error") != NULL) {
            left = 40;
        }
        if (left > 0) {
            fputs(line, stderr);
            left--;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
}

Test(crash_stop, sigterm_with_calls_to_a_stopped_peer_exits_cleanly)
{
    enum { NOBJ = 12 };
    const size_t len = 1 * MiB;
    cks_client_h c;
    uint8_t *buf = malloc(len);
    cr_assert_not_null(buf);
    cks_test_fill(buf, len, 11);

    cr_assert_eq(cks_test_cluster_start(&stop_cl, 6, 3, 128 * MiB, -1, NULL), 0);
    int co = cks_test_coordinator(stop_cl.map, "stop", 1);
    cr_assert_geq(co, 0);
    size_t victim = (size_t)(co + 1) % 6;
    cr_assert_eq(cks_test_connect_cluster(stop_cl.map, 4, 2, 64 * KiB, 3000, &c), CKS_OK);
    cks_test_begin(c, "stop", 1);
    cr_assert_eq(kill(stop_cl.srv[victim].pid, SIGSTOP), 0);

    int stored = 0;
    for (int i = 0; i < NOBJ; i++) {
        char key[16];
        snprintf(key, sizeof(key), "o%d", i);
        cks_status_t st = cks_test_put(c, "stop", 1, key, buf, len);
        stored += st == CKS_OK;
        cr_log_info("put %s: %s", key, cks_status_name(st));
    }
    cr_assert_gt(stored, 0, "no put was stored by a running primary");
    cks_client_destroy(c);
    free(buf);

    for (size_t i = 0; i < stop_cl.n; i++) {
        if (i == victim) {
            continue;
        }
        int ws = cks_test_server_stop(&stop_cl.srv[i], SIGTERM);
        cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                  "server %zu did not exit cleanly on SIGTERM: %s %d (log %s)", i,
                  WIFSIGNALED(ws) ? "signal" : "exit status",
                  WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws), stop_cl.srv[i].log);
        cr_expect_eq(cks_test_log_count(stop_cl.srv[i].log, "AddressSanitizer"), 0,
                     "server %zu: ASan report in %s", i, stop_cl.srv[i].log);
        cr_expect_eq(cks_test_log_count(stop_cl.srv[i].log, "runtime error"), 0,
                     "server %zu: UBSan report in %s", i, stop_cl.srv[i].log);
        print_report(stop_cl.srv[i].log);
    }
    int canceled = 0;
    for (size_t i = 0; i < stop_cl.n; i++) {
        canceled += i != victim &&
                    cks_test_log_count(stop_cl.srv[i].log, "outstanding calls canceled") > 0;
    }
    cr_assert_gt(canceled, 0, "no server had calls outstanding when it stopped: "
                              "the case was not reached");
}

/*
 * stall_exit: a server checks that its UCX worker still takes messages: a
 * second worker in the process sends it one every second, the way a process
 * on this host does (transport/sentinel.c). UCX 1.13's shared-memory receive
 * FIFO is stuck for good after a sender was SIGKILLed between taking a slot
 * and writing it (seen in heal/random_kills_...: a server that answered
 * nothing, its loop in the arm back-off for ever). Such a server exits with
 * status CKS_SV_EXIT_STALLED (75) after --stall-exit seconds, for its
 * supervisor to start it again; the stuck FIFO cannot be made on demand, so
 * the fault point sentinel_lost drops the check's messages at the receiver.
 *
 *  - a server whose receive path takes nothing exits with 75, saying why, in
 *    bounded time; started again on its data it restores what it held;
 *  - a server stopped (SIGSTOP) longer than --stall-exit and continued does
 *    not count the time it was stopped: it serves, and stays up;
 *  - a client whose receive path takes nothing replaces its UCX worker
 *    (cks_tp_worker_renew()) and goes on: against one server, and in a
 *    cluster in the middle of a 2-rank checkpoint; and the transport's
 *    renewal itself, on a raw client.
 */

static cks_test_server_t st_srv;
static cks_test_cluster_t st_cl;

static void stall_fini(void)
{
    cks_test_set_server_flags(NULL);
    if (st_srv.pid > 0) {
        kill(st_srv.pid, SIGCONT);
    }
    cks_test_server_cleanup(&st_srv);
    cks_test_cluster_cleanup(&st_cl);
}

TestSuite(stall_exit, .fini = stall_fini, .timeout = 90);

/* How the server ended, once it did within wait_ms (bounded, 20 ms steps);
 * -1 when it still runs. */
static int stall_wait_exit(cks_test_server_t *s, int wait_ms)
{
    for (int waited = 0; waited <= wait_ms; waited += 20) {
        int ws = 0;
        if (waitpid(s->pid, &ws, WNOHANG) == s->pid) {
            s->pid = 0;
            return ws;
        }
        usleep(20 * 1000);
    }
    return -1;
}

Test(stall_exit, a_server_whose_receive_path_takes_nothing_exits_to_be_started_again)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    const uint64_t size = 3 * MiB + 17;
    uint8_t *buf        = cks_test_seeded_bytes(size + 2, 61);
    cks_client_h c      = NULL;
    cks_test_set_server_flags("--stall-exit 2");
    cr_assert_eq(cks_test_server_start(&st_srv, 64 * MiB), 0);
    cr_assert_eq(cks_test_connect(&st_srv, 10000, &c), CKS_OK);
    cr_assert_eq(cks_test_write_objs(c, "stall", 1, buf, size, 2), CKS_OK);
    cks_client_destroy(c);

    /* the same server, its check's messages lost from now on */
    snprintf(st_srv.faults, sizeof(st_srv.faults), "sentinel_lost:always");
    cr_assert_eq(cks_test_server_restart(&st_srv), 0);
    int ws = stall_wait_exit(&st_srv, 15000);
    cr_assert_neq(ws, -1, "the server still runs 15 s after its check's messages stopped "
                          "arriving (--stall-exit 2; log %s)", st_srv.log);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == CKS_SV_EXIT_STALLED,
              "the server ended with %s %d, not exit status %d (log %s)",
              WIFSIGNALED(ws) ? "signal" : "exit status",
              WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws), CKS_SV_EXIT_STALLED, st_srv.log);
    cr_assert_eq(cks_test_log_count(st_srv.log, "its receive path is stalled"), 1,
                 "the server did not say why it exited (log %s)", st_srv.log);

    /* started again by its supervisor: what it held restores */
    st_srv.faults[0] = '\0';
    cr_assert_eq(cks_test_server_restart(&st_srv), 0);
    cr_assert_eq(cks_test_connect(&st_srv, 10000, &c), CKS_OK);
    cks_test_verify_objs(c, "stall", 1, buf, size, 2);
    cks_client_destroy(c);
    free(buf);
}

Test(stall_exit, a_stopped_server_does_not_count_the_time_it_was_stopped)
{
    const uint64_t size = 1 * MiB + 5;
    uint8_t *buf        = cks_test_seeded_bytes(size + 1, 67);
    cks_client_h c      = NULL;
    cks_test_set_server_flags("--stall-exit 2");
    cr_assert_eq(cks_test_server_start(&st_srv, 64 * MiB), 0);
    cr_assert_eq(kill(st_srv.pid, SIGSTOP), 0);
    usleep(5 * 1000 * 1000); /* the stop itself: longer than --stall-exit */
    cr_assert_eq(kill(st_srv.pid, SIGCONT), 0);
    cr_assert_eq(cks_test_connect(&st_srv, 10000, &c), CKS_OK);
    cr_assert_eq(cks_test_write_objs(c, "stall", 1, buf, size, 1), CKS_OK);
    cks_test_verify_objs(c, "stall", 1, buf, size, 1);
    cks_client_destroy(c);
    int ws = stall_wait_exit(&st_srv, 4000); /* two of its checks' ticks and more */
    cr_assert_eq(ws, -1, "the server exited after a stop of 5 s (%s %d; log %s)",
                 WIFSIGNALED(ws) ? "signal" : "exit status",
                 WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws), st_srv.log);
    cr_assert_eq(cks_test_log_count(st_srv.log, "its receive path is stalled"), 0);
    free(buf);
}

/* A client process whose worker takes none of its check's messages (fault
 * sentinel_lost, armed from the environment when the library loads; it
 * spares a replaced worker): after 5 s the client logs it once and replaces
 * its UCX worker, then writes a version through the new one and restores
 * it and the one written before into fresh cks_mem_alloc() memory, exact.
 * The server is stopped (SIGSTOP) from the client's fourth second until the
 * renewal, so that puts are in flight through it: they fail, and are absent
 * or exact in their version; every put made after the renewal succeeds.
 * Without the fault nothing is replaced. Before: the client only said so,
 * and its requests would have timed out for good. Each run bounded (popen
 * of a process that gives up after its SECONDS; the server is continued
 * whatever the helper said, and by the suite's fini). */
typedef struct {
    uint64_t most, renewals;
    int logged, exact, replaced, ranks, rc;
    unsigned puts_failed; /* puts of version 3 that failed (in flight at the renewal) */
} stall_run_t;

static stall_run_t stall_client_run(const char *faults, unsigned seconds, const char *job,
                                    const char *target, pid_t stop)
{
    char cmd[512], line[1024];
    stall_run_t r = {UINT64_MAX, UINT64_MAX, 0, 0, 0, 0, -1, 0};
    snprintf(cmd, sizeof(cmd), "CKS_FAULTS=%s UCX_NET_DEVICES=lo %s %s %u %s 2>&1", faults,
             CKS_STALL_CLIENT_BIN, target, seconds, job);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    int stopped = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long v;
        if (stop > 0 && strncmp(line, "stalled 4 s", 11) == 0) {
            stopped = kill(stop, SIGSTOP) == 0; /* the puts in flight wait there */
        }
        if (stopped && strncmp(line, "renewed", 7) == 0) {
            kill(stop, SIGCONT);
            stopped = 0;
        }
        if (sscanf(line, "receive_stalled_s %llu", &v) == 1) {
            r.most = v;
        }
        if (sscanf(line, "receive_renewals %llu", &v) == 1) {
            r.renewals = v;
        }
        r.logged += strstr(line, "its receive path is stalled") != NULL;
        r.replaced += strstr(line, "UCX worker replaced") != NULL;
        r.exact += strstr(line, "versions 1 and 2 restore exact") != NULL;
        sscanf(line, "puts of version 3: %*u, %u failed", &r.puts_failed);
        r.ranks += strstr(line, "version 4 restores: exact") != NULL;
        fprintf(stderr, "stall_client: %s", line);
    }
    if (stopped) {
        kill(stop, SIGCONT); /* no renewal came */
    }
    int ws = pclose(f);
    cr_assert(WIFEXITED(ws), "stall_client ended with %d", ws);
    r.rc = WEXITSTATUS(ws);
    return r;
}

Test(stall_exit, a_client_whose_receive_path_takes_nothing_replaces_its_worker)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    cr_assert_eq(cks_test_server_start(&st_srv, 64 * MiB), 0);
    stall_run_t r = stall_client_run("none", 3, "calm", st_srv.addr, 0);
    cr_assert_eq(r.rc, 1, "stall_client without the fault exited %d", r.rc);
    cr_assert_eq(r.most, 0, "a client whose check's messages arrive counted %llu s without one",
                 (unsigned long long)r.most);
    cr_assert_eq(r.renewals, 0);
    cr_assert_eq(r.logged, 0);
    r = stall_client_run("sentinel_lost:always", 20, "stalled", st_srv.addr,
                         st_srv.pid);
    cr_assert_eq(r.renewals, 1, "a client whose worker takes none of its check's messages "
                 "replaced it %llu times in 20 s", (unsigned long long)r.renewals);
    cr_assert_eq(r.logged, 1, "the client logged its stall %d times", r.logged);
    cr_assert_eq(r.replaced, 1, "the transport did not say it replaced the worker");
    cr_assert_eq(r.exact, 1, "after the renewal: not written and restored exact");
    cr_assert_gt(r.puts_failed, 0, "no put was in flight at the renewal (the server was "
                 "stopped through it)");
    cr_assert_eq(r.rc, 0, "stall_client exited %d", r.rc);
}

/* The same in a client of a 6-server cluster, in the middle of a
 * checkpoint: rank 0 of a 2-rank version has finished, and its finish
 * waits at the coordinator for rank 1 when the worker is replaced. Rank
 * 0's finish must end (not hang) and rank 1's finish, made after the
 * renewal, commits the version, which restores exact; versions written
 * before and after, and the puts around the renewal, as above. */
Test(stall_exit, a_cluster_client_replaces_its_worker_in_the_middle_of_a_checkpoint,
     .timeout = 150)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    cr_assert_eq(cks_test_cluster_start(&st_cl, 6, 3, 256 * MiB, -1, NULL), 0);
    stall_run_t r = stall_client_run("sentinel_lost:always", 20, "ranks", st_cl.map, 0);
    cr_assert_eq(r.renewals, 1, "the cluster client replaced its worker %llu times in 20 s",
                 (unsigned long long)r.renewals);
    cr_assert_eq(r.exact, 1, "after the renewal: not written and restored exact");
    cr_assert_eq(r.ranks, 1, "the 2-rank version did not commit and restore exact");
    cr_assert_eq(r.rc, 0, "stall_client exited %d", r.rc);
}

/* cks_tp_worker_renew() itself, on a raw transport client of a standalone
 * server: a handshake outstanding at the renewal ends with an error there
 * (never later, never not at all), the connection that was up fails and its
 * owner is told; a new connection through the new worker shakes hands and
 * gets its data endpoint. Eight renewals are allowed, the ninth is refused
 * (CKS_ERR_BAD_STATE) and changes nothing: the worker still connects. A
 * worker with a listener (a server's) is not renewed. Under ASan the
 * destroy, with eight replaced workers kept, leaks nothing. */
static void renew_hs_end(void *arg, cks_status_t status)
{
    *(cks_status_t *)arg = status;
}

static void renew_accept(void *arg, cks_tp_conn_h conn)
{
    (void)arg;
    cks_tp_conn_put(conn);
}

Test(stall_exit, a_transport_worker_renewed_fails_its_connections_and_connects_again)
{
    cks_test_raw_t r;
    cks_tp_conn_h conn2, conn3;
    cks_status_t hs = CKS_INPROGRESS;
    cr_assert_eq(cks_test_server_start(&st_srv, 64 * MiB), 0);
    cks_test_raw_open(&r, st_srv.port, "renew-raw");

    /* a second connection whose handshake is in flight (not progressed) */
    cr_assert_eq(cks_tp_conn_connect(r.w, "127.0.0.1", st_srv.port, &conn2), CKS_OK);
    cr_assert_eq(cks_tp_conn_handshake(conn2, "renew-raw", NULL, 10000, renew_hs_end, &hs),
                 CKS_INPROGRESS);
    cr_assert_eq(cks_tp_worker_renew(r.w), CKS_OK);
    cr_assert_eq(cks_tp_worker_renewals(r.w), 1);
    cr_assert_neq(hs, CKS_INPROGRESS, "the handshake in flight did not end at the renewal");
    cr_assert_neq(hs, CKS_OK);
    cr_assert(cks_tp_conn_failed(r.conn), "the connection that was up did not fail");
    cr_assert_geq(r.lost, 1, "its owner was not told");
    cks_tp_conn_put(conn2);

    /* through the new worker */
    cr_assert_eq(cks_test_raw_handshake(r.w, st_srv.port, "renew-raw", NULL, &conn3), CKS_OK);
    CKS_TEST_RAW_WAIT(&r, cks_tp_conn_local(conn3), 5000);
    cr_assert(cks_tp_conn_local(conn3), "no data endpoint through the new worker");
    cks_tp_conn_put(conn3);

    for (unsigned i = 2; i <= 8; i++) {
        cr_assert_eq(cks_tp_worker_renew(r.w), CKS_OK, "renewal %u", i);
    }
    cr_assert_eq(cks_tp_worker_renew(r.w), CKS_ERR_BAD_STATE);
    cr_assert_eq(cks_tp_worker_renewals(r.w), 8);
    cr_assert_eq(cks_test_raw_handshake(r.w, st_srv.port, "renew-raw", NULL, &conn3), CKS_OK);
    cks_tp_conn_put(conn3);
    cks_test_raw_close(&r);

    cks_test_raw_t l;
    cks_tp_listener_h lis;
    cr_assert_eq(cks_test_raw_worker(&l, "renew-listener"), CKS_OK);
    cr_assert_eq(cks_tp_listener_create(l.w, "127.0.0.1", 0, renew_accept, NULL, &lis), CKS_OK);
    cr_assert_eq(cks_tp_worker_renew(l.w), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_tp_worker_renewals(l.w), 0);
    cks_tp_listener_destroy(lis);
    cks_tp_worker_destroy(l.w);
}
