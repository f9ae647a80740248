/* runtime.c: backend choice and the runtimes, each composed from the layers below: built
 * bottom-up (streams, blocks, partitions, the queue; the memory stack on first use), ended
 * top-down; one process-wide runtime per ordinal created on first use, plus owned runtimes for
 * embedding. */
#include "runtime.h"
#include "../backend/fault.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEVRT_VERSION_STRING "0.1.0"

const char* devrt_version(void) { return DEVRT_VERSION_STRING; }

int devrt_built_with_cuda(void) {
#ifdef DEVRT_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

/* ---- backend choice ---- */

static devrt_status choose_backend(const devrt_config* cfg, const dv_backend** be, char* reason,
                                   size_t n) {
  if (cfg->backend == DEVRT_BACKEND_HOST) {
    *be = &dv_host_backend;
    snprintf(reason, n, "host: requested by configuration");
    return DEVRT_OK;
  }
#ifdef DEVRT_HAVE_CUDA
  int count = 0;
  devrt_status s = dv_cuda_backend.device_count(&count);
  if (s == DEVRT_OK && cfg->ordinal < count) {
    *be = &dv_cuda_backend;
    snprintf(reason, n, "cuda: %s, %d CUDA device(s) present",
             cfg->backend == DEVRT_BACKEND_CUDA ? "requested" : "auto found a driver", count);
    return DEVRT_OK;
  }
  if (s == DEVRT_OK)
    s = dv_fail(DEVRT_ERR_NO_DEVICE, "cuda: no CUDA device at ordinal %d (%d present)",
                cfg->ordinal, count);
  if (cfg->backend == DEVRT_BACKEND_CUDA) return s;
  *be = &dv_host_backend;
  snprintf(reason, n, "host: auto found no usable cuda device (%s: %s)", devrt_status_name(s),
           devrt_last_error());
  return DEVRT_OK;
#else
  if (cfg->backend == DEVRT_BACKEND_CUDA)
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   "cuda backend requested, but devrt was built without the CUDA toolkit");
  *be = &dv_host_backend;
  snprintf(reason, n, "host: devrt was built without the CUDA toolkit");
  return DEVRT_OK;
#endif
}

/* ---- runtimes ---- */

static _Atomic uint64_t next_serial = 1;

static devrt_status runtime_new(const devrt_config* cfg, bool owned, devrt_runtime** out) {
  const dv_backend* be = NULL;
  char reason[256];
  DV_CHECK(choose_backend(cfg, &be, reason, sizeof reason));
  DV_CHECK(dv_fault_select(&be)); /* the fault-injecting wrapper, when enabled (tests) */
  uint64_t serial = atomic_fetch_add_explicit(&next_serial, 1, memory_order_relaxed); /* unique */
  if (serial >= (1u << 20))
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                   "devrt_runtime: more than 2^20 runtimes created in this process");
  devrt_runtime* rt = dv_zalloc_lines(sizeof *rt);
  if (!rt) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_runtime: out of host memory");
  rt->be = be;
  rt->cfg = *cfg;
  rt->serial = serial;
  rt->owned = owned;
  memcpy(rt->reason, reason, sizeof reason);
  rt->stream_retired = dv_resources_stream_retired; /* the timeline's hooks (rt.h) */
  rt->acquire = dv_default_acquire;
  devrt_status s = be->device_open(cfg, &rt->dev);
  if (s == DEVRT_OK) s = be->device_info(rt->dev, &rt->info);
  if (s == DEVRT_OK && (cfg->stream_priority > rt->info.priority_least ||
                        cfg->stream_priority < rt->info.priority_greatest))
    s = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                "devrt_runtime: stream_priority %d outside the device's range [%d, %d]",
                cfg->stream_priority, rt->info.priority_greatest, rt->info.priority_least);
  if (s == DEVRT_OK) s = dv_stream_pool_init(rt);
  if (s == DEVRT_OK && (s = dv_blocks_init(rt)) != DEVRT_OK) dv_stream_pool_fini(rt);
  if (s == DEVRT_OK && (s = dv_layouts_init(rt)) != DEVRT_OK) {
    dv_blocks_fini(rt);
    dv_stream_pool_fini(rt);
  }
  if (s == DEVRT_OK && (s = dv_queue_init(rt)) != DEVRT_OK) {
    dv_layouts_fini(rt);
    dv_blocks_fini(rt);
    dv_stream_pool_fini(rt);
  }
  if (s != DEVRT_OK) {
    if (rt->dev) be->device_close(rt->dev);
    free(rt);
    return s;
  }
  pthread_mutex_init(&rt->events_mu, NULL);
  pthread_mutex_init(&rt->stack_mu, NULL);
  /* release: a thread that sees the magic (dv_rt_ok) was handed rt by the caller, who ordered
   * that after this return; the store itself publishes nothing else */
  atomic_store_explicit(&rt->magic, DV_RT_MAGIC, memory_order_release);
  *out = rt;
  return DEVRT_OK;
}

