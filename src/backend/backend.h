/* backend.h: the device layer's one internal interface. The cuda backend (cuda.c) and the host
 * backend (host.c) each fill a dv_backend vtable; the runtime above calls only through it.
 * Handles are opaque per backend; every function reports failure through dv_fail. */
#ifndef DEVRT_BACKEND_H
#define DEVRT_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "devrt/device.h"
#include "devrt/event.h"
#include "devrt/launch.h"
#include "devrt/memory.h"
#include "devrt/partition.h"
#include "devrt/peer.h"
#include "devrt/runtime.h"
#include "../core/error.h"

typedef struct dv_dev dv_dev;       /* one opened device */
typedef struct dv_stream dv_stream; /* CUstream / host worker */
typedef struct dv_event dv_event;   /* CUevent / host fence */
typedef struct dv_module dv_module; /* CUmodule / host kernel table */
typedef struct dv_graph dv_graph;   /* CUgraphExec / host list of recorded ops */
typedef struct dv_kernel dv_kernel; /* CUfunction / host kernel entry */
typedef struct dv_green dv_green;   /* CUgreenCtx / host worker slice */

/* An SM resource (CUdevResource on cuda, a worker set on host) in bytes the backend owns;
 * sms is its SM count. */
typedef struct dv_res {
  _Alignas(16) unsigned char opaque[192];
  unsigned sms;
  bool splittable; /* the device's, or a green context's (not a split output) */
} dv_res;

/* A host-backend kernel (launch.h's public devrt_host_kernel): run once per block of the grid;
 * args are CUDA-style kernelParams, arg_size the bytes of each, so a launch can copy them. The
 * grid's sm is the worker "SM" the block is placed on: blocks go round-robin over the stream's
 * slice. */
typedef devrt_dim3 dv_dim3;
typedef devrt_host_grid dv_host_grid;
typedef devrt_host_kernel dv_host_kernel_def;

/* Fault injection (tests): the Nth call (1-based, counted from arming) of an op fails.
 * DV_FAULT_GREEN fails a green context creation with UNSUPPORTED, as a driver that refuses them
 * (a virtual GPU, MPS) does.
 * DV_FAULT_DEVICE is sticky, like a CUDA launch fault: from its Nth event query or synchronize
 * on, every event query and synchronize fails (a lost device). */
typedef enum dv_fault_op {
  DV_FAULT_ALLOC,
  DV_FAULT_FREE,
  DV_FAULT_EVENT_RECORD,
  DV_FAULT_DEVICE,
  DV_FAULT_GREEN,
  DV_FAULT_OPS_
} dv_fault_op;

/* A memory figure both backends keep for pool_stats: n bytes more in *now, and *high raised to
 * it (relaxed: figures, read by nothing that orders on them). */
static inline void dv_figure_add(_Atomic uint64_t* now, _Atomic uint64_t* high, uint64_t n) {
  uint64_t v = atomic_fetch_add_explicit(now, n, memory_order_relaxed) + n;
  uint64_t h = atomic_load_explicit(high, memory_order_relaxed);
  while (h < v && !atomic_compare_exchange_weak_explicit(high, &h, v, memory_order_relaxed,
                                                         memory_order_relaxed)) {}
}

