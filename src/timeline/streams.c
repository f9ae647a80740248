/* streams.c: bounded stream pools over the runtime's slot table: the runtime's pool, and
 * each partition's (src/partition). Slots hold backend streams that are reused after release;
 * each lease gets a fresh process-unique id, so a released, foreign or made-up id is detected by
 * one atomic compare (dv_stream_get). One slot past the pool is the runtime's own
 * (dv_internal_stream): block frees go there; the slots after it are kept for partitions and
 * imported streams (devrt_stream_import: a foreign native stream, wrapped, never destroyed). */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include "rt.h"

_Atomic unsigned dv_peer_slots;

/* The live runtimes, so an import of a stream devrt created finds the runtime that owns it and
 * holds it (dv_slot.exports): an owner is not destroyed while another runtime uses its stream.
 * Lock order: live_mu before any runtime's pool_mu. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static devrt_runtime* live_list; /* linked by live_next (live_mu) */

static void live_add(devrt_runtime* rt) {
  pthread_mutex_lock(&live_mu);
  rt->live_next = live_list, live_list = rt;
  pthread_mutex_unlock(&live_mu);
}

static void live_remove_locked(devrt_runtime* rt) {
  devrt_runtime** at = &live_list;
  while (*at && *at != rt) at = &(*at)->live_next;
  if (*at) *at = rt->live_next;
}

/* The slot of the live runtime other than rt whose own stream (not an import) is `native`, held
 * (exports + 1); NULL when devrt did not create it. */
static dv_slot* export_hold(devrt_runtime* rt, void* native) {
  dv_slot* found = NULL;
  pthread_mutex_lock(&live_mu);
  for (devrt_runtime* o = live_list; o && !found; o = o->live_next) {
    if (o == rt) continue;
    pthread_mutex_lock(&o->pool_mu);
    for (unsigned i = 0; i < o->nslots && !found; i++) {
      dv_slot* sl = &o->slots[i];
      if (sl->s && !sl->foreign && o->be->stream_native(sl->s) == native) found = sl;
    }
    pthread_mutex_unlock(&o->pool_mu);
  }
  if (found) found->exports++;
  pthread_mutex_unlock(&live_mu);
  return found;
}

static void export_drop(dv_slot* src) {
  if (!src) return;
  pthread_mutex_lock(&live_mu);
  DV_ASSERT(src->exports > 0);
  src->exports--;
  pthread_mutex_unlock(&live_mu);
}

devrt_status dv_streams_check_unexported(devrt_runtime* rt, const dv_pool* pool, const char* call) {
  unsigned n = 0;
  pthread_mutex_lock(&live_mu);
  for (unsigned k = 0; k < (pool ? pool->n : rt->nslots); k++)
    n += rt->slots[pool ? pool->slots[k] : k].exports;
  if (!n && !pool) live_remove_locked(rt);
  pthread_mutex_unlock(&live_mu);
  if (n)
    return dv_fail(DEVRT_ERR_INVALID_STATE,
                   "%s: %u import(s) of %s streams are held by other runtimes "
                   "(devrt_stream_forget them there; the torch entry points hold theirs for the "
                   "life of the process)",
                   call, n, pool ? "the partition's" : "its");
  return DEVRT_OK;
}

void dv_streams_reopen(devrt_runtime* rt) { live_add(rt); }

static void push_free(dv_pool* p, unsigned i, dv_slot* slots) {
  DV_ASSERT(atomic_load_explicit(&slots[i].id, memory_order_relaxed) == 0); /* not leased */
  DV_ASSERT(slots[i].pool == p && (int)i != p->free_head);
  slots[i].next_free = p->free_head;
  p->free_head = (int)i;
}

/* Gives slot i back to the partitions' spare list (pool_mu held, or during init). */
static void push_spare(devrt_runtime* rt, unsigned i) {
  DV_ASSERT(i > rt->npool && i < rt->nslots); /* past the pool and the runtime's own slot */
  DV_ASSERT(!rt->slots[i].s && !rt->slots[i].foreign && !rt->slots[i].exports);
  rt->slots[i].next_free = rt->spare_head;
  rt->spare_head = (int)i;
}

