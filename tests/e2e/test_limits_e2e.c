/*
 * End-to-end limits: a real ckstore-server (127.0.0.1, port picked at run
 * time, stopped by pid) against misbehaving clients: one that opens a
 * thousand connections, one that floods requests, and one that sends
 * requests and then stops reading its replies (a child process it stops
 * with SIGSTOP and kills by pid). Each time, the server refuses or drops the
 * abuser with a log line, its memory stays bounded, and a well-behaved
 * client keeps being served, bit-exact. A stopped client whose shared-memory
 * FIFO is full of replies costs the server no spinning core, and gets every
 * reply once continued. With a secret, connections that never authenticate
 * are closed after the deadline, and clients that fill the connection cap
 * leave room for the servers of the cluster.
 */
#include "ckstore.h"
#include "cks_test.h"
#include "cks_test_raw.h"
#include "cks_tp.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)
#define OBJ_SIZE (8 * MiB)

/* How much a server's RSS may grow under abuse. AddressSanitizer holds up to
 * 256 MiB of freed memory in its quarantine by design: its builds get that
 * much more room (still a bound). */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_GROWTH_KIB (64 * 1024 + 256 * 1024)
#else
#define RSS_GROWTH_KIB (64 * 1024)
#endif

/* The good client's request timeout: a request it makes that the server does
 * not answer within it fails. A bound for liveness, generous for a sanitized
 * build on a loaded machine; far below the suite's timeout. */
#define GOOD_TIMEOUT_MS 20000

static cks_test_server_t srv;
static cks_client_h good;
static uint8_t *obj;
static pid_t reader_pid; /* a reader child not yet reaped (0: none) */

static void teardown(void)
{
    if (reader_pid > 0) { /* a test failed with its reader stopped: never leave it */
        kill(reader_pid, SIGKILL);
        waitpid(reader_pid, NULL, 0);
        reader_pid = 0;
    }
    cks_client_destroy(good);
    good = NULL;
    cks_test_server_cleanup(&srv);
    cks_test_set_server_flags(NULL);
    free(obj);
    obj = NULL;
}

TestSuite(limits, .fini = teardown, .timeout = 300);

/* Start a server with these flags. */
static void start_server(const char *flags)
{
    cks_test_set_server_flags(flags);
    cr_assert_eq(cks_test_server_start(&srv, 64 * MiB), 0);
}

/* Connect the good client, store one version with one 8 MiB object. */
static void start_good(void)
{
    cks_client_params_t p  = {0};
    cks_version_params_t v = {0};
    cks_put_params_t put   = {0};

    p.field_mask = CKS_CLIENT_FIELD_SERVER | CKS_CLIENT_FIELD_TIMEOUT_MS;
    p.server     = srv.addr;
    p.timeout_ms = GOOD_TIMEOUT_MS;
    cr_assert_eq(cks_client_create(&p, &good), CKS_OK);
    obj = malloc(OBJ_SIZE);
    cks_test_fill(obj, OBJ_SIZE, cks_test_seed(41));
    v.job     = "job";
    v.version = 1;
    cr_assert_eq(cks_version_begin(good, &v), CKS_OK);
    put.job     = "job";
    put.version = 1;
    put.key     = "big";
    put.buffer  = obj;
    put.size    = OBJ_SIZE;
    cr_assert_eq(cks_put(good, &put), CKS_OK);
    cr_assert_eq(cks_version_seal(good, "job", 1), CKS_OK);
}

static void start(const char *flags)
{
    start_server(flags);
    start_good();
}

/* When the good client is not served: is the server alive, and what did it
 * last log? (stderr) */
