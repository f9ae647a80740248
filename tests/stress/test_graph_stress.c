/* test_graph_stress.c: threads, each capturing graphs on a stream of its own (captures on several
 * threads at once), then launching them on streams picked at random among every thread's, with a
 * producer on another random stream (slow at times) writing the graph's input first and a reader
 * on a third checking its output; at random the output is freed at once after a launch (the free
 * waits for it) and the graph captured again over new blocks, and the old graph launched once
 * more must fail with STALE_BLOCK. Half the graphs copy through a temporary allocated and freed
 * in the capture (the graph's own), and half fill their flag on a stream forked into the capture
 * by an event and joined back (two fork streams for six threads: a fork may be refused). Another
 * thread's attempts on a capturing stream must be refused. A wrong word is a corruption; 0 are
 * allowed. Rounds: DEVRT_GRAPH_ROUNDS (default 100); DEVRT_GRAPH_TEMPS=0 leaves the temporaries
 * out. Host backend (TSan in CI); DEVRT_BACKEND=cuda runs it on a GPU. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include "launch_util.h"

enum { THREADS = 6, N = 4096 };

static devrt_runtime* rt;
static kernels K;
static devrt_stream S[THREADS];
static devrt_stream X[2];          /* streams captures fork into (no thread's own) */
static devrt_event* E[THREADS][2]; /* each thread's fork and join events */
static int rounds;
static bool temps_on = true; /* DEVRT_GRAPH_TEMPS=0: no graph has a temporary */
static _Atomic uint64_t corrupt, failed, refused, stale, temps, forks;

#define OK(expr) T_STRESS_OK(failed, expr)

typedef struct gset { /* a graph of out = in (copy) and flag = its id (fill) */
  devrt_block in, out, flag;
  devrt_graph* g;
  bool temp;       /* the copy goes through a temporary of the graph's own */
  unsigned rounds; /* launched in rounds so far */
} gset;

static int idx(devrt_stream s) {
  int j = 0;
  while (j < THREADS && S[j] != s) j++;
  return j;
}

static void capture(int t, gset* x, uint32_t id, uint64_t* r) {
  devrt_block* b[] = {&x->in, &x->out, &x->flag};
  for (int i = 0; i < 3; i++) OK(devrt_block_alloc(rt, N * 4, S[t], "graph", b[i]));
  OK(k_fill(rt, &K, S[t], x->in, 0, N, 0, true));
  OK(devrt_capture_begin(rt, S[t]));           /* the others' calls on S[t] are refused meanwhile */
  if (t_rand(r) % 2) sched_yield();            /* let them try */
  if ((x->temp = t_rand(r) % 2 && temps_on)) { /* through a temporary of the graph's own: launches
                                   on two streams at once both write it, and tracking orders them */
    devrt_block tmp = 0;
    OK(devrt_block_alloc(rt, N * 4, S[t], "graph tmp", &tmp));
    OK(k_copy(rt, &K, S[t], tmp, x->in, N, 0, true));
    OK(k_copy(rt, &K, S[t], x->out, tmp, N, 0, true));
    OK(devrt_block_free(rt, tmp));
    atomic_fetch_add(&temps, 1);
  } else {
    OK(k_copy(rt, &K, S[t], x->out, x->in, N, 0, true));
  }
  /* at times the flag is filled on a fork stream joined by an event, then joined back; another
   * thread's fork may hold that stream (the join is refused: no fork) */
  devrt_stream fk = X[t_rand(r) % 2];
  devrt_status st = t_rand(r) % 2 ? devrt_event_record(rt, E[t][0], S[t]) : DEVRT_ERR_INVALID_STATE;
  if (st == DEVRT_OK && (st = devrt_stream_wait_event(rt, fk, E[t][0])) == DEVRT_OK) {
    OK(k_fill(rt, &K, fk, x->flag, id, N, 0, true));
    OK(devrt_event_record(rt, E[t][1], fk));
    OK(devrt_stream_wait_event(rt, S[t], E[t][1]));
    atomic_fetch_add(&forks, 1);
  } else {
    if (st != DEVRT_ERR_INVALID_STATE) OK(st);
    OK(k_fill(rt, &K, S[t], x->flag, id, N, 0, true));
  }
  OK(devrt_capture_end(rt, S[t], &x->g));
}

static void release(gset* x) {
  if (x->g) devrt_graph_destroy(x->g);
  devrt_block b[] = {x->in, x->out, x->flag};
  for (int i = 0; i < 3; i++)
    if (b[i]) devrt_block_free(rt, b[i]);
  *x = (gset){0};
}

/* b_read on a stream another thread may begin capturing at any call: refused at the first call,
 * nothing was enqueued (INVALID_STATE: the caller reads on its own stream instead); refused later,
 * the copy into host is on s already, so its finish and synchronize are retried until the capture
 * ends: a read given up there would land in host after the caller reused it. */
static devrt_status read_on(devrt_stream s, devrt_block b, void* host, size_t bytes) {
  devrt_status st = devrt_prepare_block_use(rt, b, s, DEVRT_ACCESS_READ);
  if (st == DEVRT_OK && (st = devrt_memcpy_async(rt, host, bptr(rt, b), bytes, s)) != DEVRT_OK)
    return st; /* nothing is on s (its waits alone) */
  if (st != DEVRT_OK) return st;
  while ((st = devrt_finish_block_use(rt, b, s, DEVRT_ACCESS_READ)) == DEVRT_ERR_INVALID_STATE)
    sched_yield();
  if (st != DEVRT_OK) return st;
  while ((st = devrt_stream_synchronize(rt, s)) == DEVRT_ERR_INVALID_STATE) sched_yield();
  return st;
}

