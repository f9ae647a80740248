/* completion.c: the completion thread. It watches only the semaphores a blocked host waiter or a
 * parked host call needs, and follows the device signal they wait for on a per-slot side stream:
 * a blocking-sync event recorded there to sleep in (DEVRT_COMPLETION_SYNC), or a host function
 * there that posts to it (DEVRT_COMPLETION_HOSTFN). An error seen while observing completion is
 * sticky (a CUDA launch fault): the device is lost. */
#include <stdio.h>
#include <time.h>
#include <sched.h>
#include "sync.h"
#include "../core/thread.h"

#define POLL_NS \
  50000000ull /* hostfn mode: the watched signals are also queried this often (errors) */

void dv_watch(devrt_semaphore* s) {
  if (s->watched) return;
  dv_queue* q = s->rt->q;
  DV_ASSERT(atomic_load_explicit(&s->refs, memory_order_relaxed) > 0); /* the caller's, under mu */
  s->watched = true;
  dv_sem_ref(s);
  pthread_mutex_lock(&q->cmu);
  s->wnext = q->watch, q->watch = s;
  if (q->cidle) pthread_cond_signal(&q->ccv);
  pthread_mutex_unlock(&q->cmu);
}

/* The host function: runs on the driver's callback thread, so it only posts. */
static void post(void* p) {
  dv_queue* q = p;
  pthread_mutex_lock(&q->cmu);
  q->posts++;
  if (q->cidle) pthread_cond_signal(&q->ccv);
  pthread_mutex_unlock(&q->cmu);
}

/* The completion thread follows ev on its slot's side stream (so nothing waits on a user's
 * stream): hostfn mode, a host function posts after it; sync mode, the slot's blocking-sync event
 * is recorded after it (*bev) for the thread to sleep in. */
static devrt_status follow(devrt_runtime* rt, dv_pev* ev, dv_event** bev) {
  dv_queue* q = rt->q;
  unsigned i = ev->slot % rt->nslots; /* a peer's mark shares a side stream with rt's slot */
  devrt_status st = DEVRT_OK;
  if (!q->side[i]) st = rt->be->stream_create(rt->dev, NULL, rt->cfg.stream_priority, &q->side[i]);
  if (st == DEVRT_OK && bev && !q->bev[i])
    st = rt->be->event_create(rt->dev, DEVRT_EVENT_BLOCKING_SYNC, &q->bev[i]);
  if (st == DEVRT_OK) st = dv_pev_wait(rt, q->side[i], ev, NULL);
  if (st == DEVRT_OK)
    st = bev ? rt->be->event_record(*bev = q->bev[i], q->side[i])
             : rt->be->host_func(q->side[i], post, q, 0);
  return st;
}

typedef struct target {
  devrt_semaphore* s;
  dv_pev* ev;
  uint64_t value, order;
} target;

/* What s needs observed: the scheduled signal reaching the smallest value a host waiter or a
 * parked host call waits for. False (and s leaves the watch list) when there is none; scheduling
 * that value puts s back. */
static bool needed(devrt_runtime* rt, devrt_semaphore* s, target* t, bool* arm_it) {
  pthread_mutex_lock(&s->mu);
  dv_tp* tp = atomic_load_explicit(&s->state, memory_order_relaxed) == SEM_LIVE
                  ? dv_sem_find(s, dv_sem_needed(s))
                  : NULL;
  if (tp) {
    DV_ASSERT(tp->ev && tp->value > atomic_load_explicit(&s->value, memory_order_relaxed));
    *t = (target){s, tp->ev, tp->value, tp->order};
    dv_pev_ref(t->ev);
    *arm_it = rt->cfg.completion == DEVRT_COMPLETION_HOSTFN && !tp->armed;
    tp->armed = true;
  } else {
    s->watched = false;
  }
  pthread_mutex_unlock(&s->mu);
  return tp != NULL;
}

