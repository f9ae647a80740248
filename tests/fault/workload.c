/* workload.c: the reliability workload (workload.h). Each step makes what it uses, checks every
 * status and every word it reads back, and frees what it made, retrying a cleanup call that the
 * injected fault failed (a fault fails one call, so the retry goes through). */
#include "workload.h"
#include "devrt/graph.h"
#include "devrt/torch.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 4096 };                           /* words per block */
#define KiB (1024ull)                        /* bytes */
#define WAIT_NS (20ull * 1000 * 1000 * 1000) /* a semaphore wait that runs out is a hang */
#define ST(s) (1u << (s))
#define CANARY 0xca11ab1eu

typedef struct run {
  wl* w;
  devrt_runtime* rt;
  bool host; /* the host backend: host kernel modules exist */
  unsigned min_sms;
  uint32_t v; /* the run's value */
  devrt_module* mod;
  devrt_kernel *fill, *copy, *sum, *slow;
  devrt_stream s[2];
} run;

/* ---- checked calls ---- */

/* Whether msg names the injected fault as its cause. */
static bool caused(const wl* w, const char* msg) {
  char needle[96];
  snprintf(needle, sizeof needle, "%s: injected fault", w->fault_op ? w->fault_op : "");
  return w->fault_op && msg && strstr(msg, needle);
}

/* st is OK: true. A status in `also` (what the step expects besides OK) or one the injected fault
 * caused (its message names the fault) is false; anything else is an error. */
