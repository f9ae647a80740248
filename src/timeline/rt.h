/* rt.h (internal): the runtime as every layer sees it: its device and configuration, the stream
 * slot table and pools, the links to peer runtimes, one pointer per layer to that layer's own
 * state (an opaque type below the layer that defines it), and the hooks through which the
 * timeline tells the layers above it of events. The runtime (src/runtime) composes it. */
#ifndef DEVRT_TIMELINE_RT_H
#define DEVRT_TIMELINE_RT_H

#include <pthread.h>
#include <stdatomic.h>
#include "devrt/devrt.h"
#include "../backend/backend.h"
#include "../core/slotset.h"
#include "timeline.h"

#define DV_RT_MAGIC 0x64657672745f7274ull /* "devrt_rt" */
#define DV_MAX_PEERS 64                   /* runtimes one runtime can have peer access with */

struct devrt_runtime {
  _Alignas(
      64) _Atomic uint64_t magic; /* this line: what every launch, lookup and backend call reads */
  const dv_backend* be;
  dv_dev* dev;
  uint64_t serial;
  dv_slot* slots; /* the pool's, the runtime's own (index npool), then the partitions'; DV_SID_SLOTS
                     entries, those past nslots never leased */
  unsigned npool, nslots;
  struct dv_evslot* evslots; /* per slot: pooled events and use counters (marks.c) */
  devrt_config cfg;
  devrt_device_info info;
  bool owned;
  char reason[256];

  pthread_mutex_t pool_mu;
  pthread_cond_t pool_cv;
  dv_pool pool;   /* the runtime's stream pool */
  int spare_head; /* unassigned partition slots, under pool_mu */

  pthread_mutex_t events_mu;
  struct devrt_event* events; /* every live event, so destroy frees what users left behind */

  /* Each layer's own state, made and ended by the runtime (src/runtime). */
  struct dv_blocks* blocks;       /* the block table (src/block) */
  struct dv_layouts* layouts;     /* layouts, the active one, their counters (src/partition) */
  struct dv_queue* q;             /* the submission queue and its threads (src/sync) */
  pthread_mutex_t stack_mu;       /* the resource stack (src/memory) */
  _Atomic(devrt_resource*) stack; /* built on first use or set by the user */
  _Atomic uint64_t refused_launches, stale_refusals; /* src/launch, src/block */

  /* Hooks the runtime sets when it composes the layers (src/runtime), for the events the
   * timeline must tell the layers above it of without naming them. */
  /* `stream` was synchronized and is going away: every resource forgets it (src/memory). */
  void (*stream_retired)(devrt_runtime* rt, devrt_stream stream);
  /* A pool stream for stream 0 and devrt_stream_acquire: the active layout's (src/partition). */
  devrt_status (*acquire)(devrt_runtime* rt, devrt_acquire_mode mode, devrt_stream* out,
                          const char* call);

  /* the slots whose newest mark was recorded and not yet seen complete by dv_events_poll
   * (marks.c): added by a record, taken by the poll (atomic, lines of its own) */
  _Alignas(DV_LINE) dv_slotset polls;
  /* The runtimes this one has peer access with (src/multi): launches on this one may name their
   * blocks, submissions their semaphores. Written under src/multi's lock (a disabled entry goes
   * NULL, npeers never shrinks), read without one where a handle is not this runtime's. */
  _Atomic unsigned npeers;
  _Atomic(devrt_runtime*) peers[DV_MAX_PEERS];
  devrt_runtime* live_next; /* the list of live runtimes an import searches (streams.c) */
};

/* rt is a live runtime (not NULL, not destroyed). */
static inline bool dv_rt_ok(devrt_runtime* rt) {
  return rt && atomic_load_explicit(&rt->magic, memory_order_relaxed) == DV_RT_MAGIC;
}

