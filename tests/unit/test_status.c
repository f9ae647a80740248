/* test_status.c: status names, the thread-local last-error message, and (with the cuda backend
 * built) the mapping of CUresult values to devrt statuses. */
#include <pthread.h>
#include "test.h"
#ifdef DEVRT_HAVE_CUDA
#include "driver/cuda_driver.h"
#endif

static void* other_thread(void* p) {
  (void)p;
  CHECK(devrt_last_error()[0] == 0); /* thread-local: another thread's error is not seen here */
  return NULL;
}

int main(void) {
  CHECK(!strcmp(devrt_status_name(DEVRT_OK), "OK"));
  CHECK(!strcmp(devrt_status_name(DEVRT_ERR_OVER_BUDGET), "OVER_BUDGET"));
  CHECK(!strcmp(devrt_status_name(DEVRT_ERR_BACKEND_ERROR), "BACKEND_ERROR"));
  CHECK(!strcmp(devrt_status_name((devrt_status)999), "UNKNOWN"));
  for (int s = 0; s < DEVRT_STATUS_COUNT_; s++)
    CHECK(strcmp(devrt_status_name((devrt_status)s), "UNKNOWN"));

  CHECK_STATUS(devrt_runtime_get(-1, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "devrt_runtime_get") && strstr(devrt_last_error(), "-1"));
  pthread_t t;
  pthread_create(&t, NULL, other_thread, NULL);
  pthread_join(t, NULL);

  /* A call that succeeds leaves no message: the status and the message read after it always
   * describe the same call. */
  devrt_config cfg;
  CHECK_OK(devrt_config_init(&cfg));
  cfg.backend = DEVRT_BACKEND_HOST;
  devrt_runtime* rt = t_runtime_cfg(&cfg);
  devrt_stream s = 0;
  CHECK_STATUS(devrt_stream_release(rt, 12345), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  CHECK(devrt_last_error()[0] == 0);
  devrt_block b = 0;
  CHECK_OK(devrt_block_alloc(rt, 4096, s, "freed", &b));
  CHECK_OK(devrt_block_free(rt, b));
  CHECK_STATUS(devrt_block_free(rt, b), DEVRT_ERR_STALE_BLOCK);
  devrt_resource* top = NULL;
  CHECK_OK(devrt_runtime_resource(rt, &top));
  CHECK(devrt_last_error()[0] == 0);
  /* The cleanup after a failure keeps the failure's message: a launch on stream 0 takes a pool
   * stream and gives it back after the stale block refused it. */
  devrt_block_use u = {b, DEVRT_ACCESS_READ};
  devrt_launch_desc d = {.stream = 0, .enqueue = NULL, .uses = &u, .nuses = 1};
  devrt_module* m = NULL;
  devrt_kernel* k = NULL;
  CHECK_OK(devrt_module_load(rt, NULL, &m));
  CHECK_OK(devrt_kernel_get(m, "devrt_fill_u32", &k));
  d.kernel = k, d.grid[0] = 1, d.block[0] = 32;
  CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_STALE_BLOCK);
  CHECK(strstr(devrt_last_error(), "devrt_launch") && strstr(devrt_last_error(), "is freed"));
  CHECK_OK(devrt_module_unload(rt, m));
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_runtime_destroy(rt));
  CHECK(devrt_last_error()[0] == 0);

#ifdef DEVRT_HAVE_CUDA
  CHECK(dv_cu_status(CUDA_SUCCESS) == DEVRT_OK);
  CHECK(dv_cu_status(CUDA_ERROR_OUT_OF_MEMORY) == DEVRT_ERR_DEVICE_ALLOC_FAILED);
  CHECK(dv_cu_status(CUDA_ERROR_INVALID_VALUE) == DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(dv_cu_status(CUDA_ERROR_NO_DEVICE) == DEVRT_ERR_NO_DEVICE);
  CHECK(dv_cu_status(CUDA_ERROR_NOT_SUPPORTED) == DEVRT_ERR_UNSUPPORTED);
  CHECK(dv_cu_status(CUDA_ERROR_STUB_LIBRARY) == DEVRT_ERR_NO_DRIVER);
  CHECK(dv_cu_status(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) == DEVRT_ERR_OUT_OF_RESOURCES);
  CHECK(dv_cu_status(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION) == DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(dv_cu_status(CUDA_ERROR_ILLEGAL_ADDRESS) == DEVRT_ERR_DEVICE_LOST);
  CHECK(dv_cu_status(CUDA_ERROR_LAUNCH_FAILED) == DEVRT_ERR_DEVICE_LOST);
  CHECK(dv_cu_status(CUDA_ERROR_UNKNOWN) == DEVRT_ERR_BACKEND_ERROR);
  /* The message keeps the failing call and the context (the name needs a driver; the code stays).
   */
  CHECK_STATUS(dv_cu_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc", "(%d bytes)", 64),
               DEVRT_ERR_DEVICE_ALLOC_FAILED);
  CHECK(strstr(devrt_last_error(), "cuMemAlloc") && strstr(devrt_last_error(), "64 bytes"));
#endif
  return t_done();
}
