/*
 * End-to-end: versions as distributed MoE training uses them, on a 6-server
 * RS(4,2) cluster of real processes. Partial-expert versions with retention
 * over 40 steps, multi-rank versions, a rank that never finishes, writers
 * racing for one version number, the coordinator killed mid-version, and a
 * restore into a different number of ranks (8 writer processes, 6 readers).
 */
#include "ckstore.h"
#include "cks_test.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define NSRV 6

static cks_test_cluster_t cl;

static cks_client_h connect_cluster(void)
{
    cks_client_h c;
    return cks_test_connect_cluster(cl.map, 4, 2, 16 * KiB, 20000, &c) == CKS_OK ? c : NULL;
}

static void setup(void)
{
    cr_assert_eq(cks_test_cluster_start(&cl, NSRV, 3, 128 * MiB, -1, NULL), 0);
}

static void teardown(void)
{
    cks_test_cluster_cleanup(&cl);
}

TestSuite(versions, .init = setup, .fini = teardown, .timeout = 300);

/* Tags of an RNG state, and of an object of no particular kind. */
static const cks_tags_t rng_tags   = {CKS_KIND_RNG, -1, -1, 0};
static const cks_tags_t other_tags = {CKS_KIND_OTHER, -1, -1, 0};

/* Bytes of expert e of layer l as saved at step t (so every save differs). */
static void expert_bytes(uint8_t *b, size_t n, int l, int e, uint64_t t)
{
    cks_test_fill(b, n, ((uint64_t)l << 40) ^ ((uint64_t)e << 20) ^ t);
}