static bool ok(run* r, devrt_status st, unsigned also, const char* what, int line) {
  wl* w = r->w;
  w->calls++;
  if (st == DEVRT_OK) return true;
  if (also & ST(st)) return false;
  if (caused(w, devrt_last_error()) && (w->fault_statuses & ST(st))) {
    w->tolerated++;
    return false;
  }
  w->errors++;
  fprintf(stderr, "workload line %d: %s -> %s: %s\n", line, what, devrt_status_name(st),
          devrt_last_error());
  return false;
}
#define OK(e) ok(r, (e), 0, #e, __LINE__)
#define OK_OR(e, also) ok(r, (e), (also), #e, __LINE__)
/* Cleanup: retried while the injected fault fails it. */
#define RETRY(e)                                                      \
  do {                                                                \
    for (int t_ = 0; t_ < 3 && !ok(r, (e), 0, #e, __LINE__); t_++) {} \
  } while (0)

static void check(run* r, bool cond, const char* what, int line) {
  if (cond) return;
  r->w->errors++;
  fprintf(stderr, "workload line %d: check failed: %s\n", line, what);
}
#define CHECK_W(c) check(r, (c), #c, __LINE__)

static void nap(void) { nanosleep(&(struct timespec){0, 1000000}, NULL); }

static devrt_block alloc(run* r, size_t bytes, devrt_stream s, const char* tag) {
  devrt_block b = 0;
  OK(devrt_block_alloc(r->rt, bytes, s, tag, &b));
  return b;
}

/* Frees *b (a racing use is refused with INVALID_STATE: retried); `also`: statuses accepted. */
static void release_block(run* r, devrt_block* b, unsigned also) {
  for (int i = 0; *b && i < 1000; i++) {
    devrt_status st = devrt_block_free(r->rt, *b);
    if (st == DEVRT_ERR_INVALID_STATE) {
      nap();
      continue;
    }
    if (st == DEVRT_OK || (also & ST(st)) || (!ok(r, st, 0, "devrt_block_free", __LINE__) && i > 3))
      *b = 0;
  }
  CHECK_W(*b == 0);
}

/* Waits for everything queued on s (before freeing what its work may still touch). */
static void settle_on(run* r, devrt_runtime* rt, devrt_stream s) {
  RETRY(devrt_stream_synchronize(rt, s));
}
static void settle(run* r, devrt_stream s) { settle_on(r, r->rt, s); }

/* ---- launches and read-back ---- */

static bool launch(run* r, devrt_stream s, devrt_kernel* k, void** args, devrt_block_use* u,
                   unsigned nu) {
  devrt_launch_desc d = {.stream = s,
                         .kernel = k,
                         .grid = {N / 256},
                         .block = {256},
                         .args = args,
                         .uses = u,
                         .nuses = nu};
  return OK(devrt_launch(r->rt, &d));
}

static void* ptr(run* r, devrt_block b) {
  void* p = NULL;
  return OK(devrt_block_ptr(r->rt, b, &p)) ? p : NULL;
}

/* b[0..n) = v on s. */
static bool fill(run* r, devrt_stream s, devrt_block b, uint32_t v, uint64_t n) {
  void* p = ptr(r, b);
  void* args[] = {&p, &v, &n};
  devrt_block_use u = {b, DEVRT_ACCESS_WRITE};
  return p && launch(r, s, r->fill, args, &u, 1);
}

/* dst = src (N words) on s. */
static bool copy(run* r, devrt_stream s, devrt_block dst, devrt_block src) {
  void *d = ptr(r, dst), *p = ptr(r, src);
  uint64_t n = N;
  void* args[] = {&d, &p, &n};
  devrt_block_use u[] = {{src, DEVRT_ACCESS_READ}, {dst, DEVRT_ACCESS_WRITE}};
  return d && p && launch(r, s, r->copy, args, u, 2);
}

/* Reads `bytes` of b to host in stream order on s (a tracked read) and waits for it. */
static bool read_back(run* r, devrt_stream s, devrt_block b, void* host, size_t bytes) {
  void* p = ptr(r, b);
  bool done = p && OK(devrt_prepare_block_use(r->rt, b, s, DEVRT_ACCESS_READ)) &&
              OK(devrt_memcpy_async(r->rt, host, p, bytes, s)) &&
              OK(devrt_finish_block_use(r->rt, b, s, DEVRT_ACCESS_READ));
  settle(r, s); /* the copy may be queued even when a later call failed */
  return done;
}

/* The first n words of b all equal want (read on s); mismatches count as corruptions. */
static void expect(run* r, devrt_stream s, devrt_block b, uint64_t n, uint32_t want) {
  uint32_t* h = malloc(n * sizeof *h);
  if (h && read_back(r, s, b, h, n * sizeof *h)) {
    unsigned bad = 0;
    for (uint64_t i = 0; i < n; i++) bad += h[i] != want;
    if (bad)
      fprintf(stderr, "workload: %u of %llu words differ from %#x\n", bad, (unsigned long long)n,
              want);
    r->w->corruptions += bad;
  }
  free(h);
}

/* ---- steps ---- */

/* Recorded launches across two streams: a write, a read on the other stream, a write after that
 * read (and its repeat), a checksum of the copy. */
static void step_blocks(run* r) {
  devrt_block x = alloc(r, N * 4, r->s[0], "wl.x"), y = alloc(r, N * 4, r->s[1], "wl.y"),
              sum = alloc(r, 16, r->s[0], "wl.sum");
  uint32_t v = r->v;
  if (x && y && sum && fill(r, r->s[0], x, v, N) && copy(r, r->s[1], y, x) &&
      fill(r, r->s[0], x, v + 1, N) && fill(r, r->s[0], x, v + 1, N) &&
      fill(r, r->s[0], sum, 0, 4)) {
    void *py = ptr(r, y), *ps = ptr(r, sum);
    uint64_t n = N;
    void* args[] = {&py, &n, &ps};
    devrt_block_use u[] = {{y, DEVRT_ACCESS_READ}, {sum, DEVRT_ACCESS_READ_WRITE}};
    uint64_t got = 0;
    if (py && ps && launch(r, r->s[0], r->sum, args, u, 2) &&
        read_back(r, r->s[0], sum, &got, sizeof got))
      CHECK_W(got == (uint64_t)v * N);
    expect(r, r->s[1], y, N, v);
    expect(r, r->s[0], x, N, v + 1);
  }
  /* One set of blocks used again and again from both streams (a group, blocks.md): the fill
   * writes x and declares the whole set. */
  bool set = x && y && sum;
  for (unsigned i = 0; set && i < 4; i++) {
    void* px = ptr(r, x);
    uint32_t vi = v + 2 + i;
    uint64_t n = N;
    void* args[] = {&px, &vi, &n};
    devrt_block_use u[] = {
        {x, DEVRT_ACCESS_WRITE}, {y, DEVRT_ACCESS_WRITE}, {sum, DEVRT_ACCESS_WRITE}};
    set = px && launch(r, r->s[i % 2], r->fill, args, u, 3);
  }
  if (set) expect(r, r->s[0], x, N, v + 5);
  /* A block freed while a slow write to it still runs: the free waits for it. */
  devrt_block z = alloc(r, N * 4, r->s[1], "wl.slow");
  void* pz = z ? ptr(r, z) : NULL;
  uint64_t n = N, delay = 1000000;
  void* args[] = {&pz, &v, &n, &delay};
  devrt_block_use u = {z, DEVRT_ACCESS_WRITE};
  if (pz) launch(r, r->s[1], r->slow, args, &u, 1);
  release_block(r, &z, 0);
  release_block(r, &x, 0);
  release_block(r, &y, 0);
  release_block(r, &sum, 0);
}

typedef struct io {
  devrt_runtime* rt;
  devrt_block b;
  void* host; /* NULL: fill b with `byte`; else copy b to host */
  int byte;
  atomic_int calls;
} io;

/* Foreign stream-ordered work (an enqueue callback) on b, looked up when it is issued. */
static devrt_status do_io(void* user, devrt_stream s, void* native) {
  (void)native;
  io* o = user;
  void* p = NULL;
  atomic_fetch_add(&o->calls, 1);
  devrt_status st = devrt_block_ptr(o->rt, o->b, &p);
  if (st != DEVRT_OK) return st;
  return o->host ? devrt_memcpy_async(o->rt, o->host, p, N * 4, s)
                 : devrt_memset_async(o->rt, p, o->byte, N * 4, s);
}

/* Foreign work through an enqueue callback, and work on imported streams: the legacy default
 * stream and another runtime's stream. */
static void step_foreign(run* r) {
  devrt_runtime* rt = r->rt;
  devrt_block x = alloc(r, N * 4, r->s[1], "wl.fx"), y = alloc(r, N * 4, r->s[0], "wl.fy");
  int byte = (int)(r->v & 0x7f);
  io o = {.rt = rt, .b = x, .byte = byte};
  devrt_block_use u = {x, DEVRT_ACCESS_WRITE};
  devrt_launch_desc d = {.stream = r->s[1], .enqueue = do_io, .user = &o, .uses = &u, .nuses = 1};
  if (x && y && OK(devrt_launch(rt, &d)) && copy(r, r->s[0], y, x))
    expect(r, r->s[0], y, N, (uint32_t)byte * 0x01010101u);
  devrt_stream leg = 0, imp = 0, os = 0;
  if (x && OK(devrt_stream_import(rt, NULL, &leg))) {
    if (fill(r, leg, x, r->v + 2, N)) expect(r, leg, x, N, r->v + 2);
    RETRY(devrt_stream_forget(rt, leg));
  }
  void* native = NULL;
  if (y && r->w->other && OK(devrt_stream_acquire(r->w->other, DEVRT_ACQUIRE_FAIL, &os))) {
    if (OK(devrt_stream_native(r->w->other, os, &native)) &&
        OK(devrt_stream_import(rt, native, &imp))) {
      if (fill(r, imp, y, r->v + 3, N)) expect(r, imp, y, N, r->v + 3);
      RETRY(devrt_stream_forget(rt, imp));
    }
    RETRY(devrt_stream_release(r->w->other, os));
  }
  release_block(r, &x, 0);
  release_block(r, &y, 0);
}

static void bump(void* user) { atomic_fetch_add((atomic_int*)user, 1); }

/* An event between the streams, a host function. */
static void step_events(run* r) {
  devrt_runtime* rt = r->rt;
  devrt_event* e = NULL;
  devrt_block x = alloc(r, N * 4, r->s[0], "wl.ev");
  atomic_int ran = 0;
  bool done = false;
  if (x && OK(devrt_event_create(rt, DEVRT_EVENT_BLOCKING_SYNC, &e)) &&
      fill(r, r->s[0], x, r->v, N) && OK(devrt_event_record(rt, e, r->s[0])) &&
      OK(devrt_stream_wait_event(rt, r->s[1], e)) && OK(devrt_event_query(rt, e, &done)) &&
      OK(devrt_event_synchronize(rt, e)) && OK(devrt_event_query(rt, e, &done)))
    CHECK_W(done);
  if (OK(devrt_stream_host_func(rt, r->s[1], bump, &ran))) {
    settle(r, r->s[1]);
    CHECK_W(atomic_load(&ran) == 1);
  }
  if (e) RETRY(devrt_event_destroy(rt, e));
  release_block(r, &x, 0);
}

/* The raw pool and synchronous memory: fill, copy back, free; the pool's own calls. */
static void step_memory(run* r) {
  devrt_runtime* rt = r->rt;
  unsigned char h[64];
  void* p = NULL;
  if (OK(devrt_pool_alloc(rt, 4096, r->s[0], &p))) {
    memset(h, 0, sizeof h);
    if (OK(devrt_memset_async(rt, p, 0x5a, 4096, r->s[0])) &&
        OK(devrt_memcpy_async(rt, h, p, sizeof h, r->s[0])) &&
        OK(devrt_stream_synchronize(rt, r->s[0])))
      for (size_t i = 0; i < sizeof h; i++) r->w->corruptions += h[i] != 0x5a;
    settle(r, r->s[0]);
    RETRY(devrt_pool_free(rt, p, r->s[0]));
  }
  if (OK(devrt_mem_alloc(rt, 4096, &p))) {
    memset(h, 0, sizeof h);
    if (OK(devrt_memset_async(rt, p, 0x33, 4096, r->s[1])) &&
        OK(devrt_memcpy_async(rt, h, p, sizeof h, r->s[1])) &&
        OK(devrt_stream_synchronize(rt, r->s[1])))
      for (size_t i = 0; i < sizeof h; i++) r->w->corruptions += h[i] != 0x33;
    settle(r, r->s[1]); /* a synchronous free must not run under queued work */
    RETRY(devrt_mem_free(rt, p));
  }
  devrt_pool_stats ps;
  OK(devrt_pool_stats_get(rt, &ps));
  OK(devrt_pool_reset_high(rt));
  OK(devrt_pool_trim(rt, SIZE_MAX)); /* keeps everything: other threads' memory stays */
}

/* A chain submitted before the host signal that starts it: a queued allocation, foreign work
 * filling it, a copy back to the host, the queued free, a parked kernel launch, a host call; and
 * a submission waiting for a value that never comes, failed at the end. */
static devrt_status host_call(void* user) {
  atomic_fetch_add((atomic_int*)user, 1);
  return DEVRT_OK;
}

static void step_queue(run* r) {
  devrt_runtime* rt = r->rt;
  devrt_semaphore *t = NULL, *never = NULL, *dead = NULL;
  devrt_block q = 0, y = alloc(r, N * 4, r->s[1], "wl.qy");
  uint32_t* host = calloc(N, 4);
  atomic_int calls = 0;
  int byte = (int)(r->v >> 8 & 0x7f);
  bool chain = false; /* submitted, or failed by the step: t reaches 7 or fails */
  io fill_q = {.rt = rt, .byte = byte}, read_q = {.rt = rt, .host = host};
  if (OK(devrt_semaphore_create(rt, 0, &t)) && OK(devrt_semaphore_create(rt, 0, &never)) &&
      OK(devrt_semaphore_create(rt, 0, &dead)) && y && host) {
    devrt_semaphore_value w[7], g[7];
    for (unsigned i = 0; i < 7; i++) w[i] = (devrt_semaphore_value){t, i + 1};
    for (unsigned i = 0; i < 7; i++) g[i] = (devrt_semaphore_value){t, i + 2};
    devrt_block_use uq = {0, DEVRT_ACCESS_WRITE}, ur = {0, DEVRT_ACCESS_READ};
    void* py = ptr(r, y);
    uint32_t v = r->v + 4;
    uint64_t n = N;
    void* args[] = {&py, &v, &n};
    devrt_block_use uy = {y, DEVRT_ACCESS_WRITE};
    devrt_submission sub[6] = {
        {.stream = r->s[0], .kind = DEVRT_WORK_ALLOC, .alloc = {N * 4, "wl.q", &q}},
        {.stream = r->s[1],
         .kind = DEVRT_WORK_LAUNCH,
         .launch = {.enqueue = do_io, .user = &fill_q, .uses = &uq, .nuses = 1}},
        {.stream = r->s[0],
         .kind = DEVRT_WORK_LAUNCH,
         .launch = {.enqueue = do_io, .user = &read_q, .uses = &ur, .nuses = 1}},
        {.stream = r->s[1], .kind = DEVRT_WORK_FREE},
        {.stream = r->s[0],
         .kind = DEVRT_WORK_LAUNCH,
         .launch = {.kernel = r->fill,
                    .grid = {N / 256},
                    .block = {256},
                    .args = args,
                    .uses = &uy,
                    .nuses = 1}},
        {.kind = DEVRT_WORK_HOST_CALL, .host = {host_call, &calls}}};
    bool queued = py != NULL;
    chain = true;
    for (unsigned i = 0; i < 6 && queued; i++) {
      sub[i].waits = &w[i], sub[i].nwaits = 1, sub[i].signals = &g[i], sub[i].nsignals = 1;
      fill_q.b = read_q.b = uq.block = ur.block = sub[3].block = q; /* set by the first */
      queued = OK(devrt_queue_submit(rt, &sub[i]));
    }
    devrt_semaphore_value wn = {never, 1}, gd = {dead, 1};
    devrt_submission parked = {
        .waits = &wn, .nwaits = 1, .signals = &gd, .nsignals = 1, .kind = DEVRT_WORK_BARRIER};
    OK(devrt_queue_submit(rt, &parked));
    if (!queued) /* what was queued must not wait for ever */
      OK(devrt_semaphore_fail(t, DEVRT_ERR_CANCELLED, "wl: the chain was not all queued"));
    if (OK_OR(devrt_semaphore_signal(t, 1), queued ? 0 : ST(DEVRT_ERR_ABORTED)) &&
        OK_OR(devrt_semaphore_wait(t, 7, WAIT_NS), queued ? 0 : ST(DEVRT_ERR_ABORTED))) {
      unsigned bad = 0;
      for (unsigned i = 0; i < N; i++) bad += host[i] != (uint32_t)byte * 0x01010101u;
      r->w->corruptions += bad;
      CHECK_W(atomic_load(&calls) == 1);
      expect(r, r->s[1], y, N, v);
    }
    /* The parked barrier fails with the root cause: the semaphore it waits for failed. */
    OK(devrt_semaphore_fail(never, DEVRT_ERR_CANCELLED, "wl: never signalled"));
    devrt_status st = devrt_semaphore_wait(dead, 1, WAIT_NS), cause = DEVRT_OK;
    const char* msg = NULL;
    CHECK_W(st == DEVRT_ERR_ABORTED);
    if (OK(devrt_semaphore_failure(dead, &cause, &msg))) /* or the injected fault's */
      CHECK_W(cause == DEVRT_ERR_CANCELLED || caused(r->w, msg));
  }
  if (chain) { /* whatever failed, nothing of the chain may still run: every value is final */
    devrt_status st = devrt_semaphore_wait(t, 7, WAIT_NS);
    CHECK_W(st == DEVRT_OK || st == DEVRT_ERR_ABORTED);
  }
  settle(r, r->s[0]);
  settle(r, r->s[1]);
  release_block(r, &q, ST(DEVRT_ERR_STALE_BLOCK)); /* freed by the chain, unless it failed */
  release_block(r, &y, 0);
  devrt_semaphore* sems[] = {t, never, dead};
  for (int i = 0; i < 3; i++)
    if (sems[i]) RETRY(devrt_semaphore_destroy(sems[i]));
  free(host);
}

/* A device signal waited for on the other stream (issued at once: no host hop), both semaphores
 * waited for together, and a host call whose failure fails its signal with its status. */
static devrt_status failing_call(void* user) {
  (void)user;
  return DEVRT_ERR_DEPENDENCY_FAILED;
}

static void step_hop(run* r) {
  devrt_runtime* rt = r->rt;
  devrt_semaphore *u = NULL, *bad = NULL;
  devrt_block z = alloc(r, N * 4, r->s[0], "wl.hz"), y = alloc(r, N * 4, r->s[1], "wl.hy");
  void *pz = z ? ptr(r, z) : NULL, *py = y ? ptr(r, y) : NULL;
  uint32_t v = r->v + 6;
  uint64_t n = N;
  if (pz && py && OK(devrt_semaphore_create(rt, 0, &u)) &&
      OK(devrt_semaphore_create(rt, 0, &bad))) {
    void *fill_args[] = {&pz, &v, &n}, *copy_args[] = {&py, &pz, &n};
    devrt_block_use uf = {z, DEVRT_ACCESS_WRITE},
                    uc[] = {{z, DEVRT_ACCESS_READ}, {y, DEVRT_ACCESS_WRITE}};
    devrt_semaphore_value u1 = {u, 1}, u2 = {u, 2}, b1 = {bad, 1};
    devrt_submission fill = {.stream = r->s[0],
                             .signals = &u1,
                             .nsignals = 1,
                             .kind = DEVRT_WORK_LAUNCH,
                             .launch = {.kernel = r->fill,
                                        .grid = {N / 256},
                                        .block = {256},
                                        .args = fill_args,
                                        .uses = &uf,
                                        .nuses = 1}},
                     copy = {.stream = r->s[1],
                             .waits = &u1,
                             .nwaits = 1,
                             .signals = &u2,
                             .nsignals = 1,
                             .kind = DEVRT_WORK_LAUNCH,
                             .launch = {.kernel = r->copy,
                                        .grid = {N / 256},
                                        .block = {256},
                                        .args = copy_args,
                                        .uses = uc,
                                        .nuses = 2}},
                     call = {.waits = &u2,
                             .nwaits = 1,
                             .signals = &b1,
                             .nsignals = 1,
                             .kind = DEVRT_WORK_HOST_CALL,
                             .host = {failing_call, NULL}};
    bool queued = OK(devrt_queue_submit(rt, &fill)) && OK(devrt_queue_submit(rt, &copy)) &&
                  OK(devrt_queue_submit(rt, &call));
    if (!queued) { /* what was queued must not wait for ever */
      OK(devrt_semaphore_fail(u, DEVRT_ERR_CANCELLED, "wl: the hop was not queued"));
      OK(devrt_semaphore_fail(bad, DEVRT_ERR_CANCELLED, "wl: the hop was not queued"));
    }
    devrt_semaphore* both[] = {u, bad};
    uint64_t values[] = {2, 1};
    devrt_status st = devrt_semaphores_wait(2, both, values, DEVRT_WAIT_ALL, WAIT_NS, NULL);
    CHECK_W(st == DEVRT_ERR_ABORTED); /* bad fails, at the latest */
    if (queued && OK_OR(devrt_semaphore_wait(u, 2, WAIT_NS), 0)) expect(r, r->s[1], y, N, v);
    devrt_status cause = DEVRT_OK;
    const char* msg = NULL;
    if (OK(devrt_semaphore_failure(bad, &cause, &msg)))
      CHECK_W(cause == DEVRT_ERR_DEPENDENCY_FAILED || (!queued && cause == DEVRT_ERR_CANCELLED) ||
              caused(r->w, msg));
  }
  settle(r, r->s[0]);
  settle(r, r->s[1]);
  if (u) RETRY(devrt_semaphore_destroy(u));
  if (bad) RETRY(devrt_semaphore_destroy(bad));
  release_block(r, &z, 0);
  release_block(r, &y, 0);
}

/* A caching stack of its own under a device budget with a sub-budget: cache hits on one stream,
 * a block taken across streams, a refusal over the sub-budget, an allocation that fits only once
 * the budget's pressure ladder has trimmed the cache; and a sub-budget of the runtime's stack. */
static void step_stack(run* r) {
  devrt_runtime* rt = r->rt;
  devrt_resource *a = NULL, *c = NULL, *b = NULL, *ch = NULL, *top = NULL, *rc = NULL;
  devrt_budget_options bo = {.limit_bytes = 256 * KiB, .scope = DEVRT_BUDGET_DEVICE};
  enum { K = 64 * KiB };
  void* p[4] = {NULL, NULL, NULL, NULL};
  devrt_stream ps[4] = {r->s[0], r->s[0], r->s[1], r->s[1]};
  if (OK(devrt_async_resource_create(rt, &a)) && OK(devrt_caching_resource_create(a, NULL, &c)) &&
      OK(devrt_budget_create(c, &bo, &b)) && OK(devrt_budget_create_child(b, 3 * K, &ch))) {
    for (int i = 0; i < 3; i++)
      if (OK(devrt_resource_allocate(ch, K, ps[i], "wl.stack", &p[i])))
        OK(devrt_memset_async(rt, p[i], i, K, ps[i]));
    CHECK_W(!OK_OR(devrt_resource_allocate(ch, 2 * K, r->s[0], "wl.big", &p[3]),
                   ST(DEVRT_ERR_OVER_BUDGET)));
    if (p[3]) {
      RETRY(devrt_resource_deallocate(ch, p[3], 2 * K, r->s[0]));
      p[3] = NULL;
    }
    if (p[0] && OK(devrt_resource_deallocate(ch, p[0], K, ps[0]))) /* then a cache hit */
      p[0] = NULL, OK(devrt_resource_allocate(ch, K, ps[0], "wl.stack", &p[0]));
    if (p[1] && OK(devrt_resource_deallocate(ch, p[1], K, ps[1]))) /* taken on the other stream */
      p[1] = NULL, ps[1] = r->s[1], OK(devrt_resource_allocate(ch, K, ps[1], "wl.stack", &p[1]));
  }
  for (int i = 0; i < 3; i++)
    if (p[i]) RETRY(devrt_resource_deallocate(ch, p[i], K, ps[i]));
  /* 192 KiB cached: 128 more fit the 256 KiB budget once the ladder trimmed the cache. */
  if (b && OK(devrt_resource_allocate(b, 2 * K, r->s[1], "wl.pressure", &p[3])))
    RETRY(devrt_resource_deallocate(b, p[3], 2 * K, r->s[1]));
  if (b) {
    uint64_t n;
    devrt_resource_figures f;
    RETRY(devrt_resource_reap(b, DEVRT_REAP_WAIT, &n));
    RETRY(devrt_resource_trim(b, &n));
    RETRY(devrt_resource_reap(b, DEVRT_REAP_WAIT, &n));
    if (OK(devrt_resource_query(b, &f)))
      CHECK_W(f.live_bytes == 0 && f.pending_bytes == 0 && f.cached_bytes == 0);
  }
  devrt_resource* own[] = {ch, b, c, a};
  for (int i = 0; i < 4; i++)
    if (own[i]) OK(devrt_resource_release(own[i]));
  void* q = NULL;
  if (OK(devrt_runtime_resource(rt, &top)) && OK(devrt_budget_create_child(top, 2 * K, &rc))) {
    if (OK(devrt_resource_allocate(rc, K, r->s[1], "wl.sub", &q)))
      RETRY(devrt_resource_deallocate(rc, q, K, r->s[1]));
    CHECK_W(!OK_OR(devrt_resource_allocate(rc, 4 * K, r->s[1], "wl.sub", &q),
                   ST(DEVRT_ERR_OVER_BUDGET)));
    OK(devrt_resource_release(rc));
  }
}

/* A partition layout: a partition's stream and sub-budget (a launch in it, a refusal over the
 * sub-budget); activated when no other thread uses the runtime. Made and destroyed by each run,
 * or (keep_layout) made by the first and kept. */
static void step_layout(run* r) {
  devrt_runtime* rt = r->rt;
  devrt_layout_spec spec = {.groups = 2, .min_sms = r->min_sms, .streams = 2};
  devrt_layout* l = r->w->kept;
  devrt_partition* p = NULL;
  devrt_stream s = 0;
  if (!l && !OK(devrt_layout_create(rt, &spec, &l))) return;
  if (OK(devrt_layout_partition(rt, l, 0, &p)) &&
      OK(devrt_partition_set_budget(rt, p, 256 * KiB)) &&
      OK(devrt_partition_stream_acquire(rt, p, DEVRT_ACQUIRE_FAIL, &s))) {
    devrt_block b = alloc(r, N * 4, s, "wl.part"), big = 0;
    devrt_partition_info pi;
    if (b && fill(r, s, b, r->v + 5, N)) expect(r, s, b, N, r->v + 5);
    if (b && OK(devrt_partition_info_get(rt, p, &pi)))
      CHECK_W(pi.memory.live_bytes >= N * 4 && pi.memory.live_bytes <= 256 * KiB);
    CHECK_W(!OK_OR(devrt_block_alloc(rt, 512 * KiB, s, "wl.big", &big), ST(DEVRT_ERR_OVER_BUDGET)));
    release_block(r, &big, 0);
    release_block(r, &b, 0);
    RETRY(devrt_stream_release(rt, s));
  }
  if (r->w->exclusive && OK(devrt_layout_activate(rt, l))) {
    devrt_partition* q = NULL;
    if (OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s))) {
      if (OK(devrt_stream_partition(rt, s, &q))) CHECK_W(q != NULL);
      RETRY(devrt_stream_release(rt, s));
    }
    RETRY(devrt_layout_activate(rt, NULL));
  }
  if (r->w->keep_layout)
    r->w->kept = l;
  else
    RETRY(devrt_layout_destroy(rt, l));
}

