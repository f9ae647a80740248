/* bench_device.c: `devrt bench device`: host ns per device-layer call through devrt against the
 * raw call it wraps (the driver's own entry point on cuda; the backend call on host), same run. */
#include <stdio.h>
#include <string.h>
#include "bench.h"
#include "runtime/runtime.h"
#ifdef DEVRT_HAVE_CUDA
#include "driver/cuda_driver.h"
#endif

typedef struct dctx {
  devrt_runtime* rt;
  devrt_stream s, s2;
  devrt_event *ev, *done; /* ev: recorded on s; done: recorded on s2 and complete */
  /* raw side */
  const struct raw_ops* raw;
  void *rs, *rs2, *rev, *rdone, *rpool, *rctx;
} dctx;

typedef struct raw_ops {
  int (*stream_cycle)(dctx* c, int n);
  int (*record)(dctx* c, int n);
  int (*wait)(dctx* c, int n);
  int (*query)(dctx* c, int n);
  int (*host_func)(dctx* c, int n);
  int (*alloc_free)(dctx* c, int n);
  int (*sync)(dctx* c);
} raw_ops;

static void noop(void* u) { (void)u; }

#define BENCH_SUITE "device"

/* ---- devrt side ---- */
static int d_stream_cycle(void* p, int n) {
  dctx* c = p;
  for (int i = 0; i < n; i++) {
    devrt_stream s;
    TRY("acquire", devrt_stream_acquire(c->rt, DEVRT_ACQUIRE_FAIL, &s));
    TRY("release", devrt_stream_release(c->rt, s));
  }
  return 0;
}
static int d_record(void* p, int n) {
  dctx* c = p;
  for (int i = 0; i < n; i++) TRY("event_record", devrt_event_record(c->rt, c->ev, c->s));
  return 0;
}
static int d_wait(void* p, int n) {
  dctx* c = p;
  for (int i = 0; i < n; i++)
    TRY("stream_wait_event", devrt_stream_wait_event(c->rt, c->s, c->done));
  return 0;
}
static int d_query(void* p, int n) {
  dctx* c = p;
  bool done;
  for (int i = 0; i < n; i++) TRY("event_query", devrt_event_query(c->rt, c->done, &done));
  return 0;
}
static int d_host_func(void* p, int n) {
  dctx* c = p;
  for (int i = 0; i < n; i++)
    TRY("stream_host_func", devrt_stream_host_func(c->rt, c->s, noop, NULL));
  return 0;
}
static int d_alloc_free(void* p, int n) {
  dctx* c = p;
  for (int i = 0; i < n; i++) {
    void* ptr;
    TRY("pool_alloc", devrt_pool_alloc(c->rt, 256, c->s, &ptr));
    TRY("pool_free", devrt_pool_free(c->rt, ptr, c->s));
  }
  return 0;
}
static int sync_all(void* p) {
  dctx* c = p;
  TRY("stream_synchronize", devrt_stream_synchronize(c->rt, c->s));
  return c->raw->sync(c);
}
static int r_stream_cycle(void* p, int n) { return ((dctx*)p)->raw->stream_cycle(p, n); }
static int r_record(void* p, int n) { return ((dctx*)p)->raw->record(p, n); }
static int r_wait(void* p, int n) { return ((dctx*)p)->raw->wait(p, n); }
static int r_query(void* p, int n) { return ((dctx*)p)->raw->query(p, n); }
static int r_host_func(void* p, int n) { return ((dctx*)p)->raw->host_func(p, n); }
static int r_alloc_free(void* p, int n) { return ((dctx*)p)->raw->alloc_free(p, n); }

