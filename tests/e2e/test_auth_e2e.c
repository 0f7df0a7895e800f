/*
 * End-to-end authentication: real ckstore-server processes on 127.0.0.1
 * (ports picked at run time, stopped by pid) started with a cluster secret.
 * The right secret works, for clients and between the servers of an
 * erasure-coded cluster; a missing or wrong secret, a secret file others can
 * read, a server that cannot prove the secret, and raw requests sent before
 * authenticating are all refused with CKS_ERR_AUTH and a log line, and
 * nothing is read or written for them. Raw handshakes show that an AUTH
 * is accepted once per challenge (a replayed one, or one without a HELLO,
 * is refused and its connection served nothing), that a server with another
 * secret is refused by its peers and a fake one (which accepts any AUTH)
 * by clients and servers, and that a job's secret opens no
 * server-to-server message. Servers prove a role clients cannot (the peer
 * secret): a client of the cluster secret sends no server-to-server message
 * either. Forged replies - for servers' calls, from a client's own
 * connection, and for a client's requests, from a server that has not
 * authenticated - complete nothing.
 */
#include "ckstore.h"
#include "cks_md.h"
#include "cks_test.h"
#include "cks_test_raw.h"
#include "cks_tp.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MiB (1ull << 20)

static char dir[64];
static char good[128], wrong[128], loose[128];

static void write_secret(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(fd >= 0, "create %s", path);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    cr_assert_eq(fchmod(fd, mode), 0);
    close(fd);
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/cks-auth-XXXXXX");
    cr_assert_neq(mkdtemp(dir), NULL);
    snprintf(good, sizeof(good), "%s/good.key", dir);
    snprintf(wrong, sizeof(wrong), "%s/wrong.key", dir);
    snprintf(loose, sizeof(loose), "%s/loose.key", dir);
    write_secret(good, "7f3a9c1e5b2d8f4a6c0e1b3d5f7a9c2e", 0600);
    write_secret(wrong, "7f3a9c1e5b2d8f4a6c0e1b3d5f7a9c2f", 0600);
    write_secret(loose, "7f3a9c1e5b2d8f4a6c0e1b3d5f7a9c2e", 0644);
    cks_test_set_secret(good);
}

static void teardown(void)
{
    cks_test_set_secret(NULL);
    unlink(good);
    unlink(wrong);
    unlink(loose);
    rmdir(dir);
}

TestSuite(auth, .init = setup, .fini = teardown, .timeout = 300);

static cks_status_t connect_job(const char *server, const char *cluster, const char *secret,
                                const char *job, cks_client_h *c_p)
{
    cks_client_params_t p = {0};
    p.field_mask          = CKS_CLIENT_FIELD_TIMEOUT_MS;
    p.timeout_ms          = 10000;
    if (server != NULL) {
        p.field_mask |= CKS_CLIENT_FIELD_SERVER;
        p.server = server;
    } else {
        p.field_mask |= CKS_CLIENT_FIELD_CLUSTER | CKS_CLIENT_FIELD_EC;
        p.cluster    = cluster;
        p.ec_k       = 4;
        p.ec_m       = 2;
        p.chunk_size = 64 * 1024;
    }
    if (secret != NULL) {
        p.field_mask |= CKS_CLIENT_FIELD_SECRET;
        p.secret     = secret;
        p.secret_job = job;
    }
    *c_p = NULL;
    return cks_client_create(&p, c_p);
}

static cks_status_t connect_to(const char *server, const char *cluster, const char *secret,
                               cks_client_h *c_p)
{
    return connect_job(server, cluster, secret, NULL, c_p);
}

Test(auth, standalone_right_wrong_and_missing_secret)
{
    cks_test_server_t srv = {0};
    cks_client_h c;
    char err[256];
    uint64_t size = 3 * MiB + 5;
    uint8_t *buf  = malloc(size + 8);
    cks_test_fill(buf, size + 8, cks_test_seed(31));
    cr_assert_eq(cks_test_server_start(&srv, 64 * MiB), 0);

    /* the right secret: a full round trip */
    cr_assert_eq(connect_to(srv.addr, NULL, good, &c), CKS_OK);
    cr_assert_eq(cks_test_write_objs(c, "job", 1, buf, size, 2), CKS_OK);
    cks_test_verify_objs(c, "job", 1, buf, size, 2);
    cks_client_destroy(c);

    /* no secret, a wrong one: refused with CKS_ERR_AUTH, and logged */
    cr_assert_eq(connect_to(srv.addr, NULL, NULL, &c), CKS_ERR_AUTH);
    cr_assert_null(c);
    cr_assert_eq(connect_to(srv.addr, NULL, wrong, &c), CKS_ERR_AUTH);
    cr_assert_null(c);
    cr_assert(cks_test_log_has(srv.log, "authentication failed", 0), "no log line in %s", srv.log);
    cr_assert(cks_test_log_has(srv.log, "wrong cluster secret", 0));
    cr_assert(cks_test_log_has(srv.log, "requires a cluster secret", 0));

    /* a secret file others can read is refused before anything is sent */
    cr_assert_eq(connect_to(srv.addr, NULL, loose, &c), CKS_ERR_AUTH);

    /* the server still serves the right client, and the data is intact */
    cr_assert_eq(connect_to(srv.addr, NULL, good, &c), CKS_OK);
    cks_test_verify_objs(c, "job", 1, buf, size, 2);
    cks_client_last_error(c, err, sizeof(err));
    cks_client_destroy(c);
    cks_test_server_cleanup(&srv);
    free(buf);
}

Test(auth, client_refuses_a_server_without_the_secret)
{
    cks_test_server_t srv = {0};
    cks_client_h c;
    cks_test_set_secret(NULL); /* a server that does not know the secret */
    cr_assert_eq(cks_test_server_start(&srv, 16 * MiB), 0);
    cr_assert_eq(connect_to(srv.addr, NULL, good, &c), CKS_ERR_AUTH);
    cr_assert_null(c);
    cks_test_server_cleanup(&srv);
}

Test(auth, server_refuses_a_loose_secret_file)
{
    cks_test_server_t srv = {0};
    cks_test_set_secret(loose);
    cr_assert_neq(cks_test_server_start(&srv, 16 * MiB), 0, "started with a 0644 secret");
    cr_assert(cks_test_log_has(srv.log, "chmod 600", 0), "no advice in %s", srv.log);
    cks_test_server_cleanup(&srv);
}

Test(auth, a_job_secret_opens_its_job_only)
{
    cks_test_server_t srv = {0};
    char jobs[128], alpha[160], flags[160];
    cks_client_h admin, a;
    cks_version_info_t vi;
    uint64_t size = 1 * MiB + 3;
    uint8_t *buf  = malloc(size + 8);
    cks_test_fill(buf, size + 8, cks_test_seed(33));

    /* --job-secrets DIR: a file per job; "alpha" has one, "beta" none */
    snprintf(jobs, sizeof(jobs), "%s/jobs", dir);
    cr_assert_eq(mkdir(jobs, 0700), 0);
    snprintf(alpha, sizeof(alpha), "%s/alpha", jobs);
    write_secret(alpha, "a1b2c3d4e5f60718293a4b5c6d7e8f90", 0600);
    snprintf(flags, sizeof(flags), "--job-secrets %s", jobs);
    cks_test_set_server_flags(flags);
    cr_assert_eq(cks_test_server_start(&srv, 32 * MiB), 0);
    cks_test_set_server_flags(NULL);

    /* the cluster secret opens every job */
    cr_assert_eq(connect_to(srv.addr, NULL, good, &admin), CKS_OK);
    cr_assert_eq(cks_test_write_objs(admin, "beta", 1, buf, size, 1), CKS_OK);

    /* alpha's secret: alpha works, bit-exact */
    cr_assert_eq(connect_job(srv.addr, NULL, alpha, "alpha", &a), CKS_OK);
    cr_assert_eq(cks_test_write_objs(a, "alpha", 1, buf, size, 2), CKS_OK);
    cks_test_verify_objs(a, "alpha", 1, buf, size, 2);
    /* ...and nothing of beta: no stat, no restore, no delete, no job list */
    cr_assert_eq(cks_version_stat(a, "beta", 1, &vi), CKS_ERR_AUTH);
    cks_restore_h r;
    cr_assert_eq(cks_restore_open(a, "beta", 1, &r), CKS_ERR_AUTH);
    cr_assert_eq(cks_version_delete(a, "beta", 1), CKS_ERR_AUTH);
    char names[4][CKS_JOB_NAME_MAX + 1];
    size_t njobs = 0;
    int more     = 0;
    cr_assert_eq(cks_job_list(a, NULL, names, 4, &njobs, &more), CKS_ERR_AUTH);
    cks_version_params_t vp = {0};
    vp.job     = "beta";
    vp.version = 2;
    cr_assert_eq(cks_version_begin(a, &vp), CKS_ERR_AUTH);
    cks_client_destroy(a);
    cr_assert(cks_test_log_has(srv.log, "for job 'alpha' only", 0));

    /* alpha's secret does not open beta, or a job without a secret */
    cr_assert_eq(connect_job(srv.addr, NULL, alpha, "beta", &a), CKS_ERR_AUTH);
    cr_assert(cks_test_log_has(srv.log, "no secret for this job", 0));
    cr_assert_eq(connect_job(srv.addr, NULL, wrong, "alpha", &a), CKS_ERR_AUTH);
    cr_assert(cks_test_log_has(srv.log, "wrong secret for the job", 0));

    /* beta is intact */
    cks_test_verify_objs(admin, "beta", 1, buf, size, 1);
    cks_client_destroy(admin);
    cks_test_server_cleanup(&srv);
    unlink(alpha);
    rmdir(jobs);
    free(buf);
}

