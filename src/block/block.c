/* block.c: the block table (handles = slot index + generation; chunks that never move, so a
 * lookup is two loads; a lock per block, never one for the runtime) and use tracking: the last
 * writer and one reader event per stream, the waits a use needs, deferred frees on the free stream.
 */
#include <inttypes.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "block.h"
#include "../memory/account.h"

enum {
  CHUNK_BITS = 12,
  CHUNK = 1 << CHUNK_BITS,
  NCHUNKS = 4096,
  NSTRIPE = 16,
  INLINE_READERS = 3,
  GROUP_SMALL = 2,
  GROUP_MAX = 64,
  USERS_MAX = 4 /* slots a block remembers having used it; past that its free checks every slot */
};
#define INDEX_BITS 24 /* handle = generation (40 bits) << 24 | (index + 1) */
#define GEN_MASK ((1ull << 40) - 1)

/* Generations are process-wide, so a handle of another runtime never matches a record here. */
static _Atomic uint64_t next_gen = 1;
#define FREEING 0x80000000u

/* What later uses must respect: the last writer, and one entry per slot for the other uses a
 * write or a free must wait for: the reads since that write, and any earlier use a write could
 * not prove it came after (see record_write). Guarded by the lock of the block or group that
 * holds it. */
typedef struct dv_track {
  dv_pev* writer;
  dv_wait* readers;              /* points at inl until it outgrows it */
  uint16_t nreaders, capreaders; /* at most one entry per stream slot (DV_SID_SLOTS) */
  uint32_t epoch; /* bumped by every change: a stream that waited for what the track held at
                   * epoch e has waited for what it holds while the epoch is still e */
  dv_wait inl[INLINE_READERS];
} dv_track;

/* Blocks used again and again as one set with one access (a producer's outputs, then its
 * consumer's inputs; one block is a set too) share one record of their tracking state, so such a
 * launch locks and writes one record, not one per block, on one short path. Any other use of a
 * member dissolves the group first, giving every member the group's state back. Groups are pooled
 * in two sizes (up to GROUP_SMALL members, or GROUP_MAX) and never freed before the runtime. */
typedef struct dv_group { /* every field is guarded by `lock`, but the pool links (group_mu) */
  _Alignas(DV_LINE) dv_spin lock;
  bool live;
  bool big;      /* room for GROUP_MAX members, else GROUP_SMALL */
  uint32_t pins; /* launches issuing against it; passed on to the members if it dissolves */
  unsigned n;
  uint64_t gen; /* bumped when it dissolves: a launch that pinned it then finishes block by block */
  dv_track t;
  struct dv_group *next, *all; /* pool; every group (for teardown) */
  devrt_block h[];             /* the members */
} dv_group;
_Static_assert(offsetof(dv_group, h) + GROUP_SMALL * sizeof(devrt_block) <= DV_LINE,
               "a small group takes one DV_LINE unit");

/* One record of the block table. Every field is guarded by `lock` (a spin lock: no allocation,
 * driver call or wait inside it), but `ver` and `group`, which launches also read without it. */
typedef struct dv_blk {
  dv_spin lock;
  bool live;
  bool pending;  /* reserved by a queued allocation that has not been issued: no memory yet */
  uint32_t pins; /* launches issuing against it; FREEING while a free is in progress */
  uint64_t gen;  /* of the current (or last) allocation in this slot: process-wide unique */
  _Atomic uint64_t
      ver; /* bumped under the lock by every change of t or group (the repeat path reads it) */
  _Atomic(dv_group*)
      group;         /* set (under both locks): t is empty, the group's record holds the state */
  uint32_t lastset;  /* the set of blocks its last tracked use declared (a hash) */
  uint32_t lastslot; /* and that use's slot */
  uint8_t nusers;    /* slots in users[], or USERS_MAX + 1: more than fit (any slot may be) */
  uint16_t users[USERS_MAX]; /* the slots that recorded a use since the allocation: only their
                              * repeat paths can hold it (dv_block_free_on waits for them) */
  uint32_t prep_slot;        /* the last devrt_prepare_block_use: its slot + 1 (0: none), */
  bool prep_write;           /* whether it waited as a write does, */
  uint32_t prep_epoch;       /* and t.epoch once its waits were issued */
  void* ptr;
  size_t size;
  const char* tag;
  devrt_stream stream;
  devrt_resource* res; /* what allocated it: the stack, or its stream's partition's sub-budget */
  dv_track t;
} dv_blk;

typedef struct stripe { /* free indices, guarded by mu (a mutex: give_index may realloc under it) */
  _Alignas(64) pthread_mutex_t mu;
  uint32_t* idx;
  unsigned n, cap;
} stripe;

struct dv_blocks {
  _Atomic uint32_t next; /* indices handed out so far (first: every lookup reads it) */
  _Atomic(dv_blk*) chunk[NCHUNKS];
  pthread_mutex_t grow_mu;
  stripe free[NSTRIPE];             /* free indices, striped by the hint (a stream slot) */
  pthread_mutex_t group_mu;         /* the group pool */
  dv_group *groups[2], *all_groups; /* pools: [big] */
};

_Static_assert(offsetof(dv_evslot, n) == 64 && offsetof(dv_evslot, back) == DV_LINE,
               "a launch reads one line of its slot's state and adds to the next");

static void lock(dv_blk* b) { dv_spin_lock(&b->lock); }
static void unlock(dv_blk* b) { dv_spin_unlock(&b->lock); }
static void glock(dv_group* g) { dv_spin_lock(&g->lock); }
static void gunlock(dv_group* g) { dv_spin_unlock(&g->lock); }
/* b's tracking state changed (b locked): its track's epoch moves, and its version (seq_cst: see
 * dv_repeat_try and dv_block_free_on). */
static void touched(dv_blk* b) {
  b->t.epoch++;
  atomic_store(&b->ver, atomic_load_explicit(&b->ver, memory_order_relaxed) + 1);
}

/* Slot `slot` recorded a use of b (b locked): its repeat path may now hold b. */
static void add_user(dv_blk* b, unsigned slot) {
  for (unsigned k = 0; k < b->nusers && k < USERS_MAX; k++)
    if (b->users[k] == slot) return;
  if (b->nusers < USERS_MAX) b->users[b->nusers] = (uint16_t)slot;
  if (b->nusers <= USERS_MAX) b->nusers++;
}

/* ---- table ---- */

devrt_status dv_blocks_init(devrt_runtime* rt) {
  rt->evslots = dv_zalloc_lines(sizeof *rt->evslots * rt->nslots);
  rt->blocks = calloc(1, sizeof *rt->blocks);
  if (!rt->evslots || !rt->blocks) {
    free(rt->evslots), free(rt->blocks);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                   "devrt_runtime: out of host memory for the block table");
  }
  pthread_mutex_init(&rt->blocks->grow_mu, NULL);
  pthread_mutex_init(&rt->blocks->group_mu, NULL);
  for (unsigned i = 0; i < NSTRIPE; i++) pthread_mutex_init(&rt->blocks->free[i].mu, NULL);
  return DEVRT_OK;
}

/* Frees the table's own memory and every pooled event; device memory of blocks never freed goes
 * with the resource stack. */
void dv_blocks_fini(devrt_runtime* rt) {
  struct dv_blocks* t = rt->blocks;
  for (unsigned c = 0; c < NCHUNKS; c++) {
    dv_blk* ch = atomic_load(&t->chunk[c]);
    for (unsigned i = 0; ch && i < CHUNK; i++)
      if (ch[i].t.readers != ch[i].t.inl) free(ch[i].t.readers);
    free(ch);
  }
  for (dv_group *g = t->all_groups, *nx; g; g = nx) {
    nx = g->all;
    if (g->t.readers != g->t.inl) free(g->t.readers);
    free(g);
  }
  pthread_mutex_destroy(&t->group_mu);
  for (unsigned i = 0; i < NSTRIPE; i++) {
    free(t->free[i].idx);
    pthread_mutex_destroy(&t->free[i].mu);
  }
  pthread_mutex_destroy(&t->grow_mu);
  free(t);
  for (unsigned i = 0; i < rt->nslots; i++) {
    free(rt->evslots[i].rep);
    for (dv_pev *p = rt->evslots[i].all, *nx; p; p = nx) {
      nx = p->all;
      rt->be->event_destroy(rt->dev, p->ev);
      free(p);
    }
  }
  free(rt->evslots);
}

static dv_blk* at(struct dv_blocks* t, uint32_t i) {
  dv_blk* ch = atomic_load_explicit(&t->chunk[i >> CHUNK_BITS], memory_order_acquire);
  return ch ? &ch[i & (CHUNK - 1)] : NULL;
}

