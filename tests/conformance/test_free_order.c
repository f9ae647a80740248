/* test_free_order.c: no order of public calls lets a block's free, or the reuse of its memory,
 * run before a use recorded on it has completed: a finish for WRITE with no prepare, a prepare on
 * one stream and a finish on another, a finish for READ after work that wrote, readers a write
 * never waited for, and foreign work on a second stream joined back to the launch's. Each case
 * frees the block while a slow kernel still uses it, then fills new blocks of the same size with
 * a canary: memory handed out too early is overwritten (or read) by the old use. Run with the
 * cache on and off; on the host backend AddressSanitizer sees the early free itself. */
#include "launch_util.h"

enum { NW = 4096, REUSE = 4 };
#define SLOW (60 * MS)
#define CANARY 0xc0ffee00u

static kernels K;

/* Blocks of NW words allocated on s after a free and filled there with c: if the freed
 * block's memory came back before its uses completed, they write or read over these. */
static void reuse_fill(devrt_runtime* rt, devrt_stream s, devrt_block out[REUSE], uint32_t c) {
  for (int i = 0; i < REUSE; i++) {
    out[i] = 0;
    CHECK_OK(devrt_block_alloc(rt, NW * 4, s, "reuse", &out[i]));
    if (out[i]) CHECK_OK(k_fill(rt, &K, s, out[i], c + (uint32_t)i, NW, 0, true));
  }
}

/* Once every stream is idle: the words of the reused blocks that lost their canary (freed). */
static uint64_t reuse_wrong(devrt_runtime* rt, devrt_stream s, devrt_block out[REUSE], uint32_t c) {
  uint64_t wrong = 0;
  for (int i = 0; i < REUSE; i++) {
    if (!out[i]) continue;
    wrong += b_wrong(rt, s, out[i], NW, c + (uint32_t)i);
    CHECK_OK(devrt_block_free(rt, out[i]));
  }
  return wrong;
}

static void idle(devrt_runtime* rt, const devrt_stream* s, int n) {
  for (int i = 0; i < n; i++) CHECK_OK(devrt_stream_synchronize(rt, s[i]));
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
}

static devrt_block_info info(devrt_runtime* rt, devrt_block b) {
  devrt_block_info i;
  memset(&i, 0, sizeof i);
  CHECK_OK(devrt_block_info_get(rt, b, &i));
  return i;
}

/* Frees x while its uses may still run, hands blocks of its size out again on stream `on` with a
 * canary, and once every stream is idle checks that no old use wrote over a canary. */
static void free_and_reuse(devrt_runtime* rt, const devrt_stream* s, devrt_block x,
                           devrt_stream on) {
  devrt_block r[REUSE];
  CHECK_OK(devrt_block_free(rt, x));
  reuse_fill(rt, on, r, CANARY);
  idle(rt, s, 3);
  CHECK(reuse_wrong(rt, on, r, CANARY) == 0);
}

/* The four steps: a slow write on b, a finish for WRITE on c with no prepare, a free. */
static void finish_without_prepare(devrt_runtime* rt, const devrt_stream* s) {
  devrt_block x = 0;
  REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[0], "x", &x));
  CHECK_OK(k_fill(rt, &K, s[1], x, 1, NW, SLOW, true));
  CHECK_OK(devrt_finish_block_use(rt, x, s[2], DEVRT_ACCESS_WRITE));
  CHECK(info(rt, x).readers == 1); /* the slow write stays: c never waited for it */
  free_and_reuse(rt, s, x, s[0]);
}

/* A prepare on c, then a finish for WRITE on b, which never waited for the slow write on a. */
static void prepare_here_finish_there(devrt_runtime* rt, const devrt_stream* s) {
  devrt_block x = 0;
  REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[0], "x", &x));
  CHECK_OK(k_fill(rt, &K, s[0], x, 2, NW, SLOW, true));
  CHECK_OK(devrt_prepare_block_use(rt, x, s[2], DEVRT_ACCESS_WRITE));
  CHECK_OK(devrt_finish_block_use(rt, x, s[1], DEVRT_ACCESS_WRITE));
  CHECK(info(rt, x).readers == 1);
  free_and_reuse(rt, s, x, s[1]);
}

/* A prepare for READ, work that writes, a finish for READ: the free still waits for it. */
static void read_declared_write(devrt_runtime* rt, const devrt_stream* s) {
  devrt_block x = 0;
  REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[0], "x", &x));
  CHECK_OK(devrt_prepare_block_use(rt, x, s[2], DEVRT_ACCESS_READ));
  CHECK_OK(k_fill(rt, &K, s[2], x, 3, NW, SLOW, false)); /* untracked: the caller's own work */
  CHECK_OK(devrt_finish_block_use(rt, x, s[2], DEVRT_ACCESS_READ));
  free_and_reuse(rt, s, x, s[0]);
}

