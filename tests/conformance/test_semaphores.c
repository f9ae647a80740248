/* test_semaphores.c: timeline semaphores (semaphore.h) from the host: value limits,
 * signal/query/wait rules and timeouts, waits before signals across threads, multi-waits (ALL/ANY),
 * failure and its root cause, destroy under waiters, racing signallers, bad input, runtime
 * teardown, spinning vs blocking, waiters blocked in any value order. */
#include <pthread.h>
#include <stdatomic.h>
#include "test.h"

#define MS (1000000ull) /* nanoseconds */
#define MAXV DEVRT_SEMAPHORE_MAX_VALUE
#define INF DEVRT_TIMEOUT_INFINITE
#define LONG_NS (10000 * MS) /* a finite timeout only a bug runs out */
#define BAD DEVRT_ERR_INVALID_ARGUMENT

static devrt_runtime* rt;
static atomic_int g_entered, g_finished; /* waiter threads about to wait / done waiting */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static devrt_semaphore* mk(devrt_runtime* r, uint64_t initial) {
  devrt_semaphore* s = NULL;
  REQUIRE_OK(devrt_semaphore_create(r, initial, &s));
  return s;
}

static uint64_t val(devrt_semaphore* s) {
  uint64_t v = UINT64_MAX;
  CHECK_OK(devrt_semaphore_query(s, &v));
  return v;
}

static void fill(uint64_t* v, unsigned n, uint64_t x) {
  for (unsigned i = 0; i < n; i++) v[i] = x;
}

static int has(const char* s, const char* part) { return s && strstr(s, part) != NULL; }

/* Fails with ABORTED and a message naming `part` (the root cause). */
#define CHECK_ABORTED(expr, part)          \
  do {                                     \
    CHECK_STATUS(expr, DEVRT_ERR_ABORTED); \
    CHECK(has(devrt_last_error(), part));  \
  } while (0)

/* A helper thread: what it does and what it saw (CHECK runs on the main thread only). */
typedef struct job {
  pthread_t th;
  devrt_semaphore* sem;
  uint64_t value, timeout_ns;
  unsigned delay_ms; /* signallers sleep first */
  unsigned n;        /* waiters: > 0 runs devrt_semaphores_wait over sems/values */
  devrt_semaphore* const* sems;
  const uint64_t* values;
  devrt_wait_mode mode;
  unsigned index;
  devrt_status st;
  int bad;       /* loops: unexpected results */
  char msg[256]; /* devrt_last_error() of a failed call */
} job;

static void* run_wait(void* p) {
  job* j = p;
  j->index = 12345;
  atomic_fetch_add(&g_entered, 1);
  j->st = j->n ? devrt_semaphores_wait(j->n, j->sems, j->values, j->mode, j->timeout_ns, &j->index)
               : devrt_semaphore_wait(j->sem, j->value, j->timeout_ns);
  snprintf(j->msg, sizeof j->msg, "%s", j->st ? devrt_last_error() : "");
  atomic_fetch_add(&g_finished, 1);
  return NULL;
}

static void* run_signal(void* p) {
  job* j = p;
  t_sleep_ms(j->delay_ms);
  j->st = devrt_semaphore_signal(j->sem, j->value);
  snprintf(j->msg, sizeof j->msg, "%s", j->st ? devrt_last_error() : "");
  return NULL;
}

static void start(job* j, void* (*fn)(void*)) {
  if (pthread_create(&j->th, NULL, fn, j)) {
    fprintf(stderr, "pthread_create failed\n");
    exit(1);
  }
}

/* Another thread signals s to v after delay_ms. */
static void signal_later(job* j, devrt_semaphore* s, uint64_t v, unsigned delay_ms) {
  *j = (job){.sem = s, .value = v, .delay_ms = delay_ms};
  start(j, run_signal);
}

/* Another thread waits for s to reach v. */
static void wait_on(job* j, devrt_semaphore* s, uint64_t v, uint64_t timeout_ns) {
  *j = (job){.sem = s, .value = v, .timeout_ns = timeout_ns};
  start(j, run_wait);
}

/* Another thread waits (no timeout) for all / any of n semaphores. */
static void multi_wait_on(job* j, unsigned n, devrt_semaphore* const* sems, const uint64_t* values,
                          devrt_wait_mode mode) {
  *j = (job){.n = n, .sems = sems, .values = values, .mode = mode, .timeout_ns = INF};
  start(j, run_wait);
}

static void reset_counts(void) {
  atomic_store(&g_entered, 0);
  atomic_store(&g_finished, 0);
}

