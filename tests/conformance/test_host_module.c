/* test_host_module.c: devrt_module_load_host (launch.h): a program's own host kernels launch as
 * recorded launches and as queued ones (parked, their arguments copied at the declared sizes),
 * see the grid as CUDA would, survive the caller's table going away; every bad input is refused
 * with INVALID_ARGUMENT and a message; a cuda runtime refuses with UNSUPPORTED. */
#include "test.h"

/* p[i] = p[i] * mul + add for the block's grid-stride share of n elements. */
static void axpb(const devrt_host_grid* g, void** args) {
  uint32_t *p, mul, add;
  uint64_t n;
  memcpy(&p, args[0], sizeof p), memcpy(&mul, args[1], 4), memcpy(&add, args[2], 4);
  memcpy(&n, args[3], 8);
  for (uint64_t t = 0; t < g->block_dim.x; t++)
    for (uint64_t i = (uint64_t)g->block_idx.x * g->block_dim.x + t; i < n;
         i += (uint64_t)g->grid_dim.x * g->block_dim.x)
      p[i] = p[i] * mul + add;
}

/* out[block] = the block's linear index and grid size, as the kernel saw them. */
static void where(const devrt_host_grid* g, void** args) {
  uint32_t* out;
  memcpy(&out, args[0], sizeof out);
  uint32_t b = (g->block_idx.z * g->grid_dim.y + g->block_idx.y) * g->grid_dim.x + g->block_idx.x;
  out[2 * b] = b, out[2 * b + 1] = g->grid_dim.x * g->grid_dim.y * g->grid_dim.z;
}

static void noop(const devrt_host_grid* g, void** args) { (void)g, (void)args; }

enum { N = 1000 };

#define BAD(expr)                                                        \
  do {                                                                   \
    CHECK_STATUS(expr, DEVRT_ERR_INVALID_ARGUMENT);                      \
    CHECK(strstr(devrt_last_error(), "devrt_module_load_host") != NULL); \
  } while (0)

static void bad_inputs(devrt_runtime* rt) {
  devrt_module* m = NULL;
  devrt_host_kernel ok = {"k", noop, 1, {8}}, t[2];
  BAD(devrt_module_load_host(NULL, &ok, 1, &m));
  BAD(devrt_module_load_host(rt, NULL, 1, &m));
  BAD(devrt_module_load_host(rt, &ok, 1, NULL));
  BAD(devrt_module_load_host(rt, &ok, 0, &m));
  BAD(devrt_module_load_host(rt, &ok, DEVRT_HOST_MODULE_MAX_KERNELS + 1, &m));
  t[0] = ok, t[0].name = NULL;
  BAD(devrt_module_load_host(rt, t, 1, &m));
  t[0] = ok, t[0].name = "";
  BAD(devrt_module_load_host(rt, t, 1, &m));
  t[0] = ok, t[0].fn = NULL;
  BAD(devrt_module_load_host(rt, t, 1, &m));
  CHECK(strstr(devrt_last_error(), "no function") != NULL);
  t[0] = ok, t[0].nargs = DEVRT_HOST_KERNEL_MAX_ARGS + 1;
  BAD(devrt_module_load_host(rt, t, 1, &m));
  t[0] = ok, t[0].arg_size[0] = 0;
  BAD(devrt_module_load_host(rt, t, 1, &m));
  t[0] = ok, t[0].arg_size[0] = 257;
  BAD(devrt_module_load_host(rt, t, 1, &m));
  t[0] = ok, t[1] = ok; /* one name twice */
  BAD(devrt_module_load_host(rt, t, 2, &m));
  CHECK(strstr(devrt_last_error(), "entry 1 (k)") != NULL);
  CHECK(m == NULL); /* nothing was made */
}

