/*
 * ckstore.h - the public API of libckstore, the client library of the ckstore
 * checkpoint store.
 *
 * A trainer rank connects to a storage server, begins a version (normally the
 * training step), puts its objects (named shards with tags) zero-copy from
 * its own buffers, and seals the version. A replacement rank opens a sealed
 * version and gets whole objects or byte ranges into its buffers.
 *
 * Async contract (every *_nb call):
 *   - returns CKS_INPROGRESS: the callback runs exactly once, later, on the
 *     client's progress thread, with the final status;
 *   - returns anything else (an error): the callback never runs.
 *   Buffers passed to a call belong to the caller again only when its
 *   callback has run (for a put: the server holds the bytes, STORED). The
 *   blocking calls are thin wrappers that wait for that callback. Callbacks
 *   must not block; they may submit further *_nb calls.
 *
 * Threads: a client handle may be used from any number of threads at once.
 * Errors: every call that can fail returns a cks_status_t; the server's text
 * for the last failed request is available from cks_client_last_error().
 * The library never aborts the process.
 */
#ifndef CKSTORE_H
#define CKSTORE_H

#include "ckstore_defs.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKS_API_VISIBLE __attribute__((visibility("default")))

/** Largest job name and object key, in bytes (UTF-8, no NUL). */
#define CKS_JOB_NAME_MAX 128
#define CKS_KEY_NAME_MAX 256
/** No parent version. */
#define CKS_NO_PARENT UINT64_MAX
/** Tag value for "not applicable" (layer, expert, rank). */
#define CKS_TAG_NONE (-1)

typedef struct cks_client *cks_client_h;
typedef struct cks_restore *cks_restore_h;

/** Completion callback of a *_nb call. */
typedef void (*cks_done_cb_t)(void *arg, cks_status_t status);

/* ---- client -------------------------------------------------------------- */

enum {
    CKS_CLIENT_FIELD_SERVER     = 1u << 0,
    CKS_CLIENT_FIELD_TIMEOUT_MS = 1u << 1,
    CKS_CLIENT_FIELD_NAME       = 1u << 2,
    CKS_CLIENT_FIELD_CLUSTER    = 1u << 3,
    CKS_CLIENT_FIELD_EC         = 1u << 4,
    CKS_CLIENT_FIELD_SECRET     = 1u << 5,
    CKS_CLIENT_FIELD_SCRATCH    = 1u << 6,
    CKS_CLIENT_FIELD_STAGE      = 1u << 7,
    CKS_CLIENT_FIELD_MEMBER_TIMEOUT = 1u << 8,
};

typedef struct {
    uint64_t field_mask;  /**< CKS_CLIENT_FIELD_* bits of the fields that are set */
    const char *server;   /**< "ipv4:port" of a standalone server; copied */
    int timeout_ms;       /**< per request; default 60000 */
    const char *name;     /**< shown in server logs; default "libckstore"; copied */
    const char *cluster;  /**< path of a cluster map (docs/CLUSTER_MAP.md): use the
                               erasure-coded cluster it lists instead of `server` */
    uint32_t ec_k;        /**< with CKS_CLIENT_FIELD_EC: data chunks per stripe of the
                               versions this client begins (default 4) */
    uint32_t ec_m;        /**< parity chunks (default 2) */
    uint64_t chunk_size;  /**< bytes per chunk, multiple of 4096 (default 1 MiB) */
    const char *secret;   /**< path of the secret file (mode 0600) the servers
                               require: the cluster secret, or with
                               `secret_job` that job's own (docs/SECURITY.md);
                               read once at create */
    const char *secret_job; /**< with CKS_CLIENT_FIELD_SECRET: `secret` is this
                               job's secret, and the client can reach this
                               job only (NULL: the cluster secret) */
    uint64_t scratch_size; /**< with CKS_CLIENT_FIELD_SCRATCH: bytes of shared
                               memory, allocated with a cluster client, that
                               degraded reads fetch parity into (servers on this
                               host write it with one copy); it bounds their
                               memory: stripes wait for room. Rounded up to 64 KiB;
                               0: malloc() per stripe, unbounded (default 32 MiB) */
    uint64_t stage_slice;  /**< with CKS_CLIENT_FIELD_STAGE: bytes per slice of the
                               ring of pinned host memory that device buffers are
                               staged through (default 4 MiB; 4 KiB .. 1 GiB,
                               rounded up to 4 KiB) */
    uint32_t stage_slices; /**< slices in that ring (default 8; 2 .. 64) */
    uint32_t member_timeout_ms; /**< with CKS_CLIENT_FIELD_MEMBER_TIMEOUT (cluster):
                               how long a version this client writes waits on a
                               server that does not answer: a primary counts the
                               chunks it does not take within this time as
                               missing (the version commits DEGRADED), and the
                               coordinator of a version this client begins waits
                               this long for each server to take its outcome.
                               Sent with every put and begin, like the geometry
                               (ranks of one version set it alike). 100 .. 600000;
                               default 10000 */
} cks_client_params_t;

/** Connect to a standalone server (`server`) or a cluster (`cluster`): at
 *  least one server must answer within the timeout. */
CKS_API_VISIBLE cks_status_t cks_client_create(const cks_client_params_t *params,
                                               cks_client_h *client_p);

/** Fail every request still in flight with CKS_ERR_CANCELED (their callbacks
 *  run), close the connection, stop the progress thread, free the handle. */
CKS_API_VISIBLE void cks_client_destroy(cks_client_h client);

/** How this client moves device memory (cks_client_stats_t.gpu_path). */
typedef enum {
    CKS_GPU_PATH_NONE   = 0, /**< no device transfer yet, or none possible (the
                                  build has no CUDA, or the machine no device) */
    CKS_GPU_PATH_DIRECT = 1, /**< UCX moves device memory itself (its context
                                  reports the CUDA memory type): puts hand device
                                  pointers to UCX; gets are staged (below) */
    CKS_GPU_PATH_STAGED = 2, /**< through the ring of pinned host slices */
} cks_gpu_path_t;

