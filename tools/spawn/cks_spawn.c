/*
 * DESIGN: starting the processes of the tests and the bench (see
 * cks_spawn.h). Everything that can fail, or that is not async-signal-safe,
 * is done in the parent before fork: the environment array, the pipes,
 * /dev/null, the namespace's descriptor, the signal mask. The child only
 * moves descriptors, resets signals, enters the namespace and execs; when
 * a step fails it writes {step, errno} on a close-on-exec pipe and
 * _exits, so the parent learns of it (end of file on that pipe: the exec
 * happened). Runs on the caller's thread; keeps no state between calls.
 * Never: call anything but async-signal-safe functions in the child; wait
 * without a bound; signal any pid but the one it started.
 */
#include "cks_spawn.h"

#include <errno.h>
#include <fcntl.h>
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
#include <time.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1u << 2)
#endif

/* The line ckstore-server prints on stdout once it listens (server/main.c). */
#define CKS_SPAWN_TAG "ckstore-server listening on "
/* How long cks_spawn_start() waits for the child's exec. */
#define CKS_SPAWN_EXEC_MS 10000
/* Descriptors closed one by one where close_range() is missing. */
#define CKS_SPAWN_FD_MAX 65536

extern char **environ;

/* What the child reports when a step before exec fails. */
enum { STEP_DUP = 1, STEP_SETNS, STEP_EXEC };
typedef struct {
    int step;
    int err;
} child_err_t;

/* Everything the child needs, made by the parent before fork. */
typedef struct {
    const char *path;
    char *const *argv;
    char **envp;   /* malloc'd array; strings are the caller's or environ's */
    int null_fd;   /* /dev/null, for stdin */
    int out_fd;    /* its stdout: a pipe's write end, the caller's fd, or -1 */
    int err_fd;    /* its stderr, or -1 */
    int ns_fd;     /* the namespace, or -1 */
    int report_fd; /* write end of the error pipe (CLOEXEC) */
    unsigned flags;
    pid_t parent;
    sigset_t mask; /* the caller's signal mask, given back to the child */
} child_plan_t;

const char *cks_spawn_status_string(cks_spawn_status_t status)
{
    switch (status) {
        case CKS_SPAWN_OK:
            return "ok";
        case CKS_SPAWN_ERR_SYS:
            return "a system call failed";
        case CKS_SPAWN_ERR_EXEC:
            return "could not be started";
        case CKS_SPAWN_ERR_ENDED:
            return "ended before it listened";
        case CKS_SPAWN_ERR_TIMEOUT:
            return "did not say it listens in time";
        case CKS_SPAWN_ERR_OUTPUT:
            return "said it listens without a valid port";
    }
    return "unknown status";
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void set_why(char *why, size_t len, const char *what, const char *arg, int err)
{
    if (why != NULL && len > 0) {
        snprintf(why, len, "%s%s%s: %s", what, arg != NULL ? " " : "",
                 arg != NULL ? arg : "", strerror(err));
    }
}

static void close_if(int fd)
{
    if (fd >= 0) {
        close(fd);
    }
}

/* ---- the environment ----------------------------------------------------- */

/* Length of the NAME in "NAME=VALUE" (all of it without '='). */
static size_t env_name_len(const char *kv)
{
    const char *eq = strchr(kv, '=');
    return eq != NULL ? (size_t)(eq - kv) : strlen(kv);
}

static int env_overridden(const char *kv, char *const *extra)
{
    size_t n = env_name_len(kv);
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++) {
        if (env_name_len(extra[i]) == n && strncmp(kv, extra[i], n) == 0) {
            return 1;
        }
    }
    return 0;
}

/* environ with `extra` added (replacing the same names): a malloc'd array
 * of borrowed strings, or NULL with errno. */
static char **env_build(char *const *extra)
{
    size_t n = 0, m = 0, k = 0;
    while (environ != NULL && environ[n] != NULL) {
        n++;
    }
    while (extra != NULL && extra[m] != NULL) {
        m++;
    }
    char **envp = malloc((n + m + 1) * sizeof(*envp));
    if (envp == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!env_overridden(environ[i], extra)) {
            envp[k++] = environ[i];
        }
    }
    for (size_t i = 0; i < m; i++) {
        envp[k++] = extra[i];
    }
    envp[k] = NULL;
    return envp;
}

