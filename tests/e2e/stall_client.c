/*
 * stall_client SERVER SECONDS JOB: a client of the standalone server at
 * SERVER ("addr:port"). It writes version 1 of JOB (one object, from
 * cks_mem_alloc() memory), then, for at most SECONDS, keeps two puts of
 * version 3 in flight (16 KiB each, cks_put_nb(), a new one each 10 ms)
 * and reads cks_client_stats(), until the client has replaced its UCX
 * worker (receive_renewals) and 50 puts were made after that. It says
 * "stalled 4 s" when the check has counted 4 s (the renewal comes at 5)
 * and "renewed" once it came, each at once (flushed): the test may stop
 * the server between the two, so that the puts in flight wait there
 * through the renewal. It prints the largest receive_stalled_s it saw, the
 * renewals, and the puts. After
 * a renewal it writes version 2 through the new worker, seals version 3,
 * and restores all three into fresh cks_mem_alloc() memory: every put
 * answered OK restores exact, one that failed (in flight when the worker
 * was replaced) is absent or exact, and every put made once the renewal
 * was seen must have been answered OK.
 *
 * Exits 0 after a renewal whose checks passed, 1 when there was none, 2
 * when the client could not be made or version 1 not written, 3 when a
 * check after the renewal failed. Run by
 * stall_exit/a_client_whose_receive_path_takes_nothing_replaces_its_worker
 * with CKS_FAULTS=sentinel_lost:always, which the library reads when it
 * loads (a test process cannot arm the library's fault points itself), and
 * without it.
 */
#include "ckstore.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIZE     (1u << 20)
#define PUT_SIZE (16u << 10)
#define NPUT_MAX 2000

static const char *job;
static char keys[NPUT_MAX][16];
static int put_status[NPUT_MAX]; /* CKS_INPROGRESS until answered */
static int after_renewal[NPUT_MAX];
static int inflight;
/* the callbacks' signal (they run on the client's progress thread) */
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv    = PTHREAD_COND_INITIALIZER;

static void signal_done(void)
{
    pthread_mutex_lock(&done_lock);
    pthread_cond_broadcast(&done_cv);
    pthread_mutex_unlock(&done_lock);
}

static int puts_ended(void)
{
    return __atomic_load_n(&inflight, __ATOMIC_ACQUIRE) == 0;
}

static int finish0_ended(void);

/* Wait until ended() holds (the callbacks signal each change), at most 30 s. */
static void wait_for(int (*ended)(void))
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&done_lock);
    while (!ended() && pthread_cond_timedwait(&done_cv, &done_lock, &until) == 0) {
    }
    pthread_mutex_unlock(&done_lock);
}

static void put_done(void *arg, cks_status_t st)
{
    __atomic_store_n(&put_status[(size_t)arg], (int)st, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&inflight, 1, __ATOMIC_ACQ_REL);
    signal_done();
}

static void fill(uint8_t *p, uint64_t seed)
{
    for (size_t i = 0; i < SIZE; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(seed >> 56);
    }
}

/* Version v of job: one object "o", the bytes of fill(v). */
static cks_status_t write_version(cks_client_h c, uint64_t v, uint8_t *buf)
{
    cks_version_params_t vp = {.job = job, .version = v};
    cks_put_params_t pp     = {.job = job, .version = v, .key = "o", .buffer = buf,
                               .size = SIZE};
    cks_status_t st         = cks_version_begin(c, &vp);
    fill(buf, v);
    st = st == CKS_OK ? cks_put(c, &pp) : st;
    return st == CKS_OK ? cks_version_seal(c, job, v) : st;
}

/* Version v restores exact into buf (fresh memory): 1, else 0 (said why). */
static int restores_exact(cks_client_h c, uint64_t v, uint8_t *buf, uint8_t *want)
{
    cks_restore_h r;
    cks_get_params_t g = {.key = "o", .buffer = buf, .buffer_size = SIZE};
    uint64_t len       = 0;
    cks_status_t st    = cks_restore_open(c, job, v, &r);
    if (st == CKS_OK) {
        st = cks_get(r, &g, &len);
        cks_restore_close(r);
    }
    fill(want, v);
    if (st != CKS_OK || len != SIZE || memcmp(buf, want, SIZE) != 0) {
        printf("after renewal: version %llu: %s, %llu bytes%s\n", (unsigned long long)v,
               cks_status_name(st), (unsigned long long)len,
               st == CKS_OK && len == SIZE ? ", WRONG BYTES" : "");
        return 0;
    }
    return 1;
}

/* The puts of version 3 (from `src`, filled for version 3): 1 when every
 * one answered OK restores exact and every failed one is absent or exact,
 * and every one made after the renewal was answered OK; else 0. */
