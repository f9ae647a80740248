/* bench_scale.c: `devrt bench scale`: devrt's per-call cost against the size of the state it keeps
 * (readers, streams, blocked waiters, tags, live blocks, parked submissions, leases, uses, reads):
 * per-unit ns at each size and the largest size's ratio to the smallest (goal <= 1.5). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"
#include "devrt/devrt.h"
#include "json.h"

#define BENCH_SUITE "scale"
#define GOAL 1.5
#define OPS 256   /* units of work per point and round (ops where an op is one unit) */
#define MIN_OPS 8 /* ops per point and round where an op is many units */
#define ELEMS 64u /* u32s per block (256 B); kernels run grid 1 x block ELEMS */
#define MAXS 4094 /* largest stream count: a pool holds at most DEVRT_MAX_STREAMS (4095) */
#define WAITER_STACK (128 << 10)

typedef struct pt pt;
typedef struct curve {
  const char *name, *sym, *unit, *what;
  long sizes[6];
  enum { POOL_16, POOL_SIZE, POOL_MAX } pool; /* pool: 16, the size, or the largest size + 1 */
  bool per_size;                              /* an op is `size` units (else one) */
  bool no_spin;                               /* host waits block at once (waiter threads) */
  int (*setup)(pt* p);
  int (*body)(pt* p, int ops, uint64_t* ns); /* runs ops ops; *ns = their timed ns */
} curve;

/* One point of a curve: its own runtime, holding the state of one size. */
struct pt {
  long n, r; /* the state size; reads before each write (bo_write) */
  devrt_runtime* rt;
  devrt_module* mod;
  devrt_kernel *fill, *sum;
  devrt_stream* held; /* held[0] (and held[1]) run the op */
  unsigned nheld;
  devrt_block* blk; /* live blocks (blk[0], blk[1]: the op's) */
  long nblk;
  devrt_block_use* uses;
  devrt_launch_desc d[2];
  const char* tag;
  void* ptrs[OPS];
  devrt_semaphore *sem, *done;
  uint64_t v, dv;
  pthread_t* thr;
  unsigned nthr;
  atomic_uint started;
  void *scratch, *out, *bp[2]; /* scratch: kernel output no block tracks; bp: blk[0..1]'s */
  uint32_t value;
  uint64_t elems;
  void* args[2][3]; /* d[0]'s and d[1]'s kernel arguments */
  double* ns;       /* per round: ns per unit */
  uint64_t waits, wops;
  unsigned turn; /* bo_launch: which of d[0], d[1] runs next */
};

static uint64_t clock_ns; /* cost of one bench_now_ns pair: taken off each timed section */
static char tags[4096][32];
static devrt_config base_cfg;

static uint64_t lap(uint64_t t0) {
  uint64_t d = bench_now_ns() - t0;
  return d > clock_ns ? d - clock_ns : 0;
}

/* ---- state every curve builds on ---- */
static devrt_status noop_call(void* user) { return (void)user, DEVRT_OK; }

static int hold(pt* p, unsigned k) {
  p->held = calloc(k, sizeof *p->held);
  for (; p->held && p->nheld < k; p->nheld++)
    TRY("stream_acquire", devrt_stream_acquire(p->rt, DEVRT_ACQUIRE_FAIL, &p->held[p->nheld]));
  return p->held ? 0 : -1;
}
static int blocks(pt* p, long k, const char* tag) {
  if (!(p->blk = realloc(p->blk, (size_t)(p->nblk + k) * sizeof *p->blk))) return -1;
  for (long i = 0; i < k; i++, p->nblk++)
    TRY("block_alloc", devrt_block_alloc(p->rt, ELEMS * 4, p->held[0], tag, &p->blk[p->nblk]));
  return 0;
}
/* Holds k streams (k < 0: creates all -k, keeps two), loads devrt's kernels, allocates the
 * scratch buffer and nb blocks. d[0] fills blk[0] (the scratch without blocks); d[1] fills blk[1]
 * or, with one block, sums blk[0] into the scratch; both on held[0], one use each. */
