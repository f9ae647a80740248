/* host.c: the host backend (dv_host_backend): devrt's device operations on the CPU. Owns the
 * host device, one worker thread per stream draining a FIFO of ops, events as fences (stream,
 * sequence), the counted host pool, and the builtin host kernel launcher. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "backend.h"
#include "../core/thread.h"
#include "../core/parse.h"

/* Every allocation carries a 256-byte header in front of the returned pointer. */
#define HDR ((size_t)256)
enum { MAGIC_POOL = 0x504f4f4cu, MAGIC_MEM = 0x4d454d21u, MAGIC_STREAM = 0x5354524du };
typedef struct hdr {
  uint64_t size;
  uint32_t magic;
} hdr;

struct dv_dev {
  int ordinal;
  unsigned workers;
  uint64_t release_threshold;
  _Atomic uint64_t used, high;            /* pool bytes handed out (rounded sizes), va pages */
  _Atomic unsigned faults[DV_FAULT_OPS_]; /* armed fault countdowns */
  _Atomic bool faulted;                   /* DV_FAULT_DEVICE hit: event queries and syncs fail */
};

struct dv_green {
  unsigned n;
  unsigned short ids[];
}; /* a set of the device's workers, in id order */
struct dv_module {
  const dv_host_kernel_def* table;
  unsigned count;
};

typedef enum op_kind { OP_FN, OP_WAIT, OP_FREE, OP_MEMSET, OP_MEMCPY, OP_LAUNCH, OP_GRAPH } op_kind;

typedef struct op {
  struct op* next;
  op_kind kind;
  union {
    struct {
      devrt_host_fn fn;
      void* user;
    } fn;
    struct {
      dv_stream* s;
      uint64_t target;
    } wait; /* holds a reference on s */
    struct {
      dv_dev* d;
      void* p;
    } free;
    struct {
      void* p;
      int byte;
      size_t size;
    } set;
    struct {
      void* dst;
      const void* src;
      size_t size;
    } cpy;
    struct {
      const dv_host_kernel_def* def;
      dv_dim3 grid, block;
      void* argv[8];
    } run;
    dv_graph* graph; /* holds a reference */
  } u;
  max_align_t args[]; /* OP_LAUNCH: the kernel arguments; OP_FN: a copied user (host_func) */
} op;

struct dv_stream {
  dv_dev* dev;
  dv_green* green;
  pthread_t thread;           /* started with the first op (start_worker): idle streams cost none */
  bool started;               /* under mu */
  pthread_mutex_t mu;         /* a mutex: the first enqueue starts the worker thread under it */
  pthread_cond_t work;        /* the worker waits here for ops or stop */
  pthread_cond_t done;        /* syncs and fences wait here for `completed` to advance */
  op *head, *tail;            /* FIFO, under mu */
  op *cap_head, *cap_tail;    /* under mu: capturing (capture_begin): ops recorded, not run */
  bool capturing;             /* under mu */
  struct dv_stream* into;     /* under mu: capturing as a stream that joined another's capture
                               * by an event: the capture's stream, whose list it records into
                               * (a reference, dropped with the stream) */
  uint64_t submitted;         /* ops enqueued, under mu */
  _Atomic uint64_t completed; /* ops finished; written under mu, read lock-free */
  bool stop;                  /* under mu */
  _Atomic unsigned refs;      /* the stream's owner + events and waits that name it */
  uint32_t magic;             /* MAGIC_STREAM from creation until its owner destroys it */
};

/* A captured list of ops, run in order by each launch (OP_GRAPH) on the launching stream. */
struct dv_graph {
  op* ops;
  _Atomic unsigned refs; /* its owner + launches not yet run */
};

/* A fence: reached when s->completed >= target. s NULL: never recorded. */
struct dv_event {
  pthread_mutex_t mu;
  dv_dev* dev;
  dv_stream* s; /* holds a reference, so the fence outlives the stream */
  uint64_t target;
  dv_stream* cap; /* recorded in a capture: its stream (a reference); a stream that waits for it
                   * joins that capture. A capture records in call order, so no fence is needed */
};

static void free_ops(op* o) {
  for (op* nx; o; o = nx) nx = o->next, free(o);
}

/* ---- streams and fences ---- */

/* A reference count: taking one needs no order (the taker holds one already or the wrap checked
 * the stream live under its mutex); the last drop (acq_rel) sees every holder's use first. */
