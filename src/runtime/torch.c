/* torch.c: PyTorch's pluggable-allocator entry points (devrt/torch.h). Each (ordinal, stream
 * handle) is imported once into the ordinal's process-wide runtime and its id kept in a
 * per-ordinal open-addressing table read without a lock; a miss, or an id made stale by someone
 * forgetting the import, imports again under the table's mutex. Entries are never removed: the
 * imports are held for the life of the process, so the keys are at most the slots there are.
 * Tensor.record_stream's streams are kept per pointer until its free, which is ordered after their
 * work on the device where devrt can, else waits for it on the host. Allocations for a stream
 * PyTorch captures into a CUDA graph are made off that stream and held on free until released. */
#include <stdio.h>
#include <stdlib.h>
#include "devrt/torch.h"
#include "runtime.h"

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

static struct { /* devrt_torch_stats of each ordinal (relaxed: counters) */
  _Atomic uint64_t alloc_retries, ooms, device_waits, host_waits, frees_retried, frees_failed;
  _Atomic uint64_t graph_allocs, graph_held_bytes, graph_released_bytes;
} counts[DEVRT_MAX_ORDINALS];
/* The device is valid: its runtime was found first. */
#define COUNT(device, field) \
  atomic_fetch_add_explicit(&counts[device].field, 1, memory_order_relaxed)

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
  if (!e) {
    r->next = *head, *head = r;
    atomic_fetch_add_explicit(&nrecs, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&recs_mu);
  if (e) free(r); /* recorded already */
}

