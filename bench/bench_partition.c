/* bench_partition.c: `devrt bench partition`: a latency-critical stream of small kernels beside a
 * saturating background kernel, three ways in one run:
 *   partition: critical in partition 0, background in partition 1 of one layout (green contexts);
 *   plain:     both on plain streams of the primary context, the critical one at the greatest
 *              priority (a DEVRT_LAYOUT_PLAIN_STREAMS layout of the same two partitions);
 *   alone:     the critical kernels with no background, on each of those two critical streams.
 * Critical p50/p99 latency (host: just before devrt_launch to the return of
 * devrt_stream_synchronize) and background throughput (blocks completed per second) per way;
 * then layout creation and destruction against the driver calls they wrap, and partition stream
 * acquire + release against the runtime pool's. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "json.h"
#include "runtime/runtime.h"
#ifdef DEVRT_HAVE_CUDA
#include "driver/cuda_driver.h"
#endif

#define BENCH_SUITE "partition"
#define CRIT_THREADS 128u
#define BG_THREADS 1024u
#define BG_BLOCKS_PER_SM \
  2u                     /* 1024-thread blocks resident per SM (2048 threads per SM, sm_80/sm_90) */
#define BG_MIN_WAVES 16u /* a background kernel runs at least this many full-device waves */
#define MAX_SAMPLES 100000
#define MAX_KERNELS 512 /* background kernels queued at once: below the driver's launch queue */
#define MAX_RAW_STREAMS 64
#define ACQ_ITERS 1000
#define GOAL_P99_RATIO 1.30 /* critical p99 in a partition / alone on the same stream */
#define PLAIN_WORSE_MIN 3.0 /* "many times worse": plain p99 / alone at least this */
#define SHARE_TOLERANCE                                                    \
  0.01 /* background throughput ratio may fall this far below its SM share \
        */

typedef struct params { /* per backend: the GPU's figures, or small ones that exercise every path on
                           host */
  unsigned crit_sms_min;   /* critical partition's SMs (raised to the device's minimum partition) */
  uint64_t crit_ns, bg_ns; /* spin per block */
  int alone_samples,
      min_samples; /* critical samples alone; at least this many beside the background */
  int warmup;
  uint64_t gap_max_ns;      /* random host gap before each sample, uniform in [0, gap_max_ns] */
  uint64_t min_window_ns;   /* the background runs at least this long beside the critical stream */
  uint64_t alone_window_ns; /* background-alone timings run at least this long */
  int create_rounds;
  uint64_t bw_bytes; /* each copy of the bandwidth section */
} params;

static const params cuda_params = {16,     20000,        200000,       1000, 300,       10,
                                   100000, 200000000ull, 100000000ull, 9,    256u << 20};
static const params host_params = {2,     20000,       50000,       40, 20,      3,
                                   20000, 20000000ull, 10000000ull, 5,  1u << 20};

/* Where a critical sample's time went: the host's launch call; launch -> first block start and
 * last block end -> synchronize return (the kernel's %globaltimer stamps against the host clock,
 * each shifted by its minimum over the way's samples: the clocks' offset is unknown); first start
 * -> last end. p50/p99 over the samples, and the mean over the slowest 1% of samples (by total). */
typedef struct part {
  double p50, p99, tail;
} part;
enum { P_CALL, P_QUEUE, P_RUN, P_NOTICE, NPARTS };
static const char* const part_names[NPARTS] = {"launch_call", "to_start", "run", "to_host"};

typedef struct lat { /* one way's critical latency */
  bool ran, bg;
  const char* where;
  int n;
  double p50, p99, max; /* us */
  part parts[NPARTS];   /* us */
} lat;

typedef struct tput { /* one way's background throughput */
  bool ran;
  int kernels, tries, samples; /* samples: critical samples taken inside the window */
  double blocks_per_s, window_ms, kernel_ms;
} tput;

typedef struct pctx {
  const cli_opts* o;
  devrt_runtime* rt;
  bool cuda;
  params p;
  devrt_device_info di;
  devrt_module* mod;
  devrt_kernel *k, *kstamp, *copy;
  devrt_event* ev;
  /* layouts: A = partition (isolated), B = plain streams with priorities */
  devrt_layout_spec spec_a, spec_b;
  unsigned counts[1];
  int prio_b[1];
  devrt_layout_plan plan_a, plan_b;
  bool have_a;
  char skip_a[300];
  devrt_layout *a, *b;
  devrt_partition *a_crit, *a_bg, *b_crit, *b_bg;
  devrt_partition_info ia_crit, ia_bg, ib_crit, ib_bg;
  devrt_stream sa_crit, sa_bg, sb_crit, sb_bg;
  devrt_partition* acq_part; /* the acquire row's partition */
  /* kernels */
  unsigned crit_grid, bg_grid;
  bool bg_grid_lcm;
  uint64_t crit_ns, bg_ns;
  void *crit_args[2], *bg_args[1];
  uint64_t *dstamp, *hstamp,
      *cur_stamp;    /* the critical kernel's stamps: device, host copy, this sample's */
  uint64_t (*ht)[3]; /* per sample: host before launch, after launch, after sync */
  double *samp, *work;
  uint64_t rng;
  double bg_kernel_ns_a, bg_kernel_ns_b; /* one background kernel alone on each background stream */
  /* layout create rows */
  double create_ms[64];
  int ncreate;
  devrt_layout* tmp;
  /* raw create: the driver's calls on cuda, the backend's on host */
  unsigned raw_streams[2];
  dv_green* hg[2];
  dv_stream* hs[2][MAX_RAW_STREAMS];
#ifdef DEVRT_HAVE_CUDA
  const dv_driver* D;
  CUdevice cudev;
  CUgreenCtx cg[2];
  CUstream cs[2][MAX_RAW_STREAMS];
#endif
} pctx;

/* ---- helpers ---- */
static const char* yn(bool b) { return b ? "true" : "false"; }

/* v formatted with fmt into buf (32 bytes), or `none` when !have. */
static const char* num(char* buf, bool have, const char* fmt, double v, const char* none) {
  if (!have) return none;
  snprintf(buf, 32, fmt, v);
  return buf;
}

static uint64_t rnd(pctx* c) { /* xorshift64 */
  c->rng ^= c->rng << 13, c->rng ^= c->rng >> 7, c->rng ^= c->rng << 17;
  return c->rng;
}

