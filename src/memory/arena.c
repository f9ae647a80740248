/* arena.c: the leaf on address ranges grown page by page (the backend's va_* calls). Each stream
 * slot has two heaps, one for blocks of at most 1 MiB and one for larger ones, each a range of a
 * device's worth of addresses reserved on its first allocation. A block is split from the best
 * fitting free one, merged with its free neighbours when freed, and a heap maps pages at its end
 * when nothing free fits; trim gives the free pages at the end back once the stream has passed it.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include "memory.h"
#include "account.h"

enum { UNIT = 512, SMALL = 1 << 20, NCLS = 220, NWORDS = (NCLS + 63) / 64, SCAN = 64 };
enum { FREE, LIVE, PENDING };

/* A block of a heap: free (in its class's list), live (in the hash) or pending (in the hash and
 * the heap's pending list: freed on another stream, its event not yet seen complete). Every field
 * is guarded by its heap's mu. */
typedef struct blk {
  uint64_t off, size;        /* [off, off + size) of the heap's range; size a multiple of UNIT */
  struct blk *prev, *next;   /* address neighbours, NULL at either end */
  struct blk *fprev, *fnext; /* FREE: its class's list; PENDING: fnext links the pending list */
  struct blk* hnext;         /* LIVE, PENDING: the hash chain */
  size_t req;                /* LIVE, PENDING: the size asked for (a free must name it) */
  const char* tag;           /* LIVE, PENDING: the allocation's tag */
  dv_event* ev;              /* PENDING: recorded on the freeing stream after the free */
  unsigned char state;
} blk;

/* mu is a mutex held across the backend's page and event calls and host allocations (records,
 * the hash's buckets): the heap belongs to one stream, whose allocations and frees it orders. */
typedef struct heap {
  _Alignas(DV_LINE) pthread_mutex_t mu;
  char* base;      /* the range (written once under mu before the heap is published) */
  dv_stream* bs;   /* mu: the slot's stream, set by each call on it (NULL: retired) */
  uint64_t end;    /* mu: the blocks tile [0, end) */
  uint64_t mapped; /* mu: [0, mapped) has memory behind it; [end, mapped) was trimmed and
                      waits for uev before it is unmapped (pending in the account) */
  dv_event* uev;   /* mu: recorded on bs by trim (made on the first trim) */
  bool urec;       /* mu: [end, mapped) waits for uev (false: the stream had nothing queued) */
  blk* last;       /* mu: the block that ends at end (NULL: none) */
  uint64_t bits[NWORDS]; /* mu: bit i: head[i] is not empty */
  blk* head[NCLS];       /* mu: free blocks by class */
  blk** tab;             /* mu: live and pending blocks by offset, chained */
  size_t nb, n;          /* mu: buckets (a power of two), blocks in them */
  blk* pend;             /* mu: pending blocks, newest first */
  blk* spare;            /* mu: records of merged blocks, for the next split (chained by next) */
} heap;

typedef struct arena {
  devrt_resource base;
  dv_mem_account* acc;
  uint64_t page, span; /* the backend's page; a range's bytes (the device's memory, in pages) */
  unsigned nheaps;     /* two a slot: heaps[2 * slot + (size > SMALL)] */
  heap* heaps;
  pthread_mutex_t rmu;      /* the reservation of ranges (publishing them in `ranges`) */
  _Atomic unsigned nranges; /* heaps with a range: ranges[0, nranges), a release by rmu */
  _Atomic(heap*)* ranges;   /* in the order they were reserved; never removed */
} arena;

#define BE(a) ((a)->base.rt->be)
#define DEV(a) ((a)->base.rt->dev)

/* ---- free lists: classes in quarter steps of powers of two, by a block's size ---- */