Test(versions, partial_experts_with_retention, .timeout = 600)
{
    enum { LAYERS = 4, EXPERTS = 16, STEPS = 40, PER_STEP = EXPERTS / 4, R = 2 };
    const size_t esz = 24 * KiB + 5, dsz = 40 * KiB;
    uint64_t newest[LAYERS][EXPERTS];
    uint8_t *buf = malloc(dsz), *got = malloc(dsz);
    uint64_t used_max = 0, used_after_first_cycle = 0;
    char key[64];
    cks_client_h c = connect_cluster();
    cr_assert_not_null(c);

    for (uint64_t t = 1; t <= STEPS; t++) {
        cks_version_params_t vp = {0};
        vp.field_mask = CKS_VERSION_FIELD_RETAIN | (t > 1 ? CKS_VERSION_FIELD_PARENT : 0);
        vp.job        = "moe";
        vp.version    = t;
        vp.parent     = t - 1;
        vp.retain     = R;
        cr_assert_eq(cks_version_begin(c, &vp), CKS_OK, "begin %llu", (unsigned long long)t);
        /* the dense part every step, a quarter of the experts (round-robin) */
        for (int l = 0; l < LAYERS; l++) {
            snprintf(key, sizeof(key), "layer%d/dense", l);
            cks_test_fill(buf, dsz, t * 100 + (uint64_t)l);
            cr_assert_eq(cks_test_put_tagged(c, "moe", t, key, buf, dsz,
                                             (cks_tags_t){CKS_KIND_DENSE, l, CKS_TAG_NONE, 0}),
                         CKS_OK);
            for (int j = 0; j < PER_STEP; j++) {
                /* interleaved across layers: layer l is l steps ahead */
                int e = (int)(((t - 1 + (uint64_t)l) * PER_STEP + (uint64_t)j) % EXPERTS);
                snprintf(key, sizeof(key), "layer%d/expert%02d", l, e);
                expert_bytes(buf, esz, l, e, t);
                cr_assert_eq(cks_test_put_tagged(c, "moe", t, key, buf, esz,
                                                 (cks_tags_t){CKS_KIND_EXPERT, l, e, 0}),
                             CKS_OK);
                newest[l][e] = t;
            }
        }
        cr_assert_eq(cks_version_seal(c, "moe", t), CKS_OK, "seal %llu", (unsigned long long)t);
        uint64_t used;
        cr_assert_eq(cks_cluster_usage(c, &used, NULL), CKS_OK);
        used_max = used > used_max ? used : used_max;
        if (t == EXPERTS / PER_STEP + R) {
            used_after_first_cycle = used;
        }
    }
    /* arena use is bounded: once every expert has been saved and R versions
     * are kept, it stops growing (allow one more cycle of experts of slack) */
    uint64_t cycle = (uint64_t)LAYERS * EXPERTS * esz * 6 / 4 + 1 * MiB;
    cr_assert(used_max <= used_after_first_cycle + cycle,
              "arena use grew to %llu after %llu", (unsigned long long)used_max,
              (unsigned long long)used_after_first_cycle);

    /* only the newest R versions remain */
    cks_version_info_t vi[64];
    size_t count;
    int more;
    cr_assert_eq(cks_version_list(c, "moe", NULL, vi, 64, &count, &more), CKS_OK);
    cr_assert_eq(count, R, "%zu versions listed", count);
    cr_assert_eq(vi[count - 1].version, STEPS);

    /* every expert restores from its newest save, bit-exact */
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(c, "moe", CKS_VERSION_LATEST, &r), CKS_OK);
    for (int l = 0; l < LAYERS; l++) {
        for (int e = 0; e < EXPERTS; e++) {
            cks_object_info_t oi;
            snprintf(key, sizeof(key), "layer%d/expert%02d", l, e);
            cr_assert_eq(cks_object_stat(r, key, &oi), CKS_OK, "%s", key);
            cr_assert_eq(oi.source_version, newest[l][e], "%s from %llu, want %llu", key,
                         (unsigned long long)oi.source_version,
                         (unsigned long long)newest[l][e]);
            cks_get_params_t g = {0};
            g.key              = key;
            g.buffer           = got;
            g.buffer_size      = dsz;
            cr_assert_eq(cks_get(r, &g, NULL), CKS_OK, "%s", key);
            expert_bytes(buf, esz, l, e, newest[l][e]);
            cr_assert(memcmp(buf, got, esz) == 0, "%s bytes", key);
        }
    }
    /* tag filters over the manifest */
    cks_object_info_t found[64];
    cks_tag_filter_t f = {CKS_FILTER_KIND | CKS_FILTER_LAYER, {CKS_KIND_EXPERT, 2, 0, 0}};
    cr_assert_eq(cks_object_find(r, NULL, &f, found, 64, &count, &more), CKS_OK);
    cr_assert_eq(count, EXPERTS);
    for (size_t i = 0; i < count; i++) {
        cr_assert(found[i].tags.layer == 2 && found[i].tags.kind == CKS_KIND_EXPERT);
    }
    cks_restore_close(r);
    cks_client_destroy(c);
    free(buf);
    free(got);
}

Test(versions, delete_marker_and_parent_rules)
{
    uint8_t b[100] = {1};
    cks_client_h c = connect_cluster();
    cks_version_params_t vp = {.job = "j", .version = 1};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "j", 1, "a", b, 100, other_tags), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "j", 1, "b", b, 50, other_tags), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "j", 1), CKS_OK);
    /* a parent that does not exist, or is not restorable, is refused */
    vp = (cks_version_params_t){.field_mask = CKS_VERSION_FIELD_PARENT, .job = "j",
                                .version = 3, .parent = 2};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_ERR_NO_SUCH_VERSION);
    vp.parent = 1;
    vp.version = 2;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_object_delete(c, "j", 2, "b"), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "j", 2), CKS_OK);
    cks_restore_h r;
    cks_object_info_t oi;
    cr_assert_eq(cks_restore_open(c, "j", 2, &r), CKS_OK);
    cr_assert_eq(cks_object_stat(r, "a", &oi), CKS_OK);
    cr_assert_eq(oi.source_version, 1);
    cr_assert_eq(cks_object_stat(r, "b", &oi), CKS_ERR_NO_SUCH_KEY);
    cks_restore_close(r);
    cks_client_destroy(c);
}