int main(void) {
  devrt_runtime* rt = t_runtime();
  bad_inputs(rt);
  devrt_host_kernel table[] = {{"axpb", axpb, 4, {8, 4, 4, 8}}, {"where", where, 1, {8}}};
  devrt_module* m = NULL;
  if (t_is_cuda(rt)) { /* host functions do not run on a GPU */
    CHECK_STATUS(devrt_module_load_host(rt, table, 2, &m), DEVRT_ERR_UNSUPPORTED);
    CHECK(strstr(devrt_last_error(), "devrt_module_load") != NULL);
    CHECK_OK(devrt_runtime_destroy(rt));
    return t_done();
  }
  char name[] = "axpb"; /* the table and its names are copied: the caller's may go at once */
  table[0].name = name;
  REQUIRE_OK(devrt_module_load_host(rt, table, 2, &m));
  name[0] = 'X', table[0].fn = NULL, table[1].nargs = 7;
  devrt_kernel *k_axpb, *k_where, *k;
  REQUIRE_OK(devrt_kernel_get(m, "axpb", &k_axpb));
  REQUIRE_OK(devrt_kernel_get(m, "where", &k_where));
  CHECK_STATUS(devrt_kernel_get(m, "Xxpb", &k), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(devrt_kernel_get(m, "devrt_fill_u32", &k), DEVRT_ERR_INVALID_ARGUMENT);

  devrt_stream s;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  devrt_block b, w;
  REQUIRE_OK(devrt_block_alloc(rt, N * 4, s, "host_module", &b));
  REQUIRE_OK(devrt_block_alloc(rt, 2 * 4 * 24, s, "host_module", &w));
  uint32_t *p, *pw;
  REQUIRE_OK(devrt_block_ptr(rt, b, (void**)&p));
  REQUIRE_OK(devrt_block_ptr(rt, w, (void**)&pw));
  CHECK_OK(devrt_memset_async(rt, p, 0, N * 4, s));

  /* A recorded launch: p = p * 1 + 7 over 3 blocks of 64 "threads". */
  uint32_t mul = 1, add = 7;
  uint64_t n = N;
  devrt_block_use rw = {b, DEVRT_ACCESS_READ_WRITE}, ww = {w, DEVRT_ACCESS_WRITE};
  devrt_launch_desc d = {.stream = s,
                         .kernel = k_axpb,
                         .grid = {3},
                         .block = {64},
                         .args = (void*[]){&p, &mul, &add, &n},
                         .uses = &rw,
                         .nuses = 1};
  CHECK_OK(devrt_launch(rt, &d));
  devrt_launch_desc dw = {.stream = s,
                          .kernel = k_where,
                          .grid = {2, 3, 4},
                          .block = {1},
                          .args = (void*[]){&pw},
                          .uses = &ww,
                          .nuses = 1};
  CHECK_OK(devrt_launch(rt, &dw));

  /* A queued launch parked behind a host signal: its arguments are copied at submission, so
   * changing them afterwards changes nothing: p = p * 3 + 1. */
  devrt_semaphore* sem;
  REQUIRE_OK(devrt_semaphore_create(rt, 0, &sem));
  mul = 3, add = 1;
  devrt_submission sub = {.stream = s,
                          .waits = &(devrt_semaphore_value){sem, 1},
                          .nwaits = 1,
                          .signals = &(devrt_semaphore_value){sem, 2},
                          .nsignals = 1,
                          .kind = DEVRT_WORK_LAUNCH,
                          .launch = d};
  CHECK_OK(devrt_queue_submit(rt, &sub));
  mul = 1000, add = 1000;
  CHECK_OK(devrt_semaphore_signal(sem, 1));
  CHECK_OK(devrt_semaphore_wait(sem, 2, DEVRT_TIMEOUT_INFINITE));
  CHECK_OK(devrt_stream_synchronize(rt, s));

  uint64_t bad = 0;
  for (unsigned i = 0; i < N; i++) bad += p[i] != 22;
  CHECK(bad == 0);
  for (uint32_t i = 0; i < 24; i++) CHECK(pw[2 * i] == i && pw[2 * i + 1] == 24);
  devrt_queue_stats qs;
  CHECK_OK(devrt_queue_stats_get(rt, &qs));
  CHECK(qs.parked == 1 && qs.failed == 0);

  CHECK_OK(devrt_semaphore_destroy(sem));
  CHECK_OK(devrt_block_free(rt, b));
  CHECK_OK(devrt_block_free(rt, w));
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_module_unload(rt, m));
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
