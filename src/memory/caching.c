/* caching.c: per-stream, size-classed free lists in front of an upstream resource. A freed block
 * is reused at once on its own stream; another stream takes it only after the free's point has
 * completed (tracked lazily by per-slot epochs closed with events) or, if allowed, by waiting on
 * it. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "../core/runtime.h"
#include "account.h"

/* Upstream: async in devrt's stacks, called directly (account.h). */
#define UP_ALLOCATE(self, ...) DV_CALL((self)->upstream, async, allocate, __VA_ARGS__)
#define UP_DEALLOCATE(self, ...) DV_CALL((self)->upstream, async, deallocate, __VA_ARGS__)

enum { MIN_SHIFT = 9, STEPS = 4, NCLS = 69, BIG = 0xff }; /* classes 512 B .. 64 MiB */
enum {
  SHARD_BITS = 10,
  NSHARD = 1 << SHARD_BITS
}; /* record-table shards: 16 threads rarely meet */
#define MAX_CLASS ((size_t)64 << 20)
enum { LIVE = 1, CACHED = 2 };

typedef struct blk {
  void* ptr;
  struct blk *hnext, *prev, *next; /* hash chain; free list (prev: towards the head) */
  uint64_t cls, rsize, epoch;      /* class size (upstream's size), accounted bytes, free epoch */
  const char* tag;                 /* the allocation's, and its thread's shard: for dv_last_freed */
  unsigned shard;                  /* (both written before `state` turns LIVE, with release) */
  _Atomic size_t req;              /* the size the caller asked for */
  _Atomic unsigned char state;
  unsigned char cidx; /* class index, BIG: passed straight through */
} blk;

typedef struct fence {
  dv_event* ev;
  uint64_t epoch;
  struct fence* next;
} fence;
typedef struct lists {
  blk *head[NCLS], *tail[NCLS];
} lists;

/* Per stream slot; every field but the counters is guarded by mu. mu is a spin lock, but a
 * cross-stream move (can_move), a trim and a slot's teardown still query, record and wait on the
 * slot's fences under it: those paths are off the own-stream hot path and wait to move out. */
typedef struct slot {
  _Alignas(DV_LINE) dv_spin mu;
  lists* l;                     /* allocated on the first free on this slot */
  _Atomic uint64_t nonempty[2]; /* class bitmap; written under mu, read without it */
  dv_stream* bs;                /* the slot's backend stream (set on the first free) */
  uint64_t open, done;          /* open epoch; every epoch <= done has completed */
  fence *fq, *fq_tail, *ffree;  /* recorded fences oldest first; spare fences (with events) */
  _Atomic uint64_t hits, misses, waits;
} slot;

typedef struct shard {
  _Alignas(DV_LINE) dv_spin mu;
  blk** b;
  size_t nb, n;
} shard;

typedef struct cache {
  devrt_resource base;
  devrt_caching_options o;
  dv_mem_account own; /* used only when upstream has no account */
  slot* slots;
  unsigned nslots;
  _Atomic uint64_t held; /* cached bytes of this layer (for max_cached_bytes) */
  dv_slot_user user;     /* on the list of layers told when a slot's stream goes away */
  shard sh[NSHARD];
} cache;

/* ---- size classes ---- */

static inline unsigned class_of(size_t n, uint64_t* cls) {
  if (n <= ((size_t)1 << MIN_SHIFT)) {
    *cls = (uint64_t)1 << MIN_SHIFT;
    return 0;
  }
  unsigned k =
      63u - (unsigned)__builtin_clzll((unsigned long long)(n - 1)); /* 2^k < n <= 2^(k+1) */
  uint64_t q =
      (n - ((uint64_t)1 << k) + ((uint64_t)1 << (k - 2)) - 1) >> (k - 2); /* quarter steps */
  *cls = ((uint64_t)1 << k) + (q << (k - 2));
  return (k - MIN_SHIFT) * STEPS + (unsigned)q;
}

