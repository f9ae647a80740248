/* main.c: the outside consumer: includes the umbrella header, gets a runtime, uses a stream. */
#include <devrt/devrt.h>
#include <stdio.h>

int main(void) {
  devrt_runtime* rt;
  devrt_stream s;
  devrt_runtime_info info;
  if (devrt_runtime_get(0, &rt) || devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s) ||
      devrt_stream_synchronize(rt, s) || devrt_stream_release(rt, s) ||
      devrt_runtime_info_get(rt, &info)) {
    fprintf(stderr, "consumer: %s\n", devrt_last_error());
    return 1;
  }
  printf("devrt %s on %s\n", devrt_version(), info.backend_name);
  return 0;
}
