/* test_queue.c: the submission queue (queue.h) over timeline semaphores: IREE's CTS submission
 * cases, device/host chains in every direction (12 launches and 32768 barriers, reverse order),
 * failure propagation, queued alloc/free, host calls, device loss, refusals, both completion modes,
 * a host signal issuing what it releases on its own thread, graphs as submissions (gated, chained,
 * stale, refused) and submissions recorded into, or refused by, a capture. */
#include <pthread.h>
#include "launch_util.h"

enum { N = 256 };      /* words per block: one 256-thread block per launch */
#define T (20000 * MS) /* a wait that runs out is a failure, never a hang */
#define MiB (1ull << 20)

typedef devrt_semaphore_value sv;
typedef struct list {
  sv* v;
  unsigned n;
} list; /* a submission's waits or signals */
#define L(...) ((list){(sv[]){__VA_ARGS__}, (unsigned)(sizeof((sv[]){__VA_ARGS__}) / sizeof(sv))})
#define NONE ((list){NULL, 0})
#define DROP(...)                         \
  drop((devrt_semaphore*[]){__VA_ARGS__}, \
       sizeof((devrt_semaphore*[]){__VA_ARGS__}) / sizeof(devrt_semaphore*))

/* A runtime with devrt's kernels, two held streams and one for setup and read-back. */
typedef struct ctx {
  devrt_runtime* r;
  kernels k;
  devrt_stream q[2], io;
} ctx;

static pthread_t g_main;

static void ctx_open(ctx* c, devrt_config* cfg) {
  c->r = cfg ? t_runtime_cfg(cfg) : t_runtime();
  k_load(c->r, &c->k);
  c->q[0] = s_get(c->r), c->q[1] = s_get(c->r), c->io = s_get(c->r);
}

static void ctx_close(ctx* c) {
  CHECK_OK(devrt_module_unload(c->r, c->k.mod));
  CHECK_OK(devrt_stream_release(c->r, c->q[0]));
  CHECK_OK(devrt_stream_release(c->r, c->q[1]));
  CHECK_OK(devrt_stream_release(c->r, c->io));
  CHECK_OK(devrt_runtime_destroy(c->r));
}

/* Step i's stream: a pool stream (0) and the two held ones in turn, so neighbours differ. */
static devrt_stream alt(const ctx* c, unsigned i) { return i % 3 ? c->q[i % 3 - 1] : 0; }

static devrt_queue_stats qstats(const ctx* c) {
  devrt_queue_stats st;
  memset(&st, 0, sizeof st);
  CHECK_OK(devrt_queue_stats_get(c->r, &st));
  return st;
}

/* Counters bumped on devrt's threads may trail the signal that woke the test by a moment. */
#define SETTLE(c, st, cond)                                                      \
  do {                                                                           \
    for (int t_ = 0; (st) = qstats(c), !(cond) && t_ < 100; t_++) t_sleep_ms(1); \
    CHECK(cond);                                                                 \
  } while (0)

/* ---- semaphores ---- */

static devrt_semaphore* sem(const ctx* c, uint64_t initial) {
  devrt_semaphore* s = NULL;
  REQUIRE_OK(devrt_semaphore_create(c->r, initial, &s));
  return s;
}

static void drop(devrt_semaphore** s, size_t n) {
  for (size_t i = 0; i < n; i++) CHECK_OK(devrt_semaphore_destroy(s[i]));
}

static uint64_t value(devrt_semaphore* s) {
  uint64_t v = ~0ull;
  CHECK_OK(devrt_semaphore_query(s, &v));
  return v;
}

static bool pending(devrt_semaphore* s, uint64_t v) {
  return devrt_semaphore_wait(s, v, 0) == DEVRT_ERR_TIMEOUT;
}

/* The host wait for v succeeds and the value is exactly v. */
static void reached(devrt_semaphore* s, uint64_t v) {
  CHECK_OK(devrt_semaphore_wait(s, v, T));
  CHECK(value(s) == v);
}

/* s failed with root cause `why` (and `text` in its message when given): a host wait is ABORTED
 * and its message names the root cause's status and carries its message. */
static void expect_failed(devrt_semaphore* s, uint64_t v, devrt_status why, const char* text) {
  CHECK_STATUS(devrt_semaphore_wait(s, v, T), DEVRT_ERR_ABORTED);
  char err[1024];
  snprintf(err, sizeof err, "%s", devrt_last_error());
  devrt_status st = DEVRT_OK;
  const char* msg = NULL;
  CHECK_OK(devrt_semaphore_failure(s, &st, &msg));
  CHECK(st == why);
  CHECK(strstr(err, devrt_status_name(why)) != NULL);
  CHECK(msg && strstr(err, msg) && (!text || strstr(msg, text)));
  if (st != why || !msg || !strstr(err, msg))
    fprintf(stderr, "  want %s; root cause %s \"%s\"; wait said \"%s\"\n", devrt_status_name(why),
            devrt_status_name(st), msg ? msg : "(null)", err);
  uint64_t x;
  CHECK_STATUS(devrt_semaphore_query(s, &x), DEVRT_ERR_ABORTED);
}

/* ---- submissions ---- */

/* Overwrites what the caller handed to devrt_queue_submit: the queue must have copied it. */
static void clobber(void* p, size_t n) {
  for (volatile unsigned char* b = p; n--;) *b++ = 0;
}

static devrt_status q_submit(devrt_runtime* r, devrt_submission sub, list w, list g) {
  sub.waits = w.v, sub.nwaits = w.n, sub.signals = g.v, sub.nsignals = g.n;
  devrt_status st = devrt_queue_submit(r, &sub);
  if (w.v) clobber(w.v, w.n * sizeof *w.v);
  if (g.v) clobber(g.v, g.n * sizeof *g.v);
  return st;
}

static devrt_status barrier(const ctx* c, devrt_stream s, list w, list g) {
  return q_submit(c->r, (devrt_submission){.stream = s, .kind = DEVRT_WORK_BARRIER}, w, g);
}

/* A LAUNCH of devrt_slow_fill_u32 (src 0: dst = v) or devrt_slow_copy_u32 (dst = src) over N
 * words after delay_ns. Untracked unless `tracked`, so only the semaphores order it. Its
 * arguments and use list are zeroed right after the submit. */
static devrt_status q_kern(const ctx* c, devrt_stream s, list w, list g, devrt_block dst,
                           devrt_block src, uint32_t v, uint64_t delay, bool tracked) {
  void *d = bptr(c->r, dst), *sp = bptr(c->r, src);
  uint64_t n = N;
  void* args[] = {&d, src ? (void*)&sp : (void*)&v, &n, &delay};
  devrt_block_use u[] = {{dst, DEVRT_ACCESS_WRITE}, {src, DEVRT_ACCESS_READ}};
  devrt_submission sub = {.stream = s,
                          .kind = DEVRT_WORK_LAUNCH,
                          .launch = {.kernel = src ? c->k.slow_copy : c->k.slow_fill,
                                     .grid = {1},
                                     .block = {256},
                                     .args = args,
                                     .uses = u,
                                     .nuses = tracked ? (src ? 2 : 1) : 0}};
  devrt_status st = q_submit(c->r, sub, w, g);
  clobber(args, sizeof args), clobber(u, sizeof u), clobber(&d, sizeof d), clobber(&sp, sizeof sp);
  clobber(&v, sizeof v), clobber(&n, sizeof n), clobber(&delay, sizeof delay);
  return st;
}

/* Foreign work on a block resolved when the launch is issued (a queued alloc has no address
 * before): host NULL fills it with `byte`, else copies its N words to host. */