/* ---- raw side, host backend: the backend's own calls ---- */
#define BE(c) ((c)->rt->be)
#define DEV(c) ((c)->rt->dev)
static int h_stream_cycle(dctx* c, int n) {
  for (int i = 0; i < n; i++) {
    dv_stream* s = NULL;
    TRY("stream_create", BE(c)->stream_create(DEV(c), NULL, 0, &s));
    BE(c)->stream_destroy(DEV(c), s);
  }
  return 0;
}
static int h_record(dctx* c, int n) {
  for (int i = 0; i < n; i++) TRY("event_record", BE(c)->event_record(c->rev, c->rs));
  return 0;
}
static int h_wait(dctx* c, int n) {
  for (int i = 0; i < n; i++) TRY("stream_wait", BE(c)->stream_wait(c->rs, c->rdone));
  return 0;
}
static int h_query(dctx* c, int n) {
  bool done;
  for (int i = 0; i < n; i++) TRY("event_query", BE(c)->event_query(c->rdone, &done));
  return 0;
}
static int h_host_func(dctx* c, int n) {
  for (int i = 0; i < n; i++) TRY("host_func", BE(c)->host_func(c->rs, noop, NULL, 0));
  return 0;
}
static int h_alloc_free(dctx* c, int n) {
  for (int i = 0; i < n; i++) {
    void* ptr;
    TRY("pool_alloc", BE(c)->pool_alloc(DEV(c), 256, c->rs, &ptr));
    TRY("pool_free", BE(c)->pool_free(DEV(c), ptr, c->rs));
  }
  return 0;
}
static int h_sync(dctx* c) {
  TRY("stream_sync", BE(c)->stream_sync(c->rs));
  return 0;
}
static const raw_ops host_raw = {h_stream_cycle, h_record,     h_wait, h_query,
                                 h_host_func,    h_alloc_free, h_sync};

static int host_setup(dctx* c) {
  TRY("stream_create", BE(c)->stream_create(DEV(c), NULL, 0, (dv_stream**)&c->rs));
  TRY("event_create", BE(c)->event_create(DEV(c), 0, (dv_event**)&c->rev));
  TRY("event_create", BE(c)->event_create(DEV(c), 0, (dv_event**)&c->rdone));
  dv_stream* s2;
  TRY("stream_create", BE(c)->stream_create(DEV(c), NULL, 0, &s2));
  TRY("event_record", BE(c)->event_record(c->rdone, s2));
  TRY("event_sync", BE(c)->event_sync(c->rdone));
  c->rs2 = s2;
  return 0;
}
static void host_teardown(dctx* c) {
  BE(c)->event_destroy(DEV(c), c->rev);
  BE(c)->event_destroy(DEV(c), c->rdone);
  BE(c)->stream_destroy(DEV(c), c->rs);
  BE(c)->stream_destroy(DEV(c), c->rs2);
}

#ifdef DEVRT_HAVE_CUDA
/* ---- raw side, cuda backend: the driver's entry points, called directly ---- */
static const dv_driver* D;
#define CUTRY(what, call)                                                                          \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) return bench_fail(BENCH_SUITE, what, dv_cu_fail(r_, what, "(bench)")); \
  } while (0)
static int c_stream_cycle(dctx* c, int n) {
  CUTRY("cuCtxPushCurrent", D->cuCtxPushCurrent(c->rctx));
  for (int i = 0; i < n; i++) {
    CUstream s;
    CUTRY("cuStreamCreateWithPriority",
          D->cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0));
    CUTRY("cuStreamDestroy", D->cuStreamDestroy(s));
  }
  CUcontext ctx;
  D->cuCtxPopCurrent(&ctx);
  return 0;
}
static int c_record(dctx* c, int n) {
  for (int i = 0; i < n; i++) CUTRY("cuEventRecord", D->cuEventRecord(c->rev, c->rs));
  return 0;
}
static int c_wait(dctx* c, int n) {
  for (int i = 0; i < n; i++) CUTRY("cuStreamWaitEvent", D->cuStreamWaitEvent(c->rs, c->rdone, 0));
  return 0;
}
static int c_query(dctx* c, int n) {
  for (int i = 0; i < n; i++) CUTRY("cuEventQuery", D->cuEventQuery(c->rdone));
  return 0;
}
static int c_host_func(dctx* c, int n) {
  for (int i = 0; i < n; i++) CUTRY("cuLaunchHostFunc", D->cuLaunchHostFunc(c->rs, noop, NULL));
  return 0;
}
static int c_alloc_free(dctx* c, int n) {
  for (int i = 0; i < n; i++) {
    CUdeviceptr p;
    CUTRY("cuMemAllocFromPoolAsync", D->cuMemAllocFromPoolAsync(&p, 256, c->rpool, c->rs));
    CUTRY("cuMemFreeAsync", D->cuMemFreeAsync(p, c->rs));
  }
  return 0;
}
static int c_sync(dctx* c) {
  CUTRY("cuStreamSynchronize", D->cuStreamSynchronize(c->rs));
  return 0;
}
static const raw_ops cuda_raw = {c_stream_cycle, c_record,     c_wait, c_query,
                                 c_host_func,    c_alloc_free, c_sync};