static void stream_ref(dv_stream* s) {
  atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

static void stream_unref(dv_stream* s) {
  unsigned was = atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel);
  DV_ASSERT(was > 0);
  if (was != 1) return;
  free_ops(s->cap_head); /* a capture its stream's owner never ended */
  if (s->into) stream_unref(s->into);
  pthread_cond_destroy(&s->done);
  pthread_cond_destroy(&s->work);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* acquire: pairs with the worker's release count, so the ops before the fence are visible */
static bool fence_reached(dv_stream* s, uint64_t target) {
  return atomic_load_explicit(&s->completed, memory_order_acquire) >= target;
}

static void fence_wait(dv_stream* s, uint64_t target) {
  pthread_mutex_lock(&s->mu);
  while (!fence_reached(s, target)) pthread_cond_wait(&s->done, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static hdr* header_of(void* p) { return (hdr*)((unsigned char*)p - HDR); }

/* The last drop (acq_rel) sees every launch's run first. */
static void graph_unref(dv_graph* g) {
  if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1) return;
  free_ops(g->ops);
  free(g);
}

static void run_op(dv_stream* s, op* o) {
  switch (o->kind) {
    case OP_FN:
      o->u.fn.fn(o->u.fn.user);
      break;
    case OP_WAIT:
      fence_wait(o->u.wait.s, o->u.wait.target);
      stream_unref(o->u.wait.s);
      break;
    case OP_FREE: {
      hdr* h = header_of(o->u.free.p);
      uint64_t size = h->size;
      h->magic = 0;
      free(h);
      atomic_fetch_sub_explicit(&o->u.free.d->used, size, memory_order_relaxed); /* a figure */
      break;
    }
    case OP_MEMSET:
      memset(o->u.set.p, o->u.set.byte, o->u.set.size);
      break;
    case OP_MEMCPY:
      memmove(o->u.cpy.dst, o->u.cpy.src, o->u.cpy.size);
      break;
    case OP_LAUNCH: {
      dv_host_grid g = {.grid_dim = o->u.run.grid, .block_dim = o->u.run.block};
      unsigned b = 0; /* blocks go round-robin over the stream's workers */
      for (unsigned z = 0; z < g.grid_dim.z; z++)
        for (unsigned y = 0; y < g.grid_dim.y; y++)
          for (unsigned x = 0; x < g.grid_dim.x; x++, b++) {
            g.block_idx = (dv_dim3){x, y, z};
            g.sm = s->green ? s->green->ids[b % s->green->n] : b % s->dev->workers;
            o->u.run.def->fn(&g, o->u.run.argv);
          }
      break;
    }
    case OP_GRAPH: /* a capture holds launches, fills and copies only (capture_begin's rule) */
      for (op* x = o->u.graph->ops; x; x = x->next) run_op(s, x);
      graph_unref(o->u.graph);
      break;
  }
}

static void* worker_main(void* arg) {
  dv_stream* s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
    op* o = s->head;
    if (!o) break; /* stopped and drained */
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    run_op(s, o);
    free(o);
    pthread_mutex_lock(&s->mu);
    atomic_fetch_add_explicit(&s->completed, 1, memory_order_release); /* pairs: fence_reached */
    pthread_cond_broadcast(&s->done);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static devrt_status op_new(op_kind kind, size_t extra, const char* who, op** out) {
  op* o = calloc(1, sizeof *o + extra);
  if (!o) return dv_fail(DEVRT_ERR_BACKEND_ERROR, "%s: out of host memory for a stream op", who);
  o->kind = kind;
  *out = o;
  return DEVRT_OK;
}

/* s->mu held: starts the stream's worker thread (no asynchronous signals: core/thread.h). */
static devrt_status start_worker(dv_stream* s, const char* who) {
  int rc = dv_thread_start(&s->thread, worker_main, s);
  if (rc != 0)
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "%s: starting the stream's thread failed (errno %d)",
                   who, rc);
  s->started = true;
  return DEVRT_OK;
}

/* Appends o to s's queue (its worker started first if need be), or to its capture; on failure o
 * is dropped. */
static devrt_status enqueue(dv_stream* s, op* o, const char* who) {
  pthread_mutex_lock(&s->mu);
  dv_stream* into = s->capturing ? s->into : NULL;
  if (into) { /* a joined stream records into its capture's list, in call order */
    pthread_mutex_unlock(&s->mu);
    s = into;
    pthread_mutex_lock(&s->mu);
  }
  if (s->capturing) { /* recorded: launches, fills and copies (devrt enqueues nothing else) */
    DV_ASSERT(o->kind == OP_LAUNCH || o->kind == OP_MEMSET || o->kind == OP_MEMCPY ||
              o->kind == OP_FN);
    *(s->cap_tail ? &s->cap_tail->next : &s->cap_head) = o;
    s->cap_tail = o;
    pthread_mutex_unlock(&s->mu);
    return DEVRT_OK;
  }
  devrt_status st = s->started ? DEVRT_OK : start_worker(s, who);
  if (st == DEVRT_OK) {
    if (s->tail)
      s->tail->next = o;
    else
      s->head = o;
    s->tail = o;
    s->submitted++;
    pthread_cond_signal(&s->work);
  }
  pthread_mutex_unlock(&s->mu);
  if (st != DEVRT_OK) {
    if (o->kind == OP_WAIT) stream_unref(o->u.wait.s);
    if (o->kind == OP_GRAPH) graph_unref(o->u.graph);
    free(o);
  }
  return st;
}

/* ---- graphs ---- */

static devrt_status host_capture_begin(dv_stream* s) {
  pthread_mutex_lock(&s->mu);
  bool was = s->capturing;
  s->capturing = true;
  pthread_mutex_unlock(&s->mu);
  return was ? dv_fail(DEVRT_ERR_INVALID_STATE, "host stream %p is capturing already", (void*)s)
             : DEVRT_OK;
}

static devrt_status host_stream_capturing(dv_stream* s, bool* out) {
  pthread_mutex_lock(&s->mu);
  *out = s->capturing;
  pthread_mutex_unlock(&s->mu);
  return DEVRT_OK;
}

static void host_capture_mode_swap(int* mode) { (void)mode; /* host captures have no modes */ }

/* A host graph runs on the launching stream's worker: green and priority mean nothing here. */
static devrt_status host_capture_end(dv_dev* d, dv_stream* s, dv_green* green, int priority,
                                     dv_graph** out) {
  (void)d, (void)green, (void)priority;
  dv_graph* g = calloc(1, sizeof *g);
  pthread_mutex_lock(&s->mu);
  bool was = s->capturing;
  op* ops = s->cap_head;
  s->capturing = false, s->cap_head = s->cap_tail = NULL;
  pthread_mutex_unlock(&s->mu);
  if (!was || !g) {
    free(g), free_ops(ops);
    return dv_fail(was ? DEVRT_ERR_BACKEND_ERROR : DEVRT_ERR_INVALID_STATE,
                   was ? "host capture: out of host memory" : "host stream %p is not capturing",
                   (void*)s);
  }
  g->ops = ops;
  atomic_init(&g->refs, 1);
  *out = g;
  return DEVRT_OK;
}

static devrt_status host_graph_launch(dv_graph* g, dv_stream* s) {
  op* o = NULL;
  DV_CHECK(op_new(OP_GRAPH, 0, "host graph launch", &o));
  atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed); /* the owner holds one */
  o->u.graph = g;
  return enqueue(s, o, "host graph launch");
}

static void host_graph_destroy(dv_dev* d, dv_graph* g) {
  (void)d;
  graph_unref(g);
}

/* ---- device ---- */

static devrt_status host_device_count(int* out) {
  if (!out) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host device_count: out is NULL");
  const char* v = getenv("DEVRT_HOST_DEVICES");
  uint64_t n = 1;
  if (v && (!dv_parse_u64(v, strlen(v), 10, &n) || n < 1 || n > DEVRT_MAX_ORDINALS))
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "host device_count: DEVRT_HOST_DEVICES=\"%s\" is not a decimal number in "
                   "[1, %d]",
                   v, DEVRT_MAX_ORDINALS);
  *out = (int)n;
  return DEVRT_OK;
}

