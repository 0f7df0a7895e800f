/*
 * DESIGN: one copy between processes of one host. A client allocates its
 * buffers through UCX in shared memory (cks_tp_mem_alloc()) and names a part
 * of them in an RMA descriptor instead of sending the bytes; the server reads
 * a put's bytes from there with ucp_get_nbx(), or writes a get's bytes there
 * with ucp_put_nbx(). Between processes of one host UCX's sysv/posix
 * transports serve these for memory they allocated: the server attaches the
 * client's segment once, and every transfer after that is one memcpy in user
 * space, against a copy by the kernel (CMA) plus a rendezvous handshake.
 *
 * Descriptor (the AM data of a message with CKS_WIRE_F_RMA), big-endian:
 *   magic u32 "CKR1" | addr u64 | len u64 | seg_base u64 | seg_len u64 |
 *   rkey_len u32 | packed remote key (rkey_len bytes)
 * [addr, addr + len) must lie in the region [seg_base, seg_base + seg_len)
 * that the key opens.
 *
 * Trust: UCX 1.13 does not check a remote address against the segment a key
 * maps, and a mapped segment is plain memory of this process. So when UCX
 * maps the peer's region here (ucp_rkey_ptr() answers), the unpack must have
 * made a new shared mapping that starts exactly at the region's base and is
 * at least as long as the descriptor says; otherwise the descriptor is
 * refused. With that, a peer can only make us read or write its own segment.
 *
 * Thread: the worker's, like the rest of the transport (cks_tp_mem_alloc()
 * and the describing functions excepted: they touch no worker state).
 */
#include "tp_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#define CKS_TP_RMA_MAGIC 0x434b5231u /* "CKR1" */
#define CKS_TP_RMA_HDR   (40u + CKS_WIRE_NONCE_LEN) /* descriptor header, token included */
#define CKS_TP_MEM_HDR   4096u /* a region's header: magic and its owner's token */
static const char cks_tp_mem_magic[8] = "CKSMEM01";

/* ---- memory ----------------------------------------------------------------- */