/* Peer access between the run's two runtimes (the sweep only: disabling it is not thread-safe
 * with other calls on them): a tracked copy from a block of rt into a block of the other. */
static void step_peer(run* r) {
  devrt_runtime *rt = r->rt, *o = r->w->other;
  int n = 0;
  devrt_peer_info pi;
  devrt_stream os = 0;
  devrt_block x = alloc(r, N * 4, r->s[0], "wl.px"), ob = 0;
  uint32_t* host = calloc(N, 4);
  if (!OK(devrt_peer_count(rt, &n)) || !OK(devrt_peer_query(rt, o, &pi)) || !x || !host ||
      !fill(r, r->s[0], x, r->v + 8, N) || !OK(devrt_peer_enable(rt, o))) {
    release_block(r, &x, 0);
    free(host);
    return;
  }
  void* p = NULL;
  if (OK(devrt_stream_acquire(o, DEVRT_ACQUIRE_FAIL, &os)) &&
      OK(devrt_block_alloc(o, N * 4, os, "wl.peer", &ob)) &&
      OK(devrt_block_copy(rt, r->s[0], ob, 0, x, 0, N * 4)) && OK(devrt_block_ptr(o, ob, &p)) &&
      OK(devrt_prepare_block_use(o, ob, os, DEVRT_ACCESS_READ)) &&
      OK(devrt_memcpy_async(o, host, p, N * 4, os)) &&
      OK(devrt_finish_block_use(o, ob, os, DEVRT_ACCESS_READ)) &&
      OK(devrt_stream_synchronize(o, os)))
    for (unsigned i = 0; i < N; i++) r->w->corruptions += host[i] != r->v + 8;
  if (os) RETRY(devrt_stream_synchronize(o, os));
  for (int i = 0; ob && i < 4 && !OK(devrt_block_free(o, ob)); i++) {}
  if (os) RETRY(devrt_stream_release(o, os));
  settle(r, r->s[0]);
  RETRY(devrt_peer_disable(rt, o));
  release_block(r, &x, 0);
  free(host);
}

