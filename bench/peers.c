/*
 * DESIGN: the peers of the capacity benchmark (peers.h). Owns one peer at a
 * time: its server process (memcached or redis-server from PATH, fork +
 * exec, 127.0.0.1, a port picked at run time, no persistence, stopped by
 * its pid with SIGTERM and SIGKILL after the timeout), its log (an unlinked
 * temporary file, printed when the peer fails), its client connection and,
 * for the /dev/shm peer, its files (removed after each round and on every
 * exit path, also from the signal handler through bench_peer_kill()). What
 * is open now lives in the caller's bench_peer_state_t, not in this file.
 *
 * Clients: libmemcached and hiredis, the Debian client libraries, used so
 * that a value travels as a careful application would move it, never
 * through a copy the library does not need:
 *   - memcached: memcached_set() (the library writes the value through its
 *     8 KiB write buffer: that is how it works), memcached_get() with
 *     memcached_set_memory_allocators() lending the library the caller's
 *     pre-faulted buffer for the value, so that a GET is not a fresh 64 MiB
 *     malloc (page faults) per object;
 *   - Redis: hiredis connects, configures and parses short replies; the
 *     bulk of SET goes out with one writev() on hiredis's socket and the
 *     bulk of a GET reply is read straight into the caller's buffer (hiredis
 *     0.14 reads replies 16 KiB at a time and copies a bulk string three
 *     times, which would measure the client library, not Redis).
 * Thread: the caller's (the bench's main thread). Never: leave a server or
 * a file behind; wait without a deadline.
 */
#include "peers.h"
#include "bench.h"
#include "proc.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#if CKS_BENCH_HAVE_MEMCACHED
#include <libmemcached/memcached.h>
#endif
#if CKS_BENCH_HAVE_HIREDIS
#include <hiredis.h>
#endif

const char *const bench_peer_names[BENCH_NPEERS] = {"memcached", "redis", "shm"};

const char *bench_peer_name(bench_peer_t p)
{
    return p < BENCH_NPEERS ? bench_peer_names[p] : "?";
}

void bench_peer_kill(const bench_peer_state_t *ps)
{
    if (ps->pid > 0) {
        kill(ps->pid, SIGKILL);
        waitpid(ps->pid, NULL, 0);
    }
    for (unsigned i = 0; i < ps->nfiles; i++) {
        unlink(ps->files[i]);
    }
}

static uint64_t peer_offset(const bench_peer_params_t *pp, unsigned o)
{
    uint64_t off = 0;
    for (unsigned i = 0; i < o; i++) {
        off += pp->sizes[i];
    }
    return off;
}

static uint64_t peer_total(const bench_peer_params_t *pp, uint64_t *max_p)
{
    uint64_t t = 0, max = 0;
    for (unsigned i = 0; i < pp->nobj; i++) {
        t += pp->sizes[i];
        max = pp->sizes[i] > max ? pp->sizes[i] : max;
    }
    if (max_p != NULL) {
        *max_p = max;
    }
    return t;
}

/* ---- the server process ------------------------------------------------------- */

/* Only the memcached and Redis peers start a server process; without either
 * client library (both optional) none of this is compiled. */
#if CKS_BENCH_HAVE_MEMCACHED || CKS_BENCH_HAVE_HIREDIS
static void peer_print_log(const bench_peer_state_t *ps, const char *what)
{
    char buf[4096];
    ssize_t n;
    if (ps->log_fd < 0 || lseek(ps->log_fd, 0, SEEK_SET) != 0) {
        return;
    }
    fprintf(stderr, "--- %s's output ---\n", what);
    while ((n = read(ps->log_fd, buf, sizeof(buf))) > 0) {
        fwrite(buf, 1, (size_t)n, stderr);
    }
}

