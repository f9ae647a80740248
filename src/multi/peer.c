/* peer.c: peer access between two runtimes (devrt/peer.h): the links each runtime keeps
 * (rt.h's peers, read without a lock where a handle is not the runtime's own), the driver's
 * side through the backend, ending a link, and the tracked copy between two runtimes' blocks. */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include "../launch/launch.h"
#include "../sync/sync.h"
#include "multi.h"

/* DV_ARG_CHECK for a call named at run time: INVALID_ARGUMENT, "<call>: <what>". */
#define CALL_CHECK(cond, call, fmt, ...) \
  if (!(cond)) return dv_fail(DEVRT_ERR_INVALID_ARGUMENT, "%s: " fmt, call, ##__VA_ARGS__)

/* Serializes enabling and disabling links (the readers take no lock). */
static pthread_mutex_t link_mu = PTHREAD_MUTEX_INITIALIZER;

static devrt_status pair_check(devrt_runtime* a, devrt_runtime* b, const char* call) {
  dv_error_clear(); /* a public call's entry: see error.h */
  CALL_CHECK(dv_rt_ok(a) && dv_rt_ok(b), call, "runtime %p or %p is NULL or destroyed", (void*)a,
             (void*)b);
  CALL_CHECK(a != b, call, "the two runtimes are one (%p)", (void*)a);
  CALL_CHECK(a->be == b->be, call, "runtime of ordinal %d is on the %s backend, %d on %s",
             a->cfg.ordinal, a->be->name, b->cfg.ordinal, b->be->name);
  return DEVRT_OK;
}

devrt_status devrt_peer_count(devrt_runtime* rt, int* out) {
  DV_RT_CHECK(rt, "devrt_peer_count");
  DV_ARG_CHECK(out, "devrt_peer_count", "out is NULL");
  if (dv_is_host(rt->be)) {
    *out = (int)rt->cfg.host_devices;
    return DEVRT_OK;
  }
  return rt->be->device_count(out);
}

devrt_status devrt_peer_query(devrt_runtime* a, devrt_runtime* b, devrt_peer_info* out) {
  DV_CHECK(pair_check(a, b, "devrt_peer_query"));
  DV_ARG_CHECK(out, "devrt_peer_query", "out is NULL");
  DV_CHECK(a->be->peer_query(a->dev, b->dev, out));
  out->enabled = dv_peer_linked(a, b);
  return DEVRT_OK;
}

/* The links are written only under link_mu: loads under it are relaxed. */
static unsigned npeers_of(devrt_runtime* a) {
  return atomic_load_explicit(&a->npeers, memory_order_relaxed);
}
static devrt_runtime* peer_at(devrt_runtime* a, unsigned i) {
  return atomic_load_explicit(&a->peers[i], memory_order_relaxed);
}

/* Adds b to a's links (link_mu held): a disabled entry first, else a new one. The releases pair
 * with dv_peer_linked's acquires. */
static void link_add(devrt_runtime* a, devrt_runtime* b) {
  unsigned n = npeers_of(a), i = 0;
  while (i < n && peer_at(a, i)) i++;
  DV_ASSERT(i < DV_MAX_PEERS); /* devrt_peer_enable refused a runtime with DV_MAX_PEERS links */
  atomic_store_explicit(&a->peers[i], b, memory_order_release);
  if (i == n) atomic_store_explicit(&a->npeers, n + 1, memory_order_release);
}

static void link_remove(devrt_runtime* a, devrt_runtime* b) {
  unsigned n = npeers_of(a);
  for (unsigned i = 0; i < n; i++)
    if (peer_at(a, i) == b)
      atomic_store_explicit(&a->peers[i], NULL, memory_order_relaxed); /* publishes nothing */
}

/* How many links a has (link_mu held). */
static unsigned links(devrt_runtime* a) {
  unsigned n = npeers_of(a), k = 0;
  for (unsigned i = 0; i < n; i++) k += peer_at(a, i) != NULL;
  return k;
}

devrt_status devrt_peer_enable(devrt_runtime* a, devrt_runtime* b) {
  DV_CHECK(pair_check(a, b, "devrt_peer_enable"));
  devrt_status st = DEVRT_OK;
  pthread_mutex_lock(&link_mu);
  if (dv_peer_linked(a, b)) goto out;
  if (links(a) == DV_MAX_PEERS || links(b) == DV_MAX_PEERS) {
    st = dv_fail(DEVRT_ERR_OUT_OF_RESOURCES,
                 "devrt_peer_enable: a runtime has peer access with at most %d others",
                 DV_MAX_PEERS);
    goto out;
  }
  if ((st = a->be->peer_enable(a->dev, b->dev)) == DEVRT_OK &&
      (st = a->be->peer_enable(b->dev, a->dev)) != DEVRT_OK)
    a->be->peer_disable(a->dev, b->dev);
  if (st != DEVRT_OK) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s", devrt_last_error());
    st = dv_fail(st, "devrt_peer_enable(ordinal %d, ordinal %d): %s", a->cfg.ordinal,
                 b->cfg.ordinal, msg);
    goto out;
  }
  /* Wait lists gain room for the pair's slots before any of their marks can cross (block.h). */
  /* relaxed: link_add's release stores below order it before the link can be seen */
  atomic_fetch_add_explicit(&dv_peer_slots, a->nslots + b->nslots, memory_order_relaxed);
  link_add(a, b);
  link_add(b, a);
out:
  pthread_mutex_unlock(&link_mu);
  return st;
}

