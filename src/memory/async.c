/* async.c: the leaf on the runtime's stream-ordered pool (pool_alloc / pool_free), and the
 * lock-free live-allocation table both leaves use (live_table.h). A free stays pending until a
 * reap observes an event recorded on its stream after it; events are amortised per batch. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "memory.h"
#include "account.h"
#include "live_table.h"

/* ---- the live table: a directory indexed by address, as an allocator's page map: one entry
 * per possible allocation start (256-byte units of a 48-bit address space), so recording an
 * allocation is two plain stores and a free is one compare-and-swap; no lock, no probing. Two
 * levels: a top of 2^18 leaf pointers, and leaves of 2^22 entries (1 GiB of device addresses),
 * made on first use. Both are reserved host address space whose pages are committed as they are
 * touched: 4 KiB of host memory per 64 KiB of device addresses that hold an allocation start. ----
 */

enum {
  UNIT_BITS = 8,
  ADDR_BITS = 48,
  LEAF_BITS = 22,
  TOP_BITS = ADDR_BITS - UNIT_BITS - LEAF_BITS,
  SIZE_BITS = 56
};
_Static_assert(sizeof(uintptr_t) == 8, "the live table indexes 64-bit addresses");

typedef struct entry {
  _Atomic uint64_t word;    /* size << 8 | 1; 0: no live allocation starts here */
  _Atomic(const char*) tag; /* stored before word (a release) */
} entry;

struct dv_live_table {
  _Atomic(entry*) top[1u << TOP_BITS];
};

static const size_t LEAF_SIZE = sizeof(entry) << LEAF_BITS;

static void* reserve(size_t n) {
  void* p =
      mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

devrt_status dv_live_create(const char* who, dv_live_table** out) {
  dv_live_table* t = reserve(sizeof *t);
  if (!t)
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED,
                   "%s: out of host address space for the live table", who);
  *out = t;
  return DEVRT_OK;
}

void dv_live_destroy(dv_live_table* t) {
  if (!t) return;
  for (size_t i = 0; i < 1u << TOP_BITS; i++) {
    entry* leaf = atomic_load_explicit(&t->top[i], memory_order_relaxed);
    if (leaf) munmap(leaf, LEAF_SIZE);
  }
  munmap(t, sizeof *t);
}

/* Publishes a leaf in *top, or returns the one another thread published first (rare: out of line).
 */
static DV_NOINLINE entry* leaf_make(_Atomic(entry*)* top) {
  entry *leaf = reserve(LEAF_SIZE), *seen = NULL;
  /* release: publishes the leaf to entry_of's acquire; the failure's acquire pairs with the
   * winner's release */
  if (leaf && !atomic_compare_exchange_strong_explicit(top, &seen, leaf, memory_order_release,
                                                       memory_order_acquire)) {
    munmap(leaf, LEAF_SIZE);
    leaf = seen;
  }
  return leaf;
}

/* p's entry; NULL where p is no start the table can hold (not 256-byte aligned, or past 48 bits),
 * or its leaf does not exist and `make` is false (nothing was ever recorded near p) or fails. */
static DV_INLINE entry* entry_of(dv_live_table* t, const void* p, bool make) {
  uintptr_t a = (uintptr_t)p;
  if (DV_UNLIKELY(a & (~(uintptr_t)0 << ADDR_BITS | ((1u << UNIT_BITS) - 1))))
    return NULL; /* one test for both */
  _Atomic(entry*)* top = &t->top[a >> (UNIT_BITS + LEAF_BITS)];
  entry* leaf = atomic_load_explicit(top, memory_order_acquire); /* pairs: leaf_make's release */
  if (DV_UNLIKELY(!leaf) && (!make || !(leaf = leaf_make(top)))) return NULL;
  return &leaf[(a >> UNIT_BITS) & ((1u << LEAF_BITS) - 1)];
}

static DV_INLINE void entry_set(entry* e, size_t size, const dv_live_entry* v) {
  /* an allocation starts where none is live (the pool cannot hand out a live address, and a
   * put back follows its take), with a size the word holds */
  DV_ASSERT(!atomic_load_explicit(&e->word, memory_order_relaxed) &&
            !((uint64_t)size >> SIZE_BITS));
  atomic_store_explicit(&e->tag, v->tag, memory_order_relaxed);
  /* release: pairs with the acquire loads of dv_live_take (a take that sees the word sees tag) */
  atomic_store_explicit(&e->word, (uint64_t)size << 8 | 1, memory_order_release);
}

