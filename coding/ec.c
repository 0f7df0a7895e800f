/*
 * DESIGN: Reed-Solomon RS(k, m) encode and decode over ISA-L, and the stripe
 * geometry of objects.
 *
 * Owns: struct cks_ec, the (k + m) x k Cauchy generator matrix and the ISA-L
 * encode tables of its m parity rows, computed once at create and never
 * written again, so that one handle serves any number of threads.
 * Runs on: whatever thread calls it (server encoder threads, client restore).
 * Must never: allocate, lock or make a syscall on the encode or decode path
 * (decode matrices and tables live on the stack: k <= 16, m <= 4 bound them
 * to a few KiB); multiply data bytes itself (every data byte goes through
 * ISA-L's ec_encode_data(); gf_mul() is used only to build small matrices);
 * keep a pointer to a caller's buffer past the call.
 *
 * Decode picks the first k present chunks (data chunks first, so a stripe that
 * lost only parity needs no real inversion), inverts the k x k submatrix of
 * the generator for them, and derives one decode row per chunk to rebuild:
 * the inverse's row for a data chunk, the parity row times the inverse for a
 * parity chunk. All rows go through one ec_encode_data() call, which reads
 * the k sources once.
 */
#include "cks_coding.h"

#include "cks_common.h"

#include <isa-l.h>
#include <stdlib.h>
#include <string.h>

#define CKS_EC_MAX_N      (CKS_EC_MAX_K + CKS_EC_MAX_M)
#define CKS_EC_TBL_PER_CO 32 /* bytes of ISA-L table per matrix coefficient */

struct cks_ec {
    unsigned k;
    unsigned m;
    /* rows 0..k-1 identity, rows k..k+m-1 Cauchy; row-major, stride k */
    uint8_t matrix[CKS_EC_MAX_N * CKS_EC_MAX_K];
    /* ec_init_tables() of the parity rows */
    uint8_t enc_tables[CKS_EC_TBL_PER_CO * CKS_EC_MAX_K * CKS_EC_MAX_M];
};

cks_status_t cks_ec_create(unsigned k, unsigned m, cks_ec_h *ec_p)
{
    struct cks_ec *ec;

    if ((k < 1) || (k > CKS_EC_MAX_K) || (m < 1) || (m > CKS_EC_MAX_M) ||
        (ec_p == NULL)) {
        cks_error("ec: invalid code RS(%u, %u) (k must be 1..%d, m 1..%d)", k, m,
                  CKS_EC_MAX_K, CKS_EC_MAX_M);
        return CKS_ERR_INVALID_PARAM;
    }

    ec = calloc(1, sizeof(*ec));
    if (ec == NULL) {
        cks_error("ec: cannot allocate RS(%u, %u)", k, m);
        return CKS_ERR_NO_MEMORY;
    }

    ec->k = k;
    ec->m = m;
    gf_gen_cauchy1_matrix(ec->matrix, (int)(k + m), (int)k);
    ec_init_tables((int)k, (int)m, &ec->matrix[k * k], ec->enc_tables);

    *ec_p = ec;
    return CKS_OK;
}

void cks_ec_destroy(cks_ec_h ec)
{
    free(ec);
}

unsigned cks_ec_k(cks_ec_h ec)
{
    return ec->k;
}

unsigned cks_ec_m(cks_ec_h ec)
{
    return ec->m;
}

cks_status_t cks_ec_encode(cks_ec_h ec, size_t len, const uint8_t *const *data,
                           uint8_t *const *parity)
{
    unsigned char *srcs[CKS_EC_MAX_K];
    unsigned char *dsts[CKS_EC_MAX_M];
    unsigned i;

    if ((ec == NULL) || (data == NULL) || (parity == NULL) || (len > CKS_EC_MAX_LEN)) {
        cks_error("ec: encode: invalid parameter (ec %p data %p parity %p "
                  "len %zu)",
                  (void *)ec, (const void *)data, (const void *)parity, len);
        return CKS_ERR_INVALID_PARAM;
    }

    for (i = 0; i < ec->k; i++) {
        if (data[i] == NULL) {
            cks_error("ec: encode: data chunk %u is NULL", i);
            return CKS_ERR_INVALID_PARAM;
        }
        /* ISA-L's type is non-const; it only reads sources */
        srcs[i] = (unsigned char *)(uintptr_t)data[i];
    }
    for (i = 0; i < ec->m; i++) {
        if (parity[i] == NULL) {
            cks_error("ec: encode: parity chunk %u is NULL", i);
            return CKS_ERR_INVALID_PARAM;
        }
        dsts[i] = parity[i];
    }

    if (len == 0) {
        return CKS_OK;
    }

    /* enc_tables is only read: safe to share between threads */
    ec_encode_data((int)len, (int)ec->k, (int)ec->m, (unsigned char *)ec->enc_tables,
                   srcs, dsts);
    return CKS_OK;
}

