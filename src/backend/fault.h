/* fault.h (internal): fault injection at every entry of the backend table. A runtime created while
 * injection is enabled calls its backend through a wrapping table (fault.c) that counts every
 * entry's calls and fails the one armed call; other runtimes call the backend directly. */
#ifndef DEVRT_BACKEND_FAULT_H
#define DEVRT_BACKEND_FAULT_H

#include <stdint.h>
#include "backend.h"

/* Every entry of dv_backend but `name`, in the table's order. */
/* clang-format off */
#define DV_BACKEND_OPS(X)                                                                        \
  X(launch) X(event_record) X(stream_wait) X(event_query) X(pool_alloc) X(pool_free)             \
  X(stream_sync) X(stream_native) X(device_count) X(device_open) X(device_close) X(device_info)  \
  X(stream_create) X(stream_destroy) X(stream_wrap) X(stream_unwrap) X(stream_legacy)            \
  X(stream_sync_native) X(event_create) X(event_destroy) X(event_sync) X(host_func) X(pool_stats) X(pool_trim)         \
  X(pool_reset_high) X(mem_alloc) X(mem_free) X(memset_async) X(memcpy_async) X(va_page)         \
  X(va_reserve) X(va_release) X(va_map) X(va_unmap) X(module_load)                               \
  X(module_load_host) X(module_unload) X(kernel_get) X(kernel_params) X(sm_resource) X(sm_split) \
  X(green_create) X(green_resource) X(green_destroy) X(fault_arm) X(peer_query) X(peer_enable)   \
  X(peer_disable) X(memcpy_peer) X(device_enter) X(device_leave) X(capture_begin) X(capture_end) \
  X(graph_launch) X(graph_destroy) X(stream_capturing) X(capture_mode_swap)
/* clang-format on */

#define DV_OP_ENUM_(name) DV_OP_##name,
typedef enum dv_op { DV_BACKEND_OPS(DV_OP_ENUM_) DV_OP_COUNT } dv_op;
#undef DV_OP_ENUM_

/* The entry's name ("event_record"); DV_OP_COUNT for a name that is none. */
const char* dv_op_name(dv_op op);
dv_op dv_op_find(const char* name);
/* Whether the entry returns a status. The others (destroy, close, unwrap, unload, disable, leave,
 * va_release, stream_native, fault_arm, capture_mode_swap) cannot fail: their calls are counted
 * and never failed. */
bool dv_op_can_fail(dv_op op);
/* The status an injected fault of `op` fails with unless told another: DEVICE_ALLOC_FAILED for
 * pool_alloc, mem_alloc and va_map, else BACKEND_ERROR. */
devrt_status dv_op_usual_failure(dv_op op);

/* Runtimes created from now on (this process) go through the wrapper. Thread-safe. */
void dv_fault_enable(void);
/* Fails the nth call of `op` counted from now (1: the next one) with `status` (DEVRT_OK: the
 * op's usual failure, dv_op_usual_failure); nth 0 disarms. Enables the wrapper. INVALID_ARGUMENT
 * for an op that cannot fail or a status out of range. One call of each op is armed at a time.
 * Thread-safe. */
devrt_status dv_fault_inject(dv_op op, uint64_t nth, devrt_status status);
/* Calls of `op` through the wrapper since the process started (every runtime together). */
uint64_t dv_fault_calls(dv_op op);
/* Faults injected so far (every op). */
uint64_t dv_fault_fired(void);

/* runtime_new's hook: *be becomes the wrapper of *be when injection is enabled, by
 * dv_fault_enable or by DEVRT_FAULT (read once, at the first runtime's creation:
 * `op:N[:STATUS]` fails op's Nth call, `count` prints every op's calls at exit). INVALID_ARGUMENT
 * for a malformed DEVRT_FAULT; INVALID_STATE for a second backend (one is wrapped per process)
 * or a table entry the wrapper does not cover. */
devrt_status dv_fault_select(const dv_backend** be);

#endif
