/*
 * DESIGN: ckstore-server's command line. Parses flags, builds the server and
 * runs its progress loop on the main thread until SIGTERM/SIGINT.
 */
#include "cks_server.h"

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ckstore-server [options]\n"
            "\n"
            "Storage server of the ckstore checkpoint store: keeps objects in a\n"
            "file-backed DRAM arena and their metadata in LMDB, and serves clients\n"
            "over UCX.\n"
            "\n"
            "  -a, --listen ADDR      IPv4 address to listen on (default 0.0.0.0, or the\n"
            "                         map's address for --id in a cluster)\n"
            "  -p, --port N           port (default 13337, or the map's; 0 picks one)\n"
            "  -c, --cluster FILE     cluster map (docs/CLUSTER_MAP.md): serve as a member\n"
            "                         of that erasure-coded cluster\n"
            "  -i, --id N             this server's id in the cluster map\n"
            "  -e, --encoders N       encoder threads (cluster; default 1)\n"
            "      --coding-nice N    run the encoder and repair decoder threads N nice\n"
            "                         levels below the server's others (0 to 19; default\n"
            "                         5; 0: the same): where cores are short, the copies\n"
            "                         clients wait on (STORED, restores) run first\n"
            "      --copy-threads N   threads that copy transfers of 2 MiB and more\n"
            "                         from or into clients' shared memory on this host\n"
            "                         (0 to 16; 0: none, the progress thread copies;\n"
            "                         default one per 4 CPUs, at most 8)\n"
            "      --max-conns N      client connections served at once; more are\n"
            "                         refused (default 1024; with --peer-secret, the\n"
            "                         servers of the map have room beyond it)\n"
            "      --max-pending N    replies in flight per connection: a peer that\n"
            "                         sends requests past it without reading its\n"
            "                         replies is disconnected (default 4096)\n"
            "      --reply-timeout S  disconnect a peer that takes none of its pending\n"
            "                         replies for S seconds (default 60)\n"
            "      --recv-timeout S   disconnect a peer whose payload (a put's or a\n"
            "                         chunk's bytes) has not arrived after S seconds\n"
            "                         plus 1 s per 16 MiB of it (default 30): its\n"
            "                         space is freed, the request fails\n"
            "      --stall-exit S     exit with status 75 when UCX has taken none of\n"
            "                         the server's own check messages for S seconds\n"
            "                         (default 30; 0: never): its receive path is\n"
            "                         stalled (a process on this host killed while\n"
            "                         it sent to this one); a supervisor that starts\n"
            "                         it again brings it back (catch-up and repair)\n"
            "  -S, --secret FILE      cluster secret (mode 0600): every client and peer\n"
            "                         must prove it before anything else (SECURITY.md)\n"
            "  -J, --job-secrets DIR  job secrets, one file per job name (mode 0600): a\n"
            "                         client that proves one is served that job only\n"
            "      --peer-secret FILE the servers' own secret (mode 0600, not given to\n"
            "                         clients; a cluster with --secret needs it): only\n"
            "                         servers that prove it may send server-to-server\n"
            "                         messages, and they do not count in --max-conns\n"
            "      --auth-timeout S   close a connection that has not authenticated\n"
            "                         within S seconds (with --secret; default 10)\n"
            "      --flush-dir DIR    durable tier: the one directory flushes write to\n"
            "                         (absolute path; it must exist); without it, the\n"
            "                         server refuses every flush\n"
            "      --flush-every N    with --flush-dir: flush each version whose number\n"
            "                         is a multiple of N once it commits (the version's\n"
            "                         coordinator starts it; every server needs the\n"
            "                         same --flush-dir; one a stop interrupted is\n"
            "                         done again when the server is back)\n"
            "      --flush-age S      with --flush-dir: flush a version once it commits\n"
            "                         when the newest flushed version of its job was\n"
            "                         sealed more than S seconds before (or none is\n"
            "                         flushed); the newest version is also flushed\n"
            "                         later, when that age passes without a commit\n"
            "                         (with --flush-every: either policy flushes)\n"
            "      --flush-keep N     with --flush-dir: after publishing a version,\n"
            "                         keep the N newest flushed versions of its job\n"
            "                         and remove older ones, but never one that a kept\n"
            "                         version reads objects from (default 0: keep\n"
            "                         all; the memory tier's retention is separate)\n"
            "      --flush-rate SIZE  most bytes per second that this server's flush\n"
            "                         writes, paced on its flush thread so that a\n"
            "                         snapshot meanwhile keeps its bandwidth\n"
            "                         (default 64M; 0: no cap)\n"
            "      --repair-rate SIZE most bytes per second that repair reads from\n"
            "                         other servers to rebuild this server's missing\n"
            "                         chunks while clients move data through this\n"
            "                         server (cluster; default 256M; 0: no cap)\n"
            "      --repair-idle-rate SIZE  the same while no client has moved data\n"
            "                         through it for 0.5 s (default 0: no cap)\n"
            "  -s, --arena-size SIZE  arena capacity, e.g. 512M, 8G (default 1G)\n"
            "  -f, --arena-file PATH  arena file (default /dev/shm/ckstore-<port>.arena)\n"
            "  -d, --data-dir DIR     LMDB directory (default ./ckstore-data)\n"
            "  -m, --md-map-size SIZE most metadata bytes (default 1G)\n"
            "  -n, --name NAME        name in logs (default ckstore-server)\n"
            "  -P, --port-file PATH   write the listening port there once serving\n"
            "  -l, --log-level LEVEL  error|warn|info|debug|trace (default info)\n"
            "  -h, --help             this text\n"
            "\n"
            "SIGTERM or SIGINT stops the server cleanly. After a crash, start it\n"
            "again with the same arena file and data directory: it re-attaches\n"
            "every sealed version and re-checks their CRCs before serving.\n");
}

