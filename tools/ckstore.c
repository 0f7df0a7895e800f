/*
 * DESIGN: the `ckstore` command line: inspect and manage what a server holds.
 * Uses only the public client API; every failure prints the status and the
 * server's message and exits non-zero.
 */
#include "ckstore.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static cks_client_h cl;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ckstore [--server IP:PORT | --cluster MAP] [--secret FILE] [--timeout MS]\n"
            "               COMMAND [ARGS]\n"
            "\n"
            "commands:\n"
            "  jobs                          list jobs\n"
            "  versions JOB [DIR]            list versions (state, objects, size, age);\n"
            "                                with DIR, whether each is flushed there (yes,\n"
            "                                no, or a flush's progress: \"writing 40%%\",\n"
            "                                \"stopped 40%%\" when unchanged for 60 s), and\n"
            "                                the versions flushed there only\n"
            "  objects JOB VERSION|latest    the manifest: objects, tags, sizes, and the\n"
            "                                version each object's bytes come from\n"
            "  stat JOB VERSION|latest [KEY] show a version or one object\n"
            "  verify JOB VERSION|latest     read every chunk, data and parity, and check\n"
            "                                every CRC (and each object's)\n"
            "  get JOB VERSION|latest KEY FILE   write one object to FILE\n"
            "  restore-check JOB VERSION|latest [--fallback]\n"
            "                                check that every object can be restored (each\n"
            "                                chunk's CRC checked in place by its server) and\n"
            "                                print the version a restore opens; --fallback:\n"
            "                                the newest older version that passes\n"
            "  delete JOB VERSION            delete a version and free its space\n"
            "  flush JOB VERSION|latest [DIR]  write the version to the servers'\n"
            "                                --flush-dir (DIR, if given, must be it), each\n"
            "                                server its own chunks, and publish it there\n"
            "                                once complete\n"
            "  import DIR JOB VERSION|latest load a flushed version back into the memory\n"
            "                                tier (through ordinary puts: any cluster; the\n"
            "                                flushed geometry; a partial-expert version\n"
            "                                comes back whole, without a parent)\n"
            "  repair status                 per server of a cluster: caught up or not,\n"
            "                                chunks and bytes it still has to rebuild,\n"
            "                                what it rebuilt, the rate and its cap\n"
            "\n"
            "The server defaults to $CKSTORE_SERVER, else 127.0.0.1:13337; --cluster\n"
            "(or $CKSTORE_CLUSTER) names a cluster map instead. --secret (or\n"
            "$CKSTORE_SECRET) is the cluster secret file the servers require; with\n"
            "--secret-job JOB it is that job's own secret (that job only).\n"
            "Exit status: 0 on success, 1 on an error from the store, 2 on bad usage.\n");
}

static int fail(const char *what, cks_status_t st)
{
    char err[512] = "";
    if (cl != NULL) {
        cks_client_last_error(cl, err, sizeof(err));
    }
    fprintf(stderr, "ckstore: %s: %s%s%s\n", what, cks_status_string(st), err[0] ? " - " : "",
            err);
    return 1;
}

static int parse_version(const char *t, uint64_t *v_p)
{
    char *end;
    if (strcmp(t, "latest") == 0) {
        *v_p = CKS_VERSION_LATEST;
        return 0;
    }
    *v_p = strtoull(t, &end, 10);
    if (*end != '\0' || end == t) {
        fprintf(stderr, "ckstore: '%s' is not a version number or 'latest'\n", t);
        return -1;
    }
    return 0;
}

static void print_age(uint64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    double s     = ns && now > ns ? (double)(now - ns) / 1e9 : 0;
    if (s < 120) {
        printf("%7.1fs", s);
    } else if (s < 7200) {
        printf("%7.1fm", s / 60);
    } else {
        printf("%7.1fh", s / 3600);
    }
}

