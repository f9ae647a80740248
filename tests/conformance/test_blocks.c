/* test_blocks.c: tracked blocks (block.h): alloc/ptr/info/free, bad and foreign handles, a freed
 * handle refused everywhere after its slot and address are reused, first use on another stream,
 * stats, manual prepare/finish, a block outliving its stream's lease, reaping, injected faults. */
#include <pthread.h>
#include <sched.h>
#include "launch_util.h"

/* Refused with one of two statuses, the message naming the call. */
#define REFUSED2(expr, call, want1, want2)                                                   \
  do {                                                                                       \
    t_checks++;                                                                              \
    devrt_status r_ = (expr);                                                                \
    if ((r_ != (want1) && r_ != (want2)) || !strstr(devrt_last_error(), call)) {             \
      fprintf(stderr, "%s:%d: %s -> %s (%s), want %s or %s naming %s\n", __FILE__, __LINE__, \
              #expr, devrt_status_name(r_), devrt_last_error(), devrt_status_name(want1),    \
              devrt_status_name(want2), call);                                               \
      t_failures++;                                                                          \
    }                                                                                        \
  } while (0)
#define BAD(expr, call) REFUSED2(expr, call, DEVRT_ERR_INVALID_ARGUMENT, DEVRT_ERR_INVALID_ARGUMENT)
#define BAD_BLOCK(expr, call) \
  REFUSED2(expr, call, DEVRT_ERR_INVALID_ARGUMENT, DEVRT_ERR_STALE_BLOCK)
#define STALE(expr, call) REFUSED2(expr, call, DEVRT_ERR_STALE_BLOCK, DEVRT_ERR_STALE_BLOCK)

static devrt_block_info info(devrt_runtime* rt, devrt_block b) {
  devrt_block_info i;
  memset(&i, 0, sizeof i);
  CHECK_OK(devrt_block_info_get(rt, b, &i));
  return i;
}

static bool same_info(devrt_block_info a, devrt_block_info b) {
  return a.ptr == b.ptr && a.size == b.size && a.tag == b.tag && a.stream == b.stream &&
         a.generation == b.generation && a.readers == b.readers &&
         a.writer_complete == b.writer_complete;
}

/* A one-element fill at `at` declaring `uses` (the refused-launch probes). */
static devrt_status probe_launch(devrt_runtime* rt, const kernels* k, devrt_stream s, void* at,
                                 const devrt_block_use* uses, unsigned nuses) {
  uint32_t v = 1;
  uint64_t n = 1;
  void* args[] = {&at, &v, &n};
  return k_run(rt, s, k->fill, n, args, uses, nuses);
}

static void basics(devrt_runtime* rt, const kernels* k, devrt_stream a, devrt_stream b) {
  devrt_block_stats st0 = bstats(rt);
  devrt_block x = 0, y = 0;
  static const char tag[] = "basics";
  REQUIRE_OK(devrt_block_alloc(rt, 4096, a, tag, &x));
  REQUIRE_OK(devrt_block_alloc(rt, 1, a, NULL, &y));
  CHECK(x != DEVRT_BLOCK_NONE && y != DEVRT_BLOCK_NONE && x != y);
  void* p = NULL;
  CHECK_OK(devrt_block_ptr(rt, x, &p));
  CHECK(p != NULL && ((uintptr_t)p & 255) == 0 && bptr(rt, y) != NULL && bptr(rt, y) != p);
  devrt_block_info ix = info(rt, x), iy = info(rt, y);
  CHECK(ix.ptr == p && ix.size == 4096 && ix.tag == tag && ix.stream == a && ix.readers == 0);
  CHECK(iy.size == 1 && iy.stream == a);
  CHECK(ix.generation != 0 && iy.generation > ix.generation); /* process-wide monotonic */
  devrt_block_stats st1 = bstats(rt);
  CHECK(st1.blocks_allocated - st0.blocks_allocated == 2 && st1.blocks_live - st0.blocks_live == 2);

  /* Written on a, read back on b (a cross-stream read through prepare/finish). */
  CHECK_OK(k_fill(rt, k, a, x, 0xfeedu, 1024, 0, true));
  CHECK(b_wrong(rt, b, x, 1024, 0xfeedu) == 0);
  CHECK(info(rt, x).readers == 1);

  CHECK_OK(devrt_block_free(rt, x));
  CHECK_OK(devrt_block_free(rt, y));
  devrt_block_stats st2 = bstats(rt);
  CHECK(st2.blocks_live == st0.blocks_live && st2.blocks_allocated == st1.blocks_allocated);
  STALE(devrt_block_ptr(rt, x, &p), "devrt_block_ptr");
  STALE(devrt_block_free(rt, y), "devrt_block_free");
}

