/* devrt/torch.h: PyTorch's pluggable-allocator entry points, exported by libdevrt with the
 * signatures torch.cuda.memory.CUDAPluggableAllocator expects (cudaStream_t spelled void*):
 *
 *   alloc = torch.cuda.memory.CUDAPluggableAllocator("libdevrt.so", "devrt_torch_alloc",
 *                                                     "devrt_torch_free")
 *   torch.cuda.memory.change_current_allocator(alloc)
 *
 * Memory comes from the process-wide runtime of `device` (devrt_runtime_get) through its stack
 * (devrt_runtime_resource: budget, logging, statistics, caching, async) under the tag "torch",
 * on `stream` imported as a devrt stream (devrt_stream_import) at its first use and kept for the
 * life of the process; stream 0 is the legacy default stream, as devrt_stream_import says. */
#ifndef DEVRT_TORCH_H
#define DEVRT_TORCH_H

#include <stddef.h>
#include <stdint.h>
#include "devrt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `size` bytes usable by work on `stream` queued after the call. Refused by the budget or the
 * device, it waits for the stack's pending frees, empties its cache and tries once more, as
 * PyTorch's own allocator does before it reports out of memory. NULL with devrt_last_error() set
 * on failure (OVER_BUDGET, OUT_OF_MEMORY, a refused stream, a bad device). PyTorch 2.11's
 * pluggable allocator takes NULL as a pointer rather than raising (docs/python.md). size 0 gives
 * NULL without an error (PyTorch asks for 0 bytes for empty tensors and frees NULL). Thread-safe.
 */
void* devrt_torch_alloc(size_t size, int device, void* stream);

/* Stream-ordered free of (ptr, size) from devrt_torch_alloc: the memory is reused once work
 * queued on `stream` before the call is done, and on every stream recorded for ptr (below).
 * All or nothing, since PyTorch never retries a free: where devrt cannot order the free after a
 * recorded stream on the device (a stream it cannot import, such as another device's or
 * DEVRT_STREAM_PER_THREAD, or a failed event or wait) it waits for that stream's work on the
 * host first; a free's own stream devrt cannot import is waited for on the host and the free
 * goes on the runtime's own stream; a free that fails anyway (a transient backend failure) is
 * tried once more from the start. Only if that fails too does the call fail: devrt_last_error()
 * is set, the allocation stays live and its recorded streams stay recorded. devrt_torch_stats
 * counts each of these. ptr NULL does nothing. Thread-safe. */
void devrt_torch_free(void* ptr, size_t size, int device, void* stream);

/* PyTorch's record-stream hook (Tensor.record_stream; devrt.torch.use sets it): `stream` (of any
 * device) also uses ptr. The free of ptr then makes its own stream wait for the work queued on
 * `stream` up to the free, so the memory is reused only after that work too (the free's stream
 * waits: a later allocation on it is ordered after the reader), or waits for it on the host
 * where devrt cannot (devrt_torch_free). ptr NULL does nothing; out of host memory for the record
 * sets devrt_last_error(). Thread-safe. */
void devrt_torch_record_stream(void* ptr, void* stream);

/* CUDA graphs (torch.cuda.graph under these entry points). An allocation for a stream being
 * captured is made on the runtime's own stream with the thread's capture mode relaxed and waited
 * for there, so nothing is enqueued on the capturing stream (whose work runs at each replay).
 * Such an allocation, and any allocation freed on a capturing stream, is held when PyTorch frees
 * it, since a replay may still use it and the pluggable interface does not say when a graph is
 * destroyed: devrt_torch_graph_release(device) waits for all work on the device and gives back
 * every held allocation (call it once the graphs that may use them are deleted; *bytes, which may
 * be NULL, gets how many bytes). Allocations made for a capture that PyTorch has not freed stay
 * live and are held when it does. INVALID_ARGUMENT for a device out of range; a failed free
 * leaves the rest held. Thread-safe. */
devrt_status devrt_torch_graph_release(int device, uint64_t* bytes);

/* What the entry points did on one device since the process started. */
typedef struct devrt_torch_stats {
  uint64_t alloc_retries;    /* allocations refused once, then tried again after the pending frees
                              * were waited for and the cache emptied (PyTorch's num_alloc_retries) */
  uint64_t ooms;             /* allocations refused after that too: NULL (PyTorch's num_ooms) */
  uint64_t device_waits;     /* recorded streams a free was ordered after on the device */
  uint64_t host_waits;       /* streams a free waited for on the host instead (see the free) */
  uint64_t frees_retried;    /* frees that failed once and were tried again */
  uint64_t frees_failed;     /* frees that failed after all: the allocation stayed live */
  uint64_t graph_allocs;     /* allocations for a stream being captured into a CUDA graph */
  uint64_t graph_held_bytes; /* freed by PyTorch, held for graphs (devrt_torch_graph_release) */
  uint64_t graph_released_bytes; /* given back by devrt_torch_graph_release */
} devrt_torch_stats;

/* A snapshot of device's counters (each read atomically). INVALID_ARGUMENT for a device out of
 * [0, DEVRT_MAX_ORDINALS) or out NULL. Thread-safe. */
devrt_status devrt_torch_stats_get(int device, devrt_torch_stats* out);

#ifdef __cplusplus
}
#endif
#endif
