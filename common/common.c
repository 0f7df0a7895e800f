/*
 * DESIGN: status strings, logging, time, name checks, growing arrays and fault
 * points.
 * Thread-safe: logging writes one line per call with a single write; the fault
 * table is guarded by a mutex and only touched when armed. Fault points are
 * compiled only with CKS_FAULT_POINTS (test builds): without it there is no
 * table and CKS_FAULTS is never parsed, so no environment variable can make
 * a release server drop or corrupt data.
 */
#include "cks_common.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

const char *cks_status_string(cks_status_t status)
{
    switch (status) {
#define CKS_STATUS_STR_(name, value, str) \
    case name: \
        return str;
        CKS_STATUS_LIST(CKS_STATUS_STR_)
#undef CKS_STATUS_STR_
    }
    return "unknown status";
}

const char *cks_status_name(cks_status_t status)
{
    switch (status) {
#define CKS_STATUS_NAME_(name, value, str) \
    case name: \
        return #name;
        CKS_STATUS_LIST(CKS_STATUS_NAME_)
#undef CKS_STATUS_NAME_
    }
    return "CKS_ERR_UNKNOWN";
}

const char *cks_vstate_string(cks_vstate_t state)
{
    static const char *names[] = {"OPEN", "SEALED", "PROTECTED", "DEGRADED", "ABORTED"};
    return (unsigned)state < CKS_ARRAY_SIZE(names) ? names[state] : "UNKNOWN";
}

const char *cks_kind_string(cks_kind_t kind)
{
    static const char *names[] = {"dense", "expert", "optimizer", "rng", "other"};
    return (unsigned)kind < CKS_ARRAY_SIZE(names) ? names[kind] : "unknown";
}

/* ---- logging ------------------------------------------------------------ */
static const char *cks_log_names[] = {"error", "warn", "info", "debug", "trace"};
static char cks_log_prefix[64] = "ckstore";
cks_log_level_t cks_log_threshold = CKS_LOG_WARN;

cks_status_t cks_log_level_parse(const char *text, cks_log_level_t *level_p)
{
    for (size_t i = 0; i < CKS_ARRAY_SIZE(cks_log_names); i++) {
        if (text != NULL && strcasecmp(text, cks_log_names[i]) == 0) {
            *level_p = (cks_log_level_t)i;
            return CKS_OK;
        }
    }
    return CKS_ERR_INVALID_PARAM;
}

static void cks_fault_init_from_env(void);

__attribute__((constructor)) static void cks_log_init_from_env(void)
{
    cks_log_level_t level;
    const char *env = getenv("CKS_LOG_LEVEL");
    if (env != NULL && cks_log_level_parse(env, &level) == CKS_OK) {
        cks_log_threshold = level;
    }
    cks_fault_init_from_env();
}

void cks_log_set_level(cks_log_level_t level)
{
    cks_log_threshold = level;
}

void cks_log_set_prefix(const char *prefix)
{
    snprintf(cks_log_prefix, sizeof(cks_log_prefix), "%s", prefix);
}

void cks_log_write(cks_log_level_t level, const char *file, int line,
                   const char *fmt, ...)
{
    char buf[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const char *base = strrchr(file, '/');
    int n = snprintf(buf, sizeof(buf), "[%ld.%06ld] %s %s %s:%d ", (long)ts.tv_sec,
                     ts.tv_nsec / 1000, cks_log_prefix, cks_log_names[level],
                     base ? base + 1 : file, line);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(buf)) {
        int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
        n     = m < 0 ? n : CKS_MIN(n + m, (int)sizeof(buf) - 2);
    }
    va_end(ap);
    if (n < 0) {
        return;
    }
    buf[n++] = '\n';
    ssize_t ret = write(STDERR_FILENO, buf, (size_t)n);
    (void)ret;
}

static uint64_t cks_clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cks_time_ns(void)
{
    return cks_clock_ns(CLOCK_MONOTONIC);
}

uint64_t cks_time_real_ns(void)
{
    return cks_clock_ns(CLOCK_REALTIME);
}

/* ---- names ---------------------------------------------------------------- */
cks_status_t cks_size_parse(const char *text, uint64_t *size_p)
{
    if (text == NULL || size_p == NULL || !isdigit((unsigned char)text[0])) {
        return CKS_ERR_INVALID_PARAM;
    }
    char *end;
    errno                = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0) {
        return CKS_ERR_INVALID_PARAM;
    }
    unsigned shift = 0;
    switch (*end) {
        case 'k': case 'K': shift = 10; end++; break;
        case 'm': case 'M': shift = 20; end++; break;
        case 'g': case 'G': shift = 30; end++; break;
        case 't': case 'T': shift = 40; end++; break;
        default: break;
    }
    if (shift != 0 && *end == 'i') {
        end++;
    }
    if (*end == 'B') {
        end++;
    }
    if (*end != '\0' || v > (UINT64_MAX >> shift)) {
        return CKS_ERR_INVALID_PARAM;
    }
    *size_p = (uint64_t)v << shift;
    return CKS_OK;
}

