/*
 * End-to-end: a cluster that keeps writing with servers down. Six real
 * ckstore-server processes on 127.0.0.1 (ports picked at run time, stopped
 * by pid), RS(4,2), so every stripe's group holds all six servers and any
 * server down touches every object.
 *
 * With one or two servers killed, a version whose coordinator is up commits
 * DEGRADED, stating the redundancy it has, and every object restores
 * bit-exact; with three down,
 * the write fails with an error that names the servers; a version whose
 * coordinator is down is coordinated by its next candidate (and one whose
 * first two candidates are down by the third), commits, restores exactly,
 * and can be deleted with its coordinator still down; a version whose
 * coordinator is killed after the begin is taken over by the next
 * candidate, commits and restores exactly, and the killed coordinator,
 * restarted, does not drop it.
 *
 * A primary that answered STORED and was killed before it spread the
 * object fails the finish at once (CKS_ERR_DATA_LOST, naming it), not at
 * the request timeout or the version's deadline; the retry commits.
 *
 * random_kills_and_stops: 50 two-rank checkpoints (20 under ASan) while
 * servers are killed, restarted and stopped (at most m = 2 unreachable at
 * once), before and during the checkpoints: every one commits - its
 * coordinator killed during it, it is taken over by the next candidate -
 * except one during which a primary that had answered STORED and not yet
 * spread an object was killed (the coordinator too, when it was that
 * object's primary): it fails within a second, naming it; the trainer's
 * retry, the next number, must commit - every one restores
 * bit-exact (or, when a server killed
 * after its chunks were stored took more than the redundancy it states,
 * fails with DATA_LOST, never other bytes), and arena use is back to its
 * baseline once all are deleted.
 *
 * A report of an object lost between a primary and the coordinator is asked
 * for again, and the version commits (heal_report_drop).
 *
 * A rank's finish whose coordinator finds no majority to fence its ballot
 * (three of six down) fails with CKS_ERR_NO_QUORUM, "outcome not recorded
 * yet", naming the coordinator and the servers it could not reach.
 *
 * heal_partition/random_cuts_kills_and_stops: 50 more in the release pass
 * (none under ASan; CKS_TEST_PARTITION_ROUNDS=N runs N) with the six
 * servers on hosts of their own (network namespaces, UCX over TCP, the
 * client on a host of its own), where a disruption may also cut a server
 * off the network (silently: no reset) and plug it back in later; a cut
 * server counts as one of the m unreachable. Skipped where namespaces
 * cannot be made (not root).
 */
#include "ckstore.h"
#include "cks_common.h"
#include "cks_netns.h"
#include "cks_server.h"
#include "cks_test.h"
#include "cks_test_suite.h"
#include "cks_faults_gate.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/wait.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOBJ 8

TestSuite(heal, .init = cks_test_suite_setup, .fini = cks_test_suite_teardown, .timeout = 300);

/* Objects of mixed sizes (empty, tiny, partial stripe, several stripes with
 * a padded tail), so that their primaries differ and some lie on servers
 * that are down. */
static void make_data(uint64_t seed)
{
    static const uint64_t base[NOBJ] = {0,       1,           4097,    K * CHUNK,
                                        3 * MiB + 12345, 1 * MiB, 700001, 2 * MiB + 3};
    cks_test_objs_init(&objs, base, NOBJ, seed);
}

/* The bytes of object i of version v. */
static cks_client_h connect_cluster(int timeout_ms)
{
    return cks_test_cluster_client(cl.map, K, M, CHUNK, timeout_ms);
}

/* The name of object i. */
static void key_of(size_t i, char *key, size_t len)
{
    snprintf(key, len, "layer%zu/expert%zu", i, i * 5);
}

/* Write version v (every object); the first failure, with its text in why. */
static cks_status_t write_version(cks_client_h c, uint64_t v, char *why, size_t why_len)
{
    cks_status_t st = cks_test_objs_put(c, "heal", v, &objs, key_of);

    why[0] = '\0';
    if (st == CKS_OK) {
        st = cks_version_seal(c, "heal", v);
    } else if (st == CKS_ERR_VERSION_NOT_OPEN) {
        /* the version failed meanwhile: a rank that finishes learns why */
        cks_status_t sst = cks_version_seal(c, "heal", v);
        st               = sst != CKS_OK ? sst : st;
    }
    if (st != CKS_OK) {
        cks_client_last_error(c, why, why_len);
    }
    return st;
}

/* Restore every object of version v whole; each must be bit-exact. */
static void verify_version(cks_client_h c, uint64_t v, const char *when)
{
    cks_test_objs_verify(c, "heal", v, &objs, key_of, NULL, when);
}

/* On a failure: the servers' warnings and errors, for the reader. */
static void dump_logs(void)
{
    static const char *const words[] = {" warn ", " error ", NULL};
    cks_test_cluster_dump_logs(&cl, words);
}

/* The first version from `from` on whose coordinator is not in down[]. */
static uint64_t version_with_live_coordinator(uint64_t from, const int *down)
{
    for (uint64_t v = from; v < from + 1000; v++) {
        int coord = cks_test_coordinator(cl.map, "heal", v);
        cr_assert(coord >= 0);
        if (!down[coord]) {
            return v;
        }
    }
    cr_assert_fail("no version with a live coordinator");
    return 0;
}

/* A server that is not down and does not coordinate version v. */
static size_t pick_victim(uint64_t v, const int *down, size_t after)
{
    int coord = cks_test_coordinator(cl.map, "heal", v);
    for (size_t i = 0; i < NSRV; i++) {
        size_t s = (after + i) % NSRV;
        if (!down[s] && (int)s != coord) {
            return s;
        }
    }
    cr_assert_fail("no server to take down");
    return 0;
}

static void expect_state(cks_client_h c, uint64_t v, cks_vstate_t state, uint32_t redundancy)
{
    cks_version_info_t vi;
    cks_status_t st = cks_version_stat(c, "heal", v, &vi);
    cr_assert_eq(st, CKS_OK, "stat of version %llu: %s", (unsigned long long)v,
                 cks_status_name(st));
    cr_assert_eq(vi.state, state, "version %llu is %s, not %s", (unsigned long long)v,
                 cks_vstate_string(vi.state), cks_vstate_string(state));
    cr_assert_eq(vi.redundancy, redundancy, "version %llu: redundancy %u, not %u",
                 (unsigned long long)v, vi.redundancy, redundancy);
    cr_assert_eq(vi.ec_m, M);
    cr_assert_eq(vi.nobjects, NOBJ);
    if (state == CKS_VSTATE_PROTECTED) {
        cr_assert_eq(vi.missing, 0);
    } else {
        cr_assert_gt(vi.missing, 0, "version %llu: DEGRADED with no chunk missing",
                     (unsigned long long)v);
    }
}

/* One, then two servers killed: each version commits DEGRADED with the
 * redundancy it has left, and every version restores exactly with both
 * still down. */
Test(heal, degraded_writes_with_one_and_two_servers_down)
{
    int down[NSRV] = {0};
    char why[512];
    make_data(cks_test_seed(cks_test_seed_fresh()));
    cks_client_h c = connect_cluster(20000);

    uint64_t v1 = version_with_live_coordinator(1, down);
    cr_assert_eq(write_version(c, v1, why, sizeof(why)), CKS_OK, "healthy write: %s", why);
    expect_state(c, v1, CKS_VSTATE_PROTECTED, M);

    uint64_t v2 = version_with_live_coordinator(v1 + 1, down);
    size_t a    = pick_victim(v2, down, (size_t)objs.seed % NSRV);
    fprintf(stderr, "version %llu: server %zu killed\n", (unsigned long long)v2, a);
    cks_test_cluster_kill(&cl, a);
    down[a] = 1;
    cks_status_t st = write_version(c, v2, why, sizeof(why));
    if (st != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "write with server %zu down: %s (%s)", a, cks_status_name(st),
                 why);
    expect_state(c, v2, CKS_VSTATE_DEGRADED, M - 1);
    verify_version(c, v2, "one down");

    uint64_t v3 = version_with_live_coordinator(v2 + 1, down);
    size_t b    = pick_victim(v3, down, a + 1);
    fprintf(stderr, "version %llu: servers %zu and %zu killed\n", (unsigned long long)v3, a, b);
    cks_test_cluster_kill(&cl, b);
    down[b] = 1;
    st = write_version(c, v3, why, sizeof(why));
    if (st != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "write with servers %zu, %zu down: %s (%s)", a, b,
                 cks_status_name(st), why);
    expect_state(c, v3, CKS_VSTATE_DEGRADED, 0);
    verify_version(c, v1, "two down");
    verify_version(c, v2, "two down");
    verify_version(c, v3, "two down");
    cks_client_destroy(c);

    /* a fresh client (no knowledge of who is down) reads them all too */
    c = connect_cluster(20000);
    verify_version(c, v3, "two down, fresh client");
    cks_client_destroy(c);
}

/* The objects of a test that writes some of the usual ones: position i
 * names object mt_pick[i]. */
static size_t mt_pick[NOBJ];
static void mt_key(size_t i, char *key, size_t len)
{
    key_of(mt_pick[i], key, len);
}

/* The parameters of a cluster client (this suite's geometry) whose request
 * timeout is timeout_ms and member timeout (CKS_CLIENT_FIELD_MEMBER_TIMEOUT)
 * member_ms. */
static cks_client_params_t member_params(int timeout_ms, uint32_t member_ms)
{
    cks_client_params_t p = {0};
    p.field_mask = CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC | CKS_CLIENT_FIELD_TIMEOUT_MS |
                   CKS_CLIENT_FIELD_MEMBER_TIMEOUT;
    p.cluster           = cl.map;
    p.ec_k              = K;
    p.ec_m              = M;
    p.chunk_size        = CHUNK;
    p.timeout_ms        = timeout_ms;
    p.member_timeout_ms = member_ms;
    return p;
}

/* A client's member timeout (CKS_CLIENT_FIELD_MEMBER_TIMEOUT) is how long
 * the versions it writes wait on a member that does not answer: with one
 * stopped (SIGSTOP) after the begin, its chunks count as missing after
 * 1500 ms (and as long again, the transport's grace for sends UCX holds),
 * not the servers' default 10 s, and the version commits
 * DEGRADED, every object restorable exactly. The stopped server is no
 * primary of the objects and does not coordinate the version, so that only
 * its chunks wait on it. A timeout out of its range is refused. */
Test(heal, stopped_member_costs_the_member_timeout_the_client_set)
{
    int down[NSRV] = {0};
    char key[64], why[512] = "";
    uint64_t v = version_with_live_coordinator(1, down);
    int coord  = cks_test_coordinator(cl.map, "heal", v);
    size_t nprim[NSRV] = {0}, victim = NSRV, n = 0;
    uint64_t sizes[NOBJ];
    make_data(cks_test_seed(cks_test_seed_fresh()));
    for (size_t i = 0; i < NOBJ; i++) {
        key_of(i, key, sizeof(key));
        int pr = cks_test_primary(cl.map, "heal", key, K, M);
        cr_assert(pr >= 0 && pr < NSRV);
        nprim[pr]++;
    }
    for (size_t s = 0; s < NSRV; s++) { /* the primary of the fewest objects */
        if ((int)s != coord && (victim == NSRV || nprim[s] < nprim[victim])) {
            victim = s;
        }
    }
    for (size_t i = 0; i < NOBJ; i++) {
        key_of(i, key, sizeof(key));
        if ((size_t)cks_test_primary(cl.map, "heal", key, K, M) != victim) {
            mt_pick[n]  = i;
            sizes[n++] = objs.size[i];
        }
    }
    cr_assert_geq(n, 4, "only %zu objects whose primary is not server %zu", n, victim);
    cks_test_objs_t mine = {0};
    cks_test_objs_init(&mine, sizes, n, objs.seed);

    cks_client_params_t p = member_params(20000, 0);
    cks_client_h c        = NULL;
    static const uint32_t bad[] = {1, 99, 600001, UINT32_MAX};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p.member_timeout_ms = bad[i];
        cr_assert_eq(cks_client_create(&p, &c), CKS_ERR_INVALID_PARAM,
                     "a member timeout of %u ms was taken", bad[i]);
        cr_assert_null(c);
    }
    p.member_timeout_ms = 1500;
    cr_assert_eq(cks_client_create(&p, &c), CKS_OK);
    cr_assert_eq(cks_test_client_quiet(c, 5000), 0);

    cks_version_params_t vp = {.job = "heal", .version = v};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(kill(cl.srv[victim].pid, SIGSTOP), 0);
    uint64_t t0     = cks_time_ns();
    cks_status_t st = CKS_OK;
    for (size_t i = 0; st == CKS_OK && i < n; i++) {
        mt_key(i, key, sizeof(key));
        cks_test_objs_fill(&mine, i, v);
        st = cks_test_put(c, "heal", v, key, mine.src[i], mine.size[i]);
    }
    st            = st == CKS_OK ? cks_version_seal(c, "heal", v) : st;
    uint64_t took = (cks_time_ns() - t0) / 1000000u;
    cks_client_last_error(c, why, sizeof(why));
    fprintf(stderr, "version %llu, %zu objects, server %zu stopped, member timeout 1500 ms: "
                    "%s after %llu ms (%s)\n",
            (unsigned long long)v, n, victim, cks_status_name(st), (unsigned long long)took,
            why);
    cr_assert_eq(kill(cl.srv[victim].pid, SIGCONT), 0);
    if (st != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "version %llu: %s (%s)", (unsigned long long)v,
                 cks_status_name(st), why);
    /* one member timeout (the chunk puts to it run at once), not 10 s; on
     * one host UCX holds the chunks' sends to a stopped peer, which the
     * transport gives up as long again after the timeout closed their
     * connection (the call's timeout, CKS_TP_ABANDON_NS at most): 3 s,
     * against 15 s with the default (6.5 s when the grace was a fixed 5 s) */
    cr_assert_geq(took, 1500, "the version did not wait for the stopped member (%llu ms)",
                  (unsigned long long)took);
    cr_assert_lt(took, 5500, "the version took %llu ms: more than twice its member timeout "
                             "and 2.5 s of slack", (unsigned long long)took);
    cks_version_info_t vi;
    cr_assert_eq(cks_version_stat(c, "heal", v, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_DEGRADED, "version %llu is %s", (unsigned long long)v,
                 cks_vstate_string(vi.state));
    cr_assert_gt(vi.missing, 0);
    cks_test_objs_verify(c, "heal", v, &mine, mt_key, dump_logs, "member timeout");
    cks_test_objs_free(&mine);
    cks_client_destroy(c);
}

