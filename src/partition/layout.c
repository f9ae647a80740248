/* layout.c: partitions of one device. A layout is built from one SM split (or, for uneven
 * sizes on drivers before 13.1, a chain of splits that peels one group at a time off the
 * remainder), so its partitions are pairwise disjoint; each is a green context with its own
 * stream pool and a sub-budget under the device budget. Also: plans (the driver's dry run),
 * the plain-stream fallback, and the active layout that the runtime's default streams use. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "partition.h"
#include "../memory/account.h"
#include "../core/clock.h"
#ifdef DEVRT_HAVE_CUDA
#include <cuda.h>
#define BUILT_CUDA CUDA_VERSION
#else
#define BUILT_CUDA 0
#endif

struct devrt_partition {
  devrt_layout* layout;
  unsigned index, sms;
  bool remainder;
  dv_green* green; /* NULL: plain streams on the primary context */
  dv_pool pool;
  devrt_resource* budget;
};

struct devrt_layout {
  devrt_layout* next;    /* the runtime's list, under dv_layouts.mu */
  _Atomic unsigned busy; /* acquires in flight on its pools (raised under dv_layouts.mu) */
  unsigned flags;
  devrt_layout_plan plan;
  double create_ms;
  devrt_partition parts[];
};

typedef struct dv_layouts {
  pthread_mutex_t mu;
  devrt_layout* list;
  _Atomic(devrt_layout*) active;
  uint64_t created, fallbacks, plain; /* under mu */
} dv_layouts;

#define DEFAULT_STREAMS 4

/* ---- runtime hooks ---- */

devrt_status dv_layouts_init(devrt_runtime* rt) {
  dv_layouts* l = calloc(1, sizeof *l);
  if (!l) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_runtime: out of host memory (layouts)");
  pthread_mutex_init(&l->mu, NULL);
  rt->layouts = l;
  return DEVRT_OK;
}

void dv_layouts_fini(devrt_runtime* rt) {
  pthread_mutex_destroy(&rt->layouts->mu);
  free(rt->layouts);
}

devrt_status dv_layouts_check_none(devrt_runtime* rt, const char* call) {
  pthread_mutex_lock(&rt->layouts->mu);
  bool any = rt->layouts->list != NULL;
  pthread_mutex_unlock(&rt->layouts->mu);
  if (any)
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "%s: layouts of this runtime are alive (devrt_layout_destroy them first)", call);
  return DEVRT_OK;
}

devrt_status dv_stream_resource(devrt_runtime* rt, devrt_stream stream, devrt_resource** out) {
  dv_pool* p = rt->slots[DV_SID_SLOT(stream)].pool; /* the stream is held: its pool stays */
  if (p && p->part) {
    *out = p->part->budget;
    return DEVRT_OK;
  }
  return devrt_runtime_resource(rt, out);
}

/* ---- handles ---- */

/* The layout, if it is one of rt's live layouts (mu held). */
static bool live(dv_layouts* l, const devrt_layout* x) {
  for (devrt_layout* y = l->list; y; y = y->next)
    if (y == x) return true;
  return false;
}

/* The partition's layout, if p is a partition of one of rt's live layouts (mu held). */
static devrt_layout* owner(dv_layouts* l, const devrt_partition* p) {
  for (devrt_layout* y = l->list; y; y = y->next)
    if (p >= y->parts && p < y->parts + y->plan.partitions) return y;
  return NULL;
}

#define LOCKED_LAYOUT(rt, layout, call)                                                          \
  DV_RT_CHECK(rt, call);                                                                         \
  dv_layouts* L_ = (rt)->layouts;                                                                \
  pthread_mutex_lock(&L_->mu);                                                                   \
  if (!live(L_, layout)) {                                                                       \
    pthread_mutex_unlock(&L_->mu);                                                               \
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,                                                   \
                   call ": layout %p is NULL, destroyed or another runtime's", (void*)(layout)); \
  }

