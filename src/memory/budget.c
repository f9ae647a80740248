/* budget.c: the byte budget over a resource stack: lock-free admission, one CAS on the stack's
 * held word (live + pending + cached), the pressure ladder (reap, trim, optionally wait
 * for pending frees, then the caller's fallback) before OVER_BUDGET, and nested sub-budgets. */
#include <inttypes.h>
#include <stdlib.h>
#include "../core/runtime.h"
#include "account.h"

typedef struct budget {
  devrt_resource r;
  _Atomic uint64_t limit; /* devrt_partition_set_budget may change it */
  _Atomic uint64_t live;   /* bytes admitted here and not freed (rounded as the stack charges) */
  struct budget* parent;   /* sub-budgets: the budget they nest under (their upstream) */
  bool wait_for_pending;
  devrt_fallback_fn fallback;
  void* fallback_user;
  _Atomic uint64_t fallbacks;
} budget;

static const devrt_resource_vtable budget_vtable;
#define MAX_FALLBACK_RETRIES 16

static uint64_t load(_Atomic uint64_t* x) { return atomic_load_explicit(x, memory_order_seq_cst); }

/* The word admission reserves on. A device budget reserves on its stack's `held` (live + pending
 * + cached as one counter) and gives the reservation back once upstream has answered, after a
 * leaf that took new memory has added it there; so held never under-counts the device and a
 * reservation is one compare-and-swap, with no figures read apart that could go stale between
 * the reads. A sub-budget (or a budget over a stack with no account) reserves on its own live. */
static _Atomic uint64_t* word(budget* b) { return !b->parent && b->r.account ? &b->r.account->held : &b->live; }

/* One admission attempt: reserve n bytes if they fit. */
static bool admit(budget* b, uint64_t n) {
  _Atomic uint64_t* w = word(b);
  uint64_t v = load(w);
  do {
    if (v + n > atomic_load_explicit(&b->limit, memory_order_relaxed) || v + n < v) return false;
  } while (!atomic_compare_exchange_weak_explicit(w, &v, v + n, memory_order_seq_cst, memory_order_relaxed));
  return true;
}

static devrt_status over(budget* b, size_t size, uint64_t n, const char* tag) {
  dv_mem_account* a = b->r.account;
  return dv_fail(DEVRT_ERR_OVER_BUDGET,
                 "%s: %zu bytes (charged %" PRIu64 ") for tag '%s' do not fit: live %" PRIu64 ", pending %" PRIu64
                 ", cached %" PRIu64 ", limit %" PRIu64,
                 b->parent ? "sub-budget" : "budget", size, n, tag ? tag : "untagged", load(&b->live),
                 a ? load(&a->pending) : 0, a ? load(&a->cached) : 0, load(&b->limit));
}

/* Admission with the pressure ladder: non-blocking reap and trim, then (if configured) a
 * blocking reap; each followed by another attempt. */
static devrt_status reserve(budget* b, size_t size, uint64_t n, const char* tag) {
  if (admit(b, n)) return DEVRT_OK;
  if (b->parent) return over(b, size, n, tag);
  devrt_resource* up = b->r.upstream;
  DV_CHECK(devrt_resource_reap(up, 0, NULL));
  if (admit(b, n)) return DEVRT_OK;
  DV_CHECK(devrt_resource_trim(up, NULL));
  DV_CHECK(devrt_resource_reap(up, 0, NULL));
  if (admit(b, n)) return DEVRT_OK;
  if (b->wait_for_pending) {
    DV_CHECK(devrt_resource_reap(up, DEVRT_REAP_WAIT, NULL));
    if (admit(b, n)) return DEVRT_OK;
  }
  return over(b, size, n, tag);
}

static uint64_t charge(budget* b, size_t size) {
  dv_mem_account* a = b->r.account;
  return a && a->charge ? a->charge(a, size) : dv_round(a, size);
}

static devrt_status budget_allocate(devrt_resource* r, size_t size, devrt_stream stream, const char* tag, void** out) {
  budget* b = (budget*)r;
  uint64_t n = charge(b, size);
  for (int attempt = 0;; attempt++) {
    devrt_status s = reserve(b, size, n, tag);
    if (s == DEVRT_OK) {
      s = devrt_resource_allocate(r->upstream, size, stream, tag, out);
      _Atomic uint64_t* w = word(b);
      if (w != &b->live) atomic_fetch_sub(w, n); /* what upstream took is in held now */
      if (s == DEVRT_OK && w != &b->live) atomic_fetch_add(&b->live, n);
      if (s == DEVRT_OK) return DEVRT_OK;
      if (w == &b->live) atomic_fetch_sub(&b->live, n); /* roll the reservation back */
    }
    bool retry_able = s == DEVRT_ERR_OVER_BUDGET || s == DEVRT_ERR_DEVICE_ALLOC_FAILED;
    if (!retry_able || !b->fallback || attempt == MAX_FALLBACK_RETRIES) return s;
    atomic_fetch_add(&b->fallbacks, 1);
    if (!b->fallback(b->fallback_user, size, tag, s)) return s;
  }
}

