/* test_torch_edges.c: PyTorch's entry points (devrt/torch.h) where devrt meets faults and streams
 * it cannot import, and runtimes whose streams another runtime imported. A free of an allocation
 * a slow reader on another stream still uses (record_stream) must not let the memory go before
 * the reader is done, must not fail for a failed event or wait (PyTorch never retries a free), and
 * must not leak: the reader checks a canary, and after a waiting reap nothing is live or pending.
 * Allocations for a stream being captured into a graph are held until released. Two host devices
 * (the second for another device's stream); the process-wide runtimes are created with fault
 * injection enabled. Host backend. */
#include <pthread.h>
#include <unistd.h>
#include "backend/fault.h"
#include "devrt/torch.h"
#include "launch_util.h"

enum { WORDS = 1024 };
#define CANARY 0x5eed5eedu

/* A reader held behind a gate, then checking that the allocation still holds the canary. */
typedef struct reader {
  uint32_t* p;
  _Atomic int gate;
  _Atomic int ran, intact;
} reader;

static void read_canary(void* u) {
  reader* r = u;
  while (!atomic_load(&r->gate)) usleep(200);
  int ok = 1;
  for (int k = 0; k < WORDS; k++) ok &= r->p[k] == CANARY;
  atomic_store(&r->intact, ok);
  atomic_store(&r->ran, 1);
}

static void* open_later(void* u) {
  usleep(30000);
  atomic_store(&((reader*)u)->gate, 1);
  return NULL;
}

static devrt_runtime* rts[2]; /* the process-wide runtimes of host devices 0 and 1 */

static dv_stream* new_stream(devrt_runtime* r) {
  dv_stream* s = NULL;
  REQUIRE_OK(r->be->stream_create(r->dev, NULL, 0, &s));
  return s;
}
static void* nat(devrt_runtime* r, dv_stream* s) { return r->be->stream_native(s); }

static devrt_resource_figures figures(int dev) {
  devrt_resource* top = NULL;
  devrt_resource_figures f;
  REQUIRE_OK(devrt_runtime_resource(rts[dev], &top));
  REQUIRE_OK(devrt_reap_pending(rts[dev], DEVRT_REAP_WAIT, NULL));
  REQUIRE_OK(devrt_resource_query(top, &f));
  return f;
}

static dv_stream* readers[2];       /* a reader stream on each device, used again and again */
enum { SHARED, FRESH, PER_THREAD }; /* which stream reads: readers[odev], a new one, or none */

/* An allocation on `dev` holding the canary, read by a gated reader on a stream of device `odev`
 * (or, PER_THREAD, a handle with no host stream behind it: no reader), recorded with
 * record_stream; `op` failed once (DV_OP_COUNT: none) during its free, which must succeed; the
 * reader opens 30 ms later and must find the canary; then nothing of it is live or pending. */
