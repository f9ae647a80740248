/* graph.c: captures and graphs (devrt/graph.h). A capture gives the stream's slot a dv_capture
 * (its own backend stream in capture, the union of the recorded uses, the blocks it allocated)
 * that only the capturing thread touches; the end makes the backend's executable graph, which
 * owns the blocks the capture allocated and freed. A graph's launch is a recorded launch over the
 * union (src/launch/launch.c); its destroy frees the blocks it owns. */
#include <inttypes.h>
#include <stdlib.h>
#include "launch.h"
#include "../block/block.h"

#define GRAPH_MAGIC 0x6772617068766476ull /* "graphvdv" */

struct devrt_graph {
  _Atomic uint64_t magic;
  devrt_runtime* rt;
  dv_graph* exec;
  unsigned n, recorded;
  _Atomic uint64_t launches; /* a figure: relaxed */
  devrt_block* owned;        /* blocks the capture allocated and freed: freed with the graph */
  unsigned nowned;
  dv_hold* holds; /* dropped at the destroy (dv_capture_hold) */
  unsigned nholds;
  devrt_block_use u[]; /* the union of the captured uses */
};

devrt_status devrt_capture_begin(devrt_runtime* rt, devrt_stream stream) {
  DV_RT_CHECK(rt, "devrt_capture_begin");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "devrt_capture_begin")); /* refused if capturing */
  dv_slot* sl = &rt->slots[DV_SID_SLOT(stream)];
  if (!dv_capture_claim(sl)) /* another thread began, or joined it to a capture, meanwhile */
    return dv_capture_refused(rt, stream, "devrt_capture_begin");
  dv_capture* cap = calloc(1, sizeof *cap);
  if (!cap) {
    dv_capture_unclaim(sl);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_capture_begin: out of host memory");
  }
  /* the capture's stream where the user's runs (a partition's green context, its priority): the
   * captured kernels keep that context, so a replay runs on the partition's SMs */
  devrt_status st =
      rt->be->stream_create(rt->dev, dv_slot_green(sl), dv_slot_priority(rt, sl), &cap->ps);
  if (st == DEVRT_OK && (st = rt->be->capture_begin(cap->ps)) != DEVRT_OK)
    rt->be->stream_destroy(rt->dev, cap->ps);
  if (st != DEVRT_OK) {
    free(cap);
    dv_capture_unclaim(sl);
    return st;
  }
  static _Atomic uint64_t ids; /* a figure's worth of order: relaxed */
  cap->rt = rt, cap->next = dv_thread_captures;
  cap->id = atomic_fetch_add_explicit(&ids, 1, memory_order_relaxed) + 1;
  dv_thread_captures = cap;
  sl->cap = cap, sl->cap_ps = cap->ps, sl->cap_last = 0; /* this thread's alone: claimed */
  return DEVRT_OK;
}

static void drop_holds(dv_hold* h, unsigned n) {
  for (unsigned i = 0; i < n; i++) h[i].drop(h[i].p);
  free(h);
}

devrt_status devrt_capture_end(devrt_runtime* rt, devrt_stream stream, devrt_graph** out) {
  DV_RT_CHECK(rt, "devrt_capture_end");
  DV_ARG_CHECK(out, "devrt_capture_end", "out is NULL");
  if (!dv_stream_held(rt, stream)) return dv_stream_refused(rt, stream, "devrt_capture_end");
  dv_slot* sl = &rt->slots[DV_SID_SLOT(stream)];
  if (!dv_capture_mine(sl))
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_capture_end: stream %#" PRIx64 " is not capturing on this thread",
                   stream);
  dv_capture* cap = sl->cap;
  if (sl->cap_ps != cap->ps)
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_capture_end: stream %#" PRIx64
                   " joined another stream's capture by an event: end the capture there",
                   stream);
  /* a stream the capture forked into must have been joined back (CUDA's rule): named, and the
   * capture ended all the same */
  uint64_t unjoined = 0;
  for (unsigned j = 0; j < cap->njoined; j++) {
    dv_slot* js = &rt->slots[cap->joined[j].slot];
    if (!unjoined && cap->joined[j].back != js->cap_last)
      unjoined = atomic_load_explicit(&js->id, memory_order_relaxed);
    js->cap = NULL, js->cap_ps = NULL;
    dv_capture_unclaim(js);
  }
  sl->cap = NULL, sl->cap_ps = NULL;
  dv_capture_unclaim(sl);
  dv_capture** p = &dv_thread_captures;
  while (*p != cap) p = &(*p)->next;
  *p = cap->next;
  dv_graph* exec = NULL;
  /* the graph's launch stream where the user's runs, as the capture's */
  devrt_status st =
      rt->be->capture_end(rt->dev, cap->ps, dv_slot_green(sl), dv_slot_priority(rt, sl), &exec);
  rt->be->stream_destroy(rt->dev, cap->ps);
  for (unsigned j = 0; j < cap->njoined; j++) /* out of the capture now */
    rt->be->stream_destroy(rt->dev, cap->joined[j].ps);
  if (unjoined) { /* the reason, whatever the backend made of it */
    if (st == DEVRT_OK) rt->be->graph_destroy(rt->dev, exec);
    st = dv_fail(DEVRT_ERR_INVALID_STATE,
                 "devrt_capture_end: stream %#" PRIx64
                 " joined the capture but was not joined back: record an event on it after its "
                 "last recorded call and make a stream of the capture wait for it (docs/graphs.md)",
                 unjoined);
  }
  /* the blocks it allocated and freed become the graph's */
  unsigned nowned = 0;
  for (unsigned i = 0; i < cap->nmade; i++) nowned += cap->made[i].owned;
  devrt_block* owned = nowned ? malloc(nowned * sizeof *owned) : NULL;
  devrt_graph* g = st == DEVRT_OK ? calloc(1, sizeof *g + cap->n * sizeof *g->u) : NULL;
  if (st == DEVRT_OK && (!g || (nowned && !owned))) {
    rt->be->graph_destroy(rt->dev, exec);
    free(g), g = NULL;
    st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_capture_end: out of host memory");
  }
  if (g) {
    g->rt = rt, g->exec = exec, g->n = cap->n, g->recorded = cap->launches;
    for (unsigned i = 0; i < cap->n; i++) g->u[i] = cap->u[i];
    for (unsigned i = 0; i < cap->nmade; i++)
      if (cap->made[i].owned) owned[g->nowned++] = cap->made[i].h;
    g->owned = owned;
    g->holds = cap->holds, g->nholds = cap->nholds, cap->holds = NULL, cap->nholds = 0;
    atomic_store_explicit(&g->magic, GRAPH_MAGIC, memory_order_release); /* pairs: graph_ok */
    *out = g;
  } else { /* no graph: its blocks go now (a free that fails once, as an injected fault does,
              is tried again: nothing else could free them) */
    free(owned);
    for (unsigned i = 0; i < cap->nmade; i++)
      if (cap->made[i].owned) /* the end's failure keeps its message */
        DV_KEEP_ERROR(if (devrt_block_free(rt, cap->made[i].h) != DEVRT_OK)
                          devrt_block_free(rt, cap->made[i].h));
  }
  drop_holds(cap->holds, cap->nholds); /* no graph was made: nothing holds them */
  free(cap->made);
  free(cap);
  return st;
}

