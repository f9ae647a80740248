/* test_primitives.c: devrt's own concurrency primitives under many threads (run under TSan in
 * CI): the spin lock, the thread-shard assignment, the lock-free live table, and the pooled
 * events' return list (events dropped by any thread come back to their slot's pool). */
#include <pthread.h>
#include "block/block.h"
#include "memory/account.h"
#include "memory/live_table.h"
#include "test.h"

enum { THREADS = 8 };

/* ---- spin lock: increments under it add up exactly ---- */
static dv_spin spin;
static uint64_t counted; /* guarded by spin */
enum { INCREMENTS = 20000 };

static void* spin_run(void* arg) {
  (void)arg;
  for (int i = 0; i < INCREMENTS; i++) {
    dv_spin_lock(&spin);
    counted++;
    dv_spin_unlock(&spin);
  }
  return NULL;
}

/* ---- shards: a thread's shard is stable and in range; live threads own distinct ones ---- */
static pthread_barrier_t all_assigned;
typedef struct shard_probe {
  unsigned first, again;
} shard_probe;

static void* shard_run(void* arg) {
  shard_probe* p = arg;
  p->first = dv_shard();
  pthread_barrier_wait(&all_assigned); /* every thread holds its shard at once */
  p->again = dv_shard();
  return NULL;
}

/* ---- live table: each thread tracks, takes and retakes its own addresses ---- */
static dv_live_table* live;
enum { PER_THREAD = 2000 };
typedef struct live_probe {
  int id;
  unsigned tracked, taken, refused;
} live_probe;

static void* addr(int id, int i) {
  return (void*)(uintptr_t)(((uint64_t)1 << 36) + ((uint64_t)id * PER_THREAD + (uint64_t)i) * 512);
}

static void* live_run(void* arg) {
  live_probe* p = arg;
  for (int i = 0; i < PER_THREAD; i++)
    p->tracked += dv_live_track(live, "test", addr(p->id, i), 300 + (size_t)i, "probe") == DEVRT_OK;
  for (int i = 0; i < PER_THREAD; i++) {
    dv_live_entry e;
    p->refused += dv_live_take(live, "test", addr(p->id, i), 301 + (size_t)i, &e) !=
                  DEVRT_OK; /* wrong size */
    if (dv_live_take(live, "test", addr(p->id, i), 300 + (size_t)i, &e) == DEVRT_OK && e.tag &&
        !strcmp(e.tag, "probe"))
      p->taken++;
    p->refused += dv_live_take(live, "test", addr(p->id, i), 300 + (size_t)i, &e) !=
                  DEVRT_OK; /* taken already */
  }
  return NULL;
}

/* ---- return list: events recorded on one slot, dropped by many threads, come back ---- */
static devrt_runtime* rt;
static unsigned slot;
static dv_stream* stream;
static dv_pev* shared_ev[THREADS];
enum { RECORDS = 500 };

static void* return_run(void* arg) {
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < RECORDS; i++) {
    dv_pev* p = NULL;
    if (dv_pev_record(rt, slot, stream, &p) != DEVRT_OK) return (void*)1;
    dv_pev_ref(p); /* another thread drops this one */
    dv_pev* was = __atomic_exchange_n(&shared_ev[(id + 1) % THREADS], p, __ATOMIC_ACQ_REL);
    if (was) dv_pev_unref(rt, was);
    dv_pev_unref(rt, p);
  }
  return NULL;
}

int main(void) {
  pthread_t t[THREADS + 72];

  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, spin_run, NULL);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  CHECK(counted == (uint64_t)THREADS * INCREMENTS);

  enum { NSHARD_THREADS = 72 }; /* more than the owned shards: the rest share */
  shard_probe sp[NSHARD_THREADS];
  pthread_barrier_init(&all_assigned, NULL, NSHARD_THREADS);
  for (int i = 0; i < NSHARD_THREADS; i++) pthread_create(&t[i], NULL, shard_run, &sp[i]);
  for (int i = 0; i < NSHARD_THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&all_assigned);
  unsigned owned_seen = 0;
  uint64_t owned_bits = 0;
  for (int i = 0; i < NSHARD_THREADS; i++) {
    CHECK(sp[i].first < DV_SHARDS && sp[i].again == sp[i].first && sp[i].first < dv_shard_end());
    if (sp[i].first < DV_OWNED) {
      CHECK(!(owned_bits >> sp[i].first & 1)); /* an owned shard belongs to one live thread */
      owned_bits |= 1ull << sp[i].first, owned_seen++;
    }
  }
  CHECK(owned_seen > 0);

  REQUIRE_OK(dv_live_create("test", &live));
  live_probe lp[THREADS];
  for (int i = 0; i < THREADS; i++)
    lp[i] = (live_probe){.id = i}, pthread_create(&t[i], NULL, live_run, &lp[i]);
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    CHECK(lp[i].tracked == PER_THREAD && lp[i].taken == PER_THREAD &&
          lp[i].refused == 2 * PER_THREAD);
  }
  dv_live_destroy(live);

  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.backend = DEVRT_BACKEND_HOST;
  rt = t_runtime_cfg(&cfg);
  devrt_stream s = 0;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  REQUIRE_OK(dv_stream_get(rt, s, &stream, "test"));
  slot = DV_SID_SLOT(s);
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, return_run, (void*)(intptr_t)i);
  int failed = 0;
  for (int i = 0; i < THREADS; i++) {
    void* rc = NULL;
    pthread_join(t[i], &rc);
    failed += rc != NULL;
  }
  for (int i = 0; i < THREADS; i++)
    if (shared_ev[i]) dv_pev_unref(rt, shared_ev[i]);
  CHECK(failed == 0);
  uint64_t created = atomic_load(&rt->evslots[slot].created);
  printf("%d threads x %d records on one slot: %llu events created\n", THREADS, RECORDS,
         (unsigned long long)created);
  CHECK(created > 0 &&
        created <= 4 * THREADS); /* events dropped anywhere come back and are reused */
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
