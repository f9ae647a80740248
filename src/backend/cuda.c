/* cuda.c: the cuda backend of the device layer: primary context per ordinal, streams, events,
 * devrt's own stream-ordered pool, modules and launches, SM splits and green contexts.
 * Stream-ordered calls take the context from their stream and never touch the caller's current
 * context; calls that need one push the primary (or green) context and pop it again. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../driver/cuda_driver.h"
#include "backend.h"

extern const unsigned char devrt_fatbin[]; /* kernels/fatbin.S: the embedded kernels */

struct dv_dev {
  const dv_driver* d;
  CUdevice dev;
  CUcontext ctx;
  CUmemoryPool pool;
  devrt_device_info info;
  _Atomic size_t page;                  /* va_page's granularity; 0 until first asked */
  _Atomic uint64_t mapped, mapped_high; /* va_map's bytes mapped now, and their high-water mark */
};

struct dv_green {
  CUgreenCtx g;
  CUcontext ctx;
};

/* Fault injection counters are process-wide: stream and event handles are the driver's own. */
static _Atomic unsigned faults[DV_FAULT_OPS_];
static const dv_driver* D; /* set by the first device_open; the driver table is process-wide */

#define CU(call, ...)                                                        \
  do {                                                                       \
    CUresult r_ = (call);                                                    \
    if (DV_UNLIKELY(r_ != CUDA_SUCCESS)) return dv_cu_fail(r_, __VA_ARGS__); \
  } while (0)

static devrt_status push(dv_dev* d, CUcontext ctx) {
  CU(D->cuCtxPushCurrent(ctx ? ctx : d->ctx), "cuCtxPushCurrent", "(device %d)", d->info.ordinal);
  return DEVRT_OK;
}
static void pop(void) {
  CUcontext c;
  D->cuCtxPopCurrent(&c);
}

static devrt_status cu_device_count(int* out) {
  const dv_driver* d;
  devrt_status s = dv_driver_get(&d);
  if (s == DEVRT_ERR_NO_DEVICE) {
    *out = 0;
    return DEVRT_OK;
  }
  DV_CHECK(s);
  CU(d->cuDeviceGetCount(out), "cuDeviceGetCount", "(counting devices)");
  return DEVRT_OK;
}

static int attr(dv_dev* d, CUdevice_attribute a) {
  int v = 0;
  D->cuDeviceGetAttribute(&v, a, d->dev);
  return v;
}

