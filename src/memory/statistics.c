/* statistics.c: statistics decorator: bytes and allocation counts {current, peak, total}, overall and
 * per tag. Bytes are the REQUESTED sizes (the pool's rounded sizes are query's live_bytes). Counters
 * rise after upstream's allocate succeeded and fall before upstream's deallocate runs (restored if it
 * refuses), so threads racing on a recycled address never count it twice. Overall counters are
 * lock-free atomics; tags sit in a fixed table read lock-free (entries are published with a release
 * store of the count; adding one takes a mutex; tags past the table share "(other)"); a sharded
 * pointer map (ptr -> requested size, tag) tells a free what to subtract. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "../core/runtime.h"
#include "account.h"

#define ST_TAGS 64   /* distinct tags with their own entry */
#define ST_SHARDS 64 /* pointer-map shards (power of 2) */

typedef struct st_counter {
  _Atomic int64_t current, peak, total;
} st_counter;
typedef struct st_pair {
  st_counter bytes, count;
} st_pair;
typedef struct st_tag {
  const char* name; /* written before the entry is published */
  st_pair c;
} st_tag;
typedef struct st_ent {
  uintptr_t key; /* 0: empty */
  uint64_t size;
  st_pair* tag;
} st_ent;
typedef struct st_shard {
  pthread_mutex_t mu;
  st_ent* e; /* open addressing, linear probing, load <= 1/2 */
  size_t cap, n;
  char pad[64];
} st_shard;

typedef struct dv_stats {
  devrt_resource base;
  st_pair all;
  pthread_mutex_t tag_mu; /* serialises adding a tag */
  _Atomic unsigned ntags; /* published entries of tags[] */
  st_tag tags[ST_TAGS];
  st_pair other;
  st_shard shards[ST_SHARDS];
} dv_stats;

static const devrt_resource_vtable st_vtable;

/* ---- counters ---- */

static void st_max(_Atomic int64_t* peak, int64_t v) {
  int64_t p = atomic_load_explicit(peak, memory_order_relaxed);
  while (v > p && !atomic_compare_exchange_weak_explicit(peak, &p, v, memory_order_relaxed, memory_order_relaxed)) {
  }
}

static void st_counter_add(st_counter* c, int64_t n, bool total) {
  st_max(&c->peak, atomic_fetch_add_explicit(&c->current, n, memory_order_relaxed) + n);
  if (total) atomic_fetch_add_explicit(&c->total, n, memory_order_relaxed);
}

/* An allocation of `size` appears (total: a new one, not a refused free being restored). */
static void st_add(st_pair* p, uint64_t size, bool total) {
  st_counter_add(&p->bytes, (int64_t)size, total);
  st_counter_add(&p->count, 1, total);
}

static void st_sub(st_pair* p, uint64_t size) {
  atomic_fetch_sub_explicit(&p->bytes.current, (int64_t)size, memory_order_relaxed);
  atomic_fetch_sub_explicit(&p->count.current, 1, memory_order_relaxed);
}

static devrt_memory_counter st_read(st_counter* c) {
  return (devrt_memory_counter){atomic_load_explicit(&c->current, memory_order_relaxed),
                                atomic_load_explicit(&c->peak, memory_order_relaxed),
                                atomic_load_explicit(&c->total, memory_order_relaxed)};
}

static void st_reset(st_pair* p) {
  atomic_store_explicit(&p->bytes.peak, atomic_load_explicit(&p->bytes.current, memory_order_relaxed), memory_order_relaxed);
  atomic_store_explicit(&p->count.peak, atomic_load_explicit(&p->count.current, memory_order_relaxed), memory_order_relaxed);
}

/* ---- tags ---- */

static st_pair* st_find(dv_stats* S, const char* tag) {
  unsigned n = atomic_load_explicit(&S->ntags, memory_order_acquire);
  for (unsigned i = 0; i < n; i++)
    if (S->tags[i].name == tag || !strcmp(S->tags[i].name, tag)) return &S->tags[i].c;
  return NULL;
}

