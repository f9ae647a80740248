/* account.h (internal): the figures one resource stack shares. The leaf (async, simple or arena)
 * creates the account; decorators inherit the pointer. The device budget owns its limit, and
 * leaves admit new memory against it, so a cached allocate or free touches no shared word. */
#ifndef DEVRT_MEMORY_ACCOUNT_H
#define DEVRT_MEMORY_ACCOUNT_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdbool.h>
#include "devrt/resource.h"
#include "../core/error.h"
#include "../core/spin.h"

/* The figures are sharded by thread (dv_shard): a thread moves bytes between figures on its own
 * DV_LINE unit, so the hot paths of different threads share no written line; a figure is the sum
 * of its shards (modulo 2^64: one shard may go "negative" when a block allocated by one thread is
 * freed by another). The first DV_OWNED shards each belong to one live thread at a time, which
 * updates them with a plain load and store (dv_cell_add): no locked instruction. Threads past
 * those share the last DV_SHARDS - DV_OWNED shards and update them atomically. New device memory
 * is admitted on `held`, the one shared word; live bytes are what held has beyond the figures. */
enum { DV_OWNED = 64, DV_SHARDS = 72, DV_PENDING = 0, DV_CACHED, DV_NFIGS };
typedef struct dv_acct_shard {
  _Alignas(DV_LINE) _Atomic uint64_t f[DV_NFIGS]; /* pending: freed to the pool, completion not yet
                                                observed; cached: in a caching layer's free lists */
} dv_acct_shard;

typedef struct devrt_account dv_mem_account;
struct devrt_account {
  dv_acct_shard sh[DV_SHARDS];
  /* live + pending + cached as one word: what the stack holds of the device. A leaf admits new
   * memory with one compare-and-swap against `limit` before it asks the pool (from then on it is
   * live), and takes it back when a reap retires the free; the figures move bytes out of live and
   * back without touching it. */
  _Alignas(DV_LINE) _Atomic uint64_t held;
  _Atomic uint64_t limit;  /* the owning budget's limit (UINT64_MAX: no budget owns the account) */
  _Atomic uintptr_t owner; /* that budget */
  _Atomic uint64_t reaped; /* total retired by reaps */
  uint64_t
      granularity; /* the pool's real rounding (measured by the leaf; 256 before): a power of two */
  /* Bytes an allocation of `size` really holds beneath a budget; NULL: size rounded to the
   * granularity. A caching layer sets it to its size classes, and class_max to its largest
   * (larger sizes are charged as they are); both are written once, when that layer is built. */
  uint64_t (*charge)(const dv_mem_account* a, size_t size);
  uint64_t class_max;
};

/* This thread's shard: an owned one while any is free (given back when the thread exits), else
 * one of the shared ones. */
extern _Thread_local unsigned dv_tshard; /* DV_SHARDS until one is assigned */
extern _Atomic unsigned
    dv_shard_span; /* 1 + the highest shard ever assigned: readers sum below it */
/* The shards any thread has written below: a thread raises the span before it writes. */
static inline unsigned dv_shard_end(void) {
  unsigned end = atomic_load_explicit(&dv_shard_span, memory_order_acquire); /* pairs: span() */
  DV_ASSERT(end <= DV_SHARDS);
  return end;
}
unsigned dv_shard_assign(void);
static inline unsigned dv_shard(void) {
  return DV_LIKELY(dv_tshard < DV_SHARDS) ? dv_tshard : dv_shard_assign();
}
/* Adds n (modulo 2^64) to a counter of shard s, written by this thread; a release (a plain store
 * on x86), so a reader that sees the sum also sees what this thread did before: it pairs with the
 * acquire loads of async.c's freed_sum (a free is counted after its pool_free returned). */
static inline void dv_cell_add(_Atomic uint64_t* x, uint64_t n, unsigned s) {
  DV_ASSERT(s == dv_tshard && s < DV_SHARDS); /* this thread's shard: a plain store is safe */
  if (DV_LIKELY(s < DV_OWNED))
    atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + n,
                          memory_order_release);
  else
    atomic_fetch_add_explicit(x, n, memory_order_release);
}

/* A zeroed account with no owner (resource.c). */
dv_mem_account* dv_account_new(void);
void dv_account_init(dv_mem_account* a);

/* size rounded up to g, a power of two; never overflows: the entry points refuse sizes above
 * DEVRT_MAX_ALLOC_SIZE (2^62), and g is at most 2^63. */
static inline uint64_t dv_round_to(size_t size, uint64_t g) {
  DV_ASSERT(size <= DEVRT_MAX_ALLOC_SIZE && g && !(g & (g - 1)));
  return ((uint64_t)size + g - 1) & ~(g - 1);
}
static inline uint64_t dv_round(const dv_mem_account* a, size_t size) {
  return dv_round_to(size, a->granularity);
}