/* Returns once n waiter threads have entered their wait and had 30 ms to block in it. */
static void blocked(int n) {
  while (atomic_load(&g_entered) < n) t_sleep_ms(1);
  t_sleep_ms(30);
}

/* Joins j; its status must be `want`, no loop step went wrong, and its message names `part`. */
#define FINISH(j, want, part) finish_((j), (want), (part), __LINE__)
static void finish_(job* j, devrt_status want, const char* part, int line) {
  pthread_join(j->th, NULL);
  t_checks++;
  if (j->st != want || j->bad || (part && !has(j->msg, part))) {
    fprintf(stderr, "%s:%d: thread got %s (\"%s\", %d bad), want %s%s%s\n", __FILE__, line,
            devrt_status_name(j->st), j->msg, j->bad, devrt_status_name(want),
            part ? " naming " : "", part ? part : "");
    t_failures++;
  }
}

/* create: value limits and NULLs; query returns the value; waits around the initial value. */
static void create_query(void) {
  devrt_semaphore* s = NULL;
  CHECK_STATUS(devrt_semaphore_create(rt, MAXV + 1, &s), BAD);
  CHECK_STATUS(devrt_semaphore_create(rt, UINT64_MAX, &s), BAD);
  CHECK_STATUS(devrt_semaphore_create(NULL, 0, &s), BAD);
  CHECK_STATUS(devrt_semaphore_create(rt, 0, NULL), BAD);
  CHECK(s == NULL);
  const uint64_t init[] = {0, 123, MAXV};
  for (int i = 0; i < 3; i++) {
    s = mk(rt, init[i]);
    CHECK(val(s) == init[i]);
    CHECK_OK(devrt_semaphore_wait(s, init[i], 0));
    CHECK_STATUS(devrt_semaphore_wait(s, init[i] + 1, 0),
                 init[i] == MAXV ? BAD : DEVRT_ERR_TIMEOUT);
    CHECK_OK(devrt_semaphore_destroy(s));
  }
}

/* signal: only forward, never above the maximum; a refused signal changes nothing. */
static void signal_rules(void) {
  devrt_semaphore* s = mk(rt, 10);
  CHECK_STATUS(devrt_semaphore_signal(s, 9), BAD);
  CHECK_STATUS(devrt_semaphore_signal(s, 10), BAD);
  CHECK_STATUS(devrt_semaphore_signal(s, MAXV + 1), BAD);
  CHECK_STATUS(devrt_semaphore_signal(s, UINT64_MAX), BAD);
  CHECK(val(s) == 10);
  CHECK_OK(devrt_semaphore_signal(s, 11));
  CHECK(val(s) == 11);
  CHECK_OK(devrt_semaphore_signal(s, 1000)); /* jumps are fine */
  CHECK(val(s) == 1000);
  CHECK_OK(devrt_semaphore_signal(s, MAXV));
  CHECK(val(s) == MAXV);
  CHECK_OK(devrt_semaphore_wait(s, MAXV, INF));
  CHECK_STATUS(devrt_semaphore_signal(s, MAXV), BAD); /* nothing is left to signal */
  CHECK_STATUS(devrt_semaphore_signal(s, 5), BAD);
  CHECK_STATUS(devrt_semaphore_signal(s, UINT64_MAX), BAD);
  CHECK(val(s) == MAXV);
  CHECK_OK(devrt_semaphore_destroy(s));
}

/* wait: reached values return at once, polls and short timeouts run out (never early), huge
 * finite timeouts do not overflow, values above the maximum are refused. */
static void wait_rules(void) {
  devrt_semaphore* s = mk(rt, 5);
  CHECK_OK(devrt_semaphore_wait(s, 0, 0));
  CHECK_OK(devrt_semaphore_wait(s, 3, INF));
  CHECK_OK(devrt_semaphore_wait(s, 5, INF));
  CHECK_OK(devrt_semaphore_wait(s, 5, 0));
  CHECK_STATUS(devrt_semaphore_wait(s, 6, 0), DEVRT_ERR_TIMEOUT);
  uint64_t t0 = now_ns();
  CHECK_STATUS(devrt_semaphore_wait(s, 6, 20 * MS), DEVRT_ERR_TIMEOUT);
  CHECK(now_ns() - t0 >= 20 * MS);
  CHECK(val(s) == 5);
  CHECK_STATUS(devrt_semaphore_wait(s, MAXV + 1, 0), BAD);
  CHECK_STATUS(devrt_semaphore_wait(s, UINT64_MAX, MS), BAD);
  job j;
  signal_later(&j, s, 6, 10);
  CHECK_OK(devrt_semaphore_wait(s, 6, UINT64_MAX - 1)); /* huge but finite */
  FINISH(&j, DEVRT_OK, NULL);
  signal_later(&j, s, 7, 10);
  CHECK_OK(devrt_semaphore_wait(s, 7, (uint64_t)INT64_MAX + 1));
  FINISH(&j, DEVRT_OK, NULL);
  CHECK(val(s) == 7);
  CHECK_OK(devrt_semaphore_destroy(s));
}

