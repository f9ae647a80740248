/* live_table.h (internal): the leaves' table of live allocations, ptr -> {size, rounded, tag},
 * sharded by pointer hash (one mutex per shard). Implemented in async.c, shared with simple.c.
 * A free first claims the entry (a concurrent double free then sees it as gone), frees the
 * memory, then removes the entry, or unclaims it when the backend free failed. */
#ifndef DEVRT_MEMORY_LIVE_TABLE_H
#define DEVRT_MEMORY_LIVE_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include "devrt/resource.h"

typedef struct dv_live_table dv_live_table;

devrt_status dv_live_create(const char* who, dv_live_table** out);
void dv_live_destroy(dv_live_table* t);
/* DEVICE_ALLOC_FAILED (message naming `who`) when the table cannot grow. */
devrt_status dv_live_insert(dv_live_table* t, const char* who, void* p, size_t size, uint64_t rounded, const char* tag);
/* Claims the live, unclaimed entry of p, allocated with exactly `size` bytes; *rounded gets its
 * rounded size. Else INVALID_ARGUMENT: "<who> deallocate: ..." (unknown pointer or wrong size). */
devrt_status dv_live_claim(dv_live_table* t, const char* who, void* p, size_t size, uint64_t* rounded);
/* Records a fresh allocation and counts it live in the account; on failure the caller frees p. */
devrt_status dv_live_track(dv_live_table* t, dv_mem_account* a, const char* who, void* p, size_t size, const char* tag);
/* Ends a claim: removes the entry (the memory was freed) or makes it live again. */
void dv_live_settle(dv_live_table* t, void* p, int remove);

#endif
