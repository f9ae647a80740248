/* test_launch.c: recorded launches (launch.h): RAW/WAR/WAW over 2-8 streams against slow producers
 * (and untracked, shown to fail), readers then a writer, dedup, coalescing, free under a reader,
 * refused launches leave no state, stream 0, enqueue, free while issuing, limits, backend faults.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include "launch_util.h"

enum { N = 256 }; /* few elements: the slow kernels' delay dominates */
#define D (30 * MS)

static devrt_runtime* rt;
static kernels K;
static devrt_stream S[8], dead;

static devrt_block mk(devrt_stream s, uint32_t v) {
  devrt_block b = 0;
  REQUIRE_OK(devrt_block_alloc(rt, N * 4, s, "launch", &b));
  CHECK_OK(k_fill(rt, &K, s, b, v, N, 0, true));
  return b;
}

static void sync_all(void) {
  for (int i = 0; i < 8; i++) CHECK_OK(devrt_stream_synchronize(rt, S[i]));
}

static uint64_t wrong(devrt_block b, uint32_t v) { return b_wrong(rt, S[0], b, N, v); }

static void release(devrt_block* b, int n) {
  for (int i = 0; i < n; i++) CHECK_OK(devrt_block_free(rt, b[i]));
}

static devrt_block_info info(devrt_block b) {
  devrt_block_info i;
  memset(&i, 0, sizeof i);
  CHECK_OK(devrt_block_info_get(rt, b, &i));
  return i;
}

/* RAW: stream 0 slowly fills b[0]; stream i copies b[i-1] into b[i] at once. Returns wrong words.
 */
static uint64_t raw(int ns, bool tracked, uint64_t delay) {
  devrt_block b[8];
  for (int i = 0; i < ns; i++) b[i] = mk(S[i], 0);
  sync_all();
  CHECK_OK(k_fill(rt, &K, S[0], b[0], 0xc0ffee, N, delay, tracked));
  for (int i = 1; i < ns; i++) CHECK_OK(k_copy(rt, &K, S[i], b[i], b[i - 1], N, 0, tracked));
  sync_all(); /* then check the final state: a misordered straggler has landed too */
  uint64_t bad = 0;
  for (int i = 0; i < ns; i++) bad += wrong(b[i], 0xc0ffee);
  release(b, ns);
  return bad;
}

/* WAR: streams 1.. slowly copy x (readers first), then stream 0 overwrites x at once. */
static uint64_t war(int ns, bool tracked, uint64_t delay) {
  devrt_block x = mk(S[0], 0xa), y[8];
  for (int i = 1; i < ns; i++) y[i] = mk(S[i], 0);
  sync_all();
  for (int i = 1; i < ns; i++) CHECK_OK(k_copy(rt, &K, S[i], y[i], x, N, delay, tracked));
  CHECK_OK(k_fill(rt, &K, S[0], x, 0xb, N, 0, tracked));
  sync_all(); /* then check the final state: a misordered straggler has landed too */
  uint64_t bad = wrong(x, 0xb);
  for (int i = 1; i < ns; i++) bad += wrong(y[i], 0xa);
  release(&x, 1);
  release(y + 1, ns - 1);
  return bad;
}

/* WAW: stream i writes i + 1 after a delay that shrinks with i: only ordering leaves ns. */
static uint64_t waw(int ns, bool tracked, uint64_t delay) {
  devrt_block x = mk(S[0], 0);
  sync_all();
  for (int i = 0; i < ns; i++)
    CHECK_OK(k_fill(rt, &K, S[i], x, (uint32_t)i + 1, N, delay * (uint64_t)(ns - i) / (uint64_t)ns,
                    tracked));
  sync_all(); /* then check the final state: a misordered straggler has landed too */
  uint64_t bad = wrong(x, (uint32_t)ns);
  release(&x, 1);
  return bad;
}

