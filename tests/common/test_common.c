/*
 * common/: the log macro; fault points. In a build with them
 * (-DCKS_FAULT_POINTS=ON, as scripts/test builds), arming and firing
 * behave as documented in cks_common.h and a server started with
 * CKS_FAULTS fires the point. In a
 * build without them (the default, release) nothing can be armed, and a
 * server started with CKS_FAULTS logs once that it ignores it and serves as
 * if it were not set. Each test that needs the other kind of build skips
 * with the reason, so both kinds report what they could not check.
 */
#include "cks_common.h"
#include "cks_faults_gate.h"
#include "cks_test.h"
#include "ckstore.h"

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1ull << 20)

static void needs_no_fault_points(void)
{
    if (cks_fault_points_built()) {
        cr_skip_test("this build has fault points; the check runs in a build "
                     "without them (scripts/test: its minimal build)");
    }
}

/* ---- unit: the fault table ---------------------------------------------- */

static void unit_setup(void)
{
    cks_fault_disarm_all(); /* nothing armed from the environment */
    cks_log_set_level(CKS_LOG_ERROR); /* each firing logs a warning */
}

TestSuite(fault_points, .init = unit_setup, .timeout = 30);

Test(fault_points, once_fires_exactly_once)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    cr_assert_eq(cks_fault_fire("t_once"), 0, "fired before it was armed");
    cr_assert_eq(cks_fault_arm("t_once", CKS_FAULT_ONCE), CKS_OK);
    cr_assert_eq(cks_fault_fire("t_other"), 0, "an unarmed point fired");
    cr_assert_neq(cks_fault_fire("t_once"), 0, "the armed point did not fire");
    cr_assert_eq(cks_fault_fire("t_once"), 0, "a once point fired twice");
    /* arming it again re-arms it */
    cr_assert_eq(cks_fault_arm("t_once", CKS_FAULT_ONCE), CKS_OK);
    cr_assert_neq(cks_fault_fire("t_once"), 0);
}

Test(fault_points, always_fires_until_disarmed)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    cr_assert_eq(cks_fault_arm("t_always", CKS_FAULT_ALWAYS), CKS_OK);
    for (int i = 0; i < 100; i++) {
        cr_assert_neq(cks_fault_fire("t_always"), 0, "call %d did not fire", i);
    }
    cr_assert_eq(cks_fault_arm("t_always", CKS_FAULT_OFF), CKS_OK);
    cr_assert_eq(cks_fault_fire("t_always"), 0, "fired after being set OFF");
    cr_assert_eq(cks_fault_arm("t_always", CKS_FAULT_ALWAYS), CKS_OK);
    cks_fault_disarm_all();
    cr_assert_eq(cks_fault_fire("t_always"), 0, "fired after disarm_all");
}

Test(fault_points, probability_fires_some_not_all)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    int fired = 0;
    cr_assert_eq(cks_fault_arm_p("t_p", 1.0), CKS_OK);
    for (int i = 0; i < 100; i++) {
        cr_assert_neq(cks_fault_fire("t_p"), 0, "p = 1 did not fire on call %d", i);
    }
    /* the draws come from a seeded generator (CKS_FAULT_SEED, default 1):
     * the count is fixed for a seed, and 0 or 1000 of 1000 at p = 0.5 would
     * mean the probability is ignored */
    cr_assert_eq(cks_fault_arm_p("t_p", 0.5), CKS_OK);
    for (int i = 0; i < 1000; i++) {
        fired += cks_fault_fire("t_p") != 0;
    }
    cr_assert(fired > 0 && fired < 1000, "p = 0.5 fired %d of 1000 times", fired);
}

Test(fault_points, bad_arguments_are_refused)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    char name[64];
    cr_assert_eq(cks_fault_arm(NULL, CKS_FAULT_ONCE), CKS_ERR_INVALID_PARAM);
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    cr_assert_eq(cks_fault_arm(name, CKS_FAULT_ONCE), CKS_ERR_INVALID_PARAM,
                 "a 63-byte name was accepted");
    cr_assert_eq(cks_fault_arm("t_bad", CKS_FAULT_PROB), CKS_ERR_INVALID_PARAM,
                 "PROB without a probability was accepted");
    cr_assert_eq(cks_fault_arm_p("t_bad", 0), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_fault_arm_p("t_bad", 1.5), CKS_ERR_INVALID_PARAM);
    cr_assert_eq(cks_fault_fire("t_bad"), 0, "a refused arm armed the point");
    /* the table is bounded: past it, arming fails instead of growing */
    int armed = 0;
    cks_status_t status = CKS_OK;
    for (int i = 0; i < 1000 && status == CKS_OK; i++) {
        snprintf(name, sizeof(name), "t_fill_%d", i);
        status = cks_fault_arm(name, CKS_FAULT_ALWAYS);
        armed += status == CKS_OK;
    }
    cr_assert_eq(status, CKS_ERR_NO_MEMORY, "table full gave %s", cks_status_name(status));
    cr_assert(armed > 0 && armed < 1000);
    cr_assert_neq(cks_fault_fire("t_fill_0"), 0, "a full table lost its first point");
}

Test(fault_points, nothing_arms_without_fault_points)
{
    needs_no_fault_points();
    cr_assert_eq(cks_fault_arm("arena_alloc", CKS_FAULT_ALWAYS), CKS_ERR_UNSUPPORTED);
    cr_assert_eq(cks_fault_arm_p("arena_alloc", 1.0), CKS_ERR_UNSUPPORTED);
    cr_assert_eq(cks_fault_fire("arena_alloc"), 0);
}

/* ---- end to end: a server started with CKS_FAULTS ------------------------ */

