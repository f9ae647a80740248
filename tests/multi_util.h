/* multi_util.h: what the several-device suites share (test_multi on host devices, test_multi_gpu
 * on GPUs, test_multi_stress): runtimes of several ordinals with peer access and devrt's kernels
 * on each, launches on one runtime over blocks of any (each block's address from its owner), and
 * the scenarios both backends run: cross-device read-after-write, write-after-read, deferred free,
 * the tracked copy, semaphore chains in both submit orders, and collectives read on another
 * device's stream, all checked by their data. */
#ifndef DEVRT_TEST_MULTI_UTIL_H
#define DEVRT_TEST_MULTI_UTIL_H

#include "launch_util.h"
#include "devrt/graph.h"

typedef struct mdev {
  devrt_runtime* rt;
  kernels k;
  devrt_stream s[3];
} mdev;

/* An owned runtime of `ordinal` on the backend DEVRT_BACKEND names (host: `ndev` host devices),
 * its kernels and three streams. */
static inline void m_open(mdev* d, int ordinal, unsigned ndev) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.ordinal = ordinal;
  cfg.host_devices = ndev;
  d->rt = t_runtime_cfg(&cfg);
  k_load(d->rt, &d->k);
  for (int i = 0; i < 3; i++) d->s[i] = s_get(d->rt);
}

static inline void m_close(mdev* d) {
  for (int i = 0; i < 3; i++) CHECK_OK(devrt_stream_synchronize(d->rt, d->s[i]));
  CHECK_OK(devrt_reap_pending(d->rt, DEVRT_REAP_WAIT, NULL));
  for (int i = 0; i < 3; i++) CHECK_OK(devrt_stream_release(d->rt, d->s[i]));
  CHECK_OK(devrt_module_unload(d->rt, d->k.mod));
  CHECK_OK(devrt_runtime_destroy(d->rt));
}

/* b = v over n words, launched on d's stream s (b may be d's or a peer's: owner says whose). */
static inline devrt_status m_fill(mdev* d, devrt_stream s, devrt_runtime* owner, devrt_block b,
                                  uint32_t v, uint64_t n, uint64_t delay_ns) {
  void* p = bptr(owner, b);
  void* args[] = {&p, &v, &n, &delay_ns};
  devrt_block_use u[] = {{b, DEVRT_ACCESS_WRITE}};
  return k_run(d->rt, s, delay_ns ? d->k.slow_fill : d->k.fill, n, args, u, 1);
}

/* dst = src over n words on d's stream s; each block of its owner. */
static inline devrt_status m_copy(mdev* d, devrt_stream s, devrt_runtime* downer, devrt_block dst,
                                  devrt_runtime* sowner, devrt_block src, uint64_t n,
                                  uint64_t delay_ns) {
  void *dp = bptr(downer, dst), *sp = bptr(sowner, src);
  void* args[] = {&dp, &sp, &n, &delay_ns};
  devrt_block_use u[] = {{src, DEVRT_ACCESS_READ}, {dst, DEVRT_ACCESS_WRITE}};
  return k_run(d->rt, s, delay_ns ? d->k.slow_copy : d->k.copy, n, args, u, 2);
}

static inline devrt_block m_alloc(mdev* d, size_t bytes, const char* tag) {
  devrt_block b = 0;
  REQUIRE_OK(devrt_block_alloc(d->rt, bytes, d->s[0], tag, &b));
  return b;
}

static inline devrt_queue_stats m_qstats(devrt_runtime* rt) {
  devrt_queue_stats q;
  memset(&q, 0, sizeof q);
  CHECK_OK(devrt_queue_stats_get(rt, &q));
  return q;
}

/* Read-after-write: a slow write on a's stream, a copy on b's stream reads it (b waits for a's
 * event on its own stream), into b's block: the copy has the written value. */
