/* bench_sem.c: `devrt bench sem`: timeline semaphores and the submission queue against the raw
 * event calls they stand for (launch, event record, stream wait, event sync through the backend):
 * GPU -> GPU hops in both submission orders, device -> host wakes under each completion mode with
 * their CPU cost, host signal -> parked work, long chains, and the CPU an idle runtime burns. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "bench.h"
#include "runtime/runtime.h"

#define BENCH_SUITE "sem"
#define ELEMS 32u /* the tiny kernel: devrt_fill_u32 over ELEMS u32s, grid 1 x block ELEMS */
#define ITERS 200 /* ops (chain steps) per round: few enough that the launch queue never fills */
#define LONG_CHAIN 32768 /* steps of the chain32k rows */
#define WAIT_NS DEVRT_TIMEOUT_INFINITE

typedef struct rtx { /* one runtime and what the rows use on it */
  const char* name;
  devrt_runtime* rt;
  bool owned;
  devrt_stream st[2]; /* A, B */
  devrt_module* mod;
  devrt_launch_desc desc; /* the tiny kernel, no uses */
  void* out;
  uint32_t value;
  uint64_t n;
  void* args[3];
  devrt_semaphore *s, *h; /* s: signalled by device work; h: by the host (parked row) */
  uint64_t sv, hv;        /* their last values: they only grow */
  /* raw side: the same kernel loaded through the backend, on devrt's streams' handles */
  dv_stream* ds[2];
  dv_module* rmod;
  dv_kernel* rk;
  dv_event *ev[2], *bev,
      *wev; /* chain events per stream; a blocking-sync one; the one raw wakes sync */
  uint64_t cpu_ns[2], ops[2]; /* wake bodies' process CPU time and ops: [0] devrt, [1] raw */
  uint64_t park_ns, parks;    /* wait-first chains: time spent parking their submissions */
} rtx;

#define BE(c) ((c)->rt->be)
#define DEV(c) ((c)->rt->dev)
static const unsigned grid1[3] = {1, 1, 1}, block1[3] = {ELEMS, 1, 1};

static uint64_t cpu_ns(void) { /* user + sys of the whole process (every devrt thread included) */
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (uint64_t)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000000ull +
         (uint64_t)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1000ull;
}

static int sync_ab(void* p) {
  rtx* c = p;
  for (int i = 0; i < 2; i++) TRY("stream_synchronize", devrt_stream_synchronize(c->rt, c->st[i]));
  return 0;
}

/* ---- devrt side ---- */
/* A LAUNCH of the tiny kernel on stream A or B: waits ws >= wv (none if ws is NULL), signals s =
 * sv. */
static devrt_status submit(rtx* c, int st, devrt_semaphore* ws, uint64_t wv, uint64_t sv) {
  devrt_semaphore_value w = {ws, wv}, s = {c->s, sv};
  devrt_submission sub = {.stream = c->st[st],
                          .waits = &w,
                          .nwaits = ws != NULL,
                          .signals = &s,
                          .nsignals = 1,
                          .kind = DEVRT_WORK_LAUNCH,
                          .launch = c->desc};
  return devrt_queue_submit(c->rt, &sub);
}

/* Step i runs on stream i%2, waits s >= base+i, signals s = base+i+1. Signal-first submits in
 * order, timed from the first submit. Wait-first parks every step (the last first) behind a host
 * gate on step 0, then times from the gate's signal: the hops as the dispatch thread issues them;
 * the parking itself is reported apart (ns per parked submission). Both end polling for the last
 * value, as the raw chain ends spinning in its event: the rows time the hops, not how a blocking
 * host wait wakes (the wake rows time that). */
