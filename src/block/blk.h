/* blk.h (internal to src/block): the records of the block table and of groups, the tracking
 * state they hold (a track), and what the files of src/block share: the locks, the lookups, the
 * reference batches and the steps each file offers the others. */
#ifndef DEVRT_BLOCK_BLK_H
#define DEVRT_BLOCK_BLK_H

#include <stddef.h>
#include "block.h"
#include "../memory/account.h"

enum {
  CHUNK_BITS = 12,
  CHUNK = 1 << CHUNK_BITS,
  NCHUNKS = 4096,
  NSTRIPE = 16,
  INLINE_READERS = 3,
  GROUP_SMALL = 2,
  GROUP_MAX = 64,
  USERS_MAX = 4 /* slots a block remembers having used it; past that its free checks every slot */
};
#define INDEX_BITS 24 /* handle = generation (40 bits) << 24 | (index + 1) */
#define GEN_MASK ((1ull << 40) - 1)
#define FREEING 0x80000000u /* a block's pins while a free is in progress (with the pins left) */

/* What later uses must respect: the last writer, and one entry per slot for the other uses a
 * write or a free must wait for: the reads since that write, and any earlier use a write could
 * not prove it came after (see record_write). Guarded by the lock of the block or group that
 * holds it. */
typedef struct dv_track {
  dv_pev* writer;
  dv_wait* readers;              /* points at inl until it outgrows it */
  uint16_t nreaders, capreaders; /* at most one entry per stream slot (DV_SID_SLOTS) */
  uint32_t epoch; /* bumped by every change: a stream that waited for what the track held at
                   * epoch e has waited for what it holds while the epoch is still e */
  dv_wait inl[INLINE_READERS];
} dv_track;

/* Blocks used again and again as one set with one access (a producer's outputs, then its
 * consumer's inputs; one block is a set too) share one record of their tracking state, so such a
 * launch locks and writes one record, not one per block, on one short path. Any other use of a
 * member dissolves the group first, giving every member the group's state back. Groups are pooled
 * in two sizes (up to GROUP_SMALL members, or GROUP_MAX) and never freed before the runtime. */
typedef struct dv_group { /* every field is guarded by `lock`, but the pool links (group_mu) */
  _Alignas(DV_LINE) dv_spin lock;
  bool live;
  bool big;      /* room for GROUP_MAX members, else GROUP_SMALL */
  uint32_t pins; /* launches issuing against it; passed on to the members if it dissolves */
  unsigned n;
  uint64_t gen; /* bumped when it dissolves: a launch that pinned it then finishes block by block */
  dv_track t;
  struct dv_group *next, *all; /* pool; every group (for teardown) */
  devrt_block h[];             /* the members */
} dv_group;
_Static_assert(offsetof(dv_group, h) + GROUP_SMALL * sizeof(devrt_block) <= DV_LINE,
               "a small group takes one DV_LINE unit");

/* One record of the block table. Every field is guarded by `lock` (a spin lock: no allocation,
 * driver call or wait inside it), but `ver` and `group`, which launches also read without it. */
typedef struct dv_blk {
  dv_spin lock;
  bool live;
  bool pending;  /* reserved by a queued allocation that has not been issued: no memory yet */
  uint32_t pins; /* launches issuing against it; FREEING while a free is in progress */
  uint64_t gen;  /* of the current (or last) allocation in this slot: process-wide unique */
  _Atomic uint64_t
      ver; /* bumped under the lock by every change of t or group (the repeat path reads it) */
  _Atomic(dv_group*)
      group;         /* set (under both locks): t is empty, the group's record holds the state */
  uint32_t lastset;  /* the set of blocks its last tracked use declared (a hash) */
  uint32_t lastslot; /* and that use's slot */
  uint8_t nusers;    /* slots in users[], or USERS_MAX + 1: more than fit (any slot may be) */
  uint16_t users[USERS_MAX]; /* the slots that recorded a use since the allocation: only their
                              * repeat paths can hold it (dv_block_free_on waits for them) */
  uint32_t prep_slot;        /* the last devrt_prepare_block_use: its slot + 1 (0: none), */
  bool prep_write;           /* whether it waited as a write does, */
  uint32_t prep_epoch;       /* and t.epoch once its waits were issued */
  void* ptr;
  size_t size;
  const char* tag;
  devrt_stream stream;
  devrt_resource* res; /* what allocated it: the stack, or its stream's partition's sub-budget */
  dv_track t;
} dv_blk;

typedef struct stripe { /* free indices, guarded by mu (a mutex: give_index may realloc under it) */
  _Alignas(64) pthread_mutex_t mu;
  uint32_t* idx;
  unsigned n, cap;
} stripe;

struct dv_blocks {
  _Atomic uint32_t next; /* indices handed out so far (first: every lookup reads it) */
  _Atomic(dv_blk*) chunk[NCHUNKS];
  pthread_mutex_t grow_mu;
  stripe free[NSTRIPE];             /* free indices, striped by the hint (a stream slot) */
  pthread_mutex_t group_mu;         /* the group pool */
  dv_group *groups[2], *all_groups; /* pools: [big] */
};

_Static_assert(offsetof(dv_evslot, n) == 64 && offsetof(dv_evslot, back) == DV_LINE,
               "a launch reads one line of its slot's state and adds to the next");

static inline void lock(dv_blk* b) { dv_spin_lock(&b->lock); }
static inline void unlock(dv_blk* b) { dv_spin_unlock(&b->lock); }
static inline void glock(dv_group* g) { dv_spin_lock(&g->lock); }
static inline void gunlock(dv_group* g) { dv_spin_unlock(&g->lock); }
/* b's tracking state changed (b locked): its track's epoch moves, and its version (seq_cst: a
 * repeat launch's check of the versions and a free's bump of one, each followed by its look at
 * the other's slot state, must not both miss the other: repeat.c, block.c's free). */
