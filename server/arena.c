/*
 * DESIGN: the arena (see arena.h). Owns the mapping of the arena file and the
 * free list. Runs on the progress thread only. Never writes object bytes:
 * those arrive straight from UCX.
 */
#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_READ  22 /* Linux 5.14 */
#define MADV_POPULATE_WRITE 23
#endif

#define CKS_ARENA_MAGIC 0x434b5341524e4131ull /* "CKSARNA1" */

typedef struct cks_extent {
    struct cks_extent *next;
    uint64_t off, len;
} cks_extent_t;

struct cks_arena {
    uint8_t *base;
    uint64_t size;
    uint64_t used;
    int is_new;
    cks_extent_t *free_list; /* ordered by offset, coalesced */
};

typedef struct {
    uint64_t magic;
    uint64_t size;
} cks_arena_hdr_t;

uint64_t cks_arena_extent_len(uint64_t size)
{
    /* large objects page-aligned (copy engines and CMA like it), small ones 64 B */
    uint64_t align = size >= (1u << 20) ? 4096 : 64;
    return size == 0 ? 0 : CKS_ALIGN_UP(size, align);
}

/* Fault the whole arena into our page tables before the first client. A
 * new file is all holes: populating it for writing allocates its pages (5 %
 * faster than for reading). A file of shared memory (tmpfs, hugetlbfs) that
 * holds a past run's arena is populated for reading (`reread`): on tmpfs
 * each fault then maps the 16 pages around it too (fault-around), against
 * one per fault for writing, and a shared mapping of shared memory is
 * writable at once (nothing tracks its dirty pages; a disk file's would
 * fault again at each first write). A server restarted on 1216 MiB listened
 * after 140 ms instead of 290 (2-core VM, 4 KiB pages; docs/PERFORMANCE.md). */
static void cks_arena_prefault(uint8_t *base, uint64_t size, int reread)
{
    if (madvise(base, size, reread ? MADV_POPULATE_READ : MADV_POPULATE_WRITE) == 0) {
        return;
    }
    /* older kernels: touch every page without changing its contents */
    long page = sysconf(_SC_PAGESIZE);
    for (uint64_t off = 0; off < size; off += (uint64_t)page) {
        volatile uint8_t *p = base + off;
        *p                  = *p;
    }
}

/* Map the file at a 2 MiB-aligned address: transparent huge pages (and
 * hugetlbfs) need the alignment, and huge pages make UCX's shared-memory
 * copies 2-3x faster than 4 KiB pages on this class of machine. */
