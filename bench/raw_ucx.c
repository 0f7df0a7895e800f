/*
 * DESIGN: the plain UCX loop that ckstore's figures are compared with. Owns,
 * for one side (the parent's driver or the child's sink), a UCP context and
 * worker of its own (never ckstore's), one buffer of the chosen setup, its
 * registration and rkey, and one endpoint to the peer made from the peer's
 * worker address: the way ckstore's data endpoints are made, and without
 * peer-failure handling, which in UCX 1.13 would leave only TCP (see
 * transport/ucx.c).
 *
 * The driver times one transfer at a time, as ckstore's blocking put and
 * get do: put = parent -> child; get = a small request, then child ->
 * parent. Three ways to move the bytes:
 *   am   ucp_am_send_nbx, rendezvous above UCX's threshold, the receiver
 *        calls ucp_am_recv_data_nbx (exactly what ckstore does);
 *   tag  ucp_tag_send_nbx / ucp_tag_recv_nbx (ucx_perftest's tag_bw);
 *   rma  ucp_put_nbx + flush / ucp_get_nbx on the peer's buffer (one-sided).
 * The sink keeps its tag receives posted, receives AM payloads into its
 * buffer, and answers get requests from bench_raw_progress().
 *
 * Waiting: each side busy-polls for spin_s after the last event, then
 * sleeps on the worker's event fd (ckstore's threads sleep at once);
 * spin_s < 0 busy-polls only, as ucx_perftest does. On a shared 2-core
 * machine two busy-polling processes lose whole scheduler ticks (4 ms) to
 * any other runnable task, which made pure busy polling the slower and the
 * noisier reference there.
 *
 * Thread: a bench_raw_t is used by one thread only (the worker is
 * UCS_THREAD_MODE_SINGLE). Never: share a context with ckstore's, or time
 * anything but the transfer itself.
 */
#include "bench.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

enum {
    BENCH_AM_PUT = 1, /* payload: the data, parent -> child */
    BENCH_AM_REQ = 2, /* header: uint64_t size wanted */
    BENCH_AM_GET = 3, /* payload: the data, child -> parent */
};

#define BENCH_TAG_PUT 0xb0001ull
#define BENCH_TAG_REQ 0xb0002ull
#define BENCH_TAG_GET 0xb0003ull
#define BENCH_TAG_MASK UINT64_MAX

typedef struct {
    int done;
    ucs_status_t status;
} bench_flag_t;

struct bench_raw {
    bench_setup_t setup;
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd;
    double spin_s; /* busy-poll this long before sleeping; < 0: never sleep */
    ucp_address_t *addr;
    size_t addr_len;
    ucp_ep_h ep;
    bench_buf_t buf; /* malloc / thp / shm-thp setups */
    ucp_mem_h memh;
    void *ptr;
    size_t len;
    char desc[64];
    char tls[256];
    /* driver: the peer's buffer */
    uint64_t remote_addr;
    ucp_rkey_h rkey;
    /* driver: an AM get in progress */
    bench_flag_t am_get;
    /* sink */
    void *tag_put_req, *tag_req_req;
    uint64_t req_in, req_out; /* get request sizes: received / sent */
    uint64_t pending_get;     /* bytes to send back; 0: none */
    int pending_method;
    int sink;       /* this side answers the driver */
    unsigned sends; /* sink sends in flight */
    ucs_status_t sink_error;
};

const char *const bench_setup_names[BENCH_NSETUPS] = {"malloc", "thp", "shm-thp",
                                                              "ucx", "ucx-thp"};
const char *const bench_method_names[BENCH_NMETHODS] = {"am", "tag", "rma"};

const char *bench_setup_name(bench_setup_t s)
{
    return s < BENCH_NSETUPS ? bench_setup_names[s] : "?";
}

const char *bench_method_name(bench_method_t m)
{
    return m < BENCH_NMETHODS ? bench_method_names[m] : "?";
}

const char *bench_raw_setup_name(const bench_raw_t *r)
{
    return bench_setup_name(r->setup);
}

const char *bench_dir_name(bench_dir_t d)
{
    return d == BENCH_DIR_PUT ? "put" : "get";
}

/* ---- completion plumbing ------------------------------------------------------ */

