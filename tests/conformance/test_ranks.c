/* test_ranks: ranks in separate processes on the host backend, as a launcher starts them. The
 * parent sets torchrun's variables and DEVRT_RENDEZVOUS=file:PATH for each child process; each
 * makes its communicator with devrt_comm_create_from_env and runs, on its own host device, an
 * all-reduce (in place), an all-gather, an all-to-all, an all-to-allv and a ring of sends and
 * receives, each over inputs copied in slowly on another stream (the exchange must wait for
 * them) and freed at once (their frees wait for it), results checked word by word. */
#include <sys/wait.h>
#include "launch_util.h"

enum { NR = 3, N = 4096 };
#define SLOW (20 * MS)

static devrt_runtime* rt;
static kernels K;
static devrt_stream S[3];

static uint32_t word(int from, int to, uint64_t i) {
  return (uint32_t)from * 1000000u + (uint32_t)to * 10000u + (uint32_t)(i % 10000);
}

static devrt_block alloc(size_t bytes) {
  devrt_block b = 0;
  REQUIRE_OK(devrt_block_alloc(rt, bytes, S[0], "rank", &b));
  return b;
}

/* b (n words) = word(rank, i / part, i % part), copied in slowly on S[1] and not waited for. */
static void fill_words(devrt_block b, int rank, uint64_t n, uint64_t part) {
  uint32_t* h = malloc(n * 4);
  for (uint64_t i = 0; i < n; i++) h[i] = word(rank, (int)(i / part), i % part);
  devrt_block t = alloc(n * 4);
  CHECK_OK(b_write(rt, S[1], t, h, n * 4));
  void *dp = bptr(rt, b), *sp = bptr(rt, t);
  uint64_t delay = SLOW;
  void* args[] = {&dp, &sp, &n, &delay};
  devrt_block_use u[] = {{t, DEVRT_ACCESS_READ}, {b, DEVRT_ACCESS_WRITE}};
  CHECK_OK(k_run(rt, S[1], K.slow_copy, n, args, u, 2));
  CHECK_OK(devrt_block_free(rt, t));
  free(h);
}

/* How many of b's n words differ from want(i). */
#define WRONG(b, n, want)                                     \
  ({                                                          \
    uint32_t* h_ = malloc((n)*4);                             \
    uint64_t w_ = 0;                                          \
    CHECK_OK(b_read(rt, S[2], b, h_, (n)*4));                 \
    for (uint64_t i = 0; i < (n); i++) w_ += h_[i] != (want); \
    free(h_);                                                 \
    w_;                                                       \
  })

