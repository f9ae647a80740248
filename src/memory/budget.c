/* budget.c: the byte budget over a resource stack: lock-free admission (the device budget's by the
 * stack's leaves, one CAS on its held word; others on their own live word), the pressure ladder
 * (reap, trim, optionally wait for pending frees, then the caller's fallback) before OVER_BUDGET,
 * and nested sub-budgets. */
#include <inttypes.h>
#include <stdlib.h>
#include "memory.h"
#include "account.h"

typedef struct budget {
  devrt_resource r;
  bool owns; /* the stack's account carries this limit: its leaves admit new memory
                (next to the head: an owner's hot path reads one line) */
  bool wait_for_pending;
  _Atomic uint64_t limit; /* devrt_partition_set_budget may change it */
  _Atomic uint64_t
      live; /* non-owners: bytes admitted here and not freed (rounded as the stack charges) */
  struct budget* parent; /* sub-budgets: the budget they nest under (their upstream) */
  devrt_fallback_fn fallback;
  void* fallback_user;
  _Atomic uint64_t fallbacks;
} budget;

#define MAX_FALLBACK_RETRIES 16

/* The budget's words (limit, live, fallbacks, the account's held) are counts and limits that
 * publish no other data: every access to them is relaxed, as the account's own admission. */
static uint64_t load(_Atomic uint64_t* x) { return atomic_load_explicit(x, memory_order_relaxed); }

/* Two ways to admit, as the builder chose (devrt_budget_scope). A DEVICE budget owns its stack's
 * account: it puts its limit there, and a leaf admits new device memory with one compare-and-swap
 * on the stack's held word (live + pending + cached) before asking the pool. An allocation served
 * from a cache holds nothing new, so it passes without touching a shared word; the budget sees a
 * refusal only as the leaf's OVER_BUDGET. A THROUGH budget (and every sub-budget) reserves on its
 * own live word before calling upstream. */
#define UP_ALLOCATE(r, ...) (r)->upstream->vtable->allocate((r)->upstream, __VA_ARGS__)
#define UP_DEALLOCATE(r, ...) (r)->upstream->vtable->deallocate((r)->upstream, __VA_ARGS__)

static bool admit(budget* b, uint64_t n) {
  uint64_t v = load(&b->live);
  do {
    if (v + n > atomic_load_explicit(&b->limit, memory_order_relaxed) || v + n < v) return false;
  } while (!atomic_compare_exchange_weak_explicit(&b->live, &v, v + n, memory_order_relaxed,
                                                  memory_order_relaxed));
  return true;
}

/* Whether b is what its flags say (asserts only): an owner is its account's owner; a sub-budget
 * nests under its upstream, a budget. */
static __attribute__((unused)) bool budget_ok(budget* b) {
  dv_mem_account* a = b->r.account;
  return (!b->owns ||
          (a && atomic_load_explicit(&a->owner, memory_order_relaxed) == (uintptr_t)b)) &&
         (!b->parent || &b->parent->r == b->r.upstream);
}

static uint64_t live_of(budget* b) {
  return b->owns ? dv_account_live(b->r.account) : load(&b->live);
}

static DV_NOINLINE devrt_status over(budget* b, size_t size, uint64_t n, const char* tag) {
  devrt_resource_figures q = {0}; /* one read of each shared count */
  if (b->r.account) dv_account_query(b->r.account, &q);
  if (!b->owns) q.live_bytes = load(&b->live);
  return dv_fail(DEVRT_ERR_OVER_BUDGET,
                 "%s: %zu bytes (charged %" PRIu64 ") for tag '%s' do not fit: live %" PRIu64
                 ", pending %" PRIu64 ", cached %" PRIu64 ", limit %" PRIu64,
                 b->parent ? "sub-budget" : "budget", size, n, tag ? tag : "untagged", q.live_bytes,
                 q.pending_bytes, q.cached_bytes, load(&b->limit));
}

/* The pressure ladder: step 0 a non-blocking reap, 1 a trim and reap, 2 (if configured) a
 * blocking reap; false when there is no further step. What step 1's trim gives back is idle
 * memory on its way to the pool, so that reap waits for it (as allocators that empty their
 * cache on a miss synchronize): the trim then helps the allocation that caused it. */
static DV_NOINLINE bool relieve(budget* b, int step, devrt_status* st) {
  devrt_resource* up = b->r.upstream;
  DV_ASSERT(step >= 0 && *st == DEVRT_OK);
  if (b->parent || step > 2 || (step == 2 && !b->wait_for_pending)) return false;
  uint64_t trimmed = 0;
  if (step == 1) *st = devrt_resource_trim(up, &trimmed);
  unsigned flags = step == 2 || trimmed ? DEVRT_REAP_WAIT : 0;
  if (*st == DEVRT_OK) *st = devrt_resource_reap(up, flags, NULL);
  return true;
}

