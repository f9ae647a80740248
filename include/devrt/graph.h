/* devrt/graph.h: recorded work captured into a graph and replayed with use tracking.
 *
 * devrt_capture_begin puts a stream into capture on the calling thread: from then until
 * devrt_capture_end, what that thread issues on the stream is recorded, not run: recorded
 * launches (kernels and foreign work through an enqueue callback, whose native stream is then
 * the capture's), foreign work through devrt_prepare_block_use / devrt_finish_block_use,
 * devrt_memcpy_async / devrt_memset_async, collectives (collective.h: the graph holds its
 * communicator, whose destroy is refused until the graph is destroyed), and queued submissions
 * without semaphores (queue.h; a graph is submitted with DEVRT_WORK_GRAPH). Every other call on a
 * capturing stream, and every call on it from another thread, is refused with INVALID_STATE
 * naming the capture (a synchronize, an allocation from a resource or a pool on it, a release),
 * so nothing runs unrecorded in the middle of a capture. The stream itself runs nothing meanwhile:
 * recording happens on a stream of the capture's own.
 *
 * Other streams join by events (CUDA's fork and join): devrt_event_record on a capturing stream
 * records a point of the capture; devrt_stream_wait_event for it on another stream of the runtime
 * makes that stream join the capture (the calling thread's calls on it are recorded from then on,
 * on a capture stream of its own), and on a stream of the capture orders it inside the graph.
 * Each joined stream must be joined back before the end: an event recorded on it after its last
 * recorded call, waited for by another stream of the capture; devrt_capture_end (on the stream
 * that began the capture) fails otherwise, naming it, and ends the capture all the same.
 *
 * Memory under capture: devrt_block_alloc on the capturing stream (capturing thread) allocates at
 * once, from the stream's resource, so the block has one address for every launch of the graph.
 * devrt_block_free of such a block in the same capture, after the capture used it, gives it to
 * the graph: the caller's handle is stale from then on, and the memory stays allocated (counted
 * by the budget) until devrt_graph_destroy, whose free waits for the launches still running. A
 * block allocated in a capture and not freed there is an ordinary block afterwards.
 *
 * A graph's launch is one recorded launch whose uses are the union of the captured uses (one
 * entry a block, a read and a write of it merged to READ_WRITE): it waits, outside the graph,
 * for what those uses must respect on other streams; its end is recorded on every block it uses,
 * so work on any stream that reads a block the graph writes waits for that launch, and a block
 * the graph uses is not freed while a launch of it runs. A block freed after the capture makes
 * the graph's next launch fail with STALE_BLOCK before anything is enqueued. A graph may be
 * launched on any stream of its runtime (not a capturing one), any number of times.
 *
 * Backends. cuda: CUDA stream capture (relaxed mode) into an instantiated CUDA graph, one
 * cuGraphLaunch a launch. host: the captured operations kept in order and run by the launching
 * stream's worker. docs/graphs.md has the model. */
#ifndef DEVRT_GRAPH_H
#define DEVRT_GRAPH_H

#include "devrt/block.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_graph devrt_graph;

typedef struct devrt_graph_info {
  unsigned recorded; /* launches, copies and fills captured (an enqueue callback's own too) */
  unsigned blocks;   /* blocks its launches use (the union) */
  uint64_t launches; /* times it was launched */
} devrt_graph_info;

/* Starts capturing `stream` on the calling thread. INVALID_STATE if it captures already;
 * UNSUPPORTED where the driver has no graphs. Thread-safe; the capture is the caller's. */
devrt_status devrt_capture_begin(devrt_runtime* rt, devrt_stream stream);

/* Ends the calling thread's capture of `stream` and makes the graph (instantiated, ready to
 * launch). INVALID_STATE when this thread does not capture it, when `stream` joined another's
 * capture, or when a joined stream was not joined back; a failure while recording fails the
 * capture here too (nothing is made). Either way the stream, and every stream that joined,
 * leaves capture. */
devrt_status devrt_capture_end(devrt_runtime* rt, devrt_stream stream, devrt_graph** out);

/* Launches the graph on `stream` as one recorded launch (see above). STALE_BLOCK if a block it
 * uses was freed; INVALID_ARGUMENT for a NULL or destroyed graph or another runtime's stream.
 * Thread-safe (launches of one graph may run on several streams at once, each tracked on its own;
 * the device runs them one at a time). */
devrt_status devrt_graph_launch(devrt_graph* graph, devrt_stream stream);

/* What the graph holds and how often it ran. Thread-safe. */
devrt_status devrt_graph_info_get(devrt_graph* graph, devrt_graph_info* out);

/* Destroys the graph; launches in flight finish first, and so do the frees of the blocks it owns
 * (see above). A free that fails fails the call and leaves the graph as it was but for the blocks
 * already freed: call it again. Not thread-safe with other calls on it. */
devrt_status devrt_graph_destroy(devrt_graph* graph);

#ifdef __cplusplus
}
#endif
#endif
