/* async.c: the leaf on the runtime's stream-ordered pool (pool_alloc / pool_free), and the
 * sharded live-allocation table both leaves use (live_table.h). A free stays pending until a
 * reap observes an event recorded on its stream after it; events are amortised per batch. */
#include <stdlib.h>
#include <string.h>
#include "../core/runtime.h"
#include "account.h"
#include "live_table.h"

/* ---- the live table: 1024 shards, each a spin lock over an open-addressing (linear probing) array ---- */

enum { SHARD_BITS = 10, SHARDS = 1 << SHARD_BITS };

typedef struct entry {
  void* p; /* NULL: empty */
  size_t size;
  dv_live_entry v;
} entry;

typedef struct shard {
  _Alignas(DV_LINE) dv_spin mu;
  entry* e;
  size_t cap, n; /* cap: 0 or a power of two */
} shard;

struct dv_live_table { shard s[SHARDS]; };

static uint64_t hash_ptr(const void* p) { return ((uint64_t)(uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull; }
static shard* shard_of(dv_live_table* t, const void* p) { return &t->s[hash_ptr(p) >> (64 - SHARD_BITS)]; }
static size_t home(const shard* sh, const void* p) { return (size_t)(hash_ptr(p) >> 16) & (sh->cap - 1); }

static DV_INLINE entry* find(shard* sh, const void* p) {
  if (!sh->cap) return NULL;
  for (size_t i = home(sh, p);; i = (i + 1) & (sh->cap - 1)) {
    if (sh->e[i].p == p) return &sh->e[i];
    if (!sh->e[i].p) return NULL;
  }
}

static DV_INLINE void put(shard* sh, const entry* x) {
  size_t i = home(sh, x->p);
  while (sh->e[i].p) i = (i + 1) & (sh->cap - 1);
  sh->e[i] = *x;
  sh->n++;
}

/* Removes e by backward shift, so probe chains stay unbroken without tombstones. */
static DV_INLINE void erase(shard* sh, entry* e) {
  size_t m = sh->cap - 1, i = (size_t)(e - sh->e), j = i;
  for (;;) {
    j = (j + 1) & m;
    if (!sh->e[j].p) break;
    size_t k = home(sh, sh->e[j].p);
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue; /* already reachable from its home */
    sh->e[i] = sh->e[j];
    i = j;
  }
  sh->e[i] = (entry){0};
  sh->n--;
}

devrt_status dv_live_create(const char* who, dv_live_table** out) {
  dv_live_table* t = dv_zalloc_lines(sizeof *t);
  if (!t) return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "%s: out of host memory for the live table", who);
  *out = t;
  return DEVRT_OK;
}

void dv_live_destroy(dv_live_table* t) {
  if (!t) return;
  for (int i = 0; i < SHARDS; i++) free(t->s[i].e);
  free(t);
}

/* Doubles sh's capacity (sh locked); false when there is no host memory (out of line: rare). */
static DV_NOINLINE bool grow(shard* sh) {
  shard grown = {.cap = sh->cap ? sh->cap * 2 : 64};
  if (!(grown.e = dv_zalloc_lines(grown.cap * sizeof *grown.e))) return false;
  for (size_t i = 0; i < sh->cap; i++)
    if (sh->e[i].p) put(&grown, &sh->e[i]);
  free(sh->e);
  sh->e = grown.e;
  sh->cap = grown.cap;
  return true;
}

/* DEVICE_ALLOC_FAILED (message naming `who`) when the table cannot grow. */
static DV_INLINE devrt_status insert(dv_live_table* t, const char* who, void* p, size_t size, const dv_live_entry* v) {
  shard* sh = shard_of(t, p);
  entry x = {p, size, *v};
  dv_spin_lock(&sh->mu);
  if ((sh->n + 1) * 4 > sh->cap * 3 && !grow(sh)) { /* keep the load under 3/4 */
    dv_spin_unlock(&sh->mu);
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "%s: out of host memory growing the live table to %zu entries", who,
                   sh->cap ? sh->cap * 2 : 64);
  }
  put(sh, &x);
  dv_spin_unlock(&sh->mu);
  return DEVRT_OK;
}

DV_INLINE devrt_status dv_live_admit(dv_mem_account* a, const char* who, size_t size, const char* tag, uint64_t* rounded) {
  *rounded = dv_round(a, size);
  return dv_account_admit(a, *rounded) ? DEVRT_OK : dv_account_refuse(a, who, size, *rounded, tag);
}

