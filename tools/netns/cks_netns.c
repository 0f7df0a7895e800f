/*
 * DESIGN: network namespaces for the partition tests and the bench's
 * `cluster --hosts` (see cks_netns.h). Every change is made by iproute2
 * commands run as children, each bounded in time (SIGKILL after 10 s) and
 * waited for by pid; commands always name the namespace they act in
 * (`ip -n NS`, `ip netns add NAME`), so the caller's namespace is never
 * touched. The calling thread moves between namespaces with setns() only in
 * enter_client()/leave(). One exception: remove_now() removes the names with
 * plain system calls, for a signal handler.
 */
#include "cks_netns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CKS_NETNS_PREFIX "ckst"
#define CKS_NETNS_CMD_MS 10000
#define CKS_NETNS_MIN(a, b) ((a) < (b) ? (a) : (b))

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Run argv; its output goes to `out` (len bytes, NUL-terminated) when out is
 * not NULL, else to stderr (or nowhere when quiet). Exit status or -1. */
static int run_capture(char *const argv[], int quiet, char *out, size_t len)
{
    int pfd[2] = {-1, -1};
    int wstatus;

    if (out != NULL && pipe2(pfd, O_CLOEXEC) != 0) {
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        if (out != NULL) {
            close(pfd[0]);
            close(pfd[1]);
        }
        return -1;
    }
    if (pid == 0) {
        int fd = out != NULL ? pfd[1] : quiet ? open("/dev/null", O_WRONLY) : STDERR_FILENO;
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        execvp(argv[0], argv);
        fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    size_t got     = 0;
    int pidfd      = (int)syscall(SYS_pidfd_open, pid, 0);
    int done       = pidfd < 0; /* without a pidfd: waitpid() below, unbounded */
    int outfd      = out != NULL ? pfd[0] : -1;
    uint64_t until = mono_ms() + CKS_NETNS_CMD_MS;
    if (out != NULL) {
        close(pfd[1]);
        out[0] = '\0';
    }
    /* read its output (if captured) until it exits, at most CKS_NETNS_CMD_MS */
    while (!done && mono_ms() < until) {
        struct pollfd p[2] = {{.fd = pidfd, .events = POLLIN}, {.fd = outfd, .events = POLLIN}};
        int r = poll(p, 2, (int)(until - mono_ms()));
        if (r < 0 && errno != EINTR) {
            break;
        }
        if (p[1].revents != 0) {
            char buf[512];
            ssize_t n = read(outfd, buf, sizeof(buf));
            if (n <= 0) {
                outfd = -1; /* end of its output: wait for the exit only */
            } else if (got + 1 < len) {
                size_t c = CKS_NETNS_MIN((size_t)n, len - 1 - got);
                memcpy(out + got, buf, c);
                got += c;
                out[got] = '\0';
            }
        }
        done = (p[0].revents & POLLIN) != 0;
    }
    if (!done) {
        fprintf(stderr, "%s did not finish in %d ms: SIGKILL\n", argv[0], CKS_NETNS_CMD_MS);
        kill(pid, SIGKILL);
    }
    if (pidfd >= 0) {
        close(pidfd);
    }
    if (out != NULL) {
        close(pfd[0]);
    }
    if (waitpid(pid, &wstatus, 0) != pid) {
        return -1;
    }
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
}

int cks_test_netns_run(char *const argv[], int quiet)
{
    return run_capture(argv, quiet, NULL, 0);
}

/* Run a command given as words, NULL-terminated; 0 when it exits with 0. */
static int cmd(int quiet, const char *first, ...)
{
    char *argv[32];
    size_t n = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a != NULL && n < 31; a = va_arg(ap, const char *)) {
        argv[n++] = (char *)a;
    }
    va_end(ap);
    argv[n] = NULL;
    int st = run_capture(argv, quiet, NULL, 0);
    if (st != 0 && !quiet) {
        fprintf(stderr, "netns: command failed (%d):", st);
        for (size_t i = 0; i < n; i++) {
            fprintf(stderr, " %s", argv[i]);
        }
        fprintf(stderr, "\n");
    }
    return st == 0 ? 0 : -1;
}