devrt_status devrt_runtime_create(const devrt_config* cfg, devrt_runtime** out) {
  DV_CHECK(dv_config_check(cfg, "devrt_runtime_create"));
  DV_ARG_CHECK(out, "devrt_runtime_create", "out is NULL");
  return runtime_new(cfg, true, out);
}

devrt_status devrt_runtime_destroy(devrt_runtime* rt) {
  DV_RT_CHECK(rt, "devrt_runtime_destroy");
  DV_ARG_CHECK(rt->owned, "devrt_runtime_destroy",
               "runtime of ordinal %d is process-wide, not owned", rt->cfg.ordinal);
  DV_CHECK(dv_layouts_check_none(rt, "devrt_runtime_destroy"));
  DV_CHECK(dv_blocks_check_none(rt, "devrt_runtime_destroy"));
  DV_CHECK(dv_peers_check_none(rt, "devrt_runtime_destroy"));
  DV_CHECK(dv_streams_check_unexported(rt, NULL, "devrt_runtime_destroy"));
  devrt_status s = dv_queue_fini(rt); /* refused while semaphores of rt are alive */
  if (s != DEVRT_OK) {
    dv_streams_reopen(rt);
    return s;
  }
  dv_stack_fini(rt);
  atomic_store_explicit(&rt->magic, 0,
                        memory_order_relaxed); /* later calls are the caller's race */
  dv_blocks_fini(rt);
  dv_events_fini(rt);
  dv_layouts_fini(rt);
  dv_stream_pool_fini(rt);
  rt->be->device_close(rt->dev);
  pthread_mutex_destroy(&rt->events_mu);
  pthread_mutex_destroy(&rt->stack_mu);
  free(rt);
  return DEVRT_OK;
}

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(devrt_runtime*) registry[DEVRT_MAX_ORDINALS];
static devrt_config configured[DEVRT_MAX_ORDINALS];
static bool has_config[DEVRT_MAX_ORDINALS];
static _Atomic unsigned creations;

unsigned dv_runtime_creations(void) {
  return atomic_load_explicit(&creations, memory_order_relaxed);
}

devrt_status devrt_configure(int ordinal, const devrt_config* cfg) {
  DV_ARG_CHECK(ordinal >= 0 && ordinal < DEVRT_MAX_ORDINALS, "devrt_configure",
               "ordinal %d not in [0, %d)", ordinal, DEVRT_MAX_ORDINALS);
  DV_ARG_CHECK(cfg, "devrt_configure", "cfg is NULL");
  devrt_config c = *cfg;
  c.ordinal = ordinal;
  DV_CHECK(dv_config_check(&c, "devrt_configure"));
  pthread_mutex_lock(&registry_mu);
  devrt_status s = DEVRT_OK;
  if (atomic_load_explicit(&registry[ordinal], memory_order_relaxed)) /* under registry_mu */
    s = dv_fail(DEVRT_ERR_INVALID_STATE,
                "devrt_configure: the runtime of ordinal %d already exists", ordinal);
  else {
    configured[ordinal] = c;
    has_config[ordinal] = true;
  }
  pthread_mutex_unlock(&registry_mu);
  return s;
}

