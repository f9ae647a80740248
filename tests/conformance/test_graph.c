/* test_graph: captures and graphs (devrt/graph.h) on the backend DEVRT_BACKEND names: nothing runs
 * while a stream captures; what a capture may not take is refused naming it, also from another
 * thread; a graph's launch waits for a slow producer on another stream, its readers on other
 * streams wait for it, a free of a block it uses waits for it, a block freed since the capture
 * fails the launch with STALE_BLOCK; foreign work (prepare, copy, finish) and an enqueue callback
 * are recorded too (and wait, at each launch, for a slow writer of what they read); launched again
 * and on several streams; another stream forked into a capture and joined back by events;
 * memory allocated and freed in a capture; the bad inputs. */
#include <pthread.h>
#include "launch_util.h"

enum { N = 1 << 16 };
#define SLOW (30 * MS)

static devrt_runtime* rt;
static kernels K;
static devrt_stream S[4];

static devrt_block alloc(void) {
  devrt_block b = 0;
  REQUIRE_OK(devrt_block_alloc(rt, N * 4, S[3], "graph", &b));
  CHECK_OK(k_fill(rt, &K, S[3], b, 0, N, 0, true));
  return b;
}

typedef struct other_arg {
  devrt_stream s;
  devrt_status launch, end, sync;
} other_arg;
static void* other_thread(void* p) { /* what another thread may not do to a capturing stream */
  other_arg* a = p;
  devrt_block b = 0;
  a->launch = devrt_block_alloc(rt, 64, S[1], "x", &b) == DEVRT_OK
                  ? k_fill(rt, &K, a->s, b, 1, 16, 0, true)
                  : DEVRT_ERR_BACKEND_ERROR;
  devrt_graph* g = NULL;
  a->end = devrt_capture_end(rt, a->s, &g);
  a->sync = devrt_stream_synchronize(rt, a->s);
  if (b) devrt_block_free(rt, b);
  return NULL;
}

/* A graph of: b = a (copy) and c = 9 (fill); a written slowly on another stream first. */
static void basic(void) {
  devrt_block a = alloc(), b = alloc(), c = alloc();
  CHECK_OK(devrt_stream_synchronize(rt, S[3]));
  CHECK_OK(devrt_capture_begin(rt, S[0]));
  CHECK_OK(k_copy(rt, &K, S[0], b, a, N, 0, true));
  CHECK_OK(k_fill(rt, &K, S[0], c, 9, N, 0, true));
  /* refused while capturing, each naming the capture */
  CHECK_STATUS(devrt_stream_synchronize(rt, S[0]), DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(), "capturing") != NULL);
  CHECK_STATUS(devrt_capture_begin(rt, S[0]), DEVRT_ERR_INVALID_STATE);
  CHECK_STATUS(devrt_stream_release(rt, S[0]), DEVRT_ERR_INVALID_STATE);
  other_arg oa = {.s = S[0]};
  pthread_t th;
  pthread_create(&th, NULL, other_thread, &oa);
  pthread_join(th, NULL);
  CHECK(oa.launch == DEVRT_ERR_INVALID_STATE && oa.end == DEVRT_ERR_INVALID_STATE &&
        oa.sync == DEVRT_ERR_INVALID_STATE);
  /* nothing ran: c is still 0 (read on another stream) */
  CHECK(b_wrong(rt, S[2], c, N, 0) == 0);
  devrt_graph* g = NULL;
  CHECK_OK(devrt_capture_end(rt, S[0], &g));
  CHECK_STATUS(devrt_capture_end(rt, S[0], &g), DEVRT_ERR_INVALID_STATE); /* ended */
  devrt_graph_info gi;
  CHECK_OK(devrt_graph_info_get(g, &gi));
  CHECK(gi.recorded == 2 && gi.blocks == 3 && gi.launches == 0);
  CHECK(b_wrong(rt, S[2], c, N, 0) == 0);
  /* a written slowly on S[1]: the launch on S[0] must wait for it; the reads on S[2] for it */
  CHECK_OK(k_fill(rt, &K, S[1], a, 7, N, SLOW, true));
  CHECK_OK(devrt_graph_launch(g, S[0]));
  CHECK(b_wrong(rt, S[2], b, N, 7) == 0);
  CHECK(b_wrong(rt, S[2], c, N, 9) == 0);
  /* again, on another stream, after a new a */
  CHECK_OK(k_fill(rt, &K, S[1], a, 8, N, SLOW, true));
  CHECK_OK(k_fill(rt, &K, S[1], c, 0, N, 0, true));
  CHECK_OK(devrt_graph_launch(g, S[3]));
  CHECK(b_wrong(rt, S[2], b, N, 8) == 0);
  CHECK(b_wrong(rt, S[2], c, N, 9) == 0);
  /* a slow writer of a on S[1], the graph on S[0], then b freed at once: the free waits */
  CHECK_OK(k_fill(rt, &K, S[1], a, 3, N, SLOW, true));
  CHECK_OK(devrt_graph_launch(g, S[0]));
  CHECK_OK(devrt_block_free(rt, b));
  CHECK(b_wrong(rt, S[2], c, N, 9) == 0);
  CHECK_OK(devrt_graph_info_get(g, &gi));
  CHECK(gi.launches == 3);
  /* b is gone: the next launch fails before anything is enqueued */
  CHECK_STATUS(devrt_graph_launch(g, S[0]), DEVRT_ERR_STALE_BLOCK);
  CHECK_OK(devrt_graph_destroy(g));
  CHECK_OK(devrt_block_free(rt, a));
  CHECK_OK(devrt_block_free(rt, c));
}

