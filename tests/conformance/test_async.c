/* test_async.c: the leaf resources. async: measured granularity, alignment, exact live/pending
 * figures through allocate, free and reap, a free staying pending while a kernel on its stream
 * still runs, bad input and injected faults changing nothing, 8 threads allocating and freeing
 * while 2 reap, and 2 racing to free one pointer; a budget over it never refusing when only frees
 * that completed stand in the way, whichever threads and streams made them (reaps visit only the
 * slots with something to reap: none may be missed). simple: synchronous frees, never pending, the
 * same bad-input checks. */
#include <pthread.h>
#include <sched.h>
#include "memory/account.h"
#include "test.h"

/* Every call must fail with INVALID_ARGUMENT and leave live and pending as they were. */
static void bad_inputs(devrt_resource* r, devrt_stream s, devrt_stream foreign_s) {
  void* p = NULL;
  int local = 0;
  REQUIRE_OK(devrt_resource_allocate(r, 300, s, "bad", &p));
  devrt_resource_figures f0 = t_figures(r);
  CHECK_STATUS(devrt_resource_deallocate(r, &local, 300, s), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "not a live allocation"));
  CHECK_STATUS(devrt_resource_deallocate(r, (char*)p + 256, 300, s),
               DEVRT_ERR_INVALID_ARGUMENT); /* inside it */
  CHECK_STATUS(devrt_resource_deallocate(r, (char*)p + 1, 300, s),
               DEVRT_ERR_INVALID_ARGUMENT); /* not aligned */
  CHECK_STATUS(devrt_resource_deallocate(r, (void*)((uintptr_t)1 << 52), 300, s),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "not a live allocation"));
  CHECK_STATUS(devrt_resource_deallocate(r, p, 301, s), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "301") && strstr(devrt_last_error(), "300"));
  CHECK_STATUS(devrt_resource_deallocate(r, NULL, 300, s), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_deallocate(r, p, 0, s), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_deallocate(r, p, 300, foreign_s), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_deallocate(r, p, 300, DEVRT_STREAM_NONE), DEVRT_ERR_INVALID_ARGUMENT);
  void* q = NULL;
  CHECK_STATUS(devrt_resource_allocate(r, 0, s, "bad", &q), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_allocate(r, 64, foreign_s, "bad", &q), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(q == NULL);
  devrt_resource_figures f1 = t_figures(r);
  CHECK(f1.live_bytes == f0.live_bytes && f1.pending_bytes == f0.pending_bytes);
  CHECK_OK(devrt_resource_deallocate(r, p, 300, s));
  f0 = t_figures(r);
  CHECK_STATUS(devrt_resource_deallocate(r, p, 300, s),
               DEVRT_ERR_INVALID_ARGUMENT); /* double free */
  CHECK(strstr(devrt_last_error(), "double free"));
  f1 = t_figures(r);
  CHECK(f1.live_bytes == f0.live_bytes && f1.pending_bytes == f0.pending_bytes);
}

/* ---- threads ---- */

enum { THREADS = 8, OPS = 2000, HELD = 16 };
static devrt_resource* g_res;
static devrt_runtime* g_rt;
static _Atomic uint64_t g_freed, g_reaped_by_threads;
static _Atomic int g_stop, g_errors;

static void* worker(void* arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
  devrt_stream s;
  if (devrt_stream_acquire(g_rt, DEVRT_ACQUIRE_FAIL, &s) != DEVRT_OK) {
    atomic_fetch_add(&g_errors, 1);
    return NULL;
  }
  void* p[HELD] = {0};
  size_t sz[HELD] = {0};
  for (int op = 0; op < OPS; op++) {
    int i = rand_r(&seed) % HELD;
    if (p[i]) {
      if (devrt_resource_deallocate(g_res, p[i], sz[i], s) != DEVRT_OK)
        atomic_fetch_add(&g_errors, 1);
      atomic_fetch_add(&g_freed, dv_round(g_res->account, sz[i]));
      p[i] = NULL;
    } else {
      sz[i] = 1 + (size_t)(rand_r(&seed) % 65536);
      if (devrt_resource_allocate(g_res, sz[i], s, "thread", &p[i]) != DEVRT_OK)
        atomic_fetch_add(&g_errors, 1);
    }
  }
  for (int i = 0; i < HELD; i++)
    if (p[i]) {
      if (devrt_resource_deallocate(g_res, p[i], sz[i], s) != DEVRT_OK)
        atomic_fetch_add(&g_errors, 1);
      atomic_fetch_add(&g_freed, dv_round(g_res->account, sz[i]));
    }
  if (devrt_stream_release(g_rt, s) != DEVRT_OK) atomic_fetch_add(&g_errors, 1);
  return NULL;
}

