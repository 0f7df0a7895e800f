/*
 * DESIGN: the flush policy - every Nth committed version flushed, started
 * by its coordinator (--flush-every), and the flush thread's scan for
 * versions due (also after a restart). See flush.c for the whole design.
 *
 * Never: start a flush the policy did not ask for twice.
 */
#include "flush_int.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the policy's scan (flush thread) ------------------------------------------------------ */

/* an unfinished flush's directory that nothing touched this long is abandoned
 * (a flush's calls time out after 10 minutes) */
#define CKS_FL_STALE_NS (15ull * 60 * 1000000000ull)

static int cks_fl_policy_on(cks_server_h s)
{
    return s->map != NULL && s->p.flush_dir != NULL &&
           (s->p.flush_every > 0 || s->p.flush_age_s > 0);
}

/* Does the flush thread run from the start and scan? With a flush
 * directory: a client's request recorded there and not published (a stop
 * interrupted it), a policy's flush due, retention's removals that a stop
 * interrupted. */
int cks_fl_scan_on(cks_server_h s)
{
    return s->map != NULL && s->p.flush_dir != NULL;
}

/* The newest version published in jobdir; 0 when there is none. */
static int cks_fl_newest_published(const char *jobdir, uint64_t *v_p)
{
    DIR *d = opendir(jobdir);
    struct dirent *e;
    uint64_t v;
    int has = 0;
    if (d == NULL) {
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        if (cks_md_flush_version_parse(e->d_name, &v) && (!has || v > *v_p)) {
            *v_p = v;
            has  = 1;
        }
    }
    closedir(d);
    return has;
}

static uint64_t cks_fl_touched_ns(const char *path);

static uint64_t cks_fl_now_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A dot entry of a job's directory, ".<version name><suffix>" (at least 21
 * bytes, checked by the caller): its version, its path and the path of the
 * version's published directory (PATH_MAX bytes each); 0 when the name is
 * not a version's or a path does not fit. */
static int cks_fl_dot_entry(const char *jobdir, const char *d_name, uint64_t *v_p,
                            char *path, char *pub)
{
    char name[21];
    memcpy(name, d_name + 1, 20);
    name[20] = '\0';
    return cks_md_flush_version_parse(name, v_p) &&
           snprintf(path, PATH_MAX, "%s/%s", jobdir, d_name) < PATH_MAX &&
           snprintf(pub, PATH_MAX, "%s/%s", jobdir, name) < PATH_MAX;
}

/* --flush-age: is the job's newest flushed version older than the age? Its
 * age is that of its checkpoint (the seal time in its manifest); a flush of
 * the job under way (a temporary directory touched since) counts as a
 * version flushed when it was last touched, so that flushes do not pile up
 * behind a slow one. Due when nothing is flushed nor being flushed. */
int cks_fl_age_due(cks_server_h s, const char *jobdir)
{
    char path[PATH_MAX], name[32], err[256];
    cks_md_flush_manifest_t mf;
    struct dirent *e;
    uint64_t newest = 0, t = 0;
    int seen = 0;
    DIR *d;

    if (cks_fl_newest_published(jobdir, &newest)) {
        seen = 1;
        cks_md_flush_version_name(newest, name, sizeof(name));
        snprintf(path, sizeof(path), "%s/%s/MANIFEST", jobdir, name);
        if (cks_md_flush_manifest_read(path, &mf, err, sizeof(err)) == CKS_OK) {
            t = mf.v.sealed_ns ? mf.v.sealed_ns : mf.v.created_ns;
            cks_md_flush_manifest_free(&mf);
        } else {
            snprintf(path, sizeof(path), "%s/%s", jobdir, name);
            t = cks_fl_touched_ns(path);
        }
    }
    if ((d = opendir(jobdir)) != NULL) {
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp-") != NULL &&
                snprintf(path, sizeof(path), "%s/%s", jobdir, e->d_name) < (int)sizeof(path)) {
                seen = 1;
                t    = CKS_MAX(t, cks_fl_touched_ns(path));
            }
        }
        closedir(d);
    }
    uint64_t now = cks_fl_now_real_ns();
    return !seen || (now > t && now - t >= (uint64_t)s->p.flush_age_s * 1000000000ull);
}