/* A free index: the stripe's list first, else a fresh one (its chunk created if need be). */
static devrt_status take_index(struct dv_blocks* t, unsigned hint, uint32_t* out) {
  stripe* s = &t->free[hint % NSTRIPE];
  pthread_mutex_lock(&s->mu);
  bool got = s->n > 0;
  if (got) *out = s->idx[--s->n];
  pthread_mutex_unlock(&s->mu);
  if (got) return DEVRT_OK;
  uint32_t i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
  if (i >= (uint32_t)NCHUNKS * CHUNK) {
    atomic_fetch_sub_explicit(&t->next, 1, memory_order_relaxed);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                   "devrt_block_alloc: %u blocks live, the table's limit", NCHUNKS * CHUNK);
  }
  if (!at(t, i)) {
    pthread_mutex_lock(&t->grow_mu);
    devrt_status st = DEVRT_OK;
    if (!at(t, i)) {
      dv_blk* ch = calloc(CHUNK, sizeof *ch);
      if (ch)
        atomic_store_explicit(&t->chunk[i >> CHUNK_BITS], ch, memory_order_release);
      else
        st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                     "devrt_block_alloc: out of host memory for the block table");
    }
    pthread_mutex_unlock(&t->grow_mu);
    if (st != DEVRT_OK) return st; /* the index is lost: harmless, the chunk never came */
  }
  *out = i;
  return DEVRT_OK;
}

static void give_index(struct dv_blocks* t, uint32_t i) {
  stripe* s = &t->free[i % NSTRIPE];
  pthread_mutex_lock(&s->mu);
  if (s->n == s->cap) {
    unsigned cap = s->cap ? s->cap * 2 : 64;
    uint32_t* v = realloc(s->idx, cap * sizeof *v);
    if (!v) { /* the index is lost: the table keeps working with one slot less */
      pthread_mutex_unlock(&s->mu);
      return;
    }
    s->idx = v, s->cap = cap;
  }
  s->idx[s->n++] = i;
  pthread_mutex_unlock(&s->mu);
}

static devrt_runtime* peer_owner(devrt_runtime* rt, devrt_block h);

static devrt_status stale(devrt_runtime* rt, devrt_block h, const char* call) {
  if (!h) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: block 0 is not a block", call);
  devrt_runtime* o = peer_owner(rt, h);
  if (o) /* live, and not stale: a peer's */
    return dv_fail(DEVRT_ERR_STALE_BLOCK,
                   "%s: block %#" PRIx64
                   " belongs to the runtime of ordinal %d, which has peer "
                   "access with this one: launches on this runtime may name it (devrt_launch, "
                   "devrt_queue_submit, devrt_block_copy, collectives); other calls take its own "
                   "runtime",
                   call, h, o->cfg.ordinal);
  atomic_fetch_add_explicit(&rt->stale_refusals, 1, memory_order_relaxed);
  return dv_fail(DEVRT_ERR_STALE_BLOCK,
                 "%s: block %#" PRIx64 " (slot %" PRIu64 ", generation %" PRIu64
                 ") is freed, was never allocated, or belongs to another runtime",
                 call, h, (uint64_t)((h & ((1ull << INDEX_BITS) - 1)) - 1),
                 (uint64_t)(h >> INDEX_BITS));
}

/* The record of h's slot, unlocked (NULL if there is none); says nothing of h being live. */
static dv_blk* record_of(devrt_runtime* rt, devrt_block h) {
  uint64_t i = (h & ((1ull << INDEX_BITS) - 1)) - 1;
  return h && i < atomic_load_explicit(&rt->blocks->next, memory_order_acquire)
             ? at(rt->blocks, (uint32_t)i)
             : NULL;
}

/* The runtime rt has peer access with whose table holds h live (a snapshot), or NULL. */
static DV_NOINLINE devrt_runtime* peer_owner(devrt_runtime* rt, devrt_block h) {
  unsigned n = atomic_load_explicit(&rt->npeers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) {
    devrt_runtime* p = atomic_load_explicit(&rt->peers[i], memory_order_acquire);
    dv_blk* b = p ? record_of(p, h) : NULL;
    if (!b) continue;
    lock(b);
    bool live = b->live && b->gen == h >> INDEX_BITS;
    unlock(b);
    if (live) return p;
  }
  return NULL;
}

/* b's tag for a message, read with b locked (a reused slot's allocation rewrites it). */
static const char* tag_of(const dv_blk* b) { return b->tag ? b->tag : "untagged"; }

/* The block of a live handle, locked; NULL (with the error set in *st) otherwise. */
static dv_blk* get_locked(devrt_runtime* rt, devrt_block h, const char* call, devrt_status* st) {
  dv_blk* b = record_of(rt, h);
  if (b) {
    lock(b);
    if (b->live && b->gen == h >> INDEX_BITS) return b;
    unlock(b);
  }
  *st = stale(rt, h, call);
  return NULL;
}

/* As get_locked, and the block must have its memory (not a queued allocation still pending). */
static dv_blk* get_ready(devrt_runtime* rt, devrt_block h, const char* call, devrt_status* st) {
  dv_blk* b = get_locked(rt, h, call, st);
  if (b && b->pending) {
    const char* tag = tag_of(b);
    unlock(b);
    *st =
        dv_fail(DEVRT_ERR_INVALID_STATE,
                "%s: block %#" PRIx64
                " (tag %s) is a queued allocation not issued yet: wait for its submission's signal",
                call, h, tag);
    return NULL;
  }
  return b;
}

/* ---- tracking ---- */

/* ---- wait lists ---- */

static pthread_key_t room_key;
static pthread_once_t room_once = PTHREAD_ONCE_INIT;
static void room_key_make(void) { pthread_key_create(&room_key, free); }
static _Thread_local dv_wait* room; /* this thread's buffer (also under room_key, to free it) */
static _Thread_local unsigned room_n;

devrt_status dv_waits_refused(devrt_runtime* rt) {
  return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "out of host memory for %u waits", rt->nslots);
}

dv_wait* dv_wait_room(unsigned n) {
  if (DV_LIKELY(n <= room_n)) return room;
  pthread_once(&room_once, room_key_make);
  dv_wait* w = realloc(room, n * sizeof *w); /* n is the runtime's slot count: grows rarely */
  if (!w) return NULL;
  pthread_setspecific(room_key, w);
  room = w, room_n = n;
  return w;
}

/* Where each source slot's entry sits in the wait list this thread is gathering: a hint that the
 * list confirms (w[k].slot == slot), so it needs no clearing between lists, and a wait is found in
 * one step however many slots the list holds. */
static _Thread_local uint16_t wait_at[DV_SID_SLOTS];
_Static_assert(DV_SID_SLOTS <= 65536, "wait_at holds list positions as uint16_t");

_Thread_local unsigned dv_in_enqueue;
_Thread_local unsigned dv_wait_foreign;

/* want() for a peer runtime's mark (p->rt != rt): its entry's slot carries FOREIGN, so rt's own
 * slots' position hints (wait_at) never confirm it, and it is found by a search of the list (few
 * such entries). No room left (peer access enabled since the list was sized): the list is short,
 * and dv_waits_issue refuses it. */
#define FOREIGN 0x80000000u
static DV_NOINLINE void want_foreign(dv_pev* p, dv_wait* w, unsigned* n, dv_counts* c,
                                     unsigned wt) {
  if (dv_pev_done(p->rt, p)) {
    c->complete += wt;
    return;
  }
  for (unsigned k = 0; k < *n; k++)
    if (w[k].slot == (p->slot | FOREIGN) && w[k].ev->rt == p->rt) {
      c->coalesced += wt;
      if (p->seq > w[k].ev->seq) {
        dv_pev_ref(p);
        dv_pev_unref(p->rt, w[k].ev);
        w[k].ev = p;
      }
      return;
    }
  if (dv_wait_foreign == 0 || dv_wait_foreign == DV_WAIT_SHORT) {
    dv_wait_foreign = DV_WAIT_SHORT;
    return;
  }
  dv_wait_foreign--;
  dv_pev_ref(p);
  w[(*n)++] = (dv_wait){p->slot | FOREIGN, false, p};
  c->coalesced += wt - 1;
}

/* Adds event p to what stream `slot` must wait for: at most one per source slot, the newest.
 * Skips the slot's own events and events known complete. Counts as `wt` uses of p (a group's
 * members): each skip wt times, and a wait inserted for them as wt - 1 coalesced. */