static int base(pt* p, int k, long nb) {
  if (hold(p, k < 0 ? (unsigned)-k : (unsigned)k)) return -1;
  for (; k < 0 && p->nheld > 2; p->nheld--)
    TRY("stream_release", devrt_stream_release(p->rt, p->held[p->nheld - 1]));
  TRY("module_load", devrt_module_load(p->rt, NULL, &p->mod));
  TRY("kernel_get", devrt_kernel_get(p->mod, "devrt_fill_u32", &p->fill));
  TRY("kernel_get", devrt_kernel_get(p->mod, "devrt_checksum_u32", &p->sum));
  TRY("pool_alloc", devrt_pool_alloc(p->rt, 2 * ELEMS * 4, p->held[0], &p->scratch));
  p->value = 7, p->elems = ELEMS, p->tag = "bench scale", p->out = (char*)p->scratch + ELEMS * 4;
  p->bp[0] = p->bp[1] = p->scratch;
  if (nb > 0 && blocks(p, nb, p->tag)) return -1;
  for (int i = 0; i < 2 && i < nb; i++)
    TRY("block_ptr", devrt_block_ptr(p->rt, p->blk[i], &p->bp[i]));
  if (!(p->uses = calloc(2 * (size_t)(nb > 1 ? nb : 1), sizeof *p->uses))) return -1;
  for (int i = 0; i < 2; i++) {
    bool read = nb == 1 && i == 1;
    void** a = p->args[i];
    a[0] = &p->bp[read ? 0 : i], a[1] = read ? (void*)&p->elems : &p->value;
    a[2] = read ? (void*)&p->out : &p->elems;
    p->uses[i] = (devrt_block_use){nb > 0 ? p->blk[read ? 0 : i] : 0,
                                   read ? DEVRT_ACCESS_READ : DEVRT_ACCESS_WRITE};
    p->d[i] = (devrt_launch_desc){.stream = p->held[0],
                                  .kernel = read ? p->sum : p->fill,
                                  .grid = {1, 1, 1},
                                  .block = {ELEMS, 1, 1},
                                  .args = a,
                                  .uses = p->uses + i,
                                  .nuses = nb > 0};
  }
  return 0;
}
static int sync_pt(pt* p) {
  for (unsigned i = 0; i < p->nheld; i++)
    TRY("stream_synchronize", devrt_stream_synchronize(p->rt, p->held[i]));
  TRY("reap_pending", devrt_reap_pending(p->rt, DEVRT_REAP_WAIT, NULL));
  return 0;
}

/* ---- the curves ---- */
/* r reads of blk[0], each on its own stream (untimed), then the write on held[0] (timed), which
 * must wait for all r: the waits devrt inserted are counted around the write. */
static int su_write(pt* p) { return p->r = p->n, base(p, (int)p->n + 1, 1); }
static int su_write_pool(pt* p) { return p->r = 1, base(p, -(int)p->n, 1); } /* S streams */
static int bo_write(pt* p, int ops, uint64_t* ns) {
  devrt_block_stats s0, s1;
  for (int i = 0; i < ops; i++) {
    for (long r = 0; r < p->r; r++) {
      p->d[1].stream = p->held[1 + r];
      TRY("devrt_launch (read)", devrt_launch(p->rt, &p->d[1]));
    }
    TRY("block_stats_get", devrt_block_stats_get(p->rt, &s0));
    uint64_t t = bench_now_ns();
    TRY("devrt_launch (write)", devrt_launch(p->rt, &p->d[0]));
    *ns += lap(t);
    TRY("block_stats_get", devrt_block_stats_get(p->rt, &s1));
    p->waits += s1.waits_inserted - s0.waits_inserted, p->wops++;
  }
  return 0;
}