/* ---- requests sent with the raw transport, without authenticating -------- */

typedef struct {
    int got;
    cks_wire_hdr_t hdr;
    int32_t status;
    char msg[128];
    int lost;
    uint8_t nonce[CKS_WIRE_NONCE_LEN]; /* the server's challenge (HELLO_REPLY) */
    int has_nonce;
} raw_ctx_t;

static void raw_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                       const cks_msg_any_t *body, cks_tp_data_t *data)
{
    raw_ctx_t *r = arg;
    r->got++;
    r->hdr    = *hdr;
    r->status = body->m_STATUS_REPLY.status; /* every reply starts with status, msg */
    snprintf(r->msg, sizeof(r->msg), "%.*s", (int)body->m_STATUS_REPLY.msg.len,
             body->m_STATUS_REPLY.msg.ptr);
    if (hdr->type == CKS_MSG_HELLO_REPLY &&
        body->m_HELLO_REPLY.nonce.len == CKS_WIRE_NONCE_LEN) {
        memcpy(r->nonce, body->m_HELLO_REPLY.nonce.ptr, CKS_WIRE_NONCE_LEN);
        r->has_nonce = 1;
    }
}

static void raw_on_bad(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                       cks_status_t status, const char *why)
{
}

static void raw_on_err(void *arg, cks_tp_conn_h conn, cks_status_t status)
{
    ((raw_ctx_t *)arg)->lost++;
}

/* Send a message with an optional payload; wait (bounded) for a reply. */
static void raw_send(cks_tp_worker_h w, cks_tp_conn_h conn, raw_ctx_t *ctx, unsigned type,
                     const void *body, const void *payload, size_t len)
{
    ctx->got = 0;
    cr_assert_eq(cks_tp_send(conn, type, 0, 7, body, payload, len, CKS_MEM_HOST, NULL, NULL,
                             NULL),
                 CKS_INPROGRESS);
    uint64_t until = cks_time_ns() + 10ull * 1000000000ull;
    while (ctx->got == 0 && cks_time_ns() < until) {
        cks_tp_worker_wait(w, 100);
    }
}

/* VERSION_STAT of (job, version) on a raw connection; a server still
 * catching up with the others after its start answers BUSY ("ask again"),
 * so it is asked again, at most 50 times 100 ms apart. */
static void raw_stat(cks_tp_worker_h w, cks_tp_conn_h conn, raw_ctx_t *ctx, const char *job,
                     uint64_t version)
{
    cks_msg_version_stat_t vs = {cks_wire_cstr(job), version, 0};
    for (int i = 0; i < 50; i++) {
        raw_send(w, conn, ctx, CKS_MSG_VERSION_STAT, &vs, NULL, 0);
        if (ctx->got == 0 || ctx->status != CKS_ERR_BUSY) {
            return;
        }
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
    }
}

/* Send a message without waiting for an answer. */
static void raw_post(cks_tp_conn_h conn, unsigned type, const void *body)
{
    cr_assert_eq(cks_tp_send(conn, type, 0, 8, body, NULL, 0, CKS_MEM_HOST, NULL, NULL, NULL),
                 CKS_INPROGRESS);
}

/* Wait (bounded) until a connection of this worker is lost or closed. */
static void raw_wait_lost(cks_tp_worker_h w, raw_ctx_t *ctx)
{
    uint64_t until = cks_time_ns() + 10ull * 1000000000ull;
    while (ctx->lost == 0 && cks_time_ns() < until) {
        cks_tp_worker_wait(w, 100);
    }
}

/* The handshake by hand, step 1: HELLO with our nonce `cn` (and `job` for a
 * job's own secret); the server's challenge lands in ctx->nonce. */
static void raw_hello(cks_tp_worker_h w, cks_tp_conn_h conn, raw_ctx_t *ctx,
                      const uint8_t cn[CKS_WIRE_NONCE_LEN], const char *job)
{
    cks_msg_hello_t hello = {cks_wire_cstr("stranger"), cks_wire_cstr(NULL),
                             {(const char *)cn, CKS_WIRE_NONCE_LEN}, cks_wire_cstr(job)};
    ctx->has_nonce = 0;
    raw_send(w, conn, ctx, CKS_MSG_HELLO, &hello, NULL, 0);
    cr_assert_eq(ctx->got, 1, "no answer to HELLO");
    cr_assert_eq(ctx->status, CKS_OK, "HELLO: status %d (%s)", ctx->status, ctx->msg);
    cr_assert(ctx->has_nonce, "no challenge in the HELLO reply");
}

/* Step 2: AUTH carrying `proof`, without a worker address (so that the
 * answers stay on this connection). The answer is left in ctx. */
static void raw_auth(cks_tp_worker_h w, cks_tp_conn_h conn, raw_ctx_t *ctx,
                     const uint8_t proof[CKS_WIRE_NONCE_LEN])
{
    cks_msg_auth_t auth = {{(const char *)proof, CKS_WIRE_NONCE_LEN}, cks_wire_cstr(NULL)};
    raw_send(w, conn, ctx, CKS_MSG_AUTH, &auth, NULL, 0);
    cr_assert_eq(ctx->got, 1, "no answer to AUTH");
}

/* The client's proof for the server's challenge `sn` to our nonce `cn`,
 * with the secret in file `path`. */
static void client_proof(const char *path, const uint8_t sn[CKS_WIRE_NONCE_LEN],
                         const uint8_t cn[CKS_WIRE_NONCE_LEN], uint8_t proof[CKS_WIRE_NONCE_LEN])
{
    cks_tp_secret_t secret;
    cr_assert_eq(cks_tp_secret_load(path, &secret), CKS_OK, "%s", path);
    cr_assert_eq(cks_tp_proof(&secret, CKS_TP_LABEL_CLIENT, sn, CKS_WIRE_NONCE_LEN, cn,
                              CKS_WIRE_NONCE_LEN, proof),
                 CKS_OK);
}

