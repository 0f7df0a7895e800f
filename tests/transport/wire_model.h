/*
 * A second description of the wire bodies, for test_wire and the wire fuzzer
 * (fuzz/fuzz_wire.c, fuzz/gen_corpus.c): for every message of CKS_MSG_LIST
 * and every list-page entry kind, its fields in wire order with their kind and
 * bound. Written from the structs of cks_tp.h, not from wire.c's descriptors,
 * so that a test can build messages by hand and compare decoded structs field
 * by field. test_wire checks that this model and the message table agree
 * (struct sizes, field counts and kinds).
 *
 * Also: fill a body with extreme, empty or random values (strings stored in
 * the sample), compare two decoded bodies, and check that string fields
 * point into the buffer they were decoded from. Header-only, no allocation.
 */
#ifndef CKS_WIRE_MODEL_H
#define CKS_WIRE_MODEL_H

#include "cks_tp.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { WM_U32, WM_I32, WM_U64, WM_STR, WM_BIN } wm_kind_t;

typedef struct {
    wm_kind_t kind;
    uint16_t off;
    uint16_t max; /* strings: longest accepted, in bytes */
    const char *name;
} wm_field_t;

typedef struct {
    const char *name;
    size_t size; /* sizeof the body struct */
    const wm_field_t *fields;
    unsigned nfields;
} wm_msg_t;

#define WM_MAX_FIELDS 20u
#define WM_NENTRIES   3u /* entry kinds: VERSION, OBJECT, JOB */

#define WM_U32_(T, f)      {WM_U32, offsetof(T, f), 0, #f}
#define WM_I32_(T, f)      {WM_I32, offsetof(T, f), 0, #f}
#define WM_U64_(T, f)      {WM_U64, offsetof(T, f), 0, #f}
#define WM_STR_(T, f, max) {WM_STR, offsetof(T, f), (max), #f}
#define WM_BIN_(T, f, max) {WM_BIN, offsetof(T, f), (max), #f}
#define WM_REPLY_(T)       WM_I32_(T, status), WM_STR_(T, msg, CKS_MSG_MAX_LEN)
#define WM_VENTRY_(T, p) \
    WM_U64_(T, p version), WM_U64_(T, p parent), WM_U32_(T, p state), \
    WM_U32_(T, p nranks), WM_U64_(T, p created_ns), WM_U64_(T, p sealed_ns), \
    WM_U64_(T, p nobjects), WM_U64_(T, p bytes), WM_U32_(T, p k), WM_U32_(T, p m), \
    WM_U64_(T, p chunk_size), WM_U32_(T, p redundancy), WM_U64_(T, p missing)
#define WM_OENTRY_(T, p) \
    WM_STR_(T, p key, CKS_KEY_MAX_LEN), WM_U32_(T, p kind), WM_I32_(T, p layer), \
    WM_I32_(T, p expert), WM_I32_(T, p rank), WM_U64_(T, p size), \
    WM_U64_(T, p crc64), WM_U64_(T, p source)

static const wm_field_t wm_f_hello[] = {
    WM_STR_(cks_msg_hello_t, name, CKS_WIRE_MAX_NAME),
    WM_BIN_(cks_msg_hello_t, addr, CKS_WIRE_MAX_ADDR),
    WM_BIN_(cks_msg_hello_t, nonce, CKS_WIRE_NONCE_LEN),
    WM_STR_(cks_msg_hello_t, job, CKS_JOB_MAX_LEN)};
static const wm_field_t wm_f_auth[] = {
    WM_BIN_(cks_msg_auth_t, proof, CKS_WIRE_NONCE_LEN),
    WM_BIN_(cks_msg_auth_t, addr, CKS_WIRE_MAX_ADDR)};
static const wm_field_t wm_f_auth_reply[] = {
    WM_REPLY_(cks_msg_auth_reply_t), WM_BIN_(cks_msg_auth_reply_t, addr, CKS_WIRE_MAX_ADDR),
    WM_BIN_(cks_msg_auth_reply_t, proof, CKS_WIRE_NONCE_LEN)};