void *cks_array_grow(void *arr, size_t *cap_p, size_t need, size_t elem_size, size_t first)
{
    if (need <= *cap_p) {
        return arr;
    }
    size_t cap = *cap_p ? *cap_p * 2 : first > 0 ? first : 1;
    while (cap < need) {
        cap *= 2;
    }
    if (elem_size != 0 && cap > SIZE_MAX / elem_size) {
        return NULL;
    }
    void *p = realloc(arr, cap * elem_size);
    if (p != NULL) {
        *cap_p = cap;
    }
    return p;
}

cks_status_t cks_name_check(const char *name, size_t len, size_t max_len)
{
    if (name == NULL || len == 0) {
        return CKS_ERR_NAME_INVALID;
    }
    if (len > max_len) {
        return CKS_ERR_KEY_TOO_LONG;
    }
    const uint8_t *s = (const uint8_t *)name;
    size_t i         = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t extra;
        uint32_t cp;
        if (c == 0) {
            return CKS_ERR_NAME_INVALID;
        } else if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            extra = 1;
            cp    = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            extra = 2;
            cp    = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            extra = 3;
            cp    = c & 0x07;
        } else {
            return CKS_ERR_NAME_INVALID;
        }
        if (i + extra >= len) {
            return CKS_ERR_NAME_INVALID;
        }
        for (size_t j = 1; j <= extra; j++) {
            if ((s[i + j] & 0xC0) != 0x80) {
                return CKS_ERR_NAME_INVALID;
            }
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        /* reject overlong forms, surrogates and values past U+10FFFF */
        if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) ||
            (extra == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF)) {
            return CKS_ERR_NAME_INVALID;
        }
        i += extra + 1;
    }
    return CKS_OK;
}

/* ---- fault points ------------------------------------------------------------ */
int cks_fault_points_built(void)
{
#ifdef CKS_FAULT_POINTS
    return 1;
#else
    return 0;
#endif
}

#ifdef CKS_FAULT_POINTS
#define CKS_FAULT_MAX 32

typedef struct {
    char name[48];
    cks_fault_mode_t mode;
    double p;
} cks_fault_t;

static pthread_mutex_t cks_fault_lock = PTHREAD_MUTEX_INITIALIZER;
static cks_fault_t cks_faults[CKS_FAULT_MAX];
static volatile int cks_fault_count;
static uint64_t cks_fault_rng = 1; /* xorshift state of probabilistic faults */

static cks_status_t cks_fault_set(const char *name, cks_fault_mode_t mode, double p);

/* Runs from the constructor, before main(): arms what CKS_FAULTS names. */
static void cks_fault_init_from_env(void)
{
    const char *env = getenv("CKS_FAULT_SEED");
    if (env != NULL) {
        uint64_t z = strtoull(env, NULL, 0) + 0x9E3779B97F4A7C15ull; /* splitmix64 */
        z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z          = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        cks_fault_rng = (z ^ (z >> 31)) | 1;
    }
    env = getenv("CKS_FAULTS");
    if (env != NULL) {
        char buf[512];
        snprintf(buf, sizeof(buf), "%s", env);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok != NULL;
             tok = strtok_r(NULL, ",", &save)) {
            char *colon           = strchr(tok, ':');
            cks_fault_mode_t mode = CKS_FAULT_ONCE;
            double p              = 0;
            if (colon != NULL) {
                *colon = '\0';
                if (strcmp(colon + 1, "always") == 0) {
                    mode = CKS_FAULT_ALWAYS;
                } else if (strcmp(colon + 1, "once") != 0) {
                    p    = strtod(colon + 1, NULL);
                    mode = p > 0 && p <= 1 ? CKS_FAULT_PROB : CKS_FAULT_OFF;
                }
            }
            if (mode == CKS_FAULT_PROB) {
                cks_fault_arm_p(tok, p);
            } else if (mode != CKS_FAULT_OFF) {
                cks_fault_arm(tok, mode);
            }
        }
    }
}

cks_status_t cks_fault_arm(const char *name, cks_fault_mode_t mode)
{
    return mode == CKS_FAULT_PROB ? CKS_ERR_INVALID_PARAM : cks_fault_set(name, mode, 0);
}

