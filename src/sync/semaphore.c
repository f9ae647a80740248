/* semaphore.c: timeline semaphores: the completed and scheduled watermarks, the device signals
 * scheduled on them (pooled events), host waits (spin on the value and the signal's event, then
 * block on the waiting thread's condition variable), failure and destroy, and the heaps of
 * submissions parked on each semaphore. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "sync.h"
#include "../core/clock.h"

#define SEM_MAGIC 0x73656d6170686f72ull /* "semaphor" */
#define NOT_YET DEVRT_STATUS_COUNT_     /* internal: a wait not satisfied yet */

bool dv_sem_ok(devrt_semaphore* s) { /* acquire: pairs with devrt_semaphore_create's release */
  return s && atomic_load_explicit(&s->magic, memory_order_acquire) == SEM_MAGIC;
}
#define SEM_CHECK(s, call)                                                             \
  do {                                                                                 \
    dv_error_clear(); /* a public call's entry: see error.h */                         \
    DV_ARG_CHECK(dv_sem_ok(s), call, "semaphore %p is NULL or destroyed", (void*)(s)); \
  } while (0)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void dv_sem_ref(devrt_semaphore* s) {
  uint32_t was = atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
  DV_ASSERT(was > 0); /* taken through a reference the caller holds */
  (void)was;
}

void dv_sem_unref(devrt_semaphore* s) {
  /* acq_rel: each holder's release pairs with the last one's acquire: the free comes after every
   * holder's use */
  uint32_t was = atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel);
  DV_ASSERT(was > 0);
  if (was != 1) return;
  /* The user's reference goes only with destroy (the kill drops the signals and fires the
   * waiters), and every list, waiter and parked submission holds one: nothing is left. */
  DV_ASSERT(atomic_load_explicit(&s->state, memory_order_relaxed) == SEM_DESTROYED);
  DV_ASSERT(!s->head && !s->ntps && !s->waiters[0].head && !s->waiters[1].head);
  DV_ASSERT(!s->dev.n && !s->host.n && !s->queued && !s->watched);
  pthread_mutex_destroy(&s->mu);
  free(s->dev.v);
  free(s->host.v);
  free(s);
}

/* ---- parked heaps ---- */

static uint64_t heap_min(const dv_heap* h) { return h->n ? h->v[0].value : UINT64_MAX; }

/* The heap order around entry i: its parent's value <= its own <= its children's (asserts only:
 * the entry a push or a pop placed). */
static __attribute__((unused)) bool heap_ok_at(const dv_heap* h, unsigned i) {
  uint64_t v = h->v[i].value;
  return i < h->n && (!i || h->v[(i - 1) / 2].value <= v) &&
         (2 * i + 1 >= h->n || v <= h->v[2 * i + 1].value) &&
         (2 * i + 2 >= h->n || v <= h->v[2 * i + 2].value);
}

static bool heap_push(dv_heap* h, uint64_t v, dv_action* a) {
  if (h->n == h->cap) {
    unsigned cap = h->cap ? 2 * h->cap : 8;
    dv_park* p = realloc(h->v, cap * sizeof *p);
    if (!p) return false;
    h->v = p, h->cap = cap;
  }
  unsigned i = h->n++;
  for (; i && h->v[(i - 1) / 2].value > v; i = (i - 1) / 2) h->v[i] = h->v[(i - 1) / 2];
  h->v[i] = (dv_park){v, a};
  DV_ASSERT(heap_ok_at(h, i) && h->n <= h->cap);
  return true;
}

static dv_action* heap_pop(dv_heap* h) {
  DV_ASSERT(h->n > 0);
  dv_action* top = h->v[0].a;
  dv_park last = h->v[--h->n];
  unsigned i = 0;
  for (unsigned c; (c = 2 * i + 1) < h->n; i = c) {
    if (c + 1 < h->n && h->v[c + 1].value < h->v[c].value) c++;
    if (h->v[c].value >= last.value) break;
    h->v[i] = h->v[c];
  }
  if (h->n) h->v[i] = last;
  DV_ASSERT(!h->n || heap_ok_at(h, i));
  return top;
}

/* ---- state changes (all under s->mu) ---- */