static const wm_field_t wm_f_mem_map[] = {WM_U64_(cks_msg_mem_map_t, length)};
static const wm_field_t wm_f_flush[]   = {
    WM_STR_(cks_msg_flush_t, job, CKS_JOB_MAX_LEN), WM_U64_(cks_msg_flush_t, version),
    WM_STR_(cks_msg_flush_t, dir, CKS_WIRE_MAX_PATH), WM_U64_(cks_msg_flush_t, nonce)};
static const wm_field_t wm_f_hello_reply[] = {
    WM_REPLY_(cks_msg_hello_reply_t),
    WM_STR_(cks_msg_hello_reply_t, name, CKS_WIRE_MAX_NAME),
    WM_BIN_(cks_msg_hello_reply_t, addr, CKS_WIRE_MAX_ADDR),
    WM_BIN_(cks_msg_hello_reply_t, nonce, CKS_WIRE_NONCE_LEN),
    WM_U64_(cks_msg_hello_reply_t, arena_size),
    WM_U64_(cks_msg_hello_reply_t, arena_used),
    WM_U64_(cks_msg_hello_reply_t, enc_bytes),
    WM_U64_(cks_msg_hello_reply_t, enc_ns),
    WM_U64_(cks_msg_hello_reply_t, enc_job_ns)};
static const wm_field_t wm_f_status[] = {WM_REPLY_(cks_msg_status_t)};
static const wm_field_t wm_f_version_begin[] = {
    WM_STR_(cks_msg_version_begin_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_version_begin_t, version),
    WM_U64_(cks_msg_version_begin_t, parent),
    WM_U32_(cks_msg_version_begin_t, nranks), WM_U32_(cks_msg_version_begin_t, k),
    WM_U32_(cks_msg_version_begin_t, m), WM_U64_(cks_msg_version_begin_t, chunk_size),
    WM_U32_(cks_msg_version_begin_t, retain), WM_U32_(cks_msg_version_begin_t, timeout_s),
    WM_U32_(cks_msg_version_begin_t, member_ms)};
static const wm_field_t wm_f_version_seal[] = {
    WM_STR_(cks_msg_version_seal_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_version_seal_t, version),
    WM_U64_(cks_msg_version_seal_t, nobjects), WM_U32_(cks_msg_version_seal_t, rank),
    WM_U64_(cks_msg_version_seal_t, digest),
    WM_BIN_(cks_msg_version_seal_t, primaries,
            CKS_WIRE_MAX_SEAL_PRIMARIES * CKS_WIRE_SEAL_PRIMARY_LEN)};
static const wm_field_t wm_f_version_ref[] = {
    WM_STR_(cks_msg_version_ref_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_version_ref_t, version)};
static const wm_field_t wm_f_version_hold[] = {
    WM_STR_(cks_msg_version_hold_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_version_hold_t, version), WM_U64_(cks_msg_version_hold_t, holder),
    WM_U32_(cks_msg_version_hold_t, lease_ms)};
static const wm_field_t wm_f_seal_reply[] = {
    WM_REPLY_(cks_msg_seal_reply_t), WM_U64_(cks_msg_seal_reply_t, nobjects),
    WM_U64_(cks_msg_seal_reply_t, bytes)};
static const wm_field_t wm_f_put[] = {
    WM_STR_(cks_msg_put_t, job, CKS_JOB_MAX_LEN), WM_U64_(cks_msg_put_t, version),
    WM_STR_(cks_msg_put_t, key, CKS_KEY_MAX_LEN), WM_U32_(cks_msg_put_t, kind),
    WM_I32_(cks_msg_put_t, layer), WM_I32_(cks_msg_put_t, expert),
    WM_I32_(cks_msg_put_t, rank), WM_U64_(cks_msg_put_t, size),
    WM_U32_(cks_msg_put_t, k), WM_U32_(cks_msg_put_t, m),
    WM_U64_(cks_msg_put_t, chunk_size), WM_U32_(cks_msg_put_t, member_ms)};