DV_INLINE devrt_status dv_live_track(dv_live_table* t, dv_mem_account* a, const char* who, void* p, size_t size, uint64_t rounded,
                           const char* tag) {
  unsigned s = dv_shard();
  DV_CHECK(insert(t, who, p, size, &(dv_live_entry){rounded, tag, s}));
  dv_account_add_at(a, s, DV_LIVE, rounded);
  return DEVRT_OK;
}

DV_INLINE devrt_status dv_live_take(dv_live_table* t, const char* who, void* p, size_t size, dv_live_entry* out) {
  shard* sh = shard_of(t, p);
  dv_spin_lock(&sh->mu);
  entry* e = find(sh, p);
  size_t recorded = e ? e->size : 0;
  if (e && e->size == size) {
    *out = e->v;
    erase(sh, e);
  }
  dv_spin_unlock(&sh->mu);
  if (!recorded)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "%s deallocate: %p is not a live allocation of this resource (foreign pointer or double free)", who, p);
  if (recorded != size)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s deallocate: size %zu does not match the %zu bytes %p was allocated with",
                   who, size, recorded, p);
  return DEVRT_OK;
}

void dv_live_put_back(dv_live_table* t, void* p, size_t size, const dv_live_entry* e) {
  insert(t, "put back", p, size, e); /* the take left room: it cannot grow */
}

/* ---- the async resource ---- */

typedef struct batch {
  dv_event* ev;
  uint64_t bytes;
} batch;

/* One per stream-pool slot. A free counts its bytes on its own thread shard's row of `freed`
 * (a plain store: account.h), so frees take no lock and write no shared line; the slot's total is
 * the sum down its column. A reap closes a batch over what that sum has grown by since the last
 * one (covered), under one event recorded after those frees; batches sit in a ring, oldest first. */
typedef struct aslot {
  _Alignas(DV_LINE) pthread_mutex_t mu;
  _Atomic(dv_stream*) s;     /* the slot's backend stream, noted by the frees on it */
  uint64_t covered;          /* freed bytes batched so far (under mu) */
  _Atomic uint64_t retired;  /* freed bytes retired so far (written under mu): equal to the
                                column's sum when nothing on the slot is pending */
  batch* q;
  unsigned head, n, cap;
} aslot;

typedef struct async_res {
  devrt_resource base;
  dv_live_table* live;
  aslot* slots;
  unsigned nslots, stride;   /* stride: a row of `freed`, whole cache lines */
  _Atomic uint64_t* freed;   /* [DV_SHARDS][stride]: bytes freed per thread shard and slot, ever */
  pthread_mutex_t ev_mu; /* the free list of events (never destroyed before destroy) */
  dv_event** evs;
  unsigned nev, evcap;
} async_res;

static devrt_status event_take(async_res* a, dv_event** out) {
  devrt_runtime* rt = a->base.rt;
  pthread_mutex_lock(&a->ev_mu);
  dv_event* e = a->nev ? a->evs[--a->nev] : NULL;
  pthread_mutex_unlock(&a->ev_mu);
  if (!e) DV_CHECK(rt->be->event_create(rt->dev, 0, &e));
  *out = e;
  return DEVRT_OK;
}

static void event_give(async_res* a, dv_event* e) {
  pthread_mutex_lock(&a->ev_mu);
  if (a->nev == a->evcap) {
    unsigned cap = a->evcap ? a->evcap * 2 : 16;
    dv_event** v = realloc(a->evs, cap * sizeof *v);
    if (!v) { /* cannot keep it: destroying it off the hot path is the lesser evil */
      pthread_mutex_unlock(&a->ev_mu);
      a->base.rt->be->event_destroy(a->base.rt->dev, e);
      return;
    }
    a->evs = v;
    a->evcap = cap;
  }
  a->evs[a->nev++] = e;
  pthread_mutex_unlock(&a->ev_mu);
}

/* Bytes freed on slot i so far, as far as this thread sees (the shards past dv_shard_span have
 * never been written). */
static uint64_t freed_sum(async_res* a, unsigned i) {
  uint64_t n = 0;
  for (unsigned k = 0, end = atomic_load_explicit(&dv_shard_span, memory_order_acquire); k < end; k++)
    n += atomic_load_explicit(&a->freed[(size_t)k * a->stride + i], memory_order_acquire);
  return n;
}

