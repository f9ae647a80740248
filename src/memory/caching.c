/* caching.c: per-stream, size-classed free lists in front of an upstream resource. A freed block
 * is reused at once on its own stream; another stream takes it only after the free's point has
 * completed (tracked lazily by per-slot epochs closed with events) or, if allowed, by waiting on
 * it. A miss finds other streams' blocks of its class through a per-class index of slots. No
 * spin-lock section calls the driver, allocates or frees: fence work runs under a slot's mutex,
 * and the record table grows outside its lock. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "memory.h"
#include "account.h"

/* Upstream: called through its vtable. */
#define UP_ALLOCATE(self, ...) (self)->upstream->vtable->allocate((self)->upstream, __VA_ARGS__)
#define UP_DEALLOCATE(self, ...) (self)->upstream->vtable->deallocate((self)->upstream, __VA_ARGS__)

enum { MIN_SHIFT = 9, STEPS = 4, NCLS = 69, BIG = 0xff }; /* classes 512 B .. 64 MiB at most */
enum { STRIPE_BITS = 10, NSTRIPE = 1 << STRIPE_BITS };    /* record-table stripes */
enum { LIVE = 1, CACHED = 2 };

typedef struct rec {
  void* ptr;
  struct rec *hnext, *prev, *next; /* hash chain (its stripe's mu); free list (its slot's mu) */
  uint64_t cls, rsize, epoch;      /* class size (upstream's size), accounted bytes, free epoch */
  const char* tag;    /* the allocation's (written before `state` turns LIVE, with release) */
  _Atomic size_t req; /* the size the caller asked for */
  _Atomic unsigned char state;
  unsigned char cidx; /* class index, BIG: passed straight through */
} rec;

typedef struct fence {
  dv_event* ev;
  uint64_t epoch;
  struct fence* next;
} fence;

/* Per stream slot. mu, a spin lock, guards the lists and bs and is held only to move pointers;
 * fmu, a mutex taken before mu (never under it), guards the fences and every driver call on
 * them. A free pushes in the open epoch; closing it advances `open` under mu first, then records
 * the fence, so the fence follows every free of its epoch. */
typedef struct slot {
  _Alignas(DV_LINE) dv_spin mu;
  _Atomic uint64_t nonempty[2]; /* class bitmap of the lists; written under mu, read without it */
  dv_stream* bs;                /* mu: the slot's backend stream (set on each free; NULL: forgot) */
  uint64_t open;                /* mu, written with fmu held too: the epoch frees go into */
  _Atomic uint64_t done;        /* written under fmu: every epoch <= done has completed */
  _Atomic uint64_t hits;        /* a plain add under mu: blocks taken from this slot */
  _Atomic uint64_t misses;      /* atomic adds: misses of this slot's stream */
  pthread_mutex_t fmu;
  fence *fq, *fq_tail, *ffree;  /* fmu: recorded fences oldest first; spare ones (with events) */
  rec *head[NCLS], *tail[NCLS]; /* mu: free lists per class, newest at the head */
} slot;

typedef struct stripe {
  _Alignas(DV_LINE) dv_spin mu; /* guards b, nb, n and the chains */
  rec** b;
  size_t nb, n;
} stripe;

typedef struct cache {
  devrt_resource base;
  devrt_caching_options o;
  dv_mem_account own;    /* used only when upstream has no account */
  slot* slots;           /* o, slots and nslots: set at creation */
  unsigned nslots;       /* the runtime's slots: pool, its own, partitions' */
  _Atomic uint64_t held; /* cached bytes of this layer (for max_cached_bytes) */
  /* Per class, the slots that may hold blocks of it (a slot set: one word read when there are
   * none), so a miss visits only those. A slot joins when its list turns non-empty and leaves
   * once it is seen empty, both under the slot's mu, so a non-empty list is always in its set,
   * and the hot path (pop, push: empty, non-empty) writes nothing here. */
  dv_slotset ix[NCLS];
  stripe sh[NSTRIPE];
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
  DV_ASSERT(*cls >= n && (k - MIN_SHIFT) * STEPS + q < NCLS); /* n fits; 64 MiB at most */
  return (k - MIN_SHIFT) * STEPS + (unsigned)q;
}