static const wm_field_t wm_f_put_part[] = {
    WM_STR_(cks_msg_put_part_t, job, CKS_JOB_MAX_LEN), WM_U64_(cks_msg_put_part_t, version),
    WM_STR_(cks_msg_put_part_t, key, CKS_KEY_MAX_LEN), WM_U64_(cks_msg_put_part_t, offset),
    WM_U32_(cks_msg_put_part_t, cancel)};
static const wm_field_t wm_f_get[] = {
    WM_STR_(cks_msg_get_t, job, CKS_JOB_MAX_LEN), WM_U64_(cks_msg_get_t, version),
    WM_STR_(cks_msg_get_t, key, CKS_KEY_MAX_LEN), WM_U64_(cks_msg_get_t, offset),
    WM_U64_(cks_msg_get_t, length)};
static const wm_field_t wm_f_get_reply[] = {
    WM_REPLY_(cks_msg_get_reply_t), WM_U64_(cks_msg_get_reply_t, size),
    WM_U64_(cks_msg_get_reply_t, crc64), WM_U64_(cks_msg_get_reply_t, offset),
    WM_U64_(cks_msg_get_reply_t, length)};
static const wm_field_t wm_f_version_stat[] = {
    WM_STR_(cks_msg_version_stat_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_version_stat_t, version),
    WM_U32_(cks_msg_version_stat_t, latest)};
static const wm_field_t wm_f_version_stat_reply[] = {
    WM_REPLY_(cks_msg_version_stat_reply_t),
    WM_VENTRY_(cks_msg_version_stat_reply_t, v.)};
static const wm_field_t wm_f_version_list[] = {
    WM_STR_(cks_msg_version_list_t, job, CKS_JOB_MAX_LEN),
    WM_U32_(cks_msg_version_list_t, has_after),
    WM_U64_(cks_msg_version_list_t, after), WM_U32_(cks_msg_version_list_t, max)};
static const wm_field_t wm_f_list_reply[] = {
    WM_REPLY_(cks_msg_list_reply_t), WM_U32_(cks_msg_list_reply_t, count),
    WM_U32_(cks_msg_list_reply_t, more)};
static const wm_field_t wm_f_object_stat[] = {
    WM_STR_(cks_msg_object_stat_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_object_stat_t, version),
    WM_STR_(cks_msg_object_stat_t, key, CKS_KEY_MAX_LEN)};
static const wm_field_t wm_f_object_stat_reply[] = {
    WM_REPLY_(cks_msg_object_stat_reply_t),
    WM_OENTRY_(cks_msg_object_stat_reply_t, o.)};
static const wm_field_t wm_f_object_list[] = {
    WM_STR_(cks_msg_object_list_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_object_list_t, version),
    WM_STR_(cks_msg_object_list_t, after, CKS_KEY_MAX_LEN),
    WM_U32_(cks_msg_object_list_t, max)};
static const wm_field_t wm_f_job_list[] = {
    WM_STR_(cks_msg_job_list_t, after, CKS_JOB_MAX_LEN),
    WM_U32_(cks_msg_job_list_t, max)};

static const wm_field_t wm_f_chunk_put[] = {
    WM_STR_(cks_msg_chunk_put_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_chunk_put_t, version),
    WM_STR_(cks_msg_chunk_put_t, key, CKS_KEY_MAX_LEN),
    WM_U64_(cks_msg_chunk_put_t, stripe), WM_U32_(cks_msg_chunk_put_t, idx),
    WM_U64_(cks_msg_chunk_put_t, crc64), WM_U64_(cks_msg_chunk_put_t, guard)};
