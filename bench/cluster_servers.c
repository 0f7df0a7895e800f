/*
 * DESIGN: the local cluster's processes and files: N ckstore-server processes
 * (the binary next to ours, started by cks_spawn of tools/spawn) on
 * 127.0.0.1, ports picked at run time, N nodes in 3 racks, arenas in
 * /dev/shm named after our pid, LMDB in a mkdtemp directory; started by
 * waiting for each one's "listening" line on a pipe, killed by pid
 * (SIGKILL) to measure degraded restores, restarted on the same arena and
 * metadata, stopped by pid (SIGTERM, then SIGKILL) and their files removed,
 * whatever happens: also from the signal handler, which stops every process
 * of the run and removes the namespaces.
 * Never: leave a process we started running, or a file of ours in /dev/shm.
 */
#include "cluster_int.h"
#include "cks_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The context the signal handler stops (a handler takes no argument): set
 * by cl_install_signals() in the parent, never changed in a child. A sweep
 * point's context hangs off it (x->point) while the point runs. */
static cl_ctx_t *volatile cl_sig_ctx;

/* Remove a server's arena file and its metadata files (it is down). Only
 * unlink: also runs in the signal handler. */
void cl_server_wipe(const cl_server_t *s)
{
    static const char *const md_files[] = {"data.mdb", "lock.mdb"};
    char path[256];
    if (s->arena[0] != '\0') {
        unlink(s->arena);
    }
    for (unsigned f = 0; f < 2 && s->ddir[0] != '\0'; f++) {
        snprintf(path, sizeof(path), "%s/%s", s->ddir, md_files[f]);
        unlink(path);
    }
}

/* Only unlink/rmdir: also runs in the signal handler. */
void cl_remove_files(const cl_ctx_t *x)
{
    for (unsigned i = 0; i < x->nsrv; i++) {
        const cl_server_t *s = &x->srv[i];
        cl_server_wipe(s);
        if (s->ddir[0] != '\0') {
            rmdir(s->ddir);
        }
        if (s->log[0] != '\0') {
            unlink(s->log);
        }
    }
    if (x->map[0] != '\0' && x->dir[0] != '\0') {
        unlink(x->map);
    }
    if (x->dir[0] != '\0') {
        rmdir(x->dir);
    }
}

/* Every process of a context killed and reaped, its files and namespaces
 * removed: only async-signal-safe calls (the signal handler). */
static void cl_stop_now(cl_ctx_t *x)
{
    for (unsigned i = 0; i < x->nworkers; i++) {
        if (x->worker[i] > 0) {
            kill(x->worker[i], SIGKILL);
        }
    }
    for (unsigned i = 0; i < x->nsrv; i++) {
        if (x->srv[i].pid > 0) {
            kill(x->srv[i].pid, SIGKILL);
        }
    }
    if (x->have_child && x->child.pid > 0) {
        kill(x->child.pid, SIGKILL);
    }
    bench_peer_kill(&x->peer); /* memcached or redis-server, the /dev/shm peer's files */
    if (x->sweep_pid > 0) {
        kill(x->sweep_pid, SIGTERM); /* its own handler stops what it started */
        waitpid(x->sweep_pid, NULL, 0);
    }
    for (unsigned i = 0; i < x->nworkers; i++) {
        if (x->worker[i] > 0) {
            waitpid(x->worker[i], NULL, 0);
        }
    }
    for (unsigned i = 0; i < x->nsrv; i++) {
        if (x->srv[i].pid > 0) {
            waitpid(x->srv[i].pid, NULL, 0);
        }
    }
    if (x->have_child && x->child.pid > 0) {
        waitpid(x->child.pid, NULL, 0);
        if (x->child.arena[0] != '\0') {
            unlink(x->child.arena);
        }
    }
    cl_remove_files(x);
    if (x->net_up) {
        cks_test_netns_remove_now(&x->net); /* every process in them is gone */
    }
}