static void server_report(const char *when)
{
    int wst;
    char buf[2048];
    if (srv.pid > 0 && waitpid(srv.pid, &wst, WNOHANG) == srv.pid) {
        srv.pid = 0; /* reaped here: the cleanup must not signal its pid */
        if (WIFSIGNALED(wst)) {
            fprintf(stderr, "%s: the server was killed by signal %d\n", when, WTERMSIG(wst));
        } else {
            fprintf(stderr, "%s: the server exited with %d\n", when, WEXITSTATUS(wst));
        }
    } else {
        fprintf(stderr, "%s: the server is running\n", when);
    }
    FILE *f = fopen(srv.log, "r");
    if (f == NULL) {
        return;
    }
    if (fseek(f, -(long)(sizeof(buf) - 1), SEEK_END) != 0) {
        rewind(f);
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    fprintf(stderr, "%s: the end of its log:\n%s\n", when, buf);
}

/* The good client reads the object back, bit-exact. Each of its requests
 * must be answered within its request timeout (GOOD_TIMEOUT_MS): a server
 * that stalls it fails the call with CKS_ERR_TIMEOUT, so this is a bounded
 * check that it is served, not a speed figure (the time is printed). */
static void good_client_served(const char *when)
{
    cks_restore_h r;
    cks_get_params_t g = {0};
    uint8_t *dst       = malloc(OBJ_SIZE);
    uint64_t t0        = cks_time_ns();
    cks_status_t st;
    cr_assert_not_null(dst);
    st = cks_restore_open(good, "job", 1, &r);
    if (st != CKS_OK) {
        server_report(when);
    }
    cr_assert_eq(st, CKS_OK, "%s: the good client could not open the version: %s", when,
                 cks_status_string(st));
    g.key         = "big";
    g.buffer      = dst;
    g.buffer_size = OBJ_SIZE;
    st            = cks_get(r, &g, NULL);
    if (st != CKS_OK) {
        server_report(when);
    }
    cr_assert_eq(st, CKS_OK, "%s: the good client was not served: %s", when,
                 cks_status_string(st));
    cr_assert(memcmp(dst, obj, OBJ_SIZE) == 0, "%s: bytes differ", when);
    cks_restore_close(r);
    free(dst);
    printf("good client served %s in %llu ms\n", when,
           (unsigned long long)((cks_time_ns() - t0) / 1000000));
}

/* CPU seconds (user + system) that process pid has used, or -1. */
static double cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long ut = 0, st = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n]  = '\0';
    char *p = strrchr(buf, ')'); /* the name may hold spaces: fields follow it */
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                            &st) != 2) {
        return -1;
    }
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Nanoseconds that the threads of process pid have spent running and
 * waiting on a run queue for a CPU (/proc/PID/task/TID/schedstat): 0 or -1. */
static int sched_ns(pid_t pid, uint64_t *run_p, uint64_t *wait_p)
{
    char path[64];
    uint64_t run = 0, wait = 0;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL) {
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char file[96];
        unsigned long long r, w;
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(file, sizeof(file), "/proc/%d/task/%.24s/schedstat", (int)pid, e->d_name);
        FILE *f = fopen(file, "r");
        if (f == NULL) {
            continue; /* the thread has just ended */
        }
        if (fscanf(f, "%llu %llu", &r, &w) == 2) {
            run += r;
            wait += w;
        }
        fclose(f);
    }
    closedir(d);
    *run_p  = run;
    *wait_p = wait;
    return run > 0 ? 0 : -1;
}

/* What a process cost over a stretch of wall time, as shares of one core:
 * `want`, the time it ran or waited on a run queue for a CPU (it did not
 * sleep), and `cpu`, the time it ran. A process that spins wants the whole
 * of every stretch however loaded the machine is (there it waits longer and
 * runs less, so its CPU time alone can look small); one that sleeps between
 * short runs wants a fraction (more on a loaded machine, where each wake-up
 * waits for a CPU) and runs a few percent. */
typedef struct {
    double want, cpu;
    unsigned end_ms; /* when the stretch ended, from the start of the look */
} core_share_t;

/* Samples process pid every 100 ms, for at most look_ms, looking for a
 * stretch of at least window_ms in which it wanted less than max_want of a
 * core and ran less than max_cpu; stops at the first. The stretch starts
 * wherever the process's work ends, not at a guessed time, and is measured
 * against the wall time it took: a slow or loaded machine moves it later,
 * but does not fail it. *share_p: that stretch, or, when there was none,
 * the one that wanted least. Returns 0, or -1 when it cannot read pid's
 * figures. */
static int core_share_quietest(pid_t pid, int window_ms, int look_ms, double max_want,
                               double max_cpu, core_share_t *share_p)
{
    enum { SAMPLE_MS = 100, MAX_SAMPLES = 512 };
    static uint64_t t[MAX_SAMPLES], run[MAX_SAMPLES], want[MAX_SAMPLES];
    const uint64_t window = (uint64_t)window_ms * 1000000ull;
    const uint64_t end    = cks_time_ns() + (uint64_t)look_ms * 1000000ull;
    core_share_t best     = {2, 2, 0};
    size_t j              = 0;

    for (size_t n = 0; n < MAX_SAMPLES; n++) {
        uint64_t wait;
        t[n] = cks_time_ns();
        if (sched_ns(pid, &run[n], &wait) != 0) {
            return -1;
        }
        want[n] = run[n] + wait;
        /* j: the latest sample at least a window before this one */
        while (j + 1 < n && t[n] - t[j + 1] >= window) {
            j++;
        }
        if (n > 0 && t[n] - t[j] >= window) {
            double span = (double)(t[n] - t[j]);
            core_share_t q = {(double)(want[n] - want[j]) / span,
                              (double)(run[n] - run[j]) / span,
                              (unsigned)((t[n] - t[0]) / 1000000)};
            if (q.want < best.want) {
                best = q;
            }
            if (q.want < max_want && q.cpu < max_cpu) {
                best = q;
                break;
            }
        }
        if (t[n] >= end) {
            break;
        }
        usleep(SAMPLE_MS * 1000);
    }
    *share_p = best;
    return 0;
}

