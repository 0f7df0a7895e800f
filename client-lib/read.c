/*
 * DESIGN: reads of whole objects or byte ranges of a restore into host
 * memory, straight into the caller's buffer: a standalone server's GET, or
 * the chunks of a cluster's stripes (get.c routes each get; stage_get.c
 * reads a device buffer's slices through here).
 *
 * On a cluster a read is a small state machine on the progress thread: stat
 * the object, then read exactly the byte ranges of the data chunks that the
 * range covers, from up to k servers of each stripe's placement group in
 * parallel, into their final place in the caller's buffer. Each stripe then
 * goes on by itself. A chunk that fails (server gone, timeout, CRC mismatch)
 * marks its stripe degraded (a stripe with a data chunk on a server known to
 * be down is degraded from the start); the stripe's other chunks are then
 * fetched whole until k are in - data chunks that the range covers whole
 * straight into the caller's buffer (those the first phase brought count),
 * parity and partly covered ones into slots of the client's scratch region
 * (scratch.c), which servers on this host write with one copy - and as
 * soon as they are, its missing data chunks are rebuilt with ISA-L on a
 * work thread (work.c), in place where the range covers them whole, while
 * the progress thread goes on with the other stripes' transfers. The
 * scratch bounds a client's degraded reads: a stripe that finds no room
 * waits until another stripe is decoded.
 * Never: block, or hand back a byte that was not checked (whole chunks are
 * CRC-checked here, partial ones by the server before it sends them).
 */
#include "client_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- reads on a cluster ------------------------------------------------------ */

typedef struct cks_read cks_read_t;
typedef struct cks_read_stripe cks_read_stripe_t;

typedef struct {
    cks_read_t *rd;
    uint64_t stripe;
    unsigned idx;
    int whole;     /* degraded phase: a whole chunk, to cks_read_chunk_dst() */
    int full;      /* first phase: the range covers the whole chunk */
} cks_read_sub_t;

/* Each stripe goes on by itself: its first-phase reads, then - when one
 * failed - rounds of whole-chunk fetches until k are in, then its decode,
 * while the other stripes' transfers go on. */
struct cks_read_stripe {
    cks_read_t *rd;
    uint64_t stripe;
    uint32_t failed;  /* bitmask of chunks that failed */
    uint32_t skipped; /* of those, chunks not asked at first because their
                         server was down or silent: asked last, when the
                         others are not enough (it may be back) */
    uint32_t corrupt; /* of those, chunks that failed their CRC */
    uint32_t tried;   /* degraded phase: chunks asked for whole */
    uint32_t got;     /* chunks that arrived whole */
    unsigned pending; /* its reads in flight */
    int finished;     /* decoded, or lost */
    int decoding;     /* its decode is on a work thread */
    /* degraded phase: chunks that do not go to the caller's buffer (parity,
     * partly covered data, rebuilt partly covered data), from the scratch */
    uint8_t *slot[CKS_PLACE_WIDTH_MAX];
    uint32_t slot_heap;       /* slots from malloc(), not the scratch */
    cks_cl_scratch_wait_t room; /* waiting for room in the scratch */
};

struct cks_read {
    cks_restore_h r;
    cks_client_h c;
    char key[CKS_KEY_MAX_LEN + 1];
    uint8_t *buf;
    uint64_t buf_size, off, len;
    int whole;
    uint64_t *length_p;
    uint32_t flags;
    cks_object_info_t info;
    unsigned k, m;
    uint64_t chunk;
    uint64_t s0, s1;           /* stripes the range covers */
    cks_read_stripe_t *stripes; /* s1 - s0 + 1 */
    cks_read_sub_t *subs;
    size_t nsubs;
    unsigned pending;          /* reads in flight, stripes waiting, holds */
    int lost;                  /* a stripe could not be rebuilt (error text set) */
    char lost_text[CKS_KEY_MAX_LEN + 192]; /* the first lost stripe's, said again at
                                              the end: a chunk read that timed out
                                              after it must not be the last word */
    int crc_bad;               /* a chunk failed its CRC (decoded around) */
    cks_status_t status;
    cks_done_cb_t cb;
    void *arg;
};