DV_HOT static void want(devrt_runtime* rt, unsigned slot, dv_pev* p, dv_wait* w, unsigned* n,
                        dv_counts* c, unsigned wt) {
  if (DV_UNLIKELY(p->rt != rt)) {
    want_foreign(p, w, n, c, wt);
    return;
  }
  if (p->slot == slot) {
    c->same += wt;
    return;
  }
  if (dv_pev_done(rt, p)) {
    c->complete += wt;
    return;
  }
  unsigned k = wait_at[p->slot];
  if (k < *n && w[k].slot == p->slot) {
    c->coalesced += wt;
    if (p->seq > w[k].ev->seq) {
      dv_pev_ref(p);
      dv_pev_unref(rt, w[k].ev);
      w[k].ev = p;
    }
    return;
  }
  dv_pev_ref(p);
  wait_at[p->slot] = (uint16_t)*n;
  w[(*n)++] = (dv_wait){p->slot, false, p};
  c->coalesced += wt - 1;
}

DV_HOT static void gather(devrt_runtime* rt, const dv_track* t, devrt_access a, unsigned slot,
                          dv_wait* w, unsigned* n, dv_counts* c, unsigned wt) {
  if (t->writer) want(rt, slot, t->writer, w, n, c, wt);
  /* a read waits for the entries that cover a write too */
  for (unsigned k = 0; k < t->nreaders; k++)
    if ((a & DEVRT_ACCESS_WRITE) || t->readers[k].wrote)
      want(rt, slot, t->readers[k].ev, w, n, c, wt);
}

DV_HOT static void drop_waits(devrt_runtime* rt, dv_wait* w, unsigned n) {
  for (unsigned k = 0; k < n; k++) dv_pev_unref(rt, w[k].ev);
}

/* The references to mark `of` that recording access a of `slot` on t will replace. */
DV_HOT static uint32_t drops_of(const dv_track* t, devrt_access a, const dv_pev* of) {
  uint32_t n = (a & DEVRT_ACCESS_WRITE) && t->writer == of;
  for (unsigned k = 0; k < t->nreaders; k++)
    if (t->readers[k].ev == of) return n + 1; /* of is slot's: only its entry can match */
  return n;
}

/* References moved by one pass over blocks: the new event's given in one add before the pass,
 * the old events' losses grouped per event (most blocks of a launch share their old event too)
 * and dropped after it. */
typedef struct refs {
  dv_pev* ev;
  uint32_t gain, given; /* references to ev the records took; those provided for them */
  unsigned n;           /* entries of drop and cnt in use (only those are initialized) */
  dv_pev* drop[8];
  uint32_t cnt[8];
} refs;
/* Leaves the arrays as they are: every launch builds one. */
DV_HOT static void refs_init(refs* r, dv_pev* ev) { r->ev = ev, r->gain = r->given = 0, r->n = 0; }

DV_HOT static void drop(devrt_runtime* rt, refs* r, dv_pev* p) {
  for (unsigned k = 0; k < r->n; k++)
    if (r->drop[k] == p) {
      r->cnt[k]++;
      return;
    }
  if (r->n == 8) {
    dv_pev_unref(rt, p);
    return;
  }
  r->drop[r->n] = p, r->cnt[r->n++] = 1;
}

/* Provides n references to r->ev for the records about to take it, before any can: once a record
 * is unlocked, another thread may replace the event there and drop that reference at once.
 * With `donate` the caller's own reference is one of them. */
DV_HOT static void refs_give(refs* r, uint32_t n, bool donate) {
  r->given = n > donate ? n : donate;
  if (r->given > donate)
    atomic_fetch_add_explicit(&r->ev->refs, r->given - donate, memory_order_relaxed);
}

/* Takes back the references given but not taken, and drops the old events'. */
DV_HOT static void refs_apply(devrt_runtime* rt, refs* r) {
  if (r->given > r->gain) dv_pev_unref_n(rt, r->ev, r->given - r->gain);
  for (unsigned k = 0; k < r->n; k++) dv_pev_unref_n(rt, r->drop[k], r->cnt[k]);
}

DV_HOT static void clear_readers(devrt_runtime* rt, dv_track* t, refs* r) {
  for (unsigned k = 0; k < t->nreaders; k++) drop(rt, r, t->readers[k].ev);
  t->nreaders = 0;
}
DV_HOT static void clear_track(devrt_runtime* rt, dv_track* t, refs* r) {
  clear_readers(rt, t, r);
  if (t->writer) drop(rt, r, t->writer);
  t->writer = NULL;
  t->epoch++;
}

/* Room for the one entry a record adds at most. A record runs under its track's lock and never
 * allocates, frees or waits there: has_room() drops the entries known complete (atomics only)
 * and says whether one is free; if none is, the caller drops its lock, calls grow_unlocked(),
 * takes the lock again and asks again (the track may have changed meanwhile). */
/* Takes entry k out of t (its reference to r's drops); the last entry moves into its place. */
DV_HOT static void drop_entry(devrt_runtime* rt, dv_track* t, unsigned k, refs* r) {
  drop(rt, r, t->readers[k].ev);
  t->readers[k] = t->readers[--t->nreaders];
}

DV_HOT static bool has_room(devrt_runtime* rt, dv_track* t, refs* r) {
  if (DV_LIKELY(t->nreaders < t->capreaders)) return true;
  for (unsigned k = 0; k < t->nreaders;)
    if (dv_pev_done(rt, t->readers[k].ev))
      drop_entry(rt, t, k, r);
    else
      k++;
  return t->nreaders < t->capreaders;
}

/* With t's lock (*mu) not held, its owner kept alive by the caller: installs a list twice as long
 * (allocated and the old one freed outside the lock), or, out of host memory, waits on the host
 * for the oldest entry (then known complete: the next has_room drops it). False if neither could
 * be done (the device is lost). */
static DV_NOINLINE bool grow_unlocked(devrt_runtime* rt, dv_track* t, dv_spin* mu) {
  dv_spin_lock(mu);
  unsigned cap = t->capreaders * 2u;
  dv_pev* oldest = t->nreaders ? t->readers[0].ev : NULL;
  if (oldest) dv_pev_ref(oldest);
  dv_spin_unlock(mu);
  dv_wait *v = cap <= UINT16_MAX ? malloc(cap * sizeof *v) : NULL, *spare = NULL;
  bool ok = v != NULL;
  if (v) {
    dv_spin_lock(mu);
    if (t->capreaders < cap) { /* nobody grew it meanwhile */
      memcpy(v, t->readers, t->nreaders * sizeof *v);
      spare = t->readers != t->inl ? t->readers : NULL;
      t->readers = v, t->capreaders = (uint16_t)cap;
      v = NULL;
    }
    dv_spin_unlock(mu);
    free(v), free(spare);
  } else if (oldest && dv_pev_realize(rt, oldest, NULL) == DEVRT_OK) {
    uint8_t rec = atomic_load_explicit(&oldest->rec, memory_order_acquire);
    ok = rec == DV_PEV_DONE ||
         (rec == DV_PEV_RECORDED && rt->be->event_sync(oldest->ev) == DEVRT_OK);
    if (ok)
      dv_events_sync_end(oldest->rt, oldest->slot,
                         atomic_load(&oldest->seq)); /* complete: so are all before */
  }
  if (oldest) dv_pev_unref(rt, oldest);
  return ok;
}

/* Whether the write marked by ev, on `slot`, is known to end after p's point, so it may replace
 * p: `waited` (slot waited for the whole track, p included, unless p is slot's own: a thread
 * sharing the stream may have marked a later point), p is an earlier point of the same stream,
 * or p has completed. Each stays true (seq is final for both, dv_pev_done's is). */
DV_HOT static bool replaces(devrt_runtime* rt, const dv_pev* ev, unsigned slot, const dv_pev* p,
                            bool waited) {
  bool same = p->slot == slot && p->rt == ev->rt; /* a slot is (runtime, index) */
  return (waited && !same) ||
         (same && atomic_load_explicit(&p->seq, memory_order_relaxed) <=
                      atomic_load_explicit(&ev->seq, memory_order_relaxed)) ||
         dv_pev_done(rt, p);
}

/* Keeps p (the caller's reference to it moves here) as `slot`'s entry, covering a write if
 * `wrote`: an entry of the slot already there keeps the newer of the two points (a stream's newer
 * point covers its older ones) and covers a write if either did; the other goes. The caller made
 * room for one entry (has_room). */
DV_HOT static void keep_entry(devrt_runtime* rt, dv_track* t, unsigned slot, dv_pev* p, bool wrote,
                              refs* r) {
  unsigned k = 0; /* a slot is (runtime, index): a peer's slot of the same index is another */
  while (k < t->nreaders && (t->readers[k].slot != slot || t->readers[k].ev->rt != p->rt)) k++;
  if (k < t->nreaders) {
    dv_wait* e = &t->readers[k];
    bool newer = atomic_load_explicit(&p->seq, memory_order_relaxed) >=
                 atomic_load_explicit(&e->ev->seq, memory_order_relaxed);
    drop(rt, r, newer ? e->ev : p);
    if (newer) e->ev = p;
    e->wrote |= wrote;
    return;
  }
  DV_ASSERT(t->nreaders < t->capreaders);
  t->readers[t->nreaders++] = (dv_wait){slot, wrote, p};
}

