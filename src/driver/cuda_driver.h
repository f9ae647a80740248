/* cuda_driver.h: libcuda loaded at run time. Every entry point is resolved once through
 * cuGetProcAddress at the CUDA version devrt is compiled against; a missing symbol leaves its
 * pointer NULL and the feature groups that need it marked unsupported. */
#ifndef DEVRT_CUDA_DRIVER_H
#define DEVRT_CUDA_DRIVER_H

#include <cuda.h>
#include <stdbool.h>
#include "devrt/status.h"

/* Entry points every use of the cuda backend needs (CUDA 11.4+). */
// clang-format off: one X a line
#define DV_CU_CORE(X)            \
  X(cuInit)                      \
  X(cuDriverGetVersion)          \
  X(cuGetErrorName)              \
  X(cuGetErrorString)            \
  X(cuDeviceGetCount)            \
  X(cuDeviceGet)                 \
  X(cuDeviceGetName)             \
  X(cuDeviceGetAttribute)        \
  X(cuDeviceTotalMem)            \
  X(cuDevicePrimaryCtxRetain)    \
  X(cuDevicePrimaryCtxRelease)   \
  X(cuCtxPushCurrent)            \
  X(cuCtxPopCurrent)             \
  X(cuCtxGetCurrent)             \
  X(cuCtxGetStreamPriorityRange) \
  X(cuStreamCreateWithPriority)  \
  X(cuStreamDestroy)             \
  X(cuStreamSynchronize)         \
  X(cuCtxSynchronize)            \
  X(cuEventCreate)               \
  X(cuEventDestroy)              \
  X(cuEventRecord)               \
  X(cuStreamWaitEvent)           \
  X(cuEventQuery)                \
  X(cuEventSynchronize)          \
  X(cuLaunchHostFunc)            \
  X(cuMemAlloc)                  \
  X(cuMemFree)                   \
  X(cuMemsetD8Async)             \
  X(cuMemcpyAsync)               \
  X(cuModuleLoadData)            \
  X(cuModuleUnload)              \
  X(cuModuleGetFunction)         \
  X(cuLaunchKernel)              \
  X(cuPointerGetAttribute)
// clang-format on

/* Stream-ordered memory pools (CUDA 11.2+). */
// clang-format off: one X a line
#define DV_CU_POOL(X)        \
  X(cuMemPoolCreate)         \
  X(cuMemPoolDestroy)        \
  X(cuMemPoolSetAttribute)   \
  X(cuMemPoolGetAttribute)   \
  X(cuMemPoolTrimTo)         \
  X(cuMemAllocFromPoolAsync) \
  X(cuMemFreeAsync)
// clang-format on

/* Green contexts (CUDA 12.4+). */
// clang-format off: one X a line
#define DV_CU_GREEN(X)           \
  X(cuDeviceGetDevResource)      \
  X(cuDevSmResourceSplitByCount) \
  X(cuDevResourceGenerateDesc)   \
  X(cuGreenCtxCreate)            \
  X(cuGreenCtxDestroy)           \
  X(cuGreenCtxGetDevResource)    \
  X(cuCtxFromGreenCtx)
// clang-format on

/* Green-context streams (CUDA 12.5+). */
#define DV_CU_GREEN_STREAM(X) X(cuGreenCtxStreamCreate)

/* Stream capture and graphs (CUDA 11.4+; tests and benchmarks use them on partition streams). */
// clang-format off: one X a line
#define DV_CU_GRAPH(X)           \
  X(cuStreamBeginCapture)        \
  X(cuStreamEndCapture)          \
  X(cuGraphInstantiateWithFlags) \
  X(cuGraphLaunch)               \
  X(cuGraphExecDestroy)          \
  X(cuGraphDestroy)              \
  X(cuStreamIsCapturing)         \
  X(cuThreadExchangeStreamCaptureMode)
// clang-format on

/* Peer access between devices (src/multi; CUDA 11.2+ for the pools' access). */
// clang-format off: one X a line
#define DV_CU_PEER(X)        \
  X(cuDeviceCanAccessPeer)   \
  X(cuDeviceGetP2PAttribute) \
  X(cuCtxEnablePeerAccess)   \
  X(cuCtxDisablePeerAccess)  \
  X(cuMemPoolSetAccess)      \
  X(cuMemcpyPeerAsync)
// clang-format on

/* Green-context facts for tests and diagnostics (CUDA 12.4+). */
#define DV_CU_GREEN_QUERY(X) X(cuStreamGetGreenCtx)

/* Graph memory nodes, for `devrt bench graph`'s comparison with devrt's temporaries (CUDA 11.4+;
 * each NULL where the driver lacks it). */
// clang-format off: one X a line
#define DV_CU_GRAPH_MEM(X) \
  X(cuMemAllocAsync)       \
  X(cuDeviceGetGraphMemAttribute)
// clang-format on

/* Virtual memory management: reserved address ranges backed page by page (CUDA 10.2+; the
 * cuda backend's va_* entries are UNSUPPORTED without them). */
// clang-format off: one X a line
#define DV_CU_VMM(X)               \
  X(cuMemGetAllocationGranularity) \
  X(cuMemAddressReserve)           \
  X(cuMemAddressFree)              \
  X(cuMemCreate)                   \
  X(cuMemRelease)                  \
  X(cuMemMap)                      \
  X(cuMemUnmap)                    \
  X(cuMemSetAccess)
// clang-format on

#define DV_CU_FIELD(name) __typeof__(&name) name;

typedef struct dv_driver {
  DV_CU_CORE(DV_CU_FIELD)
  DV_CU_POOL(DV_CU_FIELD)
  DV_CU_GREEN(DV_CU_FIELD)
  DV_CU_GREEN_STREAM(DV_CU_FIELD)
  DV_CU_GRAPH(DV_CU_FIELD)
  DV_CU_GREEN_QUERY(DV_CU_FIELD)
  DV_CU_GRAPH_MEM(DV_CU_FIELD)
  DV_CU_PEER(DV_CU_FIELD)
  DV_CU_VMM(DV_CU_FIELD)
  __typeof__(&cuFuncGetParamInfo) cuFuncGetParamInfo; /* CUDA 12.4+, else NULL */
  int version;                                        /* cuDriverGetVersion, e.g. 13000 */
  bool has_pools, has_green, has_green_streams, has_graphs, has_peer, has_vmm;
  bool has_structured_split; /* cuDevSmResourceSplit (CUDA 13.1) resolves */
} dv_driver;

/* Loads libcuda (DEVRT_CUDA_LIBRARY, else libcuda.so.1) and cuInit()s it, once per process.
 * NO_DRIVER when the library or its core entry points are missing; the failure is sticky and
 * reported again, with the same message, on every call. Thread-safe. */
devrt_status dv_driver_get(const dv_driver** out);

/* The devrt status for a CUresult (pure: usable without a driver). */
devrt_status dv_cu_status(CUresult r);

/* Fails with the mapped status and "<call>: <CUDA_ERROR_NAME> (<driver text>) <context>". */
devrt_status dv_cu_fail(CUresult r, const char* call, const char* fmt, ...)
    __attribute__((format(printf, 3, 4), cold));

#endif
