/*
 * End-to-end on an erasure-coded cluster: 6 real ckstore-server processes on
 * 127.0.0.1 (ports picked at run time, six nodes in three racks, stopped by
 * pid), RS(4,2). Versions of mixed object sizes restore bit-exact after any
 * two servers are killed; three lost servers give a clear data-loss error
 * naming the object; a server killed during a write leaves that version
 * unrestorable and the previous one intact; a corrupted chunk is caught by
 * its CRC and decoded around.
 */
#include "ckstore.h"
#include "cks_coding.h"
#include "cks_faults_gate.h"
#include "cks_test.h"
#include "cks_test_suite.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEFAULT_SCRATCH UINT64_MAX

/* A client of the cluster; scratch: its degraded reads' scratch size
 * (DEFAULT_SCRATCH: the default). */
static cks_client_h connect_cluster_scratch(unsigned k, unsigned m, uint64_t chunk,
                                            uint64_t scratch)
{
    cks_client_params_t p = {0};
    cks_client_h c        = NULL;
    p.field_mask = CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC | CKS_CLIENT_FIELD_TIMEOUT_MS;
    p.cluster    = cl.map;
    p.ec_k       = k;
    p.ec_m       = m;
    p.chunk_size = chunk;
    p.timeout_ms = 20000;
    if (scratch != DEFAULT_SCRATCH) {
        p.field_mask |= CKS_CLIENT_FIELD_SCRATCH;
        p.scratch_size = scratch;
    }
    cr_assert_eq(cks_client_create(&p, &c), CKS_OK, "connect to the cluster in %s", cl.map);
    return c;
}

static cks_client_h connect_cluster(unsigned k, unsigned m, uint64_t chunk)
{
    return connect_cluster_scratch(k, m, chunk, DEFAULT_SCRATCH);
}

TestSuite(cluster, .init = cks_test_suite_setup, .fini = cks_test_suite_teardown, .timeout = 240);

/* Object sizes: empty, tiny, less than a chunk, exactly a stripe, several
 * stripes with a padded tail. */
static const uint64_t sizes[] = {0, 1, 4097, 4 * 64 * 1024, 3 * MiB + 12345, 5 * MiB};
#define NOBJ (sizeof(sizes) / sizeof(sizes[0]))


static cks_status_t write_version(cks_client_h c, const char *job, uint64_t version)
{
    cks_version_params_t vp = {0};
    char key[64];
    cks_status_t st;
    vp.job = job;
    vp.version = version;
    st = cks_version_begin(c, &vp);
    for (size_t i = 0; st == CKS_OK && i < NOBJ; i++) {
        snprintf(key, sizeof(key), "layer%zu/expert%zu", i, i * 3);
        st = cks_test_put_tagged(
            c, job, version, key, objs.src[i], sizes[i],
            (cks_tags_t){CKS_KIND_EXPERT, (int32_t)i, (int32_t)(i * 3), 0});
    }
    return st == CKS_OK ? cks_version_seal(c, job, version) : st;
}

/* The objects' bytes (in objs.src[], freed by the suite's teardown) from
 * the test's printed seed (dflt by default), written as version v of job
 * "moe" by a client of RS(4, 2) with 64 KiB chunks: that client. */
static cks_client_h written(uint64_t dflt, uint64_t v)
{
    cks_test_objs_make(&objs, sizes, NOBJ, cks_test_seed(dflt));
    cks_client_h c  = connect_cluster(4, 2, 64 * 1024);
    cks_status_t st = write_version(c, "moe", v);
    cr_assert_eq(st, CKS_OK, "write of version %llu: %s", (unsigned long long)v,
                 cks_status_name(st));
    return c;
}

