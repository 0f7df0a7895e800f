/*
 * metadata: the LMDB schema of one storage server.
 *
 * One environment per server, in a data directory; three named databases:
 *   "versions"  job + 0x00 + be64(version)            -> version record
 *   "objects"   job + 0x00 + be64(version) + key      -> object record
 *   "meta"      "schema"                              -> schema number
 * Integers in keys are big-endian so that LMDB's byte order is numeric order;
 * job names contain no NUL, so "job" + 0x00 never prefixes another job's keys.
 * Values are msgpack arrays whose first element is a record format number.
 *
 * Transactions: every call below runs inside a transaction from
 * cks_md_txn_begin(). Any number of read transactions may be open at once,
 * each usable from any thread (one thread at a time); there is at most one
 * write transaction at a time, and the server runs all of them on its one
 * metadata writer thread. A write transaction must never stay open across a
 * network wait.
 *
 * Status conventions: all calls return cks_status_t; outputs (the `_p`
 * parameters) are written only when the call returns CKS_OK. Array outputs
 * (`out`, `names`) are caller-owned buffers whose contents are unspecified
 * when a call fails. Lengths are bounded on every call: a job of 0 bytes or
 * one containing NUL is CKS_ERR_INVALID_PARAM, a job longer than
 * CKS_JOB_MAX_LEN or a key longer than CKS_KEY_MAX_LEN is
 * CKS_ERR_KEY_TOO_LONG. A stored record that does not decode is CKS_ERR_IO
 * (logged once, with the job and version). LMDB's "map full" and "transaction
 * full" are CKS_ERR_METADATA_FULL; other LMDB failures are CKS_ERR_IO.
 *
 * A transaction on which LMDB failed (full map, I/O error) is poisoned: every
 * later call on it returns CKS_ERR_BAD_STATE, and cks_md_txn_commit() aborts
 * it and returns CKS_ERR_BAD_STATE. Not-found, already-exists and bad-input
 * results do not poison a transaction.
 */
#ifndef CKS_MD_H
#define CKS_MD_H

#include "cks_common.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Parent of a version that has none; also never a valid version number. */
#define CKS_MD_NO_PARENT UINT64_MAX
/** Map size used when cks_md_open() is given 0. */
#define CKS_MD_MAP_SIZE_DEFAULT (UINT64_C(1) << 30)
/** Schema this build writes; an environment with a newer one is refused. */
#define CKS_MD_SCHEMA_VERSION 1u

/** An open metadata environment. */
typedef struct cks_md *cks_md_h;
/** A read or write transaction on one environment. */
typedef struct cks_md_txn *cks_md_txn_h;

/** One version of one job. Version numbers are 0 .. UINT64_MAX - 1. */
typedef struct {
    uint64_t version;
    uint64_t parent; /**< CKS_MD_NO_PARENT when none */
    cks_vstate_t state;
    uint32_t nranks;     /**< ranks expected to write (1 for now) */
    uint64_t created_ns; /**< CLOCK_REALTIME, nanoseconds */
    uint64_t sealed_ns;  /**< CLOCK_REALTIME, nanoseconds; 0 until sealed */
    uint64_t nobjects;   /**< objects written in this version (kept by the caller) */
    uint64_t bytes;      /**< their total size (kept by the caller) */
    uint32_t ec_k, ec_m; /**< Reed-Solomon geometry; 0, 0 on a standalone server */
    uint64_t chunk_size; /**< bytes per chunk (cluster) */
    uint32_t redundancy; /**< cluster: servers of any stripe's group it can still
                              lose (ec_m when PROTECTED, less when DEGRADED) */
    uint64_t missing;    /**< cluster: chunks not stored when it committed
                              (DEGRADED until repair rebuilds them) */
} cks_md_version_t;

