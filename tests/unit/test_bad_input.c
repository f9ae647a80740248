/* test_bad_input.c: every public call refuses bad input (NULL, zero size, unknown flags, foreign
 * or dead handles, out-of-range values) with INVALID_ARGUMENT and a message naming the call. */
#include "core/parse.h"
#include "devrt/torch.h"
#include "test.h"

#define BAD(expr, call)                              \
  do {                                               \
    CHECK_STATUS(expr, DEVRT_ERR_INVALID_ARGUMENT);  \
    CHECK(strstr(devrt_last_error(), call) != NULL); \
  } while (0)

static void noop(void* p) { (void)p; }

int main(void) {
  devrt_runtime* rt = t_runtime();
  devrt_runtime* other = t_runtime();
  devrt_stream s, theirs;
  REQUIRE_OK(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, &s));
  REQUIRE_OK(devrt_stream_acquire(other, DEVRT_ACQUIRE_FAIL, &theirs));
  devrt_event *ev, *their_ev;
  REQUIRE_OK(devrt_event_create(rt, 0, &ev));
  REQUIRE_OK(devrt_event_create(other, 0, &their_ev));
  devrt_config cfg;
  void* p = NULL;
  bool done;
  devrt_runtime_info ri;
  devrt_device_info di;
  devrt_split_result sr;
  devrt_pool_stats ps;

  /* The one number reader (settings, the CLI's options, replayed logs): its edges. */
  const struct {
    const char* s;
    unsigned base;
    bool ok;
    uint64_t v;
  } num[] = {{"0", 10, true, 0},
             {"18446744073709551615", 10, true, UINT64_MAX},
             {"18446744073709551616", 10, false, 0},
             {"00", 10, false, 0},
             {"9a", 10, false, 0},
             {"00fF", 16, true, 255},
             {"ffffffffffffffff", 16, true, UINT64_MAX},
             {"10000000000000000", 16, false, 0},
             {"g", 16, false, 0},
             {"", 16, false, 0}};
  for (size_t i = 0; i < sizeof num / sizeof *num; i++) {
    uint64_t v = 7;
    CHECK(dv_parse_u64(num[i].s, strlen(num[i].s), num[i].base, &v) == num[i].ok);
    CHECK(v == (num[i].ok ? num[i].v : 7));
  }
  BAD(devrt_config_init(NULL), "devrt_config_init");
  setenv("DEVRT_STREAMS", "lots", 1);
  BAD(devrt_config_init(&cfg), "DEVRT_STREAMS");
  setenv("DEVRT_STREAMS", "0", 1);
  BAD(devrt_config_init(&cfg), "DEVRT_STREAMS");
  setenv("DEVRT_STREAMS", "4095", 1); /* in range alone, but the partitions' 64 slots don't fit */
  BAD(devrt_config_init(&cfg), "DEVRT_PARTITION_STREAMS (64)");
  unsetenv("DEVRT_STREAMS");
  const char* budgets[] = {"99999999999999999999999",
                           "18446744073709551616",
                           "-1",
                           "0",
                           "101%",
                           "99999999999999999999999%",
                           "12x"};
  for (size_t i = 0; i < sizeof budgets / sizeof *budgets; i++) { /* overflow is malformed too */
    setenv("DEVRT_BUDGET", budgets[i], 1);
    BAD(devrt_config_init(&cfg), "DEVRT_BUDGET");
  }
  setenv("DEVRT_BUDGET", "18446744073709551615", 1); /* 2^64 - 1 itself is a number */
  CHECK_OK(devrt_config_init(&cfg));
  CHECK(cfg.budget_bytes == UINT64_MAX);
  unsetenv("DEVRT_BUDGET");
  setenv("DEVRT_STREAM_PRIORITY", "99999999999999999999999", 1);
  BAD(devrt_config_init(&cfg), "DEVRT_STREAM_PRIORITY");
  unsetenv("DEVRT_STREAM_PRIORITY");
  setenv("DEVRT_BACKEND", "gpu", 1);
  BAD(devrt_config_init(&cfg), "DEVRT_BACKEND");
  unsetenv("DEVRT_BACKEND");
  /* Numeric settings are decimal digits only: no sign, blank, prefix, suffix or leading zero
   * ("010" was octal 8), not empty, not past 2^64 - 1; the message names variable and value. */
  const char* numeric[] = {"DEVRT_STREAMS",         "DEVRT_POOL_RELEASE", "DEVRT_PARTITION_STREAMS",
                           "DEVRT_HOST_WORKERS",    "DEVRT_HOST_DEVICES", "DEVRT_BUDGET",
                           "DEVRT_CACHE_MAX_CLASS", "DEVRT_WAIT_SPIN_NS", "DEVRT_STREAM_PRIORITY"};
  const char* malformed[] = {"010", "+8", " 8", "0x8", "8 ",  "",    " -1",
                             "-1",  "08", "8x", "--8", "-08", "- 8", "99999999999999999999"};
  char named[96];
  for (size_t v = 0; v < sizeof numeric / sizeof *numeric; v++) {
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++) {
      bool signed_ok = v == 8 && !strcmp(malformed[i], "-1"); /* a priority may be negative */
      setenv(numeric[v], malformed[i], 1);
      snprintf(named, sizeof named, "%s=\"%s\"", numeric[v], malformed[i]);
      if (signed_ok)
        CHECK_OK(devrt_config_init(&cfg));
      else
        BAD(devrt_config_init(&cfg), named);
    }
    setenv(numeric[v], "8", 1);
    CHECK_OK(devrt_config_init(&cfg));
    CHECK(!devrt_last_error()[0]); /* the refusals' messages do not outlive them */
  }
  CHECK(cfg.stream_pool_size == 8 && cfg.pool_release_threshold == 8 &&
        cfg.partition_streams == 8 && cfg.host_workers == 8 && cfg.host_devices == 8 &&
        cfg.budget_bytes == 8 && cfg.cache_max_class == 8 && cfg.wait_spin_ns == 8 &&
        cfg.stream_priority == 8);
  for (size_t v = 0; v < sizeof numeric / sizeof *numeric; v++) unsetenv(numeric[v]);
  const char* pct[] = {"8 %", "08%", "+8%", "%", "-8%", "8%%", " 8%", "0%"};
  for (size_t i = 0; i < sizeof pct / sizeof *pct; i++) {
    setenv("DEVRT_BUDGET", pct[i], 1);
    snprintf(named, sizeof named, "DEVRT_BUDGET=\"%s\"", pct[i]);
    BAD(devrt_config_init(&cfg), named);
  }
  setenv("DEVRT_BUDGET", "8%", 1);
  setenv("DEVRT_STREAM_PRIORITY", "-8", 1);
  CHECK_OK(devrt_config_init(&cfg));
  CHECK(cfg.budget_percent == 8 && cfg.budget_bytes == 0 && cfg.stream_priority == -8);
  unsetenv("DEVRT_BUDGET");
  unsetenv("DEVRT_STREAM_PRIORITY");
  /* Set to nothing, a word setting is neither of its words. */
  const char* words[] = {"DEVRT_BACKEND", "DEVRT_CACHE", "DEVRT_ARENA", "DEVRT_LOG_FORMAT"};
  for (size_t v = 0; v < sizeof words / sizeof *words; v++) {
    setenv(words[v], "", 1);
    snprintf(named, sizeof named, "%s=\"\"", words[v]);
    BAD(devrt_config_init(&cfg), named);
    unsetenv(words[v]);
  }
  setenv("DEVRT_CACHE_MAX_CLASS", "67108865", 1); /* past the largest class, 64 MiB */
  BAD(devrt_config_init(&cfg), "DEVRT_CACHE_MAX_CLASS");
  setenv("DEVRT_CACHE_MAX_CLASS", "1M", 1);
  BAD(devrt_config_init(&cfg), "DEVRT_CACHE_MAX_CLASS");
  setenv("DEVRT_CACHE_MAX_CLASS", "1048576", 1);
  CHECK_OK(devrt_config_init(&cfg));
  CHECK(cfg.cache_max_class == 1 << 20);
  unsetenv("DEVRT_CACHE_MAX_CLASS");
  REQUIRE_OK(devrt_config_init(&cfg));
  CHECK(cfg.cache_max_class == 0);
  cfg.cache_max_class = 1ull << 40;
  BAD(devrt_runtime_create(&cfg, &other), "cache_max_class");
  REQUIRE_OK(devrt_config_init(&cfg));
  BAD(devrt_configure(-1, &cfg), "devrt_configure");
  BAD(devrt_configure(DEVRT_MAX_ORDINALS, &cfg), "devrt_configure");
  BAD(devrt_configure(0, NULL), "devrt_configure");
  cfg.stream_pool_size = 0;
  BAD(devrt_configure(0, &cfg), "devrt_configure");
  BAD(devrt_runtime_create(&cfg, &other), "devrt_runtime_create");
  REQUIRE_OK(devrt_config_init(&cfg));
  cfg.backend = (devrt_backend_kind)9;
  BAD(devrt_runtime_create(&cfg, &other), "devrt_runtime_create");
  cfg.backend = DEVRT_BACKEND_HOST;
  cfg.stream_priority = 50;
  BAD(devrt_runtime_create(&cfg, &other), "stream_priority");
  BAD(devrt_runtime_create(NULL, &other), "devrt_runtime_create");
  BAD(devrt_runtime_get(0, NULL), "devrt_runtime_get");
  BAD(devrt_runtime_destroy(NULL), "devrt_runtime_destroy");
  BAD(devrt_runtime_info_get(NULL, &ri), "devrt_runtime_info_get");
  BAD(devrt_runtime_info_get(rt, NULL), "devrt_runtime_info_get");
  BAD(devrt_device_info_get(NULL, &di), "devrt_device_info_get");
  BAD(devrt_device_info_get(rt, NULL), "devrt_device_info_get");
  BAD(devrt_device_split_query(NULL, 8, 0, &sr), "devrt_device_split_query");
  BAD(devrt_device_split_query(rt, 8, 0, NULL), "devrt_device_split_query");
  BAD(devrt_device_split_query(rt, 8, 0x80, &sr), "devrt_device_split_query");
  BAD(devrt_device_split_query(rt, 100000, 0, &sr), "devrt_device_split_query");

  BAD(devrt_stream_acquire(NULL, DEVRT_ACQUIRE_FAIL, &s), "devrt_stream_acquire");
  BAD(devrt_stream_acquire(rt, DEVRT_ACQUIRE_FAIL, NULL), "devrt_stream_acquire");
  BAD(devrt_stream_release(NULL, s), "devrt_stream_release");
  BAD(devrt_stream_release(rt, theirs), "devrt_stream_release");
  BAD(devrt_stream_synchronize(rt, 0), "devrt_stream_synchronize");
  BAD(devrt_stream_native(rt, s, NULL), "devrt_stream_native");
  BAD(devrt_stream_native(rt, theirs, &p), "devrt_stream_native");
  BAD(devrt_stream_host_func(rt, s, NULL, NULL), "devrt_stream_host_func");
  BAD(devrt_stream_host_func(rt, theirs, noop, NULL), "devrt_stream_host_func");

  BAD(devrt_event_create(NULL, 0, &ev), "devrt_event_create");
  BAD(devrt_event_create(rt, 0, NULL), "devrt_event_create");
  BAD(devrt_event_create(rt, 0x100, &ev), "devrt_event_create");
  BAD(devrt_event_record(rt, NULL, s), "devrt_event_record");
  BAD(devrt_event_record(rt, their_ev, s), "devrt_event_record");
  BAD(devrt_event_record(rt, ev, theirs), "devrt_event_record");
  BAD(devrt_stream_wait_event(rt, theirs, ev), "devrt_stream_wait_event");
  BAD(devrt_stream_wait_event(rt, s, their_ev), "devrt_stream_wait_event");
  BAD(devrt_event_query(rt, ev, NULL), "devrt_event_query");
  BAD(devrt_event_query(rt, their_ev, &done), "devrt_event_query");
  BAD(devrt_event_synchronize(rt, NULL), "devrt_event_synchronize");
  BAD(devrt_event_destroy(rt, their_ev), "devrt_event_destroy");

  BAD(devrt_pool_alloc(rt, 0, s, &p), "devrt_pool_alloc");
  BAD(devrt_pool_alloc(rt, 64, s, NULL), "devrt_pool_alloc");
  BAD(devrt_pool_alloc(rt, 64, theirs, &p), "devrt_pool_alloc");
  BAD(devrt_pool_alloc(NULL, 64, s, &p), "devrt_pool_alloc");
  BAD(devrt_pool_free(rt, NULL, s), "devrt_pool_free");
  BAD(devrt_pool_stats_get(rt, NULL), "devrt_pool_stats_get");
  BAD(devrt_pool_stats_get(NULL, &ps), "devrt_pool_stats_get");
  BAD(devrt_pool_trim(NULL, 0), "devrt_pool_trim");
  BAD(devrt_pool_reset_high(NULL), "devrt_pool_reset_high");
  BAD(devrt_mem_alloc(rt, 0, &p), "devrt_mem_alloc");
  BAD(devrt_mem_alloc(rt, 64, NULL), "devrt_mem_alloc");
  BAD(devrt_mem_free(rt, NULL), "devrt_mem_free");
  BAD(devrt_memset_async(rt, NULL, 0, 8, s), "devrt_memset_async");
  BAD(devrt_memset_async(rt, &p, 0, 0, s), "devrt_memset_async");
  BAD(devrt_memcpy_async(rt, NULL, &p, 8, s), "devrt_memcpy_async");
  BAD(devrt_memcpy_async(rt, &p, &p, 0, s), "devrt_memcpy_async");
  BAD(devrt_memcpy_async(rt, &p, &p, 8, theirs), "devrt_memcpy_async");

  /* Foreign streams and the torch entry points. */
  devrt_stream imp = 0, own = 0;
  void *native = NULL, *their_native = NULL;
  REQUIRE_OK(devrt_stream_native(rt, s, &native));
  REQUIRE_OK(devrt_stream_native(other, theirs, &their_native));
  REQUIRE_OK(dv_internal_stream(rt, &own));
  BAD(devrt_stream_import(NULL, their_native, &imp), "devrt_stream_import");
  BAD(devrt_stream_import(rt, their_native, NULL), "devrt_stream_import");
  BAD(devrt_stream_import(rt, native, &imp), "devrt_stream_import"); /* devrt's own stream */
  CHECK_STATUS(devrt_stream_import(rt, DEVRT_STREAM_PER_THREAD, &imp), DEVRT_ERR_UNSUPPORTED);
  CHECK(strstr(devrt_last_error(), "devrt_stream_import") != NULL);
  if (!t_is_cuda(rt)) { /* the host backend tells a stream from other memory */
    void* junk = calloc(1, 4096);
    BAD(devrt_stream_import(rt, junk, &imp), "devrt_stream_import");
    free(junk);
  }
  BAD(devrt_stream_forget(NULL, s), "devrt_stream_forget");
  BAD(devrt_stream_forget(rt, 0), "devrt_stream_forget");
  BAD(devrt_stream_forget(rt, s + 1), "devrt_stream_forget"); /* forged: another lease */
  BAD(devrt_stream_forget(rt, (devrt_stream)0x123456789abcdefull), "devrt_stream_forget");
  BAD(devrt_stream_forget(rt, s), "devrt_stream_forget");      /* a pool stream: release it */
  BAD(devrt_stream_forget(rt, own), "devrt_stream_forget");    /* the runtime's own */
  BAD(devrt_stream_forget(rt, theirs), "devrt_stream_forget"); /* another runtime's */
  REQUIRE_OK(devrt_stream_import(rt, their_native, &imp));
  BAD(devrt_stream_forget(other, imp), "devrt_stream_forget"); /* the wrong runtime */
  BAD(devrt_stream_release(rt, imp), "devrt_stream_release");  /* imported: forget it */
  CHECK_OK(devrt_stream_forget(rt, imp));
  BAD(devrt_stream_forget(rt, imp), "devrt_stream_forget"); /* forgotten as often as imported */
  BAD(devrt_stream_synchronize(rt, imp), "devrt_stream_synchronize"); /* stale */
  CHECK(devrt_torch_alloc(64, -1, NULL) == NULL);
  CHECK(strstr(devrt_last_error(), "devrt_torch_alloc") != NULL);
  CHECK(devrt_torch_alloc(64, DEVRT_MAX_ORDINALS, NULL) == NULL);
  CHECK(strstr(devrt_last_error(), "devrt_torch_alloc") != NULL);
  CHECK(devrt_torch_alloc(64, 0, DEVRT_STREAM_PER_THREAD) == NULL);
  CHECK(strstr(devrt_last_error(), "devrt_torch_alloc") != NULL);
  devrt_torch_free(&imp, 64, -1, NULL);
  CHECK(strstr(devrt_last_error(), "devrt_torch_free") != NULL);
  devrt_torch_free(&imp, 64, 0, NULL); /* not devrt's memory */
  CHECK(strstr(devrt_last_error(), "devrt_torch_free") != NULL);

  CHECK_OK(devrt_event_destroy(rt, ev));
  CHECK_OK(devrt_stream_release(rt, s));
  CHECK_OK(devrt_runtime_destroy(rt));
  CHECK_OK(devrt_runtime_destroy(other)); /* frees their_ev and theirs, which the test left held */
  return t_done();
}
