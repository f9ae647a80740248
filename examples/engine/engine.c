/* engine.c: one run of the demo engine. An owned runtime with the engine's own resource stack (a
 * device budget over logging, statistics, caching and devrt's pool), a layout with a partition
 * and a sub-budget per tenant, the tenants' threads running morsel-driven queries through the
 * submission queue, the batch tenants' checkers, the two phases (interactive alone, then under
 * load), the device stamps read back, and the run's figures. devrt's public API only. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine.h"
#include "gen.h"

#ifdef EG_HAVE_FATBIN
extern const unsigned char eg_fatbin[]; /* fatbin.S: kernels.cu built by nvcc */
#endif

enum { SCAN = 2, CHECK = 3 };                /* stream indices; 0 and 1 generate */
enum { MEM_ALLOC = 0, MEM_FREE, MEM_RETRY }; /* eg_mem_rec kinds */
static const uint64_t OVER_BUDGET_GIVE_UP_NS = 60ull * 1000000000u;
/* A batch allocation waits this long at most for room beside the interactive tenant's reserve,
 * then asks the budget anyway (so odd sizes, where the reserve leaves too little, cannot stall). */
static const uint64_t RESERVE_WAIT_NS = 10000000u;

const char* const eg_stage_names[EG_NSTAGES] = {"gen_lineitem", "gen_orders", "q1",
                                                "build",        "probe",      "merge",
                                                "zero",         "part_count", "part_scatter"};
const char* const eg_stream_names[EG_STREAMS] = {"gen0", "gen1", "scan", "check"};
static const char* const kernel_names[EG_NSTAGES] = {
    "eg_gen_lineitem", "eg_gen_orders", "eg_q1",         "eg_build",       "eg_probe",
    "eg_merge",        "eg_zero",       "eg_part_count", "eg_part_scatter"};
static const char* const tags[EG_MAX_TENANTS] = {
    "tenant0", "tenant1", "tenant2",  "tenant3",  "tenant4",  "tenant5",  "tenant6",  "tenant7",
    "tenant8", "tenant9", "tenant10", "tenant11", "tenant12", "tenant13", "tenant14", "tenant15"};

uint64_t eg_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