static void hazards(void) {
  static const int counts[] = {2, 4, 8};
  for (int c = 0; c < 3; c++) {
    int ns = counts[c];
    uint64_t r = raw(ns, true, D), wa = war(ns, true, D), ww = waw(ns, true, 2 * D);
    printf("%d streams: wrong words after RAW %llu, WAR %llu, WAW %llu\n", ns,
           (unsigned long long)r, (unsigned long long)wa, (unsigned long long)ww);
    CHECK(r == 0 && wa == 0 && ww == 0);
  }
  /* The negative control: untracked, the same programs must go wrong at least once. */
  uint64_t (*const prog[])(int, bool, uint64_t) = {raw, war, waw};
  const char* names[] = {"RAW", "WAR", "WAW"};
  for (int p = 0; p < 3; p++) {
    int corrupted = 0, tries = 0;
    while (tries < 4 && !corrupted) corrupted += prog[p](2, false, 50 * MS) > 0, tries++;
    printf("untracked %s: corrupted %d of %d tries\n", names[p], corrupted, tries);
    CHECK(corrupted >= 1);
  }
}

/* A slow reader then a fast one (already done), then a writer: it must wait for both. */
static void two_readers(void) {
  devrt_block x = mk(S[0], 1), y1 = mk(S[1], 0), y2 = mk(S[2], 0);
  sync_all();
  CHECK_OK(k_copy(rt, &K, S[1], y1, x, N, 60 * MS, true));
  CHECK_OK(k_copy(rt, &K, S[2], y2, x, N, 0, true));
  CHECK_OK(devrt_stream_synchronize(rt, S[2])); /* the newest reader is done, the first is not */
  CHECK(info(x).readers >= 1);
  CHECK_OK(k_fill(rt, &K, S[3], x, 2, N, 0, true));
  CHECK(info(x).readers == 0);
  CHECK(wrong(y1, 1) == 0 && wrong(y2, 1) == 0 && wrong(x, 2) == 0);
  devrt_block all[] = {x, y1, y2};
  release(all, 3);
}

/* One block listed as READ and WRITE is one read-write use: one wait, one event, no reader left
 * behind, and later readers wait for it. Two blocks last written on one stream need one wait. */
static void dedup_and_coalesce(void) {
  devrt_block x = mk(S[0], 1), z = mk(S[2], 0), w = mk(S[3], 0);
  sync_all();
  CHECK_OK(k_fill(rt, &K, S[0], x, 2, N, D, true)); /* the last writer: S0, still running */
  void* p = bptr(rt, x);
  uint32_t v = 3;
  uint64_t n = N, delay = D;
  void* args[] = {&p, &v, &n, &delay};
  devrt_block_use rw[] = {{x, DEVRT_ACCESS_READ}, {x, DEVRT_ACCESS_WRITE}, {x, DEVRT_ACCESS_READ}};
  devrt_block_stats st0 = bstats(rt);
  CHECK_OK(k_run(rt, S[1], K.slow_fill, N, args, rw, 3));
  devrt_block_stats st1 = bstats(rt);
  CHECK(st1.waits_inserted - st0.waits_inserted == 1);
  CHECK(st1.events_recorded - st0.events_recorded == 1 && st1.launches - st0.launches == 1);
  devrt_block_info ix = info(x);
  CHECK(ix.readers == 0 && !ix.writer_complete);
  CHECK_OK(k_copy(rt, &K, S[2], z, x, N, 0, true)); /* must wait for S1's write, not just S0's */
  CHECK(wrong(z, 3) == 0 && wrong(x, 3) == 0);

  /* Coalescing: x and w both last written on S4 (still running): a launch reading x and
   * writing w on S5 inserts one wait. */
  CHECK_OK(k_fill(rt, &K, S[4], x, 4, N, D, true));
  CHECK_OK(k_fill(rt, &K, S[4], w, 5, N, D, true));
  st0 = bstats(rt);
  CHECK_OK(k_copy(rt, &K, S[5], w, x, N, 0, true));
  st1 = bstats(rt);
  CHECK(st1.waits_inserted - st0.waits_inserted == 1);
  CHECK(st1.waits_coalesced - st0.waits_coalesced >= 1);
  sync_all(); /* had the copy waited only for x's writer, w's slower writer lands after it */
  CHECK(wrong(w, 4) == 0);
  devrt_block all[] = {x, z, w};
  release(all, 3);

  /* A long list naming each block twice, to read and later to write: every block is written
   * once by the launch (read-write), none is left with a reader. */
  enum { M = 40 };
  devrt_block many[M];
  devrt_block_use twice[2 * M];
  for (int i = 0; i < M; i++) {
    many[i] = mk(S[6], 1);
    twice[i] = (devrt_block_use){many[i], DEVRT_ACCESS_READ};
    twice[2 * M - 1 - i] = (devrt_block_use){many[i], DEVRT_ACCESS_WRITE};
  }
  p = bptr(rt, many[0]), v = 6, n = N;
  st0 = bstats(rt);
  CHECK_OK(
      k_run(rt, S[7], K.slow_fill, N, args, twice, 2 * M)); /* slow: the copy below must wait */
  st1 = bstats(rt);
  CHECK(st1.launches - st0.launches == 1 &&
        st1.waits_inserted - st0.waits_inserted <= 1); /* the fills: all on S6 */
  for (int i = 0; i < M; i++) CHECK(info(many[i]).readers == 0);
  CHECK_OK(k_copy(rt, &K, S[6], many[1], many[0], N, 0, true)); /* waits for S7's write */
  CHECK(wrong(many[1], 6) == 0);
  release(many, M);
}