/** The client's own figures (no request is sent), since it was created. */
typedef struct {
    cks_gpu_path_t gpu_path;  /**< decided at the first device transfer; also
                                   logged then, at info level */
    uint64_t device_puts_direct; /**< puts of device memory handed to UCX */
    uint64_t device_puts_staged; /**< staged puts that completed (any status) */
    uint64_t staged_puts_in_parts; /**< of the staged puts (device or host), those
                                        larger than the ring, whose slices went
                                        as parts, each sent as soon as it was
                                        copied */
    uint64_t device_gets_staged; /**< staged gets that completed (any status) */
    uint64_t staged_bytes;    /**< bytes copied between device and ring */
    uint64_t stage_copy_ns;   /**< time the ring's thread waited for those copies
                                   (and spent in host-staged memcpy()s) */
    uint64_t host_puts_staged;  /**< puts of host memory staged through the ring
                                     (CKS_PUT_FIELD_STAGED) that completed */
    uint64_t host_staged_bytes; /**< bytes they copied into the ring */
    uint64_t requests_in_flight; /**< requests sent to servers and not yet
                                      answered or failed, now: the caller's,
                                      and the client's own (connection
                                      handshakes, the MEM_MAPs that announce
                                      its memory) */
    uint64_t registered_bytes;      /**< bytes of cks_mem_alloc() memory held now
                                         (the staging ring's included) */
    uint64_t registered_huge_bytes; /**< of those, bytes in reserved huge pages:
                                         UCX takes them where the host has some
                                         (scripts/hugepages); servers on this
                                         host then map the memory a huge page
                                         at a time, not 4 KiB at a time.
                                         Transparent huge pages (UCX's choice
                                         where no shared-memory transport is in
                                         use: servers on other hosts) are not
                                         counted */
    uint64_t staged_puts_resent; /**< of staged_puts_in_parts, puts to a cluster
                                      whose server was lost mid-object: their
                                      PUT went to the group's next member, and
                                      their slices were copied and sent again */
    uint64_t receive_stalled_s; /**< seconds (of the client's progress thread
                                     running) for which its UCX worker has taken
                                     none of the client's own check messages;
                                     0 while they arrive. At 5 (logged as an
                                     error) its receive path counts as stalled -
                                     UCX 1.13's shared-memory FIFO after a server
                                     on this host was killed while it sent to
                                     this client - and the client replaces its
                                     UCX worker: the requests in flight fail
                                     (CKS_ERR_CONN_LOST or UNREACHABLE, as when
                                     their servers are lost), later ones connect
                                     again; cks_mem_alloc() memory stays valid */
    uint64_t receive_renewals;  /**< times the client replaced its UCX worker
                                     so (at most 8; after that its requests time
                                     out, logged: create a new client) */
} cks_client_stats_t;

/** Fill *stats_p. CKS_ERR_INVALID_PARAM on NULL arguments. */
CKS_API_VISIBLE cks_status_t cks_client_stats(cks_client_h client, cks_client_stats_t *stats_p);

/** Copy the server's (or the library's) text about the last failed request
 *  into buf (always NUL-terminated). */
CKS_API_VISIBLE void cks_client_last_error(cks_client_h client, char *buf, size_t len);

/* ---- versions ------------------------------------------------------------ */

enum {
    CKS_VERSION_FIELD_PARENT  = 1u << 0,
    CKS_VERSION_FIELD_NRANKS  = 1u << 1,
    CKS_VERSION_FIELD_RETAIN  = 1u << 2,
    CKS_VERSION_FIELD_TIMEOUT = 1u << 3,
};

typedef struct {
    uint64_t field_mask;
    const char *job;   /**< job name (required) */
    uint64_t version;  /**< version number, e.g. the step (required; < UINT64_MAX) */
    uint64_t parent;   /**< default CKS_NO_PARENT. With a parent (cluster), the
                            version's manifest is the parent's overlaid with the
                            objects written in it (newer wins; see
                            cks_object_delete()): a partial-expert checkpoint. */
    uint32_t nranks;   /**< ranks that write it; each calls cks_version_finish()
                            (default 1; more than 1 needs a cluster) */
    uint32_t retain;   /**< cluster: once it commits, keep the newest `retain`
                            restorable versions of the job and every chunk their
                            manifests use; free the rest (default 0: keep all) */
    uint32_t timeout_s;/**< cluster: abort the version when not every rank has
                            finished within this many seconds (default 600) */
} cks_version_params_t;

/** Begin a version: it is OPEN until sealed or aborted. */
CKS_API_VISIBLE cks_status_t cks_version_begin_nb(cks_client_h c, const cks_version_params_t *p,
                                                  cks_done_cb_t cb, void *arg);
CKS_API_VISIBLE cks_status_t cks_version_begin(cks_client_h c, const cks_version_params_t *p);

/** A rank finished writing `version` (it put everything it will put). The call
 *  completes when the version's outcome is known: CKS_OK once every rank has
 *  finished and every object is protected (the version is restorable), or
 *  the reason it was aborted. CKS_ERR_NO_QUORUM when its coordinator could
 *  not get a majority of the servers to record the outcome and no other
 *  server took the version over: the outcome is not known yet (once a
 *  majority is reachable it is aborted, unless another server took it over
 *  meanwhile; cks_version_stat() tells).
 *  Ranks are 0 .. nranks-1, each finishes once. */
CKS_API_VISIBLE cks_status_t cks_version_finish_nb(cks_client_h c, const char *job,
                                                   uint64_t version, uint32_t rank,
                                                   cks_done_cb_t cb, void *arg);
CKS_API_VISIBLE cks_status_t cks_version_finish(cks_client_h c, const char *job,
                                                uint64_t version, uint32_t rank);

/** Remove the parent's object `key` from an open version with a parent (a
 *  delete marker): restores of this version do not see it. Cluster only. */
CKS_API_VISIBLE cks_status_t cks_object_delete(cks_client_h c, const char *job,
                                               uint64_t version, const char *key);

/** Figures of the servers that answer, summed. The encoder figures count
 *  since each server started (a restarted server starts from 0). */
