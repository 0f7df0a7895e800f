/*
 * End-to-end: the durable tier. Six real ckstore-server processes on
 * 127.0.0.1 (ports picked at run time, stopped by pid), RS(4,2), 64 KiB
 * chunks; versions flushed to a directory under the test's own temporary
 * directory.
 *
 *  - flushed, then every server SIGKILLed and its arena and metadata
 *    deleted: an empty cluster of another size (7 servers) does not have
 *    the version, a restore with the flush directory reads it bit-exact
 *    (whole objects and a byte range), and `ckstore import` loads it back
 *    into the memory tier, from which it restores bit-exact;
 *  - a corrupted chunk file: one bad chunk is found by its CRC and decoded
 *    around (exact bytes); a stripe with more bad chunks than parity fails
 *    with CKS_ERR_CRC_MISMATCH naming the object;
 *  - a flush asked for by a client whose servers are all killed halfway
 *    (fault point flush_die): the call fails and says why, nothing is
 *    published; restarted, the servers resume the recorded request by
 *    themselves and leave nothing of the dead flush behind;
 *  - the publishing server killed after its manifest, before the rename
 *    (flush_publish_die): the client asks the next server, which flushes
 *    and publishes;
 *  - a partial-expert child flushed and restored without its parent in
 *    memory: every object, inherited ones included, with its source version.
 */
#include "ckstore.h"
#include "cks_faults_gate.h"
#include "cks_md.h"
#include "cks_test.h"

#define CKS_TEST_SUITE_ARENA (128 * MiB)
#include "cks_test_suite.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBJ  6
#define ALL_OBJS ((1u << NOBJ) - 1) /* write_version(): every object */
#define JOB   "flush/job"

static cks_test_cluster_t cl2;
static char fdir[256];
static const uint64_t obj_sizes[NOBJ] = {0, 1, 4097, K * CHUNK, 3 * MiB + 12345, 700001};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Every server the tests start flushes to fdir (a server writes only to its
 * own --flush-dir), plus `more` flags. */
static void server_flags(const char *more)
{
    char flags[400];
    snprintf(flags, sizeof(flags), "--flush-dir %s%s%s", fdir, more ? " " : "", more ? more : "");
    cks_test_set_server_flags(flags);
}

static void setup(void)
{
    snprintf(fdir, sizeof(fdir), "/tmp/cks-test-flush-XXXXXX");
    cr_assert_not_null(mkdtemp(fdir));
    server_flags(NULL);
    cks_test_objs_init(&objs, obj_sizes, NOBJ, cks_test_seed(20261124));
}