DV_INLINE devrt_status dv_live_admit(dv_mem_account* a, const char* who, size_t size,
                                     const char* tag, uint64_t* rounded) {
  *rounded = dv_round(a, size);
  return dv_account_admit(a, *rounded) ? DEVRT_OK : dv_account_refuse(a, who, size, *rounded, tag);
}

static DV_NOINLINE devrt_status track_refused(const char* who, void* p, size_t size) {
  return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED,
                 "%s: cannot record %p (%zu bytes): not 256-byte aligned, past 48 address bits, "
                 "over 2^56 bytes, or "
                 "no host address space for the live table",
                 who, p, size);
}

DV_INLINE devrt_status dv_live_track(dv_live_table* t, const char* who, void* p, size_t size,
                                     const char* tag) {
  entry* e = entry_of(t, p, true);
  if (DV_UNLIKELY(!e || (uint64_t)size >> SIZE_BITS)) return track_refused(who, p, size);
  entry_set(e, size, &(dv_live_entry){tag});
  return DEVRT_OK;
}

static DV_NOINLINE devrt_status take_refused(const char* who, void* p, size_t size,
                                             uint64_t recorded) {
  if (!recorded)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "%s deallocate: %p is not a live allocation of this resource (foreign pointer "
                   "or double free)",
                   who, p);
  return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "%s deallocate: size %zu does not match the %llu bytes %p was allocated with", who,
                 size, (unsigned long long)recorded, p);
}

/* A concurrent free of the same pointer sees the entry gone once the compare-and-swap took it. */
DV_INLINE devrt_status dv_live_take(dv_live_table* t, const char* who, void* p, size_t size,
                                    dv_live_entry* out) {
  entry* e = entry_of(t, p, false);
  /* acquire (the load and both outcomes of the compare-and-swap): pairs with entry_set's
   * release, so the tag read is the one stored with the word seen */
  uint64_t w = e ? atomic_load_explicit(&e->word, memory_order_acquire) : 0;
  while (w && w >> 8 == size) {
    out->tag = atomic_load_explicit(&e->tag, memory_order_relaxed);
    if (atomic_compare_exchange_weak_explicit(&e->word, &w, 0, memory_order_acquire,
                                              memory_order_acquire))
      return DEVRT_OK;
  }
  return take_refused(who, p, size, w >> 8);
}

void dv_live_put_back(dv_live_table* t, void* p, size_t size, const dv_live_entry* e) {
  entry* at = entry_of(t, p, false);
  DV_ASSERT(at); /* the take found it: its leaf exists */
  entry_set(at, size, e);
}

/* ---- the async resource ---- */

typedef struct batch {
  dv_event* ev;
  uint64_t bytes;
} batch;

/* One per stream-pool slot. A free counts its bytes on its own thread shard's row of `freed`
 * (a plain store: account.h), so frees take no lock and write no shared line; the slot's total is
 * the sum down its column. A reap closes a batch over what that sum has grown by since the last
 * one (covered), under one event recorded after those frees on the slot's stream; batches sit in
 * a ring, oldest first. A slot keeps its stream until async_stream_retired has retired everything
 * freed there (the runtime tells the layers before it destroys a slot's stream): the runtime's
 * slot table says which it is, for a reap that finds frees there.
 *
 * A reap visits only the slots that may hold something: each owned shard's `cur` (the
 * slot of its thread's latest free, the last cell of its row) and the slots in `pending`. A free
 * on its thread's cur slot adds no more than its count; one on another slot first adds the old
 * cur slot to `pending` (an RMW), then moves cur. A slot leaves `pending` only under its mu with
 * nothing batched and its sum at `covered`, and the reaper reads the sum again after the take:
 * an add that came before the take shows there, one after it stays. So every free is seen by a
 * reap that comes after it: through cur, through `pending`, or by the reap that took it out (a
 * non-waiting reap leaves a slot another reap holds to that one: it may be synchronizing). */
typedef struct aslot {
  _Alignas(DV_LINE) pthread_mutex_t mu; /* held across a waiting reap's stream_sync */
  uint64_t covered;                     /* freed bytes batched so far (under mu) */
  _Atomic uint64_t retired; /* freed bytes retired so far (written under mu, a release after the
                               account moved): the column's sum when nothing there is pending */
  batch* q;
  unsigned head, n, cap;
} aslot;

