/* test_exchange_stress.c: four ranks on four host devices, a thread each (communicators from one
 * id), running the same random sequence of exchanges (all-to-all, all-to-allv with random counts,
 * a ring of sends and receives in one group, a lone send and receive between a random pair,
 * all-reduce, and replays of two graphs each rank captured at the start: an all-reduce and a ring)
 * on streams each rank picks at random, over inputs filled on yet another random stream (slowly
 * at times) and freed at once (a graph's input is overwritten instead: after the last replay's
 * read); every result is read back on a random stream and checked. A wrong word is a corruption; 0
 * are allowed. Rounds: DEVRT_EXCHANGE_ROUNDS (default 200). Host backend only (TSan in CI). */
#include <pthread.h>
#include <stdatomic.h>
#include "multi_util.h"

enum { NR = 4, N = 1024 };

static mdev D[NR];
static int rounds;
static _Atomic uint64_t corrupt, failed;

typedef struct targ {
  int r;
  devrt_comm_id id;
  devrt_comm* c;
  devrt_block gin, gout, gring; /* the graphs' input, the all-reduce's and the ring's outputs */
  devrt_graph* g[2];            /* captured: the all-reduce, the ring */
} targ;

static uint32_t val(int rank, int round) {
  return (uint32_t)(rank + 1) * 100000u + (uint32_t)round;
}