/* ---- the child, between fork and exec: async-signal-safe calls only --------- */

static void child_fail(const child_plan_t *c, int step)
{
    child_err_t e = {.step = step, .err = errno};
    ssize_t w = write(c->report_fd, &e, sizeof(e));
    (void)w;
    _exit(127);
}

static void child_signals(const child_plan_t *c)
{
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL &&
            sa.sa_handler != SIG_IGN) {
            memset(&sa, 0, sizeof(sa)); /* a handler of ours must not run here */
            sa.sa_handler = SIG_DFL;
            sigaction(sig, &sa, NULL);
        }
    }
    signal(SIGPIPE, SIG_DFL); /* the caller may ignore it; the program decides */
    if (c->flags & CKS_SPAWN_IGNORE_SIGINT) {
        signal(SIGINT, SIG_IGN);
    }
    sigprocmask(SIG_SETMASK, &c->mask, NULL);
}

/* src as descriptor dst, kept across exec (dup2 alone keeps the close-on-exec
 * flag when src is dst already). */
static int child_dup(int src, int dst)
{
    if (src == dst) {
        return fcntl(dst, F_SETFD, 0) == 0 ? 0 : -1;
    }
    return dup2(src, dst) == dst ? 0 : -1;
}

/* Every descriptor above 2 closed at exec, the report pipe kept until then. */
static void child_close_fds(const child_plan_t *c)
{
    if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) == 0) {
        return;
    }
    for (int fd = 3; fd < CKS_SPAWN_FD_MAX; fd++) { /* kernels before 5.11 */
        if (fd != c->report_fd) {
            close(fd);
        }
    }
}

static void child_run(const child_plan_t *c)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != c->parent) {
        _exit(127); /* the caller ended before the prctl */
    }
    if (child_dup(c->null_fd, STDIN_FILENO) != 0 ||
        (c->out_fd >= 0 && child_dup(c->out_fd, STDOUT_FILENO) != 0) ||
        (c->err_fd >= 0 && child_dup(c->err_fd, STDERR_FILENO) != 0)) {
        child_fail(c, STEP_DUP);
    }
    if (c->ns_fd >= 0 && setns(c->ns_fd, CLONE_NEWNET) != 0) {
        child_fail(c, STEP_SETNS);
    }
    child_close_fds(c);
    child_signals(c);
    execve(c->path, c->argv, c->envp);
    child_fail(c, STEP_EXEC);
}

/* ---- the parent ------------------------------------------------------------ */

/* Wait (bounded) for the child's report: 0 when it exec'd, else the step
 * that failed with errno set. */
static int report_read(int fd, child_err_t *e)
{
    uint64_t until = now_ms() + CKS_SPAWN_EXEC_MS;
    for (;;) {
        uint64_t now = now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, now < until ? (int)(until - now) : 0);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            e->step = STEP_EXEC;
            e->err = r == 0 ? ETIMEDOUT : errno;
            return -1;
        }
        ssize_t got = read(fd, e, sizeof(*e));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got == 0) {
            return 0;
        }
        if (got != (ssize_t)sizeof(*e)) {
            e->step = STEP_EXEC;
            e->err = got < 0 ? errno : EIO;
        }
        return -1;
    }
}

/* Open what the child will need; on failure close what was opened (errno
 * kept). */
static cks_spawn_status_t plan_open(const cks_spawn_params_t *p, child_plan_t *c,
                                    int pipe_fds[2], int report[2], char *why,
                                    size_t why_len)
{
    const char *ns = (p->field_mask & CKS_SPAWN_FIELD_NETNS) ? p->netns_path : NULL;
    int err;
    if (ns != NULL && ns[0] != '\0' && (c->ns_fd = open(ns, O_RDONLY | O_CLOEXEC)) < 0) {
        err = errno;
        set_why(why, why_len, "open", ns, err);
        goto err;
    }
    if ((c->null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
        err = errno;
        set_why(why, why_len, "open", "/dev/null", err);
        goto err_close_ns;
    }
    if (c->out_fd == CKS_SPAWN_PIPE) {
        if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
            err = errno;
            set_why(why, why_len, "pipe", NULL, err);
            goto err_close_null;
        }
        c->out_fd = pipe_fds[1];
    }
    if (pipe2(report, O_CLOEXEC) != 0) {
        err = errno;
        set_why(why, why_len, "pipe", NULL, err);
        goto err_close_out;
    }
    c->report_fd = report[1];
    c->envp = env_build((p->field_mask & CKS_SPAWN_FIELD_ENV) ? p->env : NULL);
    if (c->envp == NULL) {
        err = errno;
        set_why(why, why_len, "environment", NULL, err);
        goto err_close_report;
    }
    return CKS_SPAWN_OK;

err_close_report:
    close(report[0]);
    close(report[1]);
err_close_out:
    close_if(pipe_fds[0]);
    close_if(pipe_fds[1]);
err_close_null:
    close(c->null_fd);
err_close_ns:
    close_if(c->ns_fd);
err:
    errno = err;
    return CKS_SPAWN_ERR_SYS;
}