/* A runtime whose pool holds S streams, every one created (held once); the ops run on held[0]. */
static int su_pool(pt* p) { return base(p, -(int)p->n, 0); }
static int bo_miss(pt* p, int ops, uint64_t* ns) { /* allocations an emptied cache cannot serve */
  devrt_resource* r;
  TRY("runtime_resource", devrt_runtime_resource(p->rt, &r));
  uint64_t t = bench_now_ns();
  for (int i = 0; i < ops; i++)
    TRY("resource_allocate",
        devrt_resource_allocate(r, ELEMS * 4, p->held[0], p->tag, &p->ptrs[i]));
  *ns = lap(t);
  for (int i = 0; i < ops; i++)
    TRY("resource_deallocate", devrt_resource_deallocate(r, p->ptrs[i], ELEMS * 4, p->held[0]));
  TRY("resource_trim", devrt_resource_trim(r, NULL));
  return 0;
}
static int bo_pair(pt* p, int ops, uint64_t* ns) {
  devrt_block b;
  uint64_t t = bench_now_ns();
  for (int i = 0; i < ops; i++) {
    TRY("block_alloc", devrt_block_alloc(p->rt, ELEMS * 4, p->held[0], p->tag, &b));
    TRY("block_free", devrt_block_free(p->rt, b));
  }
  *ns = lap(t);
  return 0;
}
static int bo_free(pt* p, int ops, uint64_t* ns) {
  devrt_block b[OPS];
  for (int i = 0; i < ops; i++)
    TRY("block_alloc", devrt_block_alloc(p->rt, ELEMS * 4, p->held[0], p->tag, &b[i]));
  uint64_t t = bench_now_ns();
  for (int i = 0; i < ops; i++) TRY("block_free", devrt_block_free(p->rt, b[i]));
  *ns = lap(t);
  return 0;
}
static int bo_reap(pt* p, int ops, uint64_t* ns) { /* nothing is pending: sync_pt reaped it all */
  uint64_t t = bench_now_ns();
  for (int i = 0; i < ops; i++) TRY("reap_pending", devrt_reap_pending(p->rt, 0, NULL));
  *ns = lap(t);
  return 0;
}

/* W threads blocked on sem for its maximum value, which no signal reaches. */
static void* waiter(void* a) {
  pt* p = a;
  atomic_fetch_add(&p->started, 1);
  devrt_semaphore_wait(p->sem, DEVRT_SEMAPHORE_MAX_VALUE, DEVRT_TIMEOUT_INFINITE); /* CANCELLED */
  return NULL;
}
static int su_waiters(pt* p) {
  if (base(p, 2, 0)) return -1;
  TRY("semaphore_create", devrt_semaphore_create(p->rt, 0, &p->sem));
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, WAITER_STACK);
  if (!(p->thr = calloc((size_t)p->n, sizeof *p->thr))) return -1;
  for (; p->nthr < p->n; p->nthr++)
    if (pthread_create(&p->thr[p->nthr], &at, waiter, p)) {
      fprintf(stderr, "bench scale: pthread_create failed after %u waiters\n", p->nthr);
      return -1;
    }
  pthread_attr_destroy(&at);
  while (atomic_load(&p->started) < p->nthr) nanosleep(&(struct timespec){0, 1000000}, NULL);
  nanosleep(&(struct timespec){0, 20000000}, NULL); /* the last ones reach their wait */
  return 0;
}
static int bo_hsig(pt* p, int ops, uint64_t* ns) {
  uint64_t t = bench_now_ns();
  for (int i = 0; i < ops; i++) TRY("semaphore_signal", devrt_semaphore_signal(p->sem, ++p->v));
  *ns = lap(t);
  return 0;
}
static int bo_dsig(pt* p, int ops, uint64_t* ns) { /* a launch (no uses) that signals sem */
  devrt_semaphore_value s = {p->sem, 0};
  devrt_submission sub = {.stream = p->held[0],
                          .signals = &s,
                          .nsignals = 1,
                          .kind = DEVRT_WORK_LAUNCH,
                          .launch = p->d[0]};
  sub.launch.nuses = 0;
  uint64_t t = bench_now_ns();
  for (int i = 0; i < ops; i++) {
    s.value = ++p->v;
    TRY("queue_submit", devrt_queue_submit(p->rt, &sub));
  }
  *ns = lap(t);
  TRY("semaphore_wait", devrt_semaphore_wait(p->sem, p->v, DEVRT_TIMEOUT_INFINITE));
  return 0;
}

/* T tags each with a live block; the pair uses a tag seen last. */
static int su_tags(pt* p) {
  if (base(p, 2, 0)) return -1;
  for (long i = 1; i < p->n; i++)
    if (blocks(p, 1, tags[i])) return -1;
  p->tag = tags[0];
  return 0;
}
static int su_live(pt* p) { return base(p, 2, p->n - 1); } /* N - 1 live blocks and the pair's */

