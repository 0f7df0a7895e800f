/*
 * common/: the deadline engine (cks_dl_*). Entries come out in deadline
 * order whatever order they went in, ties in the order they were added;
 * parked entries are never due and never shorten a wait; a sweep that
 * moves or removes what it takes ends; waits round up and respect a cap.
 */
#include "cks_common.h"

#include <criterion/criterion.h>

typedef struct {
    int id;
    cks_dl_t dl;
} tentry_t;

static int id_of(const cks_dl_t *e)
{
    return CKS_CONTAINER_OF(e, tentry_t, dl)->id;
}

/* The ids from head to tail, checking the back links on the way. */
static int ids(const cks_dl_list_t *l, int *out, int max)
{
    int n = 0;
    const cks_dl_t *prev = NULL;
    for (const cks_dl_t *e = l->head; e != NULL && n < max; e = e->next) {
        cr_assert_eq(e->prev, prev, "back link of entry %d", id_of(e));
        cr_assert(prev == NULL || prev->due_ns <= e->due_ns, "entry %d out of order", id_of(e));
        out[n++] = id_of(e);
        prev     = e;
    }
    cr_assert_eq(l->tail, prev, "tail");
    return n;
}

Test(deadline, entries_come_out_in_deadline_order_ties_in_arrival_order)
{
    static const uint64_t due[] = {50, 10, 30, 10, CKS_DL_NEVER, 20, 50, 5};
    static const int want[]     = {7, 1, 3, 5, 2, 0, 6, 4};
    tentry_t e[8];
    cks_dl_list_t l = {0};
    for (int i = 0; i < 8; i++) {
        e[i].id = i;
        cks_dl_add(&l, &e[i].dl, due[i]);
    }
    int got[8];
    cr_assert_eq(ids(&l, got, 8), 8);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(got[i], want[i], "position %d: entry %d, want %d", i, got[i], want[i]);
    }
}

Test(deadline, a_sweep_takes_what_is_due_and_ends)
{
    tentry_t e[6];
    cks_dl_list_t l = {0};
    for (int i = 0; i < 6; i++) {
        e[i].id = i;
        cks_dl_add(&l, &e[i].dl, (uint64_t)(i + 1) * 100);
    }
    /* at 350: 0, 1 and 2 are due; 1 is moved later (past now), the others
     * removed, as a sweep's owner does */
    int taken = 0, order[8];
    cks_dl_t *d;
    while ((d = cks_dl_due(&l, 350)) != NULL && taken < 8) {
        order[taken++] = id_of(d);
        if (id_of(d) == 1) {
            cks_dl_move(&l, d, 1000);
        } else {
            cks_dl_del(&l, d);
        }
    }
    cr_assert_eq(taken, 3, "%d taken", taken);
    cr_assert_eq(order[0], 0);
    cr_assert_eq(order[1], 1);
    cr_assert_eq(order[2], 2);
    int got[8];
    cr_assert_eq(ids(&l, got, 8), 4);
    cr_assert_eq(got[0], 3);
    cr_assert_eq(got[3], 1, "the moved entry is last");
    cr_assert_null(cks_dl_due(&l, 399));
}

Test(deadline, parked_entries_are_never_due_nor_shorten_a_wait)
{
    tentry_t a = {.id = 1}, b = {.id = 2};
    cks_dl_list_t l = {0};
    cr_assert_eq(cks_dl_wait_ms(&l, 0, -1), -1, "empty list");
    cks_dl_add(&l, &a.dl, CKS_DL_NEVER);
    cr_assert_null(cks_dl_due(&l, UINT64_MAX - 1));
    cr_assert_eq(cks_dl_wait_ms(&l, 0, 1000), -1, "only a parked entry");
    cks_dl_add(&l, &b.dl, 5000000); /* 5 ms */
    cr_assert_eq(l.head, &b.dl, "a deadline goes before a parked entry");
    cr_assert_eq(cks_dl_wait_ms(&l, 0, -1), 5);
    cks_dl_move(&l, &b.dl, CKS_DL_NEVER);
    cr_assert_eq(cks_dl_wait_ms(&l, 0, -1), -1, "both parked");
    cks_dl_del(&l, &a.dl);
    cks_dl_del(&l, &b.dl);
    cr_assert_null(l.head);
    cr_assert_null(l.tail);
}

Test(deadline, waits_round_up_and_respect_the_cap)
{
    tentry_t a = {.id = 1};
    cks_dl_list_t l = {0};
    cks_dl_add(&l, &a.dl, 10000001); /* 10 ms and 1 ns */
    cr_assert_eq(cks_dl_wait_ms(&l, 0, -1), 11, "rounded up");
    cr_assert_eq(cks_dl_wait_ms(&l, 0, 3), 3, "capped");
    cr_assert_eq(cks_dl_wait_ms(&l, 10000001, -1), 0, "due now");
    cr_assert_eq(cks_dl_wait_ms(&l, 20000000, 7), 0, "overdue");
    cr_assert_eq(cks_dl_sooner(-1, 4), 4);
    cr_assert_eq(cks_dl_sooner(9, -1), 9);
    cr_assert_eq(cks_dl_sooner(9, 4), 4);
    cr_assert_eq(cks_dl_sooner(-1, -1), -1);
}