/* Start argv and wait until it accepts on `port`; 0 or -1 with a note. */
static int peer_server_start(bench_peer_state_t *ps, char *const argv[], uint16_t port,
                             double timeout_s, bench_peer_res_t *res)
{
    ps->log_fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    pid_t pid  = bench_spawn(argv, ps->log_fd);
    if (pid < 0) {
        snprintf(res->note, sizeof(res->note), "cannot start %s", argv[0]);
        return -1;
    }
    ps->pid = pid;
    if (bench_wait_port(port, pid, bench_now() + timeout_s) != 0) {
        snprintf(res->note, sizeof(res->note),
                 "%s (pid %d) did not accept on port %u "
                 "within %.0f s",
                 argv[0], (int)pid, port, timeout_s);
        peer_print_log(ps, argv[0]);
        return -1;
    }
    return 0;
}

static void peer_server_stop(bench_peer_state_t *ps, double timeout_s)
{
    if (ps->pid > 0) {
        bench_stop_pid(ps->pid, SIGTERM, timeout_s);
        ps->pid = 0;
    }
    if (ps->log_fd >= 0) {
        close(ps->log_fd);
        ps->log_fd = -1;
    }
}
#endif /* CKS_BENCH_HAVE_MEMCACHED || CKS_BENCH_HAVE_HIREDIS */

/* ---- rounds --------------------------------------------------------------------- */

typedef int (*peer_op_fn)(void *ctx, const char *key, const uint8_t *src, uint8_t *dst,
                          uint64_t size, char *err, size_t errlen);

/* warm-up + reps rounds of: store every object (timed), read every object
 * (timed; the first round's bytes are compared, outside the timing). */
static void peer_shm_remove(const bench_peer_state_t *ps);

static int peer_rounds(bench_peer_state_t *ps, const char *name,
                       const bench_peer_params_t *pp, void *ctx, peer_op_fn set,
                       peer_op_fn get, bench_peer_res_t *res)
{
    char err[256] = "", key[32];
    double cpu0  = -1;
    pid_t server = ps->pid;
    res->bytes = peer_total(pp, NULL);
    for (unsigned r = 0; r <= pp->reps; r++) {
        double set_s = 0, get_s = 0;
        if (r == 1 && server > 0) {
            cpu0 = bench_proc_cpu_s(server);
        }
        peer_shm_remove(ps); /* the /dev/shm peer's files of the round before (untimed) */
        for (unsigned o = 0; o < pp->nobj; o++) {
            snprintf(key, sizeof(key), "object%04u", o);
            bench_progress("peer %s: round %u of %u (the first untimed): object %u/%u",
                           name, r, pp->reps, o + 1, pp->nobj);
            double t0 = bench_now();
            if (set(ctx, key, pp->src + peer_offset(pp, o), NULL, pp->sizes[o], err,
                    sizeof(err)) != 0) {
                snprintf(res->note, sizeof(res->note), "set of %s: %s", key, err);
                return -1;
            }
            set_s += bench_now() - t0;
        }
        if (r == 0 && server > 0) {
            uint64_t rss = 0;
            if (bench_proc_rss(server, &rss, NULL, NULL) == 0) {
                res->server_rss = rss;
            }
        }
        for (unsigned o = 0; o < pp->nobj; o++) {
            const uint8_t *src = pp->src + peer_offset(pp, o);
            snprintf(key, sizeof(key), "object%04u", o);
            if (r == 0) {
                memset(pp->dst, 0x5a, pp->sizes[o]);
            }
            double t0 = bench_now();
            if (get(ctx, key, NULL, pp->dst, pp->sizes[o], err, sizeof(err)) != 0) {
                snprintf(res->note, sizeof(res->note), "get of %s: %s", key, err);
                return -1;
            }
            get_s += bench_now() - t0;
            if (r == 0 && memcmp(pp->dst, src, pp->sizes[o]) != 0) {
                snprintf(res->note, sizeof(res->note), "get of %s returned other bytes",
                         key);
                return -1;
            }
        }
        if (r > 0) {
            res->set_s[res->n] = set_s;
            res->get_s[res->n++] = get_s;
        }
    }
    res->server_cpu_s = cpu0 >= 0 ? bench_proc_cpu_s(server) - cpu0 : -1;
    bench_progress_clear();
    return 0;
}