static void bad_input(devrt_runtime* rt, const kernels* k, devrt_stream s, devrt_stream dead) {
  devrt_block x = 0, out = 0;
  REQUIRE_OK(devrt_block_alloc(rt, 256, s, "bad", &x));
  CHECK_OK(k_fill(rt, k, s, x, 3, 64, 0, true));
  CHECK_OK(devrt_stream_synchronize(rt, s));
  devrt_block_info before = info(rt, x);
  devrt_block_stats st0 = bstats(rt);
  void* p = NULL;
  devrt_block_info i;
  devrt_block_stats st;
  const devrt_block forged[] = {x ^ (1ull << 63), x + 1, ~x, 0x00ff00ff00ff00ffull};
  devrt_block_use none = {DEVRT_BLOCK_NONE, DEVRT_ACCESS_READ};

  BAD(devrt_block_alloc(NULL, 64, s, "bad", &out), "devrt_block_alloc");
  BAD(devrt_block_alloc(rt, 64, s, "bad", NULL), "devrt_block_alloc");
  BAD(devrt_block_alloc(rt, 0, s, "bad", &out), "devrt_block_alloc");
  BAD(devrt_block_alloc(rt, 64, DEVRT_STREAM_NONE, "bad", &out), "devrt_block_alloc");
  BAD(devrt_block_alloc(rt, 64, dead, "bad", &out), "devrt_block_alloc");
  BAD(devrt_block_alloc(rt, 64, s ^ 0x5555, "bad", &out), "devrt_block_alloc");
  CHECK(out == 0);
  BAD(devrt_block_ptr(NULL, x, &p), "devrt_block_ptr");
  BAD(devrt_block_ptr(rt, x, NULL), "devrt_block_ptr");
  BAD(devrt_block_info_get(NULL, x, &i), "devrt_block_info_get");
  BAD(devrt_block_info_get(rt, x, NULL), "devrt_block_info_get");
  BAD(devrt_prepare_block_use(NULL, x, s, DEVRT_ACCESS_READ), "devrt_prepare_block_use");
  BAD(devrt_prepare_block_use(rt, x, dead, DEVRT_ACCESS_READ), "devrt_prepare_block_use");
  BAD(devrt_prepare_block_use(rt, x, DEVRT_STREAM_NONE, DEVRT_ACCESS_WRITE),
      "devrt_prepare_block_use");
  BAD(devrt_prepare_block_use(rt, x, s, (devrt_access)0), "devrt_prepare_block_use");
  BAD(devrt_prepare_block_use(rt, x, s, (devrt_access)4), "devrt_prepare_block_use");
  BAD(devrt_finish_block_use(NULL, x, s, DEVRT_ACCESS_READ), "devrt_finish_block_use");
  BAD(devrt_finish_block_use(rt, x, dead, DEVRT_ACCESS_READ), "devrt_finish_block_use");
  BAD(devrt_finish_block_use(rt, x, s, (devrt_access)0), "devrt_finish_block_use");
  BAD(devrt_finish_block_use(rt, x, s, (devrt_access)7), "devrt_finish_block_use");
  BAD(devrt_block_free(NULL, x), "devrt_block_free");
  BAD(devrt_block_stats_get(NULL, &st), "devrt_block_stats_get");
  BAD(devrt_block_stats_get(rt, NULL), "devrt_block_stats_get");
  BAD(devrt_launch(NULL, &(devrt_launch_desc){.stream = s, .kernel = k->fill}), "devrt_launch");
  BAD(devrt_launch(rt, NULL), "devrt_launch");
  BAD(devrt_block_ptr(rt, DEVRT_BLOCK_NONE, &p), "devrt_block_ptr");
  BAD(devrt_block_info_get(rt, DEVRT_BLOCK_NONE, &i), "devrt_block_info_get");
  BAD(devrt_prepare_block_use(rt, DEVRT_BLOCK_NONE, s, DEVRT_ACCESS_READ),
      "devrt_prepare_block_use");
  BAD(devrt_finish_block_use(rt, DEVRT_BLOCK_NONE, s, DEVRT_ACCESS_READ), "devrt_finish_block_use");
  BAD(devrt_block_free(rt, DEVRT_BLOCK_NONE), "devrt_block_free");
  BAD(probe_launch(rt, k, s, before.ptr, &none, 1), "devrt_launch");
  for (unsigned f = 0; f < sizeof forged / sizeof forged[0]; f++) {
    devrt_block bb = forged[f];
    devrt_block_use u = {bb, DEVRT_ACCESS_WRITE};
    BAD_BLOCK(devrt_block_ptr(rt, bb, &p), "devrt_block_ptr");
    BAD_BLOCK(devrt_block_info_get(rt, bb, &i), "devrt_block_info_get");
    BAD_BLOCK(devrt_prepare_block_use(rt, bb, s, DEVRT_ACCESS_READ), "devrt_prepare_block_use");
    BAD_BLOCK(devrt_finish_block_use(rt, bb, s, DEVRT_ACCESS_WRITE), "devrt_finish_block_use");
    BAD_BLOCK(devrt_block_free(rt, bb), "devrt_block_free");
    BAD_BLOCK(probe_launch(rt, k, s, before.ptr, &u, 1), "devrt_launch");
  }
  /* Nothing changed: the block, its contents and the counters that bad input must not move. */
  st = bstats(rt);
  CHECK(same_info(info(rt, x), before));
  CHECK(st.blocks_live == st0.blocks_live && st.blocks_allocated == st0.blocks_allocated);
  CHECK(st.waits_inserted == st0.waits_inserted && st.events_recorded == st0.events_recorded &&
        st.launches == st0.launches);
  CHECK(st.stale_refusals >= st0.stale_refusals);
  CHECK(b_wrong(rt, s, x, 64, 3) == 0);
  CHECK_OK(devrt_block_free(rt, x));
}

/* A live block of one runtime is no block of another (generations are process-wide), even for
 * two fresh runtimes whose first blocks sit in the same slot. */