static void bench_send_cb(void *request, ucs_status_t st, void *arg)
{
    bench_flag_t *f = arg;
    f->status       = st;
    f->done         = 1;
    ucp_request_free(request);
}

static void bench_am_recv_cb(void *request, ucs_status_t st, size_t length, void *arg)
{
    bench_send_cb(request, st, arg);
}

static void bench_tag_recv_cb(void *request, ucs_status_t st,
                              const ucp_tag_recv_info_t *info, void *arg)
{
    bench_send_cb(request, st, arg);
}

/* The request of an *_nbx call: NULL (done now), an error, or in progress. */
static ucs_status_t bench_req_start(void *req, bench_flag_t *f)
{
    if (req == NULL) {
        f->done   = 1;
        f->status = UCS_OK;
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(req)) {
        f->done   = 1;
        f->status = UCS_PTR_STATUS(req);
        return f->status;
    }
    return UCS_INPROGRESS;
}

static void bench_param(ucp_request_param_t *p, bench_raw_t *r, void *user_data)
{
    memset(p, 0, sizeof(*p));
    p->op_attr_mask = UCP_OP_ATTR_FIELD_USER_DATA;
    p->user_data    = user_data;
    if (r->memh != NULL) {
        p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p->memh = r->memh;
    }
}

/* Progress until every flag is done or the deadline passes: busy-poll for
 * r->spin_s, then sleep on the worker's event fd (as ckstore's threads do at
 * once), so that a long copy by the peer does not cost a CPU here. */
static ucs_status_t bench_wait(bench_raw_t *r, bench_flag_t *a, bench_flag_t *b,
                               int local, double deadline)
{
    /* RMA completes by work on this side (a copy into the peer's mapped
     * segment, or UCX's software emulation) that raises no event: spin */
    double spin_until = r->spin_s < 0 || local ? deadline : bench_now() + r->spin_s;
    unsigned spins    = 0;
    while (!a->done || (b != NULL && !b->done)) {
        if (ucp_worker_progress(r->worker) != 0 || ++spins % 64 != 0) {
            continue;
        }
        double now = bench_now();
        if (now > deadline) {
            return UCS_ERR_TIMED_OUT;
        }
        if (now < spin_until || ucp_worker_arm(r->worker) == UCS_ERR_BUSY) {
            continue;
        }
        struct pollfd pfd = {.fd = r->efd, .events = POLLIN};
        poll(&pfd, 1, (int)((deadline - now) * 1000) + 1);
    }
    if (a->status != UCS_OK) {
        return a->status;
    }
    return b != NULL ? b->status : UCS_OK;
}

/* ---- sink: answering the driver ------------------------------------------------ */

static void bench_sink_send_cb(void *request, ucs_status_t st, void *arg)
{
    bench_raw_t *r = arg;
    if (st != UCS_OK) {
        r->sink_error = st;
    }
    r->sends--;
    ucp_request_free(request);
}

static void bench_sink_recv_cb(void *request, ucs_status_t st, size_t length, void *arg)
{
    bench_raw_t *r = arg;
    if (st != UCS_OK) {
        r->sink_error = st;
    }
    ucp_request_free(request);
}

static ucs_status_t bench_am_cb(void *arg, const void *header, size_t header_length,
                                void *data, size_t length, const ucp_am_recv_param_t *param,
                                unsigned id)
{
    bench_raw_t *r = arg;
    ucp_request_param_t p;
    void *req;

    if (id == BENCH_AM_REQ) {
        uint64_t size = 0;
        if (header_length == sizeof(size)) {
            memcpy(&size, header, sizeof(size));
        }
        /* answered from bench_raw_progress(), outside this callback */
        r->pending_get    = size <= r->len ? size : r->len;
        r->pending_method = BENCH_METHOD_AM;
        return UCS_OK;
    }
    if (length > r->len) {
        return UCS_ERR_MESSAGE_TRUNCATED;
    }
    bench_flag_t *f = id == BENCH_AM_GET ? &r->am_get : NULL;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        memcpy(r->ptr, data, length); /* eager: below the rendezvous threshold */
        if (f != NULL) {
            f->done   = 1;
            f->status = UCS_OK;
        }
        return UCS_OK;
    }
    bench_param(&p, r, f != NULL ? (void *)f : (void *)r);
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK;
    p.cb.recv_am = f != NULL ? bench_am_recv_cb : bench_sink_recv_cb;
    req = ucp_am_recv_data_nbx(r->worker, data, r->ptr, length, &p);
    if (f != NULL) {
        bench_req_start(req, f);
    } else if (UCS_PTR_IS_ERR(req)) {
        r->sink_error = UCS_PTR_STATUS(req);
    }
    return UCS_OK;
}

