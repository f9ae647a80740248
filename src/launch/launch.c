/* launch.c: modules and kernels (devrt's embedded ones or a user's image), and recorded launches:
 * validate, pin the blocks and gather the waits (block.c checks and dedups the uses), issue them,
 * launch (or run the caller's enqueue), mark one point for every block (recorded lazily), reap. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "launch.h"

#define MODULE_MAGIC 0x6d6f64756c65ull /* "module" */
#define KERNEL_MAGIC 0x6b65726e656cull /* "kernel" */
#define REAP_EVERY 128                 /* launches of a thread between opportunistic reaps */

#define MAX_PARAMS 32u
#define NO_PARAMS UINT32_MAX /* the backend cannot tell the parameters' sizes */

struct devrt_kernel {
  _Atomic uint64_t magic;
  devrt_runtime* rt; /* its module's: a launch checks it without reading the module */
  devrt_module* module;
  dv_kernel* k;
  unsigned nparams, param_size[MAX_PARAMS]; /* for copies of the arguments of deferred launches */
  struct devrt_kernel* next;
  char name[];
};

struct devrt_module {
  _Atomic uint64_t magic;
  devrt_runtime* rt;
  dv_module* m;
  pthread_mutex_t mu;
  devrt_kernel* kernels;
};

/* The module of a backend module just loaded (st: how its load went). */
static devrt_status module_new(devrt_runtime* rt, devrt_status st, dv_module* dm,
                               devrt_module** out) {
  if (st != DEVRT_OK) return st;
  devrt_module* m = calloc(1, sizeof *m);
  if (!m) {
    rt->be->module_unload(rt->dev, dm);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_module_load: out of host memory");
  }
  m->rt = rt, m->m = dm;
  pthread_mutex_init(&m->mu, NULL);
  atomic_store_explicit(&m->magic, MODULE_MAGIC, memory_order_relaxed); /* read relaxed: a check */
  *out = m;
  return DEVRT_OK;
}

devrt_status devrt_module_load(devrt_runtime* rt, const void* image, devrt_module** out) {
  DV_RT_CHECK(rt, "devrt_module_load");
  DV_ARG_CHECK(out, "devrt_module_load", "out is NULL");
  dv_module* dm = NULL;
  devrt_status st = rt->be->module_load(rt->dev, image, &dm);
  return module_new(rt, st, dm, out);
}

/* The first thing wrong with entry i of a host kernel table, or NULL. */
static const char* bad_host_kernel(const devrt_host_kernel* t, unsigned i) {
  if (!t[i].name || !t[i].name[0]) return "has no name";
  if (!t[i].fn) return "has no function";
  if (t[i].nargs > DEVRT_HOST_KERNEL_MAX_ARGS) return "has more than 8 arguments";
  for (unsigned a = 0; a < t[i].nargs; a++)
    if (t[i].arg_size[a] == 0 || t[i].arg_size[a] > 256) return "has an argument size of 0 or >256";
  for (unsigned j = 0; j < i; j++)
    if (!strcmp(t[j].name, t[i].name)) return "repeats an earlier entry's name";
  return NULL;
}

devrt_status devrt_module_load_host(devrt_runtime* rt, const devrt_host_kernel* table,
                                    unsigned count, devrt_module** out) {
  DV_RT_CHECK(rt, "devrt_module_load_host");
  DV_ARG_CHECK(table && out, "devrt_module_load_host", "table or out is NULL");
  DV_ARG_CHECK(count >= 1 && count <= DEVRT_HOST_MODULE_MAX_KERNELS, "devrt_module_load_host",
               "count %u is outside 1..%u", count, DEVRT_HOST_MODULE_MAX_KERNELS);
  for (unsigned i = 0; i < count; i++) {
    const char* why = bad_host_kernel(table, i);
    DV_ARG_CHECK(!why, "devrt_module_load_host", "entry %u (%s) %s", i,
                 table[i].name ? table[i].name : "NULL", why);
  }
  if (!rt->be->module_load_host)
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   "devrt_module_load_host: the %s backend runs no host kernels (load the "
                   "kernels' CUDA image with devrt_module_load)",
                   rt->be->name);
  dv_module* dm = NULL;
  devrt_status st = rt->be->module_load_host(rt->dev, table, count, &dm);
  return module_new(rt, st, dm, out);
}