typedef struct io_op {
  devrt_runtime* r;
  devrt_block b;
  void* host;
  int byte, calls;
} io_op;

static devrt_status do_io(void* user, devrt_stream s, void* native) {
  (void)native;
  io_op* op = user;
  void* p = NULL;
  op->calls++;
  devrt_status st = devrt_block_ptr(op->r, op->b, &p);
  if (st != DEVRT_OK) return st;
  return op->host ? devrt_memcpy_async(op->r, op->host, p, N * 4, s)
                  : devrt_memset_async(op->r, p, op->byte, N * 4, s);
}

static devrt_status q_io(const ctx* c, devrt_stream s, list w, list g, io_op* op) {
  devrt_block_use u = {op->b, op->host ? DEVRT_ACCESS_READ : DEVRT_ACCESS_WRITE};
  devrt_submission sub = {.stream = s,
                          .kind = DEVRT_WORK_LAUNCH,
                          .launch = {.enqueue = do_io, .user = op, .uses = &u, .nuses = 1}};
  devrt_status st = q_submit(c->r, sub, w, g);
  clobber(&u, sizeof u);
  return st;
}

static devrt_status q_alloc(const ctx* c, devrt_stream s, list w, list g, size_t size,
                            devrt_block* out) {
  return q_submit(
      c->r,
      (devrt_submission){.stream = s, .kind = DEVRT_WORK_ALLOC, .alloc = {size, "queued", out}}, w,
      g);
}

static devrt_status q_free(const ctx* c, devrt_stream s, list w, list g, devrt_block b) {
  return q_submit(c->r, (devrt_submission){.stream = s, .kind = DEVRT_WORK_FREE, .block = b}, w, g);
}

/* A host call: records how often, where and in what order it ran, and what `probe` had completed.
 */
typedef struct hcall {
  struct hcall* self; /* the user pointer must arrive intact */
  int* counter;       /* when set: seen = (*counter)++ */
  int calls, seen;
  bool on_submitter;
  devrt_semaphore* probe;
  uint64_t probed;
  devrt_status ret;
} hcall;

static devrt_status on_host(void* user) {
  hcall* h = user;
  h->calls++;
  h->on_submitter = pthread_equal(pthread_self(), g_main);
  if (h->self == h && h->counter) h->seen = (*h->counter)++;
  if (h->self == h && h->probe && devrt_semaphore_query(h->probe, &h->probed) != DEVRT_OK)
    h->probed = 0;
  return h->self == h ? h->ret : DEVRT_ERR_INVALID_ARGUMENT;
}

static devrt_status host_call(const ctx* c, list w, list g, hcall* h) {
  h->self = h;
  return q_submit(c->r, (devrt_submission){.kind = DEVRT_WORK_HOST_CALL, .host = {on_host, h}}, w,
                  g);
}

/* ---- blocks ---- */

static devrt_block blk(const ctx* c, uint32_t v) {
  devrt_block b = 0;
  REQUIRE_OK(devrt_block_alloc(c->r, N * 4, c->io, "queue", &b));
  CHECK_OK(k_fill(c->r, &c->k, c->io, b, v, N, 0, true));
  CHECK_OK(devrt_stream_synchronize(c->r, c->io));
  return b;
}

static void release(const ctx* c, devrt_block* b, int n) {
  for (int i = 0; i < n; i++) CHECK_OK(devrt_block_free(c->r, b[i]));
}

/* Words of b that differ from v, read untracked: only the semaphore the caller waited for orders
 * the read after the writer (N + 1 when it cannot be read). */
static uint64_t peek(const ctx* c, devrt_block b, uint32_t v) {
  uint32_t h[N];
  void* p = bptr(c->r, b);
  uint64_t wrong = N + 1;
  if (p && devrt_memcpy_async(c->r, h, p, sizeof h, c->io) == DEVRT_OK &&
      devrt_stream_synchronize(c->r, c->io) == DEVRT_OK)
    for (int i = wrong = 0; i < N; i++) wrong += h[i] != v;
  return wrong;
}

/* ---- IREE CTS submission cases ---- */

/* A barrier with no waits is issued at once and signals. */
static void barrier_no_waits(const ctx* c) {
  devrt_semaphore* s = sem(c, 0);
  devrt_queue_stats st0 = qstats(c), st;
  CHECK_OK(barrier(c, 0, NONE, L({s, 1})));
  st = qstats(c);
  CHECK(st.submitted - st0.submitted == 1 && st.issued_inline - st0.issued_inline == 1 &&
        st.parked == st0.parked);
  reached(s, 1);
  DROP(s);
}

/* A submission waiting on a host semaphore is parked; its signal keeps its old value until the
 * host signals, then the dispatch thread issues it. */
static void wait_then_host_signal(const ctx* c) {
  devrt_semaphore *a = sem(c, 0), *b = sem(c, 10);
  devrt_queue_stats st0 = qstats(c), st;
  CHECK_OK(barrier(c, 0, L({a, 1}), L({b, 11})));
  CHECK(value(b) == 10 && pending(b, 11));
  CHECK(qstats(c).parked - st0.parked == 1);
  CHECK_OK(devrt_semaphore_signal(a, 1));
  reached(b, 11);
  SETTLE(c, st, st.issued_by_dispatch - st0.issued_by_dispatch == 1);
  DROP(a, b);
}

/* Two waits, two signals: one wait met is not enough. */
static void multiple_waits_signals(const ctx* c) {
  devrt_semaphore *a = sem(c, 0), *b = sem(c, 0), *d = sem(c, 0), *e = sem(c, 0);
  CHECK_OK(barrier(c, c->q[0], L({a, 1}, {b, 1}), L({d, 1}, {e, 1})));
  CHECK_OK(devrt_semaphore_signal(a, 1));
  t_sleep_ms(5); /* time for a queue that issued on the first wait to get it wrong */
  CHECK(value(d) == 0 && value(e) == 0);
  CHECK_OK(devrt_semaphore_signal(b, 1));
  devrt_semaphore* both[] = {d, e};
  CHECK_OK(devrt_semaphores_wait(2, both, (uint64_t[]){1, 1}, DEVRT_WAIT_ALL, T, NULL));
  DROP(a, b, d, e);
}

/* Wait ALL / ANY over a host semaphore and one a parked launch signals. */
static void wait_all_host_device(const ctx* c) {
  devrt_semaphore *h = sem(c, 0), *g = sem(c, 0), *d = sem(c, 0);
  devrt_block a = blk(c, 0);
  CHECK_OK(q_kern(c, c->q[0], L({g, 1}), L({d, 1}), a, 0, 0x77, 5 * MS, false));
  devrt_semaphore* hd[] = {h, d};
  const uint64_t one[] = {1, 1};
  unsigned idx = 99;
  CHECK(devrt_semaphores_wait(2, hd, one, DEVRT_WAIT_ALL, 0, NULL) == DEVRT_ERR_TIMEOUT);
  CHECK(devrt_semaphores_wait(2, hd, one, DEVRT_WAIT_ANY, 0, NULL) == DEVRT_ERR_TIMEOUT);
  CHECK_OK(devrt_semaphore_signal(h, 1));
  CHECK_OK(devrt_semaphores_wait(2, hd, one, DEVRT_WAIT_ANY, 0, &idx));
  CHECK(idx == 0);
  CHECK(devrt_semaphores_wait(2, hd, one, DEVRT_WAIT_ALL, 0, NULL) == DEVRT_ERR_TIMEOUT);
  CHECK_OK(devrt_semaphore_signal(g, 1));
  CHECK_OK(devrt_semaphores_wait(2, hd, one, DEVRT_WAIT_ALL, T, NULL));
  CHECK(peek(c, a, 0x77) == 0);
  release(c, &a, 1);
  DROP(h, g, d);
}