static inline void m_raw(mdev* a, mdev* b, uint64_t n, uint64_t slow) {
  devrt_block x = m_alloc(a, n * 4, "x"), y = m_alloc(b, n * 4, "y");
  CHECK_OK(m_fill(a, a->s[0], a->rt, x, 0, n, 0));
  CHECK_OK(m_fill(b, b->s[0], b->rt, y, 0, n, 0));
  CHECK_OK(m_fill(a, a->s[1], a->rt, x, 7, n, slow));
  CHECK_OK(m_copy(b, b->s[1], b->rt, y, a->rt, x, n, 0));
  CHECK(b_wrong(b->rt, b->s[1], y, n, 7) == 0);
  CHECK_OK(devrt_block_free(a->rt, x));
  CHECK_OK(devrt_block_free(b->rt, y));
}

/* Write-after-read: a slow copy on b's stream reads a's block; a's next write of it waits for that
 * read, so the copy has the old value. Then the free of the block a peer read is deferred behind
 * the peer's slow read (a free too early: the canary below, or ASan on host). */
static inline void m_war_free(mdev* a, mdev* b, uint64_t n, uint64_t slow) {
  devrt_block x = m_alloc(a, n * 4, "x"), y = m_alloc(b, n * 4, "y");
  CHECK_OK(m_fill(a, a->s[0], a->rt, x, 3, n, 0));
  CHECK_OK(m_copy(b, b->s[1], b->rt, y, a->rt, x, n, slow));
  CHECK_OK(m_fill(a, a->s[2], a->rt, x, 4, n, 0));
  CHECK(b_wrong(b->rt, b->s[1], y, n, 3) == 0);
  CHECK(b_wrong(a->rt, a->s[2], x, n, 4) == 0);
  /* deferred free: b reads x slowly, a frees it at once and hands memory of its size out again */
  CHECK_OK(m_copy(b, b->s[1], b->rt, y, a->rt, x, n, slow));
  CHECK_OK(devrt_block_free(a->rt, x));
  devrt_block r[4];
  for (int i = 0; i < 4; i++) {
    r[i] = m_alloc(a, n * 4, "reuse");
    CHECK_OK(m_fill(a, a->s[0], a->rt, r[i], 0xc0ffee00u + (uint32_t)i, n, 0));
  }
  CHECK(b_wrong(b->rt, b->s[1], y, n, 4) == 0);
  for (int i = 0; i < 4; i++) {
    CHECK(b_wrong(a->rt, a->s[0], r[i], n, 0xc0ffee00u + (uint32_t)i) == 0);
    CHECK_OK(devrt_block_free(a->rt, r[i]));
  }
  /* the freed handle is refused by every runtime */
  CHECK_STATUS(m_copy(b, b->s[0], b->rt, y, a->rt, x, n, 0), DEVRT_ERR_STALE_BLOCK);
  CHECK_STATUS(m_fill(a, a->s[0], a->rt, x, 1, n, 0), DEVRT_ERR_STALE_BLOCK);
  CHECK_OK(devrt_block_free(b->rt, y));
}

/* The tracked copy between two devices' blocks, after a slow write, then read back. */
static inline void m_copy_peer(mdev* a, mdev* b, uint64_t n, uint64_t slow) {
  devrt_block x = m_alloc(a, n * 4, "x"), y = m_alloc(b, n * 4, "y");
  CHECK_OK(m_fill(b, b->s[0], b->rt, y, 0, n, 0));
  CHECK_OK(m_fill(a, a->s[1], a->rt, x, 11, n, slow));
  CHECK_OK(devrt_block_copy(b->rt, b->s[1], y, 0, x, 0, n * 4)); /* a's x into b's y, on b */
  CHECK(b_wrong(b->rt, b->s[2], y, n, 11) == 0);
  CHECK_OK(m_fill(b, b->s[0], b->rt, y, 12, n, slow));
  CHECK_OK(devrt_block_copy(a->rt, a->s[2], x, 0, y, 0, n * 4)); /* b's y into a's x, on a */
  CHECK(b_wrong(a->rt, a->s[0], x, n, 12) == 0);
  CHECK_OK(devrt_block_free(a->rt, x));
  CHECK_OK(devrt_block_free(b->rt, y));
}