/* A module of the program's own host kernels (host backend only). */
/* A capture on s[0] with a temporary of its own (allocated, filled, copied out and freed in it),
 * its graph launched twice on s[1] and read there, then destroyed: a failed end or destroy leaves
 * nothing behind (drained: nothing live). */
static void step_graph(run* r) {
  devrt_block out = alloc(r, N * 4, r->s[1], "wl.graph"), tmp = 0;
  if (out && fill(r, r->s[1], out, 0, N) && OK(devrt_capture_begin(r->rt, r->s[0]))) {
    bool given = false; /* tmp freed in the capture: the graph's */
    if ((tmp = alloc(r, N * 4, r->s[0], "wl.graph tmp")) && fill(r, r->s[0], tmp, r->v ^ 5, N) &&
        copy(r, r->s[0], out, tmp))
      given = OK(devrt_block_free(r->rt, tmp));
    devrt_graph* g = NULL;
    bool made = OK(devrt_capture_end(r->rt, r->s[0], &g));
    if (!given) release_block(r, &tmp, 0); /* an ordinary block: freed, the graph is stale */
    if (made && given) {
      bool ran = false;
      for (int i = 0; i < 2; i++) ran = OK(devrt_graph_launch(g, r->s[1])) || ran;
      if (ran) expect(r, r->s[1], out, N, r->v ^ 5);
    }
    if (made) RETRY(devrt_graph_destroy(g));
  }
  settle(r, r->s[1]);
  release_block(r, &out, 0);
}