#define LOCKED_PARTITION(rt, p, call)                                                         \
  DV_RT_CHECK(rt, call);                                                                      \
  dv_layouts* L_ = (rt)->layouts;                                                             \
  pthread_mutex_lock(&L_->mu);                                                                \
  devrt_layout* owner_ = owner(L_, p);                                                        \
  if (!owner_) {                                                                              \
    pthread_mutex_unlock(&L_->mu);                                                            \
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,                                                \
                   call ": partition %p is NULL, of a destroyed layout or another runtime's", \
                   (void*)(p));                                                               \
  }

/* ---- specs and plans ---- */

static devrt_status check_spec(devrt_runtime* rt, const devrt_layout_spec* s, const char* call) {
  if (!s) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: spec is NULL", call);
  const unsigned known = DEVRT_LAYOUT_IGNORE_COSCHEDULING | DEVRT_LAYOUT_ALLOW_FALLBACK |
                         DEVRT_LAYOUT_PLAIN_STREAMS | DEVRT_LAYOUT_WORKQUEUE_BALANCED;
  bool uneven = s->sm_counts || s->count;
  if (s->flags & ~known)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: unknown flags 0x%x", call, s->flags & ~known);
  if (uneven && (!s->sm_counts || !s->count || s->groups || s->min_sms))
    return dv_fail(
        DEVRT_ERR_INVALID_ARGUMENT,
        "%s: give either groups/min_sms (even) or sm_counts with count > 0 (uneven), not both",
        call);
  unsigned asked = uneven ? s->count : s->groups;
  if (asked > DEVRT_MAX_PARTITIONS - 1)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "%s: %u partitions asked, at most %d (one more for the remainder)", call, asked,
                   DEVRT_MAX_PARTITIONS - 1);
  for (unsigned i = 0; uneven && i < s->count; i++)
    if (!s->sm_counts[i])
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: sm_counts[%u] is 0", call, i);
  if ((unsigned)s->remainder > DEVRT_REMAINDER_IDLE)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: unknown remainder policy %d", call,
                   (int)s->remainder);
  if (s->streams > rt->cfg.partition_streams)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "%s: %u streams per partition, but only %u slots are kept for partitions "
                   "(DEVRT_PARTITION_STREAMS)",
                   call, s->streams, rt->cfg.partition_streams);
  for (unsigned i = 0; s->priorities && i < asked; i++)
    if (s->priorities[i] > rt->info.priority_least || s->priorities[i] < rt->info.priority_greatest)
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                     "%s: priorities[%u] = %d outside the device's range [%d, %d]", call, i,
                     s->priorities[i], rt->info.priority_greatest, rt->info.priority_least);
  if (s->flags & DEVRT_LAYOUT_WORKQUEUE_BALANCED)
    return dv_fail(
        DEVRT_ERR_UNSUPPORTED,
        "%s: workqueue configs need a CUDA 13.1 driver and a devrt built against 13.1 headers "
        "(driver %d, built against %d)",
        call, rt->info.driver_version, BUILT_CUDA);
  return DEVRT_OK;
}

/* Turns a plan into plain streams on the primary context: the same partitions, each on every SM. */
static void plainify(devrt_layout_plan* p, const char* why) {
  for (unsigned i = 0; i < p->partitions; i++) p->sm_counts[i] = p->device_sms;
  p->isolated = false;
  p->idle_sms = 0;
  snprintf(p->fallback_reason, sizeof p->fallback_reason, "%s", why);
}

/* Plain streams where no split can be asked for: the requested partitions, plus one for the
 * remainder under DEVRT_REMAINDER_PARTITION (so the catch-all is where it would be). */