/** One object of one version. */
typedef struct {
    char key[CKS_KEY_MAX_LEN + 1]; /**< NUL-terminated copy of the key */
    uint32_t key_len;              /**< 1 .. CKS_KEY_MAX_LEN */
    cks_kind_t kind;
    int32_t layer, expert, rank; /**< -1 = not applicable */
    uint64_t size;               /**< bytes of the object */
    uint64_t crc64;        /**< crc64_ecma_refl of the bytes, computed by the caller */
    uint64_t arena_offset; /**< where the bytes live in this server's arena */
    uint64_t arena_len;    /**< bytes reserved in the arena (>= size, aligned) */
    uint64_t source_version; /**< version whose chunks hold the bytes: this one,
                                  or an ancestor (partial-expert versions);
                                  records of format 1 read as this version */
} cks_md_object_t;

/**
 * Called once per object by cks_md_object_foreach(). `job` is a NUL-terminated
 * copy valid only during the call; `o` likewise. A status other than CKS_OK
 * stops the iteration and is returned by cks_md_object_foreach(). The callback
 * must not modify the "objects" database through the same transaction.
 */
typedef cks_status_t (*cks_md_object_cb_t)(const char *job, size_t job_len,
                                           uint64_t version, const cks_md_object_t *o,
                                           void *arg);

/** As cks_md_object_cb_t, for cks_md_version_foreach(); must not modify the
 *  "versions" database through the same transaction. */
typedef cks_status_t (*cks_md_version_cb_t)(const char *job, size_t job_len,
                                            const cks_md_version_t *v, void *arg);

/* ---- environment ------------------------------------------------------ */

/**
 * Open the environment in `dir`, creating the directory (mode 0700, last
 * component only) and the databases when missing. `map_size` is the most
 * bytes the store may ever hold (0 = CKS_MD_MAP_SIZE_DEFAULT); it is virtual
 * address space, not memory. Clears reader slots left by dead processes.
 * Returns CKS_ERR_UNSUPPORTED when the directory holds a newer schema.
 * Open a directory at most once per process. `dir` is copied.
 */
cks_status_t cks_md_open(const char *dir, uint64_t map_size, cks_md_h *md_p);

/** Close an environment; every transaction on it must have ended. NULL is a
 *  no-op. */
void cks_md_close(cks_md_h md);

/** Flush committed transactions to disk (commits reach the page cache only). */
cks_status_t cks_md_sync(cks_md_h md);

/** Map size in bytes, and bytes of it in use (high-water mark of pages). */
cks_status_t cks_md_stat(cks_md_h md, uint64_t *map_size_p, uint64_t *used_bytes_p);

/* ---- transactions ----------------------------------------------------- */

/** Begin a read (`write` = 0) or write transaction. A second write
 *  transaction blocks until the first ends. */
cks_status_t cks_md_txn_begin(cks_md_h md, int write, cks_md_txn_h *txn_p);

/** Begin a write transaction nested in the write transaction `parent`: what
 *  it writes reaches `parent` only when it commits, and nothing of it when it
 *  is aborted. `parent` must not be used until the child ends. */
cks_status_t cks_md_txn_begin_nested(cks_md_txn_h parent, cks_md_txn_h *txn_p);

/** Commit and free `txn`, whatever the result. Committing a read transaction
 *  just ends it. */
cks_status_t cks_md_txn_commit(cks_md_txn_h txn);

/** Discard and free `txn`. NULL is a no-op. */
void cks_md_txn_abort(cks_md_txn_h txn);

/* ---- versions ----------------------------------------------------------- */

/** Store `v` under (job, v->version). With `overwrite` = 0 an existing record
 *  is left alone and CKS_ERR_VERSION_EXISTS returned. Write transactions only. */
cks_status_t cks_md_version_put(cks_md_txn_h txn, const char *job, size_t job_len,
                                const cks_md_version_t *v, int overwrite);

/** CKS_ERR_NO_SUCH_VERSION when absent. */
cks_status_t cks_md_version_get(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version, cks_md_version_t *v_p);

/** Delete a version and every object record of it. CKS_ERR_NO_SUCH_VERSION
 *  (nothing changed) when the version record is absent. */
cks_status_t cks_md_version_del(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version);

/**
 * Versions of `job` in increasing order: those greater than `*after`, or from
 * the first when `after` is NULL. Fills out[0 .. *count_p - 1] (at most `max`;
 * `out` may be NULL when `max` is 0) and sets `*more_p` to 1 when further
 * versions follow. A job without versions gives count 0 (use
 * cks_md_job_exists() to tell the cases apart).
 */