/* 1 when a thread of pid is asleep in nanosleep() or clock_nanosleep() now
 * (its /proc/PID/task/TID/syscall names the call it is blocked in). In
 * ckstore-server the one caller is the transport's back-off, which sleeps
 * only while sends wait for room in a peer's FIFO: seeing it shows that the
 * server really has replies queued for a reader that does not read them. */
static int backing_off(pid_t pid)
{
    char path[96], line[64];
    int seen = 0;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL) {
        return 0;
    }
    struct dirent *e;
    while (!seen && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/syscall", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            continue;
        }
        if (fgets(line, sizeof(line), f) != NULL) {
            long nr = strtol(line, NULL, 10);
            seen    = line[0] >= '0' && line[0] <= '9' && (nr == 35 || nr == 230);
        }
        fclose(f);
    }
    closedir(d);
    return seen;
}

/* Wait up to ms for backing_off(pid), looking every 5 ms. */
static int backing_off_within(pid_t pid, int ms)
{
    uint64_t until = cks_time_ns() + (uint64_t)ms * 1000000ull;
    do {
        if (backing_off(pid)) {
            return 1;
        }
        usleep(5 * 1000);
    } while (cks_time_ns() < until);
    return 0;
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = strtol(line + 6, NULL, 10);
        }
    }
    fclose(f);
    return kib;
}

/* ---- a raw transport client ----------------------------------------------- */

typedef struct {
    unsigned replies, sent, lost;
} raw_t;

static void raw_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                       const cks_msg_any_t *body, cks_tp_data_t *data)
{
    ((raw_t *)arg)->replies++; /* payloads are not taken */
}

static void raw_on_err(void *arg, cks_tp_conn_h conn, cks_status_t status)
{
    ((raw_t *)arg)->lost++;
}

static void raw_sent(void *arg, cks_status_t status)
{
    ((raw_t *)arg)->sent++;
}

static cks_tp_worker_h raw_worker(raw_t *r)
{
    cks_tp_worker_params_t wp = {.name = "abuser", .on_msg = raw_on_msg,
                                 .on_conn_err = raw_on_err, .arg = r};
    cks_tp_worker_h w;
    cr_assert_eq(cks_tp_worker_create(&wp, &w), CKS_OK);
    return w;
}

static void raw_progress(cks_tp_worker_h w, int ms)
{
    uint64_t until = cks_time_ns() + (uint64_t)ms * 1000000ull;
    while (cks_time_ns() < until) {
        cks_tp_worker_wait(w, 10);
    }
}

/* ---- tests -------------------------------------------------------------------- */

Test(limits, a_thousand_connections_are_refused_past_the_limit)
{
    struct rlimit rl;
    raw_t r = {0};
    enum { N = 1000 };
    static cks_tp_conn_h conns[N];

    start("--max-conns 32");
    long rss0 = rss_kib(srv.pid);
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
    setrlimit(RLIMIT_NOFILE, &rl);

    cks_tp_worker_h w = raw_worker(&r);
    cks_msg_hello_t hello = {cks_wire_cstr("abuser"), cks_wire_cstr(NULL),
                             cks_wire_cstr(NULL), cks_wire_cstr(NULL)};
    size_t opened = 0;
    for (size_t i = 0; i < N; i++) {
        if (cks_tp_conn_connect(w, "127.0.0.1", srv.port, &conns[i]) != CKS_OK) {
            conns[i] = NULL;
            continue;
        }
        opened++;
        cks_tp_send(conns[i], CKS_MSG_HELLO, 0, i + 1, &hello, NULL, 0, CKS_MEM_HOST, NULL,
                    raw_sent, &r);
        if (i % 50 == 49) {
            raw_progress(w, 20);
        }
    }
    /* every connection is answered or refused (bounded: 30 s) */
    uint64_t until = cks_time_ns() + 30ull * 1000000000ull;
    while (r.replies + r.lost < opened && cks_time_ns() < until) {
        cks_tp_worker_wait(w, 10);
    }
    printf("opened %zu connections: %u answered, %u refused or lost\n", opened, r.replies,
           r.lost);
    /* one connection is the good client's */
    cr_assert(r.replies <= 31, "%u connections were served (limit 32)", r.replies);
    cr_assert(r.replies >= 1, "no connection was served at all");
    cr_assert(cks_test_log_has(srv.log, "refused: ", 5000), "no log line for refused connections");
    good_client_served("past the connection limit");

    for (size_t i = 0; i < N; i++) {
        if (conns[i] != NULL) {
            cks_tp_conn_put(conns[i]);
        }
    }
    cks_tp_worker_destroy(w);
    /* closed connections free their slots: a new client gets in */
    cks_client_h again = NULL;
    cks_client_params_t p = {0};
    p.field_mask = CKS_CLIENT_FIELD_SERVER;
    p.server     = srv.addr;
    until        = cks_time_ns() + 10ull * 1000000000ull;
    while (cks_client_create(&p, &again) != CKS_OK && cks_time_ns() < until) {
        usleep(200000);
    }
    cr_assert_not_null(again, "the server did not accept connections again");
    cks_client_destroy(again);
    long rss1 = rss_kib(srv.pid);
    printf("server RSS %ld -> %ld KiB\n", rss0, rss1);
    cr_assert(rss1 - rss0 < RSS_GROWTH_KIB, "server memory grew by %ld KiB", rss1 - rss0);
}