static st_pair* st_tag_of(dv_stats* S, const char* tag) {
  st_pair* p = st_find(S, tag);
  if (p) return p;
  pthread_mutex_lock(&S->tag_mu);
  if (!(p = st_find(S, tag))) {
    unsigned n = atomic_load_explicit(&S->ntags, memory_order_relaxed);
    if (n < ST_TAGS) {
      S->tags[n].name = tag;
      p = &S->tags[n].c;
      atomic_store_explicit(&S->ntags, n + 1, memory_order_release);
    } else {
      p = &S->other;
    }
  }
  pthread_mutex_unlock(&S->tag_mu);
  return p;
}

/* ---- pointer map ---- */

static uint64_t st_hash(uintptr_t k) {
  uint64_t x = k;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

static st_shard* st_shard_of(dv_stats* S, uintptr_t k) { return &S->shards[st_hash(k) & (ST_SHARDS - 1)]; }
static size_t st_home(const st_shard* sh, uintptr_t k) { return (size_t)(st_hash(k) >> 6) & (sh->cap - 1); }

static void st_put(st_shard* sh, st_ent e) {
  size_t i = st_home(sh, e.key);
  while (sh->e[i].key && sh->e[i].key != e.key) i = (i + 1) & (sh->cap - 1);
  if (!sh->e[i].key) sh->n++;
  sh->e[i] = e;
}

/* mu held; false when the table cannot grow. */
static bool st_insert(st_shard* sh, st_ent e) {
  if ((sh->n + 1) * 2 > sh->cap) {
    size_t cap = sh->cap ? sh->cap * 2 : 64;
    st_ent* ne = calloc(cap, sizeof *ne);
    if (!ne) return false;
    st_shard old = *sh;
    sh->e = ne;
    sh->cap = cap;
    sh->n = 0;
    for (size_t i = 0; i < old.cap; i++)
      if (old.e[i].key) st_put(sh, old.e[i]);
    free(old.e);
  }
  st_put(sh, e);
  return true;
}

/* mu held; removes key's entry into *out (backward-shift deletion, no tombstones). */
static bool st_remove(st_shard* sh, uintptr_t key, st_ent* out) {
  if (!sh->cap) return false;
  size_t m = sh->cap - 1, i = st_home(sh, key);
  while (sh->e[i].key != key) {
    if (!sh->e[i].key) return false;
    i = (i + 1) & m;
  }
  *out = sh->e[i];
  for (size_t j = (i + 1) & m; sh->e[j].key; j = (j + 1) & m) {
    size_t h = st_home(sh, sh->e[j].key);
    if (((j - h) & m) >= ((j - i) & m)) { /* e[j]'s home is not in (i, j]: it may move to i */
      sh->e[i] = sh->e[j];
      i = j;
    }
  }
  sh->e[i].key = 0;
  sh->n--;
  return true;
}

/* ---- the layer ---- */

static devrt_status st_allocate(devrt_resource* self, size_t size, devrt_stream stream, const char* tag, void** out) {
  dv_stats* S = (dv_stats*)self;
  DV_CHECK(devrt_resource_allocate(self->upstream, size, stream, tag, out));
  st_pair* t = st_tag_of(S, tag ? tag : "untagged");
  uintptr_t k = (uintptr_t)*out;
  st_shard* sh = st_shard_of(S, k);
  pthread_mutex_lock(&sh->mu);
  bool ok = st_insert(sh, (st_ent){k, size, t});
  pthread_mutex_unlock(&sh->mu);
  if (!ok) {
    devrt_resource_deallocate(self->upstream, *out, size, stream);
    *out = NULL;
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "statistics allocate: no host memory to track %zu bytes (tag %s)", size,
                   tag ? tag : "untagged");
  }
  st_add(&S->all, size, true);
  st_add(t, size, true);
  return DEVRT_OK;
}

