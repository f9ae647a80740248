/* queue.c: devrt_queue_submit (validate, resolve the waits against the semaphores' scheduled
 * signals, then issue at once in place, or copy into one allocation and park), the release of
 * parked submissions (by a host signal's thread when free, else the dispatch thread) and the
 * dispatch thread, which also runs host calls. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "../launch/launch.h"
#include "sync.h"
#include "../core/thread.h"

#define STAT(q, f) atomic_fetch_add_explicit(&(q)->f, 1, memory_order_relaxed)

void dv_action_free(dv_action* a) {
  if (!a->heap) return; /* borrowed: the caller's arrays, no references */
  for (unsigned i = 0; i < a->nwaits; i++) dv_sem_unref(a->waits[i].semaphore);
  for (unsigned i = 0; i < a->nsignals; i++) dv_sem_unref(a->signals[i].semaphore);
  free(a);
}

/* What a does, for failure messages. */
static const char* describe(const dv_action* a, char* buf, size_t n) {
  switch (a->kind) {
    case DEVRT_WORK_LAUNCH:
      snprintf(buf, n, "queued launch of %s", dv_launch_name(&a->launch));
      break;
    case DEVRT_WORK_HOST_CALL:
      snprintf(buf, n, "host call %p(%p)", (void*)(uintptr_t)a->fn, a->user);
      break;
    case DEVRT_WORK_ALLOC:
      snprintf(buf, n, "queued allocation of %zu bytes (tag %s)", a->size,
               a->tag ? a->tag : "untagged");
      break;
    case DEVRT_WORK_FREE:
      snprintf(buf, n, "queued free of block %#" PRIx64, a->block);
      break;
    case DEVRT_WORK_GRAPH:
      snprintf(buf, n, "queued launch of graph %p", (void*)a->graph);
      break;
    default:
      snprintf(buf, n, "barrier");
  }
  return buf;
}

void dv_action_fail(dv_action* a, devrt_status cause, const char* msg) {
  for (unsigned i = 0; i < a->nsignals; i++) dv_sem_fail(a->signals[i].semaphore, cause, msg);
  if (a->kind == DEVRT_WORK_ALLOC && a->block) dv_block_cancel(a->rt, a->block);
  STAT(a->rt->q, failed);
  dv_action_free(a);
}

/* ---- issue ---- */

static devrt_status do_work(dv_action* a, devrt_stream id, dv_stream* s, dv_pev** ev) {
  devrt_runtime* rt = a->rt;
  dv_pev** want = a->nsignals ? ev : NULL;
  switch (a->kind) {
    case DEVRT_WORK_LAUNCH:
      a->launch.stream = id;
      return dv_launch_issue(rt, &a->launch, id, s, NULL, want);
    case DEVRT_WORK_ALLOC: {
      devrt_status st = dv_block_commit(rt, a->block, id, s, want);
      a->block = 0; /* committed, or released by the failed commit: nothing left to cancel */
      return st;
    }
    case DEVRT_WORK_FREE:
      DV_CHECK(dv_block_free_on(rt, a->block, id, s));
      break;
    case DEVRT_WORK_GRAPH:
      return dv_graph_issue(rt, a->graph, id, s, want);
    default:
      break;
  }
  return want ? dv_pev_record(rt, DV_SID_SLOT(id), s, want)
              : DEVRT_OK; /* barrier or free: mark where it ends */
}

/* Issues a on its stream after device waits on evs (references it drops), then schedules its
 * signals; the action is done with. */