int eg_fail(eg_engine* e, const char* fmt, ...) {
  pthread_mutex_lock(&e->err_mu);
  if (!e->error[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->error, sizeof e->error, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&e->err_mu);
  atomic_store(&e->failed, true);
  return 1;
}

bool eg_grow(void** p, size_t n, size_t* cap, size_t sz) {
  if (n < *cap) return true;
  size_t c = *cap ? *cap * 2 : 256;
  void* q = realloc(*p, c * sz);
  if (!q) return false;
  *p = q, *cap = c;
  return true;
}

void eg_options_default(eg_options* o) {
  if (!o->tenants) o->tenants = 4;
  if (!o->credits) o->credits = 4;
}

/* ---- memory over time: the logging layer's callback ---- */

/* Each allocation the log sees is remembered by address (open addressing, under mem_mu), so its
 * free (which the log reports without a tag) is charged to the tenant that made it. */
static size_t live_slot(eg_engine* e, void* p) {
  size_t i = ((uintptr_t)p >> 8) * 0x9e3779b97f4a7c15ull >> 40 & (e->live_cap - 1);
  while (e->live_ptr[i] && e->live_ptr[i] != p) i = (i + 1) & (e->live_cap - 1);
  return i;
}

static void live_erase(eg_engine* e, size_t i) { /* backward-shift deletion keeps probes short */
  size_t m = e->live_cap - 1;
  for (size_t j = (i + 1) & m; e->live_ptr[j]; j = (j + 1) & m) {
    size_t home = ((uintptr_t)e->live_ptr[j] >> 8) * 0x9e3779b97f4a7c15ull >> 40 & m;
    if (((j - home) & m) >= ((j - i) & m)) {
      e->live_ptr[i] = e->live_ptr[j], e->live_meta[i] = e->live_meta[j], i = j;
    }
  }
  e->live_ptr[i] = NULL;
}

static void on_log(void* user, const devrt_log_record* r) {
  eg_engine* e = user;
  bool alloc = !strcmp(r->action, "allocate"), freed = !strcmp(r->action, "free");
  if ((!alloc && !freed) || !r->ptr || r->status != DEVRT_OK) return;
  int tenant = -1;
  for (int i = 0; alloc && i < e->nt; i++)
    if (r->tag == tags[i] || !strcmp(r->tag, tags[i])) tenant = i;
  pthread_mutex_lock(&e->mem_mu);
  size_t i = live_slot(e, r->ptr);
  uint64_t bytes = r->size;
  if (alloc && tenant >= 0 && !e->live_ptr[i] && e->live_used * 2 < e->live_cap) {
    e->live_ptr[i] = r->ptr, e->live_meta[i] = (uint64_t)tenant << 56 | bytes;
    e->tenant_live[tenant] += bytes, e->live_used++;
  } else if (freed && e->live_ptr[i]) {
    tenant = (int)(e->live_meta[i] >> 56), bytes = e->live_meta[i] & ((1ull << 56) - 1);
    e->tenant_live[tenant] -= bytes, e->live_used--;
    live_erase(e, i);
  } else {
    tenant = -1;
  }
  if (tenant >= 0 && eg_grow((void**)&e->live, e->nlive, &e->caplive, sizeof *e->live))
    e->live[e->nlive++] = (eg_live_sample){eg_now_ns(), e->tenant_live[tenant], (uint8_t)tenant};
  pthread_mutex_unlock(&e->mem_mu);
}

/* Each device budget's figures now (the main thread, during the phases): its peak held, and the
 * first device's samples over time. */
static void sample_device(eg_engine* e) {
  for (int i = 0; i < e->nd; i++) {
    eg_device* d = &e->devs[i];
    devrt_resource_figures fg;
    if (!d->budget || devrt_resource_query(d->budget, &fg) != DEVRT_OK) continue;
    /* What the DEVICE budget admits on (held: live, pending and cached), limit less available;
     * the budget refuses what would pass its limit, so this is the peak shown, not a check. */
    uint64_t held = fg.limit_bytes - fg.available_bytes;
    if (held > d->peak_held) d->peak_held = held;
    if (i == 0 && eg_grow((void**)&e->dev, e->ndev, &e->capdev, sizeof *e->dev))
      e->dev[e->ndev++] =
          (eg_dev_sample){eg_now_ns(), fg.live_bytes, fg.pending_bytes, fg.cached_bytes};
  }
}

/* ---- sizes, budgets, the stack, the layout ---- */

static uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }
static uint64_t pow2_at_least(uint64_t n) {
  uint64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

/* What an allocation of n bytes holds under devrt's caching layer: its size class (four steps
 * per power of two up to 64 MiB; beyond, the pool's rounding, taken as 2 MiB). */
uint64_t eg_charge(uint64_t n) {
  if (n > (64ull << 20)) return round_up(n, 2ull << 20);
  uint64_t p = 512;
  while (p * 2 <= n) p *= 2;
  return n <= 512 ? 512 : round_up(n, p / 4);
}

static uint64_t stamp_cap(const eg_engine* e) {
  return e->o.stamps ? (uint64_t)e->o.stamps : e->cuda ? 1u << 18 : 1u << 13;
}

static unsigned max_chunks(const eg_engine* e, bool interactive) {
  unsigned m = 0;
  int lo = interactive ? e->nq1 + e->njoin : 0, hi = interactive ? e->nvar : e->nq1 + e->njoin;
  for (int k = lo; k < hi; k++)
    if (e->var[k].nchunks > m) m = e->var[k].nchunks;
  return m;
}

static uint64_t ht_slots(const eg_variant* v) {
  uint64_t s = pow2_at_least(2 * v->passing_orders + 1);
  return s < 1024 ? 1024 : s;
}

/* Whether a distributed query runs: several devices, or one rank of several processes. */
static bool dist(const eg_engine* e) { return e->nd > 1 || e->o.ranks; }

/* Each tenant's sub-budget: its chunks in flight, its hash table, the query slots waiting for its
 * checker, its stamps. A device's budget is smaller than the sum of its tenants', never below what
 * lets each of them hold one chunk and its query state at once; with several devices, it has room
 * for the distributed query besides (which runs after the tenants). */
static void budgets(eg_engine* e, eg_device* d) {
  uint64_t floor = 0, ht = 0;
  for (int k = e->nq1; k < e->nq1 + e->njoin; k++)
    if (ht_slots(&e->var[k]) * 8 > ht) ht = ht_slots(&e->var[k]) * 8;
  d->sum_sub = 0;
  for (int j = 0; j < d->ntenants; j++) {
    int i = d->tenant[j];
    bool inter = i == 0;
    uint64_t chunk = eg_charge(EG_LI_BYTES * (inter ? e->ichunk_rows : e->chunk_rows));
    uint64_t parts = eg_charge(((uint64_t)max_chunks(e, inter) + 1) * EG_AGG_WORDS * 8);
    uint64_t state = (EG_RING + 2) * parts + (inter ? 0 : eg_charge(ht)) +
                     EG_STAMPED * eg_charge(16 * stamp_cap(e)) + (1u << 20);
    e->t[i].sub_budget = (uint64_t)e->o.credits * chunk + state;
    d->sum_sub += e->t[i].sub_budget;
    floor += chunk + state;
  }
  uint64_t tight = d->sum_sub / 10 * 7, least = floor / 10 * 11;
  d->global_budget = (tight > least ? tight : least) + (dist(e) ? eg_dist_bytes(e) : 0);
  /* What the batch tenants leave free on the interactive tenant's device: its sub-budget. */
  if (d->index == 0) d->reserve = e->t[0].sub_budget;
}

static int build_stack(eg_engine* e, eg_device* d) {
  devrt_resource *leaf, *cache, *stats, *log, *top;
  devrt_logging_options lo = {.callback = on_log, .user = e};
  devrt_budget_options bo = {.limit_bytes = d->global_budget, .scope = DEVRT_BUDGET_DEVICE};
  CALL(e, "devrt_async_resource_create", devrt_async_resource_create(d->rt, &leaf));
  CALL(e, "devrt_caching_resource_create", devrt_caching_resource_create(leaf, NULL, &cache));
  CALL(e, "devrt_statistics_resource_create", devrt_statistics_resource_create(cache, &stats));
  CALL(e, "devrt_logging_resource_create", devrt_logging_resource_create(stats, &lo, &log));
  CALL(e, "devrt_budget_create", devrt_budget_create(log, &bo, &top));
  CALL(e, "devrt_runtime_set_resource", devrt_runtime_set_resource(d->rt, top));
  /* The runtime and each layer hold their upstream: keep only what the engine reads. */
  devrt_resource_release(leaf), devrt_resource_release(cache), devrt_resource_release(log);
  d->stats = stats, d->budget = top;
  return 0;
}

/* One partition per tenant of device d: the interactive tenant's small, the batch tenants' equal
 * (the remainder merged into the last); one split, so with green contexts they are disjoint. */
static int make_layout(eg_engine* e, eg_device* d) {
  devrt_split_result sr = {0};
  unsigned g = 1, sms = (unsigned)d->di.sm_count, counts[EG_MAX_TENANTS], n = (unsigned)d->ntenants;
  if (devrt_device_split_query(d->rt, 1, DEVRT_SPLIT_IGNORE_COSCHEDULING, &sr) == DEVRT_OK &&
      sr.sms_per_group)
    g = sr.sms_per_group;
  bool has_inter = d->tenant[0] == 0; /* tenant 0 runs on the first device, first */
  unsigned inter = sms / 8 / g * g, nb = n - has_inter;
  if (inter < g) inter = g;
  if (!has_inter) inter = 0;
  unsigned batch = !nb ? g : sms > inter ? (sms - inter) / nb / g * g : 0;
  if (!e->o.plain && batch < g)
    return eg_fail(e,
                   "%s%d tenants need %d partitions of at least %u SMs; this device has %u "
                   "(use fewer tenants, or --plain)",
                   e->nd > 1 ? "a device of " : "", e->nt, d->ntenants, g, sms);
  for (unsigned i = 0; i < n; i++) counts[i] = i == 0 && has_inter ? inter : batch ? batch : g;
  int prio[EG_MAX_TENANTS];
  for (unsigned i = 0; i < n; i++)
    prio[i] = i == 0 && has_inter ? d->di.priority_greatest : d->di.priority_least;
  devrt_layout_spec spec = {
      .sm_counts = counts,
      .count = n,
      .remainder = DEVRT_REMAINDER_MERGE,
      .flags = DEVRT_LAYOUT_IGNORE_COSCHEDULING |
               (e->o.plain ? DEVRT_LAYOUT_PLAIN_STREAMS : DEVRT_LAYOUT_ALLOW_FALLBACK),
      .streams = EG_STREAMS,
      .priorities = prio};
  CALL(e, "devrt_layout_create", devrt_layout_create(d->rt, &spec, &d->layout));
  CALL(e, "devrt_layout_info_get", devrt_layout_info_get(d->rt, d->layout, &d->linfo));
  return 0;
}

/* ---- submissions ---- */

static eg_launch_rec* new_rec(eg_tenant* t) {
  if (!eg_grow((void**)&t->recs, t->nrecs, &t->caprecs, sizeof *t->recs)) return NULL;
  return memset(&t->recs[t->nrecs++], 0, sizeof *t->recs);
}

static void mem_rec(eg_tenant* t, int kind, int stream, uint64_t bytes) {
  if (eg_grow((void**)&t->mrecs, t->nmrecs, &t->capmrecs, sizeof *t->mrecs))
    t->mrecs[t->nmrecs++] = (eg_mem_rec){eg_now_ns(), bytes, (uint8_t)kind, (uint8_t)stream};
}

/* The stamp slot of the nth launch on stamped stream si, UINT32_MAX for none: launches are
 * stamped 1 in stamp_stride; when the slots run out, the stride doubles and the stamped launches
 * off the new stride give their slots back (a later launch on the same stream overwrites them). */
static uint32_t stamp_slot(eg_tenant* t, int si, uint32_t nth) {
  if (nth % t->stamp_stride[si]) return UINT32_MAX;
  if (t->stamp_next[si] < t->stamp_cap) return t->stamp_next[si]++;
  if (!t->nfree[si]) {
    t->stamp_stride[si] *= 2;
    for (size_t r = 0; r < t->nrecs; r++) {
      eg_launch_rec* x = &t->recs[r];
      if (x->stream == si && x->slot != UINT32_MAX && x->nth % t->stamp_stride[si])
        t->stamp_free[si][t->nfree[si]++] = x->slot, x->slot = UINT32_MAX;
    }
    if (nth % t->stamp_stride[si]) return UINT32_MAX;
  }
  return t->stamp_free[si][--t->nfree[si]];
}

/* A queued launch of stage st on stream si: waits for `waits`, signals the stream's semaphore
 * (and `extra`). args[nargs - 1] is the stamp argument, set here; the stream's stamp block joins
 * the uses. wait_rec: the record of the launch it waits for on another stream (or UINT32_MAX). */
static int t_launch(eg_tenant* t, int si, eg_stage st, void** args, unsigned nargs,
                    const devrt_block_use* uses, unsigned nuses, const devrt_semaphore_value* waits,
                    unsigned nwaits, const devrt_semaphore_value* extra, unsigned grid,
                    uint32_t query, uint32_t chunk, uint32_t wait_rec) {
  eg_engine* e = t->e;
  uint64_t* stamp = NULL;
  uint32_t slot = UINT32_MAX, nth = si < EG_STAMPED ? t->launches[si]++ : 0;
  devrt_block_use u[4];
  memcpy(u, uses, nuses * sizeof *u);
  if (si < EG_STAMPED) {
    u[nuses++] = (devrt_block_use){t->stamps[si], DEVRT_ACCESS_READ_WRITE};
    if ((slot = stamp_slot(t, si, nth)) != UINT32_MAX) stamp = t->stamp_dev[si] + 2 * slot;
  }
  args[nargs - 1] = &stamp;
  uint64_t* val = si < 2 ? &t->gval[si] : &t->sval;
  devrt_semaphore_value sig[2] = {{si < 2 ? t->gsem[si] : t->ssem, *val + 1}};
  if (extra) sig[1] = *extra;
  devrt_submission sub = {.stream = t->s[si],
                          .waits = waits,
                          .nwaits = nwaits,
                          .signals = sig,
                          .nsignals = extra ? 2 : 1,
                          .kind = DEVRT_WORK_LAUNCH,
                          .launch = {.kernel = t->d->k[st],
                                     .grid = {grid},
                                     .block = {256},
                                     .args = args,
                                     .uses = u,
                                     .nuses = nuses}};
  eg_launch_rec* r = new_rec(t);
  if (!r) return eg_fail(e, "out of host memory");
  *r = (eg_launch_rec){(uint8_t)st, (uint8_t)si, query,    chunk, nth, slot,
                       wait_rec,    eg_now_ns(), *val + 1, 0,     0};
  devrt_status s = devrt_queue_submit(t->d->rt, &sub);
  if (s != DEVRT_OK) {
    r->slot = UINT32_MAX; /* it never ran: its slot holds another launch's stamps */
    return eg_fail(e, "%s: %s: %s", eg_stage_names[st], devrt_status_name(s), devrt_last_error());
  }
  *val += 1;
  if (si < 2) t->last_gen[si] = (uint32_t)(t->nrecs - 1);
  return 0;
}

static int t_free(eg_tenant* t, int si, devrt_block b, uint64_t bytes,
                  const devrt_semaphore_value* wait, const devrt_semaphore_value* sig) {
  devrt_submission sub = {.stream = t->s[si],
                          .waits = wait,
                          .nwaits = wait != NULL,
                          .signals = sig,
                          .nsignals = sig != NULL,
                          .kind = DEVRT_WORK_FREE,
                          .block = b};
  CALL(t->e, "queued free", devrt_queue_submit(t->d->rt, &sub));
  mem_rec(t, MEM_FREE, si, bytes);
  return 0;
}

/* Room to retry an allocation: the tenant's oldest chunk in flight retiring, else a moment
 * (another tenant, or this one's checker, is to free memory); then completed frees reaped. */
static int make_room(eg_tenant* t) {
  uint64_t retired = 0;
  devrt_status st = devrt_semaphore_query(t->credit, &retired);
  if (st == DEVRT_OK && retired < t->admitted)
    st = devrt_semaphore_wait(t->credit, retired + 1, 50000000u);
  else if (st == DEVRT_OK)
    sleep_ns(t->interactive ? 20000 : 200000); /* the interactive tenant's latency counts */
  if (st != DEVRT_OK && st != DEVRT_ERR_TIMEOUT)
    return eg_fail(t->e, "tenant %d: waiting for a credit: %s: %s", t->id, devrt_status_name(st),
                   devrt_last_error());
  CALL(t->e, "devrt_reap_pending", devrt_reap_pending(t->d->rt, 0, NULL));
  return 0;
}

/* Whether a batch tenant may allocate `bytes` now: only while the device budget keeps the
 * interactive tenant's reserve available beside it. Cached bytes do not count: taking them would
 * make the budget trim the cache, the interactive tenant's blocks too, and its next allocation
 * would then wait for the batch tenants' frees. The device budget itself still refuses what does
 * not fit. */
static bool leaves_reserve(eg_tenant* t, uint64_t bytes) {
  devrt_resource_figures fg;
  if (devrt_resource_query(t->d->budget, &fg) != DEVRT_OK) return true;
  return fg.available_bytes >= eg_charge(bytes) + t->d->reserve;
}

/* A queued allocation on stream si. It has no waits, so devrt issues it inside the submit, on this
 * thread (queue.h): its signal is then scheduled, or failed with the allocation's status. An
 * OVER_BUDGET is counted and retried once there is room; the failed semaphore is replaced (a
 * failed timeline stays failed). A batch tenant first waits for room that leaves the interactive
 * tenant's share free (leaves_reserve), counted apart. */
static int t_alloc(eg_tenant* t, int si, uint64_t bytes, devrt_block* out) {
  eg_engine* e = t->e;
  uint64_t start = eg_now_ns();
  bool gate = !t->interactive && t->d->reserve;
  for (;;) {
    if (gate) pthread_mutex_lock(&t->d->admit_mu);
    if (gate && eg_now_ns() - start < RESERVE_WAIT_NS && !leaves_reserve(t, bytes)) {
      pthread_mutex_unlock(&t->d->admit_mu);
      t->held_back++;
      if (make_room(t)) return 1;
      continue;
    }
    devrt_semaphore_value sig = {t->asem, t->aval + 1};
    devrt_submission sub = {.stream = t->s[si],
                            .signals = &sig,
                            .nsignals = 1,
                            .kind = DEVRT_WORK_ALLOC,
                            .alloc = {bytes, t->tag, out}};
    devrt_status st = devrt_queue_submit(t->d->rt, &sub);
    if (gate) pthread_mutex_unlock(&t->d->admit_mu);
    CALL(e, "queued allocation", st);
    devrt_status why = DEVRT_OK;
    const char* msg = "";
    CALL(e, "devrt_semaphore_failure", devrt_semaphore_failure(t->asem, &why, &msg));
    if (why == DEVRT_OK) {
      t->aval++;
      mem_rec(t, MEM_ALLOC, si, bytes);
      return 0;
    }
    if (why != DEVRT_ERR_OVER_BUDGET)
      return eg_fail(e, "tenant %d: %s: %s", t->id, devrt_status_name(why), msg);
    if (eg_now_ns() - start > OVER_BUDGET_GIVE_UP_NS)
      return eg_fail(e, "tenant %d: OVER_BUDGET for 60 s: %s", t->id, msg);
    t->retries++;
    mem_rec(t, MEM_RETRY, si, bytes);
    CALL(e, "devrt_semaphore_destroy", devrt_semaphore_destroy(t->asem));
    t->asem = NULL;
    CALL(e, "devrt_semaphore_create", devrt_semaphore_create(t->d->rt, 0, &t->asem));
    t->aval = 0;
    if (make_room(t)) return 1;
  }
}

void* eg_block_ptr(eg_engine* e, eg_device* d, devrt_block b) {
  void* p = NULL;
  if (devrt_block_ptr(d->rt, b, &p) != DEVRT_OK)
    eg_fail(e, "devrt_block_ptr: %s", devrt_last_error());
  return p;
}

/* Zeroes `words` words of b on the scan stream once its allocation is issued. */
static int t_zero(eg_tenant* t, devrt_block b, uint64_t words, uint32_t query) {
  void* p = eg_block_ptr(t->e, t->d, b);
  void* args[] = {&p, &words, NULL};
  devrt_block_use u = {b, DEVRT_ACCESS_WRITE};
  devrt_semaphore_value w = {t->asem, t->aval};
  return t_launch(t, SCAN, EG_ZERO, args, 3, &u, 1, &w, 1, NULL, t->grid, query, 0, UINT32_MAX);
}

typedef struct query_ctx {
  const eg_variant* v;
  uint32_t query;
  devrt_block parts, ht;
  uint64_t* pparts;
  uint64_t* pht;
  uint64_t mask;
} query_ctx;

/* One chunk (morsel): take a credit, allocate, generate on a generate stream, then on the scan
 * stream filter and aggregate, build or probe (waiting for the generate's signal on the device),
 * then free the chunk, which returns the credit. */
static int chunk(eg_tenant* t, query_ctx* q, bool orders, unsigned k) {
  eg_engine* e = t->e;
  const eg_variant* v = q->v;
  uint64_t cap = v->chunk_rows, first = (orders ? v->ofirst : v->first) + k * cap;
  uint64_t total = orders ? v->orows : v->rows,
           rows = total - k * cap < cap ? total - k * cap : cap;
  if (t->admitted >= (uint64_t)e->o.credits) {
    devrt_status st = devrt_semaphore_wait(t->credit, t->admitted - (uint64_t)e->o.credits + 1,
                                           DEVRT_TIMEOUT_INFINITE);
    if (st != DEVRT_OK)
      return eg_fail(e, "tenant %d: query %u %s, chunk %u: waiting for a credit: %s: %s", t->id,
                     q->query, v->name, k, devrt_status_name(st), devrt_last_error());
  }
  int g = (int)(t->admitted % 2);
  devrt_block c;
  uint64_t bytes = cap * (orders ? EG_ORD_BYTES : EG_LI_BYTES);
  if (t_alloc(t, g, bytes, &c)) return 1;
  void* cp = eg_block_ptr(e, t->d, c);
  {
    void* args[] = {&cp, &cap, &first, &rows, NULL};
    devrt_block_use u = {c, DEVRT_ACCESS_WRITE};
    devrt_semaphore_value w = {t->asem, t->aval};
    if (t_launch(t, g, orders ? EG_GEN_ORD : EG_GEN_LI, args, 5, &u, 1, &w, 1, NULL, t->grid,
                 q->query, k, UINT32_MAX))
      return 1;
  }
  devrt_semaphore_value w = {t->gsem[g], t->gval[g]};
  uint32_t gen = t->last_gen[g];
  uint64_t* slot = q->pparts + (uint64_t)k * EG_AGG_WORDS;
  int rc;
  if (orders) {
    void* args[] = {&cp, &cap, &rows, (void*)&v->d0, (void*)&v->d1, &q->pht, &q->mask, NULL};
    devrt_block_use u[] = {{c, DEVRT_ACCESS_READ}, {q->ht, DEVRT_ACCESS_READ_WRITE}};
    rc = t_launch(t, SCAN, EG_BUILD, args, 8, u, 2, &w, 1, NULL, t->grid, q->query, k, gen);
  } else if (v->kind == EG_Q1) {
    void* args[] = {&cp, &cap, &rows, (void*)&v->cutoff, &slot, NULL};
    devrt_block_use u[] = {{c, DEVRT_ACCESS_READ}, {q->parts, DEVRT_ACCESS_READ_WRITE}};
    rc = t_launch(t, SCAN, EG_SCAN_Q1, args, 6, u, 2, &w, 1, NULL, t->grid, q->query, k, gen);
  } else {
    void* args[] = {&cp, &cap, &rows, (void*)&v->s0, &q->pht, &q->mask, &slot, NULL};
    devrt_block_use u[] = {
        {c, DEVRT_ACCESS_READ}, {q->ht, DEVRT_ACCESS_READ}, {q->parts, DEVRT_ACCESS_READ_WRITE}};
    rc = t_launch(t, SCAN, EG_PROBE, args, 8, u, 3, &w, 1, NULL, t->grid, q->query, k, gen);
  }
  if (rc) return 1;
  devrt_semaphore_value fw = {t->ssem, t->sval}, credit = {t->credit, t->admitted + 1};
  if (t_free(t, SCAN, c, bytes, &fw, &credit)) return 1;
  t->admitted++;
  atomic_fetch_add(&t->rows_done, rows);
  atomic_fetch_add(&t->bytes_done, rows * (orders ? 7 : v->kind == EG_Q1 ? 9 : 11));
  atomic_fetch_add(&t->chunks_done, 1);
  return 0;
}

/* A whole query: its slots (one per chunk, then the merged result) and for a join its hash
 * table, zeroed; the chunks; the merge, which signals the query semaphore. */
static int run_query(eg_tenant* t, const eg_variant* v, uint32_t query, eg_pending* out) {
  eg_engine* e = t->e;
  uint64_t t0 = eg_now_ns(), words = ((uint64_t)v->nchunks + 1) * EG_AGG_WORDS;
  query_ctx q = {.v = v, .query = query};
  if (t_alloc(t, SCAN, words * 8, &q.parts) || !(q.pparts = eg_block_ptr(e, t->d, q.parts)) ||
      t_zero(t, q.parts, words, query))
    return 1;
  if (v->kind == EG_JOIN) {
    uint64_t slots = ht_slots(v);
    q.mask = slots - 1;
    if (t_alloc(t, SCAN, slots * 8, &q.ht) || !(q.pht = eg_block_ptr(e, t->d, q.ht)) ||
        t_zero(t, q.ht, slots, query))
      return 1;
    for (unsigned k = 0; k < v->ochunks; k++)
      if (chunk(t, &q, true, k)) return 1;
  }
  for (unsigned k = 0; k < v->nchunks; k++)
    if (chunk(t, &q, false, k)) return 1;
  uint64_t n = v->nchunks, *result = q.pparts + n * EG_AGG_WORDS;
  void* args[] = {&q.pparts, &n, &result, NULL};
  devrt_block_use u = {q.parts, DEVRT_ACCESS_READ_WRITE};
  devrt_semaphore_value done = {t->qsem, t->qval + 1};
  if (t_launch(t, SCAN, EG_MERGE, args, 4, &u, 1, NULL, 0, &done, 1, query, 0, UINT32_MAX))
    return 1;
  t->qval++;
  if (q.ht) {
    devrt_semaphore_value w = {t->ssem, t->sval};
    if (t_free(t, SCAN, q.ht, (q.mask + 1) * 8, &w, NULL)) return 1;
  }
  *out = (eg_pending){v, t->qval, q.parts, query, t0, false};
  return 0;
}

/* ---- --graphs: the interactive tenant's queries as graph replays ---- */

/* A recorded launch on the scan stream (captured: the graph's). */
static int g_launch(eg_tenant* t, eg_stage st, unsigned grid, void** args, const devrt_block_use* u,
                    unsigned nuses) {
  devrt_launch_desc d = {.stream = t->s[SCAN],
                         .kernel = t->d->k[st],
                         .grid = {grid},
                         .block = {256},
                         .args = args,
                         .uses = u,
                         .nuses = nuses};
  CALL(t->e, eg_stage_names[st], devrt_launch(t->d->rt, &d));
  return 0;
}

/* Interactive variant k's query captured on the scan stream, as run_query issues it but on one
 * stream: its slots zeroed, each chunk generated into the shared chunk buffer and scanned into its
 * slot, the merge. The slots are allocated first, outside the capture: the graph's output, read
 * after every replay. No stamps (a replay's launches have no launch records). */
static int capture_query(eg_tenant* t, int k) {
  eg_engine* e = t->e;
  devrt_runtime* rt = t->d->rt;
  const eg_variant* v = &e->var[e->nq1 + e->njoin + k];
  uint64_t words = ((uint64_t)v->nchunks + 1) * EG_AGG_WORDS, cap = v->chunk_rows, n = v->nchunks;
  uint64_t* none = NULL;
  CALL(e, "devrt_block_alloc (graph slots)",
       devrt_block_alloc(rt, words * 8, t->s[SCAN], t->tag, &t->gparts[k]));
  uint64_t *parts = eg_block_ptr(e, t->d, t->gparts[k]), *result = parts + n * EG_AGG_WORDS;
  void* chunk = eg_block_ptr(e, t->d, t->gchunk);
  if (!parts || !chunk) return 1;
  CALL(e, "devrt_capture_begin", devrt_capture_begin(rt, t->s[SCAN]));
  devrt_block_use out = {t->gparts[k], DEVRT_ACCESS_READ_WRITE};
  devrt_block_use in[] = {{t->gchunk, DEVRT_ACCESS_WRITE}, {t->gchunk, DEVRT_ACCESS_READ}};
  int rc = g_launch(t, EG_ZERO, t->grid, (void*[]){&parts, &words, &none}, &out, 1);
  for (unsigned c = 0; c < v->nchunks && !rc; c++) {
    uint64_t first = v->first + c * cap, rows = v->rows - c * cap < cap ? v->rows - c * cap : cap;
    uint64_t* slot = parts + (uint64_t)c * EG_AGG_WORDS;
    devrt_block_use scan[] = {in[1], out};
    rc = g_launch(t, EG_GEN_LI, t->grid, (void*[]){&chunk, &cap, &first, &rows, &none}, in, 1) ||
         g_launch(t, EG_SCAN_Q1, t->grid,
                  (void*[]){&chunk, &cap, &rows, (void*)&v->cutoff, &slot, &none}, scan, 2);
  }
  if (!rc) rc = g_launch(t, EG_MERGE, 1, (void*[]){&parts, &n, &result, &none}, &out, 1);
  /* ended whatever happened: the stream leaves the capture */
  devrt_status st = devrt_capture_end(rt, t->s[SCAN], &t->graphs[k]);
  if (rc) return rc;
  CALL(e, "devrt_capture_end", st);
  return 0;
}

/* The interactive tenant's graphs, one per interactive variant, and their buffers. */
static int capture_queries(eg_tenant* t) {
  eg_engine* e = t->e;
  uint64_t bytes = e->ichunk_rows * EG_LI_BYTES;
  if (!(t->graphs = calloc((size_t)e->ninter, sizeof *t->graphs)) ||
      !(t->gparts = calloc((size_t)e->ninter, sizeof *t->gparts)))
    return eg_fail(e, "out of host memory");
  CALL(e, "devrt_block_alloc (graph chunk)",
       devrt_block_alloc(t->d->rt, bytes, t->s[SCAN], t->tag, &t->gchunk));
  for (int k = 0; k < e->ninter; k++)
    if (capture_query(t, k)) return 1;
  return 0;
}

/* One interactive query of variant k as a replay of its graph on the scan stream: no allocation,
 * semaphore or host wait before the copy out (which waits for the replay on the device). */
static int graph_query(eg_tenant* t, int k, uint32_t query, eg_pending* out) {
  eg_engine* e = t->e;
  uint64_t t0 = eg_now_ns();
  const eg_variant* v = &e->var[e->nq1 + e->njoin + k];
  CALL(e, "devrt_graph_launch", devrt_graph_launch(t->graphs[k], t->s[SCAN]));
  atomic_fetch_add(&t->rows_done, v->rows);
  atomic_fetch_add(&t->bytes_done, v->rows * 9); /* as chunk() counts a Q1's */
  atomic_fetch_add(&t->chunks_done, v->nchunks);
  *out = (eg_pending){v, 0, t->gparts[k], query, t0, true};
  return 0;
}

typedef struct copy_ctx {
  devrt_runtime* rt;
  void* dst;
  const void* src;
  size_t bytes;
} copy_ctx;

/* Foreign stream-ordered work for devrt_launch: a device -> host copy. */
static devrt_status copy_out(void* user, devrt_stream s, void* native) {
  (void)native;
  copy_ctx* c = user;
  return devrt_memcpy_async(c->rt, c->dst, c->src, c->bytes, s);
}

int eg_copy_to_host(eg_engine* e, eg_device* d, devrt_stream s, devrt_block b, void* dst,
                    size_t bytes) {
  copy_ctx c = {d->rt, dst, eg_block_ptr(e, d, b), bytes};
  devrt_block_use u = {b, DEVRT_ACCESS_READ};
  devrt_launch_desc ld = {.stream = s, .enqueue = copy_out, .user = &c, .uses = &u, .nuses = 1};
  CALL(e, "devrt_launch (copy out)", devrt_launch(d->rt, &ld));
  return 0;
}

/* Copies block b (its first `bytes`) to dst on the tenant's check stream and waits for it. */
static int read_block(eg_tenant* t, devrt_block b, void* dst, size_t bytes) {
  if (eg_copy_to_host(t->e, t->d, t->s[CHECK], b, dst, bytes)) return 1;
  CALL(t->e, "devrt_stream_synchronize (copy out)",
       devrt_stream_synchronize(t->d->rt, t->s[CHECK]));
  return 0;
}

static int query_done(eg_tenant* t, const eg_pending* p) {
  devrt_status st = devrt_semaphore_wait(t->qsem, p->qval, DEVRT_TIMEOUT_INFINITE);
  return st == DEVRT_OK ? 0
                        : eg_fail(t->e, "tenant %d: query %u %s: %s: %s", t->id, p->query,
                                  p->v->name, devrt_status_name(st), devrt_last_error());
}

/* A query's end: wait for its merge, copy its slots out, check them, free them. The interactive
 * tenant copies at once, without waiting for the merge on the host first: the copy waits for it on
 * the device (use tracking), so its query's end costs one host wait instead of two. */
static int collect(eg_tenant* t, const eg_pending* p) {
  eg_engine* e = t->e;
  int rc = t->interactive ? 0 : query_done(t, p);
  size_t bytes = ((size_t)p->v->nchunks + 1) * EG_AGG_WORDS * 8;
  if (!rc) rc = read_block(t, p->parts, t->host_parts, bytes);
  if (!rc && t->interactive && !p->graph) rc = query_done(t, p); /* reached by now: its failure */
  uint64_t done = eg_now_ns();
  if (e->corrupt[0] == t->id && e->corrupt[1] == (int)p->query && e->corrupt[2] >= 0 &&
      (unsigned)e->corrupt[2] < p->v->nchunks)
    t->host_parts[(size_t)e->corrupt[2] * EG_AGG_WORDS + 2] ^= 1; /* Q1: A/F sum_price */
  if (!rc) rc = eg_check(e, t, p->v, p->query, t->host_parts);
  devrt_status fs = p->graph ? DEVRT_OK : devrt_block_free(t->d->rt, p->parts);
  if (fs != DEVRT_OK && !rc) rc = eg_fail(e, "devrt_block_free: %s", devrt_last_error());
  if (rc) return rc;
  int phase = atomic_load(&e->phase);
  bool load = phase == 1 && atomic_load(&e->batch_running) > 0;
  bool warm_up = phase == 0 && p->query < (uint32_t)e->o.alone / 10; /* first mappings, caches */
  if (t->interactive && ((phase == 0 && !warm_up) || load)) { /* a latency sample of its phase */
    double** v = load ? &t->lat_load : &t->lat_alone;
    size_t* n = load ? &t->nload : &t->nalone;
    if (!eg_grow((void**)v, *n, load ? &t->cap_load : &t->cap_alone, sizeof **v))
      return eg_fail(e, "out of host memory");
    (*v)[(*n)++] = (double)(done - p->t_start) / 1e3;
  }
  if (!t->t_first || p->t_start < t->t_first) t->t_first = p->t_start;
  t->t_last = done;
  atomic_fetch_add(&t->queries_done, 1);
  return 0;
}

/* ---- threads ---- */

static void* checker_main(void* arg) {
  eg_tenant* t = arg;
  for (;;) {
    pthread_mutex_lock(&t->mu);
    while (t->head == t->tail && !t->closing) pthread_cond_wait(&t->cv, &t->mu);
    if (t->head == t->tail) {
      pthread_mutex_unlock(&t->mu);
      return NULL;
    }
    eg_pending p = t->ring[t->head % EG_RING];
    pthread_mutex_unlock(&t->mu);
    collect(t, &p); /* a failure is recorded; the rest are still freed */
    pthread_mutex_lock(&t->mu);
    t->head++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
  }
}

static void* batch_main(void* arg) {
  eg_tenant* t = arg;
  eg_engine* e = t->e;
  for (uint32_t q = 0; !atomic_load(&e->failed); q++) {
    if (e->o.queries && q >= (uint32_t)e->o.queries) break;
    if (e->o.seconds > 0 && q && eg_now_ns() - e->t_load0 > e->o.seconds * 1e9) break;
    /* Q1 and join in turn, each tenant starting at another variant */
    int k = (int)((q / 2 + (uint32_t)t->id) % (uint32_t)(q % 2 ? e->njoin : e->nq1));
    eg_pending p;
    if (run_query(t, &e->var[q % 2 ? e->nq1 + k : k], q, &p)) break;
    pthread_mutex_lock(&t->mu);
    while (t->tail - t->head >= EG_RING) pthread_cond_wait(&t->cv, &t->mu);
    t->ring[t->tail++ % EG_RING] = p;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
  }
  pthread_mutex_lock(&t->mu);
  t->closing = true;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  pthread_join(t->checker, NULL);
  atomic_fetch_sub(&e->batch_running, 1);
  return NULL;
}

/* The interactive tenant: small Q1s one after another, each waited for (its latency: from the
 * query's first call to its result on the host). Alone: o.alone of them; under load: until the
 * batch tenants are done. */
static void* interactive_main(void* arg) {
  eg_tenant* t = arg;
  eg_engine* e = t->e;
  for (uint32_t n = 0; !atomic_load(&e->failed); n++) {
    if (atomic_load(&e->phase) == 0 ? n >= (uint32_t)e->o.alone
                                    : atomic_load(&e->batch_running) == 0)
      break;
    eg_pending p;
    uint32_t query = t->next_query++;
    int k = (int)(query % (uint32_t)e->ninter);
    if ((e->o.graphs ? graph_query(t, k, query, &p)
                     : run_query(t, &e->var[e->nq1 + e->njoin + k], query, &p)) ||
        collect(t, &p))
      break;
  }
  return NULL;
}

/* ---- tenants ---- */

static int tenant_init(eg_engine* e, int i) {
  eg_tenant* t = &e->t[i];
  t->e = e, t->id = i, t->interactive = i == 0, t->tag = tags[i];
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  CALL(e, "devrt_layout_partition",
       devrt_layout_partition(t->d->rt, t->d->layout, t->index, &t->part));
  CALL(e, "devrt_partition_set_budget",
       devrt_partition_set_budget(t->d->rt, t->part, t->sub_budget));
  CALL(e, "devrt_partition_info_get", devrt_partition_info_get(t->d->rt, t->part, &t->pinfo));
  t->grid = e->cuda ? t->pinfo.sm_count * 4 : t->pinfo.sm_count; /* eg_q1: 4 blocks an SM */
  if (!t->grid) t->grid = 1;
  for (int s = 0; s < EG_STREAMS; s++)
    CALL(e, "devrt_partition_stream_acquire",
         devrt_partition_stream_acquire(t->d->rt, t->part, DEVRT_ACQUIRE_FAIL, &t->s[s]));
  devrt_semaphore** sems[] = {&t->gsem[0], &t->gsem[1], &t->ssem, &t->credit, &t->asem, &t->qsem};
  for (int s = 0; s < 6; s++)
    CALL(e, "devrt_semaphore_create", devrt_semaphore_create(t->d->rt, 0, sems[s]));
  t->stamp_cap = (uint32_t)stamp_cap(e);
  for (int s = 0; s < EG_STAMPED; s++) { /* zeroed by a recorded launch of eg_zero */
    uint64_t words = 2ull * t->stamp_cap;
    void* none = NULL;
    t->stamp_stride[s] = 1;
    if (!(t->stamp_free[s] = malloc(t->stamp_cap * sizeof *t->stamp_free[s])))
      return eg_fail(e, "out of host memory");
    CALL(e, "devrt_block_alloc (stamps)",
         devrt_block_alloc(t->d->rt, words * 8, t->s[s], t->tag, &t->stamps[s]));
    if (!(t->stamp_dev[s] = eg_block_ptr(e, t->d, t->stamps[s]))) return 1;
    void* args[] = {&t->stamp_dev[s], &words, &none};
    devrt_block_use u = {t->stamps[s], DEVRT_ACCESS_WRITE};
    devrt_launch_desc d = {.stream = t->s[s],
                           .kernel = t->d->k[EG_ZERO],
                           .grid = {t->grid},
                           .block = {256},
                           .args = args,
                           .uses = &u,
                           .nuses = 1};
    CALL(e, "devrt_launch (zero stamps)", devrt_launch(t->d->rt, &d));
  }
  if (!(t->host_parts = calloc(((size_t)max_chunks(e, t->interactive) + 1) * EG_AGG_WORDS, 8)))
    return eg_fail(e, "out of host memory");
  return t->interactive && e->o.graphs ? capture_queries(t) : 0;
}

/* Reads every stamp back (after the phases) and places each launch on the host clock. */
static int read_stamps(eg_engine* e) {
  for (int i = 0; i < e->nt; i++) {
    eg_tenant* t = &e->t[i];
    uint64_t* h[EG_STAMPED];
    for (int s = 0; s < EG_STAMPED; s++) {
      if (!(h[s] = malloc(16ull * t->stamp_cap))) return eg_fail(e, "out of host memory");
      if (read_block(t, t->stamps[s], h[s], 16ull * t->stamp_cap)) return 1;
    }
    for (size_t r = 0; r < t->nrecs; r++) {
      eg_launch_rec* x = &t->recs[r];
      if (x->slot == UINT32_MAX || x->stream >= EG_STAMPED) continue;
      uint64_t s0 = h[x->stream][2 * x->slot], s1 = h[x->stream][2 * x->slot + 1];
      if (!s0 || !s1) continue;
      x->start = ~s0, x->end = s1; /* device ns: calibrate() moves them to the host clock */
    }
    for (int s = 0; s < EG_STAMPED; s++) free(h[s]);
  }
  return 0;
}

/* cuda's %globaltimer against the host clock, for each device with tenants (on its first tenant's
 * scan stream, in its first slots, once read_stamps read them): tiny stamped launches between two
 * host reads; the offset lies between (end - after) and (start - before) for each, so take the
 * middle of the narrowest bounds; then every launch of the device moves by it. The host backend
 * stamps with the host clock itself. */
static int calibrate_device(eg_engine* e, eg_device* dev) {
  eg_tenant* t = &e->t[dev->tenant[0]];
  enum { N = 8 };
  uint64_t before[N], after[N], words = 0;
  uint32_t slot[N];
  for (int i = 0; i < N; i++) {
    slot[i] = (uint32_t)i;
    uint64_t* stamp = t->stamp_dev[SCAN] + 2 * slot[i];
    void* args[] = {&stamp, &words, &stamp};
    devrt_block_use u = {t->stamps[SCAN], DEVRT_ACCESS_READ_WRITE};
    devrt_launch_desc d = {.stream = t->s[SCAN],
                           .kernel = t->d->k[EG_ZERO],
                           .grid = {1},
                           .block = {256},
                           .args = args,
                           .uses = &u,
                           .nuses = 1};
    before[i] = eg_now_ns();
    CALL(e, "devrt_launch (clock)", devrt_launch(t->d->rt, &d));
    CALL(e, "devrt_stream_synchronize", devrt_stream_synchronize(t->d->rt, t->s[SCAN]));
    after[i] = eg_now_ns();
  }
  uint64_t* h = malloc(16ull * t->stamp_cap);
  if (!h || read_block(t, t->stamps[SCAN], h, 16ull * t->stamp_cap)) {
    free(h);
    return h ? 1 : eg_fail(e, "out of host memory");
  }
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  for (int i = 0; i < N; i++) {
    int64_t a = (int64_t)h[2 * slot[i] + 1] - (int64_t)after[i],
            b = (int64_t)~h[2 * slot[i]] - (int64_t)before[i];
    if (a > lo) lo = a;
    if (b < hi) hi = b;
  }
  dev->clock_offset = lo / 2 + hi / 2;
  free(h);
  for (int j = 0; j < dev->ntenants; j++)
    for (size_t r = 0; r < e->t[dev->tenant[j]].nrecs; r++) {
      eg_launch_rec* x = &e->t[dev->tenant[j]].recs[r];
      if (x->end)
        x->start = (uint64_t)((int64_t)x->start - dev->clock_offset),
        x->end = (uint64_t)((int64_t)x->end - dev->clock_offset);
    }
  return 0;
}

static int calibrate(eg_engine* e) {
  for (int i = 0; e->cuda && i < e->nd; i++)
    if (e->devs[i].ntenants && calibrate_device(e, &e->devs[i])) return 1;
  return 0;
}

/* ---- the bench's measurement: a Q1 scan of resident chunks against a device-to-device copy,
 * both on a stream of the whole device before the tenants start, in memory from devrt's pool
 * outside the budget (1 GiB of chunks on a GPU: many times its L2), launches untracked (one
 * stream orders them) ---- */

static int measure(eg_engine* e) {
  eg_figures* f = e->f;
  eg_device* d0 = &e->devs[0];
  devrt_stream s;
  CALL(e, "devrt_stream_acquire", devrt_stream_acquire(d0->rt, DEVRT_ACQUIRE_FAIL, &s));
  uint64_t cap = e->chunk_rows, bytes = round_up(EG_LI_BYTES * cap, 256), first = 0;
  uint64_t n = e->cuda ? (1ull << 30) / bytes : 4, copy = e->cuda ? 256ull << 20 : 8ull << 20;
  unsigned grid = e->cuda ? (unsigned)d0->di.sm_count * 4 : 1;
  if (n < 2) n = 2;
  uint8_t *chunks, *a, *b;
  uint64_t *st, *none = NULL, words = 2 * n + n * EG_AGG_WORDS;
  CALL(e, "devrt_pool_alloc", devrt_pool_alloc(d0->rt, n * bytes, s, (void**)&chunks));
  CALL(e, "devrt_pool_alloc", devrt_pool_alloc(d0->rt, words * 8, s, (void**)&st));
  void* za[] = {&st, &words, &none};
  devrt_launch_desc d = {
      .stream = s, .kernel = d0->k[EG_ZERO], .grid = {grid}, .block = {256}, .args = za};
  CALL(e, "devrt_launch (zero)", devrt_launch(d0->rt, &d));
  for (uint64_t i = 0; i < n; i++, first += cap) {
    uint8_t* c = chunks + i * bytes;
    void* ga[] = {&c, &cap, &first, &cap, &none};
    d.kernel = d0->k[EG_GEN_LI], d.args = ga;
    CALL(e, "devrt_launch (generate)", devrt_launch(d0->rt, &d));
  }
  uint32_t cutoff = EG_Q1_BASE_DAY;
  for (uint64_t i = 0; i < n; i++) { /* the scans, back to back, each stamped */
    uint8_t* c = chunks + i * bytes;
    uint64_t *stamp = st + 2 * i, *slot = st + 2 * n + i * EG_AGG_WORDS;
    void* qa[] = {&c, &cap, &cap, &cutoff, &slot, &stamp};
    d.kernel = d0->k[EG_SCAN_Q1], d.args = qa;
    CALL(e, "devrt_launch (scan)", devrt_launch(d0->rt, &d));
  }
  uint64_t* h = calloc(2 * n, 8);
  if (!h) return eg_fail(e, "out of host memory");
  CALL(e, "devrt_memcpy_async", devrt_memcpy_async(d0->rt, h, st, 16 * n, s));
  CALL(e, "devrt_stream_synchronize", devrt_stream_synchronize(d0->rt, s));
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (~h[2 * i] < t0) t0 = ~h[2 * i];
    if (h[2 * i + 1] > t1) t1 = h[2 * i + 1];
  }
  free(h);
  if (t1 > t0) f->scan_gbs = (double)(n * cap * 9) / (double)(t1 - t0);
  /* The copy: ten copies each way, timed on the host around one synchronize; read and write bytes
   * both count, as bandwidth tests count a device copy. */
  CALL(e, "devrt_pool_alloc", devrt_pool_alloc(d0->rt, copy, s, (void**)&a));
  CALL(e, "devrt_pool_alloc", devrt_pool_alloc(d0->rt, copy, s, (void**)&b));
  CALL(e, "devrt_memcpy_async",
       devrt_memcpy_async(d0->rt, a, chunks, copy < n * bytes ? copy : n * bytes, s));
  CALL(e, "devrt_stream_synchronize", devrt_stream_synchronize(d0->rt, s));
  uint64_t c0 = eg_now_ns();
  for (int r = 0; r < 20; r++)
    CALL(e, "devrt_memcpy_async",
         devrt_memcpy_async(d0->rt, r % 2 ? a : b, r % 2 ? b : a, copy, s));
  CALL(e, "devrt_stream_synchronize", devrt_stream_synchronize(d0->rt, s));
  f->copy_gbs = 2.0 * 20 * (double)copy / (double)(eg_now_ns() - c0);
  void* all[] = {chunks, st, a, b};
  for (int i = 0; i < 4; i++) CALL(e, "devrt_pool_free", devrt_pool_free(d0->rt, all[i], s));
  CALL(e, "devrt_stream_synchronize", devrt_stream_synchronize(d0->rt, s));
  CALL(e, "devrt_stream_release", devrt_stream_release(d0->rt, s));
  return 0;
}

