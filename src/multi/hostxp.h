/* hostxp.h (internal): the host backend's transport between ranks in separate processes of one
 * machine (hostxp.c): a group joined by id, exchanges where every rank publishes one part and
 * reads every rank's, and eager point-to-point messages. */
#ifndef DEVRT_MULTI_HOSTXP_H
#define DEVRT_MULTI_HOSTXP_H

#include <stddef.h>
#include <stdint.h>
#include "../core/error.h"

typedef struct dv_xp dv_xp;

/* A rank's mapped view of another's part (data, len), until dv_xp_release. */
typedef struct dv_xp_view {
  void* map;
  size_t size;
  const void* data;
  size_t len;
  char name[96];
} dv_xp_view;

/* Joins the group the id's bytes name as `rank` of `nranks`, waiting for every rank. */
devrt_status dv_xp_join(const void* id, size_t idlen, int nranks, int rank, dv_xp** out);
void dv_xp_leave(dv_xp* x);

/* Exchange `seq` (1, 2, ...: each once per group, on every rank): publishes this rank's part, the
 * hlen bytes of h then the len bytes of p, and waits for every rank's, mapped into v[0..nranks).
 * Blocks until every rank has published. */
devrt_status dv_xp_exchange(dv_xp* x, uint64_t seq, const void* h, size_t hlen, const void* p,
                            size_t len, dv_xp_view* v);
/* Done reading v[0..nranks) (the last reader of a part removes it). */
void dv_xp_release(dv_xp* x, dv_xp_view* v);

/* The seq-th message from this rank to `peer` (eager: returns once it is written), and the
 * seq-th from `peer` to this rank (waits for it; copies at most len bytes). */
devrt_status dv_xp_send(dv_xp* x, int peer, uint64_t seq, const void* p, size_t len);
devrt_status dv_xp_recv(dv_xp* x, int peer, uint64_t seq, void* p, size_t len);

#endif
