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
  DEVRT_ACQUIRE_SHARE,    /* none free: share a stream in use (round-robin); each holder releases */
} devrt_acquire_mode;

/* Takes a stream from the pool (a released one first, else a new one up to the pool size).
 * Streams are non-blocking with the configured priority. Thread-safe. */
devrt_status devrt_stream_acquire(devrt_runtime* rt, devrt_acquire_mode mode, devrt_stream* out);

/* Gives the stream back; its queued work keeps running and the next holder's work is ordered
 * after it (same stream). The id is dead afterwards. Thread-safe. */
devrt_status devrt_stream_release(devrt_runtime* rt, devrt_stream stream);

/* Blocks until all work queued on the stream has completed. Thread-safe. */
devrt_status devrt_stream_synchronize(devrt_runtime* rt, devrt_stream stream);

/* The backend's handle, for interop: a CUstream on cuda, an opaque pointer on host. Valid while
 * the id is held. Thread-safe. */
devrt_status devrt_stream_native(devrt_runtime* rt, devrt_stream stream, void** out);

typedef void (*devrt_host_fn)(void* user);

/* Enqueues fn(user) on the stream: it runs on a driver (or worker) thread once prior work is
 * done, and later work waits for it. fn must not call devrt stream or event functions.
 * Thread-safe. */
devrt_status devrt_stream_host_func(devrt_runtime* rt, devrt_stream stream, devrt_host_fn fn,
                                    void* user);

#ifdef __cplusplus
}
#endif
#endif