/* A server killed while a version is written makes its primaries skip it
 * for a while (a chunk put to it timed out: they do not wait on it again
 * for every object). Once it is restarted and has caught up, the next
 * checkpoint is written whole - PROTECTED, not DEGRADED - well within that
 * while: the primaries try a handshake with a skipped server every 50 ms
 * and use it again once it answers. */
Test(heal, a_restarted_server_takes_the_next_checkpoint_whole)
{
    int down[NSRV] = {0};
    char why[512];
    make_data(cks_test_seed(cks_test_seed_fresh()));
    cks_client_h c = connect_cluster(20000);

    uint64_t v1 = version_with_live_coordinator(1, down);
    size_t a    = pick_victim(v1, down, (size_t)objs.seed % NSRV);
    cks_test_cluster_kill(&cl, a);
    uint64_t t_kill = cks_time_ns();
    cr_assert_eq(write_version(c, v1, why, sizeof(why)), CKS_OK, "write with %zu down: %s", a,
                 why);
    expect_state(c, v1, CKS_VSTATE_DEGRADED, M - 1);

    cr_assert_eq(cks_test_server_restart(&cl.srv[a]), 0, "restart of server %zu", a);
    cks_test_wait_caught_up(c, a, 20000); /* after its restart */
    usleep(300 * 1000); /* a few handshake tries of every primary */
    uint64_t v2 = version_with_live_coordinator(v1 + 1, down);
    uint64_t t2 = cks_time_ns();
    cr_assert_eq(write_version(c, v2, why, sizeof(why)), CKS_OK, "write after the restart: %s",
                 why);
    fprintf(stderr, "server %zu killed, version %llu written %.2f s later\n", a,
            (unsigned long long)v2, (double)(t2 - t_kill) / 1e9);
    /* within the 5 s the primaries skip a server that timed out: otherwise
     * this test shows nothing */
    cr_assert_lt(t2 - t_kill, 4500000000ull, "the restart took too long to test the skip");
    expect_state(c, v2, CKS_VSTATE_PROTECTED, M);
    verify_version(c, v2, "after the restart");
    cks_client_destroy(c);
}

static int ch_lost_to_transport(const int *down);

/* Three of six servers down with RS(4,2): no stripe could keep k chunks,
 * and no coordinator can win a majority; the write fails at its begin
 * (CKS_ERR_NO_QUORUM) with an error naming the servers, and the version is
 * never restorable. A live server that the kills left answering nothing
 * (UCX's shared-memory FIFO, when a sender is killed in the middle of a
 * message: docs/ARCHITECTURE.md, Known limits) is started again and the
 * write made once more - once: the error must then name the three. */
Test(heal, more_than_m_down_fails_naming_the_servers)
{
    int down[NSRV] = {0};
    char why[512], port[16];
    make_data(cks_test_seed(cks_test_seed_fresh()));
    cks_client_h c = connect_cluster(20000);
    uint64_t v     = version_with_live_coordinator(1, down);
    for (int n = 0; n < 3; n++) {
        size_t s = pick_victim(v, down, (size_t)n * 2);
        cks_test_cluster_kill(&cl, s);
        down[s] = 1;
    }
    cks_status_t st = write_version(c, v, why, sizeof(why));
    fprintf(stderr, "write with 3 down: %s: %s\n", cks_status_name(st), why);
    if (st < 0 && ch_lost_to_transport(down) > 0) {
        cks_client_destroy(c);
        c  = connect_cluster(20000);
        v  = version_with_live_coordinator(v + 1, down);
        st = write_version(c, v, why, sizeof(why));
        fprintf(stderr, "again, version %llu: %s: %s\n", (unsigned long long)v,
                cks_status_name(st), why);
    }
    cr_assert(st < 0, "a write with three servers down: %s", cks_status_name(st));
    int named = 0;
    for (size_t i = 0; i < NSRV; i++) {
        snprintf(port, sizeof(port), ":%u", cl.srv[i].port);
        if (strstr(why, port) != NULL) {
            cr_assert(down[i], "'%s' names server %zu, which is up", why, i);
            named++;
        }
    }
    cr_assert_eq(named, 3, "'%s' names %d of the 3 servers down", why, named);
    cks_restore_h r;
    cr_assert_neq(cks_restore_open(c, "heal", v, &r), CKS_OK);
    cks_client_destroy(c);
}

/* A version's coordinator is down: its next candidate coordinates it (the
 * majority of the servers grants it the version), it commits DEGRADED and
 * restores exactly; with its first two candidates down, the third. Deletes,
 * stats and latest go on with the coordinator down. Before failover, such a
 * version could not begin ('CKS_ERR_UNREACHABLE'). */
Test(heal, version_with_its_coordinator_down_is_coordinated_by_the_next)
{
    int down[NSRV] = {0};
    int cand[NSRV];
    char why[512];
    make_data(cks_test_seed(cks_test_seed_fresh()));
    cks_client_h c = connect_cluster(5000);
    uint64_t v1    = version_with_live_coordinator(1, down);
    cr_assert_eq(write_version(c, v1, why, sizeof(why)), CKS_OK, "%s", why);

    uint64_t v2 = v1 + 1;
    int n       = cks_test_coordinators(cl.map, "heal", v2, cand, NSRV);
    cr_assert_geq(n, 3, "%d coordinator candidates", n);
    cr_assert_eq(cand[0], cks_test_coordinator(cl.map, "heal", v2));
    cks_test_cluster_kill(&cl, (size_t)cand[0]);
    down[cand[0]]   = 1;
    cks_status_t st = write_version(c, v2, why, sizeof(why));
    if (st != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "version %llu with its coordinator %d down: %s (%s)",
                 (unsigned long long)v2, cand[0], cks_status_name(st), why);
    expect_state(c, v2, CKS_VSTATE_DEGRADED, M - 1);
    verify_version(c, v2, "coordinated by the second candidate");

    /* the first two candidates of the next version down (one more server) */
    uint64_t v3 = v2 + 1;
    for (;; v3++) {
        cr_assert_eq(cks_test_coordinators(cl.map, "heal", v3, cand, NSRV), n);
        if ((down[cand[0]] || down[cand[1]]) && !down[cand[2]]) {
            break;
        }
        cr_assert_lt(v3, v2 + 1000, "no version whose third candidate is up");
    }
    for (int i = 0; i < 2; i++) {
        if (!down[cand[i]]) {
            cks_test_cluster_kill(&cl, (size_t)cand[i]);
            down[cand[i]] = 1;
        }
    }
    st = write_version(c, v3, why, sizeof(why));
    if (st != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "version %llu with candidates %d and %d down: %s (%s)",
                 (unsigned long long)v3, cand[0], cand[1], cks_status_name(st), why);
    expect_state(c, v3, CKS_VSTATE_DEGRADED, 0);
    verify_version(c, v1, "two servers down");
    verify_version(c, v2, "two servers down");
    verify_version(c, v3, "coordinated by the third candidate");

    /* latest, and a delete whose coordinator is down */
    cks_version_info_t vi;
    cr_assert_eq(cks_version_latest(c, "heal", &vi), CKS_OK);
    cr_assert_eq(vi.version, v3);
    st = cks_version_delete(c, "heal", v2);
    cr_assert_eq(st, CKS_OK, "delete of version %llu with its coordinator down: %s",
                 (unsigned long long)v2, cks_status_name(st));
    cr_assert_eq(cks_version_stat(c, "heal", v2, &vi), CKS_ERR_NO_SUCH_VERSION);
    verify_version(c, v3, "after the delete");
    cks_client_destroy(c);
}

/* A rank's finish whose coordinator cannot get a majority of the servers to
 * fence its ballot (three of six killed after the begin, the next candidate
 * up): the finish fails with CKS_ERR_NO_QUORUM and says that the outcome is
 * not recorded, naming the coordinator and the servers it could not reach.
 * Before, the rank was told CKS_ERR_UNREACHABLE, "version 1 of 'heal' is
 * coordinated by server 5" (the coordinator itself, which had answered);
 * where the first candidate had missed the begin, CKS_ERR_NO_SUCH_JOB, as
 * if the version had never begun. With the servers back, the coordinator
 * wins its claim and drops the version (lost.c): it ends ABORTED, and a
 * second finish is not OK. */
static uint64_t ch_ms(void);
static void ch_pause_ms(unsigned ms);

Test(heal, finish_whose_coordinator_finds_no_majority_says_so, .timeout = 240)
{
    int down[NSRV] = {0};
    int cand[NSRV];
    size_t killed[3], nkilled = 0;
    char why[512], port[16];
    cks_client_h c = connect_cluster(5000);
    uint64_t v     = version_with_live_coordinator(1, down);
    cr_assert_geq(cks_test_coordinators(cl.map, "heal", v, cand, NSRV), 3);
    cks_test_begin(c, "heal", v);
    for (size_t s = 0; s < NSRV && nkilled < 3; s++) {
        if ((int)s != cand[0] && (int)s != cand[1]) {
            cks_test_cluster_kill(&cl, s);
            down[s]           = 1;
            killed[nkilled++] = s;
        }
    }
    cks_status_t st = cks_version_seal(c, "heal", v);
    cks_client_last_error(c, why, sizeof(why));
    fprintf(stderr, "finish with 3 of 6 down: %s: %s\n", cks_status_name(st), why);
    cr_assert_eq(st, CKS_ERR_NO_QUORUM, "finish with 3 of 6 servers down: %s (%s)",
                 cks_status_name(st), why);
    snprintf(port, sizeof(port), ":%u:", cl.srv[cand[0]].port);
    cr_assert(strstr(why, port) != NULL && strstr(why, "majority") != NULL &&
                  strstr(why, "not recorded") != NULL,
              "the error does not name coordinator %d and why: %s", cand[0], why);
    const char *unreached = strstr(why, "unreachable:");
    cr_assert_not_null(unreached, "the error names no server unreachable: %s", why);
    for (size_t i = 0; i < nkilled; i++) {
        char name[16];
        snprintf(name, sizeof(name), " %zu", killed[i]);
        cr_assert_not_null(strstr(unreached, name), "server %zu is not named: %s", killed[i],
                           why);
    }

    cr_assert_eq(cks_test_cluster_restart_some(&cl, killed, nkilled), 0);
    cks_version_info_t vi = {0};
    uint64_t t0           = ch_ms();
    do {
        st = cks_version_stat(c, "heal", v, &vi);
        if (st == CKS_OK && vi.state != CKS_VSTATE_OPEN) {
            break;
        }
        ch_pause_ms(250);
    } while (ch_ms() - t0 < 60000);
    fprintf(stderr, "after the restart: %s, %s after %llu ms\n", cks_status_name(st),
            cks_vstate_string(vi.state), (unsigned long long)(ch_ms() - t0));
    cr_assert_eq(st, CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_ABORTED, "version %llu is %s", (unsigned long long)v,
                 cks_vstate_string(vi.state));
    cr_assert_neq(cks_version_seal(c, "heal", v), CKS_OK);
    cks_client_destroy(c);
}

/* ---- a primary that dies after STORED, before it spread the object ---- */

#define ST_MAX 64 /* objects at most, until one is held on the victim */

static uint64_t st_size(int i)
{
    return objs.size[i % NOBJ];
}

static void st_key(char *key, size_t len, int i)
{
    snprintf(key, len, "stalled/%d", i);
}

static void st_fill(uint8_t *buf, uint64_t v, int i)
{
    cks_test_fill(buf, st_size(i), objs.seed * 7919 + v * 131 + (uint64_t)i);
}

static cks_status_t st_put(cks_client_h c, uint64_t v, int i, uint8_t *buf)
{
    cks_put_params_t p = {0};
    char key[64];
    st_key(key, sizeof(key), i);
    st_fill(buf, v, i);
    p.job     = "heal";
    p.version = v;
    p.key     = key;
    p.buffer  = buf;
    p.size    = st_size(i);
    return cks_put(c, &p);
}

/* Objects first..first+n-1 of version v, bit-exact. */
static void st_verify_from(cks_client_h c, uint64_t v, int first, int n, uint8_t *got,
                           uint8_t *want)
{
    cks_restore_h r = NULL;
    char key[64];
    cks_status_t st = cks_restore_open(c, "heal", v, &r);
    cr_assert_eq(st, CKS_OK, "open version %llu: %s", (unsigned long long)v,
                 cks_status_name(st));
    for (int i = first; i < first + n; i++) {
        cks_get_params_t g = {0};
        uint64_t len       = UINT64_MAX;
        st_key(key, sizeof(key), i);
        st_fill(want, v, i);
        g.key         = key;
        g.buffer      = got;
        g.buffer_size = 4 * MiB;
        st            = cks_get(r, &g, &len);
        cr_assert_eq(st, CKS_OK, "version %llu '%s': %s", (unsigned long long)v, key,
                     cks_status_name(st));
        cr_assert_eq(len, st_size(i), "'%s': %llu bytes", key, (unsigned long long)len);
        cr_assert(memcmp(got, want, len) == 0, "version %llu '%s': bytes differ",
                  (unsigned long long)v, key);
    }
    cks_restore_close(r);
}