static const char ignored_warning[] =
    "CKS_FAULTS is set but this build has no fault points; ignored";

static cks_test_server_t srv;
static cks_client_h cl;

/* A standalone server whose environment has CKS_FAULTS=arena_alloc:always
 * (the child inherits this worker's environment; this process's own fault
 * table was set up before main and is not touched), and a client of it. */
static void server_setup(void)
{
    cr_assert_eq(setenv("CKS_FAULTS", "arena_alloc:always", 1), 0);
    cr_assert_eq(cks_test_server_start(&srv, 16 * MiB), 0);
    cr_assert_eq(cks_test_connect(&srv, 30000, &cl), CKS_OK, "connect to %s", srv.addr);
}

static void server_teardown(void)
{
    if (cl != NULL) {
        cks_client_destroy(cl);
        cl = NULL;
    }
    cks_test_server_cleanup(&srv);
    unsetenv("CKS_FAULTS");
}

static cks_status_t put_one(void)
{
    static uint8_t buf[4096];
    cks_version_params_t vp = {0};
    cks_put_params_t p      = {0};
    vp.job                  = "faults";
    vp.version              = 1;
    cr_assert_eq(cks_version_begin(cl, &vp), CKS_OK);
    memset(buf, 0x5A, sizeof(buf));
    p.job     = "faults";
    p.version = 1;
    p.key     = "obj";
    p.buffer  = buf;
    p.size    = sizeof(buf);
    return cks_put(cl, &p);
}

TestSuite(fault_points_server, .fini = server_teardown, .timeout = 120);

Test(fault_points_server, armed_point_fires_in_a_test_build)
{
    CKS_TEST_NEEDS_FAULT_POINTS();
    server_setup();
    cks_status_t status = put_one();
    cr_assert_neq(status, CKS_OK, "a put succeeded with arena_alloc:always armed");
    cr_assert(cks_test_log_has(srv.log, "fault point 'arena_alloc' fired", 5000),
              "the server never logged the fault (log in %s)", srv.log);
    cr_assert_eq(cks_test_log_lines(srv.log, ignored_warning), 0,
                 "a build with fault points said it ignores CKS_FAULTS");
}

Test(fault_points_server, release_server_ignores_cks_faults_and_says_so)
{
    needs_no_fault_points();
    server_setup();
    cks_status_t status = put_one();
    cr_assert_eq(status, CKS_OK, "put: %s (a fault fired in a build without fault points?)",
                 cks_status_name(status));
    cr_assert_eq(cks_version_seal(cl, "faults", 1), CKS_OK);
    cr_assert_eq(cks_test_log_lines(srv.log, ignored_warning), 1,
                 "the warning is not in the log exactly once (log in %s)", srv.log);
    cr_assert_eq(cks_test_log_lines(srv.log, "fault point '"), 0, "a fault point fired");
}

/* ---- unit: the one size parser (server, demo and bench options) ---------- */

TestSuite(size_parse, .timeout = 10);

Test(size_parse, suffixes_are_binary)
{
    static const struct {
        const char *text;
        uint64_t want;
    } ok[] = {
        {"0", 0},           {"4096", 4096},           {"16M", 16 * MiB},
        {"16m", 16 * MiB},  {"16MiB", 16 * MiB},      {"16MB", 16 * MiB},
        {"1k", 1024},       {"3G", 3ull << 30},       {"2TiB", 2ull << 40},
        {"7B", 7},          {"16777215T", 16777215ull << 40},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 12345;
        cr_assert_eq(cks_size_parse(ok[i].text, &v), CKS_OK, "'%s' refused", ok[i].text);
        cr_assert_eq(v, ok[i].want, "'%s' gave %llu, want %llu", ok[i].text,
                     (unsigned long long)v, (unsigned long long)ok[i].want);
    }
}

Test(size_parse, bad_text_is_refused_and_leaves_the_output)
{
    static const char *bad[] = {
        "",     "M",     "-1",    "+1",   " 1",  "1 ",   "1X",  "1Mi B", "1iB",
        "1MM",  "0x10",  "1.5G",  "16777216T", "18446744073709551616",
        "99999999999999999999999",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 12345;
        cr_assert_eq(cks_size_parse(bad[i], &v), CKS_ERR_INVALID_PARAM, "'%s' accepted", bad[i]);
        cr_assert_eq(v, 12345, "'%s' changed the output", bad[i]);
    }
    cr_assert_eq(cks_size_parse(NULL, NULL), CKS_ERR_INVALID_PARAM);
}

/* ---- unit: the log macro --------------------------------------------------- */

TestSuite(log, .timeout = 10);

static int level_calls;

static cks_log_level_t level_counted(cks_log_level_t level)
{
    level_calls++;
    return level;
}

/* cks_log() evaluates its level once, whether the line is written or
 * dropped: a level that an expression with effects decides (the client's
 * "is a warning about this server due", which takes the warning) takes
 * effect once, and a line is written at the level that passed the
 * threshold. Before, a written line evaluated it twice: the warning taken
 * by the test was gone by the second, and the line said "info". */
Test(log, level_is_evaluated_once, .init = cr_redirect_stderr)
{
    cks_log_level_t was = cks_log_threshold;
    cks_log_set_level(CKS_LOG_WARN);
    cks_log(level_counted(CKS_LOG_WARN), "a warning the log test writes");
    int written = level_calls;
    cks_log(level_counted(CKS_LOG_DEBUG), "a line the threshold drops");
    int dropped = level_calls - written;
    cks_log_set_level(was);
    cr_assert_eq(written, 1, "a written line evaluated its level %d times", written);
    cr_assert_eq(dropped, 1, "a dropped line evaluated its level %d times", dropped);
}
