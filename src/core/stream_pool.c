/* stream_pool.c: the runtime's bounded stream pool. Slots hold backend streams created on
 * first use and reused after release; each lease gets a fresh process-unique id, so a released,
 * foreign or made-up id is detected by one atomic compare (dv_stream_get). One slot past the
 * pool is the runtime's own (dv_internal_stream): block frees go there. */
#include <inttypes.h>
#include <stdlib.h>
#include "runtime.h"
#include "../block/block.h"

devrt_status dv_stream_pool_init(devrt_runtime* rt) {
  rt->npool = rt->cfg.stream_pool_size;
  rt->nslots = rt->npool + 1;
  rt->slots = calloc(rt->nslots, sizeof *rt->slots);
  if (!rt->slots) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "stream pool: out of host memory");
  for (unsigned i = 0; i < rt->npool; i++) rt->slots[i].next_free = (int)i + 1 < (int)rt->npool ? (int)i + 1 : -1;
  rt->slots[rt->npool].next_free = -1;
  rt->free_head = 0;
  pthread_mutex_init(&rt->pool_mu, NULL);
  pthread_cond_init(&rt->pool_cv, NULL);
  return DEVRT_OK;
}

void dv_stream_pool_fini(devrt_runtime* rt) {
  for (unsigned i = 0; i < rt->nslots; i++)
    if (rt->slots[i].s) rt->be->stream_destroy(rt->dev, rt->slots[i].s);
  free(rt->slots);
  pthread_cond_destroy(&rt->pool_cv);
  pthread_mutex_destroy(&rt->pool_mu);
}

devrt_status dv_stream_refused(devrt_runtime* rt, devrt_stream id, const char* call) {
  if (id == 0) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: stream 0 is not a stream", call);
  if (DV_SID_SERIAL(id) != rt->serial)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: stream %#" PRIx64 " belongs to another runtime (runtime serial %" PRIu64 ", this is %" PRIu64 ")",
                   call, id, DV_SID_SERIAL(id), rt->serial);
  return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: stream %#" PRIx64 " is not held (released, or never acquired)", call, id);
}

/* Leases slot i (pool_mu held): creates its stream on first use. */
static devrt_status lease(devrt_runtime* rt, int i, devrt_stream* out) {
  dv_slot* sl = &rt->slots[i];
  if (!sl->s) {
    DV_CHECK(rt->be->stream_create(rt->dev, NULL, rt->cfg.stream_priority, &sl->s));
    rt->created++;
  }
  rt->free_head = sl->next_free;
  sl->lease++;
  sl->holders = 1;
  rt->in_use++;
  devrt_stream id = DV_SID(rt->serial, i, sl->lease);
  atomic_store_explicit(&sl->id, id, memory_order_release);
  *out = id;
  return DEVRT_OK;
}

devrt_status devrt_stream_acquire(devrt_runtime* rt, devrt_acquire_mode mode, devrt_stream* out) {
  DV_RT_CHECK(rt, "devrt_stream_acquire");
  DV_ARG_CHECK(out, "devrt_stream_acquire", "out is NULL");
  DV_ARG_CHECK((unsigned)mode <= DEVRT_ACQUIRE_SHARE, "devrt_stream_acquire", "unknown mode %d", (int)mode);
  devrt_status s = DEVRT_OK;
  pthread_mutex_lock(&rt->pool_mu);
  while (rt->free_head < 0 && mode == DEVRT_ACQUIRE_WAIT) pthread_cond_wait(&rt->pool_cv, &rt->pool_mu);
  if (rt->free_head >= 0) {
    s = lease(rt, rt->free_head, out);
  } else if (mode == DEVRT_ACQUIRE_SHARE) {
    dv_slot* sl = &rt->slots[rt->share_next];  /* every slot is held: share round-robin */
    rt->share_next = (rt->share_next + 1) % rt->npool;
    sl->holders++;
    *out = atomic_load_explicit(&sl->id, memory_order_relaxed);
  } else {
    s = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_stream_acquire: all %u streams of the pool are held (mode FAIL)", rt->npool);
  }
  pthread_mutex_unlock(&rt->pool_mu);
  return s;
}

devrt_status dv_internal_stream(devrt_runtime* rt, devrt_stream* out) {
  dv_slot* sl = &rt->slots[rt->npool];
  devrt_stream id = atomic_load_explicit(&sl->id, memory_order_acquire);
  devrt_status s = DEVRT_OK;
  if (!id) {
    pthread_mutex_lock(&rt->pool_mu);
    id = atomic_load_explicit(&sl->id, memory_order_relaxed);
    if (!id && !sl->s) s = rt->be->stream_create(rt->dev, NULL, rt->cfg.stream_priority, &sl->s);
    if (!id && s == DEVRT_OK) {
      sl->lease = 1, sl->holders = 1;
      id = DV_SID(rt->serial, rt->npool, 1);
      atomic_store_explicit(&sl->id, id, memory_order_release);
    }
    pthread_mutex_unlock(&rt->pool_mu);
  }
  *out = id;
  return s;
}

devrt_status devrt_stream_release(devrt_runtime* rt, devrt_stream id) {
  DV_RT_CHECK(rt, "devrt_stream_release");
  dv_stream* unused = NULL;
  pthread_mutex_lock(&rt->pool_mu);
  devrt_status s = dv_stream_get(rt, id, &unused, "devrt_stream_release");
  if (s == DEVRT_OK && DV_SID_SLOT(id) == rt->npool)
    s = dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "devrt_stream_release: stream %#" PRIx64 " is the runtime's own", id);
  if (s == DEVRT_OK) {
    unsigned i = DV_SID_SLOT(id);
    dv_slot* sl = &rt->slots[i];
    if (--sl->holders == 0) {
      atomic_store_explicit(&sl->id, 0, memory_order_release);
      sl->next_free = rt->free_head;
      rt->free_head = (int)i;
      rt->in_use--;
      pthread_cond_signal(&rt->pool_cv);
    }
  }
  pthread_mutex_unlock(&rt->pool_mu);
  return s;
}

devrt_status devrt_stream_synchronize(devrt_runtime* rt, devrt_stream id) {
  DV_RT_CHECK(rt, "devrt_stream_synchronize");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, id, &s, "devrt_stream_synchronize"));
  uint64_t seq = dv_events_sync_begin(rt, DV_SID_SLOT(id));
  DV_CHECK(rt->be->stream_sync(s));
  dv_events_sync_end(rt, DV_SID_SLOT(id), seq); /* what was recorded before is complete */
  return DEVRT_OK;
}

devrt_status devrt_stream_native(devrt_runtime* rt, devrt_stream id, void** out) {
  DV_RT_CHECK(rt, "devrt_stream_native");
  DV_ARG_CHECK(out, "devrt_stream_native", "out is NULL");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, id, &s, "devrt_stream_native"));
  *out = rt->be->stream_native(s);
  return DEVRT_OK;
}

devrt_status devrt_stream_host_func(devrt_runtime* rt, devrt_stream id, devrt_host_fn fn, void* user) {
  DV_RT_CHECK(rt, "devrt_stream_host_func");
  DV_ARG_CHECK(fn, "devrt_stream_host_func", "fn is NULL");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, id, &s, "devrt_stream_host_func"));
  return rt->be->host_func(s, fn, user);
}