typedef struct {
    uint32_t servers;          /**< servers asked */
    uint32_t answered;         /**< servers that answered */
    uint64_t arena_used;       /**< arena bytes in use */
    uint64_t arena_capacity;   /**< arena bytes in all */
    uint64_t encoded_bytes;    /**< object bytes the encoder threads protected */
    uint64_t encode_cpu_ns;    /**< their CPU time in ISA-L encode calls */
    uint64_t encoder_cpu_ns;   /**< their CPU time in whole jobs (encode, CRCs) */
} cks_cluster_stats_t;

/** Ask every server for its figures (one request each, in parallel);
 *  CKS_ERR_UNREACHABLE when none answers. */
CKS_API_VISIBLE cks_status_t cks_cluster_stats(cks_client_h c, cks_cluster_stats_t *stats_p);

/** Arena bytes in use and capacity, summed over the servers that answer. */
CKS_API_VISIBLE cks_status_t cks_cluster_usage(cks_client_h c, uint64_t *used_p,
                                               uint64_t *capacity_p);

/** Catch-up and repair figures of one server of a cluster (docs/ARCHITECTURE.md,
 *  "Catch-up and repair"). */
typedef struct {
    uint32_t server_id;   /**< its id in the cluster map */
    int caught_up;        /**< 1: it has caught up with the other servers since it
                               started (before that it answers lists and stats
                               CKS_ERR_BUSY) */
    uint64_t chunks_left; /**< chunks the placement puts on it that it does not hold
                               and has not rebuilt yet, as last counted */
    uint64_t bytes_left;  /**< their bytes */
    uint64_t chunks_done; /**< chunks it rebuilt since it started */
    uint64_t bytes_done;  /**< their bytes */
    uint64_t rate;        /**< bytes/s rebuilt over the last 2 s */
    uint64_t rate_cap;    /**< its pacing cap (--repair-rate), bytes/s; 0: none */
    uint64_t chunks_sent; /**< of chunks_done, those it rebuilt for another server and
                               that server took: where a stripe lacked chunks on
                               several servers, one of them decodes them all at once */
    uint64_t stripes_decoded; /**< decodes it ran since it started (one per stripe) */
    uint64_t chunks_decoded;  /**< the chunks those decodes rebuilt, for it and for others
                                   (what a decode costs depends on the stripe's k, not
                                   on how many chunks it rebuilds) */
} cks_repair_info_t;

/** Ask server number `server` (0 .. cks_cluster_stats().servers - 1, the
 *  order of the cluster map) for its repair figures. CKS_ERR_UNSUPPORTED
 *  without a cluster; the transport's error when it does not answer. */
CKS_API_VISIBLE cks_status_t cks_repair_status(cks_client_h c, size_t server,
                                               cks_repair_info_t *info_p);

/** Seal (one rank, rank 0): as cks_version_finish() for single-rank versions. */
CKS_API_VISIBLE cks_status_t cks_version_seal_nb(cks_client_h c, const char *job,
                                                 uint64_t version, cks_done_cb_t cb,
                                                 void *arg);
CKS_API_VISIBLE cks_status_t cks_version_seal(cks_client_h c, const char *job, uint64_t version);

/** Give up on an open version: it becomes ABORTED and its space is freed.
 *  CKS_OK once its coordinator recorded the abort and the servers that
 *  answer took it (1 s at most: a server that does not answer learns it
 *  later); CKS_ERR_VERSION_NOT_OPEN when the version had ended already
 *  (committed, or aborted by another rank or by a failure). */
CKS_API_VISIBLE cks_status_t cks_version_abort(cks_client_h c, const char *job, uint64_t version);

/** Delete a version and free its space: answered as an abort is (1 s at
 *  most for a server that does not answer). CKS_ERR_BUSY while the version
 *  is open ("abort it first"), or while its commit or abort still goes out
 *  to the servers: try again. */
CKS_API_VISIBLE cks_status_t cks_version_delete(cks_client_h c, const char *job, uint64_t version);

/** What is known of a version. */
typedef struct {
    uint64_t version;
    uint64_t parent;      /**< CKS_NO_PARENT when none */
    cks_vstate_t state;
    uint32_t nranks;
    uint64_t created_ns;  /**< wall clock (CLOCK_REALTIME) */
    uint64_t sealed_ns;   /**< 0 until sealed */
    uint64_t nobjects;
    uint64_t bytes;
    uint32_t ec_k, ec_m;  /**< Reed-Solomon geometry; 0, 0 on a standalone server */
    uint64_t chunk_size;
    uint32_t redundancy;  /**< cluster: how many servers of any stripe's group the
                               version can lose and still restore: ec_m when
                               PROTECTED, less when DEGRADED (written while
                               servers were unreachable; repair restores it) */
    uint64_t missing;     /**< cluster: chunks not stored when it committed
                               (0 when PROTECTED) */
} cks_version_info_t;

/** One version's record. */
CKS_API_VISIBLE cks_status_t cks_version_stat(cks_client_h c, const char *job, uint64_t version,
                                              cks_version_info_t *info_p);

/** The newest restorable (SEALED or later) version of a job. */
CKS_API_VISIBLE cks_status_t cks_version_latest(cks_client_h c, const char *job,
                                                cks_version_info_t *info_p);

/** Versions of a job in increasing order, after *after (NULL: from the first).
 *  Fills out[0 .. *count_p-1], at most max (caller's array); *more_p is 1 when
 *  more follow (call again with after = the last one's version). */
CKS_API_VISIBLE cks_status_t cks_version_list(cks_client_h c, const char *job,
                                              const uint64_t *after, cks_version_info_t *out,
                                              size_t max, size_t *count_p, int *more_p);

/** Names of the jobs that have versions, in byte order, after `after` (NULL:
 *  from the first). names is the caller's array of max entries. */
CKS_API_VISIBLE cks_status_t cks_job_list(cks_client_h c, const char *after,
                                          char (*names)[CKS_JOB_NAME_MAX + 1], size_t max,
                                          size_t *count_p, int *more_p);

