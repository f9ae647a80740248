/* block.c: the block table and the blocks' public calls. A handle is the record's index and the
 * allocation's generation; records sit in chunks that never move, so a lookup is two loads; a
 * lock per record, never one for the runtime. Allocation (also as queued work), the deferred free
 * on the runtime's free stream, prepare and finish of foreign uses, and the lookups other layers
 * make. The tracking model is track.c's; the launch fast paths group.c's and repeat.c's. */
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "blk.h"

/* Generations are process-wide, so a handle of another runtime never matches a record here. */
static _Atomic uint64_t next_gen = 1;

/* ---- the table ---- */

devrt_status dv_blocks_init(devrt_runtime* rt) {
  rt->evslots = dv_zalloc_lines(sizeof *rt->evslots * rt->nslots);
  rt->blocks = calloc(1, sizeof *rt->blocks);
  if (!rt->evslots || !rt->blocks) {
    free(rt->evslots), free(rt->blocks);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                   "devrt_runtime: out of host memory for the block table");
  }
  pthread_mutex_init(&rt->blocks->grow_mu, NULL);
  pthread_mutex_init(&rt->blocks->group_mu, NULL);
  for (unsigned i = 0; i < NSTRIPE; i++) pthread_mutex_init(&rt->blocks->free[i].mu, NULL);
  return DEVRT_OK;
}

/* Frees the table's own memory and every pooled event; device memory of blocks never freed goes
 * with the resource stack. */
void dv_blocks_fini(devrt_runtime* rt) {
  struct dv_blocks* t = rt->blocks;
  for (unsigned c = 0; c < NCHUNKS; c++) {
    dv_blk* ch = atomic_load_explicit(&t->chunk[c], memory_order_relaxed); /* no other thread */
    for (unsigned i = 0; ch && i < CHUNK; i++)
      if (ch[i].t.readers != ch[i].t.inl) free(ch[i].t.readers);
    free(ch);
  }
  dv_groups_fini(t);
  for (unsigned i = 0; i < NSTRIPE; i++) {
    free(t->free[i].idx);
    pthread_mutex_destroy(&t->free[i].mu);
  }
  pthread_mutex_destroy(&t->grow_mu);
  free(t);
  for (unsigned i = 0; i < rt->nslots; i++) {
    free(rt->evslots[i].rep);
    for (dv_pev *p = rt->evslots[i].all, *nx; p; p = nx) {
      nx = p->all;
      rt->be->event_destroy(rt->dev, p->ev);
      free(p);
    }
  }
  free(rt->evslots);
}

/* A free index: the stripe's list first, else a fresh one (its chunk created if need be). */
static devrt_status take_index(struct dv_blocks* t, unsigned hint, uint32_t* out) {
  stripe* s = &t->free[hint % NSTRIPE];
  pthread_mutex_lock(&s->mu);
  bool got = s->n > 0;
  if (got) *out = s->idx[--s->n];
  pthread_mutex_unlock(&s->mu);
  if (got) return DEVRT_OK;
  uint32_t i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
  if (i >= (uint32_t)NCHUNKS * CHUNK) {
    atomic_fetch_sub_explicit(&t->next, 1, memory_order_relaxed);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                   "devrt_block_alloc: %u blocks live, the table's limit", NCHUNKS * CHUNK);
  }
  if (!dv_blk_at(t, i)) {
    pthread_mutex_lock(&t->grow_mu);
    devrt_status st = DEVRT_OK;
    if (!dv_blk_at(t, i)) {
      dv_blk* ch = calloc(CHUNK, sizeof *ch);
      if (ch) /* release: pairs with dv_blk_at's acquire, which then sees the zeroed records */
        atomic_store_explicit(&t->chunk[i >> CHUNK_BITS], ch, memory_order_release);
      else
        st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                     "devrt_block_alloc: out of host memory for the block table");
    }
    pthread_mutex_unlock(&t->grow_mu);
    if (st != DEVRT_OK) return st; /* the index is lost: harmless, the chunk never came */
  }
  *out = i;
  return DEVRT_OK;
}

