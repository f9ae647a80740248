/* bench_graph.c: `devrt bench graph`: the replay of a captured region of 100 small recorded
 * launches (devrt_graph_launch) against the same 100 launches captured and replayed raw (cuda:
 * cuStreamBeginCapture and cuGraphLaunch on the stream, as a CUDA user writes it; host: the
 * backend's replay), against the backend's own launch of that graph, and against issuing the 100
 * recorded launches one by one; one replay and its synchronize, devrt's against the raw; and
 * (cuda) the region over temporaries, devrt's (allocated at capture, owned by the graph) against
 * CUDA's graph memory nodes: the replays, the first replay, the memory each holds. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "bench.h"
#include "json.h"
#include "devrt/graph.h"
#include "devrt/resource.h"
#include "block/block.h"
#ifdef DEVRT_HAVE_CUDA
#include "driver/cuda_driver.h"
#endif
#include "runtime/runtime.h"

#define BENCH_SUITE "graph"
#define NLAUNCH 100 /* launches in the captured region */
#define NBLK 4      /* launch i writes block i % NBLK */
#define ELEMS 256u  /* u32s per block; grid 1 x block ELEMS */
#define ITERS 8     /* replays a round: 800 kernels, well inside the launch queue */

typedef struct region { /* NBLK blocks on stream a and the recorded launch that writes each */
  devrt_block blk[NBLK];
  devrt_block_use use[NBLK];
  devrt_launch_desc d[NBLK];
  void* ptr[NBLK];
  void* args[NBLK][3];
} region;

typedef struct gctx {
  devrt_runtime* rt;
  devrt_module* mod;
  devrt_kernel* k;
  devrt_stream a;
  uint32_t value;
  uint64_t n;
  region r;        /* blocks allocated before the captures */
  devrt_graph* g;  /* the recorded region over r, captured through devrt */
  region t;        /* temporaries: allocated and freed in tg's capture (handles stale after) */
  devrt_graph* tg; /* the region over t, which owns them */
  uint64_t live0;  /* the stack's live bytes before tg's capture */
  double first_t;  /* ns: tg's first replay and synchronize */
  /* raw side: the same kernel through the backend, the same launches captured on its own */
  dv_module* rmod;
  dv_kernel* rk;
  dv_stream* sa;
  dv_graph* rg; /* the backend's graph */
#ifdef DEVRT_HAVE_CUDA
  const dv_driver* cu; /* cuda: the driver, and the raw executable graph */
  CUgraphExec rx;
  CUgraphExec mx; /* the region over graph memory nodes (NULL: not built) */
  CUdeviceptr mptr[NBLK];
  void* margs[NBLK][3];
  double first_m; /* ns: mx's first replay and synchronize */
#endif
} gctx;

#define BE(c) ((c)->rt->be)

static int issue(gctx* c, region* r) { /* the region: NLAUNCH recorded launches in turn */
  for (int i = 0; i < NLAUNCH; i++) TRY("devrt_launch", devrt_launch(c->rt, &r->d[i % NBLK]));
  return 0;
}
static int region_init(gctx* c, region* r, const char* tag) {
  for (int i = 0; i < NBLK; i++) {
    TRY("block_alloc", devrt_block_alloc(c->rt, ELEMS * 4, c->a, tag, &r->blk[i]));
    TRY("block_ptr", devrt_block_ptr(c->rt, r->blk[i], &r->ptr[i]));
    r->use[i] = (devrt_block_use){r->blk[i], DEVRT_ACCESS_WRITE};
    r->args[i][0] = &r->ptr[i], r->args[i][1] = &c->value, r->args[i][2] = &c->n;
    r->d[i] = (devrt_launch_desc){.kernel = c->k,
                                  .stream = c->a,
                                  .grid = {1, 1, 1},
                                  .block = {ELEMS, 1, 1},
                                  .args = r->args[i],
                                  .uses = &r->use[i],
                                  .nuses = 1};
  }
  return 0;
}
/* The region through the backend alone (cuda: one cuLaunchKernel a launch) on cs. */
static devrt_status raw_issue(gctx* c, dv_stream* cs, void* (*args)[3]) {
  static const unsigned grid[3] = {1, 1, 1}, block[3] = {ELEMS, 1, 1};
  devrt_status st = DEVRT_OK;
  for (int i = 0; i < NLAUNCH && st == DEVRT_OK; i++)
    st = BE(c)->launch(cs, c->rk, grid, block, 0, args[i % NBLK]);
  return st;
}