/* Waits that start before another thread's signal: exact value, a value beyond, the same value
 * several times, a finite timeout not reached. */
static void wait_before_signal(devrt_runtime* r) {
  devrt_semaphore* s = mk(r, 0);
  job j;
  signal_later(&j, s, 1, 20);
  CHECK_OK(devrt_semaphore_wait(s, 1, INF));
  CHECK(val(s) == 1);
  FINISH(&j, DEVRT_OK, NULL);
  signal_later(&j, s, 10, 10);
  CHECK_OK(devrt_semaphore_wait(s, 3, INF));
  FINISH(&j, DEVRT_OK, NULL);
  CHECK(val(s) == 10);
  signal_later(&j, s, 11, 10);
  for (int i = 0; i < 3; i++) CHECK_OK(devrt_semaphore_wait(s, 11, INF));
  FINISH(&j, DEVRT_OK, NULL);
  signal_later(&j, s, 12, 10);
  CHECK_OK(devrt_semaphore_wait(s, 12, LONG_NS));
  FINISH(&j, DEVRT_OK, NULL);
  CHECK_OK(devrt_semaphore_destroy(s));
}

enum { ROUNDS = 200 };

static void* run_pong(void* p) { /* waits a2b = i, signals b2a = i */
  job* j = p;
  for (uint64_t i = 1; i <= ROUNDS && !j->st; i++) {
    j->st = devrt_semaphore_wait(j->sems[0], i, LONG_NS);
    if (!j->st) j->st = devrt_semaphore_signal(j->sems[1], i);
  }
  snprintf(j->msg, sizeof j->msg, "%s", j->st ? devrt_last_error() : "");
  return NULL;
}

/* PingPong (IREE CTS): two threads take turns through two semaphores. */
static void ping_pong(devrt_runtime* r) {
  devrt_semaphore* s[2] = {mk(r, 0), mk(r, 0)}; /* a2b, b2a */
  job j = {.sems = s};
  start(&j, run_pong);
  for (uint64_t i = 1; i <= ROUNDS; i++) {
    devrt_status st = devrt_semaphore_signal(s[0], i);
    if (st == DEVRT_OK) st = devrt_semaphore_wait(s[1], i, INF);
    if (st != DEVRT_OK) {
      CHECK_OK(st);
      break;
    }
  }
  FINISH(&j, DEVRT_OK, NULL);
  CHECK(val(s[0]) == ROUNDS && val(s[1]) == ROUNDS);
  for (int i = 0; i < 2; i++) CHECK_OK(devrt_semaphore_destroy(s[i]));
}

/* Waits that time out (single and multi) leave nothing behind: a blocked waiter on the same value
 * survives them, and a later signal wakes it and a new wait. */
static void timeout_then_signal(void) {
  devrt_semaphore *s = mk(rt, 0), *o = mk(rt, 0);
  devrt_semaphore* both[2] = {o, s};
  uint64_t v[2] = {1, 1};
  reset_counts();
  job w, j;
  wait_on(&w, s, 1, INF);
  blocked(1);
  uint64_t t0 = now_ns();
  CHECK_STATUS(devrt_semaphore_wait(s, 1, 5 * MS), DEVRT_ERR_TIMEOUT);
  CHECK(now_ns() - t0 >= 5 * MS);
  for (int i = 0; i < 20; i++) {
    CHECK_STATUS(devrt_semaphore_wait(s, 1, MS), DEVRT_ERR_TIMEOUT);
    CHECK_STATUS(
        devrt_semaphores_wait(2, both, v, i & 1 ? DEVRT_WAIT_ANY : DEVRT_WAIT_ALL, MS, NULL),
        DEVRT_ERR_TIMEOUT);
  }
  CHECK(atomic_load(&g_finished) == 0 && val(s) == 0);
  signal_later(&j, s, 1, 5);
  CHECK_OK(devrt_semaphore_wait(s, 1, INF));
  FINISH(&j, DEVRT_OK, NULL);
  FINISH(&w, DEVRT_OK, NULL);
  CHECK_OK(devrt_semaphore_signal(o, 1));
  CHECK_OK(devrt_semaphores_wait(2, both, v, DEVRT_WAIT_ALL, 0, NULL));
  CHECK_OK(devrt_semaphore_destroy(s));
  CHECK_OK(devrt_semaphore_destroy(o));
}