/* Every stream of rt synchronized, and every mark of its slots known complete. */
static devrt_status quiesce(devrt_runtime* rt) {
  devrt_status st = DEVRT_OK;
  for (unsigned i = 0; i < rt->nslots; i++) {
    pthread_mutex_lock(&rt->pool_mu);
    dv_stream* s = dv_slot_stream(rt, i);
    pthread_mutex_unlock(&rt->pool_mu);
    if (!s) continue;
    uint64_t seq = dv_events_sync_begin(rt, i);
    DV_ALSO(st, rt->be->stream_sync(s));
    dv_events_sync_end(rt, i, seq);
  }
  return st;
}

devrt_status devrt_peer_disable(devrt_runtime* a, devrt_runtime* b) {
  DV_CHECK(pair_check(a, b, "devrt_peer_disable"));
  pthread_mutex_lock(&link_mu);
  devrt_status st = DEVRT_OK;
  if (!dv_peer_linked(a, b)) {
    st = dv_fail(DEVRT_ERR_INVALID_ARGUMENT,
                 "devrt_peer_disable: ordinals %d and %d have no peer access to end",
                 a->cfg.ordinal, b->cfg.ordinal);
    goto out;
  }
  /* No release is issued meanwhile (the issue mutexes, in address order: sync.h, dv_queue.issue).
   */
  devrt_runtime *lo = a < b ? a : b, *hi = a < b ? b : a;
  pthread_mutex_lock(&lo->q->issue);
  pthread_mutex_lock(&hi->q->issue);
  if (dv_sems_parked_from(a, b) || dv_sems_parked_from(b, a)) {
    st = dv_fail(DEVRT_ERR_INVALID_STATE,
                 "devrt_peer_disable: a submission of one of ordinals %d and %d is parked on a "
                 "semaphore of the other: signal or fail what it waits for first",
                 a->cfg.ordinal, b->cfg.ordinal);
  } else if ((st = quiesce(a)) == DEVRT_OK && (st = quiesce(b)) == DEVRT_OK) {
    /* (a failed synchronize ends nothing: the link stays, and disabling may be tried again) */
    link_remove(a, b);
    link_remove(b, a);
    dv_blocks_forget(a, b);
    dv_blocks_forget(b, a);
    dv_sems_forget(a, b);
    dv_sems_forget(b, a);
  }
  pthread_mutex_unlock(&hi->q->issue);
  pthread_mutex_unlock(&lo->q->issue);
  if (dv_peer_linked(a, b)) goto out; /* refused */
  dv_completion_pass(a);              /* what the completion threads held of the other is let go */
  dv_completion_pass(b);
  a->be->peer_disable(a->dev, b->dev);
  a->be->peer_disable(b->dev, a->dev);
  atomic_fetch_sub_explicit(&dv_peer_slots, a->nslots + b->nslots, memory_order_relaxed);
out:
  pthread_mutex_unlock(&link_mu);
  return st;
}

