/* test_queue_graph_stress.c: threads, each running rounds of a chain fill -> graph -> copy through
 * the submission queue: a LAUNCH fills `in` with the round's value, a GRAPH submission replays the
 * thread's graph (mid = in), a LAUNCH copies out = mid, each waiting for the one before on the
 * thread's semaphore, submitted in a random order (a waiter before its signaller parks), on
 * streams picked at random, at times started by a host signal, at times slow, the launches at
 * times untracked (then only the semaphores order them around the graph). The work goes to shared
 * streams, the thread's own or a pool stream (the pool has room beyond the streams held here),
 * never another thread's own. Every word of mid and out is checked once the chain's last signal
 * is reached. At random the graph is captured anew through queue submissions on the thread's own
 * stream (a LAUNCH, or an ALLOC, two LAUNCHes and a FREE of a temporary). Rounds:
 * DEVRT_QGRAPH_ROUNDS (default 1000). Host backend (TSan and ASan in CI); DEVRT_BACKEND=cuda runs
 * it on a GPU. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include "launch_util.h"

enum { THREADS = 6, SHARED = 3, N = 4096 };

static devrt_runtime* rt;
static kernels K;
static devrt_stream S[THREADS + SHARED]; /* the threads' own, then shared ones */
static int rounds;
static _Atomic uint64_t corrupt, failed, refused, parked_first, captures;

#define OK(expr) T_STRESS_OK(failed, expr)

typedef struct chain {
  int t;
  uint64_t r;
  devrt_block in, mid, out;
  devrt_graph* g;
  devrt_semaphore* sem;
  uint64_t v; /* the semaphore's value at the round's start */
} chain;

/* Submits sub on its stream; one another thread captures refuses it (nothing queued), and it
 * goes to this thread's own stream instead. */
static devrt_status submit(chain* c, devrt_submission sub) {
  devrt_status st = devrt_queue_submit(rt, &sub);
  if (st != DEVRT_ERR_INVALID_STATE) return st;
  atomic_fetch_add(&refused, 1);
  sub.stream = S[c->t];
  return devrt_queue_submit(rt, &sub);
}

/* A LAUNCH of dst = v (src 0) or dst = src over N words, after delay ns. */
static devrt_status kern(chain* c, devrt_stream s, const devrt_semaphore_value* w, unsigned nw,
                         const devrt_semaphore_value* g, unsigned ng, devrt_block dst,
                         devrt_block src, uint32_t v, uint64_t delay, bool tracked) {
  void *d = bptr(rt, dst), *sp = bptr(rt, src);
  uint64_t n = N;
  void* args[] = {&d, src ? (void*)&sp : (void*)&v, &n, &delay};
  devrt_block_use u[] = {{dst, DEVRT_ACCESS_WRITE}, {src, DEVRT_ACCESS_READ}};
  return submit(c, (devrt_submission){.stream = s,
                                      .waits = w,
                                      .nwaits = nw,
                                      .signals = g,
                                      .nsignals = ng,
                                      .kind = DEVRT_WORK_LAUNCH,
                                      .launch = {.kernel = src ? K.slow_copy : K.slow_fill,
                                                 .grid = {N / 256},
                                                 .block = {256},
                                                 .args = args,
                                                 .uses = u,
                                                 .nuses = tracked ? (src ? 2 : 1) : 0}});
}

/* The graph mid = in, recorded from queue submissions on the thread's own stream, at times
 * through a temporary the capture allocates and frees (the graph's own). */
static void capture(chain* c) {
  devrt_stream s = S[c->t];
  if (c->g) OK(devrt_graph_destroy(c->g));
  c->g = NULL;
  OK(devrt_capture_begin(rt, s));
  sched_yield(); /* let the others try s */
  if (t_rand(&c->r) % 2) {
    devrt_block tmp = 0;
    OK(submit(c, (devrt_submission){
                     .stream = s, .kind = DEVRT_WORK_ALLOC, .alloc = {N * 4, "tmp", &tmp}}));
    OK(kern(c, s, NULL, 0, NULL, 0, tmp, c->in, 0, 0, true));
    OK(kern(c, s, NULL, 0, NULL, 0, c->mid, tmp, 0, 0, true));
    OK(submit(c, (devrt_submission){.stream = s, .kind = DEVRT_WORK_FREE, .block = tmp}));
  } else {
    OK(kern(c, s, NULL, 0, NULL, 0, c->mid, c->in, 0, 0, true));
  }
  OK(devrt_capture_end(rt, s, &c->g));
  atomic_fetch_add(&captures, 1);
}

/* Words of b that differ from v, read untracked on the thread's own stream. */
static uint64_t wrong(chain* c, devrt_block b, uint32_t v, uint32_t* h) {
  uint64_t bad = N + 1;
  if (devrt_memcpy_async(rt, h, bptr(rt, b), N * 4, S[c->t]) == DEVRT_OK &&
      devrt_stream_synchronize(rt, S[c->t]) == DEVRT_OK)
    for (int i = bad = 0; i < N; i++) bad += h[i] != v;
  return bad;
}

