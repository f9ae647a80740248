/* test_caching.c: the caching layer over a counting fake upstream (host memory) and over the async
 * leaf: hot same-stream reuse, cross-stream refusal before a free completes and the inserted wait
 * when allowed, a fence that fails to record (refusal, trim kept), exact account figures, trim,
 * the cache bound, refused input, and threads + trim (more in stress/test_caching_stress.c). */
#include <pthread.h>
#include "memory/account.h"
#include "test.h"

/* ---- a fake upstream: 256-aligned malloc, counts calls, frees after the stream drains ---- */
typedef struct fake {
  devrt_resource base;
  dv_mem_account acct;
  _Atomic int allocs, frees, trims, fail_next;
} fake;

static devrt_status fake_alloc(devrt_resource* r, size_t size, devrt_stream sid, const char* tag,
                               void** out) {
  fake* f = (fake*)r;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(r->rt, sid, &s, "fake allocate"));
  if (atomic_exchange(&f->fail_next, 0))
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "fake allocate: injected");
  uint64_t n = dv_round(&f->acct, size);
  if (!dv_account_admit(&f->acct, n))
    return dv_account_refuse(&f->acct, "fake allocate", size, n, tag);
  void* p = aligned_alloc(256, n);
  if (!p) {
    dv_account_release(&f->acct, n);
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "fake allocate: out of host memory");
  }
  atomic_fetch_add(&f->allocs, 1);
  *out = p;
  return DEVRT_OK;
}
static devrt_status fake_free(devrt_resource* r, void* p, size_t size, devrt_stream sid) {
  fake* f = (fake*)r;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(r->rt, sid, &s, "fake deallocate"));
  DV_CHECK(r->rt->be->stream_sync(s)); /* work queued before the free may still use p */
  dv_account_release(&f->acct, dv_round(&f->acct, size));
  atomic_fetch_add(&f->frees, 1);
  free(p);
  return DEVRT_OK;
}
static devrt_status fake_query(devrt_resource* r, devrt_resource_figures* out) {
  dv_account_query(r->account, out);
  return DEVRT_OK;
}
static devrt_status fake_trim(devrt_resource* r, uint64_t* released) {
  atomic_fetch_add(&((fake*)r)->trims, 1);
  *released = 0;
  return DEVRT_OK;
}
static void fake_destroy(devrt_resource* r) { free(r); }
static const devrt_resource_vtable fake_vt = {.allocate = fake_alloc,
                                              .deallocate = fake_free,
                                              .query = fake_query,
                                              .trim = fake_trim,
                                              .destroy = fake_destroy};

static devrt_resource* make_fake(devrt_runtime* rt, fake** fo) {
  fake* f = aligned_alloc(_Alignof(fake), sizeof *f);
  memset(f, 0, sizeof *f);
  dv_account_init(&f->acct);
  REQUIRE_OK(devrt_resource_init(&f->base, &fake_vt, "fake", rt, NULL));
  f->acct.granularity = 256;
  f->base.account = &f->acct;
  *fo = f;
  return &f->base;
}

/* ---- helpers ---- */
static devrt_resource* make_cache(devrt_resource* up, bool wait, uint64_t max) {
  devrt_caching_options o = {.cross_stream_wait = wait, .max_cached_bytes = max};
  devrt_resource* c = NULL;
  REQUIRE_OK(devrt_caching_resource_create(up, &o, &c));
  return c;
}
static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

enum { KB64 = 64 << 10, N64 = KB64 / 4 };
static uint32_t host_buf[N64];

static void slow_fill(devrt_runtime* rt, devrt_stream s, void* p, uint32_t v) {
  uint64_t n = N64, delay = 200000000ull;
  void* args[] = {&p, &v, &n, &delay};
  CHECK_OK(t_launch(rt, s, "devrt_slow_fill_u32", 1, 32, args));
}
static void fill(devrt_runtime* rt, devrt_stream s, void* p, uint32_t v) {
  uint64_t n = N64;
  void* args[] = {&p, &v, &n};
  CHECK_OK(t_launch(rt, s, "devrt_fill_u32", 8, 128, args));
}

/* ---- threads ---- */
typedef struct worker {
  devrt_runtime* rt;
  devrt_resource* c;
  unsigned seed;
  int errors;
} worker;
static _Atomic int workers_left;