static devrt_status host_device_open(const devrt_config* cfg, dv_dev** out) {
  if (!cfg || !out)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host device_open: cfg or out is NULL");
  if (cfg->ordinal < 0 || (unsigned)cfg->ordinal >= cfg->host_devices)
    return dv_fail(DEVRT_ERR_NO_DEVICE,
                   "host device_open: ordinal %d out of range (%u host devices)", cfg->ordinal,
                   cfg->host_devices);
  if (cfg->host_workers == 0)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host device_open: host_workers is 0");
  dv_dev* d = calloc(1, sizeof *d);
  if (!d) return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host device_open: out of host memory");
  d->ordinal = cfg->ordinal;
  d->workers = cfg->host_workers;
  d->release_threshold = cfg->pool_release_threshold;
  *out = d;
  return DEVRT_OK;
}

static void host_device_close(dv_dev* d) { free(d); }

static devrt_status host_device_info(dv_dev* d, devrt_device_info* out) {
  if (!out) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host device_info: out is NULL");
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "devrt host device %d", d->ordinal);
  out->ordinal = d->ordinal;
  out->sm_count = (int)d->workers;
  out->total_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  out->memory_pools = true;
  out->green_contexts = true;
  out->green_ctx_streams = true;
  out->structured_split = false;
  out->min_partition_sms = 1;
  out->sm_alignment = 1;
  out->priority_least = 0;
  out->priority_greatest = -1;
  return DEVRT_OK;
}

/* ---- streams ---- */

static devrt_status host_stream_create(dv_dev* d, dv_green* green, int priority, dv_stream** out) {
  (void)priority; /* the host has no stream priorities */
  if (!out) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host stream_create: out is NULL");
  dv_stream* s = calloc(1, sizeof *s);
  if (!s) return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host stream_create: out of host memory");
  s->dev = d;
  s->green = green;
  s->magic = MAGIC_STREAM;
  atomic_init(&s->completed, 0);
  atomic_init(&s->refs, 1);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->done, NULL);
  *out = s;
  return DEVRT_OK;
}

static void host_stream_destroy(dv_dev* d, dv_stream* s) {
  (void)d;
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = true; /* the worker drains the queue, then exits */
  s->magic = 0;
  bool started = s->started;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  if (started) pthread_join(s->thread, NULL);
  stream_unref(s);
}

static devrt_status host_stream_sync(dv_stream* s) {
  if (!s) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host stream_sync: stream is NULL");
  pthread_mutex_lock(&s->mu);
  uint64_t target = s->submitted;
  while (!fence_reached(s, target)) pthread_cond_wait(&s->done, &s->mu);
  pthread_mutex_unlock(&s->mu);
  return DEVRT_OK;
}