static unsigned cls_of(uint64_t s) {
  DV_ASSERT(s >= UNIT && !(s % UNIT));
  unsigned k = 63u - (unsigned)__builtin_clzll(s); /* 2^k <= s < 2^(k+1) */
  unsigned i = (k - 9) * 4 + (unsigned)((s >> (k - 2)) & 3);
  DV_ASSERT(i < NCLS);
  return i;
}

static void list_push(heap* h, blk* b) {
  unsigned i = cls_of(b->size);
  b->state = FREE;
  b->fprev = NULL;
  b->fnext = h->head[i];
  if (b->fnext) b->fnext->fprev = b;
  h->head[i] = b;
  h->bits[i / 64] |= 1ull << (i % 64);
}

static void list_unlink(heap* h, blk* b) {
  DV_ASSERT(b->state == FREE);
  unsigned i = cls_of(b->size);
  if (b->fprev)
    b->fprev->fnext = b->fnext;
  else
    h->head[i] = b->fnext;
  if (b->fnext) b->fnext->fprev = b->fprev;
  if (!h->head[i]) h->bits[i / 64] &= ~(1ull << (i % 64));
}

/* The smallest of up to SCAN blocks of list i that holds n (lowest address on a tie). */
static blk* best_in(blk* b, uint64_t n) {
  blk* best = NULL;
  for (unsigned k = 0; b && k < SCAN; b = b->fnext, k++)
    if (b->size >= n &&
        (!best || b->size < best->size || (b->size == best->size && b->off < best->off)))
      best = b;
  return best;
}

/* A free block that holds n: the best of n's own class, else of the next class that has one
 * (every block there holds n). NULL: the heap must grow. */
static blk* find(heap* h, uint64_t n) {
  unsigned i = cls_of(n);
  blk* b = best_in(h->head[i], n);
  for (unsigned w = (i + 1) / 64; !b && w < NWORDS; w++) {
    uint64_t m = h->bits[w] & (w == (i + 1) / 64 ? ~0ull << ((i + 1) % 64) : ~0ull);
    if (m) b = best_in(h->head[w * 64 + (unsigned)__builtin_ctzll(m)], n);
  }
  DV_ASSERT(!b || (b->state == FREE && b->size >= n));
  return b;
}

/* ---- the hash of live and pending blocks, by offset ---- */

static blk** slot_of(heap* h, uint64_t off) {
  uint64_t x = (off / UNIT) * 0x9E3779B97F4A7C15ull;
  return &h->tab[(x >> 32) & (h->nb - 1)];
}

static blk** hash_find(heap* h, uint64_t off) {
  if (!h->nb) return NULL;
  blk** at = slot_of(h, off);
  while (*at && (*at)->off != off) at = &(*at)->hnext;
  return *at ? at : NULL;
}

/* Makes room for one more block (a host allocation under mu); false: out of host memory. */
static bool hash_reserve(heap* h) {
  if (h->n < h->nb) return true;
  size_t nb = h->nb ? h->nb * 2 : 64;
  blk** ot = h->tab;
  size_t onb = h->nb;
  if (!(h->tab = calloc(nb, sizeof *h->tab))) {
    h->tab = ot;
    return false;
  }
  h->nb = nb;
  for (size_t i = 0; i < onb; i++)
    for (blk *b = ot[i], *nx; b; b = nx) {
      nx = b->hnext;
      blk** at = slot_of(h, b->off);
      b->hnext = *at, *at = b;
    }
  free(ot);
  return true;
}

/* ---- blocks ---- */

/* A record for a new block: a spare one, else a host allocation (under mu: see heap). */
static blk* blk_new(heap* h) {
  blk* b = h->spare;
  if (!b) return malloc(sizeof *b);
  h->spare = b->next;
  return b;
}
static void blk_drop(heap* h, blk* b) {
  b->next = h->spare;
  h->spare = b;
}

