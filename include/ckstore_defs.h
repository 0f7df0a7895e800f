/*
 * ckstore shared definitions: status codes (one X-macro list, from which the
 * enum and the strings are generated) and the enums that the client API, the
 * wire protocol and the metadata store all use. Included by ckstore.h (the
 * public API); kept in its own file so that the internal libraries can use
 * them without the client API.
 *
 * OK = 0, INPROGRESS = 1, errors negative and grouped by blast radius:
 *   -1..-99    the request (bad input, unknown names, wrong state)
 *   -100..-199 the connection (timeouts, peer gone, protocol mismatch)
 *   -200..-299 the server (resources, internal faults)
 *   -300..-399 data loss (checksums, lost chunks)
 * Codes are never renumbered; new ones are appended inside their group.
 */
#ifndef CKSTORE_DEFS_H
#define CKSTORE_DEFS_H

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CKS_DEFS_API
#define CKS_DEFS_API __attribute__((visibility("default")))
#endif

#define CKS_STATUS_LIST(_) \
    _(CKS_OK,                     0, "success") \
    _(CKS_INPROGRESS,             1, "operation in progress") \
    _(CKS_ERR_INVALID_PARAM,     -1, "invalid parameter") \
    _(CKS_ERR_NO_MEMORY,         -2, "out of memory") \
    _(CKS_ERR_KEY_TOO_LONG,      -3, "key too long") \
    _(CKS_ERR_NO_SUCH_JOB,       -4, "no such job") \
    _(CKS_ERR_NO_SUCH_VERSION,   -5, "no such version") \
    _(CKS_ERR_NO_SUCH_KEY,       -6, "no such object key") \
    _(CKS_ERR_OUT_OF_RANGE,      -7, "byte range past the end of the object") \
    _(CKS_ERR_DUPLICATE_KEY,     -8, "object key already written in this version") \
    _(CKS_ERR_VERSION_EXISTS,    -9, "version already exists") \
    _(CKS_ERR_VERSION_NOT_OPEN, -10, "version is not open for writing") \
    _(CKS_ERR_NOT_RESTORABLE,   -11, "version is not sealed and cannot be restored") \
    _(CKS_ERR_BAD_MESSAGE,      -12, "malformed message") \
    _(CKS_ERR_UNSUPPORTED,      -13, "unsupported message type, version or feature") \
    _(CKS_ERR_CANCELED,         -14, "operation canceled") \
    _(CKS_ERR_BAD_STATE,        -15, "handle is in a failed state; only destroy is allowed") \
    _(CKS_ERR_BUSY,             -16, "too many requests in flight") \
    _(CKS_ERR_NAME_INVALID,     -17, "job or key name is empty or not valid UTF-8") \
    _(CKS_ERR_NOT_COORDINATOR,  -18, "another server coordinates this version") \
    _(CKS_ERR_TIMEOUT,         -100, "timed out waiting for the peer") \
    _(CKS_ERR_UNREACHABLE,     -101, "peer unreachable") \
    _(CKS_ERR_CONN_LOST,       -102, "connection lost") \
    _(CKS_ERR_PROTOCOL,        -103, "protocol version mismatch") \
    _(CKS_ERR_AUTH,            -104, "authentication failed") \
    _(CKS_ERR_TRANSPORT,       -105, "transport error") \
    _(CKS_ERR_NO_QUORUM,       -106, "too few servers reachable to agree on a coordinator") \
    _(CKS_ERR_ARENA_FULL,      -200, "server arena full") \
    _(CKS_ERR_METADATA_FULL,   -201, "server metadata store full") \
    _(CKS_ERR_IO,              -202, "server I/O error") \
    _(CKS_ERR_INTERNAL,        -203, "internal error") \
    _(CKS_ERR_SHUTTING_DOWN,   -204, "server is shutting down") \
    _(CKS_ERR_CRC_MISMATCH,    -300, "checksum mismatch") \
    _(CKS_ERR_DATA_LOST,       -301, "data lost")

/** Status of every ckstore call that can fail. */
typedef enum {
#define CKS_STATUS_ENUM_(name, value, str) name = value,
    CKS_STATUS_LIST(CKS_STATUS_ENUM_)
#undef CKS_STATUS_ENUM_
} cks_status_t;

/** State of a version. Only SEALED or later is restorable. Values are stored
 *  in metadata and sent on the wire: never renumber. */
typedef enum {
    CKS_VSTATE_OPEN      = 0, /**< ranks are writing */
    CKS_VSTATE_SEALED    = 1, /**< every object stored on its primary */
    CKS_VSTATE_PROTECTED = 2, /**< every stripe has full redundancy */
    CKS_VSTATE_DEGRADED  = 3, /**< chunks lost and not yet rebuilt */
    CKS_VSTATE_ABORTED   = 4, /**< a writer gave up, or the version was cut short */
} cks_vstate_t;

/** Kind tag of an object. Stored and sent on the wire: never renumber. */
typedef enum {
    CKS_KIND_DENSE     = 0,
    CKS_KIND_EXPERT    = 1,
    CKS_KIND_OPTIMIZER = 2,
    CKS_KIND_RNG       = 3,
    CKS_KIND_OTHER     = 4,
} cks_kind_t;

/** Memory type of a caller's buffer; never guessed: a buffer whose type is
 *  not given (its params' MEM_TYPE bit unset) is host memory. */
typedef enum {
    CKS_MEM_HOST = 0, /**< ordinary host memory */
    CKS_MEM_CUDA = 1, /**< CUDA device memory (see "device memory" in ckstore.h) */
    CKS_MEM_AUTO = 2, /**< "unset": the library asks the CUDA runtime
                           (cudaPointerGetAttributes) at the call; host memory
                           when the build or the machine has no CUDA device */
} cks_mem_type_t;

/** "OPEN", "SEALED", ...; never NULL. */
CKS_DEFS_API const char *cks_vstate_string(cks_vstate_t state);
/** "dense", "expert", ...; never NULL. */
CKS_DEFS_API const char *cks_kind_string(cks_kind_t kind);

/** Human-readable text of a status; never NULL (unknown codes get a fixed text). */
CKS_DEFS_API const char *cks_status_string(cks_status_t status);

/** Symbolic name of a status ("CKS_ERR_TIMEOUT"); never NULL. */
CKS_DEFS_API const char *cks_status_name(cks_status_t status);

#ifdef __cplusplus
}
#endif
#endif
