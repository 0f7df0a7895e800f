/*
 * Randomized fault injection on a 6-server RS(4,2) cluster of real
 * processes: write-path fault points fire with a probability on every server
 * (chunk sends and receipts, metadata commits, the encoder) while up to two
 * servers are killed and restarted at random moments. Rounds are bounded in
 * number and time; the seed is printed. What must hold: a write either
 * commits or fails with a clear error; a committed version restores bit-exact
 * whenever at most m = 2 servers are down, and is never lost; a restore never
 * returns wrong bytes. A second test corrupts stored chunks at random and
 * checks that every restore is exact or a clear error.
 */
#include "ckstore.h"
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

static cks_client_h connect_cluster(void)
{
    cks_client_h c;
    return cks_test_connect_cluster(cl.map, 4, 2, 16 * KiB, 10000, &c) == CKS_OK ? c : NULL;
}

static uint64_t obj_size(uint64_t version, int i)
{
    return (version * 7919 + (uint64_t)i * 104729) % (200 * KiB) + 1;
}

static void obj_bytes(uint8_t *b, uint64_t version, int i)
{
    cks_test_fill(b, obj_size(version, i), version * 1000 + (uint64_t)i);
}

/* Write a version; CKS_OK only if it committed. */
static cks_status_t write_version(cks_client_h c, uint64_t v, uint8_t *buf)
{
    cks_version_params_t vp = {.job = "f", .version = v};
    char key[32];
    cks_status_t st = cks_version_begin(c, &vp);
    for (int i = 0; st == CKS_OK && i < NOBJ; i++) {
        cks_put_params_t p = {0};
        snprintf(key, sizeof(key), "obj%d", i);
        obj_bytes(buf, v, i);
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

/* Restore a version: 1 exact, 0 a clear error; wrong bytes fail the test. */
static int restore_version(cks_client_h c, uint64_t v, uint8_t *buf, uint8_t *want,
                           cks_status_t *st_p)
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
            obj_bytes(want, v, i);
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

Test(faults, random_faults_and_kills)
{
    enum { ROUNDS = 14 };
    uint64_t seed = cks_test_seed((uint64_t)time(NULL)), x = seed | 1;
    cr_assert_eq(cks_test_cluster_start(&cl, NSRV, 3, 128 * 1024 * 1024, -1, NULL), 0);
    uint8_t *buf = malloc(256 * KiB), *want = malloc(256 * KiB);
    uint64_t committed[ROUNDS + 1];
    int ncommitted = 0, down[NSRV] = {0}, failed_writes = 0, restores = 0;

    /* a version committed before any fault, then every server restarted with
     * its fault points armed: that version must survive all of it */
    cks_client_h c0 = connect_cluster();
    cr_assert_not_null(c0);
    cr_assert_eq(write_version(c0, 100, buf), CKS_OK);
    committed[ncommitted++] = 100;
    cks_client_destroy(c0);
    for (int i = 0; i < NSRV; i++) {
        snprintf(cl.srv[i].faults, sizeof(cl.srv[i].faults), "%s",
                 "chunk_send:0.004,chunk_recv:0.004,md_commit:0.005,encoder:0.01");
        cr_assert_eq(cks_test_server_restart(&cl.srv[i]), 0);
    }
    time_t until = time(NULL) + 300;

    for (int round = 0; round < ROUNDS && time(NULL) < until; round++) {
        /* kill or bring back a server, keeping at most m = 2 down */
        int who = (int)(rnd(&x) % NSRV);
        if (down[who]) {
            cr_assert_eq(cks_test_server_restart(&cl.srv[who]), 0);
            down[who] = 0;
        } else if (down_count(down) < 2 && rnd(&x) % 2) {
            cks_test_cluster_kill(&cl, (size_t)who);
            down[who] = 1;
        }
        cks_client_h c = connect_cluster();
        cr_assert_not_null(c, "round %d: no server answers", round);
        uint64_t v      = (uint64_t)round + 1;
        cks_status_t st = write_version(c, v, buf);
        if (st == CKS_OK) {
            committed[ncommitted++] = v;
        } else {
            failed_writes++;
            fprintf(stderr, "round %d: version %llu not committed: %s\n", round,
                    (unsigned long long)v, cks_status_name(st));
            cr_assert(st < 0, "a clear error code");
        }
        /* every committed version restores exactly while <= 2 are down */
        for (int i = 0; i < ncommitted; i++) {
            cks_status_t rst;
            int ok = restore_version(c, committed[i], buf, want, &rst);
            cr_assert(ok, "round %d: committed version %llu lost with %d servers down: %s",
                      round, (unsigned long long)committed[i], down_count(down),
                      cks_status_name(rst));
            restores++;
        }
        cks_client_destroy(c);
    }
    fprintf(stderr, "faults: %d committed, %d writes failed cleanly, %d exact restores\n",
            ncommitted, failed_writes, restores);
    cr_assert_gt(restores, 0, "nothing was restored");
    free(buf);
    free(want);
}

Test(faults, corrupted_chunks_exact_or_error)
{
    uint64_t seed = cks_test_seed((uint64_t)time(NULL));
    (void)seed;
    cr_assert_eq(cks_test_cluster_start(&cl, NSRV, 3, 128 * 1024 * 1024, CKS_TEST_ALL,
                                        "chunk_corrupt:0.2,crc_check:0.05"),
                 0);
    uint8_t *buf = malloc(256 * KiB), *want = malloc(256 * KiB);
    cks_client_h c = connect_cluster();
    int exact = 0, errors = 0;
    for (uint64_t v = 1; v <= 6; v++) {
        if (write_version(c, v, buf) != CKS_OK) {
            continue;
        }
        cks_status_t st;
        if (restore_version(c, v, buf, want, &st)) {
            exact++;
        } else {
            cr_assert(st == CKS_ERR_DATA_LOST || st == CKS_ERR_CRC_MISMATCH,
                      "a clear error: %s", cks_status_name(st));
            errors++;
        }
    }
    fprintf(stderr, "corruption: %d exact restores, %d clear errors\n", exact, errors);
    cr_assert_gt(exact + errors, 0);
    cks_client_destroy(c);
    free(buf);
    free(want);
}