/* Closes a batch over the slot's frees up to `upto` (a freed_sum; caller holds sl->mu): records
 * an event on the stream and files the new bytes under it. Correctness: a free counts its bytes
 * (a release store) only after its pool_free returned, and the sum was read (acquire) before the
 * record, so every free in it was enqueued on this stream before the event, and a stream runs its
 * work in order: the event completes no earlier than those frees. A free counted after the read
 * lands in a later batch. */
static devrt_status close_batch(async_res* a, aslot* sl, uint64_t upto) {
  devrt_runtime* rt = a->base.rt;
  if (sl->n == sl->cap) {
    unsigned cap = sl->cap ? sl->cap * 2 : 8;
    batch* q = malloc(cap * sizeof *q);
    if (!q) return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "async reap: out of host memory for %u batches", cap);
    for (unsigned i = 0; i < sl->n; i++) q[i] = sl->q[(sl->head + i) % sl->cap];
    free(sl->q);
    sl->q = q;
    sl->cap = cap;
    sl->head = 0;
  }
  dv_event* e = NULL;
  DV_CHECK(event_take(a, &e));
  devrt_status st = rt->be->event_record(e, atomic_load_explicit(&sl->s, memory_order_relaxed));
  if (st != DEVRT_OK) {
    event_give(a, e);
    return st;
  }
  sl->q[(sl->head + sl->n++) % sl->cap] = (batch){e, upto - sl->covered};
  sl->covered = upto;
  return DEVRT_OK;
}

/* Retires the slot's completed batches in order (caller holds sl->mu); stops at the first one
 * still running (later ones on the same stream cannot have completed before it). */
static devrt_status retire(async_res* a, aslot* sl, uint64_t* reaped) {
  dv_mem_account* acc = a->base.account;
  while (sl->n) {
    batch* b = &sl->q[sl->head];
    bool done = false;
    DV_CHECK(a->base.rt->be->event_query(b->ev, &done));
    if (!done) break;
    atomic_store_explicit(&sl->retired, atomic_load_explicit(&sl->retired, memory_order_relaxed) + b->bytes,
                          memory_order_relaxed);
    dv_account_sub(acc, DV_PENDING, b->bytes);
    dv_account_release(acc, b->bytes);
    atomic_fetch_add_explicit(&acc->reaped, b->bytes, memory_order_relaxed);
    *reaped += b->bytes;
    event_give(a, b->ev);
    sl->head = (sl->head + 1) % sl->cap;
    sl->n--;
  }
  return DEVRT_OK;
}

/* With DEVRT_REAP_WAIT the wait is a stream_sync outside the slot mutex (so frees on that
 * stream from other threads never block behind it): it covers every batch closed before it,
 * which the following retire pass then finds complete. */
static devrt_status async_reap(devrt_resource* self, unsigned flags, uint64_t* reaped) {
  async_res* a = (async_res*)self;
  devrt_status first = DEVRT_OK;
  *reaped = 0;
  for (unsigned i = 0; i < a->nslots; i++) {
    aslot* sl = &a->slots[i];
    uint64_t upto = freed_sum(a, i);
    if (upto == atomic_load_explicit(&sl->retired, memory_order_relaxed)) continue; /* nothing pending here */
    pthread_mutex_lock(&sl->mu);
    devrt_status st = upto != sl->covered ? close_batch(a, sl, upto) : DEVRT_OK;
    dv_stream* s = sl->n ? atomic_load_explicit(&sl->s, memory_order_relaxed) : NULL;
    if (st == DEVRT_OK && !(flags & DEVRT_REAP_WAIT)) st = retire(a, sl, reaped);
    pthread_mutex_unlock(&sl->mu);
    if (st == DEVRT_OK && s && (flags & DEVRT_REAP_WAIT)) {
      st = a->base.rt->be->stream_sync(s);
      if (st == DEVRT_OK) {
        pthread_mutex_lock(&sl->mu);
        st = retire(a, sl, reaped);
        pthread_mutex_unlock(&sl->mu);
      }
    }
    if (st != DEVRT_OK && first == DEVRT_OK) first = st; /* keep reaping the other slots */
  }
  return first;
}

