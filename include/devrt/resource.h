/* devrt/resource.h: the device-memory resource interface and devrt's implementations, which
 * compose as decorators: budget -> logging -> statistics -> caching -> async (the runtime's
 * default stack), or any other order a caller builds. A decorator holds a reference to its
 * upstream. All resources are thread-safe. */
#ifndef DEVRT_RESOURCE_H
#define DEVRT_RESOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "devrt/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_resource devrt_resource;
typedef struct devrt_account devrt_account; /* the shared figures of one stack (devrt's, opaque) */

typedef struct devrt_memory_counter {
  int64_t current, peak, total;
} devrt_memory_counter;

/* What a resource knows of itself and everything beneath it. Fields a stack has no layer for
 * stay 0 (limit_bytes 0 means "no budget"). Byte figures are in the sizes the pool really
 * hands out (rounded to `granularity`). */
typedef struct devrt_resource_figures {
  uint64_t live_bytes;      /* allocated and not freed (a THROUGH budget: through it) */
  uint64_t pending_bytes;   /* freed stream-ordered; the free not yet observed complete */
  uint64_t cached_bytes;    /* held by a caching layer for reuse */
  uint64_t limit_bytes;     /* the nearest budget's limit (0: none) */
  uint64_t available_bytes; /* budget only: limit less what it counts (DEVICE: live, pending and
                             * cached beneath it; THROUGH: its own live bytes) */
  uint64_t granularity;     /* the pool's allocation granularity in bytes */
  uint64_t reaped_bytes;    /* total retired by reaps */
  uint64_t fallbacks;       /* budget fallback callbacks that ran */
  uint64_t cache_hits, cache_misses;
  uint64_t log_records, log_dropped;
  devrt_memory_counter bytes, count; /* statistics layer (overall) */
} devrt_resource_figures;

enum { DEVRT_REAP_WAIT = 1u }; /* reap: block until every pending free completed */

/* The vtable a resource implements; user resources fill one too (docs/memory.md has an example).
 * allocate: >= 256-byte aligned memory usable by work on `stream` queued after the call.
 * deallocate: stream-ordered free of (ptr, size) once work queued on `stream` is done.
 * query: fill what this layer knows, after asking its upstream.
 * reap / trim: retire completed frees / give cached bytes back; decorators forward them.
 * destroy: free the object (its upstream reference is dropped by devrt afterwards).
 * The last two entries are optional (NULL), and how a layer takes part in the rest of devrt:
 * deallocate_tagged: deallocate, also telling which tag the allocation was made with (*tag, NULL
 *   when unknown). Layers that keep a record per allocation have it; a statistics layer directly
 *   over one calls this instead of keeping a pointer map of its own.
 * stream_retired: `stream` (its last id, no longer valid: a key only) was synchronized and its
 *   slot's stream is being destroyed (a partition's pool went away): forget whatever the layer
 *   keeps for it; everything freed on it has completed. Called with no allocation or free on that
 *   stream in flight, for every live resource of the runtime that has the entry. */
typedef struct devrt_resource_vtable {
  devrt_status (*allocate)(devrt_resource* self, size_t size, devrt_stream stream, const char* tag,
                           void** out);
  devrt_status (*deallocate)(devrt_resource* self, void* ptr, size_t size, devrt_stream stream);
  devrt_status (*query)(devrt_resource* self, devrt_resource_figures* out);
  devrt_status (*reap)(devrt_resource* self, unsigned flags, uint64_t* reaped);
  devrt_status (*trim)(devrt_resource* self, uint64_t* released);
  void (*destroy)(devrt_resource* self);
  devrt_status (*deallocate_tagged)(devrt_resource* self, void* ptr, size_t size,
                                    devrt_stream stream, const char** tag);
  void (*stream_retired)(devrt_resource* self, devrt_stream stream);
} devrt_resource_vtable;

/* The common head of every resource; a user resource embeds it first and calls
 * devrt_resource_init. Fields are read-only after init. */
struct devrt_resource {
  const devrt_resource_vtable* vtable;
  const char* name;
  devrt_runtime* rt;
  devrt_resource* upstream;
  devrt_account* account; /* devrt's: set by devrt_resource_init */
  void* devrt_private;    /* devrt's: the reference count and registration, allocated by
                             devrt_resource_init, NULL once the last reference is released */
};

/* Initialises the head: one reference, retains upstream (may be NULL for a leaf), inherits its
 * account. OUT_OF_RESOURCES when there is no host memory for devrt's private part of the head
 * (then nothing is retained, and the caller frees r). Thread-safe. */
devrt_status devrt_resource_init(devrt_resource* r, const devrt_resource_vtable* vtable,
                                 const char* name, devrt_runtime* rt, devrt_resource* upstream);
