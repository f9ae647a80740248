/* test_block_stress.c: blocks and recorded launches under 8 threads x DEVRT_STRESS_ITERS (1024)
 * rounds each: alloc -> fill x on A -> slow copy x to y on B -> overwrite x on A -> checksum y on
 * C -> free (half freed while that work may still run), every result checked; then 16 threads x a
 * quarter of the rounds, so the sanitizers see the tracking path under 16 threads; then 8 threads
 * sharing one set of blocks that groups and dissolves under them; then refusals whose messages race
 * the reuse of their block's slot (ThreadSanitizer's case). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include "launch_util.h"

enum { MAX_THREADS = 16, N = 256 };

static devrt_runtime* rt;
static kernels K;
static int iters = 1024;

typedef struct worker {
  int id;
  uint64_t corrupt, errors, checked;
} worker;

static void fail(worker* w, const char* what) {
  if (!w->errors++) fprintf(stderr, "thread %d: %s: %s\n", w->id, what, devrt_last_error());
}

static void drop(worker* w, devrt_block* b) {
  if (*b && devrt_block_free(rt, *b)) fail(w, "devrt_block_free");
  *b = 0;
}

static void round_trip(worker* w, const devrt_stream* s, int ns, int it) {
  devrt_stream a = s[it % ns], b = s[(it + 1) % ns], c = s[(it + 2) % ns];
  uint32_t v = ((uint32_t)w->id << 20) + (uint32_t)it + 1;
  devrt_block x = 0, y = 0, r = 0;
  unsigned long long sum = 0;
  if (devrt_block_alloc(rt, N * 4, a, "stress x", &x) ||
      devrt_block_alloc(rt, N * 4, b, "stress y", &y) ||
      devrt_block_alloc(rt, sizeof sum, c, "stress sum", &r)) {
    fail(w, "devrt_block_alloc");
  } else if (k_fill(rt, &K, a, x, v, N, 0, true) || k_copy(rt, &K, b, y, x, N, 20000, true) ||
             k_fill(rt, &K, a, x, ~v, N, 0, true) || k_checksum(rt, &K, c, y, N, r)) {
    fail(w, "devrt_launch");
  } else {
    bool early = it & 1; /* freed while the copy and the checksum may still be queued */
    if (early) drop(w, &x), drop(w, &y);
    if (b_read(rt, c, r, &sum, sizeof sum))
      fail(w, "read back");
    else
      w->corrupt += sum != (unsigned long long)v * N;
    if (!early && it % 8 == 0)
      w->corrupt += (b_wrong(rt, a, y, N, v) != 0) + (b_wrong(rt, c, x, N, ~v) != 0);
    w->checked++;
  }
  drop(w, &x), drop(w, &y), drop(w, &r);
  if (it % 64 == 0 && devrt_reap_pending(rt, 0, NULL)) fail(w, "devrt_reap_pending");
}

static void* run(void* arg) {
  worker* w = arg;
  devrt_stream s[3];
  int ns = 2 + (w->id & 1); /* even threads: C is A */
  for (int i = 0; i < ns; i++)
    if (devrt_stream_acquire(rt, DEVRT_ACQUIRE_SHARE, &s[i])) {
      fail(w, "devrt_stream_acquire");
      return NULL;
    }
  for (int it = 0; it < iters; it++) round_trip(w, s, ns, it);
  for (int i = 0; i < ns; i++)
    if (devrt_stream_release(rt, s[i])) fail(w, "devrt_stream_release");
  return NULL;
}

/* nthreads workers x iters rounds, every result checked; the stack and counters end where they
 * began. */