/* An option's byte count (cks_size_parse): 1, or 0 with "bad <what> '<arg>'"
 * said. */
static int cks_opt_size(const char *arg, const char *what, uint64_t *v_p)
{
    if (cks_size_parse(arg, v_p) != CKS_OK) {
        fprintf(stderr, "ckstore-server: bad %s '%s'\n", what, arg);
        return 0;
    }
    return 1;
}

/* An option's rate in bytes/s: as cks_opt_size, 0 (unlimited) as
 * UINT64_MAX. */
static int cks_opt_rate(const char *arg, const char *what, uint64_t *v_p)
{
    if (!cks_opt_size(arg, what, v_p)) {
        return 0;
    }
    if (*v_p == 0) {
        *v_p = UINT64_MAX;
    }
    return 1;
}

/* An option's decimal number of at most `max` (as strtoul reads it, and
 * with a digit first when `digit_first`): 1, or 0 with
 * "bad <what> '<arg>'<hint>" said. */
static int cks_opt_ulong(const char *arg, unsigned long max, int digit_first, const char *what,
                         const char *hint, unsigned long *v_p)
{
    char *end;
    unsigned long v = strtoul(arg, &end, 10);
    if ((digit_first && (arg[0] < '0' || arg[0] > '9')) || *end != '\0' || v > max) {
        fprintf(stderr, "ckstore-server: bad %s '%s'%s\n", what, arg, hint);
        return 0;
    }
    *v_p = v;
    return 1;
}

/* A count 0..max where 0 means none: UINT_MAX in the params (whose 0 is the
 * default). */