/* Remove namespaces of earlier runs whose process is gone. */
static void reap_stale(void)
{
    DIR *d = opendir("/run/netns");
    struct dirent *e;
    if (d == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        char *end;
        if (strncmp(e->d_name, CKS_NETNS_PREFIX, strlen(CKS_NETNS_PREFIX)) != 0) {
            continue;
        }
        long pid = strtol(e->d_name + strlen(CKS_NETNS_PREFIX), &end, 10);
        if (pid <= 0 || *end != '-') {
            continue;
        }
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) { /* that process is gone */
            fprintf(stderr, "netns: removing %s (its test, pid %ld, is gone)\n", e->d_name, pid);
            cmd(1, "ip", "netns", "del", e->d_name, NULL);
        }
    }
    closedir(d);
}

/* Bridge port of a host (its name in the bridge namespace). */
static void port_name(int host, char *buf, size_t len)
{
    if (host == CKS_TEST_NETNS_CLIENT) {
        snprintf(buf, len, "pc");
    } else {
        snprintf(buf, len, "p%d", host);
    }
}

/* Plug namespace ns into the bridge through port `port`, with address addr. */
static int plug(cks_test_netns_t *t, const char *ns, const char *port, const char *addr)
{
    char cidr[32];
    snprintf(cidr, sizeof(cidr), "%s/24", addr);
    if (cmd(0, "ip", "-n", t->bridge, "link", "add", port, "type", "veth", "peer", "name",
            "eth0", "netns", ns, NULL) != 0 ||
        cmd(0, "ip", "-n", t->bridge, "link", "set", port, "master", "br0", NULL) != 0 ||
        cmd(0, "ip", "-n", t->bridge, "link", "set", port, "up", NULL) != 0 ||
        cmd(0, "ip", "-n", ns, "addr", "add", cidr, "dev", "eth0", NULL) != 0 ||
        cmd(0, "ip", "-n", ns, "link", "set", "eth0", "up", NULL) != 0 ||
        cmd(0, "ip", "-n", ns, "link", "set", "lo", "up", NULL) != 0) {
        return -1;
    }
    return 0;
}

static int add_ns(cks_test_netns_t *t, const char *name, char *why, size_t why_len)
{
    char out[256];
    char *argv[] = {"ip", "netns", "add", (char *)name, NULL};
    if (run_capture(argv, 0, out, sizeof(out)) != 0) {
        out[strcspn(out, "\n")] = '\0';
        snprintf(why, why_len, "ip netns add %s failed: %s", name, out);
        return -1;
    }
    t->created = 1;
    return 0;
}

int cks_test_netns_create(cks_test_netns_t *t, size_t nhosts, char *why, size_t why_len)
{
    memset(t, 0, sizeof(*t));
    t->orig_fd = -1;
    if (nhosts == 0 || nhosts > CKS_TEST_NETNS_MAX_HOSTS) {
        snprintf(why, why_len, "%zu hosts: want 1 .. %d", nhosts, CKS_TEST_NETNS_MAX_HOSTS);
        return -1;
    }
    if (geteuid() != 0) {
        snprintf(why, why_len, "not root: network namespaces need CAP_NET_ADMIN");
        return -1;
    }
    char *ipv[] = {"ip", "-V", NULL}, *brv[] = {"bridge", "-V", NULL};
    if (cks_test_netns_run(ipv, 1) != 0 || cks_test_netns_run(brv, 1) != 0) {
        snprintf(why, why_len, "iproute2 (ip, bridge) is not installed");
        return -1;
    }
    reap_stale();
    t->nhosts = nhosts;
    snprintf(t->prefix, sizeof(t->prefix), CKS_NETNS_PREFIX "%d", (int)getpid());
    snprintf(t->bridge, sizeof(t->bridge), "%s-br", t->prefix);
    snprintf(t->client, sizeof(t->client), "%s-c", t->prefix);
    snprintf(t->client_addr, sizeof(t->client_addr), "10.77.0.2");
    for (size_t i = 0; i < nhosts; i++) {
        snprintf(t->host[i], sizeof(t->host[i]), "%s-s%zu", t->prefix, i);
        snprintf(t->host_addr[i], sizeof(t->host_addr[i]), "10.77.0.%zu", 10 + i);
        t->host_ns_p[i]   = t->host[i];
        t->host_addr_p[i] = t->host_addr[i];
    }
    if (add_ns(t, t->bridge, why, why_len) != 0 || add_ns(t, t->client, why, why_len) != 0) {
        goto err_destroy;
    }
    for (size_t i = 0; i < nhosts; i++) {
        if (add_ns(t, t->host[i], why, why_len) != 0) {
            goto err_destroy;
        }
    }
    if (cmd(0, "ip", "-n", t->bridge, "link", "add", "br0", "type", "bridge", NULL) != 0 ||
        cmd(0, "ip", "-n", t->bridge, "link", "set", "br0", "up", NULL) != 0 ||
        plug(t, t->client, "pc", t->client_addr) != 0) {
        snprintf(why, why_len, "cannot build the bridge or veth pairs (see stderr)");
        goto err_destroy;
    }
    for (size_t i = 0; i < nhosts; i++) {
        char port[16];
        port_name((int)i, port, sizeof(port));
        if (plug(t, t->host[i], port, t->host_addr[i]) != 0) {
            snprintf(why, why_len, "cannot plug host %zu into the bridge (see stderr)", i);
            goto err_destroy;
        }
    }
    return 0;

err_destroy:
    cks_test_netns_destroy(t);
    return -1;
}