/* Fork and join by events (CUDA's multi-stream capture): S[0] captures b = a; S[1] joins by
 * waiting for an event recorded there and records c = b; an event on S[1] that S[0] waits for
 * joins it back before d = 4 on S[0]. A replay waits for a slow writer of a, and c holds a. A
 * stream left joined fails the end, naming it, and leaves both streams free. */
static void fork_join(void) {
  devrt_block a = alloc(), b = alloc(), c = alloc(), d = alloc();
  devrt_event *e1 = NULL, *e2 = NULL;
  CHECK_OK(devrt_event_create(rt, 0, &e1));
  CHECK_OK(devrt_event_create(rt, 0, &e2));
  CHECK_OK(devrt_stream_synchronize(rt, S[3]));
  CHECK_OK(devrt_capture_begin(rt, S[0]));
  CHECK_OK(k_copy(rt, &K, S[0], b, a, N, 0, true));
  CHECK_OK(devrt_event_record(rt, e1, S[0]));
  CHECK_STATUS(devrt_event_synchronize(rt, e1), DEVRT_ERR_INVALID_STATE); /* a graph's point */
  CHECK_OK(devrt_stream_wait_event(rt, S[1], e1));                        /* the fork */
  CHECK_OK(k_copy(rt, &K, S[1], c, b, N, 0, true));
  CHECK_STATUS(devrt_stream_synchronize(rt, S[1]), DEVRT_ERR_INVALID_STATE); /* capturing now */
  devrt_graph* g = NULL;
  CHECK_STATUS(devrt_capture_end(rt, S[1], &g), DEVRT_ERR_INVALID_STATE); /* ended on S[0] */
  CHECK(strstr(devrt_last_error(), "joined another stream's capture") != NULL);
  CHECK_OK(devrt_event_record(rt, e2, S[1]));
  CHECK_OK(devrt_stream_wait_event(rt, S[0], e2)); /* the join */
  CHECK_OK(k_fill(rt, &K, S[0], d, 4, N, 0, true));
  CHECK(b_wrong(rt, S[2], c, N, 0) == 0); /* nothing ran */
  CHECK_OK(devrt_capture_end(rt, S[0], &g));
  devrt_graph_info gi;
  CHECK_OK(devrt_graph_info_get(g, &gi));
  CHECK(gi.recorded == 3 && gi.blocks == 4);
  for (uint32_t v = 1; v <= 2; v++) { /* a written slowly on S[1]: the replay on S[3] waits */
    CHECK_OK(k_fill(rt, &K, S[1], a, v, N, SLOW, true));
    CHECK_OK(devrt_graph_launch(g, S[3]));
    CHECK(b_wrong(rt, S[2], c, N, v) == 0);
    CHECK(b_wrong(rt, S[2], d, N, 4) == 0);
  }
  CHECK_OK(devrt_graph_destroy(g));
  /* joined, never joined back */
  CHECK_OK(devrt_capture_begin(rt, S[0]));
  CHECK_OK(devrt_event_record(rt, e1, S[0]));
  CHECK_OK(devrt_stream_wait_event(rt, S[1], e1));
  CHECK_OK(k_fill(rt, &K, S[1], d, 5, N, 0, true));
  CHECK_STATUS(devrt_capture_end(rt, S[0], &g), DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(), "not joined back") != NULL);
  CHECK(b_wrong(rt, S[2], d, N, 4) == 0);           /* the fill was recorded, not run */
  CHECK_OK(k_fill(rt, &K, S[1], d, 6, N, 0, true)); /* and S[1] runs work again */
  CHECK(b_wrong(rt, S[2], d, N, 6) == 0);
  CHECK_OK(devrt_stream_synchronize(rt, S[0]));
  CHECK_STATUS(devrt_stream_wait_event(rt, S[1], e1), DEVRT_ERR_INVALID_STATE); /* capture over */
  CHECK_OK(devrt_event_record(rt, e1, S[0])); /* recorded outside a capture: usable again */
  CHECK_OK(devrt_event_synchronize(rt, e1));
  CHECK_OK(devrt_event_destroy(rt, e1));
  CHECK_OK(devrt_event_destroy(rt, e2));
  devrt_block all[] = {a, b, c, d};
  for (int i = 0; i < 4; i++) CHECK_OK(devrt_block_free(rt, all[i]));
}

