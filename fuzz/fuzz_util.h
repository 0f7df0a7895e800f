/*
 * Shared by the fuzz targets: how a target reports a broken property.
 *
 * The code under test logs every refused input with cks_error() on
 * stderr, and scripts/fuzz runs the targets that log with
 * -close_fd_mask=2 so that those lines go nowhere. libFuzzer calls
 * LLVMFuzzerInitialize() before it closes stderr: fz_init() keeps a copy
 * of it there, and FZ_FAIL() writes to that copy, so that the reason for
 * an abort is still printed next to libFuzzer's report.
 */
#ifndef CKS_FUZZ_UTIL_H
#define CKS_FUZZ_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int fz_err_fd = STDERR_FILENO;

static inline void fz_init(void)
{
    int fd = dup(STDERR_FILENO);

    if (fd >= 0) {
        fz_err_fd = fd;
    }
}

__attribute__((format(printf, 2, 3), noreturn)) static inline void
fz_fail(const char *target, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    int n = snprintf(msg, sizeof(msg), "%s: property violated: ", target);

    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(msg)) {
        vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    }
    va_end(ap);
    dprintf(fz_err_fd, "%s\n", msg);
    abort();
}

#define FZ_FAIL(...) fz_fail(FZ_TARGET, __VA_ARGS__)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