static void* host_stream_native(dv_stream* s) { return s; }

/* Whether native is a live host stream (of any host device). */
static bool host_stream_live(void* native) {
  dv_stream* s = native;
  bool live = false;
  if (s->magic == MAGIC_STREAM) {
    pthread_mutex_lock(&s->mu);
    live = !s->stop && s->magic == MAGIC_STREAM;
    pthread_mutex_unlock(&s->mu);
  }
  return live;
}

/* A host stream created by any host device of the same ordinal (another runtime's): it is held
 * by a reference, so events recorded on it stay valid; its owner still destroys it. */
static devrt_status host_stream_wrap(dv_dev* d, void* native, dv_stream** out) {
  dv_stream* s = native;
  if (!host_stream_live(native))
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "host stream_wrap: %p is not a live host stream (destroyed, or not a stream)",
                   native);
  if (s->dev->ordinal != d->ordinal)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "host stream_wrap: stream %p belongs to host device %d, not %d", native,
                   s->dev->ordinal, d->ordinal);
  stream_ref(s);
  *out = s;
  return DEVRT_OK;
}

static void host_stream_unwrap(dv_dev* d, dv_stream* s) {
  (void)d;
  stream_unref(s);
}

static devrt_status host_stream_sync_native(dv_dev* d, void* native) {
  (void)d;
  if (!native || native == DEVRT_STREAM_LEGACY || native == DEVRT_STREAM_PER_THREAD)
    return DEVRT_OK; /* no host stream has these names: nothing can be queued on them */
  if (!host_stream_live(native))
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "host stream_sync_native: %p is not a live host stream (destroyed, or not a "
                   "stream)",
                   native);
  return host_stream_sync(native);
}

static devrt_status host_stream_legacy(dv_dev* d, dv_stream** out) {
  return host_stream_create(d, NULL, 0, out);
}

/* ---- events ---- */

static devrt_status host_event_create(dv_dev* d, unsigned flags, dv_event** out) {
  (void)flags; /* blocking/timing flags mean nothing here: syncs always block */
  if (!out) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host event_create: out is NULL");
  dv_event* e = calloc(1, sizeof *e);
  if (!e) return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host event_create: out of host memory");
  e->dev = d;
  pthread_mutex_init(&e->mu, NULL);
  *out = e;
  return DEVRT_OK;
}

static void host_event_destroy(dv_dev* d, dv_event* e) {
  (void)d;
  if (!e) return;
  if (e->s) stream_unref(e->s);
  if (e->cap) stream_unref(e->cap);
  pthread_mutex_destroy(&e->mu);
  free(e);
}

static devrt_status host_event_record(dv_event* e, dv_stream* s) {
  if (!e || !s)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host event_record: event or stream is NULL");
  if (dv_fault_hit(&s->dev->faults[DV_FAULT_EVENT_RECORD]))
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host event_record: injected fault");
  pthread_mutex_lock(&e->mu);
  dv_stream *old = e->s, *oldcap = e->cap;
  pthread_mutex_lock(&s->mu);
  dv_stream* cap = s->capturing ? (s->into ? s->into : s) : NULL;
  e->target = s->submitted;
  pthread_mutex_unlock(&s->mu);
  stream_ref(cap ? cap : s);
  e->s = cap ? NULL : s, e->cap = cap;
  pthread_mutex_unlock(&e->mu);
  if (old) stream_unref(old);
  if (oldcap) stream_unref(oldcap);
  return DEVRT_OK;
}

/* Snapshots e's fence with a reference on its stream; false if never recorded. */
static bool event_snapshot(dv_event* e, dv_stream** s, uint64_t* target) {
  pthread_mutex_lock(&e->mu);
  *s = e->s;
  *target = e->target;
  if (*s) stream_ref(*s);
  pthread_mutex_unlock(&e->mu);
  return *s != NULL;
}

static devrt_status host_stream_wait(dv_stream* s, dv_event* e) {
  if (!s || !e)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host stream_wait: stream or event is NULL");
  pthread_mutex_lock(&e->mu);
  dv_stream* cap = e->cap;
  if (cap) stream_ref(cap);
  pthread_mutex_unlock(&e->mu);
  if (cap) { /* a point of a capture: s is of that capture already, or joins it */
    pthread_mutex_lock(&s->mu);
    bool join = !s->capturing && s != cap;
    if (join) s->capturing = true, s->into = cap; /* the reference is s's now */
    pthread_mutex_unlock(&s->mu);
    if (!join) stream_unref(cap);
    return DEVRT_OK;
  }
  dv_stream* fs;
  uint64_t target;
  if (!event_snapshot(e, &fs, &target)) return DEVRT_OK;
  if (fs == s || fence_reached(fs, target)) { /* already ordered */
    stream_unref(fs);
    return DEVRT_OK;
  }
  op* o = NULL;
  devrt_status st = op_new(OP_WAIT, 0, "host stream_wait", &o);
  if (st != DEVRT_OK) {
    stream_unref(fs);
    return st;
  }
  o->u.wait.s = fs; /* the op owns the reference */
  o->u.wait.target = target;
  return enqueue(s, o, "host stream_wait");
}