/* Restore every object whole and a few ranges; returns the first failure. */
static cks_status_t verify_version(cks_client_h c, const char *job, uint64_t version,
                                   char *bad_key, size_t bad_len)
{
    cks_restore_h r = NULL;
    cks_status_t st = cks_restore_open(c, job, version, &r);
    uint8_t *dst = malloc(6 * MiB);
    char key[64], what[96];

    snprintf(what, sizeof(what), "%s/%llu", job, (unsigned long long)version);
    for (size_t i = 0; st == CKS_OK && i < NOBJ; i++) {
        snprintf(key, sizeof(key), "layer%zu/expert%zu", i, i * 3);
        st = cks_test_get_check(r, key, objs.src[i], sizes[i], dst, 6 * MiB, what);
        if (st != CKS_OK && bad_key != NULL) {
            snprintf(bad_key, bad_len, "%s", key);
        }
        /* an unaligned range that crosses chunk and stripe borders */
        if (st == CKS_OK && sizes[i] > 300000) {
            uint64_t off = 65536 * 3 + 77, len = sizes[i] - off - 3;
            st = cks_test_get_range(r, key, dst, off, len);
            cr_assert(st != CKS_OK || memcmp(dst, objs.src[i] + off, len) == 0,
                      "%s: range", key);
        }
    }
    cks_restore_close(r);
    free(dst);
    return st;
}