static void host_gap(
    pctx* c) { /* busy wait a random time: critical arrivals uncorrelated with the background */
  if (!c->p.gap_max_ns) return;
  uint64_t until = bench_now_ns() + rnd(c) % (c->p.gap_max_ns + 1);
  while (bench_now_ns() < until) {}
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int p99_at(int n) { /* nearest rank of the 99th percentile in n sorted values */
  int i = (99 * n + 99) / 100 - 1;
  return i < 0 ? 0 : i;
}

static void lat_of(lat* l, double* v, int n) { /* v in ns */
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  l->n = n, l->p50 = v[(n - 1) / 2] / 1e3, l->p99 = v[p99_at(n)] / 1e3, l->max = v[n - 1] / 1e3;
  l->ran = true;
}

static devrt_status launch_on(pctx* c, devrt_stream s, bool bg) {
  devrt_launch_desc d = {.stream = s,
                         .kernel = bg ? c->k : c->kstamp,
                         .grid = {bg ? c->bg_grid : c->crit_grid, 1, 1},
                         .block = {bg ? BG_THREADS : CRIT_THREADS, 1, 1},
                         .args = bg ? c->bg_args : c->crit_args};
  return devrt_launch(c->rt, &d);
}

static unsigned long gcd(unsigned long a, unsigned long b) {
  while (b) {
    unsigned long t = a % b;
    a = b, b = t;
  }
  return a;
}

/* ---- critical latency ---- */
/* Sample i: host time from just before the launch to the return of the stream synchronize. */
static int crit_sample(pctx* c, devrt_stream s, int i) {
  host_gap(c);
  uint64_t* t = c->ht[i];
  c->cur_stamp = c->dstamp + (size_t)2 * c->crit_grid * (size_t)i;
  t[0] = bench_now_ns();
  TRY("devrt_launch (critical)", launch_on(c, s, false));
  t[1] = bench_now_ns();
  TRY("devrt_stream_synchronize (critical)", devrt_stream_synchronize(c->rt, s));
  t[2] = bench_now_ns();
  c->samp[i] = (double)(t[2] - t[0]);
  return 0;
}

static void part_of(part* p, double* v, bool shift, const double* total, double cut, int n,
                    double* sorted) {
  double lo = v[0], sum = 0;
  int k = 0;
  for (int i = 1; i < n; i++) lo = v[i] < lo ? v[i] : lo;
  if (!shift) lo = 0;
  for (int i = 0; i < n; i++) {
    v[i] -= lo;
    if (total[i] >= cut) sum += v[i], k++;
  }
  memcpy(sorted, v, sizeof *v * (size_t)n);
  qsort(sorted, (size_t)n, sizeof *v, cmp_double);
  *p = (part){sorted[(n - 1) / 2] / 1e3, sorted[p99_at(n)] / 1e3, k ? sum / k / 1e3 : 0};
}

/* Splits the way's n samples (copies the kernel's stamps back on stream s), then lat_of. */
static int lat_parts(pctx* c, devrt_stream s, int n, lat* l) {
  dv_stream* bs = NULL;
  size_t per = (size_t)2 * c->crit_grid;
  TRY("stream", dv_stream_get(c->rt, s, &bs, "bench partition"));
  TRY("memcpy_async (stamps)",
      c->rt->be->memcpy_async(bs, c->hstamp, c->dstamp, sizeof(uint64_t) * per * (size_t)n));
  TRY("stream_sync (stamps)", c->rt->be->stream_sync(bs));
  double *v = c->work, *sorted = c->work + MAX_SAMPLES, *total = c->work + 2 * (size_t)MAX_SAMPLES;
  memcpy(total, c->samp, sizeof *total * (size_t)n);
  memcpy(sorted, total, sizeof *total * (size_t)n);
  qsort(sorted, (size_t)n, sizeof *total, cmp_double);
  double cut = sorted[p99_at(n)];
  for (int k = 0; k < NPARTS; k++) {
    for (int i = 0; i < n; i++) {
      const uint64_t *t = c->ht[i], *st = c->hstamp + per * (size_t)i;
      uint64_t first = st[0], last = st[1];
      for (size_t b = 1; b < c->crit_grid; b++)
        first = st[2 * b] < first ? st[2 * b] : first,
        last = st[2 * b + 1] > last ? st[2 * b + 1] : last;
      v[i] = k == P_CALL    ? (double)(t[1] - t[0])
             : k == P_QUEUE ? (double)(int64_t)(first - t[0])
             : k == P_RUN   ? (double)(last - first)
                            : (double)(int64_t)(t[2] - last);
    }
    part_of(&l->parts[k], v, k == P_QUEUE || k == P_NOTICE, total, cut, n, sorted);
  }
  lat_of(l, c->samp, n);
  return 0;
}

static int crit_alone(pctx* c, devrt_stream s, lat* l) {
  TRY("devrt_stream_synchronize", devrt_stream_synchronize(c->rt, s));
  for (int i = 0; i < c->p.warmup; i++)
    if (crit_sample(c, s, 0)) return -1;
  for (int i = 0; i < c->p.alone_samples; i++)
    if (crit_sample(c, s, i)) return -1;
  if (lat_parts(c, s, c->p.alone_samples, l)) return -1;
  l->bg = false;
  return 0;
}

/* ---- background throughput ---- */
static int bg_chain(pctx* c, devrt_stream s, int n) {
  for (int i = 0; i < n; i++) TRY("devrt_launch (background)", launch_on(c, s, true));
  return 0;
}

/* Background alone on stream s: a warm-up kernel, two timed ones that size the run, then enough
 * kernels to last alone_window_ns, timed from the first enqueue to the stream synchronize. */
static int bg_alone(pctx* c, devrt_stream s, tput* t, double* kernel_ns) {
  if (bg_chain(c, s, 1)) return -1;
  TRY("devrt_stream_synchronize", devrt_stream_synchronize(c->rt, s));
  uint64_t t0 = bench_now_ns();
  if (bg_chain(c, s, 2)) return -1;
  TRY("devrt_stream_synchronize (background)", devrt_stream_synchronize(c->rt, s));
  double one = (double)(bench_now_ns() - t0) / 2;
  int n = (int)((double)c->p.alone_window_ns / one) + 1;
  n = n < 3 ? 3 : n > MAX_KERNELS ? MAX_KERNELS : n;
  t0 = bench_now_ns();
  if (bg_chain(c, s, n)) return -1;
  TRY("devrt_stream_synchronize (background)", devrt_stream_synchronize(c->rt, s));
  double dt = (double)(bench_now_ns() - t0);
  *kernel_ns = dt / n;
  *t = (tput){true, n, 1, 0, (double)n * c->bg_grid / (dt / 1e9), dt / 1e6, dt / n / 1e6};
  return 0;
}

/* The background (a chain of kernels sized from its alone time to last at least min_window_ns and
 * about min_samples critical samples) beside critical samples taken until the chain completes
 * (an event after its last kernel, queried after each sample). Throughput: the chain's blocks
 * over first enqueue -> completion seen. Fewer samples than min_samples: again, longer (3 tries).
 */
static int with_bg(pctx* c, devrt_stream crit, devrt_stream bg, double kernel_ns, const lat* alone,
                   lat* l, tput* t) {
  double est =
      alone->p50 * 1e3 + (double)c->p.gap_max_ns / 2 + (double)c->bg_ns / 2; /* per sample */
  double want = (double)c->p.min_samples * est;
  if (want < (double)c->p.min_window_ns) want = (double)c->p.min_window_ns;
  int k = (int)(want / kernel_ns) + 1;
  for (int tries = 1;; tries++) {
    k = k < 2 ? 2 : k > MAX_KERNELS ? MAX_KERNELS : k;
    TRY("devrt_stream_synchronize", devrt_stream_synchronize(c->rt, crit));
    TRY("devrt_stream_synchronize", devrt_stream_synchronize(c->rt, bg));
    uint64_t t0 = bench_now_ns();
    if (bg_chain(c, bg, k)) return -1;
    TRY("devrt_event_record", devrt_event_record(c->rt, c->ev, bg));
    for (int i = 0; i < c->p.warmup; i++)
      if (crit_sample(c, crit, 0)) return -1;
    int n = 0;
    bool done = false;
    uint64_t t1 = 0;
    while (n < MAX_SAMPLES) {
      TRY("devrt_event_query", devrt_event_query(c->rt, c->ev, &done));
      if (done) break;
      if (crit_sample(c, crit, n++)) return -1;
    }
    t1 = bench_now_ns();
    TRY("devrt_stream_synchronize (background)", devrt_stream_synchronize(c->rt, bg));
    if (!done) t1 = bench_now_ns(); /* sample cap hit: the chain's end is its synchronize */
    double dt = (double)(t1 - t0);
    if (n >= c->p.min_samples || tries == 3 || k == MAX_KERNELS || n == 0) {
      if (n == 0) {
        fprintf(stderr,
                "bench partition: the background chain of %d kernels ended before any critical "
                "sample\n",
                k);
        return -1;
      }
      if (lat_parts(c, crit, n, l)) return -1;
      l->bg = true;
      *t = (tput){true, k, tries, n, (double)k * c->bg_grid / (dt / 1e9), dt / 1e6, dt / k / 1e6};
      return 0;
    }
    k = (int)((double)k * c->p.min_samples / n * 1.3) + 1;
  }
}

/* ---- memory bandwidth: shared, not partitioned ---- */
typedef struct bw {
  bool ran;
  double alone_us, shared_us;
} bw;
#define BW_SAMPLES 21

static devrt_status copy_on(pctx* c, devrt_stream s, unsigned sms, void** args) {
  devrt_launch_desc d = {
      .stream = s, .kernel = c->copy, .grid = {sms * 8, 1, 1}, .block = {256, 1, 1}, .args = args};
  return devrt_launch(c->rt, &d);
}

/* Median time of a bw_bytes copy on the critical partition: alone, then while the background
 * partition streams copies of its own (a chain that outlasts the samples). */
static int bandwidth(pctx* c, bw* out) {
  uint64_t n = c->p.bw_bytes / 4;
  void *src = NULL, *dst = NULL, *bsrc = NULL, *bdst = NULL;
  void *args[] = {&dst, &src, &n}, *bargs[] = {&bdst, &bsrc, &n};
  devrt_stream cs = c->sa_crit, bs = c->sa_bg;
  int rc = -1;
  double alone[BW_SAMPLES], shared[BW_SAMPLES];
  devrt_status st = devrt_pool_alloc(c->rt, c->p.bw_bytes, cs, &src);
  if (!st) st = devrt_pool_alloc(c->rt, c->p.bw_bytes, cs, &dst);
  if (!st) st = devrt_pool_alloc(c->rt, c->p.bw_bytes, bs, &bsrc);
  if (!st) st = devrt_pool_alloc(c->rt, c->p.bw_bytes, bs, &bdst);
  if (!st) st = devrt_memset_async(c->rt, src, 1, c->p.bw_bytes, cs);
  if (!st) st = devrt_memset_async(c->rt, bsrc, 2, c->p.bw_bytes, bs);
  if (!st) st = devrt_stream_synchronize(c->rt, bs);
  for (int i = -1; !st && i < BW_SAMPLES; i++) { /* i = -1: warm-up */
    uint64_t t0 = bench_now_ns();
    if (!(st = copy_on(c, cs, c->ia_crit.sm_count, args)) &&
        !(st = devrt_stream_synchronize(c->rt, cs)) && i >= 0)
      alone[i] = (double)(bench_now_ns() - t0) / 1e3;
  }
  for (int i = 0; !st && i < 16 * BW_SAMPLES; i++) st = copy_on(c, bs, c->ia_bg.sm_count, bargs);
  for (int i = -1; !st && i < BW_SAMPLES; i++) {
    uint64_t t0 = bench_now_ns();
    if (!(st = copy_on(c, cs, c->ia_crit.sm_count, args)) &&
        !(st = devrt_stream_synchronize(c->rt, cs)) && i >= 0)
      shared[i] = (double)(bench_now_ns() - t0) / 1e3;
  }
  bool done = false;
  if (!st) st = devrt_event_record(c->rt, c->ev, bs);
  if (!st) st = devrt_event_query(c->rt, c->ev, &done); /* the background outlasted the samples? */
  if (!st) st = devrt_stream_synchronize(c->rt, bs);
  if (!st && done)
    fprintf(stderr,
            "bench partition: bandwidth skipped: the background copies ended before the samples\n");
  if (!st) rc = 0;
  if (!st && !done) {
    qsort(alone, BW_SAMPLES, sizeof *alone, cmp_double);
    qsort(shared, BW_SAMPLES, sizeof *shared, cmp_double);
    *out = (bw){true, alone[BW_SAMPLES / 2], shared[BW_SAMPLES / 2]};
  } else if (st)
    rc = bench_fail(BENCH_SUITE, "bandwidth", st);
  void* bufs[] = {src, dst, bsrc, bdst};
  for (int i = 0; i < 4; i++)
    if (bufs[i]) devrt_pool_free(c->rt, bufs[i], i < 2 ? cs : bs);
  devrt_stream_synchronize(c->rt, cs);
  devrt_stream_synchronize(c->rt, bs);
  return rc;
}

/* ---- layout create / destroy: devrt ---- */
static int d_create(void* p, int n) {
  pctx* c = p;
  for (int i = 0; i < n; i++) {
    TRY("devrt_layout_create", devrt_layout_create(c->rt, &c->spec_a, &c->tmp));
    uint64_t e = bench_now_ns();
    devrt_layout_info li;
    TRY("devrt_layout_info_get", devrt_layout_info_get(c->rt, c->tmp, &li));
    if (c->ncreate < (int)(sizeof c->create_ms / sizeof c->create_ms[0]))
      c->create_ms[c->ncreate++] = li.create_ms;
    devrt_status s = devrt_layout_destroy(c->rt, c->tmp);
    c->tmp = NULL;
    TRY("devrt_layout_destroy", s);
    bench_exclude(bench_now_ns() - e);
  }
  return 0;
}
static int d_destroy(void* p, int n) {
  pctx* c = p;
  for (int i = 0; i < n; i++) {
    uint64_t e = bench_now_ns();
    TRY("devrt_layout_create", devrt_layout_create(c->rt, &c->spec_a, &c->tmp));
    bench_exclude(bench_now_ns() - e);
    devrt_status s = devrt_layout_destroy(c->rt, c->tmp);
    c->tmp = NULL;
    TRY("devrt_layout_destroy", s);
  }
  return 0;
}

/* ---- layout create / destroy: raw. One split of the device (one group of the critical
 * partition's size, the remainder), then per partition (group, remainder): a descriptor, a green
 * context, its streams; destroy: the streams, then the green context. ---- */
static void h_raw_destroy(pctx* c) {
  const dv_backend* be = c->rt->be;
  for (int g = 0; g < 2; g++) {
    for (unsigned i = 0; i < MAX_RAW_STREAMS; i++)
      if (c->hs[g][i]) be->stream_destroy(c->rt->dev, c->hs[g][i]), c->hs[g][i] = NULL;
    if (c->hg[g]) be->green_destroy(c->rt->dev, c->hg[g]), c->hg[g] = NULL;
  }
}
static int h_raw_create(pctx* c) { /* host: the backend's calls */
  const dv_backend* be = c->rt->be;
  dv_res dev, grp, rem;
  unsigned n = 1;
  TRY("sm_resource", be->sm_resource(c->rt->dev, &dev));
  TRY("sm_split", be->sm_split(c->rt->dev, &dev, c->counts[0], 0, &grp, &n, &rem));
  const dv_res* part[2] = {&grp, &rem};
  int prio[2] = {c->ia_crit.priority, c->ia_bg.priority};
  for (int g = 0; g < 2; g++) {
    TRY("green_create", be->green_create(c->rt->dev, part[g], 1, &c->hg[g]));
    for (unsigned i = 0; i < c->raw_streams[g]; i++)
      TRY("stream_create", be->stream_create(c->rt->dev, c->hg[g], prio[g], &c->hs[g][i]));
  }
  return 0;
}

#ifdef DEVRT_HAVE_CUDA
#define CUTRY(what, call)                                                                          \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) return bench_fail(BENCH_SUITE, what, dv_cu_fail(r_, what, "(bench)")); \
  } while (0)