enum { WAITERS = 16, LATER = 4 };

/* 16 threads wait for 5 and 4 for 7: signalling 5 wakes exactly the 16, then 7 the rest. */
static void many_waiters(void) {
  devrt_semaphore* s = mk(rt, 0);
  job w[WAITERS + LATER];
  reset_counts();
  for (int i = 0; i < WAITERS + LATER; i++) wait_on(&w[i], s, i < WAITERS ? 5 : 7, INF);
  blocked(WAITERS + LATER);
  CHECK(atomic_load(&g_finished) == 0);
  CHECK_OK(devrt_semaphore_signal(s, 5));
  for (int i = 0; i < WAITERS; i++) FINISH(&w[i], DEVRT_OK, NULL);
  t_sleep_ms(10);
  CHECK(atomic_load(&g_finished) == WAITERS);
  CHECK_OK(devrt_semaphore_signal(s, 7));
  for (int i = WAITERS; i < WAITERS + LATER; i++) FINISH(&w[i], DEVRT_OK, NULL);
  CHECK_OK(devrt_semaphore_destroy(s));
}

/* Waiters block in shuffled order, two per value; each signal of the next value wakes exactly
 * its two (a waiter the value-ordered list skipped would hang here). */
static void waiters_in_any_order(void) {
  enum { VALUES = 40 };
  devrt_semaphore* s = mk(rt, 0);
  job w[2 * VALUES];
  uint64_t order[2 * VALUES];
  for (unsigned i = 0; i < 2 * VALUES; i++) order[i] = 1 + i / 2;
  for (unsigned i = 2 * VALUES - 1, r = 12345; i > 0; i--) { /* Fisher-Yates, fixed LCG */
    r = r * 1103515245u + 12345u;
    unsigned k = (r >> 8) % (i + 1);
    uint64_t t = order[i];
    order[i] = order[k], order[k] = t;
  }
  reset_counts();
  for (unsigned i = 0; i < 2 * VALUES; i++) wait_on(&w[i], s, order[i], INF);
  blocked(2 * VALUES);
  for (uint64_t v = 1; v <= VALUES; v++) {
    CHECK_OK(devrt_semaphore_signal(s, v));
    for (unsigned i = 0; i < 2 * VALUES; i++)
      if (order[i] == v) FINISH(&w[i], DEVRT_OK, NULL);
    CHECK(atomic_load(&g_finished) == (int)(2 * v));
  }
  CHECK_OK(devrt_semaphore_destroy(s));
}

enum { NS = 100 };

/* devrt_semaphores_wait over 100 semaphores: the late one is last (or in the middle), ALL returns
 * only after it, ANY reports which one, timeouts are never early. */
static void multi_wait(void) {
  CHECK_OK(devrt_semaphores_wait(0, NULL, NULL, DEVRT_WAIT_ALL, 0, NULL));
  CHECK_OK(devrt_semaphores_wait(0, NULL, NULL, DEVRT_WAIT_ANY, INF, NULL));
  devrt_semaphore* s[NS];
  uint64_t v[NS], t0;
  unsigned idx;
  job j;
  for (int i = 0; i < NS; i++) s[i] = mk(rt, 0);

  /* ANY: only the last one, late. */
  fill(v, NS, 1);
  CHECK_STATUS(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ANY, 0, &idx), DEVRT_ERR_TIMEOUT);
  signal_later(&j, s[NS - 1], 1, 10);
  idx = 0;
  CHECK_OK(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ANY, INF, &idx));
  CHECK(idx == NS - 1);
  FINISH(&j, DEVRT_OK, NULL);

  /* ANY: one in the middle already there: at once, with its index. */
  fill(v, NS, 2);
  CHECK_OK(devrt_semaphore_signal(s[42], 2));
  idx = 0;
  CHECK_OK(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ANY, 0, &idx));
  CHECK(idx == 42);
  idx = 0;
  CHECK_OK(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ANY, INF, &idx));
  CHECK(idx == 42);
  CHECK_OK(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ANY, INF, NULL));

  /* ALL: the missing one is not first (HIP checked only the first): middle, then last, late. */
  fill(v, NS, 3);
  for (int i = 0; i < NS - 1; i++)
    if (i != 50) CHECK_OK(devrt_semaphore_signal(s[i], 3));
  CHECK_STATUS(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ALL, 0, &idx), DEVRT_ERR_TIMEOUT);
  CHECK_OK(devrt_semaphore_signal(s[50], 3));
  CHECK_STATUS(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ALL, 0, &idx), DEVRT_ERR_TIMEOUT);
  t0 = now_ns();
  CHECK_STATUS(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ALL, 20 * MS, &idx), DEVRT_ERR_TIMEOUT);
  CHECK(now_ns() - t0 >= 20 * MS);
  signal_later(&j, s[NS - 1], 3, 10);
  CHECK_OK(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ALL, INF, &idx));
  CHECK(val(s[NS - 1]) == 3);
  FINISH(&j, DEVRT_OK, NULL);
  CHECK_OK(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ALL, 0, NULL));

  /* ANY with none there runs out no earlier than asked. */
  fill(v, NS, 4);
  t0 = now_ns();
  CHECK_STATUS(devrt_semaphores_wait(NS, s, v, DEVRT_WAIT_ANY, 20 * MS, &idx), DEVRT_ERR_TIMEOUT);
  CHECK(now_ns() - t0 >= 20 * MS);
  for (int i = 0; i < NS; i++) CHECK_OK(devrt_semaphore_destroy(s[i]));
}