static ucs_status_t bench_am_put_cb(void *arg, const void *header, size_t header_length,
                                    void *data, size_t length,
                                    const ucp_am_recv_param_t *param)
{
    return bench_am_cb(arg, header, header_length, data, length, param, BENCH_AM_PUT);
}

static ucs_status_t bench_am_req_cb(void *arg, const void *header, size_t header_length,
                                    void *data, size_t length,
                                    const ucp_am_recv_param_t *param)
{
    return bench_am_cb(arg, header, header_length, data, length, param, BENCH_AM_REQ);
}

static ucs_status_t bench_am_get_cb(void *arg, const void *header, size_t header_length,
                                    void *data, size_t length,
                                    const ucp_am_recv_param_t *param)
{
    return bench_am_cb(arg, header, header_length, data, length, param, BENCH_AM_GET);
}

static void bench_sink_post(bench_raw_t *r)
{
    ucp_request_param_t p;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    if (r->tag_put_req == NULL) {
        if (r->memh != NULL) {
            p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
            p.memh = r->memh;
        }
        r->tag_put_req = ucp_tag_recv_nbx(r->worker, r->ptr, r->len, BENCH_TAG_PUT,
                                          BENCH_TAG_MASK, &p);
        if (UCS_PTR_IS_ERR(r->tag_put_req)) {
            r->sink_error  = UCS_PTR_STATUS(r->tag_put_req);
            r->tag_put_req = NULL;
        }
        p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    }
    if (r->tag_req_req == NULL) {
        r->tag_req_req = ucp_tag_recv_nbx(r->worker, &r->req_in, sizeof(r->req_in),
                                          BENCH_TAG_REQ, BENCH_TAG_MASK, &p);
        if (UCS_PTR_IS_ERR(r->tag_req_req)) {
            r->sink_error  = UCS_PTR_STATUS(r->tag_req_req);
            r->tag_req_req = NULL;
        }
    }
}

/* Reap completed tag receives (polled: no callbacks to re-enter UCX from). */
static void bench_sink_reap(bench_raw_t *r)
{
    if (r->tag_put_req != NULL &&
        ucp_request_check_status(r->tag_put_req) != UCS_INPROGRESS) {
        ucp_request_free(r->tag_put_req);
        r->tag_put_req = NULL;
    }
    if (r->tag_req_req != NULL &&
        ucp_request_check_status(r->tag_req_req) != UCS_INPROGRESS) {
        ucp_request_free(r->tag_req_req);
        r->tag_req_req    = NULL;
        r->pending_get    = r->req_in <= r->len ? r->req_in : r->len;
        r->pending_method = BENCH_METHOD_TAG;
    }
}

static void bench_sink_answer(bench_raw_t *r)
{
    ucp_request_param_t p;
    void *req;

    if (r->pending_get == 0 || r->ep == NULL) {
        return;
    }
    bench_param(&p, r, r);
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK;
    p.cb.send = bench_sink_send_cb;
    if (r->pending_method == BENCH_METHOD_AM) {
        req = ucp_am_send_nbx(r->ep, BENCH_AM_GET, NULL, 0, r->ptr, r->pending_get, &p);
    } else {
        req = ucp_tag_send_nbx(r->ep, r->ptr, r->pending_get, BENCH_TAG_GET, &p);
    }
    r->pending_get = 0;
    if (UCS_PTR_IS_ERR(req)) {
        r->sink_error = UCS_PTR_STATUS(req);
    } else if (req != NULL) {
        r->sends++;
    }
}

int bench_raw_efd(bench_raw_t *r)
{
    return r->efd;
}

int bench_raw_arm(bench_raw_t *r)
{
    return ucp_worker_arm(r->worker) == UCS_OK ? 0 : -1;
}