static int cuda_setup(dctx* c) {
  TRY("driver", dv_driver_get(&D));
  CUdevice dev;
  CUcontext ctx;
  CUTRY("cuDeviceGet", D->cuDeviceGet(&dev, c->rt->cfg.ordinal));
  CUTRY("cuDevicePrimaryCtxRetain", D->cuDevicePrimaryCtxRetain(&ctx, dev));
  c->rctx = ctx;
  CUTRY("cuCtxPushCurrent", D->cuCtxPushCurrent(ctx));
  CUstream s, s2;
  CUevent e, done;
  CUTRY("cuStreamCreateWithPriority", D->cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0));
  CUTRY("cuStreamCreateWithPriority",
        D->cuStreamCreateWithPriority(&s2, CU_STREAM_NON_BLOCKING, 0));
  CUTRY("cuEventCreate", D->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CUTRY("cuEventCreate", D->cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  CUTRY("cuEventRecord", D->cuEventRecord(done, s2));
  CUTRY("cuEventSynchronize", D->cuEventSynchronize(done));
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  CUmemoryPool pool;
  CUTRY("cuMemPoolCreate", D->cuMemPoolCreate(&pool, &props));
  cuuint64_t keep = UINT64_MAX;
  CUTRY("cuMemPoolSetAttribute",
        D->cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
  D->cuCtxPopCurrent(&ctx);
  c->rs = s, c->rs2 = s2, c->rev = e, c->rdone = done, c->rpool = pool;
  return 0;
}
static void cuda_teardown(dctx* c) {
  D->cuStreamSynchronize(c->rs);
  D->cuEventDestroy(c->rev);
  D->cuEventDestroy(c->rdone);
  D->cuStreamDestroy(c->rs);
  D->cuStreamDestroy(c->rs2);
  D->cuMemPoolDestroy(c->rpool);
  CUdevice dev;
  D->cuDeviceGet(&dev, c->rt->cfg.ordinal);
  D->cuDevicePrimaryCtxRelease(dev);
}
#endif

int bench_device(const cli_opts* o) {
  dctx c;
  memset(&c, 0, sizeof c);
  TRY("runtime", devrt_runtime_get(o->ordinal, &c.rt));
  bool cuda = strcmp(c.rt->be->name, "cuda") == 0;
  TRY("acquire", devrt_stream_acquire(c.rt, DEVRT_ACQUIRE_FAIL, &c.s));
  TRY("acquire", devrt_stream_acquire(c.rt, DEVRT_ACQUIRE_FAIL, &c.s2));
  TRY("event_create", devrt_event_create(c.rt, 0, &c.ev));
  TRY("event_create", devrt_event_create(c.rt, 0, &c.done));
  TRY("event_record", devrt_event_record(c.rt, c.done, c.s2));
  TRY("event_synchronize", devrt_event_synchronize(c.rt, c.done));
#ifdef DEVRT_HAVE_CUDA
  if (cuda) {
    c.raw = &cuda_raw;
    if (cuda_setup(&c)) return 1;
  }
#endif
  if (!cuda) {
    c.raw = &host_raw;
    if (host_setup(&c)) return 1;
  }
  int rounds = o->rounds > 0 ? o->rounds : 31;
  bench_suite b;
  bench_begin(&b, o, "device", c.rt->info.name, c.rt->be->name);
  int rc =
      bench_pair(&b, "stream_acquire_release", &c, d_stream_cycle, r_stream_cycle, NULL,
                 cuda ? 200 : 20, rounds) ||
      bench_pair(&b, "event_record", &c, d_record, r_record, sync_all, 1000, rounds) ||
      bench_pair(&b, "stream_wait_event", &c, d_wait, r_wait, sync_all, 1000, rounds) ||
      bench_pair(&b, "event_query", &c, d_query, r_query, NULL, 10000, rounds) ||
      bench_pair(&b, "host_func_launch", &c, d_host_func, r_host_func, sync_all, 500, rounds) ||
      bench_pair(&b, "pool_alloc_free_256B", &c, d_alloc_free, r_alloc_free, sync_all, 1000,
                 rounds);
  bench_end(&b);
  if (!cuda) host_teardown(&c);
#ifdef DEVRT_HAVE_CUDA
  if (cuda) cuda_teardown(&c);
#endif
  devrt_event_destroy(c.rt, c.ev);
  devrt_event_destroy(c.rt, c.done);
  devrt_stream_release(c.rt, c.s);
  devrt_stream_release(c.rt, c.s2);
  return rc ? 1 : 0;
}