static void cks_read_stripe_next(cks_read_stripe_t *bs);
static void cks_read_end(cks_read_t *rd);

/* Give back the slots of `mask`; with `wake`, stripes that waited for room go on. */
static void cks_read_slots_free(cks_read_stripe_t *bs, uint32_t mask, int wake)
{
    cks_read_t *rd = bs->rd;
    cks_client_h c = rd->c; /* a waiter's end below may free rd */
    cks_cl_scratch_wait_t *q;
    int gave = 0;

    for (unsigned i = 0; i < CKS_PLACE_WIDTH_MAX; i++) {
        if (bs->slot[i] == NULL || !(mask & (1u << i))) {
            continue;
        }
        if (bs->slot_heap & (1u << i)) {
            free(bs->slot[i]);
        } else {
            cks_cl_scratch_give(c, bs->slot[i], rd->chunk);
            gave = 1;
        }
        bs->slot[i] = NULL;
        bs->slot_heap &= ~(1u << i);
    }
    while (wake && gave && (q = cks_cl_scratch_waiter(c)) != NULL) {
        cks_read_stripe_t *w = CKS_CONTAINER_OF(q, cks_read_stripe_t, room);
        cks_read_t *wrd      = w->rd;
        cks_read_stripe_next(w);
        int again = w->room.queued; /* no room for it: none for those behind */
        if (--wrd->pending == 0) {
            cks_read_end(wrd); /* frees w */
        }
        if (again) {
            break;
        }
    }
}

/* Slots for the chunks of `want` (a mask): 1 when they are there, 0 when
 * the stripe must wait for room in the scratch, -1 when memory ran out.
 * A stripe that already holds slots (a later round) takes malloc() memory
 * rather than wait while it holds some. */
static int cks_read_slots_take(cks_read_stripe_t *bs, uint32_t want)
{
    cks_read_t *rd = bs->rd;
    int holds = 0, heap;
    uint32_t taken = 0;

    for (unsigned i = 0; i < CKS_PLACE_WIDTH_MAX; i++) {
        holds |= bs->slot[i] != NULL;
    }
    heap = !cks_cl_scratch_fits(rd->c, (unsigned)__builtin_popcount(want), rd->chunk) || holds;
    for (unsigned i = 0; i < CKS_PLACE_WIDTH_MAX; i++) {
        uint32_t bit = 1u << i;
        if (!(want & bit) || bs->slot[i] != NULL) {
            continue;
        }
        uint8_t *p = heap ? malloc(rd->chunk) : cks_cl_scratch_take(rd->c, rd->chunk);
        if (p == NULL) {
            cks_read_slots_free(bs, taken, 0);
            return heap ? -1 : 0;
        }
        bs->slot[i] = p;
        bs->slot_heap |= heap ? bit : 0;
        taken |= bit;
    }
    return 1;
}

static void cks_read_scrub(cks_read_t *rd);

static void cks_read_finish(cks_read_t *rd, cks_status_t status)
{
    if (status == CKS_OK && rd->whole && (rd->flags & CKS_GET_VERIFY) &&
        cks_crc64(0, rd->buf, rd->len) != rd->info.crc64) {
        cks_cl_set_errorf(rd->c, CKS_ERR_CRC_MISMATCH, "%s", rd->key);
        status = CKS_ERR_CRC_MISMATCH;
    }
    if (status == CKS_OK && (rd->flags & CKS_GET_SCRUB) && rd->crc_bad) {
        /* the bytes are right (decoded), but a scrub reports the bad chunk */
        cks_cl_set_errorf(rd->c, CKS_ERR_CRC_MISMATCH, "a data chunk failed its CRC");
        status = CKS_ERR_CRC_MISMATCH;
    }
    if (status == CKS_OK && rd->whole && (rd->flags & CKS_GET_SCRUB) && rd->len > 0) {
        rd->flags &= ~CKS_GET_SCRUB;
        cks_read_scrub(rd); /* finishes later */
        return;
    }
    for (uint64_t s = rd->s0; rd->stripes != NULL && s <= rd->s1; s++) {
        cks_read_slots_free(&rd->stripes[s - rd->s0], ~0u, 0); /* a read that failed early */
    }
    free(rd->stripes);
    free(rd->subs);
    rd->cb(rd->arg, status);
    free(rd);
}