static void host_add(const devrt_host_grid* g, void** args) {
  (void)g;
  **(uint32_t**)args[0] += *(uint32_t*)args[1];
}

static void step_host_module(run* r) {
  static const devrt_host_kernel table[] = {{"wl_add", host_add, 2, {sizeof(void*), 4}}};
  devrt_module* m = NULL;
  devrt_kernel* k = NULL;
  devrt_block b = alloc(r, N * 4, r->s[0], "wl.hm");
  if (b && OK(devrt_module_load_host(r->rt, table, 1, &m)) &&
      OK(devrt_kernel_get(m, "wl_add", &k)) && fill(r, r->s[0], b, r->v, N)) {
    void* p = ptr(r, b);
    uint32_t add = 7;
    void* args[] = {&p, &add};
    devrt_block_use u = {b, DEVRT_ACCESS_READ_WRITE};
    devrt_launch_desc d = {.stream = r->s[0],
                           .kernel = k,
                           .grid = {1},
                           .block = {1},
                           .args = args,
                           .uses = &u,
                           .nuses = 1};
    uint32_t got = 0;
    if (p && OK(devrt_launch(r->rt, &d)) && read_back(r, r->s[0], b, &got, sizeof got))
      r->w->corruptions += got != r->v + 7;
  }
  settle(r, r->s[0]);
  if (m) RETRY(devrt_module_unload(r->rt, m));
  release_block(r, &b, 0);
}