/* Takes ptr's recorded streams out of the table (a list the free owns until it succeeds). */
static rec* recs_take(void* ptr) {
  if (DV_LIKELY(!atomic_load_explicit(&nrecs, memory_order_relaxed))) return NULL;
  rec* mine = NULL;
  pthread_mutex_lock(&recs_mu);
  for (rec** e = &recs[rec_hash(ptr)]; *e;) {
    rec* r = *e;
    if (r->ptr != ptr) {
      e = &r->next;
      continue;
    }
    *e = r->next, r->next = mine, mine = r;
    atomic_fetch_sub_explicit(&nrecs, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&recs_mu);
  return mine;
}

/* Puts a failed free's streams back: the allocation is still live and still used by them. */
static void recs_put_back(rec* mine) {
  pthread_mutex_lock(&recs_mu);
  for (rec* r; (r = mine) != NULL;) {
    mine = r->next;
    rec** head = &recs[rec_hash(r->ptr)];
    r->next = *head, *head = r;
    atomic_fetch_add_explicit(&nrecs, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&recs_mu);
}

/* Makes `to` (stream id) wait on the device for the work queued so far on `stream`; false if
 * devrt cannot (the stream cannot be imported, or the event or the wait failed). */
static bool wait_on_device(devrt_runtime* rt, int device, void* stream, devrt_stream id,
                           dv_stream* to) {
  devrt_stream other = 0;
  dv_stream* from = NULL;
  dv_pev* ev = NULL;
  if (torch_stream(rt, device, stream, &other) != DEVRT_OK) return false;
  if (other == id) return true; /* the free's own stream: stream order covers it */
  bool ok = dv_stream_get(rt, other, &from, "devrt_torch_free") == DEVRT_OK &&
            dv_pev_record(rt, DV_SID_SLOT(other), from, &ev) == DEVRT_OK &&
            dv_pev_wait(rt, to, ev, NULL) == DEVRT_OK;
  if (ev) dv_pev_unref(rt, ev);
  if (ok) COUNT(device, device_waits);
  return ok;
}

/* Waits on the host for the work queued so far on `stream`: through devrt's import of it when
 * there is one, else on the native handle (another device's stream, the per-thread stream). */
static devrt_status host_wait(devrt_runtime* rt, int device, void* stream) {
  devrt_stream id = 0;
  dv_stream* s = NULL;
  COUNT(device, host_waits);
  if (torch_stream(rt, device, stream, &id) == DEVRT_OK &&
      dv_stream_get(rt, id, &s, "devrt_torch_free") == DEVRT_OK)
    return rt->be->stream_sync(s);
  return rt->be->stream_sync_native(rt->dev, stream == DEVRT_STREAM_LEGACY ? NULL : stream);
}

/* Sets *id to the stream the free is enqueued on, ordered after the work queued so far on the
 * free's stream and on every recorded one: on the device where devrt can, else after a wait on
 * the host, which is always safe. *id is the free's stream, or the runtime's own stream when
 * devrt cannot import the free's stream (then that stream was waited for on the host). */
static devrt_status order_free(devrt_runtime* rt, int device, void* stream, const rec* mine,
                               devrt_stream* id) {
  dv_stream* to = NULL;
  if (torch_stream(rt, device, stream, id) != DEVRT_OK) {
    DV_CHECK(host_wait(rt, device, stream));
    DV_CHECK(dv_internal_stream(rt, id));
  }
  DV_CHECK(dv_stream_get(rt, *id, &to, "devrt_torch_free"));
  for (const rec* r = mine; r; r = r->next)
    if (!wait_on_device(rt, device, r->stream, *id, to)) DV_CHECK(host_wait(rt, device, r->stream));
  return DEVRT_OK;
}

devrt_status devrt_torch_stats_get(int device, devrt_torch_stats* out) {
  dv_error_clear();
  DV_ARG_CHECK(device >= 0 && device < DEVRT_MAX_ORDINALS, "devrt_torch_stats_get",
               "device %d not in [0, %d)", device, DEVRT_MAX_ORDINALS);
  DV_ARG_CHECK(out, "devrt_torch_stats_get", "out is NULL");
#define READ(field) atomic_load_explicit(&counts[device].field, memory_order_relaxed)
  *out = (devrt_torch_stats){.alloc_retries = READ(alloc_retries),
                             .ooms = READ(ooms),
                             .device_waits = READ(device_waits),
                             .host_waits = READ(host_waits),
                             .frees_retried = READ(frees_retried),
                             .frees_failed = READ(frees_failed),
                             .graph_allocs = READ(graph_allocs),
                             .graph_held_bytes = READ(graph_held_bytes),
                             .graph_released_bytes = READ(graph_released_bytes)};
#undef READ
  return DEVRT_OK;
}

/* An allocation that does what PyTorch's own allocator does before it gives up: on a refusal,
 * wait for every pending free, empty the cache, wait for what that freed, and try once more (a
 * refused allocation ends a PyTorch program: docs/python.md). */
static devrt_status torch_allocate(devrt_resource* r, size_t size, devrt_stream id, int device,
                                   void** p) {
  devrt_status s = devrt_resource_allocate(r, size, id, "torch", p);
  if (s != DEVRT_ERR_OVER_BUDGET && s != DEVRT_ERR_DEVICE_ALLOC_FAILED) return s;
  COUNT(device, alloc_retries);
  uint64_t n;
  DV_CHECK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  DV_CHECK(devrt_resource_trim(r, &n));
  DV_CHECK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  s = devrt_resource_allocate(r, size, id, "torch", p);
  if (s == DEVRT_ERR_OVER_BUDGET || s == DEVRT_ERR_DEVICE_ALLOC_FAILED) COUNT(device, ooms);
  return s;
}

/* ---- CUDA graphs: allocations a captured graph may use ----
 * Work enqueued on a capturing stream runs only at each replay of the graph, so an allocation
 * for such a stream is made on the runtime's own stream, with the thread's capture mode relaxed
 * (as PyTorch does around cudaMalloc), and waited for there: nothing is enqueued on the capturing
 * stream. That allocation, and any allocation freed on a capturing stream, is held on its free
 * (a replay may still use it; PyTorch's pluggable interface says nothing of a graph's lifetime)
 * until devrt_torch_graph_release gives the held ones back. */

typedef struct cap {
  void* ptr;
  size_t size;
  bool freed; /* held: PyTorch freed it, devrt has not */
  struct cap* next;
} cap;
static pthread_mutex_t caps_mu = PTHREAD_MUTEX_INITIALIZER; /* holds no driver call */
static cap* caps[DEVRT_MAX_ORDINALS];                       /* each device's (caps_mu) */
static _Atomic unsigned ncaps; /* entries: a free looks in the lists only when some exist */

/* The legacy default stream, where most of a training step's tensors live, is never captured
 * (CUDA refuses to): no driver call asks about it. */
static bool capturable(void* stream) { return stream && stream != DEVRT_STREAM_LEGACY; }

/* Whether PyTorch's `stream` (devrt's id) is being captured. */
static devrt_status capturing(devrt_runtime* rt, void* stream, devrt_stream id, bool* out) {
  *out = false;
  if (!capturable(stream)) return DEVRT_OK;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, id, &s, "devrt_torch"));
  return rt->be->stream_capturing(s, out);
}