/* Two launches alternate on one stream (writing blk[0], blk[1], with U - 1 more read), so each
 * takes the tracked path rather than the repeat one. */
static int su_launch_live(pt* p) { return base(p, 2, p->n); }
static int su_uses(pt* p) {
  if (base(p, 2, p->n + 1)) return -1;
  for (int i = 0; i < 2; i++) {
    devrt_block_use* u = p->uses + i * p->n;
    u[0] = (devrt_block_use){p->blk[i], DEVRT_ACCESS_WRITE};
    for (long j = 1; j < p->n; j++) u[j] = (devrt_block_use){p->blk[j + 1], DEVRT_ACCESS_READ};
    p->d[i].uses = u, p->d[i].nuses = (unsigned)p->n;
  }
  return 0;
}
static int bo_launch(pt* p, int ops, uint64_t* ns) {
  uint64_t t = bench_now_ns();
  for (int i = 0; i < ops; i++) TRY("devrt_launch", devrt_launch(p->rt, &p->d[p->turn++ & 1]));
  *ns = lap(t);
  return 0;
}

/* P barriers parked for the maximum value of sem; an op parks a host call for the next value,
 * signals it, and waits for the call's signal: the release goes through the dispatch thread. */
static int su_parked(pt* p) {
  if (base(p, 2, 0)) return -1;
  TRY("semaphore_create", devrt_semaphore_create(p->rt, 0, &p->sem));
  TRY("semaphore_create", devrt_semaphore_create(p->rt, 0, &p->done));
  devrt_semaphore_value w = {p->sem, DEVRT_SEMAPHORE_MAX_VALUE};
  devrt_submission sub = {.waits = &w, .nwaits = 1, .kind = DEVRT_WORK_BARRIER};
  for (long i = 0; i < p->n; i++) TRY("queue_submit (parked)", devrt_queue_submit(p->rt, &sub));
  return 0;
}
static int bo_release(pt* p, int ops, uint64_t* ns) {
  devrt_semaphore_value w = {p->sem, 0}, s = {p->done, 0};
  devrt_submission sub = {.waits = &w,
                          .nwaits = 1,
                          .signals = &s,
                          .nsignals = 1,
                          .kind = DEVRT_WORK_HOST_CALL,
                          .host = {noop_call, NULL}};
  uint64_t t = bench_now_ns();
  for (int i = 0; i < ops; i++) {
    w.value = ++p->v, s.value = ++p->dv;
    TRY("queue_submit", devrt_queue_submit(p->rt, &sub));
    TRY("semaphore_signal", devrt_semaphore_signal(p->sem, p->v));
    TRY("semaphore_wait", devrt_semaphore_wait(p->done, p->dv, DEVRT_TIMEOUT_INFINITE));
  }
  *ns = lap(t);
  return 0;
}

static int su_leased(pt* p) { return base(p, (int)p->n, 0); } /* L leases held; pool L_max + 1 */
static int bo_lease(pt* p, int ops, uint64_t* ns) {
  devrt_stream s;
  uint64_t t = bench_now_ns();
  for (int i = 0; i < ops; i++) {
    TRY("stream_acquire", devrt_stream_acquire(p->rt, DEVRT_ACQUIRE_FAIL, &s));
    TRY("stream_release", devrt_stream_release(p->rt, s));
  }
  *ns = lap(t);
  return 0;
}

/* A write of blk[0] on held[0] (untimed), then N reads of it on held[1] (timed). */
static int su_reread(pt* p) {
  if (base(p, 2, 1)) return -1;
  p->d[1].stream = p->held[1];
  return 0;
}
static int bo_reread(pt* p, int ops, uint64_t* ns) {
  for (int i = 0; i < ops; i++) {
    TRY("devrt_launch (write)", devrt_launch(p->rt, &p->d[0]));
    uint64_t t = bench_now_ns();
    for (long r = 0; r < p->n; r++) TRY("devrt_launch (read)", devrt_launch(p->rt, &p->d[1]));
    *ns += lap(t);
  }
  return 0;
}