/* What the parent closes once the child runs (or failed). */
static void plan_close(child_plan_t *c, int pipe_write, int report[2])
{
    int saved = errno;
    free(c->envp);
    close(c->null_fd);
    close_if(c->ns_fd);
    close_if(pipe_write);
    close_if(report[0]);
    close_if(report[1]);
    errno = saved;
}

/* The child failed before exec (report e): reaped, the reason in why. */
static cks_spawn_status_t start_failed(const child_plan_t *c, pid_t pid,
                                       const child_err_t *e, const char *ns, char *why,
                                       size_t why_len)
{
    static const char *const what[] = {"?", "dup2", "setns", "exec"};
    pid_t got;
    kill(pid, SIGKILL); /* not reaped yet: still ours; it may be stuck before exec */
    do {
        got = waitpid(pid, NULL, 0);
    } while (got < 0 && errno == EINTR);
    set_why(why, why_len, what[e->step >= 1 && e->step <= 3 ? e->step : 0],
            e->step == STEP_SETNS  ? ns
            : e->step == STEP_EXEC ? c->path
                                   : NULL,
            e->err);
    errno = e->err;
    return CKS_SPAWN_ERR_EXEC;
}

cks_spawn_status_t cks_spawn_start(const cks_spawn_params_t *p, cks_spawn_t *sp_p,
                                   char *why, size_t why_len)
{
    child_plan_t c = {.argv = p->argv,
                      .out_fd = -1,
                      .err_fd = -1,
                      .ns_fd = -1,
                      .null_fd = -1,
                      .parent = getpid()};
    int pipe_fds[2] = {-1, -1}, report[2] = {-1, -1};
    sigset_t all;
    child_err_t e;

    if (p->argv == NULL || p->argv[0] == NULL) {
        set_why(why, why_len, "argv", NULL, EINVAL);
        errno = EINVAL;
        return CKS_SPAWN_ERR_SYS;
    }
    c.path =
        (p->field_mask & CKS_SPAWN_FIELD_PATH) && p->path != NULL ? p->path : p->argv[0];
    c.out_fd = (p->field_mask & CKS_SPAWN_FIELD_STDOUT) ? p->stdout_fd : -1;
    c.err_fd = (p->field_mask & CKS_SPAWN_FIELD_STDERR) ? p->stderr_fd : -1;
    c.flags = (p->field_mask & CKS_SPAWN_FIELD_FLAGS) ? p->flags : 0;
    if (plan_open(p, &c, pipe_fds, report, why, why_len) != CKS_SPAWN_OK) {
        return CKS_SPAWN_ERR_SYS;
    }
    /* no handler of ours may run in the child before it reset them */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &c.mask);
    fflush(NULL); /* our buffered lines before any of the child's on a shared fd */
    pid_t pid = fork();
    if (pid == 0) {
        child_run(&c); /* does not return */
    }
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &c.mask, NULL);
    if (pid < 0) {
        set_why(why, why_len, "fork", NULL, fork_errno);
        close_if(pipe_fds[0]);
        plan_close(&c, pipe_fds[1], report);
        errno = fork_errno;
        return CKS_SPAWN_ERR_SYS;
    }
    close(report[1]); /* the child's copy alone: end of file at its exec */
    report[1] = -1;
    int rc = report_read(report[0], &e);
    plan_close(&c, pipe_fds[1], report);
    if (rc != 0) {
        close_if(pipe_fds[0]);
        return start_failed(&c, pid, &e, p->netns_path, why, why_len);
    }
    sp_p->pid = pid;
    sp_p->out_fd = pipe_fds[0];
    return CKS_SPAWN_OK;
}

