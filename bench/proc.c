/*
 * DESIGN: process plumbing of ckstore-bench (proc.h): pipes with deadlines,
 * waiting for and stopping pids, free ports, starting the programs the
 * bench runs (memcached, redis-server, gnuplot, the flush bench's servers;
 * with cks_spawn of tools/spawn, as the cluster's servers are), /proc
 * figures of a process, the progress line. Runs on the caller's thread.
 * Never: wait without a deadline; kill anything but the pid it is given.
 */
#include "proc.h"
#include "bench.h"
#include "cks_spawn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int bench_read_full_idle(int fd, void *buf, size_t n, double deadline,
                         void (*idle)(void *), void *arg)
{
    uint8_t *p = buf;
    while (n > 0) {
        double left = deadline - bench_now();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (idle != NULL) {
            idle(arg);
        }
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, idle != NULL ? 0 : (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0 || (r == 0 && idle == NULL)) {
            errno = r == 0 ? ETIMEDOUT : errno;
            return -1;
        }
        if (r == 0) {
            continue;
        }
        ssize_t got = read(fd, p, n);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (got <= 0) {
            errno = got == 0 ? EPIPE : errno;
            return -1;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int bench_read_full(int fd, void *buf, size_t n, double deadline)
{
    return bench_read_full_idle(fd, buf, n, deadline, NULL, NULL);
}

int bench_writev_full(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return -1;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

int bench_write_full(int fd, const void *buf, size_t n)
{
    struct iovec iov = {(void *)buf, n};
    return bench_writev_full(fd, &iov, 1);
}

static int bench_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void bench_rm_tree(const char *path)
{
    nftw(path, bench_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int bench_wait_pid(pid_t pid, double timeout_s, int *wstatus_p)
{
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    double deadline = bench_now() + timeout_s;
    int ended = 0;
    if (pidfd < 0) {
        /* no pidfd (old kernel): poll waitpid */
        while (bench_now() < deadline) {
            if (waitpid(pid, wstatus_p, WNOHANG) == pid) {
                return 1;
            }
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        return 0;
    }
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    for (;;) {
        double left = deadline - bench_now();
        int r = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
        if (r < 0 && errno == EINTR) {
            continue;
        }
        ended = r > 0;
        break;
    }
    close(pidfd);
    if (ended) {
        waitpid(pid, wstatus_p, 0);
    }
    return ended;
}

void bench_stop_pid(pid_t pid, int sig, double timeout_s)
{
    if (pid <= 0) {
        return;
    }
    kill(pid, sig);
    if (bench_wait_pid(pid, timeout_s, NULL)) {
        return;
    }
    fprintf(stderr,
            "ckstore-bench: pid %d did not end within %.0f s of signal %d: killed\n",
            (int)pid, timeout_s, sig);
    kill(pid, SIGKILL);
    if (!bench_wait_pid(pid, timeout_s, NULL)) {
        fprintf(stderr, "ckstore-bench: pid %d survived SIGKILL for %.0f s\n", (int)pid,
                timeout_s);
    }
}

int bench_find_server_bin(const char *given, char *out)
{
    char self[PATH_MAX];
    if (given != NULL) {
        snprintf(out, PATH_MAX, "%s", given);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        return -1;
    }
    self[n]     = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL) {
        return -1;
    }
    *slash = '\0';
    snprintf(out, PATH_MAX, "%.4000s/../server/ckstore-server", self);
    if (access(out, X_OK) == 0) {
        return 0;
    }
    snprintf(out, PATH_MAX, "%.4000s/ckstore-server", self);
    return access(out, X_OK) == 0 ? 0 : -1;
}

/* A free TCP port on 127.0.0.1 at random in [lo, hi), held by *fd_p (bound,
 * not listening) until the caller closes it; 0 when 200 tries found none. */
static uint16_t bench_port_try(unsigned lo, unsigned hi, int *fd_p)
{
    for (int t = 0; t < 200; t++) {
        struct sockaddr_in a;
        uint16_t port = (uint16_t)(lo + (unsigned)random() % (hi - lo));
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
            *fd_p = fd;
            return port;
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    return 0;
}

/* Ports below the kernel's ephemeral range (net.ipv4.ip_local_port_range),
 * above the well-known ones: no outgoing connection of this machine can
 * take a server's port while the bench has it down to restart it. */
int bench_free_ports(unsigned n, uint16_t *ports)
{
    int fds[256];
    unsigned i, elo = 32768, ehi = 60999;
    static int seeded;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%u %u", &elo, &ehi) != 2) {
            elo = 32768;
        }
        fclose(f);
    }
    if (n > 256 || elo < 12000) {
        return -1; /* no room below the range on this machine */
    }
    if (!seeded) {
        seeded = 1;
        srandom((unsigned)time(NULL) ^ ((unsigned)getpid() << 16));
    }
    for (i = 0; i < n; i++) {
        ports[i] = bench_port_try(10000, elo, &fds[i]);
        if (ports[i] == 0) {
            break;
        }
    }
    int rc = i == n ? 0 : -1;
    while (i-- > 0) {
        close(fds[i]);
    }
    return rc;
}

int bench_wait_port(uint16_t port, pid_t pid, double deadline)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    while (bench_now() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            return -1;
        }
        int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        close(fd);
        if (ok) {
            return 0;
        }
        if (pid > 0 && waitpid(pid, NULL, WNOHANG) == pid) {
            return -1; /* it ended (and is reaped) */
        }
        /* the program gives no readiness signal of its own: retry, bounded */
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

int bench_which(const char *name, char *path, size_t len)
{
    const char *env = getenv("PATH");
    if (strchr(name, '/') != NULL) {
        snprintf(path, len, "%s", name);
        return access(path, X_OK) == 0 ? 0 : -1;
    }
    if (env == NULL) {
        env = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
    }
    while (*env != '\0') {
        size_t n = strcspn(env, ":");
        if (n > 0 && (size_t)snprintf(path, len, "%.*s/%s", (int)n, env, name) < len &&
            access(path, X_OK) == 0) {
            return 0;
        }
        env += n + (env[n] == ':');
    }
    return -1;
}

pid_t bench_spawn(char *const argv[], int log_fd)
{
    char why[256];
    cks_spawn_t sp;
    cks_spawn_params_t p = {.field_mask = CKS_SPAWN_FIELD_FLAGS,
                            .argv = argv,
                            .flags = CKS_SPAWN_IGNORE_SIGINT}; /* a ^C is for the bench */
    if (log_fd >= 0) {
        p.field_mask |= CKS_SPAWN_FIELD_STDOUT | CKS_SPAWN_FIELD_STDERR;
        p.stdout_fd = log_fd;
        p.stderr_fd = log_fd;
    }
    if (cks_spawn_start(&p, &sp, why, sizeof(why)) != CKS_SPAWN_OK) {
        fprintf(stderr, "ckstore-bench: cannot start %s: %s\n", argv[0], why);
        return -1;
    }
    return sp.pid;
}

double bench_proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long long ut = 0, st = 0, cut = 0, cst = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* the name (field 2) may hold spaces: fields count from the last ')' */
    char *p = strrchr(buf, ')');
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
               &ut, &st, &cut, &cst) != 4) {
        return -1;
    }
    return (double)(ut + st + cut + cst) / (double)sysconf(_SC_CLK_TCK);
}

int bench_proc_rss(pid_t pid, uint64_t *rss_p, uint64_t *anon_p, uint64_t *shmem_p)
{
    char path[64], line[256];
    unsigned long long v, rss = 0, anon = 0, shmem = 0;
    int found = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %llu kB", &v) == 1) {
            rss = v << 10;
            found = 1;
        } else if (sscanf(line, "RssAnon: %llu kB", &v) == 1) {
            anon = v << 10;
        } else if (sscanf(line, "RssShmem: %llu kB", &v) == 1) {
            shmem = v << 10;
        }
    }
    fclose(f);
    if (!found) {
        return -1;
    }
    *rss_p = rss;
    if (anon_p != NULL) {
        *anon_p = anon;
    }
    if (shmem_p != NULL) {
        *shmem_p = shmem;
    }
    return 0;
}

static int bench_progress_shown = -1; /* -1: not yet asked whether stderr is a tty */

uint64_t bench_mem_available(void)
{
    char line[256];
    unsigned long long kb = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return (uint64_t)kb << 10;
}

uint64_t bench_shm_free(void)
{
    struct statvfs vfs;
    return statvfs("/dev/shm", &vfs) == 0 ? (uint64_t)vfs.f_bavail * vfs.f_frsize : 0;
}

void bench_progress(const char *fmt, ...)
{
    char line[160];
    va_list ap;
    if (bench_progress_shown < 0) {
        bench_progress_shown = isatty(STDERR_FILENO) ? 0 : 2;
    }
    if (bench_progress_shown == 2) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    bench_progress_shown = 1;
}

void bench_progress_clear(void)
{
    if (bench_progress_shown == 1) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
        bench_progress_shown = 0;
    }
}
