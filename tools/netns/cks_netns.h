/*
 * A private network of "hosts" made of network namespaces, for the partition
 * tests (tests/support) and `ckstore-bench cluster --hosts` (bench/), which
 * link it as the static library cks_netns (the names keep their cks_test_
 * prefix: it is test and benchmark support, never part of libckstore). One namespace per server host and one for the client, each
 * with one interface, eth0, plugged by a veth pair into a bridge that lives in
 * a namespace of its own:
 *
 *     ckst<pid>-s0 eth0 10.77.0.10 ── p0 ┐
 *     ckst<pid>-s1 eth0 10.77.0.11 ── p1 ┤ br0 in ckst<pid>-br
 *     ...                                │
 *     ckst<pid>-c  eth0 10.77.0.2  ── pc ┘
 *
 * Nothing is created in, or changed of, the caller's own namespace: every
 * link is made inside these namespaces, and the addresses exist only there.
 * Names carry the pid of the test process, so parallel runs do not collide,
 * and namespaces left by a process that no longer exists are removed by
 * cks_test_netns_create(). Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and
 * iproute2 (`ip`, `bridge`; `tc` for shaping; `nft` for a host's port filter).
 *
 * Links are cut at the bridge: the host's bridge port is disabled, so the
 * bridge drops every frame to and from it while both ends of the veth pair
 * keep their carrier - a silent partition, like a switch that stops
 * forwarding (no reset, no ICMP, no link-down event reaches the host).
 */
#ifndef CKS_NETNS_H
#define CKS_NETNS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CKS_TEST_NETNS_MAX_HOSTS 16
/** Host index of the client in cut/heal/shape calls. */
#define CKS_TEST_NETNS_CLIENT (-1)

typedef struct {
    size_t nhosts;
    int created;                                   /* namespaces exist */
    int orig_fd;                                   /* caller's namespace while in the client's; -1 */
    char prefix[32];                               /* "ckst<pid>" */
    char bridge[48];                               /* namespace of the bridge */
    char client[48];                               /* the client's namespace */
    char client_addr[16];
    char host[CKS_TEST_NETNS_MAX_HOSTS][48];       /* namespace of host i */
    char host_addr[CKS_TEST_NETNS_MAX_HOSTS][16];  /* its IPv4 address */
    const char *host_ns_p[CKS_TEST_NETNS_MAX_HOSTS];   /* host[i], as an array of pointers */
    const char *host_addr_p[CKS_TEST_NETNS_MAX_HOSTS]; /* host_addr[i], likewise */
} cks_test_netns_t;

/** Build the network above with `nhosts` server hosts. Returns 0, or -1 with
 *  the reason in why (e.g. "not root", "ip netns add failed: ...") after
 *  removing whatever it had made: the caller skips its test. */
int cks_test_netns_create(cks_test_netns_t *t, size_t nhosts, char *why, size_t why_len);
/** Leave the client namespace if the caller is in it, and remove every
 *  namespace (and with them every link) this run created. Idempotent. */
void cks_test_netns_destroy(cks_test_netns_t *t);

/** Move the calling thread into the client namespace (threads it creates
 *  later are born there). 0 or -1. */
int cks_test_netns_enter_client(cks_test_netns_t *t);
/** Back to the namespace the caller was in before enter_client(). */
int cks_test_netns_leave(cks_test_netns_t *t);

/** Move the calling thread into host `host`'s namespace for good (a thread of
 *  its own that acts as a process on that host: threads it creates later are
 *  born there). 0 or -1. */
int cks_test_netns_enter_host(cks_test_netns_t *t, size_t host);
/** Hide host `host` from the client namespace only (hide 1: a blackhole
 *  route to its address there; 0: removed): the client cannot reach it,
 *  every other host still can. 0 or -1. */
int cks_test_netns_hide(cks_test_netns_t *t, size_t host, int hide);
/** Let host `host` take TCP connections only to `port` (its listening
 *  port), as a firewall that opens one port would: a connection from
 *  another host to any other port gets no answer (its SYNs are dropped);
 *  the host's own connections and loopback still work (an nftables rule in
 *  its namespace; needs `nft`). port 0 removes the rule. 0, or -1 when it
 *  cannot be set. */
int cks_test_netns_only_port(cks_test_netns_t *t, size_t host, unsigned port);
/** Cut host `host` (or CKS_TEST_NETNS_CLIENT) off the bridge, silently. */
int cks_test_netns_cut(cks_test_netns_t *t, int host);
/** Plug it back in. */
int cks_test_netns_heal(cks_test_netns_t *t, int host);
/** Limit the link of `host` to `mbit` Mbit/s in both directions (tc tbf), so
 *  that a transfer lasts long enough to be cut in its middle; 0 removes the
 *  limit. -1 when tc or tbf is not there. */
int cks_test_netns_shape(cks_test_netns_t *t, int host, unsigned mbit);

/** Bytes received and sent on eth0 of the namespace the calling thread is
 *  in (/proc/thread-self/net/dev): the client's, after enter_client(). */
int cks_test_netns_eth0_bytes(uint64_t *rx_p, uint64_t *tx_p);
/** The same for the namespace process `pid` is in (/proc/PID/net/dev), e.g.
 *  a server started in a host's namespace. 0 or -1. */
int cks_test_netns_eth0_bytes_of(pid_t pid, uint64_t *rx_p, uint64_t *tx_p);

/** Remove every namespace this run created with plain system calls only
 *  (what `ip netns del` does: detach the bind mount, unlink the name), so
 *  that a signal handler may call it once the processes inside are killed;
 *  a namespace goes away with its last process, its links with it. Does not
 *  leave the client namespace. */
void cks_test_netns_remove_now(cks_test_netns_t *t);

/** Run an argv (argv[0] looked up in PATH), output to stderr, bounded to
 *  10 s (then SIGKILL). Its exit status, or -1. `quiet` drops its output. */
int cks_test_netns_run(char *const argv[], int quiet);

#endif