#if CKS_BENCH_HAVE_MEMCACHED || CKS_BENCH_HAVE_HIREDIS
/* A reply line up to its CRLF, a byte at a time (a few bytes: no payload
 * read by mistake), NUL-terminated. */
static int peer_read_line(int fd, char *line, size_t cap, double deadline, char *err,
                          size_t errlen)
{
    size_t have = 0;
    while (have < cap - 1) {
        if (bench_read_full(fd, line + have, 1, deadline) != 0) {
            snprintf(err, errlen, "read: %s", strerror(errno));
            return -1;
        }
        if (++have >= 2 && line[have - 2] == '\r' && line[have - 1] == '\n') {
            break;
        }
    }
    line[have] = '\0';
    return 0;
}
#endif

#if CKS_BENCH_HAVE_MEMCACHED
/* A TCP connection to 127.0.0.1:port with send and receive timeouts. */
static int peer_connect(uint16_t port, double timeout_s)
{
    struct sockaddr_in a;
    struct timeval tv = {(time_t)timeout_s, 0};
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}
#endif

/* ---- memcached ------------------------------------------------------------------- */

#if CKS_BENCH_HAVE_MEMCACHED
/* libmemcached's allocators: a value of 1 MiB or more goes into the
 * caller's pre-faulted buffer (lent to the library until it is freed). */
typedef struct {
    uint8_t *buf;
    uint64_t len;
    int lent;
} peer_mc_alloc_t;

static void *peer_mc_malloc(const memcached_st *mc, const size_t size, void *ctx)
{
    peer_mc_alloc_t *a = ctx;
    (void)mc;
    if (size >= (1u << 20) && size <= a->len && !a->lent) {
        a->lent = 1;
        return a->buf;
    }
    return malloc(size);
}

static void peer_mc_free(const memcached_st *mc, void *mem, void *ctx)
{
    peer_mc_alloc_t *a = ctx;
    (void)mc;
    if (mem == a->buf) {
        a->lent = 0;
    } else {
        free(mem);
    }
}

static void *peer_mc_realloc(const memcached_st *mc, void *mem, const size_t size,
                             void *ctx)
{
    peer_mc_alloc_t *a = ctx;
    if (mem == NULL) {
        return peer_mc_malloc(mc, size, ctx);
    }
    if (mem == a->buf) {
        if (size <= a->len) {
            return a->buf;
        }
        void *p = malloc(size);
        if (p != NULL) {
            memcpy(p, a->buf, a->len);
            a->lent = 0;
        }
        return p;
    }
    if (size >= (1u << 20) && size <= a->len && !a->lent) {
        size_t old = malloc_usable_size(mem);
        memcpy(a->buf, mem, old < size ? old : size);
        free(mem);
        a->lent = 1;
        return a->buf;
    }
    return realloc(mem, size);
}

static void *peer_mc_calloc(const memcached_st *mc, size_t nelem, const size_t elsize,
                            void *ctx)
{
    (void)mc;
    (void)ctx;
    return calloc(nelem, elsize);
}

typedef struct {
    memcached_st *mc;
    peer_mc_alloc_t alloc;
    int fd; /* our own connection for SET */
    double timeout_s;
} peer_mc_t;

/* SET on our own connection (text protocol): the value goes out with one
 * writev(), where libmemcached's memcached_set() pushes it through its 8 KiB
 * write buffer (a memcpy and a write() per 8 KiB: 1.4 GB/s here, a third of
 * what memcached takes in) */
