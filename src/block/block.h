/* block.h (internal): what blocks offer the layers above them: the block table (block.c), the
 * steps of a tracked use (track.c: pin the blocks a piece of work touches and gather the waits it
 * needs, then record where it ends) and the two launch fast paths (group.c, repeat.c). Stream
 * points (marks) come from the timeline (src/timeline). */
#ifndef DEVRT_BLOCK_INTERNAL_H
#define DEVRT_BLOCK_INTERNAL_H

#include <stdlib.h>
#include "../memory/memory.h"
#include "../partition/partition.h"
#include "../core/spin.h"

devrt_status dv_blocks_init(devrt_runtime* rt);
void dv_blocks_fini(devrt_runtime* rt);

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

/* The waits one piece of work gathers: at most one per source slot, the newest (block.c's
 * model). The list has room for every slot of rt and of every runtime with peer access
 * (dv_peer_slots: their marks may sit in any track, src/multi): `local` for up to 128 (the
 * default 16 pool streams, the runtime's own and 64 for partitions fit), else this thread's
 * buffer, kept for its next call (a wait list never lives across user code, so one a thread is
 * enough). */
typedef struct dv_waits {
  dv_wait* v;       /* the entries: `local`, or this thread's buffer */
  unsigned n, cap;  /* entries gathered; room */
  unsigned foreign; /* room left for peer runtimes' marks; DV_WAIT_SHORT once one found none
                     * (peer access enabled meanwhile): dv_waits_issue then refuses the list */
  uint16_t* at;     /* this thread's hints: where each of rt's slots' entry sits in v (a hint
                     * the entry confirms, so it needs no clearing between lists) */
  dv_wait local[128];
} dv_waits;
#define DV_WAIT_SHORT UINT32_MAX
/* An empty list with room for every slot (above); OUT_OF_RESOURCES without host memory for it. */
devrt_status dv_waits_init(dv_waits* w, devrt_runtime* rt);

/* How the blocks were pinned: through their group (see group.c), or one by one (g NULL). */
typedef struct dv_pinned {
  struct dv_group* g;
  uint64_t gen;   /* the group's generation when pinned: another means it dissolved since */
  uint32_t epoch; /* the group track's epoch when its waits were gathered */
} dv_pinned;

/* One piece of tracked work on a stream slot (a launch, a collective) from pin to finish: what
 * use tracking needs to know of it and what it gathers on the way. On its caller's stack. */
typedef struct dv_work {
  devrt_runtime* rt;
  unsigned slot;    /* where the work is enqueued */
  const char* call; /* names the caller in messages */
  dv_uses x;        /* the blocks it touches */
  dv_waits w;       /* the waits gathered for it */
  const dv_pev* of; /* the slot's newest mark before the work (NULL: not asked) */
  uint32_t drops;   /* the references to `of` that the work's records will replace */
  bool pinned;      /* dv_uses_pin succeeded: dv_uses_finish unpins */
  dv_pinned how;    /* how its blocks were pinned */
  dv_counts c;      /* what it adds to the slot's counters */
} dv_work;
/* A work of rt on `slot` over the caller's list u[0..n) (taken as it is: dv_uses_pin checks it),
 * with an empty wait list: OUT_OF_RESOURCES without host memory for one. */
devrt_status dv_work_init(dv_work* k, devrt_runtime* rt, unsigned slot, const char* call,
                          const devrt_block_use* u, unsigned n);

/* INVALID_ARGUMENT (naming `call`) unless every use's access is READ, WRITE or READ_WRITE. */
devrt_status dv_uses_check(const devrt_block_use* u, unsigned n, const char* call);
/* Adds uses u[0..n) to a capture's: each block live now (rt's or a peer's), accesses merged per
 * block; INVALID_ARGUMENT past DEVRT_LAUNCH_MAX_USES blocks (graph.c). */
devrt_status dv_capture_add(devrt_runtime* rt, dv_capture* cap, const devrt_block_use* u,
                            unsigned n, const char* call);
/* Pins each block of k->x (a pinned block cannot be freed), or the group of exactly those
 * blocks, and gathers, per source slot, the newest event k's slot must wait for (the skipped ones
 * counted in k->c); nothing is pinned, held or counted if it fails. k->x.u is the caller's list as
 * it is: its accesses are checked here and, where it names a block twice, it becomes the merged
 * copy. With k->of, counts in k->drops the references to that mark which dv_uses_finish will
 * replace (for dv_slot_settle). */
devrt_status dv_uses_pin(dv_work* k);
/* Settles k's slot (dv_slot_settle with k->of and k->drops: the work follows), then makes s
 * wait on every gathered event (counted in k->c); drops them either way. */
devrt_status dv_waits_issue(dv_work* k, dv_stream* s);
/* Records where the work ends (ev, on k's slot) on each block (or their group), then unpins them
 * (unless nothing was pinned: dv_uses_pin failed or was not called); ev NULL only unpins. Drops
 * the reference `old` (may be NULL); with `donate` the caller's reference to ev goes to the
 * blocks too. Leaves each block's version in k->x.ver; returns the references to ev the blocks
 * took (0 for a group: a group's launch is no repeat candidate). Blocks used as one set again,
 * with one access, are grouped here. */
uint32_t dv_uses_finish(dv_work* k, dv_pev* ev, dv_pev* old, bool donate);

/* The repeat path (repeat.c): a launch on `slot` declaring the same uses as the slot's previous
 * launch, when no block changed since and nothing else refers to that launch's lazy mark, needs
 * no wait (the previous launch issued them on this stream), and its mark is the previous one
 * moved forward: no block is locked or written. dv_repeat_try claims it (false: take the usual
 * path); dv_repeat_end, after the work was enqueued (ok) or not, moves the mark or falls back to
 * recording the uses; dv_repeat_save remembers a finished launch's uses. */
bool dv_repeat_try(dv_work* k);
devrt_status dv_repeat_end(dv_work* k, bool ok);
void dv_repeat_save(const dv_work* k, dv_pev* ev, uint32_t gain);

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
 * reference on what it keeps; w (from dv_waits_init) takes peer runtimes' marks up to its
 * `foreign` room, which the caller sets to the most it adds. */
void dv_waits_add(dv_waits* w, devrt_runtime* rt, unsigned slot, dv_pev* p);

/* The runtime whose block h is (rt's, or a peer's), with its address and size; STALE_BLOCK (as
 * rt's own lookup says) when neither holds it live. */
devrt_status dv_block_find(devrt_runtime* rt, devrt_block h, const char* call,
                           devrt_runtime** owner, void** ptr, size_t* size);
/* When a peer link ends (src/multi, both runtimes synchronized and quiet): rt's blocks drop
 * other's uses. */
void dv_blocks_forget(devrt_runtime* rt, devrt_runtime* other);

#endif