static void give_index(struct dv_blocks* t, uint32_t i) {
  stripe* s = &t->free[i % NSTRIPE];
  DV_ASSERT(i < atomic_load_explicit(&t->next, memory_order_relaxed)); /* handed out before */
  pthread_mutex_lock(&s->mu);
  DV_ASSERT(s->n <= s->cap);
  if (s->n == s->cap) {
    unsigned cap = s->cap ? s->cap * 2 : 64;
    uint32_t* v = realloc(s->idx, cap * sizeof *v);
    if (!v) { /* the index is lost: the table keeps working with one slot less */
      pthread_mutex_unlock(&s->mu);
      return;
    }
    s->idx = v, s->cap = cap;
  }
  s->idx[s->n++] = i;
  pthread_mutex_unlock(&s->mu);
}

static devrt_status stale(devrt_runtime* rt, devrt_block h, const char* call) {
  if (!h) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: block 0 is not a block", call);
  devrt_runtime* o = dv_blk_peer_owner(rt, h);
  if (o) /* live, and not stale: a peer's */
    return dv_fail(DEVRT_ERR_STALE_BLOCK,
                   "%s: block %#" PRIx64
                   " belongs to the runtime of ordinal %d, which has peer "
                   "access with this one: launches on this runtime may name it (devrt_launch, "
                   "devrt_queue_submit, devrt_block_copy, collectives); other calls take its own "
                   "runtime",
                   call, h, o->cfg.ordinal);
  atomic_fetch_add_explicit(&rt->stale_refusals, 1, memory_order_relaxed);
  return dv_fail(DEVRT_ERR_STALE_BLOCK,
                 "%s: block %#" PRIx64 " (slot %" PRIu64 ", generation %" PRIu64
                 ") is freed, was never allocated, or belongs to another runtime",
                 call, h, (uint64_t)((h & ((1ull << INDEX_BITS) - 1)) - 1),
                 (uint64_t)(h >> INDEX_BITS));
}

DV_NOINLINE devrt_runtime* dv_blk_peer_owner(devrt_runtime* rt, devrt_block h) {
  unsigned n = atomic_load_explicit(&rt->npeers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) {
    devrt_runtime* p = atomic_load_explicit(&rt->peers[i], memory_order_acquire);
    dv_blk* b = p ? dv_blk_of(p, h) : NULL;
    if (!b) continue;
    lock(b);
    bool live = b->live && b->gen == h >> INDEX_BITS;
    unlock(b);
    if (live) return p;
  }
  return NULL;
}

/* The block of a live handle, locked; NULL (with the error set in *st) otherwise. */
static dv_blk* get_locked(devrt_runtime* rt, devrt_block h, const char* call, devrt_status* st) {
  dv_blk* b = dv_blk_of(rt, h);
  if (b) {
    lock(b);
    if (b->live && b->gen == h >> INDEX_BITS) return b;
    unlock(b);
  }
  *st = stale(rt, h, call);
  return NULL;
}

/* As get_locked, and the block must have its memory (not a queued allocation still pending). */
static dv_blk* get_ready(devrt_runtime* rt, devrt_block h, const char* call, devrt_status* st) {
  dv_blk* b = get_locked(rt, h, call, st);
  if (b && b->pending) {
    const char* tag = dv_blk_tag(b);
    unlock(b);
    *st =
        dv_fail(DEVRT_ERR_INVALID_STATE,
                "%s: block %#" PRIx64
                " (tag %s) is a queued allocation not issued yet: wait for its submission's signal",
                call, h, tag);
    return NULL;
  }
  return b;
}

dv_blk* dv_blk_tracked(devrt_runtime* rt, devrt_block h, const char* call, devrt_status* st) {
  for (;;) {
    dv_blk* b = get_ready(rt, h, call, st);
    dv_group* g = b ? atomic_load_explicit(&b->group, memory_order_relaxed) : NULL;
    DV_ASSERT(!g || (!b->t.writer && !b->t.nreaders)); /* a member's state is its group's */
    if (!g) return b;
    unlock(b);
    dv_group_dissolve(rt, g);
  }
}

/* ---- allocations ---- */

