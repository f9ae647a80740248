/* test_fault_cases.c: fault injection (src/backend/fault.c) and the defects the fault sweep found,
 * one case each: a runtime uses the wrapping table only when injection was enabled before it was
 * created; DEVRT_FAULT fails the named call or is refused when malformed; a kernel whose parameter
 * sizes could not be read is refused, not remembered as unreadable; a last forget whose
 * synchronize failed keeps the import; a layout whose stream creation failed says so; the async
 * resource's granularity probe frees what it allocated; a peer_disable whose synchronize failed
 * keeps the link. Host backend. */
#include <sys/wait.h>
#include <unistd.h>
#include "backend/fault.h"
#include "launch_util.h"

static devrt_runtime* host_runtime(void) {
  devrt_config cfg;
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.backend = DEVRT_BACKEND_HOST;
  return t_runtime_cfg(&cfg);
}

/* The message names the injected fault of `op`. */
static bool names(const char* op) {
  char needle[64];
  snprintf(needle, sizeof needle, "%s: injected fault", op);
  bool ok = strstr(devrt_last_error(), needle) != NULL;
  if (!ok) fprintf(stderr, "  message \"%s\" does not name %s\n", devrt_last_error(), op);
  return ok;
}

/* In a child (DEVRT_FAULT is read once per process): runtime creation with DEVRT_FAULT=value
 * gives `want` (a refusal naming the variable and the value), and with event_record:1 the first
 * record fails. */
static void env_case(const char* value, devrt_status want) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("DEVRT_FAULT", value, 1);
    devrt_config cfg;
    devrt_runtime* rt = NULL;
    if (devrt_config_init(&cfg)) _exit(2);
    cfg.backend = DEVRT_BACKEND_HOST;
    devrt_status st = devrt_runtime_create(&cfg, &rt);
    char named[128];
    snprintf(named, sizeof named, "DEVRT_FAULT=\"%s\"", value);
    if (st != want || (st != DEVRT_OK && !strstr(devrt_last_error(), named))) _exit(3);
    if (st != DEVRT_OK) _exit(0);
    devrt_stream s = 0;
    devrt_block b = 0;
    if (devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s)) _exit(4);
    st = devrt_block_alloc(rt, 4096, s, "env", &b); /* records the allocation-ready event */
    if (!strcmp(value, "event_record:1") &&
        (st != DEVRT_ERR_BACKEND_ERROR || !names("event_record")))
      _exit(5);
    if (b && devrt_block_free(rt, b)) _exit(6);
    _exit(devrt_stream_release(rt, s) || devrt_runtime_destroy(rt) ? 7 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status))
    fprintf(stderr, "  DEVRT_FAULT=%s: child exit %d\n", value, WEXITSTATUS(status));
}