typedef struct async_res {
  devrt_resource base;
  dv_live_table* live;
  aslot* slots;
  unsigned nslots, stride; /* stride: a row of `freed`, whole cache lines */
  _Atomic uint64_t* freed; /* [DV_SHARDS][stride]: bytes freed per thread shard and slot, ever;
                              column nslots: the shard's cur slot + 1 (0: none; its thread's) */
  pthread_mutex_t ev_mu;   /* the free list of events (never destroyed before destroy) */
  dv_event** evs;
  unsigned nev, evcap;
  _Alignas(DV_LINE) dv_slotset pending; /* slots off every cur that may hold frees not retired */
} async_res;
_Static_assert(DV_SLOTSET_WORDS * 64 == DV_SID_SLOTS, "a slot set holds every slot");

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
  for (unsigned k = 0, end = dv_shard_end(); k < end; k++)
    n += atomic_load_explicit(&a->freed[(size_t)k * a->stride + i],
                              memory_order_acquire); /* pairs: dv_cell_add's release */
  return n;
}

/* Closes a batch over slot i's frees up to `upto` (a freed_sum; caller holds its mu): records
 * an event on the stream and files the new bytes under it. Correctness: a free counts its bytes
 * (a release store) only after its pool_free returned, and the sum was read (acquire) before the
 * record, so every free in it was enqueued on this stream before the event, and a stream runs its
 * work in order: the event completes no earlier than those frees. A free counted after the read
 * lands in a later batch. */
static devrt_status close_batch(async_res* a, unsigned i, uint64_t upto) {
  aslot* sl = &a->slots[i];
  devrt_runtime* rt = a->base.rt;
  DV_ASSERT(i < a->nslots && upto > sl->covered); /* a batch holds new frees only */
  if (sl->n == sl->cap) {
    unsigned cap = sl->cap ? sl->cap * 2 : 8;
    batch* q = malloc(cap * sizeof *q);
    if (!q)
      return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "async reap: out of host memory for %u batches",
                     cap);
    for (unsigned i = 0; i < sl->n; i++) q[i] = sl->q[(sl->head + i) % sl->cap];
    free(sl->q);
    sl->q = q;
    sl->cap = cap;
    sl->head = 0;
  }
  dv_event* e = NULL;
  DV_CHECK(event_take(a, &e));
  devrt_status st = rt->be->event_record(e, dv_slot_stream(rt, i));
  if (st != DEVRT_OK) {
    event_give(a, e);
    return st;
  }
  sl->q[(sl->head + sl->n++) % sl->cap] = (batch){e, upto - sl->covered};
  sl->covered = upto;
  DV_ASSERT(sl->n <= sl->cap && sl->head < sl->cap);
  return DEVRT_OK;
}

/* Retires the slot's completed batches in order (caller holds sl->mu); stops at the first one
 * still running (later ones on the same stream cannot have completed before it). A batch that
 * ends at or below `synced` (covered when a synchronize of the slot's stream began, 0: none) is
 * complete without a query: on CUDA, under load from other threads, an event recorded before a
 * cuStreamSynchronize that returned can still query NOT_READY for a while. */
static devrt_status retire(async_res* a, aslot* sl, uint64_t synced, uint64_t* reaped) {
  dv_mem_account* acc = a->base.account;
  while (sl->n) {
    batch* b = &sl->q[sl->head];
    bool done = atomic_load_explicit(&sl->retired, memory_order_relaxed) + b->bytes <= synced;
    if (!done) DV_CHECK(a->base.rt->be->event_query(b->ev, &done));
    if (!done) break;
    /* retired never passes covered: a batch retires only what it batched */
    DV_ASSERT(b->bytes &&
              atomic_load_explicit(&sl->retired, memory_order_relaxed) + b->bytes <= sl->covered);
    dv_account_release(acc, b->bytes); /* first: live reads low, not high, between the two */
    dv_account_sub(acc, DV_PENDING, b->bytes);
    atomic_fetch_add_explicit(&acc->reaped, b->bytes, memory_order_relaxed);
    /* last, a release: a reap that sees it (reap_slot's acquire) sees the account moved */
    atomic_store_explicit(&sl->retired,
                          atomic_load_explicit(&sl->retired, memory_order_relaxed) + b->bytes,
                          memory_order_release);
    *reaped += b->bytes;
    event_give(a, b->ev);
    sl->head = (sl->head + 1) % sl->cap;
    sl->n--;
  }
  return DEVRT_OK;
}