static void* run_stagger(void* p) { /* signals sems[2], [0], [3], [1], 5 ms apart */
  static const int order[4] = {2, 0, 3, 1};
  job* j = p;
  for (int i = 0; i < 4; i++) {
    t_sleep_ms(5);
    if (devrt_semaphore_signal(j->sems[order[i]], j->values[order[i]]) != DEVRT_OK) j->bad++;
  }
  return NULL;
}

/* AllModeStaggered: ALL returns only once the last of 4 staggered signals is in. */
static void all_staggered(void) {
  devrt_semaphore* s[4];
  uint64_t v[4] = {1, 2, 3, 4};
  for (int i = 0; i < 4; i++) s[i] = mk(rt, 0);
  job j = {.sems = s, .values = v};
  start(&j, run_stagger);
  CHECK_OK(devrt_semaphores_wait(4, s, v, DEVRT_WAIT_ALL, INF, NULL));
  for (int i = 0; i < 4; i++) CHECK(val(s[i]) == v[i]);
  FINISH(&j, DEVRT_OK, NULL);
  for (int i = 0; i < 4; i++) CHECK_OK(devrt_semaphore_destroy(s[i]));
}

/* fail: the first failure wins, then wait/signal/query return ABORTED naming the root cause and
 * failure() reports it; fail(OK) is refused; a failed member ends a multi-wait (ALL and ANY). */
static void failure(void) {
  devrt_semaphore *s = mk(rt, 0), *ok = mk(rt, 0);
  devrt_status st = DEVRT_ERR_ABORTED;
  const char* msg = NULL;
  CHECK_OK(devrt_semaphore_failure(s, &st, &msg));
  CHECK(st == DEVRT_OK && msg && !strcmp(msg, ""));
  CHECK_STATUS(devrt_semaphore_fail(s, DEVRT_OK, "not a failure"), BAD);
  CHECK_OK(devrt_semaphore_signal(s, 3)); /* the refused fail changed nothing */
  char text[64] = "root cause text";
  CHECK_OK(devrt_semaphore_fail(s, DEVRT_ERR_BACKEND_ERROR, text));
  memset(text, 'x', sizeof text - 1); /* the message was copied */
  CHECK_ABORTED(devrt_semaphore_wait(s, 4, INF), "root cause text");
  CHECK(has(devrt_last_error(), "BACKEND_ERROR"));
  CHECK_ABORTED(devrt_semaphore_wait(s, 1, 0), "root cause text"); /* even a reached value */
  CHECK_ABORTED(devrt_semaphore_signal(s, 4), "root cause text");
  uint64_t v = 0;
  CHECK_ABORTED(devrt_semaphore_query(s, &v), "root cause text");
  CHECK(v == 3);
  for (int i = 0; i < 2; i++) { /* before and after a second failure */
    st = DEVRT_OK, msg = NULL;
    CHECK_OK(devrt_semaphore_failure(s, &st, &msg));
    CHECK(st == DEVRT_ERR_BACKEND_ERROR && has(msg, "root cause text"));
    if (!i) CHECK_OK(devrt_semaphore_fail(s, DEVRT_ERR_OUT_OF_RESOURCES, "second failure"));
  }
  CHECK_ABORTED(devrt_semaphore_wait(s, 4, 0), "root cause text");
  devrt_semaphore* both[2] = {ok, s};
  uint64_t vals[2] = {1, 1};
  for (int m = 0; m < 2; m++) {
    unsigned idx = 0;
    CHECK_ABORTED(
        devrt_semaphores_wait(2, both, vals, m ? DEVRT_WAIT_ANY : DEVRT_WAIT_ALL, INF, &idx),
        "root cause text");
    CHECK(idx == 1);
  }
  CHECK(val(ok) == 0);
  CHECK_OK(devrt_semaphore_destroy(s));
  CHECK_OK(devrt_semaphore_destroy(ok));

  /* No message: ""; a long one is truncated to 255 bytes. */
  s = mk(rt, 0);
  CHECK_OK(devrt_semaphore_fail(s, DEVRT_ERR_DEVICE_LOST, NULL));
  CHECK_OK(devrt_semaphore_failure(s, &st, &msg));
  CHECK(st == DEVRT_ERR_DEVICE_LOST && msg && !strcmp(msg, ""));
  CHECK_ABORTED(devrt_semaphore_wait(s, 1, 0), "DEVICE_LOST");
  CHECK_OK(devrt_semaphore_destroy(s));
  char big[1000];
  memset(big, 'm', sizeof big - 1);
  big[sizeof big - 1] = 0;
  s = mk(rt, 0);
  CHECK_OK(devrt_semaphore_fail(s, DEVRT_ERR_OUT_OF_RESOURCES, big));
  CHECK_OK(devrt_semaphore_failure(s, &st, &msg));
  CHECK(st == DEVRT_ERR_OUT_OF_RESOURCES && msg && strlen(msg) > 0 && strlen(msg) <= 255 &&
        !strncmp(msg, big, strlen(msg)));
  CHECK_OK(devrt_semaphore_destroy(s));
}