/* Objects 0..n-1 of version v, bit-exact. */
static void st_verify(cks_client_h c, uint64_t v, int n, uint8_t *got, uint8_t *want)
{
    st_verify_from(c, v, 0, n, got, want);
}

/* Put objects of version v (at least NOBJ) until server x, whose puts stall
 * (fault put_stall), holds one: how many were put (at most ST_MAX). */
static int st_put_until_held(cks_client_h c, uint64_t v, size_t x, uint8_t *buf)
{
    int n = 0;
    while (n < ST_MAX && (n < NOBJ || cks_test_log_count(cl.srv[x].log, "fault put_stall") == 0)) {
        cks_status_t st = st_put(c, v, n, buf);
        cr_assert_eq(st, CKS_OK, "put %d: %s", n, cks_status_name(st));
        n++;
    }
    return n;
}

/* A primary answers STORED for an object and is killed before it spreads
 * it or reports it to the coordinator (fault put_stall holds every object
 * it is primary of; the kill comes once one is held). The coordinator
 * learns from the finish how many objects the rank stored on each primary,
 * finds that primary gone while it owes objects, and fails the finish at
 * once, naming it, instead of waiting for objects that will never come
 * (before: the finish ran into the client's 60 s timeout, or the version's
 * 600 s deadline). The trainer's retry, the next number, commits DEGRADED
 * and restores bit-exact. */
Test(heal, primary_killed_after_stored_fails_the_finish_at_once, .timeout = 240)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    int down[NSRV] = {0};
    char why[512], name[32];
    uint8_t *buf = malloc(4 * MiB), *want = malloc(4 * MiB);
    cr_assert(buf != NULL && want != NULL);
    make_data(cks_test_seed(cks_test_seed_fresh()));

    uint64_t v = version_with_live_coordinator(1, down);
    size_t x   = pick_victim(v, down, (size_t)objs.seed % NSRV);
    snprintf(cl.srv[x].faults, sizeof(cl.srv[x].faults), "put_stall:always");
    cks_test_server_stop(&cl.srv[x], SIGTERM);
    cr_assert_eq(cks_test_server_restart(&cl.srv[x]), 0, "restart of server %zu", x);

    cks_client_h c = connect_cluster(60000); /* the default request timeout */
    cks_version_params_t vp = {.job = "heal", .version = v};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    int n = st_put_until_held(c, v, x, buf);
    int held = cks_test_log_count(cl.srv[x].log, "fault put_stall");
    cr_assert_gt(held, 0, "none of %d objects has server %zu as its primary", n, x);
    cks_test_cluster_kill(&cl, x);
    down[x] = 1;
    fprintf(stderr, "version %llu: %d objects put, %d held by server %zu (id %d), killed\n",
            (unsigned long long)v, n, held, x, cl.srv[x].id);

    uint64_t t0     = cks_time_ns();
    cks_status_t st = cks_version_finish(c, "heal", v, 0);
    double secs     = (double)(cks_time_ns() - t0) / 1e9;
    cks_client_last_error(c, why, sizeof(why));
    fprintf(stderr, "finish of version %llu took %.2f s: %s (%s)\n", (unsigned long long)v,
            secs, cks_status_name(st), why);
    cr_assert_eq(st, CKS_ERR_DATA_LOST, "finish with a dead primary: %s (%s)",
                 cks_status_name(st), why);
    /* 0.25 s here when quiet; once 10.25 s under ASan with the 2 cores
     * loaded by builds beside it. Far below the client's 60 s timeout,
     * which is what the finish ran into before. */
    cr_assert_lt(secs, 30.0, "the finish took %.2f s", secs);
    snprintf(name, sizeof(name), "server %d ", cl.srv[x].id);
    cr_assert(strstr(why, name) != NULL, "'%s' does not name %s", why, name);
    cks_restore_h r;
    cr_assert_neq(cks_restore_open(c, "heal", v, &r), CKS_OK);

    /* the trainer retries as the next version: it commits without x */
    uint64_t v2 = version_with_live_coordinator(v + 1, down);
    vp.version  = v2;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    for (int i = 0; i < n; i++) {
        st = st_put(c, v2, i, buf);
        cr_assert_eq(st, CKS_OK, "retry, put %d: %s", i, cks_status_name(st));
    }
    t0   = cks_time_ns();
    st   = cks_version_finish(c, "heal", v2, 0);
    secs = (double)(cks_time_ns() - t0) / 1e9;
    cks_client_last_error(c, why, sizeof(why));
    fprintf(stderr, "retry as version %llu: finish took %.2f s: %s\n", (unsigned long long)v2,
            secs, cks_status_name(st));
    cr_assert_eq(st, CKS_OK, "retry as version %llu: %s (%s)", (unsigned long long)v2,
                 cks_status_name(st), why);
    cks_version_info_t vi;
    cr_assert_eq(cks_version_stat(c, "heal", v2, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_DEGRADED, "version %llu is %s", (unsigned long long)v2,
                 cks_vstate_string(vi.state));
    cr_assert_eq(vi.nobjects, (uint64_t)n);
    st_verify(c, v2, n, buf, want);
    cks_client_destroy(c);
    free(buf);
    free(want);
}

/* The same, when the rank's finish reaches the version's next candidate
 * while that one catches up after a restart (fault catchup_hold holds its
 * first round 4 s): the finish is held there until it has caught up, then
 * taken over. Before: a held finish lost the counts of the objects it
 * stored on each primary, so the takeover could not see that the dead
 * coordinator - also a primary - owed an object, and the version ran into
 * its deadline (CKS_ERR_TIMEOUT; seen in the randomized kill test under
 * ASan, seed 471413889206). Now the finish fails at once with
 * CKS_ERR_DATA_LOST, naming the server. */
Test(heal, finish_held_by_a_candidate_catching_up_knows_the_dead_primary, .timeout = 240)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    int down[NSRV] = {0}, cand[NSRV];
    char why[512], name[32];
    uint8_t *buf = malloc(4 * MiB);
    cr_assert(buf != NULL);
    make_data(cks_test_seed(cks_test_seed_fresh()));

    uint64_t v = version_with_live_coordinator(1, down);
    cr_assert_geq(cks_test_coordinators(cl.map, "heal", v, cand, NSRV), 2);
    size_t x = (size_t)cand[0], d = (size_t)cand[1]; /* the coordinator, the next one */
    snprintf(cl.srv[x].faults, sizeof(cl.srv[x].faults), "put_stall:always");
    cks_test_server_stop(&cl.srv[x], SIGTERM);
    cr_assert_eq(cks_test_server_restart(&cl.srv[x]), 0, "restart of server %zu", x);
    cks_client_h c = connect_cluster(60000);
    snprintf(cl.srv[d].faults, sizeof(cl.srv[d].faults), "catchup_hold");
    cks_test_server_stop(&cl.srv[d], SIGTERM);
    cr_assert_eq(cks_test_server_restart(&cl.srv[d]), 0, "restart of server %zu", d);

    uint64_t t0             = cks_time_ns();
    cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_TIMEOUT, .job = "heal",
                               .version = v, .timeout_s = 60};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    int n = st_put_until_held(c, v, x, buf);
    cr_assert_gt(cks_test_log_count(cl.srv[x].log, "fault put_stall"), 0,
                 "none of %d objects has server %zu as its primary", n, x);
    cks_test_cluster_kill(&cl, x);
    double before = (double)(cks_time_ns() - t0) / 1e9;

    uint64_t t1     = cks_time_ns();
    cks_status_t st = cks_version_finish(c, "heal", v, 0);
    double secs     = (double)(cks_time_ns() - t1) / 1e9;
    cks_client_last_error(c, why, sizeof(why));
    int held = cks_test_log_count(cl.srv[d].log, "fault point 'catchup_hold' fired");
    fprintf(stderr, "version %llu: coordinator %zu killed %.2f s after server %zu restarted "
                    "(its catch-up held: %d); finish after %.2f s: %s (%s)\n",
            (unsigned long long)v, x, before, d, held, secs, cks_status_name(st), why);
    cr_assert_eq(held, 1, "server %zu did not hold its catch-up", d);
    cr_assert_lt(before, 4.0, "the finish came after server %zu's catch-up hold", d);
    cr_assert_eq(st, CKS_ERR_DATA_LOST, "finish with the dead coordinator owing an object: "
                 "%s (%s)", cks_status_name(st), why);
    cr_assert_lt(secs, 30.0, "the finish took %.2f s (the version's deadline is 60 s)", secs);
    snprintf(name, sizeof(name), "server %d ", cl.srv[x].id);
    cr_assert(strstr(why, name) != NULL, "'%s' does not name %s", why, name);
    cks_client_destroy(c);
    free(buf);
}

/*
 * The first candidate restarted while another coordinated the version: it
 * is the primary of an object, reports it to itself first, finds the
 * version unknown and claims it to learn who coordinates it (lost.c). That
 * claim loses (the coordinator's grantors refuse it) and is withdrawn, but
 * until then the servers that had not granted the coordinator's claim - the
 * claimant itself and another that was down at the begin - hold it. Fault
 * claim_release_late withdraws it 1.5 s late (a claimant that cannot reach
 * some servers waits up to 2 s for them); a third server is killed and the
 * rank finishes meanwhile. Before: the coordinator's fence found 3 of 6
 * servers (a majority is 4), recorded nothing, and the version failed with
 * 2 servers unreachable (seen in the randomized partition test: "fenced,
 * its commit is neither recorded nor sent ... coordinated by server 1
 * (ballot 0) here"). Now those servers answer that the claim holds for now
 * (CKS_ERR_BUSY), the fence asks again every 250 ms, and the version
 * commits and restores bit-exact.
 */
Test(heal, claim_of_a_candidate_that_missed_the_begin_does_not_fail_the_commit,
     .timeout = 240)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    int down[NSRV] = {0}, cand[NSRV], obj = -1;
    char why[512], key[64];
    uint8_t *buf = malloc(4 * MiB), *want = malloc(4 * MiB);
    cr_assert(buf != NULL && want != NULL);
    make_data(cks_test_seed(cks_test_seed_fresh()));

    uint64_t v = version_with_live_coordinator(1, down);
    cr_assert_geq(cks_test_coordinators(cl.map, "heal", v, cand, NSRV), 2);
    size_t c0 = (size_t)cand[0], c1 = (size_t)cand[1], x = NSRV, y = NSRV;
    for (size_t i = 0; i < NSRV; i++) { /* x: down at the begin; y: killed at the end */
        if (i != c0 && i != c1) {
            if (x == NSRV) {
                x = i;
            } else if (y == NSRV) {
                y = i;
            }
        }
    }
    for (int i = 0; i < 256 && obj < 0; i++) { /* an object whose primary is c0 */
        st_key(key, sizeof(key), i);
        obj = cks_test_primary(cl.map, "heal", key, K, M) == (int)c0 ? i : -1;
    }
    cr_assert(obj >= 0 && y < NSRV);
    cks_test_cluster_kill(&cl, c0);
    cks_test_cluster_kill(&cl, x);
    cks_client_h c          = connect_cluster(5000);
    cks_version_params_t vp = {.job = "heal", .version = v};
    cks_status_t st         = cks_version_begin(c, &vp); /* at c1: c0 is down */
    cr_assert_eq(st, CKS_OK, "begin of version %llu: %s", (unsigned long long)v,
                 cks_status_name(st));
    snprintf(cl.srv[c0].faults, sizeof(cl.srv[c0].faults), "claim_release_late:always");
    cr_assert_eq(cks_test_server_restart(&cl.srv[c0]), 0, "restart of server %zu", c0);
    cr_assert_eq(cks_test_server_restart(&cl.srv[x]), 0, "restart of server %zu", x);
    cks_test_wait_caught_up(c, c0, 30000);
    cks_test_wait_caught_up(c, x, 30000);

    st = st_put(c, v, obj, buf);
    cr_assert_eq(st, CKS_OK, "put of '%s' (primary %zu): %s", key, c0, cks_status_name(st));
    cr_assert(cks_test_log_has(cl.srv[c0].log, "fault claim_release_late", 10000),
              "server %zu did not claim version %llu", c0, (unsigned long long)v);
    cks_test_cluster_kill(&cl, y);
    uint64_t t0 = cks_time_ns();
    st          = cks_version_finish(c, "heal", v, 0);
    double secs = (double)(cks_time_ns() - t0) / 1e9;
    cks_client_last_error(c, why, sizeof(why));
    fprintf(stderr, "version %llu: coordinator %zu, first candidate %zu back with its claim "
                    "held, %zu back, %zu killed: finish after %.2f s: %s (%s)\n",
            (unsigned long long)v, c1, c0, x, y, secs, cks_status_name(st),
            st == CKS_OK ? "" : why);
    cr_assert_eq(st, CKS_OK, "finish of version %llu: %s (%s)", (unsigned long long)v,
                 cks_status_name(st), why);
    cr_assert_gt(cks_test_log_count(cl.srv[c1].log, "asking again in"), 0,
                 "server %zu's fence was not asked again", c1);
    cks_version_info_t vi;
    cr_assert_eq(cks_version_stat(c, "heal", v, &vi), CKS_OK);
    cr_assert(vi.state == CKS_VSTATE_PROTECTED || vi.state == CKS_VSTATE_DEGRADED,
              "version %llu is %s", (unsigned long long)v, cks_vstate_string(vi.state));
    st_verify_from(c, v, obj, 1, buf, want);
    cks_client_destroy(c);
    free(buf);
    free(want);
}