/* What an allocation of `size` really holds beneath a budget: its class, as the pool rounds it. */
static uint64_t class_charge(const dv_mem_account* a, size_t size) {
  uint64_t cls = size;
  if (size <= a->class_max) class_of(size, &cls);
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

/* Whether a spin lock is taken (asserts only: where the caller must hold it). */
static __attribute__((unused)) bool held(dv_spin* l) {
  return atomic_load_explicit(l, memory_order_relaxed);
}

/* ---- pointer -> record hash ---- */

static inline uint64_t hash_of(const void* p) {
  return ((uint64_t)(uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull;
}
static inline stripe* stripe_of(cache* c, uint64_t h) { return &c->sh[h >> (64 - STRIPE_BITS)]; }
static inline rec** bucket(stripe* s, uint64_t h) { return &s->b[(h >> 24) & (s->nb - 1)]; }

static rec** hash_find(stripe* s, uint64_t h, const void* p) { /* s->mu held */
  DV_ASSERT(held(&s->mu) && s->nb);
  rec** at = bucket(s, h);
  while (*at && (*at)->ptr != p) at = &(*at)->hnext;
  return at;
}

static devrt_status hash_insert(cache* c, rec* b) {
  uint64_t h = hash_of(b->ptr);
  stripe* s = stripe_of(c, h);
  rec **nt = NULL, **ot = NULL;
  size_t nb = 0;
  dv_spin_lock(&s->mu);
  while (s->n >= s->nb) {   /* grow (misses only: upstream was just called anyway) */
    if (nt && nb > s->nb) { /* allocated outside the lock, and no one grew it meanwhile */
      ot = s->b;
      for (size_t i = 0; i < s->nb; i++)
        for (rec *x = ot[i], *nx; x; x = nx) {
          nx = x->hnext;
          rec** at = &nt[(hash_of(x->ptr) >> 24) & (nb - 1)];
          x->hnext = *at, *at = x;
        }
      s->b = nt, s->nb = nb, nt = NULL;
      break;
    }
    nb = s->nb ? s->nb * 2 : 64;
    dv_spin_unlock(&s->mu);
    free(nt);
    if (!(nt = dv_zalloc_lines(nb * sizeof *nt)))
      return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                     "caching allocate: out of host memory for the block table");
    dv_spin_lock(&s->mu);
  }
  rec** at = bucket(s, h);
  b->hnext = *at, *at = b;
  s->n++;
  DV_ASSERT(s->n <= s->nb); /* grown first: chains stay short */
  dv_spin_unlock(&s->mu);
  free(nt), free(ot);
  return DEVRT_OK;
}

static void hash_remove(cache* c, rec* b) {
  uint64_t h = hash_of(b->ptr);
  stripe* s = stripe_of(c, h);
  dv_spin_lock(&s->mu);
  rec** at = hash_find(s, h, b->ptr);
  DV_ASSERT(*at == b && s->n); /* a cached block stays in the table until it goes upstream */
  if (*at) *at = b->hnext, s->n--;
  dv_spin_unlock(&s->mu);
}

/* ---- the class index ---- */

/* Slot i's bit only changes under its mu, so reading it first spares the shared word's write. */
static void index_set(cache* c, unsigned ci, unsigned i) { /* slot i's mu held */
  DV_ASSERT(ci < NCLS && i < c->nslots && held(&c->slots[i].mu));
  if (!dv_slotset_has(&c->ix[ci], i)) dv_slotset_add(&c->ix[ci], i);
}

static void index_clear(cache* c, unsigned ci, unsigned i) { /* slot i's mu held, its list empty */
  DV_ASSERT(ci < NCLS && i < c->nslots && held(&c->slots[i].mu) && !c->slots[i].head[ci]);
  if (dv_slotset_has(&c->ix[ci], i)) dv_slotset_take(&c->ix[ci], i);
}

/* ---- free lists (slot mu held) ---- */

static inline void bit_set(slot* t, unsigned ci, bool on) {
  _Atomic uint64_t* w = &t->nonempty[ci >> 6];
  uint64_t v = atomic_load_explicit(w, memory_order_relaxed), m = 1ull << (ci & 63);
  atomic_store_explicit(w, on ? v | m : v & ~m, memory_order_relaxed);
}
static inline bool bit_get(slot* t, unsigned ci) {
  return atomic_load_explicit(&t->nonempty[ci >> 6], memory_order_relaxed) >> (ci & 63) & 1;
}
static inline void count(_Atomic uint64_t* x) { /* under the lock that guards x: no locked add */
  atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + 1, memory_order_relaxed);
}

static inline void push_head(cache* c, slot* t, rec* b) {
  unsigned ci = b->cidx;
  DV_ASSERT(held(&t->mu) && ci < NCLS &&
            atomic_load_explicit(&b->state, memory_order_relaxed) == CACHED);
  b->epoch = t->open, b->prev = NULL, b->next = t->head[ci];
  if (t->head[ci])
    t->head[ci]->prev = b;
  else
    t->tail[ci] = b, bit_set(t, ci, true), index_set(c, ci, (unsigned)(t - c->slots));
  t->head[ci] = b;
  /* a non-empty list has its bit and is in its class's set */
  DV_ASSERT(bit_get(t, ci) && dv_slotset_has(&c->ix[ci], (unsigned)(t - c->slots)));
}

static inline rec* pop_head(slot* t, unsigned ci) {
  rec* b = t->head[ci];
  DV_ASSERT(held(&t->mu) && b->cidx == ci && !b->prev);
  if ((t->head[ci] = b->next))
    b->next->prev = NULL;
  else
    t->tail[ci] = NULL, bit_set(t, ci, false);
  DV_ASSERT(!t->head[ci] == !t->tail[ci] && bit_get(t, ci) == !!t->head[ci]);
  return b;
}

static inline rec* pop_tail(slot* t, unsigned ci) {
  rec* b = t->tail[ci];
  DV_ASSERT(held(&t->mu) && b->cidx == ci && !b->next);
  if ((t->tail[ci] = b->prev))
    b->prev->next = NULL;
  else
    t->head[ci] = NULL, bit_set(t, ci, false);
  DV_ASSERT(!t->head[ci] == !t->tail[ci] && bit_get(t, ci) == !!t->head[ci]);
  return b;
}

/* ---- epochs and fences (slot fmu held) ---- */

/* Closes t's open epoch with a fence recorded on its stream: `open` advances under mu, then the
 * record follows every free of the epoch. *out stays NULL without a stream (forgotten: every
 * epoch so far is done). */
static devrt_status close_epoch(cache* c, slot* t, fence** out) {
  const dv_backend* be = c->base.rt->be;
  fence* f = t->ffree;
  *out = NULL;
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
  dv_spin_lock(&t->mu);
  dv_stream* bs = t->bs;
  f->epoch = bs ? t->open++ : 0;
  dv_spin_unlock(&t->mu);
  devrt_status st = bs ? be->event_record(f->ev, bs) : DEVRT_OK;
  if (st != DEVRT_OK || !bs) { /* an epoch closed without a fence: a later one covers it */
    f->next = t->ffree, t->ffree = f;
    return st;
  }
  DV_ASSERT(!t->fq_tail || t->fq_tail->epoch < f->epoch);
  f->next = NULL;
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
    DV_ASSERT(f->epoch < t->open); /* a fence closes its epoch (open is written under fmu too) */
    if (f->epoch > atomic_load_explicit(&t->done, memory_order_relaxed)) /* forget may be ahead */
      atomic_store_explicit(&t->done, f->epoch, memory_order_release);   /* pairs: take_from's */
    if (!(t->fq = f->next)) t->fq_tail = NULL;
    f->next = t->ffree, t->ffree = f;
  }
}