Test(versions, ranks_finish_then_commit)
{
    enum { RANKS = 3 };
    uint8_t b[4096];
    char key[32];
    cks_client_h c[RANKS];
    for (int i = 0; i < RANKS; i++) {
        c[i] = connect_cluster();
        cr_assert_not_null(c[i]);
    }
    cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_NRANKS, .job = "mr",
                               .version = 5, .nranks = RANKS};
    cr_assert_eq(cks_version_begin(c[0], &vp), CKS_OK);
    for (int i = 0; i < RANKS; i++) {
        for (int k = 0; k < 2; k++) {
            memset(b, i * 2 + k, sizeof(b));
            snprintf(key, sizeof(key), "rank%d/part%d", i, k);
            cr_assert_eq(cks_test_put_tagged(c[i], "mr", 5, key, b, sizeof(b),
                                             (cks_tags_t){CKS_KIND_DENSE, 0, CKS_TAG_NONE, i}),
                         CKS_OK);
        }
    }
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(cks_version_finish_nb(c[i], "mr", 5, (uint32_t)i, NULL, NULL),
                     CKS_ERR_INVALID_PARAM, "a callback is required");
    }
    cks_version_info_t vi;
    /* ranks 0 and 1 finish from threads of their own (each waits for the outcome) */
    cks_test_finish_t fa[2];
    for (int i = 0; i < 2; i++) {
        cks_test_finish_start(&fa[i], c[i], "mr", 5, (uint32_t)i);
    }
    /* not restorable before the last rank finishes (rank 2 has not yet) */
    cr_assert_eq(cks_version_stat(c[2], "mr", 5, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_OPEN);
    cr_assert_eq(cks_version_finish(c[2], "mr", 5, 2), CKS_OK);
    for (int i = 0; i < 2; i++) {
        cks_test_finish_join(&fa[i]);
        cr_assert_eq(fa[i].st, CKS_OK, "rank %d's finish: %s", i, cks_status_name(fa[i].st));
    }
    cr_assert_eq(cks_version_stat(c[2], "mr", 5, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_PROTECTED);
    cr_assert_eq(vi.nobjects, 2 * RANKS);
    /* a rank cannot finish twice */
    cr_assert_neq(cks_version_finish(c[0], "mr", 5, 0), CKS_OK);
    for (int i = 0; i < RANKS; i++) {
        cks_client_destroy(c[i]);
    }
}

Test(versions, rank_that_never_finishes_is_aborted)
{
    uint8_t b[1000] = {7};
    cks_client_h c = connect_cluster();
    cks_version_params_t vp = {.job = "t", .version = 1};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "t", 1, "x", b, sizeof(b), rng_tags), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "t", 1), CKS_OK);
    vp = (cks_version_params_t){.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT,
                                .job = "t", .version = 2, .nranks = 2, .timeout_s = 2};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "t", 2, "x", b, sizeof(b), rng_tags), CKS_OK);
    /* rank 0 finishes; rank 1 "died": the deadline aborts the version */
    cks_status_t st = cks_version_finish(c, "t", 2, 0);
    cr_assert_eq(st, CKS_ERR_TIMEOUT, "got %s", cks_status_name(st));
    char text[256];
    cks_client_last_error(c, text, sizeof(text));
    cr_assert(strstr(text, "1 of 2 ranks") != NULL, "message: %s", text);
    cks_version_info_t vi;
    cr_assert_eq(cks_version_stat(c, "t", 2, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_ABORTED);
    cr_assert_eq(cks_version_latest(c, "t", &vi), CKS_OK);
    cr_assert_eq(vi.version, 1, "the previous version is the newest restorable");
    cks_client_destroy(c);
}

/* One racer: its own client (made after the fork), then it waits for the
 * start (end of file on a pipe that every racer holds), begins `version`
 * and writes its status and the error text to `out`. An exit code only. */
static int racer(int ready_fd, int go_fd, int out_fd, uint64_t version)
{
    cks_client_h c = connect_cluster();
    char go, msg[256 + sizeof(int)];
    cks_status_t st = CKS_ERR_INTERNAL;
    memset(msg, 0, sizeof(msg));
    if (c == NULL || write(ready_fd, "r", 1) != 1) {
        return 1;
    }
    if (read(go_fd, &go, 1) == 0) { /* the start: every racer wakes at once */
        cks_version_params_t vp = {.job = "race", .version = version};
        st = cks_version_begin(c, &vp);
        cks_client_last_error(c, msg + sizeof(int), sizeof(msg) - sizeof(int));
    }
    memcpy(msg, &st, sizeof(int));
    int rc = write(out_fd, msg, sizeof(msg)) == (ssize_t)sizeof(msg) ? 0 : 1;
    cks_client_destroy(c);
    return rc;
}