/* Gives free block b back to the heap's lists, merged with its free neighbours. */
static void release_blk(heap* h, blk* b) {
  blk* p = b->prev;
  blk* x = b->next;
  if (p && p->state == FREE) { /* b joins p */
    list_unlink(h, p);
    p->size += b->size;
    p->next = x;
    if (x) x->prev = p;
    if (h->last == b) h->last = p;
    blk_drop(h, b);
    b = p;
  }
  if (x && x->state == FREE) { /* x joins b */
    list_unlink(h, x);
    b->size += x->size;
    b->next = x->next;
    if (x->next) x->next->prev = b;
    if (h->last == x) h->last = b;
    blk_drop(h, x);
  }
  list_push(h, b);
}

/* Gives the heap's end pages (trimmed ones still mapped first, then new ones) so that a free block
 * there holds n; the block, or NULL. */
static DV_NOINLINE blk* grow(arena* a, heap* h, uint64_t n, size_t size, const char* tag,
                             devrt_status* st) {
  blk* tail = h->last && h->last->state == FREE ? h->last : NULL;
  if (tail && tail->size >= n) return tail; /* find's bounded look passed over it */
  uint64_t g = dv_round_to(n - (tail ? tail->size : 0), a->page);
  uint64_t back = h->mapped - h->end < g ? h->mapped - h->end : g; /* trimmed, still mapped */
  g -= back;
  blk* nb = tail ? NULL : blk_new(h);
  if (!tail && !nb) {
    *st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "arena allocate: out of host memory");
    return NULL;
  }
  if (!g) {
    *st = DEVRT_OK;
  } else if (g > a->span - h->mapped) {
    *st = dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED,
                  "arena allocate: %zu bytes do not fit the stream's range of %" PRIu64
                  " bytes (%" PRIu64 " mapped)",
                  size, a->span, h->mapped);
  } else if (!dv_account_admit(a->acc, g)) {
    *st = dv_account_refuse(a->acc, "arena allocate", size, g, tag);
  } else if ((*st = BE(a)->va_map(DEV(a), h->base + h->mapped, g)) != DEVRT_OK) {
    dv_account_release(a->acc, g);
  }
  if (*st != DEVRT_OK) {
    if (nb) blk_drop(h, nb);
    return NULL;
  }
  /* The trimmed pages come back first (the stream's own: reusable in its order), then new ones. */
  DV_ASSERT(!g || h->end + back == h->mapped);
  dv_account_sub(a->acc, DV_PENDING, back);
  dv_account_add(a->acc, DV_CACHED, back + g);
  if (tail) {
    list_unlink(h, tail);
    tail->size += back + g;
  } else {
    *nb = (blk){.off = h->end, .size = back + g, .prev = h->last};
    if (h->last) h->last->next = nb;
    h->last = tail = nb;
  }
  h->end += back + g;
  h->mapped += g;
  if (h->end == h->mapped) h->urec = false; /* nothing trimmed is left to wait for */
  list_push(h, tail);
  DV_ASSERT(h->last->off + h->last->size == h->end);
  return tail;
}

/* Makes free block b a live one of n bytes: the rest, if any, stays free after it. */
static devrt_status take(heap* h, blk* b, uint64_t n) {
  blk* r = b->size > n ? blk_new(h) : NULL;
  if ((b->size > n && !r) || !hash_reserve(h)) {
    if (r) blk_drop(h, r);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "arena allocate: out of host memory");
  }
  list_unlink(h, b);
  if (r) {
    *r = (blk){.off = b->off + n, .size = b->size - n, .prev = b, .next = b->next};
    if (b->next) b->next->prev = r;
    b->next = r;
    if (h->last == b) h->last = r;
    b->size = n;
    list_push(h, r);
  }
  b->state = LIVE;
  blk** at = slot_of(h, b->off);
  b->hnext = *at, *at = b;
  h->n++;
  return DEVRT_OK;
}