static devrt_status plain_plan(devrt_runtime* rt, const devrt_layout_spec* s, const char* why,
                               devrt_layout_plan* p) {
  unsigned sms = (unsigned)rt->info.sm_count, min = s->min_sms ? s->min_sms : 1;
  unsigned n = s->count ? s->count : s->groups ? s->groups : sms / min;
  if (n > DEVRT_MAX_PARTITIONS - 1) n = DEVRT_MAX_PARTITIONS - 1;
  if (!n)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "layout: groups of %u SMs, but the device has %u",
                   min, sms);
  memset(p, 0, sizeof *p);
  p->remainder_partition = s->remainder == DEVRT_REMAINDER_PARTITION;
  p->partitions = n + p->remainder_partition;
  p->device_sms = sms;
  p->catch_all = p->partitions - 1;
  plainify(p, why);
  return DEVRT_OK;
}

/* The split a layout is built from: groups (one per requested partition), the remainder, and
 * the temporary green contexts an uneven layout was peeled through (peel). */
typedef struct split {
  dv_res dev, groups[DEVRT_MAX_PARTITIONS], rem;
  unsigned n;
  dv_green* temps[DEVRT_MAX_PARTITIONS];
  unsigned ntemps;
} split;

static void split_free(devrt_runtime* rt, split* x) {
  while (x->ntemps) rt->be->green_destroy(rt->dev, x->temps[--x->ntemps]);
}

/* The driver's split for spec: even, the one split (its groups are the partitions'); uneven,
 * each group as the driver rounds it on the whole device and what is left (a plan: see peel). */
static devrt_status do_split(devrt_runtime* rt, const devrt_layout_spec* s, split* x,
                             const char* call) {
  unsigned f = (s->flags & DEVRT_LAYOUT_IGNORE_COSCHEDULING) ? DEVRT_SPLIT_IGNORE_COSCHEDULING : 0;
  const dv_backend* be = rt->be;
  DV_CHECK(be->sm_resource(rt->dev, &x->dev));
  if (!s->count) { /* even: one split */
    if (s->min_sms > x->dev.sms)
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: groups of %u SMs asked, the device has %u",
                     call, s->min_sms, x->dev.sms);
    unsigned n = s->groups;
    if (!n)
      DV_CHECK(
          be->sm_split(rt->dev, &x->dev, s->min_sms, f, NULL, &n, &x->rem)); /* as many as fit */
    if (n > DEVRT_MAX_PARTITIONS - 1) n = DEVRT_MAX_PARTITIONS - 1;
    if (!n)
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: no group of %u SMs fits the device's %u",
                     call, s->min_sms, x->dev.sms);
    x->n = n;
    DV_CHECK(be->sm_split(rt->dev, &x->dev, s->min_sms, f, x->groups, &x->n, &x->rem));
    if (s->groups && x->n < s->groups)
      return dv_fail(
          DEVRT_ERR_OUT_OF_RESOURCES,
          "%s: %u groups of at least %u SMs asked; the driver gives %u of %u SMs (device %u SMs)",
          call, s->groups, s->min_sms, x->n, x->n ? x->groups[0].sms : 0, x->dev.sms);
    return DEVRT_OK;
  }
  unsigned total = 0;
  for (unsigned i = 0; i < s->count; i++) { /* each group as the driver rounds it */
    unsigned one = 1;
    if (s->sm_counts[i] > x->dev.sms)
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: sm_counts[%u] = %u, the device has %u SMs",
                     call, i, s->sm_counts[i], x->dev.sms);
    DV_CHECK(be->sm_split(rt->dev, &x->dev, s->sm_counts[i], f, &x->groups[i], &one, &x->rem));
    total += x->groups[i].sms;
  }
  x->n = s->count;
  if (total > x->dev.sms)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "%s: the groups round up to %u SMs, the device has %u", call, total, x->dev.sms);
  x->rem.sms = x->dev.sms - total;
  return DEVRT_OK;
}