/* Adds (ptr, size) to device's list; false out of host memory. */
static bool caps_add(int device, void* ptr, size_t size, bool freed) {
  cap* c = malloc(sizeof *c);
  if (!c) return false;
  pthread_mutex_lock(&caps_mu);
  *c = (cap){ptr, size, freed, caps[device]};
  caps[device] = c;
  atomic_fetch_add_explicit(&ncaps, 1, memory_order_relaxed);
  pthread_mutex_unlock(&caps_mu);
  return true;
}

/* An allocation for a capturing stream (see above). */
static DV_NOINLINE devrt_status alloc_for_capture(devrt_runtime* rt, devrt_resource* r, size_t size,
                                                  int device, void** p) {
  int mode = DV_CAPTURE_MODE_RELAXED;
  rt->be->capture_mode_swap(&mode);
  devrt_stream own = 0;
  devrt_status s = dv_internal_stream(rt, &own);
  if (s == DEVRT_OK) s = torch_allocate(r, size, own, device, p);
  if (s == DEVRT_OK && (s = devrt_stream_synchronize(rt, own)) == DEVRT_OK &&
      !caps_add(device, *p, size, false))
    s = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "out of host memory");
  if (s != DEVRT_OK && *p) {
    DV_KEEP_ERROR(devrt_resource_deallocate(r, *p, size, own));
    *p = NULL;
  }
  rt->be->capture_mode_swap(&mode);
  if (s == DEVRT_OK) COUNT(device, graph_allocs);
  return s;
}

/* Whether the free of ptr is held instead (see above): an allocation made for a capture, or one
 * freed on a capturing stream. Its recorded streams are dropped: the release waits for all. */
static bool held(devrt_runtime* rt, int device, void* ptr, size_t size, void* stream) {
  bool found = false;
  if (atomic_load_explicit(&ncaps, memory_order_relaxed)) {
    pthread_mutex_lock(&caps_mu);
    for (cap* c = caps[device]; c && !found; c = c->next)
      if (c->ptr == ptr && !c->freed) c->freed = found = true;
    pthread_mutex_unlock(&caps_mu);
  }
  devrt_stream id = 0;
  bool cap = false;
  if (!found && capturable(stream) && torch_stream(rt, device, stream, &id) == DEVRT_OK &&
      capturing(rt, stream, id, &cap) == DEVRT_OK && cap)
    found = caps_add(device, ptr, size, true); /* out of host memory: freed as usual below */
  if (!found) return false;
  for (rec *mine = recs_take(ptr), *x; (x = mine) != NULL; free(x)) mine = x->next;
  atomic_fetch_add_explicit(&counts[device].graph_held_bytes, size, memory_order_relaxed);
  return true;
}

