/*
 * common/: the test pattern (cks_pattern_fill/check). What fill writes,
 * check accepts, whatever the length (whole words, a tail, nothing); one
 * byte changed anywhere is found at its offset; another seed's pattern is
 * not this one's.
 */
#include "cks_common.h"

#include <criterion/criterion.h>
#include <string.h>

Test(pattern, check_accepts_what_fill_wrote_at_every_length)
{
    static uint8_t buf[1029 + 8]; /* 8 guard bytes after the longest */
    for (size_t len = 0; len <= sizeof(buf) - 8; len += len < 40 ? 1 : 197) {
        memset(buf, 0xA5, sizeof(buf));
        cks_pattern_fill(buf, len, 7);
        cr_assert_eq(cks_pattern_check(buf, len, 7), len, "length %zu", len);
        for (size_t g = len; g < len + 8; g++) {
            cr_assert_eq(buf[g], 0xA5, "length %zu: fill wrote byte %zu", len, g);
        }
    }
}

Test(pattern, one_changed_byte_is_found_at_its_offset)
{
    static uint8_t buf[203]; /* 25 words and a tail of 3 */
    cks_pattern_fill(buf, sizeof(buf), 11);
    for (size_t at = 0; at < sizeof(buf); at++) {
        buf[at] ^= 0x10;
        cr_assert_eq(cks_pattern_check(buf, sizeof(buf), 11), at, "byte %zu", at);
        buf[at] ^= 0x10;
    }
    cr_assert_eq(cks_pattern_check(buf, sizeof(buf), 11), sizeof(buf));
}

Test(pattern, seeds_give_different_patterns)
{
    uint8_t a[64], b[64];
    cks_pattern_fill(a, sizeof(a), 1);
    cks_pattern_fill(b, sizeof(b), 2);
    cr_assert_neq(memcmp(a, b, sizeof(a)), 0);
    cr_assert_lt(cks_pattern_check(a, sizeof(a), 2), 8, "seed 2 matches seed 1's first word");
}
