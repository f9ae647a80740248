/* test_runtime_race.c: 32 threads racing on the first devrt_runtime_get of a fresh process all
 * get the same runtime, and exactly one is created. */
#include <pthread.h>
#include "test.h"

#define N 32
static devrt_runtime* got[N];
static pthread_barrier_t start;

static void* racer(void* p) {
  int i = (int)(intptr_t)p;
  pthread_barrier_wait(&start);
  devrt_status s = devrt_runtime_get(0, &got[i]);
  if (s != DEVRT_OK) got[i] = NULL;
  return NULL;
}

int main(void) {
  setenv("DEVRT_BACKEND", "host", 1);
  CHECK(dv_runtime_creations() == 0);
  pthread_t t[N];
  pthread_barrier_init(&start, NULL, N);
  for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, racer, (void*)(intptr_t)i);
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < N; i++) CHECK(got[i] && got[i] == got[0]);
  CHECK(dv_runtime_creations() == 1);
  devrt_runtime* again;
  CHECK_OK(devrt_runtime_get(0, &again));
  CHECK(again == got[0] && dv_runtime_creations() == 1);
  pthread_barrier_destroy(&start);
  return t_done();
}
