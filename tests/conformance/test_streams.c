/* test_streams.c: the stream pool: bounded, real reuse of released streams, the FAIL / WAIT /
 * SHARE modes when none is free, and refusal of released, foreign and made-up ids. */
#include <pthread.h>
#include "test.h"

typedef struct {
  devrt_runtime* rt;
  devrt_stream got;
  devrt_status s;
} waiter;

static void* wait_acquire(void* p) {
  waiter* w = p;
  w->s = devrt_stream_acquire(w->rt, DEVRT_ACQUIRE_WAIT, &w->got);
  return NULL;
}

int main(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.stream_pool_size = 4;
  devrt_runtime* rt = t_runtime_cfg(&cfg);

  /* Bound: 4 streams, then FAIL says OUT_OF_RESOURCES. */
  devrt_stream s[4];
  void* native[4];
  for (int i = 0; i < 4; i++) {
    REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s[i]));
    CHECK_OK(devrt_stream_native(rt, s[i], &native[i]));
    for (int j = 0; j < i; j++) CHECK(s[i] != s[j] && native[i] != native[j]);
  }
  devrt_stream extra;
  CHECK_STATUS(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &extra), DEVRT_ERR_OUT_OF_RESOURCES);
  devrt_runtime_info info;
  CHECK_OK(devrt_runtime_info_get(rt, &info));
  CHECK(info.streams_created == 4 && info.streams_in_use == 4 && info.stream_pool_size == 4);

  /* Reuse: a released stream comes back with its native handle, under a new id; the old id is dead.
   */
  CHECK_OK(devrt_stream_release(rt, s[2]));
  devrt_stream again;
  CHECK_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &again));
  void* nat;
  CHECK_OK(devrt_stream_native(rt, again, &nat));
  CHECK(nat == native[2] && again != s[2]);
  CHECK_STATUS(devrt_stream_synchronize(rt, s[2]), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "not held"));
  CHECK_STATUS(devrt_stream_release(rt, s[2]), DEVRT_ERR_INVALID_ARGUMENT); /* double release */
  CHECK_OK(devrt_runtime_info_get(rt, &info));
  CHECK(info.streams_created == 4);
  s[2] = again;

  /* WAIT: blocks until another thread releases. */
  waiter w = {rt, 0, DEVRT_ERR_BACKEND_ERROR};
  pthread_t t;
  pthread_create(&t, NULL, wait_acquire, &w);
  t_sleep_ms(50);
  CHECK_OK(devrt_stream_release(rt, s[0]));
  pthread_join(t, NULL);
  CHECK_OK(w.s);
  void* wn;
  CHECK_OK(devrt_stream_native(rt, w.got, &wn));
  CHECK(wn == native[0] && w.got != s[0]);
  s[0] = w.got;

  /* SHARE: round-robin over held streams; each holder releases, the id lives until the last. */
  devrt_stream sh[8];
  for (int i = 0; i < 8; i++) CHECK_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_SHARE, &sh[i]));
  for (int i = 0; i < 4; i++) CHECK(sh[i] == sh[i + 4]);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < i; j++) CHECK(sh[i] != sh[j]);
  for (int i = 0; i < 8; i++) CHECK_OK(devrt_stream_release(rt, sh[i]));
  for (int i = 0; i < 4; i++)
    CHECK_OK(devrt_stream_synchronize(rt, s[i])); /* still held by their first holder */
  for (int i = 0; i < 4; i++) CHECK_OK(devrt_stream_release(rt, s[i]));
  CHECK_OK(devrt_runtime_info_get(rt, &info));
  CHECK(info.streams_in_use == 0 && info.streams_created == 4);

  /* Foreign and made-up ids. */
  devrt_runtime* other = t_runtime_cfg(&cfg);
  devrt_stream theirs;
  CHECK_OK(devrt_stream_acquire(other, DEVRT_ACQUIRE_FAIL, &theirs));
  CHECK_STATUS(devrt_stream_synchronize(rt, theirs), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "another runtime"));
  CHECK_STATUS(devrt_stream_release(rt, theirs), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_stream_release(other, theirs));
  CHECK_STATUS(devrt_stream_synchronize(rt, 0), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_stream_synchronize(rt, 12345), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_stream_synchronize(rt, ~(devrt_stream)0), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_stream_acquire(rt, (devrt_acquire_mode)7, &extra), DEVRT_ERR_INVALID_ARGUMENT);

  /* Ids stay unique across many leases. */
  devrt_stream prev = 0;
  for (int i = 0; i < 1000; i++) {
    devrt_stream x;
    CHECK_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &x));
    CHECK(x != prev);
    prev = x;
    CHECK_OK(devrt_stream_release(rt, x));
  }
  CHECK_OK(devrt_runtime_destroy(other));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
