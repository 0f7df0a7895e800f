/*
 * Randomized fault injection on a 6-server RS(4,2) cluster of real
 * processes. Every run prints the test's seed and each server's
 * CKS_FAULT_SEED (derived from it); CKS_TEST_SEED=N replays a run: the same
 * choices here and the same fault draws in every server.
 *
 * random_faults_and_kills: write-path fault points fire with a probability
 * on every server (chunk sends and receipts, metadata commits, the encoder)
 * while up to two servers are killed and restarted at random moments, for a
 * fixed number of rounds (a time bound that is hit fails the test). What
 * must hold: the faults fire (their log lines are counted); a write either
 * commits (PROTECTED, or DEGRADED when servers were down or chunk sends
 * were killed) or fails with a clear error; a version that commits restores
 * bit-exact in every later round while no more servers are down than were
 * when it was written plus the redundancy it states (at most m = 2 down for
 * a PROTECTED one), and past that bit-exact or with a clear error;
 * a version whose write failed restores bit-exact or not at all; a restore
 * never returns wrong bytes; exact restores happen after faults fired.
 *
 * corrupted_chunks_are_decoded_around: one server (chosen by the seed)
 * flips a bit in half the chunks it receives, at random. Chunks are read
 * into cks_mem_alloc() memory, so the server that sends one checks its CRC
 * and logs the chunk (index, stripe, object) when it fails. Every restore
 * must be bit-exact - with all servers up, and with another server down -
 * and the logs must show corrupted chunks that were read and decoded around
 * in data positions (all up and one down) and in a parity position (one
 * down: the parity chunk was needed and the other parity was used).
 */
#include "ckstore.h"
#include "cks_common.h"
#include "cks_faults_gate.h"
#include "cks_test.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KiB (1ull << 10)
#define NSRV 6
#define NOBJ 4

static cks_test_cluster_t cl;

static void teardown(void)
{
    cks_test_cluster_cleanup(&cl);
}

TestSuite(faults, .fini = teardown, .timeout = 600);

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static uint64_t now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec;
}

/* Lines of every server's log (restarts append to it) with `text`. */
static int logs_count(const char *text)
{
    int n = 0;
    for (size_t i = 0; i < NSRV; i++) {
        n += cks_test_log_count(cl.srv[i].log, text);
    }
    return n;
}

/* ---- random faults and kills -------------------------------------------------- */

static cks_client_h connect_cluster(void)
{
    cks_client_h c;
    return cks_test_connect_cluster(cl.map, 4, 2, 16 * KiB, 10000, &c) == CKS_OK ? c : NULL;
}

static uint64_t obj_size(uint64_t version, int i)
{
    return (version * 7919 + (uint64_t)i * 104729) % (200 * KiB) + 1;
}

static void obj_bytes(uint8_t *b, uint64_t seed, uint64_t version, int i)
{
    cks_test_fill(b, obj_size(version, i), seed ^ (version * 1000 + (uint64_t)i));
}

/* Write a version; CKS_OK only if it committed. */
static cks_status_t write_version(cks_client_h c, uint64_t seed, uint64_t v, uint8_t *buf)
{
    cks_version_params_t vp = {.job = "f", .version = v};
    char key[32];
    cks_status_t st = cks_version_begin(c, &vp);
    for (int i = 0; st == CKS_OK && i < NOBJ; i++) {
        cks_put_params_t p = {0};
        snprintf(key, sizeof(key), "obj%d", i);
        obj_bytes(buf, seed, v, i);
        p.job     = "f";
        p.version = v;
        p.key     = key;
        p.buffer  = buf;
        p.size    = obj_size(v, i);
        st        = cks_put(c, &p);
    }
    if (st == CKS_OK) {
        return cks_version_seal(c, "f", v);
    }
    cks_version_abort(c, "f", v); /* best effort: the coordinator may be gone */
    return st;
}

/* Restore a version: 1 exact, 0 an error (in *st_p); wrong bytes fail the test. */
static int restore_version(cks_client_h c, uint64_t seed, uint64_t v, uint8_t *buf,
                           uint8_t *want, cks_status_t *st_p)
{
    cks_restore_h r = NULL;
    char key[32];
    cks_status_t st = cks_restore_open(c, "f", v, &r);
    for (int i = 0; st == CKS_OK && i < NOBJ; i++) {
        cks_get_params_t g = {0};
        uint64_t got       = 0;
        snprintf(key, sizeof(key), "obj%d", i);
        g.key         = key;
        g.buffer      = buf;
        g.buffer_size = 256 * KiB;
        st            = cks_get(r, &g, &got);
        if (st == CKS_OK) {
            obj_bytes(want, seed, v, i);
            cr_assert_eq(got, obj_size(v, i), "version %llu %s: size",
                         (unsigned long long)v, key);
            cr_assert(memcmp(buf, want, got) == 0, "version %llu %s: WRONG BYTES",
                      (unsigned long long)v, key);
        }
    }
    cks_restore_close(r);
    *st_p = st;
    return st == CKS_OK;
}

