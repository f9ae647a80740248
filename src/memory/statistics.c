/* statistics.c: statistics decorator: bytes and allocation counts {current, peak, total}, overall
 * and per tag. Bytes are the REQUESTED sizes (the pool's rounded sizes are query's live_bytes).
 * Counters rise after upstream's allocate succeeded. Over a recording layer (caching, async,
 * simple) they fall once its deallocate accepted the free, by the tag and shard of its record
 * (dv_last_freed); over any other upstream this layer keeps a sharded pointer map (ptr -> size,
 * tag, shard) and they fall before the free (restored if it is refused). Counters are sharded by
 * thread (account.h; st_grow keeps the peak); tags sit in a fixed table read lock-free (entries are
 * published with a release store of the count; adding one takes a mutex; tags past the table share
 * "(other)"). */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "../core/runtime.h"
#include "account.h"

#define ST_TAGS 64 /* distinct tags with their own entry */
#define ST_SHARD_BITS 10
#define ST_SHARDS (1 << ST_SHARD_BITS) /* pointer-map shards: 16 threads rarely meet on one */
#define ST_CELLS \
  DV_SHARDS /* counter shards: one per thread shard; those past dv_shard_span are unused */

/* One thread shard of one pair's counters ([0] bytes, [1] count). Its thread writes the first
 * line (cur, total; hi and mark with st_grow); a free on another thread adds to `debt` on the
 * second, so the shard's current is cur - debt and the owner's line takes no locked instruction
 * (account.h). Sums of cur - debt and of total are exact; mark and hi serve the peak (st_grow). */
typedef struct st_cell {
  _Alignas(DV_LINE) _Atomic int64_t cur[2]; /* _Alignas binds to one declarator: the unit's start */
  _Atomic int64_t total[2], mark[2], hi[2];
  _Alignas(64) _Atomic int64_t debt[2]; /* the unit's second line */
} st_cell;
_Static_assert(sizeof(st_cell) == DV_LINE, "a thread shard's counters fill one unit");
typedef struct st_pair {
  st_cell* cells; /* ST_CELLS */
  _Atomic int64_t peak[2];
  int collide; /* consecutive st_grow calls whose marks did not fit (under grow_mu) */
} st_pair;
typedef struct st_tag {
  const char* name; /* written before the entry is published */
  st_pair c;
} st_tag;
typedef struct st_ent {
  uintptr_t key; /* 0: empty */
  uint64_t size;
  st_pair* tag;
  unsigned shard; /* the allocating thread's */
} st_ent;
typedef struct st_shard {
  _Alignas(DV_LINE) dv_spin mu;
  st_ent* e; /* open addressing, linear probing, load <= 1/2 */
  size_t cap, n;
} st_shard;

typedef struct dv_stats { /* what every call reads first: the head, shards, ntags, all, the first
                             tags */
  devrt_resource base;
  st_shard* shards;       /* the pointer map [ST_SHARDS]; NULL over a recording layer, whose records
                             tell a free its tag and shard (dv_stats_deallocate) */
  _Atomic unsigned ntags; /* published entries of tags[] */
  st_pair all;
  st_tag tags[ST_TAGS];
  st_pair other;
  pthread_mutex_t tag_mu;  /* serialises adding a tag */
  pthread_mutex_t grow_mu; /* serialises st_grow */
} dv_stats;

/* Upstream: async in devrt's stacks without a cache, called directly (account.h); a caching
 * layer through its vtable. */
#define UP_ALLOCATE(self, ...) DV_CALL((self)->upstream, async, allocate, __VA_ARGS__)
#define UP_DEALLOCATE(self, ...) DV_CALL((self)->upstream, async, deallocate, __VA_ARGS__)

/* ---- counters ---- */

static bool st_pair_init(st_pair* p) {
  return (p->cells = dv_zalloc_lines(sizeof(st_cell) * ST_CELLS)) != NULL;
}