/* ---- durable tier ------------------------------------------------------------
 * A version can be flushed to a directory on durable storage (a parallel
 * file system, NFS, a local disk: a path every server can write and every
 * reader can read). Each server writes the chunks it holds - data and
 * parity, of every object the version's manifest references, from the
 * version that wrote them, so a partial-expert version flushes what it
 * inherits and stands alone - into DIR/<job>/.<version>.tmp-<id>/, in
 * parallel; one server then checks that every stripe has at least k chunks
 * there, writes the manifest (every object's tags, size, CRC-64 and source
 * version; the stripe geometry) and publishes DIR/<job>/<version>/ by
 * rename. Every file is fsync'd before the rename: a version on disk is
 * complete or absent. docs/ARCHITECTURE.md, "Durable tier", has the layout.
 */

/** Flush a restorable cluster version to the servers' --flush-dir (`dir`:
 *  NULL, or that same absolute path; a server started without --flush-dir
 *  refuses with CKS_ERR_UNSUPPORTED: only its operator chooses where a
 *  server writes). Blocking; the servers
 *  write on their flush threads, never on the threads that serve requests.
 *  Returns CKS_OK once published; CKS_ERR_VERSION_EXISTS when that version
 *  is already there; CKS_ERR_DATA_LOST when the servers that answered hold
 *  fewer than k chunks of a stripe (cks_client_last_error() names the
 *  object); CKS_ERR_UNSUPPORTED on a standalone server. Requests wait up to
 *  10 minutes or the client's timeout, whichever is longer. */
CKS_API_VISIBLE cks_status_t cks_version_flush(cks_client_h c, const char *job, uint64_t version,
                                               const char *dir);

/** The flushed copy of (job, version) in `dir` (CKS_VERSION_LATEST: the
 *  newest there): its record as it was flushed. No client needed; reads the
 *  manifest. CKS_ERR_NO_SUCH_VERSION when that version is not flushed there
 *  (a temporary directory of an unfinished flush does not count). */
CKS_API_VISIBLE cks_status_t cks_flushed_stat(const char *dir, const char *job, uint64_t version,
                                              cks_version_info_t *info_p);

/** Versions of `job` flushed to `dir`, in increasing order, into
 *  out[0 .. *count_p-1] (caller's array of max); *more_p (may be NULL) is 1
 *  when more were there than max (the smallest ones are given). */
CKS_API_VISIBLE cks_status_t cks_flushed_list(const char *dir, const char *job, uint64_t *out,
                                              size_t max, size_t *count_p, int *more_p);

/** Progress of the flushes of one version in a flush directory
 *  (cks_flushed_progress()). */
typedef struct {
    int published;            /**< 1: the version is published there (complete) */
    uint32_t unfinished;      /**< temporary directories of flushes of it that
                                   have not published: under way, or left by a
                                   flush that stopped (until they are removed) */
    uint32_t servers_started; /**< in the most recently changed of those: servers
                                   whose chunk file is there */
    uint32_t servers_done;    /**< ... servers whose index is there (their chunks
                                   all written and fsync'd) */
    uint64_t bytes_written;   /**< ... chunk bytes written so far */
    uint64_t touched_ns;      /**< ... when a file in it last changed (wall clock,
                                   CLOCK_REALTIME): a flush that stopped stops
                                   changing it */
    uint64_t published_bytes; /**< with published: chunk bytes of the published
                                   copy (data and parity) */
} cks_flush_progress_t;

/** How far the flushes of (job, version) to `dir` have come, read from the
 *  directory (no client needed; every server of a flush writes there): into
 *  *out (the caller's). A flush writes about bytes * (k + m) / k chunk bytes
 *  (cks_version_info_t), spread over the servers, and more where objects
 *  end in a partial stripe (its chunks are padded). CKS_ERR_NO_SUCH_VERSION
 *  (*out zeroed) when the version is neither published there nor being
 *  flushed; CKS_ERR_INVALID_PARAM on a NULL argument or a name too long. */
CKS_API_VISIBLE cks_status_t cks_flushed_progress(const char *dir, const char *job,
                                                  uint64_t version,
                                                  cks_flush_progress_t *out);

/* ---- staging memory -------------------------------------------------------- */

/** Allocate `size` bytes of host memory for put and get buffers, in shared
 *  memory that UCX allocates. A server on this host reads a put's bytes
 *  straight out of it and writes a get's bytes straight into it: one copy in
 *  user space by the server, in place of a copy through the kernel (CMA), so
 *  puts and gets from and to it run at about memcpy speed. Use it for the
 *  buffers a trainer snapshots into (the target of its device-to-host
 *  copies) and restores into; prefer a few large allocations, carved up, to
 *  many small ones. With a server on another host it is ordinary memory.
 *  Like registering memory for RDMA, allocating costs more than malloc():
 *  before it returns, every server of the cluster on this host is connected
 *  to (each wait bounded by the client's timeout; a server that is down
 *  fails at once) and maps the region and faults its pages in (with 4 KiB
 *  pages about 0.2 s per GiB and server on an idle core), so that the first
 *  transfers run as fast as the later ones; a server that connects later (a
 *  restarted one) does the same in the background. A server that cannot map it is
 *  not an error: it faults pages in at the first transfers instead.
 *  *ptr_p belongs to the caller until cks_mem_free(); free every allocation
 *  before cks_client_destroy(). Any thread but a completion callback's. */
CKS_API_VISIBLE cks_status_t cks_mem_alloc(cks_client_h c, size_t size, void **ptr_p);

/** Free memory from cks_mem_alloc() (ptr as it returned it). No put or get
 *  may still use it. CKS_ERR_INVALID_PARAM when ptr is not such memory. */
CKS_API_VISIBLE cks_status_t cks_mem_free(cks_client_h c, void *ptr);

/* ---- objects ------------------------------------------------------------- */

typedef struct {
    cks_kind_t kind;   /**< dense, expert, optimizer, rng, other */
    int32_t layer;     /**< CKS_TAG_NONE when not applicable */
    int32_t expert;
    int32_t rank;
} cks_tags_t;

