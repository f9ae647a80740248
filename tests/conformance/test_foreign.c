/* test_foreign.c: foreign streams (devrt_stream_import / devrt_stream_forget) and PyTorch's
 * allocator entry points (devrt/torch.h). Import counting (same handle, same id, until forgotten as
 * often), stale ids after the last forget, the legacy default stream (NULL and
 * DEVRT_STREAM_LEGACY: one id) and the per-thread one (refused), bad input, the slot limit;
 * blocks, recorded launches, the queue, stream-ordered frees through the stack and the caching
 * layer on an imported stream; devrt never destroying the native stream (forget, runtime
 * destroy); the torch entry points allocating under the tag "torch", failing with NULL and a
 * message over the budget, re-importing after a stray forget; threads importing and forgetting
 * the same and different handles while allocating on them. */
#include <pthread.h>
#include <unistd.h>
#include "devrt/torch.h"
#include "launch_util.h"

#define MiB ((size_t)1 << 20)
enum { N = 4096, THREADS = 8, ROUNDS = 200 };

static devrt_runtime* rt;
static kernels K;

/* A stream devrt's slot table knows nothing of: created by the backend directly (on cuda a
 * CUstream from cuStreamCreateWithPriority in the primary context, as a framework makes). */
static dv_stream* foreign_on(devrt_runtime* r) {
  dv_stream* s = NULL;
  REQUIRE_OK(r->be->stream_create(r->dev, NULL, 0, &s));
  return s;
}
static dv_stream* foreign_new(void) { return foreign_on(rt); }
static void* nat(dv_stream* s) { return rt->be->stream_native(s); }
static void foreign_free(dv_stream* s) { rt->be->stream_destroy(rt->dev, s); }

static void test_counting(void) {
  dv_stream* f = foreign_new();
  devrt_stream a = 0, b = 0, c = 0;
  CHECK_OK(devrt_stream_import(rt, nat(f), &a));
  CHECK_OK(devrt_stream_import(rt, nat(f), &b));
  CHECK(a != 0 && a == b);
  void* n = NULL;
  CHECK_OK(devrt_stream_native(rt, a, &n));
  CHECK(n == nat(f));
  CHECK_OK(devrt_stream_forget(rt, a)); /* one import left: still valid */
  CHECK_OK(devrt_stream_synchronize(rt, a));
  CHECK_OK(devrt_stream_import(rt, nat(f), &c)); /* two again */
  CHECK(c == a);
  CHECK_OK(devrt_stream_forget(rt, a));
  CHECK_OK(devrt_stream_forget(rt, a));
  CHECK_STATUS(devrt_stream_synchronize(rt, a), DEVRT_ERR_INVALID_ARGUMENT); /* stale */
  CHECK_STATUS(devrt_stream_forget(rt, a), DEVRT_ERR_INVALID_ARGUMENT);      /* double forget */
  CHECK(strstr(devrt_last_error(), "devrt_stream_forget") != NULL);
  CHECK_OK(devrt_stream_import(rt, nat(f), &c)); /* a new id: the old one stays stale */
  CHECK(c != a);
  CHECK_STATUS(devrt_stream_native(rt, a, &n), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_stream_forget(rt, c));
  /* devrt never destroyed it: it still takes work */
  CHECK_OK(rt->be->stream_sync(f));
  foreign_free(f);
}

static void test_legacy(void) {
  devrt_stream a = 0, b = 0;
  CHECK_OK(devrt_stream_import(rt, NULL, &a));
  CHECK_OK(devrt_stream_import(rt, DEVRT_STREAM_LEGACY, &b));
  CHECK(a != 0 && a == b);
  void* n = NULL;
  CHECK_OK(devrt_stream_native(rt, a, &n));
  CHECK(n != NULL && n != DEVRT_STREAM_LEGACY); /* devrt's own stream standing for it */
  devrt_block x = 0;
  CHECK_OK(devrt_block_alloc(rt, N * 4, a, "legacy", &x));
  CHECK_OK(k_fill(rt, &K, a, x, 7, N, 0, true));
  CHECK(b_wrong(rt, a, x, N, 7) == 0);
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_STATUS(devrt_stream_import(rt, DEVRT_STREAM_PER_THREAD, &b), DEVRT_ERR_UNSUPPORTED);
  CHECK(strstr(devrt_last_error(), "per-thread") != NULL);
  CHECK_OK(devrt_stream_forget(rt, a));
  CHECK_OK(devrt_stream_forget(rt, a));
  CHECK_STATUS(devrt_stream_synchronize(rt, a), DEVRT_ERR_INVALID_ARGUMENT);
}

