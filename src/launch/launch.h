/* launch.h (internal): what the submission queue (src/sync) needs from recorded launches: the
 * checks made before anything is queued, a copy of the kernel's arguments for a deferred launch,
 * and the launch itself (or a graph's) returning the event its work ends at. */
#ifndef DEVRT_LAUNCH_INTERNAL_H
#define DEVRT_LAUNCH_INTERNAL_H

#include "../block/block.h"

/* Everything about d that can be checked without a stream (uses: shape only). */
devrt_status dv_launch_check(devrt_runtime* rt, const devrt_launch_desc* d);
/* The argument count and bytes dv_launch_args_copy needs for d's kernel (0 for foreign work). */
devrt_status dv_launch_args_size(const devrt_launch_desc* d, unsigned* nargs, size_t* bytes);
/* The kernel's name, for messages. */
const char* dv_launch_name(const devrt_launch_desc* d);
/* Copies d's arguments into `data` (dv_launch_args_size bytes, 16-aligned) and points ptrs at them.
 */
void dv_launch_args_copy(const devrt_launch_desc* d, void** ptrs, unsigned char* data);
/* A recorded launch on held stream `id` (s its backend stream): d's kernel, d's enqueue, or (graph
 * non-NULL) an executable graph whose uses are d's. With ev non-NULL an event is recorded even
 * with no uses, and *ev gets a reference to it. */
devrt_status dv_launch_issue(devrt_runtime* rt, const devrt_launch_desc* d, devrt_stream id,
                             dv_stream* s, dv_graph* graph, dv_pev** ev);
/* INVALID_ARGUMENT unless g is a live graph of rt (src/launch/graph.c). */
devrt_status dv_graph_check(devrt_runtime* rt, devrt_graph* g);
/* Checks g as dv_graph_check, then launches it on held stream id (s its backend stream) as
 * devrt_graph_launch does; ev as dv_launch_issue's. */
devrt_status dv_graph_issue(devrt_runtime* rt, devrt_graph* g, devrt_stream id, dv_stream* s,
                            dv_pev** ev);

/* Something a higher layer's recorded call needs kept for as long as the graph exists (a
 * communicator's count of graphs that hold its collectives): drop(p) runs once, when the graph is
 * destroyed, or at the capture's end when no graph is made. */
typedef struct dv_hold {
  void (*drop)(void* p);
  void* p;
} dv_hold;
/* Adds a hold to the calling thread's capture cap; OUT_OF_RESOURCES (nothing held) without host
 * memory. */
devrt_status dv_capture_hold(dv_capture* cap, void (*drop)(void*), void* p);

#endif