static void c_raw_destroy(pctx* c) {
  for (int g = 0; g < 2; g++) {
    for (unsigned i = 0; i < MAX_RAW_STREAMS; i++)
      if (c->cs[g][i]) c->D->cuStreamDestroy(c->cs[g][i]), c->cs[g][i] = NULL;
    if (c->cg[g]) c->D->cuGreenCtxDestroy(c->cg[g]), c->cg[g] = NULL;
  }
}
static int c_raw_create(pctx* c) { /* cuda: the driver's calls */
  const dv_driver* D = c->D;
  CUdevResource dev, part[2];
  unsigned n = 1;
  memset(part, 0, sizeof part);
  CUTRY("cuDeviceGetDevResource",
        D->cuDeviceGetDevResource(c->cudev, &dev, CU_DEV_RESOURCE_TYPE_SM));
  CUTRY("cuDevSmResourceSplitByCount",
        D->cuDevSmResourceSplitByCount(&part[0], &n, &dev, &part[1], 0, c->counts[0]));
  int prio[2] = {c->ia_crit.priority, c->ia_bg.priority};
  for (int g = 0; g < 2; g++) {
    CUdevResourceDesc desc;
    CUTRY("cuDevResourceGenerateDesc", D->cuDevResourceGenerateDesc(&desc, &part[g], 1));
    CUTRY("cuGreenCtxCreate",
          D->cuGreenCtxCreate(&c->cg[g], desc, c->cudev, CU_GREEN_CTX_DEFAULT_STREAM));
    for (unsigned i = 0; i < c->raw_streams[g]; i++)
      CUTRY("cuGreenCtxStreamCreate",
            D->cuGreenCtxStreamCreate(&c->cs[g][i], c->cg[g], CU_STREAM_NON_BLOCKING, prio[g]));
  }
  return 0;
}
#endif