cks_status_t cks_md_version_list(cks_md_txn_h txn, const char *job, size_t job_len,
                                 const uint64_t *after, cks_md_version_t *out, size_t max,
                                 size_t *count_p, int *more_p);

/** Newest version of `job`; with `restorable_only`, the newest SEALED,
 *  PROTECTED or DEGRADED one. CKS_ERR_NO_SUCH_JOB when the job has no
 *  versions, CKS_ERR_NO_SUCH_VERSION when none qualifies. */
cks_status_t cks_md_version_latest(cks_md_txn_h txn, const char *job, size_t job_len,
                                   int restorable_only, cks_md_version_t *v_p);

/** Every version of every job, in key order (job bytes, then version). */
cks_status_t cks_md_version_foreach(cks_md_txn_h txn, cks_md_version_cb_t cb, void *arg);

/* ---- jobs --------------------------------------------------------------- */

/** CKS_OK when `job` has at least one version, else CKS_ERR_NO_SUCH_JOB. */
cks_status_t cks_md_job_exists(cks_md_txn_h txn, const char *job, size_t job_len);

/**
 * Distinct jobs that have versions, in byte order: those after `after`
 * (`after_len` bytes), or from the first when `after` is NULL. Writes up to
 * `max` NUL-terminated names; `*more_p` = 1 when further jobs follow.
 */
cks_status_t cks_md_job_list(cks_md_txn_h txn, const char *after, size_t after_len,
                             char (*names)[CKS_JOB_MAX_LEN + 1], size_t max,
                             size_t *count_p, int *more_p);

/* ---- objects ------------------------------------------------------------ */

/** Store `o` under (job, version, o->key). CKS_ERR_DUPLICATE_KEY when that key
 *  exists. Does not touch the version record. Write transactions only. */
cks_status_t cks_md_object_put(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const cks_md_object_t *o);

/** CKS_ERR_NO_SUCH_KEY when absent. */
cks_status_t cks_md_object_get(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const char *key, size_t key_len,
                               cks_md_object_t *o_p);

/** CKS_ERR_NO_SUCH_KEY when absent. Write transactions only. */
cks_status_t cks_md_object_del(cks_md_txn_h txn, const char *job, size_t job_len,
                               uint64_t version, const char *key, size_t key_len);

/**
 * Objects of one version in key byte order: those after `after_key`
 * (`after_len` bytes), or from the first when `after_key` is NULL. Same
 * output conventions as cks_md_version_list().
 */
cks_status_t cks_md_object_list(cks_md_txn_h txn, const char *job, size_t job_len,
                                uint64_t version, const char *after_key, size_t after_len,
                                cks_md_object_t *out, size_t max, size_t *count_p,
                                int *more_p);

/** Every object of every version of every job, in key order. A record that
 *  does not decode stops the walk with CKS_ERR_IO. */
cks_status_t cks_md_object_foreach(cks_md_txn_h txn, cks_md_object_cb_t cb, void *arg);

/* ---- drops (cluster: tombstones) ------------------------------------------
 * A restorable version that was deleted leaves a drop record: the
 * incarnation that went (its created_ns) and when. Catch-up never learns
 * that incarnation back from a server that missed the delete, and tells
 * such a server to drop it. Records older than CKS_MD_DROP_KEEP_NS go. */

#define CKS_MD_DROP_KEEP_NS (7ull * 24 * 3600 * 1000000000ull)

/** Record the delete of (job, version), the incarnation created at
 *  created_ns, at dropped_ns (CLOCK_REALTIME); removes records older than
 *  CKS_MD_DROP_KEEP_NS before dropped_ns. Write transactions only. */
cks_status_t cks_md_drop_put(cks_md_txn_h txn, const char *job, size_t job_len,
                             uint64_t version, uint64_t created_ns, uint64_t dropped_ns);

/** The created_ns of the deleted incarnation of (job, version);
 *  CKS_ERR_NO_SUCH_VERSION when no drop is recorded. */