devrt_status dv_peers_check_none(devrt_runtime* rt, const char* call) {
  pthread_mutex_lock(&link_mu);
  unsigned n = links(rt);
  int first = -1;
  for (unsigned i = 0; first < 0 && i < npeers_of(rt); i++) {
    devrt_runtime* p = peer_at(rt, i);
    if (p) first = p->cfg.ordinal;
  }
  pthread_mutex_unlock(&link_mu);
  if (!n) return DEVRT_OK;
  return dv_fail(DEVRT_ERR_INVALID_STATE,
                 "%s: the runtime has peer access with %u other runtime(s) (one of ordinal %d): "
                 "devrt_peer_disable first",
                 call, n, first);
}

/* ---- the tracked copy ---- */

typedef struct copy_job {
  devrt_runtime *rt, *downer, *sowner;
  void* dst;
  const void* src;
  size_t bytes;
} copy_job;

static devrt_status copy_enqueue(void* user, devrt_stream stream, void* native) {
  copy_job* j = user;
  (void)native;
  dv_stream* s = NULL;
  DV_CHECK(dv_stream_get(j->rt, stream, &s, "devrt_block_copy"));
  return j->rt->be->memcpy_peer(s, j->dst, j->downer->dev, j->src, j->sowner->dev, j->bytes);
}

devrt_status devrt_block_copy(devrt_runtime* rt, devrt_stream stream, devrt_block dst,
                              size_t dst_offset, devrt_block src, size_t src_offset, size_t bytes) {
  DV_RT_CHECK(rt, "devrt_block_copy");
  DV_ARG_CHECK(bytes, "devrt_block_copy", "bytes is 0");
  DV_ARG_CHECK(stream, "devrt_block_copy", "stream 0 is not a stream");
  copy_job j = {.rt = rt, .bytes = bytes};
  void *dp, *sp;
  size_t dsize, ssize;
  DV_CHECK(dv_block_find(rt, dst, "devrt_block_copy", &j.downer, &dp, &dsize));
  DV_CHECK(dv_block_find(rt, src, "devrt_block_copy", &j.sowner, &sp, &ssize));
  DV_ARG_CHECK(dst_offset <= dsize && bytes <= dsize - dst_offset, "devrt_block_copy",
               "%zu bytes at offset %zu pass the end of dst (%zu bytes)", bytes, dst_offset, dsize);
  DV_ARG_CHECK(src_offset <= ssize && bytes <= ssize - src_offset, "devrt_block_copy",
               "%zu bytes at offset %zu pass the end of src (%zu bytes)", bytes, src_offset, ssize);
  DV_ARG_CHECK(dst != src || dst_offset >= src_offset + bytes || src_offset >= dst_offset + bytes,
               "devrt_block_copy", "the ranges overlap in block %#" PRIx64, dst);
  j.dst = (char*)dp + dst_offset, j.src = (const char*)sp + src_offset;
  devrt_block_use u[2] = {{src, DEVRT_ACCESS_READ}, {dst, DEVRT_ACCESS_WRITE}};
  devrt_launch_desc d = {
      .stream = stream, .enqueue = copy_enqueue, .user = &j, .uses = u, .nuses = 2};
  return devrt_launch(rt, &d);
}
