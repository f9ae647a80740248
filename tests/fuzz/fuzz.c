/* fuzz.c: the sequence fuzzer. From a seed, 1..3 threads make random sequences of devrt's public
 * calls on the host backend: owned runtimes created and destroyed, stream acquire/release/import,
 * blocks with valid, stale, forged and foreign handles, launches with random use lists and shapes,
 * events, resource stacks with budgets and sub-budgets, sizes from 0 to SIZE_MAX, semaphores with
 * values past the maximum, queue submissions waiting for values that come later or never, layouts
 * with odd specs, captures replayed as graphs. Every status is checked against what the headers
 * document for the call, live allocations must never overlap, and at the end everything drains to
 * zero. A finding prints the seed, the call, devrt_last_error() and the thread's last calls.
 *
 * usage: fuzz SEED [OPS_PER_THREAD] [THREADS]   one seed in this process (THREADS 0: 1..3 from
 *                                                the seed); exit 0 clean, 3 findings, 4 hang
 *        fuzz --seeds FIRST COUNT [OPS]         seeds FIRST.. in a child process each
 *        fuzz --seconds S [FIRST] [OPS]         seeds FIRST.. (default 1) for S seconds
 * Environment: FZ_SKIP=letters leaves call families out (see worker_main); FZ_PAIRED=1 calls a
 * finish only right after a prepare on the same stream; FZ_CUDA=1 uses the cuda backend;
 * FZ_TRACE=1 traces block, launch and submit calls; FZ_VERBOSE=1 every call; FZ_ALARM=seconds
 * (default 20) before a seed counts as hung. */
#include <devrt/devrt.h>
#include <devrt/torch.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static unsigned long long g_seed;
static int g_ops, g_threads; /* this seed's run: reproduced by `fuzz SEED OPS THREADS` */
static atomic_ullong g_calls;
static atomic_int g_findings;
static int g_verbose;
static int g_share_used; /* SHARE and stream-0 launches make a released id legitimately live */
static int g_trace;
#define TR(...)                                \
  do {                                         \
    if (g_trace) fprintf(stderr, __VA_ARGS__); \
  } while (0)

/* Sets of statuses a call may return. */
#define B(s) (1u << (s))
#define OK_ B(DEVRT_OK)
#define INV B(DEVRT_ERR_INVALID_ARGUMENT)
#define OVB B(DEVRT_ERR_OVER_BUDGET)
#define STALE B(DEVRT_ERR_STALE_BLOCK)
#define IST B(DEVRT_ERR_INVALID_STATE)
#define DAF B(DEVRT_ERR_DEVICE_ALLOC_FAILED)
#define UNS B(DEVRT_ERR_UNSUPPORTED)
#define TMO B(DEVRT_ERR_TIMEOUT)
#define ABT B(DEVRT_ERR_ABORTED)
#define OOR B(DEVRT_ERR_OUT_OF_RESOURCES)

/* ---- each thread's last calls, printed with a finding ---- */

enum { RING = 32 };
typedef struct ring {
  int id; /* the worker, -1 for the main thread */
  struct {
    const char* call;
    int line;
    devrt_status st;
  } e[RING];
  unsigned n;      /* calls recorded so far */
  const char* cur; /* the call in progress (a hang names it), and its line */
  int cur_line;
} ring;
static _Thread_local ring* t_ring;
static ring g_main_ring = {.id = -1};
static ring* g_rings[8]; /* the workers' rings, for the alarm's report */
static int g_nrings;

/* Notes the call about to run (CHK's first step). */
static void enter(const char* call, int line) {
  ring* r = t_ring ? t_ring : &g_main_ring;
  r->cur = call, r->cur_line = line;
}

static void record(const char* call, int line, devrt_status st) {
  ring* r = t_ring ? t_ring : &g_main_ring;
  r->e[r->n % RING].call = call, r->e[r->n % RING].line = line, r->e[r->n % RING].st = st;
  r->n++;
  r->cur = NULL;
}

/* Not instrumented for TSan: the alarm reads other threads' rings as they stop (a report ends). */
__attribute__((no_sanitize_thread)) static void print_ring_of(const ring* r, unsigned last) {
  fprintf(stderr, "  reproduce: fuzz %llu %d %d; thread %d's last %u calls (oldest first):\n",
          g_seed, g_ops, g_threads, r->id, r->n < last ? r->n : last);
  for (unsigned i = r->n > last ? r->n - last : 0; i < r->n; i++)
    fprintf(stderr, "    #%u line %d: %s -> %s\n", i, r->e[i % RING].line, r->e[i % RING].call,
            devrt_status_name(r->e[i % RING].st));
  if (r->cur) fprintf(stderr, "    in progress, line %d: %s\n", r->cur_line, r->cur);
}
static void print_ring(void) { print_ring_of(t_ring ? t_ring : &g_main_ring, RING); }

static void finding(const char* what, const char* call, int line, devrt_status st) {
  atomic_fetch_add(&g_findings, 1);
  fprintf(stderr, "FINDING seed=%llu line=%d %s: %s -> %s (%d) [%s]\n", g_seed, line, what, call,
          devrt_status_name(st), (int)st, devrt_last_error());
  print_ring();
}
static devrt_status chk_(devrt_status st, unsigned allowed, const char* call, int line) {
  atomic_fetch_add_explicit(&g_calls, 1, memory_order_relaxed);
  record(call, line, st);
  if ((unsigned)st >= DEVRT_STATUS_COUNT_ || !(allowed & B(st)))
    finding("unexpected status", call, line, st);
  else if (g_verbose)
    fprintf(stderr, "  %s -> %s\n", call, devrt_status_name(st));
  return st;
}
/* The call's status must be one of `allowed`. */
#define CHK(expr, allowed) chk_((enter(#expr, __LINE__), (expr)), (allowed), #expr, __LINE__)
#define ASSERT(cond, msg)                                                                      \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      atomic_fetch_add(&g_findings, 1);                                                        \
      fprintf(stderr, "FINDING seed=%llu line=%d invariant: %s (%s) [%s]\n", g_seed, __LINE__, \
              msg, #cond, devrt_last_error());                                                 \
      print_ring();                                                                            \
    }                                                                                          \
  } while (0)

/* ---- rng ---- */
typedef struct {
  unsigned long long s;
} rng;
static unsigned long long rnext(rng* r) {
  r->s ^= r->s << 13;
  r->s ^= r->s >> 7;
  r->s ^= r->s << 17;
  return r->s;
}
static unsigned rn(rng* r, unsigned n) { return n ? (unsigned)(rnext(r) % n) : 0; }
static int chance(rng* r, unsigned pct) { return rn(r, 100) < pct; }

static size_t rand_size(rng* r) {
  switch (rn(r, 12)) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return 1 + 2 * rn(r, 2000); /* odd */
    case 3:
      return (size_t)1 << (20 + rn(r, 12)); /* 1 MiB .. 2 GiB: often over budget */
    case 4:
      return SIZE_MAX;
    case 5:
      return SIZE_MAX - rn(r, 4096);
    case 6:
      return (size_t)1 << 62;
    default:
      return 4 + 4 * (size_t)rn(r, 4096);
  }
}

/* Whether an allocation of n bytes passes the size check (1..DEVRT_MAX_ALLOC_SIZE). */
static int fits(size_t n) { return n && n <= DEVRT_MAX_ALLOC_SIZE; }

/* ---- shared run state ---- */
#define NSEMS 6
#define NSHARED 4
static devrt_runtime* g_rt;
static devrt_runtime* g_rt2; /* a second owned runtime: foreign handles */
static devrt_block g_foreign_block;
static devrt_stream g_foreign_stream;
static devrt_semaphore* g_foreign_sem;
static devrt_module* g_mod;
static devrt_kernel *k_fill, *k_slow;
static devrt_semaphore* g_sems[NSEMS];
static _Atomic devrt_block g_shared[NSHARED];
static size_t g_shared_size[NSHARED];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static devrt_resource* g_child; /* a sub-budget under the runtime's budget (may be NULL) */

/* dead handles (stale blocks / released stream ids), shared */
#define NDEAD 256
static devrt_block g_dead_blocks[NDEAD];
static unsigned g_ndead_blocks;
static devrt_stream g_dead_streams[NDEAD];
static unsigned g_ndead_streams;
static devrt_block g_all_blocks[1 << 14]; /* every block handle ever returned OK: drained at end */
static unsigned g_nall;

static void note_block(devrt_block b) {
  pthread_mutex_lock(&g_mu);
  if (g_nall < sizeof g_all_blocks / sizeof g_all_blocks[0]) g_all_blocks[g_nall++] = b;
  pthread_mutex_unlock(&g_mu);
}
static void dead_block(devrt_block b) {
  pthread_mutex_lock(&g_mu);
  g_dead_blocks[g_ndead_blocks++ % NDEAD] = b;
  pthread_mutex_unlock(&g_mu);
}
static devrt_block any_dead_block(rng* r) {
  pthread_mutex_lock(&g_mu);
  devrt_block b =
      g_ndead_blocks ? g_dead_blocks[rn(r, g_ndead_blocks < NDEAD ? g_ndead_blocks : NDEAD)] : 0;
  pthread_mutex_unlock(&g_mu);
  return b;
}
static void dead_stream(devrt_stream s) {
  pthread_mutex_lock(&g_mu);
  g_dead_streams[g_ndead_streams++ % NDEAD] = s;
  pthread_mutex_unlock(&g_mu);
}
static devrt_stream any_dead_stream(rng* r) {
  pthread_mutex_lock(&g_mu);
  devrt_stream s = g_ndead_streams
                       ? g_dead_streams[rn(r, g_ndead_streams < NDEAD ? g_ndead_streams : NDEAD)]
                       : 0;
  pthread_mutex_unlock(&g_mu);
  return s;
}

/* address registry: no two live allocations may overlap */
typedef struct {
  unsigned char* p;
  size_t n;
} span;
#define NSPAN 8192
static span g_spans[NSPAN];
static unsigned g_nspans;
static void span_add(void* p, size_t n, int line) {
  pthread_mutex_lock(&g_mu);
  for (unsigned i = 0; i < g_nspans; i++) {
    unsigned char* a = g_spans[i].p;
    if ((unsigned char*)p < a + g_spans[i].n && a < (unsigned char*)p + n) {
      atomic_fetch_add(&g_findings, 1);
      fprintf(stderr, "FINDING seed=%llu line=%d overlap: new [%p,+%zu) overlaps live [%p,+%zu)\n",
              g_seed, line, p, n, (void*)a, g_spans[i].n);
    }
  }
  if (g_nspans < NSPAN) g_spans[g_nspans++] = (span){p, n};
  pthread_mutex_unlock(&g_mu);
}
static void span_del(void* p) {
  pthread_mutex_lock(&g_mu);
  for (unsigned i = 0; i < g_nspans; i++)
    if (g_spans[i].p == p) {
      g_spans[i] = g_spans[--g_nspans];
      break;
    }
  pthread_mutex_unlock(&g_mu);
}