/* Nothing in flight or waiting any more: every stripe was read, rebuilt or lost. */
static void cks_read_end(cks_read_t *rd)
{
    if (rd->lost) {
        cks_cl_set_errorf(rd->c, CKS_ERR_DATA_LOST, "%s", rd->lost_text);
    }
    cks_read_finish(rd, rd->lost ? CKS_ERR_DATA_LOST : CKS_OK);
}

static cks_op_t *cks_read_chunk_op(cks_read_t *rd, uint64_t stripe, unsigned idx,
                                   uint64_t off, uint64_t len, uint8_t *dst, size_t srv)
{
    size_t used  = 0;
    cks_op_t *op = cks_op_new(CKS_OP_CHUNK_GET, CKS_MSG_CHUNK_GET);
    if (op == NULL ||
        cks_op_name(op, &used, rd->r->job, CKS_JOB_MAX_LEN, &op->body.m_CHUNK_GET.job) !=
            CKS_OK ||
        cks_op_name(op, &used, rd->key, CKS_KEY_MAX_LEN, &op->body.m_CHUNK_GET.key) !=
            CKS_OK) {
        free(op);
        return NULL;
    }
    op->body.m_CHUNK_GET.version = rd->info.source_version; /* where the chunks are */
    op->body.m_CHUNK_GET.stripe  = stripe;
    op->body.m_CHUNK_GET.idx     = idx;
    op->body.m_CHUNK_GET.offset  = off;
    op->body.m_CHUNK_GET.length  = len;
    op->buf                      = dst;
    op->buf_size                 = len;
    op->srv                      = srv;
    return op;
}

static void cks_read_sub_done(void *arg, cks_status_t status)
{
    cks_read_sub_t *sub   = arg;
    cks_read_t *rd        = sub->rd;
    cks_read_stripe_t *st = &rd->stripes[sub->stripe - rd->s0];

    if (status == CKS_OK && (sub->whole || sub->full)) {
        st->got |= 1u << sub->idx;
    } else if (status != CKS_OK) {
        st->failed |= 1u << sub->idx;
        st->corrupt |= status == CKS_ERR_CRC_MISMATCH ? 1u << sub->idx : 0;
        rd->crc_bad |= status == CKS_ERR_CRC_MISMATCH;
        if (rd->status == CKS_OK || rd->status == CKS_ERR_CRC_MISMATCH) {
            rd->status = status;
        }
        cks_info("chunk %u of stripe %llu of '%s' unavailable (%s)%s", sub->idx,
                 (unsigned long long)sub->stripe, rd->key, cks_status_string(status),
                 sub->whole ? "" : ": decoding around it");
    }
    if (sub->whole) {
        free(sub); /* degraded fetches allocate their own */
    }
    if (--st->pending == 0) {
        cks_read_stripe_next(st);
    }
    if (--rd->pending == 0) {
        cks_read_end(rd);
    }
}

/* Where chunk i of stripe s goes when fetched whole: the caller's buffer for
 * a data chunk that the range covers whole, else the stripe's slot. */
static uint8_t *cks_read_chunk_dst(cks_read_t *rd, cks_read_stripe_t *bs, unsigned i)
{
    uint64_t base = bs->stripe * rd->k * rd->chunk + (uint64_t)i * rd->chunk;
    if (i < rd->k && base >= rd->off && base + rd->chunk <= rd->off + rd->len) {
        return rd->buf + (base - rd->off);
    }
    return bs->slot[i];
}

/* Is data chunk i of the stripe in the range (wanted), and wholly? */
static int cks_read_wanted(const cks_read_t *rd, const cks_read_stripe_t *bs, unsigned i,
                           int *whole_p)
{
    uint64_t base = bs->stripe * rd->k * rd->chunk + (uint64_t)i * rd->chunk;
    *whole_p      = base >= rd->off && base + rd->chunk <= rd->off + rd->len;
    return i < rd->k && base < rd->off + rd->len && base + rd->chunk > rd->off;
}

