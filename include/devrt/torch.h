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
 * queued on `stream` before the call is done. ptr NULL does nothing; a failure sets
 * devrt_last_error(). Thread-safe. */
void devrt_torch_free(void* ptr, size_t size, int device, void* stream);

/* PyTorch's record-stream hook (Tensor.record_stream; devrt.torch.use sets it): `stream` also
 * uses ptr. The free of ptr then makes its own stream wait for the work queued on `stream` up to
 * the free, so the memory is reused only after that work too (the free's stream waits: a later
 * allocation on it is ordered after the reader). ptr NULL does nothing; a stream devrt refuses
 * is reported by that free. A failure sets devrt_last_error(). Thread-safe. */
void devrt_torch_record_stream(void* ptr, void* stream);

#ifdef __cplusplus
}
#endif
#endif