DV_HOT devrt_status dv_async_allocate(devrt_resource* self, size_t size, devrt_stream stream, const char* tag,
                                      void** out) {
  async_res* a = (async_res*)self;
  devrt_runtime* rt = self->rt;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "async allocate"));
  uint64_t n = 0;
  DV_CHECK(dv_live_admit(self->account, "async allocate", size, tag, &n));
  void* p = NULL;
  devrt_status st = rt->be->pool_alloc(rt->dev, size, s, &p);
  if (st == DEVRT_OK && (st = dv_live_track(a->live, self->account, "async allocate", p, size, n, tag)) != DEVRT_OK)
    rt->be->pool_free(rt->dev, p, s); /* the table's error is the one reported */
  if (st != DEVRT_OK) {
    dv_account_release(self->account, n);
    return st;
  }
  *out = p;
  return DEVRT_OK;
}

DV_HOT devrt_status dv_async_deallocate(devrt_resource* self, void* p, size_t size, devrt_stream stream) {
  async_res* a = (async_res*)self;
  devrt_runtime* rt = self->rt;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "async deallocate"));
  dv_live_entry e;
  DV_CHECK(dv_live_take(a->live, "async", p, size, &e));
  devrt_status st = rt->be->pool_free(rt->dev, p, s);
  if (st != DEVRT_OK) {
    dv_live_put_back(a->live, p, size, &e);
    return st;
  }
  uint64_t rounded = e.rounded;
  dv_last_freed = (dv_freed){e.tag, e.shard};
  unsigned i = DV_SID_SLOT(stream), k = dv_shard();
  dv_account_move_at(self->account, k, DV_LIVE, DV_PENDING, rounded);
  aslot* sl = &a->slots[i];
  if (atomic_load_explicit(&sl->s, memory_order_relaxed) != s) atomic_store_explicit(&sl->s, s, memory_order_relaxed);
  dv_cell_add(&a->freed[(size_t)k * a->stride + i], rounded, k); /* a release: after the pool_free */
  return DEVRT_OK;
}

static devrt_status async_query(devrt_resource* self, devrt_resource_figures* out) {
  dv_account_query(self->account, out);
  return DEVRT_OK;
}

static devrt_status async_trim(devrt_resource* self, uint64_t* released) {
  *released = 0; /* the pool's reserve is not in the account */
  return self->rt->be->pool_trim(self->rt->dev, 0);
}

static void async_free(async_res* a) {
  devrt_runtime* rt = a->base.rt;
  for (unsigned i = 0; a->slots && i < a->nslots; i++) {
    aslot* sl = &a->slots[i];
    for (unsigned k = 0; k < sl->n; k++) rt->be->event_destroy(rt->dev, sl->q[(sl->head + k) % sl->cap].ev);
    free(sl->q);
    pthread_mutex_destroy(&sl->mu);
  }
  for (unsigned i = 0; i < a->nev; i++) rt->be->event_destroy(rt->dev, a->evs[i]);
  free(a->evs);
  free(a->slots);
  free(a->freed);
  pthread_mutex_destroy(&a->ev_mu);
  dv_live_destroy(a->live);
  free(a->base.account);
  free(a);
}

static void async_destroy(devrt_resource* self) {
  uint64_t n = 0;
  async_reap(self, DEVRT_REAP_WAIT, &n); /* a failure leaves nothing more to do than free */
  async_free((async_res*)self);
}

/* The pool's rounding, from N 1-byte blocks: the gcd of their address distances (CUDA packs small
 * blocks, so that is the step between neighbours; it is never below the rounding, as blocks do
 * not overlap), or the pool's used-bytes growth per block where that is smaller and a power of
 * two >= 256: the host backend counts rounded sizes there, while libc's layout (a header per
 * block, a sanitizer's allocator) spaces its blocks wider. CUDA's used figure counts requested
 * bytes (1 per block), so there the distances decide. */