static void round_of(chain* c, int i, uint32_t* h) {
  uint64_t v = c->v;
  uint32_t val = (uint32_t)c->t << 24 | (uint32_t)i;
  bool gated = t_rand(&c->r) % 4 == 0; /* the fill waits for a host signal of v + 1 */
  uint64_t base = v + gated;
  devrt_semaphore_value w[3] = {{c->sem, base}, {c->sem, base + 1}, {c->sem, base + 2}},
                        g[3] = {{c->sem, base + 1}, {c->sem, base + 2}, {c->sem, base + 3}};
  unsigned order[3] = {0, 1, 2};
  for (unsigned k = 3; k > 1; k--) { /* a random order of the three steps */
    unsigned j = (unsigned)(t_rand(&c->r) % k), x = order[k - 1];
    order[k - 1] = order[j], order[j] = x;
  }
  atomic_fetch_add(&parked_first, order[0] != 0);
  for (unsigned k = 0; k < 3; k++) {
    /* never another thread's own stream: that thread may begin a capture of it between the
     * submit's checks and the issue (even an issue at once), which fails the chain's signals */
    unsigned pick = (unsigned)(t_rand(&c->r) % (SHARED + 2));
    devrt_stream s = pick < SHARED ? S[THREADS + pick] : pick == SHARED ? S[c->t] : 0;
    uint64_t slow = t_rand(&c->r) % 4 == 0 ? 500000 : 0;
    bool tracked = t_rand(&c->r) % 2;
    switch (order[k]) {
      case 0:
        OK(kern(c, s, w, 1, g, 1, c->in, 0, val, slow, tracked));
        break;
      case 1:
        OK(submit(c, (devrt_submission){.stream = s,
                                        .waits = &w[1],
                                        .nwaits = 1,
                                        .signals = &g[1],
                                        .nsignals = 1,
                                        .kind = DEVRT_WORK_GRAPH,
                                        .graph = c->g}));
        break;
      default:
        OK(kern(c, s, &w[2], 1, &g[2], 1, c->out, c->mid, 0, slow, tracked));
    }
  }
  if (gated) OK(devrt_semaphore_signal(c->sem, base));
  OK(devrt_semaphore_wait(c->sem, base + 3, 20000 * MS));
  c->v = base + 3;
  uint64_t bad = wrong(c, c->mid, val, h), bad_out = wrong(c, c->out, val, h);
  if (bad || bad_out)
    fprintf(stderr, "thread %d round %d: %llu words of mid, %llu of out != %#x (order %u%u%u)\n",
            c->t, i, (unsigned long long)bad, (unsigned long long)bad_out, val, order[0], order[1],
            order[2]);
  atomic_fetch_add(&corrupt, bad + bad_out);
}

static void* thread_main(void* p) {
  chain c = {.t = (int)(intptr_t)p, .r = 0x9e3779b97f4a7c15ull * (uint64_t)((intptr_t)p + 1)};
  uint32_t* h = malloc(N * 4);
  devrt_block* b[] = {&c.in, &c.mid, &c.out};
  for (int k = 0; k < 3; k++)
    if (devrt_block_alloc(rt, N * 4, S[c.t], "qgraph", b[k]) != DEVRT_OK)
      atomic_fetch_add(&failed, 1);
  if (devrt_semaphore_create(rt, 0, &c.sem) != DEVRT_OK) atomic_fetch_add(&failed, 1);
  if (!atomic_load(&failed)) capture(&c);
  for (int i = 0; i < rounds && c.g && !atomic_load(&failed); i++) {
    if (t_rand(&c.r) % 8 == 0) capture(&c);
    if (c.g) round_of(&c, i, h);
  }
  if (c.sem) devrt_semaphore_destroy(c.sem); /* after a failure: cancels what is parked */
  if (c.g && devrt_graph_destroy(c.g) != DEVRT_OK) atomic_fetch_add(&failed, 1);
  for (int k = 0; k < 3; k++)
    if (*b[k]) devrt_block_free(rt, *b[k]);
  free(h);
  return NULL;
}

int main(void) {
  const char* env = getenv("DEVRT_QGRAPH_ROUNDS");
  rounds = env ? atoi(env) : 1000;
  /* room in the pool beyond the streams held here: a pool stream (stream 0) is then never one a
   * thread holds, which a share of a full pool could hand out while that thread captures it */
  setenv("DEVRT_STREAMS", "32", 1);
  rt = t_runtime();
  k_load(rt, &K);
  for (int i = 0; i < THREADS + SHARED; i++) S[i] = s_get(rt);
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, thread_main, (void*)(intptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  devrt_queue_stats qs = {0};
  CHECK_OK(devrt_queue_stats_get(rt, &qs));
  printf(
      "%d threads x %d rounds: %llu corrupted words, %llu failed calls, %llu refused on a "
      "capturing stream, %llu rounds with a waiter first, %llu captures; queue: %llu parked, "
      "%llu device waits, %llu host hops\n",
      THREADS, rounds, (unsigned long long)atomic_load(&corrupt),
      (unsigned long long)atomic_load(&failed), (unsigned long long)atomic_load(&refused),
      (unsigned long long)atomic_load(&parked_first), (unsigned long long)atomic_load(&captures),
      (unsigned long long)qs.parked, (unsigned long long)qs.device_waits,
      (unsigned long long)qs.host_hops);
  CHECK(atomic_load(&corrupt) == 0);
  CHECK(atomic_load(&failed) == 0);
  CHECK(atomic_load(&captures) > THREADS && qs.parked > 0 && qs.host_hops == 0);
  for (int i = 0; i < THREADS + SHARED; i++) CHECK_OK(devrt_stream_synchronize(rt, S[i]));
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  CHECK(bstats(rt).blocks_live == 0);
  for (int i = 0; i < THREADS + SHARED; i++) CHECK_OK(devrt_stream_release(rt, S[i]));
  CHECK_OK(devrt_module_unload(rt, K.mod));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