/* DV_FAULT_DEVICE: once its countdown hits, the device stays faulted (a sticky error). */
static bool device_faulted(dv_dev* d) {
  if (atomic_load_explicit(&d->faulted, memory_order_acquire)) return true;
  if (!dv_fault_hit(&d->faults[DV_FAULT_DEVICE])) return false;
  atomic_store_explicit(&d->faulted, true, memory_order_release); /* pairs: the acquire above */
  return true;
}
#define FAULTED(e, call)                  \
  if (device_faulted((e)->dev))           \
  return dv_fail(DEVRT_ERR_BACKEND_ERROR, \
                 call ": injected device fault (sticky: the device is lost)")

static devrt_status host_event_query(dv_event* e, bool* complete) {
  if (!e || !complete)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host event_query: event or out is NULL");
  FAULTED(e, "host event_query");
  pthread_mutex_lock(&e->mu);
  *complete = !e->s || fence_reached(e->s, e->target);
  pthread_mutex_unlock(&e->mu);
  return DEVRT_OK;
}

static devrt_status host_event_sync(dv_event* e) {
  if (!e) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host event_sync: event is NULL");
  FAULTED(e, "host event_sync");
  dv_stream* s;
  uint64_t target;
  if (!event_snapshot(e, &s, &target)) return DEVRT_OK;
  fence_wait(s, target);
  stream_unref(s);
  return DEVRT_OK;
}

static devrt_status host_host_func(dv_stream* s, devrt_host_fn fn, void* user, size_t copy) {
  if (!s || !fn) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host host_func: stream or fn is NULL");
  op* o = NULL;
  DV_CHECK(op_new(OP_FN, copy, "host host_func", &o));
  o->u.fn.fn = fn;
  o->u.fn.user = copy ? memcpy(o->args, user, copy) : user;
  return enqueue(s, o, "host host_func");
}

/* ---- memory ---- */

static devrt_status host_alloc(dv_dev* d, size_t size, uint32_t magic, const char* who,
                               void** out) {
  if (!out || size == 0)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: size %zu or out NULL", who, size);
  if (dv_fault_hit(&d->faults[DV_FAULT_ALLOC]))
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "%s: injected allocation fault (size %zu)", who,
                   size);
  size_t rounded = size > SIZE_MAX - 2 * HDR ? 0 : (size + HDR - 1) & ~(HDR - 1);
  unsigned char* base = rounded ? aligned_alloc(HDR, rounded + HDR) : NULL;
  if (!base)
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "%s: out of host memory (size %zu)", who, size);
  hdr* h = (hdr*)base;
  h->size = rounded;
  h->magic = magic;
  *out = base + HDR;
  return DEVRT_OK;
}

static devrt_status host_pool_alloc(dv_dev* d, size_t size, dv_stream* s, void** out) {
  (void)s; /* allocated at once: usable by everything ordered after this call */
  DV_CHECK(host_alloc(d, size, MAGIC_POOL, "host pool_alloc", out));
  dv_figure_add(&d->used, &d->high, header_of(*out)->size);
  return DEVRT_OK;
}

static devrt_status host_pool_free(dv_dev* d, void* p, dv_stream* s) {
  if (dv_fault_hit(&d->faults[DV_FAULT_FREE]))
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host pool_free: injected fault (ptr %p)", p);
  if (!p || !s) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host pool_free: ptr or stream is NULL");
  if (header_of(p)->magic != MAGIC_POOL)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host pool_free: %p is not a live pool allocation",
                   p);
  op* o = NULL;
  DV_CHECK(op_new(OP_FREE, 0, "host pool_free", &o));
  o->u.free.d = d;
  o->u.free.p = p;
  return enqueue(s, o, "host pool_free");
}

static devrt_status host_pool_stats(dv_dev* d, devrt_pool_stats* out) {
  if (!out) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host pool_stats: out is NULL");
  out->used_current = out->reserved_current = atomic_load_explicit(&d->used, memory_order_relaxed);
  out->used_high = out->reserved_high = atomic_load_explicit(&d->high, memory_order_relaxed);
  out->release_threshold = d->release_threshold;
  return DEVRT_OK;
}

static devrt_status host_pool_trim(dv_dev* d, size_t keep) {
  (void)d, (void)keep; /* nothing cached: freed blocks went back to libc */
  return DEVRT_OK;
}

static devrt_status host_pool_reset_high(dv_dev* d) {
  atomic_store_explicit(&d->high, atomic_load_explicit(&d->used, memory_order_relaxed),
                        memory_order_relaxed); /* figures only */
  return DEVRT_OK;
}

static devrt_status host_mem_alloc(dv_dev* d, size_t size, void** out) {
  return host_alloc(d, size, MAGIC_MEM, "host mem_alloc", out);
}

static devrt_status host_mem_free(dv_dev* d, void* p) {
  if (dv_fault_hit(&d->faults[DV_FAULT_FREE]))
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host mem_free: injected fault (ptr %p)", p);
  if (!p) return DEVRT_OK;
  hdr* h = header_of(p);
  if (h->magic != MAGIC_MEM)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host mem_free: %p is not a live mem_alloc block",
                   p);
  h->magic = 0;
  free(h);
  return DEVRT_OK;
}