/* ---- per-thread state ---- */
#define MAXS 8
#define MAXB 64
#define MAXA 64
typedef struct {
  devrt_block h;
  void* p;
  size_t size;
} blk;
typedef struct {
  devrt_resource* r;
  void* p;
  size_t size;
  devrt_stream s;
} ralloc;
typedef struct {
  int id;
  rng r;
  int ops;
  devrt_stream streams[MAXS];
  unsigned nstreams;
  blk blocks[MAXB];
  unsigned nblocks;
  ralloc allocs[MAXA];
  unsigned nallocs;
  devrt_event* ev;
  devrt_layout* layout;
  int layout_active;
  unsigned nparts;
  devrt_stream pstreams[MAXS];
  unsigned npstreams;
  ralloc pallocs[16];
  unsigned npallocs;
  devrt_resource* own_stack; /* a private stack: budget over caching over async */
  ralloc oallocs[16];
  unsigned noallocs;
  uint64_t sem_seen[NSEMS];
  devrt_stream imports[MAXS]; /* imported stream ids (devrt_stream_import), forgotten at the end */
  unsigned nimports;
  ralloc torch[16]; /* devrt_torch_alloc's (r unused; s: the index of its framework stream) */
  unsigned ntorch;
  ring ring; /* its last calls */
} worker;

static devrt_stream pick_stream(worker* w) {
  if (w->nimports && chance(&w->r, 10)) return w->imports[rn(&w->r, w->nimports)];
  if (w->nstreams && !chance(&w->r, 8)) return w->streams[rn(&w->r, w->nstreams)];
  switch (rn(&w->r, 4)) {
    case 0:
      return 0;
    case 1:
      return any_dead_stream(&w->r);
    case 2:
      return g_foreign_stream;
    default:
      return rnext(&w->r);
  }
}
/* s is held by this thread: a lease of the pool or an import. */
static int stream_valid(worker* w, devrt_stream s) {
  for (unsigned i = 0; i < w->nstreams; i++)
    if (w->streams[i] == s) return 1;
  for (unsigned i = 0; i < w->nimports; i++)
    if (w->imports[i] == s) return 1;
  return 0;
}
/* a stream id that is not ours: allowed to be live only if SHARE is in play */
static unsigned bad_stream_ok(void) { return INV | (g_share_used ? OK_ : 0); }

static void op_acquire(worker* w) {
  if (w->nstreams >= MAXS) return;
  devrt_acquire_mode m = rn(&w->r, 3);
  if (m == DEVRT_ACQUIRE_WAIT && (w->nstreams || w->npstreams))
    m = DEVRT_ACQUIRE_FAIL; /* avoid hold-and-wait deadlock */
  if (m == DEVRT_ACQUIRE_SHARE && !g_share_used) m = DEVRT_ACQUIRE_FAIL;
  devrt_stream s = 0;
  devrt_status st =
      CHK(devrt_stream_acquire(g_rt, m, &s), OK_ | (m == DEVRT_ACQUIRE_FAIL ? OOR : 0));
  if (st == DEVRT_OK) {
    ASSERT(s != 0, "acquire returned stream 0");
    w->streams[w->nstreams++] = s;
  }
}
static void op_release(worker* w) {
  if (!w->nstreams || chance(&w->r, 10)) {
    devrt_stream s = pick_stream(w);
    if (!stream_valid(w, s) && !g_share_used) CHK(devrt_stream_release(g_rt, s), INV);
    return;
  }
  unsigned i = rn(&w->r, w->nstreams);
  devrt_stream s = w->streams[i];
  /* blocks allocated on it stay valid; the lease simply ends */
  CHK(devrt_stream_release(g_rt, s), OK_);
  w->streams[i] = w->streams[--w->nstreams];
  dead_stream(s);
  if (!g_share_used && chance(&w->r, 30)) CHK(devrt_stream_release(g_rt, s), INV); /* twice */
}

static void op_block_alloc(worker* w) {
  if (w->nblocks >= MAXB) return;
  size_t n = rand_size(&w->r);
  devrt_stream s = pick_stream(w);
  int valid_stream = stream_valid(w, s);
  devrt_block b = 0;
  unsigned allowed =
      valid_stream && fits(n) ? (OK_ | OVB | DAF) : (INV | OVB | DAF | (g_share_used ? OK_ : 0));
  devrt_status st =
      CHK(devrt_block_alloc(g_rt, n, s, chance(&w->r, 50) ? "fz" : NULL, &b), allowed);
  if (st != DEVRT_OK) return;
  ASSERT(b != 0, "block_alloc returned handle 0");
  void* p = NULL;
  CHK(devrt_block_ptr(g_rt, b, &p), OK_);
  devrt_block_info info;
  if (CHK(devrt_block_info_get(g_rt, b, &info), OK_) == DEVRT_OK) {
    ASSERT(info.size == n, "block info size differs from request");
    ASSERT(info.ptr == p, "block info ptr differs from block_ptr");
    ASSERT(((uintptr_t)p & 255) == 0, "block not 256-aligned");
  }
  span_add(p, n, __LINE__);
  note_block(b);
  w->blocks[w->nblocks++] = (blk){b, p, n};
  TR("T%d block_alloc %#llx p %p n %zu stream %#llx\n", w->id, (unsigned long long)b, p, n,
     (unsigned long long)s);
}

static void op_block_free(worker* w) {
  if (!w->nblocks || chance(&w->r, 15)) {
    devrt_block b;
    switch (rn(&w->r, 4)) {
      case 0:
        b = any_dead_block(&w->r);
        if (!b) return;
        CHK(devrt_block_free(g_rt, b), STALE);
        return;
      case 1:
        CHK(devrt_block_free(g_rt, 0), INV);
        return;
      case 2:
        CHK(devrt_block_free(g_rt, g_foreign_block), STALE | INV);
        return;
      default:
        b = rnext(&w->r);
        CHK(devrt_block_free(g_rt, b), STALE | INV);
        return;
    }
  }
  unsigned i = rn(&w->r, w->nblocks);
  blk k = w->blocks[i];
  w->blocks[i] = w->blocks[--w->nblocks];
  span_del(k.p);
  /* Only this thread frees its blocks: whatever another thread's launch or queued work is
   * issuing against it, the free of a live block is never refused. */
  devrt_status fst = CHK(devrt_block_free(g_rt, k.h), OK_);
  TR("T%d block_free %#llx p %p -> %s\n", w->id, (unsigned long long)k.h, k.p,
     devrt_status_name(fst));
  dead_block(k.h);
  if (chance(&w->r, 30)) CHK(devrt_block_free(g_rt, k.h), STALE); /* double free */
  if (chance(&w->r, 20)) {
    void* p;
    CHK(devrt_block_ptr(g_rt, k.h, &p), STALE);
  }
}

static devrt_block pick_any_block(worker* w, int* kind) {
  /* kind: 0 own live, 1 shared (maybe freed concurrently), 2 stale, 3 zero, 4 forged, 5 foreign */
  unsigned c = rn(&w->r, 100);
  if (c < 55 && w->nblocks) {
    *kind = 0;
    return w->blocks[rn(&w->r, w->nblocks)].h;
  }
  if (c < 80) {
    *kind = 1;
    devrt_block b = atomic_load(&g_shared[rn(&w->r, NSHARED)]);
    if (b) return b;
  }
  if (c < 88) {
    devrt_block b = any_dead_block(&w->r);
    if (b) {
      *kind = 2;
      return b;
    }
  }
  if (c < 92) {
    *kind = 3;
    return 0;
  }
  if (c < 96) {
    *kind = 4;
    return rnext(&w->r) | 1;
  }
  *kind = 5;
  return g_foreign_block;
}

static void op_block_query(worker* w) {
  int kind;
  devrt_block b = pick_any_block(w, &kind);
  unsigned allowed = kind == 0   ? OK_
                     : kind == 1 ? (OK_ | STALE)
                     : kind == 3 ? INV
                     : kind == 4 ? (STALE | INV)
                                 : STALE;
  void* p;
  devrt_block_info info;
  if (chance(&w->r, 50))
    CHK(devrt_block_ptr(g_rt, b, &p), allowed);
  else
    CHK(devrt_block_info_get(g_rt, b, &info), allowed);
  if (chance(&w->r, 40)) {
    devrt_stream s = pick_stream(w);
    devrt_access a = chance(&w->r, 10) ? (devrt_access)(rn(&w->r, 3) ? 0 : 4 + rn(&w->r, 100))
                                       : (devrt_access)(1 + rn(&w->r, 3));
    int valid = stream_valid(w, s) && a >= 1 && a <= 3;
    unsigned al = valid ? allowed : (allowed | INV) & ~(unsigned)(g_share_used ? 0 : OK_);
    if (!valid && g_share_used) al |= OK_;
    if (kind != 0 && kind != 1) al &= ~OK_;
    if (al == 0) al = INV | STALE;
    unsigned fin = al | INV | STALE | (kind == 1 ? IST : 0); /* a shared block: a racing free */
    if (chance(&w->r, 50))
      CHK(devrt_prepare_block_use(g_rt, b, s, a), al | INV | STALE);
    else if (!getenv("FZ_PAIRED"))
      CHK(devrt_finish_block_use(g_rt, b, s, a), fin);
    else if (CHK(devrt_prepare_block_use(g_rt, b, s, a), al | INV | STALE) == DEVRT_OK)
      CHK(devrt_finish_block_use(g_rt, b, s, a), fin); /* a finish only after a prepare */
  }
}

static devrt_status enq_cb(void* user, devrt_stream stream, void* native) {
  (void)stream;
  (void)native;
  return (devrt_status)(uintptr_t)user;
}

