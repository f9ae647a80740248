/* test_no_driver.c: with no loadable libcuda (DEVRT_CUDA_LIBRARY points nowhere), auto picks the
 * host backend and says why, and asking for cuda gives NO_DRIVER (UNSUPPORTED when devrt was
 * built without the toolkit). */
#include "test.h"

int main(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.backend = DEVRT_BACKEND_AUTO;
  devrt_runtime* rt;
  REQUIRE_OK(devrt_runtime_create(&cfg, &rt));
  devrt_runtime_info info;
  CHECK_OK(devrt_runtime_info_get(rt, &info));
  CHECK(info.backend == DEVRT_BACKEND_HOST && !strcmp(info.backend_name, "host"));
  CHECK(!strncmp(info.backend_reason, "host:", 5));
  printf("auto: %s\n", info.backend_reason);
  if (devrt_built_with_cuda())
    CHECK(strstr(info.backend_reason, "NO_DRIVER") && strstr(info.backend_reason, "/nonexistent"));
  CHECK_OK(devrt_runtime_destroy(rt));

  cfg.backend = DEVRT_BACKEND_CUDA;
  CHECK_STATUS(devrt_runtime_create(&cfg, &rt),
               devrt_built_with_cuda() ? DEVRT_ERR_NO_DRIVER : DEVRT_ERR_UNSUPPORTED);
  printf("cuda: %s\n", devrt_last_error());
  /* Sticky and retried alike: the same answer again. */
  CHECK_STATUS(devrt_runtime_create(&cfg, &rt),
               devrt_built_with_cuda() ? DEVRT_ERR_NO_DRIVER : DEVRT_ERR_UNSUPPORTED);

  /* The process-wide runtime: a failed creation is retried by the next call. */
  CHECK_OK(devrt_configure(0, &cfg));
  CHECK(devrt_runtime_get(0, &rt) != DEVRT_OK);
  cfg.backend = DEVRT_BACKEND_HOST;
  CHECK_OK(devrt_configure(0, &cfg));
  CHECK_OK(devrt_runtime_get(0, &rt));
  CHECK_STATUS(devrt_configure(0, &cfg), DEVRT_ERR_INVALID_STATE);
  CHECK_STATUS(devrt_runtime_destroy(rt), DEVRT_ERR_INVALID_ARGUMENT); /* process-wide: not owned */
  return t_done();
}