/* ---- device memory ----------------------------------------------------------
 * A put may read, and a get may write, CUDA device memory: mem_type
 * CKS_MEM_CUDA, or CKS_MEM_AUTO to let the library ask the CUDA runtime.
 * Without a CUDA device at run time (or in a build without the CUDA toolkit)
 * such a call returns CKS_ERR_UNSUPPORTED and cks_client_last_error() says
 * why ("no CUDA device"). Two paths (cks_client_stats_t.gpu_path):
 *   - direct: where UCX moves CUDA memory itself, a put hands the device
 *     pointer to UCX, as a host put hands its buffer;
 *   - staged: otherwise, and for every get, the bytes go through a ring of
 *     pinned host slices (cks_mem_alloc() memory, registered once with the
 *     CUDA runtime; CKS_CLIENT_FIELD_STAGE sizes it). A put copies slice
 *     after slice device-to-host on the library's own CUDA streams while
 *     UCX sends the slices copied before; a get reads slice after slice from
 *     the servers while the slices read before are copied host-to-device.
 *     The copies and their waits run on the library's stage thread, never
 *     on the UCX progress thread. Staged objects are copied in
 *     the order of the calls: an object that fits in the ring is copied
 *     whole before it is sent (so that a failed copy never reaches the
 *     server) and is sent from its slots while the next objects are copied
 *     into the free ones; a larger one has the ring to itself and overlaps
 *     its own copies with its sends: each slice goes as a part of the put
 *     once copied, and a failed copy gives the put up at the server (the
 *     version goes on without it). The callbacks of staged transfers
 *     (copied_cb, and the put's or get's own) may run on the stage thread
 *     instead of the progress thread; the same rules hold (once, never
 *     blocking, further *_nb calls allowed).
 * Ownership of a device buffer at each step of a put:
 *   0. Before the call, every write of the caller's to the buffer must be
 *      complete (its stream synchronized): the library copies on streams
 *      of its own, which wait for no other stream, the legacy default
 *      stream included (a cudaMemcpy() from pageable memory may return
 *      before its transfer ends).
 *   1. cks_put_nb() returns CKS_INPROGRESS: the library reads the buffer
 *      from now on; the caller must not write it.
 *   2. COPIED (the put's copied_cb, CKS_PUT_FIELD_COPIED): the library has
 *      read the buffer for the last time; it is the caller's again, and
 *      training may overwrite it while the bytes travel on from host memory.
 *      Staged: when the last slice's device-to-host copy completed (a host
 *      buffer with CKS_PUT_FIELD_STAGED: its memcpy() into the ring); for
 *      an object larger than the ring put to a cluster, when the put
 *      completes: until then a server lost mid-object makes the library
 *      read the buffer again, to send it to the group's next member. Direct
 *      (and other host buffers): when the put completes, just before its
 *      callback.
 *   3. STORED (the put's callback, CKS_OK): the server holds the bytes.
 *   4. PROTECTED: cks_version_finish()/seal completed: every stripe has its
 *      parity.
 * A get's device buffer is written until the get's callback runs; a failed
 * get may have written any part of it. A staged put whose copy fails (a
 * copy error, a timeout) fails with that status, and the ring serves the
 * next object: an object that fits in the ring (stage_slice x stage_slices)
 * is copied whole before its request goes out, so the server never sees
 * it; a larger one is sent in parts while it is copied, and the server
 * gives up the parts it took (the version stays open, without the object;
 * cks_client_last_error() says "was not stored"). The ring's
 * memory is the library's; it is set up at the first device transfer,
 * which must come from an application thread, not from a completion
 * callback.
 */

enum {
    CKS_PUT_FIELD_TAGS     = 1u << 0,
    CKS_PUT_FIELD_MEM_TYPE = 1u << 1,
    CKS_PUT_FIELD_COPIED   = 1u << 2,
    /** Host memory too goes through the staging ring (CKS_CLIENT_FIELD_STAGE
     *  sizes it): the library copies the buffer into the ring with memcpy()
     *  on its stage thread, runs copied_cb as soon as that copy is done, and
     *  sends the object from the ring. While the ring has room for what is
     *  in flight, a trainer's buffers are free again after one memcpy of
     *  their bytes (its stall), whatever the servers' speed; an object larger
     *  than the ring is sent while it is copied, so COPIED comes as the
     *  servers take it (to a cluster: when the put completes, above). Works
     *  without a GPU. Device memory is always staged
     *  (or direct), flag or not. */
    CKS_PUT_FIELD_STAGED   = 1u << 3,
};

typedef struct {
    uint64_t field_mask;
    const char *job;          /**< required */
    uint64_t version;         /**< required; must be OPEN */
    const char *key;          /**< required; unique within the version */
    const void *buffer;       /**< the bytes (caller's; read until completion) */
    uint64_t size;            /**< bytes; 0 is allowed */
    cks_tags_t tags;          /**< default: kind other, every tag CKS_TAG_NONE */
    cks_mem_type_t mem_type;  /**< default CKS_MEM_HOST */
    cks_done_cb_t copied_cb;  /**< with CKS_PUT_FIELD_COPIED: runs once when the
                                   library no longer reads `buffer` (step 2 of
                                   "device memory" above), before the put's own
                                   callback, with CKS_OK or the error that ended
                                   the reading; never when cks_put_nb() returns
                                   an error. It must not block. */
    void *copied_arg;
} cks_put_params_t;

/** Set up the client's staging ring now (CKS_CLIENT_FIELD_STAGE sizes it:
 *  cks_mem_alloc() memory, registered with the CUDA runtime where there is
 *  a device), from an application thread, so that the first staged put or
 *  get does not pay for it. Otherwise the first one sets it up. Without a
 *  device the ring serves host-staged puts only (CKS_PUT_FIELD_STAGED). */
CKS_API_VISIBLE cks_status_t cks_stage_prepare(cks_client_h c);

/** Store an object, zero-copy from `buffer` (host, or device memory: see
 *  "device memory" above). Completes once the server holds the bytes
 *  (STORED); the buffer may be reused from then on, or from COPIED. */
CKS_API_VISIBLE cks_status_t cks_put_nb(cks_client_h c, const cks_put_params_t *p,
                                        cks_done_cb_t cb, void *arg);
CKS_API_VISIBLE cks_status_t cks_put(cks_client_h c, const cks_put_params_t *p);