Test(auth, raw_requests_before_authenticating_are_refused)
{
    cks_test_server_t srv = {0};
    raw_ctx_t ctx         = {0};
    cks_tp_worker_params_t wp = {.name = "stranger", .on_msg = raw_on_msg,
                                 .on_bad_msg = raw_on_bad, .on_conn_err = raw_on_err,
                                 .arg = &ctx};
    cks_tp_worker_h w;
    cks_tp_conn_h conn;
    cks_client_h c;
    cks_version_info_t vi;
    uint8_t payload[8192];

    cr_assert_eq(cks_test_server_start(&srv, 16 * MiB), 0);
    cr_assert_eq(cks_tp_worker_create(&wp, &w), CKS_OK);

    /* a version begun without HELLO: refused, and the connection closed */
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", srv.port, &conn), CKS_OK);
    cks_msg_version_begin_t vb = {0};
    vb.job     = cks_wire_cstr("stolen");
    vb.version = 1;
    raw_send(w, conn, &ctx, CKS_MSG_VERSION_BEGIN, &vb, NULL, 0);
    cr_assert_eq(ctx.got, 1, "no answer");
    cr_assert_eq(ctx.status, CKS_ERR_AUTH, "status %d (%s)", ctx.status, ctx.msg);
    uint64_t until = cks_time_ns() + 10ull * 1000000000ull;
    while (ctx.lost == 0 && cks_time_ns() < until) {
        cks_tp_worker_wait(w, 100);
    }
    cr_assert_eq(ctx.lost, 1, "the server kept the connection open");
    cks_tp_conn_put(conn);

    /* a HELLO without a challenge, then a put with a payload: refused */
    ctx = (raw_ctx_t){0};
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", srv.port, &conn), CKS_OK);
    cks_msg_hello_t hello = {cks_wire_cstr("stranger"), cks_wire_cstr(NULL),
                             cks_wire_cstr(NULL), cks_wire_cstr(NULL)};
    raw_send(w, conn, &ctx, CKS_MSG_HELLO, &hello, NULL, 0);
    cr_assert_eq(ctx.got, 1);
    cr_assert_eq(ctx.status, CKS_ERR_AUTH);
    cks_tp_conn_put(conn);

    ctx = (raw_ctx_t){0};
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", srv.port, &conn), CKS_OK);
    cks_msg_put_t put = {0};
    put.job  = cks_wire_cstr("stolen");
    put.key  = cks_wire_cstr("k");
    put.size = sizeof(payload);
    memset(payload, 0xAB, sizeof(payload));
    raw_send(w, conn, &ctx, CKS_MSG_PUT, &put, payload, sizeof(payload));
    cr_assert_eq(ctx.got, 1);
    cr_assert_eq(ctx.status, CKS_ERR_AUTH);
    cks_tp_conn_put(conn);

    /* usage figures are not for strangers either */
    ctx = (raw_ctx_t){0};
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", srv.port, &conn), CKS_OK);
    cks_msg_stats_t stats = {0};
    raw_send(w, conn, &ctx, CKS_MSG_STATS, &stats, NULL, 0);
    cr_assert_eq(ctx.got, 1);
    cr_assert_eq(ctx.status, CKS_ERR_AUTH, "STATS before authentication: %d (%s)", ctx.status,
                 ctx.msg);
    cks_tp_conn_put(conn);
    cks_tp_worker_destroy(w);

    /* nothing was written: an authenticated client sees no such job */
    cr_assert_eq(connect_to(srv.addr, NULL, good, &c), CKS_OK);
    cr_assert_eq(cks_version_stat(c, "stolen", 1, &vi), CKS_ERR_NO_SUCH_JOB);
    cks_client_destroy(c);
    cr_assert(cks_test_log_has(srv.log, "authenticate first", 0));
    cks_test_server_cleanup(&srv);
}

/* An AUTH answered to one challenge, sent again: on its own connection
 * after it authenticated, and on a new connection after the same HELLO
 * (which gets a new challenge). Both are refused, and the connection that
 * carried the replay serves nothing more. */
Test(auth, a_replayed_auth_is_refused)
{
    cks_test_server_t srv = {0};
    raw_ctx_t ctx         = {0};
    cks_tp_worker_params_t wp = {.name = "stranger", .on_msg = raw_on_msg,
                                 .on_bad_msg = raw_on_bad, .on_conn_err = raw_on_err,
                                 .arg = &ctx};
    cks_tp_worker_h w;
    cks_tp_conn_h conn;
    cks_client_h c;
    cks_version_info_t vi;
    uint8_t cn[CKS_WIRE_NONCE_LEN], first[CKS_WIRE_NONCE_LEN], proof[CKS_WIRE_NONCE_LEN];

    cr_assert_eq(cks_test_server_start(&srv, 16 * MiB), 0);
    cr_assert_eq(cks_tp_worker_create(&wp, &w), CKS_OK);
    cr_assert_eq(cks_tp_nonce(cn), CKS_OK);

    /* a legitimate handshake, whose AUTH is kept */
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", srv.port, &conn), CKS_OK);
    raw_hello(w, conn, &ctx, cn, NULL);
    memcpy(first, ctx.nonce, sizeof(first));
    client_proof(good, first, cn, proof);
    raw_auth(w, conn, &ctx, proof);
    cr_assert_eq(ctx.hdr.type, CKS_MSG_AUTH_REPLY, "%s", ctx.msg);
    cr_assert_eq(ctx.status, CKS_OK, "the legitimate AUTH: %d (%s)", ctx.status, ctx.msg);

    /* the same AUTH again on that connection: one AUTH per challenge */
    raw_auth(w, conn, &ctx, proof);
    cr_assert_eq(ctx.status, CKS_ERR_AUTH, "a second AUTH: status %d (%s)", ctx.status, ctx.msg);
    cr_assert(strstr(ctx.msg, "HELLO first") != NULL, "%s", ctx.msg);
    raw_wait_lost(w, &ctx);
    cr_assert_eq(ctx.lost, 1, "the server kept the connection open");
    cks_tp_conn_put(conn);

    /* replayed on a new connection after the same HELLO: the server makes a
     * new challenge, and the old proof does not answer it */
    ctx = (raw_ctx_t){0};
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", srv.port, &conn), CKS_OK);
    raw_hello(w, conn, &ctx, cn, NULL);
    raw_auth(w, conn, &ctx, proof);
    cr_assert_eq(ctx.status, CKS_ERR_AUTH, "the replayed AUTH: status %d (%s)", ctx.status,
                 ctx.msg);
    cr_assert(strstr(ctx.msg, "wrong cluster secret") != NULL, "%s", ctx.msg);
    cr_assert(memcmp(ctx.nonce, first, sizeof(first)) != 0, "the server repeated a challenge");

    /* ...and that connection is served nothing: no answer, then closed */
    ctx.got = 0;
    cks_msg_version_begin_t vb = {0};
    vb.job     = cks_wire_cstr("replayed");
    vb.version = 1;
    raw_post(conn, CKS_MSG_VERSION_BEGIN, &vb);
    raw_wait_lost(w, &ctx);
    cr_assert_eq(ctx.lost, 1, "the server kept the connection open");
    cr_assert_eq(ctx.got, 0, "answered after the replay: status %d (%s)", ctx.status, ctx.msg);
    cks_tp_conn_put(conn);
    cks_tp_worker_destroy(w);

    cr_assert_eq(connect_to(srv.addr, NULL, good, &c), CKS_OK);
    cr_assert_eq(cks_version_stat(c, "replayed", 1, &vi), CKS_ERR_NO_SUCH_JOB);
    cks_client_destroy(c);
    cr_assert(cks_test_log_has(srv.log, "wrong cluster secret", 0), "no log line in %s", srv.log);
    cr_assert(cks_test_log_has(srv.log, "AUTH without a challenge", 0));
    cks_test_server_cleanup(&srv);
}

/* AUTH as the first message. Its proof is the right one for the state a
 * connection starts in (both nonces zero): only the missing challenge can
 * refuse it. */
Test(auth, an_auth_without_hello_is_refused)
{
    cks_test_server_t srv = {0};
    raw_ctx_t ctx         = {0};
    cks_tp_worker_params_t wp = {.name = "stranger", .on_msg = raw_on_msg,
                                 .on_bad_msg = raw_on_bad, .on_conn_err = raw_on_err,
                                 .arg = &ctx};
    cks_tp_worker_h w;
    cks_tp_conn_h conn;
    cks_client_h c;
    cks_version_info_t vi;
    uint8_t zero[CKS_WIRE_NONCE_LEN] = {0}, cn[CKS_WIRE_NONCE_LEN], proof[CKS_WIRE_NONCE_LEN];

    cr_assert_eq(cks_test_server_start(&srv, 16 * MiB), 0);
    cr_assert_eq(cks_tp_worker_create(&wp, &w), CKS_OK);
    cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", srv.port, &conn), CKS_OK);
    client_proof(good, zero, zero, proof);
    raw_auth(w, conn, &ctx, proof);
    cr_assert_eq(ctx.status, CKS_ERR_AUTH, "status %d (%s)", ctx.status, ctx.msg);
    cr_assert(strstr(ctx.msg, "HELLO first") != NULL, "%s", ctx.msg);

    /* served nothing after it: neither a HELLO nor a request is answered */
    ctx.got = 0;
    cr_assert_eq(cks_tp_nonce(cn), CKS_OK);
    cks_msg_hello_t hello = {cks_wire_cstr("stranger"), cks_wire_cstr(NULL),
                             {(const char *)cn, CKS_WIRE_NONCE_LEN}, cks_wire_cstr(NULL)};
    raw_post(conn, CKS_MSG_HELLO, &hello);
    cks_msg_version_begin_t vb = {0};
    vb.job     = cks_wire_cstr("nohello");
    vb.version = 1;
    raw_post(conn, CKS_MSG_VERSION_BEGIN, &vb);
    raw_wait_lost(w, &ctx);
    cr_assert_eq(ctx.lost, 1, "the server kept the connection open");
    cr_assert_eq(ctx.got, 0, "answered after the refusal: status %d (%s)", ctx.status, ctx.msg);
    cks_tp_conn_put(conn);
    cks_tp_worker_destroy(w);

    cr_assert_eq(connect_to(srv.addr, NULL, good, &c), CKS_OK);
    cr_assert_eq(cks_version_stat(c, "nohello", 1, &vi), CKS_ERR_NO_SUCH_JOB);
    cks_client_destroy(c);
    cr_assert(cks_test_log_has(srv.log, "AUTH without a challenge", 0), "no log in %s", srv.log);
    cks_test_server_cleanup(&srv);
}