/* A node's list: the one for waiters its value's scheduling has woken already, or not. */
static dv_wlist* wlist(devrt_semaphore* s, const dv_wnode* n) {
  return &s->waiters[n->sched_woken];
}

/* Links n after every node of a value <= its own, searching from the tail: waiters mostly wait
 * for values at or above the newest, so this is O(1) in the common case. */
static void link_node(devrt_semaphore* s, dv_wnode* n) {
  dv_wlist* l = wlist(s, n);
  DV_ASSERT(!n->linked);
  n->prev = l->tail;
  while (n->prev && n->prev->value > n->value) n->prev = n->prev->prev;
  n->next = n->prev ? n->prev->next : l->head;
  *(n->prev ? &n->prev->next : &l->head) = n;
  *(n->next ? &n->next->prev : &l->tail) = n;
  n->linked = true;
  DV_ASSERT((!n->prev || n->prev->value <= n->value) && (!n->next || n->value < n->next->value));
}

static void unlink_node(devrt_semaphore* s, dv_wnode* n) {
  dv_wlist* l = wlist(s, n);
  DV_ASSERT(n->linked);
  *(n->prev ? &n->prev->next : &l->head) = n->next;
  *(n->next ? &n->next->prev : &l->tail) = n->prev;
  n->linked = false;
}

static void fire(devrt_semaphore* s, dv_wnode* n) {
  DV_ASSERT(n->w && n == wlist(s, n)->head); /* a prefix: the smallest value goes first */
  unlink_node(s, n);
  pthread_mutex_lock(&n->w->mu);
  n->w->fired = true;
  pthread_cond_signal(&n->w->cv);
  pthread_mutex_unlock(&n->w->mu);
}

/* Fires the nodes of l waiting for v or less: a prefix, so it visits only the nodes it fires.
 * sched: woken because v got scheduled, they go to waiters[1] if they block again. */
static void fire_upto(devrt_semaphore* s, dv_wlist* l, uint64_t v, bool sched) {
  for (dv_wnode* n; (n = l->head) && n->value <= v;) {
    fire(s, n);
    n->sched_woken |= sched;
  }
}

/* The scheduled watermark, read without mu: acquire, pairing with raise_sched's release; raised
 * under mu. */
static uint64_t sched(devrt_semaphore* s) {
  return atomic_load_explicit(&s->scheduled, memory_order_acquire);
}
static void raise_sched(devrt_semaphore* s, uint64_t v) {
  if (sched(s) < v) atomic_store_explicit(&s->scheduled, v, memory_order_release);
}

static void drop_tp(devrt_semaphore* s, dv_tp* t) {
  DV_ASSERT(s->ntps > 0 && t->ev);
  s->ntps--;
  if (t->prev)
    t->prev->next = t->next;
  else
    s->head = t->next;
  if (t->next)
    t->next->prev = t->prev;
  else
    s->tail = t->prev;
  DV_ASSERT(!s->head == !s->ntps && !s->head == !s->tail);
  dv_pev_unref(s->rt, t->ev);
  free(t);
}

/* Signals are usually scheduled in value order and waited for near the newest, so the search
 * starts at the tail. */
dv_tp* dv_sem_find(devrt_semaphore* s, uint64_t v) {
  dv_tp* t = s->tail;
  if (!t || t->value < v) return NULL;
  while (t->prev && t->prev->value >= v) t = t->prev;
  DV_ASSERT(t->value >= v && (!t->prev || t->prev->value < v)); /* the oldest reaching v */
  return t;
}

uint64_t dv_sem_needed(devrt_semaphore* s) {
  uint64_t v = heap_min(&s->host);
  for (int i = 0; i < 2; i++)
    if (s->waiters[i].head && s->waiters[i].head->value < v) v = s->waiters[i].head->value;
  return v;
}

/* Whether the dispatcher must look at s now; sets queued and takes the list's reference. */
static bool release_check(devrt_semaphore* s, bool gpu) {
  uint64_t v = atomic_load_explicit(&s->value, memory_order_relaxed);
  bool dead = atomic_load_explicit(&s->state, memory_order_relaxed) != SEM_LIVE;
  bool go =
      heap_min(&s->dev) <= sched(s) || heap_min(&s->host) <= v || (dead && (s->dev.n || s->host.n));
  if (!go || s->queued) return false;
  /* Device work that scheduling should already have released, freed only now that the host saw
   * the device finish: a GPU -> host -> GPU hop (never happens unless the queue is wrong). */
  if (gpu && heap_min(&s->dev) <= v)
    atomic_fetch_add_explicit(&s->rt->q->hops, 1, memory_order_relaxed);
  s->queued = true;
  dv_sem_ref(s);
  return true;
}