/* What an allocation of `size` really holds beneath a budget: its class, as the pool rounds it. */
static uint64_t class_charge(const dv_mem_account* a, size_t size) {
  uint64_t cls = size;
  if (size <= MAX_CLASS) class_of(size, &cls);
  return dv_round(a, (size_t)cls);
}

/* Over a user's resource with no account, this layer is the bottom of the accounted stack: it
 * admits what it takes from upstream (live from then on), and releases it when the block goes
 * back upstream or the allocation failed. */
static bool own_admit(cache* c, uint64_t n) {
  return c->base.account != &c->own || dv_account_admit(&c->own, n);
}
static void own_release(cache* c, uint64_t n) {
  if (c->base.account == &c->own) dv_account_release(&c->own, n);
}

/* ---- pointer -> record hash ---- */

static inline uint64_t hash_of(const void* p) {
  return ((uint64_t)(uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull;
}
static inline shard* shard_of(cache* c, uint64_t h) { return &c->sh[h >> (64 - SHARD_BITS)]; }
static inline blk** bucket(shard* s, uint64_t h) { return &s->b[(h >> 24) & (s->nb - 1)]; }

static blk** hash_find(shard* s, uint64_t h, const void* p) { /* s->mu held */
  blk** at = bucket(s, h);
  while (*at && (*at)->ptr != p) at = &(*at)->hnext;
  return at;
}

static devrt_status hash_insert(cache* c, blk* b) {
  uint64_t h = hash_of(b->ptr);
  shard* s = shard_of(c, h);
  dv_spin_lock(&s->mu);
  if (s->n >= s->nb) { /* grow (misses only: upstream was just called anyway) */
    size_t nb = s->nb ? s->nb * 2 : 64;
    blk** nt = dv_zalloc_lines(nb * sizeof *nt);
    if (!nt) {
      dv_spin_unlock(&s->mu);
      return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                     "caching allocate: out of host memory for the block table");
    }
    blk** ot = s->b;
    size_t onb = s->nb;
    s->b = nt, s->nb = nb;
    for (size_t i = 0; i < onb; i++)
      for (blk *x = ot[i], *nx; x; x = nx) {
        nx = x->hnext;
        blk** at = bucket(s, hash_of(x->ptr));
        x->hnext = *at, *at = x;
      }
    free(ot);
  }
  blk** at = bucket(s, h);
  b->hnext = *at, *at = b;
  s->n++;
  dv_spin_unlock(&s->mu);
  return DEVRT_OK;
}

static void hash_remove(cache* c, blk* b) {
  uint64_t h = hash_of(b->ptr);
  shard* s = shard_of(c, h);
  dv_spin_lock(&s->mu);
  blk** at = hash_find(s, h, b->ptr);
  if (*at) *at = b->hnext, s->n--;
  dv_spin_unlock(&s->mu);
}

/* ---- free lists and epochs (slot mutex held) ---- */

static inline void bit_set(slot* t, unsigned ci, bool on) {
  _Atomic uint64_t* w = &t->nonempty[ci >> 6];
  uint64_t v = atomic_load_explicit(w, memory_order_relaxed), m = 1ull << (ci & 63);
  atomic_store_explicit(w, on ? v | m : v & ~m, memory_order_relaxed);
}
static inline bool bit_get(slot* t, unsigned ci) {
  return atomic_load_explicit(&t->nonempty[ci >> 6], memory_order_relaxed) >> (ci & 63) & 1;
}

static inline void push_head(slot* t, blk* b) {
  blk** head = &t->l->head[b->cidx];
  b->epoch = t->open, b->prev = NULL, b->next = *head;
  if (*head)
    (*head)->prev = b;
  else
    t->l->tail[b->cidx] = b, bit_set(t, b->cidx, true);
  *head = b;
}

static inline blk* pop_head(slot* t, unsigned ci) {
  blk* b = t->l->head[ci];
  if ((t->l->head[ci] = b->next))
    b->next->prev = NULL;
  else
    t->l->tail[ci] = NULL, bit_set(t, ci, false);
  return b;
}

static inline blk* pop_tail(slot* t, unsigned ci) {
  blk* b = t->l->tail[ci];
  if ((t->l->tail[ci] = b->prev))
    b->prev->next = NULL;
  else
    t->l->head[ci] = NULL, bit_set(t, ci, false);
  return b;
}

/* Records an event on the slot's stream closing the open epoch. */
static devrt_status close_epoch(cache* c, slot* t, fence** out) {
  const dv_backend* be = c->base.rt->be;
  fence* f = t->ffree;
  if (f) {
    t->ffree = f->next;
  } else {
    if (!(f = calloc(1, sizeof *f)))
      return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "caching: out of host memory for a fence");
    devrt_status st = be->event_create(c->base.rt->dev, 0, &f->ev);
    if (st != DEVRT_OK) {
      free(f);
      return st;
    }
  }
  devrt_status st = be->event_record(f->ev, t->bs);
  if (st != DEVRT_OK) {
    f->next = t->ffree, t->ffree = f;
    return st;
  }
  f->epoch = t->open++, f->next = NULL;
  if (t->fq_tail)
    t->fq_tail->next = f;
  else
    t->fq = f;
  t->fq_tail = f;
  *out = f;
  return DEVRT_OK;
}