static int puts_check(cks_client_h c, size_t n, const uint8_t *src, uint8_t *buf)
{
    size_t failed = 0, failed_after = 0, absent = 0;
    int first = CKS_OK, ok = 1;
    cks_restore_h r;
    cks_status_t st = cks_restore_open(c, job, 3, &r);
    if (st != CKS_OK) {
        printf("after renewal: version 3: %s\n", cks_status_name(st));
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        cks_get_params_t g = {.key = keys[i], .buffer = buf, .buffer_size = PUT_SIZE};
        uint64_t len       = 0;
        int put            = __atomic_load_n(&put_status[i], __ATOMIC_ACQUIRE);
        failed += put != CKS_OK;
        failed_after += put != CKS_OK && after_renewal[i];
        first = first == CKS_OK ? put : first;
        st    = cks_get(r, &g, &len);
        absent += put != CKS_OK && st == CKS_ERR_NO_SUCH_KEY;
        if ((put == CKS_OK || st != CKS_ERR_NO_SUCH_KEY) &&
            (st != CKS_OK || len != PUT_SIZE || memcmp(buf, src, PUT_SIZE) != 0)) {
            printf("after renewal: put %zu of version 3 (%s): %s, %llu bytes\n", i,
                   cks_status_name((cks_status_t)put), cks_status_name(st),
                   (unsigned long long)len);
            ok = 0;
        }
    }
    cks_restore_close(r);
    printf("puts of version 3: %zu, %zu failed (first: %s; %zu of them absent), %zu failed "
           "of those made after the renewal\n", n, failed,
           cks_status_name((cks_status_t)first), absent, failed_after);
    return ok && failed_after == 0;
}

static int finish0 = CKS_INPROGRESS; /* rank 0's finish of version 4 */

static void finish0_done(void *arg, cks_status_t st)
{
    (void)arg;
    __atomic_store_n(&finish0, (int)st, __ATOMIC_RELEASE);
    signal_done();
}

static int finish0_ended(void)
{
    return __atomic_load_n(&finish0, __ATOMIC_ACQUIRE) != CKS_INPROGRESS;
}

/* Cluster: rank 0's finish of version 4 (2 ranks) was in flight when the
 * worker was replaced; rank 1 finishes now. 1 when rank 0's finish ended
 * (whatever its answer) and, if both answered OK, both objects restore
 * exact; else 0. */
static int ranks_check(cks_client_h c, uint8_t *src, uint8_t *buf, uint8_t *want)
{
    cks_put_params_t pp = {.job = job, .version = 4, .key = "r1", .buffer = src,
                           .size = SIZE};
    fill(src, 41);
    cks_status_t st = cks_put(c, &pp);
    cks_status_t f1 = st == CKS_OK ? cks_version_finish(c, job, 4, 1) : st;
    wait_for(finish0_ended);
    int f0 = __atomic_load_n(&finish0, __ATOMIC_ACQUIRE);
    char why[256];
    cks_client_last_error(c, why, sizeof(why));
    printf("version 4: rank 0's finish (in flight at the renewal): %s; rank 1's: %s (%s)\n",
           cks_status_name((cks_status_t)f0), cks_status_name(f1), why);
    if (f0 == CKS_INPROGRESS) {
        return 0;
    }
    if (f0 != CKS_OK || f1 != CKS_OK) {
        return 1;
    }
    cks_restore_h r;
    int wrong = 0;
    st        = cks_restore_open(c, job, 4, &r);
    if (st == CKS_OK) {
        for (int k = 0; k < 2 && st == CKS_OK && !wrong; k++) {
            cks_get_params_t g = {.key = k ? "r1" : "r0", .buffer = buf, .buffer_size = SIZE};
            uint64_t len       = 0;
            fill(want, k ? 41 : 40);
            st    = cks_get(r, &g, &len);
            wrong = st == CKS_OK && (len != SIZE || memcmp(buf, want, SIZE) != 0);
        }
        cks_restore_close(r);
    }
    st = wrong ? CKS_ERR_CRC_MISMATCH : st; /* said below as WRONG BYTES */
    printf("version 4 restores: %s\n", st == CKS_OK ? "exact"
                                        : wrong ? "WRONG BYTES"
                                                : cks_status_name(st));
    return st == CKS_OK;
}

