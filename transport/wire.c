/*
 * DESIGN: the wire codec. Owns the message table's field descriptors and the
 * only code that reads untrusted control bytes.
 *
 * Every body is a msgpack array whose elements are the fields of the
 * message's struct, in order; every field is a scalar (u32, i32, u64) or a
 * bounded string. Decoding is two steps: a bounds walk over the raw bytes
 * (no allocation: every declared length and count is checked against the
 * bytes that remain, and containers inside a body are refused), then
 * msgpack-c builds the objects and each is checked against its descriptor.
 * Strings are not copied: they point into the caller's buffer.
 *
 * Pure functions; any thread. Never allocates on the pack path.
 */
#include "cks_tp.h"

#include <msgpack.h>
#include <stdio.h>
#include <string.h>

typedef enum { F_U32, F_I32, F_U64, F_STR, F_BIN } cks_wire_ftype_t;

typedef struct {
    uint8_t type;
    uint16_t off;
    uint16_t max; /* strings: longest accepted, in bytes */
} cks_wire_field_t;

typedef struct {
    const cks_wire_field_t *fields;
    uint8_t nfields;
    uint8_t valid;
} cks_wire_desc_t;

#define FD_U32(T, f)      {F_U32, offsetof(T, f), 0}
#define FD_I32(T, f)      {F_I32, offsetof(T, f), 0}
#define FD_U64(T, f)      {F_U64, offsetof(T, f), 0}
#define FD_STR(T, f, max) {F_STR, offsetof(T, f), (max)}
#define FD_BIN(T, f, max) {F_BIN, offsetof(T, f), (max)}
#define FD_REPLY(T)       FD_I32(T, status), FD_STR(T, msg, CKS_MSG_MAX_LEN)

#define FD_VERSION_ENTRY(T, p) \
    FD_U64(T, p version), FD_U64(T, p parent), FD_U32(T, p state), \
    FD_U32(T, p nranks), FD_U64(T, p created_ns), FD_U64(T, p sealed_ns), \
    FD_U64(T, p nobjects), FD_U64(T, p bytes), FD_U32(T, p k), FD_U32(T, p m), \
    FD_U64(T, p chunk_size), FD_U32(T, p redundancy), FD_U64(T, p missing)
#define FD_OBJECT_ENTRY(T, p) \
    FD_STR(T, p key, CKS_KEY_MAX_LEN), FD_U32(T, p kind), FD_I32(T, p layer), \
    FD_I32(T, p expert), FD_I32(T, p rank), FD_U64(T, p size), FD_U64(T, p crc64), \
    FD_U64(T, p source)

static const cks_wire_field_t fd_status[] = {FD_REPLY(cks_msg_status_t)};
static const cks_wire_field_t fd_hello[]  = {
    FD_STR(cks_msg_hello_t, name, CKS_WIRE_MAX_NAME),
    FD_BIN(cks_msg_hello_t, addr, CKS_WIRE_MAX_ADDR),
    FD_BIN(cks_msg_hello_t, nonce, CKS_WIRE_NONCE_LEN),
    FD_STR(cks_msg_hello_t, job, CKS_JOB_MAX_LEN)};
static const cks_wire_field_t fd_auth[] = {
    FD_BIN(cks_msg_auth_t, proof, CKS_WIRE_NONCE_LEN),
    FD_BIN(cks_msg_auth_t, addr, CKS_WIRE_MAX_ADDR)};
static const cks_wire_field_t fd_auth_reply[] = {
    FD_REPLY(cks_msg_auth_reply_t), FD_BIN(cks_msg_auth_reply_t, addr, CKS_WIRE_MAX_ADDR),
    FD_BIN(cks_msg_auth_reply_t, proof, CKS_WIRE_NONCE_LEN)};
static const cks_wire_field_t fd_mem_map[] = {FD_U64(cks_msg_mem_map_t, length)};
static const cks_wire_field_t fd_flush[]   = {
    FD_STR(cks_msg_flush_t, job, CKS_JOB_MAX_LEN), FD_U64(cks_msg_flush_t, version),
    FD_STR(cks_msg_flush_t, dir, CKS_WIRE_MAX_PATH), FD_U64(cks_msg_flush_t, nonce)};
static const cks_wire_field_t fd_hello_reply[] = {
    FD_REPLY(cks_msg_hello_reply_t),
    FD_STR(cks_msg_hello_reply_t, name, CKS_WIRE_MAX_NAME),
    FD_BIN(cks_msg_hello_reply_t, addr, CKS_WIRE_MAX_ADDR),
    FD_BIN(cks_msg_hello_reply_t, nonce, CKS_WIRE_NONCE_LEN),
    FD_U64(cks_msg_hello_reply_t, arena_size),
    FD_U64(cks_msg_hello_reply_t, arena_used),
    FD_U64(cks_msg_hello_reply_t, enc_bytes),
    FD_U64(cks_msg_hello_reply_t, enc_ns),
    FD_U64(cks_msg_hello_reply_t, enc_job_ns)};
