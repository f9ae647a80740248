/* test_green.c: device facts and SM partitioning at the device layer: split dry runs follow the
 * driver's rules; a green context's stream keeps a kernel on the granted SMs; creating one does
 * not change the calling thread's current context. */
#include "test.h"
#ifdef DEVRT_HAVE_CUDA
#include "driver/cuda_driver.h"
#endif

#define BLOCKS 1024

int main(void) {
  devrt_runtime* rt = t_runtime();
  devrt_device_info d;
  REQUIRE_OK(devrt_device_info_get(rt, &d));
  printf("device %d: %s, cc %d.%d, %d SMs, green %d (min %u, align %u)\n", d.ordinal, d.name,
         d.cc_major, d.cc_minor, d.sm_count, d.green_contexts, d.min_partition_sms, d.sm_alignment);
  CHECK(d.sm_count > 0 && d.name[0]);
  if (!d.green_contexts) {
    devrt_split_result r;
    CHECK_STATUS(devrt_device_split_query(rt, 8, 0, &r), DEVRT_ERR_UNSUPPORTED);
    CHECK_OK(devrt_runtime_destroy(rt));
    return t_done();
  }
  /* Dry runs: groups of at least min, multiples of the alignment, groups + remainder = device. */
  unsigned sizes[] = {
      0, 1, d.min_partition_sms, 9, 16, 17, 32, (unsigned)d.sm_count / 2 + 1, (unsigned)d.sm_count};
  for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    if (sizes[i] > (unsigned)d.sm_count) continue;
    devrt_split_result r;
    CHECK_OK(devrt_device_split_query(rt, sizes[i], 0, &r));
    CHECK(r.groups >= 1 && r.sms_per_group >= sizes[i] && r.sms_per_group >= d.min_partition_sms);
    CHECK(r.sms_per_group % d.sm_alignment == 0 || r.sms_per_group == (unsigned)d.sm_count);
    CHECK(r.groups * r.sms_per_group + r.remainder_sms == (unsigned)d.sm_count);
  }
  devrt_split_result r;
  CHECK_STATUS(devrt_device_split_query(rt, (unsigned)d.sm_count + 1, 0, &r),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "SMs asked"));

#ifdef DEVRT_HAVE_CUDA
  const dv_driver* D = NULL;
  CUcontext before = NULL, after = NULL;
  if (t_is_cuda(rt)) {
    REQUIRE_OK(dv_driver_get(&D));
    D->cuCtxGetCurrent(&before);
  }
#endif
  /* A green context of one group, a stream on it, and where its kernel ran. */
  unsigned want = d.sm_count >= 32 ? 16 : d.min_partition_sms;
  dv_green* g;
  dv_res dev, group, rem, got;
  unsigned one = 1;
  REQUIRE_OK(rt->be->sm_resource(rt->dev, &dev));
  REQUIRE_OK(rt->be->sm_split(rt->dev, &dev, want, 0, &group, &one, &rem));
  CHECK(one == 1 && group.sms + rem.sms == dev.sms && !group.splittable);
  CHECK_STATUS(rt->be->sm_split(rt->dev, &rem, want, 0, &group, &one, &rem),
               DEVRT_ERR_INVALID_ARGUMENT); /* not before a green context */
  REQUIRE_OK(rt->be->green_create(rt->dev, &group, 1, &g));
  REQUIRE_OK(rt->be->green_resource(g, &got));
  unsigned granted = got.sms;
  CHECK(granted >= want && granted < (unsigned)d.sm_count && got.splittable);
  dv_stream* gs;
  REQUIRE_OK(rt->be->stream_create(rt->dev, g, 0, &gs));
#ifdef DEVRT_HAVE_CUDA
  if (D) {
    D->cuCtxGetCurrent(&after);
    CHECK(before == after); /* creation left the caller's current context alone */
  }
#endif
  devrt_stream s;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  void* smids;
  REQUIRE_OK(devrt_pool_alloc(rt, BLOCKS * 4, s, &smids));
  REQUIRE_OK(devrt_stream_synchronize(rt, s));
  dv_module* m;
  dv_kernel* k;
  REQUIRE_OK(rt->be->module_load(rt->dev, NULL, &m));
  REQUIRE_OK(rt->be->kernel_get(m, "devrt_record_smid", &k));
  void* args[] = {&smids};
  unsigned grid[3] = {BLOCKS, 1, 1}, block[3] = {32, 1, 1};
  CHECK_OK(rt->be->launch(gs, k, grid, block, 0, args));
  CHECK_OK(rt->be->stream_sync(gs));
  static uint32_t ids[BLOCKS];
  CHECK_OK(devrt_memcpy_async(rt, ids, smids, sizeof ids, s));
  CHECK_OK(devrt_stream_synchronize(rt, s));
  unsigned char seen[1024] = {0};
  unsigned distinct = 0;
  for (int i = 0; i < BLOCKS; i++) {
    CHECK(ids[i] < 1024);
    if (ids[i] < 1024 && !seen[ids[i]]) seen[ids[i]] = 1, distinct++;
  }
  printf("green context of %u SMs: %d blocks ran on %u distinct SMs\n", granted, BLOCKS, distinct);
  CHECK(distinct >= 1 && distinct <= granted);
  /* The same kernel on a plain stream spreads over more SMs than the partition has. */
  if (t_is_cuda(rt)) {
    dv_stream* ps = NULL;
    REQUIRE_OK(dv_stream_get(rt, s, &ps, "test"));
    CHECK_OK(rt->be->launch(ps, k, grid, block, 0, args));
    CHECK_OK(devrt_memcpy_async(rt, ids, smids, sizeof ids, s));
    CHECK_OK(devrt_stream_synchronize(rt, s));
    memset(seen, 0, sizeof seen);
    unsigned wide = 0;
    for (int i = 0; i < BLOCKS; i++)
      if (ids[i] < 1024 && !seen[ids[i]]) seen[ids[i]] = 1, wide++;
    printf("plain stream: %u distinct SMs\n", wide);
    CHECK(wide > granted);
  }
  CHECK_OK(devrt_pool_free(rt, smids, s));
  CHECK_OK(devrt_stream_synchronize(rt, s));
  rt->be->module_unload(rt->dev, m);
  rt->be->stream_destroy(rt->dev, gs);
  rt->be->green_destroy(rt->dev, g);
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
