/* resource.c: the resource head (init, its private part with the reference count, the registry
 * of layers told of retired streams) and the checked public entry points that every resource,
 * devrt's or a user's, is called through; the shared account's thread shards (account.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "memory.h"
#include "account.h"

/* ---- the shared account (account.h) ---- */

_Thread_local unsigned dv_tshard = DV_SHARDS;
static _Atomic uint64_t owned;       /* bit i: owned shard i is taken by a live thread */
static _Atomic unsigned next_shared; /* round robin over the shared shards */
_Atomic unsigned dv_shard_span;
static pthread_key_t shard_key; /* its destructor gives the owned shard back */
static pthread_once_t shard_once = PTHREAD_ONCE_INIT;

static void shard_give_back(void* v) {
  uint64_t bit = 1ull << ((uintptr_t)v - 1);
  DV_ASSERT((uintptr_t)v - 1 < DV_OWNED && (uintptr_t)v - 1 == dv_tshard);
  /* release: pairs with the acquire that takes the bit in dv_shard_assign, so the next owner
   * continues from this thread's last plain stores to the shard's cells (dv_cell_add) */
  uint64_t was = atomic_fetch_and_explicit(&owned, ~bit, memory_order_release);
  DV_ASSERT(was & bit); /* the thread gives back the shard it took */
  (void)was;
  dv_tshard = DV_SHARDS; /* a later call from another key's destructor takes a shard again */
}
static void shard_key_init(void) {
  if (pthread_key_create(&shard_key, shard_give_back)) shard_key = (pthread_key_t)-1;
}

/* This thread takes shard i: raises the span before the thread writes anything there. The
 * release pairs with the acquire in dv_shard_end. */
static unsigned span(unsigned i) {
  unsigned v = atomic_load_explicit(&dv_shard_span, memory_order_relaxed);
  while (v <= i && !atomic_compare_exchange_weak_explicit(
                       &dv_shard_span, &v, i + 1, memory_order_release, memory_order_relaxed)) {}
  DV_ASSERT(i < DV_SHARDS && atomic_load_explicit(&dv_shard_span, memory_order_relaxed) > i);
  dv_tshard = i;
  return i;
}

unsigned dv_shard_assign(void) {
  _Static_assert(DV_OWNED == 64 && DV_SHARDS > DV_OWNED, "one bit of `owned` per owned shard");
  pthread_once(&shard_once, shard_key_init);
  uint64_t v = atomic_load_explicit(&owned, memory_order_relaxed);
  while (~v && shard_key != (pthread_key_t)-1) {
    unsigned i = (unsigned)__builtin_ctzll(~v);
    /* acquire: pairs with the release in shard_give_back (the last owner's cell values) */
    if (atomic_compare_exchange_weak_explicit(&owned, &v, v | 1ull << i, memory_order_acquire,
                                              memory_order_relaxed)) {
      if (pthread_setspecific(shard_key, (void*)(uintptr_t)(i + 1))) {
        /* cannot give it back at exit: keep it shared (a release, as shard_give_back's) */
        atomic_fetch_and_explicit(&owned, ~(1ull << i), memory_order_release);
        break;
      }
      return span(i);
    }
  }
  return span(DV_OWNED + atomic_fetch_add_explicit(&next_shared, 1, memory_order_relaxed) %
                             (DV_SHARDS - DV_OWNED));
}

void dv_account_init(dv_mem_account* a) {
  memset(a, 0, sizeof *a);
  atomic_init(&a->limit, UINT64_MAX);
  a->granularity = 256; /* until its leaf measures the pool's */
}

dv_mem_account* dv_account_new(void) {
  dv_mem_account* a = dv_zalloc_lines(sizeof *a);
  if (a) dv_account_init(a);
  return a;
}

uint64_t dv_account_sum(const dv_mem_account* a, int fig) {
  uint64_t n = 0;
  for (unsigned i = 0, end = dv_shard_end(); i < end; i++)
    n += atomic_load_explicit(&a->sh[i].f[fig], memory_order_relaxed);
  return n > UINT64_MAX / 2 ? 0 : n;
}

uint64_t dv_account_live(const dv_mem_account* a) {
  devrt_resource_figures q;
  dv_account_query(a, &q);
  return q.live_bytes;
}

