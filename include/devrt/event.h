/* devrt/event.h: events, the stream-ordering primitive.
 * An event marks a point in one stream's work; other streams and the host wait on it. */
#ifndef DEVRT_EVENT_H
#define DEVRT_EVENT_H

#include <stdbool.h>
#include "devrt/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_event devrt_event;

enum {
  DEVRT_EVENT_DEFAULT = 0,        /* timing disabled, synchronize may spin */
  DEVRT_EVENT_BLOCKING_SYNC = 1u, /* synchronize blocks the thread instead of spinning */
  DEVRT_EVENT_TIMING = 2u,        /* enable timing (slower record) */
};

/* Creates an event owned by rt. Thread-safe. */
devrt_status devrt_event_create(devrt_runtime* rt, unsigned flags, devrt_event** out);
/* Destroys it; pending waits on it keep their meaning. Not thread-safe with other uses of ev. */
devrt_status devrt_event_destroy(devrt_runtime* rt, devrt_event* ev);
/* Captures the work queued on `stream` so far; on a stream the calling thread captures
 * (devrt/graph.h), a point of that capture that other streams can join. Thread-safe for distinct
 * events. */
devrt_status devrt_event_record(devrt_runtime* rt, devrt_event* ev, devrt_stream stream);
/* Makes later work on `stream` wait for ev's last record (no-op if never recorded). For a record
 * in the calling thread's capture, `stream` joins that capture or is ordered inside it
 * (devrt/graph.h); INVALID_STATE if that capture is over or another thread's. Thread-safe. */
devrt_status devrt_stream_wait_event(devrt_runtime* rt, devrt_stream stream, devrt_event* ev);
/* *complete = whether ev's captured work has finished (true if never recorded); INVALID_STATE
 * when its last record was in a capture. Thread-safe. */
devrt_status devrt_event_query(devrt_runtime* rt, devrt_event* ev, bool* complete);
/* Blocks until ev's captured work has finished; INVALID_STATE when its last record was in a
 * capture. Thread-safe. */
devrt_status devrt_event_synchronize(devrt_runtime* rt, devrt_event* ev);

#ifdef __cplusplus
}
#endif
#endif