static void cks_read_stripe_lost(cks_read_stripe_t *bs, unsigned have)
{
    cks_read_t *rd = bs->rd;
    char text[CKS_KEY_MAX_LEN + 192];
    unsigned width   = rd->k + rd->m;
    unsigned corrupt = (unsigned)__builtin_popcount(bs->corrupt & ~bs->got);
    /* the chunks it could not have: corrupt, or on servers that failed, did
     * not answer or do not hold them */
    snprintf(text, sizeof(text),
                     "object '%s' of version %llu (chunks of version %llu): stripe %llu has %u "
                     "of %u chunks, needs %u (%u failed their CRC, %u unreachable or missing)",
                     rd->key, (unsigned long long)rd->r->info.version,
                     (unsigned long long)rd->info.source_version,
                     (unsigned long long)bs->stripe, have, width, rd->k, corrupt,
                     have + corrupt < width ? width - have - corrupt : 0);
    if (!rd->lost) {
        cks_cl_set_errorf(rd->c, CKS_ERR_DATA_LOST, "%s", text);
        snprintf(rd->lost_text, sizeof(rd->lost_text), "%s", text);
    }
    cks_error("%s", text);
    rd->lost     = 1;
    bs->finished = 1;
    cks_read_slots_free(bs, ~0u, 1);
}

/* A degraded stripe's decode, on a work thread (work.c), while the progress
 * thread goes on receiving the other stripes' chunks. */
typedef struct {
    cks_cl_work_t work;
    cks_read_stripe_t *bs;
    cks_ec_h ec;
    unsigned have;
    cks_status_t status;
    uint8_t *chunks[CKS_PLACE_WIDTH_MAX];
    uint8_t present[CKS_PLACE_WIDTH_MAX];
} cks_read_dec_t;

/* Rebuild the missing data chunks the range needs (in place where it covers
 * them whole), and copy the range's parts of the others out of their slots.
 * Nothing else touches the stripe's chunks meanwhile: it has no fetch in
 * flight, and no other stripe writes where it does. */
static void cks_read_decode_run(cks_cl_work_t *w)
{
    cks_read_dec_t *d     = CKS_CONTAINER_OF(w, cks_read_dec_t, work);
    cks_read_stripe_t *bs = d->bs;
    cks_read_t *rd        = bs->rd;
    uint64_t stripe_b     = (uint64_t)rd->k * rd->chunk;

    d->status = cks_ec_decode(d->ec, rd->chunk, d->chunks, d->present);
    for (unsigned i = 0; d->status == CKS_OK && i < rd->k; i++) {
        uint64_t base = bs->stripe * stripe_b + (uint64_t)i * rd->chunk;
        uint64_t lo   = CKS_MAX(rd->off, base);
        uint64_t hi   = CKS_MIN(rd->off + rd->len, base + rd->chunk);
        if (lo < hi && d->chunks[i] != NULL && d->chunks[i] == bs->slot[i]) {
            memcpy(rd->buf + (lo - rd->off), d->chunks[i] + (lo - base), hi - lo);
        }
    }
}

/* Back on the progress thread: the stripe is done (its slots go back), or
 * lost; the read's hold for the decode is dropped. */
static void cks_read_decode_done(cks_cl_work_t *w)
{
    cks_read_dec_t *d     = CKS_CONTAINER_OF(w, cks_read_dec_t, work);
    cks_read_stripe_t *bs = d->bs;
    cks_read_t *rd        = bs->rd;

    bs->decoding = 0;
    if (d->status != CKS_OK) {
        cks_read_stripe_lost(bs, d->have);
    } else {
        bs->finished = 1;
        cks_read_slots_free(bs, ~0u, 1);
    }
    free(d);
    if (--rd->pending == 0) {
        cks_read_end(rd);
    }
}

/* A degraded stripe with k whole chunks: its decode goes to a work thread
 * (the progress thread runs it when none can). */
