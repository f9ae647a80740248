/* test_reap_wait.c: a blocking reap (DEVRT_REAP_WAIT) retires every free made before it, even when
 * an event recorded before a stream synchronize that returned does not yet say it is complete. On
 * CUDA, with other threads loading the driver, cuEventQuery was seen to answer NOT_READY for a
 * while after cuStreamSynchronize of the event's stream returned (the soak's step_stack then kept
 * its trim's frees pending through reap(WAIT)). Here the host backend is wrapped so that the first
 * event queries after each synchronize answer "not complete", and the stacks of the soak's step
 * are checked: an async leaf's reap, and a device budget whose pressure ladder trims its cache.
 * And a reap that must not block does not wait behind a waiting reap's synchronize (a latency
 * tenant's allocation once waited there for a batch stream's queue). */
#include <pthread.h>
#include <sched.h>
#include "memory/account.h"
#include "test.h"

static const dv_backend* real;
static dv_backend lagging;
static _Atomic unsigned lag; /* queries still to answer "not complete" */

static _Atomic int parked; /* 1: the next synchronize parks until 2 */

static devrt_status lag_stream_sync(dv_stream* s) {
  int one = 1;
  if (atomic_compare_exchange_strong(&parked, &one, 3))
    while (atomic_load(&parked) != 2) sched_yield(); /* a long synchronize, under the slot */
  devrt_status st = real->stream_sync(s);
  if (st == DEVRT_OK) atomic_store(&lag, 4); /* what CUDA's events may still say for a while */
  return st;
}

static devrt_status lag_event_query(dv_event* e, bool* complete) {
  devrt_status st = real->event_query(e, complete);
  unsigned n = atomic_load(&lag);
  while (st == DEVRT_OK && *complete && n && !atomic_compare_exchange_weak(&lag, &n, n - 1)) {}
  if (st == DEVRT_OK && *complete && n) *complete = false;
  return st;
}

/* The leaf alone: a free, then one reap(WAIT), leaves nothing pending. */
static void leaf(devrt_runtime* rt, devrt_stream s0, devrt_stream s1) {
  devrt_resource* a = NULL;
  REQUIRE_OK(devrt_async_resource_create(rt, &a));
  for (int round = 0; round < 8; round++) {
    void* p = NULL;
    uint64_t n = 0;
    REQUIRE_OK(devrt_resource_allocate(a, 64 << 10, round % 2 ? s1 : s0, "lag", &p));
    CHECK_OK(devrt_resource_deallocate(a, p, 64 << 10, round % 2 ? s1 : s0));
    CHECK_OK(devrt_resource_reap(a, DEVRT_REAP_WAIT, &n));
    devrt_resource_figures f = t_figures(a);
    CHECK(n == 64 << 10 && f.pending_bytes == 0 && f.live_bytes == 0);
    if (f.pending_bytes)
      fprintf(stderr, "round %d: %llu pending after reap(WAIT)\n", round,
              (unsigned long long)f.pending_bytes);
  }
  CHECK_OK(devrt_resource_release(a));
}

/* The soak's step: async -> caching -> DEVICE budget of 256 KiB; 192 KiB cached, then 128 KiB
 * fits only once the ladder trimmed the cache and its waiting reap retired the trim's frees. */
static void ladder(devrt_runtime* rt, devrt_stream s0, devrt_stream s1) {
  enum { K = 64 << 10 };
  devrt_resource *a = NULL, *c = NULL, *b = NULL;
  devrt_budget_options bo = {.limit_bytes = 256 << 10, .scope = DEVRT_BUDGET_DEVICE};
  REQUIRE_OK(devrt_async_resource_create(rt, &a));
  REQUIRE_OK(devrt_caching_resource_create(a, NULL, &c));
  REQUIRE_OK(devrt_budget_create(c, &bo, &b));
  for (int round = 0; round < 8; round++) {
    void* p[3] = {NULL, NULL, NULL};
    devrt_stream ps[3] = {s0, s0, s1};
    for (int i = 0; i < 3; i++) REQUIRE_OK(devrt_resource_allocate(b, K, ps[i], "lag", &p[i]));
    for (int i = 0; i < 3; i++) CHECK_OK(devrt_resource_deallocate(b, p[i], K, ps[i]));
    void* q = NULL;
    CHECK_OK(devrt_resource_allocate(b, 2 * K, s1, "lag.pressure", &q));
    if (q) CHECK_OK(devrt_resource_deallocate(b, q, 2 * K, s1));
    uint64_t n;
    CHECK_OK(devrt_resource_reap(b, DEVRT_REAP_WAIT, &n));
    CHECK_OK(devrt_resource_trim(b, &n));
    CHECK_OK(devrt_resource_reap(b, DEVRT_REAP_WAIT, &n));
    devrt_resource_figures f = t_figures(b);
    CHECK(f.live_bytes == 0 && f.pending_bytes == 0 && f.cached_bytes == 0);
  }
  CHECK_OK(devrt_resource_release(b));
  CHECK_OK(devrt_resource_release(c));
  CHECK_OK(devrt_resource_release(a));
}

static void* waiting_reap(void* leaf) {
  CHECK_OK(devrt_resource_reap(leaf, DEVRT_REAP_WAIT, NULL));
  return NULL;
}

static void* quick_reap(void* leaf) {
  CHECK_OK(devrt_resource_reap(leaf, 0, NULL));
  return leaf;
}

/* A waiting reap parked inside its synchronize holds the slot; a non-waiting reap returns. */
static void no_wait_behind_sync(devrt_runtime* rt, devrt_stream s0) {
  devrt_resource* a = NULL;
  void* p = NULL;
  REQUIRE_OK(devrt_async_resource_create(rt, &a));
  REQUIRE_OK(devrt_resource_allocate(a, 4096, s0, "park", &p));
  CHECK_OK(devrt_resource_deallocate(a, p, 4096, s0));
  atomic_store(&parked, 1);
  pthread_t w, q;
  if (pthread_create(&w, NULL, waiting_reap, a)) abort();
  while (atomic_load(&parked) != 3) sched_yield();
  if (pthread_create(&q, NULL, quick_reap, a)) abort();
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 10;
  void* ret = NULL;
  int joined = pthread_timedjoin_np(q, &ret, &until);
  CHECK(joined == 0 && ret == a);
  if (joined) fprintf(stderr, "a non-waiting reap blocked behind a waiting reap's synchronize\n");
  atomic_store(&parked, 2);
  if (joined) pthread_join(q, NULL);
  pthread_join(w, NULL);
  CHECK(t_figures(a).pending_bytes == 0);
  CHECK_OK(devrt_resource_release(a));
}

int main(void) {
  devrt_runtime* rt = t_runtime();
  if (t_is_cuda(rt)) { /* the wrapper models CUDA on the host backend */
    CHECK_OK(devrt_runtime_destroy(rt));
    return 77;
  }
  real = rt->be;
  lagging = *real;
  lagging.stream_sync = lag_stream_sync;
  lagging.event_query = lag_event_query;
  rt->be = &lagging;
  devrt_stream s0 = 0, s1 = 0;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s0));
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s1));
  leaf(rt, s0, s1);
  ladder(rt, s0, s1);
  no_wait_behind_sync(rt, s0);
  CHECK_OK(devrt_stream_release(rt, s0));
  CHECK_OK(devrt_stream_release(rt, s1));
  atomic_store(&lag, 0);
  rt->be = real;
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
