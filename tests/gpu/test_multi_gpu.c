/* test_multi_gpu.c (cuda only): several GPUs, and NCCL.
 *   test_multi_gpu peers   two GPUs with peer access: cross-device read-after-write,
 *                          write-after-read and deferred free under slow kernels, the tracked
 *                          peer copy, semaphore chains crossing the devices in both submit orders
 *                          (host_hops 0), NCCL collectives over both (all-reduce read on the
 *                          other GPU's stream; in place, all-gather, reduce-scatter, broadcast),
 *                          all checked by their data. Fewer than 2 GPUs: exit 77, or 1 under
 *                          DEVRT_REQUIRE_GPUS=2.
 *   test_multi_gpu nccl    NCCL with one rank on one GPU (so a one-GPU machine tests the path):
 *                          from devrt_comms_create and from an id, all four collectives.
 * No GPU: 77, or 1 under DEVRT_REQUIRE_GPU=1. libnccl missing: 77, or 1 under
 * DEVRT_REQUIRE_NCCL=1 (the message names every path tried). */
#include "multi_util.h"

enum { N = 1 << 22 }; /* 16 MiB blocks */
#define SLOW (50 * MS)

static int require(const char* var, int level) {
  const char* v = getenv(var);
  return v && atoi(v) >= level;
}

/* NCCL loads, or the test is skipped (or fails when required). */
static void need_nccl(devrt_runtime* rt) {
  int ver = 0;
  devrt_status st = devrt_comm_version(rt, &ver);
  if (st != DEVRT_OK) {
    printf("skipped: NCCL: %s: %s\n", devrt_status_name(st), devrt_last_error());
    exit(require("DEVRT_REQUIRE_NCCL", 1) ? 1 : 77);
  }
  printf("NCCL %d\n", ver);
}

static int peers(void) {
  mdev d[2];
  m_open(&d[0], 0, 2);
  int count = 0;
  REQUIRE_OK(devrt_peer_count(d[0].rt, &count));
  if (count < 2) {
    printf("skipped: %d GPU(s), the peer tests need 2 (DEVRT_REQUIRE_GPUS=2 makes this fail)\n",
           count);
    return require("DEVRT_REQUIRE_GPUS", 2) ? 1 : 77;
  }
  m_open(&d[1], 1, 2);
  devrt_peer_info pi;
  CHECK_OK(devrt_peer_query(d[0].rt, d[1].rt, &pi));
  printf("GPU 0 <-> 1: %s, can_access %d, performance rank %d, native atomics %d\n", pi.link,
         pi.can_access, pi.performance_rank, pi.native_atomics);
  REQUIRE_OK(devrt_peer_enable(d[0].rt, d[1].rt));
  m_raw(&d[0], &d[1], N, SLOW);
  m_raw(&d[1], &d[0], N, SLOW);
  m_war_free(&d[0], &d[1], N, SLOW);
  m_war_free(&d[1], &d[0], N, SLOW);
  m_copy_peer(&d[0], &d[1], N, SLOW);
  m_sem_chain(&d[0], &d[1], 64, 1 << 16, 200000, false);
  m_sem_chain(&d[0], &d[1], 64, 1 << 16, 200000, true);
  devrt_queue_stats q0 = m_qstats(d[0].rt), q1 = m_qstats(d[1].rt);
  printf("host_hops %llu, %llu\n", (unsigned long long)q0.host_hops,
         (unsigned long long)q1.host_hops);
  need_nccl(d[0].rt);
  devrt_runtime* rts[2] = {d[0].rt, d[1].rt};
  devrt_comm* c[2];
  REQUIRE_OK(devrt_comms_create(2, rts, c));
  m_all_reduce_read(d, c, 2, N, SLOW);
  m_collectives_data(d, c, 2, 1 << 20);
  m_exchange_data(d, c, 2, 1 << 20, SLOW);
  m_captured_collectives(d, c, 2, 1 << 20, SLOW);
  for (int i = 0; i < 2; i++) CHECK_OK(devrt_comm_destroy(c[i]));
  CHECK_OK(devrt_peer_disable(d[0].rt, d[1].rt));
  m_close(&d[0]);
  m_close(&d[1]);
  return t_done();
}

static int nccl_one(void) {
  mdev d;
  m_open(&d, 0, 1);
  need_nccl(d.rt);
  devrt_comm* c;
  REQUIRE_OK(devrt_comms_create(1, &d.rt, &c));
  m_all_reduce_read(&d, &c, 1, N, SLOW);
  m_collectives_data(&d, &c, 1, 1 << 20);
  m_exchange_data(&d, &c, 1, 1 << 20, SLOW);
  m_captured_collectives(&d, &c, 1, 1 << 20, SLOW);
  CHECK_OK(devrt_comm_destroy(c));
  devrt_comm_id id;
  REQUIRE_OK(devrt_comm_id_create(d.rt, &id));
  REQUIRE_OK(devrt_comm_create(d.rt, &id, 1, 0, &c));
  int rank = -1, nranks = -1;
  CHECK_OK(devrt_comm_info(c, &rank, &nranks, NULL));
  CHECK(rank == 0 && nranks == 1);
  m_all_reduce_read(&d, &c, 1, 1 << 10, 0);
  CHECK_OK(devrt_comm_destroy(c));
  m_close(&d);
  return t_done();
}

int main(int argc, char** argv) {
  if (!t_want_cuda()) return 77; /* GPUs only: test_multi runs the host devices */
  if (argc > 1 && !strcmp(argv[1], "nccl")) return nccl_one();
  return peers();
}