/* Retires fences seen complete, oldest first. */
static void poll_fences(cache* c, slot* t) {
  while (t->fq) {
    bool done = false;
    if (c->base.rt->be->event_query(t->fq->ev, &done) != DEVRT_OK || !done) return;
    fence* f = t->fq;
    t->done = f->epoch;
    if (!(t->fq = f->next)) t->fq_tail = NULL;
    f->next = t->ffree, t->ffree = f;
  }
}

/* May block b (the oldest of its class on t) move to a stream whose backend stream is bs? */
static bool can_move(cache* c, slot* t, blk* b, dv_stream* bs, slot* counter) {
  if (b->epoch <= t->done) return true;
  poll_fences(c, t);
  fence* f = NULL;
  if (b->epoch > t->done && b->epoch == t->open) {
    if (close_epoch(c, t, &f) != DEVRT_OK) return false;
    poll_fences(c, t);
  }
  if (b->epoch <= t->done) return true;
  if (!c->o.cross_stream_wait) return false;
  for (f = t->fq; f && f->epoch < b->epoch; f = f->next) {}
  if (!f || c->base.rt->be->stream_wait(bs, f->ev) != DEVRT_OK) return false;
  atomic_fetch_add_explicit(&counter->waits, 1, memory_order_relaxed);
  return true;
}

/* ---- the vtable ---- */