/* Makes an uneven plan's groups real and disjoint: splits each off what the previous step left,
 * through a temporary green context on that remainder (a split output cannot be split directly).
 * One group needs no peeling: the plan's split of the device is already group and remainder. A
 * green context's resource can round finer than the device's (a 12-SM request gave 12 on the
 * remainder of an H100, 16 on the whole device): each step asks for the size the plan gave. */
static devrt_status peel(devrt_runtime* rt, const devrt_layout_spec* s, split* x) {
  unsigned f = (s->flags & DEVRT_LAYOUT_IGNORE_COSCHEDULING) ? DEVRT_SPLIT_IGNORE_COSCHEDULING : 0;
  dv_res from = x->dev;
  for (unsigned i = 0; s->count > 1 && i < s->count; i++) {
    unsigned one = 1, want = x->groups[i].sms;
    DV_CHECK(rt->be->sm_split(rt->dev, &from, want, f, &x->groups[i], &one, &x->rem));
    if (i + 1 == s->count) break;
    DV_CHECK(rt->be->green_create(rt->dev, &x->rem, 1, &x->temps[x->ntemps]));
    DV_CHECK(rt->be->green_resource(x->temps[x->ntemps++], &from));
  }
  return DEVRT_OK;
}

static void fill_plan(const devrt_layout_spec* s, const split* x, devrt_layout_plan* p) {
  memset(p, 0, sizeof *p);
  p->device_sms = x->dev.sms;
  p->isolated = true;
  for (unsigned i = 0; i < x->n; i++) p->sm_counts[i] = x->groups[i].sms;
  p->partitions = x->n;
  if (x->rem.sms && s->remainder == DEVRT_REMAINDER_MERGE && x->n)
    p->sm_counts[x->n - 1] += x->rem.sms;
  if (x->rem.sms && s->remainder == DEVRT_REMAINDER_PARTITION)
    p->sm_counts[p->partitions++] = x->rem.sms, p->remainder_partition = true;
  if (s->remainder == DEVRT_REMAINDER_IDLE) p->idle_sms = x->rem.sms;
  p->catch_all = p->partitions ? p->partitions - 1 : 0;
}

static bool want_plain(const devrt_layout_spec* s) { return s->flags & DEVRT_LAYOUT_PLAIN_STREAMS; }

static const char plain_requested[] = "plain streams requested (DEVRT_LAYOUT_PLAIN_STREAMS)";

/* The plan for spec; *fallback set when it falls back to plain streams. x gets the split an
 * isolated plan was made from. */
static devrt_status plan(devrt_runtime* rt, const devrt_layout_spec* s, devrt_layout_plan* p,
                         bool* fallback, split* x, const char* call) {
  *fallback = false;
  DV_CHECK(check_spec(rt, s, call));
  if (!rt->info.green_contexts) {
    if (want_plain(s)) return plain_plan(rt, s, plain_requested, p);
    char why[160];
    snprintf(why, sizeof why, "no green contexts on device %d (%.80s, driver %d)", rt->cfg.ordinal,
             rt->info.name, rt->info.driver_version);
    if (!(s->flags & DEVRT_LAYOUT_ALLOW_FALLBACK))
      return dv_fail(DEVRT_ERR_UNSUPPORTED,
                     "%s: %s; pass DEVRT_LAYOUT_ALLOW_FALLBACK for plain streams", call, why);
    *fallback = true;
    return plain_plan(rt, s, why, p);
  }
  devrt_status st = do_split(rt, s, x, call);
  fill_plan(s, x, p);
  if (st == DEVRT_OK && want_plain(s))
    plainify(p, plain_requested); /* the split's partitions, on every SM */
  return st;
}

devrt_status devrt_layout_plan_get(devrt_runtime* rt, const devrt_layout_spec* spec,
                                   devrt_layout_plan* out) {
  DV_RT_CHECK(rt, "devrt_layout_plan_get");
  DV_ARG_CHECK(out, "devrt_layout_plan_get", "out is NULL");
  bool fallback;
  split x = {0};
  return plan(rt, spec, out, &fallback, &x, "devrt_layout_plan_get");
}