static void cl_on_signal(int sig)
{
    cl_ctx_t *x = cl_sig_ctx;
    if (x != NULL) {
        cl_stop_now(x);
        if (x->point != NULL) {
            cl_stop_now(x->point); /* in a sweep point's child: what it started */
        }
    }
    _exit(128 + sig);
}

void cl_install_signals(cl_ctx_t *x)
{
    struct sigaction sa;
    cl_sig_ctx = x;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = cl_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a dead peer shows as EPIPE */
}

int cl_find_server_bin(cl_ctx_t *x)
{
    if (bench_find_server_bin(x->o.server_bin, x->bin) != 0) {
        fprintf(stderr,
                "ckstore-bench: no ckstore-server binary (%s); use --server-bin\n",
                x->bin);
        return -1;
    }
    return 0;
}

/* Free TCP ports on 127.0.0.1 for the servers (released just before they
 * start). */
static int cl_pick_ports(cl_ctx_t *x, unsigned n)
{
    uint16_t ports[CL_MAX_SERVERS];
    if (bench_free_ports(n, ports) != 0) {
        return -1;
    }
    for (unsigned i = 0; i < n; i++) {
        x->srv[i].port = ports[i];
    }
    return 0;
}

static void cl_print_log(const cl_server_t *s)
{
    char buf[4096];
    size_t n;
    FILE *f = fopen(s->log, "r");
    if (f == NULL) {
        return;
    }
    fprintf(stderr, "--- server %u's log (%s) ---\n", s->id, s->log);
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        fwrite(buf, 1, n, stderr);
    }
    fclose(f);
}

/* Start one server (cks_spawn, tools/spawn); its stdout comes back on a
 * pipe, its stderr goes to its log file (ours with --verbose). Also used to
 * restart a killed server: the same command line, the same arena file and
 * data dir. */
int cl_server_spawn(cl_ctx_t *x, cl_server_t *s, uint64_t arena)
{
    char id[16], asize[32], enc[16], why[256];
    char *argv[24] = {x->bin,
                      "--cluster",
                      x->map,
                      "--id",
                      id,
                      "--arena-size",
                      asize,
                      "--arena-file",
                      s->arena,
                      "--data-dir",
                      s->ddir,
                      "--encoders",
                      enc,
                      "--log-level",
                      x->o.verbose ? "info" : "warn"};
    int logfd, n = 15;
    cks_spawn_t sp;

    snprintf(id, sizeof(id), "%u", s->id);
    snprintf(asize, sizeof(asize), "%lluM", (unsigned long long)(arena >> 20));
    snprintf(enc, sizeof(enc), "%u", x->o.encoders);
    if (x->o.repair_rate != NULL) {
        argv[n++] = "--repair-rate";
        argv[n++] = (char *)x->o.repair_rate;
    }
    if (x->o.copy_threads != NULL) {
        argv[n++] = "--copy-threads";
        argv[n++] = (char *)x->o.copy_threads;
    }
    if (x->o.coding_nice != NULL) {
        argv[n++] = "--coding-nice";
        argv[n++] = (char *)x->o.coding_nice;
    }
    argv[n] = NULL;

    logfd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd < 0) {
        fprintf(stderr, "ckstore-bench: %s: %s\n", s->log, strerror(errno));
        return -1;
    }
    cks_spawn_params_t p = {.field_mask = CKS_SPAWN_FIELD_STDOUT,
                            .argv = argv,
                            .stdout_fd = CKS_SPAWN_PIPE};
    if (!x->o.verbose) {
        p.field_mask |= CKS_SPAWN_FIELD_STDERR;
        p.stderr_fd = logfd;
    }
    if (s->netns_path[0] != '\0') { /* its "host" (--hosts): a namespace of its own */
        p.field_mask |= CKS_SPAWN_FIELD_NETNS;
        p.netns_path = s->netns_path;
    }
    cks_spawn_status_t st = cks_spawn_start(&p, &sp, why, sizeof(why));
    close(logfd);
    if (st != CKS_SPAWN_OK) {
        fprintf(stderr, "ckstore-bench: cannot start server %u: %s\n", s->id, why);
        return -1;
    }
    s->out_fd = sp.out_fd;
    s->pid = sp.pid;
    return 0;
}