/* Read exactly len bytes within ms; 0 or -1. */
static int read_all(int fd, void *buf, size_t len, int ms)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, ms) <= 0) {
            return -1;
        }
        ssize_t r = read(fd, (char *)buf + got, len - got);
        if (r <= 0) {
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

/* Four writer processes, each with its own client, released at the same
 * moment, begin the same version: one begins it, the others are told that it
 * exists (the coordinator of the version serializes begins: the first one
 * it sees creates the version, and every later one finds it). Several
 * rounds, each a new version number; the winner's version is open and
 * takes puts, and it seals. */
Test(versions, writers_race_for_one_version)
{
    enum { ROUNDS = 6, RACERS = 4 };
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t v = 9 + (uint64_t)round;
        int ready[2], go[2], out[RACERS][2];
        pid_t kid[RACERS];
        cr_assert_eq(pipe(ready), 0);
        cr_assert_eq(pipe(go), 0);
        for (int i = 0; i < RACERS; i++) {
            cr_assert_eq(pipe(out[i]), 0);
            kid[i] = fork();
            cr_assert_geq(kid[i], 0);
            if (kid[i] == 0) {
                close(go[1]); /* only the parent holds the write end: its close starts */
                close(ready[0]);
                close(out[i][0]);
                _exit(racer(ready[1], go[0], out[i][1], v));
            }
            close(out[i][1]);
        }
        close(ready[1]);
        close(go[0]);
        char r[RACERS];
        cr_assert_eq(read_all(ready[0], r, RACERS, 60000), 0, "round %d: racers not ready",
                     round);
        close(go[1]); /* go */
        cks_status_t st[RACERS];
        char msg[RACERS][256 + sizeof(int)];
        for (int i = 0; i < RACERS; i++) {
            int ws;
            cr_assert_eq(read_all(out[i][0], msg[i], sizeof(msg[i]), 60000), 0,
                         "round %d: racer %d gave no answer", round, i);
            memcpy(&st[i], msg[i], sizeof(int));
            cr_assert_eq(waitpid(kid[i], &ws, 0), kid[i]);
            cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "round %d: racer %d failed",
                      round, i);
            close(out[i][0]);
        }
        close(ready[0]);
        int wins = 0;
        for (int i = 0; i < RACERS; i++) {
            fprintf(stderr, "round %d, racer %d: %s\n", round, i, cks_status_name(st[i]));
            wins += st[i] == CKS_OK;
        }
        cr_assert_eq(wins, 1, "round %d: exactly one begins the version, not %d", round, wins);
        for (int i = 0; i < RACERS; i++) {
            cr_assert(st[i] == CKS_OK || st[i] == CKS_ERR_VERSION_EXISTS,
                      "round %d: racer %d is told it exists, not %s (%s)", round, i,
                      cks_status_name(st[i]), msg[i] + sizeof(int));
            cr_assert(st[i] == CKS_OK || strstr(msg[i] + sizeof(int), "already exists") != NULL,
                      "round %d: racer %d's message '%s'", round, i, msg[i] + sizeof(int));
        }
        /* one version, open, as the winner began it */
        cks_client_h c = connect_cluster();
        cks_version_info_t vi;
        uint8_t b[1000];
        cr_assert_not_null(c);
        cr_assert_eq(cks_version_stat(c, "race", v, &vi), CKS_OK);
        cr_assert_eq(vi.state, CKS_VSTATE_OPEN);
        memset(b, round, sizeof(b));
        cr_assert_eq(cks_test_put_tagged(c, "race", v, "x", b, sizeof(b), other_tags), CKS_OK);
        cr_assert_eq(cks_version_seal(c, "race", v), CKS_OK);
        cks_client_destroy(c);
    }
}