static void teardown(void)
{
    cks_test_suite_teardown();
    cks_test_cluster_cleanup(&cl2);
    if (getenv("CKS_TEST_KEEP") == NULL && fdir[0] != '\0') {
        nftw(fdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    }
}

TestSuite(flush, .init = setup, .fini = teardown, .timeout = 60);

static void key_of(size_t i, char *key, size_t len)
{
    snprintf(key, len, "layer%zu/expert%zu", i, i * 3);
}

static cks_client_h connect_to(const cks_test_cluster_t *c)
{
    cks_client_h h = NULL;
    cr_assert_eq(cks_test_connect_cluster(c->map, K, M, CHUNK, 20000, &h), CKS_OK,
                 "connect to the cluster in %s", c->map);
    return h;
}

/* Write version v: objects whose bit in `which` is set; parent or CKS_NO_PARENT. */
static void write_version(cks_client_h c, uint64_t v, uint64_t parent, unsigned which)
{
    cks_version_params_t vp = {0};
    char key[64];
    vp.field_mask = CKS_VERSION_FIELD_PARENT;
    vp.job        = JOB;
    vp.version    = v;
    vp.parent     = parent;
    cr_assert_eq(cks_version_begin(c, &vp), CKS_OK);
    for (size_t i = 0; i < NOBJ; i++) {
        if (!(which & (1u << i))) {
            continue;
        }
        key_of(i, key, sizeof(key));
        cks_test_objs_fill(&objs, i, v);
        cks_tags_t tags = {CKS_KIND_EXPERT, (int32_t)i, (int32_t)(i * 3), 0};
        cr_assert_eq(cks_test_put_tagged(c, JOB, v, key, objs.src[i], objs.size[i], tags),
                     CKS_OK, "put %s", key);
    }
    cr_assert_eq(cks_version_seal(c, JOB, v), CKS_OK);
}

static cks_status_t flush(cks_client_h c, uint64_t v)
{
    cks_status_t st = cks_version_flush(c, JOB, v, fdir);
    if (st != CKS_OK) {
        char err[512];
        cks_client_last_error(c, err, sizeof(err));
        cr_log_info("flush of version %" PRIu64 ": %s - %s", v, cks_status_string(st), err);
    }
    return st;
}

static cks_restore_h open_durable(cks_client_h c, uint64_t v, uint32_t flags)
{
    cks_restore_params_t rp = {0};
    cks_restore_h r         = NULL;
    rp.field_mask = CKS_RESTORE_FIELD_FLUSH_DIR | (flags ? CKS_RESTORE_FIELD_FLAGS : 0);
    rp.job        = JOB;
    rp.version    = v;
    rp.flags      = flags;
    rp.flush_dir  = fdir;
    cks_status_t st = cks_restore_open_ex(c, &rp, &r);
    cr_assert_eq(st, CKS_OK, "open version %" PRIu64 " with flush dir: %s", v,
                 cks_status_string(st));
    return r;
}

/* open_durable(c, v, 0), with its record in *info (asserts that it is
 * version v's). */
static cks_restore_h open_durable_info(cks_client_h c, uint64_t v, cks_version_info_t *info)
{
    cks_restore_h r = open_durable(c, v, 0);
    cks_status_t st = cks_restore_info(r, info);

    cr_assert_eq(st, CKS_OK, "info of version %" PRIu64 " from the flush dir: %s", v,
                 cks_status_string(st));
    cr_assert_eq(info->version, v, "version %" PRIu64 " opened, %" PRIu64 " found", v,
                 info->version);
    return r;
}

/* Object i as written in version `written`, read whole through r: exact,
 * with its source version. */
static void check_object(cks_restore_h r, size_t i, uint64_t written)
{
    cks_object_info_t o;
    uint64_t got = 0;
    char key[64];
    uint8_t *dst = malloc(objs.size[i] + 1);
    cr_assert_not_null(dst);
    key_of(i, key, sizeof(key));
    cks_test_objs_fill(&objs, i, written);
    cr_assert_eq(cks_object_stat(r, key, &o), CKS_OK, "stat %s", key);
    cr_assert_eq(o.size, objs.size[i]);
    cr_assert_eq(o.source_version, written, "%s from version %" PRIu64 ", not %" PRIu64, key,
                 o.source_version, written);
    cr_assert_eq(o.tags.expert, (int32_t)(i * 3));
    cr_assert_eq(cks_test_get_whole(r, key, dst, objs.size[i], &got), CKS_OK, "get %s", key);
    cr_assert_eq(got, objs.size[i]);
    cr_assert(memcmp(dst, objs.src[i], objs.size[i]) == 0, "%s is not bit-exact", key);
    free(dst);
}

/* Every object of version v restores bit-exact from its flushed copy. */
static void check_durable(cks_client_h c, uint64_t v)
{
    cks_restore_h r = open_durable(c, v, CKS_RESTORE_DURABLE);
    for (size_t i = 0; i < NOBJ; i++) {
        check_object(r, i, v);
    }
    cks_restore_close(r);
}

static void check_range(cks_restore_h r, size_t i, uint64_t written, uint64_t off,
                        uint64_t len)
{
    uint64_t got = 0;
    char key[64];
    uint8_t *dst = malloc(len + 1);
    cr_assert_not_null(dst);
    key_of(i, key, sizeof(key));
    cks_test_objs_fill(&objs, i, written);
    cks_get_params_t g = cks_test_get_params(key, dst, len);
    g.field_mask       = CKS_GET_FIELD_RANGE;
    g.offset           = off;
    g.length           = len;
    cr_assert_eq(cks_get(r, &g, &got), CKS_OK);
    cr_assert_eq(got, len);
    cr_assert(memcmp(dst, objs.src[i] + off, len) == 0, "range of %s is not bit-exact", key);
    free(dst);
}

/* The published directory of version v. */
static void version_dir(uint64_t v, char *out, size_t len)
{
    char jobdir[512], name[32];
    cr_assert_eq(cks_md_flush_job_dir(fdir, JOB, strlen(JOB), jobdir, sizeof(jobdir)), CKS_OK);
    cks_md_flush_version_name(v, name, sizeof(name));
    snprintf(out, len, "%s/%s", jobdir, name);
}

/* Entries of the job's flush directory whose name has `part`. */
static int job_entries_with(const char *part)
{
    char jobdir[512];
    struct dirent *e;
    int n = 0;
    cr_assert_eq(cks_md_flush_job_dir(fdir, JOB, strlen(JOB), jobdir, sizeof(jobdir)), CKS_OK);
    DIR *d = opendir(jobdir);
    if (d == NULL) {
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        n += strstr(e->d_name, part) != NULL;
    }
    closedir(d);
    return n;
}

/* Temporary directories left in the job's flush directory. */
static int tmp_dirs_left(void)
{
    return job_entries_with(".tmp-");
}

/* Start the cluster, its servers with `more` flags besides --flush-dir
 * (NULL: none; servers started later get none), and connect: the client. */
static cks_client_h start_and_connect(const char *more)
{
    server_flags(more);
    cks_test_suite_start(NULL, -1);
    server_flags(NULL);
    return connect_to(&cl);
}

/* start_and_connect(more), then version 1 of every object: the client. */
static cks_client_h start_with_v1(const char *more)
{
    cks_client_h c = start_and_connect(more);

    write_version(c, 1, CKS_NO_PARENT, ALL_OBJS);
    return c;
}

/* Start the cluster, then restart the coordinator of version v of JOB with
 * `faults` armed on it alone: its index. */
static size_t start_with_faulty_coordinator(uint64_t v, const char *faults)
{
    cks_test_suite_start(NULL, -1);
    int coord = cks_test_coordinator(cl.map, JOB, v);
    cr_assert(coord >= 0, "no coordinator for version %llu in %s", (unsigned long long)v,
              cl.map);
    snprintf(cl.srv[coord].faults, sizeof(cl.srv[coord].faults), "%s", faults);
    cks_test_server_stop(&cl.srv[coord], SIGTERM);
    cr_assert_eq(cks_test_server_restart(&cl.srv[coord]), 0, "restart of server %d with %s",
                 coord, faults);
    return (size_t)coord;
}

/* The CLI with these arguments (a4 may be NULL); its stdout into `out`
 * when not NULL. Its exit status. */
static int run_cli_out(const char *out, const char *map, const char *a1, const char *a2,
                       const char *a3, const char *a4)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (out != NULL) {
            int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) {
                _exit(126);
            }
        }
        execl(CKS_CLI_BIN, "ckstore", "--cluster", map, a1, a2, a3, a4, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static int run_cli(const char *map, const char *a1, const char *a2, const char *a3,
                   const char *a4)
{
    return run_cli_out(NULL, map, a1, a2, a3, a4);
}

/* Does the file have a line with these words in this order? */
static int file_has_line(const char *path, const char *w1, const char *w2, const char *w3)
{
    char line[512];
    int found = 0;
    FILE *f   = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        char *a = strstr(line, w1), *b = a ? strstr(a + strlen(w1), w2) : NULL;
        found   = b != NULL && strstr(b + strlen(w2), w3) != NULL;
    }
    fclose(f);
    return found;
}

