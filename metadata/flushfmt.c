/*
 * flushfmt.c - the on-disk format of a flushed version (the durable tier):
 * directory names, the servers' index files and the manifest. Servers write
 * it (server/flush.c); libckstore and the CLI read it (client-lib/flushed.c).
 *
 * DESIGN: text, one record a line, every name in hex, so that a file can be
 * read by people and no byte of a key or job can break a line or a path.
 * Readers trust nothing: every line is parsed with bounds, a file without
 * its end line (cut short) is refused.
 * Threads: pure functions and stdio; any thread.
 * Never: reads or writes LMDB; decides what is flushed.
 */
#include "cks_md.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_ (2 * CKS_KEY_MAX_LEN + 2 * CKS_JOB_MAX_LEN + 256)

static int cks_ff_safe(unsigned char ch, int first)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-' || (ch == '.' && !first);
}

cks_status_t cks_md_flush_job_dir(const char *dir, const char *job, size_t job_len, char *out,
                                  size_t len)
{
    size_t n;
    int w = snprintf(out, len, "%s/", dir);
    if (w < 0 || (size_t)w >= len || job_len == 0 || job_len > CKS_JOB_MAX_LEN) {
        return CKS_ERR_INVALID_PARAM;
    }
    n = (size_t)w;
    for (size_t i = 0; i < job_len; i++) {
        unsigned char ch = (unsigned char)job[i];
        if (cks_ff_safe(ch, i == 0)) {
            if (n + 2 > len) {
                return CKS_ERR_INVALID_PARAM;
            }
            out[n++] = (char)ch;
        } else {
            if (n + 4 > len) {
                return CKS_ERR_INVALID_PARAM;
            }
            snprintf(out + n, 4, "%%%02X", ch);
            n += 3;
        }
    }
    out[n] = '\0';
    return CKS_OK;
}

void cks_md_flush_version_name(uint64_t version, char *out, size_t len)
{
    snprintf(out, len, "%020" PRIu64, version);
}

int cks_md_flush_version_parse(const char *name, uint64_t *version_p)
{
    uint64_t v = 0;
    if (strlen(name) != 20) {
        return 0;
    }
    for (int i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9') {
            return 0;
        }
        uint64_t d = (uint64_t)(name[i] - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return 0;
        }
        v = v * 10 + d;
    }
    *version_p = v;
    return 1;
}

static void cks_ff_hex(FILE *f, const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        fprintf(f, "%02x", (unsigned char)p[i]);
    }
}

/* hex string of at most max bytes into out (NUL-terminated); 0 on error */
static int cks_ff_unhex(const char *h, char *out, size_t max, uint32_t *len_p)
{
    size_t n = strlen(h);
    if (n == 0 || n % 2 != 0 || n / 2 > max) {
        return 0;
    }
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char c = h[2 * i + (size_t)j];
            v <<= 4;
            if (c >= '0' && c <= '9') {
                v |= (unsigned)(c - '0');
            } else if (c >= 'a' && c <= 'f') {
                v |= (unsigned)(c - 'a' + 10);
            } else {
                return 0;
            }
        }
        if (v == 0) {
            return 0; /* names hold no NUL */
        }
        out[i] = (char)v;
    }
    out[n / 2] = '\0';
    *len_p     = (uint32_t)(n / 2);
    return 1;
}

static cks_status_t cks_ff_io(FILE *f)
{
    return ferror(f) ? CKS_ERR_IO : CKS_OK;
}

cks_status_t cks_md_flush_index_head(FILE *f)
{
    fprintf(f, "ckstore-flush-index %u\n", CKS_MD_FLUSH_FORMAT);
    return cks_ff_io(f);
}

cks_status_t cks_md_flush_index_chunk(FILE *f, const cks_md_flush_chunk_t *c)
{
    fprintf(f, "chunk %" PRIu64 " %" PRIu64 " %u %" PRIu64 " %" PRIu64 " %016" PRIx64 " ",
            c->source, c->stripe, c->idx, c->offset, c->len, c->crc64);
    cks_ff_hex(f, c->key, c->key_len);
    fputc('\n', f);
    return cks_ff_io(f);
}

cks_status_t cks_md_flush_index_end(FILE *f, uint64_t count)
{
    fprintf(f, "end %" PRIu64 "\n", count);
    return cks_ff_io(f);
}

/* the next line, without its newline; 0 at the end or on a line too long */
static int cks_ff_line(FILE *f, char *buf, size_t len, int *too_long)
{
    if (fgets(buf, (int)len, f) == NULL) {
        return 0;
    }
    size_t n = strlen(buf);
    if (n == 0 || buf[n - 1] != '\n') {
        *too_long = 1;
        return 0;
    }
    buf[n - 1] = '\0';
    return 1;
}

#define FF_ERR(...) \
    do { \
        if (err != NULL) { \
            snprintf(err, err_len, __VA_ARGS__); \
        } \
    } while (0)