/* ---- a cluster: servers authenticate each other too ---------------------- */

Test(auth, cluster_servers_authenticate_each_other, .timeout = 300)
{
    cks_test_cluster_t cl;
    cks_client_h c;
    uint64_t size = 2 * MiB + 77;
    uint8_t *buf  = malloc(size + 8);
    char jobs[128], alpha[160], flags[160];
    cks_test_fill(buf, size + 8, cks_test_seed(32));
    snprintf(jobs, sizeof(jobs), "%s/jobs", dir);
    cr_assert_eq(mkdir(jobs, 0700), 0);
    snprintf(alpha, sizeof(alpha), "%s/alpha", jobs);
    write_secret(alpha, "a1b2c3d4e5f60718293a4b5c6d7e8f90", 0600);
    snprintf(flags, sizeof(flags), "--job-secrets %s", jobs);
    cks_test_set_server_flags(flags);
    cr_assert_eq(cks_test_cluster_start(&cl, 6, 3, 64 * MiB, -1, NULL), 0);
    cks_test_set_server_flags(NULL);

    /* chunks spread to peers and manifests broadcast: all authenticated */
    cr_assert_eq(connect_to(NULL, cl.map, good, &c), CKS_OK);
    cks_status_t wst = cks_test_write_objs(c, "moe", 1, buf, size, 3);
    char err[256];
    cks_client_last_error(c, err, sizeof(err));
    cr_assert_eq(wst, CKS_OK, "write: %s", err);
    cks_version_info_t vi;
    cr_assert_eq(cks_version_stat(c, "moe", 1, &vi), CKS_OK);
    cks_client_destroy(c);
    /* the servers proved the peer secret to each other: a role clients lack */
    size_t as_peer = 0;
    for (size_t i = 0; i < cl.n; i++) {
        as_peer += cks_test_log_has(cl.srv[i].log, "authenticated as a server of the cluster", 0);
    }
    cr_assert_geq(as_peer, 1, "no server authenticated a peer as a server");
    /* a job's own secret works across the cluster too (its chunk reads and
     * writes name the job), and opens nothing else */
    cr_assert_eq(connect_job(NULL, cl.map, alpha, "alpha", &c), CKS_OK);
    cr_assert_eq(cks_test_write_objs(c, "alpha", 1, buf, size, 2), CKS_OK);
    cr_assert_eq(cks_version_stat(c, "moe", 1, &vi), CKS_ERR_AUTH);
    cks_client_destroy(c);

    /* two servers down: parity chunks the peers stored decode the rest */
    cks_test_cluster_kill(&cl, 1);
    cks_test_cluster_kill(&cl, 4);
    cr_assert_eq(connect_to(NULL, cl.map, good, &c), CKS_OK);
    cks_test_verify_objs(c, "moe", 1, buf, size, 3);
    cks_client_destroy(c);
    cr_assert_eq(connect_job(NULL, cl.map, alpha, "alpha", &c), CKS_OK);
    cks_test_verify_objs(c, "alpha", 1, buf, size, 2); /* degraded: decoded from parity */
    cks_client_destroy(c);

    /* no secret: refused by every server */
    cr_assert_eq(connect_to(NULL, cl.map, NULL, &c), CKS_ERR_AUTH);
    cks_test_cluster_cleanup(&cl);
    unlink(alpha);
    rmdir(jobs);
    free(buf);
}

/* Send each server-to-server message (the "s>s" rows of CKS_MSG_LIST) for
 * `job` on conn (server i): each must be refused with CKS_ERR_AUTH. Were they
 * accepted: a chunk of a new version 9 stored, an object reported done, a
 * manifest of an empty version 9 committed keeping only the newest version
 * (version 1 would go), and version 1 dropped. */
static void send_s2s_expect_refused(cks_tp_worker_h w, cks_tp_conn_h conn, raw_ctx_t *pctx,
                                    size_t i, const char *job, const uint8_t *chunk)
{
    /* a chunk of a new version of its job (stored, were it accepted) */
    cks_msg_chunk_put_t cp = {0};
    cp.job     = cks_wire_cstr(job);
    cp.version = 9;
    cp.key     = cks_wire_cstr("obj0");
    raw_send(w, conn, pctx, CKS_MSG_CHUNK_PUT, &cp, chunk, 64 * 1024);
    cr_assert_eq(pctx->got, 1, "server %zu: no answer to CHUNK_PUT", i);
    cr_assert_eq(pctx->status, CKS_ERR_AUTH, "server %zu: CHUNK_PUT %d (%s)", i, pctx->status,
                 pctx->msg);
    /* an object reported done to a coordinator */
    cks_msg_object_done_t od = {0};
    od.job     = cks_wire_cstr(job);
    od.version = 9;
    od.o.key   = cks_wire_cstr("obj0");
    od.o.size  = 64 * 1024;
    od.o.source = 9;
    raw_send(w, conn, pctx, CKS_MSG_OBJECT_DONE, &od, NULL, 0);
    cr_assert_eq(pctx->got, 1, "server %zu: no answer to OBJECT_DONE", i);
    cr_assert_eq(pctx->status, CKS_ERR_AUTH, "server %zu: OBJECT_DONE %d (%s)", i,
                 pctx->status, pctx->msg);
    /* a manifest of a protected, empty version 9, keeping only the
     * newest version (were it accepted, version 1 would go) */
    cks_msg_version_commit_t vc = {0};
    vc.job          = cks_wire_cstr(job);
    vc.v.version    = 9;
    vc.v.parent     = UINT64_MAX;
    vc.v.state      = CKS_VSTATE_PROTECTED;
    vc.v.nranks     = 1;
    vc.v.k          = 4;
    vc.v.m          = 2;
    vc.v.chunk_size = 64 * 1024;
    vc.last         = 1;
    vc.retain       = 1;
    raw_send(w, conn, pctx, CKS_MSG_VERSION_COMMIT, &vc, NULL, 0);
    cr_assert_eq(pctx->got, 1, "server %zu: no answer to VERSION_COMMIT", i);
    cr_assert_eq(pctx->status, CKS_ERR_AUTH, "server %zu: VERSION_COMMIT %d (%s)", i,
                 pctx->status, pctx->msg);
    /* version 1 dropped as aborted */
    cks_msg_version_drop_t vd = {cks_wire_cstr(job), 1, CKS_VSTATE_ABORTED, 0};
    raw_send(w, conn, pctx, CKS_MSG_VERSION_DROP, &vd, NULL, 0);
    cr_assert_eq(pctx->got, 1, "server %zu: no answer to VERSION_DROP", i);
    cr_assert_eq(pctx->status, CKS_ERR_AUTH, "server %zu: VERSION_DROP %d (%s)", i,
                 pctx->status, pctx->msg);
    /* version 9 granted to a coordinator (were it accepted, the version's
     * real coordinator could not begin it) */
    cks_msg_version_claim_t vl = {.job = cks_wire_cstr(job), .version = 9, .ttl_s = 600};
    raw_send(w, conn, pctx, CKS_MSG_VERSION_CLAIM, &vl, NULL, 0);
    cr_assert_eq(pctx->got, 1, "server %zu: no answer to VERSION_CLAIM", i);
    cr_assert_eq(pctx->status, CKS_ERR_AUTH, "server %zu: VERSION_CLAIM %d (%s)", i,
                 pctx->status, pctx->msg);
}

/* A client that proved only a job's secret sends, for its own job, each
 * message that only servers send each other (the "s>s" rows of
 * CKS_MSG_LIST) to every server: each is refused, and nothing changes -
 * no chunk is stored, no version committed, the version still restores. */