static int d_replay(void* p, int n) {
  gctx* c = p;
  for (int i = 0; i < n; i++) TRY("devrt_graph_launch", devrt_graph_launch(c->g, c->a));
  return 0;
}
static int b_replay(void* p, int n) { /* the backend's launch of the same graph */
  gctx* c = p;
  for (int i = 0; i < n; i++) TRY("graph_launch (backend)", BE(c)->graph_launch(c->rg, c->sa));
  return 0;
}
static int r_replay(void* p, int n) {
#ifdef DEVRT_HAVE_CUDA
  gctx* c = p;
  for (int i = 0; i < n && c->cu; i++)
    if (c->cu->cuGraphLaunch(c->rx, (CUstream)c->sa) != CUDA_SUCCESS) return -1;
  if (c->cu) return 0;
#endif
  return b_replay(p, n);
}
static int d_launches(void* p, int n) {
  for (int i = 0; i < n; i++)
    if (issue(p, &((gctx*)p)->r)) return -1;
  return 0;
}
static int sync_a(void* p) {
  gctx* c = p;
  TRY("stream_synchronize", devrt_stream_synchronize(c->rt, c->a));
  return 0;
}
static int d_done(void* p, int n) { /* a replay and its synchronize, timed together */
  for (int i = 0; i < n; i++)
    if (d_replay(p, 1) || sync_a(p)) return -1;
  return 0;
}
/* the raw replay and the backend's synchronize (cuda: one cuStreamSynchronize), together */
static int r_done(void* p, int n) {
  gctx* c = p;
  for (int i = 0; i < n; i++) {
    if (r_replay(p, 1)) return -1;
    TRY("stream_sync (backend)", BE(c)->stream_sync(c->sa));
  }
  return 0;
}
static int t_replay(void* p, int n) { /* the region over devrt's temporaries */
  gctx* c = p;
  for (int i = 0; i < n; i++) TRY("devrt_graph_launch", devrt_graph_launch(c->tg, c->a));
  return 0;
}

static int live_bytes(gctx* c, uint64_t* out) { /* the runtime's stack: allocated, not freed */
  devrt_resource* res;
  devrt_resource_figures f;
  TRY("runtime_resource", devrt_runtime_resource(c->rt, &res));
  TRY("resource_query", devrt_resource_query(res, &f));
  *out = f.live_bytes;
  return 0;
}
/* devrt's way (docs/graphs.md, "Memory under capture"): NBLK temporaries allocated on the
 * capturing stream, the region over them, each freed in the capture: the graph owns them. */
static int temporaries(gctx* c) {
  if (live_bytes(c, &c->live0)) return -1;
  TRY("capture_begin (temporaries)", devrt_capture_begin(c->rt, c->a));
  int rc = region_init(c, &c->t, "bench graph temporaries") || issue(c, &c->t);
  for (int i = 0; i < NBLK; i++) {
    devrt_status s = c->t.blk[i] ? devrt_block_free(c->rt, c->t.blk[i]) : DEVRT_OK;
    if (s == DEVRT_OK) c->t.blk[i] = 0; /* the graph's now (teardown frees a block left) */
    if (s != DEVRT_OK && !rc) rc = bench_fail(BENCH_SUITE, "block_free (in the capture)", s);
  }
  devrt_status end = devrt_capture_end(c->rt, c->a, &c->tg);
  if (end != DEVRT_OK && !rc) rc = bench_fail(BENCH_SUITE, "capture_end (temporaries)", end);
  return rc;
}

#ifdef DEVRT_HAVE_CUDA
/* cuda: the 100 launches captured on a stream of their own and instantiated, with the driver's
 * calls alone (the kernel launched through the backend: one cuLaunchKernel). */