double bench_raw_spin(bench_raw_t *r)
{
    return r->spin_s;
}

void bench_raw_set_spin(bench_raw_t *r, double spin_s)
{
    r->spin_s = spin_s;
}

unsigned bench_raw_progress(bench_raw_t *r)
{
    unsigned n = ucp_worker_progress(r->worker);
    if (r->sink && r->ep != NULL) {
        bench_sink_reap(r);
        bench_sink_post(r);
        if (r->pending_get != 0) {
            bench_sink_answer(r);
            n++;
        }
    }
    return n;
}

/* ---- setup ------------------------------------------------------------------------ */

static void bench_describe(bench_raw_t *r)
{
    static const char *what[BENCH_NSETUPS] = {"malloc", "anon", "shm file", NULL, NULL};
    char name[128] = "";
    char line[512];
    FILE *f;

    if (what[r->setup] != NULL) {
        snprintf(name, sizeof(name), "%s", what[r->setup]);
    } else if ((f = fopen("/proc/self/maps", "r")) != NULL) {
        /* what UCX allocated: "SYSV..." (sysv), "/dev/shm/ucx_..." (posix), anon */
        while (fgets(line, sizeof(line), f) != NULL) {
            unsigned long lo, hi;
            int off = 0;
            if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &off) == 2 &&
                lo <= (uintptr_t)r->ptr && (uintptr_t)r->ptr < hi) {
                line[strcspn(line, "\n")] = '\0';
                const char *path          = off > 0 ? line + off : "";
                snprintf(name, sizeof(name), "%s",
                         strncmp(path, "/SYSV", 5) == 0     ? "sysv"
                         : strstr(path, "/dev/shm") != NULL ? "posix shm"
                         : path[0] == '\0'                  ? "anon"
                                                            : path);
                break;
            }
        }
        fclose(f);
    }
    int huge = bench_huge_percent(0, r->ptr, r->len, NULL);
    if (huge < 0) {
        snprintf(r->desc, sizeof(r->desc), "%s", name);
    } else {
        snprintf(r->desc, sizeof(r->desc), "%.24s, %d%% huge", name, huge);
    }
}

int bench_raw_create(bench_setup_t setup, size_t buf_size, double spin_s,
                     bench_raw_t **raw_p, char *err, size_t errlen)
{
    static const bench_mem_kind_t kinds[] = {BENCH_MEM_MALLOC, BENCH_MEM_THP,
                                             BENCH_MEM_SHM_THP};
    ucp_params_t cp;
    ucp_worker_params_t wp;
    ucp_mem_map_params_t mp;
    ucp_mem_attr_t ma;
    ucp_am_handler_param_t ap;
    ucp_config_t *config;
    ucs_status_t st;
    const char *what;
    bench_raw_t *r;

    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    r->setup  = setup;
    r->len    = buf_size;
    r->spin_s = spin_s;
    what     = "ucp_config_read";
    st       = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        goto err_free;
    }
    if (setup == BENCH_SETUP_UCX_THP) {
        /* UCX's allocator, transparent huge pages first (ucx_perftest with
         * UCX_ALLOC_PRIO=thp,... is how this machine's reference was taken) */
        ucp_config_modify(config, "ALLOC_PRIO", "thp,md:sysv,md:posix,huge,md:*,mmap,heap");
    }
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    cp.features   = UCP_FEATURE_AM | UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    cp.name       = "ckstore-bench-raw";
    what          = "ucp_init";
    st            = ucp_init(&cp, config, &r->ctx);
    ucp_config_release(config);
    if (st != UCS_OK) {
        goto err_free;
    }
    memset(&wp, 0, sizeof(wp));
    wp.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    what           = "ucp_worker_create";
    st             = ucp_worker_create(r->ctx, &wp, &r->worker);
    if (st != UCS_OK) {
        goto err_ctx;
    }
    what = "ucp_worker_get_efd";
    st   = ucp_worker_get_efd(r->worker, &r->efd);
    if (st != UCS_OK) {
        goto err_worker;
    }
    what = "ucp_worker_get_address";
    st   = ucp_worker_get_address(r->worker, &r->addr, &r->addr_len);
    if (st != UCS_OK) {
        goto err_worker;
    }
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.length     = buf_size;
    if (setup == BENCH_SETUP_UCX || setup == BENCH_SETUP_UCX_THP) {
        mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.address = NULL;
        mp.flags   = UCP_MEM_MAP_ALLOCATE;
    } else {
        if (bench_buf_alloc(kinds[setup], buf_size, &r->buf, err, errlen) != 0) {
            goto err_address;
        }
        mp.address = r->buf.ptr;
    }
    what = "ucp_mem_map";
    st   = ucp_mem_map(r->ctx, &mp, &r->memh);
    if (st != UCS_OK) {
        goto err_buf;
    }
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    what          = "ucp_mem_query";
    st            = ucp_mem_query(r->memh, &ma);
    if (st != UCS_OK) {
        goto err_memh;
    }
    r->ptr = ma.address;
    if (r->buf.ptr == NULL) {
        memset(r->ptr, 0, r->len); /* fault in what UCX allocated */
    }
    for (unsigned id = BENCH_AM_PUT; id <= BENCH_AM_GET; id++) {
        memset(&ap, 0, sizeof(ap));
        ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_ARG;
        ap.id  = id;
        ap.cb  = id == BENCH_AM_PUT   ? bench_am_put_cb
                 : id == BENCH_AM_REQ ? bench_am_req_cb
                                      : bench_am_get_cb;
        ap.arg = r;
        what   = "ucp_worker_set_am_recv_handler";
        st     = ucp_worker_set_am_recv_handler(r->worker, &ap);
        if (st != UCS_OK) {
            goto err_memh;
        }
    }
    bench_describe(r);
    *raw_p = r;
    return 0;

