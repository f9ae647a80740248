/* config.c: the runtime's configuration: devrt_config's defaults, the DEVRT_* environment read
 * strictly (devrt_config_init), and the range checks a configuration must pass before a runtime
 * is created from it. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "runtime.h"
#include "../core/parse.h"

/* A decimal setting (dv_parse_u64: digits only, no leading zero) in [lo, hi]; unset leaves *out.
 * Set, it must be a number: empty is refused as malformed. */
static devrt_status env_u64(const char* name, uint64_t lo, uint64_t hi, uint64_t* out) {
  const char* v = getenv(name);
  uint64_t x;
  if (!v) return DEVRT_OK;
  if (!dv_parse_u64(v, strlen(v), 10, &x) || x < lo || x > hi)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "devrt_config_init: %s=\"%s\" is not a decimal number in [%" PRIu64 ", %" PRIu64
                   "] (digits only: no sign, blank, prefix or leading zero)",
                   name, v, lo, hi);
  *out = x;
  return DEVRT_OK;
}

/* A variable that names one of two words: *second says whether it named the second; unset leaves
 * it (empty is neither word). */
static devrt_status env_pick(const char* name, const char* first, const char* second,
                             bool* second_out) {
  const char* v = getenv(name);
  if (!v) return DEVRT_OK;
  if (strcmp(v, first) && strcmp(v, second))
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "devrt_config_init: %s=\"%s\" is not %s or %s", name,
                   v, first, second);
  *second_out = !strcmp(v, second);
  return DEVRT_OK;
}

devrt_status devrt_config_init(devrt_config* cfg) {
  dv_error_clear(); /* a public call's entry: see error.h */
  DV_ARG_CHECK(cfg, "devrt_config_init", "cfg is NULL");
  memset(cfg, 0, sizeof *cfg);
  cfg->backend = DEVRT_BACKEND_AUTO;
  cfg->stream_pool_size = 16;
  cfg->pool_release_threshold = DEVRT_RELEASE_KEEP_ALL;
  cfg->host_workers = 8;
  cfg->host_devices = 1;
  cfg->budget_percent = 100;
  cfg->cache = true;
  cfg->wait_spin_ns = 20000;
  cfg->partition_streams = 64;
  const char* b = getenv("DEVRT_BACKEND");
  if (b) {
    if (!strcmp(b, "auto"))
      cfg->backend = DEVRT_BACKEND_AUTO;
    else if (!strcmp(b, "cuda"))
      cfg->backend = DEVRT_BACKEND_CUDA;
    else if (!strcmp(b, "host"))
      cfg->backend = DEVRT_BACKEND_HOST;
    else
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                     "devrt_config_init: DEVRT_BACKEND=\"%s\" is not auto, cuda or host", b);
  }
  uint64_t v = cfg->stream_pool_size;
  DV_CHECK(env_u64("DEVRT_STREAMS", 1, DEVRT_MAX_STREAMS, &v));
  cfg->stream_pool_size = (unsigned)v;
  DV_CHECK(env_u64("DEVRT_POOL_RELEASE", 0, UINT64_MAX, &cfg->pool_release_threshold));
  v = cfg->partition_streams;
  DV_CHECK(env_u64("DEVRT_PARTITION_STREAMS", 0, DEVRT_MAX_STREAMS - 1, &v));
  cfg->partition_streams = (unsigned)v;
  v = cfg->host_workers;
  DV_CHECK(env_u64("DEVRT_HOST_WORKERS", 1, 1024, &v));
  cfg->host_workers = (unsigned)v;
  v = cfg->host_devices;
  DV_CHECK(env_u64("DEVRT_HOST_DEVICES", 1, DEVRT_MAX_ORDINALS, &v));
  cfg->host_devices = (unsigned)v;
  const char* bud = getenv("DEVRT_BUDGET");
  if (bud) {
    size_t len = strlen(bud);
    bool pct = len && bud[len - 1] == '%';
    uint64_t x = 0;
    if (!dv_parse_u64(bud, len - pct, 10, &x) || !x || (pct && x > 100))
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                     "devrt_config_init: DEVRT_BUDGET=\"%s\" is neither bytes (> 0) nor a "
                     "percentage (1%%..100%%), in decimal digits (no sign, blank or leading zero)",
                     bud);
    cfg->budget_bytes = pct ? 0 : x;
    if (pct) cfg->budget_percent = (unsigned)x;
  }
  DV_CHECK(env_pick("DEVRT_CACHE", "0", "1", &cfg->cache));
  DV_CHECK(env_u64("DEVRT_CACHE_MAX_CLASS", 0, DEVRT_CACHING_MAX_CLASS, &cfg->cache_max_class));
  DV_CHECK(env_pick("DEVRT_ARENA", "0", "1", &cfg->arena));
  const char* log = getenv("DEVRT_LOG");
  cfg->log_path = log && *log ? log : NULL;
  DV_CHECK(env_pick("DEVRT_LOG_FORMAT", "csv", "jsonl", &cfg->log_jsonl));
  DV_CHECK(env_pick("DEVRT_STATS_PEAK", "exact", "bound", &cfg->stats_peak_bound));
  DV_CHECK(env_u64("DEVRT_WAIT_SPIN_NS", 0, 1000000000, &cfg->wait_spin_ns));
  bool hostfn = cfg->completion == 1;
  DV_CHECK(env_pick("DEVRT_COMPLETION", "sync", "hostfn", &hostfn));
  cfg->completion = hostfn;
  const char* p = getenv("DEVRT_STREAM_PRIORITY");
  if (p) {
    bool neg = *p == '-';
    uint64_t x = 0;
    if (!dv_parse_u64(p + neg, strlen(p + neg), 10, &x) || x > 64)
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                     "devrt_config_init: DEVRT_STREAM_PRIORITY=\"%s\" is not an integer in "
                     "[-64, 64] (an optional '-', then decimal digits without a leading zero)",
                     p);
    cfg->stream_priority = neg ? -(int)x : (int)x;
  }
  if (cfg->stream_pool_size + cfg->partition_streams > DEVRT_MAX_STREAMS)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "devrt_config_init: DEVRT_STREAMS (%u) + DEVRT_PARTITION_STREAMS (%u) is above "
                   "%d: the pool and the partitions' slots share the stream table",
                   cfg->stream_pool_size, cfg->partition_streams, DEVRT_MAX_STREAMS);
  return DEVRT_OK;
}