static int raw_create(pctx* c) {
#ifdef DEVRT_HAVE_CUDA
  if (c->cuda) return c_raw_create(c);
#endif
  return h_raw_create(c);
}
static void raw_destroy(pctx* c) {
#ifdef DEVRT_HAVE_CUDA
  if (c->cuda) {
    c_raw_destroy(c);
    return;
  }
#endif
  h_raw_destroy(c);
}
static int r_create(void* p, int n) {
  pctx* c = p;
  for (int i = 0; i < n; i++) {
    int rc = raw_create(c);
    uint64_t e = bench_now_ns();
    raw_destroy(c);
    if (rc) return -1;
    bench_exclude(bench_now_ns() - e);
  }
  return 0;
}
static int r_destroy(void* p, int n) {
  pctx* c = p;
  for (int i = 0; i < n; i++) {
    uint64_t e = bench_now_ns();
    if (raw_create(c)) {
      raw_destroy(c);
      return -1;
    }
    bench_exclude(bench_now_ns() - e);
    raw_destroy(c);
  }
  return 0;
}

/* ---- stream acquire + release: a partition's pool against the runtime's ---- */
static int d_acquire(void* p, int n) {
  pctx* c = p;
  for (int i = 0; i < n; i++) {
    devrt_stream s;
    TRY("devrt_partition_stream_acquire",
        devrt_partition_stream_acquire(c->rt, c->acq_part, DEVRT_ACQUIRE_FAIL, &s));
    TRY("devrt_stream_release", devrt_stream_release(c->rt, s));
  }
  return 0;
}
static int r_acquire(void* p, int n) {
  pctx* c = p;
  for (int i = 0; i < n; i++) {
    devrt_stream s;
    TRY("devrt_stream_acquire", devrt_stream_acquire(c->rt, DEVRT_ACQUIRE_FAIL, &s));
    TRY("devrt_stream_release", devrt_stream_release(c->rt, s));
  }
  return 0;
}

/* ---- setup and teardown ---- */
static int partitions_of(pctx* c, devrt_layout* l, devrt_partition** crit, devrt_partition** bg,
                         devrt_partition_info* icrit, devrt_partition_info* ibg,
                         devrt_stream* scrit, devrt_stream* sbg) {
  TRY("devrt_layout_partition", devrt_layout_partition(c->rt, l, 0, crit));
  TRY("devrt_layout_partition", devrt_layout_partition(c->rt, l, 1, bg));
  TRY("devrt_partition_info_get", devrt_partition_info_get(c->rt, *crit, icrit));
  TRY("devrt_partition_info_get", devrt_partition_info_get(c->rt, *bg, ibg));
  TRY("devrt_partition_stream_acquire",
      devrt_partition_stream_acquire(c->rt, *crit, DEVRT_ACQUIRE_FAIL, scrit));
  TRY("devrt_partition_stream_acquire",
      devrt_partition_stream_acquire(c->rt, *bg, DEVRT_ACQUIRE_FAIL, sbg));
  return 0;
}

