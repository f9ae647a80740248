/* foreign.c: PyTorch's pluggable-allocator entry points (devrt/torch.h). Each (ordinal, stream
 * handle) is imported once into the ordinal's process-wide runtime and its id kept in a
 * per-ordinal open-addressing table read without a lock; a miss, or an id made stale by someone
 * forgetting the import, imports again under the table's mutex. Entries are never removed: the
 * imports are held for the life of the process, so the keys are at most the slots there are.
 * Tensor.record_stream's streams are kept per pointer until its free, which waits for them. */
#include <stdio.h>
#include <stdlib.h>
#include "devrt/torch.h"
#include "../core/runtime.h"

enum { CAP = 2 * DV_SID_SLOTS }; /* more entries than any runtime has slots: never full */

typedef struct torch_map {
  pthread_mutex_t mu;           /* inserts and re-imports */
  _Atomic uintptr_t key[CAP];   /* the handle; written before id */
  _Atomic devrt_stream id[CAP]; /* 0: empty; published with release */
} torch_map;

static _Atomic(torch_map*) maps[DEVRT_MAX_ORDINALS];
static pthread_mutex_t maps_mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned hash(uintptr_t k) {
  uint64_t h = (uint64_t)k * 0x9e3779b97f4a7c15ull;
  return (unsigned)(h >> 40) & (CAP - 1);
}

/* The entry of k, or the empty one where it would go; CAP when the table is full. */
static unsigned find(torch_map* m, uintptr_t k, devrt_stream* id) {
  unsigned h = hash(k);
  for (unsigned n = 0; n < CAP; n++, h = (h + 1) & (CAP - 1)) {
    *id = atomic_load_explicit(&m->id[h], memory_order_acquire);
    if (!*id || atomic_load_explicit(&m->key[h], memory_order_relaxed) == k) return h;
  }
  *id = 0;
  return CAP;
}

static devrt_status torch_map_of(int device, torch_map** out) {
  torch_map* m = atomic_load_explicit(&maps[device], memory_order_acquire);
  if (!m) {
    pthread_mutex_lock(&maps_mu);
    m = atomic_load_explicit(&maps[device], memory_order_relaxed);
    if (!m && (m = calloc(1, sizeof *m)) != NULL) {
      pthread_mutex_init(&m->mu, NULL);
      atomic_store_explicit(&maps[device], m, memory_order_release);
    }
    pthread_mutex_unlock(&maps_mu);
    if (!m) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "out of host memory for the stream table");
  }
  *out = m;
  return DEVRT_OK;
}

/* The id of `stream` in the runtime of `device` (rt), imported on first use. */
static devrt_status torch_stream(devrt_runtime* rt, int device, void* stream, devrt_stream* out) {
  if (stream == DEVRT_STREAM_LEGACY) stream = NULL; /* one key for the legacy stream */
  uintptr_t k = (uintptr_t)stream;
  torch_map* m = NULL;
  DV_CHECK(torch_map_of(device, &m));
  devrt_stream id;
  find(m, k, &id);
  if (DV_LIKELY(dv_stream_held(rt, id))) {
    *out = id;
    return DEVRT_OK;
  }
  devrt_status s = DEVRT_OK;
  pthread_mutex_lock(&m->mu);
  unsigned h = find(m, k, &id);
  if (!dv_stream_held(rt, id)) {
    if (h == CAP)
      s = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "%u stream handles imported already", CAP);
    else if ((s = devrt_stream_import(rt, stream, &id)) == DEVRT_OK) {
      atomic_store_explicit(&m->key[h], k, memory_order_relaxed);
      atomic_store_explicit(&m->id[h], id, memory_order_release);
    }
  }
  pthread_mutex_unlock(&m->mu);
  *out = id;
  return s;
}

/* Refails with the same status and `call(args): ` in front of the message. */
static void refail(devrt_status s, const char* call, size_t size, int device, void* stream) {
  char msg[768];
  snprintf(msg, sizeof msg, "%s", devrt_last_error());
  dv_fail(s, "%s(%zu bytes, device %d, stream %p): %s", call, size, device, stream, msg);
}

/* ---- record_stream: other streams that use an allocation, waited for by its free ---- */

typedef struct rec {
  void* ptr;    /* the allocation */
  void* stream; /* a stream that used it, as PyTorch names it */
  struct rec* next;
} rec;

enum { NREC = 256 };
static pthread_mutex_t recs_mu = PTHREAD_MUTEX_INITIALIZER; /* holds no driver call */
static rec* recs[NREC];                                     /* chains by pointer (recs_mu) */
static _Atomic unsigned nrecs; /* entries: a free looks in the table only when some exist */