devrt_status dv_account_refuse(const dv_mem_account* a, const char* who, size_t size, uint64_t n,
                               const char* tag) {
  devrt_resource_figures q;
  dv_account_query(a, &q);
  return dv_fail(DEVRT_ERR_OVER_BUDGET,
                 "%s: %zu bytes (charged %" PRIu64 ") for tag '%s' do not fit: live %" PRIu64
                 ", pending %" PRIu64 ", cached %" PRIu64 ", limit %" PRIu64,
                 who, size, n, tag ? tag : "untagged", q.live_bytes, q.pending_bytes,
                 q.cached_bytes, atomic_load_explicit(&a->limit, memory_order_relaxed));
}

/* ---- the head's private part ---- */

/* What devrt keeps of a resource behind its head's devrt_private, allocated by
 * devrt_resource_init and freed after the resource's destroy: the reference count (C11 atomics:
 * the public head compiles as C++ too, so it holds no _Atomic field) and, for a resource whose
 * vtable has stream_retired, its link in `retirees`. devrt_private is set once by init and put
 * back to NULL by the release that drops the last reference, before destroy: DV_RES_CHECK reads
 * it, one load from the head's line, to refuse a released resource. */
typedef struct dv_res_private {
  _Atomic int refs; /* > 0 while devrt_private points here */
  devrt_resource* r;
  struct dv_res_private* next; /* in retirees (under retirees_mu) */
} dv_res_private;

static dv_res_private* private_of(const devrt_resource* r) {
  dv_res_private* p = r->devrt_private;
  DV_ASSERT(p && p->r == r); /* only a live head is asked: DV_RES_CHECK came first */
  return p;
}

/* ---- layers told of retired streams ---- */

/* Every live resource whose vtable has stream_retired, of every runtime. A mutex, held while the
 * layers run the entry (they may query events: driver calls); taken only at a resource's
 * creation and destroy and when a stream is retired. */
static pthread_mutex_t retirees_mu = PTHREAD_MUTEX_INITIALIZER;
static dv_res_private* retirees; /* guarded by retirees_mu */

static void retiree_add(dv_res_private* p) {
  pthread_mutex_lock(&retirees_mu);
  p->next = retirees, retirees = p;
  pthread_mutex_unlock(&retirees_mu);
}

static void retiree_remove(dv_res_private* p) {
  pthread_mutex_lock(&retirees_mu);
  dv_res_private** at = &retirees;
  while (*at && *at != p) at = &(*at)->next;
  DV_ASSERT(*at == p); /* init added every resource with the entry; only its last release removes */
  if (*at) *at = p->next;
  pthread_mutex_unlock(&retirees_mu);
}

void dv_resources_stream_retired(devrt_runtime* rt, devrt_stream stream) {
  pthread_mutex_lock(&retirees_mu);
  for (dv_res_private* n = retirees; n; n = n->next) {
    DV_ASSERT(n->r->vtable->stream_retired && n->r->devrt_private == n); /* live, with the entry */
    if (n->r->rt == rt) n->r->vtable->stream_retired(n->r, stream);
  }
  pthread_mutex_unlock(&retirees_mu);
}

devrt_status devrt_resource_init(devrt_resource* r, const devrt_resource_vtable* vt,
                                 const char* name, devrt_runtime* rt, devrt_resource* upstream) {
  DV_ARG_CHECK(r && vt && vt->allocate && vt->deallocate && vt->destroy, "devrt_resource_init",
               "resource %p or vtable %p (allocate, deallocate, destroy required) is NULL",
               (void*)r, (const void*)vt);
  DV_RT_CHECK(rt, "devrt_resource_init");
  if (upstream) {
    DV_RES_CHECK(upstream, "devrt_resource_init");
    DV_ARG_CHECK(upstream->rt == rt, "devrt_resource_init",
                 "upstream %s belongs to another runtime", upstream->name);
  }
  dv_res_private* p = malloc(sizeof *p);
  if (!p) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_resource_init: out of host memory");
  atomic_init(&p->refs, 1); /* the handle reaches other threads through the caller's publication */
  p->r = r, p->next = NULL;
  if (upstream) atomic_fetch_add_explicit(&private_of(upstream)->refs, 1, memory_order_relaxed);
  r->vtable = vt;
  r->name = name ? name : "user";
  r->rt = rt;
  r->upstream = upstream;
  r->account = upstream ? upstream->account : r->account;
  r->devrt_private = p;
  if (vt->stream_retired) retiree_add(p);
  return DEVRT_OK;
}

