/*
 * DESIGN: libFuzzer target for the wire codec (transport/wire.c, compiled
 * into this executable with coverage and ASan/UBSan).
 *
 * One input is used twice:
 *  - whole, as a message for cks_wire_unpack();
 *  - without its first byte, as a list page for cks_wire_entry_unpack(),
 *    decoded entry by entry until one fails. The first byte picks the entry
 *    kind: byte % 3 below 0xf0, else the byte itself (an unknown kind, which
 *    must be refused).
 *
 * Properties checked; a violation aborts, so libFuzzer saves the input:
 *  - a failed decode returns a documented status (and, for messages, writes
 *    a reason into err); a failed entry decode leaves *off where it was;
 *  - a decoded message is as long as its header says; every string field
 *    lies inside the input and within its bound; an entry decode advances
 *    *off and stays inside the page, so the page loop ends;
 *  - round trip: what was decoded packs again, no longer than the input,
 *    decodes to the same header and fields (compared through the model in
 *    tests/transport/wire_model.h), and packs again to the same bytes.
 *
 * Single-threaded, as libFuzzer calls it; no state kept between inputs.
 */
#include "cks_tp.h"
#include "wire_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FW_BUF_LEN (CKS_WIRE_HDR_LEN + CKS_WIRE_MAX_BODY)