/* Hand a version found due back to the progress thread (lock held). */
void cks_fl_hand_back(struct cks_sv_flush *fl, cks_fl_job_t *j)
{
    cks_fl_append(&fl->done_head, &fl->done_tail, j);
}

static void cks_fl_found(struct cks_sv_flush *fl, unsigned type, const char *job,
                         size_t job_len, uint64_t version)
{
    cks_fl_job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        return; /* the next scan finds it again */
    }
    j->type = type;
    memcpy(j->job, job, job_len);
    j->job_len = (uint32_t)job_len;
    j->version = version;
    pthread_mutex_lock(&fl->lock);
    cks_fl_hand_back(fl, j);
    pthread_mutex_unlock(&fl->lock);
}

/* Versions of one job that this server holds, are due by the policy and are
 * newer than the newest one published: every committed version whose number
 * is a multiple of --flush-every; with --flush-age, the newest committed
 * version when the newest flushed one is older than the age. */
static void cks_fl_scan_job(struct cks_sv_flush *fl, cks_md_txn_h txn, const char *job,
                            size_t job_len)
{
    enum { PAGE = 64 };
    cks_server_h s = fl->s;
    char jobdir[CKS_FL_DIR_MAX];
    cks_md_version_t vs[PAGE];
    uint64_t newest = 0, after = 0, last = 0;
    size_t n        = 0;
    int more = 1, first = 1, has, any = 0, last_listed = 0;

    if (!cks_fl_policy_on(s) ||
        cks_md_flush_job_dir(s->p.flush_dir, job, job_len, jobdir, sizeof(jobdir)) != CKS_OK) {
        return;
    }
    has = cks_fl_newest_published(jobdir, &newest);
    while (more && !fl->stop) {
        if (cks_md_version_list(txn, job, job_len, first ? NULL : &after, vs, PAGE, &n,
                                &more) != CKS_OK ||
            n == 0) {
            break;
        }
        first = 0;
        after = vs[n - 1].version;
        for (size_t i = 0; i < n; i++) {
            const cks_md_version_t *v = &vs[i];
            int restorable = (v->state == CKS_VSTATE_SEALED || v->state == CKS_VSTATE_PROTECTED ||
                              v->state == CKS_VSTATE_DEGRADED) &&
                             v->ec_k > 0;
            if (!restorable || (has && v->version <= newest)) {
                continue;
            }
            any         = 1;
            last        = v->version;
            last_listed = s->p.flush_every > 0 && v->version % s->p.flush_every == 0;
            if (last_listed) {
                cks_fl_found(fl, CKS_FL_SCAN_DUE, job, job_len, v->version);
            }
        }
    }
    if (any && !last_listed && s->p.flush_age_s > 0 && cks_fl_age_due(s, jobdir)) {
        cks_fl_found(fl, CKS_FL_SCAN_DUE, job, job_len, last);
    }
}

/* Newest change (CLOCK_REALTIME ns) to a flat directory or a file in it. */
static uint64_t cks_fl_touched_ns(const char *path)
{
    char f[PATH_MAX];
    struct stat st;
    struct dirent *e;
    uint64_t newest = 0;
    DIR *d;
    if (stat(path, &st) == 0) {
        newest = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    }
    if ((d = opendir(path)) == NULL) {
        return newest;
    }
    while ((e = readdir(d)) != NULL) {
        if (snprintf(f, sizeof(f), "%s/%s", path, e->d_name) < (int)sizeof(f) &&
            stat(f, &st) == 0) {
            newest = CKS_MAX(newest, (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
                                         (uint64_t)st.st_mtim.tv_nsec);
        }
    }
    closedir(d);
    return newest;
}

/* Remove what unfinished flushes left in one job's directory: a temporary
 * directory (".<version>.tmp-<nonce>") of a version that is published since,
 * or one that nothing touched for CKS_FL_STALE_NS; the same for a version
 * being removed by retention (".<version>.del-<nonce>"). Never a published
 * directory. */
static void cks_fl_clean_job_dir(const char *jobdir)
{
    char path[PATH_MAX], pub[PATH_MAX];
    struct dirent *e;
    struct stat st;
    uint64_t v;
    DIR *d = opendir(jobdir);
    if (d == NULL) {
        return;
    }
    uint64_t now_ns = cks_fl_now_real_ns();
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.' || strlen(e->d_name) < 26 ||
            (strncmp(e->d_name + 21, ".tmp-", 5) != 0 &&
             strncmp(e->d_name + 21, ".del-", 5) != 0) ||
            !cks_fl_dot_entry(jobdir, e->d_name, &v, path, pub)) {
            continue;
        }
        int published = e->d_name[22] == 't' && stat(pub, &st) == 0;
        uint64_t touched = cks_fl_touched_ns(path);
        if (published || e->d_name[22] == 'd' || touched + CKS_FL_STALE_NS < now_ns) {
            cks_info("flush: removing %s, left by a flush that did not finish", path);
            cks_fl_rmdir_flat(path);
        }
    }
    closedir(d);
}

