/*
 * DESIGN: the flush thread's scan, from the server's start and every 10 s
 * (flush_thread.c runs it): which versions this server holds are due by
 * the policy (--flush-every, --flush-age) and not published, which requests
 * of this server's are recorded and not met, and what unfinished flushes
 * left in the flush directory; what it finds goes back to the progress
 * thread, whose policy (flush_policy.c) starts the flushes. Also whether a
 * version is due by age, and whether the policy and the scan are on. See
 * flush.c for the whole design.
 *
 * Never: touch the progress thread's state or UCX from this thread; remove
 * a published directory.
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

/* Is a policy on (--flush-every or --flush-age, with a flush directory)? */
int cks_fl_policy_on(cks_server_h s)
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
    cks_fl_append(&fl->done_head, &fl->done_tail, j); /* to the progress thread */
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