static void* work(void* arg) {
  worker* w = arg;
  devrt_stream s;
  if (devrt_stream_acquire(w->rt, DEVRT_ACQUIRE_WAIT, &s) != DEVRT_OK) return w->errors++, NULL;
  enum { HOLD = 16 };
  void* p[HOLD] = {0};
  size_t sz[HOLD] = {0};
  static const size_t sizes[] = {256, 512, 1000, 4096, 5000, 65536, 100000, 1 << 20};
  for (int i = 0; i < 5000; i++) {
    unsigned k = (unsigned)rand_r(&w->seed) % HOLD;
    if (p[k]) {
      if (devrt_resource_deallocate(w->c, p[k], sz[k], s) != DEVRT_OK) w->errors++;
      p[k] = NULL;
    } else {
      sz[k] = sizes[(unsigned)rand_r(&w->seed) % 8] + (unsigned)rand_r(&w->seed) % 64;
      if (devrt_resource_allocate(w->c, sz[k], s, "thread", &p[k]) != DEVRT_OK)
        w->errors++, p[k] = NULL;
    }
  }
  for (int k = 0; k < HOLD; k++)
    if (p[k] && devrt_resource_deallocate(w->c, p[k], sz[k], s) != DEVRT_OK) w->errors++;
  if (devrt_stream_release(w->rt, s) != DEVRT_OK) w->errors++;
  atomic_fetch_sub(&workers_left, 1);
  return NULL;
}
static void* trimmer(void* arg) {
  devrt_resource* c = arg;
  while (atomic_load(&workers_left) > 0) {
    uint64_t n;
    if (devrt_resource_trim(c, &n) != DEVRT_OK) CHECK(0);
    t_sleep_ms(1);
  }
  return NULL;
}