static int cmd_jobs(void)
{
    char names[64][CKS_JOB_NAME_MAX + 1], after[CKS_JOB_NAME_MAX + 1] = "";
    size_t count;
    int more = 1;
    while (more) {
        cks_status_t st = cks_job_list(cl, after[0] ? after : NULL, names, 64, &count, &more);
        if (st != CKS_OK) {
            return fail("list jobs", st);
        }
        for (size_t i = 0; i < count; i++) {
            printf("%s\n", names[i]);
        }
        if (count == 0) {
            break;
        }
        snprintf(after, sizeof(after), "%s", names[count - 1]);
    }
    return 0;
}

typedef int (*obj_cb_t)(cks_restore_h r, const cks_object_info_t *o, void *arg);
static int foreach_object(cks_restore_h r, obj_cb_t cb, void *arg);

/* FLUSHED column of a version the memory tier has: yes, no, or the progress
 * of a flush of it (chunk bytes written against bytes * (k + m) / k);
 * "stopped" when nothing in its directory changed for 60 s. */
static void print_flushed(const char *dir, const char *job, const cks_version_info_t *v)
{
    cks_version_info_t fi;
    cks_flush_progress_t fp;
    struct timespec now;
    if (dir == NULL) {
        return;
    }
    if (cks_flushed_stat(dir, job, v->version, &fi) == CKS_OK) {
        printf(" %-7s", "yes");
        return;
    }
    if (cks_flushed_progress(dir, job, v->version, &fp) != CKS_OK || fp.unfinished == 0) {
        printf(" %-7s", "no");
        return;
    }
    double expect = v->ec_k > 0 ? (double)v->bytes * (v->ec_k + v->ec_m) / v->ec_k : 0;
    double pct    = expect > 0 ? 100.0 * (double)fp.bytes_written / expect : 0;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    int stopped     = now_ns > fp.touched_ns && now_ns - fp.touched_ns > 60000000000ull;
    printf(" %s %.0f%%", stopped ? "stopped" : "writing", pct > 99 ? 99 : pct);
}

/* Versions flushed to dir that the memory tier does not list, in (lo, hi). */
static void print_flushed_only(const char *dir, const char *job, const uint64_t *fl, size_t nfl,
                               int has_lo, uint64_t lo, int has_hi, uint64_t hi)
{
    for (size_t i = 0; i < nfl; i++) {
        cks_version_info_t fi;
        if ((has_lo && fl[i] <= lo) || (has_hi && fl[i] >= hi) ||
            cks_flushed_stat(dir, job, fl[i], &fi) != CKS_OK) {
            continue;
        }
        char parent[24] = "-";
        if (fi.parent != CKS_NO_PARENT) {
            snprintf(parent, sizeof(parent), "%" PRIu64, fi.parent);
        }
        printf("%10" PRIu64 " %10s %-9s %-10s %8" PRIu64 " %14" PRIu64 " %8s %-7s\n",
               fi.version, parent, "-", "-", fi.nobjects, fi.bytes, "-", "only");
    }
}

