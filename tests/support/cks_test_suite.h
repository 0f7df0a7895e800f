/*
 * The usual cluster of an e2e suite, header only: NSRV (6) servers in 3
 * racks, each with an arena of CKS_TEST_SUITE_ARENA bytes (define it before
 * the include; 256 MiB when not), clients RS(K, M) = RS(4, 2) with CHUNK
 * (64 KiB) chunks. Included once by a test file, it defines the cluster
 * (`cl`, or the name CKS_TEST_SUITE_CL gives where `cl` names something
 * else), the objects `objs` of the file's tests, and the suite's .init and
 * .fini: cks_test_suite_setup(), cks_test_suite_teardown().
 */
#ifndef CKS_TEST_SUITE_H
#define CKS_TEST_SUITE_H

#include "cks_test.h"

#include <criterion/criterion.h>

#ifndef MiB
#define MiB (1ull << 20)
#endif
#define NSRV  6
#define K     4
#define M     2
#define CHUNK (64 * 1024)

#ifndef CKS_TEST_SUITE_ARENA
#define CKS_TEST_SUITE_ARENA (256 * MiB)
#endif
#ifndef CKS_TEST_SUITE_CL
#define CKS_TEST_SUITE_CL cl
#endif

static cks_test_cluster_t CKS_TEST_SUITE_CL;
static cks_test_objs_t objs;

/* Start the cluster with `faults` (NULL: none) armed on server fault_id
 * (CKS_TEST_ALL: on every server); asserts that it started. */
static inline void cks_test_suite_start(const char *faults, int fault_id)
{
    cr_assert_eq(cks_test_cluster_start(&CKS_TEST_SUITE_CL, NSRV, 3, CKS_TEST_SUITE_ARENA,
                                        fault_id, faults),
                 0, "cannot start the cluster of %d servers (faults %s on %d)", NSRV,
                 faults ? faults : "none", fault_id);
}

/* .init: the cluster, without fault points armed. */
static inline void cks_test_suite_setup(void)
{
    cks_test_suite_start(NULL, -1);
}

/* .fini: stop the cluster, remove its files, free the objects. */
static inline void cks_test_suite_teardown(void)
{
    cks_test_cluster_cleanup(&CKS_TEST_SUITE_CL);
    cks_test_objs_free(&objs);
}

#endif