/* ---- the suite, over one upstream (f: the fake, or NULL for the async leaf) ---- */
static void suite(devrt_runtime* rt, devrt_resource* up, fake* f, bool kernels) {
  const char* what = f ? "fake" : "async";
  devrt_stream a, b;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &a));
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &b));
  devrt_resource_figures base = t_figures(up);
  uint64_t R = dv_round(up->account, KB64); /* 64 KiB is its own class */

  /* Hot same-stream reuse: upstream is not called again. */
  devrt_resource* c = make_cache(up, false, 0);
  CHECK(!strcmp(devrt_resource_name(c), "caching") && devrt_resource_upstream(c) == up);
  void *p = NULL, *q = NULL, *r = NULL;
  REQUIRE_OK(devrt_resource_allocate(c, KB64, a, "t", &p));
  CHECK(p && ((uintptr_t)p & 255) == 0);
  devrt_resource_figures x = t_figures(c);
  CHECK(x.live_bytes == base.live_bytes + R && x.cached_bytes == 0 && x.cache_misses == 1 &&
        x.cache_hits == 0);
  int allocs0 = f ? atomic_load(&f->allocs) : 0;
  CHECK_OK(devrt_resource_deallocate(c, p, KB64, a));
  x = t_figures(c);
  CHECK(x.live_bytes == base.live_bytes && x.cached_bytes == R &&
        x.pending_bytes == base.pending_bytes);
  CHECK_OK(devrt_resource_allocate(c, KB64, a, "t", &q));
  CHECK(q == p);
  x = t_figures(c);
  CHECK(x.live_bytes == base.live_bytes + R && x.cached_bytes == 0 && x.cache_hits == 1 &&
        x.cache_misses == 1);
  if (f) CHECK(atomic_load(&f->allocs) == allocs0);
  /* A smaller request of the same class is served by the same block. */
  CHECK_OK(devrt_resource_deallocate(c, q, KB64, a));
  CHECK_OK(devrt_resource_allocate(c, KB64 - 5000, a, "t", &q));
  CHECK(q == p);
  CHECK_OK(devrt_resource_deallocate(c, q, KB64 - 5000, a));

  /* Hot-path cost (reported, not checked). */
  enum { ITERS = 200000 };
  double t0 = now_ns();
  for (int i = 0; i < ITERS; i++) {
    devrt_resource_allocate(c, KB64, a, "t", &q);
    devrt_resource_deallocate(c, q, KB64, a);
  }
  double pair_ns = (now_ns() - t0) / ITERS;

  /* Bad input is refused and changes nothing. */
  REQUIRE_OK(devrt_resource_allocate(c, KB64, a, "t", &q));
  x = t_figures(c);
  int local;
  void* foreign = malloc(4096);
  CHECK_STATUS(devrt_resource_deallocate(c, foreign, 4096, a), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "not allocated"));
  CHECK_STATUS(devrt_resource_deallocate(c, &local, 4, a), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_deallocate(c, q, KB64 + 1, a), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "differs"));
  CHECK_STATUS(devrt_resource_deallocate(c, NULL, KB64, a), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_deallocate(c, q, 0, a), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_deallocate(c, q, KB64, 0), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_deallocate(c, q, KB64, a + 12345), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_allocate(c, 0, a, "t", &r), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_allocate(c, KB64, 0, "t", &r), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_resource_allocate(
                   c, KB64, ((devrt_stream)4095 << 32) | (a & ~((uint64_t)0xfff << 32)), "t", &r),
               DEVRT_ERR_INVALID_ARGUMENT);
  devrt_resource_figures y = t_figures(c);
  CHECK(y.live_bytes == x.live_bytes && y.cached_bytes == x.cached_bytes &&
        y.pending_bytes == x.pending_bytes && y.cache_hits == x.cache_hits &&
        y.cache_misses == x.cache_misses);
  CHECK_OK(devrt_resource_deallocate(c, q, KB64, a));
  CHECK_STATUS(devrt_resource_deallocate(c, q, KB64, a),
               DEVRT_ERR_INVALID_ARGUMENT); /* double free */
  CHECK(strstr(devrt_last_error(), "double free"));
  CHECK_STATUS(devrt_resource_deallocate(c, q, KB64, b), DEVRT_ERR_INVALID_ARGUMENT);
  y = t_figures(c);
  CHECK(y.live_bytes == base.live_bytes && y.cached_bytes == R);
  free(foreign);

  /* Upstream failure comes back unchanged. */
  if (f)
    atomic_store(&f->fail_next, 1);
  else
    rt->be->fault_arm(rt->dev, DV_FAULT_ALLOC, 1);
  CHECK_STATUS(devrt_resource_allocate(c, 3 << 20, a, "t", &r), DEVRT_ERR_DEVICE_ALLOC_FAILED);
  y = t_figures(c);
  CHECK(y.live_bytes == base.live_bytes && y.cached_bytes == R);
  /* Above the largest class: passed straight through, never cached. */
  CHECK_OK(devrt_resource_allocate(c, (80u << 20) + 3, a, "big", &r));
  y = t_figures(c);
  CHECK(y.live_bytes == base.live_bytes + dv_round(up->account, (80u << 20) + 3) &&
        y.cached_bytes == R);
  CHECK_STATUS(devrt_resource_deallocate(c, r, 80u << 20, a), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_resource_deallocate(c, r, (80u << 20) + 3, a));
  y = t_figures(c);
  CHECK(y.live_bytes == base.live_bytes && y.cached_bytes == R);

  /* Trim gives every cached byte back (several classes and streams). */
  void* m[6];
  size_t msz[6] = {100, 700, 5000, 70000, 1 << 20, 3 << 20};
  uint64_t want = R;
  for (int i = 0; i < 6; i++)
    REQUIRE_OK(devrt_resource_allocate(c, msz[i], i & 1 ? a : b, "t", &m[i]));
  for (int i = 0; i < 6; i++) CHECK_OK(devrt_resource_deallocate(c, m[i], msz[i], i & 1 ? b : a));
  y = t_figures(c);
  want = y.cached_bytes;
  CHECK(y.live_bytes == base.live_bytes && want > R + (4u << 20));
  int trims0 = f ? atomic_load(&f->trims) : 0;
  uint64_t released = 0;
  CHECK_OK(devrt_resource_trim(c, &released));
  CHECK(released == want);
  y = t_figures(c);
  CHECK(y.cached_bytes == 0 && y.live_bytes == base.live_bytes);
  if (f)
    CHECK(atomic_load(&f->trims) == trims0 + 1 &&
          atomic_load(&f->allocs) == atomic_load(&f->frees));
  CHECK_OK(devrt_resource_trim(c, &released));
  CHECK(released == 0);
  CHECK_OK(devrt_resource_release(c));

  /* max_cached_bytes: the bound holds; the rest goes upstream. */
  c = make_cache(up, false, 3 * R);
  void* k[5];
  for (int i = 0; i < 5; i++) REQUIRE_OK(devrt_resource_allocate(c, KB64, a, "t", &k[i]));
  int frees0 = f ? atomic_load(&f->frees) : 0;
  for (int i = 0; i < 5; i++) CHECK_OK(devrt_resource_deallocate(c, k[i], KB64, a));
  y = t_figures(c);
  CHECK(y.cached_bytes == 3 * R && y.live_bytes == base.live_bytes);
  if (f) CHECK(atomic_load(&f->frees) == frees0 + 2);
  CHECK_OK(devrt_resource_release(c)); /* destroy trims */
  y = t_figures(up);
  CHECK(y.cached_bytes == 0 && y.live_bytes == base.live_bytes);

  if (kernels) {
    /* Refusal across streams before the free completes. */
    c = make_cache(up, false, 0);
    REQUIRE_OK(devrt_resource_allocate(c, KB64, a, "t", &p));
    slow_fill(rt, a, p, 1);
    CHECK_OK(devrt_resource_deallocate(c, p, KB64, a));
    REQUIRE_OK(devrt_resource_allocate(c, KB64, b, "t", &q));
    CHECK(q != p);
    CHECK_OK(devrt_stream_synchronize(rt, a));
    REQUIRE_OK(devrt_resource_allocate(c, KB64, b, "t", &r));
    CHECK(r == p);
    x = t_figures(c);
    CHECK(x.cache_hits == 1 && x.live_bytes == base.live_bytes + 2 * R && x.cached_bytes == 0);
    CHECK_OK(devrt_resource_deallocate(c, q, KB64, b));
    CHECK_OK(devrt_resource_deallocate(c, r, KB64, b));
    CHECK_OK(devrt_resource_release(c));

    /* cross_stream_wait: B gets it at once, ordered after A's slow fill. */
    c = make_cache(up, true, 0);
    REQUIRE_OK(devrt_resource_allocate(c, KB64, a, "t", &p));
    slow_fill(rt, a, p, 1);
    CHECK_OK(devrt_resource_deallocate(c, p, KB64, a));
    double w0 = now_ns();
    REQUIRE_OK(devrt_resource_allocate(c, KB64, b, "t", &q));
    CHECK(q == p);
    CHECK(now_ns() - w0 < 100e6); /* did not block the host */
    fill(rt, b, q, 2);
    memset(host_buf, 0, sizeof host_buf);
    CHECK_OK(devrt_memcpy_async(rt, host_buf, q, KB64, b));
    CHECK_OK(devrt_stream_synchronize(rt, b));
    int bad = 0;
    for (int i = 0; i < N64; i++) bad += host_buf[i] != 2;
    CHECK(bad == 0);
    x = t_figures(c);
    CHECK(x.cache_hits == 1 && x.live_bytes == base.live_bytes + R && x.cached_bytes == 0);
    CHECK_OK(devrt_resource_deallocate(c, q, KB64, b));
    CHECK_OK(devrt_resource_release(c));

    /* A fence that cannot be recorded: the other stream is refused, and the next fence covers
     * the epoch closed without one; a trim that cannot order a stream's frees keeps them cached,
     * and the next trim gives them back. */
    c = make_cache(up, false, 0);
    REQUIRE_OK(devrt_resource_allocate(c, KB64, a, "t", &p));
    CHECK_OK(devrt_resource_deallocate(c, p, KB64, a));
    rt->be->fault_arm(rt->dev, DV_FAULT_EVENT_RECORD, 1);
    REQUIRE_OK(devrt_resource_allocate(c, KB64, b, "t", &q));
    CHECK(q != p);
    CHECK_OK(devrt_stream_synchronize(rt, a));
    REQUIRE_OK(devrt_resource_allocate(c, KB64, b, "t", &r));
    CHECK(r == p);
    CHECK_OK(devrt_resource_deallocate(c, q, KB64, b));
    rt->be->fault_arm(rt->dev, DV_FAULT_EVENT_RECORD, 1);
    CHECK_STATUS(devrt_resource_trim(c, &released), DEVRT_ERR_BACKEND_ERROR);
    x = t_figures(c);
    CHECK(x.cached_bytes == R && x.live_bytes == base.live_bytes + R);
    CHECK_OK(devrt_resource_trim(c, &released));
    CHECK(released == R && t_figures(c).cached_bytes == 0);
    CHECK_OK(devrt_resource_deallocate(c, r, KB64, b));
    CHECK_OK(devrt_resource_release(c));
  }

  /* 8 threads on their own streams, random alloc/free, with a trimming thread. */
  c = make_cache(up, false, 0);
  enum { NT = 8 };
  pthread_t th[NT], tt;
  worker w[NT];
  atomic_store(&workers_left, NT);
  double t1 = now_ns();
  for (int i = 0; i < NT; i++) {
    w[i] = (worker){rt, c, 1234u + (unsigned)i * 77u, 0};
    pthread_create(&th[i], NULL, work, &w[i]);
  }
  pthread_create(&tt, NULL, trimmer, c);
  int errors = 0;
  for (int i = 0; i < NT; i++) pthread_join(th[i], NULL), errors += w[i].errors;
  pthread_join(tt, NULL);
  double t_threads = (now_ns() - t1) / 1e6;
  CHECK(errors == 0);
  x = t_figures(c);
  CHECK(x.live_bytes == base.live_bytes && x.cache_hits > 0);
  CHECK_OK(devrt_resource_trim(c, &released));
  CHECK_OK(devrt_resource_reap(c, DEVRT_REAP_WAIT, NULL));
  y = t_figures(c);
  CHECK(y.live_bytes == base.live_bytes && y.cached_bytes == 0 && y.pending_bytes == 0);
  CHECK_OK(devrt_resource_release(c));

  CHECK_OK(devrt_stream_release(rt, a));
  CHECK_OK(devrt_stream_release(rt, b));
  printf("%s upstream: hot alloc+free pair %.0f ns; threads: %.0f ms, %llu hits / %llu misses%s\n",
         what, pair_ns, t_threads, (unsigned long long)x.cache_hits,
         (unsigned long long)x.cache_misses,
         kernels ? "; cross-stream refusal and wait checked" : "");
}

