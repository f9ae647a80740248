/* devrt/memory.h: the device's stream-ordered memory pool and stream-ordered copies.
 * This is the raw pool under the resource stack: it counts no budget and tracks no block. */
#ifndef DEVRT_MEMORY_H
#define DEVRT_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include "devrt/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Stream-ordered allocation from devrt's own pool for this device: usable by work queued on
 * `stream` after this call (other streams must wait for it). size 0 is INVALID_ARGUMENT.
 * Thread-safe. */
devrt_status devrt_pool_alloc(devrt_runtime* rt, size_t size, devrt_stream stream, void** out);
/* Stream-ordered free: the memory returns to the pool once `stream` reaches this point.
 * Thread-safe. */
devrt_status devrt_pool_free(devrt_runtime* rt, void* ptr, devrt_stream stream);

typedef struct devrt_pool_stats {
  uint64_t used_current, used_high;         /* bytes handed out */
  uint64_t reserved_current, reserved_high; /* bytes the pool holds from the device */
  uint64_t release_threshold;
} devrt_pool_stats;

/* The pool's attributes. Thread-safe. */
devrt_status devrt_pool_stats_get(devrt_runtime* rt, devrt_pool_stats* out);
/* Releases reserved-but-unused memory down to keep_bytes (devrt_resource_trim gives cached
 * blocks back to the pool and leaves its reserve). Thread-safe. */
devrt_status devrt_pool_trim(devrt_runtime* rt, size_t keep_bytes);
/* Clears the high-water marks to the current values. Thread-safe. */
devrt_status devrt_pool_reset_high(devrt_runtime* rt);

/* Synchronous device allocation outside the pool (cuMemAlloc / cuMemFree). Thread-safe. */
devrt_status devrt_mem_alloc(devrt_runtime* rt, size_t size, void** out);
devrt_status devrt_mem_free(devrt_runtime* rt, void* ptr);

/* Stream-ordered byte fill and copy (device or host pointers; host ones must stay valid until
 * the stream reaches the copy). Thread-safe. */
devrt_status devrt_memset_async(devrt_runtime* rt, void* ptr, int byte, size_t size,
                                devrt_stream stream);
devrt_status devrt_memcpy_async(devrt_runtime* rt, void* dst, const void* src, size_t size,
                                devrt_stream stream);

#ifdef __cplusplus
}
#endif
#endif