static uint64_t live_bytes(void) {
  devrt_resource* top = NULL;
  devrt_resource_figures f;
  REQUIRE_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  REQUIRE_OK(devrt_runtime_resource(rt, &top));
  REQUIRE_OK(devrt_resource_query(top, &f));
  return f.live_bytes;
}

/* Memory under capture: a temporary allocated, written, copied out and freed in the capture is
 * the graph's (its handle stale for the caller, its bytes live until the graph is destroyed, the
 * same memory at every launch); a block allocated in the capture and not freed there is an
 * ordinary block; one freed in the capture but never used there is freed at once. */
static void memory(void) {
  devrt_block out = alloc(), t = 0, o2 = 0, unused = 0;
  CHECK_OK(devrt_stream_synchronize(rt, S[3]));
  uint64_t live0 = live_bytes();
  CHECK_OK(devrt_capture_begin(rt, S[0]));
  CHECK_OK(devrt_block_alloc(rt, N * 4, S[0], "graph tmp", &t));
  CHECK_OK(devrt_block_alloc(rt, N * 4, S[0], "graph out", &o2));
  CHECK_OK(devrt_block_alloc(rt, 64, S[0], "graph unused", &unused));
  void* tp = NULL;
  CHECK_OK(devrt_block_ptr(rt, t, &tp));
  CHECK_OK(k_fill(rt, &K, S[0], t, 5, N, 0, true));
  CHECK_OK(k_copy(rt, &K, S[0], out, t, N, 0, true));
  CHECK_OK(k_copy(rt, &K, S[0], o2, t, N, 0, true));
  CHECK_OK(devrt_block_free(rt, t));
  CHECK_OK(devrt_block_free(rt, unused));
  void* p = NULL;
  CHECK_STATUS(devrt_block_ptr(rt, t, &p), DEVRT_ERR_STALE_BLOCK); /* the graph's now */
  CHECK_STATUS(devrt_block_free(rt, t), DEVRT_ERR_STALE_BLOCK);
  devrt_graph* g = NULL;
  CHECK_OK(devrt_capture_end(rt, S[0], &g));
  devrt_graph_info gi;
  CHECK_OK(devrt_graph_info_get(g, &gi));
  CHECK(gi.recorded == 3 && gi.blocks == 3);
  CHECK(live_bytes() == live0 + 2 * N * 4); /* t (the graph's) and o2 */
  CHECK(b_wrong(rt, S[2], out, N, 0) == 0); /* nothing ran */
  CHECK_OK(devrt_graph_launch(g, S[0]));
  CHECK(b_wrong(rt, S[2], out, N, 5) == 0);
  CHECK(b_wrong(rt, S[2], o2, N, 5) == 0);
  CHECK_OK(k_fill(rt, &K, S[1], out, 1, N, SLOW, true)); /* the next launch waits for it */
  CHECK_OK(devrt_graph_launch(g, S[3]));
  CHECK(b_wrong(rt, S[2], out, N, 5) == 0);
  CHECK_OK(devrt_graph_launch(g, S[1]));
  CHECK_OK(devrt_graph_destroy(g)); /* with a launch in flight: t goes after it */
  CHECK(live_bytes() == live0 + N * 4);
  CHECK(b_wrong(rt, S[2], o2, N, 5) == 0);
  CHECK_OK(devrt_block_free(rt, o2));
  CHECK_OK(devrt_block_free(rt, out));
  (void)tp;
}