err_memh:
    ucp_mem_unmap(r->ctx, r->memh);
err_buf:
    bench_buf_free(&r->buf);
err_address:
    ucp_worker_release_address(r->worker, r->addr);
err_worker:
    ucp_worker_destroy(r->worker);
err_ctx:
    ucp_cleanup(r->ctx);
err_free:
    if (st != UCS_OK) {
        snprintf(err, errlen, "raw UCX (%s): %s: %s", bench_setup_name(setup), what,
                 ucs_status_string(st));
    }
    free(r);
    return -1;
}

void bench_raw_destroy(bench_raw_t *r)
{
    if (r == NULL) {
        return;
    }
    if (r->sink_error != UCS_OK) {
        fprintf(stderr, "ckstore-bench: raw UCX sink (%s): %s\n", bench_setup_name(r->setup),
                ucs_status_string(r->sink_error));
    }
    if (r->ep != NULL) {
        bench_raw_disconnect(r, 5.0);
    }
    if (r->tag_put_req != NULL) {
        ucp_request_cancel(r->worker, r->tag_put_req);
        ucp_request_free(r->tag_put_req);
    }
    if (r->tag_req_req != NULL) {
        ucp_request_cancel(r->worker, r->tag_req_req);
        ucp_request_free(r->tag_req_req);
    }
    if (r->rkey != NULL) {
        ucp_rkey_destroy(r->rkey);
    }
    ucp_mem_unmap(r->ctx, r->memh);
    bench_buf_free(&r->buf);
    ucp_worker_release_address(r->worker, r->addr);
    ucp_worker_destroy(r->worker);
    ucp_cleanup(r->ctx);
    free(r);
}

void bench_raw_address(bench_raw_t *r, const void **addr_p, size_t *len_p)
{
    *addr_p = r->addr;
    *len_p  = r->addr_len;
}

int bench_raw_rkey(bench_raw_t *r, uint64_t *addr_p, void **rkey_p, size_t *len_p)
{
    if (ucp_rkey_pack(r->ctx, r->memh, rkey_p, len_p) != UCS_OK) {
        return -1;
    }
    *addr_p = (uint64_t)(uintptr_t)r->ptr;
    return 0;
}

void bench_raw_rkey_release(void *rkey)
{
    ucp_rkey_buffer_release(rkey);
}

void *bench_raw_buffer(bench_raw_t *r)
{
    return r->ptr;
}

const char *bench_raw_describe(bench_raw_t *r)
{
    return r->desc;
}

