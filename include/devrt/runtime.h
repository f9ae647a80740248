/* devrt/runtime.h: configuration and the runtime, one per device ordinal.
 * A runtime owns a backend device (cuda or host), its stream pool and its memory pool. */
#ifndef DEVRT_RUNTIME_H
#define DEVRT_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "devrt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_runtime devrt_runtime;

typedef enum devrt_backend_kind {
  DEVRT_BACKEND_AUTO = 0, /* cuda when a driver and the device are present, else host */
  DEVRT_BACKEND_CUDA,
  DEVRT_BACKEND_HOST,
} devrt_backend_kind;

#define DEVRT_MAX_ORDINALS 64
#define DEVRT_MAX_STREAMS 4095 /* slot ids are 12 bits, and the runtime keeps one */
#define DEVRT_RELEASE_KEEP_ALL UINT64_MAX

typedef struct devrt_config {
  int ordinal;                /* device ordinal (devrt_runtime_create; devrt_configure sets it) */
  devrt_backend_kind backend; /* DEVRT_BACKEND: auto|cuda|host (default auto) */
  unsigned stream_pool_size;  /* DEVRT_STREAMS: 1..DEVRT_MAX_STREAMS (default 16) */
  int stream_priority;        /* DEVRT_STREAM_PRIORITY: 0 normal, <0 higher (CUDA's convention) */
  uint64_t pool_release_threshold; /* DEVRT_POOL_RELEASE: bytes the pool keeps at sync (default keep
                                      all) */
  unsigned host_workers; /* DEVRT_HOST_WORKERS: the host backend's "SM count" (default 8) */
  unsigned host_devices; /* DEVRT_HOST_DEVICES: how many host devices exist (default 1) */
  /* The default resource stack (budget -> logging -> statistics -> caching -> async): */
  uint64_t budget_bytes;   /* DEVRT_BUDGET=bytes: the device budget (0: see budget_percent) */
  unsigned budget_percent; /* DEVRT_BUDGET=N%: percent of device memory (default 100) */
  bool cache;              /* DEVRT_CACHE=0|1: the caching layer (default on) */
  const char* log_path;    /* DEVRT_LOG=path: the logging layer, off when NULL */
  bool log_jsonl;          /* DEVRT_LOG_FORMAT=csv|jsonl (default csv) */
  bool stats_peak_bound;   /* DEVRT_STATS_PEAK=exact|bound (default exact): statistics' peaks
                            * exact, or an upper bound that lets threads scale (memory.h) */
  /* Semaphores and the submission queue (semaphore.h, queue.h): */
  uint64_t
      wait_spin_ns; /* DEVRT_WAIT_SPIN_NS: host waits spin this long, then block (default 20000) */
  int completion;   /* DEVRT_COMPLETION=sync|hostfn: how device completion reaches the host
                       (a devrt_completion_mode, queue.h; default sync) */
  unsigned partition_streams; /* DEVRT_PARTITION_STREAMS: stream slots reserved for layouts'
                                 partitions, all layouts together (partition.h; default 64);
                                 stream_pool_size + this <= DEVRT_MAX_STREAMS */
  uint64_t cache_max_class;   /* DEVRT_CACHE_MAX_CLASS=bytes: the caching layer's max_class_bytes
                                 (resource.h; 0 or unset: 64 MiB) */
  bool arena; /* DEVRT_ARENA=0|1: the arena leaf (resource.h) in place of caching -> async
                 (default off) */
} devrt_config;

/* Fills *cfg with the defaults, then applies the DEVRT_* environment variables above. A
 * malformed variable (numbers are decimal digits only; empty is malformed: README) is
 * INVALID_ARGUMENT naming the variable and its value. Thread-safe. */
devrt_status devrt_config_init(devrt_config* cfg);

/* Sets the configuration the process-wide runtime of `ordinal` will be created with
 * (cfg->ordinal is ignored). INVALID_STATE once that runtime exists. Thread-safe. */
devrt_status devrt_configure(int ordinal, const devrt_config* cfg);

/* The process-wide runtime of `ordinal`, created on first use (from devrt_configure's config,
 * else defaults and env). Concurrent first calls create exactly one; a failed creation is
 * reported to the callers that raced on it and retried by the next call. It lives until exit.
 * Thread-safe. */
devrt_status devrt_runtime_get(int ordinal, devrt_runtime** out);

/* An owned runtime on device cfg->ordinal, for embedding and tests: not registered
 * process-wide. Thread-safe. */
devrt_status devrt_runtime_create(const devrt_config* cfg, devrt_runtime** out);

/* Destroys an owned runtime: synchronizes and destroys its streams, events and pool.
 * INVALID_ARGUMENT for a process-wide runtime or NULL; INVALID_STATE, destroying nothing, while
 * a layout, a semaphore or a block of it is alive (the message says which, and how many
 * blocks). Not thread-safe with other calls on rt. */
devrt_status devrt_runtime_destroy(devrt_runtime* rt);

typedef struct devrt_runtime_info {
  int ordinal;
  devrt_backend_kind backend; /* the backend actually chosen (cuda or host) */
  const char* backend_name;   /* "cuda" or "host" */
  char backend_reason[256];   /* why that backend was chosen */
  unsigned stream_pool_size;
  unsigned streams_created; /* pool streams created so far (they are reused) */
  unsigned streams_in_use;
} devrt_runtime_info;

/* Facts about the runtime. Thread-safe. */
devrt_status devrt_runtime_info_get(devrt_runtime* rt, devrt_runtime_info* out);

/* Whether devrt was built with the cuda backend (the CUDA toolkit was found at build time). */
int devrt_built_with_cuda(void);

/* devrt's version string, e.g. "0.1.0". */
const char* devrt_version(void);

#ifdef __cplusplus
}
#endif
#endif
