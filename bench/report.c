/*
 * DESIGN: results as records (ordered key/value fields) and the one JSON
 * writer of the tool. Owns the machine description too, so that every JSON
 * file says where its figures come from. The schema is documented in
 * docs/BENCHMARKS.md: fields are only ever added, never renamed. Runs on the
 * main thread. Never: print to stdout (the tables are bench.c's).
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

static bench_field_t *bench_rec_next(bench_rec_t *r, const char *key)
{
    for (unsigned i = 0; i < r->n; i++) {
        if (strcmp(r->f[i].key, key) == 0) {
            return &r->f[i]; /* set again: replace */
        }
    }
    if (r->n == BENCH_REC_FIELDS) {
        fprintf(stderr, "ckstore-bench: record full, field '%s' dropped\n", key);
        return NULL;
    }
    bench_field_t *f = &r->f[r->n++];
    memset(f, 0, sizeof(*f));
    f->key = key;
    return f;
}

void bench_rec_str(bench_rec_t *r, const char *key, const char *value)
{
    bench_field_t *f = bench_rec_next(r, key);
    if (f != NULL) {
        f->type = value != NULL ? BENCH_F_STR : BENCH_F_NULL;
        snprintf(f->s, sizeof(f->s), "%s", value != NULL ? value : "");
    }
}

void bench_rec_u64(bench_rec_t *r, const char *key, uint64_t value)
{
    bench_field_t *f = bench_rec_next(r, key);
    if (f != NULL) {
        f->type = BENCH_F_U64;
        f->u    = value;
    }
}

void bench_rec_f64(bench_rec_t *r, const char *key, double value)
{
    bench_field_t *f = bench_rec_next(r, key);
    if (f != NULL) {
        f->type = isfinite(value) ? BENCH_F_F64 : BENCH_F_NULL;
        f->d    = value;
    }
}

bench_kv_t bench_kv_s(const char *key, const char *v)
{
    return (bench_kv_t){key, v != NULL ? BENCH_F_STR : BENCH_F_NULL, 0, 0, v};
}

bench_kv_t bench_kv_f(const char *key, double v)
{
    return (bench_kv_t){key, BENCH_F_F64, 0, v, NULL};
}

bench_kv_t bench_kv_u(const char *key, uint64_t v)
{
    return (bench_kv_t){key, BENCH_F_U64, v, 0, NULL};
}

bench_rec_t *bench_rec_set(bench_rec_t *r, const bench_kv_t *kv, unsigned n)
{
    for (unsigned i = 0; i < n && r != NULL; i++) {
        switch (kv[i].type) {
            case BENCH_F_U64:
                bench_rec_u64(r, kv[i].key, kv[i].u);
                break;
            case BENCH_F_F64:
                bench_rec_f64(r, kv[i].key, kv[i].d);
                break;
            default:
                bench_rec_str(r, kv[i].key, kv[i].s);
                break;
        }
    }
    return r;
}

double bench_loadavg(void)
{
    double l = -1;
    FILE *f  = fopen("/proc/loadavg", "r");
    if (f != NULL) {
        if (fscanf(f, "%lf", &l) != 1) {
            l = -1;
        }
        fclose(f);
    }
    return l;
}

const char *bench_rec_get_str(const bench_rec_t *r, const char *key)
{
    for (unsigned i = 0; i < r->n; i++) {
        if (strcmp(r->f[i].key, key) == 0 && r->f[i].type == BENCH_F_STR) {
            return r->f[i].s;
        }
    }
    return NULL;
}

uint64_t bench_rec_get_u64(const bench_rec_t *r, const char *key)
{
    for (unsigned i = 0; i < r->n; i++) {
        if (strcmp(r->f[i].key, key) == 0 && r->f[i].type == BENCH_F_U64) {
            return r->f[i].u;
        }
    }
    return 0;
}

bench_rec_t *bench_report_add(bench_report_t *rep)
{
    if (rep->n == rep->cap) {
        size_t cap       = rep->cap ? rep->cap * 2 : 64;
        bench_rec_t *grown = realloc(rep->results, cap * sizeof(*grown));
        if (grown == NULL) {
            return NULL;
        }
        rep->results = grown;
        rep->cap     = cap;
    }
    bench_rec_t *r = &rep->results[rep->n++];
    r->n           = 0;
    return r;
}

void bench_report_free(bench_report_t *rep)
{
    free(rep->results);
    rep->results = NULL;
    rep->n = rep->cap = 0;
}

/* ---- machine ------------------------------------------------------------------ */

/* First line of a file, without its newline; "" when unreadable. */
static void bench_read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    buf[0]  = '\0';
    if (f != NULL) {
        if (fgets(buf, (int)len, f) == NULL) {
            buf[0] = '\0';
        }
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
}

