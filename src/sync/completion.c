/* completion.c: the completion thread. It learns that issued device work has finished, either by
 * blocking in a blocking-sync wait on the oldest pending event (DEVRT_COMPLETION_SYNC) or woken by
 * a host function on a per-slot side stream (DEVRT_COMPLETION_HOSTFN), then completes the work's
 * semaphore signals. An error seen there is sticky (a CUDA launch fault): the device is lost. */
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include "sync.h"

#define POLL_NS 50000000ull /* hostfn mode: pending work is also queried this often, for errors */

/* The host function: runs on the driver's callback thread, so it only posts. */
static void post(void* p) {
  dv_action* a = p;
  dv_queue* q = a->rt->q;
  pthread_mutex_lock(&q->cmu);
  atomic_store_explicit(&a->posted, true, memory_order_relaxed);
  if (q->cidle) pthread_cond_signal(&q->ccv);
  pthread_mutex_unlock(&q->cmu);
}

/* hostfn mode: the slot's side stream waits for a's event, then runs post(a). */
static void arm(devrt_runtime* rt, dv_action* a) {
  dv_queue* q = rt->q;
  pthread_mutex_lock(&q->cmu);
  dv_stream* side = q->side[a->slot];
  devrt_status st = DEVRT_OK;
  if (!side && (st = rt->be->stream_create(rt->dev, NULL, rt->cfg.stream_priority, &side)) == DEVRT_OK) q->side[a->slot] = side;
  pthread_mutex_unlock(&q->cmu);
  if (st == DEVRT_OK) st = rt->be->stream_wait(side, a->ev->ev);
  if (st == DEVRT_OK) st = rt->be->host_func(side, post, a);
  a->polled = st != DEVRT_OK; /* then the thread queries its event instead */
}

void dv_completion_push(devrt_runtime* rt, dv_action* a) {
  dv_queue* q = rt->q;
  if (rt->cfg.completion == DEVRT_COMPLETION_HOSTFN) arm(rt, a);
  pthread_mutex_lock(&q->cmu);
  a->next = NULL;
  a->order = q->order++;
  dv_pending* p = &q->pend[a->slot];
  if (p->head) p->tail->next = a;
  else p->head = a, q->active[q->nactive++] = a->slot;
  p->tail = a;
  if (q->cidle) pthread_cond_signal(&q->ccv);
  pthread_mutex_unlock(&q->cmu);
}

/* Whether a's work is known done. In hostfn mode an armed action is done only once posted: its
 * host function still holds it until then. */
static bool is_done(devrt_runtime* rt, dv_action* a, devrt_status* err) {
  if (rt->cfg.completion == DEVRT_COMPLETION_HOSTFN && !a->polled) return atomic_load_explicit(&a->posted, memory_order_relaxed);
  bool done = dv_pev_done(rt, a->ev);
  if (!done && (*err = rt->be->event_query(a->ev->ev, &done)) != DEVRT_OK) done = false;
  return done;
}

/* Unlinks the pending actions known done (per slot, up to the first that is not) into a list.
 * Under cmu. */
static dv_action* collect(devrt_runtime* rt, devrt_status* err) {
  dv_queue* q = rt->q;
  dv_action *list = NULL, **tail = &list;
  for (unsigned k = 0; k < q->nactive && *err == DEVRT_OK;) {
    dv_pending* p = &q->pend[q->active[k]];
    while (p->head && is_done(rt, p->head, err)) {
      *tail = p->head, tail = &p->head->next;
      p->head = p->head->next;
      *tail = NULL;
    }
    if (!p->head) p->tail = NULL, q->active[k] = q->active[--q->nactive];
    else k++;
  }
  return list;
}

static void finish(devrt_runtime* rt, dv_action* list) {
  for (dv_action *a = list, *nx; a; a = nx) {
    nx = a->next;
    dv_events_sync_end(rt, a->ev->slot, a->ev->seq); /* use tracking may skip waits on it now */
    for (unsigned i = 0; i < a->nsignals; i++) dv_sem_complete(a->signals[i].semaphore, a->signals[i].value, true);
    atomic_fetch_add_explicit(&rt->q->completions, 1, memory_order_relaxed);
    dv_action_free(a);
  }
}

/* The device is lost: every pending action goes (its semaphores are failed already). Under cmu. */
static void drop_all(devrt_runtime* rt) {
  dv_queue* q = rt->q;
  for (unsigned k = 0; k < q->nactive; k++) {
    dv_pending* p = &q->pend[q->active[k]];
    for (dv_action *a = p->head, *nx; a; a = nx) {
      nx = a->next;
      if (rt->cfg.completion == DEVRT_COMPLETION_HOSTFN && !a->polled && !atomic_load(&a->posted)) a->next = q->orphans, q->orphans = a;
      else dv_action_free(a);
    }
    p->head = p->tail = NULL;
  }
  q->nactive = 0;
}

