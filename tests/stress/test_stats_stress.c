/* test_stats_stress.c: the statistics layer's figures are exact under many threads (run under
 * TSan in CI), over a recording upstream (async, caching over async) and over one that is not
 * (a pass-through user layer, so the layer keeps its pointer map):
 * - lock-step rounds (a barrier between allocating and freeing) whose peaks are known exactly,
 *   overall and per tag;
 * - random interleavings under a byte and a count bound that threads take before allocating and
 *   give back after freeing: every figure read during and after the run stays within the bounds,
 *   and each peak is at least what one thread alone held at once;
 * - many threads on overlapping random sets of more tag texts than the layer has entries, some
 *   texts at two addresses: each text's figures, "(other)" and the overall ones add up;
 * - lock-step rounds where threads free each other's blocks (a thread's cell of the figures goes
 *   negative), and rounds that start from reset peaks, so every thread's quota is exhausted at
 *   once and the slow paths race: each round's figures, read while all is held, are exact. */
#include <pthread.h>
#include "test.h"

enum { T = 8 };

/* ---- a pass-through user layer: statistics over it keeps its own pointer map ---- */

static devrt_status pass_alloc(devrt_resource* r, size_t n, devrt_stream s, const char* tag,
                               void** out) {
  return devrt_resource_allocate(r->upstream, n, s, tag, out);
}
static devrt_status pass_free(devrt_resource* r, void* p, size_t n, devrt_stream s) {
  return devrt_resource_deallocate(r->upstream, p, n, s);
}
static void pass_destroy(devrt_resource* r) { free(r); }
static const devrt_resource_vtable pass_vt = {
    .allocate = pass_alloc, .deallocate = pass_free, .destroy = pass_destroy};

typedef struct ctx {
  devrt_runtime* rt;
  devrt_resource* S;
  pthread_barrier_t bar;
} ctx;

/* CHECK for worker threads (test.h's counters are the main thread's): counts into *errs. */
#define EXPECT(errs, c)                                                                         \
  do {                                                                                          \
    if (!(c)) fprintf(stderr, "%s:%d: EXPECT(%s) failed\n", __FILE__, __LINE__, #c), (*errs)++; \
  } while (0)
#define EXPECT_OK(errs, expr) EXPECT(errs, (expr) == DEVRT_OK)

static devrt_memory_stats get(devrt_resource* S, const char* tag, int* errs) {
  devrt_memory_stats st = {{0}, {0}};
  EXPECT_OK(errs, devrt_statistics_get(S, tag, &st));
  return st;
}

/* ---- lock-step rounds: thread i holds blocks[i][r] blocks of size (i+1)*(r+1)*256 under tag
 * tags[(i + r) % 3] at once, then frees them; the peaks are the largest round's sums ---- */

enum { ROUNDS = 24, MAXB = 6 };
static const char* const lock_tags[3] = {"ls0", "ls1", "ls2"};
static int blocks_of(int i, int r) { return (i * 5 + r * 3) % MAXB; }
static size_t size_of(int i, int r) { return (size_t)(i + 1) * (size_t)(r + 1) * 256; }

typedef struct lock_arg {
  ctx* c;
  int i, errs;
} lock_arg;
static void* lockstep(void* arg) {
  lock_arg* a = arg;
  devrt_stream s;
  EXPECT_OK(&a->errs, devrt_stream_acquire(a->c->rt, DEVRT_ACQUIRE_WAIT, &s));
  for (int r = 0; r < ROUNDS; r++) {
    void* p[MAXB];
    int n = blocks_of(a->i, r);
    for (int b = 0; b < n; b++)
      EXPECT_OK(&a->errs, devrt_resource_allocate(a->c->S, size_of(a->i, r), s,
                                                  lock_tags[(a->i + r) % 3], &p[b]));
    pthread_barrier_wait(&a->c->bar); /* every thread holds its round's blocks */
    for (int b = 0; b < n; b++)
      EXPECT_OK(&a->errs, devrt_resource_deallocate(a->c->S, p[b], size_of(a->i, r), s));
    pthread_barrier_wait(&a->c->bar);
  }
  EXPECT_OK(&a->errs, devrt_stream_synchronize(a->c->rt, s));
  EXPECT_OK(&a->errs, devrt_stream_release(a->c->rt, s));
  return NULL;
}

static void test_lockstep(ctx* c) {
  pthread_barrier_init(&c->bar, NULL, T);
  pthread_t th[T];
  lock_arg a[T];
  for (int i = 0; i < T; i++)
    a[i] = (lock_arg){c, i, 0}, pthread_create(&th[i], NULL, lockstep, &a[i]);
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    CHECK(a[i].errs == 0);
  }
  pthread_barrier_destroy(&c->bar);
  int64_t peak[4][2] = {{0}}, total[4][2] = {{0}}; /* [tag or 3: overall][bytes, count] */
  for (int r = 0; r < ROUNDS; r++) {
    int64_t held[4][2] = {{0}};
    for (int i = 0; i < T; i++) {
      int64_t n = blocks_of(i, r), b = n * (int64_t)size_of(i, r);
      for (int g = (i + r) % 3, j = 0; j < 2; g = 3, j++)
        held[g][0] += b, held[g][1] += n, total[g][0] += b, total[g][1] += n;
    }
    for (int g = 0; g < 4; g++)
      for (int k = 0; k < 2; k++)
        if (held[g][k] > peak[g][k]) peak[g][k] = held[g][k];
  }
  for (int g = 0; g < 4; g++) {
    devrt_memory_stats st = get(c->S, g < 3 ? lock_tags[g] : NULL, &t_failures);
    CHECK(st.bytes.current == 0 && st.bytes.peak == peak[g][0] && st.bytes.total == total[g][0]);
    CHECK(st.count.current == 0 && st.count.peak == peak[g][1] && st.count.total == total[g][1]);
  }
}