/* Pending blocks whose event completed (all of them with `wait`) go back to the lists. */
static devrt_status settle(arena* a, heap* h, bool wait, uint64_t* settled) {
  devrt_status st = DEVRT_OK;
  for (blk **at = &h->pend, *b; (b = *at) != NULL;) {
    bool done = false;
    DV_ASSERT(b->state == PENDING);
    if (wait)
      st = BE(a)->event_sync(b->ev), done = st == DEVRT_OK;
    else
      st = BE(a)->event_query(b->ev, &done);
    if (st != DEVRT_OK) return st;
    if (!done) {
      at = &b->fnext;
      continue;
    }
    *at = b->fnext;
    blk** hat = hash_find(h, b->off);
    DV_ASSERT(hat && *hat == b);
    *hat = b->hnext, h->n--;
    BE(a)->event_destroy(DEV(a), b->ev);
    b->ev = NULL;
    dv_account_sub(a->acc, DV_PENDING, b->size);
    dv_account_add(a->acc, DV_CACHED, b->size);
    *settled += b->size;
    release_blk(h, b);
  }
  return st;
}

/* The heap's invariants (asserts only: a walk of every block): the blocks tile [0, end) in
 * address order, no two free ones are neighbours, each free one is in its class's list, and the
 * hash holds exactly the others. */
static __attribute__((unused)) bool heap_ok(const heap* h) {
  uint64_t end = 0, nfree = 0, nused = 0, listed = 0;
  const blk* first = h->last;
  while (first && first->prev) first = first->prev;
  for (const blk* b = first; b; end = b->off + b->size, b = b->next) {
    if (b->off != end || !b->size || b->size % UNIT || (b->next && b->next->prev != b))
      return false;
    if (b->state == FREE && b->next && b->next->state == FREE) return false;
    if (b->state == FREE)
      nfree++;
    else
      nused++;
    if (!b->next && b != h->last) return false;
  }
  for (unsigned i = 0; i < NCLS; i++) {
    if (!h->head[i] != !(h->bits[i / 64] >> (i % 64) & 1)) return false;
    for (const blk* b = h->head[i]; b; b = b->fnext, listed++)
      if (b->state != FREE || cls_of(b->size) != i) return false;
  }
  return end == h->end && end <= h->mapped && nfree == listed && nused == h->n;
}

/* ---- heaps and their ranges ---- */

/* The heap's range, reserved on its first allocation (called with h->mu held). */
static DV_NOINLINE devrt_status reserve(arena* a, heap* h) {
  void* p = NULL;
  DV_CHECK(BE(a)->va_reserve(DEV(a), a->span, &p));
  h->base = p;
  pthread_mutex_lock(&a->rmu);
  unsigned i = atomic_load_explicit(&a->nranges, memory_order_relaxed);
  DV_ASSERT(i < a->nheaps);
  atomic_store_explicit(&a->ranges[i], h, memory_order_relaxed);
  /* release: pairs with heap_at's acquire (it then reads ranges[i] and its base) */
  atomic_store_explicit(&a->nranges, i + 1, memory_order_release);
  pthread_mutex_unlock(&a->rmu);
  return DEVRT_OK;
}

/* The heap whose range holds p; NULL if none does. */
static heap* heap_at(arena* a, const void* p) {
  unsigned n = atomic_load_explicit(&a->nranges, memory_order_acquire); /* pairs: reserve */
  for (unsigned i = 0; i < n; i++) {
    heap* h = atomic_load_explicit(&a->ranges[i], memory_order_relaxed);
    if ((const char*)p >= h->base && (uint64_t)((const char*)p - h->base) < a->span) return h;
  }
  return NULL;
}

/* Unmaps the trimmed pages [end, mapped) once the stream has passed the trim (with `wait`, after
 * waiting for it), page by page from the top, so that a failure leaves [0, mapped) exactly what
 * is mapped; the bytes given back are added to *gone. */