/* Lets stream bs take t's blocks of epoch e: true once e has completed or, with
 * cross_stream_wait, once bs waits for a fence past it; *upto: the epoch up to which bs may take.
 */
static bool settle(cache* c, slot* t, uint64_t e, dv_stream* bs, uint64_t* upto) {
  poll_fences(c, t);
  fence* f = t->fq;
  while (f && f->epoch < e) f = f->next;
  if (!f && e > atomic_load_explicit(&t->done, memory_order_relaxed) &&
      close_epoch(c, t, &f) == DEVRT_OK)
    poll_fences(c, t);
  if (e <= (*upto = atomic_load_explicit(&t->done, memory_order_relaxed))) return true;
  DV_ASSERT(!f || f->epoch >= e); /* still queued, past e */
  if (!c->o.cross_stream_wait || !f || c->base.rt->be->stream_wait(bs, f->ev) != DEVRT_OK)
    return false;
  *upto = f->epoch; /* f is still queued: it has not completed */
  return true;
}

/* ---- taking another stream's block on a miss ---- */

/* Another stream took one of t's blocks: keep a fence in flight on t (close the open epoch unless
 * one is pending), so that by the time the blocks known complete run out, the frees made since
 * are known complete too. Closing only then, on a miss, leaves every take until that fence
 * completes to allocate anew: a slot only other streams take from (the runtime's own stream,
 * where deferred frees run) then grows its cache with each round, without bound. */
