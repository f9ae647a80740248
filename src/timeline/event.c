/* event.c: public events over the backend's events, each owned by one runtime and listed there
 * so a destroyed runtime frees the events its users left behind. */
#include <inttypes.h>
#include <stdlib.h>
#include "rt.h"

#define DV_EV_MAGIC 0x64657672745f6576ull /* "devrt_ev" */

struct devrt_event {
  uint64_t magic;
  devrt_runtime* rt;
  dv_event* e;
  struct devrt_event *prev, *next;
  /* Its last record was in a capture (the capture's id, else 0; relaxed: other threads only see
   * that it is not 0), on slot cap_slot after its cap_at-th recorded call (the capturing thread's
   * alone while cap_id is its capture's). */
  _Atomic uint64_t cap_id;
  unsigned cap_slot;
  uint32_t cap_at;
};

#define DV_EV_CHECK(rt, ev, call)                                                                \
  do {                                                                                           \
    DV_RT_CHECK(rt, call);                                                                       \
    if (DV_UNLIKELY(!(ev) || (ev)->magic != DV_EV_MAGIC || (ev)->rt != (rt)))                    \
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,                                                 \
                     "%s: event %p is NULL, destroyed or another runtime's", call, (void*)(ev)); \
  } while (0)

devrt_status devrt_event_create(devrt_runtime* rt, unsigned flags, devrt_event** out) {
  DV_RT_CHECK(rt, "devrt_event_create");
  DV_ARG_CHECK(out, "devrt_event_create", "out is NULL");
  DV_ARG_CHECK(!(flags & ~(unsigned)(DEVRT_EVENT_BLOCKING_SYNC | DEVRT_EVENT_TIMING)),
               "devrt_event_create", "unknown flags 0x%x", flags);
  devrt_event* ev = calloc(1, sizeof *ev);
  if (!ev) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_event_create: out of host memory");
  devrt_status s = rt->be->event_create(rt->dev, flags, &ev->e);
  if (s != DEVRT_OK) {
    free(ev);
    return s;
  }
  ev->magic = DV_EV_MAGIC;
  ev->rt = rt;
  pthread_mutex_lock(&rt->events_mu);
  DV_ASSERT(!rt->events || !rt->events->prev); /* the list's head has nothing before it */
  ev->next = rt->events;
  if (rt->events) rt->events->prev = ev;
  rt->events = ev;
  pthread_mutex_unlock(&rt->events_mu);
  *out = ev;
  return DEVRT_OK;
}

static void event_free(devrt_runtime* rt, devrt_event* ev) {
  rt->be->event_destroy(rt->dev, ev->e);
  ev->magic = 0;
  free(ev);
}

devrt_status devrt_event_destroy(devrt_runtime* rt, devrt_event* ev) {
  DV_EV_CHECK(rt, ev, "devrt_event_destroy");
  pthread_mutex_lock(&rt->events_mu);
  DV_ASSERT(ev->prev ? ev->prev->next == ev : rt->events == ev); /* on the runtime's list */
  DV_ASSERT(!ev->next || ev->next->prev == ev);
  if (ev->prev)
    ev->prev->next = ev->next;
  else
    rt->events = ev->next;
  if (ev->next) ev->next->prev = ev->prev;
  pthread_mutex_unlock(&rt->events_mu);
  event_free(rt, ev);
  return DEVRT_OK;
}

void dv_events_fini(devrt_runtime* rt) {
  DV_ASSERT(!dv_rt_ok(rt)); /* the runtime is being destroyed: no other call reaches the list */
  while (rt->events) {
    devrt_event* next = rt->events->next;
    event_free(rt, rt->events);
    rt->events = next;
  }
}

devrt_status devrt_event_record(devrt_runtime* rt, devrt_event* ev, devrt_stream stream) {
  DV_EV_CHECK(rt, ev, "devrt_event_record");
  dv_stream* s = NULL;
  dv_capture* cap = NULL; /* capturing: recorded in the capture, a point other streams can join */
  DV_CHECK(dv_stream_or_capture(rt, stream, &s, &cap, "devrt_event_record"));
  unsigned slot = DV_SID_SLOT(stream);
  devrt_status st = rt->be->event_record(ev->e, s);
  if (st == DEVRT_OK && cap) ev->cap_slot = slot, ev->cap_at = rt->slots[slot].cap_last;
  atomic_store_explicit(&ev->cap_id, st == DEVRT_OK && cap ? cap->id : 0, memory_order_relaxed);
  return st;
}

/* The calling thread's capture with that id, or NULL. */
static dv_capture* my_capture(uint64_t id) {
  dv_capture* c = dv_thread_captures;
  while (c && c->id != id) c = c->next;
  return c;
}

/* CUDA's fork: the stream's slot joins cap, claimed first (another thread may race for it), and
 * records from now on, on a capture stream of its own made where the stream runs, which waits for
 * the event (cuda: the driver's capture joins it there). */
