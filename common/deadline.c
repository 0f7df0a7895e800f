/*
 * DESIGN: the one deadline engine (cks_dl_*, declared in cks_common.h): an
 * intrusive doubly linked list in deadline order. Adding looks from the
 * tail, where an entry made now with the usual timeout belongs; a sweep
 * takes the head while it is due. Parked entries (CKS_DL_NEVER) sit at the
 * end. Users: transport/call.c (calls), transport/ucx.c (payload receives)
 * and client-lib/op.c (requests in flight).
 * Never: allocate, free or read an entry beyond its link; sort by anything
 * but due_ns.
 */
#include "cks_common.h"

#include <stddef.h>

void cks_dl_add(cks_dl_list_t *l, cks_dl_t *e, uint64_t due_ns)
{
    cks_dl_t *after = l->tail;
    while (after != NULL && after->due_ns > due_ns) {
        after = after->prev;
    }
    e->due_ns = due_ns;
    e->prev   = after;
    e->next   = after != NULL ? after->next : l->head;
    if (e->next != NULL) {
        e->next->prev = e;
    } else {
        l->tail = e;
    }
    if (after != NULL) {
        after->next = e;
    } else {
        l->head = e;
    }
}

void cks_dl_del(cks_dl_list_t *l, cks_dl_t *e)
{
    CKS_LIST_DEL(l->head, l->tail, e);
}

void cks_dl_move(cks_dl_list_t *l, cks_dl_t *e, uint64_t due_ns)
{
    cks_dl_del(l, e);
    cks_dl_add(l, e, due_ns);
}

cks_dl_t *cks_dl_due(const cks_dl_list_t *l, uint64_t now)
{
    return l->head != NULL && l->head->due_ns <= now ? l->head : NULL;
}

int cks_dl_wait_ms(const cks_dl_list_t *l, uint64_t now, int cap_ms)
{
    if (l->head == NULL || l->head->due_ns == CKS_DL_NEVER) {
        return -1;
    }
    uint64_t due = l->head->due_ns;
    uint64_t ms  = due <= now ? 0 : (due - now + 999999ull) / 1000000ull;
    if (cap_ms >= 0 && ms > (uint64_t)cap_ms) {
        return cap_ms;
    }
    return ms > (uint64_t)INT32_MAX ? INT32_MAX : (int)ms;
}

int cks_dl_sooner(int a_ms, int b_ms)
{
    if (a_ms < 0) {
        return b_ms;
    }
    return b_ms >= 0 && b_ms < a_ms ? b_ms : a_ms;
}