static int setup(pctx* c, const cli_opts* o) {
  c->o = o;
  c->rng = 0x9e3779b97f4a7c15ull;
  TRY("runtime", devrt_runtime_get(o->ordinal, &c->rt));
  c->cuda = strcmp(c->rt->be->name, "cuda") == 0;
  c->p = c->cuda ? cuda_params : host_params;
  TRY("device_info_get", devrt_device_info_get(c->rt, &c->di));
  unsigned sms = (unsigned)c->di.sm_count;
  unsigned crit =
      c->p.crit_sms_min > c->di.min_partition_sms ? c->p.crit_sms_min : c->di.min_partition_sms;
  if (crit >= sms) {
    fprintf(stderr,
            "bench partition: the device has %u SMs: no room for a %u-SM critical partition beside "
            "a background one\n",
            sms, crit);
    return -1;
  }
  c->counts[0] = crit;
  c->spec_a = (devrt_layout_spec){
      .sm_counts = c->counts, .count = 1, .remainder = DEVRT_REMAINDER_PARTITION};
  /* The plain layout: the same spec on plain streams of the primary context (the same two
   * partitions, each on every SM), the critical one at the greatest priority; the remainder
   * partition takes the runtime's priority, the least by default. */
  c->prio_b[0] = c->di.priority_greatest;
  c->spec_b = c->spec_a;
  c->spec_b.flags = DEVRT_LAYOUT_PLAIN_STREAMS, c->spec_b.priorities = c->prio_b;

  devrt_status s = devrt_layout_plan_get(c->rt, &c->spec_a, &c->plan_a);
  if (s == DEVRT_OK && c->plan_a.partitions == 2 && c->plan_a.isolated)
    c->have_a = true;
  else if (s == DEVRT_OK)
    snprintf(c->skip_a, sizeof c->skip_a, "the plan gives %u partitions%s", c->plan_a.partitions,
             c->plan_a.isolated ? "" : ", not isolated");
  else if (s == DEVRT_ERR_UNSUPPORTED) {
    snprintf(c->skip_a, sizeof c->skip_a, "UNSUPPORTED: %s", devrt_last_error());
  } else
    return bench_fail(BENCH_SUITE, "devrt_layout_plan_get (partition layout)", s);
  TRY("devrt_layout_plan_get (plain layout)", devrt_layout_plan_get(c->rt, &c->spec_b, &c->plan_b));
  if (c->have_a) { /* a driver may still refuse green contexts (MPS, a virtual GPU): skip, as
                      unsupported */
    s = devrt_layout_create(c->rt, &c->spec_a, &c->a);
    if (s == DEVRT_ERR_UNSUPPORTED) {
      c->have_a = false;
      snprintf(c->skip_a, sizeof c->skip_a, "devrt_layout_create: UNSUPPORTED: %s",
               devrt_last_error());
    } else if (s != DEVRT_OK)
      return bench_fail(BENCH_SUITE, "devrt_layout_create (partition layout)", s);
  }
  if (c->have_a &&
      partitions_of(c, c->a, &c->a_crit, &c->a_bg, &c->ia_crit, &c->ia_bg, &c->sa_crit, &c->sa_bg))
    return -1;
  TRY("devrt_layout_create (plain layout)", devrt_layout_create(c->rt, &c->spec_b, &c->b));
  if (c->plan_b.partitions < 2) {
    fprintf(stderr, "bench partition: the plain layout has %u partitions, not 2\n",
            c->plan_b.partitions);
    return -1;
  }
  if (partitions_of(c, c->b, &c->b_crit, &c->b_bg, &c->ib_crit, &c->ib_bg, &c->sb_crit, &c->sb_bg))
    return -1;
  c->acq_part = c->have_a ? c->a_crit : c->b_crit;

  /* Kernels. The critical grid: one block per SM of its partition. The background grid: at least
   * BG_MIN_WAVES full-device waves, and a whole number of waves both on the full device and on
   * the background partition (so neither side of the throughput ratio pays a partial last wave),
   * when that multiple stays under 4x the minimum. */
  c->crit_grid = c->have_a ? c->ia_crit.sm_count : crit;
  unsigned bg_sms = c->have_a ? c->ia_bg.sm_count : sms - crit;
  unsigned long full = (unsigned long)BG_BLOCKS_PER_SM * sms,
                part = (unsigned long)BG_BLOCKS_PER_SM * bg_sms;
  unsigned long min = full * BG_MIN_WAVES, lcm = full / gcd(full, part) * part;
  unsigned long grid = (min + lcm - 1) / lcm * lcm;
  c->bg_grid_lcm = grid <= 4 * min;
  c->bg_grid = (unsigned)(c->bg_grid_lcm ? grid : min);
  c->crit_ns = c->p.crit_ns, c->bg_ns = c->p.bg_ns;
  c->crit_args[0] = &c->crit_ns, c->crit_args[1] = &c->cur_stamp, c->bg_args[0] = &c->bg_ns;
  TRY("module_load", devrt_module_load(c->rt, NULL, &c->mod));
  TRY("kernel_get", devrt_kernel_get(c->mod, "devrt_spin", &c->k));
  TRY("kernel_get", devrt_kernel_get(c->mod, "devrt_spin_stamp", &c->kstamp));
  TRY("kernel_get", devrt_kernel_get(c->mod, "devrt_copy_u32", &c->copy));
  TRY("event_create", devrt_event_create(c->rt, 0, &c->ev));
  size_t stamps = sizeof(uint64_t) * 2 * c->crit_grid * MAX_SAMPLES;
  TRY("devrt_mem_alloc (stamps)", devrt_mem_alloc(c->rt, stamps, (void**)&c->dstamp));
  c->hstamp = malloc(stamps);
  c->ht = malloc(sizeof *c->ht * MAX_SAMPLES);
  c->samp = malloc(sizeof(double) * MAX_SAMPLES);
  c->work = malloc(sizeof(double) * 3 * MAX_SAMPLES);
  if (!c->samp || !c->work || !c->ht || !c->hstamp) {
    fprintf(stderr, "bench partition: out of memory\n");
    return -1;
  }
  if (c->have_a) {
    c->raw_streams[0] = c->ia_crit.streams < MAX_RAW_STREAMS ? c->ia_crit.streams : MAX_RAW_STREAMS;
    c->raw_streams[1] = c->ia_bg.streams < MAX_RAW_STREAMS ? c->ia_bg.streams : MAX_RAW_STREAMS;
  }
#ifdef DEVRT_HAVE_CUDA
  if (c->cuda) {
    TRY("driver", dv_driver_get(&c->D));
    CUTRY("cuDeviceGet", c->D->cuDeviceGet(&c->cudev, o->ordinal));
  }
#endif
  return 0;
}

static void release_streams(pctx* c) {
  devrt_stream* s[] = {&c->sa_crit, &c->sa_bg, &c->sb_crit, &c->sb_bg};
  for (int i = 0; i < 4; i++)
    if (*s[i]) {
      devrt_stream_synchronize(c->rt, *s[i]);
      devrt_stream_release(c->rt, *s[i]);
      *s[i] = 0;
    }
}

/* The measured layouts, their streams first; -1 when a destroy is refused. */
static int destroy_layouts(pctx* c) {
  int rc = 0;
  release_streams(c);
  devrt_layout** l[] = {&c->a, &c->b};
  for (int i = 0; i < 2; i++)
    if (*l[i]) {
      devrt_status s = devrt_layout_destroy(c->rt, *l[i]);
      if (s != DEVRT_OK) rc = bench_fail(BENCH_SUITE, "devrt_layout_destroy", s);
      *l[i] = NULL;
    }
  return rc;
}

static int teardown(pctx* c) {
  if (!c->rt) return 0;
  if (c->tmp) devrt_layout_destroy(c->rt, c->tmp), c->tmp = NULL;
  raw_destroy(c);
  int rc = destroy_layouts(c);
  if (c->ev) devrt_event_destroy(c->rt, c->ev), c->ev = NULL;
  if (c->mod) devrt_module_unload(c->rt, c->mod), c->mod = NULL;
  free(c->samp), c->samp = NULL;
  free(c->work), c->work = NULL;
  free(c->ht), c->ht = NULL;
  free(c->hstamp), c->hstamp = NULL;
  if (c->dstamp && devrt_mem_free(c->rt, c->dstamp) != DEVRT_OK) rc = -1;
  c->dstamp = NULL;
  return rc;
}

/* ---- the report ---- */
typedef struct stat3 {
  double median, min, max;
} stat3;
static stat3 stat3_of(const double* v, int n) {
  double s[64];
  memcpy(s, v, sizeof *s * (size_t)n);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return (stat3){s[(n - 1) / 2], s[0], s[n - 1]};
}