/* Records a write by `slot` at r->ev. What it replaces goes only where the write is known to end
 * after it (replaces(): `waited` means the caller's stream waited for everything the track held,
 * as its epoch shows; the waits realized those marks, so their points are final). Anything
 * else (a use on another stream that the writing stream never waited for: a finish without a
 * matching prepare, two threads writing one block at once) stays as an entry, so a later write
 * or free still waits for it; a replaced writer's entry covers a write, so later reads wait for
 * it as well as for the new writer (two writes not ordered are both "the last"). */
DV_HOT static void record_write(devrt_runtime* rt, dv_track* t, unsigned slot, refs* r,
                                bool waited) {
  for (unsigned k = 0; k < t->nreaders;)
    if (replaces(rt, r->ev, slot, t->readers[k].ev, waited))
      drop_entry(rt, t, k, r);
    else
      k++;
  dv_pev* old = t->writer;
  if (old && replaces(rt, r->ev, slot, old, waited))
    drop(rt, r, old);
  else if (old)
    keep_entry(rt, t, old->slot, old, true, r);
  t->writer = r->ev;
  r->gain++;
}

/* Records a use by `slot` at r->ev (with room made for one entry: a record adds at most one). */
DV_HOT static void record_use(devrt_runtime* rt, dv_track* t, devrt_access a, unsigned slot,
                              refs* r, bool waited) {
  if (a & DEVRT_ACCESS_WRITE) {
    record_write(rt, t, slot, r, waited);
  } else {
    keep_entry(rt, t, slot, r->ev, false, r);
    r->gain++; /* (dropped again by keep_entry if the slot's entry was newer: counted by drop) */
  }
  t->epoch++;
}

/* ---- groups ---- */

/* A pooled group with room for n members (NULL: no host memory). */
static dv_group* group_take(struct dv_blocks* bt, unsigned n) {
  bool big = n > GROUP_SMALL;
  pthread_mutex_lock(&bt->group_mu);
  dv_group* g = bt->groups[big];
  if (g)
    bt->groups[big] = g->next;
  else if ((g = dv_zalloc_lines(offsetof(dv_group, h) +
                                (big ? GROUP_MAX : GROUP_SMALL) * sizeof *g->h)) != NULL) {
    g->t.readers = g->t.inl, g->t.capreaders = INLINE_READERS;
    g->big = big;
    g->all = bt->all_groups, bt->all_groups = g;
  }
  pthread_mutex_unlock(&bt->group_mu);
  return g;
}

static void group_give(struct dv_blocks* bt, dv_group* g) {
  pthread_mutex_lock(&bt->group_mu);
  g->next = bt->groups[g->big], bt->groups[g->big] = g;
  pthread_mutex_unlock(&bt->group_mu);
}

/* Gives every member of g the group's state (and its pins) back; g goes back to the pool. */
static DV_NOINLINE void dissolve(devrt_runtime* rt, dv_group* g) {
  glock(g);
  if (!g->live) {
    gunlock(g);
    return;
  }
  refs r = {0};
  for (unsigned k = 0; k < g->n; k++) {
    dv_blk* b = record_of(rt, g->h[k]); /* a member is live: a free dissolves its group first */
    lock(b);
    if ((b->t.writer = g->t.writer) != NULL) dv_pev_ref(b->t.writer);
    DV_ASSERT(b->t.nreaders == 0 &&
              g->t.nreaders <= b->t.capreaders); /* a group's list never grows */
    for (unsigned j = 0; j < g->t.nreaders; j++) {
      dv_pev_ref(g->t.readers[j].ev);
      b->t.readers[b->t.nreaders++] = g->t.readers[j];
    }
    b->pins += g->pins;
    atomic_store_explicit(&b->group, NULL, memory_order_relaxed);
    touched(b);
    unlock(b);
  }
  clear_track(rt, &g->t, &r);
  g->live = false, g->gen++, g->n = 0, g->pins = 0;
  gunlock(g);
  refs_apply(rt, &r);
  group_give(rt->blocks, g);
}

/* As get_ready, with the block's own tracking state (its group dissolved). */
static dv_blk* get_tracked(devrt_runtime* rt, devrt_block h, const char* call, devrt_status* st) {
  for (;;) {
    dv_blk* b = get_ready(rt, h, call, st);
    dv_group* g = b ? atomic_load_explicit(&b->group, memory_order_relaxed) : NULL;
    if (!g) return b;
    unlock(b);
    dissolve(rt, g);
  }
}

static void lock_tracked(devrt_runtime* rt, dv_blk* b) {
  lock(b);
  for (dv_group* g; (g = atomic_load_explicit(&b->group, memory_order_relaxed)) != NULL; lock(b)) {
    unlock(b);
    dissolve(rt, g);
  }
}

/* b locked (its group dissolved), with room for one more entry; b is pinned, or kept from being
 * freed by its slot's `issuing` flag (the repeat path's fallback). */
static void lock_with_room(devrt_runtime* rt, dv_blk* b, refs* r) {
  lock_tracked(rt, b);
  while (DV_UNLIKELY(!has_room(rt, &b->t, r))) {
    unlock(b);
    bool ok = grow_unlocked(rt, &b->t, &b->lock);
    lock_tracked(rt, b);
    if (!ok && !has_room(rt, &b->t, r)) drop_entry(rt, &b->t, 0, r); /* device lost: nothing runs */
  }
}

static bool same_track(const dv_track* a, const dv_track* b) {
  if (a->writer != b->writer || a->nreaders != b->nreaders) return false;
  for (unsigned k = 0; k < a->nreaders; k++) {
    unsigned j = 0;
    while (j < b->nreaders &&
           (b->readers[j].slot != a->readers[k].slot || b->readers[j].ev != a->readers[k].ev ||
            b->readers[j].wrote != a->readers[k].wrote))
      j++;
    if (j == b->nreaders) return false;
  }
  return true;
}

/* After a launch through the usual path that used the same set of blocks as each one's previous
 * use, with one access: their states (the same on each, unless another thread came between)
 * move into one group. Blocks another launch has pinned are left alone. */
static DV_NOINLINE void group_form(devrt_runtime* rt, const dv_uses* x) {
  const devrt_block_use* u = x->u;
  unsigned n = x->n;
  for (unsigned k = 1; k < n; k++)
    if (u[k].access != u[0].access) return;
  dv_group* g = n <= GROUP_MAX ? group_take(rt->blocks, n) : NULL;
  if (!g) return;
  refs r = {0};
  unsigned k = 0;
  glock(g);
  for (; k < n; k++) {
    dv_blk* b = x->b[k];
    lock(b);
    bool ok = b->live && b->gen == u[k].block >> INDEX_BITS && !b->pins &&
              !atomic_load_explicit(&b->group, memory_order_relaxed);
    /* the first member's references become the group's (whose list stays inline: never grown) */
    if (ok && k == 0 && (ok = b->t.nreaders <= g->t.capreaders)) {
      g->t.writer = b->t.writer, g->t.nreaders = b->t.nreaders;
      memcpy(g->t.readers, b->t.readers, b->t.nreaders * sizeof *b->t.readers);
      b->t.writer = NULL, b->t.nreaders = 0;
    } else if (ok && (ok = same_track(&b->t, &g->t))) {
      clear_track(rt, &b->t, &r);
    }
    if (ok) {
      /* release: publishes g to launches that read b->group without b's lock */
      atomic_store_explicit(&b->group, g, memory_order_release);
      g->h[k] = u[k].block;
      touched(b);
    }
    unlock(b);
    if (!ok) break;
  }
  g->n = k, g->live = true;
  g->t.epoch++;
  gunlock(g);
  refs_apply(rt, &r);
  if (k < n) dissolve(rt, g); /* the members so far get their state back */
}

/* True if u's blocks, each a member of g and used with one access, are all g's members: each
 * named once (the caller's list is not deduplicated yet). Out of line: the slot's last group
 * matches in its own order. */
static DV_NOINLINE bool same_set(devrt_runtime* rt, dv_group* g, const devrt_block_use* u,
                                 unsigned n) {
  for (unsigned k = 0; k < n; k++) {
    dv_blk* b = record_of(rt, u[k].block);
    if (!b || atomic_load_explicit(&b->group, memory_order_relaxed) != g ||
        b->gen != u[k].block >> INDEX_BITS || u[k].access != u[0].access)
      return false;
    for (unsigned j = 0; j < k; j++)
      if (u[j].block == u[k].block) return false;
  }
  return true;
}

/* True, with g locked, if u's blocks are exactly g's members (in g's order, or with any_order in
 * any order), used with one access. */