/* One object put by a primary whose chunk puts fail as `faults` say (its
 * server restarted with them), two other servers killed: the version
 * commits DEGRADED and restores bit-exact. The primary's log lines that
 * hold each of `lines` (NULL-terminated) are counted into counts[]. */
static void at_once_version(const char *faults, const char *const *lines, int *counts)
{
    int down[NSRV] = {0}, obj = -1;
    char why[512], key[64];
    uint8_t *buf = malloc(4 * MiB), *want = malloc(4 * MiB);
    cr_assert(buf != NULL && want != NULL);
    make_data(cks_test_seed(cks_test_seed_fresh()));

    uint64_t v   = version_with_live_coordinator(1, down);
    size_t coord = (size_t)cks_test_coordinator(cl.map, "heal", v), p = (coord + 1) % NSRV;
    for (int i = 0; i < 256 && obj < 0; i++) { /* an object whose primary is p */
        st_key(key, sizeof(key), 3 + 8 * i); /* a whole stripe of data */
        obj = cks_test_primary(cl.map, "heal", key, K, M) == (int)p ? 3 + 8 * i : -1;
    }
    cr_assert(obj >= 0);
    /* p stops once the servers have connected to each other: a connection
     * request that reaches it as it stops hits UCX 1.13's listener fault
     * (not counted; it did in most runs when p stopped at once) */
    cks_client_h c = connect_cluster(30000);
    for (size_t i = 0; i < NSRV; i++) {
        cks_test_wait_caught_up(c, i, 30000);
    }
    snprintf(cl.srv[p].faults, sizeof(cl.srv[p].faults), "%s", faults);
    cks_test_server_stop(&cl.srv[p], SIGTERM);
    cr_assert_eq(cks_test_server_restart(&cl.srv[p]), 0, "restart of server %zu", p);
    cks_test_wait_caught_up(c, p, 30000);
    size_t killed[2], n = 0;
    for (size_t i = 0; i < NSRV && n < 2; i++) {
        if (i != coord && i != p) {
            cks_test_cluster_kill(&cl, i);
            killed[n++] = i;
        }
    }
    cks_version_params_t vp = {.job = "heal", .version = v};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cks_status_t st = st_put(c, v, obj, buf);
    cr_assert_eq(st, CKS_OK, "put of '%s': %s", key, cks_status_name(st));
    st = cks_version_finish(c, "heal", v, 0);
    cks_client_last_error(c, why, sizeof(why));
    for (size_t i = 0; lines[i] != NULL; i++) {
        counts[i] = cks_test_log_count(cl.srv[p].log, lines[i]);
        fprintf(stderr, "primary %zu: %d lines with \"%s\"\n", p, counts[i], lines[i]);
    }
    fprintf(stderr, "version %llu: primary %zu (%s), servers %zu and %zu killed: %s (%s)\n",
            (unsigned long long)v, p, faults, killed[0], killed[1], cks_status_name(st),
            st == CKS_OK ? "" : why);
    cr_assert_eq(st, CKS_OK, "finish of version %llu: %s (%s)", (unsigned long long)v,
                 cks_status_name(st), why);
    cks_version_info_t vi;
    cr_assert_eq(cks_version_stat(c, "heal", v, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_DEGRADED, "version %llu is %s", (unsigned long long)v,
                 cks_vstate_string(vi.state));
    st_verify_from(c, v, obj, 1, buf, want);
    cks_client_destroy(c);
    free(buf);
    free(want);
}

/*
 * A chunk put that its connection fails at once with a timeout - the
 * transport's, long before the member's: a connection made while the member
 * was cut off fails just as the member is back - is sent again on a new
 * connection, as one that failed with "connection lost" already was. Seen
 * in the randomized partition test: a primary's chunk to a server plugged
 * back in a second before failed that way, and with two other servers
 * unreachable the object missed 3 of 6 chunks and its version was aborted
 * (CKS_ERR_UNREACHABLE). Fault chunk_send_timeout fails every chunk put of
 * the primary that way on its first try; two other servers are killed.
 * Before: every chunk counted missing and the version failed; now it
 * commits DEGRADED and restores bit-exact.
 */
Test(heal, chunk_put_failed_at_once_by_its_connection_is_sent_again, .timeout = 240)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    const char *lines[] = {"fault chunk_send_timeout", NULL};
    int counts[1];
    at_once_version("chunk_send_timeout:always", lines, counts);
    cr_assert_gt(counts[0], 0, "the fault never fired");
}

/*
 * A chunk put whose try on a new connection fails at once too: a server
 * plugged back in a second before, whose peers' connections made while it
 * was cut off fail as it returns - and for a moment so may a new one (seen
 * in the randomized partition test: "destination unreachable" on both
 * tries, 1 s after the heal; with two other servers killed the object
 * missed 3 of 6 chunks and its version was aborted, CKS_ERR_UNREACHABLE).
 * Such a chunk keeps its space and is sent after all when the object would
 * fail without it; there it is tried again every 200 ms until the member
 * timeout while its stripe has fewer than k chunks stored. Faults fail
 * every first try and every try on a new connection of the primary, the
 * second chance's too: it is the tries every 200 ms that store the chunks.
 * Before: every chunk counted missing and the version failed; now it
 * commits DEGRADED and restores bit-exact.
 */
Test(heal, chunk_put_failed_at_once_twice_is_tried_again_while_its_stripe_needs_it,
     .timeout = 240)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    const char *lines[] = {"fault chunk_resend_timeout",
                           "members that failed a moment ago after all", NULL};
    int counts[2];
    at_once_version("chunk_send_timeout:always,chunk_resend_timeout:always", lines, counts);
    cr_assert_gt(counts[0], 0, "the fault never fired");
    cr_assert_gt(counts[1], 0, "no second chance");
}

/* ---- randomized: kills, restarts and stops between and during checkpoints ---- */


/* 50 rounds; 20 under AddressSanitizer (scripts/test runs the suite in both
 * builds: the sanitizer's pass checks the same paths for memory errors,
 * the release pass makes the 50) */
#if defined(__SANITIZE_ADDRESS__)
#define CH_ROUNDS     20
#define CH_NET_ROUNDS 0 /* the release pass runs them (the suite's time) */
#else
#define CH_ROUNDS     50
#define CH_NET_ROUNDS 50 /* over TCP, a cut costs the first request to it a
                            timeout (5 s at the client, 10 s between servers):
                            0-25 s a round, 5-9 s on average; scripts/test
                            runs this binary in a lane of its own, beside
                            the rest; CKS_TEST_PARTITION_ROUNDS=N runs N */
#endif
#define CH_BOUND_MS     240000
#define CH_NET_BOUND_MS 720000
#define CH_OBJS     2 /* per rank */
#define CH_RETAIN   4

static uint64_t ch_rng;

/* What the random tests did to a server (down[]): up, killed, or cut off the
 * network (heal_partition only). */
enum { CH_UP = 0, CH_KILLED = 1, CH_CUT = 2 };
static cks_test_netns_t ch_net; /* heal_partition's network */
static int ch_cuts;             /* disruptions may cut servers off */
static int ch_ncuts;            /* how many they cut */

static uint64_t ch_next(void)
{
    ch_rng = ch_rng * 6364136223846793005ull + 1442695040888963407ull;
    return ch_rng >> 33;
}

static void ch_pause_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static uint64_t ch_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t ch_size(uint64_t v, int rank, int i)
{
    return 1 + (v * 7919 + (uint64_t)rank * 104729 + (uint64_t)i * 1299709) % (300 * 1024);
}

/* The bytes of object i of rank `rank` in version v come from this seed. */
static uint64_t ch_seed(uint64_t seed, uint64_t v, int rank, int i)
{
    return seed * 1000003 + v * 131 + (uint64_t)rank * 17 + (uint64_t)i;
}

static void ch_key(char *key, size_t len, uint64_t v, int rank, int i)
{
    snprintf(key, len, "v%llu/rank%d/part%d", (unsigned long long)v, rank, i);
}

static cks_status_t ch_put_rank(cks_client_h c, uint64_t seed, uint64_t v, int rank,
                                uint8_t *buf)
{
    cks_status_t st = CKS_OK;
    char key[64];
    for (int i = 0; st == CKS_OK && i < CH_OBJS; i++) {
        cks_put_params_t p = {0};
        ch_key(key, sizeof(key), v, rank, i);
        cks_test_fill(buf, ch_size(v, rank, i), ch_seed(seed, v, rank, i));
        p.field_mask = CKS_PUT_FIELD_TAGS;
        p.job        = "chaos";
        p.version    = v;
        p.key        = key;
        p.buffer     = buf;
        p.size       = ch_size(v, rank, i);
        p.tags       = (cks_tags_t){CKS_KIND_DENSE, 0, CKS_TAG_NONE, rank};
        st           = cks_put(c, &p);
    }
    return st;
}

/* Every object of version v, bit-exact, or the error. */
static cks_status_t ch_verify(cks_client_h c, uint64_t seed, uint64_t v, uint8_t *got,
                              uint8_t *want)
{
    cks_restore_h r = NULL;
    char key[64];
    cks_status_t st = cks_restore_open(c, "chaos", v, &r);
    for (int rank = 0; st == CKS_OK && rank < 2; rank++) {
        for (int i = 0; st == CKS_OK && i < CH_OBJS; i++) {
            cks_get_params_t g = {0};
            uint64_t len = 0, size = ch_size(v, rank, i);
            ch_key(key, sizeof(key), v, rank, i);
            g.key         = key;
            g.buffer      = got;
            g.buffer_size = 300 * 1024;
            st            = cks_get(r, &g, &len);
            if (st == CKS_OK) {
                cks_test_fill(want, size, ch_seed(seed, v, rank, i));
                cr_assert_eq(len, size, "version %llu %s: %llu bytes", (unsigned long long)v,
                             key, (unsigned long long)len);
                cr_assert(memcmp(got, want, size) == 0, "version %llu %s: WRONG BYTES",
                          (unsigned long long)v, key);
            }
        }
    }
    if (r != NULL) {
        cks_restore_close(r);
    }
    return st;
}

/* Both ranks finish version v at once (rank 1 from a thread: a finish
 * waits for the other's): rank 0's status, rank 1's in *st1_p, rank 0's
 * error text in why, and the milliseconds both took in *took_p. */
static cks_status_t ch_finish_both(cks_client_h c0, cks_client_h c1, uint64_t v,
                                   cks_status_t *st1_p, char *why, size_t why_len,
                                   uint64_t *took_p)
{
    uint64_t t0 = ch_ms();
    cks_test_finish_t f1;
    cks_test_finish_start(&f1, c1, "chaos", v, 1);
    cks_status_t st = cks_version_finish(c0, "chaos", v, 0);
    cks_client_last_error(c0, why, why_len);
    *st1_p  = cks_test_finish_join(&f1);
    *took_p = ch_ms() - t0;
    return st;
}

/* Version vp->version by two ranks: rank 0 begins it and puts its objects,
 * `between` runs (may be NULL), rank 1 puts its own, and both finish at
 * once (rank 1 from a thread: a finish waits for the other's). The first
 * failure, or CKS_OK when the version committed. */
static cks_status_t ch_write(cks_client_h c0, cks_client_h c1, uint64_t seed,
                             const cks_version_params_t *vp, uint8_t *buf,
                             void (*between)(void *), void *arg)
{
    uint64_t v       = vp->version;
    cks_status_t st  = cks_version_begin(c0, vp);
    cks_status_t st0 = st == CKS_OK ? ch_put_rank(c0, seed, v, 0, buf) : st;
    if (between != NULL) {
        between(arg);
    }
    cks_status_t st1 = st == CKS_OK ? ch_put_rank(c1, seed, v, 1, buf) : st;
    if (st == CKS_OK) {
        cks_test_finish_t f1;
        cks_test_finish_start(&f1, c1, "chaos", v, 1);
        st                = cks_version_finish(c0, "chaos", v, 0);
        cks_status_t fin1 = cks_test_finish_join(&f1);
        st                = st == CKS_OK ? fin1 : st;
    }
    if (st == CKS_OK && (st0 != CKS_OK || st1 != CKS_OK)) {
        st = st0 != CKS_OK ? st0 : st1;
    }
    return st;
}

/* A server stopped for a moment, from a thread of its own (its SIGCONT must
 * not wait for a checkpoint the stop delays). */
typedef struct {
    pid_t pid;
    unsigned ms;
} ch_stop_t;

static void *ch_stopper(void *arg)
{
    ch_stop_t *s = arg;
    kill(s->pid, SIGSTOP);
    ch_pause_ms(s->ms); /* the length of the stop */
    kill(s->pid, SIGCONT);
    return NULL;
}

static int ch_unreachable(const int *down)
{
    int n = 0;
    for (size_t i = 0; i < NSRV; i++) {
        n += down[i] != CH_UP;
    }
    return n;
}

/* Servers the test did not take down that UCX took out: a server that died
 * on its own (UCX 1.13's TCP transport aborts on an assertion now and then
 * when a peer is killed), or one that answers nothing within 3 s (over
 * shared memory, a peer killed between taking a slot of its receive FIFO and
 * marking it written leaves that slot unwritten, and the server then takes
 * no message at all). Each is named with its log, killed and started again;
 * their number is returned. Such a server counts as one more down: a
 * checkpoint that fails with it and m others down is no fault of ours. */
