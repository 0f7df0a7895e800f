/*
 * DESIGN: libFuzzer target for the RMA descriptor and the remote-key check
 * of transport/rma.c (compiled into this executable with the rest of the
 * transport, with coverage and ASan/UBSan; no UCX context is made: both
 * functions only read bytes).
 *
 * One input is used twice:
 *  - whole, as a descriptor for cks_tp_rma_parse(); a descriptor that parses
 *    has its packed key walked with each map length UCX may use (8, 4, 2);
 *  - without its first byte, as a packed key for cks_tp_key_walk(): the
 *    first byte picks the map length (byte % 3) and which byte of the shape
 *    to change (byte / 3); the key is walked without a shape, with itself
 *    as the shape and with that changed shape.
 *
 * Properties checked; a violation aborts, so libFuzzer saves the input:
 *  - a refused descriptor is CKS_ERR_BAD_MESSAGE and leaves the output
 *    alone; an accepted one is no longer than CKS_TP_RMA_DESC_MAX, its range
 *    lies in its region past the region's header, its key and token point
 *    into the input, and written out again in the layout that rma.c
 *    documents it gives back the input byte for byte;
 *  - every walk answers as a slow reference walk written from the key
 *    layout (count the map's bits, step over one size byte and its bytes per
 *    bit) does; a key that walks without a shape walks with itself as the
 *    shape. Reads past the key are ASan's to catch (libFuzzer's input is an
 *    exact-size allocation).
 *
 * Single-threaded, as libFuzzer calls it; no state kept between inputs.
 */
#include "tp_int.h"

#include "fuzz_util.h"

#include <string.h>

#define FZ_TARGET "fuzz_rma"

/* The descriptor layout of rma.c's DESIGN comment: magic u32 | addr u64 |
 * len u64 | seg_base u64 | seg_len u64 | rkey_len u32 | token | key. */
#define FR_MAGIC   0x434b5231u
#define FR_HDR     (40u + CKS_WIRE_NONCE_LEN)
#define FR_MEM_HDR 4096u /* a region's own header, never named by a range */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_init();
    return 0;
}

/* Reference: the key layout spelled out, one domain per bit of the map. */
static int fr_walk_ref(const uint8_t *k, size_t len, size_t map_len, const uint8_t *shape)
{
    unsigned domains = 0;
    size_t pos;

    if (len <= map_len || k[map_len] != 0) {
        return -1;
    }
    for (size_t i = 0; i < map_len; i++) {
        domains += (unsigned)__builtin_popcount(k[i]);
    }
    if (domains == 0) {
        return -1;
    }
    pos = map_len + 1;
    while (domains-- > 0) {
        if (pos >= len) {
            return -1;
        }
        if (shape != NULL && shape[pos] != k[pos]) {
            return -1;
        }
        pos += 1 + (size_t)k[pos];
    }
    return pos == len ? 0 : -1;
}

static void fr_walk(const uint8_t *k, size_t len, size_t map_len, const uint8_t *shape,
                    const char *what)
{
    int got = cks_tp_key_walk(k, len, map_len, shape);
    int want = fr_walk_ref(k, len, map_len, shape);

    if (got != want) {
        FZ_FAIL("key walk (%s, map %zu, %zu bytes) says %d, the reference %d", what,
                map_len, len, got, want);
    }
}

static void fr_key(const uint8_t *k, size_t len, size_t map_len, size_t flip)
{
    uint8_t *shape;

    fr_walk(k, len, map_len, NULL, "no shape");
    if (len == 0) {
        return;
    }
    if (cks_tp_key_walk(k, len, map_len, NULL) == 0 &&
        cks_tp_key_walk(k, len, map_len, k) != 0) {
        FZ_FAIL("a key (map %zu, %zu bytes) does not have its own shape", map_len, len);
    }
    shape = malloc(len);
    if (shape == NULL) {
        abort();
    }
    memcpy(shape, k, len);
    fr_walk(k, len, map_len, shape, "own shape");
    shape[flip % len]++;
    fr_walk(k, len, map_len, shape, "changed shape");
    free(shape);
}

static void fr_put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static void fr_descriptor(const uint8_t *data, size_t size)
{
    static const size_t map_lens[] = {8, 4, 2};
    cks_tp_data_t d, untouched;
    uint8_t *again;
    cks_status_t st;

    memset(&d, 0xa5, sizeof(d));
    memcpy(&untouched, &d, sizeof(d));
    st = cks_tp_rma_parse(data, size, &d);
    if (st != CKS_OK) {
        if (st != CKS_ERR_BAD_MESSAGE) {
            FZ_FAIL("descriptor: undocumented status %d", st);
        }
        if (memcmp(&d, &untouched, sizeof(d)) != 0) {
            FZ_FAIL("descriptor: refused, but the output was written");
        }
        return;
    }
    if (size < FR_HDR || size > CKS_TP_RMA_DESC_MAX) {
        FZ_FAIL("descriptor of %zu bytes accepted", size);
    }
    if (!d.is_rma || d.is_rndv || d.ptr != NULL || d.desc != NULL) {
        FZ_FAIL("descriptor: not marked as RMA");
    }
    if (d.rkey != data + FR_HDR || d.rkey_len != size - FR_HDR || d.rkey_len == 0 ||
        d.rma_token != data + 40) {
        FZ_FAIL("descriptor: key or token outside the input");
    }
    if (d.rma_seg_len <= FR_MEM_HDR || d.rma_seg_base + d.rma_seg_len < d.rma_seg_base ||
        d.rma_addr < d.rma_seg_base + FR_MEM_HDR || d.rma_addr + d.length < d.rma_addr ||
        d.rma_addr + d.length > d.rma_seg_base + d.rma_seg_len) {
        FZ_FAIL("descriptor: range [0x%llx, +%zu) outside the region [0x%llx, +%llu)",
                (unsigned long long)d.rma_addr, d.length,
                (unsigned long long)d.rma_seg_base, (unsigned long long)d.rma_seg_len);
    }
    again = malloc(size);
    if (again == NULL) {
        abort();
    }
    fr_put64(again, (uint64_t)FR_MAGIC << 32);
    fr_put64(again + 4, d.rma_addr);
    fr_put64(again + 12, d.length);
    fr_put64(again + 20, d.rma_seg_base);
    fr_put64(again + 28, d.rma_seg_len);
    again[36] = (uint8_t)(d.rkey_len >> 24);
    again[37] = (uint8_t)(d.rkey_len >> 16);
    again[38] = (uint8_t)(d.rkey_len >> 8);
    again[39] = (uint8_t)d.rkey_len;
    memcpy(again + 40, d.rma_token, CKS_WIRE_NONCE_LEN);
    memcpy(again + FR_HDR, d.rkey, d.rkey_len);
    if (memcmp(again, data, size) != 0) {
        FZ_FAIL("descriptor: written out again, it differs from the input");
    }
    free(again);
    for (size_t i = 0; i < sizeof(map_lens) / sizeof(map_lens[0]); i++) {
        fr_walk(d.rkey, d.rkey_len, map_lens[i], NULL, "descriptor's key");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t map_lens[] = {8, 4, 2};

    fr_descriptor(data, size);
    if (size >= 1) {
        fr_key(data + 1, size - 1, map_lens[data[0] % 3], data[0] / 3u);
    }
    return 0;
}