Test(cluster, round_trip_and_any_two_servers_down, .timeout = 600)
{
    cks_client_h c = written(11, 1);
    cks_version_info_t vi;
    cr_assert_eq(cks_version_stat(c, "moe", 1, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_PROTECTED);
    cr_assert_eq(vi.nobjects, NOBJ);
    cr_assert_eq(vi.ec_k, 4);
    cr_assert_eq(vi.ec_m, 2);
    cr_assert_eq(verify_version(c, "moe", 1, NULL, 0), CKS_OK);
    cks_client_destroy(c);

    /* every pair of servers down: a fresh client each time, all objects exact */
    for (size_t a = 0; a < NSRV; a++) {
        for (size_t b = a + 1; b < NSRV; b++) {
            cks_test_cluster_kill(&cl, a);
            cks_test_cluster_kill(&cl, b);
            c = connect_cluster(4, 2, 64 * 1024);
            char bad[64] = "", why[256] = "";
            cks_status_t st = verify_version(c, "moe", 1, bad, sizeof(bad));
            cks_client_last_error(c, why, sizeof(why));
            cr_assert_eq(st, CKS_OK, "restore with servers %zu and %zu down: %s: %s (%s)",
                         a, b, bad, cks_status_string(st), why);
            cr_assert_eq(cks_test_server_restart(&cl.srv[a]), 0);
            cr_assert_eq(cks_test_server_restart(&cl.srv[b]), 0);
            /* caught up before the next pair is killed: a server killed while
             * it sends to a live one on this host can leave that one's
             * shared-memory FIFO stuck (UCX 1.13; docs/ARCHITECTURE.md, Known
             * limits), and a restarted server's catch-up asks every other;
             * in one suite run a live server then answered nothing for 20 s
             * and the restore lost a third server */
            cks_test_wait_caught_up(c, a, 30000);
            cks_test_wait_caught_up(c, b, 30000);
            cks_client_destroy(c);
        }
    }
}

/* Every server restarted at once (a rack's power cycled): each answers stats
 * and lists BUSY ("catching up") until it has caught up with the others,
 * which all say the same for up to 3 s. A fresh client's restore, `latest`
 * and listing right after must wait for them, not fail: before, they
 * walked the six servers in a millisecond and returned CKS_ERR_BUSY (and
 * round_trip_and_any_two_servers_down failed so under load, when the pair
 * it had just restarted were still catching up). */
Test(cluster, everything_answers_right_after_every_server_restarted, .timeout = 120)
{
    cks_client_h c = written(12, 1);
    cks_client_destroy(c);
    /* whether a server's first catch-up round finds its peers listening yet
     * and catching up too is a race: four power cycles */
    for (int round = 0; round < 4; round++) {
        cr_assert_eq(cks_test_cluster_restart_all(&cl), 0);
        c = connect_cluster(4, 2, 64 * 1024);
        char bad[64] = "", why[256] = "";
        cks_status_t st = verify_version(c, "moe", 1, bad, sizeof(bad));
        cks_client_last_error(c, why, sizeof(why));
        cr_assert_eq(st, CKS_OK, "restore right after every server restarted (round %d): %s: "
                     "%s (%s)", round, bad, cks_status_string(st), why);
        cks_version_info_t vi;
        st = cks_version_latest(c, "moe", &vi);
        cr_assert_eq(st, CKS_OK, "latest right after every server restarted (round %d): %s",
                     round, cks_status_string(st));
        cr_assert_eq(vi.version, 1);
        cr_assert(vi.state == CKS_VSTATE_PROTECTED || vi.state == CKS_VSTATE_DEGRADED,
                  "state %s", cks_vstate_string(vi.state));
        if (round < 3) {
            cks_client_destroy(c);
        }
    }
    cks_client_destroy(c);
}

/* Degraded reads in a small scratch, with two servers down: stripes wait for
 * room (two or one and a half chunks' worth), take malloc() memory where a
 * stripe needs more than all of it (one chunk's worth) or where there is
 * none (0); every object and range exact. A scratch over 4 GiB is refused. */
/* The first snapshot on servers that just started: 8 objects of 16 MiB put
 * at once (1 MiB chunks), so the primaries call members while the servers'
 * connections to each other are still being set up in both directions.
 * Before: answers to chunk puts sent right after HELLO came back on the
 * member's connection to the primary, were taken for answers to no call,
 * and bounced back as "STATUS_REPLY is not a request" (the version aborted),
 * or were dropped and the chunks counted missing after a 10 s timeout
 * (DEGRADED). Every chunk must be stored, and no answer lost. Before the
 * fix it failed in 5 of 6 runs of `ckstore-bench cluster -s 16M -o 8`. */
Test(cluster, first_snapshot_on_fresh_servers_is_protected, .timeout = 120)
{
    enum { N = 8 };
    const uint64_t size = 16 * MiB;
    cks_client_h c      = connect_cluster(4, 2, 1 * MiB);
    uint8_t *buf[N];
    cks_test_count_t p;
    cks_version_params_t vp = {0};
    cks_version_info_t vi;

    vp.job     = "fresh";
    vp.version = 1;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cks_test_count_init(&p, N);
    for (int i = 0; i < N; i++) {
        char key[16];
        cks_put_params_t pp = {0};
        /* registered memory, as trainers use: the servers pull the bytes
         * (one copy), so every primary calls its members at once */
        void *m = NULL;
        cr_assert_eq(cks_mem_alloc(c, size, &m), CKS_OK);
        buf[i] = m;
        cks_test_fill(buf[i], size, 77u + (uint64_t)i);
        snprintf(key, sizeof(key), "o%d", i);
        pp.job     = "fresh";
        pp.version = 1;
        pp.key     = key;
        pp.buffer  = buf[i];
        pp.size    = size;
        cr_assert_eq(cks_put_nb(c, &pp, cks_test_count_done, &p), CKS_INPROGRESS, "put %s",
                     key);
    }
    /* each put ends within the client's timeout */
    cks_status_t st = cks_test_count_wait(&p, 90000);
    cr_assert_eq(st, CKS_OK, "a put failed: %s", cks_status_name(st));
    st = cks_version_seal(c, "fresh", 1);
    char why[512]   = "";
    cks_client_last_error(c, why, sizeof(why));
    cr_assert_eq(st, CKS_OK, "seal: %s (%s)", cks_status_name(st), why);
    cr_assert_eq(cks_version_stat(c, "fresh", 1, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_PROTECTED, "version 1 is %s (%llu chunks missing)",
                 cks_vstate_string(vi.state), (unsigned long long)vi.missing);
    for (size_t i = 0; i < cl.n; i++) {
        cr_expect_eq(cks_test_log_count(cl.srv[i].log, "answered a call made on another"), 0,
                     "server %zu took an answer for no call (log %s)", i, cl.srv[i].log);
    }
    for (int i = 0; i < N; i++) {
        cks_mem_free(c, buf[i]);
    }
    cks_client_destroy(c);
}

Test(cluster, degraded_reads_in_a_small_scratch, .timeout = 300)
{
    static const uint64_t scratch[] = {0, 64 * 1024, 128 * 1024, 96 * 1024};
    cks_client_params_t p = {0};
    cks_client_h c;

    c = written(14, 1);
    cks_client_destroy(c);
    cks_test_cluster_kill(&cl, 1);
    cks_test_cluster_kill(&cl, 4);
    for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++) {
        c = connect_cluster_scratch(4, 2, 64 * 1024, scratch[i]);
        cr_assert_eq(verify_version(c, "moe", 1, NULL, 0), CKS_OK,
                     "restore with servers 1 and 4 down, %llu bytes of scratch",
                     (unsigned long long)scratch[i]);
        cks_client_destroy(c);
    }
    p.field_mask   = CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_SCRATCH;
    p.cluster      = cl.map;
    p.scratch_size = 5ull << 30;
    c              = NULL;
    cr_assert_eq(cks_client_create(&p, &c), CKS_ERR_INVALID_PARAM);
    cr_assert_null(c);
}

Test(cluster, three_down_is_a_clear_data_loss)
{
    cks_client_h c = written(12, 7);
    cks_client_destroy(c);
    cks_test_cluster_kill(&cl, 0);
    cks_test_cluster_kill(&cl, 2);
    cks_test_cluster_kill(&cl, 4);
    c = connect_cluster(4, 2, 64 * 1024);
    char bad[64] = "", text[512];
    cks_status_t st = verify_version(c, "moe", 7, bad, sizeof(bad));
    cr_assert_eq(st, CKS_ERR_DATA_LOST, "got %s", cks_status_name(st));
    cks_client_last_error(c, text, sizeof(text));
    cr_assert(strstr(text, bad) != NULL, "message '%s' names '%s'", text, bad);
    cks_client_destroy(c);
}

/* A dead server that is the primary of several objects of a checkpoint is
 * warned of once by the client, not once per object: the later puts that
 * go to the group's next member say so at info level (the first line of a
 * degraded checkpoint used to be one warning per object). The checkpoint
 * commits DEGRADED and every object restores exactly. */
Test(cluster, a_dead_primary_is_warned_of_once)
{
    enum { N = 24 };
    char key[64], path[] = "/tmp/cks-test-warn-XXXXXX";
    size_t nprim[NSRV] = {0}, victim = 0;
    cks_test_objs_make(&objs, (const uint64_t[]){4097}, 1, cks_test_seed(17));
    for (size_t i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "warn/obj%zu", i);
        int pr = cks_test_primary(cl.map, "warn", key, 4, 2);
        cr_assert(pr >= 0 && pr < (int)NSRV);
        victim = ++nprim[pr] > nprim[victim] ? (size_t)pr : victim;
    }
    cr_assert_geq(nprim[victim], 2, "no server is the primary of two of %d keys", N);
    uint64_t v = 1;
    while (cks_test_coordinator(cl.map, "warn", v) == (int)victim && v < 100) {
        v++;
    }
    cks_client_h c = connect_cluster(4, 2, 64 * 1024);
    cks_test_cluster_kill(&cl, victim);

    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    cr_assert(fd >= 0 && saved >= 0);
    cr_assert_geq(dup2(fd, STDERR_FILENO), 0);
    cks_version_params_t vp = {.job = "warn", .version = v};
    cks_status_t st         = cks_version_begin(c, &vp);
    for (size_t i = 0; st == CKS_OK && i < N; i++) {
        snprintf(key, sizeof(key), "warn/obj%zu", i);
        st = cks_test_put(c, "warn", v, key, objs.src[0], 4097);
    }
    st = st == CKS_OK ? cks_version_seal(c, "warn", v) : st;
    dup2(saved, STDERR_FILENO);
    close(saved);

    unsigned warned = 0, lines = 0;
    char line[1024];
    FILE *f = fdopen(fd, "r");
    cr_assert_not_null(f);
    rewind(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        lines++;
        warned += strstr(line, " warn ") != NULL &&
                  strstr(line, "trying the group's next member") != NULL;
    }
    fclose(f);
    unlink(path);
    fprintf(stderr, "server %zu (primary of %zu of %d objects) killed: %u warnings that puts "
            "went to the next member, %u lines logged\n", victim, nprim[victim], N, warned,
            lines);
    cr_assert_eq(st, CKS_OK, "version %llu: %s", (unsigned long long)v, cks_status_name(st));
    cr_assert_eq(warned, 1, "%u warnings for one dead primary of %zu objects", warned,
                 nprim[victim]);
    cks_version_info_t vi;
    cr_assert_eq(cks_version_stat(c, "warn", v, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_DEGRADED, "version is %s", cks_vstate_string(vi.state));
    uint8_t got[8192];
    cks_restore_h r = NULL;
    cr_assert_eq(cks_restore_open(c, "warn", v, &r), CKS_OK);
    for (size_t i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "warn/obj%zu", i);
        cr_assert_eq(cks_test_get_check(r, key, objs.src[0], 4097, got, sizeof(got), "warn"),
                     CKS_OK, "%s", key);
    }
    cks_restore_close(r);
    cks_client_destroy(c);
}

