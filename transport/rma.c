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
#include <sys/ioctl.h>
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

cks_status_t cks_tp_mem_populate(cks_tp_mem_h m)
{
    if (m == NULL || !m->allocated) {
        return CKS_ERR_INVALID_PARAM;
    }
    /* base is page-aligned (UCX maps the region); so is its length */
    return madvise(m->base, m->len, MADV_POPULATE_WRITE) == 0 ? CKS_OK : CKS_ERR_UNSUPPORTED;
}

int cks_tp_mem_holds(cks_tp_mem_h m, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, b = (uintptr_t)m->base + CKS_TP_MEM_HDR;
    size_t n    = m->len - CKS_TP_MEM_HDR;
    return m->allocated && a >= b && a - b <= n && len <= n - (a - b);
}

/* PROCMAP_QUERY (Linux 6.11 and later; include/uapi/linux/fs.h): one
 * mapping's facts, its page size among them, by an ioctl on /proc/self/maps,
 * where /proc/self/smaps computes every mapping's figures up to the one
 * asked for (about 11 ms per GiB of 4 KiB pages populated before it, here). */
struct cks_procmap_query {
    uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size;
    uint64_t vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define CKS_PROCMAP_QUERY _IOWR('f', 17, struct cks_procmap_query)

size_t cks_tp_mem_page_size(cks_tp_mem_h m, int scan)
{
    return m != NULL ? cks_tp_page_size_at(m->base, scan) : 0;
}

size_t cks_tp_page_size_at(const void *addr, int scan)
{
    /* the kernel's page size of the mapping that holds addr: by
     * PROCMAP_QUERY, or from /proc/self/smaps (a range line, then its
     * fields) on kernels without it */
    uintptr_t base = (uintptr_t)addr;
    struct cks_procmap_query q;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    char line[256];
    int in_region = 0;
    size_t kb     = 0;
    FILE *f;

    memset(&q, 0, sizeof(q));
    q.size       = sizeof(q);
    q.query_addr = base;
    if (fd >= 0 && ioctl(fd, CKS_PROCMAP_QUERY, &q) == 0) {
        close(fd);
        return (size_t)q.vma_page_size;
    }
    if (fd >= 0) {
        close(fd);
    }
    if (!scan || (f = fopen("/proc/self/smaps", "r")) == NULL) {
        return 0;
    }
    while (kb == 0 && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi, v;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* no field's name parses so */
            in_region = base >= lo && base < hi;
        } else if (in_region && sscanf(line, "KernelPageSize: %lu kB", &v) == 1) {
            kb = v;
        }
    }
    fclose(f);
    return kb * 1024;
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
void cks_tp_rkey_fault(cks_tp_rkey_t *rk, uint64_t addr, size_t len)
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
int cks_tp_rkey_unfaulted(cks_tp_rkey_t *rk, uint64_t addr, size_t len)
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
cks_status_t cks_tp_rkey_get(cks_tp_conn_h conn, const cks_tp_data_t *d,
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

/* ---- memory ------------------------------------------------------------------ */

cks_status_t cks_tp_mem_map(cks_tp_worker_h w, void *addr, size_t len, cks_tp_mem_h *mem_p)
{
    ucp_mem_map_params_t p;
    cks_tp_mem_h m;
    cks_status_t status;

    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    m->worker    = w;
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    p.address    = addr;
    p.length     = len;
    status       = cks_tp_status(ucp_mem_map(w->context, &p, &m->memh), "mem map");
    if (status != CKS_OK) {
        free(m);
        return status;
    }
    *mem_p = m;
    return CKS_OK;
}

void cks_tp_mem_unmap(cks_tp_mem_h m)
{
    if (m != NULL) {
        ucp_mem_unmap(m->worker->context, m->memh);
        free(m->rkey);
        free(m);
    }
}