static cks_status_t stat_state(cks_client_h c, uint64_t v, cks_vstate_t *state_p)
{
    cks_version_info_t vi;
    cks_status_t st = cks_version_stat(c, "co", v, &vi);
    *state_p        = st == CKS_OK ? vi.state : (cks_vstate_t)-1;
    return st;
}

static void assert_object(cks_restore_h r, const char *key, const uint8_t *want, uint64_t size,
                          uint64_t source)
{
    uint8_t got[5000];
    uint64_t len = 0;
    cks_object_info_t oi;
    cks_get_params_t g = {.key = key, .buffer = got, .buffer_size = sizeof(got)};
    cr_assert_eq(cks_object_stat(r, key, &oi), CKS_OK, "%s", key);
    cr_assert_eq(oi.source_version, source, "%s from version %llu", key,
                 (unsigned long long)oi.source_version);
    cr_assert_eq(cks_get(r, &g, &len), CKS_OK, "%s", key);
    cr_assert_eq(len, size);
    cr_assert(memcmp(got, want, size) == 0, "%s: bytes", key);
}

/* The coordinator of an open version (placement of the job and version
 * number) is killed. Expected, step by step: only the coordinator knows the
 * open version; its seal fails with CKS_ERR_CONN_LOST (the client's
 * connection to it broke) and the version is invisible to the others
 * (CKS_ERR_NO_SUCH_VERSION), the previous version is the newest (the other
 * candidates answer that the dead one coordinates it, so no one else can
 * finish it); another version whose first candidate is the dead server is
 * coordinated by its next candidate and commits; a version with a live
 * coordinator begins, takes a put and commits DEGRADED
 * (RS(4,2) on 6 servers puts a chunk of every stripe on every server: one
 * chunk is missing, redundancy 1), and restores exactly. Restarted, the
 * coordinator aborts the version it had open (seal: VERSION_NOT_OPEN,
 * restore: NOT_RESTORABLE), and a new version commits and restores exactly,
 * with its parent's object. */