Test(cluster, server_killed_during_write)
{
    cks_client_h c = written(13, 1);

    /* version 2: a member dies after some objects are in */
    cks_version_params_t vp = {.job = "moe", .version = 2};
    int put_ok[NOBJ] = {0};
    size_t nput      = 0;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    for (size_t i = 0; i < NOBJ; i++) {
        char key[64];
        snprintf(key, sizeof(key), "v2/obj%zu", i);
        if (i == 2) {
            cks_test_cluster_kill(&cl, 5); /* mid-version */
        }
        cks_status_t st = cks_test_put(c, "moe", 2, key, objs.src[i], sizes[i]);
        /* the version may already be aborted (an object could not be protected) */
        cr_assert(st == CKS_OK || st == CKS_ERR_CONN_LOST || st == CKS_ERR_UNREACHABLE ||
                      st == CKS_ERR_TIMEOUT || st == CKS_ERR_VERSION_NOT_OPEN,
                  "put %zu: %s", i, cks_status_name(st));
        put_ok[i] = st == CKS_OK;
        nput += st == CKS_OK;
    }
    cks_status_t st = cks_version_seal(c, "moe", 2);
    cks_version_info_t vi;
    cks_status_t vst = cks_version_stat(c, "moe", 2, &vi);
    fprintf(stderr, "version 2 with server 5 killed after 2 puts: %zu puts stored, seal %s\n",
            nput, cks_status_name(st));
    if (st == CKS_OK) {
        /* the seal says it committed: it is whole, with exactly the objects
         * whose put succeeded, each bit-exact (server 5 still down); those
         * stored after the kill lack server 5's chunks: DEGRADED */
        cr_assert_eq(vst, CKS_OK);
        cr_assert(vi.state == CKS_VSTATE_DEGRADED || vi.state == CKS_VSTATE_PROTECTED,
                  "version 2 is %s", cks_vstate_string(vi.state));
        cr_assert(vi.state != CKS_VSTATE_DEGRADED || vi.redundancy == 1,
                  "DEGRADED with redundancy %u", vi.redundancy);
        cr_assert_eq(vi.nobjects, nput);
        cks_restore_h r;
        uint8_t *dst = malloc(6 * MiB);
        cr_assert_eq(cks_restore_open(c, "moe", 2, &r), CKS_OK);
        for (size_t i = 0; i < NOBJ; i++) {
            char key[64];
            uint64_t got = 0;
            snprintf(key, sizeof(key), "v2/obj%zu", i);
            cks_status_t gst = cks_test_get_whole(r, key, dst, 6 * MiB, &got);
            if (!put_ok[i]) {
                cr_assert_eq(gst, CKS_ERR_NO_SUCH_KEY, "%s was not stored: %s", key,
                             cks_status_name(gst));
                continue;
            }
            cr_assert_eq(gst, CKS_OK, "%s: %s", key, cks_status_name(gst));
            cr_assert_eq(got, sizes[i]);
            cr_assert(memcmp(dst, objs.src[i], sizes[i]) == 0, "%s: bytes differ", key);
        }
        cks_restore_close(r);
        free(dst);
    } else {
        cr_assert(vst != CKS_OK || vi.state == CKS_VSTATE_ABORTED || vi.state == CKS_VSTATE_OPEN,
                  "version 2 must not be restorable: %s", cks_vstate_string(vi.state));
        cks_restore_h r;
        cr_assert_neq(cks_restore_open(c, "moe", 2, &r), CKS_OK);
    }
    /* the previous version still restores, with one server down */
    cr_assert_eq(verify_version(c, "moe", 1, NULL, 0), CKS_OK);
    cks_version_info_t latest;
    cr_assert_eq(cks_version_latest(c, "moe", &latest), CKS_OK);
    cr_assert(latest.version == 1 || (st == CKS_OK && latest.version == 2));
    cks_client_destroy(c);
}