/* Two threads free one pointer at once, round after round (they spin, so the frees overlap):
 * exactly one free is accepted each round. */
enum { RACE_ROUNDS = 500 };
static void* _Atomic p_racer;
static _Atomic int g_round, g_done, g_accepted;
static void* racer(void* arg) {
  devrt_stream s = (devrt_stream)(uintptr_t)arg;
  for (int r = 1; r <= RACE_ROUNDS; r++) {
    for (unsigned n = 0; atomic_load(&g_round) < r;)
      if (++n % 1024 == 0)
        sched_yield(); /* spin first, so the two frees overlap where there are cores */
    if (devrt_resource_deallocate(g_res, atomic_load(&p_racer), 4096, s) == DEVRT_OK)
      atomic_fetch_add(&g_accepted, 1);
    atomic_fetch_add(&g_done, 1);
  }
  return NULL;
}
static void racing_double_free(devrt_resource* r, devrt_stream s) {
  g_res = r;
  devrt_resource_figures f0 = t_figures(r);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, racer, (void*)(uintptr_t)s);
  for (int round = 1; round <= RACE_ROUNDS; round++) {
    void* p = NULL;
    REQUIRE_OK(devrt_resource_allocate(r, 4096, s, "race", &p));
    atomic_store(&p_racer, p);
    atomic_store(&g_round, round);
    while (atomic_load(&g_done) < 2 * round) sched_yield();
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  devrt_resource_figures f1 = t_figures(r);
  CHECK(atomic_load(&g_accepted) == RACE_ROUNDS);
  CHECK(f1.live_bytes == f0.live_bytes &&
        f1.pending_bytes - f0.pending_bytes == RACE_ROUNDS * dv_round(r->account, 4096));
}

static void* reaper(void* arg) {
  (void)arg;
  while (!atomic_load(&g_stop)) {
    uint64_t n = 0;
    if (devrt_resource_reap(g_res, 0, &n) != DEVRT_OK) atomic_fetch_add(&g_errors, 1);
    atomic_fetch_add(&g_reaped_by_threads, n);
  }
  return NULL;
}

/* ---- a budget and frees that completed: rounds of threads filling the budget to its limit on
 * random streams, then other threads freeing those blocks on random streams (so each thread's
 * slot keeps moving), then every stream synchronized, while a thread reaps throughout. No
 * allocation may be refused: the budget's non-blocking reap must find every free. ---- */
enum { B_THREADS = 4, B_STREAMS = 8, B_BLOCKS = 16, B_ROUNDS = 30 };
static devrt_resource* b_res;
static devrt_stream b_streams[B_STREAMS];
static void* b_blk[B_THREADS][B_BLOCKS];
static _Atomic int b_refused;

static void* b_alloc(void* arg) {
  unsigned t = (unsigned)(uintptr_t)arg, seed = t * 31 + 5;
  for (int i = 0; i < B_BLOCKS; i++) {
    devrt_status st = devrt_resource_allocate(b_res, 4096, b_streams[rand_r(&seed) % B_STREAMS],
                                              "budget", &b_blk[t][i]);
    if (st == DEVRT_ERR_OVER_BUDGET) atomic_fetch_add(&b_refused, 1);
    if (st != DEVRT_OK) atomic_fetch_add(&g_errors, 1), b_blk[t][i] = NULL;
  }
  return NULL;
}

