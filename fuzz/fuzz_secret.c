/*
 * DESIGN: libFuzzer target for the secret file loader (cks_tp_secret_load()
 * in transport/auth.c, compiled into this executable with common/, with
 * coverage and ASan/UBSan). The input is the file's content: it is written
 * to a temporary file (a regular file, mode 0600, made once by
 * LLVMFuzzerInitialize() in $TMPDIR, else /dev/shm, and removed at exit),
 * which is then loaded by path, as a server or a client loads its secret.
 *
 * Properties checked; a violation aborts, so libFuzzer saves the input:
 *  - a file of 16 .. sizeof(key) - 1 bytes loads, and the secret is its
 *    bytes exactly; any other length is CKS_ERR_AUTH and leaves the output
 *    alone.
 * Files that are not regular, readable by others or missing are not
 * fuzzable content: tests/transport/test_wire.c covers them.
 *
 * Single-threaded, as libFuzzer calls it; with -jobs, each process has its
 * own file.
 */
#include "cks_tp.h"

#include "fuzz_util.h"

#include <string.h>
#include <sys/stat.h>

#define FZ_TARGET "fuzz_secret"

static char fs_path[4096];
static int fs_fd = -1;

static void fs_cleanup(void)
{
    if (fs_fd >= 0) {
        close(fs_fd);
        unlink(fs_path);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("TMPDIR");

    fz_init();
    if (dir == NULL || dir[0] == '\0') {
        /* memory: truncating and writing a file per input on a disk file
         * system is a hundred times slower */
        dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    }
    snprintf(fs_path, sizeof(fs_path), "%s/cks-fuzz-secret.XXXXXX", dir);
    fs_fd = mkstemp(fs_path); /* mode 0600 */
    if (fs_fd < 0 || fchmod(fs_fd, 0600) != 0) {
        FZ_FAIL("cannot make a temporary file %s", fs_path);
    }
    atexit(fs_cleanup);
    return 0;
}

static void fs_write(const uint8_t *data, size_t size)
{
    size_t off = 0;

    if (ftruncate(fs_fd, 0) != 0) {
        FZ_FAIL("ftruncate %s failed", fs_path);
    }
    while (off < size) {
        ssize_t n = pwrite(fs_fd, data + off, size - off, (off_t)off);
        if (n <= 0) {
            FZ_FAIL("write %s failed", fs_path);
        }
        off += (size_t)n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cks_tp_secret_t s, untouched;
    int want_ok = size >= 16 && size < sizeof(s.key);
    cks_status_t st;

    fs_write(data, size);
    memset(&s, 0xa5, sizeof(s));
    memcpy(&untouched, &s, sizeof(s));
    st = cks_tp_secret_load(fs_path, &s);
    if (st != CKS_OK) {
        if (st != CKS_ERR_AUTH) {
            FZ_FAIL("undocumented status %d", st);
        }
        if (want_ok) {
            FZ_FAIL("a file of %zu bytes refused", size);
        }
        if (memcmp(&s, &untouched, sizeof(s)) != 0) {
            FZ_FAIL("refused, but the output was written");
        }
        return 0;
    }
    if (!want_ok) {
        FZ_FAIL("a file of %zu bytes accepted", size);
    }
    if (s.len != size || memcmp(s.key, data, size) != 0) {
        FZ_FAIL("the secret (%zu bytes) is not the file's %zu bytes", s.len, size);
    }
    return 0;
}