devrt_status dv_capture_hold(dv_capture* cap, void (*drop)(void*), void* p) {
  if (cap->nholds == cap->capholds) {
    unsigned n = cap->capholds ? 2 * cap->capholds : 4;
    dv_hold* h = realloc(cap->holds, n * sizeof *h);
    if (!h) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "capture: out of host memory");
    cap->holds = h, cap->capholds = n;
  }
  cap->holds[cap->nholds++] = (dv_hold){drop, p};
  return DEVRT_OK;
}

static bool graph_ok(devrt_graph* g) { /* acquire: pairs with the end's release */
  return g && atomic_load_explicit(&g->magic, memory_order_acquire) == GRAPH_MAGIC;
}

/* One recorded launch of g on held stream id (s its backend stream) over the union of the
 * captured uses: waits, the repeat and group paths, the mark, as devrt_launch has them; ev as
 * dv_launch_issue's. */
static devrt_status launch(devrt_graph* g, devrt_stream id, dv_stream* s, dv_pev** ev) {
  devrt_launch_desc d = {.stream = id, .uses = g->u, .nuses = g->n};
  devrt_status st = dv_launch_issue(g->rt, &d, id, s, g->exec, ev);
  if (st == DEVRT_OK) atomic_fetch_add_explicit(&g->launches, 1, memory_order_relaxed);
  return st;
}

devrt_status devrt_graph_launch(devrt_graph* g, devrt_stream stream) {
  dv_error_clear();
  DV_ARG_CHECK(graph_ok(g), "devrt_graph_launch", "graph %p is NULL or destroyed", (void*)g);
  devrt_runtime* rt = g->rt;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "devrt_graph_launch"));
  return launch(g, stream, s, NULL);
}

devrt_status devrt_graph_info_get(devrt_graph* g, devrt_graph_info* out) {
  dv_error_clear();
  DV_ARG_CHECK(graph_ok(g) && out, "devrt_graph_info_get", "graph %p is NULL or destroyed, or out",
               (void*)g);
  *out = (devrt_graph_info){g->recorded, g->n,
                            atomic_load_explicit(&g->launches, memory_order_relaxed)};
  return DEVRT_OK;
}

devrt_status devrt_graph_destroy(devrt_graph* g) {
  dv_error_clear();
  DV_ARG_CHECK(graph_ok(g), "devrt_graph_destroy", "graph %p is NULL or destroyed", (void*)g);
  /* the graph's own blocks first, while it is whole: each free waits for the launches still using
   * it; one that fails leaves the graph with the blocks not freed yet, for another destroy */
  for (; g->nowned; g->nowned--) DV_CHECK(devrt_block_free(g->rt, g->owned[g->nowned - 1]));
  uint64_t m = GRAPH_MAGIC;
  /* acquire: pairs with the end's release; one destroy wins */
  DV_ARG_CHECK(atomic_compare_exchange_strong_explicit(&g->magic, &m, 0, memory_order_acquire,
                                                       memory_order_relaxed),
               "devrt_graph_destroy", "graph %p is NULL or destroyed", (void*)g);
  g->rt->be->graph_destroy(g->rt->dev, g->exec);
  drop_holds(g->holds, g->nholds);
  free(g->owned);
  free(g);
  return DEVRT_OK;
}

/* The submission queue's check and launch of a graph (launch.h). */
devrt_status dv_graph_check(devrt_runtime* rt, devrt_graph* g) {
  DV_ARG_CHECK(graph_ok(g), "devrt_queue_submit", "graph %p is NULL or destroyed", (void*)g);
  DV_ARG_CHECK(g->rt == rt, "devrt_queue_submit", "graph %p belongs to another runtime", (void*)g);
  return DEVRT_OK;
}
devrt_status dv_graph_issue(devrt_runtime* rt, devrt_graph* g, devrt_stream id, dv_stream* s,
                            dv_pev** ev) {
  DV_CHECK(dv_graph_check(rt, g));
  return launch(g, id, s, ev);
}
