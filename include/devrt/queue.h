/* devrt/queue.h: the submission queue. A submission waits for semaphore values, does one piece of
 * work on a stream, and signals semaphore values when that work completes.
 *
 * Rules:
 * - devrt_queue_submit never blocks the calling thread, so one thread may submit a waiter before
 *   its signaller. Submissions are ordered only by their semaphores (as in Vulkan and IREE), not
 *   by submission order, even on one stream.
 * - Device waits are cuStreamWaitEvent on the event of the submission that signals the awaited
 *   value (or a later one). That event exists once that submission has been issued, so a
 *   submission whose waits are all *scheduled* is issued at once, before they complete, and
 *   GPU -> GPU dependencies never go through the host. A submission with a wait not yet
 *   scheduled is parked and issued as soon as every wait is scheduled: by the host signal's own
 *   thread when it released it and the queue's issue lock was free, else by devrt's dispatch
 *   thread (an issued device signal re-checks the parked submissions there).
 * - Host calls run on the dispatch thread once every wait has *completed*; their signals are
 *   host signals after the call returns OK.
 * - Device completion is observed by devrt's completion thread (devrt_config.completion says how)
 *   which raises the completed watermarks and wakes host waiters.
 * - Failure: a submission whose wait fails, or whose work fails (launch refused, allocation over
 *   budget, CUDA error), fails every semaphore it signals with that root cause. A CUDA error seen
 *   while observing completion is sticky (the context is unusable): the device is lost, every
 *   semaphore of the runtime fails with DEVICE_LOST, and later submissions are refused.
 * - Arguments are validated before anything is queued: a refused submission changes nothing. The
 *   submission's arrays, kernel arguments and use list are copied; the caller may reuse them
 *   at once. An `enqueue` callback's user pointer, a kernel's module and a GRAPH submission's
 *   graph must stay alive until the submission's signals are reached. The stream (if not 0) must
 *   stay held until then.
 * - A graph (DEVRT_WORK_GRAPH) is launched once its waits are scheduled, as devrt_graph_launch
 *   launches it (graph.h: its uses wait for earlier writers, its end is marked on its blocks);
 *   its signals are reached when that replay completes. A block it uses that is freed before the
 *   replay is issued fails its signals with STALE_BLOCK, as a refused launch does.
 * - A stream the calling thread captures (graph.h): a submission with no waits and no signals of
 *   kind LAUNCH, ALLOC, FREE or BARRIER is recorded into the capture, on the calling thread, as
 *   devrt_launch, devrt_block_alloc on that stream, devrt_block_free or nothing would be; one with
 *   waits or signals, a HOST_CALL and a GRAPH are refused with INVALID_STATE (a semaphore value is
 *   reached once, a graph replays many times). A stream another thread captures is refused with
 *   INVALID_STATE. */
#ifndef DEVRT_QUEUE_H
#define DEVRT_QUEUE_H

#include "devrt/graph.h"
#include "devrt/launch.h"
#include "devrt/semaphore.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_semaphore_value {
  devrt_semaphore* semaphore;
  uint64_t value;
} devrt_semaphore_value;

typedef enum devrt_work_kind {
  DEVRT_WORK_BARRIER = 0, /* nothing: orders its signals after its waits */
  DEVRT_WORK_LAUNCH,      /* a recorded launch (launch.h); its block uses are tracked as usual */
  DEVRT_WORK_HOST_CALL,   /* fn(user) on devrt's dispatch thread after the waits complete */
  DEVRT_WORK_ALLOC,       /* a stream-ordered block allocation: the handle is returned at once,
                             its memory exists once the waits are met and the alloc is issued */
  DEVRT_WORK_FREE,        /* devrt_block_free, issued on the submission's stream after its waits */
  DEVRT_WORK_GRAPH,       /* devrt_graph_launch of `graph` on the submission's stream */
} devrt_work_kind;

/* A host call's result: not OK fails its signal semaphores with that status. */
typedef devrt_status (*devrt_host_call_fn)(void* user);

#define DEVRT_QUEUE_MAX_WAITS 64u
#define DEVRT_QUEUE_MAX_SIGNALS 64u

typedef struct devrt_submission {
  devrt_stream stream; /* 0: a pool stream (shared) for the time it takes to issue the work */
  const devrt_semaphore_value* waits;
  unsigned nwaits;
  const devrt_semaphore_value* signals; /* each value > the semaphore's value at submission */
  unsigned nsignals;
  devrt_work_kind kind;
  devrt_launch_desc launch; /* LAUNCH (its stream field is ignored) */
  struct {
    devrt_host_call_fn fn;
    void* user;
  } host; /* HOST_CALL */
  struct {
    size_t size;
    const char* tag;
    devrt_block* out;
  } alloc;            /* ALLOC: *out set at once */
  devrt_block block;  /* FREE */
  devrt_graph* graph; /* GRAPH: a live graph of this runtime */
} devrt_submission;

/* Queues one submission (see the rules above), or records it into the calling thread's capture.
 * INVALID_ARGUMENT for a bad field (nothing is queued), INVALID_STATE for a submission a capture
 * refuses, DEVICE_LOST once the device is lost. Thread-safe. */
devrt_status devrt_queue_submit(devrt_runtime* rt, const devrt_submission* sub);

typedef enum devrt_completion_mode {
  DEVRT_COMPLETION_SYNC = 0, /* the completion thread blocks in a blocking-sync event wait */
  DEVRT_COMPLETION_HOSTFN,   /* a cuLaunchHostFunc on a per-stream side stream posts to it */
} devrt_completion_mode;

typedef struct devrt_queue_stats {
  uint64_t submitted, refused; /* accepted; refused by devrt_queue_submit */
  uint64_t issued_inline;      /* issued on the submitting thread: every wait already scheduled */
  uint64_t parked;             /* parked because a wait was not yet scheduled */
  uint64_t issued_by_dispatch; /* parked, then issued once released (by the dispatch thread or
                                * the releasing host signal's thread) */
  uint64_t host_calls, failed; /* host calls run; submissions failed (their signals failed) */
  uint64_t device_waits;       /* cuStreamWaitEvent inserted for semaphore waits */
  uint64_t host_hops;          /* device work released only once a device signal had completed on
                                  the host (a GPU -> host -> GPU edge): 0 in a correct queue */
  uint64_t dispatch_wakeups, completion_wakeups, completions;
  devrt_completion_mode completion;
  bool device_lost;
} devrt_queue_stats;

/* The queue's counters (monotonic since the runtime was created). Thread-safe. */
devrt_status devrt_queue_stats_get(devrt_runtime* rt, devrt_queue_stats* out);

#ifdef __cplusplus
}
#endif
#endif