static void op_launch(worker* w) {
  devrt_block_use uses[300];
  unsigned n = 0;
  int expect_fail = 0; /* a documented refusal must happen */
  int may_stale = 0;   /* shared blocks may be freed concurrently */
  /* target: a live own block or a shared block, written by fill */
  blk target = {0};
  int tkind = 0;
  if (w->nblocks && chance(&w->r, 70))
    target = w->blocks[rn(&w->r, w->nblocks)];
  else {
    unsigned i = rn(&w->r, NSHARED);
    target.h = atomic_load(&g_shared[i]);
    target.size = g_shared_size[i];
    if (!target.h) return;
    tkind = 1;
    may_stale = 1;
    /* ptr: read it now; if the block is freed right after, the launch must be refused (STALE) or
     * the free deferred until the kernel ran: either way the memory is valid when the kernel runs
     */
    if (devrt_block_ptr(g_rt, target.h, &target.p) != DEVRT_OK) return;
  }
  (void)tkind;
  if (target.size < 4) {
    if (!target.h) return;
  }
  uint64_t cnt = target.size / 4;
  uses[n++] =
      (devrt_block_use){target.h, chance(&w->r, 50) ? DEVRT_ACCESS_WRITE : DEVRT_ACCESS_READ_WRITE};
  unsigned extra = chance(&w->r, 3) ? 257 + rn(&w->r, 40) : rn(&w->r, 6);
  for (unsigned i = 0; i < extra && n < 300; i++) {
    int kind;
    devrt_block b;
    if (chance(&w->r, 20)) { /* a block named twice */
      b = uses[rn(&w->r, n)].block;
      kind = 0;
    } else {
      b = pick_any_block(w, &kind);
    }
    if (kind == 1) may_stale = 1;
    if (kind >= 2) expect_fail = 1;
    devrt_access a = (devrt_access)(1 + rn(&w->r, 3));
    if (chance(&w->r, 3)) {
      a = (devrt_access)(chance(&w->r, 50) ? 0 : 4 + rn(&w->r, 50));
      expect_fail = 1;
    }
    uses[n++] = (devrt_block_use){b, a};
  }
  if (n > DEVRT_LAUNCH_MAX_USES) expect_fail = 1;
  devrt_launch_desc d = {0};
  int stream_maybe_ok = 0;
  if (w->nstreams && !chance(&w->r, 15))
    d.stream = w->streams[rn(&w->r, w->nstreams)];
  else if (g_share_used && chance(&w->r, 70))
    d.stream = 0; /* acquire (SHARE) for this launch */
  else {
    d.stream = pick_stream(w);
    if (d.stream == 0 && !g_share_used) d.stream = g_foreign_stream;
    if (!stream_valid(w, d.stream)) {
      expect_fail = 1;
      stream_maybe_ok = g_share_used && d.stream != g_foreign_stream;
    }
  }
  uint32_t val = (uint32_t)rnext(&w->r);
  uint64_t delay = 20000;
  void* args[4] = {&target.p, &val, &cnt, &delay};
  unsigned shape = rn(&w->r, 10);
  d.grid[0] = 1 + rn(&w->r, 8);
  d.block[0] = 1 + rn(&w->r, 64);
  if (shape == 0)
    d.grid[0] = 0;
  else if (shape == 1)
    d.block[0] = 0;
  else if (shape == 2) {
    d.grid[1] = rn(&w->r, 3);
    d.grid[2] = rn(&w->r, 3);
    d.block[1] = rn(&w->r, 3);
  } else if (shape == 3) {
    d.block[0] = 1u << 20; /* past CUDA's 1024 threads a block */
  }
  int kc = rn(&w->r, 10);
  if (kc < 6)
    d.kernel = k_fill;
  else if (kc < 8)
    d.kernel = k_slow;
  else if (kc < 9) {
    d.enqueue = enq_cb;
    d.user = (void*)(uintptr_t)(chance(&w->r, 70) ? DEVRT_OK : DEVRT_ERR_BACKEND_ERROR);
  } else { /* neither a kernel nor an enqueue callback */
    d.kernel = NULL;
    expect_fail = 1;
  }
  if (chance(&w->r, 3) && d.kernel) { /* both */
    d.enqueue = enq_cb;
    expect_fail = 1;
  }
  if ((shape == 0 || shape == 1) && d.kernel)
    expect_fail = 1;                           /* a zero shape matters for kernels only */
  if (shape == 3 && d.kernel) expect_fail = 1; /* CUDA's limits hold on every backend */
  d.args = args;
  d.uses = uses;
  d.nuses = n;
  if (chance(&w->r, 3)) {
    d.uses = NULL;
    if (n) expect_fail = 1;
  }
  unsigned allowed = expect_fail ? (INV | STALE) : (OK_ | (may_stale ? STALE | IST : 0));
  if (stream_maybe_ok) allowed |= OK_ | B(DEVRT_ERR_BACKEND_ERROR);
  if (d.enqueue && !d.kernel && !expect_fail && d.user)
    allowed = B(DEVRT_ERR_BACKEND_ERROR) | (may_stale ? STALE | IST : 0);
  if (expect_fail && may_stale) allowed |= IST;
  int before = atomic_load(&g_findings);
  devrt_status lst = CHK(devrt_launch(g_rt, &d), allowed);
  TR("T%d launch %s stream %#llx target %#llx p %p n %llu k %s uses %u first_access %d -> %s\n",
     w->id, tkind ? "shared" : "own", (unsigned long long)d.stream, (unsigned long long)target.h,
     target.p, (unsigned long long)cnt,
     d.kernel == k_fill   ? "fill"
     : d.kernel == k_slow ? "slow"
                          : "other",
     d.nuses, uses[0].access, devrt_status_name(lst));
  if (atomic_load(&g_findings) != before) {
    fprintf(stderr,
            "  launch: stream %#llx valid %d kernel %p enqueue %p user %p grid %u,%u,%u block "
            "%u,%u,%u uses %p nuses %u expect_fail %d may_stale %d\n",
            (unsigned long long)d.stream, stream_valid(w, d.stream), (void*)d.kernel,
            (void*)(uintptr_t)d.enqueue, d.user, d.grid[0], d.grid[1], d.grid[2], d.block[0],
            d.block[1], d.block[2], (void*)d.uses, d.nuses, expect_fail, may_stale);
    for (unsigned i = 0; i < n && i < 8; i++)
      fprintf(stderr, "    use %#llx access %d\n", (unsigned long long)uses[i].block,
              uses[i].access);
  }
}

static void op_event(worker* w) {
  switch (rn(&w->r, 6)) {
    case 0:
      if (w->ev) {
        CHK(devrt_event_destroy(g_rt, w->ev), OK_);
        w->ev = NULL;
      }
      CHK(devrt_event_create(g_rt, rn(&w->r, 4), &w->ev), OK_ | INV);
      break;
    case 1:
      if (w->ev) {
        devrt_stream s = pick_stream(w);
        CHK(devrt_event_record(g_rt, w->ev, s), stream_valid(w, s) ? OK_ : bad_stream_ok());
      }
      break;
    case 2:
      if (w->ev) {
        devrt_stream s = pick_stream(w);
        CHK(devrt_stream_wait_event(g_rt, s, w->ev), stream_valid(w, s) ? OK_ : bad_stream_ok());
      }
      break;
    case 3:
      if (w->ev) {
        bool c;
        CHK(devrt_event_query(g_rt, w->ev, &c), OK_);
      }
      break;
    case 4:
      if (w->ev) CHK(devrt_event_synchronize(g_rt, w->ev), OK_);
      break;
    default: {
      devrt_stream s = pick_stream(w);
      CHK(devrt_stream_synchronize(g_rt, s), stream_valid(w, s) ? OK_ : bad_stream_ok());
    }
  }
}

static atomic_int g_hostfn_count;
static void host_fn(void* u) {
  (void)u;
  atomic_fetch_add(&g_hostfn_count, 1);
}

static void op_stream_misc(worker* w) {
  devrt_stream s = pick_stream(w);
  unsigned al = stream_valid(w, s) ? OK_ : bad_stream_ok();
  if (chance(&w->r, 50)) {
    void* nat;
    CHK(devrt_stream_native(g_rt, s, &nat), al);
  } else
    CHK(devrt_stream_host_func(g_rt, s, host_fn, NULL), al);
}

static devrt_resource* rt_res(void) {
  devrt_resource* r = NULL;
  CHK(devrt_runtime_resource(g_rt, &r), OK_);
  return r;
}

static void op_res_alloc(worker* w) {
  if (w->nallocs >= MAXA) return;
  devrt_resource* r = (g_child && chance(&w->r, 40)) ? g_child : rt_res();
  if (!r) return;
  size_t n = rand_size(&w->r);
  devrt_stream s = pick_stream(w);
  int ok = stream_valid(w, s) && fits(n);
  void* p = NULL;
  devrt_status st = CHK(devrt_resource_allocate(r, n, s, "fzr", &p),
                        ok ? (OK_ | OVB | DAF) : (INV | OVB | DAF | (g_share_used ? OK_ : 0)));
  if (st != DEVRT_OK) return;
  ASSERT(p != NULL, "allocate OK but NULL");
  ASSERT(((uintptr_t)p & 255) == 0, "allocate not 256-aligned");
  span_add(p, n, __LINE__);
  w->allocs[w->nallocs++] = (ralloc){r, p, n, s};
}

static void op_res_free(worker* w) {
  devrt_resource* top = rt_res();
  if (!w->nallocs || chance(&w->r, 15)) {
    int local;
    void* foreign = chance(&w->r, 50) ? (void*)&local : NULL;
    devrt_stream s = w->nstreams ? w->streams[0] : 0;
    if (top) CHK(devrt_resource_deallocate(top, foreign, 256, s), INV);
    return;
  }
  unsigned i = rn(&w->r, w->nallocs);
  ralloc a = w->allocs[i];
  devrt_stream s = a.s;
  if (!stream_valid(w, s)) s = w->nstreams ? w->streams[rn(&w->r, w->nstreams)] : 0;
  if (!s) return; /* need a stream to free on; keep it for the drain */
  unsigned c = rn(&w->r, 10);
  if (c ==
      0) { /* wrong size: refused, or accepted when it rounds the same; either way consistent */
    size_t wrong = a.size + 1 + rn(&w->r, 1 << 20);
    span_del(a.p);
    devrt_status st = CHK(devrt_resource_deallocate(a.r, a.p, wrong, s), OK_ | INV);
    if (st != DEVRT_OK) {
      span_add(a.p, a.size, __LINE__);
      return;
    }
  } else {
    span_del(a.p);
    CHK(devrt_resource_deallocate(a.r, a.p, a.size, s), OK_);
  }
  span_del(a.p);
  w->allocs[i] = w->allocs[--w->nallocs];
}

static void op_reap(worker* w) {
  uint64_t bytes = 0;
  unsigned c = rn(&w->r, 4);
  if (c == 0)
    CHK(devrt_reap_pending(g_rt, DEVRT_REAP_WAIT, &bytes), OK_);
  else if (c == 1)
    CHK(devrt_reap_pending(g_rt, 0, chance(&w->r, 50) ? &bytes : NULL), OK_);
  else if (c == 2) {
    devrt_resource* r = rt_res();
    uint64_t rel;
    if (r) CHK(devrt_resource_trim(r, &rel), OK_);
  } else {
    devrt_resource* r = rt_res();
    devrt_resource_figures f;
    if (r && CHK(devrt_resource_query(r, &f), OK_) == DEVRT_OK && f.limit_bytes)
      ASSERT(f.live_bytes + f.pending_bytes + f.cached_bytes <= f.limit_bytes,
             "held over the budget limit");
    devrt_block_stats bs;
    CHK(devrt_block_stats_get(g_rt, &bs), OK_);
    devrt_queue_stats qs;
    CHK(devrt_queue_stats_get(g_rt, &qs), OK_);
    devrt_pool_stats ps;
    CHK(devrt_pool_stats_get(g_rt, &ps), OK_);
    devrt_runtime_info ri;
    CHK(devrt_runtime_info_get(g_rt, &ri), OK_);
    ASSERT(ri.streams_in_use <= ri.stream_pool_size, "streams_in_use > pool size");
  }
}

/* private stack: budget(limit) -> caching -> async, used on own streams */
static void op_own_stack(worker* w) {
  if (!w->own_stack) {
    devrt_resource *a = NULL, *c = NULL, *b = NULL;
    if (CHK(devrt_async_resource_create(g_rt, &a), OK_)) return;
    devrt_caching_options co = {.cross_stream_wait = chance(&w->r, 50),
                                .max_cached_bytes = rn(&w->r, 3) * 65536};
    if (CHK(devrt_caching_resource_create(a, chance(&w->r, 20) ? NULL : &co, &c), OK_)) {
      devrt_resource_release(a);
      return;
    }
    devrt_budget_options bo = {.limit_bytes = chance(&w->r, 10) ? 0 : 4096 + rn(&w->r, 1 << 20),
                               .wait_for_pending = chance(&w->r, 50)};
    devrt_status st = CHK(devrt_budget_create(c, &bo, &b), bo.limit_bytes ? OK_ : INV);
    devrt_resource_release(a); /* c holds a */
    if (st) {
      devrt_resource_release(c);
      return;
    }
    devrt_resource_release(c); /* b holds c */
    w->own_stack = b;
    return;
  }
  if (chance(&w->r, 55) && w->noallocs < 16) {
    size_t n = rand_size(&w->r);
    if (!w->nstreams) return;
    devrt_stream s = w->streams[rn(&w->r, w->nstreams)];
    void* p;
    if (CHK(devrt_resource_allocate(w->own_stack, n, s, NULL, &p),
            fits(n) ? (OK_ | OVB | DAF) : INV) == DEVRT_OK) {
      span_add(p, n, __LINE__);
      w->oallocs[w->noallocs++] = (ralloc){w->own_stack, p, n, s};
    }
  } else if (w->noallocs) {
    unsigned i = rn(&w->r, w->noallocs);
    ralloc a = w->oallocs[i];
    devrt_stream s = stream_valid(w, a.s) ? a.s : (w->nstreams ? w->streams[0] : 0);
    if (!s) return;
    span_del(a.p);
    CHK(devrt_resource_deallocate(w->own_stack, a.p, a.size, s), OK_);
    /* A double free is refused here, where only this worker allocates: a shared resource may hand
     * the freed pointer to another thread at once (same size: its free is then legal). */
    if (chance(&w->r, 25)) CHK(devrt_resource_deallocate(w->own_stack, a.p, a.size, s), INV);
    w->oallocs[i] = w->oallocs[--w->noallocs];
  } else {
    devrt_resource_figures f;
    CHK(devrt_resource_query(w->own_stack, &f), OK_);
    uint64_t x;
    CHK(devrt_resource_reap(w->own_stack, chance(&w->r, 50) ? DEVRT_REAP_WAIT : 0, &x), OK_);
  }
}