enum { FAIL_WAITERS = 8 };

/* A failure wakes every blocked waiter with ABORTED naming the root cause, multi-waits (ALL and
 * ANY) included, with the failed one's index; the other semaphore is untouched. */
static void failure_while_waiting(void) {
  devrt_semaphore *s1 = mk(rt, 0), *s2 = mk(rt, 3);
  devrt_semaphore* both[2] = {s2, s1};
  const uint64_t v[2] = {5, 10};
  job w[FAIL_WAITERS + 2];
  reset_counts();
  for (int i = 0; i < FAIL_WAITERS; i++) wait_on(&w[i], s1, 10, INF);
  multi_wait_on(&w[FAIL_WAITERS], 2, both, v, DEVRT_WAIT_ALL);
  multi_wait_on(&w[FAIL_WAITERS + 1], 2, both, v, DEVRT_WAIT_ANY);
  blocked(FAIL_WAITERS + 2);
  CHECK(atomic_load(&g_finished) == 0);
  CHECK_OK(devrt_semaphore_fail(s1, DEVRT_ERR_DEPENDENCY_FAILED, "disk on fire"));
  for (int i = 0; i < FAIL_WAITERS + 2; i++) FINISH(&w[i], DEVRT_ERR_ABORTED, "disk on fire");
  CHECK(w[FAIL_WAITERS].index == 1 && w[FAIL_WAITERS + 1].index == 1);
  CHECK(val(s2) == 3);
  CHECK_OK(devrt_semaphore_signal(s2, 5));
  CHECK_OK(devrt_semaphore_wait(s2, 5, 0));
  CHECK_OK(devrt_semaphore_destroy(s1));
  CHECK_OK(devrt_semaphore_destroy(s2));
}

enum { DESTROY_WAITERS = 8 };

/* Destroy while threads are blocked in waits (infinite, finite, multi): all return CANCELLED. */
static void destroy_with_waiters(void) {
  devrt_semaphore *s = mk(rt, 0), *other = mk(rt, 0);
  devrt_semaphore* both[2] = {other, s};
  const uint64_t v[2] = {1, 1};
  job w[DESTROY_WAITERS + 2];
  reset_counts();
  for (int i = 0; i < DESTROY_WAITERS; i++) wait_on(&w[i], s, 1, INF);
  wait_on(&w[DESTROY_WAITERS], s, 1, LONG_NS);
  multi_wait_on(&w[DESTROY_WAITERS + 1], 2, both, v, DEVRT_WAIT_ANY);
  blocked(DESTROY_WAITERS + 2); /* a wait on a destroyed handle would be a use after free */
  CHECK(atomic_load(&g_finished) == 0);
  CHECK_OK(devrt_semaphore_destroy(s));
  for (int i = 0; i < DESTROY_WAITERS + 2; i++) FINISH(&w[i], DEVRT_ERR_CANCELLED, NULL);
  CHECK(w[DESTROY_WAITERS + 1].index == 1);
  CHECK(val(other) == 0);
  CHECK_OK(devrt_semaphore_destroy(other));
}

