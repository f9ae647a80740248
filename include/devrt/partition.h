/* devrt/partition.h: spatial slices of one GPU. A layout holds every partition of a device, all
 * built from one SM split so they are pairwise disjoint; each partition is a green context with
 * its own stream pool and memory sub-budget (host backend: a slice of the worker "SMs").
 * Streams from a partition are ordinary devrt streams: blocks, recorded launches, semaphores and
 * the queue use them unchanged, and cross-partition dependencies are plain events. */
#ifndef DEVRT_PARTITION_H
#define DEVRT_PARTITION_H

#include <stdbool.h>
#include <stdint.h>
#include "devrt/resource.h"
#include "devrt/runtime.h"
#include "devrt/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_layout devrt_layout;       /* owned by the caller until destroyed */
typedef struct devrt_partition devrt_partition; /* owned by its layout */

#define DEVRT_MAX_PARTITIONS 64

/* What happens to the SMs no requested group took. */
typedef enum devrt_remainder {
  DEVRT_REMAINDER_PARTITION = 0, /* one more partition, the last (none when it has 0 SMs) */
  DEVRT_REMAINDER_MERGE,         /* merged into the last requested partition */
  DEVRT_REMAINDER_IDLE,          /* left unused by the layout */
} devrt_remainder;

enum devrt_layout_flags {
  /* Split without co-scheduling guarantees: finer groups (2 SMs on Hopper), partitions flagged
   * not cluster-capable. */
  DEVRT_LAYOUT_IGNORE_COSCHEDULING = 1u << 0,
  /* Where green contexts are missing or refused, build the partitions as plain streams on the
   * primary context (reported not isolated, counted) instead of returning UNSUPPORTED. */
  DEVRT_LAYOUT_ALLOW_FALLBACK = 1u << 1,
  /* Build plain streams on purpose (not isolated; not counted as a fallback): a baseline. */
  DEVRT_LAYOUT_PLAIN_STREAMS = 1u << 2,
  /* CUDA 13.1: each green context gets a workqueue config of balanced scope, so partitions do
   * not share hardware work queues. UNSUPPORTED where the driver or this build lacks it. */
  DEVRT_LAYOUT_WORKQUEUE_BALANCED = 1u << 3,
};

/* A layout request; zero-initialized fields take the defaults. Exactly one form is given:
 *  even:   `groups` partitions of at least `min_sms` SMs each (groups 0: as many as fit);
 *  uneven: `sm_counts[0..count)`, at least that many SMs per partition, in order.
 * The driver rounds every group up (8-SM multiples on Hopper, 2 with IGNORE_COSCHEDULING). */
typedef struct devrt_layout_spec {
  unsigned groups, min_sms;  /* even form */
  const unsigned* sm_counts; /* uneven form */
  unsigned count;
  devrt_remainder remainder;
  unsigned flags;        /* devrt_layout_flags */
  unsigned streams;      /* stream pool size of each partition (0: 4, or a fair share
                            of DEVRT_PARTITION_STREAMS when 4 each do not fit) */
  const int* priorities; /* stream priority of each requested partition, NULL: the
                            runtime's; a remainder partition takes the runtime's */
} devrt_layout_spec;

/* What a spec gives: the driver's answer, per partition. */
typedef struct devrt_layout_plan {
  unsigned partitions; /* requested groups (+1 for a remainder partition) */
  unsigned
      sm_counts[DEVRT_MAX_PARTITIONS]; /* SMs of each partition (the device's when not isolated) */
  unsigned idle_sms;                   /* SMs the layout leaves unused */
  unsigned device_sms;
  unsigned catch_all;        /* index of the catch-all partition */
  bool isolated;             /* false: plain streams (fallback or PLAIN_STREAMS) */
  bool remainder_partition;  /* the last partition is the split's remainder */
  bool structured_split;     /* uneven form by cuDevSmResourceSplit (13.1) */
  char fallback_reason[160]; /* why not isolated, "" when isolated */
} devrt_layout_plan;

/* What `spec` would give, from the driver's dry run, creating nothing. Returns the status
 * devrt_layout_create would return for it (the plan is filled as far as the split goes):
 * INVALID_ARGUMENT for a malformed spec or one larger than the device, OUT_OF_RESOURCES when the
 * driver gives fewer groups than asked, UNSUPPORTED without green contexts and no fallback
 * allowed. Thread-safe. */
devrt_status devrt_layout_plan_get(devrt_runtime* rt, const devrt_layout_spec* spec,
                                   devrt_layout_plan* out);