static devrt_status host_memset_async(dv_stream* s, void* p, int byte, size_t size) {
  if (!s || (!p && size))
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host memset_async: stream or ptr is NULL");
  if (size == 0) return DEVRT_OK;
  op* o = NULL;
  DV_CHECK(op_new(OP_MEMSET, 0, "host memset_async", &o));
  o->u.set.p = p;
  o->u.set.byte = byte;
  o->u.set.size = size;
  return enqueue(s, o, "host memset_async");
}

static devrt_status host_memcpy_async(dv_stream* s, void* dst, const void* src, size_t size) {
  if (!s || ((!dst || !src) && size))
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host memcpy_async: stream, dst or src is NULL");
  if (size == 0) return DEVRT_OK;
  op* o = NULL;
  DV_CHECK(op_new(OP_MEMCPY, 0, "host memcpy_async", &o));
  o->u.cpy.dst = dst;
  o->u.cpy.src = src;
  o->u.cpy.size = size;
  return enqueue(s, o, "host memcpy_async");
}

/* ---- address ranges backed page by page: mmap'd, pages made accessible ---- */

#define VA_PAGE ((size_t)64 << 10)

static devrt_status host_va_page(dv_dev* d, size_t* out) {
  (void)d;
  if (!out) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host va_page: out is NULL");
  *out = VA_PAGE;
  return DEVRT_OK;
}

static devrt_status va_check(const void* p, size_t size, const char* who) {
  if (!p || !size || size % VA_PAGE || (uintptr_t)p % VA_PAGE)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: %p, %zu bytes: not whole pages of %zu", who, p,
                   size, VA_PAGE);
  return DEVRT_OK;
}

/* One page more than asked, so the range can start on a page: the rest goes back. */
static devrt_status host_va_reserve(dv_dev* d, size_t size, void** out) {
  (void)d;
  if (!out || !size || size % VA_PAGE || size > SIZE_MAX - VA_PAGE)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "host va_reserve: %zu bytes or out NULL: not whole pages of %zu", size, VA_PAGE);
  unsigned char* raw =
      mmap(NULL, size + VA_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED)
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "host va_reserve: mmap of %zu bytes: %s",
                   size + VA_PAGE, strerror(errno));
  size_t head = (VA_PAGE - (uintptr_t)raw % VA_PAGE) % VA_PAGE;
  if (head) munmap(raw, head);
  munmap(raw + head + size, VA_PAGE - head);
  *out = raw + head;
  return DEVRT_OK;
}

static void host_va_release(dv_dev* d, void* p, size_t size) {
  (void)d;
  if (p) munmap(p, size);
}

static devrt_status host_va_map(dv_dev* d, void* p, size_t size) {
  DV_CHECK(va_check(p, size, "host va_map"));
  if (dv_fault_hit(&d->faults[DV_FAULT_ALLOC]))
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "host va_map: injected allocation fault (%zu)",
                   size);
  if (mprotect(p, size, PROT_READ | PROT_WRITE)) {
    int e = errno;
    mprotect(p, size, PROT_NONE); /* a partial change undone */
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "host va_map: mprotect(%p, %zu): %s", p, size,
                   strerror(e));
  }
  dv_figure_add(&d->used, &d->high, size);
  return DEVRT_OK;
}

/* The memory goes back, and a stale access faults. */
static devrt_status host_va_unmap(dv_dev* d, void* p, size_t size) {
  DV_CHECK(va_check(p, size, "host va_unmap"));
  const char* call = madvise(p, size, MADV_DONTNEED) ? "madvise(MADV_DONTNEED)"
                     : mprotect(p, size, PROT_NONE)  ? "mprotect(PROT_NONE)"
                                                     : NULL;
  if (call)
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host va_unmap: %s of %p, %zu bytes: %s", call, p, size,
                   strerror(errno));
  atomic_fetch_sub_explicit(&d->used, size, memory_order_relaxed); /* a figure */
  return DEVRT_OK;
}

/* ---- modules and kernels ---- */

static devrt_status host_module_load(dv_dev* d, const void* image, dv_module** out) {
  (void)d;
  if (!out) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host module_load: out is NULL");
  if (image)
    return dv_fail(DEVRT_ERR_UNSUPPORTED, "host module_load: host backend loads no CUDA images");
  dv_module* m = malloc(sizeof *m);
  if (!m) return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host module_load: out of host memory");
  m->table = dv_host_kernels;
  m->count = dv_host_kernel_count;
  *out = m;
  return DEVRT_OK;
}

/* One allocation: the module, its copy of the table, then the names. */
static devrt_status host_module_load_host(dv_dev* d, const devrt_host_kernel* table, unsigned count,
                                          dv_module** out) {
  (void)d;
  size_t names = 0;
  for (unsigned i = 0; i < count; i++) names += strlen(table[i].name) + 1;
  dv_module* m = malloc(sizeof *m + count * sizeof *table + names);
  if (!m) return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host module_load_host: out of host memory");
  devrt_host_kernel* copy = memcpy(m + 1, table, count * sizeof *table);
  char* at = (char*)(copy + count);
  for (unsigned i = 0; i < count; i++) {
    size_t len = strlen(table[i].name) + 1;
    copy[i].name = memcpy(at, table[i].name, len);
    at += len;
  }
  m->table = copy;
  m->count = count;
  *out = m;
  return DEVRT_OK;
}