static void work(int t) {
  uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
  gset x = {0};
  uint32_t id = (uint32_t)t << 16;
  capture(t, &x, id, &r);
  uint32_t* h = malloc(N * 4);
  for (int i = 0; i < rounds && !atomic_load(&failed); i++) {
    devrt_stream sp = S[t_rand(&r) % THREADS], sg = S[t_rand(&r) % THREADS],
                 sr = S[t_rand(&r) % THREADS];
    uint32_t v = (uint32_t)i + 1;
    uint64_t slow = t_rand(&r) % 4 == 0 ? 2 * MS : 0;
    /* another thread may capture sp, sg or sr now: then the call is refused, and retried on
     * this thread's own stream, which only it captures */
    devrt_status st = k_fill(rt, &K, sp, x.in, v, N, slow, true);
    if (st == DEVRT_ERR_INVALID_STATE) atomic_fetch_add(&refused, 1), sp = S[t];
    if (st == DEVRT_ERR_INVALID_STATE) st = k_fill(rt, &K, sp, x.in, v, N, slow, true);
    OK(st);
    if ((st = devrt_graph_launch(x.g, sg)) == DEVRT_ERR_INVALID_STATE)
      atomic_fetch_add(&refused, 1), st = devrt_graph_launch(x.g, sg = S[t]);
    OK(st);
    if (t_rand(&r) % 8 == 0) { /* freed at once after a launch, then captured anew */
      devrt_graph* old = x.g;
      x.g = NULL;
      OK(devrt_block_free(rt, x.out)); /* waits for the launch */
      x.out = 0;
      if (devrt_graph_launch(old, S[t]) == DEVRT_ERR_STALE_BLOCK) atomic_fetch_add(&stale, 1);
      OK(devrt_graph_destroy(old));
      release(&x);
      capture(t, &x, ++id, &r);
      continue;
    }
    if ((st = read_on(sr, x.out, h, N * 4)) == DEVRT_ERR_INVALID_STATE)
      atomic_fetch_add(&refused, 1), st = read_on(sr = S[t], x.out, h, N * 4);
    OK(st);
    uint64_t wrong = 0;
    for (int k = 0; k < N; k++) wrong += h[k] != v;
    if (wrong) /* what a finding needs to be understood */
      fprintf(stderr,
              "thread %d round %d: %llu words of out != %u (out[0] %u); graph round %u, temp %d, "
              "slow %d, streams: fill S%d, graph S%d, read S%d (own S%d)\n",
              t, i, (unsigned long long)wrong, v, h[0], x.rounds, x.temp, slow != 0, idx(sp),
              idx(sg), idx(sr), t);
    x.rounds++;
    OK(b_read(rt, S[t], x.flag, h, 4)); /* its own stream: only this thread captures it */
    if (h[0] != id)
      fprintf(stderr, "thread %d round %d: flag %u != %u; graph round %u, streams: graph S%d\n", t,
              i, h[0], id, x.rounds - 1, idx(sg));
    wrong += h[0] != id;
    atomic_fetch_add(&corrupt, wrong);
  }
  free(h);
  OK(devrt_stream_synchronize(rt, S[t]));
  release(&x);
}

static void* thread_main(void* p) {
  work((int)(intptr_t)p);
  return NULL;
}

int main(void) {
  const char* env = getenv("DEVRT_GRAPH_ROUNDS");
  rounds = env ? atoi(env) : 100;
  temps_on = !getenv("DEVRT_GRAPH_TEMPS") || strcmp(getenv("DEVRT_GRAPH_TEMPS"), "0");
  rt = t_runtime();
  k_load(rt, &K);
  for (int i = 0; i < THREADS; i++) S[i] = s_get(rt);
  for (int i = 0; i < 2; i++) X[i] = s_get(rt);
  for (int i = 0; i < THREADS; i++)
    for (int k = 0; k < 2; k++) CHECK_OK(devrt_event_create(rt, 0, &E[i][k]));
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, thread_main, (void*)(intptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  printf(
      "%d threads x %d rounds: %llu corrupted words, %llu failed calls, %llu refused on a "
      "capturing stream, %llu stale launches refused, %llu graphs with a temporary, %llu "
      "forked\n",
      THREADS, rounds, (unsigned long long)atomic_load(&corrupt),
      (unsigned long long)atomic_load(&failed), (unsigned long long)atomic_load(&refused),
      (unsigned long long)atomic_load(&stale), (unsigned long long)atomic_load(&temps),
      (unsigned long long)atomic_load(&forks));
  CHECK(atomic_load(&corrupt) == 0);
  CHECK(atomic_load(&failed) == 0);
  CHECK(atomic_load(&stale) > 0);
  CHECK(atomic_load(&temps) > 0 || !temps_on);
  CHECK(atomic_load(&forks) > 0);
  for (int i = 0; i < THREADS; i++) CHECK_OK(devrt_stream_synchronize(rt, S[i]));
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  for (int i = 0; i < THREADS; i++) CHECK_OK(devrt_stream_release(rt, S[i]));
  for (int i = 0; i < 2; i++) CHECK_OK(devrt_stream_release(rt, X[i]));
  for (int i = 0; i < THREADS; i++)
    for (int k = 0; k < 2; k++) CHECK_OK(devrt_event_destroy(rt, E[i][k]));
  CHECK_OK(devrt_module_unload(rt, K.mod));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