static unsigned rec_hash(void* p) { return hash((uintptr_t)p) % NREC; }

void devrt_torch_record_stream(void* ptr, void* stream) {
  dv_error_clear();
  rec* r = malloc(sizeof *r);
  if (!ptr || !r) {
    free(r);
    if (ptr) dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_torch_record_stream: out of host memory");
    return;
  }
  *r = (rec){ptr, stream, NULL};
  pthread_mutex_lock(&recs_mu);
  rec** head = &recs[rec_hash(ptr)];
  rec* e = *head;
  while (e && (e->ptr != ptr || e->stream != stream)) e = e->next;
  if (!e) r->next = *head, *head = r, atomic_fetch_add(&nrecs, 1);
  pthread_mutex_unlock(&recs_mu);
  if (e) free(r); /* recorded already */
}

/* Makes `id` (the free's stream) wait for the work queued so far on every stream recorded for
 * ptr, and forgets them: the stream-ordered free after it then completes after their work too. */
static devrt_status wait_recorded(devrt_runtime* rt, int device, void* ptr, devrt_stream id) {
  if (DV_LIKELY(!atomic_load_explicit(&nrecs, memory_order_relaxed))) return DEVRT_OK;
  rec* mine = NULL;
  pthread_mutex_lock(&recs_mu);
  for (rec** e = &recs[rec_hash(ptr)]; *e;) {
    rec* r = *e;
    if (r->ptr != ptr) {
      e = &r->next;
      continue;
    }
    *e = r->next, r->next = mine, mine = r;
    atomic_fetch_sub(&nrecs, 1);
  }
  pthread_mutex_unlock(&recs_mu);
  devrt_status st = DEVRT_OK;
  dv_stream *to = NULL, *from = NULL;
  if (mine) st = dv_stream_get(rt, id, &to, "devrt_torch_free");
  for (rec* r; (r = mine) != NULL; free(r)) {
    mine = r->next;
    devrt_stream other = 0;
    dv_pev* ev = NULL;
    if (st != DEVRT_OK || (st = torch_stream(rt, device, r->stream, &other)) != DEVRT_OK ||
        other == id || (st = dv_stream_get(rt, other, &from, "devrt_torch_free")) != DEVRT_OK)
      continue;
    st = dv_pev_record(rt, DV_SID_SLOT(other), from, &ev);
    if (st == DEVRT_OK) st = dv_pev_wait(rt, to, ev, NULL);
    if (ev) dv_pev_unref(rt, ev);
  }
  return st;
}

/* An allocation that does what PyTorch's own allocator does before it gives up: on a refusal,
 * wait for every pending free, empty the cache, wait for what that freed, and try once more (a
 * refused allocation ends a PyTorch program: docs/python.md). */
static devrt_status torch_allocate(devrt_resource* r, size_t size, devrt_stream id, void** p) {
  devrt_status s = devrt_resource_allocate(r, size, id, "torch", p);
  if (s != DEVRT_ERR_OVER_BUDGET && s != DEVRT_ERR_DEVICE_ALLOC_FAILED) return s;
  uint64_t n;
  DV_CHECK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  DV_CHECK(devrt_resource_trim(r, &n));
  DV_CHECK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  return devrt_resource_allocate(r, size, id, "torch", p);
}

void* devrt_torch_alloc(size_t size, int device, void* stream) {
  dv_error_clear();
  if (size == 0) return NULL;
  devrt_runtime* rt;
  devrt_resource* r;
  devrt_stream id = 0;
  void* p = NULL;
  devrt_status s = devrt_runtime_get(device, &rt);
  if (s == DEVRT_OK) s = torch_stream(rt, device, stream, &id);
  if (s == DEVRT_OK) s = devrt_runtime_resource(rt, &r);
  if (s == DEVRT_OK) s = torch_allocate(r, size, id, &p);
  if (s != DEVRT_OK) {
    refail(s, "devrt_torch_alloc", size, device, stream);
    return NULL;
  }
  return p;
}

void devrt_torch_free(void* ptr, size_t size, int device, void* stream) {
  dv_error_clear();
  if (!ptr) return;
  devrt_runtime* rt;
  devrt_resource* r;
  devrt_stream id = 0;
  devrt_status s = devrt_runtime_get(device, &rt);
  if (s == DEVRT_OK) s = torch_stream(rt, device, stream, &id);
  if (s == DEVRT_OK) s = wait_recorded(rt, device, ptr, id);
  if (s == DEVRT_OK) s = devrt_runtime_resource(rt, &r);
  if (s == DEVRT_OK) s = devrt_resource_deallocate(r, ptr, size, id);
  if (s != DEVRT_OK) refail(s, "devrt_torch_free", size, device, stream);
}
