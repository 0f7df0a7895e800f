/*
 * DESIGN: the server's progress thread. Owns the UCX worker and listener,
 * the arena allocator, and the table of versions with operations in flight.
 * Handles every request: validates it (names, states, sizes, duplicates),
 * reserves arena space and receives payloads zero-copy into it, answers
 * STORED as soon as the bytes are in the arena, and hands CRCs and LMDB
 * writes to the metadata writer thread (mdq.c). Reads (stat, list, get) use
 * short LMDB read transactions here; payloads of gets go zero-copy from the
 * arena.
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


uint64_t cks_sv_realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}


/* ---- replies ------------------------------------------------------------- */

void cks_sv_reply_status(cks_tp_conn_h conn, uint64_t req_id, cks_status_t status,
                                const char *fmt, ...)
{
    char text[CKS_MSG_MAX_LEN];
    cks_msg_status_t m;
    va_list ap;

    text[0] = '\0';
    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
    }
    m.status = status;
    m.msg    = cks_wire_cstr(text);
    cks_status_t st = cks_tp_send(conn, CKS_MSG_STATUS_REPLY, 0, req_id, &m, NULL, 0,
                                  CKS_MEM_HOST, NULL, NULL, NULL);
    if (st != CKS_INPROGRESS) {
        cks_debug("reply to %s: %s", cks_tp_conn_peer(conn), cks_status_string(st));
    }
}

/* Send a fixed-type reply whose first fields are status and msg. */
void cks_sv_reply(cks_tp_conn_h conn, unsigned type, uint64_t req_id, void *body)
{
    cks_status_t st = cks_tp_send(conn, type, 0, req_id, body, NULL, 0, CKS_MEM_HOST,
                                  NULL, NULL, NULL);
    if (st != CKS_INPROGRESS) {
        cks_debug("reply to %s: %s", cks_tp_conn_peer(conn), cks_status_string(st));
    }
}

/* ---- version table ---------------------------------------------------------- */

cks_sv_version_t *cks_sv_version_find(cks_server_h s, const cks_wire_str_t *job,
                                             uint64_t version)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9];
    return cks_hmap_get(s->versions, key, cks_vkey(key, job->ptr, job->len, version));
}

cks_sv_version_t *cks_sv_version_new(cks_server_h s, const cks_wire_str_t *job,
                                            uint64_t version)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9];
    cks_sv_version_t *v = calloc(1, sizeof(*v));
    if (v == NULL) {
        return NULL;
    }
    memcpy(v->job, job->ptr, job->len);
    v->job_len = job->len;
    v->version = version;
    if (cks_hmap_put(s->versions, key, cks_vkey(key, job->ptr, job->len, version), v) !=
        CKS_OK) {
        free(v);
        return NULL;
    }
    return v;
}

cks_sv_version_t *cks_sv_version_new_open(cks_server_h s, const cks_wire_str_t *job,
                                          uint64_t version)
{
    cks_sv_version_t *v = cks_sv_version_new(s, job, version);
    if (v == NULL) {
        return NULL;
    }
    if (cks_hmap_create(&v->keys) != CKS_OK) {
        cks_sv_version_free(s, v);
        return NULL;
    }
    v->open = 1;
    return v;
}

/* An entry and all it owns (its waiters' connections are the caller's). */
static void cks_sv_version_free_all(cks_sv_version_t *v)
{
    cks_hmap_destroy(v->keys);
    cks_hmap_destroy(v->deleted);
    cks_hmap_destroy(v->reported);
    cks_hmap_destroy(v->reporters);
    free(v->objs);
    free(v->ranks_done);
    free(v->waiters);
    free(v->stored_on);
    free(v->reported_by);
    free(v);
}

void cks_sv_version_free(cks_server_h s, cks_sv_version_t *v)
{
    uint8_t key[CKS_JOB_MAX_LEN + 9];
    cks_hmap_del(s->versions, key, cks_vkey(key, v->job, v->job_len, v->version));
    cks_sv_version_free_all(v);
}

/* Drop the entry when nothing needs it any more. */
void cks_sv_version_release(cks_server_h s, cks_sv_version_t *v)
{
    if (!v->open && v->pending == 0 && v->readers == 0 && v->wait == CKS_SV_WAIT_NONE) {
        cks_sv_version_free(s, v);
    }
}

/* Explain why (job, version) cannot take puts or be read: one LMDB lookup. */
cks_status_t cks_sv_version_lookup(cks_server_h s, const cks_wire_str_t *job,
                                          uint64_t version, cks_md_version_t *rec_p)
{
    cks_md_txn_h txn;
    cks_status_t status = cks_md_txn_begin(s->md, 0, &txn);
    if (status != CKS_OK) {
        return status;
    }
    status = cks_md_version_get(txn, job->ptr, job->len, version, rec_p);
    if (status == CKS_ERR_NO_SUCH_VERSION &&
        cks_md_job_exists(txn, job->ptr, job->len) != CKS_OK) {
        status = CKS_ERR_NO_SUCH_JOB;
    }
    cks_md_txn_abort(txn);
    return status;
}

int cks_sv_restorable(cks_vstate_t st)
{
    return st == CKS_VSTATE_SEALED || st == CKS_VSTATE_PROTECTED ||
           st == CKS_VSTATE_DEGRADED;
}