/* The bytes of a slot's batches (asserts only; under its mu). */
static __attribute__((unused)) uint64_t batched(const aslot* sl) {
  uint64_t n = 0;
  for (unsigned k = 0; k < sl->n; k++) n += sl->q[(sl->head + k) % sl->cap].bytes;
  return n;
}

/* Under sl->mu: slot i stays in `pending` while anything freed there is not retired; a take is
 * checked again (the sum may have grown by an add the take removed). */
static void relist(async_res* a, unsigned i) {
  aslot* sl = &a->slots[i];
  uint64_t retired = atomic_load_explicit(&sl->retired, memory_order_relaxed);
  DV_ASSERT(sl->covered >= retired);
  DV_ASSERT(batched(sl) == sl->covered - retired); /* what is batched and not retired */
  (void)retired;
  if (sl->n || freed_sum(a, i) != sl->covered) {
    if (!dv_slotset_has(&a->pending, i)) dv_slotset_add(&a->pending, i); /* takes hold mu too */
  } else if (dv_slotset_take(&a->pending, i) && freed_sum(a, i) != sl->covered)
    dv_slotset_add(&a->pending, i);
}

/* Batches slot i's new frees and retires what completed. With DEVRT_REAP_WAIT the wait is a
 * stream_sync under the slot mutex, a mutex held across that driver call on purpose: the slot's
 * stream_retired entry takes it before the stream is destroyed, so the stream outlives the wait
 * (frees take no lock and never wait behind it; other reaps of the slot would wait for the same
 * work). It covers every batch closed before it, which the retire pass then retires without
 * asking their events (which may not say so yet: retire). */
static devrt_status reap_slot(async_res* a, unsigned i, unsigned flags, uint64_t* reaped) {
  aslot* sl = &a->slots[i];
  uint64_t upto = freed_sum(a, i);
  /* acquire: pairs with retire's release (the account moved before retired grew) */
  if (upto == atomic_load_explicit(&sl->retired, memory_order_acquire) &&
      !dv_slotset_has(&a->pending, i))
    return DEVRT_OK; /* nothing pending here */
  if (flags & DEVRT_REAP_WAIT)
    pthread_mutex_lock(&sl->mu);
  else if (pthread_mutex_trylock(&sl->mu) != 0)
    return DEVRT_OK; /* another reap holds it, maybe across a synchronize: it retires what
                        completed, and a reap that must not block leaves the slot to it */
  /* upto may be below covered: another reap or async_stream_retired went further since it was
   * read */
  devrt_status st = upto > sl->covered ? close_batch(a, i, upto) : DEVRT_OK;
  dv_stream* s = flags & DEVRT_REAP_WAIT && sl->n ? dv_slot_stream(a->base.rt, i) : NULL;
  uint64_t synced = 0; /* every batch closed so far ends at or below covered */
  if (st == DEVRT_OK && s) {
    synced = sl->covered;
    st = a->base.rt->be->stream_sync(s);
  }
  if (st == DEVRT_OK) st = retire(a, sl, synced, reaped);
  relist(a, i);
  pthread_mutex_unlock(&sl->mu);
  return st;
}

/* The slots one reap has visited: a word of w counts only once its bit in `top` is set, so
 * nothing needs clearing first. */
typedef struct visited {
  uint64_t top, w[DV_SLOTSET_WORDS];
} visited;

/* reap_slot, once per reap, keeping the first failure. */
static void reap_once(async_res* a, visited* v, unsigned i, unsigned flags, uint64_t* reaped,
                      devrt_status* first) {
  DV_ASSERT(i < a->nslots);
  uint64_t bit = 1ull << i % 64, *w = &v->w[i / 64];
  if (!(v->top >> i / 64 & 1)) {
    v->top |= 1ull << i / 64;
    *w = 0;
  }
  if (*w & bit) return;
  *w |= bit;
  devrt_status st = reap_slot(a, i, flags, reaped);
  if (st != DEVRT_OK && *first == DEVRT_OK) *first = st; /* keep reaping the others */
}

/* Reaps each owned shard's cur slot, then the slots in `pending`. */
static devrt_status async_reap(devrt_resource* self, unsigned flags, uint64_t* reaped) {
  async_res* a = (async_res*)self;
  devrt_status first = DEVRT_OK;
  visited v;
  v.top = 0;
  *reaped = 0;
  for (unsigned k = 0, end = dv_shard_end(); k < end && k < DV_OWNED; k++) {
    uint64_t c = /* acquire: pairs with move_cur's release (the old cur slot is in pending) */
        atomic_load_explicit(&a->freed[(size_t)k * a->stride + a->nslots], memory_order_acquire);
    if (c) reap_once(a, &v, (unsigned)c - 1, flags, reaped, &first);
  }
  DV_SLOTSET_FOR(i, &a->pending) reap_once(a, &v, i, flags, reaped, &first);
  return first;
}

