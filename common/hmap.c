/*
 * DESIGN: a chained hash map with copied byte-string keys (FNV-1a). Used by
 * the server's version table and in-flight key sets. One owner thread; never
 * allocates on lookup.
 */
#include "cks_common.h"

#include <stdlib.h>
#include <string.h>

typedef struct cks_hmap_ent {
    struct cks_hmap_ent *next;
    uint64_t hash;
    size_t len;
    void *value;
    uint8_t key[];
} cks_hmap_ent_t;

struct cks_hmap {
    cks_hmap_ent_t **buckets;
    size_t nbuckets;
    size_t count;
};

static uint64_t cks_hmap_hash(const void *key, size_t len)
{
    const uint8_t *p = key;
    uint64_t h       = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return h;
}

cks_status_t cks_hmap_create(cks_hmap_t **map_p)
{
    cks_hmap_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    m->nbuckets = 16;
    m->buckets  = calloc(m->nbuckets, sizeof(*m->buckets));
    if (m->buckets == NULL) {
        free(m);
        return CKS_ERR_NO_MEMORY;
    }
    *map_p = m;
    return CKS_OK;
}

void cks_hmap_destroy(cks_hmap_t *m)
{
    if (m == NULL) {
        return;
    }
    for (size_t i = 0; i < m->nbuckets; i++) {
        cks_hmap_ent_t *e = m->buckets[i];
        while (e != NULL) {
            cks_hmap_ent_t *next = e->next;
            free(e);
            e = next;
        }
    }
    free(m->buckets);
    free(m);
}

static cks_hmap_ent_t **cks_hmap_find(const cks_hmap_t *m, const void *key, size_t len,
                                      uint64_t h)
{
    cks_hmap_ent_t **pp = &m->buckets[h & (m->nbuckets - 1)];
    while (*pp != NULL) {
        if ((*pp)->hash == h && (*pp)->len == len && memcmp((*pp)->key, key, len) == 0) {
            break;
        }
        pp = &(*pp)->next;
    }
    return pp;
}

void *cks_hmap_get(const cks_hmap_t *m, const void *key, size_t len)
{
    cks_hmap_ent_t **pp = cks_hmap_find(m, key, len, cks_hmap_hash(key, len));
    return *pp ? (*pp)->value : NULL;
}

static void cks_hmap_grow(cks_hmap_t *m)
{
    size_t n                  = m->nbuckets * 2;
    cks_hmap_ent_t **buckets = calloc(n, sizeof(*buckets));
    if (buckets == NULL) {
        return; /* keep working at a higher load */
    }
    for (size_t i = 0; i < m->nbuckets; i++) {
        cks_hmap_ent_t *e = m->buckets[i];
        while (e != NULL) {
            cks_hmap_ent_t *next = e->next;
            e->next              = buckets[e->hash & (n - 1)];
            buckets[e->hash & (n - 1)] = e;
            e                          = next;
        }
    }
    free(m->buckets);
    m->buckets  = buckets;
    m->nbuckets = n;
}

cks_status_t cks_hmap_put(cks_hmap_t *m, const void *key, size_t len, void *value)
{
    uint64_t h          = cks_hmap_hash(key, len);
    cks_hmap_ent_t **pp = cks_hmap_find(m, key, len, h);
    if (*pp != NULL) {
        (*pp)->value = value;
        return CKS_OK;
    }
    cks_hmap_ent_t *e = malloc(sizeof(*e) + len);
    if (e == NULL) {
        return CKS_ERR_NO_MEMORY;
    }
    e->hash  = h;
    e->len   = len;
    e->value = value;
    memcpy(e->key, key, len);
    e->next = m->buckets[h & (m->nbuckets - 1)];
    m->buckets[h & (m->nbuckets - 1)] = e;
    if (++m->count > m->nbuckets) {
        cks_hmap_grow(m);
    }
    return CKS_OK;
}

void *cks_hmap_del(cks_hmap_t *m, const void *key, size_t len)
{
    cks_hmap_ent_t **pp = cks_hmap_find(m, key, len, cks_hmap_hash(key, len));
    cks_hmap_ent_t *e   = *pp;
    if (e == NULL) {
        return NULL;
    }
    void *value = e->value;
    *pp         = e->next;
    free(e);
    m->count--;
    return value;
}

size_t cks_hmap_count(const cks_hmap_t *m)
{
    return m->count;
}

void cks_hmap_foreach(const cks_hmap_t *m,
                      void (*cb)(const void *key, size_t len, void *value, void *arg),
                      void *arg)
{
    for (size_t i = 0; i < m->nbuckets; i++) {
        for (cks_hmap_ent_t *e = m->buckets[i]; e != NULL; e = e->next) {
            cb(e->key, e->len, e->value, arg);
        }
    }
}
