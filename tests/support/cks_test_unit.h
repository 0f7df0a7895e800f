/*
 * Test support without servers, for unit tests that link nothing of the
 * test support libraries (header only): a seed that is printed (so that a
 * failure can be replayed), a splitmix64 generator, and an assertion on a
 * status that names both statuses.
 */
#ifndef CKS_TEST_UNIT_H
#define CKS_TEST_UNIT_H

#include "ckstore_defs.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/** The seed of test `name` of `suite`: CKS_TEST_SEED from the environment,
 *  or `dflt`; printed ("[suite::name] seed N") on stderr and in the log. */
static inline uint64_t cks_test_named_seed(const char *suite, const char *name, uint64_t dflt)
{
    const char *env = getenv("CKS_TEST_SEED");
    uint64_t seed   = dflt;

    if ((env != NULL) && (*env != '\0')) {
        seed = strtoull(env, NULL, 0);
    }
    fprintf(stderr, "[%s::%s] seed %" PRIu64 " (set CKS_TEST_SEED to change)\n", suite, name,
            seed);
    cr_log_info("seed %" PRIu64, seed);
    return seed;
}

/** The next number of the splitmix64 sequence in *state. */
static inline uint64_t cks_test_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/** Assert that `expr` (a call that returns a cks_status_t) returns
 *  `expected`; the message names the call and both statuses. */
#define CKS_TEST_ST_EQ(expr, expected)                                  \
    do {                                                               \
        cks_status_t st_ = (expr);                                     \
        cr_assert_eq(st_, (expected), "%s: got %s, want %s", #expr,    \
                     cks_status_name(st_), cks_status_name(expected)); \
    } while (0)
#define CKS_TEST_ST_OK(expr) CKS_TEST_ST_EQ(expr, CKS_OK)

#endif
