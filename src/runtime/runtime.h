/* runtime.h (internal): the top layer. The runtime composes the layers below it: it builds their
 * state bottom-up and ends it top-down (runtime.c), from a checked configuration (config.c), and
 * keeps the process-wide runtime of each ordinal; PyTorch's allocator entry points take a runtime
 * by ordinal from there (torch.c). */
#ifndef DEVRT_RUNTIME_INTERNAL_H
#define DEVRT_RUNTIME_INTERNAL_H

#include "../multi/multi.h"

/* INVALID_ARGUMENT naming `call` and the field if c is out of range. */
devrt_status dv_config_check(const devrt_config* c, const char* call);

/* How many process-wide runtimes were created (tests check the race on first use). */
unsigned dv_runtime_creations(void);

#endif