/* Reference counting: the last release destroys the resource, then releases its upstream. */
devrt_status devrt_resource_retain(devrt_resource* r);
devrt_status devrt_resource_release(devrt_resource* r);

/* The largest size an allocation may ask for: 2^62 bytes (4 EiB), more than any device holds. */
#define DEVRT_MAX_ALLOC_SIZE ((uint64_t)1 << 62)

/* The checked entry points, which every layer is called through. A size of 0 or above
 * DEVRT_MAX_ALLOC_SIZE is INVALID_ARGUMENT before any layer sees it (devrt's policy: a zero-byte
 * request is a caller bug; a larger one could not be rounded or counted without overflowing);
 * tag may be NULL ("untagged") and must outlive the runtime (a string literal). */
devrt_status devrt_resource_allocate(devrt_resource* r, size_t size, devrt_stream stream,
                                     const char* tag, void** out);
devrt_status devrt_resource_deallocate(devrt_resource* r, void* ptr, size_t size,
                                       devrt_stream stream);
devrt_status devrt_resource_query(devrt_resource* r, devrt_resource_figures* out);
devrt_status devrt_resource_reap(devrt_resource* r, unsigned flags, uint64_t* reaped);
devrt_status devrt_resource_trim(devrt_resource* r, uint64_t* released);
const char* devrt_resource_name(const devrt_resource* r);
devrt_resource* devrt_resource_upstream(const devrt_resource* r);

/* ---- the runtime's stack ---- */

/* The runtime's resource stack (borrowed: valid while rt lives), built on first use from the
 * config (DEVRT_BUDGET, DEVRT_CACHE, DEVRT_ARENA, DEVRT_LOG, DEVRT_LOG_FORMAT): budget -> logging
 * (if on) -> statistics -> caching (if on) -> async, or with DEVRT_ARENA=1 budget -> logging (if
 * on) -> statistics -> arena. Thread-safe. */
devrt_status devrt_runtime_resource(devrt_runtime* rt, devrt_resource** out);
/* Installs the caller's stack instead (retained); INVALID_STATE once a stack is in use. */
devrt_status devrt_runtime_set_resource(devrt_runtime* rt, devrt_resource* r);
/* Retires completed stream-ordered frees of the runtime's stack without blocking, or, with
 * DEVRT_REAP_WAIT, waits for all of them. *bytes (may be NULL) = bytes retired. Thread-safe. */
devrt_status devrt_reap_pending(devrt_runtime* rt, unsigned flags, uint64_t* bytes);

/* ---- devrt's resources ---- */

/* Leaf on devrt's stream-ordered pool (cuMemAllocFromPoolAsync / cuMemFreeAsync). Tracks live
 * and pending bytes; a free stays pending until reap observes an event recorded after it. */
devrt_status devrt_async_resource_create(devrt_runtime* rt, devrt_resource** out);
/* Leaf on synchronous cuMemAlloc / cuMemFree (the stream is only checked). */
devrt_status devrt_simple_resource_create(devrt_runtime* rt, devrt_resource** out);
/* Leaf on address ranges that grow page by page (cuMemAddressReserve, cuMemCreate, cuMemMap;
 * PyTorch's expandable segments): each stream has a range for blocks of at most 1 MiB and one for
 * larger blocks. A block is split from the smallest free one that fits (sizes rounded to 512
 * bytes), merged with its free neighbours when freed, and a range maps new pages (2 MiB on
 * Hopper) at its end, admitted against the budget, only when nothing free fits, so freed memory
 * of any size serves any later size on that stream. A free on the allocating stream is reusable
 * at once (stream order); one on another stream after an event recorded there completes
 * (pending until an allocation or reap sees it). Trim takes the free pages at each range's end
 * (pending until the stream passes the trim; a reap then unmaps them; the stream's own later
 * allocations may take them back first).
 * Free memory is counted as cached. Peer devices are not given access to these ranges. Each
 * stream that allocates reserves two ranges of the device's memory size in the process's address
 * space (47 bits: a few hundred such streams; past that, va_reserve's failure is returned).
 * UNSUPPORTED where the driver lacks virtual memory management. */
devrt_status devrt_arena_resource_create(devrt_runtime* rt, devrt_resource** out);

#define DEVRT_CACHING_MAX_CLASS ((uint64_t)64 << 20) /* the largest size class: 64 MiB */
typedef struct devrt_caching_options {
  bool cross_stream_wait;    /* reuse another stream's freed block before its free completed, by
                                making the allocating stream wait on it (default false) */
  uint64_t max_cached_bytes; /* above this, frees go upstream (0: no bound) */
  uint64_t max_class_bytes;  /* allocations larger than this pass straight through to upstream,
                                never cached (0: DEVRT_CACHING_MAX_CLASS; at most that) */
} devrt_caching_options;
/* Per-stream, size-classed free lists in front of upstream. opts may be NULL (defaults). */
devrt_status devrt_caching_resource_create(devrt_resource* upstream,
                                           const devrt_caching_options* opts, devrt_resource** out);

