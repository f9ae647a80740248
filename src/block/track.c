/* track.c: the use-tracking model. A block's track holds its last writer and, per stream slot, the
 * other uses a write or a free must wait for; a use gathers what its access must wait for (at
 * most one wait per source slot), and its record replaces what it is known to end after. The
 * steps of one piece of tracked work: pin and gather, issue the waits, record and unpin. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "blk.h"

/* ---- wait lists ---- */

static pthread_key_t room_key;
static pthread_once_t room_once = PTHREAD_ONCE_INIT;
static void room_key_make(void) { pthread_key_create(&room_key, free); }
static _Thread_local dv_wait* room; /* this thread's buffer (also under room_key, to free it) */
static _Thread_local unsigned room_n;
/* Where each source slot's entry sits in the wait list this thread is gathering (dv_waits.at). */
static _Thread_local uint16_t wait_at[DV_SID_SLOTS];
_Static_assert(DV_SID_SLOTS <= 65536, "wait_at holds list positions as uint16_t");
_Thread_local unsigned dv_in_enqueue;

devrt_status dv_waits_init(dv_waits* w, devrt_runtime* rt) {
  /* relaxed: a runtime whose links grow meanwhile makes the list short, which the issue refuses */
  w->foreign = atomic_load_explicit(&dv_peer_slots, memory_order_relaxed);
  unsigned n = rt->nslots + w->foreign;
  w->n = 0, w->at = wait_at, w->v = w->local, w->cap = sizeof w->local / sizeof w->local[0];
  if (DV_LIKELY(n <= w->cap)) return DEVRT_OK;
  if (n > room_n) { /* n is the runtime's slot count and its peers': grows rarely */
    pthread_once(&room_once, room_key_make);
    dv_wait* v = realloc(room, n * sizeof *v);
    if (!v) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "out of host memory for %u waits", n);
    pthread_setspecific(room_key, v);
    room = v, room_n = n;
  }
  w->v = room, w->cap = room_n;
  return DEVRT_OK;
}

/* want() for a peer runtime's mark (p->rt is not the list's runtime): its entry's slot carries
 * FOREIGN, so the list's position hints never confirm it, and it is found by a search of the list
 * (few such entries). No room left (peer access enabled since the list was sized): the list is
 * short, and dv_waits_issue refuses it. */
#define FOREIGN 0x80000000u
static DV_NOINLINE void want_foreign(dv_waits* w, dv_pev* p, dv_counts* c, unsigned wt) {
  if (dv_pev_done(p->rt, p)) {
    c->complete += wt;
    return;
  }
  for (unsigned k = 0; k < w->n; k++)
    if (w->v[k].slot == (p->slot | FOREIGN) && w->v[k].ev->rt == p->rt) {
      c->coalesced += wt;
      if (atomic_load_explicit(&p->seq, memory_order_relaxed) >
          atomic_load_explicit(&w->v[k].ev->seq, memory_order_relaxed)) {
        dv_pev_ref(p);
        dv_pev_unref(p->rt, w->v[k].ev);
        w->v[k].ev = p;
      }
      return;
    }
  if (w->foreign == 0 || w->foreign == DV_WAIT_SHORT) {
    w->foreign = DV_WAIT_SHORT;
    return;
  }
  w->foreign--;
  DV_ASSERT(w->n < w->cap);
  dv_pev_ref(p);
  w->v[w->n++] = (dv_wait){p->slot | FOREIGN, false, p};
  c->coalesced += wt - 1;
}

/* Adds event p to what stream `slot` of rt must wait for: at most one per source slot, the
 * newest. Skips the slot's own events and events known complete. Counts as `wt` uses of p (a
 * group's members): each skip wt times, and a wait inserted for them as wt - 1 coalesced. */