/* A member restarted while something else listens on its port (the test
 * support then moves it to a fresh port in a rewritten map and restarts the
 * others on their data): it serves, the data written before restores, and
 * a new version commits. */
Test(cluster, restart_when_the_port_is_taken)
{
    cks_client_h c = written(15, 1);
    cks_client_destroy(c);
    cks_test_cluster_kill(&cl, 2);
    uint16_t old          = cl.srv[2].port;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(old)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind %u", old);
    cr_assert_eq(listen(fd, 4), 0);
    cr_assert_eq(cks_test_server_restart(&cl.srv[2]), 0);
    close(fd);
    cr_assert_neq(cl.srv[2].port, old, "server 2 still on its taken port");
    c = connect_cluster(4, 2, 64 * 1024);
    cr_assert_eq(verify_version(c, "moe", 1, NULL, 0), CKS_OK);
    cr_assert_eq(write_version(c, "moe", 2), CKS_OK);
    cr_assert_eq(verify_version(c, "moe", 2, NULL, 0), CKS_OK);
    cks_client_destroy(c);
}

/* A request to a stopped server, from a thread of its own. */
typedef struct {
    cks_client_h c;
    size_t server;
    cks_status_t st;
} ask_t;

static void *ask_stopped(void *arg)
{
    ask_t *a = arg;
    cks_repair_info_t ri;
    a->st = cks_repair_status(a->c, a->server, &ri);
    return NULL;
}