static int64_t ld(_Atomic int64_t* x) { return atomic_load_explicit(x, memory_order_relaxed); }
static void st(_Atomic int64_t* x, int64_t v) { atomic_store_explicit(x, v, memory_order_relaxed); }
/* Shard s's current (cur read before debt: a racing free can only make it read low). */
static int64_t cur_of(st_cell* c, int k) {
  int64_t v = ld(&c->cur[k]);
  return v - ld(&c->debt[k]);
}
static int64_t sum_cur(const st_pair* p, int k) {
  int64_t n = 0;
  for (unsigned i = 0, end = dv_shard_end(); i < end; i++) n += cur_of(&p->cells[i], k);
  return n;
}
static int64_t sum_total(const st_pair* p, int k) {
  int64_t n = 0;
  for (unsigned i = 0, end = dv_shard_end(); i < end; i++) n += ld(&p->cells[i].total[k]);
  return n;
}
/* Adds d to a counter of shard s written by this thread (dv_cell_add); returns the new value. */
static DV_INLINE int64_t bump(_Atomic int64_t* x, int64_t d, unsigned s) {
  if (DV_LIKELY(s < DV_OWNED)) {
    int64_t v = ld(x) + d;
    st(x, v);
    return v;
  }
  return atomic_fetch_add_explicit(x, d, memory_order_relaxed) + d;
}

/* The peak without a shared counter on the hot path. Each shard has a mark; while every shard's
 * current stays at or under its mark and the marks sum to at most the peak, the sum of the
 * currents cannot pass the peak, so an allocation only compares its own shard's current with its
 * own mark. One that passes it comes here: the exact sum raises the peak, then every shard gets
 * its recent high (hi, since the last call) as its mark where those fit under the peak. Where they
 * do not, the marks are the currents and this shard gets the headroom, which keeps the peak exact;
 * only after 8 such calls in a row (threads keep passing each other's marks) is the peak raised to
 * the sum of the recent highs, so that threads stop meeting here: an upper bound by at most each
 * thread's recent swing. With one thread at a time the peak is exact. */
static DV_NOINLINE void st_grow(dv_stats* S, st_pair* p, unsigned s) {
  pthread_mutex_lock(&S->grow_mu);
  int64_t cur[ST_CELLS][2], want[ST_CELLS][2], P[2], tot[2] = {0, 0}, wsum[2] = {0, 0};
  unsigned end =
      dv_shard_end(); /* a shard taken after this passes its zero mark and comes here too */
  for (unsigned i = 0; i < end; i++)
    for (int k = 0; k < 2; k++) {
      cur[i][k] = cur_of(&p->cells[i], k);
      int64_t hi = ld(&p->cells[i].hi[k]);
      want[i][k] = hi > cur[i][k] ? hi : cur[i][k];
      tot[k] += cur[i][k], wsum[k] += want[i][k];
    }
  bool fit = true;
  for (int k = 0; k < 2; k++) {
    P[k] = ld(&p->peak[k]);
    if (tot[k] > P[k]) P[k] = tot[k];
    fit = fit && wsum[k] <= P[k];
  }
  bool raise = !fit && ++p->collide >= 8;
  if (fit || raise) p->collide = 0;
  for (int k = 0; k < 2; k++) {
    if (raise && wsum[k] > P[k]) P[k] = wsum[k];
    st(&p->peak[k], P[k]);
    for (unsigned i = 0; i < end; i++) {
      int64_t m = fit || raise ? want[i][k] : i == s ? cur[i][k] + (P[k] - tot[k]) : cur[i][k];
      st(&p->cells[i].mark[k], m);
      st(&p->cells[i].hi[k], cur[i][k]);
    }
  }
  pthread_mutex_unlock(&S->grow_mu);
}

/* Shard s passed its recent high or its mark as its owner counts it (st_add): the recent high
 * follows its exact current, and if that is past the mark, the peak is settled (st_grow). */
static DV_NOINLINE void st_high(dv_stats* S, st_pair* p, unsigned s) {
  st_cell* c = &p->cells[s];
  int64_t b = cur_of(c, 0), n = cur_of(c, 1);
  if (b > ld(&c->hi[0])) st(&c->hi[0], b);
  if (n > ld(&c->hi[1])) st(&c->hi[1], n);
  if (b > ld(&c->mark[0]) || n > ld(&c->mark[1])) st_grow(S, p, s);
}