/* ---- phases ---- */

/* The main thread while `running` threads work: device samples, and the progress line. */
static void monitor(eg_engine* e, _Atomic int* running) {
  uint64_t next = 0, every = e->o.progress ? 100000000u : 1000000000u;
  while (atomic_load(running) > 0) {
    sample_device(e);
    if (!e->o.quiet && eg_now_ns() >= next) {
      if (next) eg_progress(e, false);
      next = eg_now_ns() + every;
    }
    sleep_ns(e->cuda ? 1000000u : 5000000u);
  }
  sample_device(e);
}

static void* alone_main(void* arg) {
  interactive_main(arg);
  atomic_store(&((eg_tenant*)arg)->e->alone_running, 0);
  return NULL;
}

static int phases(eg_engine* e) {
  eg_tenant* it = &e->t[0];
  e->t_alone0 = eg_now_ns();
  atomic_store(&e->alone_running, 1);
  int rc = pthread_create(&it->thread, NULL, alone_main, it);
  if (rc) return eg_fail(e, "pthread_create: %s", strerror(rc));
  monitor(e, &e->alone_running);
  pthread_join(it->thread, NULL);
  e->t_alone1 = e->t_load0 = eg_now_ns();
  if (atomic_load(&e->failed)) return 1;
  atomic_store(&e->batch_running, e->nt - 1);
  atomic_store(&e->phase, 1);
  for (int i = 1; i < e->nt; i++) {
    eg_tenant* t = &e->t[i];
    if ((rc = pthread_create(&t->checker, NULL, checker_main, t)) ||
        (rc = pthread_create(&t->thread, NULL, batch_main, t))) {
      eg_fail(e, "pthread_create: %s", strerror(rc));
      atomic_fetch_sub(&e->batch_running, e->nt - i);
      break;
    }
  }
  pthread_t inter;
  bool inter_ok = pthread_create(&inter, NULL, interactive_main, it) == 0;
  monitor(e, &e->batch_running);
  e->t_load1 = eg_now_ns();
  atomic_store(&e->phase, 2);
  for (int i = 1; i < e->nt; i++)
    if (e->t[i].thread) pthread_join(e->t[i].thread, NULL);
  if (inter_ok) pthread_join(inter, NULL);
  if (!e->o.quiet) eg_progress(e, true);
  /* Several devices: the distributed Q1, once the tenants are done. */
  /* With --ranks every rank runs the same collectives, after a failed check too (a rank that
   * skipped them would leave the others waiting). */
  if (dist(e) && (e->o.ranks || !atomic_load(&e->failed)) && eg_dist_run(e)) return 1;
  if (e->o.ranks && eg_dist_gather(e)) return 1;
  return atomic_load(&e->failed) ? 1 : 0;
}