Test(flush, killed_cluster_restores_from_disk_and_imports)
{
    cks_client_h c;
    cks_version_info_t info;
    cks_restore_h r;
    struct stat st;

    c = start_with_v1(NULL);
    cr_assert_eq(flush(c, 1), CKS_OK);
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 1, &info), CKS_OK);
    cr_assert_eq(info.nobjects, NOBJ);
    cr_assert_eq(info.ec_k, K);
    cr_assert_eq(cks_version_flush(c, JOB, 1, fdir), CKS_ERR_VERSION_EXISTS,
                 "a second flush of the same version is refused");
    cr_assert_eq(tmp_dirs_left(), 0);
    cks_client_destroy(c);

    /* every server killed, its arena and metadata gone */
    for (size_t i = 0; i < NSRV; i++) {
        cks_test_cluster_kill(&cl, i);
    }
    cks_test_cluster_cleanup(&cl);
    for (size_t i = 0; i < NSRV; i++) {
        cr_assert(stat(cl.srv[i].arena, &st) != 0, "arena %s still there", cl.srv[i].arena);
        cr_assert(stat(cl.srv[i].data, &st) != 0, "metadata %s still there", cl.srv[i].data);
    }
    memset(&cl, 0, sizeof(cl));

    /* an empty cluster of another size */
    cr_assert_eq(cks_test_cluster_start(&cl2, NSRV + 1, 3, 128 * MiB, -1, NULL), 0);
    c = connect_to(&cl2);
    cks_status_t rs = cks_restore_open(c, JOB, 1, &r);
    cr_assert(rs == CKS_ERR_NO_SUCH_VERSION || rs == CKS_ERR_NO_SUCH_JOB,
              "the empty cluster has no version 1 (%s)", cks_status_string(rs));
    r = open_durable_info(c, 1, &info);
    for (size_t i = 0; i < NOBJ; i++) {
        check_object(r, i, 1);
    }
    check_range(r, 4, 1, 2 * MiB - 7, 300000); /* across stripes */
    cks_restore_close(r);
    /* latest from disk */
    r = open_durable(c, CKS_VERSION_LATEST, 0);
    cr_assert_eq(cks_restore_info(r, &info), CKS_OK);
    cr_assert_eq(info.version, 1);
    cks_restore_close(r);
    cks_client_destroy(c);

    /* import: back into the memory tier through ordinary puts */
    cr_assert_eq(run_cli(cl2.map, "import", fdir, JOB, "1"), 0, "ckstore import");
    c = connect_to(&cl2);
    cr_assert_eq(cks_restore_open(c, JOB, 1, &r), CKS_OK);
    cr_assert_eq(cks_restore_info(r, &info), CKS_OK);
    cr_assert(info.state == CKS_VSTATE_PROTECTED, "imported version is %s",
              cks_vstate_string(info.state));
    for (size_t i = 0; i < NOBJ; i++) {
        check_object(r, i, 1);
    }
    cks_restore_close(r);
    cks_client_destroy(c);
}

/* Flip one byte of chunk (object i, stripe s, idx) in the server file that
 * holds it; 1 when found. */