static void test_wrapper(void) {
  env_case("event_record:1", DEVRT_OK);
  env_case("event_record:1:BACKEND_ERROR", DEVRT_OK);
  env_case("count", DEVRT_OK);
  env_case("launch:0", DEVRT_ERR_INVALID_ARGUMENT);         /* N >= 1 */
  env_case("stream_destroy:1", DEVRT_ERR_INVALID_ARGUMENT); /* cannot fail */
  env_case("launch:1:OK", DEVRT_ERR_INVALID_ARGUMENT);
  env_case("no_such_op:1", DEVRT_ERR_INVALID_ARGUMENT);
  env_case("launch:1x", DEVRT_ERR_INVALID_ARGUMENT);
  /* N is decimal digits: no sign, blank, prefix or leading zero, nothing past 2^64 - 1. */
  const char* bad_n[] = {"launch:-1",  "launch:99999999999999999999",
                         "launch:010", "launch:+1",
                         "launch: 1",  "launch:1 ",
                         "launch:0x1", "launch:",
                         "launch:1:",  "",
                         " launch:1",  "launch"};
  for (size_t i = 0; i < sizeof bad_n / sizeof *bad_n; i++)
    env_case(bad_n[i], DEVRT_ERR_INVALID_ARGUMENT);
  env_case("launch:18446744073709551615", DEVRT_OK); /* the largest N: armed, never reached */

  /* Disarmed costs nothing: a runtime created before injection is enabled calls the backend's
   * own table; one created after goes through the wrapper (same name, same entries set). */
  devrt_runtime* direct = host_runtime();
  CHECK(direct->be == &dv_host_backend);
  dv_fault_enable();
  devrt_runtime* wrapped = host_runtime();
  CHECK(wrapped->be != &dv_host_backend && !strcmp(wrapped->be->name, "host"));
  CHECK(!wrapped->be->module_load_host == !dv_host_backend.module_load_host);
  devrt_runtime_info ri;
  CHECK_OK(devrt_runtime_info_get(wrapped, &ri));
  CHECK(ri.backend == DEVRT_BACKEND_HOST);
  uint64_t before = dv_fault_calls(DV_OP_stream_sync);
  devrt_stream s = s_get(wrapped);
  CHECK_OK(devrt_stream_synchronize(wrapped, s));
  CHECK(dv_fault_calls(DV_OP_stream_sync) == before + 1);
  CHECK_OK(devrt_stream_synchronize(direct, s_get(direct))); /* not counted */
  CHECK(dv_fault_calls(DV_OP_stream_sync) == before + 1);
  CHECK_STATUS(dv_fault_inject(DV_OP_stream_destroy, 1, DEVRT_OK), DEVRT_ERR_INVALID_ARGUMENT);
  CHECK_OK(dv_fault_inject(DV_OP_stream_sync, 1, DEVRT_ERR_DEVICE_LOST));
  CHECK_STATUS(devrt_stream_synchronize(wrapped, s), DEVRT_ERR_DEVICE_LOST);
  CHECK(names("stream_sync"));
  CHECK_OK(devrt_stream_synchronize(wrapped, s)); /* one call fails, the next goes through */
  CHECK_OK(devrt_stream_release(wrapped, s));
  CHECK_OK(devrt_runtime_destroy(wrapped));
  CHECK_OK(devrt_runtime_destroy(direct)); /* its stream is released with it */
}

/* A failed read of a kernel's parameter sizes fails devrt_kernel_get; a retry reads them, and a
 * parked launch of the kernel can copy its arguments. */
static void test_kernel_params(devrt_runtime* rt) {
  devrt_module* m = NULL;
  devrt_kernel* k = NULL;
  REQUIRE_OK(devrt_module_load(rt, NULL, &m));
  CHECK_OK(dv_fault_inject(DV_OP_kernel_params, 1, DEVRT_OK));
  CHECK_STATUS(devrt_kernel_get(m, "devrt_fill_u32", &k), DEVRT_ERR_BACKEND_ERROR);
  CHECK(names("kernel_params"));
  REQUIRE_OK(devrt_kernel_get(m, "devrt_fill_u32", &k));
  devrt_stream s = s_get(rt);
  devrt_block b = 0;
  devrt_semaphore* t = NULL;
  REQUIRE_OK(devrt_block_alloc(rt, 1024, s, "params", &b));
  REQUIRE_OK(devrt_semaphore_create(rt, 0, &t));
  void* p = bptr(rt, b);
  uint32_t v = 5;
  uint64_t n = 256;
  void* args[] = {&p, &v, &n};
  devrt_block_use u = {b, DEVRT_ACCESS_WRITE};
  devrt_semaphore_value w1 = {t, 1}, s2 = {t, 2};
  devrt_submission sub = {
      .stream = s,
      .waits = &w1,
      .nwaits = 1,
      .signals = &s2,
      .nsignals = 1,
      .kind = DEVRT_WORK_LAUNCH,
      .launch = {.kernel = k, .grid = {1}, .block = {256}, .args = args, .uses = &u, .nuses = 1}};
  CHECK_OK(devrt_queue_submit(rt, &sub)); /* parked: its arguments are copied */
  CHECK_OK(devrt_semaphore_signal(t, 1));
  CHECK_OK(devrt_semaphore_wait(t, 2, 10000 * MS));
  CHECK(b_wrong(rt, s, b, n, 5) == 0);
  CHECK_OK(devrt_semaphore_destroy(t));
  CHECK_OK(devrt_block_free(rt, b));
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_module_unload(rt, m));
}

/* The last forget of an import whose synchronize fails returns that failure and keeps the
 * import: the id still works and the next forget ends it. */
