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

/* `size` bytes usable by work on `stream` queued after the call; NULL with devrt_last_error() set
 * on failure (OVER_BUDGET, OUT_OF_MEMORY, a refused stream, a bad device), which PyTorch raises
 * as torch.OutOfMemoryError. size 0 gives NULL without an error (PyTorch asks for 0 bytes for
 * empty tensors and frees NULL). Thread-safe. */
void* devrt_torch_alloc(size_t size, int device, void* stream);

/* Stream-ordered free of (ptr, size) from devrt_torch_alloc: the memory is reused once work
 * queued on `stream` before the call is done. ptr NULL does nothing; a failure sets
 * devrt_last_error(). Thread-safe. */
void devrt_torch_free(void* ptr, size_t size, int device, void* stream);

#ifdef __cplusplus
}
#endif
#endif
