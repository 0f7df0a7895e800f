/*
 * DESIGN: the CRCs of ckstore, thin wrappers over ISA-L's multi-binary CRC
 * kernels (which pick the CPU's fastest version at the first call).
 * Owns nothing; pure functions, callable from any thread.
 * Must never allocate, lock or make a syscall: it runs on every chunk.
 * Both wrappers follow the zlib convention (seed 0 = fresh CRC, results
 * chain); ISA-L's crc32_iscsi() does not invert its register, so the CRC-32C
 * wrapper does the inversion itself, and it feeds the int-length kernel in
 * pieces so that any size_t length works.
 */
#include "cks_coding.h"

#include "cks_common.h"

#include <isa-l.h>

/* Largest length passed to crc32_iscsi() at once: it takes an int. */
#define CKS_CRC32C_PIECE ((size_t)1 << 30)

uint64_t cks_crc64(uint64_t seed, const void *buf, size_t len)
{
    if (len == 0) {
        return seed;
    }
    /* crc64_ecma_refl() inverts on entry and exit: CRC-64/XZ with chaining */
    return crc64_ecma_refl(seed, (const unsigned char *)buf, (uint64_t)len);
}

uint32_t cks_crc32c(uint32_t seed, const void *buf, size_t len)
{
    /* ISA-L's type is non-const, but it only reads the buffer */
    unsigned char *p = (unsigned char *)(uintptr_t)buf;
    uint32_t crc = ~seed;
    size_t piece;

    while (len > 0) {
        piece = CKS_MIN(len, CKS_CRC32C_PIECE);
        crc = crc32_iscsi(p, (int)piece, crc);
        p += piece;
        len -= piece;
    }
    return ~crc;
}