cks_status_t cks_md_drop_get(cks_md_txn_h txn, const char *job, size_t job_len,
                             uint64_t version, uint64_t *created_ns_p);

/** Drop records of job with a version above *after (all when NULL), in
 *  increasing order: versions[i] and created[i] (caller's arrays of max). */
cks_status_t cks_md_drop_list(cks_md_txn_h txn, const char *job, size_t job_len,
                              const uint64_t *after, uint64_t *versions, uint64_t *created,
                              size_t max, size_t *count_p, int *more_p);

/* ---- chunks (cluster) ----------------------------------------------------
 * "chunks": job + 0x00 + be64(version) + key + 0x00 + be64(stripe) + u8(idx)
 * -> [fmt, len, crc64, arena_offset, arena_len]. One record per chunk of a
 * stripe that this server holds. Object keys contain no NUL, so the 0x00
 * after the key keeps one object's chunks apart from another's.
 */

/** A chunk held by this server. */
typedef struct {
    uint64_t stripe;
    uint32_t idx;          /**< 0..k-1 data, k..k+m-1 parity */
    uint64_t len;          /**< bytes of the chunk */
    uint64_t crc64;        /**< of those bytes (computed by the primary) */
    uint64_t arena_offset; /**< where they live in this server's arena */
    uint64_t arena_len;
} cks_md_chunk_t;

/** Per chunk, by cks_md_chunk_del_version(); non-OK stops and is returned. */
typedef cks_status_t (*cks_md_chunk_cb_t)(const cks_md_chunk_t *c, void *arg);

/** Per chunk, by cks_md_chunk_foreach(); strings valid during the call. */
typedef cks_status_t (*cks_md_chunk_each_cb_t)(const char *job, size_t job_len,
                                               uint64_t version, const char *key,
                                               size_t key_len, const cks_md_chunk_t *c,
                                               void *arg);

/** Record a chunk; CKS_ERR_DUPLICATE_KEY when that chunk is already there. */
cks_status_t cks_md_chunk_put(cks_md_txn_h txn, const char *job, size_t job_len,
                              uint64_t version, const char *key, size_t key_len,
                              const cks_md_chunk_t *c);

/** One chunk; CKS_ERR_NO_SUCH_KEY when this server does not hold it. */
cks_status_t cks_md_chunk_get(cks_md_txn_h txn, const char *job, size_t job_len,
                              uint64_t version, const char *key, size_t key_len,
                              uint64_t stripe, uint32_t idx, cks_md_chunk_t *c_p);

/** Delete every chunk of a version, calling cb (may be NULL) for each first
 *  (so that the caller can free its arena space). */
cks_status_t cks_md_chunk_del_version(cks_md_txn_h txn, const char *job, size_t job_len,
                                      uint64_t version, cks_md_chunk_cb_t cb, void *arg);

/** Keep-or-free test for cks_md_chunk_gc(): nonzero keeps the chunks of
 *  object `key` of `version`. */
typedef int (*cks_md_chunk_keep_cb_t)(uint64_t version, const char *key, size_t key_len,
                                      void *arg);

/** Garbage-collect the chunks of one job: every chunk for which `keep`
 *  returns 0 is deleted, after `freed` (may be NULL) saw it. */
cks_status_t cks_md_chunk_gc(cks_md_txn_h txn, const char *job, size_t job_len,
                             cks_md_chunk_keep_cb_t keep, cks_md_chunk_cb_t freed, void *arg);

/** Every chunk of every version, in key order. */
cks_status_t cks_md_chunk_foreach(cks_md_txn_h txn, cks_md_chunk_each_cb_t cb, void *arg);