static int cks_opt_none_or(const char *arg, unsigned long max, const char *what,
                           const char *hint, unsigned *v_p)
{
    unsigned long v;
    if (!cks_opt_ulong(arg, max, 1, what, hint, &v)) {
        return 0;
    }
    *v_p = v == 0 ? UINT_MAX : (unsigned)v;
    return 1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'a'},
        {"port", required_argument, NULL, 'p'},
        {"arena-size", required_argument, NULL, 's'},
        {"arena-file", required_argument, NULL, 'f'},
        {"data-dir", required_argument, NULL, 'd'},
        {"md-map-size", required_argument, NULL, 'm'},
        {"name", required_argument, NULL, 'n'},
        {"port-file", required_argument, NULL, 'P'},
        {"log-level", required_argument, NULL, 'l'},
        {"cluster", required_argument, NULL, 'c'},
        {"id", required_argument, NULL, 'i'},
        {"encoders", required_argument, NULL, 'e'},
        {"max-conns", required_argument, NULL, 1001},
        {"max-pending", required_argument, NULL, 1002},
        {"reply-timeout", required_argument, NULL, 1003},
        {"secret", required_argument, NULL, 'S'},
        {"job-secrets", required_argument, NULL, 'J'},
        {"peer-secret", required_argument, NULL, 1004},
        {"auth-timeout", required_argument, NULL, 1005},
        {"flush-dir", required_argument, NULL, 1006},
        {"flush-every", required_argument, NULL, 1007},
        {"repair-rate", required_argument, NULL, 1008},
        {"flush-rate", required_argument, NULL, 1009},
        {"flush-keep", required_argument, NULL, 1010},
        {"flush-age", required_argument, NULL, 1011},
        {"repair-idle-rate", required_argument, NULL, 1020},
        {"copy-threads", required_argument, NULL, 1021},
        {"recv-timeout", required_argument, NULL, 1022},
        {"coding-nice", required_argument, NULL, 1023},
        {"stall-exit", required_argument, NULL, 1024},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    cks_server_params_t p = {0};
    const char *port_file = NULL;
    char arena_default[128];
    cks_log_level_t level = CKS_LOG_INFO;
    cks_server_h server;
    cks_status_t status;
    unsigned long port = 13337, id = 0;
    int port_given = 0, id_given = 0;
    int c;

    /* A write to a closed stdout or stderr (a pipe whose reader left, e.g.
     * the process that started us and read our "listening" line) must fail
     * with EPIPE, not kill the server: UCX logs there (over TCP it logs
     * errors while peers connect). */
    signal(SIGPIPE, SIG_IGN);
    p.listen_addr    = NULL;
    p.arena_size     = 1ull << 30;
    p.data_dir       = "./ckstore-data";
    p.handle_signals = 1;
    if (getenv("CKS_LOG_LEVEL") != NULL) {
        level = cks_log_threshold;
    }
    while ((c = getopt_long(argc, argv, "a:p:s:f:d:m:n:P:l:c:i:e:S:J:h", opts, NULL)) != -1) {
        switch (c) {
            case 'a': p.listen_addr = optarg; break;
            case 'p':
                if (!cks_opt_ulong(optarg, 65535, 0, "port", "", &port)) {
                    return 2;
                }
                port_given = 1;
                break;
            case 'c': p.cluster_map = optarg; break;
            case 'i':
                if (!cks_opt_ulong(optarg, 65535, 0, "id", "", &id)) {
                    return 2;
                }
                id_given = 1;
                break;
            case 'e': p.encoders = (unsigned)atoi(optarg); break;
            case 1001: p.max_conns = (unsigned)atoi(optarg); break;
            case 1002: p.max_pending = (unsigned)atoi(optarg); break;
            case 1003: p.reply_timeout_s = (unsigned)atoi(optarg); break;
            case 1022: p.recv_timeout_s = (unsigned)atoi(optarg); break;
            case 1024:
                if (!cks_opt_none_or(optarg, 86400, "stall-exit", " (seconds, 0: never)",
                                     &p.stall_exit_s)) {
                    return 2;
                }
                break;
            case 'S': p.secret_file = optarg; break;
            case 'J': p.job_secrets = optarg; break;
            case 1004: p.peer_secret_file = optarg; break;
            case 1005: p.auth_timeout_s = (unsigned)atoi(optarg); break;
            case 1006: p.flush_dir = optarg; break;
            case 1007: p.flush_every = (unsigned)atoi(optarg); break;
            case 1008:
                if (!cks_opt_rate(optarg, "repair rate", &p.repair_rate)) {
                    return 2;
                }
                break;
            case 1021:
                if (!cks_opt_none_or(optarg, 16, "--copy-threads", " (0 to 16)",
                                     &p.copy_threads)) {
                    return 2;
                }
                break;
            case 1023:
                if (!cks_opt_none_or(optarg, 19, "--coding-nice", " (0 to 19)",
                                     &p.coding_nice)) {
                    return 2;
                }
                break;
            case 1020:
                if (!cks_opt_size(optarg, "repair idle rate", &p.repair_idle_rate)) {
                    return 2;
                }
                break;
            case 1011: {
                unsigned long v;
                if (!cks_opt_ulong(optarg, 100000000, 1, "--flush-age", " (seconds)", &v)) {
                    return 2;
                }
                p.flush_age_s = (unsigned)v;
                break;
            }
            case 1010: {
                unsigned long v;
                if (!cks_opt_ulong(optarg, 1000000, 1, "--flush-keep", "", &v)) {
                    return 2;
                }
                p.flush_keep = (unsigned)v;
                break;
            }
            case 1009:
                if (!cks_opt_rate(optarg, "flush rate", &p.flush_rate)) {
                    return 2;
                }
                break;
            case 's':
                if (!cks_opt_size(optarg, "arena size", &p.arena_size)) {
                    return 2;
                }
                break;
            case 'f': p.arena_file = optarg; break;
            case 'd': p.data_dir = optarg; break;
            case 'm':
                if (!cks_opt_size(optarg, "map size", &p.md_map_size)) {
                    return 2;
                }
                break;
            case 'n': p.name = optarg; break;
            case 'P': port_file = optarg; break;
            case 'l':
                if (cks_log_level_parse(optarg, &level) != CKS_OK) {
                    fprintf(stderr, "ckstore-server: bad log level '%s'\n", optarg);
                    return 2;
                }
                break;
            case 'h': usage(stdout); return 0;
            default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ckstore-server: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (p.cluster_map != NULL && !id_given) {
        fprintf(stderr, "ckstore-server: --cluster needs --id\n");
        return 2;
    }
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "%s", p.name ? p.name : "ckstore-server");
    if (p.cluster_map != NULL && p.name == NULL) {
        snprintf(prefix, sizeof(prefix), "server %lu", id);
    }
    cks_log_set_level(level);
    cks_log_set_prefix(prefix);
    p.server_id = (uint16_t)id;
    if (p.cluster_map != NULL && !port_given) {
        port = 0; /* the map's port */
    }
    p.port = (uint16_t)port;
    if (p.arena_file == NULL) {
        if (p.cluster_map != NULL) {
            snprintf(arena_default, sizeof(arena_default), "/dev/shm/ckstore-id%lu.arena", id);
        } else {
            snprintf(arena_default, sizeof(arena_default), "/dev/shm/ckstore-%lu.arena", port);
        }
        p.arena_file = arena_default;
    }
    status = cks_server_create(&p, &server);
    if (status != CKS_OK) {
        fprintf(stderr, "ckstore-server: cannot start: %s\n", cks_status_string(status));
        return 1;
    }
    if (port_file != NULL) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (f == NULL || fprintf(f, "%u\n", cks_server_port(server)) < 0 ||
            fclose(f) != 0 || rename(tmp, port_file) != 0) {
            fprintf(stderr, "ckstore-server: cannot write port file %s\n", port_file);
            cks_server_destroy(server);
            return 1;
        }
    }
    printf("ckstore-server listening on %s:%u\n", p.listen_addr ? p.listen_addr : "0.0.0.0",
           cks_server_port(server));
    fflush(stdout);
    status = cks_server_run(server);
    cks_server_destroy(server);
    return status == CKS_OK ? 0 : 1;
}
