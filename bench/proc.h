/*
 * bench/proc: what the parts of ckstore-bench that run other processes
 * share: bounded reads and writes on pipes, waiting for a pid with a
 * deadline, free ports on 127.0.0.1, starting a program (fork + exec, dies
 * with us), what /proc says about a process (CPU seconds, resident memory)
 * and the machine (free memory, free /dev/shm), and the live progress line
 * on a terminal.
 *
 * Everything here is a tool, not a library: errors are reported once, where
 * they are found, on stderr, and the caller unwinds.
 */
#ifndef CKS_BENCH_PROC_H
#define CKS_BENCH_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** Read exactly n bytes before the deadline (bench_now() seconds). 0, or -1
 *  with errno (ETIMEDOUT, EPIPE at end of file). */
int bench_read_full(int fd, void *buf, size_t n, double deadline);
/** The same, calling idle(arg) between polls that do not wait. */
int bench_read_full_idle(int fd, void *buf, size_t n, double deadline,
                         void (*idle)(void *), void *arg);
/** Write all n bytes (of the n iovecs, which it changes); 0 or -1 with errno. */
int bench_write_full(int fd, const void *buf, size_t n);
struct iovec;
int bench_writev_full(int fd, struct iovec *iov, int n);
/** Remove a directory tree (nftw, no links followed). */
void bench_rm_tree(const char *path);
/** Wait for a child to end within timeout_s; 1 when it ended (reaped, its
 *  status in *wstatus_p when not NULL), 0 when it is still running. */
int bench_wait_pid(pid_t pid, double timeout_s, int *wstatus_p);
/** Stop a child by its pid: `sig`, then SIGKILL after timeout_s; reaped. */
void bench_stop_pid(pid_t pid, int sig, double timeout_s);

/** The ckstore-server binary into out[PATH_MAX]: `given` (--server-bin) when
 *  set, else next to ours (build tree: ../server/ckstore-server; installed:
 *  the same directory). 0 when it is executable, else -1. */
int bench_find_server_bin(const char *given, char *out);

/** n distinct free TCP ports on 127.0.0.1, at random below the kernel's
 *  ephemeral range (bound together, then released): a server restarted on
 *  its port finds it free. 0 or -1. */
int bench_free_ports(unsigned n, uint16_t *ports);
/** Connect to 127.0.0.1:port until it accepts, the deadline passes, or the
 *  process `pid` ends (0: not watched). 0 when it accepted. */
int bench_wait_port(uint16_t port, pid_t pid, double deadline);

/** Start argv[0] (a path: bench_which() finds one) with cks_spawn, stdout
 *  and stderr to log_fd (-1: ours), stdin from /dev/null, SIGINT ignored;
 *  the child dies with this process (PR_SET_PDEATHSIG) and keeps no
 *  descriptor of ours above 2. Returns the pid once it exec'd, or -1 (the
 *  reason on stderr). */
pid_t bench_spawn(char *const argv[], int log_fd);
/** The full path of a program in PATH (or argv0 itself when it has a '/'),
 *  into path; 0 when found and executable. */
int bench_which(const char *name, char *path, size_t len);

/** CPU seconds (user + system) process `pid` and its reaped children have
 *  used so far, from /proc/PID/stat; -1 when unknown. */
double bench_proc_cpu_s(pid_t pid);
/** Resident memory of `pid` from /proc/PID/status: total, anonymous and
 *  shared memory (tmpfs, SysV, /dev/shm files) in bytes. 0 or -1. */
int bench_proc_rss(pid_t pid, uint64_t *rss_p, uint64_t *anon_p, uint64_t *shmem_p);

/** MemAvailable of /proc/meminfo in bytes; 0 when unknown. */
uint64_t bench_mem_available(void);
/** Free bytes in /dev/shm; 0 when unknown. */
uint64_t bench_shm_free(void);

/** A progress line on stderr, rewritten in place; only when stderr is a
 *  terminal (isatty), so that logs and pipes stay clean. */
void bench_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/** Erase the progress line (before printing anything else). */
void bench_progress_clear(void);

#endif
