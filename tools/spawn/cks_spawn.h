/*
 * Starting a program as a child of the calling process, and waiting until a
 * ckstore-server says where it listens: the one way the test support
 * (tests/support), ckstore-bench's local cluster and its peers start
 * processes. Linked as the static library cks_spawn (libc only; test and
 * benchmark support, never part of libckstore).
 *
 * A started child:
 * - runs `path` (no PATH lookup) with `argv`, and the caller's environment
 *   with `env`'s NAME=VALUE pairs added (a pair replaces the same name);
 * - reads stdin from /dev/null; writes stdout and stderr where the params
 *   say (stdout may be a pipe whose read end the caller gets back);
 * - keeps no other descriptor of the caller (every one above 2 is closed);
 * - runs in the network namespace at `netns_path` when one is given
 *   (setns between fork and exec: needs CAP_SYS_ADMIN);
 * - is SIGKILLed when the thread that started it ends (PR_SET_PDEATHSIG),
 *   or at once when the caller has already ended;
 * - starts with the caller's signal mask, SIGPIPE at its default and every
 *   signal the caller catches at its default (ignored ones stay ignored,
 *   SIGINT too with CKS_SPAWN_IGNORE_SIGINT).
 * cks_spawn_start() returns once the child has exec'd the program, or with
 * the reason it could not (the namespace, the exec), the child reaped.
 *
 * Threads: any thread may call these; the child makes only
 * async-signal-safe calls between fork and exec, so a caller with threads
 * (UCX, Criterion) is safe. Every wait is bounded.
 */
#ifndef CKS_SPAWN_H
#define CKS_SPAWN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** What a call of this module ended with: 0 or negative. errno keeps the
 *  system's code for CKS_SPAWN_ERR_SYS and CKS_SPAWN_ERR_EXEC. */
typedef enum {
    CKS_SPAWN_OK = 0,
    CKS_SPAWN_ERR_SYS = -1,     /* a call of the caller's side failed (pipe, fork,
                                   open of /dev/null or the namespace, read) */
    CKS_SPAWN_ERR_EXEC = -2,    /* the child could not enter the namespace or exec */
    CKS_SPAWN_ERR_ENDED = -3,   /* its stdout closed before the line: it ended */
    CKS_SPAWN_ERR_TIMEOUT = -4, /* the line did not come in time */
    CKS_SPAWN_ERR_OUTPUT = -5,  /* the line came without a port */
} cks_spawn_status_t;

/** A few words for people ("ended before it listened", ...); never NULL. */
const char *cks_spawn_status_string(cks_spawn_status_t status);

/** Fields of cks_spawn_params_t that are set (bits are only appended). */
typedef enum {
    CKS_SPAWN_FIELD_PATH = 1u << 0,
    CKS_SPAWN_FIELD_ENV = 1u << 1,
    CKS_SPAWN_FIELD_STDOUT = 1u << 2,
    CKS_SPAWN_FIELD_STDERR = 1u << 3,
    CKS_SPAWN_FIELD_NETNS = 1u << 4,
    CKS_SPAWN_FIELD_FLAGS = 1u << 5,
} cks_spawn_field_t;

/** stdout_fd: a new pipe; its read end is cks_spawn_t.out_fd. */
#define CKS_SPAWN_PIPE (-2)
/** flags: the child ignores SIGINT (a ^C at the terminal is for the caller,
 *  which stops its children itself). */
#define CKS_SPAWN_IGNORE_SIGINT (1u << 0)

/** What to start. Every pointer is the caller's and only read during
 *  cks_spawn_start(). Unset fields (field_mask) take the defaults given. */
typedef struct {
    uint64_t field_mask;    /* cks_spawn_field_t bits */
    char *const *argv;      /* required: NULL-terminated, argv[0] included */
    const char *path;       /* the file executed; default argv[0] */
    char *const *env;       /* NAME=VALUE, NULL-terminated; default none */
    int stdout_fd;          /* CKS_SPAWN_PIPE or a descriptor; default ours */
    int stderr_fd;          /* a descriptor; default ours */
    const char *netns_path; /* e.g. /run/netns/NAME; default (or ""): ours */
    unsigned flags;         /* CKS_SPAWN_IGNORE_SIGINT; default 0 */
} cks_spawn_params_t;

/** A started child. The caller owns both: it reaps the pid (or calls
 *  cks_spawn_stop()) and closes out_fd. */
typedef struct {
    pid_t pid;  /* > 0 */
    int out_fd; /* read end of its stdout with CKS_SPAWN_PIPE (CLOEXEC), else -1 */
} cks_spawn_t;

/** Start p->argv as described at the top. On CKS_SPAWN_OK, *sp_p holds the
 *  child; on an error nothing is left (no child, no descriptor), *sp_p is
 *  untouched and `why` (why_len bytes; may be NULL) says what failed, e.g.
 *  "setns /run/netns/x: Operation not permitted". Blocks until the child
 *  exec'd (at most 10 s). */
cks_spawn_status_t cks_spawn_start(const cks_spawn_params_t *p, cks_spawn_t *sp_p,
                                   char *why, size_t why_len);

/** Read fd (a child's stdout) until a line with "ckstore-server listening
 *  on HOST:PORT" comes (other lines before it are skipped), at most
 *  timeout_ms (0: only what is there now). CKS_SPAWN_OK with the port in
 *  *port_p (may be NULL); else ERR_ENDED (end of file: the child ended or
 *  closed its stdout), ERR_TIMEOUT, ERR_OUTPUT (the line has no valid port)
 *  or ERR_SYS. Leaves the child running and fd open either way: the caller
 *  stops one that failed. Bytes after the line are consumed. */
cks_spawn_status_t cks_spawn_wait_listening(int fd, int timeout_ms, uint16_t *port_p);

/** Stop a child cks_spawn_start() made: send `sig` (0: none, to let one
 *  that ends by itself end), wait for it to end (at most timeout_ms),
 *  SIGKILL after that, reap it, close out_fd; *sp is cleared (pid 0,
 *  out_fd -1). Its wait status, or -1 when it could not be reaped. */
int cks_spawn_stop(cks_spawn_t *sp, int sig, int timeout_ms);

#endif