/* a request recorded this long ago and still not published is given up */
#define CKS_FL_REQ_EXPIRE_NS (24ull * 3600 * 1000000000ull)

/* This server's requests recorded in one job's directory (`dname`, its
 * name): one whose version is published since is removed; one older than a
 * day is given up (removed, logged); the others are handed to the progress
 * thread, which flushes them again (cks_fl_policy_start: not while one is in
 * flight, and after a failure only once its retry is due). */
void cks_fl_scan_requests(struct cks_sv_flush *fl, const char *jobdir, const char *dname)
{
    char suffix[16], path[PATH_MAX], pub[PATH_MAX], job[CKS_JOB_MAX_LEN + 1];
    size_t job_len = 0;
    struct dirent *e;
    struct stat st;
    uint64_t v;
    DIR *d;

    snprintf(suffix, sizeof(suffix), ".req-%u",
             (unsigned)cks_cluster_server(fl->s->map, fl->s->self)->id);
    if ((d = opendir(jobdir)) == NULL) {
        return;
    }
    uint64_t now = cks_fl_now_real_ns();
    while ((e = readdir(d)) != NULL && !fl->stop) {
        if (e->d_name[0] != '.' || strlen(e->d_name) != 21 + strlen(suffix) ||
            strcmp(e->d_name + 21, suffix) != 0 ||
            !cks_fl_dot_entry(jobdir, e->d_name, &v, path, pub)) {
            continue;
        }
        if (stat(pub, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (unlink(path) == 0) {
                cks_fl_fsync_dir(jobdir);
                cks_info("flush: the request for version %" PRIu64 " in %s is met (published)",
                         v, jobdir);
            }
            continue;
        }
        if (stat(path, &st) == 0 &&
            (uint64_t)st.st_mtim.tv_sec * 1000000000ull + CKS_FL_REQ_EXPIRE_NS < now) {
            if (unlink(path) == 0) {
                cks_fl_fsync_dir(jobdir);
                cks_warn("flush: version %" PRIu64 " in %s was asked for a day ago and could "
                         "not be flushed since: the request is given up",
                         v, jobdir);
            }
            continue;
        }
        if (job_len == 0 && (job_len = cks_fl_job_of_dir(dname, job, sizeof(job))) == 0) {
            break;
        }
        cks_fl_found(fl, CKS_FL_SCAN_REQ, job, job_len, v);
    }
    closedir(d);
}

/* The policy's scan: which versions this server holds are due and not
 * published (handed to the progress thread, which starts those it
 * coordinates), and what unfinished flushes left in the flush directory. */
void cks_fl_scan(struct cks_sv_flush *fl)
{
    enum { PAGE = 64 };
    cks_server_h s = fl->s;
    char(*names)[CKS_JOB_MAX_LEN + 1] = malloc(PAGE * sizeof(*names));
    char after[CKS_JOB_MAX_LEN + 1], path[PATH_MAX];
    size_t after_len = 0, n = 0;
    int more = 1, first = 1;
    cks_md_txn_h txn = NULL;
    struct dirent *e;
    struct stat st;
    DIR *d;

    if (names == NULL) {
        return;
    }
    if (cks_md_txn_begin(s->md, 0, &txn) == CKS_OK) {
        while (more && !fl->stop) {
            if (cks_md_job_list(txn, first ? NULL : after, after_len, names, PAGE, &n,
                                &more) != CKS_OK ||
                n == 0) {
                break;
            }
            first     = 0;
            after_len = strlen(names[n - 1]);
            memcpy(after, names[n - 1], after_len + 1);
            for (size_t i = 0; i < n && !fl->stop; i++) {
                cks_fl_scan_job(fl, txn, names[i], strlen(names[i]));
            }
        }
        cks_md_txn_abort(txn);
    }
    free(names);
    /* every job's directory, also those of jobs this server does not hold */
    if ((d = opendir(s->p.flush_dir)) != NULL) {
        while ((e = readdir(d)) != NULL && !fl->stop) {
            if (e->d_name[0] != '.' &&
                snprintf(path, sizeof(path), "%s/%s", s->p.flush_dir, e->d_name) <
                    (int)sizeof(path) &&
                stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                cks_fl_scan_requests(fl, path, e->d_name);
                cks_fl_clean_job_dir(path);
            }
        }
        closedir(d);
    }
    pthread_mutex_lock(&fl->lock);
    if (fl->done_head != NULL) {
        cks_tp_worker_signal(s->tp);
    }
    pthread_mutex_unlock(&fl->lock);
}

/* ---- the flush policy: every Nth version, started by its coordinator ----------------------- */

/* a policy flush that failed is tried again after 10 s, doubling up to 10 min */
#define CKS_FL_RETRY_NS     10000000000ull
#define CKS_FL_RETRY_MAX_NS (600ull * 1000000000ull)
/* an entry of a failed flush not tried for this long is forgotten */
#define CKS_FL_FORGET_NS    (3600ull * 1000000000ull)

static cks_fl_pol_t *cks_fl_pol_find(struct cks_sv_flush *fl, const char *job, size_t job_len,
                                     uint64_t version)
{
    for (cks_fl_pol_t *e = fl->pol; e != NULL; e = e->next) {
        if (e->version == version && e->job_len == job_len &&
            memcmp(e->job, job, job_len) == 0) {
            return e;
        }
    }
    return NULL;
}

/* Answer one waiting client, and free it. */
static void cks_fl_answer(cks_fl_waiter_t *w, cks_status_t status, const char *why)
{
    cks_sv_reply_status(w->conn, w->req_id, status, why != NULL && why[0] ? "%s" : NULL, why);
    cks_tp_conn_put(w->conn);
    free(w);
}

/* Answer every client waiting for a, with `status` and a's reason. */
void cks_fl_answer_all(cks_fl_auto_t *a, cks_status_t status, const char *why)
{
    while (a->waiters != NULL) {
        cks_fl_waiter_t *w = a->waiters;
        a->waiters         = w->next;
        cks_fl_answer(w, status, why);
    }
}

/* A failure after which no flush of the version can publish it: a client's
 * request for it is dropped. */
static int cks_fl_hopeless(cks_status_t st)
{
    return st == CKS_ERR_NO_SUCH_VERSION || st == CKS_ERR_NO_SUCH_JOB ||
           st == CKS_ERR_NOT_RESTORABLE || st == CKS_ERR_UNSUPPORTED ||
           st == CKS_ERR_INVALID_PARAM;
}

/* Why a failed (the first reason of the most telling party). */
static void cks_fl_auto_why(cks_fl_auto_t *a, int rank, cks_status_t status, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));
static void cks_fl_auto_why(cks_fl_auto_t *a, int rank, cks_status_t status, const char *fmt,
                            ...)
{
    va_list ap;
    if (status == CKS_OK || status == CKS_ERR_VERSION_EXISTS || rank <= a->status_rank) {
        return;
    }
    a->status      = status;
    a->status_rank = rank;
    va_start(ap, fmt);
    vsnprintf(a->why, sizeof(a->why), fmt, ap);
    va_end(ap);
}