static bool advance(devrt_semaphore* s, uint64_t v, bool gpu) {
  DV_ASSERT(v > atomic_load_explicit(&s->value, memory_order_relaxed)); /* the watermark rises */
  /* release: pairs with the acquire loads of the waiters (check, poll_all, devrt_semaphore_query):
   * a host waiter that sees v reached sees what the signaller did before */
  atomic_store_explicit(&s->value, v, memory_order_release);
  raise_sched(s, v);
  if (gpu) atomic_fetch_add_explicit(&s->rt->q->completions, 1, memory_order_relaxed);
  while (s->head && s->head->value <= v) drop_tp(s, s->head);
  for (int i = 0; i < 2; i++) fire_upto(s, &s->waiters[i], v, false);
  /* scheduled >= value; what is left is not yet complete, and nobody waits for a value reached */
  DV_ASSERT(sched(s) >= v && (!s->head || s->head->value > v));
  DV_ASSERT((!s->waiters[0].head || s->waiters[0].head->value > v) &&
            (!s->waiters[1].head || s->waiters[1].head->value > v));
  return release_check(s, gpu);
}

static bool kill(devrt_semaphore* s, int state) {
  /* release: pairs with the acquire loads of check, gone and devrt_semaphore_failure (cause and
   * msg are written before) */
  atomic_store_explicit(&s->state, state, memory_order_release);
  DV_ASSERT(state != SEM_LIVE);
  while (s->head) drop_tp(s, s->head);
  for (int i = 0; i < 2; i++) fire_upto(s, &s->waiters[i], UINT64_MAX, false);
  DV_ASSERT(!s->ntps && !s->waiters[0].head && !s->waiters[1].head); /* all dropped and woken */
  return release_check(s, false);
}

void dv_sem_complete(devrt_semaphore* s, uint64_t v, bool gpu) {
  pthread_mutex_lock(&s->mu);
  bool kick = atomic_load_explicit(&s->state, memory_order_relaxed) == SEM_LIVE &&
              v > atomic_load_explicit(&s->value, memory_order_relaxed) && advance(s, v, gpu);
  pthread_mutex_unlock(&s->mu);
  if (kick) dv_queue_kick(s->rt, s);
}

bool dv_sem_observe(devrt_semaphore* s, dv_pev* ev, uint64_t v) {
  devrt_runtime* rt = ev->rt; /* the signalling device: s's, or a peer's */
  bool done = dv_pev_done(rt, ev);
  devrt_status st = done ? DEVRT_OK : rt->be->event_query(ev->ev, &done);
  if (st != DEVRT_OK) { /* sticky: the device is lost, and with it what it was to signal here */
    dv_device_lost(rt, devrt_last_error());
    if (rt != s->rt) dv_sem_fail(s, DEVRT_ERR_DEVICE_LOST, rt->q->lost_msg);
    return true;
  }
  if (done) {
    /* done: settled, so its seq is final (relaxed); use tracking can skip waits on it now */
    dv_events_sync_end(rt, ev->slot, atomic_load_explicit(&ev->seq, memory_order_relaxed));
    dv_sem_complete(s, v, true);
  }
  return done;
}

/* dv_sem_observe, then drops the caller's reference on ev. */
static void observe(devrt_semaphore* s, dv_pev* ev, uint64_t v) {
  dv_sem_observe(s, ev, v);
  dv_pev_unref(s->rt, ev);
}