void cks_test_netns_destroy(cks_test_netns_t *t)
{
    cks_test_netns_leave(t);
    if (!t->created) {
        return;
    }
    /* deleting a namespace deletes its interfaces, and a veth pair goes with
     * either of its ends; a namespace that does not exist is no error here */
    cmd(1, "ip", "netns", "del", t->client, NULL);
    for (size_t i = 0; i < t->nhosts; i++) {
        cmd(1, "ip", "netns", "del", t->host[i], NULL);
    }
    cmd(1, "ip", "netns", "del", t->bridge, NULL);
    t->created = 0;
}

/* Async-signal-safe: umount2() and unlink() only (iproute2's netns del). */
static void remove_one(const char *name)
{
    char path[128] = "/run/netns/";
    size_t n = strlen(path);
    for (size_t i = 0; name[i] != '\0' && n + 1 < sizeof(path); i++) {
        path[n++] = name[i];
    }
    path[n] = '\0';
    umount2(path, MNT_DETACH);
    unlink(path);
}

void cks_test_netns_remove_now(cks_test_netns_t *t)
{
    if (!t->created) {
        return;
    }
    remove_one(t->client);
    for (size_t i = 0; i < t->nhosts; i++) {
        remove_one(t->host[i]);
    }
    remove_one(t->bridge);
    t->created = 0;
}

int cks_test_netns_enter_client(cks_test_netns_t *t)
{
    char path[128];
    if (t->orig_fd >= 0) {
        return 0;
    }
    t->orig_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof(path), "/run/netns/%s", t->client);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (t->orig_fd < 0 || fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "netns: cannot enter %s: %s\n", t->client, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        if (t->orig_fd >= 0) {
            close(t->orig_fd);
        }
        t->orig_fd = -1;
        return -1;
    }
    close(fd);
    return 0;
}

int cks_test_netns_leave(cks_test_netns_t *t)
{
    int rc = 0;
    if (t->orig_fd < 0) {
        return 0;
    }
    if (setns(t->orig_fd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "netns: cannot go back to the first namespace: %s\n", strerror(errno));
        rc = -1;
    }
    close(t->orig_fd);
    t->orig_fd = -1;
    return rc;
}

static int port_state(cks_test_netns_t *t, int host, const char *state)
{
    char port[16];
    if (host != CKS_TEST_NETNS_CLIENT && (host < 0 || (size_t)host >= t->nhosts)) {
        return -1;
    }
    port_name(host, port, sizeof(port));
    return cmd(0, "bridge", "-n", t->bridge, "link", "set", "dev", port, "state", state, NULL);
}