devrt_status dv_block_reserve(devrt_runtime* rt, size_t size, devrt_stream stream, const char* tag,
                              devrt_block* out) {
  uint32_t i = 0;
  DV_CHECK(take_index(rt->blocks, DV_SID_SLOT(stream), &i));
  dv_blk* b = dv_blk_at(rt->blocks, i);
  lock(b);
  DV_ASSERT(!b->live && !b->pins); /* a free index: its last block freed or cancelled */
  DV_ASSERT(!b->t.writer && !b->t.nreaders &&
            !atomic_load_explicit(&b->group, memory_order_relaxed));
  if (!b->t.readers) b->t.readers = b->t.inl, b->t.capreaders = INLINE_READERS;
  b->gen = atomic_fetch_add_explicit(&next_gen, 1, memory_order_relaxed) & GEN_MASK;
  b->live = b->pending = true;
  b->pins = 0;
  b->nusers = 0; /* a repeat of the last allocation cannot match this one's handle */
  b->ptr = NULL, b->size = size, b->tag = tag, b->stream = stream;
  b->t.writer = NULL;
  b->t.nreaders = 0;
  touched(b);
  *out = b->gen << INDEX_BITS | (i + 1);
  unlock(b);
  return DEVRT_OK;
}

void dv_block_cancel(devrt_runtime* rt, devrt_block h) {
  devrt_status st;
  dv_blk* b = get_locked(rt, h, "dv_block_cancel", &st);
  if (!b) return;
  DV_ASSERT(b->pending && !b->pins); /* only a queued allocation not issued is cancelled */
  b->live = b->pending = false;
  touched(b);
  unlock(b);
  give_index(rt->blocks, dv_blk_index(h));
}

/* dv_block_commit from `top` (NULL: the stream's resource). */
static devrt_status commit(devrt_runtime* rt, devrt_block h, devrt_stream stream, dv_stream* s,
                           devrt_resource* top, dv_pev** ready_out) {
  devrt_status st = DEVRT_OK;
  dv_blk* b = get_locked(rt, h, "devrt_block_alloc", &st);
  if (!b) return st;
  DV_ASSERT(b->pending && !b->ptr); /* reserved, committed once */
  size_t size = b->size;
  const char* tag = b->tag;
  unlock(b); /* a pending block cannot be used or freed: nobody else touches it meanwhile */
  void* p = NULL;
  dv_pev* ready = NULL; /* the allocation-ready event; its reference becomes the block's */
  if ((st = dv_slot_settle(rt, DV_SID_SLOT(stream), NULL, 0, NULL)) == DEVRT_OK &&
      (top || (st = dv_stream_resource(rt, stream, &top)) == DEVRT_OK) &&
      (st = devrt_resource_allocate(top, size, stream, tag, &p)) == DEVRT_OK &&
      (st = dv_pev_record(rt, DV_SID_SLOT(stream), s, &ready)) != DEVRT_OK)
    DV_KEEP_ERROR(devrt_resource_deallocate(top, p, size, stream)); /* the first error stands */
  if (st != DEVRT_OK) {
    dv_block_cancel(rt, h);
    return st;
  }
  if (ready_out) dv_pev_ref(ready), *ready_out = ready;
  lock(b);
  DV_ASSERT(b->live && b->pending && b->gen == h >> INDEX_BITS && !b->t.writer);
  b->ptr = p, b->stream = stream, b->t.writer = ready, b->res = top;
  b->pending = false;
  touched(b);
  unlock(b);
  atomic_fetch_add_explicit(&rt->evslots[DV_SID_SLOT(stream)].allocs, 1, memory_order_relaxed);
  return DEVRT_OK;
}

devrt_status dv_block_commit(devrt_runtime* rt, devrt_block h, devrt_stream stream, dv_stream* s,
                             dv_pev** ready_out) {
  return commit(rt, h, stream, s, NULL, ready_out);
}

/* ---- memory under capture (docs/graphs.md) ----
 * A block allocated on a capturing stream is allocated at once from that stream's resource (its
 * partition's sub-budget, or the stack), ordered on the runtime's own stream, since the memory
 * layers refuse a capturing stream: its address is the same at every replay, and a replay waits
 * for the allocation as for any writer. Freed in the capture that allocated it, and used there,
 * it becomes the graph's: the block keeps its memory under a new generation (the caller's handle
 * is stale from then on) until the graph is destroyed. */