static int down_count(const int *down)
{
    int n = 0;
    for (int i = 0; i < NSRV; i++) {
        n += down[i];
    }
    return n;
}

#define FIRED "fault point '"

Test(faults, random_faults_and_kills)
{
    enum { ROUNDS = 14 };
    static const char *const points[] = {"chunk_send", "chunk_recv", "md_commit", "encoder"};
    const uint64_t bound_s = 420; /* below the suite's 600 s: hitting it fails */
    CKS_TEST_NEEDS_FAULT_POINTS();
    uint64_t seed = cks_test_seed(cks_test_seed_fresh()), x = seed * 2 + 1;
    cr_assert_eq(cks_test_cluster_start(&cl, NSRV, 3, 128 * 1024 * 1024, -1, NULL), 0);
    uint8_t *buf = malloc(256 * KiB), *want = malloc(256 * KiB);
    uint64_t committed[ROUNDS + 1];
    /* per committed version: the servers down when it was written and the
     * redundancy it states (DEGRADED versions, written with servers down or
     * with chunk sends killed, survive fewer further losses) */
    int was_down[ROUNDS + 1][NSRV];
    uint32_t redundancy[ROUNDS + 1];
    int ncommitted = 0, down[NSRV] = {0}, failed_writes = 0, late = 0, restores = 0;
    int beyond = 0;
    int after_faults = 0, round = 0;

    /* a version committed before any fault, then every server restarted with
     * its fault points armed: that version must survive all of it */
    cks_client_h c0 = connect_cluster();
    cr_assert_not_null(c0);
    cr_assert_eq(write_version(c0, seed, 100, buf), CKS_OK);
    memset(was_down[ncommitted], 0, sizeof(was_down[ncommitted]));
    redundancy[ncommitted]  = 2;
    committed[ncommitted++] = 100;
    cks_client_destroy(c0);
    for (int i = 0; i < NSRV; i++) {
        snprintf(cl.srv[i].faults, sizeof(cl.srv[i].faults), "%s",
                 "chunk_send:0.01,chunk_recv:0.01,md_commit:0.01,encoder:0.02");
        cr_assert_eq(cks_test_server_restart(&cl.srv[i]), 0);
    }
    uint64_t t0 = now_s();

    for (; round < ROUNDS && now_s() - t0 < bound_s; round++) {
        /* faults that fired so far (their lines are in the logs before we read them) */
        int fired = logs_count(FIRED);
        /* kill or bring back a server, keeping at most m = 2 down */
        int who = (int)(rnd(&x) % NSRV);
        if (down[who]) {
            fprintf(stderr, "round %d: server %d restarted\n", round, who);
            cr_assert_eq(cks_test_server_restart(&cl.srv[who]), 0);
            down[who] = 0;
        } else if (down_count(down) < 2 && rnd(&x) % 2) {
            fprintf(stderr, "round %d: server %d killed\n", round, who);
            cks_test_cluster_kill(&cl, (size_t)who);
            down[who] = 1;
        }
        cks_client_h c = connect_cluster();
        cr_assert_not_null(c, "round %d: no server answers", round);
        uint64_t v      = (uint64_t)round + 1;
        cks_status_t st = write_version(c, seed, v, buf), rst;
        cks_version_info_t vi;
        memcpy(was_down[ncommitted], down, sizeof(down));
        redundancy[ncommitted] = 2;
        if (st == CKS_OK) {
            cr_assert_eq(cks_version_stat(c, "f", v, &vi), CKS_OK);
            cr_assert(vi.state == CKS_VSTATE_PROTECTED || vi.state == CKS_VSTATE_DEGRADED);
            redundancy[ncommitted] = vi.redundancy;
            fprintf(stderr, "round %d: version %llu %s, redundancy %u, with %d down\n", round,
                    (unsigned long long)v, cks_vstate_string(vi.state), vi.redundancy,
                    down_count(down));
            committed[ncommitted++] = v;
        } else {
            char text[256];
            cks_client_last_error(c, text, sizeof(text));
            failed_writes++;
            fprintf(stderr, "round %d: version %llu not committed: %s (%s); %d faults fired "
                    "so far\n", round, (unsigned long long)v, cks_status_name(st), text,
                    logs_count(FIRED));
            cr_assert(st < 0 && st != CKS_INPROGRESS, "round %d: a clear error code, not %d",
                      round, (int)st);
            /* a failed write leaves the version unrestorable, or (a seal whose
             * answer was lost) whole: never part of it, never wrong bytes */
            if (restore_version(c, seed, v, buf, want, &rst)) {
                fprintf(stderr, "round %d: version %llu restores bit-exact all the same\n",
                        round, (unsigned long long)v);
                if (cks_version_stat(c, "f", v, &vi) == CKS_OK) {
                    redundancy[ncommitted] = vi.redundancy;
                }
                committed[ncommitted++] = v;
                late++;
            } else {
                cr_assert(rst < 0, "round %d: restore of version %llu: %d", round,
                          (unsigned long long)v, (int)rst);
            }
        }
        /* every committed version restores exactly while no more servers
         * are down than when it was written plus the redundancy it states
         * (<= 2 down for a PROTECTED one); past that, exactly or with a
         * clear error, never other bytes (repair, which would bring a
         * DEGRADED version back to PROTECTED, is not built) */
        for (int i = 0; i < ncommitted; i++) {
            int newly = 0;
            for (int s = 0; s < NSRV; s++) {
                newly += down[s] && !was_down[i][s];
            }
            int ok = restore_version(c, seed, committed[i], buf, want, &rst);
            if ((uint32_t)newly > redundancy[i]) {
                cr_assert(ok || rst < 0, "round %d: version %llu: %d", round,
                          (unsigned long long)committed[i], (int)rst);
                beyond++;
                continue;
            }
            cr_assert(ok, "round %d: committed version %llu (redundancy %u) lost with %d "
                      "servers down, %d of them since it was written: %s",
                      round, (unsigned long long)committed[i], redundancy[i],
                      down_count(down), newly, cks_status_name(rst));
            restores++;
            after_faults += fired > 0;
        }
        cks_client_destroy(c);
    }
    int fired = logs_count(FIRED);
    fprintf(stderr, "faults: %d rounds in %llu s; %d committed, %d writes failed cleanly "
            "(%d of them whole after all), %d exact restores, %d of them after a fault "
            "fired, %d restores past a version's redundancy; %d faults fired:",
            round, (unsigned long long)(now_s() - t0), ncommitted, failed_writes, late,
            restores, after_faults, beyond, fired);
    for (size_t p = 0; p < sizeof(points) / sizeof(points[0]); p++) {
        char line[64];
        snprintf(line, sizeof(line), "fault point '%s' fired", points[p]);
        fprintf(stderr, " %s %d", points[p], logs_count(line));
    }
    fprintf(stderr, "\n");
    cr_assert_eq(round, ROUNDS, "time bound of %llu s hit after %d of %d rounds",
                 (unsigned long long)bound_s, round, ROUNDS);
    cr_assert_gt(fired, 0, "no fault point fired in %d rounds", ROUNDS);
    cr_assert_gt(after_faults, 0, "no exact restore after a fault fired");
    free(buf);
    free(want);
}

