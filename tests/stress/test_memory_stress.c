/* test_memory_stress.c: the resource stack under threads: 16 threads allocating at random never
 * push the budget past its limit; reaps racing frees from 8 threads lose and double count
 * nothing, every figure back to zero at the end; reaps from 4 threads at once on one stream's
 * frees retire each byte once; 80 threads at once (past the 64 owned shards, so some share
 * theirs), each freeing a neighbour's block too, leave every counter exact. */
#include <pthread.h>
#include "test.h"

#define THREADS 16
#define MiB (1ull << 20)

typedef struct {
  devrt_runtime* rt;
  devrt_resource* top;
  uint64_t limit;
  int id, iters;
  _Atomic int* stop;
  int violations, refusals, errors;
} worker;

static uint64_t rng(uint64_t* x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

static void* run(void* p) {
  worker* w = p;
  devrt_stream s;
  if (devrt_stream_acquire(w->rt, DEVRT_ACQUIRE_SHARE, &s)) {
    w->errors++;
    return NULL;
  }
  uint64_t seed = 0x1234567ull * (unsigned)(w->id + 1);
  void* held[8] = {0};
  size_t sizes[8] = {0};
  for (int i = 0; i < w->iters; i++) {
    int k = (int)(rng(&seed) % 8);
    if (held[k]) {
      if (devrt_resource_deallocate(w->top, held[k], sizes[k], s)) {
        if (!w->errors++) fprintf(stderr, "deallocate: %s\n", devrt_last_error());
      }
      held[k] = NULL;
    } else {
      sizes[k] = 1 + rng(&seed) % (2 * MiB);
      devrt_status st = devrt_resource_allocate(w->top, sizes[k], s, "stress", &held[k]);
      if (st == DEVRT_ERR_OVER_BUDGET)
        w->refusals++, held[k] = NULL;
      else if (st) {
        if (!w->errors++) fprintf(stderr, "allocate: %s\n", devrt_last_error());
        held[k] = NULL;
      }
      /* What the device really holds (the figures themselves may double count for a moment:
       * every transition adds before it subtracts). */
      devrt_pool_stats ps;
      if (devrt_pool_stats_get(w->rt, &ps))
        w->errors++;
      else if (ps.used_current > w->limit)
        w->violations++;
    }
    if (i % 64 == 0) devrt_resource_reap(w->top, 0, NULL); /* reaps race the other threads' frees */
  }
  for (int k = 0; k < 8; k++)
    if (held[k] && devrt_resource_deallocate(w->top, held[k], sizes[k], s)) w->errors++;
  devrt_stream_synchronize(w->rt, s);
  devrt_stream_release(w->rt, s);
  return NULL;
}

static void stress(devrt_runtime* rt, devrt_resource* top, uint64_t limit, int nthreads,
                   const char* what) {
  worker w[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < nthreads; i++) {
    w[i] = (worker){.rt = rt, .top = top, .limit = limit, .id = i, .iters = 3000};
    pthread_create(&t[i], NULL, run, &w[i]);
  }
  int violations = 0, refusals = 0, errors = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(t[i], NULL);
    violations += w[i].violations, refusals += w[i].refusals, errors += w[i].errors;
  }
  CHECK_OK(devrt_resource_trim(top, NULL));
  CHECK_OK(devrt_resource_reap(top, DEVRT_REAP_WAIT, NULL));
  devrt_resource_figures f;
  CHECK_OK(devrt_resource_query(top, &f));
  printf(
      "%s: %d threads, %d refusals (OVER_BUDGET), %d pool-over-limit observations, %d errors; end "
      "live %llu pending %llu cached %llu\n",
      what, nthreads, refusals, violations, errors, (unsigned long long)f.live_bytes,
      (unsigned long long)f.pending_bytes, (unsigned long long)f.cached_bytes);
  CHECK(violations == 0 && errors == 0 && refusals > 0);
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0 && f.cached_bytes == 0 &&
        f.available_bytes == limit);
}