static void foreign_block(void) {
  devrt_runtime* rt[2] = {t_runtime(), t_runtime()};
  devrt_stream s[2] = {s_get(rt[0]), s_get(rt[1])};
  kernels k[2];
  k_load(rt[0], &k[0]);
  k_load(rt[1], &k[1]);
  devrt_block b[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    REQUIRE_OK(devrt_block_alloc(rt[i], 256, s[i], "foreign", &b[i]));
    CHECK_OK(k_fill(rt[i], &k[i], s[i], b[i], 0, 64, 0, true));
  }
  CHECK(b[0] != b[1]);
  for (int i = 0; i < 2; i++) {
    void* p = NULL;
    devrt_block_info bi;
    devrt_block_use u = {b[1 - i], DEVRT_ACCESS_WRITE}; /* the probe would write our own block */
    STALE(devrt_block_ptr(rt[i], b[1 - i], &p), "devrt_block_ptr");
    STALE(devrt_block_info_get(rt[i], b[1 - i], &bi), "devrt_block_info_get");
    STALE(devrt_prepare_block_use(rt[i], b[1 - i], s[i], DEVRT_ACCESS_READ),
          "devrt_prepare_block_use");
    STALE(devrt_finish_block_use(rt[i], b[1 - i], s[i], DEVRT_ACCESS_READ),
          "devrt_finish_block_use");
    STALE(probe_launch(rt[i], &k[i], s[i], bptr(rt[i], b[i]), &u, 1), "devrt_launch");
    STALE(devrt_block_free(rt[i], b[1 - i]), "devrt_block_free");
  }
  for (int i = 0; i < 2; i++) {
    CHECK(b_wrong(rt[i], s[i], b[i], 64, 0) == 0); /* untouched by the refused probes */
    CHECK_OK(devrt_block_free(rt[i], b[i]));
    CHECK_OK(devrt_module_unload(rt[i], k[i].mod));
    CHECK_OK(devrt_stream_release(rt[i], s[i]));
    CHECK_OK(devrt_runtime_destroy(rt[i]));
  }
}

/* Every entry point refuses a freed handle with STALE_BLOCK; `live` is a live block to point at. */
static void all_stale(devrt_runtime* rt, const kernels* k, devrt_stream s, devrt_block old,
                      void* live) {
  void* p = NULL;
  devrt_block_info i;
  devrt_block_use u[] = {{old, DEVRT_ACCESS_READ}};
  STALE(devrt_block_ptr(rt, old, &p), "devrt_block_ptr");
  STALE(devrt_block_info_get(rt, old, &i), "devrt_block_info_get");
  STALE(devrt_prepare_block_use(rt, old, s, DEVRT_ACCESS_READ), "devrt_prepare_block_use");
  STALE(devrt_prepare_block_use(rt, old, s, DEVRT_ACCESS_WRITE), "devrt_prepare_block_use");
  STALE(devrt_finish_block_use(rt, old, s, DEVRT_ACCESS_READ), "devrt_finish_block_use");
  STALE(devrt_finish_block_use(rt, old, s, DEVRT_ACCESS_WRITE), "devrt_finish_block_use");
  STALE(devrt_block_free(rt, old), "devrt_block_free");
  STALE(probe_launch(rt, k, s, live, u, 1), "devrt_launch");
  CHECK(p == NULL);
}

/* Alloc/free cycles until a new block gets the first one's address: every old handle stays stale.
 */
static void stale_after_reuse(devrt_runtime* rt, const kernels* k, devrt_stream a, devrt_stream b) {
  enum { KEEP = 64, MAX_CYCLES = 20000 };
  const size_t size = 1024;
  devrt_block olds[KEEP], cur = 0, scratch = 0;
  unsigned nold = 0;
  REQUIRE_OK(devrt_block_alloc(rt, 64, b, "probe target", &scratch));
  REQUIRE_OK(devrt_block_alloc(rt, size, a, "reuse", &olds[nold]));
  void* addr = bptr(rt, olds[0]);
  uint64_t gen0 = info(rt, olds[0]).generation;
  CHECK_OK(k_fill(rt, k, a, olds[0], 11, size / 4, 0, true));
  CHECK_OK(devrt_block_free(rt, olds[nold++]));
  int cycles = 0;
  while (++cycles <= MAX_CYCLES) {
    REQUIRE_OK(devrt_block_alloc(rt, size, a, "reuse", &cur));
    if (bptr(rt, cur) == addr) break;
    if (nold < KEEP) olds[nold++] = cur;
    REQUIRE_OK(devrt_block_free(rt, cur));
    cur = 0;
    if (cycles % 32 == 0) CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  }
  printf("reuse: address %p handed out again after %d alloc/free cycles\n", addr, cycles);
  CHECK(cur != 0); /* the address did come back */
  for (unsigned i = 0; i < nold; i++) CHECK(olds[i] != cur);
  devrt_block_stats st0 = bstats(rt);
  for (unsigned i = 0; i < nold; i++) all_stale(rt, k, b, olds[i], bptr(rt, scratch));
  devrt_block_stats st1 = bstats(rt);
  CHECK(st1.stale_refusals - st0.stale_refusals >= 8ull * nold);
  CHECK(st1.refused_launches - st0.refused_launches == nold);
  CHECK(st1.launches == st0.launches && st1.waits_inserted == st0.waits_inserted &&
        st1.events_recorded == st0.events_recorded && st1.blocks_live == st0.blocks_live);
  if (!cur) {
    CHECK_OK(devrt_block_free(rt, scratch));
    return;
  }
  /* The new owner of the address works. */
  devrt_block_info ic = info(rt, cur);
  CHECK(ic.ptr == addr && ic.generation > gen0 && ic.readers == 0);
  CHECK_OK(k_fill(rt, k, b, cur, 0x5a5au, size / 4, 0, true));
  CHECK(b_wrong(rt, a, cur, size / 4, 0x5a5au) == 0);
  CHECK_OK(devrt_block_free(rt, cur));
  all_stale(rt, k, b, cur, bptr(rt, scratch));
  CHECK_OK(devrt_block_free(rt, scratch));
}