/* Wait for the server's "listening" line (before the deadline). */
int cl_server_wait(const cl_server_t *s, double deadline)
{
    double left = deadline - bench_now();
    int ms = left <= 0 ? 0 : left < INT_MAX / 1000 ? (int)(left * 1000) + 1 : INT_MAX;
    cks_spawn_status_t st = cks_spawn_wait_listening(s->out_fd, ms, NULL);
    if (st == CKS_SPAWN_OK) {
        return 0;
    }
    if (st == CKS_SPAWN_ERR_TIMEOUT) {
        fprintf(stderr,
                "ckstore-bench: server %u (pid %d) did not say \"listening\" in "
                "time\n",
                s->id, (int)s->pid);
    } else if (st == CKS_SPAWN_ERR_ENDED) {
        fprintf(stderr, "ckstore-bench: server %u (pid %d) ended before it listened\n",
                s->id, (int)s->pid);
    } else {
        fprintf(stderr, "ckstore-bench: server %u (pid %d): %s\n", s->id, (int)s->pid,
                cks_spawn_status_string(st));
    }
    cl_print_log(s);
    return -1;
}

int cl_servers_respawn(cl_ctx_t *x, const unsigned *ids, unsigned n)
{
    double deadline = bench_now() + x->o.timeout_s + 10;
    for (unsigned d = 0; d < n; d++) {
        if (cl_server_spawn(x, &x->srv[ids[d]], x->o.arena) != 0) {
            return -1;
        }
    }
    for (unsigned d = 0; d < n; d++) {
        if (cl_server_wait(&x->srv[ids[d]], deadline) != 0) {
            return -1;
        }
    }
    return 0;
}

/* SIGKILL, and reap (bounded). */
void cl_server_kill(const cl_ctx_t *x, cl_server_t *s)
{
    if (s->pid <= 0) {
        return;
    }
    kill(s->pid, SIGKILL);
    if (!bench_wait_pid(s->pid, x->o.timeout_s, NULL)) {
        fprintf(stderr,
                "ckstore-bench: server %u (pid %d) did not die within %.0f s of "
                "SIGKILL\n",
                s->id, (int)s->pid, x->o.timeout_s);
    }
    s->pid = 0;
    if (s->out_fd >= 0) {
        close(s->out_fd);
        s->out_fd = -1;
    }
}