static void fence_ahead(cache* c, slot* t) {
  if (pthread_mutex_trylock(&t->fmu)) return; /* another thread is at the fences */
  fence* f = NULL;
  poll_fences(c, t);
  if (!t->fq) (void)close_epoch(c, t, &f); /* a failure leaves it to the next miss */
  pthread_mutex_unlock(&t->fmu);
}

/* Slot i's oldest block of class ci, if stream bs may take it: the epoch test under mu, and only
 * when the free is not yet known complete, the fence work under fmu alone, then the test again. */
static rec* take_from(cache* c, unsigned i, unsigned ci, dv_stream* bs) {
  slot* t = &c->slots[i];
  /* acquire: pairs with the release stores of done (poll_fences, caching_stream_retired) */
  uint64_t upto = atomic_load_explicit(&t->done, memory_order_acquire);
  for (bool settled = false;; settled = true) {
    rec* b = NULL;
    uint64_t e = 0;
    dv_spin_lock(&t->mu);
    if (!t->tail[ci])
      index_clear(c, ci, i); /* a stale bit */
    else if ((e = t->tail[ci]->epoch) <= upto)
      b = pop_tail(t, ci), count(&t->hits);
    dv_spin_unlock(&t->mu);
    if (b) fence_ahead(c, t);
    if (b || !e || settled) return b;
    pthread_mutex_lock(&t->fmu);
    bool ok = settle(c, t, e, bs, &upto);
    pthread_mutex_unlock(&t->fmu);
    if (!ok) return NULL;
  }
}

/* A miss on slot si: through the class index, so it costs O(slots that hold some). */
static rec* take_other(cache* c, unsigned si, unsigned ci, dv_stream* bs) {
  DV_SLOTSET_FOR(i, &c->ix[ci]) {
    rec* b = i == si ? NULL : take_from(c, i, ci, bs);
    if (b) return b;
  }
  return NULL;
}

/* ---- the vtable ---- */