static DV_NOINLINE devrt_status capture_alloc(devrt_runtime* rt, dv_capture* cap, size_t size,
                                              devrt_stream stream, const char* tag,
                                              devrt_block* out) {
  if (cap->nmade == cap->capmade) {
    unsigned n = cap->capmade ? 2 * cap->capmade : 8;
    dv_made* m = realloc(cap->made, n * sizeof *m);
    if (!m) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "devrt_block_alloc: out of host memory");
    cap->made = m, cap->capmade = n;
  }
  devrt_resource* top = NULL;
  devrt_stream fs = 0;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_resource(rt, stream, &top));
  DV_CHECK(dv_internal_stream(rt, &fs));
  DV_CHECK(dv_stream_get(rt, fs, &s, "devrt_block_alloc"));
  devrt_block h = 0;
  DV_CHECK(dv_block_reserve(rt, size, fs, tag, &h));
  DV_CHECK(commit(rt, h, fs, s, top, NULL));
  DV_ASSERT(cap->nmade < cap->capmade && cap->rt == rt); /* room made above; the capture's own */
  cap->made[cap->nmade++] = (dv_made){h, false};
  *out = h;
  return DEVRT_OK;
}

/* The calling thread's capture of rt that allocated h and used it, unowned yet; NULL if none. */
static dv_made* made_here(devrt_runtime* rt, devrt_block h, dv_capture** out) {
  for (dv_capture* c = dv_thread_captures; c; c = c->next) {
    if (c->rt != rt) continue;
    bool used = false;
    for (unsigned k = 0; k < c->n && !used; k++) used = c->u[k].block == h;
    for (unsigned i = 0; used && i < c->nmade; i++)
      if (c->made[i].h == h && !c->made[i].owned) return *out = c, &c->made[i];
  }
  return NULL;
}

/* A free in the capture that allocated h and used it: the graph keeps the memory (above). */
static DV_NOINLINE devrt_status capture_adopt(devrt_runtime* rt, dv_capture* cap, dv_made* m) {
  devrt_status st = DEVRT_OK;
  dv_blk* b = dv_blk_tracked(rt, m->h, "devrt_block_free", &st);
  if (!b) return st;
  if (b->pins) { /* another thread's launch or free of it: the caller's race */
    const char* tag = dv_blk_tag(b);
    unlock(b);
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_block_free: block %#" PRIx64 " (tag %s) is in use by another thread",
                   m->h, tag);
  }
  DV_ASSERT(b->live && !b->pending && !(b->pins & FREEING)); /* allocated here, not freed yet */
  b->gen = atomic_fetch_add_explicit(&next_gen, 1, memory_order_relaxed) & GEN_MASK;
  b->nusers = 0; /* no repeat path remembers the new handle */
  touched(b);
  devrt_block nh = b->gen << INDEX_BITS | (devrt_block)(dv_blk_index(m->h) + 1);
  unlock(b);
  unsigned renamed = 0;
  for (unsigned k = 0; k < cap->n; k++)
    if (cap->u[k].block == m->h) cap->u[k].block = nh, renamed++;
  DV_ASSERT(renamed == 1); /* made_here found it used, and the union names a block once */
  (void)renamed;
  *m = (dv_made){nh, true};
  return DEVRT_OK;
}

devrt_status devrt_block_alloc(devrt_runtime* rt, size_t size, devrt_stream stream, const char* tag,
                               devrt_block* out) {
  DV_RT_CHECK(rt, "devrt_block_alloc");
  DV_ARG_CHECK(out && size, "devrt_block_alloc", "size %zu is 0 or out %p is NULL (tag %s)", size,
               (void*)out, tag ? tag : "untagged");
  dv_stream* s = NULL;
  dv_capture* cap = NULL;
  DV_CHECK(dv_stream_or_capture(rt, stream, &s, &cap, "devrt_block_alloc"));
  if (DV_UNLIKELY(cap)) return capture_alloc(rt, cap, size, stream, tag, out);
  devrt_block h = 0;
  DV_CHECK(dv_block_reserve(rt, size, stream, tag, &h));
  DV_CHECK(dv_block_commit(rt, h, stream, s, NULL));
  *out = h;
  return DEVRT_OK;
}

