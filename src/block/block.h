/* block.h (internal): the use-tracking steps blocks and recorded launches share (block.c): pin the
 * blocks a piece of work touches and gather the waits it needs, then record where it ends. Stream
 * points (marks) come from the timeline (src/timeline). */
#ifndef DEVRT_BLOCK_INTERNAL_H
#define DEVRT_BLOCK_INTERNAL_H

#include <stdlib.h>
#include "../memory/memory.h"
#include "../partition/partition.h"
#include "../core/spin.h"

devrt_status dv_blocks_init(devrt_runtime* rt);
void dv_blocks_fini(devrt_runtime* rt);

/* block.c: the steps of a tracked use. */
static inline bool dv_access_ok(devrt_access a) {
  return a >= DEVRT_ACCESS_READ && a <= DEVRT_ACCESS_READ_WRITE;
}
/* A slot's event to wait for; in a track, `wrote` says it covers a write (see record_write). */
typedef struct dv_wait {
  unsigned slot;
  bool wrote;
  dv_pev* ev;
} dv_wait;
/* The blocks one piece of work touches, each named once, and what tracking keeps of them. */
typedef struct dv_uses {
  const devrt_block_use* u; /* the caller's list when it names each block once, else `merged` */
  unsigned n;
  bool peer; /* some block is a peer runtime's (src/multi): no group, no repeat (set by the pin) */
  struct dv_blk* b[DEVRT_LAUNCH_MAX_USES]; /* each block's record, once pinned block by block */
  uint64_t ver[DEVRT_LAUNCH_MAX_USES];   /* each block's version after the use (the repeat path) */
  uint32_t epoch[DEVRT_LAUNCH_MAX_USES]; /* each block's track epoch when gathered */
  devrt_block_use merged[DEVRT_LAUNCH_MAX_USES];
} dv_uses;

/* Room for one wait per source slot: rt's own, and the slots of every runtime that enabled peer
 * access (dv_peer_slots: their marks may sit in any track, src/multi), which the list has room
 * for in dv_wait_foreign (left after each one added; DV_WAIT_SHORT once one found none: then
 * dv_waits_issue refuses the list). On the stack for up to 128 slots (the default 16 pool
 * streams, the runtime's own and 64 for partitions fit), else this thread's buffer, kept for its
 * next call (a wait list never lives across user code, so one a thread is enough). NULL: out of
 * host memory. */
