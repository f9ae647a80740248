/* devrt/launch.h: modules, kernels and recorded launches.
 *
 * A recorded launch runs the seed's five steps in one call: acquire (or reuse) a stream,
 * prepare every block the work touches, launch, record the uses, reap completed frees. The use
 * list is deduplicated (read + write of one block -> read-write) and validated in full before
 * anything is enqueued, so a refused launch leaves no wait, event or use behind. */
#ifndef DEVRT_LAUNCH_H
#define DEVRT_LAUNCH_H

#include "devrt/block.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_module devrt_module;
typedef struct devrt_kernel devrt_kernel;

/* Loads a module: image NULL gives devrt's own kernels (the embedded fatbin on cuda, their C
 * versions on host); otherwise a cubin, PTX or fatbin image (cuda only: UNSUPPORTED on host,
 * whose counterpart is devrt_module_load_host below).
 * devrt's kernels: devrt_fill_u32(u32* p, u32 value, u64 n), devrt_copy_u32(u32* dst,
 * const u32* src, u64 n), devrt_checksum_u32(const u32* p, u64 n, u64* out: atomically added),
 * devrt_slow_fill_u32(p, value, n, u64 delay_ns) and devrt_slow_copy_u32(dst, src, n, delay_ns)
 * (each block waits delay_ns first: they expose races), devrt_record_smid(u32* out), and on cuda
 * only devrt_trap() (faults the context for good: for tests of device loss).
 * Thread-safe. */
devrt_status devrt_module_load(devrt_runtime* rt, const void* image, devrt_module** out);
/* A host kernel's view of one block: CUDA's blockIdx, gridDim and blockDim, and the worker
 * "SM" the host backend placed the block on. */
typedef struct devrt_dim3 {
  unsigned x, y, z;
} devrt_dim3;
typedef struct devrt_host_grid {
  devrt_dim3 block_idx, grid_dim, block_dim;
  unsigned sm;
} devrt_host_grid;
/* A host kernel runs once per block, on its stream's worker thread; the block's threads are the
 * function's own loop. args are CUDA-style kernelParams: args[i] points at argument i's bytes. */
typedef void (*devrt_host_kernel_fn)(const devrt_host_grid* grid, void** args);

#define DEVRT_HOST_KERNEL_MAX_ARGS 8u
#define DEVRT_HOST_MODULE_MAX_KERNELS 4096u

typedef struct devrt_host_kernel {
  const char* name;
  devrt_host_kernel_fn fn;
  unsigned nargs;                                /* 0..DEVRT_HOST_KERNEL_MAX_ARGS */
  unsigned arg_size[DEVRT_HOST_KERNEL_MAX_ARGS]; /* bytes of each argument, 1..256 */
} devrt_host_kernel;

/* Loads a module of a program's own host kernels: what the host backend runs where cuda loads the
 * program's CUDA image, so the same names and arguments launch, record their uses and queue
 * (parked launches copy arg_size bytes per argument) on either backend. The table and its names
 * are copied. INVALID_ARGUMENT: rt, table or out NULL, count 0 or above
 * DEVRT_HOST_MODULE_MAX_KERNELS, an entry without a name or function, nargs above
 * DEVRT_HOST_KERNEL_MAX_ARGS, an argument size of 0 or above 256, a name given twice.
 * UNSUPPORTED on a cuda runtime (host functions do not run on a GPU). Thread-safe. */
devrt_status devrt_module_load_host(devrt_runtime* rt, const devrt_host_kernel* table,
                                    unsigned count, devrt_module** out);
/* Unloads it; its kernels are dead afterwards. Not thread-safe with launches of its kernels. */
devrt_status devrt_module_unload(devrt_runtime* rt, devrt_module* module);
/* Looks a kernel up by name. The handle lives as long as the module. Thread-safe. */
devrt_status devrt_kernel_get(devrt_module* module, const char* name, devrt_kernel** out);

typedef struct devrt_block_use {
  devrt_block block;
  devrt_access access;
} devrt_block_use;

/* Foreign stream-ordered work (a cuBLAS or NCCL call, a memcpy): enqueue it on `native` (a
 * CUstream on cuda, the host backend's stream handle on host) and return its status. Runs on the
 * calling thread, between prepare and record. Work it puts on another stream is covered only if
 * it joins that stream back into `native` before returning (record an event there, wait on it
 * here): devrt records the launch's end on `native` alone. The launch holds its blocks while the
 * callback runs: a free of one of them from another thread waits until the launch has recorded
 * its use, so the callback must not wait for a thread that frees one; a free of a block held by a
 * launch being issued, called from inside a callback, is refused (INVALID_STATE). */
typedef devrt_status (*devrt_enqueue_fn)(void* user, devrt_stream stream, void* native);

typedef struct devrt_launch_desc {
  devrt_stream stream;        /* 0: acquire one from the pool (SHARE) for this launch */
  devrt_kernel* kernel;       /* the work: a kernel, or ... */
  devrt_enqueue_fn enqueue;   /* ... foreign work (exactly one of the two) */
  void* user;                 /* passed to enqueue */
  unsigned grid[3], block[3]; /* 0 in y or z means 1; CUDA's limits hold on every backend */
  unsigned shared_bytes;
  void** args; /* CUDA kernelParams: one pointer per argument */
  const devrt_block_use* uses;
  unsigned nuses; /* at most DEVRT_LAUNCH_MAX_USES */
} devrt_launch_desc;

#define DEVRT_LAUNCH_MAX_USES 256u

/* Issues one recorded launch. Refused with nothing enqueued: a stale or foreign block
 * (STALE_BLOCK), block 0 or a bad stream, kernel, shape or access (INVALID_ARGUMENT), a block
 * being freed (INVALID_STATE). A backend failure to wait or launch leaves the blocks' records as
 * they were; if the record after the work fails, devrt synchronizes the stream before
 * returning the error, so no untracked work is left running. Thread-safe. */
devrt_status devrt_launch(devrt_runtime* rt, const devrt_launch_desc* desc);

#ifdef __cplusplus
}
#endif
#endif