Test(auth, a_job_secret_cannot_send_server_to_server_messages, .timeout = 300)
{
    cks_test_cluster_t cl;
    cks_cluster_stats_t cs;
    cks_client_h admin, a;
    cks_version_info_t vi;
    raw_ctx_t ctx = {0};
    cks_tp_worker_params_t wp = {.name = "job-client", .on_msg = raw_on_msg,
                                 .on_bad_msg = raw_on_bad, .on_conn_err = raw_on_err,
                                 .arg = &ctx};
    cks_tp_worker_h w;
    cks_tp_conn_h conn;
    uint64_t size = 1 * MiB + 3, used0 = 0, used1 = 0;
    uint8_t *buf   = malloc(size + 8);
    uint8_t *chunk = calloc(1, 64 * 1024);
    uint8_t cn[CKS_WIRE_NONCE_LEN], proof[CKS_WIRE_NONCE_LEN];
    char jobs[128], alpha[160], flags[160];
    cks_test_fill(buf, size + 8, cks_test_seed(34));
    snprintf(jobs, sizeof(jobs), "%s/jobs", dir);
    cr_assert_eq(mkdir(jobs, 0700), 0);
    snprintf(alpha, sizeof(alpha), "%s/alpha", jobs);
    write_secret(alpha, "a1b2c3d4e5f60718293a4b5c6d7e8f90", 0600);
    snprintf(flags, sizeof(flags), "--job-secrets %s", jobs);
    cks_test_set_server_flags(flags);
    cr_assert_eq(cks_test_cluster_start(&cl, 6, 3, 64 * MiB, -1, NULL), 0);
    cks_test_set_server_flags(NULL);

    cr_assert_eq(connect_job(NULL, cl.map, alpha, "alpha", &a), CKS_OK);
    cr_assert_eq(cks_test_write_objs(a, "alpha", 1, buf, size, 2), CKS_OK);
    /* the servers' usage (STATS names no job) is open to it, as to any client */
    cr_assert_eq(cks_cluster_stats(a, &cs), CKS_OK);
    cr_assert_eq(cs.answered, cl.n, "%u of %zu servers answered STATS", cs.answered, cl.n);
    cr_assert_gt(cs.arena_used, 0);
    cks_client_destroy(a);
    cr_assert_eq(connect_to(NULL, cl.map, good, &admin), CKS_OK);
    cr_assert_eq(cks_cluster_usage(admin, &used0, NULL), CKS_OK);

    cr_assert_eq(cks_tp_worker_create(&wp, &w), CKS_OK);
    for (size_t i = 0; i < cl.n; i++) {
        cr_assert_eq(cks_tp_conn_connect(w, "127.0.0.1", cl.srv[i].port, &conn), CKS_OK);
        cr_assert_eq(cks_tp_nonce(cn), CKS_OK);
        raw_hello(w, conn, &ctx, cn, "alpha");
        client_proof(alpha, ctx.nonce, cn, proof);
        raw_auth(w, conn, &ctx, proof);
        cr_assert_eq(ctx.status, CKS_OK, "server %zu: AUTH %d (%s)", i, ctx.status, ctx.msg);

        send_s2s_expect_refused(w, conn, &ctx, i, "alpha", chunk);

        /* the connection still serves its job's own requests */
        raw_stat(w, conn, &ctx, "alpha", 1);
        cr_assert_eq(ctx.got, 1, "server %zu: no answer to VERSION_STAT", i);
        cr_assert_eq(ctx.status, CKS_OK, "server %zu: VERSION_STAT %d (%s)", i, ctx.status,
                     ctx.msg);
        cks_tp_conn_put(conn);
    }
    cks_tp_worker_destroy(w);
    for (size_t i = 0; i < cl.n; i++) {
        cr_assert(cks_test_log_has(cl.srv[i].log, "refused VERSION_DROP", 0), "server %zu", i);
    }

    /* nothing changed: no chunk stored, no version 9, version 1 exact */
    cr_assert_eq(cks_cluster_usage(admin, &used1, NULL), CKS_OK);
    cr_assert_eq(used1, used0, "arena use went from %llu to %llu bytes",
                 (unsigned long long)used0, (unsigned long long)used1);
    cr_assert_eq(cks_version_stat(admin, "alpha", 9, &vi), CKS_ERR_NO_SUCH_VERSION);
    cr_assert_eq(cks_version_stat(admin, "alpha", 1, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_PROTECTED);
    cks_test_verify_objs(admin, "alpha", 1, buf, size, 2);
    cks_client_destroy(admin);
    cks_test_cluster_cleanup(&cl);
    unlink(alpha);
    rmdir(jobs);
    free(chunk);
    free(buf);
}

/* ---- a server with a wrong secret ----------------------------------------- */

/* A cluster server restarted with another secret and another peer secret
 * (same id, same port). Its
 * own client (same secret as it) makes it a primary: it encodes a put and
 * sends the chunks to its peers, which refuse its handshake; nothing of it
 * is stored on them. A client with the cluster secret is refused by it. */
Test(auth, a_server_with_a_wrong_secret_is_refused_by_its_peers, .timeout = 300)
{
    cks_test_cluster_t cl;
    cks_client_h c;
    cks_cluster_stats_t st;
    raw_ctx_t ctx = {0};
    cks_tp_worker_params_t wp = {.name = "rogue-client", .on_msg = raw_on_msg,
                                 .on_bad_msg = raw_on_bad, .on_conn_err = raw_on_err,
                                 .arg = &ctx};
    cks_tp_worker_h w;
    cks_tp_conn_h conn;
    cks_tp_secret_t rogue_secret;
    const size_t r = 5;
    uint64_t size  = 256 * 1024;
    uint8_t *buf   = malloc(size);
    cks_test_fill(buf, size, cks_test_seed(35));

    cr_assert_eq(cks_test_cluster_start(&cl, 6, 3, 64 * MiB, -1, NULL), 0);
    char wrong_peer[160];
    snprintf(wrong_peer, sizeof(wrong_peer), "%s/wrong-peer.key", dir);
    write_secret(wrong_peer, "0123456789abcdef0123456789abcdef", 0600);
    cks_test_cluster_kill(&cl, r);
    cks_test_set_secret(wrong);
    cks_test_set_peer_secret(wrong_peer);
    cr_assert_eq(cks_test_server_restart(&cl.srv[r]), 0, "restart with other secrets");
    cks_test_set_secret(good);
    cks_test_set_peer_secret(NULL);
    unlink(wrong_peer);

    /* the rogue's client authenticates with the rogue's secret */
    cr_assert_eq(cks_tp_secret_load(wrong, &rogue_secret), CKS_OK);
    cr_assert_eq(cks_tp_worker_create(&wp, &w), CKS_OK);
    cks_status_t hst =
        cks_test_raw_handshake(w, cl.srv[r].port, "rogue-client", &rogue_secret, &conn);
    cr_assert_eq(hst, CKS_OK, "handshake with the rogue: %d", hst);

    /* a put makes it a primary: RS(4,2) over six servers puts a chunk on each */
    cks_msg_put_t put = {0};
    put.job        = cks_wire_cstr("rogue");
    put.version    = 1;
    put.key        = cks_wire_cstr("k");
    put.size       = size;
    put.k          = 4;
    put.m          = 2;
    put.chunk_size = 64 * 1024;
    raw_send(w, conn, &ctx, CKS_MSG_PUT, &put, buf, size);
    cr_assert_eq(ctx.got, 1, "no answer to the put");
    cr_assert_eq(ctx.status, CKS_OK, "put on the rogue: %d (%s)", ctx.status, ctx.msg);

    /* every peer refuses the rogue's proof; the rogue's handshakes fail */
    for (size_t i = 0; i < cl.n; i++) {
        if (i != r) {
            cr_assert(cks_test_log_has(cl.srv[i].log, "wrong cluster secret", 20000),
                      "server %zu did not refuse the rogue: %s", i, cl.srv[i].log);
        }
    }
    cr_assert(cks_test_log_has(cl.srv[r].log, "handshake with a peer failed", 20000),
              "%s", cl.srv[r].log);
    cks_tp_conn_put(conn);
    cks_tp_worker_destroy(w);

    /* the rogue refuses a client with the cluster secret */
    cr_assert_eq(connect_to(cl.srv[r].addr, NULL, good, &c), CKS_ERR_AUTH);
    cr_assert_null(c);

    /* served nothing: the other servers hold no byte */
    cr_assert_eq(connect_to(NULL, cl.map, good, &c), CKS_OK);
    cr_assert_eq(cks_cluster_stats(c, &st), CKS_OK);
    cr_assert_eq(st.answered, cl.n - 1, "%u servers answered", st.answered);
    cr_assert_eq(st.arena_used, 0, "%llu bytes stored on the other servers",
                 (unsigned long long)st.arena_used);
    cks_client_destroy(c);
    cks_test_cluster_cleanup(&cl);
    free(buf);
}

/* A fake server, run by its own thread: it answers HELLO with a challenge
 * and AUTH with a proof made with its own (wrong) secret, and "OK" to
 * anything else, which it counts. Not a ckstore-server: one that accepts
 * every AUTH, so that only the connecting side's check can refuse it. */
typedef struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready; /* 1: listening; -1: could not */
    atomic_int stop;
    uint16_t port;
    cks_tp_secret_t secret;
    cks_tp_worker_h w;
    cks_tp_conn_h conns[64];
    /* read after the join */
    int hellos, hellos_from_servers, auths, others;
    char other[192]; /* the last of the others, and who sent it */
    /* forging: HELLO is never answered; instead, replies that say
     * "forged" are sent on its connection for the request ids that follow
     * the HELLO's (the client's next requests to the other servers) */
    int forge;
    cks_tp_conn_h forge_conn;
    uint64_t forge_from;
    long forged;
} fake_t;