/* ---- cross frees and racing slow paths: thread i allocates cross_n(i, r) blocks of
 * cross_size(i, r) in round r; at the barrier thread 0 reads the figures (all held: current and
 * peak are the round's sum); then thread (i + 1 + r) % T frees them. With `reset`, thread 0 resets
 * the peaks before each round (nothing held): every quota is then 0, so every thread's first
 * allocation takes the slow path at once, racing the others. ---- */

extern _Atomic uint64_t dv_stats_slow_paths; /* statistics.c: slow paths taken */
enum { CROSS_ROUNDS = 40, CROSS_MAXB = 5 };
static int cross_n(int i, int r) { return 1 + (i * 3 + r * 7) % CROSS_MAXB; }
static size_t cross_size(int i, int r) { return (size_t)(1 + (i * 13 + r * 5) % 29) * 512; }

typedef struct cross_ctx {
  ctx* c;
  bool reset;
  void* p[T][CROSS_MAXB];
  devrt_stream s[T];
  int errs_main;
} cross_ctx;
typedef struct cross_arg {
  cross_ctx* x;
  int i, errs;
} cross_arg;

static void* cross_work(void* arg) {
  cross_arg* a = arg;
  cross_ctx* x = a->x;
  EXPECT_OK(&a->errs, devrt_stream_acquire(x->c->rt, DEVRT_ACQUIRE_WAIT, &x->s[a->i]));
  for (int r = 0; r < CROSS_ROUNDS; r++) {
    if (a->i == 0 && x->reset) EXPECT_OK(&a->errs, devrt_statistics_reset_peaks(x->c->S));
    pthread_barrier_wait(&x->c->bar); /* (the reset is done) */
    for (int b = 0; b < cross_n(a->i, r); b++)
      EXPECT_OK(&a->errs, devrt_resource_allocate(x->c->S, cross_size(a->i, r), x->s[a->i], "cx",
                                                  &x->p[a->i][b]));
    pthread_barrier_wait(&x->c->bar); /* every block of the round is held */
    if (a->i == 0) {
      int64_t held[2] = {0, 0}, peak[2] = {0, 0};
      for (int q = 0; q <= r; q++) { /* the rounds' sums: the peak is the largest since reset */
        int64_t h[2] = {0, 0};
        for (int i = 0; i < T; i++)
          h[0] += cross_n(i, q) * (int64_t)cross_size(i, q), h[1] += cross_n(i, q);
        for (int k = 0; k < 2; k++) {
          held[k] = h[k];
          if ((!x->reset || q == r) && h[k] > peak[k]) peak[k] = h[k];
        }
      }
      for (int g = 0; g < 2; g++) {
        devrt_memory_stats st = get(x->c->S, g ? "cx" : NULL, &a->errs);
        EXPECT(&a->errs, st.bytes.current == held[0] && st.count.current == held[1]);
        if (x->reset || g) /* (the overall peak also has the earlier tests' rounds) */
          EXPECT(&a->errs, st.bytes.peak == peak[0] && st.count.peak == peak[1]);
      }
    }
    pthread_barrier_wait(&x->c->bar);
    int o = (a->i + 1 + r) % T; /* free another thread's blocks, on its stream */
    for (int b = 0; b < cross_n(o, r); b++)
      EXPECT_OK(&a->errs,
                devrt_resource_deallocate(x->c->S, x->p[o][b], cross_size(o, r), x->s[o]));
    pthread_barrier_wait(&x->c->bar);
  }
  EXPECT_OK(&a->errs, devrt_stream_synchronize(x->c->rt, x->s[a->i]));
  pthread_barrier_wait(&x->c->bar); /* nobody frees on this stream any more */
  EXPECT_OK(&a->errs, devrt_stream_release(x->c->rt, x->s[a->i]));
  return NULL;
}