static void issue(dv_action* a, dv_pev** evs, unsigned nev) {
  devrt_runtime* rt = a->rt;
  devrt_stream id = a->stream;
  dv_stream* s = NULL;
  devrt_status st = id ? DEVRT_OK : devrt_stream_acquire(rt, DEVRT_ACQUIRE_SHARE, &id);
  if (st == DEVRT_OK) st = dv_stream_get(rt, id, &s, "devrt_queue_submit");
  dv_waits w; /* one per source slot: never more than the waits, every one a peer's at most */
  if (st == DEVRT_OK && (st = dv_waits_init(&w, rt)) == DEVRT_OK) w.foreign = DEVRT_QUEUE_MAX_WAITS;
  unsigned slot = DV_SID_SLOT(id), waits = 0;
  DV_ASSERT(nev <= a->nwaits && nev <= DEVRT_QUEUE_MAX_WAITS);
  for (unsigned i = 0; i < nev; i++) {
    if (st == DEVRT_OK) dv_waits_add(&w, rt, slot, evs[i]);
    dv_pev_unref(rt, evs[i]);
  }
  if (st == DEVRT_OK) waits = w.n;
  DV_ASSERT(waits <= nev); /* one per source slot: never more than the waits */
  if (st == DEVRT_OK && waits)
    st = dv_slot_settle(rt, slot, NULL, 0,
                        NULL); /* the slot's newest point stays before the waits */
  for (unsigned i = 0; i < waits; i++) {
    if (st == DEVRT_OK) st = dv_pev_wait(rt, s, w.v[i].ev, NULL);
    dv_pev_unref(rt, w.v[i].ev);
  }
  if (waits) atomic_fetch_add_explicit(&rt->q->dwaits, waits, memory_order_relaxed);
  dv_pev* ev = NULL;
  if (st == DEVRT_OK) st = do_work(a, id, s, &ev);
  if (!a->stream && id) DV_KEEP_ERROR(devrt_stream_release(rt, id));
  if (st != DEVRT_OK) {
    char msg[DV_MSG], what[128];
    snprintf(msg, sizeof msg, "%s failed: %s", describe(a, what, sizeof what), devrt_last_error());
    dv_action_fail(a, st, msg);
    if (st == DEVRT_ERR_DEVICE_LOST) dv_device_lost(rt, msg); /* a sticky CUDA error */
    return;
  }
  if (a->was_parked)
    STAT(rt->q, dispatched);
  else
    STAT(rt->q, inline_);
  for (unsigned i = 0; i < a->nsignals; i++)
    dv_sem_schedule(a->signals[i].semaphore, a->signals[i].value, ev);
  if (ev) dv_pev_unref(rt, ev);
  dv_action_free(a);
}

static void run_host_call(dv_action* a) {
  STAT(a->rt->q, host_calls);
  devrt_status st = a->fn(a->user);
  if (st != DEVRT_OK) {
    char msg[DV_MSG], what[128];
    snprintf(msg, sizeof msg, "%s returned %s: %s", describe(a, what, sizeof what),
             devrt_status_name(st), devrt_last_error());
    dv_action_fail(a, st, msg);
    return;
  }
  STAT(a->rt->q, dispatched);
  for (unsigned i = 0; i < a->nsignals; i++)
    dv_sem_complete(a->signals[i].semaphore, a->signals[i].value, false);
  dv_action_free(a);
}