/* Free while a slow kernel still reads the block, reallocate and overwrite at once: the reader's
 * copy is intact and the old handle is refused. Without the caching layer the host backend's
 * free is a real free(), so a free that did not wait would hand the address out again. */
static void free_under_reader(devrt_runtime* r, const kernels* k, const char* what) {
  devrt_stream a = s_get(r), b = s_get(r), c = s_get(r);
  int reused = 0;
  for (int t = 0; t < 3; t++) {
    devrt_block x = 0, y = 0, x2 = 0;
    REQUIRE_OK(devrt_block_alloc(r, N * 4, a, "freed", &x));
    REQUIRE_OK(devrt_block_alloc(r, N * 4, b, "copy", &y));
    CHECK_OK(k_fill(r, k, a, x, 0x11, N, 0, true));
    void* old = bptr(r, x);
    CHECK_OK(k_copy(r, k, b, y, x, N, 50 * MS, true));
    CHECK_OK(devrt_block_free(r, x));
    CHECK_OK(devrt_reap_pending(r, 0, NULL));
    t_sleep_ms(5); /* a free that did not wait for the reader has run by now */
    REQUIRE_OK(devrt_block_alloc(r, N * 4, c, "realloc", &x2));
    reused += bptr(r, x2) == old;
    CHECK_OK(k_fill(r, k, c, x2, 0x22, N, 0, true));
    CHECK_OK(devrt_stream_synchronize(r, c));
    void* p = bptr(r, x2);
    uint32_t v = 0x33;
    uint64_t n = N;
    void* args[] = {&p, &v, &n};
    devrt_block_use u[] = {{x, DEVRT_ACCESS_WRITE}};
    CHECK_STATUS(k_run(r, c, k->fill, N, args, u, 1), DEVRT_ERR_STALE_BLOCK);
    CHECK_STATUS(devrt_block_ptr(r, x, &p), DEVRT_ERR_STALE_BLOCK);
    CHECK(b_wrong(r, a, y, N, 0x11) == 0 && b_wrong(r, a, x2, N, 0x22) == 0);
    CHECK_OK(devrt_block_free(r, y));
    CHECK_OK(devrt_block_free(r, x2));
  }
  printf("free under a slow reader (%s): the new block had the old address %d of 3 times\n", what,
         reused);
  CHECK_OK(devrt_stream_release(r, a));
  CHECK_OK(devrt_stream_release(r, b));
  CHECK_OK(devrt_stream_release(r, c));
}

static void free_under_reader_uncached(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.cache = false;
  devrt_runtime* r = t_runtime_cfg(&cfg);
  kernels k;
  k_load(r, &k);
  free_under_reader(r, &k, "no caching layer");
  CHECK_OK(devrt_module_unload(r, k.mod));
  CHECK_OK(devrt_runtime_destroy(r));
}

static bool same_info(devrt_block_info a, devrt_block_info b) {
  return a.ptr == b.ptr && a.size == b.size && a.tag == b.tag && a.stream == b.stream &&
         a.generation == b.generation && a.readers == b.readers &&
         a.writer_complete == b.writer_complete;
}