Test(limits, a_flood_of_requests_does_not_stall_others)
{
    raw_t r = {0};
    cks_tp_conn_h conn;
    enum { N = 20000 };

    start(NULL);
    long rss0 = rss_kib(srv.pid);
    cks_tp_worker_h w = raw_worker(&r);
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", srv.port, &conn), CKS_OK);
    cks_msg_version_stat_t vs = {cks_wire_cstr("job"), 1, 0};
    for (unsigned i = 0; i < N; i++) {
        if (cks_tp_send(conn, CKS_MSG_VERSION_STAT, 0, i + 1, &vs, NULL, 0, CKS_MEM_HOST,
                        NULL, raw_sent, &r) != CKS_INPROGRESS) {
            cr_assert_eq(r.lost, 1, "a send failed on a live connection");
            break; /* the server dropped the flooder (checked below) */
        }
        if (i % 100 == 99) {
            cks_tp_worker_progress(w); /* it reads what came, but never waits */
        }
    }
    /* the others are served while the flood is being answered */
    good_client_served("during the flood");
    uint64_t until = cks_time_ns() + 30ull * 1000000000ull;
    while (r.replies < N && cks_time_ns() < until) {
        cks_tp_worker_wait(w, 10);
    }
    printf("flood: %u requests sent, %u answered, %u connections lost\n", r.sent, r.replies,
           r.lost);
    /* every request is answered, or - when its replies piled up past the
     * server's limit (4096) because it reads them only now and then - the
     * flooder is disconnected with a log line; never anything in between */
    if (r.replies != N) {
        cr_assert_eq(r.lost, 1, "%u of %u answered and still connected", r.replies, N);
        cr_assert(cks_test_log_has(srv.log, "does not read its replies", 5000));
    }
    long rss1 = rss_kib(srv.pid);
    printf("server RSS %ld -> %ld KiB\n", rss0, rss1);
    cr_assert(rss1 - rss0 < RSS_GROWTH_KIB, "server memory grew by %ld KiB", rss1 - rss0);
    cks_tp_conn_put(conn);
    cks_tp_worker_destroy(w);
    good_client_served("after the flood");
}

/* A child process (forked before this process uses UCX, which does not
 * survive a fork) waits for the word, connects (a HELLO answered: the
 * endpoint is wired up), asks for `len` bytes of the 8 MiB object n times
 * without progressing its worker again (so it reads no reply), and stops
 * itself. With `then_read`, it connects as a client does (the handshake:
 * its replies come over shared memory), and once continued it reads its
 * replies (bounded: 20 s) and exits 0 when all n came, 2 otherwise. */
typedef struct {
    pid_t pid;
    int go; /* write end of its pipe */
} reader_t;