Test(versions, coordinator_killed_mid_version)
{
    uint8_t x[5000], y[100];
    cks_vstate_t state;
    cks_version_info_t vi;
    cks_restore_h r;
    memset(x, 3, sizeof(x));
    memset(y, 4, sizeof(y));
    cks_client_h c = connect_cluster();
    cr_assert_not_null(c);
    cks_version_params_t vp = {.job = "co", .version = 1};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "co", 1, "x", x, sizeof(x), rng_tags), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "co", 1), CKS_OK);

    int coord = cks_test_coordinator(cl.map, "co", 2);
    cr_assert_geq(coord, 0);
    vp.version = 2;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "co", 2, "x", x, sizeof(x), rng_tags), CKS_OK);
    /* the open version lives on its coordinator only */
    for (size_t i = 0; i < NSRV; i++) {
        cks_client_params_t p = {.field_mask = CKS_CLIENT_FIELD_SERVER,
                                 .server     = cl.srv[i].addr};
        cks_client_h one;
        cr_assert_eq(cks_client_create(&p, &one), CKS_OK);
        /* a server still in its first catch-up round since the cluster
         * started answers BUSY (seen under load): wait until it is over */
        cks_test_wait_caught_up(c, i, 10000);
        cks_status_t st = cks_version_stat(one, "co", 2, &vi);
        if ((int)i == coord) {
            cr_assert_eq(st, CKS_OK);
            cr_assert_eq(vi.state, CKS_VSTATE_OPEN);
        } else {
            /* not here; a server that has not recorded version 1 (a
             * member that did not take its commit in time learns it by
             * catch-up) does not know the job either: seen once under
             * ASan in a full run */
            cr_assert(st == CKS_ERR_NO_SUCH_VERSION || st == CKS_ERR_NO_SUCH_JOB,
                      "server %zu: %s", i, cks_status_name(st));
        }
        cks_client_destroy(one);
    }

    /* the object is spread and reported (a primary that dies before it
     * spreads loses it: heal/primary_killed_after_stored_fails_the_finish_at_once) */
    struct timespec pause = {0, 300 * 1000000};
    nanosleep(&pause, NULL);
    cks_test_cluster_kill(&cl, (size_t)coord);
    /* the seal goes on to the next candidate, which takes the version over
     * (a majority grants it a higher ballot: the dead coordinator is
     * unreachable from them too), learns its objects again from their
     * primaries, and commits */
    cks_status_t sst = cks_version_seal(c, "co", 2);
    char text[512] = "";
    cks_client_last_error(c, text, sizeof(text));
    cr_assert_eq(sst, CKS_OK, "seal of version 2 after its coordinator %d died: %s (%s)", coord,
                 cks_status_name(sst), text);
    cr_assert_eq(stat_state(c, 2, &state), CKS_OK);
    cr_assert(state == CKS_VSTATE_DEGRADED || state == CKS_VSTATE_PROTECTED, "%s",
              cks_vstate_string(state));
    cr_assert_eq(cks_restore_open(c, "co", 2, &r), CKS_OK);
    assert_object(r, "x", x, sizeof(x), 2);
    cks_restore_close(r);
    cr_assert_eq(cks_version_latest(c, "co", &vi), CKS_OK);
    cr_assert_eq(vi.version, 2);

    /* the next version numbers with the dead coordinator, and with a live one */
    uint64_t v_dead = 0, v_live = 0;
    for (uint64_t v = 3; v < 1000 && (v_dead == 0 || v_live == 0); v++) {
        int co = cks_test_coordinator(cl.map, "co", v);
        if (co == coord && v_dead == 0) {
            v_dead = v;
        } else if (co != coord && v_live == 0) {
            v_live = v;
        }
    }
    cr_assert(v_dead != 0 && v_live != 0);
    fprintf(stderr, "coordinator %d killed; version %llu has it too, %llu has another\n", coord,
            (unsigned long long)v_dead, (unsigned long long)v_live);
    vp = (cks_version_params_t){.field_mask = CKS_VERSION_FIELD_PARENT, .job = "co",
                                .version = v_dead, .parent = 1};
    /* its first candidate is dead: the next one coordinates it (failover) */
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "co", v_dead, "y", y, sizeof(y), rng_tags), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "co", v_dead), CKS_OK);
    vp.version = v_live;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "co", v_live, "y", y, sizeof(y), rng_tags),
                 CKS_OK, "stored on its primary");
    cr_assert_eq(cks_version_seal(c, "co", v_live), CKS_OK,
                 "with one server down the object is stored without its chunk there");
    cr_assert_eq(cks_version_stat(c, "co", v_live, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_DEGRADED, "%s", cks_vstate_string(vi.state));
    cr_assert_eq(vi.redundancy, 1, "RS(4,2) with one chunk of a stripe missing");
    cr_assert_eq(cks_restore_open(c, "co", v_live, &r), CKS_OK);
    assert_object(r, "x", x, sizeof(x), 1);
    assert_object(r, "y", y, sizeof(y), v_live);
    cks_restore_close(r);

    /* back: the version it had open was taken over and committed; it must
     * not drop it (its claim to abort it is refused: the others hold its
     * record), and it learns the commit by catch-up */
    cr_assert_eq(cks_test_server_restart(&cl.srv[coord]), 0);
    cks_client_destroy(c);
    c = connect_cluster();
    cr_assert_not_null(c);
    cks_status_t ost = CKS_ERR_BUSY;
    for (int t = 0; t < 300; t++) { /* bounded: 30 s */
        ost = stat_state(c, 2, &state);
        if (ost == CKS_OK && (state == CKS_VSTATE_DEGRADED || state == CKS_VSTATE_PROTECTED)) {
            break;
        }
        struct timespec ms100 = {0, 100 * 1000000};
        nanosleep(&ms100, NULL);
    }
    cr_assert_eq(ost, CKS_OK, "%s", cks_status_name(ost));
    cr_assert(state == CKS_VSTATE_DEGRADED || state == CKS_VSTATE_PROTECTED,
              "version 2 after its first coordinator returned: %s", cks_vstate_string(state));
    cr_assert_eq(cks_restore_open(c, "co", 2, &r), CKS_OK);
    assert_object(r, "x", x, sizeof(x), 2);
    cks_restore_close(r);
    cr_assert_neq(cks_version_seal(c, "co", 2), CKS_OK, "committed once");
    cr_assert_eq(stat_state(c, v_dead, &state), CKS_OK);
    cr_assert(state == CKS_VSTATE_DEGRADED || state == CKS_VSTATE_PROTECTED, "%s",
              cks_vstate_string(state));
    cr_assert_eq(cks_restore_open(c, "co", v_dead, &r), CKS_OK);
    assert_object(r, "x", x, sizeof(x), 1);
    assert_object(r, "y", y, sizeof(y), v_dead);
    cks_restore_close(r);

    /* a new version with its coordinator (the restarted server) commits */
    uint64_t v = v_dead > v_live ? v_dead + 1 : v_live + 1;
    while (cks_test_coordinator(cl.map, "co", v) != coord && v < 2000) {
        v++;
    }
    vp.version = v;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "co", v, "y", y, sizeof(y), rng_tags), CKS_OK);
    cr_assert_eq(cks_version_seal(c, "co", v), CKS_OK);
    cr_assert_eq(cks_version_latest(c, "co", &vi), CKS_OK);
    cr_assert_eq(vi.version, v);
    cr_assert_eq(cks_restore_open(c, "co", v, &r), CKS_OK);
    assert_object(r, "x", x, sizeof(x), 1);
    assert_object(r, "y", y, sizeof(y), v);
    cks_restore_close(r);
    cks_client_destroy(c);
}

