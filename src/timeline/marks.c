/* marks.c: the per-slot pools of events that mark stream points for use tracking: recycled
 * (no event creation on the hot path), reference counted (one launch's mark is shared by every
 * block it touched), ordered per slot, recorded lazily for launches (only once something needs
 * the point), with a completion watermark advanced by polls and synchronizes. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "rt.h"

/* Raises a completion watermark to v (never lowers it). release: pairs with the acquire loads of
 * done_seq (dv_pev_passed), which then see what completed up to v. */
static uint64_t max_store(_Atomic uint64_t* x, uint64_t v) {
  uint64_t cur = atomic_load_explicit(x, memory_order_relaxed);
  while (cur < v && !atomic_compare_exchange_weak_explicit(x, &cur, v, memory_order_release,
                                                           memory_order_relaxed)) {}
  DV_ASSERT(atomic_load_explicit(x, memory_order_relaxed) >= v); /* a watermark only rises */
  return cur;
}

static DV_NOINLINE devrt_status pev_new(devrt_runtime* rt, unsigned slot, dv_pev** out) {
  dv_evslot* es = &rt->evslots[slot];
  dv_pev* p = dv_zalloc_lines(sizeof *p); /* one line: touched by every launch that uses it */
  if (!p) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "event pool: out of host memory");
  devrt_status st = rt->be->event_create(rt->dev, DEVRT_EVENT_DEFAULT,
                                         &p->ev); /* blocking-sync would cost ~1 us per record */
  if (st != DEVRT_OK) {
    free(p);
    return st;
  }
  p->slot = slot;
  p->rt = rt;
  DV_ASSERT(slot < rt->nslots && atomic_load_explicit(&p->refs, memory_order_relaxed) == 0);
  atomic_fetch_add_explicit(&es->created, 1, memory_order_relaxed);
  *out = p;
  return DEVRT_OK;
}

/* A free event of the slot, under es->mu (which it may drop and retake to create one). */
DV_HOT static devrt_status take(devrt_runtime* rt, dv_evslot* es, unsigned slot, dv_pev** out) {
  /* acquire: pairs with dv_pev_unref_n's release push, which then shows the event's last use */
  if (!es->free) es->free = atomic_exchange_explicit(&es->back, NULL, memory_order_acquire);
  dv_pev* p = es->free;
  if (p) {
    DV_ASSERT(atomic_load_explicit(&p->refs, memory_order_relaxed) == 0); /* nobody holds it */
    DV_ASSERT(p->rt == rt && p->slot == slot);                            /* the slot's own */
    es->free = p->next;
    es->reused++;
  } else {
    dv_spin_unlock(&es->mu);
    devrt_status st = pev_new(rt, slot, &p);
    dv_spin_lock(&es->mu);
    if (st != DEVRT_OK) return st;
    p->all = es->all, es->all = p;
  }
  *out = p;
  return DEVRT_OK;
}

/* Numbers p as the slot's newest point (under es->mu); returns the previous newest. */
DV_HOT static dv_pev* publish(dv_evslot* es, dv_pev* p) {
  DV_ASSERT(dv_spin_held(&es->mu));
  atomic_store_explicit(&p->refs, 2, memory_order_relaxed); /* the caller's and `last`'s */
  uint64_t seq = atomic_load_explicit(&es->seq, memory_order_relaxed) + 1;
  atomic_store_explicit(&p->seq, seq,
                        memory_order_relaxed); /* p reaches others through `last` or a record */
  atomic_store_explicit(&es->seq, seq,
                        memory_order_release); /* after the work: sync_begin relies on it */
  dv_pev* old =
      atomic_load_explicit(&es->last, memory_order_relaxed); /* only written under es->mu */
  atomic_store_explicit(&es->last, p, memory_order_release);
  return old;
}