/* ======================================================================
 * cluster map (metadata/cluster.c)
 *
 * The servers of one ckstore cluster and an epoch that grows on every
 * membership change. Text format (docs/CLUSTER_MAP.md), one item per line,
 * '#' starts a comment:
 *
 *     epoch 3
 *     server 0 127.0.0.1:7001 node=n0 rack=r0
 *
 * Rules, each refused with CKS_ERR_INVALID_PARAM and a message that names the
 * line: exactly one epoch (decimal u64); 1 .. CKS_CLUSTER_MAX_SERVERS
 * servers; ids 0..65535 and unique; addresses IPv4 dotted quads (not
 * 0.0.0.0), ports 1..65535, address:port unique; node and rack labels 1..63
 * bytes of [A-Za-z0-9._-], both required; a node lies in one rack only.
 *
 * A loaded map is immutable: any number of threads may read it and call
 * cks_place() on it at once, with no lock. Its owner frees it once no reader
 * is left. Liveness is not part of the map: callers pass a down bitmap to
 * cks_place().
 *
 * Server positions: a map keeps its servers in increasing id order, whatever
 * the order of the lines; the position of a server (0 .. nservers - 1) is its
 * rank in that order. Nodes and racks get dense indices (0 .. nnodes - 1,
 * 0 .. nracks - 1) in order of first appearance in that same order, so two
 * maps with the same servers have the same positions and indices.
 *
 * Error messages: the parse, load and check calls take `err`, a caller
 * buffer of `err_len` bytes (may be NULL / 0). On failure they write a
 * NUL-terminated message there (truncated to fit) and log the same message
 * once with cks_error(); on success they leave `err` alone.
 * ====================================================================== */

/** Most servers in one map. */
#define CKS_CLUSTER_MAX_SERVERS 4096u
/** Longest node or rack label, in bytes (without the NUL). */
#define CKS_CLUSTER_LABEL_MAX 63u
/** Longest line of a map file, in bytes (without the newline). */
#define CKS_CLUSTER_LINE_MAX 1024u
/** Largest map text accepted by cks_cluster_load() and cks_cluster_parse(). */
#define CKS_CLUSTER_TEXT_MAX (4u << 20)
/** Bytes of a dotted-quad address with its NUL ("255.255.255.255"). */
#define CKS_CLUSTER_ADDR_LEN 16u

/** A loaded cluster map; immutable. */
typedef struct cks_cluster *cks_cluster_h;

/** One server of a map, as returned by cks_cluster_server(). */
typedef struct {
    uint16_t id;   /**< unique id from the map, 0..65535 */
    uint16_t port; /**< 1..65535 */
    uint16_t node; /**< dense node index, 0 .. cks_cluster_nnodes() - 1 */
    uint16_t rack; /**< dense rack index, 0 .. cks_cluster_nracks() - 1 */
    uint32_t ipv4; /**< the address, host byte order */
    char addr[CKS_CLUSTER_ADDR_LEN];             /**< canonical dotted quad */
    char node_label[CKS_CLUSTER_LABEL_MAX + 1]; /**< NUL-terminated */
    char rack_label[CKS_CLUSTER_LABEL_MAX + 1]; /**< NUL-terminated */
} cks_cluster_server_t;

/**
 * Read and validate the map file `path` (at most CKS_CLUSTER_TEXT_MAX
 * bytes). Messages name the file and the line. CKS_ERR_IO when the file
 * cannot be read, CKS_ERR_INVALID_PARAM when it is not a valid map,
 * CKS_ERR_NO_MEMORY. On success `*map_p` is the caller's; free it with
 * cks_cluster_free().
 */
cks_status_t cks_cluster_load(const char *path, cks_cluster_h *map_p, char *err,
                              size_t err_len);

/**
 * As cks_cluster_load(), from `len` bytes of `text` (need not be
 * NUL-terminated; a NUL byte inside is an error). For tests and for maps
 * received over the wire, which are untrusted input: every length and count
 * is bounded.
 */
cks_status_t cks_cluster_parse(const char *text, size_t len, cks_cluster_h *map_p,
                               char *err, size_t err_len);

/**
 * The map as text in the same format, canonical: a comment line, the epoch,
 * then one server line per server in increasing id order. Parsing the text
 * gives an equal map, and serializing that gives the same bytes.
 * `*text_p` is NUL-terminated, `*len_p` bytes long without the NUL, and
 * belongs to the caller: release it with free().
 */
cks_status_t cks_cluster_serialize(cks_cluster_h map, char **text_p, size_t *len_p);

/** Free a map. NULL is a no-op. No thread may still be reading it. */
void cks_cluster_free(cks_cluster_h map);