static reader_t reader_fork_ex(unsigned n, uint64_t len, int then_read)
{
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        raw_t r = {0};
        char c;
        cks_tp_conn_h conn;
        close(pfd[1]);
        if (read(pfd[0], &c, 1) != 1) { /* the parent died or gave up */
            _exit(1);
        }
        cks_tp_worker_h w = raw_worker(&r);
        if (cks_tp_conn_connect(w, "127.0.0.1", srv.port, &conn) != CKS_OK) {
            _exit(1);
        }
        uint64_t until = cks_time_ns() + 10ull * 1000000000ull;
        if (then_read) {
            /* the whole handshake, as a client does: the replies then come
             * over the data endpoint (shared memory on this host) */
            if (cks_tp_conn_handshake(conn, "reader", NULL, 10000, raw_sent, &r) !=
                CKS_INPROGRESS) {
                _exit(1);
            }
            while ((r.sent == 0 || !cks_tp_conn_local(conn)) && cks_time_ns() < until) {
                cks_tp_worker_wait(w, 10);
            }
            if (!cks_tp_conn_local(conn)) {
                _exit(3);
            }
            /* one request answered over it: the data endpoint is wired up,
             * so that the burst below goes out without our progress */
            cks_msg_get_t g1 = {cks_wire_cstr("job"), 1, cks_wire_cstr("big"), 0, len};
            cks_tp_send(conn, CKS_MSG_GET, 0, 1, &g1, NULL, 0, CKS_MEM_HOST, NULL, NULL,
                        NULL);
            while (r.replies == 0 && cks_time_ns() < until) {
                cks_tp_worker_wait(w, 10);
            }
        } else {
            cks_msg_hello_t hello = {cks_wire_cstr("reader"), cks_wire_cstr(NULL),
                                     cks_wire_cstr(NULL), cks_wire_cstr(NULL)};
            cks_tp_send(conn, CKS_MSG_HELLO, 0, 1, &hello, NULL, 0, CKS_MEM_HOST, NULL, NULL,
                        NULL);
            while (r.replies == 0 && cks_time_ns() < until) {
                cks_tp_worker_wait(w, 10);
            }
        }
        unsigned base = r.replies;
        cks_msg_get_t g = {cks_wire_cstr("job"), 1, cks_wire_cstr("big"), 0, len};
        for (unsigned i = 0; i < n; i++) {
            cks_tp_send(conn, CKS_MSG_GET, 0, i + 2, &g, NULL, 0, CKS_MEM_HOST, NULL, NULL,
                        NULL);
            if (then_read && i % 8 == 7) {
                /* the server takes these and answers into our FIFO, which
                 * we do not drain: its room for our next requests does not
                 * need our progress as long as it is never full (a request
                 * that finds it full waits for our progress, and so does
                 * every later one), and its replies soon have no room. 8
                 * per 2 ms leaves a sanitized server time to take them. */
                usleep(2 * 1000);
            }
        }
        raise(SIGSTOP);
        if (!then_read) {
            _exit(0);
        }
        until = cks_time_ns() + 20ull * 1000000000ull;
        while (r.replies - base < n && r.lost == 0 && cks_time_ns() < until) {
            cks_tp_worker_wait(w, 10);
        }
        _exit(r.replies - base == n ? 0 : 2);
    }
    close(pfd[0]);
    reader_pid = pid;
    return (reader_t){pid, pfd[1]};
}

static reader_t reader_fork(unsigned n)
{
    return reader_fork_ex(n, OBJ_SIZE, 0);
}

/* Let it go; wait (bounded by its own 10 s) until it has stopped. */
static void reader_go(reader_t *rd)
{
    int st;
    cr_assert_eq(write(rd->go, "g", 1), 1);
    close(rd->go);
    cr_assert_eq(waitpid(rd->pid, &st, WUNTRACED), rd->pid);
    cr_assert(WIFSTOPPED(st), "the reader did not stop");
}

static void kill_reader(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    reader_pid = 0;
}

Test(limits, a_client_that_stops_reading_is_disconnected_after_the_reply_timeout)
{
    start_server("--reply-timeout 2");
    reader_t rd = reader_fork(40);
    start_good();
    long rss0 = rss_kib(srv.pid);
    reader_go(&rd);
    pid_t pid = rd.pid;
    good_client_served("while the reader's replies hang");
    cr_assert(cks_test_log_has(srv.log, "took none of its", 10000),
              "no log line about the stalled reader");
    good_client_served("after the reader was dropped");
    long rss1 = rss_kib(srv.pid);
    printf("server RSS %ld -> %ld KiB\n", rss0, rss1);
    cr_assert(rss1 - rss0 < RSS_GROWTH_KIB, "server memory grew by %ld KiB", rss1 - rss0);
    kill_reader(pid);
}

Test(limits, a_client_past_its_pending_replies_is_disconnected)
{
    start_server("--max-pending 16");
    reader_t rd = reader_fork(200);
    start_good();
    reader_go(&rd);
    pid_t pid = rd.pid;
    cr_assert(cks_test_log_has(srv.log, "does not read its replies", 10000),
              "no log line about the overrun");
    good_client_served("after the reader was dropped");
    kill_reader(pid);
}