/* The free is a write on the runtime's free stream: it waits for the last writer and every
 * reader still running, and no user stream is made to wait for it. */
devrt_status dv_block_free_on(devrt_runtime* rt, devrt_block h, devrt_stream fs, dv_stream* s) {
  unsigned slot = DV_SID_SLOT(fs);
  dv_work k; /* a write with no launch: the waits it gathers */
  DV_CHECK(dv_work_init(&k, rt, slot, "devrt_block_free", NULL, 0)); /* before the lock */
  devrt_status st = DEVRT_OK;
  dv_blk* b = dv_blk_tracked(rt, h, "devrt_block_free", &st);
  if (!b) return st;
  if (b->pins & FREEING) { /* two frees of one block at once: the caller's race */
    const char* tag = dv_blk_tag(b);
    unlock(b);
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_block_free: block %#" PRIx64 " (tag %s) is being freed by another thread",
                   h, tag);
  }
  if (b->pins && dv_in_enqueue) { /* waiting could wait for this thread's own launch */
    const char* tag = dv_blk_tag(b);
    unlock(b);
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_block_free: block %#" PRIx64
                   " (tag %s) is in a launch being issued, and this free runs inside an enqueue "
                   "callback, which must not wait for one: free it after the callback returns",
                   h, tag);
  }
  /* From here every new pin is refused; the launches and finishes that pinned b before are
   * recording their uses (a pin lasts one call's issue: short), and the free waits for them, so
   * it is ordered after the uses they record rather than refused because of their timing. */
  b->pins |= FREEING;
  while (b->pins != FREEING) {
    unlock(b);
    sched_yield();
    lock(b);
  }
  DV_ASSERT(b->live && b->gen == h >> INDEX_BITS); /* FREEING kept every other free away */
  touched(b); /* a repeat launch that saw the old version has claimed its slot: wait for it */
  uint16_t users[USERS_MAX];
  unsigned nusers = b->nusers;
  memcpy(users, b->users, sizeof users);
  unlock(b);
  /* seq_cst: pairs with repeat.c's claim (a CAS) and its check of the versions: a repeat launch
   * either saw this free's version bump (and takes the usual path, which refuses the block) or
   * claimed its slot before the bump, and this free waits until it is done. */
  for (unsigned i = 0; i < (nusers > USERS_MAX ? rt->nslots : nusers); i++)
    while (atomic_load_explicit(&rt->evslots[nusers > USERS_MAX ? i : users[i]].rep_state,
                                memory_order_seq_cst) != DV_REP_IDLE)
      sched_yield();
  lock(b);
  DV_ASSERT(b->pins == FREEING && b->live);
  dv_track_gather(&k, &b->t, DEVRT_ACCESS_WRITE, 1);
  uint32_t epoch = b->t.epoch;
  void* p = b->ptr;
  size_t size = b->size;
  devrt_resource* res = b->res;
  unlock(b);
  st = dv_waits_issue(&k, s);
  dv_counts_flush(rt, slot, &k.c);
  if (st == DEVRT_OK) st = devrt_resource_deallocate(res, p, size, fs);
  dv_refs r = {0};
  lock(b);
  /* FREEING refused every use since the gather: the free waited for every use ever recorded
   * that is not known complete or covered by one it waited for (record_write keeps the rest) */
  DV_ASSERT(b->pins == FREEING && b->t.epoch == epoch);
  touched(b); /* again: a repeat's fallback may have saved the version while we waited */
  if (st == DEVRT_OK) {
    b->live = false;
    dv_track_clear(rt, &b->t, &r);
  }
  b->pins = 0; /* a refused free leaves the block as it was */
  unlock(b);
  dv_refs_apply(rt, &r);
  if (st != DEVRT_OK) return st;
  give_index(rt->blocks, dv_blk_index(h));
  atomic_fetch_add_explicit(&rt->evslots[slot].frees, 1, memory_order_relaxed);
  return DEVRT_OK;
}

