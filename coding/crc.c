/*
 * DESIGN: the CRCs of ckstore, thin wrappers over ISA-L's multi-binary CRC
 * kernels (which pick the CPU's fastest version at the first call).
 * Owns nothing; pure functions, callable from any thread.
 * Must never allocate, lock or make a syscall: it runs on every chunk.
 * Both wrappers follow the zlib convention (seed 0 = fresh CRC, results
 * chain); ISA-L's crc32_iscsi() does not invert its register, so the CRC-32C
 * wrapper does the inversion itself, and it feeds the int-length kernel in
 * pieces so that any size_t length works. ISA-L has no CRC combine: the
 * CRC-64 of a concatenation from its parts' CRCs is computed here, as
 * zlib's crc32_combine() does for CRC-32 (multiplication modulo the CRC's
 * polynomial), so that parts checked on several threads, or chunks checked
 * as they are read, give the whole object's CRC without another pass.
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

/* ---- CRC-64 combine ------------------------------------------------------------
 *     crc(a || b) = crc(a) * x^(8 len(b)) mod P  xor  crc(b)
 * for CRC-64/XZ (reflected, P = ECMA-182; the pre- and post-inversion of
 * crc64_ecma_refl() cancel). Polynomials are reflected: x^0 is the top bit. */
#define CKS_CRC64_POLY 0xc96c5795d7870f42ull /* ECMA-182, reflected */

/* x^(2^k) mod P, k = 0..63 (tests/coding checks combine against ISA-L) */
static const uint64_t cks_crc64_x2k[64] = {
    0x4000000000000000ull, 0x2000000000000000ull,
    0x0800000000000000ull, 0x0080000000000000ull,
    0x0000800000000000ull, 0x0000000080000000ull,
    0xc96c5795d7870f42ull, 0x6d5f4ad7e3c3afa0ull,
    0xd49f7e445077d8eaull, 0x040fb02a53c216faull,
    0x6bec35957b9ef3a0ull, 0xb0e3bb0658964afeull,
    0x218578c7a2dff638ull, 0x6dbb920f24dd5cf2ull,
    0x7a140cfcdb4d5eb5ull, 0x41b3705ecbc4057bull,
    0xd46ab656accac1eaull, 0x329beda6fc34fb73ull,
    0x51a4fcd4350b9797ull, 0x314fa85637efae9dull,
    0xacf27e9a1518d512ull, 0xffe2a3388a4d8ce7ull,
    0x48b9697e60cc2e4eull, 0xada73cb78dd62460ull,
    0x3ea5454d8ce5c1bbull, 0x5e84e3a6c70feaf1ull,
    0x90fd49b66cbd81d1ull, 0xe2943e0c1db254e8ull,
    0xecfa6adeca8834a1ull, 0xf513e212593ee321ull,
    0xf36ae57331040916ull, 0x63fbd333b87b6717ull,
    0xbd60f8e152f50b8bull, 0xa5ce4a8299c1567dull,
    0x0bd445f0cbdb55eeull, 0xfdd6824e20134285ull,
    0xcead8b6ebda2227aull, 0xe44b17e4f5d4fb5cull,
    0x9b29c81ad01ca7c5ull, 0x1b4366e40fea4055ull,
    0x27bca1551aae167bull, 0xaa57bcd1b39a5690ull,
    0xd7fce83fa1234db9ull, 0xcce4986efea3ff8eull,
    0x3602a4d9e65341f1ull, 0x722b1da2df516145ull,
    0xecfc3ddd3a08da83ull, 0x0fb96dcca83507e6ull,
    0x125f2fe78d70f080ull, 0x842f50b7651aa516ull,
    0x09bc34188cd9836full, 0xf43666c84196d909ull,
    0xb56feb30c0df6ccbull, 0xaa66e04ce7f30958ull,
    0xb7b1187e9af29547ull, 0x113255f8476495deull,
    0x8fb19f783095d77eull, 0xaec4aacc7c82b133ull,
    0xf64e6d09218428cfull, 0x036a72ea5ac258a0ull,
    0x5235ef12eb7aaa6aull, 0x2fed7b1685657853ull,
    0x8ef8951d46606fb5ull, 0x9d58c1090f034d14ull,
};

/* a * b mod P */
static uint64_t cks_crc64_mulmodp(uint64_t a, uint64_t b)
{
    uint64_t m = 1ull << 63, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) {
                break;
            }
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CKS_CRC64_POLY : b >> 1;
    }
    return p;
}

uint64_t cks_crc64_combine(uint64_t crc_a, uint64_t crc_b, uint64_t len_b)
{
    uint64_t x = 1ull << 63; /* x^0 */
    for (unsigned k = 3; len_b != 0 && k < 64; len_b >>= 1, k++) { /* x^(8 len_b) */
        if (len_b & 1) {
            x = cks_crc64_mulmodp(cks_crc64_x2k[k], x);
        }
    }
    return cks_crc64_mulmodp(x, crc_a) ^ crc_b;
}