static int d_chain(rtx* c, int n, bool wait_first) {
  uint64_t base = c->sv, t0 = bench_now_ns();
  for (int j = 0; j < n; j++) {
    int i = wait_first ? n - 1 - j : j;
    devrt_semaphore* ws = c->s;
    uint64_t wv = base + i;
    if (wait_first && i == 0) ws = c->h, wv = c->hv + 1; /* the gate */
    TRY("devrt_queue_submit", submit(c, i & 1, ws, wv, base + i + 1));
  }
  if (wait_first) {
    uint64_t park = bench_now_ns() - t0;
    bench_exclude(park);
    c->park_ns += park, c->parks += (uint64_t)n;
    TRY("devrt_semaphore_signal", devrt_semaphore_signal(c->h, ++c->hv));
  }
  c->sv = base + n;
  devrt_status st;
  while ((st = devrt_semaphore_wait(c->s, c->sv, 0)) == DEVRT_ERR_TIMEOUT) {}
  TRY("devrt_semaphore_wait", st);
  return 0;
}
static int d_hop_sf(void* p, int n) { return d_chain(p, n, false); }
static int d_hop_wf(void* p, int n) { return d_chain(p, n, true); }

static int d_wake(void* p, int n) {
  rtx* c = p;
  uint64_t t0 = cpu_ns();
  for (int i = 0; i < n; i++) {
    TRY("devrt_queue_submit", submit(c, 0, NULL, 0, ++c->sv));
    TRY("devrt_semaphore_wait", devrt_semaphore_wait(c->s, c->sv, WAIT_NS));
  }
  c->cpu_ns[0] += cpu_ns() - t0, c->ops[0] += (uint64_t)n;
  return 0;
}

/* Parks (wait h >= i, launch, signal s = i), then the host signal releases it. The submit is in
 * the timed body (the harness times whole bodies): the row's name says so. */
static int d_parked(void* p, int n) {
  rtx* c = p;
  for (int i = 0; i < n; i++) {
    ++c->hv, ++c->sv;
    TRY("devrt_queue_submit", submit(c, 0, c->h, c->hv, c->sv));
    TRY("devrt_semaphore_signal", devrt_semaphore_signal(c->h, c->hv));
    TRY("devrt_semaphore_wait", devrt_semaphore_wait(c->s, c->sv, WAIT_NS));
  }
  return 0;
}

/* ---- raw side: the backend's calls (cuLaunchKernel, cuEventRecord, cuStreamWaitEvent,
 * cuEventSynchronize on cuda) ---- */
static int r_chain(void* p, int n) { /* ping-pong: launch, record, the other stream waits */
  rtx* c = p;
  for (int i = 0; i < n; i++) {
    int s = i & 1;
    TRY("launch", BE(c)->launch(c->ds[s], c->rk, grid1, block1, 0, c->args));
    TRY("event_record", BE(c)->event_record(c->ev[s], c->ds[s]));
    if (i + 1 < n) TRY("stream_wait", BE(c)->stream_wait(c->ds[s ^ 1], c->ev[s]));
  }
  TRY("event_sync", BE(c)->event_sync(c->ev[(n - 1) & 1]));
  return 0;
}

static int r_wake(void* p, int n) { /* launch, record, event sync */
  rtx* c = p;
  uint64_t t0 = cpu_ns();
  for (int i = 0; i < n; i++) {
    TRY("launch", BE(c)->launch(c->ds[0], c->rk, grid1, block1, 0, c->args));
    TRY("event_record", BE(c)->event_record(c->wev, c->ds[0]));
    TRY("event_sync", BE(c)->event_sync(c->wev));
  }
  c->cpu_ns[1] += cpu_ns() - t0, c->ops[1] += (uint64_t)n;
  return 0;
}

/* ---- the wake rows' latency and CPU per op ---- */
typedef struct wake {
  const char *runtime, *raw_event;
  int completion;
  unsigned long long spin_ns;
  double d_ns, r_ns, d_cpu_us, r_cpu_us; /* medians; CPU per op over every round */
} wake;

static int wake_row(bench_suite* b, rtx* c, const char* op, int rounds, wake* w) {
  memset(c->cpu_ns, 0, sizeof c->cpu_ns);
  memset(c->ops, 0, sizeof c->ops);
  if (bench_pair(b, op, c, d_wake, r_wake, sync_ab, ITERS, rounds)) return -1;
  *w = (wake){c->name,
              c->wev == c->bev ? "blocking-sync" : "default",
              c->rt->cfg.completion,
              (unsigned long long)c->rt->cfg.wait_spin_ns,
              b->devrt.median,
              b->raw.median,
              c->cpu_ns[0] / 1e3 / (double)c->ops[0],
              c->cpu_ns[1] / 1e3 / (double)c->ops[1]};
  return 0;
}