static uint64_t charge(budget* b, size_t size) {
  dv_mem_account* a = b->r.account;
  return !a ? dv_round_to(size, 256) : a->charge ? a->charge(a, size) : dv_round(a, size);
}

#define NOT_TRIED ((devrt_status)-1) /* an owner's first upstream call, not made yet */

/* One pass up the pressure ladder; `first`: the owner's first upstream call, already made. */
static devrt_status try_allocate(budget* b, size_t size, devrt_stream stream, const char* tag,
                                 void** out, devrt_status first) {
  uint64_t n = b->owns ? 0 : charge(b, size); /* an owner's leaves charge what they take */
  DV_ASSERT(first == NOT_TRIED || b->owns);   /* only an owner's first call is made before */
  for (int step = 0;; step++, first = NOT_TRIED) {
    devrt_status s = DEVRT_ERR_OVER_BUDGET;
    bool refused_here = !b->owns && !admit(b, n);
    if (!refused_here) {
      s = first != NOT_TRIED ? first : UP_ALLOCATE(&b->r, size, stream, tag, out);
      if (!b->owns && s != DEVRT_OK) { /* roll the reservation back */
        uint64_t was = atomic_fetch_sub_explicit(&b->live, n, memory_order_relaxed);
        DV_ASSERT(was >= n); /* it holds the reservation admit made */
        (void)was;
      }
      if (s != DEVRT_ERR_OVER_BUDGET) return s;
    }
    devrt_status rs = DEVRT_OK;
    if (!relieve(b, step, &rs))
      return refused_here || b->owns ? over(b, size, charge(b, size), tag)
                                     : s; /* else upstream's */
    if (rs != DEVRT_OK) return rs;
  }
}

/* Everything past an owner's first upstream call: a non-owner's reservation, the pressure ladder,
 * the caller's fallback (out of line: the usual allocation never comes here). */
static DV_NOINLINE devrt_status allocate_slow(budget* b, size_t size, devrt_stream stream,
                                              const char* tag, void** out, devrt_status first) {
  for (int attempt = 0;; attempt++, first = NOT_TRIED) {
    devrt_status s = try_allocate(b, size, stream, tag, out, first);
    if (s == DEVRT_OK) return DEVRT_OK;
    DV_ASSERT(s != NOT_TRIED && attempt <= MAX_FALLBACK_RETRIES);
    bool retry_able = s == DEVRT_ERR_OVER_BUDGET || s == DEVRT_ERR_DEVICE_ALLOC_FAILED;
    if (!retry_able || !b->fallback || attempt == MAX_FALLBACK_RETRIES) return s;
    atomic_fetch_add_explicit(&b->fallbacks, 1, memory_order_relaxed);
    if (!b->fallback(b->fallback_user, size, tag, s)) return s;
  }
}

static DV_HOT devrt_status dv_budget_allocate(devrt_resource* r, size_t size, devrt_stream stream,
                                              const char* tag, void** out) {
  budget* b = (budget*)r;
  devrt_status first = NOT_TRIED;
  if (DV_LIKELY(b->owns) && DV_LIKELY((first = UP_ALLOCATE(r, size, stream, tag, out)) == DEVRT_OK))
    return DEVRT_OK;
  return allocate_slow(b, size, stream, tag, out, first);
}

static DV_HOT devrt_status dv_budget_deallocate(devrt_resource* r, void* ptr, size_t size,
                                                devrt_stream stream) {
  budget* b = (budget*)r;
  DV_CHECK(UP_DEALLOCATE(r, ptr, size, stream)); /* a refused free changes nothing */
  if (DV_UNLIKELY(!b->owns)) {
    uint64_t n = charge(b, size),
             was = atomic_fetch_sub_explicit(&b->live, n, memory_order_relaxed);
    DV_ASSERT(was >= n); /* live never falls below zero: a free is charged as its allocation was */
    (void)was;
  }
  return DEVRT_OK;
}

static devrt_status budget_query(devrt_resource* r, devrt_resource_figures* out) {
  budget* b = (budget*)r;
  DV_ASSERT(budget_ok(b));
  DV_CHECK(devrt_resource_query(r->upstream, out));
  uint64_t used = b->owns ? load(&r->account->held) : load(&b->live), limit = load(&b->limit);
  if (!b->owns) out->live_bytes = used;
  out->limit_bytes = limit;
  out->available_bytes = used < limit ? limit - used : 0;
  out->fallbacks = load(&b->fallbacks);
  return DEVRT_OK;
}

static void budget_destroy(devrt_resource* r) {
  DV_ASSERT(budget_ok((budget*)r));
  if (((budget*)r)->owns) {
    atomic_store_explicit(&r->account->limit, UINT64_MAX, memory_order_relaxed);
    /* release: pairs with the acquire of the next owner's compare-and-swap in create, so its
     * limit is stored after the one above */
    atomic_store_explicit(&r->account->owner, 0, memory_order_release);
  }
  free(r);
}