static int ch_stall_exits; /* of those, servers that exited on their own check */
static uint64_t ch_renewals; /* UCX workers the test's clients replaced themselves */

static uint64_t ch_renewals_of(cks_client_h c)
{
    cks_client_stats_t cs = {0};
    return cks_client_stats(c, &cs) == CKS_OK ? cs.receive_renewals : 0;
}

static int ch_lost_to_transport(const int *down)
{
    int lost = 0;
    for (size_t i = 0; i < NSRV; i++) {
        cks_client_h one = NULL;
        uint64_t u       = 0;
        const char *what = NULL;
        char how[96];
        int wst = 0;
        if (down[i]) {
            continue;
        }
        int gone = cl.srv[i].pid <= 0 || waitpid(cl.srv[i].pid, &wst, WNOHANG) == cl.srv[i].pid;
        if (!gone && (cks_test_connect(&cl.srv[i], 3000, &one) != CKS_OK ||
                      cks_cluster_usage(one, &u, NULL) != CKS_OK)) {
            /* it may have exited on its own check meanwhile */
            gone = waitpid(cl.srv[i].pid, &wst, WNOHANG) == cl.srv[i].pid;
            what = gone ? NULL : "answers nothing";
        }
        if (gone) {
            int sentinel = cl.srv[i].pid > 0 && WIFEXITED(wst) &&
                           WEXITSTATUS(wst) == CKS_SV_EXIT_STALLED;
            snprintf(how, sizeof(how), "%s (%s %d)",
                     sentinel ? "exited: its receive path stalled (--stall-exit)"
                              : "died on its own",
                     WIFSIGNALED(wst) ? "signal" : "exit status",
                     WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
            what          = how;
            cl.srv[i].pid = 0;
            ch_stall_exits += sentinel;
        }
        if (one != NULL) {
            cks_client_destroy(one);
        }
        if (what != NULL) {
            fprintf(stderr, "  server %zu %s (log %s): started again\n", i, what,
                    cl.srv[i].log);
            if (cl.srv[i].pid > 0) {
                cks_test_server_stacks(&cl.srv[i]); /* what it is stuck in */
                cks_test_cluster_kill(&cl, i);
            }
            cr_assert_eq(cks_test_server_restart(&cl.srv[i]), 0, "restart of server %zu", i);
            lost++;
        }
    }
    return lost;
}

/* A client of the test that UCX took out: the same shared-memory FIFO
 * fault on the client's side (a server killed while it wrote a reply into
 * the client's receive FIFO leaves the slot unwritten, and the client takes
 * no reply from any server again; its handshakes, over TCP, still work). A
 * client that gets no answer to `latest` in time while a fresh one does is
 * such a one: it is replaced (*c_p, by one with timeout_ms) and 1 returned. */
static int ch_client_lost_to_transport(cks_client_h *c_p, int timeout_ms)
{
    cks_version_info_t vi;
    cks_status_t st = cks_version_latest(*c_p, "chaos", &vi);
    if (st == CKS_OK || st == CKS_ERR_NO_SUCH_JOB || st == CKS_ERR_NO_SUCH_VERSION) {
        return 0;
    }
    cks_client_h fresh = connect_cluster(timeout_ms);
    cks_status_t fst   = cks_version_latest(fresh, "chaos", &vi);
    if (fst != CKS_OK && fst != CKS_ERR_NO_SUCH_JOB && fst != CKS_ERR_NO_SUCH_VERSION) {
        cks_client_destroy(fresh); /* no server answers either: not the client */
        return 0;
    }
    cks_client_stats_t cs = {0};
    cks_client_stats(*c_p, &cs);
    fprintf(stderr, "  a client of the test got no answer (%s) where a new one did: UCX took "
                    "it out (its receive path stalled for %llu s by its own check); replaced\n",
            cks_status_name(st), (unsigned long long)cs.receive_stalled_s);
    ch_renewals += ch_renewals_of(*c_p);
    cks_client_destroy(*c_p);
    *c_p = fresh;
    return 1;
}

/* One disruption: kill an up server (while fewer than M are unreachable),
 * bring a killed one back (restarted) or a cut one (plugged back in), stop
 * one for a moment, or (with ch_cuts) cut one off the network (while fewer
 * than M are unreachable). What it did in `what`; the server it killed or
 * cut in *killed_p (-1: none). */
static void ch_disrupt(int *down, pthread_t *stopper, int *stopping, ch_stop_t *stop,
                       char *what, size_t what_len, int *killed_p)
{
    uint64_t d = ch_next() % (ch_cuts ? 12 : 10);
    size_t s   = ch_next() % NSRV;
    *killed_p  = -1;
    snprintf(what, what_len, "nothing");
    if ((d < 3 || d >= 10) && ch_unreachable(down) < M) {
        for (size_t i = 0; i < NSRV && down[s]; i++) {
            s = (s + 1) % NSRV;
        }
        if (d < 3) {
            cks_test_cluster_kill(&cl, s);
            down[s] = CH_KILLED;
            snprintf(what, what_len, "killed %zu", s);
        } else {
            cr_assert_eq(cks_test_netns_cut(&ch_net, (int)s), 0, "cut of server %zu", s);
            down[s] = CH_CUT;
            ch_ncuts++;
            snprintf(what, what_len, "cut %zu off", s);
        }
        *killed_p = (int)s;
    } else if (d < 6 && ch_unreachable(down) > 0) {
        for (size_t i = 0; i < NSRV && !down[s]; i++) {
            s = (s + 1) % NSRV;
        }
        if (down[s] == CH_CUT) {
            cr_assert_eq(cks_test_netns_heal(&ch_net, (int)s), 0, "heal of server %zu", s);
            snprintf(what, what_len, "plugged %zu back in", s);
        } else {
            cr_assert_eq(cks_test_server_restart(&cl.srv[s]), 0, "restart of server %zu", s);
            snprintf(what, what_len, "restarted %zu", s);
        }
        down[s] = CH_UP;
    } else if (d < 8 && ch_unreachable(down) < M && !*stopping) {
        for (size_t i = 0; i < NSRV && down[s]; i++) {
            s = (s + 1) % NSRV;
        }
        stop->pid = cl.srv[s].pid;
        stop->ms  = 300 + (unsigned)(ch_next() % 900);
        cr_assert_eq(pthread_create(stopper, NULL, ch_stopper, stop), 0);
        *stopping = 1;
        snprintf(what, what_len, "stopped %zu for %u ms", s, stop->ms);
    }
}

/* ch_disrupt() between the two ranks' puts (ch_write()'s `between`). */
typedef struct {
    int *down;
    pthread_t *stopper;
    int *stopping;
    ch_stop_t *stop;
    char *what;
    size_t what_len;
    int *killed_p;
} ch_during_t;

static void ch_during(void *arg)
{
    ch_during_t *d = arg;
    ch_disrupt(d->down, d->stopper, d->stopping, d->stop, d->what, d->what_len, d->killed_p);
}

/* The first version from `from` on whose first coordinator candidate is up. */
static uint64_t ch_version_led_by_live(uint64_t from, const int *down)
{
    for (uint64_t v = from; v < from + 1000; v++) {
        int coord = cks_test_coordinator(cl.map, "chaos", v);
        cr_assert(coord >= 0);
        if (!down[coord]) {
            return v;
        }
    }
    cr_assert_fail("no version with a live first candidate");
    return 0;
}

/* A committed version, once its stat answers so (a server that just came
 * back may answer BUSY, or OPEN, until its catch-up learned the commit);
 * bounded: 30 s. */
static cks_vstate_t ch_wait_committed(cks_client_h c, uint64_t v)
{
    cks_version_info_t vi = {0};
    cks_status_t st       = CKS_ERR_BUSY;
    for (int t = 0; t < 300; t++) {
        st = cks_version_stat(c, "chaos", v, &vi);
        if (st == CKS_OK &&
            (vi.state == CKS_VSTATE_PROTECTED || vi.state == CKS_VSTATE_DEGRADED)) {
            return vi.state;
        }
        ch_pause_ms(100);
    }
    cr_assert_fail("version %llu: %s, %s", (unsigned long long)v, cks_status_name(st),
                   cks_vstate_string(vi.state));
    return vi.state;
}

/*
 * A version's coordinator killed after the begin (issue 16, item 2):
 * 1. both ranks' puts done, the coordinator killed, then both finish: the
 *    finish goes on to the next candidate, which takes the version over
 *    (a majority grants it a higher ballot), learns the objects again from
 *    their primaries, and commits; every object restores bit-exact.
 * 2. rank 0 finished (its seal waits at the coordinator), the coordinator
 *    killed, then rank 1 finishes: rank 0's client sends its seal again to
 *    the next candidate, and the version commits there.
 * Then both coordinators return: neither drops the version it left open
 * (the others hold its record), both versions still restore bit-exact, and
 * the next version commits.
 */
Test(heal, coordinator_killed_between_begin_and_finish_is_taken_over, .timeout = 240)
{
    uint64_t seed = cks_test_seed(61);
    int down[NSRV] = {0};
    uint8_t *buf = malloc(300 * 1024), *want = malloc(300 * 1024);
    char why[512] = "";
    cr_assert(buf != NULL && want != NULL);
    cks_client_h c0 = connect_cluster(5000), c1 = connect_cluster(5000);
    cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT,
                               .job = "chaos", .version = 1, .nranks = 2, .timeout_s = 30};
    cr_assert_eq(ch_write(c0, c1, seed, &vp, buf, NULL, NULL), CKS_OK);

    /* 1: killed after the puts, before any finish */
    uint64_t v2 = ch_version_led_by_live(2, down);
    int co2     = cks_test_coordinator(cl.map, "chaos", v2);
    vp.version  = v2;
    cr_assert_eq(cks_version_begin(c0, &vp), CKS_OK);
    cr_assert_eq(ch_put_rank(c0, seed, v2, 0, buf), CKS_OK);
    cr_assert_eq(ch_put_rank(c1, seed, v2, 1, buf), CKS_OK);
    ch_pause_ms(500); /* spread and reported: what a primary holds unspread dies with it */
    cks_test_cluster_kill(&cl, (size_t)co2);
    down[co2] = 1;
    cks_status_t st1 = CKS_OK;
    uint64_t took    = 0;
    cks_status_t st  = ch_finish_both(c0, c1, v2, &st1, why, sizeof(why), &took);
    fprintf(stderr, "version %llu, coordinator %d killed before the finish: %s, %s after %llu ms "
                    "(%s)\n",
            (unsigned long long)v2, co2, cks_status_name(st), cks_status_name(st1),
            (unsigned long long)took, why);
    if (st != CKS_OK || st1 != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "rank 0's finish of version %llu: %s (%s)", (unsigned long long)v2,
                 cks_status_name(st), why);
    cr_assert_eq(st1, CKS_OK, "rank 1's finish: %s", cks_status_name(st1));
    ch_wait_committed(c0, v2);
    cr_assert_eq(ch_verify(c0, seed, v2, buf, want), CKS_OK);

    /* 2: killed while rank 0's seal waits there for rank 1 */
    uint64_t v3 = ch_version_led_by_live(v2 + 1, down);
    int co3     = cks_test_coordinator(cl.map, "chaos", v3);
    vp.version  = v3;
    cr_assert_eq(cks_version_begin(c0, &vp), CKS_OK);
    cr_assert_eq(ch_put_rank(c0, seed, v3, 0, buf), CKS_OK);
    cr_assert_eq(ch_put_rank(c1, seed, v3, 1, buf), CKS_OK);
    ch_pause_ms(500);
    cks_test_finish_t f0;
    cks_test_finish_start(&f0, c0, "chaos", v3, 0);
    ch_pause_ms(300); /* rank 0's seal waits at the coordinator */
    cks_test_cluster_kill(&cl, (size_t)co3);
    down[co3] = 1;
    uint64_t t0 = ch_ms();
    st          = cks_version_finish(c1, "chaos", v3, 1);
    cks_client_last_error(c1, why, sizeof(why));
    cks_test_finish_join(&f0);
    fprintf(stderr, "version %llu, coordinator %d killed between the finishes: %s, %s after "
                    "%llu ms (%s)\n",
            (unsigned long long)v3, co3, cks_status_name(f0.st), cks_status_name(st),
            (unsigned long long)(ch_ms() - t0), why);
    if (st != CKS_OK || f0.st != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(f0.st, CKS_OK, "rank 0's finish of version %llu: %s", (unsigned long long)v3,
                 cks_status_name(f0.st));
    cr_assert_eq(st, CKS_OK, "rank 1's finish: %s (%s)", cks_status_name(st), why);
    ch_wait_committed(c0, v3);
    cr_assert_eq(ch_verify(c0, seed, v3, buf, want), CKS_OK);

    /* both back: neither drops the version it had left open */
    cr_assert_eq(cks_test_server_restart(&cl.srv[co2]), 0);
    cr_assert_eq(cks_test_server_restart(&cl.srv[co3]), 0);
    down[co2] = down[co3] = 0;
    cks_client_destroy(c0);
    cks_client_destroy(c1);
    c0 = connect_cluster(5000);
    c1 = connect_cluster(5000);
    ch_pause_ms(1000);
    ch_wait_committed(c0, v2);
    ch_wait_committed(c0, v3);
    cr_assert_eq(ch_verify(c0, seed, v2, buf, want), CKS_OK);
    cr_assert_eq(ch_verify(c0, seed, v3, buf, want), CKS_OK);
    for (size_t i = 0; i < NSRV; i++) {
        char line[128];
        uint64_t vs[2] = {v2, v3};
        for (int k = 0; k < 2; k++) {
            snprintf(line, sizeof(line), "dropping version %llu of 'chaos'",
                     (unsigned long long)vs[k]);
            cr_assert_eq(cks_test_log_count(cl.srv[i].log, line), 0, "server %zu: %s", i, line);
        }
    }
    vp.version = v3 + 1;
    cr_assert_eq(ch_write(c0, c1, seed, &vp, buf, NULL, NULL), CKS_OK);
    cr_assert_eq(ch_verify(c0, seed, v3 + 1, buf, want), CKS_OK);
    cks_client_destroy(c0);
    cks_client_destroy(c1);
    free(buf);
    free(want);
}

/*
 * The commit fence: a coordinator stopped (SIGSTOP) after the ranks' puts;
 * the finish times out there and goes on to the next candidate, which takes
 * the version over (the stopped one does not answer the servers either) and
 * commits. Resumed, the old coordinator finds the seal it had been sent and
 * would commit the version too: its fence finds the ballot taken (and the
 * version recorded) and it records and sends nothing ("fenced"). Every
 * server then holds the one manifest, which restores bit-exact.
 */
Test(heal, stopped_coordinator_resumes_fenced_after_a_takeover, .timeout = 240)
{
    uint64_t seed = cks_test_seed(62);
    uint8_t *buf = malloc(300 * 1024), *want = malloc(300 * 1024);
    char why[512] = "", line[128];
    cr_assert(buf != NULL && want != NULL);
    cks_client_h c0 = connect_cluster(2000), c1 = connect_cluster(2000);
    uint64_t v   = 2;
    int coord    = cks_test_coordinator(cl.map, "chaos", v);
    cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT,
                               .job = "chaos", .version = v, .nranks = 2, .timeout_s = 30};
    cr_assert_eq(cks_version_begin(c0, &vp), CKS_OK);
    cr_assert_eq(ch_put_rank(c0, seed, v, 0, buf), CKS_OK);
    cr_assert_eq(ch_put_rank(c1, seed, v, 1, buf), CKS_OK);
    ch_pause_ms(500); /* spread, reported, and the coordinator's own objects copied */
    kill(cl.srv[coord].pid, SIGSTOP);
    cks_status_t st1 = CKS_OK;
    uint64_t took    = 0;
    cks_status_t st  = ch_finish_both(c0, c1, v, &st1, why, sizeof(why), &took);
    fprintf(stderr, "version %llu, coordinator %d stopped: %s, %s after %llu ms (%s)\n",
            (unsigned long long)v, coord, cks_status_name(st), cks_status_name(st1),
            (unsigned long long)took, why);
    kill(cl.srv[coord].pid, SIGCONT);
    if (st != CKS_OK || st1 != CKS_OK) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "rank 0's finish: %s (%s)", cks_status_name(st), why);
    cr_assert_eq(st1, CKS_OK, "rank 1's finish: %s", cks_status_name(st1));
    /* resumed, it takes the seals it had been sent and tries to commit: it
     * logs either outcome within a few seconds */
    char fenced[128];
    snprintf(fenced, sizeof(fenced), "version %llu of 'chaos': fenced", (unsigned long long)v);
    snprintf(line, sizeof(line), "version %llu of 'chaos' committed", (unsigned long long)v);
    for (int t = 0; t < 200 && cks_test_log_count(cl.srv[coord].log, fenced) == 0 &&
                    cks_test_log_count(cl.srv[coord].log, line) == 0;
         t++) {
        ch_pause_ms(100);
    }
    cr_assert_eq(cks_test_log_count(cl.srv[coord].log, line), 0,
                 "the resumed coordinator committed version %llu too (log in %s)",
                 (unsigned long long)v, cl.srv[coord].log);
    cr_assert(cks_test_log_count(cl.srv[coord].log, fenced) > 0,
              "the resumed coordinator did not find its commit fenced (log in %s)",
              cl.srv[coord].log);
    int committers = 0;
    for (size_t i = 0; i < NSRV; i++) {
        committers += cks_test_log_count(cl.srv[i].log, line) > 0;
    }
    cr_assert_eq(committers, 1, "%d servers committed version %llu", committers,
                 (unsigned long long)v);
    ch_wait_committed(c0, v);
    cr_assert_eq(ch_verify(c0, seed, v, buf, want), CKS_OK);
    /* and the next version, with every server up, commits */
    vp.version = v + 1;
    cr_assert_eq(ch_write(c0, c1, seed, &vp, buf, NULL, NULL), CKS_OK);
    cr_assert_eq(ch_verify(c0, seed, v + 1, buf, want), CKS_OK);
    cks_client_destroy(c0);
    cks_client_destroy(c1);
    free(buf);
    free(want);
}