/* The [selected] word of a sysfs choice list, e.g. "always [madvise] never". */
static void bench_selected(const char *path, char *buf, size_t len)
{
    char line[256];
    bench_read_line(path, line, sizeof(line));
    char *lb = strchr(line, '['), *rb = lb ? strchr(lb, ']') : NULL;
    if (lb != NULL && rb != NULL) {
        snprintf(buf, len, "%.*s", (int)(rb - lb - 1), lb + 1);
    } else {
        snprintf(buf, len, "%s", line[0] ? line : "unknown");
    }
}

/* The huge= option of the last /dev/shm mount (the one in effect); "never"
 * when the option is absent (tmpfs' default). */
static void bench_dev_shm_huge(char *buf, size_t len)
{
    char line[1024];
    FILE *f = fopen("/proc/mounts", "r");
    snprintf(buf, len, "unknown");
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char dev[128], dir[256], fs[64], opts[512];
        if (sscanf(line, "%127s %255s %63s %511s", dev, dir, fs, opts) != 4 ||
            strcmp(dir, "/dev/shm") != 0) {
            continue;
        }
        char *h = strstr(opts, "huge=");
        if (h != NULL) {
            snprintf(buf, len, "%.*s", (int)strcspn(h + 5, ","), h + 5);
        } else {
            snprintf(buf, len, "never");
        }
    }
    fclose(f);
}

void bench_machine_describe(bench_rec_t *m)
{
    char line[512], value[256];
    struct utsname u;
    FILE *f;

    value[0] = '\0';
    if ((f = fopen("/proc/cpuinfo", "r")) != NULL) {
        while (fgets(line, sizeof(line), f) != NULL) {
            if (strncmp(line, "model name", 10) == 0 && strchr(line, ':') != NULL) {
                char *v = strchr(line, ':') + 1;
                v += strspn(v, " \t");
                snprintf(value, sizeof(value), "%.*s", (int)strcspn(v, "\n"), v);
                break;
            }
        }
        fclose(f);
    }
    bench_rec_kv(m, KS("cpu", value[0] ? value : "unknown"),
                 KU("cores", (uint64_t)sysconf(_SC_NPROCESSORS_ONLN)),
                 KU("memory_bytes",
                    (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE)));
    if (uname(&u) == 0) {
        snprintf(value, sizeof(value), "%s %s", u.sysname, u.release);
        bench_rec_str(m, "kernel", value);
    }
    bench_rec_str(m, "ucx_version", ucp_get_version_string());
    bench_selected("/sys/kernel/mm/transparent_hugepage/enabled", value, sizeof(value));
    bench_rec_str(m, "thp_enabled", value);
    bench_selected("/sys/kernel/mm/transparent_hugepage/shmem_enabled", value, sizeof(value));
    bench_rec_str(m, "shmem_thp_enabled", value);
    bench_dev_shm_huge(value, sizeof(value));
    bench_rec_str(m, "dev_shm_huge", value);
    bench_read_line("/proc/sys/vm/nr_hugepages", value, sizeof(value));
    bench_rec_u64(m, "hugetlb_pages", strtoull(value, NULL, 10));
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(value, sizeof(value), "%Y-%m-%dT%H:%M:%SZ", &tm);
    bench_rec_str(m, "date", value);
}

/* ---- JSON ------------------------------------------------------------------------ */

static void bench_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

static void bench_json_rec(FILE *f, const bench_rec_t *r)
{
    fputc('{', f);
    for (unsigned i = 0; i < r->n; i++) {
        const bench_field_t *x = &r->f[i];
        fprintf(f, "%s", i ? ", " : "");
        bench_json_str(f, x->key);
        fputs(": ", f);
        switch (x->type) {
            case BENCH_F_STR: bench_json_str(f, x->s); break;
            case BENCH_F_U64: fprintf(f, "%llu", (unsigned long long)x->u); break;
            case BENCH_F_F64: fprintf(f, "%.6g", x->d); break;
            case BENCH_F_NULL: fputs("null", f); break;
        }
    }
    fputc('}', f);
}

int bench_report_write_json(const bench_report_t *rep, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        return -1;
    }
    fputs("{\n  \"machine\": ", f);
    bench_json_rec(f, &rep->machine);
    fputs(",\n  \"run\": ", f);
    bench_json_rec(f, &rep->run);
    fputs(",\n  \"results\": [", f);
    for (size_t i = 0; i < rep->n; i++) {
        fputs(i ? ",\n    " : "\n    ", f);
        bench_json_rec(f, &rep->results[i]);
    }
    fputs("\n  ]\n}\n", f);
    return fclose(f) == 0 ? 0 : -1;
}