/* A free on slot i by the thread of shard k, off its cur slot: the old cur slot goes into
 * `pending` before cur moves (a reap that reads the new cur sees the add), with all this thread's
 * frees there before it. A shared shard has no cur of its own: each free adds its slot. */
static DV_NOINLINE void move_cur(async_res* a, unsigned k, unsigned i) {
  _Atomic uint64_t* cur = &a->freed[(size_t)k * a->stride + a->nslots];
  DV_ASSERT(i < a->nslots && k < DV_SHARDS);
  if (k >= DV_OWNED) {
    dv_slotset_add(&a->pending, i);
    return;
  }
  uint64_t was = atomic_load_explicit(cur, memory_order_relaxed);
  if (was) dv_slotset_add(&a->pending, (unsigned)was - 1);
  atomic_store_explicit(cur, i + 1, memory_order_release); /* pairs: async_reap's acquire */
}

static DV_HOT devrt_status async_allocate(devrt_resource* self, size_t size, devrt_stream stream,
                                          const char* tag, void** out) {
  async_res* a = (async_res*)self;
  devrt_runtime* rt = self->rt;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "async allocate"));
  uint64_t n = 0;
  DV_CHECK(dv_live_admit(self->account, "async allocate", size, tag, &n));
  void* p = NULL;
  devrt_status st = rt->be->pool_alloc(rt->dev, size, s, &p);
  if (st == DEVRT_OK && (st = dv_live_track(a->live, "async allocate", p, size, tag)) != DEVRT_OK)
    rt->be->pool_free(rt->dev, p, s); /* the table's error is the one reported */
  if (st != DEVRT_OK) {
    dv_account_release(self->account, n);
    return st;
  }
  *out = p;
  return DEVRT_OK;
}

static DV_HOT devrt_status async_deallocate_tagged(devrt_resource* self, void* p, size_t size,
                                                   devrt_stream stream, const char** tag) {
  async_res* a = (async_res*)self;
  devrt_runtime* rt = self->rt;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "async deallocate"));
  dv_live_entry e = {NULL}; /* the take sets it; gcc under LTO cannot tell */
  DV_CHECK(dv_live_take(a->live, "async", p, size, &e));
  devrt_status st = rt->be->pool_free(rt->dev, p, s);
  if (st != DEVRT_OK) {
    dv_live_put_back(a->live, p, size, &e);
    return st;
  }
  uint64_t rounded = dv_round(self->account, size);
  *tag = e.tag;
  unsigned i = DV_SID_SLOT(stream), k = dv_shard();
  DV_ASSERT(i < a->nslots); /* dv_stream_get found the stream: its slot is the runtime's */
  dv_account_add_at(self->account, k, DV_PENDING, rounded);
  _Atomic uint64_t* row = &a->freed[(size_t)k * a->stride];
  dv_cell_add(&row[i], rounded, k); /* a release: after the pool_free */
  if (DV_UNLIKELY(atomic_load_explicit(&row[a->nslots], memory_order_relaxed) != i + 1))
    move_cur(a, k, i);
  return DEVRT_OK;
}

static devrt_status async_query(devrt_resource* self, devrt_resource_figures* out) {
  dv_account_query(self->account, out);
  return DEVRT_OK;
}

