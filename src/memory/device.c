/* memory.c: the public device-pool, synchronous-allocation and copy calls: argument checks,
 * then straight to the backend. */
#include "memory.h"

devrt_status devrt_pool_alloc(devrt_runtime* rt, size_t size, devrt_stream stream, void** out) {
  DV_RT_CHECK(rt, "devrt_pool_alloc");
  DV_ARG_CHECK(out, "devrt_pool_alloc", "out is NULL");
  DV_ARG_CHECK(size, "devrt_pool_alloc", "size is 0");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "devrt_pool_alloc"));
  return rt->be->pool_alloc(rt->dev, size, s, out);
}

devrt_status devrt_pool_free(devrt_runtime* rt, void* ptr, devrt_stream stream) {
  DV_RT_CHECK(rt, "devrt_pool_free");
  DV_ARG_CHECK(ptr, "devrt_pool_free", "ptr is NULL");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, stream, &s, "devrt_pool_free"));
  return rt->be->pool_free(rt->dev, ptr, s);
}

devrt_status devrt_pool_stats_get(devrt_runtime* rt, devrt_pool_stats* out) {
  DV_RT_CHECK(rt, "devrt_pool_stats_get");
  DV_ARG_CHECK(out, "devrt_pool_stats_get", "out is NULL");
  return rt->be->pool_stats(rt->dev, out);
}

devrt_status devrt_pool_trim(devrt_runtime* rt, size_t keep_bytes) {
  DV_RT_CHECK(rt, "devrt_pool_trim");
  return rt->be->pool_trim(rt->dev, keep_bytes);
}

devrt_status devrt_pool_reset_high(devrt_runtime* rt) {
  DV_RT_CHECK(rt, "devrt_pool_reset_high");
  return rt->be->pool_reset_high(rt->dev);
}

devrt_status devrt_mem_alloc(devrt_runtime* rt, size_t size, void** out) {
  DV_RT_CHECK(rt, "devrt_mem_alloc");
  DV_ARG_CHECK(out, "devrt_mem_alloc", "out is NULL");
  DV_ARG_CHECK(size, "devrt_mem_alloc", "size is 0");
  return rt->be->mem_alloc(rt->dev, size, out);
}

devrt_status devrt_mem_free(devrt_runtime* rt, void* ptr) {
  DV_RT_CHECK(rt, "devrt_mem_free");
  DV_ARG_CHECK(ptr, "devrt_mem_free", "ptr is NULL");
  return rt->be->mem_free(rt->dev, ptr);
}

devrt_status devrt_memset_async(devrt_runtime* rt, void* ptr, int byte, size_t size,
                                devrt_stream stream) {
  DV_RT_CHECK(rt, "devrt_memset_async");
  DV_ARG_CHECK(ptr, "devrt_memset_async", "ptr is NULL");
  DV_ARG_CHECK(size, "devrt_memset_async", "size is 0");
  dv_stream* s = NULL;
  dv_capture* cap = NULL; /* capturing: recorded on the capture's stream */
  DV_CHECK(dv_stream_or_capture(rt, stream, &s, &cap, "devrt_memset_async"));
  if (cap) cap->launches++;
  return rt->be->memset_async(s, ptr, byte, size);
}

devrt_status devrt_memcpy_async(devrt_runtime* rt, void* dst, const void* src, size_t size,
                                devrt_stream stream) {
  DV_RT_CHECK(rt, "devrt_memcpy_async");
  DV_ARG_CHECK(dst && src, "devrt_memcpy_async", "dst %p or src %p is NULL", dst, src);
  DV_ARG_CHECK(size, "devrt_memcpy_async", "size is 0");
  dv_stream* s = NULL;
  dv_capture* cap = NULL; /* capturing: recorded on the capture's stream */
  DV_CHECK(dv_stream_or_capture(rt, stream, &s, &cap, "devrt_memcpy_async"));
  if (cap) cap->launches++;
  return rt->be->memcpy_async(s, dst, src, size);
}