void dv_sem_schedule(devrt_semaphore* s, uint64_t v, dv_pev* ev) {
  dv_tp* t =
      malloc(sizeof *t); /* without it the value is still reached, through the stream's order */
  dv_pev* probe = NULL;
  uint64_t pv = 0;
  bool kick = false;
  pthread_mutex_lock(&s->mu);
  if (t && atomic_load_explicit(&s->state, memory_order_relaxed) == SEM_LIVE &&
      v > atomic_load_explicit(&s->value, memory_order_relaxed)) {
    dv_pev_ref(ev);
    *t = (dv_tp){.value = v,
                 .ev = ev,
                 .order = atomic_fetch_add_explicit(&s->rt->q->order, 1, memory_order_relaxed),
                 .prev = s->tail};
    while (t->prev && t->prev->value > v) t->prev = t->prev->prev; /* out of value order: rare */
    t->next = t->prev ? t->prev->next : s->head;
    if (t->prev)
      t->prev->next = t;
    else
      s->head = t;
    if (t->next)
      t->next->prev = t;
    else
      s->tail = t;
    DV_ASSERT((!t->prev || t->prev->value <= v) && (!t->next || v < t->next->value)); /* by value */
    t = NULL;
    s->ntps++;
    raise_sched(s, v);
    kick = release_check(s, false);
    fire_upto(s, &s->waiters[0], v, true); /* their value is scheduled now: they spin again */
    if (v >= dv_sem_needed(s)) dv_watch(s);
    /* Signals nobody observed pile up: past 64, every 16th schedule probes the 32nd oldest, and
     * completing it prunes the 32 before it with their events. */
    if (s->ntps >= 64 && s->ntps % 16 == 0) {
      dv_tp* p = s->head;
      for (int i = 0; i < 31; i++) p = p->next;
      DV_ASSERT(p && p->value > atomic_load_explicit(&s->value, memory_order_relaxed));
      probe = p->ev, pv = p->value;
      dv_pev_ref(probe);
    }
  }
  pthread_mutex_unlock(&s->mu);
  free(t);
  /* Issued on this thread when it is free to (dv_queue_kick_here: inside a release on this
   * thread, the next level joins its list; else a try-lock of the issue mutex, or the dispatch
   * thread); not this call's failure. */
  if (kick) DV_KEEP_ERROR(dv_queue_kick_here(s->rt, s));
  if (probe) observe(s, probe, pv);
}

void dv_sem_fail(devrt_semaphore* s, devrt_status cause, const char* msg) {
  pthread_mutex_lock(&s->mu);
  bool kick = false;
  if (atomic_load_explicit(&s->state, memory_order_relaxed) == SEM_LIVE) {
    s->cause = cause;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    kick = kill(s, SEM_FAILED);
  }
  pthread_mutex_unlock(&s->mu);
  if (kick) dv_queue_kick(s->rt, s);
}

dv_wait_result dv_sem_resolve(devrt_semaphore* s, uint64_t v, dv_action* a, dv_pev** ev,
                              devrt_status* cause, char* msg) {
  dv_wait_result r = DV_WAIT_PARKED;
  pthread_mutex_lock(&s->mu);
  int state = atomic_load_explicit(&s->state, memory_order_relaxed);
  dv_tp* t;
  if (state == SEM_FAILED) {
    *cause = s->cause, r = DV_WAIT_FAILED;
    snprintf(msg, DV_MSG, "%s", s->msg);
  } else if (state == SEM_DESTROYED) {
    *cause = DEVRT_ERR_CANCELLED, r = DV_WAIT_FAILED;
    snprintf(msg, DV_MSG,
             "semaphore %p was destroyed while a submission waited for it to reach %" PRIu64,
             (void*)s, v);
  } else if (atomic_load_explicit(&s->value, memory_order_relaxed) >= v) {
    r = DV_WAIT_MET;
  } else if (a->kind != DEVRT_WORK_HOST_CALL && (t = dv_sem_find(s, v)) != NULL) {
    r = dv_pev_done(s->rt, t->ev) ? DV_WAIT_MET : DV_WAIT_EVENT;
    if (r == DV_WAIT_EVENT) dv_pev_ref(t->ev), *ev = t->ev;
  } else if (!a->heap) {
    r = DV_WAIT_PARKED; /* the caller copies a to the heap and tries again */
  } else {
    if (!a->was_parked) atomic_fetch_add_explicit(&s->rt->q->parked, 1, memory_order_relaxed);
    a->was_parked = true;
    bool host = a->kind == DEVRT_WORK_HOST_CALL;
    if (!heap_push(host ? &s->host : &s->dev, v, a)) {
      *cause = DEVRT_ERR_OUT_OF_RESOURCES, r = DV_WAIT_FAILED;
      snprintf(msg, DV_MSG, "out of host memory parking a submission on semaphore %p", (void*)s);
    } else if (host && dv_sem_find(s, v)) {
      dv_watch(s); /* a host call needs the completion observed */
    }
  }
  pthread_mutex_unlock(&s->mu);
  return r;
}