static int cmd_versions(const char *job, const char *dir)
{
    cks_version_info_t v[64];
    uint64_t after = 0, *fl = NULL;
    size_t count, nfl = 0;
    int more = 1, first = 1;
    if (dir != NULL) {
        fl = calloc(4096, sizeof(*fl));
        if (fl == NULL || cks_flushed_list(dir, job, fl, 4096, &nfl, NULL) != CKS_OK) {
            nfl = 0;
        }
    }
    printf("%10s %10s %-9s %-10s %8s %14s %8s%s\n", "VERSION", "PARENT", "STATE", "REDUNDANCY",
           "OBJECTS", "BYTES", "AGE", dir != NULL ? " FLUSHED" : "");
    while (more) {
        cks_status_t st = cks_version_list(cl, job, first ? NULL : &after, v, 64, &count,
                                           &more);
        if (st == CKS_ERR_NO_SUCH_JOB && first && nfl > 0) {
            count = 0; /* flushed only */
        } else if (st != CKS_OK) {
            free(fl);
            return fail("list versions", st);
        }
        for (size_t i = 0; i < count; i++) {
            if (nfl > 0) {
                print_flushed_only(dir, job, fl, nfl, !first || i > 0,
                                   i > 0 ? v[i - 1].version : after, 1, v[i].version);
            }
            char parent[24] = "-";
            if (v[i].parent != CKS_NO_PARENT) {
                snprintf(parent, sizeof(parent), "%" PRIu64, v[i].parent);
            }
            char red[32] = "-";
            if (v[i].ec_m > 0 && v[i].state != CKS_VSTATE_OPEN &&
                v[i].state != CKS_VSTATE_ABORTED) {
                /* servers of a group it can still lose, of the m it was made for */
                snprintf(red, sizeof(red), "%u/%u", v[i].redundancy, v[i].ec_m);
            }
            printf("%10" PRIu64 " %10s %-9s %-10s %8" PRIu64 " %14" PRIu64 " ", v[i].version,
                   parent, cks_vstate_string(v[i].state), red, v[i].nobjects, v[i].bytes);
            print_age(v[i].created_ns);
            print_flushed(dir, job, &v[i]);
            printf("\n");
        }
        if (count == 0) {
            break;
        }
        after = v[count - 1].version;
        first = 0;
    }
    if (nfl > 0) {
        print_flushed_only(dir, job, fl, nfl, !first, after, 0, 0);
    }
    free(fl);
    return 0;
}

static int cmd_flush(const char *job, const char *ver, const char *dir)
{
    uint64_t v;
    cks_version_info_t info;
    cks_status_t st;
    if (parse_version(ver, &v) != 0) {
        return 2;
    }
    if (v == CKS_VERSION_LATEST) {
        if ((st = cks_version_latest(cl, job, &info)) != CKS_OK) {
            return fail("latest version", st);
        }
        v = info.version;
    }
    st = cks_version_flush(cl, job, v, dir);
    if (st != CKS_OK) {
        return fail("flush", st);
    }
    printf("version %" PRIu64 " of %s flushed%s%s\n", v, job, dir ? " to " : "",
           dir ? dir : "");
    return 0;
}

typedef struct {
    const char *job;
    uint64_t version;
    uint64_t objects, bytes;
    cks_status_t st;
} import_t;

static int import_object(cks_restore_h r, const cks_object_info_t *o, void *arg)
{
    import_t *im = arg;
    cks_get_params_t g = {0};
    cks_put_params_t p = {0};
    uint8_t *buf;
    if (im->st != CKS_OK) {
        return 1;
    }
    buf = malloc(o->size ? o->size : 1);
    if (buf == NULL) {
        im->st = CKS_ERR_NO_MEMORY;
        return fail("import", im->st);
    }
    g.key         = o->key;
    g.buffer      = buf;
    g.buffer_size = o->size;
    im->st        = cks_get(r, &g, NULL);
    if (im->st != CKS_OK) {
        free(buf);
        return fail("read the flushed copy", im->st);
    }
    p.field_mask = CKS_PUT_FIELD_TAGS;
    p.job        = im->job;
    p.version    = im->version;
    p.key        = o->key;
    p.buffer     = buf;
    p.size       = o->size;
    p.tags       = o->tags;
    im->st       = cks_put(cl, &p);
    free(buf);
    if (im->st != CKS_OK) {
        return fail("put", im->st);
    }
    im->objects++;
    im->bytes += o->size;
    return 0;
}