static bool module_ok(devrt_module* m) {
  return m && atomic_load_explicit(&m->magic, memory_order_relaxed) == MODULE_MAGIC;
}

devrt_status devrt_module_unload(devrt_runtime* rt, devrt_module* m) {
  DV_RT_CHECK(rt, "devrt_module_unload");
  DV_ARG_CHECK(module_ok(m), "devrt_module_unload", "module %p is NULL or unloaded", (void*)m);
  DV_ARG_CHECK(m->rt == rt, "devrt_module_unload", "module %p belongs to another runtime",
               (void*)m);
  atomic_store_explicit(&m->magic, 0, memory_order_relaxed);
  for (devrt_kernel *k = m->kernels, *nx; k; k = nx) {
    nx = k->next;
    atomic_store_explicit(&k->magic, 0, memory_order_relaxed);
    free(k);
  }
  rt->be->module_unload(rt->dev, m->m);
  pthread_mutex_destroy(&m->mu);
  free(m);
  return DEVRT_OK;
}

devrt_status devrt_kernel_get(devrt_module* m, const char* name, devrt_kernel** out) {
  DV_ARG_CHECK(module_ok(m), "devrt_kernel_get", "module %p is NULL or unloaded", (void*)m);
  DV_ARG_CHECK(name && *name && out, "devrt_kernel_get", "name or out is NULL or empty");
  pthread_mutex_lock(&m->mu);
  devrt_kernel* k = m->kernels;
  while (k && strcmp(k->name, name)) k = k->next;
  devrt_status st = DEVRT_OK;
  dv_kernel* dk = NULL;
  if (!k && (st = m->rt->be->kernel_get(m->m, name, &dk)) == DEVRT_OK) {
    size_t len = strlen(name) + 1;
    if ((k = malloc(sizeof *k + len)) != NULL) {
      atomic_init(&k->magic, KERNEL_MAGIC);
      k->rt = m->rt, k->module = m, k->k = dk, k->next = m->kernels;
      /* UNSUPPORTED: the driver cannot tell (only parked launches need it); any other failure
       * is the driver's error, reported now rather than remembered as "cannot tell" */
      st = m->rt->be->kernel_params(dk, MAX_PARAMS, k->param_size, &k->nparams);
      if (st == DEVRT_ERR_UNSUPPORTED) {
        k->nparams = NO_PARAMS, st = DEVRT_OK;
        dv_error_clear(); /* the call succeeds */
      }
      memcpy(k->name, name, len);
      if (st == DEVRT_OK)
        m->kernels = k;
      else
        free(k);
    } else {
      st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_kernel_get: out of host memory");
    }
  }
  pthread_mutex_unlock(&m->mu);
  if (st == DEVRT_OK) *out = k;
  return st;
}

DV_COLD static devrt_status refuse(devrt_runtime* rt, devrt_status st) {
  atomic_fetch_add_explicit(&rt->refused_launches, 1, memory_order_relaxed);
  return st;
}

/* CUDA's limits on a launch's shape, which the host backend must refuse as the GPU would: code
 * that passes on the host backend is not refused by the GPU for its shape. */
static DV_NOINLINE DV_COLD devrt_status bad_shape(const devrt_launch_desc* d) {
  const unsigned *g = d->grid, *b = d->block;
  return dv_fail(
      DEVRT_ERR_INVALID_ARGUMENT,
      "devrt_launch: kernel %s: grid {%u, %u, %u} or block {%u, %u, %u} is outside CUDA's "
      "limits (grid x 1..2^31-1, y and z up to 65535; block x and y up to 1024, z up to "
      "64, at most 1024 threads; 0 in y or z means 1)",
      d->kernel->name, g[0], g[1], g[2], b[0], b[1], b[2]);
}

static DV_INLINE bool shape_ok(const unsigned* g, const unsigned* b) {
  uint64_t threads = (uint64_t)b[0] * (b[1] ? b[1] : 1) * (b[2] ? b[2] : 1);
  return g[0] >= 1 && g[0] <= 0x7fffffffu && g[1] <= 65535 && g[2] <= 65535 && b[0] >= 1 &&
         b[0] <= 1024 && b[1] <= 1024 && b[2] <= 64 && threads <= 1024;
}