cks_status_t cks_md_flush_index_read(const char *path, cks_md_flush_chunk_t **chunks_p,
                                     size_t *n_p, char *err, size_t err_len)
{
    char line[LINE_MAX_], hex[2 * CKS_KEY_MAX_LEN + 2];
    cks_md_flush_chunk_t *v = NULL;
    size_t n = 0, cap = 0;
    unsigned fmt   = 0;
    int too_long   = 0, ended = 0;
    uint64_t count = 0;
    cks_status_t status = CKS_OK;
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        FF_ERR("cannot open %s: %s", path, strerror(errno));
        return CKS_ERR_IO;
    }
    if (!cks_ff_line(f, line, sizeof(line), &too_long) ||
        sscanf(line, "ckstore-flush-index %u", &fmt) != 1 || fmt != CKS_MD_FLUSH_FORMAT) {
        FF_ERR("%s: not an index of format %u", path, CKS_MD_FLUSH_FORMAT);
        fclose(f);
        return CKS_ERR_IO;
    }
    while (status == CKS_OK && !ended && cks_ff_line(f, line, sizeof(line), &too_long)) {
        cks_md_flush_chunk_t c = {0};
        char tail;
        if (sscanf(line, "end %" SCNu64 "%c", &count, &tail) == 1) {
            ended = 1;
            break;
        }
        if (sscanf(line, "chunk %" SCNu64 " %" SCNu64 " %u %" SCNu64 " %" SCNu64 " %" SCNx64
                         " %513s%c",
                   &c.source, &c.stripe, &c.idx, &c.offset, &c.len, &c.crc64, hex,
                   &tail) != 7 ||
            !cks_ff_unhex(hex, c.key, CKS_KEY_MAX_LEN, &c.key_len) ||
            c.idx >= 64 || c.offset > UINT64_MAX - c.len) {
            FF_ERR("%s: bad line %zu", path, n + 2);
            status = CKS_ERR_IO;
            break;
        }
        void *p = cks_array_grow(v, &cap, n + 1, sizeof(*v), 256);
        if (p == NULL) {
            status = CKS_ERR_NO_MEMORY;
            break;
        }
        v = p;
        v[n++] = c;
    }
    fclose(f);
    if (status == CKS_OK && (!ended || count != n)) {
        FF_ERR("%s: %s", path, too_long ? "line too long" : "cut short (no end line)");
        status = CKS_ERR_IO;
    }
    if (status != CKS_OK) {
        free(v);
        return status;
    }
    *chunks_p = v;
    *n_p      = n;
    return CKS_OK;
}

cks_status_t cks_md_flush_manifest_write(FILE *f, const cks_md_flush_manifest_t *m)
{
    const cks_md_version_t *v = &m->v;
    fprintf(f, "ckstore-flush %u\njob ", CKS_MD_FLUSH_FORMAT);
    cks_ff_hex(f, m->job, m->job_len);
    fprintf(f,
            "\nversion %" PRIu64 "\nparent %" PRIu64 "\nstate %u\nnranks %u\n"
            "created %" PRIu64 "\nsealed %" PRIu64 "\ngeometry %u %u %" PRIu64 "\n"
            "redundancy %u %" PRIu64 "\nwritten %" PRIu64 " %" PRIu64 "\nobjects %zu\n",
            v->version, v->parent, (unsigned)v->state, v->nranks, v->created_ns, v->sealed_ns,
            v->ec_k, v->ec_m, v->chunk_size, v->redundancy, v->missing, v->nobjects, v->bytes,
            m->nobjs);
    for (size_t i = 0; i < m->nservers; i++) {
        fprintf(f, "server %u\n", (unsigned)m->servers[i]);
    }
    for (size_t i = 0; i < m->nobjs; i++) {
        const cks_md_object_t *o = &m->objs[i];
        fprintf(f, "object %u %d %d %d %" PRIu64 " %016" PRIx64 " %" PRIu64 " ",
                (unsigned)o->kind, o->layer, o->expert, o->rank, o->size, o->crc64,
                o->source_version);
        cks_ff_hex(f, o->key, o->key_len);
        fputc('\n', f);
    }
    fprintf(f, "end %zu\n", m->nobjs);
    return cks_ff_io(f);
}

void cks_md_flush_manifest_free(cks_md_flush_manifest_t *m)
{
    free(m->servers);
    free(m->objs);
    m->servers = NULL;
    m->objs    = NULL;
}

