/*
 * DESIGN: the snapshot and restore phases: this process's own client (versions
 * begun, deleted, released), timed snapshots of all writers (healthy and
 * with servers down), restores (healthy, degraded, by fresh clients), the
 * memory in use, and the repetitions that put them together.
 */
#include "cluster_int.h"

#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int cl_fail(const cl_ctx_t *x, const char *what, cks_status_t st)
{
    char why[256] = "";
    if (x->client != NULL) {
        cks_client_last_error(x->client, why, sizeof(why));
    }
    fprintf(stderr, "ckstore-bench: %s: %s%s%s\n", what, cks_status_string(st),
            why[0] ? ": " : "", why);
    return -1;
}

int cl_client_connect(cl_ctx_t *x)
{
    cks_client_params_t cp;
    cks_status_t st;
    if (x->client != NULL) {
        cks_client_destroy(x->client);
        x->client = NULL;
    }
    cl_client_params(x, &cp, "ckstore-bench-coordinator");
    st = cks_client_create(&cp, &x->client);
    if (st != CKS_OK) {
        x->client = NULL;
        return cl_fail(x, "connect to the cluster", st);
    }
    return 0;
}

/* cks_version_begin() of the run's own client; its status. */
static cks_status_t cl_begin_st(cl_ctx_t *x, const char *job, uint64_t version,
                                uint64_t parent, uint32_t retain, uint32_t nranks)
{
    cks_version_params_t vp;
    memset(&vp, 0, sizeof(vp));
    vp.field_mask = CKS_VERSION_FIELD_NRANKS | CKS_VERSION_FIELD_TIMEOUT;
    vp.job = job;
    vp.version = version;
    vp.nranks = nranks;
    vp.timeout_s = (uint32_t)(x->o.timeout_s * 4);
    if (parent != CKS_NO_PARENT) {
        vp.field_mask |= CKS_VERSION_FIELD_PARENT;
        vp.parent = parent;
    }
    if (retain > 0) {
        vp.field_mask |= CKS_VERSION_FIELD_RETAIN;
        vp.retain = retain;
    }
    return cks_version_begin(x->client, &vp);
}

int cl_begin(cl_ctx_t *x, const char *job, uint64_t version, uint64_t parent,
             uint32_t retain, uint32_t nranks)
{
    cks_status_t st = cl_begin_st(x, job, version, parent, retain, nranks);
    if (st != CKS_OK) {
        char what[128];
        snprintf(what, sizeof(what), "begin %s version %llu", job,
                 (unsigned long long)version);
        return cl_fail(x, what, st);
    }
    return 0;
}

/* Free everything a job holds. Deleting versions one by one is not enough
 * once retention has dropped older ones: a version delete frees only the
 * chunks written in that version, so chunks of dropped ancestors that the
 * deleted manifests still used would stay allocated (see the docs). Instead,
 * commit an empty version with retention 1 (the newest restorable version is
 * then the empty one, and the retention sweep frees every chunk of the job
 * that no manifest uses), then delete it and anything left. */
void cl_release_job(cl_ctx_t *x, const char *job, uint64_t empty_version)
{
    cks_version_info_t v[256];
    size_t n = 0;
    int more = 0;
    cks_status_t st;

    if (cl_begin(x, job, empty_version, CKS_NO_PARENT, 1, 1) == 0) {
        st = cks_version_finish(x->client, job, empty_version, 0);
        if (st != CKS_OK) {
            cl_fail(x, "finish of the empty version", st);
        }
    }
    if (cks_version_list(x->client, job, NULL, v, 256, &n, &more) != CKS_OK) {
        return;
    }
    while (n-- > 0) {
        st = cks_version_delete(x->client, job, v[n].version);
        if (st != CKS_OK && st != CKS_ERR_NO_SUCH_VERSION) {
            char what[128];
            snprintf(what, sizeof(what), "delete %s version %llu", job,
                     (unsigned long long)v[n].version);
            cl_fail(x, what, st);
        }
    }
}

