/* bench_launch.c: `devrt bench launch`: recorded launches (devrt_launch) against the raw launch of
 * the same kernel on the same streams (cuLaunchKernel on cuda, the backend's launch on host), one
 * stream and producer -> consumer across two, plus the waits devrt inserts against the minimum. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "bench.h"
#include "runtime/runtime.h"
#ifdef DEVRT_HAVE_CUDA
#include "driver/cuda_driver.h"
#endif

#define BENCH_SUITE "launch"
#define NMAX 16
#define ELEMS 256u /* u32s per block; the kernel runs grid 1 x block ELEMS */
#define ITERS 200  /* ops per round: few enough that the launch queue never fills */
#define COUNTED 32 /* launches of the untimed pass that counts waits */

typedef struct lctx lctx;
typedef struct raw_ops {
  int (*one)(lctx* c, int n);  /* (a): launch on A */
  int (*pair)(lctx* c, int n); /* (b): launch on A, record ev on A, B waits for ev, launch on B */
  int (*racefree)(lctx* c, int n); /* (b), and A first waits for B's previous launch (event back) */
} raw_ops;

struct lctx {
  devrt_runtime* rt;
  devrt_module* mod;
  devrt_kernel* k;
  devrt_stream a, b;
  devrt_block blk[NMAX];
  devrt_block_use use_one[NMAX], use_prod[NMAX], use_cons[NMAX], use_chain[2][2];
  devrt_launch_desc one, prod, cons, chain[2]; /* chain[i] writes block i, reads block 1 - i */
  unsigned turn;
  void *out_a, *out_b; /* what the kernel writes: block 0 on A; an untracked buffer only B uses */
  uint32_t value;
  uint64_t n;
  void *args_a[3], *args_b[3];
  /* raw side: the same image's kernel loaded through the backend; devrt's streams' handles */
  const raw_ops* raw;
  dv_module* rmod;
  dv_kernel* rk;
  dv_stream *sa, *sb;
  dv_event *ev, *back;
};

#define BE(c) ((c)->rt->be)
#define DEV(c) ((c)->rt->dev)

/* ---- devrt side ---- */
static int d_one(void* p, int n) {
  lctx* c = p;
  for (int i = 0; i < n; i++) TRY("devrt_launch", devrt_launch(c->rt, &c->one));
  return 0;
}
static int d_pair(void* p, int n) {
  lctx* c = p;
  for (int i = 0; i < n; i++) {
    TRY("devrt_launch (producer)", devrt_launch(c->rt, &c->prod));
    TRY("devrt_launch (consumer)", devrt_launch(c->rt, &c->cons));
  }
  return 0;
}
static int d_chain(void* p, int n) {
  lctx* c = p;
  for (int i = 0; i < n; i++) TRY("devrt_launch", devrt_launch(c->rt, &c->chain[c->turn ^= 1]));
  return 0;
}
static int sync_ab(void* p) {
  lctx* c = p;
  TRY("stream_synchronize", devrt_stream_synchronize(c->rt, c->a));
  TRY("stream_synchronize", devrt_stream_synchronize(c->rt, c->b));
  return 0;
}
static int r_one(void* p, int n) { return ((lctx*)p)->raw->one(p, n); }
static int r_pair(void* p, int n) { return ((lctx*)p)->raw->pair(p, n); }
static int r_racefree(void* p, int n) { return ((lctx*)p)->raw->racefree(p, n); }