static void test_cross(ctx* c, bool reset) {
  static cross_ctx x;
  memset(&x, 0, sizeof x);
  x.c = c, x.reset = reset;
  uint64_t slow = atomic_load(&dv_stats_slow_paths);
  pthread_barrier_init(&c->bar, NULL, T);
  pthread_t th[T];
  cross_arg a[T];
  for (int i = 0; i < T; i++)
    a[i] = (cross_arg){&x, i, 0}, pthread_create(&th[i], NULL, cross_work, &a[i]);
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    CHECK(a[i].errs == 0);
  }
  pthread_barrier_destroy(&c->bar);
  devrt_memory_stats st = get(c->S, "cx", &t_failures);
  CHECK(st.bytes.current == 0 && st.count.current == 0);
  /* with resets, every round's first allocations all took the slow path */
  if (reset) CHECK(atomic_load(&dv_stats_slow_paths) - slow >= (uint64_t)CROSS_ROUNDS * T);
}

/* ---- random interleavings under a bound ---- */

enum { HOLD = 4, MAXSIZE = 4096, RANDOM_OPS = 20000 };
#define BOUND_BYTES (3 * HOLD * MAXSIZE) /* under what 8 threads could hold at once */
#define BOUND_COUNT (3 * HOLD)
static const char* const rand_tags[4] = {"r0", "r1", "r2", "r3"};

typedef struct bound {
  _Atomic int64_t bytes, count; /* what may still be taken */
} bound;
static bool take(bound* b, int64_t bytes) {
  int64_t v = atomic_load(&b->bytes);
  do
    if (v < bytes) return false;
  while (!atomic_compare_exchange_weak(&b->bytes, &v, v - bytes));
  if (atomic_fetch_sub(&b->count, 1) > 0) return true;
  atomic_fetch_add(&b->count, 1), atomic_fetch_add(&b->bytes, bytes);
  return false;
}
static void give(bound* b, int64_t bytes) {
  atomic_fetch_add(&b->count, 1), atomic_fetch_add(&b->bytes, bytes);
}

typedef struct rand_arg {
  ctx* c;
  bound* b;
  int i, errs;
  int64_t own_peak[5][2]; /* the most this thread held at once: per tag, [4] overall */
  int64_t total[5][2];
} rand_arg;

static void check_bounds(devrt_memory_stats st, int* errs) {
  EXPECT(errs, st.bytes.current >= 0 && st.bytes.current <= st.bytes.peak &&
                   st.bytes.peak <= BOUND_BYTES);
  EXPECT(errs, st.count.current >= 0 && st.count.current <= st.count.peak &&
                   st.count.peak <= BOUND_COUNT);
}