typedef struct dv_backend {
  /* The calls between which launches and allocations run, in one line: a launch reads one line
   * of the table, not three. */
  _Alignas(64) devrt_status (*launch)(dv_stream* s, dv_kernel* k, const unsigned grid[3],
                                      const unsigned block[3], unsigned shmem,
                                      void** args); /* grid, block: a y or z of 0 means 1 */
  devrt_status (*event_record)(dv_event* e, dv_stream* s);
  devrt_status (*stream_wait)(dv_stream* s, dv_event* e);
  devrt_status (*event_query)(dv_event* e, bool* complete);
  devrt_status (*pool_alloc)(dv_dev* d, size_t size, dv_stream* s, void** out);
  devrt_status (*pool_free)(dv_dev* d, void* p, dv_stream* s);
  devrt_status (*stream_sync)(dv_stream* s);
  void* (*stream_native)(dv_stream* s);

  const char* name;
  devrt_status (*device_count)(int* out);
  devrt_status (*device_open)(const devrt_config* cfg, dv_dev** out);
  void (*device_close)(dv_dev* d);
  devrt_status (*device_info)(dv_dev* d, devrt_device_info* out);

  /* green: NULL for the whole device (primary context) */
  devrt_status (*stream_create)(dv_dev* d, dv_green* green, int priority, dv_stream** out);
  void (*stream_destroy)(dv_dev* d, dv_stream* s);
  /* Foreign streams (devrt_stream_import). stream_wrap: a dv_stream for a live native stream
   * devrt did not create (a CUstream of the device; on host, a host stream of a device of the
   * same ordinal), which stream_unwrap forgets without destroying the native stream.
   * stream_legacy: a stream devrt owns (stream_destroy) standing for the device's legacy default
   * stream: on cuda a blocking stream (no CU_STREAM_NON_BLOCKING) of the primary context, which
   * CUDA orders after earlier and before later work of that context's legacy stream; on host a
   * plain stream (the host has no legacy stream). */
  devrt_status (*stream_wrap)(dv_dev* d, void* native, dv_stream** out);
  void (*stream_unwrap)(dv_dev* d, dv_stream* s);
  devrt_status (*stream_legacy)(dv_dev* d, dv_stream** out);
  /* Waits on the host for the work queued so far on a native stream devrt may be unable to
   * import (another device's, DEVRT_STREAM_PER_THREAD): on cuda cuStreamSynchronize with d's
   * context current (NULL and the legacy handle name its legacy stream), and for the per-thread
   * handle, which is another stream on every thread, a synchronize of d's whole context; on host
   * a live host stream of any ordinal (NULL, legacy and per-thread name no host stream: nothing
   * can be queued there). */
  devrt_status (*stream_sync_native)(dv_dev* d, void* native);

  devrt_status (*event_create)(dv_dev* d, unsigned flags, dv_event** out);
  void (*event_destroy)(dv_dev* d, dv_event* e);
  devrt_status (*event_sync)(dv_event* e);
  /* fn(user) on s once the work before it is done. copy > 0 (host backend only; cuda refuses it):
   * the op keeps a copy of the `copy` bytes at user and passes fn that copy, which lives as long
   * as the op (a recorded op's: as long as the graph that holds it; fn may change it). */
  devrt_status (*host_func)(dv_stream* s, devrt_host_fn fn, void* user, size_t copy);

  devrt_status (*pool_stats)(dv_dev* d, devrt_pool_stats* out);
  devrt_status (*pool_trim)(dv_dev* d, size_t keep);
  devrt_status (*pool_reset_high)(dv_dev* d);
  devrt_status (*mem_alloc)(dv_dev* d, size_t size, void** out);
  devrt_status (*mem_free)(dv_dev* d, void* p);
  devrt_status (*memset_async)(dv_stream* s, void* p, int byte, size_t size);
  devrt_status (*memcpy_async)(dv_stream* s, void* dst, const void* src, size_t size);
  /* Address ranges backed page by page (cuda: cuMemAddressReserve, then one cuMemCreate and
   * cuMemMap a page; host: an mmap'd range whose pages are made accessible). va_page: the page in
   * bytes, a power of two (cuda: the recommended granularity, 2 MiB on Hopper; host: 64 KiB).
   * va_reserve: `size` (whole pages) bytes of addresses, nothing behind them; va_release gives
   * them back (every page unmapped first). va_map: new memory behind [p, p + size), whole pages
   * of a reserved range that are not mapped, read and write from d; on failure nothing of it
   * stays mapped. va_unmap: gives back the memory of whole mapped pages (any run of them). The
   * pages mapped now are part of pool_stats' used and reserved figures (the high-water marks
   * add the pool's and the pages' own: a bound, exact when only one of the two is used). */
  devrt_status (*va_page)(dv_dev* d, size_t* out);
  devrt_status (*va_reserve)(dv_dev* d, size_t size, void** out);
  void (*va_release)(dv_dev* d, void* p, size_t size);
  devrt_status (*va_map)(dv_dev* d, void* p, size_t size);
  devrt_status (*va_unmap)(dv_dev* d, void* p, size_t size);

  /* image NULL: devrt's embedded kernels (the fatbin on cuda, the host table on host) */
  devrt_status (*module_load)(dv_dev* d, const void* image, dv_module** out);
  /* A program's host kernels (devrt_module_load_host), checked and copied; NULL on cuda. */
  devrt_status (*module_load_host)(dv_dev* d, const devrt_host_kernel* table, unsigned count,
                                   dv_module** out);
  void (*module_unload)(dv_dev* d, dv_module* m);
  devrt_status (*kernel_get)(dv_module* m, const char* name, dv_kernel** out);
  /* The byte size of each of k's parameters (at most `max`), so a deferred launch can copy them. */
  devrt_status (*kernel_params)(dv_kernel* k, unsigned max, unsigned* sizes, unsigned* n);

  /* SM resources, splits and green contexts (host: sets of worker "SMs"). A split output can
   * be split again only through the resource of a green context built from it, as on CUDA. */
  devrt_status (*sm_resource)(dv_dev* d, dv_res* out); /* the whole device */
  /* One split of `in` into up to *n groups of at least min_sms SMs (DEVRT_SPLIT_* flags);
   * groups NULL: a dry run, *n gets how many the driver would give. rem gets the rest. */
  devrt_status (*sm_split)(dv_dev* d, const dv_res* in, unsigned min_sms, unsigned flags,
                           dv_res* groups, unsigned* n, dv_res* rem);
  /* A green context of the union of res[0..n) (outputs of one split); its streams come from
   * stream_create(d, g, ...). */
  devrt_status (*green_create)(dv_dev* d, const dv_res* res, unsigned n, dv_green** out);
  devrt_status (*green_resource)(dv_green* g, dv_res* out); /* the SMs it was granted */
  void (*green_destroy)(dv_dev* d, dv_green* g);

  void (*fault_arm)(dv_dev* d, dv_fault_op op, unsigned nth); /* nth 0 disarms */

  /* Several devices (src/multi). peer_query: what the driver says of the pair (out's
   * can_access, native_atomics, performance_rank, link; same_device); peer_enable: a's work may
   * reach b's memory (b's context's allocations and b's pool), peer_disable undoes it.
   * memcpy_peer: a copy on s from src (device sd's memory) to dst (device dd's). device_enter /
   * device_leave: d's context current on the calling thread, then the previous one again (for a
   * library that takes the current device: NCCL); nothing on host. */
  devrt_status (*peer_query)(dv_dev* a, dv_dev* b, devrt_peer_info* out);
  devrt_status (*peer_enable)(dv_dev* a, dv_dev* b);
  void (*peer_disable)(dv_dev* a, dv_dev* b);
  devrt_status (*memcpy_peer)(dv_stream* s, void* dst, dv_dev* dd, const void* src, dv_dev* sd,
                              size_t size);
  devrt_status (*device_enter)(dv_dev* d);
  void (*device_leave)(dv_dev* d);
  /* Graphs (src/graph): what is enqueued on s between capture_begin and capture_end is recorded,
   * not run (s is a stream of devrt's own that nothing else uses meanwhile), and becomes an
   * executable graph (s stays the caller's); graph_launch enqueues all of it on a stream as one
   * piece of work; graph_destroy may come while launches are in flight (they finish first).
   * cuda: stream capture (relaxed mode) and an instantiated graph, launched on a stream of its
   * own (made by capture_end in green, at priority) joined to the caller's by events; host: the
   * stream's ops kept in a list, run in order by the launching stream's worker. stream_capturing:
   * whether anyone (a framework's capture of a foreign stream too) captures s; capture_mode_swap:
   * exchanges the calling thread's capture mode (DV_CAPTURE_MODE_*) with *mode (host: nothing to
   * exchange). */
  devrt_status (*capture_begin)(dv_stream* s);
  devrt_status (*capture_end)(dv_dev* d, dv_stream* s, dv_green* green, int priority,
                              dv_graph** out);
  devrt_status (*graph_launch)(dv_graph* g, dv_stream* s);
  void (*graph_destroy)(dv_dev* d, dv_graph* g);
  devrt_status (*stream_capturing)(dv_stream* s, bool* out);
  void (*capture_mode_swap)(int* mode);
} dv_backend;
/* capture_mode_swap's modes: CUstreamCaptureMode's values. */
enum { DV_CAPTURE_MODE_GLOBAL = 0, DV_CAPTURE_MODE_THREAD_LOCAL = 1, DV_CAPTURE_MODE_RELAXED = 2 };
_Static_assert(offsetof(dv_backend, name) == 64, "the hot calls fill the table's first line");

extern const dv_backend dv_host_backend;
#ifdef DEVRT_HAVE_CUDA
extern const dv_backend dv_cuda_backend;
#endif
/* Whether be is the host backend's table or the fault-injection wrapper of it (fault.h), which
 * keeps the backend's name. */
static inline bool dv_is_host(const dv_backend* be) { return be->name == dv_host_backend.name; }

/* Host kernels shipped with devrt (kernels/host_kernels.c). */
extern const dv_host_kernel_def dv_host_kernels[];
extern const unsigned dv_host_kernel_count;

/* Counts down an armed fault; true when this call must fail. */
#include <stdatomic.h>
static inline bool dv_fault_hit(_Atomic unsigned* counter) {
  unsigned n = atomic_load_explicit(counter, memory_order_relaxed);
  while (n != 0) {
    if (atomic_compare_exchange_weak_explicit(counter, &n, n - 1, memory_order_relaxed,
                                              memory_order_relaxed)) /* a countdown only */
      return n == 1;
  }
  return false;
}

#endif