cks_status_t cks_ec_decode(cks_ec_h ec, size_t len, uint8_t *const *chunks,
                           const uint8_t *present)
{
    uint8_t sub[CKS_EC_MAX_K * CKS_EC_MAX_K];
    uint8_t inv[CKS_EC_MAX_K * CKS_EC_MAX_K];
    uint8_t rows[CKS_EC_MAX_M * CKS_EC_MAX_K];
    uint8_t tables[CKS_EC_TBL_PER_CO * CKS_EC_MAX_K * CKS_EC_MAX_M];
    unsigned char *srcs[CKS_EC_MAX_K];
    unsigned char *dsts[CKS_EC_MAX_M];
    unsigned src_idx[CKS_EC_MAX_K];
    unsigned dst_idx[CKS_EC_MAX_M];
    unsigned k, n, i, r, c, t, nsrc, ndst, npresent;
    uint8_t s;

    if ((ec == NULL) || (chunks == NULL) || (present == NULL) || (len > CKS_EC_MAX_LEN)) {
        cks_error("ec: decode: invalid parameter (ec %p chunks %p present %p "
                  "len %zu)",
                  (void *)ec, (const void *)chunks, (const void *)present, len);
        return CKS_ERR_INVALID_PARAM;
    }

    k = ec->k;
    n = ec->k + ec->m;
    npresent = 0;
    for (i = 0; i < n; i++) {
        if (!present[i]) {
            continue;
        }
        if (chunks[i] == NULL) {
            cks_error("ec: decode: chunk %u is marked present but is NULL", i);
            return CKS_ERR_INVALID_PARAM;
        }
        npresent++;
    }
    if (npresent < k) {
        /* the caller knows which object this is and reports it */
        cks_debug("ec: decode: %u of %u chunks present, %u needed", npresent, n, k);
        return CKS_ERR_DATA_LOST;
    }

    /* npresent >= k, so at most m chunks are missing: the arrays suffice */
    nsrc = 0;
    ndst = 0;
    for (i = 0; i < n; i++) {
        if (present[i]) {
            if (nsrc < k) {
                src_idx[nsrc] = i;
                srcs[nsrc++] = chunks[i];
            }
        } else if (chunks[i] != NULL) {
            dst_idx[ndst] = i;
            dsts[ndst++] = chunks[i];
        }
    }
    if ((ndst == 0) || (len == 0)) {
        return CKS_OK;
    }

    /* generator rows of the sources, inverted: sources -> data chunks */
    for (r = 0; r < k; r++) {
        memcpy(&sub[r * k], &ec->matrix[src_idx[r] * k], k);
    }
    if (gf_invert_matrix(sub, inv, (int)k) != 0) {
        /* cannot happen with a Cauchy generator: any k rows are independent */
        cks_error("ec: decode: singular RS(%u, %u) submatrix", k, ec->m);
        return CKS_ERR_INTERNAL;
    }

    /* one decode row per chunk to rebuild */
    for (r = 0; r < ndst; r++) {
        if (dst_idx[r] < k) {
            memcpy(&rows[r * k], &inv[dst_idx[r] * k], k);
            continue;
        }
        for (c = 0; c < k; c++) {
            s = 0;
            for (t = 0; t < k; t++) {
                s ^= gf_mul(ec->matrix[dst_idx[r] * k + t], inv[t * k + c]);
            }
            rows[r * k + c] = s;
        }
    }

    ec_init_tables((int)k, (int)ndst, rows, tables);
    ec_encode_data((int)len, (int)k, (int)ndst, tables, srcs, dsts);
    return CKS_OK;
}

/* ---- stripe geometry ---------------------------------------------------- */

uint64_t cks_ec_stripe_count(uint64_t size, unsigned k, uint64_t chunk_size)
{
    uint64_t stripe;

    if ((size == 0) || (k == 0) || (chunk_size == 0)) {
        return 0;
    }
    if (__builtin_mul_overflow(chunk_size, (uint64_t)k, &stripe)) {
        return 1; /* one stripe is larger than any object */
    }
    return size / stripe + ((size % stripe) != 0);
}

uint64_t cks_ec_chunk_data_len(uint64_t size, unsigned k, uint64_t chunk_size, uint64_t s,
                               unsigned c)
{
    uint64_t base, offset;

    if ((c >= k) || (s >= cks_ec_stripe_count(size, k, chunk_size))) {
        return 0; /* also covers size == 0, k == 0, chunk_size == 0 */
    }
    /* s < stripe count: s * k * chunk_size < size cannot overflow (and when
     * k * chunk_size overflows there is one stripe, s == 0) */
    base = (s == 0) ? 0 : s * chunk_size * k;
    if (__builtin_mul_overflow(chunk_size, (uint64_t)c, &offset) ||
        __builtin_add_overflow(offset, base, &offset) || (offset >= size)) {
        return 0;
    }
    return CKS_MIN(chunk_size, size - offset);
}
