/* bench_alloc.c: `devrt bench alloc`: the resource stack against the pool's raw stream-ordered
 * alloc/free pair (cuMemAllocFromPoolAsync / cuMemFreeAsync on devrt's pool, called through the
 * backend with no devrt layer), same run: hot pairs, RMM's random_allocations shape, threads,
 * logging. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "bench.h"
#include "runtime/runtime.h"

typedef struct actx {
  devrt_runtime* rt;
  devrt_resource* stack; /* the stack under test */
  devrt_stream s;
  dv_stream* raw_s;
  size_t size;
} actx;

#define BENCH_SUITE "alloc"

static int stack_pair(void* p, int n) {
  actx* c = p;
  for (int i = 0; i < n; i++) {
    void* ptr;
    TRY("allocate", devrt_resource_allocate(c->stack, c->size, c->s, "bench", &ptr));
    TRY("deallocate", devrt_resource_deallocate(c->stack, ptr, c->size, c->s));
  }
  return 0;
}
static int raw_pair(void* p, int n) {
  actx* c = p;
  for (int i = 0; i < n; i++) {
    void* ptr;
    TRY("pool_alloc", c->rt->be->pool_alloc(c->rt->dev, c->size, c->raw_s, &ptr));
    TRY("pool_free", c->rt->be->pool_free(c->rt->dev, ptr, c->raw_s));
  }
  return 0;
}
static int sync_reap(void* p) {
  actx* c = p;
  TRY("sync", c->rt->be->stream_sync(c->raw_s));
  TRY("reap", devrt_resource_reap(c->stack, DEVRT_REAP_WAIT, NULL));
  return 0;
}

