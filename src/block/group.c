/* group.c: groups, the launch fast path for sets of blocks used again and again with one access
 * (a producer's outputs, then its consumer's inputs): the members share one record of their
 * tracking state, so such a launch locks and writes one record, not one per block. Any other use
 * of a member dissolves the group first, giving every member the group's state back. Groups are
 * pooled in two sizes and never freed before the runtime. */
#include <stdlib.h>
#include <string.h>
#include "blk.h"

/* A pooled group with room for n members (NULL: no host memory). */
static dv_group* group_take(struct dv_blocks* bt, unsigned n) {
  bool big = n > GROUP_SMALL;
  pthread_mutex_lock(&bt->group_mu);
  dv_group* g = bt->groups[big];
  if (g)
    bt->groups[big] = g->next;
  else if ((g = dv_zalloc_lines(offsetof(dv_group, h) +
                                (big ? GROUP_MAX : GROUP_SMALL) * sizeof *g->h)) != NULL) {
    g->t.readers = g->t.inl, g->t.capreaders = INLINE_READERS;
    g->big = big;
    g->all = bt->all_groups, bt->all_groups = g;
  }
  pthread_mutex_unlock(&bt->group_mu);
  return g;
}
static void group_give(struct dv_blocks* bt, dv_group* g) {
  pthread_mutex_lock(&bt->group_mu);
  g->next = bt->groups[g->big], bt->groups[g->big] = g;
  pthread_mutex_unlock(&bt->group_mu);
}
/* Gives every member of g the group's state (and its pins) back; g goes back to the pool. */
DV_NOINLINE void dv_group_dissolve(devrt_runtime* rt, dv_group* g) {
  glock(g);
  if (!g->live) {
    gunlock(g);
    return;
  }
  dv_refs r = {0};
  for (unsigned k = 0; k < g->n; k++) {
    dv_blk* b = dv_blk_of(rt, g->h[k]); /* a member is live: a free dissolves its group first */
    lock(b);
    DV_ASSERT(b->live && atomic_load_explicit(&b->group, memory_order_relaxed) == g);
    DV_ASSERT(!b->t.writer && !(b->pins & FREEING)); /* a member's own track is empty */
    if ((b->t.writer = g->t.writer) != NULL) dv_pev_ref(b->t.writer);
    DV_ASSERT(b->t.nreaders == 0 &&
              g->t.nreaders <= b->t.capreaders); /* a group's list never grows */
    for (unsigned j = 0; j < g->t.nreaders; j++) {
      dv_pev_ref(g->t.readers[j].ev);
      b->t.readers[b->t.nreaders++] = g->t.readers[j];
    }
    b->pins += g->pins;
    atomic_store_explicit(&b->group, NULL, memory_order_relaxed);
    touched(b);
    unlock(b);
  }
  dv_track_clear(rt, &g->t, &r);
  g->live = false, g->gen++, g->n = 0, g->pins = 0;
  gunlock(g);
  dv_refs_apply(rt, &r);
  group_give(rt->blocks, g);
}
static bool same_track(const dv_track* a, const dv_track* b) {
  if (a->writer != b->writer || a->nreaders != b->nreaders) return false;
  for (unsigned k = 0; k < a->nreaders; k++) {
    unsigned j = 0;
    while (j < b->nreaders &&
           (b->readers[j].slot != a->readers[k].slot || b->readers[j].ev != a->readers[k].ev ||
            b->readers[j].wrote != a->readers[k].wrote))
      j++;
    if (j == b->nreaders) return false;
  }
  return true;
}
/* After a launch through the usual path that used the same set of blocks as each one's previous
 * use, with one access: their states (the same on each, unless another thread came between)
 * move into one group. Blocks another launch has pinned are left alone. */
DV_NOINLINE void dv_group_form(devrt_runtime* rt, const dv_uses* x) {
  const devrt_block_use* u = x->u;
  unsigned n = x->n;
  for (unsigned k = 1; k < n; k++)
    if (u[k].access != u[0].access) return;
  dv_group* g = n <= GROUP_MAX ? group_take(rt->blocks, n) : NULL;
  if (!g) return;
  dv_refs r = {0};
  unsigned k = 0;
  glock(g);
  for (; k < n; k++) {
    dv_blk* b = x->b[k];
    lock(b);
    bool ok = b->live && b->gen == u[k].block >> INDEX_BITS && !b->pins &&
              !atomic_load_explicit(&b->group, memory_order_relaxed);
    /* the first member's references become the group's (whose list stays inline: never grown) */
    if (ok && k == 0 && (ok = b->t.nreaders <= g->t.capreaders)) {
      g->t.writer = b->t.writer, g->t.nreaders = b->t.nreaders;
      memcpy(g->t.readers, b->t.readers, b->t.nreaders * sizeof *b->t.readers);
      b->t.writer = NULL, b->t.nreaders = 0;
    } else if (ok && (ok = same_track(&b->t, &g->t))) {
      dv_track_clear(rt, &b->t, &r);
    }
    if (ok) {
      /* release: publishes g to launches that read b->group without b's lock */
      atomic_store_explicit(&b->group, g, memory_order_release);
      g->h[k] = u[k].block;
      touched(b);
    }
    unlock(b);
    if (!ok) break;
  }
  g->n = k, g->live = true;
  g->t.epoch++;
  gunlock(g);
  dv_refs_apply(rt, &r);
  if (k < n) dv_group_dissolve(rt, g); /* the members so far get their state back */
}
/* True if u's blocks, each a member of g and used with one access, are all g's members: each
 * named once (the caller's list is not deduplicated yet). Out of line: the slot's last group
 * matches in its own order. */