/** What is known of an object. */
typedef struct {
    char key[CKS_KEY_NAME_MAX + 1];
    cks_tags_t tags;
    uint64_t size;
    uint64_t crc64;  /**< CRC-64 (ECMA-182, reflected, ISA-L crc64_ecma_refl) */
    uint64_t source_version; /**< the version the bytes were written in: this
                                  one, or an ancestor (partial-expert versions) */
} cks_object_info_t;

/* ---- restore ------------------------------------------------------------- */

/** Version number meaning "the newest restorable version". */
#define CKS_VERSION_LATEST UINT64_MAX

/** Open a version for restore: it must be SEALED or later. The handle keeps
 *  the job and version; close it when done. While it is open, the handle
 *  holds the version on every server (a lease of 2 minutes that each get
 *  renews): retention keeps it and its chunks, however many versions commit
 *  meanwhile; a lease runs out on its own when a client dies. */
CKS_API_VISIBLE cks_status_t cks_restore_open(cks_client_h c, const char *job,
                                              uint64_t version, cks_restore_h *r_p);
CKS_API_VISIBLE void cks_restore_close(cks_restore_h r);
/** The version a restore handle reads. */
CKS_API_VISIBLE cks_status_t cks_restore_info(cks_restore_h r, cks_version_info_t *info_p);

/* ---- checked restore, and fallback to an older version ---------------------------- */
/*
 * A version "restores exactly" when every object of its manifest can be
 * read back bit for bit. cks_restore_open_ex() can check that before it
 * hands a version out, so that a job restarting from a corrupt checkpoint
 * learns it at once - with the object and the reason - instead of failing
 * in the middle of its restore, and, with CKS_RESTORE_FALLBACK, opens the
 * newest older version that passes instead of failing at all.
 *
 * The check (cluster): every chunk of every stripe of every object of the
 * manifest (from the version that wrote the object's bytes) is asked of its
 * server with a one-byte read; the server finds the chunk's record and
 * checks the CRC of the whole chunk in its memory before it answers. A
 * stripe passes when at least k of its k + m chunks pass: the chunk is
 * recorded, its server answers, and its bytes match the CRC recorded when
 * it was written - exactly what a restore needs to read or decode it. No
 * chunk's bytes cross the network: the servers read (k + m) / k times the
 * version's size from their memory, in parallel, and the client sends one
 * small request per chunk (at most 256 in flight). A server that cannot be
 * reached counts as losing all its chunks (a partitioned one after the
 * client's request timeout). On a standalone server (no erasure coding) each
 * object is asked for one byte (an empty one for none): it must be recorded
 * and must have passed the CRC check of the server's start (bytes that rot after it are found
 * only by reading them: CKS_GET_VERIFY).
 * A version that passes can still fail later, when servers are lost after
 * the check; and the check does not read the bytes to the client, so it
 * cannot see a fault of the path between a server and the client (the
 * restore's own CRC checks do).
 */

/** Check the version before opening it: a version with an object that
 *  cannot be restored is not opened (CKS_ERR_DATA_LOST, naming the object). */
#define CKS_RESTORE_CHECK 0x1u
/** Implies CKS_RESTORE_CHECK. When the version asked for is not restorable
 *  (its state, or the check), open the newest older restorable version that
 *  passes the check instead, walking the job's versions newest first; the
 *  opened version is cks_restore_info()'s. A version that does not exist is
 *  an error, never a reason to fall back. */
#define CKS_RESTORE_FALLBACK 0x2u
/** Read the flushed copy in flush_dir (CKS_RESTORE_FIELD_FLUSH_DIR) and not
 *  the memory tier at all (e.g. to import it into a new cluster). */
#define CKS_RESTORE_DURABLE 0x4u

/** Bytes of cks_restore_skip_t.reason, NUL included. */
#define CKS_RESTORE_REASON_MAX 384

/** A version that cks_restore_open_ex() did not open, and why. */
typedef struct {
    uint64_t version;
    cks_status_t status;     /**< CKS_ERR_DATA_LOST: an object cannot be restored;
                                  CKS_ERR_NOT_RESTORABLE: the version's state
                                  (e.g. ABORTED, or still OPEN) */
    char key[CKS_KEY_NAME_MAX + 1]; /**< the first object (in key order) found that
                                  cannot be restored; "" for a state */
    uint64_t source_version; /**< the version whose chunks hold that object (the
                                  version itself, or an ancestor); 0 for a state */
    uint64_t stripe;         /**< its first stripe with fewer than k chunks */
    uint32_t intact;         /**< chunks of that stripe that passed */
    uint32_t needed;         /**< k */
    char reason[CKS_RESTORE_REASON_MAX]; /**< for people: the above, and each
                                  failed chunk with its status */
} cks_restore_skip_t;

/** Called by cks_restore_open_ex() for each version it checked and did not
 *  open, newest first, on the calling thread, before the call returns.
 *  `skip` is valid during the call only. */
typedef void (*cks_restore_skip_cb_t)(void *arg, const cks_restore_skip_t *skip);

enum {
    CKS_RESTORE_FIELD_FLAGS     = 1u << 0,
    CKS_RESTORE_FIELD_SKIP_CB   = 1u << 1,
    CKS_RESTORE_FIELD_FLUSH_DIR = 1u << 2,
};

typedef struct {
    uint64_t field_mask;   /**< CKS_RESTORE_FIELD_* bits of the optional fields set */
    const char *job;       /**< required; read during the call */
    uint64_t version;      /**< required: a version, or CKS_VERSION_LATEST */
    uint32_t flags;        /**< CKS_RESTORE_CHECK, CKS_RESTORE_FALLBACK (default 0:
                                as cks_restore_open(), no check) */
    cks_restore_skip_cb_t skip_cb; /**< default none */
    void *skip_arg;        /**< passed to skip_cb */
    const char *flush_dir; /**< with CKS_RESTORE_FIELD_FLUSH_DIR: a directory that
                                versions were flushed to (cks_version_flush()).
                                When the memory tier does not have the version
                                (CKS_ERR_NO_SUCH_VERSION or NO_SUCH_JOB), or it
                                is not restorable, or (with CKS_RESTORE_CHECK)
                                fails its check, the flushed copy of that same
                                version is opened instead, before any fallback
                                to an older version. Read during the call. A
                                handle on a flushed copy reads the files on the
                                calling thread (cks_get_nb()'s callback runs
                                before it returns), host memory only, checks
                                every chunk's CRC-64 and decodes around a bad
                                or missing one from the others of its stripe;
                                whole objects are checked against their CRC-64 */
} cks_restore_params_t;