cks_status_t cks_tp_mem_alloc(cks_tp_worker_h w, size_t len, cks_tp_mem_h *mem_p,
                              void **addr_p)
{
    ucp_mem_map_params_t p;
    ucp_mem_attr_t a;
    void *rkey = NULL;
    size_t rkey_len = 0;
    cks_tp_mem_h m;
    cks_status_t status;

    if (w == NULL || len == 0 || mem_p == NULL || addr_p == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    m->worker    = w;
    m->allocated = 1;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                   UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    p.address    = NULL;
    p.length     = len + CKS_TP_MEM_HDR;
    p.flags      = UCP_MEM_MAP_ALLOCATE;
    status       = cks_tp_status(ucp_mem_map(w->context, &p, &m->memh), "allocate memory");
    if (status != CKS_OK) {
        free(m);
        return status;
    }
    a.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    status       = cks_tp_status(ucp_mem_query(m->memh, &a), "query memory");
    if (status == CKS_OK) {
        status = cks_tp_status(ucp_rkey_pack(w->context, m->memh, &rkey, &rkey_len),
                               "pack remote key");
    }
    if (status == CKS_OK && rkey_len > CKS_TP_RMA_DESC_MAX - CKS_TP_RMA_HDR) {
        cks_warn("a packed remote key of %zu bytes is too long", rkey_len);
        status = CKS_ERR_UNSUPPORTED;
    }
    if (status == CKS_OK && (m->rkey = malloc(rkey_len)) == NULL) {
        status = CKS_ERR_NO_MEMORY;
    }
    if (status != CKS_OK) {
        if (rkey != NULL) {
            ucp_rkey_buffer_release(rkey);
        }
        ucp_mem_unmap(w->context, m->memh);
        free(m);
        return status;
    }
    memcpy(m->rkey, rkey, rkey_len);
    ucp_rkey_buffer_release(rkey);
    m->rkey_len = rkey_len;
    m->base     = a.address;
    m->len      = a.length;
    /* the header proves the region is ours to whoever maps it */
    memcpy(m->base, cks_tp_mem_magic, sizeof(cks_tp_mem_magic));
    memcpy((uint8_t *)m->base + sizeof(cks_tp_mem_magic), w->rma_token, CKS_WIRE_NONCE_LEN);
    *mem_p  = m;
    *addr_p = (uint8_t *)a.address + CKS_TP_MEM_HDR;
    return CKS_OK;
}

int cks_tp_mem_holds(cks_tp_mem_h m, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, b = (uintptr_t)m->base + CKS_TP_MEM_HDR;
    size_t n    = m->len - CKS_TP_MEM_HDR;
    return m->allocated && a >= b && a - b <= n && len <= n - (a - b);
}

cks_status_t cks_tp_mem_describe(cks_tp_mem_h m, const void *addr, size_t len, void *buf,
                                 size_t buf_len, size_t *len_p)
{
    uint8_t *d = buf;

    if (m == NULL || !cks_tp_mem_holds(m, addr, len) || len_p == NULL ||
        buf_len < CKS_TP_RMA_HDR + m->rkey_len) {
        return CKS_ERR_INVALID_PARAM;
    }
    cks_put_be64(d, (uint64_t)CKS_TP_RMA_MAGIC << 32); /* magic; the low half is overwritten */
    cks_put_be64(d + 4, (uint64_t)(uintptr_t)addr);
    cks_put_be64(d + 12, len);
    cks_put_be64(d + 20, (uint64_t)(uintptr_t)m->base);
    cks_put_be64(d + 28, m->len);
    d[36] = (uint8_t)(m->rkey_len >> 24);
    d[37] = (uint8_t)(m->rkey_len >> 16);
    d[38] = (uint8_t)(m->rkey_len >> 8);
    d[39] = (uint8_t)m->rkey_len;
    memcpy(d + 40, m->worker->rma_token, CKS_WIRE_NONCE_LEN);
    memcpy(d + CKS_TP_RMA_HDR, m->rkey, m->rkey_len);
    *len_p = CKS_TP_RMA_HDR + m->rkey_len;
    return CKS_OK;
}

cks_status_t cks_tp_rma_parse(const void *buf, size_t len, cks_tp_data_t *d)
{
    const uint8_t *p = buf;
    uint64_t addr, alen, base, slen;
    uint32_t klen;

    if (len < CKS_TP_RMA_HDR || len > CKS_TP_RMA_DESC_MAX ||
        (cks_get_be64(p) >> 32) != CKS_TP_RMA_MAGIC) {
        return CKS_ERR_BAD_MESSAGE;
    }
    addr = cks_get_be64(p + 4);
    alen = cks_get_be64(p + 12);
    base = cks_get_be64(p + 20);
    slen = cks_get_be64(p + 28);
    klen = ((uint32_t)p[36] << 24) | ((uint32_t)p[37] << 16) | ((uint32_t)p[38] << 8) | p[39];
    /* the range lies in the region, past its header */
    if (klen == 0 || klen != len - CKS_TP_RMA_HDR || slen <= CKS_TP_MEM_HDR ||
        base + slen < base || addr < base + CKS_TP_MEM_HDR || addr - base > slen ||
        alen > slen - (addr - base) || alen > SIZE_MAX) {
        return CKS_ERR_BAD_MESSAGE;
    }
    d->is_rma       = 1;
    d->is_rndv      = 0;
    d->ptr          = NULL;
    d->desc         = NULL;
    d->length       = (size_t)alen;
    d->rma_addr     = addr;
    d->rma_seg_base = base;
    d->rma_seg_len  = slen;
    d->rkey         = p + CKS_TP_RMA_HDR;
    d->rkey_len     = klen;
    d->rma_token    = p + 40;
    return CKS_OK;
}

/* ---- key shapes ------------------------------------------------------------------ */

/*
 * UCX 1.13 unpacks a key without checking it, and a malformed one crashes it
 * (a NULL function pointer for a memory domain that is not there). A key
 * that UCX packs for memory it allocated on this host has a fixed shape: a
 * map of memory domains, a memory type, then per domain a size byte and that
 * many bytes. We pack one for ourselves at start and accept only keys whose
 * map, memory type and size bytes are the same; the bytes of each domain's
 * key (a segment id, an address) vary, and the transports check those with
 * the system calls that attach the segment.
 */
int cks_tp_key_walk(const uint8_t *k, size_t len, size_t map_len, const uint8_t *shape)
{
    uint64_t map = 0;
    size_t pos   = map_len + 1;

    if (len < map_len + 1) {
        return -1;
    }
    for (size_t i = 0; i < map_len; i++) {
        map |= (uint64_t)k[i] << (8 * i); /* UCX packs it in host order (little-endian) */
    }
    if (k[map_len] != 0 /* UCS_MEMORY_TYPE_HOST */ || map == 0) {
        return -1;
    }
    for (unsigned bit = 0; bit < 8 * map_len; bit++) {
        if (!(map & (1ull << bit))) {
            continue;
        }
        if (pos >= len || (shape != NULL && k[pos] != shape[pos])) {
            return -1;
        }
        pos += 1 + (size_t)k[pos];
    }
    return pos == len ? 0 : -1;
}

/* ---- the peer's segment, held across the unpack ------------------------------- *
 * UCX 1.13 attaches a peer's shared-memory segment inside ucp_ep_rkey_unpack().
 * When that fails (the segment is gone: its owner freed it, or exited, after
 * it sent the key) UCX destroys the half-unpacked key, releasing the domains
 * it never unpacked too, and the process dies in uct_rkey_release(). So the
 * segment is attached here first, the key refused when it cannot be, and held
 * until UCX has its own mapping:
 *  - sysv: the owner marks its segment removed at allocation; a removed
 *    segment lives while anyone is attached, so with our shmat() held, UCX's
 *    shmat() of the same id (same call, same permissions) finds it;
 *  - posix: UCX opens the owner's file through /proc/<pid>/fd/<fd> (gone with
 *    the owner) or by name (gone at its free); we open it, and UCX is given a
 *    copy of the key that names our descriptor in our /proc instead.
 * Then the object UCX attaches cannot go away before it returns; what can
 * still fail its attach is a lack of address space. The key's domain is found
 * at start by the bytes the domain packed for our own region. */

#define CKS_TP_SEG_SYSV  1 /* mm_sysv.c: shmid u32 | owner's address u64 */
#define CKS_TP_SEG_POSIX 2 /* mm_posix.c: seg_id u64 | address u64 | length u64 | dir */
#define CKS_TP_POSIX_PROCFS   (1ull << 63) /* mmid: pid | fd << 30 */
#define CKS_TP_POSIX_SHM_OPEN (1ull << 62) /* /dev/shm/ucx_shm_posix_<mmid> */
#define CKS_TP_POSIX_HUGETLB  (1ull << 61)
#define CKS_TP_POSIX_FLAGS    (0xfull << 60)
#define CKS_TP_POSIX_PID_BITS 30

static void cks_tp_key_seg_find(cks_tp_worker_h w, cks_tp_mem_h m)
{
    const uint8_t *k = m->rkey;
    size_t pos       = w->key_map_len + 1;
    uint64_t map = 0, addr, len;
    uint32_t shmid;
    struct shmid_ds ds;

    for (size_t i = 0; i < w->key_map_len; i++) {
        map |= (uint64_t)k[i] << (8 * i); /* as cks_tp_key_walk(), which checked the layout */
    }
    for (unsigned bit = 0; bit < 8 * w->key_map_len; bit++) {
        if (!(map & (1ull << bit))) {
            continue;
        }
        const uint8_t *b = k + pos + 1;
        if (k[pos] == 12) {
            memcpy(&shmid, b, sizeof(shmid));
            memcpy(&addr, b + 4, sizeof(addr));
            if (addr == (uintptr_t)m->base && shmctl((int)shmid, IPC_STAT, &ds) == 0 &&
                ds.shm_segsz >= m->len) {
                w->key_seg_kind = CKS_TP_SEG_SYSV;
            }
        } else if (k[pos] >= 24) {
            memcpy(&addr, b + 8, sizeof(addr));
            memcpy(&len, b + 16, sizeof(len));
            if (addr == (uintptr_t)m->base && len >= m->len) {
                w->key_seg_kind = CKS_TP_SEG_POSIX;
            }
        }
        if (w->key_seg_kind != 0) {
            w->key_seg_off = pos + 1;
            return;
        }
        pos += 1 + (size_t)k[pos];
    }
}

typedef struct {
    void *shm; /* our attachment of a sysv segment, or NULL */
    int fd;    /* our descriptor of a posix segment's file, or -1 */
} cks_tp_seg_hold_t;

/* Attach the segment that k (a copy of a key of our shape) names, and point
 * a posix key at our descriptor; CKS_ERR_BAD_MESSAGE when it is gone. */
static cks_status_t cks_tp_seg_hold(cks_tp_conn_h conn, uint8_t *k, cks_tp_seg_hold_t *h)
{
    cks_tp_worker_h w = conn->worker;
    uint8_t *b        = k + w->key_seg_off;
    char path[PATH_MAX];
    uint32_t shmid;
    uint64_t id, mmid;

    h->shm = NULL;
    h->fd  = -1;
    if (w->key_seg_kind == CKS_TP_SEG_SYSV) {
        memcpy(&shmid, b, sizeof(shmid));
        h->shm = shmat((int)shmid, NULL, 0);
        if (h->shm != (void *)-1) {
            return CKS_OK;
        }
        h->shm = NULL;
    } else if (w->key_seg_kind == CKS_TP_SEG_POSIX) {
        memcpy(&id, b, sizeof(id));
        mmid = id & ~CKS_TP_POSIX_FLAGS;
        if (id & CKS_TP_POSIX_PROCFS) {
            snprintf(path, sizeof(path), "/proc/%d/fd/%d",
                     (int)(mmid & ((1ull << CKS_TP_POSIX_PID_BITS) - 1)),
                     (int)(mmid >> CKS_TP_POSIX_PID_BITS));
        } else if (id & CKS_TP_POSIX_SHM_OPEN) {
            snprintf(path, sizeof(path), "/dev/shm/ucx_shm_posix_%" PRIx64, mmid);
        } else {
            size_t n = b[-1] - 24; /* the directory, NUL-terminated */
            if (memchr(b + 24, 0, n) == NULL) {
                return CKS_ERR_BAD_MESSAGE;
            }
            snprintf(path, sizeof(path), "%s/ucx_shm_posix_%" PRIx64, (const char *)b + 24,
                     mmid);
        }
        h->fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
        if (h->fd >= 0) {
            id = (id & CKS_TP_POSIX_HUGETLB) | CKS_TP_POSIX_PROCFS | (uint64_t)getpid() |
                 (uint64_t)h->fd << CKS_TP_POSIX_PID_BITS;
            memcpy(b, &id, sizeof(id));
            return CKS_OK;
        }
    } else {
        return CKS_OK; /* no domain that attaches */
    }
    cks_warn("%s: %s sent a key of memory that is gone: %s", w->name, conn->peer,
             strerror(errno));
    return CKS_ERR_BAD_MESSAGE;
}

static void cks_tp_seg_release(cks_tp_seg_hold_t *h)
{
    if (h->shm != NULL) {
        shmdt(h->shm);
    }
    if (h->fd >= 0) {
        close(h->fd);
    }
}

void cks_tp_rma_init(cks_tp_worker_h w)
{
    static const size_t map_lens[] = {8, 4, 2};
    cks_tp_mem_h m;
    void *addr;

    if (cks_tp_nonce(w->rma_token) != CKS_OK) {
        return;
    }
    if (cks_tp_mem_alloc(w, 1, &m, &addr) != CKS_OK) {
        return;
    }
    for (size_t i = 0; i < sizeof(map_lens) / sizeof(map_lens[0]); i++) {
        if (cks_tp_key_walk(m->rkey, m->rkey_len, map_lens[i], NULL) == 0 &&
            (w->key_shape = malloc(m->rkey_len)) != NULL) {
            memcpy(w->key_shape, m->rkey, m->rkey_len);
            w->key_shape_len = m->rkey_len;
            w->key_map_len   = map_lens[i];
            break;
        }
    }
    if (w->key_shape == NULL) {
        cks_info("%s: UCX's remote keys have an unknown layout: one-copy transfers are off",
                 w->name);
    } else {
        cks_tp_key_seg_find(w, m);
    }
    cks_tp_mem_unmap(m);
}

/* Does a peer's key have the shape of ours? */
static int cks_tp_key_ok(cks_tp_worker_h w, const uint8_t *k, size_t len)
{
    return w->key_shape != NULL && len == w->key_shape_len &&
           memcmp(k, w->key_shape, w->key_map_len + 1) == 0 &&
           cks_tp_key_walk(k, len, w->key_map_len, w->key_shape) == 0;
}

int cks_tp_conn_local(cks_tp_conn_h conn)
{
    return conn->local && conn->data_ep != NULL && !conn->failed && !conn->closed;
}

/* ---- remote keys --------------------------------------------------------------- */

/* The start addresses of this process's mappings (sorted as the kernel
 * lists them); NULL when /proc/self/maps cannot be read. */
static uintptr_t *cks_tp_map_starts(size_t *n_p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    uintptr_t *v = NULL, start, end;
    size_t n = 0, cap = 0;
    char line[512];

    if (f == NULL) {
        return NULL;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%lx-%lx", &start, &end) != 2) {
            continue;
        }
        if (n == cap) {
            uintptr_t *nv = realloc(v, (cap = cap ? 2 * cap : 512) * sizeof(*v));
            if (nv == NULL) {
                free(v);
                fclose(f);
                return NULL;
            }
            v = nv;
        }
        v[n++] = start;
    }
    fclose(f);
    *n_p = n;
    return v != NULL ? v : calloc(1, sizeof(*v));
}