static devrt_status sm_resource(dv_dev* d, CUdevResource* res) {
  memset(res, 0, sizeof *res);
  if (!D->has_green)
    return dv_fail(DEVRT_ERR_UNSUPPORTED, "green contexts: the driver (%d) lacks them (CUDA 12.4+)",
                   D->version);
  CU(D->cuDeviceGetDevResource(d->dev, res, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource",
     "(device %d)", d->info.ordinal);
  return DEVRT_OK;
}

static void fill_info(dv_dev* d, const devrt_config* cfg) {
  devrt_device_info* i = &d->info;
  i->ordinal = cfg->ordinal;
  D->cuDeviceGetName(i->name, sizeof i->name, d->dev);
  i->cc_major = attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  i->cc_minor = attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  i->sm_count = attr(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  size_t total = 0;
  D->cuDeviceTotalMem(&total, d->dev);
  i->total_memory = total;
  i->driver_version = D->version;
  i->memory_pools = D->has_pools && attr(d, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
  CUdevResource res;
  i->green_contexts = sm_resource(d, &res) == DEVRT_OK && res.sm.smCount > 0;
  i->green_ctx_streams = i->green_contexts && D->has_green_streams;
  i->structured_split = i->green_contexts && D->has_structured_split;
  i->min_partition_sms = i->green_contexts ? res.sm.minSmPartitionSize : 0;
  i->sm_alignment = i->green_contexts ? res.sm.smCoscheduledAlignment : 0;
  if (push(d, NULL) == DEVRT_OK) {
    D->cuCtxGetStreamPriorityRange(&i->priority_least, &i->priority_greatest);
    pop();
  }
}

static devrt_status create_pool(dv_dev* d, const devrt_config* cfg) {
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = d->dev;
  CU(D->cuMemPoolCreate(&d->pool, &props), "cuMemPoolCreate", "(device %d)", cfg->ordinal);
  cuuint64_t threshold = cfg->pool_release_threshold;
  CU(D->cuMemPoolSetAttribute(d->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
     "cuMemPoolSetAttribute", "(RELEASE_THRESHOLD %llu)", (unsigned long long)threshold);
  return DEVRT_OK;
}

static void cu_device_close(dv_dev* d) {
  if (!d) return;
  if (d->pool) D->cuMemPoolDestroy(d->pool);
  if (d->ctx) D->cuDevicePrimaryCtxRelease(d->dev);
  free(d);
}

static devrt_status cu_device_open(const devrt_config* cfg, dv_dev** out) {
  DV_CHECK(dv_driver_get(&D));
  int n = 0;
  CU(D->cuDeviceGetCount(&n), "cuDeviceGetCount", "(counting devices)");
  if (cfg->ordinal < 0 || cfg->ordinal >= n)
    return dv_fail(DEVRT_ERR_NO_DEVICE, "cuda device_open: ordinal %d, but %d CUDA device(s)",
                   cfg->ordinal, n);
  dv_dev* d = calloc(1, sizeof *d);
  if (!d) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "cuda device_open: out of host memory");
  d->d = D;
  CUresult r = D->cuDeviceGet(&d->dev, cfg->ordinal);
  if (r == CUDA_SUCCESS) r = D->cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
  if (r != CUDA_SUCCESS) {
    free(d);
    return dv_cu_fail(r, "cuDevicePrimaryCtxRetain", "(device %d)", cfg->ordinal);
  }
  fill_info(d, cfg);
  if (d->info.memory_pools) {
    devrt_status s = create_pool(d, cfg);
    if (s != DEVRT_OK) {
      cu_device_close(d);
      return s;
    }
  }
  *out = d;
  return DEVRT_OK;
}

static devrt_status cu_device_info(dv_dev* d, devrt_device_info* out) {
  *out = d->info;
  return DEVRT_OK;
}

static devrt_status cu_stream_create(dv_dev* d, dv_green* g, int priority, dv_stream** out) {
  CUstream s;
  if (g && D->has_green_streams) {
    CU(D->cuGreenCtxStreamCreate(&s, g->g, CU_STREAM_NON_BLOCKING, priority),
       "cuGreenCtxStreamCreate", "(priority %d)", priority);
  } else {
    DV_CHECK(push(d, g ? g->ctx : NULL));
    CUresult r = D->cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, priority);
    pop();
    if (r != CUDA_SUCCESS)
      return dv_cu_fail(r, "cuStreamCreateWithPriority", "(priority %d)", priority);
  }
  *out = (dv_stream*)s;
  return DEVRT_OK;
}

static void cu_stream_destroy(dv_dev* d, dv_stream* s) {
  (void)d;
  D->cuStreamSynchronize((CUstream)s);
  D->cuStreamDestroy((CUstream)s);
}

/* The CUstream is the dv_stream: a foreign handle is used as it is and never destroyed. */
static devrt_status cu_stream_wrap(dv_dev* d, void* native, dv_stream** out) {
  (void)d;
  *out = (dv_stream*)native;
  return DEVRT_OK;
}

static void cu_stream_unwrap(dv_dev* d, dv_stream* s) { (void)d, (void)s; }

static devrt_status cu_stream_legacy(dv_dev* d, dv_stream** out) {
  DV_CHECK(push(d, NULL));
  CUstream s;
  CUresult r = D->cuStreamCreateWithPriority(&s, CU_STREAM_DEFAULT, 0); /* blocking */
  pop();
  if (r != CUDA_SUCCESS)
    return dv_cu_fail(r, "cuStreamCreateWithPriority", "(blocking, for the legacy default stream)");
  *out = (dv_stream*)s;
  return DEVRT_OK;
}

static devrt_status cu_stream_sync(dv_stream* s) {
  CU(D->cuStreamSynchronize((CUstream)s), "cuStreamSynchronize", "(stream %p)", (void*)s);
  return DEVRT_OK;
}

static devrt_status cu_stream_sync_native(dv_dev* d, void* native) {
  DV_CHECK(push(d, NULL));
  CUresult r = native == DEVRT_STREAM_PER_THREAD ? D->cuCtxSynchronize()
                                                 : D->cuStreamSynchronize((CUstream)native);
  pop();
  if (r != CUDA_SUCCESS)
    return dv_cu_fail(
        r, native == DEVRT_STREAM_PER_THREAD ? "cuCtxSynchronize" : "cuStreamSynchronize",
        "(stream %p, device %d)", native, d->info.ordinal);
  return DEVRT_OK;
}

static void* cu_stream_native(dv_stream* s) { return s; }

static devrt_status cu_event_create(dv_dev* d, unsigned flags, dv_event** out) {
  unsigned f = (flags & DEVRT_EVENT_TIMING) ? 0 : CU_EVENT_DISABLE_TIMING;
  if (flags & DEVRT_EVENT_BLOCKING_SYNC) f |= CU_EVENT_BLOCKING_SYNC;
  DV_CHECK(push(d, NULL));
  CUevent e;
  CUresult r = D->cuEventCreate(&e, f);
  pop();
  if (r != CUDA_SUCCESS) return dv_cu_fail(r, "cuEventCreate", "(flags 0x%x)", f);
  *out = (dv_event*)e;
  return DEVRT_OK;
}

static void cu_event_destroy(dv_dev* d, dv_event* e) {
  (void)d;
  D->cuEventDestroy((CUevent)e);
}

DV_HOT static devrt_status cu_event_record(dv_event* e, dv_stream* s) {
  if (DV_UNLIKELY(dv_fault_hit(&faults[DV_FAULT_EVENT_RECORD])))
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "cuEventRecord: injected fault");
  CU(D->cuEventRecord((CUevent)e, (CUstream)s), "cuEventRecord", "(event %p, stream %p)", (void*)e,
     (void*)s);
  return DEVRT_OK;
}

DV_HOT static devrt_status cu_stream_wait(dv_stream* s, dv_event* e) {
  CU(D->cuStreamWaitEvent((CUstream)s, (CUevent)e, 0), "cuStreamWaitEvent", "(stream %p, event %p)",
     (void*)s, (void*)e);
  return DEVRT_OK;
}

/* DV_FAULT_DEVICE: once hit, event queries and syncs keep failing, like a sticky launch fault. */
static _Atomic bool faulted;
static bool device_faulted(void) {
  if (atomic_load_explicit(&faulted, memory_order_acquire)) return true;
  if (!dv_fault_hit(&faults[DV_FAULT_DEVICE])) return false;
  atomic_store_explicit(&faulted, true, memory_order_release); /* pairs: the acquire above */
  return true;
}
#define FAULTED(call)                     \
  if (DV_UNLIKELY(device_faulted()))      \
  return dv_fail(DEVRT_ERR_BACKEND_ERROR, \
                 call ": injected device fault (sticky: the device is lost)")

static devrt_status cu_event_query(dv_event* e, bool* complete) {
  FAULTED("cuEventQuery");
  CUresult r = D->cuEventQuery((CUevent)e);
  *complete = r == CUDA_SUCCESS;
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) return DEVRT_OK;
  return dv_cu_fail(r, "cuEventQuery", "(event %p)", (void*)e);
}