DV_HOT static void want(dv_waits* w, devrt_runtime* rt, unsigned slot, dv_pev* p, dv_counts* c,
                        unsigned wt) {
  if (DV_UNLIKELY(p->rt != rt)) {
    want_foreign(w, p, c, wt);
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
  unsigned k = w->at[p->slot];
  if (k < w->n && w->v[k].slot == p->slot) {
    c->coalesced += wt;
    if (atomic_load_explicit(&p->seq, memory_order_relaxed) >
        atomic_load_explicit(&w->v[k].ev->seq, memory_order_relaxed)) {
      dv_pev_ref(p);
      dv_pev_unref(rt, w->v[k].ev);
      w->v[k].ev = p;
    }
    return;
  }
  DV_ASSERT(w->n < w->cap); /* one entry per source slot: the list has room for each */
  dv_pev_ref(p);
  w->at[p->slot] = (uint16_t)w->n;
  w->v[w->n++] = (dv_wait){p->slot, false, p};
  c->coalesced += wt - 1;
}

DV_HOT void dv_track_gather(dv_work* k, const dv_track* t, devrt_access a, unsigned wt) {
  DV_ASSERT(dv_access_ok(a) && t->nreaders <= t->capreaders);
  if (t->writer) want(&k->w, k->rt, k->slot, t->writer, &k->c, wt);
  /* a read waits for the entries that cover a write too */
  for (unsigned i = 0; i < t->nreaders; i++)
    if ((a & DEVRT_ACCESS_WRITE) || t->readers[i].wrote)
      want(&k->w, k->rt, k->slot, t->readers[i].ev, &k->c, wt);
}

/* Drops every gathered wait's reference. */
DV_HOT static void dv_waits_drop(devrt_runtime* rt, dv_waits* w) {
  for (unsigned k = 0; k < w->n; k++) dv_pev_unref(rt, w->v[k].ev);
  w->n = 0;
}

DV_HOT uint32_t dv_track_drops(const dv_track* t, devrt_access a, const dv_pev* of) {
  uint32_t n = (a & DEVRT_ACCESS_WRITE) && t->writer == of;
  for (unsigned k = 0; k < t->nreaders; k++)
    if (t->readers[k].ev == of) return n + 1; /* of is slot's: only its entry can match */
  return n;
}

void dv_waits_add(dv_waits* w, devrt_runtime* rt, unsigned slot, dv_pev* p) {
  dv_counts ignored = {0}; /* semaphore waits are the queue's to count, not use tracking's */
  want(w, rt, slot, p, &ignored, 1);
}

/* ---- references ---- */

DV_HOT void dv_refs_drop(devrt_runtime* rt, dv_refs* r, dv_pev* p) {
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
DV_HOT void dv_refs_give(dv_refs* r, uint32_t n, bool donate) {
  DV_ASSERT(r->ev && r->given == 0); /* given once, before any record takes one */
  r->given = n > donate ? n : donate;
  if (r->given > donate)
    atomic_fetch_add_explicit(&r->ev->refs, r->given - donate, memory_order_relaxed);
}

/* Takes back the references given but not taken, and drops the old events'. */
DV_HOT void dv_refs_apply(devrt_runtime* rt, dv_refs* r) {
  DV_ASSERT(r->gain <= r->given || !r->ev); /* the records took no more than they were given */
  if (r->given > r->gain) dv_pev_unref_n(rt, r->ev, r->given - r->gain);
  for (unsigned k = 0; k < r->n; k++) dv_pev_unref_n(rt, r->drop[k], r->cnt[k]);
}

/* ---- a track ---- */

DV_HOT void dv_track_clear(devrt_runtime* rt, dv_track* t, dv_refs* r) {
  for (unsigned k = 0; k < t->nreaders; k++) dv_refs_drop(rt, r, t->readers[k].ev);
  t->nreaders = 0;
  if (t->writer) dv_refs_drop(rt, r, t->writer);
  t->writer = NULL;
  t->epoch++;
}

/* Room for the one entry a record adds at most. A record runs under its track's lock and never
 * allocates, frees or waits there: dv_track_has_room() drops the entries known complete (atomics
 * only) and says whether one is free; if none is, the caller drops its lock, calls
 * grow_unlocked(), takes the lock again and asks again (the track may have changed meanwhile). */
/* Takes entry k out of t (its reference to r's drops); the last entry moves into its place. */
DV_HOT void dv_track_drop_entry(devrt_runtime* rt, dv_track* t, unsigned k, dv_refs* r) {
  DV_ASSERT(k < t->nreaders);
  dv_refs_drop(rt, r, t->readers[k].ev);
  t->readers[k] = t->readers[--t->nreaders];
}

DV_HOT bool dv_track_has_room(devrt_runtime* rt, dv_track* t, dv_refs* r) {
  if (DV_LIKELY(t->nreaders < t->capreaders)) return true;
  for (unsigned k = 0; k < t->nreaders;)
    if (dv_pev_done(rt, t->readers[k].ev))
      dv_track_drop_entry(rt, t, k, r);
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
      DV_ASSERT(t->nreaders <= t->capreaders);
      memcpy(v, t->readers, t->nreaders * sizeof *v);
      spare = t->readers != t->inl ? t->readers : NULL;
      t->readers = v, t->capreaders = (uint16_t)cap;
      v = NULL;
    }
    dv_spin_unlock(mu);
    free(v), free(spare);
  } else if (oldest && dv_pev_realize(rt, oldest, NULL) == DEVRT_OK) {
    /* acquire: pairs with the release that settled the mark (marks.c) */
    uint8_t rec = atomic_load_explicit(&oldest->rec, memory_order_acquire);
    ok = rec == DV_PEV_DONE ||
         (rec == DV_PEV_RECORDED && rt->be->event_sync(oldest->ev) == DEVRT_OK);
    if (ok) /* complete: so are all before it */
      dv_events_sync_end(oldest->rt, oldest->slot,
                         atomic_load_explicit(&oldest->seq, memory_order_relaxed));
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
                              dv_refs* r) {
  unsigned k = 0; /* a slot is (runtime, index): a peer's slot of the same index is another */
  while (k < t->nreaders && (t->readers[k].slot != slot || t->readers[k].ev->rt != p->rt)) k++;
  if (k < t->nreaders) {
    dv_wait* e = &t->readers[k];
    bool newer = atomic_load_explicit(&p->seq, memory_order_relaxed) >=
                 atomic_load_explicit(&e->ev->seq, memory_order_relaxed);
    dv_refs_drop(rt, r, newer ? e->ev : p);
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
DV_HOT static void record_write(devrt_runtime* rt, dv_track* t, unsigned slot, dv_refs* r,
                                bool waited) {
  for (unsigned k = 0; k < t->nreaders;)
    if (replaces(rt, r->ev, slot, t->readers[k].ev, waited))
      dv_track_drop_entry(rt, t, k, r);
    else
      k++;
  dv_pev* old = t->writer;
  if (old && replaces(rt, r->ev, slot, old, waited))
    dv_refs_drop(rt, r, old);
  else if (old)
    keep_entry(rt, t, old->slot, old, true, r);
  t->writer = r->ev;
  r->gain++;
}

DV_HOT void dv_track_record(devrt_runtime* rt, dv_track* t, devrt_access a, unsigned slot,
                            dv_refs* r, bool waited) {
  DV_ASSERT(dv_access_ok(a) && r->ev && t->nreaders < t->capreaders); /* room made for one */
  if (a & DEVRT_ACCESS_WRITE) {
    record_write(rt, t, slot, r, waited);
    DV_ASSERT(t->writer == r->ev);
  } else {
    keep_entry(rt, t, slot, r->ev, false, r);
    r->gain++; /* (dropped again by keep_entry if the slot's entry was newer: counted by drop) */
  }
  t->epoch++;
}

void dv_blk_lock_tracked(devrt_runtime* rt, dv_blk* b) {
  lock(b);
  for (dv_group* g; (g = atomic_load_explicit(&b->group, memory_order_relaxed)) != NULL; lock(b)) {
    unlock(b);
    dv_group_dissolve(rt, g);
  }
}

/* b is pinned, or kept from being freed by its slot's repeat state (the repeat path's fallback). */
void dv_blk_lock_with_room(devrt_runtime* rt, dv_blk* b, dv_refs* r) {
  dv_blk_lock_tracked(rt, b);
  while (DV_UNLIKELY(!dv_track_has_room(rt, &b->t, r))) {
    unlock(b);
    bool ok = grow_unlocked(rt, &b->t, &b->lock);
    dv_blk_lock_tracked(rt, b);
    if (!ok && !dv_track_has_room(rt, &b->t, r))
      dv_track_drop_entry(rt, &b->t, 0, r); /* device lost: nothing runs */
  }
}

/* ---- the steps of a tracked use ---- */

devrt_status dv_work_init(dv_work* k, devrt_runtime* rt, unsigned slot, const char* call,
                          const devrt_block_use* u, unsigned n) {
  k->rt = rt, k->slot = slot, k->call = call;
  k->x.u = u, k->x.n = n, k->x.peer = false;
  k->of = NULL, k->drops = 0, k->pinned = false;
  k->how = (dv_pinned){NULL, 0, 0};
  k->c = (dv_counts){{0}};
  return dv_waits_init(&k->w, rt);
}

/* dv_uses_pin block by block, the uses checked and deduplicated. */
static devrt_status pin_each(dv_work* k) {
  devrt_runtime* rt = k->rt;
  dv_uses* x = &k->x;
  const devrt_block_use* u = x->u;
  DV_ASSERT(x->n <= DEVRT_LAUNCH_MAX_USES && !k->pinned && k->w.n == 0);
  dv_counts before = k->c;
  devrt_status st = DEVRT_OK;
  uint32_t d = 0;
  unsigned i = 0;
  for (; i < x->n; i++) {
    dv_blk* b = dv_blk_tracked(rt, u[i].block, k->call, &st);
    devrt_runtime* o; /* a runtime rt has peer access with: work on rt may use its blocks */
    if (DV_UNLIKELY(!b) && st == DEVRT_ERR_STALE_BLOCK && (o = dv_blk_peer_owner(rt, u[i].block))) {
      if ((b = dv_blk_tracked(o, u[i].block, k->call, &st)) != NULL) dv_error_clear(); /* ok */
      x->peer = true;
    }
    if (DV_UNLIKELY(!b)) break;
    if (DV_UNLIKELY(b->pins & FREEING)) {
      unlock(b);
      st = dv_fail(DEVRT_ERR_INVALID_STATE,
                   "%s: block %#" PRIx64 " is being freed by another thread", k->call, u[i].block);
      break;
    }
    DV_ASSERT(b->live && !b->pending && !atomic_load_explicit(&b->group, memory_order_relaxed));
    b->pins++;
    dv_track_gather(k, &b->t, u[i].access, 1);
    if (k->of) d += dv_track_drops(&b->t, u[i].access, k->of);
    x->epoch[i] = b->t.epoch;
    unlock(b);
    x->b[i] = b;
  }
  if (DV_LIKELY(i == x->n)) {
    k->drops = d;
    return DEVRT_OK;
  }
  while (i--) {
    lock(x->b[i]); /* pinned: never grouped meanwhile */
    DV_ASSERT(x->b[i]->pins & ~FREEING);
    x->b[i]->pins--;
    unlock(x->b[i]);
  }
  dv_waits_drop(rt, &k->w);
  k->c = before; /* nothing counted */
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
  DV_ASSERT(x->n > 0 && x->n < n); /* merged: some block was named twice */
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
static DV_NOINLINE DV_FLATTEN devrt_status pin_checked(dv_work* k) {
  DV_CHECK(dv_uses_check(k->x.u, k->x.n, k->call));
  if (k->x.n > 1 && named_twice(&k->x)) {
    merge(&k->x);
    if (dv_group_pin(k)) return DEVRT_OK;
  }
  return pin_each(k);
}

DV_HOT devrt_status dv_uses_pin(dv_work* k) {
  DV_ASSERT(!k->pinned && k->w.n == 0); /* a work pins once, with an empty list */
  devrt_status st = dv_group_pin(k) ? DEVRT_OK : pin_checked(k);
  k->pinned = st == DEVRT_OK;
  return st;
}

DV_HOT devrt_status dv_waits_issue(dv_work* k, dv_stream* s) {
  devrt_runtime* rt = k->rt;
  devrt_status st = DV_UNLIKELY(k->w.foreign == DV_WAIT_SHORT)
                        ? dv_fail(DEVRT_ERR_INVALID_STATE,
                                  "peer access was enabled while this call gathered its waits, "
                                  "which outgrew their list: nothing was enqueued; call again")
                        : dv_slot_settle(rt, k->slot, k->of, k->drops, &k->c.late);
  for (unsigned i = 0; i < k->w.n && st == DEVRT_OK; i++)
    st = dv_pev_wait(rt, s, k->w.v[i].ev, &k->c.late);
  if (st == DEVRT_OK) k->c.waits += k->w.n;
  dv_waits_drop(rt, &k->w);
  return st;
}

/* A hash of a set of handles, whatever their order. */
DV_HOT static uint32_t dv_set_of(const devrt_block_use* u, unsigned n) {
  uint64_t h = 0;
  for (unsigned k = 0; k < n; k++) h += (u[k].block ^ (u[k].block >> 29)) * 0xbf58476d1ce4e5b9ull;
  return (uint32_t)(h >> 32);
}

/* dv_uses_finish block by block (out of line, so a grouped launch's code stays together). */
static DV_NOINLINE DV_FLATTEN uint32_t finish_each(dv_work* k, dv_refs* r, bool donate) {
  devrt_runtime* rt = k->rt;
  dv_uses* x = &k->x;
  const devrt_block_use* u = x->u;
  unsigned n = x->n, slot = k->slot;
  dv_pev* ev = r->ev;
  dv_group* g = k->pinned ? k->how.g : NULL;
  if (g) /* dissolved meanwhile: the members hold its pins, and their own state */
    for (unsigned i = 0; i < n; i++) x->b[i] = dv_blk_of(rt, u[i].block);
  if (ev) dv_refs_give(r, n, donate);
  uint32_t set = dv_set_of(u, n);
  bool again = true;
  for (unsigned i = 0; i < n; i++) {
    dv_blk* b = x->b[i];
    if (ev)
      dv_blk_lock_with_room(rt, b, r);
    else
      dv_blk_lock_tracked(rt, b);
    DV_ASSERT(!k->pinned || (b->pins & ~FREEING)); /* pinned: a free waits for this finish */
    DV_ASSERT(b->live);                            /* pinned, or held by the repeat state */
    if (ev) { /* waited: pinned here, its waits gathered and issued, and not changed since */
      dv_track_record(rt, &b->t, u[i].access, slot, r,
                      k->pinned && !g && b->t.epoch == x->epoch[i]);
      touched(b);
      if (!x->peer) add_user(b, slot); /* peer launches never repeat */
    }
    again = again && b->lastset == set &&
            (n > 1 || b->lastslot != slot); /* alone on one stream: the repeat path's */
    b->lastset = set, b->lastslot = slot;
    b->pins -= k->pinned;
    x->ver[i] = atomic_load_explicit(&b->ver, memory_order_relaxed);
    unlock(b);
  }
  uint32_t gain = r->gain;
  DV_ASSERT(!ev || gain <= r->given); /* each record took at most the references given */
  dv_refs_apply(rt, r);
  if (again && n && ev && k->pinned && !g && !x->peer) dv_group_form(rt, x);
  return gain;
}

DV_HOT uint32_t dv_uses_finish(dv_work* k, dv_pev* ev, dv_pev* old, bool donate) {
  dv_refs r;
  dv_refs_init(&r, ev);
  if (old) dv_refs_drop(k->rt, &r, old);
  uint32_t gain = k->pinned && k->how.g && dv_group_finish(k, &r, donate)
                      ? 0 /* a group's launch is no repeat candidate */
                      : finish_each(k, &r, donate);
  k->pinned = false;
  return gain;
}