static void phase(int nthreads) {
  devrt_resource* top = NULL;
  devrt_resource_figures f0, f;
  REQUIRE_OK(devrt_runtime_resource(rt, &top));
  REQUIRE_OK(devrt_resource_query(top, &f0));
  devrt_block_stats st0 = bstats(rt);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);

  worker w[MAX_THREADS];
  pthread_t t[MAX_THREADS];
  for (int i = 0; i < nthreads; i++) {
    w[i] = (worker){.id = i};
    pthread_create(&t[i], NULL, run, &w[i]);
  }
  uint64_t corrupt = 0, errors = 0, checked = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(t[i], NULL);
    corrupt += w[i].corrupt, errors += w[i].errors, checked += w[i].checked;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);

  uint64_t bytes = 0;
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, &bytes));
  CHECK_OK(devrt_resource_query(top, &f));
  devrt_block_stats st = bstats(rt);
  uint64_t rounds = (uint64_t)nthreads * (uint64_t)iters;
  printf(
      "%d threads x %d rounds in %.2f s: %llu checked, %llu corrupted, %llu errors; %llu launches, "
      "%llu waits inserted, %llu coalesced, %llu deferred frees\n",
      nthreads, iters, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
      (unsigned long long)checked, (unsigned long long)corrupt, (unsigned long long)errors,
      (unsigned long long)(st.launches - st0.launches),
      (unsigned long long)(st.waits_inserted - st0.waits_inserted),
      (unsigned long long)(st.waits_coalesced - st0.waits_coalesced),
      (unsigned long long)(st.deferred_frees - st0.deferred_frees));
  CHECK(corrupt == 0 && errors == 0 && checked == rounds);
  CHECK(st.blocks_allocated - st0.blocks_allocated == 3 * rounds &&
        st.blocks_live == st0.blocks_live);
  CHECK(st.launches - st0.launches == 5 * rounds && st.refused_launches == st0.refused_launches);
  CHECK(st.stale_refusals == st0.stale_refusals);
  CHECK(f.live_bytes == f0.live_bytes && f.pending_bytes == 0);
}

/* Threads sharing four blocks, each on its own stream: writes and reads of the whole set (through
 * its group), in either order, reads of a subset and info on a member (which dissolve it), all at
 * once. Every call succeeds, and afterwards no pin is left: every block frees. */
enum { GN = 4 };
static devrt_block shared[GN];
static void* group_run(void* arg) {
  worker* w = arg;
  devrt_stream s = 0;
  devrt_block out = 0;
  if (devrt_stream_acquire(rt, DEVRT_ACQUIRE_SHARE, &s) ||
      devrt_block_alloc(rt, N * 4, s, "stress out", &out)) {
    fail(w, "setup");
    return NULL;
  }
  uint64_t n = N, delay = 0;
  uint32_t v = (uint32_t)w->id;
  void *x0 = bptr(rt, shared[0]), *o = bptr(rt, out);
  void *fill_args[] = {&x0, &v, &n, &delay}, *copy_args[] = {&o, &x0, &n, &delay};
  uint32_t rng = (uint32_t)w->id * 2654435761u + 1;
  for (int it = 0; it < iters; it++) {
    rng = rng * 1664525u + 1013904223u;
    unsigned op = rng >> 29, nu = op == 6 ? 2 : GN;
    bool rev = rng & 0x100, write = op < 3;
    devrt_block_use u[GN + 1];
    for (unsigned i = 0; i < nu; i++)
      u[i] = (devrt_block_use){shared[rev ? nu - 1 - i : i],
                               write ? DEVRT_ACCESS_WRITE : DEVRT_ACCESS_READ};
    devrt_block_info info;
    if (op == 7) {
      if (devrt_block_info_get(rt, shared[rng % GN], &info)) fail(w, "devrt_block_info_get");
    } else if (k_run(rt, s, write ? K.fill : K.copy, n, write ? fill_args : copy_args, u, nu)) {
      fail(w, "devrt_launch");
    }
    w->checked++;
  }
  if (devrt_stream_synchronize(rt, s)) fail(w, "devrt_stream_synchronize");
  drop(w, &out);
  if (devrt_stream_release(rt, s)) fail(w, "devrt_stream_release");
  return NULL;
}

static void phase_groups(int nthreads) {
  devrt_stream s = 0;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  for (int i = 0; i < GN; i++)
    REQUIRE_OK(devrt_block_alloc(rt, N * 4, s, "stress shared", &shared[i]));
  /* The threads start on a live group: a first use of the set, a second that groups it, a third
   * through the group (the order alternates, so no launch takes the repeat path). How often the
   * threads form it again among themselves is down to timing. */
  uint64_t seed = grouped(rt);
  void* x0 = bptr(rt, shared[0]);
  uint32_t v = 0;
  uint64_t n = N;
  void* fill_args[] = {&x0, &v, &n, &(uint64_t){0}};
  devrt_block_use all[2][GN];
  for (int i = 0; i < GN; i++)
    all[0][i] = (devrt_block_use){shared[i], DEVRT_ACCESS_WRITE}, all[1][GN - 1 - i] = all[0][i];
  for (int i = 0; i < 3; i++) CHECK_OK(k_run(rt, s, K.fill, n, fill_args, all[i & 1], GN));
  uint64_t g0 = grouped(rt), r0 = repeated(rt), live0 = bstats(rt).blocks_live;
  CHECK(g0 - seed == 1);
  worker w[MAX_THREADS];
  pthread_t t[MAX_THREADS];
  for (int i = 0; i < nthreads; i++) {
    w[i] = (worker){.id = i};
    pthread_create(&t[i], NULL, group_run, &w[i]);
  }
  uint64_t errors = 0, checked = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(t[i], NULL);
    errors += w[i].errors, checked += w[i].checked;
  }
  printf(
      "%d threads x %d calls on one shared set: %llu errors; %llu launches grouped, %llu "
      "repeated\n",
      nthreads, iters, (unsigned long long)errors, (unsigned long long)(grouped(rt) - g0),
      (unsigned long long)(repeated(rt) - r0));
  CHECK(errors == 0 && checked == (uint64_t)nthreads * (uint64_t)iters);
  for (int i = 0; i < GN; i++) CHECK_OK(devrt_block_free(rt, shared[i])); /* no pin left behind */
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  CHECK(bstats(rt).blocks_live == live0 - GN);
  CHECK_OK(devrt_stream_release(rt, s));
}