static const wm_field_t wm_f_chunk_get[] = {
    WM_STR_(cks_msg_chunk_get_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_chunk_get_t, version),
    WM_STR_(cks_msg_chunk_get_t, key, CKS_KEY_MAX_LEN),
    WM_U64_(cks_msg_chunk_get_t, stripe), WM_U32_(cks_msg_chunk_get_t, idx),
    WM_U64_(cks_msg_chunk_get_t, offset), WM_U64_(cks_msg_chunk_get_t, length)};
static const wm_field_t wm_f_chunk_get_reply[] = {
    WM_REPLY_(cks_msg_chunk_get_reply_t), WM_U64_(cks_msg_chunk_get_reply_t, crc64),
    WM_U64_(cks_msg_chunk_get_reply_t, chunk_len),
    WM_U64_(cks_msg_chunk_get_reply_t, offset),
    WM_U64_(cks_msg_chunk_get_reply_t, length)};
static const wm_field_t wm_f_object_done[] = {
    WM_STR_(cks_msg_object_done_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_object_done_t, version), WM_I32_(cks_msg_object_done_t, status),
    WM_OENTRY_(cks_msg_object_done_t, o.), WM_U32_(cks_msg_object_done_t, k),
    WM_U32_(cks_msg_object_done_t, m), WM_U64_(cks_msg_object_done_t, chunk_size),
    WM_U32_(cks_msg_object_done_t, missing), WM_U32_(cks_msg_object_done_t, redundancy),
    WM_STR_(cks_msg_object_done_t, why, CKS_MSG_MAX_LEN),
    WM_U32_(cks_msg_object_done_t, primary), WM_U32_(cks_msg_object_done_t, backup)};
static const wm_field_t wm_f_version_commit[] = {
    WM_STR_(cks_msg_version_commit_t, job, CKS_JOB_MAX_LEN),
    WM_VENTRY_(cks_msg_version_commit_t, v.), WM_U32_(cks_msg_version_commit_t, last),
    WM_U32_(cks_msg_version_commit_t, retain)};
static const wm_field_t wm_f_version_drop[] = {
    WM_STR_(cks_msg_version_drop_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_version_drop_t, version), WM_U32_(cks_msg_version_drop_t, state),
    WM_U32_(cks_msg_version_drop_t, retain)};

static const wm_field_t wm_f_version_claim[] = {
    WM_STR_(cks_msg_version_claim_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_version_claim_t, version), WM_U32_(cks_msg_version_claim_t, coord),
    WM_U32_(cks_msg_version_claim_t, op), WM_U32_(cks_msg_version_claim_t, ttl_s),
    WM_U32_(cks_msg_version_claim_t, round), WM_U64_(cks_msg_version_claim_t, parent),
    WM_U32_(cks_msg_version_claim_t, nranks), WM_U32_(cks_msg_version_claim_t, k),
    WM_U32_(cks_msg_version_claim_t, m), WM_U64_(cks_msg_version_claim_t, chunk_size),
    WM_U32_(cks_msg_version_claim_t, retain), WM_U32_(cks_msg_version_claim_t, member_ms)};

static const wm_field_t wm_f_sync_list[] = {
    WM_U32_(cks_msg_sync_list_t, what), WM_STR_(cks_msg_sync_list_t, job, CKS_JOB_MAX_LEN),
    WM_U64_(cks_msg_sync_list_t, version),
    WM_STR_(cks_msg_sync_list_t, after_key, CKS_KEY_MAX_LEN),
    WM_U32_(cks_msg_sync_list_t, has_after), WM_U64_(cks_msg_sync_list_t, after),
    WM_U32_(cks_msg_sync_list_t, max)};
static const wm_field_t wm_f_sync_reply[] = {
    WM_REPLY_(cks_msg_sync_reply_t), WM_U32_(cks_msg_sync_reply_t, synced),
    WM_U32_(cks_msg_sync_reply_t, count), WM_U32_(cks_msg_sync_reply_t, more)};
