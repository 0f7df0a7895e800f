/*
 * tools/spawn (cks_spawn.h): children started with /bin/sh scripts that
 * stand in for a server. The listening line gives the port (after other
 * lines, split across writes, IPv6); a child that ends first gives ENDED, a
 * silent one TIMEOUT, a line without a port OUTPUT; a failed start (no
 * binary, no namespace) leaves no child and no descriptor; the child gets
 * the extra environment once per name, /dev/null for stdin, none of our
 * descriptors, default SIGPIPE, and dies with the process that started it.
 * Every wait is bounded (by the call's own bound, under the suite's
 * timeout); no test measures time.
 */
#include "cks_spawn.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS 20000 /* bound of a wait that must end early */

TestSuite(spawn, .timeout = 60);

/* Start /bin/sh -c script with its stdout on a pipe (out_fd). */
static cks_spawn_status_t sh_start(const char *script, uint64_t more_fields,
                                   const cks_spawn_params_t *more, cks_spawn_t *sp)
{
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    cks_spawn_params_t p = more != NULL ? *more : (cks_spawn_params_t){0};
    char why[256] = "";
    p.field_mask = more_fields | CKS_SPAWN_FIELD_STDOUT;
    p.argv = argv;
    p.stdout_fd = CKS_SPAWN_PIPE;
    cks_spawn_status_t st = cks_spawn_start(&p, sp, why, sizeof(why));
    if (st != CKS_SPAWN_OK) {
        cr_log_info("start: %s (%s)", cks_spawn_status_string(st), why);
    }
    return st;
}

/* Everything on fd until end of file (at most len - 1 bytes, WAIT_MS):
 * bytes read, or -1 when the end did not come. */
static ssize_t read_to_eof(int fd, char *buf, size_t len)
{
    size_t used = 0;
    for (int i = 0; i < 1000; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, WAIT_MS) <= 0) {
            return -1;
        }
        ssize_t got = read(fd, buf + used, len - 1 - used);
        if (got <= 0 || used + (size_t)got == len - 1) {
            buf[used + (size_t)(got > 0 ? got : 0)] = '\0';
            return got == 0 ? (ssize_t)used : -1;
        }
        used += (size_t)got;
    }
    return -1;
}

static int fd_count(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    while (readdir(d) != NULL) {
        n++;
    }
    closedir(d);
    return n;
}

/* No child of ours is left, running or unreaped. */
static void expect_no_child(void)
{
    errno = 0;
    cr_expect_eq(waitpid(-1, NULL, WNOHANG), -1, "a child is left");
    cr_expect_eq(errno, ECHILD);
}

Test(spawn, listening_line_gives_the_port)
{
    cks_spawn_t sp;
    uint16_t port = 0;
    cr_assert_eq(
        sh_start("echo '[1700000000.0] [host:1] UCX  WARN  noise'; "
                 "echo ckstore-server listening on 127.0.0.1:4242; exec sleep 30",
                 0, NULL, &sp),
        CKS_SPAWN_OK);
    cr_expect_eq(cks_spawn_wait_listening(sp.out_fd, WAIT_MS, &port), CKS_SPAWN_OK);
    cr_expect_eq(port, 4242);
    int ws = cks_spawn_stop(&sp, SIGTERM, WAIT_MS);
    cr_expect(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGTERM, "status 0x%x", ws);
    cr_expect_eq(sp.pid, 0);
    cr_expect_eq(sp.out_fd, -1);
    expect_no_child();
}

Test(spawn, line_in_pieces_and_ipv6)
{
    cks_spawn_t sp;
    uint16_t port = 0;
    cr_assert_eq(sh_start("printf 'ckstore-server lis'; printf 'tening on [::1]:'; "
                          "printf '4243\\n'; exec sleep 30",
                          0, NULL, &sp),
                 CKS_SPAWN_OK);
    cr_expect_eq(cks_spawn_wait_listening(sp.out_fd, WAIT_MS, &port), CKS_SPAWN_OK);
    cr_expect_eq(port, 4243);
    cks_spawn_stop(&sp, SIGKILL, WAIT_MS);
    expect_no_child();
}