static devrt_status unmap_trimmed(arena* a, heap* h, bool wait, uint64_t* gone) {
  if (h->mapped == h->end) return DEVRT_OK;
  if (h->urec) {
    bool done = wait;
    DV_CHECK(wait ? BE(a)->event_sync(h->uev) : BE(a)->event_query(h->uev, &done));
    if (!done) return DEVRT_OK;
    h->urec = false;
  }
  devrt_status st = DEVRT_OK;
  uint64_t n = 0;
  for (; h->mapped - n > h->end; n += a->page)
    if ((st = BE(a)->va_unmap(DEV(a), h->base + h->mapped - n - a->page, a->page)) != DEVRT_OK)
      break;
  h->mapped -= n;
  dv_account_sub(a->acc, DV_PENDING, n);
  dv_account_release(a->acc, n);
  *gone += n;
  return st;
}

/* Takes the free pages at the heap's end out of its last block (their bytes added to *trimmed):
 * pending until the stream has passed this point, because a block freed on the stream is free at
 * once for the stream's later work while work queued before the free may still use it, and
 * unmapping is not stream-ordered. An event recorded now says when; unmap_trimmed (a reap, or
 * this trim if it has passed already) gives them back. A stream with nothing queued (retired)
 * needs no event. */
static devrt_status trim_heap(arena* a, heap* h, uint64_t* trimmed) {
  blk* t = h->last;
  uint64_t keep = t && t->state == FREE ? dv_round_to(t->off, a->page) : h->end, n = 0;
  if (keep < h->end) {
    if (h->bs && !h->uev) DV_CHECK(BE(a)->event_create(DEV(a), 0, &h->uev));
    if (h->bs) DV_CHECK(BE(a)->event_record(h->uev, h->bs));
    h->urec = h->bs != NULL || h->urec;
    list_unlink(h, t);
    t->size -= h->end - keep;
    if (t->size) {
      list_push(h, t);
    } else {
      h->last = t->prev;
      if (t->prev) t->prev->next = NULL;
      blk_drop(h, t);
    }
    dv_account_sub(a->acc, DV_CACHED, h->end - keep);
    dv_account_add(a->acc, DV_PENDING, h->end - keep);
    *trimmed += h->end - keep;
    h->end = keep;
  }
  return unmap_trimmed(a, h, false, &n);
}

/* ---- the resource ---- */

static devrt_status arena_allocate(devrt_resource* self, size_t size, devrt_stream stream,
                                   const char* tag, void** out) {
  arena* a = (arena*)self;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(self->rt, stream, &s, "arena allocate"));
  uint64_t n = dv_round_to(size, UNIT), settled = 0;
  if (DV_UNLIKELY(n > a->span)) /* past the budget: refused as the other leaves refuse it */
    return n > atomic_load_explicit(&a->acc->limit, memory_order_relaxed)
               ? dv_account_refuse(a->acc, "arena allocate", size, n, tag)
               : dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED,
                         "arena allocate: %zu bytes do not fit a stream's range of %" PRIu64
                         " bytes",
                         size, a->span);
  heap* h = &a->heaps[2 * DV_SID_SLOT(stream) + (size > SMALL)];
  pthread_mutex_lock(&h->mu);
  h->bs = s;
  devrt_status st = h->base ? DEVRT_OK : reserve(a, h);
  if (st == DEVRT_OK && h->pend) st = settle(a, h, false, &settled);
  blk* b = st == DEVRT_OK ? find(h, n) : NULL;
  if (st == DEVRT_OK && !b) b = grow(a, h, n, size, tag, &st);
  if (b && (st = take(h, b, n)) == DEVRT_OK) {
    b->req = size;
    b->tag = tag;
    dv_account_sub(a->acc, DV_CACHED, n);
    *out = h->base + b->off;
  }
  DV_ASSERT(heap_ok(h));
  pthread_mutex_unlock(&h->mu);
  return st;
}