/* Arena bytes a version's objects hold once spread: each stripe's k + m
 * chunks, one per member (a primary keeps only its own). */
static uint64_t ch_spread_bytes(uint64_t v)
{
    uint64_t total = 0;
    for (int rank = 0; rank < 2; rank++) {
        for (int i = 0; i < CH_OBJS; i++) {
            uint64_t stripe_b = (uint64_t)K * CHUNK;
            total += (ch_size(v, rank, i) + stripe_b - 1) / stripe_b * (K + M) * CHUNK;
        }
    }
    return total;
}

/* Version vp->version begun by rank 0 (c0), both ranks' objects put, and
 * every object spread: the servers' arena use is what it was before plus
 * each stripe's k + m chunks (a primary frees the chunks it sent once the
 * members recorded them, and reports the object then). Bounded: 20 s. */
static void ch_begin_put_spread(cks_client_h c0, cks_client_h c1, uint64_t seed,
                                const cks_version_params_t *vp, uint8_t *buf)
{
    uint64_t used0 = 0, used = 0, v = vp->version;
    cr_assert_eq(cks_cluster_usage(c0, &used0, NULL), CKS_OK);
    cr_assert_eq(cks_version_begin(c0, vp), CKS_OK);
    cr_assert_eq(ch_put_rank(c0, seed, v, 0, buf), CKS_OK);
    cr_assert_eq(ch_put_rank(c1, seed, v, 1, buf), CKS_OK);
    uint64_t want = used0 + ch_spread_bytes(v), t0 = ch_ms();
    while (cks_cluster_usage(c0, &used, NULL) == CKS_OK && used != want &&
           ch_ms() - t0 < 20000) {
        ch_pause_ms(20);
    }
    cr_assert_eq(used, want, "version %llu not spread after %llu ms: arena use %llu, want %llu",
                 (unsigned long long)v, (unsigned long long)(ch_ms() - t0),
                 (unsigned long long)used, (unsigned long long)want);
}

/* A version and a member of it that owes its coordinator nothing: no
 * coordinator candidate and the primary of none of the version's objects
 * (CH_OBJS per rank, two ranks), from `from` on; the member in *member_p. */
static uint64_t ch_version_with_idle_member(uint64_t from, int *member_p)
{
    int cand[NSRV];
    for (uint64_t v = from; v < from + 64; v++) {
        int ncand = cks_test_coordinators(cl.map, "chaos", v, cand, NSRV);
        cr_assert_geq(ncand, 2);
        for (int i = 0; i < NSRV; i++) {
            int owes = 0;
            for (int j = 0; j < ncand; j++) {
                owes |= cand[j] == i;
            }
            for (int r = 0; r < 2; r++) {
                for (int o = 0; o < CH_OBJS; o++) {
                    char key[64];
                    ch_key(key, sizeof(key), v, r, o);
                    owes |= cks_test_primary(cl.map, "chaos", key, K, M) == i;
                }
            }
            if (!owes) {
                *member_p = i;
                return v;
            }
        }
    }
    cr_assert_fail("no version from %llu on has a member that owes its coordinator nothing",
                   (unsigned long long)from);
    return 0;
}

/* A client whose member timeout (CKS_CLIENT_FIELD_MEMBER_TIMEOUT) is ms. */
static cks_client_h ch_client_member_ms(uint32_t ms)
{
    cks_client_params_t p = member_params(5000, ms);
    cks_client_h c        = NULL;
    cr_assert_eq(cks_client_create(&p, &c), CKS_OK);
    cr_assert_eq(cks_test_client_quiet(c, 5000), 0);
    return c;
}

/*
 * A coordinator busy for longer than the client's request timeout: a member
 * stopped (SIGSTOP) when the ranks finish holds the commit's manifest
 * broadcast up to the servers' member timeout (10 s), while the clients
 * time out after 2 s. The seals go on to the other candidates, which say
 * that the coordinator answers them; the clients then send the seals to
 * the coordinator again (marked as sent again), and both finishes return
 * CKS_OK once it commits (before: CKS_ERR_TIMEOUT, "its coordinator did not
 * answer, and no other candidate coordinates it", for a version that
 * committed). A second finish of a rank, not sent again, is still refused.
 */
static void ch_seal_outlasts(int timeout_ms, uint64_t dflt_seed)
{
    uint64_t seed = cks_test_seed(dflt_seed);
    uint8_t *buf = malloc(300 * 1024), *want = malloc(300 * 1024);
    char why[512] = "";
    int member    = -1;
    cr_assert(buf != NULL && want != NULL);
    cks_client_h c0 = connect_cluster(timeout_ms), c1 = connect_cluster(timeout_ms);
    /* the member to stop owes the coordinator nothing (a primary stopped
     * before its report reached the coordinator fails the version, as it
     * should: what it holds unspread would die with it) */
    uint64_t v = ch_version_with_idle_member(2, &member);
    cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT,
                               .job = "chaos", .version = v, .nranks = 2, .timeout_s = 60};
    ch_begin_put_spread(c0, c1, seed, &vp, buf);
    kill(cl.srv[member].pid, SIGSTOP);
    cks_status_t st1 = CKS_OK;
    uint64_t took    = 0;
    cks_status_t st  = ch_finish_both(c0, c1, v, &st1, why, sizeof(why), &took);
    kill(cl.srv[member].pid, SIGCONT);
    fprintf(stderr, "version %llu, member %d stopped during the finish: %s, %s after %llu ms "
                    "(%s)\n",
            (unsigned long long)v, member, cks_status_name(st), cks_status_name(st1),
            (unsigned long long)took, why);
    cr_assert_eq(st, CKS_OK, "rank 0's finish: %s (%s)", cks_status_name(st), why);
    cr_assert_eq(st1, CKS_OK, "rank 1's finish: %s", cks_status_name(st1));
    cr_assert_gt(took, (uint64_t)timeout_ms, "the finish took %llu ms: the stop did not hold "
                 "the commit past the client's timeout", (unsigned long long)took);
    ch_wait_committed(c0, v);
    cr_assert_eq(ch_verify(c0, seed, v, buf, want), CKS_OK);
    /* a rank's second finish is refused as before */
    cr_assert_neq(cks_version_finish(c0, "chaos", v, 0), CKS_OK);
    cks_client_destroy(c0);
    cks_client_destroy(c1);
    free(buf);
    free(want);
}

Test(heal, seal_that_outlasts_the_client_timeout_is_answered, .timeout = 240)
{
    ch_seal_outlasts(2000, 64);
}

/* The same with a 1 s request timeout: the commit, held by the stopped
 * member up to the servers' 10 s member timeout (plus, on one host, the
 * transport's 5 s for a send UCX holds: 2 - 16 s here), outlasts the
 * client's timeout many times. The seal goes to the coordinator again as
 * often as twice the member timeout takes (before: 3 times, whatever the
 * two timeouts: 1 of 2 runs failed after 4 s with "its coordinator did not
 * answer, and no other candidate coordinates it"; the 2 s test above failed
 * that way once in a full suite run, at 8 s, and took 15.0 s in a run here
 * with this change). */
Test(heal, seal_that_outlasts_four_client_timeouts_is_answered, .timeout = 240)
{
    ch_seal_outlasts(1000, 65);
}

/*
 * The member timeout the writer set holds for a coordinator that took the
 * version over too: the begin's claim carries it to every server, and the
 * takeover's coordinator waits that long for each server to take the
 * outcome. The coordinator is killed after the ranks' puts and a member
 * that owes it nothing is stopped (SIGSTOP); the ranks' seals go to the
 * next candidate, which takes the version over and commits it, waiting on
 * the stopped member for the clients' 1500 ms, not the servers' default
 * 10 s (before, a takeover knew no other: the finish took 10 s more).
 */