DV_HOT static bool group_match(devrt_runtime* rt, dv_group* g, const devrt_block_use* u, unsigned n,
                               bool any_order) {
  glock(g);
  if (g->live && g->n == n) {
    uint64_t diff = 0; /* branch-free: a match compares every member anyway */
    for (unsigned k = 0; k < n; k++)
      diff |= (u[k].block ^ g->h[k]) | (uint64_t)(u[k].access ^ u[0].access);
    if (!diff || (any_order && same_set(rt, g, u, n))) return true;
  }
  gunlock(g);
  return false;
}

/* The group whose members are exactly x's blocks, used with one valid access (the slot's last
 * group first, in its order; else the first block's, in any order): pinned, with its waits
 * gathered (counted as if block by block); false if there is none. x may be the caller's list as
 * it is, neither checked nor deduplicated. */
static DV_INLINE bool group_pin(devrt_runtime* rt, const dv_uses* x, unsigned slot, dv_wait* w,
                                unsigned* nw, const dv_pev* of, uint32_t* drops, dv_pinned* how,
                                dv_counts* c) {
  const devrt_block_use* u = x->u;
  unsigned n = x->n;
  if (!n || n > GROUP_MAX || !dv_access_ok(u[0].access)) return false;
  dv_evslot* es = &rt->evslots[slot];
  /* the slot's last group, in the same order (acquire: its publication, passed on) */
  dv_group* g = atomic_load_explicit(&es->group, memory_order_acquire);
  if (DV_UNLIKELY(!g || !group_match(rt, g, u, n, false))) {
    dv_blk* b0 = record_of(rt, u[0].block);
    if (!b0 || !(g = atomic_load_explicit(&b0->group, memory_order_acquire)) ||
        !group_match(rt, g, u, n, true))
      return false;
    atomic_store_explicit(&es->group, g, memory_order_release); /* passes g's publication on */
  }
  g->pins++;
  gather(rt, &g->t, u[0].access, slot, w, nw, c, n); /* counted as if block by block */
  if (of) *drops = drops_of(&g->t, u[0].access, of);
  how->g = g, how->gen = g->gen, how->epoch = g->t.epoch;
  gunlock(g);
  c->grouped++;
  return true;
}

/* ---- the steps of a tracked use ---- */

/* dv_uses_pin block by block, x checked and deduplicated. */
static devrt_status pin_each(devrt_runtime* rt, dv_uses* x, unsigned slot, dv_wait* w, unsigned* nw,
                             const dv_pev* of, uint32_t* drops, const char* call,
                             dv_counts* counted) {
  const devrt_block_use* u = x->u;
  unsigned n = x->n;
  devrt_status st = DEVRT_OK;
  uint32_t d = 0;
  dv_counts c = {0};
  unsigned k = 0;
  for (; k < n; k++) {
    dv_blk* b = get_tracked(rt, u[k].block, call, &st);
    devrt_runtime* o; /* a runtime rt has peer access with: work on rt may use its blocks */
    if (DV_UNLIKELY(!b) && st == DEVRT_ERR_STALE_BLOCK && (o = peer_owner(rt, u[k].block))) {
      if ((b = get_tracked(o, u[k].block, call, &st)) != NULL) dv_error_clear(); /* not stale */
      x->peer = true;
    }
    if (DV_UNLIKELY(!b)) break;
    if (DV_UNLIKELY(b->pins & FREEING)) {
      unlock(b);
      st = dv_fail(DEVRT_ERR_INVALID_STATE,
                   "%s: block %#" PRIx64 " is being freed by another thread", call, u[k].block);
      break;
    }
    b->pins++;
    gather(rt, &b->t, u[k].access, slot, w, nw, &c, 1);
    if (of) d += drops_of(&b->t, u[k].access, of);
    x->epoch[k] = b->t.epoch;
    unlock(b);
    x->b[k] = b;
  }
  if (DV_LIKELY(k == n)) {
    counted->same += c.same, counted->complete += c.complete, counted->coalesced += c.coalesced;
    if (drops) *drops = d;
    return DEVRT_OK;
  }
  while (k--) {
    lock(x->b[k]); /* pinned: never grouped meanwhile */
    x->b[k]->pins--;
    unlock(x->b[k]);
  }
  drop_waits(rt, w, *nw);
  *nw = 0;
  return st;
}

devrt_status dv_uses_check(const devrt_block_use* u, unsigned n, const char* call) {
  for (unsigned i = 0; i < n; i++)
    if (!dv_access_ok(u[i].access))
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                     "%s: use %u: access %d is not READ, WRITE or READ_WRITE", call, i,
                     (int)u[i].access);
  return DEVRT_OK;
}

/* A 256-bit filter of block handles: adding one says whether it may have been added before. */
typedef struct filter {
  uint64_t w[4];
} filter;
static bool filter_add(filter* f, devrt_block h) {
  unsigned i = (unsigned)((h * 0x9e3779b97f4a7c15ull) >> 56);
  uint64_t bit = 1ull << (i & 63), had = f->w[i >> 6] & bit;
  f->w[i >> 6] |= bit;
  return had;
}

/* x->u copied to x->merged, each block once with both accesses where it is named twice
 * (read + write -> read-write). */
static void merge(dv_uses* x) {
  const devrt_block_use* in = x->u;
  unsigned n = x->n;
  filter f = {{0}};
  x->u = x->merged, x->n = 0;
  for (unsigned i = 0; i < n; i++) {
    unsigned j = filter_add(&f, in[i].block) ? 0 : x->n;
    while (j < x->n && x->merged[j].block != in[i].block) j++;
    if (j == x->n)
      x->merged[x->n++] = in[i];
    else
      x->merged[j].access |= in[i].access;
  }
}

/* Whether x->u names a block twice (the filter spares the search for most entries). */
static bool named_twice(const dv_uses* x) {
  filter f = {{0}};
  for (unsigned i = 0; i < x->n; i++)
    if (filter_add(&f, x->u[i].block))
      for (unsigned j = 0; j < i; j++)
        if (x->u[j].block == x->u[i].block) return true;
  return false;
}

/* dv_uses_pin past its group path: the uses checked, then deduplicated (whose list may then be a
 * group's), then pinned block by block. Out of line, so a grouped launch's code stays together. */
static DV_NOINLINE DV_FLATTEN devrt_status pin_checked(devrt_runtime* rt, dv_uses* x, unsigned slot,
                                                       dv_wait* w, unsigned* nw, const dv_pev* of,
                                                       uint32_t* drops, const char* call,
                                                       dv_pinned* how, dv_counts* c) {
  DV_CHECK(dv_uses_check(x->u, x->n, call));
  if (x->n > 1 && named_twice(x)) {
    merge(x);
    if (group_pin(rt, x, slot, w, nw, of, drops, how, c)) return DEVRT_OK;
  }
  return pin_each(rt, x, slot, w, nw, of, drops, call, c);
}

DV_HOT devrt_status dv_uses_pin(devrt_runtime* rt, dv_uses* x, unsigned slot, dv_wait* w,
                                unsigned* nw, const dv_pev* of, uint32_t* drops, const char* call,
                                dv_pinned* how, dv_counts* c) {
  if (group_pin(rt, x, slot, w, nw, of, drops, how, c)) return DEVRT_OK;
  return pin_checked(rt, x, slot, w, nw, of, drops, call, how, c);
}

DV_HOT devrt_status dv_waits_issue(devrt_runtime* rt, dv_stream* s, unsigned slot, dv_wait* w,
                                   unsigned n, const dv_pev* of, uint32_t drops, dv_counts* c) {
  devrt_status st = DV_UNLIKELY(dv_wait_foreign == DV_WAIT_SHORT)
                        ? dv_fail(DEVRT_ERR_INVALID_STATE,
                                  "peer access was enabled while this call gathered its waits, "
                                  "which outgrew their list: nothing was enqueued; call again")
                        : dv_slot_settle(rt, slot, of, drops, &c->late);
  for (unsigned k = 0; k < n && st == DEVRT_OK; k++) st = dv_pev_wait(rt, s, w[k].ev, &c->late);
  if (st == DEVRT_OK) c->waits += n;
  drop_waits(rt, w, n);
  return st;
}

/* A hash of a set of handles, whatever their order. */
DV_HOT static uint32_t set_of(const devrt_block_use* u, unsigned n) {
  uint64_t h = 0;
  for (unsigned k = 0; k < n; k++) h += (u[k].block ^ (u[k].block >> 29)) * 0xbf58476d1ce4e5b9ull;
  return (uint32_t)(h >> 32);
}