static const cks_wire_field_t fd_version_begin[] = {
    FD_STR(cks_msg_version_begin_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_version_begin_t, version), FD_U64(cks_msg_version_begin_t, parent),
    FD_U32(cks_msg_version_begin_t, nranks), FD_U32(cks_msg_version_begin_t, k),
    FD_U32(cks_msg_version_begin_t, m), FD_U64(cks_msg_version_begin_t, chunk_size),
    FD_U32(cks_msg_version_begin_t, retain), FD_U32(cks_msg_version_begin_t, timeout_s),
    FD_U32(cks_msg_version_begin_t, member_ms)};
static const cks_wire_field_t fd_version_seal[] = {
    FD_STR(cks_msg_version_seal_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_version_seal_t, version), FD_U64(cks_msg_version_seal_t, nobjects),
    FD_U32(cks_msg_version_seal_t, rank), FD_U64(cks_msg_version_seal_t, digest),
    FD_BIN(cks_msg_version_seal_t, primaries,
           CKS_WIRE_MAX_SEAL_PRIMARIES * CKS_WIRE_SEAL_PRIMARY_LEN)};
static const cks_wire_field_t fd_version_ref[] = {
    FD_STR(cks_msg_version_ref_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_version_ref_t, version)};
static const cks_wire_field_t fd_version_hold[] = {
    FD_STR(cks_msg_version_hold_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_version_hold_t, version), FD_U64(cks_msg_version_hold_t, holder),
    FD_U32(cks_msg_version_hold_t, lease_ms)};
static const cks_wire_field_t fd_seal_reply[] = {
    FD_REPLY(cks_msg_seal_reply_t), FD_U64(cks_msg_seal_reply_t, nobjects),
    FD_U64(cks_msg_seal_reply_t, bytes)};
static const cks_wire_field_t fd_put[] = {
    FD_STR(cks_msg_put_t, job, CKS_JOB_MAX_LEN), FD_U64(cks_msg_put_t, version),
    FD_STR(cks_msg_put_t, key, CKS_KEY_MAX_LEN), FD_U32(cks_msg_put_t, kind),
    FD_I32(cks_msg_put_t, layer), FD_I32(cks_msg_put_t, expert),
    FD_I32(cks_msg_put_t, rank), FD_U64(cks_msg_put_t, size), FD_U32(cks_msg_put_t, k),
    FD_U32(cks_msg_put_t, m), FD_U64(cks_msg_put_t, chunk_size),
    FD_U32(cks_msg_put_t, member_ms)};
static const cks_wire_field_t fd_put_part[] = {
    FD_STR(cks_msg_put_part_t, job, CKS_JOB_MAX_LEN), FD_U64(cks_msg_put_part_t, version),
    FD_STR(cks_msg_put_part_t, key, CKS_KEY_MAX_LEN), FD_U64(cks_msg_put_part_t, offset),
    FD_U32(cks_msg_put_part_t, cancel)};
static const cks_wire_field_t fd_get[] = {
    FD_STR(cks_msg_get_t, job, CKS_JOB_MAX_LEN), FD_U64(cks_msg_get_t, version),
    FD_STR(cks_msg_get_t, key, CKS_KEY_MAX_LEN), FD_U64(cks_msg_get_t, offset),
    FD_U64(cks_msg_get_t, length)};
static const cks_wire_field_t fd_get_reply[] = {
    FD_REPLY(cks_msg_get_reply_t), FD_U64(cks_msg_get_reply_t, size),
    FD_U64(cks_msg_get_reply_t, crc64), FD_U64(cks_msg_get_reply_t, offset),
    FD_U64(cks_msg_get_reply_t, length)};
static const cks_wire_field_t fd_version_stat[] = {
    FD_STR(cks_msg_version_stat_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_version_stat_t, version), FD_U32(cks_msg_version_stat_t, latest)};
static const cks_wire_field_t fd_version_stat_reply[] = {
    FD_REPLY(cks_msg_version_stat_reply_t),
    FD_VERSION_ENTRY(cks_msg_version_stat_reply_t, v.)};
static const cks_wire_field_t fd_version_list[] = {
    FD_STR(cks_msg_version_list_t, job, CKS_JOB_MAX_LEN),
    FD_U32(cks_msg_version_list_t, has_after), FD_U64(cks_msg_version_list_t, after),
    FD_U32(cks_msg_version_list_t, max)};
static const cks_wire_field_t fd_list_reply[] = {
    FD_REPLY(cks_msg_list_reply_t), FD_U32(cks_msg_list_reply_t, count),
    FD_U32(cks_msg_list_reply_t, more)};