/* ---- PyTorch's entry points ---- */

typedef struct canary {
  const uint32_t* p;
  atomic_int ran, bad; /* the reader ran; it found a word that was not the canary */
} canary;

/* A slow reader on the host backend (memory is host memory): checks the allocation still holds
 * the canary. */
static void read_canary(void* user) {
  canary* c = user;
  nap(), nap();
  int bad = 0;
  for (int k = 0; k < N; k++) bad |= c->p[k] != (CANARY);
  atomic_store(&c->bad, bad);
  atomic_store(&c->ran, 1);
}

/* The torch call just made did not fail (no message), or failed for the injected fault. */
static bool torch_ok(run* r, const char* what, int line) {
  const char* msg = devrt_last_error();
  r->w->calls++;
  if (!msg[0]) return true;
  if (caused(r->w, msg)) {
    r->w->tolerated++;
    return false;
  }
  r->w->errors++;
  fprintf(stderr, "workload line %d: %s: %s\n", line, what, msg);
  return false;
}
#define TORCH_OK(call) ((call), torch_ok(r, #call, __LINE__))

/* An allocation on the framework's stream a holding the canary, a slow reader of it on stream b
 * recorded with record_stream, its free (which must never fail: PyTorch does not retry one), an
 * allocation on a that may take the same memory, overwritten at once: the reader must still see
 * the canary. That allocation records the per-thread stream, which devrt cannot import. */