/* IntermediateSemaphoreBetweenDeviceBatches, the waiter submitted before its signaller. */
static void before_signaller(const ctx* c) {
  devrt_semaphore *x = sem(c, 0), *y = sem(c, 0);
  devrt_block a = blk(c, 0), b = blk(c, 0);
  devrt_queue_stats st0 = qstats(c), st;
  CHECK_OK(q_kern(c, c->q[1], L({x, 1}), L({y, 1}), b, a, 0, 0, false));
  CHECK_OK(q_kern(c, c->q[0], NONE, L({x, 1}), a, 0, 0xbe, 10 * MS, false));
  st = qstats(c);
  CHECK(st.parked - st0.parked == 1 && st.issued_inline - st0.issued_inline == 1);
  reached(y, 1);
  CHECK(peek(c, b, 0xbe) == 0);
  devrt_block all[] = {a, b};
  release(c, all, 2);
  DROP(x, y);
}

/* Two waiters on one signaller (submitted after them) that signals `sig`: TwoBatchesWaitingOn-
 * OneFormerBatch (sig 1, waits 1 and 1) and waits on different values (sig 3, waits 1 and 2). */
static void fan_out(const ctx* c, uint64_t sig, uint64_t w1, uint64_t w2) {
  devrt_semaphore *x = sem(c, 0), *y = sem(c, 0), *z = sem(c, 0);
  devrt_block a = blk(c, 0), b = blk(c, 0), d = blk(c, 0);
  CHECK_OK(q_kern(c, c->q[1], L({x, w1}), L({y, 1}), b, a, 0, 0, false));
  CHECK_OK(q_kern(c, 0, L({x, w2}), L({z, 1}), d, a, 0, 0, false));
  CHECK_OK(q_kern(c, c->q[0], NONE, L({x, sig}), a, 0, 0xfa, 10 * MS, false));
  devrt_semaphore* yz[] = {y, z};
  CHECK_OK(devrt_semaphores_wait(2, yz, (uint64_t[]){1, 1}, DEVRT_WAIT_ALL, T, NULL));
  CHECK(value(x) == sig && peek(c, b, 0xfa) == 0 && peek(c, d, 0xfa) == 0);
  devrt_block all[] = {a, b, d};
  release(c, all, 3);
  DROP(x, y, z);
}

/* Waits on values already passed (by the host, or scheduled by a device signal) issue at once. */
static void passed_value(const ctx* c) {
  devrt_semaphore *x = sem(c, 0), *y = sem(c, 0);
  devrt_queue_stats st0 = qstats(c), st;
  CHECK_OK(devrt_semaphore_signal(x, 5));
  CHECK_OK(barrier(c, c->q[0], L({x, 3}), L({y, 1})));
  CHECK_OK(barrier(c, 0, NONE, L({x, 8})));
  CHECK_OK(barrier(c, c->q[1], L({x, 6}), L({y, 2})));
  st = qstats(c);
  CHECK(st.issued_inline - st0.issued_inline == 3 && st.parked == st0.parked);
  reached(y, 2);
  reached(x, 8);
  DROP(x, y);
}

/* A failed wait semaphore fails everything downstream with its root cause (a launch that never
 * runs included); a submission made after the failure too; a destroyed one cancels its waiters. */
static void propagate_failure(const ctx* c) {
  devrt_semaphore *a = sem(c, 0), *b = sem(c, 0), *d = sem(c, 0), *e = sem(c, 0), *f = sem(c, 0);
  devrt_semaphore *w = sem(c, 0), *x = sem(c, 0);
  devrt_block blkx = blk(c, 5);
  devrt_queue_stats st0 = qstats(c), st;
  CHECK_OK(barrier(c, 0, L({a, 1}), L({b, 1})));
  CHECK_OK(q_kern(c, c->q[0], L({b, 1}), L({d, 1}), blkx, 0, 6, 0, true));
  CHECK_OK(barrier(c, c->q[1], L({b, 1}), L({e, 1})));
  CHECK_OK(devrt_semaphore_fail(a, DEVRT_ERR_OUT_OF_RESOURCES, "root cause 4711"));
  CHECK_OK(devrt_semaphore_fail(a, DEVRT_ERR_TIMEOUT, "too late")); /* the first failure wins */
  expect_failed(a, 1, DEVRT_ERR_OUT_OF_RESOURCES, "root cause 4711");
  expect_failed(b, 1, DEVRT_ERR_OUT_OF_RESOURCES, "root cause 4711");
  expect_failed(d, 1, DEVRT_ERR_OUT_OF_RESOURCES, "root cause 4711");
  expect_failed(e, 1, DEVRT_ERR_OUT_OF_RESOURCES, "root cause 4711");
  CHECK_OK(barrier(c, 0, L({e, 1}), L({f, 1})));
  expect_failed(f, 1, DEVRT_ERR_OUT_OF_RESOURCES, "root cause 4711");
  CHECK(peek(c, blkx, 5) == 0); /* the launch never ran */
  CHECK_OK(barrier(c, c->q[0], L({w, 1}), L({x, 1})));
  CHECK_OK(devrt_semaphore_destroy(w));
  expect_failed(x, 1, DEVRT_ERR_CANCELLED, NULL);
  SETTLE(c, st, st.failed - st0.failed == 5);
  release(c, &blkx, 1);
  DROP(a, b, d, e, f, x);
}

/* ---- chains ---- */

/* 12 launches submitted in reverse (waiters before signallers) on alternating streams, all
 * untracked: step 0 fills b0 slowly, step i copies b[i-1] into b[i]; a host signal starts it. */
static void reverse_chain(const ctx* c) {
  enum { STEPS = 12 };
  devrt_block b[STEPS];
  for (int i = 0; i < STEPS; i++) b[i] = blk(c, 0);
  devrt_semaphore* s = sem(c, 0);
  devrt_queue_stats st0 = qstats(c), st;
  for (unsigned i = STEPS; i-- > 0;) /* step i waits s >= i + 1 and signals i + 2 */
    CHECK_OK(q_kern(c, alt(c, i), L({s, i + 1}), L({s, i + 2}), b[i], i ? b[i - 1] : 0, 0xc0de,
                    i ? MS : 10 * MS, false));
  st = qstats(c);
  CHECK(st.parked - st0.parked == STEPS && st.issued_inline == st0.issued_inline && value(s) == 0);
  CHECK_OK(devrt_semaphore_signal(s, 1));
  reached(s, STEPS + 1);
  uint64_t bad = 0;
  for (int i = 0; i < STEPS; i++) bad += peek(c, b[i], 0xc0de);
  CHECK(bad == 0);
  SETTLE(c, st, st.issued_by_dispatch - st0.issued_by_dispatch == STEPS);
  CHECK(st.host_hops == 0 && st.device_waits > st0.device_waits);
  release(c, b, STEPS);
  DROP(s);
}

/* A host signal issues the device work it releases on its own thread: once it returns, the
 * released barrier's signal is scheduled, so a submission waiting for that is issued at once, and
 * the dispatch thread never wakes. On a fresh runtime no other thread is issuing released work,
 * so the signal's try-lock succeeds. */