static void case_free(const char* what, int dev, int odev, int which, dv_op op) {
  devrt_runtime* r = rts[dev];
  dv_stream* a = new_stream(r); /* the framework's stream, a fresh slot (its events created anew) */
  devrt_resource_figures f0 = figures(dev);
  devrt_torch_stats t0, t1;
  REQUIRE_OK(devrt_torch_stats_get(dev, &t0));
  uint32_t* p = devrt_torch_alloc(WORDS * 4, dev, nat(r, a));
  REQUIRE_OK(p ? DEVRT_OK : DEVRT_ERR_DEVICE_ALLOC_FAILED);
  REQUIRE_OK(r->be->stream_sync(a));
  for (int k = 0; k < WORDS; k++) p[k] = CANARY; /* host memory on the host backend */
  reader rd = {.p = p};
  dv_stream* os = which == SHARED ? readers[odev] : which == FRESH ? new_stream(rts[odev]) : NULL;
  if (os) REQUIRE_OK(rts[odev]->be->host_func(os, read_canary, &rd, 0));
  devrt_torch_record_stream(p, os ? nat(rts[odev], os) : DEVRT_STREAM_PER_THREAD);
  CHECK(devrt_last_error()[0] == 0);
  uint64_t fired = dv_fault_fired();
  if (op != DV_OP_COUNT) REQUIRE_OK(dv_fault_inject(op, 1, DEVRT_OK));
  pthread_t t;
  REQUIRE_OK(pthread_create(&t, NULL, open_later, &rd) ? DEVRT_ERR_OUT_OF_RESOURCES : DEVRT_OK);
  devrt_torch_free(p, WORDS * 4, dev, nat(r, a));
  const char* err = devrt_last_error();
  CHECK(err[0] == 0);
  if (op != DV_OP_COUNT) {
    CHECK(dv_fault_fired() == fired + 1); /* the injected failure happened inside the free */
    REQUIRE_OK(dv_fault_inject(op, 0, DEVRT_OK));
  }
  /* the next allocation on the free's stream may take the same memory: it must come after */
  uint32_t* q = devrt_torch_alloc(WORDS * 4, dev, nat(r, a));
  CHECK(q != NULL);
  if (q) REQUIRE_OK(r->be->memset_async(a, q, 0, WORDS * 4));
  pthread_join(t, NULL);
  if (os) REQUIRE_OK(rts[odev]->be->stream_sync(os));
  CHECK(!os || (atomic_load(&rd.ran) && atomic_load(&rd.intact)));
  if (q) devrt_torch_free(q, WORDS * 4, dev, nat(r, a));
  REQUIRE_OK(r->be->stream_sync(a));
  devrt_resource_figures f = figures(dev);
  REQUIRE_OK(devrt_torch_stats_get(dev, &t1));
  printf(
      "%-44s free said \"%s\"; reader %s; live %llu -> %llu, pending %llu; waits: %llu device, "
      "%llu host\n",
      what, err[0] ? err : "",
      !os                       ? "none"
      : atomic_load(&rd.intact) ? "intact"
                                : "CORRUPTED",
      (unsigned long long)f0.live_bytes, (unsigned long long)f.live_bytes,
      (unsigned long long)f.pending_bytes, (unsigned long long)(t1.device_waits - t0.device_waits),
      (unsigned long long)(t1.host_waits - t0.host_waits));
  CHECK(f.live_bytes == f0.live_bytes && f.pending_bytes == 0);
  CHECK(t1.frees_failed == t0.frees_failed);
  if (op == DV_OP_COUNT && os && odev == dev)
    CHECK(t1.device_waits == t0.device_waits + 1); /* nothing failed: ordered on the device */
  else
    CHECK(t1.host_waits > t0.host_waits); /* devrt could not: it waited on the host */
  r->be->stream_destroy(r->dev, a);
  if (which == FRESH) rts[odev]->be->stream_destroy(rts[odev]->dev, os);
}

/* A stream-ordered free that fails once (the pool's free) is tried again: PyTorch never does. */
static void case_retry(void) {
  devrt_runtime* r = rts[0]; /* cache off: the free reaches the pool */
  if (r->cfg.arena) { /* DEVRT_ARENA=1 (its ctest run): a free on its stream calls no backend */
    printf("a pool free failed once: not under the arena leaf, whose free has no pool call\n");
    return;
  }
  dv_stream* a = new_stream(r);
  devrt_torch_stats t0, t1;
  REQUIRE_OK(devrt_torch_stats_get(0, &t0));
  devrt_resource_figures f0 = figures(0);
  void* p = devrt_torch_alloc(4096, 0, nat(r, a));
  REQUIRE_OK(p ? DEVRT_OK : DEVRT_ERR_DEVICE_ALLOC_FAILED);
  REQUIRE_OK(dv_fault_inject(DV_OP_pool_free, 1, DEVRT_OK));
  devrt_torch_free(p, 4096, 0, nat(r, a));
  CHECK(devrt_last_error()[0] == 0);
  REQUIRE_OK(dv_fault_inject(DV_OP_pool_free, 0, DEVRT_OK));
  REQUIRE_OK(devrt_torch_stats_get(0, &t1));
  devrt_resource_figures f = figures(0);
  printf("a pool free failed once: retried %llu, failed %llu; live %llu -> %llu\n",
         (unsigned long long)(t1.frees_retried - t0.frees_retried),
         (unsigned long long)(t1.frees_failed - t0.frees_failed), (unsigned long long)f0.live_bytes,
         (unsigned long long)f.live_bytes);
  CHECK(t1.frees_retried == t0.frees_retried + 1 && t1.frees_failed == t0.frees_failed);
  CHECK(f.live_bytes == f0.live_bytes);
  REQUIRE_OK(r->be->stream_sync(a));
  r->be->stream_destroy(r->dev, a);
}