DV_HOT static devrt_status caching_allocate(devrt_resource* self, size_t size, devrt_stream stream,
                                            const char* tag, void** out) {
  cache* c = (cache*)self;
  dv_stream* bs = NULL;
  DV_CHECK(dv_stream_get(self->rt, stream, &bs, "caching allocate"));
  uint64_t cls = size;
  unsigned ci = size > MAX_CLASS ? BIG : class_of(size, &cls);
  unsigned si = DV_SID_SLOT(stream);
  slot* s = &c->slots[si];
  blk* b = NULL;
  if (ci != BIG) {
    if (bit_get(s, ci)) { /* hot path: this stream's own list, ordered */
      dv_spin_lock(&s->mu);
      if (s->l && s->l->head[ci]) { /* counted under the lock: a plain add, no locked instruction */
        b = pop_head(s, ci);
        atomic_store_explicit(&s->hits, atomic_load_explicit(&s->hits, memory_order_relaxed) + 1,
                              memory_order_relaxed);
      }
      dv_spin_unlock(&s->mu);
    }
    for (unsigned k = 1; !b && k < c->nslots; k++) { /* another stream's oldest block */
      slot* t = &c->slots[(si + k) % c->nslots];
      if (!bit_get(t, ci)) continue;
      dv_spin_lock(&t->mu);
      if (t->l && t->l->tail[ci] && can_move(c, t, t->l->tail[ci], bs, s)) b = pop_tail(t, ci);
      dv_spin_unlock(&t->mu);
      if (b) atomic_fetch_add_explicit(&s->hits, 1, memory_order_relaxed);
    }
    if (b) {
      b->tag = tag, b->shard = dv_shard();
      atomic_store_explicit(&b->req, size, memory_order_relaxed);
      atomic_store_explicit(&b->state, LIVE, memory_order_release);
      if (c->o.max_cached_bytes)
        atomic_fetch_sub_explicit(&c->held, b->rsize, memory_order_relaxed);
      dv_account_sub(self->account, DV_CACHED, b->rsize);
      *out = b->ptr;
      return DEVRT_OK;
    }
    atomic_fetch_add_explicit(&s->misses, 1, memory_order_relaxed);
  }
  void* p = NULL;
  uint64_t rsize = dv_round(self->account, (size_t)cls);
  if (!own_admit(c, rsize)) return dv_account_refuse(&c->own, "caching allocate", size, rsize, tag);
  devrt_status st = UP_ALLOCATE(self, (size_t)cls, stream, tag, &p);
  if (st != DEVRT_OK) {
    own_release(c, rsize);
    return st;
  }
  if (!(b = dv_zalloc_lines(sizeof *b))) { /* a line of its own: its stream's thread writes it */
    st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                 "caching allocate: out of host memory for a block record");
  } else {
    b->ptr = p, b->cls = cls, b->rsize = rsize, b->cidx = (unsigned char)ci, b->tag = tag,
    b->shard = dv_shard();
    atomic_init(&b->req, size);
    atomic_init(&b->state, LIVE);
    st = hash_insert(c, b);
  }
  if (st != DEVRT_OK) {
    free(b);
    if (UP_DEALLOCATE(self, p, (size_t)cls, stream) == DEVRT_OK) own_release(c, rsize);
    return st;
  }
  *out = p;
  return DEVRT_OK;
}

DV_HOT static devrt_status caching_deallocate(devrt_resource* self, void* ptr, size_t size,
                                              devrt_stream stream) {
  cache* c = (cache*)self;
  dv_stream* bs = NULL;
  DV_CHECK(dv_stream_get(self->rt, stream, &bs, "caching deallocate"));
  uint64_t h = hash_of(ptr);
  shard* sh = shard_of(c, h);
  dv_spin_lock(&sh->mu);
  blk** at = sh->b ? hash_find(sh, h, ptr) : NULL;
  blk* b = at ? *at : NULL;
  devrt_status st = DEVRT_OK;
  bool live = b && atomic_load_explicit(&b->state, memory_order_acquire) == LIVE;
  size_t req = b ? atomic_load_explicit(&b->req, memory_order_relaxed) : 0;
  if (!b)
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "caching deallocate: ptr %p was not allocated by this resource (%s)", ptr,
                 self->name);
  else if (!live)
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "caching deallocate: ptr %p is already free (double free)", ptr);
  else if (req != size)
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "caching deallocate: size %zu of ptr %p differs from the %zu bytes allocated",
                 size, ptr, req);
  if (st != DEVRT_OK) {
    dv_spin_unlock(&sh->mu);
    return st;
  }
  dv_freed freed = {b->tag, b->shard};
  bool keep = b->cidx != BIG;
  if (keep && c->o.max_cached_bytes &&
      atomic_fetch_add_explicit(&c->held, b->rsize, memory_order_relaxed) + b->rsize >
          c->o.max_cached_bytes) {
    atomic_fetch_sub_explicit(&c->held, b->rsize, memory_order_relaxed);
    keep = false;
  }
  if (keep)
    atomic_store_explicit(&b->state, CACHED, memory_order_relaxed);
  else
    *at = b->hnext, sh->n--; /* out of the table before upstream can hand ptr out again */
  dv_spin_unlock(&sh->mu);

  slot* s = &c->slots[DV_SID_SLOT(stream)];
  if (keep) {
    dv_account_add(self->account, DV_CACHED, b->rsize); /* before it is visible */
    dv_spin_lock(&s->mu);
    if (!s->l && !(s->l = dv_zalloc_lines(sizeof *s->l)))
      keep = false;
    else
      s->bs = bs, push_head(s, b);
    dv_spin_unlock(&s->mu);
    if (keep) {
      dv_last_freed = freed;
      return DEVRT_OK;
    }
    dv_account_sub(self->account, DV_CACHED, b->rsize); /* no lists: pass it on */
    if (c->o.max_cached_bytes) atomic_fetch_sub_explicit(&c->held, b->rsize, memory_order_relaxed);
    hash_remove(c, b);
  }
  st = UP_DEALLOCATE(self, ptr, (size_t)b->cls, stream);
  if (st != DEVRT_OK) { /* upstream kept it: still live here */
    atomic_store_explicit(&b->state, LIVE, memory_order_relaxed);
    if (hash_insert(c, b) != DEVRT_OK) free(b);
    return st;
  }
  own_release(c, b->rsize);
  free(b);
  dv_last_freed = freed;
  return DEVRT_OK;
}