/**
 * Check that the map can hold stripes of `k` data and `m` parity chunks:
 * k in 1..CKS_PLACE_K_MAX, m in 1..CKS_PLACE_M_MAX, and at least k + m
 * distinct nodes (placement puts at most one chunk of a stripe on a node).
 * CKS_ERR_INVALID_PARAM with a message otherwise. Racks fewer than k + m are
 * allowed (chunks then share racks as evenly as possible; see cks_place()).
 */
cks_status_t cks_cluster_check(cks_cluster_h map, unsigned k, unsigned m, char *err,
                               size_t err_len);

/** The map's epoch. */
uint64_t cks_cluster_epoch(cks_cluster_h map);

/** Number of servers (1 .. CKS_CLUSTER_MAX_SERVERS). */
size_t cks_cluster_nservers(cks_cluster_h map);

/** Number of distinct node labels. */
size_t cks_cluster_nnodes(cks_cluster_h map);

/** Number of distinct rack labels. */
size_t cks_cluster_nracks(cks_cluster_h map);

/** The server at position `pos`, or NULL when pos >= nservers. The entry
 *  lives as long as the map. */
const cks_cluster_server_t *cks_cluster_server(cks_cluster_h map, size_t pos);

/** Position of the server with id `id`; CKS_ERR_INVALID_PARAM when the map
 *  has no such server. */
cks_status_t cks_cluster_find(cks_cluster_h map, uint16_t id, size_t *pos_p);

/* ======================================================================
 * placement (metadata/placement.c)
 *
 * The placement group of a stripe: k + m servers of the map, chunk i on
 * out[i] (0 .. k-1 data, k .. k+m-1 parity); out[0] is the primary. The
 * function is part of the storage format: every client and server must
 * compute the same groups for the same map, on any platform and in any
 * release, or data cannot be found. Changing it moves every chunk.
 *
 * Definition (docs/CLUSTER_MAP.md has it in full). Integers are little-endian.
 *   g = XXH64(le32(job_len) job le32(key_len) key le64(stripe), seed 0)
 *   w(slot, server) = XXH64(le64(g) le32(server id) le32(slot), seed 0)
 * Let L = the live servers (not marked down), their nodes and racks the live
 * nodes and racks, W = k + m, D = min(W, live racks), and C the smallest cap
 * such that sum over live racks of min(C, live nodes of the rack) >= W.
 * Slots 0 .. W-1 are filled in order; slot s takes, among live servers
 * that are eligible, the one with the highest w(s, server), ties to the lower
 * id. A server is eligible when its node holds no chunk of this stripe yet,
 * its rack holds fewer than C, and, if its rack already holds one, the slots
 * left after this one still suffice to reach D distinct racks.
 *
 * Consequences (tested):
 *  - at most one chunk per node; chunks on exactly D distinct racks, so on
 *    distinct racks whenever there are at least W live racks; no rack holds
 *    more than C, the least possible;
 *  - each slot is a rendezvous choice of its own, so load spreads evenly and
 *    a membership change moves few chunks: when a server joins or leaves (or
 *    goes down) and D and C stay the same, a group changes only if that
 *    server is in its new (old) group, its slots before that server's slot
 *    stay the same, and usually only that one slot changes;
 *  - placing with a down bitmap gives the same servers as placing on the map
 *    without the down servers: the deterministic fallback.
 * ====================================================================== */

/** Largest k (data chunks per stripe). */
#define CKS_PLACE_K_MAX 16u
/** Largest m (parity chunks per stripe). */
#define CKS_PLACE_M_MAX 4u
/** Largest k + m: the length of a placement group. */
#define CKS_PLACE_WIDTH_MAX (CKS_PLACE_K_MAX + CKS_PLACE_M_MAX)
/** Bytes of a down bitmap for `n` servers. */
#define CKS_PLACE_DOWN_BYTES(n) (((size_t)(n) + 7) / 8)

/** Mark position `pos` down in a bitmap of CKS_PLACE_DOWN_BYTES(n) bytes:
 *  bit (pos % 8) of byte (pos / 8), least significant bit first. */