static void test_forget(devrt_runtime* rt) {
  devrt_stream id = 0, dead = 0;
  REQUIRE_OK(devrt_stream_import(rt, NULL, &id));
  CHECK_OK(dv_fault_inject(DV_OP_stream_sync, 1, DEVRT_OK));
  CHECK_STATUS(devrt_stream_forget(rt, id), DEVRT_ERR_BACKEND_ERROR);
  CHECK(names("stream_sync"));
  devrt_block b = 0;
  CHECK_OK(devrt_block_alloc(rt, 4096, id, "import", &b));
  CHECK_OK(devrt_block_free(rt, b));
  CHECK_OK(devrt_stream_import(rt, NULL, &dead)); /* the same import, counted once more */
  CHECK(dead == id);
  CHECK_OK(devrt_stream_forget(rt, id));
  CHECK_OK(devrt_stream_forget(rt, id));
  CHECK_STATUS(devrt_stream_forget(rt, id), DEVRT_ERR_INVALID_ARGUMENT); /* now it is gone */
}

/* A layout whose partition stream cannot be created fails with that message (the cleanup used to
 * clear it), and leaves nothing behind. */
static void test_layout(devrt_runtime* rt) {
  devrt_layout_spec spec = {.groups = 2, .streams = 2};
  devrt_layout* l = NULL;
  devrt_partition_stats ps0, ps1;
  CHECK_OK(devrt_partition_stats_get(rt, &ps0));
  CHECK_OK(dv_fault_inject(DV_OP_stream_create, 3, DEVRT_OK));
  CHECK_STATUS(devrt_layout_create(rt, &spec, &l), DEVRT_ERR_BACKEND_ERROR);
  CHECK(names("stream_create"));
  CHECK_OK(devrt_partition_stats_get(rt, &ps1));
  CHECK(ps1.layouts_live == ps0.layouts_live && l == NULL);
  REQUIRE_OK(devrt_layout_create(rt, &spec, &l)); /* the slots came back */
  CHECK_OK(devrt_layout_destroy(rt, l));
}

/* The async resource measures the pool's granularity with a few blocks; a refused free of one of
 * them is retried, so the pool gets every byte back. */
static void test_async_probe(devrt_runtime* rt) {
  devrt_pool_stats p0, p1;
  devrt_resource* a = NULL;
  CHECK_OK(devrt_pool_stats_get(rt, &p0));
  CHECK_OK(dv_fault_inject(DV_OP_pool_free, 2, DEVRT_OK));
  CHECK_OK(devrt_async_resource_create(rt, &a));
  CHECK_OK(devrt_resource_release(a));
  CHECK_OK(devrt_reap_pending(rt, DEVRT_REAP_WAIT, NULL));
  devrt_stream s = s_get(rt);
  CHECK_OK(devrt_stream_synchronize(rt, s));
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_pool_stats_get(rt, &p1));
  CHECK(p1.used_current == p0.used_current);
}

/* peer_disable whose synchronize fails keeps the link: the pair stays enabled, and disabling
 * again ends it. */
static void test_peer_disable(devrt_runtime* rt) {
  devrt_runtime* o = host_runtime();
  devrt_peer_info pi;
  REQUIRE_OK(devrt_peer_enable(rt, o));
  devrt_stream s = s_get(o); /* a stream with a backend stream to synchronize */
  CHECK_OK(devrt_stream_release(o, s));
  CHECK_OK(dv_fault_inject(DV_OP_stream_sync, 1, DEVRT_OK));
  CHECK_STATUS(devrt_peer_disable(rt, o), DEVRT_ERR_BACKEND_ERROR);
  CHECK(names("stream_sync"));
  CHECK_OK(devrt_peer_query(rt, o, &pi));
  CHECK(pi.enabled);
  CHECK_OK(devrt_peer_disable(rt, o));
  CHECK_OK(devrt_peer_query(rt, o, &pi));
  CHECK(!pi.enabled);
  CHECK_OK(devrt_runtime_destroy(o));
}

int main(void) {
  if (t_want_cuda()) return 77; /* injection wraps the host backend here */
  test_wrapper();
  devrt_runtime* rt = host_runtime(); /* through the wrapper from here on */
  test_kernel_params(rt);
  test_forget(rt);
  test_layout(rt);
  test_async_probe(rt);
  test_peer_disable(rt);
  CHECK(dv_fault_fired() == 6);
  CHECK_OK(devrt_runtime_destroy(rt));
  return t_done();
}
