/* test_free_stress.c: frees racing recorded uses. Threads share a few slots of blocks; each slot's
 * block is written once by a slow fill with a value of its own, then read by slow copies from
 * any thread on any of its streams (recorded launches declaring READ, WRITE or READ_WRITE, and
 * foreign memcpys between prepare and finish calls in every order, some finishing with no work
 * or on another stream), while other threads free the block and put a new one in its slot. A
 * free that ran before a recorded use completed shows as a copy that read another block's value
 * (its memory handed out again), or on the host backend as AddressSanitizer's report. Cache off,
 * then on. DEVRT_STRESS_ITERS (rounds per thread and phase), DEVRT_STRESS_SEED (else time). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include "launch_util.h"

enum { THREADS = 6, SLOTS = 6, NW = 256 };

typedef struct slot {
  pthread_rwlock_t lk; /* write: replacing the block; read: a foreign use, prepare to finish */
  devrt_block b;       /* guarded by lk */
  uint32_t value;      /* guarded by lk: what b's fill writes */
} slot;

static devrt_runtime* rt;
static kernels K;
static slot slots[SLOTS];
static int iters = 2000;
static unsigned seed0;

typedef struct worker {
  int id;
  unsigned rng;
  devrt_stream s[3];
  devrt_block scratch;
  uint32_t made;
  uint64_t reads, checked, corrupt, refused, errors;
} worker;

static unsigned rnd(worker* w, unsigned n) { return (unsigned)rand_r(&w->rng) % n; }
static devrt_stream any_stream(worker* w) { return w->s[rnd(w, 3)]; }
static uint64_t delay(worker* w) { return (uint64_t)rnd(w, 4) * 250000; /* 0 to 0.75 ms */ }

static void fail(worker* w, const char* what, devrt_status st) {
  if (!w->errors++)
    fprintf(stderr, "thread %d: %s: %s: %s\n", w->id, what, devrt_status_name(st),
            devrt_last_error());
}

/* A racing free makes a use STALE_BLOCK (freed first) or INVALID_STATE (being freed): refused
 * with nothing recorded, as the headers say. */
static bool refused(devrt_status st) {
  return st == DEVRT_ERR_STALE_BLOCK || st == DEVRT_ERR_INVALID_STATE;
}

/* Frees slot i's block and puts a new one there, written by a slow fill with a value no other block
 * has had. */
static void replace(worker* w, int i) {
  slot* sl = &slots[i];
  pthread_rwlock_wrlock(&sl->lk);
  devrt_block old = sl->b;
  devrt_status st = old ? devrt_block_free(rt, old) : DEVRT_OK;
  if (st == DEVRT_OK) {
    devrt_block b = 0;
    uint32_t v = (uint32_t)w->id << 24 | (++w->made & 0xffffff);
    st = devrt_block_alloc(rt, NW * 4, any_stream(w), "shared", &b);
    if (st == DEVRT_OK &&
        (st = k_fill(rt, &K, any_stream(w), b, v, NW, delay(w), true)) != DEVRT_OK) {
      devrt_block_free(rt, b);
      b = 0;
    }
    sl->value = v, sl->b = b;
    if (st != DEVRT_OK) fail(w, "alloc and fill", st);
  } else { /* a free of a live block is never refused because of another thread's timing */
    fail(w, "devrt_block_free", st);
  }
  pthread_rwlock_unlock(&sl->lk);
}

/* The scratch block (read back on s, in stream order) holds v in every word. */
static void check(worker* w, devrt_stream s, uint32_t v) {
  uint32_t got[NW];
  devrt_status st = b_read(rt, s, w->scratch, got, sizeof got);
  if (st != DEVRT_OK) return fail(w, "read back", st);
  uint64_t wrong = 0;
  for (int k = 0; k < NW; k++) wrong += got[k] != v;
  w->checked++;
  if (wrong && !w->corrupt++)
    fprintf(stderr,
            "thread %d: read %#x where the block holds %#x (%llu words): freed under its use\n",
            w->id, got[0], v, (unsigned long long)wrong);
}

