/*
 * server-private: the arena. A fixed-capacity region mapped from a file (in
 * /dev/shm by default, or hugetlbfs) so that a restarted server re-attaches
 * its data; pre-faulted at start. Space is handed out as extents by a
 * first-fit allocator over an offset-ordered free list that coalesces on
 * free. The allocator's state is not stored: at start the server rebuilds it
 * from the object records in LMDB (cks_arena_reserve()).
 * One owner thread (the progress thread).
 */
#ifndef CKS_SERVER_ARENA_H
#define CKS_SERVER_ARENA_H

#include "cks_common.h"

typedef struct cks_arena cks_arena_t;

#define CKS_ARENA_HDR_LEN 4096u /* header page: magic, size */

/** Map (creating when missing) the arena file `path` of `size` bytes.
 *  An existing file of another size is refused (CKS_ERR_INVALID_PARAM). */
cks_status_t cks_arena_open(const char *path, uint64_t size, cks_arena_t **arena_p);
void cks_arena_close(cks_arena_t *arena);

uint8_t *cks_arena_base(cks_arena_t *arena);
uint64_t cks_arena_size(cks_arena_t *arena);
uint64_t cks_arena_used(cks_arena_t *arena);
/** 1 when the file was created by this open (no data to re-attach). */
int cks_arena_is_new(cks_arena_t *arena);

/** Rounded length that an object of `size` bytes takes. */
uint64_t cks_arena_extent_len(uint64_t size);

/** Allocate len bytes (from cks_arena_extent_len); CKS_ERR_ARENA_FULL. */
cks_status_t cks_arena_alloc(cks_arena_t *arena, uint64_t len, uint64_t *off_p);
/** Mark [off, off+len) used, at start; CKS_ERR_INVALID_PARAM if it is not free. */
cks_status_t cks_arena_reserve(cks_arena_t *arena, uint64_t off, uint64_t len);
void cks_arena_free(cks_arena_t *arena, uint64_t off, uint64_t len);

#endif
