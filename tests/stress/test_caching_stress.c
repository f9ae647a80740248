/* test_caching_stress.c: the caching layer under threads sharing streams: allocations and frees
 * on random streams (a free on another stream than the block's last use waits for that use
 * first), sizes across the classes, work still running on a block when it is freed, trims and
 * reaps at random. Every allocation is filled on its stream and read back: a block handed to a
 * stream while another stream's work on it still runs shows that work's values. No pointer is
 * handed out twice while live, and every figure drains to zero. Without and with
 * cross_stream_wait, and with a cache bound (frees past it go upstream). */
#include <pthread.h>
#include "test.h"

enum { THREADS = 8, STREAMS = 6, HOLD = 6, ITERS = 1500, WORDS = 256, RECENT = 512 };

typedef struct {
  devrt_runtime* rt;
  devrt_resource* c;
  devrt_stream* st;
  unsigned id, seed;
  int errors, bad_reads, twice;
  unsigned cross, trims, reaps;
} worker;

/* Live pointers of every thread, and where recently freed ones were freed, with the trims
 * started and ended (a pointer freed with no trim running and none started since is back from the
 * cache, not upstream). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static void* live[THREADS * HOLD];
static struct {
  void* p;
  devrt_stream s;
  unsigned gen; /* trims started at the free; UINT32_MAX: one was running */
} recent[RECENT];
static unsigned nrecent;
static _Atomic unsigned trims_started, trims_ended;

/* Registers p as handed out on s: false if it is live already; *cross: the cache handed it over
 * from another stream. */
static bool reg_add(void* p, devrt_stream s, bool* cross) {
  bool fresh = true;
  unsigned empty = THREADS * HOLD;
  pthread_mutex_lock(&reg_mu);
  for (unsigned i = 0; i < THREADS * HOLD; i++) {
    if (live[i] == p) fresh = false;
    if (!live[i] && empty == THREADS * HOLD) empty = i;
  }
  if (fresh && empty < THREADS * HOLD) live[empty] = p;
  *cross = false;
  for (unsigned i = 0; i < RECENT; i++)
    if (recent[i].p == p)
      *cross = recent[i].s != s && recent[i].gen == atomic_load(&trims_started), recent[i].p = NULL;
  pthread_mutex_unlock(&reg_mu);
  return fresh;
}
static void reg_remove(void* p, devrt_stream s) {
  pthread_mutex_lock(&reg_mu);
  for (unsigned i = 0; i < THREADS * HOLD; i++)
    if (live[i] == p) live[i] = NULL;
  unsigned j = nrecent++ % RECENT, g = atomic_load(&trims_started);
  recent[j].p = p, recent[j].s = s, recent[j].gen = atomic_load(&trims_ended) == g ? g : UINT32_MAX;
  pthread_mutex_unlock(&reg_mu);
}

static devrt_status fill(devrt_runtime* rt, devrt_stream s, void* p, uint32_t v, uint64_t n,
                         uint64_t delay_ns) {
  if (!delay_ns) return t_launch(rt, s, "devrt_fill_u32", 1, 64, (void*[]){&p, &v, &n});
  return t_launch(rt, s, "devrt_slow_fill_u32", 1, 64, (void*[]){&p, &v, &n, &delay_ns});
}

static void* work(void* arg) {
  worker* w = arg;
  devrt_event* ev = NULL;
  if (devrt_event_create(w->rt, 0, &ev) != DEVRT_OK) return w->errors++, NULL;
  void* p[HOLD] = {0};
  size_t sz[HOLD] = {0};
  devrt_stream on[HOLD] = {0}; /* the stream of the block's last use */
  uint32_t buf[WORDS];
  for (unsigned it = 0; it < ITERS; it++) {
    unsigned k = (unsigned)rand_r(&w->seed) % HOLD, r = (unsigned)rand_r(&w->seed);
    devrt_stream s = w->st[(unsigned)rand_r(&w->seed) % STREAMS];
    if (r % 64 == 0) {
      uint64_t n = 0;
      w->trims++, atomic_fetch_add(&trims_started, 1);
      if (devrt_resource_trim(w->c, &n) != DEVRT_OK) w->errors++;
      atomic_fetch_add(&trims_ended, 1);
    } else if (r % 64 == 1) {
      w->reaps++;
      if (devrt_resource_reap(w->c, r & 128 ? DEVRT_REAP_WAIT : 0, NULL) != DEVRT_OK) w->errors++;
    } else if (p[k]) { /* free on s; if that is not where it was last used, s waits for that */
      if (s != on[k] && (devrt_event_record(w->rt, ev, on[k]) != DEVRT_OK ||
                         devrt_stream_wait_event(w->rt, s, ev) != DEVRT_OK))
        w->errors++;
      reg_remove(p[k], s);
      if (devrt_resource_deallocate(w->c, p[k], sz[k], s) != DEVRT_OK) w->errors++;
      p[k] = NULL;
    } else {
      /* 1 B .. 4 MiB, every class size as likely as its neighbours in a power of two */
      sz[k] = 1 + (size_t)rand_r(&w->seed) % ((size_t)512 << (unsigned)rand_r(&w->seed) % 14);
      if (devrt_resource_allocate(w->c, sz[k], s, "stress", &p[k]) != DEVRT_OK) {
        w->errors++, p[k] = NULL;
        continue;
      }
      bool cross = false;
      if (!reg_add(p[k], s, &cross)) w->twice++;
      w->cross += cross;
      on[k] = s;
      uint64_t n = sz[k] / 4 < WORDS ? sz[k] / 4 : WORDS;
      uint32_t v = w->id << 24 | it;
      if (!n) continue;
      if (fill(w->rt, s, p[k], v, n, 0) != DEVRT_OK ||
          devrt_memcpy_async(w->rt, buf, p[k], n * 4, s) != DEVRT_OK ||
          devrt_stream_synchronize(w->rt, s) != DEVRT_OK) {
        w->errors++;
        continue;
      }
      for (uint64_t i = 0; i < n; i++) w->bad_reads += buf[i] != v;
      /* Work still running on it when it is freed: a later owner on another stream must not
       * start before it ends. */
      if (r % 2 && fill(w->rt, s, p[k], ~v, n, (r >> 8) % 200000) != DEVRT_OK) w->errors++;
    }
  }
  for (unsigned k = 0; k < HOLD; k++)
    if (p[k]) {
      reg_remove(p[k], on[k]);
      if (devrt_resource_deallocate(w->c, p[k], sz[k], on[k]) != DEVRT_OK) w->errors++;
    }
  if (devrt_event_destroy(w->rt, ev) != DEVRT_OK) w->errors++;
  return NULL;
}