/* ---- figures ---- */

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return (x > y) - (x < y);
}

/* The batch phase's busy fraction: the union of every stamped kernel span within the phase's
 * device span (first batch kernel start to last batch kernel end) over that span. */
static double busy_fraction(eg_engine* e) {
  size_t n = 0;
  uint64_t w0 = UINT64_MAX, w1 = 0;
  for (int i = 0; i < e->nt; i++) n += e->t[i].nrecs;
  uint64_t(*iv)[2] = malloc(n * sizeof *iv + 1);
  if (!iv) return 0;
  n = 0;
  for (int i = 0; i < e->nt; i++)
    for (size_t r = 0; r < e->t[i].nrecs; r++) {
      const eg_launch_rec* x = &e->t[i].recs[r];
      if (!x->end || x->end < x->start) continue;
      iv[n][0] = x->start, iv[n++][1] = x->end;
      if (i > 0 && x->start < w0) w0 = x->start;
      if (i > 0 && x->end > w1) w1 = x->end;
    }
  qsort(iv, n, sizeof *iv, cmp_u64); /* by start (the first word) */
  uint64_t covered = 0, cur0 = 0, cur1 = 0;
  for (size_t k = 0; k <= n; k++) {
    uint64_t a = k < n ? (iv[k][0] > w0 ? iv[k][0] : w0) : UINT64_MAX;
    uint64_t b = k < n ? (iv[k][1] < w1 ? iv[k][1] : w1) : UINT64_MAX;
    if (k < n && b <= a) continue;
    if (k == n || a > cur1) {
      covered += cur1 - cur0;
      cur0 = a, cur1 = b;
    } else if (b > cur1) {
      cur1 = b;
    }
  }
  free(iv);
  return w1 > w0 ? (double)covered / (double)(w1 - w0) : 0;
}