/* ---- waiting ---------------------------------------------------------------- */

/* The port of a line holding CKS_SPAWN_TAG ("...listening on HOST:PORT"):
 * 1..65535, or 0 when there is none. */
static uint16_t line_port(const char *line)
{
    const char *colon = strrchr(strstr(line, CKS_SPAWN_TAG), ':');
    char *end;
    if (colon == NULL || colon[1] < '0' || colon[1] > '9') {
        return 0;
    }
    unsigned long port = strtoul(colon + 1, &end, 10);
    return (*end == '\0' || *end == '\r') && port > 0 && port <= 65535 ? (uint16_t)port
                                                                       : 0;
}

/* The complete lines in buf[0, *used): the first with the tag ends the scan
 * (1, its port in *port_p; 0 when it has none); the rest of the last,
 * incomplete line moves to the front. -1: no tag yet. */
static int lines_scan(char *buf, size_t *used, uint16_t *port_p)
{
    char *start = buf, *nl;
    while ((nl = memchr(start, '\n', *used - (size_t)(start - buf))) != NULL) {
        *nl = '\0';
        if (strstr(start, CKS_SPAWN_TAG) != NULL) {
            *port_p = line_port(start);
            return 1;
        }
        start = nl + 1;
    }
    *used -= (size_t)(start - buf);
    memmove(buf, start, *used);
    return -1;
}

cks_spawn_status_t cks_spawn_wait_listening(int fd, int timeout_ms, uint16_t *port_p)
{
    char buf[4096];
    size_t used = 0;
    uint64_t until = now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);

    for (int polls = 0;; polls++) {
        uint64_t now = now_ms();
        if (polls > 0 && now >= until) {
            return CKS_SPAWN_ERR_TIMEOUT; /* a child that writes without pause */
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, now < until ? (int)(until - now) : 0);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return r == 0 ? CKS_SPAWN_ERR_TIMEOUT : CKS_SPAWN_ERR_SYS;
        }
        ssize_t got = read(fd, buf + used, sizeof(buf) - 1 - used);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (got <= 0) {
            return got == 0 ? CKS_SPAWN_ERR_ENDED : CKS_SPAWN_ERR_SYS;
        }
        used += (size_t)got;
        uint16_t port = 0;
        if (lines_scan(buf, &used, &port) > 0) {
            if (port == 0) {
                return CKS_SPAWN_ERR_OUTPUT;
            }
            if (port_p != NULL) {
                *port_p = port;
            }
            return CKS_SPAWN_OK;
        }
        if (used == sizeof(buf) - 1) {
            used = 0; /* a line this long is not the one we wait for */
        }
    }
}

/* ---- stopping --------------------------------------------------------------- */

/* Wait up to timeout_ms for child pid to end (pidfd: any kernel since 5.3;
 * else waitpid every 10 ms), and reap it. 1 with its status, or 0. */
static int reap_within(pid_t pid, int timeout_ms, int *wstatus)
{
    uint64_t until = now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    for (;;) {
        uint64_t now = now_ms();
        int left = now < until ? (int)(until - now) : 0;
        if (pidfd >= 0) {
            struct pollfd p = {.fd = pidfd, .events = POLLIN};
            int r = poll(&p, 1, left);
            if (r < 0 && errno == EINTR) {
                continue;
            }
            if (r <= 0) {
                close(pidfd);
                return 0;
            }
        }
        pid_t got = waitpid(pid, wstatus, pidfd >= 0 ? 0 : WNOHANG);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got == pid || got < 0) { /* reaped, or not ours to reap */
            close_if(pidfd);
            return got == pid;
        }
        if (left == 0) {
            return 0;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int cks_spawn_stop(cks_spawn_t *sp, int sig, int timeout_ms)
{
    int wstatus = 0;
    if (sp->pid <= 0) {
        return -1;
    }
    if (sig != 0) {
        kill(sp->pid, sig);
    }
    if (!reap_within(sp->pid, timeout_ms, &wstatus)) {
        kill(sp->pid, SIGKILL);
        if (!reap_within(sp->pid, timeout_ms, &wstatus)) {
            return -1; /* sp->pid kept: the caller may try again */
        }
    }
    close_if(sp->out_fd);
    sp->pid = 0;
    sp->out_fd = -1;
    return wstatus;
}