/* What can be checked of a launch before touching a block or a stream, but its uses' accesses. */
static DV_INLINE devrt_status head_check(devrt_runtime* rt, const devrt_launch_desc* d) {
  DV_ARG_CHECK(!d->kernel != !d->enqueue, "devrt_launch",
               "give exactly one of kernel %p and enqueue", (void*)d->kernel);
  if (d->kernel) {
    devrt_kernel* k = d->kernel;
    DV_ARG_CHECK(atomic_load_explicit(&k->magic, memory_order_relaxed) == KERNEL_MAGIC,
                 "devrt_launch", "kernel %p is not a kernel, or its module was unloaded", (void*)k);
    DV_ARG_CHECK(k->rt == rt, "devrt_launch", "kernel %s belongs to another runtime", k->name);
    if (DV_UNLIKELY(!shape_ok(d->grid, d->block))) return bad_shape(d);
  }
  DV_ARG_CHECK(d->nuses <= DEVRT_LAUNCH_MAX_USES && (d->uses || !d->nuses), "devrt_launch",
               "%u uses (at most %u) at %p", d->nuses, DEVRT_LAUNCH_MAX_USES, (const void*)d->uses);
  return DEVRT_OK;
}

devrt_status dv_launch_check(devrt_runtime* rt, const devrt_launch_desc* d) {
  DV_CHECK(head_check(rt, d));
  return dv_uses_check(d->uses, d->nuses, "devrt_launch");
}

DV_HOT static devrt_status run(devrt_runtime* rt, const devrt_launch_desc* d, devrt_stream id,
                               dv_stream* s, dv_graph* graph) {
  if (graph) return rt->be->graph_launch(graph, s);
  if (d->enqueue) {
    dv_in_enqueue++; /* the launch's blocks are pinned meanwhile: a free here must not wait */
    devrt_status st = d->enqueue(d->user, id, rt->be->stream_native(s));
    dv_in_enqueue--;
    return st;
  }
  return rt->be->launch(s, d->kernel->k, d->grid, d->block, d->shared_bytes, d->args);
}

static size_t arg_slot(unsigned size) { return (size + 15u) & ~(size_t)15u; }

const char* dv_launch_name(const devrt_launch_desc* d) {
  return d->kernel ? d->kernel->name : "foreign work (enqueue)";
}

devrt_status dv_launch_args_size(const devrt_launch_desc* d, unsigned* nargs, size_t* bytes) {
  *bytes = 0, *nargs = 0;
  if (!d->kernel) return DEVRT_OK;
  const devrt_kernel* k = d->kernel;
  if (k->nparams == NO_PARAMS)
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   "kernel %s: the driver cannot report its parameter sizes, so its arguments "
                   "cannot be copied for a deferred launch",
                   k->name);
  if (k->nparams && !d->args)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "kernel %s takes %u arguments; args is NULL",
                   k->name, k->nparams);
  for (unsigned i = 0; i < k->nparams; i++) {
    if (!d->args[i])
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "kernel %s: args[%u] is NULL", k->name, i);
    *bytes += arg_slot(k->param_size[i]);
  }
  *nargs = k->nparams;
  return DEVRT_OK;
}

void dv_launch_args_copy(const devrt_launch_desc* d, void** ptrs, unsigned char* data) {
  const devrt_kernel* k = d->kernel;
  for (unsigned i = 0; k && i < k->nparams; data += arg_slot(k->param_size[i]), i++) {
    memcpy(data, d->args[i], k->param_size[i]);
    ptrs[i] = data;
  }
}