/* ---- RMM's random_allocations: 73% allocate, 27% free a random live block ---- */
typedef struct rnd {
  void* p;
  size_t n;
} rnd;
static uint64_t rng_next(uint64_t* x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

typedef struct rctx {
  actx* c;
  size_t max_size;
  uint64_t max_live;
  int steps;
  rnd* live;
} rctx;

static int random_run(rctx* r, bool raw) {
  actx* c = r->c;
  uint64_t seed = 0x9e3779b97f4a7c15ull, used = 0;
  int n = 0;
  for (int i = 0; i < r->steps; i++) {
    size_t sz = 1 + rng_next(&seed) % r->max_size;
    bool alloc = rng_next(&seed) % 100 < 73 && used + sz <= r->max_live;
    if (alloc || n == 0) {
      if (!alloc) continue;
      void* p;
      if (raw)
        TRY("pool_alloc", c->rt->be->pool_alloc(c->rt->dev, sz, c->raw_s, &p));
      else
        TRY("allocate", devrt_resource_allocate(c->stack, sz, c->s, "random", &p));
      r->live[n++] = (rnd){p, sz};
      used += sz;
    } else {
      int k = (int)(rng_next(&seed) % (uint64_t)n);
      rnd v = r->live[k];
      r->live[k] = r->live[--n];
      if (raw)
        TRY("pool_free", c->rt->be->pool_free(c->rt->dev, v.p, c->raw_s));
      else
        TRY("deallocate", devrt_resource_deallocate(c->stack, v.p, v.n, c->s));
      used -= v.n;
    }
  }
  while (n > 0) {
    rnd v = r->live[--n];
    if (raw)
      TRY("pool_free", c->rt->be->pool_free(c->rt->dev, v.p, c->raw_s));
    else
      TRY("deallocate", devrt_resource_deallocate(c->stack, v.p, v.n, c->s));
  }
  return 0;
}
static int random_stack(void* p, int iters) {
  (void)iters;
  return random_run(p, false);
}
static int random_raw(void* p, int iters) {
  (void)iters;
  return random_run(p, true);
}
static int random_sync(void* p) { return sync_reap(((rctx*)p)->c); }

/* ---- threads, each on its own stream ---- */
enum {
  RUN_STACK,
  RUN_RAW,
  RUN_PRIVATE
}; /* what a thread runs; private: CPU work, the machine's own scaling */
typedef struct tctx {
  actx c;
  int mode; /* RUN_* */
  int iters, threads;
  _Atomic int* ready; /* a spinning start line: the threads begin together */
  uint64_t t0, t1;
  int rc;
} tctx;
/* What one stack pair costs in private CPU work: four independent chains into a thread-local
 * table, no shared line. Its scaling over threads is the machine's ceiling for the rows below (a
 * VM's vCPUs may share physical cores). */
static int private_work(int n) {
  static _Thread_local uint64_t tab[512];
  uint64_t x[4] = {1, 2, 3, 4};
  for (int i = 0; i < n; i++)
    for (int k = 0; k < 12; k++) {
      for (int j = 0; j < 4; j++) x[j] = x[j] * 6364136223846793005ull + 2 * (uint64_t)j + 1;
      tab[x[0] >> 55] += x[1], tab[x[2] >> 55] ^= x[3], tab[x[1] >> 55] += tab[x[3] >> 55];
    }
  return tab[7] == 42; /* never: keeps the work */
}
static void* thread_body(void* p) {
  tctx* t = p;
  atomic_fetch_add(t->ready, 1);
  while (atomic_load(t->ready) < t->threads) sched_yield();
  t->t0 = bench_now_ns();
  t->rc = t->mode == RUN_RAW       ? raw_pair(&t->c, t->iters)
          : t->mode == RUN_PRIVATE ? private_work(t->iters)
                                   : stack_pair(&t->c, t->iters);
  t->t1 = bench_now_ns();
  return NULL;
}
typedef struct mt {
  actx* base;
  int threads;
  tctx* t;
  uint64_t span;
} mt;
/* Timed from the first thread's start to the last one's end: creating and joining the threads
 * is excluded from the round. */
static int mt_run(mt* m, int mode, int iters) {
  uint64_t c0 = bench_now_ns();
  pthread_t th[16];
  _Atomic int ready = 0;
  for (int i = 0; i < m->threads; i++) {
    m->t[i].mode = mode, m->t[i].iters = iters, m->t[i].threads = m->threads,
    m->t[i].ready = &ready;
    pthread_create(&th[i], NULL, thread_body, &m->t[i]);
  }
  int rc = 0;
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (int i = 0; i < m->threads; i++) {
    pthread_join(th[i], NULL), rc |= m->t[i].rc;
    t0 = m->t[i].t0 < t0 ? m->t[i].t0 : t0, t1 = m->t[i].t1 > t1 ? m->t[i].t1 : t1;
  }
  m->span = t1 - t0;
  bench_exclude((bench_now_ns() - c0) - (t1 - t0));
  return rc;
}
/* Reported per op of all threads together: ns = wall time / (threads * iters). */
static int mt_stack(void* p, int n) {
  mt* m = p;
  return mt_run(m, RUN_STACK, n / m->threads);
}
static int mt_raw(void* p, int n) {
  mt* m = p;
  return mt_run(m, RUN_RAW, n / m->threads);
}
/* The machine's own scaling: 16 threads of private work against one, the same work per thread
 * (median of 5). */
static double private_scaling(mt* m, int iters) {
  double span[2][5];
  for (int k = 0; k < 5; k++)
    for (int i = 0; i < 2; i++) {
      m->threads = i ? 16 : 1;
      mt_run(m, RUN_PRIVATE, iters);
      span[i][k] = (double)m->span;
    }
  return 16 * bench_stat_of(span[0], 5).median / bench_stat_of(span[1], 5).median;
}
static int mt_sync(void* p) {
  mt* m = p;
  for (int i = 0; i < m->threads; i++)
    if (sync_reap(&m->t[i].c)) return -1;
  return 0;
}

/* A stack as the runtime builds it, with or without the cache and logging, statistics' peaks exact
 * or an upper bound. */
static devrt_status make_stack(devrt_runtime* rt, bool cache, const char* log_path, bool bound,
                               uint64_t limit, devrt_resource** out) {
  devrt_config c = rt->cfg;
  c.cache = cache, c.log_path = log_path, c.log_jsonl = false, c.stats_peak_bound = bound;
  return dv_stack_build(rt, &c, limit, out);
}

int bench_alloc(const cli_opts* o) {
  actx c;
  memset(&c, 0, sizeof c);
  devrt_config cfg; /* 16 threads each on its own stream, plus the main one */
  TRY("config", devrt_config_init(&cfg));
  if (cfg.stream_pool_size < 64) cfg.stream_pool_size = 64;
  TRY("configure", devrt_configure(o->ordinal, &cfg));
  TRY("runtime", devrt_runtime_get(o->ordinal, &c.rt));
  bool cuda = strcmp(c.rt->be->name, "cuda") == 0;
  uint64_t limit = c.rt->info.total_memory / 10 * 9;
  TRY("acquire", devrt_stream_acquire(c.rt, DEVRT_ACQUIRE_FAIL, &c.s));
  TRY("raw stream", c.rt->be->stream_create(c.rt->dev, NULL, 0, &c.raw_s));
  devrt_resource *full, *nocache, *logged, *bounded;
  TRY("stack", make_stack(c.rt, true, NULL, false, limit, &full));
  TRY("stack", make_stack(c.rt, true, NULL, true, limit, &bounded));
  TRY("stack", make_stack(c.rt, false, NULL, false, limit, &nocache));
  TRY("stack", make_stack(c.rt, true, "/dev/null", false, limit, &logged));
  /* Hot pairs: rounds of 1000 pairs are about a millisecond. The rows share their rounds
   * (bench_rows), and 601 of them span about 5 s: the host's slow phases (a second or so, the raw
   * pair up to twice as slow) fall on every row alike instead of on whichever row they meet. */
  int rounds = o->rounds > 0 ? o->rounds : 601, rc = 0;
  bench_suite b;
  bench_begin(&b, o, "alloc", c.rt->info.name, c.rt->be->name);
  static const size_t hot[] = {256, 64 << 10, 4 << 20};
  static const char* const names[] = {
      "hot_256B_full_stack", "hot_64KiB_full_stack", "hot_4MiB_full_stack", "hot_256B_no_cache",
      "hot_64KiB_no_cache",  "hot_4MiB_no_cache",    "hot_64KiB_logging_on"};
  actx hc[7];
  bench_row rows[7];
  for (int j = 0; j < 7; j++) {
    hc[j] = c;
    hc[j].stack = j == 6 ? logged : j < 3 ? full : nocache;
    hc[j].size = j == 6 ? 64 << 10 : hot[j % 3];
    rows[j] = (bench_row){.op = names[j],
                          .ctx = &hc[j],
                          .devrt_fn = stack_pair,
                          .raw_fn = raw_pair,
                          .sync = sync_reap,
                          .iters = 1000,
                          .raw_iters = 1000};
  }
  rc = bench_rows(&b, rows, 7, rounds);

  static const size_t maxes[] = {1 << 20, 4 << 20, 64 << 20};
  static const char* const rnames[] = {"random_max_1MiB", "random_max_4MiB", "random_max_64MiB"};
  int steps = cuda ? 100000 : 20000;
  rnd* live = malloc(sizeof(rnd) * (size_t)steps);
  for (int i = 0; i < 3 && !rc; i++) {
    c.stack = full;
    rctx r = {&c, maxes[i], cuda ? (8ull << 30) : (512ull << 20), steps, live};
    rc = bench_pair(&b, rnames[i], &r, random_stack, random_raw, random_sync, steps, cuda ? 5 : 3);
  }
  free(live);

  /* The thread rows run the full stack with statistics' peaks kept as a bound (DEVRT_STATS_PEAK=
   * bound: no shared line a call), then 16 threads once more with exact peaks (the default). */
  static const int nthreads[] = {1, 4, 8, 16, 16};
  tctx t[16], tx[16];
  memset(t, 0, sizeof t);
  for (int i = 0; i < 16 && !rc; i++) {
    t[i].c = c;
    t[i].c.stack = bounded, t[i].c.size = 64 << 10;
    TRY("acquire", devrt_stream_acquire(c.rt, DEVRT_ACQUIRE_FAIL, &t[i].c.s));
    TRY("raw stream", c.rt->be->stream_create(c.rt->dev, NULL, 0, &t[i].c.raw_s));
    tx[i] = t[i], tx[i].c.stack = full;
  }
  /* Long enough per thread (cuda: 300000 pairs, 15 ms or more) that starting 16 threads and a
   * descheduled thread are noise; the raw side runs 4000 pairs a thread (it slows to microseconds
   * a pair under 16 threads). Fewer rounds, shared by the four rows as the hot pairs' are. */
  int per_thread = cuda ? 300000 : 20000, raw_per_thread = cuda ? 4000 : 2000,
      trounds = o->rounds > 0 ? o->rounds : 15;
  double scale[5] = {0};
  static const char* const tnames[] = {"threads_1_64KiB", "threads_4_64KiB", "threads_8_64KiB",
                                       "threads_16_64KiB", "threads_16_64KiB_exact"};
  mt m[5];
  for (int i = 0; i < 5; i++) {
    m[i] = (mt){.base = &c, .t = i < 4 ? t : tx, .threads = nthreads[i]};
    rows[i] = (bench_row){.op = tnames[i],
                          .ctx = &m[i],
                          .devrt_fn = mt_stack,
                          .raw_fn = mt_raw,
                          .sync = mt_sync,
                          .iters = per_thread * nthreads[i],
                          .raw_iters = raw_per_thread * nthreads[i]};
  }
  if (!rc) rc = bench_rows(&b, rows, 5, trounds);
  for (int i = 0; i < 5 && !rc; i++) scale[i] = rows[0].devrt.median / rows[i].devrt.median;
  double machine = rc ? 0 : private_scaling(&m[3], per_thread);
  char fields[256] = "";
  bench_cat(fields, sizeof fields,
            "\"thread_scaling\":{\"threads_4\":%.2f,\"threads_8\":%.2f,\"threads_16\":%.2f,"
            "\"threads_16_exact_peak\":%.2f,\"goal_16\":8.0,\"private_work_16\":%.2f}",
            scale[1], scale[2], scale[3], scale[4], machine);
  bench_end_fields(&b, fields);
  if (!o->json && !rc)
    printf(
        "throughput with caching against one thread (statistics' peaks a bound): 4 threads %.2fx, "
        "8 threads %.2fx, 16 threads %.2fx (goal at 16: >= 8x); 16 threads with exact peaks (the "
        "default) %.2fx;\n"
        "private CPU work on 16 threads against one, this machine's ceiling: %.2fx\n",
        scale[1], scale[2], scale[3], scale[4], machine);
  for (int i = 0; i < 16; i++) {
    if (t[i].c.s) devrt_stream_release(c.rt, t[i].c.s);
    if (t[i].c.raw_s) c.rt->be->stream_destroy(c.rt->dev, t[i].c.raw_s);
  }
  devrt_resource_release(full);
  devrt_resource_release(bounded);
  devrt_resource_release(nocache);
  devrt_resource_release(logged);
  c.rt->be->stream_destroy(c.rt->dev, c.raw_s);
  devrt_stream_release(c.rt, c.s);
  return rc ? 1 : 0;
}