/* A flush this server ran ended: published (or already there), or failed.
 * Its waiting clients are answered; a client's request is removed once the
 * version is published or cannot be, else kept for a retry. */
static void cks_fl_auto_end(cks_server_h s, cks_fl_auto_t *a, int published)
{
    cks_fl_pol_t *e = a->pol;
    int hopeless    = !published && a->status_rank >= 2 && cks_fl_hopeless(a->status);
    uint64_t wait   = 0;
    char text[2 * CKS_MSG_MAX_LEN];

    if (!published && a->status == CKS_OK) {
        cks_fl_auto_why(a, 3, CKS_ERR_DATA_LOST, "no server wrote its chunks");
    }
    if (e != NULL && s->flush != NULL) {
        e->a = NULL;
        if (published || hopeless) {
            for (cks_fl_pol_t **pp = &s->flush->pol; *pp != NULL; pp = &(*pp)->next) {
                if (*pp == e) {
                    *pp = e->next;
                    break;
                }
            }
            free(e);
        } else {
            wait       = CKS_MIN(CKS_FL_RETRY_NS << CKS_MIN(e->tries - 1, 6u), CKS_FL_RETRY_MAX_NS);
            e->next_ns = cks_time_ns() + wait;
            cks_warn("flush%s: version %" PRIu64 " of '%s' not flushed (try %u): %s; "
                     "tried again in %" PRIu64 " s",
                     a->requested ? "" : " policy", a->version, a->job, e->tries, a->why,
                     (uint64_t)(wait / 1000000000ull));
        }
    }
    if (published) {
        int already = a->ok == 0 && a->exists > 0;
        snprintf(text, sizeof(text), "version %" PRIu64 " of '%s' is flushed already",
                 a->version, a->job);
        cks_fl_answer_all(a, already ? CKS_ERR_VERSION_EXISTS : CKS_OK, already ? text : NULL);
    } else if (a->requested && !hopeless) {
        if (wait > 0) {
            snprintf(text, sizeof(text),
                     "%.150s; the request is recorded: this server flushes the version again "
                     "in %" PRIu64 " s (and once it is back if it stops)",
                     a->why, (uint64_t)(wait / 1000000000ull));
        } else {
            snprintf(text, sizeof(text),
                     "%.150s; the request is recorded: this server flushes the version again "
                     "once it is back",
                     a->why);
        }
        cks_fl_answer_all(a, a->status, text);
    } else {
        cks_fl_answer_all(a, a->status, a->why);
    }
    if (a->requested && (published || hopeless) && s->flush != NULL && !s->flush->stop) {
        cks_fl_job_t *j = calloc(1, sizeof(*j));
        if (j != NULL) { /* else the scan removes it once it sees it published */
            j->type = CKS_FL_UNRECORD;
            memcpy(j->job, a->job, a->job_len);
            j->job_len = a->job_len;
            j->version = a->version;
            snprintf(j->dir, sizeof(j->dir), "%s", s->p.flush_dir);
            cks_fl_queue(s, j);
        }
    }
    free(a);
}