/* A chain of `steps` submissions alternating devices: step i (on a for even i, b for odd) waits
 * for sem[i % 2] to reach i, copies block i into block i+1 (of the other device) after `slow` ns,
 * and signals sem[(i+1) % 2] = i+1. Block 0 holds v, the others 0: a step that ran before the
 * one it follows copies 0. Submitted in order, or every waiter first (reverse): either way each
 * dependency stays on the devices (host_hops 0), and every block ends with v. */
static inline void m_sem_chain(mdev* a, mdev* b, int steps, uint64_t n, uint64_t slow,
                               bool reverse) {
  mdev* d[2] = {a, b};
  devrt_semaphore* sem[2];
  REQUIRE_OK(devrt_semaphore_create(a->rt, 0, &sem[0]));
  REQUIRE_OK(devrt_semaphore_create(b->rt, 0, &sem[1]));
  devrt_block* blk = calloc((size_t)steps + 1, sizeof *blk);
  const uint32_t v = 0x5eed0000u + (uint32_t)steps;
  for (int i = 0; i <= steps; i++) {
    mdev* o = d[i % 2];
    blk[i] = m_alloc(o, n * 4, "chain");
    CHECK_OK(m_fill(o, o->s[0], o->rt, blk[i], i ? 0 : v, n, 0));
  }
  for (int i = 0; i < 2; i++) CHECK_OK(devrt_stream_synchronize(d[i]->rt, d[i]->s[0]));
  devrt_queue_stats q0[2] = {m_qstats(a->rt), m_qstats(b->rt)};
  for (int k = 0; k < steps; k++) {
    int i = reverse ? steps - 1 - k : k;
    mdev* on = d[i % 2];
    void *dp = bptr(d[(i + 1) % 2]->rt, blk[i + 1]), *sp = bptr(d[i % 2]->rt, blk[i]);
    uint64_t nn = n, delay = slow;
    void* args[] = {&dp, &sp, &nn, &delay};
    devrt_block_use u[] = {{blk[i], DEVRT_ACCESS_READ}, {blk[i + 1], DEVRT_ACCESS_WRITE}};
    devrt_semaphore_value w = {sem[i % 2], (uint64_t)i}, sg = {sem[(i + 1) % 2], (uint64_t)i + 1};
    devrt_submission sub = {.stream = on->s[1],
                            .waits = &w,
                            .nwaits = i > 0,
                            .signals = &sg,
                            .nsignals = 1,
                            .kind = DEVRT_WORK_LAUNCH,
                            .launch = {.kernel = on->k.slow_copy,
                                       .grid = {(unsigned)((n + 255) / 256)},
                                       .block = {256},
                                       .args = args,
                                       .uses = u,
                                       .nuses = 2}};
    CHECK_OK(devrt_queue_submit(on->rt, &sub));
  }
  CHECK_OK(devrt_semaphore_wait(sem[steps % 2], (uint64_t)steps, 60ull * 1000000000ull));
  devrt_queue_stats q1[2] = {m_qstats(a->rt), m_qstats(b->rt)};
  CHECK(q1[0].host_hops == q0[0].host_hops && q1[1].host_hops == q0[1].host_hops);
  CHECK(q1[0].failed == q0[0].failed && q1[1].failed == q0[1].failed);
  CHECK(q1[0].device_waits + q1[1].device_waits > q0[0].device_waits + q0[1].device_waits);
  for (int i = 0; i <= steps; i++) {
    mdev* o = d[i % 2];
    CHECK(b_wrong(o->rt, o->s[2], blk[i], n, v) == 0);
    CHECK_OK(devrt_block_free(o->rt, blk[i]));
  }
  free(blk);
  CHECK_OK(devrt_semaphore_destroy(sem[0]));
  CHECK_OK(devrt_semaphore_destroy(sem[1]));
}

/* An all-reduce (sum) over one block per device, each filled slowly with its rank + 1 first,
 * grouped from this thread; then a copy on another device's other stream reads rank 0's result:
 * every word is 1 + 2 + ... + n. The inputs are freed at once (their frees wait for the
 * collective). */