/* ---- semaphores and the queue ---- */
static devrt_semaphore* pick_sem(worker* w, int* idx) {
  *idx = (int)rn(&w->r, NSEMS);
  return g_sems[*idx];
}
static uint64_t rand_value(worker* w, int idx) {
  uint64_t cur = w->sem_seen[idx];
  switch (rn(&w->r, 10)) {
    case 0:
      return UINT64_MAX;
    case 1:
      return DEVRT_SEMAPHORE_MAX_VALUE + rn(&w->r, 3);
    case 2:
      return cur ? cur - 1 : 0;
    case 3:
      return cur;
    case 4:
      return cur + 1000000;
    default:
      return cur + 1 + rn(&w->r, 4);
  }
}
static void observe(worker* w, int idx) {
  uint64_t v = 0;
  devrt_status st = CHK(devrt_semaphore_query(g_sems[idx], &v), OK_ | ABT);
  if (st == DEVRT_OK || st == DEVRT_ERR_ABORTED) {
    ASSERT(v >= w->sem_seen[idx], "semaphore value went backwards");
    if (v > w->sem_seen[idx]) w->sem_seen[idx] = v;
  }
}

static void op_sem(worker* w) {
  int idx;
  devrt_semaphore* s = pick_sem(w, &idx);
  switch (rn(&w->r, 8)) {
    case 0:
    case 1: {
      observe(w, idx);
      uint64_t v = rand_value(w, idx);
      unsigned al =
          v > DEVRT_SEMAPHORE_MAX_VALUE || v <= w->sem_seen[idx] ? (INV | ABT) : (OK_ | INV | ABT);
      if (CHK(devrt_semaphore_signal(s, v), al) == DEVRT_OK) {
        uint64_t q;
        if (devrt_semaphore_query(s, &q) == DEVRT_OK)
          ASSERT(q >= v, "query below a value just signalled");
      }
      break;
    }
    case 2:
      observe(w, idx);
      break;
    case 3: {
      uint64_t v = rand_value(w, idx);
      uint64_t t = rn(&w->r, 3) == 0 ? 0 : 1000 + rn(&w->r, 2000000);
      struct timespec a, b;
      clock_gettime(CLOCK_MONOTONIC, &a);
      devrt_status st = CHK(devrt_semaphore_wait(s, v, t),
                            v > DEVRT_SEMAPHORE_MAX_VALUE ? (INV | ABT) : (OK_ | TMO | ABT));
      clock_gettime(CLOCK_MONOTONIC, &b);
      if (st == DEVRT_ERR_TIMEOUT) {
        uint64_t el =
            (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull + (uint64_t)(b.tv_nsec - a.tv_nsec);
        ASSERT(el >= t, "wait returned TIMEOUT earlier than asked");
      }
      break;
    }
    case 4:
      if (chance(&w->r, 15)) {
        static const char* msgs[] = {NULL, "fz failure", NULL};
        char big[400];
        memset(big, 'x', sizeof big - 1);
        big[sizeof big - 1] = 0;
        unsigned c = rn(&w->r, 10);
        devrt_status fs = c == 0   ? DEVRT_OK
                          : c == 1 ? (devrt_status)(DEVRT_STATUS_COUNT_ + 5)
                                   : (devrt_status)(1 + rn(&w->r, DEVRT_STATUS_COUNT_ - 1));
        devrt_status st =
            CHK(devrt_semaphore_fail(s, fs, chance(&w->r, 30) ? big : msgs[rn(&w->r, 3)]),
                fs == DEVRT_OK || c == 1 ? (INV | OK_) : OK_);
        (void)st;
        devrt_status rs;
        const char* m;
        CHK(devrt_semaphore_failure(s, &rs, &m), OK_);
        /* the first failure wins: ours (a message of at most 255 bytes) or an earlier one's, a
         * failed submission's message naming its work and cause (longer) */
        if (fs != DEVRT_OK && c != 1 && st == DEVRT_OK)
          ASSERT(rs != DEVRT_OK && m != NULL && strlen(m) < 320, "failure root cause");
      }
      break;
    default: {
      unsigned n = rn(&w->r, 5);
      devrt_semaphore* ss[5];
      uint64_t vs[5];
      int bad = 0;
      for (unsigned i = 0; i < n; i++) {
        int j;
        ss[i] = chance(&w->r, 10) ? g_foreign_sem : pick_sem(w, &j);
        if (ss[i] == g_foreign_sem) j = -1;
        vs[i] = j >= 0 ? rand_value(w, j) : 1 + rn(&w->r, 3);
        if (vs[i] > DEVRT_SEMAPHORE_MAX_VALUE) bad = 1;
      }
      unsigned index = 999;
      devrt_wait_mode m = chance(&w->r, 5) ? (devrt_wait_mode)7 : (devrt_wait_mode)rn(&w->r, 2);
      unsigned al = n == 0           ? (OK_ | (m > 1 ? INV : 0))
                    : (bad || m > 1) ? (INV | ABT)
                                     : (OK_ | TMO | ABT);
      devrt_status st = CHK(
          devrt_semaphores_wait(n, ss, vs, m, rn(&w->r, 2) ? 0 : rn(&w->r, 1000000), &index), al);
      if (m == DEVRT_WAIT_ANY && (st == DEVRT_OK || st == DEVRT_ERR_ABORTED) && n)
        ASSERT(index < n, "index out of range");
    }
  }
}

static atomic_int g_hostcalls;
static devrt_status host_call(void* u) {
  atomic_fetch_add(&g_hostcalls, 1);
  return (devrt_status)(uintptr_t)u;
}

static void op_submit(worker* w) {
  devrt_submission sub = {0};
  devrt_semaphore_value waits[70], sigs[70];
  int bad = 0;
  unsigned nw = chance(&w->r, 3) ? 65 : rn(&w->r, 3), ns = chance(&w->r, 3) ? 65 : rn(&w->r, 3);
  if (nw > DEVRT_QUEUE_MAX_WAITS || ns > DEVRT_QUEUE_MAX_SIGNALS) bad = 1;
  for (unsigned i = 0; i < nw; i++) {
    int j;
    waits[i].semaphore = chance(&w->r, 4) ? (bad = 1, g_foreign_sem) : pick_sem(w, &j);
    if (waits[i].semaphore == g_foreign_sem) j = 0;
    /* waits often for values that come later (or never) */
    waits[i].value = rn(&w->r, 3) ? w->sem_seen[j] + rn(&w->r, 4) : rand_value(w, j);
    if (waits[i].value > DEVRT_SEMAPHORE_MAX_VALUE) bad = 1;
  }
  for (unsigned i = 0; i < ns; i++) {
    int j;
    sigs[i].semaphore = chance(&w->r, 4) ? (bad = 1, g_foreign_sem) : pick_sem(w, &j);
    if (sigs[i].semaphore == g_foreign_sem) j = 0;
    observe(w, j);
    sigs[i].value = rand_value(w, j);
    if (sigs[i].value > DEVRT_SEMAPHORE_MAX_VALUE || sigs[i].value <= w->sem_seen[j]) bad = 1;
  }
  sub.waits = nw ? waits : (chance(&w->r, 50) ? NULL : waits);
  sub.nwaits = nw;
  sub.signals = ns ? sigs : NULL;
  sub.nsignals = ns;
  if (g_share_used && (chance(&w->r, 30) || !w->nstreams))
    sub.stream = 0; /* a pool stream (shared) */
  else if (!w->nstreams)
    return;
  else
    sub.stream = w->streams[rn(&w->r, w->nstreams)];
  devrt_block newb = 0;
  unsigned k = rn(&w->r, 6);
  int free_idx = -1;
  uint64_t cnt = 0;
  void* tp = NULL;
  uint32_t val = 7;
  void* args[3] = {&tp, &val, &cnt};
  devrt_block_use use;
  switch (k) {
    case 0:
      sub.kind = DEVRT_WORK_BARRIER;
      break;
    case 1:
      sub.kind = DEVRT_WORK_HOST_CALL;
      sub.host.fn = chance(&w->r, 5) ? (bad = 1, NULL) : host_call;
      sub.host.user = (void*)(uintptr_t)(chance(&w->r, 80) ? DEVRT_OK : DEVRT_ERR_BACKEND_ERROR);
      break;
    case 2:
      sub.kind = DEVRT_WORK_ALLOC;
      sub.alloc.size = chance(&w->r, 10) ? (bad = 1, 0) : 4 + 4 * rn(&w->r, 1024);
      sub.alloc.tag = "q";
      sub.alloc.out = chance(&w->r, 5) ? (bad = 1, NULL) : &newb;
      break;
    case 3:
      if (!w->nblocks) return;
      sub.kind = DEVRT_WORK_FREE;
      free_idx = (int)rn(&w->r, w->nblocks);
      sub.block = w->blocks[free_idx].h;
      break;
    case 4: {
      if (!w->nblocks) return;
      blk t = w->blocks[rn(&w->r, w->nblocks)];
      if (t.size < 4) return;
      tp = t.p;
      cnt = t.size / 4;
      use = (devrt_block_use){t.h, DEVRT_ACCESS_WRITE};
      sub.kind = DEVRT_WORK_LAUNCH;
      sub.launch = (devrt_launch_desc){.kernel = k_fill,
                                       .grid = {1 + rn(&w->r, 4)},
                                       .block = {1 + rn(&w->r, 32)},
                                       .args = args,
                                       .uses = &use,
                                       .nuses = 1};
      if (chance(&w->r, 10)) {
        use.block = any_dead_block(&w->r);
        if (!use.block) return;
        bad = 1;
      }
      break;
    }
    default:
      sub.kind = (devrt_work_kind)(5 + rn(&w->r, 10));
      bad = 1;
      break;
  }
  if (sub.stream && !stream_valid(w, sub.stream)) bad = 1;
  /* a signal value can be overtaken by another thread's signal between our query and the submit */
  int before = atomic_load(&g_findings);
  if (k == 3)
    span_del(w->blocks[free_idx].p); /* a queued free may run, and the memory go on, at once */
  devrt_status st = CHK(devrt_queue_submit(g_rt, &sub), bad ? (INV | STALE) : (OK_ | INV));
  if (k == 3 && st != DEVRT_OK) span_add(w->blocks[free_idx].p, w->blocks[free_idx].size, __LINE__);
  if (atomic_load(&g_findings) != before) {
    fprintf(stderr, "  submit: kind %d stream %#llx valid %d nwaits %u waits %p nsignals %u\n",
            (int)sub.kind, (unsigned long long)sub.stream, stream_valid(w, sub.stream), sub.nwaits,
            (void*)sub.waits, sub.nsignals);
    for (unsigned i = 0; i < nw && i < 4; i++)
      fprintf(stderr, "    wait %p%s %llu\n", (void*)waits[i].semaphore,
              waits[i].semaphore == g_foreign_sem ? "(foreign)" : "",
              (unsigned long long)waits[i].value);
    for (unsigned i = 0; i < ns && i < 4; i++)
      fprintf(stderr, "    signal %p%s %llu\n", (void*)sigs[i].semaphore,
              sigs[i].semaphore == g_foreign_sem ? "(foreign)" : "",
              (unsigned long long)sigs[i].value);
    if (k == 2)
      fprintf(stderr, "    alloc size %zu out %p\n", sub.alloc.size, (void*)sub.alloc.out);
    if (k == 1) fprintf(stderr, "    host fn %p\n", (void*)(uintptr_t)sub.host.fn);
  }
  TR("T%d submit kind %d stream %#llx nw %u ns %u block %#llx tp %p -> %s\n", w->id, (int)sub.kind,
     (unsigned long long)sub.stream, nw, ns,
     (unsigned long long)(k == 3   ? sub.block
                          : k == 4 ? use.block
                                   : 0),
     tp, devrt_status_name(st));
  if (st == DEVRT_OK) {
    if (k == 2) {
      ASSERT(newb != 0, "queued alloc returned handle 0");
      note_block(newb);
    }
    if (k == 3) w->blocks[free_idx] = w->blocks[--w->nblocks];
    /* the queued free/alloc'd block is drained at the end through g_all_blocks */
  }
}

/* ---- partitions ---- */
static void rand_spec(worker* w, devrt_layout_spec* sp, unsigned* counts) {
  memset(sp, 0, sizeof *sp);
  if (chance(&w->r, 50)) {
    sp->groups = rn(&w->r, 10);
    sp->min_sms = rn(&w->r, 10);
  } else {
    sp->count = chance(&w->r, 5) ? 65 + rn(&w->r, 5) : rn(&w->r, 5);
    for (unsigned i = 0; i < sp->count && i < 70; i++) counts[i] = rn(&w->r, 5);
    sp->sm_counts = chance(&w->r, 5) ? NULL : counts;
    if (chance(&w->r, 10)) { /* both forms */
      sp->groups = 1;
      sp->min_sms = 1;
    }
  }
  sp->remainder = (devrt_remainder)rn(&w->r, chance(&w->r, 5) ? 10 : 3);
  sp->flags = chance(&w->r, 10) ? (unsigned)rnext(&w->r)
                                : (rn(&w->r, 2) ? DEVRT_LAYOUT_IGNORE_COSCHEDULING : 0) |
                                      (rn(&w->r, 4) == 0 ? DEVRT_LAYOUT_PLAIN_STREAMS : 0);
  sp->streams = rn(&w->r, 4) == 0 ? 100 + rn(&w->r, 5000) : rn(&w->r, 4);
}
#define LAYOUT_OK (OK_ | INV | OOR | UNS)

static void op_partition(worker* w) {
  if (!w->layout) {
    devrt_layout_spec sp;
    unsigned counts[72];
    devrt_layout_plan plan;
    rand_spec(w, &sp, counts);
    devrt_status ps = CHK(devrt_layout_plan_get(g_rt, &sp, &plan), LAYOUT_OK);
    if (chance(&w->r, 50)) return;
    devrt_layout* l = NULL;
    devrt_status cs = CHK(devrt_layout_create(g_rt, &sp, &l), LAYOUT_OK);
    /* plan_get "returns the status devrt_layout_create would return"; stream-slot exhaustion is
     * the only thing a dry run cannot know (other threads hold slots) */
    if (cs != ps && !(cs == DEVRT_ERR_OUT_OF_RESOURCES && ps == DEVRT_OK)) {
      atomic_fetch_add(&g_findings, 1);
      fprintf(stderr,
              "FINDING seed=%llu plan/create disagree: plan %s create %s (groups %u min %u count "
              "%u rem %u flags %#x streams %u) [%s]\n",
              g_seed, devrt_status_name(ps), devrt_status_name(cs), sp.groups, sp.min_sms, sp.count,
              sp.remainder, sp.flags, sp.streams, devrt_last_error());
    }
    if (cs == DEVRT_OK) {
      devrt_layout_info li;
      if (CHK(devrt_layout_info_get(g_rt, l, &li), OK_) == DEVRT_OK) {
        w->nparts = li.plan.partitions;
        ASSERT(li.plan.partitions >= 1 && li.plan.partitions <= DEVRT_MAX_PARTITIONS,
               "partitions out of range");
        if (ps == DEVRT_OK)
          ASSERT(plan.partitions == li.plan.partitions, "plan and create partition count differ");
      }
      w->layout = l;
    }
    return;
  }
  devrt_partition* p = NULL;
  unsigned idx = rn(&w->r, w->nparts + 2);
  if (CHK(devrt_layout_partition(g_rt, w->layout, idx, &p), idx < w->nparts ? OK_ : INV) !=
      DEVRT_OK)
    return;
  switch (rn(&w->r, 8)) {
    case 0: {
      devrt_partition_info pi;
      CHK(devrt_partition_info_get(g_rt, p, &pi), OK_);
      break;
    }
    case 1:
      if (w->npstreams < MAXS) {
        devrt_stream s;
        devrt_acquire_mode m = rn(&w->r, 2)
                                   ? DEVRT_ACQUIRE_FAIL
                                   : (g_share_used ? DEVRT_ACQUIRE_SHARE : DEVRT_ACQUIRE_FAIL);
        if (CHK(devrt_partition_stream_acquire(g_rt, p, m, &s), OK_ | OOR) == DEVRT_OK) {
          w->pstreams[w->npstreams++] = s;
          devrt_partition* q;
          CHK(devrt_stream_partition(g_rt, s, &q), OK_);
          ASSERT(q == p, "stream_partition mismatch");
        }
      }
      break;
    case 2:
      if (w->npstreams) {
        unsigned i = rn(&w->r, w->npstreams);
        CHK(devrt_stream_release(g_rt, w->pstreams[i]), OK_);
        dead_stream(w->pstreams[i]);
        w->pstreams[i] = w->pstreams[--w->npstreams];
      }
      break;
    case 3:
      CHK(devrt_partition_set_budget(g_rt, p,
                                     chance(&w->r, 10)    ? UINT64_MAX
                                     : rn(&w->r, 10) == 0 ? 0
                                                          : rn(&w->r, 1 << 22)),
          OK_ | INV);
      break;
    case 4:
      if (w->npstreams && w->npallocs < 16) {
        devrt_resource* r;
        if (CHK(devrt_partition_resource(g_rt, p, &r), OK_)) break;
        void* ptr;
        size_t n = 256 + rn(&w->r, 65536);
        devrt_stream s = w->pstreams[rn(&w->r, w->npstreams)];
        if (CHK(devrt_resource_allocate(r, n, s, "part", &ptr), OK_ | OVB | DAF) == DEVRT_OK) {
          span_add(ptr, n, __LINE__);
          w->pallocs[w->npallocs++] = (ralloc){r, ptr, n, s};
        }
      }
      break;
    case 5:
      if (w->npallocs) {
        unsigned i = rn(&w->r, w->npallocs);
        ralloc a = w->pallocs[i];
        int ok = 0;
        for (unsigned j = 0; j < w->npstreams; j++) ok |= w->pstreams[j] == a.s;
        devrt_stream s = ok ? a.s : (w->nstreams ? w->streams[0] : 0);
        if (!s) break;
        span_del(a.p);
        CHK(devrt_resource_deallocate(a.r, a.p, a.size, s), OK_);
        w->pallocs[i] = w->pallocs[--w->npallocs];
      }
      break;
    case 6: {
      int act = !w->layout_active;
      /* only one thread's layout may be active at a time meaningfully; activation of our own */
      if (CHK(devrt_layout_activate(g_rt, act ? w->layout : NULL), OK_) == DEVRT_OK)
        w->layout_active = act;
      break;
    }
    default: {
      int busy = w->npstreams || w->npallocs;
      devrt_status st = CHK(devrt_layout_destroy(g_rt, w->layout), busy ? IST : (OK_ | IST));
      if (st == DEVRT_OK) {
        w->layout = NULL;
        w->nparts = 0;
      }
    }
  }
}

static void op_pool(worker* w) {
  if (!w->nstreams) return;
  devrt_stream s = w->streams[rn(&w->r, w->nstreams)];
  size_t n = rn(&w->r, 5) ? 1 + rn(&w->r, 4096) : (chance(&w->r, 50) ? 0 : SIZE_MAX);
  void* p = NULL;
  if (chance(&w->r, 50)) {
    if (CHK(devrt_pool_alloc(g_rt, n, s, &p), n && n != SIZE_MAX ? OK_ : (INV | DAF)) == DEVRT_OK) {
      CHK(devrt_memset_async(g_rt, p, rn(&w->r, 256), n, s), OK_);
      CHK(devrt_pool_free(g_rt, p, s), OK_);
    }
  } else {
    if (CHK(devrt_mem_alloc(g_rt, n, &p), n && n != SIZE_MAX ? OK_ : (INV | DAF)) == DEVRT_OK) {
      unsigned char tmp[64];
      size_t m = n < sizeof tmp ? n : sizeof tmp;
      CHK(devrt_memcpy_async(g_rt, tmp, p, m, s), OK_);
      CHK(devrt_stream_synchronize(g_rt, s), OK_);
      CHK(devrt_mem_free(g_rt, p), OK_);
    }
  }
}

static void op_shared(worker* w) {
  unsigned i = rn(&w->r, NSHARED);
  devrt_block b = atomic_exchange(&g_shared[i], 0);
  if (!b) return;
  /* taken out of the table: no other thread frees it; their launches over it never make the
   * free refused */
  devrt_status st = CHK(devrt_block_free(g_rt, b), OK_);
  TR("T%d shared_free %#llx -> %s\n", w->id, (unsigned long long)b, devrt_status_name(st));
  dead_block(b);
  /* replace it */
  devrt_stream s = w->nstreams ? w->streams[0] : 0;
  if (!s) return;
  devrt_block nb;
  if (CHK(devrt_block_alloc(g_rt, g_shared_size[i], s, "shared", &nb), OK_ | OVB) == DEVRT_OK) {
    note_block(nb);
    atomic_store(&g_shared[i], nb);
  }
}

/* An owned runtime of the thread's own from a random, sometimes malformed, configuration:
 * refused with INVALID_ARGUMENT, or created, used a little, refused destruction while a block and
 * then a semaphore of it live, and destroyed (with a stream still held, at times). */
static void op_runtime(worker* w) {
  devrt_config c;
  CHK(devrt_config_init(&c), OK_);
  c.backend = getenv("FZ_CUDA") ? DEVRT_BACKEND_CUDA : DEVRT_BACKEND_HOST;
  c.stream_pool_size = 1 + rn(&w->r, 4);
  c.host_workers = 1 + rn(&w->r, 4);
  c.budget_bytes = (1u << 16) + rn(&w->r, 1u << 22);
  c.partition_streams = rn(&w->r, 8);
  int bad = 1;
  switch (rn(&w->r, 10)) {
    case 0:
      c.stream_pool_size = chance(&w->r, 50) ? 0 : DEVRT_MAX_STREAMS + 1;
      break;
    case 1:
      c.backend = (devrt_backend_kind)(3 + rn(&w->r, 100));
      break;
    case 2:
      c.host_workers = chance(&w->r, 50) ? 0 : 1025;
      break;
    case 3:
      c.budget_bytes = 0, c.budget_percent = chance(&w->r, 50) ? 0 : 101;
      break;
    case 4:
      c.ordinal = chance(&w->r, 50) ? -1 : DEVRT_MAX_ORDINALS;
      break;
    case 5:
      c.partition_streams = DEVRT_MAX_STREAMS; /* with the pool: past the slot table */
      break;
    case 6:
      c.stream_priority = 1 + (int)rn(&w->r, 64); /* outside every device's range */
      break;
    default:
      bad = 0;
  }
  devrt_runtime* rt = NULL;
  if (CHK(devrt_runtime_create(&c, &rt), bad ? INV : OK_) != DEVRT_OK) return;
  devrt_stream s = 0;
  devrt_block b = 0;
  devrt_semaphore* sem = NULL;
  CHK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s), OK_);
  CHK(devrt_block_alloc(rt, 1 + rn(&w->r, 1 << 16), s, "fz.rt", &b), OK_ | OVB);
  CHK(devrt_semaphore_create(rt, 0, &sem), OK_);
  if (b) {
    CHK(devrt_runtime_destroy(rt), IST); /* a live block */
    CHK(devrt_block_free(rt, b), OK_);
    CHK(devrt_block_free(rt, b), STALE);
  }
  CHK(devrt_runtime_destroy(rt), IST); /* a live semaphore */
  CHK(devrt_semaphore_destroy(sem), OK_);
  if (chance(&w->r, 50)) CHK(devrt_stream_release(rt, s), OK_);
  CHK(devrt_runtime_destroy(rt), OK_);
}