static const cks_wire_field_t fd_object_stat[] = {
    FD_STR(cks_msg_object_stat_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_object_stat_t, version),
    FD_STR(cks_msg_object_stat_t, key, CKS_KEY_MAX_LEN)};
static const cks_wire_field_t fd_object_stat_reply[] = {
    FD_REPLY(cks_msg_object_stat_reply_t),
    FD_OBJECT_ENTRY(cks_msg_object_stat_reply_t, o.)};
static const cks_wire_field_t fd_object_list[] = {
    FD_STR(cks_msg_object_list_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_object_list_t, version),
    FD_STR(cks_msg_object_list_t, after, CKS_KEY_MAX_LEN),
    FD_U32(cks_msg_object_list_t, max)};
static const cks_wire_field_t fd_job_list[] = {
    FD_STR(cks_msg_job_list_t, after, CKS_JOB_MAX_LEN), FD_U32(cks_msg_job_list_t, max)};

static const cks_wire_field_t fd_chunk_put[] = {
    FD_STR(cks_msg_chunk_put_t, job, CKS_JOB_MAX_LEN), FD_U64(cks_msg_chunk_put_t, version),
    FD_STR(cks_msg_chunk_put_t, key, CKS_KEY_MAX_LEN), FD_U64(cks_msg_chunk_put_t, stripe),
    FD_U32(cks_msg_chunk_put_t, idx), FD_U64(cks_msg_chunk_put_t, crc64),
    FD_U64(cks_msg_chunk_put_t, guard)};
static const cks_wire_field_t fd_chunk_get[] = {
    FD_STR(cks_msg_chunk_get_t, job, CKS_JOB_MAX_LEN), FD_U64(cks_msg_chunk_get_t, version),
    FD_STR(cks_msg_chunk_get_t, key, CKS_KEY_MAX_LEN), FD_U64(cks_msg_chunk_get_t, stripe),
    FD_U32(cks_msg_chunk_get_t, idx), FD_U64(cks_msg_chunk_get_t, offset),
    FD_U64(cks_msg_chunk_get_t, length)};
static const cks_wire_field_t fd_chunk_get_reply[] = {
    FD_REPLY(cks_msg_chunk_get_reply_t), FD_U64(cks_msg_chunk_get_reply_t, crc64),
    FD_U64(cks_msg_chunk_get_reply_t, chunk_len), FD_U64(cks_msg_chunk_get_reply_t, offset),
    FD_U64(cks_msg_chunk_get_reply_t, length)};
static const cks_wire_field_t fd_object_done[] = {
    FD_STR(cks_msg_object_done_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_object_done_t, version), FD_I32(cks_msg_object_done_t, status),
    FD_OBJECT_ENTRY(cks_msg_object_done_t, o.), FD_U32(cks_msg_object_done_t, k),
    FD_U32(cks_msg_object_done_t, m), FD_U64(cks_msg_object_done_t, chunk_size),
    FD_U32(cks_msg_object_done_t, missing), FD_U32(cks_msg_object_done_t, redundancy),
    FD_STR(cks_msg_object_done_t, why, CKS_MSG_MAX_LEN),
    FD_U32(cks_msg_object_done_t, primary), FD_U32(cks_msg_object_done_t, backup)};
static const cks_wire_field_t fd_version_commit[] = {
    FD_STR(cks_msg_version_commit_t, job, CKS_JOB_MAX_LEN),
    FD_VERSION_ENTRY(cks_msg_version_commit_t, v.), FD_U32(cks_msg_version_commit_t, last),
    FD_U32(cks_msg_version_commit_t, retain)};
static const cks_wire_field_t fd_version_drop[] = {
    FD_STR(cks_msg_version_drop_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_version_drop_t, version), FD_U32(cks_msg_version_drop_t, state),
    FD_U32(cks_msg_version_drop_t, retain)};

static const cks_wire_field_t fd_version_claim[] = {
    FD_STR(cks_msg_version_claim_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_version_claim_t, version), FD_U32(cks_msg_version_claim_t, coord),
    FD_U32(cks_msg_version_claim_t, op), FD_U32(cks_msg_version_claim_t, ttl_s),
    FD_U32(cks_msg_version_claim_t, round), FD_U64(cks_msg_version_claim_t, parent),
    FD_U32(cks_msg_version_claim_t, nranks), FD_U32(cks_msg_version_claim_t, k),
    FD_U32(cks_msg_version_claim_t, m), FD_U64(cks_msg_version_claim_t, chunk_size),
    FD_U32(cks_msg_version_claim_t, retain), FD_U32(cks_msg_version_claim_t, member_ms)};