typedef struct results {
  bw bw;
  lat l_part, l_plain, l_alone_part, l_alone_plain;
  tput t_full, t_palone, t_part, t_plain;
  bool acq, create;
  bench_stat create_d, create_r, destroy_d, destroy_r, acq_d, acq_r;
  stat3 create_ms;
  int ncreate_ms;
} results;

static void json_lat(char* buf, size_t cap, const char* key, const lat* l, bool comma) {
  if (!l->ran) {
    bench_cat(buf, cap, "%s\"%s\":null", comma ? "," : "", key);
    return;
  }
  bench_cat(buf, cap,
            "%s\"%s\":{\"stream\":\"%s\",\"background\":%s,\"samples\":%d,\"p50_us\":%.2f,\"p99_"
            "us\":%.2f,"
            "\"max_us\":%.2f,\"parts_us\":{",
            comma ? "," : "", key, l->where, yn(l->bg), l->n, l->p50, l->p99, l->max);
  for (int k = 0; k < NPARTS; k++)
    bench_cat(buf, cap, "%s\"%s\":{\"p50\":%.2f,\"p99\":%.2f,\"slowest_1pct_mean\":%.2f}",
              k ? "," : "", part_names[k], l->parts[k].p50, l->parts[k].p99, l->parts[k].tail);
  bench_cat(buf, cap, "}}");
}
static void json_tput(char* buf, size_t cap, const char* key, const tput* t, double full,
                      bool comma) {
  if (!t->ran) {
    bench_cat(buf, cap, "%s\"%s\":null", comma ? "," : "", key);
    return;
  }
  bench_cat(
      buf, cap,
      "%s\"%s\":{\"blocks_per_s\":%.1f,\"of_full_alone\":%.4f,\"kernels\":%d,\"window_ms\":%.3f,"
      "\"kernel_ms\":%.4f",
      comma ? "," : "", key, t->blocks_per_s, full > 0 ? t->blocks_per_s / full : 0, t->kernels,
      t->window_ms, t->kernel_ms);
  if (t->samples)
    bench_cat(buf, cap, ",\"critical_samples\":%d,\"tries\":%d", t->samples, t->tries);
  bench_cat(buf, cap, "}");
}

/* Prints text in lines of at most width columns, the first after first, the rest after rest. */
static void wrap_print(const char* first, const char* rest, const char* text, int width) {
  const char* lead = first;
  while (*text) {
    int room = width - (int)strlen(lead), n = (int)strlen(text);
    if (n > room) {
      n = room;
      while (n > 0 && text[n] != ' ') n--;
      if (n == 0) n = room;
    }
    printf("%s%.*s\n", lead, n, text);
    text += n;
    while (*text == ' ') text++;
    lead = rest;
  }
}

static void text_lat(const char* way, const lat* l) {
  if (!l->ran) {
    printf("  %-26s %-34s skipped\n", way, "-");
    return;
  }
  printf("  %-26s %-34s %7d %9.2f %9.2f %9.2f\n   ", way, l->where, l->n, l->p50, l->p99, l->max);
  for (int k = 0; k < NPARTS; k++)
    printf(" %s %.1f/%.1f/%.1f", part_names[k], l->parts[k].p50, l->parts[k].p99, l->parts[k].tail);
  printf("\n");
}
static void text_tput(const char* way, const tput* t, double full) {
  if (!t->ran) {
    printf("  %-44s skipped\n", way);
    return;
  }
  printf("  %-44s %12.4g blocks/s  %6.4f of full alone  (%d kernels of %.3f ms, window %.1f ms",
         way, t->blocks_per_s, full > 0 ? t->blocks_per_s / full : 0, t->kernels, t->kernel_ms,
         t->window_ms);
  if (t->samples) printf(", %d critical samples", t->samples);
  printf(")\n");
}