/* ---- reaps racing each other over one stream's frees ---- */
enum { REAPERS = 4, FREES = 20000 };
typedef struct {
  devrt_resource* r;
  _Atomic int* stop;
  uint64_t reaped;
  int errors;
} reaper;
static void* reap_run(void* p) {
  reaper* w = p;
  while (!atomic_load(w->stop)) {
    uint64_t n = 0;
    if (devrt_resource_reap(w->r, 0, &n)) w->errors++;
    if (n > (uint64_t)FREES << 10)
      w->errors++; /* a batch below what was covered: "negative" bytes */
    w->reaped += n;
  }
  return NULL;
}
static void concurrent_reaps(devrt_runtime* rt) {
  devrt_resource* leaf;
  devrt_stream s;
  REQUIRE_OK(devrt_async_resource_create(rt, &leaf));
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  _Atomic int stop = 0;
  reaper w[REAPERS];
  pthread_t t[REAPERS];
  for (int i = 0; i < REAPERS; i++)
    w[i] = (reaper){leaf, &stop, 0, 0}, pthread_create(&t[i], NULL, reap_run, &w[i]);
  int errors = 0;
  uint64_t reaped = 0;
  for (int i = 0; i < FREES; i++) {
    void* q;
    if (devrt_resource_allocate(leaf, 1000, s, "reaped", &q) ||
        devrt_resource_deallocate(leaf, q, 1000, s))
      errors++;
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < REAPERS; i++)
    pthread_join(t[i], NULL), errors += w[i].errors, reaped += w[i].reaped;
  uint64_t last = 0;
  CHECK_OK(devrt_resource_reap(leaf, DEVRT_REAP_WAIT, &last));
  devrt_resource_figures f;
  CHECK_OK(devrt_resource_query(leaf, &f));
  uint64_t freed = FREES * ((1000 + f.granularity - 1) / f.granularity *
                            f.granularity); /* as the pool rounds 1000 bytes */
  printf(
      "%d reapers over one stream's %d frees: %d errors, %llu bytes reaped by them, %llu after; "
      "end live %llu pending %llu\n",
      REAPERS, FREES, errors, (unsigned long long)reaped, (unsigned long long)last,
      (unsigned long long)f.live_bytes, (unsigned long long)f.pending_bytes);
  CHECK(errors == 0 && reaped + last == freed && f.reaped_bytes == freed);
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0);
  devrt_stream_release(rt, s);
  devrt_resource_release(leaf);
}