/* An allocation the budget refuses is tried once more after the pending frees and the cache,
 * then fails: counted as PyTorch counts num_alloc_retries and num_ooms, on its own device. */
static void case_oom(void) {
  devrt_torch_stats t0, t1, o0, o1;
  dv_stream* a = new_stream(rts[0]);
  REQUIRE_OK(devrt_torch_stats_get(0, &t0));
  REQUIRE_OK(devrt_torch_stats_get(1, &o0));
  CHECK(devrt_torch_alloc((size_t)1 << 50, 0, nat(rts[0], a)) == NULL);
  CHECK(strstr(devrt_last_error(), "budget") != NULL);
  REQUIRE_OK(devrt_torch_stats_get(0, &t1));
  REQUIRE_OK(devrt_torch_stats_get(1, &o1));
  CHECK(t1.alloc_retries == t0.alloc_retries + 1 && t1.ooms == t0.ooms + 1);
  CHECK(o1.alloc_retries == o0.alloc_retries && o1.ooms == o0.ooms); /* another device's */
  CHECK_STATUS(devrt_torch_stats_get(-1, &t1), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_torch_stats_get(0, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  rts[0]->be->stream_destroy(rts[0]->dev, a);
}

/* A runtime whose stream another runtime imported cannot be destroyed until the import is
 * forgotten; the torch entry points' imports are held for the process, so for ever. */
static void case_owner_destroy(void) {
  devrt_config c;
  REQUIRE_OK(devrt_config_init(&c));
  devrt_runtime* owner = t_runtime_cfg(&c);
  devrt_stream s = 0, imp = 0;
  void* n = NULL;
  REQUIRE_OK(devrt_stream_acquire(owner, DEVRT_ACQUIRE_WAIT, &s));
  REQUIRE_OK(devrt_stream_native(owner, s, &n));
  REQUIRE_OK(devrt_stream_import(rts[0], n, &imp));
  CHECK_STATUS(devrt_runtime_destroy(owner), DEVRT_ERR_INVALID_STATE);
  CHECK(strstr(devrt_last_error(), "import(s) of its streams") != NULL);
  CHECK_OK(devrt_stream_synchronize(rts[0], imp)); /* the importer's use still works */
  CHECK_OK(devrt_stream_forget(rts[0], imp));
  CHECK_OK(devrt_stream_release(owner, s));
  CHECK_OK(devrt_runtime_destroy(owner));

  owner = t_runtime_cfg(&c);
  REQUIRE_OK(devrt_stream_acquire(owner, DEVRT_ACQUIRE_WAIT, &s));
  REQUIRE_OK(devrt_stream_native(owner, s, &n));
  void* p = devrt_torch_alloc(4096, 0, n); /* imported into runtime 0 for the process */
  CHECK(p != NULL);
  devrt_torch_free(p, 4096, 0, n);
  CHECK_OK(devrt_stream_release(owner, s));
  CHECK_STATUS(devrt_runtime_destroy(owner), DEVRT_ERR_INVALID_STATE);
  void* q = devrt_torch_alloc(4096, 0, n); /* still a live stream: no use after free */
  CHECK(q != NULL);
  devrt_torch_free(q, 4096, 0, n);
  CHECK(devrt_last_error()[0] == 0);
}

/* torch.cuda.graph: an allocation for a capturing stream is made off it and held at its free, as
 * is any allocation freed on a capturing stream, until devrt_torch_graph_release gives them back;
 * one made for a capture that is still live stays live through a release. */
static void case_capture(void) {
  devrt_runtime* r = rts[0];
  dv_stream* s = new_stream(r);
  void* n = nat(r, s);
  devrt_torch_stats t0, t1;
  devrt_resource_figures f0 = figures(0);
  REQUIRE_OK(devrt_torch_stats_get(0, &t0));
  REQUIRE_OK(r->be->capture_begin(s));
  void* p = devrt_torch_alloc(4096, 0, n);    /* for the capture */
  void* q = devrt_torch_alloc(4096, 0, NULL); /* an ordinary one, freed on the capturing stream */
  CHECK(p && q);
  if (p) memset(p, 1, 4096); /* usable now: nothing of it waits on the capturing stream */
  devrt_torch_free(p, 4096, 0, n);
  devrt_torch_free(q, 4096, 0, n);
  CHECK(devrt_last_error()[0] == 0);
  dv_graph* g = NULL;
  REQUIRE_OK(r->be->capture_end(r->dev, s, NULL, 0, &g));
  r->be->graph_destroy(r->dev, g);
  REQUIRE_OK(devrt_torch_stats_get(0, &t1));
  CHECK(t1.graph_allocs == t0.graph_allocs + 1);
  CHECK(t1.graph_held_bytes == t0.graph_held_bytes + 8192);
  CHECK(figures(0).live_bytes == f0.live_bytes + 8192); /* held, not freed */
  uint64_t got = 0;
  CHECK_OK(devrt_torch_graph_release(0, &got));
  CHECK(got == 8192);
  CHECK(figures(0).live_bytes == f0.live_bytes);

  REQUIRE_OK(r->be->capture_begin(s));
  p = devrt_torch_alloc(4096, 0, n);
  REQUIRE_OK(r->be->capture_end(r->dev, s, NULL, 0, &g));
  r->be->graph_destroy(r->dev, g);
  CHECK_OK(devrt_torch_graph_release(0, &got));
  CHECK(got == 0 && figures(0).live_bytes == f0.live_bytes + 4096); /* live: not PyTorch's free */
  devrt_torch_free(p, 4096, 0, n); /* the stream no longer captures: held all the same */
  CHECK(figures(0).live_bytes == f0.live_bytes + 4096);
  CHECK_OK(devrt_torch_graph_release(0, NULL));
  CHECK(figures(0).live_bytes == f0.live_bytes);
  REQUIRE_OK(devrt_torch_stats_get(0, &t1));
  CHECK(t1.graph_held_bytes == t0.graph_held_bytes);
  CHECK(t1.graph_released_bytes == t0.graph_released_bytes + 12288);
  CHECK_STATUS(devrt_torch_graph_release(-1, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_torch_graph_release(DEVRT_MAX_ORDINALS, NULL), DEVRT_ERR_INVALID_ARGUMENT);
  r->be->stream_destroy(r->dev, s);
}

int main(void) {
  setenv("DEVRT_HOST_DEVICES", "2", 1);
  dv_fault_enable(); /* before the process-wide runtimes: they call through the wrapper */
  devrt_config c;
  REQUIRE_OK(devrt_config_init(&c));
  c.backend = DEVRT_BACKEND_HOST;
  c.cache = false; /* device 0: a free releases to the pool (ASan sees a use after it) */
  REQUIRE_OK(devrt_configure(0, &c));
  c.cache = true; /* device 1: a free goes to the cache (the reader would see it reused) */
  REQUIRE_OK(devrt_configure(1, &c));
  REQUIRE_OK(devrt_runtime_get(0, &rts[0]));
  REQUIRE_OK(devrt_runtime_get(1, &rts[1]));
  readers[0] = new_stream(rts[0]), readers[1] = new_stream(rts[1]);
  for (int dev = 0; dev < 2; dev++) {
    printf("device %d (cache %s):\n", dev, dev ? "on" : "off");
    case_free("  a reader on this device", dev, dev, SHARED, DV_OP_COUNT);
    case_free("  the same, event_create failed", dev, dev, FRESH, DV_OP_event_create);
    case_free("  the same, event_record failed", dev, dev, SHARED, DV_OP_event_record);
    case_free("  the same, stream_wait failed", dev, dev, SHARED, DV_OP_stream_wait);
    case_free("  the same, stream_wrap failed", dev, dev, FRESH, DV_OP_stream_wrap);
    case_free("  a reader on the other device", dev, !dev, SHARED, DV_OP_COUNT);
    case_free("  DEVRT_STREAM_PER_THREAD recorded", dev, dev, PER_THREAD, DV_OP_COUNT);
  }
  case_retry();
  case_oom();
  case_owner_destroy();
  case_capture();
  return t_done();
}