static void fake_reply(cks_tp_conn_h conn, unsigned type, uint64_t req_id, const void *body)
{
    (void)cks_tp_send(conn, type, 0, req_id, body, NULL, 0, CKS_MEM_HOST, NULL, NULL, NULL);
}

static void fake_on_msg(void *arg, cks_tp_conn_h conn, const cks_wire_hdr_t *hdr,
                        const cks_msg_any_t *body, cks_tp_data_t *data)
{
    fake_t *f        = arg;
    cks_tp_auth_t *a = cks_tp_conn_auth(conn); /* per connection: the nonces */
    uint8_t proof[CKS_WIRE_NONCE_LEN];

    if (hdr->type == CKS_MSG_HELLO && f->forge) {
        f->hellos++;
        if (f->forge_conn == NULL) {
            cks_tp_conn_get(conn);
            f->forge_conn = conn;
            f->forge_from = hdr->req_id + 1;
        }
    } else if (hdr->type == CKS_MSG_HELLO) {
        cks_msg_hello_reply_t r = {0};
        f->hellos++;
        f->hellos_from_servers += body->m_HELLO.name.len == 14 &&
                                  memcmp(body->m_HELLO.name.ptr, "ckstore-server", 14) == 0;
        snprintf(a->job, sizeof(a->job), "%.*s", (int)body->m_HELLO.name.len,
                 body->m_HELLO.name.ptr); /* the peer's name, for the report */
        if (body->m_HELLO.nonce.len == CKS_WIRE_NONCE_LEN) {
            memcpy(a->client_nonce, body->m_HELLO.nonce.ptr, CKS_WIRE_NONCE_LEN);
        }
        (void)cks_tp_nonce(a->server_nonce);
        r.msg   = cks_wire_cstr(NULL);
        r.name  = cks_wire_cstr("rogue");
        r.addr  = cks_wire_cstr(NULL);
        r.nonce = (cks_wire_str_t){(const char *)a->server_nonce, CKS_WIRE_NONCE_LEN};
        fake_reply(conn, CKS_MSG_HELLO_REPLY, hdr->req_id, &r);
    } else if (hdr->type == CKS_MSG_AUTH) {
        cks_msg_auth_reply_t r = {0};
        f->auths++;
        (void)cks_tp_proof(&f->secret, CKS_TP_LABEL_SERVER, a->client_nonce,
                           CKS_WIRE_NONCE_LEN, a->server_nonce, CKS_WIRE_NONCE_LEN, proof);
        r.msg   = cks_wire_cstr(NULL);
        r.addr  = cks_wire_cstr(NULL);
        r.proof = (cks_wire_str_t){(const char *)proof, CKS_WIRE_NONCE_LEN};
        fake_reply(conn, CKS_MSG_AUTH_REPLY, hdr->req_id, &r);
    } else {
        cks_msg_status_t r = {CKS_OK, cks_wire_cstr(NULL)};
        f->others++;
        snprintf(f->other, sizeof(f->other), "%s from %s", cks_msg_name(hdr->type),
                 a->job[0] ? a->job : "?");
        if (!CKS_MSG_IS_REPLY(hdr->type)) {
            fake_reply(conn, CKS_MSG_STATUS_REPLY, hdr->req_id, &r);
        }
    }
}

static void fake_on_accept(void *arg, cks_tp_conn_h conn)
{
    fake_t *f = arg;
    for (size_t i = 0; i < sizeof(f->conns) / sizeof(f->conns[0]); i++) {
        if (f->conns[i] == NULL) {
            f->conns[i] = conn;
            return;
        }
    }
    cks_tp_conn_put(conn);
}

static void fake_on_err(void *arg, cks_tp_conn_h conn, cks_status_t status)
{
    fake_t *f = arg;
    for (size_t i = 0; i < sizeof(f->conns) / sizeof(f->conns[0]); i++) {
        if (f->conns[i] == conn) {
            f->conns[i] = NULL;
            cks_tp_conn_put(conn);
        }
    }
}

static void *fake_main(void *arg)
{
    fake_t *f                 = arg;
    cks_tp_worker_params_t wp = {.name = "rogue", .on_msg = fake_on_msg,
                                 .on_bad_msg = raw_on_bad, .on_conn_err = fake_on_err,
                                 .arg = f};
    cks_tp_listener_h l = NULL;
    int ok              = cks_tp_worker_create(&wp, &f->w) == CKS_OK;
    ok = ok && cks_tp_listener_create(f->w, "127.0.0.1", f->port, fake_on_accept, f, &l) ==
                   CKS_OK;
    pthread_mutex_lock(&f->lock);
    f->ready = ok ? 1 : -1;
    f->port  = ok ? cks_tp_listener_port(l) : 0;
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
    uint64_t until = cks_time_ns() + 200ull * 1000000000ull; /* bounded, whatever happens */
    while (ok && !atomic_load(&f->stop) && cks_time_ns() < until) {
        cks_tp_worker_wait(f->w, f->forge_conn != NULL ? 10 : 100);
        if (f->forge_conn != NULL && !cks_tp_conn_failed(f->forge_conn)) {
            cks_msg_status_t r = {CKS_ERR_DATA_LOST, cks_wire_cstr("forged reply")};
            for (uint64_t id = f->forge_from; id < f->forge_from + 512; id++) {
                f->forged += cks_tp_send(f->forge_conn, CKS_MSG_STATUS_REPLY, 0, id, &r, NULL,
                                         0, CKS_MEM_HOST, NULL, NULL, NULL) == CKS_INPROGRESS;
            }
        }
    }
    if (f->forge_conn != NULL) {
        cks_tp_conn_put(f->forge_conn);
    }
    for (size_t i = 0; i < sizeof(f->conns) / sizeof(f->conns[0]); i++) {
        if (f->conns[i] != NULL) {
            cks_tp_conn_put(f->conns[i]);
        }
    }
    if (l != NULL) {
        cks_tp_listener_destroy(l);
    }
    if (f->w != NULL) {
        cks_tp_worker_destroy(f->w);
    }
    return NULL;
}

/* Start the fake on 127.0.0.1:port (0: any) proving the secret in `path`. */
static void fake_start_mode(fake_t *f, const char *path, uint16_t port, int forge)
{
    struct timespec ts;
    /* a killed server's port may still be held by its connections (closing,
     * or in TIME_WAIT: 60 s at most), or taken by another process: the fake
     * listens with SO_REUSEADDR (its own UCX context reads this) and tries
     * again, bounded by 65 s (once 6 s were not enough in a full run) */
    setenv("UCX_TCP_CM_REUSEADDR", "y", 1);
    for (int attempt = 0; attempt < 325; attempt++) {
        memset(f, 0, sizeof(*f));
        f->port  = port;
        f->forge = forge;
        cr_assert_eq(cks_tp_secret_load(path, &f->secret), CKS_OK);
        pthread_mutex_init(&f->lock, NULL);
        pthread_cond_init(&f->cond, NULL);
        cr_assert_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 30;
        pthread_mutex_lock(&f->lock);
        while (f->ready == 0 && pthread_cond_timedwait(&f->cond, &f->lock, &ts) == 0) {
        }
        pthread_mutex_unlock(&f->lock);
        if (f->ready != -1 || port == 0) {
            break;
        }
        pthread_join(f->thread, NULL); /* it could not listen: it has ended */
        pthread_mutex_destroy(&f->lock);
        pthread_cond_destroy(&f->cond);
        usleep(200 * 1000);
    }
    cr_assert_eq(f->ready, 1, "the fake server did not start");
}