static void* random_work(void* arg) {
  rand_arg* a = arg;
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(a->i + 1);
  devrt_stream s;
  EXPECT_OK(&a->errs, devrt_stream_acquire(a->c->rt, DEVRT_ACQUIRE_WAIT, &s));
  struct {
    void* p;
    size_t size;
    int tag;
  } h[HOLD];
  int n = 0;
  int64_t held[5][2] = {{0}};
  for (int op = 0; op < RANDOM_OPS; op++) {
    uint64_t r = t_rand(&x);
    if (r % 97 == 0) { /* a reader among the writers */
      check_bounds(get(a->c->S, NULL, &a->errs), &a->errs);
      check_bounds(get(a->c->S, rand_tags[r % 4], &a->errs), &a->errs);
    } else if (n < HOLD && (n == 0 || r % 2)) {
      size_t size = 1 + (size_t)(r >> 8) % MAXSIZE;
      int tag = (int)(r >> 40) % 4;
      if (!take(a->b, (int64_t)size)) continue;
      if (devrt_resource_allocate(a->c->S, size, s, rand_tags[tag], &h[n].p) != DEVRT_OK) {
        EXPECT(&a->errs, 0);
        give(a->b, (int64_t)size);
        continue;
      }
      h[n].size = size, h[n].tag = tag, n++;
      for (int g = tag, j = 0; j < 2; g = 4, j++) {
        held[g][0] += (int64_t)size, held[g][1]++;
        a->total[g][0] += (int64_t)size, a->total[g][1]++;
        for (int k = 0; k < 2; k++)
          if (held[g][k] > a->own_peak[g][k]) a->own_peak[g][k] = held[g][k];
      }
    } else if (n) {
      int k = (int)((r >> 16) % (uint64_t)n);
      EXPECT_OK(&a->errs, devrt_resource_deallocate(a->c->S, h[k].p, h[k].size, s));
      give(a->b, (int64_t)h[k].size);
      for (int g = h[k].tag, j = 0; j < 2; g = 4, j++)
        held[g][0] -= (int64_t)h[k].size, held[g][1]--;
      h[k] = h[--n];
    }
  }
  while (n--) {
    EXPECT_OK(&a->errs, devrt_resource_deallocate(a->c->S, h[n].p, h[n].size, s));
    give(a->b, (int64_t)h[n].size);
  }
  EXPECT_OK(&a->errs, devrt_stream_synchronize(a->c->rt, s));
  EXPECT_OK(&a->errs, devrt_stream_release(a->c->rt, s));
  return NULL;
}

static void test_random(ctx* c) {
  bound b = {BOUND_BYTES, BOUND_COUNT};
  CHECK_OK(devrt_statistics_reset_peaks(c->S)); /* the lock-step rounds' peaks: all freed since */
  devrt_memory_stats before = get(c->S, NULL, &t_failures); /* the overall totals so far */
  pthread_t th[T];
  rand_arg a[T];
  for (int i = 0; i < T; i++) {
    a[i] = (rand_arg){.c = c, .b = &b, .i = i};
    pthread_create(&th[i], NULL, random_work, &a[i]);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    CHECK(a[i].errs == 0);
  }
  for (int g = 0; g < 5; g++) {
    devrt_memory_stats st = get(c->S, g < 4 ? rand_tags[g] : NULL, &t_failures);
    check_bounds(st, &t_failures);
    int64_t own[2] = {0, 0};
    int64_t total[2] = {g < 4 ? 0 : before.bytes.total, g < 4 ? 0 : before.count.total};
    for (int i = 0; i < T; i++)
      for (int k = 0; k < 2; k++) {
        if (a[i].own_peak[g][k] > own[k]) own[k] = a[i].own_peak[g][k];
        total[k] += a[i].total[g][k];
      }
    CHECK(st.bytes.current == 0 && st.bytes.peak >= own[0] && st.bytes.total == total[0]);
    CHECK(st.count.current == 0 && st.count.peak >= own[1] && st.count.total == total[1]);
  }
}

/* ---- many tag texts, overlapping random sets, some texts at two addresses ---- */

enum { TEXTS = 1500, TAG_OPS = 6000 }; /* more texts than the layer's own entries (1024) */
static char text_a[TEXTS][16], text_b[TEXTS][16];

typedef struct tag_arg {
  ctx* c;
  int i, errs;
  int64_t count[TEXTS], bytes[TEXTS];
} tag_arg;

static void* tag_work(void* arg) {
  tag_arg* a = arg;
  uint64_t x = 0xc2b2ae3d27d4eb4full * (uint64_t)(a->i + 1);
  devrt_stream s;
  EXPECT_OK(&a->errs, devrt_stream_acquire(a->c->rt, DEVRT_ACQUIRE_WAIT, &s));
  int base = a->i * (TEXTS / 2) / T; /* thread i draws from [base, base + TEXTS/2): overlapping */
  for (int op = 0; op < TAG_OPS; op++) {
    uint64_t r = t_rand(&x);
    int t = base + (int)(r % (TEXTS / 2));
    size_t size = 1 + (size_t)(r >> 32) % 1000;
    void* p;
    EXPECT_OK(&a->errs,
              devrt_resource_allocate(a->c->S, size, s, (r >> 20) & 1 ? text_a[t] : text_b[t], &p));
    EXPECT_OK(&a->errs, devrt_resource_deallocate(a->c->S, p, size, s));
    a->count[t]++, a->bytes[t] += (int64_t)size;
  }
  EXPECT_OK(&a->errs, devrt_stream_synchronize(a->c->rt, s));
  EXPECT_OK(&a->errs, devrt_stream_release(a->c->rt, s));
  return NULL;
}