/* ---- corrupted chunks ----------------------------------------------------------- */

#define CK (4 * KiB)  /* chunk */
#define STRIPE (4 * CK)
#define CVERSIONS 10  /* versions 1..PHASE_A restored with all up, the rest with one down */
#define PHASE_A 2
#define COBJ 6
#define CMAX (12 * STRIPE)

/* Sizes: 4 to 11 whole stripes, half of them with a tail. */
static uint64_t csize(uint64_t seed, uint64_t v, int i)
{
    uint64_t x = seed ^ (v * 131 + (uint64_t)i) * 0x9E3779B97F4A7C15ull;
    x |= 1;
    uint64_t size = (4 + rnd(&x) % 8) * STRIPE;
    return size + (rnd(&x) % 2 ? rnd(&x) % STRIPE : 0);
}

static void cname(char *key, size_t len, uint64_t v, int i)
{
    snprintf(key, len, "v%llu/obj%d", (unsigned long long)v, i);
}

/* What the CRC lines of the corrupting server show, per phase. */
typedef struct {
    int data_up, parity_up, data_down, parity_down, other;
} crc_lines_t;

static crc_lines_t crc_lines(const char *log)
{
    crc_lines_t n = {0, 0, 0, 0, 0};
    FILE *f       = fopen(log, "r");
    char line[1024];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        const char *p = strstr(line, "chunk ");
        unsigned idx, obj;
        unsigned long long stripe, v;
        if (strstr(line, "fails its CRC") == NULL || p == NULL ||
            sscanf(p, "chunk %u of stripe %llu of 'v%llu/obj%u'", &idx, &stripe, &v, &obj) !=
                4) {
            continue;
        }
        if (v < 1 || v > CVERSIONS || obj >= COBJ) {
            n.other++;
        } else if (v <= PHASE_A) {
            *(idx < 4 ? &n.data_up : &n.parity_up) += 1;
        } else {
            *(idx < 4 ? &n.data_down : &n.parity_down) += 1;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return n;
}

Test(faults, corrupted_chunks_are_decoded_around)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    uint64_t seed = cks_test_seed(cks_test_seed_fresh()), x = seed * 2 + 1;
    size_t bad  = (size_t)(rnd(&x) % NSRV);                   /* corrupts what it receives */
    size_t gone = (bad + 1 + (size_t)(rnd(&x) % (NSRV - 1))) % NSRV; /* killed for phase B */
    fprintf(stderr, "server %zu corrupts half the chunks it receives; server %zu is killed "
            "after versions 1..%d are read\n", bad, gone, PHASE_A);
    cr_assert_eq(cks_test_cluster_start(&cl, NSRV, 3, 128 * 1024 * 1024, (int)bad,
                                        "chunk_corrupt:0.5"),
                 0);
    cks_client_h c;
    cr_assert_eq(cks_test_connect_cluster(cl.map, 4, 2, CK, 20000, &c), CKS_OK);
    uint8_t *src = malloc(CMAX), *dst = NULL;
    char key[64];
    cr_assert_eq(cks_mem_alloc(c, CMAX, (void **)&dst), CKS_OK);

    /* every version commits: a corrupted chunk is only found when read */
    for (uint64_t v = 1; v <= CVERSIONS; v++) {
        cks_version_params_t vp = {.job = "cor", .version = v};
        cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
        for (int i = 0; i < COBJ; i++) {
            cks_put_params_t p = {0};
            cname(key, sizeof(key), v, i);
            cks_test_fill(src, csize(seed, v, i), seed ^ (v << 8 | (uint64_t)i));
            p.job     = "cor";
            p.version = v;
            p.key     = key;
            p.buffer  = src;
            p.size    = csize(seed, v, i);
            cr_assert_eq(cks_put(c, &p), CKS_OK, "put %s", key);
        }
        cr_assert_eq(cks_version_seal(c, "cor", v), CKS_OK, "seal %llu", (unsigned long long)v);
    }
    int corrupted = cks_test_log_count(cl.srv[bad].log, "fault point 'chunk_corrupt' fired");
    fprintf(stderr, "server %zu corrupted %d chunks\n", bad, corrupted);
    cr_assert_gt(corrupted, 0, "the corruption fault never fired");

    /* every object bit-exact: at most one corrupted chunk per stripe, and at
     * most one server down, is two erasures at most, which RS(4,2) decodes */
    for (uint64_t v = 1; v <= CVERSIONS; v++) {
        if (v == PHASE_A + 1) {
            cr_assert_eq(cks_mem_free(c, dst), CKS_OK);
            cks_client_destroy(c);
            cks_test_cluster_kill(&cl, gone);
            cr_assert_eq(cks_test_connect_cluster(cl.map, 4, 2, CK, 20000, &c), CKS_OK);
            cr_assert_eq(cks_mem_alloc(c, CMAX, (void **)&dst), CKS_OK);
        }
        cks_restore_h r;
        cr_assert_eq(cks_restore_open(c, "cor", v, &r), CKS_OK);
        for (int i = 0; i < COBJ; i++) {
            uint64_t got = 0, size = csize(seed, v, i);
            cname(key, sizeof(key), v, i);
            memset(dst, 0xA5, CMAX);
            cks_status_t st = cks_test_get_whole(r, key, dst, CMAX, &got);
            cr_assert_eq(st, CKS_OK, "%s with %s: %s", key,
                         v <= PHASE_A ? "all servers up" : "one server down",
                         cks_status_name(st));
            cks_test_fill(src, size, seed ^ (v << 8 | (uint64_t)i));
            cr_assert_eq(got, size);
            cr_assert(memcmp(dst, src, size) == 0, "%s: WRONG BYTES", key);
        }
        cks_restore_close(r);
    }

    /* the corrupted chunks were read: the server logs each one whose CRC
     * fails as it sends it (the line may follow the reply: wait, bounded) */
    crc_lines_t n = {0, 0, 0, 0, 0};
    for (int tries = 0; tries < 100; tries++) {
        n = crc_lines(cl.srv[bad].log);
        if (n.data_up > 0 && n.data_down > 0 && n.parity_down > 0) {
            break;
        }
        /* another process writes the file: no event to wait on; look again */
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "corrupted chunks read and decoded around: data %d, parity %d with all "
            "up; data %d, parity %d with server %zu down; %d other lines\n",
            n.data_up, n.parity_up, n.data_down, n.parity_down, gone, n.other);
    cr_assert_gt(n.data_up, 0, "no corrupted data chunk was read with all servers up");
    cr_assert_gt(n.data_down, 0, "no corrupted data chunk was read with a server down");
    cr_assert_gt(n.parity_down, 0, "no corrupted parity chunk was read (and decoded around) "
                 "with a server down");
    cr_assert_eq(n.other, 0);
    /* only the corrupting server ever failed a CRC */
    for (size_t i = 0; i < NSRV; i++) {
        cr_assert(i == bad || cks_test_log_count(cl.srv[i].log, "fails its CRC") == 0,
                  "server %zu (not corrupting) failed a CRC", i);
    }
    cr_assert_eq(cks_mem_free(c, dst), CKS_OK);
    cks_client_destroy(c);
    free(src);
}