static unsigned phase(devrt_runtime* rt, devrt_resource* up, devrt_stream* st, bool wait,
                      uint64_t bound) {
  devrt_caching_options o = {.cross_stream_wait = wait, .max_cached_bytes = bound};
  devrt_resource* c = NULL;
  REQUIRE_OK(devrt_caching_resource_create(up, &o, &c));
  pthread_t th[THREADS];
  worker w[THREADS];
  for (unsigned i = 0; i < THREADS; i++) {
    w[i] = (worker){.rt = rt, .c = c, .st = st, .id = i + 1, .seed = 777u * i + wait + 3u};
    pthread_create(&th[i], NULL, work, &w[i]);
  }
  worker sum = {0};
  for (unsigned i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    sum.errors += w[i].errors, sum.bad_reads += w[i].bad_reads, sum.twice += w[i].twice;
    sum.cross += w[i].cross, sum.trims += w[i].trims, sum.reaps += w[i].reaps;
  }
  CHECK(sum.errors == 0 && sum.bad_reads == 0 && sum.twice == 0);
  devrt_resource_figures f;
  CHECK_OK(devrt_resource_query(c, &f));
  CHECK(f.live_bytes == 0 && f.cache_hits > 0);
  uint64_t n = 0;
  CHECK_OK(devrt_resource_trim(c, &n));
  for (unsigned i = 0; i < STREAMS; i++) CHECK_OK(devrt_stream_synchronize(rt, st[i]));
  CHECK_OK(devrt_resource_reap(c, DEVRT_REAP_WAIT, NULL));
  CHECK_OK(devrt_resource_query(c, &f));
  CHECK(f.live_bytes == 0 && f.cached_bytes == 0 && f.pending_bytes == 0);
  printf(
      "wait %d, bound %llu: %d errors, %d bad reads, %d handed out twice; %u taken from "
      "another stream, %llu hits / %llu misses, %u trims, %u reaps\n",
      wait, (unsigned long long)bound, sum.errors, sum.bad_reads, sum.twice, sum.cross,
      (unsigned long long)f.cache_hits, (unsigned long long)f.cache_misses, sum.trims, sum.reaps);
  CHECK_OK(devrt_resource_release(c));
  return sum.cross;
}

int main(void) {
  devrt_runtime* rt = t_runtime();
  devrt_stream st[STREAMS];
  for (unsigned i = 0; i < STREAMS; i++)
    REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_WAIT, &st[i]));
  devrt_resource* up = NULL;
  REQUIRE_OK(devrt_async_resource_create(rt, &up));
  void* p = NULL;
  REQUIRE_OK(devrt_resource_allocate(up, 4096, st[0], "warm", &p)); /* t_launch's module: */
  CHECK_OK(fill(rt, st[0], p, 1, 1, 0)); /* loaded before the threads share it */
  CHECK_OK(devrt_resource_deallocate(up, p, 4096, st[0]));
  unsigned cross = phase(rt, up, st, false, 0);
  cross += phase(rt, up, st, true, 0);
  CHECK(cross > 0); /* the cross-stream paths were taken */
  phase(rt, up, st, false, 8u << 20);
  for (unsigned i = 0; i < STREAMS; i++) CHECK_OK(devrt_stream_release(rt, st[i]));
  CHECK_OK(devrt_resource_release(up));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