Test(spawn, ending_before_listening_is_ended)
{
    cks_spawn_t sp;
    cr_assert_eq(sh_start("echo starting; exit 3", 0, NULL, &sp), CKS_SPAWN_OK);
    cr_expect_eq(cks_spawn_wait_listening(sp.out_fd, WAIT_MS, NULL), CKS_SPAWN_ERR_ENDED);
    int ws = cks_spawn_stop(&sp, 0, WAIT_MS); /* end of file comes before its exit */
    cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 3, "status 0x%x", ws);
    expect_no_child();
}

Test(spawn, silence_times_out_and_the_child_runs_on)
{
    cks_spawn_t sp;
    cr_assert_eq(sh_start("echo not yet; exec sleep 30", 0, NULL, &sp), CKS_SPAWN_OK);
    cr_expect_eq(cks_spawn_wait_listening(sp.out_fd, 300, NULL), CKS_SPAWN_ERR_TIMEOUT);
    cr_expect_eq(kill(sp.pid, 0), 0, "the wait stopped the child");
    cr_expect_eq(cks_spawn_wait_listening(sp.out_fd, 0, NULL), CKS_SPAWN_ERR_TIMEOUT);
    cks_spawn_stop(&sp, SIGKILL, WAIT_MS);
    expect_no_child();
}

Test(spawn, line_without_port_is_an_output_error)
{
    cks_spawn_t sp;
    cr_assert_eq(sh_start("echo ckstore-server listening on 127.0.0.1:; exec sleep 30", 0,
                          NULL, &sp),
                 CKS_SPAWN_OK);
    cr_expect_eq(cks_spawn_wait_listening(sp.out_fd, WAIT_MS, NULL),
                 CKS_SPAWN_ERR_OUTPUT);
    cks_spawn_stop(&sp, SIGKILL, WAIT_MS);
}

Test(spawn, stop_kills_a_child_that_ignores_the_signal)
{
    cks_spawn_t sp;
    cr_assert_eq(
        sh_start("trap '' TERM; echo ckstore-server listening on h:1; exec sleep 30", 0,
                 NULL, &sp),
        CKS_SPAWN_OK);
    cr_assert_eq(cks_spawn_wait_listening(sp.out_fd, WAIT_MS, NULL), CKS_SPAWN_OK);
    int ws = cks_spawn_stop(&sp, SIGTERM, 200);
    cr_expect(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "status 0x%x", ws);
    expect_no_child();
}

Test(spawn, missing_program_leaves_nothing)
{
    char *argv[] = {"ckstore-server", NULL};
    cks_spawn_params_t p = {.field_mask = CKS_SPAWN_FIELD_PATH | CKS_SPAWN_FIELD_STDOUT,
                            .argv = argv,
                            .path = "/nonexistent/ckstore-server",
                            .stdout_fd = CKS_SPAWN_PIPE};
    cks_spawn_t sp = {.pid = 12345, .out_fd = 54321};
    char why[256] = "";
    int fds = fd_count();
    cr_expect_eq(cks_spawn_start(&p, &sp, why, sizeof(why)), CKS_SPAWN_ERR_EXEC);
    cr_expect_eq(errno, ENOENT);
    cr_expect(strstr(why, "exec /nonexistent/ckstore-server") != NULL, "why: %s", why);
    cr_expect(sp.pid == 12345 && sp.out_fd == 54321, "*sp_p written on an error");
    cr_expect_eq(fd_count(), fds, "a descriptor is left");
    expect_no_child();
}

Test(spawn, missing_namespace_leaves_nothing)
{
    cks_spawn_t sp;
    cks_spawn_params_t ns = {.netns_path = "/nonexistent/netns"};
    int fds = fd_count();
    cr_expect_eq(sh_start("exit 0", CKS_SPAWN_FIELD_NETNS, &ns, &sp), CKS_SPAWN_ERR_SYS);
    cr_expect_eq(errno, ENOENT);
    cr_expect_eq(fd_count(), fds, "a descriptor is left");
    expect_no_child();
}

