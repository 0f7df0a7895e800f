/*
 * DESIGN: a remote key that is unpacked and never destroyed, for
 * test_leakcheck to show that LeakSanitizer reports it under the
 * suppressions of tests/lsan.supp.
 *
 * Does what ckstore's transport does for one-copy transfers (rma.c): UCX
 * allocates a region, packs its key, and a second worker unpacks the key on
 * an endpoint to the first. Then it releases everything in order, except
 * the unpacked key when run as "rkey_leak leak" (ucp_rkey_destroy() is not
 * called); "rkey_leak release" destroys it too and must leave nothing.
 * UCX 1.13 allocates a key of more than three memory domains with malloc()
 * in ucp_ep_rkey_unpack() (host memory here has self, sysv, posix and cma
 * keys); smaller keys come from a pool of the worker that the worker's
 * destroy frees, which no leak checker can see.
 *
 * Exit status: 0 when everything but the key (if asked) was released, 2 on
 * wrong use, 3 when UCX failed; a sanitizer's own status on a leak.
 * Never: link anything of ckstore (only UCX is under test here).
 */
#include <stdio.h>
#include <string.h>
#include <ucp/api/ucp.h>

static int rk_fail(const char *what, ucs_status_t st)
{
    fprintf(stderr, "rkey_leak: %s: %s\n", what, ucs_status_string(st));
    return 3;
}

/* Close ep, progressing both workers until the close completes. */
static void rk_ep_close(ucp_worker_h a, ucp_worker_h b, ucp_ep_h ep)
{
    ucp_request_param_t p;
    void *req;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    req = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(req)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS) {
            ucp_worker_progress(a);
            ucp_worker_progress(b);
        }
        ucp_request_free(req);
    }
}

int main(int argc, char **argv)
{
    ucp_params_t cp;
    ucp_worker_params_t wp;
    ucp_mem_map_params_t mp;
    ucp_ep_params_t ep_params;
    ucp_config_t *config;
    ucp_context_h context;
    ucp_worker_h owner, peer;
    ucp_address_t *address;
    size_t address_len, packed_len;
    ucp_mem_h memh;
    void *packed;
    ucp_ep_h ep;
    ucp_rkey_h rkey;
    ucs_status_t st;
    int leak;

    if (argc != 2 || (strcmp(argv[1], "leak") != 0 && strcmp(argv[1], "release") != 0)) {
        fprintf(stderr, "usage: rkey_leak leak|release\n");
        return 2;
    }
    leak = strcmp(argv[1], "leak") == 0;

    if ((st = ucp_config_read(NULL, NULL, &config)) != UCS_OK) {
        return rk_fail("config read", st);
    }
    memset(&cp, 0, sizeof(cp));
    cp.field_mask = UCP_PARAM_FIELD_FEATURES;
    cp.features = UCP_FEATURE_RMA;
    st = ucp_init(&cp, config, &context);
    ucp_config_release(config);
    if (st != UCS_OK) {
        return rk_fail("init", st);
    }
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if ((st = ucp_worker_create(context, &wp, &owner)) != UCS_OK ||
        (st = ucp_worker_create(context, &wp, &peer)) != UCS_OK) {
        return rk_fail("worker create", st);
    }
    if ((st = ucp_worker_get_address(owner, &address, &address_len)) != UCS_OK) {
        return rk_fail("worker address", st);
    }
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = 4096;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    if ((st = ucp_mem_map(context, &mp, &memh)) != UCS_OK) {
        return rk_fail("mem map", st);
    }
    if ((st = ucp_rkey_pack(context, memh, &packed, &packed_len)) != UCS_OK) {
        return rk_fail("rkey pack", st);
    }
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = address;
    if ((st = ucp_ep_create(peer, &ep_params, &ep)) != UCS_OK) {
        return rk_fail("ep create", st);
    }
    if ((st = ucp_ep_rkey_unpack(ep, packed, &rkey)) != UCS_OK) {
        return rk_fail("rkey unpack", st);
    }
    printf("rkey_leak: unpacked a remote key of %zu bytes\n", packed_len);
    if (leak) {
        printf("rkey_leak: leaving it without ucp_rkey_destroy()\n");
    } else {
        ucp_rkey_destroy(rkey);
        printf("rkey_leak: destroyed it\n");
    }
    fflush(stdout);

    rk_ep_close(owner, peer, ep);
    ucp_rkey_buffer_release(packed);
    ucp_mem_unmap(context, memh);
    ucp_worker_release_address(owner, address);
    ucp_worker_destroy(peer);
    ucp_worker_destroy(owner);
    ucp_cleanup(context);
    return 0;
}