static int cmd_import(const char *dir, const char *job, const char *ver)
{
    cks_restore_params_t rp = {0};
    cks_version_params_t vp = {0};
    cks_version_info_t info;
    cks_restore_h r;
    import_t im = {job, 0, 0, 0, CKS_OK};
    uint64_t v;
    if (parse_version(ver, &v) != 0) {
        return 2;
    }
    rp.field_mask = CKS_RESTORE_FIELD_FLAGS | CKS_RESTORE_FIELD_FLUSH_DIR;
    rp.job        = job;
    rp.version    = v;
    rp.flags      = CKS_RESTORE_DURABLE;
    rp.flush_dir  = dir;
    cks_status_t st = cks_restore_open_ex(cl, &rp, &r);
    if (st != CKS_OK) {
        return fail("open the flushed copy", st);
    }
    cks_restore_info(r, &info);
    im.version = info.version;
    vp.job     = job;
    vp.version = info.version;
    st         = cks_version_begin(cl, &vp);
    if (st != CKS_OK) {
        cks_restore_close(r);
        return fail("begin", st);
    }
    int rc = foreach_object(r, import_object, &im);
    cks_restore_close(r);
    if (rc != 0 || im.st != CKS_OK) {
        cks_version_abort(cl, job, info.version);
        return rc ? rc : 1;
    }
    st = cks_version_seal(cl, job, info.version);
    if (st != CKS_OK) {
        return fail("seal", st);
    }
    printf("version %" PRIu64 " of %s imported from %s: %" PRIu64 " objects, %" PRIu64
           " bytes\n",
           info.version, job, dir, im.objects, im.bytes);
    return 0;
}

static int open_version(const char *job, const char *ver, cks_restore_h *r_p)
{
    uint64_t v;
    if (parse_version(ver, &v) != 0) {
        return 2;
    }
    cks_status_t st = cks_restore_open(cl, job, v, r_p);
    return st == CKS_OK ? 0 : fail("open version", st);
}

typedef int (*obj_cb_t)(cks_restore_h r, const cks_object_info_t *o, void *arg);

static int foreach_object(cks_restore_h r, obj_cb_t cb, void *arg)
{
    static cks_object_info_t o[128];
    char after[CKS_KEY_NAME_MAX + 1] = "";
    size_t count;
    int more = 1, rc = 0;
    while (more) {
        cks_status_t st = cks_object_list(r, after[0] ? after : NULL, o, 128, &count, &more);
        if (st != CKS_OK) {
            return fail("list objects", st);
        }
        for (size_t i = 0; i < count; i++) {
            rc |= cb(r, &o[i], arg);
        }
        if (count == 0) {
            break;
        }
        snprintf(after, sizeof(after), "%s", o[count - 1].key);
    }
    return rc;
}

static void print_tag(int32_t t)
{
    if (t == CKS_TAG_NONE) {
        printf("%6s", "-");
    } else {
        printf("%6d", t);
    }
}

static int print_object(cks_restore_h r, const cks_object_info_t *o, void *arg)
{
    printf("%-9s", cks_kind_string(o->tags.kind));
    print_tag(o->tags.layer);
    print_tag(o->tags.expert);
    print_tag(o->tags.rank);
    printf(" %14" PRIu64 " %016" PRIx64 " %8" PRIu64 " %s\n", o->size, o->crc64,
           o->source_version, o->key);
    return 0;
}

static int cmd_objects(const char *job, const char *ver)
{
    cks_restore_h r;
    int rc = open_version(job, ver, &r);
    if (rc != 0) {
        return rc;
    }
    printf("%-9s%6s%6s%6s %14s %16s %8s %s\n", "KIND", "LAYER", "EXPERT", "RANK", "BYTES",
           "CRC64", "SOURCE", "KEY");
    rc = foreach_object(r, print_object, NULL);
    cks_restore_close(r);
    return rc;
}