devrt_status devrt_torch_graph_release(int device, uint64_t* bytes) {
  dv_error_clear();
  DV_ARG_CHECK(device >= 0 && device < DEVRT_MAX_ORDINALS, "devrt_torch_graph_release",
               "device %d is out of [0, %d)", device, DEVRT_MAX_ORDINALS);
  devrt_runtime* rt;
  devrt_resource* r;
  devrt_stream own = 0;
  DV_CHECK(devrt_runtime_get(device, &rt));
  DV_CHECK(devrt_runtime_resource(rt, &r));
  DV_CHECK(dv_internal_stream(rt, &own));
  cap *mine = NULL, *keep = NULL;
  pthread_mutex_lock(&caps_mu);
  for (cap *c = caps[device], *n; c; c = n) {
    n = c->next;
    if (c->freed)
      c->next = mine, mine = c;
    else
      c->next = keep, keep = c;
  }
  caps[device] = keep;
  pthread_mutex_unlock(&caps_mu);
  /* every replay that may use them done: all work on the device (its per-thread stream's sync is
   * the context's) */
  devrt_status s = mine ? rt->be->stream_sync_native(rt->dev, DEVRT_STREAM_PER_THREAD) : DEVRT_OK;
  uint64_t n = 0;
  for (cap* c; s == DEVRT_OK && (c = mine) != NULL; free(c)) {
    if ((s = devrt_resource_deallocate(r, c->ptr, c->size, own)) != DEVRT_OK) break;
    mine = c->next, n += c->size;
    atomic_fetch_sub_explicit(&ncaps, 1, memory_order_relaxed);
  }
  for (cap* c; (c = mine) != NULL;) { /* a failure: the rest stay held */
    mine = c->next;
    pthread_mutex_lock(&caps_mu);
    c->next = caps[device], caps[device] = c;
    pthread_mutex_unlock(&caps_mu);
  }
  atomic_fetch_sub_explicit(&counts[device].graph_held_bytes, n, memory_order_relaxed);
  atomic_fetch_add_explicit(&counts[device].graph_released_bytes, n, memory_order_relaxed);
  if (bytes) *bytes = n;
  return s;
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
  bool cap = false;
  if (s == DEVRT_OK) s = capturing(rt, stream, id, &cap);
  if (s == DEVRT_OK)
    s = DV_UNLIKELY(cap) ? alloc_for_capture(rt, r, size, device, &p)
                         : torch_allocate(r, size, id, device, &p);
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
  devrt_status s = devrt_runtime_get(device, &rt);
  if (s == DEVRT_OK) s = devrt_runtime_resource(rt, &r);
  if (s != DEVRT_OK) {
    refail(s, "devrt_torch_free", size, device, stream);
    return;
  }
  /* All or nothing: the recorded streams are forgotten only once the free is enqueued behind
   * them. PyTorch never retries a free, so one that fails (a transient backend failure) is tried
   * once more here from the start; INVALID_ARGUMENT (not devrt's pointer, a wrong size, a stream
   * that is not one) would fail again. */
  if (DV_UNLIKELY(held(rt, device, ptr, size, stream))) return;
  rec* mine = recs_take(ptr);
  devrt_stream id = 0;
  for (int attempt = 0; attempt < 2; attempt++) {
    if (attempt) COUNT(device, frees_retried);
    s = order_free(rt, device, stream, mine, &id);
    if (s == DEVRT_OK) s = devrt_resource_deallocate(r, ptr, size, id);
    if (s == DEVRT_OK || s == DEVRT_ERR_INVALID_ARGUMENT) break;
  }
  if (s == DEVRT_OK) {
    for (rec* x; (x = mine) != NULL; free(x)) mine = x->next;
    dv_error_clear(); /* a fallback that worked leaves no error behind */
    return;
  }
  COUNT(device, frees_failed);
  recs_put_back(mine);
  refail(s, "devrt_torch_free", size, device, stream);
}