devrt_status devrt_block_free(devrt_runtime* rt, devrt_block h) {
  DV_RT_CHECK(rt, "devrt_block_free");
  dv_capture* cap = NULL;
  dv_made* m = DV_UNLIKELY(dv_thread_captures) ? made_here(rt, h, &cap) : NULL;
  if (m) return capture_adopt(rt, cap, m);
  devrt_stream fs = 0;
  dv_stream* s = NULL;
  DV_CHECK(dv_internal_stream(rt, &fs));
  DV_CHECK(dv_stream_get(rt, fs, &s, "devrt_block_free"));
  return dv_block_free_on(rt, h, fs, s);
}

devrt_status devrt_block_ptr(devrt_runtime* rt, devrt_block h, void** out) {
  DV_RT_CHECK(rt, "devrt_block_ptr");
  DV_ARG_CHECK(out, "devrt_block_ptr", "out is NULL");
  devrt_status st = DEVRT_OK;
  dv_blk* b = get_ready(rt, h, "devrt_block_ptr", &st);
  if (!b) return st;
  *out = b->ptr;
  unlock(b);
  return DEVRT_OK;
}

devrt_status devrt_block_info_get(devrt_runtime* rt, devrt_block h, devrt_block_info* out) {
  DV_RT_CHECK(rt, "devrt_block_info_get");
  DV_ARG_CHECK(out, "devrt_block_info_get", "out is NULL");
  devrt_status st = DEVRT_OK;
  dv_blk* b = dv_blk_tracked(rt, h, "devrt_block_info_get", &st);
  if (!b) return st;
  *out = (devrt_block_info){.ptr = b->ptr,
                            .size = b->size,
                            .tag = b->tag,
                            .stream = b->stream,
                            .generation = b->gen,
                            .readers = b->t.nreaders,
                            .writer_complete = !b->t.writer || dv_pev_passed(rt, b->t.writer)};
  unlock(b);
  return DEVRT_OK;
}

devrt_status dv_capture_add(devrt_runtime* rt, dv_capture* cap, const devrt_block_use* u,
                            unsigned n, const char* call) {
  for (unsigned i = 0; i < n; i++) {
    devrt_runtime* owner;
    void* p;
    size_t size;
    DV_CHECK(dv_block_find(rt, u[i].block, call, &owner, &p, &size)); /* live now */
    unsigned k = 0;
    while (k < cap->n && cap->u[k].block != u[i].block) k++;
    if (k == cap->n && cap->n == DEVRT_LAUNCH_MAX_USES)
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                     "%s: the capture would use more than %u blocks (a graph's launch tracks them "
                     "as one launch does)",
                     call, DEVRT_LAUNCH_MAX_USES);
    if (k == cap->n) cap->u[cap->n++] = (devrt_block_use){u[i].block, 0};
    cap->u[k].access |= u[i].access; /* read and write merge to READ_WRITE */
  }
  return DEVRT_OK;
}

/* The stream of a prepare or finish, or (*cap) the capture recording it. */
static devrt_status use_args(devrt_runtime* rt, devrt_stream stream, devrt_access a, dv_stream** s,
                             dv_capture** cap, const char* call) {
  DV_RT_CHECK(rt, call);
  if (!dv_access_ok(a))
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: access %d is not READ, WRITE or READ_WRITE",
                   call, (int)a);
  return dv_stream_or_capture(rt, stream, s, cap, call);
}

devrt_status devrt_prepare_block_use(devrt_runtime* rt, devrt_block h, devrt_stream stream,
                                     devrt_access a) {
  dv_stream* s = NULL;
  dv_capture* cap = NULL;
  DV_CHECK(use_args(rt, stream, a, &s, &cap, "devrt_prepare_block_use"));
  if (cap) /* captured: the graph's launch waits for what the block needs, not the capture */
    return dv_capture_add(rt, cap, &(devrt_block_use){h, a}, 1, "devrt_prepare_block_use");
  unsigned slot = DV_SID_SLOT(stream);
  dv_work k; /* a use with no launch: the waits it gathers */
  DV_CHECK(dv_work_init(&k, rt, slot, "devrt_prepare_block_use", NULL, 0));
  devrt_status st = DEVRT_OK;
  dv_blk* b = dv_blk_tracked(rt, h, "devrt_prepare_block_use", &st);
  if (b) {
    dv_track_gather(&k, &b->t, a, 1);
    uint32_t epoch = b->t.epoch;
    unlock(b);
    st = dv_waits_issue(&k, s);
    dv_counts_flush(rt, slot, &k.c);
    lock(b); /* the witness a finish on this stream uses, if nothing changed meanwhile */
    if (st == DEVRT_OK && b->live && b->gen == h >> INDEX_BITS && b->t.epoch == epoch)
      b->prep_slot = slot + 1, b->prep_write = a & DEVRT_ACCESS_WRITE, b->prep_epoch = epoch;
    unlock(b);
  }
  return st;
}