/* Allocated on a, used at once on b: b must wait for the allocation (a wait is inserted when a is
 * still busy), and the result is right. */
static void first_use_elsewhere(devrt_runtime* rt, const kernels* k, devrt_stream a,
                                devrt_stream b) {
  const uint64_t n = 4096;
  devrt_block busy = 0, x = 0, y = 0;
  REQUIRE_OK(devrt_block_alloc(rt, 64, a, "busy", &busy));
  CHECK_OK(k_fill(rt, k, a, busy, 1, 16, 50 * MS, true)); /* a is busy for 50 ms */
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, a, "first use", &x));
  CHECK(!info(rt, x).writer_complete);
  devrt_block_stats st0 = bstats(rt);
  CHECK_OK(k_fill(rt, k, b, x, 0xabcu, n, 0, true));
  devrt_block_stats st1 = bstats(rt);
  CHECK(st1.waits_inserted - st0.waits_inserted == 1);
  CHECK(st1.launches - st0.launches == 1);
  CHECK(st1.events_recorded ==
        st0.events_recorded); /* its point is recorded only once something needs it */
  CHECK(b_wrong(rt, b, x, n, 0xabcu) == 0);

  /* Same on an idle stream: the wait is inserted or skipped as complete, exactly one of them. */
  CHECK_OK(devrt_stream_synchronize(rt, a));
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, a, "first use idle", &y));
  st0 = bstats(rt);
  CHECK_OK(k_fill(rt, k, b, y, 0xdefu, n, 0, true));
  st1 = bstats(rt);
  CHECK(st1.waits_inserted - st0.waits_inserted + st1.waits_skipped_complete -
            st0.waits_skipped_complete ==
        1);
  CHECK(b_wrong(rt, a, y, n, 0xdefu) == 0);
  CHECK_OK(devrt_block_free(rt, busy));
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_OK(devrt_block_free(rt, y));
}

/* Uses on the stream that allocated and wrote the block need no wait. */
static void same_stream(devrt_runtime* rt, const kernels* k, devrt_stream a) {
  const uint64_t n = 512;
  devrt_block x = 0, y = 0;
  devrt_block_stats st0 = bstats(rt);
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, a, "same", &x));
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, a, "same", &y));
  devrt_block_stats st1 = bstats(rt);
  CHECK(st1.blocks_allocated - st0.blocks_allocated == 2 && st1.blocks_live - st0.blocks_live == 2);
  CHECK(st1.events_recorded - st0.events_recorded == 2); /* the allocation-ready events */
  CHECK_OK(k_fill(rt, k, a, x, 21, n, 0, true));
  CHECK_OK(k_copy(rt, k, a, y, x, n, 0, true));
  CHECK_OK(k_fill(rt, k, a, x, 22, n, 0, true));
  devrt_block_stats st2 = bstats(rt);
  CHECK(st2.waits_inserted == st1.waits_inserted);
  CHECK(st2.waits_skipped_same_stream - st1.waits_skipped_same_stream >= 3);
  CHECK(st2.launches - st1.launches == 3);
  /* A point is recorded before the stream's next work only if a block will still refer to it:
   * the copy keeps the first fill's point as x's writer (a read does not replace it), the second
   * fill keeps the copy's as y's writer; nothing keeps the second fill's. */
  CHECK(st2.events_recorded - st1.events_recorded == 2);
  CHECK(st2.refused_launches == st1.refused_launches);
  CHECK(b_wrong(rt, a, y, n, 21) == 0 && b_wrong(rt, a, x, n, 22) == 0);
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_OK(devrt_block_free(rt, y));
  devrt_block_stats st3 = bstats(rt);
  CHECK(st3.blocks_live == st0.blocks_live);
}

/* info.readers counts streams with a read since the last write; the manual prepare/finish API
 * orders a read after a slow write and a write after a slow read. */
static void readers_and_manual(devrt_runtime* rt, const kernels* k, devrt_stream a, devrt_stream b,
                               devrt_stream c) {
  const uint64_t n = 1024;
  devrt_block x = 0, y1 = 0, y2 = 0;
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, a, "readers", &x));
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, b, "readers", &y1));
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, c, "readers", &y2));
  CHECK_OK(k_fill(rt, k, a, x, 5, n, 0, true));
  CHECK(info(rt, x).readers == 0);
  /* Slow reads, so none is known complete (completed readers may be dropped from the count). */
  CHECK_OK(k_copy(rt, k, b, y1, x, n, 30 * MS, true));
  CHECK(info(rt, x).readers == 1);
  CHECK_OK(k_copy(rt, k, c, y2, x, n, 30 * MS, true));
  CHECK(info(rt, x).readers == 2);
  CHECK_OK(k_copy(rt, k, b, y1, x, n, 30 * MS, true));
  CHECK(info(rt, x).readers == 2);
  CHECK(info(rt, y1).readers == 0 && info(rt, y2).readers == 0);
  CHECK_OK(k_fill(rt, k, a, x, 6, n, 0, true));
  CHECK(info(rt, x).readers == 0);
  CHECK_OK(devrt_prepare_block_use(rt, x, c, DEVRT_ACCESS_READ));
  CHECK_OK(devrt_finish_block_use(rt, x, c, DEVRT_ACCESS_READ));
  CHECK(info(rt, x).readers == 1);
  CHECK(b_wrong(rt, b, y1, n, 5) == 0 && b_wrong(rt, c, y2, n, 5) == 0);

  /* Manual read after a slow write on another stream. */
  CHECK_OK(k_fill(rt, k, a, x, 7, n, 30 * MS, true));
  CHECK(!info(rt, x).writer_complete);
  CHECK(b_wrong(rt, b, x, n, 7) == 0);
  /* Manual write (a memset on b) after a slow read on a: the reader keeps the old value. */
  CHECK_OK(k_copy(rt, k, a, y1, x, n, 30 * MS, true));
  CHECK_OK(devrt_prepare_block_use(rt, x, b, DEVRT_ACCESS_WRITE));
  CHECK_OK(devrt_memset_async(rt, bptr(rt, x), 0, n * 4, b));
  CHECK_OK(devrt_finish_block_use(rt, x, b, DEVRT_ACCESS_WRITE));
  CHECK(info(rt, x).readers == 0);
  CHECK(b_wrong(rt, c, y1, n, 7) == 0);
  CHECK(b_wrong(rt, c, x, n, 0) == 0);
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_OK(devrt_block_free(rt, y1));
  CHECK_OK(devrt_block_free(rt, y2));
}

