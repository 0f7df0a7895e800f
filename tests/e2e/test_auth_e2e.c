/*
 * End-to-end authentication: real ckstore-server processes on 127.0.0.1
 * (ports picked at run time, stopped by pid) started with a cluster secret.
 * The right secret works, for clients and between the servers of an
 * erasure-coded cluster; a missing or wrong secret, a secret file others can
 * read, a server that cannot prove the secret, and raw requests sent before
 * authenticating are all refused with CKS_ERR_AUTH and a log line, and
 * nothing is read or written for them.
 */
#include "ckstore.h"
#include "cks_test.h"
#include "cks_tp.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Write one version of `n` objects of `size` bytes; seal it. */
static cks_status_t write_version(cks_client_h c, const char *job, uint64_t version,
                                  const uint8_t *buf, uint64_t size, int n)
{
    cks_version_params_t vp = {0};
    cks_status_t st;
    char key[32];
    vp.job     = job;
    vp.version = version;
    st         = cks_version_begin(c, &vp);
    for (int i = 0; st == CKS_OK && i < n; i++) {
        cks_put_params_t p = {0};
        snprintf(key, sizeof(key), "obj%d", i);
        p.job     = job;
        p.version = version;
        p.key     = key;
        p.buffer  = buf + i;
        p.size    = size;
        st        = cks_put(c, &p);
    }
    return st == CKS_OK ? cks_version_seal(c, job, version) : st;
}

static void verify_version(cks_client_h c, const char *job, uint64_t version,
                           const uint8_t *buf, uint64_t size, int n)
{
    cks_restore_h r;
    uint8_t *dst = malloc(size);
    char key[32];
    cr_assert_eq(cks_restore_open(c, job, version, &r), CKS_OK);
    for (int i = 0; i < n; i++) {
        cks_get_params_t g = {0};
        uint64_t got       = 0;
        snprintf(key, sizeof(key), "obj%d", i);
        g.key         = key;
        g.buffer      = dst;
        g.buffer_size = size;
        cr_assert_eq(cks_get(r, &g, &got), CKS_OK, "%s", key);
        cr_assert_eq(got, size);
        cr_assert(memcmp(dst, buf + i, size) == 0, "%s: bytes differ", key);
    }
    cks_restore_close(r);
    free(dst);
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
    cr_assert_eq(write_version(c, "job", 1, buf, size, 2), CKS_OK);
    verify_version(c, "job", 1, buf, size, 2);
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
    verify_version(c, "job", 1, buf, size, 2);
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
    cr_assert_eq(write_version(admin, "beta", 1, buf, size, 1), CKS_OK);

    /* alpha's secret: alpha works, bit-exact */
    cr_assert_eq(connect_job(srv.addr, NULL, alpha, "alpha", &a), CKS_OK);
    cr_assert_eq(write_version(a, "alpha", 1, buf, size, 2), CKS_OK);
    verify_version(a, "alpha", 1, buf, size, 2);
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
    verify_version(admin, "beta", 1, buf, size, 1);
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
    cks_tp_worker_destroy(w);

    /* nothing was written: an authenticated client sees no such job */
    cr_assert_eq(connect_to(srv.addr, NULL, good, &c), CKS_OK);
    cr_assert_eq(cks_version_stat(c, "stolen", 1, &vi), CKS_ERR_NO_SUCH_JOB);
    cks_client_destroy(c);
    cr_assert(cks_test_log_has(srv.log, "authenticate first", 0));
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
    cks_status_t wst = write_version(c, "moe", 1, buf, size, 3);
    char err[256];
    cks_client_last_error(c, err, sizeof(err));
    cr_assert_eq(wst, CKS_OK, "write: %s", err);
    cks_version_info_t vi;
    cr_assert_eq(cks_version_stat(c, "moe", 1, &vi), CKS_OK);
    cks_client_destroy(c);
    /* a job's own secret works across the cluster too (its chunk reads and
     * writes name the job), and opens nothing else */
    cr_assert_eq(connect_job(NULL, cl.map, alpha, "alpha", &c), CKS_OK);
    cr_assert_eq(write_version(c, "alpha", 1, buf, size, 2), CKS_OK);
    cr_assert_eq(cks_version_stat(c, "moe", 1, &vi), CKS_ERR_AUTH);
    cks_client_destroy(c);

    /* two servers down: parity chunks the peers stored decode the rest */
    cks_test_cluster_kill(&cl, 1);
    cks_test_cluster_kill(&cl, 4);
    cr_assert_eq(connect_to(NULL, cl.map, good, &c), CKS_OK);
    verify_version(c, "moe", 1, buf, size, 3);
    cks_client_destroy(c);
    cr_assert_eq(connect_job(NULL, cl.map, alpha, "alpha", &c), CKS_OK);
    verify_version(c, "alpha", 1, buf, size, 2); /* degraded: decoded from parity */
    cks_client_destroy(c);

    /* no secret: refused by every server */
    cr_assert_eq(connect_to(NULL, cl.map, NULL, &c), CKS_ERR_AUTH);
    cks_test_cluster_cleanup(&cl);
    unlink(alpha);
    rmdir(jobs);
    free(buf);
}
