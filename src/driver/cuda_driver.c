/* cuda_driver.c: run-time loading of libcuda through dlopen + cuGetProcAddress, and the
 * mapping of CUresult values to devrt statuses with the driver's own error names. */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "../core/error.h"

static dv_driver drv;
static devrt_status drv_status;
static char drv_message[512];
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

typedef CUresult (*get_proc_v2_fn)(const char*, void**, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult*);
typedef CUresult (*get_proc_v1_fn)(const char*, void**, int, cuuint64_t);

static void* lib;
static get_proc_v2_fn get_proc_v2;
static get_proc_v1_fn get_proc_v1;

/* sym as the driver has it for a program built against CUDA `version` */
static void* resolve_at(const char* sym, int version) {
  void* fn = NULL;
  CUresult r = get_proc_v2 ? get_proc_v2(sym, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, NULL)
                           : get_proc_v1(sym, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
  return r == CUDA_SUCCESS ? fn : NULL;
}
static void* resolve(const char* sym) { return resolve_at(sym, CUDA_VERSION); }

#define DV_CU_RESOLVE(name) ok &= (drv.name = (__typeof__(drv.name))resolve(#name)) != NULL;
#define DV_CU_MISSING(name) \
  if (!drv.name) missing = #name;

static void load(void) {
  const char* path = getenv("DEVRT_CUDA_LIBRARY");
  if (!path || !*path) path = "libcuda.so.1";
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    drv_status = DEVRT_ERR_NO_DRIVER;
    snprintf(drv_message, sizeof drv_message, "cuda driver: dlopen(\"%s\") failed: %s", path,
             dlerror());
    return;
  }
  get_proc_v2 = (get_proc_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
  if (!get_proc_v2) get_proc_v1 = (get_proc_v1_fn)dlsym(lib, "cuGetProcAddress");
  if (!get_proc_v2 && !get_proc_v1) {
    drv_status = DEVRT_ERR_NO_DRIVER;
    snprintf(drv_message, sizeof drv_message,
             "cuda driver: %s has no cuGetProcAddress (driver older than CUDA 11.3)", path);
    return;
  }
  bool ok = true;
  DV_CU_CORE(DV_CU_RESOLVE)
  if (!ok) {
    const char* missing = "?";
    DV_CU_CORE(DV_CU_MISSING)
    drv_status = DEVRT_ERR_NO_DRIVER;
    snprintf(drv_message, sizeof drv_message, "cuda driver: %s lacks %s (driver too old)", path,
             missing);
    return;
  }
  /* cuda.h declares cuCtxSynchronize(void), but from CUDA 13 that name resolves to a version
   * that takes the context: ask for the one the declaration describes */
  drv.cuCtxSynchronize = resolve_at("cuCtxSynchronize", 2000);
  ok = true;
  DV_CU_POOL(DV_CU_RESOLVE) drv.has_pools = ok;
  ok = true;
  DV_CU_GREEN(DV_CU_RESOLVE) drv.has_green = ok;
  ok = true;
  DV_CU_GREEN_STREAM(DV_CU_RESOLVE) drv.has_green_streams = ok && drv.has_green;
  ok = true;
  DV_CU_GRAPH(DV_CU_RESOLVE) drv.has_graphs = ok;
  DV_CU_GREEN_QUERY(DV_CU_RESOLVE)
  DV_CU_GRAPH_MEM(DV_CU_RESOLVE)
  ok = true;
  DV_CU_PEER(DV_CU_RESOLVE) drv.has_peer = ok;
  ok = true;
  DV_CU_VMM(DV_CU_RESOLVE) drv.has_vmm = ok;
  drv.has_structured_split = resolve("cuDevSmResourceSplit") != NULL;
  drv.cuFuncGetParamInfo = (__typeof__(drv.cuFuncGetParamInfo))resolve("cuFuncGetParamInfo");
  CUresult r = drv.cuInit(0);
  if (r == CUDA_SUCCESS) r = drv.cuDriverGetVersion(&drv.version);
  if (r == CUDA_ERROR_NO_DEVICE) {
    drv_status = DEVRT_ERR_NO_DEVICE;
    snprintf(drv_message, sizeof drv_message,
             "cuda driver: cuInit: CUDA_ERROR_NO_DEVICE (no CUDA device)");
  } else if (r != CUDA_SUCCESS) {
    drv_status = dv_cu_status(r);
    const char* name = NULL;
    drv.cuGetErrorName(r, &name);
    snprintf(drv_message, sizeof drv_message, "cuda driver: cuInit: %s (%d)", name ? name : "?",
             (int)r);
  }
}

devrt_status dv_driver_get(const dv_driver** out) {
  pthread_once(&drv_once, load);
  if (drv_status != DEVRT_OK) return dv_fail(drv_status, "%s", drv_message);
  *out = &drv;
  return DEVRT_OK;
}

devrt_status dv_cu_status(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS:
      return DEVRT_OK;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_INVALID_RESOURCE_TYPE:
    case CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION:
      return DEVRT_ERR_INVALID_ARGUMENT;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return DEVRT_ERR_DEVICE_ALLOC_FAILED;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
      return DEVRT_ERR_NO_DEVICE;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      return DEVRT_ERR_UNSUPPORTED;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      return DEVRT_ERR_NO_DRIVER;
    case CUDA_ERROR_TIMEOUT:
      return DEVRT_ERR_TIMEOUT;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    case CUDA_ERROR_TOO_MANY_PEERS:
      return DEVRT_ERR_OUT_OF_RESOURCES;
    case CUDA_ERROR_ILLEGAL_ADDRESS: /* sticky: the context is unusable until the process restarts
                                      */
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
      return DEVRT_ERR_DEVICE_LOST;
    case CUDA_ERROR_NOT_READY:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
      return DEVRT_ERR_INVALID_STATE;
    default:
      return DEVRT_ERR_BACKEND_ERROR;
  }
}

devrt_status dv_cu_fail(CUresult r, const char* call, const char* fmt, ...) {
  const char* name = NULL;
  const char* text = NULL;
  if (drv.cuGetErrorName) drv.cuGetErrorName(r, &name);
  if (drv.cuGetErrorString) drv.cuGetErrorString(r, &text);
  char ctx[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  char code[32];
  snprintf(code, sizeof code, "CUresult %d", (int)r);
  return dv_fail(dv_cu_status(r), "%s: %s (%s) %s", call, name ? name : code, text ? text : "",
                 ctx);
}