dv_action* dv_sem_release(devrt_semaphore* s) {
  dv_action *head = NULL, **tail = &head;
  pthread_mutex_lock(&s->mu);
  s->queued = false;
  bool dead = atomic_load_explicit(&s->state, memory_order_relaxed) != SEM_LIVE;
  uint64_t v = atomic_load_explicit(&s->value, memory_order_relaxed);
  for (dv_heap* h = &s->dev; h; h = h == &s->dev ? &s->host : NULL)
    while (h->n && (dead || heap_min(h) <= (h == &s->dev ? sched(s) : v))) {
      dv_action* a = heap_pop(h);
      DV_ASSERT(a->heap && a->was_parked); /* only heap copies are parked */
      a->next = NULL, *tail = a, tail = &a->next;
    }
  /* what is left waits for a value not yet reached (a dead semaphore keeps nothing) */
  DV_ASSERT(dead ? !s->dev.n && !s->host.n
                 : heap_min(&s->dev) > sched(s) && heap_min(&s->host) > v);
  pthread_mutex_unlock(&s->mu);
  return head;
}

/* ---- peer links (src/multi) ---- */

bool dv_sems_parked_from(devrt_runtime* rt, devrt_runtime* other) {
  bool found = false;
  pthread_mutex_lock(&rt->q->mu);
  for (devrt_semaphore* s = rt->q->live; s && !found; s = s->next) {
    pthread_mutex_lock(&s->mu);
    for (dv_heap* h = &s->dev; h && !found; h = h == &s->dev ? &s->host : NULL)
      for (unsigned i = 0; i < h->n && !found; i++) found = h->v[i].a->rt == other;
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&rt->q->mu);
  return found;
}

/* Each semaphore of rt reaches the highest value other's work was to signal (it has completed:
 * the caller synchronized other), so no timepoint of rt holds other's marks. */
void dv_sems_forget(devrt_runtime* rt, devrt_runtime* other) {
  pthread_mutex_lock(&rt->q->mu);
  unsigned n = rt->q->nlive, k = 0;
  devrt_semaphore** v = malloc((n ? n : 1) * sizeof *v);
  for (devrt_semaphore* s = rt->q->live; v && s; s = s->next) dv_sem_ref(v[k++] = s);
  pthread_mutex_unlock(&rt->q->mu);
  for (unsigned i = 0; i < k; i++) {
    devrt_semaphore* s = v[i];
    uint64_t top = 0;
    pthread_mutex_lock(&s->mu);
    for (dv_tp* t = s->head; t; t = t->next)
      if (t->ev->rt == other && t->value > top) top = t->value;
    pthread_mutex_unlock(&s->mu);
    if (top) dv_sem_complete(s, top, false);
    dv_sem_unref(s);
  }
  free(v);
}

/* ---- host waits ---- */

static devrt_status gone(devrt_semaphore* s, const char* call) {
  if (atomic_load_explicit(&s->state, memory_order_acquire) == SEM_DESTROYED) /* pairs: kill */
    return dv_fail(DEVRT_ERR_CANCELLED, "%s: semaphore %p was destroyed while the call waited",
                   call, (void*)s);
  return dv_fail(DEVRT_ERR_ABORTED, "%s: semaphore %p failed: %s: %s", call, (void*)s,
                 devrt_status_name(s->cause), s->msg);
}

/* OK when the wait is satisfied, ABORTED / CANCELLED (*idx names the semaphore) when one of them
 * failed or went away, NOT_YET otherwise. */