static const wm_field_t wm_f_repair_status[] = {WM_U32_(cks_msg_repair_status_t, flags)};
static const wm_field_t wm_f_repair_status_reply[] = {
    WM_REPLY_(cks_msg_repair_status_reply_t), WM_U32_(cks_msg_repair_status_reply_t, synced),
    WM_U32_(cks_msg_repair_status_reply_t, id),
    WM_U64_(cks_msg_repair_status_reply_t, chunks_left),
    WM_U64_(cks_msg_repair_status_reply_t, bytes_left),
    WM_U64_(cks_msg_repair_status_reply_t, chunks_done),
    WM_U64_(cks_msg_repair_status_reply_t, bytes_done),
    WM_U64_(cks_msg_repair_status_reply_t, chunks_sent),
    WM_U64_(cks_msg_repair_status_reply_t, rate),
    WM_U64_(cks_msg_repair_status_reply_t, rate_cap),
    WM_U64_(cks_msg_repair_status_reply_t, decodes),
    WM_U64_(cks_msg_repair_status_reply_t, decoded)};
static const wm_field_t wm_f_stats[] = {WM_U32_(cks_msg_stats_t, flags)};
static const wm_field_t wm_f_stats_reply[] = {
    WM_REPLY_(cks_msg_stats_reply_t), WM_U64_(cks_msg_stats_reply_t, arena_size),
    WM_U64_(cks_msg_stats_reply_t, arena_used), WM_U64_(cks_msg_stats_reply_t, enc_bytes),
    WM_U64_(cks_msg_stats_reply_t, enc_ns), WM_U64_(cks_msg_stats_reply_t, enc_job_ns)};

static const wm_field_t wm_f_version_entry[] = {WM_VENTRY_(cks_msg_version_entry_t, )};
static const wm_field_t wm_f_object_entry[]  = {WM_OENTRY_(cks_msg_object_entry_t, )};
static const wm_field_t wm_f_job_entry[]     = {
    WM_STR_(cks_msg_job_entry_t, name, CKS_JOB_MAX_LEN)};

#define WM_MSG_(T, f) {#T, sizeof(T), f, CKS_ARRAY_SIZE(f)}