/* A reader that sums the idle figures while a trim moves a block from cached to pending (pending
 * first) counts the block twice; the figures it returns still sum to the held word it read. */
static void figures_within_held(void) {
  dv_mem_account* a = dv_account_new();
  if (!a) abort();
  atomic_store(&a->held, 1000);
  dv_account_add(a, DV_CACHED, 600);
  dv_account_add(a, DV_PENDING, 600); /* the move's first half */
  devrt_resource_figures q;
  dv_account_query(a, &q);
  CHECK(q.live_bytes + q.pending_bytes + q.cached_bytes == 1000);
  CHECK(q.pending_bytes == 600 && q.cached_bytes == 400 && q.live_bytes == 0);
  dv_account_sub(a, DV_CACHED, 600); /* the second half */
  dv_account_query(a, &q);
  CHECK(q.pending_bytes == 600 && q.cached_bytes == 0 && q.live_bytes == 400);
  CHECK(dv_account_live(a) == 400);
  free(a);
}

static void nap_ms(void* user) {
  (void)user;
  t_sleep_ms(1);
}

/* Blocks that stream a frees and stream b allocates (as deferred frees on the runtime's own
 * stream and a tenant's allocations): b takes a's oldest block once its free is known complete.
 * With a stock of such blocks, the cache keeps a fence in flight on a, so the stock does not run
 * out of known-complete blocks and make b allocate anew each round (the soak's cache grew so,
 * without bound). */