/* dv_uses_finish block by block (out of line, so a grouped launch's code stays together). */
static DV_NOINLINE DV_FLATTEN uint32_t finish_each(devrt_runtime* rt, dv_uses* x, unsigned slot,
                                                   refs* r, bool donate, const dv_pinned* how) {
  const devrt_block_use* u = x->u;
  unsigned n = x->n;
  dv_pev* ev = r->ev;
  dv_group* g = how ? how->g : NULL;
  if (g) /* dissolved meanwhile: the members hold its pins, and their own state */
    for (unsigned k = 0; k < n; k++) x->b[k] = record_of(rt, u[k].block);
  if (ev) refs_give(r, n, donate);
  uint32_t set = set_of(u, n);
  bool again = true;
  for (unsigned k = 0; k < n; k++) {
    dv_blk* b = x->b[k];
    if (ev)
      lock_with_room(rt, b, r);
    else
      lock_tracked(rt, b);
    DV_ASSERT(!how || (b->pins & ~FREEING)); /* pinned: a free waits for this finish */
    if (ev) { /* waited: pinned here, its waits gathered and issued, and not changed since */
      record_use(rt, &b->t, u[k].access, slot, r, how && !g && b->t.epoch == x->epoch[k]);
      touched(b);
      if (!x->peer) add_user(b, slot); /* peer launches never repeat */
    }
    again = again && b->lastset == set &&
            (n > 1 || b->lastslot != slot); /* alone on one stream: the repeat path's */
    b->lastset = set, b->lastslot = slot;
    b->pins -= how != NULL;
    x->ver[k] = atomic_load_explicit(&b->ver, memory_order_relaxed);
    unlock(b);
  }
  uint32_t gain = r->gain;
  refs_apply(rt, r);
  if (again && n && ev && how && !g && !x->peer) group_form(rt, x);
  return gain;
}

DV_HOT uint32_t dv_uses_finish(devrt_runtime* rt, dv_uses* x, unsigned slot, dv_pev* ev,
                               dv_pev* old, bool donate, const dv_pinned* how) {
  refs r;
  refs_init(&r, ev);
  if (old) drop(rt, &r, old);
  dv_group* g = how ? how->g : NULL;
  if (!g) return finish_each(rt, x, slot, &r, donate, how);
  glock(g);
  if (DV_UNLIKELY(g->gen != how->gen)) {
    gunlock(g);
    return finish_each(rt, x, slot, &r, donate, how);
  }
  DV_ASSERT(g->pins > 0);
  if (ev && DV_UNLIKELY(!has_room(rt, &g->t, &r))) { /* a group's list never grows: its members */
    gunlock(g);                                      /* go back to their own, block by block */
    dissolve(rt, g);
    return finish_each(rt, x, slot, &r, donate, how);
  }
  if (ev) {
    refs_give(&r, 1, donate);
    record_use(rt, &g->t, x->u[0].access, slot, &r, g->t.epoch == how->epoch);
  }
  g->pins--;
  gunlock(g);
  refs_apply(rt, &r);
  return 0;
}

/* ---- the repeat path ---- */

typedef struct dv_repeat {
  unsigned n;
  uint32_t gain; /* the references the blocks hold to mark */
  dv_pev* mark;  /* the launch's mark (no reference: compared with the slot's newest) */
  devrt_block_use u[DEVRT_LAUNCH_MAX_USES];
  dv_blk* b[DEVRT_LAUNCH_MAX_USES];
  uint64_t ver[DEVRT_LAUNCH_MAX_USES];
} dv_repeat;

/* Launches that skip saving their uses after a repeated mark was needed by another stream (as in
 * a producer/consumer pair, where the repeat path never holds). */
#define REPEAT_COLD 16u

static void release_issuing(dv_evslot* es) {
  atomic_store_explicit(&es->issuing, false, memory_order_release);
}

static bool claim_issuing(dv_evslot* es) {
  bool z = false; /* seq_cst: against dv_block_free_on's version bump and check of this flag */
  return atomic_compare_exchange_strong(&es->issuing, &z, true);
}

DV_HOT bool dv_repeat_try(devrt_runtime* rt, unsigned slot, const dv_uses* x) {
  dv_evslot* es = &rt->evslots[slot];
  unsigned n = x->n;
  dv_pev* m = atomic_load_explicit(&es->last, memory_order_acquire);
  if (!n || !m || atomic_load_explicit(&es->rep_mark, memory_order_relaxed) != m) return false;
  if (atomic_load_explicit(&m->rec, memory_order_relaxed) !=
      DV_PEV_LAZY) { /* another stream needed it */
    atomic_store_explicit(&es->rep_cold, REPEAT_COLD, memory_order_relaxed);
    return false;
  }
  if (!claim_issuing(es)) return false;
  dv_repeat* r = es->rep;
  bool same = r->n == n && m == r->mark &&
              atomic_load_explicit(&m->rec, memory_order_acquire) == DV_PEV_LAZY &&
              atomic_load_explicit(&m->refs, memory_order_acquire) == 1 + r->gain;
  for (unsigned k = 0; same && k < n; k++)
    same = r->u[k].block == x->u[k].block && r->u[k].access == x->u[k].access &&
           atomic_load(&r->b[k]->ver) == r->ver[k];
  if (!same) release_issuing(es);
  return same;
}

devrt_status dv_repeat_end(devrt_runtime* rt, unsigned slot, dv_uses* x, bool ok) {
  dv_evslot* es = &rt->evslots[slot];
  dv_repeat* r = es->rep;
  dv_pev* m = r->mark;
  bool moved = !ok; /* nothing was enqueued: nothing to mark */
  dv_spin_lock(&es->mu);
  uint8_t lazy = DV_PEV_LAZY;
  if (ok && atomic_load_explicit(&es->last, memory_order_relaxed) == m &&
      atomic_compare_exchange_strong(&m->rec, &lazy,
                                     DV_PEV_RECORDING)) { /* realizers wait while it moves */
    uint64_t seq = atomic_load_explicit(&es->seq, memory_order_relaxed) + 1;
    atomic_store(&m->seq, seq);
    atomic_store_explicit(&es->seq, seq, memory_order_release);
    atomic_store_explicit(&m->rec, DV_PEV_LAZY, memory_order_release);
    es->deferred++;
    moved = true;
    dv_counts_add_locked(es, &(dv_counts){.repeats = 1, .launches = 1});
  }
  dv_spin_unlock(&es->mu);
  devrt_status st = DEVRT_OK;
  if (!moved) { /* the mark was needed meanwhile: a new one, recorded on each block (frees wait for
                   us) */
    dv_pev *ev = NULL, *old = NULL;
    memcpy(x->b, r->b, x->n * sizeof *x->b);
    if ((st = dv_pev_mark(rt, slot, &ev, &old, &(dv_counts){.launches = 1})) != DEVRT_OK) {
      rt->be->stream_sync(rt->slots[slot].s); /* the work cannot be tracked: let it finish */
      ev = NULL;
    }
    r->gain = dv_uses_finish(rt, x, slot, ev, old, true, NULL);
    r->mark = ev;
    atomic_store_explicit(&es->rep_mark, ev, memory_order_relaxed);
    memcpy(r->ver, x->ver, x->n * sizeof *x->ver);
    if (!ev) r->n = 0;
  }
  release_issuing(es);
  return st;
}

/* Out of line: grouped launches never save, and most saves end at the first checks. */
DV_NOINLINE void dv_repeat_save(devrt_runtime* rt, unsigned slot, const dv_uses* x, dv_pev* ev,
                                uint32_t gain) {
  unsigned n = x->n;
  dv_evslot* es = &rt->evslots[slot];
  uint8_t cold = atomic_load_explicit(&es->rep_cold, memory_order_relaxed);
  if (cold)
    atomic_store_explicit(&es->rep_cold, (uint8_t)(cold - 1),
                          memory_order_relaxed); /* (a lost update costs a save) */
  if (!n || !ev || cold || !claim_issuing(es)) return;
  if (!es->rep) es->rep = malloc(sizeof *es->rep); /* no room: no repeat path on this slot */
  if (es->rep) {
    memcpy(es->rep->u, x->u, n * sizeof *x->u);
    memcpy(es->rep->b, x->b, n * sizeof *x->b);
    memcpy(es->rep->ver, x->ver, n * sizeof *x->ver);
    es->rep->n = n, es->rep->mark = ev, es->rep->gain = gain;
    atomic_store_explicit(&es->rep_mark, ev, memory_order_relaxed);
  }
  release_issuing(es);
}

/* ---- public ---- */

static uint32_t index_of(devrt_block h) { return (uint32_t)((h & ((1ull << INDEX_BITS) - 1)) - 1); }

