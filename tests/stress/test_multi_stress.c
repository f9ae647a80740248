/* test_multi_stress.c: threads running cross-device producer/consumer rounds on two devices with
 * peer access: each round a producer on one device writes a block of its own, a consumer on the
 * other copies it into a block of its own (launches on both, or queued submissions ordered by a
 * semaphore of the producer's runtime), the producer overwrites its block at once (it must wait
 * for the consumer's read) and frees it (deferred behind that read), and the consumer checks its
 * copy. Every block a thread frees is still being read on the other device at times. Rounds:
 * DEVRT_MULTI_ROUNDS (default 256 on host, 1024 on cuda); threads: 8. A wrong copy is a
 * corruption; 0 are allowed. Host backend by default (TSan in CI); DEVRT_BACKEND=cuda runs it on
 * two GPUs (77 without them, unless DEVRT_REQUIRE_GPUS=2). */
#include <pthread.h>
#include <stdatomic.h>
#include "multi_util.h"

enum { THREADS = 8, N = 2048 };

static mdev D[2];
static int rounds;
static _Atomic uint64_t corrupt, failed;

typedef struct targ {
  int t;
  devrt_stream s[2][2];     /* per device: the producer's and the consumer's stream */
  devrt_semaphore* sem[2];  /* per device: the producer's (written) and consumer's (read) signals */
  devrt_semaphore* over[2]; /* per device: the producer's overwrites done (its frees wait) */
} targ;

static devrt_status copy_desc(mdev* C, devrt_runtime* pr, devrt_block x, devrt_block y,
                              uint64_t slow, void** args, void** ptrs, uint64_t* nd,
                              devrt_block_use* u, devrt_launch_desc* d) {
  ptrs[0] = bptr(C->rt, y), ptrs[1] = bptr(pr, x);
  args[0] = &ptrs[0], args[1] = &ptrs[1], args[2] = &nd[0], args[3] = &nd[1];
  u[0] = (devrt_block_use){x, DEVRT_ACCESS_READ}, u[1] = (devrt_block_use){y, DEVRT_ACCESS_WRITE};
  *d = (devrt_launch_desc){.kernel = slow ? C->k.slow_copy : C->k.copy,
                           .grid = {N / 256},
                           .block = {256},
                           .args = args,
                           .uses = u,
                           .nuses = 2};
  return DEVRT_OK;
}

/* One queued round: the consumer's copy waits for the producer's signal (submitted after it, or
 * before), then the producer's overwrite waits for the consumer's, and the free for the
 * overwrite. Submissions are ordered by their semaphores alone: a free waiting for the consumer
 * too could be issued before the overwrite (which then finds its block freed), and an overwrite
 * could signal its timeline past the previous round's, so each waits for the previous one's. */
static devrt_status queued_round(targ* a, int r, int pd, devrt_block x, devrt_block y, uint32_t v,
                                 uint64_t slow) {
  int cd = pd ^ 1;
  mdev *P = &D[pd], *C = &D[cd];
  uint64_t val = (uint64_t)r + 1, nd[2] = {N, slow};
  void *args[4], *ptrs[2];
  devrt_block_use u[2];
  devrt_semaphore_value made = {a->sem[pd], val}, read = {a->sem[cd], val},
                        over_done = {a->over[pd], val};
  /* a thread's queued rounds are every other round, all on one producer device */
  devrt_semaphore_value over_waits[2] = {read, {a->over[pd], val - 2}};
  devrt_submission b = {.stream = a->s[pd][0], .signals = &made, .nsignals = 1};
  devrt_submission c = {.stream = a->s[cd][1],
                        .waits = &made,
                        .nwaits = 1,
                        .signals = &read,
                        .nsignals = 1,
                        .kind = DEVRT_WORK_LAUNCH};
  copy_desc(C, P->rt, x, y, slow, args, ptrs, nd, u, &c.launch);
  uint32_t nv = ~v;
  uint64_t n = N, z = 0;
  void* xp = bptr(P->rt, x);
  void* fargs[] = {&xp, &nv, &n, &z};
  devrt_block_use fu = {x, DEVRT_ACCESS_WRITE};
  devrt_submission over = {.stream = a->s[pd][0],
                           .waits = over_waits,
                           .nwaits = 2,
                           .signals = &over_done,
                           .nsignals = 1,
                           .kind = DEVRT_WORK_LAUNCH,
                           .launch = {.kernel = P->k.fill,
                                      .grid = {N / 256},
                                      .block = {256},
                                      .args = fargs,
                                      .uses = &fu,
                                      .nuses = 1}};
  devrt_submission fr = {
      .stream = a->s[pd][0], .waits = &over_done, .nwaits = 1, .kind = DEVRT_WORK_FREE, .block = x};
  devrt_status st = r % 4 == 1 ? devrt_queue_submit(C->rt, &c) : devrt_queue_submit(P->rt, &b);
  if (!st) st = r % 4 == 1 ? devrt_queue_submit(P->rt, &b) : devrt_queue_submit(C->rt, &c);
  if (!st) st = devrt_queue_submit(P->rt, &over);
  if (!st) st = devrt_queue_submit(P->rt, &fr);
  if (!st) st = devrt_semaphore_wait(a->sem[cd], val, 60ull * 1000000000ull);
  return st;
}