#define DV_RT_CHECK(rt, call)                                                                 \
  do {                                                                                        \
    dv_error_clear(); /* a public call's entry: see error.h */                                \
    if (DV_UNLIKELY(!dv_rt_ok(rt)))                                                           \
      return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: runtime %p is NULL or destroyed", call, \
                     (void*)(rt));                                                            \
  } while (0)

/* Whether rt and other have peer access (a snapshot; rt == other is not a link). Lock-free. */
static inline bool dv_peer_linked(devrt_runtime* rt, devrt_runtime* other) {
  /* acquire, both: pair with peer.c's link_add releases (npeers after the entry; the entry after
   * the dv_peer_slots add that gives wait lists room for the pair's marks) */
  unsigned n = atomic_load_explicit(&rt->npeers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++)
    if (atomic_load_explicit(&rt->peers[i], memory_order_acquire) == other) return true;
  return false;
}

/* Stream slots held by every runtime that has peer access with another: a wait list has room for
 * their marks too (src/block). Added to and taken from by src/multi. */
extern _Atomic unsigned dv_peer_slots;

devrt_status dv_stream_refused(devrt_runtime* rt, devrt_stream id, const char* call);
devrt_status dv_capture_refused(devrt_runtime* rt, devrt_stream id, const char* call);
/* A token of the calling thread (the address of a thread-local byte of streams.c). */
extern _Thread_local char dv_thread_me;
/* The calling thread's captures, newest first (linked by next; src/launch/graph.c keeps it). */
extern _Thread_local dv_capture* dv_thread_captures;

/* id is a live lease of rt (no message when not). */
static inline bool dv_stream_held(devrt_runtime* rt, devrt_stream id) {
  return atomic_load_explicit(&rt->slots[DV_SID_SLOT(id)].id, memory_order_acquire) == id && id;
}
/* The backend stream of a held id, or INVALID_ARGUMENT for 0, foreign, released or made-up ids.
 * Lock-free: one acquire load. The table has a slot for every id, and a slot's id carries the
 * runtime's serial, so one compare refuses all of them but 0 (a free slot's id). */
static inline devrt_status dv_stream_get(devrt_runtime* rt, devrt_stream id, dv_stream** out,
                                         const char* call) {
  if (DV_UNLIKELY(!dv_stream_held(rt, id))) return dv_stream_refused(rt, id, call);
  dv_slot* sl = &rt->slots[DV_SID_SLOT(id)];
  /* relaxed: a capture's begin and end come from one thread, whose calls see its own stores;
   * another thread's call racing with them is unordered with the capture anyway */
  if (DV_UNLIKELY(atomic_load_explicit(&sl->cap_owner, memory_order_relaxed)))
    return dv_capture_refused(rt, id, call);
  *out = sl->s;
  return DEVRT_OK;
}
/* Where slot sl's stream runs, for a stream made to stand in for it (a capture's): its pool's
 * green context (NULL: the primary context) and priority. A pool's are set before its slots are
 * leased and never change. */
static inline dv_green* dv_slot_green(const dv_slot* sl) {
  return sl->pool ? sl->pool->green : NULL;
}
static inline int dv_slot_priority(const devrt_runtime* rt, const dv_slot* sl) {
  return sl->pool ? sl->pool->priority : rt->cfg.stream_priority;
}
/* Claims slot sl for the calling thread's capture: false if a thread (this one too) holds it.
 * acquire: pairs with dv_capture_unclaim's release, so the new owner sees the slot's capture
 * fields as the last one left them. */
static inline bool dv_capture_claim(dv_slot* sl) {
  uintptr_t none = 0;
  return atomic_compare_exchange_strong_explicit(&sl->cap_owner, &none, (uintptr_t)&dv_thread_me,
                                                 memory_order_acquire, memory_order_relaxed);
}
static inline void dv_capture_unclaim(dv_slot* sl) {
  atomic_store_explicit(&sl->cap_owner, 0, memory_order_release);
}
/* Whether the calling thread captures slot sl. Relaxed: only this thread stores its own token
 * there, and another thread's store only tells it that it does not. */
static inline bool dv_capture_mine(dv_slot* sl) {
  return atomic_load_explicit(&sl->cap_owner, memory_order_relaxed) == (uintptr_t)&dv_thread_me;
}
/* dv_stream_get for the calls a capture records (launches, foreign work, copies): on the
 * capturing thread, *cap is the slot's capture and *out its own stream; NULL and the slot's
 * stream when the slot does not capture. */
static inline devrt_status dv_stream_or_capture(devrt_runtime* rt, devrt_stream id, dv_stream** out,
                                                dv_capture** cap, const char* call) {
  if (DV_UNLIKELY(!dv_stream_held(rt, id))) return dv_stream_refused(rt, id, call);
  dv_slot* sl = &rt->slots[DV_SID_SLOT(id)];
  uintptr_t owner = atomic_load_explicit(&sl->cap_owner, memory_order_relaxed); /* as above */
  *cap = NULL;
  if (DV_LIKELY(!owner)) {
    *out = sl->s;
    return DEVRT_OK;
  }
  if (owner != (uintptr_t)&dv_thread_me) return dv_capture_refused(rt, id, call);
  *cap = sl->cap;
  *out = sl->cap_ps;
  sl->cap_last++; /* a recorded call on this slot (joined streams must be joined back after it) */
  return DEVRT_OK;
}

/* The backend stream of slot i, whoever leases it now (NULL: never created), for a layer that
 * keeps work per slot past a lease (the async leaf's pending frees: their stream lives on in the
 * slot until the runtime goes, or until retirement tells the layer it is going). */
static inline dv_stream* dv_slot_stream(devrt_runtime* rt, unsigned i) {
  DV_ASSERT(i < rt->nslots);
  return rt->slots[i].s;
}

/* The runtime's own stream (the slot past the pool), created on first call; never released. */
devrt_status dv_internal_stream(devrt_runtime* rt, devrt_stream* out);

/* Stream pool lifecycle (streams.c). Init puts the runtime on the list an import searches for
 * the owner of the stream it wraps; fini takes it off and drops its imports' holds on their
 * owners. */
devrt_status dv_stream_pool_init(devrt_runtime* rt);
void dv_stream_pool_fini(devrt_runtime* rt);
/* INVALID_STATE while another runtime holds an import of one of rt's streams (of `pool`'s slots,
 * or with pool NULL of any slot); else OK, and with pool NULL rt leaves the list (a destroy that
 * fails later puts it back with dv_streams_reopen). */
devrt_status dv_streams_check_unexported(devrt_runtime* rt, const dv_pool* pool, const char* call);
void dv_streams_reopen(devrt_runtime* rt);
/* A partition's pool: n spare slots, each with a stream on `green` created now. */
devrt_status dv_pool_create(devrt_runtime* rt, unsigned n, dv_green* green, int priority,
                            struct devrt_partition* part, dv_pool* out);
/* Destroys its streams (each synchronized, then retired: rt->stream_retired) and gives its slots
 * back; none may be held (the caller checked). */
void dv_pool_destroy(devrt_runtime* rt, dv_pool* p);
devrt_status dv_pool_acquire(devrt_runtime* rt, dv_pool* p, devrt_acquire_mode mode,
                             devrt_stream* out, const char* call);
/* Destroys the events users left behind (event.c). */
void dv_events_fini(devrt_runtime* rt);

#endif