/* A slow read on b, then a write recorded on c that never waited for it: the read stays, so it
 * still reads x, not the canary of memory handed out again. */
static void readers_a_write_never_waited_for(devrt_runtime* rt, const devrt_stream* s) {
  devrt_block x = 0, y = 0;
  REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[0], "x", &x));
  REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[1], "y", &y));
  CHECK_OK(k_fill(rt, &K, s[0], x, 4, NW, 0, true));
  CHECK_OK(k_copy(rt, &K, s[1], y, x, NW, SLOW, true));
  CHECK_OK(devrt_finish_block_use(rt, x, s[2], DEVRT_ACCESS_WRITE));
  CHECK(info(rt, x).readers >= 1); /* the read, and the fill unless it is known complete */
  free_and_reuse(rt, s, x, s[0]);
  CHECK(b_wrong(rt, s[1], y, NW, 4) == 0); /* the copy read x itself */
  CHECK_OK(devrt_block_free(rt, y));
}

/* Foreign work that runs on a second stream joins it back into the stream devrt gave it, as
 * launch.h asks: the launch's mark then covers it, and so does the free. */
typedef struct joined {
  devrt_runtime* rt;
  devrt_stream other;
  devrt_event* ev;
  devrt_block x;
} joined;

static devrt_status enqueue_joined(void* user, devrt_stream stream, void* native) {
  (void)native;
  joined* j = user;
  DV_CHECK(k_fill(j->rt, &K, j->other, j->x, 5, NW, SLOW, false)); /* untracked: this work's own */
  DV_CHECK(devrt_event_record(j->rt, j->ev, j->other));
  return devrt_stream_wait_event(j->rt, stream, j->ev);
}

static void foreign_work_joined(devrt_runtime* rt, const devrt_stream* s) {
  devrt_block x = 0;
  REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[0], "x", &x));
  joined j = {rt, s[2], NULL, x};
  REQUIRE_OK(devrt_event_create(rt, DEVRT_EVENT_DEFAULT, &j.ev));
  devrt_block_use u = {x, DEVRT_ACCESS_WRITE};
  devrt_launch_desc d = {
      .stream = s[1], .enqueue = enqueue_joined, .user = &j, .uses = &u, .nuses = 1};
  CHECK_OK(
      devrt_prepare_block_use(rt, x, s[2], DEVRT_ACCESS_WRITE)); /* the other stream waits too */
  CHECK_OK(devrt_launch(rt, &d));
  free_and_reuse(rt, s, x, s[0]);
  CHECK_OK(devrt_event_destroy(rt, j.ev));
}

/* The correct order costs nothing extra: a prepare for WRITE on b, the work, a finish there
 * replaces what the prepare waited for (one wait), and a reader on c then waits once. */
static void correct_order_waits_once(devrt_runtime* rt, const devrt_stream* s) {
  devrt_block x = 0, y = 0;
  REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[0], "x", &x));
  REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[2], "y", &y));
  CHECK_OK(k_fill(rt, &K, s[0], x, 6, NW, SLOW, true));
  devrt_block_stats st0 = bstats(rt);
  CHECK_OK(devrt_prepare_block_use(rt, x, s[1], DEVRT_ACCESS_WRITE));
  CHECK_OK(k_fill(rt, &K, s[1], x, 7, NW, 0, false));
  CHECK_OK(devrt_finish_block_use(rt, x, s[1], DEVRT_ACCESS_WRITE));
  CHECK(info(rt, x).readers == 0); /* the slow fill went: b waited for it */
  CHECK_OK(k_copy(rt, &K, s[2], y, x, NW, 0, true));
  devrt_block_stats st1 = bstats(rt);
  CHECK(st1.waits_inserted - st0.waits_inserted == 2);
  idle(rt, s, 3);
  CHECK(b_wrong(rt, s[2], y, NW, 7) == 0);
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_OK(devrt_block_free(rt, y));
}

/* A finish on a block another thread is freeing is refused, never recorded after the free
 * gathered its waits; a freed block's finish is STALE_BLOCK. */
static void finish_after_free(devrt_runtime* rt, const devrt_stream* s) {
  devrt_block x = 0;
  REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[0], "x", &x));
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_STATUS(devrt_finish_block_use(rt, x, s[1], DEVRT_ACCESS_WRITE), DEVRT_ERR_STALE_BLOCK);
  idle(rt, s, 3);
}

/* Reads on many streams: the reader list outgrows its inline room (it grows outside the block's
 * lock), and the free waits for every read; a pair of blocks read as one set on many streams
 * (a group, whose list never grows) goes back to block-by-block tracking and still waits. */