/* Gives every cached block back to upstream on the runtime's own stream, ordered after each
 * block's free on its stream (that stream's lease may have ended long ago). */
static devrt_status release_all(cache* c, uint64_t* bytes) {
  devrt_resource* self = &c->base;
  devrt_runtime* rt = self->rt;
  *bytes = 0;
  bool any = false;
  for (unsigned i = 0; i < c->nslots && !any; i++)
    any = atomic_load_explicit(&c->slots[i].nonempty[0], memory_order_relaxed) |
          atomic_load_explicit(&c->slots[i].nonempty[1], memory_order_relaxed);
  if (!any) return DEVRT_OK;
  devrt_stream tid = 0;
  dv_stream* tbs = NULL;
  DV_CHECK(dv_internal_stream(rt, &tid));
  devrt_status first = dv_stream_get(rt, tid, &tbs, "caching trim");
  for (unsigned i = 0; i < c->nslots && first == DEVRT_OK; i++) {
    slot* t = &c->slots[i];
    blk* chain = NULL;
    dv_spin_lock(&t->mu);
    for (unsigned ci = 0; t->l && ci < NCLS; ci++)
      while (t->l->head[ci]) {
        blk* b = pop_head(t, ci);
        b->next = chain, chain = b;
      }
    fence* f = NULL;
    devrt_status st = DEVRT_OK;
    if (chain && i != DV_SID_SLOT(tid) && t->bs && (st = close_epoch(c, t, &f)) == DEVRT_OK)
      st = rt->be->stream_wait(tbs, f->ev);
    if (st != DEVRT_OK) { /* cannot order the frees: keep them cached */
      while (chain) {
        blk* b = chain;
        chain = b->next;
        push_head(t, b);
      }
      first = st;
    }
    dv_spin_unlock(&t->mu);
    while (chain) {
      blk* b = chain;
      chain = b->next;
      if (c->o.max_cached_bytes)
        atomic_fetch_sub_explicit(&c->held, b->rsize, memory_order_relaxed);
      /* Cached -> pending (the leaf's free adds it there) or, over the own account, out of held;
       * the bytes leave `cached` last, so live (held less the figures) reads low, never high. */
      hash_remove(c, b);
      st = UP_DEALLOCATE(self, b->ptr, (size_t)b->cls, tid);
      if (st == DEVRT_OK) {
        own_release(c, b->rsize);
        dv_account_sub(self->account, DV_CACHED, b->rsize);
        *bytes += b->rsize;
        free(b);
        continue;
      }
      if (first == DEVRT_OK) first = st;
      if (hash_insert(c, b) != DEVRT_OK) { /* lost track of it: it stays live upstream */
        free(b);
        continue;
      }
      if (c->o.max_cached_bytes)
        atomic_fetch_add_explicit(&c->held, b->rsize, memory_order_relaxed);
      dv_spin_lock(&t->mu);
      push_head(t, b);
      dv_spin_unlock(&t->mu);
    }
  }
  return first;
}

static devrt_status caching_trim(devrt_resource* self, uint64_t* released) {
  devrt_status st = release_all((cache*)self, released);
  DV_ALSO(st, devrt_resource_trim(self->upstream, NULL));
  return st;
}

