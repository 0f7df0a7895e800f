/*
 * DESIGN: writes the seed corpus of fuzz_wire into the directory given as
 * argv[1] (fuzz/corpus/wire through the fuzz_wire_seeds target): for every
 * message of CKS_MSG_LIST one valid packed message with extreme values, one
 * with empty/zero values and one with random values (fixed seed), and for
 * every list-page entry kind a page of one and of four entries, prefixed by
 * the byte that makes fuzz_wire decode it as that kind. Deterministic: the
 * same table gives the same files. A host tool; run by hand.
 */
#include "cks_tp.h"
#include "wire_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static wm_sample_t gen_sample;

static int gen_write(const char *dir, const char *name, const void *bytes, size_t len)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL) {
        fprintf(stderr, "gen_corpus: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (fwrite(bytes, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "gen_corpus: %s: write failed\n", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const unsigned types[] = {
#define GEN_TYPE_(msg, id, ...) CKS_MSG_##msg,
        CKS_MSG_LIST(GEN_TYPE_)
#undef GEN_TYPE_
    };
    static const char *fills[] = {"max", "min", "rnd"};
    static const char *kinds[] = {"version", "object", "job"};
    static uint8_t buf[1 + CKS_WIRE_MAX_PAGE];
    uint64_t rng = 0x5eed;
    unsigned files = 0;
    char name[128];

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    for (unsigned t = 0; t < CKS_ARRAY_SIZE(types); t++) {
        for (unsigned v = 0; v < 3; v++) {
            size_t len = 0;
            wm_fill(&wm_msgs[types[t]], &gen_sample, (wm_fill_t)v, &rng);
            if (cks_wire_pack(types[t], v == 0 ? CKS_WIRE_F_PAYLOAD : 0, wm_rand(&rng),
                              &gen_sample.b, buf, sizeof(buf), &len) != CKS_OK) {
                fprintf(stderr, "gen_corpus: cannot pack %s\n", cks_msg_name(types[t]));
                return 1;
            }
            snprintf(name, sizeof(name), "msg_%s_%s", cks_msg_name(types[t]), fills[v]);
            if (gen_write(argv[1], name, buf, len) != 0) {
                return 1;
            }
            files++;
        }
    }
    for (unsigned kind = 0; kind < WM_NENTRIES; kind++) {
        for (unsigned n = 1; n <= 4; n += 3) {
            size_t off = 1;
            buf[0] = (uint8_t)kind; /* fuzz_wire: kind = byte % 3 */
            for (unsigned i = 0; i < n; i++) {
                wm_fill(&wm_entries[kind], &gen_sample,
                        i == 0   ? WM_FILL_MAX
                        : i == 1 ? WM_FILL_MIN
                                 : WM_FILL_RANDOM,
                        &rng);
                if (cks_wire_entry_pack((cks_wire_entry_t)kind, &gen_sample.b, buf,
                                        sizeof(buf), &off) != CKS_OK) {
                    fprintf(stderr, "gen_corpus: cannot pack a %s entry\n", kinds[kind]);
                    return 1;
                }
            }
            snprintf(name, sizeof(name), "page_%s_%u", kinds[kind], n);
            if (gen_write(argv[1], name, buf, off) != 0) {
                return 1;
            }
            files++;
        }
    }
    printf("gen_corpus: %u seed files in %s\n", files, argv[1]);
    return 0;
}