static int corrupt_chunk(uint64_t v, size_t i, uint64_t stripe, unsigned idx)
{
    char vdir[600], path[700], err[256], key[64];
    cks_md_flush_manifest_t mf;
    int done = 0;
    version_dir(v, vdir, sizeof(vdir));
    key_of(i, key, sizeof(key));
    snprintf(path, sizeof(path), "%s/MANIFEST", vdir);
    cr_assert_eq(cks_md_flush_manifest_read(path, &mf, err, sizeof(err)), CKS_OK, "%s", err);
    for (size_t s = 0; s < mf.nservers && !done; s++) {
        cks_md_flush_chunk_t *cs = NULL;
        size_t n                 = 0;
        snprintf(path, sizeof(path), "%s/server-%u.index", vdir, (unsigned)mf.servers[s]);
        cr_assert_eq(cks_md_flush_index_read(path, &cs, &n, err, sizeof(err)), CKS_OK, "%s",
                     err);
        for (size_t j = 0; j < n; j++) {
            if (strcmp(cs[j].key, key) == 0 && cs[j].stripe == stripe && cs[j].idx == idx) {
                snprintf(path, sizeof(path), "%s/server-%u.chunks", vdir,
                         (unsigned)mf.servers[s]);
                int fd = open(path, O_RDWR);
                cr_assert(fd >= 0);
                uint8_t b;
                off_t at = (off_t)(cs[j].offset + 17);
                cr_assert_eq(pread(fd, &b, 1, at), 1);
                b ^= 0x5a;
                cr_assert_eq(pwrite(fd, &b, 1, at), 1);
                close(fd);
                done = 1;
                break;
            }
        }
        free(cs);
    }
    cks_md_flush_manifest_free(&mf);
    return done;
}

Test(flush, corrupted_file_is_found_by_its_crc)
{
    cks_client_h c;
    cks_restore_h r;
    cks_get_params_t g = {0};
    char err[512];

    c = start_with_v1(NULL);
    cr_assert_eq(flush(c, 1), CKS_OK);

    /* one bad data chunk: found, and decoded around from the stripe's others */
    cr_assert(corrupt_chunk(1, 4, 1, 0));
    r = open_durable(c, 1, CKS_RESTORE_DURABLE);
    check_object(r, 4, 1);
    /* three bad chunks of one stripe (more than m = 2): the object fails, named */
    cr_assert(corrupt_chunk(1, 4, 1, 1));
    cr_assert(corrupt_chunk(1, 4, 1, 2));
    uint8_t *dst  = malloc(objs.size[4]);
    g.key         = "layer4/expert12";
    g.buffer      = dst;
    g.buffer_size = objs.size[4];
    cks_status_t st = cks_get(r, &g, NULL);
    cks_client_last_error(c, err, sizeof(err));
    cr_assert_eq(st, CKS_ERR_CRC_MISMATCH, "get: %s (%s)", cks_status_string(st), err);
    cr_assert(strstr(err, "'layer4/expert12'") != NULL, "the error names the object: %s",
              err);
    cr_log_info("reported: %s", err);
    /* the other objects still restore */
    check_object(r, 3, 1);
    free(dst);
    cks_restore_close(r);
    cks_client_destroy(c);
}

Test(flush, publisher_killed_before_rename_another_publishes)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    cks_client_h c;
    char path[700];
    struct stat st;

    /* the fault on the version's coordinator, which the client asks first */
    size_t coord = start_with_faulty_coordinator(1, "flush_publish_die:once");

    c = connect_to(&cl);
    write_version(c, 1, CKS_NO_PARENT, ALL_OBJS);
    cr_assert_eq(flush(c, 1), CKS_OK, "the next server publishes");
    cr_assert(cks_test_log_has(cl.srv[coord].log, "fault flush_publish_die", 5000),
              "the coordinator did not die publishing");
    version_dir(1, path, sizeof(path));
    cr_assert(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    cr_assert_eq(tmp_dirs_left(), 0);
    check_durable(c, 1);
    cks_client_destroy(c);
}

Test(flush, partial_expert_child_restores_without_its_parent)
{
    cks_client_h c;
    cks_restore_h r;
    cks_version_info_t info;

    c = start_with_v1(NULL);
    write_version(c, 2, 1, (1u << 1) | (1u << 4)); /* objects 1 and 4 rewritten */
    cr_assert_eq(flush(c, 2), CKS_OK);
    cks_version_info_t mem;
    cr_assert_eq(cks_version_stat(c, JOB, 2, &mem), CKS_OK);
    /* neither version in memory any more */
    cr_assert_eq(cks_version_delete(c, JOB, 2), CKS_OK);
    cr_assert_eq(cks_version_delete(c, JOB, 1), CKS_OK);
    cks_status_t vs = cks_version_stat(c, JOB, 1, &info);
    cr_assert(vs == CKS_ERR_NO_SUCH_VERSION || vs == CKS_ERR_NO_SUCH_JOB,
              "version 1 is gone from memory (%s)", cks_status_string(vs));

    r = open_durable_info(c, 2, &info);
    cr_assert_eq(info.parent, 1);
    cr_assert_eq(info.nobjects, mem.nobjects, "the record as the memory tier had it");
    cr_assert_eq(info.bytes, mem.bytes);
    cr_assert_eq(info.state, mem.state);
    for (size_t i = 0; i < NOBJ; i++) {
        check_object(r, i, (i == 1 || i == 4) ? 2 : 1);
    }
    cks_restore_close(r);
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 1, &info), CKS_ERR_NO_SUCH_VERSION,
                 "only the child was flushed");
    cks_client_destroy(c);
}

