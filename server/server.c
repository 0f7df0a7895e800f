/*
 * DESIGN: the server's progress thread and life cycle. Owns the UCX worker
 * and listener, the arena and the metadata writer; puts the parts together
 * at start (the standalone handler table, the cluster mode on top of it),
 * runs the loop, and stops them in order. Requests go to dispatch.c; the
 * handlers (handlers.c, and the cluster's files) validate them, reserve
 * arena space and receive payloads zero-copy into it, answer STORED as soon
 * as the bytes are in the arena, and hand CRCs and LMDB writes to the
 * metadata writer thread (mdq.c); replies and the table of versions with
 * operations in flight are in vtable.c.
 *
 * Sleeps on the worker's event fd (and a signalfd) when idle: no polling.
 * Never: run a write transaction, compute a CRC, or block on anything but
 * the event fds.
 */
#include "cks_coding.h"
#include "server_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>



/* ---- transport callbacks (the dispatcher, cks_sv_on_msg(), is in dispatch.c) ---- */

static void cks_sv_on_bad_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                              cks_status_t status, const char *reason)
{
    /* answer when we know which request it was; the connection stays up */
    cks_sv_reply_status(conn, hdr != NULL ? hdr->req_id : 0, status, "%s", reason);
}

static void cks_sv_on_accept(void *arg, cks_tp_conn_h conn)
{
    cks_server_h s = arg;
    s->nconns++;
}

static void cks_sv_on_conn_err(void *arg, cks_tp_conn_h conn, cks_status_t status)
{
    cks_server_h s = arg;
    if (cks_sv_cluster_conn_err(s, conn)) {
        cks_info("peer %s gone: %s", cks_tp_conn_peer(conn), cks_status_string(status));
        return;
    }
    cks_debug("client %s gone: %s", cks_tp_conn_peer(conn), cks_status_string(status));
    s->nconns--;
    cks_tp_conn_put(conn); /* the reference the accept gave us */
}

/* ---- life cycle ----------------------------------------------------------------------- */

static void cks_sv_params_free(cks_server_h s)
{
    free(s->arena_file);
    free(s->data_dir);
    free(s->listen_addr);
    free(s->lost_jobs);
    free(s->lost_versions);
}