devrt_status dv_stream_pool_init(devrt_runtime* rt) {
  _Static_assert(DEVRT_MAX_STREAMS + 1 <= DV_SID_SLOTS,
                 "the pool, the runtime's slot and the partitions' fit the table");
  rt->npool = rt->cfg.stream_pool_size;
  rt->nslots = rt->npool + 1 + rt->cfg.partition_streams;
  DV_ASSERT(rt->nslots <= DV_SID_SLOTS); /* config_check and devrt_config_init refuse more */
  rt->slots = calloc(DV_SID_SLOTS, sizeof *rt->slots); /* past nslots: untouched pages */
  rt->pool.slots = malloc(rt->npool * sizeof *rt->pool.slots);
  if (!rt->slots || !rt->pool.slots) {
    free(rt->slots);
    free(rt->pool.slots);
    return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "stream pool: out of host memory");
  }
  rt->pool.n = rt->npool;
  rt->pool.free_head = -1;
  rt->pool.priority = rt->cfg.stream_priority;
  for (unsigned i = rt->npool; i-- > 0;) {
    rt->pool.slots[i] = i;
    rt->slots[i].pool = &rt->pool;
    push_free(&rt->pool, i, rt->slots);
  }
  rt->slots[rt->npool].next_free = -1;
  rt->spare_head = -1;
  for (unsigned i = rt->nslots; i-- > rt->npool + 1;) push_spare(rt, i);
  DV_ASSERT(rt->pool.free_head == (rt->npool ? 0 : -1));
  pthread_mutex_init(&rt->pool_mu, NULL);
  pthread_cond_init(&rt->pool_cv, NULL);
  live_add(rt);
  return DEVRT_OK;
}

void dv_stream_pool_fini(devrt_runtime* rt) {
  pthread_mutex_lock(&live_mu);
  live_remove_locked(rt); /* (a destroy took it off already) */
  pthread_mutex_unlock(&live_mu);
  for (unsigned i = 0; i < rt->nslots; i++) {
    dv_slot* sl = &rt->slots[i];
    DV_ASSERT(!sl->exports);                          /* the destroy checked */
    if (sl->s && sl->foreign == DV_FOREIGN_WRAPPED) { /* still imported: left to its owner */
      rt->be->stream_sync(sl->s);
      rt->be->stream_unwrap(rt->dev, sl->s);
      export_drop(sl->src);
    } else if (sl->s) {
      rt->be->stream_destroy(rt->dev, sl->s);
    }
  }
  free(rt->slots);
  free(rt->pool.slots);
  pthread_cond_destroy(&rt->pool_cv);
  pthread_mutex_destroy(&rt->pool_mu);
}

/* How many slots hold imported streams now (pool_mu held). */
static unsigned imported_count(devrt_runtime* rt) {
  unsigned n = 0;
  for (unsigned i = rt->npool + 1; i < rt->nslots; i++) n += rt->slots[i].foreign != 0;
  return n;
}

devrt_status dv_pool_create(devrt_runtime* rt, unsigned n, dv_green* green, int priority,
                            struct devrt_partition* part, dv_pool* out) {
  *out = (dv_pool){.n = 0, .free_head = -1, .priority = priority, .green = green, .part = part};
  out->slots = malloc(n * sizeof *out->slots);
  if (!out->slots) return dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "partition pool: out of host memory");
  devrt_status s = DEVRT_OK;
  pthread_mutex_lock(&rt->pool_mu);
  for (unsigned k = 0; k < n && s == DEVRT_OK; k++) {
    if (rt->spare_head < 0) {
      s = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                  "partition pool: the %u stream slots for partitions are all taken (%u by "
                  "imported streams; DEVRT_PARTITION_STREAMS / devrt_config.partition_streams)",
                  rt->cfg.partition_streams, imported_count(rt));
      break;
    }
    unsigned i = (unsigned)rt->spare_head;
    dv_slot* sl = &rt->slots[i];
    if ((s = rt->be->stream_create(rt->dev, green, priority, &sl->s)) != DEVRT_OK) break;
    rt->spare_head = sl->next_free;
    sl->pool = out;
    out->slots[out->n++] = i;
    out->created++;
  }
  for (unsigned k = out->n; k-- > 0;) push_free(out, out->slots[k], rt->slots);
  pthread_mutex_unlock(&rt->pool_mu);
  if (s != DEVRT_OK) DV_KEEP_ERROR(dv_pool_destroy(rt, out));
  return s;
}