static void step_torch(run* r) {
  devrt_runtime* fw = r->w->framework;
  devrt_stream a = 0, b = 0;
  void *na = NULL, *nb = NULL;
  if (OK(devrt_stream_acquire(fw, DEVRT_ACQUIRE_FAIL, &a)) &&
      OK(devrt_stream_acquire(fw, DEVRT_ACQUIRE_FAIL, &b)) && OK(devrt_stream_native(fw, a, &na)) &&
      OK(devrt_stream_native(fw, b, &nb))) {
    uint32_t* p = NULL;
    canary c = {.p = NULL};
    if (TORCH_OK(p = devrt_torch_alloc(N * 4, 0, na))) {
      bool reading = false;
      if (OK(devrt_stream_synchronize(fw, a))) {
        for (int k = 0; k < N; k++) p[k] = CANARY;
        c.p = p;
        reading = OK(devrt_stream_host_func(fw, b, read_canary, &c));
        devrt_torch_record_stream(p, nb);
        CHECK_W(devrt_last_error()[0] == 0);
      }
      devrt_torch_free(p, N * 4, 0, na);
      if (devrt_last_error()[0]) { /* never, whatever failed inside it */
        r->w->errors++;
        fprintf(stderr, "workload: devrt_torch_free failed: %s\n", devrt_last_error());
      }
      uint32_t* q = NULL;
      if (TORCH_OK(q = devrt_torch_alloc(N * 4, 0, na))) {
        if (OK(devrt_memset_async(fw, q, 0x5a, N * 4, a))) settle_on(r, fw, a);
        devrt_torch_record_stream(q, DEVRT_STREAM_PER_THREAD); /* waited for on the host */
        devrt_torch_free(q, N * 4, 0, na);
        CHECK_W(devrt_last_error()[0] == 0);
      }
      settle_on(r, fw, b);
      CHECK_W(!reading || atomic_load(&c.ran));
      r->w->corruptions += atomic_load(&c.bad) != 0;
    }
  }
  if (b) RETRY(devrt_stream_release(fw, b));
  if (a) RETRY(devrt_stream_release(fw, a));
}