/* The curves, one a row. */
/* clang-format off */
#define STREAMS {1, 16, 256, MAXS}
#define WAITERS {1, 16, 256, 4096}
static const curve curves[] = {
  {"write_after_readers", "R", "ns/wait", "a write launch after R reads on R other streams",
   STREAMS, POOL_MAX, true, false, su_write, bo_write},
  {"write_vs_pool", "S", "ns/write", "a write launch after one read on another stream, pool of S",
   {2, 16, 256, MAXS}, POOL_SIZE, false, false, su_write_pool, bo_write},
  {"alloc_miss_vs_pool", "S", "ns/alloc",
   "cache-miss allocate through the runtime's stack, pool of S streams",
   STREAMS, POOL_SIZE, false, false, su_pool, bo_miss},
  {"block_pair_vs_pool", "S", "ns/pair", "block alloc + free, pool of S streams",
   STREAMS, POOL_SIZE, false, false, su_pool, bo_pair},
  {"block_free_vs_pool", "S", "ns/free", "block free, pool of S streams",
   STREAMS, POOL_SIZE, false, false, su_pool, bo_free},
  {"reap_idle_vs_pool", "S", "ns/reap", "devrt_reap_pending with nothing to reap, pool of S",
   STREAMS, POOL_SIZE, false, false, su_pool, bo_reap},
  {"host_signal_vs_waiters", "W", "ns/signal",
   "host signal, W threads blocked on higher values (none woken)",
   WAITERS, POOL_16, false, true, su_waiters, bo_hsig},
  {"device_signal_vs_waiters", "W", "ns/submit",
   "submit of a launch signalling the semaphore, W threads blocked on it",
   WAITERS, POOL_16, false, true, su_waiters, bo_dsig},
  {"block_pair_vs_tags", "T", "ns/pair", "block alloc + free, T tags with live blocks",
   {1, 16, 64, 256, 4096}, POOL_16, false, false, su_tags, bo_pair},
  {"block_pair_vs_live", "N", "ns/pair", "block alloc + free, N live blocks",
   {1, 16, 256, 4096, 100000}, POOL_16, false, false, su_live, bo_pair},
  {"launch_vs_live", "N", "ns/launch", "launch (1 use, two alternating), N live blocks",
   {2, 16, 256, 4096, 100000}, POOL_16, false, false, su_launch_live, bo_launch},
  {"release_vs_parked", "P", "ns/release",
   "submit + host signal + wait of a parked host call, P others parked",
   WAITERS, POOL_16, false, false, su_parked, bo_release},
  {"stream_pair_vs_leased", "L", "ns/pair", "stream acquire + release, L streams leased",
   STREAMS, POOL_MAX, false, false, su_leased, bo_lease},
  {"launch_vs_uses", "U", "ns/use", "launch whose use list has U blocks (two alternating)",
   {1, 16, 64, DEVRT_LAUNCH_MAX_USES}, POOL_16, true, false, su_uses, bo_launch},
  {"reread_after_write", "N", "ns/read", "N reads on one stream after a write on another",
   {1, 16, 256, 4096}, POOL_16, true, false, su_reread, bo_reread},
};
/* clang-format on */

/* ---- measuring ---- */
static int open_pt(const curve* c, long n, long top, int rounds, pt* p) {
  p->n = n;
  devrt_config cfg = base_cfg;
  long pool = c->pool == POOL_SIZE ? n : c->pool == POOL_MAX ? top + 1 : 16;
  cfg.stream_pool_size = (unsigned)pool, cfg.partition_streams = 0;
  if (c->no_spin) cfg.wait_spin_ns = 0;
  if (!(p->ns = calloc((size_t)rounds, sizeof *p->ns))) return -1;
  TRY("runtime_create", devrt_runtime_create(&cfg, &p->rt));
  return c->setup(p);
}

static void close_pt(pt* p) {
  if (!p->rt) return;
  if (p->sem) devrt_semaphore_destroy(p->sem); /* waiters wake CANCELLED; parked work fails */
  if (p->done) devrt_semaphore_destroy(p->done);
  for (unsigned i = 0; i < p->nthr; i++) pthread_join(p->thr[i], NULL);
  sync_pt(p);
  for (long i = 0; i < p->nblk; i++) devrt_block_free(p->rt, p->blk[i]);
  if (p->scratch) devrt_pool_free(p->rt, p->scratch, p->held[0]);
  sync_pt(p);
  if (p->mod) devrt_module_unload(p->rt, p->mod);
  for (unsigned i = 0; i < p->nheld; i++) devrt_stream_release(p->rt, p->held[i]);
  devrt_status s = devrt_runtime_destroy(p->rt);
  if (s != DEVRT_OK) bench_fail(BENCH_SUITE, "runtime_destroy", s);
  free(p->thr), free(p->held), free(p->blk), free(p->uses), free(p->ns);
}

