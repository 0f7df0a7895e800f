/*
 * Tests that arm fault points (CKS_FAULTS for a server, cks_fault_arm() in
 * the test) need a build configured with -DCKS_FAULT_POINTS=ON. In a build
 * without them the points are compiled out, so such a test would pass
 * without any fault having fired: it must skip instead, and Criterion then
 * reports it as SKIPPED with the reason. Put CKS_TEST_NEEDS_FAULT_POINTS();
 * first in the test's body (before it starts servers).
 */
#ifndef CKS_FAULTS_GATE_H
#define CKS_FAULTS_GATE_H

#include "cks_common.h"

#include <criterion/criterion.h>

#define CKS_TEST_NEEDS_FAULT_POINTS() \
    do { \
        if (!cks_fault_points_built()) { \
            cr_skip_test("this build has no fault points (configure with " \
                         "-DCKS_FAULT_POINTS=ON, as scripts/test does)"); \
        } \
    } while (0)

#endif