Test(flush, every_second_version_flushed_by_policy)
{
    cks_client_h c;
    cks_version_info_t info;

    c = start_and_connect("--flush-every 2");
    for (uint64_t v = 1; v <= 3; v++) {
        write_version(c, v, CKS_NO_PARENT, ALL_OBJS);
    }
    /* the coordinator flushes version 2 after it commits, in the background:
     * look for it every 50 ms, for at most 20 s */
    cks_status_t st = CKS_ERR_NO_SUCH_VERSION;
    for (int i = 0; i < 400 && st != CKS_OK; i++) {
        st = cks_flushed_stat(fdir, JOB, 2, &info);
        if (st != CKS_OK) {
            usleep(50000);
        }
    }
    cr_assert_eq(st, CKS_OK, "version 2 was not flushed by the policy");
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 1, &info), CKS_ERR_NO_SUCH_VERSION);
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 3, &info), CKS_ERR_NO_SUCH_VERSION);
    /* a flush that names no directory goes to the servers' --flush-dir */
    cr_assert_eq(cks_version_flush(c, JOB, 3, NULL), CKS_OK);
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 3, &info), CKS_OK);
    /* and one that names another directory is refused */
    cr_assert_eq(cks_version_flush(c, JOB, 1, "/tmp"), CKS_ERR_INVALID_PARAM);
    /* ckstore versions JOB DIR: which are flushed, and those flushed only */
    cr_assert_eq(cks_version_delete(c, JOB, 2), CKS_OK);
    char out[300];
    snprintf(out, sizeof(out), "%s/versions.txt", fdir);
    cr_assert_eq(run_cli_out(out, cl.map, "versions", JOB, fdir, NULL), 0);
    cr_assert(file_has_line(out, " 1 ", "PROTECTED", " no"), "version 1: in memory only");
    cr_assert(file_has_line(out, " 2 ", "-", " only"), "version 2: flushed only");
    cr_assert(file_has_line(out, " 3 ", "PROTECTED", " yes"), "version 3: both");
    check_durable(c, 2);
    cks_client_destroy(c);
}

/* A client never chooses where a server writes: servers started without
 * --flush-dir refuse every flush, whatever directory it names, and write
 * nothing there. */
Test(flush, servers_without_a_flush_dir_refuse_to_write)
{
    cks_client_h c;
    char why[512] = "";
    struct stat st;

    cks_test_set_server_flags(NULL);
    cks_test_suite_start(NULL, -1);
    server_flags(NULL);
    c = connect_to(&cl);
    write_version(c, 1, CKS_NO_PARENT, ALL_OBJS);
    cr_assert_eq(cks_version_flush(c, JOB, 1, fdir), CKS_ERR_UNSUPPORTED);
    cks_client_last_error(c, why, sizeof(why));
    cr_assert(strstr(why, "--flush-dir") != NULL, "no reason: '%s'", why);
    cr_assert_eq(cks_version_flush(c, JOB, 1, NULL), CKS_ERR_UNSUPPORTED);
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", fdir, JOB);
    cr_assert_neq(stat(path, &st), 0, "%s was written", path);
    cks_client_destroy(c);
}

Test(flush, server_down_flushes_what_the_others_hold)
{
    cks_client_h c;
    cks_restore_h r;
    cks_version_info_t info;
    char vdir[600], path[700];
    struct stat st;

    c = start_with_v1(NULL);
    /* a server that is not the coordinator goes down after the commit */
    int coord = cks_test_coordinator(cl.map, JOB, 1);
    size_t down = (size_t)(coord + 1) % NSRV;
    cks_test_cluster_kill(&cl, down);
    cr_assert_eq(flush(c, 1), CKS_OK, "five servers hold k chunks of every stripe");
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 1, &info), CKS_OK);
    version_dir(1, vdir, sizeof(vdir));
    snprintf(path, sizeof(path), "%s/server-%d.index", vdir, cl.srv[down].id);
    cr_assert(stat(path, &st) != 0, "no files of the server that was down");
    /* every stripe that had a chunk there is decoded from the others */
    r = open_durable(c, 1, CKS_RESTORE_DURABLE);
    for (size_t i = 0; i < NOBJ; i++) {
        check_object(r, i, 1);
    }
    check_range(r, 4, 1, 12345, 2 * MiB);
    cks_restore_close(r);
    cks_client_destroy(c);
}

/* Bytes in the biggest server-<id>.chunks file of flushed version v. */
static uint64_t biggest_chunk_file(uint64_t v)
{
    char vdir[600], path[900];
    struct dirent *e;
    struct stat st;
    uint64_t most = 0;
    version_dir(v, vdir, sizeof(vdir));
    DIR *d = opendir(vdir);
    cr_assert_not_null(d, "%s", vdir);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 7 && strcmp(e->d_name + n - 7, ".chunks") == 0) {
            snprintf(path, sizeof(path), "%s/%s", vdir, e->d_name);
            cr_assert_eq(stat(path, &st), 0);
            most = CKS_MAX(most, (uint64_t)st.st_size);
        }
    }
    closedir(d);
    return most;
}

