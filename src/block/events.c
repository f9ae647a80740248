/* events.c: the per-slot pools of events that mark stream points for use tracking: recycled
 * (no event creation on the hot path), reference counted (one launch's mark is shared by every
 * block it touched), ordered per slot, recorded lazily for launches (only once something needs
 * the point), with a completion watermark advanced by polls and synchronizes. */
#include <stdlib.h>
#include "block.h"

static uint64_t max_store(_Atomic uint64_t* x, uint64_t v) {
  uint64_t cur = atomic_load_explicit(x, memory_order_relaxed);
  while (cur < v && !atomic_compare_exchange_weak_explicit(x, &cur, v, memory_order_release, memory_order_relaxed)) {
  }
  return cur;
}

static devrt_status pev_new(devrt_runtime* rt, unsigned slot, dv_pev** out) {
  dv_evslot* es = &rt->evslots[slot];
  dv_pev* p = calloc(1, sizeof *p);
  if (!p) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "event pool: out of host memory");
  devrt_status st = rt->be->event_create(rt->dev, DEVRT_EVENT_DEFAULT, &p->ev); /* blocking-sync would cost ~1 us per record */
  if (st != DEVRT_OK) {
    free(p);
    return st;
  }
  p->slot = slot;
  atomic_fetch_add_explicit(&es->created, 1, memory_order_relaxed);
  *out = p;
  return DEVRT_OK;
}

/* A free event of the slot, under es->mu (which it may drop and retake to create one). */
static devrt_status take(devrt_runtime* rt, dv_evslot* es, unsigned slot, dv_pev** out) {
  if (!es->free) es->free = atomic_exchange_explicit(&es->back, NULL, memory_order_acquire);
  dv_pev* p = es->free;
  if (p) {
    es->free = p->next;
    es->reused++;
  } else {
    pthread_mutex_unlock(&es->mu);
    devrt_status st = pev_new(rt, slot, &p);
    pthread_mutex_lock(&es->mu);
    if (st != DEVRT_OK) return st;
    p->all = es->all, es->all = p;
  }
  *out = p;
  return DEVRT_OK;
}

static void give_locked(dv_evslot* es, dv_pev* p) { p->next = es->free, es->free = p; }

/* Numbers p as the slot's newest point (under es->mu); returns the previous newest. */
static dv_pev* publish(dv_evslot* es, dv_pev* p) {
  atomic_store_explicit(&p->refs, 2, memory_order_relaxed); /* the caller's and `last`'s */
  p->seq = atomic_load_explicit(&es->seq, memory_order_relaxed) + 1;
  atomic_store_explicit(&es->seq, p->seq, memory_order_release); /* after the work: sync_begin relies on it */
  return atomic_exchange_explicit(&es->last, p, memory_order_acq_rel);
}

/* Records p on its slot's stream unless it is recorded or complete; under es->mu. */
static devrt_status realize_locked(devrt_runtime* rt, dv_evslot* es, dv_pev* p) {
  if (atomic_load_explicit(&p->rec, memory_order_relaxed) || dv_pev_done(rt, p)) return DEVRT_OK;
  DV_CHECK(rt->be->event_record(p->ev, rt->slots[p->slot].s));
  atomic_store_explicit(&p->rec, true, memory_order_release);
  es->recorded++;
  return DEVRT_OK;
}

/* The slot's newest mark is recorded now if anything besides `last` and the coming work's
 * `drops` refers to it (es->mu held). */
static devrt_status settle_locked(devrt_runtime* rt, dv_evslot* es, const dv_pev* of, uint32_t drops) {
  dv_pev* p = atomic_load_explicit(&es->last, memory_order_relaxed);
  if (!p || atomic_load_explicit(&p->rec, memory_order_relaxed) ||
      atomic_load_explicit(&p->refs, memory_order_acquire) <= 1 + (p == of ? drops : 0))
    return DEVRT_OK;
  return realize_locked(rt, es, p);
}

devrt_status dv_slot_settle(devrt_runtime* rt, unsigned slot, const dv_pev* of, uint32_t drops) {
  dv_evslot* es = &rt->evslots[slot];
  dv_pev* p = atomic_load_explicit(&es->last, memory_order_acquire);
  if (!p || atomic_load_explicit(&p->rec, memory_order_acquire) ||
      atomic_load_explicit(&p->refs, memory_order_acquire) <= 1 + (p == of ? drops : 0))
    return DEVRT_OK; /* the common case: nothing else needs the newest point */
  pthread_mutex_lock(&es->mu);
  devrt_status st = settle_locked(rt, es, of, drops);
  pthread_mutex_unlock(&es->mu);
  return st;
}