DV_HOT devrt_status dv_pev_realize(devrt_runtime* rt, dv_pev* p, uint64_t* late) {
  if (DV_UNLIKELY(p->rt != rt)) late = NULL, rt = p->rt; /* a peer's mark: its own counters */
  uint8_t s = atomic_load_explicit(&p->rec, memory_order_acquire);
  while (s != DV_PEV_RECORDED) {
    if (s == DV_PEV_RECORDING) { /* another thread is recording it */
      sched_yield();
      s = atomic_load_explicit(&p->rec, memory_order_acquire);
      continue;
    }
    if (s == DV_PEV_DONE) return DEVRT_OK; /* complete: nobody needs to wait for it */
    /* seq_cst, as dv_events_retire's store and load: one of us sees the other's write */
    if (!atomic_compare_exchange_weak_explicit(&p->rec, &s, DV_PEV_RECORDING, memory_order_seq_cst,
                                               memory_order_acquire))
      continue;
    /* seq_cst (both): as the CAS above, against dv_events_retire's raise of done_seq */
    if (atomic_load_explicit(&p->seq, memory_order_seq_cst) <=
        atomic_load_explicit(&rt->evslots[p->slot].done_seq, memory_order_seq_cst)) {
      /* complete: settled as DONE, so it can no longer move past work that nobody waits for */
      atomic_store_explicit(&p->rec, DV_PEV_DONE, memory_order_release);
      return DEVRT_OK;
    }
    devrt_status st = rt->be->event_record(p->ev, rt->slots[p->slot].s);
    /* release: pairs with the acquire loads of rec (settled(), the waits of RECORDING) */
    atomic_store_explicit(&p->rec, st == DEVRT_OK ? DV_PEV_RECORDED : DV_PEV_LAZY,
                          memory_order_release);
    if (st == DEVRT_OK) dv_slotset_add(&rt->polls, p->slot); /* after the state: see the poll */
    if (st == DEVRT_OK && late)
      ++*late;
    else if (st == DEVRT_OK)
      dv_counts_flush(rt, p->slot, &(dv_counts){.late = 1});
    return st;
  }
  return DEVRT_OK;
}

static bool settled(uint8_t rec) { return rec == DV_PEV_RECORDED || rec == DV_PEV_DONE; }

/* acquire (both): pair with the releases that settle a mark and drop references to it */
DV_HOT static bool needed(const dv_pev* p, const dv_pev* of, uint32_t drops) {
  return p && !settled(atomic_load_explicit(&p->rec, memory_order_acquire)) &&
         atomic_load_explicit(&p->refs, memory_order_acquire) > 1 + (p == of ? drops : 0);
}

DV_HOT devrt_status dv_slot_settle(devrt_runtime* rt, unsigned slot, const dv_pev* of,
                                   uint32_t drops, uint64_t* late) {
  dv_evslot* es = &rt->evslots[slot];
  DV_ASSERT(slot < rt->nslots && (!of || of->slot == slot));
  /* acquire: pairs with publish()'s release of `last` */
  if (!needed(atomic_load_explicit(&es->last, memory_order_acquire), of, drops))
    return DEVRT_OK;     /* the common case, lock-free: nothing else needs the newest point */
  dv_spin_lock(&es->mu); /* to hold the newest mark while recording it */
  dv_pev* p = atomic_load_explicit(&es->last, memory_order_relaxed);
  if (needed(p, of, drops))
    dv_pev_ref(p);
  else
    p = NULL;
  dv_spin_unlock(&es->mu);
  if (!p) return DEVRT_OK;
  devrt_status st = dv_pev_realize(rt, p, late);
  dv_pev_unref(rt, p);
  return st;
}

/* A mark recorded at once. It is numbered and published under the slot's lock, so seq follows the
 * stream, as RECORDING; the record comes after the lock (no driver call under a spin lock), at a
 * point at or after the one its seq names, as a lazy mark's record is, and a thread that needs it
 * meanwhile waits for RECORDED in dv_pev_realize. */