typedef struct report {
  const cli_opts* o;
  int curves;
  char failed[1024];
} report;

static void print_curve(report* rp, const curve* c, pt* p, int np, int rounds) {
  bench_stat st[6];
  double mg[6] = {NAN}; /* per-size curves: ns per unit added since the previous size */
  for (int k = 0; k < np; k++) st[k] = bench_stat_of(p[k].ns, rounds);
  for (int k = 1; c->per_size && k < np; k++)
    mg[k] = (st[k].median * p[k].n - st[k - 1].median * p[k - 1].n) / (p[k].n - p[k - 1].n);
  /* Where an op is `size` units, its fixed cost would make every per-unit figure fall with the
   * size and hide growth: the ratio is then the last added unit's cost over the first's. */
  bool slope = c->per_size && np > 2, waits = p[0].wops > 0;
  double ratio = !slope      ? st[np - 1].median / st[0].median
                 : mg[1] > 0 ? mg[np - 1] / mg[1]
                             : NAN; /* no first unit's cost to compare with: not met */
  bool met = ratio <= GOAL;
  if (!met) /* JSON: an array's items; text: a list */
    bench_cat(rp->failed, sizeof rp->failed, rp->o->json ? "%s\"%s\"" : "%s%s",
              *rp->failed ? (rp->o->json ? "," : ", ") : "", c->name);
  if (rp->o->json) {
    char q[256], a[32], b[32], d[32];
    printf("%s\n {\"name\":\"%s\",\"what\":%s,\"unit\":\"%s\",\"size_symbol\":\"%s\",\"sizes\":[",
           rp->curves++ ? "," : "", c->name, json_quote(q, sizeof q, c->what), c->unit, c->sym);
    for (int k = 0; k < np; k++) printf("%s%ld", k ? "," : "", p[k].n);
    printf("],\"ns\":[");
    for (int k = 0; k < np; k++)
      printf("%s{\"median\":%s,\"p10\":%s,\"p90\":%s}", k ? "," : "",
             json_num(a, "%.2f", st[k].median), json_num(b, "%.2f", st[k].p10),
             json_num(d, "%.2f", st[k].p90));
    if (c->per_size) {
      printf("],\"marginal_ns\":[");
      for (int k = 0; k < np; k++) printf("%s%s", k ? "," : "", json_num(a, "%.2f", mg[k]));
    }
    if (waits) {
      printf("],\"waits_per_op\":[");
      for (int k = 0; k < np; k++)
        printf("%s%s", k ? "," : "", json_num(a, "%.2f", (double)p[k].waits / p[k].wops));
    }
    printf("],\"rounds\":%d,\"ratio\":%s,\"ratio_of\":\"%s\",\"goal\":%.1f,\"met\":%s}", rounds,
           json_num(a, "%.3f", ratio), slope ? "marginal" : "ns", GOAL, met ? "true" : "false");
    return;
  }
  printf("\n%s: %s; %s\n %8s %11s %11s %11s%s%s\n", c->name, c->what, c->unit, c->sym, "median",
         "p10", "p90", c->per_size ? "    marginal" : "", waits ? "   waits/op" : "");
  for (int k = 0; k < np; k++) {
    printf(" %8ld %11.1f %11.1f %11.1f", p[k].n, st[k].median, st[k].p10, st[k].p90);
    if (c->per_size && k) printf(" %11.1f", mg[k]);
    if (c->per_size && !k) printf(" %11s", "");
    if (waits) printf(" %10.2f", (double)p[k].waits / p[k].wops);
    printf("\n");
  }
  if (slope)
    printf(" ratio, marginal %s=%ld..%ld / %s=%ld..%ld: ", c->sym, p[np - 2].n, p[np - 1].n, c->sym,
           p[0].n, p[1].n);
  else
    printf(" ratio %s=%ld / %s=%ld: ", c->sym, p[np - 1].n, c->sym, p[0].n);
  printf("%.3f (goal <= %.1f): %s\n", ratio, GOAL, met ? "met" : "NOT MET");
}

