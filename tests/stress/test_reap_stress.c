/* test_reap_stress.c: reaps visit only the slots with something to reap or poll (issue 25), so a
 * slot that leaves those sets too early is a free never retired or a mark never polled. Memory:
 * threads allocate on random streams of a 256-stream pool and free mostly on a stream of their
 * own, sometimes on any (so their slot moves) while two threads reap, without DEVRT_REAP_WAIT and
 * then with it; after a waiting reap, nothing is pending, held is exactly what is still allocated
 * and every freed byte was reaped.
 * Events: threads write a block on one stream and read it on another (recording the writer's
 * mark) while another polls; once every stream's work is complete, one poll leaves every slot's
 * recorded newest mark known complete and the poll set empty.
 * Retire: a thread frees on a layout's partition streams (behind a slow host function) and
 * destroys the layout while two threads reap with DEVRT_REAP_WAIT: a reap's synchronize never
 * touches a stream the destroy has freed (ASan sees it). DEVRT_STRESS_ITERS: rounds. */
#include <unistd.h>
#include <pthread.h>
#include "launch_util.h"
#include "memory/account.h"

enum { THREADS = 6, STREAMS = 24, BATCH = 8 };

static devrt_runtime* rt;
static devrt_resource* res;
static devrt_stream streams[STREAMS];
static kernels K;
static int iters = 300;
static _Atomic int stop, errors;
static _Atomic uint64_t freed, kept, reaped;
static void* kept_p[2][THREADS]; /* one block per thread and memory round, freed at the end */
static size_t kept_n[2][THREADS];
static int round_no;

static void err(const char* what) {
  if (atomic_fetch_add(&errors, 1) == 0) fprintf(stderr, "%s: %s\n", what, devrt_last_error());
}

static void* freer(void* arg) {
  unsigned rng = (unsigned)(uintptr_t)arg * 2654435761u + 1;
  for (int it = 0; it < iters; it++) {
    void* p[BATCH];
    size_t n[BATCH];
    for (int i = 0; i < BATCH; i++) {
      n[i] = 1 + (size_t)(rand_r(&rng) % 20000);
      if (devrt_resource_allocate(res, n[i], streams[rand_r(&rng) % STREAMS], "stress", &p[i]))
        err("allocate");
    }
    for (int i = 0; i < BATCH; i++) {
      uint64_t r = dv_round(res->account, n[i]);
      if (it == iters - 1 && i == 0) { /* one block each stays allocated to the end */
        kept_p[round_no][(uintptr_t)arg] = p[i], kept_n[round_no][(uintptr_t)arg] = n[i];
        atomic_fetch_add(&kept, r);
        continue;
      }
      /* mostly on the thread's own few streams (its cur slot), sometimes anywhere */
      unsigned s = rand_r(&rng) % 4 ? (unsigned)(uintptr_t)arg * 3 : (unsigned)rand_r(&rng);
      if (devrt_resource_deallocate(res, p[i], n[i], streams[s % STREAMS])) err("deallocate");
      atomic_fetch_add(&freed, r);
    }
  }
  return NULL;
}

static void* reaper(void* arg) {
  unsigned flags = (unsigned)(uintptr_t)arg;
  while (!atomic_load(&stop)) {
    uint64_t n = 0;
    if (devrt_resource_reap(res, flags, &n)) err("reap");
    atomic_fetch_add(&reaped, n);
  }
  return NULL;
}