static void cks_read_stripe_decode(cks_read_stripe_t *bs)
{
    cks_read_t *rd    = bs->rd;
    cks_client_h c    = rd->c;
    unsigned width    = rd->k + rd->m;
    cks_read_dec_t *d = calloc(1, sizeof(*d));

    if (d == NULL || (c->ec[rd->k][rd->m] == NULL &&
                      cks_ec_create(rd->k, rd->m, &c->ec[rd->k][rd->m]) != CKS_OK)) {
        free(d);
        cks_read_stripe_lost(bs, 0);
        return;
    }
    for (unsigned i = 0; i < width; i++) {
        int whole;
        int wanted    = cks_read_wanted(rd, bs, i, &whole);
        d->present[i] = (bs->got & (1u << i)) != 0;
        /* rebuild only the missing data chunks the range needs */
        d->chunks[i] = d->present[i] || wanted ? cks_read_chunk_dst(rd, bs, i) : NULL;
        d->have += d->present[i];
    }
    if (d->have < rd->k) {
        cks_read_stripe_lost(bs, d->have);
        free(d);
        return;
    }
    d->bs        = bs;
    d->ec        = c->ec[rd->k][rd->m];
    d->work.run  = cks_read_decode_run;
    d->work.done = cks_read_decode_done;
    bs->decoding = 1;
    rd->pending++; /* held until the decode is done */
    if (cks_cl_work_push(c, &d->work) != CKS_OK) {
        cks_read_decode_run(&d->work);
        cks_read_decode_done(&d->work); /* the caller holds rd: it stays */
    }
}

/* A stripe with nothing in flight: done, decode, or fetch the next untried
 * chunks whole (data first, then parity; servers known to be down last)
 * so that k may arrive. */
static void cks_read_stripe_next(cks_read_stripe_t *bs)
{
    cks_read_t *rd       = bs->rd;
    const unsigned width = rd->k + rd->m;
    unsigned have        = (unsigned)__builtin_popcount(bs->got), want;
    uint16_t group[CKS_PLACE_WIDTH_MAX];
    uint32_t pick = 0, slots = 0, last = 0;

    if (bs->finished || bs->decoding || bs->failed == 0) {
        return;
    }
    if (have >= rd->k) {
        cks_read_stripe_decode(bs);
        return;
    }
    if (cks_place(rd->c->map, rd->r->job, strlen(rd->r->job), rd->key, strlen(rd->key),
                  bs->stripe, rd->k, rd->m, NULL, group) != CKS_OK) {
        cks_read_stripe_lost(bs, have);
        return;
    }
    want = rd->k - have;
    /* two passes: chunks on servers not known to be down first */
    for (unsigned pass = 0; pass < 2 * width && want > 0; pass++) {
        unsigned i   = pass % width;
        uint32_t bit = 1u << i;
        const cks_cl_srv_t *sv = &rd->c->srv[group[i]];
        int known_down = (sv->state == CKS_SRV_IDLE && sv->failed_ns != 0) ||
                         sv->silent_ns != 0 || (bs->skipped & bit);
        if ((((bs->failed & ~bs->skipped) | bs->got | bs->tried | pick) & bit) ||
            (pass < width && known_down)) {
            continue;
        }
        pick |= bit;
        last |= pass >= width ? bit : 0; /* down or silent: asked all the same */
        want--;
    }
    if (pick == 0) {
        cks_read_stripe_lost(bs, have);
        return;
    }
    /* slots: what is fetched outside the caller's buffer, and the missing
     * data chunks of the range that a decode writes outside it */
    for (unsigned i = 0; i < width; i++) {
        int whole, wanted = cks_read_wanted(rd, bs, i, &whole);
        int fetched_out  = (pick & (1u << i)) && !(i < rd->k && whole);
        int rebuilt_out  = wanted && !whole && !(bs->got & (1u << i)) && !(pick & (1u << i));
        if (fetched_out || rebuilt_out) {
            slots |= 1u << i;
        }
    }
    int room = cks_read_slots_take(bs, slots);
    if (room == 0) {
        cks_cl_scratch_wait(rd->c, &bs->room);
        rd->pending++; /* held while it waits */
        return;
    }
    if (room < 0) {
        cks_read_stripe_lost(bs, have);
        return;
    }
    bs->tried |= pick;
    bs->pending++; /* hold: a fetch may finish at once (the caller holds rd) */
    for (unsigned i = 0; i < width; i++) {
        if (!(pick & (1u << i))) {
            continue;
        }
        cks_op_t *op = cks_read_chunk_op(rd, bs->stripe, i, 0, rd->chunk,
                                         cks_read_chunk_dst(rd, bs, i), group[i]);
        if (op != NULL && (last & (1u << i))) {
            op->patient = 1; /* the others are not enough: wait for its server */
        }
        cks_read_sub_t *sb = op ? malloc(sizeof(*sb)) : NULL;
        if (sb == NULL) {
            free(op);
            bs->failed |= 1u << i;
            continue;
        }
        *sb = (cks_read_sub_t){rd, bs->stripe, i, 1, 0};
        rd->pending++;
        bs->pending++;
        cks_cl_start(rd->c, op, cks_read_sub_done, sb);
    }
    /* drop the hold: the last fetch to finish (maybe one above) goes on */
    if (--bs->pending == 0) {
        cks_read_stripe_next(bs);
    }
}