static const cks_wire_field_t fd_sync_list[] = {
    FD_U32(cks_msg_sync_list_t, what), FD_STR(cks_msg_sync_list_t, job, CKS_JOB_MAX_LEN),
    FD_U64(cks_msg_sync_list_t, version),
    FD_STR(cks_msg_sync_list_t, after_key, CKS_KEY_MAX_LEN),
    FD_U32(cks_msg_sync_list_t, has_after), FD_U64(cks_msg_sync_list_t, after),
    FD_U32(cks_msg_sync_list_t, max)};
static const cks_wire_field_t fd_sync_reply[] = {
    FD_REPLY(cks_msg_sync_reply_t), FD_U32(cks_msg_sync_reply_t, synced),
    FD_U32(cks_msg_sync_reply_t, count), FD_U32(cks_msg_sync_reply_t, more)};
static const cks_wire_field_t fd_repair_status[] = {
    FD_U32(cks_msg_repair_status_t, flags)};
static const cks_wire_field_t fd_repair_status_reply[] = {
    FD_REPLY(cks_msg_repair_status_reply_t), FD_U32(cks_msg_repair_status_reply_t, synced),
    FD_U32(cks_msg_repair_status_reply_t, id),
    FD_U64(cks_msg_repair_status_reply_t, chunks_left),
    FD_U64(cks_msg_repair_status_reply_t, bytes_left),
    FD_U64(cks_msg_repair_status_reply_t, chunks_done),
    FD_U64(cks_msg_repair_status_reply_t, bytes_done),
    FD_U64(cks_msg_repair_status_reply_t, chunks_sent),
    FD_U64(cks_msg_repair_status_reply_t, rate),
    FD_U64(cks_msg_repair_status_reply_t, rate_cap),
    FD_U64(cks_msg_repair_status_reply_t, decodes),
    FD_U64(cks_msg_repair_status_reply_t, decoded)};
static const cks_wire_field_t fd_stats[] = {FD_U32(cks_msg_stats_t, flags)};
static const cks_wire_field_t fd_stats_reply[] = {
    FD_REPLY(cks_msg_stats_reply_t), FD_U64(cks_msg_stats_reply_t, arena_size),
    FD_U64(cks_msg_stats_reply_t, arena_used), FD_U64(cks_msg_stats_reply_t, enc_bytes),
    FD_U64(cks_msg_stats_reply_t, enc_ns), FD_U64(cks_msg_stats_reply_t, enc_job_ns)};

/* page entries */
static const cks_wire_field_t fd_version_entry[] = {
    FD_VERSION_ENTRY(cks_msg_version_entry_t, )};
static const cks_wire_field_t fd_object_entry[] = {
    FD_OBJECT_ENTRY(cks_msg_object_entry_t, )};
static const cks_wire_field_t fd_job_entry[] = {
    FD_STR(cks_msg_job_entry_t, name, CKS_JOB_MAX_LEN)};

#define FD_TABLE(f) {f, CKS_ARRAY_SIZE(f), 1}

