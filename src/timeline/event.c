/* event.c: public events over the backend's events, each owned by one runtime and listed there
 * so a destroyed runtime frees the events its users left behind. */
#include <stdlib.h>
#include "rt.h"

#define DV_EV_MAGIC 0x64657672745f6576ull /* "devrt_ev" */

struct devrt_event {
  uint64_t magic;
  devrt_runtime* rt;
  dv_event* e;
  struct devrt_event *prev, *next;
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
  DV_CHECK(dv_stream_get(rt, stream, &s, "devrt_event_record"));
  return rt->be->event_record(ev->e, s);
}

devrt_status devrt_stream_wait_event(devrt_runtime* rt, devrt_stream stream, devrt_event* ev) {
  DV_EV_CHECK(rt, ev, "devrt_stream_wait_event");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "devrt_stream_wait_event"));
  return rt->be->stream_wait(s, ev->e);
}

devrt_status devrt_event_query(devrt_runtime* rt, devrt_event* ev, bool* complete) {
  DV_EV_CHECK(rt, ev, "devrt_event_query");
  DV_ARG_CHECK(complete, "devrt_event_query", "complete is NULL");
  return rt->be->event_query(ev->e, complete);
}

devrt_status devrt_event_synchronize(devrt_runtime* rt, devrt_event* ev) {
  DV_EV_CHECK(rt, ev, "devrt_event_synchronize");
  return rt->be->event_sync(ev->e);
}