cks_status_t cks_sv_check_names(const cks_wire_str_t *job, const cks_wire_str_t *key)
{
    cks_status_t status = cks_name_check(job->ptr, job->len, CKS_JOB_MAX_LEN);
    if (status == CKS_OK && key != NULL) {
        status = cks_name_check(key->ptr, key->len, CKS_KEY_MAX_LEN);
    }
    return status;
}

cks_status_t cks_sv_names_txn(cks_server_h s, const cks_wire_str_t *job,
                              const cks_wire_str_t *key, cks_md_txn_h *txn_p)
{
    cks_status_t status = cks_sv_check_names(job, key);
    if (status == CKS_OK) {
        status = cks_md_txn_begin(s->md, 0, txn_p);
    }
    return status;
}

cks_mdq_job_t *cks_sv_mdq_job(cks_server_h s, cks_mdq_type_t type, const char *job,
                              size_t job_len, uint64_t version)
{
    cks_mdq_job_t *j = calloc(1, sizeof(*j));
    if (j != NULL) {
        j->type = type;
        memcpy(j->job, job, job_len);
        j->job_len = (uint32_t)job_len;
        j->version = version;
        j->server  = s;
    }
    return j;
}

/* ---- deferred seal / abort / delete ----------------------------------------- */

cks_status_t cks_sv_version_queue(cks_server_h s, cks_sv_version_t *v, cks_mdq_type_t type,
                                  cks_tp_conn_h conn, uint64_t req_id)
{
    cks_mdq_job_t *j = cks_sv_mdq_job(s, type, v->job, v->job_len, v->version);
    if (j == NULL) {
        cks_sv_reply_status(conn, req_id, CKS_ERR_NO_MEMORY, "server out of memory");
        return CKS_ERR_NO_MEMORY;
    }
    j->v      = v;
    j->rec    = v->rec;
    j->conn   = conn;
    j->req_id = req_id;
    cks_tp_conn_get(conn);
    if (type == CKS_MDQ_SEAL) {
        j->rec.state     = CKS_VSTATE_SEALED;
        j->rec.sealed_ns = cks_sv_realtime_ns();
        j->rec.nobjects  = v->nobjects;
        j->rec.bytes     = v->bytes;
    } else if (type == CKS_MDQ_ABORT) {
        j->rec.state    = CKS_VSTATE_ABORTED;
        j->rec.nobjects = 0;
        j->rec.bytes    = 0;
    }
    v->pending++; /* the job itself keeps the entry alive */
    cks_mdq_push(&s->mdq, j);
    return CKS_OK;
}

/* Run the waiting request of v when its puts (and, to delete, gets) drained. */
void cks_sv_version_kick(cks_server_h s, cks_sv_version_t *v)
{
    if (v->wait == CKS_SV_WAIT_NONE || v->pending > 0 ||
        (v->wait == CKS_SV_WAIT_DELETE && v->readers > 0)) {
        return;
    }
    cks_sv_wait_t wait = v->wait;
    cks_tp_conn_h conn = v->wait_conn;
    v->wait            = CKS_SV_WAIT_NONE;
    v->wait_conn       = NULL;
    if (wait == CKS_SV_WAIT_SEAL && v->failed != CKS_OK) {
        /* a put could not be recorded: the version cannot be sealed whole */
        cks_sv_reply_status(conn, v->wait_req_id, v->failed,
                            "version %llu of '%s' lost an object (%s); aborting it",
                            (unsigned long long)v->version, v->job,
                            cks_status_string(v->failed));
        cks_sv_version_queue(s, v, CKS_MDQ_ABORT, conn, 0); /* no second reply */
        cks_tp_conn_put(conn);
        return;
    }
    cks_sv_version_queue(s, v, wait == CKS_SV_WAIT_SEAL    ? CKS_MDQ_SEAL
                               : wait == CKS_SV_WAIT_ABORT ? CKS_MDQ_ABORT
                                                           : CKS_MDQ_DELETE,
                         conn, v->wait_req_id);
    cks_tp_conn_put(conn);
}

void cks_sv_version_defer(cks_server_h s, cks_sv_version_t *v, cks_sv_wait_t wait,
                                 cks_tp_conn_h conn, uint64_t req_id)
{
    v->open        = 0;
    v->wait        = wait;
    v->wait_conn   = conn;
    v->wait_req_id = req_id;
    cks_tp_conn_get(conn);
    cks_sv_version_kick(s, v);
}

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
    while (!s->stop) {
        cks_tp_worker_progress(s->tp);
        cks_sv_drain_done(s);
        cks_sv_flush_progress(s);
        int timeout = cks_sv_cluster_progress(s);
        int sweep   = cks_tp_worker_sweep(s->tp); /* per-connection limits */
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

static void cks_sv_free_version(const void *key, size_t len, void *value, void *arg)
{
    cks_sv_version_t *v = value;
    for (size_t i = 0; i < v->nwaiters; i++) {
        cks_tp_conn_put(v->waiters[i].conn);
    }
    cks_sv_version_free_all(v);
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
    cks_tp_worker_quiesce(s->tp);
    cks_sv_cluster_quiesce(s);
    for (int round = 0; round < 16 && cks_sv_drain_done(s) > 0; round++) {
        /* a done callback may queue more */
    }
    cks_mdq_fini(&s->mdq);
    cks_sv_cluster_fini(s); /* frees the map */
    cks_sv_holds_fini(s);
    cks_hmap_foreach(s->versions, cks_sv_free_version, NULL); /* puts connections */
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