DV_HOT static devrt_status caching_allocate(devrt_resource* self, size_t size, devrt_stream stream,
                                            const char* tag, void** out) {
  cache* c = (cache*)self;
  dv_stream* bs = NULL;
  DV_CHECK(dv_stream_get(self->rt, stream, &bs, "caching allocate"));
  uint64_t cls = size;
  unsigned ci = size > c->o.max_class_bytes ? BIG : class_of(size, &cls);
  unsigned si = DV_SID_SLOT(stream);
  slot* s = &c->slots[si];
  rec* b = NULL;
  if (ci != BIG) {
    if (bit_get(s, ci)) { /* hot path: this stream's own list, ordered */
      dv_spin_lock(&s->mu);
      if (s->head[ci]) b = pop_head(s, ci), count(&s->hits);
      dv_spin_unlock(&s->mu);
    }
    if (!b) b = take_other(c, si, ci, bs);
    if (b) {
      /* a cached block of this class, big enough */
      DV_ASSERT(b->cidx == ci && b->cls >= size &&
                atomic_load_explicit(&b->state, memory_order_relaxed) == CACHED);
      b->tag = tag;
      atomic_store_explicit(&b->req, size, memory_order_relaxed);
      /* release: pairs with the acquire in caching_deallocate_tagged (tag and req come first) */
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
    b->ptr = p, b->cls = cls, b->rsize = rsize, b->cidx = (unsigned char)ci, b->tag = tag;
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

DV_HOT static devrt_status caching_deallocate_tagged(devrt_resource* self, void* ptr, size_t size,
                                                     devrt_stream stream, const char** tag) {
  cache* c = (cache*)self;
  dv_stream* bs = NULL;
  DV_CHECK(dv_stream_get(self->rt, stream, &bs, "caching deallocate"));
  uint64_t h = hash_of(ptr);
  stripe* sh = stripe_of(c, h);
  dv_spin_lock(&sh->mu);
  rec** at = sh->b ? hash_find(sh, h, ptr) : NULL;
  rec* b = at ? *at : NULL;
  devrt_status st = DEVRT_OK;
  /* acquire: pairs with caching_allocate's release (the allocation's tag and size) */
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
  const char* freed = b->tag;
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

  if (keep) {
    slot* s = &c->slots[DV_SID_SLOT(stream)];
    dv_account_add(self->account, DV_CACHED, b->rsize); /* before it is visible */
    dv_spin_lock(&s->mu);
    s->bs = bs, push_head(c, s, b);
    dv_spin_unlock(&s->mu);
    *tag = freed;
    return DEVRT_OK;
  }
  st = UP_DEALLOCATE(self, ptr, (size_t)b->cls, stream);
  if (st != DEVRT_OK) { /* upstream kept it: still live here */
    atomic_store_explicit(&b->state, LIVE, memory_order_relaxed);
    if (hash_insert(c, b) != DEVRT_OK) free(b);
    return st;
  }
  own_release(c, b->rsize);
  free(b);
  *tag = freed;
  return DEVRT_OK;
}

/* Gives every cached block back to upstream on the runtime's own stream, ordered after each
 * block's free on its stream (that stream's lease may have ended long ago). Visits the slots the
 * index names. */
static devrt_status release_all(cache* c, uint64_t* bytes) {
  devrt_resource* self = &c->base;
  devrt_runtime* rt = self->rt;
  *bytes = 0;
  dv_slotset u = {0}; /* the slots any class's set names */
  for (unsigned ci = 0; ci < NCLS; ci++) DV_SLOTSET_FOR(i, &c->ix[ci]) dv_slotset_add(&u, i);
  if (!atomic_load_explicit(&u.top, memory_order_relaxed)) return DEVRT_OK;
  devrt_stream tid = 0;
  dv_stream* tbs = NULL;
  DV_CHECK(dv_internal_stream(rt, &tid));
  devrt_status first = dv_stream_get(rt, tid, &tbs, "caching trim");
  DV_SLOTSET_FOR(i, &u) {
    if (first != DEVRT_OK) break;
    slot* t = &c->slots[i];
    rec* chain = NULL;
    uint64_t newest = 0;
    pthread_mutex_lock(&t->fmu);
    dv_spin_lock(&t->mu);
    for (unsigned ci = 0; ci < NCLS; ci++) {
      while (t->head[ci]) {
        rec* b = pop_head(t, ci);
        newest = b->epoch > newest ? b->epoch : newest;
        b->next = chain, chain = b;
      }
      index_clear(c, ci, i);
    }
    dv_spin_unlock(&t->mu);
    fence* f = NULL;
    devrt_status st = DEVRT_OK;
    if (i != DV_SID_SLOT(tid) && newest > atomic_load_explicit(&t->done, memory_order_relaxed) &&
        (st = close_epoch(c, t, &f)) == DEVRT_OK && f)
      st = rt->be->stream_wait(tbs, f->ev);
    pthread_mutex_unlock(&t->fmu);
    if (st != DEVRT_OK) { /* cannot order the frees: keep them cached */
      dv_spin_lock(&t->mu);
      for (rec* b; (b = chain);) chain = b->next, push_head(c, t, b);
      dv_spin_unlock(&t->mu);
      first = st;
    }
    while (chain) {
      rec* b = chain;
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
      push_head(c, t, b);
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
    pthread_mutex_destroy(&t->fmu);
  }
  for (unsigned i = 0; i < NSTRIPE; i++) {
    stripe* s = &c->sh[i];
    for (size_t k = 0; k < s->nb; k++)
      for (rec *b = s->b[k], *nx; b; b = nx) nx = b->hnext, free(b);
    free(s->b);
  }
  free(c->slots);
  free(c);
}

static DV_HOT devrt_status caching_deallocate(devrt_resource* self, void* ptr, size_t size,
                                              devrt_stream stream) {
  const char* tag;
  return caching_deallocate_tagged(self, ptr, size, stream, &tag);
}

static void caching_stream_retired(devrt_resource* r, devrt_stream stream);

static const devrt_resource_vtable caching_vtable = {
    .allocate = caching_allocate,
    .deallocate = caching_deallocate,
    .query = caching_query,
    .reap = caching_reap,
    .trim = caching_trim,
    .destroy = caching_destroy,
    .deallocate_tagged = caching_deallocate_tagged,
    .stream_retired = caching_stream_retired,
};

devrt_status devrt_caching_resource_create(devrt_resource* upstream,
                                           const devrt_caching_options* opts,
                                           devrt_resource** out) {
  DV_ARG_CHECK(out, "devrt_caching_resource_create", "out is NULL");
  *out = NULL;
  DV_RES_CHECK(upstream, "devrt_caching_resource_create");
  DV_RT_CHECK(upstream->rt, "devrt_caching_resource_create");
  DV_ARG_CHECK(!opts || opts->max_class_bytes <= DEVRT_CACHING_MAX_CLASS,
               "devrt_caching_resource_create",
               "max_class_bytes %" PRIu64 " is above the largest class (%" PRIu64 " bytes)",
               opts ? opts->max_class_bytes : 0, DEVRT_CACHING_MAX_CLASS);
  devrt_runtime* rt = upstream->rt;
  cache* c = dv_zalloc_lines(sizeof *c);
  slot* sl = dv_zalloc_lines(sizeof *sl * rt->nslots);
  if (!c || !sl) {
    free(c), free(sl);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_caching_resource_create: out of host memory");
  }
  c->slots = sl, c->nslots = rt->nslots; /* before init: stream_retired may come from then on */
  for (unsigned i = 0; i < rt->nslots; i++) sl[i].open = 1, pthread_mutex_init(&sl[i].fmu, NULL);
  devrt_status st = devrt_resource_init(&c->base, &caching_vtable, "caching", rt, upstream);
  if (st != DEVRT_OK) {
    for (unsigned i = 0; i < rt->nslots; i++) pthread_mutex_destroy(&sl[i].fmu);
    free(c), free(sl);
    return st;
  }
  if (opts) c->o = *opts;
  if (!c->o.max_class_bytes) c->o.max_class_bytes = DEVRT_CACHING_MAX_CLASS;
  if (!c->base.account)
    dv_account_init(&c->own), c->base.account = &c->own, c->own.granularity = 256;
  c->base.account->class_max = c->o.max_class_bytes;
  c->base.account->charge = class_charge; /* budgets above charge the class, not the request */
  *out = &c->base;
  return DEVRT_OK;
}

/* The slot's stream was synchronized: every free on it is complete. */
static void caching_stream_retired(devrt_resource* r, devrt_stream stream) {
  slot* t = &((cache*)r)->slots[DV_SID_SLOT(stream)];
  pthread_mutex_lock(&t->fmu); /* no record on the old stream is in flight past this */
  dv_spin_lock(&t->mu);
  /* all frees so far: done (release: pairs with take_from's acquire) */
  atomic_store_explicit(&t->done, t->open++, memory_order_release);
  t->bs = NULL; /* until a free on the slot's next stream */
  DV_ASSERT(atomic_load_explicit(&t->done, memory_order_relaxed) < t->open);
  dv_spin_unlock(&t->mu);
  pthread_mutex_unlock(&t->fmu);
}