/* ---- raw side, host backend: the backend's own calls ---- */
static const unsigned grid1[3] = {1, 1, 1}, block1[3] = {ELEMS, 1, 1};
static int h_one(lctx* c, int n) {
  for (int i = 0; i < n; i++)
    TRY("launch", BE(c)->launch(c->sa, c->rk, grid1, block1, 0, c->args_a));
  return 0;
}
static int h_pair(lctx* c, int n) {
  for (int i = 0; i < n; i++) {
    TRY("launch", BE(c)->launch(c->sa, c->rk, grid1, block1, 0, c->args_a));
    TRY("event_record", BE(c)->event_record(c->ev, c->sa));
    TRY("stream_wait", BE(c)->stream_wait(c->sb, c->ev));
    TRY("launch", BE(c)->launch(c->sb, c->rk, grid1, block1, 0, c->args_b));
  }
  return 0;
}
static int h_racefree(lctx* c, int n) {
  for (int i = 0; i < n; i++) {
    TRY("stream_wait", BE(c)->stream_wait(c->sa, c->back));
    TRY("launch", BE(c)->launch(c->sa, c->rk, grid1, block1, 0, c->args_a));
    TRY("event_record", BE(c)->event_record(c->ev, c->sa));
    TRY("stream_wait", BE(c)->stream_wait(c->sb, c->ev));
    TRY("launch", BE(c)->launch(c->sb, c->rk, grid1, block1, 0, c->args_b));
    TRY("event_record", BE(c)->event_record(c->back, c->sb));
  }
  return 0;
}
static const raw_ops host_raw = {h_one, h_pair, h_racefree};

#ifdef DEVRT_HAVE_CUDA
/* ---- raw side, cuda backend: the driver's entry points, called directly ---- */
static const dv_driver* D;
#define CUTRY(what, call)                                                                          \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) return bench_fail(BENCH_SUITE, what, dv_cu_fail(r_, what, "(bench)")); \
  } while (0)
#define CULAUNCH(s, args) \
  D->cuLaunchKernel((CUfunction)c->rk, 1, 1, 1, ELEMS, 1, 1, 0, (CUstream)(s), args, NULL)
static int c_one(lctx* c, int n) {
  for (int i = 0; i < n; i++) CUTRY("cuLaunchKernel", CULAUNCH(c->sa, c->args_a));
  return 0;
}
static int c_pair(lctx* c, int n) {
  for (int i = 0; i < n; i++) {
    CUTRY("cuLaunchKernel", CULAUNCH(c->sa, c->args_a));
    CUTRY("cuEventRecord", D->cuEventRecord((CUevent)c->ev, (CUstream)c->sa));
    CUTRY("cuStreamWaitEvent", D->cuStreamWaitEvent((CUstream)c->sb, (CUevent)c->ev, 0));
    CUTRY("cuLaunchKernel", CULAUNCH(c->sb, c->args_b));
  }
  return 0;
}
static int c_racefree(lctx* c, int n) {
  for (int i = 0; i < n; i++) {
    CUTRY("cuStreamWaitEvent", D->cuStreamWaitEvent((CUstream)c->sa, (CUevent)c->back, 0));
    CUTRY("cuLaunchKernel", CULAUNCH(c->sa, c->args_a));
    CUTRY("cuEventRecord", D->cuEventRecord((CUevent)c->ev, (CUstream)c->sa));
    CUTRY("cuStreamWaitEvent", D->cuStreamWaitEvent((CUstream)c->sb, (CUevent)c->ev, 0));
    CUTRY("cuLaunchKernel", CULAUNCH(c->sb, c->args_b));
    CUTRY("cuEventRecord", D->cuEventRecord((CUevent)c->back, (CUstream)c->sb));
  }
  return 0;
}
static const raw_ops cuda_raw = {c_one, c_pair, c_racefree};
#endif

/* ---- the waits devrt inserts, counted launch by launch in an untimed pass ---- */
typedef struct waits {
  char op[32];
  bool pair;
  uint64_t prod, prod_max, cons, cons_max; /* (a) counts under prod */
  double events;                           /* events recorded per launch */
} waits;

