/* test_arena_stress.c: the arena leaf under threads sharing streams: allocations of sizes from a
 * byte to 4 MiB on random streams, each filled on its stream; a free reads both ends back first
 * (another block placed over it would show), then frees on a random stream (another stream's free
 * stays pending until its event completes); trims and reaps at random. No two live blocks may
 * overlap, and every figure drains to zero at the end. */
#include <pthread.h>
#include "test.h"

enum { THREADS = 8, STREAMS = 4, HOLD = 4, ITERS = 1200, ENDS = 16 };

typedef struct {
  void* p;
  size_t size;
  devrt_stream s;
  unsigned char byte;
} held_blk;

typedef struct {
  devrt_runtime* rt;
  devrt_resource* r;
  devrt_stream* st;
  unsigned id;
  uint64_t seed;
  int errors, bad, overlaps;
  held_blk h[HOLD];
} worker;

/* Every live block of every thread: a new one must not overlap any. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static held_blk* reg[THREADS * HOLD];

static bool reg_add(held_blk* b) {
  bool ok = true;
  char *lo = b->p, *hi = lo + b->size;
  pthread_mutex_lock(&reg_mu);
  int empty = -1;
  for (int i = 0; i < THREADS * HOLD; i++) {
    if (!reg[i]) {
      if (empty < 0) empty = i;
      continue;
    }
    char *l = reg[i]->p, *h = l + reg[i]->size;
    if (lo < h && l < hi) ok = false;
  }
  if (empty >= 0) reg[empty] = b;
  pthread_mutex_unlock(&reg_mu);
  return ok;
}

static void reg_remove(held_blk* b) {
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < THREADS * HOLD; i++)
    if (reg[i] == b) reg[i] = NULL;
  pthread_mutex_unlock(&reg_mu);
}

/* Counts and reports a failed call (the thread goes on). */
#define OK(w, expr)                                                              \
  do {                                                                           \
    devrt_status s_ = (expr);                                                    \
    if (s_ != DEVRT_OK) {                                                        \
      fprintf(stderr, "line %d: %s: %s\n", __LINE__, #expr, devrt_last_error()); \
      (w)->errors++;                                                             \
    }                                                                            \
  } while (0)

static size_t rand_size(uint64_t* seed) {
  unsigned bits = (unsigned)(t_rand(seed) % 23); /* 1 B .. 4 MiB, log-uniform */
  return 1 + (size_t)(t_rand(seed) % ((size_t)1 << bits));
}

/* Reads both ends of b back on its stream: they hold its byte unless someone wrote over it. */
static bool intact(worker* w, held_blk* b) {
  unsigned char got[2 * ENDS];
  size_t n = b->size < ENDS ? b->size : ENDS;
  devrt_status st = devrt_memcpy_async(w->rt, got, b->p, n, b->s);
  if (st == DEVRT_OK)
    st = devrt_memcpy_async(w->rt, got + ENDS, (char*)b->p + b->size - n, n, b->s);
  if (st == DEVRT_OK) st = devrt_stream_synchronize(w->rt, b->s);
  if (st != DEVRT_OK) return w->errors++, true;
  for (size_t i = 0; i < n; i++)
    if (got[i] != b->byte || got[ENDS + i] != b->byte) return false;
  return true;
}

static void* run(void* arg) {
  worker* w = arg;
  for (unsigned it = 0; it < ITERS; it++) {
    held_blk* b = &w->h[t_rand(&w->seed) % HOLD];
    unsigned op = (unsigned)(t_rand(&w->seed) % 100);
    uint64_t n = 0;
    if (op < 2) {
      OK(w, devrt_resource_trim(w->r, &n));
    } else if (op < 4) {
      OK(w, devrt_resource_reap(w->r, op == 3 ? DEVRT_REAP_WAIT : 0, &n));
    } else if (b->p) {
      if (!intact(w, b)) w->bad++;
      reg_remove(b);
      devrt_stream f = w->st[t_rand(&w->seed) % STREAMS]; /* b's work is done: any stream */
      OK(w, devrt_resource_deallocate(w->r, b->p, b->size, f));
      b->p = NULL;
    } else {
      b->size = rand_size(&w->seed);
      b->s = w->st[t_rand(&w->seed) % STREAMS];
      b->byte = (unsigned char)(1 + t_rand(&w->seed) % 255);
      if (devrt_resource_allocate(w->r, b->size, b->s, NULL, &b->p) != DEVRT_OK) {
        w->errors++;
        b->p = NULL;
        continue;
      }
      if (!reg_add(b)) w->overlaps++;
      OK(w, devrt_memset_async(w->rt, b->p, b->byte, b->size, b->s));
    }
  }
  for (unsigned i = 0; i < HOLD; i++)
    if (w->h[i].p) {
      if (!intact(w, &w->h[i])) w->bad++;
      reg_remove(&w->h[i]);
      OK(w, devrt_resource_deallocate(w->r, w->h[i].p, w->h[i].size, w->h[i].s));
    }
  return NULL;
}

int main(void) {
  devrt_runtime* rt = t_runtime();
  devrt_resource* r = t_arena(rt);
  devrt_stream st[STREAMS];
  for (unsigned i = 0; i < STREAMS; i++)
    REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &st[i]));
  worker w[THREADS];
  pthread_t th[THREADS];
  uint64_t seed = (uint64_t)time(NULL);
  printf("seed %llu\n", (unsigned long long)seed);
  for (unsigned i = 0; i < THREADS; i++) {
    w[i] = (worker){.rt = rt, .r = r, .st = st, .id = i, .seed = seed * 31 + i + 1};
    if (pthread_create(&th[i], NULL, run, &w[i])) return 1;
  }
  int errors = 0, bad = 0, overlaps = 0;
  for (unsigned i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    errors += w[i].errors, bad += w[i].bad, overlaps += w[i].overlaps;
  }
  printf("errors %d, blocks written over %d, overlapping blocks %d\n", errors, bad, overlaps);
  CHECK(errors == 0 && bad == 0 && overlaps == 0);
  uint64_t n = 0;
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n));
  CHECK_OK(devrt_resource_trim(r, &n));
  CHECK_OK(devrt_resource_reap(r, DEVRT_REAP_WAIT, &n)); /* the trimmed pages, once passed */
  devrt_resource_figures f = t_figures(r);
  CHECK(f.live_bytes == 0 && f.pending_bytes == 0 && f.cached_bytes == 0);
  for (unsigned i = 0; i < STREAMS; i++) CHECK_OK(devrt_stream_release(rt, st[i]));
  CHECK_OK(devrt_resource_release(r));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