#define FW_FAIL(...)                                                   \
    do {                                                               \
        fprintf(stderr, "fuzz_wire: property violated: " __VA_ARGS__); \
        fputc('\n', stderr);                                           \
        abort();                                                       \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/** Decode an exact-size copy of packed bytes (so that ASan sees any
 *  over-read); it must succeed. The copy is returned for the strings. */
static void fw_unpack_copy(const char *what, const uint8_t *bytes, size_t len,
                           uint8_t **copy_p, cks_wire_hdr_t *hdr, wm_body_t *body)
{
    char err[128] = "";
    uint8_t *copy = malloc(len);
    cks_status_t st;

    if (copy == NULL) {
        abort();
    }
    memcpy(copy, bytes, len);
    st = cks_wire_unpack(copy, len, hdr, &body->msg, err, sizeof(err));
    *copy_p = copy;
    if (st != CKS_OK) {
        FW_FAIL("%s: re-decode of the re-packed message failed: %s", what, err);
    }
}

static void fw_message(const uint8_t *data, size_t size)
{
    static uint8_t b2[FW_BUF_LEN], b3[FW_BUF_LEN];
    cks_wire_hdr_t hdr, hdr2;
    wm_body_t body, body2;
    char err[128];
    size_t l2 = 0, l3 = 0;
    uint8_t *copy;
    cks_status_t st;
    const wm_msg_t *m;
    int i;

    memset(err, 0, sizeof(err));
    st = cks_wire_unpack(data, size, &hdr, &body.msg, err, sizeof(err));
    if (st != CKS_OK) {
        if (st != CKS_ERR_BAD_MESSAGE && st != CKS_ERR_UNSUPPORTED &&
            st != CKS_ERR_PROTOCOL) {
            FW_FAIL("undocumented status %d", st);
        }
        if (err[0] == '\0') {
            FW_FAIL("status %d without a reason", st);
        }
        return;
    }
    if (hdr.type >= CKS_MSG_LAST || wm_msgs[hdr.type].nfields == 0) {
        FW_FAIL("decoded unknown type %u", hdr.type);
    }
    m = &wm_msgs[hdr.type];
    if (size != CKS_WIRE_HDR_LEN + (size_t)hdr.body_len ||
        hdr.body_len > CKS_WIRE_MAX_BODY) {
        FW_FAIL("%s: body_len %u, input %zu bytes", m->name, hdr.body_len, size);
    }
    if (hdr.flags & ~(uint32_t)CKS_WIRE_F_KNOWN) {
        FW_FAIL("%s: unknown flags 0x%x accepted", m->name, hdr.flags);
    }
    i = wm_strings_outside(m, &body, data + CKS_WIRE_HDR_LEN, data + size);
    if (i >= 0) {
        FW_FAIL("%s: string %s outside the body or over its bound", m->name,
                m->fields[i].name);
    }

    st = cks_wire_pack(hdr.type, hdr.flags, hdr.req_id, &body, b2, sizeof(b2), &l2);
    if (st != CKS_OK) {
        FW_FAIL("%s: re-pack failed: %d", m->name, st);
    }
    if (l2 > size) {
        FW_FAIL("%s: canonical encoding longer than the input (%zu > %zu)", m->name, l2,
                size);
    }
    fw_unpack_copy(m->name, b2, l2, &copy, &hdr2, &body2);
    if (hdr2.type != hdr.type || hdr2.flags != hdr.flags || hdr2.req_id != hdr.req_id ||
        hdr2.body_len != l2 - CKS_WIRE_HDR_LEN) {
        FW_FAIL("%s: header changed in a round trip", m->name);
    }
    i = wm_diff(m, &body, &body2);
    if (i >= 0) {
        FW_FAIL("%s: field %s changed in a round trip", m->name, m->fields[i].name);
    }
    st = cks_wire_pack(hdr2.type, hdr2.flags, hdr2.req_id, &body2, b3, sizeof(b3), &l3);
    if (st != CKS_OK || l3 != l2 || memcmp(b2, b3, l2) != 0) {
        FW_FAIL("%s: second pack differs", m->name);
    }
    free(copy);
}

static void fw_entry_roundtrip(unsigned kind, const wm_body_t *e, size_t consumed)
{
    const wm_msg_t *m = &wm_entries[kind];
    uint8_t b2[1024];
    size_t l2 = 0, off = 0;
    wm_body_t e2;
    uint8_t *copy;
    cks_status_t st;
    int i;

    st = cks_wire_entry_pack((cks_wire_entry_t)kind, e, b2, sizeof(b2), &l2);
    if (st != CKS_OK) {
        FW_FAIL("%s: re-pack failed: %d", m->name, st);
    }
    if (l2 > consumed) {
        FW_FAIL("%s: canonical entry longer than the input (%zu > %zu)", m->name, l2,
                consumed);
    }
    copy = malloc(l2);
    if (copy == NULL) {
        abort();
    }
    memcpy(copy, b2, l2);
    st = cks_wire_entry_unpack((cks_wire_entry_t)kind, copy, l2, &off, &e2);
    if (st != CKS_OK || off != l2) {
        FW_FAIL("%s: re-decode failed (%d, %zu of %zu bytes)", m->name, st, off, l2);
    }
    i = wm_diff(m, e, &e2);
    if (i >= 0) {
        FW_FAIL("%s: field %s changed in a round trip", m->name, m->fields[i].name);
    }
    free(copy);
}

static void fw_page(unsigned kind, const uint8_t *page, size_t len)
{
    size_t off = 0, steps = 0;

    for (;;) {
        size_t before = off;
        wm_body_t e;
        cks_status_t st =
            cks_wire_entry_unpack((cks_wire_entry_t)kind, page, len, &off, &e);
        if (st != CKS_OK) {
            if (st != CKS_ERR_BAD_MESSAGE) {
                FW_FAIL("entry: undocumented status %d", st);
            }
            if (off != before) {
                FW_FAIL("entry: failed decode moved the offset %zu -> %zu", before, off);
            }
            return;
        }
        if (kind >= WM_NENTRIES) {
            FW_FAIL("entry kind %u accepted", kind);
        }
        if (off <= before || off > len) {
            FW_FAIL("entry: offset %zu -> %zu (page %zu bytes)", before, off, len);
        }
        int i = wm_strings_outside(&wm_entries[kind], &e, page, page + len);
        if (i >= 0) {
            FW_FAIL("%s: string %s outside the page or over its bound",
                    wm_entries[kind].name, wm_entries[kind].fields[i].name);
        }
        fw_entry_roundtrip(kind, &e, off - before);
        if (++steps > len) {
            FW_FAIL("entry loop does not end");
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fw_message(data, size);
    if (size >= 1) {
        unsigned kind = data[0] < 0xf0 ? data[0] % WM_NENTRIES : data[0];
        fw_page(kind, data + 1, size - 1);
    }
    return 0;
}