/* A block outlives the lease of the stream it was allocated and written on. */
static void released_stream(devrt_runtime* rt, const kernels* k, devrt_stream b) {
  devrt_stream t = s_get(rt), t2 = 0;
  devrt_block x = 0;
  REQUIRE_OK(devrt_block_alloc(rt, 4096, t, "released", &x));
  CHECK_OK(k_fill(rt, k, t, x, 0x42, 1024, 30 * MS, true));
  CHECK_OK(devrt_stream_release(rt, t));
  CHECK(info(rt, x).stream == t);
  BAD(devrt_prepare_block_use(rt, x, t, DEVRT_ACCESS_READ), "devrt_prepare_block_use");
  CHECK(b_wrong(rt, b, x, 1024, 0x42) == 0); /* waits for the write on the released stream */
  t2 = s_get(rt);                            /* most likely the same pool slot, a new lease */
  CHECK_OK(k_fill(rt, k, t2, x, 0x43, 1024, 30 * MS, true));
  CHECK_OK(devrt_stream_release(rt, t2));
  CHECK(b_wrong(rt, b, x, 1024, 0x43) == 0);
  CHECK_OK(devrt_block_free(rt, x));
}

/* Injected backend faults (a runtime without the caching layer, so they reach the backend): a
 * failed allocation or allocation-ready record leaves no block or bytes behind; a failed free
 * leaves the block live and usable, and the retry frees it. */
static void faults(devrt_runtime* rt, const kernels* k, devrt_stream s, devrt_resource* top) {
  devrt_resource_figures f0, f;
  REQUIRE_OK(devrt_resource_query(top, &f0));
  devrt_block_stats st0 = bstats(rt);
  devrt_block x = 0;
  rt->be->fault_arm(rt->dev, DV_FAULT_ALLOC, 1);
  CHECK_STATUS(devrt_block_alloc(rt, 4096, s, "fault", &x), DEVRT_ERR_DEVICE_ALLOC_FAILED);
  rt->be->fault_arm(rt->dev, DV_FAULT_EVENT_RECORD, 1);
  CHECK_STATUS(devrt_block_alloc(rt, 4096, s, "fault", &x), DEVRT_ERR_BACKEND_ERROR);
  rt->be->fault_arm(rt->dev, DV_FAULT_EVENT_RECORD, 0);
  CHECK(x == 0);
  CHECK_OK(devrt_resource_query(top, &f));
  devrt_block_stats st = bstats(rt);
  CHECK(f.live_bytes == f0.live_bytes && st.blocks_allocated == st0.blocks_allocated &&
        st.blocks_live == st0.blocks_live);
  REQUIRE_OK(devrt_block_alloc(rt, 4096, s, "fault", &x));
  CHECK_OK(k_fill(rt, k, s, x, 8, 1024, 0, true));
  CHECK_OK(devrt_stream_synchronize(rt, s));
  devrt_block_info before = info(rt, x);
  rt->be->fault_arm(rt->dev, DV_FAULT_FREE, 1);
  CHECK_STATUS(devrt_block_free(rt, x), DEVRT_ERR_BACKEND_ERROR);
  rt->be->fault_arm(rt->dev, DV_FAULT_FREE, 0);
  CHECK(same_info(info(rt, x), before) && bstats(rt).blocks_live == st0.blocks_live + 1);
  CHECK(b_wrong(rt, s, x, 1024, 8) == 0);
  CHECK_OK(devrt_block_free(rt, x));
  STALE(devrt_block_free(rt, x), "devrt_block_free");
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  CHECK_OK(devrt_resource_query(top, &f));
  CHECK(f.live_bytes == f0.live_bytes && f.pending_bytes == 0 &&
        bstats(rt).blocks_live == st0.blocks_live);
}

/* Freed bytes move live -> pending at once and are retired by devrt_reap_pending; a free waits
 * for a slow reader first (runtime without the caching layer, so the figures are exact). */
