/* devrt/stream.h: the runtime's bounded, reusable stream pool.
 * A devrt_stream is a value id, unique for the life of the process: a released, foreign
 * (another runtime's) or made-up id is refused with INVALID_ARGUMENT, never misused. */
#ifndef DEVRT_STREAM_H
#define DEVRT_STREAM_H

#include <stdint.h>
#include "devrt/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t devrt_stream; /* 0 is never a valid stream */
#define DEVRT_STREAM_NONE ((devrt_stream)0)

typedef enum devrt_acquire_mode {
  DEVRT_ACQUIRE_FAIL = 0, /* none free: OUT_OF_RESOURCES */
  DEVRT_ACQUIRE_WAIT,     /* none free: block until one is released */
  DEVRT_ACQUIRE_SHARE,    /* none free: share a stream in use (round-robin, passing over streams
                             a thread captures unless all do); each holder releases */
} devrt_acquire_mode;

/* Takes a stream from the pool (a released one first, else a new one up to the pool size).
 * Streams are non-blocking with the configured priority. Thread-safe. */
devrt_status devrt_stream_acquire(devrt_runtime* rt, devrt_acquire_mode mode, devrt_stream* out);

/* Gives the stream back; its queued work keeps running and the next holder's work is ordered
 * after it (same stream). The id is dead afterwards. INVALID_STATE while a thread captures it
 * (graph.h), but for a share another holder keeps (a share taken before the capture began, given
 * back by another thread). Thread-safe. */
devrt_status devrt_stream_release(devrt_runtime* rt, devrt_stream stream);

/* Blocks until all work queued on the stream has completed. Thread-safe. */
devrt_status devrt_stream_synchronize(devrt_runtime* rt, devrt_stream stream);

/* The backend's handle, for interop: a CUstream on cuda, an opaque pointer on host. Valid while
 * the id is held. Thread-safe. */
devrt_status devrt_stream_native(devrt_runtime* rt, devrt_stream stream, void** out);

/* ---- foreign streams: a framework's stream as a devrt stream id ---- */

/* CUDA's special stream handles (CU_STREAM_LEGACY / cudaStreamLegacy, CU_STREAM_PER_THREAD /
 * cudaStreamPerThread). NULL, like DEVRT_STREAM_LEGACY, names the legacy default stream. */
#define DEVRT_STREAM_LEGACY ((void*)0x1)
#define DEVRT_STREAM_PER_THREAD ((void*)0x2)

/* Turns a stream devrt did not create into a stream id every devrt call takes like a pool
 * stream's (per-stream caching, stream-ordered frees, blocks, recorded launches, the queue).
 * native: on cuda a CUstream of the device's primary context (the runtime API's and PyTorch's)
 * or of a green context of it (devrt's events must be recordable on it); on host, a host
 * stream of the same ordinal (e.g. another runtime's devrt_stream_native). It must stay alive
 * until its last import is forgotten; devrt never destroys it. When it is a stream another live
 * devrt runtime created, that runtime's destroy (or its partition's layout's) is refused with
 * INVALID_STATE until the import is forgotten.
 * Importing a handle already imported (and not yet forgotten as often) gives the same id and
 * counts one more import. NULL and DEVRT_STREAM_LEGACY name the legacy default stream: devrt
 * gives it a stream of its own that CUDA orders with it both ways (a blocking stream of the
 * primary context: it waits for earlier legacy-stream work, later legacy-stream work waits for
 * it), so work devrt issues on the id is ordered with the framework's work on stream 0;
 * devrt_stream_native of that id gives this stream, not NULL. DEVRT_STREAM_PER_THREAD is
 * refused (UNSUPPORTED): it is another stream on every thread, and devrt issues a stream's work
 * from several threads. A stream devrt created for this runtime (its pool's, a partition's, its
 * own) is refused (INVALID_ARGUMENT: use its id). Imported streams take the slots kept for
 * partitions: OUT_OF_RESOURCES, naming DEVRT_PARTITION_STREAMS, when none is left. Thread-safe. */
devrt_status devrt_stream_import(devrt_runtime* rt, void* native, devrt_stream* out);

/* Drops one import of `stream`. The last one synchronizes the stream, has every layer forget it
 * (caches, pending frees, marks), gives the slot back and makes the id stale (refused by every
 * call, a second forget included); the native stream itself is left alone. No call on the id may
 * be in flight then. If that synchronize fails, its status is returned and nothing is forgotten:
 * the import is held as before. A pool stream's id is refused (release it). Thread-safe. */
devrt_status devrt_stream_forget(devrt_runtime* rt, devrt_stream stream);

typedef void (*devrt_host_fn)(void* user);

/* Enqueues fn(user) on the stream: it runs on a driver (or worker) thread once prior work is
 * done, and later work waits for it. fn must not call devrt: on cuda no CUDA call is allowed
 * there, and on either backend a call may wait for this very stream (a synchronize, a reap or an
 * allocation's pressure ladder, a semaphore wait, a launch or submit that issues). Thread-safe. */
devrt_status devrt_stream_host_func(devrt_runtime* rt, devrt_stream stream, devrt_host_fn fn,
                                    void* user);

#ifdef __cplusplus
}
#endif
#endif