static const cks_wire_desc_t cks_wire_desc[CKS_MSG_LAST] = {
    [CKS_MSG_HELLO]              = FD_TABLE(fd_hello),
    [CKS_MSG_HELLO_REPLY]        = FD_TABLE(fd_hello_reply),
    [CKS_MSG_STATUS_REPLY]       = FD_TABLE(fd_status),
    [CKS_MSG_VERSION_BEGIN]      = FD_TABLE(fd_version_begin),
    [CKS_MSG_VERSION_SEAL]       = FD_TABLE(fd_version_seal),
    [CKS_MSG_SEAL_REPLY]         = FD_TABLE(fd_seal_reply),
    [CKS_MSG_VERSION_ABORT]      = FD_TABLE(fd_version_ref),
    [CKS_MSG_VERSION_DELETE]     = FD_TABLE(fd_version_ref),
    [CKS_MSG_PUT]                = FD_TABLE(fd_put),
    [CKS_MSG_PUT_PART]           = FD_TABLE(fd_put_part),
    [CKS_MSG_GET]                = FD_TABLE(fd_get),
    [CKS_MSG_GET_REPLY]          = FD_TABLE(fd_get_reply),
    [CKS_MSG_VERSION_STAT]       = FD_TABLE(fd_version_stat),
    [CKS_MSG_VERSION_STAT_REPLY] = FD_TABLE(fd_version_stat_reply),
    [CKS_MSG_VERSION_LIST]       = FD_TABLE(fd_version_list),
    [CKS_MSG_LIST_REPLY]         = FD_TABLE(fd_list_reply),
    [CKS_MSG_OBJECT_STAT]        = FD_TABLE(fd_object_stat),
    [CKS_MSG_OBJECT_STAT_REPLY]  = FD_TABLE(fd_object_stat_reply),
    [CKS_MSG_OBJECT_LIST]        = FD_TABLE(fd_object_list),
    [CKS_MSG_JOB_LIST]           = FD_TABLE(fd_job_list),
    [CKS_MSG_CHUNK_PUT]          = FD_TABLE(fd_chunk_put),
    [CKS_MSG_CHUNK_GET]          = FD_TABLE(fd_chunk_get),
    [CKS_MSG_CHUNK_GET_REPLY]    = FD_TABLE(fd_chunk_get_reply),
    [CKS_MSG_OBJECT_DONE]        = FD_TABLE(fd_object_done),
    [CKS_MSG_VERSION_COMMIT]     = FD_TABLE(fd_version_commit),
    [CKS_MSG_VERSION_DROP]       = FD_TABLE(fd_version_drop),
    [CKS_MSG_OBJECT_DELETE]      = FD_TABLE(fd_object_stat),
    [CKS_MSG_AUTH]               = FD_TABLE(fd_auth),
    [CKS_MSG_AUTH_REPLY]         = FD_TABLE(fd_auth_reply),
    [CKS_MSG_MEM_MAP]            = FD_TABLE(fd_mem_map),
    [CKS_MSG_VERSION_HOLD]       = FD_TABLE(fd_version_hold),
    [CKS_MSG_VERSION_CLAIM]      = FD_TABLE(fd_version_claim),
    [CKS_MSG_FLUSH_CHUNKS]       = FD_TABLE(fd_flush),
    [CKS_MSG_FLUSH_PUBLISH]      = FD_TABLE(fd_flush),
    [CKS_MSG_FLUSH_VERSION]      = FD_TABLE(fd_flush),
    [CKS_MSG_SYNC_LIST]          = FD_TABLE(fd_sync_list),
    [CKS_MSG_SYNC_REPLY]         = FD_TABLE(fd_sync_reply),
    [CKS_MSG_REPAIR_CHECK]       = FD_TABLE(fd_version_ref),
    [CKS_MSG_REPAIR_DONE]        = FD_TABLE(fd_version_ref),
    [CKS_MSG_REPAIR_STATUS]      = FD_TABLE(fd_repair_status),
    [CKS_MSG_REPAIR_STATUS_REPLY] = FD_TABLE(fd_repair_status_reply),
    [CKS_MSG_STATS]              = FD_TABLE(fd_stats),
    [CKS_MSG_STATS_REPLY]        = FD_TABLE(fd_stats_reply),
};

static const cks_wire_desc_t cks_wire_entry_desc[] = {
    [CKS_WIRE_ENTRY_VERSION] = FD_TABLE(fd_version_entry),
    [CKS_WIRE_ENTRY_OBJECT]  = FD_TABLE(fd_object_entry),
    [CKS_WIRE_ENTRY_JOB]     = FD_TABLE(fd_job_entry),
};

const char *cks_msg_name(unsigned type)
{
    switch (type) {
#define CKS_MSG_NAME_(name, id, ...) \
    case id: \
        return #name;
        CKS_MSG_LIST(CKS_MSG_NAME_)
#undef CKS_MSG_NAME_
    }
    return "UNKNOWN";
}

/* the scope column as flags, and as the body's job field */
#define CKS_MSG_SCOPE_OPEN     0u
#define CKS_MSG_SCOPE_JOB      CKS_MSG_F_SCOPED
#define CKS_MSG_SCOPE_NOJOB    CKS_MSG_F_SCOPED
#define CKS_MSG_GATE_PRE       CKS_MSG_F_PREAUTH
#define CKS_MSG_GATE_AUTHED    0u
#define CKS_MSG_JOB_OPEN(b, name)  NULL
#define CKS_MSG_JOB_JOB(b, name)   (&(b)->m_##name.job)
#define CKS_MSG_JOB_NOJOB(b, name) NULL