static int cmd_stat(const char *job, const char *ver, const char *key)
{
    cks_restore_h r;
    cks_version_info_t vi;
    int rc = open_version(job, ver, &r);
    if (rc != 0) {
        return rc;
    }
    cks_restore_info(r, &vi);
    if (key == NULL) {
        printf("job %s version %" PRIu64 " state %s objects %" PRIu64 " bytes %" PRIu64,
               job, vi.version, cks_vstate_string(vi.state), vi.nobjects, vi.bytes);
        if (vi.ec_m > 0) {
            printf(" redundancy %u/%u missing-chunks %" PRIu64, vi.redundancy, vi.ec_m,
                   vi.missing);
        }
        printf("\n");
    } else {
        cks_object_info_t o;
        cks_status_t st = cks_object_stat(r, key, &o);
        rc              = st == CKS_OK ? print_object(r, &o, NULL) : fail("stat", st);
    }
    cks_restore_close(r);
    return rc;
}

typedef struct {
    uint8_t *buf;
    uint64_t cap;
    uint64_t objects, bytes, bad;
} verify_t;

static int verify_object(cks_restore_h r, const cks_object_info_t *o, void *arg)
{
    verify_t *v = arg;
    if (o->size > v->cap) {
        free(v->buf);
        v->buf = malloc(o->size);
        v->cap = v->buf ? o->size : 0;
        if (v->buf == NULL) {
            fprintf(stderr, "ckstore: out of memory for %s\n", o->key);
            v->bad++;
            return 1;
        }
    }
    cks_get_params_t g = {0};
    g.field_mask       = CKS_GET_FIELD_FLAGS;
    g.key              = o->key;
    g.buffer           = v->buf;
    g.buffer_size      = v->cap;
    g.flags            = CKS_GET_VERIFY | CKS_GET_SCRUB; /* data and parity chunks */
    cks_status_t st    = cks_get(r, &g, NULL);
    if (st != CKS_OK) {
        fprintf(stderr, "BAD %s: %s\n", o->key, cks_status_string(st));
        v->bad++;
        return 1;
    }
    v->objects++;
    v->bytes += o->size;
    return 0;
}

static int cmd_verify(const char *job, const char *ver)
{
    cks_restore_h r;
    verify_t v = {0};
    int rc     = open_version(job, ver, &r);
    if (rc != 0) {
        return rc;
    }
    rc = foreach_object(r, verify_object, &v);
    printf("%" PRIu64 " objects, %" PRIu64 " bytes verified, %" PRIu64 " bad\n", v.objects,
           v.bytes, v.bad);
    free(v.buf);
    cks_restore_close(r);
    return rc || v.bad ? 1 : 0;
}

static void print_skip(void *arg, const cks_restore_skip_t *skip)
{
    (void)arg;
    printf("skip %" PRIu64 " %s: %s\n", skip->version, cks_status_name(skip->status),
           skip->reason);
}

static int cmd_restore_check(const char *job, const char *ver, const char *opt)
{
    cks_restore_params_t p = {0};
    cks_restore_h r;
    cks_version_info_t vi;
    if (opt != NULL && strcmp(opt, "--fallback") != 0) {
        fprintf(stderr, "ckstore: restore-check: unknown option '%s'\n", opt);
        return 2;
    }
    if (parse_version(ver, &p.version) != 0) {
        return 2;
    }
    p.field_mask    = CKS_RESTORE_FIELD_FLAGS | CKS_RESTORE_FIELD_SKIP_CB;
    p.job           = job;
    p.flags         = opt != NULL ? CKS_RESTORE_FALLBACK : CKS_RESTORE_CHECK;
    p.skip_cb       = print_skip;
    cks_status_t st = cks_restore_open_ex(cl, &p, &r);
    if (st != CKS_OK) {
        return fail("restore-check", st);
    }
    cks_restore_info(r, &vi);
    printf("restorable %" PRIu64 " objects %" PRIu64 " bytes %" PRIu64 "\n", vi.version,
           vi.nobjects, vi.bytes);
    cks_restore_close(r);
    return 0;
}