static void cks_fl_auto_publish(cks_server_h s, cks_fl_auto_t *a);

static void cks_fl_auto_one(cks_server_h s, cks_fl_auto_t *a, cks_status_t status)
{
    if (status == CKS_OK) {
        a->ok++;
    } else {
        a->failed++;
        a->exists += status == CKS_ERR_VERSION_EXISTS;
    }
    if (--a->pending == 0) {
        cks_fl_auto_publish(s, a);
    }
}

static void cks_fl_auto_local_done(cks_server_h s, cks_fl_job_t *j)
{
    cks_fl_auto_t *a = j->ctx;
    if (a->publishing) {
        if (j->status == CKS_OK) {
            cks_info("flush: version %" PRIu64 " of '%s' flushed to %s (chunks of %u of %u "
                     "servers)",
                     a->version, a->job, s->p.flush_dir, a->ok, a->ok + a->failed);
        }
        cks_fl_auto_why(a, 3, j->status, "%s", j->why);
        cks_fl_auto_end(s, a, j->status == CKS_OK || j->status == CKS_ERR_VERSION_EXISTS);
        return;
    }
    cks_fl_auto_why(a, 2, j->status, "%s", j->why);
    cks_fl_auto_one(s, a, j->status);
}

typedef struct {
    cks_server_h s;
    cks_fl_auto_t *a;
    unsigned id; /* the peer's server id */
} cks_fl_call_t;

static void cks_fl_auto_peer_done(void *arg, cks_status_t status, const char *msg)
{
    cks_fl_call_t *c = arg;
    if (status != CKS_OK && status != CKS_ERR_VERSION_EXISTS) {
        cks_warn("flush: server %u did not write its chunks of version %" PRIu64
                 " of '%s': %s%s%s",
                 c->id, c->a->version, c->a->job, cks_status_string(status), msg ? ": " : "",
                 msg ? msg : "");
        cks_fl_auto_why(c->a, 1, status, "server %u did not write its chunks: %s%s%.600s", c->id,
                        cks_status_string(status), msg ? ": " : "", msg ? msg : "");
    }
    cks_fl_auto_one(c->s, c->a, status);
    free(c);
}

