/* timeline.h (internal): what every layer asks about a stream. Stream slots and their ids, the
 * bounded pools that lease them (streams.c), and marks: pooled, reference-counted events that
 * mark points of a slot's work, numbered per slot, with a completion watermark (marks.c). The
 * public devrt_event is in event.c. Blocks, launches, memory, the queue and partitions use it. */
#ifndef DEVRT_TIMELINE_H
#define DEVRT_TIMELINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "devrt/devrt.h"
#include "../backend/backend.h"
#include "../core/spin.h"

/* A stream id: runtime serial (20 bits) | slot (12 bits) | lease number of that slot (32 bits). */
#define DV_SID_SERIAL(id) ((id) >> 44)
#define DV_SID_SLOTS 4096u /* the slot table's length: every slot an id can name */
#define DV_SID_SLOT(id) ((unsigned)((id) >> 32) & (DV_SID_SLOTS - 1))
#define DV_SID(serial, slot, lease) \
  (((uint64_t)(serial) << 44) | ((uint64_t)(slot) << 32) | (uint32_t)(lease))

/* A bounded pool of stream slots: the runtime's own, or one partition's (src/partition). Its
 * fields are guarded by the runtime's pool_mu. */
typedef struct dv_pool {
  unsigned* slots; /* its slot indices */
  unsigned n, created, in_use, share_next;
  int free_head; /* -1: none free */
  int priority;
  dv_green* green;              /* where its streams run; NULL: the primary context */
  struct devrt_partition* part; /* the partition it belongs to; NULL: the runtime's pool */
} dv_pool;

/* A block allocated in a capture (src/block): owned once the capture freed it (its handle then
 * the graph's, the caller's stale). */
typedef struct dv_made {
  devrt_block h;
  bool owned;
} dv_made;

/* A stream that joined a capture by waiting for an event recorded in it (devrt_stream_wait_event:
 * CUDA's fork), with its own capture stream; joined back once a stream of the capture waited for
 * an event recorded on it after its last recorded call (back == the slot's cap_last). */
typedef struct dv_joined {
  unsigned slot;
  dv_stream* ps;
  uint32_t back;
} dv_joined;
#define DV_CAPTURE_JOINED 16 /* streams a capture may fork into */

/* A stream slot's capture (src/launch/graph.c), set up by devrt_capture_begin on the capturing
 * thread, which alone uses it until devrt_capture_end: the work that thread issues on the slot's
 * stream is recorded on ps, a stream of the capture's own that nothing else uses, and not run;
 * the recorded work's uses gather in u (one entry a block, its accesses merged). Streams joined
 * by events record on their own capture streams into the same capture (joined). */
typedef struct dv_capture {
  struct devrt_runtime* rt;
  dv_stream* ps;
  uint64_t id; /* process-wide unique: names the capture an event was recorded in */
  dv_joined joined[DV_CAPTURE_JOINED];
  unsigned njoined;
  devrt_block_use u[DEVRT_LAUNCH_MAX_USES];
  unsigned n;
  unsigned launches;       /* recorded launches, copies and fills */
  dv_made* made;           /* blocks allocated in the capture (malloc'd) */
  unsigned nmade, capmade; /* their count and room */
  struct dv_hold* holds;   /* what the graph holds for higher layers (dv_capture_hold; malloc'd) */
  unsigned nholds, capholds;
  struct dv_capture* next; /* the capturing thread's other captures (dv_thread_captures) */
} dv_capture;