unsigned cks_msg_flags(unsigned type)
{
    switch (type) {
#define CKS_MSG_FLAGS_(name, id, type, dir, payload, rma, data, scope, auth, reply) \
    case id: \
        return (CKS_MSG_##reply == CKS_MSG_NONE ? CKS_MSG_F_REPLY : 0u) | \
               (dir[0] == 's' && dir[2] == 's' ? CKS_MSG_F_SERVER_ONLY : 0u) | \
               ((payload) ? CKS_MSG_F_PAYLOAD : 0u) | ((rma) ? CKS_MSG_F_RMA : 0u) | \
               ((data) ? CKS_MSG_F_DATA : 0u) | CKS_MSG_SCOPE_##scope | CKS_MSG_GATE_##auth;
        CKS_MSG_LIST(CKS_MSG_FLAGS_)
#undef CKS_MSG_FLAGS_
    }
    return 0;
}

unsigned cks_msg_reply(unsigned type)
{
    switch (type) {
#define CKS_MSG_REPLY_(name, id, type, dir, payload, rma, data, scope, auth, reply) \
    case id: \
        return CKS_MSG_##reply;
        CKS_MSG_LIST(CKS_MSG_REPLY_)
#undef CKS_MSG_REPLY_
    }
    return CKS_MSG_NONE;
}

int cks_msg_server_only(unsigned type)
{
    return (cks_msg_flags(type) & CKS_MSG_F_SERVER_ONLY) != 0;
}

cks_wire_str_t cks_wire_cstr(const char *s)
{
    cks_wire_str_t str = {s ? s : "", s ? (uint32_t)strlen(s) : 0};
    return str;
}

/* ---- packing ---------------------------------------------------------------- */

typedef struct {
    uint8_t *buf;
    size_t len;
    size_t off;
    int overflow;
} cks_wire_out_t;

static int cks_wire_out_write(void *data, const char *bytes, size_t len)
{
    cks_wire_out_t *out = data;
    if (len == 0) {
        return 0; /* an empty string's body: bytes may be NULL */
    }
    if (out->overflow || len > out->len - out->off) {
        out->overflow = 1;
        return -1;
    }
    memcpy(out->buf + out->off, bytes, len);
    out->off += len;
    return 0;
}

static cks_status_t cks_wire_fields_pack(const cks_wire_desc_t *desc, const void *body,
                                         cks_wire_out_t *out)
{
    msgpack_packer pk;
    const uint8_t *base = body;

    msgpack_packer_init(&pk, out, cks_wire_out_write);
    msgpack_pack_array(&pk, desc->nfields);
    for (unsigned i = 0; i < desc->nfields; i++) {
        const cks_wire_field_t *f = &desc->fields[i];
        const void *p             = base + f->off;
        switch (f->type) {
            case F_U32:
                msgpack_pack_uint32(&pk, *(const uint32_t *)p);
                break;
            case F_I32:
                msgpack_pack_int32(&pk, *(const int32_t *)p);
                break;
            case F_U64:
                msgpack_pack_uint64(&pk, *(const uint64_t *)p);
                break;
            case F_STR: {
                const cks_wire_str_t *s = p;
                if (s->len > f->max || (s->len > 0 && s->ptr == NULL)) {
                    return CKS_ERR_INVALID_PARAM;
                }
                msgpack_pack_str(&pk, s->len);
                msgpack_pack_str_body(&pk, s->ptr, s->len);
                break;
            }
            case F_BIN: {
                const cks_wire_str_t *s = p;
                if (s->len > f->max || (s->len > 0 && s->ptr == NULL)) {
                    return CKS_ERR_INVALID_PARAM;
                }
                msgpack_pack_bin(&pk, s->len);
                msgpack_pack_bin_body(&pk, s->ptr, s->len);
                break;
            }
        }
    }
    return out->overflow ? CKS_ERR_BAD_MESSAGE : CKS_OK;
}

static void cks_wire_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void cks_wire_be32(uint8_t *p, uint32_t v)
{
    cks_wire_be16(p, (uint16_t)(v >> 16));
    cks_wire_be16(p + 2, (uint16_t)v);
}

static uint32_t cks_wire_get_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

cks_status_t cks_wire_pack(unsigned type, uint32_t flags, uint64_t req_id,
                           const void *body, void *buf, size_t buf_len, size_t *len_p)
{
    cks_wire_out_t out;
    cks_status_t status;

    if (type >= CKS_MSG_LAST || !cks_wire_desc[type].valid || body == NULL ||
        buf_len < CKS_WIRE_HDR_LEN) {
        return CKS_ERR_INVALID_PARAM;
    }
    out.buf      = (uint8_t *)buf + CKS_WIRE_HDR_LEN;
    out.len      = CKS_MIN(buf_len - CKS_WIRE_HDR_LEN, CKS_WIRE_MAX_BODY);
    out.off      = 0;
    out.overflow = 0;
    status       = cks_wire_fields_pack(&cks_wire_desc[type], body, &out);
    if (status != CKS_OK) {
        return status;
    }
    uint8_t *h = buf;
    cks_wire_be32(h, CKS_WIRE_MAGIC);
    cks_wire_be16(h + 4, CKS_WIRE_PROTO);
    cks_wire_be16(h + 6, (uint16_t)type);
    cks_wire_be32(h + 8, flags);
    cks_wire_be32(h + 12, (uint32_t)out.off);
    cks_put_be64(h + 16, req_id);
    *len_p = CKS_WIRE_HDR_LEN + out.off;
    return CKS_OK;
}

cks_status_t cks_wire_entry_pack(cks_wire_entry_t entry, const void *e, void *buf,
                                 size_t buf_len, size_t *off)
{
    cks_wire_out_t out = {buf, buf_len, *off, 0};
    cks_status_t status;

    if ((unsigned)entry >= CKS_ARRAY_SIZE(cks_wire_entry_desc) || *off > buf_len) {
        return CKS_ERR_INVALID_PARAM;
    }
    status = cks_wire_fields_pack(&cks_wire_entry_desc[entry], e, &out);
    if (status == CKS_OK) {
        *off = out.off;
    }
    return status;
}

/* ---- decoding ------------------------------------------------------------- */

/*
 * Bounds walk over one flat array of `nfields` scalars/strings starting at
 * buf[*off]. Checks every length against what remains; refuses containers,
 * and any array whose count differs from the descriptor. No allocation.
 */
static cks_status_t cks_wire_walk(const uint8_t *buf, size_t len, size_t *off,
                                  unsigned nfields, const char **why)
{
    size_t p = *off;
    uint32_t count;

    if (p >= len) {
        *why = "empty body";
        return CKS_ERR_BAD_MESSAGE;
    }
    uint8_t b = buf[p++];
    if (b >= 0x90 && b <= 0x9f) {
        count = b & 0x0f;
    } else if (b == 0xdc && len - p >= 2) {
        count = ((uint32_t)buf[p] << 8) | buf[p + 1];
        p += 2;
    } else {
        *why = "body is not an array";
        return CKS_ERR_BAD_MESSAGE;
    }
    if (count != nfields) {
        *why = "wrong number of fields";
        return CKS_ERR_BAD_MESSAGE;
    }
    for (uint32_t i = 0; i < count; i++) {
        size_t need, extra = 0;
        if (p >= len) {
            *why = "truncated body";
            return CKS_ERR_BAD_MESSAGE;
        }
        b = buf[p++];
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            continue; /* fixint, nil, bool: the byte itself */
        } else if (b >= 0xa0 && b <= 0xbf) {
            extra = b & 0x1f;
            need  = 0;
        } else if (b >= 0xcc && b <= 0xd3) {
            need = (size_t)1 << ((b - 0xcc) & 3); /* u8..u64, i8..i64 */
        } else if (b == 0xca || b == 0xcb) {
            need = b == 0xca ? 4 : 8;
        } else if (b == 0xd9 || b == 0xc4) {
            need = 1;
        } else if (b == 0xda || b == 0xc5) {
            need = 2;
        } else if (b == 0xdb || b == 0xc6) {
            need = 4;
        } else {
            *why = "nested or unsupported msgpack element";
            return CKS_ERR_BAD_MESSAGE;
        }
        if (need > len - p) {
            *why = "truncated field";
            return CKS_ERR_BAD_MESSAGE;
        }
        if (b == 0xd9 || b == 0xc4) {
            extra = buf[p];
        } else if (b == 0xda || b == 0xc5) {
            extra = ((size_t)buf[p] << 8) | buf[p + 1];
        } else if (b == 0xdb || b == 0xc6) {
            extra = cks_wire_get_be32(buf + p);
        }
        p += need;
        if (extra > len - p) {
            *why = "string longer than the message";
            return CKS_ERR_BAD_MESSAGE;
        }
        p += extra;
    }
    *off = p;
    return CKS_OK;
}