static const char* mode_name(int m) { return m == DEVRT_COMPLETION_HOSTFN ? "hostfn" : "sync"; }

/* Closes the report: wake CPU per completion mode, idle CPU, the queue's counters, the goals. */
static void report(bench_suite* b, const rtx* c, const wake* w, int nw, double idle_pct,
                   const devrt_queue_stats* q, int nq, bool hops_ok) {
  bool js = b->opts->json;
  char buf[4096] = "";
  if (js)
    bench_cat(buf, sizeof buf,
              "\"goals\":{\"hop_ratio_max\":1.20,\"wake_ratio_max\":1.20,\"idle_cpu_pct_max\":1.0,"
              "\"host_hops\":0},\"wake\":[");
  else {
    bench_end(b);
    printf(
        "rows: ns per chain step (gpu_hop, chain32k: steps alternate streams A and B; each pair "
        "timed\n"
        "  in the same rounds, gpu_hop over 4x the rounds; both end polling the last value) or per "
        "op;\n"
        "  raw chain: launch, record, the other stream waits; raw wake: launch, record, event "
        "sync;\n"
        "  host_sig_parked_w_submit times submit (parked) + host signal + host wait, against a raw "
        "wake\n"
        "wakes per op: latency median; CPU (getrusage user+sys of the whole process) over every "
        "round:\n");
  }
  for (int i = 0; i < nw; i++) {
    const wake* x = &w[i];
    if (js)
      bench_cat(
          buf, sizeof buf,
          "%s{\"runtime\":\"%s\",\"completion\":\"%s\",\"wait_spin_ns\":%llu,\"raw_event\":\"%s\","
          "\"devrt_ns\":%.1f,\"raw_ns\":%.1f,\"devrt_cpu_us_per_op\":%.2f,\"raw_cpu_us_per_op\":%."
          "2f}",
          i ? "," : "", x->runtime, mode_name(x->completion), x->spin_ns, x->raw_event, x->d_ns,
          x->r_ns, x->d_cpu_us, x->r_cpu_us);
    else
      printf(
          "  %-7s %-6s completion, spin %5llu ns: devrt %8.1f ns, %6.2f us CPU; raw (%s event) "
          "%8.1f ns, "
          "%6.2f us CPU\n",
          x->runtime, mode_name(x->completion), x->spin_ns, x->d_ns, x->d_cpu_us, x->raw_event,
          x->r_ns, x->r_cpu_us);
  }
  if (js) {
    if (c->parks)
      bench_cat(buf, sizeof buf, "],\"park_ns_per_submission\":%.1f",
                (double)c->park_ns / (double)c->parks);
    else
      bench_cat(buf, sizeof buf, "]");
    if (idle_pct >= 0)
      bench_cat(buf, sizeof buf, ",\"idle_cpu_pct\":%.3f,\"queue\":{", idle_pct);
    else
      bench_cat(buf, sizeof buf, ",\"idle_cpu_pct\":null,\"queue\":{");
  } else {
    if (idle_pct >= 0)
      printf("idle CPU: %.3f%% of one core over 1 s, %d runtimes alive\n", idle_pct, nq);
    if (c->parks)
      printf(
          "wait-first rows time the hops from the gate's signal; parking them cost %.1f ns per "
          "submission\n",
          (double)c->park_ns / (double)c->parks);
    printf("queue counters (since each runtime was created):\n");
  }
  for (int i = 0; i < nq; i++) {
    const devrt_queue_stats* s = &q[i];
    unsigned long long v[] = {s->submitted,          s->issued_inline, s->parked,
                              s->issued_by_dispatch, s->device_waits,  s->dispatch_wakeups,
                              s->completion_wakeups, s->completions,   s->host_hops};
    if (js)
      bench_cat(buf, sizeof buf,
                "%s\"%s\":{\"submitted\":%llu,\"issued_inline\":%llu,\"parked\":%llu,\"issued_by_"
                "dispatch\":%llu,"
                "\"device_waits\":%llu,\"dispatch_wakeups\":%llu,\"completion_wakeups\":%llu,"
                "\"completions\":%llu,"
                "\"host_hops\":%llu}",
                i ? "," : "", c[i].name, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
    else
      printf(
          "  %-8s submitted %llu, issued inline %llu, parked %llu, issued by dispatch %llu, device "
          "waits %llu,\n"
          "           dispatch wakeups %llu, completion wakeups %llu, completions %llu, host_hops "
          "%llu (must be 0)\n",
          c[i].name, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
  }
  if (js) {
    bench_cat(buf, sizeof buf, "},\"host_hops_ok\":%s", hops_ok ? "true" : "false");
    bench_end_fields(b, buf);
    return;
  }
  printf(
      "goals: gpu_hop rows <= 1.20x raw in either order; wake_dev_to_host <= 1.20x raw; idle CPU < "
      "1%% of a core\n"
      "       (timings are reported, not asserted); host_hops 0 (a GPU -> host -> GPU edge fails "
      "the suite)\n");
}

/* completion < 0: the process-wide runtime; else an owned one whose host waits block at once. */
static int setup(rtx* c, const cli_opts* o, const char* name, int completion) {
  c->name = name;
  if (completion < 0)
    TRY("runtime", devrt_runtime_get(o->ordinal, &c->rt));
  else {
    devrt_config cfg;
    TRY("config_init", devrt_config_init(&cfg));
    cfg.ordinal = o->ordinal, cfg.wait_spin_ns = 0, cfg.completion = completion;
    TRY("runtime_create", devrt_runtime_create(&cfg, &c->rt));
    c->owned = true;
  }
  for (int i = 0; i < 2; i++) {
    TRY("acquire", devrt_stream_acquire(c->rt, DEVRT_ACQUIRE_FAIL, &c->st[i]));
    TRY("stream", dv_stream_get(c->rt, c->st[i], &c->ds[i], "bench sem"));
    TRY("event_create", BE(c)->event_create(DEV(c), 0, &c->ev[i]));
  }
  devrt_kernel* k;
  TRY("module_load", devrt_module_load(c->rt, NULL, &c->mod));
  TRY("kernel_get", devrt_kernel_get(c->mod, "devrt_fill_u32", &k));
  TRY("pool_alloc", devrt_pool_alloc(c->rt, ELEMS * 4, c->st[0], &c->out));
  c->value = 7, c->n = ELEMS;
  c->args[0] = &c->out, c->args[1] = &c->value, c->args[2] = &c->n;
  c->desc =
      (devrt_launch_desc){.kernel = k, .grid = {1, 1, 1}, .block = {ELEMS, 1, 1}, .args = c->args};
  TRY("semaphore_create", devrt_semaphore_create(c->rt, 0, &c->s));
  TRY("semaphore_create", devrt_semaphore_create(c->rt, 0, &c->h));
  TRY("module_load", BE(c)->module_load(DEV(c), NULL, &c->rmod));
  TRY("kernel_get", BE(c)->kernel_get(c->rmod, "devrt_fill_u32", &c->rk));
  TRY("event_create", BE(c)->event_create(DEV(c), DEVRT_EVENT_BLOCKING_SYNC, &c->bev));
  c->wev = c->owned ? c->bev : c->ev[0]; /* blocking waits against a blocking-sync event */
  return sync_ab(c);
}

static void teardown(rtx* c) {
  if (!c->rt) return;
  if (c->st[0] && c->st[1]) sync_ab(c);
  if (c->s) devrt_semaphore_destroy(c->s); /* first: cancels whatever a failed row left parked */
  if (c->h) devrt_semaphore_destroy(c->h);
  dv_event* ev[] = {c->ev[0], c->ev[1], c->bev};
  for (int i = 0; i < 3; i++)
    if (ev[i]) BE(c)->event_destroy(DEV(c), ev[i]);
  if (c->rmod) BE(c)->module_unload(DEV(c), c->rmod);
  if (c->out) devrt_pool_free(c->rt, c->out, c->st[0]);
  if (c->mod) devrt_module_unload(c->rt, c->mod);
  for (int i = 0; i < 2; i++)
    if (c->st[i]) devrt_stream_release(c->rt, c->st[i]);
  if (c->owned) devrt_runtime_destroy(c->rt);
}

int bench_sem(const cli_opts* o) {
  enum { NRT = 3 };
  rtx c[NRT]; /* zeroed: teardown frees what setup got */
  memset(c, 0, sizeof c);
  int rc = setup(&c[0], o, "default", -1) || setup(&c[1], o, "sync", DEVRT_COMPLETION_SYNC) ||
           setup(&c[2], o, "hostfn", DEVRT_COMPLETION_HOSTFN);
  if (rc) {
    for (int i = NRT - 1; i >= 0; i--) teardown(&c[i]);
    return 1;
  }
  /* The hop rows are short (ITERS steps), so they get 4x the rounds, and each pair of rows
   * (either order) is timed in the same rounds: a host that changes speed hits both alike. */
  int rounds = o->rounds > 0 ? o->rounds : 31, hrounds = 4 * rounds + 1,
      lrounds = rounds < 7 ? rounds : 7;
#define HOP(name, fn, n) \
  {.op = name,           \
   .ctx = &c[0],         \
   .devrt_fn = fn,       \
   .raw_fn = r_chain,    \
   .sync = sync_ab,      \
   .iters = n,           \
   .raw_iters = n}
  bench_row hop[] = {HOP("gpu_hop_signal_first", d_hop_sf, ITERS),
                     HOP("gpu_hop_wait_first", d_hop_wf, ITERS)};
  bench_row chain[] = {HOP("chain32k_signal_first", d_hop_sf, LONG_CHAIN),
                       HOP("chain32k_wait_first", d_hop_wf, LONG_CHAIN)};
  wake w[NRT];
  memset(w, 0, sizeof w);
  bench_suite b;
  bench_begin(&b, o, "sem", c[0].rt->info.name, c[0].rt->be->name);
  rc =
      bench_rows(&b, hop, 2, hrounds) || wake_row(&b, &c[0], "wake_dev_to_host", rounds, &w[0]) ||
      wake_row(&b, &c[1], "wake_sync_spin0", rounds, &w[1]) ||
      wake_row(&b, &c[2], "wake_hostfn_spin0", rounds, &w[2]) ||
      bench_pair(&b, "host_sig_parked_w_submit", &c[0], d_parked, r_wake, sync_ab, ITERS, rounds) ||
      bench_rows(&b, chain, 2, lrounds);
#undef HOP
  double idle = -1;
  if (!rc) { /* every runtime alive and idle */
    uint64_t c0 = cpu_ns(), t0 = bench_now_ns();
    nanosleep(&(struct timespec){1, 0}, NULL);
    idle = 100.0 * (double)(cpu_ns() - c0) / (double)(bench_now_ns() - t0);
  }
  devrt_queue_stats q[NRT];
  memset(q, 0, sizeof q);
  uint64_t hops = 0;
  int nw = 0;
  while (nw < NRT && w[nw].runtime) nw++;
  for (int i = 0; i < NRT; i++) {
    devrt_status s = devrt_queue_stats_get(c[i].rt, &q[i]);
    if (s != DEVRT_OK) rc = bench_fail(BENCH_SUITE, "queue_stats_get", s);
    hops += q[i].host_hops;
  }
  report(&b, c, w, nw, idle, q, NRT, hops == 0);
  if (hops)
    fprintf(o->json ? stderr : stdout, "FAIL: %llu host hops (GPU -> host -> GPU edges)\n",
            (unsigned long long)hops);
  for (int i = NRT - 1; i >= 0; i--) teardown(&c[i]);
  return rc || hops ? 1 : 0;
}