static void async_free(async_res* a) {
  devrt_runtime* rt = a->base.rt;
  for (unsigned i = 0; a->slots && i < a->nslots; i++) {
    aslot* sl = &a->slots[i];
    for (unsigned k = 0; k < sl->n; k++)
      rt->be->event_destroy(rt->dev, sl->q[(sl->head + k) % sl->cap].ev);
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
  while (st == DEVRT_OK && got < N && (st = rt->be->pool_alloc(rt->dev, 1, s, &p[got])) == DEVRT_OK)
    got++;
  if (st == DEVRT_OK) st = rt->be->pool_stats(rt->dev, &after);
  uint64_t g = 0, used = (after.used_current - before.used_current) / N;
  for (unsigned i = 0; i < got; i++)
    for (unsigned j = i + 1; j < got; j++) {
      uint64_t d = (uintptr_t)p[i] > (uintptr_t)p[j] ? (uintptr_t)p[i] - (uintptr_t)p[j]
                                                     : (uintptr_t)p[j] - (uintptr_t)p[i];
      while (d) { /* g = gcd(g, d) */
        uint64_t r = g % d;
        g = d;
        d = r;
      }
    }
  for (unsigned i = 0; i < got; i++) {
    devrt_status fs = rt->be->pool_free(rt->dev, p[i], s);
    if (fs != DEVRT_OK) fs = rt->be->pool_free(rt->dev, p[i], s); /* a refused free freed nothing */
    if (st == DEVRT_OK) st = fs;
  }
  DV_ALSO(st, devrt_stream_synchronize(rt, sid));
  if (st != DEVRT_OK) return st;
  if (!g)
    return dv_fail(DEVRT_ERR_BACKEND_ERROR,
                   "async create: cannot measure the pool's granularity (%u blocks at one address)",
                   got);
  g &= ~g + 1; /* its power-of-two part, at least 256 */
  if (g < 256) g = 256;
  *out = used >= 256 && used < g && !(used & (used - 1)) ? used : g;
  DV_ASSERT(*out >= 256 && !(*out & (*out - 1))); /* account.h: a power of two */
  return DEVRT_OK;
}

static DV_HOT devrt_status async_deallocate(devrt_resource* self, void* p, size_t size,
                                            devrt_stream stream) {
  const char* tag;
  return async_deallocate_tagged(self, p, size, stream, &tag);
}

static void async_stream_retired(devrt_resource* r, devrt_stream stream);

static const devrt_resource_vtable async_vtable = {
    .allocate = async_allocate,
    .deallocate = async_deallocate,
    .query = async_query,
    .reap = async_reap,
    /* No trim: the leaf caches nothing of its own. The pool's reserve (mapped for the pool, not in
     * use) is not in the account; giving it back unmaps device-wide (on every peer device too)
     * and makes later allocations map again, stalling other threads' driver calls: a budget
     * trimming under pressure paid that on each refusal. devrt_pool_trim gives it back. */
    .destroy = async_destroy,
    .deallocate_tagged = async_deallocate_tagged,
    .stream_retired = async_stream_retired,
};

devrt_status devrt_async_resource_create(devrt_runtime* rt, devrt_resource** out) {
  DV_RT_CHECK(rt, "devrt_async_resource_create");
  DV_ARG_CHECK(out, "devrt_async_resource_create", "out is NULL");
  async_res* a = dv_zalloc_lines(sizeof *a); /* read by every thread: no neighbour on its lines */
  dv_mem_account* acc = dv_account_new();
  aslot* slots = dv_zalloc_lines((size_t)rt->nslots * sizeof *slots);
  unsigned stride = (rt->nslots + 1 + 15) / 16 * 16; /* rows of whole DV_LINEs, cur last */
  _Atomic uint64_t* freed = dv_zalloc_lines((size_t)DV_SHARDS * stride * sizeof *freed);
  if (!a || !acc || !slots || !freed) {
    free(a), free(acc), free(slots), free(freed);
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED,
                   "devrt_async_resource_create: out of host memory (%u slots)", rt->nslots);
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

/* The slot's stream was synchronized: every free on it is complete, and retired here. */
static void async_stream_retired(devrt_resource* r, devrt_stream stream) {
  async_res* a = (async_res*)r;
  unsigned slot = DV_SID_SLOT(stream);
  aslot* sl = &a->slots[slot];
  dv_mem_account* acc = r->account;
  pthread_mutex_lock(&sl->mu);
  for (; sl->n; sl->head = (sl->head + 1) % sl->cap, sl->n--)
    event_give(a, sl->q[sl->head].ev); /* all complete */
  /* everything freed here, before the synchronize too (retired is written under mu) */
  uint64_t upto = freed_sum(a, slot);
  uint64_t n = upto - atomic_load_explicit(&sl->retired, memory_order_relaxed);
  DV_ASSERT(upto >= sl->covered); /* a column's sum only grows; covered was read from it */
  sl->covered = upto;
  dv_account_release(acc, n);
  dv_account_sub(acc, DV_PENDING, n);
  atomic_fetch_add_explicit(&acc->reaped, n, memory_order_relaxed);
  atomic_store_explicit(&sl->retired, upto, memory_order_release); /* as retire's */
  relist(a, slot);
  pthread_mutex_unlock(&sl->mu);
}