static cks_status_t cks_wire_fields_unpack(const cks_wire_desc_t *desc,
                                           const uint8_t *buf, size_t len, size_t *off,
                                           void *body, const char **why)
{
    msgpack_unpacked u;
    size_t end = *off, start = *off;
    cks_status_t status;

    status = cks_wire_walk(buf, len, &end, desc->nfields, why);
    if (status != CKS_OK) {
        return status;
    }
    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, (const char *)buf, end, &start) !=
            MSGPACK_UNPACK_SUCCESS ||
        start != end || u.data.type != MSGPACK_OBJECT_ARRAY ||
        u.data.via.array.size != desc->nfields) {
        *why   = "msgpack decode failed";
        status = CKS_ERR_BAD_MESSAGE;
        goto out_destroy;
    }
    for (unsigned i = 0; i < desc->nfields; i++) {
        const cks_wire_field_t *f = &desc->fields[i];
        const msgpack_object *o   = &u.data.via.array.ptr[i];
        void *p                   = (uint8_t *)body + f->off;
        int is_pos = o->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
        int is_neg = o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
        status     = CKS_ERR_BAD_MESSAGE;
        switch (f->type) {
            case F_U64:
                if (!is_pos) {
                    *why = "field is not an unsigned integer";
                    goto out_destroy;
                }
                *(uint64_t *)p = o->via.u64;
                break;
            case F_U32:
                if (!is_pos || o->via.u64 > UINT32_MAX) {
                    *why = "field is not a 32-bit unsigned integer";
                    goto out_destroy;
                }
                *(uint32_t *)p = (uint32_t)o->via.u64;
                break;
            case F_I32:
                if (!((is_pos && o->via.u64 <= INT32_MAX) ||
                      (is_neg && o->via.i64 >= INT32_MIN))) {
                    *why = "field is not a 32-bit integer";
                    goto out_destroy;
                }
                *(int32_t *)p = is_pos ? (int32_t)o->via.u64 : (int32_t)o->via.i64;
                break;
            case F_STR: {
                cks_wire_str_t *s = p;
                if (o->type != MSGPACK_OBJECT_STR) {
                    *why = "field is not a string";
                    goto out_destroy;
                }
                if (o->via.str.size > f->max) {
                    *why = "string field too long";
                    goto out_destroy;
                }
                /* msgpack-c gives NULL for an empty str: point into buf */
                s->ptr = o->via.str.size ? o->via.str.ptr : (const char *)buf + *off;
                s->len = o->via.str.size;
                break;
            }
            case F_BIN: {
                cks_wire_str_t *s = p;
                if (o->type != MSGPACK_OBJECT_BIN) {
                    *why = "field is not binary";
                    goto out_destroy;
                }
                if (o->via.bin.size > f->max) {
                    *why = "binary field too long";
                    goto out_destroy;
                }
                s->ptr = o->via.bin.size ? o->via.bin.ptr : (const char *)buf + *off;
                s->len = o->via.bin.size;
                break;
            }
        }
    }
    *off   = end;
    status = CKS_OK;
