/*
 * DESIGN: test support (see cks_test.h). Servers are children of the test
 * process, die with it (PR_SET_PDEATHSIG), and are waited for through a pipe
 * on which they announce that they serve (no sleeps), with a deadline.
 */
#include "cks_test.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CKS_SERVER_BIN
#error "CKS_SERVER_BIN must name the ckstore-server binary"
#endif

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int spawn(cks_test_server_t *s)
{
    char size[32];
    int pfd[2];
    pid_t parent = getpid();

    snprintf(size, sizeof(size), "%llu", (unsigned long long)s->arena_size);
    if (pipe(pfd) != 0) {
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) {
            _exit(1);
        }
        int logfd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        dup2(pfd[1], STDOUT_FILENO);
        if (logfd >= 0) {
            dup2(logfd, STDERR_FILENO);
        }
        close(pfd[0]);
        execl(CKS_SERVER_BIN, "ckstore-server", "--listen", "127.0.0.1", "--port", "0",
              "--arena-size", size, "--arena-file", s->arena, "--data-dir", s->data,
              "--log-level", getenv("CKS_TEST_SERVER_LOG") ? getenv("CKS_TEST_SERVER_LOG")
                                                             : "info",
              (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    s->pid = pid;
    /* wait for the line "ckstore-server listening on 127.0.0.1:PORT" (other
     * lines, e.g. UCX's own log, may come first) */
    static const char tag[] = "ckstore-server listening on ";
    char buf[8192];
    size_t got     = 0;
    uint64_t until = now_ms() + 30000;
    while (now_ms() < until && got < sizeof(buf) - 1) {
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        if (poll(&p, 1, (int)(until - now_ms())) <= 0) {
            continue;
        }
        ssize_t r = read(pfd[0], buf + got, sizeof(buf) - 1 - got);
        if (r <= 0) {
            break; /* the server exited */
        }
        got += (size_t)r;
        buf[got]   = '\0';
        char *line = strstr(buf, tag);
        char *nl   = line ? strchr(line, '\n') : NULL;
        char *colon = line ? strrchr(line, ':') : NULL;
        if (nl != NULL && colon != NULL && colon < nl) {
            s->port = (uint16_t)atoi(colon + 1);
            snprintf(s->addr, sizeof(s->addr), "127.0.0.1:%u", s->port);
            close(pfd[0]);
            return 0;
        }
    }
    close(pfd[0]);
    fprintf(stderr, "server did not start; log in %s\n", s->log);
    cks_test_server_stop(s, SIGKILL);
    return -1;
}

int cks_test_server_start(cks_test_server_t *s, uint64_t arena_size)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "/tmp/cks-test-XXXXXX");
    if (mkdtemp(s->dir) == NULL) {
        perror("mkdtemp");
        return -1;
    }
    s->arena_size = arena_size;
    /* arenas live in /dev/shm, as in production; named after the temp dir */
    snprintf(s->arena, sizeof(s->arena), "/dev/shm/%s.arena", s->dir + 5);
    snprintf(s->data, sizeof(s->data), "%s/md", s->dir);
    snprintf(s->log, sizeof(s->log), "%s/server.log", s->dir);
    return spawn(s);
}

int cks_test_server_restart(cks_test_server_t *s)
{
    if (s->pid != 0) {
        cks_test_server_stop(s, SIGKILL);
    }
    return spawn(s);
}

int cks_test_server_stop(cks_test_server_t *s, int sig)
{
    int wstatus = 0;
    if (s->pid == 0) {
        return 0;
    }
    /* wait for the exit on a pidfd, with a deadline; SIGKILL after it */
    int pidfd = (int)syscall(SYS_pidfd_open, s->pid, 0);
    kill(s->pid, sig);
    if (pidfd >= 0) {
        struct pollfd p = {.fd = pidfd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0) {
            fprintf(stderr, "server %d ignored signal %d for 10 s: SIGKILL\n", (int)s->pid,
                    sig);
            kill(s->pid, SIGKILL);
        }
        close(pidfd);
    }
    waitpid(s->pid, &wstatus, 0);
    s->pid = 0;
    return wstatus;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

void cks_test_server_cleanup(cks_test_server_t *s)
{
    cks_test_server_stop(s, SIGKILL);
    if (s->dir[0] != '\0' && getenv("CKS_TEST_KEEP") == NULL) {
        nftw(s->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        unlink(s->arena);
    }
}

uint64_t cks_test_seed(uint64_t dflt)
{
    const char *env = getenv("CKS_TEST_SEED");
    uint64_t seed   = env ? strtoull(env, NULL, 0) : dflt;
    fprintf(stderr, "seed: %llu (set CKS_TEST_SEED to replay)\n", (unsigned long long)seed);
    return seed;
}

void cks_test_fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    uint8_t *p = buf;
    size_t i   = 0;
    for (; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}