static DV_NOINLINE bool same_set(devrt_runtime* rt, dv_group* g, const devrt_block_use* u,
                                 unsigned n) {
  for (unsigned k = 0; k < n; k++) {
    dv_blk* b = dv_blk_of(rt, u[k].block);
    if (!b || atomic_load_explicit(&b->group, memory_order_relaxed) != g ||
        b->gen != u[k].block >> INDEX_BITS || u[k].access != u[0].access)
      return false;
    for (unsigned j = 0; j < k; j++)
      if (u[j].block == u[k].block) return false;
  }
  return true;
}
/* True, with g locked, if u's blocks are exactly g's members (in g's order, or with any_order in
 * any order), used with one access. */
DV_HOT static bool group_match(devrt_runtime* rt, dv_group* g, const devrt_block_use* u, unsigned n,
                               bool any_order) {
  glock(g);
  if (g->live && g->n == n) {
    uint64_t diff = 0; /* branch-free: a match compares every member anyway */
    for (unsigned k = 0; k < n; k++)
      diff |= (u[k].block ^ g->h[k]) | (uint64_t)(u[k].access ^ u[0].access);
    if (!diff || (any_order && same_set(rt, g, u, n))) return true;
  }
  gunlock(g);
  return false;
}
/* The slot's last group first, in its order; else the first block's, in any order. k->x may be the
 * caller's list as it is, neither checked nor deduplicated. The waits are counted as if block by
 * block. */
DV_HOT bool dv_group_pin(dv_work* k) {
  devrt_runtime* rt = k->rt;
  const devrt_block_use* u = k->x.u;
  unsigned n = k->x.n;
  if (!n || n > GROUP_MAX || !dv_access_ok(u[0].access)) return false;
  dv_evslot* es = &rt->evslots[k->slot];
  /* the slot's last group, in the same order (acquire: pairs with the release below, which
   * passed on group_form's publication of g) */
  dv_group* g = atomic_load_explicit(&es->group, memory_order_acquire);
  if (DV_UNLIKELY(!g || !group_match(rt, g, u, n, false))) {
    dv_blk* b0 = dv_blk_of(rt, u[0].block);
    /* acquire: pairs with group_form's release of b->group */
    if (!b0 || !(g = atomic_load_explicit(&b0->group, memory_order_acquire)) ||
        !group_match(rt, g, u, n, true))
      return false;
    atomic_store_explicit(&es->group, g, memory_order_release); /* passes g's publication on */
  }
  DV_ASSERT(g->live && g->n == n);
  g->pins++;
  dv_track_gather(k, &g->t, u[0].access, n); /* counted as if block by block */
  if (k->of) k->drops = dv_track_drops(&g->t, u[0].access, k->of);
  k->how = (dv_pinned){g, g->gen, g->t.epoch};
  gunlock(g);
  k->c.grouped++;
  return true;
}

bool dv_group_finish(dv_work* k, dv_refs* r, bool donate) {
  dv_group* g = k->how.g;
  glock(g);
  if (DV_UNLIKELY(g->gen != k->how.gen)) { /* dissolved: the members hold its pins */
    gunlock(g);
    return false;
  }
  DV_ASSERT(g->live && g->pins > 0);
  if (r->ev && DV_UNLIKELY(!dv_track_has_room(k->rt, &g->t, r))) { /* a group's list never grows: */
    gunlock(g); /* its members go back to their own, block by block */
    dv_group_dissolve(k->rt, g);
    return false;
  }
  if (r->ev) {
    dv_refs_give(r, 1, donate);
    dv_track_record(k->rt, &g->t, k->x.u[0].access, k->slot, r, g->t.epoch == k->how.epoch);
  }
  g->pins--;
  gunlock(g);
  dv_refs_apply(k->rt, r);
  return true;
}

void dv_groups_fini(struct dv_blocks* t) {
  for (dv_group *g = t->all_groups, *nx; g; g = nx) {
    nx = g->all;
    if (g->t.readers != g->t.inl) free(g->t.readers);
    free(g);
  }
  pthread_mutex_destroy(&t->group_mu);
}