static int rank_main(int r) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  rt = t_runtime_cfg(&cfg);
  k_load(rt, &K);
  for (int i = 0; i < 3; i++) S[i] = s_get(rt);
  devrt_comm* c = NULL;
  REQUIRE_OK(devrt_comm_create_from_env(rt, &c));
  int rank = -1, nranks = -1;
  CHECK_OK(devrt_comm_info(c, &rank, &nranks, NULL));
  CHECK(rank == r && nranks == NR);

  /* all-reduce in place: every word is 0 + 1 + ... + NR-1 plus NR times the word's index */
  devrt_block a = alloc(N * 4);
  fill_words(a, 0, N, N); /* word(0, 0, i) = i % 10000 on every rank */
  CHECK_OK(devrt_all_reduce(c, S[0], a, a, N, DEVRT_UINT32, DEVRT_SUM));
  CHECK(WRONG(a, N, (uint32_t)(NR * (i % 10000))) == 0);
  /* all-gather: part j from rank j */
  devrt_block in = alloc(N * 4 * NR), out = alloc(N * 4 * NR);
  fill_words(in, r, N, N);
  CHECK_OK(devrt_all_gather(c, S[0], in, out, N, DEVRT_UINT32));
  CHECK_OK(devrt_block_free(rt, in));
  CHECK(WRONG(out, (uint64_t)N * NR, word((int)(i / N), 0, i % N)) == 0);
  /* all-to-all: part j of a rank's recv is rank j's part for it */
  in = alloc(N * 4 * NR);
  fill_words(in, r, (uint64_t)N * NR, N);
  CHECK_OK(devrt_all_to_all(c, S[0], in, out, N, DEVRT_UINT32));
  CHECK_OK(devrt_block_free(rt, in));
  CHECK(WRONG(out, (uint64_t)N * NR, word((int)(i / N), r, i % N)) == 0);
  /* all-to-allv: r + 1 + j words to rank j from offset j * N, landing at offset j * N of its
   * recv; the rest of the recv keeps its 7s */
  size_t sc[NR], so[NR], rc[NR], ro[NR];
  for (int j = 0; j < NR; j++)
    sc[j] = (size_t)(r + 1 + j), so[j] = (size_t)j * N, rc[j] = (size_t)(j + 1 + r),
    ro[j] = (size_t)j * N;
  in = alloc(N * 4 * NR);
  fill_words(in, r, (uint64_t)N * NR, N);
  uint32_t seven = 7;
  uint64_t all = (uint64_t)N * NR, none = 0;
  void* op = bptr(rt, out);
  void* fargs[] = {&op, &seven, &all, &none};
  devrt_block_use fu[] = {{out, DEVRT_ACCESS_WRITE}};
  CHECK_OK(k_run(rt, S[1], K.fill, all, fargs, fu, 1));
  CHECK_OK(devrt_all_to_allv(c, S[0], in, sc, so, out, rc, ro, DEVRT_UINT32));
  CHECK_OK(devrt_block_free(rt, in));
  CHECK(WRONG(out, all, i % N < rc[i / N] ? word((int)(i / N), r, i % N) : 7) == 0);
  /* a ring, both directions in one group: from r - 1, to r + 1 */
  in = alloc(N * 4);
  fill_words(in, r, N, N);
  CHECK_OK(devrt_group_start());
  CHECK_OK(devrt_send(c, S[0], in, N, DEVRT_UINT32, (r + 1) % NR));
  CHECK_OK(devrt_recv(c, S[0], out, N, DEVRT_UINT32, (r + NR - 1) % NR));
  CHECK_OK(devrt_group_end());
  CHECK_OK(devrt_block_free(rt, in));
  CHECK(WRONG(out, N, word((r + NR - 1) % NR, 0, i)) == 0);

  CHECK_OK(devrt_stream_synchronize(rt, S[0]));
  CHECK_OK(devrt_comm_destroy(c));
  CHECK_OK(devrt_block_free(rt, a));
  CHECK_OK(devrt_block_free(rt, out));
  for (int i = 0; i < 3; i++) CHECK_OK(devrt_stream_synchronize(rt, S[i]));
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  for (int i = 0; i < 3; i++) CHECK_OK(devrt_stream_release(rt, S[i]));
  CHECK_OK(devrt_module_unload(rt, K.mod));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}

int main(void) {
  if (strcmp(getenv("DEVRT_BACKEND") ? getenv("DEVRT_BACKEND") : "", "host")) return 77;
  char path[64], env[96];
  snprintf(path, sizeof path, "/tmp/devrt-test-ranks-%d", (int)getpid());
  snprintf(env, sizeof env, "file:%s", path);
  setenv("DEVRT_RENDEZVOUS", env, 1);
  setenv("WORLD_SIZE", "3", 1);
  setenv("LOCAL_WORLD_SIZE", "3", 1);
  pid_t pid[NR];
  for (int r = 0; r < NR; r++) { /* before any runtime or thread of this process */
    char v[16];
    snprintf(v, sizeof v, "%d", r);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    if ((pid[r] = fork()) == 0) {
      int rc = rank_main(r);
      fflush(NULL);
      _exit(rc);
    }
  }
  for (int r = 0; r < NR; r++) {
    int status = 0;
    CHECK(waitpid(pid[r], &status, 0) == pid[r]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status))
      fprintf(stderr, "rank %d: status %d\n", r, status);
  }
  CHECK(access(path, F_OK) != 0); /* rank 0 removed the id once every rank had joined */
  return t_done();
}