/* The mapping that holds p: its bounds and whether it is shared. */
static int cks_tp_map_find(uintptr_t p, uintptr_t *start_p, uintptr_t *end_p, int *shared_p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    uintptr_t start, end;
    char perms[8], line[512];
    int found = 0;

    if (f == NULL) {
        return 0;
    }
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && p >= start && p < end) {
            *start_p  = start;
            *end_p    = end;
            *shared_p = perms[3] == 's';
            found     = 1;
        }
    }
    fclose(f);
    return found;
}

/* Where UCX maps the region into this process, check that the mapping is
 * the one the unpack made for it (see the top of this file). */
static cks_status_t cks_tp_rkey_check(ucp_rkey_h rkey, const cks_tp_data_t *d,
                                      const uintptr_t *before, size_t nbefore, void **local_p)
{
    uintptr_t start, end;
    void *local;
    int shared;

    *local_p = NULL;
    if (ucp_rkey_ptr(rkey, d->rma_seg_base, &local) != UCS_OK) {
        return CKS_OK; /* not mapped here: the transfer goes through the peer or a NIC */
    }
    if (!cks_tp_map_find((uintptr_t)local, &start, &end, &shared) ||
        start != (uintptr_t)local || !shared || end - start < d->rma_seg_len) {
        return CKS_ERR_BAD_MESSAGE;
    }
    for (size_t i = 0; i < nbefore; i++) {
        if (before[i] == start) {
            return CKS_ERR_BAD_MESSAGE; /* a mapping that was there before */
        }
    }
    /* the region's owner wrote its token there: the peer's own region */
    if (memcmp(local, cks_tp_mem_magic, sizeof(cks_tp_mem_magic)) != 0 ||
        CRYPTO_memcmp((const uint8_t *)local + sizeof(cks_tp_mem_magic), d->rma_token,
                      CKS_WIRE_NONCE_LEN) != 0) {
        return CKS_ERR_AUTH;
    }
    *local_p = local;
    return CKS_OK;
}