/* cks_client_stats() counts the requests in flight: none once a new client
 * has connected (its handshakes and MEM_MAPs answered), one while a
 * request waits on a stopped server, none again once it is answered. */
Test(cluster, client_stats_count_the_requests_in_flight)
{
    cks_client_h c = cks_test_cluster_client(cl.map, K, M, CHUNK, 3000);
    cks_client_stats_t s;
    cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
    cr_assert_eq(s.requests_in_flight, 0, "%llu requests in flight after connecting",
                 (unsigned long long)s.requests_in_flight);
    ask_t a = {c, 2, CKS_OK};
    pthread_t th;
    cr_assert_eq(kill(cl.srv[2].pid, SIGSTOP), 0);
    cr_assert_eq(pthread_create(&th, NULL, ask_stopped, &a), 0);
    uint64_t seen = 0;
    for (int i = 0; i < 200 && seen == 0; i++) { /* at most 2 s */
        cr_assert_eq(cks_client_stats(c, &s), CKS_OK);
        seen = s.requests_in_flight;
        usleep(10 * 1000);
    }
    cr_assert_eq(kill(cl.srv[2].pid, SIGCONT), 0);
    pthread_join(th, NULL);
    cr_assert_eq(seen, 1, "%llu requests in flight while one waits on a stopped server",
                 (unsigned long long)seen);
    cr_assert_eq(a.st, CKS_OK, "the request, answered after SIGCONT: %s",
                 cks_status_name(a.st));
    cr_assert_eq(cks_test_client_quiet(c, 3000), 0, "requests still in flight");
    cks_client_destroy(c);
}

/* How many threads of process pid are named `name`. */
static int threads_named_in(pid_t pid, const char *name)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    cr_assert_not_null(d);
    while ((e = readdir(d)) != NULL) {
        char path[300], comm[64] = "";
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%.20s/comm", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            continue; /* the thread left */
        }
        if (fgets(comm, sizeof(comm), f) != NULL) {
            comm[strcspn(comm, "\n")] = 0;
        }
        fclose(f);
        n += strcmp(comm, name) == 0;
    }
    closedir(d);
    return n;
}

/* Threads of this process named `name`. */
static int threads_named(const char *name)
{
    return threads_named_in(getpid(), name);
}

/* Threads of process `pid` whose nice value is `nice` (/proc/PID/task/TID/
 * stat, field 19); -1 when the process's threads cannot be read. */