/* A runtime whose stream another runtime imported is not destroyed until the import goes. */
static void import_holds_owner(worker* w) {
  devrt_config c;
  devrt_runtime* o = NULL;
  devrt_stream s = 0, id = 0;
  void* native = NULL;
  CHK(devrt_config_init(&c), OK_);
  c.backend = getenv("FZ_CUDA") ? DEVRT_BACKEND_CUDA : DEVRT_BACKEND_HOST;
  c.stream_pool_size = 1, c.host_workers = 1 + rn(&w->r, 2);
  if (CHK(devrt_runtime_create(&c, &o), OK_) != DEVRT_OK) return;
  CHK(devrt_stream_acquire(o, DEVRT_ACQUIRE_FAIL, &s), OK_);
  CHK(devrt_stream_native(o, s, &native), OK_);
  if (CHK(devrt_stream_import(g_rt, native, &id), OK_ | OOR) == DEVRT_OK) {
    CHK(devrt_runtime_destroy(o), IST); /* g_rt holds its stream */
    CHK(devrt_stream_forget(g_rt, id), OK_);
  }
  CHK(devrt_stream_release(o, s), OK_);
  CHK(devrt_runtime_destroy(o), OK_);
}

/* Imported streams: the legacy default stream (NULL) and another runtime's stream, used as this
 * thread's own; refused: a stream of this runtime's pool, the per-thread stream, forgetting a pool
 * stream or a made-up id. */