/* Our own namespace, entered with setns (no namespace is made): root gets
 * in, anyone else is refused by setns, reported as ERR_EXEC. */
Test(spawn, namespace_is_entered_before_exec)
{
    cks_spawn_t sp;
    cks_spawn_params_t ns = {.netns_path = "/proc/self/ns/net"};
    char ours[64] = "", theirs[128] = "";
    ssize_t n = readlink("/proc/self/ns/net", ours, sizeof(ours) - 1);
    cr_assert_gt(n, 0);
    cks_spawn_status_t st =
        sh_start("readlink /proc/$$/ns/net", CKS_SPAWN_FIELD_NETNS, &ns, &sp);
    if (geteuid() != 0) {
        cr_expect_eq(st, CKS_SPAWN_ERR_EXEC);
        cr_expect_eq(errno, EPERM);
        expect_no_child();
        return;
    }
    cr_assert_eq(st, CKS_SPAWN_OK);
    cr_expect_eq(read_to_eof(sp.out_fd, theirs, sizeof(theirs)), n + 1);
    theirs[n] = '\0';
    cr_expect_str_eq(theirs, ours);
    cks_spawn_stop(&sp, SIGKILL, WAIT_MS);
}

Test(spawn, environment_added_once_per_name)
{
    char *argv[] = {"/usr/bin/env", NULL};
    char *env[] = {"CKS_SPAWN_T_PORT=4244", "CKS_SPAWN_T_NEW=x", NULL};
    cks_spawn_params_t p = {.field_mask = CKS_SPAWN_FIELD_ENV | CKS_SPAWN_FIELD_STDOUT,
                            .argv = argv,
                            .env = env,
                            .stdout_fd = CKS_SPAWN_PIPE};
    cks_spawn_t sp;
    static char out[1 << 16];
    setenv("CKS_SPAWN_T_PORT", "1", 1);
    setenv("CKS_SPAWN_T_KEPT", "y", 1);
    cr_assert_eq(cks_spawn_start(&p, &sp, NULL, 0), CKS_SPAWN_OK);
    cr_assert_geq(read_to_eof(sp.out_fd, out, sizeof(out)), 0);
    cr_expect(strstr(out, "\nCKS_SPAWN_T_PORT=4244\n") != NULL, "%s", out);
    cr_expect(strstr(out, "CKS_SPAWN_T_PORT=1\n") == NULL, "the old value is there too");
    cr_expect(strstr(out, "\nCKS_SPAWN_T_NEW=x\n") != NULL);
    cr_expect(strstr(out, "\nCKS_SPAWN_T_KEPT=y\n") != NULL);
    int ws = cks_spawn_stop(&sp, 0, WAIT_MS); /* env closes stdout, then exits */
    cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "status 0x%x", ws);
}

/* A descriptor of ours without close-on-exec: the child must not keep it
 * (else our pipe would not see its end); stdin reads end of file. */
Test(spawn, no_descriptor_of_ours_and_stdin_from_dev_null)
{
    cks_spawn_t sp;
    int leak[2];
    uint16_t port = 0;
    cr_assert_eq(pipe(leak), 0);
    cr_assert_eq(sh_start("if read x; then p=1; else p=4245; fi; "
                          "echo ckstore-server listening on h:$p; exec sleep 30",
                          0, NULL, &sp),
                 CKS_SPAWN_OK);
    close(leak[1]);
    struct pollfd pf = {.fd = leak[0], .events = POLLIN};
    cr_expect_eq(poll(&pf, 1, 0), 1, "the child holds our pipe");
    cr_expect(pf.revents & POLLHUP);
    cr_expect_eq(cks_spawn_wait_listening(sp.out_fd, WAIT_MS, &port), CKS_SPAWN_OK);
    cr_expect_eq(port, 4245, "stdin is not /dev/null");
    close(leak[0]);
    cks_spawn_stop(&sp, SIGKILL, WAIT_MS);
}

