/*
 * DESIGN: backpressure on a primary's puts (primary.c): the bytes answered
 * STORED and not yet spread to their members are counted, and past a bound
 * the next puts are answered as that backlog drains, oldest first.
 *
 * Never: hold a put's answer once the put itself is spread or failed.
 */
#include "primary_int.h"

/* Backpressure: a primary whose unspread puts exceed half of its arena's
 * free space (and an eighth of the arena) answers the next puts (STORED) as
 * that backlog drains, oldest first, or at the latest when the put itself
 * is spread: a client waits instead of filling the arenas ("arena full",
 * chunk puts queued past their timeout). With room, puts are answered as
 * they land: a trainer does not wait for its earlier objects' encoding. */
uint64_t cks_sv_unspread_max(cks_server_h s)
{
    uint64_t size = cks_arena_size(s->arena), used = cks_arena_used(s->arena);
    return CKS_MAX(size / 8, used < size ? (size - used) / 2 : 0);
}

void cks_cput_answer(cks_cput_t *p, cks_status_t status)
{
    cks_sv_reply_status(p->conn, p->req_id, status, status == CKS_OK ? NULL : "%s", p->why);
    cks_tp_conn_put(p->conn);
    p->conn = NULL;
}

/* Answer the waiting puts while the backlog allows, oldest first. */
static void cks_sv_owed_answer(cks_server_h s)
{
    while (s->owed_head != NULL && s->unspread <= cks_sv_unspread_max(s)) {
        cks_cput_t *p = s->owed_head;
        s->owed_head  = p->owed_next;
        if (s->owed_head == NULL) {
            s->owed_tail = NULL;
        }
        p->owed = 0;
        cks_cput_answer(p, CKS_OK);
    }
}

/* A put leaves the backlog (spread, or failed): its own answer, if it still
 * waits, goes now; then the others the backlog allows. */
void cks_cput_unspread(cks_cput_t *p)
{
    cks_server_h s = p->s;
    if (p->counted) {
        s->unspread -= p->len;
        p->counted = 0;
    }
    if (p->owed) {
        cks_cput_t **pp = &s->owed_head, *prev = NULL;
        while (*pp != p) {
            prev = *pp;
            pp   = &(*pp)->owed_next;
        }
        *pp = p->owed_next;
        if (s->owed_tail == p) {
            s->owed_tail = prev;
        }
        p->owed = 0;
        cks_cput_answer(p, p->status);
    }
    cks_sv_owed_answer(s);
}