static void op_import(worker* w) {
  if (w->nimports && chance(&w->r, 35)) {
    unsigned i = rn(&w->r, w->nimports);
    CHK(devrt_stream_forget(g_rt, w->imports[i]), OK_);
    w->imports[i] = w->imports[--w->nimports];
    return;
  }
  devrt_stream id = 0;
  void* native = NULL;
  switch (rn(&w->r, 5)) {
    case 0:
    case 1:
      if (w->nimports == MAXS) return;
      if (!chance(&w->r, 50)) CHK(devrt_stream_native(g_rt2, g_foreign_stream, &native), OK_);
      if (CHK(devrt_stream_import(g_rt, native, &id), OK_ | OOR) == DEVRT_OK)
        w->imports[w->nimports++] = id;
      break;
    case 2:
      if (!w->nstreams) return;
      CHK(devrt_stream_native(g_rt, w->streams[0], &native), OK_);
      CHK(devrt_stream_import(g_rt, native, &id), INV); /* its own pool's: use the id */
      break;
    case 3:
      CHK(devrt_stream_import(g_rt, DEVRT_STREAM_PER_THREAD, &id), UNS);
      if (chance(&w->r, 20)) import_holds_owner(w);
      break;
    default:
      CHK(devrt_stream_forget(g_rt, w->nstreams ? w->streams[0] : rnext(&w->r) | 1), INV);
  }
}

/* ---- PyTorch's entry points (devrt/torch.h): the process-wide runtime of ordinal 0 ---- */

enum { NFW = 3 };
static devrt_runtime* g_fw; /* the "framework": its streams stand for PyTorch's (never destroyed:
                             * the torch entry points hold their imports for the process) */
static void* g_fw_native[NFW];
static devrt_stream g_fw_stream[NFW];
static atomic_int g_torch_imported; /* a torch allocation was made on a g_fw stream: held */

/* A framework stream by index: g_fw's, or the legacy default stream (NFW). */
static void* fw_native(unsigned i) { return i < NFW ? g_fw_native[i] : NULL; }
static unsigned fw_pick(worker* w) { return rn(&w->r, NFW + 1); }

/* A reader of a live allocation on a framework stream (host memory on the host backend). */
static void torch_reader(void* u) {
  volatile unsigned char* p = u;
  (void)p[0];
}

/* The torch entry points never return a status: a call failed iff it set devrt_last_error(). */
static void torch_expect(bool fails, const char* call, int line) {
  bool failed = devrt_last_error()[0] != 0;
  chk_(failed ? DEVRT_ERR_INVALID_ARGUMENT : DEVRT_OK, fails ? INV : OK_, call, line);
}

static void op_torch(worker* w) {
  unsigned c = rn(&w->r, 10);
  if (c < 4 && w->ntorch < 16) { /* allocate */
    size_t size = chance(&w->r, 70) ? 4 + 4 * (size_t)rn(&w->r, 4096) : rand_size(&w->r);
    unsigned si = fw_pick(w);
    int dev = chance(&w->r, 5) ? (chance(&w->r, 50) ? -1 : DEVRT_MAX_ORDINALS) : 0;
    void* native = chance(&w->r, 4) ? DEVRT_STREAM_PER_THREAD : fw_native(si);
    void* p = devrt_torch_alloc(size, dev, native);
    if (p && si < NFW) atomic_store(&g_torch_imported, 1); /* imported g_fw's stream */
    if (p) {
      torch_expect(false, "devrt_torch_alloc", __LINE__);
      ASSERT(size && dev == 0 && native != DEVRT_STREAM_PER_THREAD, "a refusal gave memory");
      span_add(p, size, __LINE__);
      w->torch[w->ntorch++] = (ralloc){NULL, p, size, si};
    } else {
      /* 0 bytes: NULL without an error; a bad device or stream, or no memory: an error */
      torch_expect(size != 0, "devrt_torch_alloc (NULL)", __LINE__);
    }
  } else if (c < 6 && w->ntorch) { /* record_stream, with a reader there first at times */
    ralloc* a = &w->torch[rn(&w->r, w->ntorch)];
    unsigned si = rn(&w->r, NFW + 2);
    void* native = si == NFW + 1 ? DEVRT_STREAM_PER_THREAD : fw_native(si);
    if (si < NFW && !getenv("FZ_CUDA") && chance(&w->r, 60))
      CHK(devrt_stream_host_func(g_fw, g_fw_stream[si], torch_reader, a->p), OK_);
    devrt_torch_record_stream(a->p, native);
    torch_expect(false, "devrt_torch_record_stream", __LINE__);
  } else if (c < 9 && w->ntorch) { /* free, on its stream or another */
    unsigned i = rn(&w->r, w->ntorch);
    ralloc a = w->torch[i];
    w->torch[i] = w->torch[--w->ntorch];
    span_del(a.p);
    devrt_torch_free(a.p, a.size, 0, fw_native(chance(&w->r, 80) ? (unsigned)a.s : fw_pick(w)));
    torch_expect(false, "devrt_torch_free", __LINE__); /* never fails: PyTorch never retries */
  } else {                                             /* not devrt's pointer, or NULL */
    int local = 0;
    devrt_torch_free(chance(&w->r, 50) ? (void*)&local : NULL, 64, 0, fw_native(fw_pick(w)));
    torch_expect(devrt_last_error()[0] != 0, "devrt_torch_free (foreign or NULL)", __LINE__);
    devrt_torch_record_stream(NULL, fw_native(0));
    torch_expect(false, "devrt_torch_record_stream (NULL)", __LINE__);
  }
}

/* A recorded fill of block h (at p, n bytes) with val on s: one block of 64 threads. */
static devrt_status fill(devrt_stream s, devrt_block h, void* p, uint64_t n, uint32_t val) {
  uint64_t cnt = n / 4;
  void* args[3] = {&p, &val, &cnt};
  devrt_block_use u = {h, DEVRT_ACCESS_WRITE};
  devrt_launch_desc d = {.stream = s,
                         .kernel = k_fill,
                         .grid = {1},
                         .block = {64},
                         .args = args,
                         .uses = &u,
                         .nuses = 1};
  return devrt_launch(g_rt, &d);
}

/* A capture on one of this thread's own streams (only when streams are not shared: another
 * thread's call on it would be refused), a few fills of own blocks recorded, a synchronize
 * refused naming the capture, and so is a queued host call, the end, launches of the graph on own
 * streams, directly and queued, at times one of its blocks freed and the next launch refused as
 * STALE, and its destroy. */
static void op_graph(worker* w) {
  if (g_share_used || !w->nstreams || !w->nblocks) return;
  devrt_stream s = w->streams[rn(&w->r, w->nstreams)];
  if (CHK(devrt_capture_begin(g_rt, s), OK_) != DEVRT_OK) return;
  CHK(devrt_stream_synchronize(g_rt, s), IST);
  CHK(devrt_capture_begin(g_rt, s), IST);
  devrt_submission sub = {.stream = s, .kind = DEVRT_WORK_HOST_CALL, .host = {host_call, NULL}};
  CHK(devrt_queue_submit(g_rt, &sub), IST); /* a capture records no host call */
  unsigned fills = 1 + rn(&w->r, 4);
  blk used[4];
  for (unsigned i = 0; i < fills; i++) {
    used[i] = w->blocks[rn(&w->r, w->nblocks)];
    CHK(fill(s, used[i].h, used[i].p, used[i].size, (uint32_t)rnext(&w->r)), OK_);
  }
  /* at times a temporary: allocated, filled and freed in the capture (the graph's from then on,
   * its handle stale), its memory live until the graph is destroyed */
  devrt_block tmp = 0;
  void* tp = NULL;
  uint64_t tn = 64 + rn(&w->r, 4096) / 4 * 4;
  if (chance(&w->r, 50) &&
      CHK(devrt_block_alloc(g_rt, tn, s, "fz.cap", &tmp), OK_ | OVB | DAF) == DEVRT_OK) {
    CHK(devrt_block_ptr(g_rt, tmp, &tp), OK_);
    span_add(tp, tn, __LINE__);
    CHK(fill(s, tmp, tp, tn, 7), OK_);
    CHK(devrt_block_free(g_rt, tmp), OK_);
    void* p = NULL;
    CHK(devrt_block_ptr(g_rt, tmp, &p), STALE);
  }
  devrt_graph* g = NULL;
  if (CHK(devrt_capture_end(g_rt, s, &g), OK_) != DEVRT_OK) {
    if (tp) span_del(tp); /* freed with the capture */
    return;
  }
  CHK(devrt_capture_end(g_rt, s, &g), IST);
  for (unsigned k = 1 + rn(&w->r, 3); k; k--)
    CHK(devrt_graph_launch(g, w->streams[rn(&w->r, w->nstreams)]), OK_);
  sub.kind = DEVRT_WORK_GRAPH, sub.graph = g; /* no waits: issued at once, before the destroy */
  CHK(devrt_queue_submit(g_rt, &sub), OK_);
  if (chance(&w->r, 30)) { /* a block it uses freed: the next launch is refused */
    unsigned i = 0;
    while (w->blocks[i].h != used[0].h) i++;
    w->blocks[i] = w->blocks[--w->nblocks];
    span_del(used[0].p);
    CHK(devrt_block_free(g_rt, used[0].h), OK_);
    dead_block(used[0].h);
    CHK(devrt_graph_launch(g, s), STALE);
  }
  if (tp) span_del(tp); /* the graph's temporary goes with it */
  CHK(devrt_graph_destroy(g), OK_);
}

