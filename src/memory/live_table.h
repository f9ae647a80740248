/* live_table.h (internal): the leaves' table of live allocations, ptr -> {size, tag}, a
 * lock-free directory indexed by address. Implemented in async.c, shared with simple.c. A free
 * takes the entry out (one compare-and-swap) before freeing the memory (a concurrent double free
 * then sees it gone, and the pool cannot hand the address out again before that) and puts it back
 * when the backend free failed. The pool's rounding of a size is dv_round's, so it is not kept. */
#ifndef DEVRT_MEMORY_LIVE_TABLE_H
#define DEVRT_MEMORY_LIVE_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include "devrt/resource.h"

typedef struct dv_live_table dv_live_table;

devrt_status dv_live_create(const char* who, dv_live_table** out);
void dv_live_destroy(dv_live_table* t);
/* What a live allocation records besides its size: its tag (deallocate_tagged reports it). */
typedef struct dv_live_entry {
  const char* tag;
} dv_live_entry;
/* Takes the entry of p, allocated with exactly `size` bytes, out of the table into *out. Else
 * INVALID_ARGUMENT: "<who> deallocate: ..." (unknown pointer, double free or wrong size). */
devrt_status dv_live_take(dv_live_table* t, const char* who, void* p, size_t size,
                          dv_live_entry* out);
/* Puts a taken entry back (the backend refused the free). */
void dv_live_put_back(dv_live_table* t, void* p, size_t size, const dv_live_entry* e);
/* A leaf's admission of `size` new bytes (*rounded: the pool's rounding of it) against the
 * account's limit; OVER_BUDGET when they do not fit. Give it back with dv_account_release if the
 * allocation then fails. */
devrt_status dv_live_admit(dv_mem_account* a, const char* who, size_t size, const char* tag,
                           uint64_t* rounded);
/* Records a fresh (admitted, so live) allocation; on failure the caller frees p. */
devrt_status dv_live_track(dv_live_table* t, const char* who, void* p, size_t size,
                           const char* tag);

#endif