/* ---- create and destroy ---- */

static void layout_free(devrt_runtime* rt, devrt_layout* l) {
  for (unsigned i = 0; i < l->plan.partitions; i++) {
    devrt_partition* p = &l->parts[i];
    if (p->pool.slots) dv_pool_destroy(rt, &p->pool); /* streams before their green context */
    if (p->green) rt->be->green_destroy(rt->dev, p->green);
    if (p->budget) devrt_resource_release(p->budget);
  }
  free(l);
}

/* Green contexts for every partition of the split (granted SMs read back from each). */
static devrt_status build_greens(devrt_runtime* rt, const devrt_layout_spec* s, split* x,
                                 devrt_layout* l) {
  for (unsigned i = 0; i < l->plan.partitions; i++) {
    devrt_partition* p = &l->parts[i];
    dv_res res[2];
    unsigned n = 1;
    res[0] = p->remainder ? x->rem : x->groups[i];
    if (!p->remainder && i + 1 == x->n && s->remainder == DEVRT_REMAINDER_MERGE && x->rem.sms)
      res[n++] = x->rem;
    DV_CHECK(rt->be->green_create(rt->dev, res, n, &p->green));
    dv_res got;
    DV_CHECK(rt->be->green_resource(p->green, &got));
    p->sms = l->plan.sm_counts[i] = got.sms;
  }
  return DEVRT_OK;
}

/* Each partition's stream pool and sub-budget. */
static devrt_status build_pools(devrt_runtime* rt, const devrt_layout_spec* s, devrt_layout* l) {
  devrt_resource* top = NULL;
  DV_CHECK(devrt_runtime_resource(rt, &top));
  unsigned fair =
      rt->cfg.partition_streams / l->plan.partitions; /* the default: a fair share, at most 4 */
  unsigned streams = s->streams               ? s->streams
                     : fair < DEFAULT_STREAMS ? (fair ? fair : 1)
                                              : DEFAULT_STREAMS;
  for (unsigned i = 0; i < l->plan.partitions; i++) {
    devrt_partition* p = &l->parts[i];
    if (!p->green) p->sms = l->plan.sm_counts[i];
    int prio = s->priorities && i < (s->count ? s->count : s->groups) && !p->remainder
                   ? s->priorities[i]
                   : rt->cfg.stream_priority;
    DV_CHECK(dv_pool_create(rt, streams, p->green, prio, p, &p->pool));
    if (dv_budget_is(top)) {
      DV_CHECK(devrt_budget_create_child(top, dv_budget_limit(top), &p->budget));
    } else { /* a caller's stack without a budget on top: the sub-budget caps only this partition */
      devrt_budget_options o = {.limit_bytes =
                                    rt->info.total_memory ? rt->info.total_memory : UINT64_MAX};
      DV_CHECK(devrt_budget_create(top, &o, &p->budget));
    }
  }
  return DEVRT_OK;
}