static inline void cks_place_down_set(uint8_t *down, size_t pos)
{
    down[pos / 8] |= (uint8_t)(1u << (pos % 8));
}

/** Nonzero when position `pos` is marked down; a NULL bitmap marks none. */
static inline int cks_place_down_test(const uint8_t *down, size_t pos)
{
    return (down != NULL) && ((down[pos / 8] >> (pos % 8)) & 1u);
}

/**
 * XXH64 (xxHash, 64-bit variant, as published by Yann Collet) of `len` bytes
 * at `data`. The hash under cks_place(); exposed so that tests and tools can
 * check it against the reference vectors. Not a cryptographic hash.
 */
uint64_t cks_place_hash64(const void *data, size_t len, uint64_t seed);

/**
 * Placement group of stripe `stripe` of object (`job`, `key`): writes k + m
 * server positions to out[0 .. k+m-1] (chunk i on out[i], out[0] the
 * primary), as defined above. `down` is NULL or a bitmap of
 * CKS_PLACE_DOWN_BYTES(nservers) bytes (see cks_place_down_set()); servers
 * marked there are skipped. Pure: no allocation, no lock, no I/O; safe from
 * any number of threads. Cost: (k + m) x nservers short hashes.
 *
 * Returns CKS_ERR_INVALID_PARAM for NULL pointers, an empty job or key, k or
 * m out of range, or a map with fewer than k + m nodes (cks_cluster_check()
 * refuses those maps); CKS_ERR_KEY_TOO_LONG when job_len > CKS_JOB_MAX_LEN
 * or key_len > CKS_KEY_MAX_LEN; CKS_ERR_UNREACHABLE when fewer than k + m
 * nodes have a live server (logged at debug level only: the caller reports
 * it with its context). `out` is written only on CKS_OK.
 */
cks_status_t cks_place(cks_cluster_h map, const char *job, size_t job_len,
                       const char *key, size_t key_len, uint64_t stripe, unsigned k,
                       unsigned m, const uint8_t *down, uint16_t *out);

/**
 * Coordinator of (job, version): the first member of the placement group of
 * the reserved key ".version-coordinator" at stripe `version` (k = m = 1,
 * no servers excluded). Every client and server computes the same. Returns
 * a server position (0 when the map is unusable).
 */
static inline size_t cks_place_coordinator(cks_cluster_h map, const char *job, size_t job_len,
                                           uint64_t version)
{
    static const char key[] = ".version-coordinator";
    uint16_t group[2];
    if (cks_place(map, job, job_len, key, sizeof(key) - 1, version, 1, 1, NULL, group) !=
        CKS_OK) {
        return 0;
    }
    return group[0];
}

/** Most coordinator candidates of a version: enough for CKS_PLACE_M_MAX down. */
#define CKS_COORD_CANDIDATES_MAX (CKS_PLACE_M_MAX + 1u)

/**
 * Coordinator candidates of (job, version), in the order they take over:
 * out[0] is cks_place_coordinator(); the next ones are the servers a
 * placement group of that key adds on other nodes (one per node, as many as
 * the map has nodes, at most CKS_COORD_CANDIDATES_MAX and `max`). A version
 * is coordinated by the first candidate its beginning client reaches that
 * wins a majority of the servers' grants (server/coord.c). Returns how many
 * (1 when the map is unusable: out[0] = 0).
 */
static inline size_t cks_place_coordinators(cks_cluster_h map, const char *job, size_t job_len,
                                            uint64_t version, uint16_t *out, size_t max)
{
    static const char key[] = ".version-coordinator";
    uint16_t group[CKS_PLACE_WIDTH_MAX];
    size_t n = CKS_MIN(CKS_MIN(cks_cluster_nnodes(map), (size_t)CKS_COORD_CANDIDATES_MAX), max);

    if (n >= 2 && cks_place(map, job, job_len, key, sizeof(key) - 1, version, 1,
                            (unsigned)(n - 1), NULL, group) == CKS_OK) {
        memcpy(out, group, n * sizeof(*out));
        return n;
    }
    out[0] = (uint16_t)cks_place_coordinator(map, job, job_len, version);
    return 1;
}