static cks_fl_job_t *cks_fl_auto_job(cks_server_h s, cks_fl_auto_t *a, unsigned type)
{
    cks_fl_job_t *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        return NULL;
    }
    j->type = type;
    memcpy(j->job, a->job, a->job_len);
    j->job_len = a->job_len;
    j->version = a->version;
    j->nonce   = a->nonce;
    snprintf(j->dir, sizeof(j->dir), "%s", s->p.flush_dir);
    j->done = cks_fl_auto_local_done;
    j->ctx  = a;
    return j;
}

static void cks_fl_auto_publish(cks_server_h s, cks_fl_auto_t *a)
{
    if (s->flush == NULL || s->flush->stop) {
        /* shutting down: the next start's scan resumes it */
        cks_fl_auto_why(a, 3, CKS_ERR_SHUTTING_DOWN, "the server is stopping");
        cks_fl_auto_end(s, a, 0);
        return;
    }
    if (a->ok == 0 && a->exists > 0) {
        cks_fl_auto_end(s, a, 1); /* published before this flush began */
        return;
    }
    cks_fl_job_t *j = a->ok > 0 ? cks_fl_auto_job(s, a, CKS_MSG_FLUSH_PUBLISH) : NULL;
    if (j == NULL) {
        cks_warn("flush: version %" PRIu64 " of '%s' not flushed: no server wrote its chunks",
                 a->version, a->job);
        cks_fl_auto_end(s, a, 0);
        return;
    }
    a->publishing = 1;
    cks_fl_queue(s, j);
}

/* Flush (job, version) to --flush-dir: every server writes its chunks (a
 * server-to-server FLUSH_CHUNKS; this one on its flush thread), then this
 * one publishes. Not when a flush of it is in flight here (a client's
 * request joins it), nor, unless a client asks (w), while a failed one
 * waits for its retry. `requested`: a client asked for it (its record is
 * removed once it is published). w: a waiting client, answered when it
 * ends (this function owns it). */
void cks_fl_policy_start(cks_server_h s, const char *job, size_t job_len,
                                uint64_t version, const char *why, int requested,
                                cks_fl_waiter_t *w)
{
    cks_fl_auto_t *a = NULL;
    cks_fl_job_t *j;
    cks_fl_pol_t *e;
    uint64_t now = cks_time_ns();
    size_t n     = cks_cluster_nservers(s->map);

    if (s->flush == NULL && (s->stop || cks_fl_start(s) != CKS_OK)) {
        if (w != NULL) { /* stopping (or no thread): the next start's scan resumes it */
            cks_fl_answer(w, CKS_ERR_SHUTTING_DOWN, "the server is stopping");
        }
        return;
    }
    e = cks_fl_pol_find(s->flush, job, job_len, version);
    if (e != NULL && e->a != NULL) {
        e->a->requested |= requested;
        if (w != NULL) {
            w->next         = e->a->waiters;
            e->a->waiters   = w;
        }
        return;
    }
    if (e != NULL && now < e->next_ns && w == NULL) {
        return;
    }
    if ((e == NULL && (e = calloc(1, sizeof(*e))) == NULL) ||
        (a = calloc(1, sizeof(*a))) == NULL) {
        if (e != NULL && e->tries == 0) {
            free(e);
        }
        cks_warn("flush: cannot flush version %" PRIu64 ": out of memory", version);
        if (w != NULL) {
            cks_fl_answer(w, CKS_ERR_NO_MEMORY, "server out of memory");
        }
        return;
    }
    if (e->tries == 0) {
        memcpy(e->job, job, job_len);
        e->job_len    = (uint32_t)job_len;
        e->version    = version;
        e->next       = s->flush->pol;
        s->flush->pol = e;
    }
    e->tries++;
    e->last_ns   = now;
    e->a         = a;
    a->pol       = e;
    a->requested = requested;
    a->waiters   = w;
    if (w != NULL) {
        w->next = NULL;
    }
    memcpy(a->job, job, job_len);
    a->job_len = (uint32_t)job_len;
    a->version = version;
    a->nonce   = cks_tp_random_id();
    a->pending = 1; /* held until every request is out */
    cks_msg_flush_t m = {{a->job, a->job_len}, version, cks_wire_cstr(NULL), a->nonce};
    for (size_t pos = 0; pos < n; pos++) {
        if (pos == s->self) {
            if ((j = cks_fl_auto_job(s, a, CKS_MSG_FLUSH_CHUNKS)) != NULL) {
                a->pending++;
                cks_fl_queue(s, j);
            } else {
                a->failed++;
            }
            continue;
        }
        /* the peer writes to its own --flush-dir (the same storage) */
        cks_tp_conn_h conn = cks_sv_peer(s, pos);
        cks_fl_call_t *c   = malloc(sizeof(*c));
        unsigned id        = cks_cluster_server(s->map, pos)->id;
        if (conn == NULL || c == NULL) {
            free(c);
            a->failed++;
            cks_fl_auto_why(a, 1, CKS_ERR_UNREACHABLE, "server %u cannot be reached", id);
            continue;
        }
        *c = (cks_fl_call_t){s, a, id};
        a->pending++;
        if (cks_tp_call(conn, CKS_MSG_FLUSH_CHUNKS, 0, &m, NULL, 0, NULL,
                        CKS_FL_CALL_TIMEOUT_MS, cks_fl_auto_peer_done, c) != CKS_INPROGRESS) {
            free(c);
            a->pending--;
            a->failed++;
            cks_fl_auto_why(a, 1, CKS_ERR_UNREACHABLE, "server %u cannot be reached", id);
        }
    }
    cks_info("flush%s: flushing version %" PRIu64 " of '%.*s' to %s (%s%s)",
             requested ? "" : " policy", version, (int)job_len, job, s->p.flush_dir, why,
             e->tries > 1 ? ", tried again" : "");
    if (--a->pending == 0) { /* the hold: nothing went out */
        cks_fl_auto_publish(s, a);
    }
}