static devrt_status cu_event_sync(dv_event* e) {
  FAULTED("cuEventSynchronize");
  CU(D->cuEventSynchronize((CUevent)e), "cuEventSynchronize", "(event %p)", (void*)e);
  return DEVRT_OK;
}

static devrt_status cu_host_func(dv_stream* s, devrt_host_fn fn, void* user, size_t copy) {
  if (copy) /* only the host backend's collectives keep their arguments with the op */
    return dv_fail(DEVRT_ERR_UNSUPPORTED, "cuda host_func: copied arguments are the host's");
  CU(D->cuLaunchHostFunc((CUstream)s, fn, user), "cuLaunchHostFunc", "(stream %p)", (void*)s);
  return DEVRT_OK;
}

DV_HOT static devrt_status cu_pool_alloc(dv_dev* d, size_t size, dv_stream* s, void** out) {
  if (DV_UNLIKELY(!d->pool))
    return dv_fail(DEVRT_ERR_UNSUPPORTED, "pool_alloc: device %d has no memory pools",
                   d->info.ordinal);
  if (DV_UNLIKELY(dv_fault_hit(&faults[DV_FAULT_ALLOC])))
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED,
                   "cuMemAllocFromPoolAsync: injected fault (%zu bytes)", size);
  CUdeviceptr p;
  CU(D->cuMemAllocFromPoolAsync(&p, size, d->pool, (CUstream)s), "cuMemAllocFromPoolAsync",
     "(%zu bytes, device %d)", size, d->info.ordinal);
  *out = (void*)(uintptr_t)p;
  return DEVRT_OK;
}

DV_HOT static devrt_status cu_pool_free(dv_dev* d, void* p, dv_stream* s) {
  (void)d;
  if (DV_UNLIKELY(dv_fault_hit(&faults[DV_FAULT_FREE])))
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "cuMemFreeAsync: injected fault (%p)", p);
  CU(D->cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, (CUstream)s), "cuMemFreeAsync", "(%p)", p);
  return DEVRT_OK;
}

/* Without a pool, the pool's figures are 0 and only the mapped pages count. */
static devrt_status cu_pool_stats(dv_dev* d, devrt_pool_stats* out) {
  memset(out, 0, sizeof *out);
  uint64_t mapped = atomic_load_explicit(&d->mapped, memory_order_relaxed);
  uint64_t high = atomic_load_explicit(&d->mapped_high, memory_order_relaxed);
  out->used_current = out->reserved_current = mapped;
  out->used_high = out->reserved_high = high;
  if (!d->pool) return DEVRT_OK;
  static const CUmemPool_attribute attrs[5] = {
      CU_MEMPOOL_ATTR_USED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_HIGH,
      CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
      CU_MEMPOOL_ATTR_RELEASE_THRESHOLD};
  uint64_t* fields[5] = {&out->used_current, &out->used_high, &out->reserved_current,
                         &out->reserved_high, &out->release_threshold};
  for (int i = 0; i < 5; i++) {
    cuuint64_t v = 0;
    CU(D->cuMemPoolGetAttribute(d->pool, attrs[i], &v), "cuMemPoolGetAttribute", "(attribute %d)",
       (int)attrs[i]);
    *fields[i] += v;
  }
  return DEVRT_OK;
}

static devrt_status cu_pool_trim(dv_dev* d, size_t keep) {
  if (!d->pool)
    return dv_fail(DEVRT_ERR_UNSUPPORTED, "pool_trim: device %d has no memory pools",
                   d->info.ordinal);
  CU(D->cuMemPoolTrimTo(d->pool, keep), "cuMemPoolTrimTo", "(keep %zu)", keep);
  return DEVRT_OK;
}

static devrt_status cu_pool_reset_high(dv_dev* d) {
  atomic_store_explicit(&d->mapped_high, atomic_load_explicit(&d->mapped, memory_order_relaxed),
                        memory_order_relaxed); /* figures only */
  if (!d->pool) return DEVRT_OK;
  cuuint64_t zero = 0;
  CU(D->cuMemPoolSetAttribute(d->pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero),
     "cuMemPoolSetAttribute", "(USED_MEM_HIGH)");
  CU(D->cuMemPoolSetAttribute(d->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero),
     "cuMemPoolSetAttribute", "(RESERVED_MEM_HIGH)");
  return DEVRT_OK;
}