/* ---- resharded restore: 8 writer ranks, 6 reader ranks ------------------------- */

#define TENSOR (3 * MiB + 777)

static void tensor_bytes(uint8_t *b, uint64_t off, uint64_t len)
{
    /* byte i of the tensor is a function of i: any slice can be checked */
    for (uint64_t i = 0; i < len; i++) {
        uint64_t x = (off + i) * 0x9E3779B97F4A7C15ull;
        b[i]       = (uint8_t)(x >> 56);
    }
}

static int writer(int rank, int nranks)
{
    cks_client_h c = connect_cluster();
    uint64_t lo = (uint64_t)rank * TENSOR / (uint64_t)nranks;
    uint64_t hi = (uint64_t)(rank + 1) * TENSOR / (uint64_t)nranks;
    uint8_t *b  = malloc(hi - lo);
    char key[32];
    if (c == NULL || b == NULL) {
        return 1;
    }
    tensor_bytes(b, lo, hi - lo);
    snprintf(key, sizeof(key), "dense/shard%d", rank);
    int rc = cks_test_put_tagged(c, "reshard", 1, key, b, hi - lo,
                                 (cks_tags_t){CKS_KIND_DENSE, 0, CKS_TAG_NONE, rank}) != CKS_OK ||
             cks_version_finish(c, "reshard", 1, (uint32_t)rank) != CKS_OK;
    cks_client_destroy(c);
    free(b);
    return rc;
}

/* A reader of a new layout: its slice of the tensor may span old shards. */
static int reader(int rank, int nranks, int old_ranks)
{
    cks_client_h c = connect_cluster();
    uint64_t lo = (uint64_t)rank * TENSOR / (uint64_t)nranks;
    uint64_t hi = (uint64_t)(rank + 1) * TENSOR / (uint64_t)nranks;
    uint8_t *got = malloc(hi - lo), *want = malloc(hi - lo);
    cks_restore_h r;
    char key[32];
    int rc = 0;
    if (c == NULL || got == NULL || want == NULL ||
        cks_restore_open(c, "reshard", 1, &r) != CKS_OK) {
        return 1;
    }
    for (int s = 0; s < old_ranks && rc == 0; s++) {
        uint64_t slo = (uint64_t)s * TENSOR / (uint64_t)old_ranks;
        uint64_t shi = (uint64_t)(s + 1) * TENSOR / (uint64_t)old_ranks;
        uint64_t a = lo > slo ? lo : slo, z = hi < shi ? hi : shi;
        if (a >= z) {
            continue;
        }
        cks_get_params_t g = {0};
        snprintf(key, sizeof(key), "dense/shard%d", s);
        g.field_mask  = CKS_GET_FIELD_RANGE;
        g.key         = key;
        g.buffer      = got + (a - lo);
        g.buffer_size = z - a;
        g.offset      = a - slo; /* exactly the bytes this rank needs */
        g.length      = z - a;
        rc |= cks_get(r, &g, NULL) != CKS_OK;
    }
    tensor_bytes(want, lo, hi - lo);
    rc |= memcmp(got, want, hi - lo) != 0;
    cks_restore_close(r);
    cks_client_destroy(c);
    free(got);
    free(want);
    return rc;
}

