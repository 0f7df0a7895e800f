/*
 * coding: Reed-Solomon stripes and CRCs over ISA-L. The one interface header
 * of the cks_coding library; it exposes no ISA-L type.
 *
 * Code. RS(k, m) over GF(2^8) (ISA-L's field, polynomial 0x11D) with
 * 1 <= k <= CKS_EC_MAX_K data chunks and 1 <= m <= CKS_EC_MAX_M parity chunks.
 * The generator is ISA-L's gf_gen_cauchy1_matrix(): identity on the data rows,
 * and parity row i (0 <= i < m) multiplies data chunk j (0 <= j < k) by
 *     1 / ((k + i) XOR j)        (inverse in GF(2^8))
 * so that any k of the k + m chunks determine the rest. The matrix is part of
 * the stored format: parity written by one build is decoded by any other, and
 * it must never change.
 *
 * Buffers. Every buffer passed to this module belongs to the caller, before,
 * during and after the call; nothing is kept past the return. All buffers are
 * host memory (CKS_MEM_HOST). Output buffers must not overlap input buffers or
 * each other. No alignment is required (aligned buffers are faster).
 *
 * Padding. The last stripe of an object is usually short. Before encoding it,
 * the caller zero-fills every byte of its data chunks past the object's end
 * (whole chunks where they hold no object data; see cks_ec_chunk_data_len()).
 * This module does not check it; zero padding is part of the stored format, so
 * that every encoder of a stripe produces the same parity, and a decode
 * rebuilds the zeros.
 *
 * Threads. A cks_ec_h is immutable after cks_ec_create(): any number of threads
 * may encode and decode with the same handle at once. cks_ec_destroy() must not
 * race with any other use. The CRC functions are pure functions. Nothing on the
 * encode, decode or CRC path allocates memory, takes a lock or makes a syscall
 * (a rejected call logs one error line, and that is all).
 */
#ifndef CKS_CODING_H
#define CKS_CODING_H

#include "ckstore_defs.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CRCs --------------------------------------------------------------
 * Both use the same convention as zlib's crc32(): seed 0 starts a fresh CRC,
 * the pre- and post-inversion are done inside, and a CRC can be continued
 * over more bytes by passing the previous result as the seed:
 *     crc(a || b) == cks_crc64(cks_crc64(0, a, len_a), b, len_b)
 * A zero len returns the seed unchanged (buf may then be NULL).
 */

/** CRC-64/XZ (ECMA-182 polynomial, reflected; ISA-L crc64_ecma_refl()).
 *  Check value: cks_crc64(0, "123456789", 9) == 0x995dc9bbdf1939fa. Used for
 *  chunk and object checksums. Any len. */
uint64_t cks_crc64(uint64_t seed, const void *buf, size_t len);

/** The CRC-64 of a || b from crc_a = cks_crc64(0, a, len_a), crc_b =
 *  cks_crc64(0, b, len_b) and len_b, without the bytes:
 *  cks_crc64_combine(crc_a, crc_b, len_b) == cks_crc64(crc_a, b, len_b).
 *  About 64 x log2(len_b) bit operations. */
uint64_t cks_crc64_combine(uint64_t crc_a, uint64_t crc_b, uint64_t len_b);

/** CRC-32C (Castagnoli, iSCSI; ISA-L crc32_iscsi(), which takes its raw
 *  register without inversion: this wrapper passes ~seed and returns ~crc, so
 *  the result is the standard CRC-32C). Check value:
 *  cks_crc32c(0, "123456789", 9) == 0xe3069283. Any len. */
uint32_t cks_crc32c(uint32_t seed, const void *buf, size_t len);

/* ---- erasure coding ------------------------------------------------------ */

#define CKS_EC_MAX_K 16
#define CKS_EC_MAX_M 4
/** Largest chunk length that encode and decode accept (ISA-L counts bytes in
 *  an int). Chunks are megabytes; this bound is far above any chunk size. */
#define CKS_EC_MAX_LEN ((size_t)1 << 30)

/** An RS(k, m) code with its precomputed encode tables. Immutable after create. */
typedef struct cks_ec *cks_ec_h;

/** Create an RS(k, m) code. Returns CKS_ERR_INVALID_PARAM unless 1 <= k <=
 *  CKS_EC_MAX_K and 1 <= m <= CKS_EC_MAX_M (or ec_p is NULL),
 *  CKS_ERR_NO_MEMORY when allocation fails. *ec_p is written only on success. */
cks_status_t cks_ec_create(unsigned k, unsigned m, cks_ec_h *ec_p);

/** Free a code; NULL is accepted. No call may be using it. */
void cks_ec_destroy(cks_ec_h ec);

/** Number of data chunks per stripe. */
unsigned cks_ec_k(cks_ec_h ec);
/** Number of parity chunks per stripe. */
unsigned cks_ec_m(cks_ec_h ec);

/** Compute the m parity chunks of one stripe.
 *  data[0..k-1]: k input buffers of len bytes each (read only).
 *  parity[0..m-1]: m output buffers of len bytes each (overwritten).
 *  len may be 0 (nothing is touched) and at most CKS_EC_MAX_LEN.
 *  Returns CKS_ERR_INVALID_PARAM on a NULL handle, array or buffer, or a len
 *  that is too large; nothing is written then. */
cks_status_t cks_ec_encode(cks_ec_h ec, size_t len, const uint8_t *const *data,
                           uint8_t *const *parity);

/** Rebuild missing chunks of one stripe from any k present ones.
 *  chunks[0..k+m-1]: buffers of len bytes; index i < k is data chunk i,
 *      index k + j is parity chunk j.
 *  present[0..k+m-1]: nonzero when chunks[i] holds valid bytes (then
 *      chunks[i] must not be NULL; it is only read).
 *  Every missing chunk with a non-NULL buffer is rebuilt in place; missing
 *  chunks with NULL buffers are skipped, so a reader can rebuild only the data
 *  chunks it needs. Present chunks beyond the first k are not read.
 *  Returns CKS_OK, CKS_ERR_DATA_LOST when fewer than k chunks are present
 *  (nothing is written), or CKS_ERR_INVALID_PARAM (NULL handle or array,
 *  present chunk without buffer, len too large; nothing is written).
 *  Uses only the stack: no allocation. */
cks_status_t cks_ec_decode(cks_ec_h ec, size_t len, uint8_t *const *chunks,
                           const uint8_t *present);

/* ---- stripe geometry -----------------------------------------------------
 * An object of `size` bytes is cut into stripes of k data chunks of
 * chunk_size bytes each: byte b of the object lies in stripe
 * b / (k * chunk_size), data chunk (b % (k * chunk_size)) / chunk_size, at
 * offset b % chunk_size. The last stripe is padded with zeros: some of its
 * chunks hold fewer than chunk_size object bytes, or none. Every chunk, data
 * or parity, of every stripe is chunk_size bytes long.
 * k == 0 or chunk_size == 0 is invalid and gives 0.
 */

/** Number of stripes of an object; 0 for size 0. */
uint64_t cks_ec_stripe_count(uint64_t size, unsigned k, uint64_t chunk_size);

/** Bytes of object data in data chunk c (0 <= c < k) of stripe s: chunk_size,
 *  fewer in the last stripe, 0 when the chunk holds only padding or s, c are
 *  past the end. The remaining chunk_size - result bytes are zero padding. */
uint64_t cks_ec_chunk_data_len(uint64_t size, unsigned k, uint64_t chunk_size, uint64_t s,
                               unsigned c);

#ifdef __cplusplus
}
#endif
#endif