static int raw_cuda(gctx* c, dv_stream* cs) {
  const dv_driver* d = c->cu;
  CUgraph g = NULL;
  if (d->cuStreamBeginCapture((CUstream)cs, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS)
    return -1;
  devrt_status st = raw_issue(c, cs, c->r.args);
  CUresult r = d->cuStreamEndCapture((CUstream)cs, &g);
  if (st == DEVRT_OK && r == CUDA_SUCCESS && BE(c)->device_enter(c->rt->dev) == DEVRT_OK) {
    r = d->cuGraphInstantiateWithFlags(&c->rx, g, 0); /* under the device's context */
    BE(c)->device_leave(c->rt->dev);
  }
  if (g) d->cuGraphDestroy(g);
  if (st != DEVRT_OK || r != CUDA_SUCCESS || !c->rx) {
    fprintf(stderr, "bench graph: the raw capture failed\n");
    return -1;
  }
  return 0;
}
/* A CUDA user's way with temporaries: graph memory nodes (cuMemAllocAsync of NBLK temporaries,
 * the region over them, cuMemFreeAsync of each, all captured), under the device's context. Not
 * fatal: without it the temporaries_vs_memory_nodes row is left out. */
static int mem_nodes(gctx* c, dv_stream* cs) {
  const dv_driver* d = c->cu;
  CUstream s = (CUstream)cs;
  CUgraph g = NULL;
  if (BE(c)->device_enter(c->rt->dev) != DEVRT_OK) return -1;
  CUresult r = d->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
  for (int i = 0; i < NBLK && r == CUDA_SUCCESS; i++) {
    r = d->cuMemAllocAsync(&c->mptr[i], ELEMS * 4, s);
    c->margs[i][0] = &c->mptr[i], c->margs[i][1] = &c->value, c->margs[i][2] = &c->n;
  }
  devrt_status st = r == CUDA_SUCCESS ? raw_issue(c, cs, c->margs) : DEVRT_OK;
  for (int i = 0; i < NBLK && r == CUDA_SUCCESS && st == DEVRT_OK; i++)
    r = d->cuMemFreeAsync(c->mptr[i], s);
  CUresult e = d->cuStreamEndCapture(s, &g);
  if (r == CUDA_SUCCESS) r = e;
  if (r == CUDA_SUCCESS && st == DEVRT_OK) r = d->cuGraphInstantiateWithFlags(&c->mx, g, 0);
  BE(c)->device_leave(c->rt->dev);
  if (g) d->cuGraphDestroy(g);
  if (r == CUDA_SUCCESS && st == DEVRT_OK && c->mx) return 0;
  const char* name = NULL;
  d->cuGetErrorName(r, &name);
  fprintf(stderr, "bench graph: the memory-node capture failed (%s, %s): row left out\n",
          name ? name : "?", devrt_status_name(st));
  c->mx = NULL;
  return -1;
}
static int m_replay(void* p, int n) { /* the region over memory nodes: bare cuGraphLaunch */
  gctx* c = p;
  for (int i = 0; i < n; i++) {
    CUresult r = c->cu->cuGraphLaunch(c->mx, (CUstream)c->sa);
    if (r != CUDA_SUCCESS)
      return fprintf(stderr, "bench graph: cuGraphLaunch (memory nodes): CUresult %d\n", r), -1;
  }
  return 0;
}
/* The driver's graph memory on the device now (NAN where the driver lacks the query). */
static void mem_nodes_held(gctx* c, double* reserved, double* used) {
  const dv_driver* d = c->cu;
  CUdevice dev;
  cuuint64_t v;
  *reserved = *used = NAN;
  if (!d->cuDeviceGetGraphMemAttribute || d->cuDeviceGet(&dev, c->rt->info.ordinal) ||
      BE(c)->device_enter(c->rt->dev) != DEVRT_OK)
    return;
  if (!d->cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v))
    *reserved = (double)v;
  if (!d->cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v))
    *used = (double)v;
  BE(c)->device_leave(c->rt->dev);
}
#endif
/* the same 100 launches captured through the backend, for its own launch */
static int raw_backend(gctx* c, dv_stream* cs) {
  devrt_status st = BE(c)->capture_begin(cs);
  if (st == DEVRT_OK) st = raw_issue(c, cs, c->r.args);
  devrt_status end = BE(c)->capture_end(c->rt->dev, cs, NULL, 0, &c->rg);
  TRY("raw capture", st != DEVRT_OK ? st : end);
  return 0;
}
/* fn(c, cs) on a stream of its own, as devrt's capture has */
static int own_stream(gctx* c, int (*fn)(gctx*, dv_stream*)) {
  dv_stream* cs = NULL;
  TRY("stream_create", BE(c)->stream_create(c->rt->dev, NULL, 0, &cs));
  int rc = fn(c, cs);
  BE(c)->stream_destroy(c->rt->dev, cs);
  return rc;
}