/* --flush-rate caps what each server's flush writes per second: a flush
 * takes at least what the cap implies for the server with the most bytes
 * (the flush thread's bucket holds at most an eighth of a second ahead),
 * and the version is complete on disk. A bound, not a measure of speed. */
Test(flush, flush_rate_paces_the_writes)
{
    cks_client_h c;
    const uint64_t rate = 1 * MiB;

    c = start_with_v1("--flush-rate 1M");
    uint64_t t0 = cks_time_ns();
    cr_assert_eq(flush(c, 1), CKS_OK);
    double took = (double)(cks_time_ns() - t0) * 1e-9;
    uint64_t most = biggest_chunk_file(1);
    double least  = ((double)most - (double)rate / 8) / (double)rate;
    cr_log_info("flush at 1 MiB/s per server: %.2f s, biggest server file %" PRIu64
                " bytes (at least %.2f s)",
                took, most, least);
    cr_assert_gt(most, rate, "the biggest server file is %" PRIu64 " bytes", most);
    cr_assert(took >= least * 0.95, "the flush took %.2f s, the cap implies at least %.2f s",
              took, least);
    cr_assert(took < least + 30, "the flush took %.2f s", took);
    check_durable(c, 1);
    cks_client_destroy(c);
}

/* Look for the flushed copy of version v every 50 ms for at most ms. */
static cks_status_t wait_flushed(uint64_t v, int ms, cks_version_info_t *info)
{
    cks_status_t st = CKS_ERR_NO_SUCH_VERSION;
    for (int i = 0; i <= ms / 50 && st != CKS_OK; i++) {
        st = cks_flushed_stat(fdir, JOB, v, info);
        if (st != CKS_OK) {
            usleep(50000);
        }
    }
    return st;
}

/* A flush due by --flush-every whose coordinator is SIGKILLed halfway
 * through writing its chunks (flush_die) publishes nothing; started again
 * on its arena and metadata, the coordinator finds the version due and not
 * published, flushes it again, and the copy on disk is complete (bit-exact)
 * with nothing of the dead flush left behind. */
Test(flush, policy_flush_killed_midway_resumes_after_restart)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    cks_client_h c;
    cks_version_info_t info;

    server_flags("--flush-every 2");
    size_t coord = start_with_faulty_coordinator(2, "flush_die:once");

    c = connect_to(&cl);
    write_version(c, 1, CKS_NO_PARENT, ALL_OBJS);
    write_version(c, 2, CKS_NO_PARENT, ALL_OBJS);
    cks_client_destroy(c);
    cr_assert(cks_test_log_has(cl.srv[coord].log, "fault flush_die", 20000),
              "the coordinator did not die in its policy flush of version 2");
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 2, &info), CKS_ERR_NO_SUCH_VERSION,
                 "nothing published by the dead flush");
    /* the other servers' files of the dead flush (wait for one at most 5 s) */
    for (int i = 0; i < 100 && tmp_dirs_left() == 0; i++) {
        usleep(50000);
    }
    cr_assert_gt(tmp_dirs_left(), 0, "the dead flush left no temporary directory");

    /* back on its arena and metadata, without the fault: it resumes */
    cl.srv[coord].faults[0] = '\0';
    cks_test_server_stop(&cl.srv[coord], SIGKILL);
    cr_assert_eq(cks_test_server_restart(&cl.srv[coord]), 0);
    cr_assert_eq(wait_flushed(2, 30000, &info), CKS_OK,
                 "version 2 was not flushed after the restart");
    cr_assert(cks_test_log_has(cl.srv[coord].log, "due and not published", 0),
              "the restarted coordinator did not say why it flushed");
    cr_assert_eq(info.nobjects, NOBJ);
    /* the publisher removes it right after the rename: look for 5 s at most */
    for (int i = 0; i < 100 && tmp_dirs_left() > 0; i++) {
        usleep(50000);
    }
    cr_assert_eq(tmp_dirs_left(), 0, "what the dead flush left is removed");
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 1, &info), CKS_ERR_NO_SUCH_VERSION,
                 "version 1 is not due");
    c = connect_to(&cl);
    check_durable(c, 2);
    cks_client_destroy(c);
}


/* A flush asked for by a client (cks_version_flush) whose servers are all
 * SIGKILLed halfway through writing their chunks (flush_die): the call fails
 * within its bound and says why, and nothing is published. Started again on
 * their arenas and metadata, without the fault, the servers resume it by
 * themselves (the request was recorded in the flush directory): the version
 * is published complete and bit-exact, and neither the dead flush's files
 * nor the request's record are left. */