devrt_status devrt_layout_create(devrt_runtime* rt, const devrt_layout_spec* spec,
                                 devrt_layout** out) {
  DV_RT_CHECK(rt, "devrt_layout_create");
  DV_ARG_CHECK(out, "devrt_layout_create", "out is NULL");
  uint64_t t0 = dv_now_ns();
  devrt_layout_plan pl;
  bool fallback;
  split* x = calloc(1, sizeof *x);
  devrt_layout* l = calloc(1, sizeof *l + DEVRT_MAX_PARTITIONS * sizeof l->parts[0]);
  devrt_status st =
      x && l ? plan(rt, spec, &pl, &fallback, x, "devrt_layout_create")
             : dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_layout_create: out of host memory");
  if (st != DEVRT_OK) {
    free(x);
    free(l);
    return st;
  }
  l->flags = spec->flags;
  l->plan = pl;
  for (unsigned i = 0; i < DEVRT_MAX_PARTITIONS; i++) l->parts[i].layout = l, l->parts[i].index = i;
  if (pl.remainder_partition) l->parts[pl.partitions - 1].remainder = true;
  if (pl.isolated) {
    st = peel(rt, spec, x);
    if (st == DEVRT_OK) st = build_greens(rt, spec, x, l);
    split_free(rt, x);
    if (st == DEVRT_ERR_UNSUPPORTED &&
        (spec->flags & DEVRT_LAYOUT_ALLOW_FALLBACK)) { /* refused: plain streams */
      char why[160];
      snprintf(why, sizeof why, "green contexts refused: %.130s", devrt_last_error());
      for (unsigned i = 0; i < l->plan.partitions; i++)
        if (l->parts[i].green)
          rt->be->green_destroy(rt->dev, l->parts[i].green), l->parts[i].green = NULL;
      plainify(&l->plan, why);
      st = DEVRT_OK;
      fallback = true;
    }
  }
  free(x);
  if (st == DEVRT_OK) st = build_pools(rt, spec, l);
  if (st != DEVRT_OK) {
    DV_KEEP_ERROR(layout_free(rt, l));
    return st;
  }
  l->create_ms = (double)(dv_now_ns() - t0) / 1e6;
  dv_layouts* L = rt->layouts;
  pthread_mutex_lock(&L->mu);
  l->next = L->list;
  L->list = l;
  L->created++;
  L->fallbacks += fallback;
  L->plain += want_plain(spec);
  pthread_mutex_unlock(&L->mu);
  *out = l;
  return DEVRT_OK;
}

devrt_status devrt_layout_destroy(devrt_runtime* rt, devrt_layout* layout) {
  LOCKED_LAYOUT(rt, layout, "devrt_layout_destroy");
  devrt_status st = DEVRT_OK;
  /* active is written under L_->mu, held here; busy's acquire pairs with acquire_busy's release
   * (an acquire that is over is over before the layout is freed) */
  unsigned busy = atomic_load_explicit(&layout->busy, memory_order_acquire);
  if (atomic_load_explicit(&L_->active, memory_order_relaxed) == layout || busy)
    st = dv_fail(DEVRT_ERR_INVALID_STATE, "devrt_layout_destroy: layout %p is %s", (void*)layout,
                 busy ? "handing out a stream on another thread"
                      : "active (devrt_layout_activate(rt, NULL) first)");
  for (unsigned i = 0; st == DEVRT_OK && i < layout->plan.partitions; i++)
    if (layout->parts[i].pool.slots)
      st = dv_streams_check_unexported(rt, &layout->parts[i].pool, "devrt_layout_destroy");
  pthread_mutex_lock(&rt->pool_mu);
  for (unsigned i = 0; st == DEVRT_OK && i < layout->plan.partitions; i++) {
    devrt_partition* p = &layout->parts[i];
    if (p->pool.in_use)
      st = dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_layout_destroy: partition %u has %u stream(s) held (release them first)",
                   i, p->pool.in_use);
    else if (dv_budget_live(p->budget))
      st = dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_layout_destroy: partition %u has %" PRIu64
                   " live bytes (free its blocks first)",
                   i, dv_budget_live(p->budget));
  }
  pthread_mutex_unlock(&rt->pool_mu);
  if (st == DEVRT_OK) { /* unlink: no call can reach it any more */
    devrt_layout** at = &L_->list;
    while (*at != layout) at = &(*at)->next;
    *at = layout->next;
  }
  pthread_mutex_unlock(&L_->mu);
  if (st == DEVRT_OK) layout_free(rt, layout);
  return st;
}