static uint8_t *cks_arena_map(int fd, uint64_t size)
{
    const uint64_t huge = 2u << 20;
    uint8_t *area = mmap(NULL, size + huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) {
        return NULL;
    }
    uint8_t *base = (uint8_t *)CKS_ALIGN_UP((uintptr_t)area, huge);
    if (mmap(base, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
        MAP_FAILED) {
        munmap(area, size + huge);
        return NULL;
    }
    /* give back the unused head and tail of the reservation */
    if (base > area) {
        munmap(area, (size_t)(base - area));
    }
    uint8_t *tail = base + size, *end = area + size + huge;
    if (end > tail) {
        munmap(tail, (size_t)(end - tail));
    }
    return base;
}

/* After pre-faulting: did the arena get huge pages? (ShmemPmdMapped counts
 * this process's shared memory mapped with 2 MiB pages; an arena on
 * hugetlbfs has nothing but huge pages.) */
static void cks_arena_report_pages(const char *path, int hugetlbfs)
{
    char line[128];
    unsigned long long kb = 0;
    int found             = 0;
    FILE *f               = fopen("/proc/self/smaps_rollup", "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "ShmemPmdMapped: %llu kB", &kb) == 1) {
            found = 1;
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    if (hugetlbfs) {
        cks_info("arena %s is on hugetlbfs: huge pages", path);
    } else if (found && kb == 0) {
        cks_warn("arena %s uses 4 KiB pages; UCX copies are faster with huge pages: "
                 "mount its tmpfs with huge=advise (e.g. mount -o remount,huge=advise "
                 "/dev/shm) or put it on hugetlbfs",
                 path);
    }
}

/* An arena file on hugetlbfs: its size must be a whole number of the
 * mount's pages, and its pages are taken now (fallocate), so that a pool too
 * small is refused with the count of pages needed (the mapping would only
 * fail with ENOMEM). 1 on hugetlbfs, 0 elsewhere, -1 (with *status_p) on
 * error; a new file that got no pages is emptied again. */
static int cks_arena_hugetlbfs(int fd, const char *path, uint64_t size, int is_new,
                               cks_status_t *status_p)
{
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0 || (unsigned long)fs.f_type != HUGETLBFS_MAGIC) {
        return 0;
    }
    if (fs.f_bsize <= 0 || size % (uint64_t)fs.f_bsize != 0) {
        cks_error("arena file %s is on hugetlbfs: its size (%llu) must be a multiple of "
                  "the huge page size (%ld bytes)",
                  path, (unsigned long long)size, (long)fs.f_bsize);
        *status_p = CKS_ERR_INVALID_PARAM;
    } else if (fallocate(fd, 0, 0, (off_t)size) != 0) {
        int err = errno;
        cks_error("arena file %s: %s: %llu huge pages needed (scripts/hugepages --pool "
                  "sets them aside)",
                  path, strerror(err), (unsigned long long)(size / (uint64_t)fs.f_bsize));
        *status_p = err == ENOSPC ? CKS_ERR_NO_MEMORY : CKS_ERR_IO;
    } else {
        return 1;
    }
    if (is_new && ftruncate(fd, 0) != 0) {
        cks_warn("arena file %s: cannot empty it again: %s", path, strerror(errno));
    }
    return -1;
}

/* Is the file in shared memory (tmpfs, hugetlbfs)? */
static int cks_arena_shmem(int fd)
{
    struct statfs fs;
    return fstatfs(fd, &fs) == 0 && ((unsigned long)fs.f_type == TMPFS_MAGIC ||
                                     (unsigned long)fs.f_type == HUGETLBFS_MAGIC);
}

cks_status_t cks_arena_open(const char *path, uint64_t size, cks_arena_t **arena_p)
{
    cks_status_t status = CKS_ERR_IO;
    cks_arena_hdr_t *hdr;
    struct stat st;
    cks_arena_t *a;
    int fd, hugetlbfs;

    if (size < 2 * CKS_ARENA_HDR_LEN || size % 4096 != 0) {
        cks_error("arena size %llu must be a multiple of 4096 and at least 8 KiB",
                  (unsigned long long)size);
        return CKS_ERR_INVALID_PARAM;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || fstat(fd, &st) != 0) {
        cks_error("arena file %s: %s", path, strerror(errno));
        goto err_close;
    }
    a->is_new = st.st_size == 0;
    if (!a->is_new && (uint64_t)st.st_size != size) {
        cks_error("arena file %s holds %llu bytes but the arena size is %llu; "
                  "use the same size or another file",
                  path, (unsigned long long)st.st_size, (unsigned long long)size);
        status = CKS_ERR_INVALID_PARAM;
        goto err_close;
    }
    hugetlbfs = cks_arena_hugetlbfs(fd, path, size, a->is_new, &status);
    if (hugetlbfs < 0) {
        goto err_close;
    }
    if (a->is_new && ftruncate(fd, (off_t)size) != 0) {
        cks_error("arena file %s: cannot size to %llu: %s", path,
                  (unsigned long long)size, strerror(errno));
        goto err_close;
    }
    a->base = cks_arena_map(fd, size);
    if (a->base == NULL) {
        cks_error("arena file %s: mmap: %s", path, strerror(errno));
        goto err_close;
    }
    int reread = !a->is_new && cks_arena_shmem(fd);
    close(fd);
    fd = -1;
    madvise(a->base, size, MADV_HUGEPAGE); /* honoured where the tmpfs allows it */
    cks_arena_prefault(a->base, size, reread);
    cks_arena_report_pages(path, hugetlbfs);
    hdr = (cks_arena_hdr_t *)a->base;
    if (a->is_new) {
        hdr->magic = CKS_ARENA_MAGIC;
        hdr->size  = size;
    } else if (hdr->magic != CKS_ARENA_MAGIC || hdr->size != size) {
        cks_error("arena file %s is not a ckstore arena", path);
        status = CKS_ERR_INVALID_PARAM;
        goto err_unmap;
    }
    a->size      = size;
    a->free_list = malloc(sizeof(*a->free_list));
    if (a->free_list == NULL) {
        status = CKS_ERR_NO_MEMORY;
        goto err_unmap;
    }
    a->free_list->next = NULL;
    a->free_list->off  = CKS_ARENA_HDR_LEN;
    a->free_list->len  = size - CKS_ARENA_HDR_LEN;
    *arena_p           = a;
    return CKS_OK;

err_unmap:
    munmap(a->base, size);
err_close:
    if (fd >= 0) {
        close(fd);
    }
    free(a);
    return status;
}

void cks_arena_close(cks_arena_t *a)
{
    if (a == NULL) {
        return;
    }
    while (a->free_list != NULL) {
        cks_extent_t *e = a->free_list;
        a->free_list    = e->next;
        free(e);
    }
    munmap(a->base, a->size);
    free(a);
}

uint8_t *cks_arena_base(cks_arena_t *a)
{
    return a->base;
}

uint64_t cks_arena_size(cks_arena_t *a)
{
    return a->size;
}

uint64_t cks_arena_used(cks_arena_t *a)
{
    return a->used;
}

int cks_arena_is_new(cks_arena_t *a)
{
    return a->is_new;
}

/* Take [off, off+len) out of extent *pp, which contains it. */
static cks_status_t cks_arena_carve(cks_arena_t *a, cks_extent_t **pp, uint64_t off,
                                    uint64_t len)
{
    cks_extent_t *e = *pp;
    uint64_t end = off + len, e_end = e->off + e->len;

    if (off > e->off && end < e_end) {
        cks_extent_t *tail = malloc(sizeof(*tail));
        if (tail == NULL) {
            return CKS_ERR_NO_MEMORY;
        }
        tail->off  = end;
        tail->len  = e_end - end;
        tail->next = e->next;
        e->len     = off - e->off;
        e->next    = tail;
    } else if (off > e->off) {
        e->len = off - e->off;
    } else if (end < e_end) {
        e->off = end;
        e->len = e_end - end;
    } else {
        *pp = e->next;
        free(e);
    }
    a->used += len;
    return CKS_OK;
}

cks_status_t cks_arena_alloc(cks_arena_t *a, uint64_t len, uint64_t *off_p)
{
    if (len == 0) {
        *off_p = 0;
        return CKS_OK;
    }
    if (cks_fault_fire("arena_alloc")) {
        return CKS_ERR_ARENA_FULL;
    }
    for (cks_extent_t **pp = &a->free_list; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->len >= len) {
            uint64_t off        = (*pp)->off;
            cks_status_t status = cks_arena_carve(a, pp, off, len);
            if (status == CKS_OK) {
                *off_p = off;
            }
            return status;
        }
    }
    return CKS_ERR_ARENA_FULL;
}