out_destroy:
    msgpack_unpacked_destroy(&u);
    return status;
}

cks_status_t cks_wire_unpack(const void *buf, size_t len, cks_wire_hdr_t *hdr_p,
                             cks_msg_any_t *body_p, char *err, size_t err_len)
{
    const uint8_t *h = buf;
    const char *why  = NULL;
    cks_wire_hdr_t hdr;
    cks_status_t status;
    size_t off = 0;

    if (buf == NULL || len < CKS_WIRE_HDR_LEN) {
        why    = "message shorter than the header";
        status = CKS_ERR_BAD_MESSAGE;
        goto out_err;
    }
    if (cks_wire_get_be32(h) != CKS_WIRE_MAGIC) {
        why    = "bad magic";
        status = CKS_ERR_BAD_MESSAGE;
        goto out_err;
    }
    hdr.type     = (uint16_t)((h[6] << 8) | h[7]);
    hdr.flags    = cks_wire_get_be32(h + 8);
    hdr.body_len = cks_wire_get_be32(h + 12);
    hdr.req_id   = cks_get_be64(h + 16);
    if (((h[4] << 8) | h[5]) != CKS_WIRE_PROTO) {
        why    = "unsupported protocol version";
        status = CKS_ERR_PROTOCOL;
        goto out_err;
    }
    if (hdr.type >= CKS_MSG_LAST || !cks_wire_desc[hdr.type].valid) {
        why    = "unknown message type";
        status = CKS_ERR_UNSUPPORTED;
        goto out_err;
    }
    if (hdr.flags & ~(uint32_t)CKS_WIRE_F_KNOWN) {
        why    = "unknown header flags";
        status = CKS_ERR_BAD_MESSAGE;
        goto out_err;
    }
    if (hdr.body_len > CKS_WIRE_MAX_BODY || hdr.body_len != len - CKS_WIRE_HDR_LEN) {
        why    = "body length does not match the message";
        status = CKS_ERR_BAD_MESSAGE;
        goto out_err;
    }
    memset(body_p, 0, sizeof(*body_p));
    status = cks_wire_fields_unpack(&cks_wire_desc[hdr.type], h + CKS_WIRE_HDR_LEN,
                                    hdr.body_len, &off, body_p, &why);
    if (status != CKS_OK) {
        goto out_err;
    }
    if (off != hdr.body_len) {
        why    = "trailing bytes after the body";
        status = CKS_ERR_BAD_MESSAGE;
        goto out_err;
    }
    *hdr_p = hdr;
    return CKS_OK;

out_err:
    if (err != NULL && err_len > 0) {
        snprintf(err, err_len, "%s", why ? why : "bad message");
    }
    return status;
}

cks_status_t cks_wire_entry_unpack(cks_wire_entry_t entry, const void *buf, size_t len,
                                   size_t *off, void *e)
{
    const char *why = NULL;
    if ((unsigned)entry >= CKS_ARRAY_SIZE(cks_wire_entry_desc) || buf == NULL ||
        *off > len) {
        return CKS_ERR_BAD_MESSAGE;
    }
    return cks_wire_fields_unpack(&cks_wire_entry_desc[entry], buf, len, off, e, &why);
}

const cks_wire_str_t *cks_msg_client_job(unsigned type, const cks_msg_any_t *b)
{
    switch (type) {
#define CKS_MSG_CLIENT_JOB_(name, id, type, dir, payload, rma, data, scope, auth, reply) \
    case id: \
        return CKS_MSG_JOB_##scope(b, name);
        CKS_MSG_LIST(CKS_MSG_CLIENT_JOB_)
#undef CKS_MSG_CLIENT_JOB_
    }
    return NULL;
}
