/*
 * End-to-end limits: a real ckstore-server (127.0.0.1, port picked at run
 * time, stopped by pid) against misbehaving clients: one that opens a
 * thousand connections, one that floods requests, and one that sends
 * requests and then stops reading its replies (a child process it stops
 * with SIGSTOP and kills by pid). Each time, the server refuses or drops the
 * abuser with a log line, its memory stays bounded, and a well-behaved
 * client keeps being served, bit-exact. A stopped client whose shared-memory
 * FIFO is full of replies costs the server no spinning core, and gets every
 * reply once continued.
 */
#include "ckstore.h"
#include "cks_test.h"
#include "cks_tp.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

static cks_test_server_t srv;
static cks_client_h good;
static uint8_t *obj;

static void teardown(void)
{
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
    p.timeout_ms = 20000;
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

/* The good client reads the object back, bit-exact, within `limit_ms`
 * (a liveness bound: the server was not stalled). */
static void good_client_served(int limit_ms)
{
    cks_restore_h r;
    cks_get_params_t g = {0};
    uint8_t *dst       = malloc(OBJ_SIZE);
    uint64_t t0        = cks_time_ns();
    cr_assert_eq(cks_restore_open(good, "job", 1, &r), CKS_OK);
    g.key         = "big";
    g.buffer      = dst;
    g.buffer_size = OBJ_SIZE;
    cr_assert_eq(cks_get(r, &g, NULL), CKS_OK);
    cr_assert(memcmp(dst, obj, OBJ_SIZE) == 0, "bytes differ");
    cks_restore_close(r);
    free(dst);
    uint64_t ms = (cks_time_ns() - t0) / 1000000;
    cr_assert(ms < (uint64_t)limit_ms, "the good client waited %llu ms",
              (unsigned long long)ms);
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
    raw_progress(w, 3000);
    printf("opened %zu connections: %u answered, %u refused or lost\n", opened, r.replies,
           r.lost);
    /* one connection is the good client's */
    cr_assert(r.replies <= 31, "%u connections were served (limit 32)", r.replies);
    cr_assert(r.replies >= 1, "no connection was served at all");
    cr_assert(cks_test_log_has(srv.log, "refused: ", 5000), "no log line for refused connections");
    good_client_served(5000);

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
    uint64_t until = cks_time_ns() + 10ull * 1000000000ull;
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
    good_client_served(5000);
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
    good_client_served(5000);
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
            if (then_read && i % 32 == 31) {
                /* the server takes these and answers into our FIFO, which
                 * we do not drain: its room for our next requests does not
                 * need our progress, and its replies soon have no room */
                usleep(10 * 1000);
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
}

Test(limits, a_client_that_stops_reading_is_disconnected_after_the_reply_timeout)
{
    start_server("--reply-timeout 2");
    reader_t rd = reader_fork(40);
    start_good();
    long rss0 = rss_kib(srv.pid);
    reader_go(&rd);
    pid_t pid = rd.pid;
    good_client_served(5000); /* while its replies hang */
    cr_assert(cks_test_log_has(srv.log, "took none of its", 10000),
              "no log line about the stalled reader");
    good_client_served(5000);
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
    good_client_served(5000);
    kill_reader(pid);
}

/* A client that has a thousand small replies coming and stops (SIGSTOP)
 * fills its shared-memory receive FIFO: the server's sends then wait for room,
 * and UCX raises no event when there is some. The server must neither spin
 * on them (a stopped client would cost a core for the whole reply timeout)
 * nor lose them: it uses little CPU for the 2 s the reader is stopped, serves
 * a good client meanwhile, and once continued the reader gets every reply. */
Test(limits, a_stopped_client_with_replies_queued_costs_the_server_no_spinning_core)
{
    const unsigned n = 1000;
    start_server(NULL);
    reader_t rd = reader_fork_ex(n, 64, 1);
    start_good();
    reader_go(&rd);
    pid_t pid = rd.pid;
    /* the window: answering the burst itself costs a few ms of it */
    double c0 = cpu_s(srv.pid);
    usleep(2000 * 1000);
    double c1 = cpu_s(srv.pid);
    printf("server CPU over 2 s with a stopped reader: %.2f s\n", c1 - c0);
    cr_assert(c0 >= 0 && c1 >= 0, "cannot read the server's CPU time");
    cr_assert(c1 - c0 < 0.5, "the server used %.2f s of CPU in 2 s for a stopped client",
              c1 - c0);
    good_client_served(5000);
    int st;
    cr_assert_eq(kill(pid, SIGCONT), 0);
    cr_assert_eq(waitpid(pid, &st, 0), pid); /* bounded by its own 20 s */
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the reader did not get its %u replies once continued (status %d)", n, st);
}
