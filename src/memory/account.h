/* account.h (internal): the figures one resource stack shares. The leaf (async or simple)
 * creates the account; decorators inherit the pointer. Every transition adds before it
 * subtracts, so live + pending + cached never under-counts, and a budget that reads them
 * lock-free never admits past its limit. */
#ifndef DEVRT_MEMORY_ACCOUNT_H
#define DEVRT_MEMORY_ACCOUNT_H

#include <stdatomic.h>
#include <stdint.h>
#include "devrt/resource.h"
#include "../core/error.h"

struct dv_mem_account {
  _Atomic uint64_t live;    /* handed out above the caching layer (rounded bytes) */
  _Atomic uint64_t pending; /* freed to the pool; completion not yet observed */
  _Atomic uint64_t cached;  /* in a caching layer's free lists */
  _Atomic uint64_t reaped;  /* total retired by reaps */
  /* live + pending + cached as one word: what the stack holds of the device (added when a leaf
   * allocates, taken when its free is retired), plus the reservations of budgets admitting
   * against it. One word, so an admission is a single compare-and-swap: a sum of separately read
   * figures can go stale between its reads (a free and an allocation in between restore live). */
  _Atomic uint64_t held;
  uint64_t granularity;     /* the pool's real rounding (measured by the leaf) */
  /* Bytes an allocation of `size` really holds beneath a budget; NULL: size rounded to the
   * granularity. A caching layer sets it to its size classes. */
  uint64_t (*charge)(const dv_mem_account* a, size_t size);
};

static inline uint64_t dv_round(const dv_mem_account* a, size_t size) {
  uint64_t g = a && a->granularity ? a->granularity : 256;
  return ((uint64_t)size + g - 1) / g * g;
}

/* Moves n bytes from one figure to another, adding first. */
static inline void dv_account_move(_Atomic uint64_t* from, _Atomic uint64_t* to, uint64_t n) {
  atomic_fetch_add_explicit(to, n, memory_order_relaxed);
  atomic_fetch_sub_explicit(from, n, memory_order_relaxed);
}

/* Budgets (budget.c) for partitions' sub-budgets: whether r is one, its limit and live bytes,
 * and a new limit (at most the parent's). */
bool dv_budget_is(const devrt_resource* r);
uint64_t dv_budget_limit(const devrt_resource* r);
uint64_t dv_budget_live(const devrt_resource* r);
devrt_status dv_budget_set_limit(devrt_resource* r, uint64_t limit, const char* call);

/* A stream slot's stream is going away, synchronized (partition teardown): the layers that keep
 * per-slot stream state retire it (async: its frees are complete; caching: its blocks may move
 * to any stream) and forget the stream. No-ops on other layers. */
void dv_async_forget_slot(devrt_resource* r, unsigned slot);
void dv_caching_forget_slot(devrt_resource* r, unsigned slot);

/* Fills the account's figures into q (used by leaves' query). */
static inline void dv_account_query(dv_mem_account* a, devrt_resource_figures* q) {
  q->live_bytes = atomic_load_explicit(&a->live, memory_order_relaxed);
  q->pending_bytes = atomic_load_explicit(&a->pending, memory_order_relaxed);
  q->cached_bytes = atomic_load_explicit(&a->cached, memory_order_relaxed);
  q->reaped_bytes = atomic_load_explicit(&a->reaped, memory_order_relaxed);
  q->granularity = a->granularity;
}

#define DV_RES_CHECK(r, call)                                                                      \
  do {                                                                                             \
    if (DV_UNLIKELY(!(r) || !(r)->vtable || atomic_load_explicit(&(r)->refs, memory_order_relaxed) <= 0)) \
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: resource %p is NULL or released", call, (void*)(r)); \
  } while (0)

#endif