typedef struct dv_slot {
  _Atomic uint64_t id;         /* the live lease's id; 0 while free */
  _Atomic uintptr_t cap_owner; /* capturing: the thread's token (dv_thread_me), else 0; claimed
                                * (CAS, acquire) and released (release) by that thread
                                * (dv_capture_claim), compared by any (streams' lookups) */
  dv_capture* cap;             /* capturing: its state, read and written by cap_owner only */
  dv_stream* cap_ps;           /* capturing: where this slot records (cap->ps, or a joined
                                * stream's own); cap_owner only */
  uint32_t cap_last;           /* capturing: recorded calls on this slot so far; cap_owner only */
  dv_stream* s;                /* created on the slot's first lease, then reused; set before id */
  dv_pool* pool;       /* set before id; NULL for the runtime's own slot and unassigned ones */
  uint32_t lease;      /* guarded by pool_mu */
  unsigned holders;    /* guarded by pool_mu; >1 when shared */
  int next_free;       /* guarded by pool_mu; -1 ends the list */
  uint8_t foreign;     /* guarded by pool_mu: DV_FOREIGN_* (an imported stream's slot) */
  bool retiring;       /* guarded by pool_mu: its last import was forgotten, being retired */
  void* native;        /* guarded by pool_mu: the imported handle (NULL: the legacy stream) */
  struct dv_slot* src; /* guarded by pool_mu: the slot of another runtime whose stream this
                        * import wraps, held by it (src->exports) until the last forget */
  unsigned exports;    /* guarded by streams.c's live_mu: imports of this slot's stream held by
                        * other runtimes (its runtime is not destroyed meanwhile) */
} dv_slot;
/* How a slot holds its stream: created by devrt; wrapping a foreign native stream (never
 * destroyed by devrt); created by devrt to stand for the legacy default stream (imported). */
enum { DV_FOREIGN_NONE, DV_FOREIGN_WRAPPED, DV_FOREIGN_LEGACY };

/* A point in one stream slot's work (a mark). Marks of one slot are numbered in the order of the
 * work they follow, so the newest covers the older ones. A launch's mark is lazy: its event is
 * recorded only when something needs it (a wait from another slot), at a point at or
 * after the work it marks; devrt records it before enqueuing more on the slot if anything still
 * refers to it, so the point stays exact (foreign work on the native stream can only delay it). */
typedef struct dv_pev {
  _Alignas(64) dv_event* ev;
  _Atomic uint32_t refs;
  uint32_t slot;
  struct devrt_runtime* rt; /* whose slot: a track or a semaphore may hold a peer's marks */
  _Atomic uint64_t seq;     /* moves forward when a repeated launch reuses the mark (dv_repeat_*) */
  _Atomic uint8_t rec;      /* DV_PEV_LAZY, DV_PEV_RECORDING (one thread), RECORDED, DONE */
  struct dv_pev *next, *all; /* free list; every event of the slot (for teardown) */
} dv_pev;
/* A mark is LAZY until something needs it; one thread then holds it RECORDING while it records
 * the event (RECORDED) or, finding the point already complete, settles it as DONE without a
 * record. Only a LAZY mark can move (the repeat path holds it RECORDING while it does), so a
 * RECORDED or DONE mark's seq is final. */
enum { DV_PEV_LAZY, DV_PEV_RECORDING, DV_PEV_RECORDED, DV_PEV_DONE };

/* What one piece of work on a slot adds to the slot's counters: gathered on the way, added
 * under the slot's lock once (with the mark when there is one), so a launch takes no atomic
 * add per counter; v adds them as one vector. */
typedef union dv_counts {
  struct {
    uint64_t waits, same, complete, coalesced, grouped, repeats, launches, late;
  };
  uint64_t v[8];
} dv_counts;

/* Per stream slot: the mark lock (so seq follows the stream's order even when threads share a
 * stream), the free events, the completion watermark, and the counters of work on this slot.
 * Its first line holds what a launch on the slot reads and the next its counters; the second
 * DV_LINE unit what other slots' threads write or read (returned events, the watermark). */
typedef struct dv_evslot {
  _Alignas(DV_LINE) dv_spin mu;    /* a spin lock: no driver call under it (take() drops it to
                                    * create an event, dv_pev_record records after it) */
  _Atomic uint8_t rep_state;       /* DV_REP_*: who holds `rep` (src/block/repeat.c) */
  _Atomic uint8_t rep_cold;        /* saves to skip: the repeated mark was needed elsewhere */
  dv_pev* free;                    /* under mu */
  _Atomic(dv_pev*) last;           /* the newest mark (holds a reference); written under mu */
  _Atomic uint64_t seq;            /* written under mu; read without it only as a hint */
  _Atomic(dv_pev*) rep_mark;       /* rep->mark, readable without `issuing` (a hint) */
  _Atomic(struct dv_group*) group; /* the group the slot's last grouped launch used (a hint) */
  struct dv_repeat* rep;           /* the last launch's uses, for the repeat path */
  uint64_t deferred;               /* under mu */
  dv_counts n;                     /* under mu: the totals */
  _Alignas(DV_LINE) _Atomic(dv_pev*) back; /* events given back without the lock; taken under mu */
  _Atomic uint64_t done_seq;               /* every event with seq <= this has completed */
  _Atomic uint64_t created, allocs, frees;
  uint64_t recorded, reused; /* under mu */
  dv_pev* all;               /* every event of the slot, for teardown (under mu) */
} dv_evslot;

