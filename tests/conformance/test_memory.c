/* test_memory.c: devrt's own stream-ordered pool: allocations usable in stream order, the pool's
 * used/reserved figures and high marks, trim, the release threshold, synchronous allocations,
 * memset/memcpy round trips, and injected allocation faults. */
#include "test.h"

int main(void) {
  devrt_runtime* rt = t_runtime();
  devrt_stream s;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  devrt_pool_stats st;
  CHECK_OK(devrt_pool_stats_get(rt, &st));
  CHECK(st.used_current == 0 && st.release_threshold == DEVRT_RELEASE_KEEP_ALL);

  enum { K = 16, SZ = 1 << 20 };
  void* p[K];
  for (int i = 0; i < K; i++) REQUIRE_OK(devrt_pool_alloc(rt, SZ, s, &p[i]));
  for (int i = 0; i < K; i++) CHECK(((uintptr_t)p[i] & 255) == 0);
  CHECK_OK(devrt_stream_synchronize(rt, s));
  CHECK_OK(devrt_pool_stats_get(rt, &st));
  CHECK(st.used_current >= (uint64_t)K * SZ && st.used_high >= st.used_current &&
        st.reserved_current >= st.used_current);
  uint64_t used_full = st.used_current;

  /* Round trip through device memory. */
  static unsigned char in[SZ], out[SZ];
  for (int i = 0; i < SZ; i++) in[i] = (unsigned char)(i * 31 + 7);
  CHECK_OK(devrt_memcpy_async(rt, p[0], in, SZ, s));
  CHECK_OK(devrt_memcpy_async(rt, p[1], p[0], SZ, s));
  CHECK_OK(devrt_memset_async(rt, p[1], 0xAB, 16, s));
  CHECK_OK(devrt_memcpy_async(rt, out, p[1], SZ, s));
  CHECK_OK(devrt_stream_synchronize(rt, s));
  CHECK(out[0] == 0xAB && out[15] == 0xAB && !memcmp(out + 16, in + 16, SZ - 16));

  for (int i = 0; i < K; i++) CHECK_OK(devrt_pool_free(rt, p[i], s));
  CHECK_OK(devrt_stream_synchronize(rt, s));
  CHECK_OK(devrt_pool_stats_get(rt, &st));
  CHECK(st.used_current == 0 && st.used_high >= used_full);
  CHECK_OK(devrt_pool_trim(rt, 0));
  CHECK_OK(devrt_pool_reset_high(rt));
  CHECK_OK(devrt_pool_stats_get(rt, &st));
  CHECK(st.used_high == 0 && st.reserved_current == 0);

  /* Synchronous allocations sit outside the pool. */
  void* m;
  CHECK_OK(devrt_mem_alloc(rt, 4096, &m));
  CHECK_OK(devrt_pool_stats_get(rt, &st));
  CHECK(st.used_current == 0);
  CHECK_OK(devrt_mem_free(rt, m));

  /* Injected faults fail exactly the armed call and nothing else. */
  rt->be->fault_arm(rt->dev, DV_FAULT_ALLOC, 2);
  void* a;
  void* b;
  CHECK_OK(devrt_pool_alloc(rt, 256, s, &a));
  CHECK_STATUS(devrt_pool_alloc(rt, 256, s, &b), DEVRT_ERR_DEVICE_ALLOC_FAILED);
  CHECK(strstr(devrt_last_error(), "injected"));
  CHECK_OK(devrt_pool_alloc(rt, 256, s, &b));
  rt->be->fault_arm(rt->dev, DV_FAULT_FREE, 1);
  CHECK_STATUS(devrt_pool_free(rt, a, s), DEVRT_ERR_BACKEND_ERROR);
  CHECK_OK(devrt_pool_free(rt, a, s));
  CHECK_OK(devrt_pool_free(rt, b, s));
  CHECK_OK(devrt_stream_synchronize(rt, s));
  CHECK_OK(devrt_pool_stats_get(rt, &st));
  CHECK(st.used_current == 0);

  /* A release threshold of 0 gives memory back at every synchronization. */
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.pool_release_threshold = 0;
  devrt_runtime* rt0 = t_runtime_cfg(&cfg);
  devrt_stream s0;
  REQUIRE_OK(devrt_stream_acquire(rt0, DEVRT_ACQUIRE_FAIL, &s0));
  CHECK_OK(devrt_pool_stats_get(rt0, &st));
  CHECK(st.release_threshold == 0);
  CHECK_OK(devrt_pool_alloc(rt0, SZ, s0, &a));
  CHECK_OK(devrt_pool_free(rt0, a, s0));
  CHECK_OK(devrt_stream_synchronize(rt0, s0));
  CHECK_OK(devrt_pool_stats_get(rt0, &st));
  CHECK(st.used_current == 0 && st.reserved_current == 0);
  CHECK_OK(devrt_stream_release(rt0, s0));
  CHECK_OK(devrt_runtime_destroy(rt0));

  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