devrt_status devrt_layout_activate(devrt_runtime* rt, devrt_layout* layout) {
  DV_RT_CHECK(rt, "devrt_layout_activate");
  dv_layouts* L = rt->layouts;
  pthread_mutex_lock(&L->mu);
  bool ok = !layout || live(L, layout);
  if (ok) /* release: pairs with dv_default_acquire's acquire */
    atomic_store_explicit(&L->active, layout, memory_order_release);
  pthread_mutex_unlock(&L->mu);
  if (!ok)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "devrt_layout_activate: layout %p is destroyed or another runtime's",
                   (void*)layout);
  return DEVRT_OK;
}

devrt_status devrt_layout_info_get(devrt_runtime* rt, devrt_layout* layout,
                                   devrt_layout_info* out) {
  DV_ARG_CHECK(out, "devrt_layout_info_get", "out is NULL");
  LOCKED_LAYOUT(rt, layout, "devrt_layout_info_get");
  out->plan = layout->plan;
  out->active = atomic_load_explicit(&L_->active, memory_order_relaxed) == layout; /* L_->mu */
  out->create_ms = layout->create_ms;
  pthread_mutex_unlock(&L_->mu);
  return DEVRT_OK;
}

devrt_status devrt_layout_partition(devrt_runtime* rt, devrt_layout* layout, unsigned index,
                                    devrt_partition** out) {
  DV_ARG_CHECK(out, "devrt_layout_partition", "out is NULL");
  LOCKED_LAYOUT(rt, layout, "devrt_layout_partition");
  unsigned n = layout->plan.partitions;
  if (index < n) *out = &layout->parts[index];
  pthread_mutex_unlock(&L_->mu);
  if (index >= n)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "devrt_layout_partition: index %u, the layout has %u partitions", index, n);
  return DEVRT_OK;
}

devrt_status devrt_partition_info_get(devrt_runtime* rt, devrt_partition* p,
                                      devrt_partition_info* out) {
  DV_ARG_CHECK(out, "devrt_partition_info_get", "out is NULL");
  LOCKED_PARTITION(rt, p, "devrt_partition_info_get");
  memset(out, 0, sizeof *out);
  out->index = p->index;
  out->sm_count = p->sms;
  out->isolated = p->green != NULL;
  out->catch_all = p->index == owner_->plan.catch_all;
  out->remainder = p->remainder;
  out->cluster_capable = !(owner_->flags & DEVRT_LAYOUT_IGNORE_COSCHEDULING);
  pthread_mutex_lock(&rt->pool_mu);
  out->streams = p->pool.n;
  out->streams_in_use = p->pool.in_use;
  pthread_mutex_unlock(&rt->pool_mu);
  out->priority = p->pool.priority;
  devrt_status st = devrt_resource_query(p->budget, &out->memory);
  pthread_mutex_unlock(&L_->mu);
  return st;
}

/* Runs an acquire on one of a layout's pools with the layout marked busy, so it cannot be
 * destroyed under the acquire (which may wait) and without holding the layouts' lock. */
static devrt_status acquire_busy(devrt_runtime* rt, devrt_layout* l, dv_pool* pool,
                                 devrt_acquire_mode mode, devrt_stream* out, const char* call) {
  atomic_fetch_add_explicit(&l->busy, 1, memory_order_relaxed); /* the mutex publishes it */
  pthread_mutex_unlock(&rt->layouts->mu);
  devrt_status st = dv_pool_acquire(rt, pool, mode, out, call);
  /* release: pairs with devrt_layout_destroy's acquire (this use of l is over) */
  atomic_fetch_sub_explicit(&l->busy, 1, memory_order_release);
  return st;
}

devrt_status devrt_partition_stream_acquire(devrt_runtime* rt, devrt_partition* p,
                                            devrt_acquire_mode mode, devrt_stream* out) {
  DV_ARG_CHECK(out, "devrt_partition_stream_acquire", "out is NULL");
  DV_ARG_CHECK((unsigned)mode <= DEVRT_ACQUIRE_SHARE, "devrt_partition_stream_acquire",
               "unknown mode %d", (int)mode);
  LOCKED_PARTITION(rt, p, "devrt_partition_stream_acquire");
  return acquire_busy(rt, owner_, &p->pool, mode, out, "devrt_partition_stream_acquire");
}