devrt_status dv_config_check(const devrt_config* c, const char* call) {
  DV_ARG_CHECK(c, "devrt_config", "%s: cfg is NULL", call);
  if (c->ordinal < 0 || c->ordinal >= DEVRT_MAX_ORDINALS ||
      (unsigned)c->backend > DEVRT_BACKEND_HOST || c->stream_pool_size < 1 ||
      c->stream_pool_size > DEVRT_MAX_STREAMS || c->host_workers < 1 || c->host_workers > 1024 ||
      c->host_devices < 1 || c->host_devices > DEVRT_MAX_ORDINALS ||
      (!c->budget_bytes && (c->budget_percent < 1 || c->budget_percent > 100)) ||
      c->completion < 0 || c->completion > 1 || c->wait_spin_ns > 1000000000 ||
      c->cache_max_class > DEVRT_CACHING_MAX_CLASS ||
      (uint64_t)c->stream_pool_size + c->partition_streams > DEVRT_MAX_STREAMS)
    return dv_fail(
        DEVRT_ERR_INVALID_ARGUMENT,
        "%s: config out of range (ordinal %d in [0,%d), backend %d, stream_pool_size %u in [1,%d], "
        "host_workers %u in [1,1024], host_devices %u in [1,%d], budget_percent %u in [1,100] "
        "without budget_bytes, "
        "completion %d in [0,1], wait_spin_ns %" PRIu64
        " <= 1e9, stream_pool_size + partition_streams %u <= %d, cache_max_class %" PRIu64
        " <= 64 MiB)",
        call, c->ordinal, DEVRT_MAX_ORDINALS, (int)c->backend, c->stream_pool_size,
        DEVRT_MAX_STREAMS, c->host_workers, c->host_devices, DEVRT_MAX_ORDINALS, c->budget_percent,
        c->completion, c->wait_spin_ns, c->partition_streams, DEVRT_MAX_STREAMS,
        c->cache_max_class);
  return DEVRT_OK;
}