int bench_raw_connect(bench_raw_t *r, const void *peer_addr, size_t len, char *err,
                      size_t errlen)
{
    ucp_ep_params_t p;
    ucs_status_t st;

    (void)len;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.address    = peer_addr;
    p.err_mode   = UCP_ERR_HANDLING_MODE_NONE; /* PEER would leave only TCP in UCX 1.13 */
    st           = ucp_ep_create(r->worker, &p, &r->ep);
    if (st != UCS_OK) {
        snprintf(err, errlen, "raw UCX: ucp_ep_create: %s", ucs_status_string(st));
        r->ep = NULL;
        return -1;
    }
    return 0;
}

void bench_raw_serve(bench_raw_t *r)
{
    r->sink = 1;
    bench_sink_post(r);
}

int bench_raw_set_remote(bench_raw_t *r, uint64_t addr, const void *rkey, size_t len,
                         char *err, size_t errlen)
{
    ucs_status_t st = ucp_ep_rkey_unpack(r->ep, rkey, &r->rkey);
    (void)len;
    if (st != UCS_OK) {
        snprintf(err, errlen, "raw UCX: ucp_ep_rkey_unpack: %s", ucs_status_string(st));
        return -1;
    }
    r->remote_addr = addr;
    return 0;
}

/* ---- the driver's transfers -------------------------------------------------------- */

int bench_raw_transfer(bench_raw_t *r, bench_method_t m, bench_dir_t d, size_t size,
                       double timeout_s, double *sec_p, char *err, size_t errlen)
{
    ucp_request_param_t p, q;
    bench_flag_t a = {0, UCS_OK}, b = {0, UCS_OK};
    bench_flag_t *second = NULL;
    ucs_status_t st;
    double t0, t1;

    if (size > r->len || r->ep == NULL) {
        snprintf(err, errlen, "raw UCX: %zu bytes: not connected or too large", size);
        return -1;
    }
    bench_param(&p, r, &a);
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK;
    bench_param(&q, r, &b);
    q.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK;
    q.cb.send = bench_send_cb;
    r->req_out = size;

    t0 = bench_now();
    switch (m) {
        case BENCH_METHOD_AM:
            if (d == BENCH_DIR_PUT) {
                p.cb.send = bench_send_cb;
                st = bench_req_start(ucp_am_send_nbx(r->ep, BENCH_AM_PUT, NULL, 0, r->ptr,
                                                     size, &p),
                                     &a);
            } else {
                r->am_get.done   = 0;
                r->am_get.status = UCS_OK;
                q.op_attr_mask &= ~(uint32_t)UCP_OP_ATTR_FIELD_MEMH;
                st = bench_req_start(ucp_am_send_nbx(r->ep, BENCH_AM_REQ, &r->req_out,
                                                     sizeof(r->req_out), NULL, 0, &q),
                                     &b);
                second = &b;
                if (st == UCS_OK || st == UCS_INPROGRESS) {
                    /* the reply lands through bench_am_get_cb() into r->am_get */
                    st = bench_wait(r, &b, NULL, 0, t0 + timeout_s);
                    if (st == UCS_OK) {
                        st = bench_wait(r, &r->am_get, NULL, 0, t0 + timeout_s);
                    }
                    goto done;
                }
            }
            break;
        case BENCH_METHOD_TAG:
            if (d == BENCH_DIR_PUT) {
                p.cb.send = bench_send_cb;
                st = bench_req_start(ucp_tag_send_nbx(r->ep, r->ptr, size, BENCH_TAG_PUT, &p),
                                     &a);
            } else {
                p.cb.recv = bench_tag_recv_cb;
                st = bench_req_start(ucp_tag_recv_nbx(r->worker, r->ptr, size, BENCH_TAG_GET,
                                                      BENCH_TAG_MASK, &p),
                                     &a);
                if (st == UCS_OK || st == UCS_INPROGRESS) {
                    q.op_attr_mask &= ~(uint32_t)UCP_OP_ATTR_FIELD_MEMH;
                    st = bench_req_start(ucp_tag_send_nbx(r->ep, &r->req_out,
                                                          sizeof(r->req_out), BENCH_TAG_REQ,
                                                          &q),
                                         &b);
                    second = &b;
                }
            }
            break;
        case BENCH_METHOD_RMA:
            if (r->rkey == NULL) {
                snprintf(err, errlen, "raw UCX: rma without the peer's rkey");
                return -1;
            }
            p.cb.send = bench_send_cb;
            if (d == BENCH_DIR_PUT) {
                st = bench_req_start(ucp_put_nbx(r->ep, r->ptr, size, r->remote_addr,
                                                 r->rkey, &p),
                                     &a);
                if (st == UCS_OK || st == UCS_INPROGRESS) {
                    /* the data is at the peer only once the endpoint is flushed */
                    q.op_attr_mask &= ~(uint32_t)UCP_OP_ATTR_FIELD_MEMH;
                    st     = bench_req_start(ucp_ep_flush_nbx(r->ep, &q), &b);
                    second = &b;
                }
            } else {
                st = bench_req_start(ucp_get_nbx(r->ep, r->ptr, size, r->remote_addr,
                                                 r->rkey, &p),
                                     &a);
            }
            break;
        default:
            st = UCS_ERR_INVALID_PARAM;
            break;
    }
    if (st == UCS_OK || st == UCS_INPROGRESS) {
        st = bench_wait(r, &a, second, m == BENCH_METHOD_RMA, t0 + timeout_s);
    }
done:
    t1 = bench_now();
    if (st != UCS_OK) {
        snprintf(err, errlen, "raw UCX %s %s of %zu bytes: %s", bench_method_name(m),
                 bench_dir_name(d), size, ucs_status_string(st));
        return -1;
    }
    *sec_p = t1 - t0;
    return 0;
}