static void signal_issues_here(void) {
  ctx c;
  ctx_open(&c, NULL);
  devrt_semaphore *h = sem(&c, 0), *y = sem(&c, 0), *z = sem(&c, 0);
  devrt_queue_stats st0 = qstats(&c), st;
  CHECK_OK(barrier(&c, c.q[0], L({h, 1}), L({y, 1})));
  CHECK_OK(devrt_semaphore_signal(h, 1));
  st = qstats(&c);
  CHECK(st.parked - st0.parked == 1 && st.issued_by_dispatch - st0.issued_by_dispatch == 1);
  CHECK_OK(barrier(&c, c.q[1], L({y, 1}), L({z, 1})));
  st = qstats(&c);
  CHECK(st.issued_inline - st0.issued_inline == 1 && st.parked - st0.parked == 1);
  reached(z, 1);
  CHECK(qstats(&c).dispatch_wakeups == st0.dispatch_wakeups); /* nothing went through it */
  DROP(h, y, z);
  ctx_close(&c);
}

/* A host signal that releases a chain (steps parked in reverse, each waiting for the one before)
 * issues the whole chain before it returns, up to the queue's bound of 256 levels beyond the
 * first, without the dispatch thread; a longer chain issues at least that much here and the
 * dispatch thread the rest. */
static void signal_issues_chain_here(unsigned steps) {
  ctx c;
  ctx_open(&c, NULL);
  devrt_semaphore *h = sem(&c, 0), *s = sem(&c, 0);
  for (unsigned i = steps; i-- > 0;) /* step i waits s >= i (step 0: h >= 1), signals i + 1 */
    CHECK_OK(barrier(&c, alt(&c, i), i ? L({s, i}) : L({h, 1}), L({s, i + 1})));
  devrt_queue_stats st0 = qstats(&c), st;
  CHECK_OK(devrt_semaphore_signal(h, 1));
  st = qstats(&c);
  uint64_t here = st.issued_by_dispatch - st0.issued_by_dispatch, bound = 257;
  if (steps <= bound) {
    CHECK(here == steps && st.dispatch_wakeups == st0.dispatch_wakeups);
  } else {
    CHECK(here >= bound); /* the dispatch thread may already have issued more */
    SETTLE(&c, st, st.issued_by_dispatch - st0.issued_by_dispatch == steps);
  }
  reached(s, steps);
  CHECK(qstats(&c).host_hops == 0);
  DROP(h, s);
  ctx_close(&c);
}

/* device -> device: the waiter's wait is already scheduled, so it is issued at once and ordered
 * on the GPU behind a signaller that is still running. */
static void chain_dd(const ctx* c) {
  devrt_semaphore *x = sem(c, 0), *y = sem(c, 0);
  devrt_block a = blk(c, 0), b = blk(c, 0);
  devrt_queue_stats st0 = qstats(c), st;
  CHECK_OK(q_kern(c, c->q[0], NONE, L({x, 1}), a, 0, 0xdd, 20 * MS, false));
  CHECK_OK(q_kern(c, c->q[1], L({x, 1}), L({y, 1}), b, a, 0, 0, false));
  st = qstats(c);
  CHECK(st.issued_inline - st0.issued_inline == 2 && st.parked == st0.parked);
  reached(y, 1);
  CHECK(peek(c, b, 0xdd) == 0 && qstats(c).host_hops == 0);
  devrt_block all[] = {a, b};
  release(c, all, 2);
  DROP(x, y);
}

/* device -> host: the host waits for a launch's signal, then reads what it wrote. */
static void chain_dh(const ctx* c) {
  devrt_semaphore* x = sem(c, 0);
  devrt_block a = blk(c, 0);
  CHECK_OK(q_kern(c, 0, NONE, L({x, 1}), a, 0, 0xd4, 20 * MS, false));
  reached(x, 1);
  CHECK(peek(c, a, 0xd4) == 0);
  release(c, &a, 1);
  DROP(x);
}

/* host -> device: a host signal releases parked device work (which had not run before). */
static void chain_hd(const ctx* c) {
  devrt_semaphore *h = sem(c, 0), *y = sem(c, 0);
  devrt_block a = blk(c, 0xa1), b = blk(c, 0);
  CHECK_OK(q_kern(c, c->q[0], L({h, 1}), L({y, 1}), b, a, 0, 0, false));
  t_sleep_ms(10);
  CHECK(value(y) == 0 && peek(c, b, 0) == 0);
  CHECK_OK(devrt_semaphore_signal(h, 1));
  reached(y, 1);
  CHECK(peek(c, b, 0xa1) == 0);
  devrt_block all[] = {a, b};
  release(c, all, 2);
  DROP(h, y);
}

/* host -> host: host calls chained by one semaphore, submitted in reverse: each runs once, in
 * order, on devrt's dispatch thread, with its user pointer. */
static void chain_hh(const ctx* c) {
  enum { HOPS = 8 };
  hcall h[HOPS];
  int counter = 0;
  memset(h, 0, sizeof h);
  devrt_semaphore* t = sem(c, 0);
  devrt_queue_stats st0 = qstats(c), st;
  for (unsigned i = HOPS; i-- > 0;) {
    h[i].counter = &counter, h[i].seen = -1;
    CHECK_OK(host_call(c, L({t, i + 1}), L({t, i + 2}), &h[i]));
  }
  CHECK(qstats(c).parked - st0.parked == HOPS);
  CHECK_OK(devrt_semaphore_signal(t, 1));
  reached(t, HOPS + 1);
  CHECK(counter == HOPS);
  for (int i = 0; i < HOPS; i++) CHECK(h[i].calls == 1 && h[i].seen == i && !h[i].on_submitter);
  SETTLE(c, st, st.host_calls - st0.host_calls == HOPS);
  DROP(t);
}

/* The small chains, run under each completion mode. */
static void chains(ctx* c, int mode) {
  CHECK(qstats(c).completion == (devrt_completion_mode)mode);
  barrier_no_waits(c);
  wait_then_host_signal(c);
  multiple_waits_signals(c);
  wait_all_host_device(c);
  before_signaller(c);
  fan_out(c, 1, 1, 1);
  fan_out(c, 3, 1, 2);
  passed_value(c);
  propagate_failure(c);
  reverse_chain(c);
  chain_dd(c);
  chain_dh(c);
  chain_hd(c);
  chain_hh(c);
  devrt_queue_stats st = qstats(c);
  printf(
      "%s completion: %llu submitted, %llu inline, %llu parked, %llu by dispatch, %llu device "
      "waits, "
      "%llu host hops, %llu completions\n",
      mode == DEVRT_COMPLETION_SYNC ? "sync" : "hostfn", (unsigned long long)st.submitted,
      (unsigned long long)st.issued_inline, (unsigned long long)st.parked,
      (unsigned long long)st.issued_by_dispatch, (unsigned long long)st.device_waits,
      (unsigned long long)st.host_hops, (unsigned long long)st.completions);
  CHECK(st.host_hops == 0 && st.completions > 0 && st.completion_wakeups > 0 &&
        st.dispatch_wakeups > 0);
  CHECK(!st.device_lost && st.refused == 0);
}

/* 32768 barriers, each waiting s >= i and signalling i + 1, on alternating streams: in signal
 * order every one is issued at once; in reverse all but the last submitted are parked. */