static inline void m_all_reduce_read(mdev* d, devrt_comm** comms, int ndev, uint64_t n,
                                     uint64_t slow) {
  devrt_block* in = calloc((size_t)ndev, sizeof *in);
  devrt_block* out = calloc((size_t)ndev, sizeof *out);
  mdev* reader = &d[ndev > 1 ? 1 : 0];
  devrt_block y = m_alloc(reader, n * 4, "y"); /* ready before the collective is issued */
  CHECK_OK(m_fill(reader, reader->s[2], reader->rt, y, 0, n, 0));
  CHECK_OK(devrt_stream_synchronize(reader->rt, reader->s[2]));
  for (int r = 0; r < ndev; r++) {
    in[r] = m_alloc(&d[r], n * 4, "in");
    out[r] = m_alloc(&d[r], n * 4, "out");
    CHECK_OK(m_fill(&d[r], d[r].s[1], d[r].rt, in[r], (uint32_t)r + 1, n, slow));
  }
  CHECK_OK(devrt_group_start());
  for (int r = 0; r < ndev; r++)
    CHECK_OK(devrt_all_reduce(comms[r], d[r].s[0], in[r], out[r], n, DEVRT_UINT32, DEVRT_SUM));
  CHECK_OK(devrt_group_end());
  for (int r = 0; r < ndev; r++) CHECK_OK(devrt_block_free(d[r].rt, in[r]));
  uint32_t want = (uint32_t)(ndev * (ndev + 1) / 2);
  CHECK_OK(m_copy(reader, reader->s[2], reader->rt, y, d[0].rt, out[0], n, 0));
  CHECK(b_wrong(reader->rt, reader->s[2], y, n, want) == 0);
  for (int r = 0; r < ndev; r++) {
    CHECK(b_wrong(d[r].rt, d[r].s[2], out[r], n, want) == 0);
    CHECK_OK(devrt_block_free(d[r].rt, out[r]));
  }
  CHECK_OK(devrt_block_free(reader->rt, y));
  free(in), free(out);
}

/* In place (product), all-gather, reduce-scatter and broadcast over one block pair per device
 * (ndev of them), grouped from this thread, each result checked on another stream. */
static inline void m_collectives_data(mdev* d, devrt_comm** comms, int ndev, uint64_t n) {
  devrt_block* in = calloc((size_t)ndev, sizeof *in);
  devrt_block* out = calloc((size_t)ndev, sizeof *out);
  uint32_t fact = 1;
  for (int r = 0; r < ndev; r++) fact *= (uint32_t)r + 1;
  for (int r = 0; r < ndev; r++) {
    in[r] = m_alloc(&d[r], n * 4 * ndev, "in");
    out[r] = m_alloc(&d[r], n * 4 * ndev, "out");
    CHECK_OK(m_fill(&d[r], d[r].s[0], d[r].rt, in[r], (uint32_t)r + 1, n * ndev, 0));
  }
  CHECK_OK(devrt_group_start());
  for (int r = 0; r < ndev; r++)
    CHECK_OK(devrt_all_reduce(comms[r], d[r].s[1], in[r], in[r], n * ndev, DEVRT_UINT32,
                              DEVRT_PROD)); /* in place */
  CHECK_OK(devrt_group_end());
  for (int r = 0; r < ndev; r++) CHECK(b_wrong(d[r].rt, d[r].s[2], in[r], n * ndev, fact) == 0);
  for (int r = 0; r < ndev; r++) /* in[r]'s first n words: r + 1 */
    CHECK_OK(m_fill(&d[r], d[r].s[1], d[r].rt, in[r], (uint32_t)r + 1, n, 0));
  CHECK_OK(devrt_group_start());
  for (int r = 0; r < ndev; r++)
    CHECK_OK(devrt_all_gather(comms[r], d[r].s[1], in[r], out[r], n, DEVRT_UINT32));
  CHECK_OK(devrt_group_end());
  for (int r = 0; r < ndev; r++) {
    uint32_t* h = malloc(n * 4 * ndev);
    CHECK_OK(b_read(d[r].rt, d[r].s[2], out[r], h, n * 4 * ndev));
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < (uint64_t)n * ndev; i++) wrong += h[i] != i / n + 1;
    CHECK(wrong == 0);
    free(h);
  }
  CHECK_OK(devrt_group_start());
  for (int r = 0; r < ndev; r++) /* every out: part k holds k + 1, so part r sums to ndev(r+1) */
    CHECK_OK(devrt_reduce_scatter(comms[r], d[r].s[0], out[r], in[r], n, DEVRT_UINT32, DEVRT_SUM));
  CHECK_OK(devrt_group_end());
  for (int r = 0; r < ndev; r++)
    CHECK(b_wrong(d[r].rt, d[r].s[2], in[r], n, (uint32_t)(ndev * (r + 1))) == 0);
  CHECK_OK(devrt_group_start());
  for (int r = 0; r < ndev; r++) /* from the last rank */
    CHECK_OK(devrt_broadcast(comms[r], d[r].s[0], in[r], out[r], n, DEVRT_UINT32, ndev - 1));
  CHECK_OK(devrt_group_end());
  for (int r = 0; r < ndev; r++)
    CHECK(b_wrong(d[r].rt, d[r].s[2], out[r], n, (uint32_t)(ndev * ndev)) == 0);
  for (int r = 0; r < ndev; r++) {
    CHECK_OK(devrt_block_free(d[r].rt, in[r]));
    CHECK_OK(devrt_block_free(d[r].rt, out[r]));
  }
  free(in), free(out);
}