static void push_ready(dv_action* a) {
  dv_queue* q = a->rt->q;
  DV_ASSERT(a->kind == DEVRT_WORK_HOST_CALL && a->heap); /* only host calls go to the thread */
  a->next = NULL;
  pthread_mutex_lock(&q->mu);
  if (q->ready_tail)
    q->ready_tail->next = a;
  else
    q->ready = a;
  q->ready_tail = a;
  DV_ASSERT(q->ready && !q->ready_tail->next);
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

/* Resolves every wait of a: parks it on the first semaphore not yet scheduled (completed, for a
 * host call), fails it if a wait failed, else issues it (host calls: to the dispatch thread).
 * False when a borrowed action would park: the caller copies it to the heap and tries again. */
static bool try_issue(dv_action* a) {
  devrt_runtime* rt = a->rt; /* once parked, a belongs to the semaphore */
  bool a_was_heap = a->heap;
  dv_pev* evs[DEVRT_QUEUE_MAX_WAITS];
  unsigned nev = 0;
  devrt_status cause = DEVRT_OK;
  char msg[DV_MSG];
  for (unsigned i = 0; i < a->nwaits; i++) {
    dv_wait_result r =
        dv_sem_resolve(a->waits[i].semaphore, a->waits[i].value, a, &evs[nev], &cause, msg);
    if (r == DV_WAIT_EVENT) nev++;
    DV_ASSERT(nev <= i + 1); /* at most one event per wait */
    if (r == DV_WAIT_PARKED || r == DV_WAIT_FAILED) {
      while (nev) dv_pev_unref(rt, evs[--nev]);
      if (r == DV_WAIT_FAILED) dv_action_fail(a, cause, msg); /* parked: a is no longer ours */
      return r == DV_WAIT_FAILED || a_was_heap;
    }
  }
  if (a->kind != DEVRT_WORK_HOST_CALL)
    issue(a, evs, nev);
  else
    push_ready(a);
  return true;
}

/* ---- releasing parked work ---- */

/* Issues what s's parked heaps release now (host calls go to the dispatch thread's ready list) and
 * drops the reference that came with s->queued. Under q->issue. */
static void release(devrt_semaphore* s) {
  DV_ASSERT(atomic_load_explicit(&s->refs, memory_order_relaxed) > 0); /* the list's reference */
  for (dv_action *x = dv_sem_release(s), *nx; x; x = nx) {
    nx = x->next;
    try_issue(x);
  }
  dv_sem_unref(s);
}

void dv_queue_kick(devrt_runtime* rt, devrt_semaphore* s) {
  dv_queue* q = rt->q;
  DV_ASSERT(s->queued && s->rt == rt); /* set by release_check, which took the list's reference */
  pthread_mutex_lock(&q->mu);
  s->qnext = q->dirty, q->dirty = s;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

/* A host signal issues what it releases on its own thread, and what that work's signals release
 * in turn (a chain of parked steps), while no other thread is issuing: a hand-off to the dispatch
 * thread costs its wake-up, and then its issuing contends with the signalling thread's waits on
 * the same semaphores (H200: a 200-step wait-first chain 1.26-1.69x the raw chain handed off,
 * 1.13x issued here). Bounded at CASCADE_MAX releases, so one signal call issues at most that
 * many levels (a few hundred microseconds); the rest, and other runtimes' semaphores (whose issue
 * mutex this thread does not hold), go to their dispatch threads. */
enum { CASCADE_MAX = 256 };
typedef struct cascade {
  devrt_runtime* rt;     /* whose issue mutex this thread holds: NULL outside a cascade */
  devrt_semaphore* more; /* released semaphores still to issue, linked by qnext (each is queued,
                          * so on no other list) */
  unsigned n;            /* releases taken on in this cascade */
} cascade;
static _Thread_local cascade tl_cascade;

void dv_queue_kick_here(devrt_runtime* rt, devrt_semaphore* s) {
  dv_queue* q = rt->q;
  cascade* c = &tl_cascade;
  DV_ASSERT(s->queued && c->n <= CASCADE_MAX); /* queued: on no other list, with its reference */
  if (c->rt == rt && c->n < CASCADE_MAX) {     /* inside this thread's cascade: the next level */
    c->n++;
    s->qnext = c->more, c->more = s;
    return;
  }
  if (c->rt || pthread_mutex_trylock(&q->issue) != 0) {
    dv_queue_kick(rt, s);
    return;
  }
  *c = (cascade){.rt = rt};
  release(s);
  while (c->more) {
    devrt_semaphore* x = c->more;
    c->more = x->qnext;
    release(x);
  }
  DV_ASSERT(c->rt == rt && !c->more && c->n <= CASCADE_MAX);
  c->rt = NULL;
  pthread_mutex_unlock(&q->issue);
}

/* ---- the dispatch thread ---- */

static void* dispatch_main(void* arg) {
  devrt_runtime* rt = arg;
  dv_queue* q = rt->q;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    devrt_semaphore* s = q->dirty;
    dv_action* a = q->ready;
    if (s) {
      q->dirty = s->qnext;
      pthread_mutex_unlock(&q->mu);
      pthread_mutex_lock(&q->issue);
      release(s);
      pthread_mutex_unlock(&q->issue);
      pthread_mutex_lock(&q->mu);
    } else if (a) {
      if (!(q->ready = a->next)) q->ready_tail = NULL;
      DV_ASSERT(!q->ready == !q->ready_tail);
      pthread_mutex_unlock(&q->mu);
      run_host_call(a);
      pthread_mutex_lock(&q->mu);
    } else if (q->stop) {
      break;
    } else {
      pthread_cond_wait(&q->cv, &q->mu);
      STAT(q, dwake);
    }
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

void dv_queue_add_sem(devrt_runtime* rt, devrt_semaphore* s) {
  dv_queue* q = rt->q;
  pthread_mutex_lock(&q->mu);
  s->next = q->live;
  if (q->live) q->live->prev = s;
  q->live = s;
  q->nlive++;
  DV_ASSERT(!s->prev && (!s->next || s->next->prev == s));
  pthread_mutex_unlock(&q->mu);
}

void dv_queue_remove_sem(devrt_runtime* rt, devrt_semaphore* s) {
  dv_queue* q = rt->q;
  pthread_mutex_lock(&q->mu);
  if (s->prev)
    s->prev->next = s->next;
  else
    q->live = s->next;
  if (s->next) s->next->prev = s->prev;
  DV_ASSERT(q->nlive > 0);
  q->nlive--;
  DV_ASSERT(!q->live == !q->nlive);
  pthread_mutex_unlock(&q->mu);
}

/* ---- submit ---- */

static devrt_status check_list(devrt_runtime* rt, const devrt_semaphore_value* l, unsigned n,
                               unsigned max, bool signal) {
  const char* what = signal ? "signal" : "wait";
  DV_ARG_CHECK(n <= max && (l || !n), "devrt_queue_submit", "%u %ss (at most %u) at %p", n, what,
               max, (const void*)l);
  for (unsigned i = 0; i < n; i++) {
    devrt_semaphore* s = l[i].semaphore;
    DV_ARG_CHECK(dv_sem_ok(s), "devrt_queue_submit", "%s %u: semaphore %p is NULL or destroyed",
                 what, i, (void*)s);
    DV_ARG_CHECK(s->rt == rt || dv_peer_linked(rt, s->rt), "devrt_queue_submit",
                 "%s %u: semaphore %p belongs to the runtime of ordinal %d, which has no peer "
                 "access with this one (devrt_peer_enable)",
                 what, i, (void*)s, s->rt->cfg.ordinal);
    DV_ARG_CHECK(l[i].value <= DEVRT_SEMAPHORE_MAX_VALUE, "devrt_queue_submit",
                 "%s %u: value %" PRIu64 " is above the maximum 2^63-1", what, i, l[i].value);
    uint64_t cur = atomic_load_explicit(&s->value, memory_order_relaxed); /* a number to check */
    DV_ARG_CHECK(!signal || l[i].value > cur, "devrt_queue_submit",
                 "signal %u: value %" PRIu64 " is not above the current %" PRIu64
                 " of semaphore %p",
                 i, l[i].value, cur, (void*)s);
  }
  return DEVRT_OK;
}

static devrt_status validate(devrt_runtime* rt, const devrt_submission* sub, unsigned* nargs,
                             size_t* argbytes) {
  DV_ARG_CHECK(sub, "devrt_queue_submit", "submission is NULL");
  DV_CHECK(check_list(rt, sub->waits, sub->nwaits, DEVRT_QUEUE_MAX_WAITS, false));
  DV_CHECK(check_list(rt, sub->signals, sub->nsignals, DEVRT_QUEUE_MAX_SIGNALS, true));
  dv_stream* s;
  if (sub->stream) DV_CHECK(dv_stream_get(rt, sub->stream, &s, "devrt_queue_submit"));
  switch (sub->kind) {
    case DEVRT_WORK_BARRIER:
      return DEVRT_OK;
    case DEVRT_WORK_LAUNCH:
      DV_CHECK(dv_launch_check(rt, &sub->launch));
      for (unsigned i = 0; i < sub->launch.nuses; i++)
        DV_CHECK(dv_block_check_use(rt, sub->launch.uses[i].block, "devrt_queue_submit"));
      return dv_launch_args_size(&sub->launch, nargs, argbytes);
    case DEVRT_WORK_HOST_CALL:
      DV_ARG_CHECK(sub->host.fn, "devrt_queue_submit", "host call without a function");
      return DEVRT_OK;
    case DEVRT_WORK_ALLOC:
      DV_ARG_CHECK((uint64_t)sub->alloc.size - 1 < DEVRT_MAX_ALLOC_SIZE && sub->alloc.out,
                   "devrt_queue_submit",
                   "allocation of %zu bytes (1..DEVRT_MAX_ALLOC_SIZE) into %p (tag %s)",
                   sub->alloc.size, (void*)sub->alloc.out,
                   sub->alloc.tag ? sub->alloc.tag : "untagged");
      return DEVRT_OK;
    case DEVRT_WORK_FREE:
      return dv_block_check(rt, sub->block, "devrt_queue_submit");
    case DEVRT_WORK_GRAPH: /* its blocks are checked when it is issued */
      return dv_graph_check(rt, sub->graph);
    default:
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                     "devrt_queue_submit: work kind %d is not a devrt_work_kind", (int)sub->kind);
  }
}

/* The fields of the work itself (a launch's uses and arguments are set by the caller). */
static void borrow_work(dv_action* a, const devrt_submission* sub) {
  a->fn = sub->host.fn, a->user = sub->host.user;
  a->size = sub->alloc.size, a->tag = sub->alloc.tag, a->graph = sub->graph;
  if (sub->kind == DEVRT_WORK_FREE) a->block = sub->block;
}

static size_t up16(size_t x) { return (x + 15) & ~(size_t)15; }

/* Copies the submission (lists, uses, kernel arguments) into one allocation. */
static dv_action* build(devrt_runtime* rt, const devrt_submission* sub, unsigned nargs,
                        size_t argbytes) {
  size_t nw = sub->nwaits * sizeof(devrt_semaphore_value),
         ns = sub->nsignals * sizeof(devrt_semaphore_value);
  size_t nu = sub->kind == DEVRT_WORK_LAUNCH ? sub->launch.nuses * sizeof(devrt_block_use) : 0;
  size_t np = nargs * sizeof(void*);
  unsigned char* m =
      malloc(up16(sizeof(dv_action)) + up16(nw) + up16(ns) + up16(nu) + up16(np) + argbytes);
  if (!m) return NULL;
  dv_action* a = (dv_action*)m;
  memset(a, 0, sizeof *a);
  m += up16(sizeof *a);
  a->rt = rt, a->kind = sub->kind, a->stream = sub->stream, a->heap = true;
  a->waits = memcpy(m, sub->waits ? (const void*)sub->waits : "", nw), m += up16(nw);
  a->signals = memcpy(m, sub->signals ? (const void*)sub->signals : "", ns), m += up16(ns);
  a->nwaits = sub->nwaits, a->nsignals = sub->nsignals;
  for (unsigned i = 0; i < a->nwaits; i++) dv_sem_ref(a->waits[i].semaphore);
  for (unsigned i = 0; i < a->nsignals; i++) dv_sem_ref(a->signals[i].semaphore);
  if (sub->kind == DEVRT_WORK_LAUNCH) {
    a->launch = sub->launch;
    a->launch.uses = nu ? memcpy(m, sub->launch.uses, nu) : NULL, m += up16(nu);
    if (nargs) {
      a->launch.args = (void**)m;
      dv_launch_args_copy(&sub->launch, a->launch.args, m + up16(np));
    }
  }
  borrow_work(a, sub);
  return a;
}

static DV_COLD devrt_status not_recorded(const devrt_submission* sub, const char* why) {
  return dv_fail(DEVRT_ERR_INVALID_STATE,
                 "devrt_queue_submit: stream %#" PRIx64
                 " is capturing on this thread (devrt_capture_begin), which records no %s",
                 sub->stream, why);
}

/* A submission on a stream the calling thread captures: recorded as the direct call would be. */
static DV_NOINLINE devrt_status record(devrt_runtime* rt, const devrt_submission* sub) {
  if (sub->nwaits || sub->nsignals)
    return not_recorded(sub,
                        "waits or signals: a semaphore value is reached once and a graph "
                        "replays many times: submit the graph's launch with "
                        "DEVRT_WORK_GRAPH instead");
  devrt_launch_desc d = sub->launch;
  switch (sub->kind) {
    case DEVRT_WORK_BARRIER:
      return DEVRT_OK;
    case DEVRT_WORK_LAUNCH:
      d.stream = sub->stream;
      return devrt_launch(rt, &d);
    case DEVRT_WORK_ALLOC:
      return devrt_block_alloc(rt, sub->alloc.size, sub->stream, sub->alloc.tag, sub->alloc.out);
    case DEVRT_WORK_FREE:
      return devrt_block_free(rt, sub->block);
    case DEVRT_WORK_HOST_CALL:
      return not_recorded(sub, "host call: it runs on devrt's dispatch thread, not in a replay");
    case DEVRT_WORK_GRAPH:
      return not_recorded(sub, "graph launch: launch the graph once the capture has ended");
    default:
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                     "devrt_queue_submit: work kind %d is not a devrt_work_kind", (int)sub->kind);
  }
}

devrt_status devrt_queue_submit(devrt_runtime* rt, const devrt_submission* sub) {
  DV_RT_CHECK(rt, "devrt_queue_submit");
  dv_queue* q = rt->q;
  unsigned nargs = 0;
  size_t argbytes = 0;
  devrt_block blk = 0;
  if (sub && dv_stream_held(rt, sub->stream) &&
      dv_capture_mine(&rt->slots[DV_SID_SLOT(sub->stream)])) { /* recorded, not queued */
    devrt_status st = record(rt, sub);
    if (st == DEVRT_OK)
      STAT(q, submitted);
    else
      STAT(q, refused);
    return st;
  }
  devrt_status st = validate(rt, sub, &nargs, &argbytes);
  /* acquire: pairs with dv_device_lost's release (lost_msg is written before) */
  if (st == DEVRT_OK && atomic_load_explicit(&q->lost, memory_order_acquire))
    st = dv_fail(DEVRT_ERR_DEVICE_LOST, "devrt_queue_submit: %s", q->lost_msg);
  if (st == DEVRT_OK && sub->kind == DEVRT_WORK_ALLOC)
    st = dv_block_reserve(rt, sub->alloc.size, sub->stream, sub->alloc.tag, &blk);
  if (st != DEVRT_OK) {
    STAT(q, refused);
    return st;
  }
  STAT(q, submitted);
  if (sub->kind == DEVRT_WORK_ALLOC) *sub->alloc.out = blk;
  /* Issued at once, the submission is used in place; only one that must park is copied. */
  dv_action now = {.rt = rt,
                   .kind = sub->kind,
                   .stream = sub->stream,
                   .waits = (devrt_semaphore_value*)sub->waits,
                   .signals = (devrt_semaphore_value*)sub->signals,
                   .nwaits = sub->nwaits,
                   .nsignals = sub->nsignals,
                   .launch = sub->launch,
                   .block = blk};
  borrow_work(&now, sub);
  if (sub->kind != DEVRT_WORK_HOST_CALL && try_issue(&now)) return DEVRT_OK;
  dv_action* a = build(rt, sub, nargs, argbytes);
  if (!a) { /* accepted already: the failure goes to its signals */
    now.heap = false;
    dv_action_fail(&now, DEVRT_ERR_OUT_OF_RESOURCES,
                   "devrt_queue_submit: out of host memory to park a submission");
    return DEVRT_OK;
  }
  if (blk) a->block = blk; /* the reservation made above */
  try_issue(a);
  return DEVRT_OK;
}

devrt_status devrt_queue_stats_get(devrt_runtime* rt, devrt_queue_stats* out) {
  DV_RT_CHECK(rt, "devrt_queue_stats_get");
  DV_ARG_CHECK(out, "devrt_queue_stats_get", "out is NULL");
  dv_queue* q = rt->q;
#define LD(f) atomic_load_explicit(&q->f, memory_order_relaxed)
  *out = (devrt_queue_stats){.submitted = LD(submitted),
                             .refused = LD(refused),
                             .issued_inline = LD(inline_),
                             .parked = LD(parked),
                             .issued_by_dispatch = LD(dispatched),
                             .host_calls = LD(host_calls),
                             .failed = LD(failed),
                             .device_waits = LD(dwaits),
                             .host_hops = LD(hops),
                             .dispatch_wakeups = LD(dwake),
                             .completion_wakeups = LD(cwake),
                             .completions = LD(completions),
                             .completion = (devrt_completion_mode)rt->cfg.completion,
                             .device_lost = LD(lost)};
#undef LD
  return DEVRT_OK;
}

/* ---- lifecycle ---- */

devrt_status dv_queue_init(devrt_runtime* rt) {
  dv_queue* q = calloc(1, sizeof *q);
  if (q) q->side = calloc(rt->nslots, sizeof *q->side), q->bev = calloc(rt->nslots, sizeof *q->bev);
  if (!q || !q->side || !q->bev) {
    if (q) free(q->side), free(q->bev);
    free(q);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                   "devrt_runtime: out of host memory for the submission queue");
  }
  pthread_mutex_init(&q->issue, NULL);
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  pthread_mutex_init(&q->cmu, NULL);
  pthread_cond_init(&q->ccv, NULL);
  rt->q = q;
  if (dv_thread_start(&q->dispatcher, dispatch_main, rt) == 0) q->dispatcher_up = true;
  if (q->dispatcher_up && dv_completion_start(rt) == DEVRT_OK) return DEVRT_OK;
  dv_queue_fini(rt);
  return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                 "devrt_runtime: cannot start the queue's dispatch and completion threads");
}

devrt_status dv_queue_fini(devrt_runtime* rt) {
  dv_queue* q = rt->q;
  pthread_mutex_lock(&q->mu);
  unsigned live = q->nlive;
  q->stop = live == 0;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
  if (live)
    return dv_fail(
        DEVRT_ERR_INVALID_STATE,
        "devrt_runtime_destroy: %u semaphore(s) of this runtime are alive: destroy them first",
        live);
  if (q->dispatcher_up) pthread_join(q->dispatcher, NULL);
  /* the dispatch thread stops once nothing is left to release or run */
  DV_ASSERT(!q->dispatcher_up || (!q->dirty && !q->ready && !q->live));
  dv_completion_stop(rt);
  pthread_mutex_destroy(&q->issue);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->cmu);
  pthread_cond_destroy(&q->ccv);
  free(q->side), free(q->bev);
  free(q);
  rt->q = NULL;
  return DEVRT_OK;
}