static devrt_status cu_mem_alloc(dv_dev* d, size_t size, void** out) {
  if (DV_UNLIKELY(dv_fault_hit(&faults[DV_FAULT_ALLOC])))
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "cuMemAlloc: injected fault (%zu bytes)", size);
  DV_CHECK(push(d, NULL));
  CUdeviceptr p;
  CUresult r = D->cuMemAlloc(&p, size);
  pop();
  if (r != CUDA_SUCCESS)
    return dv_cu_fail(r, "cuMemAlloc", "(%zu bytes, device %d)", size, d->info.ordinal);
  *out = (void*)(uintptr_t)p;
  return DEVRT_OK;
}

static devrt_status cu_mem_free(dv_dev* d, void* p) {
  if (DV_UNLIKELY(dv_fault_hit(&faults[DV_FAULT_FREE])))
    return dv_fail(DEVRT_ERR_BACKEND_ERROR, "cuMemFree: injected fault (%p)", p);
  DV_CHECK(push(d, NULL));
  CUresult r = D->cuMemFree((CUdeviceptr)(uintptr_t)p);
  pop();
  if (r != CUDA_SUCCESS) return dv_cu_fail(r, "cuMemFree", "(%p)", p);
  return DEVRT_OK;
}

static devrt_status cu_memset_async(dv_stream* s, void* p, int byte, size_t size) {
  CU(D->cuMemsetD8Async((CUdeviceptr)(uintptr_t)p, (unsigned char)byte, size, (CUstream)s),
     "cuMemsetD8Async", "(%p, %zu bytes)", p, size);
  return DEVRT_OK;
}

static devrt_status cu_memcpy_async(dv_stream* s, void* dst, const void* src, size_t size) {
  CU(D->cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, size, (CUstream)s),
     "cuMemcpyAsync", "(%p <- %p, %zu bytes)", dst, src, size);
  return DEVRT_OK;
}

/* ---- address ranges backed page by page (VMM) ---- */

static devrt_status cu_va_page(dv_dev* d, size_t* out) {
  size_t page = atomic_load_explicit(&d->page, memory_order_relaxed); /* the driver's figure */
  if (page) {
    *out = page;
    return DEVRT_OK;
  }
  if (!D->has_vmm || !attr(d, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED))
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   "va_page: device %d or the driver (%d) lacks virtual memory management",
                   d->info.ordinal, D->version);
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d->dev}};
  CU(D->cuMemGetAllocationGranularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
     "cuMemGetAllocationGranularity", "(recommended, device %d)", d->info.ordinal);
  atomic_store_explicit(&d->page, page, memory_order_relaxed);
  *out = page;
  return DEVRT_OK;
}

/* p and size whole pages of d (fills *page). */
static devrt_status va_check(dv_dev* d, const void* p, size_t size, const char* who, size_t* page) {
  DV_CHECK(cu_va_page(d, page));
  if (!p || !size || size % *page || (uintptr_t)p % *page)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: %p, %zu bytes: not whole pages of %zu", who, p,
                   size, *page);
  return DEVRT_OK;
}

static devrt_status cu_va_reserve(dv_dev* d, size_t size, void** out) {
  size_t page;
  DV_CHECK(cu_va_page(d, &page));
  if (!out || !size || size % page)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "va_reserve: %zu bytes: not whole pages of %zu",
                   size, page);
  CUdeviceptr p;
  CU(D->cuMemAddressReserve(&p, size, page, 0, 0), "cuMemAddressReserve", "(%zu bytes, device %d)",
     size, d->info.ordinal);
  *out = (void*)(uintptr_t)p;
  return DEVRT_OK;
}

static void cu_va_release(dv_dev* d, void* p, size_t size) {
  (void)d;
  D->cuMemAddressFree((CUdeviceptr)(uintptr_t)p, size);
}

static devrt_status cu_va_map(dv_dev* d, void* p, size_t size) {
  size_t page, done = 0;
  DV_CHECK(va_check(d, p, size, "va_map", &page));
  if (DV_UNLIKELY(dv_fault_hit(&faults[DV_FAULT_ALLOC])))
    return dv_fail(DEVRT_ERR_DEVICE_ALLOC_FAILED, "cuMemCreate: injected fault (%zu bytes)", size);
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d->dev}};
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUdeviceptr base = (CUdeviceptr)(uintptr_t)p;
  CUresult r = CUDA_SUCCESS;
  const char* call = "cuMemSetAccess";
  DV_CHECK(push(d, NULL));
  for (; done < size; done += page) {
    CUmemGenericAllocationHandle h;
    if ((r = D->cuMemCreate(&h, page, &prop, 0)) != CUDA_SUCCESS) {
      call = "cuMemCreate";
      break;
    }
    r = D->cuMemMap(base + done, page, 0, h, 0);
    D->cuMemRelease(h); /* the mapping keeps the memory */
    if (r != CUDA_SUCCESS) {
      call = "cuMemMap";
      break;
    }
  }
  if (r == CUDA_SUCCESS) r = D->cuMemSetAccess(base, size, &access, 1);
  if (r != CUDA_SUCCESS)
    for (size_t o = 0; o < done; o += page) D->cuMemUnmap(base + o, page);
  pop();
  if (r != CUDA_SUCCESS)
    return dv_cu_fail(r, call, "(%zu bytes at %p, page %zu, device %d)", size, p, page,
                      d->info.ordinal);
  dv_figure_add(&d->mapped, &d->mapped_high, size);
  return DEVRT_OK;
}