DV_FLATTEN DV_HOT devrt_status dv_launch_issue(devrt_runtime* rt, const devrt_launch_desc* d,
                                               devrt_stream id, dv_stream* s, dv_graph* graph,
                                               dv_pev** out) {
  unsigned slot = DV_SID_SLOT(id);
  dv_work k; /* the uses as given: the repeat and group paths match them against checked lists */
  devrt_status st =
      dv_work_init(&k, rt, slot, graph ? "devrt_graph_launch" : "devrt_launch", d->uses, d->nuses);
  if (DV_UNLIKELY(st != DEVRT_OK)) return refuse(rt, st);
  /* The previous launch's uses again: no waits, its mark moves on. Not for a caller's enqueue,
   * which could call devrt_block_free, which waits for repeats in flight. */
  if (!out && !d->enqueue && dv_repeat_try(&k)) {
    st = run(rt, d, id, s, graph);
    devrt_status end = dv_repeat_end(&k, st == DEVRT_OK);
    if ((st = st != DEVRT_OK ? st : end) != DEVRT_OK) return st;
    goto done;
  }
  k.of = dv_slot_last(rt, slot);
  st = dv_uses_pin(&k);
  if (DV_UNLIKELY(st != DEVRT_OK)) return refuse(rt, st);
  /* The slot's previous mark is recorded here, before this launch, only if something this launch
   * does not overwrite still refers to it; then the waits, the work, and this launch's own mark. */
  st = dv_waits_issue(&k, s);
  if (st == DEVRT_OK) st = run(rt, d, id, s, graph);
  k.c.launches = st == DEVRT_OK;
  dv_pev *ev = NULL, *old = NULL;
  if (st == DEVRT_OK && (k.x.n || out)) { /* no blocks: nothing to mark */
    st = dv_pev_mark(rt, slot, &ev, &old, &k.c);
    if (st == DEVRT_OK && out && (st = dv_pev_realize(rt, ev, NULL)) != DEVRT_OK)
      dv_pev_unref(rt, ev), ev = NULL;
    if (DV_UNLIKELY(st != DEVRT_OK))
      rt->be->stream_sync(s); /* untracked work: let it finish before others use the blocks */
  } else {
    dv_counts_flush(rt, slot, &k.c);
  }
  bool grouped = k.how.g != NULL;
  uint32_t gain = dv_uses_finish(&k, ev, old, !out); /* the blocks keep ev (or out does) */
  if (out) *out = ev;
  if (st != DEVRT_OK) return st;
  if (!out && !grouped && !k.x.peer) dv_repeat_save(&k, ev, gain);
done:;
  static _Thread_local unsigned launches; /* this thread's: no shared word for the count */
  if (DV_UNLIKELY(++launches % REAP_EVERY == 0) &&
      atomic_load_explicit(&rt->stack, memory_order_relaxed))
    if (devrt_reap_pending(rt, 0, NULL) != DEVRT_OK) /* opportunistic: a failure here */
      dv_error_clear();                              /* belongs to no launch */
  return DEVRT_OK;
}

/* A launch on a stream the calling thread captures: its uses join the capture's, and the work is
 * recorded on the capture's stream (devrt/graph.h): no wait, mark or reap. */
static DV_NOINLINE devrt_status captured(devrt_runtime* rt, const devrt_launch_desc* d,
                                         dv_capture* cap, dv_stream* s) {
  devrt_status st = dv_uses_check(d->uses, d->nuses, "devrt_launch");
  if (st == DEVRT_OK) st = dv_capture_add(rt, cap, d->uses, d->nuses, "devrt_launch");
  if (st == DEVRT_OK) st = run(rt, d, d->stream, s, NULL);
  if (st == DEVRT_OK) cap->launches++;
  return st;
}

DV_HOT devrt_status devrt_launch(devrt_runtime* rt, const devrt_launch_desc* d) {
  DV_RT_CHECK(rt, "devrt_launch");
  if (!d) return refuse(rt, dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "devrt_launch: desc is NULL"));
  devrt_status st = head_check(rt, d);
  if (st != DEVRT_OK) return refuse(rt, st);
  dv_stream* s = NULL;
  if (d->stream) {
    dv_capture* cap = NULL;
    if ((st = dv_stream_or_capture(rt, d->stream, &s, &cap, "devrt_launch")) != DEVRT_OK)
      return refuse(rt, st);
    if (DV_UNLIKELY(cap)) return captured(rt, d, cap, s);
    return dv_launch_issue(rt, d, d->stream, s, NULL, NULL);
  }
  devrt_stream id = 0;
  if ((st = devrt_stream_acquire(rt, DEVRT_ACQUIRE_SHARE, &id)) != DEVRT_OK) return refuse(rt, st);
  if ((st = dv_stream_get(rt, id, &s, "devrt_launch")) == DEVRT_OK)
    st = dv_launch_issue(rt, d, id, s, NULL, NULL);
  DV_KEEP_ERROR(devrt_stream_release(rt, id));
  return st;
}
