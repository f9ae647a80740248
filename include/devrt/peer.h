/* devrt/peer.h: several devices working together: peer access between two runtimes, and what it
 * lets work on one runtime do with the other's blocks and semaphores.
 *
 * Peer access is between two runtimes (devrt_peer_enable), both ways, on one backend. Once it is
 * enabled:
 * - a launch on either runtime (devrt_launch, a DEVRT_WORK_LAUNCH submission, devrt_block_copy, a
 *   collective of collective.h) may name the other's blocks in its use list beside its own: the
 *   handle says whose block it is. Their uses are tracked as one runtime's are: the launch waits
 *   for the block's last writer (and, to write, its readers) whatever device they ran on (a CUDA
 *   event of one device can be waited on by another device's stream: no host round trip), and the
 *   block's record keeps where the launch ends, so the owner's later work and the owner's
 *   deferred free (devrt_block_free, on the owner's runtime) wait for it. A freed handle is
 *   refused (STALE_BLOCK) by every runtime. Other block calls (devrt_block_ptr, _info_get, _free,
 *   devrt_prepare_block_use, devrt_finish_block_use) take the block's own runtime: a peer's handle
 *   is refused there with STALE_BLOCK naming its owner.
 * - a submission on either runtime may wait on and signal the other's semaphores: the wait is a
 *   device wait on the other device's event, issued as soon as the signal is scheduled (no host
 *   hop, in either submit order), and failures propagate with their root cause; a device lost
 *   fails the semaphores its work was to signal on the other runtime too.
 * On the cuda backend enabling makes each device's context able to reach the other's memory
 * (cuCtxEnablePeerAccess) and each device's stream-ordered pool accessible to the other
 * (cuMemPoolSetAccess); two runtimes of one device need neither. On the host backend every host
 * device reaches every other (one address space). */
#ifndef DEVRT_PEER_H
#define DEVRT_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include "devrt/block.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct devrt_peer_info {
  bool same_device;     /* both runtimes drive one device (one ordinal) */
  bool can_access;      /* each device's work can reach the other's memory (cuda:
                         * cuDeviceCanAccessPeer both ways; host: always) */
  bool enabled;         /* devrt_peer_enable holds for the pair */
  bool native_atomics;  /* CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED both ways */
  int performance_rank; /* CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK (a relative rank: lower is
                         * a faster link); -1 where the driver does not say (host, one device) */
  char link[48];        /* "peer-to-peer", "same device", "host memory" or "none" */
} devrt_peer_info;

/* How many devices rt's backend has: ordinals 0..*out-1 can have runtimes to be peers (host: the
 * configured host_devices). Thread-safe. */
devrt_status devrt_peer_count(devrt_runtime* rt, int* out);

/* What the driver says of the pair a, b (a != b, both live, one backend), and whether peer access
 * is enabled between them. Creates nothing. Thread-safe. */
devrt_status devrt_peer_query(devrt_runtime* a, devrt_runtime* b, devrt_peer_info* out);

/* Enables peer access between a and b, both ways (see above); enabling it again is OK and does
 * nothing. INVALID_ARGUMENT: a or b NULL or destroyed, a == b, different backends.
 * UNSUPPORTED, naming the devices and which way failed, where the driver cannot reach one device
 * from the other (and nothing is enabled). OUT_OF_RESOURCES past 64 peers of one runtime.
 * Thread-safe. */
devrt_status devrt_peer_enable(devrt_runtime* a, devrt_runtime* b);

/* Ends peer access between a and b: synchronizes both runtimes' streams, then each forgets the
 * other's uses of its blocks and the other's signals of its semaphores (all complete by then)
 * and the driver's access is disabled. devrt_runtime_destroy refuses a runtime while it has peer
 * access with another. INVALID_STATE, changing nothing, if a submission of one is parked on a
 * semaphore of the other; INVALID_ARGUMENT if access is not enabled. Not thread-safe with any
 * other call on a or b, nor with work of one still to be released by the other's semaphores. */
devrt_status devrt_peer_disable(devrt_runtime* a, devrt_runtime* b);

/* A tracked copy of `bytes` bytes on `stream` (rt's) from src at src_offset to dst at dst_offset:
 * either block may be rt's or a peer's (a peer-to-peer copy, cuMemcpyPeerAsync, between two
 * devices). A recorded launch: it waits for what a read of src and a write of dst must respect,
 * and both blocks' records keep it. INVALID_ARGUMENT: bytes 0, a range past its block's end,
 * overlapping ranges of one block; STALE_BLOCK as a launch. Thread-safe. */
devrt_status devrt_block_copy(devrt_runtime* rt, devrt_stream stream, devrt_block dst,
                              size_t dst_offset, devrt_block src, size_t src_offset, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