/* Who holds a slot's remembered uses (rep_state), one thread at a time: nobody; a launch on the
 * slot that matched them and is issuing against them (set by dv_repeat_try, cleared by
 * dv_repeat_end on that thread); the slot's launching thread writing them after a launch (set and
 * cleared by dv_repeat_save). A free of a block the slot used waits while it is not IDLE. */
enum { DV_REP_IDLE, DV_REP_ISSUING, DV_REP_SAVING };

void dv_counts_add_locked(dv_evslot* es, const dv_counts* c);
void dv_counts_flush(devrt_runtime* rt, unsigned slot, const dv_counts* c);

/* marks.c. A mark belongs to its runtime's slot (p->rt), and may be held by another runtime's
 * tracks and semaphores (src/multi: peer access): the calls below that take a mark act on its own
 * runtime's slot, whatever runtime the caller names; only the stream a wait goes to, and the
 * counters a record is added to, are the caller's. A slot is named by (p->rt, p->slot). */
/* Records a pooled event on stream s of `slot`; the caller owns one reference. */
devrt_status dv_pev_record(devrt_runtime* rt, unsigned slot, dv_stream* s, dv_pev** out);
/* A lazy mark after the work just enqueued on `slot`; the caller owns one reference to it, and
 * the slot's reference to the previous newest mark (*old, may be NULL), to drop. Adds c to the
 * slot's counters either way. */
devrt_status dv_pev_mark(devrt_runtime* rt, unsigned slot, dv_pev** out, dv_pev** old,
                         const dv_counts* c);
/* Records p's event if it is a lazy mark not recorded yet (lock-free; one thread records). A
 * record is counted in *late, for the caller to add to its own slot's counters (the total is
 * what devrt_block_stats reports), or with late NULL on p's slot at once. */
devrt_status dv_pev_realize(devrt_runtime* rt, dv_pev* p, uint64_t* late);
/* Makes s wait for p (nothing if p is known complete); late as for dv_pev_realize. */
devrt_status dv_pev_wait(devrt_runtime* rt, dv_stream* s, dv_pev* p, uint64_t* late);
/* Before devrt enqueues more work on `slot`: records its newest mark if it is lazy and referred
 * to by more than the slot itself and the `drops` references (to mark `of`) that the coming work
 * will replace. Lock-free when there is nothing to record. */
devrt_status dv_slot_settle(devrt_runtime* rt, unsigned slot, const dv_pev* of, uint32_t drops,
                            uint64_t* late);
/* The slot's newest mark, as a hint (no reference taken: pooled events are never freed). */
const dv_pev* dv_slot_last(devrt_runtime* rt, unsigned slot);
/* The slot's stream was synchronized and is going away: every mark of it is complete. */
void dv_events_retire(devrt_runtime* rt, unsigned slot);
static inline void dv_pev_ref(dv_pev* p) {
  atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
}
void dv_pev_unref_n(devrt_runtime* rt, dv_pev* p, uint32_t n);
static inline void dv_pev_unref(devrt_runtime* rt, dv_pev* p) { dv_pev_unref_n(rt, p, 1); }
/* p is known to have completed (a poll or a synchronize saw its slot get past it) and its point
 * is final: a judgment that stays true, which is what may drop or skip a wait on it. A lazy mark
 * is never done here (it could still move); dv_pev_realize settles it. */
bool dv_pev_done(devrt_runtime* rt, const dv_pev* p);
/* p's slot got past p's point when last looked at (a snapshot, for reports only). */
bool dv_pev_passed(devrt_runtime* rt, const dv_pev* p);
/* Queries each slot's newest event once and advances the slots' watermarks. */
void dv_events_poll(devrt_runtime* rt);
/* Stream synchronize hooks: the seq to mark done once the synchronize has returned. */
uint64_t dv_events_sync_begin(devrt_runtime* rt, unsigned slot);
void dv_events_sync_end(devrt_runtime* rt, unsigned slot, uint64_t seq);

#endif