static devrt_status join(devrt_runtime* rt, dv_capture* cap, devrt_stream stream, dv_event* e,
                         const char* call) {
  dv_slot* sl = &rt->slots[DV_SID_SLOT(stream)];
  if (cap->njoined == DV_CAPTURE_JOINED)
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "%s: a capture joins at most %u streams", call,
                   DV_CAPTURE_JOINED);
  if (!dv_capture_claim(sl)) return dv_capture_refused(rt, stream, call);
  dv_stream* ps = NULL;
  devrt_status st =
      rt->be->stream_create(rt->dev, dv_slot_green(sl), dv_slot_priority(rt, sl), &ps);
  if (st == DEVRT_OK && (st = rt->be->stream_wait(ps, e)) != DEVRT_OK)
    rt->be->stream_destroy(rt->dev, ps);
  if (st != DEVRT_OK) {
    dv_capture_unclaim(sl);
    return st;
  }
  cap->joined[cap->njoined++] = (dv_joined){DV_SID_SLOT(stream), ps, 0};
  sl->cap = cap, sl->cap_ps = ps, sl->cap_last = 0; /* this thread's alone: claimed */
  DV_ASSERT(cap->njoined <= DV_CAPTURE_JOINED);
  return DEVRT_OK;
}

/* A wait for an event recorded in the calling thread's capture: a stream of that capture waits
 * inside it, a stream of no capture joins it (join). Either way, a wait from another stream than
 * the event's joins the event's stream back when the event followed its last recorded call. */
static DV_NOINLINE devrt_status captured_wait(devrt_runtime* rt, devrt_stream stream,
                                              devrt_event* ev) {
  static const char* call = "devrt_stream_wait_event";
  dv_capture* cap = my_capture(atomic_load_explicit(&ev->cap_id, memory_order_relaxed));
  if (!cap || cap->rt != rt)
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "%s: event %p was recorded in a capture that is over or another thread's", call,
                   (void*)ev);
  if (!dv_stream_held(rt, stream)) return dv_stream_refused(rt, stream, call);
  dv_slot* sl = &rt->slots[DV_SID_SLOT(stream)];
  uintptr_t owner = atomic_load_explicit(&sl->cap_owner, memory_order_relaxed); /* as rt.h */
  if (owner && owner != (uintptr_t)&dv_thread_me) return dv_capture_refused(rt, stream, call);
  if (owner && sl->cap != cap)
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "%s: stream %#" PRIx64 " records another capture of this thread", call, stream);
  devrt_status st = DEVRT_OK;
  if (owner) { /* inside the graph */
    DV_ASSERT(sl->cap_ps);
    sl->cap_last++;
    st = rt->be->stream_wait(sl->cap_ps, ev->e);
  } else {
    st = join(rt, cap, stream, ev->e, call);
  }
  DV_ASSERT(ev->cap_at <= rt->slots[ev->cap_slot].cap_last); /* recorded after that many calls */
  for (unsigned j = 0; st == DEVRT_OK && j < cap->njoined; j++)
    if (cap->joined[j].slot == ev->cap_slot && ev->cap_slot != DV_SID_SLOT(stream) &&
        ev->cap_at > cap->joined[j].back)
      cap->joined[j].back = ev->cap_at;
  return st;
}

devrt_status devrt_stream_wait_event(devrt_runtime* rt, devrt_stream stream, devrt_event* ev) {
  DV_EV_CHECK(rt, ev, "devrt_stream_wait_event");
  if (DV_UNLIKELY(atomic_load_explicit(&ev->cap_id, memory_order_relaxed)))
    return captured_wait(rt, stream, ev);
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "devrt_stream_wait_event"));
  return rt->be->stream_wait(s, ev->e);
}

/* An event last recorded in a capture marks a point of the graph, not of any stream's work. */
static DV_NOINLINE DV_COLD devrt_status in_capture(devrt_event* ev, const char* call) {
  return dv_fail(DEVRT_ERR_INVALID_STATE,
                 "%s: event %p was last recorded in a capture: only a wait from a stream of that "
                 "capture can use it (record it outside a capture first)",
                 call, (void*)ev);
}

devrt_status devrt_event_query(devrt_runtime* rt, devrt_event* ev, bool* complete) {
  DV_EV_CHECK(rt, ev, "devrt_event_query");
  DV_ARG_CHECK(complete, "devrt_event_query", "complete is NULL");
  if (DV_UNLIKELY(atomic_load_explicit(&ev->cap_id, memory_order_relaxed)))
    return in_capture(ev, "devrt_event_query");
  return rt->be->event_query(ev->e, complete);
}

devrt_status devrt_event_synchronize(devrt_runtime* rt, devrt_event* ev) {
  DV_EV_CHECK(rt, ev, "devrt_event_synchronize");
  if (DV_UNLIKELY(atomic_load_explicit(&ev->cap_id, memory_order_relaxed)))
    return in_capture(ev, "devrt_event_synchronize");
  return rt->be->event_sync(ev->e);
}