Test(heal, takeover_waits_on_a_stopped_member_the_member_timeout_the_client_set,
     .timeout = 240)
{
    uint64_t seed = cks_test_seed(67);
    uint8_t *buf = malloc(300 * 1024), *want = malloc(300 * 1024);
    char why[512] = "";
    int member    = -1;
    cr_assert(buf != NULL && want != NULL);
    cks_client_h c0 = ch_client_member_ms(1500), c1 = ch_client_member_ms(1500);
    uint64_t v      = ch_version_with_idle_member(2, &member);
    int co          = cks_test_coordinator(cl.map, "chaos", v);
    cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT,
                               .job = "chaos", .version = v, .nranks = 2, .timeout_s = 60};
    ch_begin_put_spread(c0, c1, seed, &vp, buf);
    cks_test_cluster_kill(&cl, (size_t)co);
    cr_assert_eq(kill(cl.srv[member].pid, SIGSTOP), 0);
    cks_status_t st1 = CKS_OK;
    uint64_t took    = 0;
    cks_status_t st  = ch_finish_both(c0, c1, v, &st1, why, sizeof(why), &took);
    cr_assert_eq(kill(cl.srv[member].pid, SIGCONT), 0);
    fprintf(stderr, "version %llu, coordinator %d killed, member %d stopped, member timeout "
                    "1500 ms: %s, %s after %llu ms (%s)\n",
            (unsigned long long)v, co, member, cks_status_name(st), cks_status_name(st1),
            (unsigned long long)took, why);
    if (st != CKS_OK || st1 != CKS_OK || took >= 8000) {
        dump_logs();
    }
    cr_assert_eq(st, CKS_OK, "rank 0's finish: %s (%s)", cks_status_name(st), why);
    cr_assert_eq(st1, CKS_OK, "rank 1's finish: %s", cks_status_name(st1));
    int took_over = 0;
    for (size_t i = 0; i < NSRV; i++) {
        char line[96];
        snprintf(line, sizeof(line), "took over version %llu of 'chaos'", (unsigned long long)v);
        took_over += (int)i != co && cks_test_log_count(cl.srv[i].log, line) > 0;
    }
    cr_assert_eq(took_over, 1, "%d servers took version %llu over", took_over,
                 (unsigned long long)v);
    /* the takeover and one member timeout for the stopped member (1.5 s;
     * a seal that timed out at the killed coordinator would add the
     * clients' 5 s): not the default's 10 s (10005 ms before) */
    /* (not to the millisecond: a suite run saw 1485 ms, the stopped
     * member's call ending a little before the clients' 1500 ms had passed
     * here, for a reason not looked into; the bound that matters is the
     * upper one) */
    cr_assert_geq(took, 1000, "the finish did not wait for the stopped member (%llu ms)",
                  (unsigned long long)took);
    cr_assert_lt(took, 8000, "the finish took %llu ms: the takeover waited on the stopped "
                             "member longer than its 1500 ms", (unsigned long long)took);
    ch_wait_committed(c0, v);
    cr_assert_eq(ch_verify(c0, seed, v, buf, want), CKS_OK);
    cks_client_destroy(c0);
    cks_client_destroy(c1);
    free(buf);
    free(want);
}

/*
 * A trainer that dies during its finish, after its seal made a candidate
 * take the version over, and then that candidate dies too (a node lost for
 * good): the other servers hold the dead candidate's grant (ballot 1), and
 * no rank will ever finish or abort the version. The first coordinator
 * returns with the version OPEN in its record and no state for it; its
 * claim (ballot 0) is refused by that grant. It may not keep the version
 * OPEN for good (a delete answers BUSY, "abort it first", while it is): a
 * refused claim is made again with the next round, which a server grants
 * when the holder of its grant does not answer; the winner fences the
 * version and drops it everywhere. Then the delete succeeds, the lost
 * candidate returns, and the next version commits.
 */
Test(heal, version_whose_trainer_and_takeover_died_is_dropped_once_they_return,
     .timeout = 240)
{
    uint64_t seed = cks_test_seed(63);
    uint8_t *buf = malloc(300 * 1024), *want = malloc(300 * 1024);
    char why[512] = "", line[128];
    int cand[8];
    cr_assert(buf != NULL && want != NULL);
    uint64_t v = 2;
    /* rank 0's trainer, a process of its own (forked before this process
     * made its clients), finishes once the coordinator is killed: its seal
     * goes on to the next candidate, which takes the version over and waits
     * there for rank 1's */
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t trainer = fork();
    cr_assert_geq(trainer, 0);
    if (trainer == 0) {
        cks_client_h c = NULL;
        char b;
        close(go[1]);
        cks_status_t cst = cks_test_connect_cluster(cl.map, K, M, CHUNK, 2000, &c);
        cst = cst == CKS_OK && read(go[0], &b, 1) != 1 ? CKS_ERR_INTERNAL : cst;
        cst = cst == CKS_OK ? cks_version_finish(c, "chaos", v, 0) : cst;
        fprintf(stderr, "the trainer's finish: %s\n", cks_status_name(cst));
        _exit(cst == CKS_OK ? 0 : 1);
    }
    cks_client_h c0 = connect_cluster(2000), c1 = connect_cluster(2000);
    cr_assert_geq(cks_test_coordinators(cl.map, "chaos", v, cand, 8), 2);
    int co = cand[0], tk = cand[1];
    cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT,
                               .job = "chaos", .version = v, .nranks = 2, .timeout_s = 30};
    ch_begin_put_spread(c0, c1, seed, &vp, buf);

    close(go[0]);
    cks_test_cluster_kill(&cl, (size_t)co);
    cr_assert_eq(write(go[1], "f", 1), 1);
    close(go[1]);
    /* the takeover is won (a majority granted it) and the version opened
     * there: the server says so once */
    snprintf(line, sizeof(line), "took over version %llu of 'chaos' (ballot",
             (unsigned long long)v);
    int took = 0;
    for (uint64_t t0 = ch_ms(); !took && ch_ms() - t0 < 20000;) {
        took = cks_test_log_count(cl.srv[tk].log, line) > 0;
        if (!took) {
            ch_pause_ms(50);
        }
    }
    kill(trainer, SIGKILL);
    cr_assert_eq(waitpid(trainer, NULL, 0), trainer);
    cr_assert(took, "server %d did not take version %llu over (log in %s)", tk,
              (unsigned long long)v, cl.srv[tk].log);
    cks_test_cluster_kill(&cl, (size_t)tk);
    fprintf(stderr, "version %llu: coordinator %d killed, then the trainer of rank 0, then "
                    "server %d that took the version over\n",
            (unsigned long long)v, co, tk);
    cr_assert_eq(cks_test_server_restart(&cl.srv[co]), 0);

    /* the version ends (dropped), so that its delete is answered: bounded
     * (the grants of ballot 1 outlive the version's deadline by 60 s). Once
     * it is dropped everywhere its job has no version left, and a delete
     * may say so (NO_SUCH_JOB) */
    cks_status_t st = CKS_ERR_BUSY;
    uint64_t t0     = ch_ms();
    for (int t = 0; t < 400 && st != CKS_OK && st != CKS_ERR_NO_SUCH_VERSION &&
                    st != CKS_ERR_NO_SUCH_JOB;
         t++) {
        ch_pause_ms(100);
        st = cks_version_delete(c0, "chaos", v);
    }
    cks_client_last_error(c0, why, sizeof(why));
    fprintf(stderr, "delete of version %llu after the coordinator returned: %s after %llu ms "
                    "(%s)\n",
            (unsigned long long)v, cks_status_name(st), (unsigned long long)(ch_ms() - t0),
            why);
    int gone = st == CKS_OK || st == CKS_ERR_NO_SUCH_VERSION || st == CKS_ERR_NO_SUCH_JOB;
    if (!gone) {
        dump_logs();
    }
    cr_assert(gone, "delete of version %llu: %s (%s)", (unsigned long long)v,
              cks_status_name(st), why);
    cks_restore_h r = NULL;
    cr_assert_neq(cks_restore_open(c0, "chaos", v, &r), CKS_OK);
    /* the one that took it over returns (it learns the drop), and the next
     * version, with every server up, commits */
    cr_assert_eq(cks_test_server_restart(&cl.srv[tk]), 0);
    vp.version = v + 1;
    cr_assert_eq(ch_write(c0, c1, seed, &vp, buf, NULL, NULL), CKS_OK);
    cr_assert_eq(ch_verify(c0, seed, v + 1, buf, want), CKS_OK);
    cks_client_destroy(c0);
    cks_client_destroy(c1);
    free(buf);
    free(want);
}

