/* events.c: the per-slot pools of events that mark stream points for use tracking: recycled
 * (no event creation on the hot path), reference counted (one launch's event is shared by every
 * block it touched), ordered per slot, with a completion watermark advanced by polls and
 * synchronizes so completed points are skipped without a driver call. */
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

/* One critical section takes an event, records it and numbers it, so seq follows the stream. */
devrt_status dv_pev_record(devrt_runtime* rt, unsigned slot, dv_stream* s, dv_pev** out) {
  dv_evslot* es = &rt->evslots[slot];
  dv_pev* fresh = NULL;
  pthread_mutex_lock(&es->mu);
  dv_pev* p = es->free;
  if (p) {
    es->free = p->next;
  } else {
    pthread_mutex_unlock(&es->mu);
    DV_CHECK(pev_new(rt, slot, &fresh));
    pthread_mutex_lock(&es->mu);
    p = fresh;
    p->all = es->all, es->all = p;
  }
  devrt_status st = rt->be->event_record(p->ev, s);
  dv_pev* old = NULL;
  if (st == DEVRT_OK) {
    atomic_store_explicit(&p->refs, 2, memory_order_relaxed); /* the caller's and `last`'s */
    p->seq = atomic_load_explicit(&es->seq, memory_order_relaxed) + 1;
    atomic_store_explicit(&es->seq, p->seq, memory_order_release); /* after the record: sync_begin relies on it */
    old = es->last, es->last = p;
    es->recorded++;
    es->reused += !fresh;
  } else {
    p->next = es->free, es->free = p;
  }
  pthread_mutex_unlock(&es->mu);
  if (st != DEVRT_OK) return st;
  if (old) dv_pev_unref(rt, old);
  *out = p;
  return DEVRT_OK;
}

/* Safe to recycle at once: a wait already enqueued on the event keeps the point it captured. */
void dv_pev_unref_n(devrt_runtime* rt, dv_pev* p, uint32_t n) {
  if (atomic_fetch_sub_explicit(&p->refs, n, memory_order_acq_rel) != n) return;
  dv_evslot* es = &rt->evslots[p->slot];
  pthread_mutex_lock(&es->mu);
  p->next = es->free, es->free = p;
  pthread_mutex_unlock(&es->mu);
}

bool dv_pev_done(devrt_runtime* rt, const dv_pev* p) {
  return p->seq <= atomic_load_explicit(&rt->evslots[p->slot].done_seq, memory_order_acquire);
}

void dv_events_poll(devrt_runtime* rt) {
  for (unsigned i = 0; i < rt->nslots; i++) {
    dv_evslot* es = &rt->evslots[i];
    if (atomic_load_explicit(&es->done_seq, memory_order_relaxed) >= atomic_load_explicit(&es->seq, memory_order_relaxed))
      continue; /* nothing recorded since the last poll saw it complete (a hint: a miss waits for the next poll) */
    pthread_mutex_lock(&es->mu);
    dv_pev* p = es->last;
    if (p) dv_pev_ref(p);
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