Test(flush, requested_flush_killed_midway_resumes_after_restart)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    cks_client_h c;
    cks_version_info_t info;
    char err[512] = "";

    cks_test_suite_start("flush_die:once", CKS_TEST_ALL);
    c = connect_to(&cl);
    write_version(c, 1, CKS_NO_PARENT, ALL_OBJS);
    uint64_t t0     = cks_time_ns();
    cks_status_t st = flush(c, 1);
    double took     = (double)(cks_time_ns() - t0) * 1e-9;
    cks_client_last_error(c, err, sizeof(err));
    cr_log_info("the flush whose servers died: %s after %.1f s: %s", cks_status_string(st),
                took, err);
    cr_assert_neq(st, CKS_OK, "every server died in the flush: the call fails");
    cr_assert(took < 60, "the caller waited %.1f s", took);
    cr_assert(err[0] != '\0', "the caller is not told why");
    cks_client_destroy(c);
    for (size_t i = 0; i < NSRV; i++) {
        cr_assert(cks_test_log_has(cl.srv[i].log, "fault flush_die", 5000),
                  "server %zu did not die in the flush", i);
    }
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 1, &info), CKS_ERR_NO_SUCH_VERSION,
                 "nothing published by the dead flush");
    cr_assert_gt(tmp_dirs_left(), 0, "the dead writers' files are there, unpublished");

    /* back on their arenas and metadata, without the fault: nobody asks again */
    for (size_t i = 0; i < NSRV; i++) {
        cl.srv[i].faults[0] = '\0';
        cks_test_server_stop(&cl.srv[i], SIGKILL);
        cr_assert_eq(cks_test_server_restart(&cl.srv[i]), 0);
    }
    cr_assert_eq(wait_flushed(1, 30000, &info), CKS_OK,
                 "the requested flush was not resumed after the restart");
    int said = 0;
    for (size_t i = 0; i < NSRV; i++) {
        said |= cks_test_log_has(cl.srv[i].log, "asked for and not finished", 0);
    }
    cr_assert(said, "no server said why it flushed the version again");
    cr_assert_eq(info.nobjects, NOBJ);
    /* the dead flush's files and the request's record go once it is
     * published (look for 15 s at most: a server's scan runs every 10 s) */
    for (int i = 0; i < 300 && (tmp_dirs_left() > 0 || job_entries_with(".req-") > 0); i++) {
        usleep(50000);
    }
    cr_assert_eq(tmp_dirs_left(), 0, "what the dead flush left is removed");
    cr_assert_eq(job_entries_with(".req-"), 0, "the request's record is removed");
    c = connect_to(&cl);
    check_durable(c, 1);
    cks_client_destroy(c);
}

/* The versions flushed to fdir, as "1,2,3". */
static void flushed_versions(char *out, size_t len)
{
    uint64_t vs[16];
    size_t n = 0, used = 0;
    int more = 0;
    cr_assert_eq(cks_flushed_list(fdir, JOB, vs, 16, &n, &more), CKS_OK);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        used += (size_t)snprintf(out + used, len - used, "%s%" PRIu64, i ? "," : "", vs[i]);
    }
}

/* --flush-keep 2: after each publish the publisher keeps the two newest
 * flushed versions of the job and every older one a kept version reads
 * objects from (a partial-expert child's parent), and removes the rest;
 * the memory tier keeps its own versions. */
Test(flush, flush_keep_retains_the_newest_and_what_they_read)
{
    cks_client_h c;
    cks_restore_h r;
    cks_version_info_t info;
    char got[128];

    c = start_with_v1("--flush-keep 2");
    write_version(c, 2, 1, (1u << 1) | (1u << 4)); /* reads the others from 1 */
    cr_assert_eq(flush(c, 1), CKS_OK);
    cr_assert_eq(flush(c, 2), CKS_OK);
    flushed_versions(got, sizeof(got));
    cr_assert_str_eq(got, "1,2");

    /* 3 and 2 are the newest two; 2 reads from 1: 1 stays */
    write_version(c, 3, CKS_NO_PARENT, ALL_OBJS);
    cr_assert_eq(flush(c, 3), CKS_OK);
    flushed_versions(got, sizeof(got));
    cr_assert_str_eq(got, "1,2,3", "kept: %s", got);

    /* 4 and 3 are the newest two, neither reads from 1 or 2: both go */
    write_version(c, 4, CKS_NO_PARENT, ALL_OBJS);
    cr_assert_eq(flush(c, 4), CKS_OK);
    flushed_versions(got, sizeof(got));
    cr_assert_str_eq(got, "3,4", "kept: %s", got);
    cr_assert_eq(job_entries_with(".del-"), 0, "a removed version's files are left");
    cr_assert_eq(tmp_dirs_left(), 0);
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 2, &info), CKS_ERR_NO_SUCH_VERSION);

    /* the memory tier still has every version; the kept ones restore from disk */
    for (uint64_t v = 1; v <= 4; v++) {
        cr_assert_eq(cks_version_stat(c, JOB, v, &info), CKS_OK, "version %" PRIu64, v);
    }
    check_durable(c, 4);
    r = open_durable(c, 3, CKS_RESTORE_DURABLE);
    check_object(r, 4, 3);
    cks_restore_close(r);
    cks_client_destroy(c);
}

/* --flush-age 3: a version is flushed once it commits when the newest
 * flushed version of its job was sealed more than 3 s before (or none is);
 * one that commits sooner is not; and the newest version is flushed by the
 * servers' scan (every 10 s) once that age has passed without a commit. */
