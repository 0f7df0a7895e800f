/*
 * DESIGN: the command lines of every ckstore-bench subcommand, from a table
 * each (bench_opt_t): getopt_long's lists are built from it, and every value
 * is parsed and range-checked here, with one message per kind of mistake.
 * Also the comma lists options take (sizes, numbers, names).
 */
#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_MAX_OPTS 64

static int bench_opt_set(const char *prog, const bench_opt_t *o, const char *arg)
{
    char *end = NULL;
    switch (o->kind) {
        case BENCH_OPT_FLAG: *(int *)o->dst = 1; break;
        case BENCH_OPT_CLEAR: *(unsigned *)o->dst &= ~o->lo; break;
        case BENCH_OPT_STR: *(const char **)o->dst = arg; break;
        case BENCH_OPT_UINT: {
            errno = 0;
            unsigned long v = strtoul(arg, &end, 10);
            if (errno != 0 || end == arg || *end != '\0' || v < o->lo || v > o->hi) {
                fprintf(stderr, "%s: bad number '%s' (%u .. %u)\n", prog, arg, o->lo,
                        o->hi);
                return -1;
            }
            *(unsigned *)o->dst = (unsigned)v;
            break;
        }
        case BENCH_OPT_SIZE:
            if (bench_size_parse(arg, o->dst) != 0 || *(uint64_t *)o->dst < o->lo) {
                fprintf(stderr, "%s: bad size '%s'\n", prog, arg);
                return -1;
            }
            break;
        case BENCH_OPT_DOUBLE:
            *(double *)o->dst = strtod(arg, &end);
            if (*end != '\0' || end == arg || (o->lo && !(*(double *)o->dst > 0))) {
                fprintf(stderr, "%s: bad --%s '%s'\n", prog, o->name, arg);
                return -1;
            }
            break;
        case BENCH_OPT_CALL:
            if (o->fn(arg, o) != 0) {
                fprintf(stderr, "%s: bad --%s '%s'\n", prog, o->name, arg);
                return -1;
            }
            break;
        default: break;
    }
    if (o->aux != NULL) {
        *(int *)o->aux = 1;
    }
    return 0;
}

int bench_opts_parse(const char *prog, const bench_opt_t *t, unsigned n, int argc,
                     char **argv)
{
    struct option lo[BENCH_MAX_OPTS + 1];
    char shorts[2 * BENCH_MAX_OPTS + 1];
    unsigned ns = 0;
    int c;

    if (n > BENCH_MAX_OPTS) {
        return -1;
    }
    for (unsigned i = 0; i < n; i++) {
        int arg = t[i].kind >= BENCH_OPT_STR;
        lo[i] = (struct option){t[i].name, arg ? required_argument : no_argument, NULL,
                                t[i].key ? t[i].key : 256 + (int)i};
        if (t[i].key) {
            shorts[ns++] = (char)t[i].key;
            if (arg) {
                shorts[ns++] = ':';
            }
        }
    }
    lo[n] = (struct option){NULL, 0, NULL, 0};
    shorts[ns] = '\0';
    optind = 1;
    while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        unsigned i = 0;
        while (i < n && lo[i].val != c) {
            i++;
        }
        if (i == n) {
            return -1; /* getopt_long said what */
        }
        if (t[i].kind == BENCH_OPT_HELP) {
            return 1;
        }
        if (bench_opt_set(prog, &t[i], optarg) != 0) {
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        return -1;
    }
    return 0;
}

void bench_join_args(char *buf, size_t len, const char *first, int argc, char **argv)
{
    size_t used = (size_t)snprintf(buf, len, "%s", first);
    for (int i = 0; i < argc && used < len - 1; i++) {
        used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? " " : "", argv[i]);
    }
}

int bench_parse_list(const char *text, unsigned max,
                     int (*one)(const char *item, unsigned i, void *ctx), void *ctx)
{
    char item[64];
    unsigned n = 0;
    while (*text != '\0') {
        size_t len = strcspn(text, ",");
        if (len == 0 || len >= sizeof(item) || n == max) {
            return -1;
        }
        memcpy(item, text, len);
        item[len] = '\0';
        if (one(item, n, ctx) != 0) {
            return -1;
        }
        n++;
        text += len + (text[len] == ',');
    }
    return n > 0 ? (int)n : -1;
}

static int bench_size_item(const char *item, unsigned i, void *ctx)
{
    return bench_size_parse(item, &((uint64_t *)ctx)[i]);
}

int bench_parse_sizes(const char *text, uint64_t *v, unsigned max, unsigned *n_p)
{
    int n = bench_parse_list(text, max, bench_size_item, v);
    if (n > 0) {
        *n_p = (unsigned)n;
    }
    return n > 0 ? 0 : -1;
}

int bench_name_index(const char *name, size_t len, const char *const *names, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (names[i] != NULL && strlen(names[i]) == len && strncmp(name, names[i], len) == 0) {
            return (int)i;
        }
    }
    return -1;
}

static int bench_name_item(const char *item, unsigned i, void *ctx)
{
    const bench_opt_t *o = ctx;
    int at = bench_name_index(item, strlen(item), o->names, o->hi);
    (void)i;
    if (at < 0) {
        return -1;
    }
    *(unsigned *)o->dst |= 1u << at;
    return 0;
}

int bench_opt_mask(const char *arg, const bench_opt_t *o)
{
    *(unsigned *)o->dst = 0;
    return bench_parse_list(arg, 32, bench_name_item, (void *)o) > 0 ? 0 : -1;
}

int bench_opt_enum(const char *arg, const bench_opt_t *o)
{
    int at = bench_name_index(arg, strlen(arg), o->names, o->hi);
    if (at < 0) {
        return -1;
    }
    *(unsigned *)o->dst = (unsigned)at;
    return 0;
}

static int bench_uint_item(const char *item, unsigned i, void *ctx)
{
    const bench_opt_t *o = ctx;
    char *end;
    errno = 0;
    unsigned long v = strtoul(item, &end, 10);
    if (errno != 0 || end == item || *end != '\0' || v < o->lo || v > o->hi) {
        return -1;
    }
    ((unsigned *)o->dst)[i] = (unsigned)v;
    return 0;
}

int bench_opt_uints(const char *arg, const bench_opt_t *o)
{
    int n = bench_parse_list(arg, 16, bench_uint_item, (void *)o);
    *o->count = n > 0 ? (unsigned)n : 0;
    return n > 0 ? 0 : -1;
}

int bench_opt_sizes(const char *arg, const bench_opt_t *o)
{
    return bench_parse_sizes(arg, o->dst, o->hi, o->count);
}