/* Adds n bytes to a figure (on this thread's shard s: dv_shard(), read once by a hot path). */
static inline void dv_account_add_at(dv_mem_account* a, unsigned s, int fig, uint64_t n) {
  DV_ASSERT((unsigned)fig < DV_NFIGS);
  dv_cell_add(&a->sh[s].f[fig], n, s);
}
static inline void dv_account_add(dv_mem_account* a, int fig, uint64_t n) {
  dv_account_add_at(a, dv_shard(), fig, n);
}
static inline void dv_account_sub(dv_mem_account* a, int fig, uint64_t n) {
  dv_account_add(a, fig, 0 - n);
}
/* A figure: the sum of its shards (0 if a racing move makes it read below zero). */
uint64_t dv_account_sum(const dv_mem_account* a, int fig);
/* Live bytes: held less the figures (0 if racing moves make it read below zero). */
uint64_t dv_account_live(const dv_mem_account* a);

/* Admits n new bytes against the owner's limit: one compare-and-swap on held. */
static inline bool dv_account_admit(dv_mem_account* a, uint64_t n) {
  uint64_t v = atomic_load_explicit(&a->held, memory_order_relaxed);
  do {
    uint64_t lim = atomic_load_explicit(&a->limit, memory_order_relaxed);
    if (v + n > lim || v + n < v) return false;
  } while (!atomic_compare_exchange_weak_explicit(&a->held, &v, v + n, memory_order_relaxed,
                                                  memory_order_relaxed));
  return true;
}
static inline void dv_account_release(dv_mem_account* a, uint64_t n) {
  uint64_t was = atomic_fetch_sub_explicit(&a->held, n, memory_order_relaxed);
  DV_ASSERT(was >= n); /* held never falls below zero: only admitted bytes are given back */
  (void)was;
}
/* The refusal a leaf returns when admission fails (a budget above turns it into its own). */
devrt_status dv_account_refuse(const dv_mem_account* a, const char* who, size_t size, uint64_t n,
                               const char* tag);

/* Budgets (budget.c) for partitions' sub-budgets: whether r is one, its limit and live bytes,
 * and a new limit (at most the parent's). */
/* A statistics layer (statistics.c) whose peaks are exact, or with `bound` an upper bound (never
 * below the true peak) that costs no shared line per call: the runtime's stack under
 * DEVRT_STATS_PEAK=bound. devrt_statistics_resource_create makes the exact one. */
devrt_status dv_stats_create(devrt_resource* upstream, bool bound, devrt_resource** out);
bool dv_budget_is(const devrt_resource* r);
uint64_t dv_budget_limit(const devrt_resource* r);
uint64_t dv_budget_live(const devrt_resource* r);
devrt_status dv_budget_set_limit(devrt_resource* r, uint64_t limit, const char* call);

/* Fills the account's figures into q, one read of each shared count (leaves' query,
 * dv_account_live, refusal messages): live is what held has beyond the pending and cached bytes
 * read for the same answer, so the three never sum past held. The idle figures are read after
 * held and shard by shard (every load relaxed: the cut, not an order, keeps the answer within
 * held), so a trim moving a block from cached to pending (pending added first) or frees landing
 * meanwhile can make them read past held: they are cut to it, cached first. */
static inline void dv_account_query(const dv_mem_account* a, devrt_resource_figures* q) {
  uint64_t held = atomic_load_explicit(&a->held, memory_order_relaxed);
  uint64_t pending = dv_account_sum(a, DV_PENDING), cached = dv_account_sum(a, DV_CACHED);
  q->pending_bytes = pending < held ? pending : held;
  q->cached_bytes = cached < held - q->pending_bytes ? cached : held - q->pending_bytes;
  q->live_bytes = held - q->pending_bytes - q->cached_bytes;
  DV_ASSERT(q->pending_bytes + q->cached_bytes <= held); /* the cut: the three sum to held */
  q->reaped_bytes = atomic_load_explicit(&a->reaped, memory_order_relaxed);
  q->granularity = a->granularity;
}

/* A public call's entry on a resource: refuses NULL, a head never initialised and a released one
 * (devrt_private is NULL from the last release on: resource.c). */
#define DV_RES_CHECK(r, call)                                                                 \
  do {                                                                                        \
    dv_error_clear(); /* a public call's entry: see error.h */                                \
    if (DV_UNLIKELY(!(r) || !(r)->vtable || !(r)->devrt_private))                             \
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: resource %p is NULL or released", call, \
                     (void*)(r));                                                             \
  } while (0)

#endif