static int setup(gctx* c, const cli_opts* o) {
  TRY("runtime", devrt_runtime_get(o->ordinal, &c->rt));
  TRY("acquire", devrt_stream_acquire(c->rt, DEVRT_ACQUIRE_FAIL, &c->a));
  TRY("module_load", devrt_module_load(c->rt, NULL, &c->mod));
  TRY("kernel_get", devrt_kernel_get(c->mod, "devrt_fill_u32", &c->k));
  c->value = 7, c->n = ELEMS;
  if (region_init(c, &c->r, "bench graph")) return -1;
  TRY("capture_begin", devrt_capture_begin(c->rt, c->a));
  if (issue(c, &c->r)) return -1;
  TRY("capture_end", devrt_capture_end(c->rt, c->a, &c->g));
  if (temporaries(c)) return -1;

  TRY("stream", dv_stream_get(c->rt, c->a, &c->sa, "bench graph"));
  TRY("module_load", BE(c)->module_load(c->rt->dev, NULL, &c->rmod));
  TRY("kernel_get", BE(c)->kernel_get(c->rmod, "devrt_fill_u32", &c->rk));
#ifdef DEVRT_HAVE_CUDA
  if (!strcmp(BE(c)->name, "cuda")) {
    TRY("driver", dv_driver_get(&c->cu));
    if (own_stream(c, raw_cuda)) return -1;
    if (c->cu->cuMemAllocAsync) own_stream(c, mem_nodes); /* not fatal */
  }
#endif
  if (own_stream(c, raw_backend)) return -1;
  return sync_a(c);
}

/* Each temporaries graph's first replay and synchronize: memory nodes get their memory at the
 * first launch, devrt's temporaries had theirs at the capture. */
static int first_replays(gctx* c) {
  uint64_t t = bench_now_ns();
  if (t_replay(c, 1) || sync_a(c)) return -1;
  c->first_t = (double)(bench_now_ns() - t);
#ifdef DEVRT_HAVE_CUDA
  if (c->mx) {
    t = bench_now_ns();
    if (m_replay(c, 1)) return -1;
    TRY("stream_sync (backend)", BE(c)->stream_sync(c->sa));
    c->first_m = (double)(bench_now_ns() - t);
  }
#endif
  return 0;
}

static void teardown(gctx* c) {
  if (!c->rt) return;
  if (c->a) sync_a(c);
  if (c->rg) BE(c)->graph_destroy(c->rt->dev, c->rg);
#ifdef DEVRT_HAVE_CUDA
  if (c->rx) c->cu->cuGraphExecDestroy(c->rx);
  if (c->mx) c->cu->cuGraphExecDestroy(c->mx);
#endif
  if (c->rmod) BE(c)->module_unload(c->rt->dev, c->rmod);
  if (c->g) devrt_graph_destroy(c->g);
  if (c->tg) devrt_graph_destroy(c->tg); /* and the temporaries it owns */
  for (int i = 0; i < NBLK; i++) {
    if (c->r.blk[i]) devrt_block_free(c->rt, c->r.blk[i]);
    if (c->t.blk[i]) devrt_block_free(c->rt, c->t.blk[i]); /* a failed capture's */
  }
  devrt_reap_pending(c->rt, DEVRT_REAP_WAIT, NULL);
  if (c->mod) devrt_module_unload(c->rt, c->mod);
  if (c->a) devrt_stream_release(c->rt, c->a);
}

