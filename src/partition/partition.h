/* partition.h (internal): what partitions (layout.c) offer the layers above them: which pool
 * stream 0 and devrt_stream_acquire take from, and which resource a stream's allocations go to. */
#ifndef DEVRT_PARTITION_INTERNAL_H
#define DEVRT_PARTITION_INTERNAL_H

#include "../memory/memory.h"

/* The pool stream 0 and devrt_stream_acquire take from: the active layout's, else the runtime's
 * (the runtime's rt->acquire hook). */
devrt_status dv_default_acquire(devrt_runtime* rt, devrt_acquire_mode mode, devrt_stream* out,
                                const char* call);
devrt_status dv_layouts_init(devrt_runtime* rt);
/* INVALID_STATE while layouts are alive. */
devrt_status dv_layouts_check_none(devrt_runtime* rt, const char* call);
void dv_layouts_fini(devrt_runtime* rt);
/* The resource allocations on held stream `stream` go to: its partition's sub-budget, else the
 * runtime's stack. */
devrt_status dv_stream_resource(devrt_runtime* rt, devrt_stream stream, devrt_resource** out);

#endif
