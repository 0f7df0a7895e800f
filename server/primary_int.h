/*
 * The primary's put (primary.c) as its backlog (backlog.c) sees it: one
 * object being stored, encoded, spread to its members and reported.
 */
#ifndef CKS_PRIMARY_INT_H
#define CKS_PRIMARY_INT_H

#include "cluster_int.h"

typedef struct cks_cput {
    cks_server_h s;
    cks_sv_version_t *v;        /* dup-key tracking on this primary */
    cks_msg_object_entry_t e;   /* strings point at key[] */
    char key[CKS_KEY_MAX_LEN + 1];
    unsigned k, m;
    uint64_t chunk, stripes;
    int member_ms;              /* how long a member may take a chunk */
    uint64_t off, len;          /* the arena extent */
    cks_enc_job_t enc;
    unsigned acks;              /* chunk puts in flight */
    cks_status_t status;
    char why[CKS_MSG_MAX_LEN];
    cks_md_chunk_t *local;      /* chunks that stay on this server */
    size_t nlocal;
    uint8_t *missing;           /* per stripe: chunks no member took */
    uint8_t *took;              /* per stripe: chunks stored (here, or a member took them);
                                   in missing's allocation */
    uint32_t nmissing;
    uint16_t down[CKS_PLACE_WIDTH_MAX]; /* positions of the members that failed */
    unsigned ndown;
    cks_tp_conn_h conn;         /* the client, until STORED */
    uint64_t req_id;
    int counted;                /* its bytes are in s->unspread */
    int owed;                   /* its STORED answer waits (backpressure) */
    struct cks_cput *owed_next;
    /* where OBJECT_DONE goes: the coordinator granted the version here
     * first, then the version's candidates in order (coord.c) */
    uint16_t coords[CKS_COORD_CANDIDATES_MAX + 1];
    unsigned ncoords, coord_try;
    /* chunks not sent because their member failed a moment ago (their
     * space kept): sent after all when the object would fail without them */
    struct cks_cput_ack **skipped;
    size_t nskipped;
    int stalled; /* test builds (fault put_stall): answered STORED, never spread */
} cks_cput_t;

typedef struct cks_cput_ack {
    cks_cput_t *p;
    uint64_t off; /* the slice that was sent */
    uint64_t stripe;
    unsigned idx;
    uint16_t pos; /* the member */
    int resent;   /* sent again once on a new connection */
    uint64_t sent_ns; /* when it was (last) sent */
    uint64_t needed_ns; /* its second chance began (0: none): tried until the member timeout */
    uint64_t again_ns;  /* on s->chunks_again: when it is sent again */
    struct cks_cput_ack *again_next;
} cks_cput_ack_t;

/* backlog.c: backpressure on the puts answered STORED and not yet spread */
/** How many unspread bytes a primary may hold before it answers puts late. */
uint64_t cks_sv_unspread_max(cks_server_h s);
/** Answer the put's client (STORED, or why not); drops the connection. */
void cks_cput_answer(cks_cput_t *p, cks_status_t status);
/** The put leaves the backlog: its answer, then the others the backlog allows. */
void cks_cput_unspread(cks_cput_t *p);

#endif