static inline void touched(dv_blk* b) {
  b->t.epoch++;
  atomic_store_explicit(&b->ver, atomic_load_explicit(&b->ver, memory_order_relaxed) + 1,
                        memory_order_seq_cst);
}

/* Slot `slot` recorded a use of b (b locked): its repeat path may now hold b. */
static inline void add_user(dv_blk* b, unsigned slot) {
  for (unsigned k = 0; k < b->nusers && k < USERS_MAX; k++)
    if (b->users[k] == slot) return;
  if (b->nusers < USERS_MAX) b->users[b->nusers] = (uint16_t)slot;
  if (b->nusers <= USERS_MAX) b->nusers++;
}

static inline dv_blk* dv_blk_at(struct dv_blocks* t, uint32_t i) {
  /* acquire: pairs with the release that published the chunk (block.c's take_index) */
  dv_blk* ch = atomic_load_explicit(&t->chunk[i >> CHUNK_BITS], memory_order_acquire);
  return ch ? &ch[i & (CHUNK - 1)] : NULL;
}
/* The record of h's slot, unlocked (NULL if there is none); says nothing of h being live. */
static inline dv_blk* dv_blk_of(devrt_runtime* rt, devrt_block h) {
  uint64_t i = (h & ((1ull << INDEX_BITS) - 1)) - 1;
  return h && i < atomic_load_explicit(&rt->blocks->next, memory_order_acquire)
             ? dv_blk_at(rt->blocks, (uint32_t)i)
             : NULL;
}
static inline uint32_t dv_blk_index(devrt_block h) {
  return (uint32_t)((h & ((1ull << INDEX_BITS) - 1)) - 1);
}
/* b's tag for a message, read with b locked (a reused slot's allocation rewrites it). */
static inline const char* dv_blk_tag(const dv_blk* b) { return b->tag ? b->tag : "untagged"; }

/* References moved by one pass over blocks: the new event's given in one add before the pass,
 * the old events' losses grouped per event (most blocks of a launch share their old event too)
 * and dropped after it. */
typedef struct dv_refs {
  dv_pev* ev;
  uint32_t gain, given; /* references to ev the records took; those provided for them */
  unsigned n;           /* entries of drop and cnt in use (only those are initialized) */
  dv_pev* drop[8];
  uint32_t cnt[8];
} dv_refs;
/* Leaves the arrays as they are: every launch builds one. */
static inline void dv_refs_init(dv_refs* r, dv_pev* ev) {
  r->ev = ev, r->gain = r->given = 0, r->n = 0;
}

/* ---- block.c: the table ---- */

/* The block of a live handle with its own tracking state (its group dissolved), locked; NULL
 * (with the error set in *st) otherwise, or if it is a queued allocation not issued yet. */
dv_blk* dv_blk_tracked(devrt_runtime* rt, devrt_block h, const char* call, devrt_status* st);
/* The runtime rt has peer access with whose table holds h live (a snapshot), or NULL. */
devrt_runtime* dv_blk_peer_owner(devrt_runtime* rt, devrt_block h);

/* ---- track.c: the model ---- */

void dv_refs_drop(devrt_runtime* rt, dv_refs* r, dv_pev* p);
void dv_refs_give(dv_refs* r, uint32_t n, bool donate);
void dv_refs_apply(devrt_runtime* rt, dv_refs* r);
void dv_track_clear(devrt_runtime* rt, dv_track* t, dv_refs* r);
void dv_track_drop_entry(devrt_runtime* rt, dv_track* t, unsigned k, dv_refs* r);
/* Whether t has room for the one entry a record adds at most (dropping entries known complete). */
bool dv_track_has_room(devrt_runtime* rt, dv_track* t, dv_refs* r);
/* Records a use of access a by `slot` at r->ev on t (with room made for one entry); `waited`:
 * the slot waited for everything t held (its epoch shows it). */
void dv_track_record(devrt_runtime* rt, dv_track* t, devrt_access a, unsigned slot, dv_refs* r,
                     bool waited);
/* Gathers what access a on k's slot must wait for in t, counted as `wt` uses (a group's members).
 */
void dv_track_gather(dv_work* k, const dv_track* t, devrt_access a, unsigned wt);
/* The references to mark `of` that recording access a on t will replace. */
uint32_t dv_track_drops(const dv_track* t, devrt_access a, const dv_pev* of);
/* b locked, its group dissolved (lock_tracked), with room for one more entry. */
void dv_blk_lock_tracked(devrt_runtime* rt, dv_blk* b);
void dv_blk_lock_with_room(devrt_runtime* rt, dv_blk* b, dv_refs* r);

/* ---- group.c: groups ---- */

/* Gives every member of g the group's state (and its pins) back; g goes back to the pool. */
void dv_group_dissolve(devrt_runtime* rt, dv_group* g);
/* The group whose members are exactly k's blocks, used with one valid access: pinned, with its
 * waits gathered; false if there is none. */
bool dv_group_pin(dv_work* k);
/* After a launch through the usual path that used the same set of blocks as each one's
 * previous use, with one access: their states move into one group. */
void dv_group_form(devrt_runtime* rt, const dv_uses* x);
/* Records where a grouped work ends (dv_uses_finish for a group); false if the group dissolved
 * or its list is full: then the caller finishes block by block. */
bool dv_group_finish(dv_work* k, dv_refs* r, bool donate);
/* Frees every pooled group (the runtime's destroy). */
void dv_groups_fini(struct dv_blocks* t);

#endif