enum { QUERY_N = 20000 };
static atomic_int g_stop;

static void* run_checker(void* p) { /* polls query until told to stop; the value never decreases */
  job* j = p;
  uint64_t last = 0, v;
  while (!atomic_load(&g_stop)) {
    if (devrt_semaphore_query(j->sem, &v) != DEVRT_OK || v < last)
      j->bad++;
    else
      last = v;
  }
  j->value = last;
  return NULL;
}

/* Query monotonicity while another thread signals 1..20000 in order. */
static void query_monotonic(void) {
  devrt_semaphore* s = mk(rt, 0);
  job c = {.sem = s};
  int bad = 0;
  atomic_store(&g_stop, 0);
  start(&c, run_checker);
  for (uint64_t i = 1; i <= QUERY_N; i++) bad += devrt_semaphore_signal(s, i) != DEVRT_OK;
  atomic_store(&g_stop, 1);
  FINISH(&c, DEVRT_OK, NULL);
  CHECK(bad == 0 && c.value <= QUERY_N && val(s) == QUERY_N);
  CHECK_OK(devrt_semaphore_destroy(s));
}

enum { RACERS = 8, SEQ = 2000 };
static atomic_int g_wins[SEQ + 1];

static void* run_racer(void* p) { /* signals 1..SEQ in steps of j->value, and SEQ last */
  job* j = p;
  for (uint64_t v = 1;; v = v + j->value < SEQ ? v + j->value : SEQ) {
    devrt_status st = devrt_semaphore_signal(j->sem, v);
    uint64_t q = 0;
    if (st == DEVRT_OK) {
      atomic_fetch_add(&g_wins[v], 1);
      if (devrt_semaphore_query(j->sem, &q) != DEVRT_OK || q < v) j->bad++;
    } else if (st != BAD) {
      j->bad++;
    }
    if (v == SEQ) break;
  }
  return NULL;
}

/* ConcurrentSignals: 8 threads race through the same values; each value is won at most once, the
 * losers get INVALID_ARGUMENT, and the final value is the largest signalled. */
static void concurrent_signals(void) {
  devrt_semaphore* s = mk(rt, 0);
  job r[RACERS];
  for (int v = 0; v <= SEQ; v++) atomic_store(&g_wins[v], 0);
  for (int i = 0; i < RACERS; i++) {
    r[i] = (job){.sem = s, .value = (uint64_t)(i % 3) + 1};
    start(&r[i], run_racer);
  }
  for (int i = 0; i < RACERS; i++) FINISH(&r[i], DEVRT_OK, NULL);
  int twice = 0, wins = 0;
  for (int v = 1; v <= SEQ; v++)
    twice += atomic_load(&g_wins[v]) > 1, wins += atomic_load(&g_wins[v]);
  CHECK(twice == 0 && atomic_load(&g_wins[SEQ]) == 1 && wins >= 1);
  CHECK(val(s) == SEQ);
  CHECK_OK(devrt_semaphore_destroy(s));
}

/* NULL handles and pointers, bad modes and values: INVALID_ARGUMENT with a message, nothing
 * changes. */
static void bad_input(void) {
  devrt_semaphore *s = mk(rt, 1), *t = mk(rt, 0);
  uint64_t v = 0;
  devrt_status st;
  const char* msg;
  unsigned idx;
  CHECK_STATUS(devrt_semaphore_destroy(NULL), BAD);
  CHECK_STATUS(devrt_semaphore_signal(NULL, 1), BAD);
  CHECK_STATUS(devrt_semaphore_query(NULL, &v), BAD);
  CHECK_STATUS(devrt_semaphore_wait(NULL, 1, 0), BAD);
  CHECK_STATUS(devrt_semaphore_wait(NULL, 1, INF), BAD);
  CHECK_STATUS(devrt_semaphore_fail(NULL, DEVRT_ERR_BACKEND_ERROR, "x"), BAD);
  CHECK_STATUS(devrt_semaphore_failure(NULL, &st, &msg), BAD);
  CHECK_STATUS(devrt_semaphore_query(s, NULL), BAD);
  CHECK_STATUS(devrt_semaphore_failure(s, NULL, &msg), BAD);
  CHECK_STATUS(devrt_semaphore_failure(s, &st, NULL), BAD);
  devrt_semaphore *list[2] = {s, t}, *holey[2] = {s, NULL};
  uint64_t vals[2] = {2, 1}, over[2] = {2, MAXV + 1};
  for (int m = 0; m < 2; m++) {
    devrt_wait_mode mode = m ? DEVRT_WAIT_ANY : DEVRT_WAIT_ALL;
    CHECK_STATUS(devrt_semaphores_wait(2, NULL, vals, mode, 0, &idx), BAD);
    CHECK_STATUS(devrt_semaphores_wait(2, list, NULL, mode, 0, &idx), BAD);
    CHECK_STATUS(devrt_semaphores_wait(2, holey, vals, mode, INF, &idx), BAD);
    CHECK_STATUS(devrt_semaphores_wait(2, list, over, mode, 0, &idx), BAD);
  }
  CHECK_STATUS(devrt_semaphores_wait(2, list, vals, (devrt_wait_mode)2, 0, &idx), BAD);
  CHECK_STATUS(devrt_semaphores_wait(2, list, vals, (devrt_wait_mode)-1, INF, &idx), BAD);
  CHECK(val(s) == 1 && val(t) == 0);
  CHECK_OK(devrt_semaphore_failure(s, &st, &msg));
  CHECK(st == DEVRT_OK);
  CHECK_OK(devrt_semaphore_destroy(s));
  CHECK_OK(devrt_semaphore_destroy(t));
}

