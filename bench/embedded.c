/*
 * DESIGN: the embedded server. Owns the child process that the bench forks:
 * it runs a ckstore server through the cks_server library (its progress
 * thread is the child's main thread) and, in a second thread, the sink of
 * the raw UCX loop, so that the reference and ckstore move bytes between
 * the same two processes. Also owns the control channel (two pipes; only
 * addresses, rkeys and commands travel on it, never data) and the files the
 * server needs (a mkdtemp directory and an arena in /dev/shm named after the
 * parent's pid), which the parent removes whatever happens.
 *
 * Threads: in the parent, the caller's thread. In the child, the main thread
 * serves ckstore; the sink thread owns the raw UCX side, reads commands and
 * stops the server on QUIT or when the parent goes away.
 * Never: wait without a deadline in the parent (every read is bounded; the
 * child is killed by pid when it does not answer), or use UCX in the parent
 * before the fork.
 */
#include "bench.h"
#include "cks_server.h"
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum {
    BENCH_CTL_READY = 1,      /* child: bench_ctl_ready_t */
    BENCH_CTL_ERROR,          /* child: text */
    BENCH_CTL_RAW_OPEN,       /* parent: bench_ctl_open_t + worker address */
    BENCH_CTL_RAW_OPEN_REPLY, /* child: bench_ctl_open_reply_t + rkey + address */
    BENCH_CTL_RAW_CLOSE,      /* parent */
    BENCH_CTL_RAW_CLOSED,     /* child */
    BENCH_CTL_QUIT,           /* parent */
    BENCH_CTL_RAW_SPIN,       /* parent: double, seconds */
    BENCH_CTL_RAW_SPIN_DONE,  /* child */
};

#define BENCH_CTL_MAX 65536

typedef struct {
    uint32_t type, len;
} bench_ctl_hdr_t;

typedef struct {
    uint32_t port;
} bench_ctl_ready_t;

typedef struct {
    uint32_t setup, addr_len;
    uint64_t buf_size;
    double spin_s;
} bench_ctl_open_t;

typedef struct {
    uint64_t remote_addr;
    uint32_t rkey_len, addr_len;
    char desc[64];
} bench_ctl_open_reply_t;

/* ---- control channel -------------------------------------------------------------- */

static int bench_ctl_write(int fd, uint32_t type, const void *a, size_t alen, const void *b,
                           size_t blen, const void *c, size_t clen)
{
    bench_ctl_hdr_t h = {type, (uint32_t)(alen + blen + clen)};
    struct iovec iov[] = {{&h, sizeof(h)}, {(void *)a, alen}, {(void *)b, blen},
                          {(void *)c, clen}};
    return bench_writev_full(fd, iov, 4);
}

static void bench_ctl_progress(void *raw)
{
    bench_raw_progress(raw);
}

/* Read n bytes before the deadline, progressing `raw` (when set) meanwhile.
 * Returns 0, or -1 on EOF, error or timeout (errno ETIMEDOUT). */
static int bench_ctl_read_exact(int fd, void *buf, size_t n, double deadline,
                                bench_raw_t *raw)
{
    return bench_read_full_idle(fd, buf, n, deadline, raw ? bench_ctl_progress : NULL, raw);
}

/* One message into buf (cap bytes, NUL-terminated after the payload). */
static int bench_ctl_read(int fd, double deadline, bench_raw_t *raw, uint32_t *type_p,
                          char *buf, size_t cap, size_t *len_p)
{
    bench_ctl_hdr_t h;
    if (bench_ctl_read_exact(fd, &h, sizeof(h), deadline, raw) != 0) {
        return -1;
    }
    if (h.len >= cap) {
        errno = EMSGSIZE;
        return -1;
    }
    if (bench_ctl_read_exact(fd, buf, h.len, deadline, raw) != 0) {
        return -1;
    }
    buf[h.len] = '\0';
    *type_p    = h.type;
    *len_p     = h.len;
    return 0;
}

/* ---- the child -------------------------------------------------------------------- */

static void bench_remove_files(const bench_child_t *c);

typedef struct {
    bench_child_t *c;
    cks_server_h server;
} bench_sink_arg_t;

static void bench_sink_error(int fd, const char *text)
{
    bench_ctl_write(fd, BENCH_CTL_ERROR, text, strlen(text), NULL, 0, NULL, 0);
}