static void reap(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.cache = false;
  devrt_runtime* rt = t_runtime_cfg(&cfg);
  kernels k;
  k_load(rt, &k);
  devrt_stream s = s_get(rt), r = s_get(rt);
  devrt_resource* top = NULL;
  REQUIRE_OK(devrt_runtime_resource(rt, &top));
  devrt_resource_figures f0, f;
  REQUIRE_OK(devrt_resource_query(top, &f0));
  const uint64_t g = f0.granularity;
  const size_t sizes[] = {1, 300, 4096, 1u << 20};
  enum { NB = sizeof sizes / sizeof sizes[0] };
  devrt_block bl[NB];
  uint64_t sum = 0, bytes = 0;
  for (int i = 0; i < NB; i++) {
    REQUIRE_OK(devrt_block_alloc(rt, sizes[i], s, "reap", &bl[i]));
    sum += (sizes[i] + g - 1) / g * g;
  }
  CHECK_OK(k_fill(rt, &k, s, bl[3], 9, sizes[3] / 4, 0, true));
  CHECK(b_wrong(rt, r, bl[3], sizes[3] / 4, 9) == 0);
  CHECK_OK(devrt_resource_query(top, &f));
  CHECK(g > 0 && f.live_bytes - f0.live_bytes == sum);
  for (int i = 0; i < NB; i++) CHECK_OK(devrt_block_free(rt, bl[i]));
  CHECK_OK(devrt_resource_query(top, &f));
  CHECK(f.live_bytes == f0.live_bytes && f.pending_bytes - f0.pending_bytes == sum);
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, &bytes));
  CHECK_OK(devrt_resource_query(top, &f));
  CHECK(bytes == sum + f0.pending_bytes && f.pending_bytes == 0 && f.live_bytes == f0.live_bytes);
  CHECK(f.reaped_bytes - f0.reaped_bytes == sum + f0.pending_bytes);

  /* A block freed while a slow kernel reads it stays pending until that read is done. */
  const uint64_t n = 1024;
  devrt_block x = 0, y = 0;
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, s, "reap slow", &x));
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, r, "reap slow", &y));
  CHECK_OK(k_fill(rt, &k, s, x, 13, n, 0, true));
  devrt_block_stats st0 = bstats(rt);
  CHECK_OK(k_copy(rt, &k, r, y, x, n, 150 * MS, true));
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_OK(devrt_reap_pending(rt, 0, &bytes));
  CHECK_OK(devrt_resource_query(top, &f));
  CHECK(bytes == 0 && f.pending_bytes == (n * 4 + g - 1) / g * g);
  devrt_block_stats st1 = bstats(rt);
  CHECK(st1.deferred_frees - st0.deferred_frees >= 1);
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, &bytes));
  CHECK(bytes == (n * 4 + g - 1) / g * g);
  CHECK(b_wrong(rt, s, y, n, 13) == 0);
  CHECK_OK(devrt_block_free(rt, y));
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, &bytes));
  CHECK_OK(devrt_resource_query(top, &f));
  CHECK(f.live_bytes == f0.live_bytes && f.pending_bytes == 0);
  CHECK(bstats(rt).blocks_live == 0);
  faults(rt, &k, s, top);
  printf("reap: granularity %llu, %llu bytes over %d blocks retired\n", (unsigned long long)g,
         (unsigned long long)sum, NB);
  CHECK_OK(devrt_module_unload(rt, k.mod));
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_stream_release(rt, r));
  CHECK_OK(devrt_runtime_destroy(rt));
}

/* Lazy points: a launch's point is recorded only when something needs it, and always before the
 * stream's next work when a block still refers to it (so a wait on it never covers later work). */
static void lazy_points(devrt_runtime* rt, const kernels* k, devrt_stream a, devrt_stream b) {
  const uint64_t n = 1024;
  devrt_block x = 0, z = 0;
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, a, "lazy x", &x));
  REQUIRE_OK(devrt_block_alloc(rt, n * 4, a, "lazy z", &z));
  devrt_block_stats st0 = bstats(rt);
  uint64_t r0 = repeated(rt);
  for (uint32_t i = 0; i < 24; i++)
    CHECK_OK(k_fill(rt, k, a, x, i, n, 0, true)); /* in place: each point superseded */
  devrt_block_stats st1 = bstats(rt);
  uint64_t r1 = repeated(rt);
  CHECK(st1.launches - st0.launches == 24 && st1.events_recorded == st0.events_recorded);
  /* The same use again: the mark moves on. Up to 16 launches may not save their uses, after a
   * repeated mark on a was needed by another stream in an earlier test. */
  CHECK(r1 - r0 >= 24 - 1 - 16);

  /* Another stream needs the newest point (a repeat's, moved past the slow fill): recorded then
   * (exact: nothing came after it on a), and the read sees the slow fill's words. */
  CHECK_OK(k_fill(rt, k, a, x, 0x11, n, 20 * MS, true));
  st0 = bstats(rt);
  r0 = repeated(rt);
  CHECK(r0 - r1 == 1);
  CHECK(b_wrong(rt, b, x, n, 0x11) == 0);
  st1 = bstats(rt);
  r1 = repeated(rt);
  CHECK(st1.events_recorded - st0.events_recorded >= 1 &&
        st1.waits_inserted - st0.waits_inserted == 1);
  CHECK_OK(k_fill(rt, k, a, x, 0x12, n, 20 * MS, true)); /* x changed (b read it): the usual path */
  CHECK(repeated(rt) == r1);
  CHECK(b_wrong(rt, b, x, n, 0x12) == 0);

  /* x's writer point is recorded before z's slow fill goes on a (x still refers to it), so b's
   * read of x waits for x's fill only; z's point is superseded by the copy that rewrites z. */
  CHECK_OK(k_fill(rt, k, a, x, 0x22, n, 0, true));
  st0 = bstats(rt);
  CHECK_OK(k_fill(rt, k, a, z, 0x33, n, 50 * MS, true));
  st1 = bstats(rt);
  CHECK(st1.events_recorded - st0.events_recorded == 1);
  CHECK(b_wrong(rt, b, x, n, 0x22) == 0);
  st1 = bstats(rt);
  CHECK_OK(k_copy(rt, k, a, z, x, n, 0, true));
  devrt_block_stats st2 = bstats(rt);
  CHECK(st2.events_recorded == st1.events_recorded);
  CHECK(b_wrong(rt, b, z, n, 0x22) == 0);
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_OK(devrt_block_free(rt, z));
}