static void figures(eg_engine* e) {
  eg_figures* f = e->f;
  f->tenants = e->nt, f->credits = e->o.credits, f->scale = e->o.scale;
  f->lineitem_rows = e->li_rows, f->orders_rows = e->ord_rows, f->chunk_rows = e->chunk_rows;
  f->devices = e->nd;
  for (int i = 0; i < e->nd; i++) {
    eg_device* d = &e->devs[i];
    eg_device_figures* x = &f->d[i];
    x->ordinal = d->ordinal, x->tenants = d->ntenants;
    x->global_budget = d->global_budget, x->sum_sub = d->sum_sub, x->peak_held = d->peak_held;
    f->global_budget += d->global_budget, f->sum_sub += d->sum_sub, f->peak_held += d->peak_held;
    devrt_block_stats b;
    devrt_queue_stats q;
    if (devrt_block_stats_get(d->rt, &b) == DEVRT_OK) {
      f->blocks.waits_inserted += b.waits_inserted, f->blocks.launches += b.launches;
      f->blocks.waits_skipped_same_stream += b.waits_skipped_same_stream;
      f->blocks.waits_skipped_complete += b.waits_skipped_complete;
      f->blocks.waits_coalesced += b.waits_coalesced;
    }
    if (devrt_queue_stats_get(d->rt, &q) == DEVRT_OK) {
      f->queue.submitted += q.submitted, f->queue.issued_inline += q.issued_inline;
      f->queue.parked += q.parked, f->queue.device_waits += q.device_waits;
      f->queue.failed += q.failed, f->queue.host_hops += q.host_hops;
    }
  }
  f->alone_s = (double)(e->t_alone1 - e->t_alone0) / 1e9;
  f->load_s = (double)(e->t_load1 - e->t_load0) / 1e9;
  for (int i = 0; i < e->nt; i++) {
    eg_tenant* t = &e->t[i];
    eg_tenant_figures* x = &f->t[i];
    x->device = t->d->index;
    x->interactive = t->interactive, x->isolated = t->pinfo.isolated, x->sms = t->pinfo.sm_count;
    x->queries = atomic_load(&t->queries_done), x->rows = atomic_load(&t->rows_done);
    x->bytes = atomic_load(&t->bytes_done), x->chunks = atomic_load(&t->chunks_done);
    x->seconds = t->t_last > t->t_first ? (double)(t->t_last - t->t_first) / 1e9 : 0;
    x->rows_per_s = x->seconds > 0 ? (double)x->rows / x->seconds : 0;
    x->gb_per_s = x->seconds > 0 ? (double)x->bytes / x->seconds / 1e9 : 0;
    x->alone = eg_lat_of(t->lat_alone, t->nalone), x->load = eg_lat_of(t->lat_load, t->nload);
    x->sub_budget = t->sub_budget, x->retries = t->retries, x->held_back = t->held_back;
    for (int s = 0; s < EG_STAMPED; s++) f->thinned += t->stamp_stride[s] > 1;
    devrt_memory_stats ms;
    if (devrt_statistics_get(t->d->stats, t->tag, &ms) == DEVRT_OK)
      x->mem_high = (uint64_t)ms.bytes.peak;
  }
  f->checked_queries = atomic_load(&e->checked_queries);
  f->checked_chunks = atomic_load(&e->checked_chunks);
  f->mismatches = atomic_load(&e->mismatches);
  f->busy = busy_fraction(e);
}