/* Scrub: every chunk of every stripe - data (padding included) and parity -
 * read whole (the client checks each whole chunk's CRC on arrival) into
 * scratch space. */
typedef struct {
    cks_read_t *rd;
    unsigned pending;
    cks_status_t status;
    uint8_t *scratch;
} cks_scrub_t;

static void cks_scrub_done(void *arg, cks_status_t status)
{
    cks_scrub_t *sc = arg;
    if (status != CKS_OK && sc->status == CKS_OK) {
        sc->status = status == CKS_ERR_CRC_MISMATCH ? status : CKS_ERR_DATA_LOST;
    }
    if (--sc->pending > 0) {
        return;
    }
    cks_read_t *rd = sc->rd;
    if (sc->status != CKS_OK) {
        cks_cl_set_errorf(rd->c, sc->status, "a chunk of '%s' is %s", rd->key,
                          sc->status == CKS_ERR_CRC_MISMATCH ? "corrupt" : "missing");
    }
    cks_status_t st = sc->status;
    free(sc->scratch);
    free(sc);
    cks_read_finish(rd, st);
}

static void cks_read_scrub(cks_read_t *rd)
{
    cks_scrub_t *sc = calloc(1, sizeof(*sc));
    uint64_t nstripes = rd->s1 - rd->s0 + 1;
    unsigned width    = rd->k + rd->m;
    if (sc == NULL || (sc->scratch = malloc(nstripes * width * rd->chunk)) == NULL) {
        free(sc);
        cks_read_finish(rd, CKS_ERR_NO_MEMORY);
        return;
    }
    sc->rd      = rd;
    sc->pending = 1; /* hold */
    for (uint64_t s = rd->s0; s <= rd->s1; s++) {
        uint16_t group[CKS_PLACE_WIDTH_MAX];
        if (cks_place(rd->c->map, rd->r->job, strlen(rd->r->job), rd->key, strlen(rd->key), s,
                      rd->k, rd->m, NULL, group) != CKS_OK) {
            sc->status = CKS_ERR_INTERNAL;
            continue;
        }
        for (unsigned j = 0; j < width; j++) {
            uint8_t *dst = sc->scratch + ((s - rd->s0) * width + j) * rd->chunk;
            cks_op_t *op = cks_read_chunk_op(rd, s, j, 0, rd->chunk, dst, group[j]);
            if (op == NULL) {
                sc->status = CKS_ERR_NO_MEMORY;
                continue;
            }
            sc->pending++;
            cks_cl_start(rd->c, op, cks_scrub_done, sc);
        }
    }
    cks_scrub_done(sc, CKS_OK); /* drop the hold */
}