/* Called on OVER_BUDGET or device out-of-memory: return true to retry the allocation once more. */
typedef bool (*devrt_fallback_fn)(void* user, size_t size, const char* tag, devrt_status why);

/* What a budget counts against its limit; whoever builds the stack says which.
 * THROUGH (the default): the bytes allocated through this budget and not yet freed to it.
 * DEVICE: everything the stack beneath holds of the device: live, pending and cached bytes,
 * whoever allocated them. The stack's leaf must be devrt's async, simple or arena resource (they
 * keep that account), and a stack has at most one DEVICE budget at a time: a second is refused with
 * INVALID_STATE until the first is destroyed. The runtime's default stack has one. */
typedef enum devrt_budget_scope {
  DEVRT_BUDGET_THROUGH = 0,
  DEVRT_BUDGET_DEVICE
} devrt_budget_scope;

typedef struct devrt_budget_options {
  uint64_t limit_bytes;       /* > 0 */
  devrt_budget_scope scope;   /* THROUGH (0) or DEVICE */
  bool wait_for_pending;      /* under pressure, block for pending frees before refusing */
  devrt_fallback_fn fallback; /* may be NULL: the error is returned */
  void* fallback_user;
} devrt_budget_options;
/* A byte limit over `upstream`, counting what opts->scope says. Lock-free admission.
 * INVALID_ARGUMENT for a bad scope or a DEVICE scope over a stack without devrt's leaf;
 * INVALID_STATE for a DEVICE scope over a stack that already has one. Thread-safe. */
devrt_status devrt_budget_create(devrt_resource* upstream, const devrt_budget_options* opts,
                                 devrt_resource** out);
/* A sub-budget under `parent` (a budget): its allocations count against both; it can never
 * exceed the parent. */
devrt_status devrt_budget_create_child(devrt_resource* parent, uint64_t limit_bytes,
                                       devrt_resource** out);

typedef enum devrt_log_format { DEVRT_LOG_CSV = 0, DEVRT_LOG_JSONL } devrt_log_format;
typedef struct devrt_log_record {
  uint64_t thread, time_ns;
  const char* action; /* "allocate", "allocate failure", "free", "reap" */
  void* ptr;
  uint64_t size, stream, generation;
  const char* tag;
  devrt_status status;
} devrt_log_record;
typedef void (*devrt_log_fn)(void* user, const devrt_log_record* rec);
typedef struct devrt_logging_options {
  const char* path; /* a file, or NULL with a callback */
  devrt_log_format format;
  devrt_log_fn callback; /* may be NULL with a path */
  void* user;
  unsigned buffer_records; /* records buffered before a write (default 256) */
} devrt_logging_options;
/* How often a process-wide flusher thread (started with the first layer that writes a file)
 * writes every file layer's buffered records: a process killed loses at most this much of its
 * log. The rest is written when the layer is destroyed and at exit (process-wide runtimes, never
 * destroyed, included). */
#define DEVRT_LOG_FLUSH_INTERVAL_MS 1000
/* Telemetry per allocate, failure, free and reap; never changes the inner result. Records that
 * cannot be written count in log_dropped, and a layer's first loss is said on stderr (the path and
 * the cause). */
devrt_status devrt_logging_resource_create(devrt_resource* upstream,
                                           const devrt_logging_options* opts, devrt_resource** out);
/* Writes buffered records out now. */
devrt_status devrt_logging_flush(devrt_resource* logging);

typedef struct devrt_memory_stats {
  devrt_memory_counter bytes, count;
} devrt_memory_stats;
/* Bytes and counts {current, peak, total}, overall and per tag, all exact under any concurrency
 * (a peak is the largest total over one order of the calls). Exactness costs a shared line when
 * threads' allocations together reach a new peak, which stops many threads from scaling when
 * their live totals hover near it; the runtime's stack can keep the peaks as an upper bound
 * instead (DEVRT_STATS_PEAK=bound: never below the true peak, exact on one thread). Thread-safe. */
devrt_status devrt_statistics_resource_create(devrt_resource* upstream, devrt_resource** out);
/* tag NULL: overall. A tag never seen reads as zeros. */
devrt_status devrt_statistics_get(devrt_resource* stats, const char* tag, devrt_memory_stats* out);
devrt_status devrt_statistics_reset_peaks(devrt_resource* stats);

#ifdef __cplusplus
}
#endif
#endif
