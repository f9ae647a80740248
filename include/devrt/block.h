/* devrt/block.h: device blocks whose every use is tracked, so work on different streams never
 * races on them and a freed block is never reused while work still touches it.
 *
 * A devrt_block is a value handle (slot index + generation) into the runtime's block table. A
 * freed block's handle is refused with DEVRT_ERR_STALE_BLOCK for ever after, even once its slot
 * and its device address have been handed out again; so is another runtime's handle
 * (generations are process-wide). Handle 0 is INVALID_ARGUMENT.
 *
 * Ordering model. Each block remembers its last writer (an event on the stream that wrote it;
 * seeded at allocation with an "allocation ready" event) and, since that write, one reader event
 * per stream that read it. Before work on stream S uses the block, devrt_prepare_block_use makes
 * S wait for what that use must respect: a read waits for the last writer, a write also for
 * every reader. Waits on S's own events or on events already known complete are skipped. After
 * the work is enqueued, devrt_finish_block_use records where it ends. devrt_launch (launch.h)
 * does both for a whole launch, with one event and at most one wait per source stream.
 *
 * The promise. No order of calls lets a free, or a reuse of the block's memory, run before a
 * recorded use has completed. A write replaces an earlier use only where it is known to end
 * after it: its stream waited for it (devrt_launch's own waits, or a devrt_prepare_block_use for
 * WRITE on the same stream with nothing recorded on the block in between), it is an earlier point
 * of the same stream, or it has completed. Any other use it would replace (a finish with no such
 * prepare, two threads writing the block at once) stays recorded beside the new writer: later
 * writes and the free wait for it, and reads wait for a replaced writer too. Such entries count
 * in devrt_block_info.readers. Ordering the work itself stays the caller's part: a use recorded
 * on a stream that never waited can still race the uses before it; only the free is safe. */
#ifndef DEVRT_BLOCK_H
#define DEVRT_BLOCK_H

#include <stddef.h>
#include <stdint.h>
#include "devrt/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t devrt_block; /* 0 is never a valid block */
#define DEVRT_BLOCK_NONE ((devrt_block)0)

typedef enum devrt_access {
  DEVRT_ACCESS_READ = 1,
  DEVRT_ACCESS_WRITE = 2,
  DEVRT_ACCESS_READ_WRITE = 3,
} devrt_access;

typedef struct devrt_block_info {
  void* ptr;
  size_t size;
  const char* tag;      /* as given to devrt_block_alloc (not copied) */
  devrt_stream stream;  /* the stream it was allocated on (that lease may have ended) */
  uint64_t generation;  /* process-wide monotonic (40 bits): every allocation gets a new one */
  unsigned readers;     /* streams with a use a write or free must wait for besides the last
                         * writer: reads since the last write, and uses it did not follow */
  bool writer_complete; /* the last write is known to have completed */
} devrt_block_info;

/* Allocates `size` bytes stream-ordered on `stream` from the runtime's resource stack (budget
 * and all, resource.h) and records the allocation-ready event there. tag (may be NULL) names
 * the caller in errors, logs and statistics; it must outlive the block. Thread-safe. */
devrt_status devrt_block_alloc(devrt_runtime* rt, size_t size, devrt_stream stream, const char* tag,
                               devrt_block* out);

/* Frees the block once every use recorded so far has completed: the free is enqueued on the
 * runtime's free stream after waits on every recorded use not known complete (never on a user's
 * stream, which would make that stream wait for unrelated work), its bytes move from live to
 * pending (or to cached, under a caching layer), and devrt_reap_pending retires them. The handle
 * is stale at once. A launch or a finish on another thread that is recording a use of the block
 * when the free starts is waited for (a short wait) and the free is ordered after that use; one
 * that starts after the free is refused (INVALID_STATE). So a free of a live block returns OK or
 * a real error, never a refusal that depends on another thread's timing; only a second free of
 * the same block racing the first is refused (INVALID_STATE, or STALE_BLOCK once the first is
 * done). Thread-safe. */
devrt_status devrt_block_free(devrt_runtime* rt, devrt_block block);

/* The device address (host backend: a host address). Thread-safe. */
devrt_status devrt_block_ptr(devrt_runtime* rt, devrt_block block, void** out);
/* A snapshot of the block's record. Thread-safe. */
devrt_status devrt_block_info_get(devrt_runtime* rt, devrt_block block, devrt_block_info* out);

/* Makes `stream` wait for what an access of this kind must respect (see the model above).
 * Thread-safe. */
devrt_status devrt_prepare_block_use(devrt_runtime* rt, devrt_block block, devrt_stream stream,
                                     devrt_access access);
/* Records an event on `stream` after the work just enqueued there (name the stream the work ran
 * on; work on another stream must be joined into it first): a write becomes the last writer and
 * replaces what it is known to end after (see the promise above: a prepare for WRITE on this
 * stream makes that everything); a read adds or replaces this stream's reader event. Declare
 * what the work does: a write recorded as a read is waited for by writes and the free, not by
 * other readers. INVALID_STATE, nothing recorded, if another thread is freeing the block.
 * Thread-safe. */
devrt_status devrt_finish_block_use(devrt_runtime* rt, devrt_block block, devrt_stream stream,
                                    devrt_access access);

/* The runtime's use-tracking counters (monotonic since the runtime was created). */
typedef struct devrt_block_stats {
  uint64_t blocks_allocated, blocks_live;
  uint64_t waits_inserted;
  uint64_t waits_skipped_same_stream, waits_skipped_complete, waits_coalesced;
  uint64_t events_recorded, events_reused, events_created; /* pooled events: reused + created */
  uint64_t deferred_frees, reaped_bytes;
  uint64_t stale_refusals, refused_launches, launches;
} devrt_block_stats;

/* Sums the counters (each shard is read atomically; the sum is not one instant). Thread-safe. */
devrt_status devrt_block_stats_get(devrt_runtime* rt, devrt_block_stats* out);

#ifdef __cplusplus
}
#endif
#endif
