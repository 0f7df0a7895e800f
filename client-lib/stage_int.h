/*
 * The staging ring's state, shared by stage.c, stage_put.c and stage_get.c.
 */
#ifndef CKS_STAGE_INT_H
#define CKS_STAGE_INT_H

#include "stage.h"

#define CKS_STAGE_ALIGN 4096u
/* What staged gets use of the ring at most: slices of 4 MiB, 32 MiB in all
 * (the default ring). Gets through more of it were slower on an H200 host
 * (a ring of 64 x 16 MiB: 19 - 20 GB/s against 29 - 32 for 8 x 4 MiB) */
#define CKS_STAGE_GET_SLICE (4ull << 20)
#define CKS_STAGE_GET_BYTES (32ull << 20)
/* How often a put in parts starts again (its server lost mid-object) at
 * most; the op's walk of its group bounds it first */
#define CKS_STAGE_RESENDS 8u

typedef enum {
    CKS_SLOT_FREE = 0,
    CKS_SLOT_BUSY, /* a copy or a receive is under way */
    CKS_SLOT_READY /* put: copied, UCX may take it; get: received */
} cks_slot_state_t;

struct cks_stage_job {
    cks_stage_job_t *next;
    cks_stage_t *st;
    /* what the stage thread runs for it (stage_put.c or stage_get.c, which
     * set it): stage.c calls down, never back into the halves by name */
    void (*run)(cks_stage_t *st, cks_stage_job_t *j);
    int is_put;
    int host;               /* a put of host memory (CKS_PUT_FIELD_STAGED):
                               copied with memcpy(), never by the engine */
    uint8_t *dev;           /* device source (put) or destination (get) */
    uint64_t len;           /* bytes to move */
    int device;
    cks_done_cb_t cb;       /* caller's */
    void *arg;
    /* put */
    cks_op_t *op;
    char vjob[CKS_JOB_NAME_MAX + 1]; /* its version (the op is gone at the end) */
    uint64_t version;
    cks_done_cb_t copied_cb;
    void *copied_arg;
    uint64_t answered;      /* slices whose PUT_PART was answered */
    int parts;              /* put: its bytes go in PUT_PARTs, one per slice
                               as it is copied (an object larger than the ring) */
    unsigned parts_inflight; /* PUT_PARTs (and a cancel) not yet answered */
    int put_sent;           /* its PUT was sent, to srv (cks_stage_put_sent()) */
    size_t srv;             /* put: the server its PUT went to */
    int resendable;         /* in parts to a cluster: its PUT may go to the
                               group's next member, and its parts then again */
    unsigned sends;         /* times its PUT was sent (cks_stage_put_sent()) */
    unsigned gen;           /* the send its parts go to now (gen_known) */
    int gen_known;
    cks_status_t part_status; /* a resendable put's first failed part */
    unsigned resends;       /* times its parts started again */
    int op_done;
    cks_status_t op_status;
    /* get */
    cks_restore_h r;
    char key[CKS_KEY_NAME_MAX + 1];
    uint64_t offset;        /* in the object */
    uint64_t *length_p;
    uint32_t flags;
    int range;
    int chain;              /* get: the object's CRC is checked here over the
                               slices, in order (a standalone server then sends
                               each slice unchecked: CKS_WIRE_F_CHECKED) */
    uint64_t buffer_size;
    unsigned reads;         /* range gets in flight (of its whole batch) */
    /* a get in a batch (stage_get.c): the gets queued one behind the other
     * share the ring as one stream of slices */
    int statted;            /* its size is known (cks_object_stat) */
    int issuing_done;       /* no more of its slices will be read */
    int finished;           /* its outcome is settled */
    int cb_done;            /* its callback ran (the first get of a batch) */
    uint64_t issued, freed_n; /* its slices read (or being read), and freed */
    uint64_t crc, crc_want; /* the CRC over its slices so far; the object's */
    /* both */
    uint64_t slice;         /* its slices' size: the ring's (put) or gslice (get) */
    unsigned nslots;        /* the slots it cycles through: nslots or gslots */
    uint64_t nslices;
    uint64_t base;          /* its slice i is in slot (base + i) % nslots (its own) */
    int handed_off;         /* a put whose completion the op's callback runs */
    cks_status_t status;    /* first error */
};

/* A slot's CRC, computed on a CRC thread while its copy to the device runs
 * (a staged get whose object CRC is checked here: job->chain). */