typedef struct cb_arg {
  void *dst, *src;
  size_t bytes;
} cb_arg;
static devrt_status enqueue_copy(void* user, devrt_stream id, void* native) {
  cb_arg* a = user;
  (void)native;
  return devrt_memcpy_async(rt, a->dst, a->src, a->bytes, id); /* recorded as the launch is */
}

/* Foreign work recorded: prepare, a copy, finish (d = h); an enqueue callback's copy (e = d).
 * Each launch copies h as it is then, after its slow writer on another stream. */
static void foreign(void) {
  devrt_block h = alloc(), d = alloc(), e = alloc();
  CHECK_OK(devrt_stream_synchronize(rt, S[3]));
  CHECK_OK(devrt_capture_begin(rt, S[0]));
  CHECK_OK(devrt_prepare_block_use(rt, h, S[0], DEVRT_ACCESS_READ));
  CHECK_OK(devrt_prepare_block_use(rt, d, S[0], DEVRT_ACCESS_WRITE));
  CHECK_OK(devrt_memcpy_async(rt, bptr(rt, d), bptr(rt, h), N * 4, S[0]));
  CHECK_OK(devrt_finish_block_use(rt, d, S[0], DEVRT_ACCESS_WRITE));
  CHECK_OK(devrt_finish_block_use(rt, h, S[0], DEVRT_ACCESS_READ));
  cb_arg ca = {bptr(rt, e), bptr(rt, d), N * 4};
  devrt_block_use u[] = {{d, DEVRT_ACCESS_READ}, {e, DEVRT_ACCESS_WRITE}};
  devrt_launch_desc ld = {
      .stream = S[0], .enqueue = enqueue_copy, .user = &ca, .uses = u, .nuses = 2};
  CHECK_OK(devrt_launch(rt, &ld));
  devrt_graph* g = NULL;
  CHECK_OK(devrt_capture_end(rt, S[0], &g));
  devrt_graph_info gi;
  CHECK_OK(devrt_graph_info_get(g, &gi));
  CHECK(gi.recorded == 3 && gi.blocks == 3);
  CHECK_OK(k_fill(rt, &K, S[1], h, 5, N, 0, true));
  CHECK(b_wrong(rt, S[2], e, N, 0) == 0); /* nothing ran */
  CHECK_OK(devrt_graph_launch(g, S[1]));
  CHECK(b_wrong(rt, S[2], e, N, 5) == 0);
  CHECK_OK(k_fill(rt, &K, S[1], h, 6, N, SLOW, true));
  CHECK_OK(devrt_graph_launch(g, S[0]));
  CHECK(b_wrong(rt, S[2], d, N, 6) == 0);
  CHECK(b_wrong(rt, S[2], e, N, 6) == 0);
  /* destroyed with a launch in flight behind a slow writer: the launch still runs, whole */
  CHECK_OK(k_fill(rt, &K, S[1], h, 4, N, SLOW, true));
  CHECK_OK(devrt_graph_launch(g, S[0]));
  CHECK_OK(devrt_graph_destroy(g));
  CHECK(b_wrong(rt, S[2], e, N, 4) == 0);
  CHECK_OK(devrt_stream_synchronize(rt, S[0]));
  devrt_block left[] = {h, d, e};
  for (int i = 0; i < 3; i++) CHECK_OK(devrt_block_free(rt, left[i]));
}

