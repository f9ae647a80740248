/* test_memory_stress.c: the resource stack under threads: 16 threads allocating at random never
 * push the budget past its limit; reaps racing frees from 8 threads lose and double count
 * nothing, every figure back to zero at the end. */
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

static uint64_t rng(uint64_t* x) { *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17; return *x; }

static void* run(void* p) {
  worker* w = p;
  devrt_stream s;
  if (devrt_stream_acquire(w->rt, DEVRT_ACQUIRE_SHARE, &s)) { w->errors++; return NULL; }
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
      if (st == DEVRT_ERR_OVER_BUDGET) w->refusals++, held[k] = NULL;
      else if (st) {
        if (!w->errors++) fprintf(stderr, "allocate: %s\n", devrt_last_error());
        held[k] = NULL;
      }
      /* What the device really holds (the figures themselves may double count for a moment:
       * every transition adds before it subtracts). */
      devrt_pool_stats ps;
      if (devrt_pool_stats_get(w->rt, &ps)) w->errors++;
      else if (ps.used_current > w->limit) w->violations++;
    }
    if (i % 64 == 0) devrt_resource_reap(w->top, 0, NULL); /* reaps race the other threads' frees */
  }
  for (int k = 0; k < 8; k++)
    if (held[k] && devrt_resource_deallocate(w->top, held[k], sizes[k], s)) w->errors++;
  devrt_stream_synchronize(w->rt, s);
  devrt_stream_release(w->rt, s);
  return NULL;
}

static void stress(devrt_runtime* rt, devrt_resource* top, uint64_t limit, int nthreads, const char* what) {
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
  printf("%s: %d threads, %d refusals (OVER_BUDGET), %d pool-over-limit observations, %d errors; end live %llu pending %llu cached %llu\n",
         what, nthreads, refusals, violations, errors, (unsigned long long)f.live_bytes,
         (unsigned long long)f.pending_bytes, (unsigned long long)f.cached_bytes);
  CHECK(violations == 0 && errors == 0 && refusals > 0);
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0 && f.cached_bytes == 0 && f.available_bytes == limit);
}

int main(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.stream_pool_size = THREADS;
  devrt_runtime* rt = t_runtime_cfg(&cfg);
  uint64_t limit = 24 * MiB; /* 16 threads x up to 8 blocks of up to 2 MiB: far more than fits */
  devrt_resource *leaf, *cache, *b1, *b2;
  REQUIRE_OK(devrt_async_resource_create(rt, &leaf));
  devrt_budget_options o = {.limit_bytes = limit};
  REQUIRE_OK(devrt_budget_create(leaf, &o, &b1));
  stress(rt, b1, limit, THREADS, "budget -> async");
  stress(rt, b1, limit, 8, "budget -> async, 8 threads");
  REQUIRE_OK(devrt_caching_resource_create(leaf, NULL, &cache));
  REQUIRE_OK(devrt_budget_create(cache, &o, &b2));
  stress(rt, b2, limit, THREADS, "budget -> caching -> async");
  devrt_resource_release(b1);
  devrt_resource_release(b2);
  devrt_resource_release(cache);
  devrt_resource_release(leaf);
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