static devrt_status budget_deallocate(devrt_resource* r, void* ptr, size_t size, devrt_stream stream) {
  budget* b = (budget*)r;
  DV_CHECK(devrt_resource_deallocate(r->upstream, ptr, size, stream)); /* a refused free changes nothing */
  atomic_fetch_sub(&b->live, charge(b, size));
  return DEVRT_OK;
}

static devrt_status budget_query(devrt_resource* r, devrt_resource_figures* out) {
  budget* b = (budget*)r;
  DV_CHECK(devrt_resource_query(r->upstream, out));
  uint64_t live = load(&b->live), used = load(word(b));
  out->live_bytes = live;
  uint64_t limit = load(&b->limit);
  out->limit_bytes = limit;
  out->available_bytes = used < limit ? limit - used : 0;
  out->fallbacks = load(&b->fallbacks);
  return DEVRT_OK;
}

static void budget_destroy(devrt_resource* r) { free(r); }

static const devrt_resource_vtable budget_vtable = {
    .allocate = budget_allocate, .deallocate = budget_deallocate, .query = budget_query, .destroy = budget_destroy};

static devrt_status create(devrt_resource* upstream, uint64_t limit, budget* parent, const devrt_budget_options* o,
                           devrt_resource** out) {
  budget* b = calloc(1, sizeof *b);
  if (!b) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_budget_create: out of host memory");
  devrt_status s = devrt_resource_init(&b->r, &budget_vtable, parent ? "sub-budget" : "budget", upstream->rt, upstream);
  if (s != DEVRT_OK) {
    free(b);
    return s;
  }
  atomic_init(&b->limit, limit);
  b->parent = parent;
  if (o) {
    b->wait_for_pending = o->wait_for_pending;
    b->fallback = o->fallback;
    b->fallback_user = o->fallback_user;
  }
  *out = &b->r;
  return DEVRT_OK;
}

devrt_status devrt_budget_create(devrt_resource* upstream, const devrt_budget_options* opts, devrt_resource** out) {
  DV_RES_CHECK(upstream, "devrt_budget_create");
  DV_ARG_CHECK(opts && out, "devrt_budget_create", "opts %p or out %p is NULL", (const void*)opts, (void*)out);
  DV_ARG_CHECK(opts->limit_bytes, "devrt_budget_create", "limit_bytes is 0");
  return create(upstream, opts->limit_bytes, NULL, opts, out);
}

devrt_status devrt_budget_create_child(devrt_resource* parent, uint64_t limit_bytes, devrt_resource** out) {
  DV_RES_CHECK(parent, "devrt_budget_create_child");
  DV_ARG_CHECK(out, "devrt_budget_create_child", "out is NULL");
  DV_ARG_CHECK(parent->vtable == &budget_vtable, "devrt_budget_create_child", "parent %s is not a budget", parent->name);
  budget* p = (budget*)parent;
  DV_ARG_CHECK(limit_bytes && limit_bytes <= load(&p->limit), "devrt_budget_create_child",
               "limit %" PRIu64 " not in [1, parent's limit %" PRIu64 "]", limit_bytes, load(&p->limit));
  return create(parent, limit_bytes, p, NULL, out);
}

bool dv_budget_is(const devrt_resource* r) { return r && r->vtable == &budget_vtable; }

uint64_t dv_budget_limit(const devrt_resource* r) { return load(&((budget*)r)->limit); }

uint64_t dv_budget_live(const devrt_resource* r) { return load(&((budget*)r)->live); }

devrt_status dv_budget_set_limit(devrt_resource* r, uint64_t limit, const char* call) {
  budget* b = (budget*)r;
  uint64_t cap = b->parent ? load(&b->parent->limit) : UINT64_MAX;
  if (!limit || limit > cap)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: limit %" PRIu64 " not in [1, the parent budget's limit %" PRIu64 "]", call, limit, cap);
  atomic_store(&b->limit, limit);
  return DEVRT_OK;
}