static void report(bench_suite* b, pctx* c, const results* r) {
  bool js = c->o->json;
  unsigned sms = (unsigned)c->di.sm_count, bg_sms = c->have_a ? c->ia_bg.sm_count : 0;
  double share = c->have_a ? (double)bg_sms / sms : 0,
         full = r->t_full.ran ? r->t_full.blocks_per_s : 0;
  bool g1 = r->l_part.ran && r->l_alone_part.ran, g2 = r->l_plain.ran && r->l_alone_plain.ran,
       g3 = r->t_part.ran && full > 0;
  double rp = g1 ? r->l_part.p99 / r->l_alone_part.p99 : 0,
         rq = g2 ? r->l_plain.p99 / r->l_alone_plain.p99 : 0,
         rt = g3 ? r->t_part.blocks_per_s / full : 0;
  char n1[32], n2[32];
  bool p1 = g1 && rp <= GOAL_P99_RATIO, p2 = g2 && rq >= PLAIN_WORSE_MIN,
       p3 = g3 && rt >= share - SHARE_TOLERANCE;
  const char* create_note =
      "devrt's uneven form rounds each group with a split of the device (its plan) and, for more "
      "than one group, "
      "peels them off one at a time through a temporary green context on each remainder; its time "
      "includes that, "
      "reading each green context's SMs back and the partitions' sub-budgets; raw: one split. "
      "devrt's destroy "
      "synchronizes each (idle) stream before destroying it";
  if (js) {
    char buf[16384] = "";
    if (!c->cuda)
      bench_cat(buf, sizeof buf,
                "\"note\":\"host backend: the figures exercise every path; they say nothing about "
                "a GPU\",");
    bench_cat(
        buf, sizeof buf,
        "\"config\":{\"device_sms\":%u,\"critical_sms_requested\":%u,\"critical_grid\":%u,"
        "\"critical_block\":%u,"
        "\"critical_spin_ns\":%llu,\"background_grid\":%u,\"background_block\":%u,\"background_"
        "spin_ns\":%llu,"
        "\"background_grid_whole_waves\":%s,\"alone_samples\":%d,\"min_samples\":%d,\"warmup\":%d,"
        "\"gap_max_ns\":%llu,\"min_window_ns\":%llu,\"priority_greatest\":%d,\"priority_least\":%d}"
        ",",
        sms, c->counts[0], c->crit_grid, CRIT_THREADS, (unsigned long long)c->crit_ns, c->bg_grid,
        BG_THREADS, (unsigned long long)c->bg_ns, yn(c->bg_grid_lcm), c->p.alone_samples,
        c->p.min_samples, c->p.warmup, (unsigned long long)c->p.gap_max_ns,
        (unsigned long long)c->p.min_window_ns, c->di.priority_greatest, c->di.priority_least);
    if (c->have_a)
      bench_cat(
          buf, sizeof buf,
          "\"partition_layout\":{\"supported\":true,\"critical_sms\":%u,\"background_sms\":%u,"
          "\"background_sm_share\":%.4f,\"isolated\":%s,\"structured_split\":%s,\"streams\":[%u,%u]"
          ","
          "\"priorities\":[%d,%d]},",
          c->ia_crit.sm_count, bg_sms, share, yn(c->ia_crit.isolated && c->ia_bg.isolated),
          yn(c->plan_a.structured_split), c->ia_crit.streams, c->ia_bg.streams, c->ia_crit.priority,
          c->ia_bg.priority);
    else {
      char why[640];
      bench_cat(buf, sizeof buf, "\"partition_layout\":{\"supported\":false,\"reason\":%s},",
                json_quote(why, sizeof why, c->skip_a));
    }
    bench_cat(
        buf, sizeof buf,
        "\"plain_layout\":{\"isolated\":%s,\"sms\":[%u,%u],\"priorities\":[%d,%d]},\"latency\":{",
        yn(c->ib_crit.isolated || c->ib_bg.isolated), c->ib_crit.sm_count, c->ib_bg.sm_count,
        c->ib_crit.priority, c->ib_bg.priority);
    json_lat(buf, sizeof buf, "partition", &r->l_part, false);
    json_lat(buf, sizeof buf, "plain", &r->l_plain, true);
    json_lat(buf, sizeof buf, "alone_partition", &r->l_alone_part, true);
    json_lat(buf, sizeof buf, "alone_plain", &r->l_alone_plain, true);
    bench_cat(buf, sizeof buf,
              "},\"p99_ratio\":{\"partition_vs_alone\":%s,\"plain_vs_alone\":%s},\"background\":{",
              num(n1, g1, "%.3f", rp, "null"), num(n2, g2, "%.3f", rq, "null"));
    json_tput(buf, sizeof buf, "alone_full_device", &r->t_full, full, false);
    json_tput(buf, sizeof buf, "alone_partition", &r->t_palone, full, true);
    json_tput(buf, sizeof buf, "partition", &r->t_part, full, true);
    json_tput(buf, sizeof buf, "plain", &r->t_plain, full, true);
    bench_cat(buf, sizeof buf,
              "},\"background_ratio_partition_vs_full_alone\":%s,\"background_sm_share\":%s",
              num(n1, g3, "%.4f", rt, "null"), num(n2, c->have_a, "%.4f", share, "null"));
    if (r->create)
      bench_cat(
          buf, sizeof buf,
          ",\"layout_create\":{\"create_ms\":{\"median\":%.4f,\"min\":%.4f,\"max\":%.4f,\"n\":%d},"
          "\"wall_ms\":{\"median\":%.4f,\"p10\":%.4f,\"p90\":%.4f},\"raw_ms\":{\"median\":%.4f,"
          "\"p10\":%.4f,"
          "\"p90\":%.4f},\"destroy_ms\":{\"median\":%.4f,\"p10\":%.4f,\"p90\":%.4f},\"raw_destroy_"
          "ms\":{"
          "\"median\":%.4f,\"p10\":%.4f,\"p90\":%.4f},\"note\":\"%s\"}",
          r->create_ms.median, r->create_ms.min, r->create_ms.max, r->ncreate_ms,
          r->create_d.median / 1e6, r->create_d.p10 / 1e6, r->create_d.p90 / 1e6,
          r->create_r.median / 1e6, r->create_r.p10 / 1e6, r->create_r.p90 / 1e6,
          r->destroy_d.median / 1e6, r->destroy_d.p10 / 1e6, r->destroy_d.p90 / 1e6,
          r->destroy_r.median / 1e6, r->destroy_r.p10 / 1e6, r->destroy_r.p90 / 1e6, create_note);
    else
      bench_cat(buf, sizeof buf, ",\"layout_create\":null");
    if (r->acq)
      bench_cat(
          buf, sizeof buf,
          ",\"stream_acquire\":{\"partition_ns\":%.1f,\"runtime_pool_ns\":%.1f,\"ratio\":%.3f,"
          "\"partition\":\"%s\"}",
          r->acq_d.median, r->acq_r.median, r->acq_d.median / r->acq_r.median,
          c->have_a ? "partition layout, partition 0" : "plain layout, partition 0");
    if (r->bw.ran)
      bench_cat(
          buf, sizeof buf,
          ",\"bandwidth\":{\"bytes\":%llu,\"alone_us\":%.1f,\"shared_us\":%.1f,\"slowdown\":%.3f}",
          (unsigned long long)c->p.bw_bytes, r->bw.alone_us, r->bw.shared_us,
          r->bw.shared_us / r->bw.alone_us);
    bench_cat(buf, sizeof buf,
              ",\"goals\":{\"critical_p99_ratio_max\":%.2f,\"plain_p99_ratio_min\":%.1f,"
              "\"background_share_tolerance\":%.2f,\"critical_p99\":%s,\"plain_worse\":%s,"
              "\"background\":%s}",
              GOAL_P99_RATIO, PLAIN_WORSE_MIN, SHARE_TOLERANCE,
              g1 ? (p1 ? "\"pass\"" : "\"miss\"") : "null",
              g2 ? (p2 ? "\"pass\"" : "\"miss\"") : "null",
              g3 ? (p3 ? "\"pass\"" : "\"miss\"") : "null");
    bench_end_fields(b, buf);
    return;
  }
  bench_end(b);
  if (!c->cuda)
    printf(
        "host backend: these figures exercise every path of the suite; they say nothing about a "
        "GPU\n");
  if (r->acq)
    printf(
        "rows: partition_stream_acq_rel: devrt_partition_stream_acquire + devrt_stream_release "
        "(%s) against\n"
        "      devrt_stream_acquire + devrt_stream_release on the runtime's pool (a pool op: no "
        "driver call wraps it)\n",
        c->have_a ? "partition layout, partition 0" : "plain layout, partition 0");
  if (r->create)
    printf(
        "      layout_create / layout_destroy: devrt_layout_create / _destroy of {%u SMs, "
        "remainder} (%u + %u streams)\n"
        "      against the %s: %s, then per partition (group, remainder) %s x streams;\n"
        "      destroy: the streams, then %s (each row excludes the other half of the pair)\n",
        c->counts[0], c->raw_streams[0], c->raw_streams[1],
        c->cuda ? "driver's calls" : "host backend's calls",
        c->cuda ? "cuDeviceGetDevResource + cuDevSmResourceSplitByCount" : "sm_resource + sm_split",
        c->cuda ? "cuDevResourceGenerateDesc + cuGreenCtxCreate + cuGreenCtxStreamCreate"
                : "green_create + stream_create",
        c->cuda ? "cuGreenCtxDestroy" : "green_destroy");
  if (r->create) {
    wrap_print("      note: ", "            ", create_note, 110);
    printf(
        "layout create_ms (devrt_layout_info): median %.3f ms [min %.3f, max %.3f] over %d "
        "creations\n",
        r->create_ms.median, r->create_ms.min, r->create_ms.max, r->ncreate_ms);
  }
  if (c->have_a)
    printf(
        "partition layout: critical partition 0 = %u SMs, background partition 1 = %u SMs of %u "
        "(share %.3f), %s,\n"
        "  priorities %d / %d; plain layout: %u / %u SMs, priorities %d (critical) / %d "
        "(background)\n",
        c->ia_crit.sm_count, bg_sms, sms, share,
        c->ia_crit.isolated && c->ia_bg.isolated ? "isolated" : "NOT isolated", c->ia_crit.priority,
        c->ia_bg.priority, c->ib_crit.sm_count, c->ib_bg.sm_count, c->ib_crit.priority,
        c->ib_bg.priority);
  else
    printf(
        "partition layout skipped: %s\nplain layout: %u / %u SMs, priorities %d (critical) / %d "
        "(background)\n",
        c->skip_a, c->ib_crit.sm_count, c->ib_bg.sm_count, c->ib_crit.priority, c->ib_bg.priority);
  if (c->ib_bg.priority != c->di.priority_least)
    printf(
        "  note: the plain background stream has priority %d, not the least (%d): it takes the "
        "runtime's\n",
        c->ib_bg.priority, c->di.priority_least);
  printf(
      "critical: grid %u x %u threads, devrt_spin %.0f us per block; background: grid %u x %u "
      "threads, %.0f us per\n"
      "  block (%s); random host gap 0..%.0f us before each critical launch\n",
      c->crit_grid, CRIT_THREADS, c->crit_ns / 1e3, c->bg_grid, BG_THREADS, c->bg_ns / 1e3,
      c->bg_grid_lcm ? "whole waves on the full device and on the background partition"
                     : "whole waves on the full device only",
      c->p.gap_max_ns / 1e3);
  printf(
      "critical latency, us: host time from just before devrt_launch to the return of "
      "devrt_stream_synchronize;\n"
      "  under each way its parts, p50/p99/mean of the slowest 1%%: the launch call, launch -> "
      "first block start,\n"
      "  first start -> last block end, last end -> synchronize return (the two clock-crossing "
      "parts less their minimum)\n"
      "  %-26s %-34s %7s %9s %9s %9s\n",
      "way", "critical stream", "samples", "p50", "p99", "max");
  text_lat("partition (+ background)", &r->l_part);
  text_lat("alone", &r->l_alone_part);
  text_lat("plain (+ background)", &r->l_plain);
  text_lat("alone", &r->l_alone_plain);
  printf("p99 ratios (against alone on the same stream): partition %s, plain %s\n",
         num(n1, g1, "%.3f", rp, "-"), num(n2, g2, "%.3f", rq, "-"));
  printf("background throughput (blocks completed per second, first enqueue -> chain done):\n");
  text_tput("alone, full device (plain layout's stream)", &r->t_full, full);
  text_tput("alone, its partition", &r->t_palone, full);
  text_tput("beside critical, partition layout", &r->t_part, full);
  text_tput("beside critical, plain layout (low priority)", &r->t_plain, full);
  if (r->bw.ran) {
    double gb =
        (double)c->p.bw_bytes / 1e3; /* bytes read + written per us -> GB/s: 2 * bytes / us / 1e3 */
    printf(
        "memory bandwidth is not partitioned: a %llu MiB copy on the critical partition (%u SMs): "
        "alone %.1f us\n"
        "  (%.0f GB/s), while the background partition copies too %.1f us (%.0f GB/s): %.2fx "
        "slower\n",
        (unsigned long long)(c->p.bw_bytes >> 20), c->ia_crit.sm_count, r->bw.alone_us,
        2 * gb / r->bw.alone_us, r->bw.shared_us, 2 * gb / r->bw.shared_us,
        r->bw.shared_us / r->bw.alone_us);
  }
  printf("goals (reported, not asserted):\n");
  if (g1)
    printf("  %s: critical p99 in a partition %.3fx its alone p99 (goal <= %.2fx)\n",
           p1 ? "pass" : "miss", rp, GOAL_P99_RATIO);
  else
    printf("  skipped: critical p99 in a partition (no partition layout)\n");
  if (g2)
    printf(
        "  %s: critical p99 on plain streams %.3fx its alone p99 (expected many times worse: >= "
        "%.1fx)\n",
        p2 ? "pass" : "miss", rq, PLAIN_WORSE_MIN);
  if (g3)
    printf(
        "  %s: background throughput in its partition %.4f of full-device alone, SM share %.4f "
        "(goal: >= the\n"
        "        share, %.2f tolerance)\n",
        p3 ? "pass" : "miss", rt, share, SHARE_TOLERANCE);
  else
    printf("  skipped: background throughput in its partition (no partition layout)\n");
}