/* A client that has a thousand small replies coming and stops (SIGSTOP)
 * fills its shared-memory receive FIFO: the server's sends then wait for room,
 * and UCX raises no event when there is some. The server must neither spin
 * on them (a stopped client would cost a core for the whole reply timeout)
 * nor lose them: it serves a good client meanwhile; then, once it has done
 * what it can, it sleeps for most of a stretch of 2 s while the reader is
 * still stopped (spinning, it never sleeps: it wants the whole core, on a
 * loaded machine too; backing off, it wants a fraction of one, about a
 * fifth on a loaded machine, and runs a few percent); and once continued,
 * the reader gets every reply. */
#define QUIET_WINDOW_MS 2000
#define QUIET_LOOK_MS   20000 /* well below the reply timeout (60 s by default) */
#define QUIET_MAX_WANT  0.50  /* of a core: asleep half the stretch at least */
#define QUIET_MAX_CPU   0.25

#define QUEUE_READERS 6
#define QUEUE_SEEN_MS 5000

/* A server, the good client, and a reader that has n small replies coming
 * and stopped: its pid, and in *queued_p whether its replies really wait for
 * room in its FIFO. On a loaded machine a reader can stop before the server
 * has taken enough of its requests to fill it, and an idle server proves
 * nothing; that shows as the transport's back-off sleep, and a reader that
 * did not get there is killed and another one tries (QUEUE_READERS in all). */
static pid_t stopped_reader_with_replies_queued(unsigned n, int *queued_p)
{
    reader_t rd[QUEUE_READERS];
    pid_t pid  = 0;
    int queued = 0, used = 0;
    start_server(NULL);
    /* readers are forked before this process has a client (UCX state must
     * not cross fork()); each waits for its go */
    for (int i = 0; i < QUEUE_READERS; i++) {
        rd[i] = reader_fork_ex(n, 64, 1);
    }
    reader_pid = 0; /* the one let go is tracked below; the others exit at
                       the end of their go pipe */
    start_good();
    for (int i = 0; i < QUEUE_READERS && !queued; i++) {
        if (pid > 0) {
            kill_reader(pid);
        }
        reader_go(&rd[i]);
        pid        = rd[i].pid;
        reader_pid = pid;
        used       = i + 1;
        /* its request comes after all the reader's on the server's one
         * progress thread: once answered, the server has taken every request
         * the reader sent, and the replies that found no room wait */
        good_client_served("while the reader is stopped");
        queued = backing_off_within(srv.pid, QUEUE_SEEN_MS);
        printf("reader %d: replies %s\n", i + 1,
               queued ? "wait for room (the server backs off)" : "did not wait for room");
    }
    /* the readers never let go exit at the end of their go pipe; a later
     * reader holds the write ends of the earlier ones' pipes, so every end
     * is closed before any is waited for */
    for (int i = used; i < QUEUE_READERS; i++) {
        close(rd[i].go);
    }
    for (int i = used; i < QUEUE_READERS; i++) {
        waitpid(rd[i].pid, NULL, 0);
    }
    *queued_p = queued;
    return pid;
}

Test(limits, a_stopped_client_with_replies_queued_costs_the_server_no_spinning_core)
{
    const unsigned n = 1000;
    core_share_t q = {2, 2, 0};
    int queued     = 0;
    pid_t pid      = stopped_reader_with_replies_queued(n, &queued);
    double c0 = cpu_s(srv.pid);
    cr_assert_eq(core_share_quietest(srv.pid, QUIET_WINDOW_MS, QUIET_LOOK_MS, QUIET_MAX_WANT,
                                     QUIET_MAX_CPU, &q),
                 0, "cannot read the server's scheduler figures");
    double c1 = cpu_s(srv.pid);
    printf("server with a stopped reader: wanted %.0f %% of a core (ran %.0f %%) over %d ms"
           " ending %u ms in; %.2f s of CPU in all\n",
           q.want * 100, q.cpu * 100, QUIET_WINDOW_MS, q.end_ms, c1 - c0);
    cr_assert(q.want < QUIET_MAX_WANT && q.cpu < QUIET_MAX_CPU,
              "the server wanted %.0f %% of a core (ran %.0f %%) over its quietest %d ms in"
              " %d ms with a stopped client",
              q.want * 100, q.cpu * 100, QUIET_WINDOW_MS, QUIET_LOOK_MS);
    cr_assert(queued,
              "no reader of %d got replies queued: the server never slept in its back-off "
              "within %d ms of serving the good client, so nothing was tested",
              QUEUE_READERS, QUEUE_SEEN_MS);
    int st;
    cr_assert_eq(kill(pid, SIGCONT), 0);
    cr_assert_eq(waitpid(pid, &st, 0), pid); /* bounded by its own 20 s */
    reader_pid = 0;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the reader did not get its %u replies once continued (status %d)", n, st);
}