static unsigned streams_in_use(void) {
  devrt_runtime_info ri;
  CHECK_OK(devrt_runtime_info_get(rt, &ri));
  return ri.streams_in_use;
}

/* A refused launch changes nothing but refused_launches (+1): no wait, event, use or stream. */
static void refused(void) {
  devrt_block b[4], e = mk(S[5], 0), stale = mk(S[0], 0);
  for (int i = 0; i < 4; i++) b[i] = mk(S[i], (uint32_t)i);
  sync_all();
  CHECK_OK(devrt_block_free(rt, stale));
  CHECK_OK(k_fill(rt, &K, S[0], b[0], 9, N, 100 * MS, true)); /* b0: a running writer */
  CHECK_OK(k_copy(rt, &K, S[1], e, b[1], N, 100 * MS, true)); /* b1: a running reader */
  devrt_block_info before[4];
  for (int i = 0; i < 4; i++) before[i] = info(b[i]);
  devrt_block_stats st0 = bstats(rt);
  unsigned in_use = streams_in_use();
  void* p = bptr(rt, b[3]);
  uint32_t v = 7;
  uint64_t n = N;
  void* args[] = {&p, &v, &n};
  devrt_block_use mid[] = {{b[0], DEVRT_ACCESS_WRITE},
                           {b[1], DEVRT_ACCESS_READ},
                           {stale, DEVRT_ACCESS_READ},
                           {b[2], DEVRT_ACCESS_READ},
                           {b[3], DEVRT_ACCESS_WRITE}};
  devrt_block_use nul[] = {
      {b[0], DEVRT_ACCESS_READ}, {b[1], DEVRT_ACCESS_WRITE}, {DEVRT_BLOCK_NONE, DEVRT_ACCESS_READ}};
  devrt_block_use badacc[] = {{b[0], DEVRT_ACCESS_READ}, {b[3], (devrt_access)0}};
  devrt_launch_desc d = {.stream = S[2],
                         .kernel = K.fill,
                         .grid = {1},
                         .block = {256},
                         .args = args,
                         .uses = mid,
                         .nuses = 5};
  uint64_t refusals = 0;

  CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_STALE_BLOCK);
  CHECK(strstr(devrt_last_error(), "devrt_launch") != NULL);
  devrt_block_stats st1 = bstats(rt);
  CHECK(st1.refused_launches - st0.refused_launches == 1);
  d.stream = dead;
  d.uses = mid + 3, d.nuses = 2;
  CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_INVALID_ARGUMENT); /* a released stream */
  st1 = bstats(rt);
  CHECK(st1.refused_launches - st0.refused_launches == 2);
  d.stream = 0; /* pool acquire: a refusal must give the stream back */
  d.uses = mid, d.nuses = 5;
  CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_STALE_BLOCK);
  d.stream = S[2];
  d.uses = nul, d.nuses = 3;
  CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_INVALID_ARGUMENT); /* block 0 */
  d.uses = badacc, d.nuses = 2;
  CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_INVALID_ARGUMENT);
  d.uses = NULL, d.nuses = 1;
  CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_INVALID_ARGUMENT);
  static devrt_block_use many[DEVRT_LAUNCH_MAX_USES + 1];
  for (unsigned i = 0; i <= DEVRT_LAUNCH_MAX_USES; i++) many[i] = mid[3];
  d.uses = many, d.nuses = DEVRT_LAUNCH_MAX_USES + 1;
  CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_INVALID_ARGUMENT);
  d.uses = mid + 3, d.nuses = 2;
  d.kernel = NULL;
  CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_INVALID_ARGUMENT); /* neither kernel nor enqueue */
  d.kernel = K.fill;
  d.grid[0] = 0;
  CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_INVALID_ARGUMENT);
  /* shapes CUDA refuses are refused on every backend, before anything is enqueued */
  const unsigned bad[][6] = {{1, 65536, 1, 256, 1, 1},    {16, 1u << 20, 1u << 20, 256, 1, 1},
                             {1u << 31, 1, 1, 256, 1, 1}, {1, 1, 1, 2048, 1, 1},
                             {1, 1, 1, 32, 64, 1},        {1, 1, 1, 1, 1, 65},
                             {1, 1, 1, 0, 1, 1}};
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    memcpy(d.grid, bad[i], sizeof d.grid), memcpy(d.block, bad[i] + 3, sizeof d.block);
    CHECK_STATUS(devrt_launch(rt, &d), DEVRT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(devrt_last_error(), "outside CUDA's limits") != NULL);
  }
  memset(d.grid, 0, sizeof d.grid), memset(d.block, 0, sizeof d.block);
  d.block[0] = 256;
  refusals = bstats(rt).refused_launches - st0.refused_launches;
  st1 = bstats(rt);
  CHECK(st1.waits_inserted == st0.waits_inserted && st1.events_recorded == st0.events_recorded &&
        st1.launches == st0.launches && st1.blocks_live == st0.blocks_live);
  CHECK(refusals == 16);
  CHECK(streams_in_use() == in_use);
  for (int i = 0; i < 4; i++) CHECK(same_info(info(b[i]), before[i]));
  CHECK(before[0].readers == 0 && !before[0].writer_complete && before[1].readers == 1);

  /* The same launch without the stale block goes through, ordered after b0's writer and b1's
   * reader. */
  d.grid[0] = 1;
  devrt_block_use ok[] = {mid[0], mid[1], mid[3], mid[4]};
  d.uses = ok, d.nuses = 4;
  CHECK_OK(devrt_launch(rt, &d));
  CHECK(bstats(rt).launches - st1.launches == 1);
  CHECK(wrong(b[3], 7) == 0 && wrong(e, 1) == 0 && wrong(b[0], 9) == 0);
  release(b, 4);
  release(&e, 1);
}