void cks_sv_flush_committed(cks_server_h s, const char *job, size_t job_len, uint64_t version)
{
    cks_fl_job_t *j;
    if (!cks_fl_policy_on(s)) {
        return;
    }
    if (s->p.flush_every > 0 && version % s->p.flush_every == 0) {
        cks_fl_policy_start(s, job, job_len, version, "every Nth version", 0, NULL);
        return;
    }
    if (s->p.flush_age_s == 0 || s->stop ||
        (s->flush == NULL && cks_fl_start(s) != CKS_OK) ||
        (j = calloc(1, sizeof(*j))) == NULL) {
        return; /* (no thread or memory: the scan finds it due) */
    }
    /* --flush-age: the flush thread reads the directory, then
     * cks_fl_finish() starts the flush when it is due */
    j->type = CKS_FL_AGE_CHECK;
    memcpy(j->job, job, job_len);
    j->job_len = (uint32_t)job_len;
    j->version = version;
    snprintf(j->dir, sizeof(j->dir), "%s", s->p.flush_dir);
    cks_fl_queue(s, j);
}

/* The scan found (job, version) due and not published: this server flushes
 * it when it is the version's first coordinator candidate (the server that
 * coordinates it unless it was down), or when a policy flush of it that this
 * server started failed and its retry is due. */
void cks_fl_scan_due(cks_server_h s, const cks_fl_job_t *j)
{
    struct cks_sv_flush *fl = s->flush;
    size_t rank             = SIZE_MAX;
    uint64_t now            = cks_time_ns();

    if (fl == NULL || fl->stop) {
        return;
    }
    /* forget failed flushes not tried for an hour (dropped from memory since) */
    for (cks_fl_pol_t **pp = &fl->pol; *pp != NULL;) {
        cks_fl_pol_t *e = *pp;
        if (e->a == NULL && e->last_ns + CKS_FL_FORGET_NS < now) {
            *pp = e->next;
            free(e);
        } else {
            pp = &e->next;
        }
    }
    if (cks_fl_pol_find(fl, j->job, j->job_len, j->version) == NULL &&
        (!cks_sv_coord_candidate(s, j->job, j->job_len, j->version, &rank) || rank != 0)) {
        return;
    }
    cks_fl_policy_start(s, j->job, j->job_len, j->version, "due and not published", 0, NULL);
}