/* Page by page: each page is a mapping of its own. */
static devrt_status cu_va_unmap(dv_dev* d, void* p, size_t size) {
  size_t page, gone = 0;
  DV_CHECK(va_check(d, p, size, "va_unmap", &page));
  CUdeviceptr base = (CUdeviceptr)(uintptr_t)p;
  CUresult first = CUDA_SUCCESS;
  DV_CHECK(push(d, NULL));
  for (size_t o = 0; o < size; o += page) {
    CUresult r = D->cuMemUnmap(base + o, page);
    if (r == CUDA_SUCCESS)
      gone += page;
    else if (first == CUDA_SUCCESS)
      first = r;
  }
  pop();
  atomic_fetch_sub_explicit(&d->mapped, gone, memory_order_relaxed); /* a figure */
  if (first != CUDA_SUCCESS)
    return dv_cu_fail(first, "cuMemUnmap", "(%zu bytes at %p, %zu unmapped, device %d)", size, p,
                      gone, d->info.ordinal);
  return DEVRT_OK;
}

static devrt_status cu_module_load(dv_dev* d, const void* image, dv_module** out) {
  DV_CHECK(push(d, NULL));
  CUmodule m;
  CUresult r = D->cuModuleLoadData(&m, image ? image : devrt_fatbin);
  pop();
  if (r != CUDA_SUCCESS)
    return dv_cu_fail(r, "cuModuleLoadData", "(%s image, device %d)", image ? "user" : "embedded",
                      d->info.ordinal);
  *out = (dv_module*)m;
  return DEVRT_OK;
}

static void cu_module_unload(dv_dev* d, dv_module* m) {
  if (push(d, NULL) != DEVRT_OK) return;
  D->cuModuleUnload((CUmodule)m);
  pop();
}

static devrt_status cu_kernel_get(dv_module* m, const char* name, dv_kernel** out) {
  CUfunction f;
  CU(D->cuModuleGetFunction(&f, (CUmodule)m, name), "cuModuleGetFunction", "(\"%s\")", name);
  *out = (dv_kernel*)f;
  return DEVRT_OK;
}

DV_HOT static devrt_status cu_launch(dv_stream* s, dv_kernel* k, const unsigned g[3],
                                     const unsigned b[3], unsigned shmem, void** args) {
  CU(D->cuLaunchKernel((CUfunction)k, g[0], g[1] + !g[1], g[2] + !g[2], b[0], b[1] + !b[1],
                       b[2] + !b[2], shmem, (CUstream)s, args, NULL),
     "cuLaunchKernel", "(grid %ux%ux%u, block %ux%ux%u, shmem %u; 0 means 1)", g[0], g[1], g[2],
     b[0], b[1], b[2], shmem);
  return DEVRT_OK;
}

/* ---- graphs: stream capture, instantiated at the end ----
 * Relaxed mode: the capture stream is devrt's own (src/launch/graph.c), nothing else enqueues on
 * it, and the capturing thread goes on using devrt's other streams (a synchronize among them).
 *
 * A graph is launched on a stream of its own, joined to the caller's stream by two events, never
 * on the caller's stream itself: with several threads submitting to shared streams, a
 * cuGraphLaunch into a stream that another thread submits to at the same time can lose its place
 * in that stream's order (later work, or an event recorded after it, completes before the graph
 * runs: driver 580.159.04 on an H200, without devrt: bench/results/h200-2026-11-28-graphs/
 * concurrent-launches.md), while kernels, copies, records and waits keep theirs. */

typedef struct cu_graph {
  CUgraphExec x;
  CUstream s;         /* its own launch stream, in the capturing stream's green context */
  CUevent before;     /* the caller's stream's point a launch starts after */
  CUevent after;      /* the launch's end, which the caller's stream waits for */
  pthread_mutex_t mu; /* a mutex held across a launch's five driver calls: s and the events
                       * serve one launch at a time */
} cu_graph;