/** Indexed by message type; unused ids have nfields == 0. */
static const wm_msg_t wm_msgs[CKS_MSG_LAST] = {
    [CKS_MSG_HELLO] = WM_MSG_(cks_msg_hello_t, wm_f_hello),
    [CKS_MSG_HELLO_REPLY] = WM_MSG_(cks_msg_hello_reply_t, wm_f_hello_reply),
    [CKS_MSG_STATUS_REPLY] = WM_MSG_(cks_msg_status_t, wm_f_status),
    [CKS_MSG_VERSION_BEGIN] = WM_MSG_(cks_msg_version_begin_t, wm_f_version_begin),
    [CKS_MSG_VERSION_SEAL] = WM_MSG_(cks_msg_version_seal_t, wm_f_version_seal),
    [CKS_MSG_SEAL_REPLY] = WM_MSG_(cks_msg_seal_reply_t, wm_f_seal_reply),
    [CKS_MSG_VERSION_ABORT] = WM_MSG_(cks_msg_version_ref_t, wm_f_version_ref),
    [CKS_MSG_VERSION_DELETE] = WM_MSG_(cks_msg_version_ref_t, wm_f_version_ref),
    [CKS_MSG_PUT] = WM_MSG_(cks_msg_put_t, wm_f_put),
    [CKS_MSG_PUT_PART] = WM_MSG_(cks_msg_put_part_t, wm_f_put_part),
    [CKS_MSG_GET] = WM_MSG_(cks_msg_get_t, wm_f_get),
    [CKS_MSG_GET_REPLY] = WM_MSG_(cks_msg_get_reply_t, wm_f_get_reply),
    [CKS_MSG_VERSION_STAT] = WM_MSG_(cks_msg_version_stat_t, wm_f_version_stat),
    [CKS_MSG_VERSION_STAT_REPLY] =
        WM_MSG_(cks_msg_version_stat_reply_t, wm_f_version_stat_reply),
    [CKS_MSG_VERSION_LIST] = WM_MSG_(cks_msg_version_list_t, wm_f_version_list),
    [CKS_MSG_LIST_REPLY] = WM_MSG_(cks_msg_list_reply_t, wm_f_list_reply),
    [CKS_MSG_OBJECT_STAT] = WM_MSG_(cks_msg_object_stat_t, wm_f_object_stat),
    [CKS_MSG_OBJECT_STAT_REPLY] =
        WM_MSG_(cks_msg_object_stat_reply_t, wm_f_object_stat_reply),
    [CKS_MSG_OBJECT_LIST] = WM_MSG_(cks_msg_object_list_t, wm_f_object_list),
    [CKS_MSG_JOB_LIST] = WM_MSG_(cks_msg_job_list_t, wm_f_job_list),
    [CKS_MSG_CHUNK_PUT] = WM_MSG_(cks_msg_chunk_put_t, wm_f_chunk_put),
    [CKS_MSG_CHUNK_GET] = WM_MSG_(cks_msg_chunk_get_t, wm_f_chunk_get),
    [CKS_MSG_CHUNK_GET_REPLY] = WM_MSG_(cks_msg_chunk_get_reply_t, wm_f_chunk_get_reply),
    [CKS_MSG_OBJECT_DONE] = WM_MSG_(cks_msg_object_done_t, wm_f_object_done),
    [CKS_MSG_VERSION_COMMIT] = WM_MSG_(cks_msg_version_commit_t, wm_f_version_commit),
    [CKS_MSG_VERSION_DROP] = WM_MSG_(cks_msg_version_drop_t, wm_f_version_drop),
    [CKS_MSG_VERSION_CLAIM] = WM_MSG_(cks_msg_version_claim_t, wm_f_version_claim),
    [CKS_MSG_OBJECT_DELETE] = WM_MSG_(cks_msg_object_stat_t, wm_f_object_stat),
    [CKS_MSG_AUTH] = WM_MSG_(cks_msg_auth_t, wm_f_auth),
    [CKS_MSG_AUTH_REPLY] = WM_MSG_(cks_msg_auth_reply_t, wm_f_auth_reply),
    [CKS_MSG_MEM_MAP] = WM_MSG_(cks_msg_mem_map_t, wm_f_mem_map),
    [CKS_MSG_VERSION_HOLD] = WM_MSG_(cks_msg_version_hold_t, wm_f_version_hold),
    [CKS_MSG_FLUSH_CHUNKS] = WM_MSG_(cks_msg_flush_t, wm_f_flush),
    [CKS_MSG_FLUSH_PUBLISH] = WM_MSG_(cks_msg_flush_t, wm_f_flush),
    [CKS_MSG_FLUSH_VERSION] = WM_MSG_(cks_msg_flush_t, wm_f_flush),
    [CKS_MSG_SYNC_LIST] = WM_MSG_(cks_msg_sync_list_t, wm_f_sync_list),
    [CKS_MSG_SYNC_REPLY] = WM_MSG_(cks_msg_sync_reply_t, wm_f_sync_reply),
    [CKS_MSG_REPAIR_CHECK] = WM_MSG_(cks_msg_version_ref_t, wm_f_version_ref),
    [CKS_MSG_REPAIR_DONE] = WM_MSG_(cks_msg_version_ref_t, wm_f_version_ref),
    [CKS_MSG_REPAIR_STATUS] = WM_MSG_(cks_msg_repair_status_t, wm_f_repair_status),
    [CKS_MSG_REPAIR_STATUS_REPLY] =
        WM_MSG_(cks_msg_repair_status_reply_t, wm_f_repair_status_reply),
    [CKS_MSG_STATS] = WM_MSG_(cks_msg_stats_t, wm_f_stats),
    [CKS_MSG_STATS_REPLY] = WM_MSG_(cks_msg_stats_reply_t, wm_f_stats_reply),
};