/* The call families, their letters (FZ_SKIP) and weights. */
static const struct family {
  char letter;
  unsigned weight;
  void (*op)(worker*);
} families[] = {{'a', 8, op_acquire},    {'r', 5, op_release},     {'b', 12, op_block_alloc},
                {'f', 8, op_block_free}, {'q', 7, op_block_query}, {'l', 15, op_launch},
                {'e', 4, op_event},      {'m', 2, op_stream_misc}, {'x', 6, op_res_alloc},
                {'y', 5, op_res_free},   {'p', 3, op_reap},        {'o', 4, op_own_stack},
                {'s', 8, op_sem},        {'u', 6, op_submit},      {'t', 4, op_partition},
                {'k', 2, op_pool},       {'h', 1, op_shared},      {'c', 1, op_runtime},
                {'i', 2, op_import},     {'z', 4, op_torch},       {'g', 2, op_graph}};
enum { NFAMILIES = sizeof families / sizeof families[0] };

static void* worker_main(void* arg) {
  worker* w = arg;
  t_ring = &w->ring;
  const char* skip = getenv("FZ_SKIP");
  unsigned total = 0;
  for (unsigned f = 0; f < NFAMILIES; f++) total += families[f].weight;
  for (int i = 0; i < w->ops; i++) {
    unsigned c = rn(&w->r, total), f = 0;
    while (c >= families[f].weight) c -= families[f++].weight;
    if (!skip || !strchr(skip, families[f].letter)) families[f].op(w);
  }
  /* a finished thread must not keep leases others WAIT for */
  for (unsigned i = 0; i < w->npstreams; i++) {
    CHK(devrt_stream_release(g_rt, w->pstreams[i]), OK_);
    dead_stream(w->pstreams[i]);
  }
  w->npstreams = 0;
  for (unsigned i = 0; i < w->nstreams; i++) {
    CHK(devrt_stream_release(g_rt, w->streams[i]), OK_);
    dead_stream(w->streams[i]);
  }
  w->nstreams = 0;
  t_ring = NULL;
  return NULL;
}

static devrt_status free_retry(devrt_block b, unsigned allowed, int line) {
  devrt_status st;
  for (int i = 0; i < 2000; i++) {
    st = devrt_block_free(g_rt, b);
    if (st != DEVRT_ERR_INVALID_STATE) break;
    usleep(1000);
  }
  return chk_(st, allowed, "devrt_block_free (drain, retried on INVALID_STATE)", line);
}

static void drain_worker(worker* w) {
  devrt_stream s = 0;
  if (!w->nstreams) {
    if (CHK(devrt_stream_acquire(g_rt, DEVRT_ACQUIRE_SHARE, &s), OK_) == DEVRT_OK)
      w->streams[w->nstreams++] = s;
  }
  s = w->nstreams ? w->streams[0] : 0;
  for (unsigned i = 0; i < w->nblocks; i++) {
    span_del(w->blocks[i].p);
    free_retry(w->blocks[i].h, OK_, __LINE__);
  }
  w->nblocks = 0;
  for (unsigned i = 0; i < w->nallocs; i++) {
    span_del(w->allocs[i].p);
    CHK(devrt_resource_deallocate(w->allocs[i].r, w->allocs[i].p, w->allocs[i].size, s), OK_);
  }
  w->nallocs = 0;
  for (unsigned i = 0; i < w->noallocs; i++) {
    span_del(w->oallocs[i].p);
    CHK(devrt_resource_deallocate(w->own_stack, w->oallocs[i].p, w->oallocs[i].size, s), OK_);
  }
  w->noallocs = 0;
  for (unsigned i = 0; i < w->npallocs; i++) {
    span_del(w->pallocs[i].p);
    CHK(devrt_resource_deallocate(w->pallocs[i].r, w->pallocs[i].p, w->pallocs[i].size, s), OK_);
  }
  w->npallocs = 0;
  if (w->own_stack) {
    uint64_t x;
    CHK(devrt_resource_reap(w->own_stack, DEVRT_REAP_WAIT, &x), OK_);
    CHK(devrt_resource_trim(w->own_stack, &x), OK_); /* cached -> freed upstream: pending */
    CHK(devrt_resource_reap(w->own_stack, DEVRT_REAP_WAIT, &x), OK_);
    devrt_resource_figures f;
    if (CHK(devrt_resource_query(w->own_stack, &f), OK_) == DEVRT_OK &&
        (f.live_bytes || f.pending_bytes || f.cached_bytes))
      fprintf(stderr, "  private stack: live %llu pending %llu cached %llu\n",
              (unsigned long long)f.live_bytes, (unsigned long long)f.pending_bytes,
              (unsigned long long)f.cached_bytes);
    ASSERT(f.live_bytes == 0 && f.pending_bytes == 0 && f.cached_bytes == 0,
           "private stack did not drain");
    CHK(devrt_resource_release(w->own_stack), OK_);
    w->own_stack = NULL;
  }
  for (unsigned i = 0; i < w->npstreams; i++) CHK(devrt_stream_release(g_rt, w->pstreams[i]), OK_);
  w->npstreams = 0;
  for (unsigned i = 0; i < w->nimports; i++) CHK(devrt_stream_forget(g_rt, w->imports[i]), OK_);
  w->nimports = 0;
  for (unsigned i = 0; i < w->ntorch; i++) {
    span_del(w->torch[i].p);
    devrt_torch_free(w->torch[i].p, w->torch[i].size, 0, fw_native((unsigned)w->torch[i].s));
    torch_expect(false, "devrt_torch_free (drain)", __LINE__);
  }
  w->ntorch = 0;
  if (w->ev) {
    CHK(devrt_event_destroy(g_rt, w->ev), OK_);
    w->ev = NULL;
  }
  for (unsigned i = 0; i < w->nstreams; i++) {
    CHK(devrt_stream_synchronize(g_rt, w->streams[i]), OK_);
    CHK(devrt_stream_release(g_rt, w->streams[i]), OK_);
  }
  w->nstreams = 0;
}

/* A seed that runs past FZ_ALARM seconds is a hang (exit 4): each thread's call in progress and
 * its last calls are printed first (stdio in a signal handler: the process ends right after, and a
 * hung thread is not inside stdio), then every thread's stack, by gdb when it is installed
 * (FZ_GDB=0 leaves it out): a hang that happens once in a thousand seeds says where. */
