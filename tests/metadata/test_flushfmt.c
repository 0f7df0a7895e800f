/*
 * The durable tier's on-disk format (metadata/flushfmt.c): what a server
 * writes reads back the same, names that would break a line or a path are
 * kept intact, and a file cut short or damaged is refused with a reason,
 * never read as something else.
 */
#include "cks_md.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(flushfmt, .timeout = 10);

static char path[64];

static FILE *tmp_file(void)
{
    snprintf(path, sizeof(path), "/tmp/cks-test-flushfmt-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    cr_assert_not_null(f);
    return f;
}

static void write_text(const char *text)
{
    FILE *f = tmp_file();
    fputs(text, f);
    fclose(f);
}

Test(flushfmt, names)
{
    char out[256];
    uint64_t v;
    cr_assert_eq(cks_md_flush_job_dir("/d", "a/b c", 5, out, sizeof(out)), CKS_OK);
    cr_assert_str_eq(out, "/d/a%2Fb%20c");
    cr_assert_eq(cks_md_flush_job_dir("/d", "..", 2, out, sizeof(out)), CKS_OK);
    cr_assert_str_eq(out, "/d/%2E.", "a leading dot is encoded: no '..'");
    cr_assert_eq(cks_md_flush_job_dir("/d", "job.v1", 6, out, sizeof(out)), CKS_OK);
    cr_assert_str_eq(out, "/d/job.v1");
    cr_assert_eq(cks_md_flush_job_dir("/d", "abcdef", 6, out, 6), CKS_ERR_INVALID_PARAM);
    cks_md_flush_version_name(42, out, sizeof(out));
    cr_assert_str_eq(out, "00000000000000000042");
    cr_assert(cks_md_flush_version_parse(out, &v) && v == 42);
    cr_assert(!cks_md_flush_version_parse("0000000000000000042", &v), "19 digits");
    cr_assert(!cks_md_flush_version_parse("99999999999999999999", &v), "past 2^64");
    cr_assert(!cks_md_flush_version_parse(".0000000000000000042", &v));
}

Test(flushfmt, manifest_round_trip)
{
    cks_md_flush_manifest_t m = {0}, r;
    cks_md_object_t objs[3];
    uint16_t servers[2] = {3, 65535};
    const char *keys[3] = {"dense", "with space\nand newline", "\xc3\xa9xpert/7"};
    char err[256];

    memcpy(m.job, "job one", 7);
    m.job_len      = 7;
    m.v.version    = 12;
    m.v.parent     = 11;
    m.v.state      = CKS_VSTATE_DEGRADED;
    m.v.nranks     = 4;
    m.v.ec_k       = 4;
    m.v.ec_m       = 2;
    m.v.chunk_size = 65536;
    m.v.redundancy = 1;
    m.v.missing    = 3;
    m.v.nobjects   = 2;
    m.v.bytes      = 999;
    for (int i = 0; i < 3; i++) {
        memset(&objs[i], 0, sizeof(objs[i]));
        snprintf(objs[i].key, sizeof(objs[i].key), "%s", keys[i]);
        objs[i].key_len        = (uint32_t)strlen(keys[i]);
        objs[i].kind           = CKS_KIND_EXPERT;
        objs[i].layer          = i - 1;
        objs[i].expert         = 7 * i;
        objs[i].rank           = -1;
        objs[i].size           = (uint64_t)i << 40;
        objs[i].crc64          = 0xfedcba9876543210ull ^ (uint64_t)i;
        objs[i].source_version = 10 + (uint64_t)i;
    }
    m.objs     = objs;
    m.nobjs    = 3;
    m.servers  = servers;
    m.nservers = 2;
    FILE *f    = tmp_file();
    cr_assert_eq(cks_md_flush_manifest_write(f, &m), CKS_OK);
    fclose(f);
    cr_assert_eq(cks_md_flush_manifest_read(path, &r, err, sizeof(err)), CKS_OK, "%s", err);
    unlink(path);
    cr_assert_eq(r.job_len, 7);
    cr_assert(memcmp(r.job, "job one", 7) == 0);
    cr_assert_eq(r.v.version, 12);
    cr_assert_eq(r.v.parent, 11);
    cr_assert_eq(r.v.state, CKS_VSTATE_DEGRADED);
    cr_assert_eq(r.v.ec_k, 4);
    cr_assert_eq(r.v.ec_m, 2);
    cr_assert_eq(r.v.chunk_size, 65536);
    cr_assert_eq(r.v.missing, 3);
    cr_assert_eq(r.v.nobjects, 2);
    cr_assert_eq(r.v.bytes, 999);
    cr_assert_eq(r.nservers, 2);
    cr_assert_eq(r.servers[1], 65535);
    cr_assert_eq(r.nobjs, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_str_eq(r.objs[i].key, keys[i]);
        cr_assert_eq(r.objs[i].layer, i - 1);
        cr_assert_eq(r.objs[i].size, (uint64_t)i << 40);
        cr_assert_eq(r.objs[i].crc64, objs[i].crc64);
        cr_assert_eq(r.objs[i].source_version, 10 + (uint64_t)i);
    }
    cks_md_flush_manifest_free(&r);
}

Test(flushfmt, index_round_trip_and_damage)
{
    cks_md_flush_chunk_t c = {0}, *got = NULL;
    size_t n = 0;
    char err[256];
    snprintf(c.key, sizeof(c.key), "k 1");
    c.key_len = 3;
    c.source  = 5;
    c.stripe  = 1u << 20;
    c.idx     = 5;
    c.offset  = 1ull << 33;
    c.len     = 65536;
    c.crc64   = 0x0123456789abcdefull;
    FILE *f   = tmp_file();
    cr_assert_eq(cks_md_flush_index_head(f), CKS_OK);
    cr_assert_eq(cks_md_flush_index_chunk(f, &c), CKS_OK);
    cr_assert_eq(cks_md_flush_index_chunk(f, &c), CKS_OK);
    cr_assert_eq(cks_md_flush_index_end(f, 2), CKS_OK);
    fclose(f);
    cr_assert_eq(cks_md_flush_index_read(path, &got, &n, err, sizeof(err)), CKS_OK, "%s", err);
    unlink(path);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(got[1].key, "k 1");
    cr_assert_eq(got[1].stripe, 1u << 20);
    cr_assert_eq(got[1].offset, 1ull << 33);
    cr_assert_eq(got[1].crc64, c.crc64);
    free(got);

    static const char *bad[] = {
        /* cut short: no end line */
        "ckstore-flush-index 1\nchunk 5 0 0 0 65536 0123456789abcdef 6b\n",
        /* the count disagrees */
        "ckstore-flush-index 1\nchunk 5 0 0 0 65536 0123456789abcdef 6b\nend 2\n",
        /* a key that is not hex, or holds a NUL */
        "ckstore-flush-index 1\nchunk 5 0 0 0 65536 0123456789abcdef 6z\nend 1\n",
        "ckstore-flush-index 1\nchunk 5 0 0 0 65536 0123456789abcdef 6b00\nend 1\n",
        /* offset + length past 2^64 */
        "ckstore-flush-index 1\nchunk 5 0 0 18446744073709551615 2 0 6b\nend 1\n",
        /* another format, a last line without its newline */
        "ckstore-flush-index 2\nend 0\n",
        "ckstore-flush-index 1\nend 0",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_text(bad[i]);
        err[0] = '\0';
        cr_assert_eq(cks_md_flush_index_read(path, &got, &n, err, sizeof(err)), CKS_ERR_IO,
                     "damaged index %zu read", i);
        cr_assert(err[0] != '\0', "no reason for damaged index %zu", i);
        unlink(path);
    }
}

Test(flushfmt, damaged_manifests_are_refused)
{
    cks_md_flush_manifest_t r;
    char err[256];
    static const char *head = "ckstore-flush 1\njob 6a\nversion 3\nparent 18446744073709551615\n"
                              "state 3\ngeometry 4 2 65536\n";
    static const char *tails[] = {
        "objects 1\nobject 0 -1 -1 -1 10 0000000000000001 3 6b\n",          /* no end */
        "objects 2\nobject 0 -1 -1 -1 10 0000000000000001 3 6b\nend 2\n",   /* one short */
        "objects 1\nobject 0 -1 -1 -1 10 0000000000000001 3 6b\nend 1\nx\n", /* fine */
        "objects 1\nobject 0 -1 -1 -1 10 zz 3 6b\nend 1\n",                 /* bad CRC */
        "object 0 -1 -1 -1 10 0000000000000001 3 6b\nend 1\n",              /* no count */
    };
    char text[1024];
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
        snprintf(text, sizeof(text), "%s%s", head, tails[i]);
        write_text(text);
        cks_status_t st = cks_md_flush_manifest_read(path, &r, err, sizeof(err));
        unlink(path);
        if (i == 2) {
            /* what follows the end line is not read */
            cr_assert_eq(st, CKS_OK, "%s", err);
            cr_assert_eq(r.nobjs, 1);
            cks_md_flush_manifest_free(&r);
        } else {
            cr_assert_eq(st, CKS_ERR_IO, "damaged manifest %zu read", i);
        }
    }
    /* no geometry */
    write_text("ckstore-flush 1\njob 6a\nversion 3\nparent 1\nstate 3\nobjects 0\nend 0\n");
    cr_assert_eq(cks_md_flush_manifest_read(path, &r, err, sizeof(err)), CKS_ERR_IO);
    unlink(path);
    /* another format */
    write_text("ckstore-flush 9\n");
    cr_assert_eq(cks_md_flush_manifest_read(path, &r, err, sizeof(err)), CKS_ERR_UNSUPPORTED);
    unlink(path);
    cr_assert_eq(cks_md_flush_manifest_read("/nonexistent/MANIFEST", &r, err, sizeof(err)),
                 CKS_ERR_NO_SUCH_VERSION);
}
