/* test_sem_stress.c: random interleavings of many host waiters (random values and timeouts, single,
 * ALL and ANY waits), host signallers, a semaphore failed mid-run, and device-signal submissions
 * (barriers and host calls on the host backend) parked behind host semaphores and released by host
 * signals. Every wait returns what its inputs allow, every semaphore ends at its last value, no
 * waiter is left behind, and the queue's counters add up. The seed is printed (DEVRT_SEED sets it).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include "test.h"

#define INF DEVRT_TIMEOUT_INFINITE
enum {
  NH = 3,           /* host-signalled semaphores, one signaller thread each */
  ND = 2,           /* device-signalled semaphores, one submitter thread each */
  NS = NH + ND + 1, /* and F: host-signalled, then failed at a random value */
  WAITERS = 40,
  OPS = 300,      /* waits per waiter thread */
  FINAL_H = 3000, /* the value each host signaller ends at */
  FINAL_D = 800,  /* submissions per submitter: step i signals i */
};
#define F_SEM (NS - 1)

static devrt_runtime* rt;
static devrt_semaphore* sems[NS]; /* H..., D..., F */
static uint64_t finals[NS];
static atomic_uint g_checks, g_bad, g_calls, g_outcome[3]; /* waits: OK, TIMEOUT, ABORTED */
static unsigned g_seed;

static uint64_t cur(devrt_semaphore* s) {
  uint64_t v = 0;
  devrt_semaphore_query(s, &v); /* F: the value before its failure */
  return v;
}

static void pause_a_little(uint64_t* r) {
  uint64_t k = t_rand(r) % 16;
  if (k == 0)
    t_sleep_ms(1);
  else if (k < 4)
    sched_yield();
}

/* A failed expectation on a devrt thread: counted, reported once each. */
#define EXPECT(c, ...)                                \
  do {                                                \
    atomic_fetch_add(&g_checks, 1);                   \
    if (!(c)) {                                       \
      atomic_fetch_add(&g_bad, 1);                    \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                   \
      fputc('\n', stderr);                            \
    }                                                 \
  } while (0)

static void* host_signaller(void* p) {
  unsigned j = (unsigned)(uintptr_t)p;
  uint64_t r = g_seed * 977u + j + 1, v = 0;
  uint64_t fail_at = j == F_SEM ? 1 + t_rand(&r) % FINAL_H : UINT64_MAX;
  while (v < finals[j] && v < fail_at) {
    v += 1 + t_rand(&r) % 3;
    if (v > finals[j]) v = finals[j];
    devrt_status st = devrt_semaphore_signal(sems[j], v);
    EXPECT(st == DEVRT_OK, "signal %u to %llu: %s", j, (unsigned long long)v, devrt_last_error());
    pause_a_little(&r);
  }
  if (j == F_SEM) devrt_semaphore_fail(sems[j], DEVRT_ERR_DEPENDENCY_FAILED, "failed on purpose");
  return NULL;
}

static devrt_status host_call(void* user) {
  (void)user;
  atomic_fetch_add(&g_calls, 1);
  return DEVRT_OK;
}

/* Step i waits a host semaphore at a value near (often above) its current one, sometimes also an
 * earlier device semaphore or its own previous value, and signals D = i: a barrier, or a host call
 * one step in eight. Mostly parked, released by a host signal or by the dispatch thread. */
static void* submitter(void* p) {
  unsigned k = (unsigned)(uintptr_t)p, d = NH + k;
  uint64_t r = g_seed * 131u + k + 7;
  for (uint64_t i = 1; i <= FINAL_D; i++) {
    unsigned h = (unsigned)(t_rand(&r) % NH);
    uint64_t hv = cur(sems[h]) + t_rand(&r) % 24;
    devrt_semaphore_value w[3] = {{sems[h], hv < FINAL_H ? hv : FINAL_H}}, s = {sems[d], i};
    unsigned nw = 1;
    if (k > 0 && t_rand(&r) % 3 == 0)
      w[nw++] = (devrt_semaphore_value){sems[NH], t_rand(&r) % FINAL_D};
    if (t_rand(&r) % 4 == 0) w[nw++] = (devrt_semaphore_value){sems[d], t_rand(&r) % i};
    bool call = t_rand(&r) % 8 == 0;
    devrt_submission sub = {.waits = w,
                            .nwaits = nw,
                            .signals = &s,
                            .nsignals = 1,
                            .kind = call ? DEVRT_WORK_HOST_CALL : DEVRT_WORK_BARRIER,
                            .host = {.fn = host_call}};
    devrt_status st = devrt_queue_submit(rt, &sub);
    EXPECT(st == DEVRT_OK, "submit %u step %llu: %s", k, (unsigned long long)i, devrt_last_error());
    pause_a_little(&r);
  }
  return NULL;
}

/* One wait on n distinct random semaphores: OK only once reached, TIMEOUT only when finite,
 * ABORTED only with F in the list and failed. */