/* ---- refusal messages racing a slot's reuse ---- */

static _Atomic devrt_block current; /* the block the owner allocated last (0 between) */
static _Atomic bool owner_done;

/* Allocates and frees one block after another: each new block takes the slot just freed, so its
 * record (tag included) is written again while the other thread's refusals describe the last. */
static void* owner_run(void* arg) {
  worker* w = arg;
  devrt_stream s = 0;
  if (devrt_stream_acquire(rt, DEVRT_ACQUIRE_SHARE, &s)) return fail(w, "acquire"), NULL;
  for (int it = 0; it < iters * 8; it++) {
    devrt_block b = 0;
    if (devrt_block_alloc(rt, N * 4, s, it & 1 ? "odd" : "even", &b)) {
      fail(w, "devrt_block_alloc");
      break;
    }
    atomic_store(&current, b);
    for (int k = it % 4; k; k--) sched_yield(); /* let the other thread find it live */
    devrt_status st = devrt_block_free(rt, b);  /* the other thread may have freed it first */
    if (st != DEVRT_OK && st != DEVRT_ERR_STALE_BLOCK && st != DEVRT_ERR_INVALID_STATE)
      fail(w, "devrt_block_free");
  }
  atomic_store(&owner_done, true);
  if (devrt_stream_release(rt, s)) fail(w, "devrt_stream_release");
  return NULL;
}

/* Finishes uses of, and frees, whatever block the owner holds: refused (STALE_BLOCK or
 * INVALID_STATE) with a message naming the block's tag, read while the owner reuses the slot. */
static void* racer_run(void* arg) {
  worker* w = arg;
  devrt_stream s = 0;
  if (devrt_stream_acquire(rt, DEVRT_ACQUIRE_SHARE, &s)) return fail(w, "acquire"), NULL;
  for (unsigned k = 0; !atomic_load(&owner_done); k++) {
    devrt_block b = atomic_load(&current);
    devrt_status st =
        b ? (k & 1 ? devrt_block_free(rt, b) : devrt_finish_block_use(rt, b, s, DEVRT_ACCESS_READ))
          : DEVRT_OK;
    if (st != DEVRT_OK && st != DEVRT_ERR_STALE_BLOCK && st != DEVRT_ERR_INVALID_STATE)
      fail(w, k & 1 ? "devrt_block_free" : "devrt_finish_block_use");
    else if (st != DEVRT_OK)
      w->checked++;
  }
  if (devrt_stream_synchronize(rt, s) || devrt_stream_release(rt, s)) fail(w, "release");
  return NULL;
}

static void phase_messages(void) {
  worker w[2] = {{.id = 0}, {.id = 1}};
  pthread_t t[2];
  uint64_t live0 = bstats(rt).blocks_live;
  pthread_create(&t[0], NULL, owner_run, &w[0]);
  pthread_create(&t[1], NULL, racer_run, &w[1]);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("refusals racing a slot's reuse: %llu refused, %llu errors\n",
         (unsigned long long)w[1].checked, (unsigned long long)(w[0].errors + w[1].errors));
  CHECK(w[0].errors == 0 && w[1].errors == 0);
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  CHECK(bstats(rt).blocks_live == live0);
}

int main(void) {
  const char* env = getenv("DEVRT_STRESS_ITERS");
  if (env && (iters = atoi(env)) <= 0) {
    fprintf(stderr, "DEVRT_STRESS_ITERS=%s: want a positive count\n", env);
    return 1;
  }
  rt = t_runtime();
  k_load(rt, &K);
  phase(8); /* the 8 x 1024 */
  iters = iters / 4 ? iters / 4 : 1;
  phase(MAX_THREADS); /* and 16 threads, for the sanitizers */
  phase_groups(8);
  phase_messages();
  CHECK_OK(devrt_module_unload(rt, K.mod));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