static void on_alarm(int sig) {
  (void)sig;
  fprintf(stderr, "HANG seed=%llu (alarm); reproduce: fuzz %llu %d %d\n", g_seed, g_seed, g_ops,
          g_threads);
  print_ring_of(&g_main_ring, 8);
  for (int i = 0; i < g_nrings; i++) print_ring_of(g_rings[i], 8);
  const char* gdb = getenv("FZ_GDB");
  if (!gdb || strcmp(gdb, "0")) {
    char pid[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    pid_t c = fork();
    if (c == 0) { /* gdb's output on stderr, where the report is */
      dup2(2, 1);
      execlp("gdb", "gdb", "-p", pid, "-batch", "-nx", "-ex", "thread apply all bt", (char*)NULL);
      _exit(127); /* no gdb: the calls above are the report */
    }
    if (c > 0) waitpid(c, NULL, 0);
  }
  _exit(4);
}

static const char* fz_tag = "fz";

/* One seed in this process: 0 clean, 3 findings. */
static int run_seed(unsigned long long seed, int ops, int nth) {
  g_seed = seed;
  g_verbose = getenv("FZ_VERBOSE") != NULL;
  g_trace = getenv("FZ_TRACE") != NULL;
  signal(SIGALRM, on_alarm);
  alarm(getenv("FZ_ALARM") ? (unsigned)atoi(getenv("FZ_ALARM")) : 20);
  rng r = {g_seed * 0x9E3779B97F4A7C15ull + 1};
  for (int i = 0; i < 4; i++) rnext(&r);
  if (nth <= 0) nth = 1 + (int)rn(&r, 3);
  g_ops = ops, g_threads = nth;
  g_share_used = chance(&r, 30);

  devrt_config cfg;
  CHK(devrt_config_init(&cfg), OK_);
  cfg.backend = getenv("FZ_CUDA") ? DEVRT_BACKEND_CUDA : DEVRT_BACKEND_HOST;
  cfg.stream_pool_size = 1 + rn(&r, 6);
  cfg.host_workers = 1 + rn(&r, 8);
  cfg.budget_bytes =
      (1u << 16) +
      rn(&r, 64u << 20); /* never 100% of host RAM: 2 GiB blocks would be filled for real */
  cfg.budget_percent = 100;
  cfg.cache = chance(&r, 60);
  cfg.arena = chance(&r, 25); /* the arena leaf in place of caching over the pool */
  cfg.wait_spin_ns = rn(&r, 3) ? 0 : 20000;
  cfg.completion = rn(&r, 2);
  cfg.partition_streams = rn(&r, 3) ? 64 : 1 + rn(&r, 8);
  if (CHK(devrt_runtime_create(&cfg, &g_rt), OK_)) return 1;
  devrt_config cfg2 = cfg;
  cfg2.stream_pool_size = 2;
  if (CHK(devrt_runtime_create(&cfg2, &g_rt2), OK_)) return 1;
  CHK(devrt_configure(0, &cfg), OK_); /* the torch entry points' runtime: this seed's config */
  cfg2.stream_pool_size = NFW;
  if (CHK(devrt_runtime_create(&cfg2, &g_fw), OK_)) return 1;
  for (int i = 0; i < NFW; i++) {
    CHK(devrt_stream_acquire(g_fw, DEVRT_ACQUIRE_FAIL, &g_fw_stream[i]), OK_);
    CHK(devrt_stream_native(g_fw, g_fw_stream[i], &g_fw_native[i]), OK_);
  }

  /* optionally a caller-built stack on the main runtime */
  if (chance(&r, 25)) {
    devrt_resource *a = NULL, *st = NULL, *b = NULL;
    CHK(devrt_async_resource_create(g_rt, &a), OK_);
    CHK(devrt_statistics_resource_create(a, &st), OK_);
    devrt_budget_options bo = {.limit_bytes = (1u << 16) + rn(&r, 32u << 20),
                               .scope = DEVRT_BUDGET_DEVICE,
                               .wait_for_pending = chance(&r, 50)};
    CHK(devrt_budget_create(st, &bo, &b), OK_);
    CHK(devrt_runtime_set_resource(g_rt, b), OK_);
    devrt_resource_release(b);
    devrt_resource_release(st);
    devrt_resource_release(a);
    devrt_resource* again;
    CHK(devrt_runtime_resource(g_rt, &again), OK_);
    ASSERT(again == b, "runtime_resource is not the installed stack");
    CHK(devrt_runtime_set_resource(g_rt, b), IST | OK_);
  }
  devrt_resource* top = rt_res();
  if (top && chance(&r, 60)) {
    uint64_t limit = rn(&r, 4) ? 4096 + rn(&r, 1 << 22) : 0; /* 0: refused */
    devrt_status st = CHK(devrt_budget_create_child(top, limit, &g_child), OK_ | INV);
    if (st != DEVRT_OK) g_child = NULL;
  }

  CHK(devrt_module_load(g_rt, NULL, &g_mod), OK_);
  CHK(devrt_kernel_get(g_mod, "devrt_fill_u32", &k_fill), OK_);
  devrt_kernel* kx;
  CHK(devrt_kernel_get(g_mod, "devrt_copy_u32", &kx), OK_);
  CHK(devrt_kernel_get(g_mod, "devrt_checksum_u32", &kx), OK_);
  CHK(devrt_kernel_get(g_mod, "devrt_slow_fill_u32", &k_slow), OK_);
  CHK(devrt_kernel_get(g_mod, "no_such_kernel", &kx), INV);
  CHK(devrt_kernel_get(g_mod, "devrt_trap", &kx), INV | UNS | (getenv("FZ_CUDA") ? OK_ : 0));
  devrt_module* m2;
  CHK(devrt_module_load(g_rt, "junk", &m2), UNS | INV);

  for (int i = 0; i < NSEMS; i++)
    CHK(devrt_semaphore_create(g_rt, rn(&r, 3) ? 0 : rn(&r, 100), &g_sems[i]), OK_);
  devrt_semaphore* tmp;
  CHK(devrt_semaphore_create(g_rt, UINT64_MAX, &tmp), INV);
  CHK(devrt_semaphore_create(g_rt2, 0, &g_foreign_sem), OK_);
  CHK(devrt_stream_acquire(g_rt2, DEVRT_ACQUIRE_FAIL, &g_foreign_stream), OK_);
  CHK(devrt_block_alloc(g_rt2, 1024, g_foreign_stream, fz_tag, &g_foreign_block), OK_);

  devrt_stream s0;
  CHK(devrt_stream_acquire(g_rt, DEVRT_ACQUIRE_WAIT, &s0), OK_);
  for (int i = 0; i < NSHARED; i++) {
    g_shared_size[i] = 4 * (1 + rn(&r, 512));
    devrt_block b = 0;
    if (devrt_block_alloc(g_rt, g_shared_size[i], s0, "shared", &b) == DEVRT_OK) note_block(b);
    atomic_store(&g_shared[i], b);
  }
  CHK(devrt_stream_release(g_rt, s0), OK_);
  dead_stream(s0);

  worker* ws = calloc((size_t)nth, sizeof *ws);
  pthread_t th[8];
  for (int i = 0; i < nth; i++) {
    ws[i].id = ws[i].ring.id = i;
    g_rings[i] = &ws[i].ring;
    ws[i].ops = ops;
    ws[i].r.s = g_seed * 0xD1B54A32D192ED03ull + (unsigned long long)i * 7919 + 3;
    for (int j = 0; j < 4; j++) rnext(&ws[i].r);
  }
  g_nrings = nth;
  if (nth == 1)
    worker_main(&ws[0]);
  else {
    for (int i = 0; i < nth; i++) pthread_create(&th[i], NULL, worker_main, &ws[i]);
    for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
  }

  /* ---- drain ---- */
  for (int i = 0; i < nth; i++) {
    if (ws[i].layout_active) {
      CHK(devrt_layout_activate(g_rt, NULL), OK_);
      ws[i].layout_active = 0;
    }
  }
  CHK(devrt_layout_activate(g_rt, NULL), OK_);
  /* release everything parked: fail or max out every semaphore */
  for (int i = 0; i < NSEMS; i++) {
    if (rn(&r, 2))
      CHK(devrt_semaphore_signal(g_sems[i], DEVRT_SEMAPHORE_MAX_VALUE), OK_ | INV | ABT);
    else
      CHK(devrt_semaphore_fail(g_sems[i], DEVRT_ERR_CANCELLED, "drain"), OK_);
  }
  for (int i = 0; i < NSEMS; i++) {
    devrt_status st =
        CHK(devrt_semaphore_wait(g_sems[i], DEVRT_SEMAPHORE_MAX_VALUE, 5000000000ull), OK_ | ABT);
    (void)st;
  }
  CHK(devrt_runtime_destroy(g_rt), IST); /* semaphores alive */
  for (int i = 0; i < nth; i++) drain_worker(&ws[i]);
  for (int i = 0; i < NSHARED; i++) {
    devrt_block b = atomic_exchange(&g_shared[i], 0);
    if (b) free_retry(b, OK_, __LINE__);
  }
  for (unsigned i = 0; i < g_nall; i++) free_retry(g_all_blocks[i], OK_ | STALE, __LINE__);
  for (int i = 0; i < nth; i++) {
    if (ws[i].layout) {
      devrt_status st = CHK(devrt_layout_destroy(g_rt, ws[i].layout), OK_);
      ASSERT(st == DEVRT_OK, "layout_destroy refused after drain");
    }
  }
  uint64_t bytes = 0;
  CHK(devrt_reap_pending(g_rt, DEVRT_REAP_WAIT, &bytes), OK_);
  devrt_resource* rtop = rt_res();
  if (rtop) {
    uint64_t rel;
    CHK(devrt_resource_trim(rtop, &rel), OK_);
    CHK(devrt_reap_pending(g_rt, DEVRT_REAP_WAIT, &bytes), OK_);
    devrt_resource_figures f;
    if (CHK(devrt_resource_query(rtop, &f), OK_) == DEVRT_OK) {
      if (f.live_bytes || f.pending_bytes)
        fprintf(stderr, "  figures: live %llu pending %llu cached %llu\n",
                (unsigned long long)f.live_bytes, (unsigned long long)f.pending_bytes,
                (unsigned long long)f.cached_bytes);
      ASSERT(f.live_bytes == 0, "live bytes did not drain to 0");
      ASSERT(f.pending_bytes == 0, "pending bytes did not drain to 0");
      ASSERT(f.cached_bytes == 0, "cached bytes not 0 after trim");
    }
  }
  if (g_child) {
    devrt_resource_figures f;
    if (CHK(devrt_resource_query(g_child, &f), OK_) == DEVRT_OK)
      ASSERT(f.live_bytes == 0, "child budget live bytes did not drain");
    CHK(devrt_resource_release(g_child), OK_);
  }
  devrt_block_stats bs;
  if (CHK(devrt_block_stats_get(g_rt, &bs), OK_) == DEVRT_OK) {
    if (bs.blocks_live) fprintf(stderr, "  blocks_live %llu\n", (unsigned long long)bs.blocks_live);
    ASSERT(bs.blocks_live == 0, "blocks_live did not drain to 0");
  }
  devrt_runtime_info ri;
  if (CHK(devrt_runtime_info_get(g_rt, &ri), OK_) == DEVRT_OK)
    ASSERT(ri.streams_in_use == 0, "streams_in_use not 0 after drain");
  for (int i = 0; i < NSEMS; i++) CHK(devrt_semaphore_destroy(g_sems[i]), OK_);
  CHK(devrt_module_unload(g_rt, g_mod), OK_);
  CHK(devrt_runtime_destroy(g_rt), OK_);
  CHK(devrt_block_free(g_rt2, g_foreign_block), OK_);
  CHK(devrt_stream_release(g_rt2, g_foreign_stream), OK_);
  CHK(devrt_semaphore_destroy(g_foreign_sem), OK_);
  CHK(devrt_runtime_destroy(g_rt2), OK_);
  CHK(devrt_runtime_destroy(NULL), INV);
  /* the torch allocations drained: ordinal 0's stack holds nothing live or pending; g_fw, whose
   * streams it imported for the process, cannot be destroyed */
  devrt_runtime* prt = NULL;
  if (CHK(devrt_runtime_get(0, &prt), OK_) == DEVRT_OK) {
    devrt_resource* ptop = NULL;
    devrt_resource_figures f;
    CHK(devrt_reap_pending(prt, DEVRT_REAP_WAIT, NULL), OK_);
    if (CHK(devrt_runtime_resource(prt, &ptop), OK_) == DEVRT_OK &&
        CHK(devrt_resource_query(ptop, &f), OK_) == DEVRT_OK)
      ASSERT(f.live_bytes == 0 && f.pending_bytes == 0, "torch allocations did not drain");
  }
  for (int i = 0; i < NFW; i++) CHK(devrt_stream_synchronize(g_fw, g_fw_stream[i]), OK_);
  if (atomic_load(&g_torch_imported)) CHK(devrt_runtime_destroy(g_fw), IST);
  g_nrings = 0;
  free(ws);
  alarm(0);
  int f = atomic_load(&g_findings);
  printf("seed %llu threads %d calls %llu findings %d\n", g_seed, nth,
         (unsigned long long)atomic_load(&g_calls), f);
  return f ? 3 : 0;
}

/* One seed in a child process: its exit status (0 clean); its calls come back through a pipe. */
static int run_child(unsigned long long seed, int ops, unsigned long long* calls) {
  int fd[2];
  if (pipe(fd)) return 1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    if (!freopen("/dev/null", "w", stdout)) {} /* the per-seed line: the summary says it */
    int rc = run_seed(seed, ops, 0);
    unsigned long long n = atomic_load(&g_calls);
    if (write(fd[1], &n, sizeof n) != (ssize_t)sizeof n) rc = 1;
    exit(rc);
  }
  close(fd[1]);
  unsigned long long n = 0;
  if (read(fd[0], &n, sizeof n) == (ssize_t)sizeof n) *calls += n;
  close(fd[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 1;
  if (WIFSIGNALED(status))
    fprintf(stderr, "seed %llu: killed by signal %d (reproduce: fuzz %llu %d)\n", seed,
            WTERMSIG(status), seed, ops);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); /* a hang's gdb may attach (on_alarm) */
  if (argc < 2) {
    fprintf(stderr,
            "usage: fuzz SEED [OPS] [THREADS] | fuzz --seeds FIRST COUNT [OPS] | "
            "fuzz --seconds S [FIRST] [OPS]\n");
    return 2;
  }
  bool seeds = !strcmp(argv[1], "--seeds"), timed = !strcmp(argv[1], "--seconds");
  if (!seeds && !timed)
    return run_seed(strtoull(argv[1], NULL, 0), argc > 2 ? atoi(argv[2]) : 300,
                    argc > 3 ? atoi(argv[3]) : 0);
  if (argc < 3 || (seeds && argc < 4)) return 2;
  unsigned long long first = seeds || argc > 3 ? strtoull(argv[seeds ? 2 : 3], NULL, 0) : 1;
  unsigned long long count = seeds ? strtoull(argv[3], NULL, 0) : ~0ull, calls = 0, n = 0;
  int ops = argc > 4 ? atoi(argv[4]) : 300, failed = 0;
  double end = now_s() + (timed ? atof(argv[2]) : 1e12);
  for (; n < count && now_s() < end; n++) {
    int rc = run_child(first + n, ops, &calls);
    if (rc) fprintf(stderr, "FAILED: seed %llu (exit %d)\n", first + n, rc);
    failed += rc != 0;
  }
  printf("fuzz: seeds %llu..%llu, %llu calls, %d failed\n", first, first + n - 1, calls, failed);
  return failed ? 1 : 0;
}