extern _Thread_local unsigned dv_wait_foreign;
#define DV_WAIT_SHORT UINT32_MAX
#define WAIT_BUF(rt, name)                                                        \
  dv_wait name##_stack[128];                                                      \
  unsigned name##_n = (rt)->nslots + (dv_wait_foreign = atomic_load_explicit(     \
                                          &dv_peer_slots, memory_order_relaxed)); \
  dv_wait* name = DV_LIKELY(name##_n <= 128) ? name##_stack : dv_wait_room(name##_n)
/* This thread's room for n waits (NULL: out of host memory; dv_waits_refused says so); freed
 * when the thread exits. */
devrt_status dv_waits_refused(devrt_runtime* rt);
dv_wait* dv_wait_room(unsigned n);

/* How the blocks were pinned: through their group (see block.c), or one by one (g NULL). */
typedef struct dv_pinned {
  struct dv_group* g;
  uint64_t gen;
  uint32_t epoch;
} dv_pinned; /* epoch: the group track's */

/* INVALID_ARGUMENT (naming `call`) unless every use's access is READ, WRITE or READ_WRITE. */
devrt_status dv_uses_check(const devrt_block_use* u, unsigned n, const char* call);
/* Pins each block of x (a pinned block cannot be freed), or the group of exactly those blocks,
 * and gathers, per source slot, the newest event stream `slot` must wait for (the skipped ones
 * counted in c); nothing is pinned, held or counted if it fails. x->u is the caller's list as it
 * is: its accesses are checked here and, where it names a block twice, x->u becomes the merged
 * copy. waits has room for rt->nslots entries, *nwaits and *how start empty. With `of`, counts
 * in *drops the references to mark `of` that dv_uses_finish will replace (for dv_slot_settle). */
devrt_status dv_uses_pin(devrt_runtime* rt, dv_uses* x, unsigned slot, dv_wait* waits,
                         unsigned* nwaits, const dv_pev* of, uint32_t* drops, const char* call,
                         dv_pinned* how, dv_counts* c);
/* Settles the slot (dv_slot_settle with of and drops: the caller's work follows), then makes s
 * wait on every gathered event (counted in c); drops them either way. */
devrt_status dv_waits_issue(devrt_runtime* rt, dv_stream* s, unsigned slot, dv_wait* w, unsigned n,
                            const dv_pev* of, uint32_t drops, dv_counts* c);
/* Records where the work ends (ev, on `slot`) on each block (or their group), then unpins them
 * as `how` says (NULL: they were not pinned); ev NULL only unpins. Drops the reference `old`
 * (may be NULL); with `donate` the caller's reference to ev goes to the blocks too. Leaves each
 * block's version in x->ver; returns the references to ev the blocks took (0 for a group:
 * a group's launch is no repeat candidate). Blocks used as one set again, with one access, are
 * grouped here. */
uint32_t dv_uses_finish(devrt_runtime* rt, dv_uses* x, unsigned slot, dv_pev* ev, dv_pev* old,
                        bool donate, const dv_pinned* how);

/* The repeat path: a launch on `slot` declaring the same uses as the slot's previous launch, when
 * no block changed since and nothing else refers to that launch's lazy mark, needs no wait (the
 * previous launch issued them on this stream), and its mark is the previous one moved forward:
 * no block is locked or written. dv_repeat_try claims it (false: take the usual path);
 * dv_repeat_end, after the work was enqueued (ok) or not, moves the mark or falls back to
 * recording the uses; dv_repeat_save remembers a finished launch's uses. */
bool dv_repeat_try(devrt_runtime* rt, unsigned slot, const dv_uses* x);
devrt_status dv_repeat_end(devrt_runtime* rt, unsigned slot, dv_uses* x, bool ok);
void dv_repeat_save(devrt_runtime* rt, unsigned slot, const dv_uses* x, dv_pev* ev, uint32_t gain);

/* Queued allocations (src/sync): a handle now, the memory when the submission is issued. */
devrt_status dv_block_reserve(devrt_runtime* rt, size_t size, devrt_stream stream, const char* tag,
                              devrt_block* out);
/* Allocates a reserved block's memory on held stream `stream` (s); on failure the handle is
 * released (stale). ready (may be NULL) gets a reference to the allocation-ready event. */
devrt_status dv_block_commit(devrt_runtime* rt, devrt_block h, devrt_stream stream, dv_stream* s,
                             dv_pev** ready);
/* Releases a reserved block that will never be committed. */
void dv_block_cancel(devrt_runtime* rt, devrt_block h);
/* devrt_block_free with the free enqueued on held stream fs (s) instead of the free stream. */
devrt_status dv_block_free_on(devrt_runtime* rt, devrt_block h, devrt_stream fs, dv_stream* s);
/* Enqueue callbacks this thread is running (src/launch): their launches' blocks stay pinned
 * until they return, so a free of a pinned block from inside one is refused, not waited for (it
 * might wait for its own launch). */
extern _Thread_local unsigned dv_in_enqueue;
/* Which of the launch paths ran (the optimizer's own counters, for white-box tests and benches;
 * devrt_block_stats reports behaviour): marks recorded lazily, launches that took the repeat
 * path, launches tracked through a group. */
typedef struct dv_block_paths {
  uint64_t marks_deferred, launches_repeated, launches_grouped;
} dv_block_paths;
dv_block_paths dv_block_paths_get(devrt_runtime* rt);

/* INVALID_STATE (naming `call` and how many) if any block of rt is live, reserved or not. */
devrt_status dv_blocks_check_none(devrt_runtime* rt, const char* call);
/* OK if h names a live block (pending or not); else STALE_BLOCK (INVALID_ARGUMENT for 0) with
 * the message set: the checks made before anything is queued. */
devrt_status dv_block_check(devrt_runtime* rt, devrt_block h, const char* call);
/* As dv_block_check, and a live block of a runtime rt has peer access with is OK too (a launch on
 * rt may name it). */
devrt_status dv_block_check_use(devrt_runtime* rt, devrt_block h, const char* call);
/* Adds event p to what stream `slot` must wait for, as use tracking does: at most one per source
 * slot (the newest), none for the slot's own events or events known complete. Takes its own
 * reference on what it keeps; w has room for one entry per slot. */
void dv_waits_add(devrt_runtime* rt, unsigned slot, dv_pev* p, dv_wait* w, unsigned* n);

/* The runtime whose block h is (rt's, or a peer's), with its address and size; STALE_BLOCK (as
 * rt's own lookup says) when neither holds it live. */
devrt_status dv_block_find(devrt_runtime* rt, devrt_block h, const char* call,
                           devrt_runtime** owner, void** ptr, size_t* size);
/* When a peer link ends (src/multi, both runtimes synchronized and quiet): rt's blocks drop
 * other's uses. */
void dv_blocks_forget(devrt_runtime* rt, devrt_runtime* other);

#endif