static void one_wait(uint64_t* r) {
  unsigned n = t_rand(r) % 3 == 0 ? 2 + (unsigned)(t_rand(r) % 2) : 1, idx = ~0u;
  devrt_semaphore* s[3];
  uint64_t v[3];
  bool has_f = false;
  for (unsigned i = 0; i < n; i++) {
    unsigned j;
    bool dup;
    do {
      j = (unsigned)(t_rand(r) % NS), dup = false;
      for (unsigned m = 0; m < i; m++) dup |= s[m] == sems[j];
    } while (dup);
    s[i] = sems[j], has_f |= j == F_SEM;
    v[i] = cur(sems[j]) + t_rand(r) % 32;
    if (v[i] > finals[j]) v[i] = finals[j];
  }
  uint64_t t = t_rand(r) % 4, timeout = t == 0 ? 0 : t == 1 ? t_rand(r) % 300000 : INF;
  devrt_wait_mode mode = t_rand(r) % 2 ? DEVRT_WAIT_ALL : DEVRT_WAIT_ANY;
  devrt_status st = n == 1 ? devrt_semaphore_wait(s[0], v[0], timeout)
                           : devrt_semaphores_wait(n, s, v, mode, timeout, &idx);
  atomic_fetch_add(&g_outcome[st == DEVRT_OK ? 0 : st == DEVRT_ERR_TIMEOUT ? 1 : 2], 1);
  if (st == DEVRT_OK) {
    bool ok = true;
    for (unsigned i = 0; i < n; i++)
      if (n == 1 || mode == DEVRT_WAIT_ALL || i == idx) ok &= cur(s[i]) >= v[i];
    EXPECT(ok && (n == 1 || idx < n), "wait OK on %u semaphore(s) not reached (index %u)", n, idx);
  } else {
    devrt_status why = DEVRT_OK;
    const char* msg;
    devrt_semaphore_failure(sems[F_SEM], &why, &msg);
    bool failed = has_f && why == DEVRT_ERR_DEPENDENCY_FAILED;
    EXPECT((st == DEVRT_ERR_TIMEOUT && timeout != INF) || (st == DEVRT_ERR_ABORTED && failed),
           "wait on %u semaphore(s), timeout %llu: %s: %s", n, (unsigned long long)timeout,
           devrt_status_name(st), devrt_last_error());
  }
}

static void* waiter(void* p) {
  uint64_t r = g_seed * 7919u + (uintptr_t)p + 3;
  for (int i = 0; i < OPS; i++) one_wait(&r);
  return NULL;
}

/* One run on a fresh runtime: spin_ns before host waits block, completion mode. */
static void run(uint64_t spin_ns, devrt_completion_mode mode) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.wait_spin_ns = spin_ns, cfg.completion = mode;
  rt = t_runtime_cfg(&cfg);
  for (unsigned j = 0; j < NS; j++) {
    REQUIRE_OK(devrt_semaphore_create(rt, 0, &sems[j]));
    finals[j] = j >= NH && j < NH + ND ? FINAL_D : FINAL_H;
  }
  atomic_store(&g_calls, 0);
  pthread_t t[WAITERS + NS];
  unsigned n = 0;
  for (uintptr_t i = 0; i < WAITERS; i++) pthread_create(&t[n++], NULL, waiter, (void*)i);
  for (uintptr_t k = 0; k < ND; k++) pthread_create(&t[n++], NULL, submitter, (void*)k);
  for (uintptr_t j = 0; j < NH; j++) pthread_create(&t[n++], NULL, host_signaller, (void*)j);
  pthread_create(&t[n++], NULL, host_signaller, (void*)(uintptr_t)F_SEM);
  for (unsigned i = 0; i < n; i++) pthread_join(t[i], NULL);
  for (unsigned j = 0; j < NH + ND; j++) {
    CHECK_OK(devrt_semaphore_wait(sems[j], finals[j], INF));
    CHECK(cur(sems[j]) == finals[j]);
  }
  devrt_status why;
  const char* msg;
  CHECK_OK(devrt_semaphore_failure(sems[F_SEM], &why, &msg));
  CHECK(why == DEVRT_ERR_DEPENDENCY_FAILED && !strcmp(msg, "failed on purpose"));
  /* Every submission was issued (counters are bumped on devrt's threads: let them settle). */
  devrt_queue_stats q;
  for (int i = 0;; i++) {
    CHECK_OK(devrt_queue_stats_get(rt, &q));
    if (q.submitted == q.issued_inline + q.issued_by_dispatch || i == 2000) break;
    t_sleep_ms(1);
  }
  CHECK(q.submitted == ND * FINAL_D && q.submitted == q.issued_inline + q.issued_by_dispatch);
  CHECK(q.failed == 0 && q.refused == 0 && q.host_hops == 0 && q.parked > 0);
  CHECK(q.host_calls == atomic_load(&g_calls));
  printf(
      "spin %llu ns, %s completion: %llu submitted, %llu parked, %llu inline, %llu released, "
      "%llu host calls; waits so far: %u OK, %u timed out, %u aborted\n",
      (unsigned long long)spin_ns, mode == DEVRT_COMPLETION_SYNC ? "sync" : "hostfn",
      (unsigned long long)q.submitted, (unsigned long long)q.parked,
      (unsigned long long)q.issued_inline, (unsigned long long)q.issued_by_dispatch,
      (unsigned long long)q.host_calls, atomic_load(&g_outcome[0]), atomic_load(&g_outcome[1]),
      atomic_load(&g_outcome[2]));
  for (unsigned j = 0; j < NS; j++) CHECK_OK(devrt_semaphore_destroy(sems[j]));
  CHECK_OK(devrt_runtime_destroy(rt));
}

int main(void) {
  const char* e = getenv("DEVRT_SEED");
  g_seed = e ? (unsigned)strtoul(e, NULL, 0) : (unsigned)time(NULL);
  printf("seed %u (DEVRT_SEED=%u repeats the choices, not the interleaving)\n", g_seed, g_seed);
  run(0, DEVRT_COMPLETION_SYNC); /* every wait that is not met at once blocks */
  run(5000, DEVRT_COMPLETION_HOSTFN);
  CHECK(atomic_load(&g_bad) == 0);
  return t_done();
}