devrt_status dv_block_reserve(devrt_runtime* rt, size_t size, devrt_stream stream, const char* tag,
                              devrt_block* out) {
  uint32_t i = 0;
  DV_CHECK(take_index(rt->blocks, DV_SID_SLOT(stream), &i));
  dv_blk* b = at(rt->blocks, i);
  lock(b);
  if (!b->t.readers) b->t.readers = b->t.inl, b->t.capreaders = INLINE_READERS;
  b->gen = atomic_fetch_add_explicit(&next_gen, 1, memory_order_relaxed) & GEN_MASK;
  b->live = b->pending = true;
  b->pins = 0;
  b->nusers = 0; /* a repeat of the last allocation cannot match this one's handle */
  b->ptr = NULL, b->size = size, b->tag = tag, b->stream = stream;
  b->t.writer = NULL;
  b->t.nreaders = 0;
  touched(b);
  *out = b->gen << INDEX_BITS | (i + 1);
  unlock(b);
  return DEVRT_OK;
}

void dv_block_cancel(devrt_runtime* rt, devrt_block h) {
  devrt_status st;
  dv_blk* b = get_locked(rt, h, "dv_block_cancel", &st);
  if (!b) return;
  b->live = b->pending = false;
  touched(b);
  unlock(b);
  give_index(rt->blocks, index_of(h));
}

devrt_status dv_block_commit(devrt_runtime* rt, devrt_block h, devrt_stream stream, dv_stream* s,
                             dv_pev** ready_out) {
  devrt_status st = DEVRT_OK;
  dv_blk* b = get_locked(rt, h, "devrt_block_alloc", &st);
  if (!b) return st;
  size_t size = b->size;
  const char* tag = b->tag;
  unlock(b); /* a pending block cannot be used or freed: nobody else touches it meanwhile */
  devrt_resource* top = NULL;
  void* p = NULL;
  dv_pev* ready = NULL; /* the allocation-ready event; its reference becomes the block's */
  if ((st = dv_slot_settle(rt, DV_SID_SLOT(stream), NULL, 0, NULL)) == DEVRT_OK &&
      (st = dv_stream_resource(rt, stream, &top)) == DEVRT_OK &&
      (st = devrt_resource_allocate(top, size, stream, tag, &p)) == DEVRT_OK &&
      (st = dv_pev_record(rt, DV_SID_SLOT(stream), s, &ready)) != DEVRT_OK)
    DV_KEEP_ERROR(devrt_resource_deallocate(top, p, size, stream)); /* the first error stands */
  if (st != DEVRT_OK) {
    dv_block_cancel(rt, h);
    return st;
  }
  if (ready_out) dv_pev_ref(ready), *ready_out = ready;
  lock(b);
  b->ptr = p, b->stream = stream, b->t.writer = ready, b->res = top;
  b->pending = false;
  touched(b);
  unlock(b);
  atomic_fetch_add_explicit(&rt->evslots[DV_SID_SLOT(stream)].allocs, 1, memory_order_relaxed);
  return DEVRT_OK;
}

devrt_status devrt_block_alloc(devrt_runtime* rt, size_t size, devrt_stream stream, const char* tag,
                               devrt_block* out) {
  DV_RT_CHECK(rt, "devrt_block_alloc");
  DV_ARG_CHECK(out && size, "devrt_block_alloc", "size %zu is 0 or out %p is NULL (tag %s)", size,
               (void*)out, tag ? tag : "untagged");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "devrt_block_alloc"));
  devrt_block h = 0;
  DV_CHECK(dv_block_reserve(rt, size, stream, tag, &h));
  DV_CHECK(dv_block_commit(rt, h, stream, s, NULL));
  *out = h;
  return DEVRT_OK;
}

/* The free is a write on the runtime's free stream: it waits for the last writer and every
 * reader still running, and no user stream is made to wait for it. */
devrt_status dv_block_free_on(devrt_runtime* rt, devrt_block h, devrt_stream fs, dv_stream* s) {
  unsigned slot = DV_SID_SLOT(fs);
  devrt_status st = DEVRT_OK;
  WAIT_BUF(rt, w); /* before the lock */
  if (!w) return dv_waits_refused(rt);
  dv_blk* b = get_tracked(rt, h, "devrt_block_free", &st);
  if (!b) return st;
  if (b->pins & FREEING) { /* two frees of one block at once: the caller's race */
    const char* tag = tag_of(b);
    unlock(b);
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_block_free: block %#" PRIx64 " (tag %s) is being freed by another thread",
                   h, tag);
  }
  if (b->pins && dv_in_enqueue) { /* waiting could wait for this thread's own launch */
    const char* tag = tag_of(b);
    unlock(b);
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_block_free: block %#" PRIx64
                   " (tag %s) is in a launch being issued, and this free runs inside an enqueue "
                   "callback, which must not wait for one: free it after the callback returns",
                   h, tag);
  }
  /* From here every new pin is refused; the launches and finishes that pinned b before are
   * recording their uses (a pin lasts one call's issue: short), and the free waits for them, so
   * it is ordered after the uses they record rather than refused because of their timing. */
  b->pins |= FREEING;
  while (b->pins != FREEING) {
    unlock(b);
    sched_yield();
    lock(b);
  }
  DV_ASSERT(b->live && b->gen == h >> INDEX_BITS); /* FREEING kept every other free away */
  touched(b); /* a repeat launch that saw the old version has claimed its slot: wait for it */
  uint16_t users[USERS_MAX];
  unsigned nusers = b->nusers;
  memcpy(users, b->users, sizeof users);
  unlock(b);
  for (unsigned i = 0; i < (nusers > USERS_MAX ? rt->nslots : nusers); i++)
    while (atomic_load(&rt->evslots[nusers > USERS_MAX ? i : users[i]].issuing)) sched_yield();
  lock(b);
  unsigned n = 0;
  dv_counts c = {0};
  gather(rt, &b->t, DEVRT_ACCESS_WRITE, slot, w, &n, &c, 1);
  uint32_t epoch = b->t.epoch;
  void* p = b->ptr;
  size_t size = b->size;
  devrt_resource* res = b->res;
  unlock(b);
  st = dv_waits_issue(rt, s, slot, w, n, NULL, 0, &c);
  dv_counts_flush(rt, slot, &c);
  if (st == DEVRT_OK) st = devrt_resource_deallocate(res, p, size, fs);
  refs r = {0};
  lock(b);
  /* FREEING refused every use since the gather: the free waited for every use ever recorded
   * that is not known complete or covered by one it waited for (record_write keeps the rest) */
  DV_ASSERT(b->pins == FREEING && b->t.epoch == epoch);
  touched(b); /* again: a repeat's fallback may have saved the version while we waited */
  if (st == DEVRT_OK) {
    b->live = false;
    clear_track(rt, &b->t, &r);
  }
  b->pins = 0; /* a refused free leaves the block as it was */
  unlock(b);
  refs_apply(rt, &r);
  if (st != DEVRT_OK) return st;
  give_index(rt->blocks, index_of(h));
  atomic_fetch_add_explicit(&rt->evslots[slot].frees, 1, memory_order_relaxed);
  return DEVRT_OK;
}

devrt_status devrt_block_free(devrt_runtime* rt, devrt_block h) {
  DV_RT_CHECK(rt, "devrt_block_free");
  devrt_stream fs = 0;
  dv_stream* s = NULL;
  DV_CHECK(dv_internal_stream(rt, &fs));
  DV_CHECK(dv_stream_get(rt, fs, &s, "devrt_block_free"));
  return dv_block_free_on(rt, h, fs, s);
}

devrt_status devrt_block_ptr(devrt_runtime* rt, devrt_block h, void** out) {
  DV_RT_CHECK(rt, "devrt_block_ptr");
  DV_ARG_CHECK(out, "devrt_block_ptr", "out is NULL");
  devrt_status st = DEVRT_OK;
  dv_blk* b = get_ready(rt, h, "devrt_block_ptr", &st);
  if (!b) return st;
  *out = b->ptr;
  unlock(b);
  return DEVRT_OK;
}

devrt_status devrt_block_info_get(devrt_runtime* rt, devrt_block h, devrt_block_info* out) {
  DV_RT_CHECK(rt, "devrt_block_info_get");
  DV_ARG_CHECK(out, "devrt_block_info_get", "out is NULL");
  devrt_status st = DEVRT_OK;
  dv_blk* b = get_tracked(rt, h, "devrt_block_info_get", &st);
  if (!b) return st;
  *out = (devrt_block_info){.ptr = b->ptr,
                            .size = b->size,
                            .tag = b->tag,
                            .stream = b->stream,
                            .generation = b->gen,
                            .readers = b->t.nreaders,
                            .writer_complete = !b->t.writer || dv_pev_passed(rt, b->t.writer)};
  unlock(b);
  return DEVRT_OK;
}

static devrt_status use_args(devrt_runtime* rt, devrt_stream stream, devrt_access a, dv_stream** s,
                             const char* call) {
  DV_RT_CHECK(rt, call);
  if (!dv_access_ok(a))
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: access %d is not READ, WRITE or READ_WRITE",
                   call, (int)a);
  return dv_stream_get(rt, stream, s, call);
}

