/* repeat.c: the repeat path, the launch fast path for a stream whose launch declares exactly the
 * uses of its previous launch (same blocks, same access, same order) when no block's tracking
 * state changed since and nothing but those blocks refers to the previous launch's lazy mark: no
 * wait is needed (the previous launch issued them on this stream), and its point is the previous
 * mark moved forward: no block is locked or written, whatever the number of blocks. */
#include <string.h>
#include "blk.h"

/* A slot's remembered uses: the last launch's blocks, their versions after it, and its mark. */
typedef struct dv_repeat {
  unsigned n;
  uint32_t gain; /* the references the blocks hold to mark */
  dv_pev* mark;  /* the launch's mark (no reference: compared with the slot's newest) */
  devrt_block_use u[DEVRT_LAUNCH_MAX_USES];
  dv_blk* b[DEVRT_LAUNCH_MAX_USES];
  uint64_t ver[DEVRT_LAUNCH_MAX_USES];
} dv_repeat;

/* Launches that skip saving their uses after a repeated mark was needed by another stream (as in
 * a producer/consumer pair, where the repeat path never holds). */
#define REPEAT_COLD 16u

/* IDLE -> ISSUING (dv_repeat_try) or SAVING (dv_repeat_save), back to IDLE by the same thread.
 * seq_cst: a claim and a free's bump of a block's version (block.c), each followed by its look at
 * the other's state, must not both miss the other. */
static bool claim(dv_evslot* es, uint8_t state) {
  uint8_t idle = DV_REP_IDLE;
  return atomic_compare_exchange_strong_explicit(&es->rep_state, &idle, state, memory_order_seq_cst,
                                                 memory_order_relaxed);
}
static void release(dv_evslot* es, uint8_t state) {
  DV_ASSERT(atomic_load_explicit(&es->rep_state, memory_order_relaxed) == state);
  (void)state;
  /* release: pairs with a free's acquire spin, which then sees the records this launch wrote */
  atomic_store_explicit(&es->rep_state, DV_REP_IDLE, memory_order_release);
}

DV_HOT bool dv_repeat_try(dv_work* k) {
  dv_evslot* es = &k->rt->evslots[k->slot];
  unsigned n = k->x.n;
  /* acquire: pairs with the release that installed the slot's newest mark (marks.c) */
  dv_pev* m = atomic_load_explicit(&es->last, memory_order_acquire);
  if (!n || !m || atomic_load_explicit(&es->rep_mark, memory_order_relaxed) != m) return false;
  if (atomic_load_explicit(&m->rec, memory_order_relaxed) != DV_PEV_LAZY) { /* needed elsewhere */
    atomic_store_explicit(&es->rep_cold, REPEAT_COLD, memory_order_relaxed);
    return false;
  }
  if (!claim(es, DV_REP_ISSUING)) return false;
  dv_repeat* r = es->rep;
  /* acquire (both): pair with the releases that moved the mark out of RECORDING (marks.c) and
   * dropped a reference to it */
  bool same = r->n == n && m == r->mark &&
              atomic_load_explicit(&m->rec, memory_order_acquire) == DV_PEV_LAZY &&
              atomic_load_explicit(&m->refs, memory_order_acquire) == 1 + r->gain;
  for (unsigned i = 0; same && i < n; i++) /* seq_cst: against a free's version bump (claim) */
    same = r->u[i].block == k->x.u[i].block && r->u[i].access == k->x.u[i].access &&
           atomic_load_explicit(&r->b[i]->ver, memory_order_seq_cst) == r->ver[i];
  if (!same) release(es, DV_REP_ISSUING);
  return same;
}