static int cmd_repair_status(void)
{
    cks_cluster_stats_t t;
    int rc          = 0;
    cks_status_t st = cks_cluster_stats(cl, &t);
    if (st != CKS_OK) {
        return fail("repair status", st);
    }
    printf("%-6s %-10s %12s %12s %12s %12s %12s %10s %10s %10s\n", "SERVER", "CAUGHT-UP",
           "CHUNKS-LEFT", "MIB-LEFT", "CHUNKS-DONE", "MIB-DONE", "CHUNKS-SENT", "DECODES",
           "MIB/S", "CAP-MIB/S");
    for (size_t i = 0; i < t.servers; i++) {
        cks_repair_info_t r;
        st = cks_repair_status(cl, i, &r);
        if (st != CKS_OK) {
            printf("#%-5zu %s\n", i, cks_status_string(st));
            rc = 1;
            continue;
        }
        printf("%-6u %-10s %12llu %12.1f %12llu %12.1f %12llu %10llu %10.1f ", r.server_id,
               r.caught_up ? "yes" : "no", (unsigned long long)r.chunks_left,
               (double)r.bytes_left / 1048576.0, (unsigned long long)r.chunks_done,
               (double)r.bytes_done / 1048576.0, (unsigned long long)r.chunks_sent,
               (unsigned long long)r.stripes_decoded, (double)r.rate / 1048576.0);
        if (r.rate_cap == 0) {
            printf("%10s\n", "none");
        } else {
            printf("%10.1f\n", (double)r.rate_cap / 1048576.0);
        }
    }
    return rc;
}