/* A word that names where it came from: rank `from`, part `to`, index i. */
static inline uint32_t m_word(int from, int to, uint64_t i) {
  return (uint32_t)from * 1000000u + (uint32_t)to * 10000u + (uint32_t)(i % 10000);
}
/* Fills b (n words) with m_word(from, i / part, i % part): written from the host to a staging
 * block, then copied into b on d's stream s, slowly (delay_ns a word batch), not waited for. */
static inline void m_fill_words(mdev* d, devrt_stream s, devrt_block b, int from, uint64_t n,
                                uint64_t part, uint64_t delay_ns) {
  uint32_t* h = malloc(n * 4);
  for (uint64_t i = 0; i < n; i++) h[i] = m_word(from, (int)(i / part), i % part);
  devrt_block t = m_alloc(d, n * 4, "staging");
  CHECK_OK(b_write(d->rt, s, t, h, n * 4));
  CHECK_OK(m_copy(d, s, d->rt, b, d->rt, t, n, delay_ns));
  CHECK_OK(devrt_block_free(d->rt, t)); /* after the copy */
  free(h);
}

/* All-to-all, all-to-allv (rank r sends r + 1 + j words to rank j, at uneven offsets) and a ring
 * of sends and receives (each rank to the next, both directions in one group), over blocks whose
 * inputs are copied in slowly on another stream first (the exchange must wait for them) and freed
 * at once (their frees wait for it); every result is checked word by word on a third stream. */