static void stock_stays(devrt_resource* up) {
  devrt_runtime* rt = up->rt;
  devrt_stream a, b;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &a));
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &b));
  devrt_resource* c = make_cache(up, false, 0);
  enum { STOCK = 8, ROUNDS = 96 };
  void* p[STOCK];
  for (int i = 0; i < STOCK; i++) REQUIRE_OK(devrt_resource_allocate(c, KB64, b, "stock", &p[i]));
  for (int i = 0; i < STOCK; i++) CHECK_OK(devrt_resource_deallocate(c, p[i], KB64, a));
  CHECK_OK(devrt_stream_synchronize(rt, a));
  devrt_resource_figures x = t_figures(c);
  for (int r = 0; r < ROUNDS; r++) { /* a is busy for 1 ms at each take, idle by the next */
    void* q = NULL;
    CHECK_OK(devrt_stream_host_func(rt, a, nap_ms, NULL));
    REQUIRE_OK(devrt_resource_allocate(c, KB64, b, "stock", &q));
    CHECK_OK(devrt_resource_deallocate(c, q, KB64, a));
    CHECK_OK(devrt_stream_synchronize(rt, a));
  }
  devrt_resource_figures y = t_figures(c);
  uint64_t misses = y.cache_misses - x.cache_misses;
  CHECK(misses <= 2); /* the first take may find its fence not yet complete */
  if (misses > 2)
    fprintf(stderr, "stock_stays: %llu misses in %d rounds over a stock of %d blocks\n",
            (unsigned long long)misses, ROUNDS, STOCK);
  CHECK_OK(devrt_resource_release(c));
  CHECK_OK(devrt_stream_release(rt, a));
  CHECK_OK(devrt_stream_release(rt, b));
}