devrt_status dv_pev_record(devrt_runtime* rt, unsigned slot, dv_stream* s, dv_pev** out) {
  dv_evslot* es = &rt->evslots[slot];
  dv_pev *p = NULL, *old = NULL;
  DV_CHECK(dv_slot_settle(rt, slot, NULL, 0, NULL));
  dv_spin_lock(&es->mu);
  devrt_status st = take(rt, es, slot, &p);
  if (st == DEVRT_OK) {
    atomic_store_explicit(&p->rec, DV_PEV_RECORDING, memory_order_relaxed);
    old = publish(es, p);
    es->recorded++;
  }
  dv_spin_unlock(&es->mu);
  if (old) dv_pev_unref(rt, old);
  if (st != DEVRT_OK) return st;
  st = rt->be->event_record(p->ev, s);
  /* failed: left lazy, for a later need to record on the slot's stream. release: as in
   * dv_pev_realize */
  atomic_store_explicit(&p->rec, st == DEVRT_OK ? DV_PEV_RECORDED : DV_PEV_LAZY,
                        memory_order_release);
  if (st != DEVRT_OK) {
    dv_pev_unref(rt, p);
    return st;
  }
  dv_slotset_add(&rt->polls, slot); /* after the state: see the poll */
  *out = p;
  return DEVRT_OK;
}

DV_HOT void dv_counts_add_locked(dv_evslot* es, const dv_counts* c) {
  DV_ASSERT(dv_spin_held(&es->mu));
  _Pragma("GCC unroll 8") for (unsigned i = 0; i < 8; i++) es->n.v[i] += c->v[i];
}

DV_NOINLINE void dv_counts_flush(devrt_runtime* rt, unsigned slot, const dv_counts* c) {
  dv_evslot* es = &rt->evslots[slot];
  dv_spin_lock(&es->mu);
  dv_counts_add_locked(es, c);
  dv_spin_unlock(&es->mu);
}

DV_HOT devrt_status dv_pev_mark(devrt_runtime* rt, unsigned slot, dv_pev** out, dv_pev** old,
                                const dv_counts* c) {
  dv_evslot* es = &rt->evslots[slot];
  dv_pev* p = NULL;
  dv_spin_lock(&es->mu);
  dv_counts_add_locked(es, c);
  devrt_status st = take(rt, es, slot, &p);
  if (st == DEVRT_OK) {
    atomic_store_explicit(&p->rec, DV_PEV_LAZY, memory_order_relaxed);
    *old = publish(es, p);
    es->deferred++;
  }
  dv_spin_unlock(&es->mu);
  if (st == DEVRT_OK) *out = p;
  return st;
}

DV_HOT devrt_status dv_pev_wait(devrt_runtime* rt, dv_stream* s, dv_pev* p, uint64_t* late) {
  DV_CHECK(dv_pev_realize(rt, p, late));
  DV_ASSERT(settled(atomic_load_explicit(&p->rec, memory_order_relaxed))); /* realized */
  /* acquire: pairs with the release that recorded it: the event is the recorded one */
  if (atomic_load_explicit(&p->rec, memory_order_acquire) != DV_PEV_RECORDED)
    return DEVRT_OK; /* complete before it was needed */
  return rt->be->stream_wait(s, p->ev);
}

/* Safe to recycle at once: a wait already enqueued on the event keeps the point it captured. */
DV_HOT void dv_pev_unref_n(devrt_runtime* rt, dv_pev* p, uint32_t n) {
  /* acq_rel: the last drop sees every holder's use of the event before it recycles it */
  uint32_t was = atomic_fetch_sub_explicit(&p->refs, n, memory_order_acq_rel);
  DV_ASSERT(was >= n); /* more references dropped than taken */
  if (was != n) return;
  (void)rt;
  /* the last reference: a recording in progress holds one, so nobody is recording it */
  DV_ASSERT(atomic_load_explicit(&p->rec, memory_order_relaxed) != DV_PEV_RECORDING);
  dv_evslot* es = &p->rt->evslots[p->slot];
  dv_pev* head = atomic_load_explicit(&es->back, memory_order_relaxed);
  do p->next = head; /* release: pairs with take()'s acquire exchange */
  while (!atomic_compare_exchange_weak_explicit(&es->back, &head, p, memory_order_release,
                                                memory_order_relaxed));
}

/* seq relaxed: final once the mark is settled (dv_pev_done reads rec first); an unsettled mark's
 * is a snapshot (devrt_block_info_get). acquire: pairs with max_store's release. */
DV_HOT bool dv_pev_passed(devrt_runtime* rt, const dv_pev* p) {
  (void)rt;
  return atomic_load_explicit(&p->seq, memory_order_relaxed) <=
         atomic_load_explicit(&p->rt->evslots[p->slot].done_seq, memory_order_acquire);
}