/** Indexed by cks_wire_entry_t. */
static const wm_msg_t wm_entries[WM_NENTRIES] = {
    [CKS_WIRE_ENTRY_VERSION] = WM_MSG_(cks_msg_version_entry_t, wm_f_version_entry),
    [CKS_WIRE_ENTRY_OBJECT]  = WM_MSG_(cks_msg_object_entry_t, wm_f_object_entry),
    [CKS_WIRE_ENTRY_JOB]     = WM_MSG_(cks_msg_job_entry_t, wm_f_job_entry),
};

/** Any body or entry. */
typedef union {
    cks_msg_any_t msg;
    cks_msg_version_entry_t version;
    cks_msg_object_entry_t object;
    cks_msg_job_entry_t job;
} wm_body_t;

/** The longest string or binary field of any message (and its NUL). */
#define WM_STR_BUF                                                                        \
    (CKS_MAX(CKS_WIRE_MAX_ADDR, CKS_WIRE_MAX_SEAL_PRIMARIES * CKS_WIRE_SEAL_PRIMARY_LEN) + 1)

/** A body with storage for its strings. */
typedef struct {
    wm_body_t b;
    uint8_t str[WM_MAX_FIELDS][WM_STR_BUF];
} wm_sample_t;

typedef enum {
    WM_FILL_MAX,    /* strings at their bound; UINT32_MAX, INT32_MIN, UINT64_MAX */
    WM_FILL_MIN,    /* empty strings (NULL text and ""); 0, INT32_MAX, 0 */
    WM_FILL_RANDOM, /* random lengths and bytes; boundary values often */
} wm_fill_t;

/* splitmix64 */
static inline uint64_t wm_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z          = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t wm_below(uint64_t *state, uint64_t n)
{
    return n == 0 ? 0 : wm_rand(state) % n;
}

/* A value of random bit width, so that every msgpack integer size appears. */
static inline uint64_t wm_rand_width(uint64_t *state)
{
    unsigned bits = (unsigned)wm_below(state, 65);
    uint64_t v    = wm_rand(state);
    return bits == 64 ? v : v & ((1ull << bits) - 1);
}

static inline uint64_t wm_rand_u64(uint64_t *state)
{
    static const uint64_t edge[] = {0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000,
                                    UINT32_MAX, (uint64_t)UINT32_MAX + 1, INT64_MAX,
                                    (uint64_t)INT64_MAX + 1, UINT64_MAX};
    return wm_below(state, 4) == 0 ? edge[wm_below(state, CKS_ARRAY_SIZE(edge))]
                                   : wm_rand_width(state);
}

static inline uint32_t wm_rand_u32(uint64_t *state)
{
    return (uint32_t)wm_rand_u64(state);
}

static inline int32_t wm_rand_i32(uint64_t *state)
{
    static const int32_t edge[] = {0, 1, -1, 127, -32, -33, -128, -129, 32767, -32768,
                                   -32769, INT32_MAX, INT32_MIN};
    uint32_t v;
    if (wm_below(state, 4) == 0) {
        return edge[wm_below(state, CKS_ARRAY_SIZE(edge))];
    }
    v = (uint32_t)wm_rand_width(state);
    return wm_below(state, 2) ? (int32_t)v : (int32_t)(0u - (v & 0x7fffffffu));
}

