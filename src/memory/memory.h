/* memory.h (internal): what the memory layer offers the layers above it beyond the public
 * resource API: the runtime's stack (stack.c) and the retirement of a stream (resource.c). */
#ifndef DEVRT_MEMORY_INTERNAL_H
#define DEVRT_MEMORY_INTERNAL_H

#include "../timeline/rt.h"

/* Builds budget(limit) -> logging (c->log_path) -> statistics -> caching (c->cache) -> async, or
 * with c->arena budget -> logging -> statistics -> arena. */
devrt_status dv_stack_build(devrt_runtime* rt, const devrt_config* c, uint64_t limit,
                            devrt_resource** top);
/* Releases the runtime's stack (its destroy). */
void dv_stack_fini(devrt_runtime* rt);
/* Every live resource of rt with a stream_retired entry (the runtime's stack's layers, those of
 * stacks the caller built, a user's own) is told that `stream` was synchronized and is going
 * away: the runtime's rt->stream_retired hook. */
void dv_resources_stream_retired(devrt_runtime* rt, devrt_stream stream);

#endif