/* A server whose replies wait for room in a stopped client's FIFO still
 * stops on SIGTERM, within seconds: its loop spins (backing off) while the
 * sends wait, and must read its signals meanwhile. */
Test(limits, a_server_with_replies_queued_to_a_stopped_client_stops_on_sigterm)
{
    enum { STOP_MS = 10000 };
    int queued = 0, st = 0;
    pid_t pid  = stopped_reader_with_replies_queued(1000, &queued);
    cr_assert(queued, "no reader of %d got replies queued: nothing was tested", QUEUE_READERS);
    cr_assert_eq(kill(srv.pid, SIGTERM), 0);
    uint64_t until = cks_time_ns() + (uint64_t)STOP_MS * 1000000ull;
    pid_t got      = 0;
    while ((got = waitpid(srv.pid, &st, WNOHANG)) == 0 && cks_time_ns() < until) {
        usleep(10 * 1000);
    }
    if (got == srv.pid) {
        srv.pid = 0; /* reaped here: the cleanup must not signal its pid */
    }
    kill_reader(pid);
    cr_assert_gt(got, 0, "the server did not stop within %d ms of SIGTERM with replies queued",
                 STOP_MS);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the server stopped with status %d", st);
}

/* ---- authentication deadline and room for peers (#15 item 10) ------------- */