devrt_status devrt_prepare_block_use(devrt_runtime* rt, devrt_block h, devrt_stream stream,
                                     devrt_access a) {
  dv_stream* s = NULL;
  DV_CHECK(use_args(rt, stream, a, &s, "devrt_prepare_block_use"));
  unsigned slot = DV_SID_SLOT(stream), n = 0;
  devrt_status st = DEVRT_OK;
  WAIT_BUF(rt, w);
  if (!w) return dv_waits_refused(rt);
  dv_blk* b = get_tracked(rt, h, "devrt_prepare_block_use", &st);
  if (b) {
    dv_counts c = {0};
    gather(rt, &b->t, a, slot, w, &n, &c, 1);
    uint32_t epoch = b->t.epoch;
    unlock(b);
    st = dv_waits_issue(rt, s, slot, w, n, NULL, 0, &c);
    dv_counts_flush(rt, slot, &c);
    lock(b); /* the witness a finish on this stream uses, if nothing changed meanwhile */
    if (st == DEVRT_OK && b->live && b->gen == h >> INDEX_BITS && b->t.epoch == epoch)
      b->prep_slot = slot + 1, b->prep_write = a & DEVRT_ACCESS_WRITE, b->prep_epoch = epoch;
    unlock(b);
  }
  return st;
}

/* Pins a live block for a finish (a free waits until the finish unpins it); INVALID_STATE if a
 * free is in progress, STALE_BLOCK if it is done. */
static devrt_status finish_pin(devrt_runtime* rt, devrt_block h, dv_blk** out) {
  devrt_status st = DEVRT_OK;
  dv_blk* b = get_tracked(rt, h, "devrt_finish_block_use", &st);
  if (!b) return st;
  if (b->pins & FREEING) {
    const char* tag = tag_of(b);
    unlock(b);
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_finish_block_use: block %#" PRIx64
                   " (tag %s) is being freed by another thread: the use is not recorded",
                   h, tag);
  }
  b->pins++;
  unlock(b);
  *out = b;
  return DEVRT_OK;
}

devrt_status devrt_finish_block_use(devrt_runtime* rt, devrt_block h, devrt_stream stream,
                                    devrt_access a) {
  dv_stream* s = NULL;
  DV_CHECK(use_args(rt, stream, a, &s, "devrt_finish_block_use"));
  unsigned slot = DV_SID_SLOT(stream);
  dv_blk* b = NULL;
  DV_CHECK(finish_pin(rt, h, &b)); /* before the record: a free waits for it, or is refused */
  dv_pev* ev = NULL;
  devrt_status st = dv_pev_record(rt, slot, s, &ev);
  refs r = {.ev = ev};
  if (st == DEVRT_OK) refs_give(&r, 1, false);
  if (ev)
    lock_with_room(rt, b, &r);
  else
    lock_tracked(rt, b);
  DV_ASSERT((b->pins & ~FREEING) && b->live); /* pinned: a free waits for this finish */
  if (ev) { /* waited: this stream's prepare waited as a write for what the track still holds */
    record_use(rt, &b->t, a, slot, &r,
               b->prep_slot == slot + 1 && b->prep_write && b->prep_epoch == b->t.epoch);
    touched(b);
  }
  b->pins--;
  unlock(b);
  refs_apply(rt, &r);
  if (ev) dv_pev_unref(rt, ev);
  return st;
}

devrt_status devrt_block_stats_get(devrt_runtime* rt, devrt_block_stats* out) {
  DV_RT_CHECK(rt, "devrt_block_stats_get");
  DV_ARG_CHECK(out, "devrt_block_stats_get", "out is NULL");
  *out = (devrt_block_stats){0};
  uint64_t frees = 0;
  for (unsigned i = 0; i < rt->nslots; i++) {
    dv_evslot* e = &rt->evslots[i];
    frees += atomic_load_explicit(&e->frees, memory_order_relaxed);
    out->blocks_allocated += atomic_load_explicit(&e->allocs, memory_order_relaxed);
    out->events_created += atomic_load_explicit(&e->created, memory_order_relaxed);
    dv_spin_lock(&e->mu);
    out->waits_inserted += e->n.waits, out->waits_skipped_same_stream += e->n.same;
    out->waits_skipped_complete += e->n.complete, out->waits_coalesced += e->n.coalesced;
    out->launches += e->n.launches;
    out->events_recorded += e->recorded + e->n.late, out->events_reused += e->reused;
    dv_spin_unlock(&e->mu);
  }
  out->deferred_frees = frees;
  out->blocks_live = out->blocks_allocated - frees;
  out->stale_refusals = atomic_load_explicit(&rt->stale_refusals, memory_order_relaxed);
  out->refused_launches = atomic_load_explicit(&rt->refused_launches, memory_order_relaxed);
  devrt_resource* top = NULL;
  devrt_resource_figures f;
  if (atomic_load(&rt->stack) && devrt_runtime_resource(rt, &top) == DEVRT_OK &&
      devrt_resource_query(top, &f) == DEVRT_OK)
    out->reaped_bytes = f.reaped_bytes;
  return DEVRT_OK;
}

devrt_status dv_blocks_check_none(devrt_runtime* rt, const char* call) {
  struct dv_blocks* t = rt->blocks;
  uint32_t used = atomic_load(&t->next), live = 0;
  const char* tag = NULL;
  for (uint32_t i = 0; i < used; i++) {
    dv_blk* b = at(t, i);
    if (!b) continue;
    lock(b);
    if (b->live && !live++) tag = tag_of(b);
    unlock(b);
  }
  if (!live) return DEVRT_OK;
  return dv_fail(DEVRT_ERR_INVALID_STATE,
                 "%s: %u blocks are still live (one is tagged %s): free them first", call, live,
                 tag);
}

dv_block_paths dv_block_paths_get(devrt_runtime* rt) {
  dv_block_paths p = {0, 0, 0};
  for (unsigned i = 0; i < rt->nslots; i++) {
    dv_evslot* e = &rt->evslots[i];
    dv_spin_lock(&e->mu);
    p.marks_deferred += e->deferred, p.launches_repeated += e->n.repeats,
        p.launches_grouped += e->n.grouped;
    dv_spin_unlock(&e->mu);
  }
  return p;
}

devrt_status dv_block_check(devrt_runtime* rt, devrt_block h, const char* call) {
  devrt_status st = DEVRT_OK;
  dv_blk* b = get_locked(rt, h, call, &st);
  if (b) unlock(b);
  return st;
}

devrt_status dv_block_find(devrt_runtime* rt, devrt_block h, const char* call,
                           devrt_runtime** owner, void** ptr, size_t* size) {
  devrt_status st = DEVRT_OK;
  devrt_runtime* o = rt;
  dv_blk* b = get_ready(rt, h, call, &st);
  if (!b && st == DEVRT_ERR_STALE_BLOCK && (o = peer_owner(rt, h)) != NULL &&
      (b = get_ready(o, h, call, &st)) != NULL)
    dv_error_clear(); /* a peer's, not stale */
  if (!b) return st;
  *owner = o, *ptr = b->ptr, *size = b->size;
  unlock(b);
  return DEVRT_OK;
}

void dv_blocks_forget(devrt_runtime* rt, devrt_runtime* other) {
  struct dv_blocks* t = rt->blocks;
  uint32_t used = atomic_load(&t->next);
  for (uint32_t i = 0; i < used; i++) {
    dv_blk* b = at(t, i);
    if (!b) continue;
    refs r = {0};
    lock_tracked(rt, b); /* a group's track goes back to its members first */
    for (unsigned k = 0; k < b->t.nreaders;)
      if (b->t.readers[k].ev->rt == other)
        drop_entry(rt, &b->t, k, &r);
      else
        k++;
    if (b->t.writer && b->t.writer->rt == other) drop(rt, &r, b->t.writer), b->t.writer = NULL;
    if (r.n) touched(b);
    unlock(b);
    refs_apply(rt, &r);
  }
}

devrt_status dv_block_check_use(devrt_runtime* rt, devrt_block h, const char* call) {
  devrt_status st = dv_block_check(rt, h, call);
  if (st == DEVRT_ERR_STALE_BLOCK && peer_owner(rt, h)) {
    dv_error_clear();
    st = DEVRT_OK;
  }
  return st;
}

void dv_waits_add(devrt_runtime* rt, unsigned slot, dv_pev* p, dv_wait* w, unsigned* n) {
  dv_counts ignored = {0}; /* semaphore waits are the queue's to count, not use tracking's */
  dv_wait_foreign = DEVRT_QUEUE_MAX_WAITS; /* w has room for one per wait (every one a peer's) */
  want(rt, slot, p, w, n, &ignored, 1);
}