cks_status_t cks_arena_reserve(cks_arena_t *a, uint64_t off, uint64_t len)
{
    if (len == 0) {
        return CKS_OK;
    }
    for (cks_extent_t **pp = &a->free_list; *pp != NULL; pp = &(*pp)->next) {
        cks_extent_t *e = *pp;
        if (off >= e->off && off - e->off <= e->len && len <= e->len - (off - e->off)) {
            return cks_arena_carve(a, pp, off, len);
        }
    }
    return CKS_ERR_INVALID_PARAM;
}

void cks_arena_free(cks_arena_t *a, uint64_t off, uint64_t len)
{
    cks_extent_t **pp = &a->free_list, *prev = NULL;

    if (len == 0) {
        return;
    }
    while (*pp != NULL && (*pp)->off < off) {
        prev = *pp;
        pp   = &(*pp)->next;
    }
    a->used -= len;
    if (prev != NULL && prev->off + prev->len == off) {
        prev->len += len;
        if (prev->next != NULL && prev->off + prev->len == prev->next->off) {
            cks_extent_t *n = prev->next;
            prev->len += n->len;
            prev->next = n->next;
            free(n);
        }
        return;
    }
    if (*pp != NULL && off + len == (*pp)->off) {
        (*pp)->off = off;
        (*pp)->len += len;
        return;
    }
    cks_extent_t *e = malloc(sizeof(*e));
    if (e == NULL) {
        /* cannot track it: the space is leaked until restart, never reused wrongly */
        cks_error("arena: out of memory freeing %llu bytes", (unsigned long long)len);
        return;
    }
    e->off  = off;
    e->len  = len;
    e->next = *pp;
    *pp     = e;
}