int bench_raw_disconnect(bench_raw_t *r, double timeout_s)
{
    ucp_request_param_t p;
    bench_flag_t f = {0, UCS_OK};
    double deadline = bench_now() + timeout_s;
    int rc          = 0;

    if (r->ep == NULL) {
        return 0;
    }
    /* let the sink's last answers leave first */
    while (r->sends > 0 && bench_now() < deadline) {
        ucp_worker_progress(r->worker);
    }
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_FLAGS;
    p.cb.send   = bench_send_cb;
    p.user_data = &f;
    p.flags     = 0; /* flush: both sides progress while they close */
    if (bench_req_start(ucp_ep_close_nbx(r->ep, &p), &f) == UCS_INPROGRESS) {
        while (!f.done && bench_now() < deadline) {
            ucp_worker_progress(r->worker);
        }
        if (!f.done) {
            /* the request stays with UCX; the worker's destruction reclaims it */
            rc = -1;
        }
    }
    r->ep = NULL;
    return rc;
}

void bench_raw_print_ep(bench_raw_t *r, void *file)
{
    if (r->ep != NULL) {
        ucp_ep_print_info(r->ep, file);
    }
}

const char *bench_raw_transports(bench_raw_t *r)
{
    char *text = NULL, *line, *save = NULL;
    size_t len = 0, used = 0;
    FILE *f;

    if (r->tls[0] != '\0' || r->ep == NULL) {
        return r->tls;
    }
    f = open_memstream(&text, &len);
    if (f == NULL) {
        return r->tls;
    }
    ucp_ep_print_info(r->ep, f);
    fclose(f);
    /* "#  lane[2]:  5:cma/memory.0 md[4]  -> md[4]/cma/sysdev[255] rma_bw#0"
     * becomes "cma/memory.0(rma_bw#0)" */
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char *p = strstr(line, "lane["), *roles;
        if (p == NULL || (p = strchr(p, ':')) == NULL) {
            continue;
        }
        p += 1 + strspn(p + 1, " ");
        p += strspn(p, "0123456789");
        p += *p == ':';
        roles = strstr(p, "-> ");
        roles = roles != NULL ? roles + 3 + strcspn(roles + 3, " ") : "";
        roles += strspn(roles, " ");
        int n = snprintf(r->tls + used, sizeof(r->tls) - used, "%s%.*s%s%s%s",
                         used ? " " : "", (int)strcspn(p, " "), p, *roles ? "(" : "", roles,
                         *roles ? ")" : "");
        if (n < 0 || (size_t)n >= sizeof(r->tls) - used) {
            break;
        }
        used += (size_t)n;
    }
    free(text);
    return r->tls;
}
