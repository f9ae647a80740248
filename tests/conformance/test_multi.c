/* test_multi.c: several devices on the host backend (DEVRT_HOST_DEVICES-style host devices of one
 * process): runtimes of four ordinals side by side, peer access (query, enable, disable, the bad
 * inputs), launches on one device over another's blocks (read-after-write, write-after-read,
 * deferred free, stale handles on every device), the tracked copy, semaphores across devices in
 * both submit orders with host_hops 0, failure and device loss crossing devices with their root
 * cause, and the host collectives as tracked work. */
#include <pthread.h>
#include "multi/nccl.h"
#include "multi_util.h"

enum { NDEV = 4, N = 4096 };
#define SLOW (40 * MS)

static mdev D[NDEV];

static void bad_inputs(void) {
  devrt_runtime *a = D[0].rt, *b = D[1].rt;
  devrt_peer_info pi;
  int n = 0;
  CHECK_STATUS(devrt_peer_count(NULL, &n), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_peer_count(a, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_peer_query(NULL, b, &pi), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_peer_query(a, a, &pi), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_peer_query(a, b, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_peer_enable(a, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_peer_enable(a, a), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_peer_disable(a, b), DEVRT_ERR_INVALID_ARGUMENT); /* not enabled */
  CHECK_STATUS(devrt_peer_disable(NULL, b), DEVRT_ERR_INVALID_ARGUMENT);

  /* before peer access: b's launches, copies and submissions refuse a's block and semaphore */
  devrt_block x = m_alloc(&D[0], N * 4, "x"), y = m_alloc(&D[1], N * 4, "y");
  CHECK_STATUS(m_copy(&D[1], D[1].s[0], b, y, a, x, N, 0), DEVRT_ERR_STALE_BLOCK);
  CHECK_STATUS(devrt_block_copy(b, D[1].s[0], y, 0, x, 0, 4), DEVRT_ERR_STALE_BLOCK);
  devrt_semaphore* s;
  REQUIRE_OK(devrt_semaphore_create(a, 0, &s));
  devrt_semaphore_value sv = {s, 1};
  devrt_submission sub = {.stream = D[1].s[0], .signals = &sv, .nsignals = 1};
  CHECK_STATUS(devrt_queue_submit(b, &sub), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "no peer access") != NULL);

  /* the tracked copy's own checks */
  CHECK_STATUS(devrt_block_copy(NULL, D[1].s[0], y, 0, y, 4, 4), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_block_copy(b, D[1].s[0], y, 0, y, 4, 0), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_block_copy(b, 0, y, 0, y, 4, 4), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_block_copy(b, D[0].s[0], y, 0, y, 4, 4), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_block_copy(b, D[1].s[0], y, 0, y, 8, 16), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_block_copy(b, D[1].s[0], y, N * 4 - 4, y, 0, 8), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_block_copy(b, D[1].s[0], y, 0, y, SIZE_MAX, 8), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_block_copy(b, D[1].s[0], 0, 0, y, 0, 8), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_block_copy(b, D[1].s[0], y, 0, y, 8, 8));

  /* enabled: the same calls pass; the block calls that take its own runtime name the owner */
  CHECK_OK(devrt_peer_enable(a, b));
  CHECK_OK(devrt_peer_enable(b, a)); /* again: nothing to do */
  CHECK_OK(devrt_queue_submit(b, &sub));
  CHECK_OK(devrt_semaphore_wait(s, 1, 10ull * 1000000000ull));
  void* p;
  CHECK_STATUS(devrt_block_ptr(b, x, &p), DEVRT_ERR_STALE_BLOCK);
  CHECK(strstr(devrt_last_error(), "ordinal 0") != NULL);
  CHECK_STATUS(devrt_block_free(b, x), DEVRT_ERR_STALE_BLOCK);
  CHECK_STATUS(devrt_prepare_block_use(b, x, D[1].s[0], DEVRT_ACCESS_READ), DEVRT_ERR_STALE_BLOCK);
  CHECK_OK(m_copy(&D[1], D[1].s[0], b, y, a, x, N, 0));
  CHECK(devrt_last_error()[0] == 0); /* the lookup that found the peer's block left no message */
  CHECK_STATUS(devrt_runtime_destroy(a), DEVRT_ERR_INVALID_STATE); /* blocks, then peers */
  CHECK_OK(devrt_block_free(a, x));
  CHECK_OK(devrt_block_free(b, y));
  CHECK_OK(devrt_semaphore_destroy(s));
}

static void peers(void) {
  int n = 0;
  CHECK_OK(devrt_peer_count(D[0].rt, &n));
  CHECK(n == NDEV);
  for (int i = 0; i < NDEV; i++)
    for (int j = 0; j < NDEV; j++) {
      if (i == j) continue;
      devrt_peer_info pi;
      CHECK_OK(devrt_peer_query(D[i].rt, D[j].rt, &pi));
      CHECK(pi.can_access && !pi.same_device && !strcmp(pi.link, "host memory"));
      CHECK(pi.enabled == ((i < 2 && j < 2)));
    }
  for (int i = 0; i < NDEV; i++)
    for (int j = i + 1; j < NDEV; j++) CHECK_OK(devrt_peer_enable(D[i].rt, D[j].rt));
  devrt_peer_info pi;
  CHECK_OK(devrt_peer_query(D[3].rt, D[2].rt, &pi));
  CHECK(pi.enabled);
}

/* One semaphore of a, failed: b's submission parked on it fails its own signal with the root
 * cause; then a lost device: a's semaphores fail with DEVICE_LOST, b's parked work and b's
 * semaphore that a's work was to signal fail with it too. Runs on two runtimes of their own. */
static void failures(void) {
  mdev a, b;
  m_open(&a, 0, NDEV);
  m_open(&b, 1, NDEV);
  CHECK_OK(devrt_peer_enable(a.rt, b.rt));
  devrt_semaphore *s, *t, *u;
  REQUIRE_OK(devrt_semaphore_create(a.rt, 0, &s));
  REQUIRE_OK(devrt_semaphore_create(b.rt, 0, &t));
  REQUIRE_OK(devrt_semaphore_create(b.rt, 0, &u));
  devrt_semaphore_value ws = {s, 1}, st = {t, 1};
  devrt_submission down = {
      .stream = b.s[0], .waits = &ws, .nwaits = 1, .signals = &st, .nsignals = 1};
  CHECK_OK(devrt_queue_submit(b.rt, &down));
  CHECK_OK(devrt_semaphore_fail(s, DEVRT_ERR_BACKEND_ERROR, "the producer on device 0 broke"));
  CHECK_STATUS(devrt_semaphore_wait(t, 1, 10ull * 1000000000ull), DEVRT_ERR_ABORTED);
  CHECK(strstr(devrt_last_error(), "the producer on device 0 broke") != NULL);
  devrt_status cause;
  const char* msg;
  CHECK_OK(devrt_semaphore_failure(t, &cause, &msg));
  CHECK(cause == DEVRT_ERR_BACKEND_ERROR);
  CHECK_OK(devrt_semaphore_destroy(s));
  CHECK_OK(devrt_semaphore_destroy(t));

  /* a's device is lost while its work is to signal a's s2 (b waits on it) and b's u */
  devrt_semaphore *s2, *t2;
  REQUIRE_OK(devrt_semaphore_create(a.rt, 0, &s2));
  REQUIRE_OK(devrt_semaphore_create(b.rt, 0, &t2));
  devrt_semaphore_value w2 = {s2, 2}, g2 = {t2, 1}, sig[] = {{s2, 1}, {u, 1}};
  devrt_submission park = {
      .stream = b.s[0], .waits = &w2, .nwaits = 1, .signals = &g2, .nsignals = 1};
  CHECK_OK(devrt_queue_submit(b.rt, &park));
  devrt_block x = m_alloc(&a, N * 4, "x");
  void* xp = bptr(a.rt, x);
  uint32_t v = 1;
  uint64_t nn = N, delay = 20 * MS;
  void* args[] = {&xp, &v, &nn, &delay};
  devrt_block_use use = {x, DEVRT_ACCESS_WRITE};
  devrt_submission work = {.stream = a.s[0],
                           .signals = sig,
                           .nsignals = 2,
                           .kind = DEVRT_WORK_LAUNCH,
                           .launch = {.kernel = a.k.slow_fill,
                                      .grid = {16},
                                      .block = {256},
                                      .args = args,
                                      .uses = &use,
                                      .nuses = 1}};
  CHECK_OK(devrt_queue_submit(a.rt, &work));
  a.rt->be->fault_arm(a.rt->dev, DV_FAULT_DEVICE, 1);
  CHECK_STATUS(devrt_semaphore_wait(u, 1, 10ull * 1000000000ull), DEVRT_ERR_ABORTED);
  CHECK(strstr(devrt_last_error(), "DEVICE_LOST") && strstr(devrt_last_error(), "device lost"));
  CHECK_STATUS(devrt_semaphore_wait(t2, 1, 10ull * 1000000000ull), DEVRT_ERR_ABORTED);
  CHECK_OK(devrt_semaphore_failure(t2, &cause, &msg));
  CHECK(cause == DEVRT_ERR_DEVICE_LOST && strstr(msg, "injected device fault"));
  CHECK(m_qstats(a.rt).device_lost && !m_qstats(b.rt).device_lost);
  a.rt->be->fault_arm(a.rt->dev, DV_FAULT_DEVICE, 0);
  CHECK_OK(devrt_stream_synchronize(a.rt, a.s[0]));
  CHECK_OK(devrt_block_free(a.rt, x));
  CHECK_OK(devrt_semaphore_destroy(s2));
  CHECK_OK(devrt_semaphore_destroy(t2));
  CHECK_OK(devrt_semaphore_destroy(u));
  CHECK_OK(devrt_peer_disable(a.rt, b.rt));
  for (int i = 0; i < 3; i++) CHECK_OK(devrt_stream_release(a.rt, a.s[i]));
  CHECK_OK(devrt_module_unload(a.rt, a.k.mod));
  CHECK_OK(devrt_runtime_destroy(a.rt)); /* a lost device's runtime still goes away */
  m_close(&b);
}

/* Collectives over the four host devices: grouped from one thread, data checked, read on another
 * device's stream; in place; all-gather, reduce-scatter and broadcast; ranks made from an id in
 * threads of their own; the bad inputs. */
typedef struct rank_arg {
  devrt_comm_id id;
  int rank;
  devrt_comm* comm;
  devrt_status st;
} rank_arg;

static void* rank_main(void* p) {
  rank_arg* r = p;
  r->st = devrt_comm_create(D[r->rank].rt, &r->id, NDEV, r->rank, &r->comm);
  if (r->st != DEVRT_OK) return NULL;
  /* each rank's thread issues its own all-reduce (no group: one rank per thread) */
  devrt_block b = m_alloc(&D[r->rank], N * 4, "rank");
  r->st = m_fill(&D[r->rank], D[r->rank].s[1], D[r->rank].rt, b, 10u * (uint32_t)r->rank, N, 0);
  if (r->st == DEVRT_OK)
    r->st = devrt_all_reduce(r->comm, D[r->rank].s[1], b, b, N, DEVRT_INT32, DEVRT_MAX);
  if (r->st == DEVRT_OK && b_wrong(D[r->rank].rt, D[r->rank].s[1], b, N, 10u * (NDEV - 1)))
    r->st = DEVRT_ERR_BACKEND_ERROR;
  devrt_block_free(D[r->rank].rt, b);
  return NULL;
}

static void collectives(void) {
  devrt_runtime* rts[NDEV];
  devrt_comm* c[NDEV];
  for (int i = 0; i < NDEV; i++) rts[i] = D[i].rt;
  int ver = -1;
  CHECK_OK(devrt_comm_version(rts[0], &ver));
  CHECK(ver == 0);
  REQUIRE_OK(devrt_comms_create(NDEV, rts, c));
  m_all_reduce_read(D, c, NDEV, N, SLOW);

  m_collectives_data(D, c, NDEV, N);
  m_exchange_data(D, c, NDEV, N, SLOW);
  m_captured_collectives(D, c, NDEV, N, SLOW);
  devrt_block in[NDEV], out[NDEV];
  for (int r = 0; r < NDEV; r++) {
    in[r] = m_alloc(&D[r], N * 4 * NDEV, "in");
    out[r] = m_alloc(&D[r], N * 4 * NDEV, "out");
  }

  /* bad inputs: nothing is issued */
  CHECK_STATUS(devrt_all_reduce(NULL, D[0].s[0], in[0], out[0], N, DEVRT_INT32, DEVRT_SUM),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_all_reduce(c[0], D[1].s[0], in[0], out[0], N, DEVRT_INT32, DEVRT_SUM),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_all_reduce(c[0], D[0].s[0], in[0], out[0], 0, DEVRT_INT32, DEVRT_SUM),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_all_reduce(c[0], D[0].s[0], in[0], out[0], N, (devrt_dtype)99, DEVRT_SUM),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_all_reduce(c[0], D[0].s[0], in[0], out[0], N, DEVRT_INT32, (devrt_redop)9),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_all_reduce(c[0], D[0].s[0], in[0], out[0], N, DEVRT_FLOAT16, DEVRT_SUM),
               DEVRT_ERR_UNSUPPORTED);
  CHECK_STATUS(
      devrt_all_reduce(c[0], D[0].s[0], in[0], out[0], N * NDEV + 1, DEVRT_INT32, DEVRT_SUM),
      DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_all_gather(c[0], D[0].s[0], in[0], out[0], N * NDEV, DEVRT_INT32),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_broadcast(c[0], D[0].s[0], in[0], out[0], N, DEVRT_INT32, NDEV),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_all_reduce(c[0], D[0].s[0], 0, out[0], N, DEVRT_INT32, DEVRT_SUM),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_all_to_all(c[0], D[0].s[0], in[0], out[0], N + 1, DEVRT_INT32),
               DEVRT_ERR_INVALID_ARGUMENT); /* nranks parts of N + 1 do not fit */
  CHECK_STATUS(devrt_all_to_all(c[0], D[0].s[0], in[0], in[0], N, DEVRT_INT32),
               DEVRT_ERR_INVALID_ARGUMENT); /* one block */
  CHECK_STATUS(devrt_all_to_all(c[0], D[0].s[0], in[0], out[0], SIZE_MAX / 2, DEVRT_INT32),
               DEVRT_ERR_INVALID_ARGUMENT);
  size_t cnt[NDEV] = {1, 1, 1, 1}, off[NDEV] = {0, 1, 2, 3}, far[NDEV] = {0, 1, 2, N * NDEV};
  size_t huge[NDEV] = {1, 1, 1, SIZE_MAX - 1};
  CHECK_STATUS(devrt_all_to_allv(c[0], D[0].s[0], in[0], NULL, off, out[0], cnt, off, DEVRT_INT32),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_all_to_allv(c[0], D[0].s[0], in[0], cnt, far, out[0], cnt, off, DEVRT_INT32),
               DEVRT_ERR_INVALID_ARGUMENT); /* a send part past the block's end */
  CHECK_STATUS(devrt_all_to_allv(c[0], D[0].s[0], in[0], cnt, off, out[0], cnt, huge, DEVRT_INT32),
               DEVRT_ERR_INVALID_ARGUMENT); /* an offset that overflows */
  CHECK_STATUS(devrt_all_to_allv(NULL, D[0].s[0], in[0], cnt, off, out[0], cnt, off, DEVRT_INT32),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_send(c[0], D[0].s[0], in[0], N, DEVRT_INT32, NDEV),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_recv(c[0], D[0].s[0], in[0], N, DEVRT_INT32, -1), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_send(c[0], D[0].s[0], in[0], 0, DEVRT_INT32, 1), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_recv(c[0], D[0].s[0], in[0], N * NDEV + 1, DEVRT_INT32, 1),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_send(c[0], D[0].s[0], 0, N, DEVRT_INT32, 1), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "devrt_send") != NULL);
  CHECK_STATUS(devrt_group_end(), DEVRT_ERR_INVALID_STATE);
  CHECK_STATUS(devrt_comms_create(0, rts, c), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_comms_create(1, NULL, c), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_comms_create(1, rts, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_comm_version(NULL, &ver), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_comm_version(rts[0], NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_comm_id_create(NULL, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  devrt_runtime* twice[2] = {rts[0], rts[0]};
  devrt_comm* c2[2];
  CHECK_STATUS(devrt_comms_create(2, twice, c2), DEVRT_ERR_INVALID_ARGUMENT);
  devrt_comm_id id;
  CHECK_STATUS(devrt_comm_id_create(rts[0], NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_comm_id_create(rts[0], &id));
  devrt_comm* one;
  CHECK_STATUS(devrt_comm_create(rts[0], &id, 2, 2, &one), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_comm_create(rts[0], NULL, 2, 0, &one), DEVRT_ERR_INVALID_ARGUMENT);
  devrt_comm_id junk;
  memset(&junk, 7, sizeof junk);
  CHECK_STATUS(devrt_comm_create(rts[0], &junk, 1, 0, &one), DEVRT_ERR_INVALID_ARGUMENT);
  int rank = -1, nranks = -1;
  devrt_runtime* crt = NULL;
  CHECK_OK(devrt_comm_info(c[2], &rank, &nranks, &crt));
  CHECK(rank == 2 && nranks == NDEV && crt == rts[2]);
  CHECK_STATUS(devrt_comm_info(NULL, &rank, NULL, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  for (int r = 0; r < NDEV; r++) {
    CHECK_OK(devrt_stream_synchronize(D[r].rt, D[r].s[0]));
    CHECK_OK(devrt_block_free(D[r].rt, in[r]));
    CHECK_OK(devrt_block_free(D[r].rt, out[r]));
    CHECK_OK(devrt_comm_destroy(c[r]));
  }
  CHECK_STATUS(devrt_comm_destroy(NULL), DEVRT_ERR_INVALID_ARGUMENT);

  /* ranks from one id, a thread each */
  rank_arg ra[NDEV];
  pthread_t th[NDEV];
  CHECK_OK(devrt_comm_id_create(rts[1], &ra[0].id));
  for (int r = 0; r < NDEV; r++) {
    ra[r].id = ra[0].id, ra[r].rank = r, ra[r].comm = NULL;
    pthread_create(&th[r], NULL, rank_main, &ra[r]);
  }
  for (int r = 0; r < NDEV; r++) {
    pthread_join(th[r], NULL);
    CHECK(ra[r].st == DEVRT_OK);
  }
  for (int r = 0; r < NDEV; r++)
    if (ra[r].comm) CHECK_OK(devrt_comm_destroy(ra[r].comm));
}

/* Ending peer access waits for nothing new, but refuses while one side's work is parked on the
 * other's semaphore; then the runtimes can be destroyed. */
static void disable_all(void) {
  devrt_semaphore* s;
  REQUIRE_OK(devrt_semaphore_create(D[0].rt, 0, &s));
  devrt_semaphore_value w = {s, 5};
  devrt_submission sub = {.stream = D[1].s[0], .waits = &w, .nwaits = 1};
  CHECK_OK(devrt_queue_submit(D[1].rt, &sub));
  CHECK_STATUS(devrt_peer_disable(D[0].rt, D[1].rt), DEVRT_ERR_INVALID_STATE);
  CHECK_OK(devrt_semaphore_signal(s, 5));
  CHECK_OK(devrt_stream_synchronize(D[1].rt, D[1].s[0]));
  for (int i = 0; i < NDEV; i++)
    for (int j = i + 1; j < NDEV; j++) CHECK_OK(devrt_peer_disable(D[i].rt, D[j].rt));
  CHECK_OK(devrt_semaphore_destroy(s));
}

/* libnccl missing: UNSUPPORTED, naming what was tried, every time (the load runs once). */
static void nccl_missing(void) {
  const dv_nccl* n = NULL;
  for (int i = 0; i < 2; i++) {
    CHECK_STATUS(dv_nccl_get(&n), DEVRT_ERR_UNSUPPORTED);
    CHECK(strstr(devrt_last_error(), "/nonexistent/libnccl.so.2") &&
          strstr(devrt_last_error(), "DEVRT_NCCL_LIBRARY"));
  }
}

int main(void) {
  setenv("DEVRT_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  nccl_missing();
  for (int i = 0; i < NDEV; i++) m_open(&D[i], i, NDEV);
  bad_inputs();
  peers();
  m_raw(&D[0], &D[1], N, SLOW);
  m_raw(&D[3], &D[2], N, SLOW);
  m_war_free(&D[0], &D[1], N, SLOW);
  m_war_free(&D[2], &D[0], N, SLOW);
  m_copy_peer(&D[0], &D[3], N, SLOW);
  m_sem_chain(&D[0], &D[1], 16, N, 2 * MS, false);
  m_sem_chain(&D[2], &D[3], 16, N, 2 * MS, true);
  failures();
  collectives();
  disable_all();
  for (int i = 0; i < NDEV; i++) m_close(&D[i]);
  return t_done();
}