void dv_pool_destroy(devrt_runtime* rt, dv_pool* p) {
  for (unsigned k = 0; k < p->n; k++) { /* no call leases these slots any more */
    dv_slot* sl = &rt->slots[p->slots[k]];
    rt->be->stream_sync(sl->s); /* on failure (a lost device) nothing more can run on it either */
    dv_events_retire(rt, p->slots[k]);
    rt->stream_retired(rt, DV_SID(rt->serial, p->slots[k], sl->lease));
    dv_stream* s = sl->s;
    pthread_mutex_lock(&rt->pool_mu); /* import and peer_disable read every slot's stream */
    sl->s = NULL;
    sl->pool = NULL;
    pthread_mutex_unlock(&rt->pool_mu);
    rt->be->stream_destroy(rt->dev, s);
  }
  pthread_mutex_lock(&rt->pool_mu);
  for (unsigned k = 0; k < p->n; k++) push_spare(rt, p->slots[k]);
  pthread_mutex_unlock(&rt->pool_mu);
  free(p->slots);
  p->slots = NULL;
  p->n = 0;
}

_Thread_local char dv_thread_me;
_Thread_local dv_capture* dv_thread_captures;

devrt_status dv_capture_refused(devrt_runtime* rt, devrt_stream id, const char* call) {
  (void)rt;
  return dv_fail(DEVRT_ERR_INVALID_STATE,
                 "%s: stream %#" PRIx64
                 " is capturing (devrt_capture_begin): only launches, "
                 "foreign work through prepare/finish and copies from the capturing thread are "
                 "recorded until devrt_capture_end (docs/graphs.md)",
                 call, id);
}

devrt_status dv_stream_refused(devrt_runtime* rt, devrt_stream id, const char* call) {
  if (id == 0) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: stream 0 is not a stream", call);
  if (DV_SID_SERIAL(id) != rt->serial)
    return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                   "%s: stream %#" PRIx64 " belongs to another runtime (runtime serial %" PRIu64
                   ", this is %" PRIu64 ")",
                   call, id, DV_SID_SERIAL(id), rt->serial);
  return dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "%s: stream %#" PRIx64 " is not held (released, or never acquired)", call, id);
}

/* Leases free slot i of pool p (pool_mu held): creates its stream on first use. */
static devrt_status lease(devrt_runtime* rt, dv_pool* p, int i, devrt_stream* out) {
  dv_slot* sl = &rt->slots[i];
  DV_ASSERT(i == p->free_head && sl->pool == p && !sl->foreign);
  DV_ASSERT(atomic_load_explicit(&sl->id, memory_order_relaxed) == 0 && p->in_use < p->n);
  if (!sl->s) {
    DV_CHECK(rt->be->stream_create(rt->dev, p->green, p->priority, &sl->s));
    p->created++;
  }
  p->free_head = sl->next_free;
  sl->lease++;
  sl->holders = 1;
  p->in_use++;
  devrt_stream id = DV_SID(rt->serial, i, sl->lease);
  /* release: pairs with dv_stream_get's acquire, which then sees sl->s */
  atomic_store_explicit(&sl->id, id, memory_order_release);
  *out = id;
  return DEVRT_OK;
}