static devrt_status st_deallocate(devrt_resource* self, void* ptr, size_t size, devrt_stream stream) {
  dv_stats* S = (dv_stats*)self;
  uintptr_t k = (uintptr_t)ptr;
  st_shard* sh = st_shard_of(S, k);
  st_ent e;
  pthread_mutex_lock(&sh->mu);
  bool known = st_remove(sh, k, &e);
  pthread_mutex_unlock(&sh->mu);
  if (!known) return devrt_resource_deallocate(self->upstream, ptr, size, stream); /* upstream refuses it */
  st_sub(&S->all, e.size);
  st_sub(e.tag, e.size);
  devrt_status s = devrt_resource_deallocate(self->upstream, ptr, size, stream);
  if (s != DEVRT_OK) { /* refused: the allocation is still there */
    pthread_mutex_lock(&sh->mu);
    bool back = st_insert(sh, e);
    pthread_mutex_unlock(&sh->mu);
    if (back) {
      st_add(&S->all, e.size, false);
      st_add(e.tag, e.size, false);
    }
  }
  return s;
}

static devrt_status st_query(devrt_resource* self, devrt_resource_figures* out) {
  dv_stats* S = (dv_stats*)self;
  DV_CHECK(devrt_resource_query(self->upstream, out));
  out->bytes = st_read(&S->all.bytes);
  out->count = st_read(&S->all.count);
  return DEVRT_OK;
}

static void st_destroy(devrt_resource* self) {
  dv_stats* S = (dv_stats*)self;
  for (int i = 0; i < ST_SHARDS; i++) {
    pthread_mutex_destroy(&S->shards[i].mu);
    free(S->shards[i].e);
  }
  pthread_mutex_destroy(&S->tag_mu);
  free(S);
}

static const devrt_resource_vtable st_vtable = {st_allocate, st_deallocate, st_query, NULL, NULL, st_destroy};

devrt_status devrt_statistics_resource_create(devrt_resource* upstream, devrt_resource** out) {
  DV_ARG_CHECK(out, "devrt_statistics_resource_create", "out is NULL");
  *out = NULL;
  DV_RES_CHECK(upstream, "devrt_statistics_resource_create");
  dv_stats* S = calloc(1, sizeof *S);
  if (!S) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_statistics_resource_create: no host memory");
  pthread_mutex_init(&S->tag_mu, NULL);
  for (int i = 0; i < ST_SHARDS; i++) pthread_mutex_init(&S->shards[i].mu, NULL);
  devrt_status s = devrt_resource_init(&S->base, &st_vtable, "statistics", upstream->rt, upstream);
  if (s != DEVRT_OK) {
    st_destroy(&S->base);
    return s;
  }
  *out = &S->base;
  return DEVRT_OK;
}

devrt_status devrt_statistics_get(devrt_resource* r, const char* tag, devrt_memory_stats* out) {
  DV_RES_CHECK(r, "devrt_statistics_get");
  DV_ARG_CHECK(r->vtable == &st_vtable, "devrt_statistics_get", "resource %p is a %s layer, not statistics", (void*)r, r->name);
  DV_ARG_CHECK(out, "devrt_statistics_get", "out is NULL (tag %s)", tag ? tag : "(overall)");
  dv_stats* S = (dv_stats*)r;
  st_pair* p = !tag ? &S->all : st_find(S, tag);
  if (!p && !strcmp(tag, "(other)")) p = &S->other;
  *out = p ? (devrt_memory_stats){st_read(&p->bytes), st_read(&p->count)} : (devrt_memory_stats){{0}, {0}};
  return DEVRT_OK;
}

devrt_status devrt_statistics_reset_peaks(devrt_resource* r) {
  DV_RES_CHECK(r, "devrt_statistics_reset_peaks");
  DV_ARG_CHECK(r->vtable == &st_vtable, "devrt_statistics_reset_peaks", "resource %p is a %s layer, not statistics",
               (void*)r, r->name);
  dv_stats* S = (dv_stats*)r;
  st_reset(&S->all);
  unsigned n = atomic_load_explicit(&S->ntags, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) st_reset(&S->tags[i].c);
  st_reset(&S->other);
  return DEVRT_OK;
}
