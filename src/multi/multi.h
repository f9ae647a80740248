/* multi.h (internal): several devices: the peer links between runtimes (peer.c) that let work on
 * one runtime use another's blocks and semaphores, what the other layers do when a link ends,
 * and NCCL loaded at run time (nccl.c) under the collectives (collective.c). */
#ifndef DEVRT_MULTI_H
#define DEVRT_MULTI_H

#include "../core/runtime.h"

/* Whether rt and other have peer access (a snapshot; rt == other is not a link). Lock-free. */
bool dv_peer_linked(devrt_runtime* rt, devrt_runtime* other);

/* When a link ends (devrt_peer_disable, both runtimes synchronized and quiet): rt's blocks drop
 * other's uses (block.c), rt's semaphores complete other's signals (semaphore.c), and the
 * completion thread lets go of what it held (completion.c). */
void dv_blocks_forget(devrt_runtime* rt, devrt_runtime* other);
bool dv_sems_parked_from(devrt_runtime* rt, devrt_runtime* other);
void dv_sems_forget(devrt_runtime* rt, devrt_runtime* other);
void dv_completion_pass(devrt_runtime* rt);
/* INVALID_STATE (naming `call`) while rt has peer access with another runtime. */
devrt_status dv_peers_check_none(devrt_runtime* rt, const char* call);

/* The runtime whose block h is (rt's, or a peer's), with its address and size; STALE_BLOCK (as
 * rt's own lookup says) when neither holds it live. */
devrt_status dv_block_find(devrt_runtime* rt, devrt_block h, const char* call,
                           devrt_runtime** owner, void** ptr, size_t* size);

#endif