static void* thread_main(void* p) {
  targ* a = p;
  for (int r = 0; r < rounds; r++) {
    int pd = (a->t + r) & 1, cd = pd ^ 1;
    mdev *P = &D[pd], *C = &D[cd];
    devrt_stream ps = a->s[pd][0], cs = a->s[cd][1];
    uint32_t v = (uint32_t)a->t << 24 | (uint32_t)r;
    uint64_t slow = r % 16 == 0 ? 2 * MS : 0;
    devrt_block x = 0, y = 0;
    devrt_status st = devrt_block_alloc(P->rt, N * 4, ps, "x", &x);
    if (!st) st = devrt_block_alloc(C->rt, N * 4, cs, "y", &y);
    if (!st) st = m_fill(P, ps, P->rt, x, v, N, slow);
    if (!st && r % 2) { /* ordered by semaphores of both runtimes as well */
      st = queued_round(a, r, pd, x, y, v, slow);
      x = 0; /* freed by the queue */
    } else if (!st) {
      st = m_copy(C, cs, C->rt, y, P->rt, x, N, slow);
      if (!st) st = m_fill(P, ps, P->rt, x, ~v, N, 0); /* write-after-read */
    }
    if (x) DV_ALSO(st, devrt_block_free(P->rt, x)); /* deferred behind the consumer's read */
    if (!st && b_wrong(C->rt, cs, y, N, v)) atomic_fetch_add(&corrupt, 1);
    if (y) DV_ALSO(st, devrt_block_free(C->rt, y));
    if (st) {
      fprintf(stderr, "thread %d round %d: %s: %s\n", a->t, r, devrt_status_name(st),
              devrt_last_error());
      atomic_fetch_add(&failed, 1);
      break;
    }
  }
  return NULL;
}

int main(void) {
  const char* e = getenv("DEVRT_MULTI_ROUNDS");
  rounds = e && *e ? atoi(e) : t_want_cuda() ? 1024 : 256;
  setenv("DEVRT_STREAMS", "32", 1);
  unsigned ndev = 2;
  m_open(&D[0], 0, ndev);
  int count = 0;
  REQUIRE_OK(devrt_peer_count(D[0].rt, &count));
  if (count < 2) {
    const char* req = getenv("DEVRT_REQUIRE_GPUS");
    printf("skipped: %d device(s), 2 needed\n", count);
    return req && atoi(req) >= 2 ? 1 : 77;
  }
  m_open(&D[1], 1, ndev);
  REQUIRE_OK(devrt_peer_enable(D[0].rt, D[1].rt));
  targ a[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    a[t].t = t;
    for (int d = 0; d < 2; d++) {
      a[t].s[d][0] = s_get(D[d].rt);
      a[t].s[d][1] = s_get(D[d].rt);
      REQUIRE_OK(devrt_semaphore_create(D[d].rt, 0, &a[t].sem[d]));
      REQUIRE_OK(devrt_semaphore_create(D[d].rt, 0, &a[t].over[d]));
    }
  }
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, thread_main, &a[t]);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  printf("%d threads x %d rounds: %llu corruptions, %llu failed threads\n", THREADS, rounds,
         (unsigned long long)atomic_load(&corrupt), (unsigned long long)atomic_load(&failed));
  CHECK(atomic_load(&corrupt) == 0 && atomic_load(&failed) == 0);
  for (int d = 0; d < 2; d++) {
    devrt_queue_stats q = m_qstats(D[d].rt);
    printf("device %d: %llu submitted, %llu inline, %llu dispatched, %llu failed, %llu host hops\n",
           d, (unsigned long long)q.submitted, (unsigned long long)q.issued_inline,
           (unsigned long long)q.issued_by_dispatch, (unsigned long long)q.failed,
           (unsigned long long)q.host_hops);
    CHECK(q.host_hops == 0 && q.failed == 0);
  }
  for (int t = 0; t < THREADS; t++)
    for (int d = 0; d < 2; d++) {
      CHECK_OK(devrt_stream_synchronize(D[d].rt, a[t].s[d][0]));
      CHECK_OK(devrt_stream_synchronize(D[d].rt, a[t].s[d][1]));
      CHECK_OK(devrt_stream_release(D[d].rt, a[t].s[d][0]));
      CHECK_OK(devrt_stream_release(D[d].rt, a[t].s[d][1]));
      CHECK_OK(devrt_semaphore_destroy(a[t].sem[d]));
      CHECK_OK(devrt_semaphore_destroy(a[t].over[d]));
    }
  CHECK_OK(devrt_peer_disable(D[0].rt, D[1].rt));
  m_close(&D[0]);
  m_close(&D[1]);
  return t_done();
}