/* desc.stream 0: a pool stream is acquired for the launch, given back, and its work is recorded. */
static void pool_stream(void) {
  devrt_block x = mk(S[0], 0), y = mk(S[1], 0);
  sync_all();
  unsigned in_use = streams_in_use();
  devrt_block_stats st0 = bstats(rt);
  CHECK_OK(k_fill(rt, &K, 0, x, 0x77, N, D, true));
  CHECK(streams_in_use() == in_use);
  CHECK_OK(k_copy(rt, &K, S[1], y, x, N, 0, true)); /* must wait for the pool stream's write */
  CHECK(bstats(rt).launches - st0.launches == 2);
  CHECK(wrong(y, 0x77) == 0 && wrong(x, 0x77) == 0);
  CHECK_OK(k_copy(rt, &K, 0, x, y, N, 0, true));
  CHECK(wrong(x, 0x77) == 0);
  devrt_block all[] = {x, y};
  release(all, 2);
}

typedef struct foreign {
  void *dst, *native;
  const void* src;
  int byte, calls;
  size_t size;
  devrt_stream seen;
  devrt_status ret;
} foreign;

/* Foreign stream-ordered work: a memset or a memcpy on the stream the launch hands over. */
static devrt_status do_foreign(void* user, devrt_stream s, void* native) {
  foreign* f = user;
  f->calls++, f->seen = s, f->native = native;
  if (f->ret != DEVRT_OK) return f->ret;
  return f->src ? devrt_memcpy_async(rt, f->dst, f->src, f->size, s)
                : devrt_memset_async(rt, f->dst, f->byte, f->size, s);
}

static devrt_status run_foreign(devrt_stream s, foreign* f, const devrt_block_use* uses,
                                unsigned nuses) {
  devrt_launch_desc d = {
      .stream = s, .enqueue = do_foreign, .user = f, .uses = uses, .nuses = nuses};
  return devrt_launch(rt, &d);
}