/** Fill every field of body `m` in s; string i uses s->str[i]. */
static inline void wm_fill(const wm_msg_t *m, wm_sample_t *s, wm_fill_t mode,
                           uint64_t *rng)
{
    memset(&s->b, 0, sizeof(s->b));
    for (unsigned i = 0; i < m->nfields; i++) {
        const wm_field_t *f = &m->fields[i];
        void *p             = (uint8_t *)&s->b + f->off;
        switch (f->kind) {
            case WM_U32:
                *(uint32_t *)p = mode == WM_FILL_MAX   ? UINT32_MAX
                                 : mode == WM_FILL_MIN ? 0
                                                       : wm_rand_u32(rng);
                break;
            case WM_I32:
                *(int32_t *)p = mode == WM_FILL_MAX   ? INT32_MIN
                                : mode == WM_FILL_MIN ? INT32_MAX
                                                      : wm_rand_i32(rng);
                break;
            case WM_U64:
                *(uint64_t *)p = mode == WM_FILL_MAX   ? UINT64_MAX
                                 : mode == WM_FILL_MIN ? 0
                                                       : wm_rand_u64(rng);
                break;
            case WM_STR:
            case WM_BIN: {
                cks_wire_str_t *str = p;
                uint32_t len = mode == WM_FILL_MAX ? f->max
                               : mode == WM_FILL_MIN
                                   ? 0
                                   : (uint32_t)wm_below(rng, f->max + 1u);
                if (mode == WM_FILL_RANDOM && wm_below(rng, 4) == 0) {
                    len = wm_below(rng, 2) ? f->max : 0;
                }
                for (uint32_t j = 0; j < len; j++) {
                    if (mode == WM_FILL_RANDOM) {
                        s->str[i][j] = (uint8_t)wm_rand(rng);
                    } else if (f->kind == WM_BIN) {
                        s->str[i][j] = (uint8_t)(j * 7u + i); /* every byte value */
                    } else {
                        s->str[i][j] = (uint8_t)('A' + (i + j) % 26u);
                    }
                }
                /* empty strings: NULL text for STR, "" for BIN (both allowed) */
                str->ptr =
                    (len == 0 && f->kind == WM_STR) ? NULL : (const char *)s->str[i];
                str->len = len;
                break;
            }
        }
    }
}

/** Index of the first field that differs between bodies a and b, or -1. */
static inline int wm_diff(const wm_msg_t *m, const void *a, const void *b)
{
    for (unsigned i = 0; i < m->nfields; i++) {
        const wm_field_t *f = &m->fields[i];
        const uint8_t *pa   = (const uint8_t *)a + f->off;
        const uint8_t *pb   = (const uint8_t *)b + f->off;
        int same            = 1;
        switch (f->kind) {
            case WM_U32:
                same = *(const uint32_t *)pa == *(const uint32_t *)pb;
                break;
            case WM_I32:
                same = *(const int32_t *)pa == *(const int32_t *)pb;
                break;
            case WM_U64:
                same = *(const uint64_t *)pa == *(const uint64_t *)pb;
                break;
            case WM_STR:
            case WM_BIN: {
                const cks_wire_str_t *sa = (const void *)pa, *sb = (const void *)pb;
                same = sa->len == sb->len &&
                       (sa->len == 0 || memcmp(sa->ptr, sb->ptr, sa->len) == 0);
                break;
            }
        }
        if (!same) {
            return (int)i;
        }
    }
    return -1;
}

/** Index of the first string field of a decoded body that does not lie
 *  inside [lo, hi) or is over its bound, or -1. */
static inline int wm_strings_outside(const wm_msg_t *m, const void *body, const void *lo,
                                     const void *hi)
{
    for (unsigned i = 0; i < m->nfields; i++) {
        const wm_field_t *f = &m->fields[i];
        const cks_wire_str_t *s;
        if (f->kind != WM_STR && f->kind != WM_BIN) {
            continue;
        }
        s = (const void *)((const uint8_t *)body + f->off);
        if (s->len > f->max || s->ptr == NULL || s->ptr < (const char *)lo ||
            s->ptr > (const char *)hi || (size_t)((const char *)hi - s->ptr) < s->len) {
            return (int)i;
        }
    }
    return -1;
}

#endif