/* Every point of a curve alive at once, each with its own runtime; each round times every point
 * in turn from a rotating start (as bench_rows does), so a host that changes speed for a while
 * hits every size alike. */
static int run_curve(report* rp, const curve* c, int rounds) {
  pt p[6];
  memset(p, 0, sizeof p);
  long cap = rp->o->max > 0 ? rp->o->max : 1L << 30;
  int np = 0;
  while (np < 6 && c->sizes[np] && (np == 0 || c->sizes[np] <= cap)) np++;
  int rc = 0;
  for (int k = 0; k < np && !rc; k++) rc = open_pt(c, c->sizes[k], c->sizes[np - 1], rounds, &p[k]);
  for (int i = -1; i < rounds && !rc; i++) /* round -1 warms up */
    for (int j = 0; j < np && !rc; j++) {
      pt* x = &p[(i + 1 + j) % np];
      long units = c->per_size ? x->n : 1, ops = OPS / units > MIN_OPS ? OPS / units : MIN_OPS;
      uint64_t ns = 0;
      if (i < 0) x->waits = x->wops = 0;
      rc = c->body(x, (int)ops, &ns) || sync_pt(x);
      if (i >= 0) x->ns[i] = (double)ns / (double)(ops * units);
    }
  if (!rc) print_curve(rp, c, p, np, rounds);
  fflush(stdout);
  for (int k = 0; k < np; k++) close_pt(&p[k]);
  return rc;
}

int bench_scale(const cli_opts* o) {
  double d[101];
  for (int i = 0; i < 101; i++) {
    uint64_t t = bench_now_ns();
    d[i] = (double)(bench_now_ns() - t);
  }
  clock_ns = (uint64_t)bench_stat_of(d, 101).median;
  for (int i = 0; i < 4096; i++) snprintf(tags[i], sizeof tags[i], "bench scale tag %d", i);
  devrt_runtime* rt;
  devrt_runtime_info ri;
  devrt_device_info di;
  if (devrt_config_init(&base_cfg) != DEVRT_OK)
    return bench_fail(BENCH_SUITE, "config_init", DEVRT_ERR_INVALID_ARGUMENT), 1;
  base_cfg.ordinal = o->ordinal;
  devrt_status s = devrt_runtime_create(&base_cfg, &rt);
  if (s == DEVRT_OK) s = devrt_runtime_info_get(rt, &ri);
  if (s == DEVRT_OK) s = devrt_device_info_get(rt, &di);
  if (s != DEVRT_OK) return bench_fail(BENCH_SUITE, "runtime", s), 1;
  int rounds = o->rounds > 0 ? o->rounds : 15, rc = 0;
  report rp = {.o = o};
  char q[600];
  if (o->json)
    printf("{\"suite\":\"scale\",\"backend\":\"%s\",\"device\":%s,\"max\":%d,\"results\":[",
           ri.backend_name, json_quote(q, sizeof q, di.name), o->max);
  else
    printf(
        "devrt bench scale on %s (%s backend): per-unit ns at each state size, median [p10, p90] "
        "over %d rounds;\nratio: the largest size's median over the smallest's, or where an op is "
        "`size` units, the\n"
        "marginal cost (ns per unit added since the previous size) at the largest sizes over the "
        "smallest (goal <= %.1f)\n",
        di.name, ri.backend_name, rounds, GOAL);
  devrt_runtime_destroy(rt);
  for (size_t i = 0; i < sizeof curves / sizeof *curves && !rc; i++)
    rc = run_curve(&rp, &curves[i], rounds);
  if (o->json)
    printf("\n],\"goal\":%.1f,\"not_met\":[%s],\"error\":%s}\n", GOAL, rp.failed,
           rc ? "true" : "false");
  else if (!rc)
    printf("\n%s%s\n", *rp.failed ? "NOT MET (ratio > 1.5): " : "all curves met", rp.failed);
  return rc ? 1 : 0;
}
