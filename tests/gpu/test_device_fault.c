/* test_device_fault.c (cuda only, a process of its own): a kernel that traps leaves the context
 * unusable; the queue must report the device lost and fail every semaphore of the runtime with
 * DEVICE_LOST, downstream of the fault and unrelated alike, and refuse later submissions. */
#include "test.h"

int main(void) {
  if (!t_want_cuda()) return 77; /* the host backend has no real fault: test_queue injects one */
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.backend = DEVRT_BACKEND_CUDA;
  devrt_runtime* rt = NULL;
  devrt_status st = devrt_runtime_create(&cfg, &rt);
  if (st != DEVRT_OK) {
    fprintf(stderr, "no GPU: %s\n", devrt_last_error());
    return getenv("DEVRT_REQUIRE_GPU") && !strcmp(getenv("DEVRT_REQUIRE_GPU"), "1") ? 1 : 77;
  }
  devrt_module* mod;
  devrt_kernel* trap;
  REQUIRE_OK(devrt_module_load(rt, NULL, &mod));
  REQUIRE_OK(devrt_kernel_get(mod, "devrt_trap", &trap));
  devrt_semaphore *s, *t, *idle;
  REQUIRE_OK(devrt_semaphore_create(rt, 0, &s));
  REQUIRE_OK(devrt_semaphore_create(rt, 0, &t));
  REQUIRE_OK(devrt_semaphore_create(rt, 0, &idle));
  /* downstream first (parked), then the faulting launch that releases it */
  devrt_semaphore_value ws = {s, 1}, st_ = {t, 1}, ss = {s, 1};
  devrt_submission down = {
      .waits = &ws, .nwaits = 1, .signals = &st_, .nsignals = 1, .kind = DEVRT_WORK_BARRIER};
  devrt_submission boom = {.signals = &ss,
                           .nsignals = 1,
                           .kind = DEVRT_WORK_LAUNCH,
                           .launch = {.kernel = trap, .grid = {1}, .block = {1}}};
  CHECK_OK(devrt_queue_submit(rt, &down));
  CHECK_OK(devrt_queue_submit(rt, &boom));
  CHECK_STATUS(devrt_semaphore_wait(t, 1, 10ull * 1000000000ull), DEVRT_ERR_ABORTED);
  CHECK(strstr(devrt_last_error(), "DEVICE_LOST") != NULL);
  devrt_semaphore* all[] = {s, t, idle};
  for (int i = 0; i < 3; i++) {
    devrt_status cause;
    const char* msg;
    CHECK_OK(devrt_semaphore_failure(all[i], &cause, &msg));
    CHECK(cause == DEVRT_ERR_DEVICE_LOST && strstr(msg, "device lost"));
    printf("semaphore %d: %s: %s\n", i, devrt_status_name(cause), msg);
  }
  CHECK_STATUS(devrt_queue_submit(rt, &down), DEVRT_ERR_DEVICE_LOST);
  devrt_queue_stats q;
  CHECK_OK(devrt_queue_stats_get(rt, &q));
  CHECK(q.device_lost && q.host_hops == 0);
  for (int i = 0; i < 3; i++) CHECK_OK(devrt_semaphore_destroy(all[i]));
  devrt_runtime_destroy(rt); /* the context is gone: only that it returns matters here */
  return t_done();
}