typedef struct {
    cks_workq_job_t wq;
    const uint8_t *ptr;
    size_t len;
    uint64_t crc;
    int queued;             /* pushed and not yet back (stage lock) */
} cks_slot_crc_t;

/* A slot's range get, as its callback sees it. */
typedef struct {
    cks_stage_t *st;
    unsigned slot;
    uint64_t got;           /* bytes the get wrote */
} cks_slot_read_t;

struct cks_stage {
    cks_client_h c;
    const cks_stage_engine_ops_t *ops;
    void *eng;
    int direct;             /* UCX moves CUDA memory: puts go direct */
    int no_device;          /* no copy engine for device memory: host-staged
                               puts only (memcpy), device transfers refused */
    int device;             /* the device the engine is bound to (-1: none yet) */
    uint8_t *ring;
    uint64_t slice;
    unsigned nslots;
    /* gets' share of the ring: the first gslice bytes of each of its first
     * gslots slots (CKS_STAGE_GET_BYTES in all); a large ring, chosen so
     * that puts copy a whole snapshot out of the device at once, halved
     * gets that cycled through all of it */
    uint64_t gslice;
    unsigned gslots;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;    /* any change of the below */
    cks_stage_job_t *head, *tail;
    cks_stage_job_t *cur;
    int stop;
    cks_slot_state_t state[CKS_STAGE_SLICES_MAX];
    uint64_t slot_slice[CKS_STAGE_SLICES_MAX]; /* the slice a slot holds */
    cks_stage_job_t *slot_job[CKS_STAGE_SLICES_MAX]; /* of which job */
    uint64_t ring_pos;      /* where the next job starts in the ring */
    cks_status_t slot_status[CKS_STAGE_SLICES_MAX];
    int slot_copied[CKS_STAGE_SLICES_MAX]; /* get: its copy (and CRC) started */
    cks_slot_read_t reads[CKS_STAGE_SLICES_MAX];
    cks_slot_crc_t crcs[CKS_STAGE_SLICES_MAX];
    cks_workq_t *crcq;      /* the CRC threads of staged gets (NULL: CRCs
                               on the stage thread) */
    unsigned crc_threads;
    int fail_slice;         /* test builds: CKS_STAGE_FAIL_SLICE, -1: none */
    int pause_part;         /* test builds: CKS_STAGE_PAUSE_PART, -1: none */
    char pause_path[128];
    char why[160];          /* no_device: why there is no device */
    uint64_t host_ns[CKS_STAGE_SLICES_MAX]; /* a host-staged slice's memcpy() */
    uint64_t copies;        /* copies started (for fail_slice) */
    /* figures */
    uint64_t puts_direct, puts_staged, gets_staged, staged_bytes, copy_ns;
    uint64_t host_puts, host_bytes; /* host-staged puts (CKS_PUT_FIELD_STAGED) */
    uint64_t puts_in_parts; /* staged puts sent in parts */
    uint64_t puts_resent;   /* of those, puts whose parts went again */
};

/* ---- between stage.c, stage_put.c and stage_get.c ---- */

void cks_stage_error(cks_client_h c, cks_status_t status, const char *why);

cks_status_t cks_stage_get(cks_client_h c, int host_ok, cks_stage_t **st_p, char *c_why,
                                  size_t why_len);

cks_status_t cks_stage_classify(cks_client_h c, const void *ptr, cks_mem_type_t asked,
                                       cks_stage_t **st_p, cks_mem_type_t *type_p,
                                       int *device_p);

void cks_stage_enqueue(cks_stage_t *st, cks_stage_job_t *j);

void cks_stage_free_slots(cks_stage_t *st, const cks_stage_job_t *j);

uint64_t cks_stage_slice_len(const cks_stage_t *st, const cks_stage_job_t *j,
                                    uint64_t i);

unsigned cks_stage_slot(const cks_stage_t *st, const cks_stage_job_t *j, uint64_t i);

void cks_stage_deadline(struct timespec *ts, int ms);

void cks_stage_drain(cks_stage_t *st);

cks_status_t cks_stage_copy_start(cks_stage_t *st, cks_stage_job_t *j, uint64_t i,
                                         unsigned slot);

cks_status_t cks_stage_copy_wait(cks_stage_t *st, const cks_stage_job_t *j,
                                        unsigned slot, uint64_t *ns_p);

#endif