/* Every check the run makes of devrt itself, beyond the query results. */
static void check_runtime(eg_engine* e) {
  eg_figures* f = e->f;
  if (f->queue.host_hops)
    eg_fail(e, "%" PRIu64 " dependencies went through the host (queue host_hops)",
            f->queue.host_hops);
  uint64_t retries = 0;
  for (int i = 0; i < e->nt; i++) retries += f->t[i].retries;
  if (f->queue.failed != retries) /* each retry is one allocation that failed its signal */
    eg_fail(e, "%" PRIu64 " submissions failed, %" PRIu64 " of them OVER_BUDGET retries",
            f->queue.failed, retries);
  for (int i = 0; i < e->nt; i++)
    if (f->t[i].mem_high > f->t[i].sub_budget)
      eg_fail(e, "tenant %d held %" PRIu64 " bytes, over its sub-budget of %" PRIu64, i,
              f->t[i].mem_high, f->t[i].sub_budget);
  if (f->checked_queries == 0) eg_fail(e, "no query was checked");
}

/* ---- the run ---- */

static void sizes(eg_engine* e) {
  eg_options* o = &e->o;
  if (o->scale <= 0) o->scale = e->cuda ? 10 : 0.25;
  /* A GPU chunk long enough that a scan's fixed cost (launch, ramp, the blocks' last adds: ~8 us on
   * an H200) is small beside its reading time: 16 M rows (151 MB of Q1 columns) read at 0.81-0.82
   * of the device copy's bandwidth on an H200, 8 M rows at 0.69. */
  if (!o->chunk_rows) o->chunk_rows = e->cuda ? 1u << 24 : 1u << 15;
  if (!o->queries && o->seconds <= 0) {
    if (e->cuda)
      o->seconds = 3;
    else
      o->queries = 4;
  }
  if (!o->alone) o->alone = e->cuda ? 1000 : 20;
  e->li_rows = (uint64_t)(o->scale * 6e6) / 4 * 4;
  if (e->li_rows < 1024) e->li_rows = 1024;
  e->chunk_rows = round_up(o->chunk_rows < e->li_rows ? o->chunk_rows : e->li_rows, 256);
  /* The interactive tenant's chunks: a quarter of the batch chunk, at most 512 K rows. */
  e->ichunk_rows = round_up(e->chunk_rows / 4 < (1u << 19) ? e->chunk_rows / 4 : 1u << 19, 256);
  e->ord_rows = e->li_rows / EG_LINES_PER_ORDER;
}