void wl_run(wl* w) {
  run x = {.w = w, .rt = w->rt, .v = w->seed * 2654435761u | 1u}, *r = &x;
  devrt_runtime_info ri;
  devrt_device_info di;
  if (!OK(devrt_runtime_info_get(r->rt, &ri)) || !OK(devrt_device_info_get(r->rt, &di))) return;
  r->host = ri.backend == DEVRT_BACKEND_HOST;
  r->min_sms = di.min_partition_sms;
  if (OK(devrt_module_load(r->rt, NULL, &r->mod)) &&
      OK(devrt_kernel_get(r->mod, "devrt_fill_u32", &r->fill)) &&
      OK(devrt_kernel_get(r->mod, "devrt_copy_u32", &r->copy)) &&
      OK(devrt_kernel_get(r->mod, "devrt_checksum_u32", &r->sum)) &&
      OK(devrt_kernel_get(r->mod, "devrt_slow_fill_u32", &r->slow)) &&
      OK(devrt_stream_acquire(r->rt, DEVRT_ACQUIRE_FAIL, &r->s[0])) &&
      OK(devrt_stream_acquire(r->rt, DEVRT_ACQUIRE_FAIL, &r->s[1]))) {
    step_blocks(r);
    step_foreign(r);
    step_events(r);
    step_memory(r);
    step_queue(r);
    step_hop(r);
    step_stack(r);
    step_graph(r);
    if (w->layout) step_layout(r);
    if (w->exclusive && w->other) step_peer(r);
    if (r->host) step_host_module(r);
    if (r->host && w->framework) step_torch(r);
  }
  for (int i = 0; i < 2; i++)
    if (r->s[i]) RETRY(devrt_stream_release(r->rt, r->s[i]));
  if (r->mod) RETRY(devrt_module_unload(r->rt, r->mod));
}

void wl_finish(wl* w) {
  run x = {.w = w, .rt = w->rt}, *r = &x;
  if (w->kept) RETRY(devrt_layout_destroy(w->rt, w->kept));
  w->kept = NULL;
}

void wl_drained(wl* w, devrt_runtime* rt) {
  run x = {.w = w, .rt = rt}, *r = &x;
  devrt_resource* top = NULL;
  devrt_resource_figures f;
  devrt_block_stats bs;
  devrt_runtime_info ri;
  uint64_t n;
  RETRY(devrt_reap_pending(rt, DEVRT_REAP_WAIT, &n));
  if (OK(devrt_runtime_resource(rt, &top))) {
    RETRY(devrt_resource_trim(top, &n));
    RETRY(devrt_reap_pending(rt, DEVRT_REAP_WAIT, &n));
    if (OK(devrt_resource_query(top, &f))) {
      CHECK_W(f.live_bytes == 0 && f.pending_bytes == 0 && f.cached_bytes == 0);
      if (f.live_bytes || f.pending_bytes || f.cached_bytes)
        fprintf(stderr, "workload: live %llu pending %llu cached %llu bytes after the drain\n",
                (unsigned long long)f.live_bytes, (unsigned long long)f.pending_bytes,
                (unsigned long long)f.cached_bytes);
    }
  }
  if (OK(devrt_block_stats_get(rt, &bs))) CHECK_W(bs.blocks_live == 0);
  if (OK(devrt_runtime_info_get(rt, &ri))) CHECK_W(ri.streams_in_use == 0);
}