static int count_waits(lctx* c, bool pair, const devrt_launch_desc* one, waits* w) {
  devrt_block_stats s0, s1, s2, first;
  TRY("block_stats_get", devrt_block_stats_get(c->rt, &first));
  for (int i = 0; i < COUNTED; i++) {
    TRY("block_stats_get", devrt_block_stats_get(c->rt, &s0));
    TRY("devrt_launch", devrt_launch(c->rt, pair              ? &c->prod
                                            : one == c->chain ? &c->chain[c->turn ^= 1]
                                                              : one));
    TRY("block_stats_get", devrt_block_stats_get(c->rt, &s1));
    uint64_t d = s1.waits_inserted - s0.waits_inserted;
    w->prod += d, w->prod_max = d > w->prod_max ? d : w->prod_max;
    if (!pair) continue;
    TRY("devrt_launch (consumer)", devrt_launch(c->rt, &c->cons));
    TRY("block_stats_get", devrt_block_stats_get(c->rt, &s2));
    d = s2.waits_inserted - s1.waits_inserted;
    w->cons += d, w->cons_max = d > w->cons_max ? d : w->cons_max;
  }
  TRY("block_stats_get", devrt_block_stats_get(c->rt, &s0));
  w->events = (double)(s0.events_recorded - first.events_recorded) / (COUNTED * (pair ? 2 : 1));
  return sync_ab(c);
}
/* Minimum per launch: 0 on one stream; across streams 1 per consumer launch (the producer's write)
 * and 1 per producer launch (the previous consumer's read, which the next write must follow). */
static bool waits_ok(const waits* w) {
  return w->pair ? w->prod_max <= 1 && w->cons_max <= 1 : w->prod_max == 0;
}

/* Closes the report: the waits of each row against the minimum, and the goals. */
static void report(bench_suite* b, const waits* w, int nw, bool ok) {
  if (b->opts->json) {
    char js[4096] =
        "\"goals\":{\"launch_ratio_max\":1.10,\"xstream_ratio_max\":1.10,\"waits\":\"minimum\"},"
        "\"waits\":[";
    for (int i = 0; i < nw; i++) {
      double p = (double)w[i].prod / COUNTED, q = (double)w[i].cons / COUNTED;
      unsigned long long pm = w[i].prod_max, qm = w[i].cons_max;
      bench_cat(js, sizeof js, "%s{\"op\":\"%s\",\"launches\":%d,\"events_per_launch\":%.2f,",
                i ? "," : "", w[i].op, COUNTED, w[i].events);
      if (w[i].pair)
        bench_cat(js, sizeof js,
                  "\"waits_per_consumer_launch\":%.2f,\"max_per_consumer_launch\":%llu,\"minimum_"
                  "per_consumer_launch\":1,"
                  "\"waits_per_producer_launch\":%.2f,\"max_per_producer_launch\":%llu,\"minimum_"
                  "per_producer_launch\":1}",
                  q, qm, p, pm);
      else
        bench_cat(js, sizeof js,
                  "\"waits_per_launch\":%.2f,\"max_per_launch\":%llu,\"minimum_per_launch\":0}", p,
                  pm);
    }
    bench_cat(js, sizeof js, "],\"waits_ok\":%s", ok ? "true" : "false");
    bench_end_fields(b, js);
    return;
  }
  bench_end(b);
  printf(
      "(b) xstream rows: ns per producer (A) + consumer (B) pair; raw: launch A, record, B waits, "
      "launch B;\n"
      "    racefree rows: raw also makes A wait for B's previous launch, as the next write must\n"
      "waits devrt inserted (untimed pass of %d launches each):\n",
      COUNTED);
  for (int i = 0; i < nw; i++) {
    double p = (double)w[i].prod / COUNTED, q = (double)w[i].cons / COUNTED;
    unsigned long long pm = w[i].prod_max, qm = w[i].cons_max;
    if (w[i].pair)
      printf(
          "  %-22s %.2f per consumer launch (max %llu, minimum 1); %.2f per producer launch (max "
          "%llu, minimum 1); %.2f events recorded per launch\n",
          w[i].op, q, qm, p, pm, w[i].events);
    else
      printf("  %-22s %.2f per launch (max %llu, minimum 0); %.2f events recorded per launch\n",
             w[i].op, p, pm, w[i].events);
  }
  printf(
      "goals: (a) launch_N rows <= 1.10x the raw launch (launch_chain is not a goal row: it shows "
      "the case where\n"
      "       every launch's point must be recorded); (b) xstream rows <= 1.10x the hand-written "
      "version;\n"
      "       never more waits than the minimum (timings are reported, not asserted)\n");
}