enum { READERS = 12 };
static void many_readers(devrt_runtime* rt, const devrt_stream* s) {
  devrt_stream r[READERS];
  devrt_block x = 0, y[READERS], pair[2] = {0, 0};
  for (int i = 0; i < READERS; i++) r[i] = s_get(rt);
  REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[0], "x", &x));
  CHECK_OK(k_fill(rt, &K, s[0], x, 8, NW, 0, true));
  for (int i = 0; i < READERS; i++) {
    REQUIRE_OK(devrt_block_alloc(rt, NW * 4, r[i], "y", &y[i]));
    CHECK_OK(k_copy(rt, &K, r[i], y[i], x, NW, i % 2 ? 0 : SLOW / 2, true));
  }
  CHECK(info(rt, x).readers >= READERS / 2); /* the slow reads at least: past the inline three */
  free_and_reuse(rt, s, x, s[0]);
  for (int i = 0; i < READERS; i++) CHECK(b_wrong(rt, r[i], y[i], NW, 8) == 0);
  for (int b = 0; b < 2; b++) REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s[0], "pair", &pair[b]));
  uint64_t g0 = grouped(rt);
  for (int round = 0; round < 3; round++) {
    { /* one producer launch writes the pair (only the first is filled: the set is what counts) */
      void* p0 = bptr(rt, pair[0]);
      uint32_t v = 9 + (uint32_t)round;
      uint64_t n = NW;
      void* args[] = {&p0, &v, &n};
      devrt_block_use w[] = {{pair[0], DEVRT_ACCESS_WRITE}, {pair[1], DEVRT_ACCESS_WRITE}};
      CHECK_OK(k_run(rt, s[0], K.fill, NW, args, w, 2));
    }
    for (int i = 0; i < READERS; i++) { /* both blocks read together on every stream */
      void *d = bptr(rt, y[i]), *p0 = bptr(rt, pair[0]);
      uint64_t n = NW, delay = i % 3 ? 0 : SLOW / 4;
      void* args[] = {&d, &p0, &n, &delay};
      devrt_block_use u[] = {{pair[0], DEVRT_ACCESS_READ}, {pair[1], DEVRT_ACCESS_READ}};
      CHECK_OK(k_run(rt, r[i], K.slow_copy, NW, args, u, 2)); /* y[i]: this stream's alone */
    }
  }
  CHECK(grouped(rt) > g0); /* the set was tracked as a group until its list filled */
  CHECK_OK(devrt_block_free(rt, pair[1]));
  free_and_reuse(rt, s, pair[0], s[0]);
  for (int i = 0; i < READERS; i++) {
    CHECK(b_wrong(rt, r[i], y[i], NW, 11) == 0);
    CHECK_OK(devrt_block_free(rt, y[i]));
    CHECK_OK(devrt_stream_release(rt, r[i]));
  }
}

/* devrt_runtime_destroy refuses while blocks are live, naming how many. */
static void destroy_with_live_blocks(devrt_config* cfg) {
  devrt_runtime* rt = t_runtime_cfg(cfg);
  devrt_stream s = s_get(rt);
  devrt_block x = 0, y = 0;
  REQUIRE_OK(devrt_block_alloc(rt, 4096, s, "left over", &x));
  REQUIRE_OK(devrt_block_alloc(rt, 4096, s, "left over", &y));
  CHECK_STATUS(devrt_runtime_destroy(rt), DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(), "2 blocks are still live") != NULL);
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_STATUS(devrt_runtime_destroy(rt), DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(), "1 blocks are still live (one is tagged left over)") != NULL);
  CHECK_OK(devrt_block_free(rt, y));
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_runtime_destroy(rt));
}

int main(void) {
  for (int cache = 0; cache < 2; cache++) {
    devrt_config cfg;
    REQUIRE_OK(devrt_config_init(&cfg));
    cfg.cache = cache;
    devrt_runtime* rt = t_runtime_cfg(&cfg);
    k_load(rt, &K);
    devrt_stream s[3] = {s_get(rt), s_get(rt), s_get(rt)};
    finish_without_prepare(rt, s);
    prepare_here_finish_there(rt, s);
    read_declared_write(rt, s);
    readers_a_write_never_waited_for(rt, s);
    foreign_work_joined(rt, s);
    correct_order_waits_once(rt, s);
    many_readers(rt, s);
    finish_after_free(rt, s);
    for (int i = 0; i < 3; i++) CHECK_OK(devrt_stream_release(rt, s[i]));
    CHECK_OK(devrt_module_unload(rt, K.mod));
    CHECK_OK(devrt_runtime_destroy(rt));
    printf("cache %s: done\n", cache ? "on" : "off");
    destroy_with_live_blocks(&cfg);
  }
  return t_done();
}
