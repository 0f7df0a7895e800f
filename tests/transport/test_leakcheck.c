/*
 * The leak checks can see a UCX object that ckstore forgets to release:
 * rkey_leak unpacks a remote key and leaves it (a leak that ckstore could
 * make in transport/rma.c), and LeakSanitizer, given tests/lsan.supp as the
 * sanitizer pass of scripts/test gives it, must report it. The control
 * destroys the key and must report nothing. Both unwinders are tried: the
 * fast one (frame pointers, which UCX's own code does not keep: the stack
 * stops at ucs_malloc) and the full one, which sees the UCX frames that an
 * entry of the file could name: none may match a leaked key.
 *
 * And one leak of that kind that the suppressions used to hide: a server
 * stopped while a client's region was mapped left the region's remote key
 * (and its copies of it) unreleased.
 *
 * Only a build with AddressSanitizer can check anything: elsewhere the tests
 * are skipped.
 */
#include "ckstore.h"
#include "cks_test.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define LC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LC_ASAN 1
#endif
#endif
#ifndef LC_ASAN
#define LC_ASAN 0
#endif

#define LC_LEAK_EXIT 23 /* LeakSanitizer's exit status, set below */
#define LC_OUT_MAX   (64 * 1024)

static char lc_out[LC_OUT_MAX];

static void lc_require_asan(void)
{
    if (!LC_ASAN) {
        cr_skip_test(
            "this build has no AddressSanitizer: configure with -DCKS_SANITIZE=ON");
    }
}

/* Run rkey_leak `mode` under tests/lsan.supp; its stdout and stderr go to
 * lc_out (cut at LC_OUT_MAX - 1 bytes). Returns its wait status. */
static int lc_run(const char *mode, int fast_unwind)
{
    char lsan[512];
    size_t got = 0;
    int pfd[2], wstatus = 0;
    ssize_t n;
    pid_t pid;

    snprintf(lsan, sizeof(lsan),
             "suppressions=%s:print_suppressions=1:fast_unwind_on_malloc=%d",
             CKS_LSAN_SUPP, fast_unwind);
    cr_assert_eq(pipe(pfd), 0);
    pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(pfd[1], STDOUT_FILENO);
        dup2(pfd[1], STDERR_FILENO);
        close(pfd[0]);
        close(pfd[1]);
        setenv("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=23", 1);
        setenv("LSAN_OPTIONS", lsan, 1);
        execl(CKS_RKEY_LEAK_BIN, "rkey_leak", mode, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    while ((n = read(pfd[0], lc_out + got, LC_OUT_MAX - 1 - got)) != 0) {
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            break;
        }
        got += (size_t)n;
        if (got == LC_OUT_MAX - 1) {
            char sink[4096]; /* drain the rest so that the child can exit */
            while (read(pfd[0], sink, sizeof(sink)) > 0) {
            }
            break;
        }
    }
    lc_out[got] = '\0';
    close(pfd[0]);
    cr_assert_eq(waitpid(pid, &wstatus, 0), pid);
    return wstatus;
}

static void lc_expect_leak(int fast_unwind)
{
    int st = lc_run("leak", fast_unwind);

    cr_assert(strstr(lc_out, "rkey_leak: unpacked a remote key") != NULL,
              "rkey_leak did not get as far as the key:\n%s", lc_out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == LC_LEAK_EXIT,
              "a forgotten remote key must fail the leak check (status %d):\n%s", st,
              lc_out);
    cr_assert(strstr(lc_out, "ERROR: LeakSanitizer: detected memory leaks") != NULL,
              "no leak report:\n%s", lc_out);
    if (!fast_unwind) {
        cr_assert(strstr(lc_out, "in ucp_ep_rkey_unpack") != NULL,
                  "the report does not name the unpack:\n%s", lc_out);
    }
}

Test(leakcheck, forgotten_rkey_is_reported, .timeout = 120)
{
    lc_require_asan();
    lc_expect_leak(0);
}

Test(leakcheck, forgotten_rkey_is_reported_with_fast_unwind, .timeout = 120)
{
    lc_require_asan();
    lc_expect_leak(1);
}

Test(leakcheck, destroyed_rkey_is_clean, .timeout = 120)
{
    lc_require_asan();
    for (int fast_unwind = 0; fast_unwind <= 1; fast_unwind++) {
        int st = lc_run("release", fast_unwind);
        cr_assert(strstr(lc_out, "rkey_leak: destroyed it") != NULL,
                  "rkey_leak did not get as far as the key:\n%s", lc_out);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the control must exit 0 (status %d, fast_unwind_on_malloc=%d):\n%s",
                  st, fast_unwind, lc_out);
        cr_assert(strstr(lc_out, "LeakSanitizer") == NULL,
                  "the control reported a leak (fast_unwind_on_malloc=%d):\n%s",
                  fast_unwind, lc_out);
    }
}

/* A region from cks_mem_alloc() is mapped by the server at once (its key
 * unpacked and kept on the connection). A SIGTERM with the client still
 * connected must leave no leak: cks_tp_worker_destroy() freed connections
 * that were still referenced without destroying their remote keys. */
Test(leakcheck, server_stopped_with_a_mapped_region_releases_its_key, .timeout = 120)
{
    cks_test_server_t srv;
    cks_version_info_t vi;
    cks_client_h cl;
    void *buf = NULL;
    char lsan[512];
    int st;

    lc_require_asan();
    /* the server inherits these: its leak check decides its exit status */
    snprintf(lsan, sizeof(lsan), "suppressions=%s:print_suppressions=1", CKS_LSAN_SUPP);
    setenv("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=23", 1);
    setenv("LSAN_OPTIONS", lsan, 1);
    cr_assert_eq(cks_test_server_start(&srv, 64u << 20), 0);
    cr_assert_eq(cks_test_connect(&srv, 30000, &cl), CKS_OK, "connect to %s", srv.addr);
    cr_assert_eq(cks_mem_alloc(cl, 1u << 20, &buf), CKS_OK);
    /* one round trip after it: the server has handled the mapping */
    cr_assert_eq(cks_version_stat(cl, "nojob", 1, &vi), CKS_ERR_NO_SUCH_JOB);

    st = cks_test_server_stop(&srv, SIGTERM);
    cr_assert_eq(cks_mem_free(cl, buf), CKS_OK);
    cks_client_destroy(cl); /* before the verdict: this process must not leak either */
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the server's exit status is %d (exit %d: a leak); its log: %s", st,
              LC_LEAK_EXIT, srv.log);
    cks_test_server_cleanup(&srv);
}