static void bench_sink_open(bench_child_t *c, const char *msg, size_t len, bench_raw_t **raw_p)
{
    bench_ctl_open_t o;
    bench_ctl_open_reply_t rep;
    const void *addr;
    size_t addr_len, rkey_len;
    void *rkey;
    char err[BENCH_ERR_LEN];
    bench_raw_t *raw = NULL;

    memcpy(&o, msg, sizeof(o) <= len ? sizeof(o) : 0);
    if (len < sizeof(o) || o.setup >= BENCH_NSETUPS || len != sizeof(o) + o.addr_len) {
        bench_sink_error(c->reply_fd, "bad RAW_OPEN message");
        return;
    }
    if (bench_raw_create(o.setup, o.buf_size, o.spin_s, &raw, err, sizeof(err)) != 0 ||
        bench_raw_connect(raw, msg + sizeof(o), o.addr_len, err, sizeof(err)) != 0) {
        bench_raw_destroy(raw);
        bench_sink_error(c->reply_fd, err);
        return;
    }
    if (bench_raw_rkey(raw, &rep.remote_addr, &rkey, &rkey_len) != 0) {
        bench_raw_destroy(raw);
        bench_sink_error(c->reply_fd, "raw UCX: ucp_rkey_pack failed");
        return;
    }
    bench_raw_serve(raw);
    bench_raw_address(raw, &addr, &addr_len);
    rep.rkey_len = (uint32_t)rkey_len;
    rep.addr_len = (uint32_t)addr_len;
    snprintf(rep.desc, sizeof(rep.desc), "%s", bench_raw_describe(raw));
    bench_ctl_write(c->reply_fd, BENCH_CTL_RAW_OPEN_REPLY, &rep, sizeof(rep), rkey, rkey_len,
                    addr, addr_len);
    bench_raw_rkey_release(rkey);
    *raw_p = raw;
}

static void *bench_sink_main(void *arg)
{
    bench_sink_arg_t *a = arg;
    bench_child_t *c    = a->c;
    bench_raw_t *raw    = NULL;
    char *msg           = malloc(BENCH_CTL_MAX);
    unsigned spins      = 0;
    double idle_since   = 0;

    while (msg != NULL) {
        struct pollfd pfd[2] = {{.fd = c->cmd_fd, .events = POLLIN},
                                {.fd = -1, .events = POLLIN}};
        uint32_t type;
        size_t len;

        if (raw != NULL) {
            /* a raw session: busy-poll (for the session's spin time after the
             * last event, or always), look at the pipe now and then, sleep on
             * the worker's event fd and the pipe when idle */
            if (bench_raw_progress(raw) != 0) {
                idle_since = 0;
                continue;
            }
            if (++spins % 256 != 0) {
                continue;
            }
            double now = bench_now(), spin = bench_raw_spin(raw);
            idle_since = idle_since == 0 ? now : idle_since;
            if (spin < 0 || now - idle_since < spin || bench_raw_arm(raw) != 0) {
                if (poll(pfd, 1, 0) <= 0) {
                    continue;
                }
            } else {
                pfd[1].fd = bench_raw_efd(raw);
                if (poll(pfd, 2, -1) <= 0 || !(pfd[0].revents & (POLLIN | POLLHUP))) {
                    idle_since = 0;
                    continue;
                }
            }
        } else if (poll(pfd, 1, -1) <= 0) {
            continue;
        }
        if (bench_ctl_read(c->cmd_fd, bench_now() + 10, raw, &type, msg, BENCH_CTL_MAX,
                           &len) != 0) {
            break; /* the parent has gone */
        }
        if (type == BENCH_CTL_QUIT) {
            break;
        } else if (type == BENCH_CTL_RAW_OPEN && raw == NULL) {
            bench_sink_open(c, msg, len, &raw);
        } else if (type == BENCH_CTL_RAW_SPIN && raw != NULL && len == sizeof(double)) {
            double spin;
            memcpy(&spin, msg, sizeof(spin));
            bench_raw_set_spin(raw, spin);
            bench_ctl_write(c->reply_fd, BENCH_CTL_RAW_SPIN_DONE, NULL, 0, NULL, 0, NULL, 0);
        } else if (type == BENCH_CTL_RAW_CLOSE && raw != NULL) {
            bench_raw_disconnect(raw, 10);
            bench_raw_destroy(raw);
            raw = NULL;
            bench_ctl_write(c->reply_fd, BENCH_CTL_RAW_CLOSED, NULL, 0, NULL, 0, NULL, 0);
        } else {
            bench_sink_error(c->reply_fd, "unexpected command");
        }
    }
    bench_raw_destroy(raw);
    free(msg);
    cks_server_stop(a->server);
    return NULL;
}