/* Device i's runtime on `ordinal` (owned: teardown proves nothing leaked) and its facts. */
static int open_device(eg_engine* e, int i, int ordinal) {
  eg_device* d = &e->devs[i];
  devrt_config cfg;
  CALL(e, "devrt_config_init", devrt_config_init(&cfg));
  cfg.ordinal = ordinal;
  if (e->o.ranks && cfg.host_devices < (unsigned)ordinal + 1) /* host: a process's own devices */
    cfg.host_devices = (unsigned)ordinal + 1;
  unsigned need = (unsigned)e->nt * EG_STREAMS;
  if (cfg.partition_streams < need) cfg.partition_streams = need;
  d->index = i, d->ordinal = ordinal;
  CALL(e, "devrt_runtime_create", devrt_runtime_create(&cfg, &d->rt));
  CALL(e, "devrt_device_info_get", devrt_device_info_get(d->rt, &d->di));
  return 0;
}

/* The first device, then as many more as --devices asks (the backend's count from --ordinal on,
 * for `all`), and the tenants spread over them: tenant i on device i % devices. */
static int open_devices(eg_engine* e) {
  devrt_runtime_info ri;
  if (e->o.ranks) { /* one device per rank: --ordinal + the local rank */
    devrt_job job;
    CALL(e, "devrt_job_get", devrt_job_get(&job));
    if (job.nranks > EG_MAX_RANKS)
      return eg_fail(e, "--ranks: %d ranks (%s), at most %d", job.nranks, job.launcher,
                     EG_MAX_RANKS);
    e->rank = job.rank, e->nranks = job.nranks, e->local_rank = job.local_rank;
    if (e->rank > 0) /* progress, table, trace and report come from rank 0 */
      e->o.quiet = true, e->o.progress = false, e->o.trace_path = e->o.report_dir = NULL;
  }
  if (open_device(e, 0, e->o.ordinal + e->local_rank)) return 1;
  e->nd = 1;
  CALL(e, "devrt_runtime_info_get", devrt_runtime_info_get(e->devs[0].rt, &ri));
  e->cuda = ri.backend == DEVRT_BACKEND_CUDA;
  snprintf(e->f->backend, sizeof e->f->backend, "%s", ri.backend_name);
  if (e->o.devices != 1 && e->o.devices != 0) {
    int count = 0;
    CALL(e, "devrt_peer_count", devrt_peer_count(e->devs[0].rt, &count));
    int avail = count - e->o.ordinal, want = e->o.devices == EG_ALL_DEVICES ? avail : e->o.devices;
    if (want > EG_MAX_DEVICES && e->o.devices == EG_ALL_DEVICES) want = EG_MAX_DEVICES;
    if (want < 1 || want > avail || want > EG_MAX_DEVICES)
      return eg_fail(e,
                     "--devices %d: the %s backend has %d device(s) from ordinal %d (at most %d "
                     "used; DEVRT_HOST_DEVICES sets the host backend's)",
                     want, e->cuda ? "cuda" : "host", avail, e->o.ordinal, EG_MAX_DEVICES);
    for (int i = 1; i < want; i++, e->nd++)
      if (open_device(e, i, e->o.ordinal + i)) return 1;
  }
  for (int i = 0; i < e->nt; i++) {
    eg_device* d = &e->devs[i % e->nd];
    e->t[i].d = d, e->t[i].index = (unsigned)d->ntenants;
    d->tenant[d->ntenants++] = i;
  }
  return 0;
}

/* "132 SMs: 16+116" (and why it fell back) in buf. */
static void layout_text(const eg_engine* e, const devrt_layout_plan* p, char* buf, size_t n) {
  int at = snprintf(buf, n, "%u SMs:", p->device_sms);
  for (unsigned i = 0; i < p->partitions && at < (int)n - 8; i++)
    at += snprintf(buf + at, n - (size_t)at, "%s%u", i ? "+" : " ", p->sm_counts[i]);
  if (!p->isolated && p->fallback_reason[0] && !e->o.plain && at < (int)n)
    snprintf(buf + at, n - (size_t)at, " (%s)", p->fallback_reason);
}