static void fake_start(fake_t *f, const char *path, uint16_t port)
{
    fake_start_mode(f, path, port, 0);
}

static void fake_stop(fake_t *f)
{
    atomic_store(&f->stop, 1);
    cks_tp_worker_signal(f->w);
    pthread_join(f->thread, NULL);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
}

/* A server that answers AUTH with a proof made with another secret: the
 * client checks the proof and refuses it, and sends it nothing more. */
Test(auth, client_refuses_a_server_that_proves_a_wrong_secret)
{
    fake_t f;
    cks_client_h c;
    char addr[64];
    fake_start(&f, wrong, 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", f.port);
    cr_assert_eq(connect_to(addr, NULL, good, &c), CKS_ERR_AUTH);
    cr_assert_null(c);
    fake_stop(&f);
    cr_assert_geq(f.auths, 1, "the client never sent AUTH");
    cr_assert_eq(f.others, 0, "the client sent %d requests to the rogue (%s)", f.others,
                 f.other);
}

/* The same fake in a cluster of seven, in place of server 6: a client with
 * the cluster secret puts objects whose placement groups (six of seven
 * servers) mostly include the fake; their primaries connect to it to send
 * its chunks, check its proof, refuse it, and the chunks held behind the
 * handshake are never sent. The version fails; the fake gets nothing but
 * handshakes. */
Test(auth, servers_send_nothing_to_a_peer_that_proves_a_wrong_secret, .timeout = 300)
{
    cks_test_cluster_t cl;
    cks_client_h c;
    fake_t f;
    const size_t r = 6;
    uint64_t size  = 256 * 1024 + 77;
    uint8_t *buf   = malloc(size + 8);
    char key[32];
    int stored     = 0;
    cks_test_fill(buf, size + 8, cks_test_seed(36));

    cr_assert_eq(cks_test_cluster_start(&cl, 7, 3, 64 * MiB, -1, NULL), 0);
    cks_test_cluster_kill(&cl, r);
    fake_start(&f, wrong, cl.srv[r].port);

    cr_assert_eq(connect_to(NULL, cl.map, good, &c), CKS_OK);
    cks_test_begin(c, "moe", 1);
    for (int i = 0; i < 8; i++) { /* a put whose primary is the fake fails at the client */
        snprintf(key, sizeof(key), "obj%d", i);
        stored += cks_test_put(c, "moe", 1, key, buf + i, size) == CKS_OK;
    }
    cr_assert_geq(stored, 1, "no put reached a primary other than the fake");
    cr_assert_neq(cks_version_seal(c, "moe", 1), CKS_OK, "sealed with chunks on the fake");
    cks_client_destroy(c);
    size_t peers = 0;
    for (size_t i = 0; i < cl.n; i++) {
        peers += i != r && cks_test_log_has(cl.srv[i].log, "did not prove the peer secret", 0);
    }
    fake_stop(&f);
    cr_assert_geq(peers, 1, "no server connected to the fake");
    cr_assert_geq(f.hellos_from_servers, 1);
    cr_assert_eq(f.others, 0, "the servers and the client sent %d requests to the rogue (%s)",
                 f.others, f.other);
    cks_test_cluster_cleanup(&cl);
    free(buf);
}

/* ---- forged replies and peer roles (#15 items 8 and 9) --------------------- */

/* A raw connection to 127.0.0.1:port, authenticated with `secret` by the
 * transport's own handshake (as a client, or as a server with the peer
 * secret); asserts that it succeeded. */
static cks_tp_conn_h raw_open_authed(cks_tp_worker_h w, uint16_t port, const char *name,
                                     const cks_tp_secret_t *secret)
{
    cks_tp_conn_h conn;
    cks_status_t st = cks_test_raw_handshake(w, port, name, secret, &conn);
    cr_assert_eq(st, CKS_OK, "handshake with port %u: %d", port, st);
    return conn;
}

/* A client with the cluster secret, on its own authenticated connections,
 * answers the calls that servers make to each other: while one member is
 * stopped (SIGSTOP), the chunk puts to it stay in flight on the primaries,
 * and the forger sends every other server "forged" error replies for the
 * request ids servers use for their calls. Those replies came on another
 * connection than the calls: they must change nothing, and the version
 * seals once the member runs again, and restores exactly. (Before, a reply
 * was matched by its request id alone, on any connection: the forged errors
 * failed the chunk puts, and the version was aborted.) */
Test(auth, forged_replies_for_server_calls_are_ignored, .timeout = 300)
{
    cks_test_cluster_t cl;
    cks_client_h c;
    cks_cluster_h map;
    raw_ctx_t ctx = {0};
    cks_tp_worker_params_t wp = {.name = "forger", .on_msg = raw_on_msg,
                                 .on_bad_msg = raw_on_bad, .on_conn_err = raw_on_err,
                                 .arg = &ctx};
    cks_tp_worker_h w;
    cks_tp_conn_h conns[CKS_TEST_MAX_SERVERS] = {0};
    cks_tp_secret_t secret;
    const char *job = "forged";
    char keys[4][32], err[256];
    size_t nkeys = 0;
    uint64_t size = 200 * 1024 + 5;
    uint8_t *buf  = malloc(size + 8);
    uint8_t *dst  = malloc(size);
    long forged   = 0;
    cks_test_fill(buf, size + 8, cks_test_seed(37));

    cr_assert_eq(cks_test_cluster_start(&cl, 6, 3, 64 * MiB, -1, NULL), 0);
    int coord = cks_test_coordinator(cl.map, job, 1);
    cr_assert_geq(coord, 0);
    size_t mute = ((size_t)coord + 1) % cl.n; /* stopped: a member, not the coordinator */

    /* keys whose primary is not the stopped member (their puts are STORED at
     * once; the primaries then send it a chunk of each) */
    cr_assert_eq(cks_cluster_load(cl.map, &map, err, sizeof(err)), CKS_OK, "%s", err);
    for (int i = 0; i < 200 && nkeys < 4; i++) {
        uint16_t group[CKS_PLACE_WIDTH_MAX];
        snprintf(keys[nkeys], sizeof(keys[nkeys]), "obj%d", i);
        cr_assert_eq(cks_place(map, job, strlen(job), keys[nkeys], strlen(keys[nkeys]), 0, 4, 2,
                               NULL, group),
                     CKS_OK);
        nkeys += group[0] != mute;
    }
    cks_cluster_free(map);
    cr_assert_eq(nkeys, 4);

    cr_assert_eq(cks_tp_secret_load(good, &secret), CKS_OK);
    cr_assert_eq(cks_tp_worker_create(&wp, &w), CKS_OK);
    for (size_t i = 0; i < cl.n; i++) {
        if (i != mute) {
            conns[i] = raw_open_authed(w, cl.srv[i].port, "forger", &secret);
        }
    }

    cr_assert_eq(connect_to(NULL, cl.map, good, &c), CKS_OK);
    cks_version_params_t vp = {0};
    vp.job     = job;
    vp.version = 1;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    cr_assert_eq(kill(cl.srv[mute].pid, SIGSTOP), 0);
    for (size_t j = 0; j < nkeys; j++) {
        cks_put_params_t p = {0};
        p.job     = job;
        p.version = 1;
        p.key     = keys[j];
        p.buffer  = buf + j;
        p.size    = size;
        cr_assert_eq(cks_put(c, &p), CKS_OK, "%s", keys[j]);
    }
    /* forge for 2 s: replies for the first 128 call ids of each server (its
     * handshakes with its peers, then this version's chunk puts). Each is
     * answered as a reply to no call; the forger reads those answers before
     * it forges more, so that no server drops it for not reading them. */
    uint64_t until = cks_time_ns() + 2ull * 1000000000ull;
    while (cks_time_ns() < until) {
        cks_msg_status_t r = {CKS_ERR_DATA_LOST, cks_wire_cstr("forged reply")};
        for (size_t i = 0; i < cl.n; i++) {
            for (uint64_t id = 1; conns[i] != NULL && id <= 128; id++) {
                forged += cks_tp_send(conns[i], CKS_MSG_STATUS_REPLY, 0, id | (1ull << 63), &r,
                                      NULL, 0, CKS_MEM_HOST, NULL, NULL, NULL) ==
                          CKS_INPROGRESS;
            }
        }
        uint64_t drain = cks_time_ns() + 1000000000ull;
        while (ctx.got < forged && ctx.lost == 0 && cks_time_ns() < drain) {
            cks_tp_worker_wait(w, 20);
        }
    }
    cr_assert_eq(kill(cl.srv[mute].pid, SIGCONT), 0);
    cr_assert_gt(forged, 0, "no forged reply was sent");
    cr_assert_eq(ctx.lost, 0, "a server closed the forger's connection");

    cks_status_t sealed = cks_version_seal(c, job, 1);
    cks_client_last_error(c, err, sizeof(err));
    cr_assert_eq(sealed, CKS_OK, "a forged reply failed the version: %s (%s)",
                 cks_status_string(sealed), err);
    cks_restore_h rs;
    cr_assert_eq(cks_restore_open(c, job, 1, &rs), CKS_OK);
    for (size_t j = 0; j < nkeys; j++) {
        cks_get_params_t g = {0};
        uint64_t got       = 0;
        g.key         = keys[j];
        g.buffer      = dst;
        g.buffer_size = size;
        cr_assert_eq(cks_get(rs, &g, &got), CKS_OK, "%s", keys[j]);
        cr_assert_eq(got, size);
        cr_assert(memcmp(dst, buf + j, size) == 0, "%s: bytes differ", keys[j]);
    }
    cks_restore_close(rs);
    cks_client_destroy(c);
    for (size_t i = 0; i < cl.n; i++) {
        if (conns[i] != NULL) {
            cks_tp_conn_put(conns[i]);
        }
    }
    cks_tp_worker_destroy(w);
    cks_test_cluster_cleanup(&cl);
    free(dst);
    free(buf);
}

typedef struct {
    cks_client_h c;
    cks_cluster_stats_t st;
    cks_status_t status;
    atomic_int done;
} stats_call_t;

/* cks_cluster_stats() of s->c on a thread of its own: its status and
 * answer in s, then done set. */
static void *stats_thread(void *arg)
{
    stats_call_t *s = arg;
    s->status       = cks_cluster_stats(s->c, &s->st);
    atomic_store(&s->done, 1);
    return NULL;
}

/* A client's connection that has not authenticated yet (a fake server in
 * place of server 6 of the map takes HELLO and never answers it) carries
 * "forged" error replies for the request ids the client uses next, while
 * the client asks the real servers for the job list, again and again.
 * Replies from a connection the request did not go out on, or that has not
 * authenticated, must be ignored: every request answers CKS_OK. (Before,
 * the client matched replies by request id alone, and took them from a
 * connection that had not authenticated.) */
Test(auth, forged_replies_to_a_client_are_ignored, .timeout = 300)
{
    cks_test_cluster_t cl;
    cks_client_h c;
    fake_t f;
    stats_call_t sc = {0};
    pthread_t th;
    char names[4][CKS_JOB_NAME_MAX + 1];
    size_t count;
    int more, calls = 0, ok = 0;
    cks_status_t bad = CKS_OK;
    const size_t r   = 6;

    cr_assert_eq(cks_test_cluster_start(&cl, 7, 3, 64 * MiB, -1, NULL), 0);
    cks_test_cluster_kill(&cl, r);
    fake_start_mode(&f, wrong, cl.srv[r].port, 1);

    /* 4 s: how long the fake holds its HELLO */
    cr_assert_eq(cks_test_connect_secret(cl.map, good, 4000, &c), CKS_OK);
    cr_assert_eq(cks_job_list(c, NULL, names, 4, &count, &more), CKS_OK);
    /* every server's usage: its HELLO to the fake waits, unanswered */
    sc.c = c;
    cr_assert_eq(pthread_create(&th, NULL, stats_thread, &sc), 0);
    uint64_t until = cks_time_ns() + 20ull * 1000000000ull;
    while (!atomic_load(&sc.done) && calls < 20000 && cks_time_ns() < until) {
        cks_status_t st = cks_job_list(c, NULL, names, 4, &count, &more);
        calls++;
        if (st == CKS_OK) {
            ok++;
        } else if (bad == CKS_OK) {
            char text[256];
            bad = st;
            cks_client_last_error(c, text, sizeof(text));
            cr_log_error("request %d: %s (%s)", calls, cks_status_string(st), text);
        }
    }
    pthread_join(th, NULL);
    fake_stop(&f);
    cr_assert_geq(f.hellos, 1, "the client never connected to the fake");
    cr_assert_gt(f.forged, 0, "the fake forged no reply");
    cr_assert_gt(calls, 0);
    cr_assert_eq(ok, calls, "%d of %d requests failed, the first with %s", calls - ok, calls,
                 cks_status_string(bad));
    cks_client_destroy(c);
    cks_test_cluster_cleanup(&cl);
}

/* A client that proved the cluster secret (not a job's) is still a client:
 * every server-to-server message it sends, for any job, is refused, and
 * nothing changes. Only a server that proves the peer secret may send them
 * (the servers of this cluster do so for every version they store). */
Test(auth, a_cluster_secret_client_cannot_send_server_to_server_messages, .timeout = 300)
{
    cks_test_cluster_t cl;
    cks_client_h admin;
    cks_version_info_t vi;
    raw_ctx_t ctx = {0};
    cks_tp_worker_params_t wp = {.name = "cluster-client", .on_msg = raw_on_msg,
                                 .on_bad_msg = raw_on_bad, .on_conn_err = raw_on_err,
                                 .arg = &ctx};
    cks_tp_worker_h w;
    cks_tp_conn_h conn;
    cks_tp_secret_t secret;
    uint64_t size = 1 * MiB + 3, used0 = 0, used1 = 0;
    uint8_t *buf   = malloc(size + 8);
    uint8_t *chunk = calloc(1, 64 * 1024);
    cks_test_fill(buf, size + 8, cks_test_seed(39));

    cr_assert_eq(cks_test_cluster_start(&cl, 6, 3, 64 * MiB, -1, NULL), 0);
    cr_assert_eq(connect_to(NULL, cl.map, good, &admin), CKS_OK);
    cr_assert_eq(cks_test_write_objs(admin, "alpha", 1, buf, size, 2), CKS_OK);
    cr_assert_eq(cks_cluster_usage(admin, &used0, NULL), CKS_OK);

    cr_assert_eq(cks_tp_secret_load(good, &secret), CKS_OK);
    cr_assert_eq(cks_tp_worker_create(&wp, &w), CKS_OK);
    for (size_t i = 0; i < cl.n; i++) {
        conn = raw_open_authed(w, cl.srv[i].port, "ckstore-server", &secret);
        send_s2s_expect_refused(w, conn, &ctx, i, "alpha", chunk);
        /* the connection still serves a client's requests */
        raw_stat(w, conn, &ctx, "alpha", 1);
        cr_assert_eq(ctx.got, 1, "server %zu: no answer to VERSION_STAT", i);
        cr_assert_eq(ctx.status, CKS_OK, "server %zu: VERSION_STAT %d (%s)", i, ctx.status,
                     ctx.msg);
        cks_tp_conn_put(conn);
    }
    cks_tp_worker_destroy(w);
    for (size_t i = 0; i < cl.n; i++) {
        cr_assert(cks_test_log_has(cl.srv[i].log, "only servers of the cluster send", 0),
                  "server %zu: %s", i, cl.srv[i].log);
    }

    /* nothing changed: no chunk stored, no version 9, version 1 exact */
    cr_assert_eq(cks_cluster_usage(admin, &used1, NULL), CKS_OK);
    cr_assert_eq(used1, used0, "arena use went from %llu to %llu bytes",
                 (unsigned long long)used0, (unsigned long long)used1);
    cr_assert_eq(cks_version_stat(admin, "alpha", 9, &vi), CKS_ERR_NO_SUCH_VERSION);
    cr_assert_eq(cks_version_stat(admin, "alpha", 1, &vi), CKS_OK);
    cr_assert_eq(vi.state, CKS_VSTATE_PROTECTED);
    cks_test_verify_objs(admin, "alpha", 1, buf, size, 2);
    cks_client_destroy(admin);
    cks_test_cluster_cleanup(&cl);
    free(chunk);
    free(buf);
}