static devrt_status check(unsigned n, devrt_semaphore* const* s, const uint64_t* v,
                          devrt_wait_mode mode, unsigned* idx, const char* call) {
  unsigned met = 0, any = 0;
  for (unsigned i = 0; i < n; i++) {
    /* acquire: pairs with kill's release (state) and advance's (value) */
    if (atomic_load_explicit(&s[i]->state, memory_order_acquire) != SEM_LIVE) {
      *idx = i;
      return gone(s[i], call);
    }
    if (atomic_load_explicit(&s[i]->value, memory_order_acquire) >= v[i]) met++, any = i;
  }
  if (mode == DEVRT_WAIT_ANY ? met == 0 : met < n) return NOT_YET;
  DV_ASSERT(met <= n && any < n);
  *idx = any;
  return DEVRT_OK;
}

/* Observes the scheduled signal that reaches v, so a waiter sees the device without waiting for
 * the completion thread. Lock-free when v is not even scheduled. */
static void poll(devrt_semaphore* s, uint64_t v) {
  if (sched(s) < v) return;
  pthread_mutex_lock(&s->mu);
  dv_tp* t = atomic_load_explicit(&s->value, memory_order_relaxed) < v ? dv_sem_find(s, v) : NULL;
  dv_pev* ev = t ? t->ev : NULL;
  uint64_t tv = t ? t->value : 0;
  if (ev) dv_pev_ref(ev);
  pthread_mutex_unlock(&s->mu);
  if (ev) observe(s, ev, tv);
}

static void poll_all(unsigned n, devrt_semaphore* const* s, const uint64_t* v) {
  for (unsigned i = 0; i < n; i++)
    if (atomic_load_explicit(&s[i]->value, memory_order_acquire) < v[i]) /* pairs: advance */
      poll(s[i], v[i]);
}

/* Sleeps on w with a node in each semaphore not yet satisfied, until one fires (a completion, a
 * failure, a destroy, or the first scheduling of the value it waits for) or the deadline passes.
 * NOT_YET when woken but not satisfied: the caller spins again. */
static devrt_status block(unsigned n, devrt_semaphore* const* s, const uint64_t* v,
                          devrt_wait_mode mode, uint64_t deadline, dv_wnode* nodes, dv_waiter* w,
                          unsigned* idx, const char* call) {
  for (unsigned i = 0; i < n; i++) {
    pthread_mutex_lock(&s[i]->mu);
    if (atomic_load_explicit(&s[i]->state, memory_order_relaxed) == SEM_LIVE &&
        atomic_load_explicit(&s[i]->value, memory_order_relaxed) < v[i]) {
      link_node(s[i], &nodes[i]);
      if (dv_sem_find(s[i], v[i])) dv_watch(s[i]); /* else scheduling its signal will */
    }
    pthread_mutex_unlock(&s[i]->mu);
  }
  struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
  devrt_status st = check(n, s, v, mode, idx, call);
  pthread_mutex_lock(&w->mu);
  while (st == NOT_YET && !w->fired)
    if (deadline == UINT64_MAX)
      pthread_cond_wait(&w->cv, &w->mu);
    else if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) == ETIMEDOUT)
      break;
  w->fired = false;
  pthread_mutex_unlock(&w->mu);
  for (unsigned i = 0; i < n; i++) { /* after this no signaller can reach w */
    pthread_mutex_lock(&s[i]->mu);
    if (nodes[i].linked) unlink_node(s[i], &nodes[i]);
    DV_ASSERT(!nodes[i].linked && nodes[i].w == w);
    pthread_mutex_unlock(&s[i]->mu);
  }
  return st == NOT_YET ? check(n, s, v, mode, idx, call) : st;
}

/* Spins (polling the events of the signals it waits for) up to the runtime's wait_spin_ns, then
 * blocks; a block woken because a value it waits for was just scheduled spins again, so a device
 * signal is seen when the GPU reaches it, not when the completion thread relays it. */