static devrt_status caching_reap(devrt_resource* self, unsigned flags, uint64_t* reaped) {
  return devrt_resource_reap(self->upstream, flags, reaped);
}

static devrt_status caching_query(devrt_resource* self, devrt_resource_figures* out) {
  cache* c = (cache*)self;
  DV_CHECK(devrt_resource_query(self->upstream, out));
  for (unsigned i = 0; i < c->nslots; i++) {
    out->cache_hits += atomic_load_explicit(&c->slots[i].hits, memory_order_relaxed);
    out->cache_misses += atomic_load_explicit(&c->slots[i].misses, memory_order_relaxed);
  }
  if (self->account == &c->own) out->cached_bytes = dv_account_sum(&c->own, DV_CACHED);
  return DEVRT_OK;
}

static void caching_destroy(devrt_resource* self) {
  cache* c = (cache*)self;
  dv_slot_user_remove(&c->user);
  devrt_runtime* rt = self->rt;
  uint64_t n = 0;
  if (dv_rt_ok(rt)) release_all(c, &n);
  if (self->account->charge == class_charge) self->account->charge = NULL;
  for (unsigned i = 0; i < c->nslots; i++) {
    slot* t = &c->slots[i];
    for (int q = 0; q < 2; q++)
      for (fence *f = q ? t->ffree : t->fq, *nx; f; f = nx) {
        nx = f->next;
        if (dv_rt_ok(rt)) rt->be->event_destroy(rt->dev, f->ev);
        free(f);
      }
    free(t->l);
  }
  for (unsigned i = 0; i < NSHARD; i++) {
    shard* s = &c->sh[i];
    for (size_t k = 0; k < s->nb; k++)
      for (blk *b = s->b[k], *nx; b; b = nx) nx = b->hnext, free(b);
    free(s->b);
  }
  free(c->slots);
  free(c);
}

static const devrt_resource_vtable caching_vtable = {
    .allocate = caching_allocate,
    .deallocate = caching_deallocate,
    .query = caching_query,
    .reap = caching_reap,
    .trim = caching_trim,
    .destroy = caching_destroy,
};
bool dv_caching_is(const devrt_resource* r) { return r->vtable == &caching_vtable; }

devrt_status devrt_caching_resource_create(devrt_resource* upstream,
                                           const devrt_caching_options* opts,
                                           devrt_resource** out) {
  DV_ARG_CHECK(out, "devrt_caching_resource_create", "out is NULL");
  *out = NULL;
  DV_RES_CHECK(upstream, "devrt_caching_resource_create");
  DV_RT_CHECK(upstream->rt, "devrt_caching_resource_create");
  devrt_runtime* rt = upstream->rt;
  cache* c = dv_zalloc_lines(sizeof *c);
  slot* sl = dv_zalloc_lines(sizeof *sl * rt->nslots);
  if (!c || !sl) {
    free(c), free(sl);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_caching_resource_create: out of host memory");
  }
  devrt_status st = devrt_resource_init(&c->base, &caching_vtable, "caching", rt, upstream);
  if (st != DEVRT_OK) {
    free(c), free(sl);
    return st;
  }
  if (opts) c->o = *opts;
  if (!c->base.account)
    dv_account_init(&c->own), c->base.account = &c->own, c->own.granularity = 256;
  c->base.account->charge = class_charge; /* budgets above charge the class, not the request */
  c->slots = sl, c->nslots = rt->nslots;
  for (unsigned i = 0; i < rt->nslots; i++) sl[i].open = 1;
  dv_slot_user_add(&c->user, &c->base);
  *out = &c->base;
  return DEVRT_OK;
}

void dv_caching_forget_slot(devrt_resource* r, unsigned i) {
  if (!dv_caching_is(r)) return;
  slot* t = &((cache*)r)->slots[i];
  dv_spin_lock(&t->mu);
  poll_fences((cache*)r, t);
  t->done = t->open++; /* every block freed on the slot's stream so far is free to move */
  t->bs = NULL;        /* until a free on the slot's next stream */
  dv_spin_unlock(&t->mu);
}