int bench_partition(const cli_opts* o) {
  pctx c; /* zeroed: teardown frees what setup got */
  memset(&c, 0, sizeof c);
  if (setup(&c, o)) {
    teardown(&c);
    return 1;
  }
  results r;
  memset(&r, 0, sizeof r);
  r.l_part.where = r.l_alone_part.where = "partition 0";
  r.l_plain.where = r.l_alone_plain.where = "plain stream, greatest priority";
  int rounds = o->rounds > 0 ? o->rounds : 31;
  int crounds = o->rounds > 0 ? (o->rounds < 60 ? o->rounds : 60) : c.p.create_rounds;
  bench_suite b;
  bench_begin(&b, o, "partition", c.rt->info.name, c.rt->be->name);
  int rc =
      bench_pair(&b, "partition_stream_acq_rel", &c, d_acquire, r_acquire, NULL, ACQ_ITERS, rounds);
  if (!rc) r.acq = true, r.acq_d = b.devrt, r.acq_r = b.raw;
  /* background alone: the full device (the plain layout's background stream), then its partition */
  if (!rc) rc = bg_alone(&c, c.sb_bg, &r.t_full, &c.bg_kernel_ns_b);
  if (!rc && c.have_a) rc = bg_alone(&c, c.sa_bg, &r.t_palone, &c.bg_kernel_ns_a);
  /* critical alone, then beside the background: partition, plain */
  if (!rc && c.have_a) rc = crit_alone(&c, c.sa_crit, &r.l_alone_part);
  if (!rc) rc = crit_alone(&c, c.sb_crit, &r.l_alone_plain);
  if (!rc && c.have_a)
    rc = with_bg(&c, c.sa_crit, c.sa_bg, c.bg_kernel_ns_a, &r.l_alone_part, &r.l_part, &r.t_part);
  if (!rc)
    rc =
        with_bg(&c, c.sb_crit, c.sb_bg, c.bg_kernel_ns_b, &r.l_alone_plain, &r.l_plain, &r.t_plain);
  if (!rc && c.have_a) rc = bandwidth(&c, &r.bw);
  /* layout creation and destruction, with the measured layouts gone (their stream slots free) */
  if (destroy_layouts(&c)) rc = -1;
  bool can_raw = c.have_a;
#ifdef DEVRT_HAVE_CUDA
  if (c.cuda && c.have_a && !c.D->has_green_streams) {
    can_raw = false;
    fprintf(o->json ? stderr : stdout,
            "bench partition: the driver lacks cuGreenCtxStreamCreate: layout rows skipped\n");
  }
#endif
  if (!rc && can_raw) {
    c.ncreate = 0;
    rc = bench_pair(&b, "layout_create", &c, d_create, r_create, NULL, 1, crounds);
    if (!rc) r.create_d = b.devrt, r.create_r = b.raw;
    /* the harness's first devrt round is its warm-up: drop its create_ms */
    if (!rc && c.ncreate > 1)
      r.create_ms = stat3_of(c.create_ms + 1, c.ncreate - 1), r.ncreate_ms = c.ncreate - 1;
    if (!rc) rc = bench_pair(&b, "layout_destroy", &c, d_destroy, r_destroy, NULL, 1, crounds);
    if (!rc) r.destroy_d = b.devrt, r.destroy_r = b.raw, r.create = true;
  }
  if (teardown(&c)) rc = -1;
  report(&b, &c, &r);
  return rc ? 1 : 0;
}