static int cl_restore_phase(cl_ctx_t *x, const char *job, uint64_t version,
                            unsigned level, int verify, int fresh)
{
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    uint64_t bytes;
    double secs, cpu0, cpu1;
    unsigned n = x->fig.nrestore[level];

    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_RESTORE;
    cmd.flags = (verify ? CL_F_VERIFY : 0) | (fresh ? CL_F_FRESH : 0);
    cmd.version = version;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    bench_progress("rep %u/%u: restore of version %llu, %u server%s down", n + 1,
                   x->o.reps, (unsigned long long)version, level, level == 1 ? "" : "s");
    if (cl_workers_run(x, &cmd, res, x->o.readers) != 0) {
        return -1;
    }
    cpu0 = x->cpu_go;
    cpu1 = cl_servers_cpu(x);
    cl_aggregate(res, x->o.readers, &bytes, NULL, &secs, NULL);
    if (level == 0) {
        cl_net_account(x, CL_NET_RESTORE, bytes);
    }
    x->fig.restore[level][n] = secs;
    x->fig.nrestore[level]++;
    if (cpu0 >= 0 && cpu1 >= 0) {
        x->fig.srv_cpu_restore[level][x->fig.ncpu_restore[level]] =
            (cpu1 - cpu0) / ((double)bytes / BENCH_GB);
        x->fig.cli_cpu_restore[level][x->fig.ncpu_restore[level]++] =
            cl_clients_cpu(res, x->o.readers) / ((double)bytes / BENCH_GB);
    }
    cl_say(x, "  rep %u: restore, %u server%s down: %.2f GB/s%s\n", n + 1, level,
           level == 1 ? "" : "s", (double)bytes / secs / BENCH_GB,
           verify ? " (bytes verified)" : "");
    return 0;
}

/* The writer's restore of `version` once more, right after its first: the
 * warm restore of the cold and warm table (cl_cw_t). 0, or -1 (said why). */
static int cl_restore_again(cl_ctx_t *x, const char *job, uint64_t version, unsigned rep)
{
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    uint64_t bytes;
    double secs;

    memset(&cmd, 0, sizeof(cmd));
    cmd.op      = CL_CMD_RESTORE;
    cmd.version = version;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    bench_progress("rep %u/%u: restore of version %llu again", rep + 1, x->o.reps,
                   (unsigned long long)version);
    if (cl_workers_run(x, &cmd, res, x->o.readers) != 0) {
        return -1;
    }
    cl_aggregate(res, x->o.readers, &bytes, NULL, &secs, NULL);
    if (x->cw.nagain < CL_MAX_REPS) {
        x->cw.again_s[x->cw.nagain++] = secs;
    }
    cl_say(x, "  rep %u: restore again, at once (warm): %.2f GB/s\n", rep + 1,
           (double)bytes / secs / BENCH_GB);
    return 0;
}

/* One snapshot: `version` of all writers, timed. */
static int cl_snapshot(cl_ctx_t *x, const char *job, uint64_t version, int fresh,
                       unsigned rep)
{
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    uint64_t bytes, rmax;
    double stored_s, prot_s, cpu0, cpu1, stall = 0, last_stored = 0, last_end = 0;

    if (cl_begin(x, job, version, CKS_NO_PARENT, 0, x->o.clients) != 0) {
        return -1;
    }
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_SNAP;
    cmd.flags = fresh == CL_CLIENT_FRESH       ? CL_F_FRESH
                : fresh == CL_CLIENT_RECONNECT ? CL_F_RECONNECT
                                               : 0;
    cmd.version = version;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    bench_progress("rep %u/%u: snapshot, version %llu", rep + 1, x->o.reps,
                   (unsigned long long)version);
    cks_cluster_stats_t es0, es1;
    int have_es = cks_cluster_stats(x->client, &es0) == CKS_OK;
    if (cl_workers_run(x, &cmd, res, x->o.clients) != 0) {
        cks_version_abort(x->client, job, version);
        return -1;
    }
    cpu0 = x->cpu_go;
    cpu1 = cl_servers_cpu(x);
    cl_aggregate(res, x->o.clients, &bytes, &stored_s, &prot_s, &rmax);
    cl_net_account(x, CL_NET_SNAP, bytes);
    /* counters since each server's start: a phase with a restart in it, or a
     * server that did not answer both times, is left out */
    if (have_es && cks_cluster_stats(x->client, &es1) == CKS_OK &&
        es0.answered == es0.servers && es1.answered == es1.servers &&
        es1.encoded_bytes >= es0.encoded_bytes &&
        es1.encode_cpu_ns >= es0.encode_cpu_ns &&
        es1.encoder_cpu_ns >= es0.encoder_cpu_ns) {
        x->fig.enc_bytes += es1.encoded_bytes - es0.encoded_bytes;
        x->fig.enc_ns += es1.encode_cpu_ns - es0.encode_cpu_ns;
        x->fig.enc_job_ns += es1.encoder_cpu_ns - es0.encoder_cpu_ns;
    }
    for (unsigned w = 0; w < x->o.clients; w++) {
        /* the trainer's buffers are free at STORED, or, staged, at COPIED */
        double st =
            (res[w].t_copied > 0 ? res[w].t_copied : res[w].t_stored) - res[w].t_start;
        stall = st > stall ? st : stall;
        last_stored = res[w].t_stored > last_stored ? res[w].t_stored : last_stored;
        last_end = res[w].t_end > last_end ? res[w].t_end : last_end;
    }
    x->fig.bytes = bytes;
    x->fig.rank_bytes = rmax;
    if (x->fig.nsnap < CL_MAX_SNAPS) {
        unsigned n = x->fig.nsnap++;
        x->fig.stored[n] = stored_s;
        x->fig.prot[n] = prot_s;
        x->fig.tail[n] = last_end - last_stored;
        x->fig.stall[n] = stall;
        if (cpu0 >= 0 && cpu1 >= 0) {
            x->fig.srv_cpu_snap[x->fig.ncpu_snap] =
                (cpu1 - cpu0) / ((double)bytes / BENCH_GB);
            x->fig.cli_cpu_snap[x->fig.ncpu_snap++] =
                cl_clients_cpu(res, x->o.clients) / ((double)bytes / BENCH_GB);
        }
    }
    cl_say(
        x,
        "  rep %u: snapshot (version %llu): STORED %.2f GB/s, PROTECTED %.2f GB/s, stall "
        "%.0f ms, commit %.0f ms\n",
        rep + 1, (unsigned long long)version, (double)bytes / stored_s / BENCH_GB,
        (double)bytes / prot_s / BENCH_GB, stall * 1e3, (last_end - last_stored) * 1e3);
    return 0;
}