/* SIGTERM to all, wait, SIGKILL the ones left. */
void cl_servers_stop(cl_ctx_t *x)
{
    for (unsigned i = 0; i < x->nsrv; i++) {
        if (x->srv[i].pid > 0) {
            kill(x->srv[i].pid, SIGTERM);
        }
    }
    for (unsigned i = 0; i < x->nsrv; i++) {
        cl_server_t *s = &x->srv[i];
        int wstatus = 0;
        if (s->pid <= 0) {
            continue;
        }
        if (!bench_wait_pid(s->pid, x->o.timeout_s, &wstatus)) {
            fprintf(stderr,
                    "ckstore-bench: server %u (pid %d) did not stop within %.0f s of "
                    "SIGTERM: killed\n",
                    s->id, (int)s->pid, x->o.timeout_s);
            cl_server_kill(x, s);
            continue;
        }
        if (!(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
            fprintf(stderr, "ckstore-bench: server %u ended with status 0x%x\n", s->id,
                    wstatus);
            cl_print_log(s);
        }
        s->pid = 0;
        close(s->out_fd);
        s->out_fd = -1;
    }
}

int cl_cluster_start(cl_ctx_t *x, uint64_t arena)
{
    FILE *f;
    double deadline;

    snprintf(x->dir, sizeof(x->dir), "/tmp/ckstore-bench-cl-XXXXXX");
    if (mkdtemp(x->dir) == NULL) {
        fprintf(stderr, "ckstore-bench: mkdtemp: %s\n", strerror(errno));
        x->dir[0] = '\0';
        return -1;
    }
    x->nsrv = x->nmap = x->o.local;
    for (unsigned i = 0; i < x->nsrv; i++) {
        cl_server_t *s = &x->srv[i];
        s->id = i;
        s->out_fd = -1;
        snprintf(s->arena, sizeof(s->arena), "%s/ckstore-bench-cl-%d-%u.arena",
                 x->o.arena_dir, (int)getpid(), i);
        snprintf(s->ddir, sizeof(s->ddir), "%s/md%u", x->dir, i);
        snprintf(s->log, sizeof(s->log), "%s/server%u.log", x->dir, i);
        s->netns_path[0] = '\0';
        if (x->o.hosts) {
            snprintf(s->netns_path, sizeof(s->netns_path), "/run/netns/%s",
                     x->net.host[i]);
        }
        unlink(s->arena); /* a stale one of an earlier process with this pid */
    }
    if (cl_pick_ports(x, x->nsrv) != 0) {
        fprintf(stderr, "ckstore-bench: cannot find %u free ports\n", x->nsrv);
        return -1;
    }
    snprintf(x->map, sizeof(x->map), "%s/cluster.map", x->dir);
    if ((f = fopen(x->map, "w")) == NULL) {
        fprintf(stderr, "ckstore-bench: %s: %s\n", x->map, strerror(errno));
        return -1;
    }
    fprintf(
        f,
        "# ckstore-bench cluster: %u servers on this machine%s, %u nodes in %u racks\n",
        x->nsrv, x->o.hosts ? " (each in a network namespace of its own)" : "", x->nsrv,
        CL_RACKS);
    fprintf(f, "epoch 1\n");
    for (unsigned i = 0; i < x->nsrv; i++) {
        fprintf(f, "server %u %s:%u node=n%u rack=r%u\n", i,
                x->o.hosts ? x->net.host_addr[i] : "127.0.0.1", x->srv[i].port, i,
                i % CL_RACKS);
    }
    if (fclose(f) != 0) {
        return -1;
    }
    for (unsigned i = 0; i < x->nsrv; i++) {
        if (cl_server_spawn(x, &x->srv[i], arena) != 0) {
            return -1;
        }
    }
    /* they pre-fault their arenas in parallel; one deadline for all */
    deadline = bench_now() + x->o.timeout_s + (double)x->nsrv * 2;
    for (unsigned i = 0; i < x->nsrv; i++) {
        if (cl_server_wait(&x->srv[i], deadline) != 0) {
            return -1;
        }
    }
    return 0;
}

/* CPU seconds all live servers we started have used so far (-1: none). */
double cl_servers_cpu(const cl_ctx_t *x)
{
    double t = 0;
    int any = 0;
    for (unsigned i = 0; i < x->nsrv; i++) {
        double c = x->srv[i].pid > 0 ? bench_proc_cpu_s(x->srv[i].pid) : -1;
        if (c >= 0) {
            t += c;
            any = 1;
        }
    }
    return any ? t : -1;
}

/* Files of ours left in /dev/shm or --arena-dir (there should be none). */
unsigned cl_shm_leftovers(const cl_ctx_t *x)
{
    unsigned n = 0;
    char path[256];
    struct stat st;
    for (unsigned i = 0; i < CL_MAX_SERVERS; i++) {
        snprintf(path, sizeof(path), "%s/ckstore-bench-cl-%d-%u.arena", x->o.arena_dir,
                 (int)getpid(), i);
        if (stat(path, &st) == 0) {
            fprintf(stderr, "ckstore-bench: left behind: %s\n", path);
            n++;
        }
    }
    snprintf(path, sizeof(path), "/dev/shm/ckstore-bench-%d.arena", (int)getpid());
    if (stat(path, &st) == 0) {
        fprintf(stderr, "ckstore-bench: left behind: %s\n", path);
        n++;
    }
    return n;
}