static int setup(lctx* c, const cli_opts* o) {
  TRY("runtime", devrt_runtime_get(o->ordinal, &c->rt));
  TRY("acquire", devrt_stream_acquire(c->rt, DEVRT_ACQUIRE_FAIL, &c->a));
  TRY("acquire", devrt_stream_acquire(c->rt, DEVRT_ACQUIRE_FAIL, &c->b));
  TRY("module_load", devrt_module_load(c->rt, NULL, &c->mod));
  TRY("kernel_get", devrt_kernel_get(c->mod, "devrt_fill_u32", &c->k));
  for (int i = 0; i < NMAX; i++) {
    TRY("block_alloc", devrt_block_alloc(c->rt, ELEMS * 4, c->a, "bench launch", &c->blk[i]));
    c->use_one[i] = (devrt_block_use){c->blk[i], i ? DEVRT_ACCESS_READ : DEVRT_ACCESS_WRITE};
    c->use_prod[i] = (devrt_block_use){c->blk[i], DEVRT_ACCESS_WRITE};
    c->use_cons[i] = (devrt_block_use){c->blk[i], DEVRT_ACCESS_READ};
  }
  TRY("block_ptr", devrt_block_ptr(c->rt, c->blk[0], &c->out_a));
  TRY("pool_alloc", devrt_pool_alloc(c->rt, ELEMS * 4, c->b, &c->out_b));
  c->value = 7, c->n = ELEMS;
  c->args_a[0] = &c->out_a, c->args_a[1] = &c->value, c->args_a[2] = &c->n;
  c->args_b[0] = &c->out_b, c->args_b[1] = &c->value, c->args_b[2] = &c->n;
  devrt_launch_desc d = {.kernel = c->k, .grid = {1, 1, 1}, .block = {ELEMS, 1, 1}};
  c->one = c->prod = c->cons = d;
  c->one.stream = c->prod.stream = c->a, c->cons.stream = c->b;
  c->one.args = c->prod.args = c->args_a, c->cons.args = c->args_b;
  c->one.uses = c->use_one, c->prod.uses = c->use_prod, c->cons.uses = c->use_cons;
  for (int i = 0; i < 2; i++) {
    c->use_chain[i][0] = (devrt_block_use){c->blk[i], DEVRT_ACCESS_WRITE};
    c->use_chain[i][1] = (devrt_block_use){c->blk[1 - i], DEVRT_ACCESS_READ};
    c->chain[i] = c->one;
    c->chain[i].uses = c->use_chain[i], c->chain[i].nuses = 2;
  }

  TRY("stream", dv_stream_get(c->rt, c->a, &c->sa, "bench launch"));
  TRY("stream", dv_stream_get(c->rt, c->b, &c->sb, "bench launch"));
  TRY("module_load", BE(c)->module_load(DEV(c), NULL, &c->rmod));
  TRY("kernel_get", BE(c)->kernel_get(c->rmod, "devrt_fill_u32", &c->rk));
  TRY("event_create", BE(c)->event_create(DEV(c), 0, &c->ev));
  TRY("event_create", BE(c)->event_create(DEV(c), 0, &c->back));
  TRY("event_record", BE(c)->event_record(c->back, c->sb));
  c->raw = &host_raw;
#ifdef DEVRT_HAVE_CUDA
  if (!strcmp(BE(c)->name, "cuda")) {
    TRY("driver", dv_driver_get(&D));
    c->raw = &cuda_raw;
  }
#endif
  return sync_ab(c);
}