static devrt_status arena_deallocate_tagged(devrt_resource* self, void* p, size_t size,
                                            devrt_stream stream, const char** tag) {
  arena* a = (arena*)self;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(self->rt, stream, &s, "arena deallocate"));
  heap* h = heap_at(a, p);
  if (!h)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "arena deallocate: %p is not a live allocation of this resource (foreign "
                   "pointer or double free)",
                   p);
  bool own = h == &a->heaps[2 * DV_SID_SLOT(stream) + (h - a->heaps) % 2];
  dv_event* ev = NULL;
  if (!own) DV_CHECK(BE(a)->event_create(DEV(a), 0, &ev));
  devrt_status st = DEVRT_OK;
  pthread_mutex_lock(&h->mu);
  blk** at = hash_find(h, (uint64_t)((char*)p - h->base));
  blk* b = at ? *at : NULL;
  if (!b || b->state != LIVE)
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "arena deallocate: %p is not a live allocation of this resource (foreign "
                 "pointer or double free)",
                 p);
  else if (b->req != size)
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "arena deallocate: size %zu does not match the %zu bytes %p was allocated with",
                 size, b->req, p);
  else if (!own && (st = BE(a)->event_record(ev, s)) == DEVRT_OK) {
    b->state = PENDING; /* stays in the hash: a second free of p is refused */
    b->ev = ev, ev = NULL;
    b->fnext = h->pend, h->pend = b;
    dv_account_add(a->acc, DV_PENDING, b->size);
  }
  if (st == DEVRT_OK) {
    *tag = b->tag;
    if (own) {
      h->bs = s;
      *at = b->hnext, h->n--;
      dv_account_add(a->acc, DV_CACHED, b->size);
      release_blk(h, b);
    }
  }
  DV_ASSERT(heap_ok(h));
  pthread_mutex_unlock(&h->mu);
  if (ev) BE(a)->event_destroy(DEV(a), ev);
  return st;
}

static devrt_status arena_deallocate(devrt_resource* self, void* p, size_t size,
                                     devrt_stream stream) {
  const char* tag;
  return arena_deallocate_tagged(self, p, size, stream, &tag);
}

/* Visits every heap with a range: fn under its mu; the first failure is returned. */
static devrt_status each_heap(arena* a, devrt_status (*fn)(arena*, heap*, unsigned, uint64_t*),
                              unsigned flags, uint64_t* sum) {
  devrt_status st = DEVRT_OK;
  unsigned n = atomic_load_explicit(&a->nranges, memory_order_acquire); /* pairs: reserve */
  for (unsigned i = 0; i < n; i++) {
    heap* h = atomic_load_explicit(&a->ranges[i], memory_order_relaxed);
    pthread_mutex_lock(&h->mu);
    DV_ALSO(st, fn(a, h, flags, sum));
    pthread_mutex_unlock(&h->mu);
  }
  return st;
}

static devrt_status reap_one(arena* a, heap* h, unsigned flags, uint64_t* sum) {
  uint64_t n = 0;
  devrt_status st = settle(a, h, flags & DEVRT_REAP_WAIT, &n);
  DV_ALSO(st, unmap_trimmed(a, h, flags & DEVRT_REAP_WAIT, &n));
  atomic_fetch_add_explicit(&a->acc->reaped, n, memory_order_relaxed);
  *sum += n;
  return st;
}

static devrt_status arena_reap(devrt_resource* self, unsigned flags, uint64_t* reaped) {
  *reaped = 0;
  return each_heap((arena*)self, reap_one, flags, reaped);
}

static devrt_status trim_one(arena* a, heap* h, unsigned flags, uint64_t* sum) {
  (void)flags;
  return trim_heap(a, h, sum);
}

static devrt_status arena_trim(devrt_resource* self, uint64_t* released) {
  *released = 0;
  return each_heap((arena*)self, trim_one, 0, released);
}

static devrt_status arena_query(devrt_resource* self, devrt_resource_figures* out) {
  dv_account_query(self->account, out);
  return DEVRT_OK;
}