static void test_tags(ctx* c) {
  for (int t = 0; t < TEXTS; t++) {
    snprintf(text_a[t], sizeof text_a[t], "tag%d", t);
    memcpy(text_b[t], text_a[t], sizeof text_a[t]); /* the same text at another address */
  }
  CHECK_OK(devrt_statistics_reset_peaks(c->S));
  pthread_t th[T];
  static tag_arg a[T];
  for (int i = 0; i < T; i++) {
    memset(&a[i], 0, sizeof a[i]);
    a[i].c = c, a[i].i = i;
    pthread_create(&th[i], NULL, tag_work, &a[i]);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    CHECK(a[i].errs == 0);
  }
  int64_t rest[2] = {0, 0},
          used = 0; /* what texts without an entry of their own add to "(other)" */
  int own = 0;
  for (int t = 0; t < TEXTS; t++) {
    int64_t want[2] = {0, 0};
    for (int i = 0; i < T; i++) want[0] += a[i].bytes[t], want[1] += a[i].count[t];
    used += want[1] > 0;
    devrt_memory_stats st = get(c->S, text_b[t], &t_failures);
    if (st.count.total) { /* its own entry: exactly its own figures */
      own++;
      CHECK(st.bytes.total == want[0] && st.count.total == want[1]);
      CHECK(st.bytes.current == 0 && st.count.current == 0 && st.count.peak >= 1 &&
            st.count.peak <= T && st.bytes.peak <= T * 1000);
    } else {
      rest[0] += want[0], rest[1] += want[1];
    }
  }
  devrt_memory_stats other = get(c->S, "(other)", &t_failures), all = get(c->S, NULL, &t_failures);
  CHECK(used > 1024 && own == 1024 - 8); /* the earlier tests took 8 of the entries */
  CHECK(other.bytes.total == rest[0] && other.count.total == rest[1] && other.count.current == 0);
  CHECK(other.count.peak <= T && all.count.peak >= 1 && all.count.peak <= T);
  CHECK(all.count.current == 0 && all.bytes.peak <= T * 1000);
}

typedef devrt_resource* (*maker)(devrt_runtime* rt);
static devrt_resource* over_async(devrt_runtime* rt) {
  devrt_resource* r;
  REQUIRE_OK(devrt_async_resource_create(rt, &r));
  return r;
}
static devrt_resource* over_caching(devrt_runtime* rt) {
  devrt_resource *a, *r;
  REQUIRE_OK(devrt_async_resource_create(rt, &a));
  REQUIRE_OK(devrt_caching_resource_create(a, NULL, &r));
  CHECK_OK(devrt_resource_release(a)); /* r holds it */
  return r;
}
static devrt_resource* over_user_layer(devrt_runtime* rt) {
  devrt_resource* r = calloc(1, sizeof *r);
  REQUIRE_OK(devrt_resource_init(r, &pass_vt, "pass", rt, over_async(rt)));
  CHECK_OK(devrt_resource_release(r->upstream)); /* r holds it */
  return r;
}

static void suite(devrt_runtime* rt, const char* name, maker mk) {
  int before = t_failures;
  devrt_resource* up = mk(rt);
  ctx c = {.rt = rt};
  REQUIRE_OK(devrt_statistics_resource_create(up, &c.S));
  test_lockstep(&c);
  test_random(&c);
  test_cross(&c, false);
  test_cross(&c, true);
  test_tags(&c);
  CHECK_OK(devrt_resource_release(c.S));
  CHECK_OK(devrt_resource_reap(up, DEVRT_REAP_WAIT, NULL));
  CHECK_OK(devrt_resource_release(up));
  printf(
      "statistics over %s: lock-step peaks, %d threads x %d random ops under a bound, %d tag "
      "texts, %d cross-free rounds, %d rounds racing slow paths: %s\n",
      name, T, RANDOM_OPS, TEXTS, CROSS_ROUNDS, CROSS_ROUNDS,
      t_failures == before ? "ok" : "FAILED");
}

int main(void) {
  devrt_runtime* rt = t_runtime();
  suite(rt, "async", over_async);
  suite(rt, "caching", over_caching);
  suite(rt, "a user layer (pointer map)", over_user_layer);
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