#define OK(expr)                                                          \
  do {                                                                    \
    devrt_status s_ = (expr);                                             \
    if (s_ != DEVRT_OK) {                                                 \
      fprintf(stderr, "rank %d: %s: %s\n", r, #expr, devrt_last_error()); \
      atomic_fetch_add(&failed, 1);                                       \
      return;                                                             \
    }                                                                     \
  } while (0)

/* Rank r's two graphs, captured on streams of its choice (every rank captures them in the same
 * order, as it issues its calls). */
static void capture(targ* a, uint64_t* mine) {
  int r = a->r;
  mdev* d = &D[r];
  OK(devrt_block_alloc(d->rt, N * 4, d->s[0], "graph in", &a->gin));
  OK(devrt_block_alloc(d->rt, N * 4, d->s[0], "graph out", &a->gout));
  OK(devrt_block_alloc(d->rt, N * 4, d->s[0], "graph ring", &a->gring));
  for (int k = 0; k < 2; k++) {
    devrt_stream s = d->s[t_rand(mine) % 3];
    OK(devrt_capture_begin(d->rt, s));
    if (k == 0) {
      OK(devrt_all_reduce(a->c, s, a->gin, a->gout, N, DEVRT_UINT32, DEVRT_SUM));
    } else {
      OK(devrt_group_start());
      OK(devrt_send(a->c, s, a->gin, N, DEVRT_UINT32, (r + 1) % NR));
      OK(devrt_recv(a->c, s, a->gring, N, DEVRT_UINT32, (r + NR - 1) % NR));
      OK(devrt_group_end());
    }
    OK(devrt_capture_end(d->rt, s, &a->g[k]));
  }
}

/* A replay of graph k after its input is overwritten (slowly at times), read back and checked. */
static void replay(targ* a, int round, int k, uint64_t* mine) {
  int r = a->r;
  mdev* d = &D[r];
  devrt_stream s_fill = d->s[t_rand(mine) % 3], s_op = d->s[t_rand(mine) % 3],
               s_read = d->s[t_rand(mine) % 3];
  OK(m_fill(d, s_fill, d->rt, a->gin, val(r, round), N, t_rand(mine) % 4 == 0 ? 2 * MS : 0));
  OK(devrt_graph_launch(a->g[k], s_op));
  uint32_t want = k ? val((r + NR - 1) % NR, round) : 0;
  for (int j = 0; !k && j < NR; j++) want += val(j, round);
  uint32_t* h = malloc(N * 4);
  OK(b_read(d->rt, s_read, k ? a->gring : a->gout, h, N * 4));
  uint64_t wrong = 0;
  for (int i = 0; i < N; i++) wrong += h[i] != want;
  free(h);
  atomic_fetch_add(&corrupt, wrong);
}

/* One round of rank r: the op from the shared sequence, the streams from its own. */
static void round_of(targ* a, int round, uint64_t op, uint64_t* mine) {
  int r = a->r;
  mdev* d = &D[r];
  if (op % 7 >= 5) {
    replay(a, round, (int)(op % 7) - 5, mine);
    return;
  }
  devrt_stream s_fill = d->s[t_rand(mine) % 3], s_op = d->s[t_rand(mine) % 3],
               s_read = d->s[t_rand(mine) % 3];
  uint64_t slow = t_rand(mine) % 4 == 0 ? 2 * MS : 0;
  devrt_block in = 0, out = 0;
  OK(devrt_block_alloc(d->rt, N * 4 * NR, s_fill, "in", &in));
  OK(devrt_block_alloc(d->rt, N * 4 * NR, s_op, "out", &out));
  OK(m_fill(d, s_fill, d->rt, in, val(r, round), N * NR, slow));
  OK(m_fill(d, s_op, d->rt, out, 7, N * NR, 0));
  uint32_t* h = malloc(N * 4 * NR);
  uint64_t words = N * NR, wrong = 0;
  switch (op % 5) {
    case 0: /* part j from rank j */
      OK(devrt_all_to_all(a->c, s_op, in, out, N, DEVRT_UINT32));
      break;
    case 1: { /* rank j sends (op >> 8) % N + j words; a rank receives them at j * N */
      size_t sc[NR], so[NR], rc[NR], ro[NR];
      for (int j = 0; j < NR; j++)
        sc[j] = (op >> 8) % N / 2 + (size_t)r, so[j] = (size_t)j * N,
        rc[j] = (op >> 8) % N / 2 + (size_t)j, ro[j] = (size_t)j * N;
      OK(devrt_all_to_allv(a->c, s_op, in, sc, so, out, rc, ro, DEVRT_UINT32));
      break;
    }
    case 2: /* a ring: from r - 1 */
      OK(devrt_group_start());
      OK(devrt_send(a->c, s_op, in, N, DEVRT_UINT32, (r + 1) % NR));
      OK(devrt_recv(a->c, s_op, out, N, DEVRT_UINT32, (r + NR - 1) % NR));
      OK(devrt_group_end());
      break;
    case 3: { /* rank p sends to q (p != q) ungrouped: the host sends are eager */
      int p = (int)((op >> 8) % NR), q = (p + 1 + (int)((op >> 16) % (NR - 1))) % NR;
      if (r == p) OK(devrt_send(a->c, s_op, in, N, DEVRT_UINT32, q));
      if (r == q) OK(devrt_recv(a->c, s_op, out, N, DEVRT_UINT32, p));
      break;
    }
    default:
      OK(devrt_all_reduce(a->c, s_op, in, out, N * NR, DEVRT_UINT32, DEVRT_SUM));
  }
  OK(devrt_block_free(d->rt, in)); /* deferred behind the exchange */
  OK(b_read(d->rt, s_read, out, h, words * 4));
  for (uint64_t i = 0; i < words; i++) {
    uint32_t want = 7;
    int j = (int)(i / N);
    uint64_t at = i % N;
    switch (op % 5) {
      case 0:
        want = val(j, round);
        break;
      case 1:
        want = at < (op >> 8) % N / 2 + (uint64_t)j ? val(j, round) : 7;
        break;
      case 2:
        want = i < N ? val((r + NR - 1) % NR, round) : 7;
        break;
      case 3: {
        int p = (int)((op >> 8) % NR), q = (p + 1 + (int)((op >> 16) % (NR - 1))) % NR;
        want = r == q && i < N ? val(p, round) : 7;
        break;
      }
      default:
        want = 0;
        for (int k = 0; k < NR; k++) want += val(k, round);
    }
    wrong += h[i] != want;
  }
  free(h);
  OK(devrt_block_free(d->rt, out));
  atomic_fetch_add(&corrupt, wrong);
}

static void* thread_main(void* p) {
  targ* a = p;
  int r = a->r;
  devrt_status st = devrt_comm_create(D[r].rt, &a->id, NR, r, &a->c);
  if (st != DEVRT_OK) {
    fprintf(stderr, "rank %d: devrt_comm_create: %s\n", r, devrt_last_error());
    atomic_fetch_add(&failed, 1);
    return NULL;
  }
  uint64_t shared = 0x9e3779b97f4a7c15ull, mine = 0x2545f4914f6cdd1dull * (uint64_t)(r + 1);
  capture(a, &mine);
  for (int i = 0; i < rounds && !atomic_load(&failed); i++) round_of(a, i, t_rand(&shared), &mine);
  for (int s = 0; s < 3; s++) devrt_stream_synchronize(D[r].rt, D[r].s[s]);
  for (int k = 0; k < 2; k++)
    if (a->g[k]) devrt_graph_destroy(a->g[k]);
  devrt_block blocks[3] = {a->gin, a->gout, a->gring};
  for (int k = 0; k < 3; k++)
    if (blocks[k]) devrt_block_free(D[r].rt, blocks[k]);
  if (devrt_comm_destroy(a->c) != DEVRT_OK) atomic_fetch_add(&failed, 1);
  return NULL;
}

int main(void) {
  if (strcmp(getenv("DEVRT_BACKEND") ? getenv("DEVRT_BACKEND") : "", "host")) return 77;
  const char* env = getenv("DEVRT_EXCHANGE_ROUNDS");
  rounds = env ? atoi(env) : 200;
  for (int i = 0; i < NR; i++) m_open(&D[i], i, NR);
  targ a[NR];
  pthread_t th[NR];
  REQUIRE_OK(devrt_comm_id_create(D[0].rt, &a[0].id));
  for (int r = 0; r < NR; r++) {
    a[r] = (targ){.r = r, .id = a[0].id};
    pthread_create(&th[r], NULL, thread_main, &a[r]);
  }
  for (int r = 0; r < NR; r++) pthread_join(th[r], NULL);
  printf("%d rounds on %d ranks: %llu corrupted words, %llu failed calls\n", rounds, NR,
         (unsigned long long)atomic_load(&corrupt), (unsigned long long)atomic_load(&failed));
  CHECK(atomic_load(&corrupt) == 0);
  CHECK(atomic_load(&failed) == 0);
  for (int i = 0; i < NR; i++) m_close(&D[i]);
  return t_done();
}
