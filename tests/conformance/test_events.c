/* test_events.c: cross-stream ordering through events. A slow writer on one stream, a reader on
 * another: behind the event wait the reader always sees the write; without it the test shows
 * the race (so the positive check can fail). Host functions run in stream order. */
#include <stdatomic.h>
#include "test.h"

#define N (1u << 20)
#define DELAY_NS 100000000ull /* the slow writer waits 100 ms */

static uint32_t host_buf[N];

/* Slow writer fills src with 7 on s1; a copy on s2 (behind ev if wait) moves it to dst; returns
 * how many elements of dst read back as 7. */
static unsigned writer_reader(devrt_runtime* rt, devrt_stream s1, devrt_stream s2, int wait) {
  void *src, *dst;
  REQUIRE_OK(devrt_pool_alloc(rt, N * 4, s1, &src));
  REQUIRE_OK(devrt_pool_alloc(rt, N * 4, s1, &dst));
  REQUIRE_OK(devrt_memset_async(rt, src, 0, N * 4, s1));
  REQUIRE_OK(devrt_memset_async(rt, dst, 0, N * 4, s1));
  REQUIRE_OK(devrt_stream_synchronize(rt, s1));
  devrt_event* ev;
  REQUIRE_OK(devrt_event_create(rt, 0, &ev));
  uint32_t seven = 7;
  uint64_t n = N, delay = DELAY_NS;
  void* fill_args[] = {&src, &seven, &n, &delay};
  REQUIRE_OK(t_launch(rt, s1, "devrt_slow_fill_u32", 256, 256, fill_args));
  REQUIRE_OK(devrt_event_record(rt, ev, s1));
  if (wait) REQUIRE_OK(devrt_stream_wait_event(rt, s2, ev));
  void* copy_args[] = {&dst, &src, &n};
  REQUIRE_OK(t_launch(rt, s2, "devrt_copy_u32", 256, 256, copy_args));
  REQUIRE_OK(devrt_memcpy_async(rt, host_buf, dst, N * 4, s2));
  REQUIRE_OK(devrt_stream_synchronize(rt, s2));
  REQUIRE_OK(devrt_stream_synchronize(rt, s1));
  unsigned sevens = 0;
  for (unsigned i = 0; i < N; i++) sevens += host_buf[i] == 7;
  REQUIRE_OK(devrt_pool_free(rt, src, s1));
  REQUIRE_OK(devrt_pool_free(rt, dst, s1));
  REQUIRE_OK(devrt_stream_synchronize(rt, s1));
  REQUIRE_OK(devrt_event_destroy(rt, ev));
  return sevens;
}

static _Atomic int order_next, order_bad, flag;
static int order_idx[100];
static void in_order(void* p) {
  int i = *(int*)p;
  if (atomic_fetch_add(&order_next, 1) != i) atomic_fetch_add(&order_bad, 1);
}
static void slow_set_flag(void* p) {
  (void)p;
  t_sleep_ms(50);
  atomic_store(&flag, 1);
}
static void read_flag(void* p) { *(int*)p = atomic_load(&flag); }

int main(void) {
  devrt_runtime* rt = t_runtime();
  devrt_stream s1, s2;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s1));
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s2));

  /* Positive: the reader behind the wait sees every write, every time. */
  for (int i = 0; i < 3; i++) CHECK(writer_reader(rt, s1, s2, 1) == N);
  /* Negative: without the wait the reader runs ahead of the slow writer. */
  unsigned raced = writer_reader(rt, s1, s2, 0);
  printf("without the wait the reader saw %u of %u writes\n", raced, N);
  CHECK(raced < N);

  /* Event states: never recorded = complete; behind slow work = not yet; after sync = complete. */
  devrt_event* ev;
  REQUIRE_OK(devrt_event_create(rt, DEVRT_EVENT_BLOCKING_SYNC, &ev));
  bool done = false;
  CHECK_OK(devrt_event_query(rt, ev, &done));
  CHECK(done);
  CHECK_OK(devrt_event_synchronize(rt, ev));
  CHECK_OK(devrt_stream_wait_event(rt, s2, ev)); /* waiting on a never-recorded event is a no-op */
  void* buf;
  REQUIRE_OK(devrt_pool_alloc(rt, 4096, s1, &buf));
  uint32_t one = 1;
  uint64_t n = 1024, delay = 50000000ull;
  void* args[] = {&buf, &one, &n, &delay};
  REQUIRE_OK(t_launch(rt, s1, "devrt_slow_fill_u32", 1, 64, args));
  CHECK_OK(devrt_event_record(rt, ev, s1));
  CHECK_OK(devrt_event_query(rt, ev, &done));
  CHECK(!done);
  CHECK_OK(devrt_event_synchronize(rt, ev));
  CHECK_OK(devrt_event_query(rt, ev, &done));
  CHECK(done);
  CHECK_OK(devrt_pool_free(rt, buf, s1));

  /* Host functions: in order on one stream; across streams behind an event. */
  for (int i = 0; i < 100; i++) {
    order_idx[i] = i;
    CHECK_OK(devrt_stream_host_func(rt, s1, in_order, &order_idx[i]));
  }
  CHECK_OK(devrt_stream_synchronize(rt, s1));
  CHECK(atomic_load(&order_next) == 100 && atomic_load(&order_bad) == 0);
  int seen = -1;
  CHECK_OK(devrt_stream_host_func(rt, s1, slow_set_flag, NULL));
  CHECK_OK(devrt_event_record(rt, ev, s1));
  CHECK_OK(devrt_stream_wait_event(rt, s2, ev));
  CHECK_OK(devrt_stream_host_func(rt, s2, read_flag, &seen));
  CHECK_OK(devrt_stream_synchronize(rt, s2));
  CHECK(seen == 1);

  CHECK_OK(devrt_event_destroy(rt, ev));
  CHECK_OK(devrt_stream_release(rt, s1));
  CHECK_OK(devrt_stream_release(rt, s2));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