/* ---- backpressure on STORED ---------------------------------------------------- */

/* A primary answers a put STORED as soon as its bytes are in, while what it
 * holds unspread is at most half of its arena's free space; past that, the
 * next put's answer waits until the backlog drains (docs/ARCHITECTURE.md,
 * Known limits). Here the primary never spreads (fault put_stall holds
 * every object it is primary of) and the arena is 256 MiB: objects of
 * 16 MiB (24 MiB extents with parity) are answered at once for the first
 * three (72 MiB held, 184 MiB free) and held from the fourth (96 MiB held,
 * 160 free): that put waits out the client's timeout and goes to the
 * object's next member. Before, the limit was an eighth of the arena
 * (32 MiB): the second put already waited, and a trainer whose primary
 * held two objects waited for the first one's encoding. */
Test(faults, a_primary_with_room_answers_stored_before_it_spreads, .timeout = 180)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    enum { X = 2, TIMEOUT_MS = 6000, NPUT = 4 };
    const uint64_t size = 16ull << 20;
    char keys[NPUT][32];
    double secs[NPUT];
    cks_status_t st[NPUT];
    uint8_t *buf = cks_test_seeded_bytes(size, 0x5707ED);

    cr_assert_eq(cks_test_cluster_start(&cl, NSRV, 3, 256ull << 20, X, "put_stall:always"),
                 0);
    cks_client_h c = NULL;
    cr_assert_eq(cks_test_connect_cluster(cl.map, 4, 2, 1ull << 20, TIMEOUT_MS, &c), CKS_OK);
    for (int i = 0, n = 0; n < NPUT && i < 10000; i++) {
        char key[32];
        snprintf(key, sizeof(key), "shard%d", i);
        if (cks_test_primary(cl.map, "bp", key, 4, 2) == X) {
            memcpy(keys[n++], key, sizeof(key));
        }
    }
    cks_version_params_t vp = {.job = "bp", .version = 1};
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    for (int n = 0; n < NPUT; n++) {
        uint64_t t0 = cks_time_ns();
        st[n]       = cks_test_put(c, "bp", 1, keys[n], buf, size);
        secs[n]     = (double)(cks_time_ns() - t0) / 1e9;
        fprintf(stderr, "put %d ('%s', primary %d): %s after %.3f s\n", n, keys[n], X,
                cks_status_name(st[n]), secs[n]);
    }
    int held = cks_test_log_count(cl.srv[X].log, "fault put_stall");
    cks_client_destroy(c);
    free(buf);
    cr_assert_eq(held, NPUT, "server %d held %d of the %d puts", X, held, NPUT);
    for (int n = 0; n < 3; n++) {
        cr_assert_eq(st[n], CKS_OK, "put %d: %s", n, cks_status_name(st[n]));
        cr_assert_lt(secs[n], TIMEOUT_MS / 2000.0,
                     "put %d waited %.3f s with room in the primary's arena", n, secs[n]);
    }
    cr_assert_geq(secs[3], (TIMEOUT_MS - 500) / 1000.0,
                  "put 3 answered after %.3f s past half the primary's free space", secs[3]);
}