static void enqueue(void) {
  devrt_block x = mk(S[0], 0), y = mk(S[1], 0);
  sync_all();
  void* native = NULL;
  CHECK_OK(devrt_stream_native(rt, S[1], &native));
  /* WAW: a memset after a slow fill on another stream. */
  CHECK_OK(k_fill(rt, &K, S[0], x, 0x01010101u, N, D, true));
  foreign f = {.dst = bptr(rt, x), .byte = 2, .size = N * 4};
  devrt_block_use wx[] = {{x, DEVRT_ACCESS_WRITE}};
  CHECK_OK(run_foreign(S[1], &f, wx, 1));
  CHECK(f.calls == 1 && f.seen == S[1] && f.native == native);
  CHECK(wrong(x, 0x02020202u) == 0);
  /* RAW: a memcpy out of a block a slow kernel writes. */
  CHECK_OK(k_fill(rt, &K, S[0], x, 0x03030303u, N, D, true));
  foreign g = {.dst = bptr(rt, y), .src = bptr(rt, x), .size = N * 4};
  devrt_block_use rxwy[] = {{x, DEVRT_ACCESS_READ}, {y, DEVRT_ACCESS_WRITE}};
  CHECK_OK(run_foreign(S[1], &g, rxwy, 2));
  CHECK(wrong(y, 0x03030303u) == 0);
  /* WAR: a memset of a block a slow kernel still reads (foreign work on a pool stream). */
  CHECK_OK(k_copy(rt, &K, S[0], y, x, N, D, true));
  foreign h = {.dst = bptr(rt, x), .byte = 4, .size = N * 4};
  CHECK_OK(run_foreign(0, &h, wx, 1));
  CHECK(h.calls == 1 && h.seen != 0);
  CHECK(wrong(y, 0x03030303u) == 0 && wrong(x, 0x04040404u) == 0);
  /* Its failure is the launch's; kernel and enqueue together are refused. */
  foreign bad = {.ret = DEVRT_ERR_BACKEND_ERROR};
  CHECK(run_foreign(S[1], &bad, wx, 1) == DEVRT_ERR_BACKEND_ERROR && bad.calls == 1);
  devrt_launch_desc both = {.stream = S[1],
                            .kernel = K.fill,
                            .enqueue = do_foreign,
                            .user = &f,
                            .grid = {1},
                            .block = {1},
                            .uses = wx,
                            .nuses = 1};
  CHECK_STATUS(devrt_launch(rt, &both), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(wrong(x, 0x04040404u) == 0);
  devrt_block all[] = {x, y};
  release(all, 2);
}

/* devrt_block_free while a launch is issuing against the block (inside its enqueue callback): from
 * another thread it waits until the launch has recorded its use, then frees the block after it;
 * from inside the callback itself it is refused (waiting there would wait for its own launch). */
typedef struct pinned {
  devrt_block x;
  pthread_t t;
  devrt_status from_other, from_callback;
  _Atomic int returned; /* the callback is about to return */
  int calls, returned_first;
} pinned;

static void* free_from_other(void* arg) {
  pinned* p = arg;
  p->from_other = devrt_block_free(rt, p->x);
  p->returned_first = atomic_load(&p->returned);
  return NULL;
}

static devrt_status free_while_enqueued(void* user, devrt_stream s, void* native) {
  (void)s, (void)native;
  pinned* p = user;
  p->calls++;
  p->from_callback = devrt_block_free(rt, p->x);
  if (pthread_create(&p->t, NULL, free_from_other, p)) return DEVRT_ERR_BACKEND_ERROR;
  usleep(20000); /* the other thread's free starts while the block is pinned */
  atomic_store(&p->returned, 1);
  return DEVRT_OK;
}

static void free_while_issuing(void) {
  devrt_block x = mk(S[0], 5);
  pinned p = {.x = x, .from_other = DEVRT_ERR_BACKEND_ERROR};
  devrt_block_use u[] = {{x, DEVRT_ACCESS_READ}};
  devrt_launch_desc d = {
      .stream = S[1], .enqueue = free_while_enqueued, .user = &p, .uses = u, .nuses = 1};
  uint64_t live = bstats(rt).blocks_live;
  CHECK_OK(devrt_launch(rt, &d));
  pthread_join(p.t, NULL);
  CHECK(p.calls == 1 && p.from_callback == DEVRT_ERR_INVALID_STATE);
  CHECK(p.from_other == DEVRT_OK && p.returned_first); /* waited for the launch, then freed */
  CHECK(bstats(rt).blocks_live == live - 1);
  CHECK_STATUS(devrt_block_free(rt, x), DEVRT_ERR_STALE_BLOCK);
}

/* DEVRT_LAUNCH_MAX_USES distinct blocks in one launch. */
static void max_uses(void) {
  static devrt_block b[DEVRT_LAUNCH_MAX_USES];
  static devrt_block_use u[DEVRT_LAUNCH_MAX_USES];
  const unsigned m = DEVRT_LAUNCH_MAX_USES;
  for (unsigned i = 0; i < m; i++) {
    b[i] = mk(S[i % 8], i);
    u[i] = (devrt_block_use){b[i], i == m - 1 ? DEVRT_ACCESS_WRITE : DEVRT_ACCESS_READ};
  }
  void* p = bptr(rt, b[m - 1]);
  uint32_t v = 0x99;
  uint64_t n = N;
  void* args[] = {&p, &v, &n};
  CHECK_OK(k_run(rt, S[0], K.fill, N, args, u, m));
  CHECK(info(b[0]).readers == 1 && info(b[m - 2]).readers == 1 && info(b[m - 1]).readers == 0);
  CHECK(wrong(b[m - 1], 0x99) == 0 && wrong(b[m - 2], m - 2) == 0);
  release(b, (int)m);
}

/* More streams than the launch's on-stack wait buffer (64): a writer after 71 slow readers. */
static void many_streams(void) {
  enum { M = 72 };
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.stream_pool_size = M;
  devrt_runtime* r = t_runtime_cfg(&cfg);
  kernels k;
  k_load(r, &k);
  devrt_stream s[M];
  devrt_block x = 0, y[M];
  for (int i = 0; i < M; i++) s[i] = s_get(r);
  REQUIRE_OK(devrt_block_alloc(r, N * 4, s[0], "many", &x));
  CHECK_OK(k_fill(r, &k, s[0], x, 1, N, 0, true));
  for (int i = 1; i < M; i++) {
    REQUIRE_OK(devrt_block_alloc(r, N * 4, s[i], "many", &y[i]));
    CHECK_OK(k_copy(r, &k, s[i], y[i], x, N, 200 * MS, true));
  }
  devrt_block_info ix;
  CHECK_OK(devrt_block_info_get(r, x, &ix));
  CHECK(ix.readers == M - 1);
  devrt_block_stats st0, st1;
  CHECK_OK(devrt_block_stats_get(r, &st0));
  CHECK_OK(k_fill(r, &k, s[0], x, 2, N, 0, true));
  CHECK_OK(devrt_block_stats_get(r, &st1));
  /* One wait per reader stream (none coalesced: they are all different), unless seen complete. */
  CHECK(st1.waits_inserted - st0.waits_inserted >= 1);
  CHECK(st1.waits_inserted - st0.waits_inserted + st1.waits_skipped_complete -
            st0.waits_skipped_complete ==
        M - 1);
  uint64_t bad = b_wrong(r, s[0], x, N, 2);
  for (int i = 1; i < M; i++) bad += b_wrong(r, s[0], y[i], N, 1);
  CHECK(bad == 0);
  CHECK_OK(devrt_block_free(r, x));
  for (int i = 1; i < M; i++) CHECK_OK(devrt_block_free(r, y[i]));
  for (int i = 0; i < M; i++) CHECK_OK(devrt_stream_release(r, s[i]));
  CHECK_OK(devrt_module_unload(r, k.mod));
  CHECK_OK(devrt_runtime_destroy(r));
}

/* A failed record: a launch marks its point lazily, and the record happens when another stream
 * needs that point; if it fails, the launch that needed it is refused before anything is enqueued
 * and the block's record stays as it was. On host also a failed backend launch (args NULL). */
static void backend_failures(void) {
  devrt_block x = mk(S[0], 0);
  sync_all();
  devrt_block_stats st0, st1;
  CHECK_OK(devrt_block_stats_get(rt, &st0));
  CHECK_OK(k_fill(rt, &K, S[1], x, 0x5e, N, D, true));
  CHECK_OK(devrt_block_stats_get(rt, &st1));
  CHECK(st1.events_recorded == st0.events_recorded && st1.launches - st0.launches == 1);
  devrt_block_info before = info(x);
  rt->be->fault_arm(rt->dev, DV_FAULT_EVENT_RECORD, 1);
  CHECK_STATUS(k_fill(rt, &K, S[0], x, 0x6f, N, 0, true), DEVRT_ERR_BACKEND_ERROR);
  rt->be->fault_arm(rt->dev, DV_FAULT_EVENT_RECORD, 0);
  CHECK(same_info(info(x), before));
  CHECK(wrong(x, 0x5e) == 0); /* read on S0: waits for S1's slow fill, now that its point records */
  if (!t_is_cuda(rt)) {       /* cuda would launch with garbage parameters */
    devrt_block_use u[] = {{x, DEVRT_ACCESS_WRITE}};
    devrt_launch_desc d = {
        .stream = S[1], .kernel = K.fill, .grid = {1}, .block = {1}, .uses = u, .nuses = 1};
    before = info(x);
    CHECK(devrt_launch(rt, &d) != DEVRT_OK);
    CHECK(same_info(info(x), before));
  }
  release(&x, 1);
}

/* A user's image: PTX written here, loaded with devrt_module_load, launched like devrt's own
 * kernels (cuda); the host backend loads no CUDA images and says so. */
static const char user_ptx[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry user_set(.param .u64 p, .param .u32 v) {\n"
    "  .reg .b64 %rd<3>;\n  .reg .b32 %r<2>;\n"
    "  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r1, [v];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n  st.global.u32 [%rd2], %r1;\n  ret;\n}\n";

static void user_image(void) {
  devrt_module* m = NULL;
  devrt_status st = devrt_module_load(rt, user_ptx, &m);
  if (!t_is_cuda(rt)) {
    CHECK_STATUS(st, DEVRT_ERR_UNSUPPORTED);
    return;
  }
  CHECK_OK(st);
  devrt_kernel* kern = NULL;
  if (st != DEVRT_OK || devrt_kernel_get(m, "user_set", &kern) != DEVRT_OK) return;
  CHECK_STATUS(devrt_kernel_get(m, "no_such_kernel", &(devrt_kernel*){NULL}),
               DEVRT_ERR_INVALID_ARGUMENT);
  devrt_block b = 0;
  REQUIRE_OK(devrt_block_alloc(rt, 4, S[0], "user", &b));
  void* p = bptr(rt, b);
  uint32_t v = 0x5eedu;
  void* args[] = {&p, &v};
  devrt_block_use u = {b, DEVRT_ACCESS_WRITE};
  devrt_launch_desc d = {.stream = S[0],
                         .kernel = kern,
                         .grid = {1},
                         .block = {1},
                         .args = args,
                         .uses = &u,
                         .nuses = 1};
  CHECK_OK(devrt_launch(rt, &d));
  CHECK(b_word(rt, S[1], b) == 0x5eedu); /* read on another stream: ordered by the tracked write */
  CHECK_OK(devrt_block_free(rt, b));
  CHECK_OK(devrt_module_unload(rt, m));
}

int main(void) {
  rt = t_runtime();
  k_load(rt, &K);
  for (int i = 0; i < 8; i++) S[i] = s_get(rt);
  dead = s_get(rt);
  REQUIRE_OK(devrt_stream_release(rt, dead));

  hazards();
  two_readers();
  dedup_and_coalesce();
  free_under_reader(rt, &K, "default stack");
  free_under_reader_uncached();
  refused();
  pool_stream();
  enqueue();
  free_while_issuing();
  backend_failures();
  max_uses();
  many_streams();
  user_image();

  devrt_block_stats st = bstats(rt);
  CHECK(st.blocks_live == 0);
  printf(
      "stats: %llu launches (%llu refused), %llu waits inserted, %llu skipped same stream, %llu "
      "skipped "
      "complete, %llu coalesced, %llu events recorded, %llu deferred frees\n",
      (unsigned long long)st.launches, (unsigned long long)st.refused_launches,
      (unsigned long long)st.waits_inserted, (unsigned long long)st.waits_skipped_same_stream,
      (unsigned long long)st.waits_skipped_complete, (unsigned long long)st.waits_coalesced,
      (unsigned long long)st.events_recorded, (unsigned long long)st.deferred_frees);
  CHECK_OK(devrt_module_unload(rt, K.mod));
  for (int i = 0; i < 8; i++) CHECK_OK(devrt_stream_release(rt, S[i]));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