static int bench_child_main(bench_child_t *c, uint64_t arena_size)
{
    cks_server_params_t p;
    bench_ctl_ready_t ready;
    bench_sink_arg_t a;
    pthread_t sink;
    char data_dir[96];
    cks_status_t status;

    snprintf(data_dir, sizeof(data_dir), "%s/md", c->dir);
    cks_log_set_prefix("bench-server");
    memset(&p, 0, sizeof(p));
    p.name        = "ckstore-bench-server";
    p.listen_addr = "127.0.0.1";
    p.port        = 0;
    p.arena_size  = arena_size;
    p.arena_file  = c->arena;
    p.data_dir    = data_dir;
    p.copy_threads = c->copy_threads;
    status        = cks_server_create(&p, &a.server);
    /* the server holds them open from now on: unlinked, they disappear with
     * this process, even when the parent is killed with SIGKILL */
    bench_remove_files(c);
    rmdir(c->dir);
    if (status != CKS_OK) {
        char text[128];
        snprintf(text, sizeof(text), "cks_server_create: %s", cks_status_string(status));
        bench_sink_error(c->reply_fd, text);
        return 1;
    }
    a.c = c;
    if (pthread_create(&sink, NULL, bench_sink_main, &a) != 0) {
        bench_sink_error(c->reply_fd, "pthread_create failed");
        cks_server_destroy(a.server);
        return 1;
    }
    ready.port = cks_server_port(a.server);
    bench_ctl_write(c->reply_fd, BENCH_CTL_READY, &ready, sizeof(ready), NULL, 0, NULL, 0);
    status = cks_server_run(a.server);
    pthread_join(sink, NULL);
    cks_server_destroy(a.server);
    return status == CKS_OK ? 0 : 1;
}

/* ---- the parent ------------------------------------------------------------------- */

static bench_child_t *volatile bench_signal_child;

static void bench_remove_files(const bench_child_t *c)
{
    /* only unlink/rmdir: this also runs from the signal handler */
    static const char *const files[] = {"md/data.mdb", "md/lock.mdb", "md"};
    char path[160];
    if (c->arena[0] != '\0') {
        unlink(c->arena);
    }
    if (c->dir[0] == '\0') {
        return;
    }
    for (unsigned i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", c->dir, files[i]);
        if (unlink(path) != 0) {
            rmdir(path);
        }
    }
}

static void bench_on_signal(int sig)
{
    bench_child_t *c = bench_signal_child;
    if (c != NULL) {
        if (c->pid > 0) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, NULL, 0);
        }
        bench_remove_files(c);
        rmdir(c->dir);
    }
    _exit(128 + sig);
}

static void bench_print_log(const bench_child_t *c)
{
    char buf[4096];
    off_t off = 0;
    ssize_t n;
    if (c->log_fd < 0) {
        return;
    }
    fprintf(stderr, "--- the embedded server's log ---\n");
    while ((n = pread(c->log_fd, buf, sizeof(buf), off)) > 0) {
        fwrite(buf, 1, (size_t)n, stderr);
        off += n;
    }
}