static int peer_mc_set(void *ctx, const char *key, const uint8_t *src, uint8_t *dst,
                       uint64_t size, char *err, size_t errlen)
{
    peer_mc_t *c = ctx;
    char head[128], reply[16];
    double deadline = bench_now() + c->timeout_s;
    (void)dst;
    int hn = snprintf(head, sizeof(head), "set %s 0 0 %llu\r\n", key,
                      (unsigned long long)size);
    struct iovec iov[3] = {{head, (size_t)hn}, {(void *)src, size}, {"\r\n", 2}};
    if (bench_writev_full(c->fd, iov, 3) != 0) {
        snprintf(err, errlen, "write: %s", strerror(errno));
        return -1;
    }
    if (peer_read_line(c->fd, reply, sizeof(reply), deadline, err, errlen) != 0) {
        return -1;
    }
    if (strcmp(reply, "STORED\r\n") != 0) {
        snprintf(err, errlen, "memcached answered '%.*s'", (int)strcspn(reply, "\r"),
                 reply);
        return -1;
    }
    return 0;
}

static int peer_mc_get(void *ctx, const char *key, const uint8_t *src, uint8_t *dst,
                       uint64_t size, char *err, size_t errlen)
{
    peer_mc_t *c = ctx;
    size_t len = 0;
    uint32_t flags = 0;
    memcached_return_t rc;
    (void)src;
    char *v = memcached_get(c->mc, key, strlen(key), &len, &flags, &rc);
    if (v == NULL || rc != MEMCACHED_SUCCESS) {
        snprintf(err, errlen, "%s", memcached_last_error_message(c->mc));
        if (v != NULL) {
            peer_mc_free(c->mc, v, &c->alloc);
        }
        return -1;
    }
    if (len != size) {
        snprintf(err, errlen, "%zu bytes, expected %llu", len, (unsigned long long)size);
        peer_mc_free(c->mc, v, &c->alloc);
        return -1;
    }
    if ((uint8_t *)v != dst) {
        memcpy(dst, v, len); /* the value was not lent our buffer (small) */
    }
    peer_mc_free(c->mc, v, &c->alloc);
    return 0;
}