devrt_status dv_pool_acquire(devrt_runtime* rt, dv_pool* p, devrt_acquire_mode mode,
                             devrt_stream* out, const char* call) {
  devrt_status s = DEVRT_OK;
  pthread_mutex_lock(&rt->pool_mu);
  while (p->free_head < 0 && mode == DEVRT_ACQUIRE_WAIT)
    pthread_cond_wait(&rt->pool_cv, &rt->pool_mu);
  if (p->free_head >= 0) {
    s = lease(rt, p, p->free_head, out);
  } else if (mode == DEVRT_ACQUIRE_SHARE) {
    /* every slot is held: share round-robin, passing over slots a thread captures (every call of
     * another thread on one is refused) unless all do. Relaxed: a capture that begins after the
     * look refuses this holder as it would any other. */
    unsigned k = 0;
    while (k + 1 < p->n &&
           atomic_load_explicit(&rt->slots[p->slots[(p->share_next + k) % p->n]].cap_owner,
                                memory_order_relaxed))
      k++;
    dv_slot* sl = &rt->slots[p->slots[(p->share_next + k) % p->n]];
    DV_ASSERT(sl->holders > 0 && p->in_use == p->n);
    p->share_next = (p->share_next + k + 1) % p->n;
    sl->holders++;
    *out = atomic_load_explicit(&sl->id, memory_order_relaxed);
  } else {
    s = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES, "%s: all %u streams of the %s are held (mode FAIL)",
                call, p->n, p->part ? "partition's pool" : "pool");
  }
  pthread_mutex_unlock(&rt->pool_mu);
  return s;
}

devrt_status devrt_stream_acquire(devrt_runtime* rt, devrt_acquire_mode mode, devrt_stream* out) {
  DV_RT_CHECK(rt, "devrt_stream_acquire");
  DV_ARG_CHECK(out, "devrt_stream_acquire", "out is NULL");
  DV_ARG_CHECK((unsigned)mode <= DEVRT_ACQUIRE_SHARE, "devrt_stream_acquire", "unknown mode %d",
               (int)mode);
  return rt->acquire(rt, mode, out, "devrt_stream_acquire");
}

devrt_status dv_internal_stream(devrt_runtime* rt, devrt_stream* out) {
  dv_slot* sl = &rt->slots[rt->npool];
  /* acquire: pairs with the release below, which published sl->s */
  devrt_stream id = atomic_load_explicit(&sl->id, memory_order_acquire);
  devrt_status s = DEVRT_OK;
  if (!id) {
    pthread_mutex_lock(&rt->pool_mu);
    id = atomic_load_explicit(&sl->id, memory_order_relaxed);
    if (!id && !sl->s) s = rt->be->stream_create(rt->dev, NULL, rt->cfg.stream_priority, &sl->s);
    if (!id && s == DEVRT_OK) {
      sl->lease = 1, sl->holders = 1;
      id = DV_SID(rt->serial, rt->npool, 1);
      atomic_store_explicit(&sl->id, id, memory_order_release); /* pairs: the acquire above */
    }
    pthread_mutex_unlock(&rt->pool_mu);
  }
  *out = id;
  return s;
}

devrt_status devrt_stream_release(devrt_runtime* rt, devrt_stream id) {
  DV_RT_CHECK(rt, "devrt_stream_release");
  dv_stream* unused = NULL;
  pthread_mutex_lock(&rt->pool_mu);
  devrt_status s = dv_stream_get(rt, id, &unused, "devrt_stream_release");
  dv_slot* held = dv_stream_held(rt, id) ? &rt->slots[DV_SID_SLOT(id)] : NULL;
  /* a share of a stream another thread captures goes (a pool share taken before the capture
   * began: the capture keeps the stream, held by another holder); the last holder stays refused */
  if (s == DEVRT_ERR_INVALID_STATE && held && held->holders > 1 && !dv_capture_mine(held)) {
    dv_error_clear();
    held->holders--;
    pthread_mutex_unlock(&rt->pool_mu);
    return DEVRT_OK;
  }
  if (s == DEVRT_OK && rt->slots[DV_SID_SLOT(id)].foreign)
    s = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                "devrt_stream_release: stream %#" PRIx64 " was imported (devrt_stream_forget it)",
                id);
  else if (s == DEVRT_OK && DV_SID_SLOT(id) == rt->npool)
    s = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                "devrt_stream_release: stream %#" PRIx64 " is the runtime's own", id);
  if (s == DEVRT_OK) {
    unsigned i = DV_SID_SLOT(id);
    dv_slot* sl = &rt->slots[i];
    DV_ASSERT(sl->holders > 0 && sl->pool && sl->pool->in_use > 0);
    if (--sl->holders == 0) {
      /* release: a later lease's id store is ordered after this; readers of 0 need nothing */
      atomic_store_explicit(&sl->id, 0, memory_order_release);
      push_free(sl->pool, i, rt->slots);
      sl->pool->in_use--;
      pthread_cond_broadcast(&rt->pool_cv); /* waiters of several pools share the condition */
    }
  }
  pthread_mutex_unlock(&rt->pool_mu);
  return s;
}