/* A recorded slow copy of the slot's block into scratch, declared READ, WRITE or READ_WRITE. */
static void tracked_read(worker* w, int i) {
  pthread_rwlock_rdlock(&slots[i].lk); /* only to read the pair: the launch races the free */
  devrt_block b = slots[i].b;
  uint32_t v = slots[i].value;
  pthread_rwlock_unlock(&slots[i].lk);
  if (!b) return;
  devrt_stream s = any_stream(w);
  void *dst = bptr(rt, w->scratch), *src = bptr(rt, b);
  uint64_t n = NW, ns = delay(w);
  void* args[] = {&dst, &src, &n, &ns};
  devrt_block_use u[] = {{b, (devrt_access)(1 + rnd(w, 3))}, {w->scratch, DEVRT_ACCESS_WRITE}};
  devrt_status st = src ? DEVRT_OK : DEVRT_ERR_STALE_BLOCK;
  /* the same launch again at once takes the repeat path, which locks no block: it races the
   * free too */
  for (unsigned k = 1 + rnd(w, 3); k && st == DEVRT_OK; k--)
    st = k_run(rt, s, K.slow_copy, NW, args, u, 2);
  w->reads++;
  if (refused(st))
    w->refused++;
  else if (st != DEVRT_OK)
    fail(w, "devrt_launch", st);
  else
    check(w, s, v); /* recorded before any free of b, which must wait for it */
}

/* Foreign uses of the slot's block between prepare and finish, in one of several orders; the
 * slot is held, so the block is not freed before the finish. Modes 0-2 copy it (a memcpy after
 * a prepare that orders it after the fill), 3-5 record uses with no work, on streams that did
 * not wait: what they replace must stay tracked. */
static void foreign(worker* w, int i) {
  slot* sl = &slots[i];
  pthread_rwlock_rdlock(&sl->lk);
  devrt_block b = sl->b;
  uint32_t v = sl->value;
  devrt_stream s = any_stream(w), t = any_stream(w);
  unsigned mode = rnd(w, 6);
  devrt_status st = b ? DEVRT_OK : DEVRT_ERR_STALE_BLOCK;
  if (st == DEVRT_OK && mode <= 2) {
    devrt_access prep = mode == 2 ? DEVRT_ACCESS_WRITE : DEVRT_ACCESS_READ;
    devrt_access fin =
        mode == 0 ? DEVRT_ACCESS_READ : DEVRT_ACCESS_WRITE; /* mode 1: WRITE after a READ prepare */
    if ((st = devrt_prepare_block_use(rt, b, s, prep)) == DEVRT_OK &&
        (st = devrt_prepare_block_use(rt, w->scratch, s, DEVRT_ACCESS_WRITE)) == DEVRT_OK &&
        (st = devrt_memcpy_async(rt, bptr(rt, w->scratch), bptr(rt, b), NW * 4, s)) == DEVRT_OK &&
        (st = devrt_finish_block_use(rt, w->scratch, s, DEVRT_ACCESS_WRITE)) == DEVRT_OK)
      st = devrt_finish_block_use(rt, b, s, fin);
  } else if (st == DEVRT_OK) {
    if (mode == 4)
      st = devrt_prepare_block_use(rt, b, t, DEVRT_ACCESS_WRITE); /* then finished on s */
    if (st == DEVRT_OK)
      st = devrt_finish_block_use(rt, b, s, mode == 5 ? DEVRT_ACCESS_READ : DEVRT_ACCESS_WRITE);
  }
  pthread_rwlock_unlock(&sl->lk);
  if (st == DEVRT_ERR_STALE_BLOCK && !b) return;
  if (st != DEVRT_OK) return fail(w, "prepare / memcpy / finish", st);
  if (mode <= 2) check(w, s, v);
}

