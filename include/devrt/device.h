/* devrt/device.h: what the device under a runtime is and can do: identity, memory, memory
 * pools, and SM partitioning (green contexts) with the driver's dry-run split. */
#ifndef DEVRT_DEVICE_H
#define DEVRT_DEVICE_H

#include <stdbool.h>
#include <stdint.h>
#include "devrt/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_device_info {
  char name[256];
  int ordinal;
  int cc_major, cc_minor;                /* 0.0 on the host backend */
  int sm_count;                          /* on host: the configured worker count */
  uint64_t total_memory;                 /* bytes */
  int driver_version;                    /* e.g. 13000; 0 on host */
  bool memory_pools;                     /* stream-ordered pools supported */
  bool green_contexts;                   /* SM partitioning supported (driver symbols + device) */
  bool green_ctx_streams;                /* cuGreenCtxStreamCreate present (CUDA 12.5+) */
  bool structured_split;                 /* cuDevSmResourceSplit present (CUDA 13.1+) */
  unsigned min_partition_sms;            /* smallest SM group a split can give */
  unsigned sm_alignment;                 /* SM groups are multiples of this */
  int priority_least, priority_greatest; /* stream priority range */
} devrt_device_info;

/* Device facts. Thread-safe. */
devrt_status devrt_device_info_get(devrt_runtime* rt, devrt_device_info* out);

enum { DEVRT_SPLIT_IGNORE_COSCHEDULING = 1u };

typedef struct devrt_split_result {
  unsigned groups;        /* how many groups the driver would give */
  unsigned sms_per_group; /* SMs in each group */
  unsigned remainder_sms; /* SMs left over; groups*sms_per_group + remainder = sm_count */
} devrt_split_result;

/* The driver's dry run of splitting the whole device into groups of at least min_sms SMs
 * (as many groups as fit). Creates nothing. UNSUPPORTED without green contexts;
 * INVALID_ARGUMENT if min_sms exceeds the device. Thread-safe. */
devrt_status devrt_device_split_query(devrt_runtime* rt, unsigned min_sms, unsigned flags,
                                      devrt_split_result* out);

#ifdef __cplusplus
}
#endif
#endif