/* The random test's rounds (see the top of the file), all within bound_ms. */
static void ch_random(int rounds, uint64_t bound_ms)
{
    uint64_t seed = cks_test_seed(cks_test_seed_fresh());
    int down[NSRV] = {0}, cand[NSRV];
    uint8_t *buf = malloc(300 * 1024), *want = malloc(300 * 1024);
    uint64_t t0 = ch_ms(), used0 = 0, used = 0, v = 0;
    int committed = 0, retried = 0, kills = 0, stops = 0, lost = 0, transport_lost = 0;
    int taken_over = 0;
    char why[512];
    cr_assert(buf != NULL && want != NULL);
    ch_rng = seed;
    /* requests time out (5 s) well within a version's deadline (20 s): a
     * first candidate killed without its connections noticing costs a rank
     * one timeout before it asks the next, and the version still commits
     * (10 s was too short under ASan, with both cores busy, for a takeover
     * after such a timeout: "... objects were protected before the
     * version's deadline"); with cuts 30 s: a primary waits up to 10 s for a silent member to take
     * a chunk before it counts the chunk missing (CKS_SV_MEMBER_TIMEOUT_MS),
     * and a coordinator as long for the manifest */
    ch_stall_exits = 0;
    ch_renewals    = 0;
    cks_client_h c0 = connect_cluster(5000), c1 = connect_cluster(5000);
    cr_assert_eq(cks_cluster_usage(c0, &used0, NULL), CKS_OK);

    for (int round = 0; round < rounds; round++) {
        cr_assert_lt(ch_ms() - t0, bound_ms, "%d rounds in %llu ms", round,
                     (unsigned long long)(ch_ms() - t0));
        pthread_t stopper;
        ch_stop_t stop;
        int stopping = 0, killed = -1, killed_during = -1;
        char before[64], during[64];
        ch_disrupt(down, &stopper, &stopping, &stop, before, sizeof(before), &killed);
        kills += killed >= 0;
        /* the coordinator: the first candidate up at the begin */
        int n = cks_test_coordinators(cl.map, "chaos", v + 1, cand, NSRV), coord = -1;
        for (int i = 0; i < n && coord < 0; i++) {
            coord = down[cand[i]] ? -1 : cand[i];
        }
        v++;
        cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_NRANKS |
                                                 CKS_VERSION_FIELD_RETAIN |
                                                 CKS_VERSION_FIELD_TIMEOUT,
                                   .job = "chaos", .version = v, .nranks = 2,
                                   .retain = CH_RETAIN, .timeout_s = ch_cuts ? 30 : 20};
        /* during: between rank 0's puts and rank 1's */
        ch_during_t d   = {down, &stopper, &stopping, &stop, during, sizeof(during),
                           &killed_during};
        cks_status_t st = ch_write(c0, c1, seed, &vp, buf, ch_during, &d);
        kills += killed_during >= 0;
        if (stopping) {
            pthread_join(stopper, NULL);
            stops++;
        }
        cks_client_last_error(c0, why, sizeof(why));
        fprintf(stderr, "round %d (at %.1f s): version %llu (coordinator %d), before: %s, "
                        "during: %s: %s\n",
                round, (double)(ch_ms() - t0) / 1000.0, (unsigned long long)v, coord, before,
                during, cks_status_name(st));
        taken_over += st == CKS_OK && killed_during >= 0 && killed_during == coord;
        if (st != CKS_OK) {
            /* only a server killed after the begin may fail a version (objects
             * it had stored and not yet spread: DATA_LOST, naming it - its
             * coordinator too: the version is taken over by the next
             * candidate, and fails only for that; before 2026-11-28 any
             * status passed when the server killed was not the coordinator,
             * which hid a failed fence: heal/claim_of_a_candidate_...), or
             * one UCX took out; the
             * trainer's retry, the next number, must commit. A server UCX
             * took out counts as one more down also when one was killed: a
             * takeover of a killed coordinator's version, with another
             * server killed before (m down) and a third that UCX took out,
             * gathers no majority (seen: UNREACHABLE, 3 of 6 granted, the
             * third a server whose endpoints timed out after a peer's kill) */
            int tp = ch_lost_to_transport(down);
            if (killed_during < 0 && tp == 0) {
                tp = ch_client_lost_to_transport(&c0, 5000) +
                     ch_client_lost_to_transport(&c1, 5000);
            }
            /* a cut server may hold stored objects it could not spread
             * until the version's deadline: then TIMEOUT */
            int cut_during = killed_during >= 0 && down[killed_during] == CH_CUT;
            cr_assert(killed_during < 0 || st == CKS_ERR_DATA_LOST ||
                          (cut_during && st == CKS_ERR_TIMEOUT) || tp > 0,
                      "version %llu failed after server %d (its coordinator: %d) was %s "
                      "during it: %s (%s)",
                      (unsigned long long)v, killed_during, coord,
                      cut_during ? "cut off" : "killed", cks_status_name(st), why);
            transport_lost += tp;
            if (killed_during < 0 && tp == 0) {
                dump_logs();
            }
            cr_assert(killed_during >= 0 || tp > 0,
                      "version %llu failed with %d of %d servers down, none killed "
                      "during it: %s (%s)",
                      (unsigned long long)v, ch_unreachable(down), NSRV, cks_status_name(st),
                      why);
            retried++;
            vp.version = ++v;
            st         = ch_write(c0, c1, seed, &vp, buf, NULL, NULL);
            cks_client_last_error(c0, why, sizeof(why));
            if (st != CKS_OK && (tp = ch_lost_to_transport(down)) > 0) {
                fprintf(stderr, "  retry as version %llu: %s (%s); again\n",
                        (unsigned long long)v, cks_status_name(st), why);
                transport_lost += tp;
                retried++;
                vp.version = ++v;
                st         = ch_write(c0, c1, seed, &vp, buf, NULL, NULL);
                cks_client_last_error(c0, why, sizeof(why));
            }
            if (st != CKS_OK) {
                dump_logs();
            }
            cr_assert_eq(st, CKS_OK, "retry as version %llu: %s (%s)", (unsigned long long)v,
                         cks_status_name(st), why);
        }
        committed++;
        /* A version restores with the servers down at its commit - except
         * when one was killed after its chunks there were stored and the
         * version committed with no redundancy to spare (the redundancy it
         * states counts what could not be stored, not what was lost
         * after): then a clear DATA_LOST, never other bytes. */
        cks_version_info_t vi;
        cr_assert_eq(cks_version_stat(c0, "chaos", v, &vi), CKS_OK);
        st = ch_verify(c0, seed, v, buf, want);
        if (st != CKS_OK) {
            fprintf(stderr, "  version %llu (%s, redundancy %u) after server %d was killed: %s\n",
                    (unsigned long long)v, cks_vstate_string(vi.state), vi.redundancy,
                    killed_during, cks_status_name(st));
            lost++;
        }
        cr_assert(st == CKS_OK || (st == CKS_ERR_DATA_LOST && killed_during >= 0 &&
                                   vi.redundancy == 0),
                  "restore of version %llu (redundancy %u) with %d down: %s",
                  (unsigned long long)v, vi.redundancy, ch_unreachable(down),
                  cks_status_name(st));
    }
    /* every server back; every version kept restores, then all are deleted
     * and the arenas hold what they held before the first one */
    for (size_t s = 0; s < NSRV; s++) {
        if (down[s] == CH_KILLED) {
            cr_assert_eq(cks_test_server_restart(&cl.srv[s]), 0);
        } else if (down[s] == CH_CUT) {
            cr_assert_eq(cks_test_netns_heal(&ch_net, (int)s), 0);
        }
        down[s] = CH_UP;
    }
    for (uint64_t w = v >= CH_RETAIN ? v - CH_RETAIN + 1 : 1; w <= v; w++) {
        cks_version_info_t vi;
        if (cks_version_stat(c0, "chaos", w, &vi) == CKS_OK &&
            (vi.state == CKS_VSTATE_PROTECTED || vi.state == CKS_VSTATE_DEGRADED)) {
            /* every server is back: what a kill took is there again */
            cks_status_t st = ch_verify(c0, seed, w, buf, want);
            cr_assert_eq(st, CKS_OK, "version %llu at the end: %s", (unsigned long long)w,
                         cks_status_name(st));
        }
    }
    for (uint64_t w = 1; w <= v; w++) {
        cks_status_t st = cks_version_delete(c0, "chaos", w);
        for (int t = 0; t < 300 && st == CKS_ERR_BUSY; t++) {
            ch_pause_ms(100); /* still being aborted (its drop waits on servers just killed) */
            st = cks_version_delete(c0, "chaos", w);
        }
        /* not here: NO_SUCH_VERSION, or NO_SUCH_JOB from a coordinator that
         * missed the version (cut off during it) and holds no other version
         * of the job any more; the drop goes to every server all the same */
        cr_assert(st == CKS_OK || st == CKS_ERR_NO_SUCH_VERSION || st == CKS_ERR_NO_SUCH_JOB,
                  "delete of %llu: %s", (unsigned long long)w, cks_status_name(st));
    }
    /* A server restarted at the end may still list a version deleted while
     * it was away until its catch-up has applied the drop (drop records
     * keep any from learning it back, but a job left with no version
     * lists none of them: Known limits): what any server still lists is
     * deleted again, and counted */
    int again = 0, listed = 1;
    for (int pass = 0; pass < 5 && listed; pass++) {
        listed = 0;
        if (pass > 0) {
            ch_pause_ms(4000); /* a catch-up round (every 3-10 s) may learn one back */
        }
        for (size_t i = 0; i < NSRV; i++) {
            cks_client_h one = NULL;
            cks_repair_info_t ri = {0};
            for (int t = 0; t < 600 && (cks_repair_status(c0, i, &ri) != CKS_OK || !ri.caught_up);
                 t++) {
                ch_pause_ms(50);
            }
            cr_assert_eq(cks_test_connect(&cl.srv[i], 5000, &one), CKS_OK);
            cks_version_info_t list[64];
            size_t n = 0;
            int more = 0;
            cks_status_t lst = CKS_ERR_BUSY;
            for (int t = 0; t < 600 && lst == CKS_ERR_BUSY; t++) { /* still catching up */
                lst = cks_version_list(one, "chaos", NULL, list, 64, &n, &more);
                if (lst == CKS_ERR_BUSY) {
                    ch_pause_ms(50);
                }
            }
            cr_assert(lst == CKS_OK || lst == CKS_ERR_NO_SUCH_JOB, "server %zu lists: %s", i,
                      cks_status_name(lst));
            if (lst == CKS_OK) {
                for (size_t k = 0; k < n; k++) {
                    cks_status_t st = cks_version_delete(c0, "chaos", list[k].version);
                    again++;
                    listed++;
                    fprintf(stderr, "server %zu still lists version %llu (%s): deleted again: %s\n",
                            i, (unsigned long long)list[k].version,
                            cks_vstate_string(list[k].state), cks_status_name(st));
                }
            }
            cks_client_destroy(one);
        }
    }
    /* a returning server applies deletes it missed; space freed while a
     * chunk's reply to a reader that was cut off had not gone out returns
     * once the server closes that reader's connection (30 s after the read
     * began) and the transport gives the send up (5 s later): 45 s here */
    for (int i = 0; i < 450; i++) {
        cr_assert_eq(cks_cluster_usage(c0, &used, NULL), CKS_OK);
        if (used == used0) {
            break;
        }
        ch_pause_ms(100);
    }
    fprintf(stderr, "%d rounds in %llu ms: %d versions committed, %d retried after a server "
                    "was killed during them, %d lost a server after their chunks were stored "
                    "with no redundancy to spare; %d kills, %d stops, %d servers or clients "
                    "UCX took out (%d servers exited on their check of their receive path); "
                    "%d versions deleted again; arena use %llu bytes (%llu "
                    "before); %d committed after their coordinator was killed during them (taken over); "
                    "%d cuts (counted with the kills); %llu UCX workers the test's clients "
                    "replaced after their receive path stalled\n",
            rounds, (unsigned long long)(ch_ms() - t0), committed, retried, lost, kills,
            stops, transport_lost, ch_stall_exits, again, (unsigned long long)used,
            (unsigned long long)used0, taken_over, ch_ncuts,
            (unsigned long long)(ch_renewals + ch_renewals_of(c0) + ch_renewals_of(c1)));
    for (size_t i = 0; used != used0 && i < NSRV; i++) {
        cks_client_h one = NULL;
        uint64_t u       = 0;
        if (cks_test_connect(&cl.srv[i], 5000, &one) == CKS_OK &&
            cks_cluster_usage(one, &u, NULL) == CKS_OK) {
            fprintf(stderr, "server %zu: %llu bytes in use (log %s)\n", i,
                    (unsigned long long)u, cl.srv[i].log);
        }
        if (one != NULL) {
            cks_client_destroy(one);
        }
    }
    cr_assert_eq(used, used0, "arena use after every version was deleted");
    cks_client_destroy(c0);
    cks_client_destroy(c1);
    free(buf);
    free(want);
}

Test(heal, random_kills_and_stops_between_and_during_checkpoints, .timeout = 420)
{
    /* a server whose UCX receive path stalls (see ch_lost_to_transport())
     * exits on its own check after 2 s of it (--stall-exit), before the
     * test's 3 s question finds it silent: counted apart, it shows that the
     * check finds such a server (the seconds a server is stopped do not
     * count) */
    cks_test_set_server_flags("--stall-exit 2");
    cr_assert_eq(cks_test_cluster_restart_all(&cl), 0);
    ch_random(CH_ROUNDS, CH_BOUND_MS);
    cks_test_set_server_flags(NULL);
}

/*
 * A takeover asks every server once to report its objects again; when that
 * question is lost (fault report_lost: each server answers its first one
 * and does nothing), the primaries that still owe objects are asked again
 * every second. Before, the takeover waited for the reports until the
 * version's deadline, and the ranks' finishes failed (seen in the partition
 * test, after connections broke under the takeover).
 */
static void setup_report_lost(void)
{
    cks_test_suite_start("report_lost:once", CKS_TEST_ALL);
}

TestSuite(heal_report, .init = setup_report_lost, .fini = cks_test_suite_teardown, .timeout = 240);

Test(heal_report, takeover_whose_request_for_reports_is_lost_commits)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    uint64_t seed = cks_test_seed(65);
    int down[NSRV] = {0};
    uint8_t *buf = malloc(300 * 1024), *want = malloc(300 * 1024);
    char why[512] = "";
    cr_assert(buf != NULL && want != NULL);
    cks_client_h c0 = connect_cluster(5000), c1 = connect_cluster(5000);
    uint64_t v  = ch_version_led_by_live(1, down);
    int co      = cks_test_coordinator(cl.map, "chaos", v);
    cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT,
                               .job = "chaos", .version = v, .nranks = 2, .timeout_s = 60};
    ch_begin_put_spread(c0, c1, seed, &vp, buf);
    cks_test_cluster_kill(&cl, (size_t)co);
    cks_status_t st1 = CKS_OK;
    uint64_t took    = 0;
    cks_status_t st  = ch_finish_both(c0, c1, v, &st1, why, sizeof(why), &took);
    fprintf(stderr, "version %llu, coordinator %d killed, the takeover's first request for "
                    "reports lost: %s, %s after %llu ms (%s)\n",
            (unsigned long long)v, co, cks_status_name(st), cks_status_name(st1),
            (unsigned long long)took, why);
    cr_assert_eq(st, CKS_OK, "rank 0's finish: %s (%s)", cks_status_name(st), why);
    cr_assert_eq(st1, CKS_OK, "rank 1's finish: %s", cks_status_name(st1));
    ch_wait_committed(c0, v);
    cr_assert_eq(ch_verify(c0, seed, v, buf, want), CKS_OK);
    cks_client_destroy(c0);
    cks_client_destroy(c1);
    free(buf);
    free(want);
}

/*
 * A primary's report of an object to the version's coordinator that is lost
 * on its way (fault report_drop: the first report each server sends to a
 * coordinator elsewhere; seen in the partition test, where a restarted
 * primary's connection to the coordinator broke under its first report):
 * the coordinator, whose seals say that primary stored the object, asks it
 * a second later to send its kept reports again. Before, only a takeover
 * asked again, and the version waited for the report until its deadline,
 * then aborted (the ranks' finishes: VERSION_NOT_OPEN).
 */
static void setup_report_drop(void)
{
    cks_test_suite_start("report_drop:once", CKS_TEST_ALL);
}

TestSuite(heal_report_drop, .init = setup_report_drop, .fini = cks_test_suite_teardown, .timeout = 120);

Test(heal_report_drop, version_whose_report_is_lost_commits)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    uint64_t seed = cks_test_seed(66);
    uint8_t *buf = malloc(300 * 1024), *want = malloc(300 * 1024);
    char why[512] = "";
    cr_assert(buf != NULL && want != NULL);
    cks_client_h c0 = connect_cluster(5000), c1 = connect_cluster(5000);
    cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT,
                               .job = "chaos", .version = 1, .nranks = 2, .timeout_s = 20};
    uint64_t t0     = ch_ms();
    cks_status_t st = ch_write(c0, c1, seed, &vp, buf, NULL, NULL);
    cks_client_last_error(c0, why, sizeof(why));
    int lost = 0;
    for (size_t i = 0; i < NSRV; i++) {
        lost += cks_test_log_count(cl.srv[i].log, "(fault report_drop)");
    }
    fprintf(stderr, "version 1 with %d reports lost: %s after %llu ms (%s)\n", lost,
            cks_status_name(st), (unsigned long long)(ch_ms() - t0), why);
    cr_assert_gt(lost, 0, "no report was lost: nothing shown");
    cr_assert_eq(st, CKS_OK, "version 1: %s (%s)", cks_status_name(st), why);
    ch_wait_committed(c0, 1);
    cr_assert_eq(ch_verify(c0, seed, 1, buf, want), CKS_OK);
    cks_client_destroy(c0);
    cks_client_destroy(c1);
    free(buf);
    free(want);
}

/* ---- the same with partitions: servers on hosts of their own ---------------- */

/* The rounds of the partition test: CKS_TEST_PARTITION_ROUNDS, or
 * CH_NET_ROUNDS. */
static int ch_net_rounds(void)
{
    const char *n = getenv("CKS_TEST_PARTITION_ROUNDS");
    return n != NULL && atoi(n) > 0 ? atoi(n) : CH_NET_ROUNDS;
}

static void setup_net(void)
{
    char why[256] = "";
    if (ch_net_rounds() == 0) {
        cr_skip_test("the release pass of the suite runs it (CKS_TEST_PARTITION_ROUNDS=N "
                     "runs N rounds here)");
    }
    if (cks_test_netns_create(&ch_net, NSRV, why, sizeof(why)) != 0) {
        cr_skip_test("no network namespaces here: %s", why);
    }
    /* TCP only, over the namespaces' eth0: shared memory or CMA would
     * bypass the links a cut takes down */
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "eth0", 1);
    cr_assert_eq(cks_test_cluster_start_hosts(&cl, NSRV, 3, 256 * MiB, ch_net.host_addr_p,
                                              ch_net.host_ns_p),
                 0, "servers in namespaces %s-s*", ch_net.prefix);
    cr_assert_eq(cks_test_netns_enter_client(&ch_net), 0);
    ch_cuts = 1;
}

static void teardown_net(void)
{
    cks_test_netns_leave(&ch_net);
    cks_test_cluster_cleanup(&cl);
    cks_test_netns_destroy(&ch_net);
    ch_cuts = 0;
}

TestSuite(heal_partition, .init = setup_net, .fini = teardown_net, .timeout = 900);

Test(heal_partition, random_cuts_kills_and_stops_between_and_during_checkpoints, .timeout = 900)
{
    ch_random(ch_net_rounds(), CH_NET_BOUND_MS);
}