static devrt_status cu_capture_begin(dv_stream* s) {
  if (!D->has_graphs)
    return dv_fail(DEVRT_ERR_UNSUPPORTED, "cuStreamBeginCapture: the driver (%d) lacks graphs",
                   D->version);
  CU(D->cuStreamBeginCapture((CUstream)s, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture",
     "(stream %p)", (void*)s);
  return DEVRT_OK;
}

/* What of g was made (its mutex always is). */
static void graph_free(cu_graph* g) {
  if (g->x) D->cuGraphExecDestroy(g->x);       /* in flight: freed once its launches finish */
  if (g->before) D->cuEventDestroy(g->before); /* the same for events and the stream */
  if (g->after) D->cuEventDestroy(g->after);
  if (g->s) D->cuStreamDestroy(g->s);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

/* The graph, with a launch stream of its own made in green at priority (where the caller's
 * stream runs: a partition's replays stay on its SMs); s stays the caller's. */
static devrt_status cu_capture_end(dv_dev* d, dv_stream* s, dv_green* green, int priority,
                                   dv_graph** out) {
  CUgraph cg = NULL;
  cu_graph* g = calloc(1, sizeof *g);
  if (g) pthread_mutex_init(&g->mu, NULL);
  CUresult r = D->cuStreamEndCapture((CUstream)s, &cg); /* ends it, even without memory */
  devrt_status st = DEVRT_OK;
  dv_stream* gs = NULL;
  if (r != CUDA_SUCCESS)
    st = dv_cu_fail(r, "cuStreamEndCapture", "(stream %p)", (void*)s);
  else if (!g)
    st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "capture end: out of host memory");
  else if ((st = cu_stream_create(d, green, priority, &gs)) == DEVRT_OK)
    g->s = (CUstream)gs, st = push(d, NULL); /* instantiation takes the caller's context */
  if (st == DEVRT_OK) {
    const char* what = "cuGraphInstantiateWithFlags";
    if ((r = D->cuGraphInstantiateWithFlags(&g->x, cg, 0)) == CUDA_SUCCESS &&
        ((r = D->cuEventCreate(&g->before, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS ||
         (r = D->cuEventCreate(&g->after, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS))
      what = "cuEventCreate";
    pop();
    if (r != CUDA_SUCCESS) st = dv_cu_fail(r, what, "(captured graph)");
  }
  if (cg) D->cuGraphDestroy(cg); /* the executable graph keeps what it needs */
  if (st != DEVRT_OK) {
    if (g) graph_free(g);
    return st;
  }
  *out = (dv_graph*)g;
  return DEVRT_OK;
}

static devrt_status cu_stream_capturing(dv_stream* s, bool* out) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (D->has_graphs)
    CU(D->cuStreamIsCapturing((CUstream)s, &st), "cuStreamIsCapturing", "(stream %p)", (void*)s);
  *out = st != CU_STREAM_CAPTURE_STATUS_NONE; /* an invalidated capture is still one */
  return DEVRT_OK;
}

static void cu_capture_mode_swap(int* mode) {
  CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
  if (D->has_graphs && D->cuThreadExchangeStreamCaptureMode(&m) == CUDA_SUCCESS) *mode = (int)m;
}

/* The caller's stream's point, the graph after it on its own stream, the caller's stream after
 * the graph. A failure once the graph is enqueued waits for it on the host: the caller is told
 * the launch failed, and nothing of it may still run then. */
static devrt_status cu_graph_launch(dv_graph* gr, dv_stream* s) {
  cu_graph* g = (cu_graph*)gr;
  CUstream cs = (CUstream)s;
  const char* what = "cuEventRecord";
  pthread_mutex_lock(&g->mu);
  CUresult r = D->cuEventRecord(g->before, cs);
  if (r == CUDA_SUCCESS && (r = D->cuStreamWaitEvent(g->s, g->before, 0)) != CUDA_SUCCESS)
    what = "cuStreamWaitEvent";
  if (r == CUDA_SUCCESS && (r = D->cuGraphLaunch(g->x, g->s)) != CUDA_SUCCESS)
    what = "cuGraphLaunch";
  else if (r == CUDA_SUCCESS && ((r = D->cuEventRecord(g->after, g->s)) != CUDA_SUCCESS ||
                                 (r = D->cuStreamWaitEvent(cs, g->after, 0)) != CUDA_SUCCESS)) {
    what = "joining the graph's stream";
    D->cuStreamSynchronize(g->s);
  }
  pthread_mutex_unlock(&g->mu);
  if (r != CUDA_SUCCESS) return dv_cu_fail(r, what, "(graph launch, stream %p)", (void*)s);
  return DEVRT_OK;
}

/* Launches in flight finish first (the driver frees what they use once they have). */
static void cu_graph_destroy(dv_dev* d, dv_graph* g) {
  (void)d;
  graph_free((cu_graph*)g);
}

static devrt_status cu_kernel_params(dv_kernel* k, unsigned max, unsigned* sizes, unsigned* n) {
  if (!D->cuFuncGetParamInfo)
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   "cuFuncGetParamInfo: the driver (%d) lacks it (CUDA 12.4+)", D->version);
  unsigned i = 0;
  for (size_t off, size;; i++) {
    CUresult r = D->cuFuncGetParamInfo((CUfunction)k, i, &off, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break; /* past the last parameter */
    if (r != CUDA_SUCCESS) return dv_cu_fail(r, "cuFuncGetParamInfo", "(parameter %u)", i);
    if (i == max)
      return dv_fail(DEVRT_ERR_UNSUPPORTED, "kernel_params: more than %u parameters", max);
    sizes[i] = (unsigned)size;
  }
  *n = i;
  return DEVRT_OK;
}

_Static_assert(sizeof(CUdevResource) <= sizeof(((dv_res*)0)->opaque),
               "dv_res holds a CUdevResource");
static const CUdevResource* ccres(const dv_res* r) {
  return (const CUdevResource*)(const void*)r->opaque;
}
static void wrap(dv_res* r, const CUdevResource* c, bool splittable) {
  memcpy(r->opaque, c, sizeof *c);
  r->sms = c->sm.smCount;
  r->splittable = splittable;
}

static devrt_status cu_sm_resource(dv_dev* d, dv_res* out) {
  CUdevResource res;
  DV_CHECK(sm_resource(d, &res));
  wrap(out, &res, true);
  return DEVRT_OK;
}

static devrt_status cu_sm_split(dv_dev* d, const dv_res* in, unsigned min_sms, unsigned flags,
                                dv_res* groups, unsigned* n, dv_res* rem) {
  unsigned f = (flags & DEVRT_SPLIT_IGNORE_COSCHEDULING)
                   ? CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING
                   : 0;
  CUdevResource out[DEVRT_MAX_PARTITIONS + 1], left;
  if (groups && *n > DEVRT_MAX_PARTITIONS + 1) *n = DEVRT_MAX_PARTITIONS + 1;
  memset(&left, 0, sizeof left);
  CU(D->cuDevSmResourceSplitByCount(groups ? out : NULL, n, ccres(in), &left, f, min_sms),
     "cuDevSmResourceSplitByCount", "(%u of %u SMs, flags 0x%x, device %d)", min_sms, in->sms,
     flags, d->info.ordinal);
  for (unsigned i = 0; groups && i < *n; i++) wrap(&groups[i], &out[i], false);
  wrap(rem, &left, false);
  return DEVRT_OK;
}

static devrt_status cu_green_create(dv_dev* d, const dv_res* res, unsigned n, dv_green** out) {
  if (DV_UNLIKELY(dv_fault_hit(&faults[DV_FAULT_GREEN])))
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   "cuGreenCtxCreate: injected refusal (as a virtual GPU or MPS gives)");
  CUdevResource r[2];
  if (n < 1 || n > 2)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "green_create: %u resources (1 or 2)", n);
  for (unsigned i = 0; i < n; i++) r[i] = *ccres(&res[i]);
  CUdevResourceDesc desc;
  CU(D->cuDevResourceGenerateDesc(&desc, r, n), "cuDevResourceGenerateDesc",
     "(%u resources, %u SMs)", n, res[0].sms);
  dv_green* g = calloc(1, sizeof *g);
  if (!g) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "green_create: out of host memory");
  CUresult e = D->cuGreenCtxCreate(&g->g, desc, d->dev, CU_GREEN_CTX_DEFAULT_STREAM);
  if (e == CUDA_SUCCESS) e = D->cuCtxFromGreenCtx(&g->ctx, g->g);
  if (e != CUDA_SUCCESS) {
    if (g->g) D->cuGreenCtxDestroy(g->g);
    free(g);
    return dv_cu_fail(e, "cuGreenCtxCreate", "(%u SMs, device %d)", res[0].sms, d->info.ordinal);
  }
  *out = g;
  return DEVRT_OK;
}

static devrt_status cu_green_resource(dv_green* g, dv_res* out) {
  CUdevResource got;
  memset(&got, 0, sizeof got);
  CU(D->cuGreenCtxGetDevResource(g->g, &got, CU_DEV_RESOURCE_TYPE_SM), "cuGreenCtxGetDevResource",
     "(green context %p)", (void*)g->g);
  wrap(out, &got, true);
  return DEVRT_OK;
}

static void cu_green_destroy(dv_dev* d, dv_green* g) {
  (void)d;
  D->cuGreenCtxDestroy(g->g);
  free(g);
}

static void cu_fault_arm(dv_dev* d, dv_fault_op op, unsigned nth) {
  (void)d;
  atomic_store_explicit(&faults[op], nth, memory_order_relaxed); /* a countdown: dv_fault_hit */
}

/* ---- several devices ---- */

static devrt_status cu_peer_query(dv_dev* a, dv_dev* b, devrt_peer_info* out) {
  memset(out, 0, sizeof *out);
  out->performance_rank = -1;
  out->same_device = a->dev == b->dev;
  if (out->same_device) {
    out->can_access = out->native_atomics = true;
    snprintf(out->link, sizeof out->link, "same device");
    return DEVRT_OK;
  }
  snprintf(out->link, sizeof out->link, "none");
  if (!D->has_peer) return DEVRT_OK;
  int ab = 0, ba = 0;
  CU(D->cuDeviceCanAccessPeer(&ab, a->dev, b->dev), "cuDeviceCanAccessPeer", "(device %d -> %d)",
     a->info.ordinal, b->info.ordinal);
  CU(D->cuDeviceCanAccessPeer(&ba, b->dev, a->dev), "cuDeviceCanAccessPeer", "(device %d -> %d)",
     b->info.ordinal, a->info.ordinal);
  out->can_access = ab && ba;
  if (!out->can_access) return DEVRT_OK;
  int rank[2] = {0, 0}, atom[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    CUdevice x = i ? b->dev : a->dev, y = i ? a->dev : b->dev;
    CU(D->cuDeviceGetP2PAttribute(&rank[i], CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, x, y),
       "cuDeviceGetP2PAttribute", "(PERFORMANCE_RANK, device %d -> %d)", (int)x, (int)y);
    CU(D->cuDeviceGetP2PAttribute(&atom[i], CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, x, y),
       "cuDeviceGetP2PAttribute", "(NATIVE_ATOMIC_SUPPORTED, device %d -> %d)", (int)x, (int)y);
  }
  out->performance_rank = rank[0] > rank[1] ? rank[0] : rank[1];
  out->native_atomics = atom[0] && atom[1];
  snprintf(out->link, sizeof out->link, "peer-to-peer");
  return DEVRT_OK;
}

/* b's pool made accessible (prot) to device a. */
static devrt_status pool_access(dv_dev* a, dv_dev* b, CUmemAccess_flags prot) {
  if (!b->pool) return DEVRT_OK;
  CUmemAccessDesc desc;
  memset(&desc, 0, sizeof desc);
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = a->dev;
  desc.flags = prot;
  CU(D->cuMemPoolSetAccess(b->pool, &desc, 1), "cuMemPoolSetAccess",
     "(device %d's pool for device %d, flags %d)", b->info.ordinal, a->info.ordinal, (int)prot);
  return DEVRT_OK;
}

static devrt_status cu_peer_enable(dv_dev* a, dv_dev* b) {
  if (a->dev == b->dev) return DEVRT_OK; /* one context, one address space */
  if (!D->has_peer)
    return dv_fail(DEVRT_ERR_UNSUPPORTED, "peer access: the driver (%d) lacks the peer calls",
                   D->version);
  int can = 0;
  CU(D->cuDeviceCanAccessPeer(&can, a->dev, b->dev), "cuDeviceCanAccessPeer", "(device %d -> %d)",
     a->info.ordinal, b->info.ordinal);
  if (!can)
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   "peer access: device %d (%s) cannot reach device %d's memory "
                   "(cuDeviceCanAccessPeer says 0)",
                   a->info.ordinal, a->info.name, b->info.ordinal);
  DV_CHECK(push(a, NULL));
  CUresult r = D->cuCtxEnablePeerAccess(b->ctx, 0);
  pop();
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    return dv_cu_fail(r, "cuCtxEnablePeerAccess", "(device %d -> %d)", a->info.ordinal,
                      b->info.ordinal);
  return pool_access(a, b, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

static void cu_peer_disable(dv_dev* a, dv_dev* b) {
  if (a->dev == b->dev || !D->has_peer) return;
  if (push(a, NULL) == DEVRT_OK) {
    D->cuCtxDisablePeerAccess(b->ctx);
    pop();
  }
  DV_KEEP_ERROR(pool_access(a, b, CU_MEM_ACCESS_FLAGS_PROT_NONE));
}

static devrt_status cu_memcpy_peer(dv_stream* s, void* dst, dv_dev* dd, const void* src, dv_dev* sd,
                                   size_t size) {
  if (dd->dev == sd->dev || !D->has_peer) return cu_memcpy_async(s, dst, src, size);
  CU(D->cuMemcpyPeerAsync((CUdeviceptr)(uintptr_t)dst, dd->ctx, (CUdeviceptr)(uintptr_t)src,
                          sd->ctx, size, (CUstream)s),
     "cuMemcpyPeerAsync", "(%p on device %d <- %p on device %d, %zu bytes)", dst, dd->info.ordinal,
     src, sd->info.ordinal, size);
  return DEVRT_OK;
}

static devrt_status cu_device_enter(dv_dev* d) { return push(d, NULL); }
static void cu_device_leave(dv_dev* d) {
  (void)d;
  pop();
}

const dv_backend dv_cuda_backend = {
    .name = "cuda",
    .device_count = cu_device_count,
    .device_open = cu_device_open,
    .device_close = cu_device_close,
    .device_info = cu_device_info,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_wrap = cu_stream_wrap,
    .stream_unwrap = cu_stream_unwrap,
    .stream_legacy = cu_stream_legacy,
    .stream_sync = cu_stream_sync,
    .stream_sync_native = cu_stream_sync_native,
    .stream_native = cu_stream_native,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait = cu_stream_wait,
    .event_query = cu_event_query,
    .event_sync = cu_event_sync,
    .host_func = cu_host_func,
    .pool_alloc = cu_pool_alloc,
    .pool_free = cu_pool_free,
    .pool_stats = cu_pool_stats,
    .pool_trim = cu_pool_trim,
    .pool_reset_high = cu_pool_reset_high,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .memset_async = cu_memset_async,
    .memcpy_async = cu_memcpy_async,
    .va_page = cu_va_page,
    .va_reserve = cu_va_reserve,
    .va_release = cu_va_release,
    .va_map = cu_va_map,
    .va_unmap = cu_va_unmap,
    .module_load = cu_module_load,
    .module_unload = cu_module_unload,
    .kernel_get = cu_kernel_get,
    .launch = cu_launch,
    .kernel_params = cu_kernel_params,
    .sm_resource = cu_sm_resource,
    .sm_split = cu_sm_split,
    .green_create = cu_green_create,
    .green_resource = cu_green_resource,
    .green_destroy = cu_green_destroy,
    .fault_arm = cu_fault_arm,
    .peer_query = cu_peer_query,
    .peer_enable = cu_peer_enable,
    .peer_disable = cu_peer_disable,
    .memcpy_peer = cu_memcpy_peer,
    .device_enter = cu_device_enter,
    .device_leave = cu_device_leave,
    .capture_begin = cu_capture_begin,
    .capture_end = cu_capture_end,
    .stream_capturing = cu_stream_capturing,
    .capture_mode_swap = cu_capture_mode_swap,
    .graph_launch = cu_graph_launch,
    .graph_destroy = cu_graph_destroy,
};