static void* b_free(void* arg) { /* thread t frees thread t + 1's blocks */
  unsigned t = (unsigned)(uintptr_t)arg, seed = t * 17 + 3;
  for (int i = 0; i < B_BLOCKS; i++) {
    void* p = b_blk[(t + 1) % B_THREADS][i];
    if (p && devrt_resource_deallocate(b_res, p, 4096, b_streams[rand_r(&seed) % B_STREAMS]))
      atomic_fetch_add(&g_errors, 1);
  }
  return NULL;
}

static void* b_reaper(void* arg) {
  (void)arg;
  while (!atomic_load(&g_stop))
    if (devrt_resource_reap(b_res, 0, NULL) != DEVRT_OK) atomic_fetch_add(&g_errors, 1);
  return NULL;
}

static void budget_and_completed_frees(devrt_runtime* rt) {
  devrt_resource* a;
  REQUIRE_OK(devrt_async_resource_create(rt, &a));
  devrt_budget_options o = {.limit_bytes = B_THREADS * B_BLOCKS * dv_round(a->account, 4096)};
  REQUIRE_OK(devrt_budget_create(a, &o, &b_res));
  for (int i = 0; i < B_STREAMS; i++)
    REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &b_streams[i]));
  atomic_store(&g_stop, 0);
  atomic_store(&g_errors, 0);
  pthread_t rp, t[B_THREADS];
  pthread_create(&rp, NULL, b_reaper, NULL);
  for (int round = 0; round < B_ROUNDS; round++) {
    for (int i = 0; i < B_THREADS; i++) pthread_create(&t[i], NULL, b_alloc, (void*)(uintptr_t)i);
    for (int i = 0; i < B_THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < B_THREADS; i++) pthread_create(&t[i], NULL, b_free, (void*)(uintptr_t)i);
    for (int i = 0; i < B_THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < B_STREAMS; i++) CHECK_OK(devrt_stream_synchronize(rt, b_streams[i]));
  }
  atomic_store(&g_stop, 1);
  pthread_join(rp, NULL);
  CHECK(atomic_load(&b_refused) == 0 && atomic_load(&g_errors) == 0);
  CHECK_OK(devrt_resource_reap(b_res, DEVRT_REAP_WAIT, NULL));
  devrt_resource_figures f = t_figures(b_res);
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0 && atomic_load(&a->account->held) == 0);
  for (int i = 0; i < B_STREAMS; i++) CHECK_OK(devrt_stream_release(rt, b_streams[i]));
  CHECK_OK(devrt_resource_release(b_res));
  CHECK_OK(devrt_resource_release(a));
  printf("budget: %d rounds of %d x %d blocks at the limit, %d refused\n", B_ROUNDS, B_THREADS,
         B_BLOCKS, atomic_load(&b_refused));
}

/* A free is retired by the next reap whichever slot it moved from: one thread frees on stream
 * a, then b, then a; after each (its stream synchronized) a non-blocking reap retires it. */
static void reap_follows_the_slot(devrt_runtime* rt, devrt_resource* r, devrt_stream a,
                                  devrt_stream b) {
  devrt_stream order[] = {a, b, a, b, b, a};
  uint64_t g = t_figures(r).granularity, n = 0;
  for (unsigned i = 0; i < sizeof order / sizeof *order; i++) {
    void *p, *q;
    REQUIRE_OK(devrt_resource_allocate(r, 1000, order[i], "slot", &p));
    REQUIRE_OK(devrt_resource_allocate(r, 3000, a, "slot", &q));
    CHECK_OK(devrt_resource_deallocate(r, p, 1000, order[i]));
    CHECK_OK(devrt_resource_deallocate(r, q, 3000, order[(i + 1) % 6]));
    CHECK_OK(devrt_stream_synchronize(rt, a));
    CHECK_OK(devrt_stream_synchronize(rt, b));
    CHECK_OK(devrt_resource_reap(r, 0, &n));
    CHECK(n == (1000 + g - 1) / g * g + (3000 + g - 1) / g * g && t_figures(r).pending_bytes == 0);
  }
}