cks_status_t cks_fault_arm_p(const char *name, double p)
{
    return p > 0 && p <= 1 ? cks_fault_set(name, CKS_FAULT_PROB, p) : CKS_ERR_INVALID_PARAM;
}

static cks_status_t cks_fault_set(const char *name, cks_fault_mode_t mode, double p)
{
    cks_status_t status = CKS_ERR_NO_MEMORY;
    if (name == NULL || strlen(name) >= sizeof(cks_faults[0].name)) {
        return CKS_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&cks_fault_lock);
    for (int i = 0; i < cks_fault_count; i++) {
        if (strcmp(cks_faults[i].name, name) == 0) {
            cks_faults[i].mode = mode;
            cks_faults[i].p    = p;
            status             = CKS_OK;
            goto out_unlock;
        }
    }
    if (cks_fault_count < CKS_FAULT_MAX) {
        snprintf(cks_faults[cks_fault_count].name, sizeof(cks_faults[0].name), "%s",
                 name);
        cks_faults[cks_fault_count].mode = mode;
        cks_faults[cks_fault_count].p    = p;
        cks_fault_count++;
        status = CKS_OK;
    }
out_unlock:
    pthread_mutex_unlock(&cks_fault_lock);
    return status;
}

void cks_fault_disarm_all(void)
{
    pthread_mutex_lock(&cks_fault_lock);
    cks_fault_count = 0;
    pthread_mutex_unlock(&cks_fault_lock);
}

int cks_fault_fire(const char *name)
{
    int fire = 0;
    if (cks_fault_count == 0) {
        return 0;
    }
    pthread_mutex_lock(&cks_fault_lock);
    for (int i = 0; i < cks_fault_count; i++) {
        if (strcmp(cks_faults[i].name, name) == 0 && cks_faults[i].mode != CKS_FAULT_OFF) {
            if (cks_faults[i].mode == CKS_FAULT_PROB) {
                cks_fault_rng ^= cks_fault_rng << 13;
                cks_fault_rng ^= cks_fault_rng >> 7;
                cks_fault_rng ^= cks_fault_rng << 17;
                if ((double)(cks_fault_rng >> 11) / 9007199254740992.0 >= cks_faults[i].p) {
                    break;
                }
            }
            fire = 1;
            if (cks_faults[i].mode == CKS_FAULT_ONCE) {
                cks_faults[i].mode = CKS_FAULT_OFF;
            }
            cks_log(CKS_LOG_WARN, "fault point '%s' fired", name);
            break;
        }
    }
    pthread_mutex_unlock(&cks_fault_lock);
    return fire;
}
#else /* !CKS_FAULT_POINTS */

/* A release build has no fault points: CKS_FAULTS is not parsed; say once,
 * per process, that it is ignored, so that a test or operator who set it does
 * not believe it took effect. */
static void cks_fault_init_from_env(void)
{
    if (getenv("CKS_FAULTS") != NULL) {
        cks_log(CKS_LOG_WARN, "CKS_FAULTS is set but this build has no fault points; "
                              "ignored");
    }
}

cks_status_t cks_fault_arm(const char *name, cks_fault_mode_t mode)
{
    return CKS_ERR_UNSUPPORTED;
}

cks_status_t cks_fault_arm_p(const char *name, double p)
{
    return CKS_ERR_UNSUPPORTED;
}

void cks_fault_disarm_all(void)
{
}
#endif /* CKS_FAULT_POINTS */

/* ---- a test pattern ------------------------------------------------------- */

static uint64_t cks_pattern_next(uint64_t x)
{
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

void cks_pattern_fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    uint8_t *p = buf;
    size_t i   = 0;
    for (; i + 8 <= len; i += 8) {
        x = cks_pattern_next(x);
        memcpy(p + i, &x, 8);
    }
    for (; i < len; i++) { /* the tail: bytes of the last word */
        p[i] = (uint8_t)(x >> (8 * (i % 8)));
    }
}

size_t cks_pattern_check(const void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1, v;
    const uint8_t *p = buf;
    size_t i         = 0;
    for (; i + 8 <= len; i += 8) {
        x = cks_pattern_next(x);
        memcpy(&v, p + i, 8);
        if (v != x) {
            break;
        }
    }
    /* the word that differs (x is its pattern), or the tail (the last
     * word's bytes): byte by byte */
    for (; i < len; i++) {
        if (p[i] != (uint8_t)(x >> (8 * (i % 8)))) {
            return i;
        }
    }
    return len;
}