Test(spawn, output_to_descriptors)
{
    int out[2], err[2];
    char *argv[] = {"/bin/sh", "-c", "echo out; echo err >&2", NULL};
    char buf[64];
    cr_assert_eq(pipe(out), 0);
    cr_assert_eq(pipe(err), 0);
    cks_spawn_params_t p = {.field_mask = CKS_SPAWN_FIELD_STDOUT | CKS_SPAWN_FIELD_STDERR,
                            .argv = argv,
                            .stdout_fd = out[1],
                            .stderr_fd = err[1]};
    cks_spawn_t sp;
    cr_assert_eq(cks_spawn_start(&p, &sp, NULL, 0), CKS_SPAWN_OK);
    cr_expect_eq(sp.out_fd, -1);
    close(out[1]);
    close(err[1]);
    cr_expect_eq(read_to_eof(out[0], buf, sizeof(buf)), 4);
    cr_expect_str_eq(buf, "out\n");
    cr_expect_eq(read_to_eof(err[0], buf, sizeof(buf)), 4);
    cr_expect_str_eq(buf, "err\n");
    close(out[0]);
    close(err[0]);
    cks_spawn_stop(&sp, SIGKILL, WAIT_MS);
}

/* SigIgn of the child, from /proc/PID/status. */
static unsigned long long sig_ignored(pid_t pid)
{
    char path[64], line[256];
    unsigned long long mask = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "SigIgn: %llx", &mask) == 1) {
            break;
        }
    }
    fclose(f);
    return mask;
}

Test(spawn, signals_reset_for_the_child)
{
    cks_spawn_t sp;
    cks_spawn_params_t fl = {.flags = CKS_SPAWN_IGNORE_SIGINT};
    signal(SIGPIPE, SIG_IGN); /* ours: not for the child */
    signal(SIGHUP, SIG_IGN);  /* ignored ones stay ignored */
    cr_assert_eq(sh_start("echo ckstore-server listening on h:1; exec sleep 30",
                          CKS_SPAWN_FIELD_FLAGS, &fl, &sp),
                 CKS_SPAWN_OK);
    cr_assert_eq(cks_spawn_wait_listening(sp.out_fd, WAIT_MS, NULL), CKS_SPAWN_OK);
    unsigned long long ign = sig_ignored(sp.pid); /* sleep's own, after the exec */
    cr_expect_eq(ign & (1ull << (SIGPIPE - 1)), 0, "SIGPIPE ignored: 0x%llx", ign);
    cr_expect_neq(ign & (1ull << (SIGHUP - 1)), 0, "SIGHUP not ignored: 0x%llx", ign);
    cr_expect_neq(ign & (1ull << (SIGINT - 1)), 0, "SIGINT not ignored: 0x%llx", ign);
    cks_spawn_stop(&sp, SIGKILL, WAIT_MS);
}

/* A middle process starts the child with its stdout on our pipe, sees it
 * listen and ends: the child is killed with it, so the pipe's last writer
 * is gone. */
Test(spawn, child_dies_with_its_parent)
{
    int out[2];
    char buf[256];
    int ws;
    cr_assert_eq(pipe(out), 0);
    pid_t mid = fork();
    cr_assert_geq(mid, 0);
    if (mid == 0) {
        char *argv[] = {"/bin/sh", "-c",
                        "echo ckstore-server listening on h:4246; exec sleep 30", NULL};
        cks_spawn_params_t p = {
            .field_mask = CKS_SPAWN_FIELD_STDOUT, .argv = argv, .stdout_fd = out[1]};
        cks_spawn_t sp;
        uint16_t port = 0;
        _exit(cks_spawn_start(&p, &sp, NULL, 0) == CKS_SPAWN_OK &&
                      cks_spawn_wait_listening(out[0], WAIT_MS, &port) == CKS_SPAWN_OK &&
                      port == 4246
                  ? 0
                  : 1);
    }
    close(out[1]);
    cr_assert_eq(waitpid(mid, &ws, 0), mid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "the middle process did not see its child listen");
    cr_expect_geq(read_to_eof(out[0], buf, sizeof(buf)), 0,
                  "the child outlived the process that started it");
    close(out[0]);
}