/* Pins a live block for a finish (a free waits until the finish unpins it); INVALID_STATE if a
 * free is in progress, STALE_BLOCK if it is done. */
static devrt_status finish_pin(devrt_runtime* rt, devrt_block h, dv_blk** out) {
  devrt_status st = DEVRT_OK;
  dv_blk* b = dv_blk_tracked(rt, h, "devrt_finish_block_use", &st);
  if (!b) return st;
  if (b->pins & FREEING) {
    const char* tag = dv_blk_tag(b);
    unlock(b);
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "devrt_finish_block_use: block %#" PRIx64
                   " (tag %s) is being freed by another thread: the use is not recorded",
                   h, tag);
  }
  b->pins++;
  unlock(b);
  *out = b;
  return DEVRT_OK;
}

devrt_status devrt_finish_block_use(devrt_runtime* rt, devrt_block h, devrt_stream stream,
                                    devrt_access a) {
  dv_stream* s = NULL;
  dv_capture* cap = NULL;
  DV_CHECK(use_args(rt, stream, a, &s, &cap, "devrt_finish_block_use"));
  if (cap) /* the work it ends was recorded: the graph's launch marks the block */
    return dv_capture_add(rt, cap, &(devrt_block_use){h, a}, 1, "devrt_finish_block_use");
  unsigned slot = DV_SID_SLOT(stream);
  dv_blk* b = NULL;
  DV_CHECK(finish_pin(rt, h, &b)); /* before the record: a free waits for it, or is refused */
  dv_pev* ev = NULL;
  devrt_status st = dv_pev_record(rt, slot, s, &ev);
  dv_refs r = {.ev = ev};
  if (st == DEVRT_OK) dv_refs_give(&r, 1, false);
  if (ev)
    dv_blk_lock_with_room(rt, b, &r);
  else
    dv_blk_lock_tracked(rt, b);
  DV_ASSERT((b->pins & ~FREEING) && b->live); /* pinned: a free waits for this finish */
  if (ev) { /* waited: this stream's prepare waited as a write for what the track still holds */
    dv_track_record(rt, &b->t, a, slot, &r,
                    b->prep_slot == slot + 1 && b->prep_write && b->prep_epoch == b->t.epoch);
    touched(b);
  }
  b->pins--;
  unlock(b);
  dv_refs_apply(rt, &r);
  if (ev) dv_pev_unref(rt, ev);
  return st;
}

devrt_status devrt_block_stats_get(devrt_runtime* rt, devrt_block_stats* out) {
  DV_RT_CHECK(rt, "devrt_block_stats_get");
  DV_ARG_CHECK(out, "devrt_block_stats_get", "out is NULL");
  *out = (devrt_block_stats){0};
  uint64_t frees = 0;
  for (unsigned i = 0; i < rt->nslots; i++) {
    dv_evslot* e = &rt->evslots[i];
    frees += atomic_load_explicit(&e->frees, memory_order_relaxed);
    out->blocks_allocated += atomic_load_explicit(&e->allocs, memory_order_relaxed);
    out->events_created += atomic_load_explicit(&e->created, memory_order_relaxed);
    dv_spin_lock(&e->mu);
    out->waits_inserted += e->n.waits, out->waits_skipped_same_stream += e->n.same;
    out->waits_skipped_complete += e->n.complete, out->waits_coalesced += e->n.coalesced;
    out->launches += e->n.launches;
    out->events_recorded += e->recorded + e->n.late, out->events_reused += e->reused;
    dv_spin_unlock(&e->mu);
  }
  out->deferred_frees = frees;
  out->blocks_live = out->blocks_allocated - frees;
  out->stale_refusals = atomic_load_explicit(&rt->stale_refusals, memory_order_relaxed);
  out->refused_launches = atomic_load_explicit(&rt->refused_launches, memory_order_relaxed);
  devrt_resource* top = NULL;
  devrt_resource_figures f;
  if (atomic_load_explicit(&rt->stack, memory_order_acquire) && /* pairs: stack.c's publication */
      devrt_runtime_resource(rt, &top) == DEVRT_OK && devrt_resource_query(top, &f) == DEVRT_OK)
    out->reaped_bytes = f.reaped_bytes;
  return DEVRT_OK;
}