static void idle(dv_queue* q, uint64_t timeout_ns) {
  q->cidle = true;
  if (timeout_ns) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t t = (uint64_t)ts.tv_nsec + timeout_ns;
    ts.tv_sec += (time_t)(t / 1000000000ull), ts.tv_nsec = (long)(t % 1000000000ull);
    pthread_cond_timedwait(&q->ccv, &q->cmu, &ts);
  } else {
    pthread_cond_wait(&q->ccv, &q->cmu);
  }
  q->cidle = false;
  atomic_fetch_add_explicit(&q->cwake, 1, memory_order_relaxed);
}

/* The oldest pending action's event (a reference), for a blocking wait. Under cmu. */
static dv_pev* oldest(dv_queue* q) {
  dv_action* o = NULL;
  for (unsigned k = 0; k < q->nactive; k++) {
    dv_action* h = q->pend[q->active[k]].head;
    if (!o || h->order < o->order) o = h;
  }
  dv_pev_ref(o->ev);
  return o->ev;
}

static void* complete_main(void* arg) {
  devrt_runtime* rt = arg;
  dv_queue* q = rt->q;
  bool hostfn = rt->cfg.completion == DEVRT_COMPLETION_HOSTFN;
  pthread_mutex_lock(&q->cmu);
  for (;;) {
    if (atomic_load_explicit(&q->lost, memory_order_acquire)) drop_all(rt); /* no query would succeed now */
    devrt_status err = DEVRT_OK;
    dv_action* done = collect(rt, &err);
    if (done || err != DEVRT_OK) {
      pthread_mutex_unlock(&q->cmu);
      if (err != DEVRT_OK) dv_device_lost(rt, devrt_last_error());
      finish(rt, done);
      pthread_mutex_lock(&q->cmu);
      continue;
    }
    if (!q->nactive) {
      if (q->cstop) break;
      idle(q, 0);
    } else if (hostfn) {
      idle(q, POLL_NS);
      for (unsigned k = 0; k < q->nactive && err == DEVRT_OK; k++) { /* a faulted device runs no host functions */
        bool d;
        err = rt->be->event_query(q->pend[q->active[k]].head->ev->ev, &d);
      }
      if (err != DEVRT_OK) {
        pthread_mutex_unlock(&q->cmu);
        dv_device_lost(rt, devrt_last_error());
        pthread_mutex_lock(&q->cmu);
      }
    } else {
      dv_pev* ev = oldest(q);
      pthread_mutex_unlock(&q->cmu);
      err = rt->be->event_sync(ev->ev); /* blocking-sync event: the thread sleeps */
      atomic_fetch_add_explicit(&q->cwake, 1, memory_order_relaxed);
      if (err == DEVRT_OK) dv_events_sync_end(rt, ev->slot, ev->seq);
      else dv_device_lost(rt, devrt_last_error());
      dv_pev_unref(rt, ev);
      pthread_mutex_lock(&q->cmu);
    }
  }
  pthread_mutex_unlock(&q->cmu);
  return NULL;
}

devrt_status dv_completion_start(devrt_runtime* rt) {
  dv_queue* q = rt->q;
  if (pthread_create(&q->completer, NULL, complete_main, rt)) return DEVRT_ERR_OUT_OF_RESOURCES;
  q->completer_up = true;
  return DEVRT_OK;
}

void dv_completion_stop(devrt_runtime* rt) {
  dv_queue* q = rt->q;
  if (q->completer_up) {
    pthread_mutex_lock(&q->cmu);
    q->cstop = true;
    pthread_cond_signal(&q->ccv);
    pthread_mutex_unlock(&q->cmu);
    pthread_join(q->completer, NULL);
  }
  for (unsigned i = 0; i < rt->nslots; i++)
    if (q->side[i]) {
      rt->be->stream_sync(q->side[i]); /* host functions still queued run (or the device is gone) */
      rt->be->stream_destroy(rt->dev, q->side[i]);
    }
  for (dv_action *a = q->orphans, *nx; a; a = nx) {
    nx = a->next;
    dv_action_free(a);
  }
}

void dv_device_lost(devrt_runtime* rt, const char* msg) {
  dv_queue* q = rt->q;
  char m[DV_MSG];
  snprintf(m, sizeof m, "device lost: %s", msg);
  pthread_mutex_lock(&q->mu);
  bool first = !atomic_load_explicit(&q->lost, memory_order_relaxed);
  if (first) {
    snprintf(q->lost_msg, sizeof q->lost_msg, "%s", m);
    atomic_store_explicit(&q->lost, true, memory_order_release);
  }
  pthread_mutex_unlock(&q->mu);
  if (!first) return;
  for (;;) { /* fail every live semaphore of the runtime, one at a time (failing one takes q->mu) */
    pthread_mutex_lock(&q->mu);
    devrt_semaphore* s = q->live;
    while (s && atomic_load_explicit(&s->state, memory_order_relaxed) != SEM_LIVE) s = s->next;
    if (s) dv_sem_ref(s);
    pthread_mutex_unlock(&q->mu);
    if (!s) break;
    dv_sem_fail(s, DEVRT_ERR_DEVICE_LOST, q->lost_msg);
    dv_sem_unref(s);
  }
  pthread_mutex_lock(&q->cmu);
  pthread_cond_signal(&q->ccv);
  pthread_mutex_unlock(&q->cmu);
}