static int run_ranks(int n, int (*fn)(int, int, int), int arg)
{
    pid_t kids[16];
    int failed = 0;
    for (int i = 0; i < n; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            _exit(fn(i, n, arg));
        }
    }
    for (int i = 0; i < n; i++) {
        int ws;
        waitpid(kids[i], &ws, 0);
        failed += !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    }
    return failed;
}

static int writer3(int rank, int n, int unused)
{
    (void)unused;
    return writer(rank, n);
}

Test(versions, resharded_restore_8_to_6)
{
    cks_client_h c = connect_cluster();
    cks_version_params_t vp = {.field_mask = CKS_VERSION_FIELD_NRANKS, .job = "reshard",
                               .version = 1, .nranks = 8};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cks_client_destroy(c);
    cr_assert_eq(run_ranks(8, writer3, 0), 0, "writer ranks failed");
    cr_assert_eq(run_ranks(6, reader, 8), 0, "reader ranks failed");
}

/* ---- the ckstore command line ---------------------------------------------------- */

/* Run the CLI against the cluster; returns its exit status, output in out. */
static int cli(char *out, size_t len, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s --cluster %s %s 2>&1", CKS_CLI_BIN, cl.map, args);
    return cks_test_run(cmd, out, len);
}

Test(versions, command_line)
{
    static char out[16384];
    uint8_t b[3000];
    cks_client_h c = connect_cluster();
    cks_version_params_t vp = {.job = "cli", .version = 4};
    memset(b, 9, sizeof(b));
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "cli", 4, "layer1/expert3", b, sizeof(b),
                                     (cks_tags_t){CKS_KIND_EXPERT, 1, 3, 0}),
                 CKS_OK);
    cr_assert_eq(cks_version_seal(c, "cli", 4), CKS_OK);
    vp = (cks_version_params_t){.field_mask = CKS_VERSION_FIELD_PARENT, .job = "cli",
                                .version = 5, .parent = 4};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(cks_test_put_tagged(c, "cli", 5, "dense", b, 100,
                                     (cks_tags_t){CKS_KIND_DENSE, 0, -1, 0}),
                 CKS_OK);
    cr_assert_eq(cks_version_seal(c, "cli", 5), CKS_OK);
    cks_client_destroy(c);

    cr_assert_eq(cli(out, sizeof(out), "jobs"), 0, "%s", out);
    cr_assert(strstr(out, "cli") != NULL, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "versions cli"), 0, "%s", out);
    cr_assert(strstr(out, "PROTECTED") != NULL && strstr(out, "  5 ") != NULL, "%s", out);
    /* the manifest of version 5 shows where each object comes from */
    cr_assert_eq(cli(out, sizeof(out), "objects cli 5"), 0, "%s", out);
    char *line = strstr(out, "layer1/expert3");
    cr_assert_not_null(line, "%s", out);
    cr_assert(strstr(out, "        4 layer1/expert3") != NULL, "source 4 shown: %s", out);
    cr_assert(strstr(out, "        5 dense") != NULL, "source 5 shown: %s", out);
    cr_assert_eq(cli(out, sizeof(out), "verify cli latest"), 0, "%s", out);
    cr_assert(strstr(out, "2 objects") != NULL && strstr(out, "0 bad") != NULL, "%s", out);
    /* errors: non-zero exits with a reason */
    cr_assert_eq(cli(out, sizeof(out), "stat cli 99"), 1, "%s", out);
    cr_assert(strstr(out, "no such version") != NULL, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "frobnicate"), 2, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "--help"), 0, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "delete cli 5"), 0, "%s", out);
    cr_assert_eq(cli(out, sizeof(out), "stat cli 5"), 1, "%s", out);
}