int bench_child_start(bench_child_t *c, uint64_t arena_size, double timeout_s, char *err,
                      size_t errlen)
{
    int cmd[2], reply[2];
    char msg[512];
    uint32_t type;
    size_t len;
    pid_t parent = getpid();
    struct sigaction sa;

    snprintf(c->dir, sizeof(c->dir), "/tmp/ckstore-bench-XXXXXX");
    if (mkdtemp(c->dir) == NULL) {
        snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
        c->dir[0] = '\0';
        return -1;
    }
    snprintf(c->arena, sizeof(c->arena), "/dev/shm/ckstore-bench-%d.arena", (int)parent);
    unlink(c->arena); /* a stale one of an earlier process with this pid */
    c->pid    = 0;
    c->log_fd = -1;
    if (!c->verbose) {
        /* the child's stderr: a file that no name points to, read back on failure */
        char log[96];
        snprintf(log, sizeof(log), "%s/server.log", c->dir);
        c->log_fd = open(log, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        unlink(log);
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler      = bench_on_signal;
    bench_signal_child = c;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    if (pipe2(cmd, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto err_files;
    }
    if (pipe2(reply, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto err_cmd;
    }
    fflush(NULL);
    c->pid = fork();
    if (c->pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        goto err_reply;
    }
    if (c->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) {
            _exit(1);
        }
        signal(SIGINT, SIG_IGN); /* the parent cleans up, then kills us */
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        close(cmd[1]);
        close(reply[0]);
        c->cmd_fd   = cmd[0];
        c->reply_fd = reply[1];
        if (c->log_fd >= 0) {
            dup2(c->log_fd, STDERR_FILENO);
        }
        if (c->netns[0] != '\0') {
            /* another "host" (cluster --hosts): before anything uses UCX */
            char path[128];
            snprintf(path, sizeof(path), "/run/netns/%s", c->netns);
            int nsfd = open(path, O_RDONLY | O_CLOEXEC);
            if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) {
                char text[200];
                snprintf(text, sizeof(text), "cannot enter network namespace %s: %s",
                         c->netns, strerror(errno));
                bench_sink_error(c->reply_fd, text);
                _exit(1);
            }
            close(nsfd);
        }
        _exit(bench_child_main(c, arena_size));
    }
    close(cmd[0]);
    close(reply[1]);
    c->cmd_fd   = cmd[1];
    c->reply_fd = reply[0];
    signal(SIGPIPE, SIG_IGN); /* a dead child shows as EPIPE on the next write */

    if (bench_ctl_read(c->reply_fd, bench_now() + timeout_s, NULL, &type, msg, sizeof(msg),
                       &len) != 0) {
        snprintf(err, errlen, "the embedded server did not start within %.0f s: %s",
                 timeout_s, strerror(errno));
        bench_print_log(c);
        bench_child_stop(c, 0);
        return -1;
    }
    if (type != BENCH_CTL_READY || len != sizeof(bench_ctl_ready_t)) {
        snprintf(err, errlen, "the embedded server failed: %s",
                 type == BENCH_CTL_ERROR ? msg : "bad message");
        bench_print_log(c);
        bench_child_stop(c, 0);
        return -1;
    }
    c->port = (uint16_t)((bench_ctl_ready_t *)msg)->port;
    return 0;

err_reply:
    close(reply[0]);
    close(reply[1]);
err_cmd:
    close(cmd[0]);
    close(cmd[1]);
err_files:
    if (c->log_fd >= 0) {
        close(c->log_fd);
    }
    bench_remove_files(c);
    rmdir(c->dir);
    bench_signal_child = NULL;
    return -1;
}

void bench_child_stop(bench_child_t *c, double timeout_s)
{
    if (c->pid > 0) {
        int wstatus = 0;
        int pidfd   = (int)syscall(SYS_pidfd_open, c->pid, 0);
        if (timeout_s > 0) {
            bench_ctl_write(c->cmd_fd, BENCH_CTL_QUIT, NULL, 0, NULL, 0, NULL, 0);
        }
        struct pollfd p = {.fd = pidfd, .events = POLLIN};
        if (timeout_s <= 0 || pidfd < 0 || poll(&p, 1, (int)(timeout_s * 1000)) <= 0) {
            if (timeout_s > 0) {
                fprintf(stderr, "ckstore-bench: the embedded server (pid %d) did not stop "
                                "within %.0f s: killed\n",
                        (int)c->pid, timeout_s);
            }
            kill(c->pid, SIGKILL);
        }
        if (pidfd >= 0) {
            close(pidfd);
        }
        waitpid(c->pid, &wstatus, 0);
        if (timeout_s > 0 && !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
            fprintf(stderr, "ckstore-bench: the embedded server ended with status 0x%x\n",
                    wstatus);
            bench_print_log(c);
        }
        c->pid = 0;
        close(c->cmd_fd);
        close(c->reply_fd);
        if (c->log_fd >= 0) {
            close(c->log_fd);
            c->log_fd = -1;
        }
    }
    if (c->dir[0] != '\0') {
        bench_remove_files(c);
        bench_rm_tree(c->dir);
        c->dir[0] = '\0';
    }
    bench_signal_child = NULL;
}

int bench_child_raw_open(bench_child_t *c, bench_setup_t setup, size_t buf_size,
                         double spin_s, double timeout_s, bench_raw_t **raw_p,
                         char (*desc)[64], char *err, size_t errlen)
{
    bench_ctl_open_t o = {setup, 0, buf_size, spin_s};
    bench_ctl_open_reply_t rep;
    const void *addr;
    size_t addr_len, len;
    uint32_t type;
    bench_raw_t *raw;
    char *msg;

    if (bench_raw_create(setup, buf_size, spin_s, &raw, err, errlen) != 0) {
        return -1;
    }
    msg = malloc(BENCH_CTL_MAX);
    if (msg == NULL) {
        snprintf(err, errlen, "out of memory");
        goto err_raw;
    }
    bench_raw_address(raw, &addr, &addr_len);
    o.addr_len = (uint32_t)addr_len;
    if (bench_ctl_write(c->cmd_fd, BENCH_CTL_RAW_OPEN, &o, sizeof(o), addr, addr_len, NULL,
                        0) != 0 ||
        bench_ctl_read(c->reply_fd, bench_now() + timeout_s, raw, &type, msg, BENCH_CTL_MAX,
                       &len) != 0) {
        snprintf(err, errlen, "raw UCX: no answer from the embedded server: %s",
                 strerror(errno));
        goto err_msg;
    }
    if (type != BENCH_CTL_RAW_OPEN_REPLY) {
        snprintf(err, errlen, "raw UCX: the embedded server failed: %s",
                 type == BENCH_CTL_ERROR ? msg : "bad message");
        goto err_msg;
    }
    memcpy(&rep, msg, sizeof(rep) <= len ? sizeof(rep) : 0);
    if (len < sizeof(rep) || len != sizeof(rep) + rep.rkey_len + rep.addr_len) {
        snprintf(err, errlen, "raw UCX: bad RAW_OPEN_REPLY");
        goto err_close;
    }
    if (bench_raw_connect(raw, msg + sizeof(rep) + rep.rkey_len, rep.addr_len, err, errlen) !=
            0 ||
        bench_raw_set_remote(raw, rep.remote_addr, msg + sizeof(rep), rep.rkey_len, err,
                             errlen) != 0) {
        goto err_close;
    }
    snprintf(desc[0], sizeof(desc[0]), "%s", bench_raw_describe(raw));
    snprintf(desc[1], sizeof(desc[1]), "%s", rep.desc);
    free(msg);
    *raw_p = raw;
    return 0;

err_close:
    free(msg);
    bench_child_raw_close(c, raw, timeout_s);
    return -1;
err_msg:
    free(msg);
err_raw:
    bench_raw_destroy(raw);
    return -1;
}

int bench_child_raw_spin(bench_child_t *c, bench_raw_t *raw, double spin_s, double timeout_s)
{
    char msg[256];
    uint32_t type;
    size_t len;

    if (bench_ctl_write(c->cmd_fd, BENCH_CTL_RAW_SPIN, &spin_s, sizeof(spin_s), NULL, 0, NULL,
                        0) != 0 ||
        bench_ctl_read(c->reply_fd, bench_now() + timeout_s, raw, &type, msg, sizeof(msg),
                       &len) != 0 ||
        type != BENCH_CTL_RAW_SPIN_DONE) {
        fprintf(stderr, "ckstore-bench: raw UCX: the embedded server did not take the new "
                        "spin time\n");
        return -1;
    }
    return 0;
}

void bench_child_raw_close(bench_child_t *c, bench_raw_t *raw, double timeout_s)
{
    char msg[256];
    uint32_t type;
    size_t len;

    if (bench_ctl_write(c->cmd_fd, BENCH_CTL_RAW_CLOSE, NULL, 0, NULL, 0, NULL, 0) == 0) {
        bench_raw_disconnect(raw, timeout_s);
        if (bench_ctl_read(c->reply_fd, bench_now() + timeout_s, raw, &type, msg,
                           sizeof(msg), &len) != 0 ||
            type != BENCH_CTL_RAW_CLOSED) {
            fprintf(stderr, "ckstore-bench: raw UCX: the embedded server did not close its "
                            "side\n");
        }
    }
    bench_raw_destroy(raw);
}

int bench_raw_sample(bench_raw_t *raw, bench_method_t m, bench_dir_t d, size_t size,
                     unsigned warmup, unsigned reps, double budget_s, double timeout_s,
                     double *secs, unsigned *n_p)
{
    double start = bench_now(), sec;
    char err[BENCH_ERR_LEN];
    *n_p = 0;
    for (unsigned r = 0; r < warmup + reps; r++) {
        if (bench_raw_transfer(raw, m, d, size, timeout_s, &sec, err, sizeof(err)) != 0) {
            fprintf(stderr, "ckstore-bench: %s (setup %s)\n", err,
                    bench_raw_setup_name(raw));
            return -1;
        }
        if (r >= warmup) {
            secs[(*n_p)++] = sec;
        }
        if (*n_p > 0 && bench_now() - start > budget_s) {
            break;
        }
    }
    return 0;
}