static devrt_status wait_many(unsigned n, devrt_semaphore* const* s, const uint64_t* v,
                              devrt_wait_mode mode, uint64_t timeout, unsigned* index,
                              const char* call) {
  unsigned idx = 0;
  uint64_t start = dv_now_ns();
  uint64_t deadline = timeout > UINT64_MAX - start ? UINT64_MAX : start + timeout;
  devrt_status st = check(n, s, v, mode, &idx, call);
  if (st == NOT_YET) {
    dv_wnode stack[16];
    dv_wnode* nodes = n <= 16 ? stack : calloc(n, sizeof *nodes);
    if (!nodes)
      return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "%s: out of host memory for %u wait nodes", call,
                     n);
    dv_waiter w = {.fired = false};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w.mu, NULL);
    for (unsigned i = 0; i < n; i++) {
      nodes[i] = (dv_wnode){.value = v[i], .w = &w};
      dv_sem_ref(s[i]); /* a destroy while we wait must not free them */
    }
    for (uint64_t now = start; st == NOT_YET && now < deadline; now = dv_now_ns()) {
      uint64_t spin_end = now + s[0]->rt->cfg.wait_spin_ns;
      do {
        poll_all(n, s, v);
        if ((st = check(n, s, v, mode, &idx, call)) != NOT_YET) break;
        cpu_relax();
      } while ((now = dv_now_ns()) < (spin_end < deadline ? spin_end : deadline));
      if (st == NOT_YET && now < deadline)
        st = block(n, s, v, mode, deadline, nodes, &w, &idx, call);
    }
    if (st == NOT_YET && timeout == 0) { /* a poll: one look at the events */
      poll_all(n, s, v);
      st = check(n, s, v, mode, &idx, call);
    }
    for (unsigned i = 0; i < n; i++) dv_sem_unref(s[i]);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    if (nodes != stack) free(nodes);
  }
  if (index && st != NOT_YET) *index = idx;
  if (st != NOT_YET) return st;
  return dv_fail(DEVRT_ERR_TIMEOUT,
                 "%s: %u semaphore(s) (first %p at %" PRIu64 ", waiting for %" PRIu64
                 ") not reached within %" PRIu64 " ns",
                 call, n, (void*)s[0], atomic_load_explicit(&s[0]->value, memory_order_relaxed),
                 v[0], timeout);
}

/* ---- public ---- */

devrt_status devrt_semaphore_create(devrt_runtime* rt, uint64_t initial, devrt_semaphore** out) {
  DV_RT_CHECK(rt, "devrt_semaphore_create");
  DV_ARG_CHECK(out, "devrt_semaphore_create", "out is NULL");
  DV_ARG_CHECK(initial <= DEVRT_SEMAPHORE_MAX_VALUE, "devrt_semaphore_create",
               "initial value %" PRIu64 " is above the maximum 2^63-1", initial);
  devrt_semaphore* s = calloc(1, sizeof *s);
  if (!s) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_semaphore_create: out of host memory");
  s->rt = rt;
  atomic_init(&s->refs, 1);
  atomic_init(&s->value, initial);
  atomic_init(&s->scheduled, initial);
  pthread_mutex_init(&s->mu, NULL);
  dv_queue_add_sem(rt, s);
  atomic_store_explicit(&s->magic, SEM_MAGIC, memory_order_release); /* pairs: dv_sem_ok */
  *out = s;
  return DEVRT_OK;
}

devrt_status devrt_semaphore_destroy(devrt_semaphore* s) {
  uint64_t m = SEM_MAGIC;
  /* acquire: pairs with devrt_semaphore_create's release; one destroy wins */
  DV_ARG_CHECK(s && atomic_compare_exchange_strong_explicit(&s->magic, &m, 0, memory_order_acquire,
                                                            memory_order_relaxed),
               "devrt_semaphore_destroy", "semaphore %p is NULL or destroyed", (void*)s);
  pthread_mutex_lock(&s->mu);
  bool kick = kill(s, SEM_DESTROYED);
  pthread_mutex_unlock(&s->mu);
  if (kick) dv_queue_kick(s->rt, s);
  dv_queue_remove_sem(s->rt, s);
  dv_sem_unref(s);
  return DEVRT_OK;
}

devrt_status devrt_semaphore_signal(devrt_semaphore* s, uint64_t v) {
  SEM_CHECK(s, "devrt_semaphore_signal");
  DV_ARG_CHECK(v <= DEVRT_SEMAPHORE_MAX_VALUE, "devrt_semaphore_signal",
               "value %" PRIu64 " is above the maximum 2^63-1", v);
  pthread_mutex_lock(&s->mu);
  uint64_t cur = atomic_load_explicit(&s->value, memory_order_relaxed);
  int state = atomic_load_explicit(&s->state, memory_order_relaxed);
  bool kick = state == SEM_LIVE && v > cur && advance(s, v, false);
  pthread_mutex_unlock(&s->mu);
  if (kick) { /* released work issued here fails through its signals, not through this call */
    dv_queue_kick_here(s->rt, s);
    dv_error_clear();
  }
  if (state != SEM_LIVE) return gone(s, "devrt_semaphore_signal");
  DV_ARG_CHECK(v > cur, "devrt_semaphore_signal",
               "value %" PRIu64 " is not above the current %" PRIu64 " of semaphore %p", v, cur,
               (void*)s);
  return DEVRT_OK;
}