/* One critical section records an event and numbers it, so seq follows the stream. */
devrt_status dv_pev_record(devrt_runtime* rt, unsigned slot, dv_stream* s, dv_pev** out) {
  dv_evslot* es = &rt->evslots[slot];
  dv_pev* p = NULL;
  pthread_mutex_lock(&es->mu);
  devrt_status st = settle_locked(rt, es, NULL, 0);
  if (st == DEVRT_OK) st = take(rt, es, slot, &p);
  if (st == DEVRT_OK && (st = rt->be->event_record(p->ev, s)) != DEVRT_OK) give_locked(es, p);
  dv_pev* old = NULL;
  if (st == DEVRT_OK) {
    atomic_store_explicit(&p->rec, true, memory_order_relaxed);
    old = publish(es, p);
    es->recorded++;
  }
  pthread_mutex_unlock(&es->mu);
  if (st != DEVRT_OK) return st;
  if (old) dv_pev_unref(rt, old);
  *out = p;
  return DEVRT_OK;
}

devrt_status dv_pev_mark(devrt_runtime* rt, unsigned slot, dv_pev** out) {
  dv_evslot* es = &rt->evslots[slot];
  dv_pev* p = NULL;
  pthread_mutex_lock(&es->mu);
  devrt_status st = take(rt, es, slot, &p);
  dv_pev* old = NULL;
  if (st == DEVRT_OK) {
    atomic_store_explicit(&p->rec, false, memory_order_relaxed);
    old = publish(es, p);
    es->deferred++;
  }
  pthread_mutex_unlock(&es->mu);
  if (st != DEVRT_OK) return st;
  if (old) dv_pev_unref(rt, old);
  *out = p;
  return DEVRT_OK;
}

devrt_status dv_pev_realize(devrt_runtime* rt, dv_pev* p) {
  if (atomic_load_explicit(&p->rec, memory_order_acquire)) return DEVRT_OK;
  dv_evslot* es = &rt->evslots[p->slot];
  pthread_mutex_lock(&es->mu);
  devrt_status st = realize_locked(rt, es, p);
  pthread_mutex_unlock(&es->mu);
  return st;
}

devrt_status dv_pev_wait(devrt_runtime* rt, dv_stream* s, dv_pev* p) {
  DV_CHECK(dv_pev_realize(rt, p));
  if (!atomic_load_explicit(&p->rec, memory_order_acquire)) return DEVRT_OK; /* complete before it was needed */
  return rt->be->stream_wait(s, p->ev);
}

/* Safe to recycle at once: a wait already enqueued on the event keeps the point it captured. */
void dv_pev_unref_n(devrt_runtime* rt, dv_pev* p, uint32_t n) {
  if (atomic_fetch_sub_explicit(&p->refs, n, memory_order_acq_rel) != n) return;
  dv_evslot* es = &rt->evslots[p->slot];
  dv_pev* head = atomic_load_explicit(&es->back, memory_order_relaxed);
  do p->next = head;
  while (!atomic_compare_exchange_weak_explicit(&es->back, &head, p, memory_order_release, memory_order_relaxed));
}

bool dv_pev_done(devrt_runtime* rt, const dv_pev* p) {
  return p->seq <= atomic_load_explicit(&rt->evslots[p->slot].done_seq, memory_order_acquire);
}

void dv_events_poll(devrt_runtime* rt) {
  for (unsigned i = 0; i < rt->nslots; i++) {
    dv_evslot* es = &rt->evslots[i];
    if (atomic_load_explicit(&es->done_seq, memory_order_relaxed) >= atomic_load_explicit(&es->seq, memory_order_relaxed))
      continue; /* nothing marked since the last poll saw it complete (a hint: a miss waits for the next poll) */
    pthread_mutex_lock(&es->mu);
    dv_pev* p = atomic_load_explicit(&es->last, memory_order_relaxed);
    if (p && realize_locked(rt, es, p) == DEVRT_OK) dv_pev_ref(p); /* the newest point: recording it now is exact */
    else p = NULL;
    pthread_mutex_unlock(&es->mu);
    if (!p) continue;
    bool done = false;
    if (!dv_pev_done(rt, p) && rt->be->event_query(p->ev, &done) == DEVRT_OK && done) max_store(&es->done_seq, p->seq);
    dv_pev_unref(rt, p);
  }
}

uint64_t dv_events_sync_begin(devrt_runtime* rt, unsigned slot) {
  return atomic_load_explicit(&rt->evslots[slot].seq, memory_order_acquire);
}

void dv_events_sync_end(devrt_runtime* rt, unsigned slot, uint64_t seq) { max_store(&rt->evslots[slot].done_seq, seq); }

void dv_events_retire(devrt_runtime* rt, unsigned slot) {
  dv_evslot* es = &rt->evslots[slot];
  pthread_mutex_lock(&es->mu); /* a realize in progress finishes on the live stream first */
  max_store(&es->done_seq, atomic_load_explicit(&es->seq, memory_order_relaxed));
  pthread_mutex_unlock(&es->mu);
}