/** Open a version for restore, checked first when the flags ask for it
 *  (see above). Blocking; any thread but a completion callback's.
 *  Returns CKS_OK and *r_p (close it with cks_restore_close()), or:
 *  CKS_ERR_DATA_LOST when the version (with FALLBACK: every candidate down
 *  to the oldest) has an object that cannot be restored;
 *  CKS_ERR_NOT_RESTORABLE when the version asked for is not restorable and,
 *  with FALLBACK, no older one is either; the status of a failed stat or
 *  list (e.g. CKS_ERR_NO_SUCH_VERSION, CKS_ERR_UNREACHABLE), which ends the
 *  walk. On failure cks_client_last_error() names the version, the object
 *  and the reason (with FALLBACK: how many versions were checked, and the
 *  newest one's reason); every skipped version is logged (warning) and
 *  given to skip_cb. *r_p is written only on CKS_OK. */
CKS_API_VISIBLE cks_status_t cks_restore_open_ex(cks_client_h c, const cks_restore_params_t *p,
                                                 cks_restore_h *r_p);

/** One object's record. */
CKS_API_VISIBLE cks_status_t cks_object_stat(cks_restore_h r, const char *key,
                                             cks_object_info_t *info_p);

/** Objects of the version in key order, after `after_key` (NULL: first). */
CKS_API_VISIBLE cks_status_t cks_object_list(cks_restore_h r, const char *after_key,
                                             cks_object_info_t *out, size_t max,
                                             size_t *count_p, int *more_p);

enum {
    CKS_FILTER_KIND   = 1u << 0,
    CKS_FILTER_LAYER  = 1u << 1,
    CKS_FILTER_EXPERT = 1u << 2,
    CKS_FILTER_RANK   = 1u << 3,
};

/** Which tags an object must have (the fields named in field_mask). */
typedef struct {
    uint64_t field_mask;
    cks_tags_t tags;
} cks_tag_filter_t;

/** As cks_object_list(), keeping only objects whose tags match `filter`. */
CKS_API_VISIBLE cks_status_t cks_object_find(cks_restore_h r, const char *after_key,
                                             const cks_tag_filter_t *filter,
                                             cks_object_info_t *out, size_t max,
                                             size_t *count_p, int *more_p);

enum {
    CKS_GET_FIELD_RANGE    = 1u << 0,
    CKS_GET_FIELD_MEM_TYPE = 1u << 1,
    CKS_GET_FIELD_FLAGS    = 1u << 2,
};

/** Every read is CRC-checked by default (chunks, or a standalone object as it
 *  arrives or before a part of it is sent). This adds a second full check:
 *  the whole object's CRC over the caller's buffer once the bytes are there
 *  (on a cluster, the decoded object); one more pass over the bytes; only for
 *  whole-object reads. */
#define CKS_GET_VERIFY 0x1u
/** Cluster, whole objects: also read every chunk of every stripe whole - data,
 *  padding and parity - and check its CRC (a scrub; `ckstore verify` uses it;
 *  it needs (k+m)/k x the object's size of scratch memory). A bad or missing
 *  chunk fails the get with CKS_ERR_CRC_MISMATCH or CKS_ERR_DATA_LOST, after
 *  the data itself was read. */
#define CKS_GET_SCRUB 0x2u

typedef struct {
    uint64_t field_mask;
    const char *key;          /**< required */
    void *buffer;             /**< destination (caller's; written until completion) */
    uint64_t buffer_size;     /**< bytes available at buffer */
    uint64_t offset;          /**< with CKS_GET_FIELD_RANGE; default 0 */
    uint64_t length;          /**< with CKS_GET_FIELD_RANGE; default: the whole object */
    cks_mem_type_t mem_type;  /**< default CKS_MEM_HOST; CKS_MEM_CUDA or
                                   CKS_MEM_AUTO: staged (see "device memory") */
    uint32_t flags;           /**< CKS_GET_VERIFY */
} cks_get_params_t;

/** Read an object, or a byte range of it, straight into `buffer`. Without a
 *  range, buffer_size must be at least the object's size; *length_p (may be
 *  NULL; written before the callback runs) receives the bytes read. */
CKS_API_VISIBLE cks_status_t cks_get_nb(cks_restore_h r, const cks_get_params_t *p,
                                        uint64_t *length_p, cks_done_cb_t cb, void *arg);
CKS_API_VISIBLE cks_status_t cks_get(cks_restore_h r, const cks_get_params_t *p,
                                     uint64_t *length_p);

/* ---- PEC helpers ---------------------------------------------------------- */
/*
 * Partial Experts Checkpoint (PEC; Cai et al., 2024): each version holds the
 * dense part of the model plus only K of the E experts of every MoE layer;
 * the versioned manifest (a version is its parent overlaid with what it
 * writes) supplies every other expert from an older version. These helpers
 * choose which experts to write, and measure what a restore loses. They are
 * pure functions: no I/O, no allocation, no client handle, safe from any
 * thread. docs/PEC.md gives the definitions and a worked example.
 *
 * Arrays are indexed [layer * experts + expert] (layer-major), have
 * layers * experts entries, and belong to the caller: inputs are only read
 * during the call, outputs only written, and only when the call returns
 * CKS_OK. Counts of tokens are token-to-expert assignments (a token routed
 * to k experts in each of L layers counts k * L times).
 */

/** "Never saved": last_saved / saved_step entry, and staleness result. */
#define CKS_PEC_NEVER UINT64_MAX
/** Most array entries (layers * experts) the helpers accept. */
#define CKS_PEC_MAX_ENTRIES (UINT64_C(1) << 32)

enum {
    CKS_PEC_FIELD_RANKS        = 1u << 0,
    CKS_PEC_FIELD_LAYER_OFFSET = 1u << 1,
    CKS_PEC_FIELD_MAX_AGE      = 1u << 2,
};