static int threads_at_nice(pid_t pid, int nice)
{
    char path[96], line[1024];
    int n = 0;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL) {
        return -1;
    }
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "/proc/%d/task/%.20s/stat", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            continue; /* the thread left */
        }
        char *rest = fgets(line, sizeof(line), f) != NULL ? strrchr(line, ')') : NULL;
        fclose(f);
        int v = 0, field = 2; /* ")" ends field 2 (comm); nice is field 19 */
        char *save = NULL;
        for (char *tok = rest != NULL ? strtok_r(rest + 1, " ", &save) : NULL; tok != NULL;
             tok = strtok_r(NULL, " ", &save)) {
            if (++field == 19) {
                v = atoi(tok);
                break;
            }
        }
        n += field == 19 && v == nice;
    }
    closedir(d);
    return n;
}

/* threads_at_nice() once it is `want`, or after 2 s (a thread lowers its
 * own priority as it starts: the server may answer before it has run). */
static int threads_at_nice_wait(pid_t pid, int nice, int want)
{
    int n = threads_at_nice(pid, nice);
    for (int i = 0; i < 100 && n != want; i++) {
        usleep(20000);
        n = threads_at_nice(pid, nice);
    }
    return n;
}

/* threads_named_in(), again every 20 ms until it is `want` (at most 2 s): a
 * thread sets its priority and its name one after the other. */
static int threads_named_wait(pid_t pid, const char *name, int want)
{
    int n = threads_named_in(pid, name);
    for (int i = 0; i < 100 && n != want; i++) {
        usleep(20000);
        n = threads_named_in(pid, name);
    }
    return n;
}

/* The encoder and repair decoder threads run --coding-nice levels below the
 * server's others (default 5): where cores are short, the progress thread's
 * copies, which clients wait on, come first. One of each by default;
 * --encoders 3 makes three of each; --coding-nice 0 leaves them all at the
 * server's priority. They carry names ("cks-encoder", "cks-repair"), as the
 * metadata thread does ("cks-metadata"). */
Test(cluster, coding_threads_run_below_the_progress_thread)
{
    cks_test_server_t *s = &cl.srv[0];
    int self = getpriority(PRIO_PROCESS, 0);

    if (self != 0) {
        cr_skip_test("the tests run at nice %d", self);
    }
    int at5 = threads_at_nice_wait(s->pid, 5, 2);
    cr_assert_eq(at5, 2, "default: %d threads at nice 5", at5);
    cr_assert_eq(getpriority(PRIO_PROCESS, (id_t)s->pid), 0, "the progress thread");
    /* named, for top -H and perf: one encoder, one repair decoder, the
     * metadata thread */
    cr_assert_eq(threads_named_wait(s->pid, "cks-encoder", 1), 1);
    cr_assert_eq(threads_named_wait(s->pid, "cks-repair", 1), 1);
    cr_assert_eq(threads_named_wait(s->pid, "cks-metadata", 1), 1);

    cks_test_set_server_flags("--coding-nice 19 --encoders 3");
    cks_test_server_stop(s, SIGTERM);
    cr_assert_eq(cks_test_server_restart(s), 0);
    int at19 = threads_at_nice_wait(s->pid, 19, 6);
    at5      = threads_at_nice(s->pid, 5);
    int enc3 = threads_named_wait(s->pid, "cks-encoder", 3);
    int rep3 = threads_named_wait(s->pid, "cks-repair", 3);
    cks_test_set_server_flags("--coding-nice 0");
    cks_test_server_stop(s, SIGTERM);
    cr_assert_eq(cks_test_server_restart(s), 0);
    int at0 = threads_at_nice(s->pid, 0), all = threads_at_nice(s->pid, 0);
    for (int v = 1; v <= 19; v++) {
        all += threads_at_nice(s->pid, v);
    }
    cks_test_set_server_flags(NULL);
    cks_test_server_stop(s, SIGTERM);
    cr_assert_eq(cks_test_server_restart(s), 0);
    cr_assert_eq(at19, 6, "--coding-nice 19 --encoders 3: %d threads at 19 (%d at 5)", at19,
                 at5);
    cr_assert_eq(at0, all, "--coding-nice 0: %d of %d threads at nice 0", at0, all);
    cr_assert(enc3 == 3 && rep3 == 3, "--encoders 3: %d encoder and %d repair threads",
              enc3, rep3);
    cr_assert_eq(threads_at_nice_wait(s->pid, 5, 2), 2, "restarted with the defaults");
}