int main(int argc, char **argv)
{
    cks_client_params_t p = {0};
    cks_client_h c        = NULL;
    cks_client_stats_t st = {0};
    uint64_t most = 0, renewals = 0;
    void *src = NULL, *dst = NULL, *src3 = NULL;
    uint8_t *want = malloc(SIZE);
    if (argc != 4 || want == NULL) {
        fprintf(stderr, "usage: stall_client SERVER SECONDS JOB\n");
        return 2;
    }
    job          = argv[3];
    int cluster  = strchr(argv[1], '/') != NULL; /* a cluster map */
    p.field_mask = (cluster ? CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC
                            : CKS_CLIENT_FIELD_SERVER) |
                   CKS_CLIENT_FIELD_TIMEOUT_MS;
    p.server     = argv[1];
    p.cluster    = argv[1];
    p.ec_k       = 4;
    p.ec_m       = 2;
    p.chunk_size = 64u << 10;
    p.timeout_ms = 10000;
    if (cks_client_create(&p, &c) != CKS_OK || cks_mem_alloc(c, SIZE, &src) != CKS_OK) {
        fprintf(stderr, "stall_client: no client of %s\n", argv[1]);
        return 2;
    }
    cks_status_t ws = write_version(c, 1, src);
    if (ws != CKS_OK) {
        fprintf(stderr, "stall_client: version 1: %s\n", cks_status_name(ws));
        return 2;
    }
    cks_version_params_t vp3 = {.job = job, .version = 3};
    if (cks_mem_alloc(c, SIZE, &src3) != CKS_OK || cks_version_begin(c, &vp3) != CKS_OK) {
        fprintf(stderr, "stall_client: version 3 not begun\n");
        return 2;
    }
    fill(src3, 3);
    if (cluster) { /* rank 0 of version 4 finishes; its finish waits for rank 1 */
        cks_version_params_t vp4 = {.field_mask = CKS_VERSION_FIELD_NRANKS, .job = job,
                                    .version = 4, .nranks = 2};
        cks_put_params_t pp      = {.job = job, .version = 4, .key = "r0", .buffer = src,
                                    .size = SIZE};
        fill(src, 40);
        if (cks_version_begin(c, &vp4) != CKS_OK || cks_put(c, &pp) != CKS_OK ||
            cks_version_finish_nb(c, job, 4, 0, finish0_done, NULL) != CKS_INPROGRESS) {
            fprintf(stderr, "stall_client: version 4 not begun, written or finished\n");
            return 2;
        }
    }
    size_t n = 0, made_after = 0;
    int ticks = atoi(argv[2]) * 100;
    for (int i = 0; i < ticks && made_after < 50; i++) {
        struct timespec ts = {0, 10 * 1000000L}; /* the pace of the puts, not a wait */
        if (cks_client_stats(c, &st) == CKS_OK) {
            if (st.receive_stalled_s >= 4 && most < 4) {
                /* the renewal comes at 5: the test may stop the server now,
                 * so that the puts in flight wait there through it */
                printf("stalled 4 s\n");
                fflush(stdout);
            }
            if (st.receive_renewals > 0 && renewals == 0) {
                printf("renewed\n");
                fflush(stdout);
            }
            most     = st.receive_stalled_s > most ? st.receive_stalled_s : most;
            renewals = st.receive_renewals;
        }
        if (n < NPUT_MAX && __atomic_load_n(&inflight, __ATOMIC_ACQUIRE) < 2) {
            cks_put_params_t pp = {.job = job, .version = 3, .key = keys[n], .buffer = src3,
                                   .size = PUT_SIZE};
            snprintf(keys[n], sizeof(keys[n]), "p%zu", n);
            put_status[n]    = CKS_INPROGRESS;
            after_renewal[n] = renewals > 0;
            made_after += renewals > 0;
            __atomic_add_fetch(&inflight, 1, __ATOMIC_ACQ_REL);
            cks_status_t ps = cks_put_nb(c, &pp, put_done, (void *)n);
            if (ps != CKS_INPROGRESS) { /* refused at once: no callback */
                put_done((void *)n, ps);
            }
            n++;
        }
        nanosleep(&ts, NULL);
    }
    wait_for(puts_ended); /* the client's timeout (10 s) ends each */
    printf("receive_stalled_s %llu\nreceive_renewals %llu\n", (unsigned long long)most,
           (unsigned long long)renewals);
    int rc = renewals > 0 ? 0 : 1;
    if (renewals > 0) {
        ws = write_version(c, 2, src);
        cks_status_t s3 = cks_version_seal(c, job, 3);
        if (ws != CKS_OK || s3 != CKS_OK || cks_mem_alloc(c, SIZE, &dst) != CKS_OK) {
            printf("after renewal: version 2: %s, seal of version 3: %s\n",
                   cks_status_name(ws), cks_status_name(s3));
            rc = 3;
        } else if (!restores_exact(c, 1, dst, want) || !restores_exact(c, 2, dst, want) ||
                   !puts_check(c, n, src3, dst) ||
                   (cluster && !ranks_check(c, src, dst, want))) {
            rc = 3;
        } else {
            printf("after renewal: version 2 written, versions 1 and 2 restore exact\n");
        }
    }
    cks_mem_free(c, dst);
    cks_mem_free(c, src3);
    cks_mem_free(c, src);
    cks_client_destroy(c);
    free(want);
    return rc;
}