/* The engine's kernels on device d: its fatbin on cuda, its host table on the host backend. */
static int load_kernels(eg_engine* e, eg_device* d) {
  if (e->cuda) {
#ifdef EG_HAVE_FATBIN
    CALL(e, "devrt_module_load (engine kernels)", devrt_module_load(d->rt, eg_fatbin, &d->mod));
#else
    return eg_fail(e, "this devrt was built without nvcc: the engine's kernels have no CUDA image");
#endif
  } else {
    CALL(e, "devrt_module_load_host",
         devrt_module_load_host(d->rt, eg_host_kernels, eg_host_kernel_count, &d->mod));
  }
  for (int s = 0; s < EG_NSTAGES; s++)
    CALL(e, kernel_names[s], devrt_kernel_get(d->mod, kernel_names[s], &d->k[s]));
  return 0;
}

static int setup(eg_engine* e) {
  if (open_devices(e)) return 1;
  /* Several devices: their links and communicators first (it fails here without NCCL). */
  if (dist(e) && eg_dist_setup(e)) return 1;
  bool same = true;
  for (int i = 1; i < e->nd; i++) same = same && !strcmp(e->devs[i].di.name, e->devs[0].di.name);
  int at = snprintf(e->f->device, sizeof e->f->device, e->nd > 1 && same ? "%d x " : "", e->nd);
  for (int i = 0; i < (same ? 1 : e->nd) && at < (int)sizeof e->f->device; i++)
    at += snprintf(e->f->device + at, sizeof e->f->device - (size_t)at, "%s%s", i ? ", " : "",
                   e->devs[i].di.name);
  sizes(e);
  if (eg_plan(e)) return 1;
  for (int i = 0; i < e->nd; i++) budgets(e, &e->devs[i]);
  e->live_cap = 4096;
  e->live_ptr = calloc(e->live_cap, sizeof *e->live_ptr);
  e->live_meta = calloc(e->live_cap, sizeof *e->live_meta);
  if (!e->live_ptr || !e->live_meta) return eg_fail(e, "out of host memory");
  for (int i = 0; i < e->nd; i++) {
    eg_device* d = &e->devs[i];
    if (build_stack(e, d) || (d->ntenants && make_layout(e, d)) || load_kernels(e, d)) return 1;
    if (d->layout) layout_text(e, &d->linfo.plan, e->f->d[i].layout, sizeof e->f->d[i].layout);
  }
  const devrt_layout_plan* p = &e->devs[0].linfo.plan;
  snprintf(e->f->mode, sizeof e->f->mode, "%s%s",
           e->o.plain    ? "plain streams"
           : p->isolated ? "partitions"
                         : "fallback",
           e->o.graphs ? ", graphs" : "");
  snprintf(e->f->layout, sizeof e->f->layout, "%s", e->f->d[0].layout);
  if (e->o.measure && measure(e)) return 1;
  for (int i = 0; i < e->nt; i++)
    if (tenant_init(e, i)) return 1;
  return 0;
}

/* Everything back, in order; a runtime refuses to go while a block, a semaphore, the layout or a
 * peer link lives, so a leak in the engine fails the run. */
static void teardown(eg_engine* e) {
  for (int i = 0; i < e->nt; i++) {
    eg_tenant* t = &e->t[i];
    devrt_runtime* rt = t->d ? t->d->rt : NULL;
    for (int s = 0; s < EG_STREAMS && t->s[s]; s++) {
      if (devrt_stream_synchronize(rt, t->s[s]) != DEVRT_OK)
        eg_fail(e, "teardown: %s", devrt_last_error());
    }
    for (int s = 0; s < EG_STAMPED; s++)
      if (t->stamps[s] && devrt_block_free(rt, t->stamps[s]) != DEVRT_OK)
        eg_fail(e, "teardown: devrt_block_free: %s", devrt_last_error());
    for (int k = 0; t->gparts && k < e->ninter; k++) {
      if (t->graphs[k] && devrt_graph_destroy(t->graphs[k]) != DEVRT_OK)
        eg_fail(e, "teardown: devrt_graph_destroy: %s", devrt_last_error());
      if (t->gparts[k] && devrt_block_free(rt, t->gparts[k]) != DEVRT_OK)
        eg_fail(e, "teardown: devrt_block_free: %s", devrt_last_error());
    }
    if (t->gchunk && devrt_block_free(rt, t->gchunk) != DEVRT_OK)
      eg_fail(e, "teardown: devrt_block_free: %s", devrt_last_error());
    free(t->graphs), free(t->gparts);
    for (int s = 0; s < EG_STREAMS; s++)
      if (t->s[s]) devrt_stream_release(rt, t->s[s]);
    devrt_semaphore* sems[] = {t->gsem[0], t->gsem[1], t->ssem, t->credit, t->asem, t->qsem};
    for (int s = 0; s < 6; s++)
      if (sems[s]) devrt_semaphore_destroy(sems[s]);
  }
  for (int i = 0; i < e->nd; i++)
    if (e->devs[i].comm && devrt_comm_destroy(e->devs[i].comm) != DEVRT_OK)
      eg_fail(e, "teardown: devrt_comm_destroy: %s", devrt_last_error());
  for (int i = 0; i < e->nd; i++) /* the peer links (several devices) */
    for (int j = i + 1; j < e->nd; j++) {
      devrt_peer_info pi;
      if (e->devs[i].rt && e->devs[j].rt &&
          devrt_peer_query(e->devs[i].rt, e->devs[j].rt, &pi) == DEVRT_OK && pi.enabled &&
          devrt_peer_disable(e->devs[i].rt, e->devs[j].rt) != DEVRT_OK)
        eg_fail(e, "teardown: devrt_peer_disable: %s", devrt_last_error());
    }
  for (int i = 0; i < e->nd; i++) {
    eg_device* d = &e->devs[i];
    if (!d->rt) continue;
    devrt_reap_pending(d->rt, DEVRT_REAP_WAIT, NULL);
    if (d->layout && devrt_layout_destroy(d->rt, d->layout) != DEVRT_OK)
      eg_fail(e, "teardown: devrt_layout_destroy: %s", devrt_last_error());
    if (d->mod) devrt_module_unload(d->rt, d->mod);
    if (devrt_runtime_destroy(d->rt) != DEVRT_OK)
      eg_fail(e, "teardown: devrt_runtime_destroy: %s", devrt_last_error());
  }
}

static void release(eg_engine* e) {
  for (int i = 0; i < EG_MAX_TENANTS; i++) {
    eg_tenant* t = &e->t[i];
    free(t->recs), free(t->mrecs), free(t->lat_alone), free(t->lat_load), free(t->host_parts);
    for (int s = 0; s < EG_STAMPED; s++) free(t->stamp_free[s]);
    if (t->e) pthread_mutex_destroy(&t->mu), pthread_cond_destroy(&t->cv);
  }
  free(e->live), free(e->dev), free(e->live_ptr), free(e->live_meta);
  eg_plan_free(e);
  pthread_mutex_destroy(&e->err_mu);
  pthread_mutex_destroy(&e->mem_mu);
  for (int i = 0; i < EG_MAX_DEVICES; i++) pthread_mutex_destroy(&e->devs[i].admit_mu);
  free(e);
}

int eg_run(const eg_options* o, eg_figures* f) {
  eg_engine* e = calloc(1, sizeof *e);
  memset(f, 0, sizeof *f);
  if (!e) {
    snprintf(f->error, sizeof f->error, "out of host memory");
    return 1;
  }
  e->o = *o, e->f = f, e->t0 = eg_now_ns();
  e->nranks = 1;
  eg_options_default(&e->o);
  e->nt = e->o.tenants;
  pthread_mutex_init(&e->err_mu, NULL);
  pthread_mutex_init(&e->mem_mu, NULL);
  for (int i = 0; i < EG_MAX_DEVICES; i++) pthread_mutex_init(&e->devs[i].admit_mu, NULL);
  const char* corrupt = getenv("DEVRT_DEMO_CORRUPT");
  if (!corrupt || sscanf(corrupt, "%d:%d:%d", &e->corrupt[0], &e->corrupt[1], &e->corrupt[2]) != 3)
    e->corrupt[0] = -1;
  if (e->nt < 2 || e->nt > EG_MAX_TENANTS || e->o.credits < 1) {
    eg_fail(e, "--tenants must be 2..%d and --credits at least 1", EG_MAX_TENANTS);
  } else {
    if (!setup(e)) { /* stamps too after a failed check: the report shows what ran */
      f->started = true;
      phases(e);
      if (!read_stamps(e)) calibrate(e);
    }
    if (e->devs[0].stats) figures(e); /* a failed run still reports what it did */
    f->rank = e->rank, f->nranks = e->nranks;
  }
  teardown(e);
  if (!atomic_load(&e->failed)) check_runtime(e);
  f->wall_s = (double)(eg_now_ns() - e->t0) / 1e9;
  for (int pass = 0; pass < 2; pass++) { /* the files show the verdict; failing to write fails */
    f->ok = !atomic_load(&e->failed);
    snprintf(f->error, sizeof f->error, "%s", e->error);
    if (pass || !e->devs[0].stats) break;
    if (e->o.trace_path) eg_write_trace(e, e->o.trace_path);
    if (e->o.report_dir) eg_write_report(e, f, e->o.report_dir);
  }
  release(e);
  return f->ok ? 0 : 1;
}