/* ---- more live threads than owned shards ---- */
enum { CROWD = 80, CROWD_ITERS = 200 };
typedef struct {
  devrt_runtime* rt;
  devrt_resource* top;
  pthread_barrier_t* bar;
  void** handed; /* [CROWD]: the block each thread leaves for its neighbour */
  int id, errors;
} crowd;
static void* crowd_run(void* p) {
  crowd* c = p;
  devrt_stream s;
  if (devrt_stream_acquire(c->rt, DEVRT_ACQUIRE_SHARE, &s)) {
    c->errors++;
    return NULL;
  }
  pthread_barrier_wait(c->bar); /* all 80 alive: the last ones take shared shards */
  for (int i = 0; i < CROWD_ITERS; i++) {
    void* q;
    if (devrt_resource_allocate(c->top, 4096 + (size_t)i, s, i & 1 ? "odd" : "even", &q) ||
        devrt_resource_deallocate(c->top, q, 4096 + (size_t)i, s))
      c->errors++;
  }
  if (devrt_resource_allocate(c->top, 1000, s, "handed", &c->handed[c->id])) c->errors++;
  pthread_barrier_wait(c->bar);
  if (devrt_resource_deallocate(c->top, c->handed[(c->id + 1) % CROWD], 1000, s))
    c->errors++; /* another thread's */
  devrt_stream_synchronize(c->rt, s);
  devrt_stream_release(c->rt, s);
  return NULL;
}
static void shards_past_owned(devrt_runtime* rt) {
  devrt_resource *leaf, *cache, *stats;
  REQUIRE_OK(devrt_async_resource_create(rt, &leaf));
  REQUIRE_OK(devrt_caching_resource_create(leaf, NULL, &cache));
  REQUIRE_OK(devrt_statistics_resource_create(cache, &stats));
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, CROWD);
  void* handed[CROWD] = {0};
  crowd c[CROWD];
  pthread_t t[CROWD];
  for (int i = 0; i < CROWD; i++) {
    c[i] = (crowd){rt, stats, &bar, handed, i, 0};
    pthread_create(&t[i], NULL, crowd_run, &c[i]);
  }
  int errors = 0;
  for (int i = 0; i < CROWD; i++) pthread_join(t[i], NULL), errors += c[i].errors;
  devrt_memory_stats all, even, odd, hand;
  CHECK_OK(devrt_statistics_get(stats, NULL, &all));
  CHECK_OK(devrt_statistics_get(stats, "even", &even));
  CHECK_OK(devrt_statistics_get(stats, "odd", &odd));
  CHECK_OK(devrt_statistics_get(stats, "handed", &hand));
  CHECK_OK(devrt_resource_trim(stats, NULL));
  CHECK_OK(devrt_resource_reap(stats, DEVRT_REAP_WAIT, NULL));
  devrt_resource_figures f;
  CHECK_OK(devrt_resource_query(stats, &f));
  printf(
      "%d threads at once: %d errors; counts total %lld (even %lld, odd %lld, handed %lld), "
      "current %lld bytes %lld; "
      "end live %llu pending %llu cached %llu\n",
      CROWD, errors, (long long)all.count.total, (long long)even.count.total,
      (long long)odd.count.total, (long long)hand.count.total, (long long)all.count.current,
      (long long)all.bytes.current, (unsigned long long)f.live_bytes,
      (unsigned long long)f.pending_bytes, (unsigned long long)f.cached_bytes);
  CHECK(errors == 0);
  CHECK(all.count.total == CROWD * (CROWD_ITERS + 1) && hand.count.total == CROWD);
  CHECK(even.count.total == CROWD * CROWD_ITERS / 2 && odd.count.total == CROWD * CROWD_ITERS / 2);
  CHECK(all.count.current == 0 && all.bytes.current == 0 && hand.count.current == 0 &&
        even.bytes.current == 0);
  CHECK(all.count.peak >= 1 && all.count.peak <= 2 * CROWD);
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0 && f.cached_bytes == 0);
  pthread_barrier_destroy(&bar);
  devrt_resource_release(stats);
  devrt_resource_release(cache);
  devrt_resource_release(leaf);
}

int main(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.stream_pool_size = THREADS;
  devrt_runtime* rt = t_runtime_cfg(&cfg);
  uint64_t limit = 24 * MiB; /* 16 threads x up to 8 blocks of up to 2 MiB: far more than fits */
  devrt_resource *leaf, *cache, *b1, *b2;
  REQUIRE_OK(devrt_async_resource_create(rt, &leaf));
  devrt_budget_options o = {.limit_bytes = limit, .scope = DEVRT_BUDGET_DEVICE};
  REQUIRE_OK(devrt_budget_create(leaf, &o, &b1));
  o.scope = DEVRT_BUDGET_THROUGH; /* b1 counts the device; b2 what passes through it */
  stress(rt, b1, limit, THREADS, "budget -> async");
  stress(rt, b1, limit, 8, "budget -> async, 8 threads");
  REQUIRE_OK(devrt_caching_resource_create(leaf, NULL, &cache));
  REQUIRE_OK(devrt_budget_create(cache, &o, &b2));
  stress(rt, b2, limit, THREADS, "budget -> caching -> async");
  devrt_resource_release(b1);
  devrt_resource_release(b2);
  devrt_resource_release(cache);
  devrt_resource_release(leaf);
  concurrent_reaps(rt);
  shards_past_owned(rt);
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