devrt_status devrt_resource_retain(devrt_resource* r) {
  DV_RES_CHECK(r, "devrt_resource_retain");
  int was = atomic_fetch_add_explicit(&private_of(r)->refs, 1, memory_order_relaxed);
  DV_ASSERT(was > 0); /* the caller holds a reference: the count cannot be at 0 */
  (void)was;
  return DEVRT_OK;
}

devrt_status devrt_resource_release(devrt_resource* r) {
  DV_RES_CHECK(r, "devrt_resource_release");
  while (r) {
    dv_res_private* p = private_of(r);
    /* acq_rel: the release orders this holder's uses of r before the count falls; the acquire on
     * the last one pairs with every other holder's release, so destroy runs after all their uses */
    int was = atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel);
    DV_ASSERT(was > 0); /* never below zero: every release matches a reference */
    if (was != 1) break;
    devrt_resource* up = r->upstream;
    if (r->vtable->stream_retired) retiree_remove(p);
    r->devrt_private = NULL; /* released: DV_RES_CHECK refuses it from here on */
    r->vtable->destroy(r);
    free(p);
    r = up;
  }
  return DEVRT_OK;
}

DV_HOT devrt_status devrt_resource_allocate(devrt_resource* r, size_t size, devrt_stream stream,
                                            const char* tag, void** out) {
  DV_RES_CHECK(r, "devrt_resource_allocate");
  DV_ARG_CHECK(out, "devrt_resource_allocate", "out is NULL (%s)", r->name);
  DV_ARG_CHECK((uint64_t)size - 1 < DEVRT_MAX_ALLOC_SIZE, "devrt_resource_allocate",
               "size %zu not in [1, DEVRT_MAX_ALLOC_SIZE = 2^62] (%s, tag %s)", size, r->name,
               tag ? tag : "untagged");
  *out = NULL;
  return r->vtable->allocate(r, size, stream, tag, out);
}

DV_HOT devrt_status devrt_resource_deallocate(devrt_resource* r, void* ptr, size_t size,
                                              devrt_stream stream) {
  DV_RES_CHECK(r, "devrt_resource_deallocate");
  DV_ARG_CHECK(ptr, "devrt_resource_deallocate", "ptr is NULL (%s)", r->name);
  DV_ARG_CHECK((uint64_t)size - 1 < DEVRT_MAX_ALLOC_SIZE, "devrt_resource_deallocate",
               "size %zu not in [1, DEVRT_MAX_ALLOC_SIZE = 2^62] (%s, ptr %p)", size, r->name, ptr);
  return r->vtable->deallocate(r, ptr, size, stream);
}

devrt_status devrt_resource_query(devrt_resource* r, devrt_resource_figures* out) {
  DV_RES_CHECK(r, "devrt_resource_query");
  DV_ARG_CHECK(out, "devrt_resource_query", "out is NULL (%s)", r->name);
  *out = (devrt_resource_figures){0};
  if (r->vtable->query) return r->vtable->query(r, out);
  return r->upstream ? devrt_resource_query(r->upstream, out) : DEVRT_OK;
}

devrt_status devrt_resource_reap(devrt_resource* r, unsigned flags, uint64_t* reaped) {
  DV_RES_CHECK(r, "devrt_resource_reap");
  DV_ARG_CHECK(!(flags & ~DEVRT_REAP_WAIT), "devrt_resource_reap", "unknown flags 0x%x", flags);
  uint64_t n = 0;
  devrt_status s = DEVRT_OK;
  if (r->vtable->reap)
    s = r->vtable->reap(r, flags, &n);
  else if (r->upstream)
    s = devrt_resource_reap(r->upstream, flags, &n);
  if (reaped) *reaped = n;
  return s;
}

devrt_status devrt_resource_trim(devrt_resource* r, uint64_t* released) {
  DV_RES_CHECK(r, "devrt_resource_trim");
  uint64_t n = 0;
  devrt_status s = DEVRT_OK;
  if (r->vtable->trim)
    s = r->vtable->trim(r, &n);
  else if (r->upstream)
    s = devrt_resource_trim(r->upstream, &n);
  if (released) *released = n;
  return s;
}

const char* devrt_resource_name(const devrt_resource* r) { return r ? r->name : "(null)"; }
devrt_resource* devrt_resource_upstream(const devrt_resource* r) { return r ? r->upstream : NULL; }