static void bad_inputs(void) {
  devrt_graph* g = NULL;
  CHECK_STATUS(devrt_capture_begin(NULL, S[0]), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_capture_begin(rt, 0), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_capture_end(rt, S[0], &g), DEVRT_ERR_INVALID_STATE); /* not capturing */
  CHECK_STATUS(devrt_capture_end(rt, S[0], NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_capture_end(rt, 0, &g), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_graph_launch(NULL, S[0]), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_graph_destroy(NULL), DEVRT_ERR_INVALID_ARGUMENT);
  devrt_graph_info gi;
  CHECK_STATUS(devrt_graph_info_get(NULL, &gi), DEVRT_ERR_INVALID_ARGUMENT);
  /* a capture with a stale block is refused at the launch that names it; an empty capture is a
   * graph that does nothing */
  devrt_block b = alloc();
  CHECK_OK(devrt_stream_synchronize(rt, S[3]));
  CHECK_OK(devrt_block_free(rt, b));
  CHECK_OK(devrt_capture_begin(rt, S[0]));
  CHECK_STATUS(k_fill(rt, &K, S[0], b, 1, N, 0, true), DEVRT_ERR_STALE_BLOCK);
  CHECK_OK(devrt_capture_end(rt, S[0], &g));
  CHECK_OK(devrt_graph_info_get(g, &gi));
  CHECK(gi.recorded == 0 && gi.blocks == 0);
  CHECK_OK(devrt_graph_launch(g, S[0]));
  /* a graph on a capturing stream: refused */
  devrt_graph* g2 = NULL;
  CHECK_OK(devrt_capture_begin(rt, S[1]));
  CHECK_STATUS(devrt_graph_launch(g, S[1]), DEVRT_ERR_INVALID_STATE);
  CHECK_OK(devrt_capture_end(rt, S[1], &g2));
  CHECK_OK(devrt_graph_destroy(g2));
  CHECK_OK(devrt_graph_destroy(g));
}

typedef struct share_arg {
  devrt_runtime* r;
  devrt_stream s;
} share_arg;
static void* release_share(void* p) { /* another thread's share of a capturing stream goes */
  share_arg* a = p;
  CHECK_OK(devrt_stream_release(a->r, a->s));
  return NULL;
}

/* A full pool's shares (stream 0's launches, DEVRT_ACQUIRE_SHARE) pass over a capturing stream,
 * so a stream-0 launch is never refused because another holder captures; a share taken before
 * the capture began is released during it (the capture's holder keeps the stream). */
static void shared_pool(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.stream_pool_size = 2;
  devrt_runtime* r = t_runtime_cfg(&cfg);
  kernels k;
  k_load(r, &k);
  devrt_stream a, b, s;
  REQUIRE_OK(devrt_stream_acquire(r, DEVRT_ACQUIRE_FAIL, &a));
  REQUIRE_OK(devrt_stream_acquire(r, DEVRT_ACQUIRE_FAIL, &b));
  devrt_block x = 0;
  REQUIRE_OK(devrt_block_alloc(r, 1024, b, "shared", &x));
  CHECK_OK(devrt_stream_synchronize(r, b));
  devrt_stream early;
  REQUIRE_OK(devrt_stream_acquire(r, DEVRT_ACQUIRE_SHARE, &early));
  CHECK(early == a);
  REQUIRE_OK(devrt_capture_begin(r, a));
  CHECK_STATUS(devrt_stream_release(r, a), DEVRT_ERR_INVALID_STATE); /* the capturing thread's */
  pthread_t th;
  pthread_create(&th, NULL, release_share, &(share_arg){r, early});
  pthread_join(th, NULL);
  for (int i = 0; i < 4; i++) { /* each share is b's */
    CHECK_OK(devrt_stream_acquire(r, DEVRT_ACQUIRE_SHARE, &s));
    CHECK(s == b);
    CHECK_OK(devrt_stream_release(r, s));
  }
  for (int i = 0; i < 4; i++) CHECK_OK(k_fill(r, &k, 0, x, 7, 256, 0, true)); /* stream 0 */
  devrt_graph* g = NULL;
  CHECK_OK(devrt_capture_end(r, a, &g));
  CHECK(b_word(r, b, x) == 7);
  CHECK_OK(devrt_graph_destroy(g));
  CHECK_OK(devrt_block_free(r, x));
  CHECK_OK(devrt_stream_synchronize(r, b));
  CHECK_OK(devrt_stream_release(r, a));
  CHECK_OK(devrt_stream_release(r, b));
  CHECK_OK(devrt_reap_pending(r, DEVRT_REAP_WAIT, NULL));
  CHECK_OK(devrt_module_unload(r, k.mod));
  CHECK_OK(devrt_runtime_destroy(r));
}

int main(void) {
  shared_pool();
  rt = t_runtime();
  k_load(rt, &K);
  for (int i = 0; i < 4; i++) S[i] = s_get(rt);
  basic();
  fork_join();
  memory();
  foreign();
  bad_inputs();
  for (int i = 0; i < 4; i++) CHECK_OK(devrt_stream_synchronize(rt, S[i]));
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  for (int i = 0; i < 4; i++) CHECK_OK(devrt_stream_release(rt, S[i]));
  CHECK_OK(devrt_module_unload(rt, K.mod));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