cks_status_t cks_md_flush_manifest_read(const char *path, cks_md_flush_manifest_t *m_p,
                                        char *err, size_t err_len)
{
    char line[LINE_MAX_], hex[2 * CKS_KEY_MAX_LEN + 2];
    cks_md_flush_manifest_t m = {0};
    unsigned fmt = 0, state = 0, u1 = 0, u2 = 0;
    size_t nobjs = SIZE_MAX, caps = 0;
    int too_long = 0, ended = 0, have = 0;
    uint64_t count = 0;
    cks_status_t status = CKS_OK;
    char tail;
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        FF_ERR("cannot open %s: %s", path, strerror(errno));
        return errno == ENOENT ? CKS_ERR_NO_SUCH_VERSION : CKS_ERR_IO;
    }
    if (!cks_ff_line(f, line, sizeof(line), &too_long) ||
        sscanf(line, "ckstore-flush %u", &fmt) != 1) {
        FF_ERR("%s: not a ckstore manifest", path);
        fclose(f);
        return CKS_ERR_IO;
    }
    if (fmt != CKS_MD_FLUSH_FORMAT) {
        FF_ERR("%s: format %u (this build reads %u)", path, fmt, CKS_MD_FLUSH_FORMAT);
        fclose(f);
        return CKS_ERR_UNSUPPORTED;
    }
    while (status == CKS_OK && cks_ff_line(f, line, sizeof(line), &too_long)) {
        cks_md_version_t *v = &m.v;
        cks_md_object_t o   = {0};
        unsigned kind       = 0, sid;
        if (sscanf(line, "job %513s%c", hex, &tail) == 1) {
            have |= cks_ff_unhex(hex, m.job, CKS_JOB_MAX_LEN, &m.job_len) ? 1 : 0;
        } else if (sscanf(line, "version %" SCNu64 "%c", &v->version, &tail) == 1) {
            have |= 2;
        } else if (sscanf(line, "parent %" SCNu64 "%c", &v->parent, &tail) == 1) {
            have |= 4;
        } else if (sscanf(line, "state %u%c", &state, &tail) == 1) {
            v->state = (cks_vstate_t)state;
            have |= 8;
        } else if (sscanf(line, "nranks %u%c", &v->nranks, &tail) == 1 ||
                   sscanf(line, "created %" SCNu64 "%c", &v->created_ns, &tail) == 1 ||
                   sscanf(line, "sealed %" SCNu64 "%c", &v->sealed_ns, &tail) == 1) {
            /* informative */
        } else if (sscanf(line, "geometry %u %u %" SCNu64 "%c", &u1, &u2, &v->chunk_size,
                          &tail) == 3) {
            v->ec_k = u1;
            v->ec_m = u2;
            have |= 16;
        } else if (sscanf(line, "redundancy %u %" SCNu64 "%c", &v->redundancy, &v->missing,
                          &tail) == 2 ||
                   sscanf(line, "written %" SCNu64 " %" SCNu64 "%c", &v->nobjects, &v->bytes,
                          &tail) == 2) {
        } else if (sscanf(line, "objects %zu%c", &nobjs, &tail) == 1 && nobjs < (1u << 30)) {
            m.objs = calloc(nobjs ? nobjs : 1, sizeof(*m.objs));
            status = m.objs == NULL ? CKS_ERR_NO_MEMORY : CKS_OK;
            have |= 32;
        } else if (sscanf(line, "server %u%c", &sid, &tail) == 1 && sid <= UINT16_MAX) {
            void *p = cks_array_grow(m.servers, &caps, m.nservers + 1, sizeof(*m.servers),
                                     16);
            if (p == NULL) {
                status = CKS_ERR_NO_MEMORY;
                break;
            }
            m.servers = p;
            m.servers[m.nservers++] = (uint16_t)sid;
        } else if ((have & 32) &&
                   sscanf(line, "object %u %d %d %d %" SCNu64 " %" SCNx64 " %" SCNu64
                                " %513s%c",
                          &kind, &o.layer, &o.expert, &o.rank, &o.size, &o.crc64,
                          &o.source_version, hex, &tail) == 8 &&
                   cks_ff_unhex(hex, o.key, CKS_KEY_MAX_LEN, &o.key_len) &&
                   m.nobjs < nobjs) {
            o.kind           = (cks_kind_t)kind;
            m.objs[m.nobjs++] = o;
        } else if (sscanf(line, "end %" SCNu64 "%c", &count, &tail) == 1) {
            ended = 1;
            break;
        } else {
            FF_ERR("%s: bad line '%.80s'", path, line);
            status = CKS_ERR_IO;
        }
    }
    fclose(f);
    if (status == CKS_OK && (!ended || have != 63 || count != m.nobjs || m.nobjs != nobjs)) {
        FF_ERR("%s: %s", path,
               too_long ? "line too long"
               : !ended ? "cut short (no end line)"
                        : "incomplete (a field or an object is missing)");
        status = CKS_ERR_IO;
    }
    if (status == CKS_OK &&
        (m.v.ec_k == 0 || m.v.ec_k > 64 || m.v.ec_m > 64 || m.v.chunk_size == 0)) {
        FF_ERR("%s: bad geometry", path);
        status = CKS_ERR_IO;
    }
    if (status != CKS_OK) {
        cks_md_flush_manifest_free(&m);
        return status;
    }
    *m_p = m;
    return CKS_OK;
}

size_t cks_md_flush_hkey(const char *key, size_t key_len, uint64_t source, uint64_t stripe,
                         uint32_t idx, uint8_t *buf)
{
    size_t n = 0;
    memcpy(buf, key, key_len);
    n += key_len;
    buf[n++] = 0;
    for (int i = 7; i >= 0; i--) {
        buf[n++] = (uint8_t)(source >> (8 * i));
    }
    for (int i = 7; i >= 0; i--) {
        buf[n++] = (uint8_t)(stripe >> (8 * i));
    }
    buf[n++] = (uint8_t)idx;
    return n;
}