int cks_test_netns_enter_host(cks_test_netns_t *t, size_t host)
{
    char path[128];
    if (host >= t->nhosts) {
        return -1;
    }
    snprintf(path, sizeof(path), "/run/netns/%s", t->host[host]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "netns: cannot enter %s: %s\n", t->host[host], strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    close(fd);
    return 0;
}

int cks_test_netns_hide(cks_test_netns_t *t, size_t host, int hide)
{
    char dst[24];
    if (host >= t->nhosts) {
        return -1;
    }
    snprintf(dst, sizeof(dst), "%s/32", t->host_addr[host]);
    /* a blackhole route in the client's namespace: its packets to the host
     * are dropped there, silently; everyone else still reaches the host */
    return cmd(0, "ip", "-n", t->client, "route", hide ? "add" : "del", "blackhole", dst, NULL);
}

int cks_test_netns_only_port(cks_test_netns_t *t, size_t host, unsigned port)
{
    char rules[320];
    if (host >= t->nhosts || port > 65535) {
        return -1;
    }
    if (port == 0) {
        return cmd(1, "ip", "netns", "exec", t->host[host], "nft", "delete", "table", "inet",
                   "ckst", NULL);
    }
    /* stateful, as a host firewall is: the host's own connections (and
     * those to itself) work, one from another host to any other port gets
     * no answer */
    snprintf(rules, sizeof(rules),
             "add table inet ckst; "
             "add chain inet ckst in { type filter hook input priority 0; policy accept; }; "
             "add rule inet ckst in iif lo accept; "
             "add rule inet ckst in ct state established,related accept; "
             "add rule inet ckst in tcp dport != %u drop", port);
    return cmd(0, "ip", "netns", "exec", t->host[host], "nft", rules, NULL);
}

int cks_test_netns_cut(cks_test_netns_t *t, int host)
{
    return port_state(t, host, "0"); /* disabled: the bridge drops its frames */
}

int cks_test_netns_heal(cks_test_netns_t *t, int host)
{
    return port_state(t, host, "3"); /* forwarding */
}

int cks_test_netns_shape(cks_test_netns_t *t, int host, unsigned mbit)
{
    char port[16], rate[32];
    const char *ns;
    if (host == CKS_TEST_NETNS_CLIENT) {
        ns = t->client;
    } else if (host >= 0 && (size_t)host < t->nhosts) {
        ns = t->host[host];
    } else {
        return -1;
    }
    port_name(host, port, sizeof(port));
    if (mbit == 0) {
        cmd(1, "tc", "-n", t->bridge, "qdisc", "del", "dev", port, "root", NULL);
        cmd(1, "tc", "-n", ns, "qdisc", "del", "dev", "eth0", "root", NULL);
        return 0;
    }
    snprintf(rate, sizeof(rate), "%umbit", mbit);
    /* towards the host (the bridge port's egress) and from it (its eth0's) */
    if (cmd(0, "tc", "-n", t->bridge, "qdisc", "replace", "dev", port, "root", "tbf", "rate",
            rate, "burst", "64kb", "latency", "200ms", NULL) != 0 ||
        cmd(0, "tc", "-n", ns, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate,
            "burst", "64kb", "latency", "200ms", NULL) != 0) {
        return -1;
    }
    return 0;
}

int cks_test_netns_eth0_bytes(uint64_t *rx_p, uint64_t *tx_p)
{
    return cks_test_netns_eth0_bytes_of(0, rx_p, tx_p);
}

int cks_test_netns_eth0_bytes_of(pid_t pid, uint64_t *rx_p, uint64_t *tx_p)
{
    char path[64];
    if (pid > 0) {
        snprintf(path, sizeof(path), "/proc/%d/net/dev", (int)pid);
    } else {
        snprintf(path, sizeof(path), "/proc/thread-self/net/dev");
    }
    FILE *f = fopen(path, "r");
    char line[512];
    int found = 0;
    if (f == NULL) {
        return -1;
    }
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        unsigned long long rx, tx, skip;
        char *colon = strchr(line, ':');
        char *name  = line + strspn(line, " ");
        if (colon == NULL || strncmp(name, "eth0:", 5) != 0) {
            continue;
        }
        /* rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes */
        if (sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &rx, &skip, &skip,
                   &skip, &skip, &skip, &skip, &skip, &tx) == 9) {
            *rx_p = rx;
            *tx_p = tx;
            found = 1;
        }
    }
    fclose(f);
    return found ? 0 : -1;
}