typedef struct {
    uint64_t field_mask;    /**< CKS_PEC_FIELD_* bits of the optional fields set */
    uint32_t layers;        /**< MoE layers (required, >= 1) */
    uint32_t experts;       /**< experts per layer, E (required, >= 1) */
    uint32_t per_step;      /**< K: experts of each layer saved per checkpoint
                                 (required, 1..E) */
    uint32_t ranks;         /**< expert-parallel ranks, R (default 1; R divides E):
                                 rank r holds experts [r*E/R, (r+1)*E/R) of every
                                 layer (contiguous blocks, as Megatron-LM and
                                 DeepSpeed place them) */
    uint64_t layer_offset;  /**< round-robin: layer l starts l * layer_offset
                                 positions further on (default K, so that the
                                 layers of one checkpoint continue each other;
                                 0: every layer saves the same experts) */
    uint64_t max_age;       /**< load-aware: an expert whose newest save is at
                                 least max_age checkpoints old is saved first
                                 (default: no limit). With max_age >= ceil(E/K)
                                 and last_saved starting from CKS_PEC_NEVER,
                                 every expert is saved at least once in any
                                 max_age consecutive checkpoints */
} cks_pec_params_t;

/** What a round-robin schedule guarantees. */
typedef struct {
    uint64_t period;          /**< ceil(E/K): every expert is saved at least once
                                   in any `period` consecutive checkpoints */
    uint64_t max_staleness;   /**< period - 1: restoring checkpoint c >= period - 1,
                                   every expert's newest save is at most this many
                                   checkpoints older than c */
    uint64_t saved_per_ckpt;  /**< K * layers expert objects per checkpoint */
    uint32_t experts_per_rank; /**< E / R */
    uint64_t rank_load_min;   /**< every rank saves at least this many experts
                                   (all layers together) at every checkpoint */
    uint64_t rank_load_max;   /**< and at most this many; with the default
                                   layer_offset, rank_load_max - rank_load_min <= 1 */
} cks_pec_bounds_t;

/** Guarantees of the round-robin schedule for these params. */
CKS_API_VISIBLE cks_status_t cks_pec_bounds(const cks_pec_params_t *p,
                                            cks_pec_bounds_t *bounds_p);

/** The expert-parallel rank that holds `expert` (0..E-1). */
CKS_API_VISIBLE cks_status_t cks_pec_expert_rank(const cks_pec_params_t *p, uint32_t expert,
                                                 uint32_t *rank_p);

/** Round-robin selection for checkpoint number `ckpt` (0, 1, 2, ... counted
 *  by the trainer): sets mask[l*E + e] to 1 when expert e of layer l is
 *  saved, else 0. Exactly K per layer; the order walks the ranks in turn
 *  (expert 0 of rank 0, expert 0 of rank 1, ..., expert 1 of rank 0, ...);
 *  layer l starts ckpt*K + l*layer_offset positions into it (mod E). */
CKS_API_VISIBLE cks_status_t cks_pec_select_round_robin(const cks_pec_params_t *p,
                                                        uint64_t ckpt, uint8_t *mask);

/** Load-aware selection for checkpoint number `ckpt`: per layer, first the
 *  experts due under max_age (oldest first; with CKS_PEC_FIELD_MAX_AGE),
 *  then the experts with the most tokens_since_save (ties: the stalest,
 *  never-saved stalest of all; then the lowest id), K in all. last_saved[i]
 *  is the checkpoint number of expert i's newest save (<= ckpt) or
 *  CKS_PEC_NEVER. Writes mask as cks_pec_select_round_robin() does. */
CKS_API_VISIBLE cks_status_t cks_pec_select_load_aware(const cks_pec_params_t *p,
                                                       const uint64_t *tokens_since_save,
                                                       const uint64_t *last_saved,
                                                       uint64_t ckpt, uint8_t *mask);

/** Book-keeping after the experts of `mask` were written at checkpoint
 *  `ckpt`: last_saved[i] = ckpt and, when tokens_since_save is not NULL,
 *  tokens_since_save[i] = 0, for every i with mask[i] != 0 (both arrays are
 *  the caller's and updated in place). */
CKS_API_VISIBLE cks_status_t cks_pec_note_saved(const cks_pec_params_t *p, const uint8_t *mask,
                                                uint64_t ckpt, uint64_t *last_saved,
                                                uint64_t *tokens_since_save);

/** Summary of cks_pec_staleness(). */
typedef struct {
    uint64_t max;    /**< largest staleness of a saved expert (0 when none) */
    double mean;     /**< mean staleness of the saved experts (0 when none) */
    uint64_t stale;  /**< experts with staleness > 0 (never-saved included) */
    uint64_t never;  /**< experts never saved (staleness CKS_PEC_NEVER) */
} cks_pec_staleness_stats_t;

/** Staleness after restoring version `restored_step`: staleness[i] =
 *  restored_step - saved_step[i], where saved_step[i] is the version (the
 *  step) that expert i's object came from; CKS_PEC_NEVER in, CKS_PEC_NEVER
 *  out (the trainer must initialise that expert). A saved_step past
 *  restored_step is CKS_ERR_INVALID_PARAM. stats_p may be NULL. */
CKS_API_VISIBLE cks_status_t cks_pec_staleness(const cks_pec_params_t *p,
                                               uint64_t restored_step,
                                               const uint64_t *saved_step,
                                               uint64_t *staleness,
                                               cks_pec_staleness_stats_t *stats_p);

/** Proportion of lost tokens: *plt_p = sum(tokens_lost) / tokens_routed, in
 *  [0, 1]. tokens_lost[i]: tokens routed to expert i after its newest save
 *  up to the restored step (their updates are lost on restore);
 *  tokens_routed: all tokens routed, to any expert, in the window measured
 *  (it must cover every expert's lost tokens). 0 when tokens_routed is 0.
 *  A sum over tokens_routed, or past UINT64_MAX: CKS_ERR_INVALID_PARAM. */
CKS_API_VISIBLE cks_status_t cks_pec_plt(const cks_pec_params_t *p, const uint64_t *tokens_lost,
                                         uint64_t tokens_routed, double *plt_p);

#ifdef __cplusplus
}
#endif
#endif