static void memory_round(unsigned flags) {
  pthread_t w[THREADS], rp[2];
  uint64_t freed0 = atomic_load(&freed), reaped0 = atomic_load(&reaped);
  atomic_store(&stop, 0);
  for (int i = 0; i < 2; i++) pthread_create(&rp[i], NULL, reaper, (void*)(uintptr_t)flags);
  for (int i = 0; i < THREADS; i++) pthread_create(&w[i], NULL, freer, (void*)(uintptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(w[i], NULL);
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(rp[i], NULL);
  uint64_t n = 0;
  CHECK_OK(devrt_resource_reap(res, DEVRT_REAP_WAIT, &n));
  devrt_resource_figures f;
  CHECK_OK(devrt_resource_query(res, &f));
  CHECK(f.pending_bytes == 0);
  CHECK(atomic_load(&res->account->held) == atomic_load(&kept));
  CHECK(f.live_bytes == atomic_load(&kept));
  CHECK(atomic_load(&reaped) - reaped0 + n == atomic_load(&freed) - freed0);
  printf("memory, reapers %s: %llu bytes freed, %llu reaped while freeing, %llu by the last reap\n",
         flags ? "waiting" : "not waiting", (unsigned long long)(atomic_load(&freed) - freed0),
         (unsigned long long)(atomic_load(&reaped) - reaped0), (unsigned long long)n);
  round_no++;
}

/* A block written on stream a and read on stream b: the read records a's mark. */
static void* user(void* arg) {
  unsigned rng = (unsigned)(uintptr_t)arg * 40503u + 7;
  for (int it = 0; it < iters; it++) {
    devrt_stream a = streams[rand_r(&rng) % STREAMS], b = streams[rand_r(&rng) % STREAMS];
    devrt_block x = 0, y = 0;
    if (devrt_block_alloc(rt, 4096, a, "x", &x) || devrt_block_alloc(rt, 4096, b, "y", &y))
      err("block_alloc");
    else if (k_fill(rt, &K, a, x, (uint32_t)it, 1024, 0, true) ||
             k_copy(rt, &K, b, y, x, 1024, 0, true))
      err("launch");
    if (x && devrt_block_free(rt, x)) err("block_free");
    if (y && devrt_block_free(rt, y)) err("block_free");
  }
  return NULL;
}

static void* poller(void* arg) {
  (void)arg;
  while (!atomic_load(&stop))
    if (devrt_reap_pending(rt, 0, NULL)) err("reap_pending");
  return NULL;
}

static void events_round(void) {
  pthread_t w[THREADS], p;
  atomic_store(&stop, 0);
  pthread_create(&p, NULL, poller, NULL);
  for (int i = 0; i < THREADS; i++) pthread_create(&w[i], NULL, user, (void*)(uintptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(w[i], NULL);
  atomic_store(&stop, 1);
  pthread_join(p, NULL);
  /* complete every stream's work behind devrt's back: only a poll can learn of it */
  for (unsigned i = 0; i < rt->nslots; i++) /* the pool's and the free stream */
    if (rt->slots[i].s) CHECK_OK(rt->be->stream_sync(rt->slots[i].s));
  dv_events_poll(rt);
  unsigned recorded = 0, known = 0, left = 0;
  for (unsigned i = 0; i < rt->nslots; i++) {
    const dv_pev* m = dv_slot_last(rt, i);
    if (m && atomic_load(&m->rec) == DV_PEV_RECORDED) recorded++, known += dv_pev_done(rt, m);
  }
  for (unsigned i = 0; i < DV_SLOTSET_WORDS; i++) left += atomic_load(&rt->polls.w[i]) != 0;
  CHECK(known == recorded && left == 0);
  printf("events: %u slots' newest marks recorded, %u known complete after one poll\n", recorded,
         known);
}

static void slow(void* u) {
  (void)u;
  usleep(200);
}

static void* layouts(void* arg) {
  devrt_device_info di;
  (void)arg;
  if (devrt_device_info_get(rt, &di)) err("device info");
  devrt_layout_spec spec = {.groups = 2, .min_sms = di.min_partition_sms, .streams = 2};
  for (int i = 0; i < iters / 10 + 5; i++) {
    devrt_layout* l = NULL;
    devrt_partition* p = NULL;
    devrt_stream s = 0;
    void* x = NULL;
    if (devrt_layout_create(rt, &spec, &l) || devrt_layout_partition(rt, l, i % 2, &p) ||
        devrt_partition_stream_acquire(rt, p, DEVRT_ACQUIRE_FAIL, &s) ||
        devrt_stream_host_func(rt, s, slow, NULL) ||
        devrt_resource_allocate(res, 4096, s, "retire", &x) ||
        devrt_resource_deallocate(res, x, 4096, s) || devrt_stream_release(rt, s))
      err("layout round");
    if (l && devrt_layout_destroy(rt, l)) err("layout destroy");
  }
  atomic_store(&stop, 1);
  return NULL;
}

static void retire_round(void) {
  pthread_t lt, rp[2];
  atomic_store(&stop, 0);
  for (int i = 0; i < 2; i++)
    pthread_create(&rp[i], NULL, reaper, (void*)(uintptr_t)DEVRT_REAP_WAIT);
  pthread_create(&lt, NULL, layouts, NULL);
  pthread_join(lt, NULL);
  for (int i = 0; i < 2; i++) pthread_join(rp[i], NULL);
}

int main(void) {
  const char* e = getenv("DEVRT_STRESS_ITERS");
  if (e && atoi(e) > 0) iters = atoi(e);
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.stream_pool_size = 256;
  rt = t_runtime_cfg(&cfg);
  for (int i = 0; i < STREAMS; i++)
    REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &streams[i]));
  REQUIRE_OK(devrt_async_resource_create(rt, &res));
  memory_round(0);
  memory_round(DEVRT_REAP_WAIT);
  retire_round();
  k_load(rt, &K);
  events_round();
  CHECK(atomic_load(&errors) == 0);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < THREADS; i++)
      CHECK_OK(devrt_resource_deallocate(res, kept_p[r][i], kept_n[r][i], streams[i]));
  uint64_t n = 0;
  CHECK_OK(devrt_resource_reap(res, DEVRT_REAP_WAIT, &n));
  CHECK(n == atomic_load(&kept) && atomic_load(&res->account->held) == 0);
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  for (int i = 0; i < STREAMS; i++) CHECK_OK(devrt_stream_release(rt, streams[i]));
  CHECK_OK(devrt_resource_release(res));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