static void* run(void* arg) {
  worker* w = arg;
  for (int k = 0; k < 3; k++)
    if (devrt_stream_acquire(rt, DEVRT_ACQUIRE_SHARE, &w->s[k]) != DEVRT_OK) {
      fail(w, "devrt_stream_acquire", DEVRT_ERR_OUT_OF_RESOURCES);
      return NULL;
    }
  if (devrt_block_alloc(rt, NW * 4, w->s[0], "scratch", &w->scratch) != DEVRT_OK) {
    fail(w, "devrt_block_alloc (scratch)", DEVRT_ERR_OUT_OF_RESOURCES);
    return NULL;
  }
  for (int it = 0; it < iters; it++) {
    unsigned op = rnd(w, 100);
    int i = (int)rnd(w, SLOTS);
    if (op < 20)
      replace(w, i);
    else if (op < 60)
      tracked_read(w, i);
    else if (op < 95)
      foreign(w, i);
    else if (devrt_reap_pending(rt, 0, NULL) != DEVRT_OK)
      fail(w, "devrt_reap_pending", DEVRT_ERR_BACKEND_ERROR);
  }
  for (int k = 0; k < 3; k++) devrt_stream_synchronize(rt, w->s[k]);
  if (devrt_block_free(rt, w->scratch) != DEVRT_OK)
    fail(w, "devrt_block_free (scratch)", DEVRT_ERR_INVALID_STATE);
  for (int k = 0; k < 3; k++) devrt_stream_release(rt, w->s[k]);
  return NULL;
}

static void phase(bool cache) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.cache = cache;
  rt = t_runtime_cfg(&cfg);
  k_load(rt, &K);
  for (int i = 0; i < SLOTS; i++) {
    pthread_rwlock_init(&slots[i].lk, NULL);
    slots[i].b = 0;
  }
  worker w[THREADS];
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){.id = i + 1, .rng = seed0 * 7919u + (unsigned)i * 104729u + cache};
    if (pthread_create(&th[i], NULL, run, &w[i]) != 0) {
      CHECK(!"pthread_create");
      return;
    }
  }
  worker sum = {0};
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    sum.reads += w[i].reads, sum.checked += w[i].checked, sum.corrupt += w[i].corrupt;
    sum.refused += w[i].refused, sum.errors += w[i].errors, sum.made += w[i].made;
  }
  for (int i = 0; i < SLOTS; i++) {
    devrt_block b = slots[i].b;
    if (b) CHECK_OK(devrt_block_free(rt, b));
    pthread_rwlock_destroy(&slots[i].lk);
  }
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  devrt_block_stats st = bstats(rt);
  printf(
      "cache %s: %d threads x %d rounds: %u blocks made, %llu recorded reads, %llu copies checked, "
      "%llu corrupt, %llu refused by a racing free, %llu errors, %llu launches repeated\n",
      cache ? "on" : "off", THREADS, iters, sum.made, (unsigned long long)sum.reads,
      (unsigned long long)sum.checked, (unsigned long long)sum.corrupt,
      (unsigned long long)sum.refused, (unsigned long long)sum.errors,
      (unsigned long long)repeated(rt));
  CHECK(sum.corrupt == 0);
  CHECK(sum.errors == 0);
  CHECK(sum.checked > 0);
  CHECK(st.blocks_live == 0);
  CHECK_OK(devrt_module_unload(rt, K.mod));
  CHECK_OK(devrt_runtime_destroy(rt));
}

/* ---- a free racing the issue of a parked launch over its block ---- */

typedef struct issuer {
  devrt_semaphore* sem;
  _Atomic uint64_t go; /* the value to signal next; the owner sets it, the issuer signals it */
  int rounds;
  devrt_status st;
} issuer;

static void* signal_each(void* arg) {
  issuer* is = arg;
  for (uint64_t v = 1; v <= (uint64_t)is->rounds && is->st == DEVRT_OK; v++) {
    while (atomic_load(&is->go) < v) sched_yield();
    is->st = devrt_semaphore_signal(is->sem, v); /* issues the parked launch on this thread */
  }
  return NULL;
}