int main(void) {
  devrt_runtime* rt = t_runtime();
  devrt_runtime* rt2 = t_runtime();
  devrt_stream s, s2;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  REQUIRE_OK(devrt_stream_acquire(rt2, DEVRT_ACQUIRE_FAIL, &s2));
  devrt_resource* r;
  REQUIRE_OK(devrt_async_resource_create(rt, &r));
  CHECK(!strcmp(devrt_resource_name(r), "async") && devrt_resource_upstream(r) == NULL);

  /* Granularity: measured, a power of two >= 256. */
  devrt_resource_figures f = t_figures(r);
  uint64_t g = f.granularity;
  CHECK(g >= 256 && (g & (g - 1)) == 0);
  CHECK(t_is_cuda(rt) || g == 256); /* the host backend rounds to 256 */
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0 && f.reaped_bytes == 0);

  /* Exact live / pending / reaped. */
  size_t sizes[4] = {1, 300, 4096, 1u << 20};
  void* p[4];
  uint64_t rounded[4], sum = 0;
  for (int i = 0; i < 4; i++) {
    REQUIRE_OK(devrt_resource_allocate(r, sizes[i], s, "exact", &p[i]));
    CHECK(((uintptr_t)p[i] & 255) == 0);
    rounded[i] = (sizes[i] + g - 1) / g * g;
    sum += rounded[i];
  }
  f = t_figures(r);
  CHECK(f.live_bytes == sum && f.pending_bytes == 0);
  CHECK_OK(devrt_resource_deallocate(r, p[1], sizes[1], s));
  CHECK_OK(devrt_resource_deallocate(r, p[2], sizes[2], s));
  f = t_figures(r);
  CHECK(f.live_bytes == sum - rounded[1] - rounded[2] &&
        f.pending_bytes == rounded[1] + rounded[2]);
  uint64_t n = 0;
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  CHECK(n == rounded[1] + rounded[2]);
  f = t_figures(r);
  CHECK(f.pending_bytes == 0 && f.reaped_bytes == n && f.live_bytes == rounded[0] + rounded[3]);
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  CHECK(n == 0);

  /* Released only when the free completed: a 100 ms kernel still uses the block. */
  uint32_t seven = 7;
  uint64_t words = sizes[2] / 4, delay = 100000000ull;
  void* blk;
  REQUIRE_OK(devrt_resource_allocate(r, sizes[2], s, "slow", &blk));
  void* args[] = {&blk, &seven, &words, &delay};
  REQUIRE_OK(t_launch(rt, s, "devrt_slow_fill_u32", 1, 32, args));
  CHECK_OK(devrt_resource_deallocate(r, blk, sizes[2], s));
  CHECK_OK(devrt_resource_reap(r, 0, &n));
  f = t_figures(r);
  CHECK(n == 0 && f.pending_bytes == rounded[2]);
  CHECK_OK(devrt_stream_synchronize(rt, s));
  CHECK_OK(devrt_resource_reap(r, 0, &n));
  f = t_figures(r);
  CHECK(n == rounded[2] && f.pending_bytes == 0);

  /* A free on a stream released before the reap is still retired (the slot's stream lives on). */
  devrt_stream s3;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s3));
  REQUIRE_OK(devrt_resource_allocate(r, 1000, s3, "released", &blk));
  CHECK_OK(devrt_resource_deallocate(r, blk, 1000, s3));
  CHECK_OK(devrt_stream_release(rt, s3));
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  CHECK(n == (1000 + g - 1) / g * g && t_figures(r).pending_bytes == 0);

  bad_inputs(r, s, s2);
  racing_double_free(r, s);
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));

  /* Injected faults change nothing; the retry succeeds. */
  f = t_figures(r);
  rt->be->fault_arm(rt->dev, DV_FAULT_ALLOC, 1);
  CHECK_STATUS(devrt_resource_allocate(r, 512, s, "fault", &blk), DEVRT_ERR_DEVICE_ALLOC_FAILED);
  CHECK(t_figures(r).live_bytes == f.live_bytes);
  REQUIRE_OK(devrt_resource_allocate(r, 512, s, "fault", &blk));
  f = t_figures(r);
  rt->be->fault_arm(rt->dev, DV_FAULT_FREE, 1);
  CHECK_STATUS(devrt_resource_deallocate(r, blk, 512, s), DEVRT_ERR_BACKEND_ERROR);
  devrt_resource_figures f1 = t_figures(r);
  CHECK(f1.live_bytes == f.live_bytes && f1.pending_bytes == f.pending_bytes);
  CHECK_OK(devrt_resource_deallocate(r, blk, 512, s));
  rt->be->fault_arm(rt->dev, DV_FAULT_EVENT_RECORD, 1);
  CHECK_STATUS(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n), DEVRT_ERR_BACKEND_ERROR);
  CHECK(t_figures(r).pending_bytes == (512 + g - 1) / g * g);
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  CHECK(n == (512 + g - 1) / g * g && t_figures(r).pending_bytes == 0);

  CHECK_OK(devrt_resource_deallocate(r, p[0], sizes[0], s));
  CHECK_OK(devrt_resource_deallocate(r, p[3], sizes[3], s));
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  f = t_figures(r);
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0);

  /* 8 threads allocate and free on their own streams while 2 reap. */
  g_res = r;
  g_rt = rt;
  uint64_t reaped_before = f.reaped_bytes;
  pthread_t w[THREADS], rp[2];
  for (int i = 0; i < 2; i++) pthread_create(&rp[i], NULL, reaper, NULL);
  for (int i = 0; i < THREADS; i++) pthread_create(&w[i], NULL, worker, (void*)(uintptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(w[i], NULL);
  atomic_store(&g_stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(rp[i], NULL);
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  f = t_figures(r);
  uint64_t freed = atomic_load(&g_freed);
  CHECK(atomic_load(&g_errors) == 0);
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0);
  CHECK(f.reaped_bytes - reaped_before == freed && atomic_load(&g_reaped_by_threads) + n == freed);
  printf(
      "threads: %d x %d ops, %llu bytes freed, %llu reaped by the reapers, %llu by the final "
      "wait\n",
      THREADS, OPS, (unsigned long long)freed,
      (unsigned long long)atomic_load(&g_reaped_by_threads), (unsigned long long)n);

  devrt_stream s4;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s4));
  reap_follows_the_slot(rt, r, s, s4);
  CHECK_OK(devrt_stream_release(rt, s4));
  budget_and_completed_frees(rt);

  uint64_t released = 1;
  CHECK_OK(devrt_resource_trim(r, &released));
  CHECK(released == 0);

  /* The simple resource: synchronous, never pending. */
  devrt_resource* sr;
  REQUIRE_OK(devrt_simple_resource_create(rt, &sr));
  CHECK(!strcmp(devrt_resource_name(sr), "simple"));
  uint64_t sg = t_figures(sr).granularity;
  CHECK(sg == (uint64_t)(t_is_cuda(rt) ? 512 : 256));
  void* m;
  REQUIRE_OK(devrt_resource_allocate(sr, 1000, s, "simple", &m));
  CHECK(((uintptr_t)m & 255) == 0);
  f = t_figures(sr);
  CHECK(f.live_bytes == (1000 + sg - 1) / sg * sg && f.pending_bytes == 0);
  void* fill_args[] = {&m, &seven, &words, &delay};
  words = 250;
  delay = 20000000ull;
  REQUIRE_OK(t_launch(rt, s, "devrt_slow_fill_u32", 1, 32, fill_args));
  CHECK_OK(devrt_resource_deallocate(sr, m, 1000, s)); /* waits for the kernel first */
  f = t_figures(sr);
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0);
  CHECK_OK(devrt_resource_reap(sr, DEVRT_REAP_WAIT, &n));
  CHECK(n == 0);
  bad_inputs(sr, s, s2);
  f = t_figures(sr);
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0 && t_figures(r).live_bytes == 0);

  const char* backend = rt->be->name; /* a static string */
  CHECK_OK(devrt_resource_release(sr));
  CHECK_OK(devrt_resource_release(r));
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_stream_release(rt2, s2));
  CHECK_OK(devrt_runtime_destroy(rt2));
  CHECK_OK(devrt_runtime_destroy(rt));
  printf("async: %s backend, granularity %llu (simple %llu)\n", backend, (unsigned long long)g,
         (unsigned long long)sg);
  return t_done();
}