/* The slot's stream was synchronized and goes away: its heaps give their free end back. */
static void arena_stream_retired(devrt_resource* self, devrt_stream stream) {
  arena* a = (arena*)self;
  for (unsigned k = 0; k < 2; k++) {
    heap* h = &a->heaps[2 * DV_SID_SLOT(stream) + k];
    uint64_t n = 0;
    pthread_mutex_lock(&h->mu);
    h->bs = NULL; /* synchronized, and going away */
    DV_KEEP_ERROR(settle(a, h, true, &n));
    DV_KEEP_ERROR(trim_heap(a, h, &n));
    DV_KEEP_ERROR(unmap_trimmed(a, h, true, &n));
    pthread_mutex_unlock(&h->mu);
  }
}

static void arena_free(arena* a) {
  for (unsigned i = 0; a->heaps && i < a->nheaps; i++) {
    heap* h = &a->heaps[i];
    for (blk* b = h->pend; b; b = b->fnext) {
      DV_KEEP_ERROR(BE(a)->event_sync(b->ev));
      BE(a)->event_destroy(DEV(a), b->ev);
    }
    /* the resource goes: what its memory was used for must be done (as a trim's unmap) */
    if (h->mapped && h->bs) DV_KEEP_ERROR(BE(a)->stream_sync(h->bs));
    if (h->uev) BE(a)->event_destroy(DEV(a), h->uev);
    for (blk *b = h->last, *p; b; b = p) p = b->prev, free(b);
    for (blk *b = h->spare, *n; b; b = n) n = b->next, free(b);
    if (h->mapped) DV_KEEP_ERROR(BE(a)->va_unmap(DEV(a), h->base, h->mapped));
    if (h->base) BE(a)->va_release(DEV(a), h->base, a->span);
    free(h->tab);
    pthread_mutex_destroy(&h->mu);
  }
  pthread_mutex_destroy(&a->rmu);
  free(a->heaps);
  free((void*)a->ranges);
  free(a->acc);
  free(a);
}

static void arena_destroy(devrt_resource* self) { arena_free((arena*)self); }

static const devrt_resource_vtable arena_vtable = {
    .allocate = arena_allocate,
    .deallocate = arena_deallocate,
    .query = arena_query,
    .reap = arena_reap,
    .trim = arena_trim,
    .destroy = arena_destroy,
    .deallocate_tagged = arena_deallocate_tagged,
    .stream_retired = arena_stream_retired,
};

devrt_status devrt_arena_resource_create(devrt_runtime* rt, devrt_resource** out) {
  DV_RT_CHECK(rt, "devrt_arena_resource_create");
  DV_ARG_CHECK(out, "devrt_arena_resource_create", "out is NULL");
  size_t page = 0;
  DV_CHECK(rt->be->va_page(rt->dev, &page));
  arena* a = calloc(1, sizeof *a);
  if (a) {
    a->nheaps = 2 * rt->nslots;
    a->heaps = dv_zalloc_lines((size_t)a->nheaps * sizeof *a->heaps);
    a->ranges = calloc(a->nheaps, sizeof *a->ranges);
    a->acc = dv_account_new();
  }
  if (!a || !a->heaps || !a->ranges || !a->acc) {
    if (a) free(a->heaps), free((void*)a->ranges), free(a->acc), free(a);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                   "devrt_arena_resource_create: out of host memory (%u slots)", rt->nslots);
  }
  a->page = page;
  a->span = dv_round_to(rt->info.total_memory ? rt->info.total_memory : page, page);
  for (unsigned i = 0; i < a->nheaps; i++) pthread_mutex_init(&a->heaps[i].mu, NULL);
  pthread_mutex_init(&a->rmu, NULL);
  a->acc->granularity = UNIT;
  a->base.account = a->acc;
  a->base.rt = rt;
  devrt_status st = devrt_resource_init(&a->base, &arena_vtable, "arena", rt, NULL);
  if (st != DEVRT_OK) {
    arena_free(a);
    return st;
  }
  *out = &a->base;
  return DEVRT_OK;
}