/* A snapshot with `down` servers killed: a version whose coordinator is up
 * (from *version_io on, the next numbers are tried: one whose coordinator is
 * down cannot begin), stored without the dead servers' chunks and committed
 * DEGRADED. Prints STORED and committed bandwidth and the state. */
int cl_snapshot_down(cl_ctx_t *x, const char *job, uint64_t *version_io, unsigned down,
                     unsigned rep, const char *label, double *stored_p)
{
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    cks_version_info_t vi;
    cks_status_t st = CKS_ERR_UNREACHABLE;
    uint64_t bytes, rmax;
    double stored_s, prot_s;

    for (unsigned t = 0; t < 16 && st != CKS_OK; t++, (*version_io)++) {
        st = cl_begin_st(x, job, *version_io, CKS_NO_PARENT, 0, x->o.clients);
        if (st != CKS_OK && st != CKS_ERR_UNREACHABLE && st != CKS_ERR_CONN_LOST &&
            st != CKS_ERR_TIMEOUT) {
            return cl_fail(x, "begin a version with servers down", st);
        }
    }
    if (st != CKS_OK) {
        return cl_fail(x, "begin a version with servers down", st);
    }
    (*version_io)--; /* the one begun */
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_SNAP;
    cmd.version = *version_io;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    bench_progress("rep %u/%u: snapshot with %u down, version %llu", rep + 1, x->o.reps,
                   down, (unsigned long long)*version_io);
    if (cl_workers_run(x, &cmd, res, x->o.clients) != 0) {
        cks_version_abort(x->client, job, *version_io);
        return -1;
    }
    cl_aggregate(res, x->o.clients, &bytes, &stored_s, &prot_s, &rmax);
    st = cks_version_stat(x->client, job, *version_io, &vi);
    if (st != CKS_OK) {
        return cl_fail(x, "stat of a version written with servers down", st);
    }
    if (stored_p != NULL) {
        *stored_p = stored_s;
    }
    if (label != NULL) {
        cl_say(x,
               "  rep %u: snapshot %s (version %llu): STORED %.2f GB/s, committed %.2f "
               "GB/s, %s\n",
               rep + 1, label, (unsigned long long)*version_io,
               (double)bytes / stored_s / BENCH_GB, (double)bytes / prot_s / BENCH_GB,
               cks_vstate_string(vi.state));
        return 0;
    }
    if (down <= CL_MAX_DOWN && x->fig.ndown_stored[down] < CL_MAX_REPS) {
        x->fig.down_stored[down][x->fig.ndown_stored[down]++] = stored_s;
    }
    cl_say(
        x,
        "  rep %u: snapshot with %u of %u servers down (version %llu): STORED %.2f GB/s, "
        "committed %.2f GB/s, %s, redundancy %u/%u, %llu chunks missing\n",
        rep + 1, down, x->nsrv, (unsigned long long)*version_io,
        (double)bytes / stored_s / BENCH_GB, (double)bytes / prot_s / BENCH_GB,
        cks_vstate_string(vi.state), vi.redundancy, vi.ec_m,
        (unsigned long long)vi.missing);
    return 0;
}