static inline void m_exchange_data(mdev* d, devrt_comm** comms, int ndev, uint64_t n,
                                   uint64_t slow) {
  size_t k = (size_t)ndev;
  devrt_block* in = calloc(k, sizeof *in);
  devrt_block* out = calloc(k, sizeof *out);
  for (int r = 0; r < ndev; r++) {
    in[r] = m_alloc(&d[r], n * 4 * k, "a2a in");
    out[r] = m_alloc(&d[r], n * 4 * k, "a2a out");
    m_fill_words(&d[r], d[r].s[1], in[r], r, n * k, n, slow); /* part j: m_word(r, j, .) */
  }
  CHECK_OK(devrt_group_start());
  for (int r = 0; r < ndev; r++)
    CHECK_OK(devrt_all_to_all(comms[r], d[r].s[0], in[r], out[r], n, DEVRT_UINT32));
  CHECK_OK(devrt_group_end());
  for (int r = 0; r < ndev; r++) CHECK_OK(devrt_block_free(d[r].rt, in[r]));
  uint32_t* h = malloc(n * 4 * k);
  for (int r = 0; r < ndev; r++) { /* part j of out[r] came from rank j: m_word(j, r, .) */
    CHECK_OK(b_read(d[r].rt, d[r].s[2], out[r], h, n * 4 * k));
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < n * k; i++) wrong += h[i] != m_word((int)(i / n), r, i % n);
    CHECK(wrong == 0);
  }

  /* all-to-allv: rank r's part for j is r + 1 + j words at offset j * P of its send (P = 3n/2),
   * and lands at offset j * n + 1 of j's recv; the rest of each recv keeps its 7s */
  size_t P = n * 3 / 2;
  size_t *sc = calloc(4 * k * k, sizeof *sc), *so = sc + k * k, *rc = so + k * k, *ro = rc + k * k;
  for (int r = 0; r < ndev; r++) {
    in[r] = m_alloc(&d[r], n * 4 * 2 * k, "a2av in");
    m_fill_words(&d[r], d[r].s[1], in[r], r, 2 * n * k, P, slow);
    CHECK_OK(m_fill(&d[r], d[r].s[1], d[r].rt, out[r], 7, n * k, 0));
    for (size_t j = 0; j < k; j++) {
      sc[r * k + j] = (size_t)r + 1 + j, so[r * k + j] = j * P;
      rc[r * k + j] = j + 1 + (size_t)r, ro[r * k + j] = j * n + 1;
    }
  }
  CHECK_OK(devrt_group_start());
  for (int r = 0; r < ndev; r++)
    CHECK_OK(devrt_all_to_allv(comms[r], d[r].s[0], in[r], sc + r * k, so + r * k, out[r],
                               rc + r * k, ro + r * k, DEVRT_UINT32));
  CHECK_OK(devrt_group_end());
  for (int r = 0; r < ndev; r++) CHECK_OK(devrt_block_free(d[r].rt, in[r]));
  for (int r = 0; r < ndev; r++) {
    CHECK_OK(b_read(d[r].rt, d[r].s[2], out[r], h, n * 4 * k));
    uint64_t wrong = 0;
    for (size_t j = 0; j < k; j++) /* from rank j: its part for r; the rest stays 7 */
      for (size_t t = 0; t < rc[r * k + j]; t++) {
        uint32_t* w = &h[ro[r * k + j] + t];
        wrong += *w != m_word((int)j, r, t), *w = 7;
      }
    for (uint64_t i = 0; i < n * k; i++) wrong += h[i] != 7;
    CHECK(wrong == 0);
  }
  free(sc);

  /* a ring: rank r sends part r of its words to r + 1 and receives from r - 1, in one group */
  for (int r = 0; r < ndev; r++) {
    in[r] = m_alloc(&d[r], n * 4, "ring in");
    m_fill_words(&d[r], d[r].s[1], in[r], r, n, n, slow);
  }
  CHECK_OK(devrt_group_start());
  for (int r = 0; r < ndev; r++) {
    CHECK_OK(devrt_send(comms[r], d[r].s[0], in[r], n, DEVRT_UINT32, (r + 1) % ndev));
    CHECK_OK(devrt_recv(comms[r], d[r].s[0], out[r], n, DEVRT_UINT32, (r + ndev - 1) % ndev));
  }
  CHECK_OK(devrt_group_end());
  for (int r = 0; r < ndev; r++) CHECK_OK(devrt_block_free(d[r].rt, in[r]));
  for (int r = 0; r < ndev; r++) {
    CHECK_OK(b_read(d[r].rt, d[r].s[2], out[r], h, n * 4));
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < n; i++) wrong += h[i] != m_word((r + ndev - 1) % ndev, 0, i);
    CHECK(wrong == 0);
    CHECK_OK(devrt_block_free(d[r].rt, out[r]));
  }
  free(h), free(in), free(out);
}