devrt_status dv_repeat_end(dv_work* k, bool ok) {
  devrt_runtime* rt = k->rt;
  unsigned slot = k->slot;
  dv_evslot* es = &rt->evslots[slot];
  DV_ASSERT(atomic_load_explicit(&es->rep_state, memory_order_relaxed) == DV_REP_ISSUING);
  dv_repeat* r = es->rep;
  dv_pev* m = r->mark;
  bool moved = !ok; /* nothing was enqueued: nothing to mark */
  dv_spin_lock(&es->mu);
  uint8_t lazy = DV_PEV_LAZY;
  /* seq_cst, as the realizers' CAS of rec (marks.c: dv_pev_realize), which wait while the mark is
   * RECORDING */
  if (ok && atomic_load_explicit(&es->last, memory_order_relaxed) == m &&
      atomic_compare_exchange_strong_explicit(&m->rec, &lazy, DV_PEV_RECORDING,
                                              memory_order_seq_cst, memory_order_relaxed)) {
    uint64_t seq = atomic_load_explicit(&es->seq, memory_order_relaxed) + 1;
    /* seq_cst: pairs with dv_pev_realize's seq_cst read of p->seq against done_seq */
    atomic_store_explicit(&m->seq, seq, memory_order_seq_cst);
    atomic_store_explicit(&es->seq, seq, memory_order_release); /* pairs: marks.c's readers */
    /* release: pairs with a realizer's acquire of rec, which then sees the new seq */
    atomic_store_explicit(&m->rec, DV_PEV_LAZY, memory_order_release);
    es->deferred++;
    moved = true;
    dv_counts_add_locked(es, &(dv_counts){.repeats = 1, .launches = 1});
  }
  dv_spin_unlock(&es->mu);
  devrt_status st = DEVRT_OK;
  if (!moved) { /* the mark was needed meanwhile: a new one, recorded on each block (frees wait for
                   us: the slot is still ISSUING) */
    dv_pev *ev = NULL, *old = NULL;
    memcpy(k->x.b, r->b, k->x.n * sizeof *k->x.b);
    if ((st = dv_pev_mark(rt, slot, &ev, &old, &(dv_counts){.launches = 1})) != DEVRT_OK) {
      rt->be->stream_sync(dv_slot_stream(rt, slot)); /* the work cannot be tracked: let it finish */
      ev = NULL;
    }
    DV_ASSERT(!k->pinned); /* recorded unpinned: the ISSUING state keeps the blocks */
    r->gain = dv_uses_finish(k, ev, old, true);
    r->mark = ev;
    atomic_store_explicit(&es->rep_mark, ev, memory_order_relaxed);
    memcpy(r->ver, k->x.ver, k->x.n * sizeof *k->x.ver);
    if (!ev) r->n = 0;
  }
  release(es, DV_REP_ISSUING);
  return st;
}

/* Out of line: grouped launches never save, and most saves end at the first checks. */
DV_NOINLINE void dv_repeat_save(const dv_work* k, dv_pev* ev, uint32_t gain) {
  unsigned n = k->x.n;
  dv_evslot* es = &k->rt->evslots[k->slot];
  uint8_t cold = atomic_load_explicit(&es->rep_cold, memory_order_relaxed);
  if (cold) /* (a lost update costs a save) */
    atomic_store_explicit(&es->rep_cold, (uint8_t)(cold - 1), memory_order_relaxed);
  if (!n || !ev || cold || !claim(es, DV_REP_SAVING)) return;
  DV_ASSERT(ev->rt == k->rt && ev->slot == k->slot && !k->pinned); /* the launch's own mark */
  if (!es->rep) es->rep = malloc(sizeof *es->rep); /* no room: no repeat path on this slot */
  if (es->rep) {
    DV_ASSERT(n <= DEVRT_LAUNCH_MAX_USES);
    memcpy(es->rep->u, k->x.u, n * sizeof *k->x.u);
    memcpy(es->rep->b, k->x.b, n * sizeof *k->x.b);
    memcpy(es->rep->ver, k->x.ver, n * sizeof *k->x.ver);
    es->rep->n = n, es->rep->mark = ev, es->rep->gain = gain;
    atomic_store_explicit(&es->rep_mark, ev, memory_order_relaxed);
  }
  release(es, DV_REP_SAVING);
}