cks_status_t cks_server_create(const cks_server_params_t *params, cks_server_h *server_p)
{
    cks_tp_worker_params_t wp;
    cks_server_h s;
    cks_status_t status;

    if (params == NULL || params->arena_file == NULL || params->data_dir == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    s->p     = *params;
    s->sigfd = -1;
    cks_sv_handlers_standalone(s);
    if (params->handle_signals) {
        /* block before any thread (UCX's, the writer) exists, so that every
         * thread inherits the mask and the signals reach only the signalfd */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        s->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    }
    s->arena_file  = strdup(params->arena_file);
    s->data_dir    = strdup(params->data_dir);
    s->listen_addr = strdup(params->listen_addr ? params->listen_addr : "0.0.0.0");
    snprintf(s->name, sizeof(s->name), "%s", params->name ? params->name : "ckstore-server");
    if (s->arena_file == NULL || s->data_dir == NULL || s->listen_addr == NULL ||
        cks_hmap_create(&s->versions) != CKS_OK || cks_hmap_create(&s->bad) != CKS_OK) {
        status = CKS_ERR_NO_MEMORY;
        goto err_free;
    }
    if (params->secret_file != NULL) {
        status = cks_tp_secret_load(params->secret_file, &s->secret);
        if (status != CKS_OK) {
            goto err_free;
        }
        s->has_secret = 1;
    }
    if (params->peer_secret_file != NULL || (params->cluster_map != NULL && s->has_secret)) {
        /* clients hold the cluster secret: the role of a server needs one
         * they are not given */
        if (params->peer_secret_file == NULL || !s->has_secret) {
            cks_error(params->peer_secret_file == NULL
                          ? "a cluster server with --secret needs --peer-secret FILE too: "
                            "the servers' own secret, which clients are not given "
                            "(docs/SECURITY.md)"
                          : "--peer-secret needs --secret (the clients' secret)");
            status = CKS_ERR_INVALID_PARAM;
            goto err_free;
        }
        status = cks_tp_secret_load(params->peer_secret_file, &s->peer_secret);
        if (status != CKS_OK) {
            goto err_free;
        }
        if (s->peer_secret.len == s->secret.len &&
            memcmp(s->peer_secret.key, s->secret.key, s->secret.len) == 0) {
            cks_error("the peer secret must differ from the cluster secret: clients hold "
                      "that one");
            status = CKS_ERR_INVALID_PARAM;
            goto err_free;
        }
        s->peer_secret.peer = 1;
        s->has_peer_secret  = 1;
    }
    status = cks_md_open(s->data_dir, params->md_map_size, &s->md);
    if (status != CKS_OK) {
        cks_error("cannot open metadata in %s: %s", s->data_dir, cks_status_string(status));
        goto err_free;
    }
    status = cks_arena_open(s->arena_file, params->arena_size, &s->arena);
    if (status != CKS_OK) {
        goto err_md;
    }
    status = cks_sv_recover(s);
    if (status != CKS_OK) {
        cks_error("recovery failed: %s", cks_status_string(status));
        goto err_arena;
    }
    memset(&wp, 0, sizeof(wp));
    /* a restarted server listens on the port it had: allow it at once */
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    wp.name        = s->name;
    wp.on_msg      = cks_sv_on_msg;
    wp.on_bad_msg  = cks_sv_on_bad_msg;
    wp.on_conn_err = cks_sv_on_conn_err;
    wp.arg         = s;
    wp.max_conns   = params->max_conns ? params->max_conns : 1024;
    wp.max_pending = params->max_pending ? params->max_pending : 4096;
    wp.stall_ms    = (params->reply_timeout_s ? params->reply_timeout_s : 60) * 1000u;
    wp.auth_timeout_ms = (params->auth_timeout_s ? params->auth_timeout_s : 10) * 1000u;
    /* a put's or a chunk's bytes that stop coming (the sender cut off in
     * the middle, or gone while TCP still retries) hold their arena space:
     * after --recv-timeout (30 s), plus 16 MiB/s of their length, the
     * connection is closed */
    wp.recv_timeout_ms = params->recv_timeout_s ? params->recv_timeout_s * 1000u
                                                : CKS_SV_RECV_TIMEOUT_MS;
    wp.recv_min_rate   = CKS_SV_RECV_MIN_RATE;
    status         = cks_tp_worker_create(&wp, &s->tp);
    if (status != CKS_OK) {
        goto err_arena;
    }
    if (s->has_secret) {
        cks_tp_worker_require_auth(s->tp);
    }
    if (params->stall_exit_s != UINT_MAX && (status = cks_tp_sentinel_start(s->tp)) != CKS_OK) {
        cks_warn("no check of the receive path (--stall-exit): %s", cks_status_string(status));
    }
    unsigned ncopy = params->copy_threads;
    if (ncopy == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        ncopy     = ncpu >= 4 ? (unsigned)CKS_MIN(ncpu / 4, 8) : 0;
    } else if (ncopy == UINT_MAX) {
        ncopy = 0;
    }
    status = cks_tp_worker_copy_threads(s->tp, ncopy);
    if (status != CKS_OK) {
        cks_error("cannot start %u copy threads: %s", ncopy, cks_status_string(status));
        goto err_tp;
    }
    status = cks_tp_mem_map(s->tp, cks_arena_base(s->arena), cks_arena_size(s->arena),
                            &s->arena_mem);
    if (status != CKS_OK) {
        cks_error("cannot register the arena with UCX: %s", cks_status_string(status));
        goto err_tp;
    }
    uint16_t port = params->port;
    if (params->cluster_map != NULL) {
        status = cks_sv_cluster_init(s);
        if (status != CKS_OK) {
            goto err_mem;
        }
        /* each peer connects to us once (twice while it reconnects): room
         * that clients cannot take (cks_tp_worker_set_peer_room()) */
        if (s->has_peer_secret) {
            cks_tp_worker_set_peer_room(s->tp, 2u * (unsigned)cks_cluster_nservers(s->map));
        }
        const cks_cluster_server_t *me = cks_cluster_server(s->map, s->self);
        if (params->listen_addr == NULL) { /* listen where the map says */
            free(s->listen_addr);
            s->listen_addr = strdup(me->addr);
        }
        if (port == 0) {
            port = me->port;
        }
        snprintf(s->name, sizeof(s->name), "%s", params->name ? params->name : "ckstore-server");
    }
    status = s->listen_addr == NULL ? CKS_ERR_NO_MEMORY
                                    : cks_tp_listener_create(s->tp, s->listen_addr, port,
                                                             cks_sv_on_accept, s,
                                                             &s->listener);
    if (status != CKS_OK) {
        goto err_mem;
    }
    status = cks_mdq_start(&s->mdq, s->md, s->tp);
    if (status != CKS_OK) {
        goto err_listener;
    }
    *server_p = s;
    return CKS_OK;

err_listener:
    cks_tp_listener_destroy(s->listener);
err_mem:
    cks_sv_cluster_fini(s);
    cks_tp_mem_unmap(s->arena_mem);
err_tp:
    cks_tp_worker_destroy(s->tp);
err_arena:
    cks_arena_close(s->arena);
err_md:
    cks_md_close(s->md);
err_free:
    cks_hmap_destroy(s->bad);
    cks_hmap_destroy(s->versions);
    cks_sv_params_free(s);
    if (s->sigfd >= 0) {
        close(s->sigfd);
    }
    free(s);
    return status;
}

uint16_t cks_server_port(cks_server_h s)
{
    return cks_tp_listener_port(s->listener);
}

cks_status_t cks_server_run(cks_server_h s)
{
    struct pollfd pfd[2];
    int nfds = 1;

    pfd[0].fd     = cks_tp_worker_efd(s->tp);
    pfd[0].events = POLLIN;
    if (s->sigfd >= 0) {
        pfd[1].fd     = s->sigfd;
        pfd[1].events = POLLIN;
        nfds          = 2;
    }
    cks_info("%s serving on %s:%u (arena %llu MiB)", s->name, s->listen_addr,
             cks_server_port(s),
             (unsigned long long)(cks_arena_size(s->arena) >> 20));
    unsigned stall_s = s->p.stall_exit_s ? s->p.stall_exit_s : CKS_SV_STALL_EXIT_S;
    while (!s->stop) {
        cks_tp_worker_progress(s->tp);
        cks_sv_drain_done(s);
        cks_sv_flush_progress(s);
        int timeout = cks_sv_cluster_progress(s);
        int sweep   = cks_tp_worker_sweep(s->tp); /* per-connection limits */
        if (sweep >= 0 && (timeout < 0 || sweep < timeout)) {
            timeout = sweep;
        }
        if (cks_tp_sentinel_poll(s->tp, &sweep) >= stall_s) {
            /* nothing recovers a receive path stalled this way but a new
             * process: the arena and LMDB are as a kill leaves them, which
             * a restart takes up (catch-up, repair) */
            cks_error("%s: UCX has taken none of this server's own check messages for %u "
                      "s: its receive path is stalled (a process on this host killed while "
                      "it sent to this one leaves UCX's shared-memory receive FIFO stuck); "
                      "exiting with status %d to be started again",
                      s->name, stall_s, CKS_SV_EXIT_STALLED);
            _exit(CKS_SV_EXIT_STALLED);
        }
        if (sweep >= 0 && (timeout < 0 || sweep < timeout)) {
            timeout = sweep;
        }
        sweep = cks_sv_parts_sweep(s); /* puts whose parts stopped coming */
        if (sweep >= 0 && (timeout < 0 || sweep < timeout)) {
            timeout = sweep;
        }
        if (cks_tp_worker_arm(s->tp) == CKS_ERR_BUSY) {
            /* sends wait for room (arm backed off): no sleep on the fds,
             * but a signal is read all the same - a server whose replies
             * wait on a stopped client still stops on SIGTERM */
            timeout = 0;
        }
        if (poll(pfd, (nfds_t)nfds, timeout) < 0 && errno != EINTR) {
            cks_error("poll: %s", strerror(errno));
            return CKS_ERR_INTERNAL;
        }
        if (nfds == 2 && (pfd[1].revents & POLLIN)) {
            struct signalfd_siginfo si;
            if (read(s->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                cks_info("signal %u: shutting down", si.ssi_signo);
                s->stop = 1;
            }
        }
    }
    return CKS_OK;
}

void cks_server_stop(cks_server_h s)
{
    s->stop = 1;
    cks_tp_worker_signal(s->tp);
}

void cks_server_destroy(cks_server_h s)
{
    if (s == NULL) {
        return;
    }
    /* Stop in the order that lets every callback find what it touches:
     * no new connections; queued metadata work finishes and is answered;
     * then every outstanding call completes (canceled) and every connection
     * closes, while the versions and the map still exist; the encoders'
     * finished work fails; the metadata jobs all that queued are completed
     * as canceled. Only then is anything freed. */
    cks_tp_listener_destroy(s->listener);
    s->listener = NULL;
    cks_mdq_stop(&s->mdq);
    cks_sv_drain_done(s);
    cks_sv_flush_stop(s); /* answers its flushes while connections are up */
    cks_sv_parts_stop(s);  /* likewise the puts waiting for parts */
    cks_tp_worker_quiesce(s->tp);
    cks_sv_cluster_quiesce(s);
    for (int round = 0; round < 16 && cks_sv_drain_done(s) > 0; round++) {
        /* a done callback may queue more */
    }
    cks_mdq_fini(&s->mdq);
    cks_sv_cluster_fini(s); /* frees the map */
    cks_sv_holds_fini(s);
    cks_sv_versions_free(s); /* puts connections */
    cks_tp_mem_unmap(s->arena_mem);
    cks_tp_worker_destroy(s->tp);
    cks_hmap_destroy(s->versions);
    cks_hmap_destroy(s->bad);
    cks_arena_close(s->arena);
    cks_md_close(s->md);
    if (s->sigfd >= 0) {
        close(s->sigfd);
    }
    cks_sv_params_free(s);
    free(s);
}