devrt_status devrt_stream_synchronize(devrt_runtime* rt, devrt_stream id) {
  DV_RT_CHECK(rt, "devrt_stream_synchronize");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, id, &s, "devrt_stream_synchronize"));
  uint64_t seq = dv_events_sync_begin(rt, DV_SID_SLOT(id));
  DV_CHECK(rt->be->stream_sync(s));
  dv_events_sync_end(rt, DV_SID_SLOT(id), seq); /* what was recorded before is complete */
  return DEVRT_OK;
}

devrt_status devrt_stream_native(devrt_runtime* rt, devrt_stream id, void** out) {
  DV_RT_CHECK(rt, "devrt_stream_native");
  DV_ARG_CHECK(out, "devrt_stream_native", "out is NULL");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, id, &s, "devrt_stream_native"));
  *out = rt->be->stream_native(s);
  return DEVRT_OK;
}

devrt_status devrt_stream_host_func(devrt_runtime* rt, devrt_stream id, devrt_host_fn fn,
                                    void* user) {
  DV_RT_CHECK(rt, "devrt_stream_host_func");
  DV_ARG_CHECK(fn, "devrt_stream_host_func", "fn is NULL");
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(rt, id, &s, "devrt_stream_host_func"));
  return rt->be->host_func(s, fn, user, 0);
}

/* ---- imported streams ---- */

devrt_status devrt_stream_import(devrt_runtime* rt, void* native, devrt_stream* out) {
  DV_RT_CHECK(rt, "devrt_stream_import");
  DV_ARG_CHECK(out, "devrt_stream_import", "out is NULL");
  if (native == DEVRT_STREAM_PER_THREAD)
    return dv_fail(DEVRT_ERR_UNSUPPORTED,
                   "devrt_stream_import: the per-thread default stream (%p) is refused: it is "
                   "another stream on every thread, and devrt issues a stream's work from several "
                   "threads (import the stream itself)",
                   native);
  if (native == DEVRT_STREAM_LEGACY) native = NULL; /* one stream, two spellings */
  devrt_status s = DEVRT_OK;
  /* Another runtime's stream is held before this runtime's lock is taken (live_mu comes first);
   * unless a new slot keeps the hold, it is dropped at the end. */
  dv_slot* src = native ? export_hold(rt, native) : NULL;
  pthread_mutex_lock(&rt->pool_mu);
  for (unsigned i = 0; native && i < rt->nslots; i++) { /* the pools' (partitions' too), its own */
    dv_slot* sl = &rt->slots[i];
    if (sl->s && !sl->foreign && rt->be->stream_native(sl->s) == native) {
      s = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                  "devrt_stream_import: stream %p is this runtime's own (slot %u): use its id",
                  native, i);
      goto out;
    }
  }
  for (unsigned i = rt->npool + 1; i < rt->nslots; i++) {
    dv_slot* sl = &rt->slots[i];
    if (sl->foreign && !sl->retiring && sl->native == native) {
      if (sl->holders == UINT_MAX) {
        s = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                    "devrt_stream_import: stream %p is imported %u times already", native,
                    sl->holders);
        goto out;
      }
      sl->holders++;
      *out = atomic_load_explicit(&sl->id, memory_order_relaxed);
      goto out;
    }
  }
  if (rt->spare_head < 0) {
    s = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                "devrt_stream_import: no stream slot left for %p: imported streams (%u now) and "
                "partitions share the %u slots of DEVRT_PARTITION_STREAMS / "
                "devrt_config.partition_streams",
                native, imported_count(rt), rt->cfg.partition_streams);
    goto out;
  }
  unsigned i = (unsigned)rt->spare_head;
  dv_slot* sl = &rt->slots[i];
  s = native ? rt->be->stream_wrap(rt->dev, native, &sl->s)
             : rt->be->stream_legacy(rt->dev, &sl->s);
  if (s != DEVRT_OK) {
    char msg[768];
    snprintf(msg, sizeof msg, "%s", devrt_last_error());
    s = dv_fail(s, "devrt_stream_import: %s", msg);
    sl->s = NULL;
    goto out;
  }
  rt->spare_head = sl->next_free;
  sl->next_free = -1;
  sl->pool = NULL;
  sl->foreign = native ? DV_FOREIGN_WRAPPED : DV_FOREIGN_LEGACY;
  sl->native = native;
  sl->src = src, src = NULL; /* the slot keeps the hold */
  sl->lease++;
  sl->holders = 1;
  devrt_stream id = DV_SID(rt->serial, i, sl->lease);
  atomic_store_explicit(&sl->id, id, memory_order_release); /* pairs with dv_stream_get's acquire */
  *out = id;