/* Arena bytes in use and the servers' resident memory, now. */
static void cl_memory_now(cl_ctx_t *x)
{
    uint64_t used = 0;
    if (cks_cluster_usage(x->client, &used, NULL) == CKS_OK) {
        x->fig.used_bytes = used;
    }
    x->fig.rss = x->fig.rss_anon = x->fig.rss_shmem = 0;
    for (unsigned i = 0; i < x->nsrv; i++) {
        uint64_t rss, anon, shmem;
        if (x->srv[i].pid > 0 &&
            bench_proc_rss(x->srv[i].pid, &rss, &anon, &shmem) == 0) {
            x->fig.rss += rss;
            x->fig.rss_anon += anon;
            x->fig.rss_shmem += shmem;
        }
    }
}

/* Keep the measured order of mainfig's figures (after the measurements). */
static void cl_cw_keep(cl_ctx_t *x)
{
    x->cw.nsnap = x->fig.nsnap;
    memcpy(x->cw.stored, x->fig.stored, sizeof(x->cw.stored));
    memcpy(x->cw.prot, x->fig.prot, sizeof(x->cw.prot));
    memcpy(x->cw.stall, x->fig.stall, sizeof(x->cw.stall));
    x->cw.nrestore = x->fig.nrestore[0];
    memcpy(x->cw.restore, x->fig.restore[0], sizeof(x->cw.restore));
}