static void cks_read_stat_done(void *arg, cks_status_t status)
{
    cks_read_t *rd = arg;
    uint64_t stripe_b, size = rd->info.size;

    if (status != CKS_OK) {
        cks_read_finish(rd, status);
        return;
    }
    if (rd->whole) {
        rd->len = size;
    }
    if (rd->off > size || rd->len > size - rd->off) {
        cks_cl_set_errorf(rd->c, CKS_ERR_OUT_OF_RANGE, "range %llu+%llu past the end (%llu bytes)",
                          (unsigned long long)rd->off, (unsigned long long)rd->len,
                          (unsigned long long)size);
        cks_read_finish(rd, CKS_ERR_OUT_OF_RANGE);
        return;
    }
    if (rd->len > rd->buf_size) {
        cks_cl_set_errorf(rd->c, CKS_ERR_INVALID_PARAM, "buffer too small");
        cks_read_finish(rd, CKS_ERR_INVALID_PARAM);
        return;
    }
    if (rd->length_p != NULL) {
        *rd->length_p = rd->len;
    }
    if (rd->len == 0) {
        cks_read_finish(rd, CKS_OK);
        return;
    }
    stripe_b   = (uint64_t)rd->k * rd->chunk;
    rd->s0     = rd->off / stripe_b;
    rd->s1     = (rd->off + rd->len - 1) / stripe_b;
    uint64_t n = rd->s1 - rd->s0 + 1;
    rd->stripes = calloc(n, sizeof(*rd->stripes));
    rd->subs    = calloc(n * rd->k, sizeof(*rd->subs));
    if (rd->stripes == NULL || rd->subs == NULL) {
        cks_read_finish(rd, CKS_ERR_NO_MEMORY);
        return;
    }
    rd->pending = 1; /* held until every read is started */
    for (uint64_t s = rd->s0; s <= rd->s1; s++) {
        cks_read_stripe_t *bs = &rd->stripes[s - rd->s0];
        uint16_t group[CKS_PLACE_WIDTH_MAX];
        bs->rd     = rd;
        bs->stripe = s;
        status = cks_place(rd->c->map, rd->r->job, strlen(rd->r->job), rd->key,
                           strlen(rd->key), s, rd->k, rd->m, NULL, group);
        /* a data chunk on a server known to be down, or silent (it let a
         * request time out): the stripe is read degraded from the start (k
         * whole chunks), not twice; that chunk is asked last */
        uint32_t down = 0;
        for (unsigned i = 0; status == CKS_OK && i < rd->k; i++) {
            const cks_cl_srv_t *sv = &rd->c->srv[group[i]];
            if ((sv->state != CKS_SRV_UP && sv->failed_ns != 0) || sv->silent_ns != 0) {
                down |= 1u << i;
            }
        }
        if (down != 0) {
            bs->failed  = down;
            bs->skipped = down;
            cks_read_stripe_next(bs); /* its fetches start now */
            continue;
        }
        bs->pending = 1; /* hold */
        for (unsigned i = 0; i < rd->k; i++) {
            uint64_t base = s * stripe_b + i * rd->chunk;
            uint64_t lo   = CKS_MAX(rd->off, base);
            uint64_t hi   = CKS_MIN(rd->off + rd->len, base + rd->chunk);
            if (lo >= hi) {
                continue;
            }
            cks_read_sub_t *sub = &rd->subs[rd->nsubs++];
            *sub = (cks_read_sub_t){rd, s, i, 0, lo == base && hi == base + rd->chunk};
            rd->pending++;
            bs->pending++;
            cks_op_t *op = status == CKS_OK ? cks_read_chunk_op(rd, s, i, lo - base, hi - lo,
                                                                rd->buf + (lo - rd->off),
                                                                group[i])
                                            : NULL;
            if (op == NULL) {
                cks_read_sub_done(sub, status == CKS_OK ? CKS_ERR_NO_MEMORY : status);
            } else {
                cks_cl_start(rd->c, op, cks_read_sub_done, sub);
            }
        }
        if (--bs->pending == 0) {
            cks_read_stripe_next(bs);
        }
    }
    /* drop the hold; the last completion continues the machine */
    if (--rd->pending == 0) {
        cks_read_end(rd);
    }
}