static void host_module_unload(dv_dev* d, dv_module* m) {
  (void)d;
  free(m);
}

static devrt_status host_kernel_get(dv_module* m, const char* name, dv_kernel** out) {
  if (!m || !name || !out)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host kernel_get: NULL argument");
  for (unsigned i = 0; i < m->count; i++)
    if (strcmp(m->table[i].name, name) == 0) {
      *out = (dv_kernel*)(uintptr_t)&m->table[i];
      return DEVRT_OK;
    }
  return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host kernel_get: no kernel named '%s'", name);
}

static devrt_status host_kernel_params(dv_kernel* k, unsigned max, unsigned* sizes, unsigned* n) {
  const dv_host_kernel_def* def = (const dv_host_kernel_def*)(const void*)k;
  if (def->nargs > max)
    return dv_fail(DEVRT_ERR_UNSUPPORTED, "host kernel_params: %s has %u parameters (at most %u)",
                   def->name, def->nargs, max);
  memcpy(sizes, def->arg_size, def->nargs * sizeof *sizes);
  *n = def->nargs;
  return DEVRT_OK;
}

static size_t arg_slot(unsigned size) { /* bytes an argument takes in the op, kept aligned */
  return (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
}

static devrt_status host_launch(dv_stream* s, dv_kernel* k, const unsigned g[3],
                                const unsigned b[3], unsigned shmem, void** args) {
  (void)shmem; /* blocks run on one thread: no shared memory to size */
  dv_dim3 grid = {g[0], g[1] + !g[1], g[2] + !g[2]}, block = {b[0], b[1] + !b[1], b[2] + !b[2]};
  const dv_host_kernel_def* def = (const dv_host_kernel_def*)(const void*)k;
  if (!s || !def)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host launch: stream or kernel is NULL");
  if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "host launch: %s: zero dimension (grid %ux%ux%u, block %ux%ux%u)", def->name,
                   grid.x, grid.y, grid.z, block.x, block.y, block.z);
  if (def->nargs > 8 || (def->nargs && !args))
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host launch: %s: args NULL or nargs %u > 8",
                   def->name, def->nargs);
  size_t bytes = 0;
  for (unsigned i = 0; i < def->nargs; i++) {
    if (!args[i])
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host launch: %s: args[%u] is NULL", def->name, i);
    bytes += arg_slot(def->arg_size[i]);
  }
  op* o = NULL;
  DV_CHECK(op_new(OP_LAUNCH, bytes, "host launch", &o));
  o->u.run.def = def;
  o->u.run.grid = grid;
  o->u.run.block = block;
  unsigned char* at = (unsigned char*)o->args;
  for (unsigned i = 0; i < def->nargs; i++) { /* copied now, like CUDA's kernelParams */
    memcpy(at, args[i], def->arg_size[i]);
    o->u.run.argv[i] = at;
    at += arg_slot(def->arg_size[i]);
  }
  return enqueue(s, o, "host launch");
}

/* ---- worker sets (green contexts) ---- */

/* A host SM resource: a bit set of worker ids, kept in dv_res's opaque bytes. */
#define MASK_WORDS 16 /* 1024 workers, the configuration's limit */
_Static_assert(MASK_WORDS * sizeof(uint64_t) <= sizeof(((dv_res*)0)->opaque),
               "dv_res holds a worker set");
static uint64_t* mask(dv_res* r) { return (uint64_t*)(void*)r->opaque; }
static bool has(const dv_res* r, unsigned w) {
  return ((const uint64_t*)(const void*)r->opaque)[w / 64] >> (w % 64) & 1;
}
static void add(dv_res* r, unsigned w) { mask(r)[w / 64] |= 1ull << (w % 64), r->sms++; }

static devrt_status host_sm_resource(dv_dev* d, dv_res* out) {
  memset(out, 0, sizeof *out);
  for (unsigned w = 0; w < d->workers; w++) add(out, w);
  out->splittable = true;
  return DEVRT_OK;
}

/* As CUDA's split by count, with a minimum partition and an alignment of 1: up to *n groups
 * of max(min_sms, 1) workers in id order, the rest in rem. */
static devrt_status host_sm_split(dv_dev* d, const dv_res* in, unsigned min_sms, unsigned flags,
                                  dv_res* groups, unsigned* n, dv_res* rem) {
  (void)flags;
  if (!in->splittable)
    return dv_fail(
        DEVRT_ERR_INVALID_ARGUMENT,
        "host split: a split output must become a green context before it is split again");
  unsigned size = min_sms ? min_sms : 1;
  if (size > in->sms)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "host split: %u workers asked of %u", size, in->sms);
  unsigned fit = in->sms / size;
  *n = groups && *n < fit ? *n : fit;
  memset(rem, 0, sizeof *rem);
  if (groups) memset(groups, 0, *n * sizeof *groups);
  for (unsigned w = 0, k = 0; w < d->workers; w++) {
    if (!has(in, w)) continue;
    if (k >= *n * size)
      add(rem, w);
    else if (groups)
      add(&groups[k / size], w);
    k++;
  }
  return DEVRT_OK;
}