devrt_status devrt_runtime_get(int ordinal, devrt_runtime** out) {
  DV_ARG_CHECK(ordinal >= 0 && ordinal < DEVRT_MAX_ORDINALS, "devrt_runtime_get",
               "ordinal %d not in [0, %d)", ordinal, DEVRT_MAX_ORDINALS);
  DV_ARG_CHECK(out, "devrt_runtime_get", "out is NULL");
  devrt_runtime* rt = atomic_load_explicit(&registry[ordinal], memory_order_acquire);
  if (DV_LIKELY(rt)) {
    *out = rt;
    return DEVRT_OK;
  }
  pthread_mutex_lock(&registry_mu);
  devrt_status s = DEVRT_OK;
  rt = atomic_load_explicit(&registry[ordinal], memory_order_relaxed);
  if (!rt) {
    devrt_config c;
    if (has_config[ordinal])
      c = configured[ordinal];
    else
      s = devrt_config_init(&c);
    c.ordinal = ordinal;
    if (s == DEVRT_OK) s = runtime_new(&c, false, &rt);
    if (s == DEVRT_OK) {
      atomic_fetch_add_explicit(&creations, 1, memory_order_relaxed);
      atomic_store_explicit(&registry[ordinal], rt, memory_order_release);
    }
  }
  pthread_mutex_unlock(&registry_mu);
  if (s == DEVRT_OK) *out = rt;
  return s;
}

devrt_status devrt_runtime_info_get(devrt_runtime* rt, devrt_runtime_info* out) {
  DV_RT_CHECK(rt, "devrt_runtime_info_get");
  DV_ARG_CHECK(out, "devrt_runtime_info_get", "out is NULL");
  memset(out, 0, sizeof *out);
  out->ordinal = rt->cfg.ordinal;
  out->backend = dv_is_host(rt->be) ? DEVRT_BACKEND_HOST : DEVRT_BACKEND_CUDA;
  out->backend_name = rt->be->name;
  memcpy(out->backend_reason, rt->reason, sizeof out->backend_reason);
  pthread_mutex_lock(&rt->pool_mu);
  out->stream_pool_size = rt->npool;
  out->streams_created = rt->pool.created;
  out->streams_in_use = rt->pool.in_use;
  pthread_mutex_unlock(&rt->pool_mu);
  return DEVRT_OK;
}

/* ---- device facts ---- */

devrt_status devrt_device_info_get(devrt_runtime* rt, devrt_device_info* out) {
  DV_RT_CHECK(rt, "devrt_device_info_get");
  DV_ARG_CHECK(out, "devrt_device_info_get", "out is NULL");
  *out = rt->info;
  return DEVRT_OK;
}

devrt_status devrt_device_split_query(devrt_runtime* rt, unsigned min_sms, unsigned flags,
                                      devrt_split_result* out) {
  DV_RT_CHECK(rt, "devrt_device_split_query");
  DV_ARG_CHECK(out, "devrt_device_split_query", "out is NULL");
  DV_ARG_CHECK(!(flags & ~DEVRT_SPLIT_IGNORE_COSCHEDULING), "devrt_device_split_query",
               "unknown flags 0x%x", flags);
  if (!rt->info.green_contexts)
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   "devrt_device_split_query: device %d (%s) has no green contexts",
                   rt->cfg.ordinal, rt->info.name);
  DV_ARG_CHECK(min_sms <= (unsigned)rt->info.sm_count, "devrt_device_split_query",
               "%u SMs asked, device %d has %d", min_sms, rt->cfg.ordinal, rt->info.sm_count);
  dv_res dev, one, rem;
  unsigned n = 0, k = 1;
  DV_CHECK(rt->be->sm_resource(rt->dev, &dev));
  DV_CHECK(rt->be->sm_split(rt->dev, &dev, min_sms, flags, NULL, &n, &rem)); /* the group count */
  DV_CHECK(
      rt->be->sm_split(rt->dev, &dev, min_sms, flags, &one, &k, &rem)); /* one gives its size */
  out->groups = n;
  out->sms_per_group = n ? one.sms : 0;
  out->remainder_sms = dev.sms - n * out->sms_per_group;
  return DEVRT_OK;
}