/* Collectives recorded in captures (one per rank, all on this thread): an all-reduce and a ring
 * of sends and receives, each rank's graph replayed three times after a slow write of its input
 * on another stream (each replay must wait for it) and checked on a third; the communicator
 * refuses its destroy while a graph holds its calls; a group that mixes a captured stream with
 * one that is not is refused. */
static inline void m_captured_collectives(mdev* d, devrt_comm** comms, int ndev, uint64_t n,
                                          uint64_t slow) {
  devrt_block *in = calloc((size_t)ndev, sizeof *in), *out = calloc((size_t)ndev, sizeof *out);
  devrt_block* ring = calloc((size_t)ndev, sizeof *ring);
  devrt_graph** g = calloc((size_t)ndev, sizeof *g);
  for (int r = 0; r < ndev; r++) {
    in[r] = m_alloc(&d[r], n * 4, "captured in");
    out[r] = m_alloc(&d[r], n * 4, "captured out");
    ring[r] = m_alloc(&d[r], n * 4, "captured ring");
    CHECK_OK(devrt_stream_synchronize(d[r].rt, d[r].s[0]));
    REQUIRE_OK(devrt_capture_begin(d[r].rt, d[r].s[0]));
  }
  if (ndev > 1) { /* rank 1's stream does not capture: the group is refused, nothing issued */
    CHECK_OK(devrt_group_start());
    CHECK_OK(devrt_all_reduce(comms[0], d[0].s[0], in[0], out[0], n, DEVRT_UINT32, DEVRT_SUM));
    CHECK_OK(devrt_all_reduce(comms[1], d[1].s[1], in[1], out[1], n, DEVRT_UINT32, DEVRT_SUM));
    CHECK_STATUS(devrt_group_end(), DEVRT_ERR_INVALID_STATE);
  }
  CHECK_OK(devrt_group_start());
  for (int r = 0; r < ndev; r++)
    CHECK_OK(devrt_all_reduce(comms[r], d[r].s[0], in[r], out[r], n, DEVRT_UINT32, DEVRT_SUM));
  CHECK_OK(devrt_group_end());
  CHECK_OK(devrt_group_start());
  for (int r = 0; r < ndev; r++) {
    CHECK_OK(devrt_send(comms[r], d[r].s[0], out[r], n, DEVRT_UINT32, (r + 1) % ndev));
    CHECK_OK(devrt_recv(comms[r], d[r].s[0], ring[r], n, DEVRT_UINT32, (r + ndev - 1) % ndev));
  }
  CHECK_OK(devrt_group_end());
  for (int r = 0; r < ndev; r++) REQUIRE_OK(devrt_capture_end(d[r].rt, d[r].s[0], &g[r]));
  CHECK_STATUS(devrt_comm_destroy(comms[0]), DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(), "graphs hold") != NULL);
  for (uint32_t k = 1; k <= 3; k++) {
    for (int r = 0; r < ndev; r++)
      CHECK_OK(m_fill(&d[r], d[r].s[1], d[r].rt, in[r], k * ((uint32_t)r + 1), n, slow));
    for (int r = 0; r < ndev; r++) CHECK_OK(devrt_graph_launch(g[r], d[r].s[0]));
    uint32_t want = k * (uint32_t)(ndev * (ndev + 1) / 2);
    for (int r = 0; r < ndev; r++) {
      CHECK(b_wrong(d[r].rt, d[r].s[2], out[r], n, want) == 0);
      CHECK(b_wrong(d[r].rt, d[r].s[2], ring[r], n, want) == 0);
    }
  }
  for (int r = 0; r < ndev; r++) {
    CHECK_OK(devrt_graph_destroy(g[r]));
    CHECK_OK(devrt_block_free(d[r].rt, in[r]));
    CHECK_OK(devrt_block_free(d[r].rt, out[r]));
    CHECK_OK(devrt_block_free(d[r].rt, ring[r]));
  }
  free(in), free(out), free(ring), free(g);
}

#endif