/* A free racing a thread that repeats the same launch (the repeat path locks no block): the free
 * either is refused or waits for the launch in flight; launches meanwhile are refused as being
 * freed, later ones as stale. */
typedef struct racer {
  devrt_runtime* rt;
  const kernels* k;
  devrt_stream s;
  devrt_block x;
  _Atomic int ok, stale, other, last;
} racer;
static void* repeat_launches(void* p) {
  racer* r = p;
  for (int i = 0; i < 4000; i++) {
    devrt_status st = k_fill(r->rt, r->k, r->s, r->x, (uint32_t)i, 256, 0, true);
    if (st == DEVRT_OK)
      r->ok++;
    else if (st == DEVRT_ERR_STALE_BLOCK || st == DEVRT_ERR_INVALID_ARGUMENT ||
             st == DEVRT_ERR_INVALID_STATE)
      r->stale++; /* freed (its pointer is then NULL), or being freed */
    else {
      r->other++;
      r->last = (int)st;
    } /* (CHECK is not for threads) */
  }
  return NULL;
}
static void free_races_repeats(devrt_runtime* rt, const kernels* k, devrt_stream a) {
  for (int round = 0; round < 4; round++) {
    racer r = {.rt = rt, .k = k, .s = a};
    REQUIRE_OK(devrt_block_alloc(rt, 256 * 4, a, "raced", &r.x));
    pthread_t t;
    if (pthread_create(&t, NULL, repeat_launches, &r) != 0) {
      CHECK(!"pthread_create");
      return;
    }
    while (r.ok < 50 * (round + 1)) sched_yield();
    devrt_status st;
    while ((st = devrt_block_free(rt, r.x)) == DEVRT_ERR_INVALID_STATE)
      sched_yield(); /* a launch being issued */
    CHECK_OK(st);
    pthread_join(t, NULL);
    CHECK(r.ok + r.stale == 4000 && r.ok >= 50);
    if (r.other)
      fprintf(stderr, "free_races_repeats: %d launches failed otherwise, last %s\n", (int)r.other,
              devrt_status_name((devrt_status)r.last));
  }
  CHECK_OK(devrt_stream_synchronize(rt, a));
}

/* Blocks used again and again as one set with one access share one group record: a producer on
 * a writing all of them, a consumer on b reading them. Through it the hazards hold (the consumer
 * waits for the slow producer, the next producer for the slow consumer), waits are counted as
 * block by block, and any other use of a member (a subset, info, a free) sees the group's state. */