/* An allocation of `size` appears on this thread's shard s (total: a new one, not a refused free
 * being restored). Written out for bytes and count: the hot path of every allocation. It compares
 * the bumped cur with the recent high and the mark: cur is at least the shard's current (frees on
 * other threads may be owed as debt), so at or under both nothing more is needed, and its own
 * line is all it reads. Debt is never folded back into cur (a reader summing cur - debt could
 * then read high, and the peak with it), so a shard whose allocations other threads free runs
 * ahead of its current by that debt: once the debt passes its swing, each allocation on it takes
 * st_high, which reads the debt line. */
static DV_INLINE void st_add(dv_stats* S, st_pair* p, uint64_t size, bool total, unsigned s) {
  st_cell* c = &p->cells[s];
  int64_t b = bump(&c->cur[0], (int64_t)size, s), n = bump(&c->cur[1], 1, s);
  if (total) bump(&c->total[0], (int64_t)size, s), bump(&c->total[1], 1, s);
  if (DV_UNLIKELY(b > ld(&c->hi[0]) || n > ld(&c->hi[1]) || b > ld(&c->mark[0]) ||
                  n > ld(&c->mark[1])))
    st_high(S, p, s);
}

/* A free of `size` allocated on `shard`, by the thread of shard me: off that shard's current, as
 * its debt when another thread frees it. */
static DV_INLINE void st_sub(st_pair* p, unsigned shard, uint64_t size, unsigned me) {
  st_cell* c = &p->cells[shard];
  if (shard == me) {
    bump(&c->cur[0], -(int64_t)size, me), bump(&c->cur[1], -1, me);
  } else {
    atomic_fetch_add_explicit(&c->debt[0], (int64_t)size, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->debt[1], 1, memory_order_relaxed);
  }
}

static devrt_memory_counter st_read(const st_pair* p, int k) {
  int64_t cur = sum_cur(p, k), peak = ld((_Atomic int64_t*)&p->peak[k]);
  return (devrt_memory_counter){cur, peak > cur ? peak : cur, sum_total(p, k)};
}

static void st_reset(dv_stats* S, st_pair* p) {
  pthread_mutex_lock(&S->grow_mu);
  for (int k = 0; k < 2; k++) {
    st(&p->peak[k], sum_cur(p, k));
    for (unsigned i = 0, end = dv_shard_end(); i < end; i++) {
      int64_t c = cur_of(&p->cells[i], k);
      st(&p->cells[i].mark[k], c), st(&p->cells[i].hi[k], c);
    }
  }
  p->collide = 0;
  pthread_mutex_unlock(&S->grow_mu);
}

/* ---- tags ---- */

static DV_NOINLINE st_pair* st_search(dv_stats* S, const char* tag, unsigned n) {
  for (unsigned i = 0; i < n; i++)
    if (S->tags[i].name == tag || !strcmp(S->tags[i].name, tag)) return &S->tags[i].c;
  return NULL;
}
static DV_INLINE st_pair* st_find(dv_stats* S, const char* tag) {
  unsigned n = atomic_load_explicit(&S->ntags, memory_order_acquire);
  if (DV_LIKELY(n) && DV_LIKELY(S->tags[0].name == tag))
    return &S->tags[0].c; /* the usual case: one tag, the same string */
  return st_search(S, tag, n);
}