int bench_graph(const cli_opts* o) {
  gctx c; /* zeroed: teardown frees what setup got */
  memset(&c, 0, sizeof c);
  if (setup(&c, o)) {
    teardown(&c);
    return 1;
  }
  int rounds = o->rounds > 0 ? o->rounds : 31;
  bench_suite b;
  dv_block_paths s0 = dv_block_paths_get(c.rt), s1;
  bench_begin(&b, o, BENCH_SUITE, c.rt->info.name, c.rt->be->name);
  /* (a) devrt's replay against the raw replay: what devrt adds to one graph launch */
  int rc = bench_pair(&b, "replay_100_launches", &c, d_replay, r_replay, sync_a, ITERS, rounds);
  bench_stat replay = b.devrt;
  s1 = dv_block_paths_get(c.rt);
  /* (b) against the backend's launch of the same graph (cuda: on the graph's own stream, joined
   * to the caller's by events, src/backend/cuda.c): what tracking alone adds */
  if (!rc)
    rc = bench_pair(&b, "replay_vs_backend_launch", &c, d_replay, b_replay, sync_a, ITERS, rounds);
  /* (c) the replay against the 100 recorded launches it stands for: the "raw" column here is
   * devrt issuing them one by one, so the ratio is what the graph saves (below 1 is the win) */
  if (!rc)
    rc = bench_pair(&b, "replay_vs_100_launches", &c, d_replay, d_launches, sync_a, ITERS, rounds);
  /* (d) a replay and its stream synchronize timed together, against the raw replay and the
   * backend's synchronize: the join's cost (cuda) against the work it launches */
  if (!rc) rc = bench_pair(&b, "replay_done_vs_raw", &c, d_done, r_done, sync_a, ITERS, rounds);
  /* (e) cuda: the region over devrt's temporaries against the same over memory nodes, after each
   * one's first replay */
  if (!rc) rc = first_replays(&c);
  double reserved = NAN, used = NAN, first_m = NAN;
#ifdef DEVRT_HAVE_CUDA
  if (!rc && c.mx) {
    rc = bench_pair(&b, "temporaries_vs_memory_nodes", &c, t_replay, m_replay, sync_a, ITERS,
                    rounds);
    mem_nodes_held(&c, &reserved, &used), first_m = c.first_m;
  }
#endif
  uint64_t live = 0; /* the temporaries tg owns, as the stack counts them */
  if (!rc) rc = live_bytes(&c, &live);
  double t_bytes = rc ? NAN : (double)live - (double)c.live0;
  /* which fast path row (a)'s replays took */
  unsigned long long rep = s1.launches_repeated - s0.launches_repeated,
                     grp = s1.launches_grouped - s0.launches_grouped;
  char f[768] = "", n[5][32];
  bench_cat(f, sizeof f,
            "\"goals\":{\"replay_vs_backend_launch_max\":1.05},\"launches_per_replay\":%d,"
            "\"replays_repeated\":%llu,\"replays_grouped\":%llu,"
            "\"temporaries\":{\"asked_bytes\":%u,\"live_bytes\":%s,\"first_replay_ns\":%s},",
            NLAUNCH, rep, grp, NBLK * ELEMS * 4, json_num(n[0], "%.0f", t_bytes),
            json_num(n[1], "%.0f", c.first_t));
  if (isnan(first_m))
    bench_cat(f, sizeof f, "\"memory_nodes\":null");
  else
    bench_cat(f, sizeof f,
              "\"memory_nodes\":{\"reserved_bytes\":%s,\"used_bytes\":%s,\"first_replay_ns\":%s}",
              json_num(n[2], "%.0f", reserved), json_num(n[3], "%.0f", used),
              json_num(n[4], "%.0f", first_m));
  bench_end_fields(&b, f);
  if (!o->json && !rc) {
    printf(
        "goal: replay_vs_backend_launch (tracking's share) <= 1.05x; replay_100_launches adds the "
        "join on cuda (docs/graphs.md); replay_vs_100_launches is the win (one replay: median %.0f "
        "ns); replays repeated %llu, grouped %llu\n",
        replay.median, rep, grp);
    printf(
        "replay_done_vs_raw: a replay and its synchronize; temporaries (%u bytes asked): devrt "
        "holds %.0f bytes from the capture on, first replay %.0f ns; ",
        NBLK * ELEMS * 4, t_bytes, c.first_t);
    if (isnan(first_m))
      printf("temporaries_vs_memory_nodes absent (%s)\n",
             strcmp(c.rt->be->name, "cuda") ? "cuda only" : "no memory-node graph was built");
    else
      printf(
          "memory nodes: reserved %.0f, used %.0f bytes after the replays, first replay %.0f ns\n",
          reserved, used, first_m);
  }
  teardown(&c);
  return rc ? 1 : 0;
}