static int peer_memcached(bench_peer_state_t *ps, const bench_peer_params_t *pp,
                          bench_peer_res_t *res)
{
    char bin[4096], port_s[16], item_s[32], mem_s[32];
    uint16_t port;
    uint64_t max, total = peer_total(pp, &max);
    int rc = -1;
    peer_mc_t c = {.fd = -1};

    if (bench_which("memcached", bin, sizeof(bin)) != 0) {
        snprintf(res->note, sizeof(res->note),
                 "no memcached in PATH (Debian package "
                 "memcached; scripts/deps --bench)");
        return -1;
    }
    if (bench_free_ports(1, &port) != 0) {
        snprintf(res->note, sizeof(res->note), "no free port");
        return -1;
    }
    /* -I: the largest object plus the item header, in MiB; memcached wants
     * at least twice that as its memory limit (-m, MiB): every object, one
     * more during an overwrite (SET allocates before it frees), slab slack */
    uint64_t item_mb = (max + (max >> 4) + (2u << 20)) >> 20;
    uint64_t mem_mb = ((total + total / 4 + max) >> 20) + 64;
    if (item_mb > 1024) {
        snprintf(res->note, sizeof(res->note),
                 "objects above 1 GiB do not fit in a "
                 "memcached item (-I is at most 1024m)");
        return -1;
    }
    mem_mb = mem_mb < 2 * item_mb ? 2 * item_mb : mem_mb;
    snprintf(port_s, sizeof(port_s), "%u", port);
    snprintf(item_s, sizeof(item_s), "%llum", (unsigned long long)item_mb);
    snprintf(mem_s, sizeof(mem_s), "%llu", (unsigned long long)mem_mb);
    char *argv[] = {bin, "-l", "127.0.0.1", "-p", port_s, "-U", "0", "-I", item_s, "-m",
                    mem_s, "-M", /* an error when full, never a silent eviction */
                    /* memcached refuses to run as root without -u */
                    geteuid() == 0 ? "-u" : NULL, "root", NULL};
    if (peer_server_start(ps, argv, port, pp->timeout_s, res) != 0) {
        goto out;
    }
    snprintf(
        res->desc, sizeof(res->desc),
        "memcached (pid %d, 127.0.0.1:%u, -I %s -m %s -M); GET: libmemcached %s, SET: "
        "one writev",
        (int)ps->pid, port, item_s, mem_s, LIBMEMCACHED_VERSION_STRING);

    c.alloc.buf = pp->dst;
    c.alloc.len = pp->dst_len;
    c.mc = memcached_create(NULL);
    if (c.mc == NULL) {
        snprintf(res->note, sizeof(res->note), "memcached_create failed");
        goto out;
    }
    memcached_set_memory_allocators(c.mc, peer_mc_malloc, peer_mc_free, peer_mc_realloc,
                                    peer_mc_calloc, &c.alloc);
    uint64_t ms = (uint64_t)(pp->timeout_s * 1000);
    memcached_behavior_set(c.mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, ms);
    memcached_behavior_set(c.mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, ms);
    memcached_behavior_set(c.mc, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, ms * 1000);
    memcached_behavior_set(c.mc, MEMCACHED_BEHAVIOR_SND_TIMEOUT, ms * 1000);
    memcached_behavior_set(c.mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    if (memcached_server_add(c.mc, "127.0.0.1", port) != MEMCACHED_SUCCESS) {
        snprintf(res->note, sizeof(res->note), "memcached_server_add: %s",
                 memcached_last_error_message(c.mc));
        goto out;
    }
    c.timeout_s = pp->timeout_s;
    c.fd = peer_connect(port, pp->timeout_s);
    if (c.fd < 0) {
        snprintf(res->note, sizeof(res->note), "connect: %s", strerror(errno));
        goto out;
    }
    rc = peer_rounds(ps, "memcached", pp, &c, peer_mc_set, peer_mc_get, res);
    if (rc != 0) {
        peer_print_log(ps, "memcached");
    }

out:
    if (c.fd >= 0) {
        close(c.fd);
    }
    if (c.mc != NULL) {
        memcached_free(c.mc);
    }
    peer_server_stop(ps, pp->timeout_s);
    return rc;
}
#endif

/* ---- Redis ---------------------------------------------------------------------- */

#if CKS_BENCH_HAVE_HIREDIS
typedef struct {
    redisContext *rc;
    double timeout_s;
} peer_redis_t;

static int peer_redis_set(void *ctx, const char *key, const uint8_t *src, uint8_t *dst,
                          uint64_t size, char *err, size_t errlen)
{
    peer_redis_t *c = ctx;
    char head[128];
    redisReply *reply = NULL;
    (void)dst;
    int hn = snprintf(head, sizeof(head), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%llu\r\n",
                      strlen(key), key, (unsigned long long)size);
    struct iovec iov[3] = {{head, (size_t)hn}, {(void *)src, size}, {"\r\n", 2}};
    if (bench_writev_full(c->rc->fd, iov, 3) != 0) {
        snprintf(err, errlen, "write: %s", strerror(errno));
        return -1;
    }
    if (redisGetReply(c->rc, (void **)&reply) != REDIS_OK || reply == NULL ||
        reply->type != REDIS_REPLY_STATUS || strcmp(reply->str, "OK") != 0) {
        snprintf(err, errlen, "%s",
                 reply != NULL && reply->str != NULL ? reply->str
                 : c->rc->errstr[0]                  ? c->rc->errstr
                                                     : "no reply");
        if (reply != NULL) {
            freeReplyObject(reply);
        }
        return -1;
    }
    freeReplyObject(reply);
    return 0;
}

/* GET with the bulk read straight into dst: "$LEN\r\n" BYTES "\r\n". */
static int peer_redis_get(void *ctx, const char *key, const uint8_t *src, uint8_t *dst,
                          uint64_t size, char *err, size_t errlen)
{
    peer_redis_t *c = ctx;
    char cmd[128], head[64];
    double deadline = bench_now() + c->timeout_s;
    (void)src;
    int n =
        snprintf(cmd, sizeof(cmd), "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(key), key);
    if (bench_write_full(c->rc->fd, cmd, (size_t)n) != 0) {
        snprintf(err, errlen, "write: %s", strerror(errno));
        return -1;
    }
    /* the header, a byte at a time (a few bytes: no payload read by mistake) */
    if (peer_read_line(c->rc->fd, head, sizeof(head), deadline, err, errlen) != 0) {
        return -1;
    }
    unsigned long long len = 0;
    if (head[0] != '$' || sscanf(head + 1, "%llu", &len) != 1 || len != size) {
        snprintf(err, errlen, "reply '%.40s', expected $%llu", head,
                 (unsigned long long)size);
        return -1;
    }
    if (bench_read_full(c->rc->fd, dst, size, deadline) != 0 ||
        bench_read_full(c->rc->fd, head, 2, deadline) != 0) {
        snprintf(err, errlen, "read: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static int peer_redis(bench_peer_state_t *ps, const bench_peer_params_t *pp,
                      bench_peer_res_t *res)
{
    char bin[4096], port_s[16], bulk_s[32], qbuf_s[32], ver[32] = "?";
    uint16_t port;
    uint64_t max;
    int rc = -1;
    peer_redis_t c = {NULL, pp->timeout_s};

    peer_total(pp, &max);
    if (bench_which("redis-server", bin, sizeof(bin)) != 0) {
        snprintf(res->note, sizeof(res->note),
                 "no redis-server in PATH (Debian package "
                 "redis-server; scripts/deps --bench)");
        return -1;
    }
    if (bench_free_ports(1, &port) != 0) {
        snprintf(res->note, sizeof(res->note), "no free port");
        return -1;
    }
    /* a bulk string and a client's query buffer must hold the largest object */
    uint64_t bulk = 512ull << 20, qbuf = 1ull << 30;
    while (bulk < max + (1u << 20)) {
        bulk *= 2;
    }
    while (qbuf < max + (1u << 20)) {
        qbuf *= 2;
    }
    snprintf(port_s, sizeof(port_s), "%u", port);
    snprintf(bulk_s, sizeof(bulk_s), "%llu", (unsigned long long)bulk);
    snprintf(qbuf_s, sizeof(qbuf_s), "%llu", (unsigned long long)qbuf);
    char *argv[] = {bin, "--bind", "127.0.0.1", "--port", port_s, "--save", "",
                    "--appendonly", "no", "--proto-max-bulk-len", bulk_s,
                    "--client-query-buffer-limit", qbuf_s,
                    "--dir", "/tmp", /* nothing is written there: no RDB, no AOF */
                    "--logfile", "", "--daemonize", "no", NULL};
    if (peer_server_start(ps, argv, port, pp->timeout_s, res) != 0) {
        goto out;
    }
    struct timeval tv = {
        (time_t)pp->timeout_s,
        (suseconds_t)((pp->timeout_s - (double)(time_t)pp->timeout_s) * 1e6)};
    c.rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c.rc == NULL || c.rc->err) {
        snprintf(res->note, sizeof(res->note), "connect: %s",
                 c.rc != NULL ? c.rc->errstr : "no memory");
        goto out;
    }
    redisSetTimeout(c.rc, tv);
    redisReply *info = redisCommand(c.rc, "INFO server");
    if (info != NULL && info->type == REDIS_REPLY_STRING) {
        const char *v = strstr(info->str, "redis_version:");
        if (v != NULL) {
            sscanf(v + 14, "%31[0-9.]", ver);
        }
    }
    if (info != NULL) {
        freeReplyObject(info);
    }
    snprintf(res->desc, sizeof(res->desc),
             "Redis %s (pid %d, 127.0.0.1:%u, no persistence, proto-max-bulk-len %s), "
             "hiredis %d.%d.%d",
             ver, (int)ps->pid, port, bulk_s, HIREDIS_MAJOR, HIREDIS_MINOR,
             HIREDIS_PATCH);
    rc = peer_rounds(ps, "redis", pp, &c, peer_redis_set, peer_redis_get, res);
    if (rc != 0) {
        peer_print_log(ps, "redis-server");
    }

out:
    if (c.rc != NULL) {
        redisFree(c.rc);
    }
    peer_server_stop(ps, pp->timeout_s);
    return rc;
}
#endif

/* ---- files in /dev/shm ------------------------------------------------------------ */

static int peer_shm_write(void *ctx, const char *key, const uint8_t *src, uint8_t *dst,
                          uint64_t size, char *err, size_t errlen)
{
    unsigned o = (unsigned)strtoul(key + strlen("object"), NULL, 10);
    const bench_peer_state_t *ps = ctx;
    (void)dst;
    int fd = open(ps->files[o], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || bench_write_full(fd, src, size) != 0 || close(fd) != 0) {
        snprintf(err, errlen, "%s: %s", ps->files[o], strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    return 0;
}

static int peer_shm_read(void *ctx, const char *key, const uint8_t *src, uint8_t *dst,
                         uint64_t size, char *err, size_t errlen)
{
    unsigned o = (unsigned)strtoul(key + strlen("object"), NULL, 10);
    const bench_peer_state_t *ps = ctx;
    (void)src;
    int fd = open(ps->files[o], O_RDONLY | O_CLOEXEC);
    if (fd < 0 || bench_read_full(fd, dst, size, bench_now() + 3600) != 0) {
        snprintf(err, errlen, "%s: %s", ps->files[o], strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    close(fd);
    return 0;
}

/* A checkpoint is written as new files: the round before's go first. */
static void peer_shm_remove(const bench_peer_state_t *ps)
{
    for (unsigned i = 0; i < ps->nfiles; i++) {
        unlink(ps->files[i]);
    }
}

static int peer_shm(bench_peer_state_t *ps, const bench_peer_params_t *pp,
                    bench_peer_res_t *res)
{
    if (pp->nobj > BENCH_PEER_MAX_OBJS) {
        snprintf(res->note, sizeof(res->note), "more than %u objects",
                 BENCH_PEER_MAX_OBJS);
        return -1;
    }
    for (unsigned o = 0; o < pp->nobj; o++) {
        snprintf(ps->files[o], sizeof(ps->files[o]), "/dev/shm/ckstore-bench-%d-peer%u",
                 (int)getpid(), o);
    }
    ps->nfiles = pp->nobj;
    snprintf(res->desc, sizeof(res->desc),
             "files in /dev/shm: open, write (read), close; new files each round");
    int rc = peer_rounds(ps, "shm", pp, ps, peer_shm_write, peer_shm_read, res);
    peer_shm_remove(ps);
    ps->nfiles = 0;
    return rc;
}

int bench_peer_run(bench_peer_state_t *ps, bench_peer_t p, const bench_peer_params_t *pp,
                   bench_peer_res_t *res)
{
    ps->pid    = 0;
    ps->log_fd = -1;
    ps->nfiles = 0;
    memset(res, 0, sizeof(*res));
    res->server_cpu_s = -1;
    if (pp->reps == 0 || pp->reps > BENCH_PEER_MAX_REPS || pp->nobj == 0) {
        snprintf(res->note, sizeof(res->note), "bad parameters");
        return -1;
    }
    int rc = -1;
    switch (p) {
        case BENCH_PEER_MEMCACHED:
#if CKS_BENCH_HAVE_MEMCACHED
            rc = peer_memcached(ps, pp, res);
#else
            snprintf(res->note, sizeof(res->note),
                     "built without libmemcached (Debian "
                     "package libmemcached-dev; scripts/deps --bench, then rebuild)");
#endif
            break;
        case BENCH_PEER_REDIS:
#if CKS_BENCH_HAVE_HIREDIS
            rc = peer_redis(ps, pp, res);
#else
            snprintf(res->note, sizeof(res->note),
                     "built without hiredis (Debian package "
                     "libhiredis-dev; scripts/deps --bench, then rebuild)");
#endif
            break;
        case BENCH_PEER_SHM:
            rc = peer_shm(ps, pp, res);
            break;
        default:
            snprintf(res->note, sizeof(res->note), "unknown peer");
            break;
    }
    bench_progress_clear();
    res->ok = rc == 0;
    return rc;
}