static int cmd_get(const char *job, const char *ver, const char *key, const char *file)
{
    cks_restore_h r;
    cks_object_info_t o;
    int rc = open_version(job, ver, &r);
    if (rc != 0) {
        return rc;
    }
    cks_status_t st = cks_object_stat(r, key, &o);
    uint8_t *buf    = st == CKS_OK ? malloc(o.size ? o.size : 1) : NULL;
    if (st == CKS_OK && buf == NULL) {
        st = CKS_ERR_NO_MEMORY;
    }
    if (st == CKS_OK) {
        cks_get_params_t g = {0};
        g.field_mask       = CKS_GET_FIELD_FLAGS;
        g.key              = key;
        g.buffer           = buf;
        g.buffer_size      = o.size;
        g.flags            = CKS_GET_VERIFY;
        st                 = cks_get(r, &g, NULL);
    }
    if (st != CKS_OK) {
        rc = fail("get", st);
    } else {
        FILE *f = fopen(file, "wb");
        if (f == NULL || fwrite(buf, 1, o.size, f) != o.size || fclose(f) != 0) {
            fprintf(stderr, "ckstore: cannot write %s\n", file);
            rc = 1;
        }
    }
    free(buf);
    cks_restore_close(r);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"server", required_argument, NULL, 's'},
                                         {"cluster", required_argument, NULL, 'c'},
                                         {"timeout", required_argument, NULL, 't'},
                                         {"secret", required_argument, NULL, 'S'},
                                         {"secret-job", required_argument, NULL, 'J'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *server  = getenv("CKSTORE_SERVER");
    const char *cluster = getenv("CKSTORE_CLUSTER");
    const char *secret  = getenv("CKSTORE_SECRET");
    const char *secret_job = NULL;
    int timeout_ms     = 30000, c, rc;

    while ((c = getopt_long(argc, argv, "+s:c:t:S:J:h", opts, NULL)) != -1) {
        switch (c) {
            case 's': server = optarg; cluster = NULL; break;
            case 'c': cluster = optarg; break;
            case 't': timeout_ms = atoi(optarg); break;
            case 'S': secret = optarg; break;
            case 'J': secret_job = optarg; break;
            case 'h': usage(stdout); return 0;
            default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[optind];
    int nargs       = argc - optind - 1;
    char **a        = argv + optind + 1;
    struct {
        const char *name;
        int min, max;
    } cmds[] = {{"jobs", 0, 0},   {"versions", 1, 2}, {"objects", 2, 2}, {"stat", 2, 3},
                {"verify", 2, 2}, {"get", 4, 4},      {"delete", 2, 2},
                {"restore-check", 2, 3}, {"flush", 2, 3}, {"import", 3, 3},
                {"repair", 1, 1}};
    size_t i;
    for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        if (strcmp(cmd, cmds[i].name) == 0) {
            break;
        }
    }
    if (i == sizeof(cmds) / sizeof(cmds[0]) || nargs < cmds[i].min || nargs > cmds[i].max) {
        fprintf(stderr, "ckstore: bad command or arguments: %s\n", cmd);
        usage(stderr);
        return 2;
    }

    cks_client_params_t p = {0};
    p.field_mask = CKS_CLIENT_FIELD_TIMEOUT_MS | CKS_CLIENT_FIELD_NAME;
    if (cluster != NULL) {
        p.field_mask |= CKS_CLIENT_FIELD_CLUSTER;
        p.cluster = cluster;
    } else {
        p.field_mask |= CKS_CLIENT_FIELD_SERVER;
        p.server = server ? server : "127.0.0.1:13337";
    }
    p.timeout_ms = timeout_ms;
    p.name       = "ckstore-cli";
    cks_version_info_t fi;
    if (strcmp(cmd, "import") == 0) {
        /* the flushed geometry, so that the version comes back as it was */
        uint64_t v;
        if (parse_version(a[2], &v) != 0) {
            return 2;
        }
        if (cks_flushed_stat(a[0], a[1], v, &fi) == CKS_OK) {
            p.field_mask |= CKS_CLIENT_FIELD_EC;
            p.ec_k       = fi.ec_k;
            p.ec_m       = fi.ec_m;
            p.chunk_size = fi.chunk_size;
        }
    }
    if (secret != NULL && secret[0] != '\0') {
        p.field_mask |= CKS_CLIENT_FIELD_SECRET;
        p.secret     = secret;
        p.secret_job = secret_job;
    }
    cks_status_t st = cks_client_create(&p, &cl);
    if (st != CKS_OK) {
        return fail("connect", st);
    }
    if (strcmp(cmd, "jobs") == 0) {
        rc = cmd_jobs();
    } else if (strcmp(cmd, "versions") == 0) {
        rc = cmd_versions(a[0], nargs > 1 ? a[1] : NULL);
    } else if (strcmp(cmd, "flush") == 0) {
        rc = cmd_flush(a[0], a[1], nargs > 2 ? a[2] : NULL);
    } else if (strcmp(cmd, "import") == 0) {
        rc = cmd_import(a[0], a[1], a[2]);
    } else if (strcmp(cmd, "objects") == 0) {
        rc = cmd_objects(a[0], a[1]);
    } else if (strcmp(cmd, "stat") == 0) {
        rc = cmd_stat(a[0], a[1], nargs > 2 ? a[2] : NULL);
    } else if (strcmp(cmd, "verify") == 0) {
        rc = cmd_verify(a[0], a[1]);
    } else if (strcmp(cmd, "get") == 0) {
        rc = cmd_get(a[0], a[1], a[2], a[3]);
    } else if (strcmp(cmd, "restore-check") == 0) {
        rc = cmd_restore_check(a[0], a[1], nargs > 2 ? a[2] : NULL);
    } else if (strcmp(cmd, "repair") == 0) {
        if (strcmp(a[0], "status") != 0) {
            fprintf(stderr, "ckstore: repair: the one subcommand is 'status'\n");
            rc = 2;
        } else {
            rc = cmd_repair_status();
        }
    } else {
        uint64_t v;
        rc = parse_version(a[1], &v) != 0 ? 2 : 0;
        if (rc == 0 && (st = cks_version_delete(cl, a[0], v)) != CKS_OK) {
            rc = fail("delete", st);
        }
    }
    cks_client_destroy(cl);
    return rc;
}