out:
  pthread_mutex_unlock(&rt->pool_mu);
  export_drop(src);
  return s;
}

devrt_status devrt_stream_forget(devrt_runtime* rt, devrt_stream id) {
  DV_RT_CHECK(rt, "devrt_stream_forget");
  dv_stream* unused = NULL;
  bool last = false;
  pthread_mutex_lock(&rt->pool_mu);
  devrt_status s = dv_stream_get(rt, id, &unused, "devrt_stream_forget");
  dv_slot* sl = &rt->slots[DV_SID_SLOT(id)];
  if (s == DEVRT_OK && !sl->foreign)
    s = dv_fail(
        DEVRT_ERR_INVALID_ARGUMENT,
        "devrt_stream_forget: stream %#" PRIx64 " was not imported (%s)", id,
        DV_SID_SLOT(id) == rt->npool ? "it is the runtime's own" : "devrt_stream_release it");
  if (s == DEVRT_OK && --sl->holders == 0) {
    atomic_store_explicit(&sl->id, 0, memory_order_release); /* stale from here on */
    sl->retiring = true; /* a new import of the handle takes another slot meanwhile */
    last = true;
  }
  pthread_mutex_unlock(&rt->pool_mu);
  if (!last) return s;
  /* As dv_pool_destroy: synchronized, then every layer forgets it (nobody else reaches it). A
   * failed synchronize retires nothing: the import is held again and may be forgotten again. */
  if ((s = rt->be->stream_sync(sl->s)) != DEVRT_OK) {
    pthread_mutex_lock(&rt->pool_mu);
    sl->holders = 1;
    sl->retiring = false;
    atomic_store_explicit(&sl->id, id, memory_order_release); /* held again: as at the import */
    pthread_mutex_unlock(&rt->pool_mu);
    return s;
  }
  dv_events_retire(rt, DV_SID_SLOT(id));
  rt->stream_retired(rt, id);
  if (sl->foreign == DV_FOREIGN_LEGACY)
    rt->be->stream_destroy(rt->dev, sl->s);
  else
    rt->be->stream_unwrap(rt->dev, sl->s);
  pthread_mutex_lock(&rt->pool_mu);
  dv_slot* src = sl->src;
  sl->s = NULL;
  sl->foreign = DV_FOREIGN_NONE;
  sl->native = NULL;
  sl->src = NULL;
  sl->retiring = false;
  push_spare(rt, DV_SID_SLOT(id));
  pthread_mutex_unlock(&rt->pool_mu);
  export_drop(src);
  return s;
}