TestSuite(cluster_faults, .fini = cks_test_suite_teardown, .timeout = 240);

Test(cluster_faults, corrupted_chunk_is_decoded_around)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    /* server 3 flips a bit in the first chunk it stores */
    cks_test_suite_start("chunk_corrupt:once", 3);
    cks_client_h c = written(14, 3);
    cr_assert_eq(verify_version(c, "moe", 3, NULL, 0), CKS_OK);
    /* a scrub (every data and parity chunk) finds the corrupted chunk */
    cks_restore_h r;
    int bad = 0;
    uint8_t *dst = malloc(6 * MiB);
    cr_assert_eq(cks_restore_open(c, "moe", 3, &r), CKS_OK);
    for (size_t i = 0; i < NOBJ; i++) {
        char key[64];
        cks_get_params_t g = {0};
        snprintf(key, sizeof(key), "layer%zu/expert%zu", i, i * 3);
        g.field_mask  = CKS_GET_FIELD_FLAGS;
        g.key         = key;
        g.buffer      = dst;
        g.buffer_size = 6 * MiB;
        g.flags       = CKS_GET_VERIFY | CKS_GET_SCRUB;
        cks_status_t st = cks_get(r, &g, NULL);
        cr_assert(st == CKS_OK || st == CKS_ERR_CRC_MISMATCH, "%s: %s", key,
                  cks_status_name(st));
        bad += st == CKS_ERR_CRC_MISMATCH;
    }
    cr_assert_eq(bad, 1, "the scrub found %d corrupted objects", bad);
    cks_restore_close(r);
    free(dst);
    cks_client_destroy(c);
    /* the fault fired (the server logged it): not a vacuous pass */
    FILE *f = fopen(cl.srv[3].log, "r");
    char line[512];
    int fired = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        fired |= strstr(line, "fault point 'chunk_corrupt' fired") != NULL;
    }
    if (f != NULL) {
        fclose(f);
    }
    cr_assert(fired, "the corruption fault never fired");
}

/* Degraded reads decode on the client's work threads ("cks-work"), started
 * at the first decode and stopped with the client, while the progress
 * thread goes on; a client whose work threads cannot start (as test builds
 * make them with CKS_NO_WORK_THREADS=1) decodes on its progress thread. Both restore every object
 * and range exactly with servers 1 and 4 down. */
Test(cluster_faults, degraded_reads_decode_on_work_threads_or_without_them)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    cks_test_suite_start(NULL, -1);
    cks_client_h c = written(16, 5);
    cr_assert_eq(threads_named("cks-work"), 0, "a healthy write started work threads");
    cr_assert_eq(verify_version(c, "moe", 5, NULL, 0), CKS_OK);
    cr_assert_eq(threads_named("cks-work"), 0, "a healthy restore started work threads");
    cks_client_destroy(c);
    cks_test_cluster_kill(&cl, 1);
    cks_test_cluster_kill(&cl, 4);

    c = connect_cluster(4, 2, 64 * 1024);
    cr_assert_eq(verify_version(c, "moe", 5, NULL, 0), CKS_OK, "degraded, work threads");
    int during = threads_named("cks-work");
    cks_client_destroy(c);
    int after = threads_named("cks-work");

    setenv("CKS_NO_WORK_THREADS", "1", 1); /* test builds */
    c = connect_cluster(4, 2, 64 * 1024);
    cks_status_t st = verify_version(c, "moe", 5, NULL, 0);
    int without = threads_named("cks-work");
    cks_client_destroy(c);
    unsetenv("CKS_NO_WORK_THREADS");
    cr_assert_eq(st, CKS_OK, "degraded, decoded on the progress thread: %s",
                 cks_status_name(st));
    cr_assert(during >= 1, "no work thread decoded the degraded stripes");
    cr_assert_eq(after, 0, "%d work threads left after the client's destroy", after);
    cr_assert_eq(without, 0, "work threads ran although none could start");
}