/* The owner submits a launch over its block parked behind a semaphore, another thread signals the
 * semaphore (which issues the launch on that thread), and the owner frees the block at once: the
 * free runs while the launch is being issued as often as not. Every free of the live block must
 * return OK, whatever the timing: the free waits for the issue in flight and is ordered after it
 * (or, when it comes first, the launch is refused as stale). */
static void issue_race(void) {
  rt = t_runtime();
  k_load(rt, &K);
  devrt_stream s = 0;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_WAIT, &s));
  issuer is = {.rounds = iters * 4};
  REQUIRE_OK(devrt_semaphore_create(rt, 0, &is.sem));
  pthread_t th;
  REQUIRE_OK(pthread_create(&th, NULL, signal_each, &is) ? DEVRT_ERR_OUT_OF_RESOURCES : DEVRT_OK);
  unsigned refused = 0, errors = 0;
  for (uint64_t v = 1; v <= (uint64_t)is.rounds; v++) {
    devrt_block b = 0;
    REQUIRE_OK(devrt_block_alloc(rt, NW * 4, s, "parked", &b));
    void* p = bptr(rt, b);
    uint32_t val = (uint32_t)v;
    uint64_t n = NW, ns = 0;
    devrt_block_use u[] = {{b, DEVRT_ACCESS_WRITE}};
    devrt_semaphore_value w = {is.sem, v};
    devrt_submission sub = {.stream = s,
                            .waits = &w,
                            .nwaits = 1,
                            .kind = DEVRT_WORK_LAUNCH,
                            .launch = {.kernel = K.slow_fill,
                                       .grid = {1},
                                       .block = {256},
                                       .args = (void*[]){&p, &val, &n, &ns},
                                       .uses = u,
                                       .nuses = 1}};
    REQUIRE_OK(devrt_queue_submit(rt, &sub));
    atomic_store(&is.go, v);
    for (unsigned k = (unsigned)(v % 8); k; k--) sched_yield(); /* vary where the free lands */
    devrt_status st = devrt_block_free(rt, b);
    if (st == DEVRT_ERR_INVALID_STATE && !refused++)
      fprintf(stderr, "free refused for timing: %s\n", devrt_last_error());
    else if (st != DEVRT_OK && st != DEVRT_ERR_INVALID_STATE && !errors++)
      fprintf(stderr, "devrt_block_free: %s: %s\n", devrt_status_name(st), devrt_last_error());
  }
  pthread_join(th, NULL);
  CHECK_OK(is.st);
  CHECK_OK(devrt_semaphore_wait(is.sem, (uint64_t)is.rounds, 20000 * MS));
  CHECK_OK(devrt_stream_synchronize(rt, s));
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  printf(
      "issue race: %d frees of a block whose parked launch another thread issues: %u refused, "
      "%u failed\n",
      is.rounds, refused, errors);
  CHECK(refused == 0);
  CHECK(errors == 0);
  CHECK(bstats(rt).blocks_live == 0);
  CHECK_OK(devrt_semaphore_destroy(is.sem));
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_module_unload(rt, K.mod));
  CHECK_OK(devrt_runtime_destroy(rt));
}

int main(void) {
  const char* env = getenv("DEVRT_STRESS_ITERS");
  if (env && (iters = atoi(env)) <= 0) {
    fprintf(stderr, "DEVRT_STRESS_ITERS=%s: want a positive count\n", env);
    return 1;
  }
  env = getenv("DEVRT_STRESS_SEED");
  seed0 = env ? (unsigned)strtoul(env, NULL, 10) : (unsigned)time(NULL);
  printf("seed %u (DEVRT_STRESS_SEED=%u repeats the choices; the interleaving is the machine's)\n",
         seed0, seed0);
  phase(false);
  phase(true);
  issue_race();
  return t_done();
}