devrt_status dv_blocks_check_none(devrt_runtime* rt, const char* call) {
  struct dv_blocks* t = rt->blocks;
  uint32_t used = atomic_load_explicit(&t->next, memory_order_acquire), live = 0; /* as dv_blk_of */
  const char* tag = NULL;
  for (uint32_t i = 0; i < used; i++) {
    dv_blk* b = dv_blk_at(t, i);
    if (!b) continue;
    lock(b);
    if (b->live && !live++) tag = dv_blk_tag(b);
    unlock(b);
  }
  if (!live) return DEVRT_OK;
  return dv_fail(DEVRT_ERR_INVALID_STATE,
                 "%s: %u blocks are still live (one is tagged %s): free them first", call, live,
                 tag);
}

dv_block_paths dv_block_paths_get(devrt_runtime* rt) {
  dv_block_paths p = {0, 0, 0};
  for (unsigned i = 0; i < rt->nslots; i++) {
    dv_evslot* e = &rt->evslots[i];
    dv_spin_lock(&e->mu);
    p.marks_deferred += e->deferred, p.launches_repeated += e->n.repeats,
        p.launches_grouped += e->n.grouped;
    dv_spin_unlock(&e->mu);
  }
  return p;
}

devrt_status dv_block_check(devrt_runtime* rt, devrt_block h, const char* call) {
  devrt_status st = DEVRT_OK;
  dv_blk* b = get_locked(rt, h, call, &st);
  if (b) unlock(b);
  return st;
}

devrt_status dv_block_find(devrt_runtime* rt, devrt_block h, const char* call,
                           devrt_runtime** owner, void** ptr, size_t* size) {
  devrt_status st = DEVRT_OK;
  devrt_runtime* o = rt;
  dv_blk* b = get_ready(rt, h, call, &st);
  if (!b && st == DEVRT_ERR_STALE_BLOCK && (o = dv_blk_peer_owner(rt, h)) != NULL &&
      (b = get_ready(o, h, call, &st)) != NULL)
    dv_error_clear(); /* a peer's, not stale */
  if (!b) return st;
  *owner = o, *ptr = b->ptr, *size = b->size;
  unlock(b);
  return DEVRT_OK;
}

void dv_blocks_forget(devrt_runtime* rt, devrt_runtime* other) {
  struct dv_blocks* t = rt->blocks;
  uint32_t used = atomic_load_explicit(&t->next, memory_order_acquire); /* as dv_blk_of */
  for (uint32_t i = 0; i < used; i++) {
    dv_blk* b = dv_blk_at(t, i);
    if (!b) continue;
    dv_refs r = {0};
    dv_blk_lock_tracked(rt, b); /* a group's track goes back to its members first */
    for (unsigned k = 0; k < b->t.nreaders;)
      if (b->t.readers[k].ev->rt == other)
        dv_track_drop_entry(rt, &b->t, k, &r);
      else
        k++;
    if (b->t.writer && b->t.writer->rt == other)
      dv_refs_drop(rt, &r, b->t.writer), b->t.writer = NULL;
    if (r.n) touched(b);
    unlock(b);
    dv_refs_apply(rt, &r);
  }
}

devrt_status dv_block_check_use(devrt_runtime* rt, devrt_block h, const char* call) {
  devrt_status st = dv_block_check(rt, h, call);
  if (st == DEVRT_ERR_STALE_BLOCK && dv_blk_peer_owner(rt, h)) {
    dv_error_clear();
    st = DEVRT_OK;
  }
  return st;
}