static int cl_cw_restore_fresh(cl_ctx_t *x, const char *job, uint64_t version)
{
    cl_res_t res[CL_MAX_CLIENTS];
    cl_cmd_t cmd;
    uint64_t bytes;
    double secs;

    /* what the fresh processes will fault in: their buffers and as much
     * again for the reference touch next to them; backed by the host first,
     * so that neither meets memory the VM handed back to it (whichever came
     * first would get the memory the host still backs: docs/PERFORMANCE.md) */
    uint64_t need = 0;
    for (unsigned w = 0; w < x->o.readers; w++) {
        unsigned first, count;
        cl_read_share(x, w, x->o.readers, &first, &count);
        need += w < x->o.clients ? x->mix.bytes : 0;
        for (unsigned g = first; g < first + count; g++) {
            need += x->mix.obj[g % x->mix.n].size;
        }
    }
    uint64_t avail = (uint64_t)sysconf(_SC_AVPHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    double back    = bench_back_free_memory(CKS_MIN(2 * need + (64u << 20), avail / 2));
    if (isfinite(back) && x->cw.nback < CL_MAX_REPS) {
        x->cw.back_ms_gib[x->cw.nback++] = back;
    }

    memset(&cmd, 0, sizeof(cmd));
    cmd.op = CL_CMD_RESTORE;
    cmd.flags = CL_F_FRESH;
    cmd.version = version;
    snprintf(cmd.job, sizeof(cmd.job), "%s", job);
    if (x->o.hosts && x->cw.nfresh < x->o.reps) {
        /* fresh processes, forked at the start, that have not used UCX yet */
        unsigned rep = x->cw.nfresh;
        bench_progress("restore of version %llu by fresh processes",
                       (unsigned long long)version);
        int rc = cl_workers_run_at(x, cl_cold_slot(x, rep, 0), &cmd, res, x->o.readers);
        for (unsigned w = 0; w < x->o.readers; w++) {
            cl_worker_quit(x, cl_cold_slot(x, rep, w)); /* their buffers go with them */
        }
        if (rc != 0) {
            return -1;
        }
    } else {
        bench_progress("restore of version %llu by fresh clients",
                       (unsigned long long)version);
        if (cl_workers_run(x, &cmd, res, x->o.readers) != 0) {
            return -1;
        }
    }
    cl_aggregate(res, x->o.readers, &bytes, NULL, &secs, NULL);
    cl_net_account(x, CL_NET_RESTORE_COLD, bytes);
    if (x->cw.nfresh < CL_MAX_REPS) {
        x->cw.fresh_s[x->cw.nfresh++] = secs;
    }
    for (unsigned w = 0; w < x->o.readers; w++) {
        if (res[w].alloc_bytes > 0 && x->cw.nfresh_alloc < CL_MAX_REPS * CL_MAX_CLIENTS) {
            x->cw.fresh_alloc_ms_gib[x->cw.nfresh_alloc++] =
                res[w].alloc_s * 1e3 / ((double)res[w].alloc_bytes / (1u << 30));
        }
        if (res[w].touch_ms_gib > 0 && isfinite(res[w].touch_ms_gib) &&
            x->cw.ntouch < CL_MAX_REPS * CL_MAX_CLIENTS) {
            x->cw.touch_ms_gib[x->cw.ntouch++] = res[w].touch_ms_gib;
            x->cw.touch_pages = res[w].touch_pages;
        }
    }
    cl_say(x, "  restore by fresh %s into fresh buffers: %.2f GB/s\n",
           x->o.hosts ? "processes" : "clients", (double)bytes / secs / BENCH_GB);
    return 0;
}

int cl_measure_main(cl_ctx_t *x)
{
    char job[64];
    int fresh = CL_CLIENT_FRESH;

    snprintf(job, sizeof(job), "bench-%d", (int)getpid());
    cl_placement_say(x, job);
    x->fig.ndown = 0;
    if (x->o.local > 0 && !x->o.no_degraded) {
        x->fig.ndown = x->o.m < CL_MAX_DOWN ? x->o.m : CL_MAX_DOWN;
        /* two servers of one rack (rack r1 of 3): a rack lost */
        x->fig.down_ids[0] = 1;
        x->fig.down_ids[1] = 1 + CL_RACKS < x->nsrv ? 1 + CL_RACKS : x->nsrv - 1;
        if (x->nsrv - x->fig.ndown < x->o.k) {
            x->fig.ndown = x->nsrv > x->o.k ? x->nsrv - x->o.k : 0;
        }
    }
    for (unsigned rep = 0; rep < x->o.reps; rep++) {
        uint64_t first = (uint64_t)rep * x->o.versions + 1;
        uint64_t newest = first + x->o.versions - 1;
        uint64_t downv[CL_MAX_DOWN] = {0};

        if (cl_client_connect(x) != 0) {
            return -1;
        }
        /* `versions` snapshots in a row, all kept */
        for (uint64_t v = first; v <= newest; v++) {
            if (cl_snapshot(x, job, v, fresh, rep) != 0) {
                return -1;
            }
            fresh = CL_CLIENT_KEEP;
        }
        if (rep == 0) {
            cl_memory_now(x);
        }
        if (cl_restore_phase(x, job, newest, 0, rep == 0, 0) != 0 ||
            cl_restore_again(x, job, newest, rep) != 0) {
            return -1;
        }
        if (cl_cw_restore_fresh(x, job, newest) !=
            0) { /* cold and warm: a replacement rank */
            return -1;
        }
        for (unsigned d = 0; d < x->fig.ndown; d++) {
            cl_server_kill(x, &x->srv[x->fig.down_ids[d]]);
            /* a fresh client: a replacement rank restoring after the failure */
            if (cl_restore_phase(x, job, newest, d + 1, rep == 0, 1) != 0) {
                return -1;
            }
            /* and a checkpoint written with them down (DEGRADED) */
            downv[d] = 1000000 + (uint64_t)rep * 1000 + d * 100;
            if (cl_snapshot_down(x, job, &downv[d], d + 1, rep, NULL, NULL) != 0) {
                return -1;
            }
        }
        if (x->fig.ndown > 0) {
            double t_spawn = bench_now();
            bench_progress("rep %u/%u: restarting the killed servers", rep + 1,
                           x->o.reps);
            if (cl_servers_respawn(x, x->fig.down_ids, x->fig.ndown) != 0) {
                return -1;
            }
            /* what a restart costs before the catch-up: mostly the arena's
             * fault-in (server/arena.c) */
            cl_say(x, "  rep %u: %u servers restarted on their arenas, listening after %.0f ms\n",
                   rep + 1, x->fig.ndown, (bench_now() - t_spawn) * 1e3);
            /* the trainer goes on with the replacement ranks' clients (the
             * last degraded restore's): they find the restarted servers */
            fresh = CL_CLIENT_RECONNECT;
            if (cl_client_connect(x) != 0) {
                return -1;
            }
            if (cl_heal_phase(x, job, first, newest, downv, rep, t_spawn) != 0) {
                return -1;
            }
            if (x->o.restart_pause_s > 0) { /* a trainer's time between checkpoints */
                bench_progress("rep %u/%u: %.1f s before the next snapshot", rep + 1,
                               x->o.reps, x->o.restart_pause_s);
                usleep((useconds_t)(x->o.restart_pause_s * 1e6));
            }
        }
        for (uint64_t v = first; v <= newest; v++) {
            cks_status_t st = cks_version_delete(x->client, job, v);
            if (st != CKS_OK) {
                return cl_fail(x, "delete", st);
            }
        }
        for (unsigned d = 0; d < x->fig.ndown; d++) {
            cks_status_t st = cks_version_delete(x->client, job, downv[d]);
            if (st != CKS_OK) {
                return cl_fail(x, "delete", st);
            }
        }
    }
    bench_progress_clear();
    cl_cw_keep(x); /* cold and warm, per phase */
    return 0;
}