/* Fault the blocks of [addr, addr + len) that no transfer touched yet into
 * our page tables in one call each, rather than a page fault per 4 KiB page
 * during the copy; only the blocks used: each server of a cluster touches
 * its own share of a client's buffer. */
static void cks_tp_rkey_fault(cks_tp_rkey_t *rk, uint64_t addr, size_t len)
{
    uint64_t first, last;

    if (rk->local == NULL || rk->faulted == NULL || len == 0) {
        return;
    }
    first = (addr - rk->seg_base) / CKS_TP_FAULT_BLOCK;
    last  = (addr - rk->seg_base + len - 1) / CKS_TP_FAULT_BLOCK;
    for (uint64_t b = first; b <= last; b++) {
        if (!(rk->faulted[b / 8] & (1u << (b % 8)))) {
            uint64_t off = b * CKS_TP_FAULT_BLOCK;
            size_t n     = (size_t)CKS_MIN((uint64_t)CKS_TP_FAULT_BLOCK, rk->seg_len - off);
            (void)madvise((uint8_t *)rk->local + off, n, MADV_POPULATE_WRITE);
            rk->faulted[b / 8] |= (uint8_t)(1u << (b % 8));
        }
    }
}

/* For the copy threads, which fault in what they copy themselves: 1 when a
 * block of [addr, addr + len) is not in our page tables yet; every block is
 * marked as faulted in from here on. */
static int cks_tp_rkey_unfaulted(cks_tp_rkey_t *rk, uint64_t addr, size_t len)
{
    uint64_t first, last;
    int any = 0;

    if (rk->local == NULL || rk->faulted == NULL || len == 0) {
        return 0;
    }
    first = (addr - rk->seg_base) / CKS_TP_FAULT_BLOCK;
    last  = (addr - rk->seg_base + len - 1) / CKS_TP_FAULT_BLOCK;
    for (uint64_t b = first; b <= last; b++) {
        if (!(rk->faulted[b / 8] & (1u << (b % 8)))) {
            rk->faulted[b / 8] |= (uint8_t)(1u << (b % 8));
            any = 1;
        }
    }
    return any;
}

static void cks_tp_rkey_clear(cks_tp_rkey_t *rk)
{
    if (rk->packed != NULL) {
        ucp_rkey_destroy(rk->rkey);
        free(rk->packed);
        free(rk->faulted);
        rk->packed  = NULL;
        rk->faulted = NULL;
    }
}

void cks_tp_rkeys_release(cks_tp_conn_h conn)
{
    for (unsigned i = 0; i < CKS_TP_RKEYS; i++) {
        cks_tp_rkey_clear(&conn->rkeys[i]);
    }
}