enum { GN = 4 };
static devrt_status g_fill(devrt_runtime* rt, const kernels* k, devrt_stream s,
                           const devrt_block* x, unsigned nx, bool reversed, uint32_t v,
                           uint64_t delay) {
  void* p = bptr(rt, x[0]);
  uint64_t n = 256;
  void* args[] = {&p, &v, &n, &delay};
  devrt_block_use u[GN];
  for (unsigned i = 0; i < nx; i++)
    u[i] = (devrt_block_use){x[reversed ? nx - 1 - i : i], DEVRT_ACCESS_WRITE};
  return k_run(rt, s, k->slow_fill, n, args, u, nx);
}
static devrt_status g_copy(devrt_runtime* rt, const kernels* k, devrt_stream s,
                           const devrt_block* x, unsigned nx, devrt_block out, uint64_t delay) {
  void *d = bptr(rt, out), *p = bptr(rt, x[0]);
  uint64_t n = 256;
  void* args[] = {&d, &p, &n, &delay};
  devrt_block_use u[GN];
  for (unsigned i = 0; i < nx; i++) u[i] = (devrt_block_use){x[i], DEVRT_ACCESS_READ};
  return k_run(rt, s, k->slow_copy, n, args, u, nx); /* out is not declared: read back on s */
}
static void groups(devrt_runtime* rt, const kernels* k, devrt_stream a, devrt_stream b,
                   devrt_stream c) {
  devrt_block x[GN], out[6], o2 = 0;
  for (int i = 0; i < GN; i++) REQUIRE_OK(devrt_block_alloc(rt, 256 * 4, a, "group", &x[i]));
  for (int r = 0; r < 6; r++) REQUIRE_OK(devrt_block_alloc(rt, 256 * 4, b, "group out", &out[r]));
  REQUIRE_OK(devrt_block_alloc(rt, 256 * 4, c, "group o2", &o2));
  CHECK_OK(devrt_stream_synchronize(rt, a));
  CHECK_OK(devrt_stream_synchronize(rt, b));
  devrt_block_stats st0 = bstats(rt), st1;
  uint64_t g0 = grouped(rt), g1 = g0;
  /* Even rounds: a slow producer (a consumer not waiting would copy first); odd rounds: a fast one
   * (not waiting for the previous consumer, it would overwrite before that one copies). */
  for (uint32_t r = 0; r < 6; r++) {
    if (r == 2) st0 = bstats(rt), g0 = grouped(rt);
    CHECK_OK(g_fill(rt, k, a, x, GN, false, r + 1, r % 2 ? 0 : 30 * MS));
    CHECK_OK(g_copy(rt, k, b, x, GN, out[r], 10 * MS));
  }
  st1 = bstats(rt), g1 = grouped(rt);
  CHECK(g1 - g0 == 8);
  CHECK(st1.waits_inserted - st0.waits_inserted ==
        8); /* one per launch: the other stream's point */
  CHECK(st1.waits_coalesced - st0.waits_coalesced ==
        24); /* as block by block: 3 more blocks each */
  CHECK(st1.waits_skipped_same_stream - st0.waits_skipped_same_stream ==
        16); /* the producer's own writes */
  for (uint32_t r = 0; r < 6; r++) CHECK(b_word(rt, b, out[r]) == r + 1);

  /* The same set in another order takes the group; info on a member sees its readers. */
  st0 = bstats(rt), g0 = grouped(rt);
  CHECK_OK(g_fill(rt, k, a, x, GN, true, 7, 30 * MS));
  CHECK(grouped(rt) - g0 == 1);
  CHECK_OK(g_copy(rt, k, b, x, GN, out[0], 0));
  CHECK(info(rt, x[2]).readers == 1 && !info(rt, x[2]).writer_complete);
  /* A subset (another stream) after another slow write through the group: it waits for it. */
  CHECK_OK(g_fill(rt, k, a, x, GN, false, 8, 30 * MS));
  st0 = bstats(rt), g0 = grouped(rt);
  CHECK_OK(g_copy(rt, k, c, x, 2, o2, 0));
  CHECK(grouped(rt) == g0);
  CHECK(b_word(rt, c, o2) == 8 && b_word(rt, b, out[0]) == 7);

  /* A member freed while grouped: the group goes, the old set is refused, the rest regroup. */
  CHECK_OK(g_fill(rt, k, a, x, GN, false, 9, 0));
  CHECK_OK(g_copy(rt, k, b, x, GN, out[1], 20 * MS));
  st0 = bstats(rt), g0 = grouped(rt);
  CHECK_OK(g_fill(rt, k, a, x, GN, false, 10, 0)); /* grouped, after the slow copy */
  CHECK(grouped(rt) - g0 == 1);
  CHECK_OK(devrt_block_free(rt, x[3]));
  STALE(g_fill(rt, k, a, x, GN, false, 11, 0), "devrt_launch");
  for (uint32_t r = 0; r < 3; r++) {
    CHECK_OK(g_fill(rt, k, a, x, GN - 1, false, 12 + r, r % 2 ? 0 : 30 * MS));
    CHECK_OK(g_copy(rt, k, b, x, GN - 1, out[2 + r], 10 * MS));
  }
  CHECK(grouped(rt) - g0 >= 3);
  CHECK(b_word(rt, b, out[1]) == 9);
  for (uint32_t r = 0; r < 3; r++) CHECK(b_word(rt, b, out[2 + r]) == 12 + r);
  /* The group's blocks as a list naming one twice, or with an access that is none, are no match
   * for it: the first is merged and pinned block by block, the others refused. */
  devrt_access W = DEVRT_ACCESS_WRITE;
  devrt_block_use twice[] = {{x[0], W}, {x[0], W}, {x[1], W}},
                  none[] = {{x[0], 0}, {x[1], 0}, {x[2], 0}},
                  one_bad[] = {{x[0], W}, {x[1], (devrt_access)5}, {x[2], W}};
  st0 = bstats(rt), g0 = grouped(rt);
  CHECK_OK(probe_launch(rt, k, a, bptr(rt, x[0]), twice, 3));
  BAD(probe_launch(rt, k, a, bptr(rt, x[0]), none, 3), "access 0");
  BAD(probe_launch(rt, k, a, bptr(rt, x[0]), one_bad, 3), "access 5");
  st1 = bstats(rt), g1 = grouped(rt);
  CHECK(g1 == g0 && st1.refused_launches - st0.refused_launches == 2);
  /* One block is a set too: a single-block pair groups once the block's use recurs on another
   * stream (the first consumer), and every consumer still sees its producer's write. */
  st0 = bstats(rt), g0 = grouped(rt);
  for (uint32_t r = 0; r < 4; r++) {
    CHECK_OK(g_fill(rt, k, a, x, 1, false, 20 + r, r % 2 ? 0 : 30 * MS));
    CHECK_OK(g_copy(rt, k, b, x, 1, out[r], 10 * MS));
  }
  CHECK(grouped(rt) - g0 == 6); /* all but the first pair */
  for (uint32_t r = 0; r < 4; r++) CHECK(b_word(rt, b, out[r]) == 20 + r);
  for (int i = 0; i < GN - 1; i++) CHECK_OK(devrt_block_free(rt, x[i]));
  for (int r = 0; r < 6; r++) CHECK_OK(devrt_block_free(rt, out[r]));
  CHECK_OK(devrt_block_free(rt, o2));
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
}

int main(void) {
  devrt_runtime* rt = t_runtime();
  kernels k;
  k_load(rt, &k);
  devrt_stream a = s_get(rt), b = s_get(rt), c = s_get(rt), dead = s_get(rt);
  REQUIRE_OK(devrt_stream_release(rt, dead));

  basics(rt, &k, a, b);
  bad_input(rt, &k, a, dead);
  foreign_block();
  stale_after_reuse(rt, &k, a, b);
  first_use_elsewhere(rt, &k, a, b);
  same_stream(rt, &k, a);
  lazy_points(rt, &k, a, b);
  free_races_repeats(rt, &k, a);
  groups(rt, &k, a, b, c);
  readers_and_manual(rt, &k, a, b, c);
  released_stream(rt, &k, b);
  CHECK(bstats(rt).blocks_live == 0);
  reap();

  CHECK_OK(devrt_module_unload(rt, k.mod));
  CHECK_OK(devrt_stream_release(rt, a));
  CHECK_OK(devrt_stream_release(rt, b));
  CHECK_OK(devrt_stream_release(rt, c));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