devrt_status dv_default_acquire(devrt_runtime* rt, devrt_acquire_mode mode, devrt_stream* out,
                                const char* call) {
  dv_layouts* L = rt->layouts;
  /* acquire: pairs with devrt_layout_activate's release */
  if (DV_LIKELY(!atomic_load_explicit(&L->active, memory_order_acquire)))
    return dv_pool_acquire(rt, &rt->pool, mode, out, call);
  pthread_mutex_lock(&L->mu);
  devrt_layout* a = atomic_load_explicit(&L->active, memory_order_relaxed);
  if (!a) {
    pthread_mutex_unlock(&L->mu);
    return dv_pool_acquire(rt, &rt->pool, mode, out, call);
  }
  return acquire_busy(rt, a, &a->parts[a->plan.catch_all].pool, mode, out, call);
}

devrt_status devrt_stream_partition(devrt_runtime* rt, devrt_stream stream, devrt_partition** out) {
  DV_RT_CHECK(rt, "devrt_stream_partition");
  DV_ARG_CHECK(out, "devrt_stream_partition", "out is NULL");
  dv_stream* s;
  DV_CHECK(dv_stream_get(rt, stream, &s, "devrt_stream_partition"));
  dv_pool* p = rt->slots[DV_SID_SLOT(stream)].pool;
  *out = p ? p->part : NULL;
  return DEVRT_OK;
}

devrt_status devrt_partition_set_budget(devrt_runtime* rt, devrt_partition* p,
                                        uint64_t limit_bytes) {
  LOCKED_PARTITION(rt, p, "devrt_partition_set_budget");
  devrt_status st = dv_budget_set_limit(p->budget, limit_bytes, "devrt_partition_set_budget");
  pthread_mutex_unlock(&L_->mu);
  return st;
}

devrt_status devrt_partition_resource(devrt_runtime* rt, devrt_partition* p, devrt_resource** out) {
  DV_ARG_CHECK(out, "devrt_partition_resource", "out is NULL");
  LOCKED_PARTITION(rt, p, "devrt_partition_resource");
  *out = p->budget;
  pthread_mutex_unlock(&L_->mu);
  return DEVRT_OK;
}

devrt_status devrt_partitions_disjoint(devrt_runtime* rt, devrt_partition* a, devrt_partition* b,
                                       bool* out) {
  DV_ARG_CHECK(out, "devrt_partitions_disjoint", "out is NULL");
  LOCKED_PARTITION(rt, a, "devrt_partitions_disjoint");
  devrt_layout* lb = owner(L_, b);
  pthread_mutex_unlock(&L_->mu);
  if (!lb)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "devrt_partitions_disjoint: partition %p is NULL, of a destroyed layout or "
                   "another runtime's",
                   (void*)b);
  *out = lb == owner_ && a != b && a->green &&
         b->green; /* one split: disjoint; separate splits: never assumed */
  return DEVRT_OK;
}

devrt_status devrt_partition_stats_get(devrt_runtime* rt, devrt_partition_stats* out) {
  DV_RT_CHECK(rt, "devrt_partition_stats_get");
  DV_ARG_CHECK(out, "devrt_partition_stats_get", "out is NULL");
  dv_layouts* L = rt->layouts;
  pthread_mutex_lock(&L->mu);
  memset(out, 0, sizeof *out);
  out->layouts_created = L->created;
  for (devrt_layout* l = L->list; l; l = l->next) out->layouts_live++;
  out->fallbacks = L->fallbacks;
  out->plain = L->plain;
  pthread_mutex_unlock(&L->mu);
  return DEVRT_OK;
}