/* A secret file of this test, mode 0600, in dir: `name` holding `text`. */
static void secret_file(char *path, size_t len, const char *dir, const char *name,
                        const char *text)
{
    snprintf(path, len, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(chmod(path, 0600), 0);
    cr_assert_geq(fputs(text, f), 0);
    cr_assert_eq(fclose(f), 0);
}

/* The transport's handshake on a new connection to port, bounded; its status. */
static cks_status_t handshake(cks_tp_worker_h w, uint16_t port, const cks_tp_secret_t *secret,
                              cks_tp_conn_h *conn_p)
{
    return cks_test_raw_handshake(w, port, "filler", secret, conn_p);
}

/* With a secret and --auth-timeout 1: a connection that sends nothing, and
 * one that sends HELLO (gets its challenge) but never AUTH, are closed by
 * the server after the deadline; an authenticated client stays served. */
Test(limits, unauthenticated_connections_are_closed_after_the_deadline)
{
    char dir[64] = "/tmp/cks-limits-XXXXXX", key[128], flags[300];
    cks_client_params_t p = {0};
    cks_version_info_t vi;
    raw_t r = {0};
    cks_tp_conn_h idle, hello_only;
    uint8_t cn[CKS_WIRE_NONCE_LEN];
    cr_assert_not_null(mkdtemp(dir));
    secret_file(key, sizeof(key), dir, "cluster.key", "5e1f0c2a9b8d7e6f5a4b3c2d1e0f9a8b");
    cks_test_set_secret(key);
    snprintf(flags, sizeof(flags), "--auth-timeout 1");
    start_server(flags);
    cks_test_set_secret(NULL);

    p.field_mask = CKS_CLIENT_FIELD_SERVER | CKS_CLIENT_FIELD_TIMEOUT_MS |
                   CKS_CLIENT_FIELD_SECRET;
    p.server     = srv.addr;
    p.timeout_ms = GOOD_TIMEOUT_MS;
    p.secret     = key;
    cr_assert_eq(cks_client_create(&p, &good), CKS_OK);

    cks_tp_worker_h w = raw_worker(&r);
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", srv.port, &idle), CKS_OK);
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", srv.port, &hello_only), CKS_OK);
    cr_assert_eq(cks_tp_nonce(cn), CKS_OK);
    cks_msg_hello_t hello = {cks_wire_cstr("lingerer"), cks_wire_cstr(NULL),
                             {(const char *)cn, CKS_WIRE_NONCE_LEN}, cks_wire_cstr(NULL)};
    cr_assert_eq(cks_tp_send(hello_only, CKS_MSG_HELLO, 0, 1, &hello, NULL, 0, CKS_MEM_HOST,
                             NULL, raw_sent, &r),
                 CKS_INPROGRESS);
    /* both closed by the server: bounded at 15 s (the deadline is 1 s) */
    uint64_t until = cks_time_ns() + 15ull * 1000000000ull;
    while (r.lost < 2 && cks_time_ns() < until) {
        cks_tp_worker_wait(w, 20);
    }
    cr_assert_eq(r.replies, 1, "HELLO was not answered with a challenge");
    cr_assert_eq(r.lost, 2, "%u of 2 unauthenticated connections were closed", r.lost);
    cr_assert(cks_test_log_has(srv.log, "did not authenticate in 1000 ms", 5000),
              "no log line in %s", srv.log);
    /* the authenticated client's connection is older than the deadline, and served */
    cr_assert_eq(cks_version_stat(good, "nojob", 1, &vi), CKS_ERR_NO_SUCH_JOB);
    cks_tp_conn_put(idle);
    cks_tp_conn_put(hello_only);
    cks_tp_worker_destroy(w);
    unlink(key);
    rmdir(dir);
}

/* A cluster of six with a secret and --max-conns 3 (clients): a client
 * connects to every server, then raw clients with the cluster secret take
 * every other client slot of every server, and one more is refused
 * (CKS_ERR_BUSY). The servers have not connected to each other yet (peer
 * connections are made on first use): the client's version now needs chunk
 * puts from each primary to five peers, manifests from the coordinator to
 * every server. They prove the peer secret and are not counted among the
 * clients: the version commits and restores exactly. (Before, the cap
 * counted every connection, and filling it blocked the servers' own.) */
Test(limits, peers_have_room_when_clients_fill_the_cap, .timeout = 300)
{
    char dir[64] = "/tmp/cks-limits-XXXXXX", key[128];
    cks_test_cluster_t cl;
    cks_client_h c;
    cks_cluster_stats_t st;
    cks_tp_secret_t secret;
    raw_t r = {0};
    cks_tp_conn_h fill[CKS_TEST_MAX_SERVERS][3] = {{0}};
    cks_tp_conn_h extra;
    uint64_t size = 1 * MiB + 11;
    uint8_t *buf  = malloc(size + 8);
    char text[256];
    cks_test_fill(buf, size + 8, cks_test_seed(41));
    cr_assert_not_null(mkdtemp(dir));
    secret_file(key, sizeof(key), dir, "cluster.key", "5e1f0c2a9b8d7e6f5a4b3c2d1e0f9a8b");
    cks_test_set_secret(key);
    cks_test_set_server_flags("--max-conns 3");
    cr_assert_eq(cks_test_cluster_start(&cl, 6, 3, 64 * MiB, -1, NULL), 0);
    cks_test_set_server_flags(NULL);
    cks_test_set_secret(NULL);

    cr_assert_eq(cks_test_connect_secret(cl.map, key, GOOD_TIMEOUT_MS, &c), CKS_OK);
    cr_assert_eq(cks_cluster_stats(c, &st), CKS_OK);
    cr_assert_eq(st.answered, cl.n, "%u servers answered", st.answered);

    /* every other client slot of every server taken; one more refused */
    cr_assert_eq(cks_tp_secret_load(key, &secret), CKS_OK);
    cks_tp_worker_h w = raw_worker(&r);
    for (size_t i = 0; i < cl.n; i++) {
        for (size_t j = 0; j < 2; j++) {
            cr_assert_eq(handshake(w, cl.srv[i].port, &secret, &fill[i][j]), CKS_OK,
                         "server %zu: client %zu of 3 refused", i, j + 2);
        }
        cks_status_t busy = handshake(w, cl.srv[i].port, &secret, &extra);
        cks_tp_conn_put(extra);
        cr_assert_neq(busy, CKS_OK, "server %zu took a fourth client", i);
        cr_assert(cks_test_log_has(cl.srv[i].log, "client connections open (the limit)", 5000),
                  "server %zu: no log line in %s", i, cl.srv[i].log);
    }

    /* the version needs every server to reach every other */
    cks_test_begin(c, "room", 1);
    for (int i = 0; i < 3; i++) {
        char k[16];
        snprintf(k, sizeof(k), "obj%d", i);
        cr_assert_eq(cks_test_put(c, "room", 1, k, buf + i, size), CKS_OK, "%s", k);
    }
    cks_status_t sealed = cks_version_seal(c, "room", 1);
    cks_client_last_error(c, text, sizeof(text));
    cr_assert_eq(sealed, CKS_OK, "seal with the client slots full: %s (%s)",
                 cks_status_string(sealed), text);
    cks_test_verify_objs(c, "room", 1, buf, size, 3);
    size_t as_peer = 0;
    for (size_t i = 0; i < cl.n; i++) {
        as_peer += cks_test_log_has(cl.srv[i].log, "authenticated as a server of the cluster", 0);
    }
    cr_assert_geq(as_peer, 1, "no server authenticated a peer");

    cks_client_destroy(c);
    for (size_t i = 0; i < cl.n; i++) {
        for (size_t j = 0; j < 2; j++) {
            cks_tp_conn_put(fill[i][j]);
        }
    }
    cks_tp_worker_destroy(w);
    cks_test_cluster_cleanup(&cl);
    unlink(key);
    rmdir(dir);
    free(buf);
}