Test(flush, flush_age_flushes_when_the_newest_flushed_is_old)
{
    cks_client_h c;
    cks_version_info_t info;

    c = start_with_v1("--flush-age 3");
    cr_assert_eq(wait_flushed(1, 10000, &info), CKS_OK, "version 1: nothing was flushed yet");
    uint64_t t1 = cks_time_ns();
    write_version(c, 2, CKS_NO_PARENT, ALL_OBJS);
    usleep(1000000);
    cr_assert_eq(cks_flushed_stat(fdir, JOB, 2, &info), CKS_ERR_NO_SUCH_VERSION,
                 "version 2 committed within 3 s of version 1's flush: not due");
    /* 3.5 s after version 1 was flushed */
    uint64_t due = t1 + 3500000000ull, now = cks_time_ns();
    if (now < due) {
        usleep((useconds_t)((due - now) / 1000));
    }
    write_version(c, 3, CKS_NO_PARENT, ALL_OBJS);
    cr_assert_eq(wait_flushed(3, 10000, &info), CKS_OK,
                 "version 3: the newest flushed (1) is older than 3 s");
    int coord = cks_test_coordinator(cl.map, JOB, 3);
    cr_assert(cks_test_log_has(cl.srv[coord].log, "older than --flush-age", 0));
    /* version 4 right after: not due at its commit; the scan flushes it
     * once version 3 is 3 s old (scans every 10 s: look for 30 s) */
    write_version(c, 4, CKS_NO_PARENT, ALL_OBJS);
    cr_assert_eq(wait_flushed(4, 30000, &info), CKS_OK,
                 "version 4 was not flushed once the newest flushed one was old");
    coord = cks_test_coordinator(cl.map, JOB, 4);
    cr_assert(cks_test_log_has(cl.srv[coord].log, "due and not published", 0),
              "version 4 was flushed by the scan");
    check_durable(c, 4);
    cks_client_destroy(c);
}

/* Flush progress, read from the flush directory: while a paced flush
 * (256 KiB/s per server) runs, cks_flushed_progress() sees it unpublished
 * with servers writing and bytes growing, and `ckstore versions JOB DIR`
 * shows "writing N%"; once it is published, the copy's chunk bytes. */
Test(flush, flush_progress_is_visible_while_it_runs)
{
    cks_client_h c;
    cks_version_info_t mem;
    cks_flush_progress_t fp;
    char out[300];

    c = start_with_v1("--flush-rate 256K");
    cr_assert_eq(cks_version_stat(c, JOB, 1, &mem), CKS_OK);
    cks_client_destroy(c);
    cr_assert_eq(cks_flushed_progress(fdir, JOB, 1, &fp), CKS_ERR_NO_SUCH_VERSION);
    cr_assert_eq(cks_flushed_progress(NULL, JOB, 1, &fp), CKS_ERR_INVALID_PARAM);

    /* the flush by the CLI, in a child; watched from here */
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
        }
        execl(CKS_CLI_BIN, "ckstore", "--cluster", cl.map, "flush", JOB, "1", fdir,
              (char *)NULL);
        _exit(127);
    }
    uint64_t most = 0, seen_writing = 0, cli_writing = 0;
    snprintf(out, sizeof(out), "%s/versions.txt", fdir);
    for (int i = 0; i < 400; i++) { /* 20 s at most */
        cks_status_t st = cks_flushed_progress(fdir, JOB, 1, &fp);
        if (st == CKS_OK && fp.published) {
            break;
        }
        if (st == CKS_OK && fp.unfinished > 0 && fp.bytes_written > 0) {
            cr_assert_geq(fp.bytes_written, most, "bytes written do not shrink");
            cr_assert_leq(fp.servers_done, fp.servers_started);
            cr_assert_leq(fp.servers_started, NSRV);
            cr_assert_gt(fp.touched_ns, 0);
            most = fp.bytes_written;
            seen_writing++;
            if (!cli_writing && fp.servers_done == 0) {
                cr_assert_eq(run_cli_out(out, cl.map, "versions", JOB, fdir, NULL), 0);
                cli_writing = file_has_line(out, " 1 ", "PROTECTED", "writing ");
            }
        }
        usleep(50000);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "ckstore flush failed");
    cr_log_info("progress seen %" PRIu64 " times, up to %" PRIu64 " bytes", seen_writing, most);
    cr_assert_gt(seen_writing, 1, "the flush was never seen under way");
    cr_assert(cli_writing, "ckstore versions did not show the flush under way");
    /* data and parity, and at most a padded stripe more per object */
    cr_assert_leq(most, mem.bytes * (K + M) / K + mem.nobjects * (K + M) * CHUNK,
                  "more bytes than the flush writes");
    cr_assert_eq(cks_flushed_progress(fdir, JOB, 1, &fp), CKS_OK);
    cr_assert(fp.published);
    cr_assert_eq(fp.unfinished, 0);
    cr_assert_geq(fp.published_bytes, mem.bytes * (K + M) / K, "the copy holds data and parity");
    cr_assert_eq(run_cli_out(out, cl.map, "versions", JOB, fdir, NULL), 0);
    cr_assert(file_has_line(out, " 1 ", "PROTECTED", " yes"));
}
