/* stack.c: the runtime's resource stack: built on first use from the config (budget -> logging
 * -> statistics -> caching -> async), or installed by the caller before that; devrt_reap_pending
 * on it, and its release when the runtime goes. */
#include "memory.h"
#include "account.h"

/* Pushes a decorator: on success *top is the new layer (holding the old one), else unchanged. */
#define PUSH(top, call)                              \
  do {                                               \
    devrt_resource* next_ = NULL;                    \
    devrt_status s_ = (call);                        \
    if (s_ != DEVRT_OK) {                            \
      DV_KEEP_ERROR(devrt_resource_release(*(top))); \
      return s_;                                     \
    }                                                \
    DV_ASSERT(next_ && next_->upstream == *(top));   \
    devrt_resource_release(*(top));                  \
    *(top) = next_;                                  \
  } while (0)

devrt_status dv_stack_build(devrt_runtime* rt, const devrt_config* c, uint64_t limit,
                            devrt_resource** top) {
  devrt_caching_options co = {.max_class_bytes = c->cache_max_class};
  if (c->arena) {
    DV_CHECK(devrt_arena_resource_create(rt, top));
  } else {
    DV_CHECK(devrt_async_resource_create(rt, top));
    if (c->cache) PUSH(top, devrt_caching_resource_create(*top, &co, &next_));
  }
  PUSH(top, dv_stats_create(*top, c->stats_peak_bound, &next_));
  if (c->log_path) {
    devrt_logging_options lo = {.path = c->log_path,
                                .format = c->log_jsonl ? DEVRT_LOG_JSONL : DEVRT_LOG_CSV};
    PUSH(top, devrt_logging_resource_create(*top, &lo, &next_));
  }
  devrt_budget_options bo = {.limit_bytes = limit, .scope = DEVRT_BUDGET_DEVICE};
  PUSH(top, devrt_budget_create(*top, &bo, &next_));
  DV_ASSERT(dv_budget_is(*top) &&
            (*top)->account); /* a DEVICE budget on the async leaf's account */
  return DEVRT_OK;
}

devrt_status devrt_runtime_resource(devrt_runtime* rt, devrt_resource** out) {
  DV_RT_CHECK(rt, "devrt_runtime_resource");
  DV_ARG_CHECK(out, "devrt_runtime_resource", "out is NULL");
  /* acquire: pairs with the release stores below (the stack's layers are built before) */
  devrt_resource* r = atomic_load_explicit(&rt->stack, memory_order_acquire);
  if (DV_LIKELY(r)) {
    *out = r;
    return DEVRT_OK;
  }
  pthread_mutex_lock(&rt->stack_mu);
  devrt_status s = DEVRT_OK;
  r = atomic_load_explicit(&rt->stack, memory_order_relaxed);
  uint64_t limit = rt->cfg.budget_bytes ? rt->cfg.budget_bytes
                                        : rt->info.total_memory / 100 * rt->cfg.budget_percent;
  if (!r && (s = dv_stack_build(rt, &rt->cfg, limit, &r)) == DEVRT_OK)
    atomic_store_explicit(&rt->stack, r, memory_order_release); /* pairs: the acquire above */
  DV_ASSERT(s != DEVRT_OK || (r && r->rt == rt)); /* built on first use, for this runtime */
  pthread_mutex_unlock(&rt->stack_mu);
  if (s == DEVRT_OK) *out = r;
  return s;
}

devrt_status devrt_runtime_set_resource(devrt_runtime* rt, devrt_resource* r) {
  DV_RT_CHECK(rt, "devrt_runtime_set_resource");
  DV_RES_CHECK(r, "devrt_runtime_set_resource");
  DV_ARG_CHECK(r->rt == rt, "devrt_runtime_set_resource", "resource %s belongs to another runtime",
               r->name);
  pthread_mutex_lock(&rt->stack_mu);
  devrt_status s = DEVRT_OK;
  if (atomic_load_explicit(&rt->stack, memory_order_relaxed)) /* set only under stack_mu */
    s = dv_fail(DEVRT_ERR_INVALID_STATE,
                "devrt_runtime_set_resource: runtime of ordinal %d already has its stack",
                rt->cfg.ordinal);
  else {
    devrt_resource_retain(r);
    /* release: pairs with the acquire in devrt_runtime_resource (the caller built r before) */
    atomic_store_explicit(&rt->stack, r, memory_order_release);
  }
  pthread_mutex_unlock(&rt->stack_mu);
  return s;
}

devrt_status devrt_reap_pending(devrt_runtime* rt, unsigned flags, uint64_t* bytes) {
  devrt_resource* r = NULL;
  DV_CHECK(devrt_runtime_resource(rt, &r));
  dv_events_poll(rt); /* completed stream points let later uses skip their waits */
  return devrt_resource_reap(r, flags, bytes);
}

void dv_stack_fini(devrt_runtime* rt) {
  /* acquire: pairs with the release that published the stack (maybe another thread's) */
  devrt_resource* r = atomic_exchange_explicit(&rt->stack, NULL, memory_order_acquire);
  if (r) devrt_resource_release(r);
}