/* Builds every partition of `spec` in one call: one split, one green context per partition
 * (about 1.25 ms each on H200: build layouts at start-up and keep them), each partition's
 * streams and sub-budget. On failure nothing is left behind. Never changes the calling thread's
 * current context. The layout is not active until devrt_layout_activate. Thread-safe. */
devrt_status devrt_layout_create(devrt_runtime* rt, const devrt_layout_spec* spec,
                                 devrt_layout** out);

/* Destroys a layout: its streams (first), its green contexts, its sub-budgets.
 * INVALID_STATE while it is active, while any of its streams is held, or while any partition
 * has live bytes (blocks not freed): nothing is torn down under running work. Thread-safe. */
devrt_status devrt_layout_destroy(devrt_runtime* rt, devrt_layout* layout);

/* Makes `layout` (NULL: none) the runtime's active layout: while one is active, the runtime's
 * default streams (devrt_stream_acquire, and launches and submissions that name stream 0) come
 * from its catch-all partition, so devrt-managed work stays inside the layout. Streams already
 * held keep their place. A pointer swap; thread-safe. */
devrt_status devrt_layout_activate(devrt_runtime* rt, devrt_layout* layout);

typedef struct devrt_layout_info {
  devrt_layout_plan plan; /* what was built */
  bool active;
  double create_ms; /* wall time devrt_layout_create took */
} devrt_layout_info;

/* Facts about a layout. Thread-safe. */
devrt_status devrt_layout_info_get(devrt_runtime* rt, devrt_layout* layout, devrt_layout_info* out);

/* Partition `index` of a layout (index < plan.partitions). Thread-safe. */
devrt_status devrt_layout_partition(devrt_runtime* rt, devrt_layout* layout, unsigned index,
                                    devrt_partition** out);

typedef struct devrt_partition_info {
  unsigned index;       /* in its layout */
  unsigned sm_count;    /* SMs granted, read from the green context's own resource (device
                           attributes stay device-wide); the device's count when not isolated */
  bool isolated;        /* a green context of its layout's split */
  bool catch_all;       /* the runtime's default streams come from here while active */
  bool remainder;       /* built from the split's remainder */
  bool cluster_capable; /* false when split with IGNORE_COSCHEDULING */
  unsigned streams, streams_in_use;
  int priority;
  devrt_resource_figures memory; /* the sub-budget: limit, live, pending, available */
} devrt_partition_info;

/* Facts about a partition. Thread-safe. */
devrt_status devrt_partition_info_get(devrt_runtime* rt, devrt_partition* p,
                                      devrt_partition_info* out);

/* Takes a stream of the partition's pool (modes as devrt_stream_acquire); release it with
 * devrt_stream_release. Its kernels run only on the partition's SMs. Thread-safe. */
devrt_status devrt_partition_stream_acquire(devrt_runtime* rt, devrt_partition* p,
                                            devrt_acquire_mode mode, devrt_stream* out);

/* The partition a stream belongs to (NULL for the runtime's own pool). Thread-safe. */
devrt_status devrt_stream_partition(devrt_runtime* rt, devrt_stream stream, devrt_partition** out);

/* Sets the partition's memory sub-budget (nested under the device budget; at most its limit).
 * Allocations on the partition's streams (blocks, queued allocs) and through
 * devrt_partition_resource count against it; one partition cannot take another's share.
 * Lowering it below the live bytes refuses later allocations until enough is freed.
 * Thread-safe. */
devrt_status devrt_partition_set_budget(devrt_runtime* rt, devrt_partition* p,
                                        uint64_t limit_bytes);

/* The partition's resource (its sub-budget over the runtime's stack), borrowed: valid while the
 * layout lives. Thread-safe. */
devrt_status devrt_partition_resource(devrt_runtime* rt, devrt_partition* p, devrt_resource** out);

/* Whether a and b run on disjoint SMs: true only for two different isolated partitions of the
 * same layout. Partitions of separately created layouts are never reported disjoint (separate
 * splits return the same SMs). Thread-safe. */
devrt_status devrt_partitions_disjoint(devrt_runtime* rt, devrt_partition* a, devrt_partition* b,
                                       bool* out);

typedef struct devrt_partition_stats {
  uint64_t layouts_created, layouts_live;
  uint64_t fallbacks; /* layouts built as plain streams because green contexts were missing
                         or refused (DEVRT_LAYOUT_ALLOW_FALLBACK) */
  uint64_t plain;     /* layouts built as plain streams on request (PLAIN_STREAMS) */
} devrt_partition_stats;

/* The runtime's layout counters. Thread-safe. */
devrt_status devrt_partition_stats_get(devrt_runtime* rt, devrt_partition_stats* out);

#ifdef __cplusplus
}
#endif
#endif