static const devrt_resource_vtable budget_vtable = {.allocate = dv_budget_allocate,
                                                    .deallocate = dv_budget_deallocate,
                                                    .query = budget_query,
                                                    .destroy = budget_destroy};

static devrt_status create(devrt_resource* upstream, uint64_t limit, budget* parent,
                           const devrt_budget_options* o, devrt_resource** out) {
  budget* b = dv_zalloc_lines(sizeof *b); /* read by every thread: no neighbour on its lines */
  if (!b) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_budget_create: out of host memory");
  devrt_status s = devrt_resource_init(&b->r, &budget_vtable, parent ? "sub-budget" : "budget",
                                       upstream->rt, upstream);
  if (s != DEVRT_OK) {
    free(b);
    return s;
  }
  atomic_init(&b->limit, limit);
  b->parent = parent;
  uintptr_t owner = 0;
  if (o && o->scope == DEVRT_BUDGET_DEVICE) {
    if (!b->r.account)
      s = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                  "devrt_budget_create: a DEVICE budget needs devrt's async, "
                  "simple or arena resource at the bottom of the stack (%s has none)",
                  upstream->name);
    /* acq_rel: the acquire pairs with the release in budget_destroy (the previous owner's limit
     * reset comes before this one's limit); the release publishes b's head to a creator whose
     * compare-and-swap fails and reads its name (the failure's acquire) */
    else if (!atomic_compare_exchange_strong_explicit(&b->r.account->owner, &owner, (uintptr_t)b,
                                                      memory_order_acq_rel, memory_order_acquire))
      s = dv_fail(DEVRT_ERR_INVALID_STATE,
                  "devrt_budget_create: the stack under %s already has a DEVICE budget (%s)",
                  upstream->name, ((budget*)owner)->r.name);
    if (s != DEVRT_OK) {
      DV_ALSO(s, devrt_resource_release(&b->r)); /* keeps the message above */
      return s;
    }
    b->owns = true;
    atomic_store_explicit(&b->r.account->limit, limit, memory_order_relaxed);
  }
  DV_ASSERT(budget_ok(b) && (!parent || parent->r.vtable == &budget_vtable));
  if (o) {
    b->wait_for_pending = o->wait_for_pending;
    b->fallback = o->fallback;
    b->fallback_user = o->fallback_user;
  }
  *out = &b->r;
  return DEVRT_OK;
}

devrt_status devrt_budget_create(devrt_resource* upstream, const devrt_budget_options* opts,
                                 devrt_resource** out) {
  DV_RES_CHECK(upstream, "devrt_budget_create");
  DV_ARG_CHECK(opts && out, "devrt_budget_create", "opts %p or out %p is NULL", (const void*)opts,
               (void*)out);
  DV_ARG_CHECK(opts->limit_bytes, "devrt_budget_create", "limit_bytes is 0");
  DV_ARG_CHECK(opts->scope == DEVRT_BUDGET_THROUGH || opts->scope == DEVRT_BUDGET_DEVICE,
               "devrt_budget_create", "scope %d is neither THROUGH nor DEVICE", (int)opts->scope);
  return create(upstream, opts->limit_bytes, NULL, opts, out);
}

devrt_status devrt_budget_create_child(devrt_resource* parent, uint64_t limit_bytes,
                                       devrt_resource** out) {
  DV_RES_CHECK(parent, "devrt_budget_create_child");
  DV_ARG_CHECK(out, "devrt_budget_create_child", "out is NULL");
  DV_ARG_CHECK(parent->vtable == &budget_vtable, "devrt_budget_create_child",
               "parent %s is not a budget", parent->name);
  budget* p = (budget*)parent;
  DV_ARG_CHECK(limit_bytes && limit_bytes <= load(&p->limit), "devrt_budget_create_child",
               "limit %" PRIu64 " not in [1, parent's limit %" PRIu64 "]", limit_bytes,
               load(&p->limit));
  return create(parent, limit_bytes, p, NULL, out);
}

bool dv_budget_is(const devrt_resource* r) { return r && r->vtable == &budget_vtable; }

uint64_t dv_budget_limit(const devrt_resource* r) { return load(&((budget*)r)->limit); }

uint64_t dv_budget_live(const devrt_resource* r) { return live_of((budget*)r); }

devrt_status dv_budget_set_limit(devrt_resource* r, uint64_t limit, const char* call) {
  budget* b = (budget*)r;
  uint64_t cap = b->parent ? load(&b->parent->limit) : UINT64_MAX;
  if (!limit || limit > cap)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "%s: limit %" PRIu64 " not in [1, the parent budget's limit %" PRIu64 "]", call,
                   limit, cap);
  atomic_store_explicit(&b->limit, limit, memory_order_relaxed);
  if (b->owns) atomic_store_explicit(&r->account->limit, limit, memory_order_relaxed);
  return DEVRT_OK;
}