/* An owned runtime refuses to be destroyed (INVALID_STATE, changing nothing) while a semaphore of
 * it is alive, failed or not. */
static void runtime_teardown(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  devrt_runtime* r = t_runtime_cfg(&cfg);
  devrt_semaphore *a = mk(r, 0), *b = mk(r, 0);
  CHECK_STATUS(devrt_runtime_destroy(r), DEVRT_ERR_INVALID_STATE);
  CHECK_OK(devrt_semaphore_signal(a, 1));
  CHECK_OK(devrt_semaphore_wait(a, 1, INF));
  CHECK_OK(devrt_semaphore_fail(b, DEVRT_ERR_BACKEND_ERROR, "failed but alive"));
  CHECK_OK(devrt_semaphore_destroy(a));
  CHECK_STATUS(devrt_runtime_destroy(r), DEVRT_ERR_INVALID_STATE);
  CHECK_OK(devrt_semaphore_destroy(b));
  CHECK_OK(devrt_runtime_destroy(r));
}

/* The same waits on runtimes that block at once (wait_spin_ns 0) and spin long (200 ms): same
 * results, a poll never spins, and a multi-wait spans semaphores of two runtimes. */
static void spin_vs_block(void) {
  const uint64_t spins[] = {0, 200 * MS};
  for (int i = 0; i < 2; i++) {
    devrt_config cfg;
    REQUIRE_OK(devrt_config_init(&cfg));
    cfg.wait_spin_ns = spins[i];
    devrt_runtime* r = t_runtime_cfg(&cfg);
    wait_before_signal(r);
    ping_pong(r);
    devrt_semaphore *s = mk(r, 0), *m = mk(rt, 0);
    uint64_t t0 = now_ns();
    CHECK_STATUS(devrt_semaphore_wait(s, 1, 0), DEVRT_ERR_TIMEOUT);
    CHECK(now_ns() - t0 < 100 * MS);
    t0 = now_ns();
    CHECK_STATUS(devrt_semaphore_wait(s, 1, 5 * MS), DEVRT_ERR_TIMEOUT);
    CHECK(now_ns() - t0 >= 5 * MS);
    devrt_semaphore* both[2] = {s, m};
    uint64_t v[2] = {1, 1};
    job j;
    signal_later(&j, m, 1, 10);
    CHECK_OK(devrt_semaphore_signal(s, 1));
    CHECK_OK(devrt_semaphores_wait(2, both, v, DEVRT_WAIT_ALL, INF, NULL));
    CHECK(val(m) == 1);
    FINISH(&j, DEVRT_OK, NULL);
    CHECK_OK(devrt_semaphore_destroy(s));
    CHECK_OK(devrt_semaphore_destroy(m));
    CHECK_OK(devrt_runtime_destroy(r));
  }
}

int main(void) {
  rt = t_runtime();
  create_query();
  signal_rules();
  wait_rules();
  wait_before_signal(rt);
  ping_pong(rt);
  timeout_then_signal();
  many_waiters();
  waiters_in_any_order();
  multi_wait();
  all_staggered();
  failure();
  failure_while_waiting();
  destroy_with_waiters();
  query_monotonic();
  concurrent_signals();
  bad_input();
  runtime_teardown();
  spin_vs_block();
  CHECK_OK(devrt_runtime_destroy(rt)); /* every semaphore was destroyed */
  return t_done();
}