static void idle(dv_queue* q, uint64_t timeout_ns) {
  DV_ASSERT(!q->cidle); /* only the completion thread idles, under cmu */
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

static void* complete_main(void* arg) {
  devrt_runtime* rt = arg;
  dv_queue* q = rt->q;
  bool hostfn = rt->cfg.completion == DEVRT_COMPLETION_HOSTFN;
  pthread_mutex_lock(&q->cmu);
  for (;;) {
    q->rounds++; /* between passes: nothing held (dv_completion_pass) */
    devrt_semaphore* list = q->watch;
    q->watch = NULL;
    uint64_t posts = q->posts;
    pthread_mutex_unlock(&q->cmu);
    /* Every watched semaphore: drop the ones nobody needs, complete what is done, keep the rest. */
    devrt_semaphore *keep = NULL, *nx;
    target oldest = {0};
    bool progress = false;
    for (devrt_semaphore* s = list; s; s = nx) {
      nx = s->wnext;
      target t;
      bool arm_it = false;
      if (!needed(rt, s, &t, &arm_it)) {
        dv_sem_unref(s);
        continue;
      }
      if (arm_it && follow(rt, t.ev, NULL) != DEVRT_OK) dv_device_lost(rt, devrt_last_error());
      s->wnext = keep, keep = s; /* still watched: needed() may say otherwise next time */
      if (dv_sem_observe(s, t.ev, t.value))
        progress = true;
      else if (!oldest.s || t.order < oldest.order) {
        if (oldest.s) dv_pev_unref(rt, oldest.ev);
        oldest = t, t.ev = NULL;
      }
      if (t.ev) dv_pev_unref(rt, t.ev);
    }
    pthread_mutex_lock(&q->cmu);
    while (keep) nx = keep->wnext, keep->wnext = q->watch, q->watch = keep, keep = nx;
    if (progress || (q->watch && oldest.s == NULL)) { /* look again at once */
    } else if (!q->watch) {
      if (q->cstop) break;
      idle(q, 0);
    } else if (hostfn) {
      if (q->posts == posts) idle(q, POLL_NS);
    } else { /* sync: sleep in a blocking-sync event behind the oldest watched signal */
      pthread_mutex_unlock(&q->cmu);
      dv_event* bev = NULL;
      devrt_status st = follow(rt, oldest.ev, &bev);
      if (st == DEVRT_OK) st = rt->be->event_sync(bev);
      atomic_fetch_add_explicit(&q->cwake, 1, memory_order_relaxed);
      if (st != DEVRT_OK) dv_device_lost(rt, devrt_last_error());
      pthread_mutex_lock(&q->cmu);
    }
    DV_ASSERT(!oldest.s == !oldest.ev); /* a target holds its event's reference */
    if (oldest.s) dv_pev_unref(rt, oldest.ev);
  }
  DV_ASSERT(!q->watch && q->cstop); /* it stops only with nothing left to watch */
  pthread_mutex_unlock(&q->cmu);
  return NULL;
}

devrt_status dv_completion_start(devrt_runtime* rt) {
  dv_queue* q = rt->q;
  if (dv_thread_start(&q->completer, complete_main, rt)) return DEVRT_ERR_OUT_OF_RESOURCES;
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
  for (unsigned i = 0; i < rt->nslots; i++) {
    if (q->side[i]) {
      rt->be->stream_sync(q->side[i]); /* host functions still queued run (or the device is gone) */
      rt->be->stream_destroy(rt->dev, q->side[i]);
    }
    if (q->bev[i]) rt->be->event_destroy(rt->dev, q->bev[i]);
  }
}

void dv_completion_pass(devrt_runtime* rt) {
  dv_queue* q = rt->q;
  pthread_mutex_lock(&q->cmu);
  uint64_t r0 = q->rounds;
  while (q->completer_up && q->rounds == r0) {
    pthread_cond_signal(&q->ccv); /* an idle thread comes round */
    pthread_mutex_unlock(&q->cmu);
    sched_yield();
    pthread_mutex_lock(&q->cmu);
  }
  pthread_mutex_unlock(&q->cmu);
}

void dv_device_lost(devrt_runtime* rt, const char* msg) {
  dv_queue* q = rt->q;
  char m[DV_MSG];
  snprintf(m, sizeof m, "device lost: %s", msg);
  pthread_mutex_lock(&q->mu);
  bool first = !atomic_load_explicit(&q->lost, memory_order_relaxed);
  if (first) {
    snprintf(q->lost_msg, sizeof q->lost_msg, "%s", m);
    atomic_store_explicit(&q->lost, true, memory_order_release); /* pairs: devrt_queue_submit */
  }
  DV_ASSERT(atomic_load_explicit(&q->lost, memory_order_relaxed) && q->lost_msg[0]); /* sticky */
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
}