static void teardown(lctx* c) {
  if (!c->rt) return;
  if (c->a && c->b) sync_ab(c);
  if (c->ev) BE(c)->event_destroy(DEV(c), c->ev);
  if (c->back) BE(c)->event_destroy(DEV(c), c->back);
  if (c->rmod) BE(c)->module_unload(DEV(c), c->rmod);
  if (c->out_b) devrt_pool_free(c->rt, c->out_b, c->b);
  for (int i = 0; i < NMAX; i++)
    if (c->blk[i]) devrt_block_free(c->rt, c->blk[i]);
  devrt_reap_pending(c->rt, DEVRT_REAP_WAIT, NULL);
  if (c->mod) devrt_module_unload(c->rt, c->mod);
  if (c->a) devrt_stream_release(c->rt, c->a);
  if (c->b) devrt_stream_release(c->rt, c->b);
}

int bench_launch(const cli_opts* o) {
  lctx c; /* zeroed: teardown frees what setup got */
  memset(&c, 0, sizeof c);
  if (setup(&c, o)) {
    teardown(&c);
    return 1;
  }
  static const unsigned nblk[] = {1, 4, 16};
  int rounds = o->rounds > 0 ? o->rounds : 31, rc = 0, nw = 0;
  waits w[7];
  memset(w, 0, sizeof w);
  bench_suite b;
  bench_begin(&b, o, "launch", c.rt->info.name, c.rt->be->name);
  for (int i = 0; i < 3 && !rc; i++, nw++) { /* (a) one stream */
    c.one.nuses = nblk[i];
    if (nblk[i] == 1)
      snprintf(w[nw].op, sizeof w[nw].op, "launch_1blk_w");
    else
      snprintf(w[nw].op, sizeof w[nw].op, "launch_%ublk_w1r%u", nblk[i], nblk[i] - 1);
    rc = bench_pair(&b, w[nw].op, &c, d_one, r_one, sync_ab, ITERS, rounds) ||
         count_waits(&c, false, &c.one, &w[nw]);
  }
  if (!rc) { /* (a) a chain: each launch reads what the previous one wrote, so each point is
                recorded */
    snprintf(w[nw].op, sizeof w[nw].op, "launch_chain_w1r1");
    rc = bench_pair(&b, w[nw].op, &c, d_chain, r_one, sync_ab, ITERS, rounds) ||
         count_waits(&c, false, c.chain, &w[nw]);
    nw++;
  }
  for (int i = 0; i < 3 && !rc; i++, nw++) { /* (b) producer on A, consumer on B */
    c.prod.nuses = c.cons.nuses = nblk[i];
    snprintf(w[nw].op, sizeof w[nw].op, "xstream_%ublk_w_r", nblk[i]);
    w[nw].pair = true;
    rc = bench_pair(&b, w[nw].op, &c, d_pair, r_pair, sync_ab, ITERS, rounds) ||
         count_waits(&c, true, NULL, &w[nw]);
  }
  for (int i = 0; i < 3 && !rc; i++) { /* (b) against the hand-written version that has no race */
    char op[32];
    c.prod.nuses = c.cons.nuses = nblk[i];
    snprintf(op, sizeof op, "xstream_%ublk_racefree", nblk[i]);
    rc = bench_pair(&b, op, &c, d_pair, r_racefree, sync_ab, ITERS, rounds);
  }
  bool ok = true;
  for (int i = 0; i < nw; i++) ok = ok && waits_ok(&w[i]);
  report(&b, w, nw, ok);
  if (!rc && !ok) fprintf(o->json ? stderr : stdout, "FAIL: more waits than the minimum\n");
  teardown(&c);
  return rc || !ok ? 1 : 0;
}