static devrt_status host_green_create(dv_dev* d, const dv_res* res, unsigned n, dv_green** out) {
  if (dv_fault_hit(&d->faults[DV_FAULT_GREEN]))
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   "host green_create: injected refusal (as a virtual GPU or MPS gives)");
  unsigned total = 0;
  for (unsigned i = 0; i < n; i++) total += res[i].sms;
  dv_green* g = calloc(1, sizeof *g + total * sizeof g->ids[0]);
  if (!g) return dv_fail(DEVRT_ERR_BACKEND_ERROR, "host green_create: out of host memory");
  for (unsigned w = 0; w < d->workers; w++)
    for (unsigned i = 0; i < n; i++)
      if (has(&res[i], w)) g->ids[g->n++] = (unsigned short)w;
  *out = g;
  return DEVRT_OK;
}

static devrt_status host_green_resource(dv_green* g, dv_res* out) {
  memset(out, 0, sizeof *out);
  for (unsigned i = 0; i < g->n; i++) add(out, g->ids[i]);
  out->splittable = true;
  return DEVRT_OK;
}

static void host_green_destroy(dv_dev* d, dv_green* g) {
  (void)d;
  free(g);
}

static void host_fault_arm(dv_dev* d, dv_fault_op which, unsigned nth) {
  if ((unsigned)which < DV_FAULT_OPS_) /* a countdown: see dv_fault_hit */
    atomic_store_explicit(&d->faults[which], nth, memory_order_relaxed);
}

/* ---- several devices: one address space, so every host device reaches every other ---- */

static devrt_status host_peer_query(dv_dev* a, dv_dev* b, devrt_peer_info* out) {
  memset(out, 0, sizeof *out);
  out->same_device = a->ordinal == b->ordinal;
  out->can_access = out->native_atomics = true;
  out->performance_rank = -1;
  snprintf(out->link, sizeof out->link, "%s", out->same_device ? "same device" : "host memory");
  return DEVRT_OK;
}

static devrt_status host_peer_enable(dv_dev* a, dv_dev* b) {
  (void)a, (void)b;
  return DEVRT_OK;
}

static void host_peer_disable(dv_dev* a, dv_dev* b) { (void)a, (void)b; }

static devrt_status host_memcpy_peer(dv_stream* s, void* dst, dv_dev* dd, const void* src,
                                     dv_dev* sd, size_t size) {
  (void)dd, (void)sd;
  return host_memcpy_async(s, dst, src, size);
}

static devrt_status host_device_enter(dv_dev* d) {
  (void)d;
  return DEVRT_OK;
}

static void host_device_leave(dv_dev* d) { (void)d; }

const dv_backend dv_host_backend = {
    .name = "host",
    .device_count = host_device_count,
    .device_open = host_device_open,
    .device_close = host_device_close,
    .device_info = host_device_info,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_wrap = host_stream_wrap,
    .stream_unwrap = host_stream_unwrap,
    .stream_legacy = host_stream_legacy,
    .stream_sync_native = host_stream_sync_native,
    .stream_sync = host_stream_sync,
    .stream_native = host_stream_native,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .stream_wait = host_stream_wait,
    .event_query = host_event_query,
    .event_sync = host_event_sync,
    .host_func = host_host_func,
    .pool_alloc = host_pool_alloc,
    .pool_free = host_pool_free,
    .pool_stats = host_pool_stats,
    .pool_trim = host_pool_trim,
    .pool_reset_high = host_pool_reset_high,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .memset_async = host_memset_async,
    .memcpy_async = host_memcpy_async,
    .va_page = host_va_page,
    .va_reserve = host_va_reserve,
    .va_release = host_va_release,
    .va_map = host_va_map,
    .va_unmap = host_va_unmap,
    .module_load = host_module_load,
    .module_load_host = host_module_load_host,
    .module_unload = host_module_unload,
    .kernel_get = host_kernel_get,
    .launch = host_launch,
    .kernel_params = host_kernel_params,
    .sm_resource = host_sm_resource,
    .sm_split = host_sm_split,
    .green_create = host_green_create,
    .green_resource = host_green_resource,
    .green_destroy = host_green_destroy,
    .fault_arm = host_fault_arm,
    .peer_query = host_peer_query,
    .peer_enable = host_peer_enable,
    .peer_disable = host_peer_disable,
    .memcpy_peer = host_memcpy_peer,
    .device_enter = host_device_enter,
    .device_leave = host_device_leave,
    .capture_begin = host_capture_begin,
    .capture_end = host_capture_end,
    .stream_capturing = host_stream_capturing,
    .capture_mode_swap = host_capture_mode_swap,
    .graph_launch = host_graph_launch,
    .graph_destroy = host_graph_destroy,
};