/* ---- durable tier: the on-disk format of a flushed version ---------------
 * A flushed version is a directory DIR/<job>/<version>/ (the job name with
 * every byte outside [A-Za-z0-9_-], and a leading '.', written %XX; the
 * version as 20 decimal digits) holding, for each server that wrote chunks,
 * server-<id>.chunks (the chunk bytes, back to back) and server-<id>.index
 * (one line per chunk: where it lies in the .chunks file and its CRC-64),
 * and MANIFEST (the version record, the stripe geometry, the servers whose
 * files belong to it, and every object with its tags, size, CRC-64 and
 * source version). It is written as DIR/<job>/.<version>.tmp-<nonce>/ and
 * published by rename once complete. Text formats, one record a line; keys
 * and the job are written in hex (docs/ARCHITECTURE.md, "Durable tier").
 */

#define CKS_MD_FLUSH_FORMAT 1u

/** One chunk in a server's index file. */
typedef struct {
    char key[CKS_KEY_MAX_LEN + 1];
    uint32_t key_len;
    uint64_t source;  /**< the version whose chunk this is */
    uint64_t stripe;
    uint32_t idx;     /**< 0..k-1 data, k..k+m-1 parity */
    uint64_t offset;  /**< in the server's .chunks file */
    uint64_t len;
    uint64_t crc64;   /**< of the chunk's bytes (as recorded when written) */
} cks_md_flush_chunk_t;

/** A flushed version's manifest. */
typedef struct {
    char job[CKS_JOB_MAX_LEN + 1];
    uint32_t job_len;
    cks_md_version_t v;     /**< version, parent, state, geometry, ... */
    uint16_t *servers;      /**< ids whose files belong to it */
    size_t nservers;
    cks_md_object_t *objs;  /**< the manifest (arena fields unused) */
    size_t nobjs;
} cks_md_flush_manifest_t;

/** DIR/<encoded job> into out (len bytes); CKS_ERR_INVALID_PARAM when it
 *  does not fit. */
cks_status_t cks_md_flush_job_dir(const char *dir, const char *job, size_t job_len,
                                  char *out, size_t len);
/** Name of a published version's directory ("%020llu") into out. */
void cks_md_flush_version_name(uint64_t version, char *out, size_t len);
/** Parse a published version's directory name; 0 when it is not one. */
int cks_md_flush_version_parse(const char *name, uint64_t *version_p);

/** Write the index's first line / one chunk / its last line (count). */
cks_status_t cks_md_flush_index_head(FILE *f);
cks_status_t cks_md_flush_index_chunk(FILE *f, const cks_md_flush_chunk_t *c);
cks_status_t cks_md_flush_index_end(FILE *f, uint64_t count);
/** Read a whole index file: *chunks_p (malloc'd, caller frees) and *n_p.
 *  A file that does not parse, or lacks its end line, is CKS_ERR_IO with
 *  the reason in err. */
cks_status_t cks_md_flush_index_read(const char *path, cks_md_flush_chunk_t **chunks_p,
                                     size_t *n_p, char *err, size_t err_len);

/** Write a manifest (objects in the order given). */
cks_status_t cks_md_flush_manifest_write(FILE *f, const cks_md_flush_manifest_t *m);
/** Read one; CKS_ERR_IO (with err) when it does not parse or is cut short,
 *  CKS_ERR_UNSUPPORTED for another format. Free with
 *  cks_md_flush_manifest_free(). */
cks_status_t cks_md_flush_manifest_read(const char *path, cks_md_flush_manifest_t *m,
                                        char *err, size_t err_len);
void cks_md_flush_manifest_free(cks_md_flush_manifest_t *m);

/** Hash key of a chunk (key, source, stripe, idx) into buf (at least
 *  CKS_MD_FLUSH_HKEY_MAX bytes); returns its length. */
#define CKS_MD_FLUSH_HKEY_MAX (CKS_KEY_MAX_LEN + 1 + 8 + 8 + 1)
size_t cks_md_flush_hkey(const char *key, size_t key_len, uint64_t source, uint64_t stripe,
                         uint32_t idx, uint8_t *buf);

#ifdef __cplusplus
}
#endif
#endif