/* max_class_bytes: larger allocations pass straight through (never cached, charged as they are);
 * smaller ones are cached as before; a bound past the largest class is refused. */
static void class_bound(devrt_resource* up) {
  devrt_runtime* rt = up->rt;
  devrt_stream a;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &a));
  devrt_caching_options o = {.max_class_bytes = ((uint64_t)64 << 20) + 1};
  devrt_resource* c = NULL;
  CHECK_STATUS(devrt_caching_resource_create(up, &o, &c), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "max_class_bytes"));
  o.max_class_bytes = 1 << 20;
  REQUIRE_OK(devrt_caching_resource_create(up, &o, &c));
  devrt_budget_options bo = {.limit_bytes = 1ull << 40};
  devrt_resource* bud = NULL;
  REQUIRE_OK(devrt_budget_create(c, &bo, &bud));
  devrt_resource_figures base = t_figures(c);
  void *p = NULL, *q = NULL;
  size_t over = (1 << 20) + 1000; /* a class of 1.25 MiB, were it cached */
  REQUIRE_OK(devrt_resource_allocate(bud, 1 << 20, a, "small", &p));
  REQUIRE_OK(devrt_resource_allocate(bud, over, a, "big", &q));
  devrt_resource_figures x = t_figures(c);
  CHECK(x.live_bytes ==
        base.live_bytes + dv_round(up->account, 1 << 20) + dv_round(up->account, over));
  CHECK(dv_budget_live(bud) == dv_round(up->account, 1 << 20) + dv_round(up->account, over));
  CHECK_OK(devrt_resource_deallocate(bud, q, over, a));
  CHECK_OK(devrt_resource_deallocate(bud, p, 1 << 20, a));
  x = t_figures(c);
  CHECK(x.cached_bytes == base.cached_bytes + dv_round(up->account, 1 << 20));
  CHECK(x.live_bytes == base.live_bytes && dv_budget_live(bud) == 0);
  CHECK(x.cache_misses == base.cache_misses + 1); /* the pass-through is not a miss */
  CHECK_OK(devrt_resource_release(bud));
  CHECK_OK(devrt_resource_release(c));
  CHECK_OK(devrt_stream_release(rt, a));
}

int main(void) {
  devrt_runtime* rt = t_runtime();
  CHECK_STATUS(devrt_caching_resource_create(NULL, NULL, &(devrt_resource*){0}),
               DEVRT_ERR_INVALID_ARGUMENT);

  fake* f = NULL;
  devrt_resource* up = make_fake(rt, &f);
  devrt_resource* c = NULL;
  CHECK_STATUS(devrt_caching_resource_create(up, NULL, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  suite(rt, up, f,
        !t_is_cuda(rt)); /* fake memory is host memory: kernels on the host backend only */
  CHECK(atomic_load(&f->allocs) == atomic_load(&f->frees) && dv_account_live(&f->acct) == 0);
  CHECK_OK(devrt_caching_resource_create(up, NULL, &c)); /* opts NULL: defaults */
  CHECK_OK(devrt_resource_release(c));
  CHECK_OK(devrt_resource_release(up));

  REQUIRE_OK(devrt_async_resource_create(rt, &up));
  suite(rt, up, NULL, true);
  stock_stays(up);
  class_bound(up);
  figures_within_held();
  CHECK_OK(devrt_resource_release(up));

  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