/* The key of d's region, unpacked on first use and kept. */
static cks_status_t cks_tp_rkey_get(cks_tp_conn_h conn, const cks_tp_data_t *d,
                                    cks_tp_rkey_t **rk_p)
{
    cks_tp_rkey_t *rk = NULL, *idle = NULL;
    uint8_t key[CKS_TP_RMA_DESC_MAX];
    cks_tp_seg_hold_t hold;
    uintptr_t *before = NULL;
    size_t nbefore = 0;
    void *local    = NULL;
    ucp_rkey_h rkey;
    cks_status_t status;

    if (conn->failed || conn->closed) {
        return CKS_ERR_CONN_LOST;
    }
    if (conn->data_ep == NULL || conn->worker->key_shape == NULL) {
        return CKS_ERR_UNSUPPORTED; /* no transport that reaches the peer's memory */
    }
    if (!cks_tp_key_ok(conn->worker, d->rkey, d->rkey_len)) {
        cks_warn("%s: %s sent a remote key of another shape than ours", conn->worker->name,
                 conn->peer);
        return CKS_ERR_UNSUPPORTED; /* another UCX, or other transports: send the bytes */
    }
    for (unsigned i = 0; i < CKS_TP_RKEYS; i++) {
        cks_tp_rkey_t *r = &conn->rkeys[i];
        if (r->packed != NULL && r->packed_len == d->rkey_len &&
            r->seg_base == d->rma_seg_base && r->seg_len == d->rma_seg_len &&
            memcmp(r->token, d->rma_token, CKS_WIRE_NONCE_LEN) == 0 &&
            memcmp(r->packed, d->rkey, d->rkey_len) == 0) {
            r->used_ns = cks_time_ns();
            *rk_p      = r;
            return CKS_OK;
        }
        if (r->packed == NULL) {
            rk = r;
        } else if (r->refs == 0 && (idle == NULL || r->used_ns < idle->used_ns)) {
            idle = r;
        }
    }
    rk = rk != NULL ? rk : idle; /* a free slot, or the least recently used idle one */
    if (rk == NULL) {
        return CKS_ERR_BUSY;
    }
    cks_tp_rkey_clear(rk);
    if ((rk->packed = malloc(d->rkey_len)) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    memcpy(key, d->rkey, d->rkey_len); /* cks_tp_rma_parse() bounded it */
    status = cks_tp_seg_hold(conn, key, &hold);
    if (status == CKS_OK && (before = cks_tp_map_starts(&nbefore)) == NULL) {
        cks_tp_seg_release(&hold);
        status = CKS_ERR_NO_MEMORY;
    }
    if (status != CKS_OK) {
        free(rk->packed);
        rk->packed = NULL;
        return status;
    }
    status = cks_tp_status(ucp_ep_rkey_unpack(conn->data_ep, key, &rkey), "unpack remote key");
    cks_tp_seg_release(&hold); /* UCX's own attachment keeps it now */
    if (status == CKS_OK) {
        status = cks_tp_rkey_check(rkey, d, before, nbefore, &local);
        if (status != CKS_OK && status != CKS_ERR_AUTH) {
            status = CKS_ERR_BAD_MESSAGE;
        }
        if (status != CKS_OK) {
            cks_warn("%s: %s sent a descriptor that does not match its memory", conn->worker->name,
                     conn->peer);
            ucp_rkey_destroy(rkey);
        }
    } else {
        status = CKS_ERR_BAD_MESSAGE; /* a key that UCX cannot use */
    }
    free(before);
    if (status != CKS_OK) {
        free(rk->packed);
        rk->packed = NULL;
        return status;
    }
    memcpy(rk->packed, d->rkey, d->rkey_len);
    rk->packed_len = d->rkey_len;
    rk->seg_base   = d->rma_seg_base;
    memcpy(rk->token, d->rma_token, CKS_WIRE_NONCE_LEN);
    rk->seg_len    = d->rma_seg_len;
    rk->rkey       = rkey;
    rk->local      = local;
    rk->faulted    = local != NULL
                         ? calloc((d->rma_seg_len / CKS_TP_FAULT_BLOCK + 8) / 8, 1)
                         : NULL;
    rk->refs       = 0;
    rk->used_ns    = cks_time_ns();
    *rk_p          = rk;
    return CKS_OK;
}

/* ---- prefault ------------------------------------------------------------------ *
 * A region a peer names ahead of its transfers (MEM_MAP) is mapped here at
 * once and its pages faulted into our page tables by one helper thread, in
 * slices, so that neither the worker's thread nor the first transfers pay
 * for it (4 KiB pages of shared memory: about 40 ms per 512 MiB). The job
 * holds the connection and the key (refs), so the mapping outlives it. */

#define CKS_TP_PF_SLICE (32u << 20) /* faulted in per call; the stop is checked between */

typedef struct cks_tp_pf_job {
    struct cks_tp_pf_job *next;
    cks_tp_conn_h conn; /* one reference */
    cks_tp_rkey_t *rk;  /* held (refs) */
    uint8_t *addr;      /* the region as mapped here */
    size_t len;
    int err;            /* errno of a failed madvise(); -1: stopped first */
    cks_tp_done_cb_t cb;
    void *arg;
} cks_tp_pf_job_t;

struct cks_tp_pf {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    cks_tp_pf_job_t *head, *tail; /* queued, oldest first */
    cks_tp_pf_job_t *done;        /* finished, for the worker's thread */
    int stop;
    cks_tp_worker_h w;
};

static void *cks_tp_pf_thread(void *arg)
{
    struct cks_tp_pf *pf = arg;

    pthread_mutex_lock(&pf->lock);
    for (;;) {
        while (pf->head == NULL && !pf->stop) {
            pthread_cond_wait(&pf->cond, &pf->lock);
        }
        if (pf->stop) {
            break; /* the rest is called back as canceled */
        }
        cks_tp_pf_job_t *j = pf->head;
        pf->head           = j->next;
        if (pf->head == NULL) {
            pf->tail = NULL;
        }
        pthread_mutex_unlock(&pf->lock);
        j->err = 0;
        for (size_t off = 0; off < j->len && j->err == 0; off += CKS_TP_PF_SLICE) {
            size_t n = CKS_MIN((size_t)CKS_TP_PF_SLICE, j->len - off);
            if (madvise(j->addr + off, n, MADV_POPULATE_WRITE) != 0) {
                j->err = errno != 0 ? errno : EIO;
            } else if (__atomic_load_n(&pf->stop, __ATOMIC_RELAXED)) {
                j->err = -1;
            }
        }
        pthread_mutex_lock(&pf->lock);
        j->next  = pf->done;
        pf->done = j;
        ucp_worker_signal(pf->w->worker); /* thread-safe: wakes the worker's thread */
    }
    pthread_mutex_unlock(&pf->lock);
    return NULL;
}

static void cks_tp_pf_finish(cks_tp_pf_job_t *j)
{
    cks_tp_rkey_t *rk   = j->rk;
    cks_status_t status = CKS_OK;

    if (j->err == 0) {
        /* every block is in our page tables: transfers skip the fault-in */
        memset(rk->faulted, 0xff, (rk->seg_len / CKS_TP_FAULT_BLOCK + 8) / 8);
    } else if (j->err < 0) {
        status = CKS_ERR_CANCELED;
    } else {
        status = j->err == EINVAL ? CKS_ERR_UNSUPPORTED : CKS_ERR_NO_MEMORY;
        cks_warn("%s: faulting in %zu bytes of %s's memory: %s", j->conn->worker->name, j->len,
                 j->conn->peer, strerror(j->err));
    }
    rk->refs--;
    j->cb(j->arg, status);
    cks_tp_conn_put(j->conn); /* may free the connection, and its keys */
    free(j);
}

unsigned cks_tp_rma_pf_poll(cks_tp_worker_h w)
{
    struct cks_tp_pf *pf = w->pf;
    cks_tp_pf_job_t *list;
    unsigned n = 0;

    pthread_mutex_lock(&pf->lock);
    list     = pf->done;
    pf->done = NULL;
    pthread_mutex_unlock(&pf->lock);
    while (list != NULL) {
        cks_tp_pf_job_t *next = list->next;
        cks_tp_pf_finish(list);
        list = next;
        n++;
    }
    return n;
}

void cks_tp_rma_pf_stop(cks_tp_worker_h w)
{
    struct cks_tp_pf *pf = w->pf;

    if (pf == NULL) {
        return;
    }
    pthread_mutex_lock(&pf->lock);
    __atomic_store_n(&pf->stop, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&pf->cond);
    pthread_mutex_unlock(&pf->lock);
    pthread_join(pf->thread, NULL);
    for (cks_tp_pf_job_t *j = pf->head; j != NULL; j = j->next) {
        j->err = -1;
    }
    if (pf->tail != NULL) {
        pf->tail->next = pf->done;
        pf->done       = pf->head;
        pf->head = pf->tail = NULL;
    }
    cks_tp_rma_pf_poll(w);
    pthread_cond_destroy(&pf->cond);
    pthread_mutex_destroy(&pf->lock);
    free(pf);
    w->pf = NULL;
}

static struct cks_tp_pf *cks_tp_pf_get(cks_tp_worker_h w)
{
    struct cks_tp_pf *pf = w->pf;

    if (pf != NULL) {
        return pf;
    }
    pf = calloc(1, sizeof(*pf));
    if (pf == NULL) {
        return NULL;
    }
    pf->w = w;
    pthread_mutex_init(&pf->lock, NULL);
    pthread_cond_init(&pf->cond, NULL);
    if (pthread_create(&pf->thread, NULL, cks_tp_pf_thread, pf) != 0) {
        pthread_cond_destroy(&pf->cond);
        pthread_mutex_destroy(&pf->lock);
        free(pf);
        return NULL;
    }
    w->pf = pf;
    return pf;
}

cks_status_t cks_tp_rma_prefault(cks_tp_conn_h conn, const cks_tp_data_t *data,
                                 cks_tp_done_cb_t cb, void *arg)
{
    struct cks_tp_pf *pf;
    cks_tp_pf_job_t *j;
    cks_tp_rkey_t *rk;
    cks_status_t status;
    uint64_t nblocks;
    int all = 1;

    if (conn == NULL || data == NULL || !data->is_rma || cb == NULL) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_tp_rkey_get(conn, data, &rk); /* maps it, once */
    if (status != CKS_OK) {
        return status;
    }
    if (rk->local == NULL || rk->faulted == NULL) {
        return CKS_OK; /* UCX reaches it without a mapping here */
    }
    nblocks = (rk->seg_len + CKS_TP_FAULT_BLOCK - 1) / CKS_TP_FAULT_BLOCK;
    for (uint64_t b = 0; b < nblocks && all; b++) {
        all = (rk->faulted[b / 8] >> (b % 8)) & 1u;
    }
    if (all) {
        return CKS_OK;
    }
    if ((pf = cks_tp_pf_get(conn->worker)) == NULL || (j = calloc(1, sizeof(*j))) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    j->conn = conn;
    j->rk   = rk;
    j->addr = rk->local;
    j->len  = (size_t)rk->seg_len;
    j->cb   = cb;
    j->arg  = arg;
    rk->refs++;
    cks_tp_conn_get(conn);
    pthread_mutex_lock(&pf->lock);
    if (pf->tail != NULL) {
        pf->tail->next = j;
    } else {
        pf->head = j;
    }
    pf->tail = j;
    pthread_cond_signal(&pf->cond);
    pthread_mutex_unlock(&pf->lock);
    return CKS_INPROGRESS;
}

/* ---- transfers ------------------------------------------------------------------ */

typedef struct {
    cks_tp_conn_h conn;
    cks_tp_rkey_t *rk;
    cks_tp_done_cb_t cb;
    void *arg;
    cks_tp_send_req_t *reply; /* cks_tp_send_into(): sent once the bytes are there */
    size_t reply_len;
    uint64_t req_id;
    cks_status_t fail;        /* a checked write's failure, reported after the flush */
} cks_tp_rma_req_t;

static cks_tp_rma_req_t *cks_tp_rma_req(cks_tp_conn_h conn, cks_tp_rkey_t *rk,
                                        cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_rma_req_t *r = calloc(1, sizeof(*r));
    if (r != NULL) {
        r->conn = conn;
        r->rk   = rk;
        r->cb   = cb;
        r->arg  = arg;
        rk->refs++;
        cks_tp_conn_get(conn);
    }
    return r;
}

static void cks_tp_rma_req_free(cks_tp_rma_req_t *r)
{
    r->rk->refs--;
    cks_tp_conn_put(r->conn);
    free(r);
}

static void cks_tp_rma_get_done(void *request, ucs_status_t st, void *arg)
{
    cks_tp_rma_req_t *r = arg;
    cks_status_t status = cks_tp_status(st, "read peer memory");
    r->cb(r->arg, status);
    cks_tp_rma_req_free(r);
    ucp_request_free(request);
}

/* A get's bytes copied by the copy threads. */
static void cks_tp_rma_copied_in(void *arg, cks_status_t status)
{
    cks_tp_rma_req_t *r = arg;
    r->cb(r->arg, status);
    cks_tp_rma_req_free(r);
}

static void cks_tp_rma_params(ucp_request_param_t *p, ucp_send_nbx_callback_t cb, void *arg)
{
    memset(p, 0, sizeof(*p));
    p->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                      UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p->cb.send   = cb;
    p->user_data = arg;
}

cks_status_t cks_tp_rma_get(cks_tp_worker_h w, cks_tp_data_t *data, void *buf,
                            cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_conn_h conn = data->conn;
    ucp_request_param_t p;
    cks_tp_rma_req_t *r;
    cks_tp_rkey_t *rk;
    cks_status_t status;
    void *req;

    status = cks_tp_rkey_get(conn, data, &rk);
    if (status != CKS_OK) {
        return status;
    }
    if ((r = cks_tp_rma_req(conn, rk, cb, arg)) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    if (rk->local != NULL && cks_tp_copy_wants(w, data->length)) {
        const uint8_t *src = (const uint8_t *)rk->local + (data->rma_addr - rk->seg_base);
        status = cks_tp_copy_submit(w, buf, src, data->length,
                                    cks_tp_rkey_unfaulted(rk, data->rma_addr, data->length), 0,
                                    NULL, cks_tp_rma_copied_in, r);
        if (status != CKS_OK) {
            cks_tp_rma_req_free(r);
            return status;
        }
        data->is_rma = 0; /* taken */
        return CKS_INPROGRESS;
    }
    cks_tp_rkey_fault(rk, data->rma_addr, data->length);
    cks_tp_rma_params(&p, cks_tp_rma_get_done, r);
    req = ucp_get_nbx(conn->data_ep, buf, data->length, data->rma_addr, rk->rkey, &p);
    if (UCS_PTR_IS_ERR(req)) {
        cks_tp_rma_req_free(r);
        return cks_tp_status(UCS_PTR_STATUS(req), "read peer memory");
    }
    data->is_rma = 0; /* taken */
    return CKS_INPROGRESS;
}

/* The reply of a cks_tp_send_into() whose write failed: an error status. */
static void cks_tp_rma_reply_error(cks_tp_rma_req_t *r, cks_status_t status)
{
    cks_msg_status_t m = {status, cks_wire_cstr(status == CKS_ERR_CRC_MISMATCH
                                                    ? "the bytes failed their CRC check"
                                                    : "could not write into the client's memory")};
    cks_tp_send_req_t *s = r->reply;
    size_t len;

    r->reply = NULL;
    if (cks_wire_pack(CKS_MSG_STATUS_REPLY, 0, r->req_id, &m, s->hdr, sizeof(s->hdr), &len) !=
        CKS_OK) {
        cks_tp_send_req_put(r->conn->worker, s);
        return;
    }
    (void)cks_tp_send_hdr(r->conn, s, len, NULL, 0, CKS_MEM_HOST, NULL, NULL, NULL);
}

static void cks_tp_rma_flush_done(void *request, ucs_status_t st, void *arg)
{
    cks_tp_rma_req_t *r = arg;
    cks_status_t status = cks_tp_status(st, "write peer memory");

    if (status == CKS_OK && r->fail != CKS_OK) {
        status = r->fail;
    }
    if (status == CKS_OK) {
        cks_tp_send_req_t *s = r->reply;
        r->reply             = NULL;
        status = cks_tp_send_hdr(r->conn, s, r->reply_len, NULL, 0, CKS_MEM_HOST, NULL, r->cb,
                                 r->arg);
        if (status == CKS_INPROGRESS) {
            r->cb = NULL; /* runs when the reply is sent */
        }
    } else {
        cks_tp_rma_reply_error(r, status);
    }
    if (r->cb != NULL) {
        r->cb(r->arg, status == CKS_INPROGRESS ? CKS_OK : status);
    }
    if (r->reply != NULL) {
        cks_tp_send_req_put(r->conn->worker, r->reply);
    }
    cks_tp_rma_req_free(r);
    if (request != NULL) {
        ucp_request_free(request);
    }
}

/* The puts are done locally; the flush says they are in the peer's memory
 * (between processes of one host it is at once: no request). */
static void cks_tp_rma_flush(cks_tp_rma_req_t *r)
{
    ucp_request_param_t p;
    void *req;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send      = cks_tp_rma_flush_done;
    p.user_data    = r;
    req            = ucp_ep_flush_nbx(r->conn->data_ep, &p);
    if (req == NULL || UCS_PTR_IS_ERR(req)) {
        cks_tp_rma_flush_done(NULL, UCS_PTR_STATUS(req), r);
    }
}

static void cks_tp_rma_put_done(void *request, ucs_status_t st, void *arg)
{
    cks_tp_rma_req_t *r = arg;

    ucp_request_free(request);
    if (st != UCS_OK) {
        cks_tp_rma_flush_done(NULL, st, r);
        return;
    }
    cks_tp_rma_flush(r);
}

/* A reply's bytes copied into the peer's region by the copy threads: the
 * reply goes now (cancelled at stop: the owner is told, nothing is sent). */
static void cks_tp_rma_copied_out(void *arg, cks_status_t status)
{
    cks_tp_rma_req_t *r = arg;

    if (status == CKS_OK || status == CKS_ERR_CRC_MISMATCH) {
        r->fail = status; /* a mismatch: the error reply instead */
        cks_tp_rma_flush_done(NULL, UCS_OK, r);
        return;
    }
    if (r->cb != NULL) {
        r->cb(r->arg, status);
    }
    cks_tp_send_req_put(r->conn->worker, r->reply);
    r->reply = NULL;
    cks_tp_rma_req_free(r);
}

/* Write [payload, +len) to the mapped region at addr in slices, checking
 * each slice as written right after its put, while it is in this core's
 * cache: one pass over memory where a check first and a copy then make two.
 * UCX copies between processes of one host at once (its shared-memory
 * transports memcpy into the mapping); a put that it queues instead has its
 * slice checked from the source. *crc_p gets the chained check. */
static cks_status_t cks_tp_put_checked(cks_tp_conn_h conn, cks_tp_rkey_t *rk,
                                       const uint8_t *payload, size_t len, uint64_t addr,
                                       const cks_tp_check_t *check, uint64_t *crc_p)
{
    const uint8_t *local = (const uint8_t *)rk->local + (addr - rk->seg_base);
    ucp_request_param_t p;
    uint64_t crc = 0;
    size_t off, n;
    void *req;

    memset(&p, 0, sizeof(p)); /* no callback: NULL when done at once */
    for (off = 0; off < len; off += n) {
        n   = CKS_MIN(len - off, (size_t)CKS_TP_CHECK_SLICE);
        req = ucp_put_nbx(conn->data_ep, payload + off, n, addr + off, rk->rkey, &p);
        if (UCS_PTR_IS_ERR(req)) {
            return cks_tp_status(UCS_PTR_STATUS(req), "write peer memory");
        }
        if (req == NULL) {
            crc = check->fn(crc, local + off, n);
        } else {
            crc = check->fn(crc, payload + off, n);
            ucp_request_free(req); /* completes before the flush */
        }
    }
    *crc_p = crc;
    return CKS_OK;
}

cks_status_t cks_tp_send_into(cks_tp_conn_h conn, unsigned type, uint64_t req_id,
                              const void *body, const void *payload, size_t payload_len,
                              cks_tp_mem_h payload_memh, const cks_tp_data_t *dest,
                              const cks_tp_check_t *check, cks_tp_done_cb_t cb, void *arg)
{
    cks_tp_worker_h w = conn->worker;
    ucp_request_param_t p;
    cks_tp_rma_req_t *r;
    cks_tp_send_req_t *s;
    cks_tp_rkey_t *rk;
    cks_status_t status;
    size_t len;
    void *req;

    if (dest == NULL || !dest->is_rma || payload_len == 0) {
        return cks_tp_send(conn, type, 0, req_id, body, payload, payload_len, CKS_MEM_HOST,
                           payload_memh, cb, arg);
    }
    if (payload_len > dest->length) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_tp_rkey_get(conn, dest, &rk);
    if (status != CKS_OK) {
        return status;
    }
    if (check != NULL && rk->local == NULL &&
        check->fn(0, payload, payload_len) != check->expect) {
        return CKS_ERR_CRC_MISMATCH; /* not mapped here: checked before it goes */
    }
    if ((s = cks_tp_send_req_get(w)) == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_wire_pack(type, CKS_WIRE_F_RMA, req_id, body, s->hdr, sizeof(s->hdr), &len);
    if (status != CKS_OK || (r = cks_tp_rma_req(conn, rk, cb, arg)) == NULL) {
        cks_tp_send_req_put(w, s);
        return status != CKS_OK ? status : CKS_ERR_NO_MEMORY;
    }
    r->reply     = s;
    r->reply_len = len;
    r->req_id    = req_id;
    if (rk->local != NULL && cks_tp_copy_wants(w, payload_len) &&
        (check == NULL || check->combine != NULL)) {
        uint8_t *dst = (uint8_t *)rk->local + (dest->rma_addr - rk->seg_base);
        status = cks_tp_copy_submit(w, dst, payload, payload_len,
                                    cks_tp_rkey_unfaulted(rk, dest->rma_addr, payload_len), 1,
                                    check, cks_tp_rma_copied_out, r);
        if (status == CKS_OK) {
            return CKS_INPROGRESS;
        }
        r->cb = NULL; /* the caller learns it from the return value */
        cks_tp_send_req_put(w, r->reply);
        r->reply = NULL;
        cks_tp_rma_req_free(r);
        return status;
    }
    cks_tp_rkey_fault(rk, dest->rma_addr, payload_len);
    if (check != NULL && rk->local != NULL) {
        uint64_t crc = 0;
        /* a failure is reported after the flush: no slice put before it
         * may land after the peer has the answer */
        r->fail = cks_tp_put_checked(conn, rk, payload, payload_len, dest->rma_addr, check,
                                     &crc);
        if (r->fail == CKS_OK && crc != check->expect) {
            r->fail = CKS_ERR_CRC_MISMATCH;
        }
        cks_tp_rma_flush(r); /* then the reply, or the error */
        return CKS_INPROGRESS;
    }
    cks_tp_rma_params(&p, cks_tp_rma_put_done, r);
    req = ucp_put_nbx(conn->data_ep, payload, payload_len, dest->rma_addr, rk->rkey, &p);
    if (UCS_PTR_IS_ERR(req)) {
        r->cb = NULL; /* the caller learns it from the return value */
        cks_tp_send_req_put(w, r->reply);
        r->reply = NULL;
        cks_tp_rma_req_free(r);
        return cks_tp_status(UCS_PTR_STATUS(req), "write peer memory");
    }
    return CKS_INPROGRESS;
}