/* A settled mark's seq is final (read after rec, which settles it with release: acquire pairs). */
DV_HOT bool dv_pev_done(devrt_runtime* rt, const dv_pev* p) {
  return settled(atomic_load_explicit(&p->rec, memory_order_acquire)) && dv_pev_passed(rt, p);
}

/* Visits only the slots in rt->polls: a slot is added there after its newest mark becomes
 * RECORDED (dv_pev_record, dv_pev_realize) and stays while that mark runs. Taking it first, then
 * reading the mark, misses no record: a record's add after the take leaves the slot for the next
 * poll; one before it is seen by the take (an RMW of the same word), and so is the record. A lazy
 * newest mark is left out until it is recorded; a settled-complete one has nothing to tell. */
void dv_events_poll(devrt_runtime* rt) {
  DV_SLOTSET_FOR(i, &rt->polls) {
    DV_ASSERT(i < rt->nslots);
    if (!dv_slotset_take(&rt->polls, i)) continue; /* another poll took it */
    dv_evslot* es = &rt->evslots[i];
    dv_spin_lock(&es->mu);
    dv_pev* p = atomic_load_explicit(&es->last, memory_order_relaxed); /* under es->mu */
    /* acquire: pairs with the release that recorded it */
    if (p && atomic_load_explicit(&p->rec, memory_order_acquire) == DV_PEV_RECORDED &&
        !dv_pev_done(rt, p))
      dv_pev_ref(p);
    else
      p = NULL;
    dv_spin_unlock(&es->mu);
    if (!p) continue;
    bool done = false;
    if (rt->be->event_query(p->ev, &done) == DEVRT_OK && done) /* RECORDED: its seq is final */
      max_store(&es->done_seq, atomic_load_explicit(&p->seq, memory_order_relaxed));
    else
      dv_slotset_add(&rt->polls, i); /* still running (or the query failed): the next poll asks */
    dv_pev_unref(rt, p);
  }
}

/* acquire: pairs with publish()'s release of seq, after the work it numbers */
uint64_t dv_events_sync_begin(devrt_runtime* rt, unsigned slot) {
  DV_ASSERT(slot < rt->nslots);
  return atomic_load_explicit(&rt->evslots[slot].seq, memory_order_acquire);
}

void dv_events_sync_end(devrt_runtime* rt, unsigned slot, uint64_t seq) {
  DV_ASSERT(slot < rt->nslots &&
            seq <= atomic_load_explicit(&rt->evslots[slot].seq, memory_order_relaxed));
  max_store(&rt->evslots[slot].done_seq, seq);
}

void dv_events_retire(devrt_runtime* rt, unsigned slot) {
  dv_evslot* es = &rt->evslots[slot];
  dv_spin_lock(&es->mu);
  /* seq_cst (load and CAS): as dv_pev_realize's CAS of rec and read of done_seq: either a
   * realize sees this raise and settles DONE, or this retire's wait below sees its RECORDING */
  uint64_t seq = atomic_load_explicit(&es->seq, memory_order_relaxed),
           cur = atomic_load_explicit(&es->done_seq, memory_order_seq_cst);
  while (cur < seq && !atomic_compare_exchange_weak_explicit(
                          &es->done_seq, &cur, seq, memory_order_seq_cst, memory_order_seq_cst)) {}
  dv_pev* all = es->all; /* a node's `all` never changes once it is on the list */
  dv_spin_unlock(&es->mu);
  /* No new record starts (done_seq covers every mark); one in progress finishes on the live
   * stream: wait for it outside the lock (the slot's stream is not destroyed before). */
  for (dv_pev* p = all; p; p = p->all) /* seq_cst: see the raise above */
    while (atomic_load_explicit(&p->rec, memory_order_seq_cst) == DV_PEV_RECORDING) sched_yield();
}

const dv_pev* dv_slot_last(devrt_runtime* rt, unsigned slot) {
  DV_ASSERT(slot < rt->nslots);
  /* acquire: pairs with publish()'s release of `last` */
  return atomic_load_explicit(&rt->evslots[slot].last, memory_order_acquire);
}