static void barrier_chain(const ctx* c, bool reverse) {
  enum { LONG = 32768 };
  devrt_semaphore* s = sem(c, 0);
  devrt_queue_stats st0 = qstats(c), st;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (unsigned k = 0; k < LONG; k++) {
    unsigned i = reverse ? LONG - 1 - k : k;
    devrt_status r = barrier(c, alt(c, i), L({s, i}), L({s, i + 1}));
    if (r != DEVRT_OK) {
      CHECK_OK(r);
      break;
    }
  }
  reached(s, LONG);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  st = qstats(c);
  CHECK(st.submitted - st0.submitted == LONG);
  CHECK(st.parked - st0.parked == (reverse ? LONG - 1 : 0));
  CHECK(st.issued_inline - st0.issued_inline == (reverse ? 1 : LONG));
  SETTLE(c, st, st.issued_by_dispatch - st0.issued_by_dispatch == (reverse ? LONG - 1 : 0));
  CHECK(st.host_hops == 0);
  printf("%d barriers (%s): %.1f ms\n", LONG, reverse ? "reverse" : "signal first",
         (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
  DROP(s);
}

/* A launch whose use list names a block freed after its submit fails when issued: everything
 * downstream fails with STALE_BLOCK, upstream stays fine, the launch downstream never runs. */
static void failure_in_chain(const ctx* c) {
  devrt_semaphore *up = sem(c, 0), *gate = sem(c, 0), *mid = sem(c, 0), *d1 = sem(c, 0),
                  *d2 = sem(c, 0);
  devrt_block x = blk(c, 0), y = blk(c, 0), z = blk(c, 5);
  devrt_queue_stats st0 = qstats(c), st;
  CHECK_OK(q_kern(c, c->q[0], NONE, L({up, 1}), x, 0, 0x0b, 0, true));
  CHECK_OK(q_kern(c, c->q[1], L({up, 1}, {gate, 1}), L({mid, 1}), y, 0, 0x0c, 0, true));
  CHECK_OK(barrier(c, 0, L({mid, 1}), L({d1, 1})));
  CHECK_OK(q_kern(c, c->q[0], L({d1, 1}), L({d2, 1}), z, 0, 0x0d, 0, true));
  CHECK_OK(devrt_block_free(c->r, y));
  CHECK_OK(devrt_semaphore_signal(gate, 1));
  CHECK(devrt_last_error()[0] == 0); /* the failure goes to the released work's signals */
  expect_failed(d2, 1, DEVRT_ERR_STALE_BLOCK, NULL);
  expect_failed(mid, 1, DEVRT_ERR_STALE_BLOCK, NULL);
  expect_failed(d1, 1, DEVRT_ERR_STALE_BLOCK, NULL);
  reached(up, 1);
  CHECK(value(gate) == 1 && peek(c, x, 0x0b) == 0 && peek(c, z, 5) == 0);
  SETTLE(c, st, st.failed - st0.failed == 3);
  devrt_block live[] = {x, z};
  release(c, live, 2);
  DROP(up, gate, mid, d1, d2);
}

/* Host calls wait for their waits to complete (a host gate; a slow launch's signal, already
 * scheduled), and one returning an error fails both its signals with that status. */
static void host_calls(const ctx* c) {
  devrt_semaphore *gate = sem(c, 0), *done = sem(c, 0), *x = sem(c, 0), *f1 = sem(c, 0),
                  *f2 = sem(c, 0);
  devrt_queue_stats st0 = qstats(c), st;
  hcall g = {0}, p = {0}, e = {.ret = DEVRT_ERR_DEPENDENCY_FAILED};
  CHECK_OK(host_call(c, L({gate, 1}), L({done, 1}), &g));
  t_sleep_ms(20);
  CHECK(g.calls == 0 && value(done) == 0);
  CHECK_OK(devrt_semaphore_signal(gate, 1));
  reached(done, 1);
  CHECK(g.calls == 1 && !g.on_submitter);

  devrt_block a = blk(c, 0);
  CHECK_OK(q_kern(c, c->q[0], NONE, L({x, 1}), a, 0, 7, 50 * MS, false));
  p.probe = x;
  CHECK_OK(host_call(c, L({x, 1}), L({done, 2}), &p));
  reached(done, 2);
  CHECK(p.calls == 1 && p.probed == 1 && !p.on_submitter);

  CHECK_OK(host_call(c, L({gate, 1}), L({f1, 1}, {f2, 1}), &e));
  expect_failed(f1, 1, DEVRT_ERR_DEPENDENCY_FAILED, NULL);
  expect_failed(f2, 1, DEVRT_ERR_DEPENDENCY_FAILED, NULL);
  CHECK(e.calls == 1 && !e.on_submitter);
  SETTLE(c, st, st.host_calls - st0.host_calls == 3 && st.failed - st0.failed == 1);
  release(c, &a, 1);
  DROP(gate, done, x, f1, f2);
}

/* IREE ChainedAllocaDealloca: per round a queued alloc, a fill, a read back and a queued free,
 * submitted alloc first (it returns the handle) then in reverse; 32 rounds, one host start. */
static void alloc_chain(const ctx* c) {
  enum { ROUNDS = 32 };
  static uint32_t host[ROUNDS][N];
  devrt_block h[ROUNDS];
  io_op fill[ROUNDS], rd[ROUNDS];
  devrt_resource* res = NULL;
  devrt_resource_figures f0, f1;
  REQUIRE_OK(devrt_runtime_resource(c->r, &res));
  CHECK_OK(devrt_reap_pending(c->r, DEVRT_REAP_WAIT, NULL));
  CHECK_OK(devrt_resource_query(res, &f0));
  memset(host, 0, sizeof host);
  devrt_semaphore* t = sem(c, 0);
  devrt_queue_stats st0 = qstats(c), st;
  for (unsigned r = 0; r < ROUNDS; r++) { /* step j of round r waits t >= 4r + j + 1, signals + 1 */
    uint64_t v = 4 * r + 1;
    h[r] = 0;
    CHECK_OK(q_alloc(c, alt(c, r), L({t, v}), L({t, v + 1}), N * 4, &h[r]));
    CHECK(h[r] != 0);
    void* p;
    CHECK_STATUS(devrt_block_ptr(c->r, h[r], &p), DEVRT_ERR_INVALID_STATE);
    fill[r] = (io_op){.r = c->r, .b = h[r], .byte = 0x10 + (int)r};
    rd[r] = (io_op){.r = c->r, .b = h[r], .host = host[r]};
    CHECK_OK(q_free(c, alt(c, r + 2), L({t, v + 3}), L({t, v + 4}), h[r]));
    CHECK_OK(q_io(c, alt(c, r + 1), L({t, v + 2}), L({t, v + 3}), &rd[r]));
    CHECK_OK(q_io(c, alt(c, r), L({t, v + 1}), L({t, v + 2}), &fill[r]));
  }
  CHECK(qstats(c).parked - st0.parked == 4 * ROUNDS);
  CHECK_OK(devrt_semaphore_signal(t, 1));
  reached(t, 4 * ROUNDS + 1);
  uint64_t bad = 0;
  for (unsigned r = 0; r < ROUNDS; r++) {
    CHECK(fill[r].calls == 1 && rd[r].calls == 1);
    for (int i = 0; i < N; i++) bad += host[r][i] != (0x10u + r) * 0x01010101u;
    void* p;
    CHECK_STATUS(devrt_block_ptr(c->r, h[r], &p), DEVRT_ERR_STALE_BLOCK);
  }
  CHECK(bad == 0);
  CHECK_OK(devrt_reap_pending(c->r, DEVRT_REAP_WAIT, NULL));
  CHECK_OK(devrt_resource_query(res, &f1));
  CHECK(f1.live_bytes == f0.live_bytes && f1.pending_bytes == 0);
  SETTLE(c, st,
         st.issued_by_dispatch - st0.issued_by_dispatch == 4 * ROUNDS && st.failed == st0.failed);
  DROP(t);
}

/* A queued alloc over the budget (parked, then issued inline) fails its signals and what waits on
 * them with OVER_BUDGET; its handle goes stale and nothing leaks. */
static void alloc_over_budget(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.budget_bytes = MiB;
  ctx o;
  ctx_open(&o, &cfg);
  devrt_semaphore *gate = sem(&o, 0), *a = sem(&o, 0), *f = sem(&o, 0), *a2 = sem(&o, 0);
  devrt_block h = 0, h2 = 0;
  void* p;
  CHECK_OK(q_alloc(&o, 0, L({gate, 1}), L({a, 1}), 4 * MiB, &h));
  CHECK(h != 0);
  CHECK_STATUS(devrt_block_ptr(o.r, h, &p), DEVRT_ERR_INVALID_STATE);
  CHECK_OK(q_free(&o, o.q[0], L({a, 1}), L({f, 1}), h));
  CHECK_OK(devrt_semaphore_signal(gate, 1));
  expect_failed(a, 1, DEVRT_ERR_OVER_BUDGET, NULL);
  expect_failed(f, 1, DEVRT_ERR_OVER_BUDGET, NULL);
  CHECK_STATUS(devrt_block_ptr(o.r, h, &p), DEVRT_ERR_STALE_BLOCK);
  CHECK_OK(q_alloc(&o, o.q[1], NONE, L({a2, 1}), 4 * MiB, &h2));
  expect_failed(a2, 1, DEVRT_ERR_OVER_BUDGET, NULL);
  CHECK(h2 != 0 && h2 != h);
  CHECK_STATUS(devrt_block_ptr(o.r, h2, &p), DEVRT_ERR_STALE_BLOCK);
  devrt_resource* res = NULL;
  devrt_resource_figures fg;
  REQUIRE_OK(devrt_runtime_resource(o.r, &res));
  CHECK_OK(devrt_reap_pending(o.r, DEVRT_REAP_WAIT, NULL));
  CHECK_OK(devrt_resource_query(res, &fg));
  CHECK(fg.live_bytes == 0 && fg.pending_bytes == 0 && bstats(o.r).blocks_live == 0);
  devrt_queue_stats st;
  SETTLE(&o, st, st.failed == 3);
  DROP(gate, a, f, a2);
  ctx_close(&o);
}

/* Each bad field is refused with nothing queued, signalled or allocated; 64 waits and 64
 * signals are fine, 65 are not. */
static void refused(const ctx* c) {
  devrt_semaphore *s = sem(c, 5), *z = sem(c, 0), *y = sem(c, 0),
                  *many[DEVRT_QUEUE_MAX_SIGNALS + 1];
  for (unsigned i = 0; i <= DEVRT_QUEUE_MAX_SIGNALS; i++) many[i] = sem(c, 0);
  devrt_block stale = blk(c, 0), out = 0;
  release(c, &stale, 1);
  devrt_stream dead = s_get(c->r);
  CHECK_OK(devrt_stream_release(c->r, dead));
  devrt_submission bar = {.kind = DEVRT_WORK_BARRIER, .signals = (sv[]){{z, 1}}, .nsignals = 1};
  CHECK_STATUS(devrt_queue_submit(NULL, &bar), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_queue_submit(c->r, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  devrt_queue_stats none;
  CHECK_STATUS(devrt_queue_stats_get(NULL, &none), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_queue_stats_get(c->r, NULL), DEVRT_ERR_INVALID_ARGUMENT);

  devrt_queue_stats st0 = qstats(c), st;
  devrt_block_stats b0 = bstats(c->r);
  const uint64_t max = DEVRT_SEMAPHORE_MAX_VALUE;
  static sv waits[DEVRT_QUEUE_MAX_WAITS + 1], sigs[DEVRT_QUEUE_MAX_SIGNALS + 1];
#define FILL_MAX()                                        \
  for (unsigned i = 0; i <= DEVRT_QUEUE_MAX_SIGNALS; i++) \
  waits[i] = (sv){s, 5}, sigs[i] = (sv){many[i], 1}
  FILL_MAX();
  unsigned n = 0;
#define REFUSE(expr, want)    \
  do {                        \
    CHECK_STATUS(expr, want); \
    n++;                      \
  } while (0)
  REFUSE(barrier(c, 0, NONE, L({s, 5})), DEVRT_ERR_INVALID_ARGUMENT); /* not above the value */
  REFUSE(barrier(c, 0, NONE, L({z, 1}, {s, 3})), DEVRT_ERR_INVALID_ARGUMENT); /* below it */
  REFUSE(barrier(c, 0, NONE, L({z, max + 1})), DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(barrier(c, 0, L({s, max + 1}), L({z, 1})), DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(barrier(c, 0, L({NULL, 1}), L({z, 1})), DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(barrier(c, 0, NONE, L({z, 1}, {NULL, 1})), DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(barrier(c, 0, ((list){NULL, 1}), L({z, 1})), DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(barrier(c, 0, NONE, ((list){NULL, 1})), DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(barrier(c, 0, ((list){waits, DEVRT_QUEUE_MAX_WAITS + 1}), L({z, 1})),
         DEVRT_ERR_INVALID_ARGUMENT);
  FILL_MAX();
  REFUSE(barrier(c, 0, NONE, ((list){sigs, DEVRT_QUEUE_MAX_SIGNALS + 1})),
         DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(barrier(c, dead, NONE, L({z, 1})), DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(q_submit(c->r, (devrt_submission){.kind = (devrt_work_kind)99}, NONE, L({z, 1})),
         DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(q_kern(c, c->q[0], NONE, L({z, 1}), stale, 0, 1, 0, true), DEVRT_ERR_STALE_BLOCK);
  REFUSE(
      q_submit(c->r,
               (devrt_submission){.kind = DEVRT_WORK_LAUNCH, .launch = {.grid = {1}, .block = {1}}},
               NONE, L({z, 1})),
      DEVRT_ERR_INVALID_ARGUMENT); /* neither kernel nor enqueue */
  REFUSE(q_submit(c->r,
                  (devrt_submission){.kind = DEVRT_WORK_LAUNCH,
                                     .launch = {.kernel = c->k.fill, .block = {1}}},
                  NONE, L({z, 1})),
         DEVRT_ERR_INVALID_ARGUMENT); /* grid 0 */
  REFUSE(q_alloc(c, 0, NONE, L({z, 1}), N * 4, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(q_alloc(c, 0, NONE, L({z, 1}), 0, &out), DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(q_free(c, 0, NONE, L({z, 1}), DEVRT_BLOCK_NONE), DEVRT_ERR_INVALID_ARGUMENT);
  REFUSE(q_submit(c->r, (devrt_submission){.kind = DEVRT_WORK_HOST_CALL}, NONE, L({z, 1})),
         DEVRT_ERR_INVALID_ARGUMENT);
#undef REFUSE
  st = qstats(c);
  CHECK(st.refused - st0.refused == n && st.submitted == st0.submitted && st.parked == st0.parked &&
        st.issued_inline == st0.issued_inline);
  CHECK(out == 0 && bstats(c->r).blocks_live == b0.blocks_live);

  /* The limits themselves are fine. */
  FILL_MAX();
  CHECK_OK(barrier(c, 0, ((list){waits, DEVRT_QUEUE_MAX_WAITS}),
                   ((list){sigs, DEVRT_QUEUE_MAX_SIGNALS})));
  uint64_t ones[DEVRT_QUEUE_MAX_SIGNALS];
  for (unsigned i = 0; i < DEVRT_QUEUE_MAX_SIGNALS; i++) ones[i] = 1;
  CHECK_OK(devrt_semaphores_wait(DEVRT_QUEUE_MAX_SIGNALS, many, ones, DEVRT_WAIT_ALL, T, NULL));
  CHECK(value(many[DEVRT_QUEUE_MAX_SIGNALS]) == 0);
#undef FILL_MAX

  /* Nothing refused was queued: a later submission is seen through and z never moved. */
  CHECK_OK(barrier(c, c->q[1], NONE, L({y, 1})));
  reached(y, 1);
  CHECK(value(z) == 0 && value(s) == 5);
  for (unsigned i = 0; i <= DEVRT_QUEUE_MAX_SIGNALS; i++)
    CHECK_OK(devrt_semaphore_destroy(many[i]));
  DROP(s, z, y);
}

/* ---- graphs (DEVRT_WORK_GRAPH) and captures ---- */

static devrt_status q_graph(const ctx* c, devrt_stream s, list w, list g, devrt_graph* gr) {
  return q_submit(c->r, (devrt_submission){.stream = s, .kind = DEVRT_WORK_GRAPH, .graph = gr}, w,
                  g);
}

/* A graph of dst = src (a tracked copy), captured on s. */
static devrt_graph* copy_graph(const ctx* c, devrt_stream s, devrt_block dst, devrt_block src) {
  devrt_graph* g = NULL;
  REQUIRE_OK(devrt_capture_begin(c->r, s));
  CHECK_OK(k_copy(c->r, &c->k, s, dst, src, N, 0, true));
  REQUIRE_OK(devrt_capture_end(c->r, s, &g));
  return g;
}

static uint64_t graph_launches(devrt_graph* g) {
  devrt_graph_info gi = {0};
  CHECK_OK(devrt_graph_info_get(g, &gi));
  return gi.launches;
}

/* A graph submitted behind a host semaphore runs only once the host signals, then reaches its
 * signal; with no semaphores, its tracked uses order it after a slow writer of its input and a
 * tracked reader after it, as devrt_graph_launch's do. */
static void graph_gated(const ctx* c) {
  devrt_semaphore *h = sem(c, 0), *y = sem(c, 0);
  devrt_block a = blk(c, 0x5a), b = blk(c, 0);
  devrt_graph* g = copy_graph(c, c->q[0], b, a);
  CHECK_OK(q_graph(c, c->q[1], L({h, 1}), L({y, 1}), g));
  t_sleep_ms(10);
  CHECK(value(y) == 0 && peek(c, b, 0) == 0 && graph_launches(g) == 0);
  CHECK_OK(devrt_semaphore_signal(h, 1));
  reached(y, 1);
  CHECK(peek(c, b, 0x5a) == 0 && graph_launches(g) == 1);
  CHECK_OK(k_fill(c->r, &c->k, c->q[0], a, 0x6b, N, 20 * MS, true));
  CHECK_OK(q_graph(c, c->q[1], NONE, NONE, g));
  CHECK(b_wrong(c->r, c->io, b, N, 0x6b) == 0);
  CHECK_OK(devrt_graph_destroy(g));
  devrt_block all[] = {a, b};
  release(c, all, 2);
  DROP(h, y);
}

/* launch -> graph -> launch on three streams, submitted in reverse and started by a host signal:
 * the launches untracked, so only the semaphores order them around the graph. */
static void graph_chain(const ctx* c) {
  devrt_semaphore *h = sem(c, 0), *x = sem(c, 0);
  devrt_block a = blk(c, 0), b = blk(c, 0), d = blk(c, 0);
  devrt_graph* g = copy_graph(c, c->q[0], b, a);
  devrt_queue_stats st0 = qstats(c), st;
  CHECK_OK(q_kern(c, 0, L({x, 2}), L({x, 3}), d, b, 0, 0, false));
  CHECK_OK(q_graph(c, c->q[1], L({x, 1}), L({x, 2}), g));
  CHECK_OK(q_kern(c, c->q[0], L({h, 1}), L({x, 1}), a, 0, 0xc1, 10 * MS, false));
  CHECK(qstats(c).parked - st0.parked == 3 && value(x) == 0);
  CHECK_OK(devrt_semaphore_signal(h, 1));
  reached(x, 3);
  CHECK(peek(c, b, 0xc1) == 0 && peek(c, d, 0xc1) == 0 && graph_launches(g) == 1);
  SETTLE(c, st, st.issued_by_dispatch - st0.issued_by_dispatch == 3);
  CHECK(st.host_hops == 0);
  CHECK_OK(devrt_graph_destroy(g));
  devrt_block all[] = {a, b, d};
  release(c, all, 3);
  DROP(h, x);
}

/* A graph whose output is freed while its submission is parked, or before it is submitted, fails
 * its signals (and what waits on them) with STALE_BLOCK; the graph does not run. */
static void graph_stale(const ctx* c) {
  devrt_semaphore *gate = sem(c, 0), *f = sem(c, 0), *d = sem(c, 0), *f2 = sem(c, 0);
  devrt_block a = blk(c, 1), b = blk(c, 0);
  devrt_graph* g = copy_graph(c, c->q[0], b, a);
  CHECK_OK(q_graph(c, c->q[1], L({gate, 1}), L({f, 1}), g));
  CHECK_OK(barrier(c, 0, L({f, 1}), L({d, 1})));
  CHECK_OK(devrt_block_free(c->r, b));
  CHECK_OK(devrt_semaphore_signal(gate, 1));
  expect_failed(f, 1, DEVRT_ERR_STALE_BLOCK, "graph");
  expect_failed(d, 1, DEVRT_ERR_STALE_BLOCK, "graph");
  CHECK_OK(q_graph(c, c->q[0], NONE, L({f2, 1}), g));
  expect_failed(f2, 1, DEVRT_ERR_STALE_BLOCK, "graph");
  CHECK(graph_launches(g) == 0);
  CHECK_OK(devrt_graph_destroy(g));
  release(c, &a, 1);
  DROP(gate, f, d, f2);
}

/* NULL, destroyed (its magic cleared: a real one's memory is freed, and reading it would be a use
 * after free) and another runtime's graphs are refused, nothing queued. */
static void graph_refused(const ctx* c) {
  ctx o;
  ctx_open(&o, NULL);
  devrt_block a = blk(&o, 0), b = blk(&o, 0);
  devrt_graph* other = copy_graph(&o, o.q[0], b, a);
  static uint64_t dead[16]; /* zero: a destroyed graph's magic */
  devrt_semaphore* z = sem(c, 0);
  devrt_queue_stats st0 = qstats(c), st;
  CHECK_STATUS(q_graph(c, c->q[0], NONE, L({z, 1}), NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(q_graph(c, c->q[0], NONE, L({z, 1}), (devrt_graph*)dead),
               DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "destroyed") != NULL);
  CHECK_STATUS(q_graph(c, c->q[0], NONE, L({z, 1}), other), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "another runtime") != NULL);
  st = qstats(c);
  CHECK(st.refused - st0.refused == 3 && st.submitted == st0.submitted && value(z) == 0);
  CHECK(graph_launches(other) == 0);
  CHECK_OK(devrt_graph_destroy(other));
  devrt_block all[] = {a, b};
  release(&o, all, 2);
  ctx_close(&o);
  DROP(z);
}

static void* submit_on(void* p) { /* another thread's barrier on a stream this one captures */
  const ctx* c = p;
  return (void*)(uintptr_t)devrt_queue_submit(
      c->r, &(devrt_submission){.stream = c->q[0], .kind = DEVRT_WORK_BARRIER});
}

/* Under a capture of q[0]: a queued ALLOC of a temporary, LAUNCHes (tmp = 0x77, out = tmp) and its
 * FREE, all without semaphores, are recorded (nothing runs); a wait, a signal, a host call and a
 * graph are refused naming the capture, and so is another thread's barrier. The graph replays
 * twice (launched, then submitted), each time writing out again. */
static void graph_capture(const ctx* c) {
  devrt_semaphore *s = sem(c, 0), *y = sem(c, 0);
  devrt_block out = blk(c, 0), a = blk(c, 0), b = blk(c, 0), tmp = 0;
  devrt_graph* other = copy_graph(c, c->q[1], b, a);
  hcall hc = {0};
  devrt_queue_stats st0 = qstats(c), st;
  CHECK_OK(devrt_capture_begin(c->r, c->q[0]));
  CHECK_OK(q_alloc(c, c->q[0], NONE, NONE, N * 4, &tmp));
  CHECK(tmp != 0);
  CHECK_OK(q_kern(c, c->q[0], NONE, NONE, tmp, 0, 0x77, 0, true));
  CHECK_OK(q_kern(c, c->q[0], NONE, NONE, out, tmp, 0, 0, true));
  CHECK_OK(q_free(c, c->q[0], NONE, NONE, tmp));
  CHECK_OK(barrier(c, c->q[0], NONE, NONE));
  CHECK_STATUS(barrier(c, c->q[0], L({s, 0}), NONE), DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(), "capturing") && strstr(devrt_last_error(), "DEVRT_WORK_GRAPH"));
  CHECK_STATUS(q_kern(c, c->q[0], NONE, L({s, 1}), out, 0, 1, 0, true), DEVRT_ERR_INVALID_STATE);
  hc.self = &hc;
  CHECK_STATUS(
      q_submit(c->r,
               (devrt_submission){
                   .stream = c->q[0], .kind = DEVRT_WORK_HOST_CALL, .host = {on_host, &hc}},
               NONE, NONE),
      DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(), "host call") != NULL);
  CHECK_STATUS(q_graph(c, c->q[0], NONE, NONE, other), DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(), "graph launch") != NULL);
  pthread_t th;
  void* ret = NULL;
  pthread_create(&th, NULL, submit_on, (void*)c);
  pthread_join(th, &ret);
  CHECK((devrt_status)(uintptr_t)ret == DEVRT_ERR_INVALID_STATE);
  devrt_graph* g = NULL;
  CHECK_OK(devrt_capture_end(c->r, c->q[0], &g));
  devrt_graph_info gi = {0};
  CHECK_OK(devrt_graph_info_get(g, &gi));
  CHECK(gi.recorded == 2 && gi.blocks == 2 && hc.calls == 0);
  st = qstats(c);
  CHECK(st.submitted - st0.submitted == 5 && st.refused - st0.refused == 5 &&
        st.parked == st0.parked);
  void* p;
  CHECK_STATUS(devrt_block_ptr(c->r, tmp, &p), DEVRT_ERR_STALE_BLOCK); /* the graph's now */
  CHECK(peek(c, out, 0) == 0 && value(s) == 0);                        /* nothing ran */
  CHECK_OK(devrt_graph_launch(g, c->q[1]));
  CHECK(b_wrong(c->r, c->io, out, N, 0x77) == 0);
  CHECK_OK(k_fill(c->r, &c->k, c->q[1], out, 0, N, 0, true));
  CHECK_OK(q_graph(c, c->q[0], NONE, L({y, 1}), g));
  reached(y, 1);
  CHECK(peek(c, out, 0x77) == 0 && graph_launches(g) == 2);
  CHECK_OK(devrt_graph_destroy(g));
  CHECK_OK(devrt_graph_destroy(other));
  devrt_block all[] = {out, a, b};
  release(c, all, 3);
  DROP(s, y);
}

static devrt_status nop(void* user, devrt_stream s, void* native) {
  (void)user, (void)s, (void)native;
  return DEVRT_OK;
}

/* A sticky device fault seen while observing completion: the launch's signal fails with
 * DEVICE_LOST, so does every other semaphore of that runtime (parked work and its downstream
 * included); later submissions are refused. Runs last: on cuda the fault is process-wide. */
static void device_lost(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.completion = DEVRT_COMPLETION_SYNC;
  devrt_runtime* r = t_runtime_cfg(&cfg);
  ctx o = {.r = r};
  devrt_semaphore *l = sem(&o, 0), *idle = sem(&o, 3), *gate = sem(&o, 0), *q = sem(&o, 0);
  CHECK_OK(barrier(&o, 0, L({gate, 1}), L({q, 1})));
  r->be->fault_arm(r->dev, DV_FAULT_DEVICE, 1);
  devrt_submission launch = {.kind = DEVRT_WORK_LAUNCH, .launch = {.enqueue = nop}};
  CHECK_OK(q_submit(r, launch, NONE, L({l, 1})));
  expect_failed(l, 1, DEVRT_ERR_DEVICE_LOST, NULL);
  expect_failed(idle, 4, DEVRT_ERR_DEVICE_LOST, NULL);
  expect_failed(gate, 1, DEVRT_ERR_DEVICE_LOST, NULL);
  expect_failed(q, 1, DEVRT_ERR_DEVICE_LOST, NULL);
  CHECK_STATUS(q_submit(r, (devrt_submission){.kind = DEVRT_WORK_BARRIER}, NONE, NONE),
               DEVRT_ERR_DEVICE_LOST);
  CHECK(qstats(&o).device_lost);
  DROP(l, idle, gate, q);
  CHECK_OK(devrt_runtime_destroy(r));
}

int main(void) {
  g_main = pthread_self();
  static const int modes[] = {DEVRT_COMPLETION_SYNC, DEVRT_COMPLETION_HOSTFN};
  for (int m = 0; m < 2; m++) {
    devrt_config cfg;
    REQUIRE_OK(devrt_config_init(&cfg));
    cfg.completion = modes[m];
    ctx o;
    ctx_open(&o, &cfg);
    chains(&o, modes[m]);
    ctx_close(&o);
  }

  signal_issues_here();
  signal_issues_chain_here(200);
  signal_issues_chain_here(600);
  ctx c;
  ctx_open(&c, NULL);
  barrier_chain(&c, false);
  barrier_chain(&c, true);
  failure_in_chain(&c);
  host_calls(&c);
  alloc_chain(&c);
  alloc_over_budget();
  refused(&c);
  graph_gated(&c);
  graph_chain(&c);
  graph_stale(&c);
  graph_refused(&c);
  graph_capture(&c);

  devrt_queue_stats st = qstats(&c);
  printf(
      "queue: %llu submitted, %llu refused, %llu inline, %llu parked, %llu by dispatch, %llu host "
      "calls, "
      "%llu failed, %llu device waits, %llu host hops, %llu dispatch / %llu completion wakeups\n",
      (unsigned long long)st.submitted, (unsigned long long)st.refused,
      (unsigned long long)st.issued_inline, (unsigned long long)st.parked,
      (unsigned long long)st.issued_by_dispatch, (unsigned long long)st.host_calls,
      (unsigned long long)st.failed, (unsigned long long)st.device_waits,
      (unsigned long long)st.host_hops, (unsigned long long)st.dispatch_wakeups,
      (unsigned long long)st.completion_wakeups);
  CHECK(st.host_hops == 0 && !st.device_lost && bstats(c.r).blocks_live == 0);
  ctx_close(&c);
  device_lost();
  return t_done();
}