static st_pair* st_tag_add(dv_stats* S, const char* tag);
/* The tag's counters ("(other)" once the table is full; NULL: no host memory for a new one). */
static DV_INLINE st_pair* st_tag_of(dv_stats* S, const char* tag) {
  st_pair* p = st_find(S, tag);
  return p ? p : st_tag_add(S, tag);
}
static DV_NOINLINE st_pair* st_tag_add(dv_stats* S, const char* tag) {
  st_pair* p = NULL;
  pthread_mutex_lock(&S->tag_mu);
  if (!(p = st_find(S, tag))) {
    unsigned n = atomic_load_explicit(&S->ntags, memory_order_relaxed);
    if (n < ST_TAGS && st_pair_init(&S->tags[n].c)) {
      S->tags[n].name = tag;
      p = &S->tags[n].c;
      atomic_store_explicit(&S->ntags, n + 1, memory_order_release);
    } else if (n == ST_TAGS) {
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

static st_shard* st_shard_of(dv_stats* S, uintptr_t k) {
  return &S->shards[st_hash(k) & (ST_SHARDS - 1)];
}
static size_t st_home(const st_shard* sh, uintptr_t k) {
  return (size_t)(st_hash(k) >> ST_SHARD_BITS) & (sh->cap - 1);
}

static void st_put(st_shard* sh, st_ent e) {
  size_t i = st_home(sh, e.key);
  while (sh->e[i].key && sh->e[i].key != e.key) i = (i + 1) & (sh->cap - 1);
  if (!sh->e[i].key) sh->n++;
  sh->e[i] = e;
}

/* mu held; false when the table cannot grow. */
static DV_NOINLINE bool st_insert(st_shard* sh, st_ent e) {
  if ((sh->n + 1) * 2 > sh->cap) {
    size_t cap = sh->cap ? sh->cap * 2 : 64;
    st_ent* ne = dv_zalloc_lines(cap * sizeof *ne);
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
static DV_NOINLINE bool st_remove(st_shard* sh, uintptr_t key, st_ent* out) {
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

/* The pointer map's side of allocate and deallocate, over an upstream that is no recording layer
 * (out of line: devrt's own stacks put one beneath this layer). */
static DV_NOINLINE devrt_status map_add(dv_stats* S, void** out, size_t size, devrt_stream stream,
                                        const char* tag, st_pair* t) {
  uintptr_t k = (uintptr_t)*out;
  st_shard* sh = st_shard_of(S, k);
  dv_spin_lock(&sh->mu);
  bool ok = st_insert(sh, (st_ent){k, size, t, dv_shard()});
  dv_spin_unlock(&sh->mu);
  if (ok) return DEVRT_OK;
  UP_DEALLOCATE(&S->base, *out, size, stream);
  *out = NULL;
  return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                 "statistics allocate: no host memory to track %zu bytes (tag %s)", size,
                 tag ? tag : "untagged");
}
static DV_NOINLINE devrt_status map_deallocate(dv_stats* S, void* ptr, size_t size,
                                               devrt_stream stream) {
  uintptr_t k = (uintptr_t)ptr;
  st_shard* sh = st_shard_of(S, k);
  st_ent e;
  dv_spin_lock(&sh->mu);
  bool known = st_remove(sh, k, &e);
  dv_spin_unlock(&sh->mu);
  if (!known) return UP_DEALLOCATE(&S->base, ptr, size, stream); /* upstream refuses it */
  unsigned me = dv_shard();
  st_sub(&S->all, e.shard, e.size, me);
  st_sub(e.tag, e.shard, e.size, me);
  devrt_status s = UP_DEALLOCATE(&S->base, ptr, size, stream);
  if (s != DEVRT_OK) { /* refused: the allocation is still there */
    dv_spin_lock(&sh->mu);
    e.shard = me; /* restored on this thread's shard */
    bool back = st_insert(sh, e);
    dv_spin_unlock(&sh->mu);
    if (back) {
      st_add(S, &S->all, e.size, false, me);
      st_add(S, e.tag, e.size, false, me);
    }
  }
  return s;
}

DV_HOT devrt_status dv_stats_allocate(devrt_resource* self, size_t size, devrt_stream stream,
                                      const char* tag, void** out) {
  dv_stats* S = (dv_stats*)self;
  st_pair* t = st_tag_of(S, tag ? tag : "untagged");
  if (!t)
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "statistics allocate: no host memory for tag %s",
                   tag);
  DV_CHECK(UP_ALLOCATE(self, size, stream, tag, out));
  if (DV_UNLIKELY(S->shards)) DV_CHECK(map_add(S, out, size, stream, tag, t));
  unsigned me = dv_shard();
  st_add(S, &S->all, size, true, me);
  st_add(S, t, size, true, me);
  return DEVRT_OK;
}

/* Over a recording layer the counters fall once its deallocate accepted the free, by its record
 * (dv_last_freed); over any other upstream by this layer's pointer map, before the free (restored
 * if upstream refuses it). */
DV_HOT devrt_status dv_stats_deallocate(devrt_resource* self, void* ptr, size_t size,
                                        devrt_stream stream) {
  dv_stats* S = (dv_stats*)self;
  if (DV_UNLIKELY(S->shards)) return map_deallocate(S, ptr, size, stream);
  DV_CHECK(UP_DEALLOCATE(self, ptr, size, stream));
  dv_freed f = dv_last_freed;
  unsigned me = dv_shard();
  st_sub(&S->all, f.shard, size, me);
  st_sub(st_tag_of(S, f.tag ? f.tag : "untagged"), f.shard, size,
         me); /* found: its allocation added it */
  return DEVRT_OK;
}

static devrt_status st_query(devrt_resource* self, devrt_resource_figures* out) {
  dv_stats* S = (dv_stats*)self;
  DV_CHECK(devrt_resource_query(self->upstream, out));
  out->bytes = st_read(&S->all, 0);
  out->count = st_read(&S->all, 1);
  return DEVRT_OK;
}

static void st_destroy(devrt_resource* self) {
  dv_stats* S = (dv_stats*)self;
  for (int i = 0; S->shards && i < ST_SHARDS; i++) free(S->shards[i].e);
  free(S->shards);
  pthread_mutex_destroy(&S->tag_mu);
  pthread_mutex_destroy(&S->grow_mu);
  unsigned n = atomic_load_explicit(&S->ntags, memory_order_relaxed);
  for (unsigned i = 0; i < n; i++) free(S->tags[i].c.cells);
  free(S->all.cells), free(S->other.cells);
  free(S);
}

const devrt_resource_vtable dv_stats_vtable = {
    dv_stats_allocate, dv_stats_deallocate, st_query, NULL, NULL, st_destroy};

devrt_status devrt_statistics_resource_create(devrt_resource* upstream, devrt_resource** out) {
  DV_ARG_CHECK(out, "devrt_statistics_resource_create", "out is NULL");
  *out = NULL;
  DV_RES_CHECK(upstream, "devrt_statistics_resource_create");
  dv_stats* S = dv_zalloc_lines(sizeof *S);
  if (!S)
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_statistics_resource_create: no host memory");
  pthread_mutex_init(&S->tag_mu, NULL);
  pthread_mutex_init(&S->grow_mu, NULL);
  bool records = dv_caching_is(upstream) || dv_async_is(upstream) || dv_simple_is(upstream);
  if (!st_pair_init(&S->all) || !st_pair_init(&S->other) ||
      (!records && !(S->shards = dv_zalloc_lines(sizeof(st_shard) * ST_SHARDS)))) {
    st_destroy(&S->base);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_statistics_resource_create: no host memory");
  }
  devrt_status s =
      devrt_resource_init(&S->base, &dv_stats_vtable, "statistics", upstream->rt, upstream);
  if (s != DEVRT_OK) {
    st_destroy(&S->base);
    return s;
  }
  *out = &S->base;
  return DEVRT_OK;
}

devrt_status devrt_statistics_get(devrt_resource* r, const char* tag, devrt_memory_stats* out) {
  DV_RES_CHECK(r, "devrt_statistics_get");
  DV_ARG_CHECK(r->vtable == &dv_stats_vtable, "devrt_statistics_get",
               "resource %p is a %s layer, not statistics", (void*)r, r->name);
  DV_ARG_CHECK(out, "devrt_statistics_get", "out is NULL (tag %s)", tag ? tag : "(overall)");
  dv_stats* S = (dv_stats*)r;
  st_pair* p = !tag ? &S->all : st_find(S, tag);
  if (!p && !strcmp(tag, "(other)")) p = &S->other;
  *out = p ? (devrt_memory_stats){st_read(p, 0), st_read(p, 1)} : (devrt_memory_stats){{0}, {0}};
  return DEVRT_OK;
}

devrt_status devrt_statistics_reset_peaks(devrt_resource* r) {
  DV_RES_CHECK(r, "devrt_statistics_reset_peaks");
  DV_ARG_CHECK(r->vtable == &dv_stats_vtable, "devrt_statistics_reset_peaks",
               "resource %p is a %s layer, not statistics", (void*)r, r->name);
  dv_stats* S = (dv_stats*)r;
  st_reset(S, &S->all);
  unsigned n = atomic_load_explicit(&S->ntags, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) st_reset(S, &S->tags[i].c);
  st_reset(S, &S->other);
  return DEVRT_OK;
}