static cks_status_t cks_read_start(cks_restore_h r, const cks_get_params_t *p, int range,
                                   uint64_t *length_p, cks_done_cb_t cb, void *arg)
{
    cks_client_h c = r->client;
    size_t used    = 0;
    cks_read_t *rd;
    cks_op_t *op;
    cks_status_t status;

    rd = calloc(1, sizeof(*rd));
    op = cks_op_new(CKS_OP_OBJECT_STAT, CKS_MSG_OBJECT_STAT);
    if (rd == NULL || op == NULL) {
        free(rd);
        free(op);
        return CKS_ERR_NO_MEMORY;
    }
    status = cks_op_name(op, &used, r->job, CKS_JOB_MAX_LEN, &op->body.m_OBJECT_STAT.job);
    if (status == CKS_OK) {
        status = cks_op_name(op, &used, p->key, CKS_KEY_MAX_LEN, &op->body.m_OBJECT_STAT.key);
    }
    if (status != CKS_OK) {
        free(rd);
        free(op);
        return status;
    }
    memcpy(rd->key, op->body.m_OBJECT_STAT.key.ptr, op->body.m_OBJECT_STAT.key.len);
    rd->r        = r;
    rd->c        = c;
    rd->buf      = p->buffer;
    rd->buf_size = p->buffer_size;
    rd->whole    = !range;
    rd->off      = range ? p->offset : 0;
    rd->len      = range ? p->length : 0;
    rd->length_p = length_p;
    rd->flags    = (p->field_mask & CKS_GET_FIELD_FLAGS) ? p->flags : 0;
    rd->k        = r->info.ec_k;
    rd->m        = r->info.ec_m;
    rd->chunk    = r->info.chunk_size;
    rd->status   = CKS_OK;
    rd->cb       = cb;
    rd->arg      = arg;
    op->body.m_OBJECT_STAT.version = r->info.version;
    op->out                        = &rd->info;
    op->target                     = CKS_TARGET_ANY;
    cks_cl_coord_first(c, op, r->job, strlen(r->job), r->info.version);
    status  = cks_cl_submit(c, op, cks_read_stat_done, rd);
    if (status != CKS_INPROGRESS) {
        free(rd);
    }
    return status;
}

/* ---- a read: a standalone server's GET, or a cluster's stripes --------------- */

cks_status_t cks_cl_read(cks_restore_h r, const cks_get_params_t *p, uint64_t *length_p,
                         cks_done_cb_t cb, void *arg, uint32_t wire_flags)
{
    cks_msg_get_t *m;
    size_t used = 0;
    cks_op_t *op;
    cks_status_t status;
    int range;

    range = !!(p->field_mask & CKS_GET_FIELD_RANGE);
    if (range && (p->length > p->buffer_size || p->length == UINT64_MAX)) {
        return CKS_ERR_INVALID_PARAM;
    }
    if (r->info.ec_k > 0) {
        if (r->client->map == NULL || r->info.ec_k > CKS_EC_MAX_K ||
            r->info.ec_m > CKS_EC_MAX_M || r->info.chunk_size == 0) {
            return CKS_ERR_UNSUPPORTED;
        }
        return cks_read_start(r, p, range, length_p, cb, arg);
    }
    op = cks_op_new(CKS_OP_GET, CKS_MSG_GET);
    if (op == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    m      = &op->body.m_GET;
    status = cks_op_name(op, &used, r->job, CKS_JOB_MAX_LEN, &m->job);
    if (status == CKS_OK) {
        status = cks_op_name(op, &used, p->key, CKS_KEY_MAX_LEN, &m->key);
    }
    if (status != CKS_OK) {
        free(op);
        return status;
    }
    m->version   = r->info.version;
    m->offset    = range ? p->offset : 0;
    m->length    = range ? p->length : UINT64_MAX; /* the whole object */
    op->buf      = p->buffer;
    op->buf_size = p->buffer_size;
    op->length_p = length_p;
    op->flags    = (p->field_mask & CKS_GET_FIELD_FLAGS) ? p->flags : 0;
    op->wire_flags = range ? wire_flags & CKS_WIRE_F_CHECKED : 0;
    return cks_cl_submit(r->client, op, cb, arg);
}