static void test_refusals(void) {
  devrt_stream own = s_get(rt), id = 0;
  void* n = NULL;
  REQUIRE_OK(devrt_stream_native(rt, own, &n));
  CHECK_STATUS(devrt_stream_import(rt, n, &id), DEVRT_ERR_INVALID_ARGUMENT); /* devrt's own */
  CHECK(strstr(devrt_last_error(), "own") != NULL);
  CHECK_STATUS(devrt_stream_forget(rt, own), DEVRT_ERR_INVALID_ARGUMENT); /* not imported */
  /* A partition's stream is devrt's own too (found by the fuzzer: it was imported). */
  devrt_layout_spec spec = {.groups = 1, .flags = DEVRT_LAYOUT_ALLOW_FALLBACK};
  devrt_layout* l = NULL;
  devrt_partition* p = NULL;
  devrt_stream ps = 0;
  REQUIRE_OK(devrt_layout_create(rt, &spec, &l));
  REQUIRE_OK(devrt_layout_partition(rt, l, 0, &p));
  REQUIRE_OK(devrt_partition_stream_acquire(rt, p, DEVRT_ACQUIRE_FAIL, &ps));
  REQUIRE_OK(devrt_stream_native(rt, ps, &n));
  CHECK_STATUS(devrt_stream_import(rt, n, &id), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK(strstr(devrt_last_error(), "own") != NULL);
  CHECK_OK(devrt_stream_release(rt, ps));
  CHECK_OK(devrt_layout_destroy(rt, l));
  dv_stream* f = foreign_new();
  REQUIRE_OK(devrt_stream_import(rt, nat(f), &id));
  CHECK_STATUS(devrt_stream_release(rt, id), DEVRT_ERR_INVALID_ARGUMENT); /* imported */
  CHECK(strstr(devrt_last_error(), "devrt_stream_forget") != NULL);
  CHECK_OK(devrt_stream_synchronize(rt, id)); /* the refusal changed nothing */
  CHECK_OK(devrt_stream_forget(rt, id));
  CHECK_OK(devrt_stream_release(rt, own));
  foreign_free(f);

  /* The slot limit: imports share the partitions' slots. */
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.partition_streams = 2;
  devrt_runtime* small = t_runtime_cfg(&cfg);
  dv_stream* fs[3] = {foreign_new(), foreign_new(), foreign_new()};
  devrt_stream ids[3] = {0};
  CHECK_OK(devrt_stream_import(small, nat(fs[0]), &ids[0]));
  CHECK_OK(devrt_stream_import(small, nat(fs[1]), &ids[1]));
  CHECK_STATUS(devrt_stream_import(small, nat(fs[2]), &ids[2]), DEVRT_ERR_OUT_OF_RESOURCES);
  CHECK(strstr(devrt_last_error(), "DEVRT_PARTITION_STREAMS") != NULL);
  CHECK_OK(devrt_stream_import(small, nat(fs[0]), &ids[2])); /* the same handle needs no slot */
  CHECK(ids[2] == ids[0]);
  CHECK_OK(devrt_stream_forget(small, ids[1])); /* gives its slot back */
  CHECK_OK(devrt_stream_import(small, nat(fs[2]), &ids[1]));
  /* Destroying the runtime with imports held leaves the native streams alone. */
  devrt_block x = 0;
  CHECK_OK(devrt_block_alloc(small, 4096, ids[0], "held", &x));
  CHECK_OK(devrt_block_free(small, x));
  CHECK_OK(devrt_runtime_destroy(small));
  for (int i = 0; i < 3; i++) {
    CHECK_OK(rt->be->stream_sync(fs[i]));
    foreign_free(fs[i]);
  }
}

/* Blocks, recorded launches across an imported and a pool stream, and the queue on it. */
static devrt_status host_call(void* user) {
  atomic_fetch_add((_Atomic int*)user, 1);
  return DEVRT_OK;
}

static void test_work(void) {
  dv_stream* f = foreign_new();
  devrt_stream a = 0, b = s_get(rt);
  REQUIRE_OK(devrt_stream_import(rt, nat(f), &a));
  devrt_block x = 0, y = 0;
  REQUIRE_OK(devrt_block_alloc(rt, N * 4, a, "x", &x));
  REQUIRE_OK(devrt_block_alloc(rt, N * 4, b, "y", &y));
  CHECK_OK(k_fill(rt, &K, a, x, 42, N, 20 * MS, true)); /* slow, on the imported stream */
  CHECK_OK(k_copy(rt, &K, b, y, x, N, 0, true));        /* b waits for a: devrt knows */
  CHECK(b_wrong(rt, b, y, N, 42) == 0);
  CHECK_OK(k_fill(rt, &K, b, y, 5, N, 20 * MS, true));
  CHECK_OK(k_copy(rt, &K, a, x, y, N, 0, true)); /* and the other way round */
  CHECK(b_wrong(rt, a, x, N, 5) == 0);

  /* The queue issues a launch on it and signals. */
  devrt_semaphore* sem = NULL;
  REQUIRE_OK(devrt_semaphore_create(rt, 0, &sem));
  void* px = bptr(rt, x);
  uint32_t v = 9;
  uint64_t n = N;
  void* args[] = {&px, &v, &n};
  devrt_block_use u[] = {{x, DEVRT_ACCESS_WRITE}};
  devrt_semaphore_value sig = {sem, 1}, sig2 = {sem, 2}, w = {sem, 1};
  devrt_submission sub = {.stream = a, .signals = &sig, .nsignals = 1, .kind = DEVRT_WORK_LAUNCH};
  sub.launch = (devrt_launch_desc){
      .kernel = K.fill, .grid = {N / 256}, .block = {256}, .args = args, .uses = u, .nuses = 1};
  CHECK_OK(devrt_queue_submit(rt, &sub));
  _Atomic int calls = 0;
  devrt_submission hc = {.stream = a,
                         .waits = &w,
                         .nwaits = 1,
                         .signals = &sig2,
                         .nsignals = 1,
                         .kind = DEVRT_WORK_HOST_CALL,
                         .host = {host_call, (void*)&calls}};
  CHECK_OK(devrt_queue_submit(rt, &hc));
  CHECK_OK(devrt_semaphore_wait(sem, 2, 10000 * MS));
  CHECK(atomic_load(&calls) == 1);
  CHECK(b_wrong(rt, a, x, N, 9) == 0);
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_OK(devrt_block_free(rt, y));
  CHECK_OK(devrt_semaphore_destroy(sem));

  /* Stream-ordered frees through the runtime's stack: a free on the imported stream is reused
   * on it at once (the caching layer's per-stream lists), after the work queued before it. */
  devrt_resource* r = NULL;
  REQUIRE_OK(devrt_runtime_resource(rt, &r));
  void *p = NULL, *q = NULL;
  CHECK_OK(devrt_resource_allocate(r, 1 * MiB, a, "imported", &p));
  CHECK_OK(devrt_resource_deallocate(r, p, 1 * MiB, a));
  CHECK_OK(devrt_resource_allocate(r, 1 * MiB, a, "imported", &q));
  CHECK(!rt->cfg.cache || q == p);
  CHECK_OK(devrt_resource_deallocate(r, q, 1 * MiB, a));
  devrt_resource_figures before, after;
  CHECK_OK(devrt_resource_query(r, &before));
  CHECK_OK(devrt_stream_forget(rt, a)); /* the layers forget it: its frees are complete */
  CHECK_OK(devrt_reap_pending(rt, 0, NULL));
  CHECK_OK(devrt_resource_query(r, &after));
  CHECK(after.pending_bytes == 0 && after.live_bytes <= before.live_bytes);
  CHECK_OK(devrt_stream_release(rt, b));
  CHECK_OK(rt->be->stream_sync(f));
  foreign_free(f);
}

/* Another runtime's stream, by its devrt_stream_native handle. */
static void test_other_runtime(void) {
  devrt_runtime* other = t_runtime();
  devrt_stream theirs = s_get(other), mine = 0, dup = 0;
  void* n = NULL;
  REQUIRE_OK(devrt_stream_native(other, theirs, &n));
  CHECK_OK(devrt_stream_import(rt, n, &mine));
  CHECK(mine != theirs);
  CHECK_STATUS(devrt_stream_forget(other, mine), DEVRT_ERR_INVALID_ARGUMENT); /* wrong runtime */
  CHECK(strstr(devrt_last_error(), "another runtime") != NULL);
  CHECK_STATUS(devrt_stream_forget(rt, theirs), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(devrt_stream_import(rt, n, &dup));
  CHECK(dup == mine);
  devrt_block x = 0;
  CHECK_OK(devrt_block_alloc(rt, N * 4, mine, "x", &x));
  CHECK_OK(k_fill(rt, &K, mine, x, 3, N, 0, true));
  CHECK(b_wrong(rt, mine, x, N, 3) == 0);
  CHECK_OK(devrt_block_free(rt, x));
  CHECK_OK(devrt_stream_forget(rt, mine));
  CHECK_OK(devrt_stream_forget(rt, mine));
  CHECK_OK(devrt_stream_synchronize(other, theirs)); /* still theirs, still alive */
  CHECK_OK(devrt_stream_release(other, theirs));
  CHECK_OK(devrt_runtime_destroy(other));
}

/* ---- the torch entry points ---- */

static devrt_resource* statistics_of(devrt_runtime* r) {
  devrt_resource* x = NULL;
  REQUIRE_OK(devrt_runtime_resource(r, &x));
  while (x && strcmp(devrt_resource_name(x), "statistics")) x = devrt_resource_upstream(x);
  REQUIRE_OK(x ? DEVRT_OK : DEVRT_ERR_INVALID_STATE);
  return x;
}

static devrt_runtime* prt; /* the process-wide runtime of ordinal 0 */
static dv_stream* tstream; /* a stream the "framework" allocates on */

static void test_torch(void) {
  devrt_memory_stats st;
  devrt_resource* S = statistics_of(prt);
  void* p = devrt_torch_alloc(1 * MiB, 0, nat(tstream));
  CHECK(p != NULL);
  CHECK_OK(devrt_statistics_get(S, "torch", &st));
  CHECK(st.bytes.current >= (int64_t)MiB && st.count.current == 1);
  void* q = devrt_torch_alloc(4096, 0, NULL); /* the legacy default stream */
  CHECK(q != NULL);
  devrt_torch_free(q, 4096, 0, NULL);
  CHECK(devrt_last_error()[0] == 0);
  devrt_torch_free(p, 1 * MiB, 0, nat(tstream));
  CHECK(devrt_last_error()[0] == 0);
  CHECK_OK(devrt_statistics_get(S, "torch", &st));
  CHECK(st.bytes.current == 0 && st.count.current == 0 && st.count.total >= 2);

  CHECK(devrt_torch_alloc(0, 0, nat(tstream)) == NULL); /* empty tensors: no error */
  CHECK(devrt_last_error()[0] == 0);
  devrt_torch_free(NULL, 0, 0, nat(tstream));
  CHECK(devrt_last_error()[0] == 0);

  CHECK(devrt_torch_alloc((size_t)1 << 40, 0, nat(tstream)) == NULL); /* over the budget */
  CHECK(strstr(devrt_last_error(), "devrt_torch_alloc") != NULL);
  CHECK(strstr(devrt_last_error(), "budget") != NULL);
  CHECK(strstr(devrt_last_error(), "'torch'") != NULL);
  CHECK(devrt_torch_alloc(64, -1, nat(tstream)) == NULL);
  CHECK(strstr(devrt_last_error(), "devrt_torch_alloc") != NULL);
  CHECK(devrt_torch_alloc(64, DEVRT_MAX_ORDINALS, nat(tstream)) == NULL);
  CHECK(devrt_last_error()[0] != 0);
  CHECK(devrt_torch_alloc(64, 0, DEVRT_STREAM_PER_THREAD) == NULL);
  CHECK(strstr(devrt_last_error(), "per-thread") != NULL);
  int bogus = 0;
  devrt_torch_free(&bogus, 64, 0, nat(tstream)); /* not devrt's: refused, reported */
  CHECK(devrt_last_error()[0] != 0);

  /* torch holds one import of its stream: a user's import of the same handle shares the id, and
   * a stray forget beyond the user's own makes torch import it again. */
  devrt_stream id = 0;
  REQUIRE_OK(devrt_stream_import(prt, nat(tstream), &id));
  CHECK_OK(devrt_stream_forget(prt, id));
  CHECK_OK(devrt_stream_synchronize(prt, id)); /* torch's import keeps it */
  CHECK_OK(devrt_stream_forget(prt, id));      /* stray: the id goes stale */
  p = devrt_torch_alloc(4096, 0, nat(tstream));
  CHECK(p != NULL);
  devrt_torch_free(p, 4096, 0, nat(tstream));
  CHECK(devrt_last_error()[0] == 0);
  devrt_stream id2 = 0;
  CHECK_OK(devrt_stream_import(prt, nat(tstream), &id2));
  CHECK(id2 != id);
  CHECK_OK(devrt_stream_forget(prt, id2));
}

/* Tensor.record_stream: the free, on the allocation's stream, waits for the recorded reader's
 * work queued before it; later work on that stream (which may reuse the memory) comes after. */
static _Atomic int gate, ran;
static void wait_gate(void* u) {
  (void)u;
  while (!atomic_load(&gate)) usleep(100);
}
static void mark_ran(void* u) {
  (void)u;
  atomic_store(&ran, 1);
}

static void test_record_stream(void) {
  dv_stream* reader = foreign_on(prt);
  void* p = devrt_torch_alloc(4096, 0, nat(tstream));
  REQUIRE_OK(p ? DEVRT_OK : DEVRT_ERR_DEVICE_ALLOC_FAILED);
  REQUIRE_OK(prt->be->host_func(reader, wait_gate, NULL, 0)); /* the reader's work, held */
  devrt_torch_record_stream(p, nat(reader));
  devrt_torch_record_stream(p, nat(reader));  /* twice: one wait */
  devrt_torch_record_stream(p, nat(tstream)); /* its own stream: nothing to wait for */
  CHECK(devrt_last_error()[0] == 0);
  devrt_torch_free(p, 4096, 0, nat(tstream));
  CHECK(devrt_last_error()[0] == 0);
  REQUIRE_OK(prt->be->host_func(tstream, mark_ran, NULL, 0)); /* after the free, on its stream */
  usleep(20000);
  CHECK(!atomic_load(&ran)); /* held behind the reader */
  atomic_store(&gate, 1);
  CHECK_OK(prt->be->stream_sync(tstream));
  CHECK(atomic_load(&ran));
  /* Forgotten at the free: a second allocation's free has nothing to wait for. (Not timed with a
   * held reader: CUDA runs every stream's host functions on one thread, so a gate held on one
   * stream holds another's host function too.) */
  p = devrt_torch_alloc(4096, 0, nat(tstream));
  devrt_torch_free(p, 4096, 0, nat(tstream));
  CHECK(p != NULL && devrt_last_error()[0] == 0);
  CHECK_OK(prt->be->stream_sync(reader));
  devrt_torch_record_stream(NULL, nat(reader)); /* nothing to record */
  CHECK(devrt_last_error()[0] == 0);
}

/* Under pressure the torch entry point waits for pending frees before it refuses, as PyTorch's
 * allocator does: the stack alone refuses the same request while the frees are held back. */
static void* open_gate_later(void* u) {
  (void)u;
  usleep(30000);
  atomic_store(&gate, 1);
  return NULL;
}

static void test_torch_pressure(void) {
  devrt_resource* top = NULL;
  devrt_resource_figures f;
  devrt_stream id = 0;
  uint64_t n;
  REQUIRE_OK(devrt_runtime_resource(prt, &top));
  REQUIRE_OK(devrt_stream_import(prt, nat(tstream), &id)); /* torch's id, shared */
  void* a = devrt_torch_alloc(160 * MiB, 0, nat(tstream));
  REQUIRE_OK(a ? DEVRT_OK : DEVRT_ERR_OVER_BUDGET);
  atomic_store(&gate, 0);
  REQUIRE_OK(prt->be->host_func(tstream, wait_gate, NULL, 0));
  devrt_torch_free(a, 160 * MiB, 0, nat(tstream)); /* into the cache */
  CHECK_OK(devrt_resource_trim(top, &n));          /* then pending, behind the gate */
  CHECK_OK(devrt_resource_query(top, &f));
  CHECK(f.pending_bytes >= 160 * MiB && f.cached_bytes == 0);
  void* b = NULL;
  CHECK_STATUS(devrt_resource_allocate(top, 160 * MiB, id, "torch", &b), DEVRT_ERR_OVER_BUDGET);
  pthread_t t;
  REQUIRE_OK(pthread_create(&t, NULL, open_gate_later, NULL) ? DEVRT_ERR_OUT_OF_RESOURCES
                                                             : DEVRT_OK);
  b = devrt_torch_alloc(160 * MiB, 0, nat(tstream));
  CHECK(b != NULL && devrt_last_error()[0] == 0);
  pthread_join(t, NULL);
  devrt_torch_free(b, 160 * MiB, 0, nat(tstream));
  CHECK(devrt_last_error()[0] == 0);
  CHECK_OK(devrt_stream_forget(prt, id));
}

/* ---- threads ---- */

static dv_stream* shared[2];
static _Atomic int thread_failures;

static void* worker(void* arg) {
  dv_stream* mine = arg;
  devrt_resource* r = NULL;
  if (devrt_runtime_resource(rt, &r)) return (void*)1;
  for (int i = 0; i < ROUNDS; i++) {
    devrt_stream a = 0, b = 0, c = 0;
    void* p = NULL;
    bool ok = devrt_stream_import(rt, nat(shared[i & 1]), &a) == DEVRT_OK &&
              devrt_stream_import(rt, nat(mine), &b) == DEVRT_OK &&
              devrt_stream_import(rt, i % 3 ? nat(shared[i & 1]) : NULL, &c) == DEVRT_OK;
    ok = ok && devrt_resource_allocate(r, 4096, a, "t", &p) == DEVRT_OK &&
         devrt_resource_deallocate(r, p, 4096, a) == DEVRT_OK;
    ok = ok && devrt_resource_allocate(r, 8192, b, "t", &p) == DEVRT_OK &&
         devrt_resource_deallocate(r, p, 8192, b) == DEVRT_OK;
    ok = ok && (i % 3 == 0 || c == a); /* the same handle, the same id while imported */
    void* t = devrt_torch_alloc(256 + (size_t)i, 0, nat(shared[i & 1]));
    ok = ok && t != NULL;
    if (t) devrt_torch_free(t, 256 + (size_t)i, 0, nat(shared[i & 1]));
    t = devrt_torch_alloc(512, 0, nat(mine));
    ok = ok && t != NULL;
    if (t) devrt_torch_free(t, 512, 0, nat(mine));
    ok = ok && devrt_stream_forget(rt, c) == DEVRT_OK && devrt_stream_forget(rt, b) == DEVRT_OK &&
         devrt_stream_forget(rt, a) == DEVRT_OK;
    if (!ok) {
      fprintf(stderr, "worker round %d: %s\n", i, devrt_last_error());
      atomic_fetch_add(&thread_failures, 1);
      break;
    }
  }
  return NULL;
}

static void test_threads(void) {
  dv_stream* own[THREADS];
  pthread_t th[THREADS];
  /* made on prt's device, which outlives rt: torch keeps its imports of them in prt */
  shared[0] = foreign_on(prt), shared[1] = foreign_on(prt);
  for (int i = 0; i < THREADS; i++) own[i] = foreign_on(prt);
  for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, worker, own[i]);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  CHECK(atomic_load(&thread_failures) == 0);
  /* Every import was forgotten: a new one is the only one (one forget makes it stale). */
  devrt_stream a = 0;
  CHECK_OK(devrt_stream_import(rt, nat(shared[0]), &a));
  CHECK_OK(devrt_stream_forget(rt, a));
  CHECK_STATUS(devrt_stream_synchronize(rt, a), DEVRT_ERR_INVALID_ARGUMENT);
  for (int i = 0; i < 2; i++) CHECK_OK(rt->be->stream_sync(shared[i]));
  /* shared[] and own[] stay alive: torch's imports of them (in prt) last for the process */
  (void)own;
}

int main(void) {
  rt = t_runtime();
  k_load(rt, &K);
  test_counting();
  test_legacy();
  test_refusals();
  test_work();
  test_other_runtime();

  /* The process-wide runtime of ordinal 0, on this run's backend, with a 256 MiB budget. */
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.budget_bytes = 256 * MiB;
  REQUIRE_OK(devrt_configure(0, &cfg));
  REQUIRE_OK(devrt_runtime_get(0, &prt));
  REQUIRE_OK(strcmp(prt->be->name, rt->be->name) ? DEVRT_ERR_INVALID_STATE : DEVRT_OK);
  tstream = foreign_on(prt);
  test_torch();
  test_record_stream();
  test_torch_pressure();
  test_threads();

  REQUIRE_OK(devrt_module_unload(rt, K.mod));
  CHECK_OK(devrt_runtime_destroy(rt));
  /* The streams torch imported into prt are left to the process's end, as a framework's are. */
  return t_done();
}