static devrt_status measure_granularity(devrt_runtime* rt, uint64_t* out) {
  enum { N = 8 };
  devrt_stream sid = 0;
  DV_CHECK(dv_internal_stream(rt, &sid)); /* never one of the user's pool streams */
  dv_stream* s = NULL;
  void* p[N] = {0};
  unsigned got = 0;
  devrt_pool_stats before = {0}, after = {0};
  devrt_status st = dv_stream_get(rt, sid, &s, "async create");
  if (st == DEVRT_OK) st = rt->be->pool_stats(rt->dev, &before);
  while (st == DEVRT_OK && got < N && (st = rt->be->pool_alloc(rt->dev, 1, s, &p[got])) == DEVRT_OK) got++;
  if (st == DEVRT_OK) st = rt->be->pool_stats(rt->dev, &after);
  uint64_t g = 0, used = (after.used_current - before.used_current) / N;
  for (unsigned i = 0; i < got; i++)
    for (unsigned j = i + 1; j < got; j++) {
      uint64_t d = (uintptr_t)p[i] > (uintptr_t)p[j] ? (uintptr_t)p[i] - (uintptr_t)p[j] : (uintptr_t)p[j] - (uintptr_t)p[i];
      while (d) { /* g = gcd(g, d) */
        uint64_t r = g % d;
        g = d;
        d = r;
      }
    }
  for (unsigned i = 0; i < got; i++) {
    devrt_status fs = rt->be->pool_free(rt->dev, p[i], s);
    if (st == DEVRT_OK) st = fs;
  }
  devrt_status ss = devrt_stream_synchronize(rt, sid);
  if (st == DEVRT_OK) st = ss;
  if (st != DEVRT_OK) return st;
  if (!g) return dv_fail(DEVRT_ERR_BACKEND_ERROR, "async create: cannot measure the pool's granularity (%u blocks at one address)", got);
  g &= ~g + 1; /* its power-of-two part, at least 256 */
  if (g < 256) g = 256;
  *out = used >= 256 && used < g && !(used & (used - 1)) ? used : g;
  return DEVRT_OK;
}

static const devrt_resource_vtable async_vtable = {
    .allocate = dv_async_allocate,
    .deallocate = dv_async_deallocate,
    .query = async_query,
    .reap = async_reap,
    .trim = async_trim,
    .destroy = async_destroy,
};
bool dv_async_is(const devrt_resource* r) { return r->vtable == &async_vtable; }

devrt_status devrt_async_resource_create(devrt_runtime* rt, devrt_resource** out) {
  DV_RT_CHECK(rt, "devrt_async_resource_create");
  DV_ARG_CHECK(out, "devrt_async_resource_create", "out is NULL");
  async_res* a = dv_zalloc_lines(sizeof *a); /* read by every thread: no neighbour on its lines */
  dv_mem_account* acc = dv_account_new();
  aslot* slots = dv_zalloc_lines((size_t)rt->nslots * sizeof *slots);
  unsigned stride = (rt->nslots + 15) / 16 * 16; /* rows of whole DV_LINEs */
  _Atomic uint64_t* freed = dv_zalloc_lines((size_t)DV_SHARDS * stride * sizeof *freed);
  if (!a || !acc || !slots || !freed) {
    free(a), free(acc), free(slots), free(freed);
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "devrt_async_resource_create: out of host memory (%u slots)", rt->nslots);
  }
  a->slots = slots;
  a->nslots = rt->nslots;
  a->freed = freed;
  a->stride = stride;
  for (unsigned i = 0; i < rt->nslots; i++) pthread_mutex_init(&slots[i].mu, NULL);
  pthread_mutex_init(&a->ev_mu, NULL);
  a->base.account = acc;
  a->base.rt = rt;
  devrt_status st = dv_live_create("devrt_async_resource_create", &a->live);
  if (st == DEVRT_OK) st = measure_granularity(rt, &acc->granularity);
  if (st == DEVRT_OK) st = devrt_resource_init(&a->base, &async_vtable, "async", rt, NULL);
  if (st != DEVRT_OK) {
    async_free(a);
    return st;
  }
  *out = &a->base;
  return DEVRT_OK;
}

void dv_async_forget_slot(devrt_resource* r, unsigned slot) {
  if (!dv_async_is(r)) return;
  async_res* a = (async_res*)r;
  aslot* sl = &a->slots[slot];
  dv_mem_account* acc = r->account;
  pthread_mutex_lock(&sl->mu);
  for (; sl->n; sl->head = (sl->head + 1) % sl->cap, sl->n--) event_give(a, sl->q[sl->head].ev); /* all complete */
  uint64_t upto = freed_sum(a, slot), n = upto - atomic_load(&sl->retired); /* frees before the synchronize too */
  sl->covered = upto;
  atomic_store(&sl->retired, upto);
  atomic_store(&sl->s, NULL);
  pthread_mutex_unlock(&sl->mu);
  dv_account_sub(acc, DV_PENDING, n);
  dv_account_release(acc, n);
  atomic_fetch_add_explicit(&acc->reaped, n, memory_order_relaxed);
}