devrt_status devrt_semaphore_query(devrt_semaphore* s, uint64_t* value) {
  SEM_CHECK(s, "devrt_semaphore_query");
  DV_ARG_CHECK(value, "devrt_semaphore_query", "value is NULL");
  pthread_mutex_lock(&s->mu);
  uint64_t oldest = s->head ? s->head->value : 0;
  pthread_mutex_unlock(&s->mu);
  if (oldest) poll(s, oldest);
  int state = atomic_load_explicit(&s->state, memory_order_acquire); /* pairs: kill's release */
  *value = atomic_load_explicit(&s->value, memory_order_acquire);    /* pairs: advance's */
  return state == SEM_LIVE ? DEVRT_OK : gone(s, "devrt_semaphore_query");
}

devrt_status devrt_semaphore_wait(devrt_semaphore* s, uint64_t value, uint64_t timeout_ns) {
  SEM_CHECK(s, "devrt_semaphore_wait");
  DV_ARG_CHECK(value <= DEVRT_SEMAPHORE_MAX_VALUE, "devrt_semaphore_wait",
               "value %" PRIu64 " is above the maximum 2^63-1", value);
  return wait_many(1, &s, &value, DEVRT_WAIT_ALL, timeout_ns, NULL, "devrt_semaphore_wait");
}

devrt_status devrt_semaphore_fail(devrt_semaphore* s, devrt_status status, const char* message) {
  SEM_CHECK(s, "devrt_semaphore_fail");
  DV_ARG_CHECK(status != DEVRT_OK && (unsigned)status < DEVRT_STATUS_COUNT_, "devrt_semaphore_fail",
               "status %d is OK or not a devrt_status", (int)status);
  char m[256];
  snprintf(m, sizeof m, "%s", message ? message : "");
  dv_sem_fail(s, status, m);
  return DEVRT_OK;
}

devrt_status devrt_semaphore_failure(devrt_semaphore* s, devrt_status* status,
                                     const char** message) {
  SEM_CHECK(s, "devrt_semaphore_failure");
  DV_ARG_CHECK(status && message, "devrt_semaphore_failure", "status or message is NULL");
  /* acquire: pairs with kill's release (cause and msg were written before) */
  bool failed = atomic_load_explicit(&s->state, memory_order_acquire) == SEM_FAILED;
  *status = failed ? s->cause : DEVRT_OK;
  *message = failed ? s->msg : "";
  return DEVRT_OK;
}

devrt_status devrt_semaphores_wait(unsigned n, devrt_semaphore* const* sems, const uint64_t* values,
                                   devrt_wait_mode mode, uint64_t timeout_ns, unsigned* index) {
  if (n == 0) return DEVRT_OK;
  DV_ARG_CHECK(sems && values, "devrt_semaphores_wait",
               "sems %p or values %p is NULL for %u semaphores", (void*)sems, (const void*)values,
               n);
  DV_ARG_CHECK(mode == DEVRT_WAIT_ALL || mode == DEVRT_WAIT_ANY, "devrt_semaphores_wait",
               "mode %d is not WAIT_ALL or WAIT_ANY", (int)mode);
  for (unsigned i = 0; i < n; i++) {
    DV_ARG_CHECK(dv_sem_ok(sems[i]), "devrt_semaphores_wait",
                 "semaphore %u (%p) is NULL or destroyed", i, (void*)sems[i]);
    DV_ARG_CHECK(values[i] <= DEVRT_SEMAPHORE_MAX_VALUE, "devrt_semaphores_wait",
                 "value %u (%" PRIu64 ") is above the maximum 2^63-1", i, values[i]);
  }
  return wait_many(n, sems, values, mode, timeout_ns, index, "devrt_semaphores_wait");
}
